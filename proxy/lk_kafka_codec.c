/*
 * The Kafka codec (lk_kafka_codec.h): the split-stream frame reader, the
 * response header version table, and response rewriting.  A rewrite is a
 * walk over the response as its spec lays it out, recording an edit for
 * each field that changes (a host string, a port, an ApiVersions max or
 * count, an entry removed, and the size of the tagged field around the
 * changes); then the frame is written out as the original bytes with the
 * edits spliced in and a new size.  Nothing is decoded past the last field
 * that can change: what follows is copied as it came.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "lk_kafka_codec.h"
#include "lk_kafka_wire.h"
#include "lk_pool.h"

/* ---- the frame reader ----------------------------------------------- */

void
lk_kafka_reader_init(struct lk_kafka_reader *r, enum lk_kafka_dir dir, uint32_t max_frame_bytes)
{
    memset(r, 0, sizeof(*r));
    r->max_size = max_frame_bytes > INT32_MAX ? INT32_MAX : max_frame_bytes;
    r->prefix_len = dir == LK_KAFKA_REQUEST    ? LK_KAFKA_REQ_PREFIX
                    : dir == LK_KAFKA_RESPONSE ? LK_KAFKA_RES_PREFIX
                                               : LK_KAFKA_BARE_PREFIX;
    r->prefix.api_key = -1;
    r->prefix.api_version = -1;
}

int
lk_kafka_reader_feed(struct lk_kafka_reader *r, const uint8_t *p, size_t len, size_t *used)
{
    size_t n = 0;

    *used = 0;
    if (r->failed)
        return -1;
    if (lk_kafka_reader_in_body(r)) {
        n = len < r->left ? len : r->left;
        r->left -= (uint32_t)n;
        *used = n;
        if (r->left != 0)
            return 0;
        r->have = 0;
        return LK_KAFKA_RD_END;
    }
    while (n < len && r->have < r->prefix_len) {
        r->buf[r->have++] = p[n++];
        if (r->have != 4)
            continue;
        /* The size alone decides: a bad one fails before the rest of the
         * prefix comes (a TLS alert read as a size, a negative one). */
        r->prefix.size = (int32_t)lk_kw_get32(r->buf);
        if (r->prefix.size < r->prefix_len - 4 || (uint32_t)r->prefix.size > r->max_size) {
            r->failed = 1;
            *used = n;
            return -1;
        }
    }
    *used = n;
    if (r->have < r->prefix_len)
        return 0;
    if (r->prefix_len == LK_KAFKA_REQ_PREFIX) {
        r->prefix.api_key = (int16_t)lk_kw_get16(r->buf + 4);
        r->prefix.api_version = (int16_t)lk_kw_get16(r->buf + 6);
        r->prefix.correlation_id = (int32_t)lk_kw_get32(r->buf + 8);
    } else if (r->prefix_len == LK_KAFKA_RES_PREFIX) {
        r->prefix.correlation_id = (int32_t)lk_kw_get32(r->buf + 4);
    }
    r->left = (uint32_t)r->prefix.size - (uint32_t)(r->prefix_len - 4);
    if (r->left != 0)
        return LK_KAFKA_RD_PREFIX;
    r->have = 0;
    return LK_KAFKA_RD_PREFIX | LK_KAFKA_RD_END;
}

/* ---- header versions ------------------------------------------------ */

#define NEVER 127 /* "flexibleVersions": "none" */

/* The first flexible version of each API key's response, from
 * apache/kafka's <Name>Response.json "flexibleVersions" (keys 0-87), and
 * 88 StreamsGroupHeartbeat, 89 StreamsGroupDescribe (KIP-1071:
 * StreamsGroupHeartbeatResponse.json, StreamsGroupDescribeRequest.json
 * "apiKey" and "flexibleVersions": "0+"). */
static const int8_t flex_from[] = {
    9, 12, 6, 9, 4, 2, 6, 3,     8, 6, /* 0 Produce .. 9 OffsetFetch */
    3, 6,  4, 4, 4, 5, 3, NEVER, 3, 5, /* 10 FindCoordinator .. 19 CreateTopics */
    4, 2,  2, 4, 3, 3, 3, 1,     3, 2, /* 20 DeleteTopics .. 29 DescribeAcls */
    2, 2,  4, 2, 2, 2, 2, 2,     2, 2, /* 30 CreateAcls .. 39 RenewDelegationToken */
    2, 2,  2, 2, 1, 0, 0, NEVER, 1, 1, /* 40 .. 47 OffsetDelete .. 49 */
    0, 0,  0, 1, 1, 0, 0, 0,     0, 0, /* 50 .. 59 */
    0, 0,  0, 0, 0, 0, 0, 0,     0, 0, /* 60 DescribeCluster .. 69 */
    0, 0,  0, 0, 0, 0, 0, 0,     0, 0, /* 70 .. 78 ShareFetch, 79 ShareAcknowledge */
    0, 0,  0, 0, 0, 0, 0, 0,     0, 0, /* 80 AddRaftVoter .. 88, 89 Streams */
};
#define NKEYS ((int)(sizeof(flex_from) / sizeof(flex_from[0])))

