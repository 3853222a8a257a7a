/*
 * location: rewrites the Location and Content-Location response headers
 * (CONTRACT §4).  An absolute URL that names any listener address of a
 * mapped broker is moved onto that broker's selected listener, or, when
 * the broker has no web address there, onto its lookup listener's, else
 * webServiceUrl (lk_location_pick); path, query and fragment stay byte for
 * byte; relative URLs and unknown hosts are left alone.  Header-only: the
 * body never leaves the buffer chain.
 */
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_location.h"
#include "lk_xchg.h"

/* A fallback is logged once per connection: the operator's map lacks an
 * address the client asked for, or one every client needs. */
static void
rewrite(struct lk_flt *f, struct lk_xchg *x, struct lk_str *value)
{
    struct lk_str out;
    struct lk_location_how how;

    if (lk_location_rewrite(&x->pool, x->cluster, x->listener_name, x->client_tls, *value, &out,
                            &how)) {
        lk_xchg_listener_check(x, how.broker);
        if (how.lacked != NULL)
            lk_web_fallback_log(x->conn, f->id, how.broker, how.lacked, how.to);
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
            rewrite(f, x, &h->value);
    }
    return LK_FLT_CONTINUE;
}

const struct lk_flt_ops lk_flt_location = {
    .name = "location",
    .protos = LK_PROTO_HTTP,
    .attach = lk_flt_attach_if_listener,
    .http_res_headers = on_res_headers,
};
