/*
 * A Kafka response as the filters see it: decoded once into its endpoints
 * (node id, host, port), which filters read and set, and re-encoded once,
 * after the chain, only when a setter changed something (the runner in
 * lk_filter.c).  A response nobody changes leaves as its bytes came.  The
 * walk itself is the codec's (lk_kafka_rewrite_response): the decode reads
 * with it and notes where each endpoint's fields sit, and the encode
 * splices: the unchanged runs copied, the new hosts and ports written,
 * the sizes around them (a tagged field's, the frame's) fixed, no second
 * walk.  An ApiVersions clamp is written by the walk (once a connection).
 */
#ifndef LK_KAFKA_VIEW_H
#define LK_KAFKA_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "lk_kafka_codec.h"
#include "lk_pool.h"
#include "lk_str.h"

struct evbuffer;

/* One endpoint of the response, in the order of the frame. */
struct lk_kafka_endpoint {
    int32_t node_id;
    struct lk_str host; /* as the broker sent it (points into the frame) */
    int32_t port;
    /* A DescribeQuorum v2 controller listener (KIP-853): its node id is a
     * controller's, its port a uint16; else a broker endpoint. */
    int controller;
    int set; /* new_host and new_port go out instead */
    struct lk_str new_host;
    int32_t new_port;
    /* where its Host field and the tagged field around it sit
     * (lk_kafka_rewrite's host_at, tag_at) */
    uint32_t host_at, tag_at;
};

struct lk_kafka_view {
    int16_t api_key, api_version; /* the request's */
    const uint8_t *frame;         /* the whole frame, size field included */
    size_t len;
    /* LK_KAFKA_RW_UNCHANGED: decoded (or a response with nothing to
     * decode); LK_KAFKA_RW_UNSUPPORTED: endpoints in a layout the codec
     * does not decode (none below); LK_KAFKA_RW_MALFORMED: it does not
     * decode (none below: the frame goes as it came). */
    enum lk_kafka_rw decoded;
    struct lk_kafka_endpoint *ep;
    size_t nep;
    struct lk_kafka_endpoint inl[8]; /* ep while there are few (most answers) */
    int clamp;            /* ApiVersions: clamp (lk_kafka_view_clamp) */
    int drop_unknown_api; /* ... and drop the keys lookout does not know */
    unsigned edits;       /* changes made: the encoding is due when not 0 */
    int flex;             /* the hosts are compact strings */
};

/* Decodes frame[0..len) (whole, the response to api_key/api_version) into
 * v, its endpoints beyond the first 8 allocated from pool.  The frame's bytes must stay while
 * v is used.  Returns v->decoded. */
enum lk_kafka_rw lk_kafka_view_decode(struct lk_kafka_view *v, const uint8_t *frame, size_t len,
                                      int16_t api_key, int16_t api_version, struct lk_pool *pool);

/* Endpoint i goes out as host:port (host's bytes must live as long as v).
 * 1 when that changes its bytes, 0 when it does not (then, unless it was
 * set before, nothing is: a frame left as it is is never written), -1 (nothing set) when
 * it cannot be encoded: a host over 32767 bytes, or a controller listener's
 * port outside 1-65535. */
int lk_kafka_view_set(struct lk_kafka_view *v, size_t i, struct lk_str host, int32_t port);

/* An ApiVersions response gets each API's max version clamped to
 * lk_kafka_clamp_version (lk_kafka_rewrite_response), and with
 * drop_unknown_api the keys lookout does not know removed. */
void lk_kafka_view_clamp(struct lk_kafka_view *v, int drop_unknown_api);

/* The frame with the view's changes, appended to out: LK_KAFKA_RW_REWRITTEN,
 * or LK_KAFKA_RW_UNCHANGED (they change no byte) or LK_KAFKA_RW_MALFORMED
 * (it cannot be written) with out untouched: the original bytes go. */
enum lk_kafka_rw lk_kafka_view_encode(const struct lk_kafka_view *v, struct evbuffer *out);

/* The same, written by replaying the view's changes through the codec's
 * walk: the reference lk_kafka_view_encode's splice is tested against
 * (tests/fuzz/fuzz_kafka_response.c). */
enum lk_kafka_rw lk_kafka_view_encode_walk(const struct lk_kafka_view *v, struct evbuffer *out);

#endif
