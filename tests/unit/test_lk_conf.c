/*
 * Tests for the config loader (proxy/lk_conf*.c): the INI reader, the key
 * tables, every key and its default,
 * every error with its exact file:line, the binding rule and its conflicts,
 * lk_cluster_find_addr, the dump, and the shipped conf/lookout.conf.
 *
 * Configs are written one line per string (CONF(...)), so that the line
 * numbers in the expected messages can be counted off the source.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lk_broker.h"
#include "lk_conf.h"
#include "lk_conf_keys.h"
#include "lk_conf_load.h"
#include "lk_conf_ready.h"
#include "lk_conf_value.h"
#include "lk_filter.h"
#include "lk_log.h"
#include "lk_runtime.h"
#include "lk_test.h"

static char err[2048];

/* Joins a NULL-terminated list of lines, each followed by "\n". */
static char *
join(const char *const *lines)
{
    size_t len = 1;
    char *s;

    for (size_t i = 0; lines[i] != NULL; i++)
        len += strlen(lines[i]) + 1;
    s = malloc(len);
    s[0] = '\0';
    for (size_t i = 0; lines[i] != NULL; i++) {
        strcat(s, lines[i]);
        strcat(s, "\n");
    }
    return s;
}

static struct lk_conf *
load_as(const char *name, const char *const *lines)
{
    char *text = join(lines);
    struct lk_conf *c;

    err[0] = 'X'; /* the loader must clear it */
    err[1] = '\0';
    c = lk_conf_load_buf(name, text, strlen(text), err, sizeof(err));
    free(text);
    return c;
}

#define CONF(...) ((const char *const[]){__VA_ARGS__, NULL})
#define LOAD(...) load_as("t.conf", CONF(__VA_ARGS__))

static void
expect_err(const char *file, int line, const char *name, const char *want, const char *const *lines)
{
    struct lk_conf *c = load_as(name, lines);

    lk_test_ok(c == NULL, file, line, "refused");
    lk_test_ok_str(err, want, file, line, "message");
    lk_conf_unref(c);
}

#define EXPECT_ERR(want, ...) expect_err(__FILE__, __LINE__, "t.conf", (want), CONF(__VA_ARGS__))

/* The names of cl's filter chain as the dump prints them. */
static void
filter_names(const struct lk_cluster *cl, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < cl->nfilters && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i != 0 ? "," : "",
                                cl->filters[i].ops->name);
    if (cl->nfilters == 0)
        snprintf(buf, len, "(none)");
}

/* The default chain's filters that apply to protocols proto, in order, in
 * names (when not NULL); how many. */
static size_t
default_chain_for(unsigned proto, const char **names)
{
    size_t n = 0;

    for (size_t i = 0; lk_flt_default_chain[i] != NULL; i++) {
        const char *name = lk_flt_default_chain[i];
        const struct lk_flt_ops *ops = lk_flt_find(name, strlen(name));
        if (ops != NULL && (ops->protos & proto) != 0) {
            if (names != NULL)
                names[n] = name;
            n++;
        }
    }
    return n;
}

static size_t
default_chain_len(void)
{
    return default_chain_for(LK_PROTO_HTTP | LK_PROTO_PULSAR, NULL);
}

#define LOOKOUT_TLS "[lookout]", "tls.certificate = edge.crt", "tls.key = edge.key"
#define B1_LISTENERS                                                                               \
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"       \
    "external:pulsar+ssl://b1.pulsar.example.com:6651,external:https://b1.pulsar.example.com:8443"
#define B2_LISTENERS                                                                               \
    "advertisedListeners = internal:pulsar://10.0.0.12:6650,internal:http://10.0.0.12:8080,"       \
    "external:pulsar+ssl://b2.pulsar.example.com:6651,external:https://b2.pulsar.example.com:8443"
/* The CONTRACT's example cluster, lines 1-12. */
#define CONTRACT_CONF                                                                              \
    LOOKOUT_TLS, "[pulsar prod]", "internalListenerName = internal",                               \
        "lookupListenerName = external", "webServiceUrl = https://pulsar.example.com:8443",        \
        "serviceUrl = pulsar+ssl://pulsar.example.com:6651", "[broker prod/b1]", B1_LISTENERS,     \
        "[broker prod/b2]", B2_LISTENERS

static void
test_basic(void)
{
    struct lk_conf *c = LOAD(CONTRACT_CONF);
    const struct lk_cluster *cl;
    const struct lk_broker *b;
    const struct lk_bind *bd;
    const struct sockaddr_in *sin;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    ok_str(err, "", "err cleared on success");
    ok(c->refs == 1, "one reference");
    ok_str(c->file, "t.conf", "file as given");
    ok(c->nclusters == 1 && c->nbrokers == 2 && c->nbinds == 2 && c->ncerts == 1,
       "1 cluster, 2 brokers, 2 binds, 1 cert (%zu %zu %zu %zu)", c->nclusters, c->nbrokers,
       c->nbinds, c->ncerts);
    cl = c->clusters[0];
    ok_str(cl->name, "prod", "cluster name");
    ok(cl->proto == (LK_PROTO_HTTP | LK_PROTO_PULSAR), "a pulsar cluster serves http and pulsar");
    ok_str(cl->internal_listener, "internal", "internalListenerName");
    ok_str(cl->lookup_listener, "external", "lookupListenerName");
    ok_str(cl->web_service->text, "https://pulsar.example.com:8443", "webServiceUrl");
    ok_str(cl->service->text, "pulsar+ssl://pulsar.example.com:6651", "serviceUrl");
    ok(cl->line == 4 && cl->section != NULL && cl->section->line == 4, "cluster line 4");
    ok_str(cl->section->kind, "pulsar", "section kind");
    ok_str(cl->section->name, "prod", "section name");
    ok(cl->nbrokers == 2 && cl->brokers[0] == c->brokers[0] && cl->brokers[1] == c->brokers[1],
       "cluster brokers are the conf's");

    b = c->brokers[1];
    ok_str(b->name, "prod/b2", "broker name");
    ok_str(b->id, "b2", "broker id");
    ok(b->index == 1 && b->cluster == cl && b->line == 11, "index, cluster, line");
    ok(b->nlisteners == 2, "two listeners");
    ok(b->internal == &b->listeners[0] && strcmp(b->internal->name, "internal") == 0, "internal");
    ok(b->lookup == &b->listeners[1] && strcmp(b->lookup->name, "external") == 0, "lookup");

    /* bind 0.0.0.0:8443 https: b1, b2, then the service address */
    bd = c->binds[0];
    ok_str(bd->text, "0.0.0.0:8443", "first bind");
    ok(bd->proto == LK_PROTO_HTTP && bd->tls == 1, "http over TLS");
    if (ok(bd->nvhosts == 3, "three vhosts (%zu)", bd->nvhosts)) {
        ok_str(bd->vhosts[0].host, "b1.pulsar.example.com", "vhost 0 host");
        ok(bd->vhosts[0].broker == c->brokers[0] && bd->vhosts[0].cluster == cl &&
               bd->vhosts[0].scheme == LK_SCHEME_HTTPS && bd->vhosts[0].port == 8443 &&
               bd->vhosts[0].line == 10,
           "vhost 0 is b1's https at line 10");
        ok_str(bd->vhosts[1].host, "b2.pulsar.example.com", "vhost 1 host");
        ok(bd->vhosts[1].broker == c->brokers[1] && bd->vhosts[1].line == 12, "vhost 1 is b2");
        ok_str(bd->vhosts[2].host, "pulsar.example.com", "vhost 2 host");
        ok(bd->vhosts[2].broker == NULL && bd->vhosts[2].line == 7, "vhost 2 is the service");
    }
    sin = (const struct sockaddr_in *)&bd->addr;
    ok(bd->addr.ss_family == AF_INET && bd->addrlen == sizeof(struct sockaddr_in) &&
           sin->sin_port == htons(8443) && sin->sin_addr.s_addr == htonl(INADDR_ANY),
       "sockaddr 0.0.0.0:8443");

    bd = c->binds[1];
    ok_str(bd->text, "0.0.0.0:6651", "second bind");
    ok(bd->proto == LK_PROTO_PULSAR && bd->tls == 1 && bd->nvhosts == 3,
       "pulsar over TLS, 3 vhosts");
    ok(bd->nvhosts == 3 && bd->vhosts[2].broker == NULL &&
           bd->vhosts[2].scheme == LK_SCHEME_PULSAR_SSL && bd->vhosts[2].line == 8,
       "serviceUrl vhost at line 8");
    lk_conf_unref(c);
}

static void
test_defaults(void)
{
    struct lk_conf *c = LOAD("[pulsar dev]", "[broker dev/b1]",
                             "advertisedListeners = internal:http://10.0.0.11:8080");
    const struct lk_cluster *cl;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    ok(c->workers == (cores >= 1 ? cores : 1), "workers = cores (%d)", c->workers);
    ok(c->admin == NULL, "no admin listener");
    ok(c->ncerts == 0 && c->certs == NULL, "no certificates");
    ok(c->upstream_ca == NULL && c->upstream_verify == 1, "verify upstreams, system store");
    ok(c->timeout_connect_ms == 5000, "timeout.connect 5s");
    ok(c->timeout_response_ms == 60000, "timeout.response 60s");
    ok(c->max_connection_age_ms == 0, "max_connection_age off");
    ok(c->max_connection_age_jitter == 10, "max_connection_age.jitter 10%%");
    ok(c->max_connection_age_grace_ms == 30000, "max_connection_age.grace 30s");
    ok(c->timeout_client_header_ms == 10000, "timeout.client_header 10s");
    ok(c->timeout_idle_ms == 60000, "timeout.idle 60s");
    ok(c->drain_timeout_ms == 30000, "drain_timeout 30s");
    ok(c->max_header_bytes == 32 * 1024, "max_header_bytes 32k");
    ok(c->max_buffer_bytes == 1024 * 1024, "max_buffer_bytes 1m");
    ok(c->max_held_bytes == 64 * 1024 * 1024, "max_held_bytes 64m");
    ok(c->upstream_idle_max == 64, "upstream.idle_pool 64");
    ok(c->listen_backlog == 4096, "listen.backlog 4096");
    ok(c->defer_accept == 1, "listen.defer_accept on");
    ok(c->max_connections == 0 && c->max_connections_per_client == 0 &&
           c->timeout_first_frame_ms == 10000,
       "no connection caps; timeout.first_frame 10s");
    ok(c->log_level == LK_INFO, "log_level info");
    ok(c->session_cache == 1 && c->session_tickets == 1, "tls.session_cache, _tickets on");
    ok(c->nticket_keys == 0 && c->ticket_keys == NULL, "no ticket key files: own keys");
    ok(c->session_lifetime_s == 300, "tls.session_ticket_lifetime 5m");
    ok(c->dir != NULL && c->dir[0] == '/', "dir is absolute (%s)", c->dir);

    cl = c->clusters[0];
    ok_str(cl->bind, "0.0.0.0", "bind 0.0.0.0");
    ok(cl->redirects == LK_REDIRECTS_REWRITE, "redirects rewrite");
    ok(cl->leak_guard == LK_LEAK_LOG, "leak_guard log");
    ok(cl->follow_max_hops == 5, "follow.max_hops 5");
    ok(cl->follow_replay_bytes == 5 * 1024 * 1024, "follow.replay_bytes 5m");
    ok(cl->max_frame_bytes == 5 * 1024 * 1024 + 64 * 1024, "max_frame_bytes 5m + 64k");
    ok(cl->forwarded_headers == 1, "forwarded_headers on");
    ok(cl->upstream_tls == LK_UPSTREAM_TLS_MATCH, "upstream.tls match");
    ok(cl->internal_listener == NULL && cl->lookup_listener == NULL, "no listener names");
    ok(cl->web_service == NULL && cl->service == NULL, "no service addresses");
    ok(c->brokers[0]->internal == &c->brokers[0]->listeners[0], "internal = first listener");
    ok(c->brokers[0]->lookup == NULL, "no lookup listener");
    ok(c->nbinds == 0, "nothing bound");
    ok(cl->nfilters == default_chain_len(), "the default filter chain (%zu)", cl->nfilters);
    lk_conf_unref(c);

    /* An empty file is a valid config with nothing in it. */
    c = LOAD("# nothing here", "");
    ok(c != NULL && c->nclusters == 0 && c->nbinds == 0, "empty config loads (%s)", err);
    lk_conf_unref(c);
    c = lk_conf_load_buf("t.conf", "", 0, err, sizeof(err));
    ok(c != NULL, "zero bytes load");
    lk_conf_unref(c);
}

static void
test_lookout_keys(void)
{
    struct lk_conf *c =
        load_as("/etc/lookout/t.conf",
                CONF("[lookout]", "admin = 127.0.0.1:9901", "workers = 3", "log_level = debug",
                     "tls.certificate = a.crt", "tls.key = a.key", "tls.certificate = /etc/b.crt",
                     "tls.upstream_verify = off", /* other keys may sit inside a pair */
                     "tls.key = b.key", "tls.upstream_ca = ca/internal.crt",
                     "timeout.connect = 250ms", "timeout.response = 2m",
                     "timeout.client_header = 3s", "timeout.idle = 90s", "max_header_bytes = 64k",
                     "max_buffer_bytes = 2M", "max_held_bytes = 8m", "upstream.idle_pool = 0",
                     "listen.backlog = 100", "listen.defer_accept = off", "max_connection_age = 10m",
                     "max_connection_age.jitter = 0%", "max_connection_age.grace = 5s",
                     "drain_timeout = 1500ms"));

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    ok_str(c->admin, "127.0.0.1:9901", "admin");
    ok(c->workers == 3, "workers");
    ok(c->log_level == LK_DEBUG, "log_level");
    if (ok(c->ncerts == 2, "two certificates")) {
        ok_str(c->certs[0].cert_file, "/etc/lookout/a.crt", "cert 0");
        ok_str(c->certs[0].key_file, "/etc/lookout/a.key", "key 0");
        ok(c->certs[0].line == 5, "cert 0 line");
        ok_str(c->certs[1].cert_file, "/etc/b.crt", "cert 1: absolute stays");
        ok_str(c->certs[1].key_file, "/etc/lookout/b.key", "key 1");
        ok(c->certs[1].line == 7, "cert 1 line");
    }
    ok_str(c->upstream_ca, "/etc/lookout/ca/internal.crt", "tls.upstream_ca");
    ok(c->upstream_verify == 0, "tls.upstream_verify off");
    ok(c->timeout_connect_ms == 250, "timeout.connect");
    ok(c->timeout_response_ms == 120000, "timeout.response");
    ok(c->timeout_client_header_ms == 3000, "timeout.client_header");
    ok(c->timeout_idle_ms == 90000, "timeout.idle");
    ok(c->max_header_bytes == 65536, "max_header_bytes");
    ok(c->max_buffer_bytes == 2 * 1024 * 1024, "max_buffer_bytes");
    ok(c->max_held_bytes == 8 * 1024 * 1024, "max_held_bytes");
    ok(c->upstream_idle_max == 0, "upstream.idle_pool 0");
    ok(c->listen_backlog == 100, "listen.backlog");
    ok(c->defer_accept == 0, "listen.defer_accept off");
    ok(c->drain_timeout_ms == 1500, "drain_timeout");
    ok(c->max_connection_age_ms == 600000, "max_connection_age");
    ok(c->max_connection_age_jitter == 0, "max_connection_age.jitter 0%%");
    ok(c->max_connection_age_grace_ms == 5000, "max_connection_age.grace");
    lk_conf_unref(c);
    c = LOAD("[lookout]", "max_connection_age = off", "max_connection_age.jitter = 25");
    if (ok(c != NULL, "max_connection_age = off (%s)", err))
        ok(c->max_connection_age_ms == 0 && c->max_connection_age_jitter == 25,
           "... 0, and a jitter without its %% sign");
    lk_conf_unref(c);

    c = load_as("/etc/lookout/t.conf",
                CONF("[lookout]", "tls.session_cache = off", "tls.session_tickets = on",
                     "tls.session_ticket_key = keys/new.key", "workers = 2",
                     "tls.session_ticket_key = /etc/old.key", "tls.session_ticket_lifetime = 2m"));
    if (ok(c != NULL, "loads (%s)", err)) {
        ok(c->session_cache == 0 && c->session_tickets == 1, "tls.session_cache off, tickets on");
        if (ok(c->nticket_keys == 2, "two ticket keys, repeatable")) {
            ok_str(c->ticket_keys[0].file, "/etc/lookout/keys/new.key", "key 0, resolved");
            ok(c->ticket_keys[0].line == 4, "key 0 line");
            ok_str(c->ticket_keys[1].file, "/etc/old.key", "key 1, in order");
            ok(c->ticket_keys[1].line == 6, "key 1 line");
        }
        ok(c->session_lifetime_s == 120, "tls.session_ticket_lifetime 2m");
    }
    lk_conf_unref(c);
    c = LOAD("[lookout]", "tls.session_tickets = off", "tls.session_ticket_lifetime = 10080m");
    ok(c != NULL && c->session_tickets == 0 && c->session_cache == 1 &&
           c->session_lifetime_s == 7 * 24 * 3600,
       "tickets off, lifetime at its 7-day maximum (%s)", err);
    lk_conf_unref(c);

    c = LOAD("[lookout]", "workers = auto", "tls.upstream_verify = on", "workers.x = 1");
    ok(c == NULL, "refused for workers.x");
    lk_conf_unref(c);
    c = LOAD("[lookout]", "workers = auto", "tls.upstream_verify = on",
             "upstream.idle_pool = 65535", "log_level = error", "listen.backlog = 2147483647");
    if (ok(c != NULL, "loads (%s)", err)) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        ok(c->workers == (cores >= 1 ? cores : 1), "workers = auto is the core count");
        ok(c->upstream_verify == 1 && c->upstream_idle_max == 65535 && c->log_level == LK_ERR &&
               c->listen_backlog == 2147483647,
           "on, 65535, error, INT_MAX");
    }
    lk_conf_unref(c);
    c = LOAD("[lookout]", "max_connections = 4294967295", "max_connections_per_client = 100",
             "timeout.first_frame = 300ms");
    ok(c != NULL && c->max_connections == 4294967295u && c->max_connections_per_client == 100 &&
           c->timeout_first_frame_ms == 300,
       "max_connections, max_connections_per_client, timeout.first_frame (%s)", err);
    lk_conf_unref(c);
    c = LOAD("[lookout]", "max_connections = off", "max_connections_per_client = 0",
             "timeout.first_frame = off");
    ok(c != NULL && c->max_connections == 0 && c->max_connections_per_client == 0 &&
           c->timeout_first_frame_ms == 0,
       "off, 0 and off: no caps, no first-frame timeout (%s)", err);
    lk_conf_unref(c);
    c = LOAD("[lookout]", "workers = 1024", "admin = [::1]:9901", "log_level = warn");
    ok(c != NULL && c->workers == 1024 && strcmp(c->admin, "[::1]:9901") == 0 &&
           c->log_level == LK_WARN,
       "workers 1024, IPv6 admin, warn (%s)", err);
    lk_conf_unref(c);
}

