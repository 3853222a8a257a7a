/*
 * Connection I/O: how a connection's bufferevent is driven (struct lk_io in
 * lk_io.h says why).  The worker's flush queue writes what callbacks put in
 * an output once per loop iteration; reads go straight into the input; and
 * TLS over this direct path (client connections) is OpenSSL called here,
 * record by record, rather than a TLS bufferevent.  What a client
 * connection does when it parks and wakes is the connection's (lk_conn.c),
 * reached through the worker (w->park, w->unpark) only then.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <event2/buffer.h>
#ifndef EVBUFFER_IOVEC_IS_NATIVE_
#error "io_write peeks an evbuffer into struct iovec"
#endif
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "lk_access.h"
#include "lk_clock.h"
#include "lk_conf.h"
#include "lk_io.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_runtime.h"
#include "lk_worker.h"
#ifdef LK_IO_URING
#include <string.h>
#include "lk_uring.h"
#endif


#define LK_READ_MIN (16 * 1024)
#define LK_READ_MAX (64 * 1024)

static void
io_unlink(struct lk_io *io)
{
    if (!io->queued)
        return;
#ifdef LK_IO_URING
    struct lk_io **head = io->in_round ? &io->w->flushb : &io->w->flushq;
    io->in_round = 0;
#else
    struct lk_io **head = &io->w->flushq;
#endif
    if (io->prev != NULL)
        io->prev->next = io->next;
    else
        *head = io->next;
    if (io->next != NULL)
        io->next->prev = io->prev;
    io->prev = io->next = NULL;
    io->queued = 0;
}

void
lk_io_queue(struct lk_io *io)
{
    struct lk_worker *w = io->w;

    if (io->queued)
        return;
    io->queued = 1;
    io->prev = NULL;
    io->next = w->flushq;
    if (w->flushq != NULL) {
        w->flushq->prev = io;
    } else {
        event_active(w->flush_ev, EV_TIMEOUT, 1);
        lk_access_ride = 1; /* the access lines of this iteration go with it */
    }
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
            lk_io_queue(io);
        return;
    }
    if (info->n_added == 0 && !(bufferevent_get_enabled(io->bev) & EV_WRITE))
        return;
    lk_io_queue(io);
}

/* A connection's socket.  Plaintext and TLS client connections read with
 * their own event (io->rev), made on the bufferevent's socket, which a
 * rebinding keeps: its fd is a load, where bufferevent_getfd asks the
 * bufferevent's ops under its lock (some 60 instructions, four times an
 * exchange). */
static inline evutil_socket_t
io_fd(const struct lk_io *io)
{
    return io->rev != NULL ? event_get_fd(io->rev) : bufferevent_getfd(io->bev);
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

/* The read timeout of a plaintext socket without TLS ------------------------
 *
 * A read event with a timeout is re-armed by libevent on every read (its
 * persistent timeout counts from the last activity), and an upstream's
 * timeout changes twice per exchange (timeout.response while it answers,
 * timeout.idle in the pool): three timer-heap updates an exchange.  So the
 * read event has no timeout; a timer of its own fires at the earliest the
 * timeout could end, and only then looks at when the socket was last read
 * (re-arming for the rest if that was since).  A timeout made longer, or
 * restarted by a read, costs a clock read, not a heap update; one made
 * shorter re-arms.  TLS sockets keep the read event's own timeout (the
 * handshake deadline shortens it as it goes). */
struct lk_io_timer {
    struct event ev;
    long long last_ms;  /* the last read, or when the timeout was (re)started */
    long long armed_ms; /* when ev fires; 0: not pending */
};

static void io_read_cb(evutil_socket_t fd, short what, void *arg);

static inline int
io_lazy(const struct lk_io *io)
{
    return io->ssl == NULL;
}

static inline long long
tv_ms(const struct timeval *tv)
{
    return (long long)tv->tv_sec * 1000 + tv->tv_usec / 1000;
}

static void
io_timer_at(struct lk_io *io, long long at_ms, long long now_ms)
{
    long long left = at_ms > now_ms ? at_ms - now_ms : 0;
    struct timeval tv = {left / 1000, (left % 1000) * 1000};

    event_add(&io->tm->ev, &tv);
    io->tm->armed_ms = at_ms;
}

static void
io_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_io *io = arg;
    struct lk_io_timer *tm = io->tm;

    tm->armed_ms = 0;
    if (!io->reading || !io->has_rtv)
        return; /* switched off since: armed again when it is back */
    long long now = lk_now_ms(), due = tm->last_ms + tv_ms(&io->rtv);
    if (now < due) {
        io_timer_at(io, due, now);
        return;
    }
    io_read_cb(io_fd(io), EV_TIMEOUT, io);
}

/* The read timeout (io->rtv) starts now: the timer is armed if it would
 * fire later than the timeout ends, or not at all. */
static void
io_timer_start(struct lk_io *io)
{
    struct lk_io_timer *tm = io->tm;

    if (tm == NULL) {
        tm = io->tm = lk_xtmalloc(sizeof(*tm)); /* kept per thread once freed */
        event_assign(&tm->ev, io->w->base, -1, 0, io_timer_cb, io);
        tm->armed_ms = 0;
    }
    long long now = lk_now_ms(), due = now + tv_ms(&io->rtv);
    tm->last_ms = now;
    if (tm->armed_ms == 0 || tm->armed_ms > due)
        io_timer_at(io, due, now);
}

