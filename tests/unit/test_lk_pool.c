/*
 * Tests for proxy/lk_pool.c: its allocator for libevent (lk_pool_libevent):
 * a buffer's 16 KiB read reservation, drained, frees its block, and the
 * next reservation of that size gets the same block back (not under
 * AddressSanitizer, which keeps nothing); bytes written through blocks
 * taken again are the bytes read back; blocks of sizes it does not keep,
 * and a thread's blocks when it ends, go back to malloc (LeakSanitizer and
 * valgrind see none lost).  lk_tmalloc's small blocks, by class; a pool's
 * cleanups, whose records are the pool's own memory.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "lk_pool.h"
#include "lk_test.h"

/* A 16 KiB reservation committed with n bytes of pattern c; returns where
 * they went. */
static void *
fill(struct evbuffer *b, size_t n, int c)
{
    struct evbuffer_iovec v;
    if (evbuffer_reserve_space(b, 16384, &v, 1) != 1 || v.iov_len < n)
        return NULL;
    memset(v.iov_base, c, n);
    v.iov_len = n;
    evbuffer_commit_space(b, &v, 1);
    return v.iov_base;
}

static int
holds(struct evbuffer *b, size_t n, int c)
{
    unsigned char got[512];
    if (n > sizeof(got) || evbuffer_get_length(b) != n || evbuffer_remove(b, got, n) != (int)n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != c)
            return 0;
    return 1;
}

static void *
thread_main(void *arg)
{
    (void)arg;
    /* Blocks freed in this thread are kept in it, then freed when it ends. */
    for (int i = 0; i < 4; i++) {
        struct evbuffer *b = evbuffer_new();
        fill(b, 100, 'x');
        evbuffer_free(b);
    }
    return NULL;
}

static void
test_blocks(void)
{
    lk_pool_libevent();
    struct evbuffer *b = evbuffer_new();
    void *first = fill(b, 300, 'a');
    ok(first != NULL && holds(b, 300, 'a'), "a read's reservation holds what was put in it");
    void *again = fill(b, 200, 'b');
    ok(again != NULL && holds(b, 200, 'b'), "the next one, after the drain, too");
    if (LK_UNDER_ASAN)
        ok(1, "under AddressSanitizer nothing is kept (the block is malloc's)");
    else
        ok(again == first, "and it is the same block, taken back from the thread's spares");

    /* Several at once: each its own block, none shared. */
    struct evbuffer *m[8];
    void *at[8];
    int distinct = 1, whole = 1;
    for (int i = 0; i < 8; i++) {
        m[i] = evbuffer_new();
        at[i] = fill(m[i], 64, 'c' + i);
        for (int j = 0; j < i; j++)
            distinct &= at[i] != at[j];
    }
    for (int i = 0; i < 8; i++) {
        whole &= holds(m[i], 64, 'c' + i);
        evbuffer_free(m[i]);
    }
    ok(distinct && whole, "eight buffers filled at once: eight blocks, each with its own bytes");

    /* A chain of a size it does not keep (over 64 KiB) is malloc's. */
    struct evbuffer_iovec v;
    ok(evbuffer_reserve_space(b, 200000, &v, 1) == 1 && v.iov_len >= 200000,
       "a reservation larger than any kept size is served");
    memset(v.iov_base, 'z', 200000);
    v.iov_len = 200000;
    evbuffer_commit_space(b, &v, 1);
    ok(evbuffer_get_length(b) == 200000, "and holds its bytes");
    evbuffer_free(b);

    pthread_t t;
    ok(pthread_create(&t, NULL, thread_main, NULL) == 0 && pthread_join(t, NULL) == 0,
       "a thread that kept blocks ends (its destructor frees them)");
    event_set_mem_functions(NULL, NULL, NULL);
}

/* lk_tmalloc: every block holds what was asked, whichever freed block of
 * the class it came from; a freed small block is the next one of its
 * class (not under AddressSanitizer). */
static void *
small_thread(void *arg)
{
    (void)arg;
    for (size_t n = 8; n <= 1000; n += 56)
        lk_tfree(lk_tmalloc(n));
    return NULL;
}