static void
test_cluster_keys(void)
{
    static const char *const guards[] = {"off", "log", "rewrite", "block"};
    struct lk_conf *c =
        LOAD("[pulsar prod]", "internalListenerName = int", "lookupListenerName = ext",
             "webServiceUrl = http://127.0.0.1:8080/", "serviceUrl = pulsar://127.0.0.1:6650",
             "bind = 127.0.0.2", "redirects = follow", "leak_guard = block", "follow.max_hops = 7",
             "follow.replay_bytes = 0", "max_frame_bytes = 100m", "[broker prod/b1]",
             "advertisedListeners = int:http://10.0.0.1:8080,int:pulsar://10.0.0.1:6650,"
             "ext:http://b1.example.com:9000");
    const struct lk_cluster *cl;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    cl = c->clusters[0];
    ok_str(cl->internal_listener, "int", "internalListenerName");
    ok_str(cl->lookup_listener, "ext", "lookupListenerName");
    ok_str(cl->web_service->text, "http://127.0.0.1:8080", "webServiceUrl, slash dropped");
    ok_str(cl->service->text, "pulsar://127.0.0.1:6650", "serviceUrl");
    ok_str(cl->bind, "127.0.0.2", "bind");
    ok(cl->redirects == LK_REDIRECTS_FOLLOW, "redirects follow");
    ok(cl->leak_guard == LK_LEAK_BLOCK, "leak_guard block");
    ok(cl->follow_max_hops == 7, "follow.max_hops");
    ok(cl->follow_replay_bytes == 0, "follow.replay_bytes 0");
    ok(cl->max_frame_bytes == 100u * 1024 * 1024, "max_frame_bytes");
    if (ok(c->nbinds == 3, "three binds (%zu)", c->nbinds)) {
        ok_str(c->binds[0]->text, "127.0.0.2:9000", "a name binds `bind`");
        ok_str(c->binds[1]->text, "127.0.0.1:8080", "an IP literal binds itself");
        ok_str(c->binds[2]->text, "127.0.0.1:6650", "serviceUrl");
        ok(c->binds[2]->proto == LK_PROTO_PULSAR && c->binds[2]->tls == 0, "pulsar, plaintext");
        ok(c->binds[0]->proto == LK_PROTO_HTTP && c->binds[0]->tls == 0, "http, plaintext");
    }
    lk_conf_unref(c);

    for (int i = 0; i < 4; i++) {
        char line[64];
        snprintf(line, sizeof(line), "leak_guard = %s", guards[i]);
        c = LOAD("[pulsar p]", line, "redirects = rewrite", "[broker p/b]",
                 "advertisedListeners = i:http://h:1");
        ok(c != NULL && (int)c->clusters[0]->leak_guard == i &&
               c->clusters[0]->redirects == LK_REDIRECTS_REWRITE,
           "%s (%s)", line, err);
        lk_conf_unref(c);
    }
    c = LOAD("[pulsar p]", "bind = [::1]", "follow.max_hops = 100", "[broker p/b]",
             "advertisedListeners = i:http://h:1");
    ok(c != NULL && strcmp(c->clusters[0]->bind, "::1") == 0 &&
           c->clusters[0]->follow_max_hops == 100,
       "bind [::1], 100 hops (%s)", err);
    lk_conf_unref(c);
    c = LOAD("[pulsar p]", "bind = 0:0::0", "[broker p/b]", "advertisedListeners = i:http://h:1");
    ok(c != NULL && strcmp(c->clusters[0]->bind, "::") == 0, "bind is canonical (%s)", err);
    lk_conf_unref(c);
    c = LOAD("[pulsar p]", "forwarded_headers = off", "upstream.tls = plain", "[pulsar q]",
             "forwarded_headers = on", "upstream.tls = tls", "[broker p/b]",
             "advertisedListeners = i:http://h:1", "[broker q/b]",
             "advertisedListeners = i:http://h:2");
    if (ok(c != NULL, "loads (%s)", err)) {
        ok(c->clusters[0]->forwarded_headers == 0 &&
               c->clusters[0]->upstream_tls == LK_UPSTREAM_TLS_PLAIN,
           "forwarded_headers off, upstream.tls plain");
        ok(c->clusters[1]->forwarded_headers == 1 &&
               c->clusters[1]->upstream_tls == LK_UPSTREAM_TLS_TLS,
           "forwarded_headers on, upstream.tls tls");
    }
    lk_conf_unref(c);
}

/* upstream.tls: which internal address a client of each TLS-ness reaches. */
/* A map of binary addresses only, as Pulsar's broker.conf examples give
 * advertisedListeners: lookout serves no HTTP for it, so no internal http
 * address is asked for; --check shows each broker's binary map. */
static void
test_binary_only_map(void)
{
    struct lk_conf *c = LOAD(
        "[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",
        "serviceUrl = pulsar+ssl://pulsar.example.com", "[broker prod/b1]",
        "advertisedListeners = internal:pulsar://10.0.0.1:6650,"
        "external:pulsar+ssl://b1.example.com:6651",
        "[broker prod/b2]",
        "advertisedListeners = internal:pulsar://10.0.0.2:6650,internal:pulsar+ssl://10.0.0.2:6651,"
        "external:pulsar://b2.example.com:6650",
        "[broker prod/b3]",
        "advertisedListeners = internal:pulsar+ssl://10.0.0.3:6651,"
        "external:pulsar+ssl://b3.example.com:6651");
    char *dump;

    if (!ok(c != NULL, "a binary-only map loads (%s)", err))
        return;
    for (size_t i = 0; i < 3; i++)
        ok(lk_broker_upstream(c->brokers[i], LK_SCHEME_HTTP, 0) == NULL &&
               lk_broker_upstream(c->brokers[i], LK_SCHEME_PULSAR, 1) != NULL,
           "b%zu: a binary upstream, no http one", i + 1);
    dump = lk_conf_dump_text(c);
    ok(strstr(dump, "    map      pulsar://10.0.0.1:6650 -> pulsar+ssl://b1.example.com:6651\n") !=
           NULL,
       "--check maps b1's binary address");
    ok(strstr(dump, "pulsar+ssl://10.0.0.2:6651 -> pulsar://b2.example.com:6650\n") != NULL,
       "--check maps b2's TLS address to its one lookup address");
    ok(strstr(dump, "pulsar+ssl://10.0.0.3:6651 -> pulsar+ssl://b3.example.com:6651\n") != NULL,
       "--check maps b3's");
    ok(strstr(dump, "http://") == NULL, "no http address anywhere:\n%s", dump);
    free(dump);
    lk_conf_unref(c);

    /* A mixed map behind webServiceUrl: HTTP goes to the brokers that take
     * it (lk_pick_broker), so one is enough. */
    c = LOAD("[pulsar prod]", "webServiceUrl = http://pulsar.example.com",
             "lookupListenerName = external", "[broker prod/b1]",
             "advertisedListeners = internal:pulsar://10.0.0.1:6650,external:pulsar://b1:6650",
             "[broker prod/b2]",
             "advertisedListeners = internal:pulsar://10.0.0.2:6650,internal:http://10.0.0.2:8080,"
             "external:pulsar://b2:6651");
    ok(c != NULL, "a mixed map behind webServiceUrl loads (%s)", err);
    lk_conf_unref(c);
}

/* A lookup listener without a web address, on a broker that has an
 * internal one, leaves lk_location_pick nothing for its Location unless
 * webServiceUrl is set: a warning at the broker's line, not a refusal. */
static void
test_no_web_warning(void)
{
    struct lk_conf *c = LOAD(
        "[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",
        "[broker prod/b1]",
        "advertisedListeners = internal:pulsar://10.0.0.1:6650,internal:http://10.0.0.1:8080,"
        "external:pulsar://127.0.0.1:16650",
        "[broker prod/b2]",
        "advertisedListeners = internal:pulsar://10.0.0.2:6650,external:pulsar://127.0.0.2:16650",
        "[broker prod/b3]",
        "advertisedListeners = internal:http://10.0.0.3:8080,external:http://127.0.0.3:18080");

    if (ok(c != NULL, "loads (%s)", err) &&
        ok(c->nwarnings == 1, "one warning (%zu)", c->nwarnings))
        ok_str(c->warnings[0],
               "t.conf:5: [broker prod/b1] advertisedListeners: the lookup listener 'external' has "
               "no http or https address, and the cluster no webServiceUrl: a 307 to this broker "
               "reaches clients with its internal Location (add an http or https address to "
               "'external', or set webServiceUrl)",
               "b1 only: b2 has no web address to leak, b3's lookup listener has one");
    lk_conf_unref(c);

    c = LOAD("[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",
             "webServiceUrl = http://127.0.0.1:18095", "[broker prod/b1]",
             "advertisedListeners = internal:pulsar://10.0.0.1:6650,internal:http://10.0.0.1:8080,"
             "external:pulsar://127.0.0.1:16650");
    if (ok(c != NULL, "loads with webServiceUrl (%s)", err)) {
        ok(c->nwarnings == 0, "webServiceUrl stands in: no warning (%zu)", c->nwarnings);
        char *d = lk_conf_dump_text(c);
        ok(strstr(d, "http://10.0.0.1:8080 -> http://127.0.0.1:18095 (webServiceUrl: listener "
                     "'external' has no http or https address)\n") != NULL,
           "--check shows the stand-in:\n%s", d);
        free(d);
    }
    lk_conf_unref(c);

    c = LOAD("[pulsar prod]", "internalListenerName = internal", "[broker prod/b1]",
             "advertisedListeners = internal:pulsar://10.0.0.1:6650,internal:http://10.0.0.1:8080,"
             "external:pulsar://127.0.0.1:16650");
    if (ok(c != NULL, "loads without lookupListenerName (%s)", err))
        ok(c->nwarnings == 0, "nothing is rewritten anyway: no warning (%zu)", c->nwarnings);
    lk_conf_unref(c);
}

static void
test_broker_upstream(void)
{
    static const char *const modes[] = {"match", "plain", "tls"};
    /* [mode][client_tls]: the port of the address used for b1 (both
     * addresses), then for b2 (http only) and b3 (https only). */
    static const unsigned want[3][2][3] = {
        {{8080, 9080, 9443}, {8443, 9080, 9443}},
        {{8080, 9080, 9443}, {8080, 9080, 9443}},
        {{8443, 9080, 9443}, {8443, 9080, 9443}},
    };

    for (int m = 0; m < 3; m++) {
        char mode[64];
        snprintf(mode, sizeof(mode), "upstream.tls = %s", modes[m]);
        struct lk_conf *c =
            LOAD("[pulsar p]", mode, "[broker p/b1]",
                 "advertisedListeners = i:http://10.0.0.1:8080,i:https://10.0.0.1:8443",
                 "[broker p/b2]", "advertisedListeners = i:http://10.0.0.2:9080", "[broker p/b3]",
                 "advertisedListeners = i:https://10.0.0.3:9443");
        if (!ok(c != NULL, "%s loads (%s)", mode, err))
            continue;
        for (int tls = 0; tls < 2; tls++)
            for (int b = 0; b < 3; b++) {
                const struct lk_url *u = lk_broker_upstream(c->brokers[b], LK_SCHEME_HTTP, tls);
                ok(u != NULL && u->port == want[m][tls][b], "%s, %s client, b%d: port %u", mode,
                   tls ? "TLS" : "plaintext", b + 1, u != NULL ? u->port : 0);
            }
        /* The Pulsar family has no address here at all. */
        ok(lk_broker_upstream(c->brokers[0], LK_SCHEME_PULSAR, 1) == NULL, "%s: no pulsar", mode);
        lk_conf_unref(c);
    }
}

static void
test_comments(void)
{
    struct lk_conf *c = LOAD(
        "\xef\xbb\xbf# a comment at the very start, after a byte order mark",
        "; a semicolon comment", "   # an indented comment with [brackets] and key = value",
        "[pulsar prod] # a comment after a header", "internalListenerName=in#ternal",
        "lookupListenerName = ext;x ; a comment after a value", "\t bind\t=\t127.0.0.2\t# tabs\r",
        "", "[broker prod/b1]\r",
        "advertisedListeners = in#ternal:http://10.0.0.1:80,ext;x:http://b1.example.com:8080 #c",
        "#advertisedListeners = nope", ";[broker prod/b2]");
    const struct lk_cluster *cl;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    cl = c->clusters[0];
    ok_str(cl->internal_listener, "in#ternal", "'#' inside a value is kept");
    ok_str(cl->lookup_listener, "ext;x", "';' inside a value is kept, the comment is not");
    ok_str(cl->bind, "127.0.0.2", "tabs and CR around a value");
    ok(cl->section->line == 4 && cl->section->nentries == 3, "three entries in [pulsar prod]");
    ok(c->nsections == 2 && c->nbrokers == 1, "commented sections do not exist");
    ok_str(c->sections[1].entries[0].value,
           "in#ternal:http://10.0.0.1:80,ext;x:http://b1.example.com:8080",
           "advertisedListeners without its comment");
    ok(c->sections[1].entries[0].line == 10, "line numbers count comment lines");
    ok_str(c->brokers[0]->internal->name, "in#ternal", "internal listener");
    ok_str(c->brokers[0]->lookup->name, "ext;x", "lookup listener");
    lk_conf_unref(c);
}

static void
test_long_lines(void)
{
    size_t cap = 256 * 1024, len = 0;
    char *listeners = malloc(cap), *comment = malloc(100 * 1024 + 2);
    struct lk_conf *c;

    len += (size_t)snprintf(listeners, cap, "advertisedListeners = ");
    for (int i = 0; i < 300; i++)
        len += (size_t)snprintf(listeners + len, cap - len, "l%d:http://host-%d.example.com:%d,", i,
                                i, 2000 + i);
    len += (size_t)snprintf(listeners + len, cap - len,
                            "ext:https://b1.example.com:8443,internal:http://10.0.0.1:8080");
    ok(len > 8 * 1024, "the listener line is %zu bytes", len);
    comment[0] = '#';
    memset(comment + 1, 'c', 100 * 1024);
    comment[100 * 1024 + 1] = '\0';

    c = LOAD(LOOKOUT_TLS, comment, "[pulsar prod]", "internalListenerName = internal",
             "lookupListenerName = ext", "[broker prod/b1]", listeners);
    if (ok(c != NULL, "loads (%.200s)", err)) {
        const struct lk_broker *b = c->brokers[0];
        ok(b->nlisteners == 302, "302 listeners (%zu)", b->nlisteners);
        ok(b->internal == &b->listeners[301], "internal is the last listener, past 8 KiB");
        ok(b->lookup == &b->listeners[300], "lookup found");
        ok(c->nbinds == 1 && strcmp(c->binds[0]->text, "0.0.0.0:8443") == 0, "one bind");
    }
    lk_conf_unref(c);

    /* the line number after a 100 KiB line is still right */
    EXPECT_ERR("t.conf:10: [broker prod/b1] advertisedListeners: listener 'missing' is not defined",
               LOOKOUT_TLS, comment, "[pulsar prod]", "internalListenerName = missing",
               "lookupListenerName = ext", "", "[broker prod/b1]", listeners, "[broker prod/b2]",
               "advertisedListeners = missing:http://10.0.0.2:8080,ext:https://b2.example.com");

    /* a name no broker has: the list of those they have is cut short */
    c = LOAD(LOOKOUT_TLS, "[pulsar prod]", "internalListenerName = missing", "[broker prod/b1]",
             listeners);
    ok(c == NULL &&
           strncmp(err,
                   "t.conf:5: [pulsar prod] internalListenerName: no broker has a "
                   "listener 'missing' (their listeners: l0, l1, l2, ",
                   100) == 0 &&
           strlen(err) < 400 && strcmp(err + strlen(err) - 6, ", ...)") == 0,
       "a long list of names ends in '...' (%s)", err);
    free(listeners);
    free(comment);
}

