/*
 * Broker registrations read from the clusters' ZooKeeper, turned into
 * listeners (lk_registry.h), with the networks they may name.  The JSON is
 * read with jansson and every address goes through lk_url.c's parsers, so
 * that a registration and a [broker] section mean the same thing; what
 * this file adds is the two documents' layouts and the safety checks on
 * data that lookout does not own.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <jansson.h>

#include "lk_pool.h"
#include "lk_registry.h"

/* Quoted input in messages is cut here, as in lk_url.c. */
#define EXCERPT_MAX 96
#define EXCERPT(p, len)                                                                            \
    (int)((len) > EXCERPT_MAX ? EXCERPT_MAX : (len)), (p), ((len) > EXCERPT_MAX ? "..." : "")

/* ZooKeeper's own default client port. */
#define ZK_DEFAULT_PORT "2181"
/* A registration is a few hundred bytes, but ZooKeeper's znode limit is
 * 1 MiB (jute.maxbuffer).  These are far above any real list, so that a
 * hostile one fails fast. */
#define MAX_LISTENERS 64
#define MAX_ZK_SERVERS 64
#define MAX_NETWORKS 1024

/* Networks -------------------------------------------------------------------- */

/* ::ffff:0:0/96, where IPv6 sockets carry IPv4 addresses (RFC 4291 2.5.5.2). */
static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* An IP literal (no brackets) into bytes: its family, or -1. */
static int
ip_bytes(const char *s, uint8_t out[16])
{
    if (inet_pton(AF_INET, s, out) == 1)
        return AF_INET;
    if (inet_pton(AF_INET6, s, out) == 1)
        return AF_INET6;
    return -1;
}

/* One item, "10.0.0.0/8" or "fd00::1", into *c. */
static int
cidr_parse(struct lk_str item, struct lk_cidr *c, char *err, size_t errlen)
{
    char buf[INET6_ADDRSTRLEN + 8];
    char *slash;
    unsigned long bits;
    unsigned max;

    if (item.len >= sizeof(buf))
        return lk_fail(err, errlen, "'%.*s%s' is not a network (expected ADDRESS/BITS)",
                    EXCERPT(item.p, item.len));
    memcpy(buf, item.p, item.len);
    buf[item.len] = '\0';
    if ((slash = strchr(buf, '/')) != NULL)
        *slash = '\0';
    memset(c, 0, sizeof(*c));
    if ((c->family = ip_bytes(buf, c->addr)) < 0)
        return lk_fail(err, errlen, "'%s' in '%.*s%s' is not an IPv4 or IPv6 address", buf,
                    EXCERPT(item.p, item.len));
    max = c->family == AF_INET ? 32 : 128;
    c->bits = max;
    if (slash == NULL)
        goto mapped;
    /* Digits only: strtoul would take "+8", " 8" and "0x8". */
    bits = 0;
    for (const char *p = slash + 1; *p != '\0' || p == slash + 1; p++) {
        if (*p < '0' || *p > '9' || bits > max)
            return lk_fail(err, errlen, "'%.*s%s': the prefix length must be 0 to %u",
                        EXCERPT(item.p, item.len), max);
        bits = bits * 10 + (unsigned long)(*p - '0');
    }
    if (bits > max)
        return lk_fail(err, errlen, "'%.*s%s': the prefix length must be 0 to %u",
                    EXCERPT(item.p, item.len), max);
    c->bits = (unsigned)bits;
    /* 10.1.2.3/8 most often means 10.1.2.3/32 or 10.0.0.0/8; guessing
     * either could open more than meant, so say which is which. */
    for (unsigned i = c->bits; i < max; i++)
        if (c->addr[i / 8] & (0x80u >> (i % 8)))
            return lk_fail(err, errlen,
                        "'%.*s%s' has host bits set (write the network, or the address alone "
                        "for one host)",
                        EXCERPT(item.p, item.len));
mapped:
    /* lk_cidr_contains matches an IPv4-mapped address as IPv4, so a
     * network inside ::ffff:0:0/96 is kept as the IPv4 network it maps
     * (the fuzzer found ::ffff:8:228 matching nothing).  A wider IPv6
     * network such as ::/0 does not take IPv4 destinations. */
    if (c->family == AF_INET6 && c->bits >= 96 && memcmp(c->addr, mapped_prefix, 12) == 0) {
        memmove(c->addr, c->addr + 12, 4);
        memset(c->addr + 4, 0, 12);
        c->family = AF_INET;
        c->bits -= 96;
    }
    return 0;
}

