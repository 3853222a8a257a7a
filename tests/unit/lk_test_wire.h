/*
 * A growing byte buffer for the unit tests that write wire data of their
 * own (the Kafka and Pulsar codecs'): put() appends bytes, w8() one byte.
 * Out of memory aborts.  Static inline, for those test files only (and
 * tests/fuzz/fuzz_kafka_pair.c).
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

#endif
