/*
 * Tests for proxy/lk_pulsar_codec.c.  Commands are written by a small
 * protobuf writer of this file's own, from the wire format and Pulsar's
 * field numbers (facts/pulsar.md section 4), apart from both the codec's
 * walk and protobuf-c.  A rewrite must equal, byte for byte, the command
 * written again with the new values: known fields in field order, each
 * once, then the unknown ones in the order they came with their bytes as
 * they were (what protobuf-c's pack writes); so every field the edit does
 * not name, and the frame sizes, are checked at once.
 *
 * LK_PULSAR_DUMP=DIR writes the commands built here as inputs of
 * tests/fuzz/fuzz_pulsar_command.c into DIR/pulsar_command/, as framed
 * streams of tests/fuzz/fuzz_pulsar_frame.c into DIR/pulsar_frame/, and
 * as inputs of tests/fuzz/fuzz_pulsar_filter.c (whose map has the broker
 * of INT_URL) into DIR/pulsar_filter/, to seed their corpora
 * (LK_PULSAR_DUMP=tests/fuzz/corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <event2/buffer.h>

#include "lk_pulsar_codec.h"
#include "lk_test.h"
#include "lk_test_wire.h"

static void
reset(struct tb *b)
{
    b->len = 0;
}

static void
tb_free(struct tb *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* A BaseCommand of type with sub as its sub-command (field = type). */
static void
base(struct tb *out, int type, const struct tb *sub)
{
    reset(out);
    pb_uint(out, 1, (uint64_t)type);
    if (sub != NULL)
        pb_msg(out, (unsigned)type, sub);
}

/* ---- seeds for the fuzzers -------------------------------------------- */

/* Writes an input of a fuzzer into DIR/sub/, named by what it is and a
 * hash of its bytes (each case runs in a process of its own). */
static void
dump(const char *sub, const char *name, const uint8_t *h, size_t hlen, const uint8_t *p, size_t len)
{
    const char *dir = getenv("LK_PULSAR_DUMP");
    char path[512];
    uint64_t fnv = 14695981039346656037ull;

    if (dir == NULL)
        return;
    for (size_t i = 0; i < hlen + len; i++)
        fnv = (fnv ^ (i < hlen ? h[i] : p[i - hlen])) * 1099511628211ull;
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/%s/%s-%016llx", dir, sub, name, (unsigned long long)fnv);
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return;
    fwrite(h, 1, hlen, fp);
    fwrite(p, 1, len, fp);
    fclose(fp);
}

/* An input of fuzz_pulsar_command: the edit's two bytes, then the
 * command (see that file). */
static void
dump_command(const char *name, int flags, int urls, const struct tb *cmd)
{
    uint8_t h[2] = {(uint8_t)flags, (uint8_t)urls};
    /* and framed, twice, for fuzz_pulsar_frame: max byte 0, the sizes */
    uint8_t f[1 + LK_PULSAR_PREFIX] = {0};
    uint32_t total = (uint32_t)cmd->len + 4;
    uint8_t *two = malloc(2 * (LK_PULSAR_PREFIX + cmd->len));

    dump("pulsar_command", name, h, 2, cmd->p, cmd->len);
    /* fuzz_pulsar_filter's flags: on prod/b1 with its lookup listener, and
     * on west/w2 under service routing */
    for (int i = 0; i < 2; i++) {
        uint8_t ff = i == 0 ? 0x00 : 0x14;
        dump("pulsar_filter", name, &ff, 1, cmd->p, cmd->len);
    }
    f[1] = (uint8_t)(total >> 24), f[2] = (uint8_t)(total >> 16), f[3] = (uint8_t)(total >> 8);
    f[4] = (uint8_t)total;
    f[5] = (uint8_t)(cmd->len >> 24), f[6] = (uint8_t)(cmd->len >> 16);
    f[7] = (uint8_t)(cmd->len >> 8), f[8] = (uint8_t)cmd->len;
    memcpy(two, f + 1, LK_PULSAR_PREFIX);
    memcpy(two + LK_PULSAR_PREFIX, cmd->p, cmd->len);
    memcpy(two + LK_PULSAR_PREFIX + cmd->len, two, LK_PULSAR_PREFIX + cmd->len);
    dump("pulsar_frame", name, f, 1, two, 2 * (LK_PULSAR_PREFIX + cmd->len));
    free(two);
}

/* An input of fuzz_pulsar_frame: a byte choosing the max frame size (0:
 * the default), then the stream. */
static void
dump_stream(const char *name, const uint8_t *s, size_t len)
{
    uint8_t h[1] = {0};

    dump("pulsar_frame", name, h, 1, s, len);
}

/* ---- helpers ---------------------------------------------------------- */

static int
str_is(struct lk_str s, const char *want)
{
    return lk_str_eq(s, lk_str_c(want));
}

static int
points_into(struct lk_str s, const struct tb *b)
{
    return s.p >= (const char *)b->p && s.p + s.len <= (const char *)b->p + b->len;
}

/* Whether out holds exactly the frame of want. */
static int
is_frame_of(struct evbuffer *out, const struct tb *want)
{
    size_t n = evbuffer_get_length(out);
    const uint8_t *p = evbuffer_pullup(out, -1);
    uint32_t total, cmd;

    if (n != want->len + LK_PULSAR_PREFIX ||
        lk_pulsar_sizes(p, LK_PULSAR_DEFAULT_MAX_FRAME, &total, &cmd) != 0 || total != n - 4 ||
        cmd != want->len)
        return 0;
    if (memcmp(p + LK_PULSAR_PREFIX, want->p, want->len) == 0)
        return 1;
    for (size_t i = 0; i < want->len; i++)
        if (p[LK_PULSAR_PREFIX + i] != want->p[i]) {
            lk_test_diag("first difference at command byte %zu: %02x, want %02x", i,
                         p[LK_PULSAR_PREFIX + i], want->p[i]);
            break;
        }
    return 0;
}

static void
drain(struct evbuffer *b)
{
    evbuffer_drain(b, evbuffer_get_length(b));
}

static const struct lk_str ext = LK_STRLIT("pulsar://b1.pulsar.example.com:6650");
static const struct lk_str ext_tls = LK_STRLIT("pulsar+ssl://b1.pulsar.example.com:6651");
#define INT_URL "pulsar://broker-1.pulsar-broker.pulsar.svc.cluster.local:6650"
#define INT_URL_TLS "pulsar+ssl://broker-1.pulsar-broker.pulsar.svc.cluster.local:6651"

/* ---- sizes ------------------------------------------------------------- */

