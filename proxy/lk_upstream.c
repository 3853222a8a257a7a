/*
 * Upstream connections: dialled to a broker's internal address (lk_dial.c
 * checks it against internal_networks and resolves it), TLS through a TLS
 * bufferevent, plaintext over the direct path (lk_io.c) once connected;
 * each connect's outcome goes to the broker's health (lk_broker.c).  Idle
 * ones wait in the worker's pool, under the key they were dialled for.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_conn.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_proxyproto.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_upstream.h"
#include "lk_worker.h"

const char lk_err_connect[] = "connect failed";
const char lk_err_connect_timeout[] = "connect timed out";
const char lk_err_tls[] = "TLS handshake with the broker failed";
const char lk_err_reset[] = "connection reset by the broker";
const char lk_err_pp_send[] = "the PROXY protocol header could not be sent";

static int
host_is_ip(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;

    return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

/* FNV-1a over what tells keys apart most often: host, port and scheme
 * (equal keys hash equally; the chain compares them in full).  Its top two
 * bits are the PROXY header's version, so that equal hashes mean equal
 * versions and lk_upstream_key_eq reads the client only when there is one. */
static size_t
key_hash(const struct lk_upstream_key *k)
{
    uint32_t h = 2166136261u;

    for (const char *p = k->host != NULL ? k->host : ""; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ k->port) * 16777619u;
    h = (h ^ (unsigned)k->scheme) * 16777619u;
    return h & 0x3fffffffu; /* the top two bits: pp's (lk_upstream_key_client) */
}

void
lk_upstream_key_make(struct lk_upstream_key *k, const struct lk_runtime *rt,
                     const struct lk_cluster *cl, const struct lk_url *addr)
{
    /* Up to the client's fields, which only lk_upstream_key_client sets. */
    memset(k, 0, offsetof(struct lk_upstream_key, pp_src));
    k->rt = rt;
    k->cluster = cl;
    k->scheme = addr->scheme;
    k->port = addr->port;
    k->host = addr->host;
    k->hash = key_hash(k);
    if (!lk_scheme_is_tls(addr->scheme))
        return;
    k->sni = host_is_ip(addr->host) ? NULL : addr->host;
    k->verified = rt->conf->upstream_verify ? addr->host : NULL;
    k->alpn_http = addr->scheme == LK_SCHEME_HTTPS;
}

static int
str_eq(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* lk_upstream_key_eq, inlined in the pool's lookup (each request's). */
static inline __attribute__((always_inline)) int
key_eq(const struct lk_upstream_key *a, const struct lk_upstream_key *b)
{
    return a->hash == b->hash && a->rt == b->rt && a->cluster == b->cluster &&
           a->scheme == b->scheme && a->port == b->port && str_eq(a->host, b->host) &&
           str_eq(a->sni, b->sni) && str_eq(a->verified, b->verified) &&
           a->alpn_http == b->alpn_http &&
           (a->pp == 0 || (a->pp == b->pp && a->pp_family == b->pp_family &&
                           a->pp_port == b->pp_port &&
                           memcmp(a->pp_src, b->pp_src, sizeof(a->pp_src)) == 0));
}

int
lk_upstream_key_eq(const struct lk_upstream_key *a, const struct lk_upstream_key *b)
{
    return key_eq(a, b);
}

/* The client's address (c->peer: after its own PROXY header, if it had
 * one) into a's source: 0, or -1 when it has none to name. */
static int
peer_src(const struct lk_conn *c, struct lk_pp_addr *a)
{
    if (c->pp_local || c->peer.family == 0)
        return -1;
    a->family = c->peer.family;
    memcpy(a->src, c->peer.ip, sizeof(a->src));
    a->sport = c->peer.port;
    return 0;
}

/* The address c connected to, of a's family, into a's destination: its
 * PROXY header's, or its socket's.  0, or -1. */
