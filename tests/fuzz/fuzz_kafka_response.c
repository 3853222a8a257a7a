/*
 * Fuzzes Kafka response rewriting (proxy/lk_kafka_codec.c,
 * lk_kafka_rewrite_response) with a rewriting callback attached.  Input:
 * the request's api_key and api_version (int16 each), a flags byte (bit 0:
 * unknown_api = drop; bit 1: the input's own bytes are the whole frame,
 * size field included, rather than the harness prefixing the right size),
 * then the frame after its size field.  The unit tests write such inputs
 * (LK_KAFKA_DUMP=DIR tests/unit/run kafka_codec).  The callback rewrites
 * node ids 0-4 (mod 8) into "ext-N" addresses, one over 127 bytes (a
 * two-byte compact length), keeps 5 and does not know the others.
 * Invariants:
 *   - only a rewritten frame touches the output buffer;
 *   - without a callback (or with one that keeps every endpoint) nothing
 *     but ApiVersions is rewritten, and the decode's verdict (malformed or
 *     not) is the same as with the rewriting callback;
 *   - a rewritten frame has a size field that matches, decodes again
 *     (never malformed) with the same node ids in the same order, every
 *     rewritten node at its external address and every other endpoint as
 *     it came; rewriting it again changes nothing;
 *   - a frame left unchanged had no endpoint to change;
 *   - an ApiVersions frame, decoded by a reader written here, comes out as
 *     its input with the max versions clamped (lk_kafka_clamp_version: the
 *     rewrite set's, and the Streams group APIs') and the dropped entries
 *     gone; an error-35 reply is never rewritten.
 * DescribeQuorum v2's controller listeners (uint16 ports) go to the same
 * callback as the broker endpoints, so the same invariants hold for them. 
 * And the view (proxy/lk_kafka_view.c): the frame decoded, its endpoints
 * set by edits the input's hash picks (a new host, short, empty or over
 * 127 bytes, a new port, the endpoint as it is, or changed and set back),
 * is written by the splice (lk_kafka_view_encode) with the verdict and the
 * bytes of the walk it stands for (lk_kafka_view_encode_walk).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_kafka_codec.h"
#include "lk_kafka_view.h"
#include "lk_pool.h"

/* ApiVersions entries, read here from the spec (not by the codec). */
struct av {
    int16_t key, min, max;
};

static int
be16(const uint8_t *p)
{
    return (int16_t)(p[0] << 8 | p[1]);
}

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a uvarint at *at; -1 on a bad one. */
static int64_t
uv(const uint8_t *p, size_t len, size_t *at)
{
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*at >= len)
            return -1;
        uint8_t b = p[(*at)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80))
            return (int64_t)(v & 0xffffffff);
    }
    return -1;
}

/* Returns the number of entries, -1 if it does not read; *err the error
 * code. */
static long
read_av(const uint8_t *p, size_t len, int ver, struct av *out, size_t max, int *err)
{
    size_t at = 8;
    int64_t n;

    if (len < 10)
        return -1;
    *err = be16(p + 8);
    at = 10;
    if (ver >= 3) {
        n = uv(p, len, &at) - 1;
    } else {
        if (len - at < 4)
            return -1;
        n = (int32_t)be32(p + at);
        at += 4;
    }
    if (n < 0 || (size_t)n > max)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        if (len - at < 6)
            return -1;
        out[i] = (struct av){(int16_t)be16(p + at), (int16_t)be16(p + at + 2),
                             (int16_t)be16(p + at + 4)};
        at += 6;
        if (ver >= 3) {
            int64_t nt = uv(p, len, &at);
            for (int64_t t = 0; t < nt; t++) {
                int64_t size;
                if (uv(p, len, &at) < 0 || (size = uv(p, len, &at)) < 0 ||
                    (uint64_t)size > len - at)
                    return -1;
                at += (size_t)size;
            }
            if (nt < 0)
                return -1;
        }
    }
    return (long)n;
}

