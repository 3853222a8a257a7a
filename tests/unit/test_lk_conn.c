/*
 * Tests for the pure parts of the engine: routing on a bound socket (lk_route.c)
 * (SNI, then Host, then the bound address) and broker health (lk_broker.c).
 */
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lk_broker.h"
#include "lk_conf.h"
#include "lk_conn.h"
#include "lk_conf_ready.h"
#include "lk_route.h"
#include "lk_runtime.h"
#include "lk_test.h"
#include "lk_tls.h"
#include "lk_upstream.h"
#include "lk_worker.h"

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

static struct lk_conf *
conf_of(const char *text)
{
    char err[256];
    struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));

    ok(conf != NULL, "config loads (%s)", conf != NULL ? "" : err);
    return conf;
}

/* The end of a test worker: its pool (and what is in it), its loop. */
static void
worker_end(struct lk_worker *w, struct lk_conf *conf)
{
    lk_idle_pool_free(&w->idle);
    event_base_loop(w->base, EVLOOP_NONBLOCK);
    event_base_free(w->base);
    lk_conf_unref(conf);
}

/* An upstream to addr over one end of a bufferevent pair (the other end
 * in *peer), as lk_upstream_get would have dialled it for rt. */
static struct lk_upstream *
fake_upstream(struct lk_worker *w, struct lk_runtime *rt, const struct lk_broker *b,
              const struct lk_url *addr, struct bufferevent **peer)
{
    struct bufferevent *pair[2];
    struct lk_upstream *u = calloc(1, sizeof(*u));

    bufferevent_pair_new(w->base, 0, pair);
    *u = (struct lk_upstream){.w = w, .rt = rt, .broker = b, .addr = addr, .bev = pair[0]};
    lk_upstream_key_make(&u->key, rt, b->cluster, addr);
    u->io.bev = pair[0]; /* a pair: driven as the bufferevent it is, like TLS */
    u->io.w = w;
    *peer = pair[1];
    return u;
}

static unsigned
pooled(struct lk_worker *w, struct lk_runtime *rt, const struct lk_url *addr)
{
    struct lk_upstream_key k;

    lk_upstream_key_make(&k, rt, rt->conf->clusters[0], addr); /* the tests' one cluster */
    return lk_idle_pool_count(&w->idle, &k);
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
    struct lk_conf *conf = conf_of(text);
    if (conf == NULL)
        return;
    struct lk_runtime rt = {.conf = conf};
    struct lk_worker w = {.base = event_base_new(), .rt = &rt};
    const struct lk_broker *b = conf->brokers[0];
    const struct lk_url *http = b->internal->addr[LK_SCHEME_HTTP];
    struct bufferevent *peer;
    int called = 0;

    lk_idle_pool_init(&w.idle, 1);
    for (int round = 0; round < 2; round++) {
        struct lk_upstream *u = fake_upstream(&w, &rt, b, http, &peer);
        lk_upstream_release(u);
        ok(pooled(&w, &rt, http) == 1, "round %d: released into the idle pool", round);
        called = 0;
        struct lk_upstream *got = lk_upstream_get(&w, &rt, b, LK_SCHEME_HTTP, NULL, ready, &called);
        ok(got == u && got->reused && pooled(&w, &rt, http) == 0, "handed out again");
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
        bufferevent_free(peer);
    }
    /* After a reload (w.rt is newer): an exchange of the old generation
     * neither returns its connection to the pool, which holds the new
     * generation's, nor takes one from it. */
    struct lk_runtime old_rt = {.conf = conf};
    lk_upstream_release(fake_upstream(&w, &old_rt, b, http, &peer)); /* freed */
    bufferevent_free(peer);
    ok(pooled(&w, &rt, http) == 0 && pooled(&w, &old_rt, http) == 0,
       "an older generation's connection is not pooled");
    struct bufferevent *kept_peer;
    struct lk_upstream *kept = fake_upstream(&w, &rt, b, http, &kept_peer);
    lk_upstream_release(kept);
    struct lk_upstream *got = lk_upstream_get(&w, &old_rt, b, LK_SCHEME_HTTP, NULL, ready, &called);
    ok(got != kept && pooled(&w, &rt, http) == 1,
       "nor does it take the current generation's pooled one");
    lk_upstream_free(got);
    /* Bytes left in either buffer would reach, or come from, the next
     * exchange: such a connection is freed, not pooled. */
    struct lk_upstream *dirty = fake_upstream(&w, &rt, b, http, &peer);
    bufferevent_disable(peer, EV_READ);
    evbuffer_add(bufferevent_get_output(dirty->bev), "x", 1);
    bufferevent_disable(dirty->bev, EV_WRITE); /* the pair does not take it at once */
    if (evbuffer_get_length(bufferevent_get_output(dirty->bev)) != 0) {
        lk_upstream_release(dirty);
        ok(pooled(&w, &rt, http) == 1, "a connection with output still queued is not pooled");
    } else {
        ok(0, "the pair left nothing queued; the test cannot tell");
        lk_upstream_free(dirty);
    }
    bufferevent_free(peer);
    bufferevent_free(kept_peer);
    worker_end(&w, conf);
}

