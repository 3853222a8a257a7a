/*
 * Helpers shared by the fuzz harnesses (fuzz_util.h).
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "fuzz_util.h"
#include "lk_conf_ready.h"
#include "lk_conn.h"
#include "lk_log.h"
#include "lk_match.h"
#include "lk_pulsar_codec.h"
#include "pulsar.pb-c.h"
#include "../unit/lk_test_wire.h"

uint64_t
lk_fuzz_seed(const uint8_t *data, size_t len)
{
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */

    for (size_t i = 0; i < len; i++)
        h = (h ^ data[i]) * UINT64_C(1099511628211);
    return h | 1;
}

size_t
lk_fuzz_piece(uint64_t *state, size_t left)
{
    uint64_t x = *state;
    size_t n;

    /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    if (left == 0)
        return 0;
    switch (x & 7) {
    case 0: /* the rest at once */
        n = left;
        break;
    case 1: /* byte by byte, a quarter of the time */
    case 2:
        n = 1;
        break;
    case 3:
        n = 1 + (size_t)((x >> 8) % 4);
        break;
    default:
        n = 1 + (size_t)((x >> 8) % 64);
        break;
    }
    return n < left ? n : left;
}

unsigned
lk_fuzz_r8(struct lk_fuzz_in *in)
{
    return in->off < in->len ? in->p[in->off++] : 0;
}

void
lk_fuzz_bev_pairs(struct event_base *base, struct bufferevent *cb[2], struct bufferevent *ub[2])
{
    LK_FUZZ_CHECK(bufferevent_pair_new(base, 0, cb) == 0 && bufferevent_pair_new(base, 0, ub) == 0);
    /* the peers never read: what lookout writes stays in its outputs */
    bufferevent_disable(cb[1], EV_READ | EV_WRITE);
    bufferevent_disable(ub[1], EV_READ | EV_WRITE);
    /* and their bytes come from the harness, not from the peers */
    evbuffer_unfreeze(bufferevent_get_input(cb[0]), 0);
    evbuffer_unfreeze(bufferevent_get_input(ub[0]), 0);
    evbuffer_unfreeze(bufferevent_get_output(cb[0]), 1);
    evbuffer_unfreeze(bufferevent_get_output(ub[0]), 1);
}

void
lk_fuzz_conn_init(struct lk_conn *c, struct lk_worker *w, struct lk_runtime *rt,
                  struct lk_conf *conf, const struct lk_bind *b, struct bufferevent *bev)
{
    c->w = w;
    c->conf = conf;
    c->rt = rt;
    c->bind = b;
    c->bev = bev;
    c->io.bev = bev;
    c->io.w = w;
    c->fd = -1;
    c->peer.family = AF_INET;
    memcpy(c->peer.ip, "\x7f\x00\x00\x01", 4);
    c->peer.port = 1;
    lk_pool_init(&c->pool);
}

size_t
lk_fuzz_take(struct evbuffer *o, struct tb *to)
{
    size_t n = evbuffer_get_length(o);

    if (n != 0) {
        put(to, evbuffer_pullup(o, -1), n);
        LK_FUZZ_CHECK(evbuffer_drain(o, n) == 0);
    }
    return n;
}

/* Every family of b1 on its external listener; b2 only http and pulsar;
 * b3 (an IPv6 internal address) only https outside, so its pulsar
 * addresses have no replacement; b4's internal address is a prefix of
 * b1's ("10.0.0.1:80" and "10.0.0.11:8080"); b5 has binary addresses only
 * (a mixed map: its brokerId, 10.0.0.15 with any port, is an address too).  The second %s adds keys
 * to [pulsar prod], the third sections after it (lk_fuzz_pulsar_map). */
