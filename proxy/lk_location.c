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

const struct lk_url *
lk_location_pick(const struct lk_broker *b, const char *listener_name, enum lk_scheme scheme,
                 int client_tls, const char **lacked)
{
    const struct lk_listener *l;
    const struct lk_url *u = NULL;

    if (lacked != NULL)
        *lacked = NULL;
    if (listener_name == NULL)
        return NULL;
    /* A broker without the listener gets its lookup listener's
     * (lk_xchg_listener_check says so). */
    l = lk_broker_client_listener(b, listener_name);
    if (l != NULL && (u = lk_listener_pick(l, scheme, client_tls)) != NULL)
        return u;
    /* Only a web address has a stand-in: a binary one answers a lookup
     * for the broker that owns a topic, which serviceUrl (any broker)
     * cannot stand for. */
    if (scheme != LK_SCHEME_HTTP && scheme != LK_SCHEME_HTTPS)
        return NULL;
    if (b->lookup != NULL && b->lookup != l)
        u = lk_listener_pick(b->lookup, scheme, client_tls);
    if (u == NULL)
        u = b->cluster->web_service;
    if (u != NULL && lacked != NULL)
        *lacked = l != NULL ? l->name : listener_name;
    return u;
}

int
lk_location_rewrite(struct lk_pool *pool, const struct lk_cluster *cl, const char *listener_name,
                    int client_tls, struct lk_str url, struct lk_str *out,
                    struct lk_location_how *how)
{
    struct lk_url_parts parts;
    enum lk_scheme matched;
    const char *lacked;

    if (listener_name == NULL)
        return 0;
    const struct lk_broker *b = lk_url_find_broker(cl, url, &parts, &matched);
    if (b == NULL)
        return 0;
    const struct lk_url *to = lk_location_pick(b, listener_name, matched, client_tls, &lacked);
    if (to == NULL)
        return 0;
    if (how != NULL)
        *how = (struct lk_location_how){b, to, lacked};
    /* to->text is "scheme://host:port" */
    *out = lk_pstr_concat(pool, lk_str_c(to->text), parts.rest);
    return 1;
}