static void
io_timer_free(struct lk_io *io)
{
    if (io->tm == NULL)
        return;
    event_del(&io->tm->ev);
    lk_tfree(io->tm);
    io->tm = NULL;
}

/* The bufferevent writes what the kernel did not take (a plaintext socket's
 * write timeout is given to it only then). */
static void
io_bev_write(struct lk_io *io)
{
    if (io_lazy(io))
        bufferevent_set_timeouts(io->bev, NULL, io->has_wtv ? &io->wtv : NULL);
    bufferevent_enable(io->bev, EV_WRITE);
}

static int tls_flush(struct lk_io *io);
static void io_wait_write(struct lk_io *io, int on);
#ifdef LK_IO_URING
static int tls_collect(struct lk_io *io);
#endif

/* The bytes a TLS connection holds outside OpenSSL, in buffers that exist
 * only while they hold some (lk_io.h): records made and not yet taken by
 * the kernel (tls_wq), records the ring received and OpenSSL has not read
 * (tls_rq). */
#ifdef LK_IO_URING
static inline size_t
held_len(const struct evbuffer *b)
{
    return b != NULL ? evbuffer_get_length(b) : 0;
}
#define tls_wq_len(io) held_len((io)->tls_wq)
#define tls_rq_len(io) held_len((io)->tls_rq)
#else
#define tls_wq_len(io) ((void)(io), (size_t)0)
#define tls_rq_len(io) ((void)(io), (size_t)0)
#endif

/* Whether a TLS connection has input that no readiness of the socket will
 * announce: in OpenSSL, or received by the ring. */
static int
tls_pending(const struct lk_io *io)
{
#ifdef LK_IO_URING
    if (io->rx_ring && io->ring_res > (int)io->rx_off)
        return 1;
#endif
    return SSL_has_pending(io->ssl) || tls_rq_len(io) != 0;
}

/* Parks a client connection whose protocol is idle once nothing is
 * buffered anywhere (the output drained, no input, nothing held by
 * OpenSSL): the connection's own w->park does it.  1 if it parked. */
static int
io_park_if_idle(struct lk_io *io)
{
    if (!io->park_wanted)
        return 0;
    if (io->queued || io->wwait || io->handshaking || io->read_wants_write ||
        io->write_wants_read || io->ssl_end ||
        evbuffer_get_length(bufferevent_get_output(io->bev)) != 0 ||
        evbuffer_get_length(bufferevent_get_input(io->bev)) != 0 ||
        (io->ssl != NULL && tls_pending(io)) || tls_wq_len(io) != 0)
        return 0;
    io->park_wanted = 0;
    if (!io->w->park(io))
        return 0;
    io_timer_free(io); /* parked, the read event times the idle rest */
    return 1;
}

#ifdef LK_IO_URING
/* What the ring sent of buf (lk_uring_send took its start), applied as
 * evbuffer_write's result would be: drained by it (a bufferevent's output
 * is kept frozen at its start, and stays so), or the error reported
 * through the event callback (-1: io may be freed). */
static int
ring_apply(struct lk_io *io, struct evbuffer *buf, int frozen)
{
    int res = io->ring_res;

    io->ring_sent = 0;
    if (res > 0) {
        if (frozen)
            evbuffer_unfreeze(buf, 1);
        evbuffer_drain(buf, (size_t)res);
        if (frozen)
            evbuffer_freeze(buf, 1);
    }
    if (res < 0 && res != -EAGAIN && res != -EINTR) {
        /* As the bufferevent's own write would, with its errno. */
        errno = -res;
        if (io->ssl != NULL)
            io_wait_write(io, 0);
        io_report(io, BEV_EVENT_WRITING | BEV_EVENT_ERROR);
        return -1;
    }
    return 0;
}

/* ring_apply to a plaintext output.  0: drained; else what is left is on
 * its way (the next round, or the bufferevent's write when the kernel
 * lagged), or the error was reported (io may be freed). */
static int
ring_sent(struct lk_io *io, struct evbuffer *out)
{
    if (ring_apply(io, out, 1) != 0)
        return -1;
    if (evbuffer_get_length(out) == 0)
        return 0;
    if (io->ring_whole)
        lk_io_queue(io); /* more than one send takes, or more came */
    else
        io_bev_write(io);
    return -1;
}
#endif

/* out's start to fd, as evbuffer_write would write it.  Before a close
 * (fin_next), with MSG_MORE: the kernel holds the tail back, and the
 * close sends it with the FIN, in one segment rather than two, and the
 * client acknowledges both at once.  On a new connection per request that
 * is two of its twelve segments, and about a sixth of the proxy's CPU on
 * loopback, where the receiver's TCP input runs in the sender's time. */
