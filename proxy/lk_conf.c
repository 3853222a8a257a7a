/*
 * The listener map as the proxy reads it at run time: the index of every
 * broker address of a cluster (lk_cluster_find_addr), the lookups by
 * listener, node id and address, the upstream a client's broker is dialled
 * at, and the brokers and sockets the Kafka module adds while running
 * (lk_kafka_node_new, lk_kafka_pattern_bind).  Building the map is the
 * loader's (lk_conf_load.c and the lk_conf_*.c passes); nothing here reads
 * a file or reports a config error.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "lk_conf.h"
#include "lk_conf_value.h"
#include "lk_pool.h"

/* The address index ------------------------------------------------------------ */

struct lk_addr_slot {
    const struct lk_url *u; /* NULL: free */
    const struct lk_broker *b;
    int sc;
};

/* host without brackets or a trailing dot, as lk_cluster_find_addr
 * compares it (case aside). */
static struct lk_str
addr_host(struct lk_str host)
{
    if (host.len >= 2 && host.p[0] == '[' && host.p[host.len - 1] == ']')
        host = lk_str_make(host.p + 1, host.len - 2);
    if (host.len > 1 && host.p[host.len - 1] == '.')
        host.len--;
    return host;
}

static size_t
addr_hash(struct lk_str host, uint16_t port)
{
    uint64_t h = 1469598103934665603ull ^ port;

    for (size_t i = 0; i < host.len; i++)
        {
        unsigned char ch = (unsigned char)host.p[i];
        h = (h ^ (ch >= 'A' && ch <= 'Z' ? ch + 32u : ch)) * 1099511628211ull;
    }
    return (size_t)(h ^ (h >> 29));
}

/* The slot of host:port in cl's index: the one holding it, or the free
 * one where it would go. */
static struct lk_addr_slot *
addr_slot(const struct lk_cluster *cl, struct lk_str host, uint16_t port)
{
    size_t i = addr_hash(host, port) & (cl->addr_cap - 1);

    for (;; i = (i + 1) & (cl->addr_cap - 1)) {
        struct lk_addr_slot *sl = &cl->addr_ix[i];
        if (sl->u == NULL ||
            (sl->u->port == port && lk_str_eqi(addr_host(lk_str_c(sl->u->host)), host)))
            return sl;
    }
}

const struct lk_broker *
lk_cluster_addr_claim(struct lk_cluster *cl, const struct lk_broker *b, const struct lk_url **clash)
{
    for (size_t l = 0; cl->addr_cap != 0 && l < b->nlisteners; l++)
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *u = b->listeners[l].addr[sc];
            struct lk_addr_slot *sl;
            if (u != NULL && (sl = addr_slot(cl, addr_host(lk_str_c(u->host)), u->port))->u != NULL &&
                sl->b != b) {
                *clash = u;
                return sl->b;
            }
        }
    size_t need = cl->addr_n;
    for (size_t l = 0; l < b->nlisteners; l++)
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
            need += b->listeners[l].addr[sc] != NULL;
    if (need * 2 > cl->addr_cap) { /* at most half full */
        struct lk_addr_slot *old = cl->addr_ix;
        size_t ocap = cl->addr_cap;
        cl->addr_cap = ocap != 0 ? ocap : 64;
        while (need * 2 > cl->addr_cap)
            cl->addr_cap *= 2;
        cl->addr_ix = lk_xcalloc(cl->addr_cap, sizeof(*cl->addr_ix));
        for (size_t i = 0; i < ocap; i++)
            if (old[i].u != NULL)
                *addr_slot(cl, addr_host(lk_str_c(old[i].u->host)), old[i].u->port) = old[i];
        free(old);
    }
    for (size_t l = 0; l < b->nlisteners; l++)
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *u = b->listeners[l].addr[sc];
            struct lk_addr_slot *sl;
            if (u == NULL || (sl = addr_slot(cl, addr_host(lk_str_c(u->host)), u->port))->u != NULL)
                continue; /* the same address twice in b: lk_listeners_parse refuses it */
            *sl = (struct lk_addr_slot){u, b, sc};
            cl->addr_n++;
        }
    return NULL;
}

struct lk_cluster *
lk_conf_find_cluster(const struct lk_conf *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->nclusters; i++)
        if (lk_str_eq(lk_str_c(c->clusters[i]->name), lk_str_make(name, len)))
            return c->clusters[i];
    return NULL;
}

