/*
 * The request side of an HTTP exchange: a parsed request head is checked
 * (methods, Expect, Upgrade), routed by SNI, Host and bound address to a
 * cluster and broker, rewritten for the broker (hop-by-hop fields, framing
 * from what was parsed, X-Forwarded-*), and run through the request filters
 * before an upstream is asked for.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_http_xchg.h"
#include "lk_log.h"
#include "lk_ratelimit.h"
#include "lk_registry.h"
#include "lk_route.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_tls.h"
#include "lk_upstream.h"

/* Request side ----------------------------------------------------------------- */

static int
add_forwarded(struct lk_hx *hx)
{
    struct lk_http_msg *req = &hx->x.req;
    struct lk_conn *c = hx->hc->c;
    struct lk_str *xff = lk_http_find_id(req, LK_HDR_X_FORWARDED_FOR), *host;
    char text[LK_ADDR_TEXT];
    struct lk_str ip = lk_conn_peer_ip(c, text);

    /* Only lookout says which certificate a client showed: the client's
     * own field never passes, whatever the settings. */
    if (lk_http_del_id(req, LK_HDR_X_FORWARDED_CLIENT_CERT) != 0)
        lk_log(LK_DEBUG, c, "the client's X-Forwarded-Client-Cert removed");
    const char *subject = lk_conn_cert_subject(c);
    if (hx->x.cluster->forwarded_client_cert && subject != NULL) {
        /* Envoy's form: Subject="..." (OpenSSL's RFC 2253 text escapes
         * '"' and '\\' already) */
        size_t n = strlen(subject);
        char *v = lk_palloc(req->pool, n + 10);
        memcpy(v, "Subject=\"", 9);
        memcpy(v + 9, subject, n);
        v[9 + n] = '"';
        lk_http_add_id(req, LK_HDR_X_FORWARDED_CLIENT_CERT, lk_str_make(v, n + 10));
    }
    if (!hx->x.cluster->forwarded_headers)
        return 0; /* forwarded_headers = off: the client's own, if any, pass as sent */
    if (xff != NULL) {
        /* Every X-Forwarded-For field, in order, is one list (RFC 9110
         * §5.3), and the client's address ends it.  Joined in one piece,
         * sized first: a concatenation per field would copy the list so
         * far each time, a cost square in the number of fields. */
        size_t n = lk_http_count_id(req, LK_HDR_X_FORWARDED_FOR), len = ip.len, left, i;
        for (left = n, i = req->first[LK_HDR_X_FORWARDED_FOR]; left != 0; i++)
            if (req->headers[i].id == LK_HDR_X_FORWARDED_FOR) {
                len += req->headers[i].value.len + 2;
                left--;
            }
        char *joined = lk_palloc(req->pool, len), *d = joined;
        for (left = n, i = req->first[LK_HDR_X_FORWARDED_FOR]; left != 0; i++)
            if (req->headers[i].id == LK_HDR_X_FORWARDED_FOR) {
                const struct lk_str *v = &req->headers[i].value;
                if (v->len != 0)
                    memcpy(d, v->p, v->len);
                memcpy(d + v->len, ", ", 2);
                d += v->len + 2;
                left--;
            }
        if (ip.len != 0)
            memcpy(d, ip.p, ip.len);
        lk_http_set_id(req, LK_HDR_X_FORWARDED_FOR, lk_str_make(joined, len));
    } else {
        lk_http_put_id(req, LK_HDR_X_FORWARDED_FOR, ip); /* the connection's: outlives req */
    }
    lk_http_put_id(req, LK_HDR_X_FORWARDED_PROTO, c->tls ? LK_STRLIT("https") : LK_STRLIT("http"));
    /* found after the sets, which move the fields up when they drop one */
    host = lk_http_find_id(req, LK_HDR_HOST);
    if (host != NULL)
        lk_http_put_id(req, LK_HDR_X_FORWARDED_HOST, *host); /* in req's pool */
    return 0;
}

