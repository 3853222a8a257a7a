/* upstream.proxy_protocol: the key, the pool key of a client, the header a
 * broker connection starts with, and lk_dial_proxy_header on a socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_conn.h"
#include "lk_dial.h"
#include "lk_proxyproto.h"
#include "lk_runtime.h"
#include "lk_test.h"
#include "lk_upstream.h"
#include "lk_worker.h"

static const char conf_text[] = "[pulsar p]\ninternalListenerName = internal\n"
                                "webServiceUrl = http://127.0.0.1:18080\n"
                                "upstream.proxy_protocol = v2\n"
                                "[pulsar q]\ninternalListenerName = internal\n"
                                "webServiceUrl = http://127.0.0.1:18081\n"
                                "[broker p/b1]\n"
                                "advertisedListeners = internal:http://10.0.0.11:8080\n"
                                "[broker q/b1]\n"
                                "advertisedListeners = internal:http://10.0.0.12:8080\n";

static struct lk_conf *
load(const char *text)
{
    char err[256];
    struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));

    ok(conf != NULL, "config loads (%s)", conf != NULL ? "" : err);
    return conf;
}

/* Client c at "ip:port" or "[ip6]:port", as lk_conn.c sets it at accept
 * (or from its PROXY header). */
static void
set_peer(struct lk_conn *c, const char *peer)
{
    char ip[64];
    int six = peer[0] == '[';
    const char *colon = strrchr(peer, ':');
    size_t n = (size_t)(colon - peer) - (six ? 2 : 0);

    memcpy(ip, peer + six, n);
    ip[n] = '\0';
    memset(&c->peer, 0, sizeof(c->peer));
    c->peer.family = six ? AF_INET6 : AF_INET;
    c->peer.port = (uint16_t)atoi(colon + 1);
    if (inet_pton(c->peer.family, ip, c->peer.ip) != 1)
        abort();
}

