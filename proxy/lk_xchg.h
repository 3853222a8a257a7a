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
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_pool.h"

struct lk_conn;

struct lk_flt_state {
    void *ctx;              /* the filter's per-exchange state (lk_flt_ctx) */
    int attached;
    enum lk_body_mode body; /* what the filter asked for this response */
    struct evbuffer *acc;   /* the filter's input: bytes it has not yet released */
    struct evbuffer *out;   /* the filter's output, drained by the next stage */
    int overflowed;         /* the body went past the cap: passed through */
    unsigned rewrites;      /* addresses this filter rewrote (of x->rewrites) */
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
    int body_vetted;          /* a filter rewrote every address field of the body
                               * (LookupData): what is left is no address to refuse */
};

/* Makes filters answer the client with status and {"reason": reason}. */
void lk_xchg_reply(struct lk_xchg *x, int status, const char *reason);
/* The listener of broker b that responses are rewritten into, or NULL. */
const struct lk_listener *lk_xchg_listener(const struct lk_xchg *x, const struct lk_broker *b);
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

/* Filter-facing helpers ----------------------------------------------------- */

/* The filter's per-exchange context; allocates size zeroed bytes on first
 * use from the exchange pool. */
void *lk_flt_ctx(struct lk_flt *f, struct lk_xchg *x, size_t size);
/* From a header hook: ask for the response body in the given mode. */
void lk_flt_want_body(struct lk_xchg *x, struct lk_flt *f, enum lk_body_mode mode);

/* The chain runner (used by protocol modules) ------------------------------ */

/* Sets up x->flt for the cluster's chain and calls every attach. */
void lk_flt_attach_all(struct lk_xchg *x);
/* Calls detach on every attached filter and frees body buffers. */
void lk_flt_detach_all(struct lk_xchg *x);
enum lk_flt_verdict lk_flt_run_req_headers(struct lk_xchg *x);
enum lk_flt_verdict lk_flt_run_res_headers(struct lk_xchg *x);
/*
 * Pushes response body bytes through the filters that asked for them, in
 * chain order.  in is drained; whatever the last filter releases is appended
 * to out.  last marks the end of the body.  Buffering filters hold their
 * input until last (or until max_buffer_bytes, past which that filter is
 * bypassed and the body flows on unchanged).
 */
enum lk_flt_verdict lk_flt_run_res_body(struct lk_xchg *x, struct evbuffer *in,
                                        struct evbuffer *out, int last);
/* Passes a whole binary frame (a Kafka response, a Pulsar command)
 * through the attached filters' frame hooks, in chain order; in is
 * drained, the result appended to out.  A verdict other than
 * LK_FLT_CONTINUE stops the chain, nothing is appended, and the caller
 * closes the connection (there is no reply to give in a binary protocol). */
enum lk_flt_verdict lk_flt_run_frame(struct lk_xchg *x, int16_t key, int16_t version,
                                     struct evbuffer *in, struct evbuffer *out);

#endif
