/*
 * The config loader: reads conf/lookout.conf (our own INI dialect, see
 * CONTRACT.md section 2) into an immutable struct lk_conf.  It runs in four
 * passes: the reader turns text into sections of key = value entries; the
 * builder turns [lookout], [pulsar NAME], [kafka NAME] and [broker
 * CLUSTER/ID] sections into settings, clusters and brokers with their
 * listeners (a Kafka broker's may come from its ZooKeeper registration
 * JSON file); each cluster's
 * filter chain is built, and its filters take their own keys; and last the
 * binding rule turns every lookup-listener and service address into a
 * virtual host on a socket to bind.  Any entry nobody took is an unknown key.
 * Every error names its file and line and stops the load; nothing here
 * prints, except lk_conf_dump.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include "lk_conf.h"
#include "lk_filter.h"
#include "lk_log.h"
#include "lk_meta.h"
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
/* Bounds on what a config may hold, far above any real cluster, so that a
 * wrong or hostile file fails fast instead of eating memory and time (the
 * duplicate checks are linear scans). */
#define LK_CONF_MAX_BYTES (4u * 1024 * 1024)
#define LK_CONF_MAX_SECTIONS 10000u
#define LK_CONF_MAX_ENTRIES 1000u
#define DEFAULT_FOLLOW_REPLAY_BYTES (5u * 1024 * 1024)
/* Pulsar's maxMessageSize is 5 MiB; a frame also carries its command and
 * metadata, hence the headroom. */
#define DEFAULT_PULSAR_MAX_FRAME_BYTES (5u * 1024 * 1024 + 64 * 1024)
/* Kafka's socket.request.max.bytes default, 100 MiB. */
#define DEFAULT_KAFKA_MAX_FRAME_BYTES (100u * 1024 * 1024)
/* Kafka's own connections.max.idle.ms: brokers close idle connections
 * after 10 minutes, and clients after 9; lookout never closes first. */
#define DEFAULT_KAFKA_IDLE_MS (10u * 60 * 1000)
/* A broker registration is a few hundred bytes; ZooKeeper's znode limit is
 * 1 MiB (jute.maxbuffer). */
#define MAX_REGISTRATION_BYTES (1024u * 1024)
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

static const char *const redirects_names[] = {"rewrite", "follow", NULL};
static const char *const pulsar_routing_names[] = {"per-broker", "service", NULL};
static const char *const leak_guard_names[] = {"off", "log", "rewrite", "block", NULL};
static const char *const upstream_tls_names[] = {"match", "plain", "tls", NULL};
static const char *const unknown_api_names[] = {"pass", "drop", NULL};
static const char *const health_check_names[] = {"off", "tcp", "http", NULL};

struct loader {
    struct lk_conf *conf;
    char *err;
    size_t errlen;
    const struct lk_live_set *sets; /* lk_conf_load_live: the stores' registrations */
    size_t nsets;
};

#define SECT_FMT "[%s%s%s]"
#define SECT_ARGS(s) (s)->kind, (s)->name != NULL ? " " : "", (s)->name != NULL ? (s)->name : ""

/* Errors ------------------------------------------------------------------ */

/* Appends to err at *off, never past errlen. */
static void
append(struct loader *ld, size_t *off, const char *fmt, va_list ap)
{
    int n;

    if (*off >= ld->errlen)
        return;
    n = vsnprintf(ld->err + *off, ld->errlen - *off, fmt, ap);
    if (n > 0)
        *off += (size_t)n;
}

static void appendf(struct loader *ld, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
appendf(struct loader *ld, size_t *off, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    append(ld, off, fmt, ap);
    va_end(ap);
}

/*
 * Writes "file:line: [kind name] key: message" into the loader's err; s and
 * key may be NULL, line 0 means "no line".  Returns -1 for `return report()`.
 */
static int report(struct loader *ld, int line, const struct lk_conf_section *s, const char *key,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int
report(struct loader *ld, int line, const struct lk_conf_section *s, const char *key,
       const char *fmt, ...)
{
    size_t off = 0;
    va_list ap;

    if (ld->err == NULL || ld->errlen == 0)
        return -1;
    ld->err[0] = '\0';
    if (line > 0)
        appendf(ld, &off, "%s:%d: ", ld->conf->file, line);
    else
        appendf(ld, &off, "%s: ", ld->conf->file);
    if (s != NULL)
        appendf(ld, &off, SECT_FMT " ", SECT_ARGS(s));
    if (key != NULL)
        appendf(ld, &off, "%s: ", key);
    va_start(ap, fmt);
    append(ld, &off, fmt, ap);
    va_end(ap);
    return -1;
}

/* The same, for an entry of section s. */
#define entry_err(ld, s, e, ...) report((ld), (e)->line, (s), (e)->key, __VA_ARGS__)

/* The reader ---------------------------------------------------------------- */

static int
is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static struct lk_str
trim(struct lk_str s)
{
    while (s.len > 0 && is_ws(s.p[0]))
        s.p++, s.len--;
    while (s.len > 0 && is_ws(s.p[s.len - 1]))
        s.len--;
    return s;
}

/* `#` and `;` open a comment at the start of a line or after whitespace, so
 * that a value may contain them ("a=b#c" keeps "#c"). */
static struct lk_str
strip_comment(struct lk_str l)
{
    for (size_t i = 0; i < l.len; i++)
        if ((l.p[i] == '#' || l.p[i] == ';') && (i == 0 || is_ws(l.p[i - 1])))
            return lk_str_make(l.p, i);
    return l;
}

static int
is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

static struct lk_conf_section *
find_section(const struct lk_conf *c, const char *kind, const char *name)
{
    for (size_t i = 0; i < c->nsections; i++) {
        struct lk_conf_section *s = &c->sections[i];
        if (strcmp(s->kind, kind) == 0 &&
            (name == NULL ? s->name == NULL : s->name != NULL && strcmp(s->name, name) == 0))
            return s;
    }
    return NULL;
}

static struct lk_conf_entry *
find_entry(const struct lk_conf_section *s, const char *key)
{
    for (size_t i = 0; i < s->nentries; i++)
        if (strcmp(s->entries[i].key, key) == 0)
            return &s->entries[i];
    return NULL;
}

/* Returns the entry for key and marks it used, or NULL. */
static struct lk_conf_entry *
take(struct lk_conf_section *s, const char *key)
{
    struct lk_conf_entry *e = find_entry(s, key);

    if (e != NULL)
        e->used = 1;
    return e;
}

static int
read_header(struct loader *ld, struct lk_str l, int line)
{
    struct lk_conf *c = ld->conf;
    struct lk_str in, kind, name, rest;
    const char *close = memchr(l.p, ']', l.len);
    struct lk_conf_section *s, *dup;
    size_t i;

    if (close == NULL)
        return report(ld, line, NULL, NULL, "section header without ']'");
    if (close != l.p + l.len - 1)
        return report(ld, line, NULL, NULL, "unexpected text after ']'");
    in = trim(lk_str_make(l.p + 1, l.len - 2));
    for (i = 0; i < in.len && !is_ws(in.p[i]); i++)
        ;
    kind = lk_str_make(in.p, i);
    rest = trim(lk_str_skip(in, i));
    for (i = 0; i < rest.len && !is_ws(rest.p[i]); i++)
        ;
    name = lk_str_make(rest.p, i);
    rest = trim(lk_str_skip(rest, i));

    if (kind.len == 0)
        return report(ld, line, NULL, NULL, "empty section header (expected [kind name])");
    if (rest.len != 0)
        return report(ld, line, NULL, NULL,
                      "section header has more than two words (expected [kind name])");
    if (lk_str_eq(kind, LK_STRLIT("lookout"))) {
        if (name.len != 0)
            return report(ld, line, NULL, NULL, "[lookout] takes no name");
    } else if (lk_str_eq(kind, LK_STRLIT("pulsar")) || lk_str_eq(kind, LK_STRLIT("kafka")) ||
               lk_str_eq(kind, LK_STRLIT("broker"))) {
        if (name.len == 0)
            return report(ld, line, NULL, NULL, "[%.*s] needs a name: [%.*s %s]", (int)kind.len,
                          kind.p, (int)kind.len, kind.p,
                          lk_str_eq(kind, LK_STRLIT("broker")) ? "CLUSTER/ID" : "NAME");
    } else {
        return report(ld, line, NULL, NULL,
                      "unknown section kind '%.*s' (expected lookout, pulsar, kafka or broker)",
                      (int)kind.len, kind.p);
    }

    if (c->nsections >= LK_CONF_MAX_SECTIONS)
        return report(ld, line, NULL, NULL, "more than %u sections", LK_CONF_MAX_SECTIONS);
    c->sections = lk_xrealloc(c->sections, (c->nsections + 1) * sizeof(*c->sections));
    s = &c->sections[c->nsections];
    memset(s, 0, sizeof(*s));
    s->kind = lk_xstrndup(kind.p, kind.len);
    s->name = name.len != 0 ? lk_xstrndup(name.p, name.len) : NULL;
    s->file = c->file;
    s->line = line;
    /* Count it before the duplicate check so that it is freed either way. */
    c->nsections++;
    dup = find_section(c, s->kind, s->name);
    if (dup != s)
        return report(ld, line, NULL, NULL, "duplicate section " SECT_FMT " (first at line %d)",
                      SECT_ARGS(s), dup->line);
    return 0;
}

static int
is_repeatable(const struct lk_conf_section *s, const char *key)
{
    /* tls.certificate and tls.key come in ordered pairs, one per cert;
     * ticket keys are a list, the first encrypting. */
    return s->name == NULL && (strcmp(key, "tls.certificate") == 0 || strcmp(key, "tls.key") == 0 ||
                               strcmp(key, "tls.session_ticket_key") == 0);
}

static int
read_entry(struct loader *ld, struct lk_str l, int line)
{
    struct lk_conf *c = ld->conf;
    const char *eq = memchr(l.p, '=', l.len);
    struct lk_conf_section *s;
    struct lk_conf_entry *e, *dup;
    struct lk_str key, value;

    if (eq == NULL)
        return report(ld, line, NULL, NULL, "expected 'key = value' or '[kind name]'");
    key = trim(lk_str_make(l.p, (size_t)(eq - l.p)));
    value = trim(lk_str_make(eq + 1, l.len - (size_t)(eq + 1 - l.p)));
    if (key.len == 0)
        return report(ld, line, NULL, NULL, "missing key before '='");
    for (size_t i = 0; i < key.len; i++)
        if (!is_key_char(key.p[i]))
            return report(ld, line, NULL, NULL,
                          "bad key '%.*s' (letters, digits, '.', '_' and '-' only)",
                          (int)(key.len > 64 ? 64 : key.len), key.p);
    if (c->nsections == 0)
        return report(ld, line, NULL, NULL, "'%.*s' is outside any section",
                      (int)(key.len > 64 ? 64 : key.len), key.p);

    s = &c->sections[c->nsections - 1];
    if (s->nentries >= LK_CONF_MAX_ENTRIES)
        return report(ld, line, NULL, NULL, "more than %u entries in one section",
                      LK_CONF_MAX_ENTRIES);
    s->entries = lk_xrealloc(s->entries, (s->nentries + 1) * sizeof(*s->entries));
    e = &s->entries[s->nentries];
    e->key = lk_xstrndup(key.p, key.len);
    e->value = lk_xstrndup(value.p, value.len);
    e->line = line;
    e->used = 0;
    dup = is_repeatable(s, e->key) ? NULL : find_entry(s, e->key);
    s->nentries++;
    if (dup != NULL)
        return entry_err(ld, s, e, "duplicate key (first at line %d)", dup->line);
    return 0;
}

/* Splits text into sections and entries.  Lines have no length limit: the
 * text is in memory whole and lines are (pointer, length) views into it. */
static int
read_ini(struct loader *ld, const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    int line = 0;

    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3; /* a UTF-8 byte order mark from a Windows editor */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        struct lk_str l = lk_str_make(p, (size_t)((nl != NULL ? nl : end) - p));

        p = nl != NULL ? nl + 1 : end;
        line++;
        if (memchr(l.p, '\0', l.len) != NULL)
            return report(ld, line, NULL, NULL, "NUL byte in the line");
        l = trim(strip_comment(l));
        if (l.len == 0)
            continue;
        if ((l.p[0] == '[' ? read_header(ld, l, line) : read_entry(ld, l, line)) != 0)
            return -1;
    }
    return 0;
}

/* Values ---------------------------------------------------------------------- */

/* Plain decimal digits, nothing else, at most max. */
static int
parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    unsigned long v = 0;

    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (max - (unsigned long)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (unsigned long)(*s - '0');
    }
    *out = v;
    return 0;
}

