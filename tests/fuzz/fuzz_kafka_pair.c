/*
 * Fuzzes the Kafka module (proxy/lk_kafka.c, included here for its
 * statics) as a pair: a client and a broker around one connection, their
 * turns interleaved as the input says, driven through the module's own
 * pumps (pump_requests, pump_responses, client_gone) on bufferevents with
 * no socket and no loop.  The broker is a model of Kafka's: it reads the
 * frames lookout sends it as a broker does (request header v1/v2, a
 * Produce's Acks, SaslHandshake v0's mechanism and then its bare tokens)
 * and answers each in order with the correlation id it got; a Metadata
 * answer (v0-13, encoded here from MetadataResponse.json) names every
 * broker of the map at its internal address.  Every other answer, every
 * broker token and every opaque body is made of bytes below 0x10, which
 * can spell no address.
 *
 * The client sends what the input says: Produce v0-14 with acks 0, 1 or
 * -1 (header tags, client and transactional ids), Metadata v0-14,
 * SaslHandshake v0/v1 with PLAIN, SCRAM-SHA-256, OAUTHBEARER or GSSAPI,
 * bare tokens, other api keys, raw bytes; correlation ids mostly 7, 0 or
 * -1, so that they repeat; in pieces of any size, and it may close in the
 * middle of a frame.  The broker may also send bytes of its own between
 * answers (a broken broker).
 *
 * Invariants:
 *   - no internal host of the map (each is unique to one broker, so this
 *     covers "host" followed by its port in any encoding) appears in the
 *     bytes lookout delivers to the client.  With the Kafka filter, a
 *     Metadata answer read against its own request is rewritten by node
 *     id; read against any other request it would pass untouched, so a
 *     single mispairing is a find.  The map has leak_guard = block, and
 *     the broker names internal addresses wherever Kafka could put one:
 *     a Metadata answer of a version lookout does not know (v14, in v13's
 *     layout), and, among its opaque bytes, any answer of an api that may
 *     carry an address (lk_kafka_response_addrs is not NONE: FindCoordinator
 *     or DescribeQuorum that do not decode, unknown api keys, Produce or
 *     Fetch past the codec's versions, bytes after an answer's last field;
 *     not streamed Fetch answers, whose bytes are records); the guard must close the
 *     connection before any of those reach the client.  Unchecked after
 *     the broker broke the framing (step 7's bytes of its own): then an
 *     answer can sit inside a frame lookout reads as the answer to an
 *     api that carries no address (a Produce v3), which no proxy that
 *     reads only frame prefixes and the answers that may name a broker
 *     can see; a broker that breaks Kafka's framing is outside what
 *     lookout can guard;
 *   - every request reaches the broker as the client sent it but for its
 *     correlation id, which is lookout's next (0, 1, 2...); every bare
 *     SASL token byte for byte;
 *   - every answer reaches the client in order, with the correlation id
 *     of the client's request it answers (while the broker keeps to the
 *     framing), until the connection closes;
 *   - draining (SIGTERM, step 7): no request reaches the broker after the
 *     one under way but those before it; lookout answers Metadata v13 itself
 *     (REBOOTSTRAP_REQUIRED, KIP-1102) only for the client's requests that
 *     follow the last one the broker got, each in order with its
 *     correlation id, and only after every answer the broker gave.
 *
 * Input: a stream of steps, each one byte and the bytes it reads:
 *   0-3  the client queues a frame (kind and fields from what follows);
 *   4    the client's queued bytes go to lookout, a piece at a time;
 *   5    the broker reads what lookout sent and queues its answers;
 *   6    the broker's queued bytes go to lookout, a piece at a time;
 *   7    the broker queues bytes of its own, or (odd next byte) the
 *        client closes, then nothing more happens, or (next byte 2 mod 8)
 *        lookout starts draining, as on SIGTERM.
 * At the end everything queued is delivered until nothing moves.
 */
#include "lk_kafka.c"

#include <event2/event.h>

#include "fuzz_util.h"
#include "lk_runtime.h"
#include "lk_upstream.h"
#include "../unit/lk_test_wire.h" /* struct tb, put(), w8() */

