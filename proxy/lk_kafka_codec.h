/*
 * The Kafka codec: pure functions over bytes, no sockets, no event loop.
 * Three parts, for the protocol module and its filters:
 *   - a reader that finds frame boundaries in a split byte stream and
 *     reads only a frame's fixed prefix (size, api_key, api_version,
 *     correlation_id: KAFKA-21160), so that the module forwards request
 *     frames untouched and never buffers one;
 *   - which response header version a response to (api_key, api_version)
 *     carries (flexible versions: 1, else 0; ApiVersions always 0);
 *   - response rewriting: the broker endpoints of Metadata,
 *     FindCoordinator, DescribeCluster, Produce and Fetch (KIP-951
 *     NodeEndpoints), ShareFetch and ShareAcknowledge, matched by node id
 *     through a callback, DescribeQuorum v2's controller listeners
 *     (KIP-853) through another, and the ApiVersions clamp.  Only what changes is
 *     re-encoded; every other byte is copied.
 * Fetch and ShareFetch answers, whose records are never held, are read as
 * they stream by lk_kafka_fstream.h; the filters see a response through
 * lk_kafka_view.h.
 * Layouts are those of apache/kafka's message specs
 * (clients/src/main/resources/common/message/<Name>Response.json).
 */
#ifndef LK_KAFKA_CODEC_H
#define LK_KAFKA_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "lk_str.h"

struct evbuffer;

enum lk_kafka_api {
    LK_KAFKA_PRODUCE = 0,
    LK_KAFKA_FETCH = 1,
    LK_KAFKA_METADATA = 3,
    LK_KAFKA_FIND_COORDINATOR = 10,
    LK_KAFKA_SASL_HANDSHAKE = 17,
    LK_KAFKA_API_VERSIONS = 18,
    LK_KAFKA_DESCRIBE_CONFIGS = 32,
    LK_KAFKA_VOTE = 52,
    LK_KAFKA_BEGIN_QUORUM_EPOCH = 53,
    LK_KAFKA_END_QUORUM_EPOCH = 54,
    LK_KAFKA_DESCRIBE_QUORUM = 55,
    LK_KAFKA_FETCH_SNAPSHOT = 59,
    LK_KAFKA_DESCRIBE_CLUSTER = 60,
    LK_KAFKA_SHARE_FETCH = 78,
    LK_KAFKA_SHARE_ACKNOWLEDGE = 79,
    LK_KAFKA_UPDATE_RAFT_VOTER = 82,
    LK_KAFKA_STREAMS_GROUP_HEARTBEAT = 88,
    LK_KAFKA_STREAMS_GROUP_DESCRIBE = 89,
};

#define LK_KAFKA_ERR_UNSUPPORTED_VERSION 35

/* ---- the frame reader (requests and responses) ---------------------- */

/* Bytes of the fixed prefix, size field included: a request's size,
 * api_key, api_version, correlation_id (the same in request header v0-2,
 * and kept so for later ones: RequestHeader.json, KAFKA-21160); a
 * response's size and correlation_id; a bare SASL token's size alone.
 * Nothing after the prefix is read to route, pair or log a request, so
 * KIP-1313 (the client id sent on a connection's first request only, and
 * a request header v3 with a client instance id) changes nothing here:
 * RequestHeader.json has "validVersions": "0-2" in apache/kafka as read
 * (1eb7644, 2024-10-25; 1c73eb8), and v3 exists only in PR #23544
 * (KAFKA-20924, open), whose diff of that file, as far as it was read,
 * touches comments and ClientId's neighbourhood, not the prefix.  A
 * layout lookout does not know passes byte for byte
 * (tests/integration/123-kafka-kips.t). */
#define LK_KAFKA_REQ_PREFIX 12
#define LK_KAFKA_RES_PREFIX 8
#define LK_KAFKA_BARE_PREFIX 4