static void
test_reader_errors(void)
{
    static const struct {
        const char *text, *err;
    } t[] = {
        {"[lookout", "t.conf:1: section header without ']'"},
        {"[lookout] x", "t.conf:1: unexpected text after ']'"},
        {"[lookout]]", "t.conf:1: unexpected text after ']'"},
        {"[ ]", "t.conf:1: empty section header (expected [kind name])"},
        {"[pulsar a b]", "t.conf:1: section header has more than two words (expected [kind name])"},
        {"[lookout]\n\n[kafka]", "t.conf:3: [kafka] needs a name: [kafka NAME]"},
        {"[zookeeper x]",
         "t.conf:1: unknown section kind 'zookeeper' (expected lookout, pulsar, kafka or broker)"},
        {"[Pulsar prod]",
         "t.conf:1: unknown section kind 'Pulsar' (expected lookout, pulsar, kafka or broker)"},
        {"[lookout main]", "t.conf:1: [lookout] takes no name"},
        {"[pulsar]", "t.conf:1: [pulsar] needs a name: [pulsar NAME]"},
        {"[ broker\t]", "t.conf:1: [broker] needs a name: [broker CLUSTER/ID]"},
        {"workers = 2", "t.conf:1: 'workers' is outside any section"},
        {"# c\n\nworkers = 2", "t.conf:3: 'workers' is outside any section"},
        {"[lookout]\nworkers 2", "t.conf:2: expected 'key = value' or '[kind name]'"},
        {"[lookout]\n= 2", "t.conf:2: missing key before '='"},
        {"[lookout]\nwork ers = 2",
         "t.conf:2: bad key 'work ers' (letters, digits, '.', '_' and '-' only)"},
        {"[lookout]\nworkers = 2\nworkers = 3",
         "t.conf:3: [lookout] workers: duplicate key (first at line 2)"},
        {"[lookout]\r\nworkers = 2\r\n# x\r\n workers=2\r\n",
         "t.conf:4: [lookout] workers: duplicate key (first at line 2)"},
        {"[lookout]\n[lookout]", "t.conf:2: duplicate section [lookout] (first at line 1)"},
        {"[pulsar p]\n\n[pulsar p]", "t.conf:3: duplicate section [pulsar p] (first at line 1)"},
        {"[pulsar p]\n[broker p/b1]\nadvertisedListeners = a:http://h:1\n[broker p/b1]",
         "t.conf:4: duplicate section [broker p/b1] (first at line 2)"},
        {"[pulsar p]\ntls.certificate = a\ntls.certificate = b",
         "t.conf:3: [pulsar p] tls.certificate: duplicate key (first at line 2)"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_conf *c;

        subtest("%s", t[i].text);
        c = lk_conf_load_buf("t.conf", t[i].text, strlen(t[i].text), err, sizeof(err));
        ok(c == NULL, "refused");
        ok_str(err, t[i].err, "message");
        lk_conf_unref(c);
    }
    subtest(NULL);
    /* text is (pointer, length): a NUL byte is an error, not an end */
    ok(lk_conf_load_buf("t.conf", "[lookout]\nworkers = 2\0\n", 22, err, sizeof(err)) == NULL,
       "NUL refused");
    ok_str(err, "t.conf:2: NUL byte in the line", "NUL message");
    {
        struct lk_conf *c =
            lk_conf_load_buf("t.conf", "[lookout]\nworkers = 27", 21, err, sizeof(err));
        ok(c != NULL && c->workers == 2, "only len bytes are read (workers = 2)");
        lk_conf_unref(c);
    }
    /* a small err buffer is truncated, never overrun */
    {
        char small[12];
        memset(small, 'Z', sizeof(small));
        ok(lk_conf_load_buf("t.conf", "[nope]", 6, small, 8) == NULL, "refused");
        ok(strcmp(small, "t.conf:") == 0 && small[8] == 'Z', "truncated: '%s'", small);
        ok(lk_conf_load_buf("t.conf", "[nope]", 6, NULL, 0) == NULL, "err may be NULL");
    }
}

static void
test_value_errors(void)
{
    static const struct {
        const char *line, *err;
    } t[] = {
        {"workers = 0", "workers: '0' is not 'auto' or a number from 1 to 1024"},
        {"workers = 1025", "workers: '1025' is not 'auto' or a number from 1 to 1024"},
        {"workers = -1", "workers: '-1' is not 'auto' or a number from 1 to 1024"},
        {"workers = two", "workers: 'two' is not 'auto' or a number from 1 to 1024"},
        {"workers =", "workers: '' is not 'auto' or a number from 1 to 1024"},
        {"workers = Auto", "workers: 'Auto' is not 'auto' or a number from 1 to 1024"},
        {"log_level = loud", "log_level: 'loud' is not error, warn, info or debug"},
        {"admin = localhost:9901",
         "admin: 'localhost:9901' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)"},
        {"admin = 127.0.0.1",
         "admin: '127.0.0.1' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)"},
        {"admin = 127.0.0.1:0",
         "admin: '127.0.0.1:0' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)"},
        {"admin = 127.0.0.1:65536",
         "admin: '127.0.0.1:65536' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)"},
        {"admin = ::1:9901",
         "admin: '::1:9901' is not IP:port (e.g. 127.0.0.1:9901 or [::1]:9901)"},
        {"tls.upstream_verify = yes", "tls.upstream_verify: 'yes' is not on or off"},
        {"tls.upstream_ca =", "tls.upstream_ca: empty path"},
        {"tls.certificate =", "tls.certificate: empty path"},
        {"timeout.connect = 5",
         "timeout.connect: '5' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"timeout.connect = 0s",
         "timeout.connect: '0s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"timeout.response = 1h",
         "timeout.response: '1h' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"timeout.client_header = 10 s",
         "timeout.client_header: '10 s' is not a duration (expected e.g. 250ms, 10s or 2m, above "
         "0)"},
        {"timeout.idle = -1s",
         "timeout.idle: '-1s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"drain_timeout = 0s",
         "drain_timeout: '0s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"max_header_bytes = 32kb",
         "max_header_bytes: '32kb' is not a size (expected e.g. 512, 32k or 5m)"},
        {"max_header_bytes = 0", "max_header_bytes: 0 is below the minimum of 1 bytes"},
        {"max_buffer_bytes = -1",
         "max_buffer_bytes: '-1' is not a size (expected e.g. 512, 32k or 5m)"},
        {"max_held_bytes = 64mb",
         "max_held_bytes: '64mb' is not a size (expected e.g. 512, 32k or 5m)"},
        {"max_held_bytes = 0", "max_held_bytes: 0 is below the minimum of 1 bytes"},
        {"upstream.idle_pool = 65536",
         "upstream.idle_pool: '65536' is not a number from 0 to 65535"},
        {"upstream.idle_pool = 1k", "upstream.idle_pool: '1k' is not a number from 0 to 65535"},
        {"listen.backlog = 0", "listen.backlog: '0' is not a number from 1 to 2147483647"},
        {"listen.backlog = 2147483648",
         "listen.backlog: '2147483648' is not a number from 1 to 2147483647"},
        {"listen.backlog = 4k", "listen.backlog: '4k' is not a number from 1 to 2147483647"},
        {"max_connections = -1", "max_connections: '-1' is not a number from 0 to 4294967295, or off"},
        {"max_connections_per_client = 4294967296",
         "max_connections_per_client: '4294967296' is not a number from 0 to 4294967295, or off"},
        {"timeout.first_frame = 0s",
         "timeout.first_frame: '0s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"max_connection_age = 0s",
         "max_connection_age: '0s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)"},
        {"max_connection_age.jitter = 51%",
         "max_connection_age.jitter: '51%' is not a percentage from 0% to 50%"},
        {"max_connection_age.jitter = %",
         "max_connection_age.jitter: '%' is not a percentage from 0% to 50%"},
        {"max_connection_age.jitter = 10 %",
         "max_connection_age.jitter: '10 %' is not a percentage from 0% to 50%"},
        {"max_connection_age.jitter = -1%",
         "max_connection_age.jitter: '-1%' is not a percentage from 0% to 50%"},
        {"max_connection_age.grace = off",
         "max_connection_age.grace: 'off' is not a duration (expected e.g. 250ms, 10s or 2m, above "
         "0)"},
        {"tls.session_cache = yes", "tls.session_cache: 'yes' is not on or off"},
        {"tls.session_tickets = On", "tls.session_tickets: 'On' is not on or off"},
        {"tls.session_ticket_key =", "tls.session_ticket_key: empty path"},
        {"tls.session_ticket_lifetime = 999ms",
         "tls.session_ticket_lifetime: '999ms' is not from 1s to 7 days (10080m)"},
        {"tls.session_ticket_lifetime = 10081m",
         "tls.session_ticket_lifetime: '10081m' is not from 1s to 7 days (10080m)"},
        {"tls.session_ticket_lifetime = 0s",
         "tls.session_ticket_lifetime: '0s' is not a duration (expected e.g. 250ms, 10s or 2m, "
         "above 0)"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char want[512];

        subtest("%s", t[i].line);
        snprintf(want, sizeof(want), "t.conf:3: [lookout] %s", t[i].err);
        expect_err(__FILE__, __LINE__, "t.conf", want, CONF("# values", "[lookout]", t[i].line));
    }
}

static void
test_cert_errors(void)
{
    struct lk_conf *c;

    EXPECT_ERR("t.conf:2: [lookout] tls.key: no tls.certificate before this key", "[lookout]",
               "tls.key = a.key");
    EXPECT_ERR("t.conf:3: [lookout] tls.session_ticket_key: tls.session_tickets is off: no "
               "ticket is ever encrypted with this key",
               "[lookout]", "tls.session_tickets = off", "tls.session_ticket_key = a.key",
               "tls.session_ticket_key = b.key");
    {
        /* [lookout] and 17 keys: the 17th, on line 18, is one too many. */
        const char *lines[19] = {"[lookout]"};
        for (int i = 1; i <= 17; i++)
            lines[i] = "tls.session_ticket_key = k";
        lines[18] = NULL;
        expect_err(__FILE__, __LINE__, "t.conf",
                   "t.conf:18: [lookout] tls.session_ticket_key: more than 16 ticket keys", lines);
    }
    EXPECT_ERR("t.conf:2: [lookout] tls.certificate: no tls.key follows this certificate",
               "[lookout]", "tls.certificate = a.crt", "workers = 2");
    EXPECT_ERR("t.conf:2: [lookout] tls.certificate: no tls.key follows this certificate (the "
               "next one is at line 3)",
               "[lookout]", "tls.certificate = a.crt", "tls.certificate = b.crt",
               "tls.key = b.key");
    EXPECT_ERR("t.conf:4: [lookout] tls.key: the tls.certificate before this key (line 2) "
               "already has one",
               "[lookout]", "tls.certificate = a.crt", "tls.key = a.key", "tls.key = b.key");
    EXPECT_ERR("t.conf:4: [lookout] tls.key: empty path", "[lookout]", "tls.certificate = a.crt",
               "", "tls.key =");
    c = LOAD("[lookout]", "tls.certificate = a.crt", "tls.key = a.key", "tls.certificate = b.crt",
             "tls.key = b.key", "tls.certificate = c.crt", "tls.key = c.key");
    ok(c != NULL && c->ncerts == 3 && strstr(c->certs[2].key_file, "/c.key") != NULL &&
           c->certs[2].line == 6,
       "three pairs (%s)", err);
    lk_conf_unref(c);
}

static void
test_cluster_errors(void)
{
    static const struct {
        const char *line, *err;
    } t[] = {
        {"redirects = bounce", "redirects: 'bounce' is not rewrite or follow"},
        {"leak_guard = on", "leak_guard: 'on' is not off, log, rewrite or block"},
        {"follow.max_hops = 0", "follow.max_hops: '0' is not a number from 1 to 100"},
        {"follow.max_hops = 101", "follow.max_hops: '101' is not a number from 1 to 100"},
        {"follow.replay_bytes = lots",
         "follow.replay_bytes: 'lots' is not a size (expected e.g. 512, 32k or 5m)"},
        {"max_frame_bytes = 0", "max_frame_bytes: 0 is below the minimum of 1 bytes"},
        {"bind = example.com",
         "bind: 'example.com' is not an IP address (e.g. 0.0.0.0, 127.0.0.2, ::)"},
        {"bind = 127.0.0.1:80",
         "bind: '127.0.0.1:80' is not an IP address (e.g. 0.0.0.0, 127.0.0.2, ::)"},
        {"webServiceUrl = pulsar://x:6650",
         "webServiceUrl: pulsar://x:6650: the scheme must be http or https"},
        {"serviceUrl = https://x",
         "serviceUrl: https://x:443: the scheme must be pulsar or pulsar+ssl"},
        {"webServiceUrl = http://x:8080/admin",
         "webServiceUrl: bad URL 'http://x:8080/admin': unexpected '/admin' after the address "
         "(only a trailing '/' is allowed)"},
        {"webServiceUrl = x", "webServiceUrl: bad URL 'x': expected scheme://host:port"},
        {"serviceUrl = gopher://x",
         "serviceUrl: unknown scheme 'gopher' in 'gopher://x' (expected http, https, pulsar or "
         "pulsar+ssl)"},
        {"internalListenerName =", "internalListenerName: empty listener name"},
        {"lookupListenerName =", "lookupListenerName: empty listener name"},
        {"forwarded_headers = no", "forwarded_headers: 'no' is not on or off"},
        {"upstream.tls = https", "upstream.tls: 'https' is not match, plain or tls"},
        {"pulsar_routing = proxy", "pulsar_routing: 'proxy' is not per-broker or service"},
        {"pulsar_routing = service",
         "pulsar_routing: service routing sends every binary client through serviceUrl, which "
         "this cluster does not have"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char want[512];

        subtest("%s", t[i].line);
        snprintf(want, sizeof(want), "t.conf:2: [pulsar prod] %s", t[i].err);
        expect_err(__FILE__, __LINE__, "t.conf", want,
                   CONF("[pulsar prod]", t[i].line, "[broker prod/b1]",
                        "advertisedListeners = internal:http://10.0.0.1:8080"));
    }
    subtest(NULL);
    EXPECT_ERR("t.conf:1: [pulsar a/b] a cluster name cannot contain '/' (brokers are named "
               "CLUSTER/ID)",
               "[pulsar a/b]");
    EXPECT_ERR("t.conf:3: [pulsar prod] lookupListenerName: 'internal' is the internal listener "
               "(line 2): lookout would listen on the addresses it connects to",
               "[pulsar prod]", "internalListenerName = internal", "lookupListenerName = internal");
    EXPECT_ERR("t.conf:2: [pulsar prod] the cluster has no brokers (add [broker prod/ID] "
               "sections, or read them from ZooKeeper with metadataStoreUrl)",
               "[lookout]", "[pulsar prod]", "[pulsar other]", "[broker other/b1]",
               "advertisedListeners = i:http://h:1");
}

static void
test_broker_errors(void)
{
    struct lk_conf *c;

    /* STYLE.md's example, line for line: b1 lacks a listener that the
     * cluster names and another broker has. */
    expect_err(__FILE__, __LINE__, "demo.conf",
               "demo.conf:14: [broker prod/b1] advertisedListeners: listener 'extrnal' is not "
               "defined",
               CONF("# demo", LOOKOUT_TLS, "", "[pulsar prod]", "internalListenerName = extrnal",
                    "lookupListenerName = external",
                    "webServiceUrl = https://pulsar.example.com:8443", "", "# the brokers", "",
                    "[broker prod/b1]", B1_LISTENERS, "[broker prod/b2]",
                    "advertisedListeners = extrnal:http://10.0.0.12:8080,"
                    "external:https://b2.pulsar.example.com:8443"));
    /* No broker has it: the name is wrong, not the brokers (issue 6 item 10). */
    expect_err(__FILE__, __LINE__, "demo.conf",
               "demo.conf:7: [pulsar prod] internalListenerName: no broker has a listener "
               "'extrnal' (their listeners: internal, external)",
               CONF("# demo", LOOKOUT_TLS, "", "[pulsar prod]", "internalListenerName = extrnal",
                    "lookupListenerName = external",
                    "webServiceUrl = https://pulsar.example.com:8443", "", "# the brokers", "",
                    "[broker prod/b1]", B1_LISTENERS));
    EXPECT_ERR("t.conf:3: [pulsar prod] lookupListenerName: no broker has a listener 'extrnal' "
               "(their listeners: internal, external, vpn)",
               "[pulsar prod]", "internalListenerName = internal", "lookupListenerName = extrnal",
               "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080,external:http://b1:80",
               "[broker prod/b2]",
               "advertisedListeners = internal:http://10.0.0.2:8080,external:http://b2:80,"
               "vpn:http://10.1.0.2:80");
    EXPECT_ERR("t.conf:7: [broker prod/b2] advertisedListeners: listener 'external' is not "
               "defined",
               "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080,external:http://b1:80", "",
               "[broker prod/b2]", "advertisedListeners = internal:http://10.0.0.2:8080");
    EXPECT_ERR("t.conf:1: [broker prdo/b1] cluster 'prdo' is not defined (no [pulsar prdo] or "
               "[kafka prdo])",
               "[broker prdo/b1]", "advertisedListeners = a:http://h:1", "[pulsar prod]");
    EXPECT_ERR("t.conf:2: [broker b1] the name must be CLUSTER/ID, e.g. [broker prod/b1]",
               "[pulsar prod]", "[broker b1]");
    EXPECT_ERR("t.conf:2: [broker prod/] the name must be CLUSTER/ID, e.g. [broker prod/b1]",
               "[pulsar prod]", "[broker prod/]");
    EXPECT_ERR("t.conf:2: [broker /b1] the name must be CLUSTER/ID, e.g. [broker prod/b1]",
               "[pulsar prod]", "[broker /b1]");
    EXPECT_ERR("t.conf:2: [broker prod/b1/x] the name must be CLUSTER/ID, e.g. [broker prod/b1]",
               "[pulsar prod]", "[broker prod/b1/x]");
    EXPECT_ERR("t.conf:2: [broker prod/b1] advertisedListeners is missing", "[pulsar prod]",
               "[broker prod/b1]", "");
    EXPECT_ERR("t.conf:3: [broker prod/b1] advertisedListeners: listener 'a' has two http "
               "addresses: http://h:1 and http://g:2",
               "[pulsar prod]", "[broker prod/b1]",
               "advertisedListeners = a:http://h:1,a:http://g:2");
    EXPECT_ERR("t.conf:3: [broker prod/b1] advertisedListeners: no listeners (expected "
               "name:scheme://host:port,...)",
               "[pulsar prod]", "[broker prod/b1]", "advertisedListeners =");
    EXPECT_ERR("t.conf:2: [pulsar prod] lookupListenerName: no broker has a listener 'externl' "
               "(their listeners: internal, external)",
               "[pulsar prod]", "lookupListenerName = externl", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080,external:http://b1:80");
    /* lookout serves HTTP for this broker (its lookup listener has an http
     * address), and the internal listener has none to send it to. */
    EXPECT_ERR("t.conf:4: [broker prod/b1] advertisedListeners: the lookup listener 'external' "
               "has http://b1:80, but the internal listener 'internal' has no http or https "
               "address to forward it to",
               "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
               "advertisedListeners = internal:pulsar://10.0.0.1:6650,external:http://b1:80");
    /* A service address needs a broker that can take what it accepts. */
    EXPECT_ERR("t.conf:2: [pulsar prod] webServiceUrl: https://pulsar.example.com:443 has nowhere "
               "to go: no broker's internal listener has a http or https address",
               "[pulsar prod]", "webServiceUrl = https://pulsar.example.com",
               "lookupListenerName = external", "[broker prod/b1]",
               "advertisedListeners = internal:pulsar://10.0.0.1:6650,external:pulsar://b1:6650");
    EXPECT_ERR("t.conf:2: [pulsar prod] serviceUrl: pulsar://pulsar.example.com:6650 has nowhere "
               "to go: no broker's internal listener has a pulsar or pulsar+ssl address",
               "[pulsar prod]", "serviceUrl = pulsar://pulsar.example.com", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080");
    EXPECT_ERR("t.conf:4: [broker prod/b1] advertisedListeners: the lookup listener 'external' "
               "has pulsar+ssl://b1:6651, but the internal listener 'internal' has no pulsar+ssl "
               "or pulsar address to forward it to",
               "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080,external:https://b1:8443,"
               "external:pulsar+ssl://b1:6651");
    EXPECT_ERR("t.conf:4: [broker prod/b1] advertisedListeners: the lookup listener 'internal' is "
               "the internal listener (the first one): lookout would listen on the addresses it "
               "connects to",
               "[pulsar prod]", "lookupListenerName = internal", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080,external:http://b1:80");
    EXPECT_ERR("t.conf:5: [broker prod/b2] advertisedListeners: 10.0.0.11:8080 is also an address "
               "of broker prod/b1 (line 3)",
               "[pulsar prod]", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.11:8080", "[broker prod/b2]",
               "advertisedListeners = internal:http://10.0.0.12:8080,other:http://10.0.0.11:8080");
    EXPECT_ERR("t.conf:5: [broker prod/b2] advertisedListeners: b1.example.com:80 is also an "
               "address of broker prod/b1 (line 3)",
               "[pulsar prod]", "[broker prod/b1]",
               "advertisedListeners = internal:http://B1.example.com", "[broker prod/b2]",
               "advertisedListeners = internal:https://b1.EXAMPLE.com:80");

    /* two clusters may share an internal address: they are told apart by cluster */
    c = LOAD("[pulsar a]", "[pulsar b]", "[broker a/b1]", "advertisedListeners = i:http://h:1",
             "[broker b/b1]", "advertisedListeners = i:http://h:1");
    ok(c != NULL && c->nbrokers == 2, "same address in two clusters (%s)", err);
    lk_conf_unref(c);
}

static void
test_unknown_keys(void)
{
    struct lk_conf *c;

    EXPECT_ERR("t.conf:2: [lookout] frobnicate: unknown key", "[lookout]", "frobnicate = 1");
    EXPECT_ERR("t.conf:2: [lookout] Workers: unknown key (did you mean workers?)", "[lookout]",
               "Workers = 2");
    EXPECT_ERR("t.conf:3: [lookout] bind: unknown key (bind belongs in a [pulsar] section)",
               "[lookout]", "workers = 2", "bind = 1.2.3.4");
    EXPECT_ERR("t.conf:2: [pulsar prod] internallistenername: unknown key (did you mean "
               "internalListenerName?)",
               "[pulsar prod]", "internallistenername = x", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080");
    EXPECT_ERR("t.conf:4: [broker prod/b1] lookupListenerName: unknown key (lookupListenerName "
               "belongs in a [pulsar] section)",
               "[pulsar prod]", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080", "lookupListenerName = x");
    EXPECT_ERR("t.conf:3: [broker prod/b1] advertised.listeners: unknown key "
               "(advertised.listeners belongs in a [broker] section of a Kafka cluster)",
               "[pulsar prod]", "[broker prod/b1]", "advertised.listeners = INTERNAL://h:9092",
               "advertisedListeners = internal:http://10.0.0.1:8080");
    /* in file order */
    EXPECT_ERR("t.conf:2: [lookout] one: unknown key", "[lookout]", "one = 1", "[pulsar p]",
               "two = 2", "[broker p/b]", "advertisedListeners = i:http://h:1");
    /* a typo that hides a setting is named before the bind conflict it causes */
    EXPECT_ERR("t.conf:2: [pulsar p] bnd: unknown key", "[pulsar p]", "bnd = 127.0.0.1",
               "webServiceUrl = http://127.0.0.1:8080", "lookupListenerName = e", "[broker p/b]",
               "advertisedListeners = i:http://10.0.0.1:80,e:http://b.example.com:8080");

    /* Unknown keys are told only after the filters took theirs: a bad
     * filter list is reported even though the unknown key comes first. */
    c = LOAD("[pulsar prod]", "frobnicate = 1", "filters = nosuchfilter", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080");
    ok(c == NULL, "refused");
    ok(strncmp(err, "t.conf:3: [pulsar prod] filters: ", 33) == 0 &&
           strstr(err, "nosuchfilter") != NULL,
       "the filter error wins: %s", err);
    lk_conf_unref(c);
}

static void
test_filters(void)
{
    const char *names[16];
    size_t n = default_chain_for(LK_PROTO_HTTP | LK_PROTO_PULSAR, names);
    struct lk_conf *c = LOAD("[pulsar prod]", "[broker prod/b1]",
                             "advertisedListeners = internal:http://10.0.0.1:8080");
    char line[128];

    if (ok(c != NULL, "default chain loads (%s)", err)) {
        const struct lk_cluster *cl = c->clusters[0];
        int same = cl->nfilters == n;
        for (size_t i = 0; same && i < n; i++)
            same = strcmp(cl->filters[i].ops->name, names[i]) == 0;
        ok(same, "no `filters =`: the default chain, in order (%zu filters)", cl->nfilters);
    }
    lk_conf_unref(c);

    if (n > 0) {
        snprintf(line, sizeof(line), "filters = %s", lk_flt_default_chain[0]);
        c = LOAD("[pulsar prod]", line, "[broker prod/b1]",
                 "advertisedListeners = internal:http://10.0.0.1:8080");
        ok(c != NULL && c->clusters[0]->nfilters == 1 &&
               strcmp(c->clusters[0]->filters[0].ops->name, lk_flt_default_chain[0]) == 0,
           "%s (%s)", line, err);
        ok(c != NULL && c->clusters[0]->section->entries[0].used, "filters is marked used");
        lk_conf_unref(c);
    }

    c = LOAD("[pulsar prod]", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080", "[pulsar other]",
             "filters = bogus", "[broker other/b1]", "advertisedListeners = i:http://h:1");
    ok(c == NULL && strncmp(err, "t.conf:5: [pulsar other] filters: ", 34) == 0 &&
           strstr(err, "bogus") != NULL && strstr(err, "filters: filters:") == NULL,
       "a bad name in the second cluster: %s", err);
    lk_conf_unref(c);
}

static void
test_section_get(void)
{
    struct lk_conf_entry entries[] = {
        {"a", "1", 3, 0},
        {"b", "2", 4, 0},
    };
    struct lk_conf_section s = {"pulsar", "x", "t.conf", 2, entries, 2};
    struct lk_conf *c;
    int line = -1;

    ok_str(lk_conf_section_get(&s, "b", &line), "2", "value");
    ok(line == 4, "line of the entry");
    ok(entries[1].used == 1 && entries[0].used == 0, "only b is marked used");
    ok(lk_conf_section_get(&s, "c", &line) == NULL, "absent key");
    ok(line == 2, "absent: the section's line");
    ok(lk_conf_section_get(&s, "B", NULL) == NULL, "keys are case-sensitive; line may be NULL");
    ok_str(lk_conf_section_get(&s, "a", NULL), "1", "a");
    ok(entries[0].used == 1, "a is marked used");
    line = -1;
    ok(lk_conf_section_get(NULL, "a", &line) == NULL && line == 0, "no section");

    c = LOAD(CONTRACT_CONF);
    if (ok(c != NULL, "loads (%s)", err)) {
        struct lk_conf_section *ps = c->clusters[0]->section;
        ok_str(lk_conf_section_get(ps, "webServiceUrl", &line), "https://pulsar.example.com:8443",
               "reads a loaded section");
        ok(line == 7, "line 7");
        for (size_t i = 0; i < c->nsections; i++)
            for (size_t j = 0; j < c->sections[i].nentries; j++)
                if (!c->sections[i].entries[j].used)
                    ok(0, "entry %s is not marked used", c->sections[i].entries[j].key);
        ok(c->nsections == 4, "four sections");
    }
    lk_conf_unref(c);
}

static void
test_relative_paths(void)
{
    char cwd[PATH_MAX], want[PATH_MAX + 64];
    struct lk_conf *c;

    c = load_as("/etc/lookout/lookout.conf",
                CONF("[lookout]", "tls.certificate = certs/a.crt", "tls.key = ./b.key",
                     "tls.certificate = /abs/c.crt", "tls.key = ../d.key",
                     "tls.upstream_ca = ca.crt"));
    if (ok(c != NULL, "loads (%s)", err)) {
        ok_str(c->file, "/etc/lookout/lookout.conf", "file");
        ok_str(c->dir, "/etc/lookout", "dir");
        ok_str(c->certs[0].cert_file, "/etc/lookout/certs/a.crt", "certs/a.crt");
        ok_str(c->certs[0].key_file, "/etc/lookout/b.key", "./b.key");
        ok_str(c->certs[1].cert_file, "/abs/c.crt", "absolute");
        ok_str(c->certs[1].key_file, "/etc/lookout/../d.key", "../d.key");
        ok_str(c->upstream_ca, "/etc/lookout/ca.crt", "tls.upstream_ca");
    }
    lk_conf_unref(c);

    if (!ok(getcwd(cwd, sizeof(cwd)) != NULL, "getcwd"))
        return;
    c = load_as("conf/t.conf", CONF("[lookout]", "tls.upstream_ca = ca.crt"));
    snprintf(want, sizeof(want), "%s/conf", cwd);
    ok(c != NULL && strcmp(c->dir, want) == 0, "relative file: dir %s", c ? c->dir : err);
    snprintf(want, sizeof(want), "%s/conf/ca.crt", cwd);
    ok(c != NULL && strcmp(c->upstream_ca, want) == 0, "relative file: path %s",
       c ? c->upstream_ca : err);
    lk_conf_unref(c);
    c = load_as("./conf/t.conf", CONF("[lookout]"));
    snprintf(want, sizeof(want), "%s/conf", cwd);
    ok(c != NULL && strcmp(c->dir, want) == 0, "./conf/t.conf: dir %s", c ? c->dir : err);
    lk_conf_unref(c);
    c = load_as("t.conf", CONF("[lookout]"));
    ok(c != NULL && strcmp(c->dir, cwd) == 0, "t.conf: dir is the cwd");
    lk_conf_unref(c);
    c = load_as("/t.conf", CONF("[lookout]", "tls.upstream_ca = ca.crt"));
    ok(c != NULL && strcmp(c->dir, "/") == 0 && strcmp(c->upstream_ca, "/ca.crt") == 0,
       "/t.conf: /ca.crt (%s)", c ? c->upstream_ca : err);
    lk_conf_unref(c);
}

static void
test_load_file(void)
{
    char dir[] = "/tmp/lk-test-conf-XXXXXX", path[128], want[256];
    struct lk_conf *c = NULL;
    FILE *f;

    if (!ok(mkdtemp(dir) != NULL, "mkdtemp"))
        return;
    snprintf(path, sizeof(path), "%s/l.conf", dir);

    /* a whole file larger than any read buffer, with no final newline */
    f = fopen(path, "w");
    for (int i = 0; i < 20000; i++)
        fprintf(f, "# comment line %d, long enough to add up to a megabyte or so.......\n", i);
    fprintf(f, "[lookout]\ntls.certificate = x.crt\ntls.key = x.key\nworkers = 7");
    fclose(f);
    c = lk_conf_load(path, err, sizeof(err));
    if (ok(c != NULL, "loads %s (%s)", path, err)) {
        snprintf(want, sizeof(want), "%s/x.crt", dir);
        ok_str(c->certs[0].cert_file, want, "certificate next to the file");
        ok_str(c->file, path, "file");
        ok_str(c->dir, dir, "dir");
        ok(c->workers == 7, "the last line, without a newline, counts");
    }
    lk_conf_unref(c);

    f = fopen(path, "w");
    fprintf(f, "[lookout]\nworkers = many\n");
    fclose(f);
    ok(lk_conf_load(path, err, sizeof(err)) == NULL, "bad file refused");
    snprintf(want, sizeof(want),
             "%s:2: [lookout] workers: 'many' is not 'auto' or a number from "
             "1 to 1024",
             path);
    ok_str(err, want, "message names the path and line");

    snprintf(want, sizeof(want), "%s/missing.conf", dir);
    ok(lk_conf_load(want, err, sizeof(err)) == NULL, "missing file refused");
    strcat(want, ": No such file or directory");
    ok_str(err, want, "missing file message");
    ok(lk_conf_load(dir, err, sizeof(err)) == NULL, "a directory is refused");
    snprintf(want, sizeof(want), "%s: Is a directory", dir);
    ok_str(err, want, "directory message");

    unlink(path);
    rmdir(dir);
}

static void
test_durations(void)
{
    static const struct {
        const char *in;
        int rc;
        unsigned ms;
    } t[] = {
        {"250ms", 0, 250},
        {"10s", 0, 10000},
        {"2m", 0, 120000},
        {"0s", 0, 0},
        {"0ms", 0, 0},
        {"007s", 0, 7000},
        {"4294967295ms", 0, UINT_MAX},
        {"71582m", 0, 4294920000u},
        {"4294967s", 0, 4294967000u},
        {"5", -1, 0},
        {"", -1, 0},
        {"s", -1, 0},
        {"ms", -1, 0},
        {"10h", -1, 0},
        {"1.5s", -1, 0},
        {"-1s", -1, 0},
        {"+1s", -1, 0},
        {" 1s", -1, 0},
        {"1s ", -1, 0},
        {"10 s", -1, 0},
        {"10S", -1, 0},
        {"10sec", -1, 0},
        {"4294967296ms", -1, 0},
        {"4294968s", -1, 0},
        {"71583m", -1, 0},
        {"99999999999999999999s", -1, 0},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        unsigned ms = 12345;
        int rc = lk_parse_duration(t[i].in, &ms);

        ok(rc == t[i].rc && (rc != 0 || ms == t[i].ms) && (rc == 0 || ms == 12345),
           "'%s' -> %d, %u", t[i].in, rc, ms);
    }
    ok(lk_parse_duration(NULL, NULL) == -1, "NULL");
}

static void
test_sizes(void)
{
    static const struct {
        const char *in;
        int rc;
        size_t bytes;
    } t[] = {
        {"512", 0, 512},
        {"0", 0, 0},
        {"32k", 0, 32768},
        {"32K", 0, 32768},
        {"1m", 0, 1048576},
        {"5M", 0, 5242880},
        {"100m", 0, 104857600},
        {"0k", 0, 0},
        {"18446744073709551615", 0, SIZE_MAX},
        {"k", -1, 0},
        {"", -1, 0},
        {"1g", -1, 0},
        {"1kb", -1, 0},
        {"-1", -1, 0},
        {" 1", -1, 0},
        {"1 ", -1, 0},
        {"1.5m", -1, 0},
        {"18446744073709551616", -1, 0},
        {"18014398509481984k", -1, 0},
        {"17592186044416m", -1, 0},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        size_t b = 12345;
        int rc = lk_parse_size(t[i].in, &b);

        ok(rc == t[i].rc && (rc != 0 || b == t[i].bytes) && (rc == 0 || b == 12345),
           "'%s' -> %d, %zu", t[i].in, rc, b);
    }
    ok(lk_parse_size(NULL, NULL) == -1, "NULL");
}

static void
test_bind_ip_literals(void)
{
    struct lk_conf *c =
        LOAD("[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",
             "webServiceUrl = http://127.0.0.1:8080", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080,internal:pulsar://10.0.0.1:6650,"
             "external:http://127.0.0.2:8080,external:pulsar://127.0.0.2:6650",
             "[broker prod/b2]",
             "advertisedListeners = internal:http://10.0.0.2:8080,internal:pulsar://10.0.0.2:6650,"
             "external:http://127.0.0.3:8080,external:pulsar://127.0.0.3:6650");
    static const char *const want[] = {"127.0.0.2:8080", "127.0.0.2:6650", "127.0.0.3:8080",
                                       "127.0.0.3:6650", "127.0.0.1:8080"};

    if (!ok(c != NULL, "plaintext pulsar on distinct IPs loads (%s)", err))
        return;
    if (ok(c->nbinds == 5, "five binds (%zu)", c->nbinds))
        for (size_t i = 0; i < 5; i++) {
            const struct lk_bind *b = c->binds[i];
            const struct sockaddr_in *sin = (const struct sockaddr_in *)&b->addr;
            char ip[INET_ADDRSTRLEN];
            unsigned port;

            subtest("%s", want[i]);
            ok_str(b->text, want[i], "text");
            ok(b->nvhosts == 1 && b->tls == 0, "one plaintext vhost");
            inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
            sscanf(want[i] + strlen(ip) + 1, "%u", &port);
            ok(sin->sin_family == AF_INET && strncmp(want[i], ip, strlen(ip)) == 0 &&
                   ntohs(sin->sin_port) == port,
               "sockaddr %s:%u", ip, ntohs(sin->sin_port));
        }
    lk_conf_unref(c);
}

static void
test_bind_names_share(void)
{
    struct lk_conf *c = LOAD(
        LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external", "bind = 127.0.0.5",
        "webServiceUrl = https://pulsar.example.com:8443", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,external:https://b1.example.com:8443,"
        "external:http://b1.example.com:8080",
        "[broker prod/b2]",
        "advertisedListeners = internal:http://10.0.0.2:8080,external:https://b2.example.com:8443,"
        "external:http://b2.example.com:8080",
        "[broker prod/b3]",
        "advertisedListeners = internal:http://10.0.0.3:8080,external:https://b3.example.com:8443,"
        "external:http://b3.example.com:8080");

    if (!ok(c != NULL, "names share binds by SNI or Host (%s)", err))
        return;
    if (ok(c->nbinds == 2, "two binds (%zu)", c->nbinds)) {
        ok_str(c->binds[0]->text, "127.0.0.5:8080", "plaintext http shared by Host");
        ok(c->binds[0]->nvhosts == 3 && c->binds[0]->tls == 0, "three http vhosts");
        ok_str(c->binds[1]->text, "127.0.0.5:8443", "https shared by SNI");
        ok(c->binds[1]->nvhosts == 4 && c->binds[1]->tls == 1, "three brokers + the service");
        ok(c->binds[1]->nvhosts == 4 &&
               strcmp(c->binds[1]->vhosts[2].host, "b3.example.com") == 0 &&
               c->binds[1]->vhosts[2].broker == c->brokers[2],
           "vhost order follows the brokers");
    }
    lk_conf_unref(c);

    /* pulsar+ssl can be shared too: SNI tells brokers apart */
    c = LOAD(LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080,internal:pulsar://10.0.0.1:6650,"
             "external:pulsar+ssl://b1.example.com:6651",
             "[broker prod/b2]",
             "advertisedListeners = internal:http://10.0.0.2:8080,internal:pulsar://10.0.0.2:6650,"
             "external:pulsar+ssl://b2.example.com:6651");
    ok(c != NULL && c->nbinds == 1 && c->binds[0]->nvhosts == 2 &&
           c->binds[0]->proto == LK_PROTO_PULSAR,
       "pulsar+ssl shared (%s)", err);
    lk_conf_unref(c);
}

static void
test_bind_ipv6(void)
{
    struct lk_conf *c =
        LOAD(LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external",
             "bind = ::", "webServiceUrl = https://pulsar.example.com:9443", "[broker prod/b1]",
             "advertisedListeners = internal:http://[::1]:8080,external:https://[::1]:8443");
    const struct sockaddr_in6 *sin6;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    if (ok(c->nbinds == 2, "two binds")) {
        ok_str(c->binds[0]->text, "[::1]:8443", "IPv6 literal");
        sin6 = (const struct sockaddr_in6 *)&c->binds[0]->addr;
        ok(sin6->sin6_family == AF_INET6 && c->binds[0]->addrlen == sizeof(*sin6) &&
               IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) && ntohs(sin6->sin6_port) == 8443,
           "sockaddr [::1]:8443");
        ok_str(c->binds[0]->vhosts[0].host, "::1", "vhost host without brackets");
        ok_str(c->binds[1]->text, "[::]:9443", "a name binds `bind = ::`");
    }
    lk_conf_unref(c);

    /* a wildcard of one family next to a specific address of the other */
    c = LOAD(LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external",
             "webServiceUrl = https://pulsar.example.com:8443", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080,external:https://[::1]:8443");
    ok(c != NULL && c->nbinds == 2, "0.0.0.0:8443 and [::1]:8443 coexist (%s)", err);
    lk_conf_unref(c);
}

static void
test_bind_conflicts(void)
{
    EXPECT_ERR(
        "t.conf:9: [broker prod/b2] advertisedListeners: http://b2.example.com:8443 "
        "conflicts with https://b1.example.com:8443 at line 7 ([broker prod/b1] "
        "advertisedListeners): bind 0.0.0.0:8443 cannot mix TLS and plaintext",
        LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,external:https://b1.example.com:8443",
        "[broker prod/b2]",
        "advertisedListeners = internal:http://10.0.0.2:8080,external:http://b2.example.com:8443");
    EXPECT_ERR(
        "t.conf:9: [broker prod/b2] advertisedListeners: pulsar+ssl://b2.example.com:8443 "
        "conflicts with https://b1.example.com:8443 at line 7 ([broker prod/b1] "
        "advertisedListeners): bind 0.0.0.0:8443 cannot serve both http and pulsar",
        LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,external:https://b1.example.com:8443",
        "[broker prod/b2]",
        "advertisedListeners = internal:http://10.0.0.2:8080,internal:pulsar://10.0.0.2:6650,"
        "external:pulsar+ssl://b2.example.com:8443");
    EXPECT_ERR(
        "t.conf:6: [pulsar prod] webServiceUrl: https://b1.example.com:8443 conflicts with "
        "https://b1.example.com:8443 at line 8 ([broker prod/b1] advertisedListeners): "
        "both are b1.example.com on bind 0.0.0.0:8443, so lookout cannot tell them apart",
        LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external",
        "webServiceUrl = https://B1.example.com:8443", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,external:https://b1.example.com:8443");
    EXPECT_ERR(
        "t.conf:6: [broker prod/b2] advertisedListeners: pulsar://b2.example.com:6650 "
        "conflicts with pulsar://b1.example.com:6650 at line 4 ([broker prod/b1] "
        "advertisedListeners): they share plaintext bind 0.0.0.0:6650, and the Pulsar binary "
        "protocol has neither TLS SNI nor a Host header to tell them apart (use pulsar+ssl, "
        "or a distinct port or IP literal for each)",
        "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,internal:pulsar://10.0.0.1:6650,"
        "external:pulsar://b1.example.com:6650",
        "[broker prod/b2]",
        "advertisedListeners = internal:http://10.0.0.2:8080,internal:pulsar://10.0.0.2:6650,"
        "external:pulsar://b2.example.com:6650");
    EXPECT_ERR(
        "t.conf:3: [pulsar prod] serviceUrl: pulsar://pulsar.example.com:6650 conflicts "
        "with pulsar://b1.example.com:6650 at line 5 ([broker prod/b1] advertisedListeners): "
        "they share plaintext bind 0.0.0.0:6650, and the Pulsar binary protocol has neither "
        "TLS SNI nor a Host header to tell them apart (use pulsar+ssl, or a distinct port or "
        "IP literal for each)",
        "[pulsar prod]", "lookupListenerName = external",
        "serviceUrl = pulsar://pulsar.example.com", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,internal:pulsar://10.0.0.1:6650,"
        "external:pulsar://b1.example.com:6650");
    EXPECT_ERR(
        "t.conf:9: [broker prod/b2] advertisedListeners: https://127.0.0.1:8443 conflicts "
        "with https://b1.example.com:8443 at line 7 ([broker prod/b1] advertisedListeners): "
        "binds 127.0.0.1:8443 and 0.0.0.0:8443 overlap (a wildcard and a specific address "
        "on one port)",
        LOOKOUT_TLS, "[pulsar prod]", "lookupListenerName = external", "[broker prod/b1]",
        "advertisedListeners = internal:http://10.0.0.1:8080,external:https://b1.example.com:8443",
        "[broker prod/b2]",
        "advertisedListeners = internal:http://10.0.0.2:8080,external:https://127.0.0.1:8443");
    EXPECT_ERR("t.conf:9: [pulsar b] webServiceUrl: https://0.0.0.0:8443 conflicts with "
               "https://127.0.0.1:8443 at line 5 ([pulsar a] webServiceUrl): binds 0.0.0.0:8443 "
               "and 127.0.0.1:8443 overlap (a wildcard and a specific address on one port)",
               "[lookout]", "tls.certificate = a", "tls.key = b", "[pulsar a]",
               "webServiceUrl = https://127.0.0.1:8443", "[broker a/1]",
               "advertisedListeners = i:http://h:1", "[pulsar b]",
               "webServiceUrl = https://0.0.0.0:8443", "[broker b/1]",
               "advertisedListeners = i:http://h:1");
    EXPECT_ERR("t.conf:6: [pulsar b] webServiceUrl: http://pulsar.example.com:8080 conflicts with "
               "http://pulsar.example.com:8080 at line 2 ([pulsar a] webServiceUrl): both are "
               "pulsar.example.com on bind 0.0.0.0:8080, so lookout cannot tell them apart",
               "[pulsar a]", "webServiceUrl = http://pulsar.example.com:8080", "[broker a/1]",
               "advertisedListeners = i:http://h:1", "[pulsar b]",
               "webServiceUrl = http://pulsar.example.com:8080", "[broker b/1]",
               "advertisedListeners = i:http://h:1");
}

/* A bound address that is also an internal address: lookout would connect
 * to itself (issue 6 item 11). */
static void
test_self_dial(void)
{
    struct lk_conf *c;

    /* the same IP literal, in another cluster */
    EXPECT_ERR("t.conf:7: [broker b/1] advertisedListeners: lookout would listen on "
               "http://127.0.0.1:8080 (bind 127.0.0.1:8080) and connect to it as the internal "
               "address http://127.0.0.1:8080 of broker a/1 (line 3)",
               "[pulsar a]", "[broker a/1]", "advertisedListeners = i:http://127.0.0.1:8080",
               "[pulsar b]", "lookupListenerName = e", "[broker b/1]",
               "advertisedListeners = i:http://10.0.0.1:8080,e:http://127.0.0.1:8080");
    /* one IPv6 address, written two ways */
    EXPECT_ERR("t.conf:7: [broker b/1] advertisedListeners: lookout would listen on "
               "http://[::1]:8080 (bind [::1]:8080) and connect to it as the internal address "
               "http://[0::1]:8080 of broker a/1 (line 3)",
               "[pulsar a]", "[broker a/1]", "advertisedListeners = i:http://[0::1]:8080",
               "[pulsar b]", "lookupListenerName = e", "[broker b/1]",
               "advertisedListeners = i:http://10.0.0.1:8080,e:http://[::1]:8080");
    /* the same name and port, in another cluster */
    EXPECT_ERR("t.conf:7: [broker b/1] advertisedListeners: lookout would listen on "
               "http://b1.example.com:8080 (bind 0.0.0.0:8080) and connect to it as the internal "
               "address https://b1.example.com.:8080 of broker a/1 (line 3)",
               "[pulsar a]", "[broker a/1]", "advertisedListeners = i:https://B1.example.com.:8080",
               "[pulsar b]", "lookupListenerName = e", "[broker b/1]",
               "advertisedListeners = i:http://10.0.0.1:8080,e:http://b1.example.com:8080");
    /* a name binds 0.0.0.0, which takes connections to any 127.x address */
    EXPECT_ERR("t.conf:4: [broker prod/b1] advertisedListeners: lookout would listen on "
               "http://b1.example.com:8080 (bind 0.0.0.0:8080) and connect to it as the internal "
               "address http://127.0.0.5:8080 of broker prod/b1 (line 4)",
               "[pulsar prod]", "lookupListenerName = e", "[broker prod/b1]",
               "advertisedListeners = i:http://127.0.0.5:8080,e:http://b1.example.com:8080");
    /* ... and to localhost */
    EXPECT_ERR("t.conf:4: [broker prod/b1] advertisedListeners: lookout would listen on "
               "http://127.0.0.1:8080 (bind 127.0.0.1:8080) and connect to it as the internal "
               "address http://localhost:8080 of broker prod/b1 (line 4)",
               "[pulsar prod]", "lookupListenerName = e", "[broker prod/b1]",
               "advertisedListeners = i:http://localhost:8080,e:http://127.0.0.1:8080");
    /* the service address */
    EXPECT_ERR("t.conf:2: [pulsar prod] webServiceUrl: lookout would listen on "
               "http://127.0.0.1:8080 (bind 127.0.0.1:8080) and connect to it as the internal "
               "address http://127.0.0.1:8080 of broker prod/b2 (line 6)",
               "[pulsar prod]", "webServiceUrl = http://127.0.0.1:8080", "[broker prod/b1]",
               "advertisedListeners = i:http://127.0.0.2:8080", "[broker prod/b2]",
               "advertisedListeners = i:http://127.0.0.1:8080");
    EXPECT_ERR("t.conf:3: [pulsar prod] serviceUrl: lookout would listen on "
               "pulsar://pulsar.example.com:6650 (bind 127.0.0.1:6650) and connect to it as the "
               "internal address pulsar://127.0.0.1:6650 of broker prod/b1 (line 6)",
               "[pulsar prod]", "bind = 127.0.0.1", "serviceUrl = pulsar://pulsar.example.com",
               "[broker prod/b1]", "",
               "advertisedListeners = i:http://127.0.0.1:8080,i:pulsar://127.0.0.1:6650");

    /* Other addresses on the same port are fine: another IP, another
     * family (IPV6_V6ONLY), or a 127.x address next to a specific bind. */
    c = LOAD("[pulsar prod]", "lookupListenerName = e", "[broker prod/b1]",
             "advertisedListeners = i:http://127.0.0.1:8080,e:http://127.0.0.2:8080",
             "[broker prod/b2]",
             "advertisedListeners = i:http://[::1]:8081,i:pulsar://10.0.0.2:6650,"
             "e:http://b2.example.com:8081,e:pulsar://127.0.0.1:6650");
    ok(c != NULL, "no self-dial (%s)", err);
    lk_conf_unref(c);
    /* A broker's internal address that is not its own listener (another
     * cluster's) on a bind of the same IP but another port. */
    c = LOAD("[pulsar a]", "webServiceUrl = http://127.0.0.1:9000", "[broker a/1]",
             "advertisedListeners = i:http://127.0.0.1:9001", "[pulsar b]",
             "webServiceUrl = http://127.0.0.1:9002", "[broker b/1]",
             "advertisedListeners = i:http://127.0.0.1:9003");
    ok(c != NULL, "other ports (%s)", err);
    lk_conf_unref(c);
}

static void
test_tls_without_cert(void)
{
    /* The loader leaves "TLS but no certificate" to lk_tls, which checks
     * the certificate files anyway: a config for unit tests needs none. */
    struct lk_conf *c =
        LOAD("[pulsar prod]", "webServiceUrl = https://pulsar.example.com:8443", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080");

    ok(c != NULL && c->ncerts == 0 && c->nbinds == 1 && c->binds[0]->tls == 1,
       "loads with a TLS bind and no certificate (%s)", err);
    lk_conf_unref(c);
}

static void
test_admin_conflicts(void)
{
    struct lk_conf *c;

    EXPECT_ERR("t.conf:2: [lookout] admin: 127.0.0.1:8080 conflicts with bind 0.0.0.0:8080 of "
               "http://pulsar.example.com:8080 (line 4)",
               "[lookout]", "admin = 127.0.0.1:8080", "[pulsar prod]",
               "webServiceUrl = http://pulsar.example.com:8080", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080");
    EXPECT_ERR("t.conf:2: [lookout] admin: 0.0.0.0:8080 conflicts with bind 127.0.0.1:8080 of "
               "http://127.0.0.1:8080 (line 4)",
               "[lookout]", "admin = 0.0.0.0:8080", "[pulsar prod]",
               "webServiceUrl = http://127.0.0.1:8080", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080");
    EXPECT_ERR("t.conf:2: [lookout] admin: 127.0.0.1:8080 conflicts with bind 127.0.0.1:8080 of "
               "http://127.0.0.1:8080 (line 4)",
               "[lookout]", "admin = 127.0.0.1:8080", "[pulsar prod]",
               "webServiceUrl = http://127.0.0.1:8080", "[broker prod/b1]",
               "advertisedListeners = internal:http://10.0.0.1:8080");
    c = LOAD("[lookout]", "admin = 127.0.0.2:8080", "[pulsar prod]",
             "webServiceUrl = http://127.0.0.1:8080", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080");
    ok(c != NULL, "admin on another IP (%s)", err);
    lk_conf_unref(c);
    c = LOAD("[lookout]", "admin = 127.0.0.1:9901", "[pulsar prod]",
             "webServiceUrl = http://pulsar.example.com:8080", "[broker prod/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080");
    ok(c != NULL, "admin on another port (%s)", err);
    lk_conf_unref(c);
}

static void
test_no_lookup(void)
{
    struct lk_conf *c =
        LOAD(LOOKOUT_TLS, "[pulsar prod]", "internalListenerName = internal",
             "webServiceUrl = https://pulsar.example.com:8443", "[broker prod/b1]", B1_LISTENERS);
    char *d;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    ok(c->brokers[0]->lookup == NULL, "no lookup listener");
    ok(c->nbinds == 1 && c->binds[0]->nvhosts == 1 && c->binds[0]->vhosts[0].broker == NULL,
       "only the service address is bound");
    d = lk_conf_dump_text(c);
    ok(strstr(d, "no lookup listener (brokers are not exposed, nothing is rewritten)") != NULL,
       "the dump says so");
    ok(strstr(d, "map") == NULL, "no map lines");
    free(d);
    lk_conf_unref(c);
}

static void
test_order_independent(void)
{
    struct lk_conf *c = LOAD("[broker b/2]", "advertisedListeners = i:http://h:2", "[broker a/1]",
                             "advertisedListeners = i:http://h:1", "[pulsar a]", "[broker b/1]",
                             "advertisedListeners = i:http://g:1", "[pulsar b]");

    if (!ok(c != NULL, "brokers before their clusters (%s)", err))
        return;
    ok(c->nclusters == 2 && strcmp(c->clusters[0]->name, "a") == 0, "clusters in file order");
    ok(c->nbrokers == 3 && strcmp(c->brokers[0]->name, "b/2") == 0 &&
           strcmp(c->brokers[2]->name, "b/1") == 0 && c->brokers[2]->index == 2,
       "brokers in file order");
    ok(c->clusters[1]->nbrokers == 2 && c->clusters[1]->brokers[0] == c->brokers[0] &&
           c->clusters[1]->brokers[1] == c->brokers[2],
       "cluster b has b/2 and b/1");
    ok(c->brokers[1]->cluster == c->clusters[0], "a/1 belongs to a");
    ok(c->clusters[0]->index == 0 && c->clusters[1]->index == 1, "clusters know their index");
    lk_conf_unref(c);
}

static void
test_find_addr(void)
{
    struct lk_conf *c = LOAD(CONTRACT_CONF);
    const struct lk_cluster *cl;
    enum lk_scheme sc = LK_SCHEME__COUNT;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    cl = c->clusters[0];
    ok(lk_cluster_find_addr(cl, LK_STRLIT("10.0.0.11"), 8080, &sc) == c->brokers[0] &&
           sc == LK_SCHEME_HTTP,
       "internal http of b1");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("10.0.0.12"), 6650, &sc) == c->brokers[1] &&
           sc == LK_SCHEME_PULSAR,
       "internal pulsar of b2");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("B2.Pulsar.Example.COM"), 8443, &sc) == c->brokers[1] &&
           sc == LK_SCHEME_HTTPS,
       "lookup https of b2, any case");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("b1.pulsar.example.com."), 6651, &sc) == c->brokers[0] &&
           sc == LK_SCHEME_PULSAR_SSL,
       "absolute name with a trailing dot");
    ok(lk_cluster_find_addr(cl, lk_str_make("10.0.0.11:8080", 9), 8080, NULL) == c->brokers[0],
       "host is (pointer, length); scheme may be NULL");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("10.0.0.11"), 8081, &sc) == NULL, "wrong port");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("10.0.0.13"), 8080, &sc) == NULL, "unknown host");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("pulsar.example.com"), 8443, &sc) == NULL,
       "the service address is no broker's");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("10.0.0.1"), 8080, &sc) == NULL, "no prefix match");
    ok(lk_cluster_find_addr(cl, LK_STR_NULL, 8080, &sc) == NULL, "empty host");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("."), 8080, &sc) == NULL, "a lone dot");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("[]"), 8080, &sc) == NULL, "empty brackets");
    lk_conf_unref(c);

    c = LOAD("[pulsar v6]", "[broker v6/b1]", "advertisedListeners = i:http://[::1]:8080");
    if (ok(c != NULL, "IPv6 loads (%s)", err)) {
        cl = c->clusters[0];
        ok(lk_cluster_find_addr(cl, LK_STRLIT("[::1]"), 8080, &sc) == c->brokers[0],
           "bracketed IPv6 host");
        ok(lk_cluster_find_addr(cl, LK_STRLIT("::1"), 8080, &sc) == c->brokers[0],
           "bare IPv6 host");
    }
    lk_conf_unref(c);
}

