/*
 * The filter chain: building a cluster's chain from its `filters =` list,
 * and running the hooks of an exchange in that order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conn.h"
#include "lk_filter.h"
#include "lk_log.h"
#include "lk_runtime.h"
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
    return lk_broker_listener(b, x->listener_name);
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

void *
lk_flt_ctx(struct lk_flt *f, struct lk_xchg *x, size_t size)
{
    struct lk_flt_state *s = &x->flt[f->index];
    if (s->ctx == NULL)
        s->ctx = lk_palloc(&x->pool, size);
    return s->ctx;
}

void
lk_flt_want_body(struct lk_xchg *x, struct lk_flt *f, enum lk_body_mode mode)
{
    struct lk_flt_state *s = &x->flt[f->index];

    if (f->ops->http_res_body == NULL || mode == LK_BODY_NONE || s->body != LK_BODY_NONE)
        return;
    s->body = mode;
    x->body_filters++;
    if (mode != LK_BODY_OBSERVE)
        x->body_changers++;
    s->acc = evbuffer_new();
    s->out = evbuffer_new();
    if (s->acc == NULL || s->out == NULL)
        abort(); /* out of memory, as lk_xmalloc */
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
            evbuffer_free(s->acc);
        if (s->out != NULL)
            evbuffer_free(s->out);
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
        struct evbuffer *next = s->out;
        if (s->body == LK_BODY_BUFFER && !s->overflowed) {
            evbuffer_add_buffer(s->acc, cur);
            if (evbuffer_get_length(s->acc) > x->conf->max_buffer_bytes) {
                /* Too big to hold: this filter is bypassed and the body
                 * flows on unchanged, never truncated. */
                s->overflowed = 1;
                x->body_overflows++;
                lk_log(LK_WARN, x->conn,
                       "%s: response body over max_buffer_bytes (%zu); passed through unchanged",
                       f->id, x->conf->max_buffer_bytes);
                evbuffer_add_buffer(next, s->acc);
            } else if (last) {
                unsigned before = x->rewrites;
                v = f->ops->http_res_body(f, x, s->acc, next, 1);
                s->rewrites += x->rewrites - before;
            }
        } else if (s->body == LK_BODY_BUFFER) {
            evbuffer_add_buffer(next, cur);
        } else {
            /* A streaming filter may keep a tail (a match that straddles two
             * reads): what it leaves in acc is offered again next time. */
            evbuffer_add_buffer(s->acc, cur);
            if (evbuffer_get_length(s->acc) != 0 || last) {
                unsigned before = x->rewrites;
                v = f->ops->http_res_body(f, x, s->acc, next, last);
                s->rewrites += x->rewrites - before;
            }
        }
        if (last && v == LK_FLT_CONTINUE && evbuffer_get_length(s->acc) != 0) {
            /* a filter that kept bytes at the end: they go on unchanged,
             * never lost */
            lk_log(LK_DEBUG, x->conn, "%s: %zu body bytes left at the end; passed on", f->id,
                   evbuffer_get_length(s->acc));
            evbuffer_add_buffer(next, s->acc);
        }
        cur = next;
    }
    if (v == LK_FLT_CONTINUE)
        evbuffer_add_buffer(out, cur);
    return v;
}

enum lk_flt_verdict
lk_flt_run_frame(struct lk_xchg *x, int16_t key, int16_t version, struct evbuffer *in,
                 struct evbuffer *out)
{
    struct evbuffer *cur = in, *next = NULL, *spare = NULL;
    enum lk_flt_verdict v = LK_FLT_CONTINUE;

    /* The frames that come here are whole and small (metadata,
     * coordinators, errors naming leaders): each stage reads one buffer and
     * fills the other. */
    for (size_t i = 0; i < x->nflt && v == LK_FLT_CONTINUE; i++) {
        struct lk_flt *f = &x->cluster->filters[i];
        if (!x->flt[i].attached || f->ops->frame == NULL)
            continue;
        if (spare == NULL)
            spare = evbuffer_new();
        next = cur == spare ? in : spare;
        unsigned before = x->rewrites;
        v = f->ops->frame(f, x, key, version, cur, next);
        x->flt[i].rewrites += x->rewrites - before;
        evbuffer_add_buffer(next, cur); /* anything it left goes on unchanged */
        cur = next;
    }
    /* A refused frame goes nowhere: the caller closes the connection. */
    if (v == LK_FLT_CONTINUE)
        evbuffer_add_buffer(out, cur);
    else
        evbuffer_drain(cur, evbuffer_get_length(cur));
    if (spare != NULL)
        evbuffer_free(spare);
    return v;
}
