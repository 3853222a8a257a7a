/*
 * Logging to stderr, one line per call, written with a single write(2) so
 * that worker threads never interleave.  lk_log() appends the connection's
 * context (", client: ip:port, sni: name, while <action>") when given one,
 * in the spirit of nginx's log->action, through the describe callback the
 * connection layer sets (as nginx's log->handler): the log knows nothing of
 * connections.
 */
#ifndef LK_LOG_H
#define LK_LOG_H

#include <stddef.h>

enum lk_log_level { LK_ERR = 0, LK_WARN, LK_INFO, LK_DEBUG };

struct lk_conn;

/* Writes a connection's context for a log line into buf (NUL-terminated). */
typedef void (*lk_log_describe_fn)(const struct lk_conn *c, char *buf, size_t len);
/* Set once, before any connection exists (lk_workers_start sets
 * lk_conn_describe); until then lines name no context. */
void lk_log_set_describe(lk_log_describe_fn fn);

/* Runs on the calling thread before each line goes to stderr: the access
 * log (above this file) writes the lines it holds for stderr first, so
 * that stderr keeps the order of events.  NULL: none. */
typedef void (*lk_log_flush_fn)(void);
void lk_log_set_flush(lk_log_flush_fn fn);

/* Set once at start-up (and on reload); read by every thread. */
extern int lk_log_level;

void lk_log(int level, const struct lk_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends every queued OpenSSL error to a log line and clears the queue. */
void lk_log_ssl(int level, const struct lk_conn *c, const char *what);
/* Copies at most max bytes of untrusted data into dst (size >= max + 4),
 * non-printable bytes turned into '.', "..." when cut.  Returns dst. */
char *lk_log_sanitize(char *dst, const void *src, size_t len, size_t max);
int lk_log_level_parse(const char *s);

/*
 * A log line at most once per interval, from any thread: a flood of the
 * same event (refused connections, refused admin callers) makes one line
 * a second, not one per event.  lk_log_every() counts the event and
 * returns 0 while the interval since the last line has not passed; else
 * it returns how many events the line speaks for (this one included) and
 * starts the next interval.
 */
struct lk_log_every {
    _Atomic long long last_ms; /* 0: no line yet */
    _Atomic unsigned long quiet;
};
unsigned long lk_log_every(struct lk_log_every *e, long long interval_ms);

#endif
