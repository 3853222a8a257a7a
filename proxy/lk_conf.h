/*
 * The loaded configuration: an immutable object built once by lk_conf_load()
 * and shared read-only by every worker thread.  Connections hold a reference
 * (lk_conf_ref/lk_conf_unref) so that a later reload can swap in a new
 * generation while old exchanges finish on the old one; nothing may keep a
 * pointer into a config past the exchange that took it.
 *
 * The listener map is the heart of it: every broker's listeners (name plus
 * one address per scheme, the brokers' own `advertisedListeners` syntax, or
 * Kafka's `advertised.listeners` with its security protocol map) and the
 * sockets lookout binds, each with the virtual hosts that route to a broker
 * or to a cluster's service address.
 *
 * For a Kafka cluster (proto LK_PROTO_KAFKA) each broker has a node id, an
 * internal listener (lk_kafka_addr(b->internal): where lookout connects,
 * over TLS when its scheme is kafka+ssl) and a lookup listener
 * (lk_kafka_addr(b->lookup): what clients are given, TLS terminated when
 * kafka+ssl, `sasl` set for SASL_*); the cluster has its bootstrap
 * addresses and an optional broker.pattern for node ids the map lacks.
 */
#ifndef LK_CONF_H
#define LK_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "lk_ratelimit.h"
#include "lk_str.h"

struct lk_flt;
struct lk_kafka_secmap;
struct lk_cidr;
struct lk_zk_connect;
struct lk_addr_slot;

/* Where the brokers register in their cluster's ZooKeeper (under its chroot). */
#define LK_ZK_PULSAR_PATH "/loadbalance/brokers"
#define LK_ZK_KAFKA_PATH "/brokers/ids"


/* Address schemes a listener can carry; everything indexes by scheme.  A
 * Kafka listener has one address, of scheme kafka (PLAINTEXT and
 * SASL_PLAINTEXT) or kafka+ssl (SSL and SASL_SSL), as its security protocol
 * in listener.security.protocol.map says; SASL is the listener's `sasl`
 * flag.  The Kafka schemes are lookout's names: no URL in the config has
 * them (lk_scheme_parse does not know them), and the HTTP and Pulsar code
 * never meets them, since only Kafka clusters have such listeners. */
enum lk_scheme {
    LK_SCHEME_HTTP = 0,
    LK_SCHEME_HTTPS,
    LK_SCHEME_PULSAR,
    LK_SCHEME_PULSAR_SSL,
    LK_SCHEME_KAFKA,
    LK_SCHEME_KAFKA_SSL,
    LK_SCHEME__COUNT
};

/* Kafka's security protocols, as listener.security.protocol.map names them. */
enum lk_kafka_security {
    LK_KAFKA_PLAINTEXT = 0,
    LK_KAFKA_SSL,
    LK_KAFKA_SASL_PLAINTEXT,
    LK_KAFKA_SASL_SSL,
};

/* Which protocol module serves a bound socket. */
enum lk_proto {
    LK_PROTO_HTTP = 1u << 0,
    LK_PROTO_PULSAR = 1u << 1,
    LK_PROTO_KAFKA = 1u << 2,
};

/* scheme://host:port as written in the config. */
struct lk_url {
    enum lk_scheme scheme;
    char *host;     /* lower-cased; IPv6 literal without brackets */
    uint16_t port;  /* explicit, or the scheme's default (80, 443, 6650, 6651) */
    char *hostport; /* "host:port" as it appears in a URL ("[::1]:8080") */
    char *text;     /* "scheme://host:port"; Kafka: "NAME://host:port" as
                     * advertised.listeners writes it, or "host:port" for a
                     * bootstrap.servers entry */
};

struct lk_listener {
    char *name; /* Kafka: upper-cased, as Kafka normalises listener names */
    struct lk_url *addr[LK_SCHEME__COUNT]; /* NULL: no address of that scheme */
    int sasl; /* Kafka: SASL_PLAINTEXT or SASL_SSL (SASL frames pass through) */
};

struct lk_cluster;

