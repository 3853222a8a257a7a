/*
 * Tests for filters/flt_leak_guard.c and its matcher, proxy/lk_guard.c,
 * driven through the chain runner as
 * the engine drives it: a config loaded with lk_conf_load_buf, an exchange,
 * lk_flt_attach_all, the response head, then the body in pieces of many
 * sizes (one byte, odd sizes, all at once), in each mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_util.h"
#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_http_msg.h"
#include "lk_match.h"
#include "lk_pulsar_codec.h"
#include "lk_test.h"
#include "lk_test_wire.h"
#include "lk_xchg.h"

/* b1 has every family on its external listener, b2 only http, b3 (an IPv6
 * internal address) only pulsar, so its http addresses cannot be rewritten. */
static const char conf_fmt[] =
    "[lookout]\n"
    "max_buffer_bytes = 4k\n"
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "webServiceUrl = http://127.0.0.1:18080\n"
    "leak_guard = %s\n"
    "%s\n"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"
    "external:pulsar://127.0.0.1:16650,external:http://127.0.0.1:18081,"
    "external:https://127.0.0.1:18443\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080,"
    "external:http://127.0.0.2:18082\n"
    "[broker prod/b3]\n"
    "advertisedListeners = internal:http://[::1]:8080,internal:pulsar://[::1]:6650,"
    "external:pulsar://127.0.0.3:16650\n";

/* Piece sizes for the body; 0 is the whole body in one call. */
static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 16, 61, 1000};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static const char brokers_body[] =
    "[\"10.0.0.11:8080\",\"pulsar-broker-2.pulsar-broker.svc.cluster.local:8080\","
    "\"[::1]:8080\"]";

/* The map fmt (its %s: leak_guard's mode, then keys for the cluster). */
static struct lk_conf *
load_fmt(const char *fmt, const char *mode, const char *filters)
{
    char text[4096], err[512];
    struct lk_conf *conf;

    snprintf(text, sizeof(text), fmt, mode, filters != NULL ? filters : "");
    conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    if (!ok(conf != NULL, "config loads (leak_guard = %s)", mode))
        lk_test_diag("%s", err);
    return conf;
}

static struct lk_conf *
load(const char *mode, const char *filters)
{
    return load_fmt(conf_fmt, mode, filters);
}

/* conf_fmt without webServiceUrl: b3's http addresses have no stand-in
 * (lk_location_pick), so that the guard can only count them. */
static struct lk_conf *
load_no_web(const char *mode)
{
    static const char web[] = "webServiceUrl = http://127.0.0.1:18080\n";
    char fmt[sizeof(conf_fmt)];
    const char *at = strstr(conf_fmt, web);

    snprintf(fmt, sizeof(fmt), "%.*s%s", (int)(at - conf_fmt), conf_fmt, at + strlen(web));
    return load_fmt(fmt, mode, NULL);
}

/* The leak guard's position in the chain, or -1. */
static int
guard_index(const struct lk_cluster *cl)
{
    for (size_t i = 0; i < cl->nfilters; i++)
        if (strcmp(cl->filters[i].ops->name, "leak_guard") == 0)
            return (int)i;
    return -1;
}

/* An exchange with its response head: hdrs is name, value, ..., NULL. */
static struct lk_xchg *
start(struct lk_conf *conf, const char *target, int status, const char *const *hdrs, int tls)
{
    struct lk_xchg *x = calloc(1, sizeof(*x));

    lk_pool_init(&x->pool);
    x->conf = conf;
    x->cluster = conf->clusters[0];
    x->broker = x->cluster->brokers[0];
    x->listener_name = x->cluster->lookup_listener;
    x->client_tls = tls;
    lk_http_msg_init(&x->req, &x->pool, 1);
    x->req.method = LK_STRLIT("GET");
    x->req.target = lk_str_c(target);
    lk_http_msg_init(&x->res, &x->pool, 0);
    x->res.status = status;
    for (size_t i = 0; hdrs != NULL && hdrs[i] != NULL; i += 2)
        lk_http_add(&x->res, lk_str_c(hdrs[i]), lk_str_c(hdrs[i + 1]));
    lk_flt_attach_all(x);
    return x;
}

static void
finish(struct lk_xchg *x)
{
    lk_flt_detach_all(x);
    lk_pool_free(&x->pool);
    free(x);
}

struct result {
    enum lk_flt_verdict v;
    char *out;          /* what the chain released, NUL-ended (malloc) */
    size_t out_at_stop; /* bytes released when a verdict other than CONTINUE came */
    size_t max_held;    /* most bytes the leak guard kept back after a call */
    size_t first_out;   /* bytes released by the first call */
};

/* Runs body through the chain in pieces of size bytes (0: all at once). */
static void
run_body(struct lk_xchg *x, const char *body, size_t len, size_t size, struct result *r)
{
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    int gi = guard_index(x->cluster);
    size_t at = 0;
    int first = 1;

    memset(r, 0, sizeof(*r));
    do {
        size_t n = size == 0 || size > len - at ? len - at : size;
        evbuffer_add(in, body + at, n);
        at += n;
        r->v = lk_flt_run_res_body(x, in, out, at == len);
        if (gi >= 0 && x->flt[gi].acc != NULL && evbuffer_get_length(x->flt[gi].acc) > r->max_held)
            r->max_held = evbuffer_get_length(x->flt[gi].acc);
        if (first)
            r->first_out = evbuffer_get_length(out);
        first = 0;
    } while (r->v == LK_FLT_CONTINUE && at < len);
    r->out_at_stop = evbuffer_get_length(out);
    r->out = malloc(r->out_at_stop + 1);
    evbuffer_remove(out, r->out, r->out_at_stop);
    r->out[r->out_at_stop] = '\0';
    evbuffer_free(in);
    evbuffer_free(out);
}

static const char *const json_hdrs[] = {"Content-Type", "application/json", NULL};

/*
 * One response through the guard for every piece size: the head must
 * continue, and each run must give the same verdict, output and counts.
 * want_out NULL: the body must come out unchanged.
 */
static void
check(struct lk_conf *conf, const char *what, const char *const *hdrs, const char *body, int tls,
      enum lk_flt_verdict want_v, const char *want_out, unsigned want_leaks, unsigned want_rewrites)
{
    for (size_t s = 0; s < NSIZES; s++) {
        struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, hdrs, tls);
        struct result r;

        subtest("%s, pieces of %zu", what, sizes[s]);
        if (!ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "head continues")) {
            finish(x);
            continue;
        }
        run_body(x, body, strlen(body), sizes[s], &r);
        ok(r.v == want_v, "verdict %d", r.v);
        if (want_v == LK_FLT_CONTINUE)
            ok_str(r.out, want_out != NULL ? want_out : body, "body");
        if (want_v == LK_FLT_REPLY) {
            ok(r.out_at_stop == 0, "nothing released before the 502 (%zu)", r.out_at_stop);
            ok(x->reply_status == 502, "502");
            ok_str(x->reply_reason, "response would leak an internal broker address", "reason");
        }
        ok(x->leaks == want_leaks, "%u leaks", x->leaks);
        ok(x->rewrites == want_rewrites, "%u rewrites", x->rewrites);
        free(r.out);
        finish(x);
    }
    subtest(NULL);
}

/* log reads the body where it lies, chain by chain (lk_guard.c's
 * scan_in_place): a body of many chains (more than one look takes), given
 * in one call to the guard alone (no filter before it to copy the chains
 * into one), has every find counted, within a chain or across two, and
 * passes unchanged. */
static void
test_log_chains(void)
{
    struct lk_conf *conf = load("log", "filters = leak_guard");
    char body[4 * sizeof(brokers_body)];

    if (conf == NULL)
        return;
    snprintf(body, sizeof(body), "%s,%s,%s", brokers_body, brokers_body, brokers_body);
    for (size_t size = 1; size <= 9; size += 4) {
        struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, json_hdrs, 0);
        struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
        size_t len = strlen(body);

        subtest("log, chains of %zu", size);
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "head continues");
        for (size_t at = 0; at < len; at += size)
            evbuffer_add_reference(in, body + at, size < len - at ? size : len - at, NULL, NULL);
        ok(evbuffer_peek(in, -1, NULL, NULL, 0) > 8, "%d chains",
           evbuffer_peek(in, -1, NULL, NULL, 0));
        ok(lk_flt_run_res_body(x, in, out, 1) == LK_FLT_CONTINUE, "continues");
        ok(x->leaks == 9, "9 leaks (%u)", x->leaks);
        ok(evbuffer_get_length(out) == len &&
               memcmp(evbuffer_pullup(out, -1), body, len) == 0,
           "passed unchanged");
        evbuffer_free(in);
        evbuffer_free(out);
        finish(x);
    }
    subtest(NULL);
    lk_conf_unref(conf);
}

static void
test_chain(void)
{
    struct lk_conf *conf = load("log", NULL);
    const struct lk_cluster *cl;

    if (conf == NULL)
        return;
    cl = conf->clusters[0];
    ok(cl->nfilters >= 2 && guard_index(cl) == (int)cl->nfilters - 1,
       "the default chain ends with leak_guard");
    lk_conf_unref(conf);

    conf = load("off", "filters = leak_guard");
    if (conf != NULL) {
        static const char *const hdrs[] = {"X-Broker", "10.0.0.11:8080", NULL};
        struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, hdrs, 0);
        ok(!x->flt[0].attached, "leak_guard = off: not attached");
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE && x->leaks == 0 && x->body_filters == 0,
           "nothing counted, no body asked for");
        finish(x);
        lk_conf_unref(conf);
    }

    /* The longest internal address the config takes (a 253-byte name)
     * fits the matcher. */
    char name[254], text[2048], err[512];
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    for (size_t i = 63; i < sizeof(name) - 1; i += 64)
        name[i] = '.'; /* DNS labels are at most 63 bytes */
    snprintf(text, sizeof(text),
             "[pulsar p]\nleak_guard = block\n[broker p/b1]\nadvertisedListeners = "
             "internal:pulsar+ssl://%s:65535,internal:http://%s:1\n",
             name, name);
    conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    if (ok(conf != NULL, "a 253-byte host name loads (%s)", conf == NULL ? err : "")) {
        static const char *const hdrs[] = {"Content-Type", "text/plain", NULL};
        char body[600];
        struct result r;
        snprintf(body, sizeof(body), "see pulsar+ssl://%s:65535.", name);
        struct lk_xchg *x = start(conf, "/", 200, hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, body, strlen(body), 5, &r);
        ok(r.v == LK_FLT_REPLY && x->leaks == 1, "and is found");
        free(r.out);
        finish(x);
    }
    lk_conf_unref(conf);
}

/* body in each mode: log counts its leaks and passes it; rewrite gives
 * want, rewrites of them rewritten; block answers 502 at the first. */
static void
check_modes(const char *const *hdrs, const char *body, unsigned leaks, const char *want,
            unsigned rewrites)
{
    struct lk_conf *conf;

    if ((conf = load("log", NULL)) != NULL)
        check(conf, "log", hdrs, body, 0, LK_FLT_CONTINUE, NULL, leaks, 0);
    lk_conf_unref(conf);
    if ((conf = load("rewrite", NULL)) != NULL)
        check(conf, "rewrite", hdrs, body, 0, LK_FLT_CONTINUE, want, leaks, rewrites);
    lk_conf_unref(conf);
    if ((conf = load("block", NULL)) != NULL)
        check(conf, "block", hdrs, body, 0, LK_FLT_REPLY, NULL, 1, 0);
    lk_conf_unref(conf);
}

/* /admin/v2/brokers/{cluster}: a JSON list of internal host:port strings. */
static void
test_brokers_list(void)
{
    struct lk_conf *conf;

    if ((conf = load("log", NULL)) != NULL)
        check(conf, "log", json_hdrs, brokers_body, 0, LK_FLT_CONTINUE, NULL, 3, 0);
    lk_conf_unref(conf);
    if ((conf = load("rewrite", NULL)) != NULL) {
        /* b3 has no http address on the external listener: webServiceUrl
         * stands in, as in a Location (lk_location_pick) */
        check(conf, "rewrite", json_hdrs, brokers_body, 0, LK_FLT_CONTINUE,
              "[\"127.0.0.1:18081\",\"127.0.0.2:18082\",\"127.0.0.1:18080\"]", 3, 3);
        check(conf, "rewrite over TLS", json_hdrs, brokers_body, 1, LK_FLT_CONTINUE,
              "[\"127.0.0.1:18443\",\"127.0.0.2:18082\",\"127.0.0.1:18080\"]", 3, 3);
    }
    lk_conf_unref(conf);
    if ((conf = load_no_web("rewrite")) != NULL) {
        /* ... and without webServiceUrl nothing does: counted, kept */
        check(conf, "rewrite, no webServiceUrl", json_hdrs, brokers_body, 0, LK_FLT_CONTINUE,
              "[\"127.0.0.1:18081\",\"127.0.0.2:18082\",\"[::1]:8080\"]", 3, 2);
        check(conf, "rewrite over TLS, no webServiceUrl", json_hdrs, brokers_body, 1,
              LK_FLT_CONTINUE, "[\"127.0.0.1:18443\",\"127.0.0.2:18082\",\"[::1]:8080\"]", 3, 2);
    }
    lk_conf_unref(conf);
    if ((conf = load("block", NULL)) != NULL)
        check(conf, "block", json_hdrs, brokers_body, 0, LK_FLT_REPLY, NULL, 1, 0);
    lk_conf_unref(conf);
}

