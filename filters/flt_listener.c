/*
 * listener: picks the listener this exchange's addresses are rewritten into
 * (CONTRACT §3, PIP-338 at the edge).  The client names one with the query
 * parameter `listenerName` or the header `X-Pulsar-ListenerName` (the query
 * wins, as in Pulsar's TopicLookup); it is used when the client may choose
 * it: the cluster's lookupListenerName, or one the operator lists in
 * client_listeners (lk_client_listener).  Any other name (the internal
 * listener's, by default, or one the map lacks) falls back to
 * lookupListenerName, logged once per connection, and with neither nothing
 * is rewritten.  The name is removed before the request goes upstream: a 4.x
 * broker fails a lookup for a listener it does not have.  It must run first
 * (it is first in the default chain), so that every later filter sees the
 * same selection in x->listener_name.
 */
#include <string.h>

#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_xchg.h"

static int
hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s into pool memory ('+' is a space in a query). */
static struct lk_str
unescape(struct lk_pool *pool, struct lk_str s)
{
    char *d = lk_palloc(pool, s.len + 1);
    size_t n = 0;

    for (size_t i = 0; i < s.len; i++) {
        if (s.p[i] == '%' && i + 2 < s.len && hexval(s.p[i + 1]) >= 0 &&
            hexval(s.p[i + 2]) >= 0) {
            d[n++] = (char)(hexval(s.p[i + 1]) * 16 + hexval(s.p[i + 2]));
            i += 2;
        } else {
            d[n++] = s.p[i] == '+' ? ' ' : s.p[i];
        }
    }
    return lk_str_make(d, n);
}

/*
 * Removes every `listenerName` parameter from the request target, keeping
 * everything else byte for byte; returns the first one's decoded value.
 */
static struct lk_str
take_query_name(struct lk_pool *pool, struct lk_str *target)
{
    static const struct lk_str key = LK_STRLIT("listenerName");
    const char *t = target->p, *q = memchr(t, '?', target->len);
    struct lk_str found = LK_STR_NULL;
    int removed = 0, first = 1;

    if (q == NULL || memmem(q, target->len - (size_t)(q - t), "listenerName", 12) == NULL)
        return found; /* the common case: nothing to take, nothing allocated */
    const char *end = t + target->len;
    const char *qend = memchr(q, '#', (size_t)(end - q));
    if (qend == NULL)
        qend = end;
    char *out = lk_palloc(pool, target->len + 1);
    size_t n = (size_t)(q - t);
    memcpy(out, t, n);
    for (const char *p = q + 1; p <= qend;) {
        const char *amp = memchr(p, '&', (size_t)(qend - p));
        struct lk_str param = lk_str_make(p, (size_t)((amp != NULL ? amp : qend) - p));
        if (lk_str_has_prefix(param, key) && (param.len == key.len || param.p[key.len] == '=')) {
            if (found.p == NULL && param.len > key.len)
                found = unescape(pool, lk_str_skip(param, key.len + 1));
            removed = 1;
        } else if (param.len != 0 || amp != NULL) {
            out[n++] = first ? '?' : '&';
            memcpy(out + n, param.p, param.len);
            n += param.len;
            first = 0;
        }
        if (amp == NULL)
            break;
        p = amp + 1;
    }
    if (!removed)
        return found;
    memcpy(out + n, qend, (size_t)(end - qend)); /* the fragment, if any */
    n += (size_t)(end - qend);
    *target = lk_str_make(out, n);
    return found;
}

/*
 * The selection happens at attach time, so that the filters after this one
 * (which is first in the chain) already see it when they decide whether to
 * attach.  It then sits out: there is nothing left for it to do.
 */
static int
attach(struct lk_flt *f, struct lk_xchg *x)
{
    struct lk_http_msg *req = &x->req;
    struct lk_str name = take_query_name(&x->pool, &req->target);
    struct lk_str *h = lk_http_find_id(req, LK_HDR_X_PULSAR_LISTENER_NAME);
    const char *what = "query listenerName", *canon;

    if (name.len == 0 && h != NULL) {
        name = lk_str_trim(*h);
        what = "header X-Pulsar-ListenerName";
    }
    lk_http_del_id(req, LK_HDR_X_PULSAR_LISTENER_NAME);
    /* x->listener_name starts as the cluster's lookupListenerName */
    if ((canon = lk_client_listener(x->conn, x->cluster, name, what)) != NULL)
        x->listener_name = canon;
    return 0;
}

const struct lk_flt_ops lk_flt_listener = {
    .name = "listener",
    .protos = LK_PROTO_HTTP,
    .attach = attach,
};
