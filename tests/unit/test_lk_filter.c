/*
 * Tests for proxy/lk_filter.c: building a chain from `filters =`, and the
 * runner: order, attach, verdicts, streaming and buffered body hooks, the
 * buffering cap.  The filters here are test doubles defined in this file.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_filter.h"
#include "lk_http_msg.h"
#include "lk_pulsar_codec.h"
#include "lk_test.h"
#include "lk_test_wire.h"
#include "lk_xchg.h"

static char trace[256];

static void
note(const char *s)
{
    strncat(trace, s, sizeof(trace) - strlen(trace) - 1);
}

/* "upper": streams, upper-casing; keeps a trailing '-' back to show that
 * leftovers are offered again. */
static enum lk_flt_verdict
upper_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out, int last)
{
    size_t n = evbuffer_get_length(in);
    char buf[4096];
    note("U");
    while (n > 0) {
        size_t k = n < sizeof(buf) ? n : sizeof(buf);
        evbuffer_copyout(in, buf, k);
        if (!last && k == n && buf[k - 1] == '-')
            k--; /* hold the tail back */
        if (k == 0)
            break;
        for (size_t i = 0; i < k; i++)
            buf[i] = (char)toupper((unsigned char)buf[i]);
        evbuffer_drain(in, k);
        evbuffer_add(out, buf, k);
        n -= k;
        if (!last && n == 1)
            break;
    }
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
upper_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *m)
{
    note("u");
    lk_flt_want_body(x, f, LK_BODY_STREAM);
    return LK_FLT_CONTINUE;
}

/* "wrap": buffers the whole body and wraps it in brackets. */
static enum lk_flt_verdict
wrap_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out, int last)
{
    note("W");
    evbuffer_add(out, "[", 1);
    evbuffer_add_buffer(out, in);
    evbuffer_add(out, "]", 1);
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
wrap_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *m)
{
    note("w");
    lk_flt_want_body(x, f, LK_BODY_BUFFER);
    return LK_FLT_CONTINUE;
}

/* "deny": replies 403 on requests, and sits out when told to. */
static int
deny_attach(struct lk_flt *f, struct lk_xchg *x)
{
    return x->listener_name == NULL;
}

static enum lk_flt_verdict
deny_req(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *m)
{
    note("d");
    lk_xchg_reply(x, 403, "denied");
    return LK_FLT_REPLY;
}

static void
count_detach(struct lk_flt *f, struct lk_xchg *x)
{
    note("x");
}

/* "stingy": breaks the contract by keeping its last byte even at the end. */
static enum lk_flt_verdict
stingy_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out,
            int last)
{
    size_t n = evbuffer_get_length(in);
    if (n > 1)
        evbuffer_remove_buffer(in, out, n - 1);
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
stingy_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *m)
{
    lk_flt_want_body(x, f, LK_BODY_STREAM);
    return LK_FLT_CONTINUE;
}

static const struct lk_flt_ops stingy_ops = {
    .name = "stingy", .protos = LK_PROTO_HTTP,
    .http_res_headers = stingy_headers, .http_res_body = stingy_body,
};

/* "peek": observes the body, counting bytes; it gets no out and leaves in
 * as it is. */
static size_t peeked, peek_outs;

static enum lk_flt_verdict
peek_body(struct lk_flt *f, struct lk_xchg *x, struct evbuffer *in, struct evbuffer *out, int last)
{
    peeked += evbuffer_get_length(in);
    peek_outs += out != NULL;
    return LK_FLT_CONTINUE;
}

static enum lk_flt_verdict
peek_headers(struct lk_flt *f, struct lk_xchg *x, struct lk_http_msg *m)
{
    lk_flt_want_body(x, f, LK_BODY_OBSERVE);
    return LK_FLT_CONTINUE;
}

static const struct lk_flt_ops peek_ops = {
    .name = "peek", .protos = LK_PROTO_HTTP,
    .http_res_headers = peek_headers, .http_res_body = peek_body,
};

static const struct lk_flt_ops upper_ops = {
    .name = "upper", .protos = LK_PROTO_HTTP, .detach = count_detach,
    .http_res_headers = upper_headers, .http_res_body = upper_body,
};
static const struct lk_flt_ops wrap_ops = {
    .name = "wrap", .protos = LK_PROTO_HTTP,
    .http_res_headers = wrap_headers, .http_res_body = wrap_body,
};
static const struct lk_flt_ops deny_ops = {
    .name = "deny", .protos = LK_PROTO_HTTP, .attach = deny_attach, .detach = count_detach,
    .http_req_headers = deny_req,
};