int
lk_cidrs_parse(const char *s, struct lk_cidr **out, char *err, size_t errlen)
{
    struct lk_cidr *nets = NULL;
    size_t n = 0;
    const char *p = s;

    *out = NULL;
    for (;;) {
        const char *comma = strchr(p, ',');
        struct lk_str item =
            lk_str_trim(lk_str_make(p, comma != NULL ? (size_t)(comma - p) : strlen(p)));

        if (item.len != 0) {
            if (n == MAX_NETWORKS) {
                lk_fail(err, errlen, "more than %d networks", MAX_NETWORKS);
                goto fail;
            }
            nets = lk_xrealloc(nets, (n + 1) * sizeof(*nets));
            if (cidr_parse(item, &nets[n], err, errlen) != 0)
                goto fail;
            n++;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (n == 0) {
        lk_fail(err, errlen, "no network (expected CIDR,CIDR,..., e.g. 10.0.0.0/8, fd00::/8)");
        goto fail;
    }
    *out = nets;
    return (int)n;

fail:
    free(nets);
    return -1;
}

/* Whether the first bits of a and b agree. */
static int
prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;

    if (memcmp(a, b, whole) != 0)
        return 0;
    return rest == 0 || ((a[whole] ^ b[whole]) & (uint8_t)(0xffu << (8 - rest))) == 0;
}

int
lk_cidr_contains(const struct lk_cidr *nets, size_t n, int family, const void *addr)
{
    const uint8_t *a = addr;

    /* ::ffff:10.0.0.1 is 10.0.0.1 on a dual-stack socket. */
    if (family == AF_INET6 && memcmp(a, mapped_prefix, sizeof(mapped_prefix)) == 0) {
        family = AF_INET;
        a += 12;
    }
    for (size_t i = 0; i < n; i++)
        if (nets[i].family == family && prefix_eq(nets[i].addr, a, nets[i].bits))
            return 1;
    return 0;
}

int
lk_cidr_contains_host(const struct lk_cidr *nets, size_t n, const char *host)
{
    uint8_t a[16];
    int family = ip_bytes(host, a);

    return family < 0 ? -1 : lk_cidr_contains(nets, n, family, a);
}

/* Metadata store addresses ------------------------------------------------------- */

void
lk_zk_connect_free(struct lk_zk_connect *zc)
{
    if (zc == NULL)
        return;
    for (size_t i = 0; i < zc->nservers; i++)
        free(zc->servers[i]);
    free(zc->servers);
    free(zc->chroot);
    free(zc->connect);
    memset(zc, 0, sizeof(*zc));
}

/* A ZooKeeper path: "/a/b", no empty, "." or ".." component, no trailing
 * '/', printable ASCII (ZooKeeper's PathUtils.validatePath refuses control
 * characters; lookout also keeps logs plain). */
static int
chroot_check(struct lk_str p, char *err, size_t errlen)
{
    size_t start = 1;

    for (size_t i = 1; i <= p.len; i++) {
        if (i < p.len && (p.p[i] < 0x21 || p.p[i] > 0x7e))
            return lk_fail(err, errlen, "chroot '%.*s%s': bad character", EXCERPT(p.p, p.len));
        if (i == p.len || p.p[i] == '/') {
            struct lk_str c = lk_str_make(p.p + start, i - start);
            if (c.len == 0 || lk_str_eq(c, LK_STRLIT(".")) || lk_str_eq(c, LK_STRLIT("..")))
                return lk_fail(err, errlen, "chroot '%.*s%s': empty, '.' or '..' path component",
                            EXCERPT(p.p, p.len));
            start = i + 1;
        }
    }
    return 0;
}

int
lk_zk_connect_parse(const char *s, int metadata_url, struct lk_zk_connect *out, char *err,
                    size_t errlen)
{
    static const char *const others[] = {
        "etcd:", "oxia:", "rocksdb:", "memory:", "local-memory:", NULL};
    struct lk_str all = lk_str_trim(lk_str_c(s)), hosts;
    const char *slash;
    size_t off = 0;

    memset(out, 0, sizeof(*out));
    if (metadata_url) {
        /* The broker's MetadataStoreFactory: "zk:" names ZooKeeper, and a
         * string with no known prefix is ZooKeeper too (the older form). */
        for (int i = 0; others[i] != NULL; i++)
            if (lk_str_has_prefix(all, lk_str_c(others[i])))
                return lk_fail(err, errlen,
                            "'%.*s%s' is not a ZooKeeper store: lookout reads the map from "
                            "ZooKeeper only (zk:host:2181,...)",
                            EXCERPT(all.p, all.len));
        if (lk_str_has_prefix(all, LK_STRLIT("zk:")))
            all = lk_str_make(all.p + 3, all.len - 3);
    }
    slash = memchr(all.p, '/', all.len);
    hosts = lk_str_make(all.p, slash != NULL ? (size_t)(slash - all.p) : all.len);
    if (slash != NULL) {
        struct lk_str ch = lk_str_make(slash, all.len - hosts.len);
        /* "/" alone is the root, as the ZooKeeper client reads it. */
        if (ch.len > 1) {
            if (chroot_check(ch, err, errlen) != 0)
                return -1;
            out->chroot = lk_xstrndup(ch.p, ch.len);
        }
    }
    out->connect = lk_xmalloc(all.len + 16 * (MAX_ZK_SERVERS + 1) + 1);
    for (const char *p = hosts.p, *end = hosts.p + hosts.len; p <= end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        struct lk_str item =
            lk_str_trim(lk_str_make(p, (size_t)((comma != NULL ? comma : end) - p)));
        char buf[300];
        struct lk_url u;

        if (item.len != 0) {
            int has_port;
            if (out->nservers == MAX_ZK_SERVERS) {
                lk_fail(err, errlen, "more than %d ZooKeeper servers", MAX_ZK_SERVERS);
                goto fail;
            }
            if (item.len > 260) {
                lk_fail(err, errlen, "bad address '%.*s%s': too long", EXCERPT(item.p, item.len));
                goto fail;
            }
            /* The port is optional, as in ZooKeeper's ConnectStringParser:
             * "zk1" and "[::1]" take 2181.  An IPv6 literal without
             * brackets must carry its port ("fd00::1:2181", the last ':'
             * splits), since "fd00::1" cannot say where its port is. */
            if (item.p[0] == '[')
                has_port = item.p[item.len - 1] != ']';
            else
                has_port = memchr(item.p, ':', item.len) != NULL;
            snprintf(buf, sizeof(buf), "%.*s%s", (int)item.len, item.p,
                     has_port ? "" : ":" ZK_DEFAULT_PORT);
            if (lk_kafka_addr_parse(buf, strlen(buf), LK_SCHEME_KAFKA, &u, err, errlen) != 0)
                goto fail;
            out->servers = lk_xrealloc(out->servers, (out->nservers + 1) * sizeof(*out->servers));
            out->servers[out->nservers++] = u.hostport;
            u.hostport = NULL;
            lk_url_free(&u);
            off += (size_t)sprintf(out->connect + off, "%s%s", out->nservers > 1 ? "," : "",
                                   out->servers[out->nservers - 1]);
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (out->nservers == 0) {
        lk_fail(err, errlen, "no ZooKeeper server (expected host:2181,host:2181[/chroot])");
        goto fail;
    }
    if (out->chroot != NULL)
        sprintf(out->connect + off, "%s", out->chroot);
    return 0;

fail:
    lk_zk_connect_free(out);
    return -1;
}

/* Kafka: /brokers/ids/ID ------------------------------------------------------------ */

/* The JSON type's name, for messages. */
static const char *
json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/*
 * Checks a registration's fields and builds the broker's listeners: the
 * format Kafka's BrokerIdZNode writes, version 4 (Kafka 0.10.0 and later)
 * or 5 (2.7 and later, adds `features`).  `endpoints` is what
 * advertised.listeners would say, and `listener_security_protocol_map`
 * gives each listener's protocol (Kafka's default map when absent, as
 * Kafka reads it).  The legacy host/port, jmx_port, rack and features are
 * checked for their types only: Kafka writes host/port as the first
 * PLAINTEXT endpoint (null and -1 without one), so they say nothing the
 * endpoints do not.  Other fields are ignored.  Writes the problem into msg
 * and returns -1, leaving what it added in *ls for the caller to free.
 */
static int
read_kafka(json_t *root, struct lk_listener **ls, size_t *nls, char *msg, size_t len)
{
    json_t *v, *eps, *map;
    struct lk_kafka_secmap *secmap = NULL;
    char *maptext = NULL;
    size_t i, nmap = 0, off = 0;
    const char *key;
    json_int_t version;
    int n, rc = -1;

    if (!json_is_object(root)) {
        snprintf(msg, len, "not a JSON object but %s", json_type_name(root));
        return -1;
    }
    if ((v = json_object_get(root, "version")) == NULL) {
        snprintf(msg, len, "no version");
        return -1;
    }
    if (!json_is_integer(v)) {
        snprintf(msg, len, "version is %s, not an integer", json_type_name(v));
        return -1;
    }
    version = json_integer_value(v);
    if (version != 4 && version != 5) {
        snprintf(msg, len,
                 "version %lld is not supported (lookout reads versions 4 and 5, which name "
                 "their listeners)",
                 (long long)version);
        return -1;
    }
    /* The legacy fields, written for clients older than listener names. */
    if ((v = json_object_get(root, "host")) != NULL && !json_is_string(v) && !json_is_null(v)) {
        snprintf(msg, len, "host is %s, not a string or null", json_type_name(v));
        return -1;
    }
    static const char *const ints[] = {"port", "jmx_port", NULL};
    for (i = 0; ints[i] != NULL; i++)
        if ((v = json_object_get(root, ints[i])) != NULL && !json_is_integer(v)) {
            snprintf(msg, len, "%s is %s, not an integer", ints[i], json_type_name(v));
            return -1;
        }
    if ((v = json_object_get(root, "rack")) != NULL && !json_is_string(v) && !json_is_null(v)) {
        snprintf(msg, len, "rack is %s, not a string or null", json_type_name(v));
        return -1;
    }
    if ((v = json_object_get(root, "features")) != NULL) {
        json_t *f;
        if (!json_is_object(v)) {
            snprintf(msg, len, "features is %s, not an object", json_type_name(v));
            return -1;
        }
        json_object_foreach(v, key, f)
        {
            json_t *r;
            const char *k2;
            if (!json_is_object(f)) {
                snprintf(msg, len, "features.%.64s is %s, not an object", key, json_type_name(f));
                return -1;
            }
            json_object_foreach(f, k2, r)
            {
                if (!json_is_integer(r)) {
                    snprintf(msg, len, "features.%.64s.%.64s is %s, not an integer", key, k2,
                             json_type_name(r));
                    return -1;
                }
            }
        }
    }

    /* The map as listener.security.protocol.map would write it, so that
     * it is checked as that is. */
    map = json_object_get(root, "listener_security_protocol_map");
    if (map != NULL) {
        json_t *p;
        if (!json_is_object(map)) {
            snprintf(msg, len, "listener_security_protocol_map is %s, not an object",
                     json_type_name(map));
            return -1;
        }
        json_object_foreach(map, key, p)
        {
            size_t need;
            if (!json_is_string(p)) {
                snprintf(msg, len, "listener_security_protocol_map.%.64s is %s, not a string", key,
                         json_type_name(p));
                goto out;
            }
            if (strpbrk(key, ":,") != NULL || key[0] == '\0' ||
                strpbrk(json_string_value(p), ":,") != NULL) {
                snprintf(msg, len, "listener_security_protocol_map: bad entry \"%.64s\": \"%.64s\"",
                         key, json_string_value(p));
                goto out;
            }
            need = off + strlen(key) + 1 + json_string_length(p) + 2;
            maptext = lk_xrealloc(maptext, need);
            off += (size_t)sprintf(maptext + off, "%s%s:%s", off != 0 ? "," : "", key,
                                   json_string_value(p));
        }
    }
    {
        char m2[400];
        n = lk_kafka_secmap_parse(maptext != NULL ? maptext : lk_kafka_default_secmap, &secmap, m2,
                                  sizeof(m2));
        if (n < 0) {
            snprintf(msg, len, "listener_security_protocol_map: %s", m2);
            goto out;
        }
        nmap = (size_t)n;
    }

    if ((eps = json_object_get(root, "endpoints")) == NULL) {
        snprintf(msg, len, "no endpoints");
        goto out;
    }
    if (!json_is_array(eps) || json_array_size(eps) == 0) {
        snprintf(msg, len, "endpoints is %s, not a non-empty array of NAME://host:port",
                 json_is_array(eps) ? "an empty array" : json_type_name(eps));
        goto out;
    }
    /* Each endpoint is checked against the others: bound the square. */
    if (json_array_size(eps) > MAX_LISTENERS) {
        snprintf(msg, len, "endpoints has %zu entries, more than %d", json_array_size(eps),
                 MAX_LISTENERS);
        goto out;
    }
    for (i = 0; i < json_array_size(eps); i++) {
        json_t *ep = json_array_get(eps, i);
        char m2[400];
        if (!json_is_string(ep)) {
            snprintf(msg, len, "endpoints[%zu] is %s, not a string", i, json_type_name(ep));
            goto out;
        }
        if (lk_kafka_listener_add(
                ls, nls, lk_str_make(json_string_value(ep), json_string_length(ep)), secmap, nmap,
                map != NULL ? "listener_security_protocol_map"
                            : "Kafka's default map (the registration has no "
                              "listener_security_protocol_map)",
                m2, sizeof(m2)) != 0) {
            snprintf(msg, len, "endpoints[%zu]: %s", i, m2);
            goto out;
        }
    }
    rc = 0;
out:
    lk_kafka_secmap_free(secmap, nmap);
    free(maptext);
    return rc;
}

int
lk_registry_kafka_listeners(const char *data, size_t len, struct lk_listener **ls, size_t *n,
                            char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    int rc;

    *ls = NULL;
    *n = 0;
    /* A registration is one object; a duplicate key would hide a value. */
    if ((root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL)
        return lk_fail(err, errlen, "not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                    jerr.column);
    rc = read_kafka(root, ls, n, err, errlen);
    json_decref(root);
    if (rc != 0) {
        lk_listeners_free(*ls, *n);
        *ls = NULL;
        *n = 0;
    }
    return rc;
}

/* Pulsar: /loadbalance/brokers/BROKER_ID --------------------------------------------- */

/* The URL fields of both forms, and the scheme each must have. */
struct url_field {
    const char *name;
    enum lk_scheme scheme;
};
/* AdvertisedListener (PR 14839 added the two HTTP ones). */
static const struct url_field listener_fields[] = {
    {"brokerServiceUrl", LK_SCHEME_PULSAR},
    {"brokerServiceUrlTls", LK_SCHEME_PULSAR_SSL},
    {"brokerHttpUrl", LK_SCHEME_HTTP},
    {"brokerHttpsUrl", LK_SCHEME_HTTPS},
};
/* LocalBrokerData and BrokerLookupData alike: the internal listener's. */
static const struct url_field top_fields[] = {
    {"pulsarServiceUrl", LK_SCHEME_PULSAR},
    {"pulsarServiceUrlTls", LK_SCHEME_PULSAR_SSL},
    {"webServiceUrl", LK_SCHEME_HTTP},
    {"webServiceUrlTls", LK_SCHEME_HTTPS},
};

/*
 * The URL of field f in obj: *out NULL when absent or null (Jackson's
 * NON_NULL omits unset TLS URLs; older writers put null), else parsed and
 * of f's scheme.  where prefixes messages ("advertisedListeners.external.").
 */
static int
url_field(json_t *obj, const struct url_field *f, const char *where, struct lk_url **out, char *err,
          size_t errlen)
{
    json_t *v = json_object_get(obj, f->name);
    struct lk_url *u;
    char m[300];

    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return lk_fail(err, errlen, "%s%s is %s, not a string", where, f->name, json_type_name(v));
    u = lk_xmalloc(sizeof(*u));
    if (lk_url_parse(json_string_value(v), json_string_length(v), u, m, sizeof(m)) != 0) {
        free(u);
        return lk_fail(err, errlen, "%s%s: %s", where, f->name, m);
    }
    if (u->scheme != f->scheme) {
        lk_fail(err, errlen, "%s%s: %s is not a %s URL", where, f->name, u->text,
             lk_scheme_name(f->scheme));
        lk_url_free(u);
        free(u);
        return -1;
    }
    *out = u;
    return 0;
}

static void
url_drop(struct lk_url *u)
{
    lk_url_free(u);
    free(u);
}

static ssize_t
find_listener(const struct lk_listener *ls, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ls[i].name, name) == 0)
            return (ssize_t)i;
    return -1;
}

/* Whether two addresses are the same scheme://host:port. */
static int
same_url(const struct lk_url *a, const struct lk_url *b)
{
    return a != NULL && b != NULL && strcmp(a->text, b->text) == 0;
}

/*
 * Reads a Pulsar registration into *ls and *nls and picks the internal
 * listener's name into *internal (pointing into *ls).  The map gives the
 * listeners; the top-level URLs are the internal listener's (the broker
 * sets pulsarServiceUrl from it), and fill in what the map lacks, which
 * for the modular load manager is at least the HTTP address
 * ({"internal":{"brokerServiceUrl":...}} in the facts' example).
 */
static int
read_pulsar(json_t *root, const char *internal_name, struct lk_listener **ls, size_t *nls,
            const char **internal, char *err, size_t errlen)
{
    struct lk_url *top[4] = {NULL};
    json_t *map, *l;
    const char *name;
    char where[128], m[400];
    int rc = -1;
    ssize_t ii;

    if (!json_is_object(root))
        return lk_fail(err, errlen, "not a JSON object but %s", json_type_name(root));
    map = json_object_get(root, "advertisedListeners");
    if (map != NULL && !json_is_null(map) && !json_is_object(map))
        return lk_fail(err, errlen, "advertisedListeners is %s, not an object", json_type_name(map));
    if (map != NULL && json_is_object(map)) {
        json_object_foreach(map, name, l)
        {
            if (json_is_null(l))
                continue;
            if (!json_is_object(l))
                return lk_fail(err, errlen, "advertisedListeners.%.64s is %s, not an object", name,
                            json_type_name(l));
            /* Pulsar takes a name up to the first ':'; lookout also keeps
             * it printable for its logs and --check. */
            if (name[0] == '\0' || lk_kafka_name_check(lk_str_c(name), m, sizeof(m)) != 0)
                return lk_fail(err, errlen, "advertisedListeners: bad listener name '%.64s'", name);
            if (*nls == MAX_LISTENERS)
                return lk_fail(err, errlen, "more than %d listeners", MAX_LISTENERS);
            snprintf(where, sizeof(where), "advertisedListeners.%s.", name);
            for (size_t f = 0; f < 4; f++) {
                struct lk_url *u;
                if (url_field(l, &listener_fields[f], where, &u, err, errlen) != 0)
                    return -1;
                if (u == NULL)
                    continue;
                if (lk_listener_add(ls, nls, lk_str_c(name), lk_str_c(u->text), m, sizeof(m)) !=
                    0) {
                    url_drop(u);
                    return lk_fail(err, errlen, "%s%s: %s", where, listener_fields[f].name, m);
                }
                url_drop(u);
            }
        }
    }
    for (size_t f = 0; f < 4; f++)
        if (url_field(root, &top_fields[f], "", &top[f], err, errlen) != 0)
            goto out;
    /* Without internalListenerName, the internal listener is the one the
     * broker took pulsarServiceUrl(Tls) from; the map's order means
     * nothing (Java maps), so "the first one" cannot be used here. */
    if (internal_name == NULL) {
        for (size_t i = 0; i < *nls && internal_name == NULL; i++)
            if (same_url((*ls)[i].addr[LK_SCHEME_PULSAR], top[0]) ||
                same_url((*ls)[i].addr[LK_SCHEME_PULSAR_SSL], top[1]))
                internal_name = (*ls)[i].name;
        if (internal_name == NULL)
            internal_name = "internal"; /* Pulsar 5.0's default name */
    }
    ii = find_listener(*ls, *nls, internal_name);
    for (size_t f = 0; f < 4; f++) {
        if (top[f] == NULL || (ii >= 0 && (*ls)[ii].addr[top[f]->scheme] != NULL))
            continue;
        if (lk_listener_add(ls, nls, lk_str_c(internal_name), lk_str_c(top[f]->text), m,
                            sizeof(m)) != 0) {
            lk_fail(err, errlen, "%s (for the internal listener '%s'): %s", top_fields[f].name,
                 internal_name, m);
            goto out;
        }
        ii = find_listener(*ls, *nls, internal_name);
    }
    if (ii < 0) {
        lk_fail(err, errlen,
             "no internal listener '%s': advertisedListeners lacks it and there is no "
             "webServiceUrl or pulsarServiceUrl",
             internal_name);
        goto out;
    }
    *internal = (*ls)[ii].name;
    rc = 0;
out:
    for (size_t f = 0; f < 4; f++)
        if (top[f] != NULL)
            url_drop(top[f]);
    return rc;
}

/* Checks ----------------------------------------------------------------------------- */

int
lk_pulsar_listeners_check(const struct lk_listener *internal, const struct lk_listener *lookup,
                          char *err, size_t errlen)
{
    if (lookup == NULL)
        return 0;
    /* Whatever lookout accepts on the lookup listener it forwards to the
     * internal listener, in the same protocol; nothing else needs an
     * internal address of a family.  A map of pulsar:// and pulsar+ssl://
     * addresses only (Pulsar's broker.conf examples) is whole: lookout
     * then serves no HTTP for the broker, and the service addresses pick
     * only brokers with an internal address of their family
     * (lk_pick_broker). */
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
        if (lookup->addr[sc] != NULL && lk_listener_pick(internal, sc, 0) == NULL)
            return lk_fail(err, errlen,
                        "the lookup listener '%s' has %s, but the internal listener '%s' has no "
                        "%s or %s address to forward it to",
                        lookup->name, lookup->addr[sc]->text, internal->name, lk_scheme_name(sc),
                        lk_scheme_name(lk_scheme_sibling(sc)));
    return 0;
}

int
lk_listener_internal_check(const struct lk_cluster *cl, const struct lk_listener *l, char *err,
                           size_t errlen)
{
    if (cl->ninternal_networks == 0)
        return 0;
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
        const struct lk_url *u = l->addr[sc];
        if (u != NULL &&
            lk_cidr_contains_host(cl->internal_networks, cl->ninternal_networks, u->host) == 0)
            return lk_fail(err, errlen,
                        "the internal listener '%s' has %s, outside internal_networks: lookout "
                        "dials only inside them",
                        l->name, u->text);
    }
    return 0;
}

/* Whether the lookup listener's IP literals are on cl's bind address, as
 * the binding rule would bind them (names bind on `bind` anyway): a
 * registration must not make lookout listen on an address the operator
 * did not give it. */
static int
lookup_bind_check(const struct lk_cluster *cl, const struct lk_listener *l, char *err,
                  size_t errlen)
{
    static const uint8_t zero[16];
    uint8_t bind[16], a[16];
    int bfam = ip_bytes(cl->bind, bind);

    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
        const struct lk_url *u = l->addr[sc];
        int fam;
        size_t alen;

        if (u == NULL || (fam = ip_bytes(u->host, a)) < 0)
            continue;
        alen = fam == AF_INET ? 4 : 16;
        if (fam != bfam || (memcmp(bind, zero, alen) != 0 && memcmp(bind, a, alen) != 0))
            return lk_fail(err, errlen,
                        "the lookup listener '%s' has %s, which lookout would bind outside the "
                        "cluster's bind %s",
                        l->name, u->text, cl->bind);
    }
    return 0;
}

void
lk_registration_free(struct lk_registration *r)
{
    if (r == NULL)
        return;
    free(r->id);
    lk_listeners_free(r->listeners, r->nlisteners);
    memset(r, 0, sizeof(*r));
}

/* A Kafka znode name: the node id in canonical decimal, 0-2147483647 (the
 * form [broker CLUSTER/ID] takes). */
static int
node_id_parse(const char *s, int32_t *id)
{
    long long v = 0;

    if (s[0] == '\0' || (s[0] == '0' && s[1] != '\0'))
        return -1;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v > INT32_MAX)
            return -1;
    }
    *id = (int32_t)v;
    return 0;
}

