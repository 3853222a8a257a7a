/*
 * The HTTP/1.1 protocol module: a reverse proxy over the connection layer.
 * Requests are parsed with llhttp (lk_http_parse.c), routed by SNI, Host and
 * bound address to a broker, passed through the cluster's filter chain and
 * forwarded over a pooled upstream connection; responses come back the
 * same way.  Bodies stream in both directions under watermarks; only a
 * filter that opts in ever holds one.  Exchanges on a connection run one at
 * a time, so pipelined requests are answered in order.
 *
 * This file holds the client connection: its callbacks, timers, reading
 * requests off it one exchange at a time, and stopping.  The rest of the
 * module is cut along its seams (lk_http_xchg.h says which file holds what).
 */
#include <stdio.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lk_age.h"
#include "lk_clock.h"
#include "lk_http.h"
#include "lk_http_xchg.h"
#include "lk_io.h"
#include "lk_log.h"
#include "lk_upstream.h"
#include "lk_worker.h"

static void process_input(struct lk_hconn *hc);

void
lk_hc_deadline(struct lk_hconn *hc, long long at_ms)
{
    hc->deadline_ms = at_ms;
    if (at_ms == 0 || (hc->armed_ms != 0 && hc->armed_ms <= at_ms))
        return;
    long long left = at_ms - lk_now_ms();
    struct timeval tv = lk_hx_tv(left > 0 ? (unsigned)left : 0);
    event_add(hc->timer, &tv);
    hc->armed_ms = at_ms;
}

/* Feeds buffered client bytes to the request parser as far as the current
 * exchange allows: the head, then (once the upstream is ready) the body.
 * Pipelined requests wait in the input buffer until their turn. */
void
lk_hc_process(struct lk_hconn *hc)
{
    hc->in_process++;
    process_input(hc);
    hc->in_process--;
    if (hc->read_full && !hc->dead && !hc->tunnel && !hc->out_full &&
        (hc->x == NULL || !hc->x->upload_paused) &&
        evbuffer_get_length(bufferevent_get_input(hc->c->bev)) <= LK_CLIENT_READ_MAX / 2) {
        hc->read_full = 0;
        lk_io_enable(&hc->c->io, EV_READ);
    }
}