struct lk_broker {
    char *name;   /* "prod/b1" */
    char *id;     /* "b1" (Kafka: the node id as text, "1") */
    int32_t node_id; /* Kafka: the node id, >= 0; -1 in a Pulsar cluster */
    char *registration; /* Kafka: the registration JSON it was read from
                         * (resolved path), NULL for advertised.listeners */
    size_t index; /* position in lk_conf.brokers */
    struct lk_cluster *cluster;
    struct lk_listener *listeners;
    size_t nlisteners;
    const struct lk_listener *internal; /* where lookout connects */
    const struct lk_listener *lookup;   /* lookupListenerName; NULL if unset */
    int line;
    int live;      /* read from the cluster's store, not from a [broker] section */
    int overrides; /* static, and the store has a registration of the same name,
                    * which this section overrides */
};

enum lk_redirects { LK_REDIRECTS_REWRITE = 0, LK_REDIRECTS_FOLLOW };
/* pulsar_routing (Pulsar binary): per-broker, clients connect to the
 * owner's lookup-listener address; service, every client connects to
 * serviceUrl and names the owner in CONNECT proxy_to_broker_url, as
 * through the Pulsar Proxy. */
enum lk_pulsar_routing { LK_PULSAR_ROUTING_PER_BROKER = 0, LK_PULSAR_ROUTING_SERVICE };
/* upstream.tls: how a broker with both an http and an https internal
 * address is reached (lk_broker_upstream). */
enum lk_upstream_tls { LK_UPSTREAM_TLS_MATCH = 0, LK_UPSTREAM_TLS_PLAIN, LK_UPSTREAM_TLS_TLS };
/* tls.verify_client: a cluster's inherit takes [lookout]'s value. */
enum lk_verify_client {
    LK_VERIFY_INHERIT,
    LK_VERIFY_OFF,
    LK_VERIFY_OPTIONAL, /* asked for; none is fine, a bad one fails the handshake */
    LK_VERIFY_ON,       /* required */
};
extern const char *const lk_verify_client_names[];
enum lk_leak_guard { LK_LEAK_OFF = 0, LK_LEAK_LOG, LK_LEAK_REWRITE, LK_LEAK_BLOCK };
/*
 * Broker health (lk_conn.h has the state, lk_health.h the active checks):
 * health.fails consecutive failures, of client connects or of checks,
 * eject a broker from service-address rotation; a connect failure backs
 * off health.backoff, doubling with each further failure up to
 * health.backoff_max, after which traffic tries the broker again; with
 * health.check on, a broker whose checks fail stays out until one passes.
 */
enum lk_health_check { LK_HEALTH_CHECK_OFF = 0, LK_HEALTH_CHECK_TCP, LK_HEALTH_CHECK_HTTP };
struct lk_health_conf {
    unsigned fails;          /* health.fails, default 1 */
    unsigned backoff_ms;     /* health.backoff, default 1s */
    unsigned backoff_max_ms; /* health.backoff_max, default 30s */
    enum lk_health_check check; /* health.check, default off */
    unsigned interval_ms;    /* health.interval, default 5s */
    unsigned timeout_ms;     /* health.timeout, default 2s */
    char *path;              /* health.path (http), default /admin/v2/brokers/ready */
};

/* unknown_api (Kafka): what happens to a request whose api key lookout does
 * not know: forwarded byte for byte, or the connection closed. */
enum lk_unknown_api { LK_UNKNOWN_API_PASS = 0, LK_UNKNOWN_API_DROP };

/*
 * broker.pattern (Kafka): the lookup address of a node id the map does not
 * know, "HOST:PORT" where HOST may hold `$(nodeId)` (the id in decimal) and
 * PORT is a number or `$(BASE+nodeId)`; at least one of them holds the id,
 * so that each node gets its own address.  A host with the id is a name,
 * never an IP literal.  lk_kafka_pattern_expand and lk_kafka_pattern_match
 * go from id to address and back.
 */
struct lk_kafka_pattern {
    char *text;        /* as written */
    char *host_prefix; /* lower-cased; the whole host when !host_has_id */
    char *host_suffix; /* after $(nodeId); "" when !host_has_id */
    int host_has_id;
    int port_has_id;
    uint16_t port;     /* the port, or BASE when port_has_id */
    enum lk_scheme scheme; /* the lookup listener's: kafka or kafka+ssl */
    int sasl;
    int line;
};

/* One [section] of the file, kept so that filters can read their own keys
 * (lk_conf_section_get) and so that unknown keys are found once everyone has
 * taken theirs. */