static void
check_api_versions(const uint8_t *in, size_t inlen, const uint8_t *out, size_t outlen, int ver,
                   int drop)
{
    static struct av a[4096], b[4096];
    int ea, eb;
    long na = read_av(in, inlen, ver, a, 4096, &ea);
    long nb = read_av(out, outlen, ver, b, 4096, &eb);

    LK_FUZZ_CHECK(na >= 0 && nb >= 0);
    LK_FUZZ_CHECK(ea == eb && ea != LK_KAFKA_ERR_UNSUPPORTED_VERSION);
    long j = 0;
    for (long i = 0; i < na; i++) {
        int top = lk_kafka_clamp_version(a[i].key);
        if ((drop && !lk_kafka_api_known(a[i].key)) || (top >= 0 && a[i].min > top))
            continue;
        LK_FUZZ_CHECK(j < nb);
        LK_FUZZ_CHECK(b[j].key == a[i].key && b[j].min == a[i].min);
        LK_FUZZ_CHECK(b[j].max == (top >= 0 && a[i].max > top ? top : a[i].max));
        j++;
    }
    LK_FUZZ_CHECK(j == nb);
}

static enum lk_kafka_rw
rewrite(const uint8_t *f, size_t len, int16_t key, int16_t ver, int drop,
        struct lk_fuzz_kafka_rec *r, struct evbuffer *out)
{
    struct lk_kafka_rewrite rw = {.endpoint = r != NULL ? lk_fuzz_kafka_endpoint : NULL,
                                  .controller = r != NULL ? lk_fuzz_kafka_endpoint : NULL,
                                  .arg = r};

    rw.drop_unknown_api = (unsigned)drop;
    if (r != NULL)
        r->n = 0;
    enum lk_kafka_rw rc = lk_kafka_rewrite_response(f, len, key, ver, &rw, out);
    if (r != NULL)
        LK_FUZZ_CHECK(rw.endpoints == (r->n < LK_FUZZ_MAXEP ? r->n : rw.endpoints));
    LK_FUZZ_CHECK(rc == LK_KAFKA_RW_REWRITTEN || evbuffer_get_length(out) == 0);
    return rc;
}

/* The view's splice against its walk, over edits picked by the input's
 * hash. */
