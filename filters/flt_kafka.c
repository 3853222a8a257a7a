/*
 * kafka: rewrites every broker endpoint a Kafka response hands out (CONTRACT
 * §4: Metadata, FindCoordinator, DescribeCluster, the Produce and Fetch
 * NodeEndpoints, ShareFetch and ShareAcknowledge) into the selected
 * listener's address of the broker with that node id, and clamps
 * ApiVersions to the versions the codec can rewrite.  Matching is by node
 * id, never by host; DescribeQuorum's controller listeners, whose ids are
 * not the map's to judge, alone go by address (controller(), below).
 * Streams group answers (KIP-1071) carry application endpoints, never a
 * broker's: they are not held, so never rewritten.  A node id the map lacks gets its address from
 * broker.pattern; without one its endpoint is left as the broker sent it,
 * and that is logged as a warning every time: an internal address reached
 * the client.  A node broker.pattern places is recorded in the exchange
 * (lk_xchg_learn): the module has lookout serve it before the answer
 * leaves.
 */
#include <stdio.h>
#include <string.h>

#include "lk_filter.h"
#include "lk_kafka_view.h"
#include "lk_log.h"
#include "lk_workers.h"
#include "lk_xchg.h"

static enum lk_kafka_ep
endpoint(struct lk_xchg *x, int32_t node_id, struct lk_str *host, int32_t *port)
{
    const struct lk_cluster *cl = x->cluster;
    const struct lk_broker *b = lk_cluster_find_node(cl, node_id);

    if (b != NULL) {
        const struct lk_listener *l = lk_xchg_listener(x, b);
        const struct lk_url *u = l != NULL ? lk_kafka_addr(l) : NULL;
        if (u == NULL)
            return LK_KAFKA_EP_UNKNOWN;
        *host = lk_str_c(u->host);
        *port = u->port;
        return LK_KAFKA_EP_REWRITE;
    }
    uint16_t p;
    char h[256];
    if (cl->pattern != NULL && lk_kafka_pattern_expand(cl->pattern, node_id, h, sizeof(h), &p) == 0) {
        /* Where the node is: lookout serves the pattern's address for it
         * from now on (the module binds it before this response leaves). */
        if (x->broker != NULL)
            lk_xchg_learn(x, node_id, *host, *port);
        /* The view keeps every endpoint's bytes until it is written. */
        *host = lk_str_c(lk_pstrndup(&x->pool, h, strlen(h)));
        *port = p;
        return LK_KAFKA_EP_REWRITE;
    }
    return LK_KAFKA_EP_UNKNOWN;
}

/*
 * DescribeQuorum v2's controller listeners (KIP-853).  The map names
 * brokers, by node id; a KRaft controller's id may be a broker's as well
 * (combined mode) while its listener is another, so the id says nothing
 * here.  What does: a controller listener whose host:port is the internal
 * address of a `[broker NAME/ID]` is an address lookout dials, so it gets
 * that entry's lookup-listener address, which lookout serves (list a
 * controller as such an entry to expose it).  Any other is kept: the
 * leak guard checks it like every endpoint, and one the map lacks is a
 * leak.
 */
static enum lk_kafka_ep
controller(struct lk_xchg *x, int32_t node_id, struct lk_str *host, int32_t *port)
{
    const struct lk_broker *b;
    const struct lk_listener *l;
    const struct lk_url *u;

    (void)node_id;
    if (*port <= 0 || *port > 65535 ||
        (b = lk_cluster_find_internal(x->cluster, *host, (uint16_t)*port)) == NULL)
        return LK_KAFKA_EP_KEEP;
    l = lk_xchg_listener(x, b);
    if ((u = l != NULL ? lk_kafka_addr(l) : NULL) == NULL)
        return LK_KAFKA_EP_UNKNOWN;
    *host = lk_str_c(u->host);
    *port = u->port;
    return LK_KAFKA_EP_REWRITE;
}

static enum lk_flt_verdict
kafka_response(struct lk_flt *f, struct lk_xchg *x, struct lk_kafka_view *v)
{
    unsigned unknown = 0;

    if (v->decoded == LK_KAFKA_RW_MALFORMED) {
        /* The frame goes as it came (the leak guard reads it). */
        lk_log(LK_WARN, x->conn,
               "%s: api %d v%d response does not decode; passed through unchanged", f->id,
               v->api_key, v->api_version);
        return LK_FLT_CONTINUE;
    }
    lk_kafka_view_clamp(v, x->cluster->unknown_api == LK_UNKNOWN_API_DROP);
    for (size_t i = 0; i < v->nep; i++) {
        const struct lk_kafka_endpoint *e = &v->ep[i];
        struct lk_str host = e->host;
        int32_t port = e->port;
        enum lk_kafka_ep r = e->controller ? controller(x, e->node_id, &host, &port)
                                           : endpoint(x, e->node_id, &host, &port);
        int changed = r == LK_KAFKA_EP_REWRITE ? lk_kafka_view_set(v, i, host, port) : 0;
        if (r == LK_KAFKA_EP_UNKNOWN || changed < 0)
            unknown++; /* one that cannot be encoded too: never half a rewrite */
        else
            x->rewrites += (unsigned)changed; /* counted if the client gets it */
    }
    if (unknown != 0)
        lk_log(LK_WARN, x->conn,
               "%s: api %d v%d response names %u node(s) the map lacks and broker.pattern does not "
               "cover; their internal addresses reached the client",
               f->id, v->api_key, v->api_version, unknown);
    x->unmapped += unknown;
    return LK_FLT_CONTINUE;
}

const struct lk_flt_ops lk_flt_kafka = {
    .name = "kafka",
    .protos = LK_PROTO_KAFKA,
    .attach = lk_flt_attach_if_listener,
    .kafka_response = kafka_response,
};
