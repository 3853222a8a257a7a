/*
 * Dialling a broker within its cluster's internal_networks: resolve a
 * name on the loop, keep the answers inside, connect to the first.
 * lk_dial.h has the contract.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include "lk_clock.h"
#include "lk_dial.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_stats.h"

const char lk_err_outside_networks[] = "outside internal_networks";

/* A name lookup under way, the resolver callback's argument.  It lives
 * apart from its owner: libevent calls back once even after
 * evdns_getaddrinfo_cancel (with EVUTIL_EAI_CANCEL, from the loop, when
 * the owner may be gone), so lk_dial_cancel only detaches it and the
 * callback frees it. */
struct lk_dial_req {
    struct lk_dial *d; /* NULL once cancelled: nothing below may be touched */
    struct evdns_getaddrinfo_request *r;
    struct bufferevent *bev;
    struct lk_rt_stats *stats;
    const struct lk_broker *b;
    const struct lk_url *addr;
    long long deadline_ms; /* the dial's timeout, from lk_dial_start */
};

static void
set_timeouts(struct bufferevent *bev, long long ms)
{
    struct timeval tv;

    if (ms < 1)
        ms = 1; /* spent on the lookup: time out at once, from the loop */
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    bufferevent_set_timeouts(bev, &tv, &tv);
}

/* Reports a failed dial through bev's event callback, from the loop, as
 * libevent reports a failed connect; errno at this point goes with it. */
static void
fail(struct bufferevent *bev)
{
    bufferevent_trigger_event(bev, BEV_EVENT_ERROR, BEV_TRIG_DEFER_CALLBACKS);
    /* Its timeouts must not report the same dial a second time. */
    bufferevent_disable(bev, EV_READ | EV_WRITE);
}

/* Every address of b at addr lies outside internal_networks: seen lists
 * what the name resolved to, NULL for an IP literal. */
static void
refuse(struct lk_dial *d, struct bufferevent *bev, struct lk_rt_stats *stats,
       const struct lk_broker *b, const struct lk_url *addr, const char *seen)
{
    if (seen != NULL)
        lk_log(LK_ERR, NULL, "cluster %s: broker %s: %s resolved to %s: %s; not dialling it",
               b->cluster->name, b->name, addr->host, seen, lk_err_outside_networks);
    else
        lk_log(LK_ERR, NULL, "cluster %s: broker %s: %s: %s; not dialling it", b->cluster->name,
               b->name, addr->host, lk_err_outside_networks);
    lk_stats_broker_error(stats, b, LK_UPERR_OUTSIDE);
    d->error = lk_err_outside_networks;
    fail(bev);
}

const struct evutil_addrinfo *
lk_dial_pick(const struct lk_cidr *nets, size_t n, const struct evutil_addrinfo *ai, char *seen,
             size_t seenlen)
{
    const struct evutil_addrinfo *pick = NULL;
    size_t used = 0;
    int full = seenlen == 0;

    if (seenlen > 0)
        seen[0] = '\0';
    for (; ai != NULL; ai = ai->ai_next) {
        char text[INET6_ADDRSTRLEN];
        const void *a;

        if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in))
            a = &((const struct sockaddr_in *)ai->ai_addr)->sin_addr;
        else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof(struct sockaddr_in6))
            a = &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        else
            continue; /* not an address lookout could dial */
        if (pick == NULL && (n == 0 || lk_cidr_contains(nets, n, ai->ai_family, a)))
            pick = ai;
        if (full || inet_ntop(ai->ai_family, a, text, sizeof(text)) == NULL)
            continue;
        int k = snprintf(seen + used, seenlen - used, "%s%s", used > 0 ? ", " : "", text);
        if (k < 0 || (size_t)k >= seenlen - used) {
            if (seenlen >= 4)
                memcpy(seen + seenlen - 4, "...", 4);
            full = 1;
        } else {
            used += (size_t)k;
        }
    }
    return pick;
}

static void
resolved_cb(int result, struct evutil_addrinfo *ai, void *arg)
{
    struct lk_dial_req *q = arg;
    struct lk_dial *d = q->d;
    const struct lk_cluster *cl;
    const struct evutil_addrinfo *pick;
    char seen[256];

    if (d == NULL)
        goto out; /* cancelled: its owner may be freed already */
    d->req = NULL;
    if (result != 0) {
        d->dns_error = result;
        fail(q->bev);
        goto out;
    }
    cl = q->b->cluster;
    pick = lk_dial_pick(cl->internal_networks, cl->ninternal_networks, ai, seen, sizeof(seen));
    if (pick == NULL) {
        refuse(d, q->bev, q->stats, q->b, q->addr, seen);
        goto out;
    }
    /* What the lookup took comes off the connect's time. */
    set_timeouts(q->bev, q->deadline_ms - lk_now_ms());
    if (bufferevent_socket_connect(q->bev, pick->ai_addr, (int)pick->ai_addrlen) != 0)
        fail(q->bev); /* could not even start: errno says why */
out:
    if (ai != NULL)
        evutil_freeaddrinfo(ai);
    free(q);
}