/* Issue 18: a Pulsar broker has an http:// and a pulsar:// address (and
 * their TLS siblings); a connection pooled after an HTTP exchange was
 * handed to the next binary client, whose CONNECT went to the web server.
 * A connection is reused for its own key only. */
static void
test_upstream_reuse_by_key(void)
{
    static const char text[] =
        "[lookout]\ntls.upstream_verify = off\n"
        "[pulsar p]\ninternalListenerName = internal\n"
        "webServiceUrl = http://127.0.0.1:18080\nserviceUrl = pulsar://127.0.0.1:16650\n"
        "[broker p/b1]\nadvertisedListeners = internal:http://10.0.0.11:8080,"
        "internal:pulsar://10.0.0.11:6650,internal:https://b1.internal:8443,"
        "internal:pulsar+ssl://b1.internal:6651\n"
        "[broker p/b2]\nadvertisedListeners = internal:http://10.0.0.12:8080,"
        "internal:pulsar://10.0.0.12:6650\n";
    struct lk_conf *conf = conf_of(text);
    if (conf == NULL)
        return;
    struct lk_runtime rt = {.conf = conf};
    struct lk_worker w = {.base = event_base_new(), .rt = &rt};
    const struct lk_broker *b1 = conf->brokers[0], *b2 = conf->brokers[1];
    const struct lk_url *const *a = (const struct lk_url *const *)b1->internal->addr;
    struct bufferevent *peers[LK_SCHEME__COUNT] = {NULL};
    struct lk_upstream *pooled_up[LK_SCHEME__COUNT] = {NULL};
    int called = 0;

    lk_idle_pool_init(&w.idle, 2);
    /* One idle connection to each of b1's four addresses. */
    for (int sc = LK_SCHEME_HTTP; sc <= LK_SCHEME_PULSAR_SSL; sc++) {
        pooled_up[sc] = fake_upstream(&w, &rt, b1, a[sc], &peers[sc]);
        lk_upstream_release(pooled_up[sc]);
        ok(pooled(&w, &rt, a[sc]) == 1, "%s pooled under its own key", a[sc]->text);
    }
    /* Each protocol and TLS-ness gets its own back, and nothing else. */
    static const struct {
        enum lk_scheme family;
        int client_tls;
        enum lk_scheme want;
    } asks[] = {
        {LK_SCHEME_PULSAR, 0, LK_SCHEME_PULSAR},
        {LK_SCHEME_HTTP, 1, LK_SCHEME_HTTPS},
        {LK_SCHEME_PULSAR, 1, LK_SCHEME_PULSAR_SSL},
        {LK_SCHEME_HTTP, 0, LK_SCHEME_HTTP},
    };
    for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
        struct lk_conn client = {.tls = asks[i].client_tls};
        struct lk_upstream *got =
            lk_upstream_get(&w, &rt, b1, asks[i].family, &client, ready, &called);
        ok(got == pooled_up[asks[i].want] && got->addr == a[asks[i].want] &&
               got->key.scheme == asks[i].want,
           "asked for %s (client TLS %d): the %s connection",
           asks[i].family == LK_SCHEME_HTTP ? "http" : "pulsar", asks[i].client_tls,
           a[asks[i].want]->text);
        ok(pooled(&w, &rt, a[asks[i].want]) == 0, "... taken from its list");
        for (int sc = LK_SCHEME_HTTP; sc <= LK_SCHEME_PULSAR_SSL; sc++)
            if (sc != (int)asks[i].want && pooled_up[sc] != NULL && pooled_up[sc]->idle)
                ok(pooled(&w, &rt, a[sc]) == 1, "... %s left alone", a[sc]->text);
        pooled_up[asks[i].want] = NULL;
        lk_upstream_free(got);
    }
    /* The bug as filed: an HTTP connection pooled, a binary client next. */
    struct bufferevent *peer;
    struct lk_upstream *h = fake_upstream(&w, &rt, b2, b2->internal->addr[LK_SCHEME_HTTP], &peer);
    lk_upstream_release(h);
    struct lk_upstream *got = lk_upstream_get(&w, &rt, b2, LK_SCHEME_PULSAR, NULL, ready, &called);
    ok(got != NULL && got != h && !got->reused && got->key.scheme == LK_SCHEME_PULSAR &&
           pooled(&w, &rt, b2->internal->addr[LK_SCHEME_HTTP]) == 1,
       "a binary client never gets the broker's pooled HTTP connection");
    lk_upstream_free(got);
    /* Nor another broker's (the same protocol, another address). */
    got = lk_upstream_get(&w, &rt, b1, LK_SCHEME_HTTP, NULL, ready, &called);
    ok(got != NULL && got != h && !got->reused, "nor another broker's");
    lk_upstream_free(got);
    event_base_loop(w.base, EVLOOP_NONBLOCK);

    /* Every field of the key tells connections apart. */
    struct lk_upstream_key k, o;
    lk_upstream_key_make(&k, &rt, NULL, a[LK_SCHEME_HTTPS]);
    ok(k.sni != NULL && strcmp(k.sni, "b1.internal") == 0 && k.alpn_http && k.verified == NULL,
       "https to a name: SNI, ALPN http/1.1, not verified (upstream_verify off)");
    o = k;
    ok(lk_upstream_key_eq(&k, &o), "a key equals itself");
    o.port++;
    ok(!lk_upstream_key_eq(&k, &o), "another port");
    o = k;
    o.scheme = LK_SCHEME_PULSAR_SSL;
    ok(!lk_upstream_key_eq(&k, &o), "another protocol");
    o = k;
    o.host = "b2.internal";
    ok(!lk_upstream_key_eq(&k, &o), "another host");
    o = k;
    o.sni = "other.internal";
    ok(!lk_upstream_key_eq(&k, &o), "another SNI");
    o = k;
    o.verified = "b1.internal";
    ok(!lk_upstream_key_eq(&k, &o), "verified and not");
    o = k;
    o.alpn_http = 0;
    ok(!lk_upstream_key_eq(&k, &o), "another ALPN");
    struct lk_runtime rt2 = {.conf = conf};
    o = k;
    o.rt = &rt2;
    ok(!lk_upstream_key_eq(&k, &o), "another generation");
    lk_upstream_key_make(&o, &rt, NULL, a[LK_SCHEME_HTTP]);
    ok(o.sni == NULL && o.verified == NULL && !o.alpn_http, "plaintext: no TLS identity");
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
        if (peers[sc] != NULL)
            bufferevent_free(peers[sc]);
    bufferevent_free(peer);
    worker_end(&w, conf);
    ok(w.idle.slots == NULL, "the pool freed");
}

