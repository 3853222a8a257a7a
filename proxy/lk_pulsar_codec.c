/*
 * The Pulsar codec (lk_pulsar_codec.h): frame sizes, the command's type,
 * and the commands lookout reads or rewrites.  Reading is a walk over the
 * protobuf wire format written here, not protobuf-c: it allocates nothing,
 * its strings point into the frame (protobuf-c copies every string it
 * unpacks), and it checks a command against the schema of proxy/pulsar.proto
 * at least as strictly as protobuf-c does, so that a command it accepts is
 * one that protobuf-c unpacks.  Re-encoding is protobuf-c's: unpack, change
 * the fields, pack.  It keeps every field the edit does not name, unknown
 * ones included (their bytes as they came; known ones in field order), and
 * runs only when the walk says that something changes.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "lk_pulsar_codec.h"
#include "pulsar.pb-c.h"

/* A message with more unknown fields than MAX_UNKNOWN is refused, and a
 * sub-command with more unknown fields and entries of repeated messages,
 * however deep, too: no Pulsar command comes near, and protobuf-c spends
 * an allocation on every unknown field and every entry it unpacks, which
 * a 5 MiB command of 2-byte fields would turn into millions.  Other known
 * fields are bounded already: each is there once at most (walk_base,
 * walk_msg).  A re-encoded message, its known
 * fields each once and its unknown ones as they were, stays within. */
#define MAX_UNKNOWN 4096

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline int
sizes(const uint8_t p[LK_PULSAR_PREFIX], uint32_t max_frame, uint32_t *total, uint32_t *cmd_size)
{
    *total = be32(p);
    *cmd_size = be32(p + 4);
    /* totalSize counts commandSize's 4 bytes, the command, and a payload
     * section if any */
    if (*cmd_size == 0 || *total < 4 || *total - 4 < *cmd_size || *total > max_frame)
        return -1;
    return 0;
}

int
lk_pulsar_sizes(const uint8_t p[LK_PULSAR_PREFIX], uint32_t max_frame, uint32_t *total,
                uint32_t *cmd_size)
{
    return sizes(p, max_frame, total, cmd_size);
}

/* ---- the wire format ------------------------------------------------ */

enum rd { RD_OK, RD_END, RD_SHORT, RD_BAD };

struct field {
    uint32_t num;
    unsigned wt;      /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t v;       /* wire type 0 */
    const uint8_t *p; /* wire type 2: the bytes after the length */
    size_t len;
};

/* A varint of at most max bytes at *at: RD_SHORT when it runs past end,
 * RD_BAD when it is longer or does not fit 64 bits (protobuf-c takes a
 * 10-byte varint whose last byte is over 1 and drops the bits). */
static enum rd
varint(const uint8_t **at, const uint8_t *end, unsigned max, uint64_t *v)
{
    const uint8_t *p = *at;
    uint64_t r = 0;

    for (unsigned i = 0; i < max; i++) {
        if ((size_t)(end - p) <= i)
            return RD_SHORT;
        if (i == 9 && p[i] > 1)
            return RD_BAD;
        r |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *at = p + i + 1;
            *v = r;
            return RD_OK;
        }
    }
    return RD_BAD;
}

/* A field's tag: at most 5 bytes (protobuf-c's limit), a field number
 * from 1 to 2^29 - 1 (protobuf's range; protobuf-c would take a field 0
 * written in two bytes, and numbers to 2^32 - 1), a wire type protobuf-c
 * reads (not the groups, 3 and 4, nor 6 and 7). */
static enum rd
tag(const uint8_t **at, const uint8_t *end, struct field *f)
{
    uint64_t t;
    enum rd r = varint(at, end, 5, &t);

    if (r != RD_OK)
        return r;
    f->num = (uint32_t)(t >> 3);
    f->wt = (unsigned)(t & 7);
    if (t > UINT32_MAX || f->num == 0 || (f->wt != 0 && f->wt != 1 && f->wt != 2 && f->wt != 5))
        return RD_BAD;
    return RD_OK;
}

/* The next field of a message that ends at end; RD_END when there is
 * none.  A length is a varint of at most 5 bytes up to INT_MAX, as in
 * protobuf-c. */
