/*
 * Connection I/O (lk_io.c): the struct that drives a connection's
 * bufferevent, for client connections (lk_conn.h) and upstreams
 * (lk_upstream.h) alike.
 */
#ifndef LK_IO_H
#define LK_IO_H

#include <stdint.h>
#include <sys/time.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>

struct lk_worker;
struct lk_io_timer;

/*
 * A connection's I/O around its bufferevent.  Upstream TLS connections use
 * a TLS bufferevent as it is.  Client connections, TLS or not, and
 * plaintext upstreams go round the bufferevent's socket code, which costs
 * two epoll_ctl calls per response (EV_WRITE asked and dropped) and reads
 * 4 KiB at a time after a FIONREAD ioctl, and, through OpenSSL, one
 * SSL_write (a record and a write) per buffer chain:
 *  - writes: EV_WRITE stays off; what lands in the output is written from
 *    the loop once per iteration, after the callbacks that produced it (the
 *    worker's flush queue): in one write, or in TLS records of up to 16 KiB.
 *    Only what the kernel does not take at once waits for EV_WRITE (the
 *    bufferevent's own, or for TLS wev) until drained again;
 *  - reads: lookout's own read event reads straight into the input, as
 *    much as the last reads suggest, and runs the bufferevent's callbacks.
 *    TLS reads stop when OpenSSL holds nothing more rather than at EAGAIN:
 *    the event is level-triggered.  With io_uring, the sockets an iteration
 *    finds readable are read in one submission, a TLS client's records
 *    into memory for OpenSSL to read there (lk_io.c, ring_read_cb).
 * Protocol modules enable, disable and time out through lk_io_*, never
 * through bufferevent_enable and the like.
 */
struct lk_io {
    struct bufferevent *bev;
    struct lk_worker *w;
    struct event *rev;          /* plain: the read event */
    struct evbuffer_cb_entry *cb; /* plain: watches the output */
    struct lk_io *prev, *next;  /* in w->flushq while queued */
    struct timeval rtv;         /* plain: the read timeout, if has_rtv */
    uint32_t read_size;         /* plain: bytes to ask for in the next read */
    unsigned plain : 1;         /* direct reads and writes (TLS ones with ssl) */
    unsigned reading : 1;       /* plain: rev is added */
    unsigned read_now : 1;      /* plain: bytes are in already; the first enabling reads them */
    unsigned prefilled : 1;     /* plain: ... and they are in the input (lk_io_prefill), not the socket */
    unsigned has_rtv : 1;
    unsigned queued : 1;
    unsigned rev_owned : 1;     /* rev was made by event_new (else it is the lk_conn's) */
    /* TLS over the direct path (client connections) */
    unsigned has_wtv : 1;       /* the write timeout, while wev waits */
    unsigned handshaking : 1;   /* SSL_do_handshake until it completes */
    unsigned wwait : 1;         /* wev is added: the output waits for the kernel */
    unsigned read_wants_write : 1; /* SSL_read said WANT_WRITE */
    unsigned write_wants_read : 1; /* SSL_write said WANT_READ */
    unsigned ssl_end : 1;       /* SSL_read reached the end: ssl_end_what still to report */
    unsigned park_wanted : 1;   /* client: idle; park once the output has drained */
    unsigned unparking : 1;     /* client: the protocol is being started again */
    unsigned fin_next : 1;      /* the connection closes once this output is out, and no more
                                 * input can come: plain writes go with MSG_MORE (io_write),
                                 * TLS ones corked (tls_flush), or with MSG_MORE when a ring
                                 * round sends their records */
#ifdef LK_IO_URING
    unsigned in_round : 1;      /* queued in w->flushb, not w->flushq */
    unsigned ring_sent : 1;     /* the ring sent: ring_res is the result, not yet applied */
    unsigned ring_whole : 1;    /* ... and all it was given went */
    unsigned ring_read : 1;     /* the ring received: ring_res is the result */
    unsigned read_queued : 1;   /* in w->readq */
    unsigned tls_ring : 1;      /* TLS: OpenSSL reads and writes through io's own BIO (lk_io.c) */
    unsigned collect : 1;       /* ... which appends the records to tls_wq (a ring round) */
    unsigned tls_took : 1;      /* a ring round took output: the write callback is owed */
    unsigned rx_ring : 1;       /* ... the ring read the socket just now: OpenSSL reads the
                                 * ring_res bytes it got, from rx_off on, in w->tls_rx's slot
                                 * rx_slot, then no more of the socket (tls_read) */
    unsigned rx_slot : 6;
    unsigned rx_off : 15;
#endif
    short ssl_end_what;         /* BEV_EVENT_EOF or BEV_EVENT_ERROR */
    struct lk_io_timer *tm;     /* plaintext without TLS: the read timeout (lk_io.c) */
    SSL *ssl;
    struct event *wev;          /* waits for the socket to take more */
    struct timeval wtv;
#ifdef LK_IO_URING
    int ring_res;
    struct evbuffer *tls_wq;    /* TLS records made, not yet taken by the kernel; NULL if none */
    struct evbuffer *tls_rq;    /* TLS records received, not yet read by OpenSSL; NULL if none */
#endif
    long long hs_deadline_ms;   /* client TLS: the handshake ends by then (lk_now_ms), however
                                 * the client trickles it; 0: no deadline */
};