struct lk_conf_entry {
    char *key, *value;
    int line;
    int used;
};

struct lk_conf_section {
    char *kind; /* "lookout", "pulsar", "kafka", "broker" */
    char *name; /* "prod", "prod/b1"; NULL for [lookout] */
    const char *file;
    int line;
    struct lk_conf_entry *entries;
    size_t nentries;
};

struct lk_cluster {
    char *name;
    size_t index; /* position in lk_conf.clusters */
    unsigned proto; /* wire protocols its clients speak: HTTP|PULSAR, or KAFKA */
    char *internal_listener; /* internalListenerName; NULL: each broker's first.
                              * Kafka: inter.broker.listener.name, default PLAINTEXT */
    char *lookup_listener;   /* lookupListenerName; NULL: rewrite nothing (Kafka: set) */
    struct lk_url *web_service; /* webServiceUrl on lookout; may be NULL */
    struct lk_url *service;     /* serviceUrl on lookout; may be NULL */
    char *bind;                 /* address for name-hosted listeners, default 0.0.0.0 */
    enum lk_redirects redirects;
    enum lk_leak_guard leak_guard;
    unsigned follow_max_hops;      /* follow.max_hops, default 5 */
    size_t follow_replay_bytes;    /* follow.replay_bytes, default 5m */
    size_t max_frame_bytes;        /* binary protocols */
    unsigned idle_ms;              /* Kafka: timeout.idle, both sides, default 10m */
    int forwarded_headers;         /* add X-Forwarded-For/-Proto/-Host; default on */
    int forwarded_client_cert;     /* add X-Forwarded-Client-Cert; default off */
    enum lk_upstream_tls upstream_tls; /* default match */
    /* tls.verify_client and tls.client_ca of clients reaching this
     * cluster over TLS (SNI picks it); inherit and NULL: [lookout]'s */
    int verify_client; /* enum lk_verify_client */
    char *client_ca;   /* resolved path */
    enum lk_pulsar_routing pulsar_routing; /* default per-broker */
    /* client_listeners (Pulsar): the listeners besides lookupListenerName
     * that a client may name (CONTRACT §3; lk_cluster_client_listener),
     * as written; none by default, and never the internal one unless
     * written here. */
    char **client_listeners;
    size_t nclient_listeners;
    int client_listeners_line;
    /* Kafka: the bootstrap.servers entry points on lookout, each of the
     * lookup listener's scheme (the same on every broker); broker.pattern,
     * NULL if unset; unknown_api. */
    struct lk_kafka_secmap *secmap; /* listener.security.protocol.map, or Kafka's default */
    size_t nsecmap;
    struct lk_url *bootstrap;
    size_t nbootstrap;
    int bootstrap_sasl;
    struct lk_kafka_pattern *pattern;
    enum lk_unknown_api unknown_api;
    /* proxy_protocol: the PROXY protocol versions its binds take, a mask of
     * LK_PP_V1 and LK_PP_V2 (lk_proxyproto.h); 0: off. */
    int proxy_protocol;
    /* upstream.proxy_protocol: the PROXY protocol header lookout sends
     * first on each connection to a broker, LK_PP_V1 or LK_PP_V2; 0: off. */
    int upstream_proxy_protocol;
    /* limit.requests (requests 0: off), limit.burst and limit.exempt: HTTP
     * requests per client address (lk_ratelimit.h); each key not set here
     * is [lookout]'s, and burst is requests unless set. */
    struct lk_rate limit;
    struct lk_cidr *limit_exempt;
    size_t nlimit_exempt;
    unsigned limit_zone; /* its buckets' (a hash of its name: a reload keeps them) */
    /* internal_networks: where lookout may dial; none set: not checked
     * for static brokers, and no registration is accepted. */
    struct lk_cidr *internal_networks;
    size_t ninternal_networks;
    /* metadataStoreUrl / zookeeperServers / zookeeper.connect; NULL: the
     * map is static. */
    struct lk_zk_connect *zk;
    const char *zk_path; /* what is watched there: /loadbalance/brokers or /brokers/ids */
    int zk_line;         /* the store key's line */
    unsigned zk_session_timeout_ms; /* metadataStoreSessionTimeoutMillis,
                                     * zookeeper.session.timeout.ms; 0: lk_zk's default */
    int zk_read;         /* the map holds what the store last delivered (a
                          * snapshot was given to lk_conf_load_live) */
    size_t nregistrations; /* children in that snapshot */
    struct lk_live_reject *rejects; /* registrations refused, in znode order */
    size_t nrejects;
    struct lk_broker **brokers; /* static ones in file order, then live ones in
                                 * znode order; Kafka: node ids unique */
    /* Every broker address of the cluster by host:port (lk_cluster_find_addr):
     * an open-addressing table, cap a power of two, filled while loading. */
    struct lk_addr_slot *addr_ix;
    size_t addr_cap, addr_n;
    size_t nbrokers;
    struct lk_health_conf health;
    struct lk_flt *filters; /* the chain, in `filters =` order */
    size_t nfilters;
    void (*filters_free)(struct lk_cluster *cl); /* set with the chain: frees it */
    const struct lk_conf *conf; /* the config it is one of (its sibling clusters,
                                 * which the leak guard reads too); not a reference */
    struct lk_conf_section *section;
    int line;
};

