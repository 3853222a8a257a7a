/*
 * The HTTP/1.1 protocol module: a reverse proxy over the connection layer.
 * Requests are parsed with llhttp (lk_http_msg.c), routed by SNI, Host and
 * bound address to a broker, passed through the cluster's filter chain and
 * forwarded over a pooled upstream connection; responses come back the
 * same way.  Bodies stream in both directions under watermarks; only a
 * filter that opts in ever holds one.  Exchanges on a connection run one at
 * a time, so pipelined requests are answered in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>

#include "lk_broker.h"
#include "lk_conn.h"
#include "lk_http_msg.h"
#include "lk_io.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_route.h"
#include "lk_stats.h"
#include "lk_upstream.h"
#include "lk_worker.h"
#include "lk_xchg.h"
#include "lk_xrec.h"

/* Buffer high and low watermarks: past HWM bytes waiting on the slow side,
 * the fast side stops reading until the queue drains to LWM. */
#define LK_HWM (256 * 1024)
#define LK_LWM (64 * 1024)
/* Read-ahead of a client's input (pipelined requests, body not yet sent).
 * Enforced by hand (client_read), not with a read watermark: libevent runs
 * its watermark check, and re-arms the read event, on every drain. */
#define LK_CLIENT_READ_MAX (64 * 1024)

enum framing { OUT_NONE = 0, OUT_CL, OUT_CHUNKED, OUT_CLOSE };

struct hconn;

struct hx {
    struct lk_xchg x; /* first: what filters see */
    struct hconn *hc;
    struct lk_upstream *up;
    struct lk_http_parser sp; /* response parser */
    int sp_ready;

    /* request side */
    int req_head_done, req_done;
    int req_has_body, req_chunked;
    int expect_continue, upgrade_req, head_method;
    int waiting_upstream; /* connecting: the request parser stays paused */
    int upload_paused;
    uint64_t req_body_bytes, upload_mark;

    /* response side */
    int res_head_seen, res_head_sent, res_no_body;
    enum framing framing;
    uint64_t res_left;         /* Content-Length body bytes still to move untouched */
    struct evbuffer *res_body; /* decoded body from the parser (the hconn's) */
    struct evbuffer *res_out;  /* filter output, not yet framed (the hconn's) */
    uint64_t res_bytes;        /* body bytes from the broker (de-chunked) */
    uint64_t res_client_bytes; /* body bytes to the client (before chunking) */
    int status;
    int retried;
    int any_broker;      /* came in on a service address: any broker will do */
    unsigned connects;   /* brokers tried for this exchange */
    long long start_us;
    long long sent_us, head_us; /* the request head sent, the response head come (last hop) */
    const char *upstream_error;
    unsigned seq; /* hconn.seq when this exchange began */

    /* redirects = follow */
    struct evbuffer *replay;   /* the request body, kept to replay on the next hop */
    int replay_overflow;       /* over follow.replay_bytes: no following */
    int following;             /* a redirect is being followed: the old upstream is gone */
    int sent_100;              /* we released an Expect: 100-continue client ourselves */
    unsigned hops;
    struct hop *seen;          /* where each hop went, for loop detection */
    struct lk_http_msg redirect; /* the last redirect followed, in case we must give it back */
};

struct hop {
    const struct lk_broker *broker;
    struct lk_str target;
};

struct hconn {
    struct lk_conn *c;
    struct lk_http_parser rp; /* request parser, for the life of the connection */
    struct hx *x;
    struct event *timer; /* idle or header-read timeout */
    int closing;         /* close when the current response is out */
    int client_eof;
    int tunnel;
    int dead;       /* a close is scheduled: do nothing more */
    int in_process; /* inside process(): it picks up the next request itself */
    int read_full;  /* reading stopped: the input holds LK_CLIENT_READ_MAX */
    unsigned seq;   /* exchanges begun */
    unsigned idle_rest_ms; /* keep-alive: how much of timeout.idle is left once the timer parks */
    int fresh;             /* a new connection (not one unparked): its first request comes
                            * within timeout.client_header, not timeout.idle (as nginx) */
    struct lk_upstream *tunnel_up;
    /* The body buffers of the exchange under way, kept from one exchange to
     * the next rather than made anew for each. */
    struct evbuffer *res_body, *res_out;
};

/* Whether the exchange that began as number seq is over (freed). */
#define ENDED(hc, seq) ((hc)->x == NULL || (hc)->seq != (seq))

static void process(struct hconn *hc);
static void up_read(struct bufferevent *bev, void *arg);
static void up_write(struct bufferevent *bev, void *arg);
static void up_event(struct bufferevent *bev, short what, void *arg);
static void client_read(struct bufferevent *bev, void *arg);
static void client_write(struct bufferevent *bev, void *arg);
static void client_event(struct bufferevent *bev, short what, void *arg);