int
lk_parse_duration(const char *s, unsigned *ms)
{
    unsigned long long v = 0;
    unsigned long mult;
    const char *p = s;

    if (s == NULL || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (unsigned long long)(*p - '0');
        if (v > UINT_MAX)
            return -1;
    }
    /* A bare number is refused: "5" could mean seconds or milliseconds. */
    if (strcmp(p, "ms") == 0)
        mult = 1;
    else if (strcmp(p, "s") == 0)
        mult = 1000;
    else if (strcmp(p, "m") == 0)
        mult = 60 * 1000;
    else
        return -1;
    if (v > UINT_MAX / mult)
        return -1;
    *ms = (unsigned)(v * mult);
    return 0;
}

int
lk_parse_size(const char *s, size_t *bytes)
{
    size_t v = 0, mult = 1;
    const char *p = s;

    if (s == NULL || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (SIZE_MAX - (size_t)(*p - '0')) / 10)
            return -1;
        v = v * 10 + (size_t)(*p - '0');
    }
    if (*p == 'k' || *p == 'K')
        mult = 1024, p++;
    else if (*p == 'm' || *p == 'M')
        mult = 1024 * 1024, p++;
    if (*p != '\0' || v > SIZE_MAX / mult)
        return -1;
    *bytes = v * mult;
    return 0;
}

static int
parse_enum(const char *s, const char *const *names)
{
    for (int i = 0; names[i] != NULL; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* "127.0.0.1", "::1" or "[::1]" -> canonical text and family. */
static int
parse_ip(const char *s, char *out, size_t outlen, int *family)
{
    unsigned char a[sizeof(struct in6_addr)];
    char buf[INET6_ADDRSTRLEN + 2];
    size_t len = strlen(s);

    if (len >= sizeof(buf))
        return -1;
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
        memcpy(buf, s + 1, len - 2);
        buf[len - 2] = '\0';
    } else {
        memcpy(buf, s, len + 1);
    }
    if (inet_pton(AF_INET, buf, a) == 1)
        *family = AF_INET;
    else if (inet_pton(AF_INET6, buf, a) == 1)
        *family = AF_INET6;
    else
        return -1;
    return inet_ntop(*family, a, out, (socklen_t)outlen) != NULL ? 0 : -1;
}

/* "IP:port" or "[IPv6]:port". */
static int
parse_ip_port(const char *s, char *ip, size_t iplen, int *family, uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    char host[INET6_ADDRSTRLEN + 2];
    unsigned long p;

    if (colon == NULL || (size_t)(colon - s) >= sizeof(host) ||
        parse_uint(colon + 1, 65535, &p) != 0 || p == 0)
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    /* An IPv6 address needs its brackets here, or its last group would be
     * taken for the port. */
    if (strchr(host, ':') != NULL && host[0] != '[')
        return -1;
    if (parse_ip(host, ip, iplen, family) != 0)
        return -1;
    *port = (uint16_t)p;
    return 0;
}

/* Resolves a path from the config against the config's directory. */
static char *
resolve_path(const struct lk_conf *c, const char *path)
{
    char *r;

    if (path[0] == '/')
        return lk_xstrdup(path);
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    r = lk_xmalloc(strlen(c->dir) + 1 + strlen(path) + 1);
    sprintf(r, "%s%s%s", c->dir, strcmp(c->dir, "/") == 0 ? "" : "/", path);
    return r;
}

/* The absolute directory of the config file, without resolving symlinks
 * and without requiring the file to exist (lk_conf_load_buf). */
static char *
config_dir(const char *file)
{
    const char *slash = strrchr(file, '/');
    char cwd[PATH_MAX], *d, *r;

    if (slash == NULL)
        d = lk_xstrdup(".");
    else if (slash == file)
        d = lk_xstrdup("/");
    else
        d = lk_xstrndup(file, (size_t)(slash - file));
    if (d[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
        return d;
    if (strcmp(d, ".") == 0) {
        free(d);
        return lk_xstrdup(cwd);
    }
    r = lk_xmalloc(strlen(cwd) + 1 + strlen(d) + 1);
    sprintf(r, "%s/%s", cwd, strncmp(d, "./", 2) == 0 ? d + 2 : d);
    free(d);
    return r;
}

/* [lookout] ------------------------------------------------------------------- */

static int
duration_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, unsigned *ms)
{
    if (lk_parse_duration(e->value, ms) != 0 || *ms == 0)
        return entry_err(
            ld, s, e, "'%s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)", e->value);
    return 0;
}

static int
onoff_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, int *on)
{
    if (strcmp(e->value, "on") == 0)
        *on = 1;
    else if (strcmp(e->value, "off") == 0)
        *on = 0;
    else
        return entry_err(ld, s, e, "'%s' is not on or off", e->value);
    return 0;
}

static int
size_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, size_t min,
         size_t *bytes)
{
    if (lk_parse_size(e->value, bytes) != 0)
        return entry_err(ld, s, e, "'%s' is not a size (expected e.g. 512, 32k or 5m)", e->value);
    if (*bytes < min)
        return entry_err(ld, s, e, "%s is below the minimum of %zu bytes", e->value, min);
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
admin_token_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e)
{
    struct lk_conf *c = ld->conf;
    char buf[MAX_ADMIN_TOKEN_BYTES + 1];
    struct stat st;
    ssize_t n = -1;
    int fd;

    if (e->value[0] == '\0')
        return entry_err(ld, s, e, "empty path");
    free(c->admin_token_file);
    c->admin_token_file = resolve_path(c, e->value);
    /* non-blocking, and a regular file only: a FIFO must not hang a reload */
    fd = open(c->admin_token_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return entry_err(ld, s, e, "%s: %s", c->admin_token_file, strerror(errno));
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n < 0)
        return entry_err(ld, s, e, "%s: not a readable regular file", c->admin_token_file);
    if (n > MAX_ADMIN_TOKEN_BYTES)
        return entry_err(ld, s, e, "%s: over %d bytes", c->admin_token_file, MAX_ADMIN_TOKEN_BYTES);
    while (n > 0 && (is_ws(buf[n - 1]) || buf[n - 1] == '\n'))
        n--;
    if (n == 0)
        return entry_err(ld, s, e, "%s is empty: it must hold the bearer token",
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
        return entry_err(ld, s, e,
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
admin_cidrs_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                struct lk_cidr **nets, size_t *n)
{
    char msg[256];
    int r = lk_cidrs_parse(e->value, nets, msg, sizeof(msg));
    if (r < 0)
        return entry_err(ld, s, e, "%s", msg);
    *n = (size_t)r;
    return 0;
}

static int
load_lookout(struct loader *ld, struct lk_conf_section *s)
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

            if (parse_ip_port(v, ip, sizeof(ip), &family, &port) != 0)
                return entry_err(ld, s, e,
                                 "'%s' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)", v);
            c->admin = lk_xstrdup(v);
        } else if (strcmp(k, "workers") == 0) {
            if (strcmp(v, "auto") == 0) {
                long cores = sysconf(_SC_NPROCESSORS_ONLN);
                c->workers = cores >= 1 ? (int)(cores > 1024 ? 1024 : cores) : 1;
            } else if (parse_uint(v, 1024, &n) == 0 && n >= 1) {
                c->workers = (int)n;
            } else {
                return entry_err(ld, s, e, "'%s' is not 'auto' or a number from 1 to 1024", v);
            }
        } else if (strcmp(k, "log_level") == 0) {
            if ((c->log_level = lk_log_level_parse(v)) < 0)
                return entry_err(ld, s, e, "'%s' is not error, warn, info or debug", v);
        } else if (strcmp(k, "log.format") == 0) {
            static const char *const names[] = {"text", "json", NULL};
            int f = parse_enum(v, names);
            if (f < 0)
                return entry_err(ld, s, e, "'%s' is not text or json", v);
            c->log_format = f == 1 ? LK_LOG_JSON : LK_LOG_TEXT;
        } else if (strcmp(k, "log.access") == 0) {
            if (v[0] == '\0')
                return entry_err(ld, s, e, "empty value: stderr, off, or a file's path");
            free(c->log_access_file);
            c->log_access_file = NULL;
            if (strcmp(v, "stderr") == 0) {
                c->log_access = LK_ACCESS_STDERR;
            } else if (strcmp(v, "off") == 0) {
                c->log_access = LK_ACCESS_OFF;
            } else {
                c->log_access = LK_ACCESS_FILE;
                c->log_access_file = resolve_path(c, v);
            }
        } else if (strcmp(k, "log.kafka") == 0) {
            static const char *const names[] = {"control", "all", NULL};
            if ((c->log_kafka_all = parse_enum(v, names)) < 0)
                return entry_err(ld, s, e, "'%s' is not control or all", v);
        } else if (strcmp(k, "tls.certificate") == 0) {
            if (pending != NULL)
                return report(ld, pending->line, s, "tls.certificate",
                              "no tls.key follows this certificate (the next one is at line %d)",
                              e->line);
            if (v[0] == '\0')
                return entry_err(ld, s, e, "empty path");
            c->certs = lk_xrealloc(c->certs, (c->ncerts + 1) * sizeof(*c->certs));
            pending = &c->certs[c->ncerts++];
            pending->cert_file = resolve_path(c, v);
            pending->key_file = NULL;
            pending->line = e->line;
        } else if (strcmp(k, "tls.key") == 0) {
            if (pending == NULL && c->ncerts == 0)
                return entry_err(ld, s, e, "no tls.certificate before this key");
            if (pending == NULL)
                return entry_err(ld, s, e,
                                 "the tls.certificate before this key (line %d) already has one",
                                 c->certs[c->ncerts - 1].line);
            if (v[0] == '\0')
                return entry_err(ld, s, e, "empty path");
            pending->key_file = resolve_path(c, v);
            pending = NULL;
        } else if (strcmp(k, "tls.upstream_ca") == 0) {
            if (v[0] == '\0')
                return entry_err(ld, s, e, "empty path");
            c->upstream_ca = resolve_path(c, v);
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
                return entry_err(ld, s, e, "empty path");
            if (c->nticket_keys == MAX_TICKET_KEY_FILES)
                return entry_err(ld, s, e, "more than %u ticket keys", MAX_TICKET_KEY_FILES);
            c->ticket_keys =
                lk_xrealloc(c->ticket_keys, (c->nticket_keys + 1) * sizeof(*c->ticket_keys));
            c->ticket_keys[c->nticket_keys].file = resolve_path(c, v);
            c->ticket_keys[c->nticket_keys++].line = e->line;
        } else if (strcmp(k, "tls.session_ticket_lifetime") == 0) {
            unsigned ms;
            if (duration_key(ld, s, e, &ms) != 0)
                return -1;
            if (ms < 1000 || ms / 1000 > MAX_SESSION_LIFETIME_S)
                return entry_err(ld, s, e, "'%s' is not from 1s to 7 days (10080m)", v);
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
            if (parse_uint(v, 65535, &n) != 0)
                return entry_err(ld, s, e, "'%s' is not a number from 0 to 65535", v);
            c->upstream_idle_max = (unsigned)n;
        } else if (strcmp(k, "listen.backlog") == 0) {
            if (parse_uint(v, INT_MAX, &n) != 0 || n == 0)
                return entry_err(ld, s, e, "'%s' is not a number from 1 to %d", v, INT_MAX);
            c->listen_backlog = (int)n;
        } else if (strcmp(k, "max_connections") == 0 ||
                   strcmp(k, "max_connections_per_client") == 0) {
            unsigned *cap = strcmp(k, "max_connections") == 0 ? &c->max_connections
                                                              : &c->max_connections_per_client;
            if (strcmp(v, "off") == 0) /* as 0: no cap */
                n = 0;
            else if (parse_uint(v, UINT_MAX, &n) != 0)
                return entry_err(ld, s, e, "'%s' is not a number from 0 to %u, or off", v,
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
        return report(ld, pending->line, s, "tls.certificate",
                      "no tls.key follows this certificate");
    if (c->nticket_keys != 0 && !c->session_tickets)
        return report(ld, c->ticket_keys[0].line, s, "tls.session_ticket_key",
                      "tls.session_tickets is off: no ticket is ever encrypted with this key");
    return 0;
}

/* [pulsar NAME] ----------------------------------------------------------------- */

/* Parses a URL entry into a new lk_url whose scheme is a or b. */
static int
url_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, enum lk_scheme a,
        enum lk_scheme b, struct lk_url **out)
{
    char msg[512];
    struct lk_url *u = lk_xmalloc(sizeof(*u));

    if (lk_url_parse(e->value, strlen(e->value), u, msg, sizeof(msg)) != 0) {
        free(u);
        return entry_err(ld, s, e, "%s", msg);
    }
    if (u->scheme != a && u->scheme != b) {
        report(ld, e->line, s, e->key, "%s: the scheme must be %s or %s", u->text,
               lk_scheme_name(a), lk_scheme_name(b));
        lk_url_free(u);
        free(u);
        return -1;
    }
    *out = u;
    return 0;
}

static struct lk_cluster *
find_cluster(const struct lk_conf *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->nclusters; i++)
        if (lk_str_eq(lk_str_c(c->clusters[i]->name), lk_str_make(name, len)))
            return c->clusters[i];
    return NULL;
}

