/*
 * Fuzzes Pulsar command decoding and re-encoding (proxy/lk_pulsar_codec.c:
 * lk_pulsar_decode, lk_pulsar_reencode).  Input: a flags byte (bit 0
 * set_url, bit 1 set_url_tls, bits 2-3 proxy_through: 1 sets 0, 2 sets 1,
 * else left; bit 4 strip_listener), a byte choosing the two URLs (low
 * nibble the URL, high nibble the TLS one, from a table below: cleared,
 * the decoded value itself, external addresses, empty, long, with a NUL),
 * then a BaseCommand.  The unit tests write such inputs (LK_PULSAR_DUMP=DIR
 * tests/unit/run pulsar_codec).  Invariants:
 *   - only a re-encoded command touches the output buffer; what does not
 *     decode is never re-encoded;
 *   - a command that decodes is re-encoded exactly when the edit changes
 *     it (as read from the decoded values), and otherwise left alone (0);
 *   - a re-encoded frame has sizes that match, decodes again, with the
 *     edited URLs exactly, the listener gone when stripped,
 *     proxy_through as set, and everything else as it was;
 *   - read by the harnesses' own protobuf reader (fuzz_util.c), every
 *     message (BaseCommand, the edited command, any other command of
 *     proxy/pulsar.proto it holds) has the same known fields (the last of
 *     each) but the edited ones, and the same unknown fields in the same
 *     order with the same bytes;
 *   - applying the edit to the result changes nothing;
 *   - the command, and a re-encoded one, are read as the broker reads
 *     them (lk_fuzz_pulsar_same_reading: the type, protobuf-c's type,
 *     listener name and URLs, each field lookout reads there once).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_pulsar_codec.h"

/* ---- the edit --------------------------------------------------------- */

#define LONG_URL                                                                                   \
    "pulsar+ssl://a-broker-name-long-enough-that-its-length-takes-two-bytes.pulsar.example.com."   \
    "another-label-to-pass-one-hundred-and-twenty-seven-bytes.example:6651"

static const struct lk_str urls[] = {
    LK_STRLIT("pulsar://b1.pulsar.example.com:6650"),
    LK_STRLIT("pulsar+ssl://b1.pulsar.example.com:6651"),
    LK_STRLIT(""),
    LK_STRLIT(LONG_URL),
    LK_STRLIT("pulsar://a\0b:1"),
    LK_STRLIT("pulsar://10.0.0.11:6650"),
};

/* choice 0: cleared; 1: the value decoded (cleared if absent); 2-7: urls */
static const struct lk_str *
pick(unsigned choice, int has, const struct lk_str *decoded, struct lk_str *copy)
{
    choice &= 7;
    if (choice == 0 || (choice == 1 && !has))
        return NULL;
    if (choice == 1) {
        *copy = *decoded;
        return copy;
    }
    return &urls[choice - 2];
}

static int
has_url_pair(int type)
{
    return type == LK_PULSAR_LOOKUP_RESPONSE || type == LK_PULSAR_CLOSE_PRODUCER ||
           type == LK_PULSAR_CLOSE_CONSUMER || type == LK_PULSAR_TOPIC_MIGRATED;
}

/* Whether the edit changes the URL field (has, now) into to. */
static int
url_changes(int set, const struct lk_str *to, int has, struct lk_str now)
{
    if (!set)
        return 0;
    return to == NULL ? has : !has || !lk_str_eq(now, *to);
}

