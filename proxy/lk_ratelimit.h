/*
 * HTTP request rates by client address (limit.requests, limit.burst), one
 * token bucket per client and cluster, shared by the workers.  A bucket
 * holds `burst` requests and gains one every period/requests; a request
 * takes one, and one that finds the bucket empty is refused with the
 * seconds until it holds one again (Retry-After).  A client is what
 * lk_limit.h says (an IPv4 address, an IPv6 /64).
 *
 * A bucket is kept as the one time that says it all (the generic cell rate
 * algorithm of ATM, RFC 2697's meters in another form): when it will be
 * full again.  A bucket full by then is the same as none, so its entry is
 * free to take, and a reload that changes the rate needs no conversion.
 *
 * The table is fixed in size, whatever comes: LK_RATE_ENTRIES entries of
 * 32 bytes (2 MiB), made on the first request of a cluster with a limit,
 * in sets of LK_RATE_WAYS under 64 striped locks.  A client without an
 * entry takes a free one of its set (a bucket full again), else the one
 * of the set that will be full soonest, whose client then starts again
 * from a full bucket (counted: lk_rate_evictions).  A flood from random
 * source addresses thus costs no memory, only evictions, and each of its
 * addresses gets no more than a fresh client's burst.
 */
#ifndef LK_RATELIMIT_H
#define LK_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "lk_limit.h"

#define LK_RATE_WAYS 8
#define LK_RATE_ENTRIES (8192 * LK_RATE_WAYS)
/* limit.requests: at most this many per second or per minute */
#define LK_RATE_MAX 1000000u

/* A rate: `requests` per `per_s` seconds, in buckets of `burst`; all
 * three at least 1 when given to lk_rate_take (requests 0 is a config's
 * "off", which never gets here). */
struct lk_rate {
    unsigned requests, per_s, burst;
};

/*
 * One request from a's client to zone (a cluster's, so that clusters
 * keep their own buckets) at now_ns (any monotonic clock in nanoseconds):
 * 0 if it may go on, or -1 with *retry_s, the whole seconds (at least 1)
 * until its bucket holds a request again.  A client without an address
 * (family 0) is never limited.  From any thread.
 */
int lk_rate_take(const struct lk_addr *a, unsigned zone, const struct lk_rate *r, uint64_t now_ns,
                 unsigned *retry_s);
/* Entries holding a bucket not yet full again at now_ns (/metrics). */
size_t lk_rate_entries(uint64_t now_ns);
/* Buckets not yet full taken over by another client, since start. */
uint64_t lk_rate_evictions(void);

#endif
