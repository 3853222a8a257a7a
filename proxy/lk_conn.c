/*
 * Workers, listeners, client connections and upstream connections.  This
 * layer moves bytes and knows TLS, routing and broker health; protocol
 * modules (lk_http.c) sit on top of it.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "lk_conn.h"
#include "lk_dyn.h"
#include "lk_http.h"
#include "lk_limit.h"
#include "lk_log.h"
#include "lk_stats.h"

const char lk_err_connect[] = "connect failed";
const char lk_err_connect_timeout[] = "connect timed out";
const char lk_err_tls[] = "TLS handshake with the broker failed";
const char lk_err_reset[] = "connection reset by the broker";

static struct lk_worker *workers;
static int nworkers;
static atomic_ullong next_conn_id;

_Atomic unsigned long lk_reloads_ok, lk_reloads_failed;
/* The current generation: what workers switch to (their own reference
 * each), under cur_mu since the main thread replaces it. */
static pthread_mutex_t cur_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lk_runtime *cur_rt;
static atomic_int draining;
static _Atomic long long drain_deadline_ms;
/* Workers whose drain is not over yet.  Worker 0 ends last: its loop also
 * serves the admin listener, whose /healthz says 503 while the others
 * finish (lk_admin.h). */
static atomic_int workers_draining;

long long
lk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const struct lk_proto_ops *
proto_for(unsigned proto)
{
    if (proto == LK_PROTO_HTTP)
        return &lk_proto_http;
    if (proto == LK_PROTO_KAFKA)
        return &lk_proto_kafka;
    if (proto == LK_PROTO_PULSAR)
        return &lk_proto_pulsar;
    return NULL;
}

/* Connection I/O ------------------------------------------------------------ */

#define LK_READ_MIN (16 * 1024)
#define LK_READ_MAX (64 * 1024)

static void
io_unlink(struct lk_io *io)
{
    if (!io->queued)
        return;
    if (io->prev != NULL)
        io->prev->next = io->next;
    else
        io->w->flushq = io->next;
    if (io->next != NULL)
        io->next->prev = io->prev;
    io->prev = io->next = NULL;
    io->queued = 0;
}

/* Puts io on its worker's flush queue (once). */
static void
io_queue(struct lk_io *io)
{
    struct lk_worker *w = io->w;

    if (io->queued)
        return;
    io->queued = 1;
    io->prev = NULL;
    io->next = w->flushq;
    if (w->flushq != NULL)
        w->flushq->prev = io;
    else
        event_active(w->flush_ev, EV_TIMEOUT, 1);
    w->flushq = io;
}

/* The output changed: queue a flush when bytes came in, or when the
 * bufferevent drained them itself (to go back to direct writes).  A TLS
 * output waiting for the kernel (or for a read) is flushed by that wait. */
static void
io_out_changed(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct lk_io *io = arg;

    if (io->ssl != NULL) {
        if (info->n_added != 0 && !io->wwait && !io->write_wants_read)
            io_queue(io);
        return;
    }
    if (info->n_added == 0 && !(bufferevent_get_enabled(io->bev) & EV_WRITE))
        return;
    io_queue(io);
}

/* The bufferevent's event callback, as the bufferevent would run it. */
static void
io_report(struct lk_io *io, short what)
{
    bufferevent_event_cb eventcb;
    void *cbarg;

    bufferevent_getcb(io->bev, NULL, NULL, &eventcb, &cbarg);
    if (eventcb != NULL)
        eventcb(io->bev, what, cbarg);
}

static int tls_flush(struct lk_io *io);
static int io_park_if_idle(struct lk_io *io);

static void
io_flush(struct lk_io *io)
{
    struct bufferevent *bev = io->bev;
    struct evbuffer *out = bufferevent_get_output(bev);

    if (io->ssl != NULL) {
        tls_flush(io);
        return;
    }
    if (bufferevent_get_enabled(bev) & EV_WRITE) {
        /* The kernel lagged and the bufferevent writes: once it has
         * drained the output, writes are direct again. */
        if (evbuffer_get_length(out) == 0)
            bufferevent_disable(bev, EV_WRITE);
        return;
    }
    if (evbuffer_get_length(out) == 0) {
        io_park_if_idle(io);
        return;
    }
    /* A socket bufferevent keeps its output's start frozen except while
     * it writes; so do we. */
    evbuffer_unfreeze(out, 1);
    int n = evbuffer_write(out, bufferevent_getfd(bev));
    evbuffer_freeze(out, 1);
    if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        evbuffer_get_length(out) != 0) {
        /* The rest (or the error, which its own write reports through the
         * event callback) goes the bufferevent's way. */
        bufferevent_enable(bev, EV_WRITE);
        return;
    }
    /* Drained: the write callback runs as the bufferevent would run it,
     * unless the protocol is done and the connection parks. */
    if (!io_park_if_idle(io))
        bufferevent_trigger(bev, EV_WRITE, 0);
}

static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;
    struct lk_io *io;

    while ((io = w->flushq) != NULL) {
        io_unlink(io);
        io_flush(io);
    }
}

/* A plaintext socket is readable (or its read timeout passed): read into
 * the bufferevent's input and run its callbacks as the bufferevent would.
 * libevent 2.1 reads at most 4 KiB per call after a FIONREAD ioctl; this
 * reads up to what the last reads suggest (LK_READ_MIN to LK_READ_MAX). */
static void tls_read_cb(struct lk_io *io, short what);
static int io_unpark(struct lk_io *io, short what);

static void
io_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_io *io = arg;
    struct bufferevent *bev = io->bev;
    bufferevent_data_cb readcb;
    bufferevent_event_cb eventcb;
    void *cbarg;

    if (bev == NULL) { /* parked */
        if (io_unpark(io, what) != 0)
            return;
        bev = io->bev;
    }
    if (io->ssl != NULL) {
        tls_read_cb(io, what);
        return;
    }
    bufferevent_getcb(bev, &readcb, NULL, &eventcb, &cbarg);
    if (what & EV_TIMEOUT) {
        lk_io_disable(io, EV_READ);
        if (eventcb != NULL)
            eventcb(bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT, cbarg);
        return;
    }
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_iovec v[2];
    struct iovec iov[2];
    evbuffer_unfreeze(in, 0);
    int nv = evbuffer_reserve_space(in, (ev_ssize_t)io->read_size, v, 2);
    ssize_t n = -1;
    int err = ENOMEM;
    if (nv > 0) {
        for (int k = 0; k < nv; k++) {
            iov[k].iov_base = v[k].iov_base;
            iov[k].iov_len = v[k].iov_len;
        }
        n = readv(fd, iov, nv);
        err = errno;
        size_t left = n > 0 ? (size_t)n : 0;
        for (int k = 0; k < nv; k++) {
            v[k].iov_len = left < v[k].iov_len ? left : v[k].iov_len;
            left -= v[k].iov_len;
        }
        evbuffer_commit_space(in, v, n > 0 ? nv : 0);
    }
    evbuffer_freeze(in, 0);
    if (n > 0) {
        /* A full read asks for more next time; a small one, less.  The
         * reservation can be larger than asked (libevent rounds chains up),
         * so a full read is one that got at least what was asked. */
        if ((size_t)n >= io->read_size && io->read_size < LK_READ_MAX)
            io->read_size *= 2;
        else if ((size_t)n < io->read_size / 4 && io->read_size > LK_READ_MIN)
            io->read_size /= 2;
        io->park_wanted = 0;
        if (readcb != NULL)
            readcb(bev, cbarg);
        return;
    }
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
        return;
    lk_io_disable(io, EV_READ);
    if (eventcb != NULL)
        eventcb(bev, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), cbarg);
}

/* Plaintext from now on: reads and writes go round the bufferevent's own
 * (which stay off); fd is connected. */
static void
io_go_plain(struct lk_io *io, struct event *rev)
{
    bufferevent_disable(io->bev, EV_READ | EV_WRITE);
    io->plain = 1;
    io->read_size = LK_READ_MIN;
    if (rev != NULL) {
        event_assign(rev, io->w->base, bufferevent_getfd(io->bev), EV_READ | EV_PERSIST,
                     io_read_cb, io);
        io->rev = rev;
    } else {
        io->rev = event_new(io->w->base, bufferevent_getfd(io->bev), EV_READ | EV_PERSIST,
                            io_read_cb, io);
        io->rev_owned = 1;
    }
    io->cb = evbuffer_add_cb(bufferevent_get_output(io->bev), io_out_changed, io);
}

/* TLS over the direct path ------------------------------------------------ */

/* The most plaintext one TLS record carries (RFC 8446 §5.1): what one
 * SSL_write is given, so that each record goes out in one write. */
#define LK_TLS_RECORD 16384

static void tls_write_cb(evutil_socket_t fd, short what, void *arg);

/* Waits for the socket to take more (on), or stops waiting. */
static void
io_wait_write(struct lk_io *io, int on)
{
    if (on && !io->wwait) {
        if (io->wev == NULL)
            io->wev = event_new(io->w->base, bufferevent_getfd(io->bev), EV_WRITE | EV_PERSIST,
                                tls_write_cb, io);
        event_add(io->wev, io->has_wtv ? &io->wtv : NULL);
        io->wwait = 1;
    } else if (!on && io->wwait) {
        event_del(io->wev);
        io->wwait = 0;
    }
}

/* How SSL_read or SSL_do_handshake ended, as a TLS bufferevent that allows
 * a dirty shutdown reports it: close_notify, or the peer gone without one
 * (EOF or a reset), is the end of input;
 * anything else an error, its reasons left in the queue for the log. */