/* A name clients use to reach one broker (or a cluster's service address)
 * on a bound socket. */
struct lk_vhost {
    char *host;     /* lower-cased, as in the listener address */
    uint16_t port;
    enum lk_scheme scheme;
    const struct lk_cluster *cluster;
    const struct lk_broker *broker; /* NULL: the service address, any broker
                                     * (Kafka: bootstrap.servers, or pattern) */
    /* Kafka: a broker.pattern with $(nodeId) in the host serves node ids
     * the map lacks on this socket (host is the pattern's text); broker is
     * NULL.  lk_kafka_pattern_match finds the node from the SNI. */
    const struct lk_kafka_pattern *pattern;
    int line;
};

/* One socket lookout listens on. */
struct lk_bind {
    char *text; /* "127.0.0.1:8443", "[::1]:8443" */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    unsigned proto; /* one LK_PROTO_* */
    int tls;        /* terminate TLS here */
    unsigned proxy_protocol; /* its clusters' proxy_protocol: LK_PP_* mask, 0: off */
    /* Several vhosts: routed by SNI (or the HTTP Host); plaintext Kafka and
     * Pulsar binds have exactly one. */
    struct lk_vhost *vhosts;
    size_t nvhosts;
};

struct lk_cert {
    char *cert_file, *key_file; /* absolute or relative to the config's directory, resolved */
    int line;
};

/* A tls.session_ticket_key file: 80 bytes (or 48), nginx's format. */
struct lk_ticket_key_file {
    char *file; /* resolved */
    int line;
};

enum lk_log_format { LK_LOG_TEXT = 0, LK_LOG_JSON };
enum lk_log_access { LK_ACCESS_STDERR = 0, LK_ACCESS_OFF, LK_ACCESS_FILE };

