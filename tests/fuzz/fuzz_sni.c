/*
 * Fuzzes the server_name extension reader (proxy/lk_tls.c,
 * lk_tls_sni_parse), which picks the session id context of a client's
 * handshake: the input is the extension body as a ClientHello carries it.
 * Invariants: a name is returned exactly when a naive walk of RFC 6066's
 * layout (2-byte list length, one host_name entry, 2-byte name length,
 * 1-255 bytes without NUL, nothing left over) finds one; then it is those
 * bytes lower-cased, NUL-terminated, with no upper-case letter; a buffer
 * too small for it is refused, never overrun.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_tls.h"

static int
lower(int ch)
{
    return ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char out[256], small[8];
    int n = lk_tls_sni_parse(data, len, out, sizeof(out));

    /* The reference walk. */
    int want = -1;
    if (len >= 5 && ((size_t)data[0] << 8 | data[1]) == len - 2 && data[2] == 0) {
        size_t m = (size_t)data[3] << 8 | data[4];
        if (m == len - 5 && m >= 1 && m <= 255) {
            want = (int)m;
            for (size_t i = 0; i < m; i++)
                if (data[5 + i] == 0)
                    want = -1;
        }
    }
    LK_FUZZ_CHECK(n == want);
    if (n >= 0) {
        LK_FUZZ_CHECK(out[n] == '\0');
        for (int i = 0; i < n; i++) {
            LK_FUZZ_CHECK((unsigned char)out[i] == lower(data[5 + i]));
            LK_FUZZ_CHECK(!(out[i] >= 'A' && out[i] <= 'Z'));
        }
    }
    /* A buffer that cannot hold it (with its NUL) is refused whole. */
    memset(small, 'x', sizeof(small));
    int s = lk_tls_sni_parse(data, len, small, sizeof(small) - 1);
    LK_FUZZ_CHECK(s == (n >= 0 && (size_t)n < sizeof(small) - 1 ? n : -1));
    LK_FUZZ_CHECK(small[sizeof(small) - 1] == 'x');
    return 0;
}
