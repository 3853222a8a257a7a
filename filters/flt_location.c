/*
 * location: rewrites the Location and Content-Location response headers
 * (CONTRACT §4).  An absolute URL that names any listener address of a
 * mapped broker is moved onto that broker's selected listener; path, query
 * and fragment stay byte for byte; relative URLs and unknown hosts are left
 * alone.  Header-only: the body never leaves the buffer chain.
 */
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_location.h"
#include "lk_xchg.h"

static void
rewrite(struct lk_xchg *x, struct lk_str *value)
{
    struct lk_str out;
    const struct lk_broker *b;

    if (lk_location_rewrite(&x->pool, x->cluster, x->listener_name, x->client_tls, *value, &out,
                            &b)) {
        lk_xchg_listener_check(x, b);
        *value = out;
        x->rewrites++;
    }
}

static enum lk_flt_verdict
on_res_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *res)
{
    for (size_t i = 0; i < res->nheaders; i++) {
        struct lk_http_header *h = &res->headers[i];
        if (h->id == LK_HDR_LOCATION || h->id == LK_HDR_CONTENT_LOCATION)
            rewrite(x, &h->value);
    }
    return LK_FLT_CONTINUE;
}

const struct lk_flt_ops lk_flt_location = {
    .name = "location",
    .protos = LK_PROTO_HTTP,
    .attach = lk_flt_attach_if_listener,
    .http_res_headers = on_res_headers,
};
