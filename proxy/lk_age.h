/*
 * max_connection_age (lk_age.c): a client connection older than its age,
 * counted from accept and spread by jitter, is ended the way a drain ends
 * it (lk_proto_ops.drain: HTTP says Connection: close on its next answer,
 * Kafka and Pulsar close between answers or frames), so that clients
 * reconnect and a balancer in front of several lookouts evens them out.
 * After max_connection_age.grace it is closed even if busy.  Off (the
 * default), a connection gets no deadline and the worker no timer.
 */
#ifndef LK_AGE_H
#define LK_AGE_H

#include <stdint.h>

#include "lk_clock.h"
#include "lk_conn.h"

/* The age a connection gets: age_ms moved by up to jitter_pct percent
 * either way, evenly by r (a random number).  Pure. */
uint64_t lk_age_pick(unsigned age_ms, unsigned jitter_pct, uint64_t r);

/* At accept, when c->conf->max_connection_age_ms is not 0: c's deadline
 * and its timer (in c->extra, freed with c). */
void lk_age_start(struct lk_conn *c);
/* c is past its age and its end begins now: counted, logged, and its grace
 * starts.  The caller ends it (the timer: lk_proto_ops.drain). */
void lk_age_reached(struct lk_conn *c, long long now);

/* Past its age, an idle HTTP keep-alive connection waits this long at most
 * for its next request (whose answer then says Connection: close) before
 * it is closed: a client that keeps asking gets told, rather than find its
 * connection closed under its next request. */
#define LK_AGE_IDLE_MS 1000

/* Whether c is past its age (lk_age_reached is done the first time), for
 * a protocol at a point where it can still say so (HTTP: a response head).
 * One compare when max_connection_age is off. */
static inline int
lk_age_passed(struct lk_conn *c)
{
    long long now;

    if (c->extra == NULL || c->extra->age_due_ms == 0)
        return 0;
    if (c->aged)
        return 1;
    if ((now = lk_now_ms()) < c->extra->age_due_ms)
        return 0;
    lk_age_reached(c, now);
    return 1;
}

#endif
