/*
 * Fuzzes the Pulsar binary rewrite filter (filters/flt_pulsar.c) as the
 * engine runs it: an exchange built as proxy/lk_pulsar.c's broker_command
 * builds one (proto Pulsar, the connection's cluster and broker, the
 * listener a LOOKUP named or the cluster's lookupListenerName, the
 * client's TLS), the chain attached, the pulsar_command hook called on
 * the view of a whole frame (lk_pulsar_view.h) and the view written, the
 * chain detached; over lk_fuzz_pulsar_map (fuzz_util.c): the
 * filter harnesses' cluster "prod", "west" and "east" to be named by
 * Redirects and migrations, and a Kafka cluster.
 *
 * Input: a flags byte, then the BaseCommand bytes, which the harness
 * frames as [totalSize][commandSize][command].  Flags:
 *   bits 0-1  the listener: the cluster's lookupListenerName (none for
 *             east, so the filter sits out), "other", "internal", or
 *             "vpn", which no broker has;
 *   bit 2     pulsar_routing = service (else per-broker);
 *   bits 3-4  the broker the connection is on: prod/b1, prod/b3, west/w2,
 *             east/e1;
 *   bit 5     the client's TLS;
 *   bit 6     sizes that do not match the command (by its length mod 4: a
 *             payload byte after it, commandSize one short, totalSize
 *             one past the bytes there are, commandSize past totalSize):
 *             frames the engine refuses before any filter sees them;
 *   bit 7     the frame handed over in pieces (chains of the evbuffer)
 *             rather than in one.
 * The type handed to the hook is the engine's: lk_pulsar_command_type of
 * the whole command (a command giving its type twice is refused before
 * any filter; lk_fuzz_pulsar_same_reading checks the reading against the
 * broker's and protobuf-c's).  The unit tests
 * write such inputs (LK_PULSAR_DUMP=DIR tests/unit/run pulsar_codec).
 *
 * What the filter must do, from the decoded command (the harness's model):
 * nothing unless a listener is selected, the frame is a simple one, the
 * command decodes and has a URL pair (lk_pulsar_pairs: one of its own, or
 * SCALABLE_TOPIC_UPDATE's and WATCH_TC_ASSIGNMENTS_UPDATE's within, each
 * modelled as follows); then the broker either URL names
 * (lk_url_find_broker), in the connection's cluster first and then in
 * every other Pulsar cluster in map order; its listener of the selected
 * name, or for another cluster's broker that lacks it, the one of that
 * cluster's lookupListenerName.  Without such a listener the frame passes
 * unchanged and counts one unmapped address.  With one, the URL pair
 * becomes that listener's pulsar and pulsar+ssl address texts (each present
 * exactly when the listener has the scheme), and a Connect LOOKUP_RESPONSE under
 * service routing says proxy_through_service_url; the frame is rewritten
 * exactly when that changes something.
 *
 * Invariants:
 *   - the hook writes nothing to out and leaves in byte for byte as it
 *     came, or drains in and writes one frame; a rewrite, an unmapped
 *     address, or neither, as the model says, and counted so (x->rewrites,
 *     x->unmapped; never x->leaks, which are the leak guard's);
 *   - a written frame has sizes that match its length and decodes again,
 *     to the same type; its URL pair is exactly the listener's addresses,
 *     proxy_through is 1 for a Connect under service routing and otherwise
 *     as it came, every other decoded value as it came; read by the
 *     harnesses' own protobuf reader, every message keeps its known
 *     fields but the edited ones and its unknown fields in order with
 *     their bytes;
 *   - the URL pair holds no internal address of any mapped broker, unless
 *     the selected listener is that broker's internal one (a client may
 *     ask for it).  Elsewhere in the frame an internal address can only be
 *     one the broker wrote into a field the filter does not own (a lookup
 *     error message, an unknown field): by the field-by-field check, it
 *     comes back exactly as it was, and the filter adds none;
 *   - the chain runner (lk_flt_run_frame), given the frame as the engine
 *     holds it, drains it and writes what the view wrote, or the frame
 *     as it came;
 *   - running the chain again on its output changes nothing and counts
 *     nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_location.h"
#include "lk_pulsar_codec.h"
#include "lk_pulsar_view.h"
#include "lk_xchg.h"

static const char *const listeners[4] = {NULL, "other", "internal", "vpn"};
static const char *const conn_brokers[4] = {"prod/b1", "prod/b3", "west/w2", "east/e1"};

static const struct lk_broker *
broker_named(const struct lk_conf *conf, const char *name)
{
    for (size_t k = 0; k < conf->nclusters; k++)
        for (size_t i = 0; i < conf->clusters[k]->nbrokers; i++)
            if (strcmp(conf->clusters[k]->brokers[i]->name, name) == 0)
                return conf->clusters[k]->brokers[i];
    fprintf(stderr, "fuzz: no broker %s in the map\n", name);
    abort();
}

/* An exchange as broker_command builds it, the chain attached, but for
 * the leak guard, which reads what the pulsar filter leaves (its own
 * harness is fuzz_frame_guard). */