static const char map_fmt[] =
    "[lookout]\n"
    "max_buffer_bytes = 8k\n"
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "webServiceUrl = http://127.0.0.1:8080\n"
    "leak_guard = %s\n"
    "%s"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:pulsar+ssl://10.0.0.11:6651,"
    "internal:http://10.0.0.11:8080,internal:https://10.0.0.11:8443,"
    "external:pulsar://127.0.1.1:6650,external:pulsar+ssl://127.0.1.1:6651,"
    "external:http://127.0.1.1:8080,external:https://127.0.1.1:8443,other:http://127.0.2.1:8080\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080,"
    "internal:pulsar://pulsar-broker-2.pulsar-broker.svc.cluster.local:6650,"
    "external:http://127.0.1.2:8080,external:pulsar://127.0.1.2:6650\n"
    "[broker prod/b3]\n"
    "advertisedListeners = internal:http://[fd00::13]:8080,internal:pulsar://[fd00::13]:6650,"
    "external:https://127.0.1.3:8443\n"
    "[broker prod/b4]\n"
    "advertisedListeners = internal:http://10.0.0.1:80,external:http://127.0.1.4:8080\n"
    "[broker prod/b5]\n"
    "advertisedListeners = internal:pulsar://10.0.0.15:6650,external:pulsar://127.0.1.5:6650\n"
    "%s";

const char lk_fuzz_kafka_guard_map[] =
    "[kafka k]\n"
    "lookupListenerName = EXTERNAL\n"
    "inter.broker.listener.name = INTERNAL\n"
    "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
    "leak_guard = %s\n"
    "[broker k/1]\n"
    "advertised.listeners = INTERNAL://10.0.0.21:9092,EXTERNAL://127.0.0.1:19092\n"
    "[broker k/2]\n"
    "advertised.listeners = INTERNAL://kafka-10.kafka-headless.kafka.svc.cluster.local:9092,"
    "EXTERNAL://127.0.0.1:19093\n"
    /* combined KRaft: a CONTROLLER listener, which lookout does not serve */
    "[broker k/3]\n"
    "advertised.listeners = INTERNAL://10.0.0.23:9092,EXTERNAL://127.0.0.1:19094,"
    "CONTROLLER://10.0.0.23:9093\n";

struct lk_conf *
lk_fuzz_load(const char *text)
{
    char err[512];
    struct lk_conf *conf;

    lk_log_level = LK_ERR; /* the filters' warnings are expected here */
    conf = lk_conf_load_buf("fuzz.conf", text, strlen(text), err, sizeof(err));
    if (conf == NULL) {
        fprintf(stderr, "fuzz: the listener map does not load: %s\n", err);
        abort();
    }
    return conf;
}

static struct lk_conf *
load_map(const char *leak_guard, const char *prod_keys, const char *sections)
{
    char text[4096];

    snprintf(text, sizeof(text), map_fmt, leak_guard, prod_keys, sections);
    return lk_fuzz_load(text);
}

struct lk_conf *
lk_fuzz_map(enum lk_leak_guard mode)
{
    static struct lk_conf *confs[4];
    static const char *const names[] = {"off", "log", "rewrite", "block"};

    if (confs[mode] == NULL)
        confs[mode] = load_map(names[mode], "", "");
    return confs[mode];
}

/* Pulsar brokers elsewhere, for Redirects and TOPIC_MIGRATED that name
 * another cluster.  west: w1's internal addresses are the ones the codec's
 * unit tests write (so that their dumped commands name a mapped broker),
 * its external listener has only pulsar+ssl and its other one only
 * pulsar; w2 has no other listener, so that the cluster's lookup listener
 * stands in for it.  east has no lookupListenerName: a listener e1 lacks
 * has nothing to stand in.  The Kafka broker's addresses are no Pulsar
 * broker's. */
static const char pulsar_sections[] =
    "[pulsar west]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "serviceUrl = pulsar://127.0.4.100:6650\n"
    "pulsar_routing = %s\n"
    "[broker west/w1]\n"
    "advertisedListeners = internal:pulsar://broker-1.pulsar-broker.pulsar.svc.cluster.local:6650,"
    "internal:pulsar+ssl://broker-1.pulsar-broker.pulsar.svc.cluster.local:6651,"
    "internal:http://broker-1.pulsar-broker.pulsar.svc.cluster.local:8080,"
    "external:pulsar+ssl://127.0.4.1:6651,other:pulsar://127.0.4.11:6650\n"
    "[broker west/w2]\n"
    "advertisedListeners = internal:pulsar://10.1.0.12:6650,internal:http://10.1.0.12:8080,"
    "external:pulsar://127.0.4.2:6650,"
    "external:pulsar+ssl://127.0.4.2:6651\n"
    "[pulsar east]\n"
    "internalListenerName = internal\n"
    "serviceUrl = pulsar://127.0.5.100:6650\n"
    "pulsar_routing = %s\n"
    "[broker east/e1]\n"
    "advertisedListeners = internal:pulsar://10.2.0.11:6650,internal:http://10.2.0.11:8080,"
    "other:pulsar://127.0.5.11:6650\n"
    "[kafka events]\n"
    "inter.broker.listener.name = INTERNAL\n"
    "lookupListenerName = EXTERNAL\n"
    "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
    "bootstrap.servers = 127.0.6.100:9092\n"
    "[broker events/1]\n"
    "advertised.listeners = INTERNAL://10.3.0.11:9092,EXTERNAL://127.0.6.1:9092\n";