/* The field as the edit leaves it: present with to, or absent. */
static void
check_url(int set, const struct lk_str *to, int has0, struct lk_str v0, int has1, struct lk_str v1)
{
    if (!set) {
        LK_FUZZ_CHECK(has1 == has0 && lk_str_eq(v1, v0));
    } else if (to == NULL) {
        LK_FUZZ_CHECK(!has1);
    } else {
        LK_FUZZ_CHECK(has1 && lk_str_eq(v1, *to));
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lk_pulsar_cmd d, d2;
    struct lk_str copy_url, copy_tls;

    if (size < 2)
        return 0;
    const uint8_t flags = data[0], choice = data[1];
    const uint8_t *cmd = data + 2;
    size_t len = size - 2;
    int rd = lk_pulsar_decode(cmd, len, &d);

    struct lk_pulsar_edit e = {0};
    static const int pt[4] = {-1, 0, 1, -1};
    e.set_url = flags & 1;
    e.set_url_tls = (flags >> 1) & 1;
    e.proxy_through = pt[(flags >> 2) & 3];
    e.strip_listener = (flags >> 4) & 1;
    e.url = pick(choice, d.has_url, &d.url, &copy_url);
    e.url_tls = pick(choice >> 4, d.has_url_tls, &d.url_tls, &copy_tls);

    struct evbuffer *out = evbuffer_new(), *again = evbuffer_new();
    int rc = lk_pulsar_reencode(cmd, len, &e, out);
    LK_FUZZ_CHECK(rc >= -1 && rc <= 1);
    LK_FUZZ_CHECK(rc == 1 || evbuffer_get_length(out) == 0);
    lk_fuzz_pulsar_same_reading(cmd, len);
    LK_FUZZ_CHECK(rd >= -2 && rd <= 0);
    if (rd != 0) {
        LK_FUZZ_CHECK(rc == -1);
        goto end;
    }

    /* what the edit changes, from the decoded values */
    int pair = has_url_pair(d.type);
    int ch_url = pair && url_changes(e.set_url, e.url, d.has_url, d.url);
    int ch_tls = pair && url_changes(e.set_url_tls, e.url_tls, d.has_url_tls, d.url_tls);
    int ch_pt = d.type == LK_PULSAR_LOOKUP_RESPONSE && e.proxy_through >= 0 &&
                (d.proxy_through == 1) != (e.proxy_through == 1);
    int ch_ls = d.type == LK_PULSAR_LOOKUP && e.strip_listener && d.has_listener;
    LK_FUZZ_CHECK(rc == (ch_url || ch_tls || ch_pt || ch_ls ? 1 : 0));
    if (rc != 1)
        goto end;

    size_t olen = evbuffer_get_length(out);
    const uint8_t *o = evbuffer_pullup(out, -1);
    uint32_t total, csize;
    LK_FUZZ_CHECK(olen > LK_PULSAR_PREFIX);
    LK_FUZZ_CHECK(lk_pulsar_sizes(o, UINT32_MAX, &total, &csize) == 0);
    LK_FUZZ_CHECK(total == olen - 4 && csize == olen - LK_PULSAR_PREFIX);
    const uint8_t *c2 = o + LK_PULSAR_PREFIX;
    LK_FUZZ_CHECK(lk_pulsar_decode(c2, csize, &d2) == 0);
    LK_FUZZ_CHECK(d2.type == d.type);
    LK_FUZZ_CHECK(lk_pulsar_command_type(c2, csize) == d.type);
    lk_fuzz_pulsar_same_reading(c2, csize);

    /* the edited fields as asked, the others as they were */
    check_url(pair && e.set_url, e.url, d.has_url, d.url, d2.has_url, d2.url);
    check_url(pair && e.set_url_tls, e.url_tls, d.has_url_tls, d.url_tls, d2.has_url_tls,
              d2.url_tls);
    if (d.type == LK_PULSAR_LOOKUP && e.strip_listener)
        LK_FUZZ_CHECK(!d2.has_listener);
    else
        LK_FUZZ_CHECK(d2.has_listener == d.has_listener && lk_str_eq(d2.listener, d.listener));
    if (ch_pt)
        LK_FUZZ_CHECK(d2.proxy_through == e.proxy_through);
    else
        LK_FUZZ_CHECK(d2.proxy_through == d.proxy_through);
    LK_FUZZ_CHECK(d2.has_request_id == d.has_request_id && d2.request_id == d.request_id);
    LK_FUZZ_CHECK(d2.lookup_type == d.lookup_type);
    LK_FUZZ_CHECK(d2.protocol_version == d.protocol_version);
    LK_FUZZ_CHECK(d2.has_proxy_to_broker_url == d.has_proxy_to_broker_url &&
                  lk_str_eq(d2.proxy_to_broker_url, d.proxy_to_broker_url));

    /* field by field, unknown ones included */
    uint32_t edited[3];
    size_t ne = 0;
    if (pair) {
        uint32_t u = d.type == LK_PULSAR_LOOKUP_RESPONSE ? 1 : 3;
        if (ch_url)
            edited[ne++] = u;
        if (ch_tls)
            edited[ne++] = u + 1;
    }
    if (ch_pt)
        edited[ne++] = 8;
    if (ch_ls)
        edited[ne++] = 7;
    lk_fuzz_pulsar_same_fields(cmd, len, c2, csize, d.type, edited, ne);

    /* the edit again: nothing to do (a URL copied from the decoded value,
     * which that choice never changes, now points at the new bytes) */
    struct lk_str u2, t2;
    e.url = pick(choice, d2.has_url, &d2.url, &u2);
    e.url_tls = pick(choice >> 4, d2.has_url_tls, &d2.url_tls, &t2);
    LK_FUZZ_CHECK(lk_pulsar_reencode(c2, csize, &e, again) == 0);
    LK_FUZZ_CHECK(evbuffer_get_length(again) == 0);
end:
    evbuffer_free(out);
    evbuffer_free(again);
    return 0;
}