struct fixture {
    struct lk_conf conf;
    struct lk_cluster cl;
    struct lk_flt filters[3];
    struct lk_xchg x;
};

static void
setup(struct fixture *fx, const struct lk_flt_ops *const *ops, size_t n, size_t cap)
{
    memset(fx, 0, sizeof(*fx));
    trace[0] = '\0';
    fx->conf.max_buffer_bytes = cap;
    fx->cl.name = "test";
    fx->cl.proto = LK_PROTO_HTTP;
    for (size_t i = 0; i < n; i++) {
        fx->filters[i].ops = ops[i];
        fx->filters[i].index = i;
        fx->filters[i].id = (char *)ops[i]->name;
    }
    fx->cl.filters = fx->filters;
    fx->cl.nfilters = n;
    lk_pool_init(&fx->x.pool);
    fx->x.conf = &fx->conf;
    fx->x.cluster = &fx->cl;
    lk_http_msg_init(&fx->x.req, &fx->x.pool, 1);
    lk_http_msg_init(&fx->x.res, &fx->x.pool, 0);
    lk_flt_attach_all(&fx->x);
}

static void
teardown(struct fixture *fx)
{
    lk_flt_detach_all(&fx->x);
    lk_pool_free(&fx->x.pool);
}

/* Runs body pieces through the chain; returns what came out, NUL-ended. */
static const char *
run_body(struct fixture *fx, const char *const *pieces)
{
    static char res[8192];
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    for (size_t i = 0; pieces[i] != NULL; i++) {
        evbuffer_add(in, pieces[i], strlen(pieces[i]));
        lk_flt_run_res_body(&fx->x, in, out, pieces[i + 1] == NULL);
        ok(evbuffer_get_length(in) == 0, "the runner drains its input");
    }
    size_t n = evbuffer_get_length(out);
    if (n >= sizeof(res))
        n = sizeof(res) - 1;
    evbuffer_remove(out, res, n);
    res[n] = '\0';
    evbuffer_free(in);
    evbuffer_free(out);
    return res;
}

/* A chain of n filters (ops) with cap as max_buffer_bytes, its head hooks
 * run, then pieces through its body hooks: what came out.  fx stays set
 * up for the caller's checks and teardown. */
static const char *
run_chain(struct fixture *fx, const struct lk_flt_ops *const *ops, size_t n, size_t cap,
          const char *const *pieces)
{
    setup(fx, ops, n, cap);
    lk_flt_run_res_headers(&fx->x);
    return run_body(fx, pieces);
}

static void
test_order_and_bodies(void)
{
    struct fixture fx;
    const struct lk_flt_ops *ops[] = {&upper_ops, &wrap_ops};
    const char *pieces[] = {"ab-", "cd-", "ef", NULL};

    setup(&fx, ops, 2, 1024);
    ok(lk_flt_run_res_headers(&fx.x) == LK_FLT_CONTINUE, "headers continue");
    ok(fx.x.body_filters == 2, "two filters asked for the body");
    ok_str(run_body(&fx, pieces), "[AB-CD-EF]", "stream then buffer, in chain order");
    ok_str(trace, "uwUUUW", "hooks ran in order; the buffering filter once");
    teardown(&fx);
    ok_str(trace, "uwUUUWx", "detach ran");

    /* the other order: the buffer releases only at the end */
    const struct lk_flt_ops *rev[] = {&wrap_ops, &upper_ops};
    ok_str(run_chain(&fx, rev, 2, 1024, pieces), "[AB-CD-EF]", "buffer then stream");
    ok_str(trace, "wuWU", "the stream filter saw only the released body");
    teardown(&fx);
}