/* "host:port" of a vhost, as a Host field names it. */
static struct lk_str
vhost_authority(struct lk_pool *pool, const struct lk_vhost *vh)
{
    char buf[300];
    int n = snprintf(buf, sizeof(buf), strchr(vh->host, ':') != NULL ? "[%s]:%u" : "%s:%u",
                     vh->host, (unsigned)vh->port);
    return lk_pstr(pool, buf, n < (int)sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A request lookout will not forward: logged with what was wrong, answered,
 * and the connection closed (what follows cannot be trusted to frame). */
static void
refuse(struct lk_hx *hx, int status, const char *why)
{
    char target[120];

    lk_log(LK_INFO, hx->hc->c, "refused %d: %s (\"%.*s %s\")", status, why,
           (int)hx->x.req.method.len, hx->x.req.method.p,
           lk_log_sanitize(target, hx->x.req.target.p, hx->x.req.target.len, 80));
    lk_hx_reply_error(hx, status, why, 1);
}

/* Limited requests since the last line saying so: a flood makes one line
 * a second, not one per request. */
static struct lk_log_every limited_log;

/*
 * limit.requests of cl: 0 if the client may go on, else -1 having answered
 * 429 with Retry-After and the connection kept (a request body not read
 * yet closes it, as for every answer lookout gives before the body).
 */
static int
limited(struct lk_hx *hx, const struct lk_cluster *cl)
{
    struct lk_conn *c = hx->hc->c;
    unsigned retry_s;

    if (cl->nlimit_exempt != 0 &&
        lk_cidr_contains(cl->limit_exempt, cl->nlimit_exempt, c->peer.family, c->peer.ip))
        return 0;
    if (lk_rate_take(&c->peer, cl->limit_zone, &cl->limit,
                     (uint64_t)lk_now_us() * 1000, &retry_s) == 0)
        return 0;

    lk_stats_limited(c->rt->stats, cl);
    unsigned long n = lk_log_every(&limited_log, 1000);
    if (n != 0)
        lk_log(LK_WARN, c,
               "limited %lu HTTP requests since the last such line (limit.requests); the latest "
               "to cluster %s, at %u/%s with a burst of %u, may come again in %us",
               n, cl->name, cl->limit.requests, cl->limit.per_s == 1 ? "s" : "m", cl->limit.burst,
               retry_s);
    hx->retry_after_s = retry_s;
    lk_hx_reply_error(hx, 429, "too many requests from your address (limit.requests)", 0);
    return -1;
}

void
lk_hx_on_request_head(struct lk_hx *hx)
{
    struct lk_hconn *hc = hx->hc;
    struct lk_conn *c = hc->c;
    struct lk_http_msg *req = &hx->x.req;
    struct lk_http_parser *rp = &hc->rp;

    hc->deadline_ms = 0; /* the head came in time; the timer may stay set (lk_hc_deadline) */
    hx->req_head_done = 1;
    hx->req_chunked = rp->chunked;
    hx->req_has_body = rp->chunked || (rp->has_cl && rp->content_length > 0);
    hx->head_method = lk_str_eq(req->method, LK_STRLIT("HEAD"));
    if (!rp->keep_alive)
        hc->closing = hx->client_close = 1;

    if (lk_str_eq(req->method, LK_STRLIT("CONNECT"))) {
        lk_hx_reply_error(hx, 405, "CONNECT is not supported", 1);
        return;
    }
    const char *why;
    int absolute;
    int status = lk_http_check_request(req, &absolute, &why);
    if (status != 0) {
        refuse(hx, status, why);
        return;
    }
    struct lk_str *upgrade = lk_http_find_id(req, LK_HDR_UPGRADE);
    /* the value now: removing Expect below moves the fields after it */
    struct lk_str upgrade_val = upgrade != NULL ? *upgrade : LK_STR_NULL;
    if (upgrade != NULL && lk_http_has_token_id(req, LK_HDR_UPGRADE, LK_STRLIT("h2c"))) {
        lk_hx_reply_error(hx, 400, "Upgrade: h2c is not supported", 1);
        return;
    }
    struct lk_str *expect = lk_http_find_id(req, LK_HDR_EXPECT);
    if (expect != NULL && req->http_minor == 0) {
        lk_http_del_id(req, LK_HDR_EXPECT); /* RFC 9110 §10.1.1: ignored in HTTP/1.0 */
        expect = NULL;
    }
    if (expect != NULL && (!lk_str_eqi(*expect, LK_STRLIT("100-continue")) ||
                           lk_http_count_id(req, LK_HDR_EXPECT) != 1)) {
        refuse(hx, 417, "the only expectation supported is one Expect: 100-continue");
        return;
    }
    hx->expect_continue = expect != NULL;
    /* An absolute-form target's authority is in Host now, and it must name
     * a broker of this socket even where the bound address alone would do. */
    struct lk_str *host = lk_http_find_id(req, LK_HDR_HOST);
    const struct lk_vhost *vh =
        lk_route(c->bind, lk_str_c(c->sni), host ? *host : LK_STR_NULL, absolute);
    if (vh == NULL) {
        lk_hx_reply_error(hx, 421, "no broker is mapped to this host", 0);
        return;
    }
    /* A Host naming another cluster than the handshake's SNI chose (none
     * sent) must not pass that cluster's client-certificate check; nor
     * may a connection older than a reload that asks for one. */
    uint64_t auth =
        c->tls && c->rt->auths != NULL ? lk_tls_auth_id(c->rt->auths, vh->cluster->index) : 0;
    if (auth != 0 && auth != lk_conn_auth_id(c)) {
        refuse(hx, 421, "this cluster's client certificate check was not the one this TLS "
                        "connection passed (send SNI naming it)");
        return;
    }
    if (host == NULL) /* HTTP/1.0: the broker gets what a 1.1 client would send */
        lk_http_add_id(req, LK_HDR_HOST, vhost_authority(&hx->x.pool, vh));
    hx->x.cluster = vh->cluster;
    if (vh->cluster->limit.requests != 0 && limited(hx, vh->cluster) != 0)
        return;
    hx->any_broker = vh->broker == NULL;
    hx->x.broker =
        vh->broker != NULL ? vh->broker : lk_pick_broker(c->rt, vh->cluster, LK_SCHEME_HTTP);
    hx->x.listener_name = vh->cluster->lookup_listener;
    if (hx->x.broker == NULL) {
        /* A cluster read from ZooKeeper may have none for now: that passes.
         * Its brokers may also all have binary addresses only: lookout
         * then has nowhere to send HTTP, and says so. */
        static const char none[] = "no broker of the cluster has an internal http or https "
                                   "address (its map names binary addresses only)";
        if (vh->cluster->nbrokers != 0) {
            lk_log(LK_WARN, c, "cluster %s: %s", vh->cluster->name, none);
            lk_hx_reply_error(hx, 503, none, 0);
        } else if (vh->cluster->zk != NULL)
            lk_hx_reply_error(hx, 503,
                        vh->cluster->zk_read
                            ? "no broker of the cluster is registered in ZooKeeper"
                            : "the cluster's brokers have not been read from ZooKeeper yet",
                        0);
        else
            lk_hx_reply_error(hx, 502, "the cluster has no brokers", 0);
        return;
    }

    hx->upgrade_req = upgrade != NULL && rp->upgrade;

    lk_http_strip_hop_by_hop(req);
    if (hx->upgrade_req) {
        lk_http_add_id(req, LK_HDR_CONNECTION, LK_STRLIT("upgrade"));
        lk_http_add_id(req, LK_HDR_UPGRADE, upgrade_val);
    }
    /* lookout frames what it forwards from what it parsed, never from the
     * fields as the client left them. */
    lk_http_del_id(req, LK_HDR_CONTENT_LENGTH);
    if (hx->req_chunked) {
        lk_http_add_id(req, LK_HDR_TRANSFER_ENCODING, LK_STRLIT("chunked"));
    } else if (rp->has_cl) {
        char num[24];
        lk_http_add_id(req, LK_HDR_CONTENT_LENGTH, lk_hx_num(num, rp->content_length));
    }
    add_forwarded(hx);
    if (vh->cluster->redirects == LK_REDIRECTS_FOLLOW)
        hx->replay = evbuffer_new();

    lk_flt_attach_all(&hx->x);
    if (lk_hx_verdict(hx, lk_flt_run_req_headers(&hx->x), "a filter failed on the request head",
                      0) != 0)
        return;
    lk_hx_get_upstream(hx);
}

void
lk_hx_on_request_done(struct lk_hx *hx)
{
    hx->req_done = 1;
    if (hx->following) {
        if (hx->replay_overflow)
            lk_hx_give_back_redirect(hx);
        else
            lk_hx_start_hop(hx);
        return;
    }
    if (hx->req_chunked)
        evbuffer_add(bufferevent_get_output(hx->up->bev), "0\r\n\r\n", 5);
    if (!hx->res_head_seen)
        hx->hc->c->action = "waiting for the broker's response";
}
