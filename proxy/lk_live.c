/*
 * The live listener map (lk_live.h): one source per cluster with a store,
 * each keeping a copy of its last snapshot; every snapshot builds the map
 * again from the kept file text and all the copies, and installs it when
 * it differs from the one serving.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_live.h"
#include "lk_log.h"
#include "lk_meta.h"
#include "lk_pool.h"
#include "lk_registry.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_workers.h"
#include "lk_zk.h"

struct source {
    struct source *next;
    char *cluster, *connect, *path;
    unsigned timeout_ms;
    const struct lk_meta_ops *ops;
    void *src;
    int check_only; /* --check --live: keep snapshots, build nothing */
    int keep;       /* lk_live_follow's scratch */

    /* the last snapshot, copied, and what each registration means to the
     * map (meaning()), NULL when not worked out */
    struct lk_meta_node *nodes;
    char **means;
    size_t n;
    int synced; /* one snapshot at least */
    int dirty;  /* a rebuild is due for it */
    int behind; /* its last rebuild failed: the map serving lags its snapshot */

    /* the refusals of the last map built, "znode\n reason", so that each
     * is logged and counted once and not at every rebuild */
    char **refused;
    size_t nrefused;

    uint64_t updates[3]; /* what its snapshots did: UPD_* */
    uint64_t refused_total;
};

enum { UPD_INSTALLED = 0, UPD_UNCHANGED, UPD_FAILED };
static const char *const upd_names[] = {"installed", "unchanged", "failed"};

/* Rebuilds come at most this often: a burst of changes (brokers rolling
 * over) makes one generation, not one each. */
#define LK_LIVE_MIN_GAP_MS 100

static struct {
    struct event *rebuild_ev;
    long long last_build_ms;
    char *file, *text;
    size_t len;
    lk_live_install_fn install;
    struct source *sources;
} L;

/* Sources ---------------------------------------------------------------------------- */

static void
snap_clear(struct source *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free((char *)s->nodes[i].name);
        free((uint8_t *)s->nodes[i].data);
        if (s->means != NULL)
            free(s->means[i]);
    }
    free(s->nodes);
    free(s->means);
    s->nodes = NULL;
    s->means = NULL;
    s->n = 0;
}

static void
source_free(struct source *s)
{
    if (s->src != NULL)
        s->ops->stop(s->src);
    snap_clear(s);
    for (size_t i = 0; i < s->nrefused; i++)
        free(s->refused[i]);
    free(s->refused);
    free(s->cluster);
    free(s->connect);
    free(s->path);
    free(s);
}

static void schedule_rebuild(struct source *s);

/* What registration nd means to the map of cluster cl: its listeners as
 * parsed (names, addresses, which is internal and which lookup), or why it
 * is refused.  Pulsar brokers rewrite their registration with every load
 * report; a snapshot whose registrations all mean what they meant needs no
 * rebuild. */
static char *
meaning(const struct lk_cluster *cl, const struct lk_meta_node *nd)
{
    struct lk_registration r;
    char err[512], *buf = NULL;
    size_t len = 0;
    FILE *f;

    if (cl == NULL)
        return lk_xstrdup("");
    if (lk_registration_parse(cl, nd->name, (const char *)nd->data, nd->len, &r, err,
                              sizeof(err)) != 0) {
        size_t n = strlen(err) + 2;
        buf = lk_xmalloc(n);
        snprintf(buf, n, "!%s", err);
        return buf;
    }
    if ((f = open_memstream(&buf, &len)) == NULL) {
        lk_registration_free(&r);
        return lk_xstrdup("");
    }
    fprintf(f, "%zu %zu", r.internal, r.lookup);
    for (size_t i = 0; i < r.nlisteners; i++) {
        fprintf(f, "|%s %d", r.listeners[i].name, r.listeners[i].sasl);
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
            if (r.listeners[i].addr[sc] != NULL) /* Kafka's text has no scheme */
                fprintf(f, " %d=%s", sc, r.listeners[i].addr[sc]->text);
    }
    fclose(f);
    lk_registration_free(&r);
    return buf;
}