static void
test_observe(void)
{
    struct fixture fx;
    const struct lk_flt_ops *ops[] = {&peek_ops};
    const char *pieces[] = {"abc", "def", NULL};

    setup(&fx, ops, 1, 1024);
    peeked = 0;
    lk_flt_run_res_headers(&fx.x);
    ok(fx.x.body_filters == 1 && fx.x.body_changers == 0,
       "an observer asks for the body without changing it (framing stays)");
    ok_str(run_body(&fx, pieces), "abcdef", "passes through");
    ok(peeked == 6, "and saw every byte (%zu)", peeked);
    ok(peek_outs == 0 && fx.x.flt[0].acc == NULL && fx.x.flt[0].out == NULL,
       "in place: no out, no buffers of its own");
    teardown(&fx);

    const struct lk_flt_ops *two[] = {&peek_ops, &upper_ops};
    setup(&fx, two, 2, 1024);
    peeked = 0;
    lk_flt_run_res_headers(&fx.x);
    ok(fx.x.body_filters == 2 && fx.x.body_changers == 1, "with a changer, the framing changes");
    ok_str(run_body(&fx, pieces), "ABCDEF", "what an observer read goes on to the next filter");
    ok(peeked == 6, "which the observer saw first (%zu)", peeked);
    teardown(&fx);

    const struct lk_flt_ops *after[] = {&upper_ops, &peek_ops};
    setup(&fx, after, 2, 1024);
    peeked = 0;
    lk_flt_run_res_headers(&fx.x);
    ok_str(run_body(&fx, pieces), "ABCDEF", "an observer after a changer passes its output on");
    ok(peeked == 6 && peek_outs == 0, "having read it (%zu)", peeked);
    teardown(&fx);
}

static void
test_left_at_end(void)
{
    struct fixture fx;
    const struct lk_flt_ops *ops[] = {&stingy_ops, &upper_ops};
    const char *pieces[] = {"abc", "def", NULL};

    ok_str(run_chain(&fx, ops, 2, 1024, pieces), "ABCDEF",
           "bytes a filter keeps at the end still reach the client, through later filters");
    teardown(&fx);
}

/* The whole body in one call (most answers): each stage's hook reads it
 * where it lies, and what comes out is what pieces would give. */
static void
test_one_piece(void)
{
    struct fixture fx;
    const char *whole[] = {"ab-cd-ef", NULL};
    const struct lk_flt_ops *chain[] = {&upper_ops, &wrap_ops};
    const struct lk_flt_ops *rev[] = {&wrap_ops, &upper_ops};
    const struct lk_flt_ops *left[] = {&stingy_ops, &upper_ops};
    const struct lk_flt_ops *cap[] = {&wrap_ops};

    ok_str(run_chain(&fx, chain, 2, 1024, whole), "[AB-CD-EF]", "one piece: stream then buffer");
    ok_str(trace, "uwUW", "each hook ran once");
    teardown(&fx);
    ok_str(run_chain(&fx, rev, 2, 1024, whole), "[AB-CD-EF]", "one piece: buffer then stream");
    teardown(&fx);
    ok_str(run_chain(&fx, left, 2, 1024, (const char *[]){"abcdef", NULL}), "ABCDEF",
           "one piece: bytes a filter keeps at the end still go on");
    teardown(&fx);
    ok_str(run_chain(&fx, cap, 1, 15, (const char *[]){"01234567890123456789", NULL}),
           "01234567890123456789", "one piece over the cap passes through unchanged");
    ok(fx.x.body_overflows == 1 && strchr(trace, 'W') == NULL,
       "counted as an overflow; the hook never ran");
    teardown(&fx);
}

static void
test_cap(void)
{
    struct fixture fx;
    const struct lk_flt_ops *ops[] = {&wrap_ops};
    const char *pieces[] = {"0123456789", "0123456789", "tail", NULL};

    ok_str(run_chain(&fx, ops, 1, 15, pieces), "01234567890123456789tail",
           "over the cap the body passes through unchanged, never truncated");
    ok(fx.x.body_overflows == 1, "the overflow is counted");
    ok(strchr(trace, 'W') == NULL, "the filter's body hook never ran");
    teardown(&fx);
}

static void
test_reply_and_attach(void)
{
    struct fixture fx;
    const struct lk_flt_ops *ops[] = {&deny_ops, &upper_ops};

    setup(&fx, ops, 2, 1024);
    ok(fx.x.flt[0].attached && fx.x.flt[1].attached, "both attached");
    ok(lk_flt_run_req_headers(&fx.x) == LK_FLT_REPLY, "reply stops the chain");
    ok(fx.x.reply_status == 403 && strcmp(fx.x.reply_reason, "denied") == 0, "status and reason");
    teardown(&fx);

    /* attach returning 0 sits the exchange out: no hook runs */
    memset(&fx, 0, sizeof(fx));
    trace[0] = '\0';
    fx.x.listener_name = "external";
    fx.cl.filters = fx.filters;
    fx.cl.nfilters = 1;
    fx.filters[0].ops = &deny_ops;
    lk_pool_init(&fx.x.pool);
    fx.x.cluster = &fx.cl;
    lk_http_msg_init(&fx.x.req, &fx.x.pool, 1);
    lk_flt_attach_all(&fx.x);
    ok(lk_flt_run_req_headers(&fx.x) == LK_FLT_CONTINUE && trace[0] == '\0', "skipped");
    lk_flt_detach_all(&fx.x);
    ok(trace[0] == '\0', "no detach for a filter that did not attach");
    lk_pool_free(&fx.x.pool);
}

