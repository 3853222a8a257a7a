/*
 * Rewriting broker URLs into the selected listener: the engine of the
 * Location filter, kept free of HTTP and sockets so that it can be unit
 * tested and fuzzed as it stands (like h2o's rewrite_location).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "lk_location.h"

int
lk_url_split(struct lk_str url, struct lk_url_parts *out)
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
    if (port.len > 0) {
        unsigned v = 0;
        if (port.len > 5)
            return -1;
        for (size_t k = 0; k < port.len; k++) {
            if (!isdigit((unsigned char)port.p[k]))
                return -1;
            v = v * 10 + (unsigned)(port.p[k] - '0');
        }
        if (v == 0 || v > 65535)
            return -1;
        out->port = (uint16_t)v;
    } else {
        int s = lk_scheme_parse(out->scheme);
        out->port = s >= 0 ? lk_scheme_default_port((enum lk_scheme)s) : 0;
    }
    return 0;
}

const struct lk_broker *
lk_url_find_broker(const struct lk_cluster *cl, struct lk_str url, struct lk_url_parts *parts,
                   enum lk_scheme *scheme)
{
    if (lk_url_split(url, parts) != 0)
        return NULL;
    return lk_cluster_find_addr(cl, parts->host, parts->port, scheme);
}

int
lk_location_rewrite(struct lk_pool *pool, const struct lk_cluster *cl, const char *listener_name,
                    int client_tls, struct lk_str url, struct lk_str *out,
                    const struct lk_broker **broker)
{
    struct lk_url_parts parts;
    enum lk_scheme matched;

    if (listener_name == NULL)
        return 0;
    const struct lk_broker *b = lk_url_find_broker(cl, url, &parts, &matched);
    if (b == NULL)
        return 0;
    const struct lk_listener *l = lk_broker_listener(b, listener_name);
    if (l == NULL)
        return 0;
    const struct lk_url *to = lk_listener_pick(l, matched, client_tls);
    if (to == NULL)
        return 0;
    if (broker != NULL)
        *broker = b;
    /* to->text is "scheme://host:port" */
    *out = lk_pstr_concat(pool, lk_str_c(to->text), parts.rest);
    return 1;
}
