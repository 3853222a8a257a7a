/*
 * The PROXY protocol codec: see lk_proxyproto.h.  Version 1 is one text
 * line, "PROXY TCP4|TCP6 src dst sport dport\r\n" or "PROXY UNKNOWN ...\r\n",
 * at most 107 bytes; version 2 is a 12-byte signature, a version and
 * command byte, a family and protocol byte, a 2-byte length, the addresses
 * of that family and TLVs up to the length.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "lk_proxyproto.h"

static const uint8_t v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                   0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
static const char v1_sig[] = "PROXY ";

/* Whether the first len bytes of p agree with sig (n bytes). */
static int
prefix_of(const uint8_t *p, size_t len, const void *sig, size_t n)
{
    return memcmp(p, sig, len < n ? len : n) == 0;
}

int
lk_pp_detect(const uint8_t *p, size_t len, unsigned accept)
{
    int maybe = 0;

    if ((accept & LK_PP_V1) && prefix_of(p, len, v1_sig, sizeof(v1_sig) - 1)) {
        if (len >= sizeof(v1_sig) - 1)
            return 1;
        maybe = 1;
    }
    if ((accept & LK_PP_V2) && prefix_of(p, len, v2_sig, sizeof(v2_sig))) {
        if (len >= sizeof(v2_sig))
            return 1;
        maybe = 1;
    }
    return maybe ? -1 : 0;
}

static int
fail(char *err, size_t errlen, const char *why)
{
    snprintf(err, errlen, "%s", why);
    return -1;
}