/* LK_KAFKA_BARE: the SASL tokens that follow a SaslHandshake v0, in either
 * direction: size-prefixed bytes with no Kafka header (KIP-43; what
 * Kafka's SaslServerAuthenticator reads when the client did not ask for
 * SaslAuthenticate), any size from 0 on. */
enum lk_kafka_dir { LK_KAFKA_REQUEST = 0, LK_KAFKA_RESPONSE = 1, LK_KAFKA_BARE = 2 };

struct lk_kafka_prefix {
    int32_t size;        /* the size field: bytes after it */
    int16_t api_key;     /* requests only; -1 in a response or bare token */
    int16_t api_version; /* requests only; -1 in a response or bare token */
    int32_t correlation_id; /* requests and responses; 0 in a bare token */
};

/* What lk_kafka_reader_feed saw, as bits. */
#define LK_KAFKA_RD_PREFIX 1 /* r->prefix is complete (the frame's own) */
#define LK_KAFKA_RD_END 2    /* the frame's last byte was consumed */

struct lk_kafka_reader {
    uint32_t max_size;  /* the largest size field accepted */
    uint8_t prefix_len; /* LK_KAFKA_REQ_PREFIX, _RES_PREFIX or _BARE_PREFIX */
    uint8_t have;       /* prefix bytes gathered of the current frame */
    uint8_t failed;     /* a size out of range was seen: dead */
    uint8_t buf[LK_KAFKA_REQ_PREFIX];
    uint32_t left;                 /* once the prefix is complete: frame bytes still to come */
    struct lk_kafka_prefix prefix; /* the current (or last) frame's */
};

/*
 * Prepares a reader for one direction of one connection.  max_frame_bytes
 * caps the size field (at most INT32_MAX): a frame whose size is above it,
 * negative, or below the rest of the prefix (8 for a request, 4 for a
 * response, 0 for a bare token) is an error.  A reader may be prepared
 * again for another kind of frame between two frames (SASL bare tokens
 * and back), never within one.
 */
void lk_kafka_reader_init(struct lk_kafka_reader *r, enum lk_kafka_dir dir,
                          uint32_t max_frame_bytes);

/*
 * Feeds up to len bytes of the stream.  It consumes bytes up to the next
 * event and stops there, so that the *used bytes of one call always belong
 * to one frame (the caller forwards them as they are):
 *   - the prefix completes: returns LK_KAFKA_RD_PREFIX, r->prefix holds it
 *     (with LK_KAFKA_RD_END too if the frame is the prefix alone);
 *   - the frame's last byte: returns LK_KAFKA_RD_END; the next byte
 *     starts a new frame;
 *   - all len bytes consumed with no event: returns 0;
 *   - the size field is out of range: returns -1 once the 4 size bytes
 *     are in (*used counts them; r->prefix.size holds it for the log), and
 *     -1 with *used = 0 on every call after.
 * While the prefix is read, p must hold len bytes.  Between
 * LK_KAFKA_RD_PREFIX and LK_KAFKA_RD_END the reader only counts: p is not
 * read and may be NULL, so that the caller moves the body with
 * evbuffer_remove_buffer() and reports the count here.
 */
int lk_kafka_reader_feed(struct lk_kafka_reader *r, const uint8_t *p, size_t len, size_t *used);

/* Whether the reader is between a frame's prefix and its end (bytes are
 * counted, not read). */
static inline int
lk_kafka_reader_in_body(const struct lk_kafka_reader *r)
{
    return !r->failed && r->have == r->prefix_len;
}

/*
 * The bytes the reader wants next: in the prefix, the prefix bytes still
 * missing; in the body, the frame bytes still to come (what the caller
 * may forward before the frame ends).
 */
static inline size_t
lk_kafka_reader_want(const struct lk_kafka_reader *r)
{
    return lk_kafka_reader_in_body(r) ? r->left : (size_t)(r->prefix_len - r->have);
}

/* ---- header versions ------------------------------------------------ */