static void
be32_to(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int
sizes(uint32_t total, uint32_t cmd, uint32_t max, uint32_t *t, uint32_t *c)
{
    uint8_t p[8];
    be32_to(p, total);
    be32_to(p + 4, cmd);
    return lk_pulsar_sizes(p, max, t, c);
}

static void
test_sizes(void)
{
    uint32_t t, c;
    const uint32_t max = LK_PULSAR_DEFAULT_MAX_FRAME;

    ok(sizes(9, 5, max, &t, &c) == 0 && t == 9 && c == 5, "a simple frame: 4 + commandSize");
    ok(sizes(1000, 5, max, &t, &c) == 0 && t == 1000 && c == 5, "a payload frame");
    ok(sizes(8, 5, max, &t, &c) == -1, "totalSize < 4 + commandSize");
    ok(sizes(3, 0, max, &t, &c) == -1, "totalSize under 4");
    ok(sizes(4, 0, max, &t, &c) == -1 && sizes(100, 0, max, &t, &c) == -1, "commandSize 0");
    ok(sizes(0xffffffff, 0xfffffffb, 0xffffffff, &t, &c) == 0, "the largest sizes, no overflow");
    ok(sizes(0xffffffff, 0xfffffffc, 0xffffffff, &t, &c) == -1,
       "commandSize one over, at the largest");
    ok(sizes(max, 5, max, &t, &c) == 0, "totalSize at max_frame");
    ok(sizes(max + 1, 5, max, &t, &c) == -1 && t == max + 1, "over max_frame, and what it said");
    ok(sizes(0x16030100, 0x2a010000, max, &t, &c) == -1, "a TLS ClientHello read as sizes");
    ok(LK_PULSAR_DEFAULT_MAX_FRAME > 5 * 1024 * 1024, "the default max is over 5 MiB");
}

/* ---- the type ------------------------------------------------------------ */

static void
test_type(void)
{
    struct tb c = {0}, s = {0};

    base(&c, LK_PULSAR_PING, NULL);
    pb_bytes(&c, LK_PULSAR_PING, "", 0);
    ok(lk_pulsar_command_type(c.p, c.len) == LK_PULSAR_PING, "PING");

    /* a type written in two bytes (a future command) */
    base(&c, 200, NULL);
    ok(lk_pulsar_command_type(c.p, c.len) == 200, "type 200");

    /* the type after the sub-command */
    reset(&s);
    pb_str(&s, 1, "persistent://public/default/t");
    pb_uint(&s, 2, 7);
    reset(&c);
    pb_msg(&c, 23, &s);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP);
    ok(lk_pulsar_command_type(c.p, c.len) == LK_PULSAR_LOOKUP, "type not first");

    /* a tag written in 4 bytes and a 10-byte value */
    reset(&c);
    put(&c, "\x88\x80\x80\x00", 4);
    put(&c, "\x97\x80\x80\x80\x80\x80\x80\x80\x80\x00", 10);
    ok(lk_pulsar_command_type(c.p, c.len) == 23, "a type in a 4-byte tag and 10 bytes: 23");

    /* malformed */
    static const struct {
        const char *bytes;
        size_t len;
        const char *what;
    } bad[] = {
        {"\x0a\x01\x02", 3, "field 1 length-delimited"},
        {"\x0d\x01\x02\x03\x04", 5, "field 1 fixed32"},
        {"\x00\x02", 2, "field 0"},
        {"\x0b\x02", 2, "a group (wire type 3)"},
        {"\x0e\x02", 2, "wire type 6"},
        {"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11, "a negative type"},
        {"\x08\x80\x80\x80\x80\x08", 6, "a type of 2^31"},
        {"\x88\x80\x80\x80\x80\x00\x02", 7, "a tag of 6 bytes"},
        {"\x08", 1, "a command that ends after the tag"},
        {"\x08\x92", 2, "a command that ends within the type"},
        {"\x88", 1, "a command that ends within the tag"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const uint8_t *p = (const uint8_t *)bad[i].bytes;
        ok(lk_pulsar_command_type(p, bad[i].len) == -2, "%s: -2", bad[i].what);
    }

    /* Two types: protobuf, and so the broker, takes the last; refused,
     * whichever comes first and whatever lies between (issue 18 item 6) */
    reset(&c);
    pb_uint(&c, 1, LK_PULSAR_PING);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP);
    ok(lk_pulsar_command_type(c.p, c.len) == LK_PULSAR_TYPE_TWICE, "two types: refused");
    reset(&s);
    pb_str(&s, 1, "persistent://public/default/t");
    pb_uint(&s, 2, 7);
    pb_str(&s, 7, "internal");
    base(&c, LK_PULSAR_PING, NULL);
    pb_bytes(&c, LK_PULSAR_PING, "", 0);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP);
    pb_msg(&c, LK_PULSAR_LOOKUP, &s);
    ok(lk_pulsar_command_type(c.p, c.len) == LK_PULSAR_TYPE_TWICE,
       "{PING, ping, LOOKUP, lookupTopic{listener}}: refused");
    struct lk_pulsar_cmd d;
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1, "... and lk_pulsar_decode refuses it");
    dump_command("two-types", 0x10, 0, &c);
    reset(&c);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP);
    pb_msg(&c, LK_PULSAR_LOOKUP, &s);
    ok(lk_pulsar_command_type(c.p, c.len) == LK_PULSAR_TYPE_TWICE, "the same type twice: refused");
    reset(&c);
    pb_bytes(&c, 18, "", 0);
    ok(lk_pulsar_command_type(c.p, c.len) == -2, "no type: -2");
    reset(&c);
    pb_uint(&c, 1, LK_PULSAR_PING);
    put(&c, "\x92\x01\x05", 3);
    ok(lk_pulsar_command_type(c.p, c.len) == -2, "a length past the end: -2");
    ok(lk_pulsar_command_type(c.p, 0) == -2, "an empty command: -2");

    /* the one-byte type and one sub-command shape (read without the whole
     * walk), at its edges: each as the walk answers */
    static const struct {
        const char *bytes;
        size_t len;
        int type;
        const char *what;
    } shape[] = {
        {"\x08\x06\x32\x00", 4, 6, "SEND, an empty sub-command"},
        {"\x08\x18\xc2\x01\x00", 5, 24, "a two-byte tag"},
        {"\x08\x06\xb2\x80\x00\x00", 6, 6, "a three-byte tag"},
        {"\x08\x06\x32\x00\x3a\x00", 6, 6, "a second field after it"},
        {"\x08\x06\x32\x00\x08\x12", 6, LK_PULSAR_TYPE_TWICE, "a second type after it"},
        {"\x08\x06\x02\x00", 4, -2, "field 0"},
        {"\x08\x06\x0a\x00", 4, -2, "field 1 length-delimited after the type"},
        {"\x08\x06\x32\x02\x00", 5, -2, "a length one past the end"},
        {"\x08\x06\x32\x80\x80\x80\x80\x08", 8, -2, "a length of 2^31"},
        {"\x08\x06\xb2", 3, -2, "a command that ends within the tag"},
    };
    for (size_t i = 0; i < sizeof(shape) / sizeof(shape[0]); i++) {
        const uint8_t *p = (const uint8_t *)shape[i].bytes;
        ok(lk_pulsar_command_type(p, shape[i].len) == shape[i].type, "%s: %d", shape[i].what,
           shape[i].type);
    }

    uint8_t stream[64];
    reset(&c);
    base(&c, LK_PULSAR_PING, NULL);
    pb_bytes(&c, LK_PULSAR_PING, "", 0);
    be32_to(stream, (uint32_t)c.len + 4);
    be32_to(stream + 4, (uint32_t)c.len);
    memcpy(stream + 8, c.p, c.len);
    size_t n = 8 + c.len;
    base(&c, LK_PULSAR_PONG, NULL);
    pb_bytes(&c, LK_PULSAR_PONG, "", 0);
    be32_to(stream + n, (uint32_t)c.len + 4);
    be32_to(stream + n + 4, (uint32_t)c.len);
    memcpy(stream + n + 8, c.p, c.len);
    dump_stream("ping-pong", stream, n + 8 + c.len);
    tb_free(&c);
    tb_free(&s);
}

/* ---- the commands ----------------------------------------------------- */

/* CommandLookupTopicResponse, fields in number order; NULL strings and
 * negative numbers are left out. */
struct lr {
    const char *url, *url_tls;
    int response;
    uint64_t request_id;
    int authoritative, error;
    const char *message;
    int proxy_through;
};

static void
lookup_response(struct tb *sub, const struct lr *r)
{
    reset(sub);
    if (r->url != NULL)
        pb_str(sub, 1, r->url);
    if (r->url_tls != NULL)
        pb_str(sub, 2, r->url_tls);
    if (r->response >= 0)
        pb_uint(sub, 3, (uint64_t)r->response);
    pb_uint(sub, 4, r->request_id);
    if (r->authoritative >= 0)
        pb_uint(sub, 5, (uint64_t)r->authoritative);
    if (r->error >= 0)
        pb_uint(sub, 6, (uint64_t)r->error);
    if (r->message != NULL)
        pb_str(sub, 7, r->message);
    if (r->proxy_through >= 0)
        pb_uint(sub, 8, (uint64_t)r->proxy_through);
}

static void
test_decode(void)
{
    struct tb c = {0}, s = {0};
    struct lk_pulsar_cmd d;

    /* CONNECT, as the Java client writes it */
    pb_str(&s, 1, "Pulsar-Java-v3.0.0");
    pb_str(&s, 5, "token");
    pb_bytes(&s, 3, "secret", 6);
    pb_uint(&s, 4, 21);
    pb_str(&s, 6, "pulsar://b2.pulsar.example.com:6650");
    base(&c, LK_PULSAR_CONNECT, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.type == LK_PULSAR_CONNECT, "CONNECT decodes");
    ok(d.protocol_version == 21 && d.has_proxy_to_broker_url &&
           str_is(d.proxy_to_broker_url, "pulsar://b2.pulsar.example.com:6650") &&
           points_into(d.proxy_to_broker_url, &c),
       "CONNECT: protocol_version, proxy_to_broker_url pointing into the command");
    ok(!d.has_url && !d.has_listener && !d.has_request_id, "CONNECT: nothing else");
    dump_command("connect", 0x1f, 0x32, &c);
    reset(&s);
    pb_str(&s, 1, "c");
    base(&c, LK_PULSAR_CONNECT, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.protocol_version == -1 &&
           !d.has_proxy_to_broker_url,
       "CONNECT without either: -1 and absent");
    reset(&s);
    pb_str(&s, 1, "c");
    pb_uint(&s, 4, 0xffffffffffffffffull);
    base(&c, LK_PULSAR_CONNECT, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.protocol_version == 0,
       "CONNECT with protocol_version -1 (an int32): 0");
    reset(&s);
    pb_str(&s, 1, "c");
    pb_uint(&s, 4, 0x100000016ull);
    base(&c, LK_PULSAR_CONNECT, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.protocol_version == 22,
       "CONNECT with protocol_version over 32 bits: its low 32 (as Pulsar reads it)");

    /* LOOKUP */
    reset(&s);
    pb_str(&s, 1, "persistent://public/default/t1");
    pb_uint(&s, 2, 0xfffffffffffffff0ull);
    pb_uint(&s, 3, 1);
    pb_str(&s, 7, "external");
    base(&c, LK_PULSAR_LOOKUP, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.type == LK_PULSAR_LOOKUP, "LOOKUP decodes");
    ok(d.has_request_id && d.request_id == 0xfffffffffffffff0ull, "LOOKUP: a 64-bit request_id");
    ok(d.has_listener && str_is(d.listener, "external") && points_into(d.listener, &c),
       "LOOKUP: advertised_listener_name");
    dump_command("lookup", 0x10, 0, &c);
    reset(&s);
    pb_str(&s, 1, "t");
    pb_uint(&s, 2, 1);
    base(&c, LK_PULSAR_LOOKUP, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && !d.has_listener && d.listener.len == 0,
       "LOOKUP without a listener");

    /* LOOKUP_RESPONSE */
    struct lr r = {INT_URL, INT_URL_TLS, LK_PULSAR_CONNECT_TO, 42, 1, -1, NULL, 0};
    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.type == LK_PULSAR_LOOKUP_RESPONSE,
       "LOOKUP_RESPONSE decodes");
    ok(d.has_url && str_is(d.url, INT_URL) && d.has_url_tls && str_is(d.url_tls, INT_URL_TLS) &&
           points_into(d.url, &c) && points_into(d.url_tls, &c),
       "LOOKUP_RESPONSE: both URLs");
    ok(d.lookup_type == LK_PULSAR_CONNECT_TO && d.request_id == 42 && d.has_request_id &&
           d.proxy_through == 0,
       "LOOKUP_RESPONSE: response, request_id, proxy_through");
    r = (struct lr){NULL, NULL, -1, 43, -1, 1, "MetadataError", -1};
    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && !d.has_url && !d.has_url_tls &&
           d.lookup_type == -1 && d.proxy_through == -1 && d.request_id == 43,
       "LOOKUP_RESPONSE with nothing optional: absent");
    r = (struct lr){INT_URL, NULL, 7, 44, -1, -1, NULL, 2};
    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    dump_command("lookup-response", 0x07, 0x11, &c);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.lookup_type == 7 && d.proxy_through == 1,
       "LOOKUP_RESPONSE: an unknown response type, a bool of 2");

    /* CLOSE_PRODUCER, CLOSE_CONSUMER */
    for (int type = LK_PULSAR_CLOSE_PRODUCER; type <= LK_PULSAR_CLOSE_CONSUMER; type++) {
        subtest("%s", type == LK_PULSAR_CLOSE_PRODUCER ? "CLOSE_PRODUCER" : "CLOSE_CONSUMER");
        reset(&s);
        pb_uint(&s, 1, 5);
        pb_uint(&s, 2, 99);
        pb_str(&s, 3, INT_URL);
        pb_str(&s, 4, INT_URL_TLS);
        base(&c, type, &s);
        dump_command("close", 0x03, 0x10, &c);
        ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.type == type && d.request_id == 99 &&
               d.has_url && str_is(d.url, INT_URL) && str_is(d.url_tls, INT_URL_TLS),
           "decodes: request_id, the assigned URLs");
        reset(&s);
        pb_uint(&s, 1, 5);
        pb_uint(&s, 2, 99);
        base(&c, type, &s);
        ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && !d.has_url && !d.has_url_tls,
           "without an assigned broker");
    }
    subtest(NULL);

    /* TOPIC_MIGRATED */
    reset(&s);
    pb_uint(&s, 1, 5);
    pb_uint(&s, 2, 1);
    pb_str(&s, 3, "pulsar://other-cluster:6650");
    base(&c, LK_PULSAR_TOPIC_MIGRATED, &s);
    dump_command("migrated", 0x03, 0x32, &c);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.type == LK_PULSAR_TOPIC_MIGRATED &&
           str_is(d.url, "pulsar://other-cluster:6650") && !d.has_url_tls && !d.has_request_id,
       "TOPIC_MIGRATED decodes");

    /* other types */
    base(&c, LK_PULSAR_PING, NULL);
    pb_bytes(&c, LK_PULSAR_PING, "", 0);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -2 && d.type == LK_PULSAR_PING, "PING: -2");
    reset(&s);
    pb_str(&s, 1, "Pulsar Server");
    pb_uint(&s, 2, 21);
    base(&c, LK_PULSAR_CONNECTED, &s);
    dump_command("connected", 0x1f, 0x32, &c);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -2 && d.type == LK_PULSAR_CONNECTED, "CONNECTED: -2");
    base(&c, 99, NULL);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -2 && d.type == 99, "a type from the future: -2");
    tb_free(&c);
    tb_free(&s);
}

