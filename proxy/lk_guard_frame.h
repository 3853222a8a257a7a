/*
 * The leak guard on binary answers (lk_guard_frame.c): a Kafka response
 * or a Pulsar command, whole, as the client gets it, read field by field
 * from the view the filter chain decoded when there is one, from its bytes
 * when not, and its bytes read for any other string that names a broker.
 */
#ifndef LK_GUARD_FRAME_H
#define LK_GUARD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "lk_guard.h"

struct lk_kafka_view;
struct lk_pulsar_view;

/* One answer, as the client gets it. */
struct lk_guard_answer {
    unsigned proto;       /* LK_PROTO_KAFKA or LK_PROTO_PULSAR */
    /* Kafka: the request's api key and version; Pulsar: the type (any
     * int32), 0 */
    int32_t key;
    int16_t version;
    const uint8_t *p;     /* its bytes, whole */
    size_t len;
    /* Its view as the chain decoded it (lk_filter.h's struct lk_frame), or
     * NULL: its fields are read instead of decoding p again.  written: p
     * is the view written with its edits; else p is the bytes the view was
     * decoded from (no edit, or edits that change no byte or could not be
     * written). */
    const struct lk_kafka_view *kafka;
    const struct lk_pulsar_view *pulsar;
    int written;
};

/*
 * Reads the answer a: PASS or, in block mode with a find, CUT; nothing is
 * changed.  x is filled (lk_guard_x) unless the answer is of a kind never
 * read.
 */
enum lk_guard_verdict lk_guard_frame(const struct lk_guard *g, struct lk_guard_x *x,
                                     const struct lk_guard_answer *a);

#endif
