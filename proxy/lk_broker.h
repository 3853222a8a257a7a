/*
 * Broker choice and health state (lk_broker.c).
 */
#ifndef LK_BROKER_H
#define LK_BROKER_H

#include "lk_conf.h"

struct evbuffer;
struct lk_runtime;

/* Picks a broker of cl round-robin among those whose internal listener has
 * an address of family (http/https, pulsar/pulsar+ssl, kafka/kafka+ssl),
 * skipping brokers that are not up (lk_broker_up), unless none is.  NULL
 * when no broker has an address of the family. */
const struct lk_broker *lk_pick_broker(struct lk_runtime *rt, const struct lk_cluster *cl,
                                       enum lk_scheme family);
/*
 * Health bookkeeping (struct lk_health_conf has the rules), callable from
 * any worker.  A connect result: a success clears the broker's failures; a
 * failure counts, and from the cluster's health.fails-th in a row on backs
 * the broker off (health.backoff, doubled per further failure, up to
 * health.backoff_max).  An active check's result: health.fails failed
 * checks in a row eject the broker until one passes; a pass also clears
 * the connect failures.
 */
void lk_broker_connect_result(struct lk_runtime *rt, const struct lk_broker *b, int ok);
void lk_broker_check_result(struct lk_runtime *rt, const struct lk_broker *b, int ok);
/*
 * What the health state says now, for /map and /metrics as well as the
 * rotation: whether service addresses may send b traffic (neither backed
 * off nor ejected by checks), and its consecutive connect and check
 * failures.  Brokers learnt at run time (lk_dyn.h) share one state.
 */
int lk_broker_up(const struct lk_runtime *rt, const struct lk_broker *b);
unsigned lk_broker_fails(const struct lk_runtime *rt, const struct lk_broker *b);
unsigned lk_broker_check_fails(const struct lk_runtime *rt, const struct lk_broker *b);

/* /metrics' broker health families of rt (a const struct lk_runtime *;
 * NULL: none), as lk_stats_write's health callback. */
void lk_broker_write_health(struct evbuffer *out, const void *rt);

#endif
