/*
 * The worker's budget for held frames (lk_hold.h): a byte count, the owner
 * allowed past it, and a queue of connections waiting to read, resumed
 * from one event so that none is called back from inside another's
 * callback.
 */
#include <event2/event.h>

#include "lk_hold.h"
#include "lk_stats.h"

void
lk_hold_init(struct lk_hold *h, struct event_base *base)
{
    *h = (struct lk_hold){.base = base};
}

void
lk_hold_free(struct lk_hold *h)
{
    if (h->ev != NULL)
        event_free(h->ev);
    h->ev = NULL;
}

static void
unqueue(struct lk_hold *h, struct lk_hold_waiter *q)
{
    if (!q->queued)
        return;
    if (q->prev != NULL)
        q->prev->next = q->next;
    else
        h->head = q->next;
    if (q->next != NULL)
        q->next->prev = q->prev;
    else
        h->tail = q->prev;
    q->prev = q->next = NULL;
    q->queued = 0;
}

/* Resumes every waiting connection; each asks again, so that those still
 * over the budget queue again (in the same order) and one of them may
 * become the owner. */
static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_hold *h = arg;
    struct lk_hold_waiter *last = h->tail;

    (void)fd;
    (void)what;
    while (h->head != NULL) {
        struct lk_hold_waiter *q = h->head;
        int was_last = q == last;
        unqueue(h, q);
        q->resume(q);
        if (was_last)
            break; /* the ones queued again wait for the next release */
    }
}

static void
wake(struct lk_hold *h)
{
    if (h->head == NULL || h->base == NULL)
        return;
    if (h->ev == NULL)
        h->ev = event_new(h->base, -1, 0, resume_cb, h);
    event_active(h->ev, 0, 1);
}

void
lk_hold_add(struct lk_hold *h, size_t n)
{
    h->bytes += n;
    lk_stats_held(n, 0);
}

void
lk_hold_sub(struct lk_hold *h, size_t n)
{
    h->bytes -= n;
    lk_stats_held(-(long long)n, 0);
}

void
lk_hold_set(struct lk_hold *h, struct lk_hold_waiter *q, size_t n)
{
    if (n > q->counted)
        lk_hold_add(h, n - q->counted);
    else if (n < q->counted)
        lk_hold_sub(h, q->counted - n);
    q->counted = n;
}

void
lk_hold_release(struct lk_hold *h, struct lk_hold_waiter *q, size_t max)
{
    lk_hold_set(h, q, 0);
    lk_hold_done(h, q, max);
}

int
lk_hold_may_read(struct lk_hold *h, struct lk_hold_waiter *q, size_t max)
{
    if (h->bytes < max || h->owner == q)
        return 1;
    if (h->owner == NULL) {
        h->owner = q;
        unqueue(h, q);
        return 1;
    }
    if (!q->queued) {
        q->queued = 1;
        q->prev = h->tail;
        q->next = NULL;
        if (h->tail != NULL)
            h->tail->next = q;
        else
            h->head = q;
        h->tail = q;
        lk_stats_held(0, 1);
    }
    return 0;
}

void
lk_hold_done(struct lk_hold *h, struct lk_hold_waiter *q, size_t max)
{
    unqueue(h, q);
    if (h->owner == q)
        h->owner = NULL;
    if (h->owner == NULL || h->bytes < max)
        wake(h);
}
