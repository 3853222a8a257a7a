/*
 * Upstream connections (lk_upstream.c): a bufferevent to one broker's
 * internal address, TLS-verified when that address is TLS, dialled through
 * lk_dial.h, and pooled per worker when idle under the key that makes
 * reuse safe.
 */
#ifndef LK_UPSTREAM_H
#define LK_UPSTREAM_H

#include <stdint.h>
#include <event2/bufferevent.h>
#include <openssl/ssl.h>

#include "lk_conf.h"
#include "lk_dial.h"
#include "lk_io.h"

struct lk_conn;
struct lk_idle_pool;
struct lk_pp_addr;
struct lk_runtime;
struct lk_upstream;
struct lk_worker;

/*
 * What makes an upstream connection safe to reuse for another exchange, as
 * it was dialled: a connection is only ever handed to an exchange whose key
 * is equal in every field (lk_upstream_key_eq).  Not the broker: a broker
 * has several internal addresses, one per protocol (a Pulsar broker's
 * http:// and pulsar://), and bytes of one protocol on another's
 * connection reach the wrong server.  Anything a connection would carry
 * from its first exchange to the next (a PROXY protocol header naming the
 * client, a client certificate) must become a field here.
 */
struct lk_upstream_key {
    const struct lk_runtime *rt; /* the generation: its CA and client context
                                  * (compared by identity) */
    const struct lk_cluster *cluster; /* whose dial policy the connection passed:
                                       * internal_networks, checked at the dial,
                                       * is a cluster's; two clusters may name one
                                       * address (compared by identity) */
    enum lk_scheme scheme;       /* the protocol and its TLS-ness */
    uint16_t port;
    const char *host;            /* as the address names it (a name is resolved
                                  * at each dial) */
    /* TLS only (NULL and 0 otherwise) */
    const char *sni;             /* the server name sent; NULL for an IP literal */
    const char *verified;        /* the name or IP the certificate was verified
                                  * for; NULL: tls.upstream_verify = off */
    unsigned alpn_http : 1;      /* offered ALPN http/1.1 */
    /* upstream.proxy_protocol (lk_upstream_key_client): its first bytes
     * are a PROXY header of this version (0: none, as when off); its two
     * top bits are in hash too, so keys of other versions differ there */
    unsigned char pp;
    uint32_t hash;               /* of host, port and scheme (and the client): made once,
                                  * with the key */
    /* pp only: the client the header names, at this source address, port
     * included (pp_family 0: none, a v2 LOCAL or v1 UNKNOWN).  Left unset,
     * and never read, when pp is 0, so that a key without the header is
     * made and compared as before it existed. */
    unsigned char pp_src[16];
    uint16_t pp_port;
    unsigned char pp_family;
};

/* The key of a connection to addr dialled for rt and a broker of cl (the
 * protocol follows addr's scheme).  Its strings point into rt's config. */
void lk_upstream_key_make(struct lk_upstream_key *k, const struct lk_runtime *rt,
                          const struct lk_cluster *cl, const struct lk_url *addr);
/* For cl's upstream.proxy_protocol (nothing when off): k's connection
 * names client c (NULL: lookout's own connection, a LOCAL header) in its
 * PROXY header, by its address as c->peer says it (after c's own PROXY
 * header), port included.  a gets that source (family 0: none); the
 * destination is left for the dial. */
void lk_upstream_key_client(struct lk_upstream_key *k, const struct lk_cluster *cl,
                            const struct lk_conn *c, struct lk_pp_addr *a);
/* 1 when a and b are equal in every field. */
int lk_upstream_key_eq(const struct lk_upstream_key *a, const struct lk_upstream_key *b);

/* One worker's idle connections of one key. */
struct lk_idle_list {
    struct lk_upstream_key key;
    struct lk_upstream *head;
    unsigned count;
    struct lk_idle_list *next; /* in its hash chain */
};

/* Sets up an empty pool for about nkeys keys. */
void lk_idle_pool_init(struct lk_idle_pool *p, size_t nkeys);
/* Frees every connection in p, and its lists; p is empty afterwards (and
 * may be used again after lk_idle_pool_init). */
void lk_idle_pool_free(struct lk_idle_pool *p);
/* How many idle connections of key k p holds. */
unsigned lk_idle_pool_count(const struct lk_idle_pool *p, const struct lk_upstream_key *k);

enum lk_upstream_event { LK_UP_CONNECTED, LK_UP_ERROR, LK_UP_TIMEOUT };
typedef void (*lk_upstream_ready_cb)(struct lk_upstream *u, enum lk_upstream_event ev, void *arg);