/* Rewrites cmd with e and checks the frame against want (NULL: nothing
 * changes). */
static int
rewrites_to(const struct tb *cmd, const struct lk_pulsar_edit *e, const struct tb *want)
{
    struct evbuffer *out = evbuffer_new();
    int rc = lk_pulsar_reencode(cmd->p, cmd->len, e, out), good;

    if (want == NULL)
        good = rc == 0 && evbuffer_get_length(out) == 0;
    else
        good = rc == 1 && is_frame_of(out, want);
    if (!good)
        lk_test_diag("reencode: %d, %zu bytes out", rc, evbuffer_get_length(out));
    evbuffer_free(out);
    return good;
}

static const struct lk_pulsar_edit no_edit = {0, 0, NULL, NULL, -1, 0, NULL, 0};

static void
test_lookup_response(void)
{
    struct tb c = {0}, s = {0}, w = {0}, ws = {0};
    struct lk_pulsar_edit e = {1, 1, &ext, &ext_tls, -1, 0, NULL, 0};
    static const struct {
        int response, authoritative;
        const char *what;
    } kinds[] = {{LK_PULSAR_REDIRECT, 0, "Redirect"},
                 {LK_PULSAR_REDIRECT, 1, "Redirect, authoritative"},
                 {LK_PULSAR_CONNECT_TO, 1, "Connect"}};

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        subtest("%s", kinds[k].what);
        struct lr r = {INT_URL, INT_URL_TLS, kinds[k].response, 7, kinds[k].authoritative, -1,
                       NULL,    -1};
        lookup_response(&s, &r);
        base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
        struct lr x = r;
        x.url = ext.p;
        x.url_tls = ext_tls.p;
        lookup_response(&ws, &x);
        base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
        ok(rewrites_to(&c, &e, &w), "both URLs set");
        dump_command("lookup-response", 0x03, 0x32, &c);

        /* the broker had no TLS URL, the listener has one: filled in */
        r.url_tls = NULL;
        lookup_response(&s, &r);
        base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
        ok(rewrites_to(&c, &e, &w), "a TLS URL the broker left out: filled in");

        /* the listener has no TLS: cleared */
        r.url_tls = INT_URL_TLS;
        lookup_response(&s, &r);
        base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
        struct lk_pulsar_edit e1 = {1, 1, &ext, NULL, -1, 0, NULL, 0};
        x.url_tls = NULL;
        lookup_response(&ws, &x);
        base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
        ok(rewrites_to(&c, &e1, &w), "TLS URL cleared");
        dump_command("lookup-response", 0x03, 0x02, &c);

        /* and the other way round */
        struct lk_pulsar_edit e2 = {1, 1, NULL, &ext_tls, -1, 0, NULL, 0};
        x.url = NULL;
        x.url_tls = ext_tls.p;
        lookup_response(&ws, &x);
        base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
        ok(rewrites_to(&c, &e2, &w), "plain URL cleared");

        /* only one of the pair asked for: the other is left alone */
        struct lk_pulsar_edit e3 = {1, 0, &ext, NULL, -1, 0, NULL, 0};
        x.url = ext.p;
        x.url_tls = INT_URL_TLS;
        lookup_response(&ws, &x);
        base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
        ok(rewrites_to(&c, &e3, &w), "set_url alone: the TLS URL untouched");
    }
    subtest(NULL);

    /* service mode: Connect answered with proxy_through_service_url (no
     * authoritative, which must stay absent) */
    struct lr r = {INT_URL, NULL, LK_PULSAR_CONNECT_TO, 9, -1, -1, NULL, -1};
    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    struct lr x = {ext.p, ext_tls.p, LK_PULSAR_CONNECT_TO, 9, -1, -1, NULL, 1};
    lookup_response(&ws, &x);
    base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
    struct lk_pulsar_edit ep = {1, 1, &ext, &ext_tls, 1, 0, NULL, 0};
    ok(rewrites_to(&c, &ep, &w), "proxy_through set with the URLs");
    dump_command("lookup-response", 0x0b, 0x32, &c);
    struct lk_pulsar_edit ep1 = {0, 0, NULL, NULL, 1, 0, NULL, 0};
    x.url = INT_URL;
    x.url_tls = NULL;
    lookup_response(&ws, &x);
    base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
    ok(rewrites_to(&c, &ep1, &w), "proxy_through alone");
    ok(rewrites_to(&w, &ep1, NULL), "proxy_through already true: nothing to do");
    struct lk_pulsar_edit ep0 = {0, 0, NULL, NULL, 0, 0, NULL, 0};
    ok(rewrites_to(&c, &ep0, NULL), "proxy_through 0 where it is absent: nothing to do");
    x.proxy_through = 0;
    lookup_response(&s, &x);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(rewrites_to(&w, &ep0, &c), "proxy_through true to false");
    x.proxy_through = 2;
    lookup_response(&s, &x);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(rewrites_to(&c, &ep1, NULL), "proxy_through 2 is true already: nothing to do");
    x.proxy_through = 0;
    lookup_response(&ws, &x);
    base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
    ok(rewrites_to(&c, &ep0, &w), "proxy_through 2 to false");
    x.proxy_through = 1;
    lookup_response(&c, &x);
    base(&s, LK_PULSAR_LOOKUP_RESPONSE, &c);
    struct lk_pulsar_edit ep2 = {0, 0, NULL, NULL, 2, 0, NULL, 0};
    ok(rewrites_to(&w, &ep2, &s), "an edit of 2 writes 1");

    /* Failed: the error and message kept, no URL to set */
    r = (struct lr){NULL, NULL, LK_PULSAR_FAILED, 10, -1, 11, "Topic not found", -1};
    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    struct lk_pulsar_edit clear = {1, 1, NULL, NULL, -1, 0, NULL, 0};
    ok(rewrites_to(&c, &clear, NULL), "Failed: clearing absent URLs changes nothing");
    x = r;
    x.url = ext.p;
    lookup_response(&ws, &x);
    base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
    struct lk_pulsar_edit e4 = {1, 0, &ext, NULL, -1, 0, NULL, 0};
    ok(rewrites_to(&c, &e4, &w), "Failed: error and message kept");
    dump_command("lookup-response", 0x01, 0x02, &c);
    tb_free(&c);
    tb_free(&s);
    tb_free(&w);
    tb_free(&ws);
}

static void
test_lookup_strip(void)
{
    struct tb c = {0}, s = {0}, w = {0}, ws = {0}, kv = {0};
    struct lk_pulsar_edit e = {0, 0, NULL, NULL, -1, 1, NULL, 0};

    pb_str(&kv, 1, "client");
    pb_str(&kv, 2, "lookout-test");
    /* topic, request_id, authoritative, the listener, two properties
     * (PIP-368: repeated KeyValue), an unknown field 99; a NUL in the
     * topic (bytes, not C strings) */
    pb_bytes(&s, 1, "persistent://public/default/t\0x", 31);
    pb_uint(&s, 2, 12);
    pb_uint(&s, 3, 1);
    pb_str(&s, 7, "external");
    pb_msg(&s, 8, &kv);
    pb_msg(&s, 8, &kv);
    pb_str(&s, 99, "from the future");
    base(&c, LK_PULSAR_LOOKUP, &s);
    pb_bytes(&ws, 1, "persistent://public/default/t\0x", 31);
    pb_uint(&ws, 2, 12);
    pb_uint(&ws, 3, 1);
    pb_msg(&ws, 8, &kv);
    pb_msg(&ws, 8, &kv);
    pb_str(&ws, 99, "from the future");
    base(&w, LK_PULSAR_LOOKUP, &ws);
    ok(rewrites_to(&c, &e, &w), "the listener stripped; topic, request_id, authoritative, "
                                "properties and field 99 kept");
    dump_command("lookup", 0x10, 0, &c);
    ok(rewrites_to(&w, &e, NULL), "no listener: nothing to strip");
    ok(rewrites_to(&c, &no_edit, NULL), "not asked: nothing to do");
    struct lk_pulsar_edit urls = {1, 1, &ext, &ext_tls, 1, 0, NULL, 0};
    ok(rewrites_to(&c, &urls, NULL), "URLs and proxy_through do not apply to LOOKUP");

    /* the listener given twice: refused, neither read nor stripped
     * (walk_sub says why) */
    reset(&s);
    pb_str(&s, 1, "t");
    pb_str(&s, 7, "internal");
    pb_uint(&s, 2, 12);
    pb_str(&s, 7, "external");
    base(&c, LK_PULSAR_LOOKUP, &s);
    struct lk_pulsar_cmd d;
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1, "a listener given twice: refused");
    struct evbuffer *out = evbuffer_new();
    ok(lk_pulsar_reencode(c.p, c.len, &e, out) == -1 && evbuffer_get_length(out) == 0,
       "... and not re-encoded");
    evbuffer_free(out);
    dump_command("lookup-listener-twice", 0x10, 0, &c);
    tb_free(&c);
    tb_free(&s);
    tb_free(&w);
    tb_free(&ws);
    tb_free(&kv);
}

