/*
 * The Pulsar binary protocol's frames, as pure functions over bytes
 * (facts/pulsar.md §4).  A frame is [totalSize u32][commandSize u32]
 * [BaseCommand] and, for SEND and MESSAGE, a payload section after the
 * command (magic 0x0e01 or 0x0e02); totalSize counts everything after
 * itself.  lookout reads each frame's sizes and the command's type; it
 * decodes just the commands it may rewrite (proxy/pulsar.proto: only the
 * messages and fields lookout touches; read by a walk over the wire format
 * that points into the frame), and re-encodes one with protobuf-c only
 * when something in it changes, keeping its unknown fields.  Every other
 * frame passes byte for byte.
 */
#ifndef LK_PULSAR_CODEC_H
#define LK_PULSAR_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

#include "lk_str.h"

struct evbuffer;

/* BaseCommand.Type values lookout names (facts §4). */
enum lk_pulsar_type {
    LK_PULSAR_CONNECT = 2,
    LK_PULSAR_CONNECTED = 3,
    LK_PULSAR_SEND = 6,
    LK_PULSAR_MESSAGE = 9,
    LK_PULSAR_CLOSE_PRODUCER = 15,
    LK_PULSAR_CLOSE_CONSUMER = 16,
    LK_PULSAR_PING = 18,
    LK_PULSAR_PONG = 19,
    LK_PULSAR_LOOKUP = 23,
    LK_PULSAR_LOOKUP_RESPONSE = 24,
    LK_PULSAR_TOPIC_MIGRATED = 68,
    LK_PULSAR_SCALABLE_TOPIC_UPDATE = 71,       /* Pulsar 5.0 (proxy/pulsar.proto) */
    LK_PULSAR_WATCH_TC_ASSIGNMENTS_UPDATE = 80, /* Pulsar 5.0 */
};

/* CommandLookupTopicResponse.LookupType */
enum lk_pulsar_lookup_type {
    LK_PULSAR_REDIRECT = 0,
    LK_PULSAR_CONNECT_TO = 1,
    LK_PULSAR_FAILED = 2
};

/* totalSize + commandSize */
#define LK_PULSAR_PREFIX 8
/* Default max_frame_bytes: Pulsar's 5 MiB maxMessageSize plus headroom for
 * the command and metadata (CONTRACT §4). */
#define LK_PULSAR_DEFAULT_MAX_FRAME (5 * 1024 * 1024 + 64 * 1024)

/*
 * The sizes of a frame from its first 8 bytes.  0, or -1 when the frame is
 * impossible: totalSize below 4 + commandSize, commandSize 0, or
 * totalSize over max_frame (then *total still says what it claimed).
 */
int lk_pulsar_sizes(const uint8_t p[LK_PULSAR_PREFIX], uint32_t max_frame, uint32_t *total,
                    uint32_t *cmd_size);

/* lk_pulsar_command_type's answer for a command with two type fields. */
#define LK_PULSAR_TYPE_TWICE (-3)

/*
 * The type of a whole BaseCommand (commandSize bytes), wherever field 1
 * is.  -2 if the command is not well-formed protobuf, has no type, or one
 * above INT32_MAX; LK_PULSAR_TYPE_TWICE if it has two (protobuf, and so
 * the broker and the clients, would take the last).  Sub-commands are not
 * looked into.  This is the only reading of a frame's type: lookout never
 * decides from the first bytes of a command, which a second type field
 * further on would contradict.
 */
int lk_pulsar_command_type(const uint8_t *cmd, size_t len);

/* Where a reader is in a buffer's bytes, seen as the extents one
 * evbuffer_peek gives (v[0 .. nv-1]): extent i, off bytes into it. */
struct lk_pulsar_cursor {
    const struct evbuffer_iovec *v;
    int nv, i;
    size_t off;
};

/* A frame's head, as lk_pulsar_frame_at reads it. */
struct lk_pulsar_head {
    uint32_t total, cmd_size;
    int type;           /* lk_pulsar_command_type's answer */
    size_t need;        /* the bytes it wants in one place: the sizes, then the command too */
    const uint8_t *cmd; /* the command's bytes: where they lie, or in copy */
};

/* The longest frame head (sizes and command) lk_pulsar_frame_at gathers
 * into a copy when it spans extents: SEND, MESSAGE and their answers have
 * a few dozen bytes of command. */
#define LK_PULSAR_COPY (LK_PULSAR_PREFIX + 256)

/*
 * The head of the frame at c, of which avail bytes are in c's extents: its
 * sizes, and its command's type once the whole command is there.  The
 * bytes are read where they lie when one extent holds them, the hot path
 * (a SEND or MESSAGE among others from one read); else from copy
 * (LK_PULSAR_COPY bytes, the caller's).  Returns 1 when read (h->type may
 * be negative: the command does not decode, or gives its type twice), 0
 * when fewer than h->need bytes are there, 2 when the head spans extents
 * and is longer than copy (make h->need bytes contiguous, then ask
 * again), -1 for impossible sizes (h->total and h->cmd_size say what the
 * frame claimed).  h->cmd stays valid while the bytes and copy do.
 */
