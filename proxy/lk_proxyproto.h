/*
 * The PROXY protocol (lk_proxyproto.c): the header a load balancer puts in
 * front of a connection's first byte to name the client it carries, in
 * its text form (version 1) and its binary form with TLVs (version 2), as
 * haproxy's doc/proxy-protocol.txt specifies them.  Pure functions over
 * bytes: no sockets, no event_base.
 */
#ifndef LK_PROXYPROTO_H
#define LK_PROXYPROTO_H

#include <stddef.h>
#include <stdint.h>

/* Which versions a listener takes (a bit mask; proxy_protocol = any: both). */
#define LK_PP_V1 1u
#define LK_PP_V2 2u
#define LK_PP_ANY (LK_PP_V1 | LK_PP_V2)

/* A version 1 header is at most 107 bytes with its CRLF; version 2 is 16
 * bytes and at most 65535 more. */
#define LK_PP_V1_MAX 107
#define LK_PP_V2_MIN 16
#define LK_PP_MAX (LK_PP_V2_MIN + 65535)

/* Version 2 TLV types. */
enum {
    LK_PP2_TYPE_ALPN = 0x01,
    LK_PP2_TYPE_AUTHORITY = 0x02,
    LK_PP2_TYPE_CRC32C = 0x03,
    LK_PP2_TYPE_NOOP = 0x04,
    LK_PP2_TYPE_UNIQUE_ID = 0x05,
    LK_PP2_TYPE_SSL = 0x20,
    LK_PP2_TYPE_NETNS = 0x30,
};

/* The connection a header describes.  family is AF_INET or AF_INET6 with
 * addresses in network order, or 0 when the header carries no address
 * (v1 UNKNOWN, v2 LOCAL, UNSPEC or AF_UNIX): the receiver keeps the
 * connection's own. */
struct lk_pp_addr {
    int family;
    unsigned char src[16], dst[16];
    uint16_t sport, dport;
};

struct lk_pp_hdr {
    unsigned version; /* LK_PP_V1 or LK_PP_V2 */
    unsigned local : 1; /* v2 LOCAL: a health check from the balancer itself */
    struct lk_pp_addr addr;
    const uint8_t *tlv; /* v2: the TLVs, inside the parsed bytes */
    size_t tlv_len;
};

/* Whether p (len bytes, the connection's first) starts a PROXY header of
 * a version in the mask accept: 1 yes, 0 no, -1 too few bytes to tell. */
int lk_pp_detect(const uint8_t *p, size_t len, unsigned accept);

/* Parses the header at p: returns its length (> 0) and fills h, 0 when
 * more bytes are needed (len is short of the length the header needs, and
 * no byte so far is wrong), or -1 with a reason in err (a signature of a
 * version not in accept, a v1 line over 107 bytes, a bad address or port,
 * an unknown command, family or protocol, addresses or TLVs overrunning
 * the length, a wrong CRC32C). */
int lk_pp_parse(const uint8_t *p, size_t len, unsigned accept, struct lk_pp_hdr *h, char *err,
                size_t errlen);

/* The first TLV of type in h (v2): 1 with its value, or 0. */
int lk_pp_tlv_find(const struct lk_pp_hdr *h, unsigned type, const uint8_t **val, size_t *vlen);

/* Writes a header of version (LK_PP_V1 or LK_PP_V2) for a into out:
 * returns its length, or -1 when outlen is too small (LK_PP_V1_MAX and 52
 * bytes always suffice).  A family of 0 writes v1 UNKNOWN, v2 LOCAL. */
int lk_pp_write(unsigned version, const struct lk_pp_addr *a, uint8_t *out, size_t outlen);

/* CRC32C (Castagnoli) of n bytes, as the v2 CRC32C TLV holds it. */
uint32_t lk_pp_crc32c(uint32_t crc, const uint8_t *p, size_t n);

#endif