static short
tls_end_what(int err)
{
    unsigned long e = ERR_peek_error();

    /* OpenSSL 3 calls the peer's EOF without close_notify an error. */
    if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && e == 0) ||
        (err == SSL_ERROR_SSL && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
        ERR_clear_error();
        return BEV_EVENT_EOF;
    }
    return BEV_EVENT_ERROR;
}

/* Runs the server handshake on; reports BEV_EVENT_CONNECTED, an error or
 * the end through the event callback, as a TLS bufferevent would.  The
 * callback may free io. */
static void
tls_handshake(struct lk_io *io)
{
    ERR_clear_error();
    int r = SSL_do_handshake(io->ssl);
    if (r == 1) {
        io->handshaking = 0;
        io_wait_write(io, 0);
        /* The request often came in the Finished's segment: OpenSSL has
         * it, the socket has nothing more to say. */
        if (SSL_has_pending(io->ssl))
            event_active(io->rev, EV_READ, 1);
        io_report(io, BEV_EVENT_CONNECTED);
        return;
    }
    int err = SSL_get_error(io->ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        long long left = io->hs_deadline_ms != 0 ? io->hs_deadline_ms - lk_now_ms() : 1;
        if (left <= 0) {
            lk_io_disable(io, EV_READ | EV_WRITE);
            io_report(io, BEV_EVENT_READING | BEV_EVENT_TIMEOUT);
            return;
        }
        io_wait_write(io, err == SSL_ERROR_WANT_WRITE);
        /* The read timeout, restarted by each read, is what is left. */
        if (io->hs_deadline_ms != 0 && io->has_rtv) {
            io->rtv = (struct timeval){left / 1000, (left % 1000) * 1000};
            if (io->reading)
                event_add(io->rev, &io->rtv);
        }
        return;
    }
    lk_io_disable(io, EV_READ | EV_WRITE);
    io_report(io, BEV_EVENT_READING | tls_end_what(err));
}

/* Writes the output in records of up to LK_TLS_RECORD bytes until it is
 * drained or the socket is full, and runs the write callback (subject to
 * the write low-water mark) when something went.  -1 when a write failed
 * and the event callback ran, which may have freed io. */
static int
tls_flush(struct lk_io *io)
{
    struct evbuffer *out = bufferevent_get_output(io->bev);
    size_t len, sent = 0;
    int err = SSL_ERROR_NONE;

    if (io->write_wants_read || io->handshaking)
        return 0; /* the read side resumes it */
    evbuffer_unfreeze(out, 1);
    while ((len = evbuffer_get_length(out)) != 0) {
        size_t n = len < LK_TLS_RECORD ? len : LK_TLS_RECORD, done;
        struct evbuffer_iovec v;
        const void *p = io->w->tls_out;
        /* A head and its body are two chains: gathered, they are one
         * record.  Retries after WANT_WRITE pass the same bytes again (the
         * output only grows at its end), perhaps from elsewhere:
         * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER. */
        if (evbuffer_peek(out, (ev_ssize_t)n, NULL, &v, 1) == 1)
            p = v.iov_base;
        else
            evbuffer_copyout(out, io->w->tls_out, n);
        ERR_clear_error();
        if (SSL_write_ex(io->ssl, p, n, &done) != 1) {
            err = SSL_get_error(io->ssl, 0);
            break;
        }
        evbuffer_drain(out, done);
        sent += done;
    }
    evbuffer_freeze(out, 1);
    switch (err) {
    case SSL_ERROR_NONE:
        io_wait_write(io, 0);
        if (io_park_if_idle(io))
            return 0;
        break;
    case SSL_ERROR_WANT_WRITE:
        io_wait_write(io, 1);
        break;
    case SSL_ERROR_WANT_READ: /* a post-handshake message to read first */
        io_wait_write(io, 0);
        io->write_wants_read = 1;
        if (!io->reading)
            event_add(io->rev, NULL);
        break;
    default:
        io_wait_write(io, 0);
        ERR_clear_error();
        io_report(io, BEV_EVENT_WRITING | BEV_EVENT_ERROR);
        return -1;
    }
    if (sent != 0)
        bufferevent_trigger(io->bev, EV_WRITE, 0);
    return 0;
}

/* Reads what OpenSSL can give into the input and runs the read callback;
 * once the input is over (or broken), reports that to the event callback
 * after any data before it. */
static void
tls_read(struct lk_io *io)
{
    struct bufferevent *bev = io->bev;
    struct evbuffer *in = bufferevent_get_input(bev);
    bufferevent_data_cb readcb;
    void *cbarg;
    struct evbuffer_iovec v;
    size_t got = 0;
    int err = SSL_ERROR_NONE;

    bufferevent_getcb(bev, &readcb, NULL, NULL, &cbarg);
    evbuffer_unfreeze(in, 0);
    if (evbuffer_reserve_space(in, (ev_ssize_t)io->read_size, &v, 1) != 1) {
        evbuffer_freeze(in, 0);
        lk_io_disable(io, EV_READ);
        io_report(io, BEV_EVENT_READING | BEV_EVENT_ERROR);
        return;
    }
    for (;;) {
        size_t n;
        ERR_clear_error();
        if (SSL_read_ex(io->ssl, (char *)v.iov_base + got, v.iov_len - got, &n) != 1) {
            err = SSL_get_error(io->ssl, 0);
            break;
        }
        got += n;
        /* Stop when OpenSSL holds nothing more, rather than read the
         * socket to its EAGAIN: the event is level-triggered.  A full
         * record may have more behind it. */
        if (got == v.iov_len || (n < LK_TLS_RECORD && !SSL_has_pending(io->ssl)))
            break;
    }
    v.iov_len = got;
    evbuffer_commit_space(in, &v, got != 0 ? 1 : 0);
    evbuffer_freeze(in, 0);
    if (err == SSL_ERROR_WANT_WRITE) { /* a post-handshake answer to send first */
        io->read_wants_write = 1;
        io_wait_write(io, 1);
    } else if (err != SSL_ERROR_NONE && err != SSL_ERROR_WANT_READ) {
        io->ssl_end = 1;
        io->ssl_end_what = tls_end_what(err);
    }
    if (got != 0) {
        if (got == io->read_size && io->read_size < LK_READ_MAX)
            io->read_size *= 2;
        else if (got < io->read_size / 4 && io->read_size > LK_READ_MIN)
            io->read_size /= 2;
        /* What is left (OpenSSL's, or the end) comes after the callback,
         * which may close the connection: that cancels it. */
        if (io->ssl_end || SSL_has_pending(io->ssl))
            event_active(io->rev, EV_READ, 1);
        io->park_wanted = 0;
        if (readcb != NULL)
            readcb(bev, cbarg);
        return;
    }
    if (io->ssl_end) {
        lk_io_disable(io, EV_READ);
        io_report(io, BEV_EVENT_READING | io->ssl_end_what);
    }
}

static void
tls_read_cb(struct lk_io *io, short what)
{
    if (what & EV_TIMEOUT) {
        lk_io_disable(io, EV_READ);
        io_report(io, BEV_EVENT_READING | BEV_EVENT_TIMEOUT);
        return;
    }
    if (io->handshaking) {
        tls_handshake(io);
        return;
    }
    if (io->write_wants_read) {
        io->write_wants_read = 0;
        if (!io->reading)
            event_del(io->rev); /* added for the write's sake only */
        if (tls_flush(io) != 0)
            return;
    }
    if (!io->reading)
        return; /* activated before reading was switched off: kept for lk_io_enable */
    if (io->ssl_end) {
        lk_io_disable(io, EV_READ);
        io_report(io, BEV_EVENT_READING | io->ssl_end_what);
        return;
    }
    tls_read(io);
}

static void
tls_write_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_io *io = arg;

    if (what & EV_TIMEOUT) {
        io_wait_write(io, 0);
        io_report(io, BEV_EVENT_WRITING | BEV_EVENT_TIMEOUT);
        return;
    }
    if (io->handshaking) {
        tls_handshake(io);
        return;
    }
    if (io->read_wants_write) {
        io->read_wants_write = 0;
        io_wait_write(io, 0);
        if (io->reading)
            event_active(io->rev, EV_READ, 1);
    }
    tls_flush(io);
}

/* TLS from now on, over the direct path, starting with the server
 * handshake (ssl is set up, fd accepted); the event callback gets
 * BEV_EVENT_CONNECTED once it is done. */
static void
io_go_tls(struct lk_io *io, SSL *ssl, struct event *rev)
{
    io->ssl = ssl;
    io->handshaking = 1;
    io_go_plain(io, rev);
}

static void
io_attach(struct lk_io *io, struct lk_worker *w, struct bufferevent *bev)
{
    io->bev = bev;
    io->w = w;
}

static void
io_detach(struct lk_io *io)
{
    io_unlink(io);
    if (io->rev != NULL && io->rev_owned)
        event_free(io->rev);
    else if (io->rev != NULL)
        event_del(io->rev);
    io->rev = NULL;
    if (io->cb != NULL)
        evbuffer_remove_cb_entry(bufferevent_get_output(io->bev), io->cb);
    io->cb = NULL;
    if (io->wev != NULL)
        event_free(io->wev);
    io->wev = NULL;
    if (io->ssl != NULL)
        SSL_free(io->ssl); /* its socket BIO leaves the fd to the bufferevent */
    io->ssl = NULL;
}

void
lk_io_enable(struct lk_io *io, short what)
{
    if (io->plain) {
        if ((what & EV_READ) && !io->reading) {
            io->reading = 1;
            event_add(io->rev, io->has_rtv ? &io->rtv : NULL);
            /* OpenSSL may hold input the socket will not announce. */
            if (io->ssl != NULL && (io->ssl_end || SSL_has_pending(io->ssl)))
                event_active(io->rev, EV_READ, 1);
        }
        return; /* EV_WRITE: the flush queue asks for it when needed */
    }
    /* Enabling again would only re-arm the timeout: an event_add per call. */
    if ((bufferevent_get_enabled(io->bev) & what) != what)
        bufferevent_enable(io->bev, what);
}

