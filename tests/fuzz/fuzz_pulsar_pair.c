/*
 * Fuzzes the Pulsar binary module (proxy/lk_pulsar.c, included here for
 * its statics) as a pair: a client and a broker around one connection,
 * their turns interleaved as the input says, on bufferevents with no
 * socket, driven through the module's own start, pumps (pump_requests,
 * pump_responses) and drain, and the pair's callbacks where they can run
 * without a socket (the client's write and event callbacks, the worker
 * budget's resume event).  Only the dial is the harness's: once
 * choose_broker has picked the broker from the CONNECT (as pump_requests
 * would), the broker connection is one already made, as up_ready leaves
 * it.  Both peers read only when lookout reads them, as sockets would: a
 * side's bytes reach lookout only while it has reading on, at most
 * READ_MAX at a time, and what lookout writes waits in its output until
 * the peer reads it (then the write callback runs), so the backpressure
 * and the budget (max_held_bytes, the client waiter cw) are exercised.
 *
 * The broker is a model of Pulsar's: it reads the frames lookout sends
 * it ([totalSize][commandSize][BaseCommand] and, for SEND, the payload
 * section: magic 0x0e01, CRC32C, metadata, payload; facts/pulsar.md §4)
 * with a protobuf reader of this file's own, and answers each as a
 * broker does: CONNECTED, LOOKUP_RESPONSE (Connect, Redirect or Failed)
 * naming a broker of the map at its internal pulsar and pulsar+ssl
 * addresses (or at its external ones, or an address the map lacks),
 * PARTITIONED_METADATA_RESPONSE, PONG, SEND_RECEIPT or SEND_ERROR,
 * SUCCESS; and it pushes commands of its own: CLOSE_PRODUCER and
 * CLOSE_CONSUMER with assigned URLs, TOPIC_MIGRATED, MESSAGE with a
 * payload section (sometimes with 0x0e02 broker entry metadata), PING,
 * ERROR, and a type lookout does not know.  Its error texts, and the
 * bytes of the unknown type, sometimes name an internal address of a
 * broker of the connection's cluster as a broker names itself
 * ("host:port", "scheme://host:port", or a binary-only broker's brokerId,
 * its host with any port); every payload and every other string is made
 * of bytes below 0x10, which can spell no address.
 *
 * The client sends what the input says: CONNECT (with a
 * proxy_to_broker_url naming a mapped broker's internal or external
 * address, an address the map lacks, or none), LOOKUP (advertised
 * listener names the map lets it choose, refuses, or lacks; request ids
 * that repeat; unknown fields; a topic long enough to count against
 * max_held_bytes), PARTITIONED_METADATA, PING, PONG, SEND with a
 * checksummed payload of any size, a command lookout does not know,
 * FLOW, frames lookout refuses (a command giving its type twice, sizes
 * that cannot be), raw bytes; in pieces of any size, and it may close in
 * the middle of a frame.  The broker may also send bytes of its own
 * between frames (a broken broker), or close in the middle of one.
 *
 * Invariants:
 *   - no internal host of the map (each is unique to one broker and no
 *     other string of the map holds it) appears in the bytes lookout
 *     delivers to the client.  The map has leak_guard = block: every
 *     address the broker names outside the URL fields that the pulsar
 *     filter rewrites must close the connection before it reaches the
 *     client.  Unchecked after the broker broke the framing, as in
 *     fuzz_kafka_pair: a command then can sit inside a frame lookout
 *     reads as a SEND's payload, which no proxy that reads only frame
 *     heads and the commands that may name a broker can see;
 *   - every frame reaches the broker as the client sent it, in order,
 *     but for a LOOKUP's advertised_listener_name, which is removed (and
 *     the command otherwise kept field for field, unknown ones in order
 *     with their bytes), until the client sends bytes that are no frame;
 *   - every frame the broker sends reaches the client in order, byte for
 *     byte but for the commands the pulsar filter rewrites
 *     (LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER, TOPIC_MIGRATED),
 *     which keep every field but their URL pair (and a LOOKUP_RESPONSE's
 *     proxy_through_service_url); each URL they carry is an address of a
 *     listener of the broker the broker named other than its internal
 *     one; each LOOKUP_RESPONSE that answers a LOOKUP carries the
 *     request id of the client's LOOKUP it answers (the k-th LOOKUP's),
 *     and one that names an address the map lacks never reaches the
 *     client (while the broker keeps to the framing);
 *   - what the connection holds stays within its bounds after every
 *     step: the worker budget's count is exactly what the two waiters
 *     count, each at most a frame (max_frame_bytes), the whole at most
 *     max_held_bytes plus one frame plus one read; a waiter the budget
 *     paused has its side's reading off; no held frame is left between
 *     pumps; at most LK_PULSAR_MAX_LOOKUPS lookups remembered; each
 *     side's input within a frame and a read, each output within
 *     LK_PAIR_HIGH and a frame and a read;
 *   - draining (SIGTERM, step 7): no frame from the client begins to go
 *     to the broker after the one under way.
 *
 * Input: a flags byte (bit 0: pulsar_routing = service, else per-broker;
 * bits 1-3: which of the cluster's plaintext bind addresses the client
 * reached), then a stream of steps, each one byte and the bytes it reads:
 *   0-3  the client queues a frame (kind and fields from what follows);
 *   4    the client's queued bytes go to lookout, a read at a time;
 *   5    the broker reads what lookout sent and queues its answers;
 *   6    the broker's queued bytes go to lookout, a read at a time;
 *   7    by the next byte: the client reads what lookout sent it; the
 *        broker pushes a command of its own; the broker sends bytes of
 *        its own; the client closes (then nothing more happens); the
 *        broker closes after part of what it queued; lookout starts
 *        draining, as on SIGTERM.
 * At the end everything queued is delivered until nothing moves.
 */
#include "lk_pulsar.c"

#include <event2/event.h>

#include "fuzz_util.h"
#include "lk_proxyproto.h" /* lk_pp_crc32c */
#include "lk_runtime.h"
#include "lk_upstream.h"
#include "../unit/lk_test_wire.h" /* struct tb, put(), w8() */

/* The most lookout reads of a socket at once, as the harness models it
 * (a bufferevent's default most for one read). */
#define READ_MAX 16384
/* max_frame_bytes and max_held_bytes of the map below: frames of a few
 * dozen KiB past LK_PULSAR_WAIT_FREE count against the budget, and a few
 * are over the cap. */
#define CAP (160 * 1024)
#define HELD_MAX (96 * 1024)

/*
 * Two Pulsar clusters, every internal host unique to one broker and in no
 * other string of the map: prod, whose brokers p1 (internal pulsar,
 * pulsar+ssl and http: its brokerId is an address of the map), p2 (a
 * long DNS name, binary only) and p3 (IPv6, binary only, only pulsar+ssl
 * outside) have an "other" listener that clients may choose; and west,
 * whose broker a Redirect may name.  %s: pulsar_routing.
 */