int
lk_registration_parse(const struct lk_cluster *cl, const char *znode, const char *data, size_t len,
                      struct lk_registration *out, char *err, size_t errlen)
{
    int kafka = cl->proto == LK_PROTO_KAFKA;
    const char *internal = cl->internal_listener;
    ssize_t ii, li = -1;
    char m[400];

    memset(out, 0, sizeof(*out));
    out->node_id = -1;
    if (kafka) {
        if (node_id_parse(znode, &out->node_id) != 0)
            return lk_fail(err, errlen, "znode '%.64s' is not a node id (0 to 2147483647)", znode);
        if (lk_registry_kafka_listeners(data, len, &out->listeners, &out->nlisteners, err,
                                        errlen) != 0)
            return -1;
    } else {
        struct lk_url id;
        json_error_t jerr;
        json_t *root;
        int rc;

        /* brokerId is advertisedAddress:webServicePort. */
        if (lk_kafka_addr_parse(znode, strlen(znode), LK_SCHEME_HTTP, &id, m, sizeof(m)) != 0)
            return lk_fail(err, errlen, "znode name is not a brokerId host:port: %s", m);
        lk_url_free(&id);
        if ((root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL)
            return lk_fail(err, errlen, "not valid JSON: %s (line %d, column %d)", jerr.text,
                        jerr.line, jerr.column);
        rc = read_pulsar(root, internal, &out->listeners, &out->nlisteners, &internal, err, errlen);
        json_decref(root);
        if (rc != 0)
            goto fail;
    }
    out->id = lk_xstrdup(znode);
    if ((ii = find_listener(out->listeners, out->nlisteners, internal)) < 0) {
        lk_fail(err, errlen, "no listener '%s', the %s", internal,
             kafka ? "inter.broker.listener.name" : "internal listener");
        goto fail;
    }
    out->internal = (size_t)ii;
    out->lookup = out->nlisteners;
    if (cl->lookup_listener != NULL) {
        if ((li = find_listener(out->listeners, out->nlisteners, cl->lookup_listener)) < 0) {
            lk_fail(err, errlen,
                 "no listener '%s', the lookup listener: clients could not be sent "
                 "to this broker",
                 cl->lookup_listener);
            goto fail;
        }
        if (li == ii) {
            lk_fail(err, errlen,
                 "the lookup listener '%s' is the internal listener: lookout would listen on the "
                 "addresses it connects to",
                 cl->lookup_listener);
            goto fail;
        }
        out->lookup = (size_t)li;
    }
    if (!kafka && lk_pulsar_listeners_check(&out->listeners[ii],
                                            li >= 0 ? &out->listeners[li] : NULL, err, errlen) != 0)
        goto fail;
    if (cl->ninternal_networks == 0) {
        lk_fail(err, errlen,
             "the cluster has no internal_networks: lookout dials no registered "
             "broker without them");
        goto fail;
    }
    if (lk_listener_internal_check(cl, &out->listeners[ii], err, errlen) != 0)
        goto fail;
    if (li >= 0 && lookup_bind_check(cl, &out->listeners[li], err, errlen) != 0)
        goto fail;
    return 0;

fail:
    lk_registration_free(out);
    out->node_id = -1;
    return -1;
}