struct lk_conf *
lk_fuzz_pulsar_map(int service)
{
    static struct lk_conf *confs[2];
    const char *routing = service ? "service" : "per-broker";
    char keys[128], sections[2048];

    service = service != 0;
    if (confs[service] != NULL)
        return confs[service];
    snprintf(keys, sizeof(keys), "serviceUrl = pulsar://127.0.0.100:6650\npulsar_routing = %s\n",
             routing);
    snprintf(sections, sizeof(sections), pulsar_sections, routing, routing);
    confs[service] = load_map("log", keys, sections);
    return confs[service];
}

static int
is_host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

/* strncasecmp stops at a NUL; patterns and text may hold any byte. */
static int
same_folded(const char *a, const char *b, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return 1;
}

size_t
lk_fuzz_naive_find(const char *const *pats, const size_t *lens, size_t npats, const char *text,
                   size_t len, lk_fuzz_find_cb fn, void *arg)
{
    return lk_fuzz_naive_find_flags(pats, lens, NULL, npats, text, len, fn, arg);
}

size_t
lk_fuzz_naive_find_flags(const char *const *pats, const size_t *lens, const unsigned *flags,
                         size_t npats, const char *text, size_t len, lk_fuzz_find_cb fn, void *arg)
{
    size_t found = 0;

    /* By end position, then longest first: the order the matcher reports. */
    for (size_t end = 1; end <= len; end++) {
        int digit_after = end < len && text[end] >= '0' && text[end] <= '9';
        size_t best_len = 0;
        for (;;) {
            /* the longest pattern ending here shorter than the last one */
            size_t pick = npats, plen = 0;
            for (size_t i = 0; i < npats; i++) {
                size_t l = lens[i];
                if (l > end || (best_len != 0 && l >= best_len) || l <= plen)
                    continue;
                size_t start = end - l;
                if (!same_folded(text + start, pats[i], l))
                    continue;
                /* a pattern that repeats an earlier one (ignoring case) is
                 * the earlier one, id and flags */
                size_t first = i;
                for (size_t k = 0; k < i; k++)
                    if (lens[k] == l && same_folded(pats[k], pats[i], l)) {
                        first = k;
                        break;
                    }
                int raw = flags != NULL && (flags[first] & LK_MATCH_RAW);
                if (!raw &&
                    (digit_after || (start > 0 && is_host_char((unsigned char)text[start - 1]))))
                    continue;
                pick = first, plen = l;
            }
            if (pick == npats)
                break;
            if (fn != NULL)
                fn(arg, pick, end - plen, plen);
            found++;
            best_len = plen;
        }
    }
    return found;
}

void
lk_fuzz_hit(void *hits, size_t id, size_t start, size_t len)
{
    struct lk_fuzz_hits *hs = hits;

    if (hs->n < LK_FUZZ_MAX_HITS)
        hs->h[hs->n++] = (struct lk_match_hit){id, (uint64_t)(start + len), len};
}

int
lk_fuzz_hits_same(const struct lk_fuzz_hits *a, const struct lk_fuzz_hits *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->h[i].id != b->h[i].id || a->h[i].end != b->h[i].end || a->h[i].len != b->h[i].len)
            return 0;
    return 1;
}

size_t
lk_fuzz_internal_addrs(const struct lk_cluster *cl, struct lk_fuzz_addr *out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        for (int s = 0; s < LK_SCHEME__COUNT; s++) {
            const struct lk_url *u = b->internal->addr[s];
            if (u == NULL || n + 2 > max)
                continue;
            out[n++] = (struct lk_fuzz_addr){u->text, b, (enum lk_scheme)s};
            out[n++] = (struct lk_fuzz_addr){u->hostport, b, (enum lk_scheme)s};
        }
    }
    return n;
}

