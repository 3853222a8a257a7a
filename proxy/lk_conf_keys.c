/*
 * The keys of [lookout], [pulsar NAME] and [kafka NAME]: each section's
 * settings parsed into struct lk_conf and struct lk_cluster, the defaults
 * of both, and the unknown-key check, which runs once everyone (the
 * filters too) has taken their keys.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lk_conf.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"
#include "lk_conf_value.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_registry.h"

#define DEFAULT_TIMEOUT_CONNECT_MS 5000u
#define DEFAULT_TIMEOUT_RESPONSE_MS 60000u
#define DEFAULT_TIMEOUT_CLIENT_HEADER_MS 10000u
#define DEFAULT_TIMEOUT_IDLE_MS 60000u
#define DEFAULT_DRAIN_TIMEOUT_MS 30000u
#define DEFAULT_MAX_HEADER_BYTES (32u * 1024)
#define DEFAULT_MAX_BUFFER_BYTES (1024u * 1024)
/* Per worker: room for a few hundred Metadata or Produce answers at once,
 * and far less than the frames themselves may be (Kafka's max_frame_bytes
 * is 100m): what is held past it waits (lk_hold.h). */
#define DEFAULT_MAX_HELD_BYTES (64u * 1024 * 1024)
#define DEFAULT_UPSTREAM_IDLE_MAX 64u
/* The kernel caps it at net.core.somaxconn (4096 since Linux 5.4). */
#define DEFAULT_LISTEN_BACKLOG 4096
#define DEFAULT_FOLLOW_MAX_HOPS 5u
/* nginx's ssl_session_timeout and HAProxy's tune.ssl.lifetime */
#define DEFAULT_SESSION_LIFETIME_S 300u
/* RFC 8446 4.6.1: a ticket lifetime is at most seven days. */
#define MAX_SESSION_LIFETIME_S (7u * 24 * 3600)
/* Decrypt-only keys are for rotation, not for hoarding. */
#define MAX_TICKET_KEY_FILES 16u
#define DEFAULT_FOLLOW_REPLAY_BYTES (5u * 1024 * 1024)
/* Pulsar's maxMessageSize is 5 MiB; a frame also carries its command and
 * metadata, hence the headroom. */
#define DEFAULT_PULSAR_MAX_FRAME_BYTES (5u * 1024 * 1024 + 64 * 1024)
/* Kafka's socket.request.max.bytes default, 100 MiB. */
#define DEFAULT_KAFKA_MAX_FRAME_BYTES (100u * 1024 * 1024)
/* Kafka's own connections.max.idle.ms: brokers close idle connections
 * after 10 minutes, and clients after 9; lookout never closes first. */
#define DEFAULT_KAFKA_IDLE_MS (10u * 60 * 1000)
/* Kafka's inter.broker.listener.name when unset: the listener named after
 * security.inter.broker.protocol, whose default is PLAINTEXT. */
#define DEFAULT_KAFKA_INTERNAL "PLAINTEXT"

/* Broker health, either kind of cluster (struct lk_health_conf). */
#define DEFAULT_HEALTH_BACKOFF_MS 1000u
#define DEFAULT_HEALTH_BACKOFF_MAX_MS 30000u
#define DEFAULT_TIMEOUT_FIRST_FRAME_MS 10000u
#define DEFAULT_HEALTH_INTERVAL_MS 5000u
#define DEFAULT_HEALTH_TIMEOUT_MS 2000u
/* Pulsar's readiness endpoint: 200 "ok" once the broker serves; what
 * Kubernetes readiness probes of Pulsar brokers ask. */
#define DEFAULT_HEALTH_PATH "/admin/v2/brokers/ready"

/* The keys each section kind knows, for "unknown key" hints. */
/* clang-format off */
static const char *const lookout_keys[] = {
    "admin",           "workers",          "log_level",        "tls.certificate",
    "tls.key",         "tls.upstream_ca",  "tls.upstream_verify", "timeout.connect",
    "timeout.response", "timeout.client_header", "timeout.idle", "max_header_bytes",
    "max_buffer_bytes", "max_held_bytes", "upstream.idle_pool", "listen.backlog", "tls.session_cache",
    "tls.session_tickets", "tls.session_ticket_key", "tls.session_ticket_lifetime", "drain_timeout",
    "log.format",      "log.access",       "log.kafka",
    "admin.allow",     "admin.healthz_allow", "admin.token_file",
    "max_connections", "max_connections_per_client", "timeout.first_frame", NULL};
static const char *const pulsar_keys[] = {
    "internalListenerName", "lookupListenerName", "webServiceUrl", "serviceUrl",
    "bind",                 "redirects",          "leak_guard",    "follow.max_hops",
    "follow.replay_bytes",  "max_frame_bytes",    "filters",       "forwarded_headers",
    "upstream.tls",         "pulsar_routing",     "health.fails",  "health.backoff",
    "health.backoff_max",   "health.check",       "health.interval", "health.timeout",
    "health.path",          "internal_networks",  "metadataStoreUrl", "zookeeperServers",
    "metadataStoreSessionTimeoutMillis", "zooKeeperSessionTimeoutMillis", "client_listeners", NULL};