/* Upstream TLS: the SSL is what the key says (SNI, verified name, ALPN), and
 * no session is ever carried from one connection to another: the client
 * context caches none and none is set, so a broker's session can never be
 * offered to another broker (or another name). */
static void
test_upstream_tls_identity(void)
{
    static const char text[] =
        "[pulsar p]\ninternalListenerName = internal\n"
        "webServiceUrl = http://127.0.0.1:18080\n"
        "[broker p/b1]\nadvertisedListeners = internal:https://b1.internal:8443,"
        "internal:pulsar+ssl://10.0.0.11:6651\n";
    char err[256];
    struct lk_conf *conf = conf_of(text);
    if (conf == NULL)
        return;
    struct lk_runtime *rt = lk_runtime_new(conf, err, sizeof(err));
    if (!ok(rt != NULL && rt->client_ctx != NULL, "runtime with a client context (%s)", err))
        goto end;
    ok((SSL_CTX_get_session_cache_mode(rt->client_ctx) & SSL_SESS_CACHE_CLIENT) == 0,
       "the client context caches no session");
    const struct lk_broker *b = conf->brokers[0];
    SSL *web = lk_upstream_ssl_new(rt, b->internal->addr[LK_SCHEME_HTTPS]);
    SSL *bin = lk_upstream_ssl_new(rt, b->internal->addr[LK_SCHEME_PULSAR_SSL]);
    ok(web != NULL && bin != NULL, "SSLs made");
    ok(SSL_get_session(web) == NULL && SSL_get_session(bin) == NULL, "no session set on either");
    const char *sni = SSL_get_servername(web, TLSEXT_NAMETYPE_host_name);
    ok(sni != NULL && strcmp(sni, "b1.internal") == 0, "https to a name: SNI the name");
    ok(SSL_get_servername(bin, TLSEXT_NAMETYPE_host_name) == NULL, "pulsar+ssl to an IP: no SNI");
    ok(X509_VERIFY_PARAM_get0_host(SSL_get0_param(web), 0) != NULL &&
           strcmp(X509_VERIFY_PARAM_get0_host(SSL_get0_param(web), 0), "b1.internal") == 0,
       "https: the certificate must name b1.internal");
    ok(X509_VERIFY_PARAM_get0_host(SSL_get0_param(bin), 0) == NULL,
       "pulsar+ssl to an IP: verified by IP, not by a name");
    SSL_free(web);
    SSL_free(bin);
end:
    lk_runtime_free(rt);
    lk_conf_unref(conf);
}