struct lk_xchg *
lk_fuzz_xchg_new(struct lk_conf *conf, const struct lk_broker *b, const char *method,
                 const char *target, int tls)
{
    struct lk_xchg *x = calloc(1, sizeof(*x));

    if (x == NULL)
        abort();
    lk_pool_init(&x->pool);
    x->conf = conf;
    x->cluster = b->cluster;
    x->broker = b;
    x->listener_name = b->cluster->lookup_listener; /* the listener filter may change it */
    x->client_tls = tls;
    lk_http_msg_init(&x->req, &x->pool, 1);
    x->req.method = lk_str_c(method);
    x->req.target = lk_str_c(target);
    lk_http_msg_init(&x->res, &x->pool, 0);
    return x;
}

void
lk_fuzz_xchg_free(struct lk_xchg *x)
{
    lk_flt_detach_all(x);
    lk_pool_free(&x->pool);
    free(x);
}

/* ---- a protobuf reader of the harnesses' own -------------------------- */

#define MAXPF 8192

struct pf {
    uint32_t num;
    unsigned wt;
    uint64_t v;         /* wire type 0 */
    const uint8_t *val; /* wire type 2: the content */
    size_t val_len;
    const uint8_t *raw; /* the bytes after the tag, as they came */
    size_t raw_len;
};

int
lk_fuzz_rd_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (*at >= len)
            return -1;
        uint8_t b = p[(*at)++];
        if (shift < 64)
            *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* All the fields of a message, in order; -1 if it is not protobuf. */
static long
fields(const uint8_t *p, size_t len, struct pf *out, size_t max)
{
    size_t at = 0, n = 0;

    while (at < len) {
        uint64_t key, l;
        if (n == max || lk_fuzz_rd_varint(p, len, &at, &key) != 0)
            return -1;
        struct pf *f = &out[n++];
        f->num = (uint32_t)(key >> 3);
        f->wt = (unsigned)(key & 7);
        f->raw = p + at;
        switch (f->wt) {
        case 0:
            if (lk_fuzz_rd_varint(p, len, &at, &f->v) != 0)
                return -1;
            break;
        case 1:
        case 5:
            l = f->wt == 1 ? 8 : 4;
            if (len - at < l)
                return -1;
            at += l;
            break;
        case 2:
            if (lk_fuzz_rd_varint(p, len, &at, &l) != 0 || l > len - at)
                return -1;
            f->val = p + at;
            f->val_len = (size_t)l;
            at += (size_t)l;
            break;
        default:
            return -1;
        }
        f->raw_len = (size_t)(p + at - f->raw);
    }
    return (long)n;
}

/* The fields of proxy/pulsar.proto, by command (the BaseCommand field
 * number, which is its type): field numbers and whether bytes. */
struct decl {
    int type;
    uint32_t nums[9];
    size_t n;
};

static const struct decl decls[] = {
    {LK_PULSAR_CONNECT, {1, 4, 6}, 3},
    {LK_PULSAR_LOOKUP, {1, 2, 3, 7}, 4},
    {LK_PULSAR_LOOKUP_RESPONSE, {1, 2, 3, 4, 5, 6, 7, 8}, 8},
    {LK_PULSAR_CLOSE_PRODUCER, {1, 2, 3, 4}, 4},
    {LK_PULSAR_CLOSE_CONSUMER, {1, 2, 3, 4}, 4},
    {LK_PULSAR_TOPIC_MIGRATED, {1, 2, 3, 4}, 4},
    {LK_PULSAR_SCALABLE_TOPIC_UPDATE, {1, 2}, 2},
    {LK_PULSAR_WATCH_TC_ASSIGNMENTS_UPDATE, {1, 2}, 2},
};
#define NDECLS (sizeof(decls) / sizeof(decls[0]))

static const struct decl *
decl_of(uint32_t num)
{
    for (size_t i = 0; i < NDECLS; i++)
        if ((uint32_t)decls[i].type == num)
            return &decls[i];
    return NULL;
}

static int
declared(const struct decl *d, uint32_t num)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->nums[i] == num)
            return 1;
    return 0;
}

/* The last occurrence of field num, or NULL. */
static const struct pf *
last(const struct pf *f, long n, uint32_t num)
{
    const struct pf *r = NULL;
    for (long i = 0; i < n; i++)
        if (f[i].num == num)
            r = &f[i];
    return r;
}

