/*
 * Fuzzes the streamed rewrite of Fetch v16-18 and ShareFetch v0-2 answers
 * (proxy/lk_kafka_codec.c: lk_kafka_fstream, lk_kafka_fstream_head,
 * lk_kafka_tail_fit), against the whole-frame rewrite
 * (lk_kafka_rewrite_response).  Input: a selector byte (bit 0: ShareFetch,
 * else Fetch; the version from the next bits), a byte free to vary the
 * pieces (the whole input seeds their sizes, lk_fuzz_piece), then the
 * frame after its size field (the harness prefixes the size).  The
 * endpoint callback is fuzz_kafka_response's (lk_fuzz_kafka_endpoint):
 * node ids 0-4 (mod 8) become "ext-N" addresses (one over 127 bytes), 5
 * is kept, the others unknown.
 * Invariants:
 *   - the parser's verdict and its split (bytes passed, tail) are the same
 *     whole, a byte at a time, and in pieces of seeded sizes, with the
 *     bytes it may step over given as NULL;
 *   - the stream (parser, then the tail's fit) fails exactly when the
 *     whole-frame rewrite calls the frame malformed;
 *   - otherwise the output is exactly as long as the input, its bytes
 *     before the tail are the input's, and it decodes (the whole-frame
 *     walk, keeping all) with either the same node ids as the whole-frame
 *     rewrite, every rewritten one at its external address (kept), or no
 *     endpoint at all (dropped); when the whole-frame rewrite is as long as
 *     the input, a kept output is that rewrite byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_kafka_codec.h"
#include "lk_kafka_fstream.h"

static enum lk_kafka_rw
rewrite(const uint8_t *f, size_t len, int16_t key, int16_t ver, struct lk_fuzz_kafka_rec *r,
        struct evbuffer *out)
{
    struct lk_kafka_rewrite rw = {.endpoint = lk_fuzz_kafka_endpoint, .arg = r};

    r->n = 0;
    return lk_kafka_rewrite_response(f, len, key, ver, &rw, out);
}

struct split {
    int rc;
    size_t pass, tail;
};

/* Streams frame[8..len): pieces of `piece` bytes, or seeded sizes (piece
 * 0).  The passed bytes must come first and be contiguous. */
