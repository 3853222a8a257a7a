/*
 * Tests for proxy/lk_clock.h and the worker's loop (lk_workers_loop): a
 * thread that ticks reads the clock once a call of its loop, the callbacks
 * one wait wakes share that reading, the next wait's read a later one, and
 * a thread that does not tick reads the clock every time.
 */
#include <time.h>

#include <event2/event.h>

#include "lk_clock.h"
#include "lk_test.h"
#include "lk_workers.h"

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* How far apart two readings 3 ms apart are: 3000 us or more when each
 * reads the clock, 0 when both are one wake-up's reading. */
static long long
apart(long long *first)
{
    long long a = lk_now_us();
    sleep_ms(3);
    if (first != NULL)
        *first = a;
    return lk_now_us() - a;
}

static void
test_tick(void)
{
    long long a, d = apart(NULL);
    ok(d >= 3000, "no tick: each reading is the clock's (%lld us apart)", d);

    lk_clock_tick();
    d = apart(&a);
    long long b = lk_now_us();
    ok(d == 0, "after a tick: one reading until the next (%lld, %lld)", a, b);
    ok(lk_now_ms() == a / 1000, "milliseconds are the same reading (%lld, %lld)", lk_now_ms(),
       a / 1000);

    lk_clock_tick();
    b = lk_now_us();
    ok(b - a >= 3000, "the next tick: a new reading (%lld us later)", b - a);

    lk_clock_untick();
    d = apart(NULL);
    ok(d >= 3000, "untick: the clock's again (%lld us apart)", d);
}

struct seen {
    struct event_base *base;
    long long at[3];
    int n;
};

static void
record_cb(evutil_socket_t fd, short what, void *arg)
{
    struct seen *s = arg;

    s->at[s->n++] = lk_now_us();
    if (s->n == 2)
        sleep_ms(3); /* work that takes time, in the same wake-up */
    if (s->n == 3)
        event_base_loopbreak(s->base);
}

static void
test_loop(void)
{
    struct seen s = {.base = event_base_new()};
    struct timeval now = {0, 0}, later = {0, 20000};
    struct event *e1 = evtimer_new(s.base, record_cb, &s);
    struct event *e2 = evtimer_new(s.base, record_cb, &s);
    struct event *e3 = evtimer_new(s.base, record_cb, &s);
    struct event *keep = evtimer_new(s.base, record_cb, &s);
    struct timeval hour = {3600, 0};

    evtimer_add(e1, &now);
    evtimer_add(e2, &now);
    evtimer_add(e3, &later);
    evtimer_add(keep, &hour); /* the loop has something to wait for after the break */
    lk_workers_loop(s.base);
    ok(s.n == 3, "the loop ran the three timers and ended at the break (%d)", s.n);
    ok(s.at[0] == s.at[1], "two callbacks of one wake-up: one reading (%lld, %lld)", s.at[0],
       s.at[1]);
    /* 20 ms from the adds, on libevent's coarser clock: well over 10 */
    ok(s.at[2] - s.at[1] >= 10000,
       "the next wake-up, 20 ms on: a reading of its own (%lld us later)", s.at[2] - s.at[1]);
    ok(apart(NULL) >= 3000, "once the loop ends, the thread reads the clock again");
    event_free(e1);
    event_free(e2);
    event_free(e3);
    event_free(keep);
    event_base_free(s.base);
}

const struct lk_test_case lk_test_clock[] = {
    {"clock/tick", test_tick},
    {"clock/loop", test_loop},
    {NULL, NULL},
};