static int
local_dst(const struct lk_conn *c, struct lk_pp_addr *a)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    if (c->extra != NULL && c->extra->pp_dst.family != 0) {
        memcpy(a->dst, c->extra->pp_dst.ip, sizeof(a->dst));
        a->dport = c->extra->pp_dst.port;
        return 0;
    }
    if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) != 0 || ss.ss_family != a->family)
        return -1;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
        memcpy(a->dst, &sin->sin_addr, 4);
        a->dport = ntohs(sin->sin_port);
    } else {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
        memcpy(a->dst, &sin6->sin6_addr, 16);
        a->dport = ntohs(sin6->sin6_port);
    }
    return 0;
}

void
lk_upstream_key_client(struct lk_upstream_key *k, const struct lk_cluster *cl,
                       const struct lk_conn *c, struct lk_pp_addr *a)
{
    memset(a, 0, sizeof(*a));
    k->pp = (unsigned char)cl->upstream_proxy_protocol;
    if (k->pp == 0)
        return;
    k->pp_family = 0;
    k->pp_port = 0;
    memset(k->pp_src, 0, sizeof(k->pp_src));
    /* A client lookout cannot name (a balancer's LOCAL or UNKNOWN, a
     * family it does not know) goes as one without an address. */
    if (c == NULL || peer_src(c, a) != 0) {
        a->family = 0;
    } else {
        k->pp_family = (unsigned char)a->family;
        k->pp_port = a->sport;
        memcpy(k->pp_src, a->src, sizeof(k->pp_src));
    }
    uint32_t h = k->hash;
    for (size_t i = 0; i < sizeof(k->pp_src); i++)
        h = (h ^ k->pp_src[i]) * 16777619u;
    h = (h ^ k->pp_port) * 16777619u;
    /* The version in the top bits: equal hashes, equal versions. */
    k->hash = (h & 0x3fffffffu) | ((uint32_t)k->pp << 30);
}

void
lk_idle_pool_init(struct lk_idle_pool *p, size_t nkeys)
{
    size_t n = 16;

    while (n < nkeys * 2 && n < ((size_t)1 << 20))
        n *= 2;
    p->slots = lk_xcalloc(n, sizeof(*p->slots));
    p->nslots = n;
}

/* The list of key k in p; with create, made if p has none.  NULL if none. */
static struct lk_idle_list *
idle_list(struct lk_idle_pool *p, const struct lk_upstream_key *k, int create)
{
    if (p->slots == NULL)
        return NULL;
    struct lk_idle_list **slot = &p->slots[k->hash & (p->nslots - 1)];
    for (struct lk_idle_list *il = *slot; il != NULL; il = il->next)
        if (key_eq(&il->key, k))
            return il;
    if (!create)
        return NULL;
    struct lk_idle_list *il = lk_xcalloc(1, sizeof(*il));
    il->key = *k;
    il->next = *slot;
    *slot = il;
    return il;
}

unsigned
lk_idle_pool_count(const struct lk_idle_pool *p, const struct lk_upstream_key *k)
{
    const struct lk_idle_list *il = idle_list((struct lk_idle_pool *)p, k, 0);
    return il != NULL ? il->count : 0;
}

void
lk_idle_pool_free(struct lk_idle_pool *p)
{
    for (size_t i = 0; i < p->nslots; i++)
        while (p->slots[i] != NULL) {
            struct lk_idle_list *il = p->slots[i];
            while (il->head != NULL) {
                struct lk_upstream *u = il->head;
                il->head = u->next;
                u->next = NULL;
                u->idle = 0;
                lk_upstream_free(u);
            }
            p->slots[i] = il->next;
            free(il);
        }
    free(p->slots);
    p->slots = NULL;
    p->nslots = 0;
}

void
lk_upstream_free(struct lk_upstream *u)
{
    if (u == NULL)
        return;
    if (u->ready_ev != NULL)
        event_free(u->ready_ev); /* cancels a pending report */
    lk_dial_cancel(&u->dial); /* a name lookup may still be under way */
    if (u->bev != NULL) {
        lk_io_detach(&u->io);
        bufferevent_free(u->bev);
    }
    free(u);
}