void
lk_io_disable(struct lk_io *io, short what)
{
    if (io->plain) {
        if ((what & EV_READ) && io->reading) {
            io->reading = 0;
            if (!io->write_wants_read) /* else the write still waits on it */
                event_del(io->rev);
        }
        if ((what & EV_WRITE) && io->ssl != NULL)
            io_wait_write(io, 0);
        else if (what & EV_WRITE)
            bufferevent_disable(io->bev, EV_WRITE);
        return;
    }
    bufferevent_disable(io->bev, what);
}

void
lk_io_set_timeouts(struct lk_io *io, const struct timeval *rd, const struct timeval *wr)
{
    bufferevent_set_timeouts(io->bev, rd, wr);
    if (!io->plain)
        return;
    io->has_rtv = rd != NULL;
    if (rd != NULL)
        io->rtv = *rd;
    io->has_wtv = wr != NULL;
    if (wr != NULL)
        io->wtv = *wr;
    /* As libevent does: a new timeout counts from now. */
    if (io->reading)
        event_add(io->rev, io->has_rtv ? &io->rtv : NULL);
    if (io->wwait)
        event_add(io->wev, io->has_wtv ? &io->wtv : NULL);
}

int
lk_io_reading(const struct lk_io *io)
{
    return io->plain ? io->reading : (bufferevent_get_enabled(io->bev) & EV_READ) != 0;
}

/* Client connections ------------------------------------------------------ */

/* Client connections come from a per-worker slab: parked ones, which are
 * about all that is left of an idle connection, then sit together in
 * blocks rather than each in a page among the freed buffers of others,
 * which malloc could not give back. */
#define LK_CONN_BLOCK 64

static struct lk_conn *
conn_alloc(struct lk_worker *w)
{
    if (w->free_conns == NULL) {
        struct lk_conn *block = lk_xmalloc(LK_CONN_BLOCK * sizeof(*block));
        w->conn_blocks = lk_xrealloc(w->conn_blocks, (w->nconn_blocks + 1) * sizeof(void *));
        w->conn_blocks[w->nconn_blocks++] = block;
        for (size_t i = 0; i < LK_CONN_BLOCK; i++) {
            block[i].next = w->free_conns;
            w->free_conns = &block[i];
        }
    }
    struct lk_conn *c = w->free_conns;
    w->free_conns = c->next;
    memset(c, 0, sizeof(*c));
    return c;
}

static void
conn_release(struct lk_worker *w, struct lk_conn *c)
{
    c->next = w->free_conns;
    w->free_conns = c;
}

void
lk_conn_describe(const struct lk_conn *c, char *buf, size_t len)
{
    int n = snprintf(buf, len, ", client: %s, server: %s", c->peer, c->bind->text);
    if (n > 0 && (size_t)n < len && c->sni != NULL)
        n += snprintf(buf + n, len - (size_t)n, ", sni: %s", c->sni);
    if (n > 0 && (size_t)n < len && c->action != NULL)
        snprintf(buf + n, len - (size_t)n, ", while %s", c->action);
}

void
lk_conn_close(struct lk_conn *c)
{
    struct bufferevent *bev = c->bev;

    c->bev = NULL;
    c->w->nconns--;
    lk_limit_drop(c->limit);
    if (c->st != NULL)
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->open, (uint64_t)-1);
    if (c->close_ev != NULL)
        event_free(c->close_ev);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        c->w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    /* The protocol module's state lives in the pool; its cleanups release
     * upstreams and timers before the client bufferevent goes. */
    lk_pool_free(&c->pool);
    if (c->io.ssl != NULL)
        lk_tls_keep_session(c->io.ssl);
    io_detach(&c->io);
    if (bev != NULL)
        bufferevent_free(bev);
    if (c->fd >= 0)
        evutil_closesocket(c->fd);
    /* Last: the pool's cleanups above may still use the generation. */
    lk_runtime_unref(c->rt);
    c->rt = NULL;
    if (c->w->draining && c->w->nconns == 0)
        event_active(c->w->drain_ev, EV_TIMEOUT, 1);
    conn_release(c->w, c);
}

static void
close_when_drained(struct bufferevent *bev, void *arg)
{
    struct lk_conn *c = arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        lk_conn_close(c);
}

static void
close_on_event(struct bufferevent *bev, short what, void *arg)
{
    lk_conn_close(arg);
}

static void
discard_input(struct bufferevent *bev, void *arg)
{
    evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

static void
close_later_cb(evutil_socket_t fd, short what, void *arg)
{
    lk_conn_close(arg);
}

void
lk_conn_close_later(struct lk_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    lk_io_disable(&c->io, EV_READ | EV_WRITE);
    /* c's own event, not event_base_once: should c be closed some other way
     * first, freeing the event cancels this. */
    if (c->close_ev == NULL) /* made when first needed: idle connections hold less */
        c->close_ev = evtimer_new(c->w->base, close_later_cb, c);
    event_active(c->close_ev, EV_TIMEOUT, 1);
}

void
lk_conn_close_after_flush(struct lk_conn *c)
{
    struct timeval grace = {5, 0};

    if (c->closing)
        return;
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        lk_conn_close_later(c);
        return;
    }
    c->closing = 1;
    /* Keep reading (and discarding) so that a client still sending does not
     * get a reset that would destroy the response in flight. */
    bufferevent_setcb(c->bev, discard_input, close_when_drained, close_on_event, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    lk_io_set_timeouts(&c->io, &grace, &grace);
    lk_io_enable(&c->io, EV_READ);
    if (c->io.ssl == NULL)
        bufferevent_enable(c->bev, EV_WRITE); /* the bufferevent's writes: close_when_drained */
    /* TLS: each flush that makes progress runs close_when_drained */
}

/* Generations ---------------------------------------------------------------- */

/* Whether a and b are the same socket: address, TLS-ness and protocol (a
 * kept listener keeps its fd; anything else is a new socket). */
static int
same_bind(const struct lk_bind *a, const struct lk_bind *b)
{
    if (a->tls != b->tls || a->proto != b->proto || a->addr.ss_family != b->addr.ss_family)
        return 0;
    if (a->addr.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a->addr, *y = (const void *)&b->addr;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)&a->addr, *y = (const void *)&b->addr;
        return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 0;
}

/* conf's bind that is the same socket as b, or NULL. */
static const struct lk_bind *
find_bind(const struct lk_conf *conf, const struct lk_bind *b)
{
    for (size_t i = 0; i < conf->nbinds; i++)
        if (same_bind(conf->binds[i], b))
            return conf->binds[i];
    return NULL;
}

int
lk_conn_renew(struct lk_conn *c)
{
    struct lk_runtime *rt = c->w->rt;

    if (c->rt == rt)
        return 0;
    const struct lk_bind *b = find_bind(rt->conf, c->bind);
    if (b == NULL)
        return -1;
    /* c->sni is OpenSSL's and c->io.ssl keeps its own reference to the old
     * generation's SSL_CTX, which only the handshake (done) called into. */
    c->bind = b;
    c->conf = rt->conf;
    lk_runtime_unref(c->rt);
    c->rt = lk_runtime_ref(rt);
    return 1;
}

/* Parking ------------------------------------------------------------------ */

/* The client connection whose lk_io this is (only those park). */
#define CONN_OF(io) ((struct lk_conn *)(void *)((char *)(io) - offsetof(struct lk_conn, io)))

void
lk_conn_park(struct lk_conn *c, const struct timeval *timeout)
{
    struct lk_io *io = &c->io;

    if (io->unparking || !io->plain || c->closing)
        return; /* just woken for input: it is read next */
    c->park_ms = (uint32_t)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
    io->park_wanted = 1;
    /* Parked from the flush queue, outside the protocol's callbacks, once
     * the output is out. */
    if (!io->wwait)
        io_queue(io);
}

/* Parks the connection if its protocol is idle and nothing is buffered
 * anywhere (the output drained, no input, nothing held by OpenSSL): frees
 * the bufferevent and the pool, and leaves the read event waiting with the
 * idle timeout.  1 if it parked. */
static int
io_park_if_idle(struct lk_io *io)
{
    if (!io->park_wanted)
        return 0;
    if (io->queued || io->wwait || io->handshaking || io->read_wants_write ||
        io->write_wants_read || io->ssl_end ||
        evbuffer_get_length(bufferevent_get_output(io->bev)) != 0 ||
        evbuffer_get_length(bufferevent_get_input(io->bev)) != 0 ||
        (io->ssl != NULL && SSL_has_pending(io->ssl)))
        return 0;
    struct lk_conn *c = CONN_OF(io);
    io->park_wanted = 0;
    lk_log(LK_DEBUG, c, "idle: parked");
    lk_pool_clear(&c->pool); /* the protocol's state: its cleanups free its timers */
    c->proto = NULL;
    c->action = "waiting for a request";
    evbuffer_remove_cb_entry(bufferevent_get_output(io->bev), io->cb);
    io->cb = NULL;
    if (io->wev != NULL)
        event_free(io->wev);
    io->wev = NULL;
    bufferevent_free(c->bev); /* the socket stays: c->fd */
    c->bev = io->bev = NULL;
    io->has_rtv = 1;
    io->rtv.tv_sec = c->park_ms / 1000;
    io->rtv.tv_usec = (c->park_ms % 1000) * 1000;
    io->reading = 1;
    event_add(io->rev, &io->rtv);
    return 1;
}

/* The read event of a parked connection fired: its idle time is over
 * (closed), or the client speaks and the connection gets a bufferevent and
 * its protocol again.  0 when io is ready to read. */
static int
io_unpark(struct lk_io *io, short what)
{
    struct lk_conn *c = CONN_OF(io);

    if (what & EV_TIMEOUT) {
        lk_log(LK_DEBUG, c, "idle: timed out");
        lk_conn_close(c);
        return -1;
    }
    lk_log(LK_DEBUG, c, "idle: the client speaks again");
    if (lk_conn_renew(c) < 0) {
        lk_log(LK_DEBUG, c, "idle: its listener was removed by a reload; closing");
        lk_conn_close(c);
        return -1;
    }
    c->bev = bufferevent_socket_new(c->w->base, c->fd, BEV_OPT_DEFER_CALLBACKS);
    if (c->bev == NULL) {
        lk_log(LK_ERR, c, "cannot resume an idle connection: out of memory");
        lk_conn_close(c);
        return -1;
    }
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    io->bev = c->bev;
    io->cb = evbuffer_add_cb(bufferevent_get_output(c->bev), io_out_changed, io);
    io->unparking = 1;
    proto_for(c->bind->proto)->start(c);
    io->unparking = 0;
    return 0;
}

static void
tls_handshake_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_conn *c = arg;

    if (what & BEV_EVENT_CONNECTED) {
        /* OpenSSL's copy lives as long as the SSL: through parking */
        c->sni = SSL_get_servername(c->io.ssl, TLSEXT_NAMETYPE_host_name);
        c->action = NULL;
#ifdef TCP_QUICKACK
        /* The client spoke last (its Finished: always in TLS 1.3, on a
         * resumption in 1.2) and usually sends its request right behind it,
         * in a second write that Nagle's algorithm holds until the Finished
         * is ACKed.  With nothing of ours to carry that ACK (no tickets),
         * the kernel delays it 40 ms; send it now. */
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
#endif
        const struct lk_proto_ops *ops = proto_for(c->bind->proto);
        ops->start(c);
        return;
    }
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->tls_failures, 1);
    if (what & BEV_EVENT_ERROR)
        lk_log_ssl(LK_INFO, c, "TLS handshake failed");
    else if (what & BEV_EVENT_TIMEOUT)
        lk_log(LK_INFO, c, "TLS handshake timed out");
    else
        ERR_clear_error();
    lk_conn_close(c);
}