struct lk_conf {
    char *file; /* path as given */
    char *dir;  /* directory of the file, for relative paths */
    int workers; /* resolved: "auto" = number of cores */
    int io_uring; /* io_uring, default on: plaintext reads and writes through it when built in */
    char *admin; /* admin listener address text; NULL if absent */
    /* admin.allow (default 127.0.0.0/8 and ::1), admin.healthz_allow (none
     * by default: /healthz only, no token) and admin.token_file's bearer
     * token (NULL: none asked), read at each load (lk_admin.c) */
    struct lk_cidr *admin_allow, *admin_healthz_allow;
    size_t nadmin_allow, nadmin_healthz_allow;
    /* proxy_protocol.trusted: the sources a PROXY header is taken from. */
    struct lk_cidr *proxy_protocol_trusted;
    size_t nproxy_protocol_trusted;
    /* limit.requests, limit.burst (0: unset) and limit.exempt as [lookout]
     * sets them: what the clusters inherit, key by key. */
    struct lk_rate limit;
    struct lk_cidr *limit_exempt;
    size_t nlimit_exempt;
    char *admin_token_file; /* resolved */
    char *admin_token;
    size_t admin_token_len;
    struct lk_cert *certs;
    size_t ncerts;
    char *upstream_ca;  /* resolved path; NULL: system default store */
    int upstream_verify; /* 1 unless `tls.upstream_verify = off` */
    /* Client certificates (lk_tls.c): tls.verify_client, default off, and
     * the CA file and CRL file they are checked against (resolved paths;
     * NULL: none).  A [cluster] may set its own. */
    int verify_client; /* enum lk_verify_client, never inherit here */
    char *client_ca;
    char *client_crl;
    int session_cache;   /* tls.session_cache, default on */
    int session_tickets; /* tls.session_tickets, default on */
    /* tls.session_ticket_key, in order: the first encrypts */
    struct lk_ticket_key_file *ticket_keys;
    size_t nticket_keys;
    unsigned session_lifetime_s;       /* tls.session_ticket_lifetime, default 5m */
    unsigned timeout_connect_ms;       /* default 5s */
    unsigned timeout_response_ms;      /* default 60s */
    unsigned timeout_client_header_ms; /* default 10s */
    unsigned timeout_idle_ms;          /* default 60s */
    unsigned drain_timeout_ms;         /* SIGTERM: exchanges may finish this long, default 30s */
    size_t max_header_bytes;           /* default 32k */
    size_t max_buffer_bytes;           /* default 1m */
    size_t max_held_bytes;             /* per worker: frames held to rewrite (lk_hold.h), default 64m */
    unsigned upstream_idle_max;        /* `upstream.idle_pool`: idle connections kept per broker per worker, default 64 */
    int listen_backlog;                /* `listen.backlog`: listen(2) backlog of each socket, default 4096 */
    int defer_accept;                  /* `listen.defer_accept`: TCP_DEFER_ACCEPT on each socket, default on */
    /* Connection limits (lk_conn_accept, lk_limit.h, lk_pair.c): client
     * connections per worker and per client address (an IPv6 /64) across
     * the workers, 0: no cap (the defaults); a Kafka or Pulsar client's
     * first frame must come within timeout.first_frame (0: off), default 10s */
    unsigned max_connections, max_connections_per_client, timeout_first_frame_ms;
    /* max_connection_age (lk_age.h): 0, off (the default); its jitter in
     * percent either way, default 10; its grace, default 30s */
    unsigned max_connection_age_ms, max_connection_age_jitter, max_connection_age_grace_ms;
    int log_level;                     /* `log_level = error|warn|info|debug`, default info */
    enum lk_log_format log_format;     /* `log.format`: the access log's lines, default text */
    enum lk_log_access log_access;     /* `log.access = stderr|off|PATH`, default stderr */
    char *log_access_file;             /* LK_ACCESS_FILE: the path, resolved */
    int log_kafka_all;                 /* `log.kafka = all`: Produce and Fetch too (default control) */
    size_t log_buffer;                 /* `log.buffer`: a worker's access lines held, 0 to 1m, default 64k (0: none) */

    struct lk_cluster **clusters;
    size_t nclusters;
    struct lk_broker **brokers;
    size_t nbrokers;
    struct lk_bind **binds;
    size_t nbinds;

    struct lk_conf_section *sections;
    size_t nsections;
    /* What the loader found wrong but not fatal, "file:line: ..." each
     * (lk_conf_warn), said at start, by --check and by a SIGHUP reload
     * (lk_conf_warnings_log), not by a store's rebuild of the map. */
    char **warnings;
    size_t nwarnings;
    int refs; /* atomic */
};

/* A registration that the map does not take, and why (logged and counted
 * by the caller, shown by --check --live). */
struct lk_live_reject {
    char *znode;
    char *reason;
};

/* One cluster's store as it last delivered its children (lk_meta.h), for
 * lk_conf_load_live; skip (NULL, or one flag per node) leaves nodes out. */
struct lk_meta_node;
struct lk_live_set {
    const char *cluster;
    const struct lk_meta_node *nodes;
    size_t n;
    const unsigned char *skip;
};

/* The file's bytes (malloc'd, *len of them; a reload keeps them to rebuild
 * the map when a store changes), or NULL with "path: why" in err
 * (lk_conf_load.c, as lk_conf_ref and lk_conf_unref). */
char *lk_conf_read(const char *path, size_t *len, char *err, size_t errlen);
/* Adds a refused registration to cluster cl of a conf not yet shared. */
void lk_conf_reject_add(struct lk_cluster *cl, const char *znode, const char *reason);
struct lk_conf *lk_conf_ref(struct lk_conf *conf);
void lk_conf_unref(struct lk_conf *conf);