static void
test_chain_new(void)
{
    struct lk_cluster cl;
    char err[256];

    memset(&cl, 0, sizeof(cl));
    cl.name = "prod";
    cl.proto = LK_PROTO_HTTP | LK_PROTO_PULSAR;
    ok(lk_flt_chain_new(&cl, NULL, err, sizeof(err)) == 0 && cl.nfilters >= 1, "default chain");
    size_t n = 0;
    for (size_t i = 0; lk_flt_default_chain[i] != NULL; i++) {
        const char *name = lk_flt_default_chain[i];
        n += (lk_flt_find(name, strlen(name))->protos & cl.proto) != 0;
    }
    ok(n >= 4 && cl.nfilters == n, "the default chain's HTTP and Pulsar filters (%zu of %zu)",
       cl.nfilters, n);
    for (size_t i = 0, k = 0; lk_flt_default_chain[i] != NULL && k < cl.nfilters; i++) {
        const char *name = lk_flt_default_chain[i];
        if ((lk_flt_find(name, strlen(name))->protos & cl.proto) != 0)
            ok(strcmp(cl.filters[k++].ops->name, name) == 0, "default order: %s", name);
    }
    ok(strcmp(cl.filters[cl.nfilters - 1].ops->name, "leak_guard") == 0,
       "the leak guard comes last: it checks what the others left");
    ok(strcmp(cl.filters[0].ops->name, "listener") == 0, "listener selection runs first");
    ok(strstr(cl.filters[0].id, "prod:filters[0]=listener") != NULL, "instance id (%s)", cl.filters[0].id);
    lk_flt_chain_free(&cl);
    ok(lk_flt_chain_new(&cl, " location ", err, sizeof(err)) == 0 && cl.nfilters == 1, "explicit list");
    lk_flt_chain_free(&cl);
    ok(lk_flt_chain_new(&cl, "location,nosuch", err, sizeof(err)) == -1, "unknown filter refused");
    ok(strstr(err, "unknown filter 'nosuch'") != NULL, "message names it (%s)", err);
    ok(cl.filters == NULL && cl.nfilters == 0, "nothing left behind");
    ok(lk_flt_chain_new(&cl, "location, location", err, sizeof(err)) == -1 &&
       strstr(err, "twice") != NULL, "a filter twice is refused (%s)", err);
    cl.proto = LK_PROTO_KAFKA;
    ok(lk_flt_chain_new(&cl, "location", err, sizeof(err)) == -1 &&
       strstr(err, "does not apply") != NULL, "a filter for another protocol is refused (%s)", err);
    ok(lk_flt_chain_new(&cl, NULL, err, sizeof(err)) == 0 && cl.nfilters == 2 &&
           strcmp(cl.filters[0].ops->name, "kafka") == 0 &&
           strcmp(cl.filters[1].ops->name, "leak_guard") == 0,
       "a Kafka cluster's default chain: kafka, then leak_guard");
    lk_flt_chain_free(&cl);
    cl.proto = LK_PROTO_HTTP | LK_PROTO_PULSAR;
    ok(lk_flt_chain_new(&cl, "kafka", err, sizeof(err)) == -1 && strstr(err, "does not apply") != NULL,
       "kafka refused on a Pulsar cluster (%s)", err);
    ok(lk_flt_find("location", 8) != NULL && lk_flt_find("locatio", 7) == NULL, "lk_flt_find");
}

/* A Metadata v1 response (size field first) naming nodes at (host, port). */
static size_t
metadata_v1(uint8_t *buf, const int32_t *ids, const char *const *hosts, const int32_t *ports,
            size_t n)
{
    size_t k = 4;
#define P32(v) (buf[k] = (uint8_t)((uint32_t)(v) >> 24), buf[k + 1] = (uint8_t)((uint32_t)(v) >> 16), \
                buf[k + 2] = (uint8_t)((uint32_t)(v) >> 8), buf[k + 3] = (uint8_t)(v), k += 4)
    P32(7); /* correlation id */
    P32(n);
    for (size_t i = 0; i < n; i++) {
        size_t hl = strlen(hosts[i]);
        P32(ids[i]);
        buf[k++] = (uint8_t)(hl >> 8);
        buf[k++] = (uint8_t)hl;
        memcpy(buf + k, hosts[i], hl);
        k += hl;
        P32(ports[i]);
        buf[k++] = 0xff; /* rack: null */
        buf[k++] = 0xff;
    }
    P32(1); /* controller id */
    P32(0); /* no topics */
    size_t len = k;
    k = 0;
    P32(len - 4);
