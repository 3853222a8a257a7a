/*
 * The filter chain.  A filter is an ops table in filters/flt_<name>.c,
 * listed in the registry (filters/filters.c).  Each cluster instantiates its
 * chain from the `filters =` key, in that order (never link or registration
 * order), and each instance parses its settings once into an immutable conf
 * shared by every connection.  Per-exchange state lives in the exchange's
 * pool (lk_flt_ctx).
 *
 * Interest is declared at three levels: statically (only the hooks a filter
 * sets are ever called, and only for the protocols in `protos`), per
 * exchange (`attach` returns 0 to sit an exchange out), and per body (a
 * header hook calls lk_flt_want_body; if nobody does, the body moves between
 * buffers without a filter seeing it).
 *
 * Hook return values (enum lk_flt_verdict):
 *   LK_FLT_CONTINUE  carry on with the next filter;
 *   LK_FLT_REPLY     stop: answer the client with the status and reason set
 *                    by lk_xchg_reply() (only before the response has begun);
 *   LK_FLT_ERROR     stop: an internal failure; the exchange ends with 502 if
 *                    nothing was sent yet, else the client connection closes.
 */
#ifndef LK_FILTER_H
#define LK_FILTER_H

#include <stddef.h>
#include <stdint.h>
#include <event2/buffer.h>

#include "lk_conf.h"
#include "lk_pool.h"
#include "lk_xchg.h"

struct lk_http_msg;
struct lk_flt;
struct lk_conf_key;
struct lk_kafka_view;
struct lk_pulsar_view;

/* A binary frame going through the chain (lk_flt_run_frame). */
struct lk_frame {
    unsigned proto;       /* LK_PROTO_KAFKA or LK_PROTO_PULSAR */
    /* Kafka: the request's api key and version; Pulsar: the type (any
     * int32: a type lookout does not know is read whole), 0 */
    int32_t key;
    int16_t version;
    struct evbuffer *in;  /* the frame as it came, whole */
    const uint8_t *p;     /* ... its bytes, once pulled up */
    size_t len;
    struct lk_kafka_view *kafka; /* the decoded view, or NULL */
    struct lk_pulsar_view *pulsar;
    struct evbuffer *enc; /* the frame with the edits, once written */
    unsigned enc_edits;   /* the view's edits when it was */
    int enc_r;            /* 1: enc holds it; 0: the edits change no byte;
                           * -1: it cannot be written (the original goes) */
};

/* The frame's bytes as they stand: the original, or with the edits made so
 * far (written at most once per set of edits, and kept). */
const uint8_t *lk_frame_bytes(struct lk_frame *fr, size_t *len);
/* Whether lk_frame_bytes gives the view written with its edits (1), or
 * the bytes it was decoded from (0: no view, no edit, or edits that change
 * no byte or cannot be written, which the runner sends as they came). */
int lk_frame_written(struct lk_frame *fr);

struct lk_flt_ops {
    const char *name; /* the name in `filters =` */
    unsigned protos;  /* LK_PROTO_* this filter can run on */
    /* The keys the filter owns in its clusters' sections (lk_conf_keys.h),
     * or NULL: set on the cluster before any chain is built, for every
     * cluster of its protocols, and known to the unknown-key check and to
     * `lookout --keys`. */
    const struct lk_conf_key *keys;

    /* Parses the filter's settings for cluster cl; may read its own keys
     * from s with lk_conf_section_get.  Returns the conf (may be NULL when
     * the filter has no settings and *err stays empty), or NULL with err set. */
    void *(*conf_new)(const struct lk_cluster *cl, struct lk_conf_section *s, char *err,
                      size_t errlen);
    void (*conf_free)(void *conf);

    /* Per exchange, once the request head is parsed and routed (x->req,
     * x->cluster, x->broker are set), in chain order: return 0 to sit this
     * exchange out.  NULL: always attach.  A filter may decide things for
     * the filters after it here (the listener filter selects the listener). */
    int (*attach)(struct lk_flt *f, struct lk_xchg *x);
    /* Called when the exchange ends, for every attached filter. */
    void (*detach)(struct lk_flt *f, struct lk_xchg *x);