/* A socket address for ip (canonical text, of family) and port, without
 * vhosts; NULL if getaddrinfo will not make one. */
struct lk_bind *
lk_bind_new(const char *ip, int family, uint16_t port, unsigned proto, int tls)
{
    struct addrinfo hints = {0}, *ai;
    char ps[8], text[INET6_ADDRSTRLEN + 8];
    struct lk_bind *b;

    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    snprintf(text, sizeof(text), family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, (unsigned)port);
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    if (getaddrinfo(ip, ps, &hints, &ai) != 0 || ai == NULL)
        return NULL;
    b = lk_xcalloc(1, sizeof(*b));
    memcpy(&b->addr, ai->ai_addr, ai->ai_addrlen);
    b->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    b->text = lk_xstrdup(text);
    b->proto = proto;
    b->tls = tls;
    return b;
}


const struct lk_listener *
lk_broker_listener(const struct lk_broker *b, const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < b->nlisteners; i++)
        if (strcmp(b->listeners[i].name, name) == 0)
            return &b->listeners[i];
    return NULL;
}

const struct lk_listener *
lk_broker_client_listener(const struct lk_broker *b, const char *name)
{
    const struct lk_listener *l = lk_broker_listener(b, name);

    return l != NULL || name == NULL ? l : b->lookup;
}

const char *
lk_cluster_listener_name(const struct lk_cluster *cl, struct lk_str name)
{
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        for (size_t k = 0; k < b->nlisteners; k++)
            if (lk_str_eq(lk_str_c(b->listeners[k].name), name))
                return b->listeners[k].name;
    }
    return NULL;
}

const char *
lk_cluster_client_listener(const struct lk_cluster *cl, struct lk_str name)
{
    /* lookupListenerName: the only listener whose addresses lookout itself
     * serves (build_binds binds no other), so the one a client may always
     * choose.  The internal listener is never that one (resolve_listeners
     * refuses it), and is a client's only when the operator lists it. */
    if (cl->lookup_listener != NULL && lk_str_eq(lk_str_c(cl->lookup_listener), name))
        return cl->lookup_listener;
    for (size_t i = 0; i < cl->nclient_listeners; i++)
        if (lk_str_eq(lk_str_c(cl->client_listeners[i]), name))
            return cl->client_listeners[i];
    return NULL;
}

const struct lk_broker *
lk_cluster_find_node(const struct lk_cluster *cl, int32_t node_id)
{
    /* Linear: the module indexes the map if it needs to. */
    for (size_t i = 0; i < cl->nbrokers; i++)
        if (cl->brokers[i]->node_id == node_id && node_id >= 0)
            return cl->brokers[i];
    return NULL;
}

void
lk_broker_free(struct lk_broker *b)
{
    if (b == NULL)
        return;
    free(b->name);
    free(b->id);
    free(b->registration);
    lk_listeners_free(b->listeners, b->nlisteners);
    free(b);
}

void
lk_bind_free(struct lk_bind *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->nvhosts; i++)
        free(b->vhosts[i].host);
    free(b->vhosts);
    free(b->text);
    free(b);
}

struct lk_broker *
lk_kafka_node_new(const struct lk_cluster *cl, int32_t node_id, struct lk_str host, int32_t port,
                  enum lk_scheme scheme, size_t index, char *err, size_t errlen)
{
    char text[300];
    struct lk_url u;
    struct lk_broker *b;
    int n;

    if (node_id < 0 || port <= 0 || port > 65535 || host.len == 0 || host.len > 253) {
        snprintf(err, errlen, "node %ld at '%.*s' port %ld is not an address", (long)node_id,
                 (int)(host.len > 253 ? 253 : host.len), host.p, (long)port);
        return NULL;
    }
    n = snprintf(text, sizeof(text),
                 memchr(host.p, ':', host.len) != NULL && host.p[0] != '[' ? "[%.*s]:%ld"
                                                                           : "%.*s:%ld",
                 (int)host.len, host.p, (long)port);
    if (lk_kafka_addr_parse(text, (size_t)n, scheme, &u, err, errlen) != 0)
        return NULL;
    b = lk_xcalloc(1, sizeof(*b));
    b->id = lk_xmalloc(16);
    snprintf(b->id, 16, "%ld", (long)node_id);
    b->name = lk_xmalloc(strlen(cl->name) + 16);
    sprintf(b->name, "%s/%ld", cl->name, (long)node_id);
    b->node_id = node_id;
    b->index = index;
    b->cluster = (struct lk_cluster *)cl;
    b->listeners = lk_xcalloc(1, sizeof(*b->listeners));
    b->nlisteners = 1;
    b->listeners[0].name = lk_xstrdup(cl->internal_listener != NULL ? cl->internal_listener : "");
    b->listeners[0].addr[scheme] = lk_xmalloc(sizeof(u));
    *b->listeners[0].addr[scheme] = u;
    b->internal = &b->listeners[0];
    b->line = cl->pattern != NULL ? cl->pattern->line : cl->line;
    return b;
}

