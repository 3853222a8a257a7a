/*
 * The access log (lk_access.h): formatting an exchange record as a text or
 * JSON line, where the lines go, and the lines a worker holds until the
 * end of its loop iteration.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <event2/event.h>

#include "lk_access.h"
#include "lk_kafka_codec.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_stats.h"
#include "lk_str.h"

enum { TO_NOWHERE = 0, TO_STDERR, TO_FILE };

static int target = TO_STDERR; /* atomic: workers read it */
static int fd = -1;            /* TO_FILE: the file; its number never changes once open */
static char *path;             /* TO_FILE: the file's name (main thread only) */
/* By target: the most one write(2) may carry (atomic: workers read it).
 * Others write to a pipe or a socket too (lk_log's lines, other
 * processes), and only a write of PIPE_BUF bytes or less is atomic there;
 * a regular file (O_APPEND, or stderr sharing one offset) or a terminal
 * takes a whole write at once. */
static size_t widest[3] = {PIPE_BUF, PIPE_BUF, PIPE_BUF};
/* By target: whether its lines may ride the worker's io_uring submission
 * (lk_access_ring_lines): a pipe, a socket or a character device, which
 * take a write that must not wait (RWF_NOWAIT) or refuse it at once.  Not
 * a regular file: ext4 refuses such a write on an O_APPEND file, and every
 * line would go twice.  Cleared, until the target is set again, by a ride
 * the kernel refused for good (a named pipe: EOPNOTSUPP), so that such a
 * target costs one try; not by a full pipe or socket (EAGAIN), which is
 * that moment's (atomic: workers read it). */
static int ringable[3];
static size_t buffer_size = 64 * 1024; /* log.buffer (atomic: workers read it) */

/* The lines a worker holds (lk_access_thread_start): whole lines, all for
 * one target, written by ev at the end of the loop iteration that made
 * the first of them, or at once when the next would not fit. */
struct held {
    struct event *ev;
    char *p;
    size_t len, cap; /* cap: log.buffer when p was sized */
    size_t ring;     /* the first bytes handed to the ring (lk_access_ring_lines) */
    int to;          /* TO_STDERR or TO_FILE: what the lines were formatted for */
};
static __thread struct held *held;
__thread unsigned char lk_access_ride;

/* Sets widest[to] and ringable[to] for descriptor f. */
static void
target_kind(int to, int f)
{
    struct stat st;
    int ok = fstat(f, &st) == 0;

    __atomic_store_n(&widest[to],
                     ok && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) ? PIPE_BUF : SIZE_MAX,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&ringable[to],
                     ok && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode)),
                     __ATOMIC_RELAXED);
}

/* Writes n bytes of whole lines to to's descriptor: in one write(2), or,
 * past widest[to], in writes of as many whole lines as fit (a line alone
 * is under PIPE_BUF: lk_access_write's is 4 KiB with its NUL).  A write
 * that fails (a full disk, stderr closed) drops the rest, as a single
 * line's write always did. */
