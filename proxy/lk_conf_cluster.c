/*
 * The [pulsar NAME] and [kafka NAME] sections: one key table for both
 * kinds (a row says which kinds it stands in), the setters only clusters
 * need, and the loader that makes a cluster of each section.  Rows load
 * in table order, whatever the file's order, so a row may read what the
 * rows before it set (pulsar_routing reads serviceUrl, health.timeout
 * health.interval).
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_cluster.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"
#include "lk_conf_value.h"
#include "lk_pool.h"
#include "lk_registry.h"

#define CL(field) offsetof(struct lk_cluster, field)

const char *const lk_redirects_names[] = {"rewrite", "follow", NULL};
const char *const lk_pulsar_routing_names[] = {"per-broker", "service", NULL};
const char *const lk_leak_guard_names[] = {"off", "log", "rewrite", "block", NULL};
const char *const lk_upstream_tls_names[] = {"match", "plain", "tls", NULL};
const char *const lk_verify_client_names[] = {"inherit", "off", "optional", "on", NULL};
const char *const lk_unknown_api_names[] = {"pass", "drop", NULL};
/* proxy_protocol: each name's index is its LK_PP_* mask. */
static const char *const proxy_protocol_names[] = {"off", "v1", "v2", "any", NULL};
/* upstream.proxy_protocol: the same, without any (lookout sends one). */
static const char *const upstream_proxy_protocol_names[] = {"off", "v1", "v2", NULL};
const char *const lk_health_check_names[] = {"off", "tcp", "http", NULL};

/* Listeners ------------------------------------------------------------------------ */

/*
 * client_listeners: "external, vpn", the listeners a client may name
 * besides lookupListenerName (CONTRACT §3).  Each is a name some broker
 * has (checked with the brokers, check_client_listeners), once; the
 * internal listener only as written here, never by default.
 */
static int
set_client_listeners(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                     const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    const char *p = e->value;

    (void)k;
    /* Kafka has no client-chosen listener (no KIP gives clients a way to
     * name one): every address is rewritten into lookupListenerName. */
    if (lk_cluster_is_kafka(cl))
        return LK_ENTRY_ERR(ld, s, e,
                            "a [pulsar] key: Kafka clients cannot name a listener, every address "
                            "they get is lookupListenerName's");
    cl->client_listeners_line = e->line;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct lk_str item =
            lk_str_trim(lk_str_make(p, comma != NULL ? (size_t)(comma - p) : strlen(p)));

        if (item.len == 0)
            return LK_ENTRY_ERR(ld, s, e, "empty listener name (expected name, name, ...)");
        for (size_t i = 0; i < cl->nclient_listeners; i++)
            if (lk_str_eq(lk_str_c(cl->client_listeners[i]), item))
                return LK_ENTRY_ERR(ld, s, e, "'%.*s' is listed twice", (int)item.len, item.p);
        cl->client_listeners = lk_xrealloc(cl->client_listeners, (cl->nclient_listeners + 1) *
                                                                     sizeof(*cl->client_listeners));
        cl->client_listeners[cl->nclient_listeners++] = lk_xstrndup(item.p, item.len);
        if (comma == NULL)
            return 0;
        p = comma + 1;
    }
}

/* A listener name into the char * at k->off: as written for Pulsar; for
 * Kafka upper-cased, as Kafka's ListenerName.normalised does. */
static int
listener_name(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
              const struct lk_conf_key *k, struct lk_cluster *cl)
{
    char **out = LK_KEY_FIELD(k, cl, char *), msg[256];

    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty listener name");
    if (lk_cluster_is_kafka(cl) && lk_kafka_name_check(lk_str_c(e->value), msg, sizeof(msg)) != 0)
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    free(*out);
    *out = lk_cluster_is_kafka(cl) ? lk_kafka_name_dup(lk_str_c(e->value)) : lk_xstrdup(e->value);
    return 0;
}

static int
set_internal(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
             const struct lk_conf_key *k, void *obj)
{
    return listener_name(ld, s, e, k, obj);
}

