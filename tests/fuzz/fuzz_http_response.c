/*
 * Fuzzes the HTTP response path: a broker's response stream parsed by
 * lk_http_parser (response mode) and run through the default filter chain
 * (listener, lookup, location, leak_guard) over the fixed listener map of
 * fuzz_util.c, the way proxy/lk_http_up.c drives it with no sockets: interim
 * (1xx) and 101 heads through the filters' interim hook, hop-by-hop fields stripped, the response head hook,
 * then the body hook in the pieces the parser delivers, last = 1 at the end
 * (or at EOF for a close-delimited body).  The head is taken when the engine
 * would send it: at once, or (when a filter may change the body) at the
 * first body byte out or at the end.
 *
 * The first input byte picks leak_guard (off, log, rewrite, block), the
 * client's TLS, a HEAD request, and one of a few request targets (lookups,
 * admin calls, listener choices); the second picks the broker; the rest is
 * the response stream.
 *
 * Invariants: no crash, leak or undefined behaviour; with leak_guard =
 * rewrite and a selected listener other than the internal one, no internal
 * host:port of the map (with a replacement, lk_location_pick) appears in the
 * heads sent (interim ones too, reason phrases included) or in a text body
 * sent identity-encoded; with
 * leak_guard = block, no byte of a text body in a coding the guard does
 * not read goes out; with
 * leak_guard = log, a text body read identity-encoded that names the
 * binary-only broker b5 by a brokerId (10.0.0.15 with a port, by a naive
 * reading of the rule) counts a leak, in whatever pieces it came; when no
 * filter may change the body, it goes out byte for byte; the index of
 * known fields agrees with the names after parsing, stripping and the
 * filters' edits; every field the parser reports has a name of tchar only
 * and a trimmed value with no CR or LF, and a head at most
 * LK_HTTP_MAX_FIELDS of them; a 1xx, 204 or 304 response has no body
 * byte, whatever its fields say.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_http_msg.h"
#include "lk_http_parse.h"
#include "lk_location.h"
#include "lk_xchg.h"

static const struct {
    const char *target, *listener_header;
} requests[8] = {
    {"/lookup/v2/topic/persistent/public/default/t1", NULL},
    {"/admin/v2/brokers/standalone", NULL},
    {"/lookup/v2/topic/persistent/public/default/t1?listenerName=other", NULL},
    {"/lookup/v2/topic/persistent/public/default/t1?authoritative=false&listenerName=internal",
     NULL},
    {"/admin/v2/persistent/public/default/t1/stats", "other"},
    {"/lookup/v2/destination/persistent/prop/cl/ns/t1/bundle", NULL},
    {"/admin/v2/persistent/public/default/t1/stats?listenerName=nonexistent", "external"},
    {"http://127.0.1.1:8080/lookup/v2/topic/persistent/public/default/t1", NULL},
};

struct run {
    struct lk_xchg *x;
    struct evbuffer *in, *out; /* body into the chain, body out of it */
    struct evbuffer *raw;      /* every decoded body byte the parser gave */
    struct evbuffer *head;     /* the head as sent */
    struct evbuffer *interim;  /* the interim (1xx) and 101 heads as sent */
    int head_seen, head_sent, no_body, failed;
};

static void
body_cb(void *arg, const char *at, size_t len)
{
    struct run *r = arg;
    int status = r->x->res.status;

    /* a 1xx, 204 or 304 has no body, whatever its fields say (RFC 9112
     * §6.3): the bytes after its head are the next response's */
    LK_FUZZ_CHECK(status / 100 != 1 && status != 204 && status != 304);
    evbuffer_add(r->in, at, len);
    evbuffer_add(r->raw, at, len);
}

static void
send_head(struct run *r)
{
    r->head_sent = 1;
    lk_http_write_head(&r->x->res, r->head);
}

/* pump_body() of proxy/lk_http_up.c, without the framing. */
static void
pump(struct run *r, int last)
{
    struct lk_xchg *x = r->x;

    if (x->body_filters == 0) {
        evbuffer_add_buffer(r->out, r->in);
        return;
    }
    enum lk_flt_verdict v = lk_flt_run_res_body(x, r->in, r->out, last);
    if (v != LK_FLT_CONTINUE) {
        r->failed = 1;
        return;
    }
    if (!r->head_sent && x->body_changers != 0 && (last || evbuffer_get_length(r->out) != 0))
        send_head(r);
}

/* on_response_head() of proxy/lk_http_up.c; 0 to go on, -1 when the exchange
 * ends here. */
static int
on_head(struct run *r, int head_method)
{
    struct lk_xchg *x = r->x;

    r->head_seen = 1;
    LK_FUZZ_CHECK(lk_http_index_ok(&x->res));
    LK_FUZZ_CHECK(lk_http_count_tokens_id(&x->res, LK_HDR_CONNECTION) <=
                  LK_HTTP_MAX_CONNECTION_TOKENS);
    lk_http_strip_hop_by_hop(&x->res);
    LK_FUZZ_CHECK(lk_http_index_ok(&x->res));
    r->no_body = head_method || x->res.status == 204 || x->res.status == 304;
    if (lk_flt_run_res_headers(x) != LK_FLT_CONTINUE) {
        r->failed = 1;
        return -1;
    }
    LK_FUZZ_CHECK(lk_http_index_ok(&x->res)); /* the filters' edits */
    if (r->no_body || x->body_changers == 0)
        send_head(r);
    return 0;
}