/* RestException(Throwable): 500 text/plain with a stack trace (facts §1). */
static void
test_error_page(void)
{
    static const char *const hdrs[] = {"Content-Type", "text/plain;charset=utf-8", NULL};
    static const char body[] =
        "\n --- An unexpected error occurred in the server --- \n\n"
        "Message: java.util.concurrent.CompletionException: "
        "org.apache.pulsar.client.admin.PulsarAdminException: java.net.ConnectException: "
        "Connection refused: http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080/admin/v2/"
        "persistent/public/default/t1/stats\n\nStacktrace:\n\n"
        "java.net.ConnectException: Connection refused: pulsar-broker-2.pulsar-broker.svc.cluster."
        "local:8080\n\tat sun.nio.ch.Net.pollConnect(Native Method)\n";
    char want[1024];

    snprintf(want, sizeof(want),
             "\n --- An unexpected error occurred in the server --- \n\n"
             "Message: java.util.concurrent.CompletionException: "
             "org.apache.pulsar.client.admin.PulsarAdminException: java.net.ConnectException: "
             "Connection refused: http://127.0.0.2:18082/admin/v2/"
             "persistent/public/default/t1/stats\n\nStacktrace:\n\n"
             "java.net.ConnectException: Connection refused: 127.0.0.2:18082"
             "\n\tat sun.nio.ch.Net.pollConnect(Native Method)\n");
    check_modes(hdrs, body, 2, want, 2);
}

/* Topic stats name the owner; URLs change scheme with the address. */
static void
test_stats(void)
{
    static const char body[] =
        "{\"msgRateIn\":0.0,\"publishers\":[{\"address\":\"/10.1.2.3:51234\","
        "\"clientVersion\":\"4.0.0\"}],\"ownerBroker\":\"10.0.0.11:8080\","
        "\"replication\":{},\"url\":\"http://10.0.0.11:8080/admin\","
        "\"serviceUrl\":\"PULSAR://10.0.0.11:6650\",\"other\":\"pulsar://[::1]:6650\"}";
    static const char want[] =
        "{\"msgRateIn\":0.0,\"publishers\":[{\"address\":\"/10.1.2.3:51234\","
        "\"clientVersion\":\"4.0.0\"}],\"ownerBroker\":\"127.0.0.1:18081\","
        "\"replication\":{},\"url\":\"http://127.0.0.1:18081/admin\","
        "\"serviceUrl\":\"pulsar://127.0.0.1:16650\",\"other\":\"pulsar://127.0.0.3:16650\"}";
    static const char want_tls[] =
        "{\"msgRateIn\":0.0,\"publishers\":[{\"address\":\"/10.1.2.3:51234\","
        "\"clientVersion\":\"4.0.0\"}],\"ownerBroker\":\"127.0.0.1:18443\","
        "\"replication\":{},\"url\":\"https://127.0.0.1:18443/admin\","
        "\"serviceUrl\":\"pulsar://127.0.0.1:16650\",\"other\":\"pulsar://127.0.0.3:16650\"}";
    static const char *const hdrs[] = {"Content-Type", "application/json; charset=utf-8", NULL};
    struct lk_conf *conf;

    if ((conf = load("log", NULL)) != NULL)
        check(conf, "log", hdrs, body, 0, LK_FLT_CONTINUE, NULL, 4, 0);
    lk_conf_unref(conf);
    if ((conf = load("rewrite", NULL)) != NULL) {
        check(conf, "rewrite", hdrs, body, 0, LK_FLT_CONTINUE, want, 4, 4);
        check(conf, "rewrite over TLS", hdrs, body, 1, LK_FLT_CONTINUE, want_tls, 4, 4);
    }
    lk_conf_unref(conf);
}

/* One leak at every split point of a two-piece body, in each mode. */
/* Runs the head, then body cut at cuts[0..n) (ascending) through x's
 * chain; what came out goes to got (NUL-ended). */
static enum lk_flt_verdict
run_cuts(struct lk_xchg *x, const char *body, const size_t *cuts, size_t n, char *got,
         size_t gotlen)
{
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    enum lk_flt_verdict v = lk_flt_run_res_headers(x);
    size_t len = strlen(body), at = 0;

    for (size_t i = 0; i <= n && v == LK_FLT_CONTINUE; i++) {
        size_t to = i < n ? cuts[i] : len;
        evbuffer_add(in, body + at, to - at);
        at = to;
        v = lk_flt_run_res_body(x, in, out, i == n);
    }
    int n_out = evbuffer_remove(out, got, gotlen - 1);
    got[n_out > 0 ? n_out : 0] = '\0';
    evbuffer_free(in);
    evbuffer_free(out);
    return v;
}

static void
test_straddle(void)
{
    static const char body[] = "{\"owner\":\"http://10.0.0.11:8080/x\",\"n\":1}";
    static const char want[] = "{\"owner\":\"http://127.0.0.1:18081/x\",\"n\":1}";
    static const char *const modes[] = {"log", "rewrite", "block"};
    const size_t len = strlen(body);

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load(modes[m], NULL);
        int bad = 0, reported = 0;
        if (conf == NULL)
            continue;
        for (size_t a = 1; a < len; a++) {
            struct lk_xchg *x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
            char got[256];
            enum lk_flt_verdict v = run_cuts(x, body, &a, 1, got, sizeof(got));

            switch (m) {
            case 0:
                bad += v != LK_FLT_CONTINUE || strcmp(got, body) != 0 || x->leaks != 1;
                break;
            case 1:
                bad += v != LK_FLT_CONTINUE || strcmp(got, want) != 0 || x->leaks != 1 ||
                       x->rewrites != 1;
                break;
            default:
                bad += v != LK_FLT_REPLY || got[0] != '\0' || x->leaks != 1;
                break;
            }
            if (bad == 1 && !reported) {
                lk_test_diag("%s, split at %zu: verdict %d, '%s', %u leaks", modes[m], a, v, got,
                             x->leaks);
                reported = 1; /* the first failure says enough */
            }
            finish(x);
        }
        ok(bad == 0, "%s: a leak split at every point (%d bad)", modes[m], bad);
        lk_conf_unref(conf);
    }
}

/* Leaks in headers: any field, and a Location the location filter left. */
static void
test_headers(void)
{
    static const char *const hdrs[] = {"X-Something",
                                       "broker=10.0.0.11:8080; other=1",
                                       "Location",
                                       "http://10.0.0.11:8080/admin/v2/x?a=1",
                                       "Content-Type",
                                       "application/octet-stream",
                                       NULL};
    const char *modes[] = {"log", "rewrite", "block"};

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load(modes[m], "filters = leak_guard");
        if (conf == NULL)
            continue;
        struct lk_xchg *x = start(conf, "/admin/v2/x", 307, hdrs, 0);
        enum lk_flt_verdict v = lk_flt_run_res_headers(x);
        struct lk_str *a = lk_http_find(&x->res, LK_STRLIT("X-Something"));
        struct lk_str *l = lk_http_find(&x->res, LK_STRLIT("Location"));
        char sa[128], sl[128];
        snprintf(sa, sizeof(sa), "%.*s", a ? (int)a->len : 0, a ? a->p : "");
        snprintf(sl, sizeof(sl), "%.*s", l ? (int)l->len : 0, l ? l->p : "");
        subtest("%s", modes[m]);
        if (m == 0) {
            ok(v == LK_FLT_CONTINUE && x->leaks == 2 && x->rewrites == 0, "counted (%u)", x->leaks);
            ok_str(sa, "broker=10.0.0.11:8080; other=1", "X-Something untouched");
            ok_str(sl, "http://10.0.0.11:8080/admin/v2/x?a=1", "Location untouched");
        } else if (m == 1) {
            ok(v == LK_FLT_CONTINUE && x->leaks == 2 && x->rewrites == 2, "rewritten (%u)",
               x->rewrites);
            ok_str(sa, "broker=127.0.0.1:18081; other=1", "X-Something");
            ok_str(sl, "http://127.0.0.1:18081/admin/v2/x?a=1", "Location");
        } else {
            ok(v == LK_FLT_REPLY && x->reply_status == 502 && x->leaks == 1, "502");
            ok_str(x->reply_reason, "response would leak an internal broker address", "reason");
        }
        ok(x->body_filters == 0, "a binary body is not asked for");
        finish(x);
        lk_conf_unref(conf);
    }
    subtest(NULL);

    /* The default chain: the location filter has rewritten Location by the
     * time the guard looks; only X-Something is left. */
    struct lk_conf *conf = load("log", NULL);
    if (conf != NULL) {
        struct lk_xchg *x = start(conf, "/admin/v2/x", 307, hdrs, 0);
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "continue");
        struct lk_str *l = lk_http_find(&x->res, LK_STRLIT("Location"));
        ok(l != NULL && lk_str_eq(*l, LK_STRLIT("http://127.0.0.1:18081/admin/v2/x?a=1")),
           "Location rewritten by the location filter");
        ok(x->leaks == 1, "the guard counts only X-Something (%u)", x->leaks);
        finish(x);
        lk_conf_unref(conf);
    }

    /* rewrite without a selected listener: counted and logged, not changed */
    conf = load("rewrite", "filters = leak_guard");
    if (conf != NULL) {
        struct lk_xchg *x = start(conf, "/admin/v2/x", 307, hdrs, 0);
        x->listener_name = NULL;
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE && x->leaks == 2 && x->rewrites == 0,
           "no listener: counted, not rewritten");
        struct lk_str *l = lk_http_find(&x->res, LK_STRLIT("Location"));
        ok(l != NULL && lk_str_eq(*l, LK_STRLIT("http://10.0.0.11:8080/admin/v2/x?a=1")),
           "Location untouched");
        finish(x);
        lk_conf_unref(conf);
    }
}

/* The reason phrase, and interim and 101 heads (lk_flt_run_res_interim),
 * in each mode: log counts, rewrite replaces (a phrase by the standard
 * one, a field as ever), block refuses. */
static void
test_reason_and_interim(void)
{
    static const char *const link[] = {"Link", "<http://10.0.0.11:8080/app.js>; rel=preload", NULL};
    static const char *const modes[] = {"log", "rewrite", "block"};
    static const char phrase[] = "not served by this instance:10.0.0.11:8080";

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load(modes[m], "filters = leak_guard");
        if (conf == NULL)
            continue;
        subtest("%s", modes[m]);
        struct lk_xchg *x = start(conf, "/admin/v2/x", 503, NULL, 0);
        x->res.reason = lk_str_c(phrase);
        enum lk_flt_verdict v = lk_flt_run_res_headers(x);
        char got[128];
        snprintf(got, sizeof(got), "%.*s", (int)x->res.reason.len, x->res.reason.p);
        if (m == 0) {
            ok(v == LK_FLT_CONTINUE && x->leaks == 1, "phrase: counted (%u)", x->leaks);
            ok_str(got, phrase, "phrase untouched");
        } else if (m == 1) {
            ok(v == LK_FLT_CONTINUE && x->leaks == 1 && x->rewrites == 1, "phrase: replaced");
            ok_str(got, "Service Unavailable", "the standard phrase");
        } else {
            ok(v == LK_FLT_REPLY && x->reply_status == 502 && x->leaks == 1, "phrase: 502");
        }
        finish(x);

        /* a clean phrase is left alone in every mode */
        x = start(conf, "/admin/v2/x", 503, NULL, 0);
        x->res.reason = LK_STRLIT("busy, try 10.0.0.11:80800");
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE && x->leaks == 0 &&
               lk_str_eq(x->res.reason, LK_STRLIT("busy, try 10.0.0.11:80800")),
           "a phrase with no address: untouched");
        finish(x);

        for (int st = 103; st >= 101; st -= 2) {
            x = start(conf, "/admin/v2/x", st, link, 0);
            x->res.reason = LK_STRLIT("Interim");
            v = lk_flt_run_res_interim(x);
            struct lk_str *l = lk_http_find(&x->res, LK_STRLIT("Link"));
            snprintf(got, sizeof(got), "%.*s", l ? (int)l->len : 0, l ? l->p : "");
            if (m == 0) {
                ok(v == LK_FLT_CONTINUE && x->leaks == 1, "%d: counted", st);
                ok_str(got, link[1], "%d: Link untouched", st);
            } else if (m == 1) {
                ok(v == LK_FLT_CONTINUE && x->leaks == 1 && x->rewrites == 1, "%d: rewritten", st);
                ok_str(got, "<http://127.0.0.1:18081/app.js>; rel=preload", "%d: Link", st);
            } else {
                ok(v == LK_FLT_REPLY && x->leaks == 1, "%d: refused", st);
            }
            ok(x->body_filters == 0, "%d: no body asked for", st);
            finish(x);
        }
        lk_conf_unref(conf);
    }
    subtest(NULL);
}

