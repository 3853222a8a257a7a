/*
 * An exchange: one request and its response (HTTP), or one request frame and
 * its response frame (binary protocols later).  Everything an exchange
 * allocates comes from x->pool, which is released in one go when it ends.
 * Filters see the exchange, never the connection's internals.
 */
#ifndef LK_XCHG_H
#define LK_XCHG_H

#include <event2/buffer.h>

#include "lk_conf.h"
#include "lk_http_msg.h"
#include "lk_pool.h"
#include "lk_str.h"

struct lk_conn;
struct lk_flt;

/* A hook's verdict (lk_filter.h says what each means), which the chain
 * runners below hand the protocol modules. */
enum lk_flt_verdict { LK_FLT_CONTINUE = 0, LK_FLT_REPLY, LK_FLT_ERROR };
/*
 * How a filter takes the response body:
 *   LK_BODY_OBSERVE  reads it as it passes and moves it on unchanged; the
 *                    response keeps its framing and its head is not held;
 *   LK_BODY_STREAM   may change it as it passes (the head waits for the
 *                    first byte out, and the length becomes unknown);
 *   LK_BODY_BUFFER   gets it whole, up to max_buffer_bytes.
 */
enum lk_body_mode { LK_BODY_NONE = 0, LK_BODY_OBSERVE, LK_BODY_STREAM, LK_BODY_BUFFER };

struct lk_flt_state {
    void *ctx;              /* the filter's per-exchange state (lk_flt_ctx) */
    int attached;
    enum lk_body_mode body; /* what the filter asked for this response */
    struct evbuffer *acc;   /* the filter's input: bytes it has not yet released */
    struct evbuffer *out;   /* the filter's output, drained by the next stage */
    int overflowed;         /* the body went past the cap: passed through */
    int needed;             /* ... unless this is set (lk_flt_need_body): then 502 */
    unsigned rewrites;      /* addresses this filter rewrote (of x->rewrites) */
    unsigned frame_rewrites; /* ... of the binary frame under way, counted
                              * only if it is written */
};

/* A Kafka node a response named that the map lacks, whose address
 * broker.pattern gives (the kafka filter records it): the module hands it
 * to the dynamic-node code (lk_dyn_learn_node) before the response leaves. */
struct lk_learned {
    int32_t node_id;
    struct lk_str host; /* the broker's own address of the node, in x->pool */
    int32_t port;
};

struct lk_xchg {
    struct lk_pool pool;
    struct lk_conn *conn;
    const struct lk_conf *conf;
    const struct lk_cluster *cluster;
    unsigned proto;                  /* LK_PROTO_*: the filters that attach; 0 is HTTP */
    const struct lk_broker *broker;  /* where the request goes */
    const char *listener_name;       /* listener to rewrite into; NULL: none */
    int client_tls;                  /* the client reached us over TLS */
    struct lk_http_msg req, res;

    int reply_status;        /* set by lk_xchg_reply */
    const char *reply_reason;

    struct lk_flt_state *flt; /* by chain position */
    size_t nflt;
    int body_filters;         /* how many asked for the response body */
    int body_changers;        /* ... of which may change it (not LK_BODY_OBSERVE) */
    size_t body_overflows;    /* buffered bodies passed through over the cap */
    unsigned rewrites;        /* addresses rewritten, for the access log */
    unsigned leaks;           /* internal addresses found by the leak guard */
    unsigned unmapped;        /* broker addresses no listener could be found for,
                               * passed through unchanged */
    struct lk_learned *learned; /* nlearned of them, in x->pool */
    size_t nlearned, learned_cap;
    int body_vetted;          /* a filter rewrote every address field of the body
                               * (LookupData): what is left is no address to refuse */
};

/* Makes filters answer the client with status and {"reason": reason}. */
void lk_xchg_reply(struct lk_xchg *x, int status, const char *reason);
/* The listener of broker b that responses are rewritten into, or NULL:
 * lk_broker_client_listener of the exchange's selection, with
 * lk_xchg_listener_check's warning when b lacks the one the client chose. */
const struct lk_listener *lk_xchg_listener(const struct lk_xchg *x, const struct lk_broker *b);
/* Logs at warn, once per client connection, when b lacks the listener the
 * client chose for x (a client_listeners name: not the cluster's lookup
 * listener, which another cluster's broker need not have either), naming
 * the broker, the listener and the one that stands in. */