/* A list of keys with a PROXY header goes once empty (HTTP keeps those
 * naming a client on the client's own list, lk_upstream_keep; any that
 * reach the pool would pile up until the next reload).  Without the
 * header there are as many keys as addresses: those are kept. */
static void __attribute__((noinline))
idle_list_drop(struct lk_idle_pool *p, struct lk_idle_list *il)
{
    struct lk_idle_list **slot = &p->slots[il->key.hash & (p->nslots - 1)];

    while (*slot != il)
        slot = &(*slot)->next;
    *slot = il->next;
    free(il);
}

static inline __attribute__((always_inline)) void
idle_remove(struct lk_upstream *u)
{
    struct lk_idle_list *il = idle_list(&u->w->idle, &u->key, 0);
    for (struct lk_upstream **pp = &il->head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == u) {
            *pp = u->next;
            il->count--;
            break;
        }
    }
    u->next = NULL;
    u->idle = 0;
    if (il->count == 0 && il->key.pp != 0)
        idle_list_drop(&u->w->idle, il);
}

/* Takes u off its client's own list. */
static void
kept_remove(struct lk_upstream *u)
{
    for (struct lk_upstream **pp = &u->owner->kept; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == u) {
            *pp = u->next;
            break;
        }
    }
    u->next = NULL;
    u->owner = NULL;
    u->idle = 0;
}

/* An idle pooled connection saw data, EOF, an error or its idle timeout:
 * whatever it is, the connection is no longer reusable. */
static void
idle_read_cb(struct bufferevent *bev, void *arg)
{
    struct lk_upstream *u = arg;
    if (u->owner != NULL)
        kept_remove(u);
    else
        idle_remove(u);
    lk_upstream_free(u);
}

static void
idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
    idle_read_cb(bev, arg);
}

/* 1 when u may wait idle for another exchange: the current generation's
 * (the pool goes with it), dialled for a key, with no bytes left either
 * way, which would reach or come from the next exchange. */
static inline __attribute__((always_inline)) int
reusable(const struct lk_upstream *u, const struct lk_conf *conf)
{
    return u->rt == u->w->rt && u->key.rt == u->rt && u->key.host != NULL &&
           conf->upstream_idle_max != 0 && evbuffer_get_length(bufferevent_get_input(u->bev)) == 0 &&
           evbuffer_get_length(bufferevent_get_output(u->bev)) == 0;
}

/* u waits idle: whatever it reads ends it, and so does timeout.idle. */
static inline __attribute__((always_inline)) void
idle_wait(struct lk_upstream *u, const struct lk_conf *conf)
{
    struct timeval tv = {conf->timeout_idle_ms / 1000, (conf->timeout_idle_ms % 1000) * 1000};
    u->ready_cb = NULL;
    u->arg = NULL;
    u->idle = 1;
    bufferevent_setcb(u->bev, idle_read_cb, NULL, idle_event_cb, u);
    bufferevent_setwatermark(u->bev, EV_READ, 0, 0);
    bufferevent_setwatermark(u->bev, EV_WRITE, 0, 0);
    lk_io_set_timeouts(&u->io, &tv, NULL);
    lk_io_enable(&u->io, EV_READ);
}

void
lk_upstream_release(struct lk_upstream *u)
{
    const struct lk_conf *conf = u->w->rt->conf;

    if (!reusable(u, conf)) {
        lk_upstream_free(u);
        return;
    }
    struct lk_idle_list *il = idle_list(&u->w->idle, &u->key, 1);
    if (il == NULL || il->count >= conf->upstream_idle_max) {
        lk_upstream_free(u);
        return;
    }
    idle_wait(u, conf);
    u->next = il->head;
    il->head = u;
    il->count++;
}

