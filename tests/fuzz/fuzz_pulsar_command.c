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
 *   - read by a protobuf reader written here, every message (BaseCommand,
 *     the edited command, any other command of proxy/pulsar.proto it
 *     holds) has the same known fields (the last of each) but the edited
 *     ones, and the same unknown fields in the same order with the same
 *     bytes;
 *   - applying the edit to the result changes nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_pulsar_codec.h"

/* ---- a protobuf reader of the harness's own ------------------------- */

#define MAXPF 8192

struct pf {
    uint32_t num;
    unsigned wt;
    uint64_t v;         /* wire type 0 */
    const uint8_t *val; /* wire type 2: the content */
    size_t val_len;
    const uint8_t *raw; /* the bytes after the tag, as they came */
    size_t raw_len;
};

static int
rd_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (*at >= len)
            return -1;
        uint8_t b = p[(*at)++];
        if (shift < 64)
            *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* All the fields of a message, in order; -1 if it is not protobuf. */
static long
fields(const uint8_t *p, size_t len, struct pf *out, size_t max)
{
    size_t at = 0, n = 0;

    while (at < len) {
        uint64_t key, l;
        if (n == max || rd_varint(p, len, &at, &key) != 0)
            return -1;
        struct pf *f = &out[n++];
        f->num = (uint32_t)(key >> 3);
        f->wt = (unsigned)(key & 7);
        f->raw = p + at;
        switch (f->wt) {
        case 0:
            if (rd_varint(p, len, &at, &f->v) != 0)
                return -1;
            break;
        case 1:
        case 5:
            l = f->wt == 1 ? 8 : 4;
            if (len - at < l)
                return -1;
            at += l;
            break;
        case 2:
            if (rd_varint(p, len, &at, &l) != 0 || l > len - at)
                return -1;
            f->val = p + at;
            f->val_len = (size_t)l;
            at += (size_t)l;
            break;
        default:
            return -1;
        }
        f->raw_len = (size_t)(p + at - f->raw);
    }
    return (long)n;
}

/* The fields of proxy/pulsar.proto, by command (the BaseCommand field
 * number, which is its type): field numbers and whether bytes. */
struct decl {
    int type;
    uint32_t nums[9];
    size_t n;
};

static const struct decl decls[] = {
    {LK_PULSAR_CONNECT, {1, 4, 6}, 3},
    {LK_PULSAR_LOOKUP, {1, 2, 3, 7}, 4},
    {LK_PULSAR_LOOKUP_RESPONSE, {1, 2, 3, 4, 5, 6, 7, 8}, 8},
    {LK_PULSAR_CLOSE_PRODUCER, {1, 2, 3, 4}, 4},
    {LK_PULSAR_CLOSE_CONSUMER, {1, 2, 3, 4}, 4},
    {LK_PULSAR_TOPIC_MIGRATED, {1, 2, 3, 4}, 4},
};
#define NDECLS (sizeof(decls) / sizeof(decls[0]))

static const struct decl *
decl_of(uint32_t num)
{
    for (size_t i = 0; i < NDECLS; i++)
        if ((uint32_t)decls[i].type == num)
            return &decls[i];
    return NULL;
}

static int
declared(const struct decl *d, uint32_t num)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->nums[i] == num)
            return 1;
    return 0;
}

/* The last occurrence of field num, or NULL. */
static const struct pf *
last(const struct pf *f, long n, uint32_t num)
{
    const struct pf *r = NULL;
    for (long i = 0; i < n; i++)
        if (f[i].num == num)
            r = &f[i];
    return r;
}

static int
same_value(const struct pf *a, const struct pf *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    if (a->wt != b->wt)
        return 0;
    if (a->wt == 0)
        return a->v == b->v;
    return a->val_len == b->val_len && memcmp(a->val, b->val, a->val_len) == 0;
}

/* The unknown fields of a and b (those d does not declare; for d NULL,
 * BaseCommand's: all but type and the declared commands) are the same,
 * in the same order, with the same bytes. */
static void
same_unknown(const struct decl *d, const struct pf *a, long na, const struct pf *b, long nb)
{
    long i = 0, j = 0;

    for (;;) {
        while (i < na &&
               (d != NULL ? declared(d, a[i].num) : a[i].num == 1 || decl_of(a[i].num) != NULL))
            i++;
        while (j < nb &&
               (d != NULL ? declared(d, b[j].num) : b[j].num == 1 || decl_of(b[j].num) != NULL))
            j++;
        if (i == na || j == nb)
            break;
        LK_FUZZ_CHECK(a[i].num == b[j].num && a[i].wt == b[j].wt);
        LK_FUZZ_CHECK(a[i].raw_len == b[j].raw_len &&
                      memcmp(a[i].raw, b[j].raw, a[i].raw_len) == 0);
        i++, j++;
    }
    LK_FUZZ_CHECK(i == na && j == nb);
}

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

static struct pf fa[MAXPF], fb[MAXPF], sa[MAXPF], sb[MAXPF];

/* Compares the original command (a) and the re-encoded one (b) field by
 * field, with the edit's fields (in the type's command) left out. */
static void
compare(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, int type,
        const uint32_t *edited, size_t nedited)
{
    long na = fields(a, alen, fa, MAXPF), nb = fields(b, blen, fb, MAXPF);

    LK_FUZZ_CHECK(na >= 0 && nb >= 0);
    LK_FUZZ_CHECK(same_value(last(fa, na, 1), last(fb, nb, 1)));
    same_unknown(NULL, fa, na, fb, nb);
    for (size_t k = 0; k < NDECLS; k++) {
        const struct decl *d = &decls[k];
        const struct pf *ca = last(fa, na, (uint32_t)d->type),
                        *cb = last(fb, nb, (uint32_t)d->type);
        LK_FUZZ_CHECK((ca == NULL) == (cb == NULL));
        if (ca == NULL)
            continue;
        long nsa = fields(ca->val, ca->val_len, sa, MAXPF);
        long nsb = fields(cb->val, cb->val_len, sb, MAXPF);
        LK_FUZZ_CHECK(nsa >= 0 && nsb >= 0);
        for (size_t i = 0; i < d->n; i++) {
            int skip = 0;
            for (size_t e = 0; d->type == type && e < nedited; e++)
                skip |= edited[e] == d->nums[i];
            if (!skip)
                LK_FUZZ_CHECK(same_value(last(sa, nsa, d->nums[i]), last(sb, nsb, d->nums[i])));
        }
        same_unknown(d, sa, nsa, sb, nsb);
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
    LK_FUZZ_CHECK(lk_pulsar_peek_type(c2, csize, csize) == d.type);

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
    compare(cmd, len, c2, csize, d.type, edited, ne);

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
