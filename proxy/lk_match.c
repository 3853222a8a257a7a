/*
 * Aho-Corasick over bytes (Aho and Corasick, "Efficient string matching",
 * CACM 1975), compiled to a full transition table so that a scan does one
 * table load per byte and never follows failure links.  Bytes are mapped to
 * classes first (every case-folded byte that occurs in a pattern gets its
 * own class, all other bytes share class 0), which keeps the table at
 * states x classes instead of states x 256.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LK_MATCH_AVX2 1 /* triples_none's 32-byte turns, when the CPU has AVX2 */
#endif

#include "lk_match.h"
#include "lk_pool.h"

#define NONE UINT32_MAX
/* The bytes that can start a pattern are looked for 16 at a time when, with
 * 0x20 or-ed into each (one value for both cases of a letter), they are at
 * most this many (SSE2; else, and without SSE2, a table). */
#define FOLD_MAX 8

/*
 * Three bytes at one place of every pattern, one set of them per place:
 * where a pattern is, its three bytes are, so where none of the set is,
 * no pattern is.  Two places: a pattern's last three bytes (the port's
 * last digits, "650" of "pulsar://10.0.0.1:6650"; a raw host's end), and
 * the byte before its last ':' with the ':' and the byte after it ("1:6":
 * the host's end and the port's start; a pattern ending in ':', or without
 * one, its last three).  Each triple once, 0x20 or-ed into each byte:
 * v[k][0..2] are triple k's bytes 16 times, the spares triple 0's.  More
 * than FOLD_MAX, or a pattern under 3 bytes: n 0, the set unused.
 */
struct anchors {
    unsigned char v[FOLD_MAX][3][16];
    size_t n;
    unsigned char pad; /* a byte in no triple, even with 0x20 or-ed in */
};

struct lk_match {
    uint8_t cls[256]; /* byte -> class */
    size_t ncls;      /* classes, including class 0 for "any other byte" */
    size_t nstates;
    size_t npatterns;
    size_t max_len;
    uint32_t *delta; /* nstates x ncls: the next state; state 0 is the root */
    uint32_t *out;   /* pattern ending exactly at the state, or NONE */
    uint32_t *dict;  /* the nearest proper suffix state with an output, or NONE */
    uint32_t *emit;  /* the first state on the output chain (out: the state, else dict) */
    uint16_t *depth; /* length of the string the state stands for */
    uint8_t *raw;    /* by pattern id: LK_MATCH_RAW (no boundary rule); NULL: none is */
    uint8_t first[256]; /* byte -> 1 if it leaves the root (can start a pattern) */
    size_t nfirst;      /* how many bytes do (both cases of a letter count) */
    unsigned char first1; /* the byte, when nfirst is 1 */
    unsigned char fold[FOLD_MAX]; /* those bytes | 0x20, each once (when that is FOLD_MAX or fewer) */
    size_t nfold;
    unsigned char foldv[FOLD_MAX][16]; /* fold[k] 16 times, the spare ones fold[0]'s */
    /* The first two bytes of the patterns, 0x20 or-ed into each, each pair
     * once (when that is FOLD_MAX or fewer, and no pattern is one byte):
     * pairv[k][0] and [1] are pair k's bytes 16 times, the spares pair 0's. */
    unsigned char pairv[FOLD_MAX][2][16];
    size_t npair;
    /* lk_match_none's anchors (struct anchors): by the port's end, and
     * by the host's end, ':' and the port's start */
    struct anchors anchors[2];
    int anchor_first; /* the set of fewer triples, looked at first */
    int avx2;         /* the CPU has AVX2 */
    size_t min_len;           /* of the shortest pattern */
};

