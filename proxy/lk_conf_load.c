/*
 * The config loader: reads conf/lookout.conf (our own INI dialect, see
 * CONTRACT.md section 2) into an immutable struct lk_conf.  It runs in
 * passes, each in its own file: the reader (lk_conf_ini.c) turns text into
 * sections of key = value entries; the sections' loaders (lk_conf_keys.c,
 * lk_conf_brokers.c) turn [lookout], [pulsar NAME], [kafka NAME] and [broker
 * CLUSTER/ID] sections into settings, clusters and brokers with their
 * listeners, and adds the brokers the clusters' stores registered.  What
 * follows needs the filters and is lk_conf_ready.c's: each cluster's
 * filter chain is built, and its filters take their own keys; any entry
 * nobody took is an unknown key; and last the binding rule (lk_conf_bind.c)
 * turns every lookup-listener and service address into a virtual host on a
 * socket to bind.  Every error names its file and line and stops the load;
 * nothing here prints.  This file holds the order of the passes before the
 * filters, and the config's life: read, ref, free.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lk_conf.h"
#include "lk_conf_brokers.h"
#include "lk_conf_ini.h"
#include "lk_conf_cluster.h"
#include "lk_conf_keys.h"
#include "lk_conf_load.h"
#include "lk_conf_lookout.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_registry.h"

/* The largest file a config may be: far above any real cluster's. */
#define LK_CONF_MAX_BYTES (4u * 1024 * 1024)

const struct lk_conf_key *const lk_conf_tables[] = {
    lk_conf_lookout_keys,
    lk_conf_cluster_keys,
    lk_conf_broker_keys,
    NULL,
};

static void
conf_free(struct lk_conf *c)
{
    size_t i, j;

    for (i = 0; i < c->nclusters; i++) {
        struct lk_cluster *cl = c->clusters[i];
        /* set by whoever built the chain (lk_conf_ready.c) */
        if (cl->filters_free != NULL)
            cl->filters_free(cl);
        free(cl->name);
        free(cl->internal_listener);
        free(cl->lookup_listener);
        free(cl->client_ca);
        free(cl->limit_exempt);
        for (j = 0; j < cl->nclient_listeners; j++)
            free(cl->client_listeners[j]);
        free(cl->client_listeners);
        lk_url_free(cl->web_service);
        free(cl->web_service);
        lk_url_free(cl->service);
        free(cl->service);
        lk_kafka_secmap_free(cl->secmap, cl->nsecmap);
        for (j = 0; j < cl->nbootstrap; j++)
            lk_url_free(&cl->bootstrap[j]);
        free(cl->bootstrap);
        lk_kafka_pattern_free(cl->pattern);
        free(cl->pattern);
        free(cl->bind);
        free(cl->health.path);
        free(cl->internal_networks);
        lk_zk_connect_free(cl->zk);
        free(cl->zk);
        for (j = 0; j < cl->nrejects; j++) {
            free(cl->rejects[j].znode);
            free(cl->rejects[j].reason);
        }
        free(cl->rejects);
        free(cl->addr_ix);
        free(cl->brokers);
        free(cl);
    }
    free(c->clusters);
    for (i = 0; i < c->nbrokers; i++)
        lk_broker_free(c->brokers[i]);
    free(c->brokers);
    for (i = 0; i < c->nbinds; i++)
        lk_bind_free(c->binds[i]);
    free(c->binds);
    for (i = 0; i < c->ncerts; i++) {
        free(c->certs[i].cert_file);
        free(c->certs[i].key_file);
    }
    free(c->certs);
    for (i = 0; i < c->nticket_keys; i++)
        free(c->ticket_keys[i].file);
    free(c->ticket_keys);
    for (i = 0; i < c->nsections; i++) {
        struct lk_conf_section *s = &c->sections[i];
        for (j = 0; j < s->nentries; j++) {
            free(s->entries[j].key);
            free(s->entries[j].value);
        }
        free(s->entries);
        free(s->kind);
        free(s->name);
    }
    free(c->sections);
    for (i = 0; i < c->nwarnings; i++)
        free(c->warnings[i]);
    free(c->warnings);
    free(c->admin);
    free(c->admin_allow);
    free(c->proxy_protocol_trusted);
    free(c->limit_exempt);
    free(c->admin_healthz_allow);
    free(c->admin_token_file);
    if (c->admin_token != NULL)
        memset(c->admin_token, 0, c->admin_token_len); /* a secret: not left in freed memory */
    free(c->admin_token);
    free(c->log_access_file);
    free(c->upstream_ca);
    free(c->client_ca);
    free(c->client_crl);
    free(c->file);
    free(c->dir);
    free(c);
}

/* The absolute directory of the config file, without resolving symlinks
 * and without requiring the file to exist (lk_conf_load_buf). */