static void
test_close_and_migrated(void)
{
    struct tb c = {0}, s = {0}, w = {0}, ws = {0};
    static const int types[] = {LK_PULSAR_CLOSE_PRODUCER, LK_PULSAR_CLOSE_CONSUMER,
                                LK_PULSAR_TOPIC_MIGRATED};
    static const char *const names[] = {"CLOSE_PRODUCER", "CLOSE_CONSUMER", "TOPIC_MIGRATED"};
    struct lk_pulsar_edit e = {1, 1, &ext, &ext_tls, -1, 1, NULL, 0};

    for (int i = 0; i < 3; i++) {
        subtest("%s", names[i]);
        /* ids, then the URLs (3, 4) */
        reset(&s);
        pb_uint(&s, 1, 1234567890123ull);
        pb_uint(&s, 2, 1);
        pb_str(&s, 3, INT_URL);
        base(&c, types[i], &s);
        reset(&ws);
        pb_uint(&ws, 1, 1234567890123ull);
        pb_uint(&ws, 2, 1);
        pb_str(&ws, 3, ext.p);
        pb_str(&ws, 4, ext_tls.p);
        base(&w, types[i], &ws);
        ok(rewrites_to(&c, &e, &w), "both URLs set, the TLS one added");
        dump_command("close", 0x03, 0x32, &c);
        ok(rewrites_to(&w, &e, NULL), "already so: nothing to do");
        struct lk_pulsar_edit e1 = {1, 1, &ext, NULL, -1, 0, NULL, 0};
        reset(&ws);
        pb_uint(&ws, 1, 1234567890123ull);
        pb_uint(&ws, 2, 1);
        pb_str(&ws, 3, ext.p);
        base(&c, types[i], &ws);
        ok(rewrites_to(&w, &e1, &c), "the TLS URL cleared");
        /* a close without an assigned broker stays so when clearing */
        reset(&s);
        pb_uint(&s, 1, 3);
        pb_uint(&s, 2, 0);
        base(&c, types[i], &s);
        struct lk_pulsar_edit clear = {1, 1, NULL, NULL, 0, 0, NULL, 0};
        ok(rewrites_to(&c, &clear, NULL), "no URL, cleared: nothing to do");
    }
    subtest(NULL);
    tb_free(&c);
    tb_free(&s);
    tb_free(&w);
    tb_free(&ws);
}

/* Unknown fields, in the sub-command and in BaseCommand, come back with
 * their bytes as they were, known fields around them or not. */
static void
test_unknown_fields(void)
{
    struct tb c = {0}, s = {0}, w = {0}, ws = {0}, unk = {0}, unk_base = {0};

    /* 50 varint, and again with 1 written in a non-minimal 3 bytes; 51
     * length-delimited; 52 fixed32; 53 fixed64; 55 a 10-byte varint */
    pb_uint(&unk, 50, 300);
    put(&unk, "\x90\x03\x81\x80\x00", 5); /* field 50 again: 1 in 3 bytes */
    pb_str(&unk, 51, "opaque \x01\x02 bytes");
    put(&unk, "\xa5\x03\x01\x02\x03\x04", 6);                  /* 52 fixed32 */
    put(&unk, "\xa9\x03\x01\x02\x03\x04\x05\x06\x07\x08", 10); /* 53 fixed64 */
    pb_uint(&unk, 55, 0xffffffffffffffffull);
    /* BaseCommand: the same kinds, and a known sub-command the type is
     * not (CommandConnect), which stays */
    pb_uint(&unk_base, 50, 7);
    pb_bytes(&unk_base, 51, "\x00\xff", 2);
    put(&unk_base, "\xa5\x03\xde\xad\xbe\xef", 6); /* 52 fixed32 */

    /* unknown fields after the known ones: the output is the input */
    struct lr r = {INT_URL, INT_URL_TLS, 1, 77, 1, -1, NULL, 0};
    lookup_response(&s, &r);
    put(&s, unk.p, unk.len);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    put(&c, unk_base.p, unk_base.len);
    struct lr x = r;
    x.url = ext.p;
    x.url_tls = ext_tls.p;
    lookup_response(&ws, &x);
    put(&ws, unk.p, unk.len);
    base(&w, LK_PULSAR_LOOKUP_RESPONSE, &ws);
    put(&w, unk_base.p, unk_base.len);
    struct lk_pulsar_edit e = {1, 1, &ext, &ext_tls, -1, 0, NULL, 0};
    ok(rewrites_to(&c, &e, &w), "unknown fields 50-55 kept in the command and in BaseCommand");
    dump_command("unknown", 0x03, 0x32, &c);

    /* unknown fields first, between known ones: they come back after the
     * known fields, in their order, with their bytes */
    reset(&s);
    pb_str(&s, 51, "first");
    pb_str(&s, 1, INT_URL);
    pb_uint(&s, 50, 1);
    pb_uint(&s, 4, 77);
    pb_str(&s, 2, INT_URL_TLS);
    reset(&c);
    pb_bytes(&c, 99, "x", 1);
    pb_msg(&c, 24, &s);
    pb_uint(&c, 50, 2);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP_RESPONSE);
    reset(&ws);
    pb_str(&ws, 1, ext.p);
    pb_str(&ws, 2, ext_tls.p);
    pb_uint(&ws, 4, 77);
    pb_str(&ws, 51, "first");
    pb_uint(&ws, 50, 1);
    reset(&w);
    pb_uint(&w, 1, LK_PULSAR_LOOKUP_RESPONSE);
    pb_msg(&w, 24, &ws);
    pb_bytes(&w, 99, "x", 1);
    pb_uint(&w, 50, 2);
    ok(rewrites_to(&c, &e, &w), "unknown fields between known ones: after them, in order");
    dump_command("unknown", 0x03, 0x32, &c);

    /* a sub-command of another type, with unknown fields of its own */
    reset(&s);
    pb_uint(&s, 1, 5);
    pb_uint(&s, 2, 6);
    pb_str(&s, 3, INT_URL);
    reset(&ws);
    pb_str(&ws, 1, "client");
    put(&ws, unk.p, unk.len);
    base(&c, LK_PULSAR_CLOSE_PRODUCER, &s);
    pb_msg(&c, LK_PULSAR_CONNECT, &ws);
    struct tb ws2 = {0};
    pb_uint(&ws2, 1, 5);
    pb_uint(&ws2, 2, 6);
    pb_str(&ws2, 3, ext.p);
    reset(&w);
    pb_uint(&w, 1, LK_PULSAR_CLOSE_PRODUCER);
    pb_msg(&w, LK_PULSAR_CONNECT, &ws);
    pb_msg(&w, LK_PULSAR_CLOSE_PRODUCER, &ws2);
    struct lk_pulsar_edit e1 = {1, 0, &ext, NULL, -1, 0, NULL, 0};
    ok(rewrites_to(&c, &e1, &w), "another sub-command and its unknown fields kept");
    dump_command("unknown", 0x01, 0x02, &c);

    /* the same bytes through protobuf-c's unpack, untouched: the no-op
     * path never packs */
    ok(rewrites_to(&w, &e1, NULL), "and rewriting the result again changes nothing");

    /* CLOSE_CONSUMER and TOPIC_MIGRATED: unknown fields before the URLs
     * come back after them */
    static const int types[] = {LK_PULSAR_CLOSE_CONSUMER, LK_PULSAR_TOPIC_MIGRATED};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        reset(&s);
        pb_uint(&s, 1, 8);
        pb_uint(&s, 2, 9);
        put(&s, unk.p, unk.len);
        pb_str(&s, 3, INT_URL);
        pb_str(&s, 4, INT_URL_TLS);
        base(&c, types[i], &s);
        put(&c, unk_base.p, unk_base.len);
        reset(&ws);
        pb_uint(&ws, 1, 8);
        pb_uint(&ws, 2, 9);
        pb_str(&ws, 3, ext.p);
        pb_str(&ws, 4, ext_tls.p);
        put(&ws, unk.p, unk.len);
        base(&w, types[i], &ws);
        put(&w, unk_base.p, unk_base.len);
        ok(rewrites_to(&c, &e, &w), "type %d: unknown fields before the URLs, after them",
           types[i]);
        dump_command("unknown", 0x03, 0x32, &c);
    }
    tb_free(&c);
    tb_free(&s);
    tb_free(&w);
    tb_free(&ws);
    tb_free(&ws2);
    tb_free(&unk);
    tb_free(&unk_base);
}