/* Adds the cluster of section s, of either kind, with the defaults both
 * kinds share; NULL after an error. */
static struct lk_cluster *
new_cluster(struct loader *ld, struct lk_conf_section *s)
{
    struct lk_conf *c = ld->conf;
    struct lk_cluster *cl = lk_xcalloc(1, sizeof(*cl));
    const struct lk_cluster *dup = find_cluster(c, s->name, strlen(s->name));

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
        report(ld, s->line, s, NULL,
               "a cluster name cannot contain '/' (brokers are named CLUSTER/ID)");
        return NULL;
    }
    /* [broker NAME/ID] names the cluster by name alone. */
    if (dup != NULL) {
        report(ld, s->line, s, NULL, "cluster '%s' is already defined at line %d (" SECT_FMT ")",
               s->name, dup->line, SECT_ARGS(dup->section));
        return NULL;
    }
    return cl;
}

static int
bind_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
         struct lk_cluster *cl)
{
    char ip[INET6_ADDRSTRLEN];
    int family;

    if (parse_ip(e->value, ip, sizeof(ip), &family) != 0)
        return entry_err(ld, s, e, "'%s' is not an IP address (e.g. 0.0.0.0, 127.0.0.2, ::)",
                         e->value);
    free(cl->bind);
    cl->bind = lk_xstrdup(ip);
    return 0;
}

/* The health.* keys of either kind of cluster.  http checks need no test
 * of the brokers: a Pulsar broker's internal listener always has an http or
 * https address (resolve_listeners). */
static int
health_keys(struct loader *ld, struct lk_conf_section *s, struct lk_cluster *cl)
{
    struct lk_health_conf *h = &cl->health;
    struct lk_conf_entry *e, *be = NULL;
    unsigned long n;
    int v;

    if ((e = take(s, "health.fails")) != NULL) {
        if (parse_uint(e->value, 100, &n) != 0 || n == 0)
            return entry_err(ld, s, e, "'%s' is not a number from 1 to 100", e->value);
        h->fails = (unsigned)n;
    }
    if ((be = take(s, "health.backoff")) != NULL && duration_key(ld, s, be, &h->backoff_ms) != 0)
        return -1;
    if ((e = take(s, "health.backoff_max")) != NULL) {
        if (duration_key(ld, s, e, &h->backoff_max_ms) != 0)
            return -1;
        if (h->backoff_max_ms < h->backoff_ms)
            return entry_err(ld, s, e, "%s is below health.backoff (%u ms)", e->value,
                             h->backoff_ms);
    } else if (h->backoff_max_ms < h->backoff_ms) {
        h->backoff_max_ms = h->backoff_ms; /* a long health.backoff alone: no doubling */
    }
    if ((e = take(s, "health.check")) != NULL) {
        if ((v = parse_enum(e->value, health_check_names)) < 0)
            return entry_err(ld, s, e, "'%s' is not off, tcp or http", e->value);
        if (v == LK_HEALTH_CHECK_HTTP && cl->proto == LK_PROTO_KAFKA)
            return entry_err(ld, s, e, "Kafka brokers have no HTTP address to check: use tcp");
        h->check = (enum lk_health_check)v;
    }
    if ((e = take(s, "health.interval")) != NULL &&
        duration_key(ld, s, e, &h->interval_ms) != 0)
        return -1;
    if ((e = take(s, "health.timeout")) != NULL) {
        if (duration_key(ld, s, e, &h->timeout_ms) != 0)
            return -1;
        if (h->timeout_ms > h->interval_ms)
            return entry_err(ld, s, e,
                             "%s is above health.interval (%u ms): checks would overlap",
                             e->value, h->interval_ms);
    } else if (h->timeout_ms > h->interval_ms) {
        h->timeout_ms = h->interval_ms;
    }
    /* Only http checks ask for a path: a Kafka cluster has none to set. */
    if (cl->proto != LK_PROTO_KAFKA && (e = take(s, "health.path")) != NULL) {
        if (e->value[0] != '/')
            return entry_err(ld, s, e, "'%s' is not a path (it must start with '/')", e->value);
        for (const char *p = e->value; *p != '\0'; p++)
            if ((unsigned char)*p <= ' ' || *p == 0x7f)
                return entry_err(ld, s, e, "a path cannot hold spaces or control characters");
        free(h->path);
        h->path = lk_xstrdup(e->value);
    }
    return 0;
}

/* At most one of keys (a key and its older spelling): the entry in *out,
 * NULL when none is there.  0, or -1 when two are. */
static int
take_one_of(struct loader *ld, struct lk_conf_section *s, const char *const *keys,
            struct lk_conf_entry **out)
{
    struct lk_conf_entry *e;