/* Three brokers whose internal hosts are all different. */
static const char map_text[] =
    "[lookout]\n"
    "[kafka events]\n"
    "inter.broker.listener.name = INTERNAL\n"
    "lookupListenerName = EXTERNAL\n"
    "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
    "bootstrap.servers = 127.0.6.100:9092\n"
    "leak_guard = block\n"
    "[broker events/1]\n"
    "advertised.listeners = INTERNAL://10.3.0.11:9092,EXTERNAL://127.0.6.1:9092\n"
    "[broker events/2]\n"
    "advertised.listeners = INTERNAL://kafka-2.kafka.svc.cluster.local:9093,"
    "EXTERNAL://127.0.6.2:9092\n"
    "[broker events/3]\n"
    "advertised.listeners = INTERNAL://[fd00::13]:9094,EXTERNAL://127.0.6.3:9092\n";

static struct lk_conf *
the_map(void)
{
    static struct lk_conf *conf;

    if (conf == NULL)
        conf = lk_fuzz_load(map_text);
    return conf;
}

/* ---- bytes ---------------------------------------------------------- */

static void
w16(struct tb *b, unsigned v)
{
    w8(b, v >> 8);
    w8(b, v);
}

static void
w32(struct tb *b, uint32_t v)
{
    w16(b, v >> 16);
    w16(b, v & 0xffff);
}

static void
wvar(struct tb *b, uint32_t v)
{
    while (v >= 0x80) {
        w8(b, (v & 0x7f) | 0x80);
        v >>= 7;
    }
    w8(b, v);
}

static void
wstr(struct tb *b, int flex, const char *s, size_t n)
{
    if (flex)
        wvar(b, (uint32_t)n + 1);
    else
        w16(b, (unsigned)n);
    put(b, s, n);
}

static uint32_t
r32(struct lk_fuzz_in *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | lk_fuzz_r8(in);
    return v;
}

/* n bytes below 0x10 from the input: no address can be spelt in them. */
static void
opaque(struct tb *b, struct lk_fuzz_in *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        w8(b, lk_fuzz_r8(in) & 0x0f);
}

/* ---- the client ------------------------------------------------------ */

static int32_t
corr_id(struct lk_fuzz_in *in)
{
    unsigned c = lk_fuzz_r8(in);
    switch (c & 3) {
    case 0:
    case 1:
        return 7;
    case 2:
        return (c & 4) ? -1 : 0;
    default:
        return (int32_t)r32(in);
    }
}

/* A request frame: header v1 (or v2 for a flexible one, with tags), then
 * body; the size goes in front. */
static void
frame_head(struct tb *f, struct lk_fuzz_in *in, int16_t key, int16_t ver, int flex)
{
    static const char client_id[] = "fuzz-client-with-a-long-enough-name";
    unsigned c = lk_fuzz_r8(in);
    size_t idlen = c & 0x80 ? 300 : (c & 0x1f);

    w16(f, (uint16_t)key);
    w16(f, (uint16_t)ver);
    w32(f, (uint32_t)corr_id(in));
    if (c & 0x40) {
        w16(f, 0xffff); /* null ClientId */
    } else {
        w16(f, (unsigned)idlen);
        for (size_t i = 0; i < idlen; i++)
            w8(f, (uint8_t)client_id[i % (sizeof(client_id) - 1)]);
    }
    if (flex) {
        unsigned tags = lk_fuzz_r8(in) % 3;
        wvar(f, tags);
        for (unsigned i = 0; i < tags; i++) {
            unsigned n = lk_fuzz_r8(in) % 8;
            wvar(f, i);
            wvar(f, n);
            opaque(f, in, n);
        }
    }
}

