/*
 * Tests for proxy/lk_uring.c, the io_uring sends of the flush queue
 * (built in when configure finds liburing; without it the table is
 * empty): sends to several sockets go in one submission and each reports
 * what send(2) would (all, part of it when the socket fills, -EAGAIN when
 * it is full, -EPIPE once the peer is gone, never SIGPIPE); a batch holds
 * 256 sends and then asks to be submitted; several chains go as one send,
 * copied into the ring's staging area up to 4 KiB a send and 64 KiB a
 * submission, gathered by sendmsg past that, the bytes the same either way.
 * Receives likewise: several sockets read in one submission, each input
 * getting its bytes after what it held (0 at the end, -EAGAIN when there
 * is nothing), its end frozen again as lk_io.c keeps it; or into memory,
 * as much as it has room for, the rest left in the socket.  A thread other
 * than the one that made the ring submits through it (a worker's).  A
 * send asked to hold its tail (more) does: over TCP the peer has nothing
 * until the sender closes its side, then the bytes and the end together;
 * without it, the bytes are there at once.  A write (the access log's
 * lines) rides a submission with sends and never waits: to a blocking
 * pipe it is done inline, to a full one it is -EAGAIN at once, to
 * /dev/null done, to a regular file done or refused within the call.
 */
#include <stddef.h>

#include "lk_test.h"

#ifdef LK_IO_URING
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/buffer.h>

#include "lk_uring.h"

struct got {
    int calls;
    int op;
    int res;
    int whole;
};

static void
on_done(void *owner, int op, int res, int whole)
{
    struct got *g = owner;

    g->op = op;
    g->calls++;
    g->res = res;
    g->whole = whole;
}

/* Both ends nonblocking, as lookout's sockets are. */
static void
nonblock(int sv[2])
{
    for (int k = 0; k < 2; k++)
        if (sv[k] >= 0)
            fcntl(sv[k], F_SETFL, fcntl(sv[k], F_GETFL) | O_NONBLOCK);
}

/* A nonblocking stream pair. */
static void
pair(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        sv[0] = sv[1] = -1;
    nonblock(sv);
}

static void
test_gathered(void)
{
    struct lk_uring *u = lk_uring_new();
    int a[2], b[2];
    struct got ga = {0}, gb = {0};
    char buf[64];

    if (!ok(u != NULL, "a ring (errno %d)", u == NULL ? errno : 0))
        return;
    pair(a);
    pair(b);
    struct evbuffer *oa = evbuffer_new(), *ob = evbuffer_new();
    evbuffer_add(oa, "hello", 5);
    /* Three chains: added by reference, so that none is merged. */
    evbuffer_add_reference(ob, "GET ", 4, NULL, NULL);
    evbuffer_add_reference(ob, "/x ", 3, NULL, NULL);
    evbuffer_add_reference(ob, "HTTP/1.1\r\n", 10, NULL, NULL);
    ok(evbuffer_peek(ob, -1, NULL, NULL, 0) == 3, "the second output is three chains");
    ok(lk_uring_send(u, a[0], oa, 0, &ga) == 0 && lk_uring_send(u, b[0], ob, 0, &gb) == 0,
       "two sends prepared");
    ok(read(a[1], buf, sizeof(buf)) < 0 && errno == EAGAIN, "nothing moved before the submission");
    ok(lk_uring_submit(u, on_done) == 0, "one submission");
    ok(ga.calls == 1 && ga.res == 5 && ga.whole, "the first: all 5 bytes (%d, %d)", ga.res, ga.whole);
    ok(gb.calls == 1 && gb.res == 17 && gb.whole, "the second: all 17 bytes (%d, %d)", gb.res, gb.whole);
    ok(evbuffer_get_length(oa) == 5, "the output is left to its owner to drain");
    ssize_t n = read(a[1], buf, sizeof(buf));
    ok(n == 5 && memcmp(buf, "hello", 5) == 0, "the first peer got hello");
    n = read(b[1], buf, sizeof(buf));
    ok(n == 17 && memcmp(buf, "GET /x HTTP/1.1\r\n", 17) == 0, "the second peer got the chains in order");
    ok(lk_uring_submit(u, on_done) == 0 && ga.calls == 1, "an empty submission calls nothing");
    evbuffer_free(oa);
    evbuffer_free(ob);
    close(a[0]), close(a[1]), close(b[0]), close(b[1]);
    lk_uring_free(u);
}