static void
check_splice(const uint8_t *frame, size_t len, int16_t key, int16_t ver, int drop,
             const uint8_t *data, size_t size)
{
    static char longhost[200];
    struct lk_pool pool;
    struct lk_kafka_view v;
    struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    memset(longhost, 'x', sizeof(longhost));
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ULL;
    lk_pool_init(&pool);
    if (lk_kafka_view_decode(&v, frame, len, key, ver, &pool) == LK_KAFKA_RW_UNCHANGED) {
        for (size_t i = 0; i < v.nep; i++) {
            const struct lk_kafka_endpoint *e = &v.ep[i];
            h = h * 6364136223846793005ULL + 1442695040888963407ULL;
            switch ((h >> 33) % 7) {
            case 0:
                break;
            case 1:
                /* a broker's port is any int32: INT32_MAX wraps, not overflows */
                lk_kafka_view_set(&v, i, lk_str_c("h1.example"), (int32_t)((uint32_t)e->port + 1));
                break;
            case 2:
                lk_kafka_view_set(&v, i, lk_str_make(longhost, sizeof(longhost)), e->port);
                break;
            case 3:
                lk_kafka_view_set(&v, i, lk_str_make("", 0), (int32_t)(h >> 48));
                break;
            case 4:
                lk_kafka_view_set(&v, i, e->host, e->port);
                break;
            case 5:
                lk_kafka_view_set(&v, i, lk_str_c("h5"), 5);
                lk_kafka_view_set(&v, i, e->host, e->port);
                break;
            default:
                lk_kafka_view_set(&v, i, lk_str_make(longhost, (h >> 40) % sizeof(longhost)),
                                  e->port);
                break;
            }
        }
        if (h & 1)
            lk_kafka_view_clamp(&v, drop);
        enum lk_kafka_rw rs = lk_kafka_view_encode(&v, a), rw = lk_kafka_view_encode_walk(&v, b);
        LK_FUZZ_CHECK(rs == rw);
        size_t n = evbuffer_get_length(a);
        LK_FUZZ_CHECK(n == evbuffer_get_length(b));
        LK_FUZZ_CHECK(n == 0 || memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), n) == 0);
    }
    lk_pool_free(&pool);
    evbuffer_free(a);
    evbuffer_free(b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct lk_fuzz_kafka_rec first, again, keep;
    struct evbuffer *out, *out2;
    uint8_t *frame;
    size_t len;

    if (size < 5)
        return 0;
    int16_t key = (int16_t)be16(data), ver = (int16_t)be16(data + 2);
    int drop = data[4] & 1;
    if (data[4] & 2) {
        len = size - 5;
        frame = malloc(len != 0 ? len : 1);
        memcpy(frame, data + 5, len);
    } else {
        len = size - 5 + 4;
        frame = malloc(len);
        uint32_t s = (uint32_t)(size - 5);
        frame[0] = (uint8_t)(s >> 24), frame[1] = (uint8_t)(s >> 16);
        frame[2] = (uint8_t)(s >> 8), frame[3] = (uint8_t)s;
        memcpy(frame + 4, data + 5, size - 5);
    }
    out = evbuffer_new();
    out2 = evbuffer_new();

    check_splice(frame, len, key, ver, drop, data, size);

    first.rewrite = 1;
    enum lk_kafka_rw rc = rewrite(frame, len, key, ver, drop, &first, out);

    /* no callback, and a callback that keeps: the same verdict, nothing
     * rewritten but ApiVersions */
    enum lk_kafka_rw rc0 = rewrite(frame, len, key, ver, drop, NULL, out2);
    LK_FUZZ_CHECK(rc0 == rc || (rc == LK_KAFKA_RW_REWRITTEN && rc0 == LK_KAFKA_RW_UNCHANGED));
    if (key != LK_KAFKA_API_VERSIONS)
        LK_FUZZ_CHECK(rc0 != LK_KAFKA_RW_REWRITTEN);
    evbuffer_drain(out2, evbuffer_get_length(out2));
    keep.rewrite = 0;
    enum lk_kafka_rw rck = rewrite(frame, len, key, ver, drop, &keep, out2);
    LK_FUZZ_CHECK(rck == rc0);
    evbuffer_drain(out2, evbuffer_get_length(out2));
    LK_FUZZ_CHECK(keep.n == first.n);

    if (rc == LK_KAFKA_RW_UNCHANGED && key != LK_KAFKA_API_VERSIONS) {
        /* nothing to change: every rewritten node was already external */
        for (size_t i = 0; i < first.n; i++)
            if (lk_fuzz_kafka_rewrites(first.ep[i].id)) {
                int32_t k = first.ep[i].id & 7;
                LK_FUZZ_CHECK(lk_str_eq(first.ep[i].host, lk_fuzz_kafka_ext(k)));
                LK_FUZZ_CHECK(first.ep[i].port == 9000 + k);
            }
    }
    if (rc == LK_KAFKA_RW_REWRITTEN) {
        size_t olen = evbuffer_get_length(out);
        const uint8_t *o = evbuffer_pullup(out, -1);
        LK_FUZZ_CHECK(olen >= 8 && be32(o) == olen - 4);
        /* decodes again: same ids, external where rewritten */
        again.rewrite = 0;
        LK_FUZZ_CHECK(rewrite(o, olen, key, ver, drop, &again, out2) == LK_KAFKA_RW_UNCHANGED);
        LK_FUZZ_CHECK(again.n == first.n);
        for (size_t i = 0; i < again.n; i++) {
            const struct lk_fuzz_kafka_ep *a = &first.ep[i], *b = &again.ep[i];
            LK_FUZZ_CHECK(a->id == b->id);
            if (lk_fuzz_kafka_rewrites(a->id)) {
                int32_t k = a->id & 7;
                LK_FUZZ_CHECK(lk_str_eq(b->host, lk_fuzz_kafka_ext(k)));
                LK_FUZZ_CHECK(b->port == 9000 + k);
            } else {
                LK_FUZZ_CHECK(lk_str_eq(a->host, b->host) && a->port == b->port);
            }
        }
        /* idempotent */
        again.rewrite = 1;
        LK_FUZZ_CHECK(rewrite(o, olen, key, ver, drop, &again, out2) == LK_KAFKA_RW_UNCHANGED);
        if (key == LK_KAFKA_API_VERSIONS)
            check_api_versions(frame, len, o, olen, ver, drop);
    }
    evbuffer_free(out);
    evbuffer_free(out2);
    free(frame);
    return 0;
}
