/*
 * What the fuzz harnesses share: the invariant check that aborts (so that
 * libFuzzer and the replay both stop on a violation), piece sizes derived
 * from the input (a socket delivering a stream in pieces), the fixed
 * listener maps the filter harnesses rewrite against, a naive reference
 * scan for "host:port" finds with the leak guard's boundary rule, and a
 * protobuf reader that compares two Pulsar commands field by field.
 */
#ifndef LK_FUZZ_UTIL_H
#define LK_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lk_conf.h"
#include "lk_filter.h"
#include "lk_kafka_codec.h"
#include "lk_match.h"
#include "lk_xchg.h"

/* An invariant: on violation, say which and abort (a libFuzzer crash). */
#define LK_FUZZ_CHECK(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Piece sizes from a state seeded by the input: 1 to left, mostly small,
 * sometimes everything that is left. */
uint64_t lk_fuzz_seed(const uint8_t *data, size_t len);
size_t lk_fuzz_piece(uint64_t *state, size_t left);

/* A harness's input, read from the front a byte at a time: 0 once it is
 * used up. */
struct lk_fuzz_in {
    const uint8_t *p;
    size_t len, off;
};
unsigned lk_fuzz_r8(struct lk_fuzz_in *in);

/* A protobuf varint at p[*at..len) into *v (*at past it): 0, or -1 when
 * it runs past len or over ten bytes. */
int lk_fuzz_rd_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v);

/*
 * The two bufferevent pairs of a pair harness, made on base with no
 * socket: cb (the client's) and ub (the broker's), [0] lookout's side.
 * The peers ([1]) never read, so what lookout writes stays in its
 * outputs for the harness to take, and lookout's inputs are the
 * harness's to fill.  Free them with bufferevent_free.
 */
struct bufferevent;
struct event_base;
void lk_fuzz_bev_pairs(struct event_base *base, struct bufferevent *cb[2],
                       struct bufferevent *ub[2]);

/* c as lk_conn_accept leaves a client connection from 127.0.0.1:1 on
 * bind b, of worker w (runtime rt, map conf), over bev, with no socket:
 * its pool ready, no protocol started. */
struct lk_conn;
struct lk_worker;
struct lk_runtime;
void lk_fuzz_conn_init(struct lk_conn *c, struct lk_worker *w, struct lk_runtime *rt,
                       struct lk_conf *conf, const struct lk_bind *b, struct bufferevent *bev);

/* Everything in lookout's output o, taken by its peer: appended to to (a
 * growing buffer of tests/unit/lk_test_wire.h) and drained.  Returns how
 * many bytes. */
struct evbuffer;
struct tb;
size_t lk_fuzz_take(struct evbuffer *o, struct tb *to);

/* The map text describes, loaded (log level LK_ERR from then on: the
 * filters' warnings are expected); aborts if it does not load. */
struct lk_conf *lk_fuzz_load(const char *text);

/*
 * The listener map of the filter harnesses (see fuzz_util.c): four
 * brokers of cluster "prod" with internal, external and other listeners,
 * leak_guard as given.  Loaded once per mode and kept for the process;
 * aborts if it does not load.
 */
struct lk_conf *lk_fuzz_map(enum lk_leak_guard mode);
/*
 * The map of the Pulsar binary harness: "prod" as above (leak_guard =
 * log) with a serviceUrl, and after it two more Pulsar clusters, "west"
 * (lookupListenerName external) and "east" (none), and a Kafka cluster
 * "events"; every Pulsar cluster with pulsar_routing = service when
 * service, else per-broker.  Loaded once per routing, aborts if it does
 * not load.
 */
struct lk_conf *lk_fuzz_pulsar_map(int service);

/* Whether host lies in 10.0.0.0/8 or fd00::/8, the internal_networks of
 * the registry harnesses, by a naive reading of its bytes (IPv4-mapped
 * IPv6 as IPv4): 1 inside, 0 outside, -1 a name. */
int lk_fuzz_inside(const char *host);

/* A Kafka cluster "k" for the leak guard's binary tests, with a %s for its
 * leak_guard: node 1 at INTERNAL://10.0.0.21:9092, node 2 at a 47-byte
 * name (whose compact length byte is '0', a host character: no boundary
 * before it), node 3 with a CONTROLLER listener too (combined KRaft,
 * which lookout does not serve), each with an EXTERNAL address on
 * 127.0.0.1. */
extern const char lk_fuzz_kafka_guard_map[];

/* Calls fn for every occurrence of pats[i] (ASCII case-insensitive) in
 * text that the leak guard counts: not preceded by a host character
 * [A-Za-z0-9._-] and not followed by a digit.  Returns the number found. */
typedef void (*lk_fuzz_find_cb)(void *arg, size_t id, size_t start, size_t len);
size_t lk_fuzz_naive_find(const char *const *pats, const size_t *lens, size_t npats,
                          const char *text, size_t len, lk_fuzz_find_cb fn, void *arg);
