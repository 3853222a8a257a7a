/*
 * The filter chain: building a cluster's chain from its `filters =` list,
 * and running the hooks of an exchange in that order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conn.h"
#include "lk_filter.h"
#include "lk_kafka_view.h"
#include "lk_log.h"
#include "lk_runtime.h"
#include "lk_pulsar_view.h"
#include "lk_stats.h"
#include "lk_xchg.h"

const struct lk_flt_ops *
lk_flt_find(const char *name, size_t len)
{
    for (size_t i = 0; lk_flt_registry[i] != NULL; i++)
        if (strlen(lk_flt_registry[i]->name) == len &&
            memcmp(lk_flt_registry[i]->name, name, len) == 0)
            return lk_flt_registry[i];
    return NULL;
}

static int
chain_add(struct lk_cluster *cl, const char *name, size_t len, char *err, size_t errlen)
{
    const struct lk_flt_ops *ops = lk_flt_find(name, len);

    if (ops == NULL) {
        snprintf(err, errlen, "filters: unknown filter '%.*s'", (int)len, name);
        return -1;
    }
    if ((ops->protos & cl->proto) == 0) {
        snprintf(err, errlen, "filters: filter '%s' does not apply to this cluster's protocol",
                 ops->name);
        return -1;
    }
    for (size_t i = 0; i < cl->nfilters; i++)
        if (cl->filters[i].ops == ops) {
            snprintf(err, errlen, "filters: filter '%s' is listed twice", ops->name);
            return -1;
        }
    struct lk_flt *f = &cl->filters[cl->nfilters];
    f->ops = ops;
    f->index = cl->nfilters;
    for (f->reg_index = 0; lk_flt_registry[f->reg_index] != ops; f->reg_index++)
        ;
    char id[256];
    snprintf(id, sizeof(id), "%s:filters[%zu]=%s", cl->name, cl->nfilters, ops->name);
    f->id = lk_xstrdup(id);
    err[0] = '\0';
    if (ops->conf_new != NULL) {
        f->conf = ops->conf_new(cl, cl->section, err, errlen);
        if (f->conf == NULL && err[0] != '\0') {
            free(f->id);
            return -1;
        }
    }
    cl->nfilters++;
    return 0;
}

int
lk_flt_chain_new(struct lk_cluster *cl, const char *list, char *err, size_t errlen)
{
    size_t max = 0;

    /* chain_add refuses unknown and repeated names: the registry's size is
     * the bound */
    for (size_t i = 0; lk_flt_registry[i] != NULL; i++)
        max++;
    cl->filters = lk_xcalloc(max + 1, sizeof(*cl->filters));
    cl->nfilters = 0;
    if (list == NULL) {
        for (size_t i = 0; lk_flt_default_chain[i] != NULL; i++) {
            const struct lk_flt_ops *ops =
                lk_flt_find(lk_flt_default_chain[i], strlen(lk_flt_default_chain[i]));
            if (ops != NULL && (ops->protos & cl->proto) != 0 &&
                chain_add(cl, ops->name, strlen(ops->name), err, errlen) != 0)
                goto fail;
        }
        return 0;
    }
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct lk_str name = lk_str_trim(lk_str_make(p, comma ? (size_t)(comma - p) : strlen(p)));
        if (name.len != 0) {
            if (chain_add(cl, name.p, name.len, err, errlen) != 0)
                goto fail;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
fail:
    lk_flt_chain_free(cl);
    return -1;
}

void
lk_flt_chain_free(struct lk_cluster *cl)
{
    for (size_t i = 0; i < cl->nfilters; i++) {
        struct lk_flt *f = &cl->filters[i];
        if (f->ops->conf_free != NULL && f->conf != NULL)
            f->ops->conf_free(f->conf);
        free(f->id);
    }
    free(cl->filters);
    cl->filters = NULL;
    cl->nfilters = 0;
}

/* Exchange-side ------------------------------------------------------------ */

int
lk_flt_attach_if_listener(struct lk_flt *f, struct lk_xchg *x)
{
    return x->listener_name != NULL;
}

void
lk_xchg_reply(struct lk_xchg *x, int status, const char *reason)
{
    x->reply_status = status;
    x->reply_reason = reason;
}

const struct lk_listener *
lk_xchg_listener(const struct lk_xchg *x, const struct lk_broker *b)
{
    if (x->listener_name == NULL || b == NULL)
        return NULL;
    lk_xchg_listener_check(x, b);
    return lk_broker_client_listener(b, x->listener_name);
}

