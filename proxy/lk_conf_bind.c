/*
 * Bind planning (lk_conf_bind.h): the last pass of the loader, once every
 * broker's listeners are resolved.  A host that is an IP literal binds
 * exactly that IP:port, a name binds the cluster's `bind` address on that
 * port; vhosts sharing (address, port) share one bind, which must agree on
 * TLS and protocol and must be able to tell its vhosts apart.  The admin
 * listener and broker.pattern's future sockets must not collide with any,
 * and no bind may be a broker's internal address.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "lk_conf.h"
#include "lk_conf_bind.h"
#include "lk_conf_brokers.h"
#include "lk_conf_ini.h"
#include "lk_conf_value.h"
#include "lk_pool.h"

/* Binds ---------------------------------------------------------------------------- */

unsigned
lk_scheme_proto(enum lk_scheme scheme)
{
    switch (scheme) {
    case LK_SCHEME_HTTP:
    case LK_SCHEME_HTTPS:
        return LK_PROTO_HTTP;
    case LK_SCHEME_KAFKA:
    case LK_SCHEME_KAFKA_SSL:
        return LK_PROTO_KAFKA;
    default:
        return LK_PROTO_PULSAR;
    }
}

const char *
lk_proto_name(unsigned proto)
{
    switch (proto) {
    case LK_PROTO_HTTP:
        return "http";
    case LK_PROTO_PULSAR:
        return "pulsar";
    case LK_PROTO_KAFKA:
        return "kafka";
    default:
        return "?";
    }
}

/* "scheme://host:port" of a vhost, for messages; Kafka addresses have no
 * scheme, so "host:port". */
static void
vhost_url(const struct lk_vhost *v, char *buf, size_t len)
{
    if (lk_scheme_proto(v->scheme) == LK_PROTO_KAFKA)
        snprintf(buf, len, strchr(v->host, ':') != NULL ? "[%s]:%u" : "%s:%u", v->host,
                 (unsigned)v->port);
    else
        snprintf(buf, len, strchr(v->host, ':') != NULL ? "%s://[%s]:%u" : "%s://%s:%u",
                 lk_scheme_name(v->scheme), v->host, (unsigned)v->port);
}

/* "[broker prod/b1] advertisedListeners": where a vhost comes from. */
static void
vhost_origin(const struct lk_vhost *v, char *buf, size_t len)
{
    if (v->broker != NULL && lk_cluster_is_kafka(v->cluster))
        snprintf(buf, len, "[broker %s] %s", v->broker->name,
                 v->broker->registration != NULL ? "registration" : "advertised.listeners");
    else if (v->broker != NULL)
        snprintf(buf, len, "[broker %s] advertisedListeners", v->broker->name);
    else if (lk_cluster_is_kafka(v->cluster))
        snprintf(buf, len, "[kafka %s] %s", v->cluster->name,
                 v->pattern != NULL ? "broker.pattern" : "bootstrap.servers");
    else
        snprintf(buf, len, "[pulsar %s] %s", v->cluster->name,
                 lk_scheme_proto(v->scheme) == LK_PROTO_HTTP ? "webServiceUrl" : "serviceUrl");
}

/* Reports "new conflicts with old: why" at the new vhost's line. */
static int conflict(struct lk_loader *ld, const struct lk_vhost *nv, const struct lk_vhost *ov,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int
conflict(struct lk_loader *ld, const struct lk_vhost *nv, const struct lk_vhost *ov, const char *fmt,
         ...)
{
    char nu[300], ou[300], no[300], oo[300], why[512];
    va_list ap;

    vhost_url(nv, nu, sizeof(nu));
    vhost_url(ov, ou, sizeof(ou));
    vhost_origin(nv, no, sizeof(no));
    vhost_origin(ov, oo, sizeof(oo));
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return lk_conf_err(ld, nv->line, NULL, NULL, "%s: %s conflicts with %s at line %d (%s): %s", no, nu,
                  ou, ov->line, oo, why);
}

static int
is_wildcard(const struct lk_bind *b)
{
    if (b->addr.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&b->addr)->sin_addr.s_addr == htonl(INADDR_ANY);
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&b->addr)->sin6_addr);
}

/* The bound IP as text, canonical as parse_ip makes it. */
static void
bind_ip(const struct lk_bind *b, char *buf, size_t len)
{
    const void *a = b->addr.ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)&b->addr)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)&b->addr)->sin6_addr;
    inet_ntop(b->addr.ss_family, a, buf, (socklen_t)len);
}