static const char *const kafka_keys[] = {
    "inter.broker.listener.name", "lookupListenerName", "listener.security.protocol.map",
    "bootstrap.servers",          "bind",               "max_frame_bytes",
    "broker.pattern",             "unknown_api",        "filters",
    "leak_guard",
    "timeout.idle",               "health.fails",       "health.backoff",
    "health.backoff_max",         "health.check",       "health.interval",
    "health.timeout",             "internal_networks",  "zookeeper.connect",
    "zookeeper.session.timeout.ms", NULL};
static const char *const broker_keys[] = {"advertisedListeners", NULL};
static const char *const kafka_broker_keys[] = {"advertised.listeners", "registration", NULL};
/* clang-format on */

const char *const lk_redirects_names[] = {"rewrite", "follow", NULL};
const char *const lk_pulsar_routing_names[] = {"per-broker", "service", NULL};
const char *const lk_leak_guard_names[] = {"off", "log", "rewrite", "block", NULL};
const char *const lk_upstream_tls_names[] = {"match", "plain", "tls", NULL};
const char *const lk_unknown_api_names[] = {"pass", "drop", NULL};
const char *const lk_health_check_names[] = {"off", "tcp", "http", NULL};

/* [lookout] ------------------------------------------------------------------- */

static int
duration_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, unsigned *ms)
{
    if (lk_parse_duration(e->value, ms) != 0 || *ms == 0)
        return LK_ENTRY_ERR(
            ld, s, e, "'%s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)", e->value);
    return 0;
}

static int
onoff_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, int *on)
{
    if (strcmp(e->value, "on") == 0)
        *on = 1;
    else if (strcmp(e->value, "off") == 0)
        *on = 0;
    else
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not on or off", e->value);
    return 0;
}

static int
size_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, size_t min,
         size_t *bytes)
{
    if (lk_parse_size(e->value, bytes) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a size (expected e.g. 512, 32k or 5m)", e->value);
    if (*bytes < min)
        return LK_ENTRY_ERR(ld, s, e, "%s is below the minimum of %zu bytes", e->value, min);
    return 0;
}

/* admin.allow, admin.healthz_allow, admin.token_file (lk_admin.c) ----------- */

/* Who may ask the admin listener when admin.allow is not set: this host. */
#define DEFAULT_ADMIN_ALLOW "127.0.0.0/8, ::1"
/* A bearer token file's largest size: a token is a line, not a document. */
#define MAX_ADMIN_TOKEN_BYTES 4096

/* Reads the bearer token of admin.token_file: one line of RFC 6750 b64token
 * characters, trailing whitespace (the newline an editor adds) ignored. */
static int
admin_token_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e)
{
    struct lk_conf *c = ld->conf;
    char buf[MAX_ADMIN_TOKEN_BYTES + 1];
    struct stat st;
    ssize_t n = -1;
    int fd;

    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty path");
    free(c->admin_token_file);
    c->admin_token_file = lk_conf_path(c, e->value);
    /* non-blocking, and a regular file only: a FIFO must not hang a reload */
    fd = open(c->admin_token_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return LK_ENTRY_ERR(ld, s, e, "%s: %s", c->admin_token_file, strerror(errno));
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n < 0)
        return LK_ENTRY_ERR(ld, s, e, "%s: not a readable regular file", c->admin_token_file);
    if (n > MAX_ADMIN_TOKEN_BYTES)
        return LK_ENTRY_ERR(ld, s, e, "%s: over %d bytes", c->admin_token_file, MAX_ADMIN_TOKEN_BYTES);
    while (n > 0 && (lk_conf_is_ws(buf[n - 1]) || buf[n - 1] == '\n'))
        n--;
    if (n == 0)
        return LK_ENTRY_ERR(ld, s, e, "%s is empty: it must hold the bearer token",
                         c->admin_token_file);
    /* b64token (RFC 6750 §2.1): what an Authorization: Bearer line can
     * carry as it stands */
    ssize_t body = 0, end;
    while (body < n &&
           ((buf[body] >= 'a' && buf[body] <= 'z') || (buf[body] >= 'A' && buf[body] <= 'Z') ||
            (buf[body] >= '0' && buf[body] <= '9') ||
            (buf[body] != '\0' && strchr("-._~+/", buf[body]) != NULL)))
        body++;
    for (end = body; end < n && buf[end] == '='; end++)
        ;
    if (body == 0 || end != n)
        return LK_ENTRY_ERR(ld, s, e,
                         "%s: not a bearer token (one line of letters, digits and -._~+/, "
                         "then any '=')",
                         c->admin_token_file);
    free(c->admin_token);
    c->admin_token = lk_xmalloc((size_t)n + 1);
    memcpy(c->admin_token, buf, (size_t)n);
    c->admin_token[n] = '\0';
    c->admin_token_len = (size_t)n;
    return 0;
}

/* admin.allow or admin.healthz_allow: CIDRs, as internal_networks are. */
static int
admin_cidrs_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                struct lk_cidr **nets, size_t *n)
{
    char msg[256];
    int r = lk_cidrs_parse(e->value, nets, msg, sizeof(msg));
    if (r < 0)
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    *n = (size_t)r;
    return 0;
}