/* lookupListenerName: never the internal listener; a Kafka cluster cannot
 * run without one, since its clients connect to whatever Metadata names. */
static int
set_lookup(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
           const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    const struct lk_conf_entry *ie;

    if (e == NULL)
        return !lk_cluster_is_kafka(cl)
                   ? 0
                   : lk_conf_err(ld, s->line, s, NULL,
                                 "lookupListenerName is missing (the listener whose addresses "
                                 "clients get; a Kafka cluster cannot run without one)");
    if (!lk_cluster_is_kafka(cl)) {
        ie = lk_conf_find_entry(s, "internalListenerName");
        if (e->value[0] != '\0' && ie != NULL && strcmp(e->value, ie->value) == 0)
            return LK_ENTRY_ERR(ld, s, e,
                                "'%s' is the internal listener (line %d): lookout would listen "
                                "on the addresses it connects to",
                                e->value, ie->line);
        return listener_name(ld, s, e, k, cl);
    }
    if (listener_name(ld, s, e, k, cl) != 0)
        return -1;
    ie = lk_conf_find_entry(s, "inter.broker.listener.name");
    if (strcmp(cl->lookup_listener, cl->internal_listener) == 0)
        return LK_ENTRY_ERR(ld, s, e,
                            "'%s' is the internal listener (%s%s): lookout would listen on the "
                            "addresses it connects to",
                            e->value, ie != NULL ? "inter.broker.listener.name" : "Kafka's default",
                            ie != NULL ? "" : " inter.broker.listener.name");
    return 0;
}

/* listener.security.protocol.map, Kafka's default when absent. */
static int
set_secmap(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
           const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    char msg[512];
    int n = lk_kafka_secmap_parse(e != NULL ? e->value : lk_kafka_default_secmap, &cl->secmap,
                                  msg, sizeof(msg));

    (void)k;
    if (n < 0)
        return e != NULL ? LK_ENTRY_ERR(ld, s, e, "%s", msg)
                         : lk_conf_err(ld, s->line, s, NULL, "%s", msg);
    cl->nsecmap = (size_t)n;
    return 0;
}

/* Addresses ------------------------------------------------------------------------ */

/* The two schemes a URL key takes. */
struct scheme_pair {
    enum lk_scheme a, b;
};

/* A URL into a new lk_url * at k->off, whose scheme is one of arg's. */
static int
set_url(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
        const struct lk_conf_key *k, void *obj)
{
    const struct scheme_pair *sp = k->arg;
    char msg[512];
    struct lk_url *u = lk_xmalloc(sizeof(*u));

    if (lk_url_parse(e->value, strlen(e->value), u, msg, sizeof(msg)) != 0) {
        free(u);
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    }
    if (u->scheme != sp->a && u->scheme != sp->b) {
        lk_conf_err(ld, e->line, s, e->key, "%s: the scheme must be %s or %s", u->text,
                    lk_scheme_name(sp->a), lk_scheme_name(sp->b));
        lk_url_free(u);
        free(u);
        return -1;
    }
    *LK_KEY_FIELD(k, obj, struct lk_url *) = u;
    return 0;
}
static const struct scheme_pair http_schemes = {LK_SCHEME_HTTP, LK_SCHEME_HTTPS},
                                pulsar_schemes = {LK_SCHEME_PULSAR, LK_SCHEME_PULSAR_SSL};

/* bootstrap.servers: "host:port,host:port", Kafka's client syntax; empty
 * items are skipped as the clients skip them.  Their scheme is set once the
 * lookup listener's protocol is known (lk_conf_resolve_kafka). */
