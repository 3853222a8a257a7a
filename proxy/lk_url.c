/*
 * Addresses as the brokers write them: "scheme://host[:port][/]" URLs and
 * the advertisedListeners list "name:scheme://host:port,...".  These are
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

static const struct {
    const char *name;
    uint16_t port;
    int tls;
} schemes[LK_SCHEME__COUNT] = {
    [LK_SCHEME_HTTP] = {"http", 80, 0},
    [LK_SCHEME_HTTPS] = {"https", 443, 1},
    [LK_SCHEME_PULSAR] = {"pulsar", 6650, 0},
    [LK_SCHEME_PULSAR_SSL] = {"pulsar+ssl", 6651, 1},
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
        if (lk_str_eqi(name, lk_str_c(schemes[i].name)))
            return i;
    return -1;
}

/* Writes fmt into err, if there is an err. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fail(char *err, size_t errlen, const char *fmt, ...)
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

int
lk_url_parse(const char *s, size_t len, struct lk_url *out, char *err, size_t errlen)
{
    const char *end = s + len, *p, *sep, *host;
    size_t hlen, i;
    unsigned long port;
    int scheme, v6 = 0, numeric = 1;
    char *h;

    memset(out, 0, sizeof(*out));
    sep = len >= 3 ? memmem(s, len, "://", 3) : NULL;
    if (sep == NULL)
        return fail(err, errlen, "bad URL '%.*s%s': expected scheme://host:port", EXCERPT(s, len));
    scheme = lk_scheme_parse(lk_str_make(s, (size_t)(sep - s)));
    if (scheme < 0)
        return fail(err, errlen,
                    "unknown scheme '%.*s%s' in '%.*s%s' (expected http, https, pulsar or "
                    "pulsar+ssl)",
                    EXCERPT(s, (size_t)(sep - s)), EXCERPT(s, len));

    p = sep + 3;
    if (p < end && *p == '[') {
        /* An IPv6 literal (RFC 3986 3.2.2); inet_pton refuses zone ids,
         * which a listener address cannot use anyway. */
        char buf[INET6_ADDRSTRLEN];
        struct in6_addr a6;
        const char *close = memchr(p, ']', (size_t)(end - p));

        if (close == NULL)
            return fail(err, errlen, "bad URL '%.*s%s': '[' without ']'", EXCERPT(s, len));
        host = p + 1;
        hlen = (size_t)(close - host);
        if (hlen == 0 || hlen >= sizeof(buf))
            return fail(err, errlen, "bad URL '%.*s%s': bad IPv6 address", EXCERPT(s, len));
        memcpy(buf, host, hlen);
        buf[hlen] = '\0';
        if (inet_pton(AF_INET6, buf, &a6) != 1)
            return fail(err, errlen, "bad URL '%.*s%s': bad IPv6 address '%s'", EXCERPT(s, len),
                        buf);
        v6 = 1;
        p = close + 1;
    } else {
        host = p;
        while (p < end && *p != ':' && *p != '/')
            p++;
        hlen = (size_t)(p - host);
        if (hlen == 0)
            return fail(err, errlen, "bad URL '%.*s%s': no host", EXCERPT(s, len));
        for (i = 0; i < hlen; i++) {
            if (!is_host_char(host[i]))
                return fail(err, errlen, "bad URL '%.*s%s': bad character '%c' in the host",
                            EXCERPT(s, len), host[i] >= 0x20 && host[i] < 0x7f ? host[i] : '?');
            if (!(host[i] >= '0' && host[i] <= '9') && host[i] != '.')
                numeric = 0;
        }
        if (hlen > 253)
            return fail(err, errlen, "bad URL '%.*s%s': host name longer than 253 bytes",
                        EXCERPT(s, len));
        if (numeric) {
            /* All digits and dots: an IPv4 literal or a mistake, never a
             * name to bind the wildcard for. */
            char buf[INET_ADDRSTRLEN];
            struct in_addr a4;

            if (hlen >= sizeof(buf))
                return fail(err, errlen, "bad URL '%.*s%s': bad IPv4 address", EXCERPT(s, len));
            memcpy(buf, host, hlen);
            buf[hlen] = '\0';
            if (inet_pton(AF_INET, buf, &a4) != 1)
                return fail(err, errlen, "bad URL '%.*s%s': bad IPv4 address '%s'", EXCERPT(s, len),
                            buf);
        }
    }

    port = lk_scheme_default_port(scheme);
    if (p < end && *p == ':') {
        const char *digits = ++p;

        port = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (port <= 65535)
                port = port * 10 + (unsigned long)(*p - '0');
            p++;
        }
        if (p == digits)
            return fail(err, errlen, "bad URL '%.*s%s': no port after ':'", EXCERPT(s, len));
        if (port == 0 || port > 65535)
            return fail(err, errlen, "bad URL '%.*s%s': port %.*s is out of range 1-65535",
                        EXCERPT(s, len), (int)(p - digits > 12 ? 12 : p - digits), digits);
    }
    if (p < end && *p == '/' && p + 1 == end)
        p++;
    if (p != end)
        return fail(err, errlen,
                    "bad URL '%.*s%s': unexpected '%.*s%s' after the address (only a trailing '/' "
                    "is allowed)",
                    EXCERPT(s, len), EXCERPT(p, (size_t)(end - p)));

    h = lk_xstrndup(host, hlen);
    for (i = 0; i < hlen; i++)
        if (h[i] >= 'A' && h[i] <= 'Z')
            h[i] = (char)(h[i] - 'A' + 'a');
    out->scheme = (enum lk_scheme)scheme;
    out->host = h;
    out->port = (uint16_t)port;
    out->hostport = lk_xmalloc(hlen + 9);
    snprintf(out->hostport, hlen + 9, v6 ? "[%s]:%u" : "%s:%u", h, (unsigned)port);
    out->text = lk_xmalloc(strlen(schemes[scheme].name) + 3 + strlen(out->hostport) + 1);
    sprintf(out->text, "%s://%s", schemes[scheme].name, out->hostport);
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

