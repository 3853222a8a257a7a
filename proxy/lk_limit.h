/*
 * Client connections counted by source address, across every worker, for
 * max_connections_per_client.  One table shared by the workers: 64 stripes,
 * each a mutex over its own buckets of chained entries, so that two
 * workers accepting from different addresses rarely meet on one lock and
 * an accept costs one uncontended lock and a short chain walk.  An entry
 * exists only while its address holds a connection: it is made by the
 * first and freed by the last, so the table holds at most one entry per
 * open connection, never one per address ever seen.
 *
 * What counts as one client: an IPv4 address; for IPv6, its /64.  One
 * host is normally given a whole /64 (SLAAC, RFC 7421) and may use any
 * address in it, so a count per IPv6 address would cap nobody.  An
 * IPv4-mapped IPv6 address (::ffff:a.b.c.d, a dual-stack socket) counts as
 * its IPv4 address.
 */
#ifndef LK_LIMIT_H
#define LK_LIMIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct lk_limit_slot;

/*
 * Counts one more connection from sa's client if it holds fewer than max:
 * 0 and *slot (to give back with lk_limit_drop), or -1 when it holds max
 * already (nothing counted).  An address of another family is not counted:
 * 0 and *slot NULL.  From any thread.
 */
int lk_limit_take(const struct sockaddr *sa, unsigned max, struct lk_limit_slot **slot);
/* One connection of slot's client closed (slot NULL: nothing). */
void lk_limit_drop(struct lk_limit_slot *slot);
/* sa's client as this table keys it (and the request rate limits,
 * lk_ratelimit.h): 0, or -1 for a family not counted. */
int lk_limit_key(const struct sockaddr *sa, uint64_t key[2]);
/* A key's hash, seeded once per process: an attacker who picks its
 * addresses cannot pick where they land. */
uint64_t lk_limit_hash(const uint64_t key[2]);
/* Entries in the table now (clients holding connections), for tests. */
size_t lk_limit_clients(void);
/* The count of the client sa belongs to (0 if none), for tests. */
unsigned lk_limit_count(const struct sockaddr *sa);

#endif
