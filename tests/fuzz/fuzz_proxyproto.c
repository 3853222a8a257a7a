/*
 * Fuzzes the PROXY protocol reader (proxy/lk_proxyproto.c, lk_pp_parse):
 * the input is a connection's first bytes.  Invariants: the length
 * returned is within the input and at most a header's (107 bytes for v1,
 * 16 + 65535 for v2); it is the same for each accepted version mask that
 * includes the header's version; a shorter prefix of an accepted header
 * asks for more (0), never fails or succeeds; TLVs found lie inside the
 * header; an address found survives writing and parsing it again, and
 * lk_addr_text writes its source as inet_ntop does.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "fuzz_util.h"
#include "lk_limit.h"
#include "lk_proxyproto.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    struct lk_pp_hdr h, h2;
    char err[128];
    int n = lk_pp_parse(data, len, LK_PP_ANY, &h, err, sizeof(err));

    LK_FUZZ_CHECK(n >= -1 && (n <= 0 || (size_t)n <= len));
    LK_FUZZ_CHECK(n <= 0 || (size_t)n <= (h.version == LK_PP_V1 ? LK_PP_V1_MAX : LK_PP_MAX));
    int d = lk_pp_detect(data, len, LK_PP_ANY);
    LK_FUZZ_CHECK(n <= 0 || d == 1);
    LK_FUZZ_CHECK(d != 0 || n == -1);
    if (n <= 0)
        return 0;
    /* The same with only its own version accepted; refused with the other. */
    LK_FUZZ_CHECK(lk_pp_parse(data, len, h.version, &h2, err, sizeof(err)) == n);
    LK_FUZZ_CHECK(lk_pp_parse(data, len, LK_PP_ANY & ~h.version, &h2, err, sizeof(err)) == -1);
    /* Each prefix asks for more. */
    for (size_t i = 0; i < (size_t)n; i++)
        LK_FUZZ_CHECK(lk_pp_parse(data, i, LK_PP_ANY, &h2, err, sizeof(err)) == 0);
    if (h.tlv != NULL) {
        LK_FUZZ_CHECK(h.tlv >= data && h.tlv + h.tlv_len == data + n);
        for (unsigned t = 0; t < 256; t += 17) {
            const uint8_t *v;
            size_t vl;
            if (lk_pp_tlv_find(&h, t, &v, &vl))
                LK_FUZZ_CHECK(v >= h.tlv && v + vl <= h.tlv + h.tlv_len);
        }
    }
    /* Written again in either version, it reads back the same address. */
    if (h.addr.family != 0) {
        uint8_t out[LK_PP_V1_MAX];
        char text[LK_ADDR_TEXT];
        for (unsigned v = LK_PP_V1; v <= LK_PP_V2; v++) {
            int w = lk_pp_write(v, &h.addr, out, sizeof(out));
            LK_FUZZ_CHECK(w > 0);
            LK_FUZZ_CHECK(lk_pp_parse(out, (size_t)w, v, &h2, err, sizeof(err)) == w);
            LK_FUZZ_CHECK(memcmp(&h.addr, &h2.addr, sizeof(h.addr)) == 0);
        }
        /* As lookout keeps the client (lk_conn.c's pp_take), its text is
         * inet_ntop's, however lk_addr_text writes it. */
        struct lk_addr la = {.family = (uint8_t)h.addr.family, .port = h.addr.sport};
        char want[LK_ADDR_TEXT], ip[INET6_ADDRSTRLEN];
        memcpy(la.ip, h.addr.src, h.addr.family == AF_INET ? 4 : 16);
        LK_FUZZ_CHECK(inet_ntop(h.addr.family, h.addr.src, ip, sizeof(ip)) != NULL);
        snprintf(want, sizeof(want), h.addr.family == AF_INET ? "%s:%u" : "[%s]:%u", ip,
                 h.addr.sport);
        LK_FUZZ_CHECK(lk_addr_text(&la, 1, text) == strlen(want) && strcmp(text, want) == 0);
        LK_FUZZ_CHECK(lk_addr_text(&la, 0, text) == strlen(ip) && strcmp(text, ip) == 0);
    }
    return 0;
}