void lk_xchg_listener_check(const struct lk_xchg *x, const struct lk_broker *b);
/*
 * The listener a client of cluster cl selects by naming it (CONTRACT §3;
 * the HTTP listenerName and X-Pulsar-ListenerName, the binary LOOKUP's
 * advertised_listener_name; `what` says which, for the log): the map's
 * spelling when the client may choose it (lk_cluster_client_listener), or
 * NULL: for an empty name, and for any other, which leaves the caller on
 * the lookup listener.  Such a refusal is counted
 * (lookout_listener_refused_total) and logged once per client connection
 * c (NULL: not logged, not counted), with the name as asked.
 */
const char *lk_client_listener(struct lk_conn *c, const struct lk_cluster *cl, struct lk_str name,
                               const char *what);

/*
 * Logs at warn, once per client connection c (NULL: not logged), that
 * broker b has no http or https address on listener `lacked` and that a
 * client was sent to `to` instead (lk_location_pick's fallback: the lookup
 * listener's address, or webServiceUrl); who: the filter instance.
 */
void lk_web_fallback_log(struct lk_conn *c, const char *who, const struct lk_broker *b,
                         const char *lacked, const struct lk_url *to);

/* Filter-facing helpers ----------------------------------------------------- */

/* Records a learned node (struct lk_learned; host is copied). */
void lk_xchg_learn(struct lk_xchg *x, int32_t node_id, struct lk_str host, int32_t port);

/* The filter's per-exchange context; allocates size zeroed bytes on first
 * use from the exchange pool. */
void *lk_flt_ctx(struct lk_flt *f, struct lk_xchg *x, size_t size);
/* From a header hook: ask for the response body in the given mode. */
void lk_flt_want_body(struct lk_xchg *x, struct lk_flt *f, enum lk_body_mode mode);
/* The same with LK_BODY_BUFFER, for a body that must not reach the client
 * as it came (a lookup answer, whose addresses are internal): over
 * max_buffer_bytes the runner answers 502 (LK_FLT_REPLY) rather than pass
 * it through unchanged (CONTRACT §6). */
void lk_flt_need_body(struct lk_xchg *x, struct lk_flt *f);

/* The chain runner (used by protocol modules) ------------------------------ */

/* Sets up x->flt for the cluster's chain and calls every attach. */
void lk_flt_attach_all(struct lk_xchg *x);
/* Calls detach on every attached filter and frees body buffers. */
void lk_flt_detach_all(struct lk_xchg *x);
enum lk_flt_verdict lk_flt_run_req_headers(struct lk_xchg *x);
enum lk_flt_verdict lk_flt_run_res_headers(struct lk_xchg *x);
/* x->res as an interim (1xx) or 101 head: the filters' http_res_interim. */
enum lk_flt_verdict lk_flt_run_res_interim(struct lk_xchg *x);
/*
 * Pushes response body bytes through the filters that asked for them, in
 * chain order.  in is drained; whatever the last filter releases is appended
 * to out.  last marks the end of the body.  Buffering filters hold their
 * input until last (or until max_buffer_bytes, past which that filter is
 * bypassed and the body flows on unchanged).
 */
enum lk_flt_verdict lk_flt_run_res_body(struct lk_xchg *x, struct evbuffer *in,
                                        struct evbuffer *out, int last);
/*
 * Passes a whole binary frame (a Kafka response, a Pulsar command) through
 * the attached filters' frame hooks, in chain order; in is drained, the
 * frame as the client gets it appended to out.  The frame is decoded once
 * (when a filter of its kind is attached) into a view the filters read and
 * edit, and re-encoded once, after the chain, only when one changed it; a
 * frame nobody changed leaves as its bytes came.  Pulsar: c is the command
 * as the module decoded it, or NULL to decode it here.  A verdict other
 * than LK_FLT_CONTINUE stops the chain, nothing is appended, and the
 * caller closes the connection (there is no reply to give in a binary
 * protocol).
 */
enum lk_flt_verdict lk_flt_run_frame(struct lk_xchg *x, int16_t key, int16_t version,
                                     struct evbuffer *in, struct evbuffer *out);
struct lk_pulsar_cmd;
enum lk_flt_verdict lk_flt_run_pulsar(struct lk_xchg *x, int type, const struct lk_pulsar_cmd *c,
                                      struct evbuffer *in, struct evbuffer *out);

#endif
