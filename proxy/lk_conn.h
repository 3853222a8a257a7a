/*
 * Connections, workers and upstreams: the protocol-agnostic layer.  A worker
 * is one thread with its own event_base, listening sockets (SO_REUSEPORT)
 * and idle upstream pools.  A client connection (lk_conn) is a bufferevent,
 * TLS or not, handed to the protocol module of its bind (HTTP today; Kafka
 * and the Pulsar binary protocol are further modules over the same layer).
 * An upstream (lk_upstream) is a bufferevent to one broker's internal
 * address, TLS-verified when that address is TLS, and is pooled when idle.
 * Nothing here knows HTTP.
 */
#ifndef LK_CONN_H
#define LK_CONN_H

#include <pthread.h>
#include <stdint.h>
#include <netinet/in.h>
#include <event2/event.h>
#include <event2/event_struct.h> /* struct event, embedded in struct lk_conn */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include "lk_conf.h"
#include "lk_hold.h"
#include "lk_dial.h"
#include "lk_pool.h"

struct lk_conn;
struct lk_upstream;
struct lk_ticket_keys;
struct lk_rt_stats;
struct lk_stat_obj;
struct lk_limit_slot;

/*
 * State shared by the workers for one config generation: the config, the
 * TLS contexts built from it, and broker health.  Only atomics change.
 *
 * A SIGHUP builds a new generation beside the old one (lk_workers_reload).
 * Each worker, each client connection and each upstream connecting for one
 * holds a reference (refs), so a generation lives until its last exchange
 * ends.  Client connections move to the newest generation at an exchange
 * boundary only (lk_conn_renew): HTTP before each request and when a
 * parked connection wakes; Kafka and Pulsar connections, which have no
 * such boundary, stay on the generation they started on until they close.
 * What carries over: broker health, by broker name.  What does not: the
 * TLS session cache and lookout's own ticket keys (clients of before the
 * reload do one full handshake; tls.session_ticket_key files keep tickets
 * valid), round-robin cursors, idle upstream connections (dropped: their
 * key names the generation they were dialled for), and Kafka nodes learned from the brokers
 * (lk_dyn.h: learned again from the next Metadata response through the
 * new generation; their listeners close with the switch).
 */
struct lk_broker_health {
    unsigned fails;           /* consecutive connect failures (atomic) */
    long long retry_after_ms; /* skip for round-robin until then (atomic) */
    unsigned check_fails;     /* consecutive failed active checks (atomic) */
    int check_down;           /* the checks eject it until one passes (atomic) */
};

struct lk_health_checker;

struct lk_runtime {
    struct lk_conf *conf;
    SSL_CTX **server_ctx; /* one per certificate, chosen by SNI; [0] is default */
    size_t nserver_ctx;
    SSL_CTX *client_ctx;  /* for TLS to brokers */
    struct lk_ticket_keys *tickets;  /* session ticket keys (lk_tls.c); NULL: no tickets */
    struct lk_broker_health *health; /* by broker index */
    unsigned *rr;                    /* round-robin cursor by cluster index (atomic) */
    struct lk_dyn *dyn;              /* what the map gains at run time (lk_dyn.h) */
    uint64_t generation;             /* 1 for the config lookout started with, +1 per reload */
    int refs;                        /* atomic: lk_runtime_ref / lk_runtime_unref */
    struct lk_rt_stats *stats;       /* this generation's metrics series (lk_stats.h) */
    struct lk_health_checker *checker; /* active checks (lk_health.h); NULL: none running */
};

/* Builds the runtime (TLS contexts) for conf, with one reference.  NULL
 * with err on failure. */
struct lk_runtime *lk_runtime_new(struct lk_conf *conf, char *err, size_t errlen);
/* Frees rt now, whatever its references (before the workers run). */
void lk_runtime_free(struct lk_runtime *rt);
/* Takes a reference (from any thread); returns rt. */
struct lk_runtime *lk_runtime_ref(struct lk_runtime *rt);
/* Drops one; the last frees rt. */
void lk_runtime_unref(struct lk_runtime *rt);
/* Before a client's TLS connection is freed: keeps its session resumable
 * (tls.session_cache).  Nothing is sent. */