/* A service address sends its protocol only to brokers whose internal
 * listener has an address of that family: HTTP never goes to a broker with
 * binary addresses only, whatever the round robin says, and with none at
 * all there is no broker to pick (lk_http.c answers 503). */
static void
test_pick_by_family(void)
{
    static const char text[] =
        "[pulsar p]\ninternalListenerName = internal\n"
        "webServiceUrl = http://127.0.0.1:18080\nserviceUrl = pulsar://127.0.0.1:16650\n"
        "[broker p/b1]\nadvertisedListeners = internal:pulsar://10.0.0.1:6650\n"
        "[broker p/b2]\nadvertisedListeners = internal:pulsar://10.0.0.2:6650,"
        "internal:http://10.0.0.2:8080\n"
        "[broker p/b3]\nadvertisedListeners = internal:pulsar+ssl://10.0.0.3:6651\n";
    static const char binary[] =
        "[pulsar q]\nserviceUrl = pulsar://127.0.0.1:16651\n"
        "[broker q/b1]\nadvertisedListeners = internal:pulsar://10.0.1.1:6650\n";
    char err[256];
    struct lk_conf *conf = conf_of(text), *conf2 = conf_of(binary);
    struct lk_runtime *rt = NULL, *rt2 = NULL;
    unsigned seen[3] = {0, 0, 0}, http_b2 = 0;

    if (conf == NULL || conf2 == NULL)
        goto end;
    rt = lk_runtime_new(conf, err, sizeof(err));
    rt2 = lk_runtime_new(conf2, err, sizeof(err));
    if (!ok(rt != NULL && rt2 != NULL, "runtimes (%s)", err))
        goto end;
    for (int i = 0; i < 9; i++) {
        const struct lk_broker *h = lk_pick_broker(rt, conf->clusters[0], LK_SCHEME_HTTP);
        const struct lk_broker *b = lk_pick_broker(rt, conf->clusters[0], LK_SCHEME_PULSAR);
        http_b2 += h == conf->brokers[1];
        if (b != NULL)
            seen[b->index]++;
    }
    ok(http_b2 == 9, "HTTP: b2 every time, the one broker with an http address (%u of 9)", http_b2);
    ok(seen[0] != 0 && seen[1] != 0 && seen[2] != 0, "pulsar: every broker in turn (%u, %u, %u)",
       seen[0], seen[1], seen[2]);
    /* b2 failing: HTTP still goes to it (the only one), never to b1 or b3. */
    lk_broker_connect_result(rt, conf->brokers[1], 0);
    ok(lk_pick_broker(rt, conf->clusters[0], LK_SCHEME_HTTP) == conf->brokers[1],
       "HTTP with b2 failing: still b2, never a binary-only broker");
    ok(lk_pick_broker(rt2, conf2->clusters[0], LK_SCHEME_HTTP) == NULL,
       "a binary-only cluster: no broker for HTTP");
    ok(lk_pick_broker(rt2, conf2->clusters[0], LK_SCHEME_PULSAR) == conf2->brokers[0],
       "... and its broker for pulsar");
end:
    lk_runtime_free(rt);
    lk_runtime_free(rt2);
    lk_conf_unref(conf);
    lk_conf_unref(conf2);
}