static void
test_noop(void)
{
    struct tb c = {0}, s = {0};
    struct lr r = {ext.p, ext_tls.p, 1, 5, 1, -1, NULL, 1};
    struct lk_pulsar_edit e = {1, 1, &ext, &ext_tls, 1, 1, NULL, 0};

    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(rewrites_to(&c, &e, NULL), "every field already as asked: 0, out untouched");
    ok(rewrites_to(&c, &no_edit, NULL), "an empty edit: 0");
    struct lk_str copy = lk_str_make(strdup(ext.p), ext.len);
    struct lk_pulsar_edit e2 = {1, 0, &copy, NULL, -1, 0, NULL, 0};
    ok(rewrites_to(&c, &e2, NULL), "equal bytes elsewhere: 0");
    free((char *)copy.p);
    struct lk_str pre = lk_str_make(ext.p, ext.len - 1);
    struct lk_pulsar_edit e3 = {1, 0, &pre, NULL, -1, 0, NULL, 0};
    struct evbuffer *out = evbuffer_new();
    ok(lk_pulsar_reencode(c.p, c.len, &e3, out) == 1, "a prefix of the URL is a change");
    drain(out);
    struct lk_str empty = LK_STRLIT("");
    struct lk_pulsar_edit e4 = {1, 0, &empty, NULL, -1, 0, NULL, 0};
    ok(lk_pulsar_reencode(c.p, c.len, &e4, out) == 1, "an empty URL (present) is a change");
    struct lk_pulsar_cmd d;
    size_t n = evbuffer_get_length(out);
    const uint8_t *p = evbuffer_pullup(out, -1);
    ok(lk_pulsar_decode(p + 8, n - 8, &d) == 0 && d.has_url && d.url.len == 0,
       "... and decodes as an empty URL, present");
    evbuffer_free(out);

    /* CONNECT is read, never rewritten */
    reset(&s);
    pb_str(&s, 1, "c");
    pb_str(&s, 6, INT_URL);
    base(&c, LK_PULSAR_CONNECT, &s);
    ok(rewrites_to(&c, &e, NULL), "CONNECT: no edit applies");
    base(&c, LK_PULSAR_PING, NULL);
    out = evbuffer_new();
    ok(lk_pulsar_reencode(c.p, c.len, &e, out) == -1 && evbuffer_get_length(out) == 0,
       "PING: -1, out untouched");
    evbuffer_free(out);
    tb_free(&c);
    tb_free(&s);
}

static void
test_malformed(void)
{
    struct tb c = {0}, s = {0};
    struct lk_pulsar_cmd d;
    struct lk_pulsar_edit e = {1, 1, &ext, &ext_tls, 1, 1, NULL, 0};
    struct evbuffer *out = evbuffer_new();

#define REFUSED(what)                                                                              \
    dump_command("malformed", 0x1f, 0x32, &c);                                                     \
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1 && lk_pulsar_reencode(c.p, c.len, &e, out) == -1 &&  \
           evbuffer_get_length(out) == 0,                                                          \
       "%s: -1", what)

    /* every cut of a valid command */
    struct lr r = {INT_URL, INT_URL_TLS, 1, 5, 1, 3, "m", 1};
    lookup_response(&s, &r);
    pb_str(&s, 51, "unknown");
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    int good = 1;
    for (size_t len = 0; len < c.len; len++) {
        uint8_t *cut = malloc(len + 1);
        memcpy(cut, c.p, len);
        int dr = lk_pulsar_decode(cut, len, &d), rr = lk_pulsar_reencode(cut, len, &e, out);
        /* a cut that ends right after the type is a LOOKUP_RESPONSE
         * without its sub-command: malformed too */
        if (dr != -1 || rr != -1 || evbuffer_get_length(out) != 0) {
            lk_test_diag("cut at %zu: decode %d, reencode %d", len, dr, rr);
            good = 0;
        }
        free(cut);
    }
    ok(good, "every cut of a LOOKUP_RESPONSE: -1, out untouched");

    /* a truncated varint inside the sub-command, its length still right */
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x28\xff", 2); /* authoritative: a varint with no end */
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a truncated varint");
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x28\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a varint of 11 bytes");
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x28\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a varint over 64 bits");
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x0a\x20pulsar://", 11); /* brokerServiceUrl: 32 bytes said, 9 there */
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a length past the end of the sub-command");
    reset(&s);
    pb_uint(&s, 4, 5);
    reset(&c);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP_RESPONSE);
    put(&c, "\xc2\x01\x7f", 3); /* field 24, 127 bytes said */
    put(&c, s.p, s.len);
    REFUSED("a sub-command's length past the end");
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x0a\x80\x80\x80\x80\x80\x00", 7);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a length of 6 bytes");

    /* wrong wire types for known fields */
    reset(&s);
    pb_uint(&s, 1, 5); /* brokerServiceUrl as a varint */
    pb_uint(&s, 4, 5);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a URL as a varint");
    reset(&s);
    pb_str(&s, 4, "5"); /* request_id as bytes */
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("request_id as bytes");
    reset(&s);
    pb_uint(&s, 4, 5);
    pb_str(&s, 8, "\x01"); /* proxy_through (a bool) as bytes */
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a bool as bytes");
    reset(&s);
    pb_uint(&s, 4, 5);
    reset(&c);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP_RESPONSE);
    pb_uint(&c, 24, 5); /* the sub-command as a varint */
    REFUSED("the sub-command as a varint");
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x0b\x0c", 2); /* field 1 as a group */
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("a group");
    reset(&s);
    pb_uint(&s, 4, 5);
    put(&s, "\x83\x03\x84\x03", 4); /* an unknown field 48 as a group */
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("an unknown group");

    /* missing required fields */
    reset(&s);
    pb_str(&s, 1, INT_URL);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("LOOKUP_RESPONSE without request_id");
    reset(&s);
    pb_uint(&s, 2, 5);
    pb_str(&s, 7, "external");
    base(&c, LK_PULSAR_LOOKUP, &s);
    REFUSED("LOOKUP without topic");
    reset(&s);
    pb_str(&s, 1, "t");
    pb_str(&s, 7, "external");
    base(&c, LK_PULSAR_LOOKUP, &s);
    REFUSED("LOOKUP without request_id");
    reset(&s);
    pb_str(&s, 6, INT_URL);
    base(&c, LK_PULSAR_CONNECT, &s);
    REFUSED("CONNECT without client_version");
    reset(&s);
    pb_uint(&s, 1, 5);
    pb_str(&s, 3, INT_URL);
    base(&c, LK_PULSAR_TOPIC_MIGRATED, &s);
    REFUSED("TOPIC_MIGRATED without resource_type");
    reset(&s);
    pb_uint(&s, 2, 5);
    pb_str(&s, 3, INT_URL);
    base(&c, LK_PULSAR_CLOSE_CONSUMER, &s);
    REFUSED("CLOSE_CONSUMER without consumer_id");
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, NULL);
    REFUSED("LOOKUP_RESPONSE without its sub-command");
    reset(&c);
    pb_msg(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("no type");

    /* what protobuf-c would take but merge or lose */
    reset(&s);
    pb_uint(&s, 4, 5);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    pb_msg(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("the sub-command twice");
    reset(&s);
    pb_uint(&s, 4, 5);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    pb_uint(&c, 1, LK_PULSAR_LOOKUP_RESPONSE);
    REFUSED("the type twice");
    /* a field lookout reads, twice (walk_sub says why): the first copy
     * would pass unread whenever the last needs no rewrite */
    reset(&s);
    pb_str(&s, 1, INT_URL);
    pb_str(&s, 1, "pulsar://b1.pulsar.example.com:6650");
    pb_uint(&s, 3, 1);
    pb_uint(&s, 4, 5);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("brokerServiceUrl twice, the last already the lookup address");
    reset(&s);
    pb_str(&s, 2, INT_URL_TLS);
    pb_uint(&s, 4, 5);
    pb_str(&s, 2, INT_URL_TLS);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("brokerServiceUrlTls twice");
    reset(&s);
    pb_uint(&s, 4, 5);
    pb_uint(&s, 4, 6);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("request_id twice");
    reset(&s);
    pb_uint(&s, 1, 1);
    pb_uint(&s, 2, 5);
    pb_str(&s, 3, INT_URL);
    pb_str(&s, 3, INT_URL);
    base(&c, LK_PULSAR_CLOSE_PRODUCER, &s);
    REFUSED("assignedBrokerServiceUrl twice");
    reset(&s);
    pb_str(&s, 1, "c");
    pb_str(&s, 6, "pulsar://b2.pulsar.example.com:6650");
    pb_str(&s, 6, INT_URL);
    base(&c, LK_PULSAR_CONNECT, &s);
    REFUSED("proxy_to_broker_url twice");
    /* an unknown field twice is no field lookout reads: kept as it came */
    reset(&s);
    pb_uint(&s, 4, 5);
    pb_str(&s, 99, "a");
    pb_str(&s, 99, "b");
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0, "an unknown field twice: decodes");
    /* a declared sub-command of another type that protobuf-c refuses */
    reset(&s);
    pb_uint(&s, 4, 5);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    reset(&s);
    pb_str(&s, 6, INT_URL);
    pb_msg(&c, LK_PULSAR_CONNECT, &s);
    REFUSED("a CommandConnect without client_version beside a LOOKUP_RESPONSE");

    /* too many fields; a rewrite that adds fields to a command at the
     * limit still decodes */
    reset(&s);
    pb_uint(&s, 4, 5);
    for (int i = 0; i < 4097; i++)
        pb_uint(&s, 50, 1);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("4097 unknown fields in the sub-command");
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, NULL);
    for (int i = 0; i < 4097; i++)
        pb_uint(&c, 50, 1);
    reset(&s);
    pb_uint(&s, 4, 5);
    pb_msg(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("4097 unknown fields in BaseCommand");
    reset(&s);
    for (int i = 0; i < 8193; i++)
        pb_uint(&s, 4, 5);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    REFUSED("request_id 8193 times");
    reset(&s);
    pb_uint(&s, 4, 5);
    for (int i = 0; i < 4096; i++)
        pb_uint(&s, 50, 1);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, NULL);
    for (int i = 0; i < 4096; i++)
        pb_uint(&c, 50, 1);
    pb_msg(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && lk_pulsar_reencode(c.p, c.len, &e, out) == 1,
       "4096 unknown fields in the sub-command and 4096 in BaseCommand: decoded and re-encoded");
    size_t n = evbuffer_get_length(out);
    const uint8_t *o = evbuffer_pullup(out, -1);
    ok(n > 8 && lk_pulsar_decode(o + 8, n - 8, &d) == 0 && d.proxy_through == 1 && d.has_url &&
           d.has_url_tls,
       "... and the result, three fields more, decodes");