static char *
config_dir(const char *file)
{
    const char *slash = strrchr(file, '/');
    char cwd[PATH_MAX], *d, *r;

    if (slash == NULL)
        d = lk_xstrdup(".");
    else if (slash == file)
        d = lk_xstrdup("/");
    else
        d = lk_xstrndup(file, (size_t)(slash - file));
    if (d[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
        return d;
    if (strcmp(d, ".") == 0) {
        free(d);
        return lk_xstrdup(cwd);
    }
    r = lk_xmalloc(strlen(cwd) + 1 + strlen(d) + 1);
    sprintf(r, "%s/%s", cwd, strncmp(d, "./", 2) == 0 ? d + 2 : d);
    free(d);
    return r;
}

static int
build(struct lk_loader *ld, const char *text, size_t len)
{
    struct lk_conf *c = ld->conf;
    struct lk_conf_section *s;
    size_t i;

    if (lk_conf_read_ini(ld, text, len) != 0)
        return -1;

    if ((s = lk_conf_find_section(c, "lookout", NULL)) != NULL && lk_conf_load_lookout(ld, s) != 0)
        return -1;
    /* Clusters first: a broker may come before its cluster in the file. */
    for (i = 0; i < c->nsections; i++) {
        s = &c->sections[i];
        if ((strcmp(s->kind, "pulsar") == 0 || strcmp(s->kind, "kafka") == 0) &&
            lk_conf_load_cluster(ld, s) != 0)
            return -1;
    }
    for (i = 0; i < c->nsections; i++)
        if (strcmp(c->sections[i].kind, "broker") == 0 && lk_conf_load_broker(ld, &c->sections[i]) != 0)
            return -1;
    /* A cluster with a store may start empty: its brokers register. */
    for (i = 0; i < c->nclusters; i++)
        if (c->clusters[i]->nbrokers == 0 && c->clusters[i]->zk == NULL)
            return lk_conf_err(ld, c->clusters[i]->line, c->clusters[i]->section, NULL,
                          "the cluster has no brokers (add [broker %s/ID] sections, or read "
                          "them from ZooKeeper with %s)",
                          c->clusters[i]->name,
                          lk_cluster_is_kafka(c->clusters[i]) ? "zookeeper.connect" : "metadataStoreUrl");
    for (i = 0; i < c->nclusters; i++)
        if ((lk_cluster_is_kafka(c->clusters[i]) ? lk_conf_resolve_kafka(ld, c->clusters[i])
                                      : lk_conf_resolve_pulsar(ld, c->clusters[i])) != 0)
            return -1;
    for (i = 0; i < ld->nsets; i++) {
        struct lk_cluster *cl = lk_conf_find_cluster(c, ld->sets[i].cluster, strlen(ld->sets[i].cluster));
        /* A set of a cluster a reload removed, or whose store it dropped */
        if (cl != NULL && cl->zk != NULL)
            lk_conf_load_store(ld, cl, &ld->sets[i]);
    }

    return 0;
}

struct lk_conf *
lk_conf_parse(const char *name, const char *text, size_t len, const struct lk_live_set *sets,
              size_t nsets, char *err, size_t errlen)
{
    struct lk_conf *c = lk_xcalloc(1, sizeof(*c));
    struct lk_loader ld = {c, err, errlen, sets, nsets};

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (len > LK_CONF_MAX_BYTES) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: larger than %u bytes: is it a config file?", name,
                     LK_CONF_MAX_BYTES);
        free(c);
        return NULL;
    }
    c->file = lk_xstrdup(name);
    c->dir = config_dir(name);
    c->refs = 1;
    lk_conf_lookout_init(c);

    if (build(&ld, text, len) != 0) {
        conf_free(c);
        return NULL;
    }
    return c;
}

char *
lk_conf_read(const char *path, size_t *lenp, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (f == NULL)
        goto fail;
    /* Read whole, whatever the file is (a pipe from <(...) has no size). */
    do {
        if (cap - len < 65536) {
            cap = cap != 0 ? cap * 2 : 65536;
            buf = lk_xrealloc(buf, cap);
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n != 0 && len <= LK_CONF_MAX_BYTES);
    if (ferror(f))
        goto fail;
    fclose(f);
    *lenp = len;
    return buf;

fail:
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    if (f != NULL)
        fclose(f);
    free(buf);
    return NULL;
}

void
lk_conf_warnings_log(const struct lk_conf *conf)
{
    for (size_t i = 0; i < conf->nwarnings; i++)
        lk_log(LK_WARN, NULL, "%s", conf->warnings[i]);
}

struct lk_conf *
lk_conf_ref(struct lk_conf *conf)
{
    __atomic_add_fetch(&conf->refs, 1, __ATOMIC_RELAXED);
    return conf;
}

void
lk_conf_unref(struct lk_conf *conf)
{
    /* acq_rel: the last owner must see every other owner's reads finished
     * before it frees (the shared_ptr / kref pattern). */
    if (conf != NULL && __atomic_sub_fetch(&conf->refs, 1, __ATOMIC_ACQ_REL) == 0)
        conf_free(conf);
}