static void
write_out(int to, const char *p, size_t n)
{
    int f = to == TO_FILE ? fd : STDERR_FILENO;
    size_t max = __atomic_load_n(&widest[to], __ATOMIC_RELAXED);

    while (n > 0) {
        size_t k = n;
        if (k > max) {
            const char *nl = memrchr(p, '\n', max);
            k = nl != NULL ? (size_t)(nl - p) + 1 : max;
        }
        ssize_t w = write(f, p, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void
held_write(struct held *h)
{
    h->ring = 0;
    if (h->len == 0)
        return;
    write_out(h->to, h->p, h->len);
    h->len = 0;
}

size_t
lk_access_ring_lines(const void **p, int *f)
{
    struct held *h = held;

    /* All of them or none: more than one write takes (past PIPE_BUF on a
     * pipe) is left to write_out, which cuts between lines. */
    if (h == NULL || h->len == 0 || !__atomic_load_n(&ringable[h->to], __ATOMIC_RELAXED) ||
        h->len > __atomic_load_n(&widest[h->to], __ATOMIC_RELAXED))
        return 0;
    *p = h->p;
    *f = h->to == TO_FILE ? fd : STDERR_FILENO;
    h->ring = h->len;
    return h->len;
}

void
lk_access_ring_wrote(int res)
{
    struct held *h = held;
    size_t n = h != NULL ? h->ring : 0, done = res > 0 ? (size_t)res : 0;

    if (n == 0 || n > h->len)
        return; /* cannot happen: nothing was handed over, or it went */
    h->ring = 0;
    if (done < n) {
        /* The rest goes as write(2) takes it (it waits on a full pipe, as
         * it always did; a line the ring cut on a socket is finished).  A
         * target the kernel takes no such write on goes by write(2) from
         * now on, until it is set again. */
        if (res < 0 && res != -EAGAIN && res != -EINTR)
            __atomic_store_n(&ringable[h->to], 0, __ATOMIC_RELAXED);
        write_out(h->to, h->p + done, n - done);
    }
    h->len -= n;
    memmove(h->p, h->p + n, h->len);
}

/* The end of the loop iteration in which the first held line came. */
static void
on_iteration_end(evutil_socket_t s, short what, void *arg)
{
    held_write(arg);
}

void
lk_access_thread_start(struct event_base *base)
{
    struct held *h = lk_xcalloc(1, sizeof(*h));

    /* persistent, though never added: only made active, and then run
     * without the event_del a one-shot event gets */
    h->ev = event_new(base, -1, EV_PERSIST, on_iteration_end, h);
    if (h->ev == NULL) {
        free(h); /* each line is written at once */
        return;
    }
    held = h;
}

void
lk_access_flush(void)
{
    if (held != NULL)
        held_write(held);
}

void
lk_access_thread_end(void)
{
    struct held *h = held;

    if (h == NULL)
        return;
    held_write(h);
    event_free(h->ev);
    free(h->p);
    free(h);
    held = NULL;
}

/* Before a log line goes to stderr (lk_log_set_flush): the access lines
 * this thread holds for stderr come first, so that stderr keeps the order
 * of what happened. */
static void
flush_for_stderr(void)
{
    if (held != NULL && held->to == TO_STDERR)
        held_write(held);
}

/* Where a line for to (LINE_ROOM bytes at most, with its NUL) may be
 * formatted in place, after the lines held: NULL when hold must take it
 * (the first line, log.buffer changed or under LINE_ROOM).  What is held
 * is written first when the line might not fit after it. */
#define LINE_ROOM 4096

static char *
room(struct held *h, int to)
{
    size_t size = __atomic_load_n(&buffer_size, __ATOMIC_RELAXED);

    if (size != h->cap || size < LINE_ROOM)
        return NULL;
    if (h->len != 0 && (h->to != to || h->cap - h->len < LINE_ROOM))
        held_write(h);
    return h->p + h->len;
}

/* The line of n bytes formatted at room's place is held. */
static void
held_add(struct held *h, int to, size_t n)
{
    /* lk_io's flush, due this iteration, writes it: one event less */
    if (h->len == 0 && !lk_access_ride)
        event_active(h->ev, EV_TIMEOUT, 1);
    h->len += n;
    h->to = to;
}

/* Holds line (n bytes, whole lines) for to, or writes it at once. */
static void
hold(struct held *h, int to, const char *line, size_t n)
{
    size_t size = __atomic_load_n(&buffer_size, __ATOMIC_RELAXED);

    if (h->len != 0 && (h->to != to || h->len + n > h->cap || size != h->cap))
        held_write(h);
    if (size != h->cap) { /* log.buffer changed (a reload), or the first line */
        free(h->p);
        h->p = size != 0 ? lk_xmalloc(size) : NULL;
        h->cap = size;
    }
    if (n > h->cap) {
        write_out(to, line, n);
        return;
    }
    memcpy(h->p + h->len, line, n);
    held_add(h, to, n);
}

static int
open_file(const char *name, char *err, size_t errlen)
{
    int f = open(name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0)
        snprintf(err, errlen, "log.access: cannot open %s: %s", name, strerror(errno));
    return f;
}

/* The file's descriptor number stays: dup2 swaps what it refers to in one
 * step, so a writer on another thread never meets a closed descriptor. */
static int
swap_in(const char *name, char *err, size_t errlen)
{
    int f = open_file(name, err, errlen);
    if (f < 0)
        return -1;
    if (fd < 0) {
        fd = f;
    } else if (dup2(f, fd) < 0) {
        snprintf(err, errlen, "log.access: dup2: %s", strerror(errno));
        close(f);
        return -1;
    } else {
        close(f);
    }
    target_kind(TO_FILE, fd);
    return 0;
}

int
lk_access_configure(const struct lk_conf *conf, char *err, size_t errlen)
{
    /* The lines this thread holds go where they were meant for.  Another
     * worker's (at most an iteration's) follow the descriptor they were
     * meant for, which stays open: to the file when the log leaves files,
     * to the new file when another replaces it; none is lost or torn. */
    lk_access_flush();
    lk_log_set_flush(flush_for_stderr);
    target_kind(TO_STDERR, STDERR_FILENO);
    __atomic_store_n(&buffer_size, conf->log_buffer, __ATOMIC_RELAXED);
    if (conf->log_access == LK_ACCESS_FILE) {
        if (swap_in(conf->log_access_file, err, errlen) != 0)
            return -1;
        free(path);
        path = lk_xstrdup(conf->log_access_file);
    }
    __atomic_store_n(&target,
                     conf->log_access == LK_ACCESS_FILE  ? TO_FILE
                     : conf->log_access == LK_ACCESS_OFF ? TO_NOWHERE
                                                         : TO_STDERR,
                     __ATOMIC_RELEASE);
    return 0;
}

int
lk_access_reopen(char *err, size_t errlen)
{
    if (__atomic_load_n(&target, __ATOMIC_ACQUIRE) != TO_FILE || path == NULL)
        return 0; /* stderr is the supervisor's to rotate */
    /* What this thread holds goes to the file being rotated away; another
     * worker's, within an iteration, to the new one: none is lost. */
    lk_access_flush();
    return swap_in(path, err, errlen);
}

void
lk_access_close(void)
{
    lk_access_flush();
    __atomic_store_n(&target, TO_STDERR, __ATOMIC_RELEASE);
    if (fd >= 0)
        close(fd);
    fd = -1;
    free(path);
    path = NULL;
}

/* Formatting --------------------------------------------------------------- */

/* A line is built by appending: bytes, decimal numbers and, for what is
 * rare, printf.  Each append cuts at cap - 1, as vsnprintf would.  The
 * appends are inline with their cut out of line: a line is under 300
 * bytes in a 4 KiB buffer, so a literal's copy is a few moves. */
struct line {
    char *p;
    size_t len, cap; /* cap excludes room kept for the final "\n"; len < cap */
};

/* put_mem's cut: what fits of s before cap - 1; the new length.  It and
 * put_at take the line's fields, not its address, so that the text line's
 * stay in registers. */
static size_t __attribute__((noinline))
mem_cut(char *p, size_t len, size_t cap, const char *s, size_t n)
{
    if (len >= cap)
        return len;
    if (n > cap - len - 1)
        n = cap - len - 1;
    memcpy(p + len, s, n);
    return len + n;
}

static inline __attribute__((always_inline)) void
put_mem(struct line *l, const char *s, size_t n)
{
    if (__builtin_expect(n < l->cap - l->len, 1)) {
        memcpy(l->p + l->len, s, n);
        l->len += n;
    } else {
        l->len = mem_cut(l->p, l->len, l->cap, s, n);
    }
}

#define PUT_LIT(l, s) put_mem((l), (s), sizeof(s) - 1)

/* put_mem for bytes whose length is known only now (an address, a name,
 * the time): up to 32 by two overlapping moves, not a call. */
static inline __attribute__((always_inline)) void
put_var(struct line *l, const char *s, size_t n)
{
    char *d = l->p + l->len;

    if (__builtin_expect(n <= 32 && l->cap - l->len > 32, 1)) {
        lk_copy_short(d, s, n);
        l->len += n;
    } else {
        put_mem(l, s, n);
    }
}

static inline __attribute__((always_inline)) void
put_s(struct line *l, const char *s)
{
    put_var(l, s, strlen(s));
}

static inline __attribute__((always_inline)) void
put_u(struct line *l, unsigned long long v)
{
    if (v < 10 && l->cap - l->len > 1) { /* most counts of a line are 0 */
        l->p[l->len++] = (char)('0' + v);
    } else if (__builtin_expect(l->cap - l->len > 20, 1)) {
        l->len += lk_fmt_dec(l->p + l->len, v); /* at most 20 digits */
    } else {
        char d[20];
        l->len = mem_cut(l->p, l->len, l->cap, d, lk_fmt_dec(d, v));
    }
}

static inline __attribute__((always_inline)) void
put_d(struct line *l, long long v)
{
    if (v < 0) {
        PUT_LIT(l, "-");
        put_u(l, 0ULL - (unsigned long long)v);
    } else {
        put_u(l, (unsigned long long)v);
    }
}

/* printf at p[len], cut at cap - 1; the new length (put). */
static size_t put_at(char *p, size_t len, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noinline));

static size_t
put_at(char *p, size_t len, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (len >= cap)
        return len;
    va_start(ap, fmt);
    int n = vsnprintf(p + len, cap - len, fmt, ap);
    va_end(ap);
    if (n > 0)
        len = len + (size_t)n < cap ? len + (size_t)n : cap - 1;
    return len;
}

#define put(l, ...) ((l)->len = put_at((l)->p, (l)->len, (l)->cap, __VA_ARGS__))

/* The request target as the text line has always shown it, as
 * lk_log_sanitize writes it (printable ASCII kept, any other byte a '.',
 * cut at TARGET_MAX bytes with "..."): copied whole, then mended where a
 * block of 16 (or a word of 8) holds a byte to replace (none, in nearly
 * every target); the last block overlaps the one before, so that no byte
 * is looked at alone unless the target is under 8. */
#define TARGET_MAX 160

static inline __attribute__((always_inline)) int
printable(unsigned char c)
{
    return c >= 0x20 && c < 0x7f;
}

/* Mends d[from..to). */
static void
mend(char *d, size_t from, size_t to)
{
    for (size_t j = from; j < to; j++)
        d[j] = printable((unsigned char)d[j]) ? d[j] : '.';
}

/* Whether a word of 8 may hold a byte under 0x20 (the subtraction borrows
 * into its high bit), or of 0x7f and over (its high bit, or the
 * addition's). */
static inline __attribute__((always_inline)) int
word_suspect(const char *p)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t w;

    memcpy(&w, p, 8);
    return ((((w - ones * 0x20) & ~w) | ((w + ones) | w)) & highs) != 0;
}

#ifdef __SSE2__
/* Whether 16 bytes hold one under 0x20 or of 0x7f and over (those of
 * 0x80 and over are negative, so under 0x20, as signed bytes). */
static inline __attribute__((always_inline)) int
block_suspect(const char *p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm_movemask_epi8(_mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                                          _mm_cmpeq_epi8(x, _mm_set1_epi8(0x7f)))) != 0;
}
#else
static inline __attribute__((always_inline)) int
block_suspect(const char *p)
{
    return word_suspect(p) || word_suspect(p + 8);
}
#endif