static enum rd
next(const uint8_t **at, const uint8_t *end, struct field *f)
{
    enum rd r;
    size_t n;

    if (*at == end)
        return RD_END;
    if ((r = tag(at, end, f)) != RD_OK)
        return r;
    switch (f->wt) {
    case 0:
        return varint(at, end, 10, &f->v);
    case 2:
        if ((r = varint(at, end, 5, &f->v)) != RD_OK)
            return r;
        if (f->v > INT_MAX)
            return RD_BAD;
        if (f->v > (size_t)(end - *at))
            return RD_SHORT;
        f->p = *at;
        f->len = (size_t)f->v;
        *at += f->len;
        return RD_OK;
    default:
        n = f->wt == 1 ? 8 : 4;
        if ((size_t)(end - *at) < n)
            return RD_SHORT;
        *at += n;
        return RD_OK;
    }
}

/* ---- the schema of proxy/pulsar.proto ------------------------------- */

enum { V = 1, B = 2, M = 3 }; /* a declared field: a varint, bytes, or a message */
#define NF 9                  /* declared field numbers are below this */
#define MAX_DEPTH 3           /* messages within a command: SCALABLE_TOPIC_UPDATE's are 3 deep */

struct msg {
    uint8_t kind[NF];          /* by field number; 0 when not declared */
    uint16_t required;         /* bit n: field n is required */
    uint16_t repeated;         /* bit n: field n (a message) is repeated */
    uint8_t url;               /* the field of a broker URL (its Tls sibling is the next), or 0 */
    const struct msg *sub[NF]; /* kind M: the field's message */
};

/* The messages between SCALABLE_TOPIC_UPDATE and WATCH_TC_ASSIGNMENTS_UPDATE
 * and their URLs (proxy/pulsar.proto). */
static const struct msg segment_broker = {
    {[1] = V, [2] = B, [3] = B}, 1u << 1 | 1u << 2, 0, 2, {0}};
static const struct msg dag = {
    {[1] = V, [3] = M, [4] = B, [5] = B}, 1u << 1, 1u << 3, 4, {[3] = &segment_broker}};
static const struct msg tc_assignment = {{[1] = V, [2] = B, [3] = B}, 1u << 1, 0, 2, {0}};
static const struct msg tc_snapshot = {
    {[1] = V, [2] = M}, 1u << 1, 1u << 2, 0, {[2] = &tc_assignment}};

static const struct msg m_connect = {{[1] = B, [4] = V, [6] = B}, 1u << 1, 0, 0, {0}};
static const struct msg m_lookup = {
    {[1] = B, [2] = V, [3] = V, [7] = B}, 1u << 1 | 1u << 2, 0, 0, {0}};
static const struct msg m_lookup_response = {
    {[1] = B, [2] = B, [3] = V, [4] = V, [5] = V, [6] = V, [7] = B, [8] = V}, 1u << 4, 0, 1, {0}};
/* CLOSE_PRODUCER, CLOSE_CONSUMER, TOPIC_MIGRATED */
static const struct msg m_close = {
    {[1] = V, [2] = V, [3] = B, [4] = B}, 1u << 1 | 1u << 2, 0, 3, {0}};
static const struct msg m_scalable_update = {{[1] = V, [2] = M}, 1u << 1, 0, 0, {[2] = &dag}};
static const struct msg m_tc_update = {{[1] = V, [2] = M}, 1u << 1, 0, 0, {[2] = &tc_snapshot}};

struct schema {
    int type; /* the BaseCommand field, and Type value, of the command */
    const struct msg *m;
};

static const struct schema schemas[] = {
    {LK_PULSAR_CONNECT, &m_connect},
    {LK_PULSAR_LOOKUP, &m_lookup},
    {LK_PULSAR_LOOKUP_RESPONSE, &m_lookup_response},
    {LK_PULSAR_CLOSE_PRODUCER, &m_close},
    {LK_PULSAR_CLOSE_CONSUMER, &m_close},
    {LK_PULSAR_TOPIC_MIGRATED, &m_close},
    {LK_PULSAR_SCALABLE_TOPIC_UPDATE, &m_scalable_update},
    {LK_PULSAR_WATCH_TC_ASSIGNMENTS_UPDATE, &m_tc_update},
};
#define NSCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

static const struct schema *
schema_of(uint64_t type)
{
    for (size_t i = 0; i < NSCHEMAS; i++)
        if ((uint64_t)schemas[i].type == type)
            return &schemas[i];
    return NULL;
}

/* A command's declared fields, the last of each (as protobuf parsers do). */
struct vals {
    uint16_t seen; /* bit n: field n was present */
    uint64_t v[NF];
    struct lk_str s[NF];
};

