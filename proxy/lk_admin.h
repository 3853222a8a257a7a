/*
 * The admin listener (`admin = ADDR` in [lookout]): plain HTTP on a socket
 * of its own, never one of the broker-facing binds, served by worker 0's
 * event loop.  GET /metrics (Prometheus text, lk_stats.h), GET /healthz
 * (200 "ok" while serving, 503 while draining) and GET /map (the resolved
 * listener map with each broker's passive health, as JSON).  Other paths
 * get 404, other methods 405.  One request per connection.
 */
#ifndef LK_ADMIN_H
#define LK_ADMIN_H

#include <stddef.h>
#include <event2/event.h>
#include <event2/buffer.h>

struct lk_conf;
struct lk_runtime;

/* Listens on conf->admin (if set) on base.  0, or -1 with a message.  The
 * address is the first config's (a reload that changes it says it needs a
 * restart); /map and /metrics describe the generation serving when they
 * are asked (lk_workers_runtime). */
int lk_admin_start(struct event_base *base, const struct lk_conf *conf, char *err, size_t errlen);
/* Closes the listener and any admin connection still open. */
void lk_admin_stop(void);

/* The /map document of rt, as compact JSON, onto out. */
void lk_admin_map(struct evbuffer *out, struct lk_runtime *rt);

#endif
