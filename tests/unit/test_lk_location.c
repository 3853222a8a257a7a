/*
 * Tests for proxy/lk_location.c and filters/flt_location.c: splitting
 * absolute URLs and moving broker URLs onto the selected listener.
 */
#include <stdio.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_location.h"
#include "lk_test.h"
#include "lk_xchg.h"

static const char conf_text[] =
    "[lookout]\n"
    "tls.certificate = edge.crt\n"
    "tls.key = edge.key\n"
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "webServiceUrl = http://127.0.0.1:18080\n"
    "filters = location\n"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"
    "external:pulsar+ssl://127.0.0.1:16651,external:https://127.0.0.1:18443,"
    "external:http://127.0.0.1:18081\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080,"
    "internal:https://pulsar-broker-2.pulsar-broker.svc.cluster.local:8443,"
    "external:http://127.0.0.2:18082\n";

static struct lk_conf *
load(void)
{
    char err[512];
    struct lk_conf *conf = lk_conf_load_buf("test.conf", conf_text, strlen(conf_text), err,
                                            sizeof(err));
    if (!ok(conf != NULL, "test config loads"))
        lk_test_diag("%s", err);
    return conf;
}

static void
test_split(void)
{
    static const struct {
        const char *url;
        int rc;
        const char *scheme, *host;
        unsigned port;
        const char *rest;
    } t[] = {
        {"http://10.0.0.11:8080/admin/v2?x=1#f", 0, "http", "10.0.0.11", 8080, "/admin/v2?x=1#f"},
        {"https://h/p", 0, "https", "h", 443, "/p"},
        {"HTTP://H", 0, "HTTP", "H", 80, ""},
        {"http://u:p@h:81?q", 0, "http", "h", 81, "?q"},
        {"http://[::1]:8080/x", 0, "http", "::1", 8080, "/x"},
        {"pulsar://b:6650", 0, "pulsar", "b", 6650, ""},
        {"ftp://h/x", 0, "ftp", "h", 0, "/x"},
        {"/relative/path", -1, NULL, NULL, 0, NULL},
        {"//h:1/scheme-relative", -1, NULL, NULL, 0, NULL},
        {"http://:80/", -1, NULL, NULL, 0, NULL},
        {"http://h:99999/", -1, NULL, NULL, 0, NULL},
        {"http://h:8a/", -1, NULL, NULL, 0, NULL},
        {"http://[::1/", -1, NULL, NULL, 0, NULL},
        {"", -1, NULL, NULL, 0, NULL},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_url_parts u;
        char buf[256];
        subtest("%s", t[i].url);
        int rc = lk_url_split(lk_str_c(t[i].url), &u);
        if (!ok(rc == t[i].rc, "rc %d", rc) || rc != 0)
            continue;
        snprintf(buf, sizeof(buf), "%.*s", (int)u.scheme.len, u.scheme.p);
        ok_str(buf, t[i].scheme, "scheme");
        snprintf(buf, sizeof(buf), "%.*s", (int)u.host.len, u.host.p);
        ok_str(buf, t[i].host, "host");
        ok(u.port == t[i].port, "port %u", u.port);
        snprintf(buf, sizeof(buf), "%.*s", (int)u.rest.len, u.rest.p);
        ok_str(buf, t[i].rest, "rest byte for byte");
    }
    subtest(NULL);
}