/* Sends of three chains each: 24 of 3 KiB (staged until the area's 64 KiB
 * are used, then gathered by sendmsg) and one of 6 KiB (over the staging
 * limit): every peer gets its own bytes, in order. */
static void
test_staged(void)
{
    struct lk_uring *u = lk_uring_new();
    enum { N = 25 };
    int sv[N][2];
    struct got g[N];
    struct evbuffer *out[N];
    static char src[N][3][2048];
    size_t part[N];
    int good = 1, whole = 1;

    if (!ok(u != NULL, "a ring"))
        return;
    memset(g, 0, sizeof(g));
    for (int i = 0; i < N; i++) {
        pair(sv[i]);
        part[i] = i == N - 1 ? 2048 : 1024;
        out[i] = evbuffer_new();
        for (int c = 0; c < 3; c++) {
            for (size_t k = 0; k < part[i]; k++)
                src[i][c][k] = (char)('a' + (i + c + k) % 26);
            evbuffer_add_reference(out[i], src[i][c], part[i], NULL, NULL);
        }
        good &= lk_uring_send(u, sv[i][0], out[i], 0, &g[i]) == 0;
    }
    ok(good, "%d sends of three chains prepared", N);
    ok(lk_uring_submit(u, on_done) == 0, "one submission");
    for (int i = 0; i < N; i++) {
        char buf[3 * 2048 + 1];
        size_t want = 3 * part[i];
        whole &= g[i].calls == 1 && g[i].res == (int)want && g[i].whole;
        ssize_t n = read(sv[i][1], buf, sizeof(buf));
        good &= n == (ssize_t)want;
        for (int c = 0; c < 3 && n == (ssize_t)want; c++)
            good &= memcmp(buf + c * part[i], src[i][c], part[i]) == 0;
    }
    ok(whole, "each reported all its bytes sent");
    ok(good, "each peer got its three chains' bytes, in order");
    /* The staging area is free again: the next submission stages too. */
    evbuffer_drain(out[0], evbuffer_get_length(out[0]));
    evbuffer_add(out[0], "ab", 2);
    evbuffer_add_reference(out[0], "cd", 2, NULL, NULL);
    lk_uring_send(u, sv[0][0], out[0], 0, &g[0]);
    lk_uring_submit(u, on_done);
    char buf[8];
    ok(g[0].res == 4 && read(sv[0][1], buf, sizeof(buf)) == 4 && memcmp(buf, "abcd", 4) == 0,
       "the next submission's gathered send arrives whole");
    for (int i = 0; i < N; i++) {
        evbuffer_free(out[i]);
        close(sv[i][0]), close(sv[i][1]);
    }
    lk_uring_free(u);
}

static void
test_full_and_gone(void)
{
    struct lk_uring *u = lk_uring_new();
    int a[2];
    struct got g = {0};
    static char big[1 << 20];

    if (!ok(u != NULL, "a ring"))
        return;
    pair(a);
    struct evbuffer *out = evbuffer_new();
    evbuffer_add_reference(out, big, sizeof(big), NULL, NULL);
    alarm(10); /* a send that waited would hang here */
    lk_uring_send(u, a[0], out, 0, &g);
    ok(lk_uring_submit(u, on_done) == 0, "submitted");
    ok(g.res > 0 && g.res < (int)sizeof(big) && !g.whole, "a full socket takes part (%d)", g.res);
    evbuffer_drain(out, (size_t)g.res);
    lk_uring_send(u, a[0], out, 0, &g);
    lk_uring_submit(u, on_done);
    ok(g.calls == 2 && g.res == -EAGAIN && !g.whole, "then -EAGAIN, not a wait (%d)", g.res);
    close(a[1]);
    lk_uring_send(u, a[0], out, 0, &g);
    lk_uring_submit(u, on_done);
    ok(g.calls == 3 && g.res == -EPIPE, "the peer gone: -EPIPE, and no SIGPIPE (%d)", g.res);
    alarm(0);
    evbuffer_free(out);
    close(a[0]);
    lk_uring_free(u);
}

