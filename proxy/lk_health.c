/*
 * Active broker health checks: a timer per checked cluster; on each tick
 * one probe per broker of it, a TCP connect, or an HTTP/1.1 GET whose
 * status line must say 2xx, or, for a Pulsar broker whose map names binary
 * addresses only, a CONNECT that must be answered CONNECTED; each bounded
 * by health.timeout.  The outcome goes into rt->health through
 * lk_broker_check_result, so the rotation of service addresses and the
 * admin pages see one state whatever found it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "lk_broker.h"
#include "lk_dial.h"
#include "lk_health.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_proxyproto.h"
#include "lk_pulsar_codec.h"
#include "lk_runtime.h"
#include "lk_upstream.h"

/* A status line longer than this is not an HTTP answer. */
#define STATUS_LINE_MAX 1024
/* A CONNECTED is a few dozen bytes; an answer to CONNECT over this is not one. */
#define PULSAR_ANSWER_MAX (64 * 1024)

/* What a check does once connected. */
enum probe_kind {
    PROBE_TCP,    /* nothing: the connect was the check */
    PROBE_HTTP,   /* GET health.path, 2xx */
    PROBE_PULSAR, /* CONNECT, answered CONNECTED */
};

struct probe {
    struct lk_health_checker *hc;
    const struct lk_broker *b;
    const struct lk_url *addr; /* NULL: the broker has nothing to check */
    struct bufferevent *bev;   /* while a check runs */
    struct lk_dial dial;       /* how bev was dialled */
    enum probe_kind kind;
    unsigned pp_pending : 1; /* upstream.proxy_protocol: the header goes first */
};

struct cluster_timer {
    struct lk_health_checker *hc;
    const struct lk_cluster *cl;
    struct event *ev;
};

struct lk_health_checker {
    struct lk_runtime *rt;
    struct event_base *base;
    struct evdns_base *dns;
    struct probe *probes; /* by broker index */
    struct cluster_timer *timers;
    size_t ntimers;
};

/* What a check connects to, and what it does there: for http, the
 * internal web-service address (upstream.tls picks between http and https
 * as for a plaintext client), or, for a Pulsar broker with binary addresses
 * only, its binary address and a CONNECT; for tcp, the web-service
 * address, else the Pulsar binary one, else the Kafka one.  A TLS address
 * gets a handshake for http and CONNECT: tcp asks whether the port takes
 * connections, nothing more. */
static const struct lk_url *
check_addr(const struct lk_broker *b, int http, enum probe_kind *kind)
{
    const struct lk_url *u = lk_broker_upstream(b, LK_SCHEME_HTTP, 0);

    *kind = http ? PROBE_HTTP : PROBE_TCP;
    if (u != NULL)
        return u;
    if ((u = lk_broker_upstream(b, LK_SCHEME_PULSAR, 0)) != NULL) {
        if (http)
            *kind = PROBE_PULSAR;
        return u;
    }
    return b->internal != NULL && !http ? lk_kafka_addr(b->internal) : NULL;
}

/*
 * The CONNECT a check sends: client_version "lookout-health", protocol
 * version 21 (Pulsar 3.x and 4.x; a broker answers CONNECTED with the lower
 * of its own and this).  A broker that asks for authentication answers
 * otherwise, and fails the check as a 401 fails an http one
 * (health.check = tcp suits such a cluster).
 */
#define HEALTH_CLIENT_VERSION "lookout-health"
#define HEALTH_PROTOCOL_VERSION 21

static void
finish(struct probe *p, int ok, const char *why)
{
    struct lk_runtime *rt = p->hc->rt;

    if (p->bev != NULL) {
        lk_dial_cancel(&p->dial);
        bufferevent_free(p->bev);
        p->bev = NULL;
    }
    if (!ok)
        lk_log(lk_broker_check_fails(rt, p->b) == 0 ? LK_INFO : LK_DEBUG, NULL,
               "broker %s at %s: health check failed: %s", p->b->name, p->addr->text, why);
    lk_broker_check_result(rt, p->b, ok);
}