static int
io_write(struct lk_io *io, struct evbuffer *out, evutil_socket_t fd)
{
    if (!io->fin_next)
        return evbuffer_write(out, fd);
    /* libevent's evbuffer_iovec is struct iovec where there is one: peeked
     * straight into what sendmsg takes. */
    struct iovec v[16];
    int nv = evbuffer_peek(out, -1, NULL, v, 16);
    if (nv > 16)
        nv = 16;
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)nv};
    ssize_t n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE);
    if (n > 0)
        evbuffer_drain(out, (size_t)n);
    return (int)n;
}

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
#ifdef LK_IO_URING
    if (io->ring_sent) {
        if (ring_sent(io, out) != 0)
            return;
        goto drained;
    }
#endif
    /* A socket bufferevent keeps its output's start frozen except while
     * it writes; so do we. */
    evbuffer_unfreeze(out, 1);
    int n = io_write(io, out, io_fd(io));
    evbuffer_freeze(out, 1);
    if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        evbuffer_get_length(out) != 0) {
        /* The rest (or the error, which its own write reports through the
         * event callback) goes the bufferevent's way. */
        io_bev_write(io);
        return;
    }
#ifdef LK_IO_URING
drained:
#endif
    /* Drained: the write callback runs as the bufferevent would run it
     * (an empty output is under any low-water mark), unless the protocol
     * is done and the connection parks.  Called here, not deferred as
     * bufferevent_trigger would (BEV_OPT_DEFER_CALLBACKS): the flush queue
     * runs from the loop, outside any callback, and takes nothing of io's
     * after this; a deferral cost some 350 instructions a response. */
    if (!io_park_if_idle(io)) {
        bufferevent_data_cb writecb;
        void *cbarg;
        bufferevent_getcb(bev, NULL, &writecb, NULL, &cbarg);
        if (writecb != NULL)
            writecb(bev, cbarg);
    }
}

#ifdef LK_IO_URING
/* ring_done's owner for the access log's write (lk_access_ring_lines). */
static char access_lines;

/* A ring receive of a TLS client's takes up to a whole record (RFC 8446
 * §5.2: 2^14 + 256 bytes and a 5-byte header), into one of the
 * LK_TLS_RX_SLOTS slots of w->tls_rx, which the read queue's pass uses
 * once each (ring_read_cb): OpenSSL reads the records there, and what it
 * leaves moves to tls_rq (tls_rx_keep) before the next pass. */
#define LK_TLS_RX (17 * 1024)
#define LK_TLS_RX_SLOTS 64

static inline const char *
tls_rx_at(const struct lk_io *io)
{
    return io->w->tls_rx + (size_t)io->rx_slot * LK_TLS_RX + io->rx_off;
}

/* What OpenSSL left of the ring's read moves from its slot to tls_rq, and
 * OpenSSL reads the socket again after it; no memory for it ends the
 * input with an error. */
static void
tls_rx_keep(struct lk_io *io)
{
    if (!io->rx_ring)
        return;
    io->rx_ring = 0;
    if (io->ring_res <= (int)io->rx_off)
        return;
    if (io->tls_rq == NULL)
        io->tls_rq = lk_evbuffer_get();
    if (evbuffer_add(io->tls_rq, tls_rx_at(io), (size_t)io->ring_res - io->rx_off) != 0) {
        io->ssl_end = 1;
        io->ssl_end_what = BEV_EVENT_ERROR;
        event_active(io->rev, EV_READ, 1);
    }
}

static void
ring_done(void *owner, int op, int res, int whole)
{
    struct lk_io *io = owner;

    if (op == LK_URING_WRITE) {
        lk_access_ring_wrote(res);
        return;
    }
    if (op == LK_URING_RECV) {
        io->ring_read = 1;
        io->ring_res = res;
        return;
    }
    io->ring_sent = 1;
    io->ring_res = res;
    io->ring_whole = whole;
}

static int
ring_submit(struct lk_worker *w)
{
    if (lk_uring_submit(w->uring, ring_done) == 0)
        return 0;
    lk_log(LK_ERR, NULL, "io_uring: a submission failed; readv and writev from now on");
    lk_uring_free(w->uring);
    w->uring = NULL;
    return -1;
}

/* io's output goes in the ring's next submission (the one before it first,
 * if the ring is full): a plaintext output as it is, a TLS one as the
 * records tls_collect made of it. */
static void
ring_send(struct lk_worker *w, struct lk_io *io)
{
    int fd = io_fd(io), more = io->fin_next;
    struct evbuffer *out = bufferevent_get_output(io->bev);

    if (io->ssl != NULL) {
        out = io->tls_wq;
        io->fin_next = 0; /* MSG_MORE here, as io_write: no cork needed */
    }
    if (lk_uring_send(w->uring, fd, out, more, io) != 0 && ring_submit(w) == 0)
        lk_uring_send(w->uring, fd, out, more, io);
}

/* Whether io's output can go in a ring round: plaintext not left to the
 * bufferevent's own writes, or TLS through its own BIO, with bytes to send. */
static int
ring_can_send(struct lk_io *io)
{
    struct bufferevent *bev = io->bev;

    if (bev == NULL)
        return 0;
    if (io->ssl != NULL)
        return io->tls_ring && !io->handshaking && !io->wwait && !io->write_wants_read &&
               !io->read_wants_write &&
               (evbuffer_get_length(bufferevent_get_output(bev)) != 0 || tls_wq_len(io) != 0);
    return io->plain && !(bufferevent_get_enabled(bev) & EV_WRITE) &&
           evbuffer_get_length(bufferevent_get_output(bev)) != 0;
}