static void
test_batch_full(void)
{
    struct lk_uring *u = lk_uring_new();
    int a[2];
    struct got g[257];
    int prepared = 0, calls = 0;

    if (!ok(u != NULL, "a ring"))
        return;
    pair(a);
    memset(g, 0, sizeof(g));
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, "x", 1);
    for (int k = 0; k < 257; k++)
        if (lk_uring_send(u, a[0], out, 0, &g[k]) == 0)
            prepared++;
    ok(prepared == 256, "a batch takes 256 sends, then asks for a submission (%d)", prepared);
    ok(lk_uring_submit(u, on_done) == 0, "submitted");
    for (int k = 0; k < 257; k++)
        calls += g[k].calls;
    ok(calls == 256 && g[0].res == 1 && g[255].res == 1 && g[256].calls == 0, "each reported once");
    ok(lk_uring_send(u, a[0], out, 0, &g[256]) == 0 && lk_uring_submit(u, on_done) == 0 &&
           g[256].res == 1,
       "and the next batch goes");
    evbuffer_free(out);
    close(a[0]), close(a[1]);
    lk_uring_free(u);
}

static void
test_received(void)
{
    struct lk_uring *u = lk_uring_new();
    int a[2], b[2], c[2];
    struct got ga = {0}, gb = {0}, gc = {0};

    if (!ok(u != NULL, "a ring"))
        return;
    pair(a);
    pair(b);
    pair(c);
    struct evbuffer *ia = evbuffer_new(), *ib = evbuffer_new(), *ic = evbuffer_new();
    evbuffer_add(ia, "old:", 4);
    /* lk_io.c keeps an input's end frozen between reads. */
    evbuffer_freeze(ia, 0), evbuffer_freeze(ib, 0), evbuffer_freeze(ic, 0);
    ok(write(a[1], "GET / HTTP/1.1\r\n\r\n", 18) == 18, "the first peer wrote a request");
    close(b[1]); /* the second one is gone; the third says nothing */
    ok(lk_uring_recv(u, a[0], ia, 16384, &ga) == 0 && lk_uring_recv(u, b[0], ib, 16384, &gb) == 0 &&
           lk_uring_recv(u, c[0], ic, 16384, &gc) == 0,
       "three receives prepared");
    ok(lk_uring_submit(u, on_done) == 0, "one submission");
    ok(ga.calls == 1 && ga.res == 18, "the first: 18 bytes (%d)", ga.res);
    size_t len = evbuffer_get_length(ia);
    char *got = (char *)evbuffer_pullup(ia, -1);
    ok(len == 22 && memcmp(got, "old:GET / HTTP/1.1\r\n\r\n", 22) == 0,
       "after what the input held (%zu bytes)", len);
    ok(gb.calls == 1 && gb.res == 0 && evbuffer_get_length(ib) == 0, "the second: the end (%d)",
       gb.res);
    ok(gc.calls == 1 && gc.res == -EAGAIN && evbuffer_get_length(ic) == 0,
       "the third: -EAGAIN, not a wait (%d)", gc.res);
    ok(evbuffer_add(ia, "x", 1) != 0 && evbuffer_add(ic, "x", 1) != 0,
       "each input's end is frozen again");
    evbuffer_free(ia), evbuffer_free(ib), evbuffer_free(ic);
    close(a[0]), close(a[1]), close(b[0]), close(c[0]), close(c[1]);
    lk_uring_free(u);
}

/* Receives into memory (lk_uring_recv_to), beside one into an input: each
 * gets its bytes where it asked, at most what it asked for. */
