/*
 * Tests for proxy/lk_kafka_codec.c.  Frames are built by a small encoder
 * of this file's own, written from the message specs apart from the
 * codec's walk: every version of every response in the rewrite set is
 * encoded with internal endpoints, rewritten, and must equal, byte for
 * byte, the same message encoded with the external endpoints (so node ids,
 * every other field, unknown tagged fields, compact lengths, tagged-field
 * sizes and the frame size are all checked at once); the way back gives
 * the original; frames already external, or a callback that keeps all,
 * come back unchanged; every truncation is malformed, never a crash.  The
 * frame reader is fed a stream whole and a byte at a time.
 *
 * LK_KAFKA_DUMP=DIR writes each built frame to DIR in the input format of
 * tests/fuzz/fuzz_kafka_response.c, to seed its corpus.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "lk_kafka_codec.h"
#include "lk_kafka_fstream.h"
#include "lk_kafka_view.h"
#include "lk_kafka_wire.h"
#include "lk_test.h"
#include "lk_test_wire.h"

/* ---- a test-side encoder -------------------------------------------- */

static void
w16(struct tb *b, int v)
{
    w8(b, (v >> 8) & 0xff);
    w8(b, v & 0xff);
}

static void
w32(struct tb *b, int64_t v)
{
    for (int s = 24; s >= 0; s -= 8)
        w8(b, (int)(((uint64_t)v >> s) & 0xff));
}

static void
w64(struct tb *b, int64_t v)
{
    w32(b, (int64_t)((uint64_t)v >> 32));
    w32(b, (int64_t)(uint32_t)v);
}

