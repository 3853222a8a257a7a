/*
 * Tests for proxy/lk_match.c: the Aho-Corasick matcher behind the leak
 * guard.  Whole-buffer answers are checked by hand; streamed answers
 * (every split point, random chunking) against the whole-buffer ones and
 * against a naive reference, a byte comparison at every position (the one
 * the fuzz harnesses use).
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_match.h"
#include "lk_test.h"

static struct lk_match *
build(const char *const *pats, size_t n)
{
    size_t lens[64];
    char err[256] = "";
    struct lk_match *m;

    for (size_t i = 0; i < n; i++)
        lens[i] = strlen(pats[i]);
    m = lk_match_new(pats, lens, n, err, sizeof(err));
    if (m == NULL)
        lk_test_diag("lk_match_new: %s", err);
    return m;
}

/* Scans text in pieces of the given sizes (cycled; 0 = all at once). */
static void
scan_pieces(const struct lk_match *m, const char *text, size_t len, const size_t *sizes,
            size_t nsizes, struct lk_fuzz_hits *out)
{
    struct lk_match_state st;
    struct lk_match_hit hit;
    size_t at = 0, k = 0;

    out->n = 0;
    lk_match_state_init(&st);
    do {
        size_t n = nsizes == 0 || sizes[k % nsizes] == 0 ? len - at : sizes[k % nsizes];
        size_t off = 0;
        k++;
        if (n > len - at)
            n = len - at;
        while (lk_match_scan(m, &st, text + at, n, &off, &hit))
            if (out->n < LK_FUZZ_MAX_HITS)
                out->h[out->n++] = hit;
        at += n;
    } while (at < len);
    while (lk_match_finish(m, &st, &hit))
        if (out->n < LK_FUZZ_MAX_HITS)
            out->h[out->n++] = hit;
}

static void
scan_all(const struct lk_match *m, const char *text, struct lk_fuzz_hits *out)
{
    scan_pieces(m, text, strlen(text), NULL, 0, out);
}

/* "id@end" for each hit, space-separated. */
static const char *
show(const struct lk_fuzz_hits *h)
{
    static char buf[4096];
    size_t len = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < h->n && len < sizeof(buf) - 64; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%zu@%llu", i ? " " : "",
                                h->h[i].id, (unsigned long long)h->h[i].end);
    return buf;
}

/* The reference: the fuzz harnesses' naive scan (tests/fuzz/fuzz_util.c),
 * every pattern compared at every end with the boundary rule applied,
 * longest first. */
static void
naive(const char *const *pats, size_t npats, const char *text, size_t len, struct lk_fuzz_hits *out)
{
    size_t lens[64];

    out->n = 0;
    for (size_t i = 0; i < npats && i < 64; i++)
        lens[i] = strlen(pats[i]);
    lk_fuzz_naive_find(pats, lens, npats < 64 ? npats : 64, text, len, lk_fuzz_hit, out);
}

static void
test_basic(void)
{
    static const char *const pats[] = {"10.0.0.11:8080", "10.0.0.12:8080",
                                       "pulsar-broker-2.pulsar-broker.svc.cluster.local:8080",
                                       "[::1]:8080"};
    struct lk_match *m = build(pats, 4);
    struct lk_fuzz_hits h;

    if (!ok(m != NULL, "built"))
        return;
    ok(lk_match_count(m) == 4 && lk_match_max_len(m) == strlen(pats[2]), "count and max length");
    ok(lk_match_states(m) <= 1 + 14 + 14 + strlen(pats[2]) + 10,
       "states bounded by the patterns (%zu)", lk_match_states(m));
    ok(lk_match_memory(m) > 0 && lk_match_memory(m) < 64 * 1024, "memory %zu bytes",
       lk_match_memory(m));

    scan_all(m, "[\"10.0.0.11:8080\",\"10.0.0.12:8080\"]", &h);
    ok_str(show(&h), "0@16 1@33", "the brokers list");
    scan_all(m, "{\"ownerBroker\":\"10.0.0.11:8080\"}", &h);
    ok_str(show(&h), "0@30", "stats ownerBroker");
    scan_all(m, "10.0.0.11:8080", &h);
    ok_str(show(&h), "0@14", "the whole stream, start and end");
    scan_all(m, "see http://PULSAR-Broker-2.pulsar-broker.SVC.cluster.local:8080/admin", &h);
    ok_str(show(&h), "2@63", "case-insensitive");
    scan_all(m, "GET http://[::1]:8080/x", &h);
    ok_str(show(&h), "3@21", "IPv6 literal");
    scan_all(m, "", &h);
    ok(h.n == 0, "empty stream");
    scan_all(m, "10.0.0.13:8080 10.0.0.11:808 10.0.0.11;8080", &h);
    ok(h.n == 0, "near misses are not matches (%s)", show(&h));
    lk_match_free(m);
}