/*
 * The response header version of a response to (api_key, api_version): 1
 * from the API's first flexible version on, else 0; ApiVersions always 0
 * (KIP-511).  -1 for an api_key the codec does not know (the module
 * passes such responses through: their correlation id is where it always
 * is).  The table is that of apache/kafka's specs (keys 0-89).
 */
int lk_kafka_response_header_version(int16_t api_key, int16_t api_version);

/* Whether the codec knows api_key at all (ApiVersions' unknown_api). */
int lk_kafka_api_known(int16_t api_key);

/* ---- SASL after SaslHandshake v0 ----------------------------------- */

/* The largest SaslHandshake v0 request: RequestHeader v1 (api_key,
 * api_version, correlation_id, a client id of at most 32767 bytes) and a
 * Mechanism string of at most 32767, after the 4-byte size. */
#define LK_KAFKA_SASL_HANDSHAKE_MAX (4 + 8 + 2 + 32767 + 2 + 32767)

/*
 * The Mechanism of a SaslHandshake v0 request: frame[0..len) is the whole
 * frame, size field included (SaslHandshakeRequest.json: v0 is
 * RequestHeader v1 and one string, and the version can never change,
 * KAFKA-9577).  Returns 0 with *mech pointing into the frame, or -1 when
 * the frame does not hold that.
 */
int lk_kafka_sasl_mechanism(const uint8_t *frame, size_t len, struct lk_str *mech);

/*
 * After a SaslHandshake v0 the client and the broker exchange bare tokens
 * (LK_KAFKA_BARE) until the mechanism is done, then Kafka frames again;
 * nothing on the wire says when, so the mechanism must.  Returns the
 * number of broker tokens that end a successful exchange: PLAIN 1 (RFC
 * 4616: one token each way, the broker's empty), SCRAM-SHA-256 and
 * SCRAM-SHA-512 2 (RFC 5802: client-first, server-first, client-final,
 * server-final), OAUTHBEARER 1 (RFC 7628: the broker's answer is empty on
 * success; on failure it is an error the client acknowledges with one byte
 * before the broker closes).  0 for any other mechanism (GSSAPI's rounds
 * depend on the Kerberos exchange): a proxy cannot follow it.  A failure
 * ends with the broker closing the connection, whatever the mechanism.
 */
int lk_kafka_sasl_bare_rounds(struct lk_str mech);

/* ---- Produce acks ---------------------------------------------------- */

/* The newest Produce version whose request layout the codec knows. */
#define LK_KAFKA_PRODUCE_MAX_KNOWN 13

/* The most bytes of a Produce request read to find its Acks: the prefix,
 * a ClientId of at most 32767 bytes, 1 KiB of request header tagged
 * fields, a TransactionalId of at most 32767 bytes (with a 5-byte compact
 * length), and Acks itself.  Acks further in is not looked for. */
#define LK_KAFKA_PRODUCE_HEAD_MAX (LK_KAFKA_REQ_PREFIX + 2 + 32767 + 1024 + 5 + 32767 + 2)

/*
 * The Acks of a Produce request, from the first len bytes of its frame
 * (head, size field included): the broker never answers acks=0.  Layout
 * (ProduceRequest.json, RequestHeader.json): request header v1 (v0-8) or
 * v2 (v9+, flexible: tagged fields after the ClientId, which keeps its
 * int16 length), then TransactionalId (v3+; a compact string from v9) and
 * Acks (int16).  Returns 0 with *acks set; -2 when the bytes run out
 * before Acks (more of the frame may tell; a malformed varint reads the
 * same); -1 for another api key, a version above
 * LK_KAFKA_PRODUCE_MAX_KNOWN (KAFKA-21160: a layout lookout does not know
 * is not guessed at) or a negative string length other than null.
 */
int lk_kafka_produce_acks(const uint8_t *head, size_t len, int16_t *acks);