#undef P32
    return len;
}

/* The kafka filter: a node the map has gets its lookup address, and every
 * node it lacks its own broker.pattern address, each from bytes of its own
 * (one shared buffer would hand every node the last one's address). */
static void
test_kafka_pattern(void)
{
    static const char text[] =
        "[kafka k]\n"
        "inter.broker.listener.name = INTERNAL\n"
        "lookupListenerName = EXTERNAL\n"
        "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
        "bootstrap.servers = 127.0.0.1:29092\n"
        "broker.pattern = b$(nodeId).k.example:$(30000+nodeId)\n"
        "[broker k/1]\n"
        "advertised.listeners = INTERNAL://10.0.0.1:9092,EXTERNAL://127.0.0.1:29093\n";
    char err[512];
    struct lk_conf *conf = lk_conf_load_buf("kafka.conf", text, strlen(text), err, sizeof(err));
    ok(conf != NULL, "config loads (%s)", conf != NULL ? "ok" : err);
    if (conf == NULL)
        return;
    static const int32_t ids[] = {1, 2, 3, 9};
    static const char *const in_hosts[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "b9.internal"};
    static const int32_t in_ports[] = {9092, 9092, 9092, 9092};
    static const char *const out_hosts[] = {"127.0.0.1", "b2.k.example", "b3.k.example", "b9.k.example"};
    static const int32_t out_ports[] = {29093, 30002, 30003, 30009};
    uint8_t frame[512], want[512];
    size_t flen = metadata_v1(frame, ids, in_hosts, in_ports, 4);
    size_t wlen = metadata_v1(want, ids, out_hosts, out_ports, 4);
    struct lk_xchg x;
    memset(&x, 0, sizeof(x));
    lk_pool_init(&x.pool);
    x.conf = conf;
    x.cluster = conf->clusters[0];
    x.listener_name = x.cluster->lookup_listener;
    x.broker = x.cluster->brokers[0];
    x.proto = LK_PROTO_KAFKA;
    lk_flt_attach_all(&x);
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    evbuffer_add(in, frame, flen);
    lk_flt_run_frame(&x, 3, 1, in, out);
    size_t olen = evbuffer_get_length(out);
    ok(olen == wlen && memcmp(evbuffer_pullup(out, -1), want, wlen) == 0,
       "nodes 1, 2, 3 and 9 at 127.0.0.1:29093, b2.k.example:30002, b3.k.example:30003 and "
       "b9.k.example:30009 (%zu bytes, want %zu)",
       olen, wlen);
    ok(x.rewrites == 4, "four endpoints rewritten (%u)", (unsigned)x.rewrites);
    /* the filter binds nothing: the nodes it placed wait in the exchange,
     * at the broker's own address of each, for the module */
    int learned = x.nlearned == 3;
    for (size_t i = 0; learned && i < 3; i++)
        learned = x.learned[i].node_id == ids[i + 1] && x.learned[i].port == 9092 &&
                  lk_str_eq(x.learned[i].host, lk_str_c(in_hosts[i + 1]));
    ok(learned, "nodes 2, 3 and 9 learned at 10.0.0.2, 10.0.0.3 and b9.internal:9092 (%zu)",
       x.nlearned);
    evbuffer_free(in);
    evbuffer_free(out);
    lk_flt_detach_all(&x);
    lk_pool_free(&x.pool);
    lk_conf_unref(conf);
}

/* The Pulsar frame of the command cmd[0..len) into buf.  Its length. */
static size_t
framed(uint8_t *buf, const uint8_t *cmd, size_t len)
{
    struct evbuffer *b = evbuffer_new();

    lk_pulsar_frame(b, cmd, len);
    len = evbuffer_get_length(b);
    evbuffer_remove(b, buf, len);
    evbuffer_free(b);
    return len;
}

/* A LOOKUP_RESPONSE command (Connect, request id 5) naming url, and url_tls
 * when not NULL; the frame around it goes into buf.  Its length. */
