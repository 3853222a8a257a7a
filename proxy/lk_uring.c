/*
 * Gathered sends through io_uring.  Each send is prepared as an SQE with
 * MSG_DONTWAIT, so the kernel runs it inline in io_uring_enter and never
 * arms a poll for it: a full socket answers -EAGAIN, as writev would.  So
 * every completion is there when the submitting call returns, and no
 * completion ever arrives later: no eventfd in the loop is needed for
 * sends.  The iovecs live here until then; the bytes stay in the outputs
 * (frozen at their start by lk_io.c) until each result is applied.
 * A write (the access log's lines, lk_uring_write) rides the same
 * submission: RWF_NOWAIT makes the kernel do it inline too, or answer
 * -EAGAIN at once, never hand it to a worker thread of its own.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <liburing.h>

#include "lk_pool.h"
#include "lk_uring.h"

#define LK_URING_ENTRIES 256   /* sends per submission */
#define LK_URING_IOVS 2048     /* iovecs they share */
#define LK_URING_IOV_MAX 64    /* per send; the rest goes in the next round */
/* A send of several chains (a head and its body) up to LK_URING_GATHER
 * bytes is copied into the ring's staging area and goes as one buffer: a
 * sendmsg costs the kernel a msghdr and an iovec array to copy in and
 * check, more than the copy of a few hundred bytes here. */
#define LK_URING_GATHER 4096
#define LK_URING_STAGE (64 * 1024)

struct lk_uring_send {
    void *owner;
    int op;           /* enum lk_uring_op */
    size_t len;       /* bytes prepared */
    struct msghdr msg;
    struct evbuffer *in;       /* a receive: into the space reserved in it */
    struct evbuffer_iovec v[2];
    int nv;
};

struct lk_uring {
    struct io_uring ring;
    unsigned n;       /* sends prepared */
    unsigned niov;    /* iovecs they take */
    size_t staged;    /* bytes of stage the prepared sends use */
    struct lk_uring_send send[LK_URING_ENTRIES];
    struct iovec iov[LK_URING_IOVS];
    unsigned char stage[LK_URING_STAGE];
};

struct lk_uring *
lk_uring_new(void)
{
    struct lk_uring *u = lk_xcalloc(1, sizeof(*u));
    /* Every submission is reaped at once; the flags older kernels lack
     * are only dropped.  Not IORING_SETUP_SINGLE_ISSUER: the main thread
     * makes every worker's ring, and a worker thread could not submit. */
    unsigned flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
    int r = io_uring_queue_init(LK_URING_ENTRIES, &u->ring, flags);
    if (r == -EINVAL)
        r = io_uring_queue_init(LK_URING_ENTRIES, &u->ring, 0);
    if (r < 0) {
        free(u);
        errno = -r;
        return NULL;
    }
    return u;
}

void
lk_uring_free(struct lk_uring *u)
{
    if (u == NULL)
        return;
    io_uring_queue_exit(&u->ring);
    free(u);
}

int
lk_uring_send(struct lk_uring *u, int fd, struct evbuffer *out, int more, void *owner)
{
    unsigned room = LK_URING_IOVS - u->niov;
    if (u->n == LK_URING_ENTRIES || room == 0)
        return -1;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL)
        return -1;
    struct evbuffer_iovec v[LK_URING_IOV_MAX];
    int nv = evbuffer_peek(out, -1, NULL, v, LK_URING_IOV_MAX);
    if (nv > LK_URING_IOV_MAX)
        nv = LK_URING_IOV_MAX;
    if ((unsigned)nv > room)
        nv = (int)room;
    struct lk_uring_send *s = &u->send[u->n];
    struct iovec *iov = &u->iov[u->niov];
    s->owner = owner;
    s->op = LK_URING_SEND;
    s->in = NULL;
    s->len = 0;
    for (int k = 0; k < nv; k++) {
        iov[k].iov_base = v[k].iov_base;
        iov[k].iov_len = v[k].iov_len;
        s->len += v[k].iov_len;
    }
    if (nv > 1 && s->len <= LK_URING_GATHER && LK_URING_STAGE - u->staged >= s->len) {
        unsigned char *at = u->stage + u->staged;
        for (int k = 0, off = 0; k < nv; off += (int)iov[k].iov_len, k++)
            memcpy(at + off, iov[k].iov_base, iov[k].iov_len);
        u->staged += s->len;
        iov[0] = (struct iovec){.iov_base = at, .iov_len = s->len};
        nv = 1;
    }
    int flags = MSG_DONTWAIT | MSG_NOSIGNAL | (more ? MSG_MORE : 0);
    if (nv == 1) {
        io_uring_prep_send(sqe, fd, iov[0].iov_base, iov[0].iov_len, flags);
    } else {
        s->msg = (struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)nv};
        io_uring_prep_sendmsg(sqe, fd, &s->msg, flags);
    }
    io_uring_sqe_set_data64(sqe, u->n);
    u->n++;
    u->niov += (unsigned)nv;
    return 0;
}