static void
test_rewrite(void)
{
    struct lk_conf *conf = load();
    struct lk_pool pool;
    static const struct {
        const char *in;
        int tls;
        const char *out; /* NULL: untouched */
    } t[] = {
        /* admin 307: host:port swapped, query kept byte for byte */
        {"http://10.0.0.11:8080/admin/v2/persistent/public/default/t1/stats?authoritative=false&x=%2F",
         0, "http://127.0.0.1:18081/admin/v2/persistent/public/default/t1/stats?authoritative=false&x=%2F"},
        /* over TLS the https address is preferred */
        {"http://10.0.0.11:8080/lookup/v2/topic/persistent/t/n/x?authoritative=true", 1,
         "https://127.0.0.1:18443/lookup/v2/topic/persistent/t/n/x?authoritative=true"},
        /* a broker's binary address maps into the pulsar family */
        {"pulsar://10.0.0.11:6650", 0, "pulsar+ssl://127.0.0.1:16651"},
        /* an external address is a listener address too: normalised onto the selected one */
        {"https://127.0.0.1:18443/x", 0, "http://127.0.0.1:18081/x"},
        /* names are case-insensitive; the https internal maps to the only external (http) */
        {"https://PULSAR-BROKER-2.pulsar-broker.svc.cluster.local:8443/a#frag", 1,
         "http://127.0.0.2:18082/a#frag"},
        {"http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080", 0, "http://127.0.0.2:18082"},
        /* unknown hosts, other ports, relative URLs: untouched */
        {"http://10.0.0.99:8080/x", 0, NULL},
        {"http://10.0.0.11:8081/x", 0, NULL},
        {"/admin/v2/x", 0, NULL},
        {"//10.0.0.11:8080/x", 0, NULL},
        {"http://10.0.0.11/x", 0, NULL}, /* port 80 is not 8080 */
    };
    if (conf == NULL)
        return;
    const struct lk_cluster *cl = conf->clusters[0];
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_str out = LK_STR_NULL;
        char buf[512];
        lk_pool_init(&pool);
        subtest("%s tls=%d", t[i].in, t[i].tls);
        int r = lk_location_rewrite(&pool, cl, "external", t[i].tls, lk_str_c(t[i].in), &out, NULL);
        if (t[i].out == NULL) {
            ok(r == 0, "left alone");
        } else if (ok(r == 1, "rewritten")) {
            snprintf(buf, sizeof(buf), "%.*s", (int)out.len, out.p);
            ok_str(buf, t[i].out, "result");
        }
        lk_pool_free(&pool);
    }
    subtest(NULL);
    lk_pool_init(&pool);
    struct lk_str out;
    ok(lk_location_rewrite(&pool, cl, NULL, 0, LK_STRLIT("http://10.0.0.11:8080/x"), &out, NULL) == 0,
       "no listener selected: nothing is rewritten");
    ok(lk_location_rewrite(&pool, cl, "nosuch", 0, LK_STRLIT("http://10.0.0.11:8080/x"), &out,
                           NULL) == 1 &&
           lk_str_eq(out, lk_str_c("http://127.0.0.1:18081/x")),
       "a listener the broker lacks: its lookup listener's address, never the internal one");
    lk_pool_free(&pool);
    lk_conf_unref(conf);
}

/*
 * The address a client is given for a broker (lk_location_pick), which
 * the Location filter and the leak guard's rewrite share: b1's vpn
 * listener is binary only (PIP-95), b3 has no vpn listener and binary
 * addresses only on the lookup listener; webServiceUrl is the last
 * stand-in for a web address, and a binary one has none.
 */
static const char pick_fmt[] =
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "client_listeners = vpn\n"
    "%s"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"
    "external:pulsar://127.0.0.1:16650,external:http://127.0.0.1:18081,"
    "external:https://127.0.0.1:18443,vpn:pulsar://10.9.9.9:6650\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:http://10.0.0.12:8080,external:http://127.0.0.2:18082,"
    "vpn:http://10.9.9.12:8080\n"
    "[broker prod/b3]\n"
    "advertisedListeners = internal:pulsar://10.0.0.13:6650,internal:http://10.0.0.13:8080,"
    "external:pulsar://127.0.0.3:16650\n";