void lk_tls_keep_session(SSL *ssl);
/*
 * The host name in the body of a ClientHello's server_name extension (RFC
 * 6066 §3), checked as OpenSSL checks it: a 2-byte list length covering
 * the rest, one entry of type host_name (0) whose 2-byte length covers
 * the rest, a name of 1 to 255 bytes without NUL.  Writes it lower-cased
 * and NUL-terminated into out (outlen > 255) and returns its length, or -1
 * when the body is not that.  Pure; the client-hello callback uses it to
 * keep each session to the name it was made for.
 */
int lk_tls_sni_parse(const unsigned char *p, size_t len, char *out, size_t outlen);

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
    uint32_t hash;               /* of host, port and scheme: made once, with the key */
};

/* The key of a connection to addr dialled for rt and a broker of cl (the
 * protocol follows addr's scheme).  Its strings point into rt's config. */
void lk_upstream_key_make(struct lk_upstream_key *k, const struct lk_runtime *rt,
                          const struct lk_cluster *cl, const struct lk_url *addr);
/* 1 when a and b are equal in every field. */
int lk_upstream_key_eq(const struct lk_upstream_key *a, const struct lk_upstream_key *b);

/* One worker's idle connections of one key. */
struct lk_idle_list {
    struct lk_upstream_key key;
    struct lk_upstream *head;
    unsigned count;
    struct lk_idle_list *next; /* in its hash chain */
};

/* A worker's idle upstream connections, one list per key, in hash chains.
 * Only the worker's current generation's connections are in it. */
struct lk_idle_pool {
    struct lk_idle_list **slots;
    size_t nslots; /* a power of two */
};

/* Sets up an empty pool for about nkeys keys. */
void lk_idle_pool_init(struct lk_idle_pool *p, size_t nkeys);
/* Frees every connection in p, and its lists; p is empty afterwards (and
 * may be used again after lk_idle_pool_init). */
void lk_idle_pool_free(struct lk_idle_pool *p);
/* How many idle connections of key k p holds. */
unsigned lk_idle_pool_count(const struct lk_idle_pool *p, const struct lk_upstream_key *k);

struct lk_worker;

/* One bound socket of one worker. */
struct lk_listen {
    struct lk_worker *w;
    const struct lk_bind *b; /* the current generation's (a reload repoints it) */
    struct event *resume;    /* after an accept error: accepting again */
    struct lk_stat_obj *st;  /* the bound address's metrics series */
};

/* One bound for a bind added at run time (lk_dyn_binds). */
struct lk_dyn_listen {
    struct lk_listen ls;
    struct evconnlistener *l; /* NULL: the bind failed */
    struct lk_dyn_listen *next;
};

/*
 * A connection's I/O around its bufferevent.  Upstream TLS connections use
 * a TLS bufferevent as it is.  Client connections, TLS or not, and
 * plaintext upstreams go round the bufferevent's socket code, which costs
 * two epoll_ctl calls per response (EV_WRITE asked and dropped) and reads
 * 4 KiB at a time after a FIONREAD ioctl, and, through OpenSSL, one
 * SSL_write (a record and a write) per buffer chain:
 *  - writes: EV_WRITE stays off; what lands in the output is written from
 *    the loop once per iteration, after the callbacks that produced it (the
 *    worker's flush queue): in one write, or in TLS records of up to 16 KiB.
 *    Only what the kernel does not take at once waits for EV_WRITE (the
 *    bufferevent's own, or for TLS wev) until drained again;
 *  - reads: lookout's own read event reads straight into the input, as
 *    much as the last reads suggest, and runs the bufferevent's callbacks.
 *    TLS reads stop when OpenSSL holds nothing more rather than at EAGAIN:
 *    the event is level-triggered.
 * Protocol modules enable, disable and time out through lk_io_*, never
 * through bufferevent_enable and the like.
 */
