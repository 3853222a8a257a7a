/*
 * Tests for filters/flt_lookup.c (and proxy/lk_lookup.c, lk_inflate.c),
 * driven through the chain runner as the
 * HTTP engine drives it: a config with the lookup filter, an exchange, the
 * request head, the response head, then the body in pieces.  The bodies are
 * the LookupData that 2.x, 4.x and 5.0 brokers send (facts/pulsar.md §1).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <zlib.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_lookup.h"
#include "lk_test.h"
#include "lk_xchg.h"

/* b1 has every scheme on both listeners and a "partner" listener with http
 * only; b2's external listener is http only; b3 is the 2.x standalone of
 * the captured body (localhost), external over TLS only. */
static const char conf_text[] =
    "[lookout]\n"
    "tls.certificate = edge.crt\n"
    "tls.key = edge.key\n"
    "max_buffer_bytes = 4k\n"
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "webServiceUrl = http://127.0.0.1:18000\n"
    "%s"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:pulsar+ssl://10.0.0.11:6651,"
    "internal:http://10.0.0.11:8080,internal:https://10.0.0.11:8443,"
    "external:pulsar://127.0.0.1:16650,external:pulsar+ssl://127.0.0.1:16651,"
    "external:http://127.0.0.1:18081,external:https://127.0.0.1:18443,"
    "partner:http://127.0.0.9:18089\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:pulsar://broker-2.pulsar.svc.cluster.local:6650,"
    "internal:http://broker-2.pulsar.svc.cluster.local:8080,external:http://127.0.0.2:18082\n"
    "[broker prod/b3]\n"
    "advertisedListeners = internal:pulsar://localhost:6650,internal:http://localhost:18080,"
    "external:pulsar+ssl://127.0.0.3:16651,external:https://127.0.0.3:18443\n";

#define LOOKUP_PATH "/lookup/v2/topic/persistent/public/default/my-topic"
#define B1_EXT                                                                                     \
    "\"brokerUrl\":\"pulsar://127.0.0.1:16650\","                                                  \
    "\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\","                                           \
    "\"httpUrl\":\"http://127.0.0.1:18081\",\"httpUrlTls\":\"https://127.0.0.1:18443\","           \
    "\"nativeUrl\":\"pulsar://127.0.0.1:16650\""

struct fx {
    struct lk_conf *conf;
    struct lk_xchg x;
};

/* Loads the config (with `chain`, a "filters = ..." line or "") and starts
 * an exchange for target with listener selected.  0, or -1 (reported). */
static int
setup_chain(struct fx *fx, const char *chain, const char *listener, const char *target)
{
    char text[4096], err[512];

    memset(fx, 0, sizeof(*fx));
    snprintf(text, sizeof(text), conf_text, chain);
    fx->conf = lk_conf_load_buf("test.conf", text, strlen(text), err, sizeof(err));
    if (!ok(fx->conf != NULL, "test config loads")) {
        lk_test_diag("%s", err);
        return -1;
    }
    lk_pool_init(&fx->x.pool);
    fx->x.conf = fx->conf;
    fx->x.cluster = fx->conf->clusters[0];
    fx->x.broker = fx->x.cluster->brokers[0];
    fx->x.listener_name = listener;
    lk_http_msg_init(&fx->x.req, &fx->x.pool, 1);
    lk_http_msg_init(&fx->x.res, &fx->x.pool, 0);
    fx->x.req.method = LK_STRLIT("GET");
    fx->x.req.target = lk_pstr(&fx->x.pool, target, strlen(target));
    fx->x.req.http_major = fx->x.req.http_minor = 1;
    lk_flt_attach_all(&fx->x);
    return 0;
}

static int
setup(struct fx *fx, const char *listener, const char *target)
{
    return setup_chain(fx, "filters = lookup\n", listener, target);
}

static void
teardown(struct fx *fx)
{
    if (fx->conf == NULL)
        return;
    lk_flt_detach_all(&fx->x);
    lk_pool_free(&fx->x.pool);
    lk_conf_unref(fx->conf);
    fx->conf = NULL;
}

#define OTHER_JSON_PATH "/admin/v2/persistent/public/default/my-topic/stats"

/* The body verdict respond() expects (a test that expects a 502 sets it,
 * and sets it back), and the one it got. */
static enum lk_flt_verdict want_verdict = LK_FLT_CONTINUE, got_verdict;

/*
 * Answers the exchange: status, Content-Type ct and Content-Encoding ce
 * (NULL: none), then body in pieces of at most `piece` bytes, as the engine
 * does (the runner only when a filter asked for the body), until the runner
 * says other than continue (got_verdict).  Returns what the client would
 * get, in a new evbuffer.
 */
static struct evbuffer *
respond(struct fx *fx, int status, const char *ct, const char *ce, const void *body, size_t len,
        size_t piece)
{
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    struct lk_http_msg *res = &fx->x.res;
    size_t off = 0;

    res->status = status;
    res->http_major = res->http_minor = 1;
    if (ct != NULL)
        lk_http_add(res, LK_STRLIT("Content-Type"), lk_str_c(ct));
    if (ce != NULL)
        lk_http_add(res, LK_STRLIT("Content-Encoding"), lk_str_c(ce));
    ok(lk_flt_run_res_headers(&fx->x) == LK_FLT_CONTINUE, "response head: continue");
    got_verdict = LK_FLT_CONTINUE;
    do {
        size_t n = len - off < piece ? len - off : piece;
        evbuffer_add(in, (const char *)body + off, n);
        off += n;
        if (fx->x.body_filters != 0) {
            got_verdict = lk_flt_run_res_body(&fx->x, in, out, off == len);
            if (got_verdict != want_verdict && got_verdict != LK_FLT_CONTINUE)
                ok(0, "body verdict %d", (int)got_verdict);
        } else {
            evbuffer_add_buffer(out, in);
        }
    } while (off < len && got_verdict == LK_FLT_CONTINUE);
    evbuffer_free(in);
    return out;
}

/* The evbuffer's bytes as a NUL-terminated string (static), for ok_str. */
static const char *
text(struct evbuffer *b)
{
    static char buf[16384];
    size_t n = evbuffer_get_length(b);
    if (n >= sizeof(buf))
        n = sizeof(buf) - 1;
    evbuffer_copyout(b, buf, n);
    buf[n] = '\0';
    return buf;
}

static int
same_bytes(struct evbuffer *b, const void *want, size_t len)
{
    return evbuffer_get_length(b) == len &&
           (len == 0 || memcmp(evbuffer_pullup(b, -1), want, len) == 0);
}