static uint16_t
bind_port(const struct lk_bind *b)
{
    return ntohs(b->addr.ss_family == AF_INET ? ((const struct sockaddr_in *)&b->addr)->sin_port
                                              : ((const struct sockaddr_in6 *)&b->addr)->sin6_port);
}

/*
 * The binding rule (CONTRACT section 2): a host that is an IP literal binds
 * exactly that IP:port, a name binds the cluster's `bind` address on that
 * port.  Vhosts sharing (address, port) share one bind, which must agree on
 * TLS and protocol and must be able to tell its vhosts apart.
 */
static int
add_vhost(struct lk_loader *ld, struct lk_cluster *cl, const struct lk_broker *br,
          const struct lk_kafka_pattern *pattern, const struct lk_url *u, int line)
{
    struct lk_conf *c = ld->conf;
    struct lk_vhost nv = {.host = u->host,
                          .port = u->port,
                          .scheme = u->scheme,
                          .cluster = cl,
                          .broker = br,
                          .pattern = pattern,
                          .line = line};
    char ip[INET6_ADDRSTRLEN], text[INET6_ADDRSTRLEN + 8];
    unsigned proto = lk_scheme_proto(u->scheme);
    int tls = lk_scheme_is_tls(u->scheme), family;
    struct lk_bind *b = NULL;
    size_t i;

    if (lk_parse_ip(u->host, ip, sizeof(ip), &family) != 0 &&
        lk_parse_ip(cl->bind, ip, sizeof(ip), &family) != 0)
        return lk_conf_err(ld, line, NULL, NULL, "bad bind address '%s'", cl->bind); /* checked before */
    snprintf(text, sizeof(text), family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, (unsigned)u->port);

    for (i = 0; i < c->nbinds; i++)
        if (strcmp(c->binds[i]->text, text) == 0)
            b = c->binds[i];

    if (b != NULL) {
        const struct lk_vhost *first = &b->vhosts[0];

        if (b->tls != tls)
            return conflict(ld, &nv, first, "bind %s cannot mix TLS and plaintext", text);
        if (b->proxy_protocol != (unsigned)cl->proxy_protocol)
            return conflict(ld, &nv, first, "bind %s cannot take the PROXY protocol for one and not the other (proxy_protocol)", text);
        if (b->proto != proto)
            return conflict(ld, &nv, first, "bind %s cannot serve both %s and %s", text,
                            lk_proto_name(b->proto), lk_proto_name(proto));
        for (i = 0; i < b->nvhosts; i++)
            if (strcmp(b->vhosts[i].host, u->host) == 0)
                return conflict(ld, &nv, &b->vhosts[i],
                                "both are %s on bind %s, so lookout cannot tell them apart",
                                u->host, text);
        if (!tls && proto == LK_PROTO_PULSAR)
            return conflict(ld, &nv, first,
                            "they share plaintext bind %s, and the Pulsar binary protocol has "
                            "neither TLS SNI nor a Host header to tell them apart (use pulsar+ssl, "
                            "or a distinct port or IP literal for each)",
                            text);
        if (!tls && proto == LK_PROTO_KAFKA)
            return conflict(ld, &nv, first,
                            "they share plaintext bind %s, and lookout cannot tell them apart: "
                            "Kafka's PLAINTEXT and SASL_PLAINTEXT carry no TLS SNI and no host "
                            "name (use SSL or SASL_SSL, or a distinct port or IP literal for "
                            "each)",
                            text);
    } else {
        if ((b = lk_bind_new(ip, family, u->port, proto, tls)) == NULL)
            return lk_conf_err(ld, line, NULL, NULL, "cannot make a socket address of %s", text);
        b->proxy_protocol = (unsigned)cl->proxy_protocol;
        c->binds = lk_xrealloc(c->binds, (c->nbinds + 1) * sizeof(*c->binds));
        c->binds[c->nbinds++] = b;

        /* Linux refuses 0.0.0.0:p next to 127.0.0.1:p (EADDRINUSE), and a
         * wildcard would take the other's clients anyway. */
        for (i = 0; i + 1 < c->nbinds; i++) {
            const struct lk_bind *o = c->binds[i];
            if (o->addr.ss_family == family && bind_port(o) == u->port &&
                is_wildcard(o) != is_wildcard(b))
                return conflict(ld, &nv, &o->vhosts[0],
                                "binds %s and %s overlap (a wildcard and a specific address on "
                                "one port)",
                                text, o->text);
        }
    }
    b->vhosts = lk_xrealloc(b->vhosts, (b->nvhosts + 1) * sizeof(*b->vhosts));
    nv.host = lk_xstrdup(u->host);
    b->vhosts[b->nvhosts++] = nv;
    return 0;
}