int
lk_kafka_api_known(int16_t api_key)
{
    return api_key >= 0 && api_key < NKEYS;
}

/* ---- SASL after SaslHandshake v0 ----------------------------------- */

int
lk_kafka_sasl_mechanism(const uint8_t *frame, size_t len, struct lk_str *mech)
{
    struct lk_kw c = {frame, len, 0, 0};

    if (len < LK_KAFKA_REQ_PREFIX || lk_kw_get32(frame) != len - 4 ||
        lk_kw_get16(frame + 4) != LK_KAFKA_SASL_HANDSHAKE || lk_kw_get16(frame + 6) != 0)
        return -1;
    lk_kw_skip(&c, LK_KAFKA_REQ_PREFIX);
    int16_t n = lk_kw_i16(&c); /* RequestHeader v1 ClientId: nullable */
    if (n > 0)
        lk_kw_skip(&c, (size_t)n);
    else if (n < -1)
        return -1;
    n = lk_kw_i16(&c); /* Mechanism: a string, not nullable */
    if (n < 0 || !lk_kw_need(&c, (size_t)n) || c.len - c.off != (size_t)n)
        return -1;
    *mech = (struct lk_str){(const char *)frame + c.off, (size_t)n};
    return 0;
}

int
lk_kafka_sasl_bare_rounds(struct lk_str mech)
{
    static const struct {
        const char *name;
        int rounds;
    } known[] = {{"PLAIN", 1}, {"SCRAM-SHA-256", 2}, {"SCRAM-SHA-512", 2}, {"OAUTHBEARER", 1}};

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (mech.len == strlen(known[i].name) && memcmp(mech.p, known[i].name, mech.len) == 0)
            return known[i].rounds;
    return 0;
}

/* ---- Produce acks ---------------------------------------------------- */

int
lk_kafka_produce_acks(const uint8_t *head, size_t len, int16_t *acks)
{
    struct lk_kw c = {head, len, LK_KAFKA_REQ_PREFIX, 0};

    if (len < LK_KAFKA_REQ_PREFIX)
        return -2;
    int16_t v = (int16_t)lk_kw_get16(head + 6);
    if (lk_kw_get16(head + 4) != LK_KAFKA_PRODUCE || v < 0 || v > LK_KAFKA_PRODUCE_MAX_KNOWN)
        return -1;
    int flex = v >= 9; /* "flexibleVersions": "9+", request header v2 */
    int16_t n = lk_kw_i16(&c); /* ClientId: nullable, an int16 length in v1 and v2 */
    if (n < -1)
        return -1;
    if (n > 0)
        lk_kw_skip(&c, (size_t)n);
    if (flex)
        lk_kw_tags(&c); /* the header's tagged fields */
    if (v >= 3) {       /* TransactionalId: nullable */
        if (flex) {
            uint32_t l = lk_kw_uvarint(&c); /* compact: length + 1, 0 for null */
            if (l > 1)
                lk_kw_skip(&c, l - 1);
        } else {
            n = lk_kw_i16(&c);
            if (n < -1)
                return -1;
            if (n > 0)
                lk_kw_skip(&c, (size_t)n);
        }
    }
    int16_t a = lk_kw_i16(&c);
    if (c.bad)
        return -2;
    *acks = a;
    return 0;
}

static int
flexible(int16_t api_key, int16_t api_version)
{
    return flex_from[api_key] != NEVER && api_version >= flex_from[api_key];
}

int
lk_kafka_response_header_version(int16_t api_key, int16_t api_version)
{
    if (!lk_kafka_api_known(api_key))
        return -1;
    if (api_key == LK_KAFKA_API_VERSIONS)
        return 0; /* KIP-511: clients read it before they know the version */
    return flexible(api_key, api_version) ? 1 : 0;
}

/* ---- the rewrite set ------------------------------------------------ */

/* The versions the codec decodes: from `min` (below it the response holds
 * no endpoint) to `max`. */
static const struct {
    int16_t key, min, max;
} rewrite_set[] = {
    {LK_KAFKA_PRODUCE, 10, 13},         /* KIP-951 NodeEndpoints (tag 0) */
    {LK_KAFKA_FETCH, 16, 18},           /* KIP-951 NodeEndpoints (tag 0) */
    {LK_KAFKA_METADATA, 0, 13},         /* Brokers */
    {LK_KAFKA_FIND_COORDINATOR, 0, 6},  /* v0-3 single, v4+ Coordinators */
    {LK_KAFKA_DESCRIBE_CLUSTER, 0, 2},  /* Brokers */
    {LK_KAFKA_SHARE_FETCH, 0, 2},       /* NodeEndpoints */
    {LK_KAFKA_SHARE_ACKNOWLEDGE, 0, 2}, /* NodeEndpoints */
    {LK_KAFKA_DESCRIBE_QUORUM, 2, 2},   /* KIP-853 Nodes[].Listeners */
};
#define NSET (sizeof(rewrite_set) / sizeof(rewrite_set[0]))

#define API_VERSIONS_MAX 4

