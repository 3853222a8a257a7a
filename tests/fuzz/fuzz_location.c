/*
 * Fuzzes the Location rewrite (proxy/lk_location.c, pure) over the fixed
 * listener map of fuzz_util.c.  The first input byte picks the client's
 * TLS and the selected listener (external, other, internal, none); the
 * rest is the URL.
 * Invariants:
 *   - path, query and fragment (everything from the first '/', '?' or '#'
 *     after "scheme://") are kept byte for byte;
 *   - a rewritten URL is "scheme://host:port" of an address of the matched
 *     broker's selected listener (its lookup listener, external, when it
 *     lacks that one), of the family of the address the URL
 *     named, TLS first for a TLS client when the listener has both; when
 *     that listener has none and the family is http/https, the lookup
 *     listener's (external) address the same way, else webServiceUrl,
 *     and how says which listener lacked it;
 *   - the URL named that broker: its host (without userinfo or brackets,
 *     case-insensitive, a trailing dot ignored) and port are an address
 *     of the broker;
 *   - relative URLs are never rewritten, and neither are absolute ones
 *     whose host:port no broker of the map has; a URL that names a broker
 *     with an address of its family on the listener always is, and so is
 *     one that names a broker by a web address (webServiceUrl is set);
 *   - rewriting is idempotent: the output rewrites to itself, but for
 *     webServiceUrl, which is no broker's address.
 * The same bytes go to lk_proxy_target_find too, as a CONNECT's
 * proxy_to_broker_url (check_target):
 *   - a broker found comes with no complaint, a complaint with no broker;
 *   - with "://" in it, it finds what lk_url_split's host and port name;
 *   - otherwise, well formed exactly when lk_hostport_split says so, and
 *     then host and port are the text around its last ':' (the Pulsar
 *     Proxy's split), brackets off, and name what the linear walk finds;
 *     "name:port" with a name of letters, digits, '.' and '-' and a port
 *     of 1 to 65535 is always well formed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_util.h"
#include "lk_location.h"

static const char *const listeners[4] = {"external", "other", "internal", NULL};

/* Where "scheme://" ends and where the authority ends, found here without
 * lk_url_split; 0 if url has no scheme:// prefix. */
static int
find_authority(struct lk_str url, size_t *auth, size_t *rest)
{
    size_t i = 0;

    if (url.len == 0 || !((url.p[0] | 0x20) >= 'a' && (url.p[0] | 0x20) <= 'z'))
        return 0;
    while (i < url.len && (((url.p[i] | 0x20) >= 'a' && (url.p[i] | 0x20) <= 'z') ||
                           (url.p[i] >= '0' && url.p[i] <= '9') || url.p[i] == '+' ||
                           url.p[i] == '-' || url.p[i] == '.'))
        i++;
    if (url.len - i < 3 || memcmp(url.p + i, "://", 3) != 0)
        return 0;
    *auth = i + 3;
    for (i += 3; i < url.len && url.p[i] != '/' && url.p[i] != '?' && url.p[i] != '#'; i++)
        ;
    *rest = i;
    return 1;
}

/* The broker with an address host:port (host case-insensitive), and the
 * scheme of that address; NULL if none.  A linear walk of the map, apart
 * from lk_cluster_find_addr. */
static const struct lk_broker *
walk(const struct lk_cluster *cl, struct lk_str host, uint16_t port, enum lk_scheme *scheme)
{
    /* "b1.example.com." is the absolute form of "b1.example.com": the
     * same host, and lk_cluster_find_addr matches it on purpose. */
    if (host.len > 1 && host.p[host.len - 1] == '.')
        host.len--;
    for (size_t i = 0; i < cl->nbrokers; i++)
        for (size_t k = 0; k < cl->brokers[i]->nlisteners; k++)
            for (int s = 0; s < LK_SCHEME__COUNT; s++) {
                const struct lk_url *u = cl->brokers[i]->listeners[k].addr[s];
                if (u != NULL && u->port == port && strlen(u->host) == host.len &&
                    strncasecmp(u->host, host.p, host.len) == 0) {
                    *scheme = (enum lk_scheme)s;
                    return cl->brokers[i];
                }
            }
    return NULL;
}

/* A port of 1 to 65535 in 1 to 5 decimal digits, apart from lk_location.c;
 * 0 if s is not one. */
static unsigned
decimal_port(struct lk_str s)
{
    unsigned v = 0;

    if (s.len == 0 || s.len > 5)
        return 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return 0;
        v = v * 10 + (unsigned)(s.p[i] - '0');
    }
    return v <= 65535 ? v : 0;
}

static void
check_target(const struct lk_cluster *cl, struct lk_str t)
{
    const char *why = "unset";
    const struct lk_broker *b = lk_proxy_target_find(cl, t, &why);
    enum lk_scheme s;

    LK_FUZZ_CHECK((b == NULL) || why == NULL);
    if (t.len >= 3 && memmem(t.p, t.len, "://", 3) != NULL) {
        struct lk_url_parts parts;
        int good = lk_url_split(t, &parts) == 0 && parts.port != 0;
        LK_FUZZ_CHECK(good == (why == NULL));
        if (good)
            LK_FUZZ_CHECK(b == walk(cl, parts.host, parts.port, &s));
        return;
    }
    struct lk_str host = LK_STR_NULL;
    uint16_t port = 0;
    const char *why2 = NULL;
    int rc = lk_hostport_split(t, &host, &port, &why2);
    LK_FUZZ_CHECK((rc == 0) == (why == NULL));
    LK_FUZZ_CHECK(rc == 0 ? why2 == NULL || why2 == why : why2 != NULL && strcmp(why2, why) == 0);
    const char *colon = memrchr(t.p, ':', t.len);
    if (rc == 0) {
        LK_FUZZ_CHECK(colon != NULL);
        size_t at = (size_t)(colon - t.p);
        LK_FUZZ_CHECK(decimal_port(lk_str_skip(t, at + 1)) == port && port != 0);
        int v6 = t.p[0] == '[';
        LK_FUZZ_CHECK(host.p == t.p + v6 && host.len + 2 * (size_t)v6 == at);
        if (v6)
            LK_FUZZ_CHECK(t.p[at - 1] == ']');
        LK_FUZZ_CHECK(b == walk(cl, host, port, &s));
    }
    /* a name (no '_', no trailing-dot subtleties needed) and a good port */
    if (colon != NULL && colon != t.p && decimal_port(lk_str_skip(t, (size_t)(colon - t.p) + 1))) {
        int name = 1;
        for (const char *c = t.p; c < colon; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '.' || *c == '-'))
                name = 0;
        if (name)
            LK_FUZZ_CHECK(rc == 0);
    }
}

