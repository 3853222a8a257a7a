/*
 * pulsar: rewrites the broker addresses the Pulsar binary protocol hands out
 * (CONTRACT §4): LOOKUP_RESPONSE (Redirect and Connect) brokerServiceUrl and
 * brokerServiceUrlTls, CLOSE_PRODUCER and CLOSE_CONSUMER
 * assignedBrokerServiceUrl(Tls), TOPIC_MIGRATED brokerServiceUrl(Tls).  The
 * broker is found by either URL, in the exchange's cluster first and then in
 * every other one (a Redirect or a migration may name another cluster's
 * brokers); the pair becomes exactly the selected listener's pulsar and
 * pulsar+ssl addresses: set when the listener has the scheme, cleared when
 * it lacks it.  With pulsar_routing = service a Connect answer also says
 * proxy_through_service_url, as the Pulsar Proxy does, so that the client
 * reaches the owner through serviceUrl.  URLs that name no mapped broker
 * pass through as they are, logged: a migration to a cluster lookout does
 * not front, or an address the map lacks.  Only the command is re-encoded,
 * its unknown fields kept; the engine sends other frames byte for byte.
 */
#include <stdio.h>
#include <string.h>

#include "lk_filter.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_pulsar_codec.h"
#include "lk_xchg.h"

static const char *
type_name(int type)
{
    switch (type) {
    case LK_PULSAR_LOOKUP_RESPONSE:
        return "LOOKUP_RESPONSE";
    case LK_PULSAR_CLOSE_PRODUCER:
        return "CLOSE_PRODUCER";
    case LK_PULSAR_CLOSE_CONSUMER:
        return "CLOSE_CONSUMER";
    case LK_PULSAR_TOPIC_MIGRATED:
        return "TOPIC_MIGRATED";
    default:
        return "command";
    }
}

/* The mapped broker either URL names: the exchange's cluster first. */
static const struct lk_broker *
find_broker(const struct lk_xchg *x, const struct lk_pulsar_cmd *c)
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

/* The listener of b to rewrite into: the selected one, or for another
 * cluster's broker that lacks it, that cluster's lookupListenerName. */
static const struct lk_listener *
pick_listener(const struct lk_xchg *x, const struct lk_broker *b)
{
    const struct lk_listener *l = lk_xchg_listener(x, b);

    if (l == NULL && b->cluster != x->cluster && b->cluster->lookup_listener != NULL)
        l = lk_broker_listener(b, b->cluster->lookup_listener);
    return l;
}

static enum lk_flt_verdict
pulsar_frame(struct lk_flt *f, struct lk_xchg *x, int16_t type, int16_t version,
             struct evbuffer *in, struct evbuffer *out)
{
    size_t len = evbuffer_get_length(in);
    const uint8_t *fr = evbuffer_pullup(in, -1);
    uint32_t total, cmd_size;
    struct lk_pulsar_cmd c;
    struct lk_pulsar_edit edit = {.proxy_through = -1};
    struct lk_str url, url_tls;
    int service = x->cluster->pulsar_routing == LK_PULSAR_ROUTING_SERVICE;

    (void)version;
    if (lk_pulsar_type_addrs(type) != LK_PULSAR_ADDRS_DECODED)
        return LK_FLT_CONTINUE; /* a type lookout does not know: the leak guard's */
    if (len < LK_PULSAR_PREFIX || lk_pulsar_sizes(fr, UINT32_MAX, &total, &cmd_size) != 0 ||
        (size_t)total + 4 != len || (size_t)cmd_size + LK_PULSAR_PREFIX != len)
        return LK_FLT_CONTINUE; /* not a simple frame: nothing of lookout's */
    if (lk_pulsar_decode(fr + LK_PULSAR_PREFIX, cmd_size, &c) != 0) {
        lk_log(LK_WARN, x->conn, "%s: %s does not decode; passed through unchanged", f->id,
               type_name(type));
        return LK_FLT_CONTINUE;
    }
    if (!c.has_url && !c.has_url_tls)
        return LK_FLT_CONTINUE; /* a Failed lookup, a close without a new owner */

    const struct lk_broker *b = find_broker(x, &c);
    const struct lk_listener *l = b != NULL ? pick_listener(x, b) : NULL;
    if (l == NULL) {
        char u[160];
        snprintf(u, sizeof(u), "%.*s%s%.*s", (int)(c.url.len > 70 ? 70 : c.url.len), c.url.p,
                 c.has_url && c.has_url_tls ? " " : "",
                 (int)(c.url_tls.len > 70 ? 70 : c.url_tls.len), c.url_tls.p);
        lk_log(LK_WARN, x->conn, "%s: %s names %s, %s; passed through unchanged", f->id,
               type_name(type), u,
               b == NULL ? (type == LK_PULSAR_TOPIC_MIGRATED ? "a cluster the map does not have"
                                                             : "no broker in the map")
                         : "a broker without the selected listener");
        x->unmapped++;
        return LK_FLT_CONTINUE;
    }
    if (l->addr[LK_SCHEME_PULSAR] != NULL)
        url = lk_str_c(l->addr[LK_SCHEME_PULSAR]->text);
    if (l->addr[LK_SCHEME_PULSAR_SSL] != NULL)
        url_tls = lk_str_c(l->addr[LK_SCHEME_PULSAR_SSL]->text);
    edit.set_url = edit.set_url_tls = 1;
    edit.url = l->addr[LK_SCHEME_PULSAR] != NULL ? &url : NULL;
    edit.url_tls = l->addr[LK_SCHEME_PULSAR_SSL] != NULL ? &url_tls : NULL;
    if (type == LK_PULSAR_LOOKUP_RESPONSE && service && c.lookup_type == LK_PULSAR_CONNECT_TO)
        edit.proxy_through = 1;
    int r = lk_pulsar_reencode(fr + LK_PULSAR_PREFIX, cmd_size, &edit, out);
    if (r == 1) {
        x->rewrites++;
        evbuffer_drain(in, len);
    } else if (r < 0) {
        lk_log(LK_WARN, x->conn, "%s: %s does not re-encode; passed through unchanged", f->id,
               type_name(type));
    }
    return LK_FLT_CONTINUE;
}

const struct lk_flt_ops lk_flt_pulsar = {
    .name = "pulsar",
    .protos = LK_PROTO_PULSAR,
    .attach = lk_flt_attach_if_listener,
    .frame = pulsar_frame,
};
