/*
 * Fuzzes the HTTP request stream (lk_http_parser in proxy/lk_http_parse.c,
 * request mode): the input is a client's byte stream, pipelined messages
 * and all, fed to lk_http_parse the way proxy/lk_http.c feeds it (stepping
 * a parser stopped at a head with no input, starting the next message
 * after each DONE).
 * Invariants:
 *   - splitting does not change the outcome: the input parsed in one piece
 *     and in pieces (sizes derived from the input) gives the same events
 *     and the same messages (head, framing, body);
 *   - a message the parser accepts, written again with lk_http_write_head
 *     and its body re-framed (Content-Length or chunked), parses again to
 *     the same method, target, header fields (names and values, in order)
 *     and body;
 *   - a head that passes lk_http_check_request (which lk_http.c runs on
 *     every head) passes it again once written and parsed back;
 *   - the index of known fields agrees with the names after parsing and
 *     every edit, and lk_http_strip_hop_by_hop removes exactly what a
 *     plain scan of the names says (the fixed hop-by-hop fields, and what
 *     Connection names but Host, Content-Length and Transfer-Encoding);
 *   - every field of a head the parser reports has a name of tchar only
 *     and a trimmed value with no CR or LF;
 *   - a head the parser reports holds at most LK_HTTP_MAX_CONNECTION_TOKENS
 *     Connection tokens (issue 18), and at most LK_HTTP_MAX_FIELDS fields;
 *   - no livelock: every call consumes input or reports an event.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_http_msg.h"
#include "lk_http_parse.h"

#define MAX_HEAD 2048

/* A growable byte string: the trace of a run, a body. */
struct bytes {
    char *p;
    size_t len, cap;
};

static void
put(struct bytes *b, const void *p, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap != 0 ? b->cap : 256;
        while (cap < b->len + len)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (b->p == NULL)
            abort();
        b->cap = cap;
    }
    if (len != 0)
        memcpy(b->p + b->len, p, len);
    b->len += len;
}

/* A length-prefixed field, so that two traces are equal only if their
 * fields are. */
static void
put_str(struct bytes *b, const void *p, size_t len)
{
    uint64_t l = len;
    put(b, &l, sizeof(l));
    put(b, p, len);
}

static void
put_num(struct bytes *b, uint64_t v)
{
    put(b, &v, sizeof(v));
}

static void
collect(void *arg, const char *at, size_t len)
{
    put(arg, at, len);
}

/* Framing fields: the re-framing replaces them, so they are left out of
 * the comparison. */
static int
is_framing(struct lk_str name)
{
    return lk_str_eqi(name, LK_STRLIT("Content-Length")) ||
           lk_str_eqi(name, LK_STRLIT("Transfer-Encoding"));
}

static void
trace_head(struct bytes *t, const struct lk_http_parser *p, const struct lk_http_msg *m)
{
    put(t, "H", 1);
    put_str(t, m->method.p, m->method.len);
    put_str(t, m->target.p, m->target.len);
    put_num(t, (uint64_t)m->http_major << 8 | (uint64_t)m->http_minor);
    put_num(t, m->nheaders);
    for (size_t i = 0; i < m->nheaders; i++) {
        put_str(t, m->headers[i].name.p, m->headers[i].name.len);
        put_str(t, m->headers[i].value.p, m->headers[i].value.len);
    }
    put_num(t, (uint64_t)p->chunked | (uint64_t)p->has_cl << 1 | (uint64_t)p->keep_alive << 2 |
                   (uint64_t)p->upgrade << 3);
    put_num(t, p->content_length);
}

/* Whether name is among the comma-separated tokens of a Connection field
 * of m that strip may act on. */
static int
named_by_connection(const struct lk_http_msg *m, struct lk_str name)
{
    if (lk_str_eqi(name, LK_STRLIT("Host")) || lk_str_eqi(name, LK_STRLIT("Content-Length")) ||
        lk_str_eqi(name, LK_STRLIT("Transfer-Encoding")))
        return 0;
    for (size_t i = 0; i < m->nheaders; i++) {
        if (!lk_str_eqi(m->headers[i].name, LK_STRLIT("Connection")))
            continue;
        struct lk_str v = m->headers[i].value;
        for (size_t a = 0, b; a <= v.len; a = b + 1) {
            for (b = a; b < v.len && v.p[b] != ','; b++)
                ;
            if (lk_str_eqi(lk_str_trim(lk_str_make(v.p + a, b - a)), name))
                return 1;
        }
    }
    return 0;
}