    *out = NULL;
    for (const char *const *k = keys; *k != NULL; k++) {
        if ((e = take(s, *k)) == NULL)
            continue;
        if (*out != NULL)
            return entry_err(ld, s, e, "give either %s or %s, not both (the other is at line %d)",
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
load_registry_keys(struct loader *ld, struct lk_conf_section *s, struct lk_cluster *cl)
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

    if ((e = take(s, "internal_networks")) != NULL) {
        if ((n = lk_cidrs_parse(e->value, &cl->internal_networks, msg, sizeof(msg))) < 0)
            return entry_err(ld, s, e, "%s", msg);
        cl->ninternal_networks = (size_t)n;
    }
    if (take_one_of(ld, s, cl->proto == LK_PROTO_KAFKA ? kafka_zk : pulsar_zk, &zk) != 0)
        return -1;
    /* The session timeout, in the brokers' own keys and unit. */
    if (take_one_of(ld, s, cl->proto == LK_PROTO_KAFKA ? kafka_to : pulsar_to, &to) != 0)
        return -1;
    if (to != NULL) {
        if (zk == NULL)
            return entry_err(ld, s, to, "there is no ZooKeeper to time out: %s is not set",
                             cl->proto == LK_PROTO_KAFKA ? "zookeeper.connect"
                                                         : "metadataStoreUrl");
        if (parse_uint(to->value, 600000, &ms) != 0 || ms < 1000)
            return entry_err(ld, s, to,
                             "'%s' is not a session timeout in milliseconds from 1000 to 600000",
                             to->value);
        cl->zk_session_timeout_ms = (unsigned)ms;
    }
    if (zk == NULL)
        return 0;
    cl->zk = lk_xcalloc(1, sizeof(*cl->zk));
    if (lk_zk_connect_parse(zk->value, strcmp(zk->key, "metadataStoreUrl") == 0, cl->zk, msg,
                            sizeof(msg)) != 0)
        return entry_err(ld, s, zk, "%s", msg);
    if (cl->ninternal_networks == 0)
        return entry_err(ld, s, zk,
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
client_listeners_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                     struct lk_cluster *cl)
{
    const char *p = e->value;

    cl->client_listeners_line = e->line;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct lk_str item =
            lk_str_trim(lk_str_make(p, comma != NULL ? (size_t)(comma - p) : strlen(p)));

        if (item.len == 0)
            return entry_err(ld, s, e, "empty listener name (expected name, name, ...)");
        for (size_t i = 0; i < cl->nclient_listeners; i++)
            if (lk_str_eq(lk_str_c(cl->client_listeners[i]), item))
                return entry_err(ld, s, e, "'%.*s' is listed twice", (int)item.len, item.p);
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
leak_guard_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
               struct lk_cluster *cl)
{
    int v = parse_enum(e->value, leak_guard_names);

    if (v < 0)
        return entry_err(ld, s, e, "'%s' is not off, log, rewrite or block", e->value);
    cl->leak_guard = (enum lk_leak_guard)v;
    return 0;
}

static int
load_cluster(struct loader *ld, struct lk_conf_section *s)
{
    struct lk_cluster *cl = new_cluster(ld, s);
    struct lk_conf_entry *e, *ie;
    unsigned long n;
    int v;

    if (cl == NULL)
        return -1;
    cl->proto = LK_PROTO_HTTP | LK_PROTO_PULSAR; /* Pulsar clients speak both */
    cl->max_frame_bytes = DEFAULT_PULSAR_MAX_FRAME_BYTES;

    if ((ie = take(s, "internalListenerName")) != NULL) {
        if (ie->value[0] == '\0')
            return entry_err(ld, s, ie, "empty listener name");
        cl->internal_listener = lk_xstrdup(ie->value);
    }
    if ((e = take(s, "lookupListenerName")) != NULL) {
        if (e->value[0] == '\0')
            return entry_err(ld, s, e, "empty listener name");
        if (ie != NULL && strcmp(e->value, ie->value) == 0)
            return entry_err(ld, s, e,
                             "'%s' is the internal listener (line %d): lookout would listen on "
                             "the addresses it connects to",
                             e->value, ie->line);
        cl->lookup_listener = lk_xstrdup(e->value);
    }
    if ((e = take(s, "webServiceUrl")) != NULL &&
        url_key(ld, s, e, LK_SCHEME_HTTP, LK_SCHEME_HTTPS, &cl->web_service) != 0)
        return -1;
    if ((e = take(s, "serviceUrl")) != NULL &&
        url_key(ld, s, e, LK_SCHEME_PULSAR, LK_SCHEME_PULSAR_SSL, &cl->service) != 0)
        return -1;
    if ((e = take(s, "bind")) != NULL && bind_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = take(s, "redirects")) != NULL) {
        if ((v = parse_enum(e->value, redirects_names)) < 0)
            return entry_err(ld, s, e, "'%s' is not rewrite or follow", e->value);
        cl->redirects = (enum lk_redirects)v;
    }
    if ((e = take(s, "leak_guard")) != NULL && leak_guard_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = take(s, "follow.max_hops")) != NULL) {
        if (parse_uint(e->value, 100, &n) != 0 || n == 0)
            return entry_err(ld, s, e, "'%s' is not a number from 1 to 100", e->value);
        cl->follow_max_hops = (unsigned)n;
    }
    if ((e = take(s, "follow.replay_bytes")) != NULL &&
        size_key(ld, s, e, 0, &cl->follow_replay_bytes) != 0)
        return -1;
    if ((e = take(s, "max_frame_bytes")) != NULL &&
        size_key(ld, s, e, 1, &cl->max_frame_bytes) != 0)
        return -1;
    if ((e = take(s, "forwarded_headers")) != NULL &&
        onoff_key(ld, s, e, &cl->forwarded_headers) != 0)
        return -1;
    if ((e = take(s, "upstream.tls")) != NULL) {
        if ((v = parse_enum(e->value, upstream_tls_names)) < 0)
            return entry_err(ld, s, e, "'%s' is not match, plain or tls", e->value);
        cl->upstream_tls = (enum lk_upstream_tls)v;
    }
    if ((e = take(s, "pulsar_routing")) != NULL) {
        if ((v = parse_enum(e->value, pulsar_routing_names)) < 0)
            return entry_err(ld, s, e, "'%s' is not per-broker or service", e->value);
        if (v == LK_PULSAR_ROUTING_SERVICE && cl->service == NULL)
            return entry_err(ld, s, e,
                             "service routing sends every binary client through serviceUrl, "
                             "which this cluster does not have");
        cl->pulsar_routing = (enum lk_pulsar_routing)v;
    }
    if ((e = take(s, "client_listeners")) != NULL && client_listeners_key(ld, s, e, cl) != 0)
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
kafka_name_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, char **out)
{
    char msg[256];

    if (e->value[0] == '\0')
        return entry_err(ld, s, e, "empty listener name");
    if (lk_kafka_name_check(lk_str_c(e->value), msg, sizeof(msg)) != 0)
        return entry_err(ld, s, e, "%s", msg);
    *out = lk_kafka_name_dup(lk_str_c(e->value));
    return 0;
}

/* bootstrap.servers: "host:port,host:port", Kafka's client syntax; empty
 * items are skipped as the clients skip them.  Their scheme is set once the
 * lookup listener's protocol is known (resolve_kafka). */
static int
bootstrap_key(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
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
                return entry_err(ld, s, e, "%s", msg);
            cl->bootstrap = lk_xrealloc(cl->bootstrap, (cl->nbootstrap + 1) * sizeof(*cl->bootstrap));
            cl->bootstrap[cl->nbootstrap++] = u;
            for (size_t i = 0; i + 1 < cl->nbootstrap; i++)
                if (strcmp(cl->bootstrap[i].hostport, u.hostport) == 0)
                    return entry_err(ld, s, e, "%s is listed twice", u.hostport);
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (cl->nbootstrap == 0)
        return entry_err(ld, s, e, "no address (expected host:port,...)");
    return 0;
}

static int
load_kafka(struct loader *ld, struct lk_conf_section *s)
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
    if ((e = take(s, "client_listeners")) != NULL)
        return entry_err(ld, s, e,
                         "a [pulsar] key: Kafka clients cannot name a listener, every address "
                         "they get is lookupListenerName's");
    if ((ie = take(s, "inter.broker.listener.name")) != NULL) {
        if (kafka_name_key(ld, s, ie, &cl->internal_listener) != 0)
            return -1;
    } else {
        cl->internal_listener = lk_xstrdup(DEFAULT_KAFKA_INTERNAL);
    }
    /* Kafka clients connect to whatever Metadata names: without a lookup
     * listener lookout could only hand them the internal addresses. */
    if ((e = take(s, "lookupListenerName")) == NULL)
        return report(ld, s->line, s, NULL,
                      "lookupListenerName is missing (the listener whose addresses clients get; "
                      "a Kafka cluster cannot run without one)");
    if (kafka_name_key(ld, s, e, &cl->lookup_listener) != 0)
        return -1;
    if (strcmp(cl->lookup_listener, cl->internal_listener) == 0)
        return entry_err(ld, s, e,
                         "'%s' is the internal listener (%s%s): lookout would listen on the "
                         "addresses it connects to",
                         e->value, ie != NULL ? "inter.broker.listener.name" : "Kafka's default",
                         ie != NULL ? "" : " inter.broker.listener.name");
    e = take(s, "listener.security.protocol.map");
    n = lk_kafka_secmap_parse(e != NULL ? e->value : lk_kafka_default_secmap, &cl->secmap, msg,
                              sizeof(msg));
    if (n < 0)
        return e != NULL ? entry_err(ld, s, e, "%s", msg) : report(ld, s->line, s, NULL, "%s", msg);
    cl->nsecmap = (size_t)n;
    if ((e = take(s, "bootstrap.servers")) != NULL && bootstrap_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = take(s, "bind")) != NULL && bind_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = take(s, "max_frame_bytes")) != NULL &&
        size_key(ld, s, e, 1, &cl->max_frame_bytes) != 0)
        return -1;
    if ((e = take(s, "timeout.idle")) != NULL && duration_key(ld, s, e, &cl->idle_ms) != 0)
        return -1;
    if ((e = take(s, "unknown_api")) != NULL) {
        if ((v = parse_enum(e->value, unknown_api_names)) < 0)
            return entry_err(ld, s, e, "'%s' is not pass or drop", e->value);
        cl->unknown_api = (enum lk_unknown_api)v;
    }
    if ((e = take(s, "leak_guard")) != NULL && leak_guard_key(ld, s, e, cl) != 0)
        return -1;
    if ((e = take(s, "broker.pattern")) != NULL) {
        cl->pattern = lk_xcalloc(1, sizeof(*cl->pattern));
        if (lk_kafka_pattern_parse(e->value, cl->pattern, msg, sizeof(msg)) != 0)
            return entry_err(ld, s, e, "%s", msg);
        cl->pattern->line = e->line;
    }
    if (health_keys(ld, s, cl) != 0)
        return -1;
    return load_registry_keys(ld, s, cl);
}

/* [broker CLUSTER/ID] ------------------------------------------------------------ */

static int
is_kafka(const struct lk_cluster *cl)
{
    return cl->proto == LK_PROTO_KAFKA;
}

/* The entry a loaded broker's listeners come from: advertisedListeners,
 * advertised.listeners or registration. */
static struct lk_conf_entry *
listeners_entry(const struct lk_conf *c, const struct lk_broker *b)
{
    const struct lk_conf_section *s = find_section(c, "broker", b->name);
    struct lk_conf_entry *e;

    if (!is_kafka(b->cluster))
        return find_entry(s, "advertisedListeners");
    e = find_entry(s, "advertised.listeners");
    return e != NULL ? e : find_entry(s, "registration");
}

static int
listeners_line(const struct lk_conf *c, const struct lk_broker *b)
{
    const struct lk_conf_entry *e = b->live ? NULL : listeners_entry(c, b);

    /* A live broker has no section: its store key's line stands for it. */
    return e != NULL ? e->line : b->line;
}

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

/* The broker of cl other than b that has one of b's addresses, or NULL;
 * with NULL, every address of b is added to the index. */
static const struct lk_broker *
addr_claim(struct lk_cluster *cl, const struct lk_broker *b, const struct lk_url **clash)
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

/* Addresses are how lookout tells brokers apart (lk_cluster_find_addr), so
 * two brokers of one cluster cannot share one.  b is the cluster's last
 * broker, so any other match comes first. */
static int
check_broker_addrs(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                   const struct lk_broker *b)
{
    const struct lk_url *u;
    const struct lk_broker *o = addr_claim(b->cluster, b, &u);

    if (o != NULL)
        return entry_err(ld, s, e, "%s is also an address of broker %s (line %d)", u->hostport,
                         o->name, listeners_line(ld->conf, o));
    return 0;
}

/* Registration JSON ------------------------------------------------------------- */

/* Reads a whole regular file of at most max bytes; NULL with errno set
 * (EINVAL: not a regular file, EFBIG: too large). */
static char *
read_small_file(const char *path, size_t max, size_t *len)
{
    /* O_NONBLOCK: a FIFO given by mistake must not hang the load. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n;
    int e;

    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) != 0)
        goto fail;
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        goto fail;
    }
    /* The size is a hint only (a file in /proc says 0, a file may grow):
     * read to EOF, and stop past max. */
    *len = 0;
    do {
        if (*len == cap) {
            if (cap > max) {
                errno = EFBIG;
                goto fail;
            }
            cap = cap == 0 ? (size_t)st.st_size + 1 : cap * 2;
            if (cap > max + 1)
                cap = max + 1;
            buf = lk_xrealloc(buf, cap);
        }
        n = read(fd, buf + *len, cap - *len);
        if (n > 0)
            *len += (size_t)n;
    } while (n > 0);
    if (n < 0)
        goto fail;
    if (*len > max) {
        errno = EFBIG;
        goto fail;
    }
    close(fd);
    return buf;

fail:
    e = errno;
    free(buf);
    close(fd);
    errno = e;
    return NULL;
}

/* registration = FILE: the broker's listeners from its ZooKeeper
 * registration (/brokers/ids/ID), relative to the config's directory. */
static int
load_registration(struct loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                  struct lk_broker *b)
{
    char *text, msg[512];
    size_t len = 0;
    int rc;

    if (e->value[0] == '\0')
        return entry_err(ld, s, e, "empty path");
    b->registration = resolve_path(ld->conf, e->value);
    if ((text = read_small_file(b->registration, MAX_REGISTRATION_BYTES, &len)) == NULL)
        return entry_err(ld, s, e, "cannot read %s: %s", b->registration,
                         errno == EINVAL  ? "not a regular file"
                         : errno == EFBIG ? "larger than 1 MiB: is it a registration?"
                                          : strerror(errno));
    rc = lk_registry_kafka_listeners(text, len, &b->listeners, &b->nlisteners, msg, sizeof(msg));
    free(text);
    if (rc != 0)
        return entry_err(ld, s, e, "%s: %s", e->value, msg);
    return 0;
}

/* A Kafka broker: the node id from its name, and its listeners from
 * advertised.listeners or its registration file. */
static int
load_kafka_broker(struct loader *ld, struct lk_conf_section *s, struct lk_broker *b)
{
    const struct lk_cluster *cl = b->cluster;
    struct lk_conf_entry *al = take(s, "advertised.listeners"), *reg = take(s, "registration");
    unsigned long id;
    char msg[512];
    int n;

    /* The canonical decimal form only, so that [broker events/1] and
     * [broker events/01] cannot both name node 1. */
    if (parse_uint(b->id, INT32_MAX, &id) != 0 || (b->id[0] == '0' && b->id[1] != '\0'))
        return report(ld, s->line, s, NULL,
                      "'%s' is not a node id: Kafka's broker.id, an integer from 0 to 2147483647 "
                      "without leading zeros, e.g. [broker %s/1]",
                      b->id, cl->name);
    b->node_id = (int32_t)id;
    if (al != NULL && reg != NULL) {
        struct lk_conf_entry *second = al->line > reg->line ? al : reg;
        return entry_err(ld, s, second,
                         "give either advertised.listeners or registration, not both (the other "
                         "is at line %d)",
                         (second == al ? reg : al)->line);
    }
    if (al == NULL && reg == NULL)
        return report(ld, s->line, s, NULL, "advertised.listeners or registration is missing%s",
                      find_entry(s, "advertisedListeners") != NULL
                          ? " (advertisedListeners is Pulsar's key; Kafka's server.properties "
                            "spells it advertised.listeners)"
                          : "");
    if (al != NULL) {
        const struct lk_conf_entry *me = find_entry(cl->section, "listener.security.protocol.map");
        char mapname[128];

        if (me != NULL)
            snprintf(mapname, sizeof(mapname), "listener.security.protocol.map (line %d)",
                     me->line);
        else
            snprintf(mapname, sizeof(mapname),
                     "Kafka's default listener.security.protocol.map (%s)",
                     lk_kafka_default_secmap);
        if ((n = lk_kafka_listeners_parse(al->value, cl->secmap, cl->nsecmap, mapname,
                                          &b->listeners, msg, sizeof(msg))) < 0)
            return entry_err(ld, s, al, "%s", msg);
        b->nlisteners = (size_t)n;
    } else if (load_registration(ld, s, reg, b) != 0) {
        return -1;
    }
    return check_broker_addrs(ld, s, al != NULL ? al : reg, b);
}

