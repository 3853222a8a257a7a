/*
 * The broker side of an HTTP exchange: an upstream from the pool (another
 * broker of a service address when one is down, a stale keep-alive retried
 * once), the request head sent, and the response read back with llhttp and
 * moved to the client through the response filters.  The framing towards
 * the client is decided here: a Content-Length body nobody filters moves
 * buffer to buffer, one a filter may resize goes chunked or with an exact
 * length once whole.
 */
#include <stdio.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "lk_age.h"
#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_http_xchg.h"
#include "lk_io.h"
#include "lk_log.h"
#include "lk_stats.h"
#include "lk_upstream.h"
#include "lk_worker.h"

static void up_write(struct bufferevent *bev, void *arg);
static void up_event(struct bufferevent *bev, short what, void *arg);

static void
res_body_cb(void *arg, const char *at, size_t len)
{
    struct lk_hx *hx = arg;
    evbuffer_add(hx->res_body, at, len);
    hx->res_bytes += len;
}

/* Upstream side -------------------------------------------------------------- */

static void up_ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg);

/*
 * A broker failed this exchange: "broker NAME <what><detail><note>" at warn
 * in the error log, and the client gets status with the reason "broker
 * <what><detail>", which names no broker and no address (a broker's name
 * from a live map is its internal host:port), as nginx, Envoy and HAProxy
 * never name their upstream to a client.  what and detail are fixed texts
 * of ours or of the system's; note, what the broker sent, goes to the log
 * only.
 */
static void
broker_error(struct lk_hx *hx, int status, int close, const char *what, const char *detail,
             const char *note)
{
    char reason[320]; /* what, and a detail of up to 256 */

    lk_log(LK_WARN, hx->hc->c, "broker %s %s%s%s", hx->x.broker->name, what, detail, note);
    snprintf(reason, sizeof(reason), "broker %s%s", what, detail);
    lk_hx_reply_error(hx, status, reason, close);
}

void
lk_hx_get_upstream(struct lk_hx *hx)
{
    struct lk_conn *c = hx->hc->c;

    hx->waiting_upstream = 1;
    c->action = "connecting to the broker";
    hx->up = lk_upstream_get(c->w, c->rt, hx->x.broker, LK_SCHEME_HTTP, c, up_ready, hx);
    if (hx->up == NULL) {
        hx->waiting_upstream = 0;
        /* The load rules keep a broker without an internal http or https
         * address off every HTTP route; this is the last guard, never a
         * dial to one of its binary ports. */
        broker_error(hx, 502, 0, "cannot be connected to",
                     lk_broker_upstream(hx->x.broker, LK_SCHEME_HTTP, c->tls) == NULL
                         ? ": it has no internal http or https address"
                         : "",
                     "");
    }
}

static void
send_request_head(struct lk_hx *hx)
{
    struct evbuffer *out = bufferevent_get_output(hx->up->bev);

    hx->sent_us = lk_now_us();
    hx->head_us = 0;
    if (hx->hops == 0) {
        lk_http_write_head(&hx->x.req, out);
        return;
    }
    /* A followed redirect: the whole body is in the replay buffer, so it
     * goes with an exact length whatever its first framing was. */
    struct lk_http_msg *req = &hx->x.req;
    if (hx->req_has_body) {
        lk_http_del_id(req, LK_HDR_TRANSFER_ENCODING);
        char num[24];
        lk_http_set_id(req, LK_HDR_CONTENT_LENGTH, lk_hx_num(num, evbuffer_get_length(hx->replay)));
        hx->req_chunked = 0;
    }
    lk_http_del_id(req, LK_HDR_EXPECT); /* the body is here already */
    lk_http_write_head(req, out);
    /* by reference: the replay buffer stays whole for a further hop */
    if (hx->replay != NULL)
        evbuffer_add_buffer_reference(out, hx->replay);
}

/* A reused keep-alive connection may have been closed by the broker just as
 * we picked it: retry once on a fresh one when nothing is lost by it. */