struct lk_io {
    struct bufferevent *bev;
    struct lk_worker *w;
    struct event *rev;          /* plain: the read event */
    struct evbuffer_cb_entry *cb; /* plain: watches the output */
    struct lk_io *prev, *next;  /* in w->flushq while queued */
    struct timeval rtv;         /* plain: the read timeout, if has_rtv */
    uint32_t read_size;         /* plain: bytes to ask for in the next read */
    unsigned plain : 1;         /* direct reads and writes (TLS ones with ssl) */
    unsigned reading : 1;       /* plain: rev is added */
    unsigned has_rtv : 1;
    unsigned queued : 1;
    unsigned rev_owned : 1;     /* rev was made by event_new (else it is the lk_conn's) */
    /* TLS over the direct path (client connections) */
    unsigned has_wtv : 1;       /* the write timeout, while wev waits */
    unsigned handshaking : 1;   /* SSL_do_handshake until it completes */
    unsigned wwait : 1;         /* wev is added: the output waits for the kernel */
    unsigned read_wants_write : 1; /* SSL_read said WANT_WRITE */
    unsigned write_wants_read : 1; /* SSL_write said WANT_READ */
    unsigned ssl_end : 1;       /* SSL_read reached the end: ssl_end_what still to report */
    unsigned park_wanted : 1;   /* client: idle; park once the output has drained */
    unsigned unparking : 1;     /* client: the protocol is being started again */
    short ssl_end_what;         /* BEV_EVENT_EOF or BEV_EVENT_ERROR */
    SSL *ssl;
    struct event *wev;          /* waits for the socket to take more */
    struct timeval wtv;
    long long hs_deadline_ms;   /* client TLS: the handshake ends by then (lk_now_ms), however
                                 * the client trickles it; 0: no deadline */
};

struct lk_worker {
    int id;
    struct event_base *base;
    struct evdns_base *dns;
    struct lk_runtime *rt;
    struct evconnlistener **listeners;
    struct lk_listen *listen; /* what each listener's callbacks get */
    size_t nlisteners;
    struct lk_dyn_listen *dyn_listen; /* binds added at run time, newest first */
    size_t ndyn_listen;               /* how many of lk_dyn_binds' it has taken */
    struct lk_idle_pool idle; /* idle upstream connections, by what makes reuse safe */
    struct lk_io *flushq;   /* outputs written to in this loop iteration */
    char *tls_out;          /* LK_TLS_RECORD bytes: a TLS record's worth of output, gathered */
    struct event *flush_ev; /* writes them out */
    struct event *stop_ev; /* reads stop_pipe[0]: another thread asks it to stop */
    struct lk_conn *free_conns; /* lk_conn slab: free ones */
    void **conn_blocks;          /* and the blocks they came in */
    size_t nconn_blocks;
    int stop_pipe[2];
    int draining;           /* stopping: no listeners, connections finishing */
    int drained;            /* ... and finished (counted off workers_draining) */
    struct event *drain_ev; /* draining: ends the loop when all are closed, or at the deadline */
    pthread_t thread;
    unsigned nconns;
    struct lk_conn *conns; /* open client connections, for shutdown */
    struct lk_hold hold;   /* what it holds to rewrite, against max_held_bytes */
};

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

extern const struct lk_proto_ops lk_proto_kafka;
extern const struct lk_proto_ops lk_proto_pulsar;

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
    void *proto;        /* the protocol module's state */
    struct event *close_ev; /* runs a scheduled close; freed (so cancelled) with c */
    struct lk_stat_obj *st; /* its bound address's metrics series */
    struct lk_limit_slot *limit; /* its client's count (max_connections_per_client), or NULL */
    uint64_t id;
    struct lk_conn *prev, *next; /* in w->conns, or the worker's free list */
    struct event rev;   /* io.rev */
    evutil_socket_t fd;
    uint32_t park_ms;   /* how long it may stay parked */
    unsigned tls : 1;
    unsigned closing : 1; /* a close is scheduled */
    unsigned listener_logged : 1; /* a refused listener name was logged (lk_client_listener) */
    unsigned char peer_ip_off, peer_ip_len; /* the address in peer */
    char peer[INET6_ADDRSTRLEN + 8]; /* "ip:port" or "[ip]:port" */
};