static void
wuv(struct tb *b, uint32_t v)
{
    do {
        w8(b, (int)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
        v >>= 7;
    } while (v != 0);
}

static void
wuuid(struct tb *b, int seed)
{
    for (int i = 0; i < 16; i++)
        w8(b, seed * 31 + i);
}

/* string: classic int16 length or compact; NULL is null */
static void
wstr(struct tb *b, int flex, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (flex)
        wuv(b, s != NULL ? (uint32_t)n + 1 : 0);
    else
        w16(b, s != NULL ? (int)n : -1);
    put(b, s, n);
}

static void
wbytes(struct tb *b, int flex, const uint8_t *d, int n)
{
    if (flex)
        wuv(b, n >= 0 ? (uint32_t)n + 1 : 0);
    else
        w32(b, n);
    if (n > 0)
        put(b, d, (size_t)n);
}

static void
warr(struct tb *b, int flex, int n)
{
    if (flex)
        wuv(b, n >= 0 ? (uint32_t)n + 1 : 0);
    else
        w32(b, n);
}

/* A struct's tagged fields: none, or (unk) two unknown ones. */
static void
wtags(struct tb *b, int flex, int unk)
{
    if (!flex)
        return;
    if (!unk) {
        wuv(b, 0);
        return;
    }
    wuv(b, 2);
    wuv(b, 17);
    wuv(b, 3);
    put(b, "\x01\x02\x03", 3);
    wuv(b, 300); /* a two-byte tag number */
    wuv(b, 1);
    w8(b, 0x5a);
}

/* Sets a frame's size field to what follows it. */
static void
set_size(struct tb *b)
{
    uint32_t s = (uint32_t)b->len - 4;
    b->p[0] = (uint8_t)(s >> 24);
    b->p[1] = (uint8_t)(s >> 16);
    b->p[2] = (uint8_t)(s >> 8);
    b->p[3] = (uint8_t)s;
}

/* ---- messages ------------------------------------------------------- */

struct t_ep {
    int32_t id;
    const char *host;
    int32_t port;
    const char *rack;
};

struct t_msg {
    int16_t key, ver;
    int unk;     /* unknown tagged fields wherever a struct ends */
    int no_tag0; /* Produce/Fetch: no NodeEndpoints tag at all */
    size_t nep;
    struct t_ep ep[64];
    size_t mark; /* set by build: the end of the last field the codec decodes */
    size_t tail_at; /* Fetch v16+, ShareFetch: where Responses end (the streamed tail) */
};

/* First flexible version, from the specs (the codec has its own table). */
static int
t_flex(int key, int ver)
{
    switch (key) {
    case 0:
        return ver >= 9;
    case 1:
        return ver >= 12;
    case 3:
        return ver >= 9;
    case 10:
        return ver >= 3;
    case 18:
        return ver >= 3;
    default:
        return 1; /* 60, 78, 79 */
    }
}

/* NodeId, Host, Port, Rack?, tags: MetadataResponseBroker (v1+),
 * NodeEndpoint, DescribeClusterBroker (without IsFenced). */
static void
w_ep(struct tb *b, int flex, const struct t_ep *e, int rack)
{
    w32(b, e->id);
    wstr(b, flex, e->host);
    w32(b, e->port);
    if (rack)
        wstr(b, flex, e->rack);
}

static void
w_node_endpoints(struct tb *b, struct t_msg *m)
{
    warr(b, 1, (int)m->nep);
    for (size_t i = 0; i < m->nep; i++) {
        w_ep(b, 1, &m->ep[i], 1);
        wtags(b, 1, m->unk);
    }
}

static const uint8_t records[300] = {
    0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 1, 0x20, 'b', 'r', 'o', 'k', 'e', 'r', '-', '1',
};

static void
metadata(struct tb *b, struct t_msg *m, int f)
{
    int v = m->ver;

    if (v >= 3)
        w32(b, 11);
    warr(b, f, (int)m->nep);
    for (size_t i = 0; i < m->nep; i++) {
        w_ep(b, f, &m->ep[i], v >= 1);
        wtags(b, f, m->unk);
    }
    m->mark = b->len;
    if (v >= 2)
        wstr(b, f, v % 2 ? NULL : "cluster-Zx9");
    if (v >= 1)
        w32(b, 2);
    warr(b, f, 2);
    for (int t = 0; t < 2; t++) {
        w16(b, 0);
        wstr(b, f, v >= 12 && t == 1 ? NULL : "orders");
        if (v >= 10)
            wuuid(b, t);
        if (v >= 1)
            w8(b, 0);
        warr(b, f, 2);
        for (int p = 0; p < 2; p++) {
            w16(b, 0);
            w32(b, p);
            w32(b, 1 + p);
            if (v >= 7)
                w32(b, 7);
            for (int a = 0; a < (v >= 5 ? 3 : 2); a++) {
                warr(b, f, 3);
                w32(b, 1);
                w32(b, 2);
                w32(b, 3);
            }
            wtags(b, f, m->unk);
        }
        if (v >= 8)
            w32(b, -2147483647 - 1);
        wtags(b, f, m->unk);
    }
    if (v >= 8 && v <= 10)
        w32(b, 0x0f0f);
    if (v >= 13)
        w16(b, 0);
    wtags(b, f, m->unk);
}

static void
find_coordinator(struct tb *b, struct t_msg *m, int f)
{
    int v = m->ver;

    if (v >= 1)
        w32(b, 0);
    if (v <= 3) {
        w16(b, m->ep[0].id < 0 ? 15 : 0);
        if (v >= 1)
            wstr(b, f, m->ep[0].id < 0 ? "The coordinator is not available." : NULL);
        w_ep(b, f, &m->ep[0], 0);
        m->mark = b->len;
        wtags(b, f, m->unk);
        return;
    }
    warr(b, f, (int)m->nep);
    for (size_t i = 0; i < m->nep; i++) {
        char key[32];
        snprintf(key, sizeof(key), "group-%zu", i);
        wstr(b, f, key);
        w_ep(b, f, &m->ep[i], 0);
        w16(b, m->ep[i].id < 0 ? 15 : 0);
        wstr(b, f, m->ep[i].id < 0 ? "not available" : NULL);
        wtags(b, f, m->unk);
    }
    m->mark = b->len;
    wtags(b, f, m->unk);
}

static void
describe_cluster(struct tb *b, struct t_msg *m, int f)
{
    int v = m->ver;

    w32(b, 0);
    w16(b, 0);
    wstr(b, f, NULL);
    if (v >= 1)
        w8(b, 1);
    wstr(b, f, "cluster-Zx9");
    w32(b, 2);
    warr(b, f, (int)m->nep);
    for (size_t i = 0; i < m->nep; i++) {
        w_ep(b, f, &m->ep[i], 1);
        if (v >= 2)
            w8(b, (int)(i & 1));
        wtags(b, f, m->unk);
    }
    m->mark = b->len;
    w32(b, 0x1234);
    wtags(b, f, m->unk);
}

/* DescribeQuorumResponse v2 (KIP-853), from DescribeQuorumResponse.json:
 * ErrorCode, ErrorMessage?, Topics[]{TopicName, Partitions[]{PartitionIndex,
 * ErrorCode, ErrorMessage?, LeaderId, LeaderEpoch, HighWatermark,
 * CurrentVoters[], Observers[]}}, Nodes[]{NodeId, Listeners[]{Name, Host,
 * Port uint16}}.  Consecutive endpoints of one node id are that node's
 * listeners, in order. */
static void
describe_quorum(struct tb *b, struct t_msg *m, int f)
{
    w16(b, 0);
    wstr(b, f, m->unk ? "a message naming 10.0.0.9:9093 as text" : NULL);
    warr(b, f, 1);
    wstr(b, f, "__cluster_metadata");
    warr(b, f, 1);
    w32(b, 0);
    w16(b, 0);
    wstr(b, f, NULL);
    w32(b, m->nep > 0 ? m->ep[0].id : -1);
    w32(b, 12);
    w64(b, 4242);
    for (int list = 0; list < 2; list++) { /* CurrentVoters, Observers */
        warr(b, f, list ? 1 : 2);
        for (int r = 0; r < (list ? 1 : 2); r++) {
            w32(b, 3000 + r + list * 10);
            wuuid(b, r + 7);
            w64(b, 100 + r);
            w64(b, -1);
            w64(b, 1700000000000);
            wtags(b, f, m->unk);
        }
    }
    wtags(b, f, m->unk);
    wtags(b, f, m->unk);
    int nodes = 0;
    for (size_t i = 0; i < m->nep; i++)
        nodes += i == 0 || m->ep[i].id != m->ep[i - 1].id;
    warr(b, f, nodes);
    for (size_t i = 0, j; i < m->nep; i = j) {
        for (j = i + 1; j < m->nep && m->ep[j].id == m->ep[i].id; j++)
            ;
        w32(b, m->ep[i].id);
        warr(b, f, (int)(j - i));
        for (size_t l = i; l < j; l++) {
            wstr(b, f, l == i ? "CONTROLLER" : "REPLICATION");
            wstr(b, f, m->ep[l].host);
            w16(b, m->ep[l].port);
            wtags(b, f, m->unk);
        }
        wtags(b, f, m->unk);
    }
    wtags(b, f, m->unk);
    m->mark = b->len;
}

/* Top-level tags of Produce/Fetch: NodeEndpoints as tag 0 (unless
 * no_tag0), then (unk) two unknown tags. */
static void
top_tags_tag0(struct tb *b, struct t_msg *m, int with_tag0)
{
    struct tb c = {0};
    int n = (with_tag0 ? 1 : 0) + (m->unk ? 2 : 0);

    wuv(b, (uint32_t)n);
    if (with_tag0) {
        w_node_endpoints(&c, m);
        wuv(b, 0);
        wuv(b, (uint32_t)c.len);
        put(b, c.p, c.len);
    }
    if (m->unk) {
        wuv(b, 4);
        wuv(b, 2);
        w16(b, 0x0a0b);
        wuv(b, 1000);
        wuv(b, 0);
    }
    free(c.p);
}

/* Produce and Fetch: the topic's Name up to v12, its TopicId from v13. */
static void
w_topic(struct tb *b, int f, int v, int t)
{
    if (v <= 12)
        wstr(b, f, "orders");
    else
        wuuid(b, t);
}

static void
produce(struct tb *b, struct t_msg *m, int f)
{
    int v = m->ver;

    warr(b, f, 2);
    for (int t = 0; t < 2; t++) {
        w_topic(b, f, v, t);
        warr(b, f, 2);
        for (int p = 0; p < 2; p++) {
            w32(b, p);
            w16(b, p ? 6 : 0);
            w64(b, 1000 + p);
            if (v >= 2)
                w64(b, -1);
            if (v >= 5)
                w64(b, 0);
            if (v >= 8) {
                warr(b, f, 1);
                w32(b, 0);
                wstr(b, f, "bad record");
                wtags(b, f, m->unk);
                wstr(b, f, p ? "NOT_LEADER_OR_FOLLOWER" : NULL);
            }
            if (f && v >= 10 && p) { /* CurrentLeader, tag 0 */
                wuv(b, 1);
                wuv(b, 0);
                wuv(b, 9);
                w32(b, 2);
                w32(b, 5);
                wuv(b, 0);
            } else {
                wtags(b, f, m->unk);
            }
        }
        wtags(b, f, m->unk);
    }
    if (v >= 1)
        w32(b, 0);
    if (f)
        top_tags_tag0(b, m, v >= 10 && !m->no_tag0);
    m->mark = b->len;
}

static void
fetch(struct tb *b, struct t_msg *m, int f)
{
    int v = m->ver;

    if (v >= 1)
        w32(b, 0);
    if (v >= 7) {
        w16(b, 0);
        w32(b, 0x7777);
    }
    warr(b, f, 2);
    for (int t = 0; t < 2; t++) {
        w_topic(b, f, v, t);
        warr(b, f, 2);
        for (int p = 0; p < 2; p++) {
            w32(b, p);
            w16(b, p ? 6 : 0);
            w64(b, 500);
            if (v >= 4)
                w64(b, 400);
            if (v >= 5)
                w64(b, 0);
            if (v >= 4) {
                if (p) {
                    warr(b, f, -1);
                } else {
                    warr(b, f, 1);
                    w64(b, 42);
                    w64(b, 300);
                    wtags(b, f, m->unk);
                }
            }
            if (v >= 11)
                w32(b, -1);
            wbytes(b, f, records, p ? -1 : (int)sizeof(records));
            if (f && p) { /* CurrentLeader, tag 1 */
                wuv(b, 1);
                wuv(b, 1);
                wuv(b, 9);
                w32(b, 2);
                w32(b, 5);
                wuv(b, 0);
            } else {
                wtags(b, f, m->unk);
            }
        }
        wtags(b, f, m->unk);
    }
    m->tail_at = b->len;
    if (f)
        top_tags_tag0(b, m, v >= 16 && !m->no_tag0);
    m->mark = b->len;
}

/* ShareFetch (fetch) and ShareAcknowledge: the same but for the
 * acknowledge error and the records. */
static void
share(struct tb *b, struct t_msg *m, int f, int fetch_)
{
    w32(b, 0);
    w16(b, 0);
    wstr(b, f, NULL);
    if (m->ver >= (fetch_ ? 1 : 2))
        w32(b, 30000);
    warr(b, f, 1);
    wuuid(b, 3);
    warr(b, f, 2);
    for (int p = 0; p < 2; p++) {
        w32(b, p);
        w16(b, p ? 6 : 0);
        wstr(b, f, p ? "not the leader" : NULL);
        if (fetch_) {
            w16(b, 0);
            wstr(b, f, NULL);
        }
        w32(b, 2);
        w32(b, 5);
        wtags(b, f, m->unk);
        if (fetch_) {
            wbytes(b, f, records, p ? -1 : 40);
            warr(b, f, p ? 0 : 1);
            if (!p) {
                w64(b, 10);
                w64(b, 12);
                w16(b, 1);
                wtags(b, f, m->unk);
            }
        }
        wtags(b, f, m->unk);
    }
    wtags(b, f, m->unk);
    m->tail_at = b->len;
    w_node_endpoints(b, m);
    wtags(b, f, m->unk); /* decoded too: the streamed rewrite pads them */
    m->mark = b->len;
}

/* The whole frame: size, correlation id, header tags (v1), body. */
static struct tb
build(struct t_msg *m)
{
    struct tb b = {0};
    int f = t_flex(m->key, m->ver);

    w32(&b, 0); /* size, set below */
    w32(&b, 0x01020304);
    if (f && m->key != 18)
        wtags(&b, 1, m->unk);
    switch (m->key) {
    case 0:
        produce(&b, m, f);
        break;
    case 1:
        fetch(&b, m, f);
        break;
    case 3:
        metadata(&b, m, f);
        break;
    case 10:
        find_coordinator(&b, m, f);
        break;
    case 55:
        describe_quorum(&b, m, f);
        break;
    case 60:
        describe_cluster(&b, m, f);
        break;
    case 78:
    case 79:
        share(&b, m, f, m->key == 78);
        break;
    }
    set_size(&b);
    return b;
}

/* Writes a frame as a fuzz_kafka_response input when LK_KAFKA_DUMP is set:
 * api key (int16), api version (int16), flags, then the frame after its
 * size field. */
static void
dump(int16_t key, int16_t ver, int flags, const uint8_t *frame, size_t len)
{
    static unsigned seq;
    const char *dir = getenv("LK_KAFKA_DUMP");
    char path[512];

    if (dir == NULL || len < 4)
        return;
    snprintf(path, sizeof(path), "%s/k%d-v%d-%u", dir, key, ver, seq++);
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return;
    uint8_t h[5] = {(uint8_t)(key >> 8), (uint8_t)key, (uint8_t)(ver >> 8), (uint8_t)ver,
                    (uint8_t)flags};
    fwrite(h, 1, 5, fp);
    fwrite(frame + 4, 1, len - 4, fp);
    fclose(fp);
}

/* ---- the endpoint maps ---------------------------------------------- */

#define LONG_HOST                                                                                  \
    "a-host-name-long-enough-that-its-compact-length-takes-two-bytes.kafka.example.com."           \
    "another-label-to-pass-one-hundred-and-twenty-seven.example"

static const struct {
    int32_t id;
    const char *in_host;
    int32_t in_port;
    const char *ex_host;
    int32_t ex_port;
    const char *rack;
} map[] = {
    {1, "broker-1.kafka-internal.svc.cluster.local", 9092, "b1.kafka.example.com", 9093, "r1"},
    {2, "10.0.0.22", 9092, "kafka-broker-number-two.external.example.com", 19092, NULL},
    {3, "broker-3.internal", 9092, "b3.ex", 9092, ""},    /* only the host changes */
    {4, "10.0.0.24", 9092, "10.0.0.24", 29092, "rack-4"}, /* only the port */
    {6, "10.0.0.26", 9092, LONG_HOST, 9096, NULL},
    {1001, "kafka-1001.internal", 9092, "k1001.example.com", 443, "r1"},
};
#define NMAP (sizeof(map) / sizeof(map[0]))

struct t_cb {
    int external; /* rewrite into the external address (else internal) */
    int keep;     /* answer KEEP */
    int calls;
    int32_t ids[128];
};

static enum lk_kafka_ep
on_endpoint(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    struct t_cb *cb = arg;

    if (cb->calls < 128)
        cb->ids[cb->calls] = node_id;
    cb->calls++;
    if (cb->keep)
        return LK_KAFKA_EP_KEEP;
    for (size_t i = 0; i < NMAP; i++)
        if (map[i].id == node_id) {
            *host = lk_str_c(cb->external ? map[i].ex_host : map[i].in_host);
            *port = cb->external ? map[i].ex_port : map[i].in_port;
            return LK_KAFKA_EP_REWRITE;
        }
    return LK_KAFKA_EP_UNKNOWN;
}

/* Fills m with n endpoints from the map (cycling), internal or external. */
static void
fill(struct t_msg *m, size_t n, int external)
{
    m->nep = n;
    for (size_t i = 0; i < n; i++) {
        size_t k = i % NMAP;
        m->ep[i] = (struct t_ep){map[k].id, external ? map[k].ex_host : map[k].in_host,
                                 external ? map[k].ex_port : map[k].in_port, map[k].rack};
    }
}

/* Appends what eb holds to out, and empties it; returns how much. */
static size_t
take(struct tb *out, struct evbuffer *eb)
{
    size_t n = evbuffer_get_length(eb);
    uint8_t *tmp = malloc(n + 1);

    evbuffer_remove(eb, tmp, n);
    put(out, tmp, n);
    free(tmp);
    return n;
}

/* Runs the codec; *out gets the output when rewritten. */
static enum lk_kafka_rw
run(const struct tb *f, int16_t key, int16_t ver, struct t_cb *cb, struct lk_kafka_rewrite *rw,
    struct tb *out)
{
    struct evbuffer *eb = evbuffer_new();
    struct lk_kafka_rewrite local = {0};

    if (rw == NULL)
        rw = &local;
    rw->endpoint = cb != NULL ? on_endpoint : NULL;
    rw->controller = rw->endpoint; /* DescribeQuorum's, asked the same here */
    rw->arg = cb;
    enum lk_kafka_rw rc = lk_kafka_rewrite_response(f->p, f->len, key, ver, rw, eb);
    out->len = 0;
    size_t n = take(out, eb);
    evbuffer_free(eb);
    if (rc != LK_KAFKA_RW_REWRITTEN && n != 0)
        lk_test_diag("output although not rewritten (%zu bytes)", n);
    return rc;
}

static int
same(const struct tb *a, const struct tb *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

/* Where two byte strings first differ, for a failure's diagnostic. */
static void
diff(const struct tb *got, const struct tb *want)
{
    size_t i = 0;
    while (i < got->len && i < want->len && got->p[i] == want->p[i])
        i++;
    lk_test_diag("got %zu bytes, want %zu; first difference at %zu", got->len, want->len, i);
}

/* ---- per message: rewrite, back, identity, truncation --------------- */

static const struct {
    int16_t key, min, max;
} versions[] = {
    {3, 0, 13}, {10, 0, 6}, {60, 0, 2}, {0, 10, 13}, {1, 16, 18}, {78, 0, 2}, {79, 0, 2},
    {55, 2, 2},
};
#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))

static void
check_message(int16_t key, int16_t ver, int unk, size_t nep)
{
    struct t_msg in = {.key = key, .ver = ver, .unk = unk}, ex;
    struct tb fin, fex, out = {0};
    struct t_cb cb = {.external = 1};
    struct lk_kafka_rewrite rw = {0};
    size_t bad = 0;

    fill(&in, nep, 0);
    ex = in;
    fill(&ex, nep, 1);
    fin = build(&in);
    fex = build(&ex);
    dump(key, ver, 0, fin.p, fin.len);
    dump(key, ver, 0, fex.p, fex.len);

    /* internal -> external: exactly the external encoding (no endpoint:
     * nothing to do) */
    enum lk_kafka_rw rc = run(&fin, key, ver, &cb, &rw, &out);
    if (nep == 0)
        ok(rc == LK_KAFKA_RW_UNCHANGED && same(&fin, &fex), "no endpoint: unchanged");
    else if (!ok(rc == LK_KAFKA_RW_REWRITTEN && same(&out, &fex),
                 "rewritten to the external frame"))
        diff(&out, &fex);
    ok(rw.endpoints == nep && rw.changed == nep && rw.unknown == 0 && cb.calls == (int)nep,
       "every endpoint asked and changed (%u %u %u, %d calls)", rw.endpoints, rw.changed,
       rw.unknown, cb.calls);
    int ids_ok = 1;
    for (size_t i = 0; i < nep && i < 128; i++)
        ids_ok &= cb.ids[i] == in.ep[i].id;
    ok(ids_ok, "node ids in order");

    /* and back */
    cb = (struct t_cb){.external = 0};
    rc = run(&fex, key, ver, &cb, NULL, &out);
    if (nep != 0 && !ok(rc == LK_KAFKA_RW_REWRITTEN && same(&out, &fin),
                        "rewritten back to the internal frame"))
        diff(&out, &fin);

    /* the view the filters get: one decode, every endpoint set, one
     * encode, to the same bytes; set to what they are, nothing is written */
    struct lk_pool pool;
    struct lk_kafka_view v;
    struct evbuffer *eb = evbuffer_new();
    int vok;
    lk_pool_init(&pool);
    vok = lk_kafka_view_decode(&v, fin.p, fin.len, key, ver, &pool) == LK_KAFKA_RW_UNCHANGED &&
          v.nep == nep;
    for (size_t i = 0; vok && i < nep; i++)
        vok = v.ep[i].node_id == in.ep[i].id &&
              lk_str_eq(v.ep[i].host, lk_str_c(in.ep[i].host)) &&
              lk_kafka_view_set(&v, i, lk_str_c(ex.ep[i].host), ex.ep[i].port) == 1;
    rc = lk_kafka_view_encode(&v, eb);
    out.len = 0;
    take(&out, eb);
    if (!ok(vok && (nep == 0 ? rc == LK_KAFKA_RW_UNCHANGED && out.len == 0
                             : rc == LK_KAFKA_RW_REWRITTEN && same(&out, &fex)),
            "view: %zu endpoints read and set, written once to the external frame", v.nep))
        diff(&out, &fex);
    /* the splice against the walk it stands for */
    struct tb walked = {0};
    ok(lk_kafka_view_encode_walk(&v, eb) == rc && (take(&walked, eb), same(&walked, &out)),
       "view: the splice writes what the walk writes");
    free(walked.p);
    vok = lk_kafka_view_decode(&v, fex.p, fex.len, key, ver, &pool) == LK_KAFKA_RW_UNCHANGED;
    for (size_t i = 0; vok && i < v.nep; i++)
        vok = lk_kafka_view_set(&v, i, v.ep[i].host, v.ep[i].port) == 0;
    ok(vok && lk_kafka_view_encode(&v, eb) == LK_KAFKA_RW_UNCHANGED &&
           evbuffer_get_length(eb) == 0,
       "view: set to what they are, nothing written");
    evbuffer_free(eb);
    lk_pool_free(&pool);

    /* identity: already external, and a callback that keeps */
    cb = (struct t_cb){.external = 1};
    ok(run(&fex, key, ver, &cb, NULL, &out) == LK_KAFKA_RW_UNCHANGED && out.len == 0,
       "external frame unchanged");
    cb = (struct t_cb){.keep = 1};
    ok(run(&fin, key, ver, &cb, NULL, &out) == LK_KAFKA_RW_UNCHANGED && out.len == 0,
       "keep-all unchanged");
    ok(run(&fin, key, ver, NULL, NULL, &out) == LK_KAFKA_RW_UNCHANGED, "no callback unchanged");

    /* truncations: a short frame (size field not matching) is malformed;
     * a short body with its size fixed is malformed until the last field
     * the codec decodes, and a rewrite after */
    cb = (struct t_cb){.external = 1};
    for (size_t cut = 0; cut < fin.len; cut++) {
        struct tb t = {0};
        put(&t, fin.p, cut);
        if (run(&t, key, ver, &cb, NULL, &out) != LK_KAFKA_RW_MALFORMED)
            bad++;
        if (cut >= 8) {
            set_size(&t);
            rc = run(&t, key, ver, &cb, NULL, &out);
            if (cut < in.mark ? rc != LK_KAFKA_RW_MALFORMED
                              : (nep != 0 && rc != LK_KAFKA_RW_REWRITTEN))
                bad++;
        }
        free(t.p);
    }
    ok(bad == 0, "truncations at every byte (%zu wrong)", bad);
    free(fin.p);
    free(fex.p);
    free(out.p);
}

static void
test_every_version(void)
{
    for (size_t a = 0; a < NVERSIONS; a++)
        for (int16_t v = versions[a].min; v <= versions[a].max; v++)
            for (int unk = 0; unk < 2; unk++) {
                int16_t key = versions[a].key;
                subtest("api %d v%d%s", key, v, unk ? " +unknown tags" : "");
                check_message(key, v, unk, key == 10 && v <= 3 ? 1 : NMAP);
            }
    subtest(NULL);
}

/* FindCoordinator v0-3 with each endpoint as the coordinator. */
static void
test_find_coordinator_single(void)
{
    for (int16_t v = 0; v <= 3; v++)
        for (size_t k = 0; k < NMAP; k++) {
            struct t_msg in = {.key = 10, .ver = v, .nep = 1}, ex;
            struct t_cb cb = {.external = 1};
            struct tb out = {0};
            in.ep[0] = (struct t_ep){map[k].id, map[k].in_host, map[k].in_port, NULL};
            ex = in;
            ex.ep[0].host = map[k].ex_host;
            ex.ep[0].port = map[k].ex_port;
            struct tb fin = build(&in), fex = build(&ex);
            ok(run(&fin, 10, v, &cb, NULL, &out) == LK_KAFKA_RW_REWRITTEN && same(&out, &fex),
               "FindCoordinator v%d node %d", v, map[k].id);
            free(fin.p);
            free(fex.p);
            free(out.p);
        }
}

static enum lk_kafka_ep
on_wide_port(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    (void)arg;
    (void)node_id;
    (void)host;
    *port = 70000;
    return LK_KAFKA_EP_REWRITE;
}

/* DescribeQuorum v2: a controller with two listeners, both asked (by the
 * controller callback, not the broker one) and both rewritten; a port
 * that does not fit its uint16 is refused and counted, the frame left. */
static void
test_describe_quorum(void)
{
    for (int unk = 0; unk < 2; unk++) {
        struct t_msg in = {.key = 55, .ver = 2, .unk = unk, .nep = 3}, ex;
        struct t_cb cb = {.external = 1};
        struct lk_kafka_rewrite rw = {0};
        struct tb out = {0};
        in.ep[0] = (struct t_ep){1, map[0].in_host, map[0].in_port, NULL};
        in.ep[1] = (struct t_ep){1, map[0].in_host, map[0].in_port, NULL};
        in.ep[2] = (struct t_ep){2, map[1].in_host, map[1].in_port, NULL};
        ex = in;
        for (int i = 0; i < 3; i++) {
            ex.ep[i].host = map[i == 2].ex_host;
            ex.ep[i].port = map[i == 2].ex_port;
        }
        struct tb fin = build(&in), fex = build(&ex);
        dump(55, 2, 0, fin.p, fin.len);
        if (!ok(run(&fin, 55, 2, &cb, &rw, &out) == LK_KAFKA_RW_REWRITTEN && same(&out, &fex) &&
                    rw.changed == 3 && cb.calls == 3 && cb.ids[1] == 1,
                "DescribeQuorum v2%s: both listeners of node 1 and node 2's rewritten",
                unk ? " +unknown tags" : ""))
            diff(&out, &fex);
        /* only the controller callback is asked */
        struct evbuffer *eb = evbuffer_new();
        cb = (struct t_cb){.external = 1};
        rw = (struct lk_kafka_rewrite){.endpoint = on_endpoint, .arg = &cb};
        ok(lk_kafka_rewrite_response(fin.p, fin.len, 55, 2, &rw, eb) == LK_KAFKA_RW_UNCHANGED &&
               cb.calls == 0 && rw.endpoints == 3,
           "the broker callback is never asked about a controller");
        evbuffer_free(eb);
        free(fex.p);
        /* a port past 65535 cannot be a uint16: refused, counted, frame left */
        eb = evbuffer_new();
        rw = (struct lk_kafka_rewrite){.controller = on_wide_port};
        ok(lk_kafka_rewrite_response(fin.p, fin.len, 55, 2, &rw, eb) == LK_KAFKA_RW_UNCHANGED &&
               rw.unknown == 3 && rw.changed == 0 && evbuffer_get_length(eb) == 0,
           "a port that is no uint16 is refused and counted");
        evbuffer_free(eb);
        free(fin.p);
        free(out.p);
    }
}

/* Node id -1: never asked about, left as it is. */
static void
test_find_coordinator_none(void)
{
    for (int16_t v = 0; v <= 6; v++) {
        struct t_msg in = {.key = 10, .ver = v, .nep = v <= 3 ? 1 : 3}, ex;
        struct t_cb cb = {.external = 1};
        struct lk_kafka_rewrite rw = {0};
        struct tb out = {0};
        in.ep[0] = (struct t_ep){-1, "", -1, NULL};
        in.ep[1] = (struct t_ep){map[0].id, map[0].in_host, map[0].in_port, NULL};
        in.ep[2] = (struct t_ep){-1, "", -1, NULL};
        ex = in;
        ex.ep[1].host = map[0].ex_host;
        ex.ep[1].port = map[0].ex_port;
        struct tb fin = build(&in), fex = build(&ex);
        enum lk_kafka_rw rc = run(&fin, 10, v, &cb, &rw, &out);
        if (v <= 3)
            ok(rc == LK_KAFKA_RW_UNCHANGED && cb.calls == 0 && rw.skipped == 1,
               "v%d: no coordinator: unchanged, not asked", v);
        else
            ok(rc == LK_KAFKA_RW_REWRITTEN && same(&out, &fex) && cb.calls == 1 && rw.skipped == 2,
               "v%d: the others rewritten, -1 not asked (%d calls)", v, cb.calls);
        free(fin.p);
        free(fex.p);
        free(out.p);
    }
}

/* A node the callback does not know: counted, left as it came. */
static void
test_unknown_node(void)
{
    struct t_msg in = {.key = 3, .ver = 12, .unk = 1}, ex;
    struct t_cb cb = {.external = 1};
    struct lk_kafka_rewrite rw = {0};
    struct tb out = {0};

    fill(&in, 3, 0);
    in.ep[1] = (struct t_ep){5, "broker-5.internal", 9092, NULL};
    ex = in;
    ex.ep[0].host = map[0].ex_host, ex.ep[0].port = map[0].ex_port;
    ex.ep[2].host = map[2].ex_host, ex.ep[2].port = map[2].ex_port;
    struct tb fin = build(&in), fex = build(&ex);
    ok(run(&fin, 3, 12, &cb, &rw, &out) == LK_KAFKA_RW_REWRITTEN && same(&out, &fex),
       "known nodes rewritten");
    ok(rw.unknown == 1 && rw.changed == 2 && rw.endpoints == 3, "one unknown (%u)", rw.unknown);
    free(fin.p);
    free(fex.p);
    free(out.p);
}

/* More endpoints than the codec keeps inline, and tag sizes that change
 * their varint length. */
static void
test_many(void)
{
    static const int16_t keys[][2] = {{3, 0}, {3, 13}, {0, 12}, {1, 17}, {60, 2}, {78, 1}};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        subtest("api %d v%d, 64 endpoints", keys[k][0], keys[k][1]);
        check_message(keys[k][0], keys[k][1], 1, 64);
    }
    subtest("Produce v13 with no endpoints");
    check_message(0, 13, 1, 0);
    subtest(NULL);
}

/* Versions and keys outside the set. */
static void
test_outside(void)
{
    struct t_cb cb = {.external = 1};
    struct tb out = {0}, f = {0};
    struct t_msg m = {.key = 0, .ver = 9};

    /* below the versions with endpoints: never decoded */
    fill(&m, 2, 0);
    for (int16_t v = 0; v <= 9; v++) {
        m.ver = v;
        struct tb p = build(&m);
        ok(run(&p, 0, v, &cb, NULL, &out) == LK_KAFKA_RW_UNCHANGED && cb.calls == 0,
           "Produce v%d unchanged", v);
        free(p.p);
    }
    m.key = 1;
    for (int16_t v = 0; v <= 15; v++) {
        m.ver = v;
        struct tb p = build(&m);
        ok(run(&p, 1, v, &cb, NULL, &out) == LK_KAFKA_RW_UNCHANGED && cb.calls == 0,
           "Fetch v%d unchanged", v);
        free(p.p);
    }
    /* Produce v10+ without the tag */
    m = (struct t_msg){.key = 0, .ver = 11, .no_tag0 = 1, .unk = 1};
    fill(&m, 2, 0);
    struct tb p = build(&m);
    ok(run(&p, 0, 11, &cb, NULL, &out) == LK_KAFKA_RW_UNCHANGED, "Produce v11 without tag 0");
    free(p.p);

    /* an opaque body of a version or key outside */
    w32(&f, 12);
    w32(&f, 7);
    w32(&f, -1);
    w32(&f, 0x12345678);
    static const int16_t t[][3] = {
        {3, 14, LK_KAFKA_RW_UNSUPPORTED},  {0, 14, LK_KAFKA_RW_UNSUPPORTED},
        {1, 19, LK_KAFKA_RW_UNSUPPORTED},  {10, 7, LK_KAFKA_RW_UNSUPPORTED},
        {60, 3, LK_KAFKA_RW_UNSUPPORTED},  {78, 3, LK_KAFKA_RW_UNSUPPORTED},
        {79, 3, LK_KAFKA_RW_UNSUPPORTED},  {18, 5, LK_KAFKA_RW_UNSUPPORTED},
        {200, 0, LK_KAFKA_RW_UNSUPPORTED}, {-1, 0, LK_KAFKA_RW_UNSUPPORTED},
        {90, 0, LK_KAFKA_RW_UNSUPPORTED},  {3, -1, LK_KAFKA_RW_UNSUPPORTED},
        {8, 9, LK_KAFKA_RW_UNCHANGED},     {55, 3, LK_KAFKA_RW_UNSUPPORTED},
        {55, 1, LK_KAFKA_RW_UNCHANGED},    {88, 0, LK_KAFKA_RW_UNCHANGED},
        {89, 1, LK_KAFKA_RW_UNCHANGED},    {88, 2, LK_KAFKA_RW_UNSUPPORTED},
        {0, 3, LK_KAFKA_RW_UNCHANGED},     {1, 4, LK_KAFKA_RW_UNCHANGED},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        ok((int)run(&f, t[i][0], t[i][1], &cb, NULL, &out) == t[i][2], "api %d v%d: %d", t[i][0],
           t[i][1], t[i][2]);
    ok(run(&f, 3, 5, &cb, NULL, &out) == LK_KAFKA_RW_MALFORMED, "garbage Metadata v5 malformed");
    free(f.p);
    free(out.p);
}

/* ---- ApiVersions ---------------------------------------------------- */

struct t_av {
    int16_t key, min, max;
};

static struct tb
api_versions_frame(int ver, int err, const struct t_av *e, size_t n, int unk)
{
    struct tb b = {0};
    int f = ver >= 3;

    w32(&b, 0);
    w32(&b, 77); /* response header v0, always */
    w16(&b, err);
    warr(&b, f, (int)n);
    for (size_t i = 0; i < n; i++) {
        w16(&b, e[i].key);
        w16(&b, e[i].min);
        w16(&b, e[i].max);
        wtags(&b, f, unk);
    }
    if (ver >= 1)
        w32(&b, 0);
    if (f) { /* SupportedFeatures (tag 0) and an unknown one */
        wuv(&b, unk ? 2 : 1);
        struct tb c = {0};
        warr(&c, 1, 1);
        wstr(&c, 1, "metadata.version");
        w16(&c, 1);
        w16(&c, 25);
        wtags(&c, 1, 0);
        wuv(&b, 0);
        wuv(&b, (uint32_t)c.len);
        put(&b, c.p, c.len);
        free(c.p);
        if (unk) {
            wuv(&b, 9);
            wuv(&b, 1);
            w8(&b, 1);
        }
    }
    set_size(&b);
    return b;
}

static void
test_api_versions(void)
{
    static const struct t_av broker[] = {
        {0, 0, 14}, {1, 4, 19}, {2, 0, 10}, {3, 0, 15}, {8, 0, 10}, {10, 0, 6},   {18, 0, 4},
        {60, 0, 2}, {78, 1, 3}, {79, 1, 3}, {55, 0, 3}, {90, 0, 1}, {1000, 0, 0},
        {88, 0, 4}, {89, 0, 1},
    };
    static const struct t_av clamped[] = {
        {0, 0, 13}, {1, 4, 18}, {2, 0, 10}, {3, 0, 13}, {8, 0, 10}, {10, 0, 6},   {18, 0, 4},
        {60, 0, 2}, {78, 1, 2}, {79, 1, 2}, {55, 0, 2}, {90, 0, 1}, {1000, 0, 0},
        {88, 0, 1}, {89, 0, 1},
    };
    static const struct t_av dropped[] = {
        {0, 0, 13}, {1, 4, 18}, {2, 0, 10}, {3, 0, 13}, {8, 0, 10}, {10, 0, 6},
        {18, 0, 4}, {60, 0, 2}, {78, 1, 2}, {79, 1, 2}, {55, 0, 2}, {88, 0, 1},
        {89, 0, 1},
    };
    const size_t nb = sizeof(broker) / sizeof(broker[0]);
    const size_t nd = sizeof(dropped) / sizeof(dropped[0]);
    struct tb out = {0};

    for (int v = 0; v <= 4; v++)
        for (int unk = 0; unk < 2; unk++) {
            struct lk_kafka_rewrite rw = {0};
            struct tb in = api_versions_frame(v, 0, broker, nb, unk);
            struct tb want = api_versions_frame(v, 0, clamped, nb, unk);
            struct tb wantd = api_versions_frame(v, 0, dropped, nd, unk);
            struct tb mid = api_versions_frame(v, 0, clamped, nb, unk);
            dump(18, (int16_t)v, 0, in.p, in.len);
            dump(18, (int16_t)v, 1, in.p, in.len);
            subtest("ApiVersions v%d%s", v, unk ? " +unknown tags" : "");
            ok(run(&in, 18, (int16_t)v, NULL, &rw, &out) == LK_KAFKA_RW_REWRITTEN &&
                   same(&out, &want),
               "clamped, others left");
            ok(rw.clamped == 7 && rw.dropped == 0, "7 clamped (%u)", rw.clamped);
            rw = (struct lk_kafka_rewrite){.drop_unknown_api = 1};
            enum lk_kafka_rw rc = run(&in, 18, (int16_t)v, NULL, &rw, &out);
            if (!ok(rc == LK_KAFKA_RW_REWRITTEN && same(&out, &wantd), "unknown keys dropped"))
                diff(&out, &wantd);
            ok(rw.dropped == 2 && rw.clamped == 7, "2 dropped (%u)", rw.dropped);
            /* already clamped: nothing to do */
            ok(run(&mid, 18, (int16_t)v, NULL, NULL, &out) == LK_KAFKA_RW_UNCHANGED,
               "clamped frame unchanged");
            /* truncations */
            size_t bad = 0;
            for (size_t cut = 8; cut < in.len; cut++) {
                struct tb t = {0};
                put(&t, in.p, cut);
                set_size(&t);
                rc = run(&t, 18, (int16_t)v, NULL, NULL, &out);
                if (rc == LK_KAFKA_RW_UNSUPPORTED)
                    bad++;
                free(t.p);
            }
            ok(bad == 0, "truncations");
            free(in.p);
            free(want.p);
            free(wantd.p);
            free(mid.p);
        }
    subtest(NULL);

    /* a min above what lookout rewrites: the entry goes */
    static const struct t_av high[] = {{3, 14, 15}, {0, 0, 13}};
    static const struct t_av high_out[] = {{0, 0, 13}};
    struct tb in = api_versions_frame(3, 0, high, 2, 0);
    struct tb want = api_versions_frame(3, 0, high_out, 1, 0);
    struct lk_kafka_rewrite rw = {0};
    ok(run(&in, 18, 3, NULL, &rw, &out) == LK_KAFKA_RW_REWRITTEN && same(&out, &want) &&
           rw.dropped == 1,
       "Metadata min 14: removed");
    free(in.p);
    free(want.p);

    /* error 35: a v0 body whatever the request's version, never decoded */
    for (int v = 0; v <= 5; v++) {
        static const struct t_av only[] = {{18, 0, 3}};
        struct tb e35 = api_versions_frame(0, 35, only, 1, 0);
        ok(run(&e35, 18, (int16_t)v, NULL, NULL, &out) ==
               (v <= 4 ? LK_KAFKA_RW_UNCHANGED : LK_KAFKA_RW_UNSUPPORTED),
           "error 35 to v%d passes", v);
        free(e35.p);
    }
    /* the 2.0.2 mock's error-35 body: neither v0 nor v3 */
    struct tb odd = {0};
    w32(&odd, 0);
    w32(&odd, 1);
    w16(&odd, 35);
    w8(&odd, 0x02);
    w16(&odd, 0xffff);
    w8(&odd, 0);
    set_size(&odd);
    ok(run(&odd, 18, 3, NULL, NULL, &out) == LK_KAFKA_RW_UNCHANGED, "odd error-35 body passes");
    free(odd.p);
    free(out.p);
}

/* ---- header versions ------------------------------------------------ */

static void
test_header_version(void)
{
    static const int16_t t[][3] = {
        {18, 0, 0}, {18, 3, 0},  {18, 4, 0},   {18, 9, 0},  {3, 8, 0},  {3, 9, 1},  {3, 13, 1},
        {0, 8, 0},  {0, 9, 1},   {1, 11, 0},   {1, 12, 1},  {10, 2, 0}, {10, 3, 1}, {60, 0, 1},
        {78, 0, 1}, {79, 1, 1},  {17, 1, 0},   {47, 0, 0},  {7, 0, 0},  {7, 3, 1},  {2, 5, 0},
        {2, 6, 1},  {9, 5, 0},   {9, 6, 1},    {11, 6, 1},  {36, 2, 1}, {48, 0, 0}, {48, 1, 1},
        {87, 0, 1}, {88, 0, 1},  {89, 1, 1},   {90, 0, -1}, {200, 0, -1}, {-1, 0, -1},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        ok(lk_kafka_response_header_version(t[i][0], t[i][1]) == t[i][2], "api %d v%d: header v%d",
           t[i][0], t[i][1], t[i][2]);
    ok(lk_kafka_api_known(0) && lk_kafka_api_known(89) && !lk_kafka_api_known(90) &&
           !lk_kafka_api_known(-1),
       "known keys");
    ok(lk_kafka_response_wanted(3, 0, 0) && lk_kafka_response_wanted(0, 10, 0) &&
           !lk_kafka_response_wanted(0, 9, 0) && !lk_kafka_response_wanted(1, 15, 0) &&
           lk_kafka_response_wanted(1, 16, 0) && lk_kafka_response_wanted(18, 0, 0) &&
           !lk_kafka_response_wanted(8, 0, 0) && !lk_kafka_response_wanted(200, 0, 0),
       "wanted");
    /* Every answer that may carry an address is held, at any version; an
     * unknown api key only when asked (leak_guard = block). */
    ok(lk_kafka_response_wanted(3, 14, 0) && lk_kafka_response_wanted(3, 32767, 0) &&
           lk_kafka_response_wanted(10, 7, 0) && lk_kafka_response_wanted(60, 3, 0) &&
           lk_kafka_response_wanted(55, 2, 0) && !lk_kafka_response_wanted(1, 19, 0) &&
           !lk_kafka_response_wanted(0, 14, 1) &&
           lk_kafka_response_wanted(200, 0, 1) && lk_kafka_response_wanted(90, 0, 1) &&
           !lk_kafka_response_wanted(88, 0, 1) && !lk_kafka_response_wanted(89, 1, 1) &&
           lk_kafka_response_wanted(88, 2, 0) && !lk_kafka_response_wanted(55, 1, 0) &&
           lk_kafka_response_wanted(55, 3, 0) && lk_kafka_response_wanted(59, 1, 0) &&
           !lk_kafka_response_wanted(8, 0, 1) && !lk_kafka_response_wanted(0, 9, 1) &&
           lk_kafka_response_wanted(32, 1, 0) && lk_kafka_response_wanted(32, 4, 0),
       "wanted: unknown versions, DescribeQuorum v2+, DescribeConfigs, unknown keys with "
       "leak_guard = block; "
       "never records of a version the codec cannot read (Fetch v19, Produce v14), nor the "
       "Streams answers it has read (application endpoints, KIP-1071)");
    static const struct {
        int16_t key, version;
        enum lk_kafka_addrs want;
    } a[] = {
        {3, 0, LK_KAFKA_ADDRS_DECODED},   {3, 13, LK_KAFKA_ADDRS_DECODED},
        {3, 14, LK_KAFKA_ADDRS_BYTES},    {10, 7, LK_KAFKA_ADDRS_BYTES},
        {60, 3, LK_KAFKA_ADDRS_BYTES},    {55, 2, LK_KAFKA_ADDRS_DECODED},
        {55, 1, LK_KAFKA_ADDRS_NONE},     {55, 3, LK_KAFKA_ADDRS_BYTES},
        {88, 0, LK_KAFKA_ADDRS_NONE},     {89, 1, LK_KAFKA_ADDRS_NONE},
        {88, 2, LK_KAFKA_ADDRS_BYTES},    {89, 2, LK_KAFKA_ADDRS_BYTES},
        {52, 1, LK_KAFKA_ADDRS_BYTES},    {82, 0, LK_KAFKA_ADDRS_BYTES},
        {59, 0, LK_KAFKA_ADDRS_BYTES},    {59, 1, LK_KAFKA_ADDRS_BYTES},
        {58, 0, LK_KAFKA_ADDRS_NONE},     {60, 0, LK_KAFKA_ADDRS_DECODED},
        {200, 0, LK_KAFKA_ADDRS_BYTES},   {-1, 0, LK_KAFKA_ADDRS_BYTES},
        {0, 9, LK_KAFKA_ADDRS_NONE},      {0, 10, LK_KAFKA_ADDRS_DECODED},
        {0, 14, LK_KAFKA_ADDRS_RECORDS},  {1, 15, LK_KAFKA_ADDRS_NONE},
        {1, 18, LK_KAFKA_ADDRS_DECODED},  {1, 19, LK_KAFKA_ADDRS_RECORDS},
        {78, 3, LK_KAFKA_ADDRS_RECORDS},  {79, 3, LK_KAFKA_ADDRS_RECORDS},
        {18, 3, LK_KAFKA_ADDRS_NONE},     {8, 0, LK_KAFKA_ADDRS_NONE},
        {3, -1, LK_KAFKA_ADDRS_BYTES},    {88, -1, LK_KAFKA_ADDRS_BYTES},
        {0, -1, LK_KAFKA_ADDRS_BYTES},    {8, -32768, LK_KAFKA_ADDRS_BYTES},
        {32, 0, LK_KAFKA_ADDRS_BYTES},    {32, 4, LK_KAFKA_ADDRS_BYTES},
        {32, 5, LK_KAFKA_ADDRS_BYTES},    {19, 7, LK_KAFKA_ADDRS_NONE},
    };
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
        ok(lk_kafka_response_addrs(a[i].key, a[i].version) == a[i].want, "api %d v%d: addrs %d",
           a[i].key, a[i].version, (int)a[i].want);
    ok(lk_kafka_rewrite_max_version(3) == 13 && lk_kafka_rewrite_max_version(0) == 13 &&
           lk_kafka_rewrite_max_version(1) == 18 && lk_kafka_rewrite_max_version(10) == 6 &&
           lk_kafka_rewrite_max_version(60) == 2 && lk_kafka_rewrite_max_version(78) == 2 &&
           lk_kafka_rewrite_max_version(79) == 2 && lk_kafka_rewrite_max_version(8) == -1 &&
           lk_kafka_rewrite_max_version(55) == 2 && lk_kafka_rewrite_max_version(88) == -1,
       "max versions");
    ok(lk_kafka_clamp_version(55) == 2 && lk_kafka_clamp_version(88) == 1 &&
           lk_kafka_clamp_version(89) == 1 && lk_kafka_clamp_version(3) == 13 &&
           lk_kafka_clamp_version(8) == -1 && lk_kafka_clamp_version(90) == -1,
       "clamp versions: the rewrite set's, and Streams to the layouts read");
}

/* ---- the frame reader ----------------------------------------------- */

struct t_frame {
    int32_t size;
    int16_t key, ver;
    int32_t corr;
    size_t start, end; /* stream offsets */
};

static size_t
t_request(struct tb *b, int32_t size, int16_t key, int16_t ver, int32_t corr)
{
    size_t start = b->len;
    w32(b, size);
    w16(b, key);
    w16(b, ver);
    w32(b, corr);
    for (int32_t i = 8; i < size; i++)
        w8(b, i);
    return start;
}

/* Reads the stream in pieces of `piece` bytes (0: all at once); records
 * frames; returns -1 on a reader error, else the number of frames. */
static int
read_stream(const struct tb *s, size_t piece, uint32_t max, struct t_frame *fr, int nfr,
            int counted)
{
    struct lk_kafka_reader r;
    size_t at = 0;
    int n = 0;

    lk_kafka_reader_init(&r, LK_KAFKA_REQUEST, max);
    size_t start = 0;
    while (at < s->len) {
        size_t len = piece != 0 && s->len - at > piece ? piece : s->len - at, used;
        /* in the body the reader only counts: hand it NULL */
        const uint8_t *p = counted && lk_kafka_reader_in_body(&r) ? NULL : s->p + at;
        int ev = lk_kafka_reader_feed(&r, p, len, &used);
        if (ev < 0)
            return -1;
        if (used == 0 && len != 0)
            return -2; /* no progress */
        if (ev & LK_KAFKA_RD_PREFIX) {
            if (n == nfr)
                return -3;
            fr[n] = (struct t_frame){r.prefix.size,
                                     r.prefix.api_key,
                                     r.prefix.api_version,
                                     r.prefix.correlation_id,
                                     start,
                                     0};
            /* the body still to come; after the end, the next prefix */
            if (lk_kafka_reader_want(&r) !=
                (ev & LK_KAFKA_RD_END ? LK_KAFKA_REQ_PREFIX : (size_t)r.prefix.size - 8))
                return -4;
        }
        at += used;
        if (ev & LK_KAFKA_RD_END) {
            fr[n++].end = at;
            start = at;
        }
    }
    return n;
}

static void
test_reader(void)
{
    struct tb s = {0};
    struct t_frame want[4], got[8];

    want[0] = (struct t_frame){8, 18, 3, 1, t_request(&s, 8, 18, 3, 1), 0};
    want[1] = (struct t_frame){30, 3, 12, 2, t_request(&s, 30, 3, 12, 2), 0};
    want[2] = (struct t_frame){1000, 0, 11, -5, t_request(&s, 1000, 0, 11, -5), 0};
    /* a future request header: only the prefix is read */
    want[3] = (struct t_frame){9, 18, 99, 0x7fffffff, t_request(&s, 9, 18, 99, 0x7fffffff), 0};
    for (int i = 0; i < 4; i++)
        want[i].end = i < 3 ? want[i + 1].start : s.len;

    static const size_t pieces[] = {0, 1, 2, 3, 5, 7, 11, 12, 13, 4096};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++)
        for (int counted = 0; counted < 2; counted++) {
            int n = read_stream(&s, pieces[k], 1 << 20, got, 8, counted);
            int good = n == 4;
            for (int i = 0; good && i < 4; i++)
                good = got[i].size == want[i].size && got[i].key == want[i].key &&
                       got[i].ver == want[i].ver && got[i].corr == want[i].corr &&
                       got[i].start == want[i].start && got[i].end == want[i].end;
            ok(good, "pieces of %zu%s: 4 frames, prefixes and boundaries (%d)", pieces[k],
               counted ? ", body counted" : "", n);
        }
    free(s.p);

    /* sizes at the limits, fed a byte at a time */
    static const struct {
        int32_t size;
        int ok;
    } lim[] = {{-1, 0},        {0, 0}, {7, 0}, {8, 1}, {100, 1}, {101, 0}, {-2147483647 - 1, 0},
               {0x7fffffff, 0}};
    for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
        struct tb t = {0};
        w32(&t, lim[i].size);
        w16(&t, 3);
        w16(&t, 1);
        w32(&t, 9);
        for (int32_t j = 8; j < (lim[i].ok ? lim[i].size : 8); j++)
            w8(&t, 0);
        int n = read_stream(&t, 1, 100, got, 8, 0);
        ok(lim[i].ok ? n == 1 && got[0].end == t.len : n == -1, "size %d with max 100: %s",
           lim[i].size, lim[i].ok ? "one frame" : "error");
        free(t.p);
    }

    /* the error comes with the size, before the rest of the prefix */
    struct lk_kafka_reader r;
    size_t used;
    lk_kafka_reader_init(&r, LK_KAFKA_REQUEST, 100);
    ok(lk_kafka_reader_feed(&r, (const uint8_t *)"\x15\x03\x03\x00\x02\x02\x0a", 7, &used) == -1 &&
           used == 4,
       "a TLS alert read as a size fails at byte 4");
    ok(lk_kafka_reader_feed(&r, (const uint8_t *)"\0", 1, &used) == -1 && used == 0,
       "and stays failed");

    /* responses: size and correlation id */
    lk_kafka_reader_init(&r, LK_KAFKA_RESPONSE, 100);
    int ev = lk_kafka_reader_feed(&r, (const uint8_t *)"\0\0\0\x06\0\0\0\x2a\xff\xff", 10, &used);
    ok(ev == LK_KAFKA_RD_PREFIX && used == 8 && r.prefix.correlation_id == 42 &&
           r.prefix.api_key == -1 && lk_kafka_reader_want(&r) == 2,
       "response prefix");
    ev = lk_kafka_reader_feed(&r, NULL, 5, &used);
    ok(ev == LK_KAFKA_RD_END && used == 2, "response end");
    lk_kafka_reader_init(&r, LK_KAFKA_RESPONSE, 100);
    ok(lk_kafka_reader_feed(&r, (const uint8_t *)"\0\0\0\x03", 4, &used) == -1,
       "response size 3 fails");
    lk_kafka_reader_init(&r, LK_KAFKA_RESPONSE, 100);
    ok(lk_kafka_reader_feed(&r, (const uint8_t *)"\0\0\0\x04\0\0\0\x01", 8, &used) ==
           (LK_KAFKA_RD_PREFIX | LK_KAFKA_RD_END),
       "response size 4: prefix and end");
}

/* A SaslHandshake v0 request (RequestHeader v1): client id (NULL: null)
 * and mechanism; size_fix is added to the size field. */
static void
t_handshake(struct tb *b, const char *client, const char *mech, int size_fix)
{
    size_t c = client != NULL ? strlen(client) : 0, m = mech != NULL ? strlen(mech) : 0;

    w32(b, (int64_t)(8 + 2 + c + 2 + m) + size_fix);
    w16(b, LK_KAFKA_SASL_HANDSHAKE);
    w16(b, 0);
    w32(b, 7);
    wstr(b, 0, client);
    wstr(b, 0, mech);
}

/* A Produce request vN's head (the size field as if the frame were whole,
 * the size field included in the bytes): client id, header tags (v9+),
 * TransactionalId (v3+), Acks, TimeoutMs. */
static void
t_produce(struct tb *b, int v, const char *client, int tags, const char *txn, int acks)
{
    struct tb h = {0};
    int flex = v >= 9;

    w16(&h, LK_KAFKA_PRODUCE);
    w16(&h, v);
    w32(&h, 7);
    wstr(&h, 0, client); /* ClientId: int16 length in header v2 too */
    if (flex) {
        wuv(&h, (uint32_t)tags);
        for (int i = 0; i < tags; i++) {
            wuv(&h, (uint32_t)i);
            wuv(&h, 3);
            put(&h, "abc", 3);
        }
    }
    if (v >= 3)
        wstr(&h, flex, txn);
    w16(&h, acks);
    w32(&h, 30000);
    w32(b, (int64_t)h.len + 100); /* records follow */
    put(b, h.p, h.len);
    free(h.p);
}

/* What lookout decides for a Produce frame of len bytes at p that comes
 * in pieces, have[0] < have[1] < ... bytes of it in (the last the whole
 * frame), as produce_answered does: its head is read again only when
 * lk_kafka_produce_head_due says; 1 answered, 0 acks=0, -2 undecided.
 * *reads counts the readings, *at the bytes in when it was decided. */
static int
produce_pieces(const uint8_t *p, size_t len, const size_t *have, int n, int *reads, size_t *at)
{
    size_t lim = len < LK_KAFKA_PRODUCE_HEAD_MAX ? len : LK_KAFKA_PRODUCE_HEAD_MAX, tried = 0;

    *reads = 0;
    for (int i = 0; i < n; i++) {
        size_t h = have[i] < lim ? have[i] : lim;
        int16_t acks = 1;
        if (!lk_kafka_produce_head_due(tried, h, lim))
            continue;
        ++*reads;
        int r = lk_kafka_produce_acks(p, h, &acks);
        if (r == -2 && h < lim) {
            tried = h;
            continue;
        }
        *at = have[i];
        return r != 0 || acks != 0;
    }
    return -2;
}

/* A v9 Produce whose header carries 3000 tagged fields, split at every
 * offset and trickled a byte at a time: acks decided as from the whole
 * frame, and the head read a logarithmic number of times. */
static void
test_produce_head_trickle(void)
{
    static const uint8_t recs[100];
    struct tb t = {0};

    for (int a = 0; a <= 1; a++) {
        t.len = 0;
        t_produce(&t, 9, "producer-1", 3000, "txn", a);
        size_t head = t.len;
        put(&t, recs, sizeof(recs));
        size_t *have = malloc(t.len * sizeof(*have));
        int reads, bad = 0, most = 0;
        size_t at = 0;
        for (size_t s = 1; s < t.len; s++) {
            size_t two[2] = {s, t.len};
            if (produce_pieces(t.p, t.len, two, 2, &reads, &at) != a)
                bad++;
            most = reads > most ? reads : most;
        }
        ok(bad == 0 && most <= 2,
           "Produce v9, acks %d, %zu bytes of head: split at every offset, "
           "decided right (%d wrong), read at most twice (%d)",
           a, head, bad, most);
        for (size_t i = 0; i < t.len; i++)
            have[i] = i + 1;
        int r = produce_pieces(t.p, t.len, have, (int)t.len, &reads, &at);
        int bound = 2;
        for (size_t n = t.len; n > 1; n /= 2)
            bound++;
        ok(r == a && reads <= bound && at <= 2 * head,
           "a byte at a time: decided right (%d), its head read %d times of %zu arrivals (at most "
           "%d), decided with %zu bytes in (head %zu)",
           r, reads, t.len, bound, at, head);
        free(have);
    }
    free(t.p);
}

static void
test_produce_acks(void)
{
    struct tb t = {0};
    int16_t acks = 99;

    for (int v = 0; v <= LK_KAFKA_PRODUCE_MAX_KNOWN; v++) {
        for (int a = -1; a <= 1; a++) {
            t.len = 0;
            t_produce(&t, v, "producer-1", 2, a == 0 ? NULL : "txn", a);
            acks = 99;
            int r = lk_kafka_produce_acks(t.p, t.len, &acks);
            ok(r == 0 && acks == a, "Produce v%d: acks %d read (%d, %d)", v, a, r, acks);
            /* one byte short of Acks: more is needed */
            ok(lk_kafka_produce_acks(t.p, t.len - 5, &acks) == -2, "Produce v%d: cut before Acks", v);
        }
    }
    t.len = 0;
    t_produce(&t, 3, NULL, 0, NULL, 0);
    ok(lk_kafka_produce_acks(t.p, t.len, &acks) == 0 && acks == 0, "null client and transactional ids");
    t.len = 0;
    t_produce(&t, 12, "c", 0, "a-long-transactional-id-well-past-one-varint-byte-"
                               "a-long-transactional-id-well-past-one-varint-byte-"
                               "a-long-transactional-id-well-past-one-varint-byte", -1);
    ok(lk_kafka_produce_acks(t.p, t.len, &acks) == 0 && acks == -1,
       "a compact transactional id whose length takes two varint bytes");
    t.len = 0;
    t_produce(&t, 14, "c", 0, NULL, 0);
    ok(lk_kafka_produce_acks(t.p, t.len, &acks) == -1,
       "a version past the codec's: not guessed (KAFKA-21160)");
    t.len = 0;
    t_produce(&t, 5, "c", 0, NULL, 0);
    t.p[12] = 0xff, t.p[13] = 0xfe; /* ClientId length -2 */
    ok(lk_kafka_produce_acks(t.p, t.len, &acks) == -1, "a negative client id length");
    t.p[5] = LK_KAFKA_METADATA;
    ok(lk_kafka_produce_acks(t.p, t.len, &acks) == -1, "not a Produce");
    ok(lk_kafka_produce_acks(t.p, 11, &acks) == -2, "less than the prefix: more is needed");
    free(t.p);
}

static void
test_sasl(void)
{
    struct lk_kafka_reader r;
    struct lk_str mech;
    size_t used;
    struct tb t = {0};

    /* bare tokens: a size alone, 0 included, then the bytes */
    lk_kafka_reader_init(&r, LK_KAFKA_BARE, 100);
    int ev = lk_kafka_reader_feed(&r,
                                  (const uint8_t *)"\0\0\0\0\0\0\0\x02"
                                                   "ab",
                                  10, &used);
    ok(ev == (LK_KAFKA_RD_PREFIX | LK_KAFKA_RD_END) && used == 4 && r.prefix.size == 0 &&
           r.prefix.api_key == -1 && r.prefix.correlation_id == 0,
       "bare: an empty token is a prefix and an end");
    ev = lk_kafka_reader_feed(&r,
                              (const uint8_t *)"\0\0\0\x02"
                                               "ab",
                              6, &used);
    ok(ev == LK_KAFKA_RD_PREFIX && used == 4 && lk_kafka_reader_want(&r) == 2,
       "bare: a 2-byte token");
    ev = lk_kafka_reader_feed(&r, NULL, 2, &used);
    ok(ev == LK_KAFKA_RD_END && used == 2, "bare: its end");
    ok(lk_kafka_reader_feed(&r, (const uint8_t *)"\0\0\0\x65", 4, &used) == -1,
       "bare: over max_frame_bytes fails");
    lk_kafka_reader_init(&r, LK_KAFKA_BARE, 100);
    ok(lk_kafka_reader_feed(&r, (const uint8_t *)"\xff\xff\xff\xff", 4, &used) == -1,
       "bare: a negative size fails");

    /* the mechanism of a SaslHandshake v0 */
    t_handshake(&t, "kafka-python-2.0.2", "SCRAM-SHA-512", 0);
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == 0 && mech.len == 13 &&
           memcmp(mech.p, "SCRAM-SHA-512", 13) == 0,
       "mechanism after a client id");
    ok(lk_kafka_sasl_mechanism(t.p, t.len - 1, &mech) == -1, "a frame cut short: none");
    t.len = 0;
    t_handshake(&t, NULL, "PLAIN", 0);
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == 0 && mech.len == 5,
       "mechanism after a null client id");
    t.len = 0;
    t_handshake(&t, "c", NULL, 0);
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == -1, "a null mechanism: none");
    t.len = 0;
    t_handshake(&t, "c", "PLAIN", 0);
    w8(&t, 0);
    t.p[3]++; /* a byte after the mechanism, counted in the size */
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == -1, "bytes after the mechanism: none");
    t.len = 0;
    t_handshake(&t, "c", "PLAIN", 1);
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == -1, "a size that is not the frame's: none");
    t.len = 0;
    t_handshake(&t, "c", "PLAIN", 0);
    t.p[7] = 1; /* v1 */
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == -1, "SaslHandshake v1: not v0's");
    t.p[7] = 0;
    t.p[5] = LK_KAFKA_API_VERSIONS;
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == -1, "another api key: none");
    t.len = 0;
    w32(&t, 12);
    w16(&t, LK_KAFKA_SASL_HANDSHAKE);
    w16(&t, 0);
    w32(&t, 7);
    w16(&t, 40); /* a client id longer than the frame */
    w16(&t, 0);
    ok(lk_kafka_sasl_mechanism(t.p, t.len, &mech) == -1, "a client id past the end: none");

    /* how many broker tokens end each mechanism's bare exchange */
    static const struct {
        const char *mech;
        int rounds;
    } rounds[] = {{"PLAIN", 1},       {"SCRAM-SHA-256", 2}, {"SCRAM-SHA-512", 2},
                  {"OAUTHBEARER", 1}, {"GSSAPI", 0},        {"SCRAM-SHA-1", 0},
                  {"plain", 0},       {"PLAINX", 0},        {"", 0}};
    for (size_t i = 0; i < sizeof(rounds) / sizeof(rounds[0]); i++)
        ok(lk_kafka_sasl_bare_rounds(lk_str_c(rounds[i].mech)) == rounds[i].rounds, "%s: %d",
           rounds[i].mech[0] != '\0' ? rounds[i].mech : "(empty)", rounds[i].rounds);
    free(t.p);
}

