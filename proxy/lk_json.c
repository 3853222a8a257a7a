/*
 * The JSON scanner of lk_json.h: a validating pass that keeps no tree, only
 * a bit a level (object or array) and the spans of the top-level members.
 * Its verdict is jansson's (load.c and utf.c of 2.14, flags 0) on every
 * input without a NUL byte; tests/unit/test_lk_json.c and fuzz_lookup.c
 * hold the two side by side.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "lk_json.h"

#define IS_WS(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')

static const unsigned char *
skip_ws(const unsigned char *p, const unsigned char *end)
{
    while (p < end && IS_WS(*p))
        p++;
    return p;
}

static int
hex4(const unsigned char *p)
{
    int v = 0;

    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        if (IS_DIGIT(c))
            v = v * 16 + (c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v * 16 + (c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v = v * 16 + (c - 'A' + 10);
        else
            return -1;
    }
    return v;
}

/* The escape after a backslash at p: one past it, or NULL.  \u0000 is
 * refused (jansson without JSON_ALLOW_NUL), and so is a surrogate that is
 * not a high one followed at once by an escaped low one. */
static const unsigned char *
scan_escape(const unsigned char *p, const unsigned char *end)
{
    int u;

    if (p == end)
        return NULL;
    switch (*p) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return p + 1;
    case 'u':
        break;
    default:
        return NULL;
    }
    if (end - p < 5 || (u = hex4(p + 1)) < 0)
        return NULL;
    p += 5;
    if (u == 0 || (u >= 0xDC00 && u <= 0xDFFF))
        return NULL;
    if (u >= 0xD800 && u <= 0xDBFF) {
        if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
            return NULL;
        u = hex4(p + 2);
        if (u < 0xDC00 || u > 0xDFFF)
            return NULL;
        p += 6;
    }
    return p;
}

/* A UTF-8 sequence of two to four bytes at p (RFC 3629 §4: no overlong
 * forms, no surrogates, nothing over U+10FFFF): one past it, or NULL. */
static const unsigned char *
scan_utf8(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = *p, lo = 0x80, hi = 0xBF;
    ptrdiff_t n;

    if (c < 0xC2)
        return NULL;
    else if (c < 0xE0)
        n = 1;
    else if (c < 0xF0) {
        n = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c < 0xF5) {
        n = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return NULL;
    if (end - p <= n || p[1] < lo || p[1] > hi)
        return NULL;
    for (ptrdiff_t i = 2; i <= n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return NULL;
    return p + n + 1;
}

/* 1: a byte that stands for itself in a string (printable ASCII and DEL
 * but '"' and '\\'); the rest is a quote, an escape, a control character or
 * the start of a UTF-8 sequence. */
static const unsigned char str_plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The first byte at or after p that str_plain does not pass, or end.
 * With SSE2, 16 bytes at a time: a byte is not plain if it is '"' or
 * '\\', or below 0x20 or from 0x80 up, which are the bytes a signed
 * compare puts below 0x20; the table finishes what is under 16 bytes. */
static inline const unsigned char *
skip_plain(const unsigned char *p, const unsigned char *end)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                    _mm_cmplt_epi8(v, space));
        unsigned mask = (unsigned)_mm_movemask_epi8(stop);
        if (mask != 0)
            return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (p < end && str_plain[*p])
        p++;
    return p;
}

/* A string whose opening quote is at p[-1]: one past its closing quote, or
 * NULL.  *esc is set when it holds an escape. */
static const unsigned char *
scan_string(const unsigned char *p, const unsigned char *end, int *esc)
{
    for (;;) {
        /* printable ASCII but the quote and the backslash: the common case */
        p = skip_plain(p, end);
        if (p == end)
            return NULL;
        if (*p == '"')
            return p + 1;
        if (*p == '\\') {
            *esc = 1;
            p = scan_escape(p + 1, end);
        } else if (*p < 0x20) {
            return NULL; /* a control character, NUL among them */
        } else {
            p = scan_utf8(p, end);
        }
        if (p == NULL)
            return NULL;
    }
}

/* Whether the real number s[0..n) overflows a double, which jansson
 * refuses ("real number overflow"): 1, 0, or -1 out of memory.  strtod
 * decides, as in jansson, on a NUL-terminated copy. */