static void
on_snapshot(const struct lk_meta_node *nodes, size_t n, void *arg)
{
    struct source *s = arg;
    struct lk_meta_node *copy = lk_xcalloc(n + 1, sizeof(*copy));
    char **means = NULL;
    int same = s->synced && !s->behind && n == s->n && s->means != NULL;

    if (!s->check_only) {
        struct lk_runtime *rt = lk_workers_runtime();
        const struct lk_cluster *cl = rt != NULL ? lk_conf_cluster(rt->conf, s->cluster) : NULL;
        size_t j = 0;

        means = lk_xcalloc(n + 1, sizeof(*means));
        /* Both lists are sorted by name: a merge finds each node's last
         * copy, whose meaning holds while its bytes are the same. */
        for (size_t i = 0; i < n; i++) {
            int c = 1;
            while (j < s->n && (c = strcmp(s->nodes[j].name, nodes[i].name)) < 0)
                j++;
            if (c == 0 && s->means != NULL && s->means[j] != NULL &&
                s->nodes[j].len == nodes[i].len &&
                memcmp(s->nodes[j].data, nodes[i].data, nodes[i].len) == 0)
                means[i] = lk_xstrdup(s->means[j]);
            else
                means[i] = meaning(cl, &nodes[i]);
            if (c != 0 || s->means == NULL || s->means[j] == NULL ||
                strcmp(means[i], s->means[j]) != 0)
                same = 0;
        }
        lk_runtime_unref(rt);
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *d = lk_xmalloc(nodes[i].len + 1);
        memcpy(d, nodes[i].data, nodes[i].len);
        copy[i].name = lk_xstrdup(nodes[i].name);
        copy[i].data = d;
        copy[i].len = nodes[i].len;
    }
    snap_clear(s);
    s->nodes = copy;
    s->means = means;
    s->n = n;
    s->synced = 1;
    if (s->check_only)
        return;
    if (same) {
        s->updates[UPD_UNCHANGED]++;
        lk_log(LK_DEBUG, NULL, "cluster %s: zookeeper changed, the map did not", s->cluster);
        return;
    }
    schedule_rebuild(s);
}

static struct source *
source_start(struct event_base *base, const struct lk_cluster *cl, int check_only)
{
    struct source *s = lk_xcalloc(1, sizeof(*s));
    char err[512];

    s->cluster = lk_xstrdup(cl->name);
    s->connect = lk_xstrdup(cl->zk->connect);
    s->path = lk_xstrdup(cl->zk_path);
    s->timeout_ms = cl->zk_session_timeout_ms;
    s->ops = &lk_meta_zk;
    s->check_only = check_only;
    /* Unusable arguments only (checked at load): an unreachable store is
     * retried by the source. */
    struct lk_meta_opts opts = {(int)cl->zk_session_timeout_ms};
    s->src = s->ops->start(base, s->connect, s->path, &opts, on_snapshot, s, err, sizeof(err));
    if (s->src == NULL)
        lk_log(LK_ERR, NULL, "cluster %s: zookeeper %s: %s: the map is not followed", cl->name,
               s->connect, err);
    else
        lk_log(check_only ? LK_DEBUG : LK_INFO, NULL,
               "cluster %s: following the brokers registered at zookeeper %s %s", cl->name,
               s->connect, s->path);
    return s;
}

/* Building ---------------------------------------------------------------------------- */

/* One build: the config with the sets, and, for a map about to serve
 * (bindcheck), every socket it adds bound once for a test, so that an
 * address the machine does not have fails here, where the registration
 * that brought it can be left out, rather than at the swap. */
static struct lk_conf *
try_build(const char *file, const char *text, size_t len, const struct lk_live_set *sets,
          size_t n, int bindcheck, char *err, size_t errlen)
{
    struct lk_conf *conf = lk_conf_load_live(file, text, len, sets, n, err, errlen);

    if (conf != NULL && bindcheck && lk_workers_can_bind(conf, err, errlen) != 0) {
        lk_conf_unref(conf);
        return NULL;
    }
    return conf;
}

/* The fallback of lk_live_build_sets: the sets with their skip flags, the
 * map built so far, and the registrations refused on the way. */