static void
process_input(struct lk_hconn *hc)
{
    struct lk_conn *c = hc->c;
    struct evbuffer *in = bufferevent_get_input(c->bev);

    for (;;) {
        if (hc->tunnel || hc->dead)
            return;
        struct lk_hx *hx = hc->x;
        if (hx == NULL) {
            if (evbuffer_get_length(in) == 0) {
                /* Idle: the parser's field scratch goes until the next
                 * request (it grows back on its first field); if the
                 * client stays quiet, everything else but the socket
                 * (timer_cb parks the connection). */
                unsigned idle = hc->fresh && hc->seq == 0 ? c->conf->timeout_client_header_ms
                                                          : c->conf->timeout_idle_ms;
                unsigned wait = idle < LK_PARK_AFTER_MS ? idle : LK_PARK_AFTER_MS;
                hc->idle_rest_ms = idle - wait;
                c->action = "waiting for a request";
                lk_hc_deadline(hc, lk_now_ms() + wait);
                lk_http_parser_free(&hc->rp);
                return;
            }
            /* A pipelined request waits while the client is not reading
             * its answers (nginx and HAProxy do the same): past LK_HWM in
             * its output, reading stops and client_write starts the next
             * exchange once the output is under LK_LWM.  Without this, a
             * client that pipelines small requests (421s, or proxied
             * answers that come whole in one broker read) and reads
             * nothing would have its answers pile up without bound.  No
             * deadline meanwhile: the write timeout times the client. */
            if (evbuffer_get_length(bufferevent_get_output(c->bev)) > LK_HWM) {
                hc->out_full = 1;
                hc->deadline_ms = 0;
                c->action = "waiting for the client to read its answers";
                lk_io_disable(&c->io, EV_READ);
                bufferevent_setwatermark(c->bev, EV_WRITE, LK_LWM, 0);
                return;
            }
            /* A request begins: the boundary where the connection moves
             * to the newest config, should a reload have come. */
            int moved = lk_conn_renew(c);
            if (moved < 0) {
                lk_log(LK_INFO, c, "a reload removed its listener; closing");
                hc->dead = 1;
                lk_conn_close_after_flush(c); /* the answers made before it still go out */
                return;
            }
            if (moved > 0) {
                struct timeval idle = lk_hx_tv(c->conf->timeout_idle_ms);
                hc->rp.max_head = c->conf->max_header_bytes;
                lk_io_set_timeouts(&c->io, NULL, &idle);
            }
            hx = hc->x = lk_hx_new(hc);
            c->action = "reading the request head";
            /* timeout.client_header runs from here, but the timer is only
             * set if the head does not come whole (below) */
            hc->deadline_ms = 0;
        }
        if (hx->req_done || hx->waiting_upstream || hx->upload_paused)
            return;
        if (hx->req_head_done && hx->up == NULL && !hx->following)
            return;

        unsigned seq = hx->seq;
        enum lk_http_event ev = lk_hx_feed(&hc->rp, in);
        switch (ev) {
        case LK_HTTP_NEED_MORE:
            if (!hx->req_head_done && hc->deadline_ms == 0)
                lk_hc_deadline(hc, hx->start_us / 1000 + c->conf->timeout_client_header_ms);
            if (hc->client_eof) {
                lk_log(LK_INFO, c, "client closed before the end of the request body");
                hx->req_done = 1;
                lk_hx_reply_error(hx, 400, "the request body ended early", 1);
                return;
            }
            if (hx->following && hx->replay_overflow) {
                lk_hx_give_back_redirect(hx);
                break;
            }
            /* Upload backpressure: a slow broker stops us reading the client. */
            if (hx->up != NULL && !hx->waiting_upstream && !hx->following &&
                evbuffer_get_length(bufferevent_get_output(hx->up->bev)) > LK_HWM) {
                hx->upload_paused = 1;
                lk_io_disable(&c->io, EV_READ);
                bufferevent_setwatermark(hx->up->bev, EV_WRITE, LK_LWM, 0);
            }
            return;
        case LK_HTTP_HEAD:
            lk_hx_on_request_head(hx);
            break;
        case LK_HTTP_DONE:
            lk_hx_on_request_done(hx);
            break;
        case LK_HTTP_UPGRADE:
            /* What follows the head belongs to the tunnel, if the broker
             * agrees (101); otherwise parsing resumes after the response. */
            lk_hx_on_request_done(hx);
            break;
        case LK_HTTP_TOO_LARGE:
            if (hc->rp.too_many_fields)
                lk_log(LK_INFO, c, "request head of more than %d header fields",
                       LK_HTTP_MAX_FIELDS);
            else
                lk_log(LK_INFO, c, "request head over max_header_bytes (%zu)",
                       c->conf->max_header_bytes);
            hx->req_done = 1;
            lk_hx_reply_error(hx, 431,
                              hc->rp.too_many_fields ? "too many request header fields"
                                                     : "request header fields too large",
                              1);
            return;
        case LK_HTTP_ERROR: {
            char reason[200], sample[80], raw[64];
            size_t n = evbuffer_copyout(in, raw, sizeof(raw));
            snprintf(reason, sizeof(reason), "malformed request: %s", hc->rp.error);
            lk_log(LK_INFO, c, "%s, near \"%s\"", reason,
                   lk_log_sanitize(sample, raw, n == (size_t)-1 ? 0 : n, 64));
            hx->req_done = 1;
            /* HTTP/1.2, 3.0 and the like: llhttp knows only 0.9 to 2.0 */
            lk_hx_reply_error(hx, llhttp_get_errno(&hc->rp.ll) == HPE_INVALID_VERSION ? 505 : 400,
                        reason, 1);
            return;
        }
        }
        (void)seq;
    }
}

/* Client connection callbacks ---------------------------------------------------- */

/* The connection closes with an exchange under way: one whose request head
 * was read still gets its line, status 499 unless its response head had gone
 * out (then the status sent), its bytes to the client less what the socket
 * never took, and why it was cut. */