static void
xchg_init(struct lk_xchg *x, const struct lk_conf *conf, const struct lk_broker *on,
          const char *listener, int tls)
{
    memset(x, 0, sizeof(*x));
    lk_pool_init(&x->pool);
    x->conf = conf;
    x->cluster = on->cluster;
    x->proto = LK_PROTO_PULSAR;
    x->broker = on;
    x->listener_name = listener != NULL ? listener : on->cluster->lookup_listener;
    x->client_tls = tls;
    lk_flt_attach_all(x);
    for (size_t i = 0; i < x->nflt; i++)
        if (strcmp(x->cluster->filters[i].ops->name, "leak_guard") == 0)
            x->flt[i].attached = 0;
}

static void
xchg_end(struct lk_xchg *x)
{
    lk_flt_detach_all(x);
    lk_pool_free(&x->pool);
}

/* The frame's bytes into b: at once, or in pieces, each its own chain (as
 * evbuffer_remove_buffer leaves a frame that came in several reads). */
static void
fill(struct evbuffer *b, const uint8_t *p, size_t len, int pieces, uint64_t *seed)
{
    if (!pieces) {
        evbuffer_add(b, p, len);
        return;
    }
    for (size_t at = 0; at < len;) {
        size_t n = lk_fuzz_piece(seed, len - at);
        struct evbuffer *t = evbuffer_new();
        evbuffer_add(t, p + at, n);
        evbuffer_add_buffer(b, t);
        evbuffer_free(t);
        at += n;
    }
}

static int
holds(struct evbuffer *b, const uint8_t *p, size_t len)
{
    return evbuffer_get_length(b) == len &&
           (len == 0 || memcmp(evbuffer_pullup(b, -1), p, len) == 0);
}