/* Connection limits --------------------------------------------------------- */

enum { REFUSED_MAX, REFUSED_PER_CLIENT };
/* Refusals not yet in a log line, by reason, and when the last line was:
 * a flood makes one line a second, not one per connection. */
static atomic_ulong refused_unlogged[2];
static struct lk_log_every refused_log;

/*
 * A connection over a limit: closed at once, before anything is allocated
 * for it.  Plaintext HTTP first gets a 503 with Connection: close, written
 * straight to the new socket (it is empty: the write takes it whole).  TLS
 * listeners just close, as the binary protocols do: a 503 would need a
 * full handshake per refused connection, the very work a flood wants out
 * of lookout (HAProxy's `tcp-request connection reject` likewise closes
 * before any handshake).
 */
static void
refuse(const struct lk_listen *ls, evutil_socket_t fd, const struct sockaddr *sa, int why)
{
    static const char *const bodies[2] = {
        "{\"reason\": \"too many connections (max_connections)\"}",
        "{\"reason\": \"too many connections from your address (max_connections_per_client)\"}"};
    const struct lk_conf *conf = ls->w->rt->conf;

    lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(ls->st))->refused[why], 1);
    if (ls->b->proto == LK_PROTO_HTTP && !ls->b->tls) {
        char resp[256], junk[4096];
        int n = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(bodies[why]), bodies[why]);
        (void)!send(fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
        /* A request already here, unread, would make the close a reset
         * that can destroy the 503 on its way. */
        (void)!recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
    }
    evutil_closesocket(fd);

    atomic_fetch_add(&refused_unlogged[why], 1);
    if (lk_log_every(&refused_log, 1000) == 0)
        return;
    unsigned long by[2] = {atomic_exchange(&refused_unlogged[REFUSED_MAX], 0),
                           atomic_exchange(&refused_unlogged[REFUSED_PER_CLIENT], 0)};
    char caps[2][16], ip[INET6_ADDRSTRLEN] = "?";
    snprintf(caps[0], sizeof(caps[0]), "%u per worker", conf->max_connections);
    snprintf(caps[1], sizeof(caps[1]), "%u", conf->max_connections_per_client);
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
    lk_log(LK_WARN, NULL,
           "refused %lu client connections since the last such line: %lu over max_connections "
           "(%s), %lu over max_connections_per_client (%s); the latest from %s on %s",
           by[0] + by[1], by[0], conf->max_connections != 0 ? caps[0] : "off", by[1],
           conf->max_connections_per_client != 0 ? caps[1] : "off", ip, ls->b->text);
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
          void *arg)
{
    const struct lk_listen *ls = arg;
    const struct lk_bind *b = ls->b;
    struct lk_worker *w = ls->w;
    struct event_base *base = w->base;
    uint16_t port = 0;
    char ip[INET6_ADDRSTRLEN] = "";
    const struct lk_conf *conf = w->rt->conf;
    struct lk_limit_slot *slot = NULL;

    if (conf->max_connections != 0 && w->nconns >= conf->max_connections) {
        refuse(ls, fd, sa, REFUSED_MAX);
        return;
    }
    if (conf->max_connections_per_client != 0 &&
        lk_limit_take(sa, conf->max_connections_per_client, &slot) != 0) {
        refuse(ls, fd, sa, REFUSED_PER_CLIENT);
        return;
    }
    struct lk_conn *c = conn_alloc(w);
    c->limit = slot;
    c->fd = -1; /* until a bufferevent has it: closed by whoever fails first */
    /* An idle keep-alive connection holds this pool: the protocol's state
     * (the HTTP module: about 600 bytes) and little else. */
    lk_pool_init_sized(&c->pool, 768);
    c->w = w;
    c->rt = lk_runtime_ref(w->rt); /* an atomic per connection: see struct lk_runtime */
    c->conf = w->rt->conf;
    c->bind = b;
    c->tls = b->tls;
    c->id = atomic_fetch_add(&next_conn_id, 1) + 1;
    c->st = ls->st;
    struct lk_fe_vals *fv = lk_stat_vals(c->st);
    lk_stat_add(&fv->total, 1);
    lk_stat_add(&fv->open, 1);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        port = ntohs(sin->sin_port);
        snprintf(c->peer, sizeof(c->peer), "%s:%u", ip, port);
        c->peer_ip_len = (unsigned char)strlen(ip);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
        port = ntohs(sin6->sin6_port);
        snprintf(c->peer, sizeof(c->peer), "[%s]:%u", ip, port);
        c->peer_ip_off = 1;
        c->peer_ip_len = (unsigned char)strlen(ip);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    w->nconns++;
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;

    const struct lk_proto_ops *ops = proto_for(b->proto);
    if (ops == NULL) {
        c->bev = NULL;
        evutil_closesocket(fd);
        lk_conn_close(c);
        return;
    }
    if (b->tls) {
        SSL *ssl = SSL_new(w->rt->server_ctx[0]);
        if (ssl == NULL) {
            lk_log_ssl(LK_ERR, c, "SSL_new failed");
            evutil_closesocket(fd);
            lk_conn_close(c);
            return;
        }
        c->fd = fd;
        c->bev = bufferevent_socket_new(base, fd, BEV_OPT_DEFER_CALLBACKS);
        if (c->bev == NULL || SSL_set_fd(ssl, fd) != 1) {
            SSL_free(ssl);
            lk_conn_close(c);
            return;
        }
        SSL_set_accept_state(ssl);
        /* One read takes what the socket has, not a record header and then
         * its body; and a write retried after WANT_WRITE may come from
         * another place in memory (tls_flush). */
        SSL_set_read_ahead(ssl, 1);
        SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        io_attach(&c->io, w, c->bev);
        io_go_tls(&c->io, ssl, &c->rev);
        struct timeval tv = {c->conf->timeout_client_header_ms / 1000,
                             (c->conf->timeout_client_header_ms % 1000) * 1000};
        c->action = "TLS handshaking";
        bufferevent_setcb(c->bev, NULL, NULL, tls_handshake_event, c);
        lk_io_set_timeouts(&c->io, &tv, &tv);
        c->io.hs_deadline_ms = lk_now_ms() + c->conf->timeout_client_header_ms;
        lk_io_enable(&c->io, EV_READ);
        return;
    }
    c->fd = fd;
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_DEFER_CALLBACKS);
    if (c->bev == NULL) {
        lk_conn_close(c);
        return;
    }
    io_attach(&c->io, w, c->bev);
    io_go_plain(&c->io, &c->rev);
    ops->start(c);
}

static void
resume_accept(evutil_socket_t fd, short what, void *arg)
{
    evconnlistener_enable(arg);
}

static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
    struct lk_listen *ls = arg;
    const struct lk_bind *b = ls->b;
    int err = EVUTIL_SOCKET_ERROR();

    /* EMFILE/ENFILE: stay up; the listener retries on the next event.  Pause
     * it briefly so that a full fd table does not spin the loop. */
    lk_log(LK_ERR, NULL, "accept on %s: %s", b->text, evutil_socket_error_to_string(err));
    evconnlistener_disable(l);
    struct timeval tv = {0, 100000};
    /* The listener's own event: a reload or a drain that closes the
     * listener first cancels it. */
    if (ls->resume == NULL)
        ls->resume = evtimer_new(evconnlistener_get_base(l), resume_accept, l);
    event_add(ls->resume, &tv);
}