/* Strips a copy of m and compares it with a plain scan. */
static void
check_strip(const struct lk_http_msg *m, struct lk_pool *pool)
{
    static const struct lk_str fixed[] = {
        LK_STRLIT("Connection"), LK_STRLIT("Keep-Alive"),         LK_STRLIT("Proxy-Connection"),
        LK_STRLIT("TE"),         LK_STRLIT("Trailer"),            LK_STRLIT("Transfer-Encoding"),
        LK_STRLIT("Upgrade"),    LK_STRLIT("Proxy-Authenticate"), LK_STRLIT("Proxy-Authorization")};
    struct lk_http_msg s = *m;
    size_t k = 0;

    s.headers = lk_palloc(pool, (m->nheaders + 1) * sizeof(*s.headers));
    if (m->nheaders != 0) /* headers is NULL then */
        memcpy(s.headers, m->headers, m->nheaders * sizeof(*s.headers));
    lk_http_strip_hop_by_hop(&s);
    LK_FUZZ_CHECK(lk_http_index_ok(&s));
    for (size_t i = 0; i < m->nheaders; i++) {
        int drop = named_by_connection(m, m->headers[i].name);
        for (size_t f = 0; f < sizeof(fixed) / sizeof(fixed[0]); f++)
            drop |= lk_str_eqi(m->headers[i].name, fixed[f]);
        if (drop)
            continue;
        LK_FUZZ_CHECK(k < s.nheaders && lk_str_eq(s.headers[k].name, m->headers[i].name) &&
                      lk_str_eq(s.headers[k].value, m->headers[i].value));
        k++;
    }
    LK_FUZZ_CHECK(k == s.nheaders);
}

/* Writes m and body again: framing fields out, a fresh Content-Length or
 * chunked framing (pieces from *seed) in, and checks that it parses back
 * to the same message. */
static void
roundtrip(const struct lk_http_msg *m, const struct bytes *body, uint64_t *seed, int checked)
{
    struct lk_pool pool;
    struct lk_http_msg w, r;
    struct lk_http_parser p;
    struct bytes body2 = {0};
    struct evbuffer *out = evbuffer_new();
    int chunked = (*seed >> 3) & 1;
    size_t used;

    lk_pool_init(&pool);
    lk_http_msg_init(&w, &pool, 1);
    w.method = m->method;
    w.target = m->target;
    for (size_t i = 0; i < m->nheaders; i++)
        if (!is_framing(m->headers[i].name))
            lk_http_add(&w, m->headers[i].name, m->headers[i].value);
    LK_FUZZ_CHECK(lk_http_index_ok(&w));
    if (chunked) {
        lk_http_add(&w, LK_STRLIT("Transfer-Encoding"), LK_STRLIT("chunked"));
    } else {
        char num[32];
        snprintf(num, sizeof(num), "%zu", body->len);
        lk_http_add(&w, LK_STRLIT("Content-Length"), lk_str_c(num));
    }
    lk_http_write_head(&w, out);
    if (chunked) {
        for (size_t at = 0, n; at < body->len; at += n) {
            n = lk_fuzz_piece(seed, body->len - at);
            evbuffer_add_printf(out, "%zx\r\n", n);
            evbuffer_add(out, body->p + at, n);
            evbuffer_add(out, "\r\n", 2);
        }
        evbuffer_add(out, "0\r\n\r\n", 5);
    } else {
        evbuffer_add(out, body->p, body->len);
    }
    size_t len = evbuffer_get_length(out);
    const char *text = (const char *)evbuffer_pullup(out, -1);

    /* "name:value" comes back as "name: value": the head may grow */
    lk_http_parser_init(&p, 1, 2 * MAX_HEAD + 1024);
    lk_http_msg_init(&r, &pool, 1);
    lk_http_parser_next(&p, &r);
    p.on_body = collect;
    p.body_arg = &body2;
    enum lk_http_event ev = lk_http_parse(&p, text, len, &used);
    if (w.nheaders > LK_HTTP_MAX_FIELDS) {
        /* the fresh framing field on top of a head of the most fields
         * the parser takes: one too many to parse back */
        LK_FUZZ_CHECK(ev == LK_HTTP_TOO_LARGE);
        goto out;
    }
    LK_FUZZ_CHECK(ev == LK_HTTP_HEAD);
    LK_FUZZ_CHECK(lk_http_index_ok(&r));
    size_t at = used;
    ev = lk_http_parse(&p, text + at, len - at, &used);
    at += used;
    LK_FUZZ_CHECK(ev == LK_HTTP_DONE);
    LK_FUZZ_CHECK(at == len);
    LK_FUZZ_CHECK(lk_str_eq(r.method, m->method));
    LK_FUZZ_CHECK(lk_str_eq(r.target, m->target));
    size_t k = 0;
    for (size_t i = 0; i < m->nheaders; i++) {
        if (is_framing(m->headers[i].name))
            continue;
        while (k < r.nheaders && is_framing(r.headers[k].name))
            k++;
        LK_FUZZ_CHECK(k < r.nheaders);
        LK_FUZZ_CHECK(lk_str_eq(r.headers[k].name, m->headers[i].name));
        LK_FUZZ_CHECK(lk_str_eq(r.headers[k].value, m->headers[i].value));
        k++;
    }
    while (k < r.nheaders && is_framing(r.headers[k].name))
        k++;
    LK_FUZZ_CHECK(k == r.nheaders);
    LK_FUZZ_CHECK(body2.len == body->len &&
                  (body->len == 0 || memcmp(body2.p, body->p, body->len) == 0));
    /* a checked HTTP/1.1 head (now in origin-form) passes the check again,
     * unchanged */
    if (checked && m->http_minor == 1) {
        int absolute = 1;
        const char *reason = NULL;
        LK_FUZZ_CHECK(lk_http_check_request(&r, &absolute, &reason) == 0 && !absolute);
        LK_FUZZ_CHECK(lk_str_eq(r.target, m->target));
    }
out:
    lk_http_parser_free(&p);
    lk_pool_free(&pool);
    evbuffer_free(out);
    free(body2.p);
}