static int
set_bootstrap(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
              const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    const char *p = e->value;
    char msg[512];

    (void)k;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct lk_str item =
            lk_str_trim(lk_str_make(p, comma != NULL ? (size_t)(comma - p) : strlen(p)));

        if (item.len != 0) {
            struct lk_url u;
            if (lk_kafka_addr_parse(item.p, item.len, LK_SCHEME_KAFKA, &u, msg, sizeof(msg)) != 0)
                return LK_ENTRY_ERR(ld, s, e, "%s", msg);
            cl->bootstrap =
                lk_xrealloc(cl->bootstrap, (cl->nbootstrap + 1) * sizeof(*cl->bootstrap));
            cl->bootstrap[cl->nbootstrap++] = u;
            for (size_t i = 0; i + 1 < cl->nbootstrap; i++)
                if (strcmp(cl->bootstrap[i].hostport, u.hostport) == 0)
                    return LK_ENTRY_ERR(ld, s, e, "%s is listed twice", u.hostport);
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (cl->nbootstrap == 0)
        return LK_ENTRY_ERR(ld, s, e, "no address (expected host:port,...)");
    return 0;
}

static int
set_bind(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
         const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    char ip[INET6_ADDRSTRLEN];
    int family;

    (void)k;
    if (lk_parse_ip(e->value, ip, sizeof(ip), &family) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not an IP address (e.g. 0.0.0.0, 127.0.0.2, ::)",
                            e->value);
    free(cl->bind);
    cl->bind = lk_xstrdup(ip);
    return 0;
}

static int
set_pulsar_routing(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                   const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;

    if (lk_set_enum(ld, s, e, k, obj) != 0)
        return -1;
    if (cl->pulsar_routing == LK_PULSAR_ROUTING_SERVICE && cl->service == NULL)
        return LK_ENTRY_ERR(ld, s, e,
                            "service routing sends every binary client through serviceUrl, "
                            "which this cluster does not have");
    return 0;
}

static int
set_pattern(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    char msg[512];

    (void)k;
    cl->pattern = lk_xcalloc(1, sizeof(*cl->pattern));
    if (lk_kafka_pattern_parse(e->value, cl->pattern, msg, sizeof(msg)) != 0)
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    cl->pattern->line = e->line;
    return 0;
}

/* Health ---------------------------------------------------------------------------- */

/* health.backoff_max: at least health.backoff; a long health.backoff
 * alone means no doubling. */
static int
set_backoff_max(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                const struct lk_conf_key *k, void *obj)
{
    struct lk_health_conf *h = &((struct lk_cluster *)obj)->health;

    (void)k;
    if (e == NULL) {
        if (h->backoff_max_ms < h->backoff_ms)
            h->backoff_max_ms = h->backoff_ms;
        return 0;
    }
    if (lk_conf_duration(ld, s, e, &h->backoff_max_ms) != 0)
        return -1;
    if (h->backoff_max_ms < h->backoff_ms)
        return LK_ENTRY_ERR(ld, s, e, "%s is below health.backoff (%u ms)", e->value,
                            h->backoff_ms);
    return 0;
}

/* http checks need no test of the brokers: a Pulsar broker's internal
 * listener always has an http or https address (lk_conf_resolve_pulsar). */
static int
set_health_check(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                 const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;

    if (lk_set_enum(ld, s, e, k, obj) != 0)
        return -1;
    if (cl->health.check == LK_HEALTH_CHECK_HTTP && cl->proto == LK_PROTO_KAFKA)
        return LK_ENTRY_ERR(ld, s, e, "Kafka brokers have no HTTP address to check: use tcp");
    return 0;
}

/* health.timeout: at most health.interval, or checks would overlap. */
static int
set_health_timeout(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                   const struct lk_conf_key *k, void *obj)
{
    struct lk_health_conf *h = &((struct lk_cluster *)obj)->health;

    (void)k;
    if (e == NULL) {
        if (h->timeout_ms > h->interval_ms)
            h->timeout_ms = h->interval_ms;
        return 0;
    }
    if (lk_conf_duration(ld, s, e, &h->timeout_ms) != 0)
        return -1;
    if (h->timeout_ms > h->interval_ms)
        return LK_ENTRY_ERR(ld, s, e, "%s is above health.interval (%u ms): checks would overlap",
                            e->value, h->interval_ms);
    return 0;
}

/* Only http checks ask for a path: a Kafka cluster has none to set. */
static int
set_health_path(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                const struct lk_conf_key *k, void *obj)
{
    struct lk_health_conf *h = &((struct lk_cluster *)obj)->health;

    (void)k;
    if (e->value[0] != '/')
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a path (it must start with '/')", e->value);
    for (const char *p = e->value; *p != '\0'; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return LK_ENTRY_ERR(ld, s, e, "a path cannot hold spaces or control characters");
    free(h->path);
    h->path = lk_xstrdup(e->value);
    return 0;
}

/* Request rates ------------------------------------------------------------------- */

/* limit.requests, limit.burst and limit.exempt: each one not set in the
 * cluster is [lookout]'s (read before any cluster), and burst, unless
 * set, is the rate's N. */
static int
set_limit_requests(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                   const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;

    /* FNV-1a: the same name, the same buckets, whatever a reload moves */
    cl->limit_zone = 2166136261u;
    for (const char *p = cl->name; *p != '\0'; p++)
        cl->limit_zone = (cl->limit_zone ^ (unsigned char)*p) * 16777619u;
    if (e != NULL)
        return lk_set_rate(ld, s, e, k, obj);
    cl->limit.requests = ld->conf->limit.requests;
    cl->limit.per_s = ld->conf->limit.per_s;
    return 0;
}

static int
set_limit_burst(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;

    if (e == NULL)
        cl->limit.burst = ld->conf->limit.burst;
    else if (lk_set_uint(ld, s, e, k, obj) != 0)
        return -1;
    if (cl->limit.burst == 0)
        cl->limit.burst = cl->limit.requests;
    return 0;
}

static int
set_limit_exempt(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                 const struct lk_conf_key *k, void *obj)
{
    struct lk_cluster *cl = obj;
    size_t n = ld->conf->nlimit_exempt;

    if (e != NULL)
        return lk_set_cidrs(ld, s, e, k, obj);
    if (n != 0) {
        cl->limit_exempt = lk_xmalloc(n * sizeof(*cl->limit_exempt));
        memcpy(cl->limit_exempt, ld->conf->limit_exempt, n * sizeof(*cl->limit_exempt));
    }
    cl->nlimit_exempt = n;
    return 0;
}

/* The store ------------------------------------------------------------------------- */

/* At most one of keys (a key and its older spelling): the entry in *out,
 * NULL when none is there.  0, or -1 when two are. */
static int
take_one_of(struct lk_loader *ld, struct lk_conf_section *s, const char *const *keys,
            struct lk_conf_entry **out)
{
    struct lk_conf_entry *e;

    *out = NULL;
    for (const char *const *k = keys; *k != NULL; k++) {
        if ((e = lk_conf_take(s, *k)) == NULL)
            continue;
        if (*out != NULL)
            return LK_ENTRY_ERR(ld, s, e,
                                "give either %s or %s, not both (the other is at line %d)",
                                (*out)->key, e->key, (*out)->line);
        *out = e;
    }
    return 0;
}

/*
 * A map read from the cluster's own ZooKeeper, in the broker's own key for
 * its store (Pulsar's metadataStoreUrl, or the older zookeeperServers;
 * Kafka's zookeeper.connect) and session timeout: the row of the first
 * reads them all.  A store needs internal_networks: lookout dials what
 * registrations name only inside them.
 */
static int
set_store(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
          const struct lk_conf_key *k, void *obj)
{
    static const char *const pulsar_zk[] = {"metadataStoreUrl", "zookeeperServers", NULL};
    static const char *const kafka_zk[] = {"zookeeper.connect", NULL};
    static const char *const pulsar_to[] = {"metadataStoreSessionTimeoutMillis",
                                            "zooKeeperSessionTimeoutMillis", NULL};
    static const char *const kafka_to[] = {"zookeeper.session.timeout.ms", NULL};
    struct lk_cluster *cl = obj;
    struct lk_conf_entry *zk = NULL, *to = NULL;
    unsigned long ms;
    char msg[512];

    (void)e, (void)k;
    if (take_one_of(ld, s, cl->proto == LK_PROTO_KAFKA ? kafka_zk : pulsar_zk, &zk) != 0)
        return -1;
    /* The session timeout, in the brokers' own keys and unit. */
    if (take_one_of(ld, s, cl->proto == LK_PROTO_KAFKA ? kafka_to : pulsar_to, &to) != 0)
        return -1;
    if (to != NULL) {
        if (zk == NULL)
            return LK_ENTRY_ERR(ld, s, to, "there is no ZooKeeper to time out: %s is not set",
                                cl->proto == LK_PROTO_KAFKA ? "zookeeper.connect"
                                                            : "metadataStoreUrl");
        if (lk_parse_uint(to->value, 600000, &ms) != 0 || ms < 1000)
            return LK_ENTRY_ERR(
                ld, s, to, "'%s' is not a session timeout in milliseconds from 1000 to 600000",
                to->value);
        cl->zk_session_timeout_ms = (unsigned)ms;
    }
    if (zk == NULL)
        return 0;
    cl->zk = lk_xcalloc(1, sizeof(*cl->zk));
    if (lk_zk_connect_parse(zk->value, strcmp(zk->key, "metadataStoreUrl") == 0, cl->zk, msg,
                            sizeof(msg)) != 0)
        return LK_ENTRY_ERR(ld, s, zk, "%s", msg);
    if (cl->ninternal_networks == 0)
        return LK_ENTRY_ERR(ld, s, zk,
                            "internal_networks is missing: a map read from ZooKeeper needs the "
                            "networks lookout may dial (e.g. internal_networks = 10.0.0.0/8)");
    cl->zk_path = cl->proto == LK_PROTO_KAFKA ? LK_ZK_KAFKA_PATH : LK_ZK_PULSAR_PATH;
    cl->zk_line = zk->line;
    return 0;
}

/* The table ------------------------------------------------------------------------- */

/* Rows load in this order, the order each kind has always checked its keys
 * in (the first bad one is reported): keep a new row where its checks
 * belong, after any row it reads. */
static const struct lk_key_range hops_range = {1, 100}, fails_range = {1, 100};
static const size_t no_min = 0, ninternal_networks = CL(ninternal_networks);
static const size_t nlimit_exempt = CL(nlimit_exempt);
static const struct lk_key_range burst_range = {1, LK_RATE_MAX};

#define P LK_IN_PULSAR
#define K LK_IN_KAFKA
#define I LK_KEY_INIT
#define A LK_KEY_ALWAYS
/* clang-format off */
const struct lk_conf_key lk_conf_cluster_keys[] = {
    {"client_listeners", K, set_client_listeners, 0, NULL, LK_KEY_REFUSED, NULL,
     "a [pulsar] key: Kafka clients cannot name a listener"},
    {"internalListenerName", P, set_internal, CL(internal_listener), NULL, 0,
     "each broker's first listener", "the listener lookout connects to brokers on"},
    {"inter.broker.listener.name", K, set_internal, CL(internal_listener), NULL, I, "PLAINTEXT",
     "the listener lookout connects to brokers on"},
    {"lookupListenerName", P | K, set_lookup, CL(lookup_listener), NULL, A, "none",
     "the listener whose addresses clients get: lookout serves them (Kafka: required)"},
    {"listener.security.protocol.map", K, set_secmap, 0, NULL, A, "Kafka's default",
     "each listener's security protocol, NAME:PROTOCOL,..."},
    {"webServiceUrl", P, set_url, CL(web_service), &http_schemes, 0, "none",
     "the cluster's HTTP service address on lookout, http:// or https://"},
    {"serviceUrl", P, set_url, CL(service), &pulsar_schemes, 0, "none",
     "the cluster's binary service address on lookout, pulsar:// or pulsar+ssl://"},
    {"bootstrap.servers", K, set_bootstrap, 0, NULL, 0, "none",
     "the bootstrap addresses on lookout, host:port,..."},
    {"bind", P | K, set_bind, 0, NULL, I, "0.0.0.0",
     "the IP that addresses with a host name are bound on"},
    {"max_frame_bytes", K, lk_set_size, CL(max_frame_bytes), NULL, I, "100m",
     "a Kafka request or response over this closes its connection"},
    {"timeout.idle", K, lk_set_duration, CL(idle_ms), NULL, I, "10m",
     "an idle Kafka connection, either side"},
    {"unknown_api", K, lk_set_enum, CL(unknown_api), lk_unknown_api_names, I, "pass",
     "a request of an api key lookout does not know: pass it, or drop the connection"},
    {"redirects", P, lk_set_enum, CL(redirects), lk_redirects_names, I, "rewrite",
     "a broker's HTTP redirect to another broker: rewrite it, or follow it"},
    {"follow.max_hops", P, lk_set_uint, CL(follow_max_hops), &hops_range, I, "5",
     "redirects = follow: at most this many redirects per request"},
    {"follow.replay_bytes", P, lk_set_size, CL(follow_replay_bytes), &no_min, I, "5m",
     "redirects = follow: the largest request body kept to send again"},
    {"max_frame_bytes", P, lk_set_size, CL(max_frame_bytes), NULL, I, "5184k",
     "a Pulsar frame over this closes its connection"},
    {"forwarded_headers", P, lk_set_onoff, CL(forwarded_headers), NULL, I, "on",
     "add X-Forwarded-For, -Proto and -Host to HTTP requests"},
    {"forwarded_client_cert", P, lk_set_onoff, CL(forwarded_client_cert), NULL, I, "off",
     "add X-Forwarded-Client-Cert (the verified client certificate's subject) to HTTP requests"},
    {"upstream.tls", P, lk_set_enum, CL(upstream_tls), lk_upstream_tls_names, I, "match",
     "a broker with http and https: match the client, plain, or tls"},
    {"tls.verify_client", P | K, lk_set_enum, CL(verify_client), lk_verify_client_names, 0,
     "inherit", "client certificates when SNI names this cluster: inherit, off, optional, on"},
    {"tls.client_ca", P | K, lk_set_path, CL(client_ca), NULL, 0, "tls.client_ca of [lookout]",
     "CA file that this cluster's clients' certificates are checked against"},
    {"pulsar_routing", P, set_pulsar_routing, CL(pulsar_routing), lk_pulsar_routing_names,
     I | LK_KEY_NAMES,
     "per-broker", "binary clients go to each owner's address, or all through serviceUrl"},
    {"client_listeners", P, set_client_listeners, 0, NULL, 0, "none",
     "listeners besides lookupListenerName that a client may name"},
    {"broker.pattern", K, set_pattern, 0, NULL, 0, "none",
     "the address of a node id the map lacks, HOST:PORT with $(nodeId)"},
    {"health.fails", P | K, lk_set_uint, CL(health.fails), &fails_range, I, "1",
     "consecutive failures that take a broker out of rotation"},
    {"health.backoff", P | K, lk_set_duration, CL(health.backoff_ms), NULL, I, "1s",
     "how long a failed broker stays out, doubling with each failure"},
    {"health.backoff_max", P | K, set_backoff_max, 0, NULL, I | A, "30s",
     "the longest health.backoff grows to"},
    {"health.check", P | K, set_health_check, CL(health.check), lk_health_check_names,
     I | LK_KEY_NAMES, "off",
     "active checks of every broker: off, tcp or http"},
    {"health.interval", P | K, lk_set_duration, CL(health.interval_ms), NULL, I, "5s",
     "the time between two checks of a broker"},
    {"health.timeout", P | K, set_health_timeout, 0, NULL, I | A, "2s",
     "a check's time limit, at most health.interval"},
    {"health.path", P, set_health_path, 0, NULL, I, "/admin/v2/brokers/ready",
     "the path an http check asks for"},
    {"proxy_protocol", P | K, lk_set_enum, CL(proxy_protocol), proxy_protocol_names, I, "off",
     "the PROXY protocol header its listeners take from proxy_protocol.trusted: off, v1, v2, any"},
    {"upstream.proxy_protocol", P | K, lk_set_enum, CL(upstream_proxy_protocol),
     upstream_proxy_protocol_names, I, "off",
     "a PROXY protocol header naming the client first on each broker connection: off, v1, v2"},
    {"limit.requests", P, set_limit_requests, CL(limit), NULL, A, "limit.requests of [lookout]",
     "HTTP requests per client address to this cluster: N/s or N/m, or off"},
    {"limit.burst", P, set_limit_burst, CL(limit.burst), &burst_range, A,
     "limit.burst of [lookout]", "requests a client may send at once before limit.requests paces it"},
    {"limit.exempt", P, set_limit_exempt, CL(limit_exempt), &nlimit_exempt, A,
     "limit.exempt of [lookout]", "CIDRs whose clients limit.requests never holds back"},
    {"internal_networks", P | K, lk_set_cidrs, CL(internal_networks), &ninternal_networks, 0, "none",
     "the networks lookout may dial (needed with a store)"},
    {"metadataStoreUrl", P, set_store, 0, NULL, A, "unset",
     "the cluster's ZooKeeper, read for the brokers' registrations"},
    {"zookeeperServers", P, NULL, 0, NULL, 0, "unset", "the older spelling of metadataStoreUrl"},
    {"metadataStoreSessionTimeoutMillis", P, NULL, 0, NULL, 0, "10000",
     "the ZooKeeper session timeout, in milliseconds"},
    {"zooKeeperSessionTimeoutMillis", P, NULL, 0, NULL, 0, "10000",
     "the older spelling of metadataStoreSessionTimeoutMillis"},
    {"zookeeper.connect", K, set_store, 0, NULL, A, "unset",
     "the cluster's ZooKeeper, read for the brokers' registrations"},
    {"zookeeper.session.timeout.ms", K, NULL, 0, NULL, 0, "10000",
     "the ZooKeeper session timeout, in milliseconds"},
    {"filters", P, NULL, 0, NULL, 0, "listener, lookup, location, pulsar, leak_guard",
     "the filter chain, in order"},
    {"filters", K, NULL, 0, NULL, 0, "kafka, leak_guard", "the filter chain, in order"},
    {NULL, 0, NULL, 0, NULL, 0, NULL, NULL},
};
/* clang-format on */
#undef P
#undef K
#undef I
#undef A

/* Adds the cluster of section s with its kind's defaults; NULL after an
 * error. */
static struct lk_cluster *
new_cluster(struct lk_loader *ld, struct lk_conf_section *s, unsigned proto)
{
    struct lk_conf *c = ld->conf;
    struct lk_cluster *cl = lk_xcalloc(1, sizeof(*cl));
    const struct lk_cluster *dup = lk_conf_find_cluster(c, s->name, strlen(s->name));

    c->clusters = lk_xrealloc(c->clusters, (c->nclusters + 1) * sizeof(*c->clusters));
    cl->index = c->nclusters;
    cl->conf = c;
    c->clusters[c->nclusters++] = cl;
    cl->name = lk_xstrdup(s->name);
    cl->proto = proto;
    cl->section = s;
    cl->line = s->line;
    lk_conf_keys_init(lk_conf_cluster_keys, lk_cluster_is_kafka(cl) ? LK_IN_KAFKA : LK_IN_PULSAR,
                      cl);

    if (strchr(s->name, '/') != NULL) {
        lk_conf_err(ld, s->line, s, NULL,
                    "a cluster name cannot contain '/' (brokers are named CLUSTER/ID)");
        return NULL;
    }
    /* [broker NAME/ID] names the cluster by name alone. */
    if (dup != NULL) {
        lk_conf_err(ld, s->line, s, NULL, "cluster '%s' is already defined at line %d (" SECT_FMT ")",
                    s->name, dup->line, SECT_ARGS(dup->section));
        return NULL;
    }
    return cl;
}

int
lk_conf_load_cluster(struct lk_loader *ld, struct lk_conf_section *s)
{
    int kafka = strcmp(s->kind, "kafka") == 0;
    /* Pulsar clients speak both */
    struct lk_cluster *cl =
        new_cluster(ld, s, kafka ? LK_PROTO_KAFKA : LK_PROTO_HTTP | LK_PROTO_PULSAR);

    if (cl == NULL)
        return -1;
    /* `filters` is taken when the chain is built, after the brokers. */
    return lk_conf_keys_load(ld, s, lk_conf_cluster_keys, kafka ? LK_IN_KAFKA : LK_IN_PULSAR, cl);
}