/* Two Pulsar clusters: a broker of one naming a broker of the other (a
 * 307 across clusters) names an internal address all the same. */
#define TWO_CLUSTERS(o1_internal)                                                                  \
    "[pulsar prod]\n"                                                                              \
    "internalListenerName = internal\n"                                                            \
    "lookupListenerName = external\n"                                                              \
    "leak_guard = %s\n"                                                                            \
    "%s\n"                                                                                         \
    "[broker prod/b1]\n"                                                                           \
    "advertisedListeners = internal:http://10.0.0.11:8080,external:http://127.0.0.1:18081\n"       \
    "[pulsar other]\n"                                                                             \
    "internalListenerName = internal\n"                                                            \
    "lookupListenerName = external\n"                                                              \
    "[broker other/o1]\n"                                                                          \
    "advertisedListeners = internal:http://" o1_internal ",external:http://127.0.0.9:18091\n"
static const char two_fmt[] = TWO_CLUSTERS("10.9.0.21:8080");

static void
test_other_clusters(void)
{
    static const char *const hdrs[] = {"Location", "http://10.9.0.21:8080/admin/v2/x", NULL};
    static const char *const modes[] = {"log", "rewrite", "block"};

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load_fmt(two_fmt, modes[m], "filters = leak_guard");
        if (conf == NULL)
            continue;
        subtest("%s", modes[m]);
        struct lk_xchg *x = start(conf, "/admin/v2/x", 307, hdrs, 0);
        ok(x->cluster == conf->clusters[0] && x->broker == conf->clusters[0]->brokers[0],
           "an exchange of prod's b1");
        enum lk_flt_verdict v = lk_flt_run_res_headers(x);
        struct lk_str *l = lk_http_find(&x->res, LK_STRLIT("Location"));
        char got[128];
        snprintf(got, sizeof(got), "%.*s", l ? (int)l->len : 0, l ? l->p : "");
        if (m == 0) {
            ok(v == LK_FLT_CONTINUE && x->leaks == 1, "other's address: counted (%u)", x->leaks);
            ok_str(got, hdrs[1], "untouched");
        } else if (m == 1) {
            ok(v == LK_FLT_CONTINUE && x->leaks == 1 && x->rewrites == 1, "rewritten");
            ok_str(got, "http://127.0.0.9:18091/admin/v2/x", "to o1's external address");
        } else {
            ok(v == LK_FLT_REPLY && x->reply_status == 502 && x->leaks == 1, "502");
        }
        finish(x);

        /* the other cluster's guard (its own leak_guard, log) looks for
         * prod's addresses too */
        static const char *const back[] = {"X-Owner", "10.0.0.11:8080", NULL};
        x = start(conf, "/admin/v2/x", 200, back, 0);
        x->cluster = conf->clusters[1];
        x->broker = x->cluster->brokers[0];
        x->listener_name = x->cluster->lookup_listener;
        lk_flt_detach_all(x);
        lk_flt_attach_all(x);
        v = lk_flt_run_res_headers(x);
        ok(x->leaks == 1 && v == LK_FLT_CONTINUE,
           "other's exchange naming prod's b1: found, by other's mode, log (%u)", x->leaks);
        finish(x);
        lk_conf_unref(conf);
    }
    subtest(NULL);

    /* A host alone is read for only where no address lookout gives out
     * has it: here other's o1 is internally on 127.0.0.1, the host of
     * prod's external addresses, so prod's "127.0.0.1" is not o1's. */
    static const char same_fmt[] = TWO_CLUSTERS("127.0.0.1:8080");
    static const char *const own[] = {"X-Served-By", "\"127.0.0.1\"", "X-Peer", "\"10.0.0.11\"",
                                      NULL};
    struct lk_conf *conf = load_fmt(same_fmt, "log", "filters = leak_guard");
    if (conf != NULL) {
        struct lk_xchg *x = start(conf, "/admin/v2/x", 200, own, 0);
        enum lk_flt_verdict v = lk_flt_run_res_headers(x);
        ok(v == LK_FLT_CONTINUE && x->leaks == 1,
           "prod's own host alone is no leak of other's o1; its b1's internal host is (%u)",
           x->leaks);
        finish(x);
    }
    lk_conf_unref(conf);
}

/* Longer ports and IPs, other hosts: never a leak. */
static void
test_no_false_positive(void)
{
    static const char body[] =
        "[\"10.0.0.111:8080\",\"10.0.0.11:80800\",\"110.0.0.11:8080\",\"x10.0.0.11:8080\","
        "\"10.0.0.11:8081\",\"10.0.0.11:808\",\"a.pulsar-broker-2.pulsar-broker.svc.cluster.local:"
        "8080\",\"pulsar-broker-2.pulsar-broker.svc.cluster.local:80801\",\"[::1]:80800\","
        "\"10.0.0.111\",\"x10.0.0.11\",\"10.0.0.11x\",\"10.0.0.11 \",\"127.0.0.1\",\":8080\","
        "\"http:/10.0.0.11:80800\"]";
    static const char *const modes[] = {"log", "rewrite", "block"};

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load(modes[m], NULL);
        if (conf != NULL)
            check(conf, modes[m], json_hdrs, body, 0, LK_FLT_CONTINUE, NULL, 0, 0);
        lk_conf_unref(conf);
    }
}

/*
 * A broker named by its host alone, outside host:port: the functions
 * worker that runs in a broker answers /admin/v2/worker/cluster with its
 * workerHostname (the broker's advertisedAddress) and its port apart.
 * Each hostname is a leak, which rewrite replaces with the selected
 * listener's host; the workerId "c-CLUSTER-fw-HOST-PORT" is not read
 * (lk_guard.c says why).
 */
static void
test_host_alone(void)
{
    static const char body[] =
        "[{\"workerId\":\"c-prod-fw-10.0.0.11-8080\",\"workerHostname\":\"10.0.0.11\","
        "\"port\":8080},{\"workerId\":\"c-prod-fw-pulsar-broker-2.pulsar-broker.svc.cluster."
        "local-8080\",\"workerHostname\":\"pulsar-broker-2.pulsar-broker.svc.cluster.local\","
        "\"port\":8080}]";
    static const char want[] =
        "[{\"workerId\":\"c-prod-fw-10.0.0.11-8080\",\"workerHostname\":\"127.0.0.1\","
        "\"port\":8080},{\"workerId\":\"c-prod-fw-pulsar-broker-2.pulsar-broker.svc.cluster."
        "local-8080\",\"workerHostname\":\"127.0.0.2\",\"port\":8080}]";
    static const char config[] = "{\"advertisedAddress\":\"[::1]\",\"host\":\"::1\"}";
    struct lk_conf *conf;

    check_modes(json_hdrs, body, 2, want, 2);
    /* b3's host is an IPv6 literal: "::1" is it, "[::1]" is not a host
     * alone (the URL form, without a port) */
    if ((conf = load("log", NULL)) != NULL)
        check(conf, "log, IPv6", json_hdrs, config, 0, LK_FLT_CONTINUE, NULL, 1, 0);
    lk_conf_unref(conf);
}

/* What each mode holds back, and when block releases. */
static void
test_holding(void)
{
    char body[12000];
    struct lk_conf *conf;
    struct result r;
    size_t len;

    /* a long JSON body with a leak near the end */
    len = (size_t)snprintf(body, sizeof(body), "[");
    while (len < 10000)
        len += (size_t)snprintf(body + len, sizeof(body) - len, "\"topic-%zu\",", len);
    len += (size_t)snprintf(body + len, sizeof(body) - len,
                            "\"pulsar-broker-2.pulsar-broker.svc.cluster.local:8080\"]");

    /* the guard alone: the lookup filter would buffer a JSON 200 first */
    if ((conf = load("log", "filters = leak_guard")) != NULL) {
        struct lk_xchg *x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, body, len, 1000, &r);
        ok(r.v == LK_FLT_CONTINUE && strcmp(r.out, body) == 0 && x->leaks == 1,
           "log: passed, counted");
        ok(r.first_out == 1000 && r.max_held == 0, "log holds nothing back (%zu, %zu)", r.first_out,
           r.max_held);
        free(r.out);
        finish(x);
    }
    lk_conf_unref(conf);

    if ((conf = load("rewrite", "filters = leak_guard")) != NULL) {
        /* one byte at a time: the hold-back never passes the longest pattern */
        struct lk_xchg *x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
        size_t longest = strlen("http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080");
        lk_flt_run_res_headers(x);
        run_body(x, body, len, 1, &r);
        ok(r.v == LK_FLT_CONTINUE && x->leaks == 1 && x->rewrites == 1 &&
               strstr(r.out, "\"127.0.0.2:18082\"]") != NULL,
           "rewrite: rewritten");
        ok(r.max_held <= longest && r.max_held > 0, "rewrite holds back at most %zu bytes (%zu)",
           longest, r.max_held);
        free(r.out);
        finish(x);
    }
    lk_conf_unref(conf);

    if ((conf = load("block", "filters = leak_guard")) != NULL) {
        /* past max_buffer_bytes (4k) the body streams; a leak after that
         * can only cut the connection */
        struct lk_xchg *x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, body, len, 1000, &r);
        ok(r.v == LK_FLT_ERROR, "block, leak after release: error (%d)", r.v);
        ok(r.out_at_stop > 4096 && r.out_at_stop < len, "%zu bytes had gone out", r.out_at_stop);
        ok(r.first_out == 0 && r.max_held <= 4096 + 1000, "held up to the cap (%zu)", r.max_held);
        ok(x->leaks == 1, "counted");
        free(r.out);
        finish(x);

        /* the same leak near the start: a clean 502 */
        char early[12000];
        int n = snprintf(early, sizeof(early), "[\"10.0.0.11:8080\",%s", body + 1);
        x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, early, (size_t)n, 1000, &r);
        ok(r.v == LK_FLT_REPLY && r.out_at_stop == 0 && x->reply_status == 502,
           "block, leak before release: 502, nothing released");
        free(r.out);
        finish(x);

        /* no leak, under the cap: held to the end, then all of it */
        static const char small[] = "{\"brokers\":[\"127.0.0.1:18081\"]}";
        x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, small, strlen(small), 3, &r);
        ok(r.v == LK_FLT_CONTINUE && strcmp(r.out, small) == 0 && r.first_out == 0,
           "block, clean: held, then released whole");
        free(r.out);
        finish(x);

        /* no leak, over the cap: streams once past it, whole and unchanged */
        static const char clean_tail[] = "\"127.0.0.1:18081\"]";
        memcpy(body + len - strlen("\"pulsar-broker-2.pulsar-broker.svc.cluster.local:8080\"]"),
               clean_tail, sizeof(clean_tail));
        len = strlen(body);
        x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, body, len, 1000, &r);
        ok(r.v == LK_FLT_CONTINUE && strcmp(r.out, body) == 0 && x->leaks == 0,
           "block, clean and long: passed whole");
        free(r.out);
        finish(x);
    }
    lk_conf_unref(conf);
}

/* Binary and compressed bodies are not read; no Content-Type is text. */
static void
test_content_types(void)
{
    static const struct {
        const char *ct, *ce;
        int read;
    } t[] = {
        {"application/json", NULL, 1},
        {"APPLICATION/JSON", NULL, 1},
        {"application/json ", NULL, 1},
        {"Application/JSON; charset=UTF-8", NULL, 1},
        {"APPLICATION/X-WWW-FORM-URLENCODED", NULL, 1},
        {"Application/Javascript", NULL, 1},
        /* a byte apart only in bit 0x20 from a '/', a '-' or a letter's other case */
        {"application\x0fjson", NULL, 0},
        {"application/x\x0dndjson", NULL, 0},
        {"applicatioN/jsoo", NULL, 0},
        {"application/jso", NULL, 0},
        {"application/jsonp", NULL, 0},
        {"application/problem+json", NULL, 1},
        {"text/html", NULL, 1},
        {"text/plain", "identity", 1},
        {NULL, NULL, 1},
        {"application/xml", NULL, 1},
        {"TEXT/CSV", NULL, 1},
        {"tExT/x", NULL, 1},
        {"texu/plain", NULL, 0},
        {"text", NULL, 0},
        {"text-plain", NULL, 0},
        {"application/atom+XML", NULL, 1},
        {"application/vnd.api+Json", NULL, 1},
        {"application/octet-stream", NULL, 0},
        {"application/json+zip", NULL, 0},
        {"textual/x", NULL, 0},
        {"application/x-protobuf", NULL, 0},
        {"image/png", NULL, 0},
        /* text lookout cannot read (2): block will not pass it unchecked */
        {"application/json", "gzip", 2}, /* not gzip data: broken */
        {"text/plain", "br", 2},
        {"text/plain", "gzip, br", 2},
        {"application/octet-stream", "br", 0},
    };
    struct lk_conf *conf = load("block", NULL);

    if (conf == NULL)
        return;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        const char *hdrs[5] = {NULL};
        size_t n = 0;
        struct result r;
        if (t[i].ct != NULL)
            hdrs[n++] = "Content-Type", hdrs[n++] = t[i].ct;
        if (t[i].ce != NULL)
            hdrs[n++] = "Content-Encoding", hdrs[n++] = t[i].ce;
        subtest("%s %s", t[i].ct ? t[i].ct : "(no type)", t[i].ce ? t[i].ce : "");
        struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, hdrs, 0);
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "head continues");
        run_body(x, brokers_body, strlen(brokers_body), 7, &r);
        if (t[i].read == 1)
            ok(r.v == LK_FLT_REPLY && x->leaks == 1, "read: 502");
        else if (t[i].read == 2)
            ok(r.v == LK_FLT_REPLY && x->leaks == 0, "cannot be read: 502, no leak counted");
        else
            ok(r.v == LK_FLT_CONTINUE && strcmp(r.out, brokers_body) == 0 && x->leaks == 0,
               "not read: passed unchanged");
        free(r.out);
        finish(x);
    }
    subtest(NULL);
    lk_conf_unref(conf);
    /* log and rewrite let what they cannot read go by, as it came */
    for (int m = 0; m < 2; m++) {
        const char *hdrs[] = {"Content-Type", "text/plain", "Content-Encoding", "br", NULL};
        struct result r;
        if ((conf = load(m == 0 ? "log" : "rewrite", NULL)) == NULL)
            return;
        struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, hdrs, 0);
        ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "%s, br: head continues",
           m == 0 ? "log" : "rewrite");
        run_body(x, brokers_body, strlen(brokers_body), 7, &r);
        ok(r.v == LK_FLT_CONTINUE && strcmp(r.out, brokers_body) == 0 && x->leaks == 0,
           "... the body passes unread and unchanged");
        free(r.out);
        finish(x);
        lk_conf_unref(conf);
    }
}

