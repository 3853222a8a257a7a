/*
 * The runtime of one config generation (lk_runtime.h): built from a loaded
 * config with its TLS contexts (lk_tls.c), broker health and round-robin
 * cursors, learned nodes (lk_dyn.c) and metrics series (lk_stats.c), and
 * freed when its last reference goes.
 */
#include <stdlib.h>
#include <string.h>

#include "lk_dyn.h"
#include "lk_pool.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_tls.h"

/* The TLS contexts as rt holds them. */
static void
tls_of(const struct lk_runtime *rt, struct lk_tls_ctxs *t)
{
    t->server_ctx = rt->server_ctx;
    t->nserver_ctx = rt->nserver_ctx;
    t->client_ctx = rt->client_ctx;
    t->tickets = rt->tickets;
    t->auths = rt->auths;
}

struct lk_runtime *
lk_runtime_new(struct lk_conf *conf, char *err, size_t errlen)
{
    struct lk_runtime *rt = lk_xcalloc(1, sizeof(*rt));
    struct lk_tls_ctxs t;
    int rc;

    rt->conf = lk_conf_ref(conf);
    rt->refs = 1;
    rt->generation = 1;
    rt->health = lk_xcalloc(conf->nbrokers + 1, sizeof(*rt->health));
    rt->rr = lk_xcalloc(conf->nclusters + 1, sizeof(*rt->rr));
    rt->dyn = lk_dyn_new();
    rt->stats = lk_stats_runtime(conf);
    rc = lk_tls_ctxs_new(&t, conf, err, errlen);
    rt->server_ctx = t.server_ctx; /* what was built, even on failure: freed below */
    rt->nserver_ctx = t.nserver_ctx;
    rt->client_ctx = t.client_ctx;
    rt->tickets = t.tickets;
    rt->auths = t.auths;
    if (rc != 0) {
        lk_runtime_free(rt);
        return NULL;
    }
    return rt;
}

struct lk_runtime *
lk_runtime_ref(struct lk_runtime *rt)
{
    __atomic_add_fetch(&rt->refs, 1, __ATOMIC_RELAXED);
    return rt;
}

void
lk_runtime_unref(struct lk_runtime *rt)
{
    /* Release: what one thread did with rt happens before another frees it. */
    if (rt != NULL && __atomic_sub_fetch(&rt->refs, 1, __ATOMIC_ACQ_REL) == 0)
        lk_runtime_free(rt);
}

void
lk_runtime_free(struct lk_runtime *rt)
{
    struct lk_tls_ctxs t;

    if (rt == NULL)
        return;
    tls_of(rt, &t);
    lk_tls_ctxs_free(&t);
    free(rt->health);
    free(rt->rr);
    lk_dyn_free(rt->dyn);
    lk_stats_runtime_free(rt->stats, rt->conf);
    lk_conf_unref(rt->conf);
    free(rt);
}
