/*
 * One HTTP exchange's life: begun when a request's first byte comes, it
 * carries the request body to the broker (or the replay buffer), and ends
 * with its record in the metrics and the access log, freed in one go with
 * its pool.  lookout's own error replies end an exchange here too.
 */
#include <string.h>
#include <stdlib.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <jansson.h>

#include "lk_age.h"
#include "lk_clock.h"
#include "lk_http_xchg.h"
#include "lk_io.h"
#include "lk_log.h"
#include "lk_stats.h"
#include "lk_upstream.h"
#include "lk_xrec.h"

/* Exchanges ------------------------------------------------------------------ */

static void
req_body_cb(void *arg, const char *at, size_t len)
{
    struct lk_hx *hx = arg;

    hx->req_body_bytes += len;
    if (hx->replay != NULL && !hx->replay_overflow) {
        if (evbuffer_get_length(hx->replay) + len > hx->x.cluster->follow_replay_bytes) {
            /* too big to replay: this exchange's redirects go to the client */
            hx->replay_overflow = 1;
            evbuffer_drain(hx->replay, evbuffer_get_length(hx->replay));
        } else {
            evbuffer_add(hx->replay, at, len);
        }
    }
    if (hx->following || hx->up == NULL)
        return; /* the rest of the body only goes to the replay buffer */
    struct evbuffer *out = bufferevent_get_output(hx->up->bev);
    if (!hx->req_chunked) {
        evbuffer_add(out, at, len);
        return;
    }
    /* size line, data and CRLF in one addition: each runs the output's
     * callbacks */
    struct evbuffer_iovec v;
    if (evbuffer_reserve_space(out, (ev_ssize_t)(len + 22), &v, 1) != 1)
        abort(); /* out of memory: as lk_xmalloc */
    char *d = v.iov_base;
    d += lk_fmt_u64(d, len, 1);
    memcpy(d, "\r\n", 2);
    memcpy(d + 2, at, len);
    memcpy(d + 2 + len, "\r\n", 2);
    v.iov_len = (size_t)(d + 4 + len - (char *)v.iov_base);
    evbuffer_commit_space(out, &v, 1);
}

struct lk_hx *
lk_hx_new(struct lk_hconn *hc)
{
    struct lk_pool pool;
    struct lk_conn *c = hc->c;

    lk_pool_init(&pool);
    struct lk_hx *hx = lk_palloc(&pool, sizeof(*hx));
    hx->x.pool = pool;
    hx->hc = hc;
    hx->x.conn = c;
    hx->x.conf = c->conf;
    hx->x.client_tls = c->tls;
    hx->start_us = lk_now_us();
    /* lk_http_msg_init's work less the memset: lk_palloc zeroed hx */
    hx->x.req.pool = hx->x.res.pool = &hx->x.pool;
    hx->x.req.is_request = 1;
    hx->x.req.http_major = hx->x.req.http_minor = 1;
    hx->x.res.http_major = hx->x.res.http_minor = 1;
    if (hc->res_body == NULL) { /* the connection's first exchange */
        hc->res_body = lk_evbuffer_get();
        hc->res_out = lk_evbuffer_get();
    }
    hx->res_body = hc->res_body;
    hx->res_out = hc->res_out;
    hx->seq = ++hc->seq;
    lk_http_parser_next(&hc->rp, &hx->x.req);
    hc->rp.on_body = req_body_cb;
    hc->rp.body_arg = hx;
    return hx;
}

void
lk_hx_free(struct lk_hx *hx)
{
    struct lk_pool pool;

    if (hx->x.cluster != NULL)
        lk_flt_detach_all(&hx->x);
    lk_upstream_free(hx->up);
    hx->up = NULL;
    if (hx->sp_ready)
        lk_http_parser_free(&hx->sp);
    /* left empty for the next exchange (most are by now) */
    size_t left = evbuffer_get_length(hx->res_body);
    if (left != 0)
        evbuffer_drain(hx->res_body, left);
    left = evbuffer_get_length(hx->res_out);
    if (left != 0)
        evbuffer_drain(hx->res_out, left);
    if (hx->replay != NULL)
        evbuffer_free(hx->replay);
    if (hx->hc->rp.body_arg == hx) {
        hx->hc->rp.on_body = NULL;
        hx->hc->rp.body_arg = NULL;
    }
    pool = hx->x.pool; /* hx itself lives in the pool */
    lk_pool_free(&pool);
}

/* The exchange's record, for the metrics and the access log; cut says why
 * it ended before its end (NULL: it did not).  Inlined twice, so that an
 * exchange that ended pays nothing for the ones cut. */
static inline void
hx_log(struct lk_hx *hx, const char *cut)
{
    struct lk_xchg *x = &hx->x;
    struct lk_xrec r;

    memset(&r, 0, sizeof(r));
    r.c = hx->hc->c;
    r.cluster = x->cluster;
    r.broker = x->broker != NULL ? x->broker->name : NULL;
    r.proto = LK_SP_HTTP;
    r.method = x->req.method;
    r.target = x->req.target;
    r.status = hx->status;
    r.bytes_in = hx->req_body_bytes;
    r.bytes_out = hx->res_client_bytes;
    r.bytes_upstream = hx->res_bytes;
    r.hops = hx->hops;
    r.overflowed = x->body_overflows != 0;
    r.error = hx->upstream_error;
    r.cut = cut;
    lk_xrec_take(&r, x);
    r.dur_us = lk_now_us() - hx->start_us;
    r.upstream_us = hx->sent_us != 0 && hx->head_us >= hx->sent_us ? hx->head_us - hx->sent_us : -1;
    lk_xrec_done(&r);
}

