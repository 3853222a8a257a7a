/*
 * lookup: rewrites Pulsar HTTP lookup answers (CONTRACT §4).  The body of
 * /lookup/v2/topic/... and /lookup/v2/destination/..., and of any other 2xx
 * JSON response whose length is not known to be over 16 KiB, is buffered
 * (up to max_buffer_bytes), inflated when it is gzip, and handed to
 * lk_lookup_rewrite (proxy/lk_lookup.c): if it is LookupData of a mapped
 * broker, its address fields become exactly the selected listener's.
 * A lookup path's answer too big to buffer, or to inflate, gets 502.
 * Anything else passes through byte for byte; the engine fixes the
 * framing of what changed.
 */
#include <stdint.h>

#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_inflate.h"
#include "lk_log.h"
#include "lk_lookup.h"
#include "lk_xchg.h"

/* LookupData is five URLs and an id: off the lookup paths, a JSON body
 * that says it is over this size is something else (topic stats, a
 * listing), and is not held back and parsed to find that out. */
#define SNIFF_MAX (16 * 1024)

static int
too_big(struct lk_http_msg *res)
{
    struct lk_str *cl = lk_http_find_id(res, LK_HDR_CONTENT_LENGTH);
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
    if (x->listener_name != NULL && lk_lookup_target(req->target))
        lk_http_set(req, LK_STRLIT("Accept-Encoding"), LK_STRLIT("identity"));
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
on_res_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *res)
{
    if (x->listener_name == NULL || res->status < 200 || res->status > 299)
        return LK_FLT_CONTINUE;
    if (!lk_lookup_target(x->req.target) &&
        (!lk_str_eqi(lk_http_media_type(res), LK_STRLIT("application/json")) || too_big(res)))
        return LK_FLT_CONTINUE;
    enum lk_coding coding = lk_http_content_coding(res);
    if (coding != LK_CODING_IDENTITY && coding != LK_CODING_GZIP)
        return LK_FLT_CONTINUE; /* deflate, br, stacked codings: left alone */
    /* A lookup path's answer is LookupData: one too big to rewrite gets
     * 502 (the runner), never its internal brokerUrl.  A JSON answer
     * elsewhere is only sniffed: one over max_buffer_bytes passes through
     * as the broker sent it, still compressed, without our body hook
     * running.  Content-Encoding stays for now: on_res_body removes the
     * field once it has decoded the body. */
    if (lk_lookup_target(x->req.target))
        lk_flt_need_body(x, f);
    else
        lk_flt_want_body(x, f, LK_BODY_BUFFER);
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
on_res_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out,
            int last)
{
    struct evbuffer *plain = NULL, *body = in;
    /* Content-Encoding is still there: the head is unsent until a body
     * byte leaves, and a buffering filter's hook runs before that. */
    int gzip = lk_http_content_coding(&x->res) == LK_CODING_GZIP;

    if (gzip) {
        plain = evbuffer_new();
        if (plain == NULL)
            goto pass;
        if (lk_inflate_gunzip(in, plain, x->conf->max_buffer_bytes) != 0) {
            if (lk_lookup_target(x->req.target)) {
                lk_log(LK_WARN, x->conn,
                       "%s: gzip lookup answer not decodable within max_buffer_bytes (%zu); "
                       "answered 502",
                       f->id, x->conf->max_buffer_bytes);
                lk_xchg_reply(x, 502,
                              "the broker's gzip lookup answer is not decodable within "
                              "max_buffer_bytes and cannot be rewritten");
                evbuffer_free(plain);
                return LK_FLT_REPLY;
            }
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
    /* the new body goes to out directly: nothing is there on any other answer */
    const struct lk_broker *b = NULL;
    int r = len != 0
                ? lk_lookup_rewrite(x->cluster, x->listener_name, p, len, LK_LOOKUP_ANY, out, &b)
                : LK_LOOKUP_PASS;
    lk_xchg_listener_check(x, b);
    if (r != LK_LOOKUP_NEW) {
        x->body_vetted = r == LK_LOOKUP_SAME;
        goto pass;
    }
    /* The body is plain now (the head is still unsent). */
    if (gzip)
        lk_http_del(&x->res, LK_STRLIT("Content-Encoding"));
    evbuffer_drain(in, evbuffer_get_length(in));
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
