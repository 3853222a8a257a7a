/*
 * Addresses as the brokers write them: "scheme://host[:port][/]" URLs and
 * the advertisedListeners list "name:scheme://host:port,..." (Pulsar), and
 * Kafka's advertised.listeners "NAME://host:port,...", its
 * listener.security.protocol.map and lookout's broker.pattern.  These are
 * pure string functions with no I/O, so that the config loader, the dump and
 * the filters share one notion of an address, and so that they can be unit
 * tested and fuzzed as they stand.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <arpa/inet.h>
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lk_conf.h"
#include "lk_pool.h"

/* Quoted input in messages is cut here: a 10 KiB listener line must not
 * push the useful part of the message out of the caller's buffer. */
#define EXCERPT_MAX 96

/* url: a scheme of config URLs, which lk_scheme_parse knows.  Kafka
 * addresses have no URL and no default port. */
static const struct {
    const char *name;
    uint16_t port;
    int tls;
    int url;
} schemes[LK_SCHEME__COUNT] = {
    [LK_SCHEME_HTTP] = {"http", 80, 0, 1},
    [LK_SCHEME_HTTPS] = {"https", 443, 1, 1},
    [LK_SCHEME_PULSAR] = {"pulsar", 6650, 0, 1},
    [LK_SCHEME_PULSAR_SSL] = {"pulsar+ssl", 6651, 1, 1},
    [LK_SCHEME_KAFKA] = {"kafka", 0, 0, 0},
    [LK_SCHEME_KAFKA_SSL] = {"kafka+ssl", 0, 1, 0},
};

const char *
lk_scheme_name(enum lk_scheme scheme)
{
    return (unsigned)scheme < LK_SCHEME__COUNT ? schemes[scheme].name : "?";
}

int
lk_scheme_is_tls(enum lk_scheme scheme)
{
    return (unsigned)scheme < LK_SCHEME__COUNT && schemes[scheme].tls;
}

uint16_t
lk_scheme_default_port(enum lk_scheme scheme)
{
    return (unsigned)scheme < LK_SCHEME__COUNT ? schemes[scheme].port : 0;
}

enum lk_scheme
lk_scheme_sibling(enum lk_scheme scheme)
{
    switch (scheme) {
    case LK_SCHEME_HTTP:
        return LK_SCHEME_HTTPS;
    case LK_SCHEME_HTTPS:
        return LK_SCHEME_HTTP;
    case LK_SCHEME_PULSAR:
        return LK_SCHEME_PULSAR_SSL;
    case LK_SCHEME_PULSAR_SSL:
        return LK_SCHEME_PULSAR;
    case LK_SCHEME_KAFKA:
        return LK_SCHEME_KAFKA_SSL;
    case LK_SCHEME_KAFKA_SSL:
        return LK_SCHEME_KAFKA;
    default:
        assert(0);
        return scheme;
    }
}

int
lk_scheme_parse(struct lk_str name)
{
    /* Schemes are case-insensitive (RFC 3986 3.1); Pulsar's validator
     * compares them with equalsIgnoreCase too. */
    for (int i = 0; i < LK_SCHEME__COUNT; i++)
        if (schemes[i].url && lk_str_eqi(name, lk_str_c(schemes[i].name)))
            return i;
    return -1;
}

/* Writes fmt into err, if there is an err (lk_conf.h). */
int
lk_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* printf arguments for "%.*s%s": at most EXCERPT_MAX bytes, then "...". */
#define EXCERPT(p, len)                                                                            \
    (int)((len) > EXCERPT_MAX ? EXCERPT_MAX : (len)), (p), ((len) > EXCERPT_MAX ? "..." : "")

static int
is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

/*
 * Reads the host at *pp (up to end): "[IPv6]", or a name or IPv4 literal up
 * to ':' or '/'; with bare_v6 (Kafka), a host holding ':' up to the last
 * ':' is an IPv6 literal without brackets.  Messages quote s (len bytes) as
 * "<what> '...'".  Sets *host, *hlen, *v6 and moves *pp past the host.
 */