static void
test_boundaries(void)
{
    static const char *const pats[] = {"10.0.0.1:80", "b1:80", "b1:8080"};
    static const struct {
        const char *text, *want;
    } t[] = {
        {"10.0.0.11:8080", ""},     /* the classic: not inside a longer address */
        {"10.0.0.1:8080", ""},      /* a longer port after it */
        {"110.0.0.1:80", ""},       /* a longer IP before it */
        {"a10.0.0.1:80", ""},       /* a host name before it */
        {"-10.0.0.1:80", ""},       /* '-' is a host character */
        {".10.0.0.1:80", ""},       /* so is '.' */
        {"my_b1:80", ""},           /* and '_', as the config allows in names */
        {"10.0.0.1:80", "0@11"},    /* the whole stream */
        {"x=10.0.0.1:80/", "0@13"}, /* ordinary delimiters */
        {"[10.0.0.1:80]", "0@12"},
        {"http://10.0.0.1:80.", "0@18"}, /* a full stop after it is not a digit */
        {"@10.0.0.1:80,", "0@12"},
        {"10.0.0.1:800", ""}, /* a longer port after it */
        {"b1:8080", "2@7"},   /* the longer pattern, not its prefix */
        {"b1:80 b1:8080 b1:80", "1@5 2@13 1@19"},
        {"ab1:8080", ""},
    };
    struct lk_match *m = build(pats, 3);
    struct lk_fuzz_hits h;

    if (!ok(m != NULL, "built"))
        return;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        subtest("'%s'", t[i].text);
        scan_all(m, t[i].text, &h);
        ok_str(show(&h), t[i].want, "hits");
    }
    subtest(NULL);
    /* The same texts read with every pattern raw: every occurrence, in
     * pieces of one byte too (what the leak guard's binary strings get). */
    static const struct {
        const char *text, *want;
    } r[] = {
        {"10.0.0.11:8080", ""},
        {"110.0.0.1:80", "0@12"},
        {"-10.0.0.1:8080", "0@12"},
        {"b1:80 ab1:8080", "1@5 1@12 2@14"},
    };
    for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
        for (size_t piece = 0; piece <= 1; piece++) {
            struct lk_match_state st;
            struct lk_match_hit hit;
            size_t len = strlen(r[i].text), at = 0;
            h.n = 0;
            lk_match_state_init(&st);
            do {
                size_t n = piece ? 1 : len, off = 0;
                while (lk_match_scan_raw(m, &st, r[i].text + at, n, &off, &hit))
                    h.h[h.n++] = hit;
                at += n;
            } while (at < len);
            while (lk_match_finish_raw(m, &st, &hit))
                h.h[h.n++] = hit;
            ok_str(show(&h), r[i].want, "raw, '%s' in pieces of %s", r[i].text,
                   piece ? "1 byte" : "all");
        }
    }
    lk_match_free(m);
}

static void
test_overlapping(void)
{
    /* The URL and bare forms of one address end together: the longest
     * first.  Duplicates (ignoring case) report the first id. */
    static const char *const pats[] = {"http://h1:80", "h1:80", "H1:80", "1:80"};
    struct lk_match *m = build(pats, 4);
    struct lk_fuzz_hits h;

    if (!ok(m != NULL, "built"))
        return;
    scan_all(m, "go to http://h1:80/x", &h);
    ok_str(show(&h), "0@18 1@18", "URL then bare form at one end; '1:80' fails the boundary");
    ok(h.n == 2 && h.h[0].len == 12 && h.h[1].len == 5, "lengths");
    scan_all(m, "h1:80,1:80", &h);
    ok_str(show(&h), "1@5 3@10", "a duplicate reports the first id");
    lk_match_free(m);

    /* Matches that overlap without containing each other. */
    static const char *const pats2[] = {"a:1", "1:2"};
    m = build(pats2, 2);
    if (!ok(m != NULL, "built"))
        return;
    scan_all(m, "a:1:2", &h);
    ok_str(show(&h), "0@3 1@5", "both overlapping matches");
    lk_match_free(m);
}