static const char *
header(struct fx *fx, const char *name)
{
    static char buf[512];
    struct lk_str *v = lk_http_find(&fx->x.res, lk_str_c(name));
    if (v == NULL)
        return NULL;
    snprintf(buf, sizeof(buf), "%.*s", (int)v->len, v->p);
    return buf;
}

/* gzip (RFC 1952) of data, into a malloc'd buffer; *outlen gets its size. */
static unsigned char *
gzip(const char *data, size_t len, size_t *outlen)
{
    z_stream z;
    size_t cap = deflateBound(NULL, len) + 64;
    unsigned char *buf = malloc(cap);

    memset(&z, 0, sizeof(z));
    if (buf == NULL || deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                                    Z_DEFAULT_STRATEGY) != Z_OK) {
        free(buf);
        return NULL;
    }
    z.next_in = (unsigned char *)data;
    z.avail_in = (uInt)len;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    int zr = deflate(&z, Z_FINISH);
    *outlen = cap - z.avail_out;
    deflateEnd(&z);
    if (zr != Z_STREAM_END) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Body rewrites, table-driven ------------------------------------------- */

static const struct body_case {
    const char *what;
    const char *listener;
    const char *in;
    const char *want; /* NULL: passed through byte for byte */
} body_cases[] = {
    /* 2.x without TLS: the shape of the body a public client captured
     * (brokerUrlSsl always "", TLS fields omitted by Include.NON_NULL) */
    {"2.x captured, standalone: TLS-only listener", "external",
     "{\"brokerUrl\":\"pulsar://localhost:6650\",\"httpUrl\":\"http://localhost:18080\","
     "\"nativeUrl\":\"pulsar://localhost:6650\",\"brokerUrlSsl\":\"\"}",
     "{\"brokerUrlSsl\":\"\",\"brokerUrlTls\":\"pulsar+ssl://127.0.0.3:16651\","
     "\"httpUrlTls\":\"https://127.0.0.3:18443\"}"},
    {"2.x without TLS: TLS fields added", "external",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":\"http://10.0.0.11:8080\","
     "\"nativeUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlSsl\":\"\"}",
     "{\"brokerUrl\":\"pulsar://127.0.0.1:16650\",\"httpUrl\":\"http://127.0.0.1:18081\","
     "\"nativeUrl\":\"pulsar://127.0.0.1:16650\",\"brokerUrlSsl\":\"\","
     "\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\","
     "\"httpUrlTls\":\"https://127.0.0.1:18443\"}"},
    {"2.x with null TLS fields: set in place", "external",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlTls\":null,"
     "\"httpUrl\":\"http://10.0.0.11:8080\",\"httpUrlTls\":null,"
     "\"nativeUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlSsl\":\"\"}",
     "{" B1_EXT ",\"brokerUrlSsl\":\"\"}"},
    {"2.x with null TLS fields, http-only listener: nulls and pulsar fields removed", "external",
     "{\"brokerUrl\":\"pulsar://broker-2.pulsar.svc.cluster.local:6650\",\"brokerUrlTls\":null,"
     "\"httpUrl\":\"http://broker-2.pulsar.svc.cluster.local:8080\",\"httpUrlTls\":null,"
     "\"nativeUrl\":\"pulsar://broker-2.pulsar.svc.cluster.local:6650\",\"brokerUrlSsl\":\"\"}",
     "{\"httpUrl\":\"http://127.0.0.2:18082\",\"brokerUrlSsl\":\"\"}"},
    {"4.x with TLS", "external",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlTls\":\"pulsar+ssl://10.0.0.11:6651\","
     "\"httpUrl\":\"http://10.0.0.11:8080\",\"httpUrlTls\":\"https://10.0.0.11:8443\","
     "\"nativeUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlSsl\":\"\"}",
     "{" B1_EXT ",\"brokerUrlSsl\":\"\"}"},
    {"4.x pretty-printed: the layout kept", "external",
     "{\n  \"brokerUrl\" : \"pulsar://10.0.0.11:6650\",\n"
     "  \"brokerUrlTls\" : \"pulsar+ssl://10.0.0.11:6651\",\n"
     "  \"httpUrl\" : \"http://10.0.0.11:8080\",\n  \"httpUrlTls\" : \"https://10.0.0.11:8443\",\n"
     "  \"nativeUrl\" : \"pulsar://10.0.0.11:6650\",\n  \"brokerUrlSsl\" : \"\"\n}\n",
     "{\n  \"brokerUrl\" : \"pulsar://127.0.0.1:16650\",\n"
     "  \"brokerUrlTls\" : \"pulsar+ssl://127.0.0.1:16651\",\n"
     "  \"httpUrl\" : \"http://127.0.0.1:18081\",\n  \"httpUrlTls\" : "
     "\"https://127.0.0.1:18443\",\n"
     "  \"nativeUrl\" : \"pulsar://127.0.0.1:16650\",\n  \"brokerUrlSsl\" : \"\"\n}\n"},
    {"5.0 with brokerId (schema order)", "external",
     "{\"brokerId\":\"10.0.0.11:8080\",\"brokerUrl\":\"pulsar://10.0.0.11:6650\","
     "\"brokerUrlSsl\":\"\",\"brokerUrlTls\":\"pulsar+ssl://10.0.0.11:6651\","
     "\"httpUrl\":\"http://10.0.0.11:8080\",\"httpUrlTls\":\"https://10.0.0.11:8443\","
     "\"nativeUrl\":\"pulsar://10.0.0.11:6650\"}",
     "{\"brokerId\":\"10.0.0.11:8080\",\"brokerUrl\":\"pulsar://127.0.0.1:16650\","
     "\"brokerUrlSsl\":\"\",\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\","
     "\"httpUrl\":\"http://127.0.0.1:18081\",\"httpUrlTls\":\"https://127.0.0.1:18443\","
     "\"nativeUrl\":\"pulsar://127.0.0.1:16650\"}"},
    {"identified by httpUrl alone", "external",
     "{\"httpUrl\":\"http://broker-2.pulsar.svc.cluster.local:8080\"}",
     "{\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"identified by brokerUrlTls alone: the rest added in field order", "external",
     "{\"brokerUrlTls\":\"pulsar+ssl://10.0.0.11:6651\"}",
     "{\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\","
     "\"brokerUrl\":\"pulsar://127.0.0.1:16650\","
     "\"httpUrl\":\"http://127.0.0.1:18081\",\"httpUrlTls\":\"https://127.0.0.1:18443\","
     "\"nativeUrl\":\"pulsar://127.0.0.1:16650\"}"},
    {"host matched case-insensitively", "external",
     "{\"httpUrl\":\"http://Broker-2.Pulsar.SVC.cluster.local:8080\"}",
     "{\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"the first URL that names a broker wins over unknown ones", "external",
     "{\"brokerUrl\":\"pulsar://10.9.9.9:6650\",\"httpUrlTls\":\"https://10.0.0.11:8443\"}",
     "{\"brokerUrl\":\"pulsar://127.0.0.1:16650\",\"httpUrlTls\":\"https://127.0.0.1:18443\","
     "\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\",\"httpUrl\":\"http://127.0.0.1:18081\","
     "\"nativeUrl\":\"pulsar://127.0.0.1:16650\"}"},
    {"unknown fields and key order kept, other values untouched", "external",
     "{\"zeta\":1,\"httpUrl\":\"http://10.0.0.11:8080\",\"alpha\":{\"nested\":[1,true,null,\"x\"]},"
     "\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlSsl\":\"\","
     "\"extra\":\"pulsar://10.0.0.11:6650\"}",
     "{\"zeta\":1,\"httpUrl\":\"http://127.0.0.1:18081\","
     "\"alpha\":{\"nested\":[1,true,null,\"x\"]},"
     "\"brokerUrl\":\"pulsar://127.0.0.1:16650\",\"brokerUrlSsl\":\"\","
     "\"extra\":\"pulsar://10.0.0.11:6650\",\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\","
     "\"httpUrlTls\":\"https://127.0.0.1:18443\",\"nativeUrl\":\"pulsar://127.0.0.1:16650\"}"},
    {"a listener named by the client (http only): pulsar and TLS fields removed", "partner",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlTls\":\"pulsar+ssl://10.0.0.11:6651\","
     "\"httpUrl\":\"http://10.0.0.11:8080\",\"httpUrlTls\":\"https://10.0.0.11:8443\","
     "\"nativeUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlSsl\":\"\"}",
     "{\"httpUrl\":\"http://127.0.0.9:18089\",\"brokerUrlSsl\":\"\"}"},
    /* passed through byte for byte */
    /* never its internal address: its lookup listener's (external, http only) */
    {"the broker lacks the selected listener", "partner",
     "{\"httpUrl\":\"http://broker-2.pulsar.svc.cluster.local:8080\"}",
     "{\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"already the listener's addresses (spacing kept)", "external",
     "{ \"httpUrl\": \"http://127.0.0.2:18082\" }", NULL},
    {"unknown broker", "external",
     "{\"brokerUrl\":\"pulsar://10.9.9.9:6650\",\"httpUrl\":\"http://10.9.9.9:8080\"}", NULL},
    {"error body", "external", "{\"reason\":\"Topic not found persistent://t/n/x\"}", NULL},
    {"a list of internal addresses (the leak guard's job)", "external",
     "[\"10.0.0.11:8080\",\"broker-2.pulsar.svc.cluster.local:8080\"]", NULL},
    {"mapped URL outside LookupData's fields", "external",
     "{\"webServiceUrl\":\"http://10.0.0.11:8080\"}", NULL},
    {"LookupData fields that are not strings", "external",
     "{\"brokerUrl\":6650,\"httpUrl\":[\"http://10.0.0.11:8080\"]}", NULL},
    {"relative URL", "external", "{\"httpUrl\":\"/admin/v2\"}", NULL},
    {"truncated JSON", "external", "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"", NULL},
    {"trailing garbage", "external", "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"} x", NULL},
    {"two documents", "external",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"}{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"}",
     NULL},
    {"not JSON", "external", "pulsar://10.0.0.11:6650", NULL},
    {"a bundle range string", "external", "\"0x00000000_0x40000000\"", NULL},
};

