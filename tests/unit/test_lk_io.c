/*
 * Tests for proxy/lk_io.c's TLS reads through the ring (built with
 * io_uring only; without it the table is empty): TLS client connections,
 * each over a socketpair whose other end an OpenSSL client drives, on a
 * worker with a ring.  Several found readable in one iteration have their
 * records read in one submission, into the worker's slots, and each gets
 * its own bytes.  One whose reading another's callback switches off
 * before its turn keeps what the ring read (tls_rq) and gets it, whole and
 * first, once reading is on again.  One whose input fills before OpenSSL
 * has read all the ring got (no read-ahead, a small input) keeps the rest
 * and gets every byte in order in later turns, with records still coming.
 * A client that closes is seen to end, after its last bytes.
 */
#include <stddef.h>

#include "lk_test.h"

#ifdef LK_IO_URING
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "lk_conf.h"
#include "lk_io.h"
#include "lk_runtime.h"
#include "lk_worker.h"

/* One TLS client connection: lookout's end (io) and the client's (cli). */
struct side {
    struct lk_io io;
    struct bufferevent *bev;
    SSL *cli;
    int fd[2];               /* [0] lookout's, [1] the client's */
    struct evbuffer *got;    /* what the read callback was given, in order */
    int connected;
    short ended;             /* the event callback's what, at the end */
    struct side *other;      /* reading switched off by this one's read callback */
    int kept;                /* a read callback found records kept for later (tls_rq) */
};

static SSL_CTX *sctx, *cctx;

/* A server context with a fresh self-signed P-256 certificate, and a
 * client context that does not check it. */
static int
contexts(void)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *n = X509_get_subject_name(x);

    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"lookout.test", -1, -1,
                               0);
    X509_set_issuer_name(x, n);
    X509_set_pubkey(x, key);
    X509_sign(x, key, EVP_sha256());
    sctx = SSL_CTX_new(TLS_server_method());
    cctx = SSL_CTX_new(TLS_client_method());
    int good = sctx != NULL && cctx != NULL && SSL_CTX_use_certificate(sctx, x) == 1 &&
               SSL_CTX_use_PrivateKey(sctx, key) == 1;
    SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
    X509_free(x);
    EVP_PKEY_free(key);
    return good;
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct side *s = arg;

    evbuffer_add_buffer(s->got, bufferevent_get_input(bev));
    s->kept |= s->io.tls_rq != NULL;
    if (s->other != NULL)
        lk_io_disable(&s->other->io, EV_READ);
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    struct side *s = arg;

    (void)bev;
    if (what & BEV_EVENT_CONNECTED)
        s->connected = 1;
    else
        s->ended = what;
}

/* Opens s on worker w as lk_conn.c does a TLS client connection (read_ahead
 * as it sets it), reading, and completes the handshake. */
static int
side_open(struct side *s, struct lk_worker *w, int read_ahead)
{
    memset(s, 0, sizeof(*s));
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, s->fd) != 0)
        return 0;
    for (int k = 0; k < 2; k++)
        fcntl(s->fd[k], F_SETFL, fcntl(s->fd[k], F_GETFL) | O_NONBLOCK);
    s->got = evbuffer_new();
    s->bev = bufferevent_socket_new(w->base, s->fd[0], 0);
    SSL *ssl = SSL_new(sctx);
    SSL_set_fd(ssl, s->fd[0]);
    SSL_set_accept_state(ssl);
    SSL_set_read_ahead(ssl, read_ahead);
    SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    lk_io_attach(&s->io, w, s->bev);
    lk_io_go_tls(&s->io, ssl, NULL);
    bufferevent_setcb(s->bev, on_read, NULL, on_event, s);
    lk_io_enable(&s->io, EV_READ);
    s->cli = SSL_new(cctx);
    SSL_set_fd(s->cli, s->fd[1]);
    SSL_set_connect_state(s->cli);
    for (int i = 0; i < 200 && !(s->connected && SSL_is_init_finished(s->cli)); i++) {
        ERR_clear_error();
        SSL_do_handshake(s->cli);
        event_base_loop(w->base, EVLOOP_NONBLOCK);
    }
    /* TLS 1.3's tickets, sent after the handshake, read off the client. */
    char sink[256];
    size_t n;
    SSL_read_ex(s->cli, sink, sizeof(sink), &n);
    ERR_clear_error();
    return s->connected && SSL_is_init_finished(s->cli);
}

