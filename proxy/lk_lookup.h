/*
 * The lookup-JSON rewrite (CONTRACT §4) as pure functions over bytes: what
 * the lookup filter (filters/flt_lookup.c) does to a Pulsar lookup answer,
 * and what the tests and the fuzzer hold side by side (its two paths, the
 * validating splice and jansson, the reference).
 */
#ifndef LK_LOOKUP_H
#define LK_LOOKUP_H

#include <stddef.h>
#include <event2/buffer.h>

#include "lk_conf.h"
#include "lk_str.h"

enum lk_lookup_path {
    LK_LOOKUP_ANY = 0, /* the splice, and jansson where it declines: what the filter does */
    LK_LOOKUP_SPLICE,  /* the splice alone: LK_LOOKUP_DECLINED where it would ask jansson */
    LK_LOOKUP_JANSSON, /* jansson alone: parse, edit, dump compact */
};

enum lk_lookup_rc {
    LK_LOOKUP_DECLINED = -1, /* LK_LOOKUP_SPLICE only: the body needs jansson */
    LK_LOOKUP_PASS = 0,      /* not JSON, not LookupData, an unknown broker, no such
                                listener on it: the body goes on as it is */
    LK_LOOKUP_NEW = 1,       /* out holds the new body */
    LK_LOOKUP_SAME = 2,      /* already exactly the listener's addresses: goes on as it is */
};

/*
 * Rewrites the LookupData JSON in body[0..len) into the addresses of the
 * listener `name` of its broker in cl (CONTRACT §4), or of the broker's
 * lookup listener when it lacks that one (lk_broker_client_listener), by
 * `path`.  Returns an enum lk_lookup_rc; the new body is appended to out
 * on LK_LOOKUP_NEW, and out is left as it was otherwise.  *broker (when
 * not NULL) gets the broker whose listener the body was held against, or
 * NULL.
 */
int lk_lookup_rewrite(const struct lk_cluster *cl, const char *name, const char *body, size_t len,
                      enum lk_lookup_path path, struct evbuffer *out,
                      const struct lk_broker **broker);

/* Whether a request target is a topic lookup (/lookup/v2/topic/... or
 * /lookup/v2/destination/..., not their /bundle variant); an absolute-form
 * target is looked at from its path. */
int lk_lookup_target(struct lk_str target);

#endif