static int
retry_stale(struct lk_hx *hx)
{
    if (hx->up == NULL || !hx->up->reused || hx->retried || hx->res_head_seen ||
        hx->req_body_bytes != 0 || hx->sp.head_bytes != 0)
        return 0;
    hx->retried = 1;
    lk_upstream_free(hx->up);
    hx->up = NULL;
    if (hx->sp_ready) {
        lk_http_parser_free(&hx->sp);
        hx->sp_ready = 0;
    }
    lk_hx_get_upstream(hx);
    return 1;
}

static void
up_ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg)
{
    struct lk_hx *hx = arg;
    struct lk_hconn *hc = hx->hc;
    const struct lk_conf *conf = hc->c->conf;

    hx->waiting_upstream = 0;
    if (ev != LK_UP_CONNECTED) {
        char reason[256];
        hx->upstream_error = u->error;
        /* Nothing was sent: on a service address another broker can take
         * it (lk_pick_broker now skips the one that failed). */
        if (hx->any_broker && ++hx->connects < hx->x.cluster->nbrokers && hx->hops == 0) {
            const struct lk_broker *next = lk_pick_broker(hc->c->rt, hx->x.cluster, LK_SCHEME_HTTP);
            if (next != NULL && next != hx->x.broker) {
                lk_log(LK_INFO, hc->c, "broker %s unreachable (%s); trying %s",
                       hx->x.broker->name, u->error, next->name);
                lk_upstream_free(hx->up);
                hx->up = NULL;
                hx->x.broker = next;
                lk_hx_get_upstream(hx);
                return;
            }
        }
        /* u->error is one of lk_err_*, u->why the system's word on it:
         * neither names the broker (lk_upstream.h). */
        snprintf(reason, sizeof(reason), ": %s%s%s%s", u->error != NULL ? u->error : lk_err_connect,
                 u->why != NULL ? " (" : "", u->why != NULL ? u->why : "",
                 u->why != NULL ? ")" : "");
        lk_upstream_free(hx->up);
        hx->up = NULL;
        broker_error(hx, 502, 0, "unreachable", reason, "");
        return;
    }
    lk_http_parser_init(&hx->sp, 0, conf->max_header_bytes);
    hx->sp_ready = 1;
    hx->up_unsure = 0;
    lk_http_parser_next(&hx->sp, &hx->x.res);
    hx->sp.no_body = hx->head_method;
    hx->sp.on_body = res_body_cb;
    hx->sp.body_arg = hx;

    struct timeval rt = lk_hx_tv(conf->timeout_response_ms);
    hx->body_timeouts = 0;
    bufferevent_setcb(u->bev, lk_hx_up_read, up_write, up_event, hx);
    lk_io_set_timeouts(&u->io, &rt, &rt);
    lk_io_enable(&u->io, EV_READ | EV_WRITE);
    send_request_head(hx);
    hx->following = 0;
    hc->c->action = hx->req_done ? "waiting for the broker's response" : "sending the request body";
    /* the body (if any) flows now */
    lk_hc_process(hc);
}

/* Response framing towards the client ------------------------------------- */

static void
weaken_etag(struct lk_http_msg *m)
{
    struct lk_str *etag = lk_http_find_id(m, LK_HDR_ETAG);
    if (etag != NULL && !(etag->len >= 2 && etag->p[0] == 'W' && etag->p[1] == '/'))
        *etag = lk_pstr_concat(m->pool, LK_STRLIT("W/"), *etag);
}

/* lk_hx_send_response_head, the head written in front of what body holds
 * when body is not NULL (see pump_body), else to the client's output. */