/* A new broker ID of cluster cl, last in both lists. */
static struct lk_broker *
broker_add(struct lk_conf *c, struct lk_cluster *cl, const char *id, int line)
{
    struct lk_broker *b = lk_xcalloc(1, sizeof(*b));
    size_t n = strlen(cl->name) + 1 + strlen(id) + 1;

    b->name = lk_xmalloc(n);
    snprintf(b->name, n, "%s/%s", cl->name, id);
    b->id = lk_xstrdup(id);
    b->node_id = -1;
    b->cluster = cl;
    b->line = line;
    b->index = c->nbrokers;
    c->brokers = lk_xrealloc(c->brokers, (c->nbrokers + 1) * sizeof(*c->brokers));
    c->brokers[c->nbrokers++] = b;
    cl->brokers = lk_xrealloc(cl->brokers, (cl->nbrokers + 1) * sizeof(*cl->brokers));
    cl->brokers[cl->nbrokers++] = b;
    return b;
}

/* Undoes broker_add for the last broker, b. */
static void
broker_drop(struct lk_conf *c, struct lk_broker *b)
{
    c->nbrokers--;
    b->cluster->nbrokers--;
    lk_broker_free(b);
}

static int
load_broker(struct loader *ld, struct lk_conf_section *s)
{
    struct lk_conf *c = ld->conf;
    const char *slash = strchr(s->name, '/');
    struct lk_cluster *cl;
    struct lk_broker *b;
    struct lk_conf_entry *e;
    char msg[512];
    int n;

    if (slash == NULL || slash == s->name || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return report(ld, s->line, s, NULL, "the name must be CLUSTER/ID, e.g. [broker prod/b1]");
    cl = find_cluster(c, s->name, (size_t)(slash - s->name));
    if (cl == NULL)
        return report(ld, s->line, s, NULL,
                      "cluster '%.*s' is not defined (no [pulsar %.*s] or [kafka %.*s])",
                      (int)(slash - s->name), s->name, (int)(slash - s->name), s->name,
                      (int)(slash - s->name), s->name);

    b = broker_add(c, cl, slash + 1, s->line);

    if (is_kafka(cl))
        return load_kafka_broker(ld, s, b);
    if ((e = take(s, "advertisedListeners")) == NULL)
        return report(ld, s->line, s, NULL, "advertisedListeners is missing%s",
                      find_entry(s, "advertised.listeners") != NULL
                          ? " (advertised.listeners is Kafka's key; Pulsar's broker.conf spells "
                            "it advertisedListeners)"
                          : "");
    if ((n = lk_listeners_parse(e->value, &b->listeners, msg, sizeof(msg))) < 0)
        return entry_err(ld, s, e, "%s", msg);
    b->nlisteners = (size_t)n;
    return check_broker_addrs(ld, s, e, b);
}

/* Whether any broker of cl has a listener called name. */
static int
cluster_has_listener(const struct lk_cluster *cl, const char *name)
{
    for (size_t i = 0; i < cl->nbrokers; i++)
        if (lk_broker_listener(cl->brokers[i], name) != NULL)
            return 1;
    return 0;
}

/* "internal, external, vpn": the listener names of cl's brokers, each once,
 * in the order they first appear; "..." ends a list too long for buf. */
static void
listener_names(const struct lk_cluster *cl, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < cl->nbrokers; i++)
        for (size_t l = 0; l < cl->brokers[i]->nlisteners; l++) {
            const char *name = cl->brokers[i]->listeners[l].name;
            size_t j = 0;
            int n;

            /* a broker's listeners have distinct names (lk_listeners_parse) */
            while (j < i && lk_broker_listener(cl->brokers[j], name) == NULL)
                j++;
            if (j < i)
                continue;
            if (off + 2 + strlen(name) + sizeof(", ...") > len) {
                snprintf(buf + off, len - off, "%s...", off != 0 ? ", " : "");
                return;
            }
            n = snprintf(buf + off, len - off, "%s%s", off != 0 ? ", " : "", name);
            off += (size_t)n;
        }
}

/*
 * Each client_listeners name must be a listener of a broker of the file's
 * own ([broker] sections): a typo would otherwise let no client choose
 * anything, silently.  The store's brokers are not asked: they come and
 * go, and a map rebuilt from them must not fail on a name the file was
 * right about.  A cluster whose every broker comes from its store is
 * checked by no one; a name none of them has selects nothing then (the
 * filters find no such listener and leave those addresses, logged as
 * unmapped).
 */
static int
check_client_listeners(struct loader *ld, const struct lk_cluster *cl)
{
    size_t stat = 0;
    char have[256];

    for (size_t i = 0; i < cl->nbrokers; i++)
        stat += !cl->brokers[i]->live;
    for (size_t k = 0; stat != 0 && k < cl->nclient_listeners; k++) {
        const char *name = cl->client_listeners[k];
        size_t i = 0;

        while (i < cl->nbrokers &&
               (cl->brokers[i]->live || lk_broker_listener(cl->brokers[i], name) == NULL))
            i++;
        if (i < cl->nbrokers)
            continue;
        listener_names(cl, have, sizeof(have));
        return report(ld, cl->client_listeners_line, cl->section, "client_listeners",
                      "no broker has a listener '%s' (their listeners: %s)", name, have);
    }
    return 0;
}

/*
 * A service address sends what it accepts to any broker with an internal
 * address of its family (lk_pick_broker), so a static map needs one such
 * broker: webServiceUrl over a map of binary addresses only would answer
 * every request 503.  A store's brokers come later; lk_http.c and
 * lk_pulsar.c say so at run time while none has one.
 */
static int
check_service_families(struct loader *ld, struct lk_cluster *cl)
{
    static const char *const keys[] = {"webServiceUrl", "serviceUrl"};
    const struct lk_url *const urls[] = {cl->web_service, cl->service};
    static const enum lk_scheme families[] = {LK_SCHEME_HTTP, LK_SCHEME_PULSAR};

    if (cl->zk != NULL)
        return 0;
    for (int k = 0; k < 2; k++) {
        size_t i = 0;

        if (urls[k] == NULL)
            continue;
        while (i < cl->nbrokers &&
               lk_listener_pick(cl->brokers[i]->internal, families[k], 0) == NULL)
            i++;
        if (i < cl->nbrokers)
            continue;
        return entry_err(ld, cl->section, find_entry(cl->section, keys[k]),
                         "%s has nowhere to go: no broker's internal listener has a %s or %s "
                         "address",
                         urls[k]->text, lk_scheme_name(families[k]),
                         lk_scheme_name(lk_scheme_sibling(families[k])));
    }
    return 0;
}

/*
 * Finds each broker's internal and lookup listener once every broker of cl
 * is loaded.  A name that no broker has is the cluster key's mistake (a typo
 * in internalListenerName or lookupListenerName), so its line is named; a
 * name that only some brokers lack is those brokers' mistake.
 */
static int
resolve_listeners(struct loader *ld, struct lk_cluster *cl)
{
    static const char *const keys[] = {"internalListenerName", "lookupListenerName"};
    const char *const names[] = {cl->internal_listener, cl->lookup_listener};
    char msg[512];

    for (int k = 0; k < 2; k++) {
        char have[256];

        /* A store's brokers bring their listeners later, each checked. */
        if (names[k] == NULL || cluster_has_listener(cl, names[k]) ||
            (cl->zk != NULL && cl->nbrokers == 0))
            continue;
        listener_names(cl, have, sizeof(have));
        return entry_err(ld, cl->section, find_entry(cl->section, keys[k]),
                         "no broker has a listener '%s' (their listeners: %s)", names[k], have);
    }
    if (check_client_listeners(ld, cl) != 0)
        return -1;
    for (size_t i = 0; i < cl->nbrokers; i++) {
        struct lk_broker *b = cl->brokers[i];
        struct lk_conf_section *s = find_section(ld->conf, "broker", b->name);
        struct lk_conf_entry *e = find_entry(s, "advertisedListeners");

        /* Pulsar's own rule: no internalListenerName means the first listener. */
        if (cl->internal_listener == NULL)
            b->internal = &b->listeners[0];
        else if ((b->internal = lk_broker_listener(b, cl->internal_listener)) == NULL)
            return entry_err(ld, s, e, "listener '%s' is not defined", cl->internal_listener);
        if (cl->lookup_listener != NULL) {
            if ((b->lookup = lk_broker_listener(b, cl->lookup_listener)) == NULL)
                return entry_err(ld, s, e, "listener '%s' is not defined", cl->lookup_listener);
            if (b->lookup == b->internal)
                return entry_err(
                    ld, s, e,
                    "the lookup listener '%s' is the internal listener (the first one): "
                    "lookout would listen on the addresses it connects to",
                    b->lookup->name);
        }
        if (lk_pulsar_listeners_check(b->internal, b->lookup, msg, sizeof(msg)) != 0 ||
            lk_listener_internal_check(cl, b->internal, msg, sizeof(msg)) != 0)
            return entry_err(ld, s, e, "%s", msg);
    }
    return check_service_families(ld, cl);
}

/*
 * The Kafka counterpart: each broker's inter.broker.listener.name and
 * lookup listener, by name as Kafka normalises them.  The lookup listener
 * has one protocol across the cluster, since bootstrap.servers and
 * broker.pattern serve that protocol for any broker.
 */
static int
resolve_kafka(struct loader *ld, struct lk_cluster *cl)
{
    static const char *const keys[] = {"inter.broker.listener.name", "lookupListenerName"};
    const char *const names[] = {cl->internal_listener, cl->lookup_listener};
    const struct lk_broker *first = NULL;
    char msg[512];

    const struct lk_kafka_secmap *lsec = lk_kafka_secmap_find(
        cl->secmap, cl->nsecmap, lk_str_c(cl->lookup_listener));

    /* With a store, bootstrap.servers must be bound before any broker has
     * registered, so the cluster's own map gives the lookup listener's
     * protocol, and every registration must agree with it. */
    if (cl->zk != NULL && lsec == NULL)
        return report(ld, cl->line, cl->section, "listener.security.protocol.map",
                      "does not name the lookup listener '%s': with %s it gives the protocol "
                      "bootstrap.servers speaks before any broker registers (e.g. "
                      "listener.security.protocol.map = %s:SSL,%s:PLAINTEXT)",
                      cl->lookup_listener, "zookeeper.connect", cl->lookup_listener,
                      cl->internal_listener);
    for (int k = 0; k < 2; k++) {
        struct lk_conf_entry *e = find_entry(cl->section, keys[k]);
        char have[256];

        if (cluster_has_listener(cl, names[k]) || (cl->zk != NULL && cl->nbrokers == 0))
            continue;
        listener_names(cl, have, sizeof(have));
        if (e == NULL) /* the default PLAINTEXT */
            return report(ld, cl->line, cl->section, NULL,
                          "no broker has a listener '%s', Kafka's default "
                          "inter.broker.listener.name: set inter.broker.listener.name (their "
                          "listeners: %s)",
                          names[k], have);
        return entry_err(ld, cl->section, e, "no broker has a listener '%s' (their listeners: %s)",
                         names[k], have);
    }
    for (size_t i = 0; i < cl->nbrokers; i++) {
        struct lk_broker *b = cl->brokers[i];
        struct lk_conf_section *s = find_section(ld->conf, "broker", b->name);
        struct lk_conf_entry *e = listeners_entry(ld->conf, b);

        if ((b->internal = lk_broker_listener(b, cl->internal_listener)) == NULL)
            return entry_err(ld, s, e, "listener '%s' is not defined", cl->internal_listener);
        if ((b->lookup = lk_broker_listener(b, cl->lookup_listener)) == NULL)
            return entry_err(ld, s, e, "listener '%s' is not defined", cl->lookup_listener);
        if (lk_listener_internal_check(cl, b->internal, msg, sizeof(msg)) != 0)
            return entry_err(ld, s, e, "%s", msg);
        if (first == NULL) {
            first = b;
        } else if (lk_kafka_listener_security(b->lookup) !=
                   lk_kafka_listener_security(first->lookup)) {
            return entry_err(ld, s, e,
                             "the lookup listener '%s' is %s here but %s on broker %s (line %d): "
                             "bootstrap.servers and broker.pattern serve one protocol for every "
                             "broker",
                             b->lookup->name,
                             lk_kafka_security_name(lk_kafka_listener_security(b->lookup)),
                             lk_kafka_security_name(lk_kafka_listener_security(first->lookup)),
                             first->name, listeners_line(ld->conf, first));
        }
    }
    /* The entry points speak what the lookup listener speaks: static
     * brokers take their protocols from the cluster's map, as a store
     * cluster does before its brokers register. */
    enum lk_kafka_security sec =
        first != NULL ? lk_kafka_listener_security(first->lookup) : lsec->sec;
    for (size_t i = 0; i < cl->nbootstrap; i++)
        cl->bootstrap[i].scheme = lk_kafka_security_scheme(sec);
    cl->bootstrap_sasl = sec == LK_KAFKA_SASL_PLAINTEXT || sec == LK_KAFKA_SASL_SSL;
    if (cl->pattern != NULL) {
        cl->pattern->scheme = lk_kafka_security_scheme(sec);
        cl->pattern->sasl = cl->bootstrap_sasl;
    }
    return 0;
}