static void
end_cut(struct lk_hconn *hc, const char *why)
{
    struct lk_hx *hx = hc->x;

    if (hx == NULL)
        return;
    hc->x = NULL;
    if (hx->req_head_done) {
        struct bufferevent *bev = hc->c->io.bev; /* c->bev is gone once lk_conn_close began */
        size_t unsent = bev != NULL ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
        if (!hx->res_head_sent)
            hx->status = 499;
        hx->res_client_bytes = hx->res_client_bytes > unsent ? hx->res_client_bytes - unsent : 0;
        lk_hx_log_cut(hx, why);
    }
    lk_hx_free(hx);
}

static void
client_read(struct bufferevent *bev, void *arg)
{
    struct lk_hconn *hc = arg;

    lk_hc_process(hc);
    /* Input the exchange cannot take yet (waiting for a broker, pipelined
     * requests) stops reading at LK_CLIENT_READ_MAX; lk_hc_process() reads on
     * once it has taken some. */
    if (!hc->dead && !hc->tunnel &&
        evbuffer_get_length(bufferevent_get_input(bev)) > LK_CLIENT_READ_MAX) {
        lk_io_disable(&hc->c->io, EV_READ);
        hc->read_full = 1;
    }
}

static void
client_write(struct bufferevent *bev, void *arg)
{
    struct lk_hconn *hc = arg;
    struct lk_hx *hx = hc->x;

    /* The client read its answers: the pipelined requests go on. */
    if (hc->out_full) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) > LK_LWM)
            return;
        hc->out_full = 0;
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        if (!hc->read_full)
            lk_io_enable(&hc->c->io, EV_READ);
        lk_hc_process(hc);
        return;
    }
    /* The client drained its backlog: let the broker's bytes flow again. */
    if (hx != NULL && hx->up != NULL && !hx->waiting_upstream) {
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        lk_io_enable(&hx->up->io, EV_READ);
        if (evbuffer_get_length(bufferevent_get_input(hx->up->bev)) != 0)
            lk_hx_up_read(hx->up->bev, hx);
    }
}

static void
client_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_hconn *hc = arg;
    struct lk_hx *hx = hc->x;

    if ((what & BEV_EVENT_EOF) && hx != NULL && hx->req_head_done && !(what & BEV_EVENT_ERROR)) {
        /* The client finished sending (a half-close, as nc and scripts do):
         * answer it, then close.  A body still short of its end never
         * completes; lk_hc_process() finds that once the input runs dry. */
        hc->client_eof = 1;
        if (!hx->req_done)
            lk_hc_process(hc);
        return;
    }
    if (lk_io_clean_eof(what) && evbuffer_get_length(bufferevent_get_output(bev)) != 0) {
        /* Between exchanges, or in a head that will not complete: the
         * answers already made (the last may have completed in this very
         * loop iteration, its bytes still queued) go out before the close. */
        end_cut(hc, "client closed");
        hc->dead = 1;
        lk_conn_close_after_flush(hc->c);
        return;
    }
    if (what & BEV_EVENT_ERROR)
        lk_log(LK_DEBUG, hc->c, "client connection error");
    else if (what & BEV_EVENT_TIMEOUT)
        lk_log(LK_INFO, hc->c, "client stopped reading; closing");
    if (hx != NULL && hx->req_head_done && !hx->res_head_sent)
        lk_log(LK_INFO, hc->c, "client went away before the response");
    end_cut(hc, (what & BEV_EVENT_TIMEOUT) ? "client timeout" : "client closed");
    lk_conn_close(hc->c);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_hconn *hc = arg;
    struct lk_hx *hx = hc->x;

    hc->armed_ms = 0;
    if (hc->dead || hc->deadline_ms == 0)
        return; /* a close is on its way, or nothing is timed now */
    long long left = hc->deadline_ms - lk_now_ms();
    if (left > 0) { /* set before the deadline moved on */
        struct timeval tv = lk_hx_tv((unsigned)left);
        event_add(hc->timer, &tv);
        hc->armed_ms = hc->deadline_ms;
        return;
    }
    hc->deadline_ms = 0;
    if (hx == NULL) { /* keep-alive idle */
        if (hc->idle_rest_ms != 0) {
            struct timeval rest = lk_hx_tv(hc->idle_rest_ms);
            hc->idle_rest_ms = 0;
            lk_conn_park(hc->c, &rest);
            return;
        }
        hc->dead = 1;
        lk_conn_close_after_flush(hc->c); /* a slow client may still be reading its answer */
        return;
    }
    lk_log(LK_INFO, hc->c, "request head not received within %u ms",
           hc->c->conf->timeout_client_header_ms);
    hx->req_done = 1;
    lk_hx_reply_error(hx, 408, "request head timed out", 1);
}