/* The Streams group APIs (KIP-1071) up to the version whose answer was
 * read: v0 from apache/kafka's StreamsGroupHeartbeatResponse.json (as of
 * b835c1f) and StreamsGroupDescribeResponse.json (0832e7a, and the
 * Member.UserEndpoint of Kafka 4.1's, as generated clients carry it)
 * (the only host/port fields are the
 * Endpoint{Host, Port uint16} of UserEndpoint and
 * PartitionsByUserEndpoint[].UserEndpoint, and Members[].UserEndpoint:
 * the Interactive Queries addresses of the user's instances); v1 (KIP-1331)
 * by the request specs' comments ("validVersions": "0-1"): the heartbeat
 * answer gains TopologyDescriptionRequired, the describe answer a
 * topology description, neither an endpoint. */
#define STREAMS_READ_MAX 1

int
lk_kafka_rewrite_max_version(int16_t api_key)
{
    for (size_t i = 0; i < NSET; i++)
        if (rewrite_set[i].key == api_key)
            return rewrite_set[i].max;
    return -1;
}

int
lk_kafka_clamp_version(int16_t api_key)
{
    if (api_key == LK_KAFKA_STREAMS_GROUP_HEARTBEAT || api_key == LK_KAFKA_STREAMS_GROUP_DESCRIBE)
        return STREAMS_READ_MAX;
    return lk_kafka_rewrite_max_version(api_key);
}

enum lk_kafka_addrs
lk_kafka_response_addrs(int16_t api_key, int16_t api_version)
{
    /* No spec has a negative version, so nothing says what its answer
     * holds: a broker closes on it, but whatever else comes back is read
     * as bytes, never taken for an endpoint-free version below min. */
    if (!lk_kafka_api_known(api_key) || api_version < 0)
        return LK_KAFKA_ADDRS_BYTES;
    for (size_t i = 0; i < NSET; i++) {
        if (rewrite_set[i].key != api_key)
            continue;
        if (api_version < rewrite_set[i].min)
            return LK_KAFKA_ADDRS_NONE;
        if (api_version <= rewrite_set[i].max)
            return LK_KAFKA_ADDRS_DECODED;
        switch (api_key) {
        case LK_KAFKA_PRODUCE:
        case LK_KAFKA_FETCH:
        case LK_KAFKA_SHARE_FETCH:
        case LK_KAFKA_SHARE_ACKNOWLEDGE:
            return LK_KAFKA_ADDRS_RECORDS;
        default:
            return LK_KAFKA_ADDRS_BYTES;
        }
    }
    switch (api_key) {
    case LK_KAFKA_VOTE:
    case LK_KAFKA_BEGIN_QUORUM_EPOCH:
    case LK_KAFKA_END_QUORUM_EPOCH:
    case LK_KAFKA_UPDATE_RAFT_VOTER:
        return LK_KAFKA_ADDRS_BYTES;
    case LK_KAFKA_DESCRIBE_CONFIGS:
        /* A broker's configs name its listeners: advertised.listeners,
         * listeners, controller.quorum.voters and
         * controller.quorum.bootstrap.servers are strings of host:port,
         * the internal ones among them, in Configs[].Value and
         * Synonyms[].Value, whatever the version. */
        return LK_KAFKA_ADDRS_BYTES;
    case LK_KAFKA_FETCH_SNAPSHOT:
        /* v1 names the leader's endpoints (KIP-853), and a snapshot of the
         * metadata log holds every broker's registration, listeners and
         * all: whatever the version, its bytes are read. */
        return LK_KAFKA_ADDRS_BYTES;
    case LK_KAFKA_STREAMS_GROUP_HEARTBEAT:
    case LK_KAFKA_STREAMS_GROUP_DESCRIBE:
        /* Application endpoints only, never a broker's (see
         * STREAMS_READ_MAX); a later layout is not guessed at. */
        return api_version <= STREAMS_READ_MAX ? LK_KAFKA_ADDRS_NONE : LK_KAFKA_ADDRS_BYTES;
    default:
        return LK_KAFKA_ADDRS_NONE;
    }
}

int
lk_kafka_response_wanted(int16_t api_key, int16_t api_version, int unknown_keys)
{
    if (api_key == LK_KAFKA_API_VERSIONS)
        return 1;
    if (!lk_kafka_api_known(api_key))
        return unknown_keys;
    enum lk_kafka_addrs a = lk_kafka_response_addrs(api_key, api_version);
    return a == LK_KAFKA_ADDRS_DECODED || a == LK_KAFKA_ADDRS_BYTES;
}

/* ---- edits ---------------------------------------------------------- */

enum edit_kind { E_NOOP = 0, E_STR, E_I32, E_I16, E_UVARINT, E_DEL };

/* Replace frame[off, off + old_len) with the new value. */
struct edit {
    size_t off, old_len;
    const char *s; /* E_STR */
    size_t slen;
    uint32_t v; /* E_I32, E_I16, E_UVARINT */
    uint8_t kind;
    uint8_t flex; /* E_STR: compact length */
};