static int same_message(const uint8_t *p, size_t plen, const uint8_t *q, size_t qlen, int depth);

static int
same_value_at(const struct pf *a, const struct pf *b, int depth)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (a->wt != b->wt)
        return 0;
    if (a->wt == 0)
        return a->v == b->v;
    if (a->wt != 2)
        return a->raw_len == b->raw_len && memcmp(a->raw, b->raw, a->raw_len) == 0;
    return (a->val_len == b->val_len && memcmp(a->val, b->val, a->val_len) == 0) ||
           same_message(a->val, a->val_len, b->val, b->val_len, depth + 1);
}

static int
same_value(const struct pf *a, const struct pf *b)
{
    return same_value_at(a, b, 0);
}

/*
 * Whether p and q, read as messages, hold the same fields: for each field
 * number the same values in the same order, nested messages compared the
 * same way.  Only the order between different numbers may differ, which
 * no reader sees: protobuf-c writes the fields a message declares in
 * number order and its unknown ones after them, so a message nested in a
 * command lookout re-encodes (a SCALABLE_TOPIC_UPDATE's DAG, its segments
 * unknown to proxy/pulsar.proto) can come out reordered.
 */
static int
same_message(const uint8_t *p, size_t plen, const uint8_t *q, size_t qlen, int depth)
{
    struct pf *a, *b;
    long na, nb;
    int same = 1;

    if (depth > 8)
        return 0;
    a = calloc(MAXPF, sizeof(*a));
    b = calloc(MAXPF, sizeof(*b));
    LK_FUZZ_CHECK(a != NULL && b != NULL);
    na = fields(p, plen, a, MAXPF);
    nb = fields(q, qlen, b, MAXPF);
    if (na < 0 || nb < 0 || na != nb)
        same = 0;
    for (long i = 0; same && i < na; i++) {
        long k = 0, j;
        for (long e = 0; e < i; e++)
            k += a[e].num == a[i].num;
        for (j = 0; j < nb; j++)
            if (b[j].num == a[i].num && k-- == 0)
                break;
        same = j < nb && same_value_at(&a[i], &b[j], depth);
    }
    free(a);
    free(b);
    return same;
}

/* The unknown fields of a and b (those d does not declare; for d NULL,
 * BaseCommand's: all but type and the declared commands) are the same,
 * in the same order, with the same bytes. */
static void
same_unknown(const struct decl *d, const struct pf *a, long na, const struct pf *b, long nb)
{
    long i = 0, j = 0;

    for (;;) {
        while (i < na &&
               (d != NULL ? declared(d, a[i].num) : a[i].num == 1 || decl_of(a[i].num) != NULL))
            i++;
        while (j < nb &&
               (d != NULL ? declared(d, b[j].num) : b[j].num == 1 || decl_of(b[j].num) != NULL))
            j++;
        if (i == na || j == nb)
            break;
        LK_FUZZ_CHECK(a[i].num == b[j].num && a[i].wt == b[j].wt);
        LK_FUZZ_CHECK(a[i].raw_len == b[j].raw_len &&
                      memcmp(a[i].raw, b[j].raw, a[i].raw_len) == 0);
        i++, j++;
    }
    LK_FUZZ_CHECK(i == na && j == nb);
}

static struct pf fa[MAXPF], fb[MAXPF], sa[MAXPF], sb[MAXPF];

void
lk_fuzz_pulsar_same_fields(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, int type,
                           const uint32_t *edited, size_t nedited)
{
    long na = fields(a, alen, fa, MAXPF), nb = fields(b, blen, fb, MAXPF);

    LK_FUZZ_CHECK(na >= 0 && nb >= 0);
    LK_FUZZ_CHECK(same_value(last(fa, na, 1), last(fb, nb, 1)));
    same_unknown(NULL, fa, na, fb, nb);
    for (size_t k = 0; k < NDECLS; k++) {
        const struct decl *d = &decls[k];
        const struct pf *ca = last(fa, na, (uint32_t)d->type),
                        *cb = last(fb, nb, (uint32_t)d->type);
        LK_FUZZ_CHECK((ca == NULL) == (cb == NULL));
        if (ca == NULL)
            continue;
        long nsa = fields(ca->val, ca->val_len, sa, MAXPF);
        long nsb = fields(cb->val, cb->val_len, sb, MAXPF);
        LK_FUZZ_CHECK(nsa >= 0 && nsb >= 0);
        for (size_t i = 0; i < d->n; i++) {
            int skip = 0;
            for (size_t e = 0; d->type == type && e < nedited; e++)
                skip |= edited[e] == d->nums[i];
            if (!skip)
                LK_FUZZ_CHECK(same_value(last(sa, nsa, d->nums[i]), last(sb, nsb, d->nums[i])));
        }
        same_unknown(d, sa, nsa, sb, nsb);
    }
}

