/*
 * pulsar-wire.h: the Pulsar binary protocol as the pulsar scenario's C stand-ins
 * speak it (bench/pulsar-broker.c, bench/pulsar-load.c; bench/README.md).  Header
 * only, so that bench/run builds each program from one .c file with cc.
 *
 * Written from the protocol's description (facts/pulsar.md section 4) and the
 * field numbers of PulsarApi.proto; all integers big-endian:
 *   simple command   [totalSize u32][commandSize u32][BaseCommand]
 *   payload command  ... [BaseCommand][0x0e01 u16][CRC32C u32][metadataSize u32]
 *                    [MessageMetadata][payload], the checksum covering
 *                    metadataSize to the end of the frame.
 * BaseCommand is `type` (field 1) and the sub-command at the field whose number
 * is the type.  Only varint and length-delimited fields are written; a reader
 * steps over fixed32/fixed64 ones.  Both programs were checked against code
 * not written with them (bench/test-pulsar-broker).
 */
#ifndef PULSAR_WIRE_H
#define PULSAR_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* BaseCommand.Type */
enum {
    PW_CONNECT = 2, PW_CONNECTED = 3, PW_SUBSCRIBE = 4, PW_PRODUCER = 5, PW_SEND = 6,
    PW_SEND_RECEIPT = 7, PW_SEND_ERROR = 8, PW_MESSAGE = 9, PW_ACK = 10, PW_FLOW = 11,
    PW_UNSUBSCRIBE = 12, PW_SUCCESS = 13, PW_ERROR = 14, PW_CLOSE_PRODUCER = 15,
    PW_CLOSE_CONSUMER = 16, PW_PRODUCER_SUCCESS = 17, PW_PING = 18, PW_PONG = 19,
    PW_REDELIVER = 20, PW_PARTITIONED_METADATA = 21, PW_PARTITIONED_METADATA_RESPONSE = 22,
    PW_LOOKUP = 23, PW_LOOKUP_RESPONSE = 24, PW_ACK_RESPONSE = 38,
};

/* CommandLookupTopicResponse.LookupType, ServerError */
enum { PW_REDIRECT = 0, PW_LOOKUP_CONNECT = 1, PW_LOOKUP_FAILED = 2 };
enum { PW_E_CONSUMER_BUSY = 5, PW_E_SERVICE_NOT_READY = 6, PW_E_CHECKSUM = 9,
       PW_E_INVALID_TOPIC = 17 };

#define PW_MAGIC_CRC32C 0x0e01
#define PW_PROTOCOL_VERSION 21
#define PW_MAX_FIELD 16 /* pw_fields keeps fields 1..15; others are stepped over */

static inline uint32_t
pw_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void
pw_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- CRC-32C (Castagnoli, reflected), SSE 4.2 where the CPU has it ---------- */

static uint32_t pw_crc_table[8][256];
static int pw_crc_hw = -1;

