/*
 * Tests for filters/flt_listener.c: which listener an exchange rewrites
 * into, and that the client's listener name never reaches the broker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_test.h"
#include "lk_xchg.h"

/* %s: the cluster's extra lines (client_listeners) */
static const char conf_fmt[] =
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "webServiceUrl = http://127.0.0.1:18080\n"
    "%s"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:http://10.0.0.11:8080,external:http://127.0.0.1:18081,"
    "vpn:http://127.0.0.5:18081,my%%listener:http://127.0.0.6:18081,"
    "other:http://127.0.0.7:18081\n";

static struct lk_conf *
load(const char *extra)
{
    char text[1024], err[512];
    struct lk_conf *conf;

    snprintf(text, sizeof(text), conf_fmt, extra);
    conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    if (!ok(conf != NULL, "config loads (%s)", extra))
        lk_test_diag("%s", err);
    return conf;
}

static void
run(struct lk_conf *conf, const char *target, const char *header, const char *want_listener,
    const char *want_target)
{
    struct lk_xchg x;
    char buf[512];

    memset(&x, 0, sizeof(x));
    lk_pool_init(&x.pool);
    x.conf = conf;
    x.cluster = conf->clusters[0];
    x.listener_name = x.cluster->lookup_listener; /* what the engine starts with */
    lk_http_msg_init(&x.req, &x.pool, 1);
    x.req.method = LK_STRLIT("GET");
    x.req.target = lk_str_c(target);
    lk_http_add(&x.req, LK_STRLIT("Host"), LK_STRLIT("h"));
    if (header != NULL)
        lk_http_add(&x.req, LK_STRLIT("X-Pulsar-ListenerName"), lk_str_c(header));
    subtest("%s [%s]", target, header ? header : "-");
    lk_flt_attach_all(&x);
    ok(!x.flt[0].attached, "it selects at attach and sits out");
    for (size_t i = 0; i < x.cluster->nfilters; i++)
        if (strcmp(x.cluster->filters[i].ops->name, "location") == 0)
            ok(x.flt[i].attached == (want_listener != NULL),
               "later filters see the selection when they attach");
    ok(lk_flt_run_req_headers(&x) == LK_FLT_CONTINUE, "continue");
    ok_str(x.listener_name, want_listener, "selected listener");
    snprintf(buf, sizeof(buf), "%.*s", (int)x.req.target.len, x.req.target.p);
    ok_str(buf, want_target, "forwarded target");
    ok(lk_http_find(&x.req, LK_STRLIT("x-pulsar-listenername")) == NULL, "header stripped");
    ok(lk_http_find(&x.req, LK_STRLIT("Host")) != NULL, "other headers kept");
    lk_flt_detach_all(&x);
    lk_pool_free(&x.pool);
    subtest(NULL);
}

static void
test_select(void)
{
    char err[512];
    struct lk_conf *conf = load("client_listeners = vpn, my%listener\n");
    if (conf == NULL)
        return;
    ok(strcmp(conf->clusters[0]->filters[0].ops->name, "listener") == 0, "listener runs first");
    const char *lk = "/lookup/v2/topic/persistent/t/n/x";
    run(conf, lk, NULL, "external", lk);
    run(conf, "/lookup/v2/topic/persistent/t/n/x?listenerName=vpn", NULL, "vpn", lk);
    run(conf, lk, "vpn", "vpn", lk);
    /* the query wins over the header */
    run(conf, "/lookup/v2/topic/persistent/t/n/x?listenerName=vpn", "internal", "vpn", lk);
    /* an empty query value lets the header speak */
    run(conf, "/lookup/v2/topic/persistent/t/n/x?listenerName=", "vpn", "vpn", lk);
    /* unknown names fall back to lookupListenerName */
    run(conf, "/lookup/v2/topic/persistent/t/n/x?listenerName=nope", NULL, "external", lk);
    run(conf, lk, "nope", "external", lk);
    /* percent-decoding of the value */
    run(conf, "/x?listenerName=my%25listener", NULL, "my%listener", "/x");
    /* other parameters stay byte for byte, in order */
    run(conf, "/admin/v2/persistent/t/n/x/stats?a=%2F&listenerName=vpn&authoritative=false&b",
        NULL, "vpn", "/admin/v2/persistent/t/n/x/stats?a=%2F&authoritative=false&b");
    run(conf, "/x?listenerName=vpn&y=1", NULL, "vpn", "/x?y=1");
    run(conf, "/x?y=1&listenerName=vpn#frag", NULL, "vpn", "/x?y=1#frag");
    run(conf, "/x?listenerName=vpn&listenerName=external", NULL, "vpn", "/x");
    run(conf, "/x?listenerNameX=1&a=2", NULL, "external", "/x?listenerNameX=1&a=2");
    run(conf, "/x?a=1&&b=2", NULL, "external", "/x?a=1&&b=2");

    /* listed, but not every map listener is: internal and other are the
     * clients' to choose no more than before, and neither goes upstream */
    run(conf, "/x?listenerName=internal", NULL, "external", "/x");
    run(conf, "/x", "internal", "external", "/x");
    run(conf, "/x?listenerName=other", NULL, "external", "/x");
    run(conf, "/x?listenerName=Internal", NULL, "external", "/x");
    lk_conf_unref(conf);

    /* the default (issue 18 item 3): only the lookup listener is a
     * client's; the internal one never, by query or header */
    if ((conf = load("")) == NULL)
        return;
    run(conf, "/x?listenerName=internal", NULL, "external", "/x");
    run(conf, "/x", "internal", "external", "/x");
    run(conf, "/x?listenerName=internal", "internal", "external", "/x");
    run(conf, "/x?listenerName=vpn", NULL, "external", "/x");
    run(conf, "/x", "vpn", "external", "/x");
    run(conf, "/x?listenerName=external", "internal", "external", "/x");
    lk_conf_unref(conf);

    /* the internal listener, when the operator writes it */
    if ((conf = load("client_listeners = internal\n")) == NULL)
        return;
    run(conf, "/x?listenerName=internal", NULL, "internal", "/x");
    run(conf, "/x", "internal", "internal", "/x");
    run(conf, "/x?listenerName=vpn", NULL, "external", "/x");
    lk_conf_unref(conf);

    /* no lookupListenerName: nothing is selected unless the client names a
     * listener it may choose */
    static const char bare[] = "[pulsar p]\ninternalListenerName = internal\n"
                               "webServiceUrl = http://127.0.0.1:18080\n"
                               "client_listeners = vpn\n[broker p/b1]\n"
                               "advertisedListeners = internal:http://10.0.0.11:8080,"
                               "vpn:http://127.0.0.5:18081,other:http://127.0.0.6:18081\n";
    conf = lk_conf_load_buf("t.conf", bare, strlen(bare), err, sizeof(err));
    if (!ok(conf != NULL, "second config loads")) {
        lk_test_diag("%s", err);
        return;
    }
    run(conf, "/x?listenerName=vpn", NULL, "vpn", "/x");
    run(conf, "/x?listenerName=nope", NULL, NULL, "/x");
    run(conf, "/x?listenerName=other", NULL, NULL, "/x");
    run(conf, "/x?listenerName=internal", NULL, NULL, "/x");
    run(conf, "/x", NULL, NULL, "/x");
    lk_conf_unref(conf);
}