static size_t
lookup_response(uint8_t *buf, const char *url, const char *url_tls)
{
    uint8_t sub[256], cmd[300];
    size_t n = 0, m = 0, ul = strlen(url);

    sub[n++] = 0x0a; /* brokerServiceUrl (1) */
    sub[n++] = (uint8_t)ul;
    memcpy(sub + n, url, ul);
    n += ul;
    if (url_tls != NULL) {
        size_t tl = strlen(url_tls);
        sub[n++] = 0x12; /* brokerServiceUrlTls (2) */
        sub[n++] = (uint8_t)tl;
        memcpy(sub + n, url_tls, tl);
        n += tl;
    }
    sub[n++] = 0x18, sub[n++] = 1; /* response (3): Connect */
    sub[n++] = 0x20, sub[n++] = 5; /* request_id (4) */
    cmd[m++] = 0x08, cmd[m++] = 24; /* type: LOOKUP_RESPONSE */
    cmd[m++] = 0xc2, cmd[m++] = 0x01; /* lookupTopicResponse (24) */
    cmd[m++] = (uint8_t)n;
    memcpy(cmd + m, sub, n);
    m += n;
    return framed(buf, cmd, m);
}

/* The config text loaded, or NULL (failing a test). */
static struct lk_conf *
pulsar_conf(const char *text)
{
    char err[512];
    struct lk_conf *conf = lk_conf_load_buf("pulsar.conf", text, strlen(text), err, sizeof(err));

    ok(conf != NULL, "config loads (%s)", conf != NULL ? "ok" : err);
    return conf;
}

/* The pulsar filter on one command of the given type (a LOOKUP_RESPONSE's
 * 24); the rewritten command decoded into *c (its strings in out, which
 * the caller frees).  The addresses it left, logged (x->unmapped). */
static unsigned
run_pulsar(struct lk_conf *conf, const char *listener, int16_t type, const uint8_t *frame,
           size_t len, struct evbuffer *out, struct lk_pulsar_cmd *c)
{
    struct lk_xchg x;
    struct evbuffer *in = evbuffer_new();

    memset(&x, 0, sizeof(x));
    lk_pool_init(&x.pool);
    x.conf = conf;
    x.cluster = conf->clusters[0];
    x.proto = LK_PROTO_PULSAR;
    x.listener_name = listener;
    lk_flt_attach_all(&x);
    evbuffer_add(in, frame, len);
    lk_flt_run_frame(&x, type, 0, in, out);
    size_t olen = evbuffer_get_length(out);
    const uint8_t *o = evbuffer_pullup(out, -1);
    memset(c, 0, sizeof(*c));
    ok(olen > LK_PULSAR_PREFIX &&
           lk_pulsar_decode(o + LK_PULSAR_PREFIX, olen - LK_PULSAR_PREFIX, c) == 0,
       "listener %s: the answer decodes again", listener);
    evbuffer_free(in);
    lk_flt_detach_all(&x);
    lk_pool_free(&x.pool);
    return x.unmapped;
}

/* The pulsar filter: the URL pair becomes exactly the selected listener's
 * pulsar and pulsar+ssl addresses: filled in where the broker left one out,
 * cleared where the listener has none; a URL no broker has stays. */
static void
test_pulsar_urls(void)
{
    static const char text[] =
        "[pulsar p]\n"
        "internalListenerName = internal\n"
        "lookupListenerName = external\n"
        "[broker p/b1]\n"
        "advertisedListeners = internal:pulsar://10.0.0.1:6650,internal:http://10.0.0.1:8080,"
        "external:pulsar://127.0.0.1:16650,external:pulsar+ssl://b1.example.com:16651,"
        "tlsonly:pulsar+ssl://b1-tls.example.com:6651\n";
    struct lk_conf *conf = pulsar_conf(text);
    uint8_t frame[512];
    struct lk_pulsar_cmd c;

    if (conf == NULL)
        return;
    struct evbuffer *out = evbuffer_new();
    size_t len = lookup_response(frame, "pulsar://10.0.0.1:6650", NULL);
    run_pulsar(conf, "external", LK_PULSAR_LOOKUP_RESPONSE, frame, len, out, &c);
    ok(c.has_url && lk_str_eq(c.url, lk_str_c("pulsar://127.0.0.1:16650")), "brokerServiceUrl: external");
    ok(c.has_url_tls && lk_str_eq(c.url_tls, lk_str_c("pulsar+ssl://b1.example.com:16651")),
       "brokerServiceUrlTls filled in, though the broker left it out");
    ok(c.lookup_type == LK_PULSAR_CONNECT_TO && c.request_id == 5 && c.proxy_through != 1,
       "the rest as it was");
    evbuffer_drain(out, evbuffer_get_length(out));

    len = lookup_response(frame, "pulsar://10.0.0.1:6650", "pulsar+ssl://10.0.0.1:6651");
    run_pulsar(conf, "tlsonly", LK_PULSAR_LOOKUP_RESPONSE, frame, len, out, &c);
    ok(!c.has_url, "a listener without pulsar://: brokerServiceUrl cleared");
    ok(c.has_url_tls && lk_str_eq(c.url_tls, lk_str_c("pulsar+ssl://b1-tls.example.com:6651")),
       "brokerServiceUrlTls: the listener's");
    evbuffer_drain(out, evbuffer_get_length(out));

    len = lookup_response(frame, "pulsar://10.9.9.9:6650", NULL);
    run_pulsar(conf, "external", LK_PULSAR_LOOKUP_RESPONSE, frame, len, out, &c);
    ok(evbuffer_get_length(out) == len && memcmp(evbuffer_pullup(out, -1), frame, len) == 0,
       "a URL of no mapped broker: the frame byte for byte");
    evbuffer_free(out);
    lk_conf_unref(conf);
}