struct walk {
    struct lk_kw c;
    int flex;
    int16_t ver;
    struct lk_kafka_rewrite *rw;
    struct edit *e;
    size_t ne, cap;
    struct edit inl[8]; /* most responses change a few fields */
};

static size_t
edit_add(struct walk *w, enum edit_kind kind, size_t off, size_t old_len)
{
    if (w->ne == w->cap) {
        size_t cap = w->cap * 2;
        if (w->e == w->inl) {
            w->e = lk_xmalloc(cap * sizeof(*w->e));
            memcpy(w->e, w->inl, sizeof(w->inl));
        } else {
            w->e = lk_xrealloc(w->e, cap * sizeof(*w->e));
        }
        w->cap = cap;
    }
    w->e[w->ne] = (struct edit){.off = off, .old_len = old_len, .kind = (uint8_t)kind};
    return w->ne++;
}

static size_t
edit_len(const struct edit *e)
{
    switch (e->kind) {
    case E_STR:
        return (e->flex ? lk_kw_uvarint_len((uint32_t)e->slen + 1) : 2) + e->slen;
    case E_I32:
        return 4;
    case E_I16:
        return 2;
    case E_UVARINT:
        return lk_kw_uvarint_len(e->v);
    case E_NOOP:
        return e->old_len;
    default:
        return 0;
    }
}

/* How much the edits from index `from` on lengthen the frame. */
static int64_t
edits_delta(const struct walk *w, size_t from)
{
    int64_t d = 0;

    for (size_t i = from; i < w->ne; i++)
        d += (int64_t)edit_len(&w->e[i]) - (int64_t)w->e[i].old_len;
    return d;
}

/* ---- the walk ------------------------------------------------------- */

/* Host, Port of one endpoint of node `id`: asks the callback cb and
 * records what changes.  port16: the port is a uint16 (DescribeQuorum's
 * Listeners), not an int32.  With skip_negative, a node id below 0
 * (FindCoordinator's "no coordinator") is not asked about. */
static void
host_port(struct walk *w, int32_t id, lk_kafka_endpoint_cb cb, int port16, int skip_negative)
{
    struct lk_kw *c = &w->c;
    struct lk_kafka_rewrite *rw = w->rw;
    size_t hoff, hstart, hlen, poff;

    hoff = c->off;
    if (lk_kw_lenfield(c, w->flex, 0, 0, &hstart, &hlen) != 0)
        return;
    poff = c->off;
    int32_t port = port16 ? (int32_t)(uint16_t)lk_kw_i16(c) : lk_kw_i32(c);
    if (c->bad)
        return;
    if (skip_negative && id < 0) {
        rw->skipped++;
        return;
    }
    rw->endpoints++;
    if (cb == NULL)
        return;

    struct lk_str orig = lk_str_make((const char *)c->p + hstart, hlen), host = orig;
    int32_t nport = port;
    rw->host_at = hoff;
    switch (cb(rw->arg, id, &host, &nport)) {
    case LK_KAFKA_EP_REWRITE:
        break;
    case LK_KAFKA_EP_UNKNOWN:
        rw->unknown++;
        return;
    default:
        return;
    }
    if (host.len > INT16_MAX || (host.p == NULL && host.len != 0) ||
        (port16 && (nport <= 0 || nport > 65535))) {
        rw->unknown++; /* cannot be encoded: never leave a half-done rewrite */
        return;
    }
    int changed = 0;
    if (!lk_str_eq(host, orig)) {
        size_t i = edit_add(w, E_STR, hoff, poff - hoff);
        w->e[i].s = host.p;
        w->e[i].slen = host.len;
        w->e[i].flex = (uint8_t)w->flex;
        changed = 1;
    }
    if (nport != port) {
        size_t i = edit_add(w, port16 ? E_I16 : E_I32, poff, port16 ? 2 : 4);
        w->e[i].v = (uint32_t)nport; /* through i: edit_add may move w->e */
        changed = 1;
    }
    if (changed)
        rw->changed++;
}

/* NodeId, Host, Port (int32) of one broker endpoint, for rw->endpoint. */
static void
endpoint(struct walk *w, int skip_negative)
{
    int32_t id = lk_kw_i32(&w->c);

    host_port(w, id, w->rw->endpoint, 0, skip_negative);
}

/* Skips a struct's tagged fields in flexible versions. */
static void
tags(struct walk *w)
{
    if (w->flex)
        lk_kw_tags(&w->c);
}

/* []NodeEndpoint {NodeId, Host, Port, Rack?} (KIP-951, KIP-932). */
static void
node_endpoints(struct walk *w)
{
    int64_t n = lk_kw_array(&w->c, w->flex, 0);

    for (int64_t i = 0; i < n && !w->c.bad; i++) {
        endpoint(w, 0);
        lk_kw_string(&w->c, w->flex, 1); /* Rack */
        tags(w);
    }
}

/* A top-level tagged-field section whose tag 0 is NodeEndpoints (Produce
 * v10+, Fetch v16+).  Other tags are copied; the size of tag 0 is
 * re-encoded when its content changes length. */