/* The store's registrations -------------------------------------------------------- */

void
lk_conf_reject_add(struct lk_cluster *cl, const char *znode, const char *reason)
{
    struct lk_live_reject *r;

    cl->rejects = lk_xrealloc(cl->rejects, (cl->nrejects + 1) * sizeof(*cl->rejects));
    r = &cl->rejects[cl->nrejects++];
    r->znode = lk_xstrdup(znode);
    r->reason = lk_xstrdup(reason);
}

/* Why live broker b (the cluster's last) cannot join the brokers before it,
 * or NULL: an address another broker has (lookout tells brokers apart by
 * address), or, for Kafka, a lookup protocol other than the one
 * bootstrap.servers speaks. */
static const char *
live_conflict(const struct lk_broker *b, char *msg, size_t len)
{
    struct lk_cluster *cl = b->cluster;

    if (is_kafka(cl)) {
        enum lk_kafka_security want =
            lk_kafka_secmap_find(cl->secmap, cl->nsecmap, lk_str_c(cl->lookup_listener))->sec;
        enum lk_kafka_security have = lk_kafka_listener_security(b->lookup);

        if (have != want) {
            snprintf(msg, len,
                     "the lookup listener '%s' is %s here but %s in the cluster's "
                     "listener.security.protocol.map, which bootstrap.servers speaks",
                     b->lookup->name, lk_kafka_security_name(have), lk_kafka_security_name(want));
            return msg;
        }
    }
    const struct lk_url *u;
    const struct lk_broker *o = addr_claim(cl, b, &u);
    if (o != NULL) {
        snprintf(msg, len, "%s is also an address of broker %s", u->hostport, o->name);
        return msg;
    }
    return NULL;
}

/*
 * Adds the registrations of set (cluster cl's store) as live brokers, in
 * znode order, after the static ones are resolved: a static broker of the
 * same name wins, and a registration that does not parse or conflicts with
 * an earlier broker is left out with its reason.
 */
static void
load_live(struct loader *ld, struct lk_cluster *cl, const struct lk_live_set *set)
{
    char msg[768];

    size_t nstatic = cl->nbrokers; /* live ones come after them */

    cl->zk_read = 1;
    cl->nregistrations = set->n;
    for (size_t i = 0; i < set->n; i++) {
        const struct lk_meta_node *nd = &set->nodes[i];
        struct lk_registration reg;
        struct lk_broker *b = NULL;
        const char *why;

        if (set->skip != NULL && set->skip[i])
            continue;
        for (size_t k = 0; k < nstatic && b == NULL; k++)
            if (strcmp(cl->brokers[k]->id, nd->name) == 0)
                b = cl->brokers[k];
        if (b != NULL) {
            b->overrides = 1;
            continue;
        }
        if (lk_registration_parse(cl, nd->name, (const char *)nd->data, nd->len, &reg, msg,
                                  sizeof(msg)) != 0) {
            lk_conf_reject_add(cl, nd->name, msg);
            continue;
        }
        b = broker_add(ld->conf, cl, nd->name, cl->zk_line);
        b->live = 1;
        b->node_id = reg.node_id;
        b->listeners = reg.listeners;
        b->nlisteners = reg.nlisteners;
        b->internal = &b->listeners[reg.internal];
        b->lookup = reg.lookup < reg.nlisteners ? &b->listeners[reg.lookup] : NULL;
        reg.listeners = NULL;
        reg.nlisteners = 0;
        lk_registration_free(&reg);
        if ((why = live_conflict(b, msg, sizeof(msg))) != NULL) {
            lk_conf_reject_add(cl, nd->name, why);
            broker_drop(ld->conf, b);
        }
    }
}

/* Binds ---------------------------------------------------------------------------- */

static unsigned
scheme_proto(enum lk_scheme scheme)
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

static const char *
proto_name(unsigned proto)
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
    if (scheme_proto(v->scheme) == LK_PROTO_KAFKA)
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
    if (v->broker != NULL && is_kafka(v->cluster))
        snprintf(buf, len, "[broker %s] %s", v->broker->name,
                 v->broker->registration != NULL ? "registration" : "advertised.listeners");
    else if (v->broker != NULL)
        snprintf(buf, len, "[broker %s] advertisedListeners", v->broker->name);
    else if (is_kafka(v->cluster))
        snprintf(buf, len, "[kafka %s] %s", v->cluster->name,
                 v->pattern != NULL ? "broker.pattern" : "bootstrap.servers");
    else
        snprintf(buf, len, "[pulsar %s] %s", v->cluster->name,
                 scheme_proto(v->scheme) == LK_PROTO_HTTP ? "webServiceUrl" : "serviceUrl");
}

