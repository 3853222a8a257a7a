/*
 * A client connection (lk_conn.c): a bufferevent, TLS or not, driven by
 * its lk_io (lk_io.h) and handed to the protocol module of its bind (HTTP,
 * Kafka, the Pulsar binary protocol).  The worker it lives on is
 * lk_worker.h; upstreams are lk_upstream.h; the generation it serves
 * (c->rt) is lk_runtime.h.  Nothing here knows a protocol.
 */
#ifndef LK_CONN_H
#define LK_CONN_H

#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <event2/event.h>
#include <event2/event_struct.h> /* struct event, embedded in struct lk_conn */
#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "lk_conf.h"
#include "lk_io.h"
#include "lk_limit.h"
#include "lk_pool.h"
#include "lk_str.h"

struct lk_conn;
struct lk_limit_slot;
struct lk_runtime;
struct lk_stat_obj;
struct lk_upstream;
struct lk_worker;

/* Protocol modules: one per lk_proto, started on each accepted connection. */
struct lk_proto_ops {
    unsigned proto;
    const char *name;
    /* Takes over c: sets the bufferevent callbacks.  Called once (again
     * after parking). */
    void (*start)(struct lk_conn *c);
    /* lookout is stopping: finish what is under way on c, take nothing
     * new, and close c once done; may close c at once (it is not called
     * from a callback on c).  What is still open at drain_timeout is
     * closed by the worker.  NULL: c is closed at once. */
    void (*drain)(struct lk_conn *c);
};

/*
 * What only some client connections need, by a feature that is on: made
 * by the first that does (lk_conn_extra), freed with the connection, so
 * that the many idle connections of a proxy using none of them do not
 * carry it.
 */
struct lk_conn_extra {
    /* The subject of the client's verified certificate, RFC 2253 (malloc'd,
     * for the access log and the HTTP header); NULL: none, or none asked */
    char *cert_subject;
    uint64_t auth_id; /* the check its handshake passed (lk_tls_conn_auth_id); 0: none */
    /* max_connection_age (lk_age.h): when its end begins, then (c->aged)
     * when its grace is over, and its timer */
    long long age_due_ms;
    struct event *age_ev;
    /* The address the client connected to, as its PROXY header says
     * (family 0: it said none), for the one lookout sends on
     * (upstream.proxy_protocol): getsockname would not tell. */
    struct lk_addr pp_dst;
    struct event *close_ev; /* runs a scheduled close (lk_conn_close_later) */
};

/*
 * A client connection.  While the protocol module has nothing under way and
 * the client is silent (lk_conn_idle), the connection is parked: bev, the
 * pool and with it the protocol's state are freed, and only this struct,
 * its socket, its read event (and its TLS session) remain until the client
 * speaks again, when the protocol starts afresh, or the idle timeout ends
 * it.
 */
struct lk_conn {
    struct lk_worker *w;
    const struct lk_conf *conf;
    struct lk_runtime *rt;
    const struct lk_bind *bind;
    struct bufferevent *bev; /* NULL while parked */
    struct lk_io io;     /* how bev is driven */
    struct lk_pool pool; /* the protocol's state: until close or parking */
    const char *sni;    /* from the TLS handshake (OpenSSL's copy), or NULL */
    const char *action; /* what we were doing, for logs */
    void *proto;        /* the protocol module's state (while pp_wait: lk_conn.c's) */
    struct lk_stat_obj *st; /* its bound address's metrics series */
    struct lk_limit_slot *limit; /* its client's count (max_connections_per_client), or NULL */
    struct lk_conn *prev, *next; /* in w->conns, or the worker's free list */
    /* Idle upstreams whose PROXY header names this client
     * (upstream.proxy_protocol, lk_upstream_keep): freed through
     * lk_conn_kept_drop when c closes or moves to another generation.
     * NULL, and never looked at, when the feature is off. */
    struct lk_upstream *kept;
    struct lk_conn_extra *extra; /* NULL until a feature needs it */
    /* peer as text, "ip:port" or "[ip]:port", the address alone peer_ip_len
     * bytes at peer_ip_off: made in the pool when the protocol starts (the
     * access log and X-Forwarded-For use it on every request), NULL before
     * and while parked (lk_conn_peer_text) */
    const char *peer_text;
    struct event rev;   /* io.rev */
    evutil_socket_t fd;
    uint32_t park_ms;   /* how long it may stay parked */
    unsigned tls : 1;
    unsigned aged : 1;    /* past max_connection_age: ending (lk_age.c) */
    unsigned closing : 1; /* a close is scheduled */
    unsigned listener_logged : 1; /* a refused listener name was logged (lk_client_listener) */
    unsigned lacked_logged : 1;   /* a broker without the chosen listener was logged
                                   * (lk_xchg_listener_check) */
    unsigned web_fallback_logged : 1; /* a web address fallback was logged (lk_web_fallback_log) */
    unsigned pp_wait : 1; /* rev waits for its PROXY header (lk_conn.c) */
    /* Its PROXY header named no client (v2 LOCAL, v1 UNKNOWN): peer stays
     * the balancer's, and the header lookout sends on names none. */
    unsigned pp_local : 1;
    /* The client: the socket's peer, or what its PROXY header names (the
     * logs, the access log, X-Forwarded-For, max_connections_per_client,
     * limit.requests, the PROXY header lookout sends); as text, peer_text. */
    struct lk_addr peer;
    unsigned char peer_ip_off, peer_ip_len; /* the address alone in peer_text */
};