/* Enables or disables reading (EV_READ) and writing (EV_WRITE: upstream
 * TLS only; direct writes need no asking) on a connection; enabling what
 * already is costs nothing (bufferevent_enable would re-arm the timeout). */
void lk_io_enable(struct lk_io *io, short what);
void lk_io_disable(struct lk_io *io, short what);

/* Whether an event callback's what is the peer's orderly end of sending
 * (a FIN, or TLS's close_notify), not a reset, an error or a timeout:
 * then what is still to be written to it, or from it, may go first. */
static inline int
lk_io_clean_eof(short what)
{
    return (what & BEV_EVENT_EOF) && !(what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT));
}
/* Read and write timeouts, as bufferevent_set_timeouts (NULL: none); a
 * pending read re-arms with the new one. */
void lk_io_set_timeouts(struct lk_io *io, const struct timeval *rd, const struct timeval *wr);
/* Whether reading is enabled. */
int lk_io_reading(const struct lk_io *io);

/* io drives bev for worker w (as the bufferevent would, until lk_io_go_*). */
void lk_io_attach(struct lk_io *io, struct lk_worker *w, struct bufferevent *bev);
/* Plaintext from now on: reads and writes go round the bufferevent's own
 * (which stay off); its fd is connected.  rev: the event to read with
 * (embedded in its owner), or NULL to make one. */
void lk_io_go_plain(struct lk_io *io, struct event *rev);
/* TLS from now on, over the direct path, starting with the server
 * handshake (ssl is set up, fd accepted); the event callback gets
 * BEV_EVENT_CONNECTED once it is done. */
void lk_io_go_tls(struct lk_io *io, SSL *ssl, struct event *rev);
/* Bytes read off the socket before io had it (a PROXY protocol header's
 * first read: what came after the header) go to io's input; the first
 * enabling of reading runs the read callback on them, without a read.
 * -1: out of memory (nothing added). */
int lk_io_prefill(struct lk_io *io, const void *data, size_t len);
/* Undoes the above (frees io's events and SSL; not the bufferevent). */
void lk_io_detach(struct lk_io *io);
/* Puts io on its worker's flush queue (once). */
void lk_io_queue(struct lk_io *io);
/* A parked connection's io gets a bufferevent again (its output is
 * watched as before parking). */
void lk_io_rebind(struct lk_io *io, struct bufferevent *bev);
/* The worker's flush queue (its event and TLS record buffer): made and
 * freed with the worker. */
void lk_io_worker_init(struct lk_worker *w);
/* How worker w reads and writes plaintext sockets, for the log and /map:
 * "io_uring", or "readv and writev (why)". */
const char *lk_io_engine(const struct lk_worker *w);
void lk_io_worker_free(struct lk_worker *w);

#endif
