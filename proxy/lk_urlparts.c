/*
 * Splitting an absolute URL into scheme, host, port and the rest, and a
 * "host:port" into host and port: pure over strings, knowing no scheme and
 * no config, so that the HTTP message code (absolute-form targets) can use
 * them without the broker map, and the Location logic (lk_location.c) adds
 * the schemes' default ports and the map on top.
 */
#include <ctype.h>
#include <string.h>

#include "lk_urlparts.h"

/* A port of 1 to 65535 in 1 to 5 decimal digits: 0, or -1. */
static int
parse_port(struct lk_str s, uint16_t *port)
{
    unsigned v = 0;

    if (s.len == 0 || s.len > 5)
        return -1;
    for (size_t k = 0; k < s.len; k++) {
        if (!isdigit((unsigned char)s.p[k]))
            return -1;
        v = v * 10 + (unsigned)(s.p[k] - '0');
    }
    if (v == 0 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

int
lk_url_parts_split(struct lk_str url, struct lk_url_parts *out)
{
    size_t i = 0;

    memset(out, 0, sizeof(*out));
    /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
    if (url.len == 0 || !isalpha((unsigned char)url.p[0]))
        return -1;
    while (i < url.len && (isalnum((unsigned char)url.p[i]) || url.p[i] == '+' ||
                           url.p[i] == '-' || url.p[i] == '.'))
        i++;
    if (url.len - i < 3 || memcmp(url.p + i, "://", 3) != 0)
        return -1;
    out->scheme = lk_str_make(url.p, i);
    i += 3;
    size_t start = i;
    while (i < url.len && url.p[i] != '/' && url.p[i] != '?' && url.p[i] != '#')
        i++;
    struct lk_str auth = lk_str_make(url.p + start, i - start);
    out->rest = lk_str_make(url.p + i, url.len - i);
    const char *at = memrchr(auth.p, '@', auth.len);
    if (at != NULL)
        auth = lk_str_skip(auth, (size_t)(at - auth.p) + 1);
    struct lk_str port = LK_STR_NULL;
    if (auth.len > 0 && auth.p[0] == '[') {
        const char *e = memchr(auth.p, ']', auth.len);
        if (e == NULL)
            return -1;
        out->host = lk_str_make(auth.p + 1, (size_t)(e - auth.p) - 1);
        struct lk_str after = lk_str_skip(auth, (size_t)(e - auth.p) + 1);
        if (after.len > 0) {
            if (after.p[0] != ':')
                return -1;
            port = lk_str_skip(after, 1);
        }
    } else {
        const char *colon = memchr(auth.p, ':', auth.len);
        if (colon != NULL) {
            out->host = lk_str_make(auth.p, (size_t)(colon - auth.p));
            port = lk_str_skip(auth, (size_t)(colon - auth.p) + 1);
        } else {
            out->host = auth;
        }
    }
    if (out->host.len == 0)
        return -1;
    if (port.len > 0 && parse_port(port, &out->port) != 0)
        return -1;
    return 0;
}

/* Only what a host name, an IPv4 address or (in brackets, v6) an IPv6
 * address can hold: no zone ("%eth0"), userinfo, path or whitespace. */
static int
host_ok(struct lk_str h, int v6)
{
    if (h.len == 0)
        return 0;
    for (size_t i = 0; i < h.len; i++) {
        unsigned char ch = (unsigned char)h.p[i];
        if (v6 ? !(isxdigit(ch) || ch == ':' || ch == '.')
               : !(isalnum(ch) || ch == '-' || ch == '.' || ch == '_'))
            return 0;
    }
    return 1;
}

int
lk_hostport_split(struct lk_str s, struct lk_str *host, uint16_t *port, const char **why)
{
    struct lk_str h, p;

    if (s.len == 0) {
        *why = "is empty";
        return -1;
    }
    if (s.p[0] == '[') {
        const char *e = memchr(s.p, ']', s.len);
        if (e == NULL) {
            *why = "has an unclosed '['";
            return -1;
        }
        h = lk_str_make(s.p + 1, (size_t)(e - s.p) - 1);
        p = lk_str_skip(s, (size_t)(e - s.p) + 1);
        if (p.len == 0 || p.p[0] != ':') {
            *why = "has no ':port' after the bracketed IPv6 address";
            return -1;
        }
        p = lk_str_skip(p, 1);
        if (!host_ok(h, 1) || memchr(h.p, ':', h.len) == NULL) {
            *why = "has no IPv6 address in its brackets";
            return -1;
        }
    } else {
        const char *c = memrchr(s.p, ':', s.len);
        if (c == NULL) {
            *why = "has no ':port'";
            return -1;
        }
        h = lk_str_make(s.p, (size_t)(c - s.p));
        p = lk_str_skip(s, (size_t)(c - s.p) + 1);
        if (!host_ok(h, 0)) {
            *why = h.len == 0        ? "has no host"
                   : host_ok(h, 1) ? "has an IPv6 address without brackets"
                                   : "has a host that is neither a name nor an address";
            return -1;
        }
    }
    if (parse_port(p, port) != 0) {
        *why = "has a port that is not a number from 1 to 65535";
        return -1;
    }
    *host = h;
    return 0;
}