static const char map_fmt[] =
    "[lookout]\n"
    "max_held_bytes = 96k\n"
    "timeout.first_frame = off\n"
    "timeout.idle = 600s\n"
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "client_listeners = other\n"
    "serviceUrl = pulsar://127.0.7.100:6650\n"
    "pulsar_routing = %s\n"
    "leak_guard = block\n"
    "max_frame_bytes = 160k\n"
    "[broker prod/p1]\n"
    "advertisedListeners = internal:pulsar://10.9.0.11:6650,internal:pulsar+ssl://10.9.0.11:6651,"
    "internal:http://10.9.0.11:8080,external:pulsar://127.0.7.1:6650,"
    "external:pulsar+ssl://127.0.7.1:6651,other:pulsar://127.0.17.1:6650\n"
    "[broker prod/p2]\n"
    "advertisedListeners = "
    "internal:pulsar://pulsar-broker-2.pulsar-broker.pulsar.svc.cluster.local:6650,"
    "external:pulsar://127.0.7.2:6650,other:pulsar+ssl://127.0.17.2:6651\n"
    "[broker prod/p3]\n"
    "advertisedListeners = internal:pulsar://[fd00::93]:6650,external:pulsar+ssl://127.0.7.3:6651,"
    "other:pulsar://127.0.17.3:6650\n"
    "[pulsar west]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "serviceUrl = pulsar://127.0.8.100:6650\n"
    "pulsar_routing = %s\n"
    "leak_guard = block\n"
    "[broker west/w1]\n"
    "advertisedListeners = internal:pulsar://10.8.0.21:6650,external:pulsar://127.0.8.1:6650\n";

static struct lk_conf *
the_map(int service)
{
    static struct lk_conf *confs[2];
    char text[2048];

    if (confs[service] == NULL) {
        const char *r = service ? "service" : "per-broker";
        snprintf(text, sizeof(text), map_fmt, r, r);
        confs[service] = lk_fuzz_load(text);
    }
    return confs[service];
}

static const struct lk_cluster *
cluster_named(const struct lk_conf *conf, const char *name)
{
    for (size_t k = 0; k < conf->nclusters; k++)
        if (strcmp(conf->clusters[k]->name, name) == 0)
            return conf->clusters[k];
    abort();
}

/* ---- bytes ---------------------------------------------------------- */

static void
w32(struct tb *b, uint32_t v)
{
    w8(b, v >> 24);
    w8(b, v >> 16);
    w8(b, v >> 8);
    w8(b, v);
}

/* A generator of the broker's own choices, seeded by the input. */
static uint64_t
rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s >> 11;
}

/* n bytes below 0x10: no address can be spelt in them. */
static void
opaque(struct tb *b, uint64_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        w8(b, (int)(rng(s) & 0x0f));
}

/* ---- protobuf, written and read by the harness itself ---------------- */

/* A MessageIdData (ledgerId, entryId) as field `field` of sub. */
static void
message_id(struct tb *sub, uint32_t field, uint64_t *s)
{
    struct tb id = {0};

    pb_uint(&id, 1, 7);
    pb_uint(&id, 2, rng(s) % 100);
    pb_bytes(sub, field, id.p, id.len);
    free(id.p);
}

/* A BaseCommand of type `type` around the sub-command sub (its field
 * number is the type's value); sub is freed. */
static void
base_command(struct tb *cmd, unsigned type, struct tb *sub)
{
    pb_uint(cmd, 1, type);
    pb_bytes(cmd, type, sub->p, sub->len);
    free(sub->p);
    *sub = (struct tb){0};
}

/* A simple frame around cmd into out; cmd is freed. */
static void
simple_frame(struct tb *out, struct tb *cmd)
{
    w32(out, (uint32_t)cmd->len + 4);
    w32(out, (uint32_t)cmd->len);
    put(out, cmd->p, cmd->len);
    free(cmd->p);
    *cmd = (struct tb){0};
}

/* A payload frame: cmd, then (entry: broker entry metadata first) magic
 * 0x0e01, the CRC32C of what follows, the metadata's size, the metadata
 * and n payload bytes below 0x10. */
static void
payload_frame(struct tb *out, struct tb *cmd, int entry, size_t n, uint64_t *s)
{
    struct tb meta = {0}, tail = {0}, body = {0};

    pb_str(&meta, 1, "\x01\x02");        /* producer_name */
    pb_uint(&meta, 2, rng(s) % 100);     /* sequence_id */
    pb_uint(&meta, 3, 1700000000000ULL); /* publish_time */
    w32(&tail, (uint32_t)meta.len);
    put(&tail, meta.p, meta.len);
    opaque(&tail, s, n);
    if (entry) { /* 0x0e02, size, BrokerEntryMetadata {broker_timestamp} */
        struct tb em = {0};
        pb_uint(&em, 1, 1700000000001ULL);
        w8(&body, 0x0e);
        w8(&body, 0x02);
        w32(&body, (uint32_t)em.len);
        put(&body, em.p, em.len);
        free(em.p);
    }
    w8(&body, 0x0e);
    w8(&body, 0x01);
    w32(&body, lk_pp_crc32c(0, tail.p, tail.len));
    put(&body, tail.p, tail.len);
    w32(out, (uint32_t)(4 + cmd->len + body.len));
    w32(out, (uint32_t)cmd->len);
    put(out, cmd->p, cmd->len);
    put(out, body.p, body.len);
    free(cmd->p);
    *cmd = (struct tb){0};
    free(meta.p);
    free(tail.p);
    free(body.p);
}

/* One field of a message, as read. */
struct pbf {
    uint32_t num, wt;
    uint64_t v;       /* a varint's value */
    const uint8_t *p; /* a length-delimited field's bytes */
    size_t len;
};

/* The last field num of the message p[0..len) into *f: 1, 0 when it has
 * none, -1 when the message is not protobuf (varint and length-delimited
 * fields only, and fixed ones skipped). */
