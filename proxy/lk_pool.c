/*
 * Region allocator: chunks of at least LK_POOL_CHUNK bytes, bump-allocated,
 * released together.  Large requests get a chunk of their own.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "lk_pool.h"

#define LK_POOL_CHUNK 4000

/* Chunks of LK_POOL_CHUNK bytes freed by a thread wait here for its next
 * pool, up to LK_POOL_SPARE of them (256 KiB a thread): an exchange's pool
 * is one such chunk, made and freed once per request, and malloc and free
 * of that size cost more than the rest of the pool's work; a turn of the
 * loop with io_uring starts an exchange on every socket it read before
 * any ends.  Not under AddressSanitizer, which should see every chunk
 * freed. */
#define LK_POOL_SPARE (LK_UNDER_ASAN ? 0 : 64)

struct lk_pool_chunk {
    struct lk_pool_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

struct lk_pool_cleanup {
    struct lk_pool_cleanup *next;
    lk_pool_cleanup_cb cb;
    void *arg;
};

static __thread struct lk_pool_chunk *spare;
static __thread unsigned nspare;
static __thread int spare_keyed;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

/* A thread that ends frees its spare chunks (the key's destructor). */
static void
spare_free(void *arg)
{
    (void)arg;
    while (spare != NULL) {
        struct lk_pool_chunk *c = spare;
        spare = c->next;
        free(c);
    }
    nspare = 0;
}

static void
spare_key_make(void)
{
    pthread_key_create(&spare_key, spare_free);
}

static void
oom(void)
{
    fputs("lookout: out of memory\n", stderr);
    abort();
}

void *
lk_xmalloc(size_t size)
{
    void *p = malloc(size != 0 ? size : 1);
    if (p == NULL)
        oom();
    return p;
}

void *
lk_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n != 0 ? n : 1, size != 0 ? size : 1);
    if (p == NULL)
        oom();
    return p;
}

void *
lk_xrealloc(void *p, size_t size)
{
    p = realloc(p, size != 0 ? size : 1);
    if (p == NULL)
        oom();
    return p;
}