/* Compresses src as gzip (wbits 31) or zlib "deflate" (wbits 15). */
static size_t
deflate_to(const char *src, size_t len, unsigned char *dst, size_t cap, int wbits)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 9, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return 0;
    z.next_in = (unsigned char *)src;
    z.avail_in = (uInt)len;
    z.next_out = dst;
    z.avail_out = (uInt)cap;
    int zr = deflate(&z, Z_FINISH);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    return zr == Z_STREAM_END ? n : 0;
}

/* A gzip or deflate body is read through zlib and passed on as it came. */
static void
test_compressed(void)
{
    static const char *const modes[] = {"log", "rewrite", "block"};
    unsigned char gz[1024], both[2048];
    size_t n = deflate_to(brokers_body, strlen(brokers_body), gz, sizeof(gz), 31);
    size_t nd, n2;

    if (!ok(n > 0, "gzip made"))
        return;
    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load(modes[m], NULL);
        static const char *const hdrs[] = {"Content-Type", "application/json", "Content-Encoding",
                                           "gzip", NULL};
        if (conf == NULL)
            continue;
        for (size_t s = 0; s < NSIZES; s++) {
            struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, hdrs, 0);
            struct result r;
            subtest("gzip, %s, pieces of %zu", modes[m], sizes[s]);
            ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "head continues");
            run_body(x, (const char *)gz, n, sizes[s], &r);
            if (m == 2) {
                ok(r.v == LK_FLT_REPLY && r.out_at_stop == 0 && x->leaks == 1, "502");
            } else {
                ok(r.v == LK_FLT_CONTINUE && r.out_at_stop == n && memcmp(r.out, gz, n) == 0,
                   "the compressed bytes pass unchanged");
                ok(x->leaks == 3 && x->rewrites == 0, "3 leaks counted (%u), none rewritten",
                   x->leaks);
            }
            free(r.out);
            finish(x);
        }
        lk_conf_unref(conf);
    }
    subtest(NULL);

    struct lk_conf *conf = load("log", "filters = leak_guard");
    if (conf == NULL)
        return;
    /* "deflate" is the zlib format */
    static const char *const dhdrs[] = {"Content-Type", "application/json", "Content-Encoding",
                                        "deflate", NULL};
    nd = deflate_to(brokers_body, strlen(brokers_body), both, sizeof(both), 15);
    struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, dhdrs, 0);
    struct result r;
    lk_flt_run_res_headers(x);
    run_body(x, (const char *)both, nd, 5, &r);
    ok(r.v == LK_FLT_CONTINUE && r.out_at_stop == nd && x->leaks == 3, "deflate: read (%u)",
       x->leaks);
    free(r.out);
    finish(x);

    /* two gzip members, back to back (RFC 1952 §2.2) */
    static const char *const ghdrs[] = {"Content-Type", "application/json", "Content-Encoding",
                                        "x-gzip", NULL};
    memcpy(both, gz, n);
    n2 = deflate_to("{\"owner\":\"10.0.0.11:8080\"}", 26, both + n, sizeof(both) - n, 31);
    x = start(conf, "/admin/v2/brokers/prod", 200, ghdrs, 0);
    lk_flt_run_res_headers(x);
    run_body(x, (const char *)both, n + n2, 3, &r);
    ok(r.v == LK_FLT_CONTINUE && r.out_at_stop == n + n2 && x->leaks == 4,
       "two members: both read (%u)", x->leaks);
    free(r.out);
    finish(x);

    /* a gzip that breaks half way: what came before is read, the rest passes */
    memcpy(both, gz, n);
    memset(both + n / 2, 0xff, n - n / 2);
    x = start(conf, "/admin/v2/brokers/prod", 200, ghdrs, 0);
    lk_flt_run_res_headers(x);
    run_body(x, (const char *)both, n, 7, &r);
    ok(r.v == LK_FLT_CONTINUE && r.out_at_stop == n && memcmp(r.out, both, n) == 0,
       "broken gzip: passed unchanged (%u leaks seen before the break)", x->leaks);
    free(r.out);
    finish(x);
    lk_conf_unref(conf);

    /* What cannot be read on: a gzip body whose data is broken,
     * and one that inflates past 64 times max_buffer_bytes with an
     * internal address after that.  log lets the rest go unread; block
     * answers 502 rather than pass it unchecked. */
    static char big[80 * 1024 + 64];
    memset(big, ' ', sizeof(big));
    memcpy(big + sizeof(big) - 40, "{\"owner\":\"10.0.0.11:8080\"}", 26);
    big[sizeof(big) - 1] = 0;
    unsigned char bad[1024], bomb[1024];
    size_t nb = deflate_to("{\"clean\":\"nothing to see in here at all\"}", 42, bad, sizeof(bad), 31);
    size_t nz = deflate_to(big, sizeof(big) - 1, bomb, sizeof(bomb), 31);
    ok(nb > 20 && nz > 0, "a clean gzip and a deflate bomb made (%zu bytes of %zu)", nz,
       sizeof(big) - 1);
    memset(bad + 10, 0xff, 4); /* its data, after the gzip header: a block of type 3, invalid */
    for (size_t m = 0; m < 3; m += 2) {
        if ((conf = load(modes[m], NULL)) == NULL)
            return;
        conf->max_buffer_bytes = 1024; /* inflates to 64 KiB at most */
        for (int which = 0; which < 2; which++) {
            const unsigned char *body = which == 0 ? bad : bomb;
            size_t len = which == 0 ? nb : nz;
            x = start(conf, "/admin/v2/brokers/prod", 200, ghdrs, 0);
            lk_flt_run_res_headers(x);
            run_body(x, (const char *)body, len, 64, &r);
            if (m == 2)
                ok(r.v == LK_FLT_REPLY && r.out_at_stop == 0 && x->leaks == 0,
                   "block, %s: 502, nothing of it sent, no leak counted (%d, %zu, %u)",
                   which == 0 ? "broken gzip" : "gzip past the bound", (int)r.v, r.out_at_stop,
                   x->leaks);
            else
                ok(r.v == LK_FLT_CONTINUE && r.out_at_stop == len && memcmp(r.out, body, len) == 0,
                   "log, %s: passed unread and unchanged",
                   which == 0 ? "broken gzip" : "gzip past the bound");
            free(r.out);
            finish(x);
        }
        lk_conf_unref(conf);
    }
}

/* rewrite and block ask brokers for identity; log leaves the request be. */
static void
test_request(void)
{
    static const char *const modes[] = {"log", "rewrite", "block"};

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load(modes[m], "filters = leak_guard");
        if (conf == NULL)
            continue;
        struct lk_xchg *x = start(conf, "/admin/v2/brokers/prod", 200, NULL, 0);
        lk_http_add(&x->req, LK_STRLIT("Accept-Encoding"), LK_STRLIT("gzip, deflate"));
        ok(lk_flt_run_req_headers(x) == LK_FLT_CONTINUE, "%s: continue", modes[m]);
        struct lk_str *ae = lk_http_find(&x->req, LK_STRLIT("Accept-Encoding"));
        ok(ae != NULL &&
               lk_str_eq(*ae, m == 0 ? LK_STRLIT("gzip, deflate") : LK_STRLIT("identity")),
           "%s: Accept-Encoding %.*s", modes[m], ae ? (int)ae->len : 0, ae ? ae->p : "");
        finish(x);
        lk_conf_unref(conf);
    }
}

/* A 5.0 LookupData body carries brokerId, an identifier in internal
 * host:port form: once the lookup filter has rewritten every address field,
 * block mode rewrites the brokerId rather than refuse every 5.0 lookup; a
 * body the lookup filter did not vouch for is still blocked. */
static void
test_lookup_vetted(void)
{
    static const char lookup_body[] =
        "{\"brokerId\":\"10.0.0.11:8080\",\"brokerUrl\":\"pulsar://10.0.0.11:6650\","
        "\"httpUrl\":\"http://10.0.0.11:8080\",\"nativeUrl\":\"pulsar://10.0.0.11:6650\","
        "\"brokerUrlSsl\":\"\"}";
    struct lk_conf *conf = load("block", NULL);
    struct result r;

    if (conf == NULL)
        return;
    struct lk_xchg *x = start(conf, "/lookup/v2/topic/persistent/t/n/x", 200, json_hdrs, 0);
    ok(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE, "head passes");
    run_body(x, lookup_body, strlen(lookup_body), 0, &r);
    ok(r.v == LK_FLT_CONTINUE, "a rewritten LookupData body is not blocked");
    ok(x->body_vetted, "the lookup filter vouched for it");
    ok(strstr(r.out, "\"brokerId\":\"127.0.0.1:18081\"") != NULL,
       "its brokerId rewritten, no internal address left (%s)", r.out);
    ok(x->leaks == 1, "counted as a leak (%u)", x->leaks);
    ok(strstr(r.out, "\"httpUrl\":\"https://127.0.0.1:18443\"") == NULL &&
           strstr(r.out, "\"httpUrl\":\"http://127.0.0.1:18081\"") != NULL,
       "the addresses are the listener's");
    free(r.out);
    finish(x);

    /* b3's listener has no http address: its brokerId becomes
     * webServiceUrl's host:port (lk_location_pick), and without
     * webServiceUrl it cannot be rewritten: block mode refuses the body
     * after all */
    static const char b3_body[] =
        "{\"brokerId\":\"[::1]:8080\",\"brokerUrl\":\"pulsar://[::1]:6650\","
        "\"httpUrl\":\"http://[::1]:8080\",\"nativeUrl\":\"pulsar://[::1]:6650\"}";
    x = start(conf, "/lookup/v2/topic/persistent/t/n/y", 200, json_hdrs, 0);
    lk_flt_run_res_headers(x);
    run_body(x, b3_body, strlen(b3_body), 0, &r);
    ok(x->body_vetted, "the lookup filter set b3's address fields");
    ok(r.v == LK_FLT_CONTINUE && strstr(r.out, "\"brokerId\":\"127.0.0.1:18080\"") != NULL,
       "a brokerId without a listener address becomes webServiceUrl's (%s)", r.out);
    free(r.out);
    finish(x);
    struct lk_conf *bare = load_no_web("block");
    if (bare != NULL) {
        x = start(bare, "/lookup/v2/topic/persistent/t/n/y", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, b3_body, strlen(b3_body), 0, &r);
        ok(r.v == LK_FLT_REPLY && x->reply_status == 502,
           "a brokerId that cannot be rewritten is still refused");
        free(r.out);
        finish(x);
    }
    lk_conf_unref(bare);

    /* the same address in a body that is not LookupData: blocked */
    static const char other[] = "{\"owner\":\"10.0.0.11:8080\"}";
    x = start(conf, "/admin/v2/persistent/t/n/x/stats", 200, json_hdrs, 0);
    lk_flt_run_res_headers(x);
    run_body(x, other, strlen(other), 0, &r);
    ok(r.v == LK_FLT_REPLY && x->reply_status == 502, "a stats body with the address is blocked");
    ok(!x->body_vetted, "nobody vouched for it");
    free(r.out);
    finish(x);
    lk_conf_unref(conf);
}

/* Binary answers ------------------------------------------------------------ */

/* The map fmt with its leak_guard = mode, loaded (what names it in the
 * test's line), or NULL. */
static struct lk_conf *
load_map(const char *fmt, const char *mode, const char *what)
{
    char text[2048], err[512];
    struct lk_conf *conf;

    snprintf(text, sizeof(text), fmt, mode);
    conf = lk_conf_load_buf("k.conf", text, strlen(text), err, sizeof(err));
    if (!ok(conf != NULL, "%s loads (leak_guard = %s)", what, mode))
        lk_test_diag("%s", err);
    return conf;
}