static void
test_tmalloc(void)
{
    int holds_n = 1, same = 1;
    for (size_t n = 0; n <= 1100; n++) {
        unsigned char *p = lk_tmalloc(n);
        size_t up = p != NULL ? malloc_usable_size(p) : 0;
        holds_n &= p != NULL && up >= n;
        memset(p, 0xa5, n);
        lk_tfree(p);
        /* Every size of the class, served from the block just freed. */
        unsigned char *q = lk_tmalloc(n);
        holds_n &= q != NULL && malloc_usable_size(q) >= n;
        /* (malloc may give a block of a larger class than asked) */
        if (n <= 1000 && (up + 8) >> 4 == (n <= 24 ? 2 : (n + 23) >> 4))
            same &= q == p;
        memset(q, 0x5a, n);
        lk_tfree(q);
    }
    ok(holds_n, "each of 0 to 1100 bytes gets a block that holds it, fresh or kept");
    if (LK_UNDER_ASAN)
        ok(1, "under AddressSanitizer nothing is kept (each block is malloc's)");
    else
        ok(same, "a freed block under 1000 bytes is the next one of its size");

    /* A block of a larger class serves no smaller request: each request
     * gets one whose class is its own (class 3 freed, class 2 asked). */
    void *big = lk_tmalloc(40), *small = lk_tmalloc(20);
    lk_tfree(big);
    void *again = lk_tmalloc(20);
    ok(again != big || LK_UNDER_ASAN, "a block of 40 bytes is not given for 20");
    lk_tfree(again);
    lk_tfree(small);
    lk_tfree(NULL);
    ok(1, "lk_tfree(NULL) does nothing");

    /* Many at once: each its own, and all given back within the bound. */
    void *many[3000];
    int distinct = 1;
    for (int i = 0; i < 3000; i++) {
        many[i] = lk_tmalloc(200);
        memset(many[i], i & 0xff, 200);
    }
    for (int i = 1; i < 3000; i++)
        distinct &=
            many[i] != many[i - 1] && ((unsigned char *)many[i - 1])[199] == ((i - 1) & 0xff);
    for (int i = 0; i < 3000; i++)
        lk_tfree(many[i]);
    ok(distinct, "3000 blocks taken at once are distinct and keep their bytes");

    pthread_t t;
    ok(pthread_create(&t, NULL, small_thread, NULL) == 0 && pthread_join(t, NULL) == 0,
       "a thread that kept small blocks ends (its destructor frees them)");
}

/* Cleanups, their records in the pool itself, run in reverse order, and
 * one added while the pool is cleared runs too. */
static int order[4], norder;
static struct lk_pool *clearing;

static void
note(void *arg)
{
    order[norder++] = (int)(long)arg;
}

static void
note_and_add(void *arg)
{
    note(arg);
    lk_pool_cleanup_add(clearing, note, (void *)3L);
}

static void
test_cleanups(void)
{
    struct lk_pool pool;
    lk_pool_init_sized(&pool, 96);
    clearing = &pool;
    lk_pool_cleanup_add(&pool, note, (void *)1L);
    lk_pool_cleanup_add(&pool, note_and_add, (void *)2L);
    ok(strcmp(lk_pstrndup(&pool, "0123456789", 10), "0123456789") == 0,
       "the cleanups' records leave the pool's memory usable");
    lk_pool_clear(&pool);
    ok(norder == 3 && order[0] == 2 && order[1] == 3 && order[2] == 1,
       "cleanups run last-added first, one added by a cleanup too");
    norder = 0;
    lk_pool_cleanup_add(&pool, note, (void *)4L);
    lk_pool_free(&pool);
    ok(norder == 1 && order[0] == 4, "the pool is usable again after a clear");
}

/* lk_str.h's short helpers against libc's: lk_fmt_dec against snprintf at
 * every digit count's edges and on random values, lk_copy_short against
 * memcpy for every length it takes. */
static void
test_str_helpers(void)
{
    unsigned long long edge[] = {0, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999, 100000,
                                 4294967295ULL, 4294967296ULL, 18446744073709551615ULL};
    char got[24], want[24];
    int bad = 0;

    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        for (int d = -1; d <= 1; d++) {
            unsigned long long v = edge[i] + (unsigned long long)d;
            size_t n = lk_fmt_dec(got, v);
            int m = snprintf(want, sizeof(want), "%llu", v);
            bad += (size_t)m != n || memcmp(got, want, n) != 0;
        }
    }
    srand(7);
    for (int i = 0; i < 100000; i++) {
        unsigned long long v = ((unsigned long long)rand() << 33) ^ ((unsigned long long)rand() << 11) ^
                               (unsigned long long)rand();
        v >>= rand() % 64;
        size_t n = lk_fmt_dec(got, v);
        int m = snprintf(want, sizeof(want), "%llu", v);
        bad += (size_t)m != n || memcmp(got, want, n) != 0;
    }
    ok(bad == 0, "lk_fmt_dec writes what snprintf's %%llu does (edges and 100,000 random values)");

    char src[40], dst[40];
    int cbad = 0;
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (char)('A' + i);
    for (size_t n = 0; n <= 32; n++) {
        memset(dst, '.', sizeof(dst));
        lk_copy_short(dst + 1, src + 3, n);
        cbad += memcmp(dst + 1, src + 3, n) != 0 || dst[0] != '.' || dst[1 + n] != '.';
    }
    ok(cbad == 0, "lk_copy_short copies 0 to 32 bytes exactly, nothing outside");
}

const struct lk_test_case lk_test_pool[] = {
    {"pool/libevent-blocks", test_blocks},
    {"pool/tmalloc", test_tmalloc},
    {"pool/cleanups", test_cleanups},
    {"pool/str-helpers", test_str_helpers},
    {NULL, NULL},
};