static void
top_tags(struct walk *w)
{
    struct lk_kw *c = &w->c;
    uint32_t n = lk_kw_uvarint(c);

    for (uint32_t i = 0; i < n && !c->bad; i++) {
        uint32_t tag = lk_kw_uvarint(c);
        size_t size_off = c->off;
        uint32_t size = lk_kw_uvarint(c);
        size_t size_len = c->off - size_off;
        if (!lk_kw_need(c, size))
            return;
        size_t end = c->off + size;
        if (tag == 0) {
            size_t slot = edit_add(w, E_NOOP, size_off, size_len);
            size_t outer = c->len;
            c->len = end; /* the array must fit in the field */
            w->rw->tag_at = size_off;
            node_endpoints(w);
            w->rw->tag_at = 0;
            c->len = outer;
            if (c->bad)
                return;
            int64_t d = edits_delta(w, slot + 1);
            if (d != 0) {
                if ((int64_t)size + d < 0 || (int64_t)size + d > INT32_MAX) {
                    c->bad = 1;
                    return;
                }
                w->e[slot].kind = E_UVARINT;
                w->e[slot].v = (uint32_t)((int64_t)size + d);
            }
        }
        c->off = end;
    }
}

/* MetadataResponse: ThrottleTimeMs (v3+), Brokers[]{NodeId, Host, Port,
 * Rack? (v1+)}; the rest (ClusterId, ControllerId, Topics, ...) is
 * copied. */
static void
metadata(struct walk *w)
{
    if (w->ver >= 3)
        lk_kw_skip(&w->c, 4);
    int64_t n = lk_kw_array(&w->c, w->flex, 0);
    for (int64_t i = 0; i < n && !w->c.bad; i++) {
        endpoint(w, 0);
        if (w->ver >= 1)
            lk_kw_string(&w->c, w->flex, 1); /* Rack */
        tags(w);
    }
}

/* FindCoordinatorResponse: ThrottleTimeMs (v1+); v0-3: ErrorCode,
 * ErrorMessage? (v1+), NodeId, Host, Port; v4+ (KIP-699):
 * Coordinators[]{Key, NodeId, Host, Port, ErrorCode, ErrorMessage?}. */
static void
find_coordinator(struct walk *w)
{
    struct lk_kw *c = &w->c;

    if (w->ver >= 1)
        lk_kw_skip(c, 4);
    if (w->ver <= 3) {
        lk_kw_skip(c, 2);
        if (w->ver >= 1)
            lk_kw_string(c, w->flex, 1);
        endpoint(w, 1);
        return;
    }
    int64_t n = lk_kw_array(c, w->flex, 0);
    for (int64_t i = 0; i < n && !c->bad; i++) {
        lk_kw_string(c, w->flex, 0); /* Key */
        endpoint(w, 1);
        lk_kw_skip(c, 2);
        lk_kw_string(c, w->flex, 1); /* ErrorMessage */
        tags(w);
    }
}

/* DescribeClusterResponse (flexible from v0): ThrottleTimeMs, ErrorCode,
 * ErrorMessage?, EndpointType int8 (v1+), ClusterId, ControllerId,
 * Brokers[]{BrokerId, Host, Port, Rack?, IsFenced (v2+)}. */
static void
describe_cluster(struct walk *w)
{
    struct lk_kw *c = &w->c;

    lk_kw_skip(c, 4 + 2);
    lk_kw_string(c, w->flex, 1);
    if (w->ver >= 1)
        lk_kw_skip(c, 1);
    lk_kw_string(c, w->flex, 0);
    lk_kw_skip(c, 4);
    int64_t n = lk_kw_array(c, w->flex, 0);
    for (int64_t i = 0; i < n && !c->bad; i++) {
        endpoint(w, 0);
        lk_kw_string(c, w->flex, 1);
        if (w->ver >= 2)
            lk_kw_skip(c, 1);
        tags(w);
    }
}

/* ProduceResponse v10+ (flexible): Responses[]{Name (v0-12) | TopicId
 * (v13+), PartitionResponses[]{Index, ErrorCode, BaseOffset,
 * LogAppendTimeMs, LogStartOffset, RecordErrors[]{BatchIndex,
 * BatchIndexErrorMessage?}, ErrorMessage?}}, ThrottleTimeMs, then the
 * top-level tags. */
static void
produce(struct walk *w)
{
    struct lk_kw *c = &w->c;
    int64_t nt = lk_kw_array(c, 1, 0);

    for (int64_t t = 0; t < nt && !c->bad; t++) {
        if (w->ver <= 12)
            lk_kw_string(c, 1, 0);
        else
            lk_kw_skip(c, 16);
        int64_t np = lk_kw_array(c, 1, 0);
        for (int64_t p = 0; p < np && !c->bad; p++) {
            lk_kw_skip(c, 4 + 2 + 8 + 8 + 8);
            int64_t ne = lk_kw_array(c, 1, 0);
            for (int64_t e = 0; e < ne && !c->bad; e++) {
                lk_kw_skip(c, 4);
                lk_kw_string(c, 1, 1);
                lk_kw_tags(c);
            }
            lk_kw_string(c, 1, 1);
            lk_kw_tags(c); /* CurrentLeader is tag 0 here */
        }
        lk_kw_tags(c);
    }
    lk_kw_skip(c, 4);
    top_tags(w);
}