static int
parse_host(const char *s, size_t len, const char *what, const char **pp, const char *end,
           int bare_v6, const char **host, size_t *hlen, int *v6, char *err, size_t errlen)
{
    const char *p = *pp, *last = NULL;
    int numeric = 1;

    *v6 = 0;
    if (bare_v6 && p < end && *p != '[')
        for (const char *q = p; q < end; q++)
            if (*q == ':')
                last = q;
    if ((p < end && *p == '[') || (last != NULL && memchr(p, ':', (size_t)(last - p)) != NULL)) {
        /* An IPv6 literal (RFC 3986 3.2.2); inet_pton refuses zone ids,
         * which a listener address cannot use anyway. */
        char buf[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        const char *close = *p == '[' ? memchr(p, ']', (size_t)(end - p)) : last;

        if (close == NULL)
            return lk_fail(err, errlen, "%s '%.*s%s': '[' without ']'", what, EXCERPT(s, len));
        *host = *p == '[' ? p + 1 : p;
        *hlen = (size_t)(close - *host);
        if (*hlen == 0 || *hlen >= sizeof(buf))
            return lk_fail(err, errlen, "%s '%.*s%s': bad IPv6 address", what, EXCERPT(s, len));
        memcpy(buf, *host, *hlen);
        buf[*hlen] = '\0';
        if (inet_pton(AF_INET6, buf, &a6) != 1)
            return lk_fail(err, errlen, "%s '%.*s%s': bad IPv6 address '%s'", what, EXCERPT(s, len),
                        buf);
        *v6 = 1;
        *pp = *p == '[' ? close + 1 : close;
        return 0;
    }
    *host = p;
    while (p < end && *p != ':' && *p != '/')
        p++;
    *hlen = (size_t)(p - *host);
    if (*hlen == 0)
        return lk_fail(err, errlen, "%s '%.*s%s': no host", what, EXCERPT(s, len));
    for (size_t i = 0; i < *hlen; i++) {
        char c = (*host)[i];
        if (!is_host_char(c))
            return lk_fail(err, errlen, "%s '%.*s%s': bad character '%c' in the host", what,
                        EXCERPT(s, len), c >= 0x20 && c < 0x7f ? c : '?');
        if (!(c >= '0' && c <= '9') && c != '.')
            numeric = 0;
    }
    if (*hlen > 253)
        return lk_fail(err, errlen, "%s '%.*s%s': host name longer than 253 bytes", what,
                    EXCERPT(s, len));
    if (numeric) {
        /* All digits and dots: an IPv4 literal or a mistake, never a
         * name to bind the wildcard for. */
        char buf[INET_ADDRSTRLEN];
        struct in_addr a4;

        if (*hlen >= sizeof(buf))
            return lk_fail(err, errlen, "%s '%.*s%s': bad IPv4 address", what, EXCERPT(s, len));
        memcpy(buf, *host, *hlen);
        buf[*hlen] = '\0';
        if (inet_pton(AF_INET, buf, &a4) != 1)
            return lk_fail(err, errlen, "%s '%.*s%s': bad IPv4 address '%s'", what, EXCERPT(s, len),
                        buf);
    }
    *pp = p;
    return 0;
}

/* Reads ":port" at *pp, 1-65535, into *port. */
static int
parse_port(const char *s, size_t len, const char *what, const char **pp, const char *end,
           unsigned long *port, char *err, size_t errlen)
{
    const char *p = *pp + 1, *digits = p;

    *port = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (*port <= 65535)
            *port = *port * 10 + (unsigned long)(*p - '0');
        p++;
    }
    if (p == digits)
        return lk_fail(err, errlen, "%s '%.*s%s': no port after ':'", what, EXCERPT(s, len));
    if (*port == 0 || *port > 65535)
        return lk_fail(err, errlen, "%s '%.*s%s': port %.*s is out of range 1-65535", what,
                    EXCERPT(s, len), (int)(p - digits > 12 ? 12 : p - digits), digits);
    *pp = p;
    return 0;
}