/* ---- Fetch and ShareFetch answers, streamed -------------------------- */

/* Streams frame f (from after its prefix) in pieces of at most `piece`
 * bytes, or split once at `split` (piece 0): the bytes passed go to *pass,
 * the tail to *tail.  Returns the last feed's result. */
static int
stream(const struct tb *f, int16_t key, int16_t ver, size_t piece, size_t split, struct tb *pass,
       struct tb *tail)
{
    struct lk_kafka_fstream s;
    size_t at = 8, used;
    int rc = 0;

    pass->len = tail->len = 0;
    lk_kafka_fstream_init(&s, key, ver, (int32_t)(f->len - 4));
    while (at < f->len && rc == 0) {
        size_t n = piece != 0 ? piece : (at < split ? split - at : f->len - at);
        if (n > f->len - at)
            n = f->len - at;
        /* bytes it may step over unseen are given as NULL */
        size_t sk = lk_kafka_fstream_skippable(&s);
        const uint8_t *p = f->p + at;
        if (sk != 0) {
            n = n < sk ? n : sk;
            p = NULL;
        }
        rc = lk_kafka_fstream_feed(&s, p, n, &used);
        if (rc < 0)
            break;
        put(pass, f->p + at, used);
        put(tail, f->p + at + used, n - used);
        at += n;
    }
    return rc;
}