static int
pb_find(const uint8_t *p, size_t len, uint32_t num, struct pbf *f)
{
    size_t at = 0;
    int found = 0;

    while (at < len) {
        uint64_t key, v;
        struct pbf g = {0};
        if (lk_fuzz_rd_varint(p, len, &at, &key) != 0 || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
            return -1;
        g.num = (uint32_t)(key >> 3);
        g.wt = (uint32_t)(key & 7);
        switch (g.wt) {
        case 0:
            if (lk_fuzz_rd_varint(p, len, &at, &v) != 0)
                return -1;
            g.v = v;
            break;
        case 1:
        case 5:
            if (len - at < (g.wt == 1 ? 8u : 4u))
                return -1;
            at += g.wt == 1 ? 8 : 4;
            break;
        case 2:
            if (lk_fuzz_rd_varint(p, len, &at, &v) != 0 || v > len - at)
                return -1;
            g.p = p + at;
            g.len = (size_t)v;
            at += (size_t)v;
            break;
        default:
            return -1;
        }
        if (g.num == num) {
            *f = g;
            found = 1;
        }
    }
    return found;
}

/* A command's type and sub-command (as a broker reads it: the last of
 * each): 0, or -1 when it is not one. */
static int
read_command(const uint8_t *cmd, size_t len, unsigned *type, const uint8_t **sub, size_t *sublen)
{
    struct pbf f;

    if (pb_find(cmd, len, 1, &f) != 1 || f.wt != 0 || f.v == 0 || f.v > 1000)
        return -1;
    *type = (unsigned)f.v;
    *sub = NULL;
    *sublen = 0;
    if (pb_find(cmd, len, *type, &f) == 1 && f.wt == 2) {
        *sub = f.p;
        *sublen = f.len;
    }
    return 0;
}

static uint64_t
sub_uint(const uint8_t *sub, size_t len, uint32_t num)
{
    struct pbf f;
    return sub != NULL && pb_find(sub, len, num, &f) == 1 && f.wt == 0 ? f.v : 0;
}

/* ---- the map's addresses --------------------------------------------- */

/* Whether s is the URL text of one of b's listener addresses other than
 * its internal listener's. */
static int
external_url_of(const struct lk_broker *b, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < b->nlisteners; i++) {
        const struct lk_listener *l = &b->listeners[i];
        if (l == b->internal)
            continue;
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
            if (l->addr[sc] != NULL && strlen(l->addr[sc]->text) == n &&
                memcmp(l->addr[sc]->text, s, n) == 0)
                return 1;
    }
    return 0;
}

/* ---- the client ------------------------------------------------------ */

/* What the client sent, frame by frame, for the broker to compare. */
struct cframe {
    size_t off, len; /* in client.log */
    unsigned type;   /* 0: not one the broker can read */
    int listener;    /* a LOOKUP with advertised_listener_name */
    uint64_t request_id;
};

struct client {
    struct tb queued; /* not delivered yet */
    struct tb log;    /* every frame queued, in order */
    struct cframe *f; /* ... and where each is */
    size_t nf;
    uint64_t *lookups; /* the request ids of its LOOKUPs, in order */
    size_t nlookups;
    int raw;       /* it sent bytes that are no frame: nothing checked of requests */
    struct tb got; /* what lookout delivered to it */
};

static void
client_add(struct client *cl, const struct tb *fr, unsigned type, int listener, uint64_t rid)
{
    cl->f = realloc(cl->f, (cl->nf + 1) * sizeof(*cl->f));
    if (cl->f == NULL)
        abort();
    cl->f[cl->nf++] = (struct cframe){cl->log.len, fr->len, type, listener, rid};
    put(&cl->log, fr->p, fr->len);
    put(&cl->queued, fr->p, fr->len);
    if (type == LK_PULSAR_LOOKUP) {
        cl->lookups = realloc(cl->lookups, (cl->nlookups + 1) * sizeof(*cl->lookups));
        if (cl->lookups == NULL)
            abort();
        cl->lookups[cl->nlookups++] = rid;
    }
}

/* A string of n bytes: text, then below-0x10 bytes up to n. */
static void
pad_str(struct tb *b, uint32_t field, const char *text, size_t n, uint64_t *s)
{
    struct tb t = {0};
    put(&t, text, strlen(text));
    if (n > t.len)
        opaque(&t, s, n - t.len);
    pb_bytes(b, field, t.p, t.len);
    free(t.p);
}

/* A size of a large frame: past LK_PULSAR_WAIT_FREE, sometimes past CAP. */
static size_t
big_size(unsigned c)
{
    return 60000 + (size_t)c * 420;
}

static uint64_t
request_id(struct lk_fuzz_in *in)
{
    unsigned c = lk_fuzz_r8(in);
    return c < 0xc0 ? c % 4 : ((uint64_t)c << 40 | lk_fuzz_r8(in));
}

static void
client_frame(struct client *cl, const struct lk_conf *conf, struct lk_fuzz_in *in, uint64_t *s,
             unsigned kind)
{
    static const char *const listeners[] = {"external", "other", "internal", "vpn", ""};
    struct tb sub = {0}, cmd = {0}, fr = {0};
    unsigned v = lk_fuzz_r8(in), type = 0;
    int listener = 0;
    uint64_t rid = 0;
    const struct lk_cluster *prod = cluster_named(conf, "prod");

    switch ((kind << 2 | (v & 3)) % 12) {
    case 0: { /* CONNECT, with proxy_to_broker_url or not */
        pb_str(&sub, 1, "fuzz-client");
        pb_uint(&sub, 4, 21);
        unsigned t = (v >> 2) % 8;
        if (t < 6) {
            const struct lk_broker *b = prod->brokers[t % prod->nbrokers];
            const struct lk_url *u =
                t < 3 ? lk_listener_pick(b->internal, LK_SCHEME_PULSAR, 0)
                      : lk_listener_pick(lk_broker_listener(b, "external"), LK_SCHEME_PULSAR, 0);
            if (u != NULL)
                pb_str(&sub, 6, (v & 0x80) ? u->text : u->hostport);
        } else if (t == 6) {
            pb_str(&sub, 6, "10.66.0.1:6650"); /* no broker of the map */
        }
        base_command(&cmd, type = LK_PULSAR_CONNECT, &sub);
        simple_frame(&fr, &cmd);
        break;
    }
    case 1: { /* LOOKUP */
        unsigned c = lk_fuzz_r8(in);
        rid = request_id(in);
        pad_str(&sub, 1, "persistent://public/default/t", (v & 0x80) ? big_size(lk_fuzz_r8(in)) : 0,
                s);
        pb_uint(&sub, 2, rid);
        if (c & 1)
            pb_uint(&sub, 3, (c >> 1) & 1); /* authoritative */
        if (c & 4) {
            pb_str(&sub, 7, listeners[(c >> 3) % 5]);
            listener = 1;
        }
        if (c & 0x40)
            pb_bytes(&sub, 8, "\x0a\x01k\x12\x01v", 6); /* properties: an unknown field here */
        if (c & 0x80)
            pb_uint(&sub, 99, 7);
        base_command(&cmd, type = LK_PULSAR_LOOKUP, &sub);
        simple_frame(&fr, &cmd);
        break;
    }
    case 2: /* PARTITIONED_METADATA */
        rid = request_id(in);
        pb_str(&sub, 1, "persistent://public/default/p");
        pb_uint(&sub, 2, rid);
        base_command(&cmd, type = 21, &sub);
        simple_frame(&fr, &cmd);
        break;
    case 3: /* PING */
    case 4: /* PONG */
        base_command(&cmd, type = (v & 3) == 3 ? LK_PULSAR_PING : LK_PULSAR_PONG, &sub);
        simple_frame(&fr, &cmd);
        break;
    case 5: { /* SEND with its payload */
        size_t n = (v & 0x80) ? big_size(lk_fuzz_r8(in)) : lk_fuzz_r8(in);
        pb_uint(&sub, 1, v >> 4);         /* producer_id */
        pb_uint(&sub, 2, lk_fuzz_r8(in)); /* sequence_id */
        if (v & 0x40)
            pb_uint(&sub, 3, 1); /* num_messages */
        base_command(&cmd, type = LK_PULSAR_SEND, &sub);
        payload_frame(&fr, &cmd, 0, n, s);
        break;
    }
    case 6: /* FLOW */
        pb_uint(&sub, 1, v >> 2);
        pb_uint(&sub, 2, 1000);
        base_command(&cmd, type = 11, &sub);
        simple_frame(&fr, &cmd);
        break;
    case 7: { /* a type lookout does not know */
        struct tb t = {0};
        opaque(&t, s, lk_fuzz_r8(in) % 32);
        pb_bytes(&sub, 1, t.p, t.len);
        free(t.p);
        base_command(&cmd, type = 120 + (v >> 2) % 8, &sub);
        simple_frame(&fr, &cmd);
        break;
    }
    case 8: /* CLOSE_PRODUCER from the client: the broker answers SUCCESS */
        rid = request_id(in);
        pb_uint(&sub, 1, v >> 2);
        pb_uint(&sub, 2, rid);
        base_command(&cmd, type = LK_PULSAR_CLOSE_PRODUCER, &sub);
        simple_frame(&fr, &cmd);
        break;
    case 9: /* a command giving its type twice: refused */
        pb_uint(&cmd, 1, LK_PULSAR_PING);
        pb_bytes(&cmd, LK_PULSAR_PING, "", 0);
        pb_uint(&cmd, 1, LK_PULSAR_LOOKUP);
        simple_frame(&fr, &cmd);
        break;
    case 10: /* sizes that cannot be: commandSize 0, past totalSize, or over the cap */
        w32(&fr, (v & 8) ? CAP + 1 + lk_fuzz_r8(in) : 4 + (v >> 4));
        w32(&fr, (v & 4) ? 0 : 5 + (v >> 4));
        opaque(&fr, s, lk_fuzz_r8(in) % 8);
        break;
    default: /* raw bytes */
        opaque(&fr, s, lk_fuzz_r8(in) % 16);
        cl->raw = 1;
        break;
    }
    if (cl->raw)
        type = 0;
    client_add(cl, &fr, type, listener, rid);
    free(fr.p);
}