static int
fold(int c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* [A-Za-z0-9._-]: a byte that may continue a host name or IP literal ('_'
 * too: the config accepts it in host names, as lk_url.c does). */
static int
is_host(unsigned c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

/* The anchors at place `place` (struct anchors) of patterns[0..n). */
static void
anchors_new(struct anchors *an, int place, const char *const *patterns, const size_t *lens,
            size_t n)
{
    size_t i, k;

    for (i = 0; i < n && an->n <= FOLD_MAX; i++) {
        const unsigned char *pat = (const unsigned char *)patterns[i];
        if (lens[i] < 3) {
            an->n = FOLD_MAX + 1;
            break;
        }
        const unsigned char *colon = place == 1 && pat[lens[i] - 1] != ':'
                                         ? memrchr(pat + 1, ':', lens[i] - 2)
                                         : NULL;
        size_t at = colon != NULL ? (size_t)(colon - pat) - 1 : lens[i] - 3;
        unsigned char t[3] = {pat[at] | 0x20, pat[at + 1] | 0x20, pat[at + 2] | 0x20};
        for (k = 0; k < an->n && memcmp((unsigned char[3]){an->v[k][0][0], an->v[k][1][0],
                                                            an->v[k][2][0]},
                                        t, 3) != 0;
             k++)
            ;
        if (k < an->n)
            continue;
        if (an->n < FOLD_MAX)
            for (int b = 0; b < 3; b++)
                memset(an->v[k][b], t[b], 16);
        an->n++;
    }
    if (an->n > FOLD_MAX || an->n == 0) {
        an->n = 0;
        return;
    }
    for (k = an->n; k < FOLD_MAX; k++)
        memcpy(an->v[k], an->v[0], sizeof(an->v[k]));
    /* at most 3 * FOLD_MAX of the 128 values x | 0x20 are taken */
    for (i = 0; i < 256; i++) {
        for (k = 0; k < an->n; k++)
            if (an->v[k][0][0] == (i | 0x20) || an->v[k][1][0] == (i | 0x20) ||
                an->v[k][2][0] == (i | 0x20))
                break;
        if (k == an->n) {
            an->pad = (unsigned char)i;
            break;
        }
    }
}

struct lk_match *
lk_match_new(const char *const *patterns, const size_t *lens, size_t n, char *err, size_t errlen)
{
    return lk_match_new_flags(patterns, lens, NULL, n, err, errlen);
}

struct lk_match *
lk_match_new_flags(const char *const *patterns, const size_t *lens, const unsigned *flags, size_t n,
                   char *err, size_t errlen)
{
    struct lk_match *m;
    size_t total = 0, i, k;
    uint32_t *queue = NULL;

    if (n >= NONE) {
        snprintf(err, errlen, "too many patterns (%zu)", n);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (lens[i] == 0 || lens[i] > LK_MATCH_MAX_LEN) {
            snprintf(err, errlen, "pattern %zu is %zu bytes (1 to %d allowed)", i, lens[i],
                     LK_MATCH_MAX_LEN);
            return NULL;
        }
        total += lens[i];
    }
    if (total + 1 >= NONE) {
        snprintf(err, errlen, "patterns too long (%zu bytes in all)", total);
        return NULL;
    }

    m = lk_xcalloc(1, sizeof(*m));
    m->npatterns = n;
    for (i = 0; flags != NULL && i < n; i++)
        if (flags[i] & LK_MATCH_RAW) {
            if (m->raw == NULL)
                m->raw = lk_xcalloc(n, 1);
            m->raw[i] = 1;
        }
    m->ncls = 1;
    for (i = 0; i < n; i++)
        for (k = 0; k < lens[i]; k++) {
            int c = fold((unsigned char)patterns[i][k]);
            if (m->cls[c] == 0)
                m->cls[c] = (uint8_t)m->ncls++; /* at most 256 distinct bytes, minus class 0 */
        }
    for (i = 'A'; i <= 'Z'; i++)
        m->cls[i] = m->cls[fold((int)i)];

    /* The trie.  While it is built, 0 in delta means "no child": the root
     * is never anyone's child. */
    size_t cap = total + 1;
    m->delta = lk_xcalloc(cap * m->ncls, sizeof(*m->delta));
    m->out = lk_xmalloc(cap * sizeof(*m->out));
    m->dict = lk_xmalloc(cap * sizeof(*m->dict));
    m->depth = lk_xcalloc(cap, sizeof(*m->depth));
    m->out[0] = m->dict[0] = NONE;
    m->nstates = 1;
    for (i = 0; i < n; i++) {
        uint32_t s = 0;
        for (k = 0; k < lens[i]; k++) {
            uint32_t *t = &m->delta[(size_t)s * m->ncls + m->cls[(unsigned char)patterns[i][k]]];
            if (*t == 0) {
                *t = (uint32_t)m->nstates++;
                m->out[*t] = m->dict[*t] = NONE;
                m->depth[*t] = (uint16_t)(k + 1);
            }
            s = *t;
        }
        if (m->out[s] == NONE)
            m->out[s] = (uint32_t)i; /* a repeated pattern keeps the first id */
        if (lens[i] > m->max_len)
            m->max_len = lens[i];
    }

    /* Breadth first: each state's failure state is shallower, so its row is
     * complete by the time it is needed.  A missing transition becomes the
     * failure state's; fail[] lives only here, in the queue's shadow. */
    uint32_t *fail = lk_xcalloc(m->nstates, sizeof(*fail));
    size_t head = 0, tail = 0;
    queue = lk_xmalloc(m->nstates * sizeof(*queue));
    queue[tail++] = 0;
    while (head < tail) {
        uint32_t u = queue[head++];
        uint32_t *row = &m->delta[(size_t)u * m->ncls];
        const uint32_t *frow = &m->delta[(size_t)fail[u] * m->ncls];
        for (k = 0; k < m->ncls; k++) {
            uint32_t v = row[k];
            if (v != 0 && m->depth[v] == m->depth[u] + 1) {
                /* a trie child: its failure state is where u's goes on k */
                uint32_t f = u == 0 ? 0 : frow[k];
                fail[v] = f;
                m->dict[v] = m->out[f] != NONE ? f : m->dict[f];
                queue[tail++] = v;
            } else if (u != 0) {
                row[k] = frow[k];
            }
        }
    }
    free(fail);
    free(queue);
    for (i = 0; i < 256; i++)
        if (m->delta[m->cls[i]] != 0) {
            m->first[i] = 1;
            m->first1 = (unsigned char)i;
            m->nfirst++;
            if (memchr(m->fold, (int)(i | 0x20), m->nfold < FOLD_MAX ? m->nfold : FOLD_MAX) != NULL)
                continue;
            if (m->nfold < FOLD_MAX)
                m->fold[m->nfold] = (unsigned char)(i | 0x20);
            m->nfold++;
        }
    for (i = 0; i < FOLD_MAX; i++)
        memset(m->foldv[i], m->fold[i < m->nfold ? i : 0], sizeof(m->foldv[i]));
    for (i = 0; i < n && m->npair <= FOLD_MAX; i++) {
        if (lens[i] < 2) {
            m->npair = FOLD_MAX + 1;
            break;
        }
        unsigned char a = (unsigned char)patterns[i][0] | 0x20, b = (unsigned char)patterns[i][1] | 0x20;
        for (k = 0; k < m->npair && !(m->pairv[k][0][0] == a && m->pairv[k][1][0] == b); k++)
            ;
        if (k < m->npair)
            continue;
        if (m->npair < FOLD_MAX) {
            memset(m->pairv[k][0], a, 16);
            memset(m->pairv[k][1], b, 16);
        }
        m->npair++;
    }
    for (k = m->npair; k < FOLD_MAX; k++)
        memcpy(m->pairv[k], m->pairv[0], sizeof(m->pairv[k]));
    m->min_len = n != 0 ? LK_MATCH_MAX_LEN : 0;
    for (i = 0; i < n; i++)
        if (lens[i] < m->min_len)
            m->min_len = lens[i];
    anchors_new(&m->anchors[0], 0, patterns, lens, n);
    anchors_new(&m->anchors[1], 1, patterns, lens, n);
    m->anchor_first = m->anchors[1].n != 0 && m->anchors[1].n < m->anchors[0].n;
#ifdef LK_MATCH_AVX2
    m->avx2 = __builtin_cpu_supports("avx2");
#endif
    m->emit = lk_xmalloc(m->nstates * sizeof(*m->emit));
    for (i = 0; i < m->nstates; i++)
        m->emit[i] = m->out[i] != NONE ? (uint32_t)i : m->dict[i];

    /* Give back what the patterns' shared prefixes saved. */
    m->delta = lk_xrealloc(m->delta, m->nstates * m->ncls * sizeof(*m->delta));
    m->out = lk_xrealloc(m->out, m->nstates * sizeof(*m->out));
    m->dict = lk_xrealloc(m->dict, m->nstates * sizeof(*m->dict));
    m->depth = lk_xrealloc(m->depth, m->nstates * sizeof(*m->depth));
    return m;
}

void
lk_match_free(struct lk_match *m)
{
    if (m == NULL)
        return;
    free(m->delta);
    free(m->out);
    free(m->dict);
    free(m->emit);
    free(m->depth);
    free(m->raw);
    free(m);
}

size_t
lk_match_count(const struct lk_match *m)
{
    return m->npatterns;
}

size_t
lk_match_max_len(const struct lk_match *m)
{
    return m->max_len;
}

size_t
lk_match_states(const struct lk_match *m)
{
    return m->nstates;
}

size_t
lk_match_memory(const struct lk_match *m)
{
    return sizeof(*m) + m->nstates * (m->ncls * sizeof(*m->delta) + sizeof(*m->out) +
                                      sizeof(*m->dict) + sizeof(*m->emit) + sizeof(*m->depth));
}

void
lk_match_state_init(struct lk_match_state *st)
{
    memset(st, 0, sizeof(*st));
    st->emit = NONE;
}

size_t
lk_match_pending(const struct lk_match *m, const struct lk_match_state *st)
{
    return m->depth[st->node];
}

/* Records in the history whether each of p[from..to) is a host character;
 * p[0] is at stream offset base. */
static inline void
note(struct lk_match_state *st, const unsigned char *p, uint64_t base, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++) {
        uint64_t o = base + k, bit = UINT64_C(1) << (o & 63);
        if (is_host(p[k]))
            st->hist[(o >> 6) & 7] |= bit;
        else
            st->hist[(o >> 6) & 7] &= ~bit;
    }
}

/* Whether the byte before a match of length len ending at st->pos allows
 * it: the start of the stream, or not a host character.  That byte is read
 * in the piece p (at stream offset base) when it is there, else in the
 * history. */
static int
starts_clean(const struct lk_match_state *st, size_t len, const unsigned char *p, uint64_t base)
{
    uint64_t start = st->pos - len;

    if (start == 0)
        return 1;
    start--;
    if (p != NULL && start >= base)
        return !is_host(p[start - base]);
    return (st->hist[(start >> 6) & 7] & (UINT64_C(1) << (start & 63))) == 0;
}

/* Reports the next output waiting at st->pos, whose following byte (or
 * the end) has been seen: a raw pattern's always, a text one's when that
 * byte is not a digit (digit_after) and the byte before it allows it, or
 * always when allraw (lk_match_scan_raw).  0 when there is none left. */
static inline int
emit_next(const struct lk_match *m, struct lk_match_state *st, int digit_after,
          const unsigned char *p, uint64_t base, struct lk_match_hit *hit, int allraw)
{
    while (st->emit != NONE) {
        uint32_t s = st->emit;
        st->emit = m->dict[s];
        if (allraw || (m->raw != NULL && m->raw[m->out[s]]) ||
            (!digit_after && starts_clean(st, m->depth[s], p, base))) {
            hit->id = m->out[s];
            hit->len = m->depth[s];
            hit->end = st->pos;
            return 1;
        }
    }
    return 0;
}

/*
 * From the root at p[j], a byte that can start a pattern: steps the
 * automaton while the bytes follow some pattern's first bytes, for up to
 * WALK bytes, to the end of the piece, or to a state with an output, and
 * returns how many it took (*node: the state after them).  0 when they
 * left every pattern's path first: no pattern starts at j, so the root can
 * look on from j + 1 (no state the walk went through has an output, and
 * once off the paths the automaton is where the root would take it from
 * there).  Bounded, so that no byte is looked at more than WALK + 1 times.
 */
#define WALK 16
static inline size_t
walk(const struct lk_match *m, const unsigned char *p, size_t j, size_t len, uint32_t *node)
{
    uint32_t s = 0;
    size_t k = 0;

    while (k < WALK && j + k < len) {
        s = m->delta[(size_t)s * m->ncls + m->cls[p[j + k]]];
        if (m->depth[s] != ++k)
            return 0; /* off every path: no pattern starts at j */
        if (m->emit[s] != NONE)
            break;
    }
    *node = s;
    return k;
}

#ifdef __SSE2__
static inline __m128i
load16(const unsigned char *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

/*
 * skip_root's jumps, 16 bytes at a time, n values compared at once (4 or
 * 8, the spare values repeating the first; inlined where n is a constant,
 * so that the loops unroll and the values stay in registers).  A block at the end of the piece starts 16 (or 17)
 * bytes before it, its bits before i shifted out.  0x20 is or-ed into
 * every byte, which makes a few other bytes look like those that start a
 * pattern: walk tells them apart.
 *
 * By pairs: the bytes at which, with the byte after, one of the pairs of
 * m->pairv begins; the piece's last byte, whose pair it does not hold, on
 * its own.  The piece is 17 bytes or more.
 */
static inline __attribute__((always_inline)) unsigned
pairs16(const unsigned char *p, const __m128i *pa, const __m128i *pb, int n)
{
    const __m128i lower = _mm_set1_epi8(0x20);
    __m128i a = _mm_or_si128(load16(p), lower), b = _mm_or_si128(load16(p + 1), lower);
    __m128i eq = _mm_and_si128(_mm_cmpeq_epi8(a, pa[0]), _mm_cmpeq_epi8(b, pb[0]));

#pragma GCC unroll 8
    for (int v = 1; v < n; v++)
        eq = _mm_or_si128(eq, _mm_and_si128(_mm_cmpeq_epi8(a, pa[v]), _mm_cmpeq_epi8(b, pb[v])));
    return (unsigned)_mm_movemask_epi8(eq);
}

static inline __attribute__((always_inline)) size_t
skip_pairs(const struct lk_match *m, const unsigned char *p, size_t i, size_t len, uint32_t *node,
           int n)
{
    __m128i pa[FOLD_MAX], pb[FOLD_MAX];
    size_t from = i, k;

#pragma GCC unroll 8
    for (int v = 0; v < n; v++) {
        pa[v] = load16(m->pairv[v][0]);
        pb[v] = load16(m->pairv[v][1]);
    }
    for (; i + 1 < len; i += 16) {
        unsigned mask;
        if (i + 17 <= len) {
            mask = pairs16(p + i, pa, pb, n);
        } else {
            size_t at = len - 17;
            mask = pairs16(p + at, pa, pb, n) >> (i - at);
        }
        for (; mask != 0; mask &= mask - 1) {
            size_t j = i + (size_t)__builtin_ctz(mask);
            if ((k = walk(m, p, j, len, node)) != 0)
                return j + k;
        }
    }
    i = len - 1;
    if (i >= from && m->first[p[i]] && (k = walk(m, p, i, len, node)) != 0)
        return i + k;
    return len;
}

/* By the bytes that start a pattern (m->foldv), checked in the table.  The
 * piece is 16 bytes or more. */
static inline __attribute__((always_inline)) size_t
skip_firsts(const struct lk_match *m, const unsigned char *p, size_t i, size_t len, uint32_t *node,
            int n)
{
    const __m128i lower = _mm_set1_epi8(0x20);
    __m128i f[FOLD_MAX];
    size_t k;

#pragma GCC unroll 8
    for (int v = 0; v < n; v++)
        f[v] = load16(m->foldv[v]);
    for (; i < len; i += 16) {
        size_t at = i + 16 <= len ? i : len - 16;
        __m128i a = _mm_or_si128(load16(p + at), lower);
        __m128i eq = _mm_cmpeq_epi8(a, f[0]);
#pragma GCC unroll 8
        for (int v = 1; v < n; v++)
            eq = _mm_or_si128(eq, _mm_cmpeq_epi8(a, f[v]));
        for (unsigned mask = (unsigned)_mm_movemask_epi8(eq) >> (i - at); mask != 0; mask &= mask - 1) {
            size_t j = i + (size_t)__builtin_ctz(mask);
            if (m->first[p[j]] && (k = walk(m, p, j, len, node)) != 0)
                return j + k;
        }
    }
    return len;
}
#endif

/*
 * From the root at p[i]: jumps to the first byte where a pattern may start
 * and walks from there (walk), returning where the walk stopped, with the
 * state there in *node; or len, *node left at the root.  From the root,
 * every other byte leads back to the root.  The bytes where a pattern may
 * start are found, with SSE2, 16 at a time: in a piece of 17 bytes or
 * more, by the pairs of bytes that start the patterns, when there are at
 * most FOLD_MAX; else by the bytes that start them, with memchr when there
 * is one, else 16 at a time in a piece of 16 bytes or more when there are
 * at most FOLD_MAX (0x20 or-ed in); else by a table, four bytes at a time.
 */
static size_t
skip_root(const struct lk_match *m, const unsigned char *p, size_t i, size_t len, uint32_t *node)
{
    const uint8_t *first = m->first;
    size_t k;

    if (m->nfirst == 0)
        return len; /* no pattern */
#ifdef __SSE2__
    if (m->npair <= FOLD_MAX && len >= 17)
        return m->npair <= 4 ? skip_pairs(m, p, i, len, node, 4)
                             : skip_pairs(m, p, i, len, node, FOLD_MAX);
#endif
    if (m->nfirst == 1) {
        const unsigned char *q;
        while ((q = memchr(p + i, m->first1, len - i)) != NULL) {
            i = (size_t)(q - p);
            if ((k = walk(m, p, i, len, node)) != 0)
                return i + k;
            i++;
        }
        return len;
    }
#ifdef __SSE2__
    if (m->nfold <= FOLD_MAX && len >= 16)
        return m->nfold <= 4 ? skip_firsts(m, p, i, len, node, 4)
                             : skip_firsts(m, p, i, len, node, FOLD_MAX);
#endif
    for (;; i++) {
        while (i + 4 <= len && (first[p[i]] | first[p[i + 1]] | first[p[i + 2]] | first[p[i + 3]]) == 0)
            i += 4;
        while (i < len && !first[p[i]])
            i++;
        if (i == len)
            return len;
        if ((k = walk(m, p, i, len, node)) != 0)
            return i + k;
    }
}

/*
 * Whether no triple of an (struct anchors) is in p[0..len): then no
 * pattern is either.  The triples that start at each of 16 bytes, found as
 * skip_pairs finds pairs, 32 bytes a turn, with the number of triples (1
 * to 4, or 8 with the spares repeating the first) a constant; a piece under 18
 * bytes is read from a copy padded with a byte of no triple.
 */
/* f(an, p, len, n) with n a constant: an->n, 1 to 4, or else FOLD_MAX
 * (the spare triples repeat the first). */
#define BY_N(f, an, p, len)                                                                        \
    ((an)->n == 1   ? f(an, p, len, 1)                                                             \
     : (an)->n == 2 ? f(an, p, len, 2)                                                             \
     : (an)->n == 3 ? f(an, p, len, 3)                                                             \
     : (an)->n == 4 ? f(an, p, len, 4)                                                             \
                    : f(an, p, len, FOLD_MAX))

#ifdef __SSE2__
static inline __attribute__((always_inline)) unsigned
triples16(const unsigned char *p, const __m128i (*t)[3], int n)
{
    const __m128i lower = _mm_set1_epi8(0x20);
    __m128i a = _mm_or_si128(load16(p), lower), b = _mm_or_si128(load16(p + 1), lower),
            c = _mm_or_si128(load16(p + 2), lower);
    __m128i eq = _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(a, t[0][0]), _mm_cmpeq_epi8(b, t[0][1])),
                               _mm_cmpeq_epi8(c, t[0][2]));

#pragma GCC unroll 8
    for (int v = 1; v < n; v++)
        eq = _mm_or_si128(eq, _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(a, t[v][0]),
                                                          _mm_cmpeq_epi8(b, t[v][1])),
                                            _mm_cmpeq_epi8(c, t[v][2])));
    return (unsigned)_mm_movemask_epi8(eq);
}

