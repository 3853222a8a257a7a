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

#include "lk_match.h"
#include "lk_pool.h"

#define NONE UINT32_MAX

struct lk_match {
    uint8_t cls[256]; /* byte -> class */
    size_t ncls;      /* classes, including class 0 for "any other byte" */
    size_t nstates;
    size_t npatterns;
    size_t max_len;
    uint32_t *delta; /* nstates x ncls: the next state; state 0 is the root */
    uint32_t *out;   /* pattern ending exactly at the state, or NONE */
    uint32_t *dict;  /* the nearest proper suffix state with an output, or NONE */
    uint16_t *depth; /* length of the string the state stands for */
    uint8_t *raw;    /* by pattern id: LK_MATCH_RAW (no boundary rule); NULL: none is */
    uint8_t first[256]; /* byte -> 1 if it leaves the root (can start a pattern) */
    size_t nfirst;      /* how many bytes do (both cases of a letter count) */
    unsigned char first1; /* the byte, when nfirst is 1 */
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
        }

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
                                      sizeof(*m->dict) + sizeof(*m->depth));
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

/* The first state on s's output chain (s itself, then its dictionary
 * suffixes), or NONE. */
static uint32_t
first_output(const struct lk_match *m, uint32_t s)
{
    return m->out[s] != NONE ? s : m->dict[s];
}

/* Whether the byte before a match of length len ending at st->pos allows
 * it: the start of the stream, or not a host character. */
static int
starts_clean(const struct lk_match_state *st, size_t len)
{
    uint64_t start = st->pos - len;

    if (start == 0)
        return 1;
    start--;
    return (st->hist[(start >> 6) & 7] & (UINT64_C(1) << (start & 63))) == 0;
}

/* Reports the next output waiting at st->pos, whose following byte (or
 * the end) has been seen: a raw pattern's always, a text one's when that
 * byte is not a digit (digit_after) and the byte before it allows it.  0
 * when there is none left. */
static int
emit_next(const struct lk_match *m, struct lk_match_state *st, int digit_after,
          struct lk_match_hit *hit)
{
    while (st->emit != NONE) {
        uint32_t s = st->emit;
        st->emit = m->dict[s];
        if ((m->raw != NULL && m->raw[m->out[s]]) ||
            (!digit_after && starts_clean(st, m->depth[s]))) {
            hit->id = m->out[s];
            hit->len = m->depth[s];
            hit->end = st->pos;
            return 1;
        }
    }
    return 0;
}

/* The first byte at or after p[i] that can start a pattern, or len: from
 * the root every other byte leads back to the root, so the automaton can
 * jump there.  memchr when one byte can, else the table four at a time. */
static size_t
skip_root(const struct lk_match *m, const unsigned char *p, size_t i, size_t len)
{
    if (m->nfirst == 1) {
        const unsigned char *q = memchr(p + i, m->first1, len - i);
        return q != NULL ? (size_t)(q - p) : len;
    }
    const uint8_t *first = m->first;
    while (i + 4 <= len && (first[p[i]] | first[p[i + 1]] | first[p[i + 2]] | first[p[i + 3]]) == 0)
        i += 4;
    while (i < len && !first[p[i]])
        i++;
    return i;
}

/* The scan of lk_match_scan; prefilter 0 steps the automaton on every
 * byte (the reference, lk_match_scan_plain). */
static inline int
scan(const struct lk_match *m, struct lk_match_state *st, const unsigned char *p, size_t len,
     size_t *off, struct lk_match_hit *hit, int prefilter)
{
    const size_t ncls = m->ncls;
    size_t i = *off;
    uint32_t node = st->node;
    uint64_t pos = st->pos;

    while (i < len) {
        if (prefilter && node == 0 && st->emit == NONE) {
            /* No match is in progress, so one found later starts at the
             * byte skipped to or after it: only the history bit of the
             * byte just before that is ever read. */
            size_t j = skip_root(m, p, i, len);
            if (j != i) {
                uint64_t last = pos + (j - 1 - i);
                uint64_t bit = UINT64_C(1) << (last & 63);
                if (is_host(p[j - 1]))
                    st->hist[(last >> 6) & 7] |= bit;
                else
                    st->hist[(last >> 6) & 7] &= ~bit;
                pos += j - i;
                st->pos = pos;
                i = j;
                if (i == len)
                    break;
            }
        }
        unsigned c = p[i];
        /* The byte after a match decides it: a digit means a longer port
         * ("10.0.0.1:80" inside "10.0.0.1:8080"). */
        if (st->emit != NONE) {
            int digit = c >= '0' && c <= '9';
            if (digit && m->raw == NULL)
                st->emit = NONE; /* no raw pattern: a digit ends them all */
            else if (emit_next(m, st, digit, hit)) {
                *off = i;
                return 1;
            }
        }
        uint64_t bit = UINT64_C(1) << (pos & 63);
        if (is_host(c))
            st->hist[(pos >> 6) & 7] |= bit;
        else
            st->hist[(pos >> 6) & 7] &= ~bit;
        node = m->delta[(size_t)node * ncls + m->cls[c]];
        st->node = node;
        st->pos = ++pos;
        i++;
        if (m->out[node] != NONE || m->dict[node] != NONE)
            st->emit = first_output(m, node);
    }
    *off = i;
    return 0;
}

int
lk_match_scan(const struct lk_match *m, struct lk_match_state *st, const void *data, size_t len,
              size_t *off, struct lk_match_hit *hit)
{
    return scan(m, st, data, len, off, hit, 1);
}

int
lk_match_scan_plain(const struct lk_match *m, struct lk_match_state *st, const void *data,
                    size_t len, size_t *off, struct lk_match_hit *hit)
{
    return scan(m, st, data, len, off, hit, 0);
}

int
lk_match_finish(const struct lk_match *m, struct lk_match_state *st, struct lk_match_hit *hit)
{
    return emit_next(m, st, 0, hit);
}