/* Adds one "name:scheme://host:port" item (trimmed, non-empty) to the
 * listeners in *ls. */
static int
add_item(struct lk_listener **ls, size_t *n, struct lk_str item, char *err, size_t errlen)
{
    const char *colon = memchr(item.p, ':', item.len);
    struct lk_str name, url;
    struct lk_url *u;
    size_t i;

    if (colon == NULL)
        return fail(err, errlen, "'%.*s%s' is not name:scheme://host:port",
                    EXCERPT(item.p, item.len));
    name = lk_str_trim(lk_str_make(item.p, (size_t)(colon - item.p)));
    url = lk_str_trim(lk_str_make(colon + 1, item.len - (size_t)(colon + 1 - item.p)));
    /* "http://h:1" splits into name "http" and "//h:1": a URL that lost its
     * name, not a listener called "http". */
    if (name.len == 0 || lk_str_has_prefix(url, LK_STRLIT("//")))
        return fail(err, errlen,
                    "empty listener name in '%.*s%s' (expected name:scheme://host:port)",
                    EXCERPT(item.p, item.len));

    u = lk_xmalloc(sizeof(*u));
    if (lk_url_parse(url.p, url.len, u, err, errlen) != 0) {
        free(u);
        return -1;
    }

    for (i = 0; i < *n; i++)
        if (lk_str_eq(name, lk_str_c((*ls)[i].name)))
            break;
    if (i < *n && (*ls)[i].addr[u->scheme] != NULL) {
        fail(err, errlen, "listener '%.*s%s' has two %s addresses: %s and %s",
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
                fail(err, errlen, "%s is in two listeners: '%s' (%s) and '%.*s%s' (%s)",
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
    const char *p = s;

    *out = NULL;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma != NULL ? comma : p + strlen(p);
        struct lk_str item = lk_str_trim(lk_str_make(p, (size_t)(end - p)));

        /* Brokers split with StringUtils.split, which drops empty items,
         * so "a:...,,b:...," is valid broker.conf and valid here. */
        if (item.len != 0 && add_item(&ls, &n, item, err, errlen) != 0)
            goto fail;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (n == 0) {
        fail(err, errlen, "no listeners (expected name:scheme://host:port,...)");
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