static void
test_received_to(void)
{
    struct lk_uring *u = lk_uring_new();
    int a[2], b[2], c[2];
    struct got ga = {0}, gb = {0}, gc = {0};
    char pa[8], pb[64];

    if (!ok(u != NULL, "a ring"))
        return;
    pair(a);
    pair(b);
    pair(c);
    struct evbuffer *ic = evbuffer_new();
    evbuffer_freeze(ic, 0);
    memset(pa, '-', sizeof(pa));
    ok(write(a[1], "0123456789", 10) == 10 && write(b[1], "records", 7) == 7 &&
           write(c[1], "plain", 5) == 5,
       "three peers wrote");
    ok(lk_uring_recv_to(u, a[0], pa, sizeof(pa), &ga) == 0 &&
           lk_uring_recv_to(u, b[0], pb, sizeof(pb), &gb) == 0 &&
           lk_uring_recv(u, c[0], ic, 16384, &gc) == 0,
       "two receives into memory and one into an input prepared");
    ok(lk_uring_submit(u, on_done) == 0, "one submission");
    ok(ga.calls == 1 && ga.op == LK_URING_RECV && ga.res == 8 && ga.whole &&
           memcmp(pa, "01234567", 8) == 0,
       "the first: the 8 bytes it had room for (%d)", ga.res);
    ok(gb.calls == 1 && gb.res == 7 && !gb.whole && memcmp(pb, "records", 7) == 0,
       "the second: its 7 bytes (%d)", gb.res);
    ok(gc.calls == 1 && gc.res == 5 && evbuffer_get_length(ic) == 5, "the input: its 5 (%d)",
       gc.res);
    char rest[8];
    ok(read(a[0], rest, sizeof(rest)) == 2 && memcmp(rest, "89", 2) == 0,
       "what did not fit stays in the socket");
    evbuffer_free(ic);
    for (int k = 0; k < 2; k++)
        close(a[k]), close(b[k]), close(c[k]);
    lk_uring_free(u);
}

struct other {
    struct lk_uring *u;
    int fd;
    struct evbuffer *out;
    struct got g;
    int r;
};

static void *
other_thread(void *arg)
{
    struct other *o = arg;

    lk_uring_send(o->u, o->fd, o->out, 0, &o->g);
    o->r = lk_uring_submit(o->u, on_done);
    return NULL;
}

/* lookout makes each worker's ring in the main thread; the worker's own
 * thread submits. */
static void
test_other_thread(void)
{
    struct other o = {.u = lk_uring_new()};
    int a[2];
    pthread_t t;
    char buf[8];

    if (!ok(o.u != NULL, "a ring, made here"))
        return;
    pair(a);
    o.fd = a[0];
    o.out = evbuffer_new();
    evbuffer_add(o.out, "hi", 2);
    pthread_create(&t, NULL, other_thread, &o);
    pthread_join(t, NULL);
    ok(o.r == 0 && o.g.calls == 1 && o.g.res == 2, "another thread submits through it (%d, %d)", o.r,
       o.g.res);
    ok(read(a[1], buf, sizeof(buf)) == 2, "and the bytes went");
    evbuffer_free(o.out);
    close(a[0]), close(a[1]);
    lk_uring_free(o.u);
}

/* A connected TCP pair on 127.0.0.1, nonblocking (MSG_MORE means nothing
 * to a socketpair). */
static int
tcp_pair(int sv[2])
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    sv[0] = sv[1] = -1;
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &len) != 0)
        goto out;
    sv[1] = socket(AF_INET, SOCK_STREAM, 0);
    if (sv[1] < 0 || connect(sv[1], (struct sockaddr *)&sa, sizeof(sa)) != 0)
        goto out;
    sv[0] = accept(l, NULL, NULL);
    nonblock(sv);
out:
    if (l >= 0)
        close(l);
    return sv[0] >= 0 && sv[1] >= 0 ? 0 : -1;
}

static void
test_more(void)
{
    struct lk_uring *u = lk_uring_new();
    int held[2], now[2];
    struct got gh = {0}, gn = {0};
    char buf[16];

    if (!ok(u != NULL, "a ring"))
        return;
    if (!ok(tcp_pair(held) == 0 && tcp_pair(now) == 0, "two TCP connections on 127.0.0.1"))
        goto out;
    struct evbuffer *oh = evbuffer_new(), *on = evbuffer_new();
    evbuffer_add(oh, "answer", 6);
    evbuffer_add(on, "answer", 6);
    ok(lk_uring_send(u, held[0], oh, 1, &gh) == 0 && lk_uring_send(u, now[0], on, 0, &gn) == 0 &&
           lk_uring_submit(u, on_done) == 0,
       "a send with more and one without, in one submission");
    ok(gh.res == 6 && gn.res == 6, "each took its 6 bytes (%d, %d)", gh.res, gn.res);
    /* On loopback a segment sent is in the peer's queue when the send returns. */
    ok(read(now[1], buf, sizeof(buf)) == 6, "without more: the peer has them at once");
    ok(read(held[1], buf, sizeof(buf)) < 0 && errno == EAGAIN, "with more: the kernel holds them");
    shutdown(held[0], SHUT_WR);
    ok(read(held[1], buf, sizeof(buf)) == 6 && memcmp(buf, "answer", 6) == 0,
       "the sender's end sends them");
    ok(read(held[1], buf, sizeof(buf)) == 0, "with the end");
    evbuffer_free(oh);
    evbuffer_free(on);
out:
    for (int k = 0; k < 2; k++) {
        if (held[k] >= 0)
            close(held[k]);
        if (now[k] >= 0)
            close(now[k]);
    }
    lk_uring_free(u);
}