struct fallback {
    const char *file, *text;
    size_t len;
    struct lk_live_set *sets;
    unsigned char **skips; /* the sets' skip flags, writable */
    size_t n;
    int bindcheck;
    struct lk_conf *conf;
    struct {
        size_t set, node;
        char *why;
    } *bad;
    size_t nbad;
};

/* Registrations are numbered across the sets, 0 to their total: the skip
 * flag of number k. */
static unsigned char *
skip_of(struct fallback *fb, size_t k, size_t *set, size_t *node)
{
    size_t i = 0;

    while (k >= fb->sets[i].n)
        k -= fb->sets[i++].n;
    *set = i;
    *node = k;
    return &fb->skips[i][k];
}

/* Adds registrations lo to hi (excluded) to fb's map: all at once when the
 * map still builds with them, else each half in turn, down to the ones
 * that break it, which are refused.  So c bad registrations among n cost
 * about 2c log2(n) builds, not n. */
static void
add_range(struct fallback *fb, size_t lo, size_t hi)
{
    char msg[1024];
    struct lk_conf *c;
    size_t set, node;

    if (lo >= hi)
        return;
    for (size_t k = lo; k < hi; k++)
        *skip_of(fb, k, &set, &node) = 0;
    c = try_build(fb->file, fb->text, fb->len, fb->sets, fb->n, fb->bindcheck, msg, sizeof(msg));
    if (c != NULL) {
        lk_conf_unref(fb->conf);
        fb->conf = c;
        return;
    }
    for (size_t k = lo; k < hi; k++)
        *skip_of(fb, k, &set, &node) = 1;
    if (hi - lo > 1) {
        add_range(fb, lo, lo + (hi - lo) / 2);
        add_range(fb, lo + (hi - lo) / 2, hi);
        return;
    }
    skip_of(fb, lo, &set, &node);
    fb->bad = lk_xrealloc(fb->bad, (fb->nbad + 1) * sizeof(*fb->bad));
    fb->bad[fb->nbad].set = set;
    fb->bad[fb->nbad].node = node;
    fb->bad[fb->nbad++].why = lk_xstrdup(msg);
}

struct lk_conf *
lk_live_build_sets(const char *file, const char *text, size_t len, struct lk_live_set *sets,
                   size_t n, int bindcheck, char *err, size_t errlen)
{
    struct fallback fb = {file, text, len, sets, NULL, n, bindcheck, NULL, NULL, 0};
    size_t nodes = 0;

    for (size_t i = 0; i < n; i++)
        nodes += sets[i].n;
    fb.conf = try_build(file, text, len, sets, n, bindcheck, err, errlen);
    if (fb.conf != NULL || nodes == 0)
        return fb.conf;
    /* Something the registrations bring breaks the map as a whole (a bind
     * conflict, an address that cannot be bound).  Without any of them,
     * the file's own error is the one to report; with the file fine, they
     * are added back by halves and those that break it are refused. */
    fb.skips = lk_xcalloc(n, sizeof(*fb.skips));
    for (size_t i = 0; i < n; i++) {
        fb.skips[i] = lk_xmalloc(sets[i].n + 1);
        memset(fb.skips[i], 1, sets[i].n + 1);
        sets[i].skip = fb.skips[i];
    }
    fb.conf = try_build(file, text, len, sets, n, bindcheck, err, errlen);
    if (fb.conf != NULL)
        add_range(&fb, 0, nodes);
    for (size_t k = 0; k < fb.nbad; k++) {
        struct lk_cluster *cl = lk_conf_cluster(fb.conf, sets[fb.bad[k].set].cluster);
        if (cl != NULL)
            lk_conf_reject_add(cl, sets[fb.bad[k].set].nodes[fb.bad[k].node].name, fb.bad[k].why);
        free(fb.bad[k].why);
    }
    free(fb.bad);
    for (size_t i = 0; i < n; i++) {
        free(fb.skips[i]);
        sets[i].skip = NULL;
    }
    free(fb.skips);
    return fb.conf;
}