/* Mends d[i..n) by blocks of w (16 or 8, a constant), the last one
 * overlapping the one before; where it stopped (n, or i if n is under w). */
static inline __attribute__((always_inline)) size_t
mend_by(char *d, size_t i, size_t n, size_t w)
{
    if (n < w)
        return i;
    for (; i + w <= n; i += w)
        if (w == 8 ? word_suspect(d + i) : block_suspect(d + i))
            mend(d, i, i + w);
    if (i < n && (w == 8 ? word_suspect(d + n - w) : block_suspect(d + n - w)))
        mend(d, i, n);
    return n;
}

static inline __attribute__((always_inline)) void
put_target(struct line *l, const char *s, size_t len)
{
    size_t n = len < TARGET_MAX ? len : TARGET_MAX, i = 0;

    if (n + 3 >= l->cap - l->len) { /* near the cap: cut as put_s cuts */
        char text[TARGET_MAX + 4];
        put_s(l, lk_log_sanitize(text, s, len, TARGET_MAX));
        return;
    }
    char *d = l->p + l->len;
    if (n != 0) /* none (NULL) when the head was refused before it was read */
        memcpy(d, s, n);
    i = mend_by(d, i, n, 16);
    i = mend_by(d, i, n, 8);
    mend(d, i, n);
    l->len += n;
    if (len > TARGET_MAX)
        PUT_LIT(l, "...");
}