static inline __attribute__((always_inline)) int
triples_none_n(const struct anchors *an, const unsigned char *p, size_t len, int n)
{
    __m128i t[FOLD_MAX][3];
    size_t i = 0;

#pragma GCC unroll 8
    for (int v = 0; v < n; v++)
        for (int b = 0; b < 3; b++)
            t[v][b] = load16(an->v[v][b]);
    for (; i + 34 <= len; i += 32)
        if ((triples16(p + i, t, n) | triples16(p + i + 16, t, n)) != 0)
            return 0;
    for (; i + 18 <= len; i += 16)
        if (triples16(p + i, t, n) != 0)
            return 0;
    /* the triples left start at i to len - 3: the last 18 bytes', those
     * before i shifted out */
    return i + 2 >= len || triples16(p + len - 18, t, n) >> (i - (len - 18)) == 0;
}
#endif

#ifdef LK_MATCH_AVX2
/* triples16 over 32 places. */
static inline __attribute__((always_inline, target("avx2"))) unsigned
triples32(const unsigned char *p, const __m256i (*t)[3], int n)
{
    const __m256i lower = _mm256_set1_epi8(0x20);
    __m256i a = _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)p), lower);
    __m256i b = _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + 1)), lower);
    __m256i c = _mm256_or_si256(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2)), lower);
    __m256i eq = _mm256_and_si256(
        _mm256_and_si256(_mm256_cmpeq_epi8(a, t[0][0]), _mm256_cmpeq_epi8(b, t[0][1])),
        _mm256_cmpeq_epi8(c, t[0][2]));