/* An interim (1xx) or 101 head, as on_response_head() of proxy/lk_http_up.c
 * gives it to the filters' interim hook: sent unless a filter refuses it
 * (dropped), or the exchange ends (an error). */
static void
on_interim(struct run *r)
{
    struct lk_xchg *x = r->x;

    lk_http_strip_hop_by_hop(&x->res);
    enum lk_flt_verdict v = lk_flt_run_res_interim(x);
    LK_FUZZ_CHECK(lk_http_index_ok(&x->res));
    if (v == LK_FLT_CONTINUE)
        lk_http_write_head(&x->res, r->interim);
    else if (v != LK_FLT_REPLY)
        r->failed = 1;
}

/* The patterns that must not survive in rewrite mode: internal addresses
 * that have a replacement (lk_location_pick: an address of that family on
 * the selected listener, or for a web one the lookup listener's or
 * webServiceUrl; without one, the leak guard can only log it, by design). */
static size_t
forbidden(const struct lk_xchg *x, const char **pats, size_t *lens, size_t max)
{
    struct lk_fuzz_addr addrs[64];
    size_t n = lk_fuzz_internal_addrs(x->cluster, addrs, 64), k = 0;

    for (size_t i = 0; i < n && k < max; i++) {
        if (lk_location_pick(addrs[i].broker, x->listener_name, addrs[i].scheme, x->client_tls,
                             NULL) == NULL)
            continue;
        pats[k] = addrs[i].text;
        lens[k++] = strlen(addrs[i].text);
    }
    return k;
}

/* Whether the leak guard takes the body (a text one). */
static int
guard_body(const struct lk_xchg *x)
{
    int gi = -1;

    for (size_t i = 0; i < x->nflt; i++)
        if (strcmp(x->cluster->filters[i].ops->name, "leak_guard") == 0)
            gi = (int)i;
    return gi >= 0 && x->flt[gi].body != LK_BODY_NONE;
}

/* Whether the leak guard read the body as it is (text, identity). */
static int
guard_read(const struct lk_xchg *x)
{
    return guard_body(x) && lk_http_content_coding(&x->res) == LK_CODING_IDENTITY;
}

/* Whether b names "10.0.0.15:PORT", b5's host with any port of 1 to 5
 * digits (the guard's any_port rule, read naively: not after a host
 * character nor a lone '/'). */
static int
naive_broker_id(const char *b, size_t len)
{
    static const char host[] = "10.0.0.15:";
    const size_t hl = sizeof(host) - 1;

    for (size_t i = 0; i + hl <= len; i++) {
        size_t d = 0;
        unsigned port = 0;
        if (strncmp(b + i, host, hl) != 0)
            continue;
        if (i > 0 && (isalnum((unsigned char)b[i - 1]) || strchr("._-", b[i - 1]) != NULL))
            continue;
        if (i > 0 && b[i - 1] == '/' && (i < 2 || b[i - 2] != '/'))
            continue;
        while (i + hl + d < len && d < 6 && isdigit((unsigned char)b[i + hl + d]))
            port = port * 10 + (unsigned)(b[i + hl + d++] - '0');
        if (d >= 1 && d <= 5 && port >= 1 && port <= 65535)
            return 1;
    }
    return 0;
}

