/*
 * Tests for proxy/lk_url.c: URL parsing, the scheme helpers, and the
 * brokers' advertisedListeners syntax with every error it can report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_test.h"

static void
test_parse(void)
{
    static const struct {
        const char *in;
        enum lk_scheme scheme;
        const char *host;
        unsigned port;
        const char *hostport, *text;
    } t[] = {
        {"http://10.0.0.11:8080", LK_SCHEME_HTTP, "10.0.0.11", 8080, "10.0.0.11:8080",
         "http://10.0.0.11:8080"},
        {"https://b1.pulsar.example.com:8443", LK_SCHEME_HTTPS, "b1.pulsar.example.com", 8443,
         "b1.pulsar.example.com:8443", "https://b1.pulsar.example.com:8443"},
        {"pulsar://h:6650", LK_SCHEME_PULSAR, "h", 6650, "h:6650", "pulsar://h:6650"},
        {"pulsar+ssl://h:1", LK_SCHEME_PULSAR_SSL, "h", 1, "h:1", "pulsar+ssl://h:1"},
        /* missing ports take the scheme's default, and show it */
        {"http://h", LK_SCHEME_HTTP, "h", 80, "h:80", "http://h:80"},
        {"https://h", LK_SCHEME_HTTPS, "h", 443, "h:443", "https://h:443"},
        {"pulsar://h", LK_SCHEME_PULSAR, "h", 6650, "h:6650", "pulsar://h:6650"},
        {"pulsar+ssl://h", LK_SCHEME_PULSAR_SSL, "h", 6651, "h:6651", "pulsar+ssl://h:6651"},
        /* a trailing slash is allowed */
        {"http://h:8080/", LK_SCHEME_HTTP, "h", 8080, "h:8080", "http://h:8080"},
        {"https://h/", LK_SCHEME_HTTPS, "h", 443, "h:443", "https://h:443"},
        /* schemes and hosts are case-insensitive and come out lower-cased */
        {"HTTPS://B1.Example.COM:8443", LK_SCHEME_HTTPS, "b1.example.com", 8443,
         "b1.example.com:8443", "https://b1.example.com:8443"},
        {"Pulsar+SSL://H:6651", LK_SCHEME_PULSAR_SSL, "h", 6651, "h:6651", "pulsar+ssl://h:6651"},
        /* IPv6 literals lose their brackets in host, keep them in hostport */
        {"http://[::1]:8080", LK_SCHEME_HTTP, "::1", 8080, "[::1]:8080", "http://[::1]:8080"},
        {"pulsar://[2001:DB8::1]", LK_SCHEME_PULSAR, "2001:db8::1", 6650, "[2001:db8::1]:6650",
         "pulsar://[2001:db8::1]:6650"},
        {"https://[::ffff:127.0.0.1]:1/", LK_SCHEME_HTTPS, "::ffff:127.0.0.1", 1,
         "[::ffff:127.0.0.1]:1", "https://[::ffff:127.0.0.1]:1"},
        {"http://h:65535", LK_SCHEME_HTTP, "h", 65535, "h:65535", "http://h:65535"},
        {"http://my_host-1.local:0080", LK_SCHEME_HTTP, "my_host-1.local", 80, "my_host-1.local:80",
         "http://my_host-1.local:80"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_url u;
        char err[256] = "";

        subtest("%s", t[i].in);
        if (!ok(lk_url_parse(t[i].in, strlen(t[i].in), &u, err, sizeof(err)) == 0, "parses (%s)",
                err))
            continue;
        ok(u.scheme == t[i].scheme, "scheme %s", lk_scheme_name(u.scheme));
        ok_str(u.host, t[i].host, "host");
        ok(u.port == t[i].port, "port %u", (unsigned)u.port);
        ok_str(u.hostport, t[i].hostport, "hostport");
        ok_str(u.text, t[i].text, "text");
        lk_url_free(&u);
        ok(u.host == NULL && u.hostport == NULL && u.text == NULL, "lk_url_free clears");
        lk_url_free(&u); /* twice is harmless */
    }
    lk_url_free(NULL);
}