static void
client_frame(struct tb *out, struct lk_fuzz_in *in, unsigned kind)
{
    static const char *const mechs[] = {"PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI"};
    struct tb f = {0};
    unsigned v = lk_fuzz_r8(in);

    switch (kind) {
    case 0: { /* Produce v0-14 */
        int16_t ver = (int16_t)(v % 15);
        int flex = ver >= 9;
        unsigned a = lk_fuzz_r8(in);
        frame_head(&f, in, 0, ver, flex);
        if (ver >= 3) {
            if (a & 0x10) {
                if (flex)
                    wvar(&f, 0);
                else
                    w16(&f, 0xffff);
            } else {
                size_t n = a & 0x20 ? 200 : 5;
                wstr(&f, flex, "txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-"
                               "txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-"
                               "txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-"
                               "txn-id-txn-id-txn-id-txn-id-txn-id-txn-id-txn-id",
                     n);
            }
        }
        w16(&f, (a & 3) == 0 ? 0 : (a & 3) == 1 ? 1 : 0xffff); /* Acks */
        opaque(&f, in, lk_fuzz_r8(in) % 32);                          /* TimeoutMs, topics... */
        break;
    }
    case 1: /* Metadata v0-14 */
        frame_head(&f, in, 3, (int16_t)(v % 15), v % 15 >= 9);
        opaque(&f, in, lk_fuzz_r8(in) % 8);
        break;
    case 2: { /* SaslHandshake v0/v1, or a bare token */
        if (v & 0x80) {
            opaque(&f, in, lk_fuzz_r8(in) % 24);
            break;
        }
        const char *m = mechs[(v >> 1) & 3];
        frame_head(&f, in, 17, (int16_t)(v & 1), 0);
        wstr(&f, 0, m, strlen(m));
        break;
    }
    default: /* another api key, or raw bytes */
        if (v & 0x80) {
            opaque(&f, in, lk_fuzz_r8(in) % 16);
            put(out, f.p, f.len);
            free(f.p);
            return;
        }
        /* keys 0-95: the Streams group APIs (88, 89) and a few the codec does
         * not know */
        frame_head(&f, in, (int16_t)(v % 96), (int16_t)(lk_fuzz_r8(in) % 20), 0);
        opaque(&f, in, lk_fuzz_r8(in) % 16);
        break;
    }
    w32(out, (uint32_t)f.len);
    put(out, f.p, f.len);
    free(f.p);
}

/* ---- the broker ------------------------------------------------------ */

struct broker {
    uint64_t rng;   /* its opaque bytes and their lengths */
    struct tb got;  /* what lookout sent, not read yet */
    struct tb out;  /* answers not delivered yet */
    size_t at;      /* stream offset of got.p[0] */
    int bare;       /* client tokens still read bare (after SaslHandshake v0) */
    int closed;     /* it closed the connection */
    int noisy;      /* it sent bytes of its own: answers are no longer 1:1 */
    uint32_t next_id; /* the correlation id lookout must give the next request */
    /* for each answer queued, the client's correlation id it must reach
     * the client with, or BARE */
    int64_t *expect;
    size_t nexpect;
};

#define BARE INT64_MIN

static void
expect(struct broker *br, int64_t v)
{
    br->expect = realloc(br->expect, (br->nexpect + 1) * sizeof(*br->expect));
    if (br->expect == NULL)
        abort();
    br->expect[br->nexpect++] = v;
}

/* An unsigned varint at p[*o..len): 0 with *v, or -1. */
static int
rvar(const uint8_t *p, size_t len, size_t *o, uint32_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift <= 28; shift += 7) {
        if (*o >= len)
            return -1;
        uint8_t b = p[(*o)++];
        *v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* Skips a nullable string with an int16 length at p[*o..len): 0, or -1. */
static int
skip_str16(const uint8_t *p, size_t len, size_t *o)
{
    if (len - *o < 2)
        return -1;
    int16_t n = (int16_t)(p[*o] << 8 | p[*o + 1]);
    *o += 2;
    if (n < -1 || (n > 0 && len - *o < (size_t)n))
        return -1;
    if (n > 0)
        *o += (size_t)n;
    return 0;
}

/* A request's header, as a broker reads it (p: the frame after its size):
 * 0 with *off past it, or -1. */
static int
read_header(const uint8_t *p, size_t len, int flex, size_t *off)
{
    size_t o = 8;
    uint32_t tags, tag, sz;

    if (len < o || skip_str16(p, len, &o) != 0) /* ClientId */
        return -1;
    if (flex) {
        if (rvar(p, len, &o, &tags) != 0)
            return -1;
        for (uint32_t i = 0; i < tags; i++) {
            if (rvar(p, len, &o, &tag) != 0 || rvar(p, len, &o, &sz) != 0 || len - o < sz)
                return -1;
            o += sz;
        }
    }
    *off = o;
    return 0;
}

/* A Produce request's Acks, as Kafka reads it: 0, or -1 when it would not
 * parse (the broker closes). */
static int
produce_acks(const uint8_t *p, size_t len, int16_t ver, int16_t *acks)
{
    int flex = ver >= 9;
    size_t o;

    if (read_header(p, len, flex, &o) != 0)
        return -1;
    if (ver >= 3) {
        if (flex) {
            uint32_t l;
            if (rvar(p, len, &o, &l) != 0 || (l > 1 && len - o < l - 1))
                return -1;
            if (l > 1)
                o += l - 1;
        } else if (skip_str16(p, len, &o) != 0) {
            return -1;
        }
    }
    if (len - o < 2)
        return -1;
    *acks = (int16_t)(p[o] << 8 | p[o + 1]);
    return 0;
}

/* MetadataResponse v0-13 naming every broker of cl at its internal address. */
static void
metadata_answer(struct tb *b, const struct lk_cluster *cl, int16_t v)
{
    int flex = v >= 9;

    if (flex)
        wvar(b, 0); /* response header v1: no tags */
    if (v >= 3)
        w32(b, 0); /* ThrottleTimeMs */
    if (flex)
        wvar(b, (uint32_t)cl->nbrokers + 1);
    else
        w32(b, (uint32_t)cl->nbrokers);
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_url *u = lk_kafka_addr(cl->brokers[i]->internal);
        w32(b, (uint32_t)cl->brokers[i]->node_id);
        wstr(b, flex, u->host, strlen(u->host));
        w32(b, u->port);
        if (v >= 1) { /* Rack: null */
            if (flex)
                wvar(b, 0);
            else
                w16(b, 0xffff);
        }
        if (flex)
            wvar(b, 0);
    }
    if (v >= 2) { /* ClusterId: null */
        if (flex)
            wvar(b, 0);
        else
            w16(b, 0xffff);
    }
    if (v >= 1)
        w32(b, 1); /* ControllerId */
    if (flex)
        wvar(b, 1); /* Topics: none */
    else
        w32(b, 0);
    if (v >= 8 && v <= 10)
        w32(b, 0); /* ClusterAuthorizedOperations */
    if (v >= 13)
        w16(b, 0); /* ErrorCode */
    if (flex)
        wvar(b, 0);
}