/* The same with a flags word per pattern (lk_match_new_flags): an
 * LK_MATCH_RAW pattern counts wherever it occurs.  Of patterns that repeat
 * one another, the first's id and flags count. */
size_t lk_fuzz_naive_find_flags(const char *const *pats, const size_t *lens, const unsigned *flags,
                                size_t npats, const char *text, size_t len, lk_fuzz_find_cb fn,
                                void *arg);

/* A list of matches, in the matcher's order; lk_fuzz_hit is an
 * lk_fuzz_find_cb that appends to one (dropping what does not fit). */
#define LK_FUZZ_MAX_HITS 4096
struct lk_fuzz_hits {
    struct lk_match_hit h[LK_FUZZ_MAX_HITS];
    size_t n;
};
void lk_fuzz_hit(void *hits, size_t id, size_t start, size_t len);
/* Whether a and b hold the same matches (id, end, length) in the same order. */
int lk_fuzz_hits_same(const struct lk_fuzz_hits *a, const struct lk_fuzz_hits *b);

/* The internal addresses of the map's cluster, "host:port" and
 * "scheme://host:port", with the broker and scheme of each. */
struct lk_fuzz_addr {
    const char *text;
    const struct lk_broker *broker;
    enum lk_scheme scheme;
};
size_t lk_fuzz_internal_addrs(const struct lk_cluster *cl, struct lk_fuzz_addr *out, size_t max);

/* An exchange of the map's cluster as the engine has it once the request
 * head is routed to broker b (no filter attached yet): method and target
 * (static strings), the client's TLS, an empty response.  Free it with
 * lk_fuzz_xchg_free, which detaches the filters. */
struct lk_xchg *lk_fuzz_xchg_new(struct lk_conf *conf, const struct lk_broker *b,
                                 const char *method, const char *target, int tls);
void lk_fuzz_xchg_free(struct lk_xchg *x);

/*
 * Checks, aborting on a difference, that Pulsar command b (BaseCommand
 * bytes) keeps command a's fields, as read by a protobuf reader of the
 * harnesses' own, apart from the codec's walk and protobuf-c: the same
 * type, and in every message (BaseCommand, and each command of
 * proxy/pulsar.proto it holds) the same known fields (the last of each)
 * but those listed in edited of the command of that type, and the same
 * unknown fields in the same order with the same bytes.  Both must be
 * well-formed protobuf.
 */
void lk_fuzz_pulsar_same_fields(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                                int type, const uint32_t *edited, size_t nedited);

/*
 * Checks, aborting on a difference, that lookout reads BaseCommand bytes
 * cmd as the broker and the clients do (issue 18 item 6):
 *   - a type lk_pulsar_command_type finds is the only type field there is
 *     (field 1, a varint, by the harnesses' own reader: the tag the
 *     broker's LightProto switches on), so the last one, which every
 *     protobuf reader takes; a command with two of them gets
 *     LK_PULSAR_TYPE_TWICE or -2, and LK_PULSAR_TYPE_TWICE only then (or
 *     when what follows the second is not protobuf);
 *   - protobuf-c, unpacking the same bytes with proxy/pulsar.proto, finds
 *     that type whenever it unpacks them;
 *   - a command lk_pulsar_decode decodes, protobuf-c unpacks, to the same
 *     type, LOOKUP advertised_listener_name, URL pair and
 *     proxy_to_broker_url; and in it every sub-command lookout reads, and
 *     every field of the type's that lookout reads, is there once, so that
 *     protobuf's merging of a message given twice and LightProto's keeping
 *     of the last one alone cannot read it apart.
 */
void lk_fuzz_pulsar_same_reading(const uint8_t *cmd, size_t len);

/*
 * The Kafka endpoint map of the response harnesses (fuzz_kafka_response,
 * fuzz_kafka_fetch_stream), an lk_kafka_endpoint_cb with arg a struct
 * lk_fuzz_kafka_rec: node ids 0-4 (mod 8) become "ext-N.lookout.example"
 * at port 9000 + N (ext-2's host over 127 bytes: a two-byte compact
 * length), 5 is kept, the others are unknown; with rewrite 0 every
 * endpoint is kept.  Each call is recorded, up to LK_FUZZ_MAXEP.
 */
#define LK_FUZZ_MAXEP 8192
struct lk_fuzz_kafka_ep {
    int32_t id;
    struct lk_str host;
    int32_t port;
};
struct lk_fuzz_kafka_rec {
    int rewrite;
    struct lk_fuzz_kafka_ep ep[LK_FUZZ_MAXEP];
    size_t n;
};
enum lk_kafka_ep lk_fuzz_kafka_endpoint(void *arg, int32_t node_id, struct lk_str *host,
                                        int32_t *port);
/* Whether the map rewrites node id, and its external host. */
int lk_fuzz_kafka_rewrites(int32_t id);
struct lk_str lk_fuzz_kafka_ext(int32_t id);

#endif