    /* HTTP request head, before it goes upstream. */
    enum lk_flt_verdict (*http_req_headers)(struct lk_flt *f, struct lk_xchg *x,
                                            struct lk_http_msg *req);
    /* HTTP response head, before it goes to the client.  May change headers
     * and opt in to the body with lk_flt_want_body. */
    enum lk_flt_verdict (*http_res_headers)(struct lk_flt *f, struct lk_xchg *x,
                                            struct lk_http_msg *res);
    /* HTTP interim response head (1xx), or the 101 that starts a tunnel,
     * before it goes to the client: no body follows it through the chain
     * (a 1xx's final response comes after it, through http_res_headers; a
     * tunnel's bytes are not filtered).  May change headers and the reason
     * phrase.  LK_FLT_REPLY: a 1xx is dropped (the final response follows),
     * a 101 answered with the reply; LK_FLT_ERROR: the exchange ends. */
    enum lk_flt_verdict (*http_res_interim)(struct lk_flt *f, struct lk_xchg *x,
                                            struct lk_http_msg *res);
    /* HTTP response body, decoded (no chunk framing).  Move what you are done
     * with from in to out.  LK_BODY_STREAM: called as data arrives; bytes left
     * in `in` are offered again with the next data, and at last = 1
     * everything must be moved.
     * LK_BODY_OBSERVE: called as data arrives with out NULL: read `in`, all
     * of it new, and leave it as it is (the next stage takes it).
     * LK_BODY_BUFFER: called once with the whole body and last = 1; a body
     * over max_buffer_bytes is passed through unchanged instead and counted
     * in x->body_overflows.  The engine fixes the framing.
     * While no filter has released a body byte, the response head has not
     * been sent: a body hook may still edit x->res (a buffering filter's
     * hook always runs before the head goes out). */
    enum lk_flt_verdict (*http_res_body)(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in,
                                         struct evbuffer *out, int last);

    /*
     * Binary protocols: a frame, whole, of a kind a filter may change or
     * must read (one that may carry a broker address); the rest stream
     * past.  It is decoded once into a view the hooks read and edit with
     * its functions (lk_kafka_view.h, lk_pulsar_view.h), and written once,
     * after the chain, only when an edit changed it.  Only filters of the
     * exchange's protocol (x->proto) are attached.  LK_FLT_ERROR refuses
     * the frame: nothing of it reaches the client, whose connection closes
     * (say why in the log first).
     * kafka_response: a response to the request v->api_key/api_version
     * (lk_kafka_response_wanted).  pulsar_command: a command from the
     * broker.  frame: any of them, to read as the client will get it
     * (lk_frame_bytes: the edits of the filters before this one applied).
     */
    enum lk_flt_verdict (*kafka_response)(struct lk_flt *f, struct lk_xchg *x,
                                          struct lk_kafka_view *v);
    enum lk_flt_verdict (*pulsar_command)(struct lk_flt *f, struct lk_xchg *x,
                                          struct lk_pulsar_view *v);
    enum lk_flt_verdict (*frame)(struct lk_flt *f, struct lk_xchg *x, struct lk_frame *fr);
};

/* A filter instance in a cluster's chain. */
struct lk_flt {
    const struct lk_flt_ops *ops;
    void *conf;
    char *id;     /* "prod:filters[1]=location", for logs */
    size_t index; /* position in the chain */
    size_t reg_index; /* position in lk_flt_registry: what metrics count by */
};

/* The registry: every filter lookout knows, NULL-terminated (filters/filters.c). */
extern const struct lk_flt_ops *const lk_flt_registry[];
/* The chain a cluster gets without a `filters =` key, by name. */
extern const char *const lk_flt_default_chain[];

const struct lk_flt_ops *lk_flt_find(const char *name, size_t len);

/* An attach hook for rewriting filters: they sit out an exchange for which
 * no listener is selected (CONTRACT §3: then nothing is rewritten). */
int lk_flt_attach_if_listener(struct lk_flt *f, struct lk_xchg *x);

/*
 * Builds a cluster's chain from a comma-separated list of names (NULL: the
 * default chain), calling each conf_new.  0, or -1 with a message naming the
 * offending filter.  lk_flt_chain_free undoes it.
 */
int lk_flt_chain_new(struct lk_cluster *cl, const char *list, char *err, size_t errlen);
void lk_flt_chain_free(struct lk_cluster *cl);

#endif