/* Host names compare case-insensitively: lookout keeps them lower-cased. */
static char *
lower(char *s)
{
    for (char *p = s; *p != '\0'; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return s;
}

/* Fills out from a parsed host and port: the host lower-cased, hostport
 * with brackets for IPv6, and text "prefix" + hostport. */
static void
make_url(struct lk_url *out, enum lk_scheme scheme, const char *host, size_t hlen, int v6,
         unsigned long port, const char *prefix)
{
    char *h = lower(lk_xstrndup(host, hlen));

    out->scheme = scheme;
    out->host = h;
    out->port = (uint16_t)port;
    out->hostport = lk_xmalloc(hlen + 9);
    snprintf(out->hostport, hlen + 9, v6 ? "[%s]:%u" : "%s:%u", h, (unsigned)port);
    out->text = lk_xmalloc(strlen(prefix) + strlen(out->hostport) + 1);
    sprintf(out->text, "%s%s", prefix, out->hostport);
}

int
lk_url_parse(const char *s, size_t len, struct lk_url *out, char *err, size_t errlen)
{
    const char *end = s + len, *p, *sep, *host;
    size_t hlen;
    unsigned long port;
    int scheme, v6;
    char prefix[16];

    memset(out, 0, sizeof(*out));
    sep = len >= 3 ? memmem(s, len, "://", 3) : NULL;
    if (sep == NULL)
        return lk_fail(err, errlen, "bad URL '%.*s%s': expected scheme://host:port", EXCERPT(s, len));
    scheme = lk_scheme_parse(lk_str_make(s, (size_t)(sep - s)));
    if (scheme < 0)
        return lk_fail(err, errlen,
                    "unknown scheme '%.*s%s' in '%.*s%s' (expected http, https, pulsar or "
                    "pulsar+ssl)",
                    EXCERPT(s, (size_t)(sep - s)), EXCERPT(s, len));

    p = sep + 3;
    if (parse_host(s, len, "bad URL", &p, end, 0, &host, &hlen, &v6, err, errlen) != 0)
        return -1;
    port = lk_scheme_default_port(scheme);
    if (p < end && *p == ':' && parse_port(s, len, "bad URL", &p, end, &port, err, errlen) != 0)
        return -1;
    if (p < end && *p == '/' && p + 1 == end)
        p++;
    if (p != end)
        return lk_fail(err, errlen,
                    "bad URL '%.*s%s': unexpected '%.*s%s' after the address (only a trailing '/' "
                    "is allowed)",
                    EXCERPT(s, len), EXCERPT(p, (size_t)(end - p)));

    snprintf(prefix, sizeof(prefix), "%s://", schemes[scheme].name);
    make_url(out, (enum lk_scheme)scheme, host, hlen, v6, port, prefix);
    return 0;
}

void
lk_url_free(struct lk_url *u)
{
    if (u == NULL)
        return;
    free(u->host);
    free(u->hostport);
    free(u->text);
    u->host = u->hostport = u->text = NULL;
}

void
lk_listeners_free(struct lk_listener *l, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(l[i].name);
        for (int s = 0; s < LK_SCHEME__COUNT; s++) {
            lk_url_free(l[i].addr[s]);
            free(l[i].addr[s]);
        }
    }
    free(l);
}

/* The items of a comma-separated list, trimmed, empty ones skipped (as the
 * brokers' StringUtils.split, Kafka's listener list and its parseCsvMap
 * all do): 1 with the next one in *item and *p past it, 0 at the end (*p is
 * then NULL). */
static int
next_item(const char **p, struct lk_str *item)
{
    while (*p != NULL) {
        const char *comma = strchr(*p, ',');
        const char *end = comma != NULL ? comma : *p + strlen(*p);

        *item = lk_str_trim(lk_str_make(*p, (size_t)(end - *p)));
        *p = comma != NULL ? comma + 1 : NULL;
        if (item->len != 0)
            return 1;
    }
    return 0;
}

/* Adds one "name:scheme://host:port" item (trimmed, non-empty) to the
 * listeners in *ls. */
static int
add_item(struct lk_listener **ls, size_t *n, struct lk_str item, char *err, size_t errlen)
{
    const char *colon = memchr(item.p, ':', item.len);
    struct lk_str name, url;

    if (colon == NULL)
        return lk_fail(err, errlen, "'%.*s%s' is not name:scheme://host:port",
                    EXCERPT(item.p, item.len));
    name = lk_str_trim(lk_str_make(item.p, (size_t)(colon - item.p)));
    url = lk_str_trim(lk_str_make(colon + 1, item.len - (size_t)(colon + 1 - item.p)));
    /* "http://h:1" splits into name "http" and "//h:1": a URL that lost its
     * name, not a listener called "http". */
    if (name.len == 0 || lk_str_has_prefix(url, LK_STRLIT("//")))
        return lk_fail(err, errlen,
                    "empty listener name in '%.*s%s' (expected name:scheme://host:port)",
                    EXCERPT(item.p, item.len));
    return lk_listener_add(ls, n, name, url, err, errlen);
}