/* A SCALABLE_TOPIC_UPDATE frame into buf: one segment whose broker is at
 * url and url_tls, and the controller at the same two.  Its length. */
static size_t
scalable_update(uint8_t *buf, const char *url, const char *url_tls)
{
    struct tb seg = {0}, dag = {0}, upd = {0}, cmd = {0};

    pb_uint(&seg, 1, 1);      /* segment_id */
    pb_str(&seg, 2, url);     /* broker_url, required */
    pb_str(&seg, 3, url_tls); /* broker_url_tls */
    pb_uint(&dag, 1, 7);      /* epoch */
    pb_msg(&dag, 3, &seg);    /* segment_brokers */
    pb_str(&dag, 4, url);     /* controller_broker_url */
    pb_str(&dag, 5, url_tls); /* controller_broker_url_tls */
    pb_uint(&upd, 1, 42);     /* session_id */
    pb_msg(&upd, 2, &dag);
    pb_uint(&cmd, 1, LK_PULSAR_SCALABLE_TOPIC_UPDATE);
    pb_msg(&cmd, LK_PULSAR_SCALABLE_TOPIC_UPDATE, &upd);
    size_t len = framed(buf, cmd.p, cmd.len);
    free(seg.p);
    free(dag.p);
    free(upd.p);
    free(cmd.p);
    return len;
}

/* Whether the n bytes at p hold the text s. */
static int
holds(const uint8_t *p, size_t n, const char *s)
{
    return memmem(p, n, s, strlen(s)) != NULL;
}

/* SCALABLE_TOPIC_UPDATE on a listener with pulsar+ssl but no pulsar://: a
 * segment's broker_url, which Pulsar requires, takes the pulsar+ssl
 * address (never the broker's internal URL), as its broker_url_tls does;
 * the controller's pair, which may lose its plain URL, loses it.  Only a
 * listener with neither leaves the segment's pair, counted unmapped. */
static void
test_pulsar_required_tls(void)
{
    static const char text[] =
        "[pulsar p]\n"
        "internalListenerName = internal\n"
        "lookupListenerName = external\n"
        "[broker p/b1]\n"
        "advertisedListeners = internal:pulsar://10.0.0.1:6650,"
        "internal:pulsar+ssl://10.0.0.1:6651,internal:http://10.0.0.1:8080,"
        "external:pulsar+ssl://127.0.0.1:16651,"
        "httponly:http://b1-http.example.com:8080\n";
    struct lk_conf *conf = pulsar_conf(text);
    uint8_t frame[512];
    struct lk_pulsar_cmd c;
    struct lk_pulsar_pair p[3];

    if (conf == NULL)
        return;
    struct evbuffer *out = evbuffer_new();
    size_t len = scalable_update(frame, "pulsar://10.0.0.1:6650", "pulsar+ssl://10.0.0.1:6651");
    unsigned unmapped =
        run_pulsar(conf, "external", LK_PULSAR_SCALABLE_TOPIC_UPDATE, frame, len, out, &c);
    size_t olen = evbuffer_get_length(out);
    const uint8_t *o = evbuffer_pullup(out, -1);
    ok(unmapped == 0, "nothing left unmapped (%u)", unmapped);
    ok(!holds(o, olen, "10.0.0.1"), "no internal address in the frame the client gets");
    ok(olen > LK_PULSAR_PREFIX &&
           lk_pulsar_pairs(o + LK_PULSAR_PREFIX, olen - LK_PULSAR_PREFIX, p, 3) == 2,
       "two pairs: the segment's and the controller's");
    ok(p[0].has_url && lk_str_eq(p[0].url, lk_str_c("pulsar+ssl://127.0.0.1:16651")) &&
           p[0].has_url_tls && lk_str_eq(p[0].url_tls, lk_str_c("pulsar+ssl://127.0.0.1:16651")),
       "segment: broker_url and broker_url_tls both the listener's pulsar+ssl address");
    ok(!p[1].has_url && p[1].has_url_tls &&
           lk_str_eq(p[1].url_tls, lk_str_c("pulsar+ssl://127.0.0.1:16651")),
       "controller: its plain URL cleared, its TLS one the listener's");
    evbuffer_drain(out, olen);

    unmapped = run_pulsar(conf, "httponly", LK_PULSAR_SCALABLE_TOPIC_UPDATE, frame, len, out, &c);
    olen = evbuffer_get_length(out);
    o = evbuffer_pullup(out, -1);
    ok(unmapped == 1, "a listener with neither address: the segment's pair left, counted (%u)",
       unmapped);
    ok(lk_pulsar_pairs(o + LK_PULSAR_PREFIX, olen - LK_PULSAR_PREFIX, p, 3) == 1 &&
           lk_str_eq(p[0].url, lk_str_c("pulsar://10.0.0.1:6650")),
       "... as the broker sent it, for the leak guard; the controller's pair cleared");
    evbuffer_free(out);
    lk_conf_unref(conf);
}