static void
test_split_points(void)
{
    static const char *const pats[] = {"10.0.0.11:8080", "http://10.0.0.11:8080", "[::1]:6650",
                                       "b-2.svc.local:8443"};
    static const char text[] =
        "{\"a\":\"http://10.0.0.11:8080/x\",\"b\":[\"[::1]:6650\",\"10.0.0.11:80800\"],"
        "\"c\":\"B-2.SVC.local:8443\",\"d\":\"10.0.0.11:8080\"}";
    struct lk_match *m = build(pats, 4);
    struct lk_fuzz_hits whole, h;
    size_t len = strlen(text);
    int bad = 0;

    if (!ok(m != NULL, "built"))
        return;
    scan_all(m, text, &whole);
    ok_str(show(&whole), "1@27 0@27 2@47 3@91 0@112", "whole buffer (not inside 10.0.0.11:80800)");
    for (size_t a = 0; a <= len; a++) {
        size_t sizes[2] = {a, len - a};
        if (a == 0)
            continue;
        scan_pieces(m, text, len, sizes, 2, &h);
        if (!lk_fuzz_hits_same(&h, &whole) && bad++ < 3)
            ok(0, "split at %zu: %s", a, show(&h));
    }
    ok(bad == 0, "two pieces, every split point (%d bad)", bad);
    bad = 0;
    for (size_t a = 1; a < len; a++)
        for (size_t b = 1; a + b < len; b++) {
            size_t sizes[3] = {a, b, len - a - b};
            scan_pieces(m, text, len, sizes, 3, &h);
            if (!lk_fuzz_hits_same(&h, &whole) && bad++ < 3)
                ok(0, "split at %zu,%zu: %s", a, a + b, show(&h));
        }
    ok(bad == 0, "three pieces, every pair of split points (%d bad)", bad);
    {
        size_t one = 1;
        scan_pieces(m, text, len, &one, 1, &h);
        ok(lk_fuzz_hits_same(&h, &whole), "one byte at a time");
    }
    lk_match_free(m);
}