/* Where the walk puts the URL pairs it meets (lk_pulsar_pairs), when it
 * is asked to: the first max of them; n counts them all. */
struct pairs_out {
    struct lk_pulsar_pair *p;
    size_t max, n;
    uint32_t path[MAX_DEPTH]; /* the walk's way down: lk_pulsar_pair's entry */
};

/* A message's own URL pair (the message `depth` below the sub-command),
 * if it has one of the two. */
static void
add_pair(const struct msg *m, const struct vals *v, int depth, struct pairs_out *po)
{
    unsigned u = m->url;

    if (po == NULL || u == 0 || !((v->seen >> u) & 3u))
        return;
    if (po->n < po->max) {
        struct lk_pulsar_pair *p = &po->p[po->n];
        p->has_url = (v->seen >> u) & 1;
        p->url = v->s[u];
        p->has_url_tls = (v->seen >> (u + 1)) & 1;
        p->url_tls = v->s[u + 1];
        p->url_required = (m->required >> u) & 1;
        p->depth = (unsigned)depth;
        for (int d = 0; d < depth && d < 2; d++)
            p->entry[d] = po->path[d];
    }
    po->n++;
}

/*
 * Walks one message: every field well formed, the declared ones of their
 * wire type and each at most once (but a repeated one), the required ones
 * present, the messages within valid in turn.  *elems counts unknown
 * fields and the entries of repeated ones over the whole command.  With
 * po, the URL pairs are added there: each entry's, in the order they
 * came, then the message's own.  0, or -1.
 *
 * A declared field given twice is refused, though every parser reads the
 * last of a scalar or a string (protobuf-c, Google's, and LightProto,
 * which the broker and the Java client use) and so would agree with this
 * walk: no encoder writes a field of these twice (none of them is
 * repeated in PulsarApi.proto but the lists of SCALABLE_TOPIC_UPDATE and
 * WATCH_TC_ASSIGNMENTS_UPDATE), and a command lookout leaves alone goes
 * on as its bytes came, so an earlier copy of a URL it has not rewritten
 * (brokerServiceUrl = internal, then brokerServiceUrl = the lookup
 * address) would reach the client unread.  One rule, "what lookout reads
 * is there once", leaves no reading to agree on.
 */
static int
walk_msg(const struct msg *m, const uint8_t *p, size_t len, int depth, unsigned *elems,
         struct vals *out, struct pairs_out *po)
{
    const uint8_t *at = p, *end = p + len;
    struct field f;
    enum rd r;
    struct vals inner;
    uint32_t entries = 0; /* of its repeated message field (it has one at most) */

    memset(out, 0, sizeof(*out));
    while ((r = next(&at, end, &f)) == RD_OK) {
        if (f.num >= NF || m->kind[f.num] == 0) {
            if (++*elems > MAX_UNKNOWN)
                return -1;
            continue; /* kept on re-encode */
        }
        unsigned k = m->kind[f.num];
        int rep = (m->repeated >> f.num) & 1;
        if (f.wt != (k == V ? 0u : 2u) || (!rep && ((out->seen >> f.num) & 1)))
            return -1;
        if (k == M && po != NULL)
            po->path[depth] = rep ? entries++ : 0;
        if (k == M && (depth + 1 >= MAX_DEPTH || (rep && ++*elems > MAX_UNKNOWN) ||
                       walk_msg(m->sub[f.num], f.p, f.len, depth + 1, elems, &inner, po) != 0))
            return -1;
        out->seen |= (uint16_t)(1u << f.num);
        out->v[f.num] = f.v;
        out->s[f.num] = lk_str_make((const char *)f.p, f.wt == 2 ? f.len : 0);
    }
    if (r != RD_END || (out->seen & m->required) != m->required)
        return -1;
    add_pair(m, out, depth, po);
    return 0;
}

/* walk_base's answer for a command that gives its type twice */
#define TWO_TYPES (-3)

struct parsed {
    uint64_t type;
    const struct schema *sc; /* the type's, NULL for another type */
    struct vals sub;         /* the type's sub-command (when sc) */
    struct pairs_out *po;    /* where its URL pairs go, or NULL */
};