static void
response_head(struct lk_hx *hx, enum lk_hx_framing framing, size_t length, struct evbuffer *body)
{
    struct lk_hconn *hc = hx->hc;
    struct lk_http_msg *res = &hx->x.res;

    hx->framing = framing;
    /* The rest of an unread request body cannot be told from the next
     * request: say now that the connection will close. */
    if (!hx->req_done)
        hc->closing = 1;
    if (framing == LK_OUT_CL) {
        char *num = lk_pnalloc(res->pool, 24); /* written in place, not copied */
        struct lk_str cl = lk_hx_num(num, length);
        num[cl.len] = '\0';
        lk_http_put_id(res, LK_HDR_CONTENT_LENGTH, cl);
    } else if (framing == LK_OUT_CHUNKED) {
        lk_http_del_id(res, LK_HDR_CONTENT_LENGTH);
        lk_http_add_id(res, LK_HDR_TRANSFER_ENCODING, LK_STRLIT("chunked"));
    } else if (framing == LK_OUT_CLOSE) {
        lk_http_del_id(res, LK_HDR_CONTENT_LENGTH);
        hc->closing = 1;
    }
    if (lk_age_passed(hc->c)) /* max_connection_age: this answer is its last */
        hc->closing = 1;
    if (hc->closing)
        lk_http_add_id(res, LK_HDR_CONNECTION, LK_STRLIT("close"));
    else if (hx->x.req.http_minor == 0)
        lk_http_add_id(res, LK_HDR_CONNECTION, LK_STRLIT("keep-alive"));
    res->http_minor = 1;
    if (body != NULL)
        lk_http_prepend_head(res, body);
    else
        lk_http_write_head(res, bufferevent_get_output(hc->c->bev));
    hx->res_head_sent = 1;
}

void
lk_hx_send_response_head(struct lk_hx *hx, enum lk_hx_framing framing, size_t length)
{
    response_head(hx, framing, length, NULL);
}

/* The framing of a response whose length is not known up front. */
static enum lk_hx_framing
open_framing(struct lk_hx *hx)
{
    return hx->x.req.http_minor >= 1 ? LK_OUT_CHUNKED : LK_OUT_CLOSE;
}

/*
 * Moves data, a buffer of our own, to the client, framed: the first head
 * bytes of it are the response head (pump_body put it there), the rest is
 * body.  One addition to the client's output whatever the framing: each
 * runs the output's callbacks (libevent's and lk_io's), so a chunk's size
 * line and CRLF join the chunk in data first.
 */
static void
write_body(struct lk_hx *hx, struct evbuffer *data, size_t head)
{
    struct evbuffer *out = bufferevent_get_output(hx->hc->c->bev);
    size_t len = evbuffer_get_length(data) - head;

    if (len == 0 && head == 0)
        return;
    hx->res_client_bytes += len;
    if (hx->framing == LK_OUT_CHUNKED && len != 0) { /* then head is 0 */
        char line[24];
        size_t n = lk_fmt_u64(line, len, 1);
        line[n++] = '\r';
        line[n++] = '\n';
        evbuffer_prepend(data, line, n);
        evbuffer_add(data, "\r\n", 2);
    }
    evbuffer_add_buffer(out, data);
}

/* Moves decoded body bytes through the filters to the client.  -1 if a
 * filter failed (the exchange is over). */
static int
pump_body(struct lk_hx *hx, int last)
{
    if (hx->x.body_filters != 0) {
        enum lk_flt_verdict v = lk_flt_run_res_body(&hx->x, hx->res_body, hx->res_out, last);
        if (v != LK_FLT_CONTINUE) {
            if (v == LK_FLT_REPLY && !hx->res_head_sent)
                lk_hx_reply_error(hx, hx->x.reply_status, hx->x.reply_reason, 1);
            else
                lk_hx_reply_error(hx, 502, "a filter failed on the response body", 1);
            return -1;
        }
        if (!hx->res_head_sent && hx->x.body_changers != 0) {
            if (last) {
                /* the whole body is here: the head goes in front of it,
                 * and both to the client in one addition */
                size_t before = evbuffer_get_length(hx->res_out);
                response_head(hx, LK_OUT_CL, before, hx->res_out);
                write_body(hx, hx->res_out, evbuffer_get_length(hx->res_out) - before);
                return 0;
            }
            if (evbuffer_get_length(hx->res_out) != 0)
                lk_hx_send_response_head(hx, open_framing(hx), 0);
        }
    } else {
        evbuffer_add_buffer(hx->res_out, hx->res_body);
    }
    if (hx->res_head_sent)
        write_body(hx, hx->res_out, 0);
    return 0;
}

