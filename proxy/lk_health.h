/*
 * Active broker health checks (`health.check` in a cluster's section): one
 * checker per runtime, on one event loop, that every health.interval
 * connects to each broker of the clusters that ask for checks, over TCP or
 * with an HTTP GET of health.path, and feeds the outcome into the
 * runtime's broker health (lk_broker_check_result), which the service
 * addresses' rotation reads.  Non-blocking throughout; nothing here runs on
 * another thread.
 */
#ifndef LK_HEALTH_H
#define LK_HEALTH_H

#include <stddef.h>
#include <event2/event.h>

struct lk_runtime;

/*
 * Starts rt's checker on base (worker 0's loop, lk_workers_main_base) and
 * keeps it in rt->checker, with a reference on rt until lk_health_stop;
 * the first round runs at once.  Starting when
 * no cluster has health.check on does nothing.  Call from base's thread,
 * before it runs or from one of its callbacks.  0, or -1 with err.
 */
int lk_health_start(struct lk_runtime *rt, struct event_base *base, char *err, size_t errlen);

/*
 * Stops rt's checker, if any, and drops its reference on rt (rt may be
 * gone on return): checks in flight are dropped, unreported.
 * From base's thread, and before base is freed; so that a reload can stop
 * the old runtime's checker and start the new one's.  The health state
 * stays as the checks left it.
 */
void lk_health_stop(struct lk_runtime *rt);

#endif