/*
 * Whether a Produce head that was too short with tried bytes (0: not read
 * yet) is worth reading again with have bytes, lim being the most that is
 * ever read (LK_KAFKA_PRODUCE_HEAD_MAX, or less when the frame is
 * shorter): once have has doubled since, or reached lim, which is always
 * read.  A head that comes a byte at a time (a v9+ header may carry
 * thousands of tagged fields before Acks) is so read a logarithmic number
 * of times, at most twice its length in all, not once for every read.
 */
static inline int
lk_kafka_produce_head_due(size_t tried, size_t have, size_t lim)
{
    return have >= lim || have / 2 >= tried;
}

/* ---- KIP-1102: rebootstrap while draining --------------------------- */

/*
 * REBOOTSTRAP_REQUIRED, "Client metadata is stale. The client should
 * rebootstrap to obtain new metadata." (apache/kafka
 * clients/src/main/java/org/apache/kafka/common/protocol/Errors.java, 4.x:
 * code 129; librdkafka src/rdkafka.h RD_KAFKA_RESP_ERR_REBOOTSTRAP_REQUIRED
 * = 129).  KIP-1102 lets a broker put it in the top-level ErrorCode that
 * MetadataResponse gained in v13 ("Version 13 supports top-level error
 * code in the response", MetadataRequest.json @ 4.0.0: the request body
 * did not change).  A client that reads it drops what it knows of the
 * cluster and bootstraps again from its bootstrap.servers: librdkafka
 * 2.11+ (src/rdkafka_metadata.c reads the field when ApiVersion >= 13;
 * rd_kafka_handle_Metadata calls rd_kafka_rebootstrap on 129), the Java
 * client 4.0+ (NetworkClient: response.topLevelError() ==
 * REBOOTSTRAP_REQUIRED -> initiateRebootstrap(), with
 * metadata.recovery.strategy = rebootstrap, which KIP-1102 made the
 * default).  kafka-python has no KIP-1102 (its docs/kips.rst, 3.1-dev).
 */
#define LK_KAFKA_ERR_REBOOTSTRAP_REQUIRED 129

/* The bytes lk_kafka_rebootstrap_answer writes. */
#define LK_KAFKA_REBOOTSTRAP_LEN 23

/*
 * Whether lookout can answer a Metadata request of api_version itself with
 * REBOOTSTRAP_REQUIRED: v13 on (KIP-1102) up to the newest layout the codec
 * knows (lk_kafka_rewrite_max_version; a later one is not guessed).
 */
int lk_kafka_rebootstrap_version(int16_t api_version);

/*
 * Writes a whole MetadataResponse frame (size field first) of api_version
 * answering correlation_id: response header v1 (no tagged fields),
 * ThrottleTimeMs 0, no Brokers, ClusterId null, ControllerId -1, no
 * Topics, ErrorCode REBOOTSTRAP_REQUIRED, no tagged fields (the layout of
 * MetadataResponse.json v13, flexible).  LK_KAFKA_REBOOTSTRAP_LEN bytes at
 * out; returns how many, or 0 when lk_kafka_rebootstrap_version refuses
 * api_version (nothing written).
 */
size_t lk_kafka_rebootstrap_answer(int16_t api_version, int32_t correlation_id, uint8_t *out);

/* ---- response rewriting --------------------------------------------- */

/* A callback's verdict on one broker endpoint. */
enum lk_kafka_ep {
    LK_KAFKA_EP_KEEP = 0, /* leave it as it is */
    LK_KAFKA_EP_REWRITE,  /* *host and *port were set: write those */
    LK_KAFKA_EP_UNKNOWN,  /* no endpoint for this node: left as it is, counted */
};

/*
 * Decides one endpoint: node_id, and host and port as the broker sent them
 * (host points into the frame).  For LK_KAFKA_EP_REWRITE it sets *host
 * (bytes that stay valid until lk_kafka_rewrite_response returns; a host
 * over 32767 bytes is refused and counted as unknown) and *port.  Node ids
 * are never changed.
 */