/* Frees c->kept: lk_upstream_drop_kept, set before main by lk_upstream.c
 * (which is above this module), whenever it is linked in; only it fills
 * c->kept. */
extern void (*lk_conn_kept_drop)(struct lk_conn *c);

/* The client's address as text, "ip:port": c->peer_text, or made in buf
 * (LK_ADDR_TEXT bytes) while c has none. */
static inline const char *
lk_conn_peer_text(const struct lk_conn *c, char *buf)
{
    if (c->peer_text != NULL)
        return c->peer_text;
    lk_addr_text(&c->peer, 1, buf);
    return buf;
}

/* The same without port or brackets. */
static inline struct lk_str
lk_conn_peer_ip(const struct lk_conn *c, char *buf)
{
    if (c->peer_text != NULL)
        return lk_str_make(c->peer_text + c->peer_ip_off, c->peer_ip_len);
    return lk_str_make(buf, lk_addr_text(&c->peer, 0, buf));
}

/* c's extra, made (zeroed) if it has none yet. */
struct lk_conn_extra *lk_conn_extra(struct lk_conn *c);

/* The subject of the client's verified certificate, or NULL. */
static inline const char *
lk_conn_cert_subject(const struct lk_conn *c)
{
    return c->extra != NULL ? c->extra->cert_subject : NULL;
}

/* The client-certificate check its handshake passed; 0: none. */
static inline uint64_t
lk_conn_auth_id(const struct lk_conn *c)
{
    return c->extra != NULL ? c->extra->auth_id : 0;
}

/* Client connections ------------------------------------------------------ */

/* Closes the connection now: frees the bufferevent (and SSL), the pool and
 * with it the protocol state.  Not from inside a callback on c->bev that
 * still touches c afterwards; use lk_conn_close_later then. */
void lk_conn_close(struct lk_conn *c);
/* The protocol module has nothing under way on c and has waited for the
 * client a while (LK_PARK_AFTER_MS: a busy connection never parks, which
 * would cost more than its exchanges); it may wait timeout more.  c is
 * parked once its output has drained (see struct lk_conn); input cancels
 * that. */
#define LK_PARK_AFTER_MS 50
void lk_conn_park(struct lk_conn *c, const struct timeval *timeout);
/* Closes from the event loop, after the current callback returns; no
 * callback on c runs in between. */
void lk_conn_close_later(struct lk_conn *c);
/* Closes once the output buffer has drained (or after a short grace); never
 * closes synchronously. */
void lk_conn_close_after_flush(struct lk_conn *c);
/* At an exchange boundary (nothing under way on c): moves c to the
 * worker's current generation, its bind to the same address in the new
 * config.  0 if c was on it already, 1 if it moved (c->conf changed), -1
 * if its listener is gone from the new config: the caller closes c. */
int lk_conn_renew(struct lk_conn *c);
/* ", client: ip:port, sni: name, while <action>" for log lines. */
void lk_conn_describe(const struct lk_conn *c, char *buf, size_t len);

/* The listener's accept callback (its arg: the struct lk_listen of the
 * socket): a connection over a limit is refused at once, else it gets its
 * struct lk_conn and its protocol (after the TLS handshake, if any). */
void lk_conn_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                    void *arg);
/* What parks a client connection whose io is idle (1: it did), and wakes a
 * parked one (0: ready to read): struct lk_worker's park and unpark. */
int lk_conn_park_io(struct lk_io *io);
int lk_conn_unpark_io(struct lk_io *io, short what);

#endif
