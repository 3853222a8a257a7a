/*
 * Pointer+length strings (h2o_iovec_t, HAProxy ist, ngx_str_t).  An lk_str
 * never owns its bytes: they belong to a pool, the config or a static.
 */
#ifndef LK_STR_H
#define LK_STR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

struct lk_str {
    const char *p;
    size_t len;
};

#define LK_STRLIT(s) ((struct lk_str){(s), sizeof(s) - 1})
#define LK_STR_NULL ((struct lk_str){NULL, 0})

static inline uint64_t
lk_load8(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t
lk_load4(const char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/*
 * Whether a equals b, a word (or byte) of a known name or literal (letters,
 * digits, '-', '/', '+', '.'), ASCII case-insensitively: the 0x20 bit is
 * ignored where b has a letter (bit 0x40 set) and every bit compared
 * elsewhere, so that only a letter's two cases match it and '-' matches
 * only itself.
 */
static inline int
lk_fold_eq_word(uint64_t a, uint64_t b)
{
    uint64_t fold = (b & 0x4040404040404040u) >> 1;
    return (a | fold) == (b | fold);
}

/* Whether x equals y, a known name or literal of len bytes (as for
 * lk_fold_eq_word), a word at a time. */
static inline int
lk_fold_eq(const char *x, const char *y, size_t len)
{
    if (len >= 8) {
        for (size_t i = 0; i + 8 < len; i += 8)
            if (!lk_fold_eq_word(lk_load8(x + i), lk_load8(y + i)))
                return 0;
        return lk_fold_eq_word(lk_load8(x + len - 8), lk_load8(y + len - 8)); /* overlaps */
    }
    if (len >= 4)
        return lk_fold_eq_word(lk_load4(x), lk_load4(y)) &&
               lk_fold_eq_word(lk_load4(x + len - 4), lk_load4(y + len - 4));
    for (size_t i = 0; i < len; i++)
        if (!lk_fold_eq_word((unsigned char)x[i], (unsigned char)y[i]))
            return 0;
    return 1;
}

/* v in decimal at buf, without a terminator (at most 20 bytes): its
 * length.  The digits are counted first and written in place, last to
 * first: no copy. */
static inline size_t
lk_fmt_dec(char *buf, unsigned long long v)
{
    static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                                   "25262728293031323334353637383940414243444546474849"
                                   "50515253545556575859606162636465666768697071727374"
                                   "75767778798081828384858687888990919293949596979899";
    /* most numbers written are under 10,000: counted by compares */
    size_t n = v < 100 ? 1 + (v >= 10) : v < 10000 ? 3 + (v >= 1000) : 4;

    if (n == 4 && v >= 10000)
        for (unsigned long long t = v / 10000; t != 0; t /= 10)
            n++;
    char *p = buf + n;
    while (v >= 100) { /* two digits at a time */
        unsigned k = (unsigned)(v % 100) * 2;
        v /= 100;
        p -= 2;
        p[0] = pairs[k];
        p[1] = pairs[k + 1];
    }
    if (v >= 10) {
        p[-2] = pairs[v * 2];
        p[-1] = pairs[v * 2 + 1];
    } else {
        p[-1] = (char)('0' + v);
    }
    return n;
}

/* memcpy(d, s, n) for n of at most 32, by two overlapping moves of 16, 8
 * or 4 bytes rather than a call. */
static inline void
lk_copy_short(char *d, const char *s, size_t n)
{
    if (n >= 16) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

static inline struct lk_str
lk_str_c(const char *s)
{
    return (struct lk_str){s, s != NULL ? strlen(s) : 0};
}

static inline struct lk_str
lk_str_make(const char *p, size_t len)
{
    return (struct lk_str){p, len};
}

static inline int
lk_str_eq(struct lk_str a, struct lk_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

/* ASCII case-insensitive equality, for header names and host names. */
static inline int
lk_str_eqi(struct lk_str a, struct lk_str b)
{
    return a.len == b.len && (a.len == 0 || strncasecmp(a.p, b.p, a.len) == 0);
}

static inline int
lk_str_has_prefix(struct lk_str s, struct lk_str prefix)
{
    return s.len >= prefix.len && memcmp(s.p, prefix.p, prefix.len) == 0;
}

/* ASCII case-insensitive suffix test. */
static inline int
lk_str_has_suffix_i(struct lk_str s, struct lk_str suffix)
{
    return s.len >= suffix.len &&
           (suffix.len == 0 || strncasecmp(s.p + s.len - suffix.len, suffix.p, suffix.len) == 0);
}

static inline struct lk_str
lk_str_skip(struct lk_str s, size_t n)
{
    return n >= s.len ? lk_str_make(s.p + s.len, 0) : lk_str_make(s.p + n, s.len - n);
}

/* Trims optional whitespace (SP, HTAB) from both ends. */
static inline struct lk_str
lk_str_trim(struct lk_str s)
{
    while (s.len > 0 && (s.p[0] == ' ' || s.p[0] == '\t'))
        s.p++, s.len--;
    while (s.len > 0 && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t'))
        s.len--;
    return s;
}

#endif