/* The client's address, without port or brackets. */
static inline struct lk_str
lk_conn_peer_ip(const struct lk_conn *c)
{
    return lk_str_make(c->peer + c->peer_ip_off, c->peer_ip_len);
}

/* Workers --------------------------------------------------------------- */

/* Creates n workers with listeners on every bind of rt->conf; 0/-1 + err.
 * rt becomes generation 1; the workers take their own references. */
int lk_workers_start(struct lk_runtime *rt, int n, char *err, size_t errlen);

/* What a reload changed, for its log line. */
struct lk_reload_stats {
    size_t kept, added, removed; /* listeners (binds of the config) */
};
/*
 * From the main thread (SIGHUP), with rt built from the new config: checks
 * that every added bind can be bound (else -1 and "file:line: message" in
 * err: rt is not used, and the caller frees it), carries broker health
 * over, makes rt the current generation (rt->generation: the next number)
 * and tells every worker, which switches at once: listeners on the same
 * address with the same TLS-ness and protocol keep their socket, added
 * ones open, removed ones close (their connections finish what is under
 * way).  Takes over the caller's reference on success.
 */
int lk_workers_reload(struct lk_runtime *rt, struct lk_reload_stats *st, char *err, size_t errlen);
/* Whether every socket conf adds to the generation serving can be bound
 * (each is bound without listening, then closed): 0, or -1 with
 * "file:line: cannot listen on ADDR: why".  0 before the workers start. */
int lk_workers_can_bind(const struct lk_conf *conf, char *err, size_t errlen);
/* The current generation, with a reference for the caller (NULL before
 * lk_workers_start). */
struct lk_runtime *lk_workers_runtime(void);
/* The current generation's number (1 until the first reload). */
uint64_t lk_workers_generation(void);
/* Reloads, as /metrics counts them (lookout_reloads_total{result}): the
 * caller of lk_workers_reload counts both, since a reload can fail before
 * it (a config that does not load). */
extern _Atomic unsigned long lk_reloads_ok, lk_reloads_failed;
/*
 * From the main thread (SIGTERM, SIGINT): every worker stops accepting,
 * closes idle connections, asks the others to finish (lk_proto_ops.drain)
 * and, once none is left or timeout_ms have passed (then closing what
 * is), ends its loop.  Called again, the earlier deadline stands.
 */
void lk_workers_drain(unsigned timeout_ms);
/* 1 once lk_workers_drain was called (/healthz answers 503 then). */
int lk_workers_draining(void);
/* Runs them (worker 0 on the calling thread) until lk_workers_stop. */
void lk_workers_run(void);
/* The event base of worker 0, which runs on the main thread (signals). */
struct event_base *lk_workers_main_base(void);
/* Asks every worker to stop (from any thread). */
void lk_workers_stop(void);
/* Binds were added at run time (lk_dyn_binds): w, the calling worker,
 * listens on them at once, and the others are told to. */
void lk_workers_binds_changed(struct lk_worker *w);
void lk_workers_free(void);

/* Enables or disables reading (EV_READ) and writing (EV_WRITE: upstream
 * TLS only; direct writes need no asking) on a connection; enabling what
 * already is costs nothing (bufferevent_enable would re-arm the timeout). */
void lk_io_enable(struct lk_io *io, short what);
void lk_io_disable(struct lk_io *io, short what);
/* Read and write timeouts, as bufferevent_set_timeouts (NULL: none); a
 * pending read re-arms with the new one. */
void lk_io_set_timeouts(struct lk_io *io, const struct timeval *rd, const struct timeval *wr);
/* Whether reading is enabled. */
int lk_io_reading(const struct lk_io *io);

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

/* Upstreams --------------------------------------------------------------- */

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
    struct lk_upstream *next;  /* in the idle list */
    lk_upstream_ready_cb ready_cb;
    void *arg;
    int reused;   /* came from the idle pool */
    struct event *ready_ev; /* reports a reused connection from the loop */
    int idle;     /* sitting in the idle pool */
    const char *error; /* why it failed: lk_err_* */
    struct lk_dial dial; /* how it was dialled */
};

