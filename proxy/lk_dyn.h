/*
 * What the runtime adds to the listener map while it runs, beside the
 * immutable config: Kafka nodes that the map lacks but a broker.pattern
 * covers, learned from the brokers' own responses, and the sockets lookout
 * binds for them.  Shared by the workers under one mutex; taken on a
 * connection's start and when a response names a node the map lacks,
 * never per request.  Nothing added is freed before the runtime (which
 * holds it: rt->dyn), so connections keep plain pointers to it.  It knows
 * neither the runtime nor the workers: lk_workers_learn_node binds what
 * it adds.
 */
#ifndef LK_DYN_H
#define LK_DYN_H

#include <stddef.h>
#include <stdint.h>

#include "lk_conf.h"

struct lk_dyn;

/* Learned brokers, at most (a node whose address changes counts again). */
#define LK_DYN_MAX_BROKERS 4096

struct lk_dyn *lk_dyn_new(void);
void lk_dyn_free(struct lk_dyn *d);

/*
 * A broker of cl's (from) named node node_id, which the map lacks, at
 * host:port (lk_workers_learn_node says when): the first time, or when the
 * address changes, d learns the node (reached over from's scheme; nbrokers:
 * the map's, which learned brokers are numbered after) and logs it, and
 * when the pattern gives each node a port, adds a bind for it.  1 when a
 * bind was added (the workers are to listen on it), else 0.  Nothing for
 * a cluster without broker.pattern.
 */
int lk_dyn_learn(struct lk_dyn *d, size_t nbrokers, const struct lk_cluster *cl,
                 const struct lk_broker *from, int32_t node_id, struct lk_str host, int32_t port);

/* The learned broker of cl with that node id, or NULL. */
const struct lk_broker *lk_dyn_find_node(struct lk_dyn *d, const struct lk_cluster *cl,
                                         int32_t node_id);

/* The binds added at run time from index `from` on, at most max of them,
 * into out (in order; they never go away): the count. */
size_t lk_dyn_binds(struct lk_dyn *d, size_t from, const struct lk_bind **out, size_t max);

#endif