/* client_listeners in the config: each name a listener of the file's
 * brokers, once; refused with file:line otherwise, and in a Kafka cluster. */
static void
test_conf(void)
{
    static const struct {
        const char *extra, *want; /* want: NULL loads, else a part of the error */
    } cases[] = {
        {"client_listeners = vpn\n", NULL},
        {"client_listeners = vpn , other,internal\n", NULL},
        {"client_listeners = external\n", NULL},
        {"client_listeners = vnp\n", "t.conf:5: [pulsar prod] client_listeners: no broker has a "
                                       "listener 'vnp' (their listeners: internal, external, vpn"},
        {"client_listeners = vpn,vpn\n", "t.conf:5: [pulsar prod] client_listeners: 'vpn' is listed twice"},
        {"client_listeners =\n", "t.conf:5: [pulsar prod] client_listeners: empty listener name"},
        {"client_listeners = vpn,\n", "t.conf:5: [pulsar prod] client_listeners: empty listener name"},
        {"client_listeners = VPN\n", "no broker has a listener 'VPN'"},
    };
    char text[1024], err[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), conf_fmt, cases[i].extra);
        struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
        if (cases[i].want == NULL) {
            if (!ok(conf != NULL, "%s: loads", cases[i].extra))
                lk_test_diag("%s", err);
        } else if (ok(conf == NULL && strstr(err, cases[i].want) != NULL, "%s: refused",
                      cases[i].extra)) {
        } else {
            lk_test_diag("got: %s", conf == NULL ? err : "(loaded)");
        }
        lk_conf_unref(conf);
    }
    /* --check shows them, and says what listing the internal one means */
    snprintf(text, sizeof(text), conf_fmt, "client_listeners = vpn, internal\n");
    struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    char *dump = NULL;
    size_t dlen = 0;
    FILE *f = open_memstream(&dump, &dlen);
    if (ok(conf != NULL && f != NULL, "loads")) {
        lk_conf_dump(conf, f);
        fclose(f);
        ok(strstr(dump, ", client_listeners vpn,internal (the internal listener: clients may ask "
                        "for internal addresses),") != NULL,
           "--check shows client_listeners, the internal one marked");
        if (strstr(dump, "client_listeners") == NULL)
            lk_test_diag("%s", dump);
    }
    free(dump);
    lk_conf_unref(conf);
    static const char kafka[] = "[kafka k]\ninter.broker.listener.name = INTERNAL\n"
                                "lookupListenerName = EXTERNAL\nbootstrap.servers = 127.0.0.1:9093\n"
                                "client_listeners = EXTERNAL\n[broker k/1]\n"
                                "advertised.listeners = INTERNAL://10.0.0.21:9092,"
                                "EXTERNAL://127.0.0.1:9094\n";
    conf = lk_conf_load_buf("t.conf", kafka, strlen(kafka), err, sizeof(err));
    ok(conf == NULL && strstr(err, "t.conf:5: [kafka k] client_listeners: a [pulsar] key: Kafka "
                                   "clients cannot name a listener") != NULL,
       "client_listeners in a Kafka cluster: refused, saying why");
    lk_conf_unref(conf);
}

const struct lk_test_case lk_test_flt_listener[] = {
    {"listener/select", test_select},
    {"listener/conf", test_conf},
    {NULL, NULL},
};