/* Microseconds as milliseconds with three decimals: "12.345". */
static void
put_ms3(struct line *l, long long us)
{
    char frac[3] = {(char)('0' + us % 1000 / 100), (char)('0' + us % 100 / 10),
                    (char)('0' + us % 10)};

    if (us < 0) {
        put(l, "%lld.%03lld", us / 1000, us % 1000);
        return;
    }
    put_u(l, (unsigned long long)us / 1000);
    PUT_LIT(l, ".");
    put_mem(l, frac, 3);
}

/* A JSON string of untrusted bytes: quotes, backslashes and every byte
 * outside printable ASCII escaped, so that the line is valid JSON (and
 * UTF-8) whatever the client sent; cut at max bytes. */
static void
put_json_str(struct line *l, const char *s, size_t n, size_t max)
{
    PUT_LIT(l, "\"");
    for (size_t i = 0; i < n && i < max && l->len + 8 < l->cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            put(l, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            put(l, "\\u%04x", ch);
        else
            l->p[l->len++] = (char)ch;
    }
    PUT_LIT(l, "\"");
}

/* The time to the second, as the last line of this thread wrote it:
 * gmtime_r and its printf once a second, not once a line. */
static __thread time_t time_sec = -1;
static __thread char time_text[32]; /* "2026-12-01T22:54:07." */
static __thread size_t time_len;

static inline __attribute__((always_inline)) void
put_time(struct line *l, int json, const char *tag)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != time_sec) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        int n = snprintf(time_text, sizeof(time_text), "%04d-%02d-%02dT%02d:%02d:%02d.",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec);
        time_len = n > 0 && (size_t)n < sizeof(time_text) ? (size_t)n : 0;
        time_sec = ts.tv_sec;
    }
    long ms = ts.tv_nsec / 1000000;
    char frac[3] = {(char)('0' + ms / 100), (char)('0' + ms / 10 % 10), (char)('0' + ms % 10)};
    if (json)
        PUT_LIT(l, "{\"time\":\"");
    put_var(l, time_text, time_len);
    put_mem(l, frac, 3);
    if (json) {
        PUT_LIT(l, "Z\"");
    } else {
        PUT_LIT(l, "Z ");
        put_s(l, tag);
    }
}

