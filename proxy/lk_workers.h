/*
 * The workers, their generations, reloads and drain (lk_workers.c).
 */
#ifndef LK_WORKERS_H
#define LK_WORKERS_H

#include <stddef.h>
#include <stdint.h>
#include <event2/event.h>

#include "lk_conf.h"

struct lk_proto_ops;
struct lk_runtime;
struct lk_worker;

/* Creates n workers with listeners on every bind of rt->conf; 0/-1 + err.
 * rt becomes generation 1; the workers take their own references.  protos
 * says which module serves a bind's protocol (lk_proto_for). */
int lk_workers_start(struct lk_runtime *rt, int n, const struct lk_proto_ops *(*protos)(unsigned),
                     char *err, size_t errlen);

/* What a reload changed, for its log line. */
struct lk_reload_stats {
    size_t kept, added, removed; /* listeners (binds of the config) */
};
/*
 * From the main thread (SIGHUP), with rt built from the new config: checks
 * that every added bind can be bound (else -1 and "file:line: message" in
 * err: rt is not used, and the caller frees it), carries broker health
 * over, makes rt the current generation (rt->generation: the next number)
 * and tells every worker, which switches at once: listeners on the same
 * address with the same TLS-ness and protocol keep their socket, added
 * ones open, removed ones close (their connections finish what is under
 * way).  Takes over the caller's reference on success.
 */
int lk_workers_reload(struct lk_runtime *rt, struct lk_reload_stats *st, char *err, size_t errlen);
/* Whether every socket conf adds to the generation serving can be bound
 * (each is bound without listening, then closed): 0, or -1 with
 * "file:line: cannot listen on ADDR: why".  0 before the workers start. */
int lk_workers_can_bind(const struct lk_conf *conf, char *err, size_t errlen);
/* The current generation, with a reference for the caller (NULL before
 * lk_workers_start). */
struct lk_runtime *lk_workers_runtime(void);
/* The current generation's number (1 until the first reload). */
uint64_t lk_workers_generation(void);
/* Reloads, as /metrics counts them (lookout_reloads_total{result}): the
 * caller of lk_workers_reload counts both, since a reload can fail before
 * it (a config that does not load). */
extern _Atomic unsigned long lk_reloads_ok, lk_reloads_failed;
/*
 * From the main thread (SIGTERM, SIGINT): every worker stops accepting,
 * closes idle connections, asks the others to finish (lk_proto_ops.drain)
 * and, once none is left or timeout_ms have passed (then closing what
 * is), ends its loop.  Called again, the earlier deadline stands.
 */
void lk_workers_drain(unsigned timeout_ms);
/* 1 once lk_workers_drain was called (/healthz answers 503 then). */
int lk_workers_draining(void);
/* Runs them (worker 0 on the calling thread) until lk_workers_stop. */
void lk_workers_run(void);
/* A worker's loop: event_base_dispatch(base), a call of the loop at a time
 * with lk_clock_tick() before each, so that the callbacks a wait wakes
 * read the clock once between them (lk_clock.h).  It ends as dispatch
 * would: on a loopbreak or loopexit (a stop, a drain), an error, or
 * nothing left to wait for. */
void lk_workers_loop(struct event_base *base);
/* The event base of worker 0, which runs on the main thread (signals). */
struct event_base *lk_workers_main_base(void);
/* Asks every worker to stop (from any thread). */
void lk_workers_stop(void);
/*
 * A broker of cl's (from, which the connection that carried the response
 * goes to) named node node_id, which the map lacks, at host:port: its
 * inter-broker listener's address, since lookout reaches the brokers on
 * that listener.  rt's lk_dyn learns it (lk_dyn_learn), and when the
 * pattern gives each node a port, every worker binds that port (w at once,
 * before the response that names it reaches the client).  rt is the
 * generation of the connection that carried the response (cl is of its
 * config): a node learned on an older one than the worker's is served by
 * connections of that generation only, and gets no listener.
 */
void lk_workers_learn_node(struct lk_worker *w, struct lk_runtime *rt, const struct lk_cluster *cl,
                           const struct lk_broker *from, int32_t node_id, struct lk_str host,
                           int32_t port);
/* Binds were added at run time (lk_dyn_binds): w, the calling worker,
 * listens on them at once, and the others are told to. */
void lk_workers_binds_changed(struct lk_worker *w);
void lk_workers_free(void);

#endif
