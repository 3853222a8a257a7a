/*
 * Tests for proxy/lk_proxyproto.c: PROXY protocol headers of both versions
 * parsed byte by byte, every malformation refused with its reason, and
 * the headers it writes read back.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "lk_proxyproto.h"
#include "lk_test.h"

static const uint8_t sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* Parses p as a whole and as each of its prefixes: a prefix asks for more. */
static int
parse_all(const uint8_t *p, size_t len, unsigned accept, struct lk_pp_hdr *h, char *err,
          size_t errlen)
{
    for (size_t i = 0; i < len; i++) {
        int r = lk_pp_parse(p, i, accept, h, err, errlen);
        if (r != 0)
            return r < 0 ? r : -2;
    }
    return lk_pp_parse(p, len, accept, h, err, errlen);
}

/* "ip:port" or "[ip]:port" of a's source; -1 when family is 0 */
static int
src_text(const struct lk_pp_addr *a, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN];

    if (a->family == 0 || inet_ntop(a->family, a->src, ip, sizeof(ip)) == NULL)
        return -1;
    snprintf(out, outlen, a->family == AF_INET ? "%s:%u" : "[%s]:%u", ip, a->sport);
    return 0;
}

static void
test_v1(void)
{
    static const char *const good[] = {
        "PROXY TCP4 192.0.2.7 198.51.100.1 56324 6650\r\n",
        "PROXY TCP6 2001:db8::7 2001:db8::1 56324 6650\r\n",
        "PROXY UNKNOWN\r\n",
        "PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n",
    };
    struct lk_pp_hdr h;
    char err[128], text[64];

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        size_t l = strlen(good[i]);
        ok(parse_all((const uint8_t *)good[i], l, LK_PP_ANY, &h, err, sizeof(err)) == (int)l,
           "v1 %zu: parsed whole", i);
    }
    /* The header's length is returned: bytes after it are the client's. */
    const char *s = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 6650\r\nGET / HTTP/1.1\r\n";
    ok(lk_pp_parse((const uint8_t *)s, strlen(s), LK_PP_V1, &h, err, sizeof(err)) == 46,
       "v1: stops at its CRLF");
    ok(h.version == LK_PP_V1 && h.addr.family == AF_INET && h.addr.sport == 56324 &&
           h.addr.dport == 6650,
       "v1: family and ports");
    ok(src_text(&h.addr, text, sizeof(text)) == 0, "v1: source as text");
    ok_str(text, "192.0.2.7:56324", "v1: ip:port");
    s = good[1];
    lk_pp_parse((const uint8_t *)s, strlen(s), LK_PP_ANY, &h, err, sizeof(err));
    src_text(&h.addr, text, sizeof(text));
    ok_str(text, "[2001:db8::7]:56324", "v1 TCP6: [ip]:port");
    lk_pp_parse((const uint8_t *)good[2], strlen(good[2]), LK_PP_ANY, &h, err, sizeof(err));
    ok(h.addr.family == 0, "v1 UNKNOWN: no address");

    static const struct {
        const char *in, *why;
    } bad[] = {
        {"PROXY TCP5 192.0.2.7 198.51.100.1 1 2\r\n", "unknown family"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 1\r\n", "fewer than six fields"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 1 2 3\r\n", "more than six fields"},
        {"PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n", "not single spaces"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 1 2 \r\n", "not single spaces"},
        {"PROXY TCP4 2001:db8::7 198.51.100.1 1 2\r\n", "address not of its family"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 65536 2\r\n", "port not within"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 -1 2\r\n", "port not within"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 1 2\n", "line feed without"},
        {"PROXY TCP4 192.0.2.7 198.51.100.1 1 2\rX", "carriage return without"},
        {"PROXY TCP4 192.0.2.7\0 198.51.100.1 1 2\r\n", "NUL"},
        {"PROXX TCP4", "no PROXY protocol signature"},
        {"GET / HTTP/1.1\r\n", "no PROXY protocol signature"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        /* The NUL one is 40 bytes long. */
        size_t l = strstr(bad[i].why, "NUL") != NULL ? 40 : strlen(bad[i].in);
        err[0] = '\0';
        ok(lk_pp_parse((const uint8_t *)bad[i].in, l, LK_PP_ANY, &h, err, sizeof(err)) == -1 &&
               strstr(err, bad[i].why) != NULL,
           "v1 bad %zu refused: %s", i, err);
    }
    /* 107 bytes at most, with the CRLF. */
    char longl[200];
    memset(longl, '1', sizeof(longl));
    memcpy(longl, "PROXY UNKNOWN ", 14);
    memcpy(longl + 105, "\r\n", 2);
    ok(lk_pp_parse((uint8_t *)longl, 107, LK_PP_V1, &h, err, sizeof(err)) == 107,
       "v1: 107 bytes with CRLF taken");
    memcpy(longl + 105, "1\r\n", 3);
    ok(lk_pp_parse((uint8_t *)longl, 108, LK_PP_V1, &h, err, sizeof(err)) == -1 &&
           strstr(err, "longer than 107") != NULL,
       "v1: 108 bytes with CRLF refused");
    ok(lk_pp_parse((uint8_t *)longl, 107, LK_PP_V1, &h, err, sizeof(err)) == -1 &&
           strstr(err, "longer than 107") != NULL,
       "v1: refused once its CR is past the 106th byte");
    memset(longl + 14, '1', sizeof(longl) - 14);
    ok(lk_pp_parse((uint8_t *)longl, 106, LK_PP_V1, &h, err, sizeof(err)) == 0,
       "v1: 106 bytes without CR want more");
    ok(lk_pp_parse((uint8_t *)longl, 150, LK_PP_V1, &h, err, sizeof(err)) == -1 &&
           strstr(err, "longer than 107") != NULL,
       "v1: 107 bytes without CR refused");
    ok(lk_pp_parse((const uint8_t *)good[0], strlen(good[0]), LK_PP_V2, &h, err, sizeof(err)) ==
               -1 &&
           strstr(err, "only v2") != NULL,
       "v1 where only v2 is accepted refused");
}

static size_t
v2_hdr(uint8_t *b, uint8_t cmd, uint8_t fam, const uint8_t *body, size_t n)
{
    memcpy(b, sig, 12);
    b[12] = cmd;
    b[13] = fam;
    b[14] = (uint8_t)(n >> 8);
    b[15] = (uint8_t)n;
    memcpy(b + 16, body, n);
    return 16 + n;
}

static void
test_v2(void)
{
    uint8_t b[600];
    struct lk_pp_hdr h;
    char err[128], text[64];
    const uint8_t *val;
    size_t vlen;
    /* 192.0.2.7:56324 -> 198.51.100.1:6650, then an AUTHORITY TLV and a NOOP. */
    static const uint8_t in4[] = {192, 0,   2,    7,   198, 51,  100, 1,   0xDC, 0x04, 0x19, 0xFA,
                                  0x02, 0, 5,   'a', '.', 'b', '.', 'c', 0x04, 0,    0};
    size_t l = v2_hdr(b, 0x21, 0x11, in4, sizeof(in4));

    ok(parse_all(b, l, LK_PP_ANY, &h, err, sizeof(err)) == (int)l, "v2 TCP4: parsed whole");
    ok(h.version == LK_PP_V2 && !h.local && h.addr.family == AF_INET && h.addr.sport == 56324 &&
           h.addr.dport == 6650,
       "v2 TCP4: family and ports");
    src_text(&h.addr, text, sizeof(text));
    ok_str(text, "192.0.2.7:56324", "v2 TCP4: source");
    ok(lk_pp_tlv_find(&h, LK_PP2_TYPE_AUTHORITY, &val, &vlen) && vlen == 5 &&
           memcmp(val, "a.b.c", 5) == 0,
       "v2: AUTHORITY TLV found");
    ok(!lk_pp_tlv_find(&h, LK_PP2_TYPE_ALPN, &val, &vlen), "v2: no ALPN TLV");

    uint8_t in6[36] = {0x20, 0x01, 0x0d, 0xb8};
    in6[15] = 7;
    in6[32] = 0x1F;
    in6[33] = 0x90;
    l = v2_hdr(b, 0x21, 0x21, in6, sizeof(in6));
    ok(parse_all(b, l, LK_PP_V2, &h, err, sizeof(err)) == (int)l, "v2 TCP6: parsed");
    src_text(&h.addr, text, sizeof(text));
    ok_str(text, "[2001:db8::7]:8080", "v2 TCP6: source");

    l = v2_hdr(b, 0x20, 0x11, in4, sizeof(in4));
    ok(lk_pp_parse(b, l, LK_PP_V2, &h, err, sizeof(err)) == (int)l && h.local &&
           h.addr.family == 0,
       "v2 LOCAL: no address");
    l = v2_hdr(b, 0x21, 0x00, in4, 0);
    ok(lk_pp_parse(b, l, LK_PP_V2, &h, err, sizeof(err)) == 16 && h.addr.family == 0,
       "v2 UNSPEC: no address");
    uint8_t unix_body[216] = {'/'};
    l = v2_hdr(b, 0x21, 0x31, unix_body, sizeof(unix_body));
    ok(lk_pp_parse(b, l, LK_PP_V2, &h, err, sizeof(err)) == (int)l && h.addr.family == 0,
       "v2 AF_UNIX: no address to use");

    /* CRC32C: the check value of "123456789", then a TLV that holds it. */
    ok(lk_pp_crc32c(0, (const uint8_t *)"123456789", 9) == 0xE3069283u, "CRC32C check value");
    uint8_t withcrc[19];
    memcpy(withcrc, in4, 12);
    memcpy(withcrc + 12, (uint8_t[]){0x03, 0, 4, 0, 0, 0, 0}, 7);
    l = v2_hdr(b, 0x21, 0x11, withcrc, sizeof(withcrc));
    uint32_t crc = lk_pp_crc32c(0, b, l);
    b[l - 4] = (uint8_t)(crc >> 24);
    b[l - 3] = (uint8_t)(crc >> 16);
    b[l - 2] = (uint8_t)(crc >> 8);
    b[l - 1] = (uint8_t)crc;
    ok(lk_pp_parse(b, l, LK_PP_V2, &h, err, sizeof(err)) == (int)l, "v2: a right CRC32C taken");
    b[17] ^= 1;
    ok(lk_pp_parse(b, l, LK_PP_V2, &h, err, sizeof(err)) == -1 && strstr(err, "CRC32C"),
       "v2: a wrong CRC32C refused");

    static const struct {
        uint8_t cmd, fam;
        size_t n;
        const char *why;
    } bad[] = {
        {0x11, 0x11, 12, "version not 2"},
        {0x22, 0x11, 12, "unknown command"},
        {0x21, 0x41, 12, "unknown family"},
        {0x21, 0x13, 12, "unknown family"},
        {0x21, 0x12, 12, "datagram"},
        {0x21, 0x11, 11, "addresses longer"},
        {0x21, 0x21, 30, "addresses longer"},
        {0x21, 0x11, 14, "TLV overruns"},
        {0x21, 0x11, 17, "TLV overruns"},
    };
    uint8_t src[40] = {0}; /* in4, then zeros: as long as any case asks */
    memcpy(src, in4, sizeof(in4));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        l = v2_hdr(b, bad[i].cmd, bad[i].fam, src, bad[i].n);
        if (bad[i].n == 17)
            b[16 + 13] = 9; /* the AUTHORITY TLV claims 9 bytes */
        err[0] = '\0';
        ok(lk_pp_parse(b, l, LK_PP_ANY, &h, err, sizeof(err)) == -1 &&
               strstr(err, bad[i].why) != NULL,
           "v2 bad %zu refused: %s", i, err);
    }
    /* A truncated header only asks for more: the caller's timeout ends it. */
    l = v2_hdr(b, 0x21, 0x11, in4, sizeof(in4));
    ok(lk_pp_parse(b, l - 1, LK_PP_V2, &h, err, sizeof(err)) == 0, "v2: truncated wants more");
    b[3] = 0x0B;
    ok(lk_pp_parse(b, l, LK_PP_ANY, &h, err, sizeof(err)) == -1 &&
           strstr(err, "no PROXY protocol signature"),
       "v2: a bad signature refused");
    l = v2_hdr(b, 0x21, 0x11, in4, 12);
    ok(lk_pp_parse(b, l, LK_PP_V1, &h, err, sizeof(err)) == -1 && strstr(err, "only v1"),
       "v2 where only v1 is accepted refused");
}

static void
test_detect(void)
{
    ok(lk_pp_detect((const uint8_t *)"PROXY TCP4", 10, LK_PP_ANY) == 1, "detect: v1");
    ok(lk_pp_detect((const uint8_t *)"PRO", 3, LK_PP_ANY) == -1, "detect: v1 prefix");
    ok(lk_pp_detect((const uint8_t *)"PUT /", 5, LK_PP_ANY) == 0, "detect: HTTP PUT");
    ok(lk_pp_detect(sig, 12, LK_PP_ANY) == 1, "detect: v2");
    ok(lk_pp_detect(sig, 12, LK_PP_V1) == 0, "detect: v2 when only v1 is asked");
    ok(lk_pp_detect(sig, 5, LK_PP_ANY) == -1, "detect: v2 prefix");
    ok(lk_pp_detect((const uint8_t *)"\x16\x03\x01", 3, LK_PP_ANY) == 0, "detect: TLS");
}

static void
test_write(void)
{
    struct lk_pp_addr a = {.family = AF_INET, .sport = 56324, .dport = 6650};
    struct lk_pp_hdr h;
    uint8_t out[LK_PP_V1_MAX];
    char err[128];
    int n;

    inet_pton(AF_INET, "192.0.2.7", a.src);
    inet_pton(AF_INET, "198.51.100.1", a.dst);
    n = lk_pp_write(LK_PP_V1, &a, out, sizeof(out));
    ok(n == 46 && memcmp(out, "PROXY TCP4 192.0.2.7 198.51.100.1 56324 6650\r\n", 46) == 0,
       "write v1 TCP4");
    ok(lk_pp_write(LK_PP_V1, &a, out, 46) == -1, "write v1: too small refused");
    n = lk_pp_write(LK_PP_V2, &a, out, sizeof(out));
    ok(n == 28 && lk_pp_parse(out, (size_t)n, LK_PP_V2, &h, err, sizeof(err)) == 28 &&
           memcmp(&h.addr, &a, sizeof(a)) == 0,
       "write v2 TCP4 reads back");
    a.family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8::7", a.src);
    inet_pton(AF_INET6, "2001:db8::1", a.dst);
    for (unsigned v = LK_PP_V1; v <= LK_PP_V2; v++) {
        n = lk_pp_write(v, &a, out, sizeof(out));
        ok(n > 0 && lk_pp_parse(out, (size_t)n, v, &h, err, sizeof(err)) == n &&
               memcmp(&h.addr, &a, sizeof(a)) == 0,
           "write v%u TCP6 reads back", v);
    }
    ok(lk_pp_write(LK_PP_V2, &a, out, 51) == -1, "write v2: too small refused");
    memset(&a, 0, sizeof(a));
    n = lk_pp_write(LK_PP_V1, &a, out, sizeof(out));
    ok(n == 15 && memcmp(out, "PROXY UNKNOWN\r\n", 15) == 0, "write v1 UNKNOWN");
    n = lk_pp_write(LK_PP_V2, &a, out, sizeof(out));
    ok(n == 16 && out[12] == 0x20 && lk_pp_parse(out, 16, LK_PP_V2, &h, err, sizeof(err)) == 16 &&
           h.local,
       "write v2 LOCAL");
}

const struct lk_test_case lk_test_proxyproto[] = {
    {"proxyproto/v1", test_v1},
    {"proxyproto/v2", test_v2},
    {"proxyproto/detect", test_detect},
    {"proxyproto/write", test_write},
    {NULL, NULL},
};