int
lk_uring_recv(struct lk_uring *u, int fd, struct evbuffer *in, size_t size, void *owner)
{
    if (u->n == LK_URING_ENTRIES || LK_URING_IOVS - u->niov < 2)
        return -1;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL)
        return -1;
    struct lk_uring_send *s = &u->send[u->n];
    struct iovec *iov = &u->iov[u->niov];
    evbuffer_unfreeze(in, 0);
    s->nv = evbuffer_reserve_space(in, (ev_ssize_t)size, s->v, 2);
    if (s->nv <= 0) {
        evbuffer_freeze(in, 0);
        return -2;
    }
    s->owner = owner;
    s->op = LK_URING_RECV;
    s->in = in;
    s->len = 0;
    for (int k = 0; k < s->nv; k++) {
        iov[k].iov_base = s->v[k].iov_base;
        iov[k].iov_len = s->v[k].iov_len;
        s->len += s->v[k].iov_len;
    }
    if (s->nv == 1) {
        io_uring_prep_recv(sqe, fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT);
    } else {
        s->msg = (struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)s->nv};
        io_uring_prep_recvmsg(sqe, fd, &s->msg, MSG_DONTWAIT);
    }
    io_uring_sqe_set_data64(sqe, u->n);
    u->n++;
    u->niov += (unsigned)s->nv;
    return 0;
}

/* The next entry of the batch, for an op of len bytes at one place (its
 * sqe still to prepare), or NULL when the batch is full. */
static struct io_uring_sqe *
entry_one(struct lk_uring *u, int op, size_t len, void *owner)
{
    if (u->n == LK_URING_ENTRIES || len > UINT_MAX)
        return NULL;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (sqe == NULL)
        return NULL;
    struct lk_uring_send *s = &u->send[u->n];
    s->owner = owner;
    s->op = op;
    s->in = NULL;
    s->len = len;
    io_uring_sqe_set_data64(sqe, u->n);
    u->n++;
    return sqe;
}

int
lk_uring_recv_to(struct lk_uring *u, int fd, void *p, size_t len, void *owner)
{
    struct io_uring_sqe *sqe = entry_one(u, LK_URING_RECV, len, owner);
    if (sqe == NULL)
        return -1;
    io_uring_prep_recv(sqe, fd, p, len, MSG_DONTWAIT);
    return 0;
}

int
lk_uring_write(struct lk_uring *u, int fd, const void *p, size_t len, void *owner)
{
    struct io_uring_sqe *sqe = entry_one(u, LK_URING_WRITE, len, owner);
    if (sqe == NULL)
        return -1;
    /* offset -1: at the file's position, as write(2) (a pipe, a socket or
     * a device has none to give) */
    io_uring_prep_write(sqe, fd, p, (unsigned)len, (uint64_t)-1);
    sqe->rw_flags = RWF_NOWAIT;
    return 0;
}

/* A receive's bytes go into its input (none when res <= 0), whose end is
 * frozen again, as lk_io.c keeps it between reads; one into memory
 * (lk_uring_recv_to) has them already. */
static void
recv_commit(struct lk_uring_send *s, int res)
{
    size_t left = res > 0 ? (size_t)res : 0;

    if (s->in == NULL)
        return;

    for (int k = 0; k < s->nv; k++) {
        s->v[k].iov_len = left < s->v[k].iov_len ? left : s->v[k].iov_len;
        left -= s->v[k].iov_len;
    }
    evbuffer_commit_space(s->in, s->v, res > 0 ? s->nv : 0);
    evbuffer_freeze(s->in, 0);
    s->in = NULL;
}

int
lk_uring_submit(struct lk_uring *u, void (*done)(void *owner, int op, int res, int whole))
{
    unsigned n = u->n, sent;
    u->n = u->niov = 0;
    u->staged = 0; /* every send completes within this call (see the top) */
    if (n == 0)
        return 0;
    int r;
    do
        r = io_uring_submit(&u->ring);
    while (r == -EINTR);
    /* What was not taken stays in the submission queue, pointing into
     * outputs that will move: it must never go, so the ring goes, after
     * what was taken is reported. */
    sent = r > 0 ? (unsigned)r : 0;
    for (unsigned k = 0; k < sent; k++) {
        struct io_uring_cqe *cqe;
        /* All completed within the submission (see the top); waiting is
         * for a kernel that would not. */
        do
            r = io_uring_peek_cqe(&u->ring, &cqe) == 0 ? 0 : io_uring_wait_cqe(&u->ring, &cqe);
        while (r == -EINTR || r == -EAGAIN);
        if (r != 0) {
            /* Cannot happen; the sends' fate is unknown, so they failed. */
            for (unsigned j = 0; j < n; j++) {
                struct lk_uring_send *s = &u->send[j];
                if (s->op == LK_URING_RECV)
                    recv_commit(s, -EIO);
                if (s->owner != NULL)
                    done(s->owner, s->op, -EIO, 0);
                s->owner = NULL;
            }
            return -1;
        }
        struct lk_uring_send *s = &u->send[io_uring_cqe_get_data64(cqe)];
        int res = cqe->res;
        void *owner = s->owner;
        io_uring_cqe_seen(&u->ring, cqe);
        s->owner = NULL;
        if (s->op == LK_URING_RECV)
            recv_commit(s, res);
        done(owner, s->op, res, res >= 0 && (size_t)res == s->len);
    }
    for (unsigned j = sent; j < n; j++) {
        if (u->send[j].in != NULL)
            recv_commit(&u->send[j], 0);
        u->send[j].owner = NULL;
    }
    return sent == n ? 0 : -1;
}