extern const char lk_err_connect[];
extern const char lk_err_connect_timeout[];
extern const char lk_err_tls[];
extern const char lk_err_reset[];

/*
 * Gets a connection to broker b's internal address of the scheme family
 * given (LK_SCHEME_HTTP for http or https; each protocol module its own):
 * when the broker has both the plain and the TLS one, the cluster's
 * upstream.tls picks, by default the one with the client's TLS-ness
 * (lk_broker_upstream).  An idle pooled connection of exactly that
 * address's key (struct lk_upstream_key: never one to another address or
 * protocol) or a new one.  ready_cb reports the outcome from the event
 * loop, never before this returns.  NULL if no connection could even be set up.
 * The caller owns the result until lk_upstream_release or lk_upstream_free
 * and sets the bufferevent callbacks after LK_UP_CONNECTED.
 */
struct lk_upstream *lk_upstream_get(struct lk_worker *w, struct lk_runtime *rt,
                                    const struct lk_broker *b, enum lk_scheme scheme,
                                    int client_tls, lk_upstream_ready_cb cb, void *arg);
/* A client SSL for broker address addr, from rt->client_ctx, as
 * lk_upstream_key_make describes it: SNI when the host is a name, its name
 * or IP verified unless tls.upstream_verify = off, ALPN http/1.1 when addr
 * is http(s).  NULL on allocation failure.  It never resumes a session. */
SSL *lk_upstream_ssl_new(struct lk_runtime *rt, const struct lk_url *addr);
/* Returns a healthy, idle connection to the pool, under its key, where
 * only an exchange wanting the same key finds it (or frees it if the pool
 * of its key is full, if anything is left in its buffers, or if it belongs
 * to an older generation than the worker's).  HTTP calls it; the binary
 * protocols, whose connections carry a session, never do. */
void lk_upstream_release(struct lk_upstream *u);
void lk_upstream_free(struct lk_upstream *u);

/* Picks a broker of cl round-robin among those whose internal listener has
 * an address of family (http/https, pulsar/pulsar+ssl, kafka/kafka+ssl),
 * skipping brokers that are not up (lk_broker_up), unless none is.  NULL
 * when no broker has an address of the family. */
const struct lk_broker *lk_pick_broker(struct lk_runtime *rt, const struct lk_cluster *cl,
                                       enum lk_scheme family);
/*
 * Health bookkeeping (struct lk_health_conf has the rules), callable from
 * any worker.  A connect result: a success clears the broker's failures; a
 * failure counts, and from the cluster's health.fails-th in a row on backs
 * the broker off (health.backoff, doubled per further failure, up to
 * health.backoff_max).  An active check's result: health.fails failed
 * checks in a row eject the broker until one passes; a pass also clears
 * the connect failures.
 */
void lk_broker_connect_result(struct lk_runtime *rt, const struct lk_broker *b, int ok);
void lk_broker_check_result(struct lk_runtime *rt, const struct lk_broker *b, int ok);
/*
 * What the health state says now, for /map and /metrics as well as the
 * rotation: whether service addresses may send b traffic (neither backed
 * off nor ejected by checks), and its consecutive connect and check
 * failures.  Brokers learnt at run time (lk_dyn.h) share one state.
 */
int lk_broker_up(const struct lk_runtime *rt, const struct lk_broker *b);
unsigned lk_broker_fails(const struct lk_runtime *rt, const struct lk_broker *b);
unsigned lk_broker_check_fails(const struct lk_runtime *rt, const struct lk_broker *b);

/*
 * Routing on a bound socket: the vhost named by sni (if any), else by the
 * Host header's host, else the bind's only vhost.  Returns NULL when the
 * bind is shared and nothing matches, or when SNI and Host name different
 * vhosts (421 for HTTP).  With host_must_match, host must name a vhost of
 * the bind even when the bind has only one (an absolute-form target).
 */
const struct lk_vhost *lk_route(const struct lk_bind *b, struct lk_str sni, struct lk_str host,
                                int host_must_match);

long long lk_now_ms(void);

#endif