static void
test_broker_listener(void)
{
    struct lk_conf *c = LOAD(CONTRACT_CONF);
    const struct lk_broker *b;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    b = c->brokers[0];
    ok(lk_broker_listener(b, "external") == b->lookup, "external");
    ok(lk_broker_listener(b, "internal") == b->internal, "internal");
    ok(lk_broker_listener(b, "External") == NULL, "case-sensitive");
    ok(lk_broker_listener(b, "nope") == NULL, "unknown");
    ok(lk_broker_listener(b, NULL) == NULL, "NULL");
    lk_conf_unref(c);
}

static void
test_dump(void)
{
    struct lk_conf *c = LOAD(CONTRACT_CONF);
    char f[256], want[4096], *d;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    filter_names(c->clusters[0], f, sizeof(f));
    snprintf(
        want, sizeof(want),
        "cluster prod (pulsar): internal listener 'internal', lookup listener 'external', "
        "redirects rewrite, leak_guard log, filters %s\n"
        "  service  https://pulsar.example.com:8443 pulsar+ssl://pulsar.example.com:6651\n"
        "  broker prod/b1\n"
        "    internal http://10.0.0.11:8080 pulsar://10.0.0.11:6650\n"
        "    lookup   https://b1.pulsar.example.com:8443 pulsar+ssl://b1.pulsar.example.com:6651\n"
        "    map      http://10.0.0.11:8080 -> https://b1.pulsar.example.com:8443\n"
        "             pulsar://10.0.0.11:6650 -> pulsar+ssl://b1.pulsar.example.com:6651\n"
        "  broker prod/b2\n"
        "    internal http://10.0.0.12:8080 pulsar://10.0.0.12:6650\n"
        "    lookup   https://b2.pulsar.example.com:8443 pulsar+ssl://b2.pulsar.example.com:6651\n"
        "    map      http://10.0.0.12:8080 -> https://b2.pulsar.example.com:8443\n"
        "             pulsar://10.0.0.12:6650 -> pulsar+ssl://b2.pulsar.example.com:6651\n"
        "bind 0.0.0.0:8443 https (http)\n"
        "  b1.pulsar.example.com -> broker prod/b1 at http://10.0.0.11:8080\n"
        "  b2.pulsar.example.com -> broker prod/b2 at http://10.0.0.12:8080\n"
        "  pulsar.example.com -> cluster prod service address (any broker)\n"
        "bind 0.0.0.0:6651 pulsar+ssl (pulsar)\n"
        "  b1.pulsar.example.com -> broker prod/b1 at pulsar://10.0.0.11:6650\n"
        "  b2.pulsar.example.com -> broker prod/b2 at pulsar://10.0.0.12:6650\n"
        "  pulsar.example.com -> cluster prod service address (any broker)\n",
        f);
    d = lk_conf_dump_text(c);
    ok_str(d, want, "the CONTRACT example");
    free(d);
    lk_conf_unref(c);

    /* follow, no lookup listener, other listeners, a plaintext service */
    c = LOAD("[pulsar dev]", "redirects = follow", "follow.max_hops = 3",
             "follow.replay_bytes = 1k", "leak_guard = block",
             "webServiceUrl = http://127.0.0.1:8080", "[broker dev/b1]",
             "advertisedListeners = internal:http://10.0.0.1:8080,other:http://10.9.9.9:80");
    if (ok(c != NULL, "loads (%s)", err)) {
        filter_names(c->clusters[0], f, sizeof(f));
        snprintf(want, sizeof(want),
                 "cluster dev (pulsar): internal listener (each broker's first), no lookup "
                 "listener (brokers are not exposed, nothing is rewritten), redirects follow (at "
                 "most 3 hops, replay 1024 bytes), leak_guard block, filters %s\n"
                 "  service  http://127.0.0.1:8080\n"
                 "  broker dev/b1\n"
                 "    internal http://10.0.0.1:8080\n"
                 "    listener 'other' http://10.9.9.9:80\n"
                 "bind 127.0.0.1:8080 http (http)\n"
                 "  127.0.0.1 -> cluster dev service address (any broker)\n",
                 f);
        d = lk_conf_dump_text(c);
        ok_str(d, want, "follow, no lookup");
        free(d);
    }
    lk_conf_unref(c);

    /* the map prefers the same TLS-ness and says what is not rewritten */
    c = LOAD(LOOKOUT_TLS, "[pulsar p]", "lookupListenerName = ext",
             "serviceUrl = pulsar+ssl://p.example.com", "[broker p/b1]",
             "advertisedListeners = int:http://10.0.0.1:8080,int:https://10.0.0.1:8443,"
             "int:pulsar://10.0.0.1:6650,ext:https://b1.example.com,ext:http://b1.example.com");
    if (ok(c != NULL, "loads (%s)", err)) {
        filter_names(c->clusters[0], f, sizeof(f));
        snprintf(want, sizeof(want),
                 "cluster p (pulsar): internal listener (each broker's first), lookup listener "
                 "'ext', redirects rewrite, leak_guard log, filters %s\n"
                 "  service  pulsar+ssl://p.example.com:6651\n"
                 "  broker p/b1\n"
                 "    internal http://10.0.0.1:8080 https://10.0.0.1:8443 pulsar://10.0.0.1:6650\n"
                 "    lookup   http://b1.example.com:80 https://b1.example.com:443\n"
                 "    map      http://10.0.0.1:8080 -> http://b1.example.com:80\n"
                 "             https://10.0.0.1:8443 -> https://b1.example.com:443\n"
                 "             pulsar://10.0.0.1:6650 -> not rewritten (listener 'ext' has no "
                 "pulsar or pulsar+ssl address)\n"
                 "bind 0.0.0.0:80 http (http)\n"
                 "  b1.example.com -> broker p/b1 at http://10.0.0.1:8080\n"
                 "bind 0.0.0.0:443 https (http)\n"
                 "  b1.example.com -> broker p/b1 at https://10.0.0.1:8443\n"
                 "bind 0.0.0.0:6651 pulsar+ssl (pulsar)\n"
                 "  p.example.com -> cluster p service address (any broker)\n",
                 f);
        d = lk_conf_dump_text(c);
        ok_str(d, want, "map preferences");
        free(d);
    }
    lk_conf_unref(c);

    c = LOAD("");
    d = lk_conf_dump_text(c);
    ok_str(d, "no binds: nothing is exposed\n", "empty config");
    free(d);
    lk_conf_unref(c);
}

