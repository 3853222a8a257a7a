/*
 * lookup: rewrites Pulsar HTTP lookup answers (CONTRACT §4).  The body of
 * /lookup/v2/topic/... and /lookup/v2/destination/..., and of any other 2xx
 * JSON response whose length is not known to be over 16 KiB, is buffered
 * (up to max_buffer_bytes) and parsed with jansson.
 * If it is LookupData, the broker is found from any of its URLs, and
 * brokerUrl, brokerUrlTls, httpUrl, httpUrlTls and nativeUrl become exactly
 * the selected listener's pulsar, pulsar+ssl, http and https addresses: a
 * field the listener has is added, one it lacks is removed.  Everything else
 * (brokerUrlSsl, brokerId, unknown fields, key order) is kept.  Anything
 * that is not LookupData of a mapped broker passes through byte for byte;
 * the engine fixes the framing of what changed.
 */
#include <limits.h>
#include <string.h>
#include <jansson.h>
#include <zlib.h>

#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_xchg.h"

/* LookupData's address fields (pulsar-common lookup/data/LookupData.java)
 * and the listener scheme each one takes; nativeUrl is the legacy name of
 * brokerUrl. */
static const struct {
    const char *name;
    enum lk_scheme scheme;
} fields[] = {
    {"brokerUrl", LK_SCHEME_PULSAR}, {"brokerUrlTls", LK_SCHEME_PULSAR_SSL},
    {"httpUrl", LK_SCHEME_HTTP},     {"httpUrlTls", LK_SCHEME_HTTPS},
    {"nativeUrl", LK_SCHEME_PULSAR},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

/* Whether the request target is a topic lookup (not its /bundle variant).
 * An absolute-form target is looked at from its path. */
static int
is_lookup(struct lk_str target)
{
    struct lk_url_parts parts;

    if (target.len > 0 && target.p[0] != '/') {
        if (lk_url_split(target, &parts) != 0)
            return 0;
        target = parts.rest;
    }
    const char *q = memchr(target.p, '?', target.len);
    struct lk_str path = q != NULL ? lk_str_make(target.p, (size_t)(q - target.p)) : target;
    if (!lk_str_has_prefix(path, LK_STRLIT("/lookup/v2/topic/")) &&
        !lk_str_has_prefix(path, LK_STRLIT("/lookup/v2/destination/")))
        return 0;
    return !lk_str_has_suffix_i(path, LK_STRLIT("/bundle"));
}

/* LookupData is five URLs and an id: off the lookup paths, a JSON body
 * that says it is over this size is something else (topic stats, a
 * listing), and is not held back and parsed to find that out. */
#define SNIFF_MAX (16 * 1024)

static int
too_big(struct lk_http_msg *res)
{
    struct lk_str *cl = lk_http_find(res, LK_STRLIT("Content-Length"));
    uint64_t n = 0;

    if (cl == NULL || cl->len > 19)
        return cl != NULL;
    for (size_t i = 0; i < cl->len; i++)
        n = n * 10 + (uint64_t)(cl->p[i] - '0'); /* digits only: llhttp checked them */
    return n > SNIFF_MAX;
}

static enum lk_flt_verdict
on_req_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *req)
{
    /* We ask for identity rather than inflating what comes back: a lookup
     * answer is a few hundred bytes, so compressing it upstream and
     * inflating it here is work for nothing, and the rewritten body goes to
     * the client uncompressed either way (identity is always acceptable to
     * it).  on_res_body still inflates gzip for brokers, or proxies in front
     * of them, that ignore the request, and for LookupData on other paths. */
    if (x->listener_name != NULL && is_lookup(req->target))
        lk_http_set(req, LK_STRLIT("Accept-Encoding"), LK_STRLIT("identity"));
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
on_res_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *res)
{
    if (x->listener_name == NULL || res->status < 200 || res->status > 299)
        return LK_FLT_CONTINUE;
    if (!is_lookup(x->req.target) &&
        (!lk_str_eqi(lk_http_media_type(res), LK_STRLIT("application/json")) || too_big(res)))
        return LK_FLT_CONTINUE;
    enum lk_coding coding = lk_http_content_coding(res);
    if (coding != LK_CODING_IDENTITY && coding != LK_CODING_GZIP)
        return LK_FLT_CONTINUE; /* deflate, br, stacked codings: left alone */
    /* Content-Encoding stays for now: a body over max_buffer_bytes passes
     * through as the broker sent it, still compressed, without our body hook
     * running.  on_res_body removes the field once it has decoded the body. */
    lk_flt_want_body(x, f, LK_BODY_BUFFER);
    return LK_FLT_CONTINUE;
}