/*
 * Walks a whole BaseCommand: every field well formed, field 1 (type) a
 * varint present once and at most INT32_MAX.  With full, also what
 * protobuf-c checks when it unpacks with proxy/pulsar.proto: each declared
 * sub-command, whatever the type, is a valid message; and then reads the
 * type's, which must be there.  0, -1, or TWO_TYPES.
 *
 * Two type fields: protobuf takes the last of a scalar, and so do the
 * broker and every client, so a reader that took the first would see a
 * PING where the broker sees a LOOKUP.  Refused rather than read as the
 * last, so that no reading of such a frame is ever lookout's to get right.
 * A sub-command given twice is refused too: protobuf (protobuf-c,
 * Google's) merges the two, LightProto (the broker's, the Java client's)
 * keeps the last alone; nothing writes it, and no single reading is right.
 */
static int
walk_base(const uint8_t *cmd, size_t len, int full, struct parsed *out)
{
    const uint8_t *at = cmd, *end = cmd + len, *sub[NSCHEMAS];
    size_t sub_len[NSCHEMAS];
    struct field f;
    enum rd r;
    unsigned unknown = 0, seen = 0, elems;
    int have_type = 0, read = 0;
    struct vals scratch;

    while ((r = next(&at, end, &f)) == RD_OK) {
        if (f.num == 1) {
            if (f.wt != 0)
                return -1;
            if (have_type)
                return TWO_TYPES;
            have_type = 1;
            out->type = f.v;
            continue;
        }
        if (!full)
            continue;
        /* the known fields are the type and the sub-commands, each once */
        const struct schema *sc = schema_of(f.num);
        if (sc == NULL) {
            if (++unknown > MAX_UNKNOWN)
                return -1;
            continue;
        }
        /* the type's sub-command is read as it is checked when the type
         * came first, as every encoder writes it */
        size_t i = (size_t)(sc - schemas);
        int mine = have_type && f.num == out->type;
        elems = 0;
        if (f.wt != 2 || (seen & 1u << i) ||
            walk_msg(sc->m, f.p, f.len, 0, &elems, mine ? &out->sub : &scratch,
                     mine ? out->po : NULL) != 0)
            return -1;
        read |= mine;
        seen |= 1u << i;
        sub[i] = f.p;
        sub_len[i] = f.len;
    }
    if (r != RD_END || !have_type || out->type > INT32_MAX)
        return -1;
    out->sc = schema_of(out->type);
    if (!full || out->sc == NULL)
        return 0;
    size_t i = (size_t)(out->sc - schemas);
    if (!(seen & 1u << i))
        return -1; /* e.g. a LOOKUP without its CommandLookupTopic */
    elems = 0;
    return read ? 0 : walk_msg(out->sc->m, sub[i], sub_len[i], 0, &elems, &out->sub, out->po);
}

/*
 * The command of almost every frame, SEND and MESSAGE and their answers
 * included, is the type in one byte and then its sub-command, one
 * length-delimited field up to the end: nothing else at the top level, so
 * no second type.  That shape is read here in a few dozen instructions;
 * anything else takes the whole walk, which answers the same for this
 * shape.  1 with the type in *type when it is that shape, else 0.
 */
static int
command_type_fast(const uint8_t *cmd, size_t len, int *type)
{
    const uint8_t *at = cmd + 2, *end = cmd + len;
    uint64_t n;

    if (len < 2 || cmd[0] != 0x08 || cmd[1] >= 0x80)
        return 0;
    if (at == end) {
        *type = cmd[1]; /* PING, PONG: no sub-command */
        return 1;
    }
    uint32_t t = at[0] & 0x7f;
    if (at[0] & 0x80) {
        if (end - at < 2 || at[1] >= 0x80)
            return 0;
        t |= (uint32_t)at[1] << 7;
        at += 2;
    } else {
        at++;
    }
    if ((t & 7) != 2 || t >> 3 <= 1 || varint(&at, end, 5, &n) != RD_OK || n > INT_MAX ||
        n != (uint64_t)(end - at))
        return 0;
    *type = cmd[1];
    return 1;
}

int
lk_pulsar_command_type(const uint8_t *cmd, size_t len)
{
    struct parsed d;
    int type;

    if (command_type_fast(cmd, len, &type))
        return type;
    d.po = NULL;
    int r = walk_base(cmd, len, 0, &d);
    if (r == TWO_TYPES)
        return LK_PULSAR_TYPE_TWICE;
    return r != 0 ? -2 : (int)d.type;
}

/* n bytes from c into dst, across extents (the caller knows they are
 * there). */
static void
cursor_copy(const struct lk_pulsar_cursor *c, uint8_t *dst, size_t n)
{
    size_t off = c->off;

    for (int i = c->i; n != 0 && i < c->nv; i++, off = 0) {
        size_t k = c->v[i].iov_len - off;
        if (k > n)
            k = n;
        memcpy(dst, (const uint8_t *)c->v[i].iov_base + off, k);
        dst += k;
        n -= k;
    }
}