static struct lk_conf *
load_kafka(const char *mode)
{
    return load_map(lk_fuzz_kafka_guard_map, mode, "Kafka config");
}

/* Runs one binary frame through the cluster's chain as the protocol
 * modules do; *out gets what the client would (malloc'd), NULL when the
 * chain refused it. */
static enum lk_flt_verdict
run_frame(struct lk_conf *conf, unsigned proto, int key, int16_t version, const struct tb *f,
          unsigned *leaks, unsigned *rewrites, struct tb *out)
{
    struct lk_xchg *x = calloc(1, sizeof(*x));
    struct evbuffer *in = evbuffer_new(), *o = evbuffer_new();
    enum lk_flt_verdict v;

    lk_pool_init(&x->pool);
    x->conf = conf;
    x->cluster = conf->clusters[0];
    x->broker = x->cluster->brokers[0];
    x->listener_name = x->cluster->lookup_listener;
    x->proto = proto;
    lk_flt_attach_all(x);
    evbuffer_add(in, f->p, f->len);
    v = proto == LK_PROTO_PULSAR ? lk_flt_run_pulsar(x, key, NULL, in, o)
                                 : lk_flt_run_frame(x, (int16_t)key, version, in, o);
    *leaks = x->leaks;
    *rewrites = x->rewrites;
    out->len = 0;
    put(out, evbuffer_pullup(o, -1), evbuffer_get_length(o));
    evbuffer_free(in);
    evbuffer_free(o);
    finish(x);
    return v;
}

static void
w32(struct tb *b, uint32_t v)
{
    uint8_t p[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(b, p, 4);
}

/* A compact string (length + 1 as a varint, two bytes past 126). */
static void
cstr(struct tb *b, const char *s)
{
    size_t n = strlen(s) + 1;
    if (n >= 128) {
        w8(b, (int)((n & 0x7f) | 0x80));
        w8(b, (int)(n >> 7));
    } else {
        w8(b, (int)n);
    }
    put(b, s, n - 1);
}

/* A Kafka frame's size field, from what b holds. */
static void
kafka_size(struct tb *b)
{
    uint32_t size = (uint32_t)b->len - 4;
    b->p[0] = (uint8_t)(size >> 24), b->p[1] = (uint8_t)(size >> 16);
    b->p[2] = (uint8_t)(size >> 8), b->p[3] = (uint8_t)size;
}

/* A flexible Metadata answer (v9+ layout up to the brokers, then a
 * ClusterId, as later fields go): brokers (id, host, port), the frame's
 * size fixed at the end.  extra: one more entry claimed than given. */
static void
metadata(struct tb *b, const int32_t *ids, const char *const *hosts, const int32_t *ports, size_t n,
         int extra)
{
    b->len = 0;
    w32(b, 0); /* size, below */
    w32(b, 7); /* correlation id */
    w8(b, 0);  /* header tags */
    w32(b, 0); /* ThrottleTimeMs */
    w8(b, (int)(n + 1 + (extra ? 1 : 0)));
    for (size_t i = 0; i < n; i++) {
        w32(b, (uint32_t)ids[i]);
        cstr(b, hosts[i]);
        w32(b, (uint32_t)ports[i]);
        w8(b, 0); /* Rack: null */
        w8(b, 0); /* tags */
    }
    if (!extra) {
        cstr(b, "cluster-id");
        w8(b, 0);
    }
    kafka_size(b);
}

/* A DescribeConfigs vN answer (v2: INT16 strings; v4: flexible) for
 * BROKER "1" with one config, name = value, the frame's size set. */
static void
describe_configs(struct tb *f, int16_t dv, const char *name, const char *value)
{
    int flex = dv >= 4;

    f->len = 0;
    w32(f, 0);
    w32(f, 13); /* CorrelationId */
    if (flex)
        w8(f, 0); /* header tags */
    w32(f, 0);    /* ThrottleTimeMs */
    if (flex)
        w8(f, 2); /* Results: 1 */
    else
        w32(f, 1);
    w8(f, 0), w8(f, 0); /* ErrorCode */
    if (flex)
        w8(f, 0); /* ErrorMessage: null */
    else
        w8(f, 0xff), w8(f, 0xff);
    w8(f, 4); /* ResourceType: BROKER */
    if (flex) {
        cstr(f, "1"); /* ResourceName */
        w8(f, 2);     /* Configs: 1 */
        cstr(f, name);
        cstr(f, value);
    } else {
        w8(f, 0), w8(f, 1), put(f, "1", 1);
        w32(f, 1);
        for (int k = 0; k < 2; k++) {
            const char *t = k == 0 ? name : value;
            w8(f, (int)(strlen(t) >> 8)), w8(f, (int)(strlen(t) & 0xff));
            put(f, t, strlen(t));
        }
    }
    w8(f, 1); /* ReadOnly */
    w8(f, 4); /* ConfigSource: STATIC_BROKER_CONFIG */
    w8(f, 0); /* IsSensitive */
    if (flex) {
        w8(f, 1); /* Synonyms: none */
        w8(f, 2); /* ConfigType: STRING */
        w8(f, 0); /* Documentation: null */
        w8(f, 0); /* config tags */
        w8(f, 0); /* result tags */
        w8(f, 0); /* tags */
    } else {
        w32(f, 0); /* Synonyms: none */
    }
    kafka_size(f);
}

/* A DescribeQuorum v2 answer: no topics, node 3000 + i with one
 * CONTROLLER listener at hosts[i]:ports[i]. */
static void
describe_quorum(struct tb *f, const char *const *hosts, const int *ports, size_t n)
{
    f->len = 0;
    w32(f, 0);
    w32(f, 12);           /* CorrelationId */
    w8(f, 0);             /* header tags */
    w8(f, 0), w8(f, 0);   /* ErrorCode */
    w8(f, 0);             /* ErrorMessage: null */
    w8(f, 1);             /* Topics: none */
    w8(f, (int)(n + 1));  /* Nodes */
    for (size_t i = 0; i < n; i++) {
        w32(f, (uint32_t)(3000 + i));
        w8(f, 2); /* Listeners: 1 */
        cstr(f, "CONTROLLER");
        cstr(f, hosts[i]);
        w8(f, ports[i] >> 8), w8(f, ports[i] & 0xff);
        w8(f, 0), w8(f, 0); /* Listener, Node tags */
    }
    w8(f, 0); /* tags */
    f->p[3] = (uint8_t)(f->len - 4);
}

static int
has(const struct tb *b, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->len; i++)
        if (memcmp(b->p + i, s, n) == 0)
            return 1;
    return 0;
}

