/*
 * Tests for the pure parts of proxy/lk_conn.c: routing on a bound socket
 * (SNI, then Host, then the bound address) and broker health.
 */
#include <stdlib.h>
#include <string.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lk_conf.h"
#include "lk_conn.h"
#include "lk_test.h"

static void
test_route(void)
{
    struct lk_broker b1 = {.name = "prod/b1"}, b2 = {.name = "prod/b2"};
    struct lk_vhost shared[] = {
        {.host = "b1.lookout.test", .port = 8443, .broker = &b1},
        {.host = "b2.lookout.test", .port = 8443, .broker = &b2},
        {.host = "pulsar.lookout.test", .port = 8443, .broker = NULL},
    };
    struct lk_vhost single[] = {{.host = "127.0.0.1", .port = 18081, .broker = &b1}};
    struct lk_bind sb = {.text = "0.0.0.0:8443", .vhosts = shared, .nvhosts = 3};
    struct lk_bind ub = {.text = "127.0.0.1:18081", .vhosts = single, .nvhosts = 1};

    ok(lk_route(&sb, LK_STRLIT("b2.lookout.test"), LK_STR_NULL, 0) == &shared[1], "SNI picks");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("B1.Lookout.Test:8443"), 0) == &shared[0],
       "Host picks, case-insensitive, port ignored");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test."), 0) == &shared[0], "absolute FQDN");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("pulsar.lookout.test"), 0) == &shared[2],
       "the service address");
    ok(lk_route(&sb, LK_STRLIT("b1.lookout.test"), LK_STRLIT("b1.lookout.test"), 0) == &shared[0],
       "SNI and Host agree");
    ok(lk_route(&sb, LK_STRLIT("b1.lookout.test"), LK_STRLIT("b2.lookout.test"), 0) == NULL,
       "SNI and Host disagree: misdirected");
    ok(lk_route(&sb, LK_STRLIT("b1.lookout.test"), LK_STRLIT("unknown.test"), 0) == NULL,
       "an unmapped Host under a mapped SNI: misdirected");
    ok(lk_route(&sb, LK_STRLIT("x.lookout.test"), LK_STRLIT("b1.lookout.test"), 0) == NULL,
       "an unmapped SNI under a mapped Host: misdirected");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test:1"), 0) == NULL,
       "the right name with the wrong port: misdirected");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test:"), 0) == &shared[0], "empty port");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test:99999"), 0) == NULL, "bad port");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("evil.example.com"), 0) == NULL, "unknown Host: 421");
    ok(lk_route(&sb, LK_STRLIT("evil.example.com"), LK_STR_NULL, 0) == NULL, "unknown SNI: 421");
    ok(lk_route(&sb, LK_STR_NULL, LK_STR_NULL, 0) == NULL, "nothing to go by on a shared socket");
    ok(lk_route(&ub, LK_STR_NULL, LK_STRLIT("localhost:18081"), 0) == &single[0],
       "an unshared socket: the bound address decides");
    ok(lk_route(&ub, LK_STR_NULL, LK_STRLIT("[::1]:18081"), 0) == &single[0], "IPv6 Host");
}

static void
ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg)
{
    *(int *)arg += ev == LK_UP_CONNECTED ? 1 : 100;
}

/* A pooled connection handed out is reported from the event loop; if the
 * exchange ends first and frees it, that report must never come (it would
 * touch freed memory: ASan catches it in the sanitizer build). */
static void
test_upstream_reuse(void)
{
    static const char text[] = "[pulsar p]\ninternalListenerName = internal\n"
                               "webServiceUrl = http://127.0.0.1:18080\n[broker p/b1]\n"
                               "advertisedListeners = internal:http://10.0.0.11:8080\n";
    char err[256];
    struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    if (!ok(conf != NULL, "config loads (%s)", err))
        return;
    struct lk_runtime rt = {.conf = conf};
    struct lk_worker w = {.base = event_base_new(), .rt = &rt};
    const struct lk_broker *b = conf->brokers[0];
    struct bufferevent *pair[2];
    int called = 0;

    w.idle = calloc(conf->nbrokers * 2 + 1, sizeof(*w.idle));
    for (int round = 0; round < 2; round++) {
        bufferevent_pair_new(w.base, 0, pair);
        struct lk_upstream *u = calloc(1, sizeof(*u));
        u->w = &w;
        u->rt = &rt;
        u->broker = b;
        u->addr = b->internal->addr[LK_SCHEME_HTTP];
        u->bev = pair[0];
        u->io.bev = pair[0]; /* a pair: driven as the bufferevent it is, like TLS */
        u->io.w = &w;
        lk_upstream_release(u);
        ok(w.idle[b->index * 2].count == 1, "round %d: released into the idle pool", round);
        called = 0;
        struct lk_upstream *got = lk_upstream_get(&w, &rt, b, LK_SCHEME_HTTP, 0, ready, &called);
        ok(got == u && got->reused && w.idle[b->index * 2].count == 0, "handed out again");
        ok(called == 0, "not reported from the caller's stack");
        if (round == 0)
            lk_upstream_free(got); /* the exchange ended first */
        event_base_loop(w.base, EVLOOP_NONBLOCK);
        if (round == 0) {
            ok(called == 0, "a freed connection is never reported");
        } else {
            ok(called == 1, "otherwise reported once, as connected (%d)", called);
            lk_upstream_free(got);
        }
        bufferevent_free(pair[1]);
    }
    /* After a reload (w.rt is newer): an exchange of the old generation
     * neither returns its connection to the pools, which are by the new
     * config's broker index, nor takes one from them. */
    struct lk_runtime old_rt = {.conf = conf};
    bufferevent_pair_new(w.base, 0, pair);
    struct lk_upstream *u = calloc(1, sizeof(*u));
    *u = (struct lk_upstream){.w = &w, .rt = &old_rt, .broker = b,
                              .addr = b->internal->addr[LK_SCHEME_HTTP], .bev = pair[0]};
    u->io.bev = pair[0];
    u->io.w = &w;
    lk_upstream_release(u); /* freed */
    bufferevent_free(pair[1]);
    ok(w.idle[b->index * 2].count == 0, "an older generation's connection is not pooled");
    bufferevent_pair_new(w.base, 0, pair);
    struct lk_upstream *kept = calloc(1, sizeof(*kept));
    *kept = (struct lk_upstream){.w = &w, .rt = &rt, .broker = b,
                                 .addr = b->internal->addr[LK_SCHEME_HTTP], .bev = pair[0]};
    kept->io.bev = pair[0];
    kept->io.w = &w;
    struct bufferevent *kept_peer = pair[1];
    lk_upstream_release(kept);
    struct lk_upstream *got = lk_upstream_get(&w, &old_rt, b, LK_SCHEME_HTTP, 0, ready, &called);
    ok(got != kept && w.idle[b->index * 2].count == 1,
       "nor does it take the current generation's pooled one");
    lk_upstream_free(got);
    lk_upstream_free(kept);
    bufferevent_free(kept_peer);
    event_base_loop(w.base, EVLOOP_NONBLOCK);
    free(w.idle);
    event_base_free(w.base);
    lk_conf_unref(conf);
}

const struct lk_test_case lk_test_conn[] = {
    {"conn/route", test_route},
    {"conn/upstream_reuse", test_upstream_reuse},
    {NULL, NULL},
};