static void
test_bodies(void)
{
    for (size_t i = 0; i < sizeof(body_cases) / sizeof(body_cases[0]); i++) {
        const struct body_case *c = &body_cases[i];
        struct fx fx;
        subtest("%s", c->what);
        if (setup(&fx, c->listener, LOOKUP_PATH "?authoritative=false") != 0)
            return;
        /* in pieces of 7 bytes: the runner must hand over the whole body */
        struct evbuffer *out = respond(&fx, 200, "application/json", NULL, c->in, strlen(c->in), 7);
        ok(fx.x.body_filters == 1, "the body is buffered");
        ok_str(text(out), c->want != NULL ? c->want : c->in, "body");
        ok(fx.x.rewrites == (c->want != NULL), "rewrites counted: %u", fx.x.rewrites);
        ok(fx.x.body_overflows == 0, "no overflow");
        evbuffer_free(out);
        teardown(&fx);
    }
    subtest(NULL);
}

/* The two paths side by side ------------------------------------------- */

#define B2_INT "broker-2.pulsar.svc.cluster.local"
#define B1_ADDED                                                                                   \
    "\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\",\"httpUrl\":\"http://127.0.0.1:18081\","    \
    "\"httpUrlTls\":\"https://127.0.0.1:18443\",\"nativeUrl\":\"pulsar://127.0.0.1:16650\""

#define NUL_BODY "{ \"httpUrl\" : \"http://" B2_INT ":8080\", \"n\" : 1\0}"

/* Bodies whose rewrite tells the splice from jansson's compact dump: the
 * splice keeps the broker's bytes around what it changes. */