static void
test_reference(void)
{
    /* Every key the loader knows, each of which the reference must show. */
    static const char *const keys[] = {"admin",
                                       "workers",
                                       "log_level",
                                       "tls.certificate",
                                       "tls.key",
                                       "tls.upstream_ca",
                                       "tls.upstream_verify",
                                       "timeout.connect",
                                       "timeout.response",
                                       "timeout.client_header",
                                       "timeout.idle",
                                       "max_header_bytes",
                                       "max_buffer_bytes",
                                       "max_held_bytes",
                                       "upstream.idle_pool",
                                       "listen.backlog",
                                       "listen.defer_accept",
                                       "max_connections",
                                       "max_connections_per_client",
                                       "timeout.first_frame",
                                       "tls.session_cache",
                                       "tls.session_tickets",
                                       "tls.session_ticket_key",
                                       "tls.session_ticket_lifetime",
                                       "internalListenerName",
                                       "lookupListenerName",
                                       "webServiceUrl",
                                       "serviceUrl",
                                       "bind",
                                       "redirects",
                                       "leak_guard",
                                       "follow.max_hops",
                                       "follow.replay_bytes",
                                       "max_frame_bytes",
                                       "filters",
                                       "forwarded_headers",
                                       "upstream.tls",
                                       "advertisedListeners",
                                       "inter.broker.listener.name",
                                       "listener.security.protocol.map",
                                       "bootstrap.servers",
                                       "broker.pattern",
                                       "unknown_api",
                                       "advertised.listeners",
                                       "registration",
                                       NULL};
#ifdef LK_TOP_SRCDIR
    const char *top = LK_TOP_SRCDIR; /* tests/include.am passes $(abs_top_srcdir) */
#else
    const char *top = getenv("srcdir"); /* automake's test driver sets it */
#endif
    char path[PATH_MAX];
    struct lk_conf *c;

    snprintf(path, sizeof(path), "%s/conf/lookout.conf", top != NULL ? top : ".");
    c = lk_conf_load(path, err, sizeof(err));
    if (!ok(c != NULL, "%s loads (%s)", path, err))
        return;
    ok(c->nclusters >= 1 && c->nbrokers >= 2 && c->nbinds >= 1 && c->ncerts >= 1,
       "it has clusters, brokers, binds and certificates");
    /* Each key is set (every entry, used or a comment-only mention). */
    for (size_t k = 0; keys[k] != NULL; k++) {
        int found = 0;
        for (size_t i = 0; i < c->nsections && !found; i++)
            for (size_t j = 0; j < c->sections[i].nentries && !found; j++)
                found = strcmp(c->sections[i].entries[j].key, keys[k]) == 0;
        ok(found, "the reference sets %s", keys[k]);
    }
    lk_conf_unref(c);

    /* bounds: a file that is no config, too many sections or entries */
    {
        size_t big = 4u * 1024 * 1024 + 2; /* one byte over the bound, plus a NUL */
        char *junk = calloc(1, big);
        memset(junk, '#', big - 1);
        c = lk_conf_load_buf("huge.conf", junk, big - 1, err, sizeof(err));
        ok(c == NULL && strstr(err, "huge.conf: larger than") != NULL,
           "a file over 4 MiB is refused (%s)", err);
        size_t n = 0;
        for (unsigned i = 0; i <= 10000 && n + 64 < big; i++)
            n += (size_t)snprintf(junk + n, big - n, "[broker p/b%u]\n", i);
        c = lk_conf_load_buf("many.conf", junk, n, err, sizeof(err));
        ok(c == NULL && strstr(err, "many.conf:10001: more than 10000 sections") != NULL,
           "too many sections: refused at the line (%s)", err);
        n = (size_t)snprintf(junk, big, "[pulsar p]\n");
        for (unsigned i = 0; i <= 1000; i++)
            n += (size_t)snprintf(junk + n, big - n, "k%u = v\n", i);
        c = lk_conf_load_buf("keys.conf", junk, n, err, sizeof(err));
        ok(c == NULL && strstr(err, "keys.conf:1002: more than 1000 entries") != NULL,
           "too many entries: refused at the line (%s)", err);
        free(junk);
    }

    /* the other shipped examples load too */
    static const char *const examples[] = {"demo.conf", "pulsar-follow.conf", "pulsar-binary.conf",
                                           "kafka.conf", NULL};
    for (size_t i = 0; examples[i] != NULL; i++) {
        snprintf(path, sizeof(path), "%s/conf/%s", top != NULL ? top : ".", examples[i]);
        c = lk_conf_load(path, err, sizeof(err));
        ok(c != NULL && c->nclusters >= 1 && c->nbrokers >= 2, "%s loads (%s)", path, err);
        if (c != NULL)
            lk_conf_unref(c);
    }
}