/* Reports "new conflicts with old: why" at the new vhost's line. */
static int conflict(struct loader *ld, const struct lk_vhost *nv, const struct lk_vhost *ov,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int
conflict(struct loader *ld, const struct lk_vhost *nv, const struct lk_vhost *ov, const char *fmt,
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
    return report(ld, nv->line, NULL, NULL, "%s: %s conflicts with %s at line %d (%s): %s", no, nu,
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
/* A socket address for ip (canonical text, of family) and port, without
 * vhosts; NULL if getaddrinfo will not make one. */
static struct lk_bind *
bind_new(const char *ip, int family, uint16_t port, unsigned proto, int tls)
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

static int
add_vhost(struct loader *ld, struct lk_cluster *cl, const struct lk_broker *br,
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
    unsigned proto = scheme_proto(u->scheme);
    int tls = lk_scheme_is_tls(u->scheme), family;
    struct lk_bind *b = NULL;
    size_t i;

    if (parse_ip(u->host, ip, sizeof(ip), &family) != 0 &&
        parse_ip(cl->bind, ip, sizeof(ip), &family) != 0)
        return report(ld, line, NULL, NULL, "bad bind address '%s'", cl->bind); /* checked before */
    snprintf(text, sizeof(text), family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, (unsigned)u->port);

    for (i = 0; i < c->nbinds; i++)
        if (strcmp(c->binds[i]->text, text) == 0)
            b = c->binds[i];

    if (b != NULL) {
        const struct lk_vhost *first = &b->vhosts[0];

        if (b->tls != tls)
            return conflict(ld, &nv, first, "bind %s cannot mix TLS and plaintext", text);
        if (b->proto != proto)
            return conflict(ld, &nv, first, "bind %s cannot serve both %s and %s", text,
                            proto_name(b->proto), proto_name(proto));
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
        if ((b = bind_new(ip, family, u->port, proto, tls)) == NULL)
            return report(ld, line, NULL, NULL, "cannot make a socket address of %s", text);
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
    if (parse_ip(host, k->ip, sizeof(k->ip), &k->family) != 0) {
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
check_self_dial(struct loader *ld)
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
                rc = report(ld, v->line, NULL, NULL,
                            "%s: lookout would listen on %s (bind %s) and connect to it as "
                            "the internal address %s of broker %s (line %d)",
                            vo, vu, bd->text, keys[k].u->text, keys[k].br->name,
                            listeners_line(c, keys[k].br));
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
check_patterns(struct loader *ld)
{
    const struct lk_conf *c = ld->conf;

    for (size_t i = 0; i < c->nclusters; i++) {
        const struct lk_cluster *cl = c->clusters[i];
        const struct lk_kafka_pattern *pt = cl->pattern;
        char ip[INET6_ADDRSTRLEN];
        int family;

        if (pt == NULL)
            continue;
        if (pt->host_has_id || parse_ip(pt->host_prefix, ip, sizeof(ip), &family) != 0)
            parse_ip(cl->bind, ip, sizeof(ip), &family); /* checked at load */
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
                    return report(ld, pt->line, cl->section, "broker.pattern",
                                  "%s is the pattern's address for node %ld, which is not in the "
                                  "map, but line %d (%s) already serves it",
                                  u, (long)id, v->line, o);
                if (pt->port_has_id && bind_port(b) >= pt->port &&
                    bind_overlaps(b, family, ip, bind_port(b)) &&
                    lk_cluster_find_node(cl, id = bind_port(b) - pt->port) == NULL)
                    return report(ld, pt->line, cl->section, "broker.pattern",
                                  "node %ld, which is not in the map, would get port %u on %s, "
                                  "but bind %s listens there for %s at line %d (%s)",
                                  (long)id, (unsigned)bind_port(b), ip, b->text, u, v->line, o);
            }
        }
    }
    return 0;
}

static int
build_binds(struct loader *ld)
{
    struct lk_conf *c = ld->conf;

    for (size_t i = 0; i < c->nclusters; i++) {
        struct lk_cluster *cl = c->clusters[i];
        struct lk_conf_entry *e;

        /* No lookupListenerName: the brokers stay hidden, and only the
         * service addresses are exposed. */
        for (size_t j = 0; cl->lookup_listener != NULL && j < cl->nbrokers; j++) {
            const struct lk_broker *b = cl->brokers[j];
            int line = listeners_line(c, b);
            for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
                if (b->lookup->addr[sc] != NULL &&
                    add_vhost(ld, cl, b, NULL, b->lookup->addr[sc], line) != 0)
                    return -1;
        }
        if (cl->web_service != NULL && (e = find_entry(cl->section, "webServiceUrl")) != NULL &&
            add_vhost(ld, cl, NULL, NULL, cl->web_service, e->line) != 0)
            return -1;
        if (cl->service != NULL && (e = find_entry(cl->section, "serviceUrl")) != NULL &&
            add_vhost(ld, cl, NULL, NULL, cl->service, e->line) != 0)
            return -1;
        for (size_t j = 0; j < cl->nbootstrap; j++)
            if (add_vhost(ld, cl, NULL, NULL, &cl->bootstrap[j],
                          find_entry(cl->section, "bootstrap.servers")->line) != 0)
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
                return report(ld, pt->line, cl->section, "broker.pattern",
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
        struct lk_conf_section *s = find_section(c, "lookout", NULL);
        struct lk_conf_entry *e = find_entry(s, "admin");

        parse_ip_port(c->admin, ip, sizeof(ip), &family, &port); /* checked at load */
        for (size_t i = 0; i < c->nbinds; i++) {
            const struct lk_bind *b = c->binds[i];

            if (bind_overlaps(b, family, ip, port)) {
                char u[300];
                vhost_url(&b->vhosts[0], u, sizeof(u));
                return entry_err(ld, s, e, "%s conflicts with bind %s of %s (line %d)", c->admin,
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
                    return entry_err(ld, s, e,
                                     "%s is the internal address %s of broker %s (line %d)",
                                     c->admin, u->text, c->brokers[k]->name,
                                     listeners_line(c, c->brokers[k]));
            }
    }
    return check_self_dial(ld);
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

static int
check_unknown(struct loader *ld)
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
                    kafka = is_kafka(c->brokers[b]->cluster);
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
                return entry_err(ld, s, e, "unknown key (did you mean %s?)", kinds[own].keys[at]);
            for (size_t k = 0; k < nkinds; k++) {
                if (k == own || (at = in_list(kinds[k].keys, e->key, 1)) < 0)
                    continue;
                return entry_err(ld, s, e, "unknown key (%s belongs in a [%s] section%s)",
                                 kinds[k].keys[at], kinds[k].kind,
                                 strcmp(kinds[k].kind, "broker") != 0 ? ""
                                 : kinds[k].kafka                     ? " of a Kafka cluster"
                                                                      : " of a Pulsar cluster");
            }
            return entry_err(ld, s, e, "unknown key");
        }
    }
    return 0;
}

/* Loading -------------------------------------------------------------------------- */

static void
conf_free(struct lk_conf *c)
{
    size_t i, j;

    for (i = 0; i < c->nclusters; i++) {
        struct lk_cluster *cl = c->clusters[i];
        /* lk_flt_chain_new leaves filters NULL unless it built a chain. */
        if (cl->filters != NULL)
            lk_flt_chain_free(cl);
        free(cl->name);
        free(cl->internal_listener);
        free(cl->lookup_listener);
        for (j = 0; j < cl->nclient_listeners; j++)
            free(cl->client_listeners[j]);
        free(cl->client_listeners);
        lk_url_free(cl->web_service);
        free(cl->web_service);
        lk_url_free(cl->service);
        free(cl->service);
        lk_kafka_secmap_free(cl->secmap, cl->nsecmap);
        for (j = 0; j < cl->nbootstrap; j++)
            lk_url_free(&cl->bootstrap[j]);
        free(cl->bootstrap);
        lk_kafka_pattern_free(cl->pattern);
        free(cl->pattern);
        free(cl->bind);
        free(cl->health.path);
        free(cl->internal_networks);
        lk_zk_connect_free(cl->zk);
        free(cl->zk);
        for (j = 0; j < cl->nrejects; j++) {
            free(cl->rejects[j].znode);
            free(cl->rejects[j].reason);
        }
        free(cl->rejects);
        free(cl->addr_ix);
        free(cl->brokers);
        free(cl);
    }
    free(c->clusters);
    for (i = 0; i < c->nbrokers; i++)
        lk_broker_free(c->brokers[i]);
    free(c->brokers);
    for (i = 0; i < c->nbinds; i++)
        lk_bind_free(c->binds[i]);
    free(c->binds);
    for (i = 0; i < c->ncerts; i++) {
        free(c->certs[i].cert_file);
        free(c->certs[i].key_file);
    }
    free(c->certs);
    for (i = 0; i < c->nticket_keys; i++)
        free(c->ticket_keys[i].file);
    free(c->ticket_keys);
    for (i = 0; i < c->nsections; i++) {
        struct lk_conf_section *s = &c->sections[i];
        for (j = 0; j < s->nentries; j++) {
            free(s->entries[j].key);
            free(s->entries[j].value);
        }
        free(s->entries);
        free(s->kind);
        free(s->name);
    }
    free(c->sections);
    free(c->admin);
    free(c->admin_allow);
    free(c->admin_healthz_allow);
    free(c->admin_token_file);
    if (c->admin_token != NULL)
        memset(c->admin_token, 0, c->admin_token_len); /* a secret: not left in freed memory */
    free(c->admin_token);
    free(c->log_access_file);
    free(c->upstream_ca);
    free(c->file);
    free(c->dir);
    free(c);
}

static int
build(struct loader *ld, const char *text, size_t len)
{
    struct lk_conf *c = ld->conf;
    struct lk_conf_section *s;
    size_t i;

    if (read_ini(ld, text, len) != 0)
        return -1;

    if ((s = find_section(c, "lookout", NULL)) != NULL && load_lookout(ld, s) != 0)
        return -1;
    /* Clusters first: a broker may come before its cluster in the file. */
    for (i = 0; i < c->nsections; i++) {
        s = &c->sections[i];
        if (strcmp(s->kind, "pulsar") == 0 && load_cluster(ld, s) != 0)
            return -1;
        if (strcmp(s->kind, "kafka") == 0 && load_kafka(ld, s) != 0)
            return -1;
    }
    for (i = 0; i < c->nsections; i++)
        if (strcmp(c->sections[i].kind, "broker") == 0 && load_broker(ld, &c->sections[i]) != 0)
            return -1;
    /* A cluster with a store may start empty: its brokers register. */
    for (i = 0; i < c->nclusters; i++)
        if (c->clusters[i]->nbrokers == 0 && c->clusters[i]->zk == NULL)
            return report(ld, c->clusters[i]->line, c->clusters[i]->section, NULL,
                          "the cluster has no brokers (add [broker %s/ID] sections, or read "
                          "them from ZooKeeper with %s)",
                          c->clusters[i]->name,
                          is_kafka(c->clusters[i]) ? "zookeeper.connect" : "metadataStoreUrl");
    for (i = 0; i < c->nclusters; i++)
        if ((is_kafka(c->clusters[i]) ? resolve_kafka(ld, c->clusters[i])
                                      : resolve_listeners(ld, c->clusters[i])) != 0)
            return -1;
    for (i = 0; i < ld->nsets; i++) {
        struct lk_cluster *cl = find_cluster(c, ld->sets[i].cluster, strlen(ld->sets[i].cluster));
        /* A set of a cluster a reload removed, or whose store it dropped */
        if (cl != NULL && cl->zk != NULL)
            load_live(ld, cl, &ld->sets[i]);
    }

    /* Filters read their own keys from the cluster's section, so unknown
     * keys can only be told once every chain is built. */
    for (i = 0; i < c->nclusters; i++) {
        struct lk_cluster *cl = c->clusters[i];
        struct lk_conf_entry *e = take(cl->section, "filters");
        char msg[512] = "";
        const char *m = msg;

        if (lk_flt_chain_new(cl, e != NULL ? e->value : NULL, msg, sizeof(msg)) != 0) {
            /* The prefix below names the key already. */
            if (strncmp(m, "filters: ", 9) == 0)
                m += 9;
            return report(ld, e != NULL ? e->line : cl->line, cl->section, "filters", "%s",
                          m[0] != '\0' ? m : "cannot build the filter chain");
        }
    }
    if (check_unknown(ld) != 0)
        return -1;
    return build_binds(ld);
}

struct lk_conf *
lk_conf_load_buf(const char *name, const char *text, size_t len, char *err, size_t errlen)
{
    return lk_conf_load_live(name, text, len, NULL, 0, err, errlen);
}

struct lk_conf *
lk_conf_load_live(const char *name, const char *text, size_t len, const struct lk_live_set *sets,
                  size_t nsets, char *err, size_t errlen)
{
    struct lk_conf *c = lk_xcalloc(1, sizeof(*c));
    struct loader ld = {c, err, errlen, sets, nsets};
    long cores;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (len > LK_CONF_MAX_BYTES) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: larger than %u bytes: is it a config file?", name,
                     LK_CONF_MAX_BYTES);
        free(c);
        return NULL;
    }
    c->file = lk_xstrdup(name);
    c->dir = config_dir(name);
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

    if (build(&ld, text, len) != 0) {
        conf_free(c);
        return NULL;
    }
    return c;
}

char *
lk_conf_read(const char *path, size_t *lenp, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (f == NULL)
        goto fail;
    /* Read whole, whatever the file is (a pipe from <(...) has no size). */
    do {
        if (cap - len < 65536) {
            cap = cap != 0 ? cap * 2 : 65536;
            buf = lk_xrealloc(buf, cap);
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n != 0 && len <= LK_CONF_MAX_BYTES);
    if (ferror(f))
        goto fail;
    fclose(f);
    *lenp = len;
    return buf;

fail:
    if (err != NULL && errlen > 0)
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    if (f != NULL)
        fclose(f);
    free(buf);
    return NULL;
}

struct lk_conf *
lk_conf_load(const char *path, char *err, size_t errlen)
{
    size_t len;
    char *buf = lk_conf_read(path, &len, err, errlen);
    struct lk_conf *c;

    if (buf == NULL)
        return NULL;
    c = lk_conf_load_buf(path, buf, len, err, errlen);
    free(buf);
    return c;
}

struct lk_conf *
lk_conf_ref(struct lk_conf *conf)
{
    __atomic_add_fetch(&conf->refs, 1, __ATOMIC_RELAXED);
    return conf;
}

void
lk_conf_unref(struct lk_conf *conf)
{
    /* acq_rel: the last owner must see every other owner's reads finished
     * before it frees (the shared_ptr / kref pattern). */
    if (conf != NULL && __atomic_sub_fetch(&conf->refs, 1, __ATOMIC_ACQ_REL) == 0)
        conf_free(conf);
}

const char *
lk_conf_section_get(struct lk_conf_section *s, const char *key, int *line)
{
    struct lk_conf_entry *e = s != NULL ? take(s, key) : NULL;

    if (line != NULL)
        *line = e != NULL ? e->line : s != NULL ? s->line : 0;
    return e != NULL ? e->value : NULL;
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
    if ((pt->host_has_id || parse_ip(host, ip, sizeof(ip), &family) != 0) &&
        parse_ip(cl->bind, ip, sizeof(ip), &family) != 0) {
        snprintf(err, errlen, "bad bind address '%s'", cl->bind);
        return NULL;
    }
    if ((b = bind_new(ip, family, port, LK_PROTO_KAFKA, lk_scheme_is_tls(pt->scheme))) == NULL) {
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

/* Dump ------------------------------------------------------------------------------ */

static void
print_addrs(FILE *out, const struct lk_listener *l)
{
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
        if (l->addr[sc] != NULL)
            fprintf(out, " %s", l->addr[sc]->text);
}

/* The health.* settings, only when not all defaults, so that the usual
 * map reads as before. */
static void
dump_health(const struct lk_cluster *cl, FILE *out)
{
    const struct lk_health_conf *h = &cl->health;

    if (h->check == LK_HEALTH_CHECK_OFF && h->fails == 1 &&
        h->backoff_ms == DEFAULT_HEALTH_BACKOFF_MS &&
        h->backoff_max_ms == DEFAULT_HEALTH_BACKOFF_MAX_MS)
        return;
    fprintf(out, "  health   out of rotation after %u failure%s, for %u ms doubling up to %u ms",
            h->fails, h->fails == 1 ? "" : "s", h->backoff_ms, h->backoff_max_ms);
    if (h->check != LK_HEALTH_CHECK_OFF)
        fprintf(out, "; %s checks%s%s every %u ms, timeout %u ms", health_check_names[h->check],
                h->check == LK_HEALTH_CHECK_HTTP ? " of " : "",
                h->check == LK_HEALTH_CHECK_HTTP ? h->path : "", h->interval_ms, h->timeout_ms);
    fputc('\n', out);
    if (h->check != LK_HEALTH_CHECK_HTTP)
        return;
    /* lk_health.c checks a broker with binary addresses only otherwise. */
    for (size_t i = 0; i < cl->nbrokers; i++)
        if (lk_broker_upstream(cl->brokers[i], LK_SCHEME_HTTP, 0) == NULL) {
            fprintf(out, "           (a broker without an internal http or https address: a "
                         "Pulsar CONNECT to its binary address, answered CONNECTED)\n");
            break;
        }
}

/* "  internal networks 10.0.0.0/8, fd00::/8" when the cluster sets
 * internal_networks: the addresses lookout may dial. */
static void
dump_networks(const struct lk_cluster *cl, FILE *out)
{
    if (cl->ninternal_networks == 0)
        return;
    fprintf(out, "  internal networks ");
    for (size_t i = 0; i < cl->ninternal_networks; i++) {
        const struct lk_cidr *n = &cl->internal_networks[i];
        char a[INET6_ADDRSTRLEN];
        if (inet_ntop(n->family, n->addr, a, sizeof(a)) == NULL)
            snprintf(a, sizeof(a), "?");
        fprintf(out, "%s%s/%u", i != 0 ? ", " : "", a, n->bits);
    }
    fputc('\n', out);
}

/* The store a cluster's map is read from, and what it gave: its
 * registrations and those the map did not take. */
static void
dump_store(const struct lk_cluster *cl, FILE *out)
{
    if (cl->zk == NULL)
        return;
    fprintf(out, "  store    zookeeper %s %s: ", cl->zk->connect, cl->zk_path);
    if (!cl->zk_read) {
        fprintf(out, "not read (--check --live reads it); [broker] sections win over it for "
                     "the same name\n");
        return;
    }
    fprintf(out, "%zu registration%s, %zu refused\n", cl->nregistrations,
            cl->nregistrations == 1 ? "" : "s", cl->nrejects);
    for (size_t i = 0; i < cl->nrejects; i++)
        fprintf(out, "  refused  %s: %s\n", cl->rejects[i].znode, cl->rejects[i].reason);
}

/* " (live)" or " (static)" after a broker of a cluster with a store. */
static const char *
origin(const struct lk_broker *b)
{
    if (b->cluster->zk == NULL)
        return "";
    if (b->live)
        return " (live)";
    return b->overrides ? " (static, over its registration)" : " (static)";
}

static void
dump_cluster(const struct lk_cluster *cl, FILE *out)
{
    fprintf(out, "cluster %s (pulsar): ", cl->name);
    if (cl->internal_listener != NULL)
        fprintf(out, "internal listener '%s', ", cl->internal_listener);
    else
        fprintf(out, "internal listener (each broker's first), ");
    if (cl->lookup_listener != NULL)
        fprintf(out, "lookup listener '%s', ", cl->lookup_listener);
    else
        fprintf(out, "no lookup listener (brokers are not exposed, nothing is rewritten), ");
    fprintf(out, "redirects %s", redirects_names[cl->redirects]);
    if (cl->redirects == LK_REDIRECTS_FOLLOW)
        fprintf(out, " (at most %u hops, replay %zu bytes)", cl->follow_max_hops,
                cl->follow_replay_bytes);
    fprintf(out, ", leak_guard %s", leak_guard_names[cl->leak_guard]);
    /* Only when not the default, so that the usual map reads as before. */
    if (cl->upstream_tls != LK_UPSTREAM_TLS_MATCH)
        fprintf(out, ", upstream.tls %s", upstream_tls_names[cl->upstream_tls]);
    if (cl->pulsar_routing != LK_PULSAR_ROUTING_PER_BROKER)
        fprintf(out, ", pulsar_routing %s", pulsar_routing_names[cl->pulsar_routing]);
    if (!cl->forwarded_headers)
        fprintf(out, ", forwarded_headers off");
    for (size_t i = 0; i < cl->nclient_listeners; i++) {
        const char *name = cl->client_listeners[i];
        int internal = 0;
        for (size_t j = 0; j < cl->nbrokers && !internal; j++)
            internal = strcmp(cl->brokers[j]->internal->name, name) == 0;
        fprintf(out, "%s%s%s", i == 0 ? ", client_listeners " : ",", name,
                internal ? " (the internal listener: clients may ask for internal addresses)"
                         : "");
    }
    fprintf(out, ", filters ");
    for (size_t i = 0; i < cl->nfilters; i++)
        fprintf(out, "%s%s", i != 0 ? "," : "", cl->filters[i].ops->name);
    fprintf(out, "%s\n", cl->nfilters == 0 ? "(none)" : "");
    if (cl->web_service != NULL || cl->service != NULL)
        fprintf(out, "  service  %s%s%s\n", cl->web_service != NULL ? cl->web_service->text : "",
                cl->web_service != NULL && cl->service != NULL ? " " : "",
                cl->service != NULL ? cl->service->text : "");
    dump_health(cl, out);
    dump_networks(cl, out);
    dump_store(cl, out);

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        int first = 1;

        fprintf(out, "  broker %s%s\n    internal", b->name, origin(b));
        print_addrs(out, b->internal);
        fputc('\n', out);
        if (b->lookup != NULL) {
            fprintf(out, "    lookup  ");
            print_addrs(out, b->lookup);
            fputc('\n', out);
        }
        for (size_t l = 0; l < b->nlisteners; l++) {
            if (&b->listeners[l] == b->internal || &b->listeners[l] == b->lookup)
                continue;
            fprintf(out, "    listener '%s'", b->listeners[l].name);
            print_addrs(out, &b->listeners[l]);
            fputc('\n', out);
        }
        for (int sc = 0; b->lookup != NULL && sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *from = b->internal->addr[sc], *to;
            if (from == NULL)
                continue;
            fprintf(out, "%s%s -> ", first ? "    map      " : "             ", from->text);
            if ((to = lk_listener_pick(b->lookup, sc, lk_scheme_is_tls(sc))) != NULL)
                fprintf(out, "%s\n", to->text);
            else
                fprintf(out, "not rewritten (listener '%s' has no %s or %s address)\n",
                        b->lookup->name, lk_scheme_name(sc), lk_scheme_name(lk_scheme_sibling(sc)));
            first = 0;
        }
    }
}

/* The bind that serves cl's address host:port (for broker b, or the
 * bootstrap when b is NULL), or NULL. */
static const struct lk_bind *
bind_of(const struct lk_conf *conf, const struct lk_cluster *cl, const struct lk_broker *b,
        const struct lk_kafka_pattern *pt, const char *host, uint16_t port)
{
    for (size_t i = 0; i < conf->nbinds; i++)
        for (size_t j = 0; j < conf->binds[i]->nvhosts; j++) {
            const struct lk_vhost *v = &conf->binds[i]->vhosts[j];
            if (v->cluster == cl && v->broker == b && v->pattern == pt && v->port == port &&
                (host == NULL || strcmp(v->host, host) == 0))
                return conf->binds[i];
        }
    return NULL;
}

/* "SSL: lookout terminates TLS, SASL passes through": what lookout does on
 * a Kafka listener, as the client side (lookup) or the broker side. */
static void
print_security(FILE *out, enum lk_scheme scheme, int sasl, int upstream)
{
    enum lk_kafka_security sec =
        scheme == LK_SCHEME_KAFKA_SSL ? (sasl ? LK_KAFKA_SASL_SSL : LK_KAFKA_SSL)
                                      : (sasl ? LK_KAFKA_SASL_PLAINTEXT : LK_KAFKA_PLAINTEXT);

    fprintf(out, " (%s: %s%s)", lk_kafka_security_name(sec),
            lk_scheme_is_tls(scheme) ? (upstream ? "TLS to the broker" : "lookout terminates TLS")
                                     : (upstream ? "plaintext to the broker" : "plaintext"),
            sasl ? ", SASL passes through" : "");
}

static void
print_on_bind(FILE *out, const struct lk_bind *b)
{
    fprintf(out, " on bind %s\n", b != NULL ? b->text : "?");
}

static void
dump_kafka(const struct lk_conf *conf, const struct lk_cluster *cl, FILE *out)
{
    const struct lk_kafka_pattern *pt = cl->pattern;

    unsigned idle = cl->idle_ms;
    const char *unit = idle % 60000 == 0 ? "m" : idle % 1000 == 0 ? "s" : "ms";

    idle /= unit[0] == 'm' && unit[1] == '\0' ? 60000 : unit[0] == 's' ? 1000 : 1;
    fprintf(out,
            "cluster %s (kafka): inter.broker.listener.name '%s', lookup listener '%s', "
            "unknown_api %s, leak_guard %s, max_frame_bytes %zu, timeout.idle %u%s, filters ",
            cl->name, cl->internal_listener, cl->lookup_listener,
            unknown_api_names[cl->unknown_api], leak_guard_names[cl->leak_guard],
            cl->max_frame_bytes, idle, unit);
    for (size_t i = 0; i < cl->nfilters; i++)
        fprintf(out, "%s%s", i != 0 ? "," : "", cl->filters[i].ops->name);
    fprintf(out, "%s\n", cl->nfilters == 0 ? "(none)" : "");
    for (size_t i = 0; i < cl->nbootstrap; i++) {
        const struct lk_url *u = &cl->bootstrap[i];
        fprintf(out, "  bootstrap %s", u->hostport);
        print_security(out, u->scheme, cl->bootstrap_sasl, 0);
        print_on_bind(out, bind_of(conf, cl, NULL, NULL, u->host, u->port));
    }
    dump_health(cl, out);
    dump_networks(cl, out);
    dump_store(cl, out);
    if (pt != NULL) {
        fprintf(out, "  pattern   %s", pt->text);
        print_security(out, pt->scheme, pt->sasl, 0);
        fprintf(out, " for node ids not in the map");
        if (pt->port_has_id)
            fprintf(out, ", a socket per node, bound when it appears\n");
        else
            print_on_bind(out, bind_of(conf, cl, NULL, pt, NULL, pt->port));
    }
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        const struct lk_url *in = lk_kafka_addr(b->internal), *lu = lk_kafka_addr(b->lookup);

        fprintf(out, "  broker %s: node %ld", b->name, (long)b->node_id);
        if (b->registration != NULL)
            fprintf(out, ", from %s", b->registration);
        fputs(origin(b), out);
        fprintf(out, "\n    internal %s", in->text);
        print_security(out, in->scheme, b->internal->sasl, 1);
        fprintf(out, "\n    lookup   %s", lu->text);
        print_security(out, lu->scheme, b->lookup->sasl, 0);
        print_on_bind(out, bind_of(conf, cl, b, NULL, lu->host, lu->port));
        for (size_t l = 0; l < b->nlisteners; l++)
            if (&b->listeners[l] != b->internal && &b->listeners[l] != b->lookup)
                fprintf(out, "    listener %s\n", lk_kafka_addr(&b->listeners[l])->text);
        fprintf(out, "    map      node %ld: %s -> %s\n", (long)b->node_id, in->hostport,
                lu->hostport);
    }
}

char *
lk_conf_dump_text(const struct lk_conf *conf)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (f == NULL) { /* out of memory: as lk_xmalloc */
        fputs("lookout: out of memory\n", stderr);
        abort();
    }
    lk_conf_dump(conf, f);
    fclose(f);
    return buf;
}

struct lk_cluster *
lk_conf_cluster(const struct lk_conf *conf, const char *name)
{
    return find_cluster(conf, name, strlen(name));
}

void
lk_conf_dump(const struct lk_conf *conf, FILE *out)
{
    for (size_t i = 0; i < conf->nclusters; i++) {
        if (is_kafka(conf->clusters[i]))
            dump_kafka(conf, conf->clusters[i], out);
        else
            dump_cluster(conf->clusters[i], out);
    }
    if (conf->nbinds == 0)
        fprintf(out, "no binds: nothing is exposed\n");
    for (size_t i = 0; i < conf->nbinds; i++) {
        const struct lk_bind *b = conf->binds[i];

        fprintf(out, "bind %s %s (%s)\n", b->text, lk_scheme_name(b->vhosts[0].scheme),
                proto_name(b->proto));
        for (size_t j = 0; j < b->nvhosts; j++) {
            const struct lk_vhost *v = &b->vhosts[j];
            const struct lk_url *up;

            if (v->pattern != NULL) {
                fprintf(out, "  %s -> cluster %s broker.pattern (node ids not in the map)\n",
                        v->host, v->cluster->name);
                continue;
            }
            if (v->broker == NULL) {
                fprintf(out, "  %s -> cluster %s %s (any broker)\n", v->host, v->cluster->name,
                        is_kafka(v->cluster) ? "bootstrap.servers" : "service address");
                continue;
            }
            if (is_kafka(v->cluster)) {
                fprintf(out, "  %s -> broker %s (node %ld) at %s\n", v->host, v->broker->name,
                        (long)v->broker->node_id, lk_kafka_addr(v->broker->internal)->text);
                continue;
            }
            fprintf(out, "  %s -> broker %s at ", v->host, v->broker->name);
            /* Checked at load: the internal listener has this family. */
            up = lk_broker_upstream(v->broker, v->scheme, lk_scheme_is_tls(v->scheme));
            fprintf(out, "%s\n", up != NULL ? up->text : "?");
        }
    }
}