static void
side_close(struct side *s)
{
    lk_io_detach(&s->io);
    if (s->bev != NULL)
        bufferevent_free(s->bev);
    SSL_free(s->cli);
    evbuffer_free(s->got);
    close(s->fd[0]);
    close(s->fd[1]);
}

/* The client writes len bytes of p (records of at most rec bytes). */
static int
send_all(struct side *s, const char *p, size_t len, size_t rec)
{
    for (size_t off = 0; off < len;) {
        size_t n = len - off < rec ? len - off : rec, done;
        if (SSL_write_ex(s->cli, p + off, n, &done) != 1)
            return 0;
        off += done;
    }
    return 1;
}

/* Turns the loop until every side of n has want bytes (or 500 turns). */
static void
turn_until(struct lk_worker *w, struct side *s, int n, size_t want)
{
    for (int i = 0; i < 500; i++) {
        int all = 1;
        for (int k = 0; k < n; k++)
            all &= evbuffer_get_length(s[k].got) >= want;
        if (all)
            return;
        event_base_loop(w->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
    }
}

static int
got_is(struct side *s, const char *p, size_t len)
{
    return evbuffer_get_length(s->got) == len &&
           memcmp(evbuffer_pullup(s->got, -1), p, len) == 0;
}

/* The worker: its base, a conf with io_uring on, its ring and queues. */
static int
worker_open(struct lk_worker *w, struct lk_runtime *rt, struct lk_conf *conf)
{
    memset(w, 0, sizeof(*w));
    memset(rt, 0, sizeof(*rt));
    memset(conf, 0, sizeof(*conf));
    conf->io_uring = 1;
    rt->conf = conf;
    w->rt = rt;
    w->id = 1; /* quiet: worker 0 logs its engine */
    w->base = event_base_new();
    lk_io_worker_init(w);
    return w->base != NULL && w->uring != NULL;
}

static void
worker_close(struct lk_worker *w)
{
    lk_io_worker_free(w);
    event_base_free(w->base);
}

/* A case's world: the contexts, a worker with a ring, its connections. */
struct fix {
    struct lk_worker w;
    struct lk_runtime rt;
    struct lk_conf conf;
    struct side s[4];
    int open;
};

/* Sets f up with n connections (OpenSSL reading ahead or not); 0 when
 * something could not be had (a failed ok() says what). */
static int
fix_open(struct fix *f, int n, int read_ahead)
{
    memset(f, 0, sizeof(*f));
    if (!ok(contexts(), "TLS contexts") ||
        !ok(worker_open(&f->w, &f->rt, &f->conf), "a worker with a ring (the kernel allows one)"))
        return 0;
    for (; f->open < n; f->open++)
        if (!ok(side_open(&f->s[f->open], &f->w, read_ahead), "handshake %d", f->open))
            return 0;
    return 1;
}

static void
fix_close(struct fix *f)
{
    while (f->open-- > 0)
        side_close(&f->s[f->open]);
    if (f->w.base != NULL)
        worker_close(&f->w);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    sctx = cctx = NULL;
}

static void
test_batched(void)
{
    struct fix f;
    struct side *s = f.s;
    char msg[4][64];

    if (!fix_open(&f, 4, 1))
        goto end;
    ok(f.w.tls_rx == NULL, "no slots before a batch of TLS reads");
    for (int k = 0; k < 4; k++) {
        snprintf(msg[k], sizeof(msg[k]), "GET /client/%d HTTP/1.1\r\nHost: lookout.test\r\n\r\n", k);
        send_all(&s[k], msg[k], strlen(msg[k]), 16384);
    }
    turn_until(&f.w, s, 4, strlen(msg[3]));
    ok(f.w.tls_rx != NULL, "four readable at once: read through the ring's slots");
    for (int k = 0; k < 4; k++)
        ok(got_is(&s[k], msg[k], strlen(msg[k])), "client %d: its own bytes, whole", k);
    /* A client that closes after more bytes: those, then the end. */
    send_all(&s[0], "last", 4, 16384);
    send_all(&s[1], "bytes", 5, 16384);
    SSL_shutdown(s[0].cli);
    shutdown(s[0].fd[1], SHUT_WR);
    for (int i = 0; i < 500 && (s[0].ended == 0 || evbuffer_get_length(s[1].got) <
                                                        strlen(msg[1]) + 5); i++) {
        event_base_loop(f.w.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
    }
    evbuffer_drain(s[0].got, strlen(msg[0]));
    evbuffer_drain(s[1].got, strlen(msg[1]));
    ok(got_is(&s[0], "last", 4) && (s[0].ended & BEV_EVENT_EOF),
       "a client that closes: its last bytes, then the end (0x%x)", s[0].ended);
    ok(got_is(&s[1], "bytes", 5) && s[1].ended == 0, "and the one beside it reads on");
end:
    fix_close(&f);
}

static void
test_reading_off(void)
{
    struct fix f;
    struct side *s = f.s;
    const char *m[2] = {"first client's request", "second client's request"};

    if (!fix_open(&f, 2, 1))
        goto end;
    /* Whichever is read first switches the other's reading off. */
    s[0].other = &s[1];
    s[1].other = &s[0];
    for (int k = 0; k < 2; k++)
        send_all(&s[k], m[k], strlen(m[k]), 16384);
    for (int i = 0; i < 500 && evbuffer_get_length(s[0].got) + evbuffer_get_length(s[1].got) == 0;
         i++) {
        event_base_loop(f.w.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
    }
    int first = evbuffer_get_length(s[0].got) != 0 ? 0 : 1, second = !first;
    ok(got_is(&s[first], m[first], strlen(m[first])), "the first read gets its bytes");
    ok(evbuffer_get_length(s[second].got) == 0 && s[second].io.tls_rq != NULL &&
           evbuffer_get_length(s[second].io.tls_rq) > strlen(m[second]),
       "the other, switched off in its turn, keeps the records the ring read for it");
    /* More while it is off: after what it kept. */
    send_all(&s[second], " and more", 9, 16384);
    for (int i = 0; i < 20; i++)
        event_base_loop(f.w.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    ok(evbuffer_get_length(s[second].got) == 0, "nothing reaches it while reading is off");
    s[0].other = s[1].other = NULL;
    lk_io_enable(&s[second].io, EV_READ);
    char want[64];
    snprintf(want, sizeof(want), "%s and more", m[second]);
    turn_until(&f.w, &s[second], 1, strlen(want));
    ok(got_is(&s[second], want, strlen(want)), "on again: what it kept, then the rest, in order");
    ok(s[second].io.tls_rq == NULL, "and nothing is kept any more");
end:
    fix_close(&f);
}

static void
test_input_full(void)
{
    struct fix f;
    struct side *s = f.s;
    enum { LEN = 48 * 1024 };
    char *data = malloc(LEN);

    for (int i = 0; i < LEN; i++)
        data[i] = (char)('a' + (i * 7 + i / 251) % 26);
    /* No read-ahead: OpenSSL takes a record at a time from what the ring
     * read, so a small input fills with records still in the slot. */
    if (!fix_open(&f, 2, 0))
        goto end;
    for (size_t off = 0; off < LEN; off += 6000) {
        size_t n = LEN - off < 6000 ? LEN - off : 6000;
        for (int k = 0; k < 2; k++) {
            send_all(&s[k], data + off, n, 1000); /* six records */
            s[k].io.read_size = 1024;
        }
        for (int i = 0; i < 3; i++)
            event_base_loop(f.w.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    turn_until(&f.w, s, 2, LEN);
    ok(s[0].kept || s[1].kept, "records the input had no room for were kept");
    for (int k = 0; k < 2; k++)
        ok(got_is(&s[k], data, LEN), "client %d: all %d bytes, in order", k, LEN);
end:
    fix_close(&f);
    free(data);
}

const struct lk_test_case lk_test_io[] = {
    {"io/tls_batched", test_batched},
    {"io/tls_reading_off", test_reading_off},
    {"io/tls_input_full", test_input_full},
    {NULL, NULL},
};
#else
const struct lk_test_case lk_test_io[] = {
    {NULL, NULL},
};
#endif