static void
test_pick(void)
{
    static const struct {
        int web; /* webServiceUrl set */
        const char *broker, *listener;
        enum lk_scheme scheme;
        int tls;
        const char *want;   /* NULL: none */
        const char *lacked; /* NULL: no fallback */
    } t[] = {
        /* the selected listener has one: it, TLS first for a TLS client */
        {1, "b1", "external", LK_SCHEME_HTTP, 0, "http://127.0.0.1:18081", NULL},
        {1, "b1", "external", LK_SCHEME_HTTP, 1, "https://127.0.0.1:18443", NULL},
        {1, "b1", "external", LK_SCHEME_HTTPS, 0, "http://127.0.0.1:18081", NULL},
        {1, "b2", "vpn", LK_SCHEME_HTTP, 0, "http://10.9.9.12:8080", NULL},
        {1, "b1", "vpn", LK_SCHEME_PULSAR, 0, "pulsar://10.9.9.9:6650", NULL},
        /* a binary-only listener (PIP-95): the lookup listener's web address */
        {1, "b1", "vpn", LK_SCHEME_HTTP, 0, "http://127.0.0.1:18081", "vpn"},
        {1, "b1", "vpn", LK_SCHEME_HTTP, 1, "https://127.0.0.1:18443", "vpn"},
        {0, "b1", "vpn", LK_SCHEME_HTTP, 0, "http://127.0.0.1:18081", "vpn"},
        /* a broker without the listener at all: its lookup listener's
         * (lk_broker_client_listener), no web fallback */
        {1, "b1", "nosuch", LK_SCHEME_HTTPS, 0, "http://127.0.0.1:18081", NULL},
        {1, "b3", "vpn", LK_SCHEME_PULSAR, 0, "pulsar://127.0.0.3:16650", NULL},
        /* no web address on the lookup listener either: webServiceUrl */
        {1, "b3", "vpn", LK_SCHEME_HTTP, 0, "http://127.0.0.1:18080", "external"},
        {1, "b3", "external", LK_SCHEME_HTTP, 0, "http://127.0.0.1:18080", "external"},
        {1, "b3", "external", LK_SCHEME_HTTPS, 1, "http://127.0.0.1:18080", "external"},
        /* ... and without it, none */
        {0, "b3", "external", LK_SCHEME_HTTP, 0, NULL, NULL},
        {0, "b3", "vpn", LK_SCHEME_HTTP, 1, NULL, NULL},
        /* a binary address has no stand-in */
        {1, "b2", "external", LK_SCHEME_PULSAR, 0, NULL, NULL},
        {1, "b2", "vpn", LK_SCHEME_PULSAR, 1, NULL, NULL},
        {1, "b3", "external", LK_SCHEME_PULSAR_SSL, 1, "pulsar://127.0.0.3:16650", NULL},
        /* no listener selected: nothing (CONTRACT §3) */
        {1, "b3", NULL, LK_SCHEME_HTTP, 0, NULL, NULL},
    };
    struct lk_conf *conf[2] = {NULL, NULL};
    char text[2048], err[512];

    for (int w = 0; w < 2; w++) {
        snprintf(text, sizeof(text), pick_fmt, w ? "webServiceUrl = http://127.0.0.1:18080\n" : "");
        conf[w] = lk_conf_load_buf("pick.conf", text, strlen(text), err, sizeof(err));
        if (!ok(conf[w] != NULL, "the config loads (webServiceUrl %s)", w ? "set" : "unset")) {
            lk_test_diag("%s", err);
            goto end;
        }
    }
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        const struct lk_cluster *cl = conf[t[i].web]->clusters[0];
        const char *lacked = "unset";
        char name[32];

        subtest("%s %s %s tls=%d%s", t[i].broker, t[i].listener ? t[i].listener : "(none)",
                lk_scheme_name(t[i].scheme), t[i].tls, t[i].web ? "" : ", no webServiceUrl");
        snprintf(name, sizeof(name), "prod/%s", t[i].broker);
        const struct lk_broker *b = NULL;
        for (size_t k = 0; k < cl->nbrokers; k++)
            if (strcmp(cl->brokers[k]->name, name) == 0)
                b = cl->brokers[k];
        const struct lk_url *u = lk_location_pick(b, t[i].listener, t[i].scheme, t[i].tls, &lacked);
        ok_str(u != NULL ? u->text : "(none)", t[i].want != NULL ? t[i].want : "(none)", "address");
        ok_str(lacked != NULL ? lacked : "(none)", t[i].lacked != NULL ? t[i].lacked : "(none)",
               "lacked");
    }
    subtest(NULL);

    /* the Location rewrite takes the same choice, and says so */
    const struct lk_cluster *cl = conf[1]->clusters[0];
    static const struct {
        const char *listener, *in, *out, *lacked;
    } r[] = {
        /* (a) b1's own internal Location, the client asked for vpn */
        {"vpn", "http://10.0.0.11:8080/admin/v2/x?authoritative=false",
         "http://127.0.0.1:18081/admin/v2/x?authoritative=false", "vpn"},
        /* (b) b2 sends a vpn client to b3, which has no vpn listener and a
         * binary-only lookup listener: webServiceUrl */
        {"vpn", "http://10.0.0.13:8080/lookup/v2/topic/t?authoritative=true#f",
         "http://127.0.0.1:18080/lookup/v2/topic/t?authoritative=true#f", "external"},
        /* (c) the lookup listener is binary only: webServiceUrl */
        {"external", "http://10.0.0.13:8080/admin/v2/y", "http://127.0.0.1:18080/admin/v2/y",
         "external"},
        {"vpn", "http://10.0.0.12:8080/z", "http://10.9.9.12:8080/z", NULL},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
        struct lk_pool pool;
        struct lk_str out = LK_STR_NULL;
        struct lk_location_how how = {NULL, NULL, "unset"};
        char buf[512];

        subtest("%s %s", r[i].listener, r[i].in);
        lk_pool_init(&pool);
        if (ok(lk_location_rewrite(&pool, cl, r[i].listener, 0, lk_str_c(r[i].in), &out, &how) == 1,
               "rewritten")) {
            snprintf(buf, sizeof(buf), "%.*s", (int)out.len, out.p);
            ok_str(buf, r[i].out, "result");
            ok(how.broker != NULL && how.to != NULL &&
                   strncmp(buf, how.to->text, strlen(how.to->text)) == 0,
               "how names the broker and the address given");
            ok_str(how.lacked != NULL ? how.lacked : "(none)",
                   r[i].lacked != NULL ? r[i].lacked : "(none)", "lacked");
        }
        lk_pool_free(&pool);
    }
    subtest(NULL);
