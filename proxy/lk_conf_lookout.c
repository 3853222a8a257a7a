/*
 * The [lookout] section: the process's own settings (workers, the admin
 * listener, TLS, timeouts, limits, logs), its key table and the setters
 * that only it needs.  Its entries load in file order, since tls.certificate
 * and tls.key pair up by order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lk_conf.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"
#include "lk_conf_lookout.h"
#include "lk_conf_value.h"
#include "lk_log.h"
#include "lk_pool.h"

/* RFC 8446 4.6.1: a ticket lifetime is at most seven days. */
#define MAX_SESSION_LIFETIME_S (7u * 24 * 3600)
/* Decrypt-only keys are for rotation, not for hoarding. */
#define MAX_TICKET_KEY_FILES 16u
/* A bearer token file's largest size: a token is a line, not a document. */
#define MAX_ADMIN_TOKEN_BYTES 4096

#define C(field) offsetof(struct lk_conf, field)

static int
set_admin(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
          const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;
    char ip[INET6_ADDRSTRLEN];
    int family;
    uint16_t port;

    (void)k;
    if (lk_parse_ip_port(e->value, ip, sizeof(ip), &family, &port) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)",
                            e->value);
    free(c->admin);
    c->admin = lk_xstrdup(e->value);
    return 0;
}

static const size_t nadmin_allow = C(nadmin_allow), nadmin_healthz_allow = C(nadmin_healthz_allow);
static const size_t nproxy_protocol_trusted = C(nproxy_protocol_trusted);
static const size_t nlimit_exempt = C(nlimit_exempt);
static const struct lk_key_range burst_range = {1, LK_RATE_MAX};

/* Reads the bearer token of admin.token_file: one line of RFC 6750 b64token
 * characters, trailing whitespace (the newline an editor adds) ignored. */