static int
real_overflows(const unsigned char *s, size_t n)
{
    char buf[64], *t = buf;
    double d;

    if (n >= sizeof(buf) && (t = malloc(n + 1)) == NULL)
        return -1;
    memcpy(t, s, n);
    t[n] = '\0';
    errno = 0;
    d = strtod(t, NULL);
    int over = (d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE;
    if (t != buf)
        free(t);
    return over;
}

/* One or more digits at p: one past them, or NULL. */
static const unsigned char *
digit_run(const unsigned char *p, const unsigned char *end)
{
    if (p == end || !IS_DIGIT(*p))
        return NULL;
    while (++p < end && IS_DIGIT(*p))
        ;
    return p;
}

/* A number at p (RFC 8259 §6): one past it, or NULL.  An integer (no
 * fraction, no exponent) must fit jansson's json_int_t, a long long here
 * (JSON_INTEGER_IS_LONG_LONG), and a real must not overflow.  *oom is set
 * when memory ran out. */
static const unsigned char *
scan_number(const unsigned char *p, const unsigned char *end, int *oom)
{
    const unsigned char *start = p, *digits;
    int real = 0;

    if (*p == '-')
        p++;
    digits = p;
    if (p < end && *p == '0')
        p++; /* a digit after it is refused by whoever reads the next token */
    else if ((p = digit_run(p, end)) == NULL)
        return NULL;
    if (p < end && *p == '.') {
        if ((p = digit_run(p + 1, end)) == NULL)
            return NULL;
        real = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if ((p = digit_run(p, end)) == NULL)
            return NULL;
        real = 1;
    }
    if (!real) {
        /* no leading zeros: the digit count and one comparison decide */
        size_t n = (size_t)(p - digits);
        const char *max = start != digits ? "9223372036854775808" : "9223372036854775807";
        if (n > 19 || (n == 19 && memcmp(digits, max, 19) > 0))
            return NULL;
        return p;
    }
    int over = real_overflows(start, (size_t)(p - start));
    if (over != 0) {
        *oom = over < 0;
        return NULL;
    }
    return p;
}

/* true, false or null at p: one past it, or NULL.  jansson reads a whole
 * run of letters as the token, so "truex" is refused. */
static const unsigned char *
scan_literal(const unsigned char *p, const unsigned char *end)
{
    static const char *const words[] = {"true", "false", "null"};
    const char *w = words[*p == 't' ? 0 : *p == 'f' ? 1 : 2];
    size_t n = strlen(w);

    if ((size_t)(end - p) < n || memcmp(p, w, n) != 0)
        return NULL;
    p += n;
    if (p < end && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
        return NULL;
    return p;
}

int
lk_json_scan(const char *text, size_t len, lk_json_member_cb cb, void *arg)
{
    const unsigned char *s = (const unsigned char *)text, *p = s, *end = s + len;
    /* bit d: the container at depth d + 1 is an object */
    unsigned char objects[LK_JSON_MAX_DEPTH / 8];
    size_t depth = 0; /* containers open */
    struct lk_json_member m;
    int esc, oom = 0;

    p = skip_ws(p, end);
    if (p == end || (*p != '{' && *p != '['))
        goto fail; /* jansson's flags 0: no JSON_DECODE_ANY */
    memset(&m, 0, sizeof(m));

value: /* p is at the first byte of a value */
    /* jansson counts every value, scalars too: this one is at depth + 1 */
    if (depth >= LK_JSON_MAX_DEPTH)
        goto fail;
    switch (*p) {
    case '{':
    case '[': {
        int obj = *p == '{';
        if (obj)
            objects[depth / 8] |= (unsigned char)(1u << (depth % 8));
        else
            objects[depth / 8] &= (unsigned char)~(1u << (depth % 8));
        depth++;
        p = skip_ws(p + 1, end);
        if (p == end)
            goto fail;
        if (*p == (obj ? '}' : ']')) {
            p++;
            depth--;
            goto after;
        }
        if (obj)
            goto key;
        goto value;
    }
    case '"':
        esc = 0;
        p = scan_string(p + 1, end, &esc);
        if (depth == 1)
            m.value_esc = esc != 0;
        break;
    case 't':
    case 'f':
    case 'n':
        p = scan_literal(p, end);
        break;
    default:
        if (*p != '-' && !IS_DIGIT(*p))
            goto fail;
        p = scan_number(p, end, &oom);
        break;
    }
    if (p == NULL)
        goto fail;

after: /* a value ended at p */
    if (depth == 0) {
        if (skip_ws(p, end) != end)
            goto fail; /* no JSON_DISABLE_EOF_CHECK: only whitespace may follow */
        return LK_JSON_VALID;
    }
    int in_object = objects[(depth - 1) / 8] >> ((depth - 1) % 8) & 1;
    if (depth == 1 && in_object && cb != NULL) {
        m.end = (size_t)(p - s);
        m.value_str = s[m.value] == '"';
        cb(&m, arg);
    }
    p = skip_ws(p, end);
    if (p == end)
        goto fail;
    if (*p == ',') {
        p = skip_ws(p + 1, end);
        if (p == end)
            goto fail;
        if (in_object)
            goto key;
        goto value;
    }
    if (*p != (in_object ? '}' : ']'))
        goto fail;
    p++;
    depth--;
    goto after;

key: /* p is at the first byte of an object member */
    if (*p != '"')
        goto fail;
    const unsigned char *key = p;
    esc = 0;
    p = scan_string(p + 1, end, &esc);
    if (p == NULL)
        goto fail;
    if (depth == 1) {
        m.key = (size_t)(key - s);
        m.key_len = (size_t)(p - key) - 2;
        m.key_esc = esc != 0;
        m.value_esc = 0;
    }
    p = skip_ws(p, end);
    if (p == end || *p != ':')
        goto fail;
    p = skip_ws(p + 1, end);
    if (p == end)
        goto fail;
    if (depth == 1)
        m.value = (size_t)(p - s);
    goto value;

fail:
    /* Valid JSON has no NUL byte, but jansson's reading of one is its own:
     * the verdict is jansson's only on text without one. */
    if (oom || memchr(s, '\0', len) != NULL)
        return LK_JSON_UNSURE;
    return LK_JSON_INVALID;
}

/* The UTF-8 form of code point u into out: its length. */
static size_t
utf8_put(uint32_t u, char *out)
{
    if (u < 0x80) {
        out[0] = (char)u;
        return 1;
    }
    if (u < 0x800) {
        out[0] = (char)(0xC0 | u >> 6);
        out[1] = (char)(0x80 | (u & 0x3F));
        return 2;
    }
    if (u < 0x10000) {
        out[0] = (char)(0xE0 | u >> 12);
        out[1] = (char)(0x80 | (u >> 6 & 0x3F));
        out[2] = (char)(0x80 | (u & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | u >> 18);
    out[1] = (char)(0x80 | (u >> 12 & 0x3F));
    out[2] = (char)(0x80 | (u >> 6 & 0x3F));
    out[3] = (char)(0x80 | (u & 0x3F));
    return 4;
}

size_t
lk_json_unescape(const char *raw, size_t len, char *out)
{
    const char *p = raw, *end = raw + len;
    size_t n = 0;

    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        size_t run = (size_t)((bs != NULL ? bs : end) - p);
        memmove(out + n, p, run);
        n += run;
        if (bs == NULL)
            break;
        p = bs + 2; /* valid text: an escape follows every backslash */
        if (bs[1] != 'u') {
            /* the one-letter escapes of RFC 8259 §7, and what they stand for */
            static const char from[] = "bfnrt\"\\/", to[] = "\b\f\n\r\t\"\\/";
            out[n++] = to[strchr(from, bs[1]) - from];
            continue;
        }
        uint32_t u = (uint32_t)hex4((const unsigned char *)p);
        p += 4;
        if (u >= 0xD800 && u <= 0xDBFF) { /* and a low one follows: checked */
            u = 0x10000 + ((u - 0xD800) << 10) +
                ((uint32_t)hex4((const unsigned char *)p + 2) - 0xDC00);
            p += 6;
        }
        n += utf8_put(u, out + n);
    }
    return n;
}