static const char *
proto_name(const struct lk_xrec *r)
{
    return r->proto == LK_SP_KAFKA ? "kafka" : r->proto == LK_SP_PULSAR ? "pulsar" : "http";
}

/* proto_name's, with no strlen. */
static inline __attribute__((always_inline)) void
put_proto(struct line *l, const struct lk_xrec *r)
{
    if (r->proto == LK_SP_KAFKA)
        PUT_LIT(l, "kafka");
    else if (r->proto == LK_SP_PULSAR)
        PUT_LIT(l, "pulsar");
    else
        PUT_LIT(l, "http");
}

/* A Pulsar command's name (with named), or its number (numbered). */
static inline __attribute__((always_inline)) void
put_command(struct line *l, const struct lk_xrec *r, const char *named, const char *numbered)
{
    const char *name = lk_pulsar_command_name(r->command);
    if (name != NULL)
        put(l, named, name);
    else
        put(l, numbered, r->command);
}

/* What the exchange was, for the text line: "Metadata v12", "LOOKUP". */
static inline __attribute__((always_inline)) void
put_what(struct line *l, const struct lk_xrec *r)
{
    if (r->summary) {
        PUT_LIT(l, "connection");
    } else if (r->proto == LK_SP_HTTP) {
        /* the method is a token (llhttp checked it): no NUL to stop at;
         * none (NULL) when the head was refused before it was read */
        if (r->method.len != 0)
            put_var(l, r->method.p, r->method.len > 20 ? 20 : r->method.len);
        PUT_LIT(l, " ");
        put_target(l, r->target.p, r->target.len);
    } else if (r->proto == LK_SP_KAFKA) {
        const char *name = lk_kafka_api_name(r->api_key);
        if (name != NULL) {
            put_s(l, name);
        } else {
            PUT_LIT(l, "api ");
            put_d(l, r->api_key);
        }
        PUT_LIT(l, " v");
        put_d(l, r->api_version);
    } else {
        put_command(l, r, "%s", "command %d");
    }
}