int
lk_conf_load_lookout(struct lk_loader *ld, struct lk_conf_section *s)
{
    struct lk_conf *c = ld->conf;
    struct lk_cert *pending = NULL; /* a tls.certificate still waiting for its key */
    unsigned long n;

    /* In file order, because tls.certificate and tls.key pair up by order. */
    for (size_t i = 0; i < s->nentries; i++) {
        struct lk_conf_entry *e = &s->entries[i];
        const char *k = e->key, *v = e->value;

        if (strcmp(k, "admin.allow") == 0) {
            free(c->admin_allow);
            if (admin_cidrs_key(ld, s, e, &c->admin_allow, &c->nadmin_allow) != 0)
                return -1;
        } else if (strcmp(k, "admin.healthz_allow") == 0) {
            free(c->admin_healthz_allow);
            if (admin_cidrs_key(ld, s, e, &c->admin_healthz_allow, &c->nadmin_healthz_allow) != 0)
                return -1;
        } else if (strcmp(k, "admin.token_file") == 0) {
            if (admin_token_key(ld, s, e) != 0)
                return -1;
        } else if (strcmp(k, "admin") == 0) {
            char ip[INET6_ADDRSTRLEN];
            int family;
            uint16_t port;

            if (lk_parse_ip_port(v, ip, sizeof(ip), &family, &port) != 0)
                return LK_ENTRY_ERR(ld, s, e,
                                 "'%s' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)", v);
            c->admin = lk_xstrdup(v);
        } else if (strcmp(k, "workers") == 0) {
            if (strcmp(v, "auto") == 0) {
                long cores = sysconf(_SC_NPROCESSORS_ONLN);
                c->workers = cores >= 1 ? (int)(cores > 1024 ? 1024 : cores) : 1;
            } else if (lk_parse_uint(v, 1024, &n) == 0 && n >= 1) {
                c->workers = (int)n;
            } else {
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not 'auto' or a number from 1 to 1024", v);
            }
        } else if (strcmp(k, "log_level") == 0) {
            if ((c->log_level = lk_log_level_parse(v)) < 0)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not error, warn, info or debug", v);
        } else if (strcmp(k, "log.format") == 0) {
            static const char *const names[] = {"text", "json", NULL};
            int f = lk_parse_enum(v, names);
            if (f < 0)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not text or json", v);
            c->log_format = f == 1 ? LK_LOG_JSON : LK_LOG_TEXT;
        } else if (strcmp(k, "log.access") == 0) {
            if (v[0] == '\0')
                return LK_ENTRY_ERR(ld, s, e, "empty value: stderr, off, or a file's path");
            free(c->log_access_file);
            c->log_access_file = NULL;
            if (strcmp(v, "stderr") == 0) {
                c->log_access = LK_ACCESS_STDERR;
            } else if (strcmp(v, "off") == 0) {
                c->log_access = LK_ACCESS_OFF;
            } else {
                c->log_access = LK_ACCESS_FILE;
                c->log_access_file = lk_conf_path(c, v);
            }
        } else if (strcmp(k, "log.kafka") == 0) {
            static const char *const names[] = {"control", "all", NULL};
            if ((c->log_kafka_all = lk_parse_enum(v, names)) < 0)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not control or all", v);
        } else if (strcmp(k, "tls.certificate") == 0) {
            if (pending != NULL)
                return lk_conf_err(ld, pending->line, s, "tls.certificate",
                              "no tls.key follows this certificate (the next one is at line %d)",
                              e->line);
            if (v[0] == '\0')
                return LK_ENTRY_ERR(ld, s, e, "empty path");
            c->certs = lk_xrealloc(c->certs, (c->ncerts + 1) * sizeof(*c->certs));
            pending = &c->certs[c->ncerts++];
            pending->cert_file = lk_conf_path(c, v);
            pending->key_file = NULL;
            pending->line = e->line;
        } else if (strcmp(k, "tls.key") == 0) {
            if (pending == NULL && c->ncerts == 0)
                return LK_ENTRY_ERR(ld, s, e, "no tls.certificate before this key");
            if (pending == NULL)
                return LK_ENTRY_ERR(ld, s, e,
                                 "the tls.certificate before this key (line %d) already has one",
                                 c->certs[c->ncerts - 1].line);
            if (v[0] == '\0')
                return LK_ENTRY_ERR(ld, s, e, "empty path");
            pending->key_file = lk_conf_path(c, v);
            pending = NULL;
        } else if (strcmp(k, "tls.upstream_ca") == 0) {
            if (v[0] == '\0')
                return LK_ENTRY_ERR(ld, s, e, "empty path");
            c->upstream_ca = lk_conf_path(c, v);
        } else if (strcmp(k, "tls.upstream_verify") == 0) {
            if (onoff_key(ld, s, e, &c->upstream_verify) != 0)
                return -1;
        } else if (strcmp(k, "tls.session_cache") == 0) {
            if (onoff_key(ld, s, e, &c->session_cache) != 0)
                return -1;
        } else if (strcmp(k, "tls.session_tickets") == 0) {
            if (onoff_key(ld, s, e, &c->session_tickets) != 0)
                return -1;
        } else if (strcmp(k, "tls.session_ticket_key") == 0) {
            if (v[0] == '\0')
                return LK_ENTRY_ERR(ld, s, e, "empty path");
            if (c->nticket_keys == MAX_TICKET_KEY_FILES)
                return LK_ENTRY_ERR(ld, s, e, "more than %u ticket keys", MAX_TICKET_KEY_FILES);
            c->ticket_keys =
                lk_xrealloc(c->ticket_keys, (c->nticket_keys + 1) * sizeof(*c->ticket_keys));
            c->ticket_keys[c->nticket_keys].file = lk_conf_path(c, v);
            c->ticket_keys[c->nticket_keys++].line = e->line;
        } else if (strcmp(k, "tls.session_ticket_lifetime") == 0) {
            unsigned ms;
            if (duration_key(ld, s, e, &ms) != 0)
                return -1;
            if (ms < 1000 || ms / 1000 > MAX_SESSION_LIFETIME_S)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not from 1s to 7 days (10080m)", v);
            c->session_lifetime_s = ms / 1000;
        } else if (strcmp(k, "timeout.connect") == 0) {
            if (duration_key(ld, s, e, &c->timeout_connect_ms) != 0)
                return -1;
        } else if (strcmp(k, "timeout.response") == 0) {
            if (duration_key(ld, s, e, &c->timeout_response_ms) != 0)
                return -1;
        } else if (strcmp(k, "timeout.client_header") == 0) {
            if (duration_key(ld, s, e, &c->timeout_client_header_ms) != 0)
                return -1;
        } else if (strcmp(k, "timeout.idle") == 0) {
            if (duration_key(ld, s, e, &c->timeout_idle_ms) != 0)
                return -1;
        } else if (strcmp(k, "drain_timeout") == 0) {
            if (duration_key(ld, s, e, &c->drain_timeout_ms) != 0)
                return -1;
        } else if (strcmp(k, "max_header_bytes") == 0) {
            if (size_key(ld, s, e, 1, &c->max_header_bytes) != 0)
                return -1;
        } else if (strcmp(k, "max_buffer_bytes") == 0) {
            if (size_key(ld, s, e, 1, &c->max_buffer_bytes) != 0)
                return -1;
        } else if (strcmp(k, "max_held_bytes") == 0) {
            if (size_key(ld, s, e, 1, &c->max_held_bytes) != 0)
                return -1;
        } else if (strcmp(k, "upstream.idle_pool") == 0) {
            if (lk_parse_uint(v, 65535, &n) != 0)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from 0 to 65535", v);
            c->upstream_idle_max = (unsigned)n;
        } else if (strcmp(k, "listen.backlog") == 0) {
            if (lk_parse_uint(v, INT_MAX, &n) != 0 || n == 0)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from 1 to %d", v, INT_MAX);
            c->listen_backlog = (int)n;
        } else if (strcmp(k, "max_connections") == 0 ||
                   strcmp(k, "max_connections_per_client") == 0) {
            unsigned *cap = strcmp(k, "max_connections") == 0 ? &c->max_connections
                                                              : &c->max_connections_per_client;
            if (strcmp(v, "off") == 0) /* as 0: no cap */
                n = 0;
            else if (lk_parse_uint(v, UINT_MAX, &n) != 0)
                return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from 0 to %u, or off", v,
                                 UINT_MAX);
            *cap = (unsigned)n;
        } else if (strcmp(k, "timeout.first_frame") == 0) {
            c->timeout_first_frame_ms = 0;
            if (strcmp(v, "off") != 0 && duration_key(ld, s, e, &c->timeout_first_frame_ms) != 0)
                return -1;
        } else {
            continue; /* unknown: reported once the filters took theirs */
        }
        e->used = 1;
    }
    if (pending != NULL)
        return lk_conf_err(ld, pending->line, s, "tls.certificate",
                      "no tls.key follows this certificate");
    if (c->nticket_keys != 0 && !c->session_tickets)
        return lk_conf_err(ld, c->ticket_keys[0].line, s, "tls.session_ticket_key",
                      "tls.session_tickets is off: no ticket is ever encrypted with this key");
    return 0;
}