/* Closes a listener (ls: what its callbacks get). */
static void
listener_free(struct evconnlistener *l, struct lk_listen *ls)
{
    if (ls->resume != NULL)
        event_free(ls->resume);
    ls->resume = NULL;
    evconnlistener_free(l);
}

/* Routing ----------------------------------------------------------------- */

/* Splits a Host header value or SNI into host (no brackets, no trailing
 * dot) and port (0 when absent).  -1 if the port is malformed. */
static int
split_host(struct lk_str h, struct lk_str *host, unsigned *port)
{
    struct lk_str p = LK_STR_NULL;

    *port = 0;
    if (h.len > 0 && h.p[0] == '[') {
        const char *e = memchr(h.p, ']', h.len);
        if (e == NULL)
            return -1;
        *host = lk_str_make(h.p + 1, (size_t)(e - h.p - 1));
        p = lk_str_skip(h, (size_t)(e - h.p) + 1);
        if (p.len > 0 && p.p[0] != ':')
            return -1;
        p = lk_str_skip(p, 1);
    } else {
        const char *colon = memchr(h.p, ':', h.len);
        *host = h;
        if (colon != NULL) {
            host->len = (size_t)(colon - h.p);
            p = lk_str_skip(h, host->len + 1);
        }
    }
    if (host->len > 0 && host->p[host->len - 1] == '.')
        host->len--; /* absolute FQDN */
    if (p.p != NULL && p.len == 0 && h.p[h.len - 1] == ':')
        return 0; /* "host:" means the default port */
    for (size_t i = 0; i < p.len; i++) {
        if (p.p[i] < '0' || p.p[i] > '9' || *port > 6553)
            return -1;
        *port = *port * 10 + (unsigned)(p.p[i] - '0');
    }
    return *port > 65535 ? -1 : 0;
}

/* The vhost named by h (a port, when given, must match too); NULL if none.
 * A Kafka broker.pattern's vhost takes the names the pattern spells, after
 * every vhost named outright. */
static const struct lk_vhost *
find_vhost(const struct lk_bind *b, struct lk_str h)
{
    struct lk_str host;
    unsigned port;
    int32_t id;

    if (split_host(h, &host, &port) != 0)
        return NULL;
    for (size_t i = 0; i < b->nvhosts; i++)
        if (lk_str_eqi(lk_str_c(b->vhosts[i].host), host) &&
            (port == 0 || port == b->vhosts[i].port))
            return &b->vhosts[i];
    for (size_t i = 0; i < b->nvhosts; i++)
        if (b->vhosts[i].pattern != NULL &&
            lk_kafka_pattern_match(b->vhosts[i].pattern, host,
                                   port != 0 ? (uint16_t)port : b->vhosts[i].port, &id))
            return &b->vhosts[i];
    return NULL;
}

const struct lk_vhost *
lk_route(const struct lk_bind *b, struct lk_str sni, struct lk_str host, int host_must_match)
{
    const struct lk_vhost *by_sni = NULL, *by_host = NULL;

    if (host_must_match && find_vhost(b, host) == NULL)
        return NULL;
    if (b->nvhosts == 1)
        return &b->vhosts[0]; /* an unshared socket: the bound address decides */
    /* On a shared socket whatever the client names must be mapped, and SNI
     * and Host must agree (CONTRACT §6: never forwarded elsewhere). */
    if (sni.len != 0 && (by_sni = find_vhost(b, sni)) == NULL)
        return NULL;
    if (host.len != 0 && (by_host = find_vhost(b, host)) == NULL)
        return NULL;
    if (by_sni != NULL && by_host != NULL && by_sni != by_host)
        return NULL;
    return by_sni != NULL ? by_sni : by_host;
}

/* Broker health ----------------------------------------------------------- */

int
lk_broker_up(const struct lk_runtime *rt, const struct lk_broker *b)
{
    const struct lk_broker_health *h = &rt->health[b->index];

    /* check_down counts only while checks run: a reload that turns them
     * off must not leave a broker out with nothing to readmit it. */
    if (b->cluster->health.check != LK_HEALTH_CHECK_OFF &&
        __atomic_load_n(&h->check_down, __ATOMIC_RELAXED))
        return 0;
    return __atomic_load_n(&h->retry_after_ms, __ATOMIC_RELAXED) <= lk_now_ms();
}

unsigned
lk_broker_fails(const struct lk_runtime *rt, const struct lk_broker *b)
{
    return __atomic_load_n(&rt->health[b->index].fails, __ATOMIC_RELAXED);
}

unsigned
lk_broker_check_fails(const struct lk_runtime *rt, const struct lk_broker *b)
{
    return __atomic_load_n(&rt->health[b->index].check_fails, __ATOMIC_RELAXED);
}

const struct lk_broker *
lk_pick_broker(struct lk_runtime *rt, const struct lk_cluster *cl, enum lk_scheme family)
{
    const struct lk_broker *any = NULL;

    if (cl->nbrokers == 0)
        return NULL;
    unsigned start = __atomic_fetch_add(&rt->rr[cl->index], 1, __ATOMIC_RELAXED);
    for (size_t k = 0; k < cl->nbrokers; k++) {
        const struct lk_broker *b = cl->brokers[(start + k) % cl->nbrokers];
        /* A broker without an internal address of the family (a map of
         * binary addresses only, for HTTP) is never one to send it to. */
        if (lk_listener_pick(b->internal, family, 0) == NULL)
            continue;
        if (lk_broker_up(rt, b))
            return b;
        if (any == NULL)
            any = b;
    }
    /* All are failing: try anyway rather than refuse outright. */
    return any;
}

void
lk_broker_connect_result(struct lk_runtime *rt, const struct lk_broker *b, int ok)
{
    struct lk_broker_health *h = &rt->health[b->index];
    const struct lk_health_conf *hc = &b->cluster->health;

    if (ok) {
        if (__atomic_exchange_n(&h->fails, 0, __ATOMIC_RELAXED) != 0)
            __atomic_store_n(&h->retry_after_ms, 0, __ATOMIC_RELAXED);
        return;
    }
    unsigned fails = __atomic_add_fetch(&h->fails, 1, __ATOMIC_RELAXED);
    if (fails < hc->fails)
        return;
    /* health.backoff, doubled per failure past the threshold, capped;
     * the shift is bounded so that it cannot overflow. */
    unsigned extra = fails - hc->fails;
    long long backoff = (long long)hc->backoff_ms << (extra < 20 ? extra : 20);
    if (backoff > hc->backoff_max_ms)
        backoff = hc->backoff_max_ms;
    __atomic_store_n(&h->retry_after_ms, lk_now_ms() + backoff, __ATOMIC_RELAXED);
    lk_log(fails == hc->fails ? LK_WARN : LK_DEBUG, NULL,
           "broker %s: %u connect failure%s in a row: out of rotation for %lld ms", b->name, fails,
           fails == 1 ? "" : "s", backoff);
}

void
lk_broker_check_result(struct lk_runtime *rt, const struct lk_broker *b, int ok)
{
    struct lk_broker_health *h = &rt->health[b->index];

    if (ok) {
        __atomic_store_n(&h->check_fails, 0, __ATOMIC_RELAXED);
        /* It takes connections again: whatever clients saw before is past. */
        lk_broker_connect_result(rt, b, 1);
        if (__atomic_exchange_n(&h->check_down, 0, __ATOMIC_RELAXED))
            lk_log(LK_WARN, NULL, "broker %s: health check passed: back in rotation", b->name);
        return;
    }
    unsigned fails = __atomic_add_fetch(&h->check_fails, 1, __ATOMIC_RELAXED);
    if (fails >= b->cluster->health.fails &&
        !__atomic_exchange_n(&h->check_down, 1, __ATOMIC_RELAXED))
        lk_log(LK_WARN, NULL, "broker %s: %u health check%s failed in a row: out of rotation",
               b->name, fails, fails == 1 ? "" : "s");
}

/* Upstreams --------------------------------------------------------------- */

static int
host_is_ip(const char *host)
{
    struct in6_addr a6;
    struct in_addr a4;

    return inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
}

/* FNV-1a over what tells keys apart most often: host, port and scheme
 * (equal keys hash equally; the chain compares them in full). */
static size_t
key_hash(const struct lk_upstream_key *k)
{
    uint32_t h = 2166136261u;

    for (const char *p = k->host != NULL ? k->host : ""; *p != '\0'; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ k->port) * 16777619u;
    h = (h ^ (unsigned)k->scheme) * 16777619u;
    return h;
}

void
lk_upstream_key_make(struct lk_upstream_key *k, const struct lk_runtime *rt,
                     const struct lk_cluster *cl, const struct lk_url *addr)
{
    memset(k, 0, sizeof(*k));
    k->rt = rt;
    k->cluster = cl;
    k->scheme = addr->scheme;
    k->port = addr->port;
    k->host = addr->host;
    k->hash = key_hash(k);
    if (!lk_scheme_is_tls(addr->scheme))
        return;
    k->sni = host_is_ip(addr->host) ? NULL : addr->host;
    k->verified = rt->conf->upstream_verify ? addr->host : NULL;
    k->alpn_http = addr->scheme == LK_SCHEME_HTTPS;
}

