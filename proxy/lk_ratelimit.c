/*
 * Request rates by client address, shared by the workers (lk_ratelimit.h).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "lk_limit.h"
#include "lk_pool.h"
#include "lk_ratelimit.h"

#define SETS (LK_RATE_ENTRIES / LK_RATE_WAYS)
#define STRIPES 64
#define NS 1000000000ull

struct entry {
    uint64_t key[2];  /* the client (lk_limit_key) */
    uint64_t full_ns; /* when its bucket is full again: at or before now, free */
    uint32_t zone;
};

static struct entry *table; /* SETS sets of LK_RATE_WAYS */
static pthread_mutex_t stripes[STRIPES];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t evictions;

static void
init(void)
{
    for (size_t i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripes[i], NULL);
    /* untouched pages cost nothing until a set is used */
    __atomic_store_n(&table, lk_xcalloc(LK_RATE_ENTRIES, sizeof(struct entry)), __ATOMIC_RELEASE);
}

/* The entry of key in zone in set (under its lock): its own, a free one,
 * or the one whose bucket is full soonest (evicted). */
static struct entry *
find(struct entry *set, const uint64_t key[2], uint32_t zone, uint64_t now)
{
    struct entry *victim = &set[0];

    for (int i = 0; i < LK_RATE_WAYS; i++) {
        struct entry *e = &set[i];
        if (e->key[0] == key[0] && e->key[1] == key[1] && e->zone == zone)
            return e;
        if (e->full_ns < victim->full_ns)
            victim = e;
    }
    if (victim->full_ns > now)
        __atomic_fetch_add(&evictions, 1, __ATOMIC_RELAXED);
    victim->key[0] = key[0];
    victim->key[1] = key[1];
    victim->zone = zone;
    victim->full_ns = 0;
    return victim;
}

int
lk_rate_take(const struct lk_addr *a, unsigned zone, const struct lk_rate *r, uint64_t now_ns,
             unsigned *retry_s)
{
    uint64_t key[2];

    if (lk_limit_key(a, key) != 0)
        return 0;
    pthread_once(&once, init);
    uint64_t h = lk_limit_hash(key) ^ ((uint64_t)zone * 0x9e3779b97f4a7c15ull);
    size_t si = (size_t)(h % SETS);
    /* one request's share of the period, and the bucket's depth past it */
    uint64_t each = (uint64_t)r->per_s * NS / r->requests;
    uint64_t depth = (uint64_t)(r->burst - 1) * each;
    int res = 0;

    pthread_mutex_lock(&stripes[si % STRIPES]);
    struct entry *e = find(&table[si * LK_RATE_WAYS], key, (uint32_t)zone, now_ns);
    uint64_t full = e->full_ns > now_ns ? e->full_ns : now_ns;
    if (full - now_ns > depth) {
        uint64_t wait = full - now_ns - depth; /* until one request's room */
        *retry_s = (unsigned)((wait + NS - 1) / NS);
        res = -1;
    } else {
        e->full_ns = full + each;
    }
    pthread_mutex_unlock(&stripes[si % STRIPES]);
    return res;
}

size_t
lk_rate_entries(uint64_t now_ns)
{
    struct entry *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    size_t n = 0;

    if (t == NULL)
        return 0; /* no limit has been asked for yet */
    for (size_t s = 0; s < STRIPES; s++) {
        pthread_mutex_lock(&stripes[s]);
        for (size_t i = s * LK_RATE_WAYS; i < LK_RATE_ENTRIES; i += STRIPES * LK_RATE_WAYS)
            for (int w = 0; w < LK_RATE_WAYS; w++)
                n += t[i + (size_t)w].full_ns > now_ns;
        pthread_mutex_unlock(&stripes[s]);
    }
    return n;
}

uint64_t
lk_rate_evictions(void)
{
    return __atomic_load_n(&evictions, __ATOMIC_RELAXED);
}
