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

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct lk_limit_slot;

/* A client's address as lookout keeps it (struct lk_conn's peer): its
 * family, AF_INET or AF_INET6 (0: none known, as a v2 LOCAL or v1 UNKNOWN
 * PROXY header says), the address in network order (IPv4 in the first 4
 * bytes) and the port in host order.  20 bytes where the text took 56. */
struct lk_addr {
    uint8_t ip[16];
    uint16_t port;
    uint8_t family;
};
/* "ip:port" or "[ip6]:port" and its NUL, at most */
#define LK_ADDR_TEXT (INET6_ADDRSTRLEN + 8)

/* sa's address and port (another family: family 0). */
void lk_addr_of(struct lk_addr *a, const struct sockaddr *sa);
/* a as text into buf (LK_ADDR_TEXT bytes): "ip:port" or "[ip6]:port" with
 * port, else the address alone; "" when none is known.  Its length. */
size_t lk_addr_text(const struct lk_addr *a, int port, char *buf);

/*
 * Counts one more connection from a's client if it holds fewer than max:
 * 0 and *slot (to give back with lk_limit_drop), or -1 when it holds max
 * already (nothing counted).  No address (family 0) is not counted: 0 and
 * *slot NULL.  From any thread.
 */
int lk_limit_take(const struct lk_addr *a, unsigned max, struct lk_limit_slot **slot);
/* One connection of slot's client closed (slot NULL: nothing). */
void lk_limit_drop(struct lk_limit_slot *slot);
/* a's client as this table keys it (and the request rate limits,
 * lk_ratelimit.h): 0, or -1 for no address. */
int lk_limit_key(const struct lk_addr *a, uint64_t key[2]);
/* A key's hash, seeded once per process: an attacker who picks its
 * addresses cannot pick where they land. */
uint64_t lk_limit_hash(const uint64_t key[2]);
/* Entries in the table now (clients holding connections), for tests. */
size_t lk_limit_clients(void);
/* The count of the client a belongs to (0 if none), for tests. */
unsigned lk_limit_count(const struct lk_addr *a);

#endif