int
lk_pulsar_frame_at(const struct lk_pulsar_cursor *c, size_t avail, uint32_t max_frame,
                   uint8_t *copy, struct lk_pulsar_head *h)
{
    const uint8_t *p = NULL;
    size_t have = 0; /* bytes at p */

    h->need = LK_PULSAR_PREFIX;
    h->type = -2;
    if (avail < LK_PULSAR_PREFIX)
        return 0;
    if (c->i < c->nv) {
        p = (const uint8_t *)c->v[c->i].iov_base + c->off;
        have = c->v[c->i].iov_len - c->off;
    }
    if (have < LK_PULSAR_PREFIX) {
        have = avail < LK_PULSAR_COPY ? avail : LK_PULSAR_COPY;
        cursor_copy(c, copy, have);
        p = copy;
    }
    if (sizes(p, max_frame, &h->total, &h->cmd_size) != 0)
        return -1;
    h->need = LK_PULSAR_PREFIX + (size_t)h->cmd_size;
    if (avail < h->need)
        return 0;
    if (have < h->need) {
        if (h->need > LK_PULSAR_COPY)
            return 2;
        cursor_copy(c, copy, h->need);
        p = copy;
    }
    h->cmd = p + LK_PULSAR_PREFIX;
    if (!command_type_fast(h->cmd, h->cmd_size, &h->type))
        h->type = lk_pulsar_command_type(h->cmd, h->cmd_size);
    return 1;
}

int
lk_pulsar_decode(const uint8_t *cmd, size_t len, struct lk_pulsar_cmd *out)
{
    struct parsed d;
    struct pairs_out po = {NULL, 0, 0, {0}}; /* counts them */

    memset(out, 0, sizeof(*out));
    out->lookup_type = -1;
    out->proxy_through = -1;
    out->protocol_version = -1;
    d.po = &po;
    if (walk_base(cmd, len, 1, &d) != 0)
        return -1;
    out->type = (int)d.type;
    if (d.sc == NULL)
        return -2;

    const struct vals *s = &d.sub;
#define HAS(n) ((s->seen >> (n)) & 1)
    switch (d.sc->type) {
    case LK_PULSAR_CONNECT:
        out->has_proxy_to_broker_url = HAS(6);
        out->proxy_to_broker_url = s->s[6];
        if (HAS(4)) {
            /* an int32 to Pulsar: its low 32 bits; a negative one is older
             * than every version */
            int32_t v = (int32_t)(uint32_t)s->v[4];
            out->protocol_version = v < 0 ? 0 : v;
        }
        break;
    case LK_PULSAR_LOOKUP:
        out->has_request_id = 1;
        out->request_id = s->v[2];
        out->has_listener = HAS(7);
        out->listener = s->s[7];
        break;
    case LK_PULSAR_LOOKUP_RESPONSE:
        out->has_request_id = 1;
        out->request_id = s->v[4];
        if (HAS(3))
            out->lookup_type = s->v[3] > INT32_MAX ? INT32_MAX : (int)s->v[3];
        if (HAS(8))
            out->proxy_through = s->v[8] != 0;
        break;
    case LK_PULSAR_CLOSE_PRODUCER:
    case LK_PULSAR_CLOSE_CONSUMER:
        out->has_request_id = 1;
        out->request_id = s->v[2];
        break;
    default: /* TOPIC_MIGRATED, and the two whose URLs are within: lk_pulsar_pairs */
        break;
    }
    unsigned u = d.sc->m->url;
    if (u != 0) {
        out->has_url = HAS(u);
        out->url = s->s[u];
        out->has_url_tls = HAS(u + 1);
        out->url_tls = s->s[u + 1];
    }
#undef HAS
    out->npairs = po.n;
    return 0;
}

long
lk_pulsar_pairs(const uint8_t *cmd, size_t len, struct lk_pulsar_pair *out, size_t max)
{
    struct parsed d;
    struct pairs_out po = {out, max, 0, {0}};

    d.po = &po;
    if (walk_base(cmd, len, 1, &d) != 0 || d.sc == NULL)
        return -1;
    return (long)po.n;
}

/* ---- re-encoding ---------------------------------------------------- */