static struct timeval
ms_tv(unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Appends a chunk-size line for len bytes. */
static void
add_chunk_size(struct evbuffer *out, size_t len)
{
    char line[24];
    size_t n = lk_fmt_u64(line, len, 1);
    line[n++] = '\r';
    line[n++] = '\n';
    evbuffer_add(out, line, n);
}

/* v in decimal in buf (24 bytes), for a Content-Length value: lk_http_set
 * and lk_http_add copy it into the pool. */
static struct lk_str
num_str(char *buf, uint64_t v)
{
    return lk_str_make(buf, lk_fmt_u64(buf, v, 0));
}

/* Runs the parser over buf until an event; drains what it used.  With the
 * input used up it still steps a parser that stopped at a completed head, so
 * that a bodyless message completes. */
static enum lk_http_event
feed(struct lk_http_parser *p, struct evbuffer *buf)
{
    for (;;) {
        struct evbuffer_iovec vec = {NULL, 0};
        size_t used;

        if (evbuffer_peek(buf, -1, NULL, &vec, 1) < 1)
            vec.iov_len = 0;
        if (vec.iov_len == 0 && !lk_http_parser_can_step(p))
            return LK_HTTP_NEED_MORE;
        enum lk_http_event ev = lk_http_parse(p, vec.iov_base, vec.iov_len, &used);
        evbuffer_drain(buf, used);
        if (ev != LK_HTTP_NEED_MORE || vec.iov_len == 0)
            return ev;
    }
}

/* Exchanges ------------------------------------------------------------------ */

static void
req_body_cb(void *arg, const char *at, size_t len)
{
    struct hx *hx = arg;

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
    if (hx->req_chunked)
        add_chunk_size(out, len);
    evbuffer_add(out, at, len);
    if (hx->req_chunked)
        evbuffer_add(out, "\r\n", 2);
}

static void
res_body_cb(void *arg, const char *at, size_t len)
{
    struct hx *hx = arg;
    evbuffer_add(hx->res_body, at, len);
    hx->res_bytes += len;
}

static struct hx *
hx_new(struct hconn *hc)
{
    struct lk_pool pool;
    struct lk_conn *c = hc->c;

    lk_pool_init(&pool);
    struct hx *hx = lk_palloc(&pool, sizeof(*hx));
    hx->x.pool = pool;
    hx->hc = hc;
    hx->x.conn = c;
    hx->x.conf = c->conf;
    hx->x.client_tls = c->tls;
    hx->start_us = lk_now_us();
    lk_http_msg_init(&hx->x.req, &hx->x.pool, 1);
    lk_http_msg_init(&hx->x.res, &hx->x.pool, 0);
    if (hc->res_body == NULL) {
        hc->res_body = evbuffer_new();
        hc->res_out = evbuffer_new();
    }
    hx->res_body = hc->res_body;
    hx->res_out = hc->res_out;
    hx->seq = ++hc->seq;
    lk_http_parser_next(&hc->rp, &hx->x.req);
    hc->rp.on_body = req_body_cb;
    hc->rp.body_arg = hx;
    return hx;
}

static void
hx_free(struct hx *hx)
{
    struct lk_pool pool;

    if (hx->x.cluster != NULL)
        lk_flt_detach_all(&hx->x);
    lk_upstream_free(hx->up);
    hx->up = NULL;
    if (hx->sp_ready)
        lk_http_parser_free(&hx->sp);
    /* left empty for the next exchange */
    evbuffer_drain(hx->res_body, evbuffer_get_length(hx->res_body));
    evbuffer_drain(hx->res_out, evbuffer_get_length(hx->res_out));
    if (hx->replay != NULL)
        evbuffer_free(hx->replay);
    if (hx->hc->rp.body_arg == hx) {
        hx->hc->rp.on_body = NULL;
        hx->hc->rp.body_arg = NULL;
    }
    pool = hx->x.pool; /* hx itself lives in the pool */
    lk_pool_free(&pool);
}

/* The exchange's record, for the metrics and the access log. */
static void
access_log(struct hx *hx)
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
    lk_xrec_take(&r, x);
    r.dur_us = lk_now_us() - hx->start_us;
    r.upstream_us = hx->sent_us != 0 && hx->head_us >= hx->sent_us ? hx->head_us - hx->sent_us : -1;
    lk_xrec_done(&r);
}

/* Ends the current exchange and carries on with the connection: the next
 * pipelined request, an idle wait, or a close once the output drains. */
static void
hx_end(struct hx *hx, int reuse_upstream)
{
    struct hconn *hc = hx->hc;

    access_log(hx);
    if (reuse_upstream && hx->up != NULL && !hc->dead) {
        lk_upstream_release(hx->up);
        hx->up = NULL;
    }
    /* Unless the request was read to its end, the rest of it cannot be told
     * from the next one. */
    if (!hx->req_done || !hc->rp.msg_done)
        hc->closing = 1;
    if (hx->upgrade_req && !hc->tunnel && llhttp_get_errno(&hc->rp.ll) == HPE_PAUSED_UPGRADE)
        llhttp_resume_after_upgrade(&hc->rp.ll); /* the broker said no: still HTTP */
    hc->x = NULL;
    hx_free(hx);
    if (hc->closing || hc->client_eof) {
        hc->dead = 1;
        lk_conn_close_after_flush(hc->c);
        return;
    }
    lk_io_enable(&hc->c->io, EV_READ);
    if (!hc->in_process)
        process(hc);
}

/* Answers with an error of our own: {"reason": ...}.  Once part of the
 * response has gone out there is nothing left to say, and the connection
 * just closes. */
