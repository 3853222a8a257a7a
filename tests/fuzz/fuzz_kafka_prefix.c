/*
 * Fuzzes the Kafka frame reader (proxy/lk_kafka_codec.c,
 * lk_kafka_reader_feed): a byte stream read once whole and once in pieces
 * whose sizes come from the input (fuzz_util's lk_fuzz_piece), the body
 * bytes sometimes handed over as NULL (the reader only counts them).  The
 * first input byte picks the kind of frame (requests, responses, or the
 * bare SASL tokens after a SaslHandshake v0) and max_frame_bytes (a few
 * small values and 100 MiB); the rest is the stream.  Invariants:
 *   - the split read gives the same frames (size, api_key, api_version,
 *     correlation_id, start and end) and the same error at the same
 *     offset as the one-shot read;
 *   - both equal a naive reference walk over the stream written here:
 *     4-byte size, refused below the prefix (none for a bare token),
 *     negative or above the max;
 *   - every call makes progress, never consumes past a frame's end, and a
 *     failed reader stays failed and consumes nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_kafka_codec.h"

#define MAXF 4096

struct frame {
    int32_t size;
    int16_t key, ver;
    int32_t corr;
    size_t start, end;
};

struct result {
    struct frame f[MAXF];
    size_t n;
    long err_at; /* stream offset just past the bad size, or -1 */
};

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The prefix length of each kind (dir): 12, 8, 4 bytes. */
static size_t
prefix_of(enum lk_kafka_dir dir)
{
    return dir == LK_KAFKA_REQUEST ? 12 : dir == LK_KAFKA_RESPONSE ? 8 : 4;
}

static void
reference(const uint8_t *s, size_t len, enum lk_kafka_dir dir, uint32_t max, struct result *r)
{
    size_t at = 0, pl = prefix_of(dir);
    int req = dir == LK_KAFKA_REQUEST;

    r->n = 0;
    r->err_at = -1;
    while (len - at >= 4 && r->n < MAXF) {
        int32_t size = (int32_t)be32(s + at);
        if (size < (int32_t)(pl - 4) || (uint32_t)size > max) {
            r->err_at = (long)(at + 4);
            return;
        }
        if (len - at < pl)
            return; /* the prefix is not complete */
        struct frame *f = &r->f[r->n++];
        f->size = size;
        f->key = req ? (int16_t)(s[at + 4] << 8 | s[at + 5]) : -1;
        f->ver = req ? (int16_t)(s[at + 6] << 8 | s[at + 7]) : -1;
        f->corr = dir == LK_KAFKA_BARE ? 0 : (int32_t)be32(s + at + (req ? 8 : 4));
        f->start = at;
        if (len - at - 4 < (uint32_t)size) {
            f->end = 0; /* not complete */
            return;
        }
        at += 4 + (size_t)size;
        f->end = at;
    }
}

/* Feeds the stream in pieces (whole if state is NULL). */
static void
read_split(const uint8_t *s, size_t len, enum lk_kafka_dir dir, uint32_t max, uint64_t *state,
           struct result *r)
{
    struct lk_kafka_reader rd;
    size_t at = 0, start = 0;

    r->n = 0;
    r->err_at = -1;
    lk_kafka_reader_init(&rd, dir, max);
    while (at < len) {
        size_t want = state != NULL ? lk_fuzz_piece(state, len - at) : len - at, used;
        int in_body = lk_kafka_reader_in_body(&rd);
        size_t left = in_body ? lk_kafka_reader_want(&rd) : 0;
        const uint8_t *p = in_body && state != NULL && (*state & 0x100) ? NULL : s + at;
        int ev = lk_kafka_reader_feed(&rd, p, want, &used);
        LK_FUZZ_CHECK(used <= want);
        LK_FUZZ_CHECK(!in_body || used <= left);
        if (ev < 0) {
            size_t again;
            r->err_at = (long)(at + used);
            LK_FUZZ_CHECK(lk_kafka_reader_feed(&rd, s, len, &again) == -1 && again == 0);
            return;
        }
        LK_FUZZ_CHECK(used > 0);
        if (ev & LK_KAFKA_RD_PREFIX) {
            LK_FUZZ_CHECK(r->n < MAXF);
            r->f[r->n] = (struct frame){rd.prefix.size,
                                        rd.prefix.api_key,
                                        rd.prefix.api_version,
                                        rd.prefix.correlation_id,
                                        start,
                                        0};
            LK_FUZZ_CHECK(at + used - start == prefix_of(dir));
            r->n++;
        } else {
            LK_FUZZ_CHECK(ev == 0 || ev == LK_KAFKA_RD_END);
            /* without an event the call took all it was given */
            LK_FUZZ_CHECK(ev != 0 || used == want);
        }
        at += used;
        if (ev & LK_KAFKA_RD_END) {
            LK_FUZZ_CHECK(r->n > 0);
            r->f[r->n - 1].end = at;
            start = at;
        }
        if (r->n == MAXF && (ev & LK_KAFKA_RD_END))
            return;
    }
}

static int
same(const struct result *a, const struct result *b)
{
    if (a->n != b->n || a->err_at != b->err_at)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->f[i].size != b->f[i].size || a->f[i].key != b->f[i].key ||
            a->f[i].ver != b->f[i].ver || a->f[i].corr != b->f[i].corr ||
            a->f[i].start != b->f[i].start || a->f[i].end != b->f[i].end)
            return 0;
    return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t maxes[] = {8, 12, 100, 4096, 100u << 20, 0x7fffffff, 4, 0};
    static struct result ref, one, split;

    if (size < 1)
        return 0;
    enum lk_kafka_dir dir = (data[0] & 0x10) ? LK_KAFKA_BARE
                            : (data[0] & 1)  ? LK_KAFKA_RESPONSE
                                             : LK_KAFKA_REQUEST;
    uint32_t max = maxes[(data[0] >> 1) & 7];
    const uint8_t *s = data + 1;
    size_t len = size - 1;
    uint64_t state = lk_fuzz_seed(data, size);

    reference(s, len, dir, max, &ref);
    read_split(s, len, dir, max, NULL, &one);
    read_split(s, len, dir, max, &state, &split);
    LK_FUZZ_CHECK(same(&one, &ref));
    LK_FUZZ_CHECK(same(&split, &ref));
    return 0;
}