/* A client_listeners listener (vpn) that the owner lacks: the owner's
 * lookup listener stands in, never its internal URL; a broker with vpn
 * gets its vpn address. */
static void
test_pulsar_lacking(void)
{
    static const char text[] =
        "[pulsar p]\n"
        "internalListenerName = internal\n"
        "lookupListenerName = external\n"
        "client_listeners = vpn\n"
        "[broker p/b1]\n"
        "advertisedListeners = internal:pulsar://10.0.0.1:6650,external:pulsar://127.0.0.1:16650,"
        "vpn:pulsar://b1.vpn.example:6650\n"
        "[broker p/b2]\n"
        "advertisedListeners = internal:pulsar://10.0.0.2:6650,"
        "internal:pulsar+ssl://10.0.0.2:6651,external:pulsar://127.0.0.1:16652\n";
    struct lk_conf *conf = pulsar_conf(text);
    uint8_t frame[512];
    struct lk_pulsar_cmd c;

    if (conf == NULL)
        return;
    struct evbuffer *out = evbuffer_new();
    size_t len = lookup_response(frame, "pulsar://10.0.0.2:6650", "pulsar+ssl://10.0.0.2:6651");
    unsigned unmapped = run_pulsar(conf, "vpn", LK_PULSAR_LOOKUP_RESPONSE, frame, len, out, &c);
    ok(unmapped == 0, "b2, without vpn: not left unmapped (%u)", unmapped);
    ok(c.has_url && lk_str_eq(c.url, lk_str_c("pulsar://127.0.0.1:16652")),
       "brokerServiceUrl: b2's lookup-listener address");
    ok(!c.has_url_tls, "brokerServiceUrlTls cleared: the lookup listener has none");
    ok(!holds(evbuffer_pullup(out, -1), evbuffer_get_length(out), "10.0.0.2"),
       "no internal address of b2 in the frame");
    evbuffer_drain(out, evbuffer_get_length(out));

    len = lookup_response(frame, "pulsar://10.0.0.1:6650", NULL);
    run_pulsar(conf, "vpn", LK_PULSAR_LOOKUP_RESPONSE, frame, len, out, &c);
    ok(c.has_url && lk_str_eq(c.url, lk_str_c("pulsar://b1.vpn.example:6650")),
       "b1, with vpn: its vpn address");
    evbuffer_free(out);
    lk_conf_unref(conf);
}

const struct lk_test_case lk_test_filter[] = {
    {"filter/order_and_bodies", test_order_and_bodies},
    {"filter/observe", test_observe},
    {"filter/left_at_end", test_left_at_end},
    {"filter/one_piece", test_one_piece},
    {"filter/cap", test_cap},
    {"filter/reply_and_attach", test_reply_and_attach},
    {"filter/chain_new", test_chain_new},
    {"filter/kafka_pattern", test_kafka_pattern},
    {"filter/pulsar_urls", test_pulsar_urls},
    {"filter/pulsar_required_tls", test_pulsar_required_tls},
    {"filter/pulsar_lacking", test_pulsar_lacking},
    {NULL, NULL},
};