/* How many type fields (field 1, varint) a BaseCommand has, and the last
 * one's value; -1 if it is not protobuf.  No bound on the fields: a
 * command lookout only types may have any number. */
static long
count_types(const uint8_t *p, size_t len, uint64_t *last_type)
{
    size_t at = 0;
    long n = 0;

    while (at < len) {
        uint64_t key, v;
        if (lk_fuzz_rd_varint(p, len, &at, &key) != 0)
            return -1;
        switch (key & 7) {
        case 0:
            if (lk_fuzz_rd_varint(p, len, &at, &v) != 0)
                return -1;
            if (key >> 3 == 1) {
                n++;
                *last_type = v;
            }
            break;
        case 1:
        case 5:
            if (len - at < ((key & 7) == 1 ? 8u : 4u))
                return -1;
            at += (key & 7) == 1 ? 8 : 4;
            break;
        case 2:
            if (lk_fuzz_rd_varint(p, len, &at, &v) != 0 || v > len - at)
                return -1;
            at += (size_t)v;
            break;
        default:
            return -1;
        }
    }
    return n;
}

static int
same_bytes(int has, struct lk_str s, protobuf_c_boolean pb_has, ProtobufCBinaryData pb)
{
    /* (protobuf-c gives an empty field NULL data) */
    return has == (pb_has != 0) &&
           (!has || (s.len == pb.len && (s.len == 0 || memcmp(s.p, pb.data, s.len) == 0)));
}

/* lookout's URL pair of d is protobuf-c's (h, u) and (ht, ut). */
static void
same_pair(const struct lk_pulsar_cmd *d, protobuf_c_boolean h, ProtobufCBinaryData u,
          protobuf_c_boolean ht, ProtobufCBinaryData ut)
{
    LK_FUZZ_CHECK(same_bytes(d->has_url, d->url, h, u));
    LK_FUZZ_CHECK(same_bytes(d->has_url_tls, d->url_tls, ht, ut));
}

/* lk_pulsar_pairs's pair i is protobuf-c's (h, u) and (ht, ut). */
static void
same_one(const struct lk_pulsar_pair *p, size_t n, size_t i, protobuf_c_boolean h,
         ProtobufCBinaryData u, protobuf_c_boolean ht, ProtobufCBinaryData ut)
{
    if (!h && !ht)
        return; /* no pair */
    LK_FUZZ_CHECK(i < n);
    LK_FUZZ_CHECK(same_bytes(p[i].has_url, p[i].url, h, u));
    LK_FUZZ_CHECK(same_bytes(p[i].has_url_tls, p[i].url_tls, ht, ut));
}

/* The URL pairs lookout reads within SCALABLE_TOPIC_UPDATE (each segment
 * broker's, then the controller's) and WATCH_TC_ASSIGNMENTS_UPDATE (each
 * assignment's) are protobuf-c's, in that order, and no others. */