static void
test_kafka_answers(void)
{
    static const char *const modes[] = {"log", "rewrite", "block"};
    static const char long_host[] = "kafka-10.kafka-headless.kafka.svc.cluster.local";
    struct tb f = {0}, out = {0};
    unsigned leaks, rewrites;
    enum lk_flt_verdict v;

    ok(strlen(long_host) + 1 == '0',
       "the long host's compact length byte is '0', a host character");
    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load_kafka(modes[m]);
        int block = m == 2;
        if (conf == NULL)
            continue;
        subtest("leak_guard = %s", modes[m]);
        ok(guard_index(conf->clusters[0]) == 1, "the default chain: kafka, then leak_guard");

        /* A version lookout does not decode: read as bytes. */
        {
            const int32_t ids[] = {1, 2}, ports[] = {9092, 9092};
            const char *const hosts[] = {"10.0.0.21", long_host};
            metadata(&f, ids, hosts, ports, 2, 0);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 14, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE), "Metadata v14: verdict %d", v);
            ok(leaks == 2 && rewrites == 0,
               "... both internal hosts found (%u), nothing rewritten (%u)", leaks, rewrites);
            ok(block ? out.len == 0 : out.len == f.len && memcmp(out.p, f.p, f.len) == 0, "... %s",
               block ? "nothing goes out" : "it goes out as it came");
            /* The same bytes as a FetchSnapshot answer (a controller's:
             * v1 names the leader's endpoints, KIP-853, and a metadata
             * snapshot every broker's listeners): read as bytes too. */
            for (int16_t sv = 0; sv <= 1; sv++) {
                v = run_frame(conf, LK_PROTO_KAFKA, 59, sv, &f, &leaks, &rewrites, &out);
                ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 2 && rewrites == 0,
                   "FetchSnapshot v%d holding both internal hosts: verdict %d, %u leaks", sv, v,
                   leaks);
            }

            /* the same, decodable: rewritten, nothing left */
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 12, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0 && rewrites == 2,
               "Metadata v12: both rewritten (%u), no leak (%u)", rewrites, leaks);
            ok(!has(&out, "10.0.0.21") && !has(&out, long_host) && has(&out, "127.0.0.1"),
               "... only lookout's addresses go out");

            /* does not decode: nothing counted as rewritten, the hosts found */
            metadata(&f, ids, hosts, ports, 2, 1);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 12, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 2 && rewrites == 0,
               "Metadata v12 that does not decode: %u leaks, %u rewrites", leaks, rewrites);
        }
        /* A string that starts with an internal "host:port", its length
         * right before it: a compact length of 46 is '.', 49 to 58 a
         * digit, 66 to 123 mostly a letter, all host characters.  Here
         * the ClusterId of a Metadata v12 whose one broker is lookout's. */
        {
            const int32_t ids[] = {1}, ports[] = {19092};
            const char *const hosts[] = {"127.0.0.1"};
            int found_all = 1;
            size_t len;
            for (len = 14; len <= 120 && found_all; len++) {
                char cid[128];
                memset(cid, ' ', len);
                memcpy(cid, "10.0.0.21:9092", 14);
                cid[len] = 0;
                metadata(&f, ids, hosts, ports, 1, 1); /* the ClusterId is ours, below */
                cstr(&f, cid);
                w8(&f, 0);
                kafka_size(&f);
                f.p[13] = 2; /* one broker, as given */
                v = run_frame(conf, LK_PROTO_KAFKA, 3, 12, &f, &leaks, &rewrites, &out);
                if (v != (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) || leaks != 1) {
                    found_all = 0;
                    lk_test_diag("a ClusterId of %zu bytes starting with 10.0.0.21:9092: %u leaks",
                                 len, leaks);
                }
            }
            ok(found_all, "a string starting with an internal host:port, after a compact "
                          "length of 15 to %zu: always a leak", len);
            /* one ending with it, a digit right after ('5': no tagged
             * fields section can follow, so the answer is read as bytes) */
            metadata(&f, ids, hosts, ports, 1, 1);
            cstr(&f, "see 10.0.0.21:9092");
            w8(&f, '5');
            kafka_size(&f);
            f.p[13] = 2;
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 12, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "a string ending with an internal host:port, a digit after it: %u leak", leaks);
        }
        /* Bytes after an answer's last field: no client reads them, but
         * they reach it; an internal address there is found.  (Found by
         * fuzz_kafka_pair: a Produce v10 answer that decoded, with a host
         * in what followed.) */
        {
            const int32_t ids[] = {1}, ports[] = {9092};
            const char *const hosts[] = {"10.0.0.21"};
            metadata(&f, ids, hosts, ports, 1, 0);
            w8(&f, 0);
            w8(&f, 9);
            put(&f, "10.0.0.21", 9);
            w32(&f, 9092);
            size_t n = f.len - 4;
            f.p[0] = (uint8_t)(n >> 24), f.p[1] = (uint8_t)(n >> 16), f.p[2] = (uint8_t)(n >> 8),
            f.p[3] = (uint8_t)n;
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 12, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 1,
               "Metadata v12 with 10.0.0.21:9092 after its last field: %u leak, %u rewrite", leaks,
               rewrites);
        }
        /* A string field that is no endpoint (DescribeCluster v0's
         * ErrorMessage) naming an internal address: decoded, and read as
         * bytes too.  (Found by fuzz_kafka_pair.) */
        {
            f.len = 0;
            w32(&f, 0);
            w32(&f, 5);                                     /* CorrelationId */
            w8(&f, 0);                                      /* header tags */
            w32(&f, 0);                                     /* ThrottleTimeMs */
            w8(&f, 0), w8(&f, 15);                          /* ErrorCode */
            cstr(&f, "broker 10.0.0.21:9092 is not available"); /* ErrorMessage */
            cstr(&f, "c");                                  /* ClusterId */
            w32(&f, 1);                                     /* ControllerId */
            w8(&f, 1);                                      /* Brokers: none */
            w32(&f, 0);                                     /* ClusterAuthorizedOperations */
            w8(&f, 0);                                      /* tags */
            f.p[3] = (uint8_t)(f.len - 4);
            v = run_frame(conf, LK_PROTO_KAFKA, 60, 0, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "DescribeCluster v0 whose ErrorMessage names 10.0.0.21:9092: %u leak", leaks);
        }
        /* DescribeConfigs of a broker: its advertised.listeners name its
         * internal listener among the others, and
         * controller.quorum.bootstrap.servers is one address alone (a
         * string starting with it, its length byte before it).  Every
         * version is read as bytes: v2 (INT16 strings) and v4 (flexible,
         * compact strings, tagged fields). */
        for (int16_t dv = 2; dv <= 4; dv += 2) {
            static const char *const names[] = {"advertised.listeners",
                                                "controller.quorum.bootstrap.servers"};
            static const char *const values[] = {
                "INTERNAL://10.0.0.21:9092,EXTERNAL://b1.kafka.example.com:9093", "10.0.0.21:9092"};
            for (int which = 0; which < 2; which++) {
                describe_configs(&f, dv, names[which], values[which]);
                v = run_frame(conf, LK_PROTO_KAFKA, 32, dv, &f, &leaks, &rewrites, &out);
                ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 0,
                   "DescribeConfigs v%d, %s = %s: verdict %d, %u leak", dv, names[which],
                   values[which], v, leaks);
                ok(block ? out.len == 0 : out.len == f.len && memcmp(out.p, f.p, f.len) == 0,
                   "... %s", block ? "nothing goes out" : "it goes out as it came");
            }
        }
        /* KIP-1071: a StreamsGroupHeartbeat v0 answer whose
         * PartitionsByUserEndpoint names an application endpoint equal to
         * broker k/1's internal address, and one inside the brokers'
         * network: the user's, never a leak, never rewritten, in every
         * mode (the codec rates Streams answers NONE). */
        {
            f.len = 0;
            w32(&f, 0);
            w32(&f, 11);                    /* CorrelationId */
            w8(&f, 0);                      /* header tags */
            w32(&f, 0);                     /* ThrottleTimeMs */
            w8(&f, 0), w8(&f, 0);           /* ErrorCode */
            w8(&f, 0);                      /* ErrorMessage: null */
            cstr(&f, "member-1");           /* MemberId */
            w32(&f, 3);                     /* MemberEpoch */
            w32(&f, 5000), w32(&f, 10000);  /* HeartbeatIntervalMs, AcceptableRecoveryLag */
            w32(&f, 60000);                 /* TaskOffsetIntervalMs */
            w8(&f, 0), w8(&f, 0), w8(&f, 0), w8(&f, 0); /* Status, Active/Standby/Warmup: null */
            w8(&f, 3);                      /* PartitionsByUserEndpoint: 2 */
            const char *const app[] = {"10.0.0.21", "10.0.0.5"};
            const int app_port[] = {9092, 8080};
            for (int i = 0; i < 2; i++) {
                cstr(&f, app[i]);           /* UserEndpoint.Host */
                w8(&f, app_port[i] >> 8), w8(&f, app_port[i] & 0xff); /* .Port uint16 */
                w8(&f, 0);                  /* UserEndpoint tags */
                w8(&f, 2);                  /* Partitions: 1 */
                cstr(&f, "words");
                w8(&f, 2), w32(&f, (uint32_t)i);
                w8(&f, 0), w8(&f, 0);       /* TopicPartition, EndpointToPartitions tags */
            }
            w8(&f, 0);                      /* tags */
            f.p[3] = (uint8_t)(f.len - 4);
            for (int16_t sv = 0; sv <= 1; sv++) {
                v = run_frame(conf, LK_PROTO_KAFKA, 88, sv, &f, &leaks, &rewrites, &out);
                ok(v == LK_FLT_CONTINUE && leaks == 0 && rewrites == 0 && out.len == f.len &&
                       memcmp(out.p, f.p, f.len) == 0,
                   "StreamsGroupHeartbeat v%d naming application endpoint 10.0.0.21:9092: passed "
                   "as it came, %u leaks, %u rewrites",
                   sv, leaks, rewrites);
            }
            /* past the ApiVersions clamp (v1) the layout is not lookout's
             * to trust: a client that asks v2 anyway gets it read as bytes */
            for (int16_t key = 88; key <= 89; key++) {
                v = run_frame(conf, LK_PROTO_KAFKA, key, 2, &f, &leaks, &rewrites, &out);
                ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
                   "... as an api %d v2 answer (past the clamp): read as bytes, %u leak", key,
                   leaks);
            }
            /* the same bytes as an answer to an api key nobody knows: found */
            v = run_frame(conf, LK_PROTO_KAFKA, 90, 0, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "... read as bytes (an unknown api key) it would count: %u leak", leaks);
        }
        /* KIP-853: DescribeQuorum v2's controller listeners.  One at broker
         * k/1's internal address is an address lookout dials: rewritten to
         * k/1's lookup address; one the map lacks is a leak. */
        for (int lack = 0; lack < 2; lack++) {
            static const char *const qh[] = {"10.0.0.21", "10.0.0.30"};
            static const int qp[] = {9092, 9093};
            describe_quorum(&f, qh, qp, (size_t)(1 + lack));
            v = run_frame(conf, LK_PROTO_KAFKA, 55, 2, &f, &leaks, &rewrites, &out);
            if (!lack) {
                ok(v == LK_FLT_CONTINUE && leaks == 0 && rewrites == 1 && !has(&out, "10.0.0.21") &&
                       has(&out, "127.0.0.1\x4a\x94"),
                   "DescribeQuorum v2, controller at k/1's internal address: rewritten to "
                   "127.0.0.1:19092 (%u), no leak (%u)",
                   rewrites, leaks);
            } else {
                ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 1,
                   "DescribeQuorum v2, a controller the map lacks (10.0.0.30:9093): %u leak, %u "
                   "rewrite",
                   leaks, rewrites);
            }
        }
        /* A node the map lacks: decoded, its address is no one lookout serves. */
        {
            const int32_t ids[] = {1, 7}, ports[] = {9092, 9092};
            const char *const hosts[] = {"10.0.0.21", "10.0.0.27"};
            metadata(&f, ids, hosts, ports, 2, 0);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 13, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 1,
               "Metadata v13 naming node 7: 1 leak (%u), 1 rewrite (%u)", leaks, rewrites);
        }
        /* Not a find: the host inside a longer one or inside text without
         * its string framing. */
        {
            const int32_t ids[] = {3, 4}, ports[] = {9092, 9092};
            const char *const hosts[] = {"10.0.0.211", "x10.0.0.21"};
            metadata(&f, ids, hosts, ports, 2, 0);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 14, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0, "near misses are no leak (%u)", leaks);
        }
        /* An internal host lookout serves nothing on, with another port:
         * as a string of its own (a node in Metadata v14, read as bytes)
         * and inside text (a quorum setting that names the controller
         * listener the map does not list) */
        {
            const int32_t ids[] = {1}, ports[] = {9093};
            const char *const hosts[] = {"10.0.0.21"};
            metadata(&f, ids, hosts, ports, 1, 0);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 14, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "Metadata v14 naming 10.0.0.21:9093, the internal host at another port: %u leak",
               leaks);
            describe_configs(&f, 4, "controller.quorum.voters", "1@10.0.0.21:9093,2@10.0.0.22:9093");
            v = run_frame(conf, LK_PROTO_KAFKA, 32, 4, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "DescribeConfigs v4, controller.quorum.voters = 1@10.0.0.21:9093,...: %u leak",
               leaks);
            describe_configs(&f, 4, "controller.quorum.voters", "1@10.0.0.211:9093,1@x10.0.0.21:1");
            v = run_frame(conf, LK_PROTO_KAFKA, 32, 4, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0, "... naming 10.0.0.211 and x10.0.0.21: %u leaks",
               leaks);
        }
        /* host:port as text, in an answer to an api key nobody knows */
        {
            f.len = 0;
            w32(&f, 0);
            w32(&f, 9);
            cstr(&f, "moved to 10.0.0.21:9092");
            f.p[3] = (uint8_t)(f.len - 4);
            v = run_frame(conf, LK_PROTO_KAFKA, 999, 0, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "api 999 naming 10.0.0.21:9092 as text: %u leak", leaks);
        }
        /* Records are never read: a Fetch lookout cannot decode cannot be
         * checked; it passes, except with block. */
        {
            f.len = 0;
            w32(&f, 0);
            w32(&f, 5);
            w8(&f, 0);
            cstr(&f, "records naming 10.0.0.21:9092");
            f.p[3] = (uint8_t)(f.len - 4);
            v = run_frame(conf, LK_PROTO_KAFKA, 1, 19, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 0,
               "Fetch v19: not read (%u leaks), %s", leaks, block ? "refused" : "passed");
            v = run_frame(conf, LK_PROTO_KAFKA, 1, 12, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0 && out.len == f.len, "Fetch v12: not looked at");
        }
        subtest(NULL);
        lk_conf_unref(conf);
    }
    free(f.p);
    free(out.p);
}

/* A combined KRaft node whose advertised.listeners is copied as Kafka 4's
 * config/server.properties writes it, a CONTROLLER listener beside the
 * broker's: lookout serves EXTERNAL only, so the CONTROLLER address is no
 * address a client may get, in a decoded answer or in bytes. */
static void
test_kafka_controller_listener(void)
{
    static const char *const modes[] = {"log", "block"};
    static const char map[] =
        "[kafka k]\n"
        "lookupListenerName = EXTERNAL\n"
        "inter.broker.listener.name = INTERNAL\n"
        "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
        "leak_guard = %s\n"
        "[broker k/1]\n"
        "advertised.listeners = INTERNAL://10.0.0.21:9092,EXTERNAL://127.0.0.1:19092,"
        "CONTROLLER://10.0.0.21:9093\n";
    struct tb f = {0}, out = {0};
    unsigned leaks, rewrites;
    enum lk_flt_verdict v;

    for (size_t m = 0; m < 2; m++) {
        int block = m == 1;
        struct lk_conf *conf = load_map(map, modes[m], "a map with a CONTROLLER listener");
        if (conf == NULL)
            continue;
        subtest("leak_guard = %s", modes[m]);
        /* the node's lookup address: served, no find */
        {
            const int32_t ids[] = {1}, ports[] = {9092};
            const char *const hosts[] = {"10.0.0.21"};
            metadata(&f, ids, hosts, ports, 1, 0);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 12, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0 && rewrites == 1 && has(&out, "127.0.0.1"),
               "Metadata v12: node 1 rewritten to EXTERNAL (%u), no leak (%u)", rewrites, leaks);
        }
        /* DescribeQuorum v2 naming the node's CONTROLLER listener: the map
         * has the address, but lookout does not serve it */
        {
            static const char *const qh[] = {"10.0.0.21"};
            static const int qp[] = {9093};
            describe_quorum(&f, qh, qp, 1);
            v = run_frame(conf, LK_PROTO_KAFKA, 55, 2, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 0,
               "DescribeQuorum v2, the CONTROLLER listener 10.0.0.21:9093: %u leak, %s", leaks,
               block ? "refused" : "passed and counted");
            /* the same bytes read as bytes (v3, past what lookout decodes) */
            v = run_frame(conf, LK_PROTO_KAFKA, 55, 3, &f, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "... as DescribeQuorum v3, read as bytes: %u leak", leaks);
        }
        /* DescribeConfigs asked for the quorum settings alone, which name
         * the CONTROLLER listener and not the internal one */
        for (int16_t dv = 2; dv <= 4; dv += 2) {
            static const char *const names[] = {"controller.quorum.voters",
                                                "controller.quorum.bootstrap.servers"};
            static const char *const values[] = {"1@10.0.0.21:9093", "10.0.0.21:9093"};
            for (int which = 0; which < 2; which++) {
                describe_configs(&f, dv, names[which], values[which]);
                v = run_frame(conf, LK_PROTO_KAFKA, 32, dv, &f, &leaks, &rewrites, &out);
                ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
                   "DescribeConfigs v%d, %s = %s: %u leak", dv, names[which], values[which], leaks);
            }
        }
        subtest(NULL);
        lk_conf_unref(conf);
    }
    /* Every listener on one host, as in a test rig: that host is lookout's
     * own too, so it is read for with the map's unserved ports only. */
    {
        static const char one_host[] =
            "[kafka k]\n"
            "lookupListenerName = EXTERNAL\n"
            "inter.broker.listener.name = INTERNAL\n"
            "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
            "leak_guard = %s\n"
            "[broker k/1]\n"
            "advertised.listeners = INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:19092\n";
        struct lk_conf *conf = load_map(one_host, "block", "a map with every listener on 127.0.0.1");
        if (conf != NULL) {
            const int32_t ids[] = {1}, ports[] = {19093};
            const char *const hosts[] = {"127.0.0.1"};
            metadata(&f, ids, hosts, ports, 1, 0);
            v = run_frame(conf, LK_PROTO_KAFKA, 3, 14, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0,
               "Metadata v14 naming 127.0.0.1:19093 (lookout's host): %u leaks", leaks);
            describe_configs(&f, 4, "listeners", "EXTERNAL://127.0.0.1:19093");
            v = run_frame(conf, LK_PROTO_KAFKA, 32, 4, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0, "... and as text: %u leaks", leaks);
            describe_configs(&f, 4, "listeners", "INTERNAL://127.0.0.1:9092");
            v = run_frame(conf, LK_PROTO_KAFKA, 32, 4, &f, &leaks, &rewrites, &out);
            ok(v == LK_FLT_ERROR && leaks == 1, "... the internal port is still a leak: %u",
               leaks);
            lk_conf_unref(conf);
        }
    }
    free(f.p);
    free(out.p);
}