/* The streamed rewrite of frame f: what passed, then the tail through
 * lk_kafka_fstream_head and the whole-frame rewrite, fitted to its
 * length.  Returns the fit (LK_KAFKA_FIT_BAD on any failure). */
static enum lk_kafka_fit
stream_rewrite(const struct tb *f, int16_t key, int16_t ver, struct t_cb *cb, struct tb *out)
{
    struct tb pass = {0}, tail = {0}, syn = {0}, rew = {0};
    uint8_t head[LK_KAFKA_FSTREAM_HEAD_MAX];
    enum lk_kafka_fit fit = LK_KAFKA_FIT_BAD;

    out->len = 0;
    if (stream(f, key, ver, 0, f->len, &pass, &tail) != 1)
        goto out;
    size_t hn = lk_kafka_fstream_head(key, ver, 0x01020304, tail.len, head);
    put(&syn, head, hn);
    put(&syn, tail.p, tail.len);
    if (run(&syn, key, ver, cb, NULL, &rew) != LK_KAFKA_RW_REWRITTEN)
        put(&rew, syn.p, syn.len); /* unchanged */
    struct evbuffer *eb = evbuffer_new();
    fit = lk_kafka_tail_fit(key, rew.p + hn, rew.len - hn, tail.len, eb);
    put(out, f->p, 8);
    put(out, pass.p, pass.len);
    take(out, eb);
    evbuffer_free(eb);
out:
    free(pass.p);
    free(tail.p);
    free(syn.p);
    free(rew.p);
    return fit;
}