/* The sizes of a simple frame around a command of cmd_len bytes. */
static void
prefix(uint8_t h[LK_PULSAR_PREFIX], size_t cmd_len)
{
    uint32_t c = (uint32_t)cmd_len, total = c + 4;

    h[0] = (uint8_t)(total >> 24), h[1] = (uint8_t)(total >> 16);
    h[2] = (uint8_t)(total >> 8), h[3] = (uint8_t)total;
    h[4] = (uint8_t)(c >> 24), h[5] = (uint8_t)(c >> 16), h[6] = (uint8_t)(c >> 8);
    h[7] = (uint8_t)c;
}

/* Whether setting a bytes field (has, now) to to (NULL: clearing it)
 * changes it. */
static int
bytes_change(int has, struct lk_str now, const struct lk_str *to)
{
    return to == NULL ? has : !has || !lk_str_eq(now, *to);
}

/* Whether setting bytes field n of s to to changes it. */
static int
changes(const struct vals *s, unsigned n, const struct lk_str *to)
{
    return bytes_change((s->seen >> n) & 1, s->s[n], to);
}

static void *
member(ProtobufCMessage *m, size_t offset)
{
    return (char *)m + offset;
}

/* A bytes field set to memory of the caller's, and what it held (which
 * protobuf-c frees with the message). */
struct saved {
    ProtobufCBinaryData *bd;
    ProtobufCBinaryData was;
};

/* Sets (to != NULL) or clears bytes field n of m (a required one, which
 * has no has_ flag, is only ever set). */
static void
set_bytes(ProtobufCMessage *m, unsigned n, const struct lk_str *to, struct saved *sv)
{
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(m->descriptor, n);
    ProtobufCBinaryData *bd = member(m, fd->offset);

    if (fd->label != PROTOBUF_C_LABEL_REQUIRED)
        *(protobuf_c_boolean *)member(m, fd->quantifier_offset) = to != NULL;
    if (to == NULL)
        return; /* left for protobuf-c to free; not packed */
    sv->bd = bd;
    sv->was = *bd;
    bd->data = (uint8_t *)to->p;
    bd->len = to->len;
}

/* Appends base as a simple frame: its size prefix, then it packed.  0, or
 * -1 (out untouched) when it does not fit a frame or out of memory. */
static int
pack_frame(const LkPb__BaseCommand *base, struct evbuffer *out)
{
    size_t size = lk_pb__base_command__get_packed_size(base);
    struct evbuffer_iovec v;

    if (size > UINT32_MAX - 4 ||
        evbuffer_reserve_space(out, (ev_ssize_t)(LK_PULSAR_PREFIX + size), &v, 1) != 1)
        return -1;
    prefix(v.iov_base, size);
    lk_pb__base_command__pack(base, (uint8_t *)v.iov_base + LK_PULSAR_PREFIX);
    v.iov_len = LK_PULSAR_PREFIX + size;
    return evbuffer_commit_space(out, &v, 1) == 0 ? 0 : -1;
}

/* Whether bytes field n of m is there. */
static int
pb_has(ProtobufCMessage *m, unsigned n)
{
    const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(m->descriptor, n);

    return fd->label == PROTOBUF_C_LABEL_REQUIRED ||
           *(protobuf_c_boolean *)member(m, fd->quantifier_offset);
}

/*
 * The unpacked message that holds pair p of the sub-command m (of schema
 * sm), found the way the walk went (p->depth, p->entry: no message of the
 * schema has two message fields), and in *url its URL's field number (the
 * Tls one's is the next); NULL when it is not there, which a walk that
 * agrees with protobuf-c never leaves.
 */
static ProtobufCMessage *
pb_pair(ProtobufCMessage *m, const struct msg *sm, const struct lk_pulsar_pair *p, unsigned *url)
{
    for (unsigned d = 0; d < p->depth && d < 2 && m != NULL; d++) {
        unsigned f = 1;
        while (f < NF && sm->kind[f] != M)
            f++;
        if (f == NF)
            return NULL;
        const ProtobufCFieldDescriptor *fd =
            protobuf_c_message_descriptor_get_field(m->descriptor, f);
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t k = *(size_t *)member(m, fd->quantifier_offset);
            ProtobufCMessage **a = *(ProtobufCMessage ***)member(m, fd->offset);
            m = p->entry[d] < k ? a[p->entry[d]] : NULL;
        } else {
            m = *(ProtobufCMessage **)member(m, fd->offset);
        }
        sm = sm->sub[f];
    }
    *url = sm->url;
    if (m == NULL || p->depth > 2 || sm->url == 0 || !(pb_has(m, sm->url) || pb_has(m, sm->url + 1u)))
        return NULL;
    return m;
}