static int
bare_rounds(const uint8_t *m, size_t n)
{
    if (n == 5 && memcmp(m, "PLAIN", 5) == 0)
        return 1;
    if (n == 13 && memcmp(m, "SCRAM-SHA-256", 13) == 0)
        return 2;
    if (n == 11 && memcmp(m, "OAUTHBEARER", 11) == 0)
        return 1;
    return 0;
}

/* n opaque bytes of the broker's own (below 0x10, as opaque() writes). */
static void
noise(struct tb *b, struct broker *br, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        br->rng ^= br->rng << 13;
        br->rng ^= br->rng >> 7;
        br->rng ^= br->rng << 17;
        w8(b, (unsigned)(br->rng >> 32) & 0x0f);
    }
}

static size_t
noise_len(struct broker *br, size_t max)
{
    struct tb t = {0};
    noise(&t, br, 1);
    free(t.p);
    return (size_t)(br->rng >> 40) % max;
}

/* Sometimes, one broker's internal host and port as Kafka writes them
 * (a string, then the port as INT32), among the opaque bytes. */
static void
maybe_address(struct tb *b, struct broker *br, const struct lk_cluster *cl, int flex)
{
    struct tb t = {0};
    noise(&t, br, 1);
    free(t.p);
    if ((br->rng >> 33) % 4 != 0 || cl->nbrokers == 0)
        return;
    const struct lk_url *u = lk_kafka_addr(cl->brokers[(br->rng >> 40) % cl->nbrokers]->internal);
    wstr(b, flex, u->host, strlen(u->host));
    w32(b, u->port);
    noise(b, br, noise_len(br, 8));
}

/*
 * Reads every whole frame lookout sent and queues the answers.  sent is
 * every byte the client gave lookout: each frame must be the client's
 * frame at the same offset, byte for byte, but for a Kafka request's
 * correlation id, which must be lookout's next.
 */