/*
 * Parses data as one client stream, in pieces from seed (0: every call
 * gets all that is left), appending what happens to trace t.  With rt
 * set, every accepted message goes through roundtrip().
 */
static void
run(const char *data, size_t len, uint64_t seed, struct bytes *t, int rt)
{
    struct lk_pool pool;
    struct lk_http_parser p;
    struct lk_http_msg m;
    struct bytes body = {0};
    uint64_t rt_seed = seed != 0 ? seed : 1;
    size_t at = 0, calls = 0;
    int checked = 0;

    lk_pool_init(&pool);
    lk_http_parser_init(&p, 1, MAX_HEAD);
    lk_http_msg_init(&m, &pool, 1);
    lk_http_parser_next(&p, &m);
    p.on_body = collect;
    p.body_arg = &body;
    for (;;) {
        size_t n = seed != 0 ? lk_fuzz_piece(&seed, len - at) : len - at, used;
        if (n == 0 && !lk_http_parser_can_step(&p))
            break;
        /* every call consumes a byte or reports an event */
        LK_FUZZ_CHECK(++calls <= 3 * len + 16);
        enum lk_http_event ev = lk_http_parse(&p, data + at, n, &used);
        LK_FUZZ_CHECK(used <= n);
        at += used;
        if (ev == LK_HTTP_NEED_MORE) {
            LK_FUZZ_CHECK(used == n);
            if (n == 0)
                break; /* stepped without input: nothing more to come */
            continue;
        }
        if (ev == LK_HTTP_HEAD) {
            LK_FUZZ_CHECK(lk_http_fields_ok(&m));
            trace_head(t, &p, &m);
            LK_FUZZ_CHECK(lk_http_index_ok(&m));
            LK_FUZZ_CHECK(lk_http_count_tokens_id(&m, LK_HDR_CONNECTION) <=
                          LK_HTTP_MAX_CONNECTION_TOKENS);
            LK_FUZZ_CHECK(m.nheaders <= LK_HTTP_MAX_FIELDS);
            check_strip(&m, &pool);
            /* what lk_http.c checks next (it may rewrite an absolute-form
             * target and Host in place): the same however split */
            const char *reason = NULL;
            int absolute = 0;
            int status = lk_http_check_request(&m, &absolute, &reason);
            checked = status == 0;
            LK_FUZZ_CHECK(lk_http_index_ok(&m));
            put_num(t, (uint64_t)status << 1 | (uint64_t)absolute);
            put_str(t, m.target.p, m.target.len);
            continue;
        }
        if (ev == LK_HTTP_DONE) {
            put(t, "D", 1);
            put_str(t, body.p, body.len);
            put_num(t, (uint64_t)p.keep_alive);
            /* lk_http_write_head writes HTTP/1.1: a head llhttp took as
             * HTTP/0.9 (no version) or 2.0, or the h2 preface method PRI,
             * cannot come back the same, and lk_http.c does not forward
             * those as they are (no Host: 400) -- out of the round trip */
            if (rt && m.http_major == 1 && !lk_str_eq(m.method, LK_STRLIT("PRI")))
                roundtrip(&m, &body, &rt_seed, checked);
            body.len = 0;
            lk_pool_clear(&pool);
            lk_http_msg_init(&m, &pool, 1);
            lk_http_parser_next(&p, &m);
            continue;
        }
        put(t, ev == LK_HTTP_UPGRADE ? "U" : ev == LK_HTTP_ERROR ? "E" : "T", 1);
        /* the body bytes delivered before the message failed */
        put_str(t, body.p, body.len);
        /* Where the parser stopped: after an error that depends on the
         * pieces (a failing call reports nothing consumed), so only the
         * upgrade's position, where the tunnel's bytes begin, counts. */
        if (ev == LK_HTTP_UPGRADE)
            put_num(t, at);
        goto out;
    }
    put(t, "$", 1);
    put_num(t, at);
out:
    lk_http_parser_free(&p);
    lk_pool_free(&pool);
    free(body.p);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bytes whole = {0}, pieces = {0};

    run((const char *)data, size, 0, &whole, 1);
    run((const char *)data, size, lk_fuzz_seed(data, size), &pieces, 0);
    LK_FUZZ_CHECK(whole.len == pieces.len && memcmp(whole.p, pieces.p, whole.len) == 0);
    free(whole.p);
    free(pieces.p);
    return 0;
}