void
lk_dial_start(struct lk_dial *d, struct bufferevent *bev, struct evdns_base *dns,
              struct lk_rt_stats *stats, const struct lk_broker *b, const struct lk_url *addr,
              unsigned timeout_ms)
{
    const struct lk_cluster *cl = b->cluster;
    struct evutil_addrinfo hints;
    struct evdns_getaddrinfo_request *r;
    struct lk_dial_req *q;
    char port[8];
    int inside = 1;

    d->error = NULL;
    d->dns_error = 0;
    set_timeouts(bev, timeout_ms);
    /* 1 inside, 0 outside, -1 a name.  Without networks everything is
     * inside, but a name is still resolved here rather than by libevent:
     * its own lookup cannot be cancelled safely when the resolver goes with
     * a generation's health checks (lk_dial_abandon). */
    inside = lk_cidr_contains_host(cl->internal_networks, cl->ninternal_networks, addr->host);
    if (cl->ninternal_networks == 0 && inside == 0)
        inside = 1;
    if (inside == 0) {
        refuse(d, bev, stats, b, addr, NULL);
        return;
    }
    if (inside == 1) {
        /* An IP literal that passed (or needs no check): libevent
         * connects, with no lookup, and reports a failure, even at once,
         * through bev's event callback. */
        bufferevent_socket_connect_hostname(bev, dns, AF_UNSPEC, addr->host, addr->port);
        return;
    }
    if (dns == NULL) { /* the worker has no resolver: the name cannot be checked */
        d->dns_error = EVUTIL_EAI_FAIL;
        fail(bev);
        return;
    }
    q = lk_xmalloc(sizeof(*q));
    *q = (struct lk_dial_req){.d = d, .bev = bev, .stats = stats, .b = b, .addr = addr,
                              .deadline_ms = lk_now_ms() + timeout_ms};
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    snprintf(port, sizeof(port), "%u", (unsigned)addr->port);
    d->req = q;
    r = evdns_getaddrinfo(dns, addr->host, port, &hints, resolved_cb, q);
    /* NULL: it has answered already (from the hosts file, or an error),
     * and resolved_cb has freed q and cleared d->req. */
    if (d->req != NULL)
        d->req->r = r;
}

/* Detaches d's lookup, if any, from d: resolved_cb only frees it. */
static struct lk_dial_req *
detach(struct lk_dial *d)
{
    struct lk_dial_req *q = d->req;

    if (q != NULL) {
        d->req = NULL;
        q->d = NULL;
    }
    return q;
}

void
lk_dial_cancel(struct lk_dial *d)
{
    struct lk_dial_req *q = detach(d);

    if (q != NULL)
        evdns_getaddrinfo_cancel(q->r);
}

void
lk_dial_abandon(struct lk_dial *d)
{
    detach(d);
}

int
lk_dial_dns_error(const struct lk_dial *d, struct bufferevent *bev)
{
    return d->dns_error != 0 ? d->dns_error : bufferevent_socket_get_dns_error(bev);
}

int
lk_dial_proxy_header(struct bufferevent **bevp, const uint8_t *hdr, size_t len, SSL *ssl, int opts,
                     unsigned timeout_ms)
{
    struct bufferevent *bev = *bevp, *tls;
    evutil_socket_t fd = bufferevent_getfd(bev);
    bufferevent_data_cb rd, wr;
    bufferevent_event_cb ev;
    void *arg;
    ssize_t n;

    /* A fresh connection's send buffer is empty: it takes the 16 to 232
     * bytes whole, or the socket is already failing. */
    do
        n = send(fd, hdr, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)len) {
        if (n >= 0)
            errno = EAGAIN;
        goto fail;
    }
    if (ssl == NULL)
        return 0;
    tls = bufferevent_openssl_socket_new(bufferevent_get_base(bev), fd, ssl,
                                         BUFFEREVENT_SSL_CONNECTING, opts);
    if (tls == NULL) {
        errno = ENOMEM;
        goto fail;
    }
    bufferevent_getcb(bev, &rd, &wr, &ev, &arg);
    bufferevent_setfd(bev, -1); /* the socket is the TLS bufferevent's now */
    bufferevent_free(bev);
    bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
    bufferevent_setcb(tls, rd, wr, ev, arg);
    set_timeouts(tls, timeout_ms);
    bufferevent_enable(tls, EV_READ | EV_WRITE);
    *bevp = tls;
    return 0;
fail:
    if (ssl != NULL)
        SSL_free(ssl);
    return -1;
}