/* Kafka ------------------------------------------------------------------------------ */

/* The CONTRACT's Kafka example, lines 1-12. */
#define KAFKA_CONF                                                                                 \
    LOOKOUT_TLS, "[kafka events]", "inter.broker.listener.name = INTERNAL",                        \
        "lookupListenerName = EXTERNAL",                                                           \
        "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",                        \
        "bootstrap.servers = kafka.example.com:9093", "[broker events/1]",                         \
        "advertised.listeners = INTERNAL://10.0.0.21:9092,EXTERNAL://b1.kafka.example.com:9093",   \
        "[broker events/2]",                                                                       \
        "advertised.listeners = INTERNAL://10.0.0.22:9092,EXTERNAL://b2.kafka.example.com:9093"
/* A small Kafka cluster, lines 1-6, for the error cases. */
#define K_HEAD                                                                                     \
    "[kafka k]", "lookupListenerName = EXTERNAL",                                                  \
        "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",                        \
        "inter.broker.listener.name = INTERNAL"
#define K_B1 "[broker k/1]", "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9093"

static void
test_kafka_basic(void)
{
    struct lk_conf *c = LOAD(KAFKA_CONF);
    const struct lk_cluster *cl;
    const struct lk_broker *b;
    const struct lk_bind *bd;
    const struct lk_url *u;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    ok(c->nclusters == 1 && c->nbrokers == 2 && c->nbinds == 1,
       "1 cluster, 2 brokers, 1 bind (%zu %zu %zu)", c->nclusters, c->nbrokers, c->nbinds);
    cl = c->clusters[0];
    ok_str(cl->name, "events", "cluster name");
    ok(cl->proto == LK_PROTO_KAFKA, "a kafka cluster serves kafka only");
    ok_str(cl->section->kind, "kafka", "section kind");
    ok_str(cl->internal_listener, "INTERNAL", "inter.broker.listener.name");
    ok_str(cl->lookup_listener, "EXTERNAL", "lookupListenerName");
    ok(cl->nsecmap == 2 && strcmp(cl->secmap[0].name, "INTERNAL") == 0 &&
           cl->secmap[0].sec == LK_KAFKA_PLAINTEXT && strcmp(cl->secmap[1].name, "EXTERNAL") == 0 &&
           cl->secmap[1].sec == LK_KAFKA_SSL,
       "the protocol map");
    ok(cl->max_frame_bytes == 100u * 1024 * 1024, "max_frame_bytes default 100m (%zu)",
       cl->max_frame_bytes);
    ok(cl->unknown_api == LK_UNKNOWN_API_PASS, "unknown_api default pass");
    ok(cl->pattern == NULL, "no broker.pattern");
    ok(cl->nfilters == 0 || (cl->filters[0].ops->protos & LK_PROTO_KAFKA) != 0,
       "no HTTP filter in a Kafka chain");
    if (ok(cl->nbootstrap == 1, "one bootstrap address")) {
        u = &cl->bootstrap[0];
        ok(u->scheme == LK_SCHEME_KAFKA_SSL && u->port == 9093 && cl->bootstrap_sasl == 0,
           "bootstrap speaks the lookup listener's SSL");
        ok_str(u->host, "kafka.example.com", "bootstrap host");
        ok_str(u->text, "kafka.example.com:9093", "bootstrap text");
    }

    b = c->brokers[0];
    ok_str(b->name, "events/1", "broker name");
    ok_str(b->id, "1", "id text");
    ok(b->node_id == 1 && b->cluster == cl && b->line == 9 && b->registration == NULL,
       "node id 1, line 9, no registration");
    ok(b->nlisteners == 2 && b->internal == &b->listeners[0] && b->lookup == &b->listeners[1],
       "internal and lookup listeners");
    u = lk_kafka_addr(b->internal);
    ok(u == b->internal->addr[LK_SCHEME_KAFKA] && u->port == 9092 && !b->internal->sasl,
       "internal: kafka (PLAINTEXT), port 9092");
    ok_str(u->host, "10.0.0.21", "internal host");
    ok_str(u->text, "INTERNAL://10.0.0.21:9092", "internal text");
    ok(lk_kafka_listener_security(b->internal) == LK_KAFKA_PLAINTEXT, "internal PLAINTEXT");
    u = lk_kafka_addr(b->lookup);
    ok(u == b->lookup->addr[LK_SCHEME_KAFKA_SSL] && u->port == 9093 && !b->lookup->sasl,
       "lookup: kafka+ssl (SSL)");
    ok_str(u->hostport, "b1.kafka.example.com:9093", "lookup hostport");
    ok(lk_cluster_find_node(cl, 2) == c->brokers[1] && lk_cluster_find_node(cl, 1) == b &&
           lk_cluster_find_node(cl, 3) == NULL && lk_cluster_find_node(cl, -1) == NULL,
       "lk_cluster_find_node");
    ok(lk_cluster_find_addr(cl, LK_STRLIT("10.0.0.22"), 9092, NULL) == c->brokers[1],
       "lk_cluster_find_addr finds a Kafka internal address");

    bd = c->binds[0];
    ok_str(bd->text, "0.0.0.0:9093", "the bind");
    ok(bd->proto == LK_PROTO_KAFKA && bd->tls == 1, "kafka over TLS");
    if (ok(bd->nvhosts == 3, "three vhosts (%zu)", bd->nvhosts)) {
        ok(bd->vhosts[0].broker == c->brokers[0] && bd->vhosts[0].line == 10 &&
               bd->vhosts[0].scheme == LK_SCHEME_KAFKA_SSL && bd->vhosts[0].pattern == NULL,
           "vhost 0: node 1, line 10");
        ok_str(bd->vhosts[0].host, "b1.kafka.example.com", "vhost 0 host");
        ok(bd->vhosts[1].broker == c->brokers[1] && bd->vhosts[1].line == 12, "vhost 1: node 2");
        ok(bd->vhosts[2].broker == NULL && bd->vhosts[2].cluster == cl &&
               bd->vhosts[2].line == 8 && bd->vhosts[2].pattern == NULL,
           "vhost 2: the bootstrap, line 8");
    }
    lk_conf_unref(c);
}

/* A broker reached over SSL gets TLS from lookout: the runtime builds the
 * client TLS context for kafka+ssl internal addresses, as for https. */
static void
test_kafka_tls_upstream(void)
{
    struct lk_conf *c = LOAD("[kafka k]", "inter.broker.listener.name = INTERNAL",
                             "lookupListenerName = EXTERNAL",
                             "listener.security.protocol.map = INTERNAL:SSL,EXTERNAL:PLAINTEXT",
                             "[broker k/1]",
                             "advertised.listeners = INTERNAL://10.0.0.1:9093,EXTERNAL://127.0.0.2:9092");
    char msg[512] = "";

    if (ok(c != NULL, "loads (%s)", err)) {
        const struct lk_url *up = lk_broker_upstream(c->brokers[0], LK_SCHEME_KAFKA, 0);
        ok(up != NULL && up->scheme == LK_SCHEME_KAFKA_SSL && up->port == 9093,
           "the upstream of a plaintext client is the SSL internal address");
        struct lk_runtime *rt = lk_runtime_new(c, msg, sizeof(msg));
        ok(rt != NULL && rt->client_ctx != NULL, "a client TLS context for it (%s)", msg);
        ok(rt != NULL && rt->nserver_ctx == 0, "no server context: nothing terminates TLS");
        lk_runtime_free(rt);
    }
    lk_conf_unref(c);
}

static void
test_kafka_keys(void)
{
    struct lk_conf *c;
    const struct lk_cluster *cl;

    /* Kafka's defaults: inter.broker.listener.name PLAINTEXT, and the
     * default map, in which each protocol is a listener of its name */
    c = LOAD("[kafka k]", "lookupListenerName = SASL_SSL", "[broker k/0]",
             "advertised.listeners = PLAINTEXT://10.0.0.1:9092,SASL_SSL://b0.example.com:9094");
    if (ok(c != NULL, "default map loads (%s)", err)) {
        cl = c->clusters[0];
        ok_str(cl->internal_listener, "PLAINTEXT", "default inter.broker.listener.name");
        ok(cl->nsecmap == 4 && cl->secmap[3].sec == LK_KAFKA_SASL_SSL, "default map");
        ok(c->brokers[0]->node_id == 0, "node id 0");
        ok(c->brokers[0]->lookup->sasl && lk_kafka_addr(c->brokers[0]->lookup)->scheme ==
                                              LK_SCHEME_KAFKA_SSL,
           "SASL_SSL: kafka+ssl and sasl");
        ok(lk_kafka_listener_security(c->brokers[0]->lookup) == LK_KAFKA_SASL_SSL,
           "SASL_SSL round trip");
        ok(c->nbinds == 1 && c->binds[0]->tls && c->binds[0]->proto == LK_PROTO_KAFKA,
           "a TLS kafka bind");
    }
    lk_conf_unref(c);

    /* names are case-insensitive (Kafka upper-cases them); every key */
    c = LOAD("[kafka k]", "inter.broker.listener.name = internal", "lookupListenerName = Client",
             "listener.security.protocol.map = Internal:ssl , client:sasl_plaintext,,",
             "bootstrap.servers = 127.0.0.1:9092, [::1]:9092,,", "bind = 127.0.0.9",
             "max_frame_bytes = 1m", "unknown_api = drop", "filters =",
             "broker.pattern = 127.0.0.1:$(9100+nodeId)", "[broker k/7]",
             "advertised.listeners = INTERNAL://10.0.0.7:9093 , client://127.0.0.2:9092,");
    if (ok(c != NULL, "every key loads (%s)", err)) {
        const struct lk_broker *b = c->brokers[0];
        cl = c->clusters[0];
        ok_str(cl->internal_listener, "INTERNAL", "upper-cased internal");
        ok_str(cl->lookup_listener, "CLIENT", "upper-cased lookup");
        ok(cl->nsecmap == 2 && cl->secmap[0].sec == LK_KAFKA_SSL &&
               cl->secmap[1].sec == LK_KAFKA_SASL_PLAINTEXT,
           "map, protocols in any case");
        ok_str(cl->secmap[1].name, "CLIENT", "map names upper-cased");
        ok(cl->nbootstrap == 2 && cl->bootstrap[1].port == 9092 && cl->bootstrap_sasl == 1 &&
               cl->bootstrap[1].scheme == LK_SCHEME_KAFKA,
           "two bootstrap addresses, SASL_PLAINTEXT");
        ok_str(cl->bootstrap[1].host, "::1", "IPv6 bootstrap host");
        ok_str(cl->bootstrap[1].hostport, "[::1]:9092", "IPv6 bootstrap hostport");
        ok_str(cl->bind, "127.0.0.9", "bind");
        ok(cl->max_frame_bytes == 1024 * 1024, "max_frame_bytes");
        ok(cl->unknown_api == LK_UNKNOWN_API_DROP, "unknown_api drop");
        ok(cl->nfilters == 0, "empty filters");
        ok(cl->pattern != NULL && cl->pattern->port_has_id && !cl->pattern->host_has_id &&
               cl->pattern->port == 9100 && cl->pattern->scheme == LK_SCHEME_KAFKA &&
               cl->pattern->sasl == 1 && cl->pattern->line == 10,
           "port pattern, of the lookup listener's protocol");
        ok(b->node_id == 7 && b->internal->addr[LK_SCHEME_KAFKA_SSL] != NULL && !b->internal->sasl,
           "internal SSL: lookout connects with TLS");
        ok_str(b->lookup->addr[LK_SCHEME_KAFKA]->text, "CLIENT://127.0.0.2:9092",
               "the listener name as the map spells it");
        ok(c->nbinds == 3, "binds: the broker and two bootstrap addresses (%zu)", c->nbinds);
    }
    lk_conf_unref(c);

    /* a filter for another protocol is refused */
    EXPECT_ERR("t.conf:5: [kafka k] filters: filter 'location' does not apply to this cluster's "
               "protocol",
               K_HEAD, "filters = location", K_B1);
    /* two Kafka clusters may share a TLS port (SNI) */
    c = LOAD(K_HEAD, K_B1, "[kafka j]", "lookupListenerName = EXTERNAL",
             "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",
             "inter.broker.listener.name = INTERNAL", "[broker j/1]",
             "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://j1.example.com:9093");
    ok(c != NULL && c->nbinds == 1 && c->binds[0]->nvhosts == 2,
       "two Kafka clusters on one TLS bind (%s)", err);
    lk_conf_unref(c);
}