void
lk_xchg_listener_check(const struct lk_xchg *x, const struct lk_broker *b)
{
    struct lk_conn *c = x->conn;
    const char *own = x->cluster != NULL ? x->cluster->lookup_listener : NULL;

    if (x->listener_name == NULL || b == NULL || x->listener_name == own ||
        (own != NULL && strcmp(x->listener_name, own) == 0) ||
        lk_broker_listener(b, x->listener_name) != NULL || (c != NULL && c->lacked_logged))
        return;
    if (c != NULL)
        c->lacked_logged = 1;
    /* Pulsar fails such a lookup ("the broker do not have X listener");
     * the lookup listener keeps the client going wherever that reaches. */
    lk_log(LK_WARN, c,
           "broker %s has no listener '%s', which the client chose; %s%s%s (logged once per "
           "connection)",
           b->name, x->listener_name, b->lookup != NULL ? "its lookup listener '" : "",
           b->lookup != NULL ? b->lookup->name : "its addresses are left as they are",
           b->lookup != NULL ? "' is used" : "");
}

const char *
lk_client_listener(struct lk_conn *c, const struct lk_cluster *cl, struct lk_str name,
                   const char *what)
{
    const char *canon;
    char asked[80];

    if (name.len == 0)
        return NULL; /* none named, as Pulsar reads an empty one */
    if ((canon = lk_cluster_client_listener(cl, name)) != NULL)
        return canon;
    if (c == NULL)
        return NULL;
    lk_stats_listener_refused(c->rt->stats, cl);
    if (c->listener_logged)
        return NULL;
    c->listener_logged = 1;
    /* Why, in the map's terms: the internal listener (each broker's, which
     * is its first when internalListenerName is unset), another of the
     * map's, or a name no broker has. */
    const char *known = lk_cluster_listener_name(cl, name);
    int internal = 0;
    for (size_t i = 0; known != NULL && i < cl->nbrokers; i++)
        internal |= cl->brokers[i]->internal == lk_broker_listener(cl->brokers[i], known);
    const char *why = known == NULL ? "which no broker has"
                      : internal    ? "the internal listener, which clients may not choose"
                                    : "which is not in client_listeners";
    lk_log(LK_INFO, c,
           "client asked for listener '%s' (%s), %s; %s%s%s (logged once per connection)",
           lk_log_sanitize(asked, name.p, name.len, 64), what, why,
           cl->lookup_listener != NULL ? "the lookup listener '" : "nothing is rewritten",
           cl->lookup_listener != NULL ? cl->lookup_listener : "",
           cl->lookup_listener != NULL ? "' is used" : "");
    return NULL;
}

void
lk_web_fallback_log(struct lk_conn *c, const char *who, const struct lk_broker *b,
                    const char *lacked, const struct lk_url *to)
{
    const struct lk_cluster *cl = b->cluster;

    if (c == NULL || c->web_fallback_logged)
        return;
    c->web_fallback_logged = 1;
    lk_log(LK_WARN, c,
           "%s: broker %s has no http or https address on listener '%s': the client is sent to "
           "%s (%s%s%s) instead (logged once per connection)",
           who, b->name, lacked, to->text,
           to == cl->web_service ? "webServiceUrl" : "lookupListenerName '",
           to == cl->web_service ? "" : cl->lookup_listener, to == cl->web_service ? "" : "'");
}

void *
lk_flt_ctx(struct lk_flt *f, struct lk_xchg *x, size_t size)
{
    struct lk_flt_state *s = &x->flt[f->index];
    if (s->ctx == NULL)
        s->ctx = lk_palloc(&x->pool, size);
    return s->ctx;
}

void
lk_xchg_learn(struct lk_xchg *x, int32_t node_id, struct lk_str host, int32_t port)
{
    if (x->nlearned == x->learned_cap) {
        size_t cap = x->learned_cap != 0 ? 2 * x->learned_cap : 4;
        struct lk_learned *l = lk_palloc(&x->pool, cap * sizeof(*l));
        if (x->nlearned != 0)
            memcpy(l, x->learned, x->nlearned * sizeof(*l));
        x->learned = l;
        x->learned_cap = cap;
    }
    x->learned[x->nlearned++] =
        (struct lk_learned){node_id, lk_pstr(&x->pool, host.p, host.len), port};
}