static void
reply_error(struct hx *hx, int status, const char *reason, int close)
{
    struct hconn *hc = hx->hc;
    struct evbuffer *out = bufferevent_get_output(hc->c->bev);

    if (status < 100 || status > 599) /* a filter that replied without a status */
        status = 502;
    if (reason == NULL)
        reason = lk_http_reason(status);
    if (hx->res_head_sent) {
        lk_log(LK_WARN, hc->c, "%s after the response began; closing", reason);
        hc->x = NULL;
        access_log(hx);
        hx_free(hx);
        hc->dead = 1;
        lk_conn_close_later(hc->c);
        return;
    }
    /* A bodyless request whose end the parser has not reported yet is
     * complete all the same: step the parser so the connection can go on. */
    if (hx->req_head_done && !hx->req_has_body && !hc->rp.msg_done) {
        size_t used;
        if (lk_http_parse(&hc->rp, "", 0, &used) == LK_HTTP_DONE)
            hx->req_done = 1;
    }
    json_t *j = json_pack("{s:s}", "reason", reason);
    if (j == NULL) /* not UTF-8: say what kind of failure it was */
        j = json_pack("{s:s}", "reason", lk_http_reason(status));
    char *body = json_dumps(j, JSON_COMPACT);
    if (close || !hx->req_done || !hc->rp.msg_done)
        hc->closing = 1;
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\n%s\r\n%s",
                        status, lk_http_reason(status), strlen(body),
                        hc->closing ? "Connection: close\r\n" : "", body);
    hx->status = status;
    hx->res_head_sent = 1;
    hx->res_client_bytes = strlen(body);
    free(body);
    json_decref(j);
    hx->req_done = hx->req_done || !hx->req_has_body;
    hx_end(hx, 0);
}

/* Upstream side -------------------------------------------------------------- */

static void up_ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg);

static void
get_upstream(struct hx *hx)
{
    struct lk_conn *c = hx->hc->c;

    hx->waiting_upstream = 1;
    c->action = "connecting to the broker";
    hx->up = lk_upstream_get(c->w, c->rt, hx->x.broker, LK_SCHEME_HTTP, c->tls, up_ready, hx);
    if (hx->up == NULL) {
        char why[200];
        hx->waiting_upstream = 0;
        /* The load rules keep a broker without an internal http or https
         * address off every HTTP route; this is the last guard, never a
         * dial to one of its binary ports. */
        snprintf(why, sizeof(why), "cannot create a connection to broker %s%s", hx->x.broker->name,
                 lk_broker_upstream(hx->x.broker, LK_SCHEME_HTTP, c->tls) == NULL
                     ? ": it has no internal http or https address"
                     : "");
        lk_log(LK_WARN, c, "%s", why);
        reply_error(hx, 502, why, 0);
    }
}

static void
send_request_head(struct hx *hx)
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
        lk_http_set_id(req, LK_HDR_CONTENT_LENGTH, num_str(num, evbuffer_get_length(hx->replay)));
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
retry_stale(struct hx *hx)
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
    get_upstream(hx);
    return 1;
}

static void
up_ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg)
{
    struct hx *hx = arg;
    struct hconn *hc = hx->hc;
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
                get_upstream(hx);
                return;
            }
        }
        snprintf(reason, sizeof(reason), "broker %s unreachable: %s", hx->x.broker->name,
                 u->error != NULL ? u->error : "connect failed");
        lk_upstream_free(hx->up);
        hx->up = NULL;
        reply_error(hx, 502, reason, 0);
        return;
    }
    lk_http_parser_init(&hx->sp, 0, conf->max_header_bytes);
    hx->sp_ready = 1;
    lk_http_parser_next(&hx->sp, &hx->x.res);
    hx->sp.no_body = hx->head_method;
    hx->sp.on_body = res_body_cb;
    hx->sp.body_arg = hx;

    struct timeval rt = ms_tv(conf->timeout_response_ms);
    bufferevent_setcb(u->bev, up_read, up_write, up_event, hx);
    lk_io_set_timeouts(&u->io, &rt, &rt);
    lk_io_enable(&u->io, EV_READ | EV_WRITE);
    send_request_head(hx);
    hx->following = 0;
    hc->c->action = hx->req_done ? "waiting for the broker's response" : "sending the request body";
    /* the body (if any) flows now */
    process(hc);
}

/* Response framing towards the client ------------------------------------- */

static void
weaken_etag(struct lk_http_msg *m)
{
    struct lk_str *etag = lk_http_find_id(m, LK_HDR_ETAG);
    if (etag != NULL && !(etag->len >= 2 && etag->p[0] == 'W' && etag->p[1] == '/'))
        *etag = lk_pstr_concat(m->pool, LK_STRLIT("W/"), *etag);
}

static void
send_response_head(struct hx *hx, enum framing framing, size_t length)
{
    struct hconn *hc = hx->hc;
    struct lk_http_msg *res = &hx->x.res;

    hx->framing = framing;
    /* The rest of an unread request body cannot be told from the next
     * request: say now that the connection will close. */
    if (!hx->req_done)
        hc->closing = 1;
    if (framing == OUT_CL) {
        char num[24];
        lk_http_set_id(res, LK_HDR_CONTENT_LENGTH, num_str(num, length));
    } else if (framing == OUT_CHUNKED) {
        lk_http_del_id(res, LK_HDR_CONTENT_LENGTH);
        lk_http_add_id(res, LK_HDR_TRANSFER_ENCODING, LK_STRLIT("chunked"));
    } else if (framing == OUT_CLOSE) {
        lk_http_del_id(res, LK_HDR_CONTENT_LENGTH);
        hc->closing = 1;
    }
    if (hc->closing)
        lk_http_add_id(res, LK_HDR_CONNECTION, LK_STRLIT("close"));
    else if (hx->x.req.http_minor == 0)
        lk_http_add_id(res, LK_HDR_CONNECTION, LK_STRLIT("keep-alive"));
    res->http_minor = 1;
    lk_http_write_head(res, bufferevent_get_output(hc->c->bev));
    hx->res_head_sent = 1;
}

