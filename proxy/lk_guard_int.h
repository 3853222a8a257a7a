/*
 * What the leak guard's two halves share (lk_guard.c: the matcher, its
 * build and the text responses; lk_guard_frame.c: the binary answers),
 * and no other file includes: the built guard, what each pattern of its
 * automaton stands for, and the matcher of a binary-only broker's host
 * with any port (any_port_new in lk_guard.c).
 */
#ifndef LK_GUARD_INT_H
#define LK_GUARD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "lk_conf.h"
#include "lk_match.h"

struct lk_guard_stream;
struct lk_guard_x;

/* A byte a host name may hold, [A-Za-z0-9._-]: one before a find makes it
 * part of a longer name (lk_match.h's boundary rule). */
static inline int
lk_guard_host_char(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

/* What a pattern stands for. */
struct lk_guard_target {
    const struct lk_broker *broker;
    enum lk_scheme scheme;     /* of the internal address */
    int url;                   /* the pattern is "scheme://host:port", not "host:port" */
    int raw;                   /* Kafka: the pattern is the bare host (LK_MATCH_RAW), a
                                * find only when it is a whole string with its port */
    const struct lk_url *addr; /* the internal address */
    const char *text;          /* the pattern (config memory), for logs */
    char *own;                 /* when set, the pattern is this, the host and a quote,
                                * 10.0.0.11": a JSON string ending with the host (a
                                * functions worker's workerHostname, a broker's
                                * advertisedAddress), and text is the host */
    int alone;                 /* Kafka, raw: the host is that of no address lookout
                                * serves, so the whole string is a find with any port
                                * after it (kafka_host_served in lk_guard.c) */
};

struct lk_guard {
    enum lk_leak_guard mode;
    struct lk_match *match;
    struct lk_guard_target *targets; /* by pattern id, below ntargets */
    size_t ntargets;
    /* "HOST:" of each internal address of a Pulsar broker without an
     * internal http or https address, and of each unserved address of a
     * Kafka broker whose host lookout serves nothing on (lk_guard_ap_hit):
     * the patterns of match from ntargets on, raw */
    const struct lk_broker **any_port_broker; /* by pattern id - ntargets */
    char **any_port_text;                     /* the patterns, owned */
    size_t nany_port;
    /* While it is built (lk_guard_new), a Kafka cluster's served hosts,
     * sorted (served_new in lk_guard.c); NULL after. */
    const char **served;
    size_t nserved;
};

/* A "HOST:" match waiting for its port digits (lk_guard_ap_settle). */
struct any_port_open {
    size_t id;
    uint64_t end; /* stream offset after the ':' */
    unsigned nd;  /* digits read so far, up to 6 (one too many) */
    char digits[6];
};

/* Patterns ending at one byte that can wait at once (lk_guard_ap_hit). */
#define ANY_PORT_OPEN 8

/* The any_port patterns' finds waiting in one stream (the automaton's
 * position is the scan's own). */
struct lk_guard_ap {
    uint64_t at;       /* stream offset of the piece being read */
    uint8_t tail[512]; /* the stream's last bytes before it, at offset % 512: more
                        * than LK_MATCH_MAX_LEN + 2, for the bytes before a match */
    unsigned nopen;
    struct any_port_open open[ANY_PORT_OPEN];
};

/* A find of the any_port matcher, "HOST:PORT" (text) of broker b.
 * Nonzero stops the scan. */
typedef int (*lk_guard_ap_cb)(void *arg, const struct lk_broker *b, const char *text);

/* x, its fields filled by x->fill if they are not yet (lk_guard.h). */
struct lk_guard_x *lk_guard_fill(struct lk_guard_x *x);

/* Whether a match lies outside the last one taken in g (the bare form of
 * an address inside its URL form, reported right after it, is the same
 * find); if so it is taken. */
int lk_guard_fresh(struct lk_guard_stream *g, const struct lk_match_hit *hit);

/* s readied for a stream read from its start. */
void lk_guard_ap_init(struct lk_guard_ap *s);
/* A hit of an any_port pattern (hit->id >= conf->ntargets) in the piece
 * p[0..len) at stream offset s->at: it waits for its port digits, and
 * every waiting match whose digits have ended is decided (all of them
 * when the piece is the stream's last, lk_guard_ap_settle): cb for each
 * find, stopping at the first nonzero, which is returned; else 0. */
int lk_guard_ap_hit(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_ap *s,
                    const uint8_t *p, size_t len, const struct lk_match_hit *hit, lk_guard_ap_cb cb,
                    void *arg);
/* Decides the waiting matches whose digits have ended in p[0..len), or all
 * of them when last; cb as lk_guard_ap_hit. */
int lk_guard_ap_settle(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_ap *s,
                       const uint8_t *p, size_t len, int last, lk_guard_ap_cb cb, void *arg);

#endif