/* A SCALABLE_TOPIC_UPDATE frame (session 1, epoch 3) with one segment per
 * URL of urls, segment i + 1 at urls[i] (each short: one-byte lengths). */
static void
scalable_update(struct tb *g, const char *const *urls, size_t n)
{
    size_t dag = 2; /* epoch */

    for (size_t i = 0; i < n; i++)
        dag += 2 + 2 + 2 + strlen(urls[i]);
    g->len = 0;
    w32(g, 0);
    w32(g, 0);
    w8(g, 0x08), w8(g, LK_PULSAR_SCALABLE_TOPIC_UPDATE);
    w8(g, 0xba), w8(g, 0x04), w8(g, (int)(2 + 2 + dag)); /* field 71 */
    w8(g, 0x08), w8(g, 1);                               /* session_id */
    w8(g, 0x12), w8(g, (int)dag);                        /* dag */
    w8(g, 0x08), w8(g, 3);                               /* epoch */
    for (size_t i = 0; i < n; i++) {
        size_t ul = strlen(urls[i]);
        w8(g, 0x1a), w8(g, (int)(2 + 2 + ul)); /* segment_brokers */
        w8(g, 0x08), w8(g, (int)(i + 1));      /* segment_id */
        w8(g, 0x12), w8(g, (int)ul);           /* broker_url */
        put(g, urls[i], ul);
    }
    g->p[7] = (uint8_t)(g->len - 8);
    g->p[3] = (uint8_t)(g->len - 4);
}

static void
test_pulsar_answers(void)
{
    static const char *const modes[] = {"log", "block"};
    struct tb f = {0}, out = {0};
    unsigned leaks, rewrites;
    enum lk_flt_verdict v;

    for (size_t m = 0; m < 2; m++) {
        struct lk_conf *conf = load(modes[m], NULL);
        int block = m == 1;
        if (conf == NULL)
            continue;
        subtest("leak_guard = %s", modes[m]);
        /* BaseCommand{type = 99, field 99: "pulsar://10.0.0.11:6650"}: a type
         * lookout does not know */
        static const char url[] = "pulsar://10.0.0.11:6650";
        f.len = 0;
        w32(&f, 0);
        w32(&f, 0);
        w8(&f, 0x08), w8(&f, 99);
        w8(&f, 0x9a), w8(&f, 0x06), w8(&f, (int)strlen(url));
        put(&f, url, strlen(url));
        f.p[7] = (uint8_t)(f.len - 8);
        f.p[3] = (uint8_t)(f.len - 4);
        v = run_frame(conf, LK_PROTO_PULSAR, 99, 0, &f, &leaks, &rewrites, &out);
        ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 0,
           "a command of type 99 with b1's internal URL: %u leak", leaks);
        ok(block ? out.len == 0 : out.len == f.len, "... %s",
           block ? "refused" : "passed as it came");
        /* The same as type 65545, whose low 16 bits are MESSAGE's 9: a
         * type is read as the int32 it is, never cut to an api key's
         * 16 bits (which would take it for a payload, never read) */
        {
            struct tb g = {0};
            w32(&g, 0);
            w32(&g, 0);
            w8(&g, 0x08), w8(&g, 0x89), w8(&g, 0x80), w8(&g, 0x04);
            w8(&g, 0x9a), w8(&g, 0x06), w8(&g, (int)strlen(url));
            put(&g, url, strlen(url));
            g.p[7] = (uint8_t)(g.len - 8);
            g.p[3] = (uint8_t)(g.len - 4);
            v = run_frame(conf, LK_PROTO_PULSAR, 65545, 0, &g, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 &&
                   (block ? out.len == 0 : out.len == g.len),
               "a command of type 65545 (MESSAGE's 9 in 16 bits) with b1's internal URL: "
               "%u leak, %s",
               leaks, block ? "refused" : "passed");
            free(g.p);
        }
        /* a LOOKUP_RESPONSE that decodes, Failed, with no URL, whose message
         * names b1 as Pulsar's texts do ("not served by this instance:...") */
        {
            static const char msg[] = "not served by this instance:10.0.0.11:6650. Please redo";
            struct tb g = {0};
            w32(&g, 0);
            w32(&g, 0);
            w8(&g, 0x08), w8(&g, LK_PULSAR_LOOKUP_RESPONSE);
            w8(&g, 0xc2), w8(&g, 0x01), w8(&g, (int)(6 + 2 + strlen(msg)));
            w8(&g, 0x18), w8(&g, 2);                    /* response = Failed */
            w8(&g, 0x20), w8(&g, 7);                    /* request_id = 7 */
            w8(&g, 0x30), w8(&g, 6);                    /* error = ServiceNotReady */
            w8(&g, 0x3a), w8(&g, (int)strlen(msg));     /* message */
            put(&g, msg, strlen(msg));
            g.p[7] = (uint8_t)(g.len - 8);
            g.p[3] = (uint8_t)(g.len - 4);
            v = run_frame(conf, LK_PROTO_PULSAR, LK_PULSAR_LOOKUP_RESPONSE, 0, &g, &leaks,
                          &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "a LOOKUP_RESPONSE whose message names b1's internal address: %u leak", leaks);
            /* the same text in an ERROR (type 14), which is never decoded */
            g.p[9] = 14;
            v = run_frame(conf, LK_PROTO_PULSAR, 14, 0, &g, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "an ERROR with it: %u leak", leaks);
            free(g.p);
        }
        /* An ERROR whose message starts with the address, its length byte
         * right before it: a length of 45 is '-', of 48 to 57 an ASCII
         * digit, and one of 65 to 121 mostly a letter, which a host name
         * may hold too (up to 121: the command's own length stays one
         * byte).  At 65, "10.0.0.11:6650" and the spaces after it parse as
         * protobuf fields too. */
        for (size_t len = 14; len <= 121; len++) {
            static const char addrs[][32] = {"10.0.0.11:6650", "pulsar://10.0.0.11:6650",
                                             "10.0.0.11:8080"};
            char msg[128];
            struct tb g = {0};
            int found_all = 1;
            for (size_t a = 0; a < sizeof(addrs) / sizeof(addrs[0]); a++) {
                size_t al = strlen(addrs[a]);
                if (len < al)
                    continue;
                memset(msg, ' ', sizeof(msg));
                memcpy(msg, addrs[a], al);
                g.len = 0;
                w32(&g, 0);
                w32(&g, 0);
                w8(&g, 0x08), w8(&g, 14);                   /* ERROR */
                w8(&g, 0x72), w8(&g, (int)(2 + 2 + 2 + len)); /* field 14 */
                w8(&g, 0x08), w8(&g, 7);                    /* request_id */
                w8(&g, 0x10), w8(&g, 1);                    /* error */
                w8(&g, 0x1a), w8(&g, (int)len);             /* message */
                put(&g, msg, len);
                g.p[7] = (uint8_t)(g.len - 8);
                g.p[3] = (uint8_t)(g.len - 4);
                v = run_frame(conf, LK_PROTO_PULSAR, 14, 0, &g, &leaks, &rewrites, &out);
                if (v != (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) || leaks != 1) {
                    found_all = 0;
                    lk_test_diag("an ERROR of %zu bytes starting with %s: %u leaks", len, addrs[a],
                         leaks);
                }
            }
            free(g.p);
            if (!found_all || len == 121)
                ok(found_all, "an ERROR whose message starts with an internal address, after "
                              "a length byte of 14 to %zu: always a leak", len);
            if (!found_all)
                break;
        }
        /* ... and one whose string ends with it, the next field's key a
         * digit: type 99's field 1 "see 10.0.0.11:6650", then field 6 (key
         * 0x30, '0'), which read on would make the port 66500 */
        {
            static const char msg[] = "see 10.0.0.11:6650";
            struct tb g = {0};
            w32(&g, 0);
            w32(&g, 0);
            w8(&g, 0x08), w8(&g, 99);
            w8(&g, 0x9a), w8(&g, 0x06), w8(&g, (int)(2 + strlen(msg) + 2));
            w8(&g, 0x0a), w8(&g, (int)strlen(msg));
            put(&g, msg, strlen(msg));
            w8(&g, 0x30), w8(&g, 1);
            g.p[7] = (uint8_t)(g.len - 8);
            g.p[3] = (uint8_t)(g.len - 4);
            v = run_frame(conf, LK_PROTO_PULSAR, 99, 0, &g, &leaks, &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1,
               "a string ending with b1's internal address, a digit key after it: %u leak",
               leaks);
            free(g.p);
        }
        /* Pulsar 5.0's SCALABLE_TOPIC_UPDATE, one segment whose broker_url
         * is b1's internal URL (the pulsar filter rewrites it: no leak), or
         * a broker's the map lacks (left: a leak, found within) */
        for (int k = 0; k < 2; k++) {
            const char *u = k == 0 ? url : "pulsar://10.9.9.9:6650";
            struct tb g = {0};
            scalable_update(&g, &u, 1);
            v = run_frame(conf, LK_PROTO_PULSAR, LK_PULSAR_SCALABLE_TOPIC_UPDATE, 0, &g, &leaks,
                          &rewrites, &out);
            if (k == 0)
                ok(v == LK_FLT_CONTINUE && leaks == 0 && rewrites == 1 &&
                       memmem(out.p, out.len, url, strlen(url)) == NULL,
                   "SCALABLE_TOPIC_UPDATE naming b1's internal URL: rewritten, %u leaks", leaks);
            else
                ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 0,
                   "SCALABLE_TOPIC_UPDATE naming a broker the map lacks: %u leak", leaks);
            free(g.p);
        }
        /* Two segments, the first naming a broker the map lacks (left as
         * it is), the second b1's internal URL (rewritten): the pair left
         * alone is no edit, and only the other one changes. */
        {
            static const char un[] = "pulsar://10.9.9.9:6650";
            const char *const us[] = {un, url};
            struct tb g = {0};
            scalable_update(&g, us, 2);
            v = run_frame(conf, LK_PROTO_PULSAR, LK_PULSAR_SCALABLE_TOPIC_UPDATE, 0, &g, &leaks,
                          &rewrites, &out);
            ok(v == (block ? LK_FLT_ERROR : LK_FLT_CONTINUE) && leaks == 1 && rewrites == 1,
               "SCALABLE_TOPIC_UPDATE, one segment unmapped and one b1's: %u leak, %u rewrite",
               leaks, rewrites);
            if (!block)
                ok(memmem(out.p, out.len, url, strlen(url)) == NULL &&
                       memmem(out.p, out.len, un, strlen(un)) != NULL && out.len < 200,
                   "... b1's rewritten, the unmapped one passed as it came, nothing else added");
            free(g.p);
        }
        /* the same bytes as a MESSAGE: payloads are never read */
        f.p[9] = LK_PULSAR_MESSAGE;
        v = run_frame(conf, LK_PROTO_PULSAR, LK_PULSAR_MESSAGE, 0, &f, &leaks, &rewrites, &out);
        ok(v == LK_FLT_CONTINUE && leaks == 0 && out.len == f.len, "MESSAGE: not read");
        subtest(NULL);
        lk_conf_unref(conf);
    }
    ok(lk_pulsar_type_addrs(LK_PULSAR_LOOKUP_RESPONSE) == LK_PULSAR_ADDRS_DECODED &&
           lk_pulsar_type_addrs(LK_PULSAR_TOPIC_MIGRATED) == LK_PULSAR_ADDRS_DECODED &&
           lk_pulsar_type_addrs(LK_PULSAR_SEND) == LK_PULSAR_ADDRS_NONE &&
           lk_pulsar_type_addrs(LK_PULSAR_MESSAGE) == LK_PULSAR_ADDRS_NONE &&
           lk_pulsar_type_addrs(67) == LK_PULSAR_ADDRS_NONE &&
           lk_pulsar_type_addrs(45) == LK_PULSAR_ADDRS_BYTES &&
           lk_pulsar_type_addrs(71) == LK_PULSAR_ADDRS_DECODED &&
           lk_pulsar_type_addrs(80) == LK_PULSAR_ADDRS_DECODED,
       "which command types carry addresses");
    free(f.p);
    free(out.p);
}

/* A map of binary addresses only (conf/pulsar-binary.conf's kind): b3's
 * external address has its internal host, on another port. */
static const char binary_fmt[] =
    "[pulsar bin]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "leak_guard = %s\n"
    "[broker bin/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,external:pulsar://127.0.0.1:16650\n"
    "[broker bin/b2]\n"
    "advertisedListeners = internal:pulsar://10.0.0.12:6650,internal:pulsar+ssl://10.0.0.12:6651,"
    "external:pulsar://127.0.0.2:16650\n"
    "[broker bin/b3]\n"
    "advertisedListeners = internal:pulsar://10.0.0.13:6650,external:pulsar://10.0.0.13:16650\n"
    "[broker bin/b4]\n"
    "advertisedListeners = internal:pulsar://[fd00::14]:6650,external:pulsar://127.0.0.4:16650\n";

