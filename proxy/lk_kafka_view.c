/*
 * The Kafka response view (lk_kafka_view.h): one walk to read a response's
 * endpoints, and one more to write it only when a filter changed one.
 */
#include <stdint.h>
#include <string.h>

#include "lk_kafka_view.h"

struct collect {
    struct lk_kafka_view *v;
    struct lk_pool *pool;
    size_t cap;
    int controller;
};

static enum lk_kafka_ep
add(struct collect *c, int32_t node_id, const struct lk_str *host, int32_t port, int controller)
{
    struct lk_kafka_view *v = c->v;

    if (v->nep == c->cap) {
        size_t cap = 2 * c->cap;
        struct lk_kafka_endpoint *ep = lk_palloc(c->pool, cap * sizeof(*ep));
        if (v->nep != 0)
            memcpy(ep, v->ep, v->nep * sizeof(*ep));
        v->ep = ep;
        c->cap = cap;
    }
    v->ep[v->nep++] = (struct lk_kafka_endpoint){
        .node_id = node_id, .host = *host, .port = port, .controller = controller};
    return LK_KAFKA_EP_KEEP;
}

static enum lk_kafka_ep
add_endpoint(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    return add(arg, node_id, host, *port, 0);
}

static enum lk_kafka_ep
add_controller(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    return add(arg, node_id, host, *port, 1);
}

enum lk_kafka_rw
lk_kafka_view_decode(struct lk_kafka_view *v, const uint8_t *frame, size_t len, int16_t api_key,
                     int16_t api_version, struct lk_pool *pool)
{
    struct collect c = {.v = v, .pool = pool, .cap = sizeof(v->inl) / sizeof(v->inl[0])};
    struct lk_kafka_rewrite rw = {
        .endpoint = add_endpoint, .controller = add_controller, .arg = &c};

    /* field by field: inl is written as endpoints come */
    v->api_key = api_key;
    v->api_version = api_version;
    v->frame = frame;
    v->len = len;
    v->ep = v->inl;
    v->nep = 0;
    v->clamp = v->drop_unknown_api = 0;
    v->edits = 0;
    v->decoded = lk_kafka_rewrite_response(frame, len, api_key, api_version, &rw, NULL);
    if (v->decoded == LK_KAFKA_RW_REWRITTEN) /* an ApiVersions clamp, not asked for yet */
        v->decoded = LK_KAFKA_RW_UNCHANGED;
    if (v->decoded != LK_KAFKA_RW_UNCHANGED)
        v->nep = 0; /* what a failed walk met goes as it came */
    return v->decoded;
}

int
lk_kafka_view_set(struct lk_kafka_view *v, size_t i, struct lk_str host, int32_t port)
{
    struct lk_kafka_endpoint *e = &v->ep[i];

    if (host.len > INT16_MAX || (host.p == NULL && host.len != 0) ||
        (e->controller && (port <= 0 || port > 65535)))
        return -1;
    if (!e->set && lk_str_eq(host, e->host) && port == e->port)
        return 0; /* as it is: nothing to write */
    e->set = 1;
    e->new_host = host;
    e->new_port = port;
    v->edits++;
    return !lk_str_eq(host, e->host) || port != e->port;
}

void
lk_kafka_view_clamp(struct lk_kafka_view *v, int drop_unknown_api)
{
    if (v->api_key != LK_KAFKA_API_VERSIONS || v->decoded != LK_KAFKA_RW_UNCHANGED)
        return;
    v->clamp = 1;
    v->drop_unknown_api = drop_unknown_api;
    v->edits++;
}

struct replay {
    const struct lk_kafka_view *v;
    size_t next;
};

/* The walk meets the endpoints in the order the decode did. */
static enum lk_kafka_ep
replay(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    struct replay *r = arg;
    const struct lk_kafka_endpoint *e;

    (void)node_id;
    if (r->next >= r->v->nep)
        return LK_KAFKA_EP_KEEP;
    e = &r->v->ep[r->next++];
    if (!e->set)
        return LK_KAFKA_EP_KEEP;
    *host = e->new_host;
    *port = e->new_port;
    return LK_KAFKA_EP_REWRITE;
}

enum lk_kafka_rw
lk_kafka_view_encode(const struct lk_kafka_view *v, struct evbuffer *out)
{
    struct replay r = {.v = v};
    struct lk_kafka_rewrite rw = {.endpoint = replay,
                                  .controller = replay,
                                  .arg = &r,
                                  .drop_unknown_api = v->drop_unknown_api};
    enum lk_kafka_rw rc;

    if (v->edits == 0 || v->decoded != LK_KAFKA_RW_UNCHANGED ||
        (v->api_key == LK_KAFKA_API_VERSIONS && !v->clamp))
        return LK_KAFKA_RW_UNCHANGED;
    rc = lk_kafka_rewrite_response(v->frame, v->len, v->api_key, v->api_version, &rw, out);
    return rc == LK_KAFKA_RW_REWRITTEN   ? rc
           : rc == LK_KAFKA_RW_MALFORMED ? rc
                                         : LK_KAFKA_RW_UNCHANGED;
}