static void
test_parse_len(void)
{
    /* Only len bytes are read: the URL may sit inside a longer string. */
    const char *s = "http://h:8080,https://g:1";
    struct lk_url u;
    char err[256] = "";

    ok(lk_url_parse(s, 13, &u, err, sizeof(err)) == 0, "prefix parses (%s)", err);
    ok_str(u.text, "http://h:8080", "text");
    lk_url_free(&u);
    ok(lk_url_parse("http://h\0x", 10, &u, err, sizeof(err)) == -1, "a NUL byte is refused");
    ok_str(err, "bad URL 'http://h': bad character '?' in the host", "message");
    ok(lk_url_parse("http://h:80", 11, &u, NULL, 0) == 0, "err may be NULL");
    lk_url_free(&u);
    ok(lk_url_parse("http//h", 7, &u, NULL, 0) == -1, "err may be NULL on failure too");
}

static void
test_parse_errors(void)
{
    static const struct {
        const char *in, *err;
    } t[] = {
        {"", "bad URL '': expected scheme://host:port"},
        {"10.0.0.1:8080", "bad URL '10.0.0.1:8080': expected scheme://host:port"},
        {"http:/h", "bad URL 'http:/h': expected scheme://host:port"},
        {"ftp://h:21",
         "unknown scheme 'ftp' in 'ftp://h:21' (expected http, https, pulsar or pulsar+ssl)"},
        {"://h:1", "unknown scheme '' in '://h:1' (expected http, https, pulsar or pulsar+ssl)"},
        {"pulsar+tls://h",
         "unknown scheme 'pulsar+tls' in 'pulsar+tls://h' (expected http, https, pulsar or "
         "pulsar+ssl)"},
        {"http://", "bad URL 'http://': no host"},
        {"http://:8080", "bad URL 'http://:8080': no host"},
        {"http:///x", "bad URL 'http:///x': no host"},
        {"http://h:", "bad URL 'http://h:': no port after ':'"},
        {"http://h:/", "bad URL 'http://h:/': no port after ':'"},
        {"http://h:0", "bad URL 'http://h:0': port 0 is out of range 1-65535"},
        {"http://h:65536", "bad URL 'http://h:65536': port 65536 is out of range 1-65535"},
        {"http://h:99999999999999999999",
         "bad URL 'http://h:99999999999999999999': port 999999999999 is out of range 1-65535"},
        {"http://h:-1", "bad URL 'http://h:-1': no port after ':'"},
        {"http://h:80x",
         "bad URL 'http://h:80x': unexpected 'x' after the address (only a trailing '/' is "
         "allowed)"},
        {"http://h:80/path",
         "bad URL 'http://h:80/path': unexpected '/path' after the address (only a trailing '/' "
         "is allowed)"},
        {"http://h//",
         "bad URL 'http://h//': unexpected '//' after the address (only a trailing '/' is "
         "allowed)"},
        {"http://h:80?x=1",
         "bad URL 'http://h:80?x=1': unexpected '?x=1' after the address (only a trailing '/' is "
         "allowed)"},
        {"http://h:80 ",
         "bad URL 'http://h:80 ': unexpected ' ' after the address (only a trailing '/' is "
         "allowed)"},
        {"http://user@h:80", "bad URL 'http://user@h:80': bad character '@' in the host"},
        {"http://h?x", "bad URL 'http://h?x': bad character '?' in the host"},
        {"http://exa mple:80", "bad URL 'http://exa mple:80': bad character ' ' in the host"},
        {"http://[::1", "bad URL 'http://[::1': '[' without ']'"},
        {"http://[]:80", "bad URL 'http://[]:80': bad IPv6 address"},
        {"http://[zz::1]:80", "bad URL 'http://[zz::1]:80': bad IPv6 address 'zz::1'"},
        {"http://[fe80::1%eth0]:80",
         "bad URL 'http://[fe80::1%eth0]:80': bad IPv6 address 'fe80::1%eth0'"},
        {"http://[::1]x",
         "bad URL 'http://[::1]x': unexpected 'x' after the address (only a trailing '/' is "
         "allowed)"},
        {"http://::1:80", "bad URL 'http://::1:80': no host"},
        {"http://1.2.3.256:80", "bad URL 'http://1.2.3.256:80': bad IPv4 address '1.2.3.256'"},
        {"http://1.2.3:80", "bad URL 'http://1.2.3:80': bad IPv4 address '1.2.3'"},
        {"http://1.2.3.4.5.6.7.8.9.10:80",
         "bad URL 'http://1.2.3.4.5.6.7.8.9.10:80': bad IPv4 address"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_url u;
        char err[512] = "";

        subtest("%s", t[i].in);
        ok(lk_url_parse(t[i].in, strlen(t[i].in), &u, err, sizeof(err)) == -1, "refused");
        ok_str(err, t[i].err, "message");
        ok(u.host == NULL && u.text == NULL, "nothing allocated");
    }
}

static void
test_parse_long(void)
{
    /* 300-byte host: refused, and the quoted URL is cut, not the reason. */
    char in[400], err[512] = "";
    struct lk_url u;

    strcpy(in, "http://");
    memset(in + 7, 'a', 300);
    strcpy(in + 307, ":80");
    ok(lk_url_parse(in, strlen(in), &u, err, sizeof(err)) == -1, "refused");
    ok(strstr(err, "host name longer than 253 bytes") != NULL, "says why: %s", err);
    ok(strstr(err, "...") != NULL && strlen(err) < 200, "quotes an excerpt (%zu bytes)",
       strlen(err));
    /* 253 bytes is fine */
    memset(in + 7, 'a', 253);
    strcpy(in + 260, ":80");
    ok(lk_url_parse(in, strlen(in), &u, err, sizeof(err)) == 0, "253 bytes parse (%s)", err);
    ok(strlen(u.hostport) == 256, "hostport keeps the host whole");
    lk_url_free(&u);
}

static void
test_schemes(void)
{
    static const struct {
        enum lk_scheme s;
        const char *name;
        int tls;
        unsigned port;
        enum lk_scheme sibling;
    } t[] = {
        {LK_SCHEME_HTTP, "http", 0, 80, LK_SCHEME_HTTPS},
        {LK_SCHEME_HTTPS, "https", 1, 443, LK_SCHEME_HTTP},
        {LK_SCHEME_PULSAR, "pulsar", 0, 6650, LK_SCHEME_PULSAR_SSL},
        {LK_SCHEME_PULSAR_SSL, "pulsar+ssl", 1, 6651, LK_SCHEME_PULSAR},
        {LK_SCHEME_KAFKA, "kafka", 0, 0, LK_SCHEME_KAFKA_SSL},
        {LK_SCHEME_KAFKA_SSL, "kafka+ssl", 1, 0, LK_SCHEME_KAFKA},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        subtest("%s", t[i].name);
        ok_str(lk_scheme_name(t[i].s), t[i].name, "name");
        ok(lk_scheme_is_tls(t[i].s) == t[i].tls, "is_tls");
        ok(lk_scheme_default_port(t[i].s) == t[i].port, "default port");
        ok(lk_scheme_sibling(t[i].s) == t[i].sibling, "sibling");
        /* Kafka's schemes are lookout's names, never a config URL's */
        ok(lk_scheme_parse(lk_str_c(t[i].name)) == (t[i].port != 0 ? (int)t[i].s : -1), "parse");
    }
    subtest(NULL);
    ok(lk_scheme_parse(LK_STRLIT("HTTPS")) == LK_SCHEME_HTTPS, "parse is case-insensitive");
    ok(lk_scheme_parse(LK_STRLIT("Pulsar+SSL")) == LK_SCHEME_PULSAR_SSL, "parse pulsar+SSL");
    ok(lk_scheme_parse(LK_STRLIT("pulsar+tls")) == -1, "unknown scheme");
    ok(lk_scheme_parse(LK_STRLIT("http ")) == -1, "no trimming");
    ok(lk_scheme_parse(LK_STRLIT("htt")) == -1, "no prefix match");
    ok(lk_scheme_parse(LK_STR_NULL) == -1, "empty");
    ok(lk_scheme_parse(lk_str_make("httpsx", 5)) == LK_SCHEME_HTTPS, "reads only len bytes");
    ok_str(lk_scheme_name(LK_SCHEME__COUNT), "?", "name of an out-of-range scheme");
    ok(!lk_scheme_is_tls(LK_SCHEME__COUNT) && lk_scheme_default_port(LK_SCHEME__COUNT) == 0,
       "out-of-range scheme: no TLS, no port");
}

static void
test_listeners(void)
{
    const char *s = "internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"
                    "external:pulsar+ssl://b1.pulsar.example.com:6651,"
                    "external:https://b1.pulsar.example.com:8443";
    struct lk_listener *l;
    char err[256] = "";
    int n = lk_listeners_parse(s, &l, err, sizeof(err));

    if (!ok(n == 2, "two listeners (%d: %s)", n, err))
        return;
    ok_str(l[0].name, "internal", "first in order of appearance");
    ok_str(l[1].name, "external", "second");
    ok_str(l[0].addr[LK_SCHEME_PULSAR]->text, "pulsar://10.0.0.11:6650", "internal pulsar");
    ok_str(l[0].addr[LK_SCHEME_HTTP]->text, "http://10.0.0.11:8080", "internal http");
    ok(l[0].addr[LK_SCHEME_HTTPS] == NULL && l[0].addr[LK_SCHEME_PULSAR_SSL] == NULL,
       "internal has no TLS addresses");
    ok_str(l[1].addr[LK_SCHEME_PULSAR_SSL]->text, "pulsar+ssl://b1.pulsar.example.com:6651",
           "external pulsar+ssl");
    ok_str(l[1].addr[LK_SCHEME_HTTPS]->host, "b1.pulsar.example.com", "external https host");
    ok(l[1].addr[LK_SCHEME_HTTP] == NULL && l[1].addr[LK_SCHEME_PULSAR] == NULL,
       "external has no plaintext addresses");
    lk_listeners_free(l, (size_t)n);
}

static void
test_listeners_syntax(void)
{
    struct lk_listener *l = NULL;
    char err[256] = "";
    int n;

    /* names keep their first-appearance order even when interleaved */
    n = lk_listeners_parse("b:http://h:1,a:http://h:2,b:pulsar://h:3", &l, err, sizeof(err));
    ok(n == 2 && strcmp(l[0].name, "b") == 0 && strcmp(l[1].name, "a") == 0 &&
           l[0].addr[LK_SCHEME_PULSAR] != NULL && l[0].addr[LK_SCHEME_PULSAR]->port == 3,
       "interleaved names group (%s)", err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);

    /* whitespace around commas and colons, as broker.conf trims it */
    n = lk_listeners_parse(" internal : http://h:1 ,\t external:HTTPS://X:2\t, ", &l, err,
                           sizeof(err));
    ok(n == 2 && strcmp(l[0].name, "internal") == 0 && strcmp(l[1].name, "external") == 0 &&
           strcmp(l[1].addr[LK_SCHEME_HTTPS]->text, "https://x:2") == 0,
       "whitespace tolerated (%s)", err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);

    /* empty items: the broker's StringUtils.split drops them too */
    n = lk_listeners_parse(",a:http://h:1,,a:pulsar://h:6650,", &l, err, sizeof(err));
    ok(n == 1 && l[0].addr[LK_SCHEME_HTTP] != NULL && l[0].addr[LK_SCHEME_PULSAR] != NULL,
       "empty items skipped (%s)", err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);

    /* one listener may use one host:port for two schemes (Pulsar allows it) */
    n = lk_listeners_parse("a:http://h:1,a:pulsar://h:1", &l, err, sizeof(err));
    ok(n == 1, "same host:port, two schemes, one listener (%s)", err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);

    /* all four schemes in one listener (the 4.x limit of two is gone in 5.0) */
    n = lk_listeners_parse("a:http://h:1,a:https://h:2,a:pulsar://h:3,a:pulsar+ssl://h:4", &l, err,
                           sizeof(err));
    ok(n == 1 && l[0].addr[0] && l[0].addr[1] && l[0].addr[2] && l[0].addr[3], "four schemes (%s)",
       err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);

    /* IPv6 literals: their colons are not the name separator */
    n = lk_listeners_parse("a:http://[::1]:8080,b:http://[::1]:8081", &l, err, sizeof(err));
    ok(n == 2 && strcmp(l[1].addr[LK_SCHEME_HTTP]->hostport, "[::1]:8081") == 0,
       "IPv6 literals (%s)", err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);

    /* names are case-sensitive, as in Pulsar */
    n = lk_listeners_parse("a:http://h:1,A:http://h:2", &l, err, sizeof(err));
    ok(n == 2, "'a' and 'A' are two listeners (%s)", err);
    lk_listeners_free(l, n > 0 ? (size_t)n : 0);
}

static void
test_listeners_errors(void)
{
    static const struct {
        const char *in, *err;
    } t[] = {
        {"", "no listeners (expected name:scheme://host:port,...)"},
        {" , ,\t", "no listeners (expected name:scheme://host:port,...)"},
        {"internal", "'internal' is not name:scheme://host:port"},
        {"a:http://h:1,internal", "'internal' is not name:scheme://host:port"},
        {"http://h:1", "empty listener name in 'http://h:1' (expected name:scheme://host:port)"},
        {":http://h:1", "empty listener name in ':http://h:1' (expected name:scheme://host:port)"},
        {"a:http://h:1,  :pulsar://h:2",
         "empty listener name in ':pulsar://h:2' (expected name:scheme://host:port)"},
        {"a:http://h:1,a:http://g:2",
         "listener 'a' has two http addresses: http://h:1 and http://g:2"},
        {"a:http://h:1,a:HTTP://g:2",
         "listener 'a' has two http addresses: http://h:1 and http://g:2"},
        {"a:pulsar+ssl://h:1,b:http://x:1,a:pulsar+ssl://h:2",
         "listener 'a' has two pulsar+ssl addresses: pulsar+ssl://h:1 and pulsar+ssl://h:2"},
        {"a:http://h:1,b:pulsar://H:1",
         "h:1 is in two listeners: 'a' (http://h:1) and 'b' (pulsar://h:1)"},
        {"a:http://h,b:http://h:80",
         "h:80 is in two listeners: 'a' (http://h:80) and 'b' (http://h:80)"},
        {"a:http://[::1]:1,b:https://[::1]:1",
         "[::1]:1 is in two listeners: 'a' (http://[::1]:1) and 'b' (https://[::1]:1)"},
        {"a:ftp://h:1",
         "unknown scheme 'ftp' in 'ftp://h:1' (expected http, https, pulsar or pulsar+ssl)"},
        {"a:http://h:1/x",
         "bad URL 'http://h:1/x': unexpected '/x' after the address (only a trailing '/' is "
         "allowed)"},
        {"a:", "bad URL '': expected scheme://host:port"},
        {"a:http://h:1 b:http://g:2",
         "bad URL 'http://h:1 b:http://g:2': unexpected ' b:http://g:2' after the address (only a "
         "trailing '/' is allowed)"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_listener *l = (struct lk_listener *)&l;
        char err[512] = "";

        subtest("%s", t[i].in);
        ok(lk_listeners_parse(t[i].in, &l, err, sizeof(err)) == -1, "refused");
        ok_str(err, t[i].err, "message");
        ok(l == NULL, "*out is NULL");
    }
}

static void
test_listeners_long(void)
{
    /* 300 listeners, far beyond any 4 KiB line buffer; the last one counts. */
    size_t cap = 64 * 1024, len = 0;
    char *s = malloc(cap), err[256] = "";
    struct lk_listener *l = NULL;
    int n;

    for (int i = 0; i < 300; i++)
        len += (size_t)snprintf(s + len, cap - len, "%sl%d:http://host-%d.example.com:%d",
                                i != 0 ? ", " : "", i, i, 1000 + i);
    ok(len > 4096 * 2, "the line is %zu bytes", len);
    n = lk_listeners_parse(s, &l, err, sizeof(err));
    if (ok(n == 300, "300 listeners (%d: %s)", n, err)) {
        ok_str(l[299].name, "l299", "last name");
        ok_str(l[299].addr[LK_SCHEME_HTTP]->text, "http://host-299.example.com:1299",
               "last address");
        lk_listeners_free(l, (size_t)n);
    }

    /* an error at the very end of a long line is found and quoted short */
    len += (size_t)snprintf(s + len, cap - len, ",l7:http://host-7.example.com:1007/oops");
    ok(lk_listeners_parse(s, &l, err, sizeof(err)) == -1, "a bad URL at the end is refused");
    ok_str(err,
           "bad URL 'http://host-7.example.com:1007/oops': unexpected '/oops' after the address "
           "(only a trailing '/' is allowed)",
           "message");

    /* a 4 KiB garbage item is quoted as an excerpt */
    memset(s, 'x', 5000);
    s[5000] = '\0';
    ok(lk_listeners_parse(s, &l, err, sizeof(err)) == -1, "garbage refused");
    ok(strlen(err) < 200 && strstr(err, "...' is not name:scheme://host:port") != NULL,
       "excerpt: %s", err);
    free(s);
}

static void
test_listeners_err_small(void)
{
    /* A tiny err buffer is truncated, never overrun. */
    struct lk_listener *l;
    char err[8];

    memset(err, 'Z', sizeof(err));
    ok(lk_listeners_parse("nonsense", &l, err, 5) == -1, "refused");
    ok(strlen(err) == 4 && err[5] == 'Z', "truncated to the buffer: '%s'", err);
    ok(lk_listeners_parse("nonsense", &l, NULL, 0) == -1, "no buffer at all");
}

/* Kafka -------------------------------------------------------------------------- */

static void
test_kafka_security(void)
{
    static const char *const names[] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"};
    static const enum lk_scheme schemes[] = {LK_SCHEME_KAFKA, LK_SCHEME_KAFKA_SSL, LK_SCHEME_KAFKA,
                                             LK_SCHEME_KAFKA_SSL};

    for (int i = 0; i < 4; i++) {
        struct lk_listener l = {0};
        subtest("%s", names[i]);
        ok(lk_kafka_security_parse(lk_str_c(names[i])) == i, "parse");
        ok_str(lk_kafka_security_name((enum lk_kafka_security)i), names[i], "name");
        ok(lk_kafka_security_scheme((enum lk_kafka_security)i) == schemes[i], "scheme");
        ok(lk_kafka_security_sasl((enum lk_kafka_security)i) == (i >= 2), "sasl");
        l.addr[schemes[i]] = (struct lk_url *)&l; /* any non-NULL */
        l.sasl = i >= 2;
        ok(lk_kafka_listener_security(&l) == (enum lk_kafka_security)i, "from a listener");
    }
    subtest(NULL);
    ok(lk_kafka_security_parse(LK_STRLIT("sasl_ssl")) == LK_KAFKA_SASL_SSL, "any case");
    ok(lk_kafka_security_parse(LK_STRLIT("TLS")) == -1, "TLS is not a Kafka protocol");
    ok(lk_kafka_security_parse(LK_STRLIT("SSL ")) == -1, "no trimming");
    ok_str(lk_kafka_security_name((enum lk_kafka_security)4), "?", "out of range");
}

static void
test_kafka_addr(void)
{
    static const struct {
        const char *in, *host, *hostport;
        unsigned port;
    } good[] = {
        {"b1.Kafka.example.com:9093", "b1.kafka.example.com", "b1.kafka.example.com:9093", 9093},
        {"10.0.0.1:9092", "10.0.0.1", "10.0.0.1:9092", 9092},
        {"[::1]:9092", "::1", "[::1]:9092", 9092},
        {"::1:9092", "::1", "[::1]:9092", 9092}, /* Kafka's parser takes bare IPv6 too */
        {"fd00::22:65535", "fd00::22", "[fd00::22]:65535", 65535},
        {"h_1:1", "h_1", "h_1:1", 1},
    };
    static const struct {
        const char *in, *err;
    } bad[] = {
        {"", "bad address '': no host (Kafka's \"default interface\" cannot be advertised: write "
             "the host clients connect to)"},
        {":9092", "bad address ':9092': no host (Kafka's \"default interface\" cannot be "
                  "advertised: write the host clients connect to)"},
        {"h", "bad address 'h': expected host:port"},
        {"h:", "bad address 'h:': no port after ':'"},
        {"h:65536", "bad address 'h:65536': port 65536 is out of range 1-65535"},
        {"h:-1", "bad address 'h:-1': no port after ':'"},
        {"h:1x", "bad address 'h:1x': unexpected 'x' after the port"},
        {"[::1]", "bad address '[::1]': expected host:port"},
        {"[::1:9092", "bad address '[::1:9092': '[' without ']'"},
        {"1.2.3:9092", "bad address '1.2.3:9092': bad IPv4 address '1.2.3'"},
        {"h h:1", "bad address 'h h:1': bad character ' ' in the host"},
        {"a:b:1", "bad address 'a:b:1': bad IPv6 address 'a:b'"},
    };
    char err[256];
    struct lk_url u;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        subtest("%s", good[i].in);
        if (!ok(lk_kafka_addr_parse(good[i].in, strlen(good[i].in), LK_SCHEME_KAFKA_SSL, &u, err,
                                    sizeof(err)) == 0,
                "parses (%s)", err))
            continue;
        ok(u.scheme == LK_SCHEME_KAFKA_SSL && u.port == good[i].port, "scheme and port");
        ok_str(u.host, good[i].host, "host");
        ok_str(u.hostport, good[i].hostport, "hostport");
        ok_str(u.text, good[i].hostport, "text");
        lk_url_free(&u);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        subtest("%s", bad[i].in);
        ok(lk_kafka_addr_parse(bad[i].in, strlen(bad[i].in), LK_SCHEME_KAFKA, &u, err,
                               sizeof(err)) == -1,
           "refused");
        ok_str(err, bad[i].err, "message");
    }
    subtest(NULL);
    ok(lk_kafka_addr_parse("h:12", 3, LK_SCHEME_KAFKA, &u, err, sizeof(err)) == 0 && u.port == 1,
       "reads only len bytes");
    lk_url_free(&u);
    /* a Pulsar URL never takes a Kafka scheme */
    ok(lk_url_parse("kafka://h:1", 11, &u, err, sizeof(err)) == -1, "kafka:// is no URL");
}

static void
test_kafka_listeners(void)
{
    struct lk_kafka_secmap *m;
    struct lk_listener *l;
    char err[512];
    int n = lk_kafka_secmap_parse(" internal:PLAINTEXT , EXTERNAL:sasl_ssl,,", &m, err,
                                  sizeof(err));

    if (!ok(n == 2, "map parses (%s)", err))
        return;
    ok_str(m[0].name, "INTERNAL", "names upper-cased");
    ok(m[0].sec == LK_KAFKA_PLAINTEXT && m[1].sec == LK_KAFKA_SASL_SSL, "protocols");
    ok(lk_kafka_secmap_find(m, 2, LK_STRLIT("external")) == &m[1], "find is case-insensitive");
    ok(lk_kafka_secmap_find(m, 2, LK_STRLIT("EXT")) == NULL, "no prefix match");

    n = lk_kafka_listeners_parse("INTERNAL://10.0.0.1:9092, external://[::1]:9093,", m, 2, "M",
                                 &l, err, sizeof(err));
    if (ok(n == 2, "listeners parse (%s)", err)) {
        ok_str(l[0].name, "INTERNAL", "name");
        ok(l[0].addr[LK_SCHEME_KAFKA] != NULL && !l[0].sasl, "PLAINTEXT: kafka");
        ok_str(lk_kafka_addr(&l[0])->text, "INTERNAL://10.0.0.1:9092", "text");
        ok_str(l[1].name, "EXTERNAL", "the map's spelling of the name");
        ok(l[1].addr[LK_SCHEME_KAFKA_SSL] != NULL && l[1].sasl, "SASL_SSL: kafka+ssl and sasl");
        ok_str(lk_kafka_addr(&l[1])->text, "EXTERNAL://[::1]:9093", "IPv6 text");
        for (int s = 0; s < LK_SCHEME__COUNT; s++)
            if (s != LK_SCHEME_KAFKA)
                ok(l[0].addr[s] == NULL, "no %s address", lk_scheme_name((enum lk_scheme)s));
        lk_listeners_free(l, (size_t)n);
    }
    ok(lk_kafka_listeners_parse("X://h:1", m, 2, "the map", &l, err, sizeof(err)) == -1 &&
           strcmp(err, "listener 'X' is not in the map, so its security protocol is unknown") == 0,
       "a name not in the map (%s)", err);
    ok(lk_kafka_listeners_parse("INTERNAL://h:1,://g:2", m, 2, "M", &l, err, sizeof(err)) == -1 &&
           strcmp(err, "empty listener name in '://g:2'") == 0,
       "an empty name (%s)", err);
    ok(lk_kafka_listeners_parse("IN TERNAL://h:1", m, 2, "M", &l, err, sizeof(err)) == -1 &&
           strcmp(err, "bad listener name 'IN TERNAL' (letters, digits, '_', '-' and '.' only)") ==
               0,
       "a bad name (%s)", err);
    lk_kafka_secmap_free(m, 2);

    ok(lk_kafka_secmap_parse(lk_kafka_default_secmap, &m, err, sizeof(err)) == 4 &&
           strcmp(m[3].name, "SASL_SSL") == 0 && m[3].sec == LK_KAFKA_SASL_SSL,
       "Kafka's default map");
    lk_kafka_secmap_free(m, 4);
    ok(lk_kafka_secmap_parse("A:SSL:x", &m, err, sizeof(err)) == -1 &&
           strcmp(err, "unknown security protocol 'SSL:x' for listener 'A' (expected PLAINTEXT, "
                       "SSL, SASL_PLAINTEXT or SASL_SSL)") == 0,
       "one ':' per item (%s)", err);
}

static void
test_kafka_pattern(void)
{
    struct lk_kafka_pattern p;
    char err[512], host[300];
    uint16_t port;
    int32_t id;

    /* the id in the host */
    if (!ok(lk_kafka_pattern_parse("B$(nodeId).Kafka.example.com:9093", &p, err, sizeof(err)) == 0,
            "host pattern (%s)", err))
        return;
    ok(p.host_has_id && !p.port_has_id && p.port == 9093, "host_has_id, port 9093");
    ok_str(p.host_prefix, "b", "prefix lower-cased");
    ok_str(p.host_suffix, ".kafka.example.com", "suffix");
    ok_str(p.text, "B$(nodeId).Kafka.example.com:9093", "text as written");
    ok(lk_kafka_pattern_expand(&p, 7, host, sizeof(host), &port) == 0 && port == 9093 &&
           strcmp(host, "b7.kafka.example.com") == 0,
       "expand 7: %s", host);
    ok(lk_kafka_pattern_expand(&p, INT32_MAX, host, sizeof(host), &port) == 0 &&
           strcmp(host, "b2147483647.kafka.example.com") == 0,
       "expand the largest id");
    ok(lk_kafka_pattern_expand(&p, -1, host, sizeof(host), &port) == -1, "no negative id");
    ok(lk_kafka_pattern_expand(&p, 1, host, 5, &port) == -1, "a short buffer");
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("B12.KAFKA.example.com."), 9093, &id) == 1 && id == 12,
       "match: case and trailing dot ignored");
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("b12.kafka.example.com"), 0, &id) == 1 && id == 12,
       "match without a port (SNI)");
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("b0.kafka.example.com"), 9093, &id) == 1 && id == 0,
       "node 0");
    static const char *const nomatch[] = {"b.kafka.example.com", "b01.kafka.example.com",
                                          "b-1.kafka.example.com", "b1x.kafka.example.com",
                                          "b2147483648.kafka.example.com", "c1.kafka.example.com",
                                          "b1.kafka.example.org", "b99999999999.kafka.example.com",
                                          NULL};
    for (size_t i = 0; nomatch[i] != NULL; i++)
        ok(lk_kafka_pattern_match(&p, lk_str_c(nomatch[i]), 9093, &id) == 0, "no match: %s",
           nomatch[i]);
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("b1.kafka.example.com"), 9094, &id) == 0,
       "no match: another port");
    lk_kafka_pattern_free(&p);

    /* the id in the port */
    if (!ok(lk_kafka_pattern_parse("[::1]:$(9100+nodeId)", &p, err, sizeof(err)) == 0,
            "port pattern (%s)", err))
        return;
    ok(!p.host_has_id && p.port_has_id && p.port == 9100, "port_has_id, base 9100");
    ok_str(p.host_prefix, "::1", "the host, without brackets");
    ok(lk_kafka_pattern_expand(&p, 5, host, sizeof(host), &port) == 0 && port == 9105 &&
           strcmp(host, "::1") == 0,
       "expand 5");
    ok(lk_kafka_pattern_expand(&p, 65535 - 9100, host, sizeof(host), &port) == 0 && port == 65535,
       "the last port");
    ok(lk_kafka_pattern_expand(&p, 65536 - 9100, host, sizeof(host), &port) == -1,
       "no port past 65535");
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("[::1]"), 9107, &id) == 1 && id == 7, "match 9107");
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("::1"), 9099, &id) == 0, "below the base");
    ok(lk_kafka_pattern_match(&p, LK_STRLIT("::2"), 9107, &id) == 0, "another host");
    lk_kafka_pattern_free(&p);

    /* both */
    if (ok(lk_kafka_pattern_parse("n$(nodeId).x:$(20000+nodeId)", &p, err, sizeof(err)) == 0,
           "both (%s)", err)) {
        ok(lk_kafka_pattern_match(&p, LK_STRLIT("n3.x"), 20003, &id) == 1 && id == 3, "agree");
        ok(lk_kafka_pattern_match(&p, LK_STRLIT("n3.x"), 20004, &id) == 0, "disagree");
        lk_kafka_pattern_free(&p);
    }
    /* a host of 243 bytes takes every id; one more byte does not */
    {
        char big[300];
        memset(big, 'a', 243);
        snprintf(big + 243, sizeof(big) - 243, "$(nodeId):1");
        ok(lk_kafka_pattern_parse(big, &p, err, sizeof(err)) == 0, "a 253-byte host (%s)", err);
        lk_kafka_pattern_free(&p);
        memset(big, 'a', 244);
        snprintf(big + 244, sizeof(big) - 244, "$(nodeId):1");
        ok(lk_kafka_pattern_parse(big, &p, err, sizeof(err)) == -1, "a 254-byte host: %s", err);
    }
}

const struct lk_test_case lk_test_url[] = {
    {"url/parse", test_parse},
    {"url/parse_len", test_parse_len},
    {"url/parse_errors", test_parse_errors},
    {"url/parse_long_host", test_parse_long},
    {"url/schemes", test_schemes},
    {"url/listeners", test_listeners},
    {"url/listeners_syntax", test_listeners_syntax},
    {"url/listeners_errors", test_listeners_errors},
    {"url/listeners_long", test_listeners_long},
    {"url/listeners_err_small", test_listeners_err_small},
    {"url/kafka_security", test_kafka_security},
    {"url/kafka_addr", test_kafka_addr},
    {"url/kafka_listeners", test_kafka_listeners},
    {"url/kafka_pattern", test_kafka_pattern},
    {NULL, NULL},
};