typedef enum lk_kafka_ep (*lk_kafka_endpoint_cb)(void *arg, int32_t node_id, struct lk_str *host,
                                                 int32_t *port);

/* The rewrite's inputs (endpoint, controller, arg, drop_unknown_api) and
 * its counts. */
struct lk_kafka_rewrite {
    lk_kafka_endpoint_cb endpoint; /* NULL: every endpoint is kept */
    /* DescribeQuorum v2's controller listeners (KIP-853): node_id is the
     * controller's, host and port those of one of its listeners (a uint16
     * on the wire; a rewritten port outside 1-65535 is refused and counted
     * as unknown).  A controller's node id may also be a broker's (KRaft's
     * combined mode) on another listener, so the callback decides by
     * address, not by id.  NULL: every one is kept. */
    lk_kafka_endpoint_cb controller;
    void *arg;
    unsigned drop_unknown_api : 1; /* ApiVersions: unknown_api = drop */
    /* set by lk_kafka_rewrite_response (zeroed first) */
    unsigned endpoints; /* endpoints given to the callback */
    unsigned changed;   /* ... whose bytes changed */
    unsigned unknown;   /* ... the callback did not know (left as they were) */
    unsigned skipped;   /* FindCoordinator entries with node id < 0, not asked */
    unsigned clamped;   /* ApiVersions entries whose max version was lowered */
    unsigned dropped;   /* ApiVersions entries removed */
    /* Where the endpoint given to a callback sits in the frame, set just
     * before the call, for a caller that writes the frame itself
     * (lk_kafka_view_encode): its Host field, length and all, at host_at
     * (a compact string when flex; the Port follows the host's bytes),
     * and the size of the tagged field that holds it at tag_at (0: none,
     * only the frame's size encloses it). */
    size_t host_at, tag_at;
    int flex;
};

enum lk_kafka_rw {
    LK_KAFKA_RW_UNCHANGED = 0, /* forward the original bytes; out untouched */
    LK_KAFKA_RW_REWRITTEN,     /* the new frame was appended to out */
    LK_KAFKA_RW_MALFORMED,     /* it does not decode: forward untouched, log */
    LK_KAFKA_RW_UNSUPPORTED,   /* an api key or version the codec does not know */
};

/*
 * What a response to (api_key, api_version) can hold of broker addresses,
 * for the leak guard (filters/flt_leak_guard.c):
 *   NONE     none: ApiVersions, Produce below v10, Fetch below v16,
 *            DescribeQuorum below v2, and every other API the codec knows.
 *            StreamsGroupHeartbeat and StreamsGroupDescribe v0-1 (KIP-1071)
 *            are NONE too: the only host and port they hold are
 *            *application* endpoints (UserEndpoint, PartitionsByUserEndpoint:
 *            the Interactive Queries address of the user's own Streams
 *            instances), which a client must get as its peers gave them,
 *            and which may be any address, one in the brokers' network or
 *            equal to a broker's among them; read as bytes they would be
 *            taken for broker addresses, so they are not read at all;
 *   DECODED  endpoints the codec decodes (the rewrite set, within its
 *            versions): lk_kafka_rewrite_response walks every one;
 *            DescribeQuorum v2 (Nodes[].Listeners, KIP-853) among them;
 *   BYTES    maybe some, in a layout the codec does not decode, so they
 *            can only be looked for in the bytes: Metadata,
 *            FindCoordinator, DescribeCluster and DescribeQuorum past the
 *            codec's versions; the KRaft voter RPCs (Vote,
 *            BeginQuorumEpoch, EndQuorumEpoch, UpdateRaftVoter:
 *            NodeEndpoints); FetchSnapshot (a metadata snapshot holds every
 *            broker's registration); DescribeConfigs, every version (a
 *            broker's advertised.listeners, listeners and controller
 *            quorum settings are host:port strings among its config
 *            values); the Streams group APIs past v1 (a layout not
 *            read, which ApiVersions is clamped below); and an api key the
 *            codec does not know, which could be anything;
 *   RECORDS  maybe some beside records, in a version the codec does not
 *            decode: Produce, Fetch, ShareFetch, ShareAcknowledge past the
 *            codec's versions.  Records are never read, so such an answer
 *            cannot be checked.
 */