/* An ERROR (14) whose message is msg, as a broker's exception fills it. */
static void
error_frame(struct tb *g, const char *msg)
{
    size_t ml = strlen(msg);

    g->len = 0;
    w32(g, 0);
    w32(g, 0);
    w8(g, 0x08), w8(g, 14);
    w8(g, 0x72), w8(g, (int)(2 + 2 + 2 + ml)); /* field 14: CommandError */
    w8(g, 0x08), w8(g, 1);                     /* request_id */
    w8(g, 0x10), w8(g, 6);                     /* error = ServiceNotReady */
    w8(g, 0x1a), w8(g, (int)ml);               /* message */
    put(g, msg, ml);
    g->p[7] = (uint8_t)(g->len - 8);
    g->p[3] = (uint8_t)(g->len - 4);
}

/*
 * A broker of a binary-only map names itself in its exceptions by its
 * brokerId, advertisedAddress:webServicePort ("Namespace bundle for topic
 * (...) not served by this instance:10.0.0.11:8080"), an address the map
 * cannot hold since it has no http address: the guard still finds it, by
 * the host of the broker's internal addresses with any port, while the
 * addresses lookout gives out (b3's external one shares its internal host)
 * are no finds.
 */
static void
test_binary_only_map(void)
{
    static const char *const modes[] = {"log", "block"};
    static const struct {
        const char *msg;
        unsigned leaks;
    } cases[] = {
        {"Namespace bundle for topic (persistent://t/n/x) not served by this "
         "instance:10.0.0.11:8080. Please redo the lookup.",
         1},
        {"not served by this instance:10.0.0.12:8443", 1},
        {"not served by this instance:10.0.0.13:8080.", 1},
        {"not served by this instance:10.0.0.11:6650", 1},
        {"redirect to pulsar://10.0.0.11:6650 now", 1},
        {"two: 10.0.0.11:8080 and 10.0.0.12:8080", 2},
        {"not ours: 110.0.0.11:8080 and 10.0.0.111:8080 and 10.0.0.11:", 0},
        {"served at pulsar://10.0.0.13:16650 and 127.0.0.1:16650", 0},
        {"10.0.0.11:8080", 1},
        {"http://10.0.0.11:8080/admin", 1},
        {"consumer address /10.0.0.11:54321 (a peer, as Java prints it)", 0},
        {"not served by this instance:[fd00::14]:8080", 1},
        {"not served by this instance:fd00::14:8080", 1},
        {"not ours: [fd00::140]:8080 fd00::140:8080", 0},
    };
    struct tb g = {0}, out = {0};
    unsigned leaks, rewrites;

    for (size_t m = 0; m < 2; m++) {
        int block = m == 1;
        struct lk_conf *conf = load_map(binary_fmt, modes[m], "binary-only map");
        if (conf == NULL)
            continue;
        subtest("leak_guard = %s", modes[m]);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            error_frame(&g, cases[i].msg);
            enum lk_flt_verdict v =
                run_frame(conf, LK_PROTO_PULSAR, 14, 0, &g, &leaks, &rewrites, &out);
            ok(leaks == cases[i].leaks &&
                   v == (block && cases[i].leaks != 0 ? LK_FLT_ERROR : LK_FLT_CONTINUE),
               "ERROR \"%s\": %u leak%s", cases[i].msg, leaks, leaks == 1 ? "" : "s");
        }
        /* a LOOKUP_RESPONSE naming b3's internal URL, rewritten to its
         * external one on the same host: no find */
        {
            static const char u3[] = "pulsar://10.0.0.13:6650";
            g.len = 0;
            w32(&g, 0);
            w32(&g, 0);
            w8(&g, 0x08), w8(&g, LK_PULSAR_LOOKUP_RESPONSE);
            w8(&g, 0xc2), w8(&g, 0x01), w8(&g, (int)(2 + strlen(u3) + 4));
            w8(&g, 0x0a), w8(&g, (int)strlen(u3)); /* brokerServiceUrl */
            put(&g, u3, strlen(u3));
            w8(&g, 0x18), w8(&g, 1); /* response = Connect */
            w8(&g, 0x20), w8(&g, 7); /* request_id */
            g.p[7] = (uint8_t)(g.len - 8);
            g.p[3] = (uint8_t)(g.len - 4);
            enum lk_flt_verdict v = run_frame(conf, LK_PROTO_PULSAR, LK_PULSAR_LOOKUP_RESPONSE, 0,
                                              &g, &leaks, &rewrites, &out);
            ok(v == LK_FLT_CONTINUE && leaks == 0 && rewrites == 1 &&
                   memmem(out.p, out.len, "pulsar://10.0.0.13:16650", 24) != NULL,
               "LOOKUP_RESPONSE of b3, rewritten to its external address on its internal "
               "host: %u leaks",
               leaks);
        }
        subtest(NULL);
        lk_conf_unref(conf);
    }
    free(g.p);
    free(out.p);
}

/* A mixed map: b1 has an internal http address (so lookout serves HTTP for
 * the cluster), b3 and b4 are binary-only; b3's external listener and
 * lookout's web service address share b3's internal host. */
static const char mixed_fmt[] = "[pulsar mix]\n"
                                "internalListenerName = internal\n"
                                "lookupListenerName = external\n"
                                "webServiceUrl = http://10.0.0.13:18080\n"
                                "leak_guard = %s\n"
                                "%s\n"
                                "[broker mix/b1]\n"
                                "advertisedListeners = internal:pulsar://10.0.0.11:6650,"
                                "internal:http://10.0.0.11:8080,external:pulsar://127.0.0.1:16650,"
                                "external:http://127.0.0.1:18081\n"
                                "[broker mix/b3]\n"
                                "advertisedListeners = internal:pulsar://10.0.0.13:6650,"
                                "external:pulsar://10.0.0.13:16650\n"
                                "[broker mix/b4]\n"
                                "advertisedListeners = internal:pulsar://[fd00::14]:6650,"
                                "external:pulsar://127.0.0.4:16650\n";

/*
 * In a mixed map the HTTP answers name a binary-only broker by its
 * brokerId too (/admin/v2/brokers/CLUSTER, "not served by this
 * instance:HOST:PORT", a 5.0 LookupData's brokerId): the text scan reads
 * them with the binary one's matcher, headers and body, in pieces of
 * every size, with the same exclusions (lookout's own addresses on the
 * broker's host, a longer host or port, a peer's "/host:port").
 */
static void
test_mixed_map(void)
{
    enum { MAPPED = 0x100 }; /* the main automaton finds one too */
    static const struct {
        const char *body;
        unsigned leaks;
    } cases[] = {
        {"[\"10.0.0.13:8080\"]", 1},
        {"Namespace bundle for topic (persistent://t/n/x) not served by this "
         "instance:10.0.0.13:8080. Please redo the lookup.",
         1},
        {"{\"owner\":\"http://10.0.0.13:8080/admin\"}", 1},
        {"{\"brokerId\":\"[fd00::14]:8080\"}", 1},
        {"{\"brokerId\":\"fd00::14:8443\"}", 1},
        {"two: 10.0.0.13:8080 and 10.0.0.13:9090", 2},
        {"at the end 10.0.0.13:8", 1},
        {"10.0.0.13:8080", 1},
        /* an address in the map too (rewrite mode rewrites it: not run) */
        {"[\"10.0.0.11:8080\",\"10.0.0.13:8080\"]", 2 | MAPPED},
        {"{\"url\":\"pulsar://10.0.0.13:6650\"}", 1 | MAPPED}, /* found once */
        {"not ours: 110.0.0.13:8080 10.0.0.131:8080 x10.0.0.13:8080 10.0.0.13: 10.0.0.13:x", 0},
        {"too long a port: 10.0.0.13:123456, none: 10.0.0.13:0", 0},
        {"a peer: /10.0.0.13:54321", 0},
        {"lookout's own: http://10.0.0.13:18080/x pulsar://10.0.0.13:16650 10.0.0.13:18080", 0},
        {"[fd00::140]:8080 fd00::140:8080", 0},
    };
    static const char *const modes[] = {"log", "rewrite", "block"};
    static const char *const text_hdrs[] = {"Content-Type", "text/plain", NULL};

    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load_fmt(mixed_fmt, modes[m], NULL);
        if (conf == NULL)
            continue;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            unsigned n = cases[i].leaks & 0xff;
            if (m == 1 && (cases[i].leaks & MAPPED))
                continue;
            enum lk_flt_verdict v = m == 2 && n != 0 ? LK_FLT_REPLY : LK_FLT_CONTINUE;
            char what[256];
            snprintf(what, sizeof(what), "%s: %s", modes[m], cases[i].body);
            check(conf, what, i % 2 ? text_hdrs : json_hdrs, cases[i].body, 0, v, NULL,
                  m == 2 && n != 0 ? 1 : n, 0);
        }
        lk_conf_unref(conf);
    }

    /* one brokerId split at every point, in each mode */
    static const char body[] = "{\"brokerId\":\"10.0.0.13:8080\",\"n\":1}";
    const size_t len = strlen(body);
    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load_fmt(mixed_fmt, modes[m], "filters = leak_guard");
        int bad = 0;
        if (conf == NULL)
            continue;
        for (size_t a = 1; a < len; a++) {
            for (size_t b = a; b < len; b++) {
                struct lk_xchg *x = start(conf, "/admin/v2/x", 200, json_hdrs, 0);
                const size_t cuts[2] = {a, b};
                char got[256];
                enum lk_flt_verdict v = run_cuts(x, body, cuts, 2, got, sizeof(got));
                int fail =
                    x->leaks != 1 || (m == 2 ? v != LK_FLT_REPLY || got[0] != '\0'
                                             : v != LK_FLT_CONTINUE || strcmp(got, body) != 0);
                if (fail && bad++ == 0)
                    lk_test_diag("%s, split at %zu and %zu: verdict %d, '%s', %u leaks", modes[m],
                                 a, b, v, got, x->leaks);
                finish(x);
            }
        }
        ok(bad == 0, "%s: a brokerId split at every two points (%d bad)", modes[m], bad);
        lk_conf_unref(conf);
    }

    /* headers: a binary-only broker's brokerId, and lookout's own address
     * on its host */
    static const char *const hdrs[] = {"X-Owner", "10.0.0.13:16650", "Location",
                                       "http://10.0.0.13:8080/admin/v2/x", NULL};
    for (size_t m = 0; m < 3; m++) {
        struct lk_conf *conf = load_fmt(mixed_fmt, modes[m], "filters = leak_guard");
        if (conf == NULL)
            continue;
        struct lk_xchg *x = start(conf, "/admin/v2/x", 307, hdrs, 0);
        enum lk_flt_verdict v = lk_flt_run_res_headers(x);
        ok(x->leaks == 1 && v == (m == 2 ? LK_FLT_REPLY : LK_FLT_CONTINUE),
           "%s: a Location naming b3's brokerId: verdict %d, %u leaks", modes[m], v, x->leaks);
        finish(x);
        lk_conf_unref(conf);
    }

    /* block: a LookupData of b3, which the lookup filter rewrote, keeps a
     * brokerId no listener has a web address to replace: refused */
    struct lk_conf *conf = load_fmt(mixed_fmt, "block", NULL);
    if (conf != NULL) {
        static const char lookup_body[] =
            "{\"brokerId\":\"10.0.0.13:8080\",\"brokerUrl\":\"pulsar://10.0.0.13:6650\","
            "\"nativeUrl\":\"pulsar://10.0.0.13:6650\"}";
        struct result r;
        struct lk_xchg *x = start(conf, "/lookup/v2/topic/persistent/t/n/x", 200, json_hdrs, 0);
        lk_flt_run_res_headers(x);
        run_body(x, lookup_body, strlen(lookup_body), 0, &r);
        ok(x->body_vetted && r.v == LK_FLT_REPLY && x->reply_status == 502 && x->leaks == 1,
           "b3's LookupData: its brokerId refused (verdict %d, %u leaks)", r.v, x->leaks);
        free(r.out);
        finish(x);
        lk_conf_unref(conf);
    }
}

const struct lk_test_case lk_test_flt_leak_guard[] = {
    {"leak_guard/request", test_request},
    {"leak_guard/chain", test_chain},
    {"leak_guard/brokers_list", test_brokers_list},
    {"leak_guard/error_page", test_error_page},
    {"leak_guard/stats", test_stats},
    {"leak_guard/straddle", test_straddle},
    {"leak_guard/headers", test_headers},
    {"leak_guard/reason_and_interim", test_reason_and_interim},
    {"leak_guard/other_clusters", test_other_clusters},
    {"leak_guard/no_false_positive", test_no_false_positive},
    {"leak_guard/host_alone", test_host_alone},
    {"leak_guard/holding", test_holding},
    {"leak_guard/log_chains", test_log_chains},
    {"leak_guard/content_types", test_content_types},
    {"leak_guard/compressed", test_compressed},
    {"leak_guard/lookup_vetted", test_lookup_vetted},
    {"leak_guard/kafka_answers", test_kafka_answers},
    {"leak_guard/kafka_controller_listener", test_kafka_controller_listener},
    {"leak_guard/pulsar_answers", test_pulsar_answers},
    {"leak_guard/binary_only_map", test_binary_only_map},
    {"leak_guard/mixed_map", test_mixed_map},
    {NULL, NULL},
};