/*
 * Inflates the gzip body in (RFC 1952, one or more members) into plain,
 * writing at most max bytes.  in is left as it was.  0, or -1 if in is not
 * complete gzip or inflates to more than max.
 */
static int
gunzip(struct evbuffer *in, struct evbuffer *plain, size_t max)
{
    unsigned char buf[16384];
    size_t len = evbuffer_get_length(in);
    z_stream z;
    int rc = -1;

    if (len == 0 || len > UINT_MAX)
        return -1;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return -1;
    /* bounded: the runner holds at most max_buffer_bytes */
    z.next_in = evbuffer_pullup(in, -1);
    z.avail_in = (uInt)len;
    for (;;) {
        z.next_out = buf;
        z.avail_out = sizeof(buf);
        int zr = inflate(&z, Z_NO_FLUSH);
        /* Z_BUF_ERROR: no progress possible, i.e. the input ended early */
        if (zr != Z_OK && zr != Z_STREAM_END)
            goto out;
        size_t n = sizeof(buf) - z.avail_out;
        if (evbuffer_get_length(plain) + n > max)
            goto out;
        if (n != 0 && evbuffer_add(plain, buf, n) != 0)
            goto out;
        if (zr == Z_STREAM_END) {
            if (z.avail_in == 0)
                break;
            /* another member follows (RFC 1952 §2.2); garbage fails there */
            if (inflateReset(&z) != Z_OK)
                goto out;
        }
    }
    rc = 0;
out:
    inflateEnd(&z);
    return rc;
}

static int
dump_cb(const char *buf, size_t size, void *data)
{
    return evbuffer_add(data, buf, size);
}

/* The broker named by the first of LookupData's URLs that is a listener
 * address of a broker of cl, or NULL. */
static const struct lk_broker *
find_broker(const struct lk_cluster *cl, json_t *root)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        json_t *v = json_object_get(root, fields[i].name);
        struct lk_url_parts parts;
        enum lk_scheme scheme;
        if (!json_is_string(v))
            continue;
        struct lk_str url = lk_str_make(json_string_value(v), json_string_length(v));
        const struct lk_broker *b = lk_url_find_broker(cl, url, &parts, &scheme);
        if (b != NULL)
            return b;
    }
    return NULL;
}

/*
 * Rewrites the LookupData JSON in body[0..len) into the addresses of
 * listener `name`, serialized compact into out.  Returns 1 when out holds a
 * new body, 2 when the body already holds exactly the listener's addresses
 * (it goes on as it is), 0 when it must go on as it is for any other reason:
 * not JSON, not LookupData, an unknown broker, no such listener on it.  out
 * may hold partial output on 0.
 */

/* Whether "Url" occurs in body: memchr runs a word at a time where glibc's
 * memmem walks a two-way matcher, several times slower on short bodies. */
static int
has_url(const char *body, size_t len)
{
    const char *p = body, *end = body + len;

    while (end - p >= 3 && (p = memchr(p, 'U', (size_t)(end - p - 2))) != NULL) {
        if (p[1] == 'r' && p[2] == 'l')
            return 1;
        p++;
    }
    return 0;
}

static int
rewrite_json(const struct lk_cluster *cl, const char *name, const char *body, size_t len,
             struct evbuffer *out)
{
    json_error_t jerr;
    int rc = 0, changed = 0;