/* ---- the broker ------------------------------------------------------ */

/* What the broker sent, frame by frame, for the client to compare. */
struct bframe {
    size_t off, len; /* in broker.log */
    unsigned type;
    const struct lk_broker *named; /* the broker its URLs name */
    int unmapped;                  /* its URL names an address the map lacks */
    int leak;                      /* it names an internal address where no filter rewrites it */
    int answers;                   /* a LOOKUP_RESPONSE answering a LOOKUP */
    uint64_t request_id;
};

struct broker {
    uint64_t rng;
    struct tb got; /* what lookout sent, not read yet */
    struct tb out; /* queued, not delivered yet */
    struct tb log; /* every frame queued, in order */
    struct bframe *f;
    size_t nf;
    size_t nread;   /* client frames it has read */
    uint64_t total; /* bytes lookout sent it, ever */
    int connected;  /* it has answered a CONNECT */
    int closed;     /* it closed the connection (or would have) */
    int noisy;      /* it sent bytes of its own: frames are no longer 1:1 */
};

static void
broker_add(struct broker *br, const struct tb *fr, const struct bframe *bf)
{
    br->f = realloc(br->f, (br->nf + 1) * sizeof(*br->f));
    if (br->f == NULL)
        abort();
    br->f[br->nf] = *bf;
    br->f[br->nf].off = br->log.len;
    br->f[br->nf].len = fr->len;
    br->nf++;
    put(&br->log, fr->p, fr->len);
    put(&br->out, fr->p, fr->len);
}

/* An internal address of one of prod's brokers as a broker names itself
 * in a text: its URL, its host:port, or (binary-only brokers) its
 * brokerId, the host with any port. */
static void
address_text(struct tb *t, struct broker *br, const struct lk_cluster *prod)
{
    const struct lk_broker *b = prod->brokers[rng(&br->rng) % prod->nbrokers];
    const struct lk_url *u = lk_listener_pick(b->internal, LK_SCHEME_PULSAR, 0), *w;
    char id[300];

    switch (rng(&br->rng) % 3) {
    case 0:
        put(t, u->text, strlen(u->text));
        break;
    case 1:
        put(t, u->hostport, strlen(u->hostport));
        break;
    default: /* its brokerId: the web address the map has, or any port */
        if ((w = lk_listener_pick(b->internal, LK_SCHEME_HTTP, 0)) != NULL) {
            put(t, w->hostport, strlen(w->hostport));
            break;
        }
        snprintf(id, sizeof(id), strchr(u->host, ':') != NULL ? "[%s]:%u" : "%s:%u", u->host,
                 (unsigned)(rng(&br->rng) % 65536));
        put(t, id, strlen(id));
        break;
    }
}

/* A text for an error message: bytes below 0x10, and with leak an
 * internal address among them (anywhere: at the start too). */
static void
error_text(struct tb *sub, uint32_t field, struct broker *br, const struct lk_cluster *prod,
           int leak, int big)
{
    struct tb t = {0};

    opaque(&t, &br->rng, rng(&br->rng) % 4);
    if (leak) {
        address_text(&t, br, prod);
        opaque(&t, &br->rng, rng(&br->rng) % 4);
    }
    if (big)
        opaque(&t, &br->rng, big_size((unsigned)rng(&br->rng) & 0xff));
    pb_bytes(sub, field, t.p, t.len);
    free(t.p);
}

/* The URL pair of a command naming a broker: b's internal pulsar and
 * pulsar+ssl addresses (what it has of them), or its external ones, or
 * an address the map lacks. */
static void
url_pair(struct tb *sub, uint32_t f_url, uint32_t f_tls, struct broker *br,
         const struct lk_conf *conf, struct bframe *bf)
{
    const struct lk_cluster *prod = cluster_named(conf, "prod"),
                            *west = cluster_named(conf, "west");
    unsigned c = (unsigned)rng(&br->rng);
    const struct lk_broker *b =
        (c & 3) == 3 ? west->brokers[0] : prod->brokers[(c >> 2) % prod->nbrokers];
    const struct lk_listener *l =
        (c & 0x30) == 0x30 ? lk_broker_listener(b, "external") : b->internal;

    if ((c & 0x1c0) == 0x1c0) {
        pb_str(sub, f_url, "pulsar://10.66.0.9:6650");
        bf->unmapped = 1;
        return;
    }
    bf->named = b;
    if (l->addr[LK_SCHEME_PULSAR] != NULL && !(c & 0x200 && l->addr[LK_SCHEME_PULSAR_SSL] != NULL))
        pb_str(sub, f_url, l->addr[LK_SCHEME_PULSAR]->text);
    if (l->addr[LK_SCHEME_PULSAR_SSL] != NULL)
        pb_str(sub, f_tls, l->addr[LK_SCHEME_PULSAR_SSL]->text);
}