/* A host as the config's addresses hold it, for comparing: an IP literal in
 * canonical text (so "::1" = "0::1"), or a name without the trailing dot of
 * its absolute form. */
struct host_key {
    char ip[INET6_ADDRSTRLEN];
    int family; /* AF_INET, AF_INET6; 0 for a name */
    struct lk_str name;
    int loopback; /* 2: 127.0.0.1, ::1, the unspecified address (Linux connects
                   * it to the machine itself), localhost; 1: another 127.x */
};

static void
host_key(const char *host, struct host_key *k)
{
    unsigned char a[sizeof(struct in6_addr)];

    k->name = lk_str_c(host);
    if (k->name.len > 1 && k->name.p[k->name.len - 1] == '.')
        k->name.len--;
    k->loopback = 0;
    if (lk_parse_ip(host, k->ip, sizeof(k->ip), &k->family) != 0) {
        k->family = 0;
        k->ip[0] = '\0';
        if (lk_str_eqi(k->name, LK_STRLIT("localhost")) ||
            lk_str_has_suffix_i(k->name, LK_STRLIT(".localhost")))
            k->loopback = 2;
        return;
    }
    inet_pton(k->family, k->ip, a);
    if (k->family == AF_INET6) {
        if (IN6_IS_ADDR_LOOPBACK((struct in6_addr *)a) ||
            IN6_IS_ADDR_UNSPECIFIED((struct in6_addr *)a))
            k->loopback = 2;
    } else if (memcmp(a, "\x7f\0\0\x01", 4) == 0 || memcmp(a, "\0\0\0\0", 4) == 0) {
        k->loopback = 2;
    } else if (a[0] == 127) {
        k->loopback = 1;
    }
}

/*
 * Whether a connection to host:port u reaches lookout's socket b, bound for
 * a vhost whose host is v: u names v's host, or u's IP is b's, or u is this
 * machine's loopback and b takes it (a wildcard takes all of 127/8 or ::1,
 * 127.0.0.1 and ::1 take localhost).  A socket takes its own family only
 * (IPV6_V6ONLY).  The other addresses of this machine's interfaces are not
 * known from the config, so a wildcard next to one of them is not caught.
 */
static int
bind_takes(const struct lk_bind *b, const struct host_key *bk, const struct host_key *v,
           const struct host_key *u, uint16_t port)
{
    if (port != bind_port(b))
        return 0;
    if (u->family != 0 || v->family != 0 ? u->family == v->family && strcmp(u->ip, v->ip) == 0
                                         : lk_str_eqi(u->name, v->name))
        return 1;
    if (u->family != 0 && u->family != bk->family)
        return 0;
    if (u->family != 0 && strcmp(u->ip, bk->ip) == 0)
        return 1;
    return is_wildcard(b) ? u->loopback != 0 : bk->loopback == 2 && u->loopback == 2;
}

/*
 * Refuses a bind that is also some broker's internal address, in any
 * cluster: lookout would forward requests to itself, each one a new
 * connection, until it runs out of file descriptors.  Each address is read
 * once, since a config may hold thousands of both.
 */
/* A broker's internal address, for check_self_dial's port order. */
struct dial_key {
    uint16_t port;
    const struct lk_broker *br;
    const struct lk_url *u;
    struct host_key k;
};

static int
dial_key_cmp(const void *a, const void *b)
{
    const struct dial_key *x = a, *y = b;

    if (x->port != y->port)
        return x->port < y->port ? -1 : 1;
    return x->br->index < y->br->index ? -1 : x->br->index > y->br->index;
}

