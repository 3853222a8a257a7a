/*
 * A Pulsar command from the broker as the filters see it: decoded once
 * (lk_pulsar_decode, by the module that held it, or here) with its broker
 * URL pairs (lk_pulsar_pairs), which filters read and edit, and
 * re-encoded once, after the chain, only when an edit was made (the runner
 * in lk_filter.c).  A command nobody edits leaves as its bytes came.
 */
#ifndef LK_PULSAR_VIEW_H
#define LK_PULSAR_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "lk_pool.h"
#include "lk_pulsar_codec.h"
#include "lk_str.h"

struct evbuffer;

enum lk_pulsar_view_state {
    LK_PULSAR_VIEW_NONE = 0,  /* not a command lookout decodes (a type of no
                               * URL pair, or not a simple frame): its bytes only */
    LK_PULSAR_VIEW_DECODED,   /* cmd and pairs below */
    LK_PULSAR_VIEW_MALFORMED, /* it does not decode: it goes as it came */
};

struct lk_pulsar_view {
    int type;             /* BaseCommand.type */
    const uint8_t *bytes; /* the command (commandSize bytes, after the prefix) */
    size_t len;
    enum lk_pulsar_view_state state;
    struct lk_pulsar_cmd cmd;
    struct lk_pulsar_pair *pairs;           /* cmd.npairs of them, in the order of
                                             * lk_pulsar_pairs */
    struct lk_pulsar_edit edit;             /* what lk_pulsar_view_encode will change */
    struct lk_pulsar_pair_edit *pair_edits; /* edit.pairs, once a pair is set */
    struct lk_pool *pool;
    unsigned edits; /* changes made: the encoding is due when not 0 */
};

/*
 * Reads frame[0..len) (whole, a command of type `type`) into v, allocating
 * from pool; c is its command as the caller decoded it, or NULL to decode
 * it here.  The frame's bytes must stay while v is used.
 */
void lk_pulsar_view_init(struct lk_pulsar_view *v, int type, const uint8_t *frame, size_t len,
                         const struct lk_pulsar_cmd *c, struct lk_pool *pool);

/* Pair i goes out as url and url_tls (NULL: that URL is cleared); their
 * bytes must live as long as v. */
void lk_pulsar_view_set_pair(struct lk_pulsar_view *v, size_t i, const struct lk_str *url,
                             const struct lk_str *url_tls);

/* LOOKUP_RESPONSE: proxy_through_service_url becomes on (1) or off (0). */
void lk_pulsar_view_proxy_through(struct lk_pulsar_view *v, int on);

/* The whole frame with the edits, appended to out: lk_pulsar_reencode's
 * answer (1 appended; 0 the edits change nothing, -1 it cannot be
 * re-encoded: out untouched, the original bytes go). */
int lk_pulsar_view_encode(const struct lk_pulsar_view *v, struct evbuffer *out);

#endif