/* The answer to CONNECT: its first frame, whole, must be CONNECTED. */
static void
read_pulsar(struct probe *p, struct evbuffer *in)
{
    uint8_t pre[LK_PULSAR_PREFIX], *cmd;
    uint32_t total, cmd_size;
    char why[96];
    int type;

    if (evbuffer_copyout(in, pre, sizeof(pre)) < (ev_ssize_t)sizeof(pre))
        return;
    if (lk_pulsar_sizes(pre, PULSAR_ANSWER_MAX, &total, &cmd_size) != 0) {
        finish(p, 0, "the answer to CONNECT is not a Pulsar frame");
        return;
    }
    if (evbuffer_get_length(in) < 4 + (size_t)total)
        return;
    cmd = evbuffer_pullup(in, LK_PULSAR_PREFIX + (ev_ssize_t)cmd_size);
    type = lk_pulsar_command_type(cmd + LK_PULSAR_PREFIX, cmd_size);
    if (type == LK_PULSAR_CONNECTED) {
        finish(p, 1, NULL);
        return;
    }
    snprintf(why, sizeof(why), "CONNECT answered with command type %d, not CONNECTED (3)", type);
    finish(p, 0, why);
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
    struct probe *p = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_CRLF);
    char line[STATUS_LINE_MAX + 1], why[STATUS_LINE_MAX + 64];
    int status;

    if (p->kind == PROBE_PULSAR) {
        read_pulsar(p, in);
        return;
    }
    if (eol.pos < 0) {
        if (evbuffer_get_length(in) > STATUS_LINE_MAX)
            finish(p, 0, "no HTTP status line");
        return;
    }
    size_t n = (size_t)eol.pos < STATUS_LINE_MAX ? (size_t)eol.pos : STATUS_LINE_MAX;
    evbuffer_copyout(in, line, n);
    line[n] = '\0';
    /* "HTTP/1.1 200 OK": only the code matters. */
    if (sscanf(line, "HTTP/1.%*1[01] %3d", &status) != 1 || status < 100) {
        char safe[68];
        snprintf(why, sizeof(why), "not an HTTP status line: %s",
                 lk_log_sanitize(safe, line, n, 64));
        finish(p, 0, why);
        return;
    }
    snprintf(why, sizeof(why), "HTTP %d for %s", status, p->b->cluster->health.path);
    finish(p, status >= 200 && status < 300, why);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct probe *p = arg;
    char why[256];

    if ((what & BEV_EVENT_CONNECTED) && p->pp_pending) {
        /* A check is lookout's own connection: a v2 LOCAL or v1 UNKNOWN
         * header, as HAProxy sends with its checks, then TLS if any. */
        uint8_t hdr[LK_PP_V1_MAX + 1];
        const struct lk_pp_addr none = {0};
        int tls = p->kind != PROBE_TCP && lk_scheme_is_tls(p->addr->scheme);
        SSL *ssl = tls ? lk_upstream_ssl_new(p->hc->rt, p->addr) : NULL;
        int n =
            lk_pp_write((unsigned)p->b->cluster->upstream_proxy_protocol, &none, hdr, sizeof(hdr));
        p->pp_pending = 0;
        if ((tls && ssl == NULL) || n < 0 ||
            lk_dial_proxy_header(&p->bev, hdr, (size_t)n, ssl, BEV_OPT_CLOSE_ON_FREE,
                                 p->b->cluster->health.timeout_ms) != 0) {
            snprintf(why, sizeof(why), "%s", "the PROXY protocol header could not be sent");
            finish(p, 0, why);
            return;
        }
        if (tls)
            return; /* the handshake's end comes back here */
        bev = p->bev;
    }
    if (what & BEV_EVENT_CONNECTED) {
        if (p->kind == PROBE_TCP) {
            finish(p, 1, NULL);
            return;
        }
        if (p->kind == PROBE_PULSAR) {
            if (lk_pulsar_connect_frame(bufferevent_get_output(bev), HEALTH_CLIENT_VERSION,
                                        HEALTH_PROTOCOL_VERSION) != 0)
                finish(p, 0, "out of memory for CONNECT");
            return;
        }
        /* Connection: close, so that nothing waits on an idle keep-alive. */
        evbuffer_add_printf(bufferevent_get_output(bev),
                            "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: lookout-health\r\n"
                            "Connection: close\r\n\r\n",
                            p->b->cluster->health.path, p->addr->hostport);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        snprintf(why, sizeof(why), "no answer within %u ms", p->b->cluster->health.timeout_ms);
    } else if (what & BEV_EVENT_EOF) {
        snprintf(why, sizeof(why), "the broker closed the connection");
    } else if (p->dial.error != NULL) {
        snprintf(why, sizeof(why), "%s", p->dial.error);
    } else {
        unsigned long e = bufferevent_get_openssl_error(bev);
        int dns = lk_dial_dns_error(&p->dial, bev);
        int err = EVUTIL_SOCKET_ERROR();
        if (e != 0)
            ERR_error_string_n(e, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s",
                     dns != 0 ? evutil_gai_strerror(dns) : evutil_socket_error_to_string(err));
        while (bufferevent_get_openssl_error(bev) != 0)
            ;
        ERR_clear_error();
    }
    finish(p, 0, why);
}

