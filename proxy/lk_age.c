/*
 * max_connection_age: each client connection gets a deadline at accept
 * (the age, moved by the jitter so that connections accepted together do
 * not all end together), and each worker one persistent timer, made by its
 * first such connection, that walks its connections a few times a second
 * and ends those past their deadline as a drain would (lk_proto_ops.drain),
 * then, past the grace, closes what is still open.  A timer per worker
 * rather than one per connection: a connection costs its 8-byte deadline
 * and nothing else, and the walk is a few nanoseconds a connection (README,
 * "Balanced connections").  HTTP also checks at each response head
 * (lk_age_passed), so a busy connection gets its Connection: close on the
 * first answer past the age, not on one up to a tick later.
 */
#include <stddef.h>
#include <stdint.h>
#include <event2/event.h>

#include "lk_age.h"
#include "lk_conn.h"
#include "lk_log.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_worker.h"

#define LK_AGE_TICK_MIN_MS 50
#define LK_AGE_TICK_MAX_MS 1000

uint64_t
lk_age_pick(unsigned age_ms, unsigned jitter_pct, uint64_t r)
{
    uint64_t span = (uint64_t)age_ms * jitter_pct / 100; /* the most it moves either way */

    if (span == 0)
        return age_ms;
    return (uint64_t)age_ms - span + r % (2 * span + 1);
}

unsigned
lk_age_tick_ms(unsigned age_ms, unsigned jitter_pct)
{
    uint64_t least = (uint64_t)age_ms - (uint64_t)age_ms * jitter_pct / 100;
    uint64_t tick = least / 20;

    return tick < LK_AGE_TICK_MIN_MS   ? LK_AGE_TICK_MIN_MS
           : tick > LK_AGE_TICK_MAX_MS ? LK_AGE_TICK_MAX_MS
                                       : (unsigned)tick;
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

static void sweep(evutil_socket_t fd, short what, void *arg);

/* The worker's sweep, every tick_ms (made, or re-made for a new period). */
static void
arm(struct lk_worker *w, unsigned tick_ms)
{
    struct timeval tv = {tick_ms / 1000, (tick_ms % 1000) * 1000};

    if (w->age_ev != NULL && w->age_tick_ms == tick_ms)
        return;
    if (w->age_ev == NULL)
        w->age_ev = event_new(w->base, -1, EV_PERSIST, sweep, w);
    w->age_tick_ms = tick_ms;
    event_add(w->age_ev, &tv);
}

void
lk_age_start(struct lk_conn *c)
{
    const struct lk_conf *conf = c->conf;

    c->age_due_ms =
        lk_now_ms() + (long long)lk_age_pick(conf->max_connection_age_ms,
                                             conf->max_connection_age_jitter,
                                             next_random((uint64_t)(uintptr_t)c->w ^ c->id));
    arm(c->w, lk_age_tick_ms(conf->max_connection_age_ms, conf->max_connection_age_jitter));
}

void
lk_age_stop(struct lk_worker *w)
{
    if (w->age_ev != NULL)
        event_free(w->age_ev);
    w->age_ev = NULL;
}

void
lk_age_reached(struct lk_conn *c, long long now)
{
    c->aged = 1;
    c->age_due_ms = now + c->conf->max_connection_age_grace_ms;
    lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->aged, 1);
    lk_log(LK_DEBUG, c, "max_connection_age reached: ending the connection at its next boundary");
}

/* c's age is up: it ends as a drain would end it.  Parked (an idle HTTP
 * keep-alive connection), it is closed unless its next request comes
 * within LK_AGE_IDLE_MS (it is then told Connection: close); in its TLS
 * handshake or waiting for its PROXY header, it is left to its grace. */
static void
end(struct lk_conn *c, long long now)
{
    const struct lk_proto_ops *ops = c->w->proto_for(c->bind->proto);

    lk_age_reached(c, now);
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

static void
sweep(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;
    const struct lk_conf *conf = w->rt->conf;
    long long now = lk_now_ms();
    int any = 0;

    (void)fd;
    (void)what;
    if (w->draining)
        return; /* the drain ends them all, by its own deadline */
    for (struct lk_conn *c = w->conns, *next; c != NULL; c = next) {
        next = c->next; /* c may close below, never another */
        if (c->age_due_ms == 0)
            continue;
        any = 1;
        if (now < c->age_due_ms || c->closing)
            continue;
        if (!c->aged) {
            end(c, now);
            continue;
        }
        lk_log(LK_INFO, c, "max_connection_age.grace (%u ms) is over and the connection is "
               "still busy; closing", c->conf->max_connection_age_grace_ms);
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->aged_forced, 1);
        lk_conn_close(c);
    }
    if (conf->max_connection_age_ms != 0)
        arm(w, lk_age_tick_ms(conf->max_connection_age_ms, conf->max_connection_age_jitter));
    else if (!any)
        lk_age_stop(w); /* a reload turned it off, and no connection has a deadline left */
}