static int
set_admin_token(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;
    char buf[MAX_ADMIN_TOKEN_BYTES + 1];
    struct stat st;
    ssize_t n = -1;
    int fd;

    (void)k;
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

static int
set_workers(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;
    unsigned long n;

    (void)k;
    if (strcmp(e->value, "auto") == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        c->workers = cores >= 1 ? (int)(cores > 1024 ? 1024 : cores) : 1;
    } else if (lk_parse_uint(e->value, 1024, &n) == 0 && n >= 1) {
        c->workers = (int)n;
    } else {
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not 'auto' or a number from 1 to 1024", e->value);
    }
    return 0;
}

static int
set_log_level(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
              const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;

    (void)k;
    if ((c->log_level = lk_log_level_parse(e->value)) < 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not error, warn, info or debug", e->value);
    return 0;
}

static int
set_log_access(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
               const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;

    (void)k;
    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty value: stderr, off, or a file's path");
    free(c->log_access_file);
    c->log_access_file = NULL;
    if (strcmp(e->value, "stderr") == 0) {
        c->log_access = LK_ACCESS_STDERR;
    } else if (strcmp(e->value, "off") == 0) {
        c->log_access = LK_ACCESS_OFF;
    } else {
        c->log_access = LK_ACCESS_FILE;
        c->log_access_file = lk_conf_path(c, e->value);
    }
    return 0;
}

/* log.buffer: 0 (each line written at once) to LK_LOG_BUFFER_MAX. */
#define LK_LOG_BUFFER_MAX (1024 * 1024)
static int
set_log_buffer(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
               const struct lk_conf_key *k, void *obj)
{
    size_t *size = LK_KEY_FIELD(k, obj, size_t);

    if (lk_conf_size(ld, s, e, 0, size) != 0)
        return -1;
    if (*size > LK_LOG_BUFFER_MAX)
        return LK_ENTRY_ERR(ld, s, e, "%s is over the maximum of 1m", e->value);
    return 0;
}

/* tls.certificate and tls.key pair up in file order: a certificate waits
 * for its key while the last one has none. */
static int
set_certificate(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;
    struct lk_cert *pending;

    (void)k;
    if (c->ncerts != 0 && c->certs[c->ncerts - 1].key_file == NULL)
        return lk_conf_err(ld, c->certs[c->ncerts - 1].line, s, "tls.certificate",
                           "no tls.key follows this certificate (the next one is at line %d)",
                           e->line);
    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty path");
    c->certs = lk_xrealloc(c->certs, (c->ncerts + 1) * sizeof(*c->certs));
    pending = &c->certs[c->ncerts++];
    pending->cert_file = lk_conf_path(c, e->value);
    pending->key_file = NULL;
    pending->line = e->line;
    return 0;
}

static int
set_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
        const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;

    (void)k;
    if (c->ncerts == 0)
        return LK_ENTRY_ERR(ld, s, e, "no tls.certificate before this key");
    if (c->certs[c->ncerts - 1].key_file != NULL)
        return LK_ENTRY_ERR(ld, s, e,
                            "the tls.certificate before this key (line %d) already has one",
                            c->certs[c->ncerts - 1].line);
    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty path");
    c->certs[c->ncerts - 1].key_file = lk_conf_path(c, e->value);
    return 0;
}

/* [lookout] has no inherit: it is what the clusters inherit. */
static int
set_verify_client(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                  const struct lk_conf_key *k, void *obj)
{
    if (lk_set_enum(ld, s, e, k, obj) != 0)
        return -1;
    if (*LK_KEY_FIELD(k, obj, int) == LK_VERIFY_INHERIT)
        return LK_ENTRY_ERR(ld, s, e, "'inherit' is for a cluster: [lookout] takes off, "
                                      "optional or on");
    return 0;
}

static int
set_ticket_key(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
               const struct lk_conf_key *k, void *obj)
{
    struct lk_conf *c = obj;

    (void)k;
    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty path");
    if (c->nticket_keys == MAX_TICKET_KEY_FILES)
        return LK_ENTRY_ERR(ld, s, e, "more than %u ticket keys", MAX_TICKET_KEY_FILES);
    c->ticket_keys = lk_xrealloc(c->ticket_keys, (c->nticket_keys + 1) * sizeof(*c->ticket_keys));
    c->ticket_keys[c->nticket_keys].file = lk_conf_path(c, e->value);
    c->ticket_keys[c->nticket_keys++].line = e->line;
    return 0;
}

static int
set_ticket_lifetime(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                    const struct lk_conf_key *k, void *obj)
{
    unsigned ms;

    if (lk_conf_duration(ld, s, e, &ms) != 0)
        return -1;
    if (ms < 1000 || ms / 1000 > MAX_SESSION_LIFETIME_S)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not from 1s to 7 days (10080m)", e->value);
    *LK_KEY_FIELD(k, obj, unsigned) = ms / 1000;
    return 0;
}

/* max_connections, max_connections_per_client: a cap, or off (0: none). */
static int
set_cap(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
        const struct lk_conf_key *k, void *obj)
{
    unsigned long n;

    if (strcmp(e->value, "off") == 0)
        n = 0;
    else if (lk_parse_uint(e->value, UINT_MAX, &n) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from 0 to %u, or off", e->value,
                            UINT_MAX);
    *LK_KEY_FIELD(k, obj, unsigned) = (unsigned)n;
    return 0;
}

static int
set_duration_or_off(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                    const struct lk_conf_key *k, void *obj)
{
    *LK_KEY_FIELD(k, obj, unsigned) = 0;
    return strcmp(e->value, "off") == 0 ? 0 : lk_set_duration(ld, s, e, k, obj);
}

/* max_connection_age.jitter: a percentage, "10%" (the sign may be left
 * out), from 0 to 50: past half, a connection could end at once. */
static int
set_percent(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    char num[8];
    size_t len = strlen(e->value);
    unsigned long n;

    if (len > 0 && e->value[len - 1] == '%')
        len--;
    if (len == 0 || len >= sizeof(num))
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a percentage from 0%% to 50%%", e->value);
    memcpy(num, e->value, len);
    num[len] = '\0';
    if (lk_parse_uint(num, 50, &n) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a percentage from 0%% to 50%%", e->value);
    *LK_KEY_FIELD(k, obj, unsigned) = (unsigned)n;
    return 0;
}

static const char *const log_format_names[] = {"text", "json", NULL};
static const char *const log_kafka_names[] = {"control", "all", NULL};
static const struct lk_key_range idle_pool_range = {0, 65535}, backlog_range = {1, INT_MAX};

#define I LK_KEY_INIT
/* clang-format off */
const struct lk_conf_key lk_conf_lookout_keys[] = {
    {"workers", LK_IN_LOOKOUT, set_workers, 0, NULL, I, "auto",
     "worker threads, each with its own event loop; auto: one per core"},
    {"io_uring", LK_IN_LOOKOUT, lk_set_onoff, C(io_uring), NULL, I, "on",
     "plaintext sockets read and written through io_uring, when built with it; off: readv "
     "and writev"},
    {"admin", LK_IN_LOOKOUT, set_admin, 0, NULL, 0, "none",
     "the admin listener's IP:port (/metrics, /healthz, /map)"},
    {"admin.allow", LK_IN_LOOKOUT, lk_set_cidrs, C(admin_allow), &nadmin_allow, I, "127.0.0.0/8, ::1",
     "CIDRs that may ask the admin listener anything"},
    {"admin.healthz_allow", LK_IN_LOOKOUT, lk_set_cidrs, C(admin_healthz_allow),
     &nadmin_healthz_allow, 0, "none", "CIDRs that may ask /healthz only, without a token"},
    {"proxy_protocol.trusted", LK_IN_LOOKOUT, lk_set_cidrs, C(proxy_protocol_trusted),
     &nproxy_protocol_trusted, 0, "none",
     "CIDRs whose connections to a proxy_protocol listener must start with a PROXY header"},
    {"admin.token_file", LK_IN_LOOKOUT, set_admin_token, 0, NULL, 0, "none",
     "a file holding the bearer token the admin listener asks for"},
    {"log_level", LK_IN_LOOKOUT, set_log_level, 0, NULL, I, "info",
     "error, warn, info or debug"},
    {"log.access", LK_IN_LOOKOUT, set_log_access, 0, NULL, I, "stderr",
     "where access log lines go: stderr, off, or a file's path"},
    {"log.format", LK_IN_LOOKOUT, lk_set_enum, C(log_format), log_format_names, I, "text",
     "the access log's lines: text or json"},
    {"log.kafka", LK_IN_LOOKOUT, lk_set_enum, C(log_kafka_all), log_kafka_names, I, "control",
     "which Kafka requests are logged: control, or all (Produce and Fetch too)"},
    {"log.buffer", LK_IN_LOOKOUT, set_log_buffer, C(log_buffer), NULL, I, "64k",
     "per worker: access log lines held until the end of the event loop's turn; 0: none"},
    {"tls.certificate", LK_IN_LOOKOUT, set_certificate, 0, NULL, 0, "none",
     "a certificate (chain) file for TLS listeners; repeatable, each followed by its tls.key"},
    {"tls.key", LK_IN_LOOKOUT, set_key, 0, NULL, 0, "none",
     "the private key of the tls.certificate before it"},
    {"tls.session_cache", LK_IN_LOOKOUT, lk_set_onoff, C(session_cache), NULL, I, "on",
     "a server-side TLS session cache per worker"},
    {"tls.session_tickets", LK_IN_LOOKOUT, lk_set_onoff, C(session_tickets), NULL, I, "on",
     "TLS session tickets"},
    {"tls.session_ticket_key", LK_IN_LOOKOUT, set_ticket_key, 0, NULL, 0, "none",
     "a ticket key file (80 or 48 bytes); repeatable, the first encrypts"},
    {"tls.session_ticket_lifetime", LK_IN_LOOKOUT, set_ticket_lifetime, C(session_lifetime_s),
     NULL, I, "5m", "how long a TLS session may be resumed, 1s to 7 days"},
    {"tls.verify_client", LK_IN_LOOKOUT, set_verify_client, C(verify_client),
     lk_verify_client_names, I, "off",
     "client certificates on TLS listeners: off, optional (a bad one fails), or on (required)"},
    {"tls.client_ca", LK_IN_LOOKOUT, lk_set_path, C(client_ca), NULL, 0, "none",
     "CA file that clients' certificates are checked against"},
    {"tls.client_crl", LK_IN_LOOKOUT, lk_set_path, C(client_crl), NULL, 0, "none",
     "CRL file (PEM) of revoked client certificates, read again on SIGHUP"},
    {"tls.upstream_ca", LK_IN_LOOKOUT, lk_set_path, C(upstream_ca), NULL, 0, "the system's CA store",
     "CA file that brokers' certificates are checked against"},
    {"tls.upstream_verify", LK_IN_LOOKOUT, lk_set_onoff, C(upstream_verify), NULL, I, "on",
     "check brokers' certificates"},
    {"timeout.connect", LK_IN_LOOKOUT, lk_set_duration, C(timeout_connect_ms), NULL, I, "5s",
     "connecting to a broker"},
    {"timeout.response", LK_IN_LOOKOUT, lk_set_duration, C(timeout_response_ms), NULL, I, "60s",
     "a broker's response head, once the request is sent"},
    {"timeout.client_header", LK_IN_LOOKOUT, lk_set_duration, C(timeout_client_header_ms), NULL, I,
     "10s", "a client's request head"},
    {"timeout.idle", LK_IN_LOOKOUT, lk_set_duration, C(timeout_idle_ms), NULL, I, "60s",
     "an idle HTTP or Pulsar connection, either side"},
    {"timeout.first_frame", LK_IN_LOOKOUT, set_duration_or_off, C(timeout_first_frame_ms), NULL,
     I, "10s", "a Kafka or Pulsar client's first frame; off: no limit"},
    {"drain_timeout", LK_IN_LOOKOUT, lk_set_duration, C(drain_timeout_ms), NULL, I, "30s",
     "how long exchanges may finish after SIGTERM or a reload"},
    {"max_header_bytes", LK_IN_LOOKOUT, lk_set_size, C(max_header_bytes), NULL, I, "32k",
     "the largest HTTP head, request or response"},
    {"max_buffer_bytes", LK_IN_LOOKOUT, lk_set_size, C(max_buffer_bytes), NULL, I, "1m",
     "the largest HTTP body a filter holds whole"},
    {"max_held_bytes", LK_IN_LOOKOUT, lk_set_size, C(max_held_bytes), NULL, I, "64m",
     "per worker: binary frames held to be rewritten; past it, reading waits"},
    {"upstream.idle_pool", LK_IN_LOOKOUT, lk_set_uint, C(upstream_idle_max), &idle_pool_range, I,
     "64", "idle broker connections kept per broker per worker"},
    {"listen.backlog", LK_IN_LOOKOUT, lk_set_uint, C(listen_backlog), &backlog_range, I, "4096",
     "the listen(2) backlog of each socket"},
    {"listen.defer_accept", LK_IN_LOOKOUT, lk_set_onoff, C(defer_accept), NULL, I, "on",
     "a connection is accepted once its first bytes are in (TCP_DEFER_ACCEPT), or after 1 s"},
    {"max_connections", LK_IN_LOOKOUT, set_cap, C(max_connections), NULL, I, "0",
     "client connections per worker; 0 or off: no cap"},
    {"max_connections_per_client", LK_IN_LOOKOUT, set_cap, C(max_connections_per_client), NULL,
     I, "0", "client connections per client address (an IPv6 /64); 0 or off: no cap"},
    {"limit.requests", LK_IN_LOOKOUT, lk_set_rate, C(limit), NULL, 0, "off",
     "HTTP requests per client address (an IPv6 /64) per cluster: N/s or N/m, answered 429 past it"},
    {"limit.burst", LK_IN_LOOKOUT, lk_set_uint, C(limit.burst), &burst_range, 0,
     "limit.requests' N", "requests a client may send at once before limit.requests paces it"},
    {"limit.exempt", LK_IN_LOOKOUT, lk_set_cidrs, C(limit_exempt), &nlimit_exempt, 0, "none",
     "CIDRs whose clients limit.requests never holds back"},
    {"max_connection_age", LK_IN_LOOKOUT, set_duration_or_off, C(max_connection_age_ms), NULL, I,
     "off", "a client connection this old is ended between exchanges, so that clients spread "
     "over the replicas behind a balancer; off: never"},
    {"max_connection_age.jitter", LK_IN_LOOKOUT, set_percent, C(max_connection_age_jitter), NULL,
     I, "10%", "each connection's max_connection_age is moved by up to this much either way "
     "(0% to 50%)"},
    {"max_connection_age.grace", LK_IN_LOOKOUT, lk_set_duration, C(max_connection_age_grace_ms),
     NULL, I, "30s", "how long a connection past max_connection_age may stay busy before it is "
     "closed"},
    {NULL, 0, NULL, 0, NULL, 0, NULL, NULL},
};
/* clang-format on */
#undef I

void
lk_conf_lookout_init(struct lk_conf *c)
{
    lk_conf_keys_init(lk_conf_lookout_keys, LK_IN_LOOKOUT, c);
}

int
lk_conf_load_lookout(struct lk_loader *ld, struct lk_conf_section *s)
{
    struct lk_conf *c = ld->conf;

    /* In file order, because tls.certificate and tls.key pair up by order. */
    for (size_t i = 0; i < s->nentries; i++) {
        struct lk_conf_entry *e = &s->entries[i];
        const struct lk_conf_key *k = lk_conf_key_find(lk_conf_lookout_keys, LK_IN_LOOKOUT,
                                                       e->key, 0);

        if (k == NULL)
            continue; /* unknown: reported once the filters took theirs */
        if (k->set(ld, s, e, k, c) != 0)
            return -1;
        e->used = 1;
    }
    if (c->ncerts != 0 && c->certs[c->ncerts - 1].key_file == NULL)
        return lk_conf_err(ld, c->certs[c->ncerts - 1].line, s, "tls.certificate",
                           "no tls.key follows this certificate");
    if (c->nticket_keys != 0 && !c->session_tickets)
        return lk_conf_err(ld, c->ticket_keys[0].line, s, "tls.session_ticket_key",
                           "tls.session_tickets is off: no ticket is ever encrypted with this key");
    return 0;
}