static void
start_probe(struct probe *p)
{
    struct lk_health_checker *hc = p->hc;
    const struct lk_health_conf *h = &p->b->cluster->health;
    int opts = BEV_OPT_CLOSE_ON_FREE;

    if (p->bev != NULL) /* the last one is still running: cannot be, timeout <= interval */
        finish(p, 0, "the previous check never ended");
    p->pp_pending = p->b->cluster->upstream_proxy_protocol != 0;
    if (p->kind != PROBE_TCP && lk_scheme_is_tls(p->addr->scheme) && !p->pp_pending) {
        SSL *ssl = lk_upstream_ssl_new(hc->rt, p->addr);
        if (ssl == NULL)
            return;
        p->bev =
            bufferevent_openssl_socket_new(hc->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, opts);
        if (p->bev == NULL) {
            SSL_free(ssl);
            return;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(p->bev, 1);
    } else if ((p->bev = bufferevent_socket_new(hc->base, -1, opts)) == NULL) {
        return;
    }
    bufferevent_setcb(p->bev, p->kind != PROBE_TCP ? read_cb : NULL, NULL, event_cb, p);
    bufferevent_enable(p->bev, EV_READ | EV_WRITE);
    /* A failure, even at once, comes back through event_cb; health.timeout
     * covers the whole check, the name lookup included. */
    lk_dial_start(&p->dial, p->bev, hc->dns, hc->rt->stats, p->b, p->addr, h->timeout_ms);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cluster_timer *t = arg;
    const struct lk_health_conf *h = &t->cl->health;
    struct timeval tv = {h->interval_ms / 1000, (h->interval_ms % 1000) * 1000};

    for (size_t i = 0; i < t->cl->nbrokers; i++) {
        struct probe *p = &t->hc->probes[t->cl->brokers[i]->index];
        if (p->addr != NULL)
            start_probe(p);
    }
    evtimer_add(t->ev, &tv);
}

int
lk_health_start(struct lk_runtime *rt, struct event_base *base, char *err, size_t errlen)
{
    const struct lk_conf *conf = rt->conf;
    struct lk_health_checker *hc;
    size_t n = 0;

    for (size_t i = 0; i < conf->nclusters; i++)
        n += conf->clusters[i]->health.check != LK_HEALTH_CHECK_OFF;
    if (n == 0)
        return 0;
    hc = lk_xcalloc(1, sizeof(*hc));
    /* Its own reference: a reload may leave rt to the connections still
     * on it, and the checks must not outlive it. */
    hc->rt = lk_runtime_ref(rt);
    hc->base = base;
    hc->dns =
        evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    if (hc->dns == NULL) /* no resolv.conf: IP literals still work */
        hc->dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
    hc->probes = lk_xcalloc(conf->nbrokers + 1, sizeof(*hc->probes));
    hc->timers = lk_xcalloc(n, sizeof(*hc->timers));
    rt->checker = hc;
    for (size_t i = 0; i < conf->nbrokers; i++) {
        const struct lk_broker *b = conf->brokers[i];
        struct probe *p = &hc->probes[b->index];
        p->hc = hc;
        p->b = b;
        p->addr = check_addr(b, b->cluster->health.check == LK_HEALTH_CHECK_HTTP, &p->kind);
    }
    for (size_t i = 0; i < conf->nclusters; i++) {
        const struct lk_cluster *cl = conf->clusters[i];
        struct cluster_timer *t = &hc->timers[hc->ntimers];
        if (cl->health.check == LK_HEALTH_CHECK_OFF)
            continue;
        t->hc = hc;
        t->cl = cl;
        if (hc->dns == NULL || (t->ev = evtimer_new(base, tick_cb, t)) == NULL) {
            snprintf(err, errlen, "cluster %s: cannot set up health checks", cl->name);
            lk_health_stop(rt);
            return -1;
        }
        hc->ntimers++;
        struct timeval now = {0, 0};
        evtimer_add(t->ev, &now);
    }
    return 0;
}

void
lk_health_stop(struct lk_runtime *rt)
{
    struct lk_health_checker *hc = rt->checker;

    if (hc == NULL)
        return;
    for (size_t i = 0; i < hc->ntimers; i++)
        event_free(hc->timers[i].ev);
    for (size_t i = 0; i < rt->conf->nbrokers; i++)
        if (hc->probes[i].bev != NULL) {
            lk_dial_abandon(&hc->probes[i].dial); /* failed by evdns_base_free below */
            bufferevent_free(hc->probes[i].bev);  /* libevent looks no name up: lk_dial does */
        }
    if (hc->dns != NULL)
        evdns_base_free(hc->dns, 1);
    free(hc->timers);
    free(hc->probes);
    free(hc);
    rt->checker = NULL;
    lk_runtime_unref(rt);
}
