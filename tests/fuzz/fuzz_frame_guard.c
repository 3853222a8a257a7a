/*
 * Fuzzes the leak guard on binary answers (filters/flt_leak_guard.c's
 * frame hook, proxy/lk_guard.c's lk_guard_frame) as the engine runs it: a whole Kafka response or Pulsar
 * command through the cluster's default chain (kafka, leak_guard; or
 * listener, lookup, location, pulsar, leak_guard) with lk_flt_run_frame,
 * once per leak_guard mode (off, log, block), over a map whose internal
 * addresses are IP literals and names (one of 47 bytes, whose compact
 * length byte is a host character), a Kafka node with a CONTROLLER
 * listener lookout does not serve, and one Pulsar broker with binary
 * addresses only (its host with any port is an address too,
 * any_port_hit).
 *
 * Input: a flags byte (bit 0: Kafka, else Pulsar; bit 1, Pulsar: a
 * payload section after the command, as SEND and MESSAGE have), the api
 * key or command type (int16), the api version (int16), then the frame
 * after its size field (Kafka) or the command (Pulsar), which the harness
 * frames with sizes that match, as the engine hands frames over.
 *
 * Invariants:
 *   - the guard never changes a byte: with log, the verdict is CONTINUE
 *     and the client gets what it gets with off, with the same rewrites;
 *     off counts no leak;
 *   - block counts what log counts; it refuses the answer (LK_FLT_ERROR,
 *     nothing out) whenever log counted a leak, and otherwise passes it as
 *     off does;
 *   - records are never read: an answer that can carry no address
 *     (lk_kafka_response_addrs NONE: Produce below v10, Fetch below v16,
 *     the Streams group answers v0-1, whose endpoints are the user's
 *     applications' and may equal an internal address (seeds hold such
 *     answers), every other known API; lk_pulsar_type_addrs NONE: SEND,
 *     MESSAGE...) counts nothing and is never refused;
 *   - an answer read as bytes (an api key lookout does not know, a
 *     Metadata version past its own, a Pulsar type it does not know or
 *     one with an error text: lk_pulsar_type_addrs TEXT) in
 *     which a naive scan finds an internal host:port or URL of the map
 *     counts at least one leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "fuzz_util.h"
#include "lk_conf_ready.h"
#include "lk_kafka_codec.h"
#include "lk_log.h"
#include "lk_pulsar_codec.h"
#include "lk_xchg.h"

static const char pulsar_fmt[] =
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "leak_guard = %s\n"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:http://10.0.0.11:8080,"
    "external:pulsar://127.0.1.1:6650\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:pulsar+ssl://pulsar-broker-2.pulsar.svc.cluster.local:6651,"
    "internal:http://pulsar-broker-2.pulsar.svc.cluster.local:8080,"
    "external:pulsar+ssl://127.0.1.2:6651\n"
    /* binary addresses only: its brokerId (10.0.0.13:WEBPORT) is found by
     * its host with any port, but for its external address on that host */
    "[broker prod/b3]\n"
    "advertisedListeners = internal:pulsar://10.0.0.13:6650,external:pulsar://10.0.0.13:16650\n";

static const char *const modes[3] = {"off", "log", "block"};

static struct lk_conf *
conf_of(int kafka, int mode)
{
    static struct lk_conf *confs[2][3];
    char text[2048], err[512];

    if (confs[kafka][mode] != NULL)
        return confs[kafka][mode];
    lk_log_level = LK_ERR; /* the guard's warnings are expected here */
    snprintf(text, sizeof(text), kafka ? lk_fuzz_kafka_guard_map : pulsar_fmt, modes[mode]);
    confs[kafka][mode] = lk_conf_load_buf("fuzz.conf", text, strlen(text), err, sizeof(err));
    if (confs[kafka][mode] == NULL) {
        fprintf(stderr, "fuzz: the map does not load: %s\n", err);
        abort();
    }
    return confs[kafka][mode];
}

struct run {
    enum lk_flt_verdict v;
    unsigned leaks, rewrites;
    uint8_t *out;
    size_t len;
};

static void
run(int kafka, int mode, int16_t key, int16_t version, const uint8_t *fr, size_t flen,
    struct run *r)
{
    const struct lk_conf *conf = conf_of(kafka, mode);
    struct lk_xchg x;
    struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();

    memset(&x, 0, sizeof(x));
    lk_pool_init(&x.pool);
    x.conf = conf;
    x.cluster = conf->clusters[0];
    x.broker = x.cluster->brokers[0];
    x.listener_name = x.cluster->lookup_listener;
    x.proto = kafka ? LK_PROTO_KAFKA : LK_PROTO_PULSAR;
    lk_flt_attach_all(&x);
    evbuffer_add(in, fr, flen);
    r->v = lk_flt_run_frame(&x, key, version, in, out);
    LK_FUZZ_CHECK(evbuffer_get_length(in) == 0);
    r->leaks = x.leaks;
    r->rewrites = x.rewrites;
    r->len = evbuffer_get_length(out);
    r->out = malloc(r->len + 1);
    if (r->out == NULL)
        abort();
    evbuffer_remove(out, r->out, r->len);
    lk_flt_detach_all(&x);
    lk_pool_free(&x.pool);
    evbuffer_free(in);
    evbuffer_free(out);
}