static int
str_eq(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

int
lk_upstream_key_eq(const struct lk_upstream_key *a, const struct lk_upstream_key *b)
{
    return a->hash == b->hash && a->rt == b->rt && a->cluster == b->cluster &&
           a->scheme == b->scheme && a->port == b->port &&
           str_eq(a->host, b->host) && str_eq(a->sni, b->sni) &&
           str_eq(a->verified, b->verified) && a->alpn_http == b->alpn_http;
}

void
lk_idle_pool_init(struct lk_idle_pool *p, size_t nkeys)
{
    size_t n = 16;

    while (n < nkeys * 2 && n < ((size_t)1 << 20))
        n *= 2;
    p->slots = lk_xcalloc(n, sizeof(*p->slots));
    p->nslots = n;
}

/* The list of key k in p; with create, made if p has none.  NULL if none. */
static struct lk_idle_list *
idle_list(struct lk_idle_pool *p, const struct lk_upstream_key *k, int create)
{
    if (p->slots == NULL)
        return NULL;
    struct lk_idle_list **slot = &p->slots[k->hash & (p->nslots - 1)];
    for (struct lk_idle_list *il = *slot; il != NULL; il = il->next)
        if (lk_upstream_key_eq(&il->key, k))
            return il;
    if (!create)
        return NULL;
    struct lk_idle_list *il = lk_xcalloc(1, sizeof(*il));
    il->key = *k;
    il->next = *slot;
    *slot = il;
    return il;
}

unsigned
lk_idle_pool_count(const struct lk_idle_pool *p, const struct lk_upstream_key *k)
{
    const struct lk_idle_list *il = idle_list((struct lk_idle_pool *)p, k, 0);
    return il != NULL ? il->count : 0;
}

void
lk_upstream_free(struct lk_upstream *u)
{
    if (u == NULL)
        return;
    if (u->ready_ev != NULL)
        event_free(u->ready_ev); /* cancels a pending report */
    lk_dial_cancel(&u->dial); /* a name lookup may still be under way */
    if (u->bev != NULL) {
        io_detach(&u->io);
        bufferevent_free(u->bev);
    }
    free(u);
}

static void
idle_remove(struct lk_upstream *u)
{
    struct lk_idle_list *il = idle_list(&u->w->idle, &u->key, 0);
    for (struct lk_upstream **pp = &il->head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == u) {
            *pp = u->next;
            il->count--;
            break;
        }
    }
    u->next = NULL;
    u->idle = 0;
}

/* An idle pooled connection saw data, EOF, an error or its idle timeout:
 * whatever it is, the connection is no longer reusable. */
static void
idle_read_cb(struct bufferevent *bev, void *arg)
{
    struct lk_upstream *u = arg;
    idle_remove(u);
    lk_upstream_free(u);
}

static void
idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
    idle_read_cb(bev, arg);
}

void
lk_upstream_release(struct lk_upstream *u)
{
    const struct lk_conf *conf = u->w->rt->conf;

    /* The pool holds the current generation's connections only (it goes
     * with the generation); one dialled for no key is never pooled; nor is
     * one with bytes left either way, which would reach or come from the
     * next exchange. */
    if (u->rt != u->w->rt || u->key.rt != u->rt || u->key.host == NULL ||
        conf->upstream_idle_max == 0 || evbuffer_get_length(bufferevent_get_input(u->bev)) != 0 ||
        evbuffer_get_length(bufferevent_get_output(u->bev)) != 0) {
        lk_upstream_free(u);
        return;
    }
    struct lk_idle_list *il = idle_list(&u->w->idle, &u->key, 1);
    if (il == NULL || il->count >= conf->upstream_idle_max) {
        lk_upstream_free(u);
        return;
    }
    struct timeval tv = {conf->timeout_idle_ms / 1000, (conf->timeout_idle_ms % 1000) * 1000};
    u->ready_cb = NULL;
    u->arg = NULL;
    u->idle = 1;
    bufferevent_setcb(u->bev, idle_read_cb, NULL, idle_event_cb, u);
    bufferevent_setwatermark(u->bev, EV_READ, 0, 0);
    bufferevent_setwatermark(u->bev, EV_WRITE, 0, 0);
    lk_io_set_timeouts(&u->io, &tv, NULL);
    lk_io_enable(&u->io, EV_READ);
    u->next = il->head;
    il->head = u;
    il->count++;
}

static void
connect_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct lk_upstream *u = arg;
    struct lk_runtime *rt = u->rt;

    if (what & BEV_EVENT_CONNECTED) {
        /* Before the first request: lookout writes a head and then its body
         * as it comes, and Nagle would hold the body until the broker ACKs
         * the head, which a kept-alive peer delays by 40 ms. */
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        lk_broker_connect_result(rt, u->broker, 1);
        bufferevent_set_timeouts(bev, NULL, NULL);
        if (!lk_scheme_is_tls(u->addr->scheme))
            io_go_plain(&u->io, NULL); /* connected: direct reads and writes from now */
        bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
        u->ready_cb(u, LK_UP_CONNECTED, u->arg);
        return;
    }
    char tls_reason[256] = "";
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    unsigned long e = ssl != NULL ? bufferevent_get_openssl_error(bev) : 0;
    if (what & BEV_EVENT_TIMEOUT) {
        u->error = lk_err_connect_timeout;
    } else if (e != 0 || (ssl != NULL && SSL_get_verify_result(ssl) != X509_V_OK)) {
        /* libevent moved OpenSSL's errors into the bufferevent's queue */
        long vr = SSL_get_verify_result(ssl);
        u->error = lk_err_tls;
        if (vr != X509_V_OK)
            snprintf(tls_reason, sizeof(tls_reason), "certificate verify failed: %s",
                     X509_verify_cert_error_string(vr));
        else
            ERR_error_string_n(e, tls_reason, sizeof(tls_reason));
        while (bufferevent_get_openssl_error(bev) != 0)
            ;
    } else {
        u->error = u->dial.error != NULL ? u->dial.error : lk_err_connect;
    }
    ERR_clear_error();
    int err = EVUTIL_SOCKET_ERROR();
    int dns = lk_dial_dns_error(&u->dial, bev);
    const char *why = tls_reason[0] != '\0' ? tls_reason
                      : dns != 0             ? evutil_gai_strerror(dns)
                      : err != 0             ? evutil_socket_error_to_string(err)
                                             : "";
    /* A dial refused by internal_networks is logged and counted by lk_dial. */
    if (u->error != lk_err_outside_networks) {
        lk_log(LK_WARN, NULL, "broker %s at %s: %s%s%s", u->broker->name, u->addr->text, u->error,
               why[0] != '\0' ? ": " : "", why);
        lk_stats_upstream_error(rt, u->broker, u->error);
    }
    lk_broker_connect_result(rt, u->broker, 0);
    u->ready_cb(u, what & BEV_EVENT_TIMEOUT ? LK_UP_TIMEOUT : LK_UP_ERROR, u->arg);
}

static void
reuse_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_upstream *u = arg;
    u->ready_cb(u, LK_UP_CONNECTED, u->arg);
}

/* The SSL for key k: exactly what the key says, so that a connection is
 * what its key describes.  No session is set: every upstream handshake is
 * a full one, and no session of one broker is ever offered to another. */
static SSL *
ssl_for_key(SSL_CTX *ctx, const struct lk_upstream_key *k)
{
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL)
        return NULL;
    if (k->sni != NULL)
        SSL_set_tlsext_host_name(ssl, k->sni);
    if (k->alpn_http) {
        static const unsigned char h11[] = "\x08http/1.1";
        SSL_set_alpn_protos(ssl, h11, sizeof(h11) - 1);
    }
    if (k->verified != NULL) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        if (host_is_ip(k->verified))
            X509_VERIFY_PARAM_set1_ip_asc(vp, k->verified);
        else
            X509_VERIFY_PARAM_set1_host(vp, k->verified, 0);
    }
    return ssl;
}

SSL *
lk_upstream_ssl_new(struct lk_runtime *rt, const struct lk_url *addr)
{
    struct lk_upstream_key k;

    lk_upstream_key_make(&k, rt, NULL, addr); /* the SSL does not depend on the cluster */
    return ssl_for_key(rt->client_ctx, &k);
}

struct lk_upstream *
lk_upstream_get(struct lk_worker *w, struct lk_runtime *rt, const struct lk_broker *b,
                enum lk_scheme scheme, int client_tls, lk_upstream_ready_cb cb, void *arg)
{
    const struct lk_url *addr = lk_broker_upstream(b, scheme, client_tls);
    struct lk_upstream_key key;
    if (addr == NULL)
        return NULL; /* no internal address of that family */
    lk_upstream_key_make(&key, rt, b->cluster, addr);
    /* Only a connection dialled for this very key: the same address and
     * protocol, TLS identity, cluster (its internal_networks) and
     * generation (an exchange still on an older generation finds none,
     * since the pool holds the worker's). */
    struct lk_idle_list *il = idle_list(&w->idle, &key, 0);
    struct lk_upstream *u = il != NULL ? il->head : NULL;
    const struct lk_conf *conf = rt->conf;

    if (u != NULL) {
        assert(lk_upstream_key_eq(&u->key, &key));
        idle_remove(u);
        u->reused = 1;
        u->ready_cb = cb;
        u->arg = arg;
        /* Reading stays on (turning it off and on again costs two
         * epoll_ctl calls per exchange): nothing is read before the report
         * below, which runs in this loop iteration. */
        bufferevent_setcb(u->bev, NULL, NULL, NULL, NULL);
        /* Report from the loop, never re-entrantly from the caller's stack;
         * with u's own event, so that freeing u first cancels the report. */
        if (u->ready_ev == NULL)
            u->ready_ev = evtimer_new(w->base, reuse_cb, u);
        event_active(u->ready_ev, EV_TIMEOUT, 1);
        return u;
    }