static void
test_write(void)
{
    struct lk_uring *u = lk_uring_new();
    int a[2], p[2] = {-1, -1}, f = -1, n = 0;
    struct got gs = {0}, gw = {0};
    char buf[256], path[] = "/tmp/lk-test-uring-XXXXXX";
    static char fill[4096];

    if (!ok(u != NULL, "a ring"))
        return;
    pair(a);
    if (!ok(pipe(p) == 0, "a pipe, blocking as stderr is"))
        goto out;
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, "answer", 6);
    alarm(10); /* a write that waited would hang here */
    ok(lk_uring_send(u, a[0], out, 0, &gs) == 0 &&
           lk_uring_write(u, p[1], "two lines\nof the log\n", 21, &gw) == 0 &&
           lk_uring_submit(u, on_done) == 0,
       "a send and a write in one submission");
    ok(gs.op == LK_URING_SEND && gs.res == 6 && gw.op == LK_URING_WRITE && gw.res == 21 &&
           gw.whole,
       "each done, and told which it was (%d: %d, %d: %d)", gs.op, gs.res, gw.op, gw.res);
    ok(read(p[0], buf, sizeof(buf)) == 21 && memcmp(buf, "two lines\nof the log\n", 21) == 0,
       "the pipe has the bytes");

    /* A full pipe: the write answers -EAGAIN rather than waiting. */
    fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
    while (write(p[1], fill, sizeof(fill)) > 0 && ++n < 10000)
        ;
    fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) & ~O_NONBLOCK);
    lk_uring_write(u, p[1], "a line\n", 7, &gw);
    int r = lk_uring_submit(u, on_done);
    ok(r == 0 && gw.calls == 2 && gw.res == -EAGAIN && !gw.whole,
       "a full pipe: -EAGAIN, not a wait (%d)", gw.res);

    int dn = open("/dev/null", O_WRONLY);
    lk_uring_write(u, dn, fill, sizeof(fill), &gw);
    r = lk_uring_submit(u, on_done);
    ok(dn >= 0 && r == 0 && gw.calls == 3 && gw.res == (int)sizeof(fill),
       "/dev/null: done (%d)", gw.res);
    if (dn >= 0)
        close(dn);

    /* A regular file: done or refused, within the call (ext4 refuses on O_APPEND). */
    f = mkstemp(path);
    if (f >= 0) {
        close(f);
        f = open(path, O_WRONLY | O_APPEND);
        unlink(path);
    }
    lk_uring_write(u, f, "a line\n", 7, &gw);
    r = lk_uring_submit(u, on_done);
    ok(f >= 0 && r == 0 && gw.calls == 4 && (gw.res == 7 || gw.res < 0),
       "a regular file: an answer within the call (%d)", gw.res);
    alarm(0);
    evbuffer_free(out);
out:
    close(a[0]), close(a[1]);
    for (int k = 0; k < 2; k++)
        if (p[k] >= 0)
            close(p[k]);
    if (f >= 0)
        close(f);
    lk_uring_free(u);
}

const struct lk_test_case lk_test_uring[] = {
    {"uring/other_thread", test_other_thread},
    {"uring/write", test_write},
    {"uring/more", test_more},
    {"uring/gathered", test_gathered},
    {"uring/staged", test_staged},
    {"uring/received", test_received},
    {"uring/received_to", test_received_to},
    {"uring/full_and_gone", test_full_and_gone},
    {"uring/batch_full", test_batch_full},
    {NULL, NULL},
};
#else
const struct lk_test_case lk_test_uring[] = {
    {NULL, NULL},
};
#endif