static struct lk_conf *
build_from(struct source *list, const char *file, const char *text, size_t len, int bindcheck,
           char *err, size_t errlen)
{
    struct lk_live_set *sets = NULL;
    struct lk_conf *conf;
    size_t n = 0;

    for (struct source *s = list; s != NULL; s = s->next)
        if (s->synced) {
            sets = lk_xrealloc(sets, (n + 1) * sizeof(*sets));
            sets[n++] = (struct lk_live_set){s->cluster, s->nodes, s->n, NULL};
        }
    conf = lk_live_build_sets(file, text, len, sets, n, bindcheck, err, errlen);
    free(sets);
    return conf;
}

struct lk_conf *
lk_live_build(const char *file, const char *text, size_t len, char *err, size_t errlen)
{
    return build_from(L.sources, file, text, len, 1, err, errlen);
}

/* Logs and counts the refusals of conf's cluster that the last build did
 * not have, and keeps them for the next. */
static void
note_refused(struct source *s, const struct lk_conf *conf)
{
    const struct lk_cluster *cl = lk_conf_cluster(conf, s->cluster);
    size_t n = cl != NULL ? cl->nrejects : 0;
    char **now = lk_xcalloc(n + 1, sizeof(*now));

    for (size_t i = 0; i < n; i++) {
        const struct lk_live_reject *r = &cl->rejects[i];
        size_t len = strlen(r->znode) + strlen(r->reason) + 2, k;

        now[i] = lk_xmalloc(len);
        snprintf(now[i], len, "%s\n%s", r->znode, r->reason);
        for (k = 0; k < s->nrefused && strcmp(s->refused[k], now[i]) != 0; k++)
            ;
        if (k < s->nrefused)
            continue;
        s->refused_total++;
        lk_log(LK_WARN, NULL, "cluster %s: registration %s%s%s refused: %s", s->cluster, s->path,
               strcmp(s->path, "/") == 0 ? "" : "/", r->znode, r->reason);
    }
    for (size_t i = 0; i < s->nrefused; i++)
        free(s->refused[i]);
    free(s->refused);
    s->refused = now;
    s->nrefused = n;
}

/* The map as --check prints it, without the store's own lines (how many
 * registrations, which refused): two configs that print the same serve the
 * same, and a refused registration coming or going changes nothing served. */
static char *
map_text(const struct lk_conf *conf)
{
    char *buf = lk_conf_dump_text(conf), *r, *w;

    for (r = w = buf; *r != '\0';) {
        char *nl = strchr(r, '\n');
        size_t n = nl != NULL ? (size_t)(nl - r) + 1 : strlen(r);
        if (strncmp(r, "  store ", 8) != 0 && strncmp(r, "  refused ", 10) != 0) {
            memmove(w, r, n);
            w += n;
        }
        r += n;
    }
    *w = '\0';
    return buf;
}

/* The first live broker of cl at or after index i (cl->nbrokers if none). */
static size_t
next_live(const struct lk_cluster *cl, size_t i)
{
    while (cl != NULL && i < cl->nbrokers && !cl->brokers[i]->live)
        i++;
    return i;
}

/* "+10.0.0.14:8080 -10.0.0.12:8080": the live brokers of cluster that
 * came and went from old to cl.  Live brokers follow the static ones in
 * znode order, so one merge walk finds them. */
static void
diff_brokers(const struct lk_cluster *old, const struct lk_cluster *cl, char *buf, size_t len)
{
    size_t off = 0, i = next_live(old, 0), j = next_live(cl, 0);
    size_t ni = old != NULL ? old->nbrokers : 0, nj = cl != NULL ? cl->nbrokers : 0;

    buf[0] = '\0';
    while ((i < ni || j < nj) && off + 1 < len) {
        int c = i >= ni ? 1 : j >= nj ? -1 : strcmp(old->brokers[i]->id, cl->brokers[j]->id);
        const struct lk_broker *b = c < 0 ? old->brokers[i] : cl->brokers[j];
        int w = 0;

        if (c != 0)
            w = snprintf(buf + off, len - off, "%s%c%s", off != 0 ? " " : "", c < 0 ? '-' : '+',
                         b->id);
        off += w > 0 ? (size_t)w : 0;
        if (c <= 0)
            i = next_live(old, i + 1);
        if (c >= 0)
            j = next_live(cl, j + 1);
    }
    if (off == 0)
        snprintf(buf, len, "listeners changed");
}