static inline __attribute__((always_inline)) void
put_filters(struct line *l, const struct lk_xrec *r, int json)
{
    int first = 1;

    for (int i = 0; i < LK_STAT_FILTERS && lk_stat_filters[i].name != NULL; i++) {
        if (r->flt_rewrites[i] == 0)
            continue;
        if (!first)
            PUT_LIT(l, ",");
        if (json) {
            PUT_LIT(l, "\"");
            put_s(l, lk_stat_filters[i].name);
            PUT_LIT(l, "\":");
        } else {
            put_s(l, lk_stat_filters[i].name);
            PUT_LIT(l, "=");
        }
        put_u(l, r->flt_rewrites[i]);
        first = 0;
    }
}

/* ", N what": a count of the text line. */
#define PUT_COUNT(l, n, what)                                                                      \
    do {                                                                                           \
        PUT_LIT(l, ", ");                                                                          \
        put_u(l, n);                                                                               \
        PUT_LIT(l, what);                                                                          \
    } while (0)

static inline __attribute__((always_inline)) void
format_text(struct line *l, const struct lk_xrec *r, const struct lk_access_who *who)
{
    put_s(l, who->client);
    PUT_LIT(l, " > ");
    put_s(l, who->frontend);
    PUT_LIT(l, " ");
    put_proto(l, r);
    PUT_LIT(l, " \"");
    put_what(l, r);
    PUT_LIT(l, "\" ");
    if (r->broker != NULL)
        put_s(l, r->broker);
    else
        PUT_LIT(l, "-");
    PUT_LIT(l, " ");
    /* HTTP's fields in the order lookout has always logged them; what
     * came later goes after them. */
    if (r->proto == LK_SP_HTTP) {
        put_d(l, r->status);
        PUT_LIT(l, " ");
        put_u(l, r->bytes_upstream);
        PUT_LIT(l, " bytes from broker, ");
    } else {
        PUT_LIT(l, "- ");
    }
    put_u(l, r->bytes_out);
    PUT_LIT(l, " bytes to client");
    if (r->summary) {
        PUT_COUNT(l, r->frames_out, " frames to client");
    } else {
        PUT_COUNT(l, r->rewrites, " rewrites");
        PUT_COUNT(l, r->leaks, " leaks");
    }
    if (r->proto == LK_SP_HTTP)
        PUT_COUNT(l, r->hops, " hops");
    if (r->overflowed)
        PUT_LIT(l, ", body over max_buffer_bytes passed through");
    if (r->refused)
        PUT_LIT(l, ", refused: connection closed");
    PUT_COUNT(l, r->bytes_in, " bytes from client");
    if (r->summary)
        PUT_COUNT(l, r->frames_in, " frames from client");
    PUT_LIT(l, ", ");
    put_d(l, r->dur_us / 1000);
    PUT_LIT(l, " ms");
    if (r->error != NULL) {
        PUT_LIT(l, ", upstream: ");
        put_s(l, r->error);
    }
    if (r->cut != NULL) {
        PUT_LIT(l, ", cut: ");
        put_s(l, r->cut);
    }
    if (r->upstream_us >= 0) {
        PUT_LIT(l, ", broker ");
        put_d(l, r->upstream_us / 1000);
        PUT_LIT(l, " ms");
    }
    if (r->unmapped != 0)
        PUT_COUNT(l, r->unmapped, " unmapped");
    if (r->rewrites != 0) {
        PUT_LIT(l, ", rewritten by ");
        put_filters(l, r, 0);
    }
    if (who->cert_subject != NULL)
        put(l, ", client certificate \"%s\"", who->cert_subject);
}