/* ring_send, for a TLS output once its records are made; nothing when
 * none could be (tls_flush meets the reason after the round). */
static int
ring_take(struct lk_worker *w, struct lk_io *io)
{
    if (io->ssl != NULL && !tls_collect(io))
        return 0;
    ring_send(w, io);
    return 1;
}

/* One round of the flush queue: every plaintext output on it is sent in
 * one system call, then each is finished as after its own write (its
 * callbacks run); what they queue waits for the next round.  A round with
 * one output to send writes it with writev: a submission of one costs
 * more than that, for the same single entry into the kernel.  The access
 * log's lines held so far ride the submission when their target takes it
 * (lk_access_ring_lines), which then holds even one send: two entries in
 * one system call rather than a writev and a write(2). */
static void
ring_round(struct lk_worker *w)
{
    struct lk_io *io, *first = NULL;
    int many = 0, taken = 0, lfd = -1;
    const void *lines = NULL;
    size_t nlines = 0;

    w->flushb = w->flushq;
    w->flushq = NULL;
    for (io = w->flushb; io != NULL; io = io->next)
        io->in_round = 1;
    for (io = w->flushb; io != NULL && w->uring != NULL; io = io->next) {
        if (!ring_can_send(io))
            continue; /* the bufferevent writing, a handshake, or nothing to send */
        if (first == NULL) {
            first = io;
            continue;
        }
        if (!taken) {
            taken = 1;
            many |= ring_take(w, first);
        }
        many |= ring_take(w, io);
    }
    if (first != NULL && w->uring != NULL &&
        (nlines = lk_access_ring_lines(&lines, &lfd)) != 0 && !taken)
        many |= ring_take(w, first);
    if (many && w->uring != NULL) {
        if (nlines != 0 && lk_uring_write(w->uring, lfd, lines, nlines, &access_lines) != 0 &&
            ring_submit(w) == 0)
            lk_uring_write(w->uring, lfd, lines, nlines, &access_lines);
        ring_submit(w);
    }
    while ((io = w->flushb) != NULL) {
        io_unlink(io);
        io_flush(io);
    }
}
#endif

static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;
    struct lk_io *io;

#ifdef LK_IO_URING
    while (w->uring != NULL && w->flushq != NULL)
        ring_round(w);
#endif
    while ((io = w->flushq) != NULL) {
        io_unlink(io);
        io_flush(io);
    }
    lk_access_ride = 0;
    lk_access_flush();
}

/* A plaintext socket is readable (or its read timeout passed): read into
 * the bufferevent's input and run its callbacks as the bufferevent would.
 * libevent 2.1 reads at most 4 KiB per call after a FIONREAD ioctl; this
 * reads up to what the last reads suggest (LK_READ_MIN to LK_READ_MAX). */
static void tls_read_cb(struct lk_io *io, short what);
#ifdef LK_IO_URING
static void tls_ring_read(struct lk_io *io);
#endif

static void io_read_done(struct lk_io *io, ssize_t n, int err);
static void io_readv(struct lk_io *io, evutil_socket_t fd);

#ifdef LK_IO_URING
/* A socket is readable: it is read with the others of this iteration, in
 * one system call, once their read events have all run. */
static void
ring_read_queue(struct lk_io *io)
{
    struct lk_worker *w = io->w;

    if (io->read_queued)
        return;
    if (w->nreadq == w->readq_cap) {
        w->readq_cap = w->readq_cap != 0 ? w->readq_cap * 2 : 64;
        w->readq = lk_xrealloc(w->readq, w->readq_cap * sizeof(*w->readq));
    }
    if (w->nreadq == 0)
        event_active(w->read_ev, EV_TIMEOUT, 1);
    w->readq[w->nreadq++] = io;
    io->read_queued = 1;
}

static void
ring_read_unqueue(struct lk_io *io)
{
    struct lk_worker *w = io->w;

    if (!io->read_queued)
        return;
    for (size_t k = 0; k < w->nreadq; k++)
        if (w->readq[k] == io)
            w->readq[k] = NULL;
    io->read_queued = 0;
    io->ring_read = 0;
}

static int ring_submit(struct lk_worker *w);

/* Prepares io's read in the ring's next submission: a plaintext socket's
 * into its input, a TLS client's records into slot (of w->tls_rx).  1:
 * not for the ring (a TLS connection whose OpenSSL must be heard first, or
 * with input already, or the slots all taken); -1: the batch is full
 * (submit, then again); -2: no memory for the input. */
static int
ring_recv(struct lk_worker *w, struct lk_io *io, size_t slot)
{
    if (io->ssl == NULL)
        return lk_uring_recv(w->uring, io_fd(io), bufferevent_get_input(io->bev),
                             io->read_size, io);
    if (!io->tls_ring || io->handshaking || io->write_wants_read || io->read_wants_write ||
        io->ssl_end || tls_pending(io) || slot == LK_TLS_RX_SLOTS)
        return 1;
    if (w->tls_rx == NULL)
        w->tls_rx = lk_xmalloc((size_t)LK_TLS_RX_SLOTS * LK_TLS_RX);
    io->rx_slot = slot;
    return lk_uring_recv_to(w->uring, io_fd(io), w->tls_rx + slot * LK_TLS_RX, LK_TLS_RX, io);
}