static __attribute__((unused)) void
pw_crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        pw_crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            pw_crc_table[t][i] = (pw_crc_table[t - 1][i] >> 8) ^ pw_crc_table[0][pw_crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    pw_crc_hw = __builtin_cpu_supports("sse4.2");
#else
    pw_crc_hw = 0;
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
pw_crc_sse(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n > 0; n--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

static __attribute__((unused)) uint32_t
pw_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;

    if (pw_crc_hw < 0)
        pw_crc_init();
#if defined(__x86_64__)
    if (pw_crc_hw)
        return ~pw_crc_sse(c, p, n);
#endif
    for (; n >= 8; n -= 8, p += 8) {
        c ^= (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        c = pw_crc_table[7][c & 0xff] ^ pw_crc_table[6][(c >> 8) & 0xff] ^
            pw_crc_table[5][(c >> 16) & 0xff] ^ pw_crc_table[4][c >> 24] ^ pw_crc_table[3][p[4]] ^
            pw_crc_table[2][p[5]] ^ pw_crc_table[1][p[6]] ^ pw_crc_table[0][p[7]];
    }
    for (; n > 0; n--)
        c = pw_crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

/* ---- reading protobuf ---------------------------------------------------------- */

/* A base-128 varint at *p (before end): 0, or -1 when it runs out or past 10 bytes. */
static inline int
pw_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t c = *(*p)++;
        x |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

struct pw_field {
    uint64_t v;       /* a varint's value */
    const uint8_t *p; /* a length-delimited value */
    uint32_t n;
    uint8_t set;      /* 1 varint, 2 length-delimited */
};

/* The next field of a message (at *p, before end): its number, wire type, a
 * varint's value (v) or a length-delimited value (d, dn).  1, 0 at the end, or
 * -1 when it does not parse. */
static inline int
pw_next(const uint8_t **p, const uint8_t *end, uint64_t *num, unsigned *wt, uint64_t *v,
        const uint8_t **d, uint32_t *dn)
{
    uint64_t key;

    if (*p == end)
        return 0;
    if (pw_varint(p, end, &key) < 0 || key >> 3 == 0)
        return -1;
    *num = key >> 3;
    *wt = (unsigned)(key & 7);
    switch (*wt) {
    case 0:
        return pw_varint(p, end, v) < 0 ? -1 : 1;
    case 2:
        if (pw_varint(p, end, v) < 0 || *v > (uint64_t)(end - *p))
            return -1;
        *d = *p;
        *dn = (uint32_t)*v;
        *p += *v;
        return 1;
    case 1:
    case 5:
        if (end - *p < (*wt == 1 ? 8 : 4))
            return -1;
        *p += *wt == 1 ? 8 : 4;
        return 1;
    default:
        return -1;
    }
}

/* The fields 1..PW_MAX_FIELD-1 of a message (the last of a repeated one wins);
 * others are stepped over.  0, or -1 when it does not parse. */
static __attribute__((unused)) int
pw_fields(const uint8_t *p, size_t n, struct pw_field *f)
{
    const uint8_t *end = p + n, *d = NULL;
    uint64_t num, v = 0;
    uint32_t dn = 0;
    unsigned wt;
    int r;

    memset(f, 0, sizeof(*f) * PW_MAX_FIELD);
    while ((r = pw_next(&p, end, &num, &wt, &v, &d, &dn)) > 0) {
        if (num >= PW_MAX_FIELD || (wt != 0 && wt != 2))
            continue;
        f[num].set = wt == 0 ? 1 : 2;
        f[num].v = v;
        f[num].p = d;
        f[num].n = dn;
    }
    return r;
}

/* A BaseCommand: its type and the bytes of its sub-command (NULL, 0 when it has
 * none, as PING).  0, or -1 when it does not parse or has no type. */
static __attribute__((unused)) int
pw_base(const uint8_t *p, size_t n, int *type, const uint8_t **sub, uint32_t *subn)
{
    const uint8_t *end = p + n, *d = NULL, *ld[4];
    uint64_t num, v = 0, t = 0;
    uint32_t dn = 0, ldn[4], ldnum[4];
    unsigned wt;
    int have = 0, nld = 0, r;

    while ((r = pw_next(&p, end, &num, &wt, &v, &d, &dn)) > 0) {
        if (wt == 0 && num == 1) {
            t = v;
            have = 1;
        } else if (wt == 2 && nld < 4) {
            ld[nld] = d;
            ldn[nld] = dn;
            ldnum[nld++] = (uint32_t)num;
        }
    }
    if (r < 0 || !have || t > 1000)
        return -1;
    *type = (int)t;
    *sub = NULL;
    *subn = 0;
    for (int i = nld - 1; i >= 0; i--)
        if (ldnum[i] == t) {
            *sub = ld[i];
            *subn = ldn[i];
            break;
        }
    return 0;
}

/* ---- writing protobuf ---------------------------------------------------------- */

/* A message being written into a fixed buffer; `bad` once it would overflow. */
struct pw_w {
    uint8_t *p;
    size_t n, cap;
    int bad;
};

static inline void
pw_w_varint(struct pw_w *w, uint64_t v)
{
    if (w->cap - w->n < 10) {
        w->bad = 1;
        return;
    }
    while (v >= 0x80) {
        w->p[w->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    w->p[w->n++] = (uint8_t)v;
}

static inline void
pw_w_uint(struct pw_w *w, uint32_t field, uint64_t v)
{
    pw_w_varint(w, (uint64_t)field << 3);
    pw_w_varint(w, v);
}

static inline void
pw_w_bytes(struct pw_w *w, uint32_t field, const void *p, size_t n)
{
    pw_w_varint(w, (uint64_t)field << 3 | 2);
    pw_w_varint(w, n);
    if (w->cap - w->n < n) {
        w->bad = 1;
        return;
    }
    memcpy(w->p + w->n, p, n);
    w->n += n;
}

static inline void
pw_w_str(struct pw_w *w, uint32_t field, const char *s)
{
    pw_w_bytes(w, field, s, strlen(s));
}

/* A nested message: pw_w_open writes its key and keeps one byte for its length,
 * pw_w_close writes the length (moving the message when it needs more bytes). */
static inline size_t
pw_w_open(struct pw_w *w, uint32_t field)
{
    pw_w_varint(w, (uint64_t)field << 3 | 2);
    if (w->n >= w->cap) {
        w->bad = 1;
        return w->n;
    }
    return w->n++;
}

static inline void
pw_w_close(struct pw_w *w, size_t at)
{
    if (w->bad)
        return;
    size_t len = w->n - at - 1, extra = 0;
    for (size_t v = len; v >= 0x80; v >>= 7)
        extra++;
    if (w->cap - w->n < extra) {
        w->bad = 1;
        return;
    }
    memmove(w->p + at + 1 + extra, w->p + at + 1, len);
    w->n += extra;
    size_t v = len;
    for (size_t i = at; v >= 0x80; v >>= 7)
        w->p[i++] = (uint8_t)(v | 0x80);
    w->p[at + extra] = (uint8_t)v;
}

/* A simple command's frame into out (cap bytes): [totalSize][commandSize]
 * [BaseCommand{type, sub}], plus `extra` bytes to follow it (a payload section:
 * counted in totalSize, not written).  Its length, or 0 when it does not fit. */
static __attribute__((unused)) size_t
pw_frame(uint8_t *out, size_t cap, int type, const uint8_t *sub, size_t subn, int has_sub, size_t extra)
{
    struct pw_w w = {out + 8, 0, cap > 8 ? cap - 8 : 0, 0};

    pw_w_uint(&w, 1, (uint64_t)type);
    if (has_sub)
        pw_w_bytes(&w, (uint32_t)type, sub, subn);
    if (w.bad || cap < 8)
        return 0;
    pw_put32(out, (uint32_t)(4 + w.n + extra));
    pw_put32(out + 4, (uint32_t)w.n);
    return 8 + w.n;
}

/* A payload section: [0x0e01][CRC32C][metadataSize][metadata][payload] into out,
 * which has room for 10 + mdn + pn bytes. */
static __attribute__((unused)) size_t
pw_section(uint8_t *out, const uint8_t *md, size_t mdn, const uint8_t *pay, size_t pn)
{
    out[0] = PW_MAGIC_CRC32C >> 8;
    out[1] = PW_MAGIC_CRC32C & 0xff;
    pw_put32(out + 6, (uint32_t)mdn);
    memcpy(out + 10, md, mdn);
    memcpy(out + 10 + mdn, pay, pn);
    pw_put32(out + 2, pw_crc32c(out + 6, 4 + mdn + pn));
    return 10 + mdn + pn;
}

/* "host:port" of a pulsar:// URL into out (size n): 0, or -1. */
static __attribute__((unused)) int
pw_url_addr(const uint8_t *url, size_t len, char *out, size_t n)
{
    static const char pre[] = "pulsar://";
    if (len <= sizeof(pre) - 1 || memcmp(url, pre, sizeof(pre) - 1) != 0)
        return -1;
    url += sizeof(pre) - 1;
    len -= sizeof(pre) - 1;
    while (len > 0 && url[len - 1] == '/')
        len--;
    if (len == 0 || len >= n || memchr(url, '/', len) != NULL)
        return -1;
    memcpy(out, url, len);
    out[len] = 0;
    return 0;
}

#endif