#pragma GCC unroll 8
    for (int v = 1; v < n; v++)
        eq = _mm256_or_si256(eq, _mm256_and_si256(_mm256_and_si256(_mm256_cmpeq_epi8(a, t[v][0]),
                                                                   _mm256_cmpeq_epi8(b, t[v][1])),
                                                  _mm256_cmpeq_epi8(c, t[v][2])));
    return (unsigned)_mm256_movemask_epi8(eq);
}

/* triples_none_n, 32 places a turn; len is 34 or more. */
static inline __attribute__((always_inline, target("avx2"))) int
triples_none_avx2_n(const struct anchors *an, const unsigned char *p, size_t len, int n)
{
    __m256i t[FOLD_MAX][3];
    size_t i = 0;

#pragma GCC unroll 8
    for (int v = 0; v < n; v++)
        for (int b = 0; b < 3; b++)
            t[v][b] = _mm256_set1_epi8((char)an->v[v][b][0]);
    for (; i + 34 <= len; i += 32)
        if (triples32(p + i, t, n) != 0)
            return 0;
    return i + 2 >= len || triples32(p + len - 34, t, n) >> (i - (len - 34)) == 0;
}

static __attribute__((target("avx2"))) int
triples_none_avx2(const struct anchors *an, const unsigned char *p, size_t len)
{
    return BY_N(triples_none_avx2_n, an, p, len);
}
#endif