void
lk_flt_want_body(struct lk_xchg *x, struct lk_flt *f, enum lk_body_mode mode)
{
    struct lk_flt_state *s = &x->flt[f->index];

    if (f->ops->http_res_body == NULL || mode == LK_BODY_NONE || s->body != LK_BODY_NONE)
        return;
    s->body = mode;
    x->body_filters++;
    if (mode == LK_BODY_OBSERVE)
        return; /* it reads the bytes where they are: no buffers of its own */
    x->body_changers++;
    s->acc = lk_evbuffer_get();
    s->out = lk_evbuffer_get();
}

void
lk_flt_need_body(struct lk_xchg *x, struct lk_flt *f)
{
    lk_flt_want_body(x, f, LK_BODY_BUFFER);
    if (x->flt[f->index].body == LK_BODY_BUFFER)
        x->flt[f->index].needed = 1;
}

void
lk_flt_attach_all(struct lk_xchg *x)
{
    const struct lk_cluster *cl = x->cluster;

    x->nflt = cl->nfilters;
    x->flt = lk_palloc(&x->pool, (cl->nfilters + 1) * sizeof(*x->flt));
    for (size_t i = 0; i < cl->nfilters; i++) {
        struct lk_flt *f = &cl->filters[i];
        x->flt[i].attached = (f->ops->protos & (x->proto != 0 ? x->proto : LK_PROTO_HTTP)) != 0 &&
                             (f->ops->attach == NULL || f->ops->attach(f, x));
    }
}

void
lk_flt_detach_all(struct lk_xchg *x)
{
    for (size_t i = 0; i < x->nflt; i++) {
        struct lk_flt *f = &x->cluster->filters[i];
        struct lk_flt_state *s = &x->flt[i];
        if (s->attached && f->ops->detach != NULL)
            f->ops->detach(f, x);
        if (s->acc != NULL)
            lk_evbuffer_put(s->acc);
        if (s->out != NULL)
            lk_evbuffer_put(s->out);
        s->acc = s->out = NULL;
        s->attached = 0;
    }
    x->nflt = 0;
}

#define RUN_HEADERS(hook, msg)                                                    \
    do {                                                                          \
        for (size_t i = 0; i < x->nflt; i++) {                                    \
            struct lk_flt *f = &x->cluster->filters[i];                           \
            if (!x->flt[i].attached || f->ops->hook == NULL)                      \
                continue;                                                         \
            unsigned before = x->rewrites;                                        \
            enum lk_flt_verdict v = f->ops->hook(f, x, (msg));                    \
            x->flt[i].rewrites += x->rewrites - before;                           \
            if (v != LK_FLT_CONTINUE)                                             \
                return v;                                                         \
        }                                                                         \
        return LK_FLT_CONTINUE;                                                   \
    } while (0)

enum lk_flt_verdict
lk_flt_run_req_headers(struct lk_xchg *x)
{
    RUN_HEADERS(http_req_headers, &x->req);
}

enum lk_flt_verdict
lk_flt_run_res_headers(struct lk_xchg *x)
{
    RUN_HEADERS(http_res_headers, &x->res);
}

enum lk_flt_verdict
lk_flt_run_res_interim(struct lk_xchg *x)
{
    RUN_HEADERS(http_res_interim, &x->res);
}