static void
send_simple(struct broker *br, unsigned type, struct tb *sub, struct bframe *bf)
{
    struct tb cmd = {0}, fr = {0};

    bf->type = type;
    base_command(&cmd, type, sub);
    simple_frame(&fr, &cmd);
    broker_add(br, &fr, bf);
    free(fr.p);
}

/* A command the broker pushes of its own. */
static void
broker_push(struct broker *br, const struct lk_conf *conf, unsigned what)
{
    const struct lk_cluster *prod = cluster_named(conf, "prod");
    struct tb sub = {0}, cmd = {0}, fr = {0};
    struct bframe bf = {0};
    int leak = (rng(&br->rng) & 3) == 0;

    switch (what % 7) {
    case 0: /* CLOSE_PRODUCER, CLOSE_CONSUMER: a new owner (PIP-307) */
    case 1:
        pb_uint(&sub, 1, rng(&br->rng) % 4);
        pb_uint(&sub, 2, rng(&br->rng) % 4);
        if (rng(&br->rng) & 1)
            url_pair(&sub, 3, 4, br, conf, &bf);
        send_simple(br, what % 7 == 0 ? LK_PULSAR_CLOSE_PRODUCER : LK_PULSAR_CLOSE_CONSUMER, &sub,
                    &bf);
        break;
    case 2: /* TOPIC_MIGRATED */
        pb_uint(&sub, 1, rng(&br->rng) % 4);
        pb_uint(&sub, 2, rng(&br->rng) & 1);
        url_pair(&sub, 3, 4, br, conf, &bf);
        send_simple(br, LK_PULSAR_TOPIC_MIGRATED, &sub, &bf);
        break;
    case 3: /* MESSAGE, with its payload */
        pb_uint(&sub, 1, rng(&br->rng) % 4);
        message_id(&sub, 2, &br->rng);
        base_command(&cmd, bf.type = LK_PULSAR_MESSAGE, &sub);
        payload_frame(&fr, &cmd, rng(&br->rng) & 1,
                      (rng(&br->rng) & 7) == 0 ? big_size((unsigned)rng(&br->rng) & 0xff)
                                               : rng(&br->rng) % 200,
                      &br->rng);
        broker_add(br, &fr, &bf);
        free(fr.p);
        break;
    case 4: /* PING */
        send_simple(br, LK_PULSAR_PING, &sub, &bf);
        break;
    case 5: /* ERROR */
        pb_uint(&sub, 1, rng(&br->rng) % 4);
        pb_uint(&sub, 2, 6); /* ServiceNotReady */
        error_text(&sub, 3, br, prod, leak, (rng(&br->rng) & 7) == 0);
        bf.leak = leak;
        send_simple(br, 14, &sub, &bf);
        break;
    default: { /* a type lookout does not know, read as bytes by the guard */
        struct tb t = {0};
        opaque(&t, &br->rng, rng(&br->rng) % 8);
        if (leak) {
            address_text(&t, br, prod);
            opaque(&t, &br->rng, 1 + rng(&br->rng) % 4);
        }
        if ((rng(&br->rng) & 7) == 0)
            opaque(&t, &br->rng, big_size((unsigned)rng(&br->rng) & 0xff));
        pb_bytes(&sub, 1, t.p, t.len);
        free(t.p);
        bf.leak = leak;
        send_simple(br, 150 + (unsigned)(rng(&br->rng) % 4), &sub, &bf);
        break;
    }
    }
}

/* The broker's answer to a LOOKUP with request id rid. */
static void
lookup_answer(struct broker *br, const struct lk_conf *conf, uint64_t rid)
{
    const struct lk_cluster *prod = cluster_named(conf, "prod");
    struct tb sub = {0};
    struct bframe bf = {.answers = 1, .request_id = rid};
    unsigned c = (unsigned)rng(&br->rng);

    if ((c & 7) == 7) { /* Failed, with an error text */
        pb_uint(&sub, 3, LK_PULSAR_FAILED);
        pb_uint(&sub, 4, rid);
        pb_uint(&sub, 6, 11); /* TopicNotFound */
        bf.leak = (c & 0x18) == 0;
        error_text(&sub, 7, br, prod, bf.leak, (c & 0x60) == 0x60);
    } else {
        url_pair(&sub, 1, 2, br, conf, &bf);
        pb_uint(&sub, 3, (c >> 3) & 1); /* Redirect or Connect */
        pb_uint(&sub, 4, rid);
        if (c & 0x20)
            pb_uint(&sub, 5, 1); /* authoritative */
        if (c & 0x40)
            pb_uint(&sub, 8, (c >> 7) & 1);
        if ((c & 0x700) == 0x700)
            pb_uint(&sub, 99, 1); /* a field a newer broker has */
    }
    send_simple(br, LK_PULSAR_LOOKUP_RESPONSE, &sub, &bf);
}

/* The answer to one frame (type, its sub-command), if any. */
static void
answer(struct broker *br, const struct lk_conf *conf, unsigned type, const uint8_t *sub,
       size_t sublen)
{
    const struct lk_cluster *prod = cluster_named(conf, "prod");
    struct tb a = {0};
    struct bframe bf = {0};
    int leak = (rng(&br->rng) & 7) == 0;

    switch (type) {
    case LK_PULSAR_CONNECT:
        if (br->connected) { /* a second CONNECT: an error, as a broker says */
            pb_uint(&a, 1, 0);
            pb_uint(&a, 2, 6);
            pb_str(&a, 3, "\x01\x02");
            send_simple(br, 14, &a, &bf);
            break;
        }
        br->connected = 1;
        pb_str(&a, 1, "fuzz-broker");
        pb_uint(&a, 2, 21);
        pb_uint(&a, 3, 5 * 1024 * 1024);
        send_simple(br, LK_PULSAR_CONNECTED, &a, &bf);
        break;
    case LK_PULSAR_LOOKUP:
        lookup_answer(br, conf, sub_uint(sub, sublen, 2));
        break;
    case 21: /* PARTITIONED_METADATA_RESPONSE, or its Failed with a text */
        if (rng(&br->rng) & 1) {
            pb_uint(&a, 1, rng(&br->rng) % 8);
            pb_uint(&a, 2, sub_uint(sub, sublen, 2));
        } else {
            pb_uint(&a, 2, sub_uint(sub, sublen, 2));
            pb_uint(&a, 3, 1); /* Failed */
            pb_uint(&a, 4, 1);
            error_text(&a, 5, br, prod, leak, 0);
            bf.leak = leak;
        }
        send_simple(br, 22, &a, &bf);
        break;
    case LK_PULSAR_PING:
        send_simple(br, LK_PULSAR_PONG, &a, &bf);
        break;
    case LK_PULSAR_SEND:
        pb_uint(&a, 1, sub_uint(sub, sublen, 1));
        pb_uint(&a, 2, sub_uint(sub, sublen, 2));
        if (rng(&br->rng) & 3) { /* SEND_RECEIPT */
            message_id(&a, 3, &br->rng);
            send_simple(br, 7, &a, &bf);
        } else { /* SEND_ERROR */
            pb_uint(&a, 3, 1);
            error_text(&a, 4, br, prod, leak, 0);
            bf.leak = leak;
            send_simple(br, 8, &a, &bf);
        }
        break;
    case LK_PULSAR_CLOSE_PRODUCER:
        pb_uint(&a, 1, sub_uint(sub, sublen, 2));
        send_simple(br, 13, &a, &bf); /* SUCCESS */
        break;
    default: /* PONG, FLOW, the unknown ones: no answer */
        break;
    }
}

