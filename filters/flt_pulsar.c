/*
 * pulsar: rewrites the broker addresses the Pulsar binary protocol hands out
 * (CONTRACT §4): LOOKUP_RESPONSE (Redirect and Connect) brokerServiceUrl and
 * brokerServiceUrlTls, CLOSE_PRODUCER and CLOSE_CONSUMER
 * assignedBrokerServiceUrl(Tls), TOPIC_MIGRATED brokerServiceUrl(Tls), and
 * Pulsar 5.0's SCALABLE_TOPIC_UPDATE (each segment's broker_url(_tls) and
 * the controller's controller_broker_url(_tls)) and
 * WATCH_TC_ASSIGNMENTS_UPDATE (each coordinator's
 * broker_service_url(_tls)).  Each pair's broker is found by either URL, in
 * the exchange's cluster first and then in every other one (a Redirect or a
 * migration may name another cluster's brokers); the pair becomes exactly
 * the selected listener's pulsar and pulsar+ssl addresses (the broker's
 * lookup listener's when it lacks the selected one: lk_xchg_listener, which
 * logs it once per connection for a listener the client chose): set when the
 * listener has the scheme, cleared when it lacks it (a segment's
 * broker_url, which Pulsar requires, takes the pulsar+ssl address when the
 * listener has no pulsar:// one, and is left, logged, for the leak guard
 * only when it has neither).  With pulsar_routing = service a Connect answer also says
 * proxy_through_service_url, as the Pulsar Proxy does, so that the client
 * reaches the owner through serviceUrl.  URLs that name no mapped broker
 * pass through as they are, logged: a migration to a cluster lookout does
 * not front, or an address the map lacks.  The edits go into the command's
 * view (lk_pulsar_view.h); only the command is re-encoded, once, its
 * unknown fields kept; the engine sends other frames byte for byte.
 */
#include <stdio.h>
#include <string.h>

#include "lk_filter.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_pulsar_view.h"
#include "lk_stats.h"
#include "lk_xchg.h"

/* Its name: every type that comes here has one. */
static const char *
type_name(int type)
{
    const char *n = lk_pulsar_command_name(type);
    return n != NULL ? n : "command";
}

/* The mapped broker either URL names: the exchange's cluster first. */
static const struct lk_broker *
find_broker(const struct lk_xchg *x, const struct lk_pulsar_pair *c)
{
    const struct lk_str *urls[2] = {c->has_url ? &c->url : NULL,
                                    c->has_url_tls ? &c->url_tls : NULL};
    struct lk_url_parts parts;
    enum lk_scheme scheme;

    for (size_t k = 0; k <= x->conf->nclusters; k++) {
        const struct lk_cluster *cl = k == 0 ? x->cluster : x->conf->clusters[k - 1];
        if (k != 0 && cl == x->cluster)
            continue;
        if (!(cl->proto & LK_PROTO_PULSAR))
            continue;
        for (int i = 0; i < 2; i++) {
            const struct lk_broker *b;
            if (urls[i] != NULL && urls[i]->len != 0 &&
                (b = lk_url_find_broker(cl, *urls[i], &parts, &scheme)) != NULL)
                return b;
        }
    }
    return NULL;
}

/* Edits URL pair i of v (its strings in *url, *url_tls): 0, or -1 (logged)
 * when it is to be left as it is. */
static int
pair_edit(struct lk_flt *f, struct lk_xchg *x, struct lk_pulsar_view *v, size_t i,
          struct lk_str *url, struct lk_str *url_tls)
{
    int type = v->type;
    const struct lk_pulsar_pair *c = &v->pairs[i];
    const struct lk_broker *b = find_broker(x, c);
    const struct lk_listener *l = lk_xchg_listener(x, b);
    const struct lk_url *plain = l != NULL ? l->addr[LK_SCHEME_PULSAR] : NULL;
    const struct lk_url *tls = l != NULL ? l->addr[LK_SCHEME_PULSAR_SSL] : NULL;
    const char *why = b == NULL
                          ? (type == LK_PULSAR_TOPIC_MIGRATED ? "a cluster the map does not have"
                                                              : "no broker in the map")
                          : "a broker with neither the selected listener nor a lookup listener";

    /* A required plain URL (a segment's broker_url) cannot be cleared: it
     * takes the listener's pulsar+ssl address when there is no pulsar://
     * one, so that no field keeps the broker's internal URL.  Only a
     * listener with neither leaves the pair, for the leak guard. */
    if (plain == NULL && c->url_required)
        plain = tls;
    if (l != NULL && c->url_required && plain == NULL) {
        why = "a broker whose selected listener has no pulsar:// or pulsar+ssl:// address, "
              "which this field requires";
        l = NULL;
    }
    if (l == NULL) {
        char u[160];
        snprintf(u, sizeof(u), "%.*s%s%.*s", (int)(c->url.len > 70 ? 70 : c->url.len), c->url.p,
                 c->has_url && c->has_url_tls ? " " : "",
                 (int)(c->url_tls.len > 70 ? 70 : c->url_tls.len), c->url_tls.p);
        lk_log(LK_WARN, x->conn, "%s: %s names %s, %s; passed through unchanged", f->id,
               type_name(type), u, why);
        x->unmapped++;
        return -1;
    }
    if (plain != NULL)
        *url = lk_str_c(plain->text);
    if (tls != NULL)
        *url_tls = lk_str_c(tls->text);
    lk_pulsar_view_set_pair(v, i, plain != NULL ? url : NULL, tls != NULL ? url_tls : NULL);
    return 0;
}

static enum lk_flt_verdict
pulsar_command(struct lk_flt *f, struct lk_xchg *x, struct lk_pulsar_view *v)
{
    size_t n = v->cmd.npairs;
    unsigned mapped = 0;

    if (v->state == LK_PULSAR_VIEW_MALFORMED)
        lk_log(LK_WARN, x->conn, "%s: %s does not decode; passed through unchanged", f->id,
               type_name(v->type));
    if (v->state != LK_PULSAR_VIEW_DECODED || n == 0)
        return LK_FLT_CONTINUE; /* a Failed lookup, a close without a new owner */

    /* every pair, each to its broker's address on the selected listener */
    struct lk_str *strs = lk_palloc(&x->pool, 2 * n * sizeof(*strs));
    for (size_t i = 0; i < n; i++)
        if (pair_edit(f, x, v, i, &strs[2 * i], &strs[2 * i + 1]) == 0)
            mapped++;
    if (mapped == 0)
        return LK_FLT_CONTINUE;
    if (v->type == LK_PULSAR_LOOKUP_RESPONSE && v->cmd.lookup_type == LK_PULSAR_CONNECT_TO &&
        x->cluster->pulsar_routing == LK_PULSAR_ROUTING_SERVICE)
        lk_pulsar_view_proxy_through(v, 1);
    x->rewrites += mapped; /* counted if the client gets it */
    return LK_FLT_CONTINUE;
}

const struct lk_flt_ops lk_flt_pulsar = {
    .name = "pulsar",
    .protos = LK_PROTO_PULSAR,
    .attach = lk_flt_attach_if_listener,
    .pulsar_command = pulsar_command,
};