enum lk_flt_verdict
lk_flt_run_res_body(struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out, int last)
{
    struct evbuffer *cur = in;
    enum lk_flt_verdict v = LK_FLT_CONTINUE;

    /* Each stage reads its acc and writes its own out, which the next stage
     * (or the caller's out) drains: no buffer is made per call. */
    for (size_t i = 0; i < x->nflt && v == LK_FLT_CONTINUE; i++) {
        struct lk_flt *f = &x->cluster->filters[i];
        struct lk_flt_state *s = &x->flt[i];
        if (!s->attached || s->body == LK_BODY_NONE)
            continue;
        if (s->body == LK_BODY_OBSERVE) {
            /* reads cur where it lies and leaves it to the next stage */
            if (evbuffer_get_length(cur) != 0 || last)
                v = f->ops->http_res_body(f, x, cur, NULL, last);
            continue;
        }
        struct evbuffer *next = s->out;
        /* Nothing held from before, and the whole body at once (most
         * answers) or a filter bypassed: the bytes are used where they
         * lie, one move fewer. */
        struct evbuffer *acc =
            (last || s->overflowed) && evbuffer_get_length(s->acc) == 0 ? cur : s->acc;
        if (acc != cur)
            evbuffer_add_buffer(acc, cur);
        if (s->body == LK_BODY_BUFFER && !s->overflowed) {
            if (evbuffer_get_length(acc) > x->conf->max_buffer_bytes) {
                s->overflowed = 1;
                x->body_overflows++;
                if (s->needed) {
                    /* Too big to hold, and it may not pass as it came. */
                    lk_log(LK_WARN, x->conn,
                           "%s: response body over max_buffer_bytes (%zu), which it must "
                           "rewrite; answered 502",
                           f->id, x->conf->max_buffer_bytes);
                    lk_xchg_reply(x, 502,
                                  "the broker's answer is over max_buffer_bytes and cannot be "
                                  "rewritten");
                    v = LK_FLT_REPLY;
                } else {
                    /* Too big to hold: this filter is bypassed and the
                     * body flows on unchanged, never truncated. */
                    lk_log(LK_WARN, x->conn,
                           "%s: response body over max_buffer_bytes (%zu); passed through "
                           "unchanged",
                           f->id, x->conf->max_buffer_bytes);
                    evbuffer_add_buffer(next, acc);
                }
            } else if (last) {
                unsigned before = x->rewrites;
                v = f->ops->http_res_body(f, x, acc, next, 1);
                s->rewrites += x->rewrites - before;
            }
        } else if (s->body == LK_BODY_BUFFER) {
            evbuffer_add_buffer(next, acc);
        } else if (evbuffer_get_length(acc) != 0 || last) {
            /* A streaming filter may keep a tail (a match that straddles two
             * reads): what it leaves in acc is offered again next time. */
            unsigned before = x->rewrites;
            v = f->ops->http_res_body(f, x, acc, next, last);
            s->rewrites += x->rewrites - before;
        }
        if (last && v == LK_FLT_CONTINUE && evbuffer_get_length(acc) != 0) {
            /* a filter that kept bytes at the end: they go on unchanged,
             * never lost */
            lk_log(LK_DEBUG, x->conn, "%s: %zu body bytes left at the end; passed on", f->id,
                   evbuffer_get_length(acc));
            evbuffer_add_buffer(next, acc);
        }
        cur = next;
    }
    if (v == LK_FLT_CONTINUE)
        evbuffer_add_buffer(out, cur);
    return v;
}

/* The edits made to the frame's view so far. */
static unsigned
frame_edits(const struct lk_frame *fr)
{
    return fr->kafka != NULL ? fr->kafka->edits : fr->pulsar != NULL ? fr->pulsar->edits : 0;
}

/* Writes the frame with its edits into fr->enc, unless that was done for
 * these edits already: fr->enc_r. */
static int
frame_encode(struct lk_frame *fr)
{
    unsigned n = frame_edits(fr);

    if (n == 0)
        return 0;
    if (fr->enc != NULL && fr->enc_edits == n)
        return fr->enc_r;
    if (fr->enc == NULL && (fr->enc = evbuffer_new()) == NULL)
        abort(); /* out of memory, as lk_xmalloc */
    evbuffer_drain(fr->enc, evbuffer_get_length(fr->enc));
    if (fr->kafka != NULL) {
        enum lk_kafka_rw r = lk_kafka_view_encode(fr->kafka, fr->enc);
        fr->enc_r = r == LK_KAFKA_RW_REWRITTEN ? 1 : r == LK_KAFKA_RW_MALFORMED ? -1 : 0;
    } else {
        fr->enc_r = lk_pulsar_view_encode(fr->pulsar, fr->enc);
    }
    fr->enc_edits = n;
    return fr->enc_r;
}

static const uint8_t *
frame_orig(struct lk_frame *fr)
{
    if (fr->p == NULL)
        fr->p = evbuffer_pullup(fr->in, -1);
    return fr->p;
}

const uint8_t *
lk_frame_bytes(struct lk_frame *fr, size_t *len)
{
    if (frame_encode(fr) == 1) {
        *len = evbuffer_get_length(fr->enc);
        return evbuffer_pullup(fr->enc, -1);
    }
    *len = fr->len;
    return frame_orig(fr);
}

int
lk_frame_written(struct lk_frame *fr)
{
    return frame_encode(fr) == 1;
}

/* Whether an attached filter reads the protocol's view: else the frame is
 * not decoded at all. */
static int
frame_wanted(const struct lk_xchg *x, unsigned proto)
{
    for (size_t i = 0; i < x->nflt; i++) {
        const struct lk_flt_ops *ops = x->cluster->filters[i].ops;
        if (x->flt[i].attached &&
            (proto == LK_PROTO_KAFKA ? ops->kafka_response != NULL : ops->pulsar_command != NULL))
            return 1;
    }
    return 0;
}