static void
on_response_head(struct lk_hx *hx)
{
    struct lk_hconn *hc = hx->hc;
    struct lk_http_msg *res = &hx->x.res;
    struct lk_http_parser *sp = &hx->sp;

    hx->status = res->status;
    hx->res_head_seen = 1;
    hx->head_us = lk_now_us();
    hc->c->action = "reading the broker's response";
    /* timeout.response bounds the wait for the head; the body may pause
     * for up to timeout.idle between reads: set at the end of this read,
     * unless the whole response came in it (most do). */
    hx->body_timeouts = 1;
    if (sp->body_ignored && !hx->up_unsure) {
        /* The body it announced may still come, and be read as the
         * answer to the next request on this connection. */
        lk_log(LK_WARN, hc->c,
               "broker %s sent a %d with a body's framing (Content-Length or "
               "Transfer-Encoding), which it cannot have: no body read, and the broker "
               "connection not reused",
               hx->x.broker->name, res->status);
        hx->up_unsure = 1;
    }
    if (res->status == 101) {
        if (!hx->upgrade_req) {
            lk_hx_reply_error(hx, 502, "the broker switched protocols unasked", 1);
            return;
        }
        /* The head the tunnel starts with goes through the filters (the
         * leak guard) like any other; its Upgrade and Connection stay. */
        lk_hx_verdict(hx, lk_flt_run_res_interim(&hx->x), "a filter failed on the response head",
                      1);
        return; /* unless that ended it, the UPGRADE event follows and starts the tunnel */
    }
    if (res->status >= 100 && res->status < 200) {
        if (++hx->interim > LK_HX_MAX_INTERIM) {
            hx->upstream_error = "too many interim responses";
            char detail[64];
            snprintf(detail, sizeof(detail), " more than %d interim (1xx) responses",
                     LK_HX_MAX_INTERIM);
            broker_error(hx, 502, 1, "sent", detail, "");
            return;
        }
        /* Interim responses go to HTTP/1.1 clients through the filters'
         * interim hook; 100 Continue releases a client that waits on
         * Expect.  One a filter refuses is dropped: it is informational,
         * and the final response follows. */
        if (hx->x.req.http_minor >= 1) {
            lk_http_strip_hop_by_hop(res);
            enum lk_flt_verdict v = lk_flt_run_res_interim(&hx->x);
            if (v == LK_FLT_CONTINUE)
                lk_http_write_head(res, bufferevent_get_output(hc->c->bev));
            else if (v != LK_FLT_REPLY)
                lk_hx_reply_error(hx, 502, "a filter failed on an interim response head", 1);
        }
        return;
    }

    if (lk_hx_follow_redirect(hx))
        return;
    hx->res_no_body = hx->head_method || res->status == 204 || res->status == 304;
    /* llhttp takes the chunking off a body whose last coding is chunked,
     * or reads one coded otherwise to the close; either way the codings
     * would leave with Transfer-Encoding, hop-by-hop, and the client get
     * coded bytes as if plain (and the leak guard scan them so). */
    if (!hx->res_no_body && lk_http_te_only_chunked(res) != 0) {
        char sample[80], note[100];
        const struct lk_str *te = lk_http_find_id(res, LK_HDR_TRANSFER_ENCODING);
        hx->upstream_error = "unsupported transfer coding";
        snprintf(note, sizeof(note), " (Transfer-Encoding: %s)",
                 lk_log_sanitize(sample, te->p, te->len, 64));
        broker_error(hx, 502, 1, "answered with a transfer coding other than chunked alone", "",
                     note);
        return;
    }
    lk_http_strip_hop_by_hop(res);

    if (lk_hx_verdict(hx, lk_flt_run_res_headers(&hx->x), "a filter failed on the response head",
                      0) != 0)
        return;
    if (hx->res_no_body) {
        lk_hx_send_response_head(hx, LK_OUT_NONE, 0);
        return;
    }
    /* A Content-Length body is counted off the broker's input, not parsed. */
    if (sp->has_cl && !sp->chunked)
        hx->res_left = sp->content_length;
    if (hx->x.body_changers != 0) {
        /* The body may change size: the head waits for the first output
         * (then chunked) or the end (then an exact Content-Length). */
        lk_http_del_id(res, LK_HDR_CONTENT_LENGTH);
        weaken_etag(res);
        return;
    }
    if (sp->has_cl && !sp->chunked)
        lk_hx_send_response_head(hx, LK_OUT_CL, (size_t)sp->content_length);
    else
        lk_hx_send_response_head(hx, open_framing(hx), 0);
}