/* FetchResponse v16+ (flexible): ThrottleTimeMs, ErrorCode, SessionId,
 * Responses[]{TopicId (v13+), Partitions[]{PartitionIndex,
 * ErrorCode, HighWatermark, LastStableOffset, LogStartOffset,
 * AbortedTransactions[]?{ProducerId, FirstOffset}, PreferredReadReplica,
 * Records?}}, then the top-level tags.  Records are stepped over by their
 * length, never decoded. */
static void
fetch(struct walk *w)
{
    struct lk_kw *c = &w->c;

    lk_kw_skip(c, 4 + 2 + 4);
    int64_t nt = lk_kw_array(c, 1, 0);
    for (int64_t t = 0; t < nt && !c->bad; t++) {
        lk_kw_skip(c, 16); /* TopicId: v13+, so always here */
        int64_t np = lk_kw_array(c, 1, 0);
        for (int64_t p = 0; p < np && !c->bad; p++) {
            lk_kw_skip(c, 4 + 2 + 8 + 8 + 8);
            int64_t na = lk_kw_array(c, 1, 1);
            for (int64_t a = 0; a < na && !c->bad; a++) {
                lk_kw_skip(c, 8 + 8);
                lk_kw_tags(c);
            }
            lk_kw_skip(c, 4);
            lk_kw_bytes(c, 1);
            lk_kw_tags(c);
        }
        lk_kw_tags(c);
    }
    top_tags(w);
}

/* ShareFetchResponse and ShareAcknowledgeResponse (KIP-932, flexible
 * from v0): ThrottleTimeMs, ErrorCode, ErrorMessage?,
 * AcquisitionLockTimeoutMs (ShareFetch v1+, ShareAcknowledge v2+:
 * KIP-1222; ShareFetch v2 is v1's layout), Responses[]{TopicId, Partitions[]{PartitionIndex,
 * ErrorCode, ErrorMessage?, [ShareFetch: AcknowledgeErrorCode, AcknowledgeErrorMessage?],
 * CurrentLeader{LeaderId, LeaderEpoch}, [ShareFetch: Records?, AcquiredRecords[]{FirstOffset,
 * LastOffset, DeliveryCount}]}}, then NodeEndpoints[] as a plain field, last. */
static void
share(struct walk *w, int is_fetch)
{
    struct lk_kw *c = &w->c;

    lk_kw_skip(c, 4 + 2);
    lk_kw_string(c, 1, 1);
    if (w->ver >= (is_fetch ? 1 : 2))
        lk_kw_skip(c, 4);
    int64_t nt = lk_kw_array(c, 1, 0);
    for (int64_t t = 0; t < nt && !c->bad; t++) {
        lk_kw_skip(c, 16);
        int64_t np = lk_kw_array(c, 1, 0);
        for (int64_t p = 0; p < np && !c->bad; p++) {
            lk_kw_skip(c, 4 + 2);
            lk_kw_string(c, 1, 1);
            if (is_fetch) {
                lk_kw_skip(c, 2);
                lk_kw_string(c, 1, 1);
            }
            lk_kw_skip(c, 4 + 4); /* CurrentLeader */
            lk_kw_tags(c);
            if (is_fetch) {
                lk_kw_bytes(c, 1);
                int64_t na = lk_kw_array(c, 1, 0);
                for (int64_t a = 0; a < na && !c->bad; a++) {
                    lk_kw_skip(c, 8 + 8 + 2);
                    lk_kw_tags(c);
                }
            }
            lk_kw_tags(c);
        }
        lk_kw_tags(c);
    }
    node_endpoints(w);
    /* The top-level tagged fields are copied, but must be there: the
     * streamed rewrite (lk_kafka_tail_fit) pads them, and refuses what it
     * could not, so the two agree on what is malformed. */
    lk_kw_tags(c);
}

/* DescribeQuorumResponse v2 (KIP-853; flexible from v0; apache/kafka's
 * DescribeQuorumResponse.json at 1eb7644, "validVersions": "0-2"): ErrorCode, ErrorMessage? (v2+), Topics[]{TopicName,
 * Partitions[]{PartitionIndex, ErrorCode, ErrorMessage? (v2+), LeaderId,
 * LeaderEpoch, HighWatermark int64, CurrentVoters[], Observers[]}}, then
 * Nodes[]{NodeId, Listeners[]{Name, Host, Port uint16}} (v2+).  A voter
 * or observer is a ReplicaState{ReplicaId, ReplicaDirectoryId uuid (v2+),
 * LogEndOffset, LastFetchTimestamp (v1+), LastCaughtUpTimestamp (v1+)}:
 * 44 fixed bytes in v2.  Only v2 comes here (the rewrite set's min and
 * max). */