/* The server_name extension body, as the client-hello callback reads it
 * to keep each TLS session to its name. */
static void
test_sni_parse(void)
{
    char out[256];
    static const unsigned char good[] = "\x00\x12\x00\x00\x0f" "B1.lookout.TEST";
    static const unsigned char two[] = "\x00\x0a\x00\x00\x02" "b1" "\x00\x00\x02" "b2";
    static const unsigned char ip[] = "\x00\x05\x01\x00\x02" "b1";
    static const unsigned char nul[] = "\x00\x06\x00\x00\x03" "a\0b";
    static const unsigned char shortlen[] = "\x00\x12\x00\x00\x0e" "b1.lookout.test";

    ok(lk_tls_sni_parse(good, sizeof(good) - 1, out, sizeof(out)) == 15 &&
           strcmp(out, "b1.lookout.test") == 0,
       "a host_name, lower-cased");
    ok(lk_tls_sni_parse(good, sizeof(good) - 1, out, 15) == -1, "too long for the buffer: refused");
    ok(lk_tls_sni_parse(two, sizeof(two) - 1, out, sizeof(out)) == -1, "two entries: refused");
    ok(lk_tls_sni_parse(ip, sizeof(ip) - 1, out, sizeof(out)) == -1, "not host_name: refused");
    ok(lk_tls_sni_parse(nul, sizeof(nul) - 1, out, sizeof(out)) == -1, "a NUL in the name");
    ok(lk_tls_sni_parse(shortlen, sizeof(shortlen) - 1, out, sizeof(out)) == -1,
       "a name length short of the rest");
    ok(lk_tls_sni_parse(good, 4, out, sizeof(out)) == -1, "cut short");
    ok(lk_tls_sni_parse(good, 0, out, sizeof(out)) == -1, "empty");
}

const struct lk_test_case lk_test_conn[] = {
    {"conn/route", test_route},
    {"conn/upstream_reuse", test_upstream_reuse},
    {"conn/upstream_reuse_by_key", test_upstream_reuse_by_key},
    {"conn/upstream_tls_identity", test_upstream_tls_identity},
    {"conn/pick_by_family", test_pick_by_family},
    {"conn/sni_parse", test_sni_parse},
    {NULL, NULL},
};