/* The read queue: every socket on it still reading is read in one system
 * call, then each one's callbacks run, in the order the loop found them,
 * as after its own read.  One taken off meanwhile (closed) is passed over.
 * A socket whose reading a callback before it switched off has been read
 * already: its callbacks run all the same, as if it had come first.  A TLS
 * client's records go to memory, and OpenSSL reads them there (tls_read). */
static void
ring_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;
    size_t n = w->nreadq, slot = 0;

    /* One socket to read: readv, for the reason ring_round writes one
     * output with writev (it is read in the loop below). */
    for (size_t k = 0; k < n && n > 1 && w->uring != NULL; k++) {
        struct lk_io *io = w->readq[k];
        if (io == NULL || io->bev == NULL || !io->reading)
            continue;
        int r = ring_recv(w, io, slot);
        if (r == -1 && ring_submit(w) == 0)
            r = ring_recv(w, io, slot);
        if (r == 0 && io->ssl != NULL)
            slot++;
        if (r == -2) { /* no memory for the input: the read fails */
            io->ring_read = 1;
            io->ring_res = -ENOMEM;
        }
    }
    if (n > 1 && w->uring != NULL)
        ring_submit(w);
    for (size_t k = 0; k < n; k++) {
        struct lk_io *io = w->readq[k];
        if (io == NULL)
            continue;
        w->readq[k] = NULL;
        io->read_queued = 0;
        if (io->ring_read) {
            io->ring_read = 0;
            if (io->ssl != NULL)
                tls_ring_read(io);
            else
                io_read_done(io, io->ring_res >= 0 ? io->ring_res : -1, -io->ring_res);
        } else if (io->bev != NULL && io->ssl != NULL) {
            tls_read_cb(io, EV_READ);
        } else if (io->bev != NULL && io->reading) {
            /* Alone, or the ring broke before it took this one. */
            io_readv(io, io_fd(io));
        }
    }
    /* Sockets queued meanwhile (none: read events run from the loop) wait
     * for the next pass. */
    w->nreadq -= n;
    memmove(w->readq, w->readq + n, w->nreadq * sizeof(*w->readq));
    if (w->nreadq != 0)
        event_active(w->read_ev, EV_TIMEOUT, 1);
}
#endif

/* Reads what fd has into io's input with readv, and runs the callbacks. */
static void
io_readv(struct lk_io *io, evutil_socket_t fd)
{
    struct evbuffer *in = bufferevent_get_input(io->bev);
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
    io_read_done(io, n, err);
}

static void
io_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_io *io = arg;
    struct bufferevent *bev = io->bev;

    if (bev == NULL) { /* parked */
        if (io->w->unpark(io, what) != 0)
            return;
        bev = io->bev;
    }
    if (io->ssl != NULL) {
#ifdef LK_IO_URING
        if (io->tls_ring && io->w->uring != NULL && what == EV_READ && !io->handshaking) {
            ring_read_queue(io);
            return;
        }
#endif
        tls_read_cb(io, what);
        return;
    }
    if (io->prefilled) {
        /* Whatever more the socket has, epoll says so (level-triggered). */
        io->prefilled = 0;
        size_t len = evbuffer_get_length(bufferevent_get_input(bev));
        if (len != 0)
            io_read_done(io, (ssize_t)len, 0);
        return;
    }
    if (what & EV_TIMEOUT) {
        bufferevent_event_cb eventcb;
        void *cbarg;
        bufferevent_getcb(bev, NULL, NULL, &eventcb, &cbarg);
        lk_io_disable(io, EV_READ);
        if (eventcb != NULL)
            eventcb(bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT, cbarg);
        return;
    }
    if (io->has_rtv && io->tm != NULL)
        io->tm->last_ms = lk_now_ms(); /* restarts the read timeout */
#ifdef LK_IO_URING
    if (io->w->uring != NULL) {
        ring_read_queue(io);
        return;
    }
#endif
    io_readv(io, fd);
}

/* A read into the input got n bytes (-1: failed with err): the callbacks
 * run as the bufferevent would run them. */
static void
io_read_done(struct lk_io *io, ssize_t n, int err)
{
    struct bufferevent *bev = io->bev;
    bufferevent_data_cb readcb;
    bufferevent_event_cb eventcb;
    void *cbarg;

    bufferevent_getcb(bev, &readcb, NULL, &eventcb, &cbarg);
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
    errno = err;
    if (eventcb != NULL)
        eventcb(bev, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), cbarg);
}

void
lk_io_go_plain(struct lk_io *io, struct event *rev)
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

int
lk_io_prefill(struct lk_io *io, const void *data, size_t len)
{
    struct evbuffer *in = bufferevent_get_input(io->bev);

    evbuffer_unfreeze(in, 0);
    int r = evbuffer_add(in, data, len);
    evbuffer_freeze(in, 0);
    if (r != 0)
        return -1;
    io->read_now = 1;
    io->prefilled = 1;
    return 0;
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
            io->wev = event_new(io->w->base, io_fd(io), EV_WRITE | EV_PERSIST, tls_write_cb, io);
        event_add(io->wev, io->has_wtv ? &io->wtv : NULL);
        io->wwait = 1;
    } else if (!on && io->wwait) {
        event_del(io->wev);
        io->wwait = 0;
    }
}

