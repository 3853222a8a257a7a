/*
 * Client addresses, and connections counted by them across the workers
 * (lk_limit.h).
 */
#include <arpa/inet.h>
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

void
lk_addr_of(struct lk_addr *a, const struct sockaddr *sa)
{
    memset(a, 0, sizeof(*a));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        memcpy(a->ip, &sin->sin_addr, 4);
        a->port = ntohs(sin->sin_port);
        a->family = AF_INET;
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        memcpy(a->ip, &sin6->sin6_addr, 16);
        a->port = ntohs(sin6->sin6_port);
        a->family = AF_INET6;
    }
}

/* n in decimal at p: the end */
static char *
decimal(char *p, unsigned n)
{
    char d[5];
    size_t k = 0;

    do
        d[k++] = (char)('0' + n % 10);
    while ((n /= 10) != 0);
    while (k != 0)
        *p++ = d[--k];
    return p;
}

size_t
lk_addr_text(const struct lk_addr *a, int port, char *buf)
{
    char *p = buf;

    /* IPv4 by hand: an access log line and X-Forwarded-For format it on
     * every request, in a tenth of inet_ntop's instructions. */
    if (a->family == AF_INET) {
        for (int i = 0; i < 4; i++) {
            p = decimal(p, a->ip[i]);
            *p++ = '.';
        }
        p--;
    } else if (a->family == AF_INET6) {
        if (port)
            *p++ = '[';
        if (inet_ntop(AF_INET6, a->ip, p, INET6_ADDRSTRLEN) == NULL) {
            buf[0] = '\0';
            return 0;
        }
        p += strlen(p);
        if (port)
            *p++ = ']';
    }
    if (port && a->family != 0) {
        *p++ = ':';
        p = decimal(p, a->port);
    }
    *p = '\0';
    return (size_t)(p - buf);
}

int
lk_limit_key(const struct lk_addr *a, uint64_t key[2])
{
    uint8_t b[16];

    if (a->family == AF_INET) {
        memset(b, 0, 10);
        b[10] = b[11] = 0xff;
        memcpy(b + 12, a->ip, 4);
    } else if (a->family == AF_INET6) {
        memcpy(b, a->ip, 16);
        if (!IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)(const void *)a->ip))
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
lk_limit_take(const struct lk_addr *a, unsigned max, struct lk_limit_slot **slot)
{
    uint64_t key[2];

    *slot = NULL;
    if (lk_limit_key(a, key) != 0)
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
lk_limit_count(const struct lk_addr *a)
{
    uint64_t key[2];
    unsigned n = 0;

    if (lk_limit_key(a, key) != 0)
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
