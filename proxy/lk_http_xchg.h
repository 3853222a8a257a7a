/*
 * The HTTP module's insides, shared by its files and by nothing else: the
 * state of a client connection (struct lk_hconn) and of the exchange under
 * way on it (struct lk_hx), and the calls its files make to one another.
 * The module is one state machine cut along its seams: lk_http.c reads the
 * client, lk_http_req.c routes a request head, lk_http_up.c talks to the
 * broker and frames the response, lk_http_follow.c follows redirects,
 * lk_http_tunnel.c carries an upgraded connection and lk_http_xchg.c begins,
 * logs and ends an exchange.  They call each other round that circle (an
 * ended exchange starts the next request), so their calls are declared
 * here, once, rather than in a header each that would include the others.
 */
#ifndef LK_HTTP_XCHG_H
#define LK_HTTP_XCHG_H

#include <stdint.h>
#include <sys/time.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "lk_conn.h"
#include "lk_http_parse.h"
#include "lk_xchg.h"

/* Buffer high and low watermarks: past HWM bytes waiting on the slow side,
 * the fast side stops reading until the queue drains to LWM. */
#define LK_HWM (256 * 1024)
#define LK_LWM (64 * 1024)
/* Read-ahead of a client's input (pipelined requests, body not yet sent).
 * Enforced by hand (client_read), not with a read watermark: libevent runs
 * its watermark check, and re-arms the read event, on every drain. */
#define LK_CLIENT_READ_MAX (64 * 1024)

/* Interim (1xx) responses a broker may send before its final one, per
 * exchange; past it, 502.  Each is parsed into the exchange's pool (and goes
 * to the client), so an endless stream of them must end somewhere. */
#define LK_HX_MAX_INTERIM 8

enum lk_hx_framing { LK_OUT_NONE = 0, LK_OUT_CL, LK_OUT_CHUNKED, LK_OUT_CLOSE };

struct lk_hconn;

struct lk_hx {
    struct lk_xchg x; /* first: what filters see */
    struct lk_hconn *hc;
    struct lk_upstream *up;
    struct lk_http_parser sp; /* response parser */
    int sp_ready;

    /* request side */
    int req_head_done, req_done;
    int req_has_body, req_chunked;
    int expect_continue, upgrade_req, head_method;
    int client_close; /* the request said Connection: close (or was HTTP/1.0 without keep-alive) */
    int waiting_upstream; /* connecting: the request parser stays paused */
    int upload_paused;
    uint64_t req_body_bytes, upload_mark;

    /* response side */
    int res_head_seen, res_head_sent, res_no_body;
    int up_unsure; /* the broker announced a body its response cannot have: the
                    * upstream is not reused (lk_http_parser's body_ignored) */
    int body_timeouts; /* the head came: timeout.idle replaces timeout.response once this
                        * read is done, if the response is not (lk_hx_up_read) */
    enum lk_hx_framing framing;
    uint64_t res_left;         /* Content-Length body bytes still to move untouched */
    struct evbuffer *res_body; /* decoded body from the parser (the hconn's) */
    struct evbuffer *res_out;  /* filter output, not yet framed (the hconn's) */
    uint64_t res_bytes;        /* body bytes from the broker (de-chunked) */
    uint64_t res_client_bytes; /* body bytes to the client (before chunking) */
    int status;
    unsigned interim; /* 1xx responses read */
    int retried;
    int any_broker;      /* came in on a service address: any broker will do */
    unsigned connects;   /* brokers tried for this exchange */
    unsigned retry_after_s; /* an error answer's Retry-After (429: limit.requests); 0: none */
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
    struct lk_hx_hop *seen;          /* where each hop went, for loop detection */
    struct lk_http_msg redirect; /* the last redirect followed, in case we must give it back */
};

struct lk_hx_hop {
    const struct lk_broker *broker;
    struct lk_str target;
};

