/*
 * A growing byte buffer for the unit tests that write wire data of their
 * own (the Kafka and Pulsar codecs'): put() appends bytes, w8() one byte,
 * tb_drop() takes bytes off the front, tb_get32() reads a big-endian word;
 * pb_varint(), pb_uint(), pb_bytes(), pb_str() and pb_msg() write protobuf
 * (a varint, and fields of wire types 0 and 2).  Out of memory aborts.  Static inline, for those test files only (and
 * the pair harnesses, tests/fuzz/fuzz_kafka_pair.c and fuzz_pulsar_pair.c).
 */
#ifndef LK_TEST_WIRE_H
#define LK_TEST_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct tb {
    uint8_t *p;
    size_t len, cap;
};

static inline void
put(struct tb *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL)
            abort();
    }
    if (n != 0)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static inline void
w8(struct tb *b, int v)
{
    uint8_t x = (uint8_t)v;
    put(b, &x, 1);
}

/* The first n bytes of b consumed (n at most b->len). */
static inline void
tb_drop(struct tb *b, size_t n)
{
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

static inline uint32_t
tb_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A protobuf varint: base 128, low group first, the high bit saying more
 * follow. */
static inline void
pb_varint(struct tb *b, uint64_t v)
{
    while (v > 0x7f) {
        w8(b, (int)(v & 0x7f) | 0x80);
        v >>= 7;
    }
    w8(b, (int)v);
}

/* A varint field (wire type 0). */
static inline void
pb_uint(struct tb *b, uint32_t field, uint64_t v)
{
    pb_varint(b, (uint64_t)field << 3);
    pb_varint(b, v);
}

/* A length-delimited field (wire type 2): bytes, a string, a message. */
static inline void
pb_bytes(struct tb *b, uint32_t field, const void *p, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | 2);
    pb_varint(b, n);
    put(b, p, n);
}

static inline void
pb_str(struct tb *b, uint32_t field, const char *s)
{
    pb_bytes(b, field, s, strlen(s));
}

static inline void
pb_msg(struct tb *b, uint32_t field, const struct tb *m)
{
    pb_bytes(b, field, m->p, m->len);
}

#endif