static int
has(const struct tb *b, size_t from, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = from; i + n <= b->len; i++)
        if (memcmp(b->p + i, s, n) == 0)
            return 1;
    return 0;
}

static void
test_stream(void)
{
    static const struct {
        int16_t key, min, max;
    } sv[] = {{1, 16, 18}, {78, 0, 2}};
    static const size_t neps[] = {0, 1, 3, 6};

    ok(lk_kafka_stream_wanted(1, 16) && lk_kafka_stream_wanted(1, 18) &&
           !lk_kafka_stream_wanted(1, 15) && !lk_kafka_stream_wanted(1, 19) &&
           lk_kafka_stream_wanted(78, 0) && !lk_kafka_stream_wanted(79, 0) &&
           !lk_kafka_stream_wanted(3, 12),
       "streamed: Fetch v16-18 and ShareFetch v0-2 only");
    for (size_t k = 0; k < 2; k++)
        for (int16_t v = sv[k].min; v <= sv[k].max; v++)
            for (size_t e = 0; e < 4; e++)
                for (int unk = 0; unk <= 1; unk++) {
                    struct t_msg m = {.key = sv[k].key, .ver = v, .unk = unk};
                    fill(&m, neps[e], 0);
                    m.no_tag0 = neps[e] == 0 && k == 0;
                    struct tb f = build(&m), pass = {0}, tail = {0}, p2 = {0}, t2 = {0};
                    struct tb out = {0}, whole = {0};
                    int rc = stream(&f, m.key, v, 0, f.len, &pass, &tail);
                    int good = rc == 1 && pass.len == m.tail_at - 8 &&
                               memcmp(pass.p, f.p + 8, pass.len) == 0 &&
                               tail.len == f.len - m.tail_at &&
                               memcmp(tail.p, f.p + m.tail_at, tail.len) == 0;
                    /* the same at every split, and a byte at a time */
                    for (size_t at = 9; at < f.len && good; at++)
                        good = stream(&f, m.key, v, 0, at, &p2, &t2) == 1 && same(&p2, &pass) &&
                               same(&t2, &tail);
                    good = good && stream(&f, m.key, v, 1, 0, &p2, &t2) == 1 &&
                           same(&p2, &pass) && same(&t2, &tail);
                    ok(good, "api %d v%d, %zu endpoints%s: records pass at every split, the tail "
                       "is what follows Responses", m.key, v, neps[e], unk ? ", unknown tags" : "");

                    /* rewritten: same size, bytes before the tail as they
                     * came, no internal host left, the endpoints kept when
                     * they fit */
                    struct t_cb cb = {.external = 1};
                    enum lk_kafka_fit fit = stream_rewrite(&f, m.key, v, &cb, &out);
                    run(&f, m.key, v, &cb, NULL, &whole);
                    int leak = 0;
                    for (size_t i = 0; i < NMAP; i++)
                        if (strcmp(map[i].in_host, map[i].ex_host) != 0)
                            leak |= has(&out, m.tail_at, map[i].in_host);
                    ok(fit != LK_KAFKA_FIT_BAD && out.len == f.len &&
                           memcmp(out.p, f.p, m.tail_at) == 0 && !leak,
                       "api %d v%d, %zu endpoints%s: streamed rewrite keeps the size (%s), records "
                       "intact, no internal host", m.key, v, neps[e], unk ? ", unknown tags" : "",
                       fit == LK_KAFKA_FIT_KEPT ? "kept" : "dropped");
                    /* kept: the client reads the same endpoints as the
                     * whole-frame rewrite gives; dropped: none */
                    struct t_cb seen = {.keep = 1};
                    struct tb dummy = {0};
                    enum lk_kafka_rw r2 = run(&out, m.key, v, &seen, NULL, &dummy);
                    size_t want_eps = fit == LK_KAFKA_FIT_KEPT ? neps[e] : 0;
                    ok(r2 == LK_KAFKA_RW_UNCHANGED && (size_t)seen.calls == want_eps,
                       "... decodes, with %zu endpoint(s)", want_eps);
                    if (fit == LK_KAFKA_FIT_KEPT && whole.len == f.len)
                        ok(same(&out, &whole), "... exactly the whole-frame rewrite when as long");
                    free(f.p);
                    free(pass.p);
                    free(tail.p);
                    free(p2.p);
                    free(t2.p);
                    free(out.p);
                    free(whole.p);
                    free(dummy.p);
                }
}

