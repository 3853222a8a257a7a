/*
 * Tests for proxy/lk_stats.c and proxy/lk_access.c: what an exchange record
 * becomes in /metrics (and that its series outlive a runtime, as across a
 * reload), histogram buckets, and the access log's text and JSON lines.
 */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "lk_access.h"
#include "lk_broker.h"
#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_conn.h"
#include "lk_filter.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_test.h"
#include "lk_upstream.h"
#include "lk_xrec.h"

static const char conf_text[] = "[lookout]\n"
                                "log.access = off\n"
                                "[pulsar prod]\n"
                                "internalListenerName = internal\n"
                                "lookupListenerName = external\n"
                                "webServiceUrl = http://127.0.0.1:18080\n"
                                "[broker prod/b1]\n"
                                "advertisedListeners = internal:http://10.0.0.1:8080,"
                                "external:http://127.0.0.1:18081\n";

static struct lk_runtime *
runtime_new(void)
{
    char err[512];
    struct lk_conf *conf =
        lk_conf_load_buf("t.conf", conf_text, strlen(conf_text), err, sizeof(err));
    if (!ok(conf != NULL, "config loads: %s", conf == NULL ? err : ""))
        return NULL;
    struct lk_runtime *rt = calloc(1, sizeof(*rt));
    rt->conf = conf;
    rt->health = calloc(conf->nbrokers + 1, sizeof(*rt->health));
    rt->stats = lk_stats_runtime(conf);
    lk_xrec_init(); /* the filters' names, as lk_workers_start does */
    return rt;
}

static void
runtime_free(struct lk_runtime *rt)
{
    lk_stats_runtime_free(rt->stats, rt->conf);
    free(rt->health);
    lk_conf_unref(rt->conf);
    free(rt);
}

static size_t
filter_index(const char *name)
{
    size_t i = 0;
    while (strcmp(lk_flt_registry[i]->name, name) != 0)
        i++;
    return i;
}

/* A GET of `target` through c, answered 200 with two rewrites by lookup. */
static struct lk_xrec
http_rec(struct lk_conn *c, const char *target)
{
    struct lk_xrec r;

    memset(&r, 0, sizeof(r));
    r.c = c;
    r.cluster = c->conf->clusters[0];
    r.broker = "prod/b1";
    r.proto = LK_SP_HTTP;
    r.method = LK_STRLIT("GET");
    r.target = lk_str_c(target);
    r.status = 200;
    r.bytes_out = 54;
    r.bytes_upstream = 132;
    r.rewrites = 2;
    r.flt_rewrites[filter_index("lookup")] = 2;
    r.dur_us = 3400;
    r.upstream_us = 1200;
    return r;
}

static void
conn_init(struct lk_conn *c, struct lk_runtime *rt)
{
    memset(c, 0, sizeof(*c));
    c->rt = rt;
    c->conf = rt->conf;
    c->bind = rt->conf->binds[0];
    c->peer.family = AF_INET;
    memcpy(c->peer.ip, "\x7f\x00\x00\x01", 4);
    c->peer.port = 40312;
}

static int
has_line(const char *text, const char *line)
{
    const char *p = strstr(text, line);
    return p != NULL && (p == text || p[-1] == '\n') && p[strlen(line)] == '\n';
}

