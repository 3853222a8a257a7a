/*
 * Fuzzes the lookup filter (filters/flt_lookup.c, its rewrite in
 * proxy/lk_lookup.c, its gunzip in proxy/lk_inflate.c): a response body as a
 * broker sends it to /lookup/v2/topic/..., run through the chain
 * (listener, lookup, location; leak_guard off) over the fixed listener
 * map of fuzz_util.c, in pieces, last = 1 at the end.  The first input
 * byte picks the listener the client asks for, gzip (the harness
 * compresses the body, so that the filter's inflating is reached), and a
 * lookup path or another JSON response; the rest is the body.
 * Invariants:
 *   - a body the filter does not rewrite goes on byte for byte;
 *   - a rewritten body is valid JSON, an object whose address fields
 *     (brokerUrl, brokerUrlTls, httpUrl, httpUrlTls, nativeUrl) are
 *     exactly the selected listener's addresses (present when it has the
 *     scheme, absent otherwise) and hold no internal address; every other
 *     member is the input's, unchanged.  That is the contract: brokerId
 *     (5.0, an internal "host:webport" identifier) and unknown fields are
 *     kept, and the leak guard is what looks at them, so the invariant
 *     cannot be "no internal address anywhere in the body";
 *   - the rewrite's two paths agree: where the splice answers, jansson
 *     gives the same answer, and a new body from the splice is valid JSON
 *     that jansson reads as the value of its own (json_equal); what the
 *     client got is the splice's bytes, or jansson's where it declined;
 *   - lk_json_scan's verdict on the plain body is json_loadb's (flags 0,
 *     as the filter's), for a body without a NUL byte; and the members it
 *     reports, keys decoded and values read, make jansson's object.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <jansson.h>
#include <zlib.h>

#include "lk_lookup.h"
#include "fuzz_util.h"
#include "lk_http_msg.h"
#include "lk_json.h"
#include "lk_location.h"
#include "lk_xchg.h"

static const char *const targets[4] = {
    "/lookup/v2/topic/persistent/public/default/t1",
    "/lookup/v2/topic/persistent/public/default/t1?listenerName=other",
    "/lookup/v2/topic/persistent/public/default/t1?authoritative=true&listenerName=internal",
    "/admin/v2/persistent/public/default/t1/stats",
};

/* LookupData's address fields and their schemes, restated from CONTRACT
 * §4 rather than taken from the filter, so that the invariant does not
 * check the filter against itself. */
static const struct {
    const char *name;
    enum lk_scheme scheme;
} fields[] = {
    {"brokerUrl", LK_SCHEME_PULSAR}, {"brokerUrlTls", LK_SCHEME_PULSAR_SSL},
    {"httpUrl", LK_SCHEME_HTTP},     {"httpUrlTls", LK_SCHEME_HTTPS},
    {"nativeUrl", LK_SCHEME_PULSAR},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static int
is_field(const char *key)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if (strcmp(key, fields[i].name) == 0)
            return 1;
    return 0;
}

/* gzip of data into out (evbuffer); 0 or -1. */
static int
gzip(const uint8_t *data, size_t len, struct evbuffer *out)
{
    z_stream z;
    unsigned char buf[4096];
    int zr;

    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    z.next_in = (unsigned char *)data;
    z.avail_in = (uInt)len;
    do {
        z.next_out = buf;
        z.avail_out = sizeof(buf);
        zr = deflate(&z, Z_FINISH);
        evbuffer_add(out, buf, sizeof(buf) - z.avail_out);
    } while (zr == Z_OK);
    deflateEnd(&z);
    return zr == Z_STREAM_END ? 0 : -1;
}

