/*
 * Connections by client address, shared by the workers (lk_limit.h).
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "lk_limit.h"
#include "lk_pool.h"

#define STRIPES 64
#define BUCKETS 256 /* per stripe: 16384 chains in all */

struct lk_limit_slot {
    struct lk_limit_slot *next;
    uint64_t key[2]; /* the address (IPv4 as ::ffff:a.b.c.d), IPv6 to its /64 */
    unsigned count;
    unsigned stripe, bucket;
};

static struct stripe {
    pthread_mutex_t mu;
    struct lk_limit_slot *bucket[BUCKETS];
    size_t entries;
} stripes[STRIPES];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t seed; /* an attacker who picks its addresses cannot pick one chain */

static void
init(void)
{
    for (size_t i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripes[i].mu, NULL);
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
        seed = (uint64_t)(uintptr_t)&seed ^ 0x9e3779b97f4a7c15ull;
}

int
lk_limit_key(const struct sockaddr *sa, uint64_t key[2])
{
    uint8_t b[16];

    if (sa->sa_family == AF_INET) {
        memset(b, 0, 10);
        b[10] = b[11] = 0xff;
        memcpy(b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        memcpy(b, a, 16);
        if (!IN6_IS_ADDR_V4MAPPED(a))
            memset(b + 8, 0, 8); /* its /64 */
    } else {
        return -1;
    }
    memcpy(key, b, 16);
    return 0;
}

/* splitmix64's finalizer: every bit of x moves every bit of the result */
static uint64_t
mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t
lk_limit_hash(const uint64_t key[2])
{
    pthread_once(&once, init);
    /* Both halves through a full mix: an IPv4 address is the top half of
     * key[1], which a multiply alone would never carry into the low bits
     * that pick a chain (sequential addresses would share a few). */
    return mix(mix(key[0] ^ seed) ^ key[1]);
}

/* key's stripe, and its bucket there in *bi */
static struct stripe *
locate(const uint64_t key[2], unsigned *si, unsigned *bi)
{
    uint64_t h = lk_limit_hash(key);

    *si = (unsigned)(h % STRIPES);
    *bi = (unsigned)((h / STRIPES) % BUCKETS);
    return &stripes[*si];
}

static struct lk_limit_slot **
find(struct stripe *s, unsigned bucket, const uint64_t key[2])
{
    struct lk_limit_slot **pp = &s->bucket[bucket];
    while (*pp != NULL && ((*pp)->key[0] != key[0] || (*pp)->key[1] != key[1]))
        pp = &(*pp)->next;
    return pp;
}

int
lk_limit_take(const struct sockaddr *sa, unsigned max, struct lk_limit_slot **slot)
{
    uint64_t key[2];

    *slot = NULL;
    if (lk_limit_key(sa, key) != 0)
        return 0;
    pthread_once(&once, init);
    unsigned si, bi;
    struct stripe *s = locate(key, &si, &bi);
    int r = 0;

    pthread_mutex_lock(&s->mu);
    struct lk_limit_slot **pp = find(s, bi, key), *e = *pp;
    if (e == NULL) {
        if (max == 0) {
            r = -1;
            goto out;
        }
        e = lk_xmalloc(sizeof(*e));
        memset(e, 0, sizeof(*e));
        memcpy(e->key, key, sizeof(key));
        e->stripe = si;
        e->bucket = bi;
        *pp = e;
        s->entries++;
    } else if (e->count >= max) {
        r = -1;
        goto out;
    }
    e->count++;
    *slot = e;
out:
    pthread_mutex_unlock(&s->mu);
    return r;
}

void
lk_limit_drop(struct lk_limit_slot *slot)
{
    if (slot == NULL)
        return;
    struct stripe *s = &stripes[slot->stripe];

    pthread_mutex_lock(&s->mu);
    if (--slot->count == 0) {
        *find(s, slot->bucket, slot->key) = slot->next;
        s->entries--;
        free(slot);
    }
    pthread_mutex_unlock(&s->mu);
}

size_t
lk_limit_clients(void)
{
    size_t n = 0;

    pthread_once(&once, init);
    for (size_t i = 0; i < STRIPES; i++) {
        pthread_mutex_lock(&stripes[i].mu);
        n += stripes[i].entries;
        pthread_mutex_unlock(&stripes[i].mu);
    }
    return n;
}

unsigned
lk_limit_count(const struct sockaddr *sa)
{
    uint64_t key[2];
    unsigned n = 0;

    if (lk_limit_key(sa, key) != 0)
        return 0;
    pthread_once(&once, init);
    unsigned si, bi;
    struct stripe *s = locate(key, &si, &bi);
    pthread_mutex_lock(&s->mu);
    struct lk_limit_slot *e = *find(s, bi, key);
    if (e != NULL)
        n = e->count;
    pthread_mutex_unlock(&s->mu);
    return n;
}
