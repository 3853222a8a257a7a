/*
 * Gathered sends through io_uring (lk_uring.c), built with
 * ./configure --enable-io-uring only: the worker's flush queue (lk_io.c)
 * gives it every plaintext output written to in a loop iteration, and it
 * sends them all in one io_uring_enter rather than one writev each.
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
 * owner; nothing moves until lk_uring_submit, and out must not be drained
 * until then.  -1: the batch is full (submit, then add again). */
int lk_uring_send(struct lk_uring *u, int fd, struct evbuffer *out, void *owner);

/* Sends what was prepared, in one system call, and calls done for each
 * send with what send(2) would have returned (a negative errno for an
 * error) and whether that was all that was prepared.  The sends never wait
 * (MSG_DONTWAIT), so they all complete within the call.  -1: the ring is
 * broken (nothing prepared was sent, and done was not called): free it. */
int lk_uring_submit(struct lk_uring *u, void (*done)(void *owner, int res, int whole));

#endif
