/*
 * What the runtime adds to the listener map while it runs, beside the
 * immutable config: Kafka nodes that the map lacks but a broker.pattern
 * covers, learned from the brokers' own responses, and the sockets lookout
 * binds for them.  Shared by the workers under one mutex; taken on a
 * connection's start and when a response names a node the map lacks,
 * never per request.  Nothing added is freed before the runtime, so
 * connections keep plain pointers to it.
 */
#ifndef LK_DYN_H
#define LK_DYN_H

#include <stddef.h>
#include <stdint.h>

#include "lk_conf.h"

struct lk_dyn;
struct lk_runtime;
struct lk_worker;

/* Learned brokers, at most (a node whose address changes counts again). */
#define LK_DYN_MAX_BROKERS 4096

struct lk_dyn *lk_dyn_new(void);
void lk_dyn_free(struct lk_dyn *d);

/*
 * A broker of cl's (from, which the connection that carried the response
 * goes to) named node node_id, which the map lacks, at host:port: its
 * inter-broker listener's address, since lookout reaches the brokers on
 * that listener.  The first time, or when the address changes, lookout
 * learns the node (reached over from's scheme), logs it, and when the
 * pattern gives each node a port, binds that port on every worker (on w at
 * once, before the response that names it reaches the client).  Nothing
 * for a cluster without broker.pattern.  rt is the generation of the
 * connection that carried the response (cl is of its config): a node
 * learned on an older one than the worker's is served by connections of
 * that generation only, and gets no listener.
 */
void lk_dyn_learn_node(struct lk_worker *w, struct lk_runtime *rt, const struct lk_cluster *cl,
                       const struct lk_broker *from, int32_t node_id, struct lk_str host,
                       int32_t port);

/* The learned broker of cl with that node id, or NULL. */
const struct lk_broker *lk_dyn_find_node(struct lk_runtime *rt, const struct lk_cluster *cl,
                                         int32_t node_id);

/* The binds added at run time from index `from` on, at most max of them,
 * into out (in order; they never go away): the count. */
size_t lk_dyn_binds(struct lk_runtime *rt, size_t from, const struct lk_bind **out, size_t max);

#endif
