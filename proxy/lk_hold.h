/*
 * A worker's budget for what it holds to rewrite (max_held_bytes): the
 * response frames the Kafka module keeps whole until their end, and the
 * tails of the Fetch answers it streams; the Pulsar module's held broker
 * frames, and the frames from a client that wait for their command past a
 * small allowance (a client's side is a waiter of its own, and it stops
 * reading that client).  Each connection's share is
 * counted in (lk_hold_add, lk_hold_sub); once the worker's total is over
 * the budget, a connection that would hold more stops reading its broker
 * (lk_hold_may_read says no and queues it) until the total falls back
 * under, when it is resumed from the loop.  One connection at a time, the
 * owner, may go on past the budget: the first that asks while no one owns
 * it, until its held frame is done.  A frame larger than the whole budget
 * therefore still completes (its broker, or its client, is all it waits
 * for), the worker holds at most the budget plus one frame
 * (max_frame_bytes), and no set of connections can wait on one another:
 * the owner never waits on another, and every other waits only for the
 * owner or for memory the owner frees.  A client that owns the excess and
 * sends the rest of its frame slowly keeps the others that are over the
 * budget waiting until it ends or timeout.idle closes it.
 */
#ifndef LK_HOLD_H
#define LK_HOLD_H

#include <stddef.h>

struct event;
struct lk_hold;

/* One connection's place in the queue of those that wait. */
struct lk_hold_waiter {
    struct lk_hold_waiter *prev, *next;
    unsigned queued : 1;
    size_t counted; /* what it holds now, of the worker's total (lk_hold_set) */
    /* Called from the loop once it may read again (it is dequeued first). */
    void (*resume)(struct lk_hold_waiter *q);
};

struct lk_hold {
    size_t bytes;                       /* held now, by all the worker's connections */
    const struct lk_hold_waiter *owner; /* the one that may go past the budget */
    struct lk_hold_waiter *head, *tail; /* waiting, oldest first */
    struct event *ev;                   /* resumes them; made when first needed */
    struct event_base *base;
};

void lk_hold_init(struct lk_hold *h, struct event_base *base);
void lk_hold_free(struct lk_hold *h);

/* n more bytes held / n bytes no longer held (the gauge in /metrics). */
void lk_hold_add(struct lk_hold *h, size_t n);
void lk_hold_sub(struct lk_hold *h, size_t n);

/*
 * Whether q may read more of a frame it holds, under budget max: yes while
 * the total is under it, or when q owns the excess or becomes its owner.
 * No: q is queued (once; a pause counted in /metrics), and the caller
 * stops reading until q->resume runs.
 */
int lk_hold_may_read(struct lk_hold *h, struct lk_hold_waiter *q, size_t max);

/* q's connection holds n bytes now (more or fewer than before): the total
 * follows by the difference.  What a connection counts lives with its place
 * in the queue, so that lk_hold_release gives back exactly that. */
void lk_hold_set(struct lk_hold *h, struct lk_hold_waiter *q, size_t n);
/* q holds nothing more (its frame is done, or it closes): what it counted
 * leaves the total, then lk_hold_done.  Every connection that counts calls
 * it when its frame is done and when it closes. */
void lk_hold_release(struct lk_hold *h, struct lk_hold_waiter *q, size_t max);

/* q holds nothing more for now (its frame is done, or it closes): it
 * leaves the queue and gives up the ownership, and the waiting ones are
 * resumed if the total allows. */
void lk_hold_done(struct lk_hold *h, struct lk_hold_waiter *q, size_t max);

#endif