static void
count_origins(const struct lk_cluster *cl, size_t *live, size_t *stat)
{
    *live = *stat = 0;
    for (size_t i = 0; i < cl->nbrokers; i++)
        (*(cl->brokers[i]->live ? live : stat))++;
}

/* A snapshot of why's store: the map again, installed if it changed. */
static void
rebuild(struct source *why)
{
    for (struct source *s = L.sources; s != NULL; s = s->next)
        s->dirty = s->behind = 0;
    char err[1024], diff[512];
    struct lk_conf *conf = lk_live_build(L.file, L.text, L.len, err, sizeof(err));
    struct lk_runtime *rt;
    char *a, *b;
    int same;

    if (conf == NULL) {
        why->updates[UPD_FAILED]++;
        why->behind = 1;
        lk_log(LK_ERR, NULL, "cluster %s: the map cannot be built with zookeeper's brokers: %s; "
               "still serving generation %" PRIu64, why->cluster, err, lk_workers_generation());
        return;
    }
    for (struct source *s = L.sources; s != NULL; s = s->next)
        if (s->synced)
            note_refused(s, conf);
    rt = lk_workers_runtime();
    a = map_text(rt->conf);
    b = map_text(conf);
    same = strcmp(a, b) == 0;
    free(a);
    free(b);
    diff_brokers(lk_conf_cluster(rt->conf, why->cluster), lk_conf_cluster(conf, why->cluster), diff,
                 sizeof(diff));
    lk_runtime_unref(rt);
    if (same) {
        /* Pulsar brokers rewrite their registration with each load report. */
        why->updates[UPD_UNCHANGED]++;
        lk_log(LK_DEBUG, NULL, "cluster %s: zookeeper changed, the map did not", why->cluster);
        lk_conf_unref(conf);
        return;
    }
    if (L.install(conf, err, sizeof(err)) != 0) {
        why->updates[UPD_FAILED]++;
        why->behind = 1;
        lk_log(LK_ERR, NULL, "cluster %s: the map from zookeeper (%s) was refused: %s; still "
               "serving generation %" PRIu64, why->cluster, diff, err, lk_workers_generation());
        lk_conf_unref(conf);
        return;
    }
    why->updates[UPD_INSTALLED]++;
    const struct lk_cluster *cl = lk_conf_cluster(conf, why->cluster);
    size_t live = 0, stat = 0;
    if (cl != NULL)
        count_origins(cl, &live, &stat);
    lk_log(LK_INFO, NULL,
           "cluster %s: map from zookeeper is generation %" PRIu64 ": %s (%zu live, %zu static)",
           why->cluster, lk_workers_generation(), diff, live, stat);
    lk_conf_unref(conf); /* the runtime holds it */
}

static long long
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
on_rebuild(evutil_socket_t fd, short what, void *arg)
{
    struct source *why = NULL;

    for (struct source *s = L.sources; s != NULL && why == NULL; s = s->next)
        if (s->dirty)
            why = s;
    L.last_build_ms = mono_ms();
    /* Stopping: the generation serving is the last. */
    if (why != NULL && !lk_workers_draining())
        rebuild(why);
}

/* A rebuild for s's change: at once, or LK_LIVE_MIN_GAP_MS after the last
 * one, with whatever else changed meanwhile. */
static void
schedule_rebuild(struct source *s)
{
    long long wait = L.last_build_ms + LK_LIVE_MIN_GAP_MS - mono_ms();
    struct timeval tv = {0, 0};

    s->dirty = 1;
    if (L.rebuild_ev == NULL || evtimer_pending(L.rebuild_ev, NULL))
        return;
    if (wait > 0) {
        tv.tv_sec = (time_t)(wait / 1000);
        tv.tv_usec = (suseconds_t)(wait % 1000) * 1000;
    }
    evtimer_add(L.rebuild_ev, &tv);
}

/* Following -------------------------------------------------------------------------- */