static struct split
stream(const uint8_t *frame, size_t len, int16_t key, int16_t ver, size_t piece, uint64_t seed)
{
    struct lk_kafka_fstream s;
    struct split r = {0, 0, 0};
    size_t at = 8, used;

    lk_kafka_fstream_init(&s, key, ver, (int32_t)(len - 4));
    if (at == len) /* the correlation id alone: told so by an empty feed */
        r.rc = lk_kafka_fstream_feed(&s, NULL, 0, &used);
    while (at < len && r.rc == 0) {
        size_t n = piece != 0 ? piece : lk_fuzz_piece(&seed, len - at);
        if (n > len - at)
            n = len - at;
        size_t sk = lk_kafka_fstream_skippable(&s);
        const uint8_t *p = frame + at;
        if (sk != 0) {
            n = n < sk ? n : sk;
            p = NULL;
        }
        r.rc = lk_kafka_fstream_feed(&s, p, n, &used);
        if (r.rc < 0)
            break;
        LK_FUZZ_CHECK(used <= n);
        LK_FUZZ_CHECK(r.tail == 0 || used == 0); /* nothing passes after the tail began */
        r.pass += used;
        r.tail += n - used;
        at += n;
    }
    if (r.rc < 0)
        r.pass = r.tail = 0;
    return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct lk_fuzz_kafka_rec whole, seen;
    static uint8_t head[LK_KAFKA_FSTREAM_HEAD_MAX];

    if (size < 2 || size > (1u << 24))
        return 0;
    int16_t key = (data[0] & 1) ? LK_KAFKA_SHARE_FETCH : LK_KAFKA_FETCH;
    int16_t ver = (int16_t)(((data[0] >> 1) % 3) + (key == LK_KAFKA_FETCH ? 16 : 0));
    uint64_t seed = lk_fuzz_seed(data, size);
    size_t len = size - 2 + 4;
    uint8_t *frame = malloc(len);
    uint32_t sz = (uint32_t)(size - 2);
    frame[0] = (uint8_t)(sz >> 24), frame[1] = (uint8_t)(sz >> 16);
    frame[2] = (uint8_t)(sz >> 8), frame[3] = (uint8_t)sz;
    memcpy(frame + 4, data + 2, size - 2);
    struct evbuffer *wout = evbuffer_new(), *syn = evbuffer_new(), *rew = evbuffer_new(),
                    *fit_out = evbuffer_new(), *chk = evbuffer_new();

    LK_FUZZ_CHECK(lk_kafka_stream_wanted(key, ver));
    whole.rewrite = 1;
    enum lk_kafka_rw wrc =
        len >= 8 ? rewrite(frame, len, key, ver, &whole, wout) : LK_KAFKA_RW_MALFORMED;
    if (len < 8)
        goto out;

    struct split a = stream(frame, len, key, ver, len, 0);
    struct split b = stream(frame, len, key, ver, 1, 0);
    struct split c = stream(frame, len, key, ver, 0, seed); /* pieces from the input */
    LK_FUZZ_CHECK(a.rc == b.rc && a.pass == b.pass && a.tail == b.tail);
    LK_FUZZ_CHECK(a.rc == c.rc && a.pass == c.pass && a.tail == c.tail);
    LK_FUZZ_CHECK(a.rc != 0); /* the whole frame was fed: ended or failed */

    enum lk_kafka_fit fit = LK_KAFKA_FIT_BAD;
    size_t hn = 0;
    if (a.rc == 1) {
        LK_FUZZ_CHECK(8 + a.pass + a.tail == len);
        hn = lk_kafka_fstream_head(key, ver, 7, a.tail, head);
        LK_FUZZ_CHECK(hn != 0);
        evbuffer_add(syn, head, hn);
        evbuffer_add(syn, frame + 8 + a.pass, a.tail);
        size_t slen = evbuffer_get_length(syn);
        const uint8_t *s = evbuffer_pullup(syn, -1);
        seen.rewrite = 1;
        enum lk_kafka_rw src = rewrite(s, slen, key, ver, &seen, rew);
        if (src != LK_KAFKA_RW_REWRITTEN)
            evbuffer_add(rew, s, slen);
        size_t rlen = evbuffer_get_length(rew);
        const uint8_t *r = evbuffer_pullup(rew, -1);
        /* the rewrite changes NodeEndpoints only: the head stays, but its size */
        LK_FUZZ_CHECK(rlen >= hn && memcmp(r + 4, head + 4, hn - 4) == 0);
        fit = lk_kafka_tail_fit(key, r + hn, rlen - hn, a.tail, fit_out);
    }
    /* the stream fails exactly when the whole-frame walk does */
    int stream_ok = a.rc == 1 && fit != LK_KAFKA_FIT_BAD;
    LK_FUZZ_CHECK(stream_ok == (wrc != LK_KAFKA_RW_MALFORMED));
    if (!stream_ok) {
        LK_FUZZ_CHECK(evbuffer_get_length(fit_out) == 0);
        goto out;
    }
    /* same size; the client reads what the whole rewrite gives, or none */
    LK_FUZZ_CHECK(evbuffer_get_length(fit_out) == a.tail);
    evbuffer_add(chk, frame, 8 + a.pass);
    evbuffer_add_buffer(chk, fit_out);
    size_t olen = evbuffer_get_length(chk);
    const uint8_t *o = evbuffer_pullup(chk, -1);
    LK_FUZZ_CHECK(olen == len && memcmp(o, frame, 8 + a.pass) == 0);
    seen.rewrite = 0;
    struct evbuffer *none = evbuffer_new();
    LK_FUZZ_CHECK(rewrite(o, olen, key, ver, &seen, none) == LK_KAFKA_RW_UNCHANGED);
    evbuffer_free(none);
    if (fit == LK_KAFKA_FIT_DROPPED) {
        LK_FUZZ_CHECK(seen.n == 0);
    } else {
        LK_FUZZ_CHECK(seen.n == whole.n);
        for (size_t i = 0; i < seen.n && i < LK_FUZZ_MAXEP; i++) {
            int32_t id = seen.ep[i].id, k = id & 7;
            LK_FUZZ_CHECK(id == whole.ep[i].id);
            if (lk_fuzz_kafka_rewrites(id)) /* never an internal address of the map */
                LK_FUZZ_CHECK(lk_str_eq(seen.ep[i].host, lk_fuzz_kafka_ext(id)) &&
                              seen.ep[i].port == 9000 + k);
        }
        if (wrc == LK_KAFKA_RW_REWRITTEN && evbuffer_get_length(wout) == len)
            LK_FUZZ_CHECK(memcmp(evbuffer_pullup(wout, -1), o, len) == 0);
    }
out:
    evbuffer_free(wout);
    evbuffer_free(syn);
    evbuffer_free(rew);
    evbuffer_free(fit_out);
    evbuffer_free(chk);
    free(frame);
    return 0;
}