static void
describe_quorum(struct walk *w)
{
    struct lk_kw *c = &w->c;

    lk_kw_skip(c, 2);
    lk_kw_string(c, 1, 1);
    int64_t nt = lk_kw_array(c, 1, 0);
    for (int64_t t = 0; t < nt && !c->bad; t++) {
        lk_kw_string(c, 1, 0);
        int64_t np = lk_kw_array(c, 1, 0);
        for (int64_t p = 0; p < np && !c->bad; p++) {
            lk_kw_skip(c, 4 + 2);
            lk_kw_string(c, 1, 1);
            lk_kw_skip(c, 4 + 4 + 8);
            for (int list = 0; list < 2 && !c->bad; list++) { /* CurrentVoters, Observers */
                int64_t nr = lk_kw_array(c, 1, 0);
                for (int64_t r = 0; r < nr && !c->bad; r++) {
                    lk_kw_skip(c, 4 + 16 + 8 + 8 + 8);
                    lk_kw_tags(c);
                }
            }
            lk_kw_tags(c);
        }
        lk_kw_tags(c);
    }
    int64_t nn = lk_kw_array(c, 1, 0);
    for (int64_t n = 0; n < nn && !c->bad; n++) {
        int32_t id = lk_kw_i32(c);
        int64_t nl = lk_kw_array(c, 1, 0);
        for (int64_t l = 0; l < nl && !c->bad; l++) {
            lk_kw_string(c, 1, 0); /* Name: the listener's, kept */
            host_port(w, id, w->rw->controller, 1, 0);
            lk_kw_tags(c);
        }
        lk_kw_tags(c);
    }
    lk_kw_tags(c);
}

/* ApiVersionsResponse: ErrorCode, ApiKeys[]{ApiKey, MinVersion,
 * MaxVersion}, ...: clamps and drops entries; the rest is copied.  Returns
 * 1 for an error-35 reply, which is left undecoded. */
static int
api_versions(struct walk *w)
{
    struct lk_kw *c = &w->c;
    struct lk_kafka_rewrite *rw = w->rw;

    if (lk_kw_i16(c) == LK_KAFKA_ERR_UNSUPPORTED_VERSION && !c->bad)
        return 1; /* a v0 body whatever was asked (KIP-511) */
    size_t count_off = c->off;
    int64_t n = lk_kw_array(c, w->flex, 0);
    size_t slot = edit_add(w, E_NOOP, count_off, c->off - count_off);
    int64_t kept = n;
    for (int64_t i = 0; i < n && !c->bad; i++) {
        size_t start = c->off;
        int16_t key = lk_kw_i16(c);
        int16_t min = lk_kw_i16(c);
        size_t max_off = c->off;
        int16_t max = lk_kw_i16(c);
        tags(w);
        if (c->bad)
            break;
        int top = lk_kafka_clamp_version(key);
        if ((rw->drop_unknown_api && !lk_kafka_api_known(key)) || (top >= 0 && min > top)) {
            /* unknown, or no version left that lookout can rewrite */
            edit_add(w, E_DEL, start, c->off - start);
            rw->dropped++;
            kept--;
        } else if (top >= 0 && max > top) {
            size_t k = edit_add(w, E_I16, max_off, 2);
            w->e[k].v = (uint16_t)top;
            rw->clamped++;
        }
    }
    if (kept != n) {
        w->e[slot].kind = w->flex ? E_UVARINT : E_I32;
        w->e[slot].v = (uint32_t)(w->flex ? kept + 1 : kept);
    }
    return 0;
}

/* Writes the frame with the edits spliced in. */
static void
emit(const struct walk *w, const uint8_t *frame, size_t len, uint32_t size, struct evbuffer *out)
{
    uint8_t tmp[8];
    size_t at = 4;

    if (evbuffer_expand(out, (size_t)size + 4) != 0)
        abort(); /* out of memory, as lk_xmalloc */
    lk_kw_put32(tmp, size);
    evbuffer_add(out, tmp, 4);
    for (size_t i = 0; i < w->ne; i++) {
        const struct edit *e = &w->e[i];
        if (e->kind == E_NOOP)
            continue;
        evbuffer_add(out, frame + at, e->off - at);
        switch (e->kind) {
        case E_STR:
            if (e->flex) {
                evbuffer_add(out, tmp, lk_kw_put_uvarint(tmp, (uint32_t)e->slen + 1));
            } else {
                lk_kw_put16(tmp, (uint16_t)e->slen);
                evbuffer_add(out, tmp, 2);
            }
            evbuffer_add(out, e->s, e->slen);
            break;
        case E_I32:
            lk_kw_put32(tmp, e->v);
            evbuffer_add(out, tmp, 4);
            break;
        case E_I16:
            lk_kw_put16(tmp, (uint16_t)e->v);
            evbuffer_add(out, tmp, 2);
            break;
        case E_UVARINT:
            evbuffer_add(out, tmp, lk_kw_put_uvarint(tmp, e->v));
            break;
        default: /* E_DEL */
            break;
        }
        at = e->off + e->old_len;
    }
    evbuffer_add(out, frame + at, len - at);
}