/* ",\"key\":N": a number of the JSON line. */
#define PUT_KEY_U(l, key, n)                                                                       \
    do {                                                                                           \
        PUT_LIT(l, key);                                                                           \
        put_u(l, n);                                                                               \
    } while (0)

static void
format_json(struct line *l, const struct lk_xrec *r, const struct lk_access_who *who)
{
    /* peer and bind text are addresses; names come from the config and
     * are escaped like anything else */
    PUT_LIT(l, ",\"client\":\"");
    put_s(l, who->client);
    PUT_LIT(l, "\",\"frontend\":\"");
    put_s(l, who->frontend);
    PUT_LIT(l, "\",\"protocol\":\"");
    put_s(l, proto_name(r));
    PUT_LIT(l, "\"");
    if (r->cluster != NULL) {
        PUT_LIT(l, ",\"cluster\":");
        put_json_str(l, r->cluster->name, strlen(r->cluster->name), 200);
    }
    if (r->broker != NULL) {
        PUT_LIT(l, ",\"broker\":");
        put_json_str(l, r->broker, strlen(r->broker), 200);
    }
    if (r->summary) {
        PUT_LIT(l, ",\"event\":\"connection\"");
        PUT_KEY_U(l, ",\"frames_in\":", r->frames_in);
        PUT_KEY_U(l, ",\"frames_out\":", r->frames_out);
    } else if (r->proto == LK_SP_HTTP) {
        PUT_LIT(l, ",\"method\":");
        put_json_str(l, r->method.p, r->method.len, 20);
        PUT_LIT(l, ",\"path\":");
        put_json_str(l, r->target.p, r->target.len, 1024);
        PUT_LIT(l, ",\"status\":");
        put_d(l, r->status);
    } else if (r->proto == LK_SP_KAFKA) {
        const char *name = lk_kafka_api_name(r->api_key);
        if (name != NULL)
            put(l, ",\"api\":\"%s\"", name);
        put(l, ",\"api_key\":%d,\"api_version\":%d", r->api_key, r->api_version);
    } else {
        put_command(l, r, ",\"command\":\"%s\"", ",\"command\":\"%d\"");
    }
    PUT_KEY_U(l, ",\"bytes_in\":", r->bytes_in);
    PUT_KEY_U(l, ",\"bytes_out\":", r->bytes_out);
    if (r->proto == LK_SP_HTTP) {
        PUT_KEY_U(l, ",\"bytes_from_broker\":", r->bytes_upstream);
        PUT_KEY_U(l, ",\"hops\":", r->hops);
    }
    if (!r->summary) {
        PUT_KEY_U(l, ",\"rewrites\":", r->rewrites);
        PUT_LIT(l, ",\"filters\":{");
        put_filters(l, r, 1);
        PUT_KEY_U(l, "},\"leaks\":", r->leaks);
        PUT_KEY_U(l, ",\"unmapped\":", r->unmapped);
    }
    if (r->overflowed)
        PUT_LIT(l, ",\"body_overflow\":true");
    if (r->refused)
        PUT_LIT(l, ",\"refused\":true");
    PUT_LIT(l, ",\"duration_ms\":");
    put_ms3(l, r->dur_us);
    if (r->upstream_us >= 0) {
        PUT_LIT(l, ",\"upstream_ms\":");
        put_ms3(l, r->upstream_us);
    }
    if (r->error != NULL) {
        PUT_LIT(l, ",\"error\":");
        put_json_str(l, r->error, strlen(r->error), 200);
    }
    if (r->cut != NULL) {
        PUT_LIT(l, ",\"cut\":\"");
        put_s(l, r->cut); /* one of lookout's own words */
        PUT_LIT(l, "\"");
    }
    if (who->cert_subject != NULL) {
        PUT_LIT(l, ",\"client_cert\":");
        put_json_str(l, who->cert_subject, strlen(who->cert_subject), 512);
    }
    PUT_LIT(l, "}");
}