static void
be32_to(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The frame around cmd; with mismatch, sizes that do not match it. */
static uint8_t *
make_frame(const uint8_t *cmd, size_t len, int mismatch, size_t *flen)
{
    uint8_t *fr = malloc(LK_PULSAR_PREFIX + len + 1);
    uint32_t total = (uint32_t)len + 4, csize = (uint32_t)len;
    size_t n = LK_PULSAR_PREFIX + len;

    if (fr == NULL)
        abort();
    memcpy(fr + LK_PULSAR_PREFIX, cmd, len);
    if (mismatch) {
        switch (len % 4) {
        case 0: /* a payload section of one byte */
            fr[n++] = 0x0e;
            total++;
            break;
        case 1:
            csize--;
            break;
        case 2: /* more than there is */
            total++;
            break;
        default: /* impossible: commandSize past totalSize */
            csize++;
            break;
        }
    }
    be32_to(fr, total);
    be32_to(fr + 4, csize);
    *flen = n;
    return fr;
}

/* ---- the model ------------------------------------------------------- */

/* What becomes of one URL pair (lk_pulsar_pairs). */
struct pexp {
    const struct lk_listener *l; /* the listener it is rewritten into, or NULL: left */
    const struct lk_url *url, *url_tls; /* what it holds then (NULL: cleared) */
    int ch_url, ch_tls;                 /* what it changes */
};

struct expect {
    unsigned rewrite, unmapped; /* as the filter counts them */
    size_t n;                   /* the command's URL pairs */
    struct lk_pulsar_pair *pairs;
    struct pexp *pe;
    int ch_pt; /* what it changes of proxy_through */
    int pt;    /* proxy_through afterwards, as decoded */
};

/* The broker either URL names in cluster cl, url first. */
static const struct lk_broker *
named_in(const struct lk_cluster *cl, const struct lk_pulsar_pair *d)
{
    const struct lk_str *u[2] = {d->has_url ? &d->url : NULL, d->has_url_tls ? &d->url_tls : NULL};
    struct lk_url_parts parts;
    enum lk_scheme scheme;

    for (int i = 0; i < 2; i++) {
        const struct lk_broker *b =
            u[i] != NULL && u[i]->len != 0 ? lk_url_find_broker(cl, *u[i], &parts, &scheme) : NULL;
        if (b != NULL)
            return b;
    }
    return NULL;
}

static const struct lk_broker *
named(const struct lk_xchg *x, const struct lk_pulsar_pair *d)
{
    const struct lk_broker *b = named_in(x->cluster, d);

    for (size_t k = 0; b == NULL && k < x->conf->nclusters; k++) {
        const struct lk_cluster *cl = x->conf->clusters[k];
        if (cl != x->cluster && (cl->proto & LK_PROTO_PULSAR))
            b = named_in(cl, d);
    }
    return b;
}

static int
url_differs(const struct lk_url *want, int has, struct lk_str now)
{
    return want == NULL ? has : !has || !lk_str_eq(now, lk_str_c(want->text));
}

/* Each pair to the listener of the broker it names, the selected one (or,
 * for a broker that lacks it, its cluster's lookup listener); a pair whose
 * plain URL Pulsar requires (a segment's broker_url) takes the pulsar+ssl
 * address there when the listener has no pulsar:// one.  No listener, or
 * one with neither address for such a pair, leaves it, counted unmapped.
 * The frame is re-encoded when a pair or proxy_through changes; then every
 * pair given a listener counts as a rewrite. */
static void
model(const struct lk_xchg *x, int simple, int key, int rd, const uint8_t *cmd, size_t len,
      const struct lk_pulsar_cmd *d, struct expect *e)
{
    unsigned mapped = 0;
    int changed = 0;

    memset(e, 0, sizeof(*e));
    e->pt = d->proxy_through;
    if (x->listener_name == NULL || !simple || rd != 0 || d->npairs == 0)
        return;
    e->n = d->npairs;
    e->pairs = calloc(e->n, sizeof(*e->pairs));
    e->pe = calloc(e->n, sizeof(*e->pe));
    if (e->pairs == NULL || e->pe == NULL)
        abort();
    LK_FUZZ_CHECK(lk_pulsar_pairs(cmd, len, e->pairs, e->n) == (long)e->n);
    for (size_t i = 0; i < e->n; i++) {
        const struct lk_pulsar_pair *p = &e->pairs[i];
        const struct lk_broker *b = named(x, p);
        const struct lk_listener *l =
            b != NULL ? lk_broker_client_listener(b, x->listener_name) : NULL;
        const struct lk_url *plain = l != NULL ? l->addr[LK_SCHEME_PULSAR] : NULL;
        const struct lk_url *tls = l != NULL ? l->addr[LK_SCHEME_PULSAR_SSL] : NULL;
        if (p->url_required && plain == NULL)
            plain = tls;
        if (l != NULL && p->url_required && plain == NULL)
            l = NULL;
        if (l == NULL) {
            e->unmapped++;
            continue;
        }
        mapped++;
        e->pe[i] = (struct pexp){l, plain, tls, url_differs(plain, p->has_url, p->url),
                                 url_differs(tls, p->has_url_tls, p->url_tls)};
        changed |= e->pe[i].ch_url || e->pe[i].ch_tls;
    }
    if (mapped != 0 && key == LK_PULSAR_LOOKUP_RESPONSE &&
        x->cluster->pulsar_routing == LK_PULSAR_ROUTING_SERVICE &&
        d->lookup_type == LK_PULSAR_CONNECT_TO) {
        e->ch_pt = d->proxy_through != 1;
        e->pt = 1;
    }
    e->rewrite = changed || e->ch_pt ? mapped : 0;
}

static void
expect_free(struct expect *e)
{
    free(e->pairs);
    free(e->pe);
}

/* ---- the checks ------------------------------------------------------ */

static void
url_is(int has, struct lk_str v, const struct lk_url *want)
{
    LK_FUZZ_CHECK(has == (want != NULL));
    if (want != NULL)
        LK_FUZZ_CHECK(lk_str_eq(v, lk_str_c(want->text)));
}

/* No internal address of a mapped Pulsar broker in s but those of the
 * listener l (when it is that broker's internal one). */
static void
no_internal(const struct lk_conf *conf, struct lk_str s, const struct lk_listener *l)
{
    struct lk_fuzz_addr addrs[64];
    const char *pats[64];
    size_t lens[64];
    struct lk_fuzz_hits *hits = calloc(1, sizeof(*hits));

    if (hits == NULL)
        abort();
    for (size_t k = 0; k < conf->nclusters; k++) {
        if (!(conf->clusters[k]->proto & LK_PROTO_PULSAR))
            continue;
        size_t n = lk_fuzz_internal_addrs(conf->clusters[k], addrs, 64);
        for (size_t i = 0; i < n; i++)
            pats[i] = addrs[i].text, lens[i] = strlen(addrs[i].text);
        hits->n = 0;
        lk_fuzz_naive_find(pats, lens, n, s.p, s.len, lk_fuzz_hit, hits);
        for (size_t i = 0; i < hits->n; i++)
            LK_FUZZ_CHECK(addrs[hits->h[i].id].broker->internal == l);
    }
    free(hits);
}

/* A rewritten frame against the command it came from. */
static void
check_rewritten(const struct lk_xchg *x, struct evbuffer *out, const uint8_t *cmd, size_t len,
                const struct lk_pulsar_cmd *d, const struct expect *e)
{
    size_t olen = evbuffer_get_length(out);
    const uint8_t *o = evbuffer_pullup(out, -1);
    uint32_t total, csize;
    struct lk_pulsar_cmd d2;

    LK_FUZZ_CHECK(olen > LK_PULSAR_PREFIX);
    LK_FUZZ_CHECK(lk_pulsar_sizes(o, UINT32_MAX, &total, &csize) == 0);
    LK_FUZZ_CHECK(total == olen - 4 && csize == olen - LK_PULSAR_PREFIX);
    const uint8_t *c2 = o + LK_PULSAR_PREFIX;
    LK_FUZZ_CHECK(lk_pulsar_decode(c2, csize, &d2) == 0);
    LK_FUZZ_CHECK(d2.type == d->type);

    /* each pair given a listener holds exactly its addresses (and is gone
     * when it has neither); the others are as they came */
    struct lk_pulsar_pair *p2 = calloc(d2.npairs + 1, sizeof(*p2));
    if (p2 == NULL)
        abort();
    LK_FUZZ_CHECK(lk_pulsar_pairs(c2, csize, p2, d2.npairs) == (long)d2.npairs);
    size_t j = 0;
    int changed = 0;
    for (size_t i = 0; i < e->n; i++) {
        const struct lk_listener *l = e->pe[i].l;
        changed |= e->pe[i].ch_url || e->pe[i].ch_tls;
        if (l == NULL) {
            LK_FUZZ_CHECK(j < d2.npairs);
            LK_FUZZ_CHECK(p2[j].has_url == e->pairs[i].has_url &&
                          lk_str_eq(p2[j].url, e->pairs[i].url));
            LK_FUZZ_CHECK(p2[j].has_url_tls == e->pairs[i].has_url_tls &&
                          lk_str_eq(p2[j].url_tls, e->pairs[i].url_tls));
            j++;
            continue;
        }
        if (e->pe[i].url == NULL && e->pe[i].url_tls == NULL)
            continue; /* both cleared: no pair */
        LK_FUZZ_CHECK(j < d2.npairs);
        url_is(p2[j].has_url, p2[j].url, e->pe[i].url);
        url_is(p2[j].has_url_tls, p2[j].url_tls, e->pe[i].url_tls);
        no_internal(x->conf, p2[j].url, l);
        no_internal(x->conf, p2[j].url_tls, l);
        j++;
    }
    LK_FUZZ_CHECK(j == d2.npairs);
    free(p2);
    LK_FUZZ_CHECK(d2.proxy_through == e->pt);
    LK_FUZZ_CHECK(d2.has_request_id == d->has_request_id && d2.request_id == d->request_id);
    LK_FUZZ_CHECK(d2.lookup_type == d->lookup_type);
    LK_FUZZ_CHECK(d2.has_listener == d->has_listener && lk_str_eq(d2.listener, d->listener));

    /* the fields edited: the pair's own (1 and 2 of LOOKUP_RESPONSE, 3 and
     * 4 of the others), or the message that holds the pairs (2) */
    uint32_t edited[3];
    size_t ne = 0;
    if (d->has_url || d->has_url_tls) {
        uint32_t u = d->type == LK_PULSAR_LOOKUP_RESPONSE ? 1 : 3;
        if (e->pe[0].ch_url)
            edited[ne++] = u;
        if (e->pe[0].ch_tls)
            edited[ne++] = u + 1;
    } else if (changed) {
        edited[ne++] = 2;
    }
    if (e->ch_pt)
        edited[ne++] = 8;
    lk_fuzz_pulsar_same_fields(cmd, len, c2, csize, d->type, edited, ne);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t flags = data[0];
    const uint8_t *cmd = data + 1;
    size_t len = size - 1;
    const struct lk_conf *conf = lk_fuzz_pulsar_map((flags >> 2) & 1);
    const struct lk_broker *on = broker_named(conf, conn_brokers[(flags >> 3) & 3]);
    const char *listener = listeners[flags & 3];
    int tls = (flags >> 5) & 1, mismatch = (flags >> 6) & 1, pieces = (flags >> 7) & 1;
    uint64_t seed = lk_fuzz_seed(data, size);

    if (len > UINT32_MAX - 16)
        return 0;
    size_t flen;
    uint8_t *fr = make_frame(cmd, len, mismatch, &flen);
    /* the engine's reading of the type */
    int type = lk_pulsar_command_type(cmd, len);
    lk_fuzz_pulsar_same_reading(cmd, len);
    int16_t key = (int16_t)(type < 0 ? 0 : type);
    struct lk_pulsar_cmd d;
    int rd = lk_pulsar_decode(cmd, len, &d);
    if (rd == 0)
        LK_FUZZ_CHECK(d.type == key);

    /* the hook itself */
    struct lk_xchg x;
    struct expect e;
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
    int ran = 0;
    xchg_init(&x, conf, on, listener, tls);
    model(&x, !mismatch && len != 0, key, rd, cmd, len, &d, &e);
    for (size_t i = 0; i < x.nflt; i++) {
        struct lk_flt *f = &x.cluster->filters[i];
        struct lk_pulsar_view v;
        if (!x.flt[i].attached || f->ops->pulsar_command == NULL)
            continue;
        LK_FUZZ_CHECK(strcmp(f->ops->name, "pulsar") == 0);
        fill(in, fr, flen, pieces, &seed);
        lk_pulsar_view_init(&v, key, evbuffer_pullup(in, -1), flen, NULL, &x.pool);
        unsigned before = x.rewrites;
        LK_FUZZ_CHECK(f->ops->pulsar_command(f, &x, &v) == LK_FLT_CONTINUE);
        if (lk_pulsar_view_encode(&v, out) == 1)
            evbuffer_drain(in, flen);
        else
            x.rewrites = before; /* counted only when the client gets it */
        ran++;
    }
    /* it sits out an exchange with no listener selected (CONTRACT §3) */
    LK_FUZZ_CHECK(ran == (x.listener_name != NULL));
    LK_FUZZ_CHECK(x.rewrites == e.rewrite && x.unmapped == e.unmapped && x.leaks == 0);
    if (e.rewrite) {
        LK_FUZZ_CHECK(evbuffer_get_length(in) == 0);
        check_rewritten(&x, out, cmd, len, &d, &e);
    } else {
        LK_FUZZ_CHECK(evbuffer_get_length(out) == 0);
        LK_FUZZ_CHECK(!ran || holds(in, fr, flen));
    }
    xchg_end(&x);

    /* the chain runner, on the frame as the engine holds it */
    struct evbuffer *held = evbuffer_new(), *sent = evbuffer_new();
    fill(held, fr, flen, pieces, &seed);
    xchg_init(&x, conf, on, listener, tls);
    lk_flt_run_frame(&x, key, 0, held, sent);
    LK_FUZZ_CHECK(evbuffer_get_length(held) == 0);
    LK_FUZZ_CHECK(x.rewrites == e.rewrite && x.unmapped == e.unmapped && x.leaks == 0);
    if (e.rewrite)
        LK_FUZZ_CHECK(holds(sent, evbuffer_pullup(out, -1), evbuffer_get_length(out)));
    else
        LK_FUZZ_CHECK(holds(sent, fr, flen));
    xchg_end(&x);

    /* and again on what it sent: nothing more to do */
    if (e.rewrite) {
        size_t slen = evbuffer_get_length(sent);
        uint8_t *s = malloc(slen);
        if (s == NULL)
            abort();
        evbuffer_copyout(sent, s, slen);
        fill(held, s, slen, pieces, &seed);
        evbuffer_drain(sent, slen);
        xchg_init(&x, conf, on, listener, tls);
        lk_flt_run_frame(&x, key, 0, held, sent);
        /* (the pairs it could not map are still there, and still counted) */
        LK_FUZZ_CHECK(x.rewrites == 0 && x.unmapped == e.unmapped && x.leaks == 0);
        LK_FUZZ_CHECK(holds(sent, s, slen));
        xchg_end(&x);
        free(s);
    }
    expect_free(&e);
    evbuffer_free(in);
    evbuffer_free(out);
    evbuffer_free(held);
    evbuffer_free(sent);
    free(fr);
    return 0;
}
