/*
 * Fuzzes the leak guard's matcher (proxy/lk_match.c, Aho-Corasick over a
 * stream).  The input makes its own patterns: a count byte, then per
 * pattern a length byte and its bytes; the rest is the stream.
 * Invariants: the matches (pattern id, position, length) are the same
 * whatever pieces the stream comes in, and the same as a naive scan with
 * the boundary rule of lk_match.h; no match reported later starts before
 * the release point lk_match_pending() gave, which the leak guard relies
 * on to let bytes go; and lk_match_scan, which jumps over the bytes that
 * cannot start a pattern, ends every piece with the same matches and the
 * same state as lk_match_scan_plain, which steps on every byte; and
 * lk_match_none calls no stream clean that has a match.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_match.h"

#define MAX_PATS 8

static void
add(struct lk_fuzz_hits *hs, const struct lk_match_hit *h, uint64_t released)
{
    /* a match never starts before bytes already let go */
    LK_FUZZ_CHECK(h->end - h->len >= released);
    if (hs->n < LK_FUZZ_MAX_HITS)
        hs->h[hs->n++] = *h;
}

/* Scans text in pieces (seed 0: all at once) and collects the matches,
 * checking each against lk_match_scan_plain's on the same pieces. */
static void
scan(const struct lk_match *m, const char *text, size_t len, uint64_t seed, struct lk_fuzz_hits *hs)
{
    struct lk_match_state st, ref;
    struct lk_match_hit hit, rhit;
    uint64_t released = 0;
    size_t at = 0;

    hs->n = 0;
    lk_match_state_init(&st);
    lk_match_state_init(&ref);
    while (at < len) {
        size_t n = seed != 0 ? lk_fuzz_piece(&seed, len - at) : len - at, off = 0, roff = 0;
        while (lk_match_scan(m, &st, text + at, n, &off, &hit)) {
            LK_FUZZ_CHECK(lk_match_scan_plain(m, &ref, text + at, n, &roff, &rhit) == 1);
            LK_FUZZ_CHECK(roff == off && rhit.id == hit.id && rhit.end == hit.end &&
                          rhit.len == hit.len);
            add(hs, &hit, released);
        }
        LK_FUZZ_CHECK(lk_match_scan_plain(m, &ref, text + at, n, &roff, &rhit) == 0);
        LK_FUZZ_CHECK(st.node == ref.node && st.pos == ref.pos && st.emit == ref.emit);
        LK_FUZZ_CHECK(off == n);
        at += n;
        LK_FUZZ_CHECK(st.pos == at);
        size_t pending = lk_match_pending(m, &st);
        LK_FUZZ_CHECK(pending <= lk_match_max_len(m) && pending <= at);
        released = at - pending;
    }
    while (lk_match_finish(m, &st, &hit)) {
        LK_FUZZ_CHECK(lk_match_finish(m, &ref, &rhit) == 1);
        LK_FUZZ_CHECK(rhit.id == hit.id && rhit.end == hit.end && rhit.len == hit.len);
        add(hs, &hit, released);
    }
    LK_FUZZ_CHECK(lk_match_finish(m, &ref, &rhit) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct lk_fuzz_hits whole, pieces, naive;
    const char *pats[MAX_PATS];
    size_t lens[MAX_PATS], npats, at = 1;
    unsigned flags[MAX_PATS];
    char err[128];

    if (size < 3)
        return 0;
    npats = 1 + data[0] % MAX_PATS;
    for (size_t i = 0; i < npats; i++) {
        if (at >= size)
            return 0;
        unsigned b = data[at++];
        /* mostly short patterns, sometimes long ones up to the limit */
        size_t l = b >= 0xf0 ? 1 + (b & 15) * 31 : 1 + b % 24;
        if (l > size - at)
            return 0;
        pats[i] = (const char *)data + at;
        lens[i] = l;
        flags[i] = (data[0] >> (3 + i % 5)) & 1 ? LK_MATCH_RAW : 0;
        at += l;
    }
    struct lk_match *m = lk_match_new_flags(pats, lens, flags, npats, err, sizeof(err));
    LK_FUZZ_CHECK(m != NULL);
    LK_FUZZ_CHECK(lk_match_count(m) == npats);

    const char *text = (const char *)data + at;
    size_t len = size - at;
    scan(m, text, len, 0, &whole);
    scan(m, text, len, lk_fuzz_seed(data, size), &pieces);
    naive.n = 0;
    lk_fuzz_naive_find_flags(pats, lens, flags, npats, text, len, lk_fuzz_hit, &naive);
    if (whole.n < LK_FUZZ_MAX_HITS && naive.n < LK_FUZZ_MAX_HITS) {
        LK_FUZZ_CHECK(lk_fuzz_hits_same(&whole, &pieces));
        LK_FUZZ_CHECK(lk_fuzz_hits_same(&whole, &naive));
    }
    /* a clean stream by lk_match_none has no match */
    LK_FUZZ_CHECK(!lk_match_none(m, text, len) || naive.n == 0);
    lk_match_free(m);
    return 0;
}
