/*
 * Kafka wire primitives for the codec (lk_kafka_codec.c): a bounds-checked
 * read cursor over one frame and the few encoders a rewrite needs.  Types
 * as the protocol guide names them: big-endian int8/16/32/64, uuid (16
 * bytes), unsigned varint (at most 5 bytes, like the Java client's
 * readUnsignedVarint), classic strings (int16 length, -1 null) and bytes
 * (int32 length, -1 null), and in flexible versions (KIP-482) compact
 * strings, bytes and arrays (uvarint length + 1, 0 null) and tagged-field
 * sections (uvarint count, then {uvarint tag, uvarint size, bytes}).
 *
 * The cursor's error is sticky: the first read past the end (or a bad
 * encoding) sets `bad`, and every read after returns 0, so that a decoder
 * reads a run of fields and checks once.  Offsets stay absolute within
 * the frame, so that a decoder can record where a field sits.
 */
#ifndef LK_KAFKA_WIRE_H
#define LK_KAFKA_WIRE_H

#include <stddef.h>
#include <stdint.h>

struct lk_kw {
    const uint8_t *p;
    size_t len; /* the cursor never reads at or past p[len] */
    size_t off;
    int bad;
};

static inline int
lk_kw_need(struct lk_kw *c, size_t n)
{
    if (c->bad || c->len - c->off < n) {
        c->bad = 1;
        return 0;
    }
    return 1;
}

static inline void
lk_kw_skip(struct lk_kw *c, size_t n)
{
    if (lk_kw_need(c, n))
        c->off += n;
}

static inline uint16_t
lk_kw_get16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t
lk_kw_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void
lk_kw_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void
lk_kw_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline int16_t
lk_kw_i16(struct lk_kw *c)
{
    if (!lk_kw_need(c, 2))
        return 0;
    c->off += 2;
    return (int16_t)lk_kw_get16(c->p + c->off - 2);
}

static inline int32_t
lk_kw_i32(struct lk_kw *c)
{
    if (!lk_kw_need(c, 4))
        return 0;
    c->off += 4;
    return (int32_t)lk_kw_get32(c->p + c->off - 4);
}

/* An unsigned varint of at most 5 bytes; a sixth continuation is an error
 * (the Java client: "Varint is too long").  High bits of the fifth byte
 * wrap, as they do there. */
static inline uint32_t
lk_kw_uvarint(struct lk_kw *c)
{
    uint32_t v = 0;

    for (unsigned shift = 0; shift <= 28; shift += 7) {
        if (!lk_kw_need(c, 1))
            return 0;
        uint8_t b = c->p[c->off++];
        v |= (uint32_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0)
            return v;
    }
    c->bad = 1;
    return 0;
}

/* A string or bytes field: classic (int16 or int32 length, -1 null) or
 * compact (uvarint length + 1, 0 null).  Sets *start and *len to the
 * content (*start = SIZE_MAX for null) and returns 0, or -1 when it does
 * not fit, is negative other than -1, or is null where not nullable. */
static inline int
lk_kw_lenfield(struct lk_kw *c, int flex, int wide, int nullable, size_t *start, size_t *len)
{
    int64_t n;

    if (flex)
        n = (int64_t)lk_kw_uvarint(c) - 1;
    else
        n = wide ? lk_kw_i32(c) : lk_kw_i16(c);
    if (c->bad)
        return -1;
    if (n == -1 && nullable) {
        *start = SIZE_MAX;
        *len = 0;
        return 0;
    }
    if (n < 0 || !lk_kw_need(c, (size_t)n)) {
        c->bad = 1;
        return -1;
    }
    *start = c->off;
    *len = (size_t)n;
    c->off += (size_t)n;
    return 0;
}

static inline void
lk_kw_string(struct lk_kw *c, int flex, int nullable)
{
    size_t s, l;

    (void)lk_kw_lenfield(c, flex, 0, nullable, &s, &l);
}

/* records / bytes, always nullable where the codec meets them */
static inline void
lk_kw_bytes(struct lk_kw *c, int flex)
{
    size_t s, l;

    (void)lk_kw_lenfield(c, flex, 1, 1, &s, &l);
}

/* An array's element count: -1 for null (when nullable), else >= 0.  A
 * count larger than the bytes left cannot be honest (every element of
 * the arrays the codec walks takes at least one byte) and is an error, so
 * that no loop runs on a claimed count. */
static inline int64_t
lk_kw_array(struct lk_kw *c, int flex, int nullable)
{
    int64_t n = flex ? (int64_t)lk_kw_uvarint(c) - 1 : (int64_t)lk_kw_i32(c);

    if (c->bad)
        return 0;
    if ((n == -1 && nullable))
        return -1;
    if (n < 0 || (uint64_t)n > c->len - c->off) {
        c->bad = 1;
        return 0;
    }
    return n;
}

/* Skips a tagged-field section (flexible versions only). */
static inline void
lk_kw_tags(struct lk_kw *c)
{
    uint32_t n = lk_kw_uvarint(c);

    for (uint32_t i = 0; i < n && !c->bad; i++) {
        (void)lk_kw_uvarint(c); /* tag */
        lk_kw_skip(c, lk_kw_uvarint(c));
    }
}

/* Bytes an unsigned varint takes (1 to 5). */
static inline size_t
lk_kw_uvarint_len(uint32_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes v as an unsigned varint at p; returns the bytes written. */
static inline size_t
lk_kw_put_uvarint(uint8_t *p, uint32_t v)
{
    size_t n = 0;

    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

#endif