void
lk_upstream_keep(struct lk_upstream *u, struct lk_conn *c)
{
    const struct lk_conf *conf = u->w->rt->conf;
    unsigned same = 0;

    if (u->key.pp_family == 0) { /* a LOCAL or UNKNOWN header: anyone's */
        lk_upstream_release(u);
        return;
    }
    /* c's reference keeps the generation alive for as long as its list
     * (lk_conn_renew empties the list when c moves). */
    if (!reusable(u, conf) || u->rt != c->rt) {
        lk_upstream_free(u);
        return;
    }
    for (const struct lk_upstream *k = c->kept; k != NULL; k = k->next)
        same += lk_upstream_key_eq(&k->key, &u->key);
    if (same >= conf->upstream_idle_max) {
        lk_upstream_free(u);
        return;
    }
    idle_wait(u, conf);
    u->owner = c;
    u->next = c->kept;
    c->kept = u;
}

/* lk_conn_close calls lk_upstream_drop_kept through this: lk_conn.c is
 * below this module.  Set before main, so before any worker thread. */
static void __attribute__((constructor))
kept_drop_hook(void)
{
    lk_conn_kept_drop = lk_upstream_drop_kept;
}

void
lk_upstream_drop_kept(struct lk_conn *c)
{
    while (c->kept != NULL) {
        struct lk_upstream *u = c->kept;
        c->kept = u->next;
        u->next = NULL;
        u->owner = NULL;
        u->idle = 0;
        lk_upstream_free(u);
    }
}

enum lk_upstream_err_kind
lk_upstream_err_kind(const char *error)
{
    if (error == lk_err_connect_timeout)
        return LK_UPERR_TIMEOUT;
    if (error == lk_err_tls)
        return LK_UPERR_TLS;
    if (error == lk_err_reset)
        return LK_UPERR_RESET;
    return LK_UPERR_CONNECT;
}

void
lk_upstream_error(struct lk_runtime *rt, const struct lk_broker *b, enum lk_upstream_err_kind kind)
{
    lk_stats_broker_error(rt->stats, b, kind);
}

static SSL *ssl_for_key(SSL_CTX *ctx, const struct lk_upstream_key *k);

/* Connected, with a PROXY header to send first: sends it, and for TLS
 * starts the handshake after it, on the same socket (lk_dial_proxy_header).
 * 0 when the handshake is under way: its end comes back to
 * connect_event_cb.  1 when the connection is ready; -1 if the header
 * could not be sent. */
static int
pp_send(struct lk_upstream *u)
{
    SSL *ssl = NULL;
    long long left = u->pp_deadline_ms - lk_now_ms();

    if (lk_scheme_is_tls(u->addr->scheme) &&
        (ssl = ssl_for_key(u->rt->client_ctx, &u->key)) == NULL)
        return -1;
    int rc = lk_dial_proxy_header(&u->bev, u->pp_hdr, u->pp_len, ssl,
                                  BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS,
                                  left > 0 ? (unsigned)left : 1);
    u->pp_len = 0;
    if (rc != 0)
        return -1;
    u->io.bev = u->bev; /* the TLS bufferevent, if it changed */
    return ssl == NULL;
}