#undef REFUSED
    evbuffer_free(out);
    tb_free(&c);
    tb_free(&s);
}

static void
test_frame(void)
{
    struct evbuffer *out = evbuffer_new();
    struct tb c = {0};

    base(&c, LK_PULSAR_PONG, NULL);
    pb_bytes(&c, LK_PULSAR_PONG, "", 0);
    lk_pulsar_frame(out, c.p, c.len);
    ok(is_frame_of(out, &c), "lk_pulsar_frame: sizes, then the command");
    const uint8_t *p = evbuffer_pullup(out, -1);
    ok(lk_pulsar_command_type(p + 8, c.len) == LK_PULSAR_PONG, "PONG");

    /* a stream for the frame fuzzer: a LOOKUP, a SEND with its payload, a
     * LOOKUP_RESPONSE, split anywhere */
    struct tb s = {0}, st = {0};
    drain(out);
    pb_str(&s, 1, "persistent://public/default/t");
    pb_uint(&s, 2, 1);
    pb_str(&s, 7, "external");
    base(&c, LK_PULSAR_LOOKUP, &s);
    lk_pulsar_frame(out, c.p, c.len);
    reset(&s);
    pb_uint(&s, 1, 1);
    pb_uint(&s, 2, 0);
    base(&c, LK_PULSAR_SEND, &s);
    uint8_t pre[8];
    static const uint8_t payload[] = "\x0e\x01\x00\x00\x00\x00\x00\x00\x00\x02\x0a\x00hello";
    be32_to(pre, (uint32_t)(4 + c.len + sizeof(payload) - 1));
    be32_to(pre + 4, (uint32_t)c.len);
    evbuffer_add(out, pre, 8);
    evbuffer_add(out, c.p, c.len);
    evbuffer_add(out, payload, sizeof(payload) - 1);
    struct lr r = {INT_URL, INT_URL_TLS, 1, 1, 1, -1, NULL, 0};
    lookup_response(&s, &r);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    lk_pulsar_frame(out, c.p, c.len);
    size_t n = evbuffer_get_length(out);
    put(&st, evbuffer_pullup(out, -1), n);
    dump_stream("lookup-send-response", st.p, st.len);
    uint32_t total, cmd;
    size_t at = 0, frames = 0;
    while (at + 8 <= st.len &&
           lk_pulsar_sizes(st.p + at, LK_PULSAR_DEFAULT_MAX_FRAME, &total, &cmd) == 0) {
        frames++;
        at += 4 + total;
    }
    ok(frames == 3 && at == st.len, "three frames, back to back");
    evbuffer_free(out);
    tb_free(&c);
    tb_free(&s);
    tb_free(&st);
}

/* ---- Pulsar 5.0: URLs within (SCALABLE_TOPIC_UPDATE, WATCH_TC_ASSIGNMENTS_UPDATE) ---- */

#define INT2_URL "pulsar://broker-2.pulsar-broker.pulsar.svc.cluster.local:6650"

/* A SegmentBrokerAddress: segment_id, broker_url, broker_url_tls (NULL:
 * none), then an unknown field 1000 when unk. */
static void
seg_broker(struct tb *b, uint64_t id, const char *url, const char *url_tls, int unk)
{
    reset(b);
    pb_uint(b, 1, id);
    pb_str(b, 2, url);
    if (url_tls != NULL)
        pb_str(b, 3, url_tls);
    if (unk)
        pb_str(b, 1000, "lookout:unknown-field");
}

/* A SegmentInfoProto (field 2 of ScalableTopicDAG), which lookout does not
 * declare: segment_id, hash range, state, epochs. */
static void
seg_info(struct tb *b, uint64_t id)
{
    reset(b);
    pb_uint(b, 1, id);
    pb_uint(b, 2, 0);
    pb_uint(b, 3, 0xffff);
    pb_uint(b, 4, 0);
    pb_uint(b, 7, 1);
    pb_uint(b, 9, 1700000000000ull);
}

/* SCALABLE_TOPIC_UPDATE with two segments, each with its broker (the
 * second's with a TLS URL too), and the controller's URLs; as Pulsar
 * writes it (field order), or as protobuf-c packs it after a rewrite to
 * url (known fields first, unknown ones after them). */
static void
scalable_update(struct tb *c, const char *u1, const char *u2, const char *u2tls, const char *cu,
                const char *cutls, int packed)
{
    struct tb dag = {0}, upd = {0}, e = {0}, i1 = {0}, i2 = {0};

    seg_info(&i1, 1);
    seg_info(&i2, 2);
    reset(&dag);
    pb_uint(&dag, 1, 7); /* epoch */
    if (!packed) {
        pb_msg(&dag, 2, &i1);
        pb_msg(&dag, 2, &i2);
    }
    seg_broker(&e, 1, u1, NULL, 1);
    pb_msg(&dag, 3, &e);
    seg_broker(&e, 2, u2, u2tls, 0);
    pb_msg(&dag, 3, &e);
    if (cu != NULL)
        pb_str(&dag, 4, cu);
    if (cutls != NULL)
        pb_str(&dag, 5, cutls);
    if (packed) {
        pb_msg(&dag, 2, &i1);
        pb_msg(&dag, 2, &i2);
    }
    reset(&upd);
    pb_uint(&upd, 1, 42); /* session_id */
    pb_msg(&upd, 2, &dag);
    pb_str(&upd, 5, "topic://public/default/orders"); /* resolved_topic_name */
    base(c, LK_PULSAR_SCALABLE_TOPIC_UPDATE, &upd);
    tb_free(&dag);
    tb_free(&upd);
    tb_free(&e);
    tb_free(&i1);
    tb_free(&i2);
}

/* SCALABLE_TOPIC_UPDATE of session 42 around dag: the epoch (when
 * epoch), then n copies of the segment broker entry. */
static void
update_around(struct tb *c, struct tb *dag, int epoch, const struct tb *entry, int n)
{
    struct tb upd = {0};

    reset(dag);
    if (epoch)
        pb_uint(dag, 1, 7);
    for (int i = 0; i < n; i++)
        pb_msg(dag, 3, entry);
    pb_uint(&upd, 1, 42);
    pb_msg(&upd, 2, dag);
    base(c, LK_PULSAR_SCALABLE_TOPIC_UPDATE, &upd);
    tb_free(&upd);
}

