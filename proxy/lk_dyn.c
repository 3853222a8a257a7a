/*
 * Nodes the map lacks, learned at run time (lk_dyn.h).
 *
 * A Kafka client is handed, for a node id that no [broker] section has, the
 * address broker.pattern gives it (filters/flt_kafka.c).  The client then
 * connects there, and lookout must know where that node is: the response
 * that named it carried its internal address (the brokers answer on the
 * inter-broker listener lookout connects to), so the filter hands it here
 * before the rewritten response leaves.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "lk_dyn.h"
#include "lk_log.h"
#include "lk_pool.h"

struct dyn_node {
    const struct lk_cluster *cl;
    int32_t id;
    const struct lk_broker *b; /* the latest address */
};

struct lk_dyn {
    pthread_mutex_t mu;
    struct dyn_node *nodes;
    size_t nnodes;
    struct lk_broker **brokers; /* every one made, for lk_dyn_free */
    size_t nbrokers;
    struct lk_bind **binds;
    size_t nbinds;
    int full_logged;
};

struct lk_dyn *
lk_dyn_new(void)
{
    struct lk_dyn *d = lk_xcalloc(1, sizeof(*d));
    pthread_mutex_init(&d->mu, NULL);
    return d;
}

void
lk_dyn_free(struct lk_dyn *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nbrokers; i++)
        lk_broker_free(d->brokers[i]);
    for (size_t i = 0; i < d->nbinds; i++)
        lk_bind_free(d->binds[i]);
    free(d->brokers);
    free(d->binds);
    free(d->nodes);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static struct dyn_node *
find(struct lk_dyn *d, const struct lk_cluster *cl, int32_t id)
{
    for (size_t i = 0; i < d->nnodes; i++)
        if (d->nodes[i].cl == cl && d->nodes[i].id == id)
            return &d->nodes[i];
    return NULL;
}

static int
same_addr(const struct lk_broker *b, enum lk_scheme scheme, struct lk_str host, int32_t port)
{
    const struct lk_url *u = b->internal->addr[scheme];
    struct lk_str h = host;

    if (h.len >= 2 && h.p[0] == '[' && h.p[h.len - 1] == ']')
        h = lk_str_make(h.p + 1, h.len - 2);
    return u != NULL && u->port == port && lk_str_eqi(lk_str_c(u->host), h);
}

int
lk_dyn_learn(struct lk_dyn *d, size_t nbrokers, const struct lk_cluster *cl,
             const struct lk_broker *from, int32_t node_id, struct lk_str host, int32_t port)
{
    const struct lk_url *via = lk_kafka_addr(from->internal);
    struct lk_bind *bind = NULL;
    struct lk_broker *b;
    struct dyn_node *n;
    char err[256], served[300];
    uint16_t sport;
    int32_t loop_id;

    if (cl->pattern == NULL || via == NULL || node_id < 0)
        return 0;
    /* A broker that names the pattern's own address for the node would
     * have lookout connect to itself, over and over. */
    if (lk_kafka_pattern_match(cl->pattern, host, (uint16_t)port, &loop_id) && loop_id == node_id &&
        port > 0 && port <= 65535) {
        lk_log(LK_WARN, NULL,
               "cluster %s: broker %s names node %ld at %.*s:%ld, which is the "
               "address broker.pattern gives it on lookout; not serving it (a loop)",
               cl->name, from->name, (long)node_id, (int)host.len, host.p, (long)port);
        return 0;
    }
    pthread_mutex_lock(&d->mu);
    n = find(d, cl, node_id);
    if (n != NULL && same_addr(n->b, via->scheme, host, port)) {
        pthread_mutex_unlock(&d->mu); /* the usual case: known already */
        return 0;
    }
    if (d->nbrokers == LK_DYN_MAX_BROKERS) {
        int first = !d->full_logged;
        d->full_logged = 1;
        pthread_mutex_unlock(&d->mu);
        if (first)
            lk_log(LK_ERR, NULL,
                   "cluster %s: %d nodes learned already, the most lookout keeps; node %ld at "
                   "%.*s:%ld and any later one will not be served",
                   cl->name, LK_DYN_MAX_BROKERS, (long)node_id, (int)host.len, host.p, (long)port);
        return 0;
    }
    b = lk_kafka_node_new(cl, node_id, host, port, via->scheme, nbrokers, err,
                          sizeof(err));
    if (b == NULL) {
        pthread_mutex_unlock(&d->mu);
        lk_log(LK_WARN, NULL,
               "cluster %s: broker %s named node %ld at an address lookout cannot "
               "use (%s); not serving it",
               cl->name, from->name, (long)node_id, err);
        return 0;
    }
    d->brokers = lk_xrealloc(d->brokers, (d->nbrokers + 1) * sizeof(*d->brokers));
    d->brokers[d->nbrokers++] = b;
    if (n != NULL) {
        lk_log(LK_WARN, NULL,
               "cluster %s: node %ld moved from %s to %s (broker %s says so); new "
               "connections go there",
               cl->name, (long)node_id,
               n->b->internal->addr[via->scheme] != NULL
                   ? n->b->internal->addr[via->scheme]->hostport
                   : "?",
               b->internal->addr[via->scheme]->hostport, from->name);
        n->b = b;
        pthread_mutex_unlock(&d->mu);
        return 0;
    }
    d->nodes = lk_xrealloc(d->nodes, (d->nnodes + 1) * sizeof(*d->nodes));
    d->nodes[d->nnodes++] = (struct dyn_node){cl, node_id, b};
    if (cl->pattern->port_has_id &&
        (bind = lk_kafka_pattern_bind(cl, node_id, err, sizeof(err))) != NULL) {
        d->binds = lk_xrealloc(d->binds, (d->nbinds + 1) * sizeof(*d->binds));
        d->binds[d->nbinds++] = bind;
    }
    pthread_mutex_unlock(&d->mu);

    if (lk_kafka_pattern_expand(cl->pattern, node_id, served, sizeof(served) - 8, &sport) == 0)
        snprintf(served + strlen(served), 8, ":%u", (unsigned)sport);
    else
        snprintf(served, sizeof(served), "(no address under the pattern)");
    lk_log(LK_INFO, NULL, "cluster %s: learned node %ld at %s from broker %s; serving it as %s%s%s",
           cl->name, (long)node_id, b->internal->addr[via->scheme]->hostport, from->name, served,
           bind != NULL ? " on " : "", bind != NULL ? bind->text : "");
    if (cl->pattern->port_has_id && bind == NULL)
        lk_log(LK_WARN, NULL, "cluster %s: node %ld: %s", cl->name, (long)node_id, err);
    return bind != NULL;
}

const struct lk_broker *
lk_dyn_find_node(struct lk_dyn *d, const struct lk_cluster *cl, int32_t node_id)
{    const struct lk_broker *b = NULL;
    struct dyn_node *n;

    pthread_mutex_lock(&d->mu);
    if ((n = find(d, cl, node_id)) != NULL)
        b = n->b;
    pthread_mutex_unlock(&d->mu);
    return b;
}

size_t
lk_dyn_binds(struct lk_dyn *d, size_t from, const struct lk_bind **out, size_t max)
{    size_t n = 0;

    pthread_mutex_lock(&d->mu);
    for (size_t i = from; i < d->nbinds && n < max; i++)
        out[n++] = d->binds[i];
    pthread_mutex_unlock(&d->mu);
    return n;
}