    u = lk_xcalloc(1, sizeof(*u));
    u->w = w;
    u->rt = rt;
    u->broker = b;
    u->addr = addr;
    u->key = key;
    u->ready_cb = cb;
    u->arg = arg;
    int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
    if (lk_scheme_is_tls(u->addr->scheme)) {
        SSL *ssl = ssl_for_key(rt->client_ctx, &u->key);
        if (ssl == NULL) {
            free(u);
            return NULL;
        }
        u->bev = bufferevent_openssl_socket_new(w->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, opts);
        if (u->bev == NULL) {
            SSL_free(ssl);
            free(u);
            return NULL;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(u->bev, 1);
    } else {
        u->bev = bufferevent_socket_new(w->base, -1, opts);
        if (u->bev == NULL) {
            free(u);
            return NULL;
        }
    }
    io_attach(&u->io, w, u->bev);
    bufferevent_setcb(u->bev, NULL, NULL, connect_event_cb, u);
    bufferevent_enable(u->bev, EV_READ | EV_WRITE);
    /* Any failure is reported through connect_event_cb from the loop. */
    lk_dial_start(&u->dial, u->bev, w->dns, rt, b, u->addr, conf->timeout_connect_ms);
    return u;
}

/* Workers ------------------------------------------------------------------ */

/* Binds b and listens with the configured backlog (the kernel caps it at
 * net.core.somaxconn).  The caller hands the socket to evconnlistener_new
 * with a backlog of 0: given -1, libevent would listen() again with 128. */
static evutil_socket_t
bind_socket(const struct lk_bind *b, int backlog, char *err, size_t errlen)
{
    evutil_socket_t fd = socket(b->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0)
        goto fail;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (b->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&b->addr, b->addrlen) != 0)
        goto fail;
    if (listen(fd, backlog) != 0)
        goto fail;
    return fd;
fail:
    snprintf(err, errlen, "cannot listen on %s: %s", b->text, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Listens on b on worker w, ls being what the callbacks get. */
static struct evconnlistener *
listen_on(struct lk_worker *w, const struct lk_bind *b, struct lk_listen *ls, char *err,
          size_t errlen)
{
    evutil_socket_t fd = bind_socket(b, w->rt->conf->listen_backlog, err, errlen);
    struct evconnlistener *l;

    if (fd < 0)
        return NULL;
    ls->w = w;
    ls->b = b;
    ls->st = lk_stats_frontend(b->text, b->proto);
    l = evconnlistener_new(w->base, accept_cb, ls, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
                           0, fd);
    if (l == NULL) {
        close(fd);
        snprintf(err, errlen, "cannot listen on %s", b->text);
        return NULL;
    }
    evconnlistener_set_error_cb(l, accept_error_cb);
    return l;
}

/* Listens on the binds added at run time that w does not have yet.  Only
 * the worker that added them logs a failure; the others would repeat it. */
static void
sync_binds(struct lk_worker *w, int log_errors)
{
    const struct lk_bind *nb[16];
    size_t n;

    if (w->draining)
        return; /* stopping: no new listeners */
    while ((n = lk_dyn_binds(w->rt, w->ndyn_listen, nb, 16)) != 0) {
        for (size_t i = 0; i < n; i++) {
            struct lk_dyn_listen *d = lk_xcalloc(1, sizeof(*d));
            char err[256];

            d->l = listen_on(w, nb[i], &d->ls, err, sizeof(err));
            if (d->l == NULL && log_errors)
                lk_log(LK_ERR, NULL, "%s; the node it was bound for is not served", err);
            else if (d->l != NULL && log_errors)
                lk_log(LK_INFO, NULL, "listening on %s (%skafka, for %s)", nb[i]->text,
                       nb[i]->tls ? "TLS, " : "", nb[i]->vhosts[0].host);
            d->next = w->dyn_listen;
            w->dyn_listen = d;
        }
        w->ndyn_listen += n;
    }
}

void
lk_workers_binds_changed(struct lk_worker *w)
{
    sync_binds(w, 1);
    for (int i = 0; i < nworkers; i++)
        if (&workers[i] != w && write(workers[i].stop_pipe[1], "b", 1) != 1)
            lk_log(LK_ERR, NULL, "cannot reach worker %d: %s", i, strerror(errno));
}

/* Closes the listeners on binds learned at run time: they belong to w's
 * generation's lk_dyn, which the next one does not inherit. */
static void
drop_dyn_listeners(struct lk_worker *w)
{
    while (w->dyn_listen != NULL) {
        struct lk_dyn_listen *d = w->dyn_listen;
        w->dyn_listen = d->next;
        if (d->l != NULL)
            listener_free(d->l, &d->ls);
        free(d);
    }
    w->ndyn_listen = 0;
}

void
lk_idle_pool_free(struct lk_idle_pool *p)
{
    for (size_t i = 0; i < p->nslots; i++)
        while (p->slots[i] != NULL) {
            struct lk_idle_list *il = p->slots[i];
            while (il->head != NULL) {
                struct lk_upstream *u = il->head;
                il->head = u->next;
                u->next = NULL;
                u->idle = 0;
                lk_upstream_free(u);
            }
            p->slots[i] = il->next;
            free(il);
        }
    free(p->slots);
    p->slots = NULL;
    p->nslots = 0;
}

/* Room for the keys a config's brokers are dialled by: one per scheme of
 * each broker's internal listener, or two. */
static size_t
pool_keys(const struct lk_conf *conf)
{
    return conf->nbrokers * 2 + 2;
}

/*
 * A new generation was published: w takes it.  Its listeners are matched
 * to the new binds by address, TLS-ness and protocol: a kept one goes on
 * accepting on the same socket (its callbacks get the new bind), so no
 * client is refused in between; a new bind gets a socket of its own
 * (SO_REUSEPORT, like every worker's); what is left closes.  Connections
 * keep their own reference to the old generation.
 */
static void
worker_switch(struct lk_worker *w)
{
    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *rt = lk_runtime_ref(cur_rt);
    pthread_mutex_unlock(&cur_mu);
    struct lk_runtime *old = w->rt;

    if (rt == old || w->draining) {
        lk_runtime_unref(rt);
        return;
    }
    const struct lk_conf *conf = rt->conf;
    struct evconnlistener **ls = lk_xcalloc(conf->nbinds + 1, sizeof(*ls));
    struct lk_listen *lsn = lk_xcalloc(conf->nbinds + 1, sizeof(*lsn));
    size_t n = 0;
    for (size_t k = 0; k < conf->nbinds; k++) {
        const struct lk_bind *b = conf->binds[k];
        size_t i;
        for (i = 0; i < w->nlisteners; i++)
            if (w->listeners[i] != NULL && same_bind(w->listen[i].b, b))
                break;
        if (i < w->nlisteners) {
            ls[n] = w->listeners[i];
            w->listeners[i] = NULL;
            lsn[n] = w->listen[i];
            lsn[n].b = b;
            evconnlistener_set_cb(ls[n], accept_cb, &lsn[n]);
            n++;
            continue;
        }
        char err[256];
        /* lk_workers_reload bound it once already: a failure is a race. */
        if ((ls[n] = listen_on(w, b, &lsn[n], err, sizeof(err))) == NULL) {
            lk_log(LK_ERR, NULL, "worker %d: %s; not serving it", w->id, err);
            continue;
        }
        if (w->id == 0)
            lk_log(LK_INFO, NULL, "listening on %s (%s%s)", b->text, b->tls ? "TLS, " : "",
                   proto_for(b->proto)->name);
        n++;
    }
    for (size_t i = 0; i < w->nlisteners; i++)
        if (w->listeners[i] != NULL)
            listener_free(w->listeners[i], &w->listen[i]); /* removed: its connections finish */
    free(w->listeners);
    free(w->listen);
    w->listeners = ls;
    w->listen = lsn;
    w->nlisteners = n;
    drop_dyn_listeners(w);
    lk_idle_pool_free(&w->idle); /* dialled for the old generation: their keys name it */
    lk_idle_pool_init(&w->idle, pool_keys(conf));
    w->rt = rt;
    lk_runtime_unref(old);
    sync_binds(w, 0); /* nodes another worker learned on rt already */
}

static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;

    if (w->nconns != 0 && lk_now_ms() < atomic_load(&drain_deadline_ms))
        return;
    if (w->nconns != 0)
        lk_log(LK_WARN, NULL, "worker %d: drain_timeout: closing %u connection%s still open", w->id,
               w->nconns, w->nconns == 1 ? "" : "s");
    while (w->conns != NULL)
        lk_conn_close(w->conns);
    if (w->id == 0 && atomic_load(&workers_draining) > 1 &&
        lk_now_ms() < atomic_load(&drain_deadline_ms) + 1000)
        return; /* the others have not finished (nor passed the deadline) */
    if (!w->drained) {
        w->drained = 1;
        atomic_fetch_sub(&workers_draining, 1);
    }
    event_base_loopbreak(w->base);
}

/* lookout is stopping: w stops accepting and lets its connections finish. */
static void
worker_drain(struct lk_worker *w)
{
    struct timeval tick = {0, 50000};

    if (w->draining)
        return; /* a second signal: only the deadline changed */
    w->draining = 1;
    /* Made first: the last close below wakes it. */
    w->drain_ev = event_new(w->base, -1, EV_PERSIST, drain_cb, w);
    event_add(w->drain_ev, &tick);
    for (size_t i = 0; i < w->nlisteners; i++)
        listener_free(w->listeners[i], &w->listen[i]);
    w->nlisteners = 0;
    drop_dyn_listeners(w);
    lk_idle_pool_free(&w->idle);
    lk_idle_pool_init(&w->idle, 0); /* what exchanges still under way release */
    for (struct lk_conn *c = w->conns, *next; c != NULL; c = next) {
        const struct lk_proto_ops *ops = proto_for(c->bind->proto);
        next = c->next;
        if (c->closing)
            continue;
        /* Parked, still in its TLS handshake, or a protocol without a say:
         * nothing under way. */
        if (c->bev == NULL || c->proto == NULL || ops->drain == NULL)
            lk_conn_close(c);
        else
            ops->drain(c);
    }
    if (w->nconns == 0)
        event_active(w->drain_ev, EV_TIMEOUT, 1);
}

/* A byte from another thread: 's' stops the loop, 'b' takes new binds, 'r'
 * a new generation, 'd' drains. */
static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;
    char bytes[64];
    ssize_t n = read(fd, bytes, sizeof(bytes));

