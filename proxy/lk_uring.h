/*
 * Gathered sends and receives through io_uring (lk_uring.c), built with
 * ./configure --enable-io-uring only: the worker's flush queue (lk_io.c)
 * gives it every plaintext output written to in a loop iteration, and the
 * records OpenSSL made of every TLS client's, and it sends them all in one
 * io_uring_enter rather than one writev or write(2) each; the
 * read queue likewise every socket found readable (a TLS client's records
 * into memory, for OpenSSL to read there); and the
 * access log's lines of the iteration ride along (lk_uring_write).
 */
#ifndef LK_URING_H
#define LK_URING_H

#include <event2/buffer.h>

struct lk_uring;

/* What a prepared entry is, as lk_uring_submit's done is told. */
enum lk_uring_op { LK_URING_SEND, LK_URING_RECV, LK_URING_WRITE };

/* A ring for one worker, or NULL when the kernel refuses one (errno set):
 * the flush queue then writes as without it. */
struct lk_uring *lk_uring_new(void);
void lk_uring_free(struct lk_uring *u);

/* Prepares a send of out's start (up to the first 64 chains) to fd, for
 * owner, with MSG_MORE when more is set; nothing moves until
 * lk_uring_submit, and out must not be drained until then.  -1: the batch
 * is full (submit, then add again). */
int lk_uring_send(struct lk_uring *u, int fd, struct evbuffer *out, int more, void *owner);

/* Prepares a receive from fd of up to size bytes (perhaps more: libevent
 * rounds its chains up) into space reserved at the end of in, for owner;
 * the end of in stays unfrozen until lk_uring_submit, which commits what
 * came and freezes it again.  -1: the batch is full; -2: no memory. */
int lk_uring_recv(struct lk_uring *u, int fd, struct evbuffer *in, size_t size, void *owner);

/* Prepares a receive from fd of up to len bytes into p, for owner; p must
 * stay until lk_uring_submit, whose done finds the bytes there.  -1: the
 * batch is full. */
int lk_uring_recv_to(struct lk_uring *u, int fd, void *p, size_t len, void *owner);

/* Prepares a write of len bytes at p to fd (a pipe, a socket or a
 * device), for owner, that must not wait (RWF_NOWAIT): the kernel does it
 * within the submission or answers -EAGAIN (or another error) at once.  p
 * must stay until lk_uring_submit.  -1: the batch is full. */
int lk_uring_write(struct lk_uring *u, int fd, const void *p, size_t len, void *owner);

/* Sends, receives and writes what was prepared, in one system call, and calls done for
 * each (op: which it was) with what send(2), recv(2) or write(2) would have returned (a
 * negative errno for an error) and whether that was all that was prepared.  None waits
 * (MSG_DONTWAIT, RWF_NOWAIT), so they all complete within the call.  -1: the ring is
 * broken (what it did not take was not done, and done was not called for
 * it; a receive's space is given back): free it. */
int lk_uring_submit(struct lk_uring *u, void (*done)(void *owner, int op, int res, int whole));

#endif