static void
same_pairs_within(const uint8_t *cmd, size_t len, const struct lk_pulsar_cmd *d,
                  const LkPb__BaseCommand *pb)
{
    struct lk_pulsar_pair *p = calloc(d->npairs + 1, sizeof(*p));
    size_t i = 0;

    if (p == NULL)
        abort();
    LK_FUZZ_CHECK(lk_pulsar_pairs(cmd, len, p, d->npairs) == (long)d->npairs);
    if (d->type == LK_PULSAR_SCALABLE_TOPIC_UPDATE) {
        LK_FUZZ_CHECK(pb->scalabletopicupdate != NULL);
        const LkPb__ScalableTopicDAG *g = pb->scalabletopicupdate->dag;
        for (size_t k = 0; g != NULL && k < g->n_segment_brokers; k++) {
            const LkPb__SegmentBrokerAddress *s = g->segment_brokers[k];
            same_one(p, d->npairs, i, 1, s->broker_url, s->has_broker_url_tls, s->broker_url_tls);
            LK_FUZZ_CHECK(p[i++].url_required);
        }
        if (g != NULL && (g->has_controller_broker_url || g->has_controller_broker_url_tls)) {
            same_one(p, d->npairs, i, g->has_controller_broker_url, g->controller_broker_url,
                     g->has_controller_broker_url_tls, g->controller_broker_url_tls);
            LK_FUZZ_CHECK(!p[i++].url_required);
        }
    } else {
        LK_FUZZ_CHECK(d->type == LK_PULSAR_WATCH_TC_ASSIGNMENTS_UPDATE &&
                      pb->watchtcassignmentsupdate != NULL);
        const LkPb__TcAssignmentsSnapshot *sn = pb->watchtcassignmentsupdate->snapshot;
        for (size_t k = 0; sn != NULL && k < sn->n_assignments; k++) {
            const LkPb__TcAssignment *a = sn->assignments[k];
            if (!a->has_broker_service_url && !a->has_broker_service_url_tls)
                continue;
            same_one(p, d->npairs, i, a->has_broker_service_url, a->broker_service_url,
                     a->has_broker_service_url_tls, a->broker_service_url_tls);
            LK_FUZZ_CHECK(!p[i++].url_required);
        }
    }
    LK_FUZZ_CHECK(i == d->npairs);
    free(p);
}

/* Each field lookout reads is there once: the sub-commands in BaseCommand,
 * the declared fields in the type's. */
static void
once(const uint8_t *cmd, size_t len, int type)
{
    long n = fields(cmd, len, fa, MAXPF);
    const struct pf *sub = NULL;

    LK_FUZZ_CHECK(n >= 0);
    for (size_t k = 0; k < NDECLS; k++) {
        long c = 0;
        for (long i = 0; i < n; i++)
            if (fa[i].num == (uint32_t)decls[k].type) {
                c++;
                if (decls[k].type == type)
                    sub = &fa[i];
            }
        LK_FUZZ_CHECK(c <= 1);
    }
    LK_FUZZ_CHECK(sub != NULL);
    long ns = fields(sub->val, sub->val_len, sa, MAXPF);
    const struct decl *d = decl_of((uint32_t)type);
    LK_FUZZ_CHECK(ns >= 0 && d != NULL);
    for (size_t k = 0; k < d->n; k++) {
        long c = 0;
        for (long i = 0; i < ns; i++)
            c += sa[i].num == d->nums[k];
        LK_FUZZ_CHECK(c <= 1);
    }
}