static void
check_rewritten(const struct lk_xchg *x, const uint8_t *plain, size_t plen, const char *out,
                size_t olen)
{
    json_error_t jerr;
    json_t *in = json_loadb((const char *)plain, plen, 0, &jerr);
    json_t *res = json_loadb(out, olen, 0, &jerr);
    struct lk_fuzz_addr addrs[64];
    const char *pats[64];
    size_t lens[64];

    LK_FUZZ_CHECK(json_is_object(in));
    LK_FUZZ_CHECK(json_is_object(res));
    /* the broker and its listener, as the filter must have found them */
    const struct lk_broker *b = NULL;
    for (size_t i = 0; i < NFIELDS && b == NULL; i++) {
        json_t *v = json_object_get(in, fields[i].name);
        struct lk_url_parts parts;
        enum lk_scheme s;
        if (json_is_string(v))
            b = lk_url_find_broker(
                x->cluster, lk_str_make(json_string_value(v), json_string_length(v)), &parts, &s);
    }
    LK_FUZZ_CHECK(b != NULL);
    const struct lk_listener *l = lk_broker_client_listener(b, x->listener_name);
    LK_FUZZ_CHECK(l != NULL);
    for (size_t i = 0; i < NFIELDS; i++) {
        json_t *v = json_object_get(res, fields[i].name);
        const struct lk_url *u = l->addr[fields[i].scheme];
        if (u == NULL)
            LK_FUZZ_CHECK(v == NULL);
        else
            LK_FUZZ_CHECK(json_is_string(v) && strcmp(json_string_value(v), u->text) == 0);
    }
    /* every other member is the input's (the last of a repeated key) */
    const char *key;
    json_t *v;
    json_object_foreach(res, key, v)
    {
        if (!is_field(key))
            LK_FUZZ_CHECK(json_equal(v, json_object_get(in, key)));
    }
    json_object_foreach(in, key, v)
    {
        if (!is_field(key))
            LK_FUZZ_CHECK(json_object_get(res, key) != NULL);
    }
    /* and the address fields hold no internal address, unless the client
     * asked for the internal listener by name, which CONTRACT §3 lets it
     * do (then they hold exactly that listener's addresses, checked above) */
    if (strcmp(x->listener_name, x->cluster->internal_listener) == 0)
        goto out;
    size_t n = lk_fuzz_internal_addrs(x->cluster, addrs, 64);
    for (size_t i = 0; i < n; i++) {
        pats[i] = addrs[i].text;
        lens[i] = strlen(addrs[i].text);
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        json_t *f = json_object_get(res, fields[i].name);
        if (json_is_string(f))
            LK_FUZZ_CHECK(lk_fuzz_naive_find(pats, lens, n, json_string_value(f),
                                             json_string_length(f), NULL, NULL) == 0);
    }
out:
    json_decref(in);
    json_decref(res);
}

/* The object lk_json_scan's members make, the last of a repeated key
 * winning as in jansson. */
struct rebuild {
    const char *text;
    json_t *obj;
};

static void
on_member(const struct lk_json_member *m, void *arg)
{
    struct rebuild *r = arg;
    char *key = malloc(m->key_len + 1);
    size_t klen;

    LK_FUZZ_CHECK(key != NULL);
    klen = m->key_esc ? lk_json_unescape(r->text + m->key + 1, m->key_len, key) : m->key_len;
    if (!m->key_esc)
        memcpy(key, r->text + m->key + 1, m->key_len);
    /* a member's value is a JSON text of its own (any type) */
    json_t *v = json_loadb(r->text + m->value, m->end - m->value, JSON_DECODE_ANY, NULL);
    if (v != NULL)
        json_object_setn_new(r->obj, key, klen, v);
    else
        r->obj = NULL; /* reported for text found invalid later; checked then */
    free(key);
}

/* The scanner against jansson on the plain body. */
static void
check_scanner(const uint8_t *plain, size_t plen)
{
    const char *text = (const char *)plain;
    json_t *j = json_loadb(text, plen, 0, NULL);
    struct rebuild r = {text, json_object()};
    json_t *obj = r.obj;
    int v = lk_json_scan(text, plen, on_member, &r);

    if (memchr(plain, '\0', plen) != NULL) {
        LK_FUZZ_CHECK(v == LK_JSON_UNSURE); /* valid JSON holds no NUL */
    } else {
        LK_FUZZ_CHECK(v == (j != NULL ? LK_JSON_VALID : LK_JSON_INVALID));
        if (json_is_object(j)) {
            LK_FUZZ_CHECK(r.obj != NULL);
            LK_FUZZ_CHECK(json_equal(r.obj, j));
        }
    }
    json_decref(obj);
    json_decref(j);
}

/* The splice against jansson on the plain body, and the chain's output
 * (o[0..olen), when it rewrote) against theirs. */