int
lk_pulsar_reencode(const uint8_t *cmd, size_t len, const struct lk_pulsar_edit *edit,
                   struct evbuffer *out)
{
    struct parsed d;
    struct lk_pulsar_edit e = *edit;
    size_t np = edit->pairs != NULL ? edit->npairs : 0;
    struct lk_pulsar_pair *cur = NULL;
    struct pairs_out po = {NULL, 0, 0, {0}};
    struct saved *psv = NULL;
    int rc = -1, any = 0;

    if (np > 0) {
        if ((cur = malloc(np * sizeof(*cur))) == NULL)
            return -1;
        po.p = cur;
        po.max = np;
    }
    d.po = &po;
    if (walk_base(cmd, len, 1, &d) != 0 || d.sc == NULL)
        goto done;
    if (np > po.n)
        np = po.n; /* pairs the command lacks are no edit */

    /* what changes, from the walk: most frames go back as they came */
    const struct schema *sc = d.sc;
    const struct vals *s = &d.sub;
    unsigned u = sc->m->url;
    if (u != 0 && np > 0) {
        /* a command with one pair, its own: pairs[0] is it */
        e.set_url = edit->pairs[0].set_url;
        e.url = edit->pairs[0].url;
        e.set_url_tls = edit->pairs[0].set_url_tls;
        e.url_tls = edit->pairs[0].url_tls;
        np = 0;
    }
    for (size_t i = 0; i < np; i++) {
        const struct lk_pulsar_pair_edit *pe = &edit->pairs[i];
        if (pe->set_url && pe->url == NULL && cur[i].url_required)
            goto done; /* a required URL is never cleared */
        any |= (pe->set_url && bytes_change(cur[i].has_url, cur[i].url, pe->url)) ||
               (pe->set_url_tls && bytes_change(cur[i].has_url_tls, cur[i].url_tls, pe->url_tls));
    }
    int url = u != 0 && e.set_url && changes(s, u, e.url);
    int url_tls = u != 0 && e.set_url_tls && changes(s, u + 1u, e.url_tls);
    /* proxy_through_service_url, a bool: absent is false, any value but 0
     * true */
    int proxy = sc->type == LK_PULSAR_LOOKUP_RESPONSE && e.proxy_through >= 0 &&
                (((s->seen >> 8) & 1) && s->v[8] != 0) != (e.proxy_through != 0);
    int strip = sc->type == LK_PULSAR_LOOKUP && e.strip_listener && ((s->seen >> 7) & 1);
    if (!url && !url_tls && !proxy && !strip && !any) {
        rc = 0;
        goto done;
    }
    if (any && (psv = calloc(2 * np, sizeof(*psv))) == NULL)
        goto done;

    LkPb__BaseCommand *base = lk_pb__base_command__unpack(NULL, len, cmd);
    if (base == NULL)
        goto done; /* only when out of memory, if the walk is right */
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field(base->base.descriptor, (unsigned)sc->type);
    ProtobufCMessage *m = *(ProtobufCMessage **)member(&base->base, fd->offset);
    struct saved sv[2] = {{NULL, {0, NULL}}, {NULL, {0, NULL}}};
    int found = 1;

    if (url)
        set_bytes(m, u, e.url, &sv[0]);
    if (url_tls)
        set_bytes(m, u + 1u, e.url_tls, &sv[1]);
    if (proxy) {
        LkPb__CommandLookupTopicResponse *r = (LkPb__CommandLookupTopicResponse *)m;
        r->has_proxy_through_service_url = 1;
        r->proxy_through_service_url = e.proxy_through != 0;
    }
    if (strip)
        ((LkPb__CommandLookupTopic *)m)->has_advertised_listener_name = 0;
    for (size_t i = 0; any && found && i < np; i++) {
        /* the pairs where the walk found them */
        const struct lk_pulsar_pair_edit *pe = &edit->pairs[i];
        int set = pe->set_url && bytes_change(cur[i].has_url, cur[i].url, pe->url);
        int set_tls =
            pe->set_url_tls && bytes_change(cur[i].has_url_tls, cur[i].url_tls, pe->url_tls);
        unsigned pu;
        ProtobufCMessage *pm = set || set_tls ? pb_pair(m, sc->m, &cur[i], &pu) : NULL;
        found = pm != NULL || !(set || set_tls);
        if (set && found)
            set_bytes(pm, pu, pe->url, &psv[2 * i]);
        if (set_tls && found)
            set_bytes(pm, pu + 1u, pe->url_tls, &psv[2 * i + 1]);
    }

