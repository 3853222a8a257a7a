/*
 * The Kafka response view (lk_kafka_view.h): one walk to read a response's
 * endpoints and where they sit, and a splice to write it only when a
 * filter changed one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "lk_kafka_view.h"
#include "lk_kafka_wire.h"

struct collect {
    struct lk_kafka_view *v;
    struct lk_pool *pool;
    const struct lk_kafka_rewrite *rw;
    size_t cap;
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
    v->ep[v->nep++] = (struct lk_kafka_endpoint){.node_id = node_id,
                                                 .host = *host,
                                                 .port = port,
                                                 .controller = controller,
                                                 .host_at = (uint32_t)c->rw->host_at,
                                                 .tag_at = (uint32_t)c->rw->tag_at};
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

    c.rw = &rw;

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
    v->flex = rw.flex;
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
lk_kafka_view_encode_walk(const struct lk_kafka_view *v, struct evbuffer *out)
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

/* ---- the splice ------------------------------------------------------ */

/* Whether endpoint e's host, its port, change its bytes. */
static int
host_changes(const struct lk_kafka_endpoint *e)
{
    return e->set && !lk_str_eq(e->new_host, e->host);
}

static int
port_changes(const struct lk_kafka_endpoint *e)
{
    return e->set && e->new_port != e->port;
}

/* Where e's Port sits: right after its host's bytes. */
static uint32_t
port_at(const struct lk_kafka_view *v, const struct lk_kafka_endpoint *e)
{
    return (uint32_t)((const uint8_t *)e->host.p - v->frame + e->host.len);
}

/* Bytes of e's Host field as it goes out. */
static size_t
host_field_len(const struct lk_kafka_view *v, const struct lk_kafka_endpoint *e)
{
    return (v->flex ? lk_kw_uvarint_len((uint32_t)e->new_host.len + 1) : 2) + e->new_host.len;
}

/* The endpoints from i that share ep[i]'s tagged field (just ep[i] when it
 * has none): their end is returned, *d their change in length, *any set
 * when one of them changes. */
static size_t
group(const struct lk_kafka_view *v, size_t i, int64_t *d, int *any)
{
    uint32_t tag = v->ep[i].tag_at;
    size_t j = i;

    *d = 0;
    do {
        const struct lk_kafka_endpoint *e = &v->ep[j];
        if (host_changes(e)) {
            *d += (int64_t)host_field_len(v, e) - (int64_t)(port_at(v, e) - e->host_at);
            *any = 1;
        }
        *any |= port_changes(e);
        j++;
    } while (j < v->nep && tag != 0 && v->ep[j].tag_at == tag);
    return j;
}

/* The size of the tagged field at tag_at (*old_len its bytes) once its
 * content changes by d; -1 when that does not fit an int32. */
static int64_t
tag_size(const struct lk_kafka_view *v, uint32_t tag_at, int64_t d, size_t *old_len)
{
    struct lk_kw c = {v->frame, v->len, tag_at, 0};
    int64_t size = (int64_t)lk_kw_uvarint(&c) + d;

    *old_len = c.off - tag_at;
    return size < 0 || size > INT32_MAX ? -1 : size;
}

enum lk_kafka_rw
lk_kafka_view_encode(const struct lk_kafka_view *v, struct evbuffer *out)
{
    const uint8_t *f = v->frame;
    int64_t total = 0, d, ts;
    size_t at = 4, old_len;
    int any = 0;
    struct evbuffer_iovec iov;

    if (v->edits == 0 || v->decoded != LK_KAFKA_RW_UNCHANGED)
        return LK_KAFKA_RW_UNCHANGED;
    if (v->api_key == LK_KAFKA_API_VERSIONS)
        return lk_kafka_view_encode_walk(v, out);
    for (size_t i = 0; i < v->nep;) {
        size_t j = group(v, i, &d, &any);
        if (v->ep[i].tag_at != 0 && d != 0) {
            if ((ts = tag_size(v, v->ep[i].tag_at, d, &old_len)) < 0)
                return LK_KAFKA_RW_MALFORMED;
            total += (int64_t)lk_kw_uvarint_len((uint32_t)ts) - (int64_t)old_len;
        }
        total += d;
        i = j;
    }
    if (!any)
        return LK_KAFKA_RW_UNCHANGED;
    total += (int64_t)v->len - 4;
    if (total > INT32_MAX)
        return LK_KAFKA_RW_MALFORMED;

    /* one contiguous run of the new frame's size, written in place */
    if (evbuffer_reserve_space(out, (ev_ssize_t)total + 4, &iov, 1) != 1)
        abort(); /* out of memory, as lk_xmalloc */
    uint8_t *p = iov.iov_base;
    lk_kw_put32(p, (uint32_t)total);
    p += 4;
    for (size_t i = 0; i < v->nep;) {
        size_t j = group(v, i, &d, &any);
        if (v->ep[i].tag_at != 0 && d != 0) {
            ts = tag_size(v, v->ep[i].tag_at, d, &old_len);
            memcpy(p, f + at, v->ep[i].tag_at - at);
            p += v->ep[i].tag_at - at;
            p += lk_kw_put_uvarint(p, (uint32_t)ts);
            at = v->ep[i].tag_at + old_len;
        }
        for (; i < j; i++) {
            const struct lk_kafka_endpoint *e = &v->ep[i];
            if (host_changes(e)) {
                memcpy(p, f + at, e->host_at - at);
                p += e->host_at - at;
                if (v->flex) {
                    p += lk_kw_put_uvarint(p, (uint32_t)e->new_host.len + 1);
                } else {
                    lk_kw_put16(p, (uint16_t)e->new_host.len);
                    p += 2;
                }
                if (e->new_host.len != 0)
                    memcpy(p, e->new_host.p, e->new_host.len);
                p += e->new_host.len;
                at = port_at(v, e);
            }
            if (port_changes(e)) {
                memcpy(p, f + at, port_at(v, e) - at);
                p += port_at(v, e) - at;
                if (e->controller) {
                    lk_kw_put16(p, (uint16_t)e->new_port);
                    p += 2;
                } else {
                    lk_kw_put32(p, (uint32_t)e->new_port);
                    p += 4;
                }
                at = port_at(v, e) + (e->controller ? 2 : 4);
            }
        }
    }
    memcpy(p, f + at, v->len - at);
    iov.iov_len = (size_t)total + 4;
    if (evbuffer_commit_space(out, &iov, 1) != 0)
        abort();
    return LK_KAFKA_RW_REWRITTEN;
}