/* The chain over a frame (whose view, if any, is set up), then the frame
 * out: written once if edited, else as it came. */
static enum lk_flt_verdict
run_frame(struct lk_xchg *x, struct lk_frame *fr, struct evbuffer *out)
{
    enum lk_flt_verdict v = LK_FLT_CONTINUE;
    const char *editor = NULL;

    for (size_t i = 0; i < x->nflt && v == LK_FLT_CONTINUE; i++) {
        struct lk_flt *f = &x->cluster->filters[i];
        const struct lk_flt_ops *ops = f->ops;
        if (!x->flt[i].attached)
            continue;
        unsigned before = x->rewrites, edits = frame_edits(fr);
        if (fr->kafka != NULL && ops->kafka_response != NULL)
            v = ops->kafka_response(f, x, fr->kafka);
        else if (fr->pulsar != NULL && ops->pulsar_command != NULL)
            v = ops->pulsar_command(f, x, fr->pulsar);
        if (v == LK_FLT_CONTINUE && ops->frame != NULL)
            v = ops->frame(f, x, fr);
        x->flt[i].frame_rewrites = x->rewrites - before;
        x->flt[i].rewrites += x->flt[i].frame_rewrites;
        if (frame_edits(fr) != edits)
            editor = f->id;
    }
    int r = v == LK_FLT_CONTINUE ? frame_encode(fr) : 0;
    if (r == 1) {
        evbuffer_add_buffer(out, fr->enc);
        evbuffer_drain(fr->in, fr->len);
    } else {
        if (r < 0 && editor != NULL) {
            char what[64];
            if (fr->proto == LK_PROTO_KAFKA)
                snprintf(what, sizeof(what), "api %d v%d response", fr->key, fr->version);
            else
                snprintf(what, sizeof(what), "%s",
                         lk_pulsar_command_name(fr->key) != NULL ? lk_pulsar_command_name(fr->key)
                                                                 : "command");
            lk_log(LK_WARN, x->conn, "%s: %s does not re-encode; passed through unchanged", editor,
                   what);
        }
        /* only what the client gets counts (a refused frame's count stays,
         * as a filter made it) */
        for (size_t i = 0; v == LK_FLT_CONTINUE && editor != NULL && i < x->nflt; i++) {
            x->flt[i].rewrites -= x->flt[i].frame_rewrites;
            x->rewrites -= x->flt[i].frame_rewrites;
        }
        /* A refused frame goes nowhere: the caller closes the connection. */
        if (v == LK_FLT_CONTINUE)
            evbuffer_add_buffer(out, fr->in);
        else
            evbuffer_drain(fr->in, fr->len);
    }
    for (size_t i = 0; i < x->nflt; i++)
        x->flt[i].frame_rewrites = 0;
    if (fr->enc != NULL)
        evbuffer_free(fr->enc);
    return v;
}

enum lk_flt_verdict
lk_flt_run_pulsar(struct lk_xchg *x, int type, const struct lk_pulsar_cmd *c, struct evbuffer *in,
                  struct evbuffer *out)
{
    struct lk_frame fr = {
        .proto = LK_PROTO_PULSAR, .key = type, .in = in, .len = evbuffer_get_length(in)};
    struct lk_pulsar_view pv;

    if (frame_wanted(x, LK_PROTO_PULSAR)) {
        lk_pulsar_view_init(&pv, type, frame_orig(&fr), fr.len, c, &x->pool);
        fr.pulsar = &pv;
    }
    return run_frame(x, &fr, out);
}

enum lk_flt_verdict
lk_flt_run_frame(struct lk_xchg *x, int16_t key, int16_t version, struct evbuffer *in,
                 struct evbuffer *out)
{
    struct lk_frame fr = {.proto = LK_PROTO_KAFKA,
                          .key = key,
                          .version = version,
                          .in = in,
                          .len = evbuffer_get_length(in)};
    struct lk_kafka_view kv;

    if (x->proto == LK_PROTO_PULSAR)
        return lk_flt_run_pulsar(x, key, NULL, in, out);
    if (frame_wanted(x, LK_PROTO_KAFKA)) {
        lk_kafka_view_decode(&kv, frame_orig(&fr), fr.len, key, version, &x->pool);
        fr.kafka = &kv;
    }
    return run_frame(x, &fr, out);
}