/* The line's end: "\n" and a NUL; its length. */
static inline __attribute__((always_inline)) size_t
end_line(struct line *l)
{
    l->p[l->len++] = '\n';
    l->p[l->len] = '\0';
    return l->len;
}

static size_t __attribute__((noinline))
format_json_line(const struct lk_xrec *r, const struct lk_access_who *who, char *buf, size_t len)
{
    struct line l = {buf, 0, len - 1};

    put_time(&l, 1, "");
    format_json(&l, r, who);
    if (l.len == 0 || buf[l.len - 1] != '}') {
        /* cut short: a line that does not parse is worse than a short one */
        l.len = 0;
        put_time(&l, 1, "");
        put(&l, ",\"client\":\"%s\",\"truncated\":true}", who->client);
    }
    return end_line(&l);
}

size_t
lk_access_format(const struct lk_xrec *r, const struct lk_access_who *who, int json,
                 const char *tag, char *buf, size_t len)
{
    struct line l = {buf, 0, len - 1};

    if (json)
        return format_json_line(r, who, buf, len);
    put_time(&l, 0, tag);
    format_text(&l, r, who);
    return end_line(&l);
}

/* Kafka's data path: a line per batch produced or fetched unless
 * log.kafka = all. */
static int
kafka_data(int key)
{
    return key == LK_KAFKA_PRODUCE || key == LK_KAFKA_FETCH || key == LK_KAFKA_SHARE_FETCH ||
           key == LK_KAFKA_SHARE_ACKNOWLEDGE;
}

int
lk_access_enabled(void)
{
    int to = __atomic_load_n(&target, __ATOMIC_ACQUIRE);

    return !(to == TO_NOWHERE || (to == TO_STDERR && lk_log_level < LK_INFO));
}

void
lk_access_write(const struct lk_xrec *r, const struct lk_access_who *who)
{
    int to = __atomic_load_n(&target, __ATOMIC_ACQUIRE);
    const struct lk_conf *conf = who->conf;
    struct held *h = held;
    char line[LINE_ROOM], *at;

    if (to == TO_NOWHERE || (to == TO_STDERR && lk_log_level < LK_INFO))
        return;
    if (r->proto == LK_SP_KAFKA && !r->summary && !conf->log_kafka_all && kafka_data(r->api_key))
        return;
    /* On stderr, among the other log lines, in their shape: "time [info] ..." */
    int json = conf->log_format == LK_LOG_JSON;
    const char *tag = to == TO_STDERR ? "[info] " : "";
    if (h != NULL && (at = room(h, to)) != NULL) { /* formatted where it is held: no copy */
        held_add(h, to, lk_access_format(r, who, json, tag, at, LINE_ROOM));
        return;
    }
    size_t n = lk_access_format(r, who, json, tag, line, sizeof(line));
    if (h != NULL)
        hold(h, to, line, n);
    else
        write_out(to, line, n);
}
