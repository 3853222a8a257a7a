/*
 * The clock every layer reads: the monotonic clock, in milliseconds or
 * microseconds.  A header only, below everything (the log, the connection
 * I/O, broker health, TLS ticket rotation, dials and the exchanges' times
 * all read it).
 *
 * A worker reads it once per wake-up, as nginx does (lk_workers_loop):
 * lk_clock_tick() before each call of its loop forgets the last reading,
 * and the first lk_now_* after the call's wait reads the clock for every
 * callback that wait woke, and for those they made active.  An exchange
 * thus costs no clock reading of its own, where a small one read it eight
 * times; its times (the access log's, the latency histograms') are those
 * of the wake-ups that saw it begin and end.  A thread that never ticks
 * (ZooKeeper's, the health checks', the main thread before the workers
 * run) reads the clock every time.
 */
#ifndef LK_CLOCK_H
#define LK_CLOCK_H

#include <time.h>

struct lk_clock_wake {
    long long us; /* this wake-up's reading; 0: not read since the tick */
    int on;       /* this thread ticks (lk_clock_tick) */
};
extern __thread struct lk_clock_wake lk_clock_wake;

static inline long long
lk_clock_read_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Microseconds on the monotonic clock: this wake-up's reading, when the
 * thread ticks. */
static inline long long
lk_now_us(void)
{
    struct lk_clock_wake *c = &lk_clock_wake;

    if (c->us != 0)
        return c->us;
    long long now = lk_clock_read_us();
    if (c->on)
        c->us = now;
    return now;
}

static inline long long
lk_now_ms(void)
{
    return lk_now_us() / 1000;
}

/* This thread's loop is about to wait: the next lk_now_* reads the clock
 * (after the wait, since only callbacks read it). */
static inline void
lk_clock_tick(void)
{
    lk_clock_wake.on = 1;
    lk_clock_wake.us = 0;
}

/* This thread stops ticking: every lk_now_* reads the clock again. */
static inline void
lk_clock_untick(void)
{
    lk_clock_wake.on = 0;
    lk_clock_wake.us = 0;
}

#endif