int
lk_listener_add(struct lk_listener **ls, size_t *n, struct lk_str name, struct lk_str url,
                char *err, size_t errlen)
{
    struct lk_url *u;
    size_t i;

    u = lk_xmalloc(sizeof(*u));
    if (lk_url_parse(url.p, url.len, u, err, errlen) != 0) {
        free(u);
        return -1;
    }

    for (i = 0; i < *n; i++)
        if (lk_str_eq(name, lk_str_c((*ls)[i].name)))
            break;
    if (i < *n && (*ls)[i].addr[u->scheme] != NULL) {
        lk_fail(err, errlen, "listener '%.*s%s' has two %s addresses: %s and %s",
             EXCERPT(name.p, name.len), lk_scheme_name(u->scheme), (*ls)[i].addr[u->scheme]->text,
             u->text);
        goto fail;
    }
    /* One host:port belongs to one listener, as Pulsar's
     * MultipleListenerValidator demands: otherwise an address could not be
     * mapped back to its listener. */
    for (size_t j = 0; j < *n; j++) {
        if (j == i)
            continue;
        for (int s = 0; s < LK_SCHEME__COUNT; s++) {
            const struct lk_url *o = (*ls)[j].addr[s];
            if (o != NULL && o->port == u->port && strcmp(o->host, u->host) == 0) {
                lk_fail(err, errlen, "%s is in two listeners: '%s' (%s) and '%.*s%s' (%s)",
                     u->hostport, (*ls)[j].name, o->text, EXCERPT(name.p, name.len), u->text);
                goto fail;
            }
        }
    }

    if (i == *n) {
        *ls = lk_xrealloc(*ls, (*n + 1) * sizeof(**ls));
        memset(&(*ls)[i], 0, sizeof(**ls));
        (*ls)[i].name = lk_xstrndup(name.p, name.len);
        (*n)++;
    }
    (*ls)[i].addr[u->scheme] = u;
    return 0;

fail:
    lk_url_free(u);
    free(u);
    return -1;
}

int
lk_listeners_parse(const char *s, struct lk_listener **out, char *err, size_t errlen)
{
    struct lk_listener *ls = NULL;
    size_t n = 0;
    struct lk_str item;

    *out = NULL;
    /* Brokers split with StringUtils.split, which drops empty items, so
     * "a:...,,b:...," is valid broker.conf and valid here. */
    for (const char *p = s; next_item(&p, &item);)
        if (add_item(&ls, &n, item, err, errlen) != 0)
            goto fail;
    if (n == 0) {
        lk_fail(err, errlen, "no listeners (expected name:scheme://host:port,...)");
        goto fail;
    }
    *out = ls;
    return (int)n;

fail:
    lk_listeners_free(ls, n);
    return -1;
}

const struct lk_url *
lk_listener_pick(const struct lk_listener *l, enum lk_scheme scheme, int prefer_tls)
{
    enum lk_scheme tls = lk_scheme_is_tls(scheme) ? scheme : lk_scheme_sibling(scheme);
    enum lk_scheme plain = lk_scheme_sibling(tls);
    const struct lk_url *first = l->addr[prefer_tls ? tls : plain];
    return first != NULL ? first : l->addr[prefer_tls ? plain : tls];
}

/* Kafka ---------------------------------------------------------------------------- */

static const char *const kafka_security_names[] = {
    [LK_KAFKA_PLAINTEXT] = "PLAINTEXT",
    [LK_KAFKA_SSL] = "SSL",
    [LK_KAFKA_SASL_PLAINTEXT] = "SASL_PLAINTEXT",
    [LK_KAFKA_SASL_SSL] = "SASL_SSL",
};

const char lk_kafka_default_secmap[] =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

int
lk_kafka_security_parse(struct lk_str name)
{
    /* SecurityProtocol.forName upper-cases its argument. */
    for (int i = 0; i < 4; i++)
        if (lk_str_eqi(name, lk_str_c(kafka_security_names[i])))
            return i;
    return -1;
}

const char *
lk_kafka_security_name(enum lk_kafka_security sec)
{
    return (unsigned)sec < 4 ? kafka_security_names[sec] : "?";
}

enum lk_scheme
lk_kafka_security_scheme(enum lk_kafka_security sec)
{
    return sec == LK_KAFKA_SSL || sec == LK_KAFKA_SASL_SSL ? LK_SCHEME_KAFKA_SSL : LK_SCHEME_KAFKA;
}

int
lk_kafka_security_sasl(enum lk_kafka_security sec)
{
    return sec == LK_KAFKA_SASL_PLAINTEXT || sec == LK_KAFKA_SASL_SSL;
}

enum lk_kafka_security
lk_kafka_listener_security(const struct lk_listener *l)
{
    int tls = l->addr[LK_SCHEME_KAFKA_SSL] != NULL;

    if (l->sasl)
        return tls ? LK_KAFKA_SASL_SSL : LK_KAFKA_SASL_PLAINTEXT;
    return tls ? LK_KAFKA_SSL : LK_KAFKA_PLAINTEXT;
}

