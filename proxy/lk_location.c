/*
 * Rewriting broker URLs into the selected listener: the engine of the
 * Location filter, kept free of HTTP and sockets so that it can be unit
 * tested and fuzzed as it stands (like h2o's rewrite_location).
 */
#include <stdio.h>
#include <string.h>

#include "lk_location.h"

int
lk_url_split(struct lk_str url, struct lk_url_parts *out)
{
    if (lk_url_parts_split(url, out) != 0)
        return -1;
    if (out->port == 0) { /* none given: the scheme's own */
        int s = lk_scheme_parse(out->scheme);
        out->port = s >= 0 ? lk_scheme_default_port((enum lk_scheme)s) : 0;
    }
    return 0;
}

const struct lk_broker *
lk_url_find_broker(const struct lk_cluster *cl, struct lk_str url, struct lk_url_parts *parts,
                   enum lk_scheme *scheme)
{
    if (lk_url_split(url, parts) != 0)
        return NULL;
    return lk_cluster_find_addr(cl, parts->host, parts->port, scheme);
}

/*
 * The two forms, and where each comes from (apache/pulsar):
 *  - "host:port": ClientCnx.setTargetBroker formats the logical address
 *    of the lookup answer as String.format("%s:%d", getHostString(),
 *    getPort()), and that address is createUnresolved(uri.getHost(),
 *    uri.getPort()) of the answer's URL (BinaryProtoLookupService), so
 *    an IPv6 host keeps its brackets (java.net.URI.getHost).  The Pulsar
 *    Proxy splits it at the last ':' (BrokerProxyValidator
 *    .resolveAndCheckTargetAddress); the C++ and Go clients send the same.
 *  - "scheme://host:port": older clients and hand-built frames.
 * The text only picks the broker; lk_broker_upstream picks the address
 * that is dialled.
 */
const struct lk_broker *
lk_proxy_target_find(const struct lk_cluster *cl, struct lk_str target, const char **why)
{
    struct lk_url_parts parts;
    enum lk_scheme scheme;

    *why = NULL;
    if (target.len >= 3 && memmem(target.p, target.len, "://", 3) != NULL) {
        if (lk_url_split(target, &parts) != 0 || parts.port == 0) {
            *why = "is a URL without a valid host and port";
            return NULL;
        }
    } else if (lk_hostport_split(target, &parts.host, &parts.port, why) != 0) {
        return NULL;
    }
    return lk_cluster_find_addr(cl, parts.host, parts.port, &scheme);
}

int
lk_location_rewrite(struct lk_pool *pool, const struct lk_cluster *cl, const char *listener_name,
                    int client_tls, struct lk_str url, struct lk_str *out,
                    const struct lk_broker **broker)
{
    struct lk_url_parts parts;
    enum lk_scheme matched;

    if (listener_name == NULL)
        return 0;
    const struct lk_broker *b = lk_url_find_broker(cl, url, &parts, &matched);
    if (b == NULL)
        return 0;
    const struct lk_listener *l = lk_broker_client_listener(b, listener_name);
    if (l == NULL)
        return 0;
    const struct lk_url *to = lk_listener_pick(l, matched, client_tls);
    if (to == NULL)
        return 0;
    if (broker != NULL)
        *broker = b;
    /* to->text is "scheme://host:port" */
    *out = lk_pstr_concat(pool, lk_str_c(to->text), parts.rest);
    return 1;
}