/* The thread's error queue emptied before an OpenSSL I/O call, as
 * SSL_get_error needs it: peeking first, since it is nearly always empty,
 * and ERR_clear_error clears all 16 of its slots every time (some 840
 * instructions against 210, twice an exchange). */
static inline void
tls_err_reset(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
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
    tls_err_reset();
    int r = SSL_do_handshake(io->ssl);
    if (r == 1) {
        io->handshaking = 0;
        io_wait_write(io, 0);
        /* The request often came in the Finished's segment: OpenSSL has
         * it, the socket has nothing more to say. */
        if (tls_pending(io))
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

/* Makes records of the output, up to LK_TLS_RECORD bytes each, until it is
 * drained, limit bytes went, or SSL_write_ex stops (its error, by
 * SSL_get_error, is returned); *sent counts the bytes that went. */
static int
tls_encrypt(struct lk_io *io, size_t limit, size_t *sent)
{
    struct evbuffer *out = bufferevent_get_output(io->bev);
    size_t len;
    int err = SSL_ERROR_NONE;

    evbuffer_unfreeze(out, 1);
    while ((len = evbuffer_get_length(out)) != 0 && *sent < limit) {
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
        tls_err_reset();
        if (SSL_write_ex(io->ssl, p, n, &done) != 1) {
            err = SSL_get_error(io->ssl, 0);
            break;
        }
        evbuffer_drain(out, done);
        *sent += done;
    }
    evbuffer_freeze(out, 1);
    return err;
}

#ifdef LK_IO_URING
/*
 * With a ring, OpenSSL reads and writes a client connection's records
 * through a BIO of io's own rather than the socket BIO (one BIO, as
 * SSL_set_fd's: an idle connection holds no more).  It reads what the ring
 * received for it (tls_rq, ring_read_cb) and then, unless the ring's read
 * emptied the socket just now (rx_ring), the socket as the socket BIO
 * does; and it writes the same way too, except in a ring round
 * (io->collect), where the records of the output go to io->tls_wq and the
 * ring sends them with the round's other outputs (and the access log's
 * lines), one system call for all.  Whatever OpenSSL writes while records
 * wait in tls_wq (a post-handshake message, an alert) joins them behind,
 * so the records leave in their order.
 */
static int
tls_bio_read(BIO *b, char *buf, int len)
{
    struct lk_io *io = BIO_get_data(b);

    BIO_clear_retry_flags(b);
    if (len <= 0)
        return 0;
    if (tls_rq_len(io) != 0) {
        int got = evbuffer_remove(io->tls_rq, buf, (size_t)len);
        if (evbuffer_get_length(io->tls_rq) == 0) {
            lk_evbuffer_put(io->tls_rq);
            io->tls_rq = NULL;
        }
        return got;
    }
    if (io->rx_ring && io->ring_res > (int)io->rx_off) {
        int got = io->ring_res - (int)io->rx_off < len ? io->ring_res - (int)io->rx_off : len;
        memcpy(buf, tls_rx_at(io), (size_t)got);
        io->rx_off += (unsigned)got;
        return got;
    }
    if (io->rx_ring && io->ring_res < LK_TLS_RX) {
        /* The ring's read of the socket, which it did not fill: the socket
         * has nothing more for now, or its end, or its error. */
        int res = io->ring_res;
        if (res == 0)
            BIO_set_flags(b, BIO_FLAGS_IN_EOF);
        else if (res > 0 || res == -EAGAIN || res == -EINTR)
            BIO_set_retry_read(b);
        else
            errno = -res;
        return res == 0 ? 0 : -1;
    }
    ssize_t n = recv(io_fd(io), buf, (size_t)len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    else if (n == 0)
        BIO_set_flags(b, BIO_FLAGS_IN_EOF); /* as the socket BIO: OpenSSL asks (BIO_eof) */
    return (int)n;
}

static int
tls_bio_write(BIO *b, const char *data, int len)
{
    struct lk_io *io = BIO_get_data(b);

    BIO_clear_retry_flags(b);
    if (len <= 0)
        return 0;
    if (io->collect || tls_wq_len(io) != 0) {
        if (io->tls_wq == NULL)
            io->tls_wq = lk_evbuffer_get();
        if (evbuffer_add(io->tls_wq, data, (size_t)len) != 0)
            return -1;
        if (!io->collect)
            lk_io_queue(io); /* tls_flush sends them */
        return len;
    }
    ssize_t n = send(io_fd(io), data, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static long
tls_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num, (void)ptr;
    if (cmd == BIO_CTRL_EOF)
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    return cmd == BIO_CTRL_FLUSH; /* every write is done (or held) at once */
}

static BIO_METHOD *tls_bio_method;
static pthread_once_t tls_bio_once = PTHREAD_ONCE_INIT;

static void
tls_bio_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "lookout tls write");
    if (m != NULL && (BIO_meth_set_write(m, tls_bio_write) != 1 ||
                      BIO_meth_set_read(m, tls_bio_read) != 1 ||
                      BIO_meth_set_ctrl(m, tls_bio_ctrl) != 1)) {
        BIO_meth_free(m);
        m = NULL;
    }
    tls_bio_method = m;
}

/* io's records go through its own BIO from now on; left as they are (the
 * socket BIO) when OpenSSL cannot make one. */
static void
tls_bio_set(struct lk_io *io)
{
    BIO *b;

    pthread_once(&tls_bio_once, tls_bio_init);
    if (tls_bio_method == NULL || (b = BIO_new(tls_bio_method)) == NULL)
        return;
    BIO_set_data(b, io);
    BIO_set_init(b, 1);
    SSL_set_bio(io->ssl, b, b); /* frees SSL_set_fd's socket BIO; the fd stays open */
    io->tls_ring = 1;
}

/* The most of a TLS output one ring round makes into records: what does
 * not fit waits in the output, where the protocol's flow control sees it. */
#define LK_TLS_ROUND (4 * LK_TLS_RECORD)

/* For a ring round, on an io ring_can_send took: the records of its
 * output, made into tls_wq.  0: there is nothing to send (the round
 * leaves io to tls_flush). */
static int
tls_collect(struct lk_io *io)
{
    size_t took = 0;

    io->collect = 1;
    /* An error stops it: tls_flush, after the round, meets it again. */
    tls_encrypt(io, LK_TLS_ROUND, &took);
    io->collect = 0;
    if (took != 0)
        io->tls_took = 1;
    return tls_wq_len(io) != 0;
}

/* Sends what tls_wq holds.  0: it all went; 1: the rest waits for the
 * socket (wev); -1: the write failed and the event callback ran. */
static int
tls_wq_send(struct lk_io *io)
{
    if (tls_wq_len(io) != 0) {
        int n = io_write(io, io->tls_wq, io_fd(io));
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            io_wait_write(io, 0);
            io_report(io, BEV_EVENT_WRITING | BEV_EVENT_ERROR);
            return -1;
        }
        if (evbuffer_get_length(io->tls_wq) != 0) {
            io_wait_write(io, 1);
            return 1;
        }
    }
    if (io->tls_wq != NULL) {
        lk_evbuffer_put(io->tls_wq);
        io->tls_wq = NULL;
    }
    return 0;
}
#endif

/* Writes the output in records of up to LK_TLS_RECORD bytes until it is
 * drained or the socket is full, and runs the write callback (subject to
 * the write low-water mark) when something went.  With a ring, the
 * records a round made (tls_collect) go first, and what the round sent of
 * them is applied.  -1 when a write failed and the event callback ran,
 * which may have freed io. */
static int
tls_flush(struct lk_io *io)
{
    size_t sent = 0;
    int err;

#ifdef LK_IO_URING
    if (io->ring_sent) {
        if (ring_apply(io, io->tls_wq, 0) != 0)
            return -1;
        if (tls_wq_len(io) != 0) {
            io_wait_write(io, 1); /* the socket is full: the rest when it takes more */
            return 0;
        }
    }
#endif
    if (io->write_wants_read || io->handshaking)
        return 0; /* the read side resumes it */
#ifdef LK_IO_URING
    int r = tls_wq_send(io);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if (io->tls_took) {
        io->tls_took = 0;
        sent = 1; /* the round's records all went: the write callback is owed */
    }
#endif
    if (io->fin_next) {
        /* io_write's MSG_MORE for the records OpenSSL writes: corked, the
         * socket holds the last one back, and the close sends it with the
         * FIN.  One setsockopt a connection, where the segment it saves
         * costs the client's TCP input and an acknowledgement more. */
        int on = 1;
        setsockopt(io_fd(io), IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
        io->fin_next = 0;
    }
    err = tls_encrypt(io, SIZE_MAX, &sent);
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
 * after any data before it.  After a ring's read (rx_ring), OpenSSL reads
 * what it got, and what it leaves is kept before any callback runs. */
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
#ifdef LK_IO_URING
        tls_rx_keep(io);
#endif
        lk_io_disable(io, EV_READ);
        io_report(io, BEV_EVENT_READING | BEV_EVENT_ERROR);
        return;
    }
    for (;;) {
        size_t n;
        tls_err_reset();
        if (SSL_read_ex(io->ssl, (char *)v.iov_base + got, v.iov_len - got, &n) != 1) {
            err = SSL_get_error(io->ssl, 0);
            break;
        }
        got += n;
        /* Stop when OpenSSL holds nothing more, rather than read the
         * socket to its EAGAIN: the event is level-triggered.  A full
         * record may have more behind it. */
        if (got == v.iov_len || (n < LK_TLS_RECORD && !tls_pending(io)))
            break;
    }
#ifdef LK_IO_URING
    tls_rx_keep(io);
#endif
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
        if (io->ssl_end || tls_pending(io))
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

#ifdef LK_IO_URING
/* The ring read a TLS client's socket (ring_read_cb): OpenSSL reads what
 * came, or it waits in tls_rq when tls_read_cb will not read now. */
static void
tls_ring_read(struct lk_io *io)
{
    io->rx_ring = 1;
    io->rx_off = 0;
    if (io->reading && !io->handshaking && !io->write_wants_read && !io->ssl_end) {
        tls_read(io);
        return;
    }
    tls_rx_keep(io);
    tls_read_cb(io, EV_READ);
}
#endif

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

void
lk_io_go_tls(struct lk_io *io, SSL *ssl, struct event *rev)
{
    io->ssl = ssl;
    io->handshaking = 1;
#ifdef LK_IO_URING
    if (io->w->uring != NULL)
        tls_bio_set(io);
#endif
    lk_io_go_plain(io, rev);
}

void
lk_io_attach(struct lk_io *io, struct lk_worker *w, struct bufferevent *bev)
{
    io->bev = bev;
    io->w = w;
}

void
lk_io_detach(struct lk_io *io)
{
    io_unlink(io);
#ifdef LK_IO_URING
    io->ring_sent = 0; /* sent but never applied: the connection is going */
    ring_read_unqueue(io);
#endif
    io_timer_free(io);
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
#ifdef LK_IO_URING
    if (io->tls_wq != NULL)
        lk_evbuffer_put(io->tls_wq); /* records the connection's end drops */
    io->tls_wq = NULL;
    if (io->tls_rq != NULL)
        lk_evbuffer_put(io->tls_rq);
    io->tls_rq = NULL;
    io->tls_ring = io->collect = io->tls_took = io->rx_ring = 0;
#endif
}

void
lk_io_enable(struct lk_io *io, short what)
{
    if (io->plain) {
        if ((what & EV_READ) && !io->reading) {
            io->reading = 1;
            if (io_lazy(io)) {
                event_add(io->rev, NULL);
                if (io->has_rtv)
                    io_timer_start(io);
            } else {
                event_add(io->rev, io->has_rtv ? &io->rtv : NULL);
            }
            /* After event_add, which leaves an active event out of epoll.
             * OpenSSL may hold input the socket will not announce; and a
             * socket accepted with bytes in (listen.defer_accept) is read
             * in this turn of the loop, not after an epoll_wait that would
             * only say so (one found empty reads EAGAIN). */
            if (io->read_now || (io->ssl != NULL && (io->ssl_end || tls_pending(io))))
                event_active(io->rev, EV_READ, 1);
            io->read_now = 0;
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
    if (io->plain && io_lazy(io)) {
        io->has_wtv = wr != NULL;
        if (wr != NULL)
            io->wtv = *wr;
        if (bufferevent_get_enabled(io->bev) & EV_WRITE)
            bufferevent_set_timeouts(io->bev, NULL, wr); /* as libevent would: from now */
        io->has_rtv = rd != NULL;
        if (rd != NULL)
            io->rtv = *rd;
        if (io->reading) {
            /* a parked connection's idle rest, still on the read event */
            event_remove_timer(io->rev);
            if (rd != NULL)
                io_timer_start(io);
        }
        return;
    }
    bufferevent_set_timeouts(io->bev, rd, wr);
    if (!io->plain)
        return;
    /* event_add with no timeout leaves a pending one as it was (a parked
     * connection's idle rest, say); event_del would also drop an
     * activation on its way (input OpenSSL holds). */
    if (rd == NULL && io->has_rtv && io->reading)
        event_remove_timer(io->rev);
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

void
lk_io_rebind(struct lk_io *io, struct bufferevent *bev)
{
    io->bev = bev;
    io->cb = evbuffer_add_cb(bufferevent_get_output(bev), io_out_changed, io);
}

void
lk_io_worker_init(struct lk_worker *w)
{
    w->flush_ev = event_new(w->base, -1, 0, flush_cb, w);
    w->tls_out = lk_xmalloc(LK_TLS_RECORD);
#ifdef LK_IO_URING
    if (w->rt->conf->io_uring) {
        w->uring = lk_uring_new();
        /* A kernel that refuses it (kernel.io_uring_disabled, a container's
         * seccomp profile) says so once per worker; io_uring = off is quiet. */
        if (w->uring == NULL)
            lk_log(LK_WARN, NULL,
                   "io_uring: %s; reading and writing with readv and writev "
                   "(io_uring = off says so without this warning)",
                   strerror(errno));
    }
    w->read_ev = event_new(w->base, -1, 0, ring_read_cb, w);
#endif
    if (w->id == 0)
        lk_log(LK_INFO, NULL, "workers read and write plaintext with %s",
               lk_io_engine(w));
}

const char *
lk_io_engine(const struct lk_worker *w)
{
#ifdef LK_IO_URING
    if (w->uring != NULL)
        return "io_uring";
    return w->rt->conf->io_uring ? "readv and writev (the kernel refused io_uring)"
                                 : "readv and writev (io_uring = off)";
#else
    (void)w;
    return "readv and writev (built without io_uring)";
#endif
}

void
lk_io_worker_free(struct lk_worker *w)
{
    if (w->flush_ev != NULL)
        event_free(w->flush_ev);
    w->flush_ev = NULL;
    free(w->tls_out);
    w->tls_out = NULL;
#ifdef LK_IO_URING
    lk_uring_free(w->uring);
    w->uring = NULL;
    if (w->read_ev != NULL)
        event_free(w->read_ev);
    w->read_ev = NULL;
    free(w->readq);
    w->readq = NULL;
    free(w->tls_rx);
    w->tls_rx = NULL;
    w->nreadq = w->readq_cap = 0;
#endif
}