static void
hconn_cleanup(void *arg)
{
    struct lk_hconn *hc = arg;
    const struct lk_conn *c = hc->c;

    /* Closed with an exchange under way, not by the client (client_event
     * logged those): the drain's deadline, max_connection_age.grace, or
     * lookout stopping. */
    end_cut(hc, c->w->draining ? "drain_timeout"
                : c->aged      ? "max_connection_age.grace"
                               : "connection closed");
    lk_upstream_free(hc->tunnel_up);
    hc->tunnel_up = NULL;
    if (hc->timer != NULL)
        event_del(hc->timer); /* pool memory */
    /* emptied for the thread's next connection (lk_hx_new made them) */
    if (hc->res_body != NULL) {
        lk_evbuffer_put(hc->res_body);
        lk_evbuffer_put(hc->res_out);
    }
    lk_http_parser_free(&hc->rp);
}

static void
start(struct lk_conn *c)
{
    struct lk_hconn *hc = lk_palloc(&c->pool, sizeof(*hc));
    struct timeval idle = lk_hx_tv(c->conf->timeout_idle_ms);

    hc->c = c;
    hc->fresh = !c->io.unparking;
    c->proto = hc;
    lk_http_parser_init(&hc->rp, 1, c->conf->max_header_bytes);
    /* a closed connection's, if the thread kept some; else lk_hx_new makes them */
    if ((hc->res_out = lk_evbuffer_spare()) != NULL)
        hc->res_body = lk_evbuffer_get();
    /* The timer in the pool, like hc: no malloc and free of its own per
     * connection. */
    hc->timer = lk_pnalloc(&c->pool, sizeof(struct event));
    evtimer_assign(hc->timer, c->w->base, timer_cb, hc);
    lk_pool_cleanup_add(&c->pool, hconn_cleanup, hc);
    bufferevent_setcb(c->bev, client_read, client_write, client_event, hc);
    lk_io_set_timeouts(&c->io, NULL, &idle);
    lk_io_enable(&c->io, EV_READ | EV_WRITE);
    lk_hc_process(hc);
}

/* Stopping, or past max_connection_age: an idle connection closes once
 * its last response is out (a slow client may still be reading it), or
 * past its age once it has been idle LK_AGE_IDLE_MS; one
 * with an exchange under way finishes it, its response saying Connection:
 * close unless its head has gone already, and then closes (a WebSocket
 * tunnel, which never finishes, at drain_timeout or
 * max_connection_age.grace). */
static void
drain(struct lk_conn *c)
{
    struct lk_hconn *hc = c->proto;

    if (hc->dead)
        return;
    hc->closing = 1;
    /* Requests waiting for the client to read (out_full): the next one
     * is answered, with Connection: close, once it has. */
    if (hc->x != NULL || hc->tunnel || hc->out_full)
        return;
    if (c->aged && !c->w->draining) {
        /* Idle past its age: its next request, if it comes soon, is
         * answered with Connection: close; if not, it closes. */
        hc->idle_rest_ms = 0; /* no parking: timer_cb closes */
        lk_hc_deadline(hc, lk_now_ms() + LK_AGE_IDLE_MS);
        return;
    }
    hc->dead = 1;
    lk_conn_close_after_flush(c);
}

const struct lk_proto_ops lk_proto_http = {
    .proto = LK_PROTO_HTTP,
    .name = "http",
    .start = start,
    .drain = drain,
};