/* Padding, exactly: one endpoint whose external host is 12 bytes shorter
 * (broker-3.internal -> b3.ex) comes out as the whole-frame rewrite with
 * one padding field of 12 bytes (tag 16383, size 9, nine zeros) last in
 * the section; one 1 byte shorter cannot be padded and is dropped. */
static void
test_stream_padding(void)
{
    struct t_msg m = {.key = 1, .ver = 16};
    m.nep = 1;
    m.ep[0] = (struct t_ep){3, "broker-3.internal", 9092, NULL};
    struct tb f = build(&m), out = {0}, whole = {0}, want = {0};
    struct t_cb cb = {.external = 1};

    ok(stream_rewrite(&f, 1, 16, &cb, &out) == LK_KAFKA_FIT_KEPT, "shorter: kept");
    run(&f, 1, 16, &cb, NULL, &whole);
    /* whole: ... count 1, tag 0 field; want: count 2, the same field, pad */
    put(&want, whole.p, m.tail_at);
    w8(&want, 2);
    put(&want, whole.p + m.tail_at + 1, whole.len - m.tail_at - 1);
    put(&want, "\xff\x7f\x09", 3);
    for (int i = 0; i < 9; i++)
        w8(&want, 0);
    lk_kw_put32(want.p, (uint32_t)want.len - 4);
    ok(whole.len == f.len - 12 && same(&out, &want), "padded with one tag-16383 field of 12 bytes");
    if (!same(&out, &want))
        diff(&out, &want);
    free(f.p);
    free(out.p);
    free(whole.p);
    free(want.p);

    /* rooms around one section: {count 1, tag 0, size 2, NodeEndpoints []
     * and its (empty) tags} */
    struct evbuffer *eb = evbuffer_new();
    static const uint8_t sec[] = {1, 0, 2, 1, 0};
    ok(lk_kafka_tail_fit(1, sec, sizeof(sec), sizeof(sec) + 1, eb) == LK_KAFKA_FIT_DROPPED &&
           evbuffer_get_length(eb) == sizeof(sec) + 1,
       "one byte to pad (no field is that small): the endpoints dropped, the room padded");
    evbuffer_drain(eb, evbuffer_get_length(eb));
    ok(lk_kafka_tail_fit(1, sec, sizeof(sec), sizeof(sec) - 2, eb) == LK_KAFKA_FIT_BAD &&
           evbuffer_get_length(eb) == 0,
       "a room too small even without them: bad, nothing written");
    ok(lk_kafka_tail_fit(1, sec, sizeof(sec), sizeof(sec) + 3, eb) == LK_KAFKA_FIT_KEPT &&
           evbuffer_get_length(eb) == sizeof(sec) + 3,
       "three bytes to pad: kept, with a field of 3");
    evbuffer_drain(eb, evbuffer_get_length(eb));
    /* one endpoint {1, "h", 1, null} in 16 bytes, a room of 6 */
    static const uint8_t big[] = {1, 0, 13, 2, 0, 0, 0, 1, 2, 'h', 0, 0, 0, 1, 0, 0};
    ok(lk_kafka_tail_fit(1, big, sizeof(big), 6, eb) == LK_KAFKA_FIT_DROPPED &&
           evbuffer_get_length(eb) == 6,
       "longer than the room: dropped, padded to the room");
    evbuffer_drain(eb, evbuffer_get_length(eb));
    /* every length from the section alone up to 20000: exact */
    int all = 1;
    for (size_t w = sizeof(sec) + 3; w < 20000 && all; w++) {
        all = lk_kafka_tail_fit(1, sec, sizeof(sec), w, eb) == LK_KAFKA_FIT_KEPT &&
              evbuffer_get_length(eb) == w;
        evbuffer_drain(eb, evbuffer_get_length(eb));
    }
    ok(all, "every room from 3 bytes more up to 20000: padded exactly (one or two fields)");
    static const uint8_t junk[] = {1, 0, 9, 1}; /* tag 0 claims 9 bytes, has 1 */
    ok(lk_kafka_tail_fit(1, junk, sizeof(junk), sizeof(junk), eb) == LK_KAFKA_FIT_BAD,
       "a section that does not decode: bad");
    evbuffer_free(eb);

    /* a records length past the end breaks the layout */
    m = (struct t_msg){.key = 1, .ver = 17};
    f = build(&m);
    struct tb p = {0}, t = {0};
    f.len = m.tail_at - 20; /* cut inside the last records */
    lk_kw_put32(f.p, (uint32_t)f.len - 4);
    ok(stream(&f, 1, 17, 0, f.len, &p, &t) == -1, "records past the frame's end: malformed");
    free(f.p);
    free(p.p);
    free(t.p);
}