void
lk_hx_log(struct lk_hx *hx)
{
    hx_log(hx, NULL);
}

void
lk_hx_log_cut(struct lk_hx *hx, const char *why)
{
    hx_log(hx, why);
}

/* Ends the current exchange and carries on with the connection: the next
 * pipelined request, an idle wait, or a close once the output drains. */
void
lk_hx_end(struct lk_hx *hx, int reuse_upstream)
{
    struct lk_hconn *hc = hx->hc;

    lk_hx_log(hx);
    /* Unless the request was read to its end, the rest of it cannot be told
     * from the next one. */
    if (!hx->req_done || !hc->rp.msg_done)
        hc->closing = 1;
    /* The client sends nothing more: it said so (a conforming client sends
     * no request after Connection: close), or it half-closed.  Then its
     * answer can go with the FIN (fin_next, lk_io.c).  Not when lookout or
     * the broker chose to close: the client may have sent its next request
     * already, and a close with unread bytes resets the connection, which
     * would drop an answer the kernel still held back. */
    int client_done = (hx->client_close || hc->client_eof) && hx->req_done && hc->rp.msg_done;
    if (reuse_upstream && hx->up != NULL && !hc->dead) {
        /* One whose PROXY header names this client serves no other
         * (upstream.proxy_protocol): kept for this client alone, and not
         * at all when it is leaving. */
        if (hx->up->key.pp == 0)
            lk_upstream_release(hx->up);
        else if (hc->closing || hc->client_eof)
            lk_upstream_free(hx->up);
        else
            lk_upstream_keep(hx->up, hc->c);
        hx->up = NULL;
    }
    if (hx->upgrade_req && !hc->tunnel && llhttp_get_errno(&hc->rp.ll) == HPE_PAUSED_UPGRADE)
        llhttp_resume_after_upgrade(&hc->rp.ll); /* the broker said no: still HTTP */
    hc->x = NULL;
    lk_hx_free(hx);
    if (hc->closing || hc->client_eof) {
        hc->dead = 1;
        struct lk_conn *c = hc->c;
        if (client_done && evbuffer_get_length(bufferevent_get_input(c->bev)) == 0)
            c->io.fin_next = 1;
        lk_conn_close_after_flush(c);
        return;
    }
    lk_io_enable(&hc->c->io, EV_READ);
    if (!hc->in_process)
        lk_hc_process(hc);
}

/* Answers with an error of our own: {"reason": ...}.  Once part of the
 * response has gone out there is nothing left to say, and the connection
 * just closes. */
void
lk_hx_reply_error(struct lk_hx *hx, int status, const char *reason, int close)
{
    struct lk_hconn *hc = hx->hc;
    struct evbuffer *out = bufferevent_get_output(hc->c->bev);

    if (status < 100 || status > 599) /* a filter that replied without a status */
        status = 502;
    if (reason == NULL)
        reason = lk_http_reason(status);
    if (hx->res_head_sent) {
        lk_log(LK_WARN, hc->c, "%s after the response began; closing", reason);
        hc->x = NULL;
        lk_hx_log(hx);
        lk_hx_free(hx);
        hc->dead = 1;
        lk_conn_close_later(hc->c);
        return;
    }
    /* A bodyless request whose end the parser has not reported yet is
     * complete all the same: step the parser (it may have seen the end
     * already, with the head) so the connection can go on. */
    if (hx->req_head_done && !hx->req_has_body && !hx->req_done) {
        size_t used;
        if (lk_http_parse(&hc->rp, "", 0, &used) == LK_HTTP_DONE)
            hx->req_done = 1;
    }
    json_t *j = json_pack("{s:s}", "reason", reason);
    if (j == NULL) /* not UTF-8: say what kind of failure it was */
        j = json_pack("{s:s}", "reason", lk_http_reason(status));
    char *body = json_dumps(j, JSON_COMPACT);
    if (close || !hx->req_done || !hc->rp.msg_done || lk_age_passed(hc->c))
        hc->closing = 1;
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\n%s",
                        status, lk_http_reason(status), strlen(body),
                        hc->closing ? "Connection: close\r\n" : "");
    if (hx->retry_after_s != 0)
        evbuffer_add_printf(out, "Retry-After: %u\r\n", hx->retry_after_s);
    evbuffer_add_printf(out, "\r\n%s", body);
    hx->status = status;
    hx->res_head_sent = 1;
    hx->res_client_bytes = strlen(body);
    free(body);
    json_decref(j);
    hx->req_done = hx->req_done || !hx->req_has_body;
    lk_hx_end(hx, 0);
}

/* The request and response head filters answer alike: a reply of the
 * filter's own, or a 502 saying which step failed. */
int
lk_hx_verdict(struct lk_hx *hx, enum lk_flt_verdict v, const char *failed, int close)
{
    if (v == LK_FLT_CONTINUE)
        return 0;
    if (v == LK_FLT_REPLY)
        lk_hx_reply_error(hx, hx->x.reply_status, hx->x.reply_reason, close);
    else
        lk_hx_reply_error(hx, 502, failed, close);
    return -1;
}
