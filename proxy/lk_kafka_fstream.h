/*
 * Fetch and ShareFetch answers, streamed: the records pass as they come,
 * and only the tail with the NodeEndpoints is held, rewritten as any
 * response (lk_kafka_codec.h) and fitted back to its length.
 */
#ifndef LK_KAFKA_FSTREAM_H
#define LK_KAFKA_FSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "lk_kafka_codec.h"

struct evbuffer;

/*
 * A Fetch answer is mostly records, and its NodeEndpoints (KIP-951: Fetch
 * v16+, top-level tag 0; ShareFetch: a plain field) come after all of
 * them, in the last bytes of the frame.  Holding the whole frame to
 * rewrite those would hold every consumer's fetch (up to max_frame_bytes)
 * whatever the client's pace.  So these answers are streamed: a small
 * incremental parser of the layout (struct lk_kafka_fstream) tells which
 * bytes pass as they are, records untouched and never looked at, and
 * where the tail begins: for Fetch the top-level tagged-field section, for
 * ShareFetch NodeEndpoints and that section.  Only the tail is held.
 *
 * The frame's size prefix leaves before the tail is known, so the tail
 * that leaves must be exactly as long as the broker's (lk_kafka_tail_fit):
 * the rewritten endpoints, when they are no longer, padded to that length
 * with unknown tagged fields (LK_KAFKA_PAD_TAG), which every client skips
 * (the protocol's rule for tags: Java's generated readers keep them as
 * unknown, librdkafka's rd_kafka_buf_skip_tags steps over them); when
 * they are longer, or exactly one byte shorter (a padding field takes at
 * least 3 bytes), the endpoints are dropped and the whole tail padded: the
 * client then asks Metadata for the new leader, as it did before KIP-951,
 * and lookout rewrites that.  An internal address never leaves, and no
 * length is ever unknown.
 */

/* Padding tags: the largest two-byte uvarints, so that they come after
 * every tag a spec defines (tags are numbered from 0 up: FetchResponse
 * defines only 0 at the top level, ShareFetchResponse none), in the
 * ascending order Java's TaggedFields reader insists on.  A second
 * padding field, when one cannot take the exact length, has the other. */
#define LK_KAFKA_PAD_TAG 16383
#define LK_KAFKA_PAD_TAG2 16382

/* Whether (api_key, api_version) is streamed so: Fetch v16-18 and
 * ShareFetch v0-2 (the versions whose layout the parser knows). */
int lk_kafka_stream_wanted(int16_t api_key, int16_t api_version);

struct lk_kafka_fstream {
    int16_t api_key, api_version;
    uint8_t st;       /* where in the layout (lk_kafka_codec.c) */
    uint8_t tret;     /* where a tagged-field section returns to */
    uint8_t sret;     /* where a string or bytes field returns to */
    uint8_t want_var; /* an unsigned varint is being read */
    uint8_t vshift;   /* ... its bits so far */
    uint8_t tail;     /* the tail has begun: every byte from here is held */
    uint8_t failed;
    uint32_t v;                /* the varint */
    uint32_t left;             /* frame bytes still to come */
    uint32_t skip;             /* bytes to step over unseen (fixed fields, records, tag bodies) */
    uint32_t nt, np, na, ntag; /* entries left: topics, partitions, an inner array, tags */
};

/*
 * Starts the parser on one answer to (api_key, api_version), which
 * lk_kafka_stream_wanted accepts, after its 8-byte prefix (size and
 * correlation id); size is the size field (at least 4).
 */
void lk_kafka_fstream_init(struct lk_kafka_fstream *s, int16_t api_key, int16_t api_version,
                           int32_t size);

/* Bytes the parser may be told of without seeing them (p NULL): inside
 * records or another field it steps over.  0 when it must see the next. */
static inline size_t
lk_kafka_fstream_skippable(const struct lk_kafka_fstream *s)
{
    return s->tail || s->failed ? 0 : s->skip;
}

/*
 * Feeds the next len bytes of the frame (never past its end).  Sets *pass
 * to how many of them, from the start, pass as they are; the other len -
 * *pass are the tail's, for the caller to hold.  p may be NULL when len <=
 * lk_kafka_fstream_skippable().  Returns 1 once the frame's last byte has
 * come, 0 before, -1 when the bytes do not follow the layout (the frame
 * cannot be rewritten: the caller ends the connection).
 */
int lk_kafka_fstream_feed(struct lk_kafka_fstream *s, const uint8_t *p, size_t len, size_t *pass);

/* The most bytes lk_kafka_fstream_head writes. */
#define LK_KAFKA_FSTREAM_HEAD_MAX 24

/*
 * A frame head that makes a whole answer of the tail: size, correlation
 * id, an empty response header tag section, the fixed fields zeroed, an
 * empty Responses array; head + tail is then an answer of the same api
 * and version that lk_kafka_rewrite_response (and the filters) rewrite
 * like any other, whose NodeEndpoints are the tail's.  Writes at most
 * LK_KAFKA_FSTREAM_HEAD_MAX bytes at out and returns how many, or 0 when
 * the tail is too long for a frame.
 */
size_t lk_kafka_fstream_head(int16_t api_key, int16_t api_version, int32_t correlation_id,
                             size_t tail_len, uint8_t *out);

/* What lk_kafka_tail_fit did. */
enum lk_kafka_fit {
    LK_KAFKA_FIT_BAD = -1, /* the tail does not decode, or cannot take want bytes */
    LK_KAFKA_FIT_KEPT = 0, /* the rewritten tail, padded to want bytes if shorter */
    LK_KAFKA_FIT_DROPPED,  /* NodeEndpoints removed (empty for ShareFetch), padded */
};

/*
 * Writes exactly want bytes onto out: the tail t[0..len) (as the filters
 * left it, after lk_kafka_fstream_head's head), padded with unknown
 * tagged fields LK_KAFKA_PAD_TAG(2) at the end of its top-level section
 * when shorter; when it cannot be made want bytes so, the same tail
 * without its NodeEndpoints, padded.  Bytes after the section (a broker's
 * junk) stay last.  Nothing is written when it returns LK_KAFKA_FIT_BAD.
 */
enum lk_kafka_fit lk_kafka_tail_fit(int16_t api_key, const uint8_t *t, size_t len, size_t want,
                                    struct evbuffer *out);

#endif