/* A v1 port: 1 to 5 digits, at most 65535. */
static int
v1_port(const char *s, size_t n, uint16_t *port)
{
    unsigned v = 0;

    if (n == 0 || n > 5)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

static int
parse_v1(const uint8_t *p, size_t len, struct lk_pp_hdr *h, char *err, size_t errlen)
{
    const uint8_t *cr = memchr(p, '\r', len < LK_PP_V1_MAX ? len : LK_PP_V1_MAX);
    const uint8_t *lf = memchr(p, '\n', len < LK_PP_V1_MAX ? len : LK_PP_V1_MAX);
    char line[LK_PP_V1_MAX + 1], *tok[7], *save = NULL;
    size_t n, ntok = 0;

    if (cr == NULL && lf == NULL)
        return len < LK_PP_V1_MAX ? 0 : fail(err, errlen, "v1 header longer than 107 bytes");
    if (cr == NULL || (lf != NULL && lf < cr))
        return fail(err, errlen, "v1 header: a line feed without carriage return");
    n = (size_t)(cr - p);
    if (n + 2 > LK_PP_V1_MAX)
        return fail(err, errlen, "v1 header longer than 107 bytes");
    if (n + 1 >= len)
        return 0;
    if (cr[1] != '\n')
        return fail(err, errlen, "v1 header: a carriage return without line feed");
    memset(h, 0, sizeof(*h));
    h->version = LK_PP_V1;
    memcpy(line, p, n);
    line[n] = '\0';
    if (memchr(line, '\0', n) != NULL)
        return fail(err, errlen, "v1 header: a NUL byte");
    /* UNKNOWN: whatever follows up to the CRLF is ignored. */
    if (n >= 13 && memcmp(line + 6, "UNKNOWN", 7) == 0 && (n == 13 || line[13] == ' '))
        return (int)(n + 2);
    /* Single spaces between exactly six fields. */
    for (size_t i = 0; i < n; i++)
        if (line[i] == ' ' && (i + 1 == n || line[i + 1] == ' '))
            return fail(err, errlen, "v1 header: not single spaces between fields");
    for (char *t = strtok_r(line, " ", &save); t != NULL; t = strtok_r(NULL, " ", &save)) {
        if (ntok == 6)
            return fail(err, errlen, "v1 header: more than six fields");
        tok[ntok++] = t;
    }
    if (ntok != 6)
        return fail(err, errlen, "v1 header: fewer than six fields");
    if (strcmp(tok[1], "TCP4") == 0)
        h->addr.family = AF_INET;
    else if (strcmp(tok[1], "TCP6") == 0)
        h->addr.family = AF_INET6;
    else
        return fail(err, errlen, "v1 header: unknown family (not TCP4, TCP6 or UNKNOWN)");
    if (inet_pton(h->addr.family, tok[2], h->addr.src) != 1 ||
        inet_pton(h->addr.family, tok[3], h->addr.dst) != 1)
        return fail(err, errlen, "v1 header: an address not of its family");
    if (v1_port(tok[4], strlen(tok[4]), &h->addr.sport) != 0 ||
        v1_port(tok[5], strlen(tok[5]), &h->addr.dport) != 0)
        return fail(err, errlen, "v1 header: a port not within 0-65535");
    return (int)(n + 2);
}

uint32_t
lk_pp_crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

/* Walks the TLVs: 0 when each fits, -1 when one overruns the header. */
static int
tlv_walk(const uint8_t *t, size_t n, unsigned type, const uint8_t **val, size_t *vlen)
{
    while (n > 0) {
        if (n < 3)
            return -1;
        size_t l = (size_t)t[1] << 8 | t[2];
        if (l > n - 3)
            return -1;
        if (val != NULL && t[0] == type) {
            *val = t + 3;
            *vlen = l;
            return 1;
        }
        t += 3 + l;
        n -= 3 + l;
    }
    return 0;
}

int
lk_pp_tlv_find(const struct lk_pp_hdr *h, unsigned type, const uint8_t **val, size_t *vlen)
{
    return h->tlv == NULL ? 0 : tlv_walk(h->tlv, h->tlv_len, type, val, vlen) == 1;
}

static int
check_crc(const uint8_t *p, size_t total, const struct lk_pp_hdr *h)
{
    const uint8_t *val;
    size_t vlen;

    if (!lk_pp_tlv_find(h, LK_PP2_TYPE_CRC32C, &val, &vlen))
        return 0;
    if (vlen != 4)
        return -1;
    uint32_t want = (uint32_t)val[0] << 24 | (uint32_t)val[1] << 16 | (uint32_t)val[2] << 8 | val[3];
    size_t at = (size_t)(val - p);
    static const uint8_t zero[4];
    uint32_t crc = lk_pp_crc32c(0, p, at);
    crc = lk_pp_crc32c(crc, zero, 4);
    crc = lk_pp_crc32c(crc, p + at + 4, total - at - 4);
    return crc == want ? 0 : -1;
}

static int
parse_v2(const uint8_t *p, size_t len, struct lk_pp_hdr *h, char *err, size_t errlen)
{
    size_t body, alen;

    if (len < LK_PP_V2_MIN)
        return 0;
    if ((p[12] >> 4) != 2)
        return fail(err, errlen, "v2 header: version not 2");
    if ((p[12] & 0xF) > 1)
        return fail(err, errlen, "v2 header: unknown command (not LOCAL or PROXY)");
    switch (p[13]) {
    case 0x00: alen = 0; break;
    case 0x11: alen = 12; break;
    case 0x21: alen = 36; break;
    case 0x31: alen = 216; break;
    case 0x12: case 0x22: case 0x32:
        return fail(err, errlen, "v2 header: a datagram protocol on a stream");
    default:
        return fail(err, errlen, "v2 header: unknown family or protocol");
    }
    body = (size_t)p[14] << 8 | p[15];
    if (len < LK_PP_V2_MIN + body)
        return 0;
    if (body < alen)
        return fail(err, errlen, "v2 header: addresses longer than the header");
    memset(h, 0, sizeof(*h));
    h->version = LK_PP_V2;
    h->local = (p[12] & 0xF) == 0;
    h->tlv = p + LK_PP_V2_MIN + alen;
    h->tlv_len = body - alen;
    if (tlv_walk(h->tlv, h->tlv_len, 0, NULL, NULL) != 0)
        return fail(err, errlen, "v2 header: a TLV overruns the header");
    if (check_crc(p, LK_PP_V2_MIN + body, h) != 0)
        return fail(err, errlen, "v2 header: CRC32C mismatch");
    if (!h->local && p[13] == 0x11) {
        h->addr.family = AF_INET;
        memcpy(h->addr.src, p + 16, 4);
        memcpy(h->addr.dst, p + 20, 4);
        h->addr.sport = (uint16_t)(p[24] << 8 | p[25]);
        h->addr.dport = (uint16_t)(p[26] << 8 | p[27]);
    } else if (!h->local && p[13] == 0x21) {
        h->addr.family = AF_INET6;
        memcpy(h->addr.src, p + 16, 16);
        memcpy(h->addr.dst, p + 32, 16);
        h->addr.sport = (uint16_t)(p[48] << 8 | p[49]);
        h->addr.dport = (uint16_t)(p[50] << 8 | p[51]);
    }
    return (int)(LK_PP_V2_MIN + body);
}

int
lk_pp_parse(const uint8_t *p, size_t len, unsigned accept, struct lk_pp_hdr *h, char *err,
            size_t errlen)
{
    switch (lk_pp_detect(p, len, LK_PP_ANY)) {
    case -1:
        return 0;
    case 0:
        return fail(err, errlen, "no PROXY protocol signature");
    }
    if (p[0] == 'P') {
        if (!(accept & LK_PP_V1))
            return fail(err, errlen, "a v1 header where only v2 is accepted");
        return parse_v1(p, len, h, err, errlen);
    }
    if (!(accept & LK_PP_V2))
        return fail(err, errlen, "a v2 header where only v1 is accepted");
    return parse_v2(p, len, h, err, errlen);
}

static void
put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

int
lk_pp_write(unsigned version, const struct lk_pp_addr *a, uint8_t *out, size_t outlen)
{
    if (version == LK_PP_V1) {
        char s[INET6_ADDRSTRLEN], d[INET6_ADDRSTRLEN];
        int n;

        if (a->family != AF_INET && a->family != AF_INET6)
            n = snprintf((char *)out, outlen, "PROXY UNKNOWN\r\n");
        else if (inet_ntop(a->family, a->src, s, sizeof(s)) == NULL ||
                 inet_ntop(a->family, a->dst, d, sizeof(d)) == NULL)
            return -1;
        else
            n = snprintf((char *)out, outlen, "PROXY %s %s %s %u %u\r\n",
                         a->family == AF_INET ? "TCP4" : "TCP6", s, d, a->sport, a->dport);
        return n < 0 || (size_t)n >= outlen ? -1 : n;
    }
    size_t alen = a->family == AF_INET ? 12 : a->family == AF_INET6 ? 36 : 0;
    size_t il = a->family == AF_INET ? 4 : 16;
    if (outlen < LK_PP_V2_MIN + alen)
        return -1;
    memcpy(out, v2_sig, sizeof(v2_sig));
    out[12] = alen ? 0x21 : 0x20;
    out[13] = a->family == AF_INET ? 0x11 : a->family == AF_INET6 ? 0x21 : 0x00;
    put16(out + 14, (unsigned)alen);
    if (alen) {
        memcpy(out + 16, a->src, il);
        memcpy(out + 16 + il, a->dst, il);
        put16(out + 16 + 2 * il, a->sport);
        put16(out + 18 + 2 * il, a->dport);
    }
    return (int)(LK_PP_V2_MIN + alen);
}