void
lk_live_follow(struct event_base *base, const struct lk_conf *conf, const char *file,
               const char *text, size_t len, lk_live_install_fn install)
{
    struct source **pp;

    if (L.rebuild_ev == NULL)
        L.rebuild_ev = evtimer_new(base, on_rebuild, NULL);
    L.install = install;
    free(L.file);
    free(L.text);
    L.file = lk_xstrdup(file);
    L.text = lk_xmalloc(len + 1);
    memcpy(L.text, text, len);
    L.len = len;
    for (struct source *s = L.sources; s != NULL; s = s->next) {
        s->keep = 0;
        /* Worked out under the old file: the next snapshot rebuilds. */
        for (size_t i = 0; s->means != NULL && i < s->n; i++) {
            free(s->means[i]);
            s->means[i] = NULL;
        }
    }
    for (size_t i = 0; i < conf->nclusters; i++) {
        const struct lk_cluster *cl = conf->clusters[i];
        struct source *s;

        if (cl->zk == NULL)
            continue;
        for (s = L.sources; s != NULL; s = s->next)
            if (strcmp(s->cluster, cl->name) == 0 && strcmp(s->connect, cl->zk->connect) == 0 &&
                strcmp(s->path, cl->zk_path) == 0 && s->timeout_ms == cl->zk_session_timeout_ms)
                break;
        if (s == NULL) {
            s = source_start(base, cl, 0);
            s->next = L.sources;
            L.sources = s;
        }
        s->keep = 1;
    }
    for (pp = &L.sources; *pp != NULL;) {
        struct source *s = *pp;
        if (s->keep) {
            pp = &s->next;
            continue;
        }
        lk_log(LK_INFO, NULL, "cluster %s: no longer following zookeeper %s", s->cluster,
               s->connect);
        *pp = s->next;
        source_free(s);
    }
}

void
lk_live_stop(void)
{
    if (L.rebuild_ev != NULL)
        event_free(L.rebuild_ev);
    while (L.sources != NULL) {
        struct source *s = L.sources;
        L.sources = s->next;
        source_free(s);
    }
    free(L.file);
    free(L.text);
    memset(&L, 0, sizeof(L));
}

/* What /metrics and /healthz show ---------------------------------------------------- */

/* A counter of the sources' states: the uint64_t at c->off in lk_meta_state. */
static void
state_counter(struct evbuffer *out, const struct lk_stat_counter *c)
{
    struct lk_meta_state st = {0};
    uint64_t v;

    lk_stats_family(out, c->name, "counter", c->help);
    for (struct source *s = L.sources; s != NULL; s = s->next) {
        if (s->src != NULL)
            s->ops->state(s->src, &st);
        memcpy(&v, (const char *)&st + c->off, sizeof(v));
        evbuffer_add_printf(out, "%s{cluster=\"%s\"} %" PRIu64 "\n", c->name, s->cluster, v);
    }
}