/* The framing of a response whose length is not known up front. */
static enum framing
open_framing(struct hx *hx)
{
    return hx->x.req.http_minor >= 1 ? OUT_CHUNKED : OUT_CLOSE;
}

static void
write_body(struct hx *hx, struct evbuffer *data)
{
    struct evbuffer *out = bufferevent_get_output(hx->hc->c->bev);
    size_t len = evbuffer_get_length(data);

    if (len == 0)
        return;
    hx->res_client_bytes += len;
    if (hx->framing == OUT_CHUNKED)
        add_chunk_size(out, len);
    evbuffer_add_buffer(out, data);
    if (hx->framing == OUT_CHUNKED)
        evbuffer_add(out, "\r\n", 2);
}

/* Moves decoded body bytes through the filters to the client.  -1 if a
 * filter failed (the exchange is over). */
static int
pump_body(struct hx *hx, int last)
{
    if (hx->x.body_filters != 0) {
        enum lk_flt_verdict v = lk_flt_run_res_body(&hx->x, hx->res_body, hx->res_out, last);
        if (v != LK_FLT_CONTINUE) {
            if (v == LK_FLT_REPLY && !hx->res_head_sent)
                reply_error(hx, hx->x.reply_status, hx->x.reply_reason, 1);
            else
                reply_error(hx, 502, "a filter failed on the response body", 1);
            return -1;
        }
        if (!hx->res_head_sent && hx->x.body_changers != 0) {
            if (last)
                send_response_head(hx, OUT_CL, evbuffer_get_length(hx->res_out));
            else if (evbuffer_get_length(hx->res_out) != 0)
                send_response_head(hx, open_framing(hx), 0);
        }
    } else {
        evbuffer_add_buffer(hx->res_out, hx->res_body);
    }
    if (hx->res_head_sent)
        write_body(hx, hx->res_out);
    return 0;
}

static void
start_hop(struct hx *hx)
{
    hx->hc->c->action = "following a redirect";
    get_upstream(hx);
}

/*
 * redirects = follow: a 307/308 to a mapped broker is followed here rather
 * than shown to the client.  The old upstream goes (its body unread), and
 * the request is sent again, body replayed, once the client has sent all of
 * it.  Returns 1 when the redirect is being followed (or the exchange ended
 * with 508), 0 to let the response through.
 */