end:
    lk_conf_unref(conf[0]);
    lk_conf_unref(conf[1]);
}

/* The filter itself, driven through the chain runner. */
/*
 * CONNECT proxy_to_broker_url in both forms.  The host:port form is the
 * Java client's (ClientCnx.setTargetBroker: String.format("%s:%d",
 * getHostString(), getPort()) of createUnresolved(uri.getHost(), ...), so
 * an IPv6 host comes in brackets); the Pulsar Proxy splits it at the last
 * ':' (BrokerProxyValidator.resolveAndCheckTargetAddress).
 */
static void
test_proxy_target(void)
{
    static const char text[] =
        "[pulsar prod]\n"
        "internalListenerName = internal\n"
        "lookupListenerName = external\n"
        "[broker prod/b1]\n"
        "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"
        "external:pulsar://127.0.2.61:6651,external:pulsar+ssl://b1.lookout.example:6652\n"
        "[broker prod/b2]\n"
        "advertisedListeners = internal:pulsar+ssl://[fd00::12]:6651,internal:http://[fd00::12]:8080,"
        "external:pulsar://127.0.2.62:6651\n";
    static const struct {
        const char *target;
        const char *broker; /* NULL: refused */
        const char *why;    /* NULL: well formed, names no broker */
    } t[] = {
        /* host:port, the Java client's form: lookup-listener and internal addresses */
        {"127.0.2.61:6651", "prod/b1", NULL},
        {"b1.lookout.example:6652", "prod/b1", NULL},
        {"B1.LOOKOUT.EXAMPLE.:6652", "prod/b1", NULL},
        {"10.0.0.11:6650", "prod/b1", NULL},
        {"10.0.0.11:8080", "prod/b1", NULL}, /* any address of the broker names it */
        {"127.0.2.62:6651", "prod/b2", NULL},
        {"[fd00::12]:6651", "prod/b2", NULL},
        {"[FD00::12]:8080", "prod/b2", NULL},
        /* the URL form */
        {"pulsar://127.0.2.61:6651", "prod/b1", NULL},
        {"pulsar+ssl://b1.lookout.example:6652", "prod/b1", NULL},
        {"pulsar://[fd00::12]:6651", "prod/b2", NULL},
        /* well formed, no mapped broker */
        {"127.0.2.61:6650", NULL, NULL},
        {"10.9.9.9:6650", NULL, NULL},
        {"pulsar://10.9.9.9:6650", NULL, NULL},
        {"[fd00::13]:6651", NULL, NULL},
        /* malformed */
        {"", NULL, "is empty"},
        {"127.0.2.61", NULL, "has no ':port'"},
        {"127.0.2.61:", NULL, "has a port that is not a number from 1 to 65535"},
        {"127.0.2.61:0", NULL, "has a port that is not a number from 1 to 65535"},
        {"127.0.2.61:65536", NULL, "has a port that is not a number from 1 to 65535"},
        {"127.0.2.61:6651x", NULL, "has a port that is not a number from 1 to 65535"},
        {"127.0.2.61:+6651", NULL, "has a port that is not a number from 1 to 65535"},
        {"127.0.2.61:0006651", NULL, "has a port that is not a number from 1 to 65535"},
        {":6651", NULL, "has no host"},
        {"fd00::12:6651", NULL, "has an IPv6 address without brackets"},
        {"[fd00::12:6651", NULL, "has an unclosed '['"},
        {"[fd00::12]6651", NULL, "has no ':port' after the bracketed IPv6 address"},
        {"[fd00::12]", NULL, "has no ':port' after the bracketed IPv6 address"},
        {"[]:6651", NULL, "has no IPv6 address in its brackets"},
        {"[127.0.2.61]:6651", NULL, "has no IPv6 address in its brackets"},
        {"[fd00::12%eth0]:6651", NULL, "has no IPv6 address in its brackets"},
        {"user@127.0.2.61:6651", NULL, "has a host that is neither a name nor an address"},
        {"127.0.2.61 :6651", NULL, "has a host that is neither a name nor an address"},
        {"127.0.2.61/x:6651", NULL, "has a host that is neither a name nor an address"},
        {"pulsar:/127.0.2.61:6651", NULL, "has a host that is neither a name nor an address"},
        {"pulsar://:6651", NULL, "is a URL without a valid host and port"},
        {"pulsar://127.0.2.61:99999", NULL, "is a URL without a valid host and port"},
        {"foo://127.0.2.61", NULL, "is a URL without a valid host and port"},
        {"://127.0.2.61:6651", NULL, "is a URL without a valid host and port"},
    };
    char err[512];
    struct lk_conf *conf = lk_conf_load_buf("target.conf", text, strlen(text), err, sizeof(err));

    if (!ok(conf != NULL, "the config loads")) {
        lk_test_diag("%s", err);
        return;
    }
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        const char *why = "unset";
        subtest("'%s'", t[i].target);
        const struct lk_broker *b =
            lk_proxy_target_find(conf->clusters[0], lk_str_c(t[i].target), &why);
        ok_str(b != NULL ? b->name : "(none)", t[i].broker != NULL ? t[i].broker : "(none)",
               "broker");
        ok_str(why != NULL ? why : "(none)", t[i].why != NULL ? t[i].why : "(none)", "why");
    }
    subtest(NULL);
    lk_conf_unref(conf);
}