static void
test_key(void)
{
    struct lk_conf *conf = load(conf_text);
    char err[256];

    if (conf == NULL)
        return;
    ok(conf->clusters[0]->upstream_proxy_protocol == LK_PP_V2, "v2 is LK_PP_V2");
    ok(conf->clusters[1]->upstream_proxy_protocol == 0, "off by default");
    static const char *const bad[] = {"any", "on", "v3", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "[pulsar p]\nwebServiceUrl = http://127.0.0.1:18080\n"
                 "upstream.proxy_protocol = %s\n", bad[i]);
        struct lk_conf *c = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
        ok(c == NULL && strstr(err, "upstream.proxy_protocol") != NULL,
           "upstream.proxy_protocol = '%s' refused: %s", bad[i], c == NULL ? err : "loaded");
        lk_conf_unref(c);
    }
    static const char v1[] = "[kafka k]\nbootstrap.servers = 127.0.0.1:19092\n"
                             "lookupListenerName = EXTERNAL\nupstream.proxy_protocol = v1\n"
                             "listener.security.protocol.map = PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
                             "[broker k/1]\nadvertised.listeners = PLAINTEXT://10.0.0.1:9092,"
                             "EXTERNAL://127.0.0.1:19093\n";
    struct lk_conf *kc = lk_conf_load_buf("t.conf", v1, strlen(v1), err, sizeof(err));
    ok(kc != NULL && kc->clusters[0]->upstream_proxy_protocol == LK_PP_V1,
       "a [kafka] cluster takes it too (%s)", kc != NULL ? "" : err);
    lk_conf_unref(kc);

    struct lk_runtime rt = {.conf = conf};
    const struct lk_cluster *on = conf->clusters[0], *off = conf->clusters[1];
    const struct lk_url *addr = on->brokers[0]->internal->addr[LK_SCHEME_HTTP];
    struct lk_conn a = {.fd = -1}, b = {.fd = -1}, a2 = {.fd = -1}, six = {.fd = -1};
    struct lk_upstream_key ka, kb, ka2, koff, kbase, ksix, knone, klocal;
    struct lk_pp_addr pa;

    set_peer(&a, "192.0.2.7:40001");
    b = a;
    set_peer(&b, "192.0.2.7:40002");
    a2 = a;
    set_peer(&six, "[2001:db8::5]:443");

    lk_upstream_key_make(&kbase, &rt, on, addr);
    ka = kbase;
    lk_upstream_key_client(&ka, on, &a, &pa);
    ok(ka.pp == LK_PP_V2 && pa.family == AF_INET && pa.sport == 40001 &&
           memcmp(pa.src, "\xc0\x00\x02\x07", 4) == 0,
       "the source is the client c->peer holds, port included");
    kb = kbase;
    lk_upstream_key_client(&kb, on, &b, &pa);
    ka2 = kbase;
    lk_upstream_key_client(&ka2, on, &a2, &pa);
    ok(lk_upstream_key_eq(&ka, &ka2), "the same client address: the same key");
    ok(!lk_upstream_key_eq(&ka, &kb), "another port of the same IP: another key");
    ok(!lk_upstream_key_eq(&ka, &kbase), "a client's key is not the key without one");
    ok(ka.hash != kbase.hash && ka.hash != kb.hash, "the client goes into the hash");
    ksix = kbase;
    lk_upstream_key_client(&ksix, on, &six, &pa);
    ok(pa.family == AF_INET6 && pa.sport == 443 && ksix.pp_family == AF_INET6 &&
           !lk_upstream_key_eq(&ksix, &ka),
       "an IPv6 client");
    knone = kbase;
    lk_upstream_key_client(&knone, on, NULL, &pa);
    ok(knone.pp == LK_PP_V2 && knone.pp_family == 0 && pa.family == 0,
       "lookout's own connection names no client");
    struct lk_conn local = a;
    local.pp_local = 1;
    klocal = kbase;
    lk_upstream_key_client(&klocal, on, &local, &pa);
    ok(pa.family == 0 && lk_upstream_key_eq(&klocal, &knone),
       "a client whose balancer sent LOCAL or UNKNOWN goes as one without an address");
    lk_upstream_key_make(&koff, &rt, off, off->brokers[0]->internal->addr[LK_SCHEME_HTTP]);
    struct lk_upstream_key koff2 = koff;
    lk_upstream_key_client(&koff2, off, &a, &pa);
    ok(lk_upstream_key_eq(&koff, &koff2) && koff2.pp == 0 && koff2.hash == koff.hash,
       "off: the key is the one without the feature");
    ok((ka.hash >> 30) == LK_PP_V2 && (kbase.hash >> 30) == 0, "the version is in the hash");
    lk_conf_unref(conf);
}

static void
ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg)
{
    *(int *)arg += ev == LK_UP_CONNECTED ? 1 : 100;
}

static size_t
nlists(const struct lk_idle_pool *p)
{
    size_t n = 0;

    for (size_t i = 0; i < p->nslots; i++)
        for (const struct lk_idle_list *il = p->slots[i]; il != NULL; il = il->next)
            n++;
    return n;
}

/* An upstream of client c's key on one end of a fresh pair (*peer: the
 * broker's end). */
static struct lk_upstream *
pair_upstream(struct lk_worker *w, struct lk_runtime *rt, const struct lk_broker *b,
              struct lk_conn *c, struct bufferevent **peer)
{
    const struct lk_url *http = b->internal->addr[LK_SCHEME_HTTP];
    struct bufferevent *pair[2];
    struct lk_pp_addr pa;

    bufferevent_pair_new(w->base, 0, pair);
    struct lk_upstream *u = calloc(1, sizeof(*u));
    *u = (struct lk_upstream){.w = w, .rt = rt, .broker = b, .addr = http, .bev = pair[0]};
    lk_upstream_key_make(&u->key, rt, b->cluster, http);
    lk_upstream_key_client(&u->key, b->cluster, c, &pa);
    u->io.bev = pair[0];
    u->io.w = w;
    *peer = pair[1];
    return u;
}