struct lk_bind *
lk_kafka_pattern_bind(const struct lk_cluster *cl, int32_t node_id, char *err, size_t errlen)
{
    const struct lk_kafka_pattern *pt = cl->pattern;
    char host[256], ip[INET6_ADDRSTRLEN];
    struct lk_bind *b;
    uint16_t port;
    int family;

    if (pt == NULL || !pt->port_has_id ||
        lk_kafka_pattern_expand(pt, node_id, host, sizeof(host), &port) != 0) {
        snprintf(err, errlen, "node %ld has no port under broker.pattern %s", (long)node_id,
                 pt != NULL ? pt->text : "(none)");
        return NULL;
    }
    /* Where add_vhost would bind it: the host when it is an IP literal,
     * else the cluster's bind address. */
    if ((pt->host_has_id || lk_parse_ip(host, ip, sizeof(ip), &family) != 0) &&
        lk_parse_ip(cl->bind, ip, sizeof(ip), &family) != 0) {
        snprintf(err, errlen, "bad bind address '%s'", cl->bind);
        return NULL;
    }
    if ((b = lk_bind_new(ip, family, port, LK_PROTO_KAFKA, lk_scheme_is_tls(pt->scheme))) == NULL) {
        snprintf(err, errlen, "cannot make a socket address of %s port %u", ip, (unsigned)port);
        return NULL;
    }
    b->vhosts = lk_xcalloc(1, sizeof(*b->vhosts));
    b->nvhosts = 1;
    b->vhosts[0] = (struct lk_vhost){.host = lk_xstrdup(host),
                                     .port = port,
                                     .scheme = pt->scheme,
                                     .cluster = cl,
                                     .pattern = pt,
                                     .line = pt->line};
    return b;
}

const struct lk_broker *
lk_cluster_find_addr(const struct lk_cluster *cl, struct lk_str host, uint16_t port,
                     enum lk_scheme *scheme)
{
    /* Accept the host as it appears in a URL too: "[::1]" and the absolute
     * form "b1.example.com." name the same host as the config's. */
    const struct lk_addr_slot *sl;

    host = addr_host(host);
    if (host.len == 0 || cl->addr_cap == 0)
        return NULL;
    if ((sl = addr_slot(cl, host, port))->u == NULL)
        return NULL;
    if (scheme != NULL)
        *scheme = (enum lk_scheme)sl->sc;
    return sl->b;
}

const struct lk_broker *
lk_cluster_find_internal(const struct lk_cluster *cl, struct lk_str host, uint16_t port)
{
    const struct lk_addr_slot *sl;

    host = addr_host(host);
    if (host.len == 0 || cl->addr_cap == 0 || (sl = addr_slot(cl, host, port))->u == NULL)
        return NULL;
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
        if (sl->b->internal != NULL && sl->b->internal->addr[sc] == sl->u)
            return sl->b;
    return NULL;
}

const struct lk_url *
lk_broker_upstream(const struct lk_broker *b, enum lk_scheme scheme, int client_tls)
{
    int prefer_tls = client_tls;

    if (b->cluster->upstream_tls == LK_UPSTREAM_TLS_PLAIN)
        prefer_tls = 0;
    else if (b->cluster->upstream_tls == LK_UPSTREAM_TLS_TLS)
        prefer_tls = 1;
    return lk_listener_pick(b->internal, scheme, prefer_tls);
}

struct lk_cluster *
lk_conf_cluster(const struct lk_conf *conf, const char *name)
{
    return lk_conf_find_cluster(conf, name, strlen(name));
}