static void
broker_read(struct broker *br, const struct lk_cluster *cl, const struct tb *sent)
{
    struct tb a = {0};

    while (!br->closed && br->got.len >= 4) {
        const uint8_t *g = br->got.p;
        uint32_t size = tb_get32(g);
        if (size > (1u << 24))
            goto shut;
        if (br->got.len - 4 < size)
            break;
        const uint8_t *p = g + 4, *c = sent->p + br->at;
        int answer = 1;

        a.len = 0;
        LK_FUZZ_CHECK(br->at + 4 + size <= sent->len);
        /* Once the broker has sent bytes of its own (broken the framing),
         * lookout may read them as the broker's bare SASL token and so
         * leave the bare phase before the broker does: the two views of
         * the stream part, as they would with a real broker that broke
         * it, and nothing about requests is checked from then on. */
        if (br->bare > 0) { /* a SASL token: answered by one of its own */
            if (!br->noisy)
                LK_FUZZ_CHECK(memcmp(g, c, 4 + size) == 0);
            br->bare--;
            noise(&a, br, noise_len(br, 12));
            expect(br, BARE);
            goto send;
        }
        if (size < 8) {
            goto shut;
        }
        /* lookout's own id in the client's frame, nothing else changed */
        if (!br->noisy) {
            LK_FUZZ_CHECK(tb_get32(p + 4) == br->next_id);
            LK_FUZZ_CHECK(memcmp(g, c, 8) == 0 && memcmp(g + 12, c + 12, size - 8) == 0);
        }
        br->next_id = tb_get32(p + 4) + 1;
        int64_t client_corr = (int32_t)tb_get32(c + 8);
        int16_t key = (int16_t)(p[0] << 8 | p[1]), ver = (int16_t)(p[2] << 8 | p[3]);
        w8(&a, p[4]); /* the correlation id it got */
        w8(&a, p[5]);
        w8(&a, p[6]);
        w8(&a, p[7]);
        if (key == 0) {
            int16_t acks;
            if (ver > 13 || produce_acks(p, size, ver, &acks) != 0) {
                goto shut; /* what Kafka does with a request it cannot read */
            }
            answer = acks != 0;
            noise(&a, br, noise_len(br, 16));
            if (lk_kafka_response_addrs(key, ver) != LK_KAFKA_ADDRS_NONE)
                maybe_address(&a, br, cl, ver >= 9);
        } else if (key == 3) {
            metadata_answer(&a, cl, ver <= 13 ? ver : 13); /* v14: as v13 */
        } else if (key == 17 && ver <= 1) {
            size_t o;
            if (read_header(p, size, 0, &o) != 0 || size - o < 2) {
                goto shut;
            }
            size_t n = (size_t)(p[o] << 8 | p[o + 1]);
            if (size - o - 2 < n) {
                goto shut;
            }
            int rounds = bare_rounds(p + o + 2, n);
            w16(&a, rounds != 0 ? 0 : 33); /* UNSUPPORTED_SASL_MECHANISM */
            w32(&a, 0);                    /* Mechanisms: none listed */
            if (ver == 0)
                br->bare = rounds;
        } else {
            noise(&a, br, noise_len(br, 16));
            /* Not in a streamed Fetch or ShareFetch answer: its bytes are
             * records, the users' own, which may hold any text and pass as
             * they are (only the NodeEndpoints tail is lookout's to read:
             * fuzz_kafka_fetch_stream checks it). */
            if (lk_kafka_response_addrs(key, ver) != LK_KAFKA_ADDRS_NONE &&
                !lk_kafka_stream_wanted(key, ver))
                maybe_address(&a, br, cl, br->rng & 1);
        }
        if (answer)
            expect(br, client_corr);
    send:
        tb_drop(&br->got, 4 + size);
        br->at += 4 + size;
        if (answer) {
            w32(&br->out, (uint32_t)a.len);
            put(&br->out, a.p, a.len);
        }
    }
    free(a.p);
    return;
shut:
    free(a.p);
    br->closed = 1;
}

/* ---- the pair ------------------------------------------------------- */

struct pair {
    struct event_base *base;
    struct lk_runtime rt;
    struct lk_worker w;
    struct lk_conn c;
    struct lk_upstream up;
    struct bufferevent *cb[2], *ub[2]; /* [0] lookout's side */
    struct kconn *k;
    struct tb to_client; /* what lookout delivered */
};

