/*
 * Tests for proxy/lk_hold.c, the worker's budget for held frames: under
 * the budget everyone reads; over it one connection (the first to ask)
 * owns the excess and goes on, the others wait in order and are resumed
 * from the loop when the owner is done or the total falls under; a frame
 * larger than the whole budget completes; one that closes while waiting
 * leaves the queue.
 */
#include <stdlib.h>
#include <event2/event.h>

#include "lk_hold.h"
#include "lk_test.h"

struct conn {
    struct lk_hold_waiter hw; /* first */
    int resumed;
    int order;
};

static int resume_seq;

static void
on_resume(struct lk_hold_waiter *q)
{
    struct conn *c = (struct conn *)q;

    c->resumed++;
    c->order = ++resume_seq;
}

static void
test_budget(void)
{
    struct event_base *base = event_base_new();
    struct lk_hold h;
    struct conn a = {.hw.resume = on_resume}, b = {.hw.resume = on_resume},
                c = {.hw.resume = on_resume};
    const size_t max = 100;

    lk_hold_init(&h, base);
    ok(lk_hold_may_read(&h, &a.hw, max) && lk_hold_may_read(&h, &b.hw, max),
       "under the budget: everyone reads");
    lk_hold_add(&h, 60); /* a */
    lk_hold_add(&h, 50); /* b: 110, over */
    ok(lk_hold_may_read(&h, &a.hw, max), "over it: the first to ask owns the excess");
    ok(!lk_hold_may_read(&h, &b.hw, max), "... the next waits");
    ok(!lk_hold_may_read(&h, &c.hw, max), "... and the one after");
    ok(!lk_hold_may_read(&h, &b.hw, max) && h.head == &b.hw && h.tail == &c.hw,
       "asking again does not queue twice; oldest first");
    lk_hold_add(&h, 500); /* a's frame is larger than the whole budget */
    ok(lk_hold_may_read(&h, &a.hw, max),
       "the owner goes on past it (a frame larger than the budget)");
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(b.resumed == 0 && c.resumed == 0, "nobody resumed while the owner holds");
    lk_hold_sub(&h, 560); /* a's frame is done */
    lk_hold_done(&h, &a.hw, max);
    ok(h.owner == NULL, "its frame done, the owner gives it up");
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(b.resumed == 1 && c.resumed == 1 && b.order < c.order, "the waiting ones resume, in order");
    ok(h.head == NULL, "... out of the queue");
    /* b is still over (50 of 100 is under now): reads */
    ok(lk_hold_may_read(&h, &b.hw, max), "under the budget again: b reads");

    /* closing while waiting: it leaves the queue, and is never resumed */
    lk_hold_add(&h, 100);
    ok(lk_hold_may_read(&h, &b.hw, max), "over: b owns");
    ok(!lk_hold_may_read(&h, &c.hw, max), "c waits");
    lk_hold_done(&h, &c.hw, max); /* c closes */
    ok(h.head == NULL && !c.hw.queued, "c closed: out of the queue");
    lk_hold_sub(&h, 150);
    lk_hold_done(&h, &b.hw, max);
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(c.resumed == 1 && h.bytes == 0, "a closed one is not resumed; nothing held");

    /* a connection's own count: set up and down, and given back whole by
     * release, whatever path it closes on */
    lk_hold_set(&h, &b.hw, 70);
    lk_hold_set(&h, &c.hw, 40);
    lk_hold_set(&h, &b.hw, 90); /* b's frame grows */
    ok(h.bytes == 130 && b.hw.counted == 90, "set: the total follows each one's count (%zu)", h.bytes);
    ok(lk_hold_may_read(&h, &b.hw, max) && !lk_hold_may_read(&h, &c.hw, max), "b owns, c waits");
    lk_hold_release(&h, &c.hw, max); /* c closes while waiting */
    ok(h.bytes == 90 && c.hw.counted == 0 && !c.hw.queued, "release: c's 40 back, out of the queue");
    lk_hold_release(&h, &b.hw, max);
    ok(h.bytes == 0 && h.owner == NULL, "release: b's 90 back, the ownership given up");
    lk_hold_release(&h, &b.hw, max);
    ok(h.bytes == 0, "a second release gives back nothing");
    lk_hold_free(&h);
    event_base_free(base);
}

const struct lk_test_case lk_test_hold[] = {
    {"hold/budget", test_budget},
    {NULL, NULL},
};