/* Whether a naive scan finds an address of the map that lookout does not
 * serve (URL or host:port) in b: a broker's internal one, and for Kafka
 * any but its lookup listener's (node 3's CONTROLLER listener). */
static int
naive_leak(int kafka, const uint8_t *b, size_t len)
{
    const struct lk_cluster *cl = conf_of(kafka, 1)->clusters[0];
    const char *pats[64];
    size_t lens[64], n = 0;

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *br = cl->brokers[i];
        for (size_t k = 0; k < br->nlisteners; k++) {
            const struct lk_listener *l = &br->listeners[k];
            if (l != br->internal && (!kafka || l == br->lookup))
                continue;
            for (int sc = 0; sc < LK_SCHEME__COUNT && n + 2 <= 64; sc++) {
                const struct lk_url *u = l->addr[sc];
                if (u == NULL)
                    continue;
                pats[n] = u->text, lens[n] = strlen(u->text), n++;
                pats[n] = u->hostport, lens[n] = strlen(u->hostport), n++;
            }
        }
    }
    return lk_fuzz_naive_find(pats, lens, n, (const char *)b, len, NULL, NULL) != 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run r[3];

    if (size < 5 || size > (1u << 20))
        return 0;
    int kafka = data[0] & 1, payload = !kafka && (data[0] & 2);
    int16_t key = (int16_t)((data[1] << 8) | data[2]);
    int16_t version = (int16_t)((data[3] << 8) | data[4]);
    const uint8_t *body = data + 5;
    size_t blen = size - 5;

    /* the frame as the engine holds it */
    size_t flen = (kafka ? 4 : LK_PULSAR_PREFIX) + blen + (payload ? 6 : 0);
    uint8_t *fr = malloc(flen);
    if (fr == NULL)
        abort();
    uint32_t total = (uint32_t)(flen - 4), cmd = (uint32_t)blen;
    fr[0] = (uint8_t)(total >> 24), fr[1] = (uint8_t)(total >> 16);
    fr[2] = (uint8_t)(total >> 8), fr[3] = (uint8_t)total;
    if (!kafka) {
        if (blen == 0) { /* no command: the engine never hands one over */
            free(fr);
            return 0;
        }
        fr[4] = (uint8_t)(cmd >> 24), fr[5] = (uint8_t)(cmd >> 16);
        fr[6] = (uint8_t)(cmd >> 8), fr[7] = (uint8_t)cmd;
    }
    memcpy(fr + (kafka ? 4 : LK_PULSAR_PREFIX), body, blen);
    if (payload)
        memcpy(fr + flen - 6, "\x0e\x01\x00\x00\x00\x00", 6);
    if (kafka && blen < 4) { /* shorter than a response header: the reader refuses it */
        free(fr);
        return 0;
    }

    for (int m = 0; m < 3; m++)
        run(kafka, m, key, version, fr, flen, &r[m]);

    /* the guard never changes a byte */
    LK_FUZZ_CHECK(r[0].v == LK_FLT_CONTINUE && r[0].leaks == 0);
    LK_FUZZ_CHECK(r[1].v == LK_FLT_CONTINUE);
    LK_FUZZ_CHECK(r[1].len == r[0].len && memcmp(r[1].out, r[0].out, r[0].len) == 0);
    LK_FUZZ_CHECK(r[1].rewrites == r[0].rewrites);
    /* block: what log counted, refused exactly then (or when it cannot read it) */
    LK_FUZZ_CHECK(r[2].leaks == r[1].leaks);
    if (r[1].leaks != 0)
        LK_FUZZ_CHECK(r[2].v == LK_FLT_ERROR);
    if (r[2].v == LK_FLT_CONTINUE)
        LK_FUZZ_CHECK(r[2].len == r[0].len && memcmp(r[2].out, r[0].out, r[0].len) == 0);
    else
        LK_FUZZ_CHECK(r[2].v == LK_FLT_ERROR && r[2].len == 0);
    /* records and payloads are never read */
    int none = kafka ? key != LK_KAFKA_API_VERSIONS &&
                           lk_kafka_response_addrs(key, version) == LK_KAFKA_ADDRS_NONE
                     : lk_pulsar_type_addrs(key) == LK_PULSAR_ADDRS_NONE;
    if (none)
        LK_FUZZ_CHECK(r[1].leaks == 0 && r[2].v == LK_FLT_CONTINUE);
    /* what is read as bytes, the naive scan's finds are found */
    int bytes = kafka ? lk_kafka_response_addrs(key, version) == LK_KAFKA_ADDRS_BYTES
                      : lk_pulsar_type_addrs(key) == LK_PULSAR_ADDRS_BYTES ||
                            lk_pulsar_type_addrs(key) == LK_PULSAR_ADDRS_TEXT;
    if (bytes && naive_leak(kafka, r[0].out, r[0].len))
        LK_FUZZ_CHECK(r[1].leaks != 0);

    for (int m = 0; m < 3; m++)
        free(r[m].out);
    free(fr);
    return 0;
}