/*
 * Reads every whole frame lookout sent, checks it against the client's
 * frame of the same rank (while the client sent frames), and queues the
 * answers.  A frame a broker cannot read closes its connection.
 */
static void
broker_read(struct broker *br, const struct lk_conf *conf, const struct client *cl)
{
    while (!br->closed && br->got.len >= 8) {
        const uint8_t *g = br->got.p;
        uint32_t total = tb_get32(g), csize = tb_get32(g + 4);
        unsigned type;
        const uint8_t *sub;
        size_t sublen;

        if (total > CAP + 64 || total < 4 + (uint64_t)csize || csize == 0) {
            br->closed = 1; /* what Pulsar does with a frame it cannot read */
            break;
        }
        if (br->got.len - 4 < total)
            break;
        if (read_command(g + 8, csize, &type, &sub, &sublen) != 0) {
            br->closed = 1;
            break;
        }
        /* Only SEND carries a payload from a client. */
        if (total != 4 + csize && type != LK_PULSAR_SEND) {
            br->closed = 1;
            break;
        }
        if (br->nread < cl->nf && cl->f[br->nread].type != 0) {
            const struct cframe *c = &cl->f[br->nread];
            const uint8_t *cp = cl->log.p + c->off;
            LK_FUZZ_CHECK(type == c->type);
            if (c->listener) {
                static const uint32_t edited[] = {7};
                struct pbf f;
                LK_FUZZ_CHECK(sub != NULL && pb_find(sub, sublen, 7, &f) == 0);
                LK_FUZZ_CHECK(total == 4 + csize);
                lk_fuzz_pulsar_same_fields(cp + 8, c->len - 8, g + 8, csize, LK_PULSAR_LOOKUP,
                                           edited, 1);
            } else {
                LK_FUZZ_CHECK(c->len == 4 + (size_t)total && memcmp(cp, g, c->len) == 0);
            }
        }
        br->nread++;
        answer(br, conf, type, sub, sublen);
        tb_drop(&br->got, 4 + (size_t)total);
    }
}

/* ---- the pair ------------------------------------------------------- */

struct pair {
    struct event_base *base;  /* the worker's, never run: nothing fires by itself */
    struct event_base *hbase; /* the budget's resume event alone, run by the harness */
    struct event_base *dead;  /* where lk_conn_close_later's event goes: never run */
    struct lk_runtime rt;
    struct lk_worker w;
    struct lk_conn c;
    struct bufferevent *cb[2], *ub[2]; /* [0] lookout's side */
    struct pconn *p;
    struct lk_upstream up; /* last: it ends in a flexible array */
};

static void
noop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* As lk_conn_accept leaves a connection on the bind address chosen,
 * then the module's start. */
static void
pair_init(struct pair *pp, struct lk_conf *conf, unsigned which)
{
    const struct lk_bind *binds[16];
    size_t nbinds = 0;

    memset(pp, 0, sizeof(*pp));
    pp->base = event_base_new();
    pp->hbase = event_base_new();
    pp->dead = event_base_new();
    pp->rt.conf = conf;
    pp->rt.health = calloc(conf->nbrokers, sizeof(*pp->rt.health));
    pp->rt.rr = calloc(conf->nclusters, sizeof(*pp->rt.rr));
    LK_FUZZ_CHECK(pp->rt.health != NULL && pp->rt.rr != NULL);
    pp->w.base = pp->base;
    pp->w.rt = &pp->rt;
    lk_hold_init(&pp->w.hold, pp->hbase);
    lk_fuzz_bev_pairs(pp->base, pp->cb, pp->ub);
    bufferevent_disable(pp->cb[0], EV_READ);
    bufferevent_disable(pp->ub[0], EV_READ);
    for (size_t k = 0; k < conf->nbinds && nbinds < 16; k++)
        if (conf->binds[k]->proto == LK_PROTO_PULSAR && !conf->binds[k]->tls &&
            conf->binds[k]->nvhosts == 1 &&
            strcmp(conf->binds[k]->vhosts[0].cluster->name, "prod") == 0)
            binds[nbinds++] = conf->binds[k];
    LK_FUZZ_CHECK(nbinds != 0);
    lk_fuzz_conn_init(&pp->c, &pp->w, &pp->rt, conf, binds[which % nbinds], pp->cb[0]);
    /* lk_conn_close_later's event, made here on a base never run: a close
     * is seen by the harness (pr.dead), not carried out under it */
    lk_conn_extra(&pp->c)->close_ev = evtimer_new(pp->dead, noop_cb, NULL);
    pp->up.w = &pp->w;
    pp->up.rt = &pp->rt;
    pp->up.bev = pp->ub[0];
    pp->up.io.bev = pp->ub[0];
    pp->up.io.w = &pp->w;
    start(&pp->c);
    pp->p = pp->c.proto;
}

static void
pair_free(struct pair *pp)
{
    pp->p->pr.up = NULL; /* the harness's, not lk_upstream_get's */
    lk_pool_free(&pp->c.pool);
    if (pp->c.extra != NULL && pp->c.extra->close_ev != NULL)
        event_free(pp->c.extra->close_ev);
    free(pp->c.extra);
    lk_hold_free(&pp->w.hold);
    for (int i = 0; i < 2; i++) {
        bufferevent_free(pp->cb[i]);
        bufferevent_free(pp->ub[i]);
    }
    /* a bufferevent with timeouts set (lk_pair_start's) is freed by a
     * finalizer, run from the loop */
    event_base_loop(pp->base, EVLOOP_NONBLOCK);
    event_base_free(pp->base);
    event_base_free(pp->hbase);
    event_base_free(pp->dead);
    free(pp->rt.health);
    free(pp->rt.rr);
}