int lk_pulsar_frame_at(const struct lk_pulsar_cursor *c, size_t avail, uint32_t max_frame,
                       uint8_t *copy, struct lk_pulsar_head *h);

/* Moves c on by n bytes, at most what its extents hold after it. */
static inline void
lk_pulsar_cursor_skip(struct lk_pulsar_cursor *c, size_t n)
{
    while (n != 0 && c->i < c->nv) {
        size_t k = c->v[c->i].iov_len - c->off;
        if (k > n) {
            c->off += n;
            return;
        }
        n -= k;
        c->i++;
        c->off = 0;
    }
}

/*
 * What lookout reads of a command it may touch.  Strings point into the
 * command's bytes (valid while they are); has_* say whether the field was
 * present.
 */
struct lk_pulsar_cmd {
    int type;
    /* LOOKUP (CommandLookupTopic) */
    uint64_t request_id; /* LOOKUP, LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER */
    int has_request_id;
    struct lk_str listener; /* advertised_listener_name (7) */
    int has_listener;
    /* LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER, TOPIC_MIGRATED: the
     * broker service URLs (brokerServiceUrl / assignedBrokerServiceUrl /
     * TOPIC_MIGRATED brokerServiceUrl, and their Tls siblings) */
    struct lk_str url, url_tls;
    int has_url, has_url_tls;
    int lookup_type;   /* LOOKUP_RESPONSE response (3), -1 when absent (INT32_MAX
                        * for a value above it) */
    int proxy_through; /* LOOKUP_RESPONSE proxy_through_service_url (8): 1 or 0,
                        * -1 when absent (false to Pulsar) */
    /* CONNECT */
    struct lk_str proxy_to_broker_url; /* (6) */
    int has_proxy_to_broker_url;
    int32_t protocol_version; /* (4), -1 when absent; Pulsar reads it as an int32, so its
                               * low 32 bits, and a negative one is 0 here */
    /* every type: how many URL pairs the command holds (lk_pulsar_pairs);
     * SCALABLE_TOPIC_UPDATE's and WATCH_TC_ASSIGNMENTS_UPDATE's are within
     * it, one per segment broker or coordinator, and are read there */
    size_t npairs;
};

/*
 * Decodes command bytes (commandSize of them) of a type lookout touches
 * (CONNECT, LOOKUP, LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER,
 * TOPIC_MIGRATED, SCALABLE_TOPIC_UPDATE, WATCH_TC_ASSIGNMENTS_UPDATE).
 * 0; -2 for any other type (out->type says which);
 * -1 when malformed: not well-formed protobuf, a type that
 * lk_pulsar_command_type refuses, no sub-command for the type, one of the
 * eight sub-commands (whatever the type) twice, a field a message
 * declares (in proxy/pulsar.proto) twice but a repeated one, or not valid
 * against proxy/pulsar.proto (a field of the wrong wire type, a required
 * one missing, in the sub-command or a message within), or a message of
 * over 4096 unknown fields, or a sub-command of over 4096 unknown fields
 * and repeated entries within it (no Pulsar command comes near).  A command that decodes is
 * one lk_pulsar_reencode can re-encode.  Of an unknown field given twice,
 * both are kept as they came.
 */
int lk_pulsar_decode(const uint8_t *cmd, size_t len, struct lk_pulsar_cmd *out);

/* A broker URL pair of a command: brokerServiceUrl and its Tls sibling,
 * or their like.  url_required: the plain one cannot be cleared
 * (SegmentBrokerAddress.broker_url is required). */
struct lk_pulsar_pair {
    struct lk_str url, url_tls; /* point into the command */
    int has_url, has_url_tls;
    int url_required;
    /* where it sits, for lk_pulsar_reencode: the message holding it is
     * depth messages below the sub-command, entry[d] the index of the one
     * taken at depth d among the entries of a repeated field (0 for a
     * field that is not) */
    unsigned depth;
    uint32_t entry[2];
};

/*
 * The URL pairs of a command that decodes (lk_pulsar_decode 0): the first
 * max of them into out, in order; a pair is there when either URL is.
 * LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER and TOPIC_MIGRATED have
 * at most one, their own; SCALABLE_TOPIC_UPDATE one per
 * dag.segment_brokers entry (in the order they came), then the
 * controller's (dag.controller_broker_url(_tls)); WATCH_TC_ASSIGNMENTS_UPDATE
 * one per snapshot.assignments entry (broker_service_url(_tls)).  Returns
 * how many the command has (which may be more than max), or -1 when
 * lk_pulsar_decode would not return 0.
 */
long lk_pulsar_pairs(const uint8_t *cmd, size_t len, struct lk_pulsar_pair *out, size_t max);