    if (found && pack_frame(base, out) == 0)
        rc = 1;
    for (int i = 0; i < 2; i++)
        if (sv[i].bd != NULL)
            *sv[i].bd = sv[i].was;
    for (size_t i = 0; psv != NULL && i < 2 * np; i++)
        if (psv[i].bd != NULL)
            *psv[i].bd = psv[i].was;
    lk_pb__base_command__free_unpacked(base, NULL);
done:
    free(cur);
    free(psv);
    return rc;
}

void
lk_pulsar_frame(struct evbuffer *out, const uint8_t *cmd, size_t len)
{
    uint8_t h[LK_PULSAR_PREFIX];

    prefix(h, len);
    evbuffer_add(out, h, sizeof(h));
    evbuffer_add(out, cmd, len);
}

/* A C string as a bytes field (pointing to it). */
static ProtobufCBinaryData
pb_text(const char *s)
{
    return (ProtobufCBinaryData){strlen(s), (uint8_t *)s};
}

int
lk_pulsar_connect_frame(struct evbuffer *out, const char *client_version, uint32_t protocol_version)
{
    LkPb__CommandConnect c = LK_PB__COMMAND_CONNECT__INIT;
    LkPb__BaseCommand base = LK_PB__BASE_COMMAND__INIT;

    c.client_version = pb_text(client_version);
    c.has_protocol_version = 1;
    c.protocol_version = protocol_version;
    base.type = LK_PULSAR_CONNECT;
    base.connect = &c;
    return pack_frame(&base, out);
}

int
lk_pulsar_lookup_frame(struct evbuffer *out, const char *topic, uint64_t request_id)
{
    LkPb__CommandLookupTopic l = LK_PB__COMMAND_LOOKUP_TOPIC__INIT;
    LkPb__BaseCommand base = LK_PB__BASE_COMMAND__INIT;

    l.topic = pb_text(topic);
    l.request_id = request_id;
    base.type = LK_PULSAR_LOOKUP;
    base.lookuptopic = &l;
    return pack_frame(&base, out);
}

enum lk_pulsar_addrs
lk_pulsar_type_addrs(int type)
{
    switch (type) {
    case LK_PULSAR_LOOKUP_RESPONSE:
    case LK_PULSAR_CLOSE_PRODUCER:
    case LK_PULSAR_CLOSE_CONSUMER:
    case LK_PULSAR_TOPIC_MIGRATED:
    case LK_PULSAR_SCALABLE_TOPIC_UPDATE:
    case LK_PULSAR_WATCH_TC_ASSIGNMENTS_UPDATE:
        return LK_PULSAR_ADDRS_DECODED;
    case 8:  /* SEND_ERROR */
    case 14: /* ERROR */
    case 22: /* PARTITIONED_METADATA_RESPONSE */
    case 26: /* CONSUMER_STATS_RESPONSE */
    case 35: /* GET_SCHEMA_RESPONSE */
    case 40: /* GET_OR_CREATE_SCHEMA_RESPONSE */
    case 51: /* NEW_TXN_RESPONSE */
    case 53: /* ADD_PARTITION_TO_TXN_RESPONSE */
    case 55: /* ADD_SUBSCRIPTION_TO_TXN_RESPONSE */
    case 57: /* END_TXN_RESPONSE */
    case 59: /* END_TXN_ON_PARTITION_RESPONSE */
    case 61: /* END_TXN_ON_SUBSCRIPTION_RESPONSE */
    case 63: /* TC_CLIENT_CONNECT_RESPONSE */
    case 74: /* SCALABLE_TOPIC_SUBSCRIBE_RESPONSE */
    case 77: /* WATCH_SCALABLE_TOPICS_UPDATE */
        return LK_PULSAR_ADDRS_TEXT;
    default:
        /* PulsarApi.proto's Type values: 2-40, 50-67 and 70-81 hold no
         * address (facts §4; proxy/pulsar.proto for 70-81); 41-49 and 69
         * are unassigned. */
        if ((type >= LK_PULSAR_CONNECT && type <= 40) || (type >= 50 && type <= 67) ||
            (type >= 70 && type <= 81))
            return LK_PULSAR_ADDRS_NONE;
        return LK_PULSAR_ADDRS_BYTES;
    }
}