/*
 * KIP-1102: the Metadata answer lookout writes itself while draining, next
 * to one written field by field from MetadataResponse.json v13 (flexible:
 * header v1, then ThrottleTimeMs, Brokers, ClusterId, ControllerId,
 * Topics, ErrorCode, tags) by this file's own writers, and read back by
 * the codec's Metadata decoder.
 */
static void
test_rebootstrap(void)
{
    static const int32_t corrs[] = {0, 7, -1, 0x7fffffff};
    uint8_t a[LK_KAFKA_REBOOTSTRAP_LEN + 8];

    for (size_t i = 0; i < sizeof(corrs) / sizeof(corrs[0]); i++) {
        struct tb want = {0}, got = {0}, out = {0};
        w32(&want, 0);
        w32(&want, corrs[i]);
        wtags(&want, 1, 0);        /* response header v1 */
        w32(&want, 0);             /* ThrottleTimeMs */
        warr(&want, 1, 0);         /* Brokers */
        wstr(&want, 1, NULL);      /* ClusterId: null */
        w32(&want, -1);            /* ControllerId */
        warr(&want, 1, 0);         /* Topics */
        w16(&want, 129);           /* ErrorCode: REBOOTSTRAP_REQUIRED */
        wtags(&want, 1, 0);
        set_size(&want);
        memset(a, 0xee, sizeof(a));
        size_t n = lk_kafka_rebootstrap_answer(13, corrs[i], a);
        put(&got, a, n);
        ok(n == LK_KAFKA_REBOOTSTRAP_LEN && same(&got, &want),
           "v13, correlation id %d: the spec's layout, %zu bytes", corrs[i], n);
        if (!same(&got, &want))
            diff(&got, &want);
        ok(a[n] == 0xee, "... and not a byte past it");
        ok(run(&got, 3, 13, NULL, NULL, &out) == LK_KAFKA_RW_UNCHANGED,
           "... which the codec's Metadata v13 decoder reads whole");
        free(want.p);
        free(got.p);
        free(out.p);
    }
    memset(a, 0xee, sizeof(a));
    ok(lk_kafka_rebootstrap_answer(12, 7, a) == 0 && a[0] == 0xee,
       "v12 (no top-level ErrorCode): refused, nothing written");
    ok(lk_kafka_rebootstrap_answer(14, 7, a) == 0 && a[0] == 0xee,
       "v14 (a layout no spec has yet): refused");
    ok(!lk_kafka_rebootstrap_version(0) && !lk_kafka_rebootstrap_version(12) &&
           lk_kafka_rebootstrap_version(13) && !lk_kafka_rebootstrap_version(-1),
       "lk_kafka_rebootstrap_version: v13 only, today");
}

const struct lk_test_case lk_test_kafka_codec[] = {
    {"kafka_codec/every_version", test_every_version},
    {"kafka_codec/find_coordinator_single", test_find_coordinator_single},
    {"kafka_codec/find_coordinator_none", test_find_coordinator_none},
    {"kafka_codec/describe_quorum", test_describe_quorum},
    {"kafka_codec/unknown_node", test_unknown_node},
    {"kafka_codec/many", test_many},
    {"kafka_codec/outside", test_outside},
    {"kafka_codec/api_versions", test_api_versions},
    {"kafka_codec/header_version", test_header_version},
    {"kafka_codec/reader", test_reader},
    {"kafka_codec/sasl", test_sasl},
    {"kafka_codec/stream", test_stream},
    {"kafka_codec/stream_padding", test_stream_padding},
    {"kafka_codec/produce_acks", test_produce_acks},
    {"kafka_codec/produce_head_trickle", test_produce_head_trickle},
    {"kafka_codec/rebootstrap", test_rebootstrap},
    {NULL, NULL},
};