/* Logs conf's warnings at warn, each once (lk_conf_load.c). */
void lk_conf_warnings_log(const struct lk_conf *conf);

/* Prints the resolved listener map, as `lookout --check` shows it
 * (lk_conf_dump.c). */
void lk_conf_dump(const struct lk_conf *conf, FILE *out);
/* The same as a malloc'd string. */
char *lk_conf_dump_text(const struct lk_conf *conf);

/* The map (lk_conf.c) ------------------------------------------------------- */

/* The cluster called name, or NULL; the same for name[0..len). */
struct lk_cluster *lk_conf_cluster(const struct lk_conf *conf, const char *name);
struct lk_cluster *lk_conf_find_cluster(const struct lk_conf *c, const char *name, size_t len);
static inline int
lk_cluster_is_kafka(const struct lk_cluster *cl)
{
    return cl->proto == LK_PROTO_KAFKA;
}
/* The broker of cl other than b that has one of b's addresses (*clash
 * gets that address), or NULL; with NULL, every address of b is added to
 * cl's index.  The loader's, as it adds each broker. */
const struct lk_broker *lk_cluster_addr_claim(struct lk_cluster *cl, const struct lk_broker *b,
                                              const struct lk_url **clash);
/* A socket address for ip (canonical text, of family) and port, without
 * vhosts; NULL if getaddrinfo will not make one. */
struct lk_bind *lk_bind_new(const char *ip, int family, uint16_t port, unsigned proto, int tls);

/* Returns the value of key in s and marks it used, or NULL (lk_conf_ini.c); *line (if line
 * is not NULL) gets the entry's line, or the section's line when absent. */
const char *lk_conf_section_get(struct lk_conf_section *s, const char *key, int *line);


/* URLs and listeners (lk_url.c) ------------------------------------------- */

/* Formats fmt into err (when err is not NULL and errlen not 0) and returns
 * -1: the parsers' one way to fail with a message. */
int lk_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parses "scheme://host[:port][/]" for the schemes above.  0, or -1 with a
 * message.  The strings in out are malloc'd; lk_url_free releases them. */
int lk_url_parse(const char *s, size_t len, struct lk_url *out, char *err, size_t errlen);
void lk_url_free(struct lk_url *u);
const char *lk_scheme_name(enum lk_scheme scheme);
int lk_scheme_is_tls(enum lk_scheme scheme);
uint16_t lk_scheme_default_port(enum lk_scheme scheme);
/* The other scheme of the same family (http <-> https, pulsar <-> pulsar+ssl). */
enum lk_scheme lk_scheme_sibling(enum lk_scheme scheme);

/*
 * Picks the address of listener l in the family of `scheme` (http/https or
 * pulsar/pulsar+ssl): over TLS the TLS scheme first, then the other; in
 * plaintext the reverse.  NULL if l has neither.
 */
const struct lk_url *lk_listener_pick(const struct lk_listener *l, enum lk_scheme scheme,
                                      int prefer_tls);

/*
 * The internal address lookout connects to for a client of broker b that
 * reached lookout over TLS (client_tls) or not, in the family of scheme,
 * as the cluster's upstream.tls says: match prefers the client's TLS-ness,
 * plain prefers http, tls prefers https; each falls back to the other
 * address when the broker has only one.  NULL if it has neither.
 */
const struct lk_url *lk_broker_upstream(const struct lk_broker *b, enum lk_scheme scheme,
                                        int client_tls);

/* Parses a URL scheme name ("http", "pulsar+ssl"), -1 if unknown (the
 * Kafka schemes are never parsed: no config URL has them). */
int lk_scheme_parse(struct lk_str name);

/*
 * Parses the brokers' advertisedListeners value:
 * "name:scheme://host:port,name:scheme://host:port,...".  Returns the number
 * of listeners (malloc'd array in *out) or -1 with a message: bad URL, a
 * scheme twice in one listener, the same host:port in two listeners.
 */