static void
pair_init(struct pair *pp, struct lk_conf *conf)
{
    const struct lk_cluster *cl = conf->clusters[0];

    memset(pp, 0, sizeof(*pp));
    pp->base = event_base_new();
    pp->rt.conf = conf;
    pp->w.base = pp->base;
    pp->w.rt = &pp->rt;
    lk_fuzz_bev_pairs(pp->base, pp->cb, pp->ub);
    /* the listener it came in on, as every accepted connection has */
    const struct lk_bind *bind = NULL;
    for (size_t k = 0; k < conf->nbinds && bind == NULL; k++)
        if (conf->binds[k]->proto == LK_PROTO_KAFKA)
            bind = conf->binds[k];
    LK_FUZZ_CHECK(bind != NULL);
    lk_fuzz_conn_init(&pp->c, &pp->w, &pp->rt, conf, bind, pp->cb[0]);
    pp->up.w = &pp->w;
    pp->up.rt = &pp->rt;
    pp->up.broker = cl->brokers[0];
    pp->up.bev = pp->ub[0];
    pp->up.io.bev = pp->ub[0];
    pp->up.io.w = &pp->w;

    /* as start() and lk_pair_start leave it, the broker connected */
    struct kconn *k = lk_palloc(&pp->c.pool, sizeof(*k));
    memset(k, 0, sizeof(*k));
    pp->c.proto = k;
    k->pr.ops = &kafka_pair;
    k->pr.c = &pp->c;
    k->pr.cluster = cl;
    k->pr.broker = cl->brokers[0];
    k->pr.up = &pp->up;
    k->pr.connected = 1;
    lk_pool_cleanup_add(&pp->c.pool, kconn_cleanup, k);
    lk_kafka_reader_init(&k->rq, LK_KAFKA_REQUEST, frame_cap(cl));
    lk_kafka_reader_init(&k->rs, LK_KAFKA_RESPONSE, frame_cap(cl));
    pp->k = k;
}

static void
pair_free(struct pair *pp)
{
    lk_pool_free(&pp->c.pool);
    if (pp->c.extra != NULL && pp->c.extra->close_ev != NULL)
        event_free(pp->c.extra->close_ev);
    free(pp->c.extra);
    for (int i = 0; i < 2; i++) {
        bufferevent_free(pp->cb[i]);
        bufferevent_free(pp->ub[i]);
    }
    event_base_free(pp->base);
    free(pp->to_client.p);
}

/* What lookout wrote to either side, taken by that side. */
static void
collect(struct pair *pp, struct broker *br)
{
    lk_fuzz_take(bufferevent_get_output(pp->cb[0]), &pp->to_client);
    lk_fuzz_take(bufferevent_get_output(pp->ub[0]), &br->got);
}

/* Moves up to n bytes of src into lookout's input on bev (and to log). */
static size_t
deliver(struct tb *src, struct tb *log, struct bufferevent *bev, size_t n)
{
    n = n < src->len ? n : src->len;
    if (n != 0) {
        LK_FUZZ_CHECK(evbuffer_add(bufferevent_get_input(bev), src->p, n) == 0);
        if (log != NULL)
            put(log, src->p, n);
        tb_drop(src, n);
    }
    return n;
}

/* No internal host of the map in what the client got. */
static void
check_client(const struct pair *pp, const struct lk_cluster *cl)
{
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const char *h = lk_kafka_addr(cl->brokers[i]->internal)->host;
        size_t hl = strlen(h);
        LK_FUZZ_CHECK(pp->to_client.len < hl ||
                      memmem(pp->to_client.p, pp->to_client.len, h, hl) == NULL);
    }
}

/* Whether the whole answer frame at f is one lookout wrote itself while
 * draining: no answer of the broker's has 129 (0x81) for bytes (opaque
 * ones are below 0x10, its Metadata answers have ErrorCode 0). */
static int
rebootstrap_answer(const uint8_t *f)
{
    return tb_get32(f) == LK_KAFKA_REBOOTSTRAP_LEN - 4 && f[LK_KAFKA_REBOOTSTRAP_LEN - 3] == 0 &&
           f[LK_KAFKA_REBOOTSTRAP_LEN - 2] == LK_KAFKA_ERR_REBOOTSTRAP_REQUIRED;
}

/* Every whole answer the client got is the broker's, in order, with the
 * correlation id of the client's request it answers (a bare token with
 * none), as long as the broker sent nothing of its own; then lookout's
 * own REBOOTSTRAP_REQUIRED answers, each to the next of the client's
 * requests after what lookout forwarded (at offset fwd of sent), a
 * Metadata v13, and exactly the encoder's bytes for it. */
