/*
 * The access log: one line per exchange record (lk_stats.h), as text or
 * JSON (`log.format`), to stderr, to a file, or nowhere (`log.access`).
 * A worker thread holds its lines in a buffer of its own (`log.buffer`,
 * 64 KiB by default, as nginx's `access_log ... buffer=`) and writes them
 * with one write(2) at the end of the loop iteration that made them
 * (after that iteration's callbacks), or at once when the next line would
 * not fit.  A write holds whole lines only, so worker threads never
 * interleave; on a pipe or a socket it holds at most PIPE_BUF bytes, which
 * POSIX makes atomic there.  Lines are never older than one iteration, so
 * no flush interval is needed.  A file is reopened on SIGUSR1 (logrotate's
 * postrotate), in place: the new file takes the old descriptor's number
 * (dup2), so a worker writing at that moment writes to one or the other,
 * never to a closed descriptor.  With io_uring (lk_io.c), the write rides
 * the submission that sends the iteration's outputs, when the target is
 * a pipe, a socket or a device (/dev/null): no system call of its own.
 */
#ifndef LK_ACCESS_H
#define LK_ACCESS_H

#include <stddef.h>

struct event_base;
struct lk_conf;
struct lk_xrec;

/* Follows conf's log.access: opens the file (relative paths against the
 * config's directory), or stderr, or nothing.  0, or -1 with a message
 * (the file cannot be opened); the previous target stays then. */
int lk_access_configure(const struct lk_conf *conf, char *err, size_t errlen);
/* Reopens the file by its name (SIGUSR1).  0, or -1 with a message. */
int lk_access_reopen(char *err, size_t errlen);
/* Closes the file (at exit, once every worker's lines are written). */
void lk_access_close(void);
/* The calling thread, a worker running base's loop, holds its lines from
 * now on (lk_access.h's opening says how long).  Until then, and on any
 * other thread, each line is written at once. */
void lk_access_thread_start(struct event_base *base);
/* Writes what the calling thread holds now: before its loop ends, before
 * the target changes (lk_access_configure and lk_access_reopen call it
 * for their own thread), and at the end of lk_io's flush. */
void lk_access_flush(void);
/* Set (by lk_io, on a worker thread) while its flush of outputs is due
 * later in this loop iteration: it clears this and calls lk_access_flush
 * when it runs, so that a line held meanwhile needs no event of its own.
 * A flush that does not come (a loop broken off) leaves the lines to
 * lk_access_thread_end, as the event would. */
extern __thread unsigned char lk_access_ride;
/* The lines the calling thread holds, for lk_io's io_uring submission to
 * write (lk_uring_write, RWF_NOWAIT) with the iteration's sends: their
 * start and descriptor, and their length; 0 when there are none, or their
 * target takes no such write (a regular file), or they are more than one
 * write may carry there.  They stay held until lk_access_ring_wrote. */
size_t lk_access_ring_lines(const void **p, int *fd);
/* What the ring's write of those lines returned (a negative errno for an
 * error): they are no longer held.  What it did not write is written now
 * as write(2) takes it; after an error other than EAGAIN (the kernel
 * takes no such write there), the target's lines go by write(2) from then
 * on, until it is set again (lk_access_configure, lk_access_reopen). */
void lk_access_ring_wrote(int res);
/* Writes what the calling thread holds and stops holding lines: when its
 * loop has ended (a drain or a stop may break it off before the
 * iteration's write). */
void lk_access_thread_end(void);
/* Whom an exchange record's line names, and by which config's log keys:
 * the record's connection, as lk_xrec_done (lk_xrec.h) reads it. */
struct lk_access_who {
    const char *client;         /* "ip:port" */
    const char *frontend;       /* the bound address */
    const struct lk_conf *conf; /* log.format, log.kafka */
    const char *cert_subject;   /* the client's verified certificate's; NULL: none */
};
/* Whether lines are written anywhere now (log.access, and on stderr the
 * log level). */
int lk_access_enabled(void);
/* Writes r's line, as who->conf's log.format says (held, on a worker
 * thread: lk_access_thread_start). */
void lk_access_write(const struct lk_xrec *r, const struct lk_access_who *who);
/* Formats r's line into buf (NUL-terminated, ending in '\n'); its length.
 * json: log.format = json; tag (text only) goes after the time. */
size_t lk_access_format(const struct lk_xrec *r, const struct lk_access_who *who, int json,
                        const char *tag, char *buf, size_t len);

#endif
