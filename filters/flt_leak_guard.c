/*
 * leak_guard: the last check on every text response and on every binary
 * answer that can carry a broker address (CONTRACT §4, "Leak guard").  The
 * matcher, proxy/lk_guard.c, finds the brokers' internal addresses and
 * counts, logs, rewrites or refuses by the cluster's `leak_guard`; the hooks
 * here hand it the exchange and turn what it says into the chain's verdicts.
 */
#include <stddef.h>

#include "lk_conf_cluster.h"
#include "lk_conf_keys.h"
#include "lk_filter.h"
#include "lk_guard.h"
#include "lk_guard_frame.h"
#include "lk_http_msg.h"
#include "lk_xchg.h"

static void *
conf_new(const struct lk_cluster *cl, struct lk_conf_section *s, char *err, size_t errlen)
{
    if (cl->leak_guard == LK_LEAK_OFF)
        return NULL; /* err stays empty: no conf, and attach sits out */
    return lk_guard_new(cl, cl->leak_guard, err, errlen);
}

static void
conf_free(void *conf)
{
    lk_guard_free(conf);
}

static int
attach(struct lk_flt *f, struct lk_xchg *x)
{
    return f->conf != NULL;
}

/* The exchange as the matcher sees it, filled when it asks (lk_guard.h). */
struct view {
    struct lk_guard_x v; /* first: fill gets its address */
    const struct lk_flt *f;
    struct lk_xchg *x;
};

static void
fallback(struct lk_guard_x *v, const struct lk_broker *b, const char *lacked,
         const struct lk_url *to)
{
    lk_web_fallback_log(((struct view *)v)->x->conn, ((struct view *)v)->f->id, b, lacked, to);
}

static void
fill(struct lk_guard_x *v)
{
    const struct lk_flt *f = ((struct view *)v)->f;
    struct lk_xchg *x = ((struct view *)v)->x;

    *v = (struct lk_guard_x){.pool = &x->pool, .conn = x->conn, .id = f->id, .conf = x->conf,
                             .cluster = x->cluster, .broker = x->broker,
                             .listener_name = x->listener_name, .client_tls = x->client_tls,
                             .vetted = &x->body_vetted, .req = &x->req, .leaks = &x->leaks,
                             .rewrites = &x->rewrites, .fallback = fallback};
}

/* Sets w up for fill, and no more: the rest of it waits. */
static struct lk_guard_x *
view(struct view *w, const struct lk_flt *f, struct lk_xchg *x)
{
    w->v.fill = fill;
    w->f = f;
    w->x = x;
    return &w->v;
}

static enum lk_flt_verdict
verdict(struct lk_xchg *x, enum lk_guard_verdict v)
{
    if (v == LK_GUARD_REFUSE)
        lk_xchg_reply(x, 502, lk_guard_refusal);
    return v == LK_GUARD_PASS     ? LK_FLT_CONTINUE
           : v == LK_GUARD_REFUSE ? LK_FLT_REPLY
                                  : LK_FLT_ERROR;
}

static enum lk_flt_verdict
on_req_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *req)
{
    lk_guard_req_head(f->conf, req);
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
on_res_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *res)
{
    struct lk_guard_stream *s = lk_flt_ctx(f, x, sizeof(*s));
    struct view w;
    enum lk_guard_read read;
    enum lk_guard_verdict v = lk_guard_head(f->conf, s, view(&w, f, x), res, &read);

    /* log only observes, so the response keeps its framing; rewrite
     * streams; block streams too, but keeps what it is given in `in` until
     * the cap or the end (lk_guard_body). */
    if (v == LK_GUARD_PASS && read != LK_GUARD_READ_NONE)
        lk_flt_want_body(x, f, read == LK_GUARD_READ_OBSERVE ? LK_BODY_OBSERVE : LK_BODY_STREAM);
    return verdict(x, v);
}

/* A 1xx or 101 head: read as a final head is; a refusal drops a 1xx and
 * answers a 101 with the 502 (lk_http_up.c). */
static enum lk_flt_verdict
on_res_interim(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *res)
{
    struct lk_guard_stream *s = lk_flt_ctx(f, x, sizeof(*s));
    struct view w;

    return verdict(x, lk_guard_interim(f->conf, s, view(&w, f, x), res));
}

static enum lk_flt_verdict
on_res_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out,
            int last)
{
    struct lk_guard_stream *s = lk_flt_ctx(f, x, sizeof(*s));
    struct view w;

    return verdict(x, lk_guard_body(f->conf, s, view(&w, f, x), &x->res, in, out, last));
}

/* A Kafka or Pulsar answer, whole, as the client gets it (with the edits of the filters
 * before this one): read, never changed; a find in block mode closes the connection. */
static enum lk_flt_verdict
on_frame(struct lk_flt *f, struct lk_xchg *x, struct lk_frame *fr)
{
    struct view w;
    struct lk_guard_answer a = {.proto = x->proto, .key = fr->key, .version = fr->version,
                                .kafka = fr->kafka, .pulsar = fr->pulsar,
                                .written = lk_frame_written(fr)};

    a.p = lk_frame_bytes(fr, &a.len);
    return verdict(x, lk_guard_frame(f->conf, view(&w, f, x), &a));
}

/* The cluster's mode, which the protocol modules read too (what to hold). */
static const struct lk_conf_key keys[] = {
    {"leak_guard", LK_IN_PULSAR | LK_IN_KAFKA, lk_set_enum, offsetof(struct lk_cluster, leak_guard),
     lk_leak_guard_names, LK_KEY_INIT, "log",
     "an internal address left in a response: off, log, rewrite or block"},
    {NULL, 0, NULL, 0, NULL, 0, NULL, NULL},
};

const struct lk_flt_ops lk_flt_leak_guard = {
    .name = "leak_guard",
    .protos = LK_PROTO_HTTP | LK_PROTO_KAFKA | LK_PROTO_PULSAR,
    .keys = keys,
    .conf_new = conf_new,
    .conf_free = conf_free,
    .attach = attach,
    .http_req_headers = on_req_headers,
    .http_res_headers = on_res_headers,
    .http_res_interim = on_res_interim,
    .http_res_body = on_res_body,
    .frame = on_frame,
};