static const struct splice_case {
    const char *what;
    const char *listener;
    const char *in;
    size_t len;       /* 0: strlen(in) */
    int spliced;      /* 1: the splice answers; 0: it hands the body to jansson */
    const char *want; /* what the client gets; NULL: the body as it came */
} splice_cases[] = {
    /* cutting members out: the comma goes with them */
    {"first member cut", "external",
     "{ \"brokerUrl\" : \"pulsar://" B2_INT ":6650\" ,\n \"httpUrl\" : \"http://" B2_INT
     ":8080\" }",
     0, 1, "{ \"httpUrl\" : \"http://127.0.0.2:18082\" }"},
    {"middle member cut", "external",
     "{\"httpUrl\":\"http://" B2_INT ":8080\", \"nativeUrl\":\"pulsar://" B2_INT
     ":6650\" ,\"x\":1}",
     0, 1, "{\"httpUrl\":\"http://127.0.0.2:18082\" ,\"x\":1}"},
    {"last member cut", "external",
     "{\"x\":1 , \"httpUrl\":\"http://" B2_INT ":8080\" , \"brokerUrl\":\"pulsar://" B2_INT
     ":6650\"\n}",
     0, 1, "{\"x\":1 , \"httpUrl\":\"http://127.0.0.2:18082\"\n}"},
    {"consecutive members cut, nulls among them", "external",
     "{\"a\":1,\"brokerUrl\":\"pulsar://" B2_INT
     ":6650\",\"brokerUrlTls\":null,\"httpUrl\":\"http://" B2_INT
     ":8080\",\"httpUrlTls\":null,\"nativeUrl\":\"pulsar://" B2_INT ":6650\",\"z\":2}",
     0, 1, "{\"a\":1,\"httpUrl\":\"http://127.0.0.2:18082\",\"z\":2}"},
    {"first two cut", "external",
     "{\"brokerUrl\":\"pulsar://" B2_INT ":6650\",\"nativeUrl\":\"x\",\"httpUrl\":\"http://" B2_INT
     ":8080\"}",
     0, 1, "{\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"every member cut, then the listener's added into the emptied object", "external",
     "{ \"brokerUrl\" : \"pulsar://localhost:6650\" ,\n\"httpUrl\":\"http://localhost:18080\" }", 0,
     1,
     "{ "
     "\"brokerUrlTls\":\"pulsar+ssl://127.0.0.3:16651\",\"httpUrlTls\":\"https://127.0.0.3:18443\" "
     "}"},
    /* appending */
    {"members appended after the last, before the space and the brace", "external",
     "{\n  \"brokerUrl\" : \"pulsar://10.0.0.11:6650\"\n}\n", 0, 1,
     "{\n  \"brokerUrl\" : \"pulsar://127.0.0.1:16650\"," B1_ADDED "\n}\n"},
    {"appended after an unrelated last member", "external",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerId\":\"10.0.0.11:8080\"}", 0, 1,
     "{\"brokerUrl\":\"pulsar://127.0.0.1:16650\",\"brokerId\":\"10.0.0.11:8080\"," B1_ADDED "}"},
    /* escapes */
    {"escaped key: found, kept as written", "external",
     "{\"broker\\u0055rl\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":null}", 0, 1,
     "{\"broker\\u0055rl\":\"pulsar://127.0.0.1:16650\",\"httpUrl\":\"http://127.0.0.1:18081\","
     "\"brokerUrlTls\":\"pulsar+ssl://127.0.0.1:16651\",\"httpUrlTls\":\"https://127.0.0.1:18443\","
     "\"nativeUrl\":\"pulsar://127.0.0.1:16650\"}"},
    {"escaped keys alone: no \"Url\" in the bytes, not looked at", "external",
     "{\"broker\\u0055rl\":\"pulsar://10.0.0.11:6650\"}", 0, 1, NULL},
    {"escaped value: decoded before matching", "external",
     "{\"httpUrl\":\"http:\\/\\/" B2_INT ":8080\",\"note\":\"a\\\"b\\u00e9\\n\"}", 0, 1,
     "{\"httpUrl\":\"http://127.0.0.2:18082\",\"note\":\"a\\\"b\\u00e9\\n\"}"},
    {"escaped value already the listener's: bytes kept", "external",
     "{\"httpUrl\":\"http:\\/\\/127.0.0.2:18082\"}", 0, 1, NULL},
    {"escaped key naming no field", "external",
     "{\"brokerUrl\\u0058\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":\"http://" B2_INT ":8080\"}", 0,
     1,
     "{\"brokerUrl\\u0058\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"UTF-8 in other members kept", "external",
     "{\"n\\u00e4me\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\",\"httpUrl\":\"http://" B2_INT ":8080\"}", 0,
     1, "{\"n\\u00e4me\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\",\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    /* nesting and layout */
    {"nested objects and arrays: their address-named members untouched", "external",
     "{\"alpha\":{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":[1,{\"y\":\"}\"}]},"
     "\"httpUrl\":\"http://" B2_INT ":8080\",\"omega\":[[],{},[{\"nativeUrl\":null}]]}",
     0, 1,
     "{\"alpha\":{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":[1,{\"y\":\"}\"}]},"
     "\"httpUrl\":\"http://127.0.0.2:18082\",\"omega\":[[],{},[{\"nativeUrl\":null}]]}"},
    {"whitespace everywhere", "external",
     "\r\n\t{ \"x\"\t:\r\n[ 1 ,\t2e3 , -0.5 ] ,\n\"httpUrl\"  :\t\"http://" B2_INT
     ":8080\"\r\n}\n\n",
     0, 1,
     "\r\n\t{ \"x\"\t:\r\n[ 1 ,\t2e3 , -0.5 ] ,\n\"httpUrl\"  "
     ":\t\"http://127.0.0.2:18082\"\r\n}\n\n"},
    {"a repeated key that is no field: both kept", "external",
     "{\"x\":1,\"x\":2,\"httpUrl\":\"http://" B2_INT ":8080\"}", 0, 1,
     "{\"x\":1,\"x\":2,\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"fields of other types cut", "external",
     "{\"httpUrl\":\"http://" B2_INT ":8080\",\"brokerUrlTls\":{\"a\":[1]},\"brokerUrl\":7}", 0, 1,
     "{\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"fields of other types replaced in place", "external",
     "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"httpUrl\":{\"a\":[1]},\"nativeUrl\":7,"
     "\"brokerUrlTls\":null, \"httpUrlTls\" :false}",
     0, 1,
     "{\"brokerUrl\":\"pulsar://127.0.0.1:16650\",\"httpUrl\":\"http://127.0.0.1:18081\","
     "\"nativeUrl\":\"pulsar://127.0.0.1:16650\",\"brokerUrlTls\":\"pulsar+ssl://"
     "127.0.0.1:16651\", "
     "\"httpUrlTls\" :\"https://127.0.0.1:18443\"}"},
    /* what the splice hands to jansson: compact out */
    {"a repeated field (the last one counts)", "external",
     "{ \"brokerUrl\" : \"pulsar://10.9.9.9:6650\", \"brokerUrl\" : \"pulsar://10.0.0.11:6650\" }",
     0, 0, "{\"brokerUrl\":\"pulsar://127.0.0.1:16650\"," B1_ADDED "}"},
    {"a field repeated by an escaped key", "external",
     "{ \"httpUrl\" : 1, \"http\\u0055rl\" : \"http://" B2_INT ":8080\" }", 0, 0,
     "{\"httpUrl\":\"http://127.0.0.2:18082\"}"},
    {"a NUL byte after a number (jansson skips it)", "external", NUL_BODY, sizeof(NUL_BODY) - 1, 0,
     "{\"httpUrl\":\"http://127.0.0.2:18082\",\"n\":1}"},
    /* invalid JSON, refused by both: the body as it came */
    {"a bad escape", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"x\":\"\\q\"}", 0, 1,
     NULL},
    {"a lone surrogate", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\\uD800\"}", 0, 1, NULL},
    {"\\u0000 in a value", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"x\":\"\\u0000\"}",
     0, 1, NULL},
    {"\\u0000 in a key", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"\\u0000\":1}", 0, 1,
     NULL},
    {"invalid UTF-8", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"x\":\"\xc0\xaf\"}", 0,
     1, NULL},
    {"a surrogate in UTF-8", "external",
     "{\"httpUrl\":\"http://" B2_INT ":8080\",\"x\":\"\xed\xa0\x80\"}", 0, 1, NULL},
    {"a raw control character", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\t\"}", 0, 1,
     NULL},
    {"an integer out of range", "external",
     "{\"httpUrl\":\"http://" B2_INT ":8080\",\"n\":9223372036854775808}", 0, 1, NULL},
    {"a real out of range", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"n\":-1e999}", 0,
     1, NULL},
    {"a leading zero", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"n\":012}", 0, 1,
     NULL},
    {"a trailing comma", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",}", 0, 1, NULL},
    {"single quotes", "external", "{'httpUrl':'http://" B2_INT ":8080'}", 0, 1, NULL},
    {"a bare word", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"n\":nil}", 0, 1, NULL},
    {"a missing colon", "external", "{\"httpUrl\" \"http://" B2_INT ":8080\"}", 0, 1, NULL},
    {"unbalanced", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\",\"a\":[}", 0, 1, NULL},
    {"garbage after", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\"}\n,", 0, 1, NULL},
    {"a form feed as space", "external", "{\"httpUrl\":\"http://" B2_INT ":8080\"}\f", 0, 1, NULL},
};

/* Runs body through lk_lookup_rewrite by `path`: the rc, and the output in
 * a new evbuffer. */
static int
run_path(struct fx *fx, const char *body, size_t len, enum lk_lookup_path path,
         struct evbuffer **out)
{
    *out = evbuffer_new();
    return lk_lookup_rewrite(fx->x.cluster, fx->x.listener_name, body, len, path, *out, NULL);
}

/* Whether both are JSON texts of equal values. */
static int
json_same(struct evbuffer *a, struct evbuffer *b)
{
    json_t *ja = json_loadb((const char *)evbuffer_pullup(a, -1), evbuffer_get_length(a), 0, NULL);
    json_t *jb = json_loadb((const char *)evbuffer_pullup(b, -1), evbuffer_get_length(b), 0, NULL);
    int same = ja != NULL && jb != NULL && json_equal(ja, jb);

    json_decref(ja);
    json_decref(jb);
    return same;
}

/* The splice's answer against jansson's for body: the same rc, and a new
 * body that jansson reads as the same value; or the splice declines. */
static void
paths_agree(struct fx *fx, const char *body, size_t len, int spliced)
{
    struct evbuffer *s, *j;
    int rs = run_path(fx, body, len, LK_LOOKUP_SPLICE, &s);
    int rj = run_path(fx, body, len, LK_LOOKUP_JANSSON, &j);

    ok((rs != LK_LOOKUP_DECLINED) == spliced, "%s (rc %d)", spliced ? "spliced" : "declined", rs);
    if (rs != LK_LOOKUP_DECLINED) {
        ok(rs == rj, "the same answer as jansson (%d, %d)", rs, rj);
        if (rs == LK_LOOKUP_NEW && rj == LK_LOOKUP_NEW)
            ok(json_same(s, j), "the same value as jansson's: %s", text(s));
        else
            ok(evbuffer_get_length(s) == 0, "no output");
    }
    evbuffer_free(s);
    evbuffer_free(j);
}

static void
test_splice(void)
{
    for (size_t i = 0; i < sizeof(splice_cases) / sizeof(splice_cases[0]); i++) {
        const struct splice_case *c = &splice_cases[i];
        size_t len = c->len != 0 ? c->len : strlen(c->in);
        struct fx fx;
        subtest("%s", c->what);
        if (setup(&fx, c->listener, LOOKUP_PATH) != 0)
            return;
        paths_agree(&fx, c->in, len, c->spliced);
        /* and what the client gets through the chain */
        struct evbuffer *out = respond(&fx, 200, "application/json", NULL, c->in, len, 5);
        if (c->want != NULL)
            ok_str(text(out), c->want, "body");
        else
            ok(same_bytes(out, c->in, len), "the body as it came: %s", text(out));
        ok(fx.x.rewrites == (c->want != NULL), "rewrites counted: %u", fx.x.rewrites);
        evbuffer_free(out);
        teardown(&fx);
    }
    subtest(NULL);
}

/* Every body of the rewrite table: the splice answers it, as jansson
 * would.  The cases where the top level is not an object never reach
 * either. */
static void
test_paths_agree(void)
{
    for (size_t i = 0; i < sizeof(body_cases) / sizeof(body_cases[0]); i++) {
        struct fx fx;
        subtest("%s", body_cases[i].what);
        if (setup(&fx, body_cases[i].listener, LOOKUP_PATH) != 0)
            return;
        paths_agree(&fx, body_cases[i].in, strlen(body_cases[i].in), 1);
        teardown(&fx);
    }
    subtest(NULL);
}

/* Request side: identity encoding for lookups only ------------------------ */

static void
test_accept_encoding(void)
{
    static const struct {
        const char *target;
        int lookup;
    } cases[] = {
        {LOOKUP_PATH, 1},
        {LOOKUP_PATH "?authoritative=true&listenerName=external", 1},
        {"/lookup/v2/destination/persistent/prop/cluster/ns/my-topic", 1},
        {"http://10.0.0.11:8080" LOOKUP_PATH "?authoritative=true", 1},
        {LOOKUP_PATH "?q=/bundle", 1},
        {LOOKUP_PATH "/bundle", 0},
        {"/lookup/v2/destination/persistent/prop/cluster/ns/my-topic/bundle", 0},
        {"/admin/v2/brokers/prod", 0},
        {"/admin/v2/persistent/public/default/my-topic/partitions", 0},
        {"/lookup/v2/topics", 0},
        {"/LOOKUP/v2/topic/persistent/public/default/t", 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fx fx;
        subtest("%s", cases[i].target);
        if (setup(&fx, "external", cases[i].target) != 0)
            return;
        lk_http_add(&fx.x.req, LK_STRLIT("Accept-Encoding"), LK_STRLIT("gzip, deflate, br"));
        ok(lk_flt_run_req_headers(&fx.x) == LK_FLT_CONTINUE, "continue");
        size_t n = 0;
        for (size_t k = 0; k < fx.x.req.nheaders; k++)
            n += lk_str_eqi(fx.x.req.headers[k].name, LK_STRLIT("Accept-Encoding"));
        struct lk_str *ae = lk_http_find(&fx.x.req, LK_STRLIT("Accept-Encoding"));
        ok(n == 1 && ae != NULL, "one Accept-Encoding field");
        ok(ae != NULL && lk_str_eq(*ae, cases[i].lookup ? LK_STRLIT("identity")
                                                        : LK_STRLIT("gzip, deflate, br")),
           cases[i].lookup ? "identity asked for" : "left as the client sent it");
        teardown(&fx);
    }
    subtest(NULL);

    /* a lookup without Accept-Encoding gets one too */
    struct fx fx;
    if (setup(&fx, "external", LOOKUP_PATH) != 0)
        return;
    lk_flt_run_req_headers(&fx.x);
    struct lk_str *ae = lk_http_find(&fx.x.req, LK_STRLIT("Accept-Encoding"));
    ok(ae != NULL && lk_str_eq(*ae, LK_STRLIT("identity")), "added when absent");
    teardown(&fx);
}

/* Which responses are buffered ------------------------------------------- */

static void
test_want_body(void)
{
    static const struct {
        const char *what, *target;
        int status;
        const char *ct, *ce;
        int want;
    } cases[] = {
        {"lookup, no Content-Type", LOOKUP_PATH, 200, NULL, NULL, 1},
        {"lookup, text/plain", LOOKUP_PATH, 200, "text/plain", NULL, 1},
        {"admin JSON", "/admin/v2/brokers/prod", 200, "application/json", NULL, 1},
        {"admin JSON with parameters", "/admin/v2/x", 200, " Application/JSON ; charset=utf-8",
         NULL, 1},
        {"admin text", "/admin/v2/x", 200, "text/plain", NULL, 0},
        {"admin JSON-ish", "/admin/v2/x", 200, "application/jsonp", NULL, 0},
        {"lookup 307", LOOKUP_PATH, 307, "application/json", NULL, 0},
        {"lookup 404", LOOKUP_PATH, 404, "application/json", NULL, 0},
        {"lookup 500", LOOKUP_PATH, 500, "text/plain", NULL, 0},
        {"lookup gzip", LOOKUP_PATH, 200, "application/json", "gzip", 1},
        {"lookup x-gzip", LOOKUP_PATH, 200, "application/json", "X-Gzip", 1},
        {"lookup identity", LOOKUP_PATH, 200, "application/json", "identity", 1},
        {"lookup br", LOOKUP_PATH, 200, "application/json", "br", 0},
        {"lookup deflate", LOOKUP_PATH, 200, "application/json", "deflate", 0},
        {"lookup gzip twice", LOOKUP_PATH, 200, "application/json", "gzip, gzip", 0},
        {"bundle, text", LOOKUP_PATH "/bundle", 200, "text/plain", NULL, 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fx fx;
        subtest("%s", cases[i].what);
        if (setup(&fx, "external", cases[i].target) != 0)
            return;
        fx.x.res.status = cases[i].status;
        if (cases[i].ct != NULL)
            lk_http_add(&fx.x.res, LK_STRLIT("Content-Type"), lk_str_c(cases[i].ct));
        if (cases[i].ce != NULL)
            lk_http_add(&fx.x.res, LK_STRLIT("Content-Encoding"), lk_str_c(cases[i].ce));
        ok(lk_flt_run_res_headers(&fx.x) == LK_FLT_CONTINUE, "continue");
        ok(fx.x.body_filters == cases[i].want, "%s", cases[i].want ? "buffered" : "not buffered");
        teardown(&fx);
    }
    subtest(NULL);

    /* two Content-Encoding fields: stacked codings, not ours to undo */
    struct fx fx;
    if (setup(&fx, "external", LOOKUP_PATH) != 0)
        return;
    fx.x.res.status = 200;
    lk_http_add(&fx.x.res, LK_STRLIT("Content-Encoding"), LK_STRLIT("gzip"));
    lk_http_add(&fx.x.res, LK_STRLIT("Content-Encoding"), LK_STRLIT("gzip"));
    lk_flt_run_res_headers(&fx.x);
    ok(fx.x.body_filters == 0, "two Content-Encoding fields: not buffered");
    teardown(&fx);
}

/* LookupData on a non-lookup path, by Content-Type alone */
static void
test_json_elsewhere(void)
{
    static const char in[] = "{\"httpUrl\":\"http://broker-2.pulsar.svc.cluster.local:8080\"}";
    struct fx fx;

    if (setup(&fx, "external", "/admin/v2/some/endpoint") != 0)
        return;
    struct evbuffer *out =
        respond(&fx, 200, "application/json; charset=utf-8", NULL, in, strlen(in), 4096);
    ok_str(text(out), "{\"httpUrl\":\"http://127.0.0.2:18082\"}", "LookupData rewritten by type");
    ok(fx.x.rewrites == 1, "counted");
    evbuffer_free(out);
    teardown(&fx);

    if (setup(&fx, "external", "/admin/v2/some/endpoint") != 0)
        return;
    out = respond(&fx, 200, "text/plain", NULL, in, strlen(in), 4096);
    ok_str(text(out), in, "not JSON by type on a non-lookup path: untouched");
    ok(fx.x.rewrites == 0 && fx.x.body_filters == 0, "not buffered, not counted");
    evbuffer_free(out);
    teardown(&fx);
}

/* gzip ------------------------------------------------------------------ */

static const char body_4x[] =
    "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlTls\":\"pulsar+ssl://10.0.0.11:6651\","
    "\"httpUrl\":\"http://10.0.0.11:8080\",\"httpUrlTls\":\"https://10.0.0.11:8443\","
    "\"nativeUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlSsl\":\"\"}";
static const char want_4x[] = "{" B1_EXT ",\"brokerUrlSsl\":\"\"}";

static void
test_gzip(void)
{
    struct fx fx;
    size_t zlen = 0, z1len = 0, z2len = 0;
    unsigned char *z = gzip(body_4x, strlen(body_4x), &zlen);
    /* two members (RFC 1952 §2.2), the JSON split between them */
    unsigned char *z1 = gzip(body_4x, 40, &z1len);
    unsigned char *z2 = gzip(body_4x + 40, strlen(body_4x) - 40, &z2len);
    unsigned char *both = NULL;

    if (!ok(z != NULL && z1 != NULL && z2 != NULL, "test input compressed"))
        goto end;
    if (setup(&fx, "external", LOOKUP_PATH) != 0)
        goto end;
    struct evbuffer *out = respond(&fx, 200, "application/json", "gzip", z, zlen, 16);
    ok_str(text(out), want_4x, "gzip body decoded and rewritten");
    ok(header(&fx, "Content-Encoding") == NULL, "Content-Encoding removed: the body is plain");
    ok_str(header(&fx, "Content-Type"), "application/json", "Content-Type kept");
    ok(fx.x.rewrites == 1, "counted");
    evbuffer_free(out);
    teardown(&fx);

    if (setup(&fx, "external", LOOKUP_PATH) != 0)
        goto end;
    out = respond(&fx, 200, "application/json", "x-gzip", z, zlen, 4096);
    ok_str(text(out), want_4x, "x-gzip is gzip");
    ok(header(&fx, "Content-Encoding") == NULL, "Content-Encoding removed");
    evbuffer_free(out);
    teardown(&fx);

    both = malloc(z1len + z2len);
    if (!ok(both != NULL, "alloc"))
        goto end;
    memcpy(both, z1, z1len);
    memcpy(both + z1len, z2, z2len);
    if (setup(&fx, "external", LOOKUP_PATH) != 0)
        goto end;
    out = respond(&fx, 200, "application/json", "gzip", both, z1len + z2len, 4096);
    ok_str(text(out), want_4x, "a multi-member gzip body is decoded whole");
    evbuffer_free(out);
    teardown(&fx);
end:
    free(z);
    free(z1);
    free(z2);
    free(both);
}

/* A gzip body that is not rewritten goes on compressed, as it came, and
 * keeps its Content-Encoding. */
static void
test_gzip_untouched(void)
{
    static const char reason[] = "{\"reason\":\"Topic not found persistent://t/n/x\"}";
    char big[8192];
    size_t zlen = 0, rlen = 0, blen = 0;
    unsigned char *z = gzip(body_4x, strlen(body_4x), &zlen);
    unsigned char *r = gzip(reason, strlen(reason), &rlen);
    unsigned char *b = NULL, *bad = NULL;
    struct fx fx;

    /* LookupData that inflates past max_buffer_bytes (4k) from a tiny body */
    int n = snprintf(big, sizeof(big), "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"pad\":\"");
    memset(big + n, 'a', 5000);
    snprintf(big + n + 5000, sizeof(big) - (size_t)n - 5000, "\"}");
    b = gzip(big, strlen(big), &blen);
    if (!ok(z != NULL && r != NULL && b != NULL && blen < 4096, "test input compressed (%zu)",
            blen))
        goto end;
    bad = malloc(zlen);
    if (!ok(bad != NULL, "alloc"))
        goto end;

    struct {
        const char *what;
        const unsigned char *body;
        size_t len;
    } cases[] = {
        {"not LookupData", r, rlen},
        {"inflates past max_buffer_bytes", b, blen},
        {"truncated gzip", z, zlen - 9},
        {"corrupt gzip", bad, zlen},
        {"not gzip at all", (const unsigned char *)body_4x, strlen(body_4x)},
        {"trailing garbage after the member", NULL, 0},
    };
    memcpy(bad, z, zlen);
    bad[zlen / 2] ^= 0x55;
    unsigned char *trail = malloc(zlen + 3);
    if (!ok(trail != NULL, "alloc"))
        goto end;
    memcpy(trail, z, zlen);
    memcpy(trail + zlen, "xyz", 3);
    cases[5].body = trail;
    cases[5].len = zlen + 3;

    /* Off the lookup paths (a JSON answer only sniffed), every one passes as
     * it came; on them, only the one that decodes (and is not LookupData):
     * the others may hide an internal brokerUrl, and get 502. */
    for (int lookup = 0; lookup <= 1; lookup++) {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            int refused = lookup && i != 0;
            subtest("%s%s", cases[i].what, lookup ? " (lookup path)" : "");
            if (setup(&fx, "external", lookup ? LOOKUP_PATH : OTHER_JSON_PATH) != 0)
                break;
            want_verdict = refused ? LK_FLT_REPLY : LK_FLT_CONTINUE;
            struct evbuffer *out =
                respond(&fx, 200, "application/json", "gzip", cases[i].body, cases[i].len, 1000);
            want_verdict = LK_FLT_CONTINUE;
            ok(fx.x.body_filters == 1, "buffered");
            if (refused) {
                ok(got_verdict == LK_FLT_REPLY && fx.x.reply_status == 502 &&
                       fx.x.reply_reason != NULL,
                   "502 with a reason");
                ok(evbuffer_get_length(out) == 0, "nothing went on (%zu)",
                   evbuffer_get_length(out));
            } else {
                ok(got_verdict == LK_FLT_CONTINUE, "continue");
                ok(same_bytes(out, cases[i].body, cases[i].len),
                   "the original bytes went on (%zu of %zu)", evbuffer_get_length(out),
                   cases[i].len);
                ok_str(header(&fx, "Content-Encoding"), "gzip", "Content-Encoding kept");
            }
            ok(fx.x.rewrites == 0 && fx.x.body_overflows == 0, "nothing counted");
            evbuffer_free(out);
            teardown(&fx);
        }
    }
    subtest(NULL);
    free(trail);
end:
    free(z);
    free(r);
    free(b);
    free(bad);
}

/* Over max_buffer_bytes ------------------------------------------------- */

static void
test_overflow(void)
{
    char big[6000];
    struct fx fx;
    size_t zlen = 0;
    unsigned char *z = NULL;

    /* LookupData of a mapped broker, 5000+ bytes: over the 4k cap */
    int n = snprintf(big, sizeof(big), "{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"pad\":\"");
    memset(big + n, 'a', 5000);
    snprintf(big + n + 5000, sizeof(big) - (size_t)n - 5000, "\"}");
    /* On a lookup path it cannot be rewritten, and its brokerUrl is
     * internal: 502, none of it out.  Elsewhere it was only sniffed: it
     * passes through unchanged, never truncated. */
    for (int lookup = 1; lookup >= 0; lookup--) {
        if (setup(&fx, "external", lookup ? LOOKUP_PATH : OTHER_JSON_PATH) != 0)
            return;
        want_verdict = lookup ? LK_FLT_REPLY : LK_FLT_CONTINUE;
        struct evbuffer *out = respond(&fx, 200, "application/json", NULL, big, strlen(big), 1024);
        want_verdict = LK_FLT_CONTINUE;
        ok(fx.x.body_filters == 1, "buffered");
        if (lookup) {
            ok(got_verdict == LK_FLT_REPLY && fx.x.reply_status == 502 &&
                   fx.x.reply_reason != NULL && strstr(fx.x.reply_reason, "max_buffer_bytes"),
               "lookup path: 502 naming max_buffer_bytes");
            ok(evbuffer_get_length(out) == 0, "lookup path: nothing went on (%zu)",
               evbuffer_get_length(out));
        } else {
            ok(got_verdict == LK_FLT_CONTINUE, "other path: continue");
            ok(same_bytes(out, big, strlen(big)),
               "other path: passed through unchanged, not truncated (%zu of %zu)",
               evbuffer_get_length(out), strlen(big));
        }
        ok(fx.x.body_overflows == 1, "the overflow is counted (%zu)", fx.x.body_overflows);
        ok(fx.x.rewrites == 0, "no rewrite counted");
        evbuffer_free(out);
        teardown(&fx);
    }

    /* a gzip body over the cap as it comes: on a lookup path 502 too;
     * elsewhere, compressed, it must keep its Content-Encoding (the filter
     * never saw it) */
    uint32_t r = 2463534242u; /* xorshift32: printable noise that barely compresses */
    for (size_t i = 0; i < sizeof(big) - 1; i++) {
        r ^= r << 13, r ^= r >> 17, r ^= r << 5;
        big[i] = (char)('!' + r % 90);
    }
    big[sizeof(big) - 1] = '\0';
    z = gzip(big, strlen(big), &zlen);
    if (!ok(z != NULL && zlen > 4096, "incompressible input (%zu)", zlen))
        goto end;
    for (int lookup = 1; lookup >= 0; lookup--) {
        if (setup(&fx, "external", lookup ? LOOKUP_PATH : OTHER_JSON_PATH) != 0)
            goto end;
        want_verdict = lookup ? LK_FLT_REPLY : LK_FLT_CONTINUE;
        struct evbuffer *out = respond(&fx, 200, "application/json", "gzip", z, zlen, 1500);
        want_verdict = LK_FLT_CONTINUE;
        if (lookup) {
            ok(got_verdict == LK_FLT_REPLY && fx.x.reply_status == 502 &&
                   evbuffer_get_length(out) == 0,
               "gzip, lookup path: 502, nothing went on");
        } else {
            ok(same_bytes(out, z, zlen), "gzip, other path: compressed bytes passed through");
            ok_str(header(&fx, "Content-Encoding"), "gzip", "Content-Encoding kept");
        }
        ok(fx.x.body_overflows == 1 && fx.x.rewrites == 0, "overflow counted, no rewrite");
        evbuffer_free(out);
        teardown(&fx);
    }
end:
    free(z);
}

/* No listener selected: the filter sits the exchange out ----------------- */

static void
test_no_listener(void)
{
    struct fx fx;

    if (setup(&fx, NULL, LOOKUP_PATH) != 0)
        return;
    ok(!fx.x.flt[0].attached, "not attached");
    lk_http_add(&fx.x.req, LK_STRLIT("Accept-Encoding"), LK_STRLIT("gzip"));
    ok(lk_flt_run_req_headers(&fx.x) == LK_FLT_CONTINUE, "request continues");
    struct lk_str *ae = lk_http_find(&fx.x.req, LK_STRLIT("Accept-Encoding"));
    ok(ae != NULL && lk_str_eq(*ae, LK_STRLIT("gzip")), "Accept-Encoding untouched");
    struct evbuffer *out =
        respond(&fx, 200, "application/json", NULL, body_4x, strlen(body_4x), 4096);
    ok(fx.x.body_filters == 0, "the body is not buffered");
    ok_str(text(out), body_4x, "body untouched");
    ok(fx.x.rewrites == 0, "nothing counted");
    evbuffer_free(out);
    teardown(&fx);

    /* attached, then the selection is dropped (the hooks check again) */
    if (setup(&fx, "external", LOOKUP_PATH) != 0)
        return;
    fx.x.listener_name = NULL;
    lk_flt_run_req_headers(&fx.x);
    ok(lk_http_find(&fx.x.req, LK_STRLIT("Accept-Encoding")) == NULL, "no identity asked for");
    out = respond(&fx, 200, "application/json", NULL, body_4x, strlen(body_4x), 4096);
    ok(fx.x.body_filters == 0 && fx.x.rewrites == 0, "not buffered, nothing rewritten");
    evbuffer_free(out);
    teardown(&fx);
}

/* The default chain: listener selection, then lookup, then location */
static void
test_default_chain(void)
{
    struct fx fx;
    const struct lk_cluster *cl;
    size_t lookup = SIZE_MAX, location = SIZE_MAX;

    if (setup_chain(&fx, "", "external", LOOKUP_PATH) != 0)
        return;
    cl = fx.x.cluster;
    for (size_t i = 0; i < cl->nfilters; i++) {
        if (strcmp(cl->filters[i].ops->name, "lookup") == 0)
            lookup = i;
        if (strcmp(cl->filters[i].ops->name, "location") == 0)
            location = i;
    }
    ok(lookup != SIZE_MAX, "lookup is in the default chain");
    ok(lookup < location, "before location (%zu < %zu)", lookup, location);
    /* the whole default chain on a lookup: still rewritten */
    struct evbuffer *out =
        respond(&fx, 200, "application/json", NULL, body_4x, strlen(body_4x), 4096);
    ok_str(text(out), want_4x, "rewritten through the default chain");
    evbuffer_free(out);
    teardown(&fx);
}

const struct lk_test_case lk_test_flt_lookup[] = {
    {"lookup/bodies", test_bodies},
    {"lookup/splice", test_splice},
    {"lookup/paths_agree", test_paths_agree},
    {"lookup/accept_encoding", test_accept_encoding},
    {"lookup/want_body", test_want_body},
    {"lookup/json_elsewhere", test_json_elsewhere},
    {"lookup/gzip", test_gzip},
    {"lookup/gzip_untouched", test_gzip_untouched},
    {"lookup/overflow", test_overflow},
    {"lookup/no_listener", test_no_listener},
    {"lookup/default_chain", test_default_chain},
    {NULL, NULL},
};