const struct lk_url *
lk_kafka_addr(const struct lk_listener *l)
{
    return l->addr[LK_SCHEME_KAFKA] != NULL ? l->addr[LK_SCHEME_KAFKA] : l->addr[LK_SCHEME_KAFKA_SSL];
}

/* Kafka listener names: letters, digits, '_', '-' and '.' (Kafka itself
 * takes anything before "://", but a name with ':' or ',' cannot be
 * written in either list). */
static int
is_listener_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

int
lk_kafka_name_check(struct lk_str name, char *err, size_t errlen)
{
    for (size_t i = 0; i < name.len; i++)
        if (!is_listener_char(name.p[i]))
            return lk_fail(err, errlen,
                        "bad listener name '%.*s%s' (letters, digits, '_', '-' and '.' only)",
                        EXCERPT(name.p, name.len));
    return 0;
}

/* The same, and non-empty; item is the list entry name came from. */
static int
check_listener_name(struct lk_str name, struct lk_str item, char *err, size_t errlen)
{
    if (name.len == 0)
        return lk_fail(err, errlen, "empty listener name in '%.*s%s'", EXCERPT(item.p, item.len));
    return lk_kafka_name_check(name, err, errlen);
}

char *
lk_kafka_name_dup(struct lk_str s)
{
    char *r = lk_xstrndup(s.p, s.len);

    for (size_t i = 0; i < s.len; i++)
        if (r[i] >= 'a' && r[i] <= 'z')
            r[i] = (char)(r[i] - 'a' + 'A');
    return r;
}

void
lk_kafka_secmap_free(struct lk_kafka_secmap *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(m[i].name);
    free(m);
}

const struct lk_kafka_secmap *
lk_kafka_secmap_find(const struct lk_kafka_secmap *m, size_t n, struct lk_str name)
{
    for (size_t i = 0; i < n; i++)
        if (lk_str_eqi(lk_str_c(m[i].name), name))
            return &m[i];
    return NULL;
}

/* Adds one "name:protocol" item of the map (trimmed, non-empty) to *m. */
static int
add_secmap_item(struct lk_kafka_secmap **m, size_t *n, struct lk_str item, char *err,
                size_t errlen)
{
    const char *colon = memchr(item.p, ':', item.len);
    struct lk_str name, proto;
    int sec;

    if (colon == NULL)
        return lk_fail(err, errlen, "'%.*s%s' is not NAME:PROTOCOL", EXCERPT(item.p, item.len));
    name = lk_str_trim(lk_str_make(item.p, (size_t)(colon - item.p)));
    proto = lk_str_trim(lk_str_skip(item, (size_t)(colon + 1 - item.p)));
    if (check_listener_name(name, item, err, errlen) != 0)
        return -1;
    if ((sec = lk_kafka_security_parse(proto)) < 0)
        return lk_fail(err, errlen,
                       "unknown security protocol '%.*s%s' for listener '%.*s%s' (expected "
                       "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)",
                       EXCERPT(proto.p, proto.len), EXCERPT(name.p, name.len));
    if (lk_kafka_secmap_find(*m, *n, name) != NULL)
        return lk_fail(err, errlen, "listener '%.*s%s' is in the map twice",
                       EXCERPT(name.p, name.len));
    *m = lk_xrealloc(*m, (*n + 1) * sizeof(**m));
    (*m)[*n].name = lk_kafka_name_dup(name);
    (*m)[(*n)++].sec = (enum lk_kafka_security)sec;
    return 0;
}

int
lk_kafka_secmap_parse(const char *s, struct lk_kafka_secmap **out, char *err, size_t errlen)
{
    struct lk_kafka_secmap *m = NULL;
    size_t n = 0;
    struct lk_str item;

    *out = NULL;
    /* Kafka's parseCsvMap: "name:protocol" items, trimmed; empty ones are
     * skipped. */
    for (const char *p = s; next_item(&p, &item);)
        if (add_secmap_item(&m, &n, item, err, errlen) != 0)
            goto fail;
    if (n == 0) {
        lk_fail(err, errlen, "an empty map (expected NAME:PROTOCOL,...)");
        goto fail;
    }
    *out = m;
    return (int)n;

fail:
    lk_kafka_secmap_free(m, n);
    return -1;
}