static int
dead(const struct pair *pp)
{
    return pp->p->pr.dead;
}

/* The client's bytes are in: pump_requests, but for the dial.  Until the
 * CONNECT has picked the broker, its first branch (choose_broker, then
 * reading on or off); once it has, the connection up_ready leaves, made
 * at once, and pump_requests as up_ready runs it. */
static void
requests(struct pair *pp)
{
    struct pconn *p = pp->p;

    if (dead(pp))
        return;
    if (p->pr.up != NULL) {
        pump_requests(&p->pr);
        return;
    }
    int r = choose_broker(p);
    if (r == 0) {
        if (p->pr.cpaused)
            lk_io_disable(&p->pr.c->io, EV_READ);
        else
            lk_io_enable(&p->pr.c->io, EV_READ);
        return;
    }
    if (r < 0)
        return;
    pp->up.broker = p->pr.broker;
    p->pr.up = &pp->up;
    p->pr.connected = 1;
    lk_io_enable(&pp->up.io, EV_READ | EV_WRITE);
    p->pr.c->action = "proxying";
    pump_requests(&p->pr);
}

/* The worker budget's resume event, if it is due (lk_hold.c wakes the
 * waiting from the loop). */
static void
resume(struct pair *pp)
{
    if (!dead(pp) && pp->w.hold.head != NULL) {
        /* nothing waits before the broker is chosen: only the client may
         * count then, and it owns the excess */
        LK_FUZZ_CHECK(pp->p->pr.up != NULL);
        event_base_loop(pp->hbase, EVLOOP_NONBLOCK);
    }
}

/* Up to READ_MAX bytes of src into lookout's input on bev, if lookout
 * reads it: how many. */
static size_t
deliver(struct tb *src, struct lk_io *io, size_t n)
{
    if (!lk_io_reading(io))
        return 0;
    n = n < src->len ? n : src->len;
    n = n < READ_MAX ? n : READ_MAX;
    if (n != 0) {
        LK_FUZZ_CHECK(evbuffer_add(bufferevent_get_input(io->bev), src->p, n) == 0);
        tb_drop(src, n);
    }
    return n;
}

/* The client's bufferevent callback that its socket would run: the
 * write callback (the output drained) or the event callback (EOF). */
static void
client_callback(struct pair *pp, short what)
{
    bufferevent_data_cb rd, wr;
    bufferevent_event_cb ev;
    void *arg;

    bufferevent_getcb(pp->cb[0], &rd, &wr, &ev, &arg);
    if (what == EV_WRITE && wr != NULL)
        wr(pp->cb[0], arg);
    else if (what != EV_WRITE && ev != NULL)
        ev(pp->cb[0], what, arg);
}

/* What lookout wrote to the client, taken by the client; its write
 * callback (on_responses) then runs, as when a socket drains. */
static size_t
client_reads(struct pair *pp, struct client *cl)
{
    size_t n = lk_fuzz_take(bufferevent_get_output(pp->cb[0]), &cl->got);

    if (n != 0 && !dead(pp))
        client_callback(pp, EV_WRITE);
    return n;
}

/* What lookout wrote to the broker, taken by it; the broker's write
 * callback (on_requests) then runs. */
static size_t
broker_takes(struct pair *pp, struct broker *br)
{
    size_t n = lk_fuzz_take(bufferevent_get_output(pp->ub[0]), &br->got);

    br->total += n;
    if (br->closed)
        br->got.len = 0; /* a broker that has closed reads nothing more */
    if (n != 0)
        requests(pp);
    return n;
}

/* What the connection holds, within its bounds. */
static void
check_bounds(const struct pair *pp)
{
    const struct pconn *p = pp->p;
    const struct lk_hold *h = &pp->w.hold;
    const size_t frame = CAP + 8, slack = 2 * (frame + READ_MAX);

    LK_FUZZ_CHECK(h->bytes == p->pr.hw.counted + p->pr.cw.counted);
    LK_FUZZ_CHECK(p->pr.hw.counted <= frame && p->pr.cw.counted <= frame);
    LK_FUZZ_CHECK(h->bytes <= HELD_MAX + frame + READ_MAX);
    LK_FUZZ_CHECK(p->llen <= LK_PULSAR_MAX_LOOKUPS);
    LK_FUZZ_CHECK(p->held == NULL || evbuffer_get_length(p->held) == 0);
    if (dead(pp))
        return;
    if (p->pr.cpaused)
        LK_FUZZ_CHECK(!lk_io_reading(&pp->c.io));
    if (p->pr.paused)
        LK_FUZZ_CHECK(p->pr.up != NULL && !lk_io_reading(&pp->up.io));
    LK_FUZZ_CHECK(evbuffer_get_length(bufferevent_get_input(pp->cb[0])) <= frame + READ_MAX);
    LK_FUZZ_CHECK(evbuffer_get_length(bufferevent_get_input(pp->ub[0])) <= frame + 2 * READ_MAX);
    LK_FUZZ_CHECK(evbuffer_get_length(bufferevent_get_output(pp->cb[0])) <= LK_PAIR_HIGH + slack);
    LK_FUZZ_CHECK(evbuffer_get_length(bufferevent_get_output(pp->ub[0])) <= LK_PAIR_HIGH + slack);
}

/* No internal host of the map in what the client got. */
static void
check_no_leak(const struct lk_conf *conf, const struct client *cl)
{
    for (size_t k = 0; k < conf->nclusters; k++) {
        const struct lk_cluster *c = conf->clusters[k];
        for (size_t i = 0; i < c->nbrokers; i++)
            for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
                const struct lk_url *u = c->brokers[i]->internal->addr[sc];
                if (u == NULL)
                    continue;
                size_t hl = strlen(u->host);
                LK_FUZZ_CHECK(cl->got.len < hl ||
                              memmem(cl->got.p, cl->got.len, u->host, hl) == NULL);
            }
    }
}

/* The URL pair's fields of a type the pulsar filter rewrites. */
static size_t
edited_fields(unsigned type, uint32_t *f)
{
    switch (type) {
    case LK_PULSAR_LOOKUP_RESPONSE:
        f[0] = 1, f[1] = 2, f[2] = 8;
        return 3;
    case LK_PULSAR_CLOSE_PRODUCER:
    case LK_PULSAR_CLOSE_CONSUMER:
    case LK_PULSAR_TOPIC_MIGRATED:
        f[0] = 3, f[1] = 4;
        return 2;
    default:
        return 0;
    }
}

/* Every whole frame the client got is the broker's of the same rank,
 * byte for byte or rewritten as the pulsar filter does; each
 * LOOKUP_RESPONSE that answers carries the request id of the LOOKUP of
 * its rank; no frame the guard must stop got through. */