struct lk_upstream {
    struct lk_worker *w;
    struct lk_runtime *rt; /* its broker's generation: its owner holds the reference */
    const struct lk_broker *broker;
    const struct lk_url *addr; /* the internal address used */
    struct lk_upstream_key key; /* what it may be reused for (set when dialled) */
    struct bufferevent *bev;
    struct lk_io io;           /* how bev is driven */
    struct lk_upstream *next;  /* in the idle list, or its client's (owner) */
    struct lk_conn *owner;     /* idle on this client's own list (lk_upstream_keep), or NULL */
    lk_upstream_ready_cb ready_cb;
    void *arg;
    int reused;   /* came from the idle pool */
    struct event *ready_ev; /* reports a reused connection from the loop */
    int idle;     /* sitting in the idle pool */
    const char *error; /* why it failed: lk_err_* */
    const char *why;   /* the system's, resolver's or TLS library's word on it, or
                        * NULL: fixed texts that name no host or address, so a
                        * client may be told; valid inside ready_cb only */
    struct lk_dial dial; /* how it was dialled */
    long long pp_deadline_ms; /* pp_len: the dial's end, the TLS handshake's too */
    unsigned char pp_len; /* a PROXY header to send once connected (upstream.proxy_protocol) */
    uint8_t pp_hdr[];   /* its bytes: allocated with the struct, only then */
};

extern const char lk_err_connect[];
extern const char lk_err_connect_timeout[];
extern const char lk_err_tls[];
extern const char lk_err_reset[];
extern const char lk_err_pp_send[];
/* The kind of upstream error an lk_err_* is, for the broker's counters. */
enum lk_upstream_err_kind lk_upstream_err_kind(const char *error);
/* Counts an upstream error of broker b (lookout_upstream_errors_total). */
void lk_upstream_error(struct lk_runtime *rt, const struct lk_broker *b,
                       enum lk_upstream_err_kind kind);

/*
 * Gets a connection to broker b's internal address of the scheme family
 * given (LK_SCHEME_HTTP for http or https; each protocol module its own):
 * when the broker has both the plain and the TLS one, the cluster's
 * upstream.tls picks, by default the one with the client's TLS-ness
 * (lk_broker_upstream).  c is the client it is for (its TLS-ness, and its
 * address for upstream.proxy_protocol), or NULL.  An idle pooled connection of exactly that
 * address's key (struct lk_upstream_key: never one to another address or
 * protocol; first among c's own, lk_upstream_keep) or a new one.  ready_cb reports the outcome from the event
 * loop, never before this returns.  NULL if no connection could even be set up.
 * The caller owns the result until lk_upstream_release or lk_upstream_free
 * and sets the bufferevent callbacks after LK_UP_CONNECTED.
 */
struct lk_upstream *lk_upstream_get(struct lk_worker *w, struct lk_runtime *rt,
                                    const struct lk_broker *b, enum lk_scheme scheme,
                                    struct lk_conn *c, lk_upstream_ready_cb cb, void *arg);
/* A client SSL for broker address addr, from rt->client_ctx, as
 * lk_upstream_key_make describes it: SNI when the host is a name, its name
 * or IP verified unless tls.upstream_verify = off, ALPN http/1.1 when addr
 * is http(s).  NULL on allocation failure.  It never resumes a session. */
SSL *lk_upstream_ssl_new(struct lk_runtime *rt, const struct lk_url *addr);
/* Returns a healthy, idle connection to the pool, under its key, where
 * only an exchange wanting the same key finds it (or frees it if the pool
 * of its key is full, if anything is left in its buffers, or if it belongs
 * to an older generation than the worker's).  HTTP calls it (or
 * lk_upstream_keep, for one whose PROXY header names its client); the
 * binary protocols, whose connections carry a session, never do. */
void lk_upstream_release(struct lk_upstream *u);
/* lk_upstream_release for a connection whose PROXY header names client c
 * (upstream.proxy_protocol): kept idle on c's own list (c->kept), not in
 * the worker's pool, since no other client may have it; only c's next
 * exchanges find it, and it goes when c closes (lk_upstream_drop_kept).
 * One whose header names no client goes to the pool as usual. */
void lk_upstream_keep(struct lk_upstream *u, struct lk_conn *c);
/* Frees every idle connection kept for c: it is closing, or moving to
 * another generation, whose exchanges could not reuse them. */
void lk_upstream_drop_kept(struct lk_conn *c);
void lk_upstream_free(struct lk_upstream *u);

#endif