/* [pulsar NAME] ----------------------------------------------------------------- */

/* Parses a URL entry into a new lk_url whose scheme is a or b. */
static int
url_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, enum lk_scheme a,
        enum lk_scheme b, struct lk_url **out)
{
    char msg[512];
    struct lk_url *u = lk_xmalloc(sizeof(*u));

    if (lk_url_parse(e->value, strlen(e->value), u, msg, sizeof(msg)) != 0) {
        free(u);
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    }
    if (u->scheme != a && u->scheme != b) {
        lk_conf_err(ld, e->line, s, e->key, "%s: the scheme must be %s or %s", u->text,
               lk_scheme_name(a), lk_scheme_name(b));
        lk_url_free(u);
        free(u);
        return -1;
    }
    *out = u;
    return 0;
}

/* Adds the cluster of section s, of either kind, with the defaults both
 * kinds share; NULL after an error. */
static struct lk_cluster *
new_cluster(struct lk_loader *ld, struct lk_conf_section *s)
{
    struct lk_conf *c = ld->conf;
    struct lk_cluster *cl = lk_xcalloc(1, sizeof(*cl));
    const struct lk_cluster *dup = lk_conf_find_cluster(c, s->name, strlen(s->name));

    c->clusters = lk_xrealloc(c->clusters, (c->nclusters + 1) * sizeof(*c->clusters));
    cl->index = c->nclusters;
    c->clusters[c->nclusters++] = cl;
    cl->name = lk_xstrdup(s->name);
    cl->bind = lk_xstrdup("0.0.0.0");
    cl->redirects = LK_REDIRECTS_REWRITE;
    cl->leak_guard = LK_LEAK_LOG;
    cl->follow_max_hops = DEFAULT_FOLLOW_MAX_HOPS;
    cl->follow_replay_bytes = DEFAULT_FOLLOW_REPLAY_BYTES;
    cl->forwarded_headers = 1;
    cl->upstream_tls = LK_UPSTREAM_TLS_MATCH;
    cl->health.fails = 1;
    cl->health.backoff_ms = DEFAULT_HEALTH_BACKOFF_MS;
    cl->health.backoff_max_ms = DEFAULT_HEALTH_BACKOFF_MAX_MS;
    cl->health.interval_ms = DEFAULT_HEALTH_INTERVAL_MS;
    cl->health.timeout_ms = DEFAULT_HEALTH_TIMEOUT_MS;
    cl->health.path = lk_xstrdup(DEFAULT_HEALTH_PATH);
    cl->section = s;
    cl->line = s->line;

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

static int
bind_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
         struct lk_cluster *cl)
{
    char ip[INET6_ADDRSTRLEN];
    int family;