static void
check_frames(const struct client *cl, const struct broker *br)
{
    const struct tb *t = &cl->got;
    size_t off = 0, i = 0, nlookup = 0;

    while (t->len - off >= 8 && t->len - off - 4 >= tb_get32(t->p + off)) {
        const uint8_t *g = t->p + off;
        size_t len = 4 + (size_t)tb_get32(g);
        uint32_t csize = tb_get32(g + 4), edited[3];
        LK_FUZZ_CHECK(i < br->nf);
        const struct bframe *bf = &br->f[i];
        const uint8_t *b = br->log.p + bf->off;
        size_t ne = edited_fields(bf->type, edited);

        LK_FUZZ_CHECK(!bf->leak);
        LK_FUZZ_CHECK(!bf->unmapped || bf->type == LK_PULSAR_TOPIC_MIGRATED);
        if (ne == 0 || bf->unmapped) {
            LK_FUZZ_CHECK(len == bf->len && memcmp(g, b, len) == 0);
        } else {
            unsigned type;
            const uint8_t *sub;
            size_t sublen;
            struct pbf f;
            LK_FUZZ_CHECK(len == 8 + (size_t)csize);
            LK_FUZZ_CHECK(read_command(g + 8, csize, &type, &sub, &sublen) == 0 &&
                          type == bf->type && sub != NULL);
            lk_fuzz_pulsar_same_fields(b + 8, bf->len - 8, g + 8, csize, (int)type, edited, ne);
            for (int k = 0; k < 2; k++)
                if (pb_find(sub, sublen, edited[k], &f) == 1) {
                    LK_FUZZ_CHECK(f.wt == 2 && bf->named != NULL &&
                                  external_url_of(bf->named, f.p, f.len));
                }
            if (bf->answers) {
                LK_FUZZ_CHECK(nlookup < cl->nlookups || cl->raw);
                if (!cl->raw)
                    LK_FUZZ_CHECK(sub_uint(sub, sublen, 4) == cl->lookups[nlookup] &&
                                  bf->request_id == cl->lookups[nlookup]);
                nlookup++;
            }
        }
        off += len;
        i++;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lk_fuzz_in in = {data, size, 0};
    unsigned flags = lk_fuzz_r8(&in);
    struct lk_conf *conf = the_map(flags & 1);
    struct pair pp;
    struct broker br = {0};
    struct client cl = {0};
    uint64_t seed = lk_fuzz_seed(data, size), crng = seed ^ 0x9e3779b97f4a7c15ULL;
    int gone = 0;
    uint64_t drain_limit = UINT64_MAX;
    static int debug = -1;

    br.rng = seed | 1;
    crng |= 1;
    pair_init(&pp, conf, flags >> 1);
    check_bounds(&pp);
    while (in.off < in.len && !dead(&pp) && !gone) {
        unsigned op = lk_fuzz_r8(&in);
        switch (op & 7) {
        case 0:
        case 1:
        case 2:
        case 3:
            client_frame(&cl, conf, &in, &crng, op & 3);
            break;
        case 4:
            if (deliver(&cl.queued, &pp.c.io, lk_fuzz_piece(&seed, cl.queued.len + 1)) != 0)
                requests(&pp);
            break;
        case 5:
            broker_takes(&pp, &br);
            broker_read(&br, conf, &cl);
            break;
        case 6:
            if (!br.closed && pp.p->pr.up != NULL &&
                deliver(&br.out, &pp.up.io, lk_fuzz_piece(&seed, br.out.len + 1)) != 0)
                pump_responses(&pp.p->pr);
            break;
        default: {
            unsigned b = lk_fuzz_r8(&in);
            switch (b % 8) {
            case 0:
            case 1:
                client_reads(&pp, &cl);
                break;
            case 2:
            case 3:
                broker_push(&br, conf, b >> 3);
                break;
            case 4:
                opaque(&br.out, &br.rng, 1 + lk_fuzz_r8(&in) % 16);
                br.noisy = 1;
                break;
            case 5: /* the client closes: client_event */
                gone = 1;
                client_callback(&pp, BEV_EVENT_EOF);
                LK_FUZZ_CHECK(dead(&pp));
                break;
            case 6: /* the broker closes, part of what it queued sent: up_event */
                if (pp.p->pr.up != NULL && !br.closed) {
                    if (deliver(&br.out, &pp.up.io, lk_fuzz_piece(&seed, br.out.len + 1)) != 0)
                        pump_responses(&pp.p->pr);
                    br.closed = 1;
                    lk_pair_close(&pp.p->pr, "broker closed the connection; closing");
                }
                break;
            default: /* SIGTERM */
                if (!pp.p->pr.draining) {
                    drain_limit = br.total + evbuffer_get_length(bufferevent_get_output(pp.ub[0])) +
                                  pp.p->rq.left;
                    drain(&pp.c);
                }
                break;
            }
            break;
        }
        }
        resume(&pp);
        check_bounds(&pp);
    }
    /* the rest, until nothing moves */
    for (int round = 0; round < 256 && !dead(&pp) && !gone; round++) {
        size_t moved = deliver(&cl.queued, &pp.c.io, cl.queued.len);
        if (moved != 0)
            requests(&pp);
        moved += broker_takes(&pp, &br);
        broker_read(&br, conf, &cl);
        if (!br.closed && pp.p->pr.up != NULL && !dead(&pp)) {
            size_t back = deliver(&br.out, &pp.up.io, br.out.len);
            if (back != 0)
                pump_responses(&pp.p->pr);
            moved += back;
        }
        moved += client_reads(&pp, &cl);
        resume(&pp);
        check_bounds(&pp);
        if (moved == 0)
            break;
    }
    client_reads(&pp, &cl);
    broker_takes(&pp, &br);
    LK_FUZZ_CHECK(br.total <= drain_limit);
    if (debug < 0)
        debug = getenv("LK_FUZZ_DEBUG") != NULL;
    if (debug) /* where a run ended, for whoever writes seeds */
        fprintf(stderr,
                "client got %zu bytes (%zu frames sent), broker got %llu (%zu frames read, %zu "
                "sent), dead %d, draining %d, broker closed %d, noisy %d, raw %d, client left "
                "%zu, broker left %zu, reading %d/%d, held %zu\n",
                cl.got.len, cl.nf, (unsigned long long)br.total, br.nread, br.nf,
                (int)pp.p->pr.dead, (int)pp.p->pr.draining, br.closed, br.noisy, cl.raw,
                cl.queued.len, br.out.len, lk_io_reading(&pp.c.io),
                pp.p->pr.up != NULL && lk_io_reading(&pp.up.io), pp.w.hold.bytes);
    if (!br.noisy) {
        check_no_leak(conf, &cl);
        check_frames(&cl, &br);
    }
    pair_free(&pp);
    free(cl.queued.p);
    free(cl.log.p);
    free(cl.f);
    free(cl.lookups);
    free(cl.got.p);
    free(br.got.p);
    free(br.out.p);
    free(br.log.p);
    free(br.f);
    return 0;
}