static void
on_response_done(struct lk_hx *hx)
{
    struct lk_hconn *hc = hx->hc;

    if (!hx->res_no_body && pump_body(hx, 1) != 0)
        return;
    if (!hx->res_head_sent)
        lk_hx_send_response_head(hx, LK_OUT_CL, 0);
    if (hx->framing == LK_OUT_CHUNKED)
        evbuffer_add(bufferevent_get_output(hc->c->bev), "0\r\n\r\n", 5);
    int reuse = hx->sp.keep_alive && hx->req_done && !hx->upgrade_req && !hx->up_unsure;
    hc->c->action = NULL;
    lk_hx_end(hx, reuse);
}

void
lk_hx_up_read(struct bufferevent *bev, void *arg)
{
    struct lk_hx *hx = arg;
    struct lk_hconn *hc = hx->hc;
    struct evbuffer *in = bufferevent_get_input(bev);
    unsigned seq = hx->seq;

    if (hc->dead)
        return;
    for (int more = 1; more;) {
        if (hx->res_left != 0) {
            /* A Content-Length body goes from buffer to buffer without
             * llhttp (the response parser is this exchange's own, so it need
             * not see those bytes): to the client if nobody filters it, else
             * to the filters, whole chains moved rather than copied. */
            size_t n = evbuffer_get_length(in);
            if (n > hx->res_left)
                n = (size_t)hx->res_left;
            hx->res_bytes += n;
            hx->res_left -= n;
            if (hx->x.body_filters == 0) {
                evbuffer_remove_buffer(in, bufferevent_get_output(hc->c->bev), n);
                hx->res_client_bytes += n;
            } else {
                evbuffer_remove_buffer(in, hx->res_body, n);
            }
            if (hx->res_left == 0) {
                on_response_done(hx);
                return;
            }
            break;
        }
        enum lk_http_event ev = lk_hx_feed(&hx->sp, in);
        switch (ev) {
        case LK_HTTP_NEED_MORE:
            more = 0;
            break;
        case LK_HTTP_HEAD:
            on_response_head(hx);
            if (LK_HX_ENDED(hc, seq) || hx->up == NULL || hx->up->bev != bev)
                return; /* the exchange ended (an error), or a redirect is followed */
            continue;
        case LK_HTTP_DONE:
            if (hx->x.res.status >= 100 && hx->x.res.status < 200) {
                /* an interim response: the final one follows on */
                lk_http_msg_init(&hx->x.res, &hx->x.pool, 0);
                lk_http_parser_next(&hx->sp, &hx->x.res);
                hx->sp.no_body = hx->head_method;
                hx->res_head_seen = 0;
                continue;
            }
            on_response_done(hx);
            return;
        case LK_HTTP_UPGRADE:
            lk_hx_start_tunnel(hx);
            return;
        case LK_HTTP_TOO_LARGE:
            if (hx->sp.too_many_fields) {
                char detail[64];
                hx->upstream_error = "too many response header fields";
                snprintf(detail, sizeof(detail), " more than %d header fields", LK_HTTP_MAX_FIELDS);
                broker_error(hx, 502, 1, "sent a response head of", detail, "");
                return;
            }
            hx->upstream_error = "response head over max_header_bytes";
            lk_hx_reply_error(hx, 502, "the broker's response head is too large", 1);
            return;
        case LK_HTTP_ERROR: {
            char detail[200];
            hx->upstream_error = hx->sp.error;
            /* sp.error is our parser's or llhttp's fixed text, never input */
            snprintf(detail, sizeof(detail), ": %s", hx->sp.error);
            broker_error(hx, 502, 1, "sent a malformed response", detail, "");
            return;
        }
        }
    }
    if (hx->res_head_seen && !hx->res_no_body && pump_body(hx, 0) != 0)
        return;
    if (hx->body_timeouts) {
        struct timeval idle = lk_hx_tv(hc->c->conf->timeout_idle_ms);
        hx->body_timeouts = 0;
        lk_io_set_timeouts(&hx->up->io, &idle, &idle);
    }
    /* A slow client: stop reading the broker until its output drains. */
    if (evbuffer_get_length(bufferevent_get_output(hc->c->bev)) > LK_HWM) {
        lk_io_disable(&hx->up->io, EV_READ);
        bufferevent_setwatermark(hc->c->bev, EV_WRITE, LK_LWM, 0);
    }
}