static int
follow_redirect(struct hx *hx)
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
            snprintf(reason, sizeof(reason), "redirect loop: %s sent the request back to %s",
                     x->broker->name, b->name);
            lk_log(LK_WARN, hx->hc->c, "%s", reason);
            reply_error(hx, 508, reason, 0);
            return 1;
        }
    if (hx->hops >= cl->follow_max_hops) {
        snprintf(reason, sizeof(reason), "too many redirects (more than %u hops)",
                 cl->follow_max_hops);
        lk_log(LK_WARN, hx->hc->c, "%s", reason);
        reply_error(hx, 508, reason, 0);
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
        start_hop(hx);
        return 1;
    }
    /* The broker answered before the body was in (Jetty does, PR 25919):
     * take the rest of it from the client into the replay buffer. */
    if (hx->expect_continue && !hx->sent_100 && hx->req_body_bytes == 0) {
        evbuffer_add(bufferevent_get_output(hx->hc->c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
        hx->sent_100 = 1;
    }
    hx->hc->c->action = "reading the request body to replay it";
    process(hx->hc);
    return 1;
}

/* The body proved too big to replay after a redirect was taken: the client
 * gets that redirect (rewritten) after all, and the connection closes since
 * the rest of the body stays unread. */
static void
give_back_redirect(struct hx *hx)
{
    hx->following = 0;
    hx->x.res = hx->redirect;
    hx->status = hx->x.res.status;
    hx->res_head_seen = 1;
    hx->hc->closing = 1;
    lk_http_strip_hop_by_hop(&hx->x.res);
    enum lk_flt_verdict v = lk_flt_run_res_headers(&hx->x);
    if (v != LK_FLT_CONTINUE) {
        if (v == LK_FLT_REPLY)
            reply_error(hx, hx->x.reply_status, hx->x.reply_reason, 1);
        else
            reply_error(hx, 502, "a filter failed on the response head", 1);
        return;
    }
    lk_http_del_id(&hx->x.res, LK_HDR_CONTENT_LENGTH);
    send_response_head(hx, OUT_CL, 0);
    hx_end(hx, 0);
}

static void
on_response_head(struct hx *hx)
{
    struct hconn *hc = hx->hc;
    struct lk_http_msg *res = &hx->x.res;
    struct lk_http_parser *sp = &hx->sp;

    hx->status = res->status;
    hx->res_head_seen = 1;
    hx->head_us = lk_now_us();
    hc->c->action = "reading the broker's response";
    /* timeout.response bounds the wait for the head; the body may pause
     * for up to timeout.idle between reads. */
    struct timeval idle = ms_tv(hc->c->conf->timeout_idle_ms);
    lk_io_set_timeouts(&hx->up->io, &idle, &idle);
    if (res->status == 101) {
        if (!hx->upgrade_req) {
            reply_error(hx, 502, "the broker switched protocols unasked", 1);
            return;
        }
        return; /* the UPGRADE event follows and starts the tunnel */
    }
    if (res->status >= 100 && res->status < 200) {
        /* Interim responses go to HTTP/1.1 clients as they are; 100
         * Continue releases a client that waits on Expect. */
        if (hx->x.req.http_minor >= 1) {
            lk_http_strip_hop_by_hop(res);
            lk_http_write_head(res, bufferevent_get_output(hc->c->bev));
        }
        return;
    }

    if (follow_redirect(hx))
        return;
    lk_http_strip_hop_by_hop(res);
    hx->res_no_body = hx->head_method || res->status == 204 || res->status == 304;

    enum lk_flt_verdict v = lk_flt_run_res_headers(&hx->x);
    if (v == LK_FLT_REPLY) {
        reply_error(hx, hx->x.reply_status, hx->x.reply_reason, 0);
        return;
    }
    if (v == LK_FLT_ERROR) {
        reply_error(hx, 502, "a filter failed on the response head", 0);
        return;
    }
    if (hx->res_no_body) {
        send_response_head(hx, OUT_NONE, 0);
        return;
    }
    if (hx->x.body_changers != 0) {
        /* The body may change size: the head waits for the first output
         * (then chunked) or the end (then an exact Content-Length). */
        lk_http_del_id(res, LK_HDR_CONTENT_LENGTH);
        weaken_etag(res);
        return;
    }
    if (sp->has_cl && !sp->chunked) {
        send_response_head(hx, OUT_CL, (size_t)sp->content_length);
        if (hx->x.body_filters == 0)
            hx->res_left = sp->content_length;
    } else
        send_response_head(hx, open_framing(hx), 0);
}

static void
on_response_done(struct hx *hx)
{
    struct hconn *hc = hx->hc;

    if (!hx->res_no_body && pump_body(hx, 1) != 0)
        return;
    if (!hx->res_head_sent)
        send_response_head(hx, OUT_CL, 0);
    if (hx->framing == OUT_CHUNKED)
        evbuffer_add(bufferevent_get_output(hc->c->bev), "0\r\n\r\n", 5);
    int reuse = hx->sp.keep_alive && hx->req_done && !hx->upgrade_req;
    hc->c->action = NULL;
    hx_end(hx, reuse);
}

/* Moves bytes both ways once a 101 has switched the connection over. */
static void
tunnel_move(struct lk_io *from, struct lk_io *to)
{
    evbuffer_add_buffer(bufferevent_get_output(to->bev), bufferevent_get_input(from->bev));
    if (evbuffer_get_length(bufferevent_get_output(to->bev)) > LK_HWM) {
        lk_io_disable(from, EV_READ);
        bufferevent_setwatermark(to->bev, EV_WRITE, LK_LWM, 0);
    }
}

static void
tunnel_client_read(struct bufferevent *bev, void *arg)
{
    struct hconn *hc = arg;
    tunnel_move(&hc->c->io, &hc->tunnel_up->io);
}

static void
tunnel_up_read(struct bufferevent *bev, void *arg)
{
    struct hconn *hc = arg;
    tunnel_move(&hc->tunnel_up->io, &hc->c->io);
}

static void
tunnel_client_write(struct bufferevent *bev, void *arg)
{
    struct hconn *hc = arg;
    lk_io_enable(&hc->tunnel_up->io, EV_READ);
}

static void
tunnel_up_write(struct bufferevent *bev, void *arg)
{
    struct hconn *hc = arg;
    lk_io_enable(&hc->c->io, EV_READ);
}

static void
tunnel_client_event(struct bufferevent *bev, short what, void *arg)
{
    struct hconn *hc = arg;
    lk_conn_close(hc->c); /* the pool cleanup frees the upstream side */
}

static void
tunnel_up_event(struct bufferevent *bev, short what, void *arg)
{
    struct hconn *hc = arg;
    tunnel_move(&hc->tunnel_up->io, &hc->c->io);
    lk_upstream_free(hc->tunnel_up);
    hc->tunnel_up = NULL;
    lk_conn_close_after_flush(hc->c);
}

static void
start_tunnel(struct hx *hx)
{
    struct hconn *hc = hx->hc;
    struct lk_conn *c = hc->c;
    struct lk_http_msg *res = &hx->x.res;

    /* Forward the 101 with its Upgrade and Connection fields intact. */
    res->http_minor = 1;
    lk_http_write_head(res, bufferevent_get_output(c->bev));
    hx->res_head_sent = 1;
    hc->tunnel = 1;
    hc->tunnel_up = hx->up;
    hx->up = NULL;
    hx->req_done = 1;
    hc->x = NULL;
    access_log(hx);
    hx_free(hx);
    if (hc->timer != NULL)
        event_del(hc->timer);
    c->action = "tunnelling";
    struct timeval idle = ms_tv(c->conf->timeout_idle_ms);
    bufferevent_setcb(c->bev, tunnel_client_read, tunnel_client_write, tunnel_client_event, hc);
    bufferevent_setcb(hc->tunnel_up->bev, tunnel_up_read, tunnel_up_write, tunnel_up_event, hc);
    lk_io_set_timeouts(&c->io, &idle, NULL);
    lk_io_set_timeouts(&hc->tunnel_up->io, &idle, NULL);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    bufferevent_setwatermark(hc->tunnel_up->bev, EV_READ, 0, 0);
    lk_io_enable(&c->io, EV_READ | EV_WRITE);
    lk_io_enable(&hc->tunnel_up->io, EV_READ | EV_WRITE);
    /* bytes that arrived behind either head already belong to the tunnel */
    tunnel_move(&hc->tunnel_up->io, &c->io);
    tunnel_move(&c->io, &hc->tunnel_up->io);
}

static void
up_read(struct bufferevent *bev, void *arg)
{
    struct hx *hx = arg;
    struct hconn *hc = hx->hc;
    struct evbuffer *in = bufferevent_get_input(bev);
    unsigned seq = hx->seq;

    if (hc->dead)
        return;
    for (int more = 1; more;) {
        if (hx->res_left != 0) {
            /* A Content-Length body nobody filters goes from buffer to buffer
             * without llhttp or a copy (the response parser is this
             * exchange's own, so it need not see those bytes). */
            size_t n = evbuffer_get_length(in);
            if (n > hx->res_left)
                n = (size_t)hx->res_left;
            evbuffer_remove_buffer(in, bufferevent_get_output(hc->c->bev), n);
            hx->res_bytes += n;
            hx->res_client_bytes += n;
            hx->res_left -= n;
            if (hx->res_left == 0) {
                on_response_done(hx);
                return;
            }
            break;
        }
        enum lk_http_event ev = feed(&hx->sp, in);
        switch (ev) {
        case LK_HTTP_NEED_MORE:
            more = 0;
            break;
        case LK_HTTP_HEAD:
            on_response_head(hx);
            if (ENDED(hc, seq) || hx->up == NULL || hx->up->bev != bev)
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
            start_tunnel(hx);
            return;
        case LK_HTTP_TOO_LARGE:
            hx->upstream_error = "response head over max_header_bytes";
            reply_error(hx, 502, "the broker's response head is too large", 1);
            return;
        case LK_HTTP_ERROR: {
            char reason[256];
            hx->upstream_error = hx->sp.error;
            snprintf(reason, sizeof(reason), "malformed response from broker %s: %s",
                     hx->x.broker->name, hx->sp.error);
            lk_log(LK_WARN, hc->c, "%s", reason);
            reply_error(hx, 502, reason, 1);
            return;
        }
        }
    }
    if (hx->res_head_seen && !hx->res_no_body && pump_body(hx, 0) != 0)
        return;
    /* A slow client: stop reading the broker until its output drains. */
    if (evbuffer_get_length(bufferevent_get_output(hc->c->bev)) > LK_HWM) {
        lk_io_disable(&hx->up->io, EV_READ);
        bufferevent_setwatermark(hc->c->bev, EV_WRITE, LK_LWM, 0);
    }
}

static void
up_write(struct bufferevent *bev, void *arg)
{
    struct hx *hx = arg;

    if (hx->upload_paused && evbuffer_get_length(bufferevent_get_output(bev)) <= LK_LWM) {
        hx->upload_paused = 0;
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        lk_io_enable(&hx->hc->c->io, EV_READ);
        process(hx->hc);
    }
}

static void
up_event(struct bufferevent *bev, short what, void *arg)
{
    struct hx *hx = arg;
    struct hconn *hc = hx->hc;
    char reason[256];

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
        snprintf(reason, sizeof(reason), "broker %s did not answer within %u ms",
                 hx->x.broker->name, hc->c->conf->timeout_response_ms);
        lk_log(LK_WARN, hc->c, "%s", reason);
        reply_error(hx, 504, reason, 1);
        return;
    }
    if (what & BEV_EVENT_EOF) {
        /* Anything still buffered is parsed first. */
        unsigned seq = hx->seq;
        up_read(bev, hx);
        if (ENDED(hc, seq) || hc->dead)
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
    snprintf(reason, sizeof(reason), "broker %s %s %s", hx->x.broker->name,
             hx->upstream_error, hx->res_head_seen ? "mid-response" : "before responding");
    lk_log(LK_WARN, hc->c, "%s", reason);
    reply_error(hx, 502, reason, 1);
}

/* Request side ----------------------------------------------------------------- */

static int
add_forwarded(struct hx *hx)
{
    struct lk_http_msg *req = &hx->x.req;
    struct lk_conn *c = hx->hc->c;
    struct lk_str *xff = lk_http_find_id(req, LK_HDR_X_FORWARDED_FOR), *host;
    struct lk_str ip = lk_conn_peer_ip(c);

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
        lk_http_add_id(req, LK_HDR_X_FORWARDED_FOR, ip);
    }
    lk_http_set_id(req, LK_HDR_X_FORWARDED_PROTO, c->tls ? LK_STRLIT("https") : LK_STRLIT("http"));
    /* found after the sets, which move the fields up when they drop one */
    host = lk_http_find_id(req, LK_HDR_HOST);
    if (host != NULL)
        lk_http_set_id(req, LK_HDR_X_FORWARDED_HOST, *host);
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
refuse(struct hx *hx, int status, const char *why)
{
    char target[120];

    lk_log(LK_INFO, hx->hc->c, "refused %d: %s (\"%.*s %s\")", status, why,
           (int)hx->x.req.method.len, hx->x.req.method.p,
           lk_log_sanitize(target, hx->x.req.target.p, hx->x.req.target.len, 80));
    reply_error(hx, status, why, 1);
}

static void
on_request_head(struct hx *hx)
{
    struct hconn *hc = hx->hc;
    struct lk_conn *c = hc->c;
    struct lk_http_msg *req = &hx->x.req;
    struct lk_http_parser *rp = &hc->rp;

    if (hc->timer != NULL)
        event_del(hc->timer);
    hx->req_head_done = 1;
    hx->req_chunked = rp->chunked;
    hx->req_has_body = rp->chunked || (rp->has_cl && rp->content_length > 0);
    hx->head_method = lk_str_eq(req->method, LK_STRLIT("HEAD"));
    if (!rp->keep_alive)
        hc->closing = 1;

    if (lk_str_eq(req->method, LK_STRLIT("CONNECT"))) {
        reply_error(hx, 405, "CONNECT is not supported", 1);
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
        reply_error(hx, 400, "Upgrade: h2c is not supported", 1);
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
        reply_error(hx, 421, "no broker is mapped to this host", 0);
        return;
    }
    if (host == NULL) /* HTTP/1.0: the broker gets what a 1.1 client would send */
        lk_http_add_id(req, LK_HDR_HOST, vhost_authority(&hx->x.pool, vh));
    hx->x.cluster = vh->cluster;
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
            reply_error(hx, 503, none, 0);
        } else if (vh->cluster->zk != NULL)
            reply_error(hx, 503,
                        vh->cluster->zk_read
                            ? "no broker of the cluster is registered in ZooKeeper"
                            : "the cluster's brokers have not been read from ZooKeeper yet",
                        0);
        else
            reply_error(hx, 502, "the cluster has no brokers", 0);
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
        lk_http_add_id(req, LK_HDR_CONTENT_LENGTH, num_str(num, rp->content_length));
    }
    add_forwarded(hx);
    if (vh->cluster->redirects == LK_REDIRECTS_FOLLOW)
        hx->replay = evbuffer_new();

    lk_flt_attach_all(&hx->x);
    enum lk_flt_verdict v = lk_flt_run_req_headers(&hx->x);
    if (v == LK_FLT_REPLY) {
        reply_error(hx, hx->x.reply_status, hx->x.reply_reason, 0);
        return;
    }
    if (v == LK_FLT_ERROR) {
        reply_error(hx, 502, "a filter failed on the request head", 0);
        return;
    }
    get_upstream(hx);
}