static int
check_self_dial(struct lk_loader *ld)
{
    const struct lk_conf *c = ld->conf;
    struct dial_key *keys = lk_xcalloc(c->nbrokers * LK_SCHEME__COUNT + 1, sizeof(*keys));
    size_t n = 0;
    int rc = 0;

    /* Sorted by port: a bind meets only the addresses on its own port, so
     * that thousands of brokers cost no more than a sort. */
    for (size_t k = 0; k < c->nbrokers; k++)
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *u = c->brokers[k]->internal->addr[sc];
            if (u == NULL)
                continue;
            keys[n] = (struct dial_key){.port = u->port, .br = c->brokers[k], .u = u};
            host_key(u->host, &keys[n++].k);
        }
    qsort(keys, n, sizeof(*keys), dial_key_cmp);
    for (size_t i = 0; i < c->nbinds && rc == 0; i++) {
        const struct lk_bind *bd = c->binds[i];
        uint16_t port = bind_port(bd);
        char bip[INET6_ADDRSTRLEN];
        struct host_key bk;
        size_t lo = 0, hi = n;

        while (lo < hi) { /* the first key on port */
            size_t mid = lo + (hi - lo) / 2;
            if (keys[mid].port < port)
                lo = mid + 1;
            else
                hi = mid;
        }
        bind_ip(bd, bip, sizeof(bip));
        host_key(bip, &bk);
        for (size_t j = 0; j < bd->nvhosts && rc == 0; j++) {
            const struct lk_vhost *v = &bd->vhosts[j];
            struct host_key vk;

            host_key(v->host, &vk);
            for (size_t k = lo; k < n && keys[k].port == port && rc == 0; k++) {
                char vu[300], vo[300];

                if (!bind_takes(bd, &bk, &vk, &keys[k].k, port))
                    continue;
                vhost_url(v, vu, sizeof(vu));
                vhost_origin(v, vo, sizeof(vo));
                rc = lk_conf_err(ld, v->line, NULL, NULL,
                            "%s: lookout would listen on %s (bind %s) and connect to it as "
                            "the internal address %s of broker %s (line %d)",
                            vo, vu, bd->text, keys[k].u->text, keys[k].br->name,
                            lk_conf_listeners_line(c, keys[k].br));
            }
        }
    }
    free(keys);
    return rc;
}

/* Whether a socket on (family, ip, port) would collide with bind b: the
 * same port and address, or a wildcard on either side. */
static int
bind_overlaps(const struct lk_bind *b, int family, const char *ip, uint16_t port)
{
    char bip[INET6_ADDRSTRLEN];
    const char *any = family == AF_INET ? "0.0.0.0" : "::";

    if (b->addr.ss_family != family || bind_port(b) != port)
        return 0;
    bind_ip(b, bip, sizeof(bip));
    return is_wildcard(b) || strcmp(bip, ip) == 0 || strcmp(ip, any) == 0;
}

/*
 * broker.pattern hands out addresses for node ids the map lacks, so none
 * of them may be an address lookout already serves for something else: an
 * address of another node (or the bootstrap) that the pattern also spells,
 * or, for a port pattern, a port some bind already holds on the pattern's
 * address.  A known node's own address may follow the pattern, which is
 * the usual layout.
 */
static int
check_patterns(struct lk_loader *ld)
{
    const struct lk_conf *c = ld->conf;

    for (size_t i = 0; i < c->nclusters; i++) {
        const struct lk_cluster *cl = c->clusters[i];
        const struct lk_kafka_pattern *pt = cl->pattern;
        char ip[INET6_ADDRSTRLEN];
        int family;

        if (pt == NULL)
            continue;
        if (pt->host_has_id || lk_parse_ip(pt->host_prefix, ip, sizeof(ip), &family) != 0)
            lk_parse_ip(cl->bind, ip, sizeof(ip), &family); /* checked at load */
        for (size_t j = 0; j < c->nbinds; j++) {
            const struct lk_bind *b = c->binds[j];
            for (size_t k = 0; k < b->nvhosts; k++) {
                const struct lk_vhost *v = &b->vhosts[k];
                char u[300], o[300];
                int32_t id;

                if (v->pattern == pt)
                    continue;
                vhost_url(v, u, sizeof(u));
                vhost_origin(v, o, sizeof(o));
                if (lk_kafka_pattern_match(pt, lk_str_c(v->host), v->port, &id) &&
                    lk_cluster_find_node(cl, id) == NULL)
                    return lk_conf_err(ld, pt->line, cl->section, "broker.pattern",
                                  "%s is the pattern's address for node %ld, which is not in the "
                                  "map, but line %d (%s) already serves it",
                                  u, (long)id, v->line, o);
                if (pt->port_has_id && bind_port(b) >= pt->port &&
                    bind_overlaps(b, family, ip, bind_port(b)) &&
                    lk_cluster_find_node(cl, id = bind_port(b) - pt->port) == NULL)
                    return lk_conf_err(ld, pt->line, cl->section, "broker.pattern",
                                  "node %ld, which is not in the map, would get port %u on %s, "
                                  "but bind %s listens there for %s at line %d (%s)",
                                  (long)id, (unsigned)bind_port(b), ip, b->text, u, v->line, o);
            }
        }
    }
    return 0;
}