enum lk_kafka_addrs {
    LK_KAFKA_ADDRS_NONE = 0,
    LK_KAFKA_ADDRS_DECODED,
    LK_KAFKA_ADDRS_BYTES,
    LK_KAFKA_ADDRS_RECORDS,
};
enum lk_kafka_addrs lk_kafka_response_addrs(int16_t api_key, int16_t api_version);

/*
 * Whether the module holds a response to (api_key, api_version) whole for
 * the filters, rather than stream it: the codec may change it (the rewrite
 * set, ApiVersions), or it may carry a broker address
 * (lk_kafka_response_addrs is not NONE), which the leak guard reads.
 * Produce below v10 and Fetch below v16 carry no endpoint, so the produce
 * and consume paths cost nothing.  An api key the codec does not know is
 * held only with unknown_keys (leak_guard = block: an answer that could
 * carry anything is read before it goes; max_frame_bytes bounds it, as it
 * bounds every frame).  A RECORDS answer is never held: it could not be
 * read anyway, and holding it would cost its whole size (up to
 * max_frame_bytes) for nothing; the module logs it, or closes with block,
 * before any of it moves.  This is the one place that decides.
 */
int lk_kafka_response_wanted(int16_t api_key, int16_t api_version, int unknown_keys);

/*
 * The highest version of api_key the codec rewrites, or -1 for an API
 * outside the rewrite set:
 *   Produce 13, Fetch 18, Metadata 13, FindCoordinator 6,
 *   DescribeCluster 2, ShareFetch 2, ShareAcknowledge 2, DescribeQuorum 2.
 */
int lk_kafka_rewrite_max_version(int16_t api_key);

/*
 * What ApiVersions clamps api_key's max version to, or -1 when it is left
 * as the broker said: the rewrite set's lk_kafka_rewrite_max_version, and
 * the APIs whose answers the codec knows to carry no broker address only
 * up to a version (StreamsGroupHeartbeat 1, StreamsGroupDescribe 1), so
 * that a client never negotiates a version whose answer lookout would
 * have to read blind.
 */
int lk_kafka_clamp_version(int16_t api_key);

/*
 * Rewrites one response frame.  frame[0..len) is the whole frame, its
 * 4-byte size field included (the size must be len - 4); api_key and
 * api_version are the request's.  The response header (correlation id,
 * and its tagged fields in header v1) is copied.  Every endpoint of the
 * rewrite set goes to rw->endpoint; an ApiVersions response (v0-4) gets
 * the max version of each API clamped to lk_kafka_clamp_version() (an
 * entry whose min is above that is removed), and with rw->drop_unknown_api the API keys
 * lk_kafka_api_known() refuses removed.  An ApiVersions error 35
 * (UNSUPPORTED_VERSION) reply is not decoded: its body is v0 whatever the
 * request's version (KIP-511), and it stays as it is.
 * Only changed fields are re-encoded (a host string, a port, an
 * ApiVersions max or count); the enclosing tagged-field size and the frame
 * size are recomputed; all other bytes, unknown tagged fields among them,
 * are copied.  Returns an enum lk_kafka_rw; only LK_KAFKA_RW_REWRITTEN
 * touches out, and out NULL makes it a reading: LK_KAFKA_RW_REWRITTEN then
 * says what would change, and nothing is written.
 */
enum lk_kafka_rw lk_kafka_rewrite_response(const uint8_t *frame, size_t len, int16_t api_key,
                                           int16_t api_version, struct lk_kafka_rewrite *rw,
                                           struct evbuffer *out);

#endif