static void
test_kafka_errors(void)
{
    /* [kafka NAME] keys */
    EXPECT_ERR("t.conf:1: [kafka k] lookupListenerName is missing (the listener whose addresses "
               "clients get; a Kafka cluster cannot run without one)",
               "[kafka k]", "[broker k/1]", "advertised.listeners = PLAINTEXT://10.0.0.1:9092");
    EXPECT_ERR("t.conf:3: [kafka k] lookupListenerName: 'internal' is the internal listener "
               "(inter.broker.listener.name): lookout would listen on the addresses it connects to",
               "[kafka k]", "inter.broker.listener.name = INTERNAL", "lookupListenerName = internal");
    EXPECT_ERR("t.conf:2: [kafka k] lookupListenerName: 'plaintext' is the internal listener "
               "(Kafka's default inter.broker.listener.name): lookout would listen on the "
               "addresses it connects to",
               "[kafka k]", "lookupListenerName = plaintext");
    EXPECT_ERR("t.conf:2: [kafka k] inter.broker.listener.name: empty listener name", "[kafka k]",
               "inter.broker.listener.name =", "lookupListenerName = E");
    EXPECT_ERR("t.conf:2: [kafka k] lookupListenerName: bad listener name 'EXT:1' (letters, "
               "digits, '_', '-' and '.' only)",
               "[kafka k]", "lookupListenerName = EXT:1");
    EXPECT_ERR("t.conf:3: [kafka k] listener.security.protocol.map: unknown security protocol "
               "'TLS' for listener 'EXTERNAL' (expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)",
               "[kafka k]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:TLS");
    EXPECT_ERR("t.conf:3: [kafka k] listener.security.protocol.map: 'EXTERNAL' is not "
               "NAME:PROTOCOL",
               "[kafka k]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = PLAINTEXT:PLAINTEXT, EXTERNAL");
    EXPECT_ERR("t.conf:3: [kafka k] listener.security.protocol.map: listener 'external' is in the "
               "map twice",
               "[kafka k]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = EXTERNAL:SSL,external:PLAINTEXT");
    EXPECT_ERR("t.conf:3: [kafka k] listener.security.protocol.map: an empty map (expected "
               "NAME:PROTOCOL,...)",
               "[kafka k]", "lookupListenerName = EXTERNAL", "listener.security.protocol.map = ,");
    EXPECT_ERR("t.conf:3: [kafka k] listener.security.protocol.map: empty listener name in ':SSL'",
               "[kafka k]", "lookupListenerName = EXTERNAL", "listener.security.protocol.map = :SSL");
    EXPECT_ERR("t.conf:3: [kafka k] bootstrap.servers: bad address 'kafka.example.com': expected "
               "host:port",
               "[kafka k]", "lookupListenerName = E", "bootstrap.servers = kafka.example.com");
    EXPECT_ERR("t.conf:3: [kafka k] bootstrap.servers: bad address ':9092': no host (Kafka's "
               "\"default interface\" cannot be advertised: write the host clients connect to)",
               "[kafka k]", "lookupListenerName = E", "bootstrap.servers = k:1, :9092");
    EXPECT_ERR("t.conf:3: [kafka k] bootstrap.servers: bad address 'k:0': port 0 is out of range "
               "1-65535",
               "[kafka k]", "lookupListenerName = E", "bootstrap.servers = k:0");
    EXPECT_ERR("t.conf:3: [kafka k] bootstrap.servers: k.example.com:9092 is listed twice",
               "[kafka k]", "lookupListenerName = E",
               "bootstrap.servers = k.example.com:9092,K.example.com:9092");
    EXPECT_ERR("t.conf:3: [kafka k] bootstrap.servers: no address (expected host:port,...)",
               "[kafka k]", "lookupListenerName = E", "bootstrap.servers = , ");
    EXPECT_ERR("t.conf:3: [kafka k] bind: 'any' is not an IP address (e.g. 0.0.0.0, 127.0.0.2, ::)",
               "[kafka k]", "lookupListenerName = E", "bind = any");
    EXPECT_ERR("t.conf:3: [kafka k] max_frame_bytes: '1g' is not a size (expected e.g. 512, 32k or "
               "5m)",
               "[kafka k]", "lookupListenerName = E", "max_frame_bytes = 1g");
    EXPECT_ERR("t.conf:3: [kafka k] unknown_api: 'close' is not pass or drop", "[kafka k]",
               "lookupListenerName = E", "unknown_api = close");
    EXPECT_ERR("t.conf:3: [kafka k] timeout.idle: '0s' is not a duration (expected e.g. 250ms, "
               "10s or 2m, above 0)",
               "[kafka k]", "lookupListenerName = E", "timeout.idle = 0s");
    EXPECT_ERR("t.conf:2: [kafka x] cluster 'x' is already defined at line 1 ([pulsar x])",
               "[pulsar x]", "[kafka x]");
    EXPECT_ERR("t.conf:1: [kafka a/b] a cluster name cannot contain '/' (brokers are named "
               "CLUSTER/ID)",
               "[kafka a/b]");

    /* [broker NAME/ID]: the node id */
    static const char *const bad_ids[] = {"b1", "01", "-1", "2147483648", "1x", "+1", NULL};
    for (size_t i = 0; bad_ids[i] != NULL; i++) {
        char name[64], want[256];
        snprintf(name, sizeof(name), "[broker k/%s]", bad_ids[i]);
        snprintf(want, sizeof(want),
                 "t.conf:5: [broker k/%s] '%s' is not a node id: Kafka's broker.id, an integer "
                 "from 0 to 2147483647 without leading zeros, e.g. [broker k/1]",
                 bad_ids[i], bad_ids[i]);
        EXPECT_ERR(want, K_HEAD, name, "advertised.listeners = INTERNAL://h:1,EXTERNAL://b1:2");
    }
    {
        struct lk_conf *c =
            LOAD(K_HEAD, "[broker k/2147483647]",
                 "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b.example.com:9093");
        ok(c != NULL && c->brokers[0]->node_id == INT32_MAX, "node id 2147483647 (%s)", err);
        lk_conf_unref(c);
    }

    /* [broker NAME/ID]: its listeners */
    EXPECT_ERR("t.conf:5: [broker k/1] advertised.listeners or registration is missing", K_HEAD,
               "[broker k/1]");
    EXPECT_ERR("t.conf:5: [broker k/1] advertised.listeners or registration is missing "
               "(advertisedListeners is Pulsar's key; Kafka's server.properties spells it "
               "advertised.listeners)",
               K_HEAD, "[broker k/1]", "advertisedListeners = INTERNAL://h:1");
    EXPECT_ERR("t.conf:2: [broker p/1] advertisedListeners is missing (advertised.listeners is "
               "Kafka's key; Pulsar's broker.conf spells it advertisedListeners)",
               "[pulsar p]", "[broker p/1]", "advertised.listeners = INTERNAL://h:1");
    EXPECT_ERR("t.conf:7: [broker k/1] registration: give either advertised.listeners or "
               "registration, not both (the other is at line 6)",
               K_HEAD, K_B1, "registration = 1.json");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: listener 'CLIENT' is not in "
               "listener.security.protocol.map (line 3), so its security protocol is unknown",
               K_HEAD, "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:9092,CLIENT://b1.example.com:9093");
    EXPECT_ERR("t.conf:4: [broker k/1] advertised.listeners: listener 'INTERNAL' is not in Kafka's "
               "default listener.security.protocol.map (PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:"
               "SASL_PLAINTEXT,SASL_SSL:SASL_SSL), so its security protocol is unknown",
               "[kafka k]", "lookupListenerName = SSL", "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:9092,SSL://b1.example.com:9093");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: listener 'INTERNAL' is listed twice",
               K_HEAD, "[broker k/1]", "advertised.listeners = INTERNAL://a:1, internal://b:2");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: bad address ':9093': no host (Kafka's "
               "\"default interface\" cannot be advertised: write the host clients connect to)",
               K_HEAD, "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:9092,EXTERNAL://:9093");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: 'INTERNAL:10.0.0.1:9092' is not "
               "NAME://host:port",
               K_HEAD, "[broker k/1]", "advertised.listeners = INTERNAL:10.0.0.1:9092");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: b:9093 is in two listeners: "
               "INTERNAL://b:9093 and EXTERNAL://b:9093",
               K_HEAD, "[broker k/1]", "advertised.listeners = INTERNAL://b:9093,EXTERNAL://B:9093");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: bad address 'b': expected host:port",
               K_HEAD, "[broker k/1]", "advertised.listeners = INTERNAL://a:1,EXTERNAL://b");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: bad address 'b:9093/': unexpected '/' "
               "after the port",
               K_HEAD, "[broker k/1]", "advertised.listeners = INTERNAL://a:1,EXTERNAL://b:9093/");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: bad address '1::x:9093': bad IPv6 "
               "address '1::x'",
               K_HEAD, "[broker k/1]", "advertised.listeners = INTERNAL://a:1,EXTERNAL://1::x:9093");
    EXPECT_ERR("t.conf:6: [broker k/1] advertised.listeners: no listeners (expected "
               "NAME://host:port,...)",
               K_HEAD, "[broker k/1]", "advertised.listeners = ,");
    EXPECT_ERR("t.conf:8: [broker k/2] advertised.listeners: 10.0.0.1:19092 is also an address of "
               "broker k/1 (line 6)",
               K_HEAD, K_B1, "[broker k/2]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b2.example.com:9093");
    EXPECT_ERR("t.conf:8: [broker k/2] advertised.listeners: listener 'EXTERNAL' is not defined",
               K_HEAD, K_B1, "[broker k/2]", "advertised.listeners = INTERNAL://10.0.0.2:19092");
    EXPECT_ERR("t.conf:2: [kafka k] lookupListenerName: no broker has a listener 'EXTRNAL' (their "
               "listeners: INTERNAL, EXTERNAL)",
               "[kafka k]", "lookupListenerName = EXTRNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL,EXTRNAL:SSL",
               "inter.broker.listener.name = INTERNAL", K_B1);
    EXPECT_ERR("t.conf:1: [kafka k] no broker has a listener 'PLAINTEXT', Kafka's default "
               "inter.broker.listener.name: set inter.broker.listener.name (their listeners: "
               "SASL_PLAINTEXT, SSL)",
               "[kafka k]", "lookupListenerName = SSL", "[broker k/1]",
               "advertised.listeners = SASL_PLAINTEXT://10.0.0.1:9092,SSL://b1.example.com:9093");
    EXPECT_ERR("t.conf:1: [kafka k] the cluster has no brokers (add [broker k/ID] sections, or read "
               "them from ZooKeeper with zookeeper.connect)",
               "[kafka k]", "lookupListenerName = E");
    /* keys of the other kind */
    EXPECT_ERR("t.conf:5: [kafka k] internalListenerName: unknown key (internalListenerName belongs "
               "in a [pulsar] section)",
               K_HEAD, "internalListenerName = INTERNAL", K_B1);
    EXPECT_ERR("t.conf:5: [kafka k] Bootstrap.Servers: unknown key (did you mean "
               "bootstrap.servers?)",
               K_HEAD, "Bootstrap.Servers = k:1", K_B1);
    EXPECT_ERR("t.conf:7: [broker k/1] advertisedListeners: unknown key (advertisedListeners "
               "belongs in a [broker] section of a Pulsar cluster)",
               K_HEAD, K_B1, "advertisedListeners = x");
    EXPECT_ERR("t.conf:2: [pulsar p] unknown_api: unknown key (unknown_api belongs in a [kafka] "
               "section)",
               "[pulsar p]", "unknown_api = pass", "[broker p/b]",
               "advertisedListeners = i:http://h:1");
}

static void
test_kafka_binds(void)
{
    struct lk_conf *c;

    /* plaintext brokers on one socket cannot be told apart */
    EXPECT_ERR("t.conf:8: [broker k/2] advertised.listeners: b2.example.com:9092 conflicts with "
               "b1.example.com:9092 at line 6 ([broker k/1] advertised.listeners): they share "
               "plaintext bind 0.0.0.0:9092, and lookout cannot tell them apart: Kafka's PLAINTEXT "
               "and SASL_PLAINTEXT carry no TLS SNI and no host name (use SSL or SASL_SSL, or a "
               "distinct port or IP literal for each)",
               "[kafka k]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
               "inter.broker.listener.name = INTERNAL", "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9092",
               "[broker k/2]",
               "advertised.listeners = INTERNAL://10.0.0.2:19092,EXTERNAL://b2.example.com:9092");
    /* SASL_PLAINTEXT: the same, and the bootstrap against a broker */
    EXPECT_ERR("t.conf:5: [kafka k] bootstrap.servers: kafka.example.com:9092 conflicts with "
               "b1.example.com:9092 at line 7 ([broker k/1] advertised.listeners): they share "
               "plaintext bind 0.0.0.0:9092, and lookout cannot tell them apart: Kafka's PLAINTEXT "
               "and SASL_PLAINTEXT carry no TLS SNI and no host name (use SSL or SASL_SSL, or a "
               "distinct port or IP literal for each)",
               "[kafka k]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
               "inter.broker.listener.name = INTERNAL", "bootstrap.servers = kafka.example.com:9092",
               "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9092");
    /* plaintext on distinct IP literals and ports is fine */
    c = LOAD("[kafka k]", "lookupListenerName = EXTERNAL",
             "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
             "inter.broker.listener.name = INTERNAL", "bootstrap.servers = 127.0.0.1:9092",
             "[broker k/1]",
             "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://127.0.0.2:9092",
             "[broker k/2]",
             "advertised.listeners = INTERNAL://10.0.0.2:19092,EXTERNAL://127.0.0.1:9093");
    if (ok(c != NULL, "plaintext on distinct sockets (%s)", err)) {
        ok(c->nbinds == 3, "three binds (%zu)", c->nbinds);
        for (size_t i = 0; i < c->nbinds; i++)
            ok(c->binds[i]->nvhosts == 1 && c->binds[i]->tls == 0 &&
                   c->binds[i]->proto == LK_PROTO_KAFKA,
               "bind %s: one plaintext kafka vhost", c->binds[i]->text);
    }
    lk_conf_unref(c);
    /* SASL_SSL brokers share one socket, told apart by SNI */
    c = LOAD("[kafka k]", "lookupListenerName = EXTERNAL",
             "listener.security.protocol.map = INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL",
             "inter.broker.listener.name = INTERNAL", "bootstrap.servers = kafka.example.com:9093",
             "[broker k/1]",
             "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9093",
             "[broker k/2]",
             "advertised.listeners = INTERNAL://10.0.0.2:19092,EXTERNAL://b2.example.com:9093");
    ok(c != NULL && c->nbinds == 1 && c->binds[0]->nvhosts == 3 && c->binds[0]->tls &&
           c->clusters[0]->bootstrap_sasl,
       "SASL_SSL shares a TLS socket (%s)", err);
    lk_conf_unref(c);
    /* Kafka and HTTP on one socket */
    EXPECT_ERR("t.conf:10: [broker k/1] advertised.listeners: b1.example.com:8443 conflicts with "
               "https://pulsar.example.com:8443 at line 2 ([pulsar p] webServiceUrl): bind "
               "0.0.0.0:8443 cannot serve both http and kafka",
               "[pulsar p]", "webServiceUrl = https://pulsar.example.com:8443", "[broker p/b1]",
               "advertisedListeners = internal:http://10.0.0.9:8080", K_HEAD, "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:8443");
    /* TLS and plaintext Kafka on one socket */
    EXPECT_ERR("t.conf:12: [broker j/1] advertised.listeners: j1.example.com:9093 conflicts with "
               "b1.example.com:9093 at line 6 ([broker k/1] advertised.listeners): bind "
               "0.0.0.0:9093 cannot mix TLS and plaintext",
               K_HEAD, K_B1, "[kafka j]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
               "inter.broker.listener.name = INTERNAL", "[broker j/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://j1.example.com:9093");
    /* lookout must not listen where it connects, across clusters */
    EXPECT_ERR("t.conf:12: [broker j/1] advertised.listeners: lookout would listen on "
               "10.0.0.1:19092 (bind 10.0.0.1:19092) and connect to it as the internal address "
               "INTERNAL://10.0.0.1:19092 of broker k/1 (line 6)",
               K_HEAD, K_B1, "[kafka j]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",
               "inter.broker.listener.name = INTERNAL", "[broker j/1]",
               "advertised.listeners = INTERNAL://10.0.0.2:19092,EXTERNAL://10.0.0.1:19092");
    /* a TLS bind needs a certificate, which lk_tls checks when it starts */
    c = LOAD(K_HEAD, K_B1);
    ok(c != NULL && c->ncerts == 0 && c->nbinds == 1 && c->binds[0]->tls == 1,
       "loads a Kafka TLS bind without a certificate (%s)", err);
    lk_conf_unref(c);
}