    if (lk_parse_ip(e->value, ip, sizeof(ip), &family) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not an IP address (e.g. 0.0.0.0, 127.0.0.2, ::)",
                         e->value);
    free(cl->bind);
    cl->bind = lk_xstrdup(ip);
    return 0;
}

/* The health.* keys of either kind of cluster.  http checks need no test
 * of the brokers: a Pulsar broker's internal listener always has an http or
 * https address (resolve_listeners). */
static int
health_keys(struct lk_loader *ld, struct lk_conf_section *s, struct lk_cluster *cl)
{
    struct lk_health_conf *h = &cl->health;
    struct lk_conf_entry *e, *be = NULL;
    unsigned long n;
    int v;

    if ((e = lk_conf_take(s, "health.fails")) != NULL) {
        if (lk_parse_uint(e->value, 100, &n) != 0 || n == 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from 1 to 100", e->value);
        h->fails = (unsigned)n;
    }
    if ((be = lk_conf_take(s, "health.backoff")) != NULL && duration_key(ld, s, be, &h->backoff_ms) != 0)
        return -1;
    if ((e = lk_conf_take(s, "health.backoff_max")) != NULL) {
        if (duration_key(ld, s, e, &h->backoff_max_ms) != 0)
            return -1;
        if (h->backoff_max_ms < h->backoff_ms)
            return LK_ENTRY_ERR(ld, s, e, "%s is below health.backoff (%u ms)", e->value,
                             h->backoff_ms);
    } else if (h->backoff_max_ms < h->backoff_ms) {
        h->backoff_max_ms = h->backoff_ms; /* a long health.backoff alone: no doubling */
    }
    if ((e = lk_conf_take(s, "health.check")) != NULL) {
        if ((v = lk_parse_enum(e->value, lk_health_check_names)) < 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not off, tcp or http", e->value);
        if (v == LK_HEALTH_CHECK_HTTP && cl->proto == LK_PROTO_KAFKA)
            return LK_ENTRY_ERR(ld, s, e, "Kafka brokers have no HTTP address to check: use tcp");
        h->check = (enum lk_health_check)v;
    }
    if ((e = lk_conf_take(s, "health.interval")) != NULL &&
        duration_key(ld, s, e, &h->interval_ms) != 0)
        return -1;
    if ((e = lk_conf_take(s, "health.timeout")) != NULL) {
        if (duration_key(ld, s, e, &h->timeout_ms) != 0)
            return -1;
        if (h->timeout_ms > h->interval_ms)
            return LK_ENTRY_ERR(ld, s, e,
                             "%s is above health.interval (%u ms): checks would overlap",
                             e->value, h->interval_ms);
    } else if (h->timeout_ms > h->interval_ms) {
        h->timeout_ms = h->interval_ms;
    }
    /* Only http checks ask for a path: a Kafka cluster has none to set. */
    if (cl->proto != LK_PROTO_KAFKA && (e = lk_conf_take(s, "health.path")) != NULL) {
        if (e->value[0] != '/')
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not a path (it must start with '/')", e->value);
        for (const char *p = e->value; *p != '\0'; p++)
            if ((unsigned char)*p <= ' ' || *p == 0x7f)
                return LK_ENTRY_ERR(ld, s, e, "a path cannot hold spaces or control characters");
        free(h->path);
        h->path = lk_xstrdup(e->value);
    }
    return 0;
}

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
            return LK_ENTRY_ERR(ld, s, e, "give either %s or %s, not both (the other is at line %d)",
                             (*out)->key, e->key, (*out)->line);
        *out = e;
    }
    return 0;
}

/*
 * The keys of a map read from the cluster's own ZooKeeper, which both
 * kinds have: internal_networks, and the broker's own key for its store
 * (Pulsar's metadataStoreUrl, or the older zookeeperServers; Kafka's
 * zookeeper.connect).  A store needs internal_networks: lookout dials
 * what registrations name only inside them.
 */