static int
family(enum lk_scheme s)
{
    return s == LK_SCHEME_HTTP || s == LK_SCHEME_HTTPS ? 0 : 1;
}

/* The address l gives in the family of s: TLS first for a TLS client,
 * plaintext first otherwise; NULL if it has neither. */
static const struct lk_url *
expect_pick(const struct lk_listener *l, enum lk_scheme s, int tls)
{
    enum lk_scheme want = family(s) == 0 ? (tls ? LK_SCHEME_HTTPS : LK_SCHEME_HTTP)
                                         : (tls ? LK_SCHEME_PULSAR_SSL : LK_SCHEME_PULSAR);

    if (l == NULL)
        return NULL;
    return l->addr[want] != NULL ? l->addr[want] : l->addr[lk_scheme_sibling(want)];
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lk_pool pool;
    struct lk_str out, again;
    struct lk_location_how how = {NULL, NULL, NULL};
    size_t auth = 0, rest = 0;

    if (size < 1)
        return 0;
    const struct lk_cluster *cl = lk_fuzz_map(LK_LEAK_LOG)->clusters[0];
    int tls = data[0] & 1;
    const char *name = listeners[(data[0] >> 1) & 3];
    /* an exact-size copy, so that a read past the URL is caught */
    char *copy = malloc(size - 1 != 0 ? size - 1 : 1);
    memcpy(copy, data + 1, size - 1);
    struct lk_str url = lk_str_make(copy, size - 1);

    check_target(cl, url);
    lk_pool_init(&pool);
    int rw = lk_location_rewrite(&pool, cl, name, tls, url, &out, &how);
    int absolute = find_authority(url, &auth, &rest);
    if (!absolute || name == NULL)
        LK_FUZZ_CHECK(!rw);

    struct lk_url_parts parts;
    if (lk_url_split(url, &parts) == 0) {
        LK_FUZZ_CHECK(absolute);
        /* the parts lie where they should */
        LK_FUZZ_CHECK(parts.rest.p == url.p + rest && parts.rest.len == url.len - rest);
        LK_FUZZ_CHECK(parts.host.p >= url.p + auth &&
                      parts.host.p + parts.host.len <= url.p + rest);
        enum lk_scheme s;
        const struct lk_broker *named = walk(cl, parts.host, parts.port, &s);
        const struct lk_listener *l =
            named != NULL && name != NULL ? lk_broker_client_listener(named, name) : NULL;
        /* a mapped broker with an address of the family is always
         * rewritten, and with a web address always (webServiceUrl) */
        if ((l != NULL && lk_listener_pick(l, s, tls) != NULL) ||
            (named != NULL && name != NULL && family(s) == 0))
            LK_FUZZ_CHECK(rw && how.broker == named);
        if (named == NULL)
            LK_FUZZ_CHECK(!rw);
    } else {
        LK_FUZZ_CHECK(!rw);
    }

    if (rw) {
        enum lk_scheme s;
        const struct lk_broker *b = how.broker;
        LK_FUZZ_CHECK(b != NULL && walk(cl, parts.host, parts.port, &s) == b);
        /* path, query and fragment, byte for byte */
        size_t tail = url.len - rest;
        LK_FUZZ_CHECK(out.len >= tail && memcmp(out.p + out.len - tail, url.p + rest, tail) == 0);
        /* the rest is exactly the address expected, of the same family:
         * the selected listener's, else (web only) the lookup listener's,
         * else webServiceUrl */
        struct lk_str head = lk_str_make(out.p, out.len - tail);
        const struct lk_listener *l = lk_broker_listener(b, name);
        if (l == NULL) /* a broker without the listener: its lookup listener */
            l = lk_broker_listener(b, "external");
        const struct lk_url *want = expect_pick(l, s, tls);
        LK_FUZZ_CHECK((how.lacked == NULL) == (want != NULL));
        if (want == NULL) {
            LK_FUZZ_CHECK(family(s) == 0 && strcmp(how.lacked, l != NULL ? l->name : name) == 0);
            want = expect_pick(lk_broker_listener(b, "external"), s, tls);
            if (want == NULL)
                want = cl->web_service;
        }
        LK_FUZZ_CHECK(how.to == want && lk_str_eq(head, lk_str_c(want->text)));
        LK_FUZZ_CHECK(family(want->scheme) == family(s));
        /* idempotent, but for webServiceUrl: no broker's address */
        struct lk_location_how how2 = {NULL, NULL, NULL};
        int rw2 = lk_location_rewrite(&pool, cl, name, tls, out, &again, &how2);
        if (want == cl->web_service)
            LK_FUZZ_CHECK(rw2 == 0);
        else
            LK_FUZZ_CHECK(rw2 == 1 && how2.broker == b && lk_str_eq(again, out));
    }
    lk_pool_free(&pool);
    free(copy);
    return 0;
}