static size_t
nkept(const struct lk_conn *c)
{
    size_t n = 0;

    for (const struct lk_upstream *u = c->kept; u != NULL; u = u->next)
        n++;
    return n;
}

/* The end of a test of w's pool: its connections and events freed. */
static void
pool_done(struct lk_worker *w, struct lk_conf *conf)
{
    lk_idle_pool_free(&w->idle);
    event_base_loop(w->base, EVLOOP_NONBLOCK);
    event_base_free(w->base);
    lk_conf_unref(conf);
}

/* The pool with the header on: a connection released by one client is
 * handed to that client again, never to another; a client's list goes
 * once it is empty. */
static void
test_pool(void)
{
    struct lk_conf *conf = load(conf_text);

    if (conf == NULL)
        return;
    struct lk_runtime rt = {.conf = conf};
    struct lk_worker w = {.base = event_base_new(), .rt = &rt};
    const struct lk_broker *b = conf->clusters[0]->brokers[0];
    struct lk_conn a = {.fd = -1}, other = {.fd = -1};
    struct bufferevent *peer;
    int called = 0;

    set_peer(&a, "192.0.2.7:40001");
    set_peer(&other, "192.0.2.8:40001");
    lk_idle_pool_init(&w.idle, 1);
    struct lk_upstream *u = pair_upstream(&w, &rt, b, &a, &peer);
    lk_upstream_release(u);
    ok(lk_idle_pool_count(&w.idle, &u->key) == 1 && nlists(&w.idle) == 1,
       "released under its client's key");
    struct lk_upstream *got = lk_upstream_get(&w, &rt, b, LK_SCHEME_HTTP, &other, ready, &called);
    ok(got != NULL && got != u && !got->reused, "another client gets a new connection");
    ok(got != NULL && got->pp_len == 16 && got->pp_hdr[12] == 0x20,
       "... whose header (its socket's address unknown here) is a v2 LOCAL");
    lk_upstream_free(got);
    got = lk_upstream_get(&w, &rt, b, LK_SCHEME_HTTP, &a, ready, &called);
    ok(got == u && got->reused, "the same client gets its own connection back");
    ok(nlists(&w.idle) == 0, "... and its emptied list is gone");
    lk_upstream_free(got);
    bufferevent_free(peer);
    pool_done(&w, conf);
}

/* lk_upstream_keep: a connection whose header names its client waits on
 * that client's own list, never in the worker's pool; the client's next
 * exchange gets it back, another client never; it goes when the client
 * does (lk_conn_kept_drop, which lk_conn_close calls), or on its own (the broker
 * closed it) without leaving a dangling entry. */