static int
load_registry_keys(struct lk_loader *ld, struct lk_conf_section *s, struct lk_cluster *cl)
{
    static const char *const pulsar_zk[] = {"metadataStoreUrl", "zookeeperServers", NULL};
    static const char *const kafka_zk[] = {"zookeeper.connect", NULL};
    static const char *const pulsar_to[] = {"metadataStoreSessionTimeoutMillis",
                                            "zooKeeperSessionTimeoutMillis", NULL};
    static const char *const kafka_to[] = {"zookeeper.session.timeout.ms", NULL};
    struct lk_conf_entry *e, *zk = NULL, *to = NULL;
    unsigned long ms;
    char msg[512];
    int n;

    if ((e = lk_conf_take(s, "internal_networks")) != NULL) {
        if ((n = lk_cidrs_parse(e->value, &cl->internal_networks, msg, sizeof(msg))) < 0)
            return LK_ENTRY_ERR(ld, s, e, "%s", msg);
        cl->ninternal_networks = (size_t)n;
    }
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
            return LK_ENTRY_ERR(ld, s, to,
                             "'%s' is not a session timeout in milliseconds from 1000 to 600000",
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

/*
 * client_listeners: "external, vpn", the listeners a client may name
 * besides lookupListenerName (CONTRACT §3).  Each is a name some broker
 * has (checked with the brokers, check_client_listeners), once; the
 * internal listener only as written here, never by default.
 */
static int
client_listeners_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                     struct lk_cluster *cl)
{
    const char *p = e->value;

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

/* leak_guard, in either kind of cluster. */
static int
leak_guard_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
               struct lk_cluster *cl)
{
    int v = lk_parse_enum(e->value, lk_leak_guard_names);

    if (v < 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not off, log, rewrite or block", e->value);
    cl->leak_guard = (enum lk_leak_guard)v;
    return 0;
}

int
lk_conf_load_pulsar(struct lk_loader *ld, struct lk_conf_section *s)
{
    struct lk_cluster *cl = new_cluster(ld, s);
    struct lk_conf_entry *e, *ie;
    unsigned long n;
    int v;

    if (cl == NULL)
        return -1;
    cl->proto = LK_PROTO_HTTP | LK_PROTO_PULSAR; /* Pulsar clients speak both */
    cl->max_frame_bytes = DEFAULT_PULSAR_MAX_FRAME_BYTES;

    if ((ie = lk_conf_take(s, "internalListenerName")) != NULL) {
        if (ie->value[0] == '\0')
            return LK_ENTRY_ERR(ld, s, ie, "empty listener name");
        cl->internal_listener = lk_xstrdup(ie->value);
    }
    if ((e = lk_conf_take(s, "lookupListenerName")) != NULL) {
        if (e->value[0] == '\0')
            return LK_ENTRY_ERR(ld, s, e, "empty listener name");
        if (ie != NULL && strcmp(e->value, ie->value) == 0)
            return LK_ENTRY_ERR(ld, s, e,
                             "'%s' is the internal listener (line %d): lookout would listen on "
                             "the addresses it connects to",
                             e->value, ie->line);
        cl->lookup_listener = lk_xstrdup(e->value);
    }
    if ((e = lk_conf_take(s, "webServiceUrl")) != NULL &&
        url_key(ld, s, e, LK_SCHEME_HTTP, LK_SCHEME_HTTPS, &cl->web_service) != 0)
        return -1;
    if ((e = lk_conf_take(s, "serviceUrl")) != NULL &&
        url_key(ld, s, e, LK_SCHEME_PULSAR, LK_SCHEME_PULSAR_SSL, &cl->service) != 0)
        return -1;
    if ((e = lk_conf_take(s, "bind")) != NULL && bind_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = lk_conf_take(s, "redirects")) != NULL) {
        if ((v = lk_parse_enum(e->value, lk_redirects_names)) < 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not rewrite or follow", e->value);
        cl->redirects = (enum lk_redirects)v;
    }
    if ((e = lk_conf_take(s, "leak_guard")) != NULL && leak_guard_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = lk_conf_take(s, "follow.max_hops")) != NULL) {
        if (lk_parse_uint(e->value, 100, &n) != 0 || n == 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from 1 to 100", e->value);
        cl->follow_max_hops = (unsigned)n;
    }
    if ((e = lk_conf_take(s, "follow.replay_bytes")) != NULL &&
        size_key(ld, s, e, 0, &cl->follow_replay_bytes) != 0)
        return -1;
    if ((e = lk_conf_take(s, "max_frame_bytes")) != NULL &&
        size_key(ld, s, e, 1, &cl->max_frame_bytes) != 0)
        return -1;
    if ((e = lk_conf_take(s, "forwarded_headers")) != NULL &&
        onoff_key(ld, s, e, &cl->forwarded_headers) != 0)
        return -1;
    if ((e = lk_conf_take(s, "upstream.tls")) != NULL) {
        if ((v = lk_parse_enum(e->value, lk_upstream_tls_names)) < 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not match, plain or tls", e->value);
        cl->upstream_tls = (enum lk_upstream_tls)v;
    }
    if ((e = lk_conf_take(s, "pulsar_routing")) != NULL) {
        if ((v = lk_parse_enum(e->value, lk_pulsar_routing_names)) < 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not per-broker or service", e->value);
        if (v == LK_PULSAR_ROUTING_SERVICE && cl->service == NULL)
            return LK_ENTRY_ERR(ld, s, e,
                             "service routing sends every binary client through serviceUrl, "
                             "which this cluster does not have");
        cl->pulsar_routing = (enum lk_pulsar_routing)v;
    }
    if ((e = lk_conf_take(s, "client_listeners")) != NULL && client_listeners_key(ld, s, e, cl) != 0)
        return -1;
    /* `filters` is taken when the chain is built, after the brokers. */
    if (health_keys(ld, s, cl) != 0)
        return -1;
    return load_registry_keys(ld, s, cl);
}

/* [kafka NAME] ------------------------------------------------------------------- */

/* A Kafka listener name from key e: non-empty, upper-cased as Kafka's
 * ListenerName.normalised does. */
static int
kafka_name_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, char **out)
{
    char msg[256];

    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty listener name");
    if (lk_kafka_name_check(lk_str_c(e->value), msg, sizeof(msg)) != 0)
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    *out = lk_kafka_name_dup(lk_str_c(e->value));
    return 0;
}

/* bootstrap.servers: "host:port,host:port", Kafka's client syntax; empty
 * items are skipped as the clients skip them.  Their scheme is set once the
 * lookup listener's protocol is known (resolve_kafka). */
static int
bootstrap_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
              struct lk_cluster *cl)
{
    const char *p = e->value;
    char msg[512];

    for (;;) {
        const char *comma = strchr(p, ',');
        struct lk_str item = lk_str_trim(lk_str_make(p, comma != NULL ? (size_t)(comma - p) : strlen(p)));

        if (item.len != 0) {
            struct lk_url u;
            if (lk_kafka_addr_parse(item.p, item.len, LK_SCHEME_KAFKA, &u, msg, sizeof(msg)) != 0)
                return LK_ENTRY_ERR(ld, s, e, "%s", msg);
            cl->bootstrap = lk_xrealloc(cl->bootstrap, (cl->nbootstrap + 1) * sizeof(*cl->bootstrap));
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

int
lk_conf_load_kafka(struct lk_loader *ld, struct lk_conf_section *s)
{
    struct lk_cluster *cl = new_cluster(ld, s);
    struct lk_conf_entry *e, *ie;
    char msg[512];
    int n, v;

    if (cl == NULL)
        return -1;
    cl->proto = LK_PROTO_KAFKA;
    cl->max_frame_bytes = DEFAULT_KAFKA_MAX_FRAME_BYTES;
    cl->idle_ms = DEFAULT_KAFKA_IDLE_MS;
    cl->unknown_api = LK_UNKNOWN_API_PASS;

    /* Kafka has no client-chosen listener (no KIP gives clients a way to
     * name one): every address is rewritten into lookupListenerName. */
    if ((e = lk_conf_take(s, "client_listeners")) != NULL)
        return LK_ENTRY_ERR(ld, s, e,
                         "a [pulsar] key: Kafka clients cannot name a listener, every address "
                         "they get is lookupListenerName's");
    if ((ie = lk_conf_take(s, "inter.broker.listener.name")) != NULL) {
        if (kafka_name_key(ld, s, ie, &cl->internal_listener) != 0)
            return -1;
    } else {
        cl->internal_listener = lk_xstrdup(DEFAULT_KAFKA_INTERNAL);
    }
    /* Kafka clients connect to whatever Metadata names: without a lookup
     * listener lookout could only hand them the internal addresses. */
    if ((e = lk_conf_take(s, "lookupListenerName")) == NULL)
        return lk_conf_err(ld, s->line, s, NULL,
                      "lookupListenerName is missing (the listener whose addresses clients get; "
                      "a Kafka cluster cannot run without one)");
    if (kafka_name_key(ld, s, e, &cl->lookup_listener) != 0)
        return -1;
    if (strcmp(cl->lookup_listener, cl->internal_listener) == 0)
        return LK_ENTRY_ERR(ld, s, e,
                         "'%s' is the internal listener (%s%s): lookout would listen on the "
                         "addresses it connects to",
                         e->value, ie != NULL ? "inter.broker.listener.name" : "Kafka's default",
                         ie != NULL ? "" : " inter.broker.listener.name");
    e = lk_conf_take(s, "listener.security.protocol.map");
    n = lk_kafka_secmap_parse(e != NULL ? e->value : lk_kafka_default_secmap, &cl->secmap, msg,
                              sizeof(msg));
    if (n < 0)
        return e != NULL ? LK_ENTRY_ERR(ld, s, e, "%s", msg) : lk_conf_err(ld, s->line, s, NULL, "%s", msg);
    cl->nsecmap = (size_t)n;
    if ((e = lk_conf_take(s, "bootstrap.servers")) != NULL && bootstrap_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = lk_conf_take(s, "bind")) != NULL && bind_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = lk_conf_take(s, "max_frame_bytes")) != NULL &&
        size_key(ld, s, e, 1, &cl->max_frame_bytes) != 0)
        return -1;
    if ((e = lk_conf_take(s, "timeout.idle")) != NULL && duration_key(ld, s, e, &cl->idle_ms) != 0)
        return -1;
    if ((e = lk_conf_take(s, "unknown_api")) != NULL) {
        if ((v = lk_parse_enum(e->value, lk_unknown_api_names)) < 0)
            return LK_ENTRY_ERR(ld, s, e, "'%s' is not pass or drop", e->value);
        cl->unknown_api = (enum lk_unknown_api)v;
    }
    if ((e = lk_conf_take(s, "leak_guard")) != NULL && leak_guard_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = lk_conf_take(s, "broker.pattern")) != NULL) {
        cl->pattern = lk_xcalloc(1, sizeof(*cl->pattern));
        if (lk_kafka_pattern_parse(e->value, cl->pattern, msg, sizeof(msg)) != 0)
            return LK_ENTRY_ERR(ld, s, e, "%s", msg);
        cl->pattern->line = e->line;
    }
    if (health_keys(ld, s, cl) != 0)
        return -1;
    return load_registry_keys(ld, s, cl);
}

/* Unknown keys ------------------------------------------------------------------- */

static int
in_list(const char *const *list, const char *key, int nocase)
{
    for (int i = 0; list[i] != NULL; i++)
        if ((nocase ? strcasecmp(list[i], key) : strcmp(list[i], key)) == 0)
            return i;
    return -1;
}

int
lk_conf_check_unknown(struct lk_loader *ld)
{
    struct lk_conf *c = ld->conf;
    /* A [broker]'s keys depend on its cluster's kind. */
    static const struct {
        const char *kind;
        int kafka;
        const char *const *keys;
    } kinds[] = {{"lookout", 0, lookout_keys},
                 {"pulsar", 0, pulsar_keys},
                 {"kafka", 1, kafka_keys},
                 {"broker", 0, broker_keys},
                 {"broker", 1, kafka_broker_keys}};
    const size_t nkinds = sizeof(kinds) / sizeof(kinds[0]);

    for (size_t i = 0; i < c->nsections; i++) {
        struct lk_conf_section *s = &c->sections[i];
        int kafka = strcmp(s->kind, "kafka") == 0;
        size_t own = 0;

        if (strcmp(s->kind, "broker") == 0)
            for (size_t b = 0; b < c->nbrokers; b++)
                if (strcmp(c->brokers[b]->name, s->name) == 0)
                    kafka = lk_cluster_is_kafka(c->brokers[b]->cluster);
        while (strcmp(kinds[own].kind, s->kind) != 0 || kinds[own].kafka != kafka)
            own++;
        for (size_t j = 0; j < s->nentries; j++) {
            struct lk_conf_entry *e = &s->entries[j];
            int at;

            if (e->used)
                continue;
            /* A typo of the section's own key first, then a key of
             * another kind. */
            if ((at = in_list(kinds[own].keys, e->key, 1)) >= 0)
                return LK_ENTRY_ERR(ld, s, e, "unknown key (did you mean %s?)", kinds[own].keys[at]);
            for (size_t k = 0; k < nkinds; k++) {
                if (k == own || (at = in_list(kinds[k].keys, e->key, 1)) < 0)
                    continue;
                return LK_ENTRY_ERR(ld, s, e, "unknown key (%s belongs in a [%s] section%s)",
                                 kinds[k].keys[at], kinds[k].kind,
                                 strcmp(kinds[k].kind, "broker") != 0 ? ""
                                 : kinds[k].kafka                     ? " of a Kafka cluster"
                                                                      : " of a Pulsar cluster");
            }
            return LK_ENTRY_ERR(ld, s, e, "unknown key");
        }
    }
    return 0;
}

/* Defaults ------------------------------------------------------------------------- */

void
lk_conf_defaults(struct lk_conf *c)
{
    long cores;

    cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->workers = cores >= 1 ? (int)(cores > 1024 ? 1024 : cores) : 1;
    c->upstream_verify = 1;
    c->session_cache = 1;
    c->session_tickets = 1;
    c->session_lifetime_s = DEFAULT_SESSION_LIFETIME_S;
    c->timeout_connect_ms = DEFAULT_TIMEOUT_CONNECT_MS;
    c->timeout_response_ms = DEFAULT_TIMEOUT_RESPONSE_MS;
    c->timeout_client_header_ms = DEFAULT_TIMEOUT_CLIENT_HEADER_MS;
    c->timeout_idle_ms = DEFAULT_TIMEOUT_IDLE_MS;
    c->drain_timeout_ms = DEFAULT_DRAIN_TIMEOUT_MS;
    c->max_header_bytes = DEFAULT_MAX_HEADER_BYTES;
    c->max_buffer_bytes = DEFAULT_MAX_BUFFER_BYTES;
    c->max_held_bytes = DEFAULT_MAX_HELD_BYTES;
    c->upstream_idle_max = DEFAULT_UPSTREAM_IDLE_MAX;
    c->listen_backlog = DEFAULT_LISTEN_BACKLOG;
    c->timeout_first_frame_ms = DEFAULT_TIMEOUT_FIRST_FRAME_MS;
    c->log_level = LK_INFO;
    c->refs = 1;
    if (lk_cidrs_parse(DEFAULT_ADMIN_ALLOW, &c->admin_allow, NULL, 0) != 2)
        abort(); /* a constant */
    c->nadmin_allow = 2;
}