static void
test_kafka_pattern(void)
{
    struct lk_conf *c;
    const struct lk_bind *bd;

    /* a host pattern over TLS: one socket, shared with the known brokers */
    c = LOAD(K_HEAD, "broker.pattern = B$(nodeId).Example.com:9093", K_B1);
    if (ok(c != NULL, "host pattern loads (%s)", err)) {
        const struct lk_kafka_pattern *pt = c->clusters[0]->pattern;
        ok(pt != NULL && pt->host_has_id && !pt->port_has_id && pt->port == 9093 &&
               pt->scheme == LK_SCHEME_KAFKA_SSL && pt->line == 5,
           "the pattern");
        bd = c->binds[0];
        if (ok(c->nbinds == 1 && bd->nvhosts == 2, "one bind, two vhosts")) {
            ok(bd->vhosts[1].pattern == pt && bd->vhosts[1].broker == NULL &&
                   bd->vhosts[1].line == 5,
               "the pattern's vhost");
            ok_str(bd->vhosts[1].host, "b$(nodeId).example.com", "its host");
        }
    }
    lk_conf_unref(c);
    /* a host pattern in plaintext would put every node on one socket */
    EXPECT_ERR("t.conf:5: [kafka k] broker.pattern: every node it serves would share one "
               "plaintext socket on port 9092, and lookout cannot tell them apart: Kafka's "
               "PLAINTEXT carries no TLS SNI (give each node a port, e.g. "
               "kafka.example.com:$(9092+nodeId), or use SSL or SASL_SSL)",
               "[kafka k]", "lookupListenerName = EXTERNAL",
               "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
               "inter.broker.listener.name = INTERNAL", "broker.pattern = b$(nodeId).x:9092",
               "[broker k/1]", "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://127.0.0.1:9192");
    /* a known node's address that fits the pattern with another id */
    EXPECT_ERR("t.conf:5: [kafka k] broker.pattern: b7.example.com:9093 is the pattern's address "
               "for node 7, which is not in the map, but line 7 ([broker k/1] "
               "advertised.listeners) already serves it",
               K_HEAD, "broker.pattern = b$(nodeId).example.com:9093", "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b7.example.com:9093");
    /* a port pattern: known nodes on their own ports, the bootstrap below the base */
    c = LOAD(K_HEAD, "broker.pattern = 127.0.0.1:$(9100+nodeId)",
             "bootstrap.servers = 127.0.0.1:9099", "[broker k/1]",
             "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://127.0.0.1:9101");
    ok(c != NULL && c->nbinds == 2, "port pattern loads (%s)", err);
    lk_conf_unref(c);
    EXPECT_ERR("t.conf:5: [kafka k] broker.pattern: 127.0.0.1:9100 is the pattern's address for "
               "node 0, which is not in the map, but line 6 ([kafka k] bootstrap.servers) already "
               "serves it",
               K_HEAD, "broker.pattern = 127.0.0.1:$(9100+nodeId)",
               "bootstrap.servers = 127.0.0.1:9100", "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://127.0.0.1:9101");
    /* a port pattern on names binds `bind`: a wildcard takes every address */
    EXPECT_ERR("t.conf:5: [kafka k] broker.pattern: node 3, which is not in the map, would get "
               "port 9103 on 0.0.0.0, but bind 127.0.0.5:9103 listens there for 127.0.0.5:9103 "
               "at line 7 ([broker k/1] advertised.listeners)",
               K_HEAD, "broker.pattern = k.example.com:$(9100+nodeId)", "[broker k/1]",
               "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://127.0.0.5:9103");
    /* syntax */
    static const struct {
        const char *value, *err;
    } t[] = {
        {"b.example.com:9093", "'b.example.com:9093' holds no $(nodeId): every node would get the "
                               "same address (write e.g. b$(nodeId).kafka.example.com:9093 or "
                               "kafka.example.com:$(9100+nodeId))"},
        {"b$(node).example.com:9093", "'b$(node).example.com:9093': unknown '$' in the host "
                                      "(expected $(nodeId) in the host, $(BASE+nodeId) as the "
                                      "port)"},
        {"b$(nodeId)-$(nodeId).x:9093", "'b$(nodeId)-$(nodeId).x:9093': $(nodeId) twice in the host"},
        {"10.0.0.$(nodeId):9093", "'10.0.0.$(nodeId):9093': $(nodeId) in an IP address (the host "
                                  "must be a name; use $(BASE+nodeId) as the port to give each "
                                  "node a port instead)"},
        {"b$(nodeId.x:9093", "'b$(nodeId.x:9093': '$(' without ')'"},
        {"k.example.com:$(9100+node)", "'k.example.com:$(9100+node)': the port must be a number "
                                       "from 1 to 65535 or $(BASE+nodeId), e.g. $(9100+nodeId)"},
        {"k.example.com:$(nodeId+9100)", "'k.example.com:$(nodeId+9100)': the port must be a "
                                         "number from 1 to 65535 or $(BASE+nodeId), e.g. "
                                         "$(9100+nodeId)"},
        {"k.example.com:$(70000+nodeId)", "'k.example.com:$(70000+nodeId)': the port base is out "
                                          "of range 1-65535"},
        {"b$(nodeId).x:0", "'b$(nodeId).x:0': the port must be a number from 1 to 65535 or "
                           "$(BASE+nodeId), e.g. $(9100+nodeId)"},
        {"b$(nodeId).x", "'b$(nodeId).x' is not HOST:PORT"},
        {"b$(nodeId)_!.x:1", "'b$(nodeId)_!.x:1': bad host 'b$(nodeId)_!.x' (with a node id in "
                             "place of $(nodeId))"},
        {":$(9100+nodeId)", "':$(9100+nodeId)': bad host ''"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char line[256], want[512];
        snprintf(line, sizeof(line), "broker.pattern = %s", t[i].value);
        snprintf(want, sizeof(want), "t.conf:5: [kafka k] broker.pattern: %s", t[i].err);
        EXPECT_ERR(want, K_HEAD, line, K_B1);
    }
}

/* Writes text to dir/name. */
static void
spew(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void
test_kafka_registration(void)
{
    char dir[] = "/tmp/lk-test-kreg-XXXXXX", conf[64], want[2048], line[256];
    struct lk_conf *c;

    if (!ok(mkdtemp(dir) != NULL, "mkdtemp"))
        return;
    snprintf(conf, sizeof(conf), "%s/k.conf", dir);
    /* As Kafka's BrokerIdZNode.encode writes them (2.x and 3.x in ZooKeeper mode). */
    spew(dir, "1.json",
         "{\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":\"SSL\"},"
         "\"endpoints\":[\"INTERNAL://10.0.0.21:9092\",\"EXTERNAL://b1.kafka.example.com:9093\"],"
         "\"jmx_port\":-1,\"host\":\"10.0.0.21\",\"timestamp\":\"1700000000000\",\"port\":9092,"
         "\"version\":4}");
    mkdir(strcat(strcpy(want, dir), "/ids"), 0700);
    spew(dir, "ids/2.json",
         "{\n  \"features\": {\"metadata.version\": {\"min_version\": 1, \"max_version\": 7}},\n"
         "  \"listener_security_protocol_map\": {\"INTERNAL\": \"SSL\", \"EXTERNAL\": \"SSL\","
         " \"REPLICATION\": \"SASL_PLAINTEXT\"},\n"
         "  \"endpoints\": [\"INTERNAL://[fd00::22]:9094\", \"EXTERNAL://b2.kafka.example.com:9093\","
         " \"REPLICATION://10.1.0.22:9095\"],\n"
         "  \"rack\": \"r1\", \"jmx_port\": 9999, \"host\": null, \"timestamp\": \"1700000000000\","
         " \"port\": -1, \"version\": 5, \"future_field\": [1, 2]\n}\n");
    c = load_as(conf, CONF(LOOKOUT_TLS, "[kafka events]", "inter.broker.listener.name = INTERNAL",
                           "lookupListenerName = EXTERNAL",
                           "bootstrap.servers = kafka.example.com:9093", "[broker events/1]",
                           "registration = 1.json", "[broker events/2]",
                           "registration = ./ids/2.json"));
    if (ok(c != NULL, "v4 and v5 registrations load (%s)", err)) {
        const struct lk_broker *b1 = c->brokers[0], *b2 = c->brokers[1];
        snprintf(want, sizeof(want), "%s/1.json", dir);
        ok_str(b1->registration, want, "registration path, relative to the config");
        ok(b1->node_id == 1 && b1->nlisteners == 2, "node 1, two listeners");
        ok_str(lk_kafka_addr(b1->internal)->text, "INTERNAL://10.0.0.21:9092", "v4 internal");
        ok(lk_kafka_addr(b1->lookup)->scheme == LK_SCHEME_KAFKA_SSL, "v4 lookup SSL");
        ok(b2->node_id == 2 && b2->nlisteners == 3, "node 2, three listeners");
        ok_str(lk_kafka_addr(b2->internal)->text, "INTERNAL://[fd00::22]:9094", "v5 internal");
        ok(lk_kafka_addr(b2->internal)->scheme == LK_SCHEME_KAFKA_SSL,
           "the registration's own map: INTERNAL is SSL on node 2");
        ok(b2->listeners[2].sasl && b2->listeners[2].addr[LK_SCHEME_KAFKA] != NULL,
           "REPLICATION is SASL_PLAINTEXT");
        ok(c->nbinds == 1 && c->binds[0]->nvhosts == 3, "one bind, three vhosts");
    }
    lk_conf_unref(c);

    /* node 2's lookup listener speaks another protocol */
    spew(dir, "3.json",
         "{\"version\":5,\"endpoints\":[\"INTERNAL://10.0.0.23:9092\",\"EXTERNAL://b3:9093\"],"
         "\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":"
         "\"SASL_SSL\"}}");
    c = load_as(conf, CONF("[kafka events]", "inter.broker.listener.name = INTERNAL",
                           "lookupListenerName = EXTERNAL", "[broker events/1]",
                           "registration = 1.json", "[broker events/3]", "registration = 3.json"));
    snprintf(want, sizeof(want),
             "%s:7: [broker events/3] registration: the lookup listener 'EXTERNAL' is SASL_SSL "
             "here but SSL on broker events/1 (line 5): bootstrap.servers and broker.pattern "
             "serve one protocol for every broker",
             conf);
    ok(c == NULL, "mixed lookup protocols refused");
    ok_str(err, want, "... naming both brokers");
    lk_conf_unref(c);

    /* a registration without a map: Kafka's default map */
    spew(dir, "4.json",
         "{\"version\":4,\"endpoints\":[\"PLAINTEXT://10.0.0.24:9092\",\"SSL://b4:9093\"]}");
    c = load_as(conf, CONF("[kafka e]", "lookupListenerName = SSL", "[broker e/4]",
                           "registration = 4.json"));
    ok(c != NULL && c->brokers[0]->lookup != NULL &&
           lk_kafka_addr(c->brokers[0]->lookup)->scheme == LK_SCHEME_KAFKA_SSL,
       "no listener_security_protocol_map: the default map (%s)", err);
    lk_conf_unref(c);

    /* each broken file, and what is wrong with it */
    static const struct {
        const char *json, *err;
    } t[] = {
        {"{\"version\":4,", NULL /* jansson's message */},
        {"", NULL},
        {"[1]", "not a JSON object but an array"},
        {"{\"endpoints\":[\"INTERNAL://h:1\"]}", "no version"},
        {"{\"version\":\"4\",\"endpoints\":[]}", "version is a string, not an integer"},
        {"{\"version\":4.0}", "version is a number, not an integer"},
        {"{\"version\":3,\"endpoints\":[\"PLAINTEXT://h:1\"]}",
         "version 3 is not supported (lookout reads versions 4 and 5, which name their listeners)"},
        {"{\"version\":6}", "version 6 is not supported (lookout reads versions 4 and 5, which "
                            "name their listeners)"},
        {"{\"version\":4}", "no endpoints"},
        {"{\"version\":4,\"endpoints\":\"INTERNAL://h:1\"}",
         "endpoints is a string, not a non-empty array of NAME://host:port"},
        {"{\"version\":4,\"endpoints\":[]}",
         "endpoints is an empty array, not a non-empty array of NAME://host:port"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\",7]}",
         "endpoints[1] is an integer, not a string"},
        {"{\"version\":4,\"endpoints\":[\"CLIENT://cluster1.foo.com:9092\","
         "\"REPLICATION: //broker1.replication.local:9093\"],"
         "\"listener_security_protocol_map\":{\"CLIENT\":\"SSL\",\"REPLICATION\":\"PLAINTEXT\"}}",
         "endpoints[1]: 'REPLICATION: //broker1.replication.local:9093' is not NAME://host:port"},
        {"{\"version\":4,\"endpoints\":[\"CLIENT://h:1\"],"
         "\"listener._security._protocol._map\":{\"CLIENT\":\"SSL\"}}",
         "endpoints[0]: listener 'CLIENT' is not in Kafka's default map (the registration has "
         "no listener_security_protocol_map), so its security protocol is unknown"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\"],\"listener_security_protocol_map\":[]}",
         "listener_security_protocol_map is an array, not an object"},
        {"{\"version\":4,\"endpoints\":[\"A://h:1\"],\"listener_security_protocol_map\":{\"A\":1}}",
         "listener_security_protocol_map.A is an integer, not a string"},
        {"{\"version\":4,\"endpoints\":[\"A://h:1\"],\"listener_security_protocol_map\":"
         "{\"A\":\"TLS\"}}",
         "listener_security_protocol_map: unknown security protocol 'TLS' for listener 'A' "
         "(expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"},
        {"{\"version\":4,\"endpoints\":[\"A://h:1\"],\"listener_security_protocol_map\":"
         "{\"A:B\":\"SSL\"}}",
         "listener_security_protocol_map: bad entry \"A:B\": \"SSL\""},
        {"{\"version\":4,\"endpoints\":[\"A://h:1\"],\"listener_security_protocol_map\":"
         "{\"A\":\"SSL\",\"a\":\"SSL\"}}",
         "listener_security_protocol_map: listener 'a' is in the map twice"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\",\"PLAINTEXT://g:2\"]}",
         "endpoints[1]: listener 'PLAINTEXT' is listed twice"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://:9092\"]}",
         "endpoints[0]: bad address ':9092': no host (Kafka's \"default interface\" cannot be "
         "advertised: write the host clients connect to)"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\"],\"host\":5}",
         "host is an integer, not a string or null"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\"],\"port\":\"9092\"}",
         "port is a string, not an integer"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\"],\"jmx_port\":null}",
         "jmx_port is null, not an integer"},
        {"{\"version\":4,\"endpoints\":[\"PLAINTEXT://h:1\"],\"rack\":true}",
         "rack is a boolean, not a string or null"},
        {"{\"version\":5,\"endpoints\":[\"PLAINTEXT://h:1\"],\"features\":[]}",
         "features is an array, not an object"},
        {"{\"version\":5,\"endpoints\":[\"PLAINTEXT://h:1\"],\"features\":{\"f\":1}}",
         "features.f is an integer, not an object"},
        {"{\"version\":5,\"endpoints\":[\"PLAINTEXT://h:1\"],\"features\":{\"f\":"
         "{\"min_version\":\"1\"}}}",
         "features.f.min_version is a string, not an integer"},
        {"{\"version\":4,\"version\":5,\"endpoints\":[\"PLAINTEXT://h:1\"]}", NULL},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        subtest("%s", t[i].json);
        spew(dir, "bad.json", t[i].json);
        c = load_as(conf, CONF("[kafka e]", "lookupListenerName = SSL", "[broker e/1]",
                               "registration = bad.json"));
        ok(c == NULL, "refused");
        if (t[i].err != NULL) {
            snprintf(want, sizeof(want), "%s:4: [broker e/1] registration: bad.json: %s", conf,
                     t[i].err);
            ok_str(err, want, "message");
        } else {
            snprintf(want, sizeof(want), "%s:4: [broker e/1] registration: bad.json: not valid JSON: ",
                     conf);
            ok(strncmp(err, want, strlen(want)) == 0 && strstr(err, "(line ") != NULL,
               "jansson's message, with line and column (%s)", err);
        }
        lk_conf_unref(c);
    }
    subtest(NULL);

    /* the file itself */
    c = load_as(conf, CONF("[kafka e]", "lookupListenerName = SSL", "[broker e/1]",
                           "registration = nope.json"));
    snprintf(want, sizeof(want),
             "%s:4: [broker e/1] registration: cannot read %s/nope.json: No such file or directory",
             conf, dir);
    ok(c == NULL, "a missing file is refused");
    ok_str(err, want, "... naming the resolved path");
    c = load_as(conf, CONF("[kafka e]", "lookupListenerName = SSL", "[broker e/1]",
                           "registration = ids"));
    snprintf(want, sizeof(want),
             "%s:4: [broker e/1] registration: cannot read %s/ids: not a regular file", conf, dir);
    ok(c == NULL, "a directory is refused");
    ok_str(err, want, "... as not a regular file");
    {
        size_t big = 1024 * 1024 + 2;
        char *text = malloc(big + 1);
        memset(text, ' ', big);
        text[big] = '\0';
        text[0] = '{';
        text[big - 1] = '}';
        spew(dir, "big.json", text);
        free(text);
    }
    c = load_as(conf, CONF("[kafka e]", "lookupListenerName = SSL", "[broker e/1]",
                           "registration = big.json"));
    snprintf(want, sizeof(want),
             "%s:4: [broker e/1] registration: cannot read %s/big.json: larger than 1 MiB: is it "
             "a registration?",
             conf, dir);
    ok(c == NULL, "a file over 1 MiB is refused");
    ok_str(err, want, "... as too large");
    snprintf(line, sizeof(line), "registration =");
    c = load_as(conf, CONF("[kafka e]", "lookupListenerName = SSL", "[broker e/1]", line));
    snprintf(want, sizeof(want), "%s:4: [broker e/1] registration: empty path", conf);
    ok(c == NULL, "an empty path is refused");
    ok_str(err, want, "... as empty");

    static const char *const files[] = {"1.json", "ids/2.json", "3.json", "4.json", "bad.json",
                                        "big.json", NULL};
    for (size_t i = 0; files[i] != NULL; i++) {
        snprintf(want, sizeof(want), "%s/%s", dir, files[i]);
        unlink(want);
    }
    snprintf(want, sizeof(want), "%s/ids", dir);
    rmdir(want);
    rmdir(dir);
}

static void
test_kafka_dump(void)
{
    struct lk_conf *c = LOAD(KAFKA_CONF);
    char f[256], want[4096], *d;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    filter_names(c->clusters[0], f, sizeof(f));
    snprintf(want, sizeof(want),
             "cluster events (kafka): inter.broker.listener.name 'INTERNAL', lookup listener "
             "'EXTERNAL', unknown_api pass, leak_guard log, max_frame_bytes 104857600, "
             "timeout.idle 10m, filters %s\n"
             "  bootstrap kafka.example.com:9093 (SSL: lookout terminates TLS) on bind "
             "0.0.0.0:9093\n"
             "  broker events/1: node 1\n"
             "    internal INTERNAL://10.0.0.21:9092 (PLAINTEXT: plaintext to the broker)\n"
             "    lookup   EXTERNAL://b1.kafka.example.com:9093 (SSL: lookout terminates TLS) on "
             "bind 0.0.0.0:9093\n"
             "    map      node 1: 10.0.0.21:9092 -> b1.kafka.example.com:9093\n"
             "  broker events/2: node 2\n"
             "    internal INTERNAL://10.0.0.22:9092 (PLAINTEXT: plaintext to the broker)\n"
             "    lookup   EXTERNAL://b2.kafka.example.com:9093 (SSL: lookout terminates TLS) on "
             "bind 0.0.0.0:9093\n"
             "    map      node 2: 10.0.0.22:9092 -> b2.kafka.example.com:9093\n"
             "bind 0.0.0.0:9093 kafka+ssl (kafka)\n"
             "  b1.kafka.example.com -> broker events/1 (node 1) at INTERNAL://10.0.0.21:9092\n"
             "  b2.kafka.example.com -> broker events/2 (node 2) at INTERNAL://10.0.0.22:9092\n"
             "  kafka.example.com -> cluster events bootstrap.servers (any broker)\n",
             f);
    d = lk_conf_dump_text(c);
    ok_str(d, want, "the CONTRACT example");
    free(d);
    lk_conf_unref(c);

    /* SASL, TLS to the broker, other listeners, both pattern kinds */
    c = LOAD("[kafka k]", "lookupListenerName = EXTERNAL",
             "listener.security.protocol.map = INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL,REPL:PLAINTEXT",
             "inter.broker.listener.name = INTERNAL", "unknown_api = drop", "leak_guard = block",
             "broker.pattern = b$(nodeId).example.com:9093", "max_frame_bytes = 1m", "timeout.idle = 90s",
             "[broker k/1]",
             "advertised.listeners = INTERNAL://10.0.0.1:9094,EXTERNAL://b1.example.com:9093,"
             "REPL://10.0.0.1:9095");
    if (ok(c != NULL, "loads (%s)", err)) {
        filter_names(c->clusters[0], f, sizeof(f));
        snprintf(want, sizeof(want),
                 "cluster k (kafka): inter.broker.listener.name 'INTERNAL', lookup listener "
                 "'EXTERNAL', unknown_api drop, leak_guard block, max_frame_bytes 1048576, "
                 "timeout.idle 90s, filters %s\n"
                 "  pattern   b$(nodeId).example.com:9093 (SASL_SSL: lookout terminates TLS, SASL "
                 "passes through) for node ids not in the map on bind 0.0.0.0:9093\n"
                 "  broker k/1: node 1\n"
                 "    internal INTERNAL://10.0.0.1:9094 (SASL_SSL: TLS to the broker, SASL passes "
                 "through)\n"
                 "    lookup   EXTERNAL://b1.example.com:9093 (SASL_SSL: lookout terminates TLS, "
                 "SASL passes through) on bind 0.0.0.0:9093\n"
                 "    listener REPL://10.0.0.1:9095\n"
                 "    map      node 1: 10.0.0.1:9094 -> b1.example.com:9093\n"
                 "bind 0.0.0.0:9093 kafka+ssl (kafka)\n"
                 "  b1.example.com -> broker k/1 (node 1) at INTERNAL://10.0.0.1:9094\n"
                 "  b$(nodeId).example.com -> cluster k broker.pattern (node ids not in the map)\n",
                 f);
        d = lk_conf_dump_text(c);
        ok_str(d, want, "SASL and a host pattern");
        free(d);
    }
    lk_conf_unref(c);

    c = LOAD(K_HEAD, "broker.pattern = k.example.com:$(9100+nodeId)", K_B1);
    if (ok(c != NULL, "loads (%s)", err)) {
        d = lk_conf_dump_text(c);
        ok(strstr(d, "  pattern   k.example.com:$(9100+nodeId) (SSL: lookout terminates TLS) for "
                     "node ids not in the map, a socket per node, bound when it appears\n") != NULL,
           "a port pattern: %s", d);
        free(d);
    }
    lk_conf_unref(c);
}

struct refs_arg {
    struct lk_conf *c;
    int n;
};

static void *
ref_unref(void *p)
{
    struct refs_arg *a = p;

    for (int i = 0; i < a->n; i++)
        lk_conf_unref(lk_conf_ref(a->c));
    return NULL;
}

static void
test_refcount(void)
{
    struct lk_conf *c = LOAD(CONTRACT_CONF);
    pthread_t th[4];
    struct refs_arg a;

    if (!ok(c != NULL, "loads (%s)", err))
        return;
    ok(lk_conf_ref(c) == c && c->refs == 2, "ref returns the conf, two references");
    lk_conf_unref(c);
    ok(c->refs == 1, "back to one");
    a.c = c;
    a.n = 100000;
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, ref_unref, &a);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ok(c->refs == 1, "4 threads x 100000 ref/unref leave one reference (%d)", c->refs);
    lk_conf_unref(c); /* frees: ASan reports a leak or a double free here */
    lk_conf_unref(NULL);
}

/* The key tables: every row named, documented and in a section; one row
 * per key and section; the listing (lookout --keys) has a line per row
 * but the refused ones, and names the sections as lint.sh reads them. */
static void
test_key_tables(void)
{
    static const unsigned kinds[] = {LK_IN_LOOKOUT, LK_IN_PULSAR, LK_IN_KAFKA,
                                     LK_IN_BROKER_PULSAR, LK_IN_BROKER_KAFKA};
    size_t rows = 0, lines = 0, bad = 0, twice = 0;
    char *buf = NULL, line[512];
    size_t len = 0;
    FILE *f;

    for (size_t t = 0; lk_conf_tables[t] != NULL; t++)
        for (const struct lk_conf_key *k = lk_conf_tables[t]; k->name != NULL; k++) {
            if (k->in == 0 || k->doc == NULL || k->doc[0] == '\0' ||
                ((k->flags & LK_KEY_INIT) && (k->set == NULL || k->def == NULL)))
                bad++;
            for (size_t n = 0; n < sizeof(kinds) / sizeof(kinds[0]); n++) {
                if (!(k->in & kinds[n]))
                    continue;
                rows += !(k->flags & LK_KEY_REFUSED);
                /* the first row of that name in that section is this one */
                for (size_t u = 0; lk_conf_tables[u] != NULL; u++) {
                    const struct lk_conf_key *o =
                        lk_conf_key_find(lk_conf_tables[u], kinds[n], k->name, 0);
                    if (o != NULL && o != k && !(o->flags & LK_KEY_REFUSED) &&
                        !(k->flags & LK_KEY_REFUSED))
                        twice++;
                    if (o != NULL)
                        break;
                }
            }
        }
    ok(bad == 0, "every row has a section and a line; an initialised one a setter and a default");
    ok(twice == 0, "no key has two rows in one section");
    f = open_memstream(&buf, &len);
    lk_conf_keys_print(lk_conf_tables, f);
    fclose(f);
    f = fmemopen(buf, len, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *tab = strchr(line, '\t');
        lines++;
        if (tab == NULL || strchr(tab + 1, '\t') == NULL)
            bad++;
    }
    if (f != NULL)
        fclose(f);
    ok(lines == rows && bad == 0, "--keys: a SECTION<tab>KEY<tab>... line per row (%zu of %zu)",
       lines, rows);
    ok(strstr(buf, "lookout\ttimeout.connect\t5s\t") != NULL, "--keys: a [lookout] key, its default");
    ok(strstr(buf, "kafka\tmax_frame_bytes\t100m\t") != NULL &&
           strstr(buf, "pulsar\tmax_frame_bytes\t5184k\t") != NULL,
       "--keys: one key, a default per section");
    ok(strstr(buf, "kafka\tclient_listeners") == NULL, "--keys: a key a section refuses is not its");
    ok(strstr(buf, "broker-kafka\tregistration\t") != NULL, "--keys: [broker] by its cluster's kind");
    free(buf);
}

const struct lk_test_case lk_test_conf[] = {
    {"conf/basic", test_basic},
    {"conf/defaults", test_defaults},
    {"conf/lookout_keys", test_lookout_keys},
    {"conf/cluster_keys", test_cluster_keys},
    {"conf/broker_upstream", test_broker_upstream},
    {"conf/binary_only_map", test_binary_only_map},
    {"conf/no_web_warning", test_no_web_warning},
    {"conf/comments", test_comments},
    {"conf/long_lines", test_long_lines},
    {"conf/reader_errors", test_reader_errors},
    {"conf/value_errors", test_value_errors},
    {"conf/cert_errors", test_cert_errors},
    {"conf/cluster_errors", test_cluster_errors},
    {"conf/broker_errors", test_broker_errors},
    {"conf/unknown_keys", test_unknown_keys},
    {"conf/key_tables", test_key_tables},
    {"conf/filters", test_filters},
    {"conf/section_get", test_section_get},
    {"conf/relative_paths", test_relative_paths},
    {"conf/load_file", test_load_file},
    {"conf/durations", test_durations},
    {"conf/sizes", test_sizes},
    {"conf/bind_ip_literals", test_bind_ip_literals},
    {"conf/bind_names_share", test_bind_names_share},
    {"conf/bind_ipv6", test_bind_ipv6},
    {"conf/bind_conflicts", test_bind_conflicts},
    {"conf/self_dial", test_self_dial},
    {"conf/tls_without_cert", test_tls_without_cert},
    {"conf/admin_conflicts", test_admin_conflicts},
    {"conf/no_lookup", test_no_lookup},
    {"conf/order_independent", test_order_independent},
    {"conf/find_addr", test_find_addr},
    {"conf/broker_listener", test_broker_listener},
    {"conf/dump", test_dump},
    {"conf/reference", test_reference},
    {"conf/refcount", test_refcount},
    {"conf/kafka_basic", test_kafka_basic},
    {"conf/kafka_tls_upstream", test_kafka_tls_upstream},
    {"conf/kafka_keys", test_kafka_keys},
    {"conf/kafka_errors", test_kafka_errors},
    {"conf/kafka_binds", test_kafka_binds},
    {"conf/kafka_pattern", test_kafka_pattern},
    {"conf/kafka_registration", test_kafka_registration},
    {"conf/kafka_dump", test_kafka_dump},
    {NULL, NULL},
};