static void
test_scalable_update(void)
{
    struct tb c = {0}, w = {0};
    struct lk_pulsar_cmd d;
    struct lk_pulsar_pair p[4];
    struct evbuffer *out = evbuffer_new();

    scalable_update(&c, INT_URL, INT2_URL, INT_URL_TLS, INT_URL, NULL, 0);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.type == LK_PULSAR_SCALABLE_TOPIC_UPDATE &&
           d.npairs == 3 && !d.has_url && !d.has_request_id,
       "SCALABLE_TOPIC_UPDATE decodes: 3 URL pairs within, none of its own");
    ok(lk_pulsar_pairs(c.p, c.len, p, 4) == 3, "lk_pulsar_pairs: 3");
    ok(p[0].has_url && str_is(p[0].url, INT_URL) && !p[0].has_url_tls && p[0].url_required &&
           points_into(p[0].url, &c),
       "pair 0: segment 1's broker_url, required, pointing into the command");
    ok(p[1].has_url && str_is(p[1].url, INT2_URL) && p[1].has_url_tls &&
           str_is(p[1].url_tls, INT_URL_TLS),
       "pair 1: segment 2's broker_url and broker_url_tls");
    ok(p[2].has_url && str_is(p[2].url, INT_URL) && !p[2].has_url_tls && !p[2].url_required,
       "pair 2: the controller's, after the segments'");
    ok(lk_pulsar_pairs(c.p, c.len, p, 1) == 3 && str_is(p[0].url, INT_URL),
       "max 1: the first only, and the count of all");

    /* every pair to the external pair: unknown fields kept (SegmentInfoProto
     * segments, an entry's field 1000, resolved_topic_name) */
    struct lk_pulsar_pair_edit pe[3] = {
        {1, 1, &ext, &ext_tls}, {1, 1, &ext, &ext_tls}, {1, 1, &ext, NULL}};
    struct lk_pulsar_edit e = {0, 0, NULL, NULL, -1, 0, pe, 3};
    scalable_update(&w, ext.p, ext.p, ext_tls.p, ext.p, NULL, 1);
    /* entry 1 gets a TLS URL it lacked: written after its broker_url, before
     * its unknown field */
    struct tb dag = {0}, upd = {0}, en = {0}, i1 = {0}, i2 = {0};
    reset(&dag);
    pb_uint(&dag, 1, 7);
    seg_broker(&en, 1, ext.p, ext_tls.p, 1);
    pb_msg(&dag, 3, &en);
    seg_broker(&en, 2, ext.p, ext_tls.p, 0);
    pb_msg(&dag, 3, &en);
    pb_str(&dag, 4, ext.p);
    seg_info(&i1, 1);
    seg_info(&i2, 2);
    pb_msg(&dag, 2, &i1);
    pb_msg(&dag, 2, &i2);
    reset(&upd);
    pb_uint(&upd, 1, 42);
    pb_msg(&upd, 2, &dag);
    pb_str(&upd, 5, "topic://public/default/orders");
    base(&w, LK_PULSAR_SCALABLE_TOPIC_UPDATE, &upd);
    ok(rewrites_to(&c, &e, &w), "every URL rewritten, each entry's in place, unknown fields kept");
    dump_command("scalable_update", 0x03, 0x32, &c);
    ok(rewrites_to(&w, &e, NULL), "already so: nothing to do");
    ok(lk_pulsar_pairs(w.p, w.len, p, 4) == 3 && str_is(p[0].url_tls, ext_tls.p) &&
           str_is(p[2].url, ext.p),
       "the rewritten command reads back with the new URLs");

    /* only the controller's: the segments' pairs left as they are */
    struct lk_pulsar_pair_edit only[3] = {
        {0, 0, NULL, NULL}, {0, 0, NULL, NULL}, {1, 1, &ext, NULL}};
    struct lk_pulsar_edit e2 = {0, 0, NULL, NULL, -1, 0, only, 3};
    ok(lk_pulsar_reencode(c.p, c.len, &e2, out) == 1 &&
           lk_pulsar_decode(evbuffer_pullup(out, -1) + 8, evbuffer_get_length(out) - 8, &d) == 0,
       "one pair edited, the command re-encoded");
    ok(lk_pulsar_pairs(evbuffer_pullup(out, -1) + 8, evbuffer_get_length(out) - 8, p, 4) == 3 &&
           str_is(p[0].url, INT_URL) && str_is(p[1].url, INT2_URL) && str_is(p[2].url, ext.p),
       "... the segments' URLs as they were, the controller's rewritten");
    drain(out);

    /* a required broker_url is never cleared */
    struct lk_pulsar_pair_edit clr[1] = {{1, 0, NULL, NULL}};
    struct lk_pulsar_edit e3 = {0, 0, NULL, NULL, -1, 0, clr, 1};
    ok(lk_pulsar_reencode(c.p, c.len, &e3, out) == -1 && evbuffer_get_length(out) == 0,
       "clearing a segment's broker_url (required): -1, out untouched");

    /* malformed: a segment without its broker_url, a broker_url twice, two
     * DAGs, a DAG without its epoch */
    reset(&en);
    pb_uint(&en, 1, 1);
    update_around(&c, &dag, 1, &en, 1);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1 && lk_pulsar_pairs(c.p, c.len, p, 4) == -1,
       "a segment broker without its broker_url (required): -1");
    dump_command("malformed", 0x03, 0x32, &c);
    seg_broker(&en, 1, INT_URL, NULL, 0);
    pb_str(&en, 2, ext.p);
    update_around(&c, &dag, 1, &en, 1);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1, "a segment's broker_url twice: -1");
    dump_command("malformed", 0x03, 0x32, &c);
    reset(&upd);
    pb_uint(&upd, 1, 42);
    pb_msg(&upd, 2, &dag);
    pb_msg(&upd, 2, &dag);
    base(&c, LK_PULSAR_SCALABLE_TOPIC_UPDATE, &upd);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1, "two DAGs: -1");
    seg_broker(&en, 1, INT_URL, NULL, 0);
    update_around(&c, &dag, 0, &en, 1);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1, "a DAG without its epoch: -1");

    /* entries and unknown fields within count together, up to 4096 */
    update_around(&c, &dag, 1, &en, 4096);
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.npairs == 4096, "4096 segment brokers: decoded");
    pb_uint(&dag, 1000, 1);
    reset(&upd);
    pb_uint(&upd, 1, 42);
    pb_msg(&upd, 2, &dag);
    base(&c, LK_PULSAR_SCALABLE_TOPIC_UPDATE, &upd);
    ok(lk_pulsar_decode(c.p, c.len, &d) == -1, "4096 and an unknown field: -1");

    evbuffer_free(out);
    tb_free(&c);
    tb_free(&w);
    tb_free(&dag);
    tb_free(&upd);
    tb_free(&en);
    tb_free(&i1);
    tb_free(&i2);
}

/* WATCH_TC_ASSIGNMENTS_UPDATE: a snapshot of coordinator partitions and
 * their leader brokers; one mid-election has no URL and no pair. */
static void
test_tc_assignments(void)
{
    struct tb c = {0}, w = {0}, snap = {0}, upd = {0}, a = {0};
    struct lk_pulsar_cmd d;
    struct lk_pulsar_pair p[4];

    for (int pass = 0; pass < 2; pass++) {
        const char *u = pass == 0 ? INT_URL : ext.p;
        reset(&snap);
        pb_uint(&snap, 1, 3); /* parallelism */
        reset(&a);
        pb_uint(&a, 1, 0);
        pb_str(&a, 2, u);
        pb_msg(&snap, 2, &a);
        reset(&a);
        pb_uint(&a, 1, 1); /* mid-election: no broker */
        pb_msg(&snap, 2, &a);
        reset(&a);
        pb_uint(&a, 1, 2);
        pb_str(&a, 2, pass == 0 ? INT2_URL : ext.p);
        if (pass == 1)
            pb_str(&a, 3, ext_tls.p);
        pb_msg(&snap, 2, &a);
        reset(&upd);
        pb_uint(&upd, 1, 9); /* watch_id */
        pb_msg(&upd, 2, &snap);
        base(pass == 0 ? &c : &w, LK_PULSAR_WATCH_TC_ASSIGNMENTS_UPDATE, &upd);
    }
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.npairs == 2,
       "decodes: 2 pairs (one is mid-election)");
    ok(lk_pulsar_pairs(c.p, c.len, p, 4) == 2 && str_is(p[0].url, INT_URL) &&
           str_is(p[1].url, INT2_URL) && !p[0].url_required,
       "tc 0's and tc 2's broker_service_url, optional");
    struct lk_pulsar_pair_edit pe[2] = {{1, 1, &ext, NULL}, {1, 1, &ext, &ext_tls}};
    struct lk_pulsar_edit e = {0, 0, NULL, NULL, -1, 0, pe, 2};
    ok(rewrites_to(&c, &e, &w), "both rewritten, the partition without a leader left as it was");
    dump_command("tc_assignments", 0x03, 0x32, &c);
    ok(rewrites_to(&w, &e, NULL), "already so: nothing to do");
    struct lk_pulsar_pair_edit clr[1] = {{1, 1, NULL, NULL}};
    struct lk_pulsar_edit ec = {0, 0, NULL, NULL, -1, 0, clr, 1};
    struct evbuffer *out = evbuffer_new();
    ok(lk_pulsar_reencode(c.p, c.len, &ec, out) == 1 &&
           lk_pulsar_pairs(evbuffer_pullup(out, -1) + 8, evbuffer_get_length(out) - 8, p, 4) == 1 &&
           str_is(p[0].url, INT2_URL),
       "an optional URL cleared: that pair is gone");
    evbuffer_free(out);
    /* a pair edit on a command with one pair of its own stands for set_url */
    struct tb s = {0};
    pb_str(&s, 1, INT_URL);
    pb_uint(&s, 4, 1);
    base(&c, LK_PULSAR_LOOKUP_RESPONSE, &s);
    reset(&s);
    pb_str(&s, 1, ext.p);
    pb_str(&s, 2, ext_tls.p);
    pb_uint(&s, 4, 1);
    base(&w, LK_PULSAR_LOOKUP_RESPONSE, &s);
    struct lk_pulsar_pair_edit one[1] = {{1, 1, &ext, &ext_tls}};
    struct lk_pulsar_edit e1 = {0, 0, NULL, NULL, -1, 0, one, 1};
    ok(lk_pulsar_decode(c.p, c.len, &d) == 0 && d.npairs == 1 && rewrites_to(&c, &e1, &w),
       "LOOKUP_RESPONSE: one pair, pairs[0] rewrites it");
    tb_free(&s);
    tb_free(&c);
    tb_free(&w);
    tb_free(&snap);
    tb_free(&upd);
    tb_free(&a);
}

/* Which command types the leak guard reads, and how: every type of
 * PulsarApi.proto is known (facts section 4; proxy/pulsar.proto for
 * 70-81), the six that name brokers by their decoded URLs, any other
 * number by its bytes. */
