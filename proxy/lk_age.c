/*
 * max_connection_age: each client connection gets, at accept, a deadline
 * (the age, moved by the jitter so that connections accepted together do
 * not all end together) and a timer of its own for it.  When it fires, the
 * connection is ended as a drain would end it (lk_proto_ops.drain), and
 * the timer is armed again for the grace, past which what is still open is
 * closed.  A timer per connection, not a per-worker sweep over them all: a
 * sweep reads every connection at every tick (about 160 ns each with cold
 * caches: 1.6 ms a tick for 10,000 connections, 35 ms for 100,000), where
 * a timer costs 0.2 to 1.5 us once per connection (made, armed, freed),
 * and only while max_connection_age is on (bench/age-cost.c).  HTTP also checks at each
 * response head (lk_age_passed), so that a busy connection is told on its
 * first answer past the age.
 */
#include <stddef.h>
#include <stdint.h>
#include <event2/event.h>

#include "lk_age.h"
#include "lk_conn.h"
#include "lk_log.h"
#include "lk_stats.h"
#include "lk_worker.h"

uint64_t
lk_age_pick(unsigned age_ms, unsigned jitter_pct, uint64_t r)
{
    uint64_t span = (uint64_t)age_ms * jitter_pct / 100; /* the most it moves either way */

    if (span == 0)
        return age_ms;
    return (uint64_t)age_ms - span + r % (2 * span + 1);
}

/* splitmix64 over a per-thread counter: spread, not secret. */
static _Thread_local uint64_t rng;

static uint64_t
next_random(uint64_t mix)
{
    if (rng == 0)
        rng = (uint64_t)lk_now_ms() * 0x9e3779b97f4a7c15ull ^ mix;
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void
arm(struct lk_conn *c, long long ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

    evtimer_add(c->extra->age_ev, &tv);
}

void
lk_age_reached(struct lk_conn *c, long long now)
{
    c->aged = 1;
    c->extra->age_due_ms = now + c->conf->max_connection_age_grace_ms;
    lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->aged, 1);
    lk_log(LK_DEBUG, c, "max_connection_age reached: ending the connection at its next boundary");
}

/* c's age is up: it ends as a drain would end it.  Parked (an idle HTTP
 * keep-alive connection), it is closed unless its next request comes
 * within LK_AGE_IDLE_MS (it is then told Connection: close); in its TLS
 * handshake or waiting for its PROXY header, it is left to its grace.
 * c may be closed on return. */
static void
end(struct lk_conn *c)
{
    const struct lk_proto_ops *ops = c->w->proto_for(c->bind->proto);

    if (c->pp_wait)
        return;
    if (c->bev == NULL) {
        struct timeval tv = {LK_AGE_IDLE_MS / 1000, (LK_AGE_IDLE_MS % 1000) * 1000};
        if (c->park_ms > LK_AGE_IDLE_MS)
            event_add(&c->rev, &tv); /* its time out closes it (lk_conn_unpark_io) */
    } else if (c->proto != NULL && ops != NULL && ops->drain != NULL) {
        ops->drain(c);
    } else if (c->proto != NULL) {
        lk_conn_close(c);
    }
}

/* The connection's timer: its age, or its grace, is up (or HTTP moved its
 * deadline: then it waits for the new one). */
static void
fire(evutil_socket_t fd, short what, void *arg)
{
    struct lk_conn *c = arg;
    long long now = lk_now_ms();

    (void)fd;
    (void)what;
    if (c->closing || c->w->draining)
        return; /* closing anyway, or the drain ends it by its own deadline */
    if (now < c->extra->age_due_ms) {
        arm(c, c->extra->age_due_ms - now);
        return;
    }
    if (!c->aged) {
        lk_age_reached(c, now);
        arm(c, c->conf->max_connection_age_grace_ms); /* first: end() may close c */
        end(c);
        return;
    }
    lk_log(LK_INFO, c, "max_connection_age.grace (%u ms) is over and the connection is "
           "still busy; closing", c->conf->max_connection_age_grace_ms);
    lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->aged_forced, 1);
    lk_conn_close(c);
}

void
lk_age_start(struct lk_conn *c)
{
    const struct lk_conf *conf = c->conf;
    long long age = (long long)lk_age_pick(conf->max_connection_age_ms,
                                           conf->max_connection_age_jitter,
                                           next_random((uint64_t)(uintptr_t)c));
    struct lk_conn_extra *x = lk_conn_extra(c);

    x->age_ev = evtimer_new(c->w->base, fire, c);
    if (x->age_ev == NULL)
        return; /* out of memory: this one lives on */
    x->age_due_ms = lk_now_ms() + age;
    arm(c, age);
}