static void
test_pending(void)
{
    static const char *const pats[] = {"10.0.0.11:8080", "http://10.0.0.11:8080"};
    struct lk_match *m = build(pats, 2);
    struct lk_match_state st;
    struct lk_match_hit hit;
    size_t off = 0;

    if (!ok(m != NULL, "built"))
        return;
    lk_match_state_init(&st);
    ok(lk_match_scan(m, &st, "xx http://10.0.0.", 17, &off, &hit) == 0 && off == 17,
       "a partial match: no hit yet");
    ok(lk_match_pending(m, &st) == 14, "the 14 bytes of 'http://10.0.0.' are pending (%zu)",
       lk_match_pending(m, &st));
    off = 0;
    ok(lk_match_scan(m, &st, "11:8080", 7, &off, &hit) == 0, "complete, but the next byte decides");
    ok(lk_match_pending(m, &st) == 21, "the whole URL is pending (%zu)", lk_match_pending(m, &st));
    off = 0;
    ok(lk_match_scan(m, &st, "/", 1, &off, &hit) == 1 && off == 0 && hit.id == 1 && hit.end == 24,
       "'/' releases the URL form (off stays at the '/')");
    ok(lk_match_scan(m, &st, "/", 1, &off, &hit) == 1 && off == 0 && hit.id == 0 && hit.end == 24,
       "then the bare form");
    ok(lk_match_scan(m, &st, "/", 1, &off, &hit) == 0 && off == 1, "then the '/' is consumed");
    ok(lk_match_pending(m, &st) == 0, "nothing pending");
    ok(lk_match_finish(m, &st, &hit) == 0, "nothing at the end");

    lk_match_state_init(&st);
    off = 0;
    ok(lk_match_scan(m, &st, "10.0.0.11:8080", 14, &off, &hit) == 0, "at the very end");
    ok(lk_match_finish(m, &st, &hit) == 1 && hit.id == 0 && hit.end == 14 && hit.len == 14,
       "finish reports it");
    ok(lk_match_finish(m, &st, &hit) == 0, "once");
    lk_match_free(m);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned
rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void
test_random(void)
{
    static const char *const pats[] = {
        "10.0.0.11:8080",   "10.0.0.1:80",
        "10.0.0.12:8080",   "http://10.0.0.11:8080",
        "b1.internal:6650", "pulsar://b1.internal:6650",
        "[fe80::1]:8443",   "1.internal:6650",
        "0.0.1:80",         "a-b.c:1",
    };
    static const char alphabet[] = "0123456789.:-/[]abcilnrtABIN\"{},= \n";
    const size_t npats = sizeof(pats) / sizeof(pats[0]);
    const size_t len = 1 << 16;
    char *text = malloc(len + 1);
    struct lk_match *m = build(pats, npats);
    struct lk_fuzz_hits *ref = malloc(sizeof(*ref)), *got = malloc(sizeof(*got));
    int bad = 0, early = 0;

    if (!ok(m != NULL, "built"))
        goto end;
    /* Random bytes from the patterns' alphabet, with patterns (in random
     * case) dropped in often, so that near misses abound. */
    for (size_t i = 0; i < len;) {
        if (rnd(8) == 0) {
            const char *p = pats[rnd((unsigned)npats)];
            for (size_t k = 0; p[k] != '\0' && i < len; k++, i++)
                text[i] = rnd(2) ? (char)toupper((unsigned char)p[k]) : p[k];
        } else {
            text[i++] = alphabet[rnd(sizeof(alphabet) - 1)];
        }
    }
    text[len] = '\0';
    naive(pats, npats, text, len, ref);
    ok(ref->n > 500 && ref->n < LK_FUZZ_MAX_HITS, "the reference finds %zu matches", ref->n);

    for (int round = 0; round < 20; round++) {
        struct lk_match_state st;
        struct lk_match_hit hit;
        uint64_t boundary = 0;
        size_t at = 0;

        got->n = 0;
        lk_match_state_init(&st);
        while (at < len) {
            size_t n = round == 0 ? len : 1 + rnd(round < 10 ? 7 : 3000), off = 0;
            if (n > len - at)
                n = len - at;
            while (lk_match_scan(m, &st, text + at, n, &off, &hit)) {
                /* nothing reported later starts before what could be released */
                if (hit.end - hit.len < boundary)
                    early++;
                if (got->n < LK_FUZZ_MAX_HITS)
                    got->h[got->n++] = hit;
            }
            at += n;
            if (lk_match_pending(m, &st) > lk_match_max_len(m))
                early++;
            boundary = st.pos - lk_match_pending(m, &st);
        }
        while (lk_match_finish(m, &st, &hit))
            if (got->n < LK_FUZZ_MAX_HITS)
                got->h[got->n++] = hit;
        if (!lk_fuzz_hits_same(got, ref) && bad++ < 2)
            ok(0, "round %d: %zu hits, the reference %zu", round, got->n, ref->n);
    }
    ok(bad == 0, "20 random chunkings agree with the reference (%d bad)", bad);
    ok(early == 0, "the pending count is a safe release boundary (%d bad)", early);
end:
    lk_match_free(m);
    free(text);
    free(ref);
    free(got);
}

static void
test_errors(void)
{
    char err[256] = "", big[LK_MATCH_MAX_LEN + 2];
    const char *pats[1] = {""};
    size_t lens[1] = {0};

    ok(lk_match_new(pats, lens, 1, err, sizeof(err)) == NULL, "an empty pattern is refused");
    ok_str(err, "pattern 0 is 0 bytes (1 to 480 allowed)", "message");
    memset(big, 'a', sizeof(big));
    pats[0] = big;
    lens[0] = LK_MATCH_MAX_LEN + 1;
    ok(lk_match_new(pats, lens, 1, err, sizeof(err)) == NULL, "an overlong pattern is refused");
    lens[0] = LK_MATCH_MAX_LEN;
    struct lk_match *m = lk_match_new(pats, lens, 1, err, sizeof(err));
    ok(m != NULL, "the longest pattern is accepted");
    if (m != NULL) {
        /* its boundary is checked LK_MATCH_MAX_LEN + 1 bytes back */
        char *text = malloc(2 * LK_MATCH_MAX_LEN + 8);
        struct lk_fuzz_hits *h = malloc(sizeof(*h));
        memcpy(text, "x,", 2);
        memset(text + 2, 'a', LK_MATCH_MAX_LEN);
        text[2 + LK_MATCH_MAX_LEN] = '\0';
        size_t one = 1;
        scan_pieces(m, text, strlen(text), &one, 1, h);
        ok(h->n == 1 && h->h[0].end == 2 + LK_MATCH_MAX_LEN, "found after a ','");
        text[1] = 'b';
        scan_pieces(m, text, strlen(text), &one, 1, h);
        ok(h->n == 0, "not after a host character");
        free(text);
        free(h);
        lk_match_free(m);
    }
    m = lk_match_new(NULL, NULL, 0, err, sizeof(err));
    if (ok(m != NULL, "no patterns is fine")) {
        struct lk_fuzz_hits h;
        scan_all(m, "10.0.0.11:8080", &h);
        ok(h.n == 0 && lk_match_pending(m, &(struct lk_match_state){0}) == 0, "and finds nothing");
        lk_match_free(m);
    }
    lk_match_free(NULL);
}

/* Raw patterns (LK_MATCH_RAW): no boundary rule, beside text ones that
 * keep theirs; every split point gives the same as the naive reference. */
static void
test_raw(void)
{
    static const char *const pats[] = {"10.0.0.1", "10.0.0.1:80"};
    static const size_t lens[] = {8, 11};
    static const unsigned flags[] = {LK_MATCH_RAW, 0};
    /* host characters and digits around every occurrence */
    static const char text[] = "a10.0.0.1.x10.0.0.1:801 10.0.0.1:80.10.0.0.19";
    struct lk_fuzz_hits whole, piece, naive = {.n = 0};
    char err[128];
    struct lk_match *m = lk_match_new_flags(pats, lens, flags, 2, err, sizeof(err));

    if (!ok(m != NULL, "built (%s)", m != NULL ? "" : err))
        return;
    scan_pieces(m, text, strlen(text), NULL, 0, &whole);
    lk_fuzz_naive_find_flags(pats, lens, flags, 2, text, strlen(text), lk_fuzz_hit, &naive);
    ok(lk_fuzz_hits_same(&whole, &naive), "the same as the naive reference (%zu hits)", whole.n);
    size_t raw = 0, txt = 0;
    for (size_t i = 0; i < whole.n; i++)
        whole.h[i].id == 0 ? raw++ : txt++;
    ok(raw == 4 && txt == 1, "the raw pattern everywhere (%zu), the text one only on its own (%zu)",
       raw, txt);
    for (size_t cut = 1; cut < strlen(text); cut++) {
        size_t sizes[2] = {cut, 0};
        scan_pieces(m, text, strlen(text), sizes, 2, &piece);
        if (!lk_fuzz_hits_same(&whole, &piece)) {
            ok(0, "split at %zu: the same", cut);
            break;
        }
    }
    lk_match_free(m);
}

/* How many hits a stepping scan of text[0..len) as a whole stream finds. */
static size_t
plain_hits(const struct lk_match *m, const char *text, size_t len)
{
    struct lk_match_state st;
    struct lk_match_hit hit;
    size_t off = 0, n = 0;

    lk_match_state_init(&st);
    while (lk_match_scan_plain(m, &st, text, len, &off, &hit))
        n++;
    while (lk_match_finish(m, &st, &hit))
        n++;
    return n;
}

/* Scans text with lk_match_scan and lk_match_scan_plain side by side, in
 * the same random pieces; returns how many pieces ended with a different
 * hit or state (node, position, pending output) or how many runs ended
 * with different hits. */
static int
differ(const struct lk_match *m, const char *text, size_t len, int rounds)
{
    struct lk_fuzz_hits *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    int bad = 0;

    for (int round = 0; round < rounds; round++) {
        struct lk_match_state sa, sb;
        struct lk_match_hit hit;
        size_t at = 0;

        a->n = b->n = 0;
        lk_match_state_init(&sa);
        lk_match_state_init(&sb);
        while (at < len) {
            size_t n = round == 0 ? len : 1 + rnd(round % 2 ? 9 : 2000), oa = 0, ob = 0;
            if (n > len - at)
                n = len - at;
            while (lk_match_scan(m, &sa, text + at, n, &oa, &hit))
                if (a->n < LK_FUZZ_MAX_HITS)
                    a->h[a->n++] = hit;
            while (lk_match_scan_plain(m, &sb, text + at, n, &ob, &hit))
                if (b->n < LK_FUZZ_MAX_HITS)
                    b->h[b->n++] = hit;
            /* lk_match_none: the piece as a stream of its own is clean */
            if (lk_match_none(m, text + at, n) && plain_hits(m, text + at, n) != 0)
                bad++;
            at += n;
            if (sa.node != sb.node || sa.pos != sb.pos || sa.emit != sb.emit)
                bad++;
        }
        while (lk_match_finish(m, &sa, &hit))
            if (a->n < LK_FUZZ_MAX_HITS)
                a->h[a->n++] = hit;
        while (lk_match_finish(m, &sb, &hit))
            if (b->n < LK_FUZZ_MAX_HITS)
                b->h[b->n++] = hit;
        if (!lk_fuzz_hits_same(a, b))
            bad++;
    }
    free(a);
    free(b);
    return bad;
}

/* The scan jumps over bytes where no pattern can start (found 16 at a
 * time by the patterns' first two bytes or first byte, by memchr when one
 * byte starts them all, else by a table) and walks the patterns' first
 * bytes before it steps: the same hits and states as stepping on every
 * byte, on sparse text (long jumps, a host character or a delimiter just
 * before a match) and on dense text (no jumps), with each way of jumping:
 * names (6 first pairs), IPs (one first byte), many hosts (more first
 * bytes and pairs than 16 at a time takes: the table), and a one-byte
 * pattern (no pairs).  The filler has bytes that look like a first byte
 * once 0x20 is or-ed in (\x11 as '1', \x10 as '0', '@' as '`'). */
static void
test_prefilter(void)
{
    /* '[' and '_' have no 0x20 bit: or-ed into the text, into the patterns too */
    static const char *const names[] = {"pulsar://b1.internal:6650", "b1.internal:6650",
                                        "http://b1.internal:8080",   "10.0.0.11:8080",
                                        "[fd00::11]:8080",           "a_1.internal:8080"};
    static const char *const ips[] = {"10.0.0.11:8080", "10.0.0.1:80", "10.0.0.12:8080"};
    static const char *const hosts[] = {"a1.x:1", "b2.x:2", "c3.x:3", "d4.x:4", "e5.x:5",
                                        "f6.x:6", "g7.x:7", "h8.x:8", "i9.x:9", "`0.x:10"};
    static const char *const one[] = {"pulsar://b1:6650", "q", "10.0.0.1:80"};
    static const char filler[] = "xyz ,\"{}=:/_-.QWEmsk\n\x11\x10@pu1h";
    static const char *const *sets[] = {names, ips, hosts, one};
    static const size_t nsets[] = {6, 3, 10, 3};
    static const char *const kinds[] = {"names (6 first pairs)", "IPs (one first byte)",
                                        "many hosts (the table)", "a one-byte pattern"};
    const size_t len = 1 << 15;
    char *text = malloc(len + 1);
    struct lk_fuzz_hits *h = malloc(sizeof(*h));

    for (int k = 0; k < 4; k++) {
        struct lk_match *m = build(sets[k], nsets[k]);
        if (!ok(m != NULL, "built"))
            continue;
        for (int dense = 0; dense < 2; dense++) {
            for (size_t i = 0; i < len;) {
                if (rnd(dense ? 4 : 200) == 0) {
                    const char *p = sets[k][rnd((unsigned)nsets[k])];
                    size_t l = strlen(p);
                    /* whole, or cut short, in random case */
                    if (rnd(3) == 0)
                        l = 1 + rnd((unsigned)l);
                    for (size_t j = 0; j < l && i < len; j++, i++)
                        text[i] = rnd(2) ? (char)toupper((unsigned char)p[j]) : p[j];
                } else {
                    text[i++] = filler[rnd(sizeof(filler) - 1)];
                }
            }
            text[len] = '\0';
            scan_pieces(m, text, len, NULL, 0, h);
            ok(h->n > 10, "%s, %s text: %zu hits", kinds[k], dense ? "dense" : "sparse", h->n);
            ok(differ(m, text, len, 12) == 0,
               "jumping or stepping: the same hits and states; none only when there are none");
        }
        lk_match_free(m);
    }
    /* lk_match_none: a clean value; a match the port's next digit undoes
     * (not none: it holds the host's end, ':' and the port's start, and
     * the walk meets the pattern's end); a match; a value that ends in a
     * pattern's first bytes (none: a whole stream, nothing ends in it); the
     * host on another port (none: no pattern's host end, ':' and port
     * start); one too short for any pattern */
    struct lk_match *n = build(names, 6);
    if (n != NULL) {
        static const char *const values[] = {"application/json; charset=utf-8",
                                             "http://b1.internal:80801", "x http://b1.internal:8080",
                                             "Thu, 03 Dec 2026 21:42:33 GMT, see http://b1.in",
                                             "http://B1.INTERNAL:9090/admin", "b1.in"};
        static const int none[] = {1, 0, 0, 1, 1, 1};
        static const size_t hits[] = {0, 0, 1, 0, 0, 0};
        for (size_t c = 0; c < 6; c++)
            ok(lk_match_none(n, values[c], strlen(values[c])) == none[c] &&
                   plain_hits(n, values[c], strlen(values[c])) == hits[c],
               "'%s': %s, %zu hits", values[c], none[c] ? "none" : "not none", hits[c]);
        lk_match_free(n);
    }
    /* the byte before a match is one jumped over, in the same or an earlier piece */
    struct lk_match *m = build(ips, 3);
    if (m != NULL) {
        static const char *const cases[] = {"zz10.0.0.1:80 ", "zz.10.0.0.1:80 ", "zz 10.0.0.1:80 "};
        static const size_t want[] = {0, 0, 1};
        for (size_t c = 0; c < 3; c++) {
            size_t two = 2;
            scan_pieces(m, cases[c], strlen(cases[c]), &two, 1, h);
            ok(h->n == want[c], "'%s' in pieces of 2: %zu hits", cases[c], h->n);
            ok(differ(m, cases[c], strlen(cases[c]), 8) == 0, "the same as stepping");
        }
        lk_match_free(m);
    }
    free(text);
    free(h);
}

/* lk_match_none at every length and place: an address anywhere in a
 * value of 1 to 100 bytes, at its start, its end or between, is never
 * called clean (the 16 and 32 places a turn, the last turn shifted, the
 * copy of a short value), nor in another case; the same value with the
 * port changed, or with its last byte a space (no address, though all but
 * its last byte are there), is. */
static void
test_none_places(void)
{
    static const char *const pats[] = {"pulsar://10.0.0.11:6650", "10.0.0.11:6650",
                                       "http://b1.internal:8080", "b1.internal:8080"};
    static const char *const finds[] = {"10.0.0.11:6650", "pulsar://10.0.0.11:6650",
                                        "B1.Internal:8080", "http://b1.internal:8080"};
    struct lk_match *m = build(pats, 4);
    char v[128];
    unsigned wrong = 0, checked = 0;

    if (m == NULL)
        return;
    for (size_t f = 0; f < 4; f++) {
        size_t fl = strlen(finds[f]);
        for (size_t len = fl; len <= 100; len++)
            for (size_t at = 0; at + fl <= len; at++) {
                memset(v, ' ', len);
                memcpy(v + at, finds[f], fl);
                checked++;
                wrong += lk_match_none(m, v, len) != 0 || plain_hits(m, v, len) == 0;
                v[at + fl - 3] = '7'; /* "...:6750", "...:8780": another port */
                wrong += lk_match_none(m, v, len) != 1;
                memcpy(v + at, finds[f], fl - 1);
                v[at + fl - 1] = ' ';
                wrong += lk_match_none(m, v, len) != 1;
            }
    }
    ok(wrong == 0, "an address found in every place of every length, none without it (%u of %u)",
       wrong, checked);
    lk_match_free(m);
}

const struct lk_test_case lk_test_match[] = {
    {"match/basic", test_basic},
    {"match/boundaries", test_boundaries},
    {"match/overlapping", test_overlapping},
    {"match/split_points", test_split_points},
    {"match/pending", test_pending},
    {"match/random", test_random},
    {"match/errors", test_errors},
    {"match/raw", test_raw},
    {"match/prefilter", test_prefilter},
    {"match/none_places", test_none_places},
    {NULL, NULL},
};