void
lk_live_metrics(struct evbuffer *out, const struct lk_conf *conf)
{
    struct lk_meta_state st;

    lk_stats_family(out, "lookout_map_brokers", "gauge",
                    "Brokers in the map serving, by where they come from: a [broker] section "
                    "(static) or the cluster's ZooKeeper (live).");
    for (size_t i = 0; i < conf->nclusters; i++) {
        size_t live, stat;
        count_origins(conf->clusters[i], &live, &stat);
        evbuffer_add_printf(out,
                            "lookout_map_brokers{cluster=\"%s\",origin=\"static\"} %zu\n"
                            "lookout_map_brokers{cluster=\"%s\",origin=\"live\"} %zu\n",
                            conf->clusters[i]->name, stat, conf->clusters[i]->name, live);
    }
    if (L.sources == NULL)
        return;
    lk_stats_family(out, "lookout_map_store_connected", "gauge",
                    "Whether the session with the cluster's ZooKeeper is up.");
    for (struct source *s = L.sources; s != NULL; s = s->next) {
        st = (struct lk_meta_state){0};
        if (s->src != NULL)
            s->ops->state(s->src, &st);
        evbuffer_add_printf(out, "lookout_map_store_connected{cluster=\"%s\"} %d\n", s->cluster,
                            st.connected);
    }
    lk_stats_family(out, "lookout_map_store_stale_since_seconds", "gauge",
                    "Since when (Unix time) the map may lag behind the cluster's ZooKeeper; 0 "
                    "while in step.");
    for (struct source *s = L.sources; s != NULL; s = s->next) {
        st = (struct lk_meta_state){0};
        if (s->src != NULL)
            s->ops->state(s->src, &st);
        evbuffer_add_printf(out, "lookout_map_store_stale_since_seconds{cluster=\"%s\"} %.3f\n",
                            s->cluster, (double)st.stale_since_ms / 1000);
    }
    lk_stats_family(out, "lookout_map_registrations", "gauge",
                    "Brokers registered in the cluster's ZooKeeper, as last read.");
    for (struct source *s = L.sources; s != NULL; s = s->next)
        evbuffer_add_printf(out, "lookout_map_registrations{cluster=\"%s\"} %zu\n", s->cluster,
                            s->n);
    lk_stats_family(out, "lookout_map_registrations_refused", "gauge",
                    "Registrations the map serving leaves out (each logged).");
    for (struct source *s = L.sources; s != NULL; s = s->next)
        evbuffer_add_printf(out, "lookout_map_registrations_refused{cluster=\"%s\"} %zu\n",
                            s->cluster, s->nrefused);
    lk_stats_family(out, "lookout_map_registrations_refused_total", "counter",
                    "Registrations refused, each counted once until it changes.");
    for (struct source *s = L.sources; s != NULL; s = s->next)
        evbuffer_add_printf(out, "lookout_map_registrations_refused_total{cluster=\"%s\"} %" PRIu64
                            "\n", s->cluster, s->refused_total);
    lk_stats_family(out, "lookout_map_updates_total", "counter",
                    "Changes read from the cluster's ZooKeeper, by what they did to the map: a "
                    "new generation installed, unchanged, or failed (logged).");
    for (struct source *s = L.sources; s != NULL; s = s->next)
        for (int k = 0; k < 3; k++)
            evbuffer_add_printf(out,
                                "lookout_map_updates_total{cluster=\"%s\",result=\"%s\"} %" PRIu64
                                "\n", s->cluster, upd_names[k], s->updates[k]);
    static const struct lk_stat_counter state_counters[] = {
        {"lookout_map_store_sessions_total",
         "ZooKeeper sessions established (the first, then one per expiry).",
         offsetof(struct lk_meta_state, sessions)},
        {"lookout_map_store_expiries_total",
         "ZooKeeper sessions that expired (each followed by a full re-read).",
         offsetof(struct lk_meta_state, expiries)},
        {"lookout_map_store_attempts_total",
         "ZooKeeper sessions tried (client handles opened), retries included.",
         offsetof(struct lk_meta_state, attempts)},
        {"lookout_map_store_probes_total",
         "Probes of the ZooKeeper servers (a connect and srvr) while waiting to retry, to find "
         "one back before the pause ends.",
         offsetof(struct lk_meta_state, probes)},
    };
    for (size_t i = 0; i < sizeof(state_counters) / sizeof(state_counters[0]); i++)
        state_counter(out, &state_counters[i]);
}

json_t *
lk_live_store_json(const struct lk_cluster *cl)
{
    struct source *s;
    json_t *st = json_object(), *refused = json_array();
    struct lk_meta_state ms = {0};

    for (s = L.sources; s != NULL && strcmp(s->cluster, cl->name) != 0; s = s->next)
        ;
    if (s != NULL && s->src != NULL)
        s->ops->state(s->src, &ms);
    json_object_set_new(st, "zookeeper", json_string(cl->zk->connect));
    json_object_set_new(st, "path", json_string(cl->zk_path));
    json_object_set_new(st, "connected", json_boolean(ms.connected));
    json_object_set_new(st, "read", json_boolean(s != NULL && s->synced));
    json_object_set_new(st, "registrations", json_integer(s != NULL ? (json_int_t)s->n : 0));
    for (size_t i = 0; s != NULL && i < s->nrefused; i++) {
        const char *nl = strchr(s->refused[i], '\n');
        json_t *r = json_object();
        json_object_set_new(r, "znode", json_stringn(s->refused[i], (size_t)(nl - s->refused[i])));
        json_object_set_new(r, "reason", json_string(nl + 1));
        json_array_append_new(refused, r);
    }
    json_object_set_new(st, "refused", refused);
    return st;
}