static void
connect_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct lk_upstream *u = arg;
    struct lk_runtime *rt = u->rt;
    int pp_failed = 0;

    if (what & BEV_EVENT_CONNECTED) {
        /* Before the first request: lookout writes a head and then its body
         * as it comes, and Nagle would hold the body until the broker ACKs
         * the head, which a kept-alive peer delays by 40 ms. */
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (u->pp_len != 0) {
            int rc = pp_send(u);
            if (rc == 0)
                return; /* the TLS handshake, after the header */
            pp_failed = rc < 0;
        }
    }
    if ((what & BEV_EVENT_CONNECTED) && !pp_failed) {
        lk_broker_connect_result(rt, u->broker, 1);
        bufferevent_set_timeouts(bev, NULL, NULL);
        if (!lk_scheme_is_tls(u->addr->scheme))
            lk_io_go_plain(&u->io, NULL); /* connected: direct reads and writes from now */
        bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
        u->ready_cb(u, LK_UP_CONNECTED, u->arg);
        return;
    }
    char tls_reason[256] = "";
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    unsigned long e = ssl != NULL ? bufferevent_get_openssl_error(bev) : 0;
    if (what & BEV_EVENT_TIMEOUT) {
        u->error = lk_err_connect_timeout;
    } else if (pp_failed) {
        u->error = lk_err_pp_send;
    } else if (e != 0 || (ssl != NULL && SSL_get_verify_result(ssl) != X509_V_OK)) {
        /* libevent moved OpenSSL's errors into the bufferevent's queue */
        long vr = SSL_get_verify_result(ssl);
        u->error = lk_err_tls;
        if (vr != X509_V_OK)
            snprintf(tls_reason, sizeof(tls_reason), "certificate verify failed: %s",
                     X509_verify_cert_error_string(vr));
        else
            ERR_error_string_n(e, tls_reason, sizeof(tls_reason));
        while (bufferevent_get_openssl_error(bev) != 0)
            ;
    } else {
        u->error = u->dial.error != NULL ? u->dial.error : lk_err_connect;
    }
    ERR_clear_error();
    int err = EVUTIL_SOCKET_ERROR();
    int dns = lk_dial_dns_error(&u->dial, bev);
    const char *why = tls_reason[0] != '\0' ? tls_reason
                      : dns != 0             ? evutil_gai_strerror(dns)
                      : err != 0             ? evutil_socket_error_to_string(err)
                                             : "";
    /* A dial refused by internal_networks is logged and counted by lk_dial. */
    if (u->error != lk_err_outside_networks) {
        lk_log(LK_WARN, NULL, "broker %s at %s: %s%s%s%s", u->broker->name, u->addr->text,
               u->error, why[0] != '\0' ? ": " : "", why,
               u->key.pp != 0 && u->error == lk_err_tls
                   ? " (upstream.proxy_protocol is on: does the broker take PROXY headers?)"
                   : "");
        lk_upstream_error(rt, u->broker, lk_upstream_err_kind(u->error));
    }
    lk_broker_connect_result(rt, u->broker, 0);
    u->why = why[0] != '\0' ? why : NULL; /* tls_reason lives until ready_cb returns */
    u->ready_cb(u, what & BEV_EVENT_TIMEOUT ? LK_UP_TIMEOUT : LK_UP_ERROR, u->arg);
}

static void
reuse_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_upstream *u = arg;
    u->ready_cb(u, LK_UP_CONNECTED, u->arg);
}

/* The SSL for key k: exactly what the key says, so that a connection is
 * what its key describes.  No session is set: every upstream handshake is
 * a full one, and no session of one broker is ever offered to another. */
static SSL *
ssl_for_key(SSL_CTX *ctx, const struct lk_upstream_key *k)
{
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL)
        return NULL;
    if (k->sni != NULL)
        SSL_set_tlsext_host_name(ssl, k->sni);
    if (k->alpn_http) {
        static const unsigned char h11[] = "\x08http/1.1";
        SSL_set_alpn_protos(ssl, h11, sizeof(h11) - 1);
    }
    if (k->verified != NULL) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        if (host_is_ip(k->verified))
            X509_VERIFY_PARAM_set1_ip_asc(vp, k->verified);
        else
            X509_VERIFY_PARAM_set1_host(vp, k->verified, 0);
    }
    return ssl;
}

SSL *
lk_upstream_ssl_new(struct lk_runtime *rt, const struct lk_url *addr)
{
    struct lk_upstream_key k;

    lk_upstream_key_make(&k, rt, NULL, addr); /* the SSL does not depend on the cluster */
    return ssl_for_key(rt->client_ctx, &k);
}

/* c's own idle connection of key k (lk_upstream_keep), taken off its
 * list; NULL if none. */
static struct lk_upstream *
kept_take(struct lk_conn *c, const struct lk_upstream_key *k)
{
    for (struct lk_upstream *u = c->kept; u != NULL; u = u->next) {
        if (lk_upstream_key_eq(&u->key, k)) {
            kept_remove(u);
            return u;
        }
    }
    return NULL;
}