int
lk_kafka_addr_parse(const char *s, size_t len, enum lk_scheme scheme, struct lk_url *out,
                    char *err, size_t errlen)
{
    const char *p = s, *end = s + len, *host;
    size_t hlen;
    unsigned long port;
    int v6;

    memset(out, 0, sizeof(*out));
    /* ":9092" (but not "::1:9092", an IPv6 literal) */
    if (len == 0 || (s[0] == ':' && memchr(s + 1, ':', len - 1) == NULL))
        return lk_fail(err, errlen,
                    "bad address '%.*s%s': no host (Kafka's \"default interface\" cannot be "
                    "advertised: write the host clients connect to)",
                    EXCERPT(s, len));
    if (parse_host(s, len, "bad address", &p, end, 1, &host, &hlen, &v6, err, errlen) != 0)
        return -1;
    if (p == end || *p != ':')
        return lk_fail(err, errlen, "bad address '%.*s%s': expected host:port", EXCERPT(s, len));
    if (parse_port(s, len, "bad address", &p, end, &port, err, errlen) != 0)
        return -1;
    if (p != end)
        return lk_fail(err, errlen, "bad address '%.*s%s': unexpected '%.*s%s' after the port",
                    EXCERPT(s, len), EXCERPT(p, (size_t)(end - p)));
    make_url(out, scheme, host, hlen, v6, port, "");
    return 0;
}

int
lk_kafka_listener_add(struct lk_listener **ls, size_t *n, struct lk_str item,
                      const struct lk_kafka_secmap *map, size_t nmap, const char *mapname,
                      char *err, size_t errlen)
{
    const char *sep = item.len >= 3 ? memmem(item.p, item.len, "://", 3) : NULL;
    const struct lk_kafka_secmap *m;
    struct lk_str name, addr;
    struct lk_url *u;
    char *text;

    if (sep == NULL)
        return lk_fail(err, errlen, "'%.*s%s' is not NAME://host:port", EXCERPT(item.p, item.len));
    name = lk_str_make(item.p, (size_t)(sep - item.p));
    addr = lk_str_skip(item, (size_t)(sep + 3 - item.p));
    if (check_listener_name(name, item, err, errlen) != 0)
        return -1;
    if ((m = lk_kafka_secmap_find(map, nmap, name)) == NULL)
        return lk_fail(err, errlen, "listener '%.*s%s' is not in %s, so its security protocol is unknown",
                    EXCERPT(name.p, name.len), mapname);
    for (size_t i = 0; i < *n; i++)
        if (lk_str_eqi(lk_str_c((*ls)[i].name), name))
            return lk_fail(err, errlen, "listener '%s' is listed twice", (*ls)[i].name);

    u = lk_xmalloc(sizeof(*u));
    if (lk_kafka_addr_parse(addr.p, addr.len, lk_kafka_security_scheme(m->sec), u, err, errlen) !=
        0) {
        free(u);
        return -1;
    }
    /* One host:port belongs to one listener, as Kafka's own validation
     * demands of advertised.listeners. */
    for (size_t i = 0; i < *n; i++) {
        const struct lk_url *o = lk_kafka_addr(&(*ls)[i]);
        if (o->port == u->port && strcmp(o->host, u->host) == 0) {
            lk_fail(err, errlen, "%s is in two listeners: %s and %s://%s", u->hostport, o->text,
                 m->name, u->hostport);
            lk_url_free(u);
            free(u);
            return -1;
        }
    }
    text = lk_xmalloc(strlen(m->name) + 3 + strlen(u->hostport) + 1);
    sprintf(text, "%s://%s", m->name, u->hostport);
    free(u->text);
    u->text = text;

    *ls = lk_xrealloc(*ls, (*n + 1) * sizeof(**ls));
    memset(&(*ls)[*n], 0, sizeof(**ls));
    (*ls)[*n].name = lk_xstrdup(m->name);
    (*ls)[*n].addr[u->scheme] = u;
    (*ls)[*n].sasl = lk_kafka_security_sasl(m->sec);
    (*n)++;
    return 0;
}

int
lk_kafka_listeners_parse(const char *s, const struct lk_kafka_secmap *map, size_t nmap,
                         const char *mapname, struct lk_listener **out, char *err, size_t errlen)
{
    struct lk_listener *ls = NULL;
    size_t n = 0;
    struct lk_str item;

    *out = NULL;
    /* Kafka trims each item and skips empty ones. */
    for (const char *p = s; next_item(&p, &item);)
        if (lk_kafka_listener_add(&ls, &n, item, map, nmap, mapname, err, errlen) != 0) {
            lk_listeners_free(ls, n);
            return -1;
        }
    if (n == 0)
        return lk_fail(err, errlen, "no listeners (expected NAME://host:port,...)");
    *out = ls;
    return (int)n;
}