static int
triples_none(const struct lk_match *m, const struct anchors *an, const unsigned char *p, size_t len)
{
#ifdef LK_MATCH_AVX2
    if (m->avx2 && len >= 34)
        return triples_none_avx2(an, p, len);
#endif
#ifdef __SSE2__
    unsigned char pad[32];

    if (len < 18) {
        __m128i v = _mm_set1_epi8((char)an->pad);
        _mm_storeu_si128((__m128i *)(void *)pad, v);
        _mm_storeu_si128((__m128i *)(void *)(pad + 16), v);
        lk_copy_short((char *)pad, (const char *)p, len);
        p = pad;
        len = 18;
    }
    return BY_N(triples_none_n, an, p, len);
#else
    for (size_t i = 0; i + 2 < len; i++)
        for (size_t k = 0; k < an->n; k++)
            if ((p[i] | 0x20) == an->v[k][0][0] && (p[i + 1] | 0x20) == an->v[k][1][0] &&
                (p[i + 2] | 0x20) == an->v[k][2][0])
                return 0;
    return 1;
#endif
}

/*
 * The scan of lk_match_scan.  The automaton steps from the root only at a
 * byte that can start a pattern (skip_root), and keeps no per-byte history:
 * the byte before a match is read in the piece, and when the piece ends,
 * the history gets the bytes a match reported later may still need (the
 * state's string and the byte before it).  prefilter 0 is the reference,
 * lk_match_scan_plain: the automaton stepped on every byte, each noted in
 * the history, the byte before a match read there.
 */
