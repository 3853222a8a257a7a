/*
 * Region allocator for connection- and exchange-lifetime memory (ngx_pool,
 * h2o_mem_pool).  Everything allocated from a pool is released at once by
 * lk_pool_clear() or lk_pool_free(); cleanups registered on the pool run
 * first, in reverse order, for resources that are not pool memory.
 */
#ifndef LK_POOL_H
#define LK_POOL_H

/* 1 under AddressSanitizer: the per-thread caches of freed memory (pool
 * chunks here, body buffers in lk_filter.c) keep nothing then, so that
 * ASan sees every block freed. */
#if defined(__SANITIZE_ADDRESS__)
#define LK_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LK_UNDER_ASAN 1
#endif
#endif
#ifndef LK_UNDER_ASAN
#define LK_UNDER_ASAN 0
#endif

#include <stddef.h>
#include "lk_str.h"

struct lk_pool_chunk;
struct lk_pool_cleanup;

struct lk_pool {
    struct lk_pool_chunk *chunks;
    struct lk_pool_cleanup *cleanups;
    size_t first; /* size of the first chunk; 0: LK_POOL_CHUNK */
};

typedef void (*lk_pool_cleanup_cb)(void *arg);

void lk_pool_init(struct lk_pool *pool);
/* A pool whose first chunk holds first bytes (later ones LK_POOL_CHUNK):
 * for pools that live long and hold little, such as a connection's. */
void lk_pool_init_sized(struct lk_pool *pool, size_t first);
/* Returns zeroed, 16-byte aligned memory; aborts on OOM like lk_xmalloc. */
void *lk_palloc(struct lk_pool *pool, size_t size);
/* The same, not zeroed: for what the caller fills at once (strings, copies). */
void *lk_pnalloc(struct lk_pool *pool, size_t size);
char *lk_pstrndup(struct lk_pool *pool, const char *s, size_t len);
struct lk_str lk_pstr(struct lk_pool *pool, const char *s, size_t len);
/* Concatenates two strings into pool memory (NUL-terminated for convenience). */
struct lk_str lk_pstr_concat(struct lk_pool *pool, struct lk_str a, struct lk_str b);
char *lk_psprintf(struct lk_pool *pool, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Runs cb(arg) when the pool is cleared or freed. */
void lk_pool_cleanup_add(struct lk_pool *pool, lk_pool_cleanup_cb cb, void *arg);
/* Runs cleanups and releases all memory; the pool stays usable. */
void lk_pool_clear(struct lk_pool *pool);
#define lk_pool_free lk_pool_clear

/* malloc and free for what a thread makes and frees again and again
 * (per connection, per exchange): freed blocks under 1 KiB, and of 1 KiB
 * to 64 KiB by powers of two, wait per thread for the next of their size
 * (lk_pool.c says why).  NULL on OOM, as malloc; any malloc'd block may
 * be given to lk_tfree, and any of lk_tmalloc's to free or realloc. */
void *lk_tmalloc(size_t n);
void lk_tfree(void *p);
/* lk_tmalloc that aborts on OOM, like lk_xmalloc. */
void *lk_xtmalloc(size_t n);
/* Gives libevent lk_tmalloc and lk_tfree.  Call before any other libevent
 * function. */
void lk_pool_libevent(void);

struct evbuffer;
/* Empty evbuffers kept per thread for the next exchange or connection (up
 * to LK_SPARE_EVBUFFERS; none under AddressSanitizer, which should see
 * each freed): evbuffer_new and evbuffer_free cost some 450 instructions.
 * lk_evbuffer_spare gives a kept one or NULL; lk_evbuffer_get a kept or a
 * new one (aborts on OOM, as lk_xmalloc); lk_evbuffer_put empties b and
 * keeps it, or frees it when as many are kept. */
struct evbuffer *lk_evbuffer_spare(void);
struct evbuffer *lk_evbuffer_get(void);
void lk_evbuffer_put(struct evbuffer *b);

/* Config-lifetime allocations: abort on OOM (h2o_mem_alloc). */
void *lk_xmalloc(size_t size);
void *lk_xcalloc(size_t n, size_t size);
void *lk_xrealloc(void *p, size_t size);
char *lk_xstrdup(const char *s);
char *lk_xstrndup(const char *s, size_t n);

#endif