/* Pattern ---------------------------------------------------------------------------- */

#define NODE_ID "$(nodeId)"

void
lk_kafka_pattern_free(struct lk_kafka_pattern *p)
{
    if (p == NULL)
        return;
    free(p->text);
    free(p->host_prefix);
    free(p->host_suffix);
    p->text = p->host_prefix = p->host_suffix = NULL;
}

int
lk_kafka_pattern_parse(const char *s, struct lk_kafka_pattern *p, char *err, size_t errlen)
{
    size_t len = strlen(s);
    const char *id, *colon = NULL, *dollar;
    char sample[300];
    struct lk_url u;
    size_t hlen;

    memset(p, 0, sizeof(*p));
    /* The port is after the last ':' outside "$(...)". */
    for (const char *q = s; *q != '\0'; q++) {
        if (q[0] == '$' && q[1] == '(') {
            const char *close = strchr(q, ')');
            if (close == NULL)
                return lk_fail(err, errlen, "'%.*s%s': '$(' without ')'", EXCERPT(s, len));
            q = close;
        } else if (*q == ':') {
            colon = q;
        }
    }
    if (colon == NULL)
        return lk_fail(err, errlen, "'%.*s%s' is not HOST:PORT", EXCERPT(s, len));
    hlen = (size_t)(colon - s);

    /* The port: a number, or $(BASE+nodeId). */
    if (colon[1] == '$') {
        unsigned long base = 0;
        const char *q = colon + 1;
        if (strncmp(q, "$(", 2) != 0)
            goto bad_port;
        for (q += 2; *q >= '0' && *q <= '9' && base <= 65535; q++)
            base = base * 10 + (unsigned long)(*q - '0');
        if (q == colon + 3 || strcmp(q, "+nodeId)") != 0)
            goto bad_port;
        if (base == 0 || base > 65535)
            return lk_fail(err, errlen, "'%.*s%s': the port base is out of range 1-65535",
                        EXCERPT(s, len));
        p->port_has_id = 1;
        p->port = (uint16_t)base;
    } else {
        char buf[16];
        struct lk_url pu;
        /* "x:PORT" goes through the address parser for its messages. */
        snprintf(buf, sizeof(buf), "x:%.8s", colon + 1);
        if (strlen(colon + 1) > 8 ||
            lk_kafka_addr_parse(buf, strlen(buf), LK_SCHEME_KAFKA, &pu, NULL, 0) != 0)
            goto bad_port;
        p->port = pu.port;
        lk_url_free(&pu);
    }

    /* The host: $(nodeId) at most once, and a valid name around it. */
    id = hlen >= sizeof(NODE_ID) - 1 ? memmem(s, hlen, NODE_ID, sizeof(NODE_ID) - 1) : NULL;
    dollar = memchr(s, '$', hlen);
    if (dollar != NULL && dollar != id)
        return lk_fail(err, errlen,
                    "'%.*s%s': unknown '$' in the host (expected $(nodeId) in the host, "
                    "$(BASE+nodeId) as the port)",
                    EXCERPT(s, len));
    if (id != NULL && memchr(id + 1, '$', hlen - (size_t)(id + 1 - s)) != NULL)
        return lk_fail(err, errlen, "'%.*s%s': $(nodeId) twice in the host", EXCERPT(s, len));
    if (hlen + 16 > sizeof(sample))
        return lk_fail(err, errlen, "'%.*s%s': host name longer than 253 bytes", EXCERPT(s, len));
    if (id != NULL) {
        int digits_and_dots = 1;
        for (const char *q = s; q < s + hlen; q++) {
            if (q == id)
                q += sizeof(NODE_ID) - 2;
            else if (!(*q >= '0' && *q <= '9') && *q != '.')
                digits_and_dots = 0;
        }
        if (digits_and_dots || memchr(s, ':', hlen) != NULL || s[0] == '[')
            return lk_fail(err, errlen,
                        "'%.*s%s': $(nodeId) in an IP address (the host must be a name; use "
                        "$(BASE+nodeId) as the port to give each node a port instead)",
                        EXCERPT(s, len));
    }
    /* Check the host with a node id in its place: the longest one, so that
     * the length is checked too, and then 0 for an IP-literal look. */
    if (id != NULL) {
        snprintf(sample, sizeof(sample), "%.*s2147483647%.*s:1", (int)(id - s), s,
                 (int)(hlen - (size_t)(id - s) - (sizeof(NODE_ID) - 1)), id + sizeof(NODE_ID) - 1);
    } else {
        snprintf(sample, sizeof(sample), "%.*s:1", (int)hlen, s);
    }
    if (lk_kafka_addr_parse(sample, strlen(sample), LK_SCHEME_KAFKA, &u, NULL, 0) != 0) {
        /* The parser's message would quote the sample, not what was
         * written: name the host instead. */
        return lk_fail(err, errlen, "'%.*s%s': bad host '%.*s%s'%s", EXCERPT(s, len), EXCERPT(s, hlen),
                    id != NULL ? " (with a node id in place of $(nodeId))" : "");
    }
    lk_url_free(&u);
    if (id != NULL) {
        p->host_has_id = 1;
        p->host_prefix = lk_xstrndup(s, (size_t)(id - s));
        p->host_suffix = lk_xstrndup(id + sizeof(NODE_ID) - 1,
                                     hlen - (size_t)(id - s) - (sizeof(NODE_ID) - 1));
    } else {
        if (!p->port_has_id)
            return lk_fail(err, errlen,
                        "'%.*s%s' holds no $(nodeId): every node would get the same address "
                        "(write e.g. b$(nodeId).kafka.example.com:9093 or "
                        "kafka.example.com:$(9100+nodeId))",
                        EXCERPT(s, len));
        /* As the address parser made it: lower-cased, IPv6 without brackets. */
        snprintf(sample, sizeof(sample), "%.*s:1", (int)hlen, s);
        lk_kafka_addr_parse(sample, strlen(sample), LK_SCHEME_KAFKA, &u, NULL, 0);
        p->host_prefix = u.host;
        u.host = NULL;
        lk_url_free(&u);
        p->host_suffix = lk_xstrdup("");
    }
    lower(p->host_prefix);
    lower(p->host_suffix);
    p->text = lk_xstrdup(s);
    return 0;

bad_port:
    return lk_fail(err, errlen,
                "'%.*s%s': the port must be a number from 1 to 65535 or $(BASE+nodeId), "
                "e.g. $(9100+nodeId)",
                EXCERPT(s, len));
}