static void
test_record_counts(void)
{
    struct lk_runtime *rt = runtime_new(), *rt2 = NULL;
    struct evbuffer *out = evbuffer_new();
    struct lk_conn c;
    char err[256];

    if (rt == NULL)
        goto end;
    lk_access_configure(rt->conf, err, sizeof(err));
    conn_init(&c, rt);
    struct lk_xrec r = http_rec(&c, "/lookup/v2/topic/persistent/public/default/t1");
    lk_xrec_done(&r);
    r.status = 502;
    r.upstream_us = -1;
    r.dur_us = 20000000; /* past the last bound: +Inf only */
    lk_xrec_done(&r);
    lk_upstream_error(rt, rt->conf->brokers[0], lk_upstream_err_kind(lk_err_connect_timeout));
    lk_stats_write(out, lk_broker_write_health, rt, 7, 2, 1);
    evbuffer_add(out, "", 1);
    const char *t = (const char *)evbuffer_pullup(out, -1);
    ok(has_line(t, "lookout_exchanges_total{cluster=\"prod\",protocol=\"http\",status=\"2xx\"} 1"),
       "2xx: 1");
    ok(has_line(t, "lookout_exchanges_total{cluster=\"prod\",protocol=\"http\",status=\"5xx\"} 1"),
       "5xx: 1");
    ok(has_line(t, "lookout_rewrites_total{cluster=\"prod\",filter=\"lookup\"} 4"),
       "rewrites by lookup: 4");
    ok(has_line(t, "lookout_exchange_duration_seconds_bucket{cluster=\"prod\",protocol=\"http\",le="
                   "\"0.0025\"} 0"),
       "3.4 ms is not under 2.5 ms");
    ok(has_line(t, "lookout_exchange_duration_seconds_bucket{cluster=\"prod\",protocol=\"http\",le="
                   "\"0.005\"} 1"),
       "... but under 5 ms");
    ok(has_line(t, "lookout_exchange_duration_seconds_bucket{cluster=\"prod\",protocol=\"http\",le="
                   "\"10\"} 1"),
       "20 s is past 10 s");
    ok(has_line(t, "lookout_exchange_duration_seconds_bucket{cluster=\"prod\",protocol=\"http\",le="
                   "\"+Inf\"} 2"),
       "+Inf: both");
    ok(has_line(
           t,
           "lookout_exchange_duration_seconds_sum{cluster=\"prod\",protocol=\"http\"} 20.003400"),
       "sum in seconds");
    ok(has_line(t, "lookout_upstream_response_seconds_count{cluster=\"prod\",protocol=\"http\"} 1"),
       "upstream time only when there was one");
    ok(has_line(t, "lookout_upstream_errors_total{broker=\"prod/b1\",kind=\"timeout\"} 1"),
       "a connect timeout");
    ok(has_line(t, "lookout_broker_up{broker=\"prod/b1\"} 1"), "broker up");
    ok(has_line(t, "lookout_config_generation 7"), "generation");
    ok(has_line(t, "lookout_reloads_total{result=\"failed\"} 1"), "reloads failed");

    /* A reload: a new config and runtime, the same names, the same series. */
    rt2 = runtime_new();
    if (rt2 == NULL)
        goto end;
    conn_init(&c, rt2);
    r = http_rec(&c, "/x");
    lk_xrec_done(&r);
    evbuffer_drain(out, evbuffer_get_length(out));
    lk_stats_write(out, lk_broker_write_health, rt2, 8, 3, 1);
    evbuffer_add(out, "", 1);
    t = (const char *)evbuffer_pullup(out, -1);
    ok(has_line(t, "lookout_exchanges_total{cluster=\"prod\",protocol=\"http\",status=\"2xx\"} 2"),
       "after a reload the count goes on: 2");
end:
    evbuffer_free(out);
    if (rt2 != NULL)
        runtime_free(rt2);
    if (rt != NULL)
        runtime_free(rt);
    lk_access_close();
    lk_stats_free();
}