static void
on_request_done(struct hx *hx)
{
    hx->req_done = 1;
    if (hx->following) {
        if (hx->replay_overflow)
            give_back_redirect(hx);
        else
            start_hop(hx);
        return;
    }
    if (hx->req_chunked)
        evbuffer_add(bufferevent_get_output(hx->up->bev), "0\r\n\r\n", 5);
    if (!hx->res_head_seen)
        hx->hc->c->action = "waiting for the broker's response";
}

static void process_input(struct hconn *hc);

/* Feeds buffered client bytes to the request parser as far as the current
 * exchange allows: the head, then (once the upstream is ready) the body.
 * Pipelined requests wait in the input buffer until their turn. */
static void
process(struct hconn *hc)
{
    hc->in_process++;
    process_input(hc);
    hc->in_process--;
    if (hc->read_full && !hc->dead && !hc->tunnel && (hc->x == NULL || !hc->x->upload_paused) &&
        evbuffer_get_length(bufferevent_get_input(hc->c->bev)) <= LK_CLIENT_READ_MAX / 2) {
        hc->read_full = 0;
        lk_io_enable(&hc->c->io, EV_READ);
    }
}

static void
process_input(struct hconn *hc)
{
    struct lk_conn *c = hc->c;
    struct evbuffer *in = bufferevent_get_input(c->bev);

    for (;;) {
        if (hc->tunnel || hc->dead)
            return;
        struct hx *hx = hc->x;
        if (hx == NULL) {
            if (evbuffer_get_length(in) == 0) {
                /* Idle: the parser's field scratch goes until the next
                 * request (it grows back on its first field); if the
                 * client stays quiet, everything else but the socket
                 * (timer_cb parks the connection). */
                unsigned idle = hc->fresh && hc->seq == 0 ? c->conf->timeout_client_header_ms
                                                          : c->conf->timeout_idle_ms;
                struct timeval tv = ms_tv(idle < LK_PARK_AFTER_MS ? idle : LK_PARK_AFTER_MS);
                hc->idle_rest_ms = idle - (unsigned)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
                c->action = "waiting for a request";
                event_add(hc->timer, &tv);
                lk_http_parser_free(&hc->rp);
                return;
            }
            /* A request begins: the boundary where the connection moves
             * to the newest config, should a reload have come. */
            int moved = lk_conn_renew(c);
            if (moved < 0) {
                lk_log(LK_INFO, c, "a reload removed its listener; closing");
                hc->dead = 1;
                lk_conn_close_later(c);
                return;
            }
            if (moved > 0) {
                struct timeval idle = ms_tv(c->conf->timeout_idle_ms);
                hc->rp.max_head = c->conf->max_header_bytes;
                lk_io_set_timeouts(&c->io, NULL, &idle);
            }
            hx = hc->x = hx_new(hc);
            struct timeval tv = ms_tv(c->conf->timeout_client_header_ms);
            c->action = "reading the request head";
            event_add(hc->timer, &tv);
        }
        if (hx->req_done || hx->waiting_upstream || hx->upload_paused)
            return;
        if (hx->req_head_done && hx->up == NULL && !hx->following)
            return;

        unsigned seq = hx->seq;
        enum lk_http_event ev = feed(&hc->rp, in);
        switch (ev) {
        case LK_HTTP_NEED_MORE:
            if (hc->client_eof) {
                lk_log(LK_INFO, c, "client closed before the end of the request body");
                hx->req_done = 1;
                reply_error(hx, 400, "the request body ended early", 1);
                return;
            }
            if (hx->following && hx->replay_overflow) {
                give_back_redirect(hx);
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
            on_request_head(hx);
            break;
        case LK_HTTP_DONE:
            on_request_done(hx);
            break;
        case LK_HTTP_UPGRADE:
            /* What follows the head belongs to the tunnel, if the broker
             * agrees (101); otherwise parsing resumes after the response. */
            on_request_done(hx);
            break;
        case LK_HTTP_TOO_LARGE:
            lk_log(LK_INFO, c, "request head over max_header_bytes (%zu)",
                   c->conf->max_header_bytes);
            hx->req_done = 1;
            reply_error(hx, 431, "request header fields too large", 1);
            return;
        case LK_HTTP_ERROR: {
            char reason[200], sample[80], raw[64];
            size_t n = evbuffer_copyout(in, raw, sizeof(raw));
            snprintf(reason, sizeof(reason), "malformed request: %s", hc->rp.error);
            lk_log(LK_INFO, c, "%s, near \"%s\"", reason,
                   lk_log_sanitize(sample, raw, n == (size_t)-1 ? 0 : n, 64));
            hx->req_done = 1;
            /* HTTP/1.2, 3.0 and the like: llhttp knows only 0.9 to 2.0 */
            reply_error(hx, llhttp_get_errno(&hc->rp.ll) == HPE_INVALID_VERSION ? 505 : 400,
                        reason, 1);
            return;
        }
        }
        (void)seq;
    }
}

/* Client connection callbacks ---------------------------------------------------- */

static void
client_read(struct bufferevent *bev, void *arg)
{
    struct hconn *hc = arg;

    process(hc);
    /* Input the exchange cannot take yet (waiting for a broker, pipelined
     * requests) stops reading at LK_CLIENT_READ_MAX; process() reads on
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
    struct hconn *hc = arg;
    struct hx *hx = hc->x;

    /* The client drained its backlog: let the broker's bytes flow again. */
    if (hx != NULL && hx->up != NULL && !hx->waiting_upstream) {
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        lk_io_enable(&hx->up->io, EV_READ);
        if (evbuffer_get_length(bufferevent_get_input(hx->up->bev)) != 0)
            up_read(hx->up->bev, hx);
    }
}

static void
client_event(struct bufferevent *bev, short what, void *arg)
{
    struct hconn *hc = arg;
    struct hx *hx = hc->x;

    if ((what & BEV_EVENT_EOF) && hx != NULL && hx->req_head_done && !(what & BEV_EVENT_ERROR)) {
        /* The client finished sending (a half-close, as nc and scripts do):
         * answer it, then close.  A body still short of its end never
         * completes; process() finds that once the input runs dry. */
        hc->client_eof = 1;
        if (!hx->req_done)
            process(hc);
        return;
    }
    if (what & BEV_EVENT_ERROR)
        lk_log(LK_DEBUG, hc->c, "client connection error");
    else if (what & BEV_EVENT_TIMEOUT)
        lk_log(LK_INFO, hc->c, "client stopped reading; closing");
    if (hx != NULL && hx->req_head_done && !hx->res_head_sent)
        lk_log(LK_INFO, hc->c, "client went away before the response");
    lk_conn_close(hc->c);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct hconn *hc = arg;
    struct hx *hx = hc->x;

    if (hc->dead)
        return; /* a close is on its way */
    if (hx == NULL) { /* keep-alive idle */
        if (hc->idle_rest_ms != 0) {
            struct timeval rest = ms_tv(hc->idle_rest_ms);
            hc->idle_rest_ms = 0;
            lk_conn_park(hc->c, &rest);
            return;
        }
        lk_conn_close(hc->c);
        return;
    }
    lk_log(LK_INFO, hc->c, "request head not received within %u ms",
           hc->c->conf->timeout_client_header_ms);
    hx->req_done = 1;
    reply_error(hx, 408, "request head timed out", 1);
}

static void
hconn_cleanup(void *arg)
{
    struct hconn *hc = arg;

    if (hc->x != NULL) {
        struct hx *hx = hc->x;
        hc->x = NULL;
        hx_free(hx);
    }
    lk_upstream_free(hc->tunnel_up);
    hc->tunnel_up = NULL;
    if (hc->timer != NULL)
        event_free(hc->timer);
    if (hc->res_body != NULL) {
        evbuffer_free(hc->res_body);
        evbuffer_free(hc->res_out);
    }
    lk_http_parser_free(&hc->rp);
}

static void
start(struct lk_conn *c)
{
    struct hconn *hc = lk_palloc(&c->pool, sizeof(*hc));
    struct timeval idle = ms_tv(c->conf->timeout_idle_ms);

    hc->c = c;
    hc->fresh = !c->io.unparking;
    c->proto = hc;
    lk_http_parser_init(&hc->rp, 1, c->conf->max_header_bytes);
    hc->timer = evtimer_new(c->w->base, timer_cb, hc);
    lk_pool_cleanup_add(&c->pool, hconn_cleanup, hc);
    bufferevent_setcb(c->bev, client_read, client_write, client_event, hc);
    lk_io_set_timeouts(&c->io, NULL, &idle);
    lk_io_enable(&c->io, EV_READ | EV_WRITE);
    process(hc);
}

/* Stopping: an idle connection closes now; one with an exchange under way
 * finishes it, its response saying Connection: close, and then closes (a
 * WebSocket tunnel, which never finishes, at drain_timeout). */
static void
drain(struct lk_conn *c)
{
    struct hconn *hc = c->proto;

    if (hc->dead)
        return;
    if (hc->x == NULL && !hc->tunnel) {
        lk_conn_close(c);
        return;
    }
    hc->closing = 1;
}

const struct lk_proto_ops lk_proto_http = {
    .proto = LK_PROTO_HTTP,
    .name = "http",
    .start = start,
    .drain = drain,
};
