/*
 * redirects = follow: a 307 or 308 from a broker to another broker of the
 * same cluster is followed by lookout instead of going to the client.  The
 * request body is kept (up to follow.replay_bytes) to be sent again, hops are
 * counted and remembered to stop loops (508), and a body too big to replay
 * gives the client the redirect after all.
 */
#include <stdio.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "lk_http_xchg.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_upstream.h"

void
lk_hx_start_hop(struct lk_hx *hx)
{
    hx->hc->c->action = "following a redirect";
    lk_hx_get_upstream(hx);
}

/*
 * redirects = follow: a 307/308 to a mapped broker is followed here rather
 * than shown to the client.  The old upstream goes (its body unread), and
 * the request is sent again, body replayed, once the client has sent all of
 * it.  Returns 1 when the redirect is being followed (or the exchange ended
 * with 508), 0 to let the response through.
 */
int
lk_hx_follow_redirect(struct lk_hx *hx)
{
    struct lk_xchg *x = &hx->x;
    const struct lk_cluster *cl = x->cluster;
    struct lk_url_parts parts;
    char reason[256];

    if (cl->redirects != LK_REDIRECTS_FOLLOW || hx->replay_overflow ||
        (x->res.status != 307 && x->res.status != 308) || hx->upgrade_req)
        return 0;
    struct lk_str *loc = lk_http_find_id(&x->res, LK_HDR_LOCATION);
    enum lk_scheme scheme;
    const struct lk_broker *b = loc != NULL ? lk_url_find_broker(cl, *loc, &parts, &scheme) : NULL;
    if (b == NULL)
        return 0; /* not ours: the client gets it (unmapped hosts are never followed) */
    struct lk_str target = parts.rest.len != 0 && parts.rest.p[0] == '/'
                               ? parts.rest
                               : lk_pstr_concat(&x->pool, LK_STRLIT("/"), parts.rest);
    if (hx->seen == NULL)
        hx->seen = lk_palloc(&x->pool, (cl->follow_max_hops + 2) * sizeof(*hx->seen));
    if (hx->hops == 0) {
        hx->seen[0].broker = x->broker;
        hx->seen[0].target = x->req.target;
    }
    for (unsigned i = 0; i <= hx->hops; i++)
        if (hx->seen[i].broker == b && lk_str_eq(hx->seen[i].target, target)) {
            /* The client is told the hop, not the brokers: their names
             * may be internal addresses (a live map's are). */
            lk_log(LK_WARN, hx->hc->c, "redirect loop: %s sent the request back to %s",
                   x->broker->name, b->name);
            snprintf(reason, sizeof(reason),
                     "redirect loop: after %u hop%s the request was sent back to a broker "
                     "already asked",
                     hx->hops, hx->hops == 1 ? "" : "s");
            lk_hx_reply_error(hx, 508, reason, 0);
            return 1;
        }
    if (hx->hops >= cl->follow_max_hops) {
        snprintf(reason, sizeof(reason), "too many redirects (more than %u hops)",
                 cl->follow_max_hops);
        lk_log(LK_WARN, hx->hc->c, "%s", reason);
        lk_hx_reply_error(hx, 508, reason, 0);
        return 1;
    }
    hx->hops++;
    hx->seen[hx->hops].broker = b;
    hx->seen[hx->hops].target = target;
    lk_log(LK_DEBUG, hx->hc->c, "following %d from %s to %s", x->res.status, x->broker->name,
           b->name);

    /* Keep the redirect in case the body turns out too big to replay. */
    hx->redirect = x->res;
    lk_upstream_free(hx->up);
    hx->up = NULL;
    lk_http_parser_free(&hx->sp);
    hx->sp_ready = 0;
    hx->res_head_seen = 0;
    lk_http_msg_init(&x->res, &x->pool, 0);
    x->broker = b;
    x->req.target = target;
    hx->following = 1;
    if (hx->req_done) {
        lk_hx_start_hop(hx);
        return 1;
    }
    /* The broker answered before the body was in (Jetty does, PR 25919):
     * take the rest of it from the client into the replay buffer. */
    if (hx->expect_continue && !hx->sent_100 && hx->req_body_bytes == 0) {
        evbuffer_add(bufferevent_get_output(hx->hc->c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
        hx->sent_100 = 1;
    }
    hx->hc->c->action = "reading the request body to replay it";
    lk_hc_process(hx->hc);
    return 1;
}

/* The body proved too big to replay after a redirect was taken: the client
 * gets that redirect (rewritten) after all, and the connection closes since
 * the rest of the body stays unread. */
void
lk_hx_give_back_redirect(struct lk_hx *hx)
{
    hx->following = 0;
    hx->x.res = hx->redirect;
    hx->status = hx->x.res.status;
    hx->res_head_seen = 1;
    hx->hc->closing = 1;
    lk_http_strip_hop_by_hop(&hx->x.res);
    if (lk_hx_verdict(hx, lk_flt_run_res_headers(&hx->x), "a filter failed on the response head",
                      1) != 0)
        return;
    lk_http_del_id(&hx->x.res, LK_HDR_CONTENT_LENGTH);
    lk_hx_send_response_head(hx, LK_OUT_CL, 0);
    lk_hx_end(hx, 0);
}