    for (ssize_t i = 0; i < n; i++) {
        if (bytes[i] == 'b')
            sync_binds(w, 0);
        else if (bytes[i] == 'r')
            worker_switch(w);
        else if (bytes[i] == 'd')
            worker_drain(w);
        else
            event_base_loopbreak(w->base);
    }
}

/* One byte down every worker's pipe. */
static void
tell_workers(char what)
{
    for (int i = 0; i < nworkers; i++)
        if (write(workers[i].stop_pipe[1], &what, 1) != 1)
            lk_log(LK_ERR, NULL, "cannot reach worker %d: %s", i, strerror(errno));
}

/* Whether b can be bound now (it is not yet): bound without listening, so
 * that no connection lands on a socket that is closed again at once. */
static int
can_bind(const struct lk_bind *b, char *err, size_t errlen)
{
    evutil_socket_t fd = socket(b->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, r = -1;

    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        if (b->addr.ss_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        r = bind(fd, (const struct sockaddr *)&b->addr, b->addrlen);
    }
    if (r != 0)
        snprintf(err, errlen, "cannot listen on %s: %s", b->text, strerror(errno));
    if (fd >= 0)
        close(fd);
    return r;
}

int
lk_workers_can_bind(const struct lk_conf *conf, char *err, size_t errlen)
{
    char why[256];

    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *cur = cur_rt != NULL ? lk_runtime_ref(cur_rt) : NULL;
    pthread_mutex_unlock(&cur_mu);
    int rc = 0;
    for (size_t i = 0; cur != NULL && i < conf->nbinds && rc == 0; i++) {
        const struct lk_bind *b = conf->binds[i];
        if (find_bind(cur->conf, b) == NULL && can_bind(b, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "%s:%d: %s", conf->file, b->vhosts[0].line, why);
            rc = -1;
        }
    }
    lk_runtime_unref(cur);
    return rc;
}

int
lk_workers_reload(struct lk_runtime *rt, struct lk_reload_stats *st, char *err, size_t errlen)
{
    const struct lk_conf *conf = rt->conf;

    if (atomic_load(&draining)) {
        snprintf(err, errlen, "%s: lookout is stopping", conf->file);
        return -1;
    }
    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *old = cur_rt;
    pthread_mutex_unlock(&cur_mu);
    const struct lk_conf *oc = old->conf;
    memset(st, 0, sizeof(*st));
    if (lk_workers_can_bind(conf, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < conf->nbinds; i++)
        if (find_bind(oc, conf->binds[i]) != NULL)
            st->kept++;
    st->added = conf->nbinds - st->kept;
    st->removed = oc->nbinds - st->kept;
    /* A broker that was failing still is: health goes over by name. */
    for (size_t i = 0; i < conf->nbrokers; i++)
        for (size_t j = 0; j < oc->nbrokers; j++)
            if (strcmp(conf->brokers[i]->name, oc->brokers[j]->name) == 0) {
                struct lk_broker_health *h = &old->health[j];
                rt->health[i].fails = __atomic_load_n(&h->fails, __ATOMIC_RELAXED);
                rt->health[i].retry_after_ms =
                    __atomic_load_n(&h->retry_after_ms, __ATOMIC_RELAXED);
                rt->health[i].check_fails = __atomic_load_n(&h->check_fails, __ATOMIC_RELAXED);
                rt->health[i].check_down = __atomic_load_n(&h->check_down, __ATOMIC_RELAXED);
                break;
            }
    rt->generation = old->generation + 1;
    pthread_mutex_lock(&cur_mu);
    cur_rt = rt;
    pthread_mutex_unlock(&cur_mu);
    lk_runtime_unref(old); /* the workers hold theirs until they switch */
    tell_workers('r');
    return 0;
}

struct lk_runtime *
lk_workers_runtime(void)
{
    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *rt = cur_rt != NULL ? lk_runtime_ref(cur_rt) : NULL;
    pthread_mutex_unlock(&cur_mu);
    return rt;
}

uint64_t
lk_workers_generation(void)
{
    pthread_mutex_lock(&cur_mu);
    uint64_t g = cur_rt != NULL ? cur_rt->generation : 0;
    pthread_mutex_unlock(&cur_mu);
    return g;
}

void
lk_workers_drain(unsigned timeout_ms)
{
    long long deadline = lk_now_ms() + timeout_ms;
    long long was = atomic_load(&drain_deadline_ms);

    /* A second signal may bring the end nearer, never put it off. */
    while ((was == 0 || deadline < was) &&
           !atomic_compare_exchange_weak(&drain_deadline_ms, &was, deadline))
        ;
    if (atomic_exchange(&draining, 1) == 0) {
        atomic_store(&workers_draining, nworkers);
        tell_workers('d');
    }
}

int
lk_workers_draining(void)
{
    return atomic_load(&draining);
}

int
lk_workers_start(struct lk_runtime *rt, int n, char *err, size_t errlen)
{
    const struct lk_conf *conf = rt->conf;

    /* Each worker's loop is its own: nothing but the stop pipe crosses
     * threads, so the bases take no locks (they cost a mutex pair on every
     * event_add and evbuffer callback). */
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    /* Bodies pass through in chains of up to LK_READ_MAX: with glibc's
     * default 128 KiB trim threshold, freeing them gave memory back to the
     * kernel and took it again, a brk per large exchange.  Free memory up
     * to 8 MiB stays with the process instead. */
    mallopt(M_TRIM_THRESHOLD, 8 * 1024 * 1024);
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
    nworkers = n;
    workers = lk_xcalloc((size_t)n, sizeof(*workers));
    rt->generation = 1;
    cur_rt = lk_runtime_ref(rt);
    for (int i = 0; i < n; i++) {
        struct lk_worker *w = &workers[i];
        w->id = i;
        w->rt = lk_runtime_ref(rt);
        w->stop_pipe[0] = w->stop_pipe[1] = -1;
        w->base = event_base_new_with_config(cfg);
        if (w->base == NULL || pipe2(w->stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
            snprintf(err, errlen, "cannot create an event loop");
            goto fail;
        }
        w->dns = evdns_base_new(w->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                             EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (w->dns == NULL) /* no resolv.conf: IP literals still work */
            w->dns = evdns_base_new(w->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        lk_idle_pool_init(&w->idle, pool_keys(conf));
        w->listeners = lk_xcalloc(conf->nbinds + 1, sizeof(*w->listeners));
        w->listen = lk_xcalloc(conf->nbinds + 1, sizeof(*w->listen));
        w->flush_ev = event_new(w->base, -1, 0, flush_cb, w);
        lk_hold_init(&w->hold, w->base);
        w->tls_out = lk_xmalloc(LK_TLS_RECORD);
        w->stop_ev = event_new(w->base, w->stop_pipe[0], EV_READ | EV_PERSIST, stop_cb, w);
        event_add(w->stop_ev, NULL);
        for (size_t k = 0; k < conf->nbinds; k++) {
            const struct lk_bind *b = conf->binds[k];
            struct evconnlistener *l = listen_on(w, b, &w->listen[w->nlisteners], err, errlen);
            if (l == NULL)
                goto fail;
            w->listeners[w->nlisteners++] = l;
            if (i == 0)
                lk_log(LK_INFO, NULL, "listening on %s (%s%s)", b->text, b->tls ? "TLS, " : "",
                       proto_for(b->proto)->name);
        }
    }
    event_config_free(cfg);
    return 0;
fail:
    event_config_free(cfg);
    return -1;
}

static void *
worker_main(void *arg)
{
    struct lk_worker *w = arg;
    lk_stats_set_shard(w->id);
    event_base_dispatch(w->base);
    return NULL;
}

void
lk_workers_run(void)
{
    for (int i = 1; i < nworkers; i++)
        pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
    worker_main(&workers[0]);
    for (int i = 1; i < nworkers; i++)
        pthread_join(workers[i].thread, NULL);
}

struct event_base *
lk_workers_main_base(void)
{
    return workers[0].base;
}

void
lk_workers_stop(void)
{
    /* A byte down each worker's pipe: the bases are lock-free, so no
     * event_active across threads.  Signal handlers call this through the
     * main loop's evsignal. */
    tell_workers('s');
}

void
lk_workers_free(void)
{
    for (int i = 0; i < nworkers; i++) {
        struct lk_worker *w = &workers[i];
        for (size_t k = 0; k < w->nlisteners; k++)
            listener_free(w->listeners[k], &w->listen[k]);
        drop_dyn_listeners(w);
        w->draining = 0; /* no drain_ev wake-ups from the closes below */
        while (w->conns != NULL)
            lk_conn_close(w->conns);
        lk_idle_pool_free(&w->idle);
        if (w->drain_ev != NULL)
            event_free(w->drain_ev);
        lk_runtime_unref(w->rt);
        w->rt = NULL;
        for (size_t k = 0; k < w->nconn_blocks; k++)
            free(w->conn_blocks[k]);
        free(w->conn_blocks);
        free(w->listeners);
        free(w->listen);
        event_free(w->stop_ev);
        event_free(w->flush_ev);
        lk_hold_free(&w->hold);
        free(w->tls_out);
        close(w->stop_pipe[0]);
        close(w->stop_pipe[1]);
        if (w->dns != NULL)
            evdns_base_free(w->dns, 0);
        event_base_free(w->base);
    }
    free(workers);
    workers = NULL;
    nworkers = 0;
    lk_runtime_unref(cur_rt);
    cur_rt = NULL;
}