struct lk_upstream *
lk_upstream_get(struct lk_worker *w, struct lk_runtime *rt, const struct lk_broker *b,
                enum lk_scheme scheme, struct lk_conn *c, lk_upstream_ready_cb cb, void *arg)
{
    const struct lk_url *addr = lk_broker_upstream(b, scheme, c != NULL && c->tls);
    struct lk_upstream_key key;
    struct lk_pp_addr ppa;
    struct lk_upstream *u = NULL;
    if (addr == NULL)
        return NULL; /* no internal address of that family */
    lk_upstream_key_make(&key, rt, b->cluster, addr);
    if (b->cluster->upstream_proxy_protocol != 0) {
        lk_upstream_key_client(&key, b->cluster, c, &ppa);
        if (c != NULL && c->kept != NULL)
            u = kept_take(c, &key);
    }
    /* Only a connection dialled for this very key: the same address and
     * protocol, TLS identity, cluster (its internal_networks) and
     * generation (an exchange still on an older generation finds none,
     * since the pool holds the worker's). */
    if (u == NULL) {
        struct lk_idle_list *il = idle_list(&w->idle, &key, 0);
        if (il != NULL && (u = il->head) != NULL)
            idle_remove(u);
    }
    const struct lk_conf *conf = rt->conf;

    if (u != NULL) {
        assert(lk_upstream_key_eq(&u->key, &key));
        u->reused = 1;
        u->ready_cb = cb;
        u->arg = arg;
        /* Reading stays on (turning it off and on again costs two
         * epoll_ctl calls per exchange): nothing is read before the report
         * below, which runs in this loop iteration. */
        bufferevent_setcb(u->bev, NULL, NULL, NULL, NULL);
        /* Report from the loop, never re-entrantly from the caller's stack;
         * with u's own event, so that freeing u first cancels the report. */
        if (u->ready_ev == NULL)
            u->ready_ev = evtimer_new(w->base, reuse_cb, u);
        event_active(u->ready_ev, EV_TIMEOUT, 1);
        return u;
    }

    /* The PROXY header is written now, sent once connected. */
    uint8_t hdr[LK_PP_V1_MAX + 1]; /* snprintf's NUL */
    int hlen = 0;
    if (key.pp != 0) {
        if (ppa.family != 0 && local_dst(c, &ppa) != 0)
            ppa.family = 0;
        if ((hlen = lk_pp_write(key.pp, &ppa, hdr, sizeof(hdr))) < 0)
            return NULL;
    }
    u = lk_xmalloc(sizeof(*u) + (size_t)hlen);
    *u = (struct lk_upstream){
        .w = w, .rt = rt, .broker = b, .addr = addr, .key = key, .ready_cb = cb, .arg = arg};
    int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
    if (hlen > 0) {
        memcpy(u->pp_hdr, hdr, (size_t)hlen);
        u->pp_len = (unsigned char)hlen;
        u->pp_deadline_ms = lk_now_ms() + conf->timeout_connect_ms;
    }
    if (lk_scheme_is_tls(u->addr->scheme) && hlen == 0) {
        SSL *ssl = ssl_for_key(rt->client_ctx, &u->key);
        if (ssl == NULL) {
            free(u);
            return NULL;
        }
        u->bev = bufferevent_openssl_socket_new(w->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, opts);
        if (u->bev == NULL) {
            SSL_free(ssl);
            free(u);
            return NULL;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(u->bev, 1);
    } else {
        u->bev = bufferevent_socket_new(w->base, -1, opts);
        if (u->bev == NULL) {
            free(u);
            return NULL;
        }
    }
    lk_io_attach(&u->io, w, u->bev);
    bufferevent_setcb(u->bev, NULL, NULL, connect_event_cb, u);
    bufferevent_enable(u->bev, EV_READ | EV_WRITE);
    /* Any failure is reported through connect_event_cb from the loop. */
    lk_dial_start(&u->dial, u->bev, w->dns, rt->stats, b, u->addr, conf->timeout_connect_ms);
    return u;
}