static void
check(struct run *r, int done)
{
    struct lk_xchg *x = r->x;
    const char *pats[64];
    size_t lens[64];

    int rewrite = x->cluster->leak_guard == LK_LEAK_REWRITE && x->listener_name != NULL &&
                  strcmp(x->listener_name, x->cluster->internal_listener) != 0;
    size_t npats = rewrite ? forbidden(x, pats, lens, 64) : 0;
    /* The interim heads sent, status lines and reason phrases included:
     * the guard reads them as it reads a final head. */
    if (rewrite)
        LK_FUZZ_CHECK(lk_fuzz_naive_find(pats, lens, npats,
                                         (const char *)evbuffer_pullup(r->interim, -1),
                                         evbuffer_get_length(r->interim), NULL, NULL) == 0);
    if (r->failed || !r->head_sent)
        return;
    if (x->body_changers == 0 && done && !r->no_body) {
        size_t n = evbuffer_get_length(r->raw);
        LK_FUZZ_CHECK(evbuffer_get_length(r->out) == n);
        LK_FUZZ_CHECK(n == 0 ||
                      memcmp(evbuffer_pullup(r->out, -1), evbuffer_pullup(r->raw, -1), n) == 0);
    }
    /* block passes no byte of a text body in a coding it does not read */
    if (x->cluster->leak_guard == LK_LEAK_BLOCK && guard_body(x) &&
        lk_http_content_coding(&x->res) == LK_CODING_OTHER)
        LK_FUZZ_CHECK(evbuffer_get_length(r->out) == 0);
    if (x->cluster->leak_guard == LK_LEAK_LOG && done && guard_read(x))
        LK_FUZZ_CHECK(x->leaks != 0 || !naive_broker_id((const char *)evbuffer_pullup(r->out, -1),
                                                        evbuffer_get_length(r->out)));
    if (!rewrite)
        return;
    /* the head as sent, its reason phrase too: each value is scanned on
     * its own, and a line break is a boundary for the rule */
    size_t hlen = evbuffer_get_length(r->head);
    const char *head = (const char *)evbuffer_pullup(r->head, -1);
    LK_FUZZ_CHECK(memchr(head, '\n', hlen) != NULL);
    LK_FUZZ_CHECK(lk_fuzz_naive_find(pats, lens, npats, head, hlen, NULL, NULL) == 0);
    /* The body, when the guard read it as it is (text, identity) and it
     * ended: a body cut short (the connection closes on a malformed or
     * truncated response) may end in "10.0.0.11:6650" whose next byte, a
     * digit, made it no address ("10.0.0.11:66501") and was still held. */
    if (!done || !guard_read(x))
        return;
    size_t blen = evbuffer_get_length(r->out);
    LK_FUZZ_CHECK(lk_fuzz_naive_find(pats, lens, npats, (const char *)evbuffer_pullup(r->out, -1),
                                     blen, NULL, NULL) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lk_http_parser p;
    struct run r;
    int done = 0;

    if (size < 2)
        return 0;
    unsigned flags = data[0];
    struct lk_conf *conf = lk_fuzz_map((enum lk_leak_guard)(flags & 3));
    const struct lk_cluster *cl = conf->clusters[0];
    int head_method = (flags >> 3) & 1;
    uint64_t seed = lk_fuzz_seed(data, size);
    const char *text = (const char *)data + 2;
    size_t len = size - 2, at = 0;

    struct lk_xchg *x =
        lk_fuzz_xchg_new(conf, cl->brokers[data[1] % cl->nbrokers], head_method ? "HEAD" : "GET",
                         requests[flags >> 5].target, (flags >> 2) & 1);
    lk_http_add(&x->req, LK_STRLIT("Host"), LK_STRLIT("127.0.1.1:8080"));
    if (requests[flags >> 5].listener_header != NULL)
        lk_http_add(&x->req, LK_STRLIT("X-Pulsar-ListenerName"),
                    lk_str_c(requests[flags >> 5].listener_header));
    lk_flt_attach_all(x);
    lk_flt_run_req_headers(x);

    memset(&r, 0, sizeof(r));
    r.x = x;
    r.in = evbuffer_new();
    r.out = evbuffer_new();
    r.raw = evbuffer_new();
    r.head = evbuffer_new();
    r.interim = evbuffer_new();
    lk_http_parser_init(&p, 0, conf->max_header_bytes);
    lk_http_parser_next(&p, &x->res);
    p.no_body = head_method;
    p.on_body = body_cb;
    p.body_arg = &r;

    for (size_t calls = 0; !r.failed && !done;) {
        size_t n = lk_fuzz_piece(&seed, len - at), used;
        if (n == 0 && !lk_http_parser_can_step(&p)) {
            /* the broker closed: a close-delimited body ends here */
            if (r.head_seen) {
                if (lk_http_parse_eof(&p) == LK_HTTP_DONE) {
                    if (!r.no_body)
                        pump(&r, 1);
                    done = 1;
                }
            }
            break;
        }
        LK_FUZZ_CHECK(++calls <= 3 * len + 16);
        enum lk_http_event ev = lk_http_parse(&p, text + at, n, &used);
        at += used;
        if (ev == LK_HTTP_NEED_MORE) {
            if (r.head_seen && !r.no_body)
                pump(&r, 0);
            if (n == 0)
                break;
            continue;
        }
        if (ev == LK_HTTP_HEAD) {
            LK_FUZZ_CHECK(lk_http_fields_ok(&x->res));
            LK_FUZZ_CHECK(x->res.nheaders <= LK_HTTP_MAX_FIELDS);
            if (x->res.status >= 100 && x->res.status < 200) {
                on_interim(&r); /* interim (101 ends below, with UPGRADE) */
                if (r.failed)
                    break;
                continue;
            }
            if (on_head(&r, head_method) != 0)
                break;
            continue;
        }
        if (ev == LK_HTTP_DONE) {
            if (x->res.status >= 100 && x->res.status < 200) {
                lk_http_msg_init(&x->res, &x->pool, 0);
                lk_http_parser_next(&p, &x->res);
                p.no_body = head_method;
                continue;
            }
            if (!r.no_body)
                pump(&r, 1);
            done = 1;
            break;
        }
        break; /* UPGRADE (a tunnel), ERROR, TOO_LARGE: a 502 or a tunnel */
    }
    check(&r, done);

    lk_http_parser_free(&p);
    lk_fuzz_xchg_free(x);
    evbuffer_free(r.in);
    evbuffer_free(r.out);
    evbuffer_free(r.raw);
    evbuffer_free(r.head);
    evbuffer_free(r.interim);
    return 0;
}
