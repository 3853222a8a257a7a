/*
 * The exchange record's way out: the counts of an ended exchange go to
 * the series of the runtime its connection is on, and its line, naming
 * the connection's client and bound address, to the access log.
 */
#include <stddef.h>

#include "lk_access.h"
#include "lk_conn.h"
#include "lk_filter.h"
#include "lk_runtime.h"
#include "lk_xchg.h"
#include "lk_xrec.h"

void
lk_xrec_init(void)
{
    for (int i = 0; lk_flt_registry[i] != NULL && i < LK_STAT_FILTERS; i++)
        lk_stat_filters[i] =
            (struct lk_stat_filter){lk_flt_registry[i]->name, lk_flt_registry[i]->protos};
}

void
lk_xrec_take(struct lk_xrec *r, const struct lk_xchg *x)
{
    r->rewrites += x->rewrites;
    r->leaks += x->leaks;
    r->unmapped += x->unmapped;
    if (x->rewrites == 0 || x->cluster == NULL)
        return;
    for (size_t i = 0; i < x->nflt; i++) {
        size_t k = x->cluster->filters[i].reg_index;
        if (x->flt[i].rewrites != 0 && k < LK_STAT_FILTERS)
            r->flt_rewrites[k] += (uint16_t)x->flt[i].rewrites;
    }
}

void
lk_xrec_done(const struct lk_xrec *r)
{
    if (!r->summary)
        lk_stats_count(r->c->rt->stats, r);
    if (lk_access_enabled()) {
        char peer[LK_ADDR_TEXT];
        const struct lk_access_who who = {lk_conn_peer_text(r->c, peer), r->c->bind->text,
                                          r->c->conf, lk_conn_cert_subject(r->c)};
        lk_access_write(r, &who);
    }
}