static void
check_answers(const struct pair *pp, const struct broker *br, const struct tb *sent)
{
    const struct tb *t = &pp->to_client;
    size_t off = 0, i = 0, fwd = br->at + br->got.len;

    while (!br->noisy && t->len - off >= 4 && t->len - off - 4 >= tb_get32(t->p + off)) {
        if (rebootstrap_answer(t->p + off)) {
            uint8_t want[LK_KAFKA_REBOOTSTRAP_LEN];
            const uint8_t *q = sent->p + fwd;
            LK_FUZZ_CHECK(pp->k->pr.draining && i == br->nexpect);
            LK_FUZZ_CHECK(sent->len - fwd >= LK_KAFKA_REQ_PREFIX &&
                          sent->len - fwd - 4 >= tb_get32(q));
            LK_FUZZ_CHECK(q[4] == 0 && q[5] == LK_KAFKA_METADATA && q[6] == 0 && q[7] == 13);
            LK_FUZZ_CHECK(lk_kafka_rebootstrap_answer(13, (int32_t)tb_get32(q + 8), want) ==
                              LK_KAFKA_REBOOTSTRAP_LEN &&
                          memcmp(t->p + off, want, sizeof(want)) == 0);
            fwd += 4 + tb_get32(q);
            off += LK_KAFKA_REBOOTSTRAP_LEN;
            continue;
        }
        LK_FUZZ_CHECK(i < br->nexpect);
        if (br->expect[i] != BARE)
            LK_FUZZ_CHECK(tb_get32(t->p + off) >= 4 &&
                          (int32_t)tb_get32(t->p + off + 4) == (int32_t)br->expect[i]);
        off += 4 + tb_get32(t->p + off);
        i++;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lk_conf *conf = the_map();
    const struct lk_cluster *cl = conf->clusters[0];
    struct lk_fuzz_in in = {data, size, 0};
    struct pair pp;
    struct broker br = {0};
    struct tb client = {0}, sent = {0};
    uint64_t seed = lk_fuzz_seed(data, size);
    int gone = 0;
    static int debug = -1;

    br.rng = seed | 1;
    pair_init(&pp, conf);
    while (in.off < in.len && !pp.k->pr.dead && !gone) {
        unsigned op = lk_fuzz_r8(&in);
        switch (op & 7) {
        case 0:
        case 1:
        case 2:
        case 3:
            client_frame(&client, &in, op & 3);
            break;
        case 4:
            if (deliver(&client, &sent, pp.cb[0], lk_fuzz_piece(&seed, client.len + 1)) != 0)
                pump_requests(&pp.k->pr);
            break;
        case 5:
            broker_read(&br, cl, &sent);
            break;
        case 6:
            if (!br.closed &&
                deliver(&br.out, NULL, pp.ub[0], lk_fuzz_piece(&seed, br.out.len + 1)) != 0)
                pump_responses(&pp.k->pr);
            break;
        default: {
            unsigned b = lk_fuzz_r8(&in);
            if (b & 1) {
                gone = 1;
                client_gone(&pp.k->pr);
            } else if (b % 8 == 2) {
                if (!pp.k->pr.draining)
                    drain(&pp.c);
            } else {
                opaque(&br.out, &in, lk_fuzz_r8(&in) % 16);
                br.noisy = 1;
            }
            break;
        }
        }
        collect(&pp, &br);
    }
    /* the rest, until nothing moves */
    for (int round = 0; round < 64 && !pp.k->pr.dead && !gone; round++) {
        size_t moved = deliver(&client, &sent, pp.cb[0], client.len);
        if (moved != 0)
            pump_requests(&pp.k->pr);
        collect(&pp, &br);
        broker_read(&br, cl, &sent);
        size_t back = br.closed ? 0 : deliver(&br.out, NULL, pp.ub[0], br.out.len);
        if (back != 0 && !pp.k->pr.dead)
            pump_responses(&pp.k->pr);
        collect(&pp, &br);
        if (moved == 0 && back == 0)
            break;
    }
    if (debug < 0)
        debug = getenv("LK_FUZZ_DEBUG") != NULL;
    if (debug) /* where a run ended, for whoever writes seeds */
        fprintf(stderr,
                "client got %zu bytes, dead %d, queued %zu, broker closed %d, left %zu/%zu, "
                "client left %zu, inputs %zu/%zu\n",
                pp.to_client.len, pp.k->pr.dead, pp.k->qlen, br.closed, br.got.len, br.out.len,
                client.len, evbuffer_get_length(bufferevent_get_input(pp.cb[0])),
                evbuffer_get_length(bufferevent_get_input(pp.ub[0])));
    if (!br.noisy)
        check_client(&pp, cl);
    check_answers(&pp, &br, &sent);
    pair_free(&pp);
    free(sent.p);
    free(br.expect);
    free(br.got.p);
    free(br.out.p);
    free(client.p);
    return 0;
}