static void
test_filter(void)
{
    struct lk_conf *conf = load();
    struct lk_xchg x;

    if (conf == NULL)
        return;
    memset(&x, 0, sizeof(x));
    lk_pool_init(&x.pool);
    x.conf = conf;
    x.cluster = conf->clusters[0];
    x.listener_name = x.cluster->lookup_listener;
    ok(x.cluster->nfilters == 1 && strcmp(x.cluster->filters[0].ops->name, "location") == 0,
       "the chain is the location filter alone");
    lk_http_msg_init(&x.res, &x.pool, 0);
    x.res.status = 307;
    lk_http_add(&x.res, LK_STRLIT("Location"), LK_STRLIT("http://10.0.0.11:8080/a?b=c"));
    lk_http_add(&x.res, LK_STRLIT("content-location"), LK_STRLIT("http://10.0.0.11:8080/c"));
    lk_http_add(&x.res, LK_STRLIT("Link"), LK_STRLIT("http://10.0.0.11:8080/untouched"));
    lk_flt_attach_all(&x);
    ok(lk_flt_run_res_headers(&x) == LK_FLT_CONTINUE, "continue");
    struct lk_str *v = lk_http_find(&x.res, LK_STRLIT("Location"));
    ok(v && lk_str_eq(*v, LK_STRLIT("http://127.0.0.1:18081/a?b=c")), "Location rewritten");
    v = lk_http_find(&x.res, LK_STRLIT("Content-Location"));
    ok(v && lk_str_eq(*v, LK_STRLIT("http://127.0.0.1:18081/c")), "Content-Location rewritten");
    v = lk_http_find(&x.res, LK_STRLIT("Link"));
    ok(v && lk_str_eq(*v, LK_STRLIT("http://10.0.0.11:8080/untouched")), "other fields untouched");
    ok(x.rewrites == 2, "two rewrites counted (%u)", x.rewrites);
    lk_flt_detach_all(&x);

    /* without a selected listener the filter sits the exchange out */
    x.listener_name = NULL;
    x.rewrites = 0;
    lk_http_set(&x.res, LK_STRLIT("Location"), LK_STRLIT("http://10.0.0.11:8080/a"));
    lk_flt_attach_all(&x);
    ok(!x.flt[0].attached, "not attached");
    lk_flt_run_res_headers(&x);
    v = lk_http_find(&x.res, LK_STRLIT("Location"));
    ok(v && lk_str_eq(*v, LK_STRLIT("http://10.0.0.11:8080/a")) && x.rewrites == 0, "untouched");
    lk_flt_detach_all(&x);
    lk_pool_free(&x.pool);
    lk_conf_unref(conf);
}

const struct lk_test_case lk_test_location[] = {
    {"location/split", test_split},   {"location/rewrite", test_rewrite},
    {"location/pick", test_pick},     {"location/proxy_target", test_proxy_target},
    {"location/filter", test_filter}, {NULL, NULL},
};