static void
test_type_addrs(void)
{
    static const struct {
        int type;
        enum lk_pulsar_addrs want;
    } t[] = {
        {LK_PULSAR_LOOKUP_RESPONSE, LK_PULSAR_ADDRS_DECODED},
        {LK_PULSAR_CLOSE_PRODUCER, LK_PULSAR_ADDRS_DECODED},
        {LK_PULSAR_CLOSE_CONSUMER, LK_PULSAR_ADDRS_DECODED},
        {LK_PULSAR_TOPIC_MIGRATED, LK_PULSAR_ADDRS_DECODED},
        {LK_PULSAR_CONNECT, LK_PULSAR_ADDRS_NONE},
        {LK_PULSAR_SEND, LK_PULSAR_ADDRS_NONE},
        {LK_PULSAR_MESSAGE, LK_PULSAR_ADDRS_NONE},
        {LK_PULSAR_PING, LK_PULSAR_ADDRS_NONE},
        {39, LK_PULSAR_ADDRS_NONE}, /* GET_OR_CREATE_SCHEMA */
        {38, LK_PULSAR_ADDRS_NONE}, /* ACK_RESPONSE: one per acknowledgement */
        {7, LK_PULSAR_ADDRS_NONE},  /* SEND_RECEIPT */
        {8, LK_PULSAR_ADDRS_TEXT},  /* SEND_ERROR */
        {14, LK_PULSAR_ADDRS_TEXT}, /* ERROR: "not served by this instance:HOST:PORT" */
        {22, LK_PULSAR_ADDRS_TEXT}, /* PARTITIONED_METADATA_RESPONSE */
        {40, LK_PULSAR_ADDRS_TEXT}, /* GET_OR_CREATE_SCHEMA_RESPONSE */
        {63, LK_PULSAR_ADDRS_TEXT}, /* TC_CLIENT_CONNECT_RESPONSE */
        {50, LK_PULSAR_ADDRS_NONE}, /* NEW_TXN */
        {67, LK_PULSAR_ADDRS_NONE}, /* WATCH_TOPIC_LIST_CLOSE */
        {0, LK_PULSAR_ADDRS_BYTES},
        {1, LK_PULSAR_ADDRS_BYTES},
        {41, LK_PULSAR_ADDRS_BYTES}, /* unassigned */
        {69, LK_PULSAR_ADDRS_BYTES},
        {71, LK_PULSAR_ADDRS_DECODED}, /* SCALABLE_TOPIC_UPDATE */
        {80, LK_PULSAR_ADDRS_DECODED}, /* WATCH_TC_ASSIGNMENTS_UPDATE */
        {70, LK_PULSAR_ADDRS_NONE},    /* SCALABLE_TOPIC_LOOKUP, from the client */
        {75, LK_PULSAR_ADDRS_NONE},    /* SCALABLE_TOPIC_ASSIGNMENT_UPDATE: segment:// names */
        {81, LK_PULSAR_ADDRS_NONE},    /* WATCH_TC_ASSIGNMENTS_CLOSE */
        {74, LK_PULSAR_ADDRS_TEXT},    /* SCALABLE_TOPIC_SUBSCRIBE_RESPONSE */
        {77, LK_PULSAR_ADDRS_TEXT},    /* WATCH_SCALABLE_TOPICS_UPDATE */
        {82, LK_PULSAR_ADDRS_BYTES},
        {1000, LK_PULSAR_ADDRS_BYTES},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        ok(lk_pulsar_type_addrs(t[i].type) == t[i].want, "type %d: %d", t[i].type, (int)t[i].want);
}

/* The frames lookout sends as a client (health checks, --probe): CONNECT
 * byte for byte as PulsarApi.proto's numbering gives it (BaseCommand type
 * 1 = 2, connect 2 = {client_version 1, protocol_version 4}), and both
 * read back by the decoder the proxy uses. */
static void
test_client_frames(void)
{
    static const uint8_t want[] = {0x00, 0x00, 0x00, 0x1a, 0x00, 0x00, 0x00, 0x16, 0x08, 0x02,
                                   0x12, 0x12, 0x0a, 0x0e, 'l',  'o',  'o',  'k',  'o',  'u',
                                   't',  '-',  'h',  'e',  'a',  'l',  't',  'h',  0x20, 0x15};
    struct evbuffer *b = evbuffer_new();
    struct lk_pulsar_cmd cmd;
    uint32_t total, cmd_size;
    uint8_t *p;

    ok(lk_pulsar_connect_frame(b, "lookout-health", 21) == 0, "CONNECT built");
    p = evbuffer_pullup(b, -1);
    ok(evbuffer_get_length(b) == sizeof(want) && memcmp(p, want, sizeof(want)) == 0,
       "CONNECT: the bytes of the spec (%zu)", evbuffer_get_length(b));
    ok(lk_pulsar_sizes(p, 1024, &total, &cmd_size) == 0 &&
           lk_pulsar_decode(p + LK_PULSAR_PREFIX, cmd_size, &cmd) == 0 &&
           cmd.type == LK_PULSAR_CONNECT && cmd.protocol_version == 21 &&
           !cmd.has_proxy_to_broker_url,
       "CONNECT decodes: type, protocol version, no proxy_to_broker_url");
    evbuffer_drain(b, evbuffer_get_length(b));
    ok(lk_pulsar_lookup_frame(b, "persistent://public/default/lookout-probe", 7) == 0,
       "LOOKUP built");
    p = evbuffer_pullup(b, -1);
    ok(lk_pulsar_sizes(p, 1024, &total, &cmd_size) == 0 && total + 4 == evbuffer_get_length(b) &&
           lk_pulsar_decode(p + LK_PULSAR_PREFIX, cmd_size, &cmd) == 0 &&
           cmd.type == LK_PULSAR_LOOKUP && cmd.has_request_id && cmd.request_id == 7 &&
           !cmd.has_listener,
       "LOOKUP decodes: type, request id, no listener name");
    ok(memmem(p, evbuffer_get_length(b), "persistent://public/default/lookout-probe", 41) != NULL,
       "... with the topic");
    evbuffer_free(b);
}

/* Two frames, a SEND (8 bytes of command, a payload of 4) and a
 * command of 300 bytes (a type, then one field of 295), as extents cut
 * where a test says: lk_pulsar_frame_at reads a head in place when one
 * extent holds it, from the copy when it spans extents, and asks for the
 * bytes to be put together when it spans them and is over the copy. */
static void
test_frame_at(void)
{
    uint8_t s[8 + 8 + 4 + 8 + 300], copy[LK_PULSAR_COPY];
    static const uint8_t send[] = {0, 0, 0, 16, 0, 0, 0, 8, 0x08, 0x06, 0x32, 0x04,
                                   0x08, 0x01, 0x10, 0x02, 'a', 'b', 'c', 'd'};
    size_t big = sizeof(send);
    struct lk_pulsar_head h;
    struct lk_pulsar_cursor c;
    struct evbuffer_iovec v[4];

    memcpy(s, send, sizeof(send));
    /* totalSize 304, commandSize 300: type 7, then one length-delimited
     * field (9, tag 0x4a) of 295 bytes (0xa7 0x02) */
    s[big] = 0, s[big + 1] = 0, s[big + 2] = 0x01, s[big + 3] = 0x30;
    s[big + 4] = 0, s[big + 5] = 0, s[big + 6] = 0x01, s[big + 7] = 0x2c;
    s[big + 8] = 0x08, s[big + 9] = 0x07, s[big + 10] = 0x4a, s[big + 11] = 0xa7, s[big + 12] = 0x02;
    memset(s + big + 13, 'x', 295);

    /* one extent: both heads in place */
    v[0] = (struct evbuffer_iovec){s, sizeof(s)};
    c = (struct lk_pulsar_cursor){v, 1, 0, 0};
    ok(lk_pulsar_frame_at(&c, sizeof(s), 1 << 20, copy, &h) == 1 && h.total == 16 &&
           h.cmd_size == 8 && h.type == LK_PULSAR_SEND && h.cmd == s + 8,
       "a SEND in one extent: sizes, type, read in place");
    lk_pulsar_cursor_skip(&c, 20);
    ok(lk_pulsar_frame_at(&c, sizeof(s) - 20, 1 << 20, copy, &h) == 1 && h.total == 304 &&
           h.cmd_size == 300 && h.type == 7 && h.cmd == s + big + 8,
       "the next frame, after a skip: a 300-byte command read in place");

    /* the SEND's head cut in three: read from the copy */
    v[0] = (struct evbuffer_iovec){s, 3};
    v[1] = (struct evbuffer_iovec){s + 3, 7};
    v[2] = (struct evbuffer_iovec){s + 10, sizeof(s) - 10};
    c = (struct lk_pulsar_cursor){v, 3, 0, 0};
    ok(lk_pulsar_frame_at(&c, sizeof(s), 1 << 20, copy, &h) == 1 && h.type == LK_PULSAR_SEND &&
           h.cmd == copy + 8 && memcmp(h.cmd, s + 8, 8) == 0,
       "a SEND whose head spans three extents: read from the copy");
    lk_pulsar_cursor_skip(&c, 20);
    ok(c.i == 2 && c.off == 10, "the cursor moves across extents (extent %d, offset %zu)", c.i,
       c.off);

    /* the long command cut: over the copy, so put together first */
    v[0] = (struct evbuffer_iovec){s, big + 100};
    v[1] = (struct evbuffer_iovec){s + big + 100, sizeof(s) - big - 100};
    c = (struct lk_pulsar_cursor){v, 2, 0, 0};
    lk_pulsar_cursor_skip(&c, big);
    ok(lk_pulsar_frame_at(&c, sizeof(s) - big, 1 << 20, copy, &h) == 2 && h.need == 308,
       "a 300-byte command across extents: 2, with the 308 bytes to put together");
    /* its sizes cut, the command whole after them: the sizes from the copy */
    v[0] = (struct evbuffer_iovec){s, big + 5};
    v[1] = (struct evbuffer_iovec){s + big + 5, sizeof(s) - big - 5};
    c = (struct lk_pulsar_cursor){v, 2, 0, 0};
    lk_pulsar_cursor_skip(&c, big);
    ok(lk_pulsar_frame_at(&c, sizeof(s) - big, 1 << 20, copy, &h) == 2 && h.total == 304,
       "... and with only its sizes cut: the same");

    /* too few bytes: what is wanted */
    v[0] = (struct evbuffer_iovec){s, sizeof(s)};
    c = (struct lk_pulsar_cursor){v, 1, 0, 0};
    ok(lk_pulsar_frame_at(&c, 7, 1 << 20, copy, &h) == 0 && h.need == 8,
       "7 bytes: wait, for the sizes' 8");
    ok(lk_pulsar_frame_at(&c, 12, 1 << 20, copy, &h) == 0 && h.need == 16,
       "12 bytes: wait, for the sizes and the command's 16");
    ok(lk_pulsar_frame_at(&c, 16, 1 << 20, copy, &h) == 1,
       "16 bytes: read (the payload streams after)");
    /* sizes refused */
    ok(lk_pulsar_frame_at(&c, sizeof(s), 12, copy, &h) == -1 && h.total == 16,
       "a frame over max_frame: -1, with what it claimed");
}

const struct lk_test_case lk_test_pulsar_codec[] = {
    {"pulsar_codec/sizes", test_sizes},
    {"pulsar_codec/client_frames", test_client_frames},
    {"pulsar_codec/type", test_type},
    {"pulsar_codec/decode", test_decode},
    {"pulsar_codec/lookup_response", test_lookup_response},
    {"pulsar_codec/lookup_strip", test_lookup_strip},
    {"pulsar_codec/close_and_migrated", test_close_and_migrated},
    {"pulsar_codec/unknown_fields", test_unknown_fields},
    {"pulsar_codec/noop", test_noop},
    {"pulsar_codec/malformed", test_malformed},
    {"pulsar_codec/frame", test_frame},
    {"pulsar_codec/frame_at", test_frame_at},
    {"pulsar_codec/type_addrs", test_type_addrs},
    {"pulsar_codec/scalable_update", test_scalable_update},
    {"pulsar_codec/tc_assignments", test_tc_assignments},
    {NULL, NULL},
};