static void
test_kept(void)
{
    struct lk_conf *conf = load(conf_text);

    if (conf == NULL)
        return;
    struct lk_runtime rt = {.conf = conf}, old = {.conf = conf};
    struct lk_worker w = {.base = event_base_new(), .rt = &rt};
    const struct lk_broker *b = conf->clusters[0]->brokers[0];
    struct lk_conn a = {.fd = -1, .rt = &rt}, other = {.fd = -1, .rt = &rt};
    struct lk_conn local = {.fd = -1, .rt = &rt, .pp_local = 1};
    struct bufferevent *peer, *peer2;
    int called = 0;

    set_peer(&a, "192.0.2.7:40001");
    set_peer(&other, "192.0.2.8:40001");
    lk_idle_pool_init(&w.idle, 1);
    struct lk_upstream *u = pair_upstream(&w, &rt, b, &a, &peer);
    lk_upstream_keep(u, &a);
    ok(a.kept == u && u->owner == &a && u->idle && nlists(&w.idle) == 0,
       "kept on its client's list, not in the worker's pool");
    ok(lk_conn_kept_drop == lk_upstream_drop_kept, "... and lk_conn_close's hook frees it");
    struct lk_upstream *got = lk_upstream_get(&w, &rt, b, LK_SCHEME_HTTP, &other, ready, &called);
    ok(got != NULL && got != u && !got->reused && a.kept == u, "another client gets a new one");
    lk_upstream_free(got);
    got = lk_upstream_get(&w, &rt, b, LK_SCHEME_HTTP, &a, ready, &called);
    ok(got == u && got->reused && a.kept == NULL && u->owner == NULL && !u->idle,
       "the same client gets its own back, off its list");
    event_base_loop(w.base, EVLOOP_NONBLOCK);
    ok(called == 1, "reported connected from the loop");
    lk_upstream_keep(u, &a);
    struct lk_upstream *u2 = pair_upstream(&w, &rt, b, &a, &peer2);
    lk_upstream_keep(u2, &a);
    ok(nkept(&a) == 2, "two of its exchanges at once: two kept");
    lk_conn_kept_drop(&a);
    ok(a.kept == NULL, "the client closes: both freed at once");
    bufferevent_free(peer);
    bufferevent_free(peer2);

    u = pair_upstream(&w, &rt, b, &a, &peer);
    lk_upstream_keep(u, &a);
    bufferevent_write(peer, "x", 1); /* the broker says something: no longer reusable */
    for (int i = 0; i < 10 && a.kept != NULL; i++)
        event_base_loop(w.base, EVLOOP_NONBLOCK);
    ok(a.kept == NULL, "one that reads from its broker leaves its client's list");
    bufferevent_free(peer);

    u = pair_upstream(&w, &rt, b, &local, &peer);
    lk_upstream_keep(u, &local);
    ok(local.kept == NULL && lk_idle_pool_count(&w.idle, &u->key) == 1,
       "a header naming no client (LOCAL): the worker's pool, as before");
    lk_idle_pool_free(&w.idle);
    lk_idle_pool_init(&w.idle, 1);
    bufferevent_free(peer);

    struct lk_conn moved = a;
    moved.kept = NULL;
    moved.rt = &old; /* not yet moved to the worker's generation */
    u = pair_upstream(&w, &rt, b, &moved, &peer);
    lk_upstream_keep(u, &moved);
    ok(moved.kept == NULL, "one of another generation than its client's is not kept");
    bufferevent_free(peer);

    pool_done(&w, conf);
}