char *
lk_xstrndup(const char *s, size_t n)
{
    char *d = lk_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *
lk_xstrdup(const char *s)
{
    return lk_xstrndup(s, strlen(s));
}

void
lk_pool_init(struct lk_pool *pool)
{
    pool->chunks = NULL;
    pool->cleanups = NULL;
    pool->first = 0;
}

void
lk_pool_init_sized(struct lk_pool *pool, size_t first)
{
    lk_pool_init(pool);
    pool->first = first;
}

/* size bytes (a multiple of 16), not zeroed. */
static inline void *
pool_take(struct lk_pool *pool, size_t size)
{
    struct lk_pool_chunk *c = pool->chunks;

    if (__builtin_expect(c == NULL || c->size - c->used < size, 0)) {
        size_t base = c == NULL && pool->first != 0 ? pool->first : LK_POOL_CHUNK;
        size_t csize = size > base ? size : base;
        if (csize == LK_POOL_CHUNK && spare != NULL) {
            c = spare;
            spare = c->next;
            nspare--;
        } else {
            c = lk_xtmalloc(sizeof(*c) + csize);
            c->size = csize;
        }
        c->used = 0;
        if (size > LK_POOL_CHUNK / 4 && pool->chunks != NULL) {
            /* keep the current chunk first so its free space stays usable */
            c->next = pool->chunks->next;
            pool->chunks->next = c;
        } else {
            c->next = pool->chunks;
            pool->chunks = c;
        }
    }
    void *p = c->data + c->used;
    c->used += size;
    return p;
}

void *
lk_palloc(struct lk_pool *pool, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    void *p = pool_take(pool, size);
    memset(p, 0, size);
    return p;
}

void *
lk_pnalloc(struct lk_pool *pool, size_t size)
{
    return pool_take(pool, (size + 15) & ~(size_t)15);
}

char *
lk_pstrndup(struct lk_pool *pool, const char *s, size_t len)
{
    char *d = lk_pnalloc(pool, len + 1);
    if (len != 0)
        memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

struct lk_str
lk_pstr(struct lk_pool *pool, const char *s, size_t len)
{
    return lk_str_make(lk_pstrndup(pool, s, len), len);
}

struct lk_str
lk_pstr_concat(struct lk_pool *pool, struct lk_str a, struct lk_str b)
{
    char *d = lk_pnalloc(pool, a.len + b.len + 1);
    if (a.len != 0)
        memcpy(d, a.p, a.len);
    if (b.len != 0)
        memcpy(d + a.len, b.p, b.len);
    d[a.len + b.len] = '\0';
    return lk_str_make(d, a.len + b.len);
}

char *
lk_psprintf(struct lk_pool *pool, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    char *d = lk_palloc(pool, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(d, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return d;
}

/* The record is pool memory, released after every cleanup has run. */
void
lk_pool_cleanup_add(struct lk_pool *pool, lk_pool_cleanup_cb cb, void *arg)
{
    struct lk_pool_cleanup *cl = lk_pnalloc(pool, sizeof(*cl));
    cl->cb = cb;
    cl->arg = arg;
    cl->next = pool->cleanups;
    pool->cleanups = cl;
}

void
lk_pool_clear(struct lk_pool *pool)
{
    while (pool->cleanups != NULL) {
        struct lk_pool_cleanup *cl = pool->cleanups;
        pool->cleanups = cl->next;
        cl->cb(cl->arg);
    }
    while (pool->chunks != NULL) {
        struct lk_pool_chunk *c = pool->chunks;
        pool->chunks = c->next;
        if (c->size == LK_POOL_CHUNK && nspare + 1 <= LK_POOL_SPARE) { /* may be 0 */
            if (!spare_keyed) {
                pthread_once(&spare_once, spare_key_make);
                pthread_setspecific(spare_key, &spare);
                spare_keyed = 1;
            }
            c->next = spare;
            spare = c;
            nspare++;
        } else {
            lk_tfree(c);
        }
    }
}

/*
 * Short-lived blocks, per thread: libevent's (through
 * event_set_mem_functions), the pools' chunks other than the spares
 * above, and any other caller's of lk_tmalloc.
 *
 * libevent's buffer chains are blocks of 2^k bytes.  A read reserves
 * 16 KiB or more in the input (a 32 KiB block with the chain's header),
 * which the protocol drains, and so frees, within the same turn of the
 * loop; a head written out is a 1 KiB chain, freed once sent.  glibc
 * serves the larger blocks from its bins rather than its per-thread cache,
 * at several hundred instructions a malloc and free, and the 1 KiB ones
 * too once a turn holds more of them than that cache's 7 a size (a turn
 * with io_uring reads every readable socket before any is drained).  So
 * freed blocks of 1 KiB to 64 KiB wait here, per thread and per size, for
 * the next chain of that size, up to LK_BLOCKS_KEPT bytes a thread.
 *
 * Smaller blocks are what each connection and exchange makes and frees:
 * a bufferevent, its evbuffers and their callbacks, timers, a connection
 * pool's first chunk; glibc's cache again holds 7 of a size, fewer than a
 * turn of the loop frees when it ends many connections.  They wait by
 * the 16-byte class of what malloc says they can hold, up to
 * LK_SMALLS_KEPT bytes a thread: a block of class k holds 16k - 8 bytes
 * or more (the least of glibc's chunks of 16k bytes), and a request for
 * n bytes is served from class (n + 23) / 16, whose blocks hold n at
 * least, whatever malloc's own rounding.
 *
 * Any other size, and every block past those bounds, is malloc's.  Not
 * under AddressSanitizer, which should see every block freed.
 */
#define LK_BLOCK_MIN_SHIFT 10
#define LK_BLOCK_MAX_SHIFT 16
#define LK_BLOCKS_KEPT (LK_UNDER_ASAN ? 0 : 2u << 20)
#define LK_SMALL_CLASSES 64 /* classes 2 to 63: requests of up to 1000 bytes */
#define LK_SMALL_MAX (16 * (LK_SMALL_CLASSES - 1) - 8)
#define LK_SMALLS_KEPT (LK_UNDER_ASAN ? 0 : 256u << 10)

struct lk_block {
    struct lk_block *next;
};

static __thread struct lk_block *blocks[LK_BLOCK_MAX_SHIFT - LK_BLOCK_MIN_SHIFT + 1];
static __thread size_t blocks_kept; /* bytes */
static __thread struct lk_block *smalls[LK_SMALL_CLASSES];
static __thread size_t smalls_kept; /* bytes */
static __thread int blocks_keyed;
static pthread_key_t blocks_key;
static pthread_once_t blocks_once = PTHREAD_ONCE_INIT;

/* A thread that ends frees the blocks it kept (the key's destructor). */
static void
chain_free(struct lk_block **head)
{
    while (*head != NULL) {
        struct lk_block *b = *head;
        *head = b->next;
        free(b);
    }
}

static void
blocks_free(void *arg)
{
    (void)arg;
    for (size_t k = 0; k < sizeof(blocks) / sizeof(blocks[0]); k++)
        chain_free(&blocks[k]);
    for (size_t k = 0; k < LK_SMALL_CLASSES; k++)
        chain_free(&smalls[k]);
    blocks_kept = smalls_kept = 0;
}

static void
blocks_key_make(void)
{
    pthread_key_create(&blocks_key, blocks_free);
}

static inline void
block_push(struct lk_block **head, void *p)
{
    if (!blocks_keyed) {
        pthread_once(&blocks_once, blocks_key_make);
        pthread_setspecific(blocks_key, blocks);
        blocks_keyed = 1;
    }
    struct lk_block *b = p;
    b->next = *head;
    *head = b;
}

void *
lk_tmalloc(size_t n)
{
    if (n <= LK_SMALL_MAX) {
        size_t k = n <= 24 ? 2 : (n + 23) >> 4;
        struct lk_block *b = smalls[k];
        if (b != NULL) {
            smalls[k] = b->next;
            smalls_kept -= 16 * k;
            return b;
        }
    } else if ((n & (n - 1)) == 0 && n >> LK_BLOCK_MIN_SHIFT != 0 && n >> LK_BLOCK_MAX_SHIFT <= 1) {
        struct lk_block **head = &blocks[__builtin_ctzl(n) - LK_BLOCK_MIN_SHIFT];
        struct lk_block *b = *head;
        if (b != NULL) {
            *head = b->next;
            blocks_kept -= n;
            return b;
        }
    }
    return malloc(n);
}

void *
lk_xtmalloc(size_t n)
{
    void *p = lk_tmalloc(n);
    if (p == NULL)
        oom();
    return p;
}

void
lk_tfree(void *p)
{
    if (p == NULL)
        return;
    size_t u = malloc_usable_size(p);
    size_t k = (u + 8) >> 4;
    if (k < LK_SMALL_CLASSES) {
        if (k >= 2 && smalls_kept + 16 * k <= LK_SMALLS_KEPT) {
            block_push(&smalls[k], p);
            smalls_kept += 16 * k;
            return;
        }
    } else if (u >> LK_BLOCK_MIN_SHIFT != 0 && u >> LK_BLOCK_MAX_SHIFT <= 1) {
        /* The size class of a block is what malloc says it can hold: 2^k,
         * and less than a header more (a larger block of another size is
         * not kept, as its spare bytes would be wasted). */
        unsigned s = 63 - (unsigned)__builtin_clzl(u);
        size_t n = (size_t)1 << s;
        if (u - n < 64 && blocks_kept + n <= LK_BLOCKS_KEPT) {
            block_push(&blocks[s - LK_BLOCK_MIN_SHIFT], p);
            blocks_kept += n;
            return;
        }
    }
    free(p);
}

void
lk_pool_libevent(void)
{
    /* Every block kept is one malloc made: realloc takes it as it is. */
    event_set_mem_functions(lk_tmalloc, realloc, lk_tfree);
}

/* Spare evbuffers ------------------------------------------------------------
 *
 * An HTTP connection's two response buffers (for connections that carry
 * one request each: a turn of the loop with 50 of them started more than
 * 32 before any ended) and a JSON answer's two filter buffers (lookup). */
#define LK_SPARE_EVBUFFERS (LK_UNDER_ASAN ? 0 : 160)

static __thread struct evbuffer *spare_evb[LK_SPARE_EVBUFFERS + 1];
static __thread unsigned nspare_evb;
static __thread int spare_evb_keyed;
static pthread_key_t spare_evb_key;
static pthread_once_t spare_evb_once = PTHREAD_ONCE_INIT;

/* A thread that ends frees what it kept (the key's destructor). */
static void
spare_evb_free(void *arg)
{
    (void)arg;
    while (nspare_evb != 0)
        evbuffer_free(spare_evb[--nspare_evb]);
}

static void
spare_evb_key_make(void)
{
    pthread_key_create(&spare_evb_key, spare_evb_free);
}

struct evbuffer *
lk_evbuffer_spare(void)
{
    return nspare_evb != 0 ? spare_evb[--nspare_evb] : NULL;
}

struct evbuffer *
lk_evbuffer_get(void)
{
    struct evbuffer *b = nspare_evb != 0 ? spare_evb[--nspare_evb] : evbuffer_new();
    if (b == NULL)
        abort(); /* out of memory, as lk_xmalloc */
    return b;
}

void
lk_evbuffer_put(struct evbuffer *b)
{
    if (nspare_evb + 1 > LK_SPARE_EVBUFFERS) { /* (not >=: it may be 0) */
        evbuffer_free(b);
        return;
    }
    if (!spare_evb_keyed) {
        pthread_once(&spare_evb_once, spare_evb_key_make);
        pthread_setspecific(spare_evb_key, spare_evb);
        spare_evb_keyed = 1;
    }
    evbuffer_drain(b, evbuffer_get_length(b));
    spare_evb[nspare_evb++] = b;
}
