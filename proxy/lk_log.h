/*
 * Logging to stderr, one line per call, written with a single write(2) so
 * that worker threads never interleave.  lk_log() appends the connection's
 * context (", client: ip:port, sni: name, while <action>") when given one,
 * in the spirit of nginx's log->action.
 */
#ifndef LK_LOG_H
#define LK_LOG_H

#include <stddef.h>

enum lk_log_level { LK_ERR = 0, LK_WARN, LK_INFO, LK_DEBUG };

struct lk_conn;

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

#endif