static void
check_paths(const struct lk_xchg *x, const uint8_t *plain, size_t plen, const char *o, size_t olen)
{
    struct evbuffer *s = evbuffer_new(), *j = evbuffer_new();
    const char *body = (const char *)plain;
    int rs = lk_lookup_rewrite(x->cluster, x->listener_name, body, plen, LK_LOOKUP_SPLICE, s, NULL);
    int rj =
        lk_lookup_rewrite(x->cluster, x->listener_name, body, plen, LK_LOOKUP_JANSSON, j, NULL);
    size_t slen = evbuffer_get_length(s), jlen = evbuffer_get_length(j);
    const char *sp = slen != 0 ? (const char *)evbuffer_pullup(s, -1) : "";
    const char *jp = jlen != 0 ? (const char *)evbuffer_pullup(j, -1) : "";

    /* out holds a new body, or nothing */
    LK_FUZZ_CHECK((rj == LK_LOOKUP_NEW) == (jlen != 0));
    if (rs != LK_LOOKUP_DECLINED) {
        LK_FUZZ_CHECK(rs == rj);
        LK_FUZZ_CHECK((rs == LK_LOOKUP_NEW) == (slen != 0));
    }
    if (rs == LK_LOOKUP_NEW) {
        json_t *a = json_loadb(sp, slen, 0, NULL), *b = json_loadb(jp, jlen, 0, NULL);
        LK_FUZZ_CHECK(json_is_object(a) && json_is_object(b));
        LK_FUZZ_CHECK(json_equal(a, b));
        LK_FUZZ_CHECK(lk_json_scan(sp, slen, NULL, NULL) == LK_JSON_VALID);
        json_decref(a);
        json_decref(b);
    }
    if (x->rewrites != 0) {
        const char *want = rs == LK_LOOKUP_NEW ? sp : jp;
        size_t wlen = rs == LK_LOOKUP_NEW ? slen : jlen;
        LK_FUZZ_CHECK(rs == LK_LOOKUP_NEW || (rs == LK_LOOKUP_DECLINED && rj == LK_LOOKUP_NEW));
        LK_FUZZ_CHECK(olen == wlen && memcmp(o, want, olen) == 0);
    }
    evbuffer_free(s);
    evbuffer_free(j);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const uint8_t *plain = data + 1;
    size_t plen = size - 1;
    struct lk_conf *conf = lk_fuzz_map(LK_LEAK_OFF);
    const struct lk_cluster *cl = conf->clusters[0];
    int gz = (flags >> 2) & 1;
    uint64_t seed = lk_fuzz_seed(data, size);

    struct evbuffer *body = evbuffer_new(), *in = evbuffer_new(), *out = evbuffer_new();
    if (gz) {
        if (gzip(plain, plen, body) != 0)
            abort();
    } else {
        evbuffer_add(body, plain, plen);
    }
    size_t blen = evbuffer_get_length(body);
    const char *sent = blen != 0 ? (const char *)evbuffer_pullup(body, -1) : "";

    struct lk_xchg *x =
        lk_fuzz_xchg_new(conf, cl->brokers[0], "GET", targets[flags & 3], (flags >> 4) & 1);
    x->res.status = 200;
    lk_http_add(&x->res, LK_STRLIT("Content-Type"),
                (flags >> 3) & 1 ? LK_STRLIT("application/json") : LK_STRLIT("text/plain"));
    if (gz)
        lk_http_add(&x->res, LK_STRLIT("Content-Encoding"), LK_STRLIT("gzip"));
    lk_flt_attach_all(x);
    LK_FUZZ_CHECK(lk_flt_run_req_headers(x) == LK_FLT_CONTINUE);
    LK_FUZZ_CHECK(lk_flt_run_res_headers(x) == LK_FLT_CONTINUE);

    size_t at = 0;
    do {
        size_t n = lk_fuzz_piece(&seed, blen - at);
        evbuffer_add(in, sent + at, n);
        at += n;
        if (x->body_filters != 0)
            LK_FUZZ_CHECK(lk_flt_run_res_body(x, in, out, at == blen) == LK_FLT_CONTINUE);
        else
            evbuffer_add_buffer(out, in);
    } while (at < blen);

    size_t olen = evbuffer_get_length(out);
    const char *o = (const char *)evbuffer_pullup(out, -1);
    if (x->rewrites == 0) {
        LK_FUZZ_CHECK(olen == blen && (blen == 0 || memcmp(o, sent, blen) == 0));
        /* and the coding stays as it was */
        LK_FUZZ_CHECK(lk_http_content_coding(&x->res) ==
                      (gz ? LK_CODING_GZIP : LK_CODING_IDENTITY));
    } else {
        /* a rewritten body is plain */
        LK_FUZZ_CHECK(lk_http_content_coding(&x->res) == LK_CODING_IDENTITY);
        check_rewritten(x, plain, plen, o, olen);
    }

    check_scanner(plain, plen);
    if (x->listener_name != NULL)
        check_paths(x, plain, plen, o, olen);

    lk_fuzz_xchg_free(x);
    evbuffer_free(body);
    evbuffer_free(in);
    evbuffer_free(out);
    return 0;
}
