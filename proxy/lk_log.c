/*
 * Logging: timestamped lines on stderr, one write(2) each.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>

#include "lk_clock.h"
#include "lk_log.h"

int lk_log_level = LK_INFO;
static lk_log_describe_fn describe;
static lk_log_flush_fn before_write; /* atomic: set on the main thread, read on any */

void
lk_log_set_describe(lk_log_describe_fn fn)
{
    describe = fn;
}

void
lk_log_set_flush(lk_log_flush_fn fn)
{
    __atomic_store_n(&before_write, fn, __ATOMIC_RELAXED);
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void
emit(int level, const struct lk_conn *c, const char *msg)
{
    char line[2048], ctx[512] = "";
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (c != NULL && describe != NULL)
        describe(c, ctx, sizeof(ctx));
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] %s%s\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], msg, ctx);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line)) {
        n = sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    lk_log_flush_fn flush = __atomic_load_n(&before_write, __ATOMIC_RELAXED);
    if (flush != NULL)
        flush();
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void
lk_log(int level, const struct lk_conn *c, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;

    if (level > lk_log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    emit(level, c, msg);
}

void
lk_log_ssl(int level, const struct lk_conn *c, const char *what)
{
    char msg[1536];
    size_t off;
    unsigned long e;

    off = (size_t)snprintf(msg, sizeof(msg), "%s", what);
    /* Drain the whole queue even when not logging, so that stale errors
     * never show up on the next connection of this thread. */
    while ((e = ERR_get_error()) != 0) {
        if (off < sizeof(msg) - 8) {
            msg[off++] = ':';
            msg[off++] = ' ';
            ERR_error_string_n(e, msg + off, sizeof(msg) - off);
            off += strlen(msg + off);
        }
    }
    if (level <= lk_log_level)
        emit(level, c, msg);
}

char *
lk_log_sanitize(char *dst, const void *src, size_t len, size_t max)
{
    const unsigned char *s = src;
    size_t n = len < max ? len : max, i;

    for (i = 0; i < n; i++)
        dst[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '.';
    if (len > max) {
        memcpy(dst + i, "...", 3);
        i += 3;
    }
    dst[i] = '\0';
    return dst;
}

int
lk_log_level_parse(const char *s)
{
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

unsigned long
lk_log_every(struct lk_log_every *e, long long interval_ms)
{
    long long now = lk_now_ms(), last = atomic_load(&e->last_ms);

    atomic_fetch_add(&e->quiet, 1);
    if ((last != 0 && now - last < interval_ms) ||
        !atomic_compare_exchange_strong(&e->last_ms, &last, now))
        return 0;
    return atomic_exchange(&e->quiet, 0);
}