static void
test_access_lines(void)
{
    struct lk_runtime *rt = runtime_new();
    struct lk_conn c;
    char line[4096];
    json_error_t jerr;
    json_t *j = NULL;

    if (rt == NULL)
        goto end;
    conn_init(&c, rt);
    char peer[LK_ADDR_TEXT];
    lk_addr_text(&c.peer, 1, peer);
    const struct lk_access_who who = {peer, c.bind->text, c.conf, NULL};
    struct lk_xrec r = http_rec(&c, "/a\"b\x01\xff");
    lk_access_format(&r, &who, 0, "", line, sizeof(line));
    const char *body = strchr(line, ' ');
    ok_str(
        body,
        " 127.0.0.1:40312 > 127.0.0.1:18081 http \"GET /a\"b..\" prod/b1 200 132 bytes from "
        "broker, "
        "54 bytes to client, 2 rewrites, 0 leaks, 0 hops, 0 bytes from client, 3 ms, broker 1 ms, "
        "rewritten by lookup=2\n",
        "text: every field, untrusted bytes made '.'");
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    j = json_loads(line, 0, &jerr);
    if (!ok(j != NULL, "JSON: parses (%s)", j == NULL ? jerr.text : ""))
        goto end;
    ok_str(json_string_value(json_object_get(j, "path")), "/a\"b\x01\xc3\xbf",
           "JSON: the path, quotes and control bytes escaped (and 0xff as U+00FF)");
    ok(json_integer_value(json_object_get(json_object_get(j, "filters"), "lookup")) == 2,
       "JSON: rewrites by filter");
    ok(json_real_value(json_object_get(j, "duration_ms")) == 3.4, "JSON: duration in ms");
    ok(json_object_get(j, "client_cert") == NULL, "JSON: no client certificate, no field");
    json_decref(j);
    j = NULL;

    /* a verified client certificate's subject (OpenSSL's RFC 2253 text,
     * which escapes '"' and '\\' itself) */
    const struct lk_access_who who_cert = {peer, c.bind->text, c.conf,
                                           "CN=client \\\"alice\\\",O=lookout tests"};
    lk_access_format(&r, &who_cert, 0, "", line, sizeof(line));
    ok(strstr(line, ", rewritten by lookup=2, client certificate \"CN=client \\\"alice\\\",O=lookout "
                    "tests\"\n") != NULL,
       "text: the client certificate last: %s", line);
    lk_access_format(&r, &who_cert, 1, "", line, sizeof(line));
    j = json_loads(line, 0, &jerr);
    if (!ok(j != NULL, "JSON with a certificate: parses (%s)", j == NULL ? jerr.text : ""))
        goto end;
    ok_str(json_string_value(json_object_get(j, "client_cert")),
           "CN=client \\\"alice\\\",O=lookout tests", "JSON: client_cert, the subject");
    json_decref(j);

    memset(&r, 0, sizeof(r));
    r.c = &c;
    r.proto = LK_SP_KAFKA;
    r.api_key = 3;
    r.api_version = 12;
    r.bytes_in = 40;
    r.bytes_out = 300;
    r.upstream_us = -1;
    lk_access_format(&r, &who, 0, "[info] ", line, sizeof(line));
    ok(strstr(line, "Z [info] 127.0.0.1:40312 > 127.0.0.1:18081 kafka \"Metadata v12\" - - 300 "
                    "bytes to client, 0 rewrites, 0 leaks, 40 bytes from client, 0 ms\n") != NULL,
       "text, Kafka: the api by name and version: %s", line);
    /* the leak guard's block: the answer went nowhere, and the line says so */
    r.bytes_out = 0;
    r.leaks = 1;
    r.refused = 1;
    lk_access_format(&r, &who, 0, "", line, sizeof(line));
    ok(strstr(line, "\"Metadata v12\" - - 0 bytes to client, 0 rewrites, 1 leaks, refused: "
                    "connection closed, 40 bytes from client") != NULL,
       "text, a refused answer: %s", line);
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    j = json_loads(line, 0, &jerr);
    ok(j != NULL && json_is_true(json_object_get(j, "refused")) &&
           json_integer_value(json_object_get(j, "leaks")) == 1,
       "JSON, a refused answer: %s", line);
    json_decref(j);
    j = NULL;
    r.refused = 0;
    r.summary = 1;
    r.frames_in = 4;
    r.frames_out = 3;
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    j = json_loads(line, 0, &jerr);
    ok(j != NULL && strcmp(json_string_value(json_object_get(j, "event")), "connection") == 0 &&
           json_integer_value(json_object_get(j, "frames_out")) == 3,
       "JSON, a connection's closing line: %s", line);
end:
    json_decref(j);
    if (rt != NULL)
        runtime_free(rt);
    lk_stats_free();
}

const struct lk_test_case lk_test_stats[] = {
    {"stats/record_counts", test_record_counts},
    {"stats/access_lines", test_access_lines},
    {NULL, NULL},
};
