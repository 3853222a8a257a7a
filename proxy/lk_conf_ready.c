/*
 * A config made ready to run (lk_conf_ready.h).  The loader (lk_conf_load.c
 * and its passes) knows no filter; this step, above both, gives each
 * filter its keys, builds the clusters' filter chains, and only then can
 * tell which entries nobody took, before the binds are planned (a typo
 * that hides a setting is named before the conflict it causes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_bind.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"
#include "lk_conf_load.h"
#include "lk_conf_ready.h"
#include "lk_filter.h"
#include "lk_pool.h"

/* lk_conf_tables, then each filter's keys: NULL-terminated, malloc'd. */
static const struct lk_conf_key **
all_tables(void)
{
    size_t n = 0, m = 0;
    const struct lk_conf_key **t;

    while (lk_conf_tables[n] != NULL)
        n++;
    while (lk_flt_registry[m] != NULL)
        m++;
    t = lk_xcalloc(n + m + 1, sizeof(*t));
    n = 0;
    for (size_t i = 0; lk_conf_tables[i] != NULL; i++)
        t[n++] = lk_conf_tables[i];
    for (size_t i = 0; lk_flt_registry[i] != NULL; i++)
        if (lk_flt_registry[i]->keys != NULL)
            t[n++] = lk_flt_registry[i]->keys;
    return t;
}

void
lk_conf_keys_print_all(FILE *out)
{
    const struct lk_conf_key **t = all_tables();

    lk_conf_keys_print(t, out);
    free(t);
}

/* Every filter of cl's protocol takes its keys, whether its chain has it
 * or not: a key is valid in its section either way. */
static int
filter_keys(struct lk_loader *ld, struct lk_cluster *cl)
{
    unsigned in = lk_cluster_is_kafka(cl) ? LK_IN_KAFKA : LK_IN_PULSAR;

    for (size_t i = 0; lk_flt_registry[i] != NULL; i++) {
        const struct lk_flt_ops *ops = lk_flt_registry[i];

        if (ops->keys == NULL || (ops->protos & cl->proto) == 0)
            continue;
        lk_conf_keys_init(ops->keys, in, cl);
        if (lk_conf_keys_load(ld, cl->section, ops->keys, in, cl) != 0)
            return -1;
    }
    return 0;
}

static int
chain(struct lk_loader *ld, struct lk_cluster *cl)
{
    struct lk_conf_entry *e = lk_conf_take(cl->section, "filters");
    char msg[512] = "";
    const char *m = msg;

    if (lk_flt_chain_new(cl, e != NULL ? e->value : NULL, msg, sizeof(msg)) != 0) {
        /* The prefix below names the key already. */
        if (strncmp(m, "filters: ", 9) == 0)
            m += 9;
        return lk_conf_err(ld, e != NULL ? e->line : cl->line, cl->section, "filters", "%s",
                           m[0] != '\0' ? m : "cannot build the filter chain");
    }
    cl->filters_free = lk_flt_chain_free;
    return 0;
}

int
lk_conf_ready(struct lk_conf *c, char *err, size_t errlen)
{
    struct lk_loader ld = {c, err, errlen, NULL, 0};
    const struct lk_conf_key **t;
    int rc;

    for (size_t i = 0; i < c->nclusters; i++)
        if (filter_keys(&ld, c->clusters[i]) != 0)
            return -1;
    /* Filters read their own keys from the cluster's section, so unknown
     * keys can only be told once every chain is built. */
    for (size_t i = 0; i < c->nclusters; i++)
        if (chain(&ld, c->clusters[i]) != 0)
            return -1;
    t = all_tables();
    rc = lk_conf_check_unknown(&ld, t);
    free(t);
    return rc != 0 ? -1 : lk_conf_build_binds(&ld);
}

struct lk_conf *
lk_conf_load_live(const char *name, const char *text, size_t len, const struct lk_live_set *sets,
                  size_t nsets, char *err, size_t errlen)
{
    struct lk_conf *c = lk_conf_parse(name, text, len, sets, nsets, err, errlen);

    if (c != NULL && lk_conf_ready(c, err, errlen) != 0) {
        lk_conf_unref(c);
        return NULL;
    }
    return c;
}

struct lk_conf *
lk_conf_load_buf(const char *name, const char *text, size_t len, char *err, size_t errlen)
{
    return lk_conf_load_live(name, text, len, NULL, 0, err, errlen);
}

struct lk_conf *
lk_conf_load(const char *path, char *err, size_t errlen)
{
    size_t len;
    char *buf = lk_conf_read(path, &len, err, errlen);
    struct lk_conf *c;

    if (buf == NULL)
        return NULL;
    c = lk_conf_load_buf(path, buf, len, err, errlen);
    free(buf);
    return c;
}
