/*
 * Tests for proxy/lk_pool.c's allocator for libevent (lk_pool_libevent):
 * a buffer's 16 KiB read reservation, drained, frees its block, and the
 * next reservation of that size gets the same block back (not under
 * AddressSanitizer, which keeps nothing); bytes written through blocks
 * taken again are the bytes read back; blocks of sizes it does not keep,
 * and a thread's blocks when it ends, go back to malloc (LeakSanitizer and
 * valgrind see none lost).
 */
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

const struct lk_test_case lk_test_pool[] = {
    {"pool/libevent-blocks", test_blocks},
    {NULL, NULL},
};