static void
up_write(struct bufferevent *bev, void *arg)
{
    struct lk_hx *hx = arg;

    if (hx->upload_paused && evbuffer_get_length(bufferevent_get_output(bev)) <= LK_LWM) {
        hx->upload_paused = 0;
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        lk_io_enable(&hx->hc->c->io, EV_READ);
        lk_hc_process(hx->hc);
    }
}

static void
up_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_hx *hx = arg;
    struct lk_hconn *hc = hx->hc;
    char detail[64];

    if (what & BEV_EVENT_TIMEOUT) {
        /* The read timeout also runs while the body uploads; that is not
         * the broker being slow as long as the upload moves. */
        if ((what & BEV_EVENT_READING) && !hx->req_done &&
            hx->req_body_bytes != hx->upload_mark) {
            hx->upload_mark = hx->req_body_bytes;
            lk_io_enable(&hx->up->io, EV_READ);
            return;
        }
        hx->upstream_error = "timed out";
        lk_upstream_error(hc->c->rt, hx->x.broker, LK_UPERR_TIMEOUT);
        snprintf(detail, sizeof(detail), " within %u ms", hc->c->conf->timeout_response_ms);
        broker_error(hx, 504, 1, "did not answer", detail, "");
        return;
    }
    if (what & BEV_EVENT_EOF) {
        /* Anything still buffered is parsed first. */
        unsigned seq = hx->seq;
        lk_hx_up_read(bev, hx);
        if (LK_HX_ENDED(hc, seq) || hc->dead)
            return;
        if (hx->res_head_seen && hx->res_left == 0) {
            enum lk_http_event ev = lk_http_parse_eof(&hx->sp);
            if (ev == LK_HTTP_DONE) {
                hx->sp.keep_alive = 0;
                on_response_done(hx);
                return;
            }
        }
    }
    if (retry_stale(hx))
        return;
    hx->upstream_error = (what & BEV_EVENT_EOF) ? "closed the connection" : lk_err_reset;
    lk_upstream_error(hc->c->rt, hx->x.broker, LK_UPERR_RESET);
    snprintf(detail, sizeof(detail), ": %s %s", hx->upstream_error,
             hx->res_head_seen ? "mid-response" : "before responding");
    broker_error(hx, 502, 1, "failed", detail, "");
}