/* The edit of one URL pair: as set_url / url below. */
struct lk_pulsar_pair_edit {
    int set_url, set_url_tls;
    const struct lk_str *url, *url_tls;
};

/* The changes lk_pulsar_reencode makes; those that do not apply to the
 * command's type are ignored. */
struct lk_pulsar_edit {
    /* the URL pair (LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER,
     * TOPIC_MIGRATED): set (with set_url*) to these bytes, or cleared when
     * the pointer is NULL; left alone unless set_url / set_url_tls.  The
     * bytes need to live only during the call. */
    int set_url, set_url_tls;
    const struct lk_str *url, *url_tls;
    int proxy_through;  /* LOOKUP_RESPONSE: 1 (or more) or 0 to set it, -1 to leave it */
    int strip_listener; /* LOOKUP: remove advertised_listener_name */
    /* Or, for any type, the edits of its URL pairs, pair i of
     * lk_pulsar_pairs by pairs[i] (pairs beyond npairs are left alone);
     * for a type with one pair of its own, pairs[0] stands for set_url and
     * the rest above.  An edit that clears a required URL makes the call
     * fail (-1). */
    const struct lk_pulsar_pair_edit *pairs;
    size_t npairs;
};

/*
 * Re-encodes the command with edit's changes and appends the whole simple
 * frame ([totalSize][commandSize][command]) to out (the commands lookout
 * edits carry no payload section).  Every field the edit does not name is
 * kept, unknown ones included, with their bytes as they came (protobuf-c
 * keeps them, after the known fields); known fields come back in field
 * order, each once.  Returns 1 when the frame was appended; 0 when the
 * edit changes nothing (a URL already equal, a field to clear or strip
 * already absent, proxy_through already so, absent counting as 0 and any
 * value but 0 as 1): out untouched, forward the original bytes; -1 when
 * lk_pulsar_decode would not return 0 (out untouched), or when out of
 * memory.
 */
int lk_pulsar_reencode(const uint8_t *cmd, size_t len, const struct lk_pulsar_edit *edit,
                       struct evbuffer *out);

/*
 * What a command of this BaseCommand.Type can hold of broker addresses,
 * for the leak guard (filters/flt_leak_guard.c):
 *   NONE     none: every type of PulsarApi.proto (CONNECT 2 to
 *            GET_OR_CREATE_SCHEMA_RESPONSE 40, NEW_TXN 50 to
 *            WATCH_TOPIC_LIST_CLOSE 67, SCALABLE_TOPIC_LOOKUP 70 to
 *            WATCH_TC_ASSIGNMENTS_CLOSE 81) but those below; SEND and
 *            MESSAGE among them, whose payloads are never read;
 *   DECODED  LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER,
 *            TOPIC_MIGRATED, SCALABLE_TOPIC_UPDATE and
 *            WATCH_TC_ASSIGNMENTS_UPDATE: lk_pulsar_pairs reads their
 *            URLs, and the rest of them (LOOKUP_RESPONSE's message) is
 *            read as TEXT's are;
 *   TEXT     an answer with an error text the broker fills from its
 *            exceptions, which name the broker as it knows itself (its
 *            "not served by this instance:HOST:PORT"): SEND_ERROR,
 *            ERROR, PARTITIONED_METADATA_RESPONSE, CONSUMER_STATS_RESPONSE,
 *            GET_SCHEMA_RESPONSE, GET_OR_CREATE_SCHEMA_RESPONSE and the
 *            transaction coordinator's answers (51 to 63, odd),
 *            SCALABLE_TOPIC_SUBSCRIBE_RESPONSE and
 *            WATCH_SCALABLE_TOPICS_UPDATE: their bytes are read.  Not
 *            ACK_RESPONSE, one per acknowledgement when a client asks for
 *            receipts;
 *   BYTES    a type lookout does not know (a newer broker's): it could
 *            hold anything, so its bytes are read.
 */
enum lk_pulsar_addrs {
    LK_PULSAR_ADDRS_NONE = 0,
    LK_PULSAR_ADDRS_DECODED,
    LK_PULSAR_ADDRS_TEXT,
    LK_PULSAR_ADDRS_BYTES
};
enum lk_pulsar_addrs lk_pulsar_type_addrs(int type);

/* For tests and test brokers: appends a simple frame around command bytes. */
void lk_pulsar_frame(struct evbuffer *out, const uint8_t *cmd, size_t len);

/*
 * The frames lookout sends as a client of its own (health checks and
 * --probe), appended to out: CONNECT with client_version and
 * protocol_version (CommandConnect fields 1 and 4), and LOOKUP of topic
 * (CommandLookupTopic 1 and 2, not authoritative), as PulsarApi.proto
 * numbers them (facts/pulsar.md section 4).  0, or -1 out of memory.
 */
int lk_pulsar_connect_frame(struct evbuffer *out, const char *client_version,
                            uint32_t protocol_version);
int lk_pulsar_lookup_frame(struct evbuffer *out, const char *topic, uint64_t request_id);

#endif