/* "2026-12-02T02:10:00Z" */
static void
iso_time(int64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int
lk_live_health(struct evbuffer *out, const struct lk_conf *conf)
{
    int starting = 0;
    struct timespec now;

    clock_gettime(CLOCK_REALTIME, &now);
    for (struct source *s = L.sources; s != NULL; s = s->next) {
        const struct lk_cluster *cl = lk_conf_cluster(conf, s->cluster);
        struct lk_meta_state st = {0};
        size_t live = 0, stat = 0;
        char since[32];

        if (s->src != NULL)
            s->ops->state(s->src, &st);
        if (cl != NULL)
            count_origins(cl, &live, &stat);
        evbuffer_add_printf(out, "cluster %s: zookeeper %s %s", s->cluster, s->connect,
                            st.connected ? "connected" : "disconnected");
        if (!s->synced) {
            starting = 1;
            evbuffer_add_printf(out, ", not read yet");
        } else if (st.stale_since_ms != 0) {
            int64_t ago = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 - st.stale_since_ms;
            iso_time(st.stale_since_ms, since, sizeof(since));
            evbuffer_add_printf(out, ", stale since %s (%" PRId64 " s ago)", since,
                                ago > 0 ? ago / 1000 : 0);
        }
        evbuffer_add_printf(out,
                            "; generation %" PRIu64 "; %zu broker%s (%zu live, %zu static)"
                            "; %zu registration%s refused\n",
                            lk_workers_generation(), live + stat, live + stat == 1 ? "" : "s",
                            live, stat, s->nrefused, s->nrefused == 1 ? "" : "s");
    }
    return starting;
}

/* --check --live ----------------------------------------------------------------------- */

struct check {
    struct event_base *base;
    struct source *list;
};

/* Every 20 ms: done once every source has delivered. */
static void
check_tick(evutil_socket_t fd, short what, void *arg)
{
    struct check *ck = arg;

    for (struct source *s = ck->list; s != NULL; s = s->next)
        if (s->src != NULL && !s->synced)
            return;
    event_base_loopbreak(ck->base);
}

int
lk_live_check(const struct lk_conf *conf, const char *file, const char *text, size_t len,
              FILE *out)
{
    unsigned timeout_ms = 0;

    for (size_t i = 0; i < conf->nclusters; i++) {
        const struct lk_cluster *cl = conf->clusters[i];
        unsigned t = cl->zk_session_timeout_ms != 0 ? cl->zk_session_timeout_ms
                                                    : LK_ZK_SESSION_TIMEOUT_MS;
        if (cl->zk != NULL && t > timeout_ms)
            timeout_ms = t;
    }
    struct check ck = {event_base_new(), NULL};
    struct timeval tick = {0, 20000}, deadline = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    struct event *ev;
    struct lk_conf *live;
    char err[1024];
    int rc = 0;

    if (ck.base == NULL) {
        fprintf(stderr, "lookout: cannot create an event loop\n");
        return 1;
    }
    for (size_t i = conf->nclusters; i-- > 0;) {
        if (conf->clusters[i]->zk == NULL)
            continue;
        struct source *s = source_start(ck.base, conf->clusters[i], 1);
        s->next = ck.list;
        ck.list = s;
    }
    ev = event_new(ck.base, -1, EV_PERSIST, check_tick, &ck);
    event_add(ev, &tick);
    event_base_loopexit(ck.base, &deadline);
    event_base_dispatch(ck.base);
    event_free(ev);
    for (struct source *s = ck.list; s != NULL; s = s->next)
        if (!s->synced) {
            fprintf(stderr, "lookout: cluster %s: zookeeper %s not read within %u ms\n",
                    s->cluster, s->connect, timeout_ms);
            rc = 1;
        }
    if ((live = build_from(ck.list, file, text, len, 0, err, sizeof(err))) != NULL) {
        lk_conf_dump(live, out);
        lk_conf_unref(live);
    } else {
        fprintf(stderr, "lookout: %s\n", err);
        rc = 1;
    }
    while (ck.list != NULL) {
        struct source *s = ck.list;
        ck.list = s->next;
        source_free(s);
    }
    event_base_free(ck.base);
    return rc;
}
