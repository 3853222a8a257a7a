/*
 * Tests for proxy/lk_json.c: the scanner's verdict against jansson's
 * json_loadb(text, len, 0) over a table of valid and invalid texts (and
 * generated ones at the nesting and number limits), the member spans it
 * reports, and lk_json_unescape.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "lk_json.h"
#include "lk_test.h"

/* Scans text[0..len) and compares the verdict with jansson's; `want` is
 * what the table says it is (1 valid, 0 invalid), so that a case checks
 * both libraries' reading against the author's. */
static void
same_verdict(const char *what, const char *text, size_t len, int want)
{
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    int scan = lk_json_scan(text, len, NULL, NULL);

    ok(scan == (j != NULL ? LK_JSON_VALID : LK_JSON_INVALID) && (j != NULL) == want,
       "%s: scanner %d, jansson %s%s", what, scan,
       j != NULL ? "accepts" : "refuses: ", j != NULL ? "" : jerr.text);
    json_decref(j);
}

static const struct {
    const char *text;
    int valid;
} verdicts[] = {
    /* top level: an object or an array (flags 0: no JSON_DECODE_ANY) */
    {"{}", 1},
    {"[]", 1},
    {" \t\r\n{}\n", 1},
    {"", 0},
    {"  ", 0},
    {"1", 0},
    {"\"x\"", 0},
    {"null", 0},
    {"true", 0},
    {"{", 0},
    {"}", 0},
    {"[", 0},
    {"{]", 0},
    {"[}", 0},
    /* structure */
    {"{\"a\":1}", 1},
    {"{ \"a\" : 1 , \"b\" : [ 1 , 2 ] }", 1},
    {"{\"a\" 1}", 0},
    {"{\"a\":}", 0},
    {"{\"a\":1,}", 0},
    {"{,\"a\":1}", 0},
    {"{\"a\":1 \"b\":2}", 0},
    {"{a:1}", 0},
    {"{1:1}", 0},
    {"{'a':1}", 0},
    {"{\"a\"::1}", 0},
    {"[1,]", 0},
    {"[,1]", 0},
    {"[1 2]", 0},
    {"[1,,2]", 0},
    {"{\"a\":1}}", 0},
    {"[]]", 0},
    {"{} {}", 0},
    {"{}x", 0},
    {"{} \n ", 1},
    {"[[],{},[{}]]", 1},
    {"{\"a\":{\"b\":{\"c\":[[[]]]}}}", 1},
    {"{\"a\":1}\x0b", 0},
    {"\xef\xbb\xbf{}", 0},
    {"{\"a\":1,\"a\":2}", 1},
    /* literals */
    {"[true,false,null]", 1},
    {"[tru]", 0},
    {"[truex]", 0},
    {"[True]", 0},
    {"[nul]", 0},
    {"[null1]", 0},
    {"[nullnull]", 0},
    {"[true false]", 0},
    {"[fals]", 0},
    {"[t]", 0},
    {"[undefined]", 0},
    {"[NaN]", 0},
    {"[Infinity]", 0},
    {"[-Infinity]", 0},
    /* numbers */
    {"[0]", 1},
    {"[-0]", 1},
    {"[1]", 1},
    {"[-1]", 1},
    {"[10]", 1},
    {"[0.5]", 1},
    {"[-0.0]", 1},
    {"[1e5]", 1},
    {"[1E5]", 1},
    {"[1e+5]", 1},
    {"[1e-5]", 1},
    {"[1.5e10]", 1},
    {"[0e0]", 1},
    {"[01]", 0},
    {"[-01]", 0},
    {"[00]", 0},
    {"[+1]", 0},
    {"[.5]", 0},
    {"[1.]", 0},
    {"[1.e5]", 0},
    {"[1e]", 0},
    {"[1e+]", 0},
    {"[-]", 0},
    {"[--1]", 0},
    {"[1.5.5]", 0},
    {"[0x10]", 0},
    {"[1 0]", 0},
    {"[1e5e5]", 0},
    {"[- 1]", 0},
    {"[1,-]", 0},
    {"[0.]", 0},
    {"[1e1.5]", 0},
    {"[9223372036854775807]", 1},
    {"[9223372036854775808]", 0},
    {"[-9223372036854775808]", 1},
    {"[-9223372036854775809]", 0},
    {"[10000000000000000000]", 0},
    {"[99999999999999999999999]", 0},
    {"[9223372036854775807.0]", 1},
    {"[1e308]", 1},
    {"[1e309]", 0},
    {"[-1e309]", 0},
    {"[1.7976931348623157e308]", 1},
    {"[1.7976931348623159e308]", 0},
    {"[1e-400]", 1},
    {"[123456789012345678901234567890123456789012345678901234567890123456789e240]", 1},
    {"[123456789012345678901234567890123456789012345678901234567890123456789e250]", 0},
    {"[0.000000000000000000000000000000000000000000000000000000000000000000001e10]", 1},
    /* strings and escapes */
    {"[\"\"]", 1},
    {"[\"abc\"]", 1},
    {"[\"a\\\"b\"]", 1},
    {"[\"\\\\\\/\\b\\f\\n\\r\\t\"]", 1},
    {"[\"\\u0041\"]", 1},
    {"[\"\\u00e9\\u20AC\"]", 1},
    {"[\"\\uD83D\\uDE00\"]", 1},
    {"[\"\\ud83d\\ude00\"]", 1},
    {"[\"\\u0000\"]", 0},
    {"{\"\\u0000\":1}", 0},
    {"{\"a\\u0000\":1}", 0},
    {"[\"\\uD83D\"]", 0},
    {"[\"\\uDE00\"]", 0},
    {"[\"\\uD83Dx\"]", 0},
    {"[\"\\uD83D\\n\"]", 0},
    {"[\"\\uD83D\\uD83D\"]", 0},
    {"[\"\\uD83D\\u0041\"]", 0},
    {"[\"\\uDBFF\\uDFFF\"]", 1},
    {"[\"\\uD800\\uDC00\"]", 1},
    {"[\"\\u12\"]", 0},
    {"[\"\\u12G4\"]", 0},
    {"[\"\\x41\"]", 0},
    {"[\"\\a\"]", 0},
    {"[\"\\'\"]", 0},
    {"[\"\\\"]", 0},
    {"[\"abc]", 0},
    {"[\"a\nb\"]", 0},
    {"[\"a\tb\"]", 0},
    {"[\"a\x1f\"]", 0},
    {"[\"a\x7f\"]", 1},
    {"{\"a\":\"b\",\"\":\"\"}", 1},
    {"[\"\\u", 0},
    {"[\"\\", 0},
    {"[\"\\uD83D\\u", 0},
    {"[\"\\uD83D\\uDE0", 0},
    /* UTF-8 (RFC 3629) in strings, and anywhere else */
    {"[\"\xc3\xa9\"]", 1},
    {"[\"\xe2\x82\xac\"]", 1},
    {"[\"\xf0\x9f\x98\x80\"]", 1},
    {"[\"\xf4\x8f\xbf\xbf\"]", 1},
    {"[\"\xef\xbf\xbf\"]", 1},
    {"[\"\xed\x9f\xbf\"]", 1},
    {"[\"\xee\x80\x80\"]", 1},
    {"[\"\xc2\x80\"]", 1},
    {"[\"\xe0\xa0\x80\"]", 1},
    {"[\"\xf0\x90\x80\x80\"]", 1},
    {"[\"\x80\"]", 0},
    {"[\"\xbf\"]", 0},
    {"[\"\xc0\x80\"]", 0},
    {"[\"\xc1\xbf\"]", 0},
    {"[\"\xc3\"]", 0},
    {"[\"\xc3", 0},
    {"[\"\xc3\x28\"]", 0},
    {"[\"\xe0\x80\x80\"]", 0},
    {"[\"\xe0\x9f\xbf\"]", 0},
    {"[\"\xed\xa0\x80\"]", 0},
    {"[\"\xed\xbf\xbf\"]", 0},
    {"[\"\xe2\x82\"]", 0},
    {"[\"\xf0\x80\x80\x80\"]", 0},
    {"[\"\xf0\x8f\xbf\xbf\"]", 0},
    {"[\"\xf4\x90\x80\x80\"]", 0},
    {"[\"\xf5\x80\x80\x80\"]", 0},
    {"[\"\xf8\x88\x80\x80\x80\"]", 0},
    {"[\"\xfe\"]", 0},
    {"[\"\xff\"]", 0},
    {"[\"\xf0\x9f\x98\"]", 0},
    {"[\"\xf0\x9f\"]", 0},
    {"[\xc3\xa9]", 0},
    {"{\"\xc3\xa9\":1}", 1},
    {"{\"\xff\":1}", 0},
    {"[1]\xc3\xa9", 0},
    /* LookupData, as brokers send it and mangled */
    {"{\"brokerUrl\":\"pulsar://10.0.0.11:6650\",\"brokerUrlTls\":null,\"brokerUrlSsl\":\"\"}", 1},
    {"{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"", 0},
    {"{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"} x", 0},
    {"{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"}{\"brokerUrl\":\"pulsar://10.0.0.11:6650\"}", 0},
    {"{\"brokerUrl\":pulsar://10.0.0.11:6650}", 0},
    {"{\"brokerUrl\":\"pulsar:\\/\\/10.0.0.11:6650\"}", 1},
};

static void
test_verdicts(void)
{
    for (size_t i = 0; i < sizeof(verdicts) / sizeof(verdicts[0]); i++) {
        char what[32];
        snprintf(what, sizeof(what), "table[%zu]", i);
        same_verdict(what, verdicts[i].text, strlen(verdicts[i].text), verdicts[i].valid);
    }
}

/* A string is scanned 16 bytes at a time where SSE2 is (lk_json.c,
 * skip_plain) and byte by byte over its last 15: every byte that stops the
 * plain run (the closing quote, an escape, a control character, DEL's
 * neighbours, UTF-8 good and bad) at every offset of a 40-byte value, so at
 * every lane of a 16-byte load and in the tail, must get jansson's verdict. */
static void
test_string_lanes(void)
{
    static const char *const stops[] = {
        "\"",   "\\n",     "\\u00e9", "\\x",   "\x01",     "\x1f", "\t", "\x7f",
        "\x80", "\xc3\xa9", "\xc3",     "\xed\xa0\x80", "\xf0\x9f\x98\x80", "\xff", " ", "~",
    };
    int same = 1;
    char what[64];

    for (size_t k = 0; k < sizeof(stops) / sizeof(stops[0]); k++)
        for (size_t at = 0; at <= 40; at++) {
            char text[128];
            size_t n = 6, sl = strlen(stops[k]);
            memcpy(text, "{\"k\":\"", n);
            for (size_t i = 0; i < 40; i++) {
                if (i == at) {
                    memcpy(text + n, stops[k], sl);
                    n += sl;
                }
                text[n++] = (char)('a' + i % 26);
            }
            memcpy(text + n, "\"}", 2);
            n += 2;
            json_error_t jerr;
            json_t *j = json_loadb(text, n, 0, &jerr);
            int scan = lk_json_scan(text, n, NULL, NULL);
            if (scan != (j != NULL ? LK_JSON_VALID : LK_JSON_INVALID)) {
                snprintf(what, sizeof(what), "stop %zu at %zu", k, at);
                same = 0;
            }
            json_decref(j);
        }
    ok(same, "every stop byte at every offset: jansson's verdict%s%s", same ? "" : ", not at ",
       same ? "" : what);
    /* the run itself: valid texts whose strings end in each lane */
    int valid = 1;
    for (size_t len = 0; len <= 34; len++) {
        char text[64];
        memcpy(text, "[\"", 2);
        memset(text + 2, 'x', len);
        memcpy(text + 2 + len, "\",\"y\"]", 6);
        if (lk_json_scan(text, len + 8, NULL, NULL) != LK_JSON_VALID)
            valid = 0;
    }
    ok(valid, "plain strings of 0 to 34 bytes, then another: valid");
}

/* depth containers opened with open[], closed with close[], around inner */
static char *
nest(size_t depth, const char *open, const char *inner, const char *close)
{
    size_t lo = strlen(open), li = strlen(inner), lc = strlen(close);
    char *s = malloc(depth * (lo + lc) + li + 1), *w = s;

    if (s == NULL)
        return NULL;
    for (size_t i = 0; i < depth; i++, w += lo)
        memcpy(w, open, lo);
    memcpy(w, inner, li);
    w += li;
    for (size_t i = 0; i < depth; i++, w += lc)
        memcpy(w, close, lc);
    *w = '\0';
    return s;
}

/* jansson counts every value, scalars too: 2048 empty arrays nest, but a
 * scalar inside 2048 arrays is one level too deep. */
static void
test_depth(void)
{
    static const struct {
        size_t depth;
        const char *open, *inner, *close;
        int valid;
    } cases[] = {
        {LK_JSON_MAX_DEPTH, "[", "", "]", 1},
        {LK_JSON_MAX_DEPTH + 1, "[", "", "]", 0},
        {LK_JSON_MAX_DEPTH - 1, "[", "1", "]", 1},
        {LK_JSON_MAX_DEPTH, "[", "1", "]", 0},
        {LK_JSON_MAX_DEPTH, "[", "{}", "]", 0},
        {LK_JSON_MAX_DEPTH - 1, "[", "{}", "]", 1},
        {LK_JSON_MAX_DEPTH - 1, "{\"a\":", "{}", "}", 1},
        {LK_JSON_MAX_DEPTH, "{\"a\":", "{}", "}", 0},
        {LK_JSON_MAX_DEPTH - 1, "{\"a\":", "\"x\"", "}", 1},
        {LK_JSON_MAX_DEPTH, "{\"a\":", "\"x\"", "}", 0},
        {LK_JSON_MAX_DEPTH / 2, "[{\"a\":", "[]", "}]", 0}, /* 2 * 1024 + 1 */
        {LK_JSON_MAX_DEPTH / 2 - 1, "[{\"a\":", "[]", "}]", 1},
        {LK_JSON_MAX_DEPTH * 4, "[", "", "]", 0},
        {LK_JSON_MAX_DEPTH, "[", "", "", 0}, /* unclosed */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[64];
        char *s = nest(cases[i].depth, cases[i].open, cases[i].inner, cases[i].close);
        if (!ok(s != NULL, "alloc"))
            return;
        snprintf(what, sizeof(what), "%zu x %s%s%s", cases[i].depth, cases[i].open, cases[i].inner,
                 cases[i].close);
        same_verdict(what, s, strlen(s), cases[i].valid);
        free(s);
    }
}

/* A NUL byte: jansson's reading is its own (one right after a number or a
 * literal is skipped), so the scanner does not decide. */
static void
test_nul(void)
{
    static const struct {
        const char *text;
        size_t len;
    } cases[] = {
        {"[1\0]", 4}, {"[true\0]", 7}, {"{\"a\":\"\0\"}", 9}, {"\0{}", 3}, {"{}\0", 3},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        ok(lk_json_scan(cases[i].text, cases[i].len, NULL, NULL) == LK_JSON_UNSURE,
           "NUL case %zu: unsure", i);
    ok(lk_json_scan("[1]\0", 3, NULL, NULL) == LK_JSON_VALID, "the length bounds the scan");
}

struct seen {
    size_t n;
    struct lk_json_member m[8];
};

static void
record(const struct lk_json_member *m, void *arg)
{
    struct seen *s = arg;
    if (s->n < 8)
        s->m[s->n] = *m;
    s->n++;
}

/* The members of the top-level object, their spans and flags; nothing for
 * nested objects or a top-level array. */
static void
test_members(void)
{
    static const char text[] = " { \"a\" : 1 ,\"b\\u0062\":\"x\\ny\", "
                               "\"c\":{\"d\":\"e\",\"f\":[1]},\"g\":\"h\",\"i\":[\"\\\"\"] } ";
    static const struct {
        const char *key, *value;
        unsigned key_esc, value_str, value_esc;
    } want[] = {
        {"a", "1", 0, 0, 0},
        {"b\\u0062", "\"x\\ny\"", 1, 1, 1},
        {"c", "{\"d\":\"e\",\"f\":[1]}", 0, 0, 0},
        {"g", "\"h\"", 0, 1, 0},
        {"i", "[\"\\\"\"]", 0, 0, 0},
    };
    struct seen s = {0};

    ok(lk_json_scan(text, strlen(text), record, &s) == LK_JSON_VALID, "valid");
    if (!ok(s.n == 5, "5 members (%zu)", s.n))
        return;
    for (size_t i = 0; i < 5; i++) {
        const struct lk_json_member *m = &s.m[i];
        char key[64], value[64];
        snprintf(key, sizeof(key), "%.*s", (int)m->key_len, text + m->key + 1);
        snprintf(value, sizeof(value), "%.*s", (int)(m->end - m->value), text + m->value);
        ok(text[m->key] == '"' && text[m->key + 1 + m->key_len] == '"', "member %zu: key quoted",
           i);
        ok_str(key, want[i].key, "member %zu: key", i);
        ok_str(value, want[i].value, "member %zu: value", i);
        ok(m->key_esc == want[i].key_esc && m->value_str == want[i].value_str &&
               m->value_esc == want[i].value_esc,
           "member %zu: flags %u %u %u", i, m->key_esc, m->value_str, m->value_esc);
    }

    memset(&s, 0, sizeof(s));
    ok(lk_json_scan("[{\"a\":1}]", 9, record, &s) == LK_JSON_VALID && s.n == 0,
       "a top-level array: no members");
    memset(&s, 0, sizeof(s));
    ok(lk_json_scan("{}", 2, record, &s) == LK_JSON_VALID && s.n == 0, "{}: no members");
    memset(&s, 0, sizeof(s));
    ok(lk_json_scan("{\"a\":1,\"b\":}", 12, record, &s) == LK_JSON_INVALID && s.n == 1,
       "members before the error were reported; the verdict says not to use them");
}

static void
test_unescape(void)
{
    static const struct {
        const char *raw, *want;
    } cases[] = {
        {"", ""},
        {"plain", "plain"},
        {"pulsar:\\/\\/10.0.0.11:6650", "pulsar://10.0.0.11:6650"},
        {"\\\"\\\\\\/\\b\\f\\n\\r\\t", "\"\\/\b\f\n\r\t"},
        {"\\u0062rokerUrl", "brokerUrl"},
        {"\\u00e9\\u20AC", "\xc3\xa9\xe2\x82\xac"},
        {"a\\uD83D\\uDE00b", "a\xf0\x9f\x98\x80"
                             "b"},
        {"\\u007f\\u0080\\u07ff\\u0800\\uffff", "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf"},
        {"\\uDBFF\\uDFFF", "\xf4\x8f\xbf\xbf"},
        {"\xc3\xa9\\n", "\xc3\xa9\n"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char doc[128], out[64];
        size_t len = strlen(cases[i].raw);
        /* what it decodes must be valid, and jansson must read it the same */
        snprintf(doc, sizeof(doc), "[\"%s\"]", cases[i].raw);
        json_t *j = json_loads(doc, 0, NULL);
        ok(lk_json_scan(doc, strlen(doc), NULL, NULL) == LK_JSON_VALID && j != NULL,
           "case %zu: valid", i);
        size_t n = lk_json_unescape(cases[i].raw, len, out);
        ok(n <= len, "case %zu: not longer (%zu <= %zu)", i, n, len);
        out[n] = '\0';
        ok_str(out, cases[i].want, "case %zu: decoded", i);
        ok(j != NULL && strcmp(json_string_value(json_array_get(j, 0)), out) == 0,
           "case %zu: as jansson decodes it", i);
        json_decref(j);
    }
}

const struct lk_test_case lk_test_json[] = {
    {"json/verdicts", test_verdicts}, {"json/depth", test_depth},       {"json/nul", test_nul},
    {"json/string_lanes", test_string_lanes},
    {"json/members", test_members},   {"json/unescape", test_unescape}, {NULL, NULL},
};