int lk_listeners_parse(const char *s, struct lk_listener **out, char *err, size_t errlen);
void lk_listeners_free(struct lk_listener *l, size_t n);
/* Adds address url ("scheme://host:port") to listener `name` of the n in
 * *ls, appending the listener if it is new, under the same rules (the
 * registrations' advertisedListeners map, which is not a list).  0, or -1
 * with a message; *ls and *n are unchanged then. */
int lk_listener_add(struct lk_listener **ls, size_t *n, struct lk_str name, struct lk_str url,
                    char *err, size_t errlen);

const struct lk_listener *lk_broker_listener(const struct lk_broker *b, const char *name);
/*
 * The listener of b that a client who selected the listener `name` is
 * given: b's of that name, or when b lacks it (a client_listeners name
 * only some brokers have, or another cluster's broker) its cluster's
 * lookupListenerName, b->lookup, whose addresses reach lookout, never an
 * internal one.  NULL when name is NULL or b has neither.
 */
const struct lk_listener *lk_broker_client_listener(const struct lk_broker *b, const char *name);
/* The map's own spelling of a listener name that some broker of cl has
 * (what a client names: PIP-338's listenerName), or NULL. */
const char *lk_cluster_listener_name(const struct lk_cluster *cl, struct lk_str name);
/*
 * The listener a client of cl may choose by naming it (CONTRACT §3): the
 * cluster's lookupListenerName, whose addresses are lookout's own, or one
 * the operator lists in client_listeners.  Its config-lifetime spelling,
 * or NULL: any other name, the internal listener's included, is not the
 * client's to choose (the caller falls back to the lookup listener).
 */
const char *lk_cluster_client_listener(const struct lk_cluster *cl, struct lk_str name);

/*
 * Finds the broker of cluster cl that has host:port as the address of any of
 * its listeners (host compared case-insensitively).  Sets *scheme to the
 * scheme of the matching address: the first in listener and scheme order
 * when the broker gives one host:port two schemes, as Pulsar allows.  NULL
 * if none.
 */
const struct lk_broker *lk_cluster_find_addr(const struct lk_cluster *cl, struct lk_str host,
                                             uint16_t port, enum lk_scheme *scheme);

/* The broker of cl whose internal listener (where lookout connects) has
 * host:port as an address, compared as lk_cluster_find_addr does; NULL if
 * none. */
const struct lk_broker *lk_cluster_find_internal(const struct lk_cluster *cl, struct lk_str host,
                                                 uint16_t port);

/* Kafka ---------------------------------------------------------------------------- */

/* "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL" (any case) -> the enum, -1
 * if none.  The name of each, and its scheme and SASL flag. */
int lk_kafka_security_parse(struct lk_str name);
const char *lk_kafka_security_name(enum lk_kafka_security sec);
enum lk_scheme lk_kafka_security_scheme(enum lk_kafka_security sec);
int lk_kafka_security_sasl(enum lk_kafka_security sec);
/* The security protocol of a Kafka listener, from its scheme and flag. */
enum lk_kafka_security lk_kafka_listener_security(const struct lk_listener *l);

/* A Kafka listener name: letters, digits, '_', '-' and '.' (0, or -1 with a
 * message); and a malloc'd copy upper-cased, as Kafka's ListenerName
 * normalises it. */
int lk_kafka_name_check(struct lk_str name, char *err, size_t errlen);
char *lk_kafka_name_dup(struct lk_str name);

/* One entry of listener.security.protocol.map. */
struct lk_kafka_secmap {
    char *name; /* upper-cased */
    enum lk_kafka_security sec;
};

/* Kafka's default map: each protocol is a listener of its own name. */
extern const char lk_kafka_default_secmap[];

/*
 * Parses listener.security.protocol.map, "NAME:PROTOCOL,NAME:PROTOCOL,...".
 * Names are case-insensitive (upper-cased, as Kafka's ListenerName does),
 * empty items are skipped, a name twice is an error.  Returns the number of
 * entries (malloc'd array in *out, lk_kafka_secmap_free) or -1 with a message.
 */
int lk_kafka_secmap_parse(const char *s, struct lk_kafka_secmap **out, char *err, size_t errlen);
void lk_kafka_secmap_free(struct lk_kafka_secmap *m, size_t n);
/* The entry for name (case-insensitive), or NULL. */
const struct lk_kafka_secmap *lk_kafka_secmap_find(const struct lk_kafka_secmap *m, size_t n,
                                                   struct lk_str name);