int
lk_kafka_pattern_expand(const struct lk_kafka_pattern *p, int32_t node_id, char *host,
                        size_t hostlen, uint16_t *port)
{
    int n;

    if (node_id < 0)
        return -1;
    if (p->port_has_id && (uint32_t)node_id > 65535u - p->port)
        return -1;
    if (p->host_has_id)
        n = snprintf(host, hostlen, "%s%ld%s", p->host_prefix, (long)node_id, p->host_suffix);
    else
        n = snprintf(host, hostlen, "%s", p->host_prefix);
    if (n < 0 || (size_t)n >= hostlen || n > 253)
        return -1;
    *port = p->port_has_id ? (uint16_t)(p->port + node_id) : p->port;
    return 0;
}

int
lk_kafka_pattern_match(const struct lk_kafka_pattern *p, struct lk_str host, uint16_t port,
                       int32_t *node_id)
{
    struct lk_str pre = lk_str_c(p->host_prefix), suf = lk_str_c(p->host_suffix);
    long long id = -1;

    if (host.len >= 2 && host.p[0] == '[' && host.p[host.len - 1] == ']')
        host = lk_str_make(host.p + 1, host.len - 2);
    if (host.len > 1 && host.p[host.len - 1] == '.')
        host.len--;
    if (p->host_has_id) {
        struct lk_str digits;
        if (host.len <= pre.len + suf.len || !lk_str_eqi(lk_str_make(host.p, pre.len), pre) ||
            !lk_str_eqi(lk_str_make(host.p + host.len - suf.len, suf.len), suf))
            return 0;
        digits = lk_str_make(host.p + pre.len, host.len - pre.len - suf.len);
        /* The id as expand writes it: decimal, no sign, no leading zero. */
        if (digits.len > 10 || (digits.len > 1 && digits.p[0] == '0'))
            return 0;
        id = 0;
        for (size_t i = 0; i < digits.len; i++) {
            if (digits.p[i] < '0' || digits.p[i] > '9')
                return 0;
            id = id * 10 + (digits.p[i] - '0');
        }
        if (id > INT32_MAX)
            return 0;
    } else if (!lk_str_eqi(host, pre)) {
        return 0;
    }
    if (p->port_has_id) {
        if (port < p->port || (id >= 0 && id != (long long)(port - p->port)))
            return 0;
        id = port - p->port;
    } else if (port != 0 && port != p->port) {
        return 0;
    }
    *node_id = (int32_t)id;
    return 1;
}