enum lk_kafka_rw
lk_kafka_rewrite_response(const uint8_t *frame, size_t len, int16_t api_key, int16_t api_version,
                          struct lk_kafka_rewrite *rw, struct evbuffer *out)
{
    struct walk w;
    enum lk_kafka_rw rc = LK_KAFKA_RW_UNCHANGED;
    int64_t size;
    int any = 0;
    int hv = lk_kafka_response_header_version(api_key, api_version);

    rw->endpoints = rw->changed = rw->unknown = rw->skipped = rw->clamped = rw->dropped = 0;
    rw->tag_at = 0;
    rw->flex = 0;
    if (len < LK_KAFKA_RES_PREFIX || len - 4 > INT32_MAX || lk_kw_get32(frame) != len - 4)
        return LK_KAFKA_RW_MALFORMED;
    if (hv < 0 || api_version < 0)
        return LK_KAFKA_RW_UNSUPPORTED;
    if (api_key == LK_KAFKA_API_VERSIONS) {
        if (api_version > API_VERSIONS_MAX)
            return LK_KAFKA_RW_UNSUPPORTED;
    } else {
        enum lk_kafka_addrs a = lk_kafka_response_addrs(api_key, api_version);
        if (a == LK_KAFKA_ADDRS_NONE)
            return LK_KAFKA_RW_UNCHANGED; /* it carries no endpoint */
        if (a != LK_KAFKA_ADDRS_DECODED)
            return LK_KAFKA_RW_UNSUPPORTED;
    }

    w.c = (struct lk_kw){frame, len, 4, 0}; /* field by field: inl is written as edits come */
    w.flex = rw->flex = flexible(api_key, api_version);
    w.ver = api_version;
    w.rw = rw;
    w.e = w.inl;
    w.ne = 0;
    w.cap = sizeof(w.inl) / sizeof(w.inl[0]);

    lk_kw_skip(&w.c, 4); /* CorrelationId */
    if (hv == 1)
        lk_kw_tags(&w.c); /* response header v1: copied, tags and all */
    switch (api_key) {
    case LK_KAFKA_PRODUCE:
        produce(&w);
        break;
    case LK_KAFKA_FETCH:
        fetch(&w);
        break;
    case LK_KAFKA_METADATA:
        metadata(&w);
        break;
    case LK_KAFKA_FIND_COORDINATOR:
        find_coordinator(&w);
        break;
    case LK_KAFKA_DESCRIBE_CLUSTER:
        describe_cluster(&w);
        break;
    case LK_KAFKA_SHARE_FETCH:
    case LK_KAFKA_SHARE_ACKNOWLEDGE:
        share(&w, api_key == LK_KAFKA_SHARE_FETCH);
        break;
    case LK_KAFKA_DESCRIBE_QUORUM:
        describe_quorum(&w);
        break;
    case LK_KAFKA_API_VERSIONS:
        if (api_versions(&w) == 1)
            goto out;
        break;
    default:
        goto out; /* not reached: lk_kafka_response_addrs said no */
    }
    if (w.c.bad) {
        rc = LK_KAFKA_RW_MALFORMED;
        goto out;
    }
    size = (int64_t)len - 4 + edits_delta(&w, 0);
    for (size_t i = 0; i < w.ne && !any; i++)
        any = w.e[i].kind != E_NOOP;
    if (!any)
        goto out;
    if (size > INT32_MAX) {
        rc = LK_KAFKA_RW_MALFORMED;
        goto out;
    }
    if (out != NULL) /* NULL: a reading (lk_kafka_view_decode, the leak guard) */
        emit(&w, frame, len, (uint32_t)size, out);
    rc = LK_KAFKA_RW_REWRITTEN;
out:
    if (w.e != w.inl)
        free(w.e);
    return rc;
}

/* ---- KIP-1102: rebootstrap while draining --------------------------- */

int
lk_kafka_rebootstrap_version(int16_t api_version)
{
    return api_version >= 13 && api_version <= lk_kafka_rewrite_max_version(LK_KAFKA_METADATA);
}

size_t
lk_kafka_rebootstrap_answer(int16_t api_version, int32_t correlation_id, uint8_t *out)
{
    size_t n = 8;

    if (!lk_kafka_rebootstrap_version(api_version))
        return 0;
    out[n++] = 0; /* response header v1: no tagged fields */
    lk_kw_put32(out + n, 0);          /* ThrottleTimeMs */
    n += 4;
    out[n++] = 1;                     /* Brokers: compact array, empty */
    out[n++] = 0;                     /* ClusterId: compact nullable string, null */
    lk_kw_put32(out + n, UINT32_MAX); /* ControllerId: -1 */
    n += 4;
    out[n++] = 1; /* Topics: empty (ClusterAuthorizedOperations is v8-10 only) */
    lk_kw_put16(out + n, LK_KAFKA_ERR_REBOOTSTRAP_REQUIRED); /* ErrorCode (v13+) */
    n += 2;
    out[n++] = 0; /* no tagged fields */
    lk_kw_put32(out, (uint32_t)(n - 4));
    lk_kw_put32(out + 4, (uint32_t)correlation_id);
    return n;
}