struct lk_hconn {
    struct lk_conn *c;
    struct lk_http_parser rp; /* request parser, for the life of the connection */
    struct lk_hx *x;
    struct event *timer; /* idle or header-read timeout (lk_hc_deadline) */
    long long deadline_ms; /* timer_cb acts then (lk_now_ms); 0: nothing to time */
    long long armed_ms;    /* the timer fires then, when pending (0: it is not) */
    int closing;         /* close when the current response is out */
    int client_eof;
    int tunnel;
    int dead;       /* a close is scheduled: do nothing more */
    int in_process; /* inside lk_hc_process(): it picks up the next request itself */
    int read_full;  /* reading stopped: the input holds LK_CLIENT_READ_MAX */
    int out_full;   /* reading and the next request wait: the client's output is over
                     * LK_HWM (process_input); client_write resumes them under LK_LWM */
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
#define LK_HX_ENDED(hc, seq) ((hc)->x == NULL || (hc)->seq != (seq))

/* Small helpers of the module's files, inline as they were in one file. */
static inline struct timeval
lk_hx_tv(unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* v in decimal in buf (24 bytes), for a Content-Length value: lk_http_set
 * and lk_http_add copy it into the pool. */
static inline struct lk_str
lk_hx_num(char *buf, uint64_t v)
{
    return lk_str_make(buf, lk_fmt_u64(buf, v, 0));
}

/* Runs the parser over buf until an event; drains what it used.  With the
 * input used up it still steps a parser that stopped at a completed head, so
 * that a bodyless message completes. */
static inline enum lk_http_event
lk_hx_feed(struct lk_http_parser *p, struct evbuffer *buf)
{
    size_t none;

    if (lk_http_parser_end_known(p))
        return lk_http_parse(p, NULL, 0, &none); /* no input needed */
    for (;;) {
        struct evbuffer_iovec vec = {NULL, 0};
        size_t used;

        if (evbuffer_peek(buf, -1, NULL, &vec, 1) < 1)
            vec.iov_len = 0;
        if (vec.iov_len == 0 && !lk_http_parser_can_step(p))
            return LK_HTTP_NEED_MORE;
        enum lk_http_event ev = lk_http_parse(p, vec.iov_base, vec.iov_len, &used);
        if (used != 0) /* a drain runs the buffer's callbacks, even of nothing */
            evbuffer_drain(buf, used);
        if (ev != LK_HTTP_NEED_MORE || vec.iov_len == 0)
            return ev;
    }
}

/* lk_http.c: the client's timer acts at at_ms (lk_now_ms), or not at all
 * (0).  Set lazily: the timer is moved only when it must fire earlier
 * than it would; firing early, it waits for the rest.  So a keep-alive
 * exchange, whose idle wait ends before its timer fires, costs no event_add
 * nor event_del. */
void lk_hc_deadline(struct lk_hconn *hc, long long at_ms);
/* lk_http.c: feeds buffered client bytes to the request parser as far as the
 * current exchange allows (the head, then, once the upstream is ready, the
 * body), and reads on if the input had filled. */
void lk_hc_process(struct lk_hconn *hc);

/* lk_http_xchg.c: an exchange's life. */
/* A new exchange on hc, its pool holding it, the request parser pointed at
 * its request.  It never fails (the pool aborts on OOM). */
struct lk_hx *lk_hx_new(struct lk_hconn *hc);
/* Frees hx and all it holds (filters, upstream, parser, pool); the hconn's
 * buffers are left empty for the next exchange. */
void lk_hx_free(struct lk_hx *hx);
/* Writes the exchange's record: metrics and access log. */
void lk_hx_log(struct lk_hx *hx);
/* The same for an exchange cut before its end, why saying by what (the
 * access log's cut field); hx->status and res_client_bytes are what the
 * client got (lk_http.c's hconn_cleanup sets them). */
void lk_hx_log_cut(struct lk_hx *hx, const char *why);
/* Logs and frees hx, the upstream back to its pool if reuse_upstream, and
 * carries on with the connection (next request, idle wait, or close). */
void lk_hx_end(struct lk_hx *hx, int reuse_upstream);
/* Answers with an error of lookout's own ({"reason": ...}, reason NULL for
 * the status's phrase) and ends the exchange; close: the connection closes
 * after it. */
void lk_hx_reply_error(struct lk_hx *hx, int status, const char *reason, int close);
/* What a head filter chain's verdict v means for the exchange: 0 to go on,
 * or -1 once the exchange has been answered (the filter's reply, or a 502
 * with the reason failed) and has ended; close as for lk_hx_reply_error. */
int lk_hx_verdict(struct lk_hx *hx, enum lk_flt_verdict v, const char *failed, int close);

/* lk_http_req.c: the request side. */
/* Checks and routes a parsed request head, rewrites it for the broker, runs
 * the request filters and asks for an upstream; or answers and ends hx. */
void lk_hx_on_request_head(struct lk_hx *hx);
/* The request was read to its end. */
void lk_hx_on_request_done(struct lk_hx *hx);

/* lk_http_up.c: the broker side and the response towards the client. */
/* Asks for a connection to hx->x.broker; up_ready takes it from there, or
 * the exchange ends with a 502 at once. */
void lk_hx_get_upstream(struct lk_hx *hx);
/* Writes the response head to the client, framed as framing says (length
 * for LK_OUT_CL). */
void lk_hx_send_response_head(struct lk_hx *hx, enum lk_hx_framing framing, size_t length);
/* The upstream's read callback (arg: the exchange); the client's write
 * callback calls it too, once a slow client has drained. */
void lk_hx_up_read(struct bufferevent *bev, void *arg);

/* lk_http_follow.c: redirects = follow. */
/* 1 when the response head just read is a redirect being followed (or the
 * exchange ended with 508), 0 to let it through to the client. */
int lk_hx_follow_redirect(struct lk_hx *hx);
/* Sends the request to the next hop's broker. */
void lk_hx_start_hop(struct lk_hx *hx);
/* The body was too big to replay: the client gets the redirect and the
 * connection closes. */
void lk_hx_give_back_redirect(struct lk_hx *hx);

/* lk_http_tunnel.c: after a 101, the connection becomes a byte tunnel to the
 * broker; the exchange ends and the hconn carries the tunnel. */
void lk_hx_start_tunnel(struct lk_hx *hx);

#endif
