/*
 * Gathered sends and receives through io_uring (lk_uring.c), built with
 * ./configure --enable-io-uring only: the worker's flush queue (lk_io.c)
 * gives it every plaintext output written to in a loop iteration, and it
 * sends them all in one io_uring_enter rather than one writev each; the
 * read queue likewise every plaintext socket found readable.
 */
#ifndef LK_URING_H
#define LK_URING_H

#include <event2/buffer.h>

struct lk_uring;

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

/* Sends and receives what was prepared, in one system call, and calls done for each
 * (recv: a receive) with what send(2) or recv(2) would have returned (a negative errno for
 * an error) and whether that was all that was prepared.  None waits
 * (MSG_DONTWAIT), so they all complete within the call.  -1: the ring is
 * broken (what it did not take was not done, and done was not called for
 * it; a receive's space is given back): free it. */
int lk_uring_submit(struct lk_uring *u, void (*done)(void *owner, int recv, int res, int whole));

#endif