static inline int
scan(const struct lk_match *m, struct lk_match_state *st, const unsigned char *p, size_t len,
     size_t *off, struct lk_match_hit *hit, int prefilter, int allraw)
{
    const size_t ncls = m->ncls;
    const uint32_t *delta = m->delta, *emit = m->emit;
    const uint8_t *cls = m->cls;
    size_t i = *off;
    const uint64_t base = st->pos - i; /* the stream offset of p[0] */
    uint32_t node = st->node;
    int found = 0;

    while (i < len) {
        if (prefilter && node == 0 && st->emit == NONE) {
            i = skip_root(m, p, i, len, &node);
            st->emit = emit[node];
            continue;
        }
        unsigned c = p[i];
        /* The byte after a match decides it: a digit means a longer port
         * ("10.0.0.1:80" inside "10.0.0.1:8080"). */
        if (st->emit != NONE) {
            int digit = c >= '0' && c <= '9';
            st->pos = base + i;
            if (digit && m->raw == NULL && !allraw)
                st->emit = NONE; /* no raw pattern: a digit ends them all */
            else if (emit_next(m, st, digit, prefilter ? p : NULL, base, hit, allraw)) {
                found = 1;
                break;
            }
        }
        if (!prefilter)
            note(st, p, base, i, i + 1);
        node = delta[(size_t)node * ncls + cls[c]];
        i++;
        st->emit = emit[node]; /* emit_next has left it NONE */
    }
    st->node = node;
    st->pos = base + i;
    *off = i;
    if (prefilter) {
        size_t need = (size_t)m->depth[node] + 1;
        note(st, p, base, i > need ? i - need : 0, i);
    }
    return found;
}

