/*
 * Routing on a bound socket: which vhost a connection names (SNI, Host,
 * else the bound address), and which bind of a config is the same socket
 * as another's (a reload keeps its listener, a connection moves to it).
 * Pure: no sockets, no event loop.
 */
#include <string.h>
#include <netinet/in.h>

#include "lk_route.h"

int
lk_bind_same(const struct lk_bind *a, const struct lk_bind *b)
{
    if (a->tls != b->tls || a->proto != b->proto || a->addr.ss_family != b->addr.ss_family)
        return 0;
    if (a->addr.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a->addr, *y = (const void *)&b->addr;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)&a->addr, *y = (const void *)&b->addr;
        return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 0;
}

const struct lk_bind *
lk_bind_find(const struct lk_conf *conf, const struct lk_bind *b)
{
    for (size_t i = 0; i < conf->nbinds; i++)
        if (lk_bind_same(conf->binds[i], b))
            return conf->binds[i];
    return NULL;
}

/* Splits a Host header value or SNI into host (no brackets, no trailing
 * dot) and port (0 when absent).  -1 if the port is malformed. */
static int
split_host(struct lk_str h, struct lk_str *host, unsigned *port)
{
    struct lk_str p = LK_STR_NULL;

    *port = 0;
    if (h.len > 0 && h.p[0] == '[') {
        const char *e = memchr(h.p, ']', h.len);
        if (e == NULL)
            return -1;
        *host = lk_str_make(h.p + 1, (size_t)(e - h.p - 1));
        p = lk_str_skip(h, (size_t)(e - h.p) + 1);
        if (p.len > 0 && p.p[0] != ':')
            return -1;
        p = lk_str_skip(p, 1);
    } else {
        const char *colon = memchr(h.p, ':', h.len);
        *host = h;
        if (colon != NULL) {
            host->len = (size_t)(colon - h.p);
            p = lk_str_skip(h, host->len + 1);
        }
    }
    if (host->len > 0 && host->p[host->len - 1] == '.')
        host->len--; /* absolute FQDN */
    if (p.p != NULL && p.len == 0 && h.p[h.len - 1] == ':')
        return 0; /* "host:" means the default port */
    for (size_t i = 0; i < p.len; i++) {
        if (p.p[i] < '0' || p.p[i] > '9' || *port > 6553)
            return -1;
        *port = *port * 10 + (unsigned)(p.p[i] - '0');
    }
    return *port > 65535 ? -1 : 0;
}

/* The vhost named by h (a port, when given, must match too); NULL if none.
 * A Kafka broker.pattern's vhost takes the names the pattern spells, after
 * every vhost named outright. */
static const struct lk_vhost *
find_vhost(const struct lk_bind *b, struct lk_str h)
{
    struct lk_str host;
    unsigned port;
    int32_t id;

    if (split_host(h, &host, &port) != 0)
        return NULL;
    for (size_t i = 0; i < b->nvhosts; i++)
        if (lk_str_eqi(lk_str_c(b->vhosts[i].host), host) &&
            (port == 0 || port == b->vhosts[i].port))
            return &b->vhosts[i];
    for (size_t i = 0; i < b->nvhosts; i++)
        if (b->vhosts[i].pattern != NULL &&
            lk_kafka_pattern_match(b->vhosts[i].pattern, host,
                                   port != 0 ? (uint16_t)port : b->vhosts[i].port, &id))
            return &b->vhosts[i];
    return NULL;
}

const struct lk_vhost *
lk_route(const struct lk_bind *b, struct lk_str sni, struct lk_str host, int host_must_match)
{
    const struct lk_vhost *by_sni = NULL, *by_host = NULL;

    if (host_must_match && find_vhost(b, host) == NULL)
        return NULL;
    if (b->nvhosts == 1)
        return &b->vhosts[0]; /* an unshared socket: the bound address decides */
    /* On a shared socket whatever the client names must be mapped, and SNI
     * and Host must agree (CONTRACT §6: never forwarded elsewhere). */
    if (sni.len != 0 && (by_sni = find_vhost(b, sni)) == NULL)
        return NULL;
    if (host.len != 0 && (by_host = find_vhost(b, host)) == NULL)
        return NULL;
    if (by_sni != NULL && by_host != NULL && by_sni != by_host)
        return NULL;
    return by_sni != NULL ? by_sni : by_host;
}