void
lk_fuzz_pulsar_same_reading(const uint8_t *cmd, size_t len)
{
    uint64_t last_type = 0;
    long ntypes = count_types(cmd, len, &last_type);
    int t = lk_pulsar_command_type(cmd, len);
    LkPb__BaseCommand *pb = lk_pb__base_command__unpack(NULL, len, cmd);
    struct lk_pulsar_cmd d;
    int rd = lk_pulsar_decode(cmd, len, &d);

    if (t >= 0)
        LK_FUZZ_CHECK(ntypes == 1 && last_type == (uint64_t)t);
    if (ntypes >= 2)
        LK_FUZZ_CHECK(t == LK_PULSAR_TYPE_TWICE || t == -2);
    /* (walk_base refuses at the second type, whatever comes after it) */
    if (t == LK_PULSAR_TYPE_TWICE)
        LK_FUZZ_CHECK(ntypes >= 2 || ntypes < 0);
    if (t >= 0 && pb != NULL)
        LK_FUZZ_CHECK(pb->type == (uint64_t)t);
    if (rd == -2)
        LK_FUZZ_CHECK(t >= 0 && d.type == t);
    if (rd != 0)
        goto out;
    LK_FUZZ_CHECK(t == d.type && pb != NULL && pb->type == (uint64_t)d.type);
    once(cmd, len, d.type);
    switch (d.type) {
    case LK_PULSAR_CONNECT:
        LK_FUZZ_CHECK(pb->connect != NULL);
        LK_FUZZ_CHECK(same_bytes(d.has_proxy_to_broker_url, d.proxy_to_broker_url,
                                 pb->connect->has_proxy_to_broker_url,
                                 pb->connect->proxy_to_broker_url));
        break;
    case LK_PULSAR_LOOKUP:
        LK_FUZZ_CHECK(pb->lookuptopic != NULL && pb->lookuptopic->request_id == d.request_id);
        LK_FUZZ_CHECK(same_bytes(d.has_listener, d.listener,
                                 pb->lookuptopic->has_advertised_listener_name,
                                 pb->lookuptopic->advertised_listener_name));
        break;
    case LK_PULSAR_LOOKUP_RESPONSE:
        LK_FUZZ_CHECK(pb->lookuptopicresponse != NULL);
        same_pair(&d, pb->lookuptopicresponse->has_brokerserviceurl,
                  pb->lookuptopicresponse->brokerserviceurl,
                  pb->lookuptopicresponse->has_brokerserviceurltls,
                  pb->lookuptopicresponse->brokerserviceurltls);
        break;
    case LK_PULSAR_CLOSE_PRODUCER:
        LK_FUZZ_CHECK(pb->close_producer != NULL);
        same_pair(&d, pb->close_producer->has_assignedbrokerserviceurl,
                  pb->close_producer->assignedbrokerserviceurl,
                  pb->close_producer->has_assignedbrokerserviceurltls,
                  pb->close_producer->assignedbrokerserviceurltls);
        break;
    case LK_PULSAR_CLOSE_CONSUMER:
        LK_FUZZ_CHECK(pb->close_consumer != NULL);
        same_pair(&d, pb->close_consumer->has_assignedbrokerserviceurl,
                  pb->close_consumer->assignedbrokerserviceurl,
                  pb->close_consumer->has_assignedbrokerserviceurltls,
                  pb->close_consumer->assignedbrokerserviceurltls);
        break;
    case LK_PULSAR_TOPIC_MIGRATED:
        LK_FUZZ_CHECK(pb->topicmigrated != NULL);
        same_pair(&d, pb->topicmigrated->has_brokerserviceurl, pb->topicmigrated->brokerserviceurl,
                  pb->topicmigrated->has_brokerserviceurltls,
                  pb->topicmigrated->brokerserviceurltls);
        break;
    default: /* the pairs within: SCALABLE_TOPIC_UPDATE, WATCH_TC_ASSIGNMENTS_UPDATE */
        same_pairs_within(cmd, len, &d, pb);
        break;
    }
out:
    if (pb != NULL)
        lk_pb__base_command__free_unpacked(pb, NULL);
}

int
lk_fuzz_inside(const char *host)
{
    uint8_t a[16];

    if (inet_pton(AF_INET, host, a) == 1)
        return a[0] == 10;
    if (inet_pton(AF_INET6, host, a) != 1)
        return -1;
    for (int i = 0; i < 10; i++)
        if (a[i] != 0)
            return a[0] == 0xfd;
    if (a[10] == 0xff && a[11] == 0xff)
        return a[12] == 10;
    return 0;
}

/* ---- the Kafka endpoint map ---------------------------------------- */

static char kafka_ext[5][300];
static size_t kafka_ext_len[5];

struct lk_str
lk_fuzz_kafka_ext(int32_t id)
{
    int32_t k = id & 7;

    if (kafka_ext_len[0] == 0)
        for (int i = 0; i < 5; i++) {
            int n = snprintf(kafka_ext[i], sizeof(kafka_ext[i]), "ext-%d.lookout.example", i);
            if (i == 2) /* a host whose compact length takes two bytes */
                while (n < 200)
                    kafka_ext[i][n++] = 'x';
            kafka_ext[i][n] = '\0';
            kafka_ext_len[i] = (size_t)n;
        }
    return lk_str_make(kafka_ext[k % 5], kafka_ext_len[k % 5]);
}

int
lk_fuzz_kafka_rewrites(int32_t id)
{
    return id >= 0 && (id & 7) <= 4;
}

enum lk_kafka_ep
lk_fuzz_kafka_endpoint(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    struct lk_fuzz_kafka_rec *r = arg;
    int32_t k = node_id & 7;

    if (r->n < LK_FUZZ_MAXEP)
        r->ep[r->n++] = (struct lk_fuzz_kafka_ep){node_id, *host, *port};
    if (!r->rewrite || k == 5)
        return LK_KAFKA_EP_KEEP;
    if (!lk_fuzz_kafka_rewrites(node_id))
        return LK_KAFKA_EP_UNKNOWN;
    *host = lk_fuzz_kafka_ext(node_id);
    *port = 9000 + k;
    return LK_KAFKA_EP_REWRITE;
}