int
lk_conf_build_binds(struct lk_loader *ld)
{
    struct lk_conf *c = ld->conf;

    for (size_t i = 0; i < c->nclusters; i++) {
        struct lk_cluster *cl = c->clusters[i];
        struct lk_conf_entry *e;

        /* No lookupListenerName: the brokers stay hidden, and only the
         * service addresses are exposed. */
        for (size_t j = 0; cl->lookup_listener != NULL && j < cl->nbrokers; j++) {
            const struct lk_broker *b = cl->brokers[j];
            int line = lk_conf_listeners_line(c, b);
            for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
                if (b->lookup->addr[sc] != NULL &&
                    add_vhost(ld, cl, b, NULL, b->lookup->addr[sc], line) != 0)
                    return -1;
        }
        if (cl->web_service != NULL && (e = lk_conf_find_entry(cl->section, "webServiceUrl")) != NULL &&
            add_vhost(ld, cl, NULL, NULL, cl->web_service, e->line) != 0)
            return -1;
        if (cl->service != NULL && (e = lk_conf_find_entry(cl->section, "serviceUrl")) != NULL &&
            add_vhost(ld, cl, NULL, NULL, cl->service, e->line) != 0)
            return -1;
        for (size_t j = 0; j < cl->nbootstrap; j++)
            if (add_vhost(ld, cl, NULL, NULL, &cl->bootstrap[j],
                          lk_conf_find_entry(cl->section, "bootstrap.servers")->line) != 0)
                return -1;
        /* A pattern with the id in the host only is one socket, shared by
         * SNI; one with the id in the port is a socket per node, bound
         * when the node shows up (check_patterns keeps its ports free). */
        if (cl->pattern != NULL && cl->pattern->host_has_id && !cl->pattern->port_has_id) {
            const struct lk_kafka_pattern *pt = cl->pattern;
            size_t n = strlen(pt->host_prefix) + sizeof("$(nodeId)") + strlen(pt->host_suffix);
            struct lk_url u = {.scheme = pt->scheme, .port = pt->port};
            int rc;

            if (!lk_scheme_is_tls(pt->scheme))
                return lk_conf_err(ld, pt->line, cl->section, "broker.pattern",
                              "every node it serves would share one plaintext socket on port "
                              "%u, and lookout cannot tell them apart: Kafka's %s carries no TLS "
                              "SNI (give each node a port, e.g. kafka.example.com:$(%u+nodeId), "
                              "or use SSL or SASL_SSL)",
                              (unsigned)pt->port, pt->sasl ? "SASL_PLAINTEXT" : "PLAINTEXT",
                              (unsigned)pt->port);
            u.host = lk_xmalloc(n);
            snprintf(u.host, n, "%s$(nodeId)%s", pt->host_prefix, pt->host_suffix);
            rc = add_vhost(ld, cl, NULL, pt, &u, pt->line);
            free(u.host);
            if (rc != 0)
                return -1;
        }
    }
    if (check_patterns(ld) != 0)
        return -1;

    /* A TLS bind without any tls.certificate is refused by lk_tls when it
     * builds the runtime, as are unreadable certificate files. */

    /* The admin listener is one more socket that must not collide. */
    if (c->admin != NULL) {
        char ip[INET6_ADDRSTRLEN];
        int family;
        uint16_t port;
        struct lk_conf_section *s = lk_conf_find_section(c, "lookout", NULL);
        struct lk_conf_entry *e = lk_conf_find_entry(s, "admin");

        lk_parse_ip_port(c->admin, ip, sizeof(ip), &family, &port); /* checked at load */
        for (size_t i = 0; i < c->nbinds; i++) {
            const struct lk_bind *b = c->binds[i];

            if (bind_overlaps(b, family, ip, port)) {
                char u[300];
                vhost_url(&b->vhosts[0], u, sizeof(u));
                return LK_ENTRY_ERR(ld, s, e, "%s conflicts with bind %s of %s (line %d)", c->admin,
                                 b->text, u, b->vhosts[0].line);
            }
        }
        /* Nor a broker's: lookout would dial its own admin listener as that
         * broker, and answer the broker's clients with metrics. */
        int wild = strcmp(ip, "0.0.0.0") == 0 || strcmp(ip, "::") == 0;
        for (size_t k = 0; k < c->nbrokers; k++)
            for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
                const struct lk_url *u = c->brokers[k]->internal->addr[sc];
                if (u == NULL || u->port != port)
                    continue;
                if (strcmp(u->host, ip) == 0 ||
                    (wild && (strncmp(u->host, "127.", 4) == 0 || strcmp(u->host, "::1") == 0 ||
                              strcmp(u->host, "localhost") == 0)))
                    return LK_ENTRY_ERR(ld, s, e,
                                     "%s is the internal address %s of broker %s (line %d)",
                                     c->admin, u->text, c->brokers[k]->name,
                                     lk_conf_listeners_line(c, c->brokers[k]));
            }
    }
    return check_self_dial(ld);
}