/*
 * Parses a Kafka "host:port": a name, an IPv4 literal, or an IPv6 literal
 * with or without brackets (the last ':' splits off the port, as Kafka's
 * parser does).  The port is required, 1-65535; an empty host (Kafka's
 * "the default interface") is refused, since an advertised address must
 * name a host.  text gets "host:port"; the caller may replace it.
 */
int lk_kafka_addr_parse(const char *s, size_t len, enum lk_scheme scheme, struct lk_url *out,
                        char *err, size_t errlen);

/*
 * Adds one "NAME://host:port" item (an advertised.listeners entry, or an
 * `endpoints` entry of a registration JSON) to the n listeners in *ls; the
 * name must be in map (its protocol gives the scheme and SASL flag; mapname
 * names the map in messages) and not already in *ls, and its host:port in
 * no other listener.  0, or -1 with a message.
 */
int lk_kafka_listener_add(struct lk_listener **ls, size_t *n, struct lk_str item,
                          const struct lk_kafka_secmap *map, size_t nmap, const char *mapname,
                          char *err, size_t errlen);
/* Parses advertised.listeners, "NAME://host:port,NAME://[::1]:9093,...":
 * the number of listeners (malloc'd array in *out) or -1 with a message. */
int lk_kafka_listeners_parse(const char *s, const struct lk_kafka_secmap *map, size_t nmap,
                             const char *mapname, struct lk_listener **out, char *err,
                             size_t errlen);

/* The one address of a Kafka listener: the kafka or kafka+ssl one. */
const struct lk_url *lk_kafka_addr(const struct lk_listener *l);

/* Parses broker.pattern (see struct lk_kafka_pattern) into *p, whose
 * scheme, sasl and line the caller sets.  0, or -1 with a message. */
int lk_kafka_pattern_parse(const char *s, struct lk_kafka_pattern *p, char *err, size_t errlen);
void lk_kafka_pattern_free(struct lk_kafka_pattern *p);
/*
 * Writes node_id's host under pattern p into host (NUL-terminated) and its
 * port into *port.  0, or -1 when the node has no address under it: a
 * negative id, BASE + id over 65535, or a host over 253 bytes or hostlen.
 */
int lk_kafka_pattern_expand(const struct lk_kafka_pattern *p, int32_t node_id, char *host,
                            size_t hostlen, uint16_t *port);
/*
 * The node id whose address under p is host:port (host compared
 * case-insensitively, a trailing dot ignored; port 0 matches any port when
 * the port holds no id, for an SNI without a port), in *node_id.  1 if
 * host:port is such an address, 0 if not.
 */
int lk_kafka_pattern_match(const struct lk_kafka_pattern *p, struct lk_str host, uint16_t port,
                           int32_t *node_id);

/* The broker of Kafka cluster cl with that node id, or NULL. */
const struct lk_broker *lk_cluster_find_node(const struct lk_cluster *cl, int32_t node_id);

/*
 * A broker of Kafka cluster cl that the map lacks, learned at run time: node
 * node_id at host:port (its inter-broker listener's address, as the brokers
 * name it), reached with scheme (kafka or kafka+ssl).  It has that one
 * listener, which is its internal one, and no lookup listener: its clients
 * get the address broker.pattern gives it.  index is what the runtime's
 * per-broker tables use for it.  NULL with a message when host:port is not
 * an address.  lk_broker_free releases it.
 */
struct lk_broker *lk_kafka_node_new(const struct lk_cluster *cl, int32_t node_id,
                                    struct lk_str host, int32_t port, enum lk_scheme scheme,
                                    size_t index, char *err, size_t errlen);
void lk_broker_free(struct lk_broker *b);
/*
 * The socket for node node_id under cl's broker.pattern when that gives
 * each node a port ($(BASE+nodeId)): on the pattern's host when it is an IP
 * literal, else on the cluster's bind address, with one vhost (the node's
 * address under the pattern; broker NULL, pattern set).  NULL with a
 * message when the node has no port under the pattern.  lk_bind_free
 * releases it.
 */
struct lk_bind *lk_kafka_pattern_bind(const struct lk_cluster *cl, int32_t node_id, char *err,
                                      size_t errlen);
void lk_bind_free(struct lk_bind *b);

#endif