    /* No JSON_REJECT_DUPLICATES: on a repeated key the last value wins and
     * one key is written back, so no internal address survives in a
     * duplicate.  Input over jansson's nesting limit fails to parse. */
    /* LookupData is a small object with *Url fields: anything else (the
     * other JSON responses that pass here) is not worth a parse. */
    size_t lead = 0;
    while (lead < len && (body[lead] == ' ' || body[lead] == '\t' || body[lead] == '\r' ||
                          body[lead] == '\n'))
        lead++;
    if (lead == len || body[lead] != '{' || !has_url(body + lead, len - lead))
        return 0;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(root))
        goto out;
    const struct lk_broker *b = find_broker(cl, root);
    if (b == NULL)
        goto out;
    const struct lk_listener *l = lk_broker_listener(b, name);
    if (l == NULL)
        goto out;
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct lk_url *u = l->addr[fields[i].scheme];
        json_t *cur = json_object_get(root, fields[i].name);
        if (u == NULL) {
            /* the listener has no such address: the field goes, even as null */
            if (cur != NULL) {
                json_object_del(root, fields[i].name);
                changed = 1;
            }
            continue;
        }
        if (json_is_string(cur) && strcmp(json_string_value(cur), u->text) == 0)
            continue;
        /* an existing key is replaced in place, a new one is appended:
         * jansson keeps insertion order */
        if (json_object_set_new(root, fields[i].name, json_string(u->text)) != 0)
            goto out;
        changed = 1;
    }
    if (!changed) {
        rc = 2; /* already the listener's addresses: keep the bytes */
        goto out;
    }
    if (json_dump_callback(root, dump_cb, out, JSON_COMPACT) != 0)
        goto out;
    rc = 1;
out:
    json_decref(root);
    return rc;
}

static enum lk_flt_verdict
on_res_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out,
            int last)
{
    struct evbuffer *plain = NULL, *json = evbuffer_new();
    struct evbuffer *body = in;
    /* Content-Encoding is still there: the head is unsent until a body
     * byte leaves, and a buffering filter's hook runs before that. */
    int gzip = lk_http_content_coding(&x->res) == LK_CODING_GZIP;

    if (json == NULL)
        goto pass;
    if (gzip) {
        plain = evbuffer_new();
        if (plain == NULL)
            goto pass;
        if (gunzip(in, plain, x->conf->max_buffer_bytes) != 0) {
            lk_log(LK_INFO, x->conn,
                   "%s: gzip body not decodable within max_buffer_bytes (%zu); passed through "
                   "unchanged",
                   f->id, x->conf->max_buffer_bytes);
            goto pass;
        }
        body = plain;
    }
    size_t len = evbuffer_get_length(body);
    /* bounded: at most max_buffer_bytes, by the runner or by gunzip */
    const char *p = (const char *)evbuffer_pullup(body, -1);
    int r = len != 0 ? rewrite_json(x->cluster, x->listener_name, p, len, json) : 0;
    if (r != 1) {
        x->body_vetted = r == 2;
        goto pass;
    }
    /* The body is plain now (the head is still unsent). */
    if (gzip)
        lk_http_del(&x->res, LK_STRLIT("Content-Encoding"));
    evbuffer_drain(in, evbuffer_get_length(in));
    evbuffer_add_buffer(out, json);
    x->rewrites++;
    /* Every address field now names the selected listener: the leak guard
     * need not refuse the body for its brokerId (an identifier). */
    x->body_vetted = 1;
    goto out;
pass:
    evbuffer_add_buffer(out, in);
out:
    if (plain != NULL)
        evbuffer_free(plain);
    if (json != NULL)
        evbuffer_free(json);
    return LK_FLT_CONTINUE;
}

const struct lk_flt_ops lk_flt_lookup = {
    .name = "lookup",
    .protos = LK_PROTO_HTTP,
    .attach = lk_flt_attach_if_listener,
    .http_req_headers = on_req_headers,
    .http_res_headers = on_res_headers,
    .http_res_body = on_res_body,
};