int
lk_match_scan(const struct lk_match *m, struct lk_match_state *st, const void *data, size_t len,
              size_t *off, struct lk_match_hit *hit)
{
    return scan(m, st, data, len, off, hit, 1, 0);
}

int
lk_match_scan_plain(const struct lk_match *m, struct lk_match_state *st, const void *data,
                    size_t len, size_t *off, struct lk_match_hit *hit)
{
    return scan(m, st, data, len, off, hit, 0, 0);
}

int
lk_match_scan_raw(const struct lk_match *m, struct lk_match_state *st, const void *data,
                  size_t len, size_t *off, struct lk_match_hit *hit)
{
    return scan(m, st, data, len, off, hit, 1, 1);
}

int
lk_match_none(const struct lk_match *m, const void *data, size_t len)
{
    uint32_t node = 0;

    if (len < m->min_len)
        return 1;
    for (int k = m->anchor_first, i = 0; i < 2; i++, k ^= 1)
        if (m->anchors[k].n != 0 && triples_none(m, &m->anchors[k], data, len))
            return 1;
    return skip_root(m, data, 0, len, &node) == len && node == 0;
}

int
lk_match_finish(const struct lk_match *m, struct lk_match_state *st, struct lk_match_hit *hit)
{
    return emit_next(m, st, 0, NULL, 0, hit, 0);
}

int
lk_match_finish_raw(const struct lk_match *m, struct lk_match_state *st, struct lk_match_hit *hit)
{
    return emit_next(m, st, 0, NULL, 0, hit, 1);
}