/* The header a broker gets parses back to the client's addresses. */
static void
test_header(void)
{
    struct lk_pp_addr a = {.family = AF_INET, .sport = 40001, .dport = 6650};
    struct lk_pp_hdr h;
    uint8_t out[LK_PP_V1_MAX + 1];
    char err[128];
    int n;

    inet_pton(AF_INET, "192.0.2.7", a.src);
    inet_pton(AF_INET, "198.51.100.1", a.dst);
    n = lk_pp_write(LK_PP_V1, &a, out, sizeof(out));
    ok(n > 0 && memcmp(out, "PROXY TCP4 192.0.2.7 198.51.100.1 40001 6650\r\n", (size_t)n) == 0,
       "v1: %.*s", n > 2 ? n - 2 : 0, out);
    n = lk_pp_write(LK_PP_V2, &a, out, sizeof(out));
    ok(n == 28 && out[12] == 0x21 && out[13] == 0x11, "v2: PROXY, TCP over IPv4, 28 bytes");
    ok(lk_pp_parse(out, (size_t)n, LK_PP_V2, &h, err, sizeof(err)) == n && !h.local &&
           h.addr.sport == 40001 && h.addr.dport == 6650 && memcmp(h.addr.src, a.src, 4) == 0 &&
           memcmp(h.addr.dst, a.dst, 4) == 0,
       "v2 parses back to the same addresses");
    a.family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::5", a.src);
    inet_pton(AF_INET6, "2001:db8::1", a.dst);
    n = lk_pp_write(LK_PP_V2, &a, out, sizeof(out));
    ok(n == 52 && out[13] == 0x21 &&
           lk_pp_parse(out, (size_t)n, LK_PP_V2, &h, err, sizeof(err)) == n &&
           h.addr.family == AF_INET6,
       "v2: TCP over IPv6, 52 bytes");
    n = lk_pp_write(LK_PP_V1, &a, out, sizeof(out));
    ok(n > 0 && memcmp(out, "PROXY TCP6 2001:db8::5 2001:db8::1 40001 6650\r\n", (size_t)n) == 0,
       "v1 over IPv6");
    struct lk_pp_addr none = {0};
    n = lk_pp_write(LK_PP_V1, &none, out, sizeof(out));
    ok(n == 15 && memcmp(out, "PROXY UNKNOWN\r\n", 15) == 0, "no client: v1 UNKNOWN");
    n = lk_pp_write(LK_PP_V2, &none, out, sizeof(out));
    ok(n == 16 && out[12] == 0x20 && out[13] == 0 &&
           lk_pp_parse(out, (size_t)n, LK_PP_V2, &h, err, sizeof(err)) == 16 && h.local,
       "no client: v2 LOCAL, no address");
    a.family = AF_INET6;
    memset(a.src, 0xff, 16);
    memset(a.dst, 0xff, 16);
    a.sport = a.dport = 65535;
    n = lk_pp_write(LK_PP_V1, &a, out, LK_PP_V1_MAX + 1);
    ok(n > 0 && n <= LK_PP_V1_MAX, "the longest v1 header fits LK_PP_V1_MAX (%d)", n);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
    *(short *)arg = what;
}

/* lk_dial_proxy_header on a real socket: the header first, then what the
 * bufferevent writes; with a socket that is gone, -1. */
static void
test_dial_header(void)
{
    struct event_base *base = event_base_new();
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sin);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    short what = 0;

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(ls, (struct sockaddr *)&sin, sizeof(sin));
    listen(ls, 4);
    getsockname(ls, (struct sockaddr *)&sin, &sl);
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(bev, NULL, NULL, event_cb, &what);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    bufferevent_socket_connect(bev, (struct sockaddr *)&sin, sizeof(sin));
    for (int i = 0; i < 100 && what == 0; i++)
        event_base_loop(base, EVLOOP_ONCE);
    ok(what & BEV_EVENT_CONNECTED, "connected");
    int peer = accept(ls, NULL, NULL);
    ok(lk_dial_proxy_header(&bev, (const uint8_t *)"PROXY UNKNOWN\r\n", 15, NULL, 0, 1000) == 0,
       "the header is sent");
    bufferevent_write(bev, "hello", 5);
    for (int i = 0; i < 10; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    char buf[64] = "";
    ssize_t n = 0, r;
    while (n < 20 && (r = recv(peer, buf + n, sizeof(buf) - 1 - (size_t)n, 0)) > 0)
        n += r;
    ok(n == 20 && memcmp(buf, "PROXY UNKNOWN\r\nhello", 20) == 0,
       "the broker reads the header, then the bytes after it");
    close(peer);
    shutdown(bufferevent_getfd(bev), SHUT_RDWR);
    errno = 0;
    int rc = lk_dial_proxy_header(&bev, (const uint8_t *)"PROXY UNKNOWN\r\n", 15, NULL, 0, 1000);
    ok(rc == -1 && errno != 0, "a socket that cannot take it: -1 (%s)", strerror(errno));
    bufferevent_free(bev);
    close(ls);
    event_base_free(base);
}

const struct lk_test_case lk_test_ppout[] = {
    {"ppout/key", test_key},
    {"ppout/pool", test_pool},
    {"ppout/kept", test_kept},
    {"ppout/header", test_header},
    {"ppout/dial_header", test_dial_header},
    {NULL, NULL},
};
