/*
 * Tests for the access log's held lines (proxy/lk_access.c): a worker's
 * lines wait for the end of its loop iteration and then go out in one
 * write; a line that would not fit writes what is held first; log.buffer
 * = 0 writes each at once; the lines held are written when the thread
 * ends, before a reopen and before the target changes, and before a log
 * line on stderr; on a socket (or a pipe) each write is whole lines of at
 * most PIPE_BUF bytes; threads writing at once never tear a line.  The
 * lines held are handed to lk_io's io_uring submission (ring_lines) when
 * the target is a socket, a pipe or a device, never a regular file, and
 * at most PIPE_BUF bytes of them on a socket; what the ring wrote is no
 * longer held, what it did not is written at once, and after a refusal
 * other than EAGAIN the target's lines stop riding until it is set again.  The lines' text is test_lk_stats.c's.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <event2/event.h>

#include "lk_access.h"
#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_log.h"
#include "lk_stats.h"
#include "lk_test.h"

static char log_path[64];

/* A config whose access log is log_path (or stderr when to_stderr), with
 * log.buffer = buffer (NULL: the default). */
static struct lk_conf *
conf_new(const char *buffer, int to_stderr)
{
    char text[1024], err[512];

    if (log_path[0] == '\0') {
        snprintf(log_path, sizeof(log_path), "/tmp/lk-test-access-XXXXXX");
        int f = mkstemp(log_path);
        if (f >= 0)
            close(f);
    }
    snprintf(text, sizeof(text),
             "[lookout]\n"
             "log.access = %s\n"
             "%s%s%s"
             "[pulsar prod]\n"
             "internalListenerName = internal\n"
             "lookupListenerName = external\n"
             "webServiceUrl = http://127.0.0.1:18080\n"
             "[broker prod/b1]\n"
             "advertisedListeners = internal:http://10.0.0.1:8080,"
             "external:http://127.0.0.1:18081\n",
             to_stderr ? "stderr" : log_path, buffer != NULL ? "log.buffer = " : "",
             buffer != NULL ? buffer : "", buffer != NULL ? "\n" : "");
    struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    ok(conf != NULL, "config loads: %s", conf == NULL ? err : "");
    return conf;
}

/* Writes the line of request number n (its path: /t/TAG/n, padded to
 * about pad bytes). */
static void
write_line(const struct lk_conf *conf, const char *tag, int n, size_t pad)
{
    char target[512];
    struct lk_xrec r;
    const struct lk_access_who who = {"127.0.0.1:40312", "127.0.0.1:18081", conf, NULL};

    snprintf(target, sizeof(target), "/t/%s/%d/%.*s", tag, n, (int)(pad < 400 ? pad : 400),
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
             "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    memset(&r, 0, sizeof(r));
    r.proto = LK_SP_HTTP;
    r.method = LK_STRLIT("GET");
    r.target = lk_str_c(target);
    r.status = 200;
    r.upstream_us = -1;
    lk_access_write(&r, &who);
}

static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t cap = 0;

    *len = 0;
    if (f == NULL)
        return calloc(1, 1);
    for (;;) {
        if (cap - *len < 4096)
            buf = realloc(buf, cap = cap * 2 + 8192);
        size_t k = fread(buf + *len, 1, cap - *len - 1, f);
        if (k == 0)
            break;
        *len += k;
    }
    fclose(f);
    buf[*len] = '\0';
    return buf;
}

static size_t
file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* Whether text is exactly lines /t/TAG/0 .. /t/TAG/(n-1), whole, in order. */
static int
lines_in_order(const char *text, const char *tag, int n)
{
    char want[64];
    const char *p = text;

    for (int i = 0; i < n; i++) {
        snprintf(want, sizeof(want), "\"GET /t/%s/%d/", tag, i);
        const char *nl = strchr(p, '\n');
        const char *at = strstr(p, want);
        if (nl == NULL || at == NULL || at > nl || strstr(p, " 127.0.0.1:40312 > ") > nl)
            return 0;
        p = nl + 1;
    }
    return *p == '\0';
}

/* Whether the file at path is exactly the lines /t/TAG/0 .. n-1
 * (lines_in_order); shows the file when not. */
static int
file_has(const char *path, const char *tag, int n)
{
    size_t len;
    char *t = slurp(path, &len);
    int r = lines_in_order(t, tag, n);

    if (!r)
        lk_test_diag("%s: %s", path, t);
    free(t);
    return r;
}

/* Points the access log where conf says and, given a base, has this
 * thread hold its lines for base's loop.  0 if conf did not load. */
static int
start(const struct lk_conf *conf, struct event_base *base)
{
    char err[256];

    if (conf == NULL || !ok(lk_access_configure(conf, err, sizeof(err)) == 0, "configured: %s",
                            conf == NULL ? "" : err))
        return 0;
    if (base != NULL)
        lk_access_thread_start(base);
    return 1;
}

static void
end_case(struct lk_conf *conf, struct event_base *base)
{
    lk_access_thread_end();
    lk_access_close();
    lk_conf_unref(conf);
    if (base != NULL)
        event_base_free(base);
    unlink(log_path);
}

static void
test_held_until_iteration_end(void)
{
    struct lk_conf *conf = conf_new(NULL, 0);
    struct event_base *base = event_base_new();

    if (!start(conf, base))
        goto end;
    for (int i = 0; i < 3; i++)
        write_line(conf, "a", i, 10);
    ok(file_size(log_path) == 0, "three lines held: the file is empty");
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(file_has(log_path, "a", 3), "the iteration's end writes the three, whole, in order");
    write_line(conf, "a", 3, 10);
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(file_has(log_path, "a", 4), "a line in a later iteration: written at its end too");
end:
    end_case(conf, base);
}

static void
test_full_buffer(void)
{
    struct lk_conf *conf = conf_new(NULL, 0);
    struct event_base *base = event_base_new();
    size_t before = 0;
    int n = 0;

    if (!start(conf, base))
        goto end;
    ok(conf->log_buffer == 64 * 1024, "log.buffer: 64k by default");
    /* about 230 bytes a line: the 64 KiB fill after some 285 */
    while (n < 1000 && (before = file_size(log_path)) == 0)
        write_line(conf, "c", n++, 120);
    ok(before > 60 * 1024 && before <= 64 * 1024,
       "the line that does not fit writes the %zu bytes held first, at once", before);
    ok(file_has(log_path, "c", n - 1), "... whole lines only, all but the last");
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(file_has(log_path, "c", n), "the last comes at the iteration's end");
end:
    end_case(conf, base);
}

static void
test_unbuffered(void)
{
    struct lk_conf *conf = conf_new("0", 0);
    struct event_base *base = event_base_new();

    if (!start(conf, base))
        goto end;
    write_line(conf, "d", 0, 10);
    ok(file_has(log_path, "d", 1), "log.buffer = 0: the line is written at once");
    write_line(conf, "d", 1, 10);
    ok(file_has(log_path, "d", 2), "... and the next");
end:
    end_case(conf, base);
}

static void
test_thread_end(void)
{
    struct lk_conf *conf = conf_new(NULL, 0);
    struct event_base *base = event_base_new();

    if (!start(conf, base))
        goto end;
    write_line(conf, "e", 0, 10);
    write_line(conf, "e", 1, 10);
    /* the loop broken off (a drain) before the iteration's write */
    lk_access_thread_end();
    ok(file_has(log_path, "e", 2), "the thread's end writes what it held");
    write_line(conf, "e", 2, 10);
    ok(file_has(log_path, "e", 3), "after it, lines are written at once");
end:
    end_case(conf, base);
}

static void
test_reopen_and_reconfigure(void)
{
    struct lk_conf *conf = conf_new(NULL, 0), *conf2 = NULL;
    struct event_base *base = event_base_new();
    char err[256], rotated[80];

    if (!start(conf, base))
        goto end;
    write_line(conf, "f", 0, 10);
    snprintf(rotated, sizeof(rotated), "%s.1", log_path);
    rename(log_path, rotated);
    ok(lk_access_reopen(err, sizeof(err)) == 0, "reopened: %s", err);
    ok(file_has(rotated, "f", 1), "the line held before the reopen went to the rotated file");
    ok(file_size(log_path) == 0, "... not to the new one");
    unlink(rotated);

    /* A reload to stderr: what was held for the file goes to the file. */
    write_line(conf, "g", 0, 10);
    conf2 = conf_new(NULL, 1);
    if (!start(conf2, NULL))
        goto end;
    ok(file_has(log_path, "g", 1), "a reload writes the lines held for the old target first");
end:
    lk_conf_unref(conf2);
    end_case(conf, base);
}

/* stderr replaced by one end of a SOCK_SEQPACKET pair, whose reads give
 * back the writes one by one; sv[0] is what to read.  0 or -1. */
static int
stderr_to_packets(int sv[2], int *saved)
{
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0)
        return -1;
    *saved = dup(STDERR_FILENO);
    dup2(sv[1], STDERR_FILENO);
    return 0;
}

static void
stderr_back(int sv[2], int saved)
{
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(sv[0]);
    close(sv[1]);
}

static void
test_socket_writes(void)
{
    struct lk_conf *conf = NULL;
    struct event_base *base = event_base_new();
    char pkt[70000];
    int sv[2], saved = -1, writes = 0, lines = 0, bad = 0;
    ssize_t k;

    if (!ok(stderr_to_packets(sv, &saved) == 0, "stderr is a socket"))
        goto end;
    lk_log_level = LK_INFO;
    conf = conf_new(NULL, 1);
    if (!start(conf, base))
        goto back;
    for (int i = 0; i < 60; i++) /* about 16 KiB */
        write_line(conf, "h", i, 150);
    event_base_loop(base, EVLOOP_NONBLOCK);
    while ((k = recv(sv[0], pkt, sizeof(pkt), MSG_DONTWAIT)) > 0) {
        writes++;
        if (k > PIPE_BUF || pkt[k - 1] != '\n' || strncmp(pkt + 25, "[info] ", 7) != 0)
            bad++;
        for (ssize_t i = 0; i < k; i++)
            lines += pkt[i] == '\n';
    }
    ok(writes >= 4 && writes <= 6 && bad == 0 && lines == 60,
       "on a socket: whole lines in writes of at most PIPE_BUF bytes (%d writes, %d bad, %d "
       "lines)",
       writes, bad, lines);

    /* A log line on stderr: the access line held before it goes first. */
    write_line(conf, "i", 0, 10);
    lk_log(LK_WARN, NULL, "after the access line");
    k = recv(sv[0], pkt, sizeof(pkt) - 1, MSG_DONTWAIT);
    pkt[k > 0 ? k : 0] = '\0';
    ok(strstr(pkt, "/t/i/0/") != NULL && strstr(pkt, "after the") == NULL,
       "a log line writes the access line held first, on its own");
    k = recv(sv[0], pkt, sizeof(pkt) - 1, MSG_DONTWAIT);
    pkt[k > 0 ? k : 0] = '\0';
    ok(strstr(pkt, "[warn] after the access line") != NULL, "... then itself");
    lk_access_thread_end();
back:
    stderr_back(sv, saved);
end:
    end_case(conf, base);
}

/* The packets waiting on sv[0]: their count, and the lines in them. */
static int
drain_packets(int sv0, int *lines)
{
    char pkt[70000];
    ssize_t k;
    int n = 0;

    *lines = 0;
    while ((k = recv(sv0, pkt, sizeof(pkt), MSG_DONTWAIT)) > 0) {
        n++;
        for (ssize_t i = 0; i < k; i++)
            *lines += pkt[i] == '\n';
    }
    return n;
}

static void
test_ring_lines(void)
{
    struct lk_conf *conf = conf_new(NULL, 0), *conf2 = NULL;
    struct event_base *base = event_base_new();
    const void *p = NULL;
    int sv[2], saved = -1, f = -1, lines = 0;
    size_t n;

    if (!start(conf, base))
        goto end;
    write_line(conf, "r", 0, 10);
    ok(lk_access_ring_lines(&p, &f) == 0, "a regular file: its lines do not ride the ring");
    event_base_loop(base, EVLOOP_NONBLOCK);
    ok(file_has(log_path, "r", 1), "... they are written at the iteration's end");
    if (!ok(stderr_to_packets(sv, &saved) == 0, "stderr is a socket"))
        goto end;
    lk_log_level = LK_INFO;
    conf2 = conf_new(NULL, 1);
    if (!start(conf2, NULL))
        goto back;

    /* The ring writes them all. */
    write_line(conf2, "s", 0, 10);
    write_line(conf2, "s", 1, 10);
    n = lk_access_ring_lines(&p, &f);
    ok(n > 0 && f == STDERR_FILENO && memcmp((const char *)p + n - 1, "\n", 1) == 0 &&
           strstr(p, "/t/s/1/") != NULL,
       "on a socket: the two lines held, for stderr (%zu bytes, fd %d)", n, f);
    ssize_t w = n > 0 ? write(f, p, n) : -1;
    lk_access_ring_wrote((int)w);
    event_base_loop(base, EVLOOP_NONBLOCK);
    int np = drain_packets(sv[0], &lines);
    ok(np == 1 && lines == 2,
       "what the ring wrote is not written again at the iteration's end (%d writes, %d lines)",
       np, lines);

    /* The ring could not write, that moment (a full socket): written at
     * once, and the next lines still ride. */
    write_line(conf2, "t", 0, 10);
    n = lk_access_ring_lines(&p, &f);
    lk_access_ring_wrote(-EAGAIN);
    np = drain_packets(sv[0], &lines);
    ok(n > 0 && np == 1 && lines == 1, "-EAGAIN: the line is written at once, whole (%d lines)",
       lines);
    write_line(conf2, "t", 1, 10);
    n = lk_access_ring_lines(&p, &f);
    ok(n > 0, "... and the next line rides (%zu bytes)", n);
    lk_access_ring_wrote(-EAGAIN);
    np = drain_packets(sv[0], &lines);

    /* The kernel takes no such write there (a named pipe): written at
     * once, and no more rides. */
    write_line(conf2, "t", 2, 10);
    n = lk_access_ring_lines(&p, &f);
    lk_access_ring_wrote(-EOPNOTSUPP);
    np = drain_packets(sv[0], &lines);
    ok(n > 0 && np == 1 && lines == 1,
       "-EOPNOTSUPP: the line is written at once, whole (%d lines)", lines);
    write_line(conf2, "t", 3, 10);
    ok(lk_access_ring_lines(&p, &f) == 0, "... and the next lines do not ride");
    event_base_loop(base, EVLOOP_NONBLOCK);
    np = drain_packets(sv[0], &lines);
    ok(np == 1 && lines == 1, "... they are written at the iteration's end (%d lines)", lines);

    /* Set again (a reload): they ride again; a ride cut short finishes the line. */
    if (!start(conf2, NULL))
        goto back;
    write_line(conf2, "u", 0, 10);
    n = lk_access_ring_lines(&p, &f);
    w = n > 10 ? write(f, p, 10) : -1;
    lk_access_ring_wrote((int)w);
    char pkt[4096];
    ssize_t k1 = recv(sv[0], pkt, sizeof(pkt), MSG_DONTWAIT);
    ssize_t k2 = k1 > 0 ? recv(sv[0], pkt + k1, sizeof(pkt) - (size_t)k1, MSG_DONTWAIT) : -1;
    ok(n > 10 && k1 == 10 && k2 == (ssize_t)n - 10 && pkt[n - 1] == '\n' &&
           memmem(pkt, n, "/t/u/0/", 7) != NULL,
       "set again, they ride; 10 bytes of %zu written: the rest at once (%zd and %zd)", n, k1,
       k2);

    /* Past PIPE_BUF held on a socket: none ride (write_out cuts them). */
    if (!start(conf2, NULL))
        goto back;
    for (int i = 0; i < 30; i++) /* about 6 KiB */
        write_line(conf2, "v", i, 150);
    ok(lk_access_ring_lines(&p, &f) == 0, "over PIPE_BUF held on a socket: none ride");
    event_base_loop(base, EVLOOP_NONBLOCK);
    np = drain_packets(sv[0], &lines);
    ok(np >= 2 && lines == 30, "... the iteration's end writes them (%d writes, %d lines)", np,
       lines);
    lk_access_thread_end();
back:
    stderr_back(sv, saved);
end:
    lk_conf_unref(conf2);
    end_case(conf, base);
}

/* Threads writing at once, each with its own loop. */
struct writer {
    const struct lk_conf *conf;
    char tag[8];
};

static void *
writer_main(void *arg)
{
    struct writer *wr = arg;
    struct event_base *base = event_base_new();

    lk_access_thread_start(base);
    for (int i = 0; i < 3000; i++) {
        write_line(wr->conf, wr->tag, i, (size_t)(i * 37) % 300);
        if (i % 7 == 6)
            event_base_loop(base, EVLOOP_NONBLOCK);
    }
    lk_access_thread_end();
    event_base_free(base);
    return NULL;
}

static void
test_threads(void)
{
    struct lk_conf *conf = conf_new(NULL, 0);
    struct writer wr[4];
    pthread_t th[4];
    char *t = NULL;
    size_t len;

    if (!start(conf, NULL))
        goto end;
    for (int i = 0; i < 4; i++) {
        wr[i].conf = conf;
        snprintf(wr[i].tag, sizeof(wr[i].tag), "w%d", i);
        pthread_create(&th[i], NULL, writer_main, &wr[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    t = slurp(log_path, &len);
    /* Each thread's lines in its order, each whole: a line starts with a
     * time and ends with its own duration. */
    int next[4] = {0}, torn = 0, lines = 0;
    for (char *p = t, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
        *nl = '\0';
        lines++;
        int w = -1, n = -1;
        const char *at = strstr(p, "\"GET /t/w");
        if (at == NULL || sscanf(at, "\"GET /t/w%d/%d/", &w, &n) != 2 || w < 0 || w > 3 ||
            n != next[w] || strncmp(p, "20", 2) != 0 || strstr(at + 1, "\"GET") != NULL ||
            strcmp(nl - 5, " 0 ms") != 0) {
            torn++;
            continue;
        }
        next[w]++;
    }
    ok(torn == 0 && lines == 12000 && next[0] == 3000 && next[3] == 3000,
       "four threads at once: 12000 whole lines, each thread's in order (%d lines, %d not)", lines,
       torn);
end:
    free(t);
    end_case(conf, NULL);
}

static void
test_conf_key(void)
{
    char text[256], err[512];

    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof(text), "[lookout]\nlog.buffer = %s\n", i == 0 ? "2m" : "64q");
        struct lk_conf *conf = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
        ok(conf == NULL && strstr(err, "t.conf:2") != NULL, "log.buffer = %s is refused: %s",
           i == 0 ? "2m" : "64q", err);
        lk_conf_unref(conf);
    }
    struct lk_conf *conf = conf_new("1m", 0);
    ok(conf != NULL && conf->log_buffer == 1024 * 1024, "1m is the largest");
    lk_conf_unref(conf);
    unlink(log_path);
}

/* An HTTP record of method, target and status, nothing else in it. */
static void
http_rec(struct lk_xrec *r, struct lk_str method, struct lk_str target, int status)
{
    memset(r, 0, sizeof(*r));
    r->proto = LK_SP_HTTP;
    r->method = method;
    r->target = target;
    r->status = status;
}

/* The formatter's own number writing, at the edges printf was trusted
 * with before: the largest count, zero, negative values, milliseconds
 * with three decimals. */
static void
test_numbers(void)
{
    struct lk_conf *conf = conf_new(NULL, 0);
    struct lk_xrec r;
    char line[4096];

    if (conf == NULL)
        goto end;
    const struct lk_access_who who = {"127.0.0.1:1", "127.0.0.1:2", conf, NULL};
    http_rec(&r, LK_STRLIT("POST"), LK_STRLIT("/n"), -7);
    r.bytes_out = UINT64_MAX;
    r.bytes_in = 10;
    r.hops = 4294967295u;
    r.dur_us = 1234567;
    r.upstream_us = 5;
    lk_access_format(&r, &who, 0, "", line, sizeof(line));
    ok_str(strchr(line, ' '),
           " 127.0.0.1:1 > 127.0.0.1:2 http \"POST /n\" - -7 0 bytes from broker, "
           "18446744073709551615 bytes to client, 0 rewrites, 0 leaks, 4294967295 hops, 10 bytes "
           "from client, 1234 ms, broker 0 ms\n",
           "text: the edges of each number");
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    ok(strstr(line, ",\"status\":-7,") != NULL &&
           strstr(line, ",\"bytes_out\":18446744073709551615,") != NULL &&
           strstr(line, ",\"duration_ms\":1234.567,\"upstream_ms\":0.005}") != NULL,
       "JSON: the same, and milliseconds with three decimals: %s", line);
    r.dur_us = -1500; /* a clock stepped back: as printf wrote it */
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    ok(strstr(line, ",\"duration_ms\":-1.-500,") != NULL, "a negative duration: %s", line);
    /* The time: {"time":"YYYY-MM-DDTHH:MM:SS.mmmZ" */
    ok(strncmp(line, "{\"time\":\"", 9) == 0 && line[9 + 4] == '-' && line[9 + 10] == 'T' &&
           line[9 + 19] == '.' && line[9 + 23] == 'Z' && line[9 + 24] == '"',
       "JSON's time field");
    lk_access_format(&r, &who, 0, "[info] ", line, sizeof(line));
    ok(line[4] == '-' && line[10] == 'T' && line[19] == '.' && line[23] == 'Z' &&
           strncmp(line + 24, " [info] 127.0.0.1:1 ", 20) == 0,
       "text's time, then the tag: %s", line);
    /* cut short: whole JSON still */
    lk_access_format(&r, &who, 1, "", line, 120);
    ok(strlen(line) < 120 && strstr(line, "\"truncated\":true}\n") != NULL,
       "a JSON line cut short is replaced by one that parses: %s", line);
end:
    lk_conf_unref(conf);
    unlink(log_path);
}

/* An exchange cut before its end: the cut field after upstream's, in both
 * formats; none on an exchange that ended. */
static void
test_cut(void)
{
    struct lk_conf *conf = conf_new(NULL, 0);
    struct lk_xrec r;
    char line[4096];

    if (conf == NULL)
        goto end;
    const struct lk_access_who who = {"127.0.0.1:1", "127.0.0.1:2", conf, NULL};
    http_rec(&r, LK_STRLIT("GET"), LK_STRLIT("/c"), 499);
    r.dur_us = 2000;
    r.upstream_us = -1;
    r.error = "timed out";
    r.cut = "drain_timeout";
    lk_access_format(&r, &who, 0, "", line, sizeof(line));
    ok_str(strchr(line, ' '),
           " 127.0.0.1:1 > 127.0.0.1:2 http \"GET /c\" - 499 0 bytes from broker, 0 bytes to "
           "client, 0 rewrites, 0 leaks, 0 hops, 0 bytes from client, 2 ms, upstream: timed out, "
           "cut: drain_timeout\n",
           "text: cut: WHY after upstream");
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    ok(strstr(line, ",\"error\":\"timed out\",\"cut\":\"drain_timeout\"}") != NULL,
       "JSON: \"cut\" after \"error\": %s", line);
    r.cut = NULL;
    r.error = NULL;
    lk_access_format(&r, &who, 1, "", line, sizeof(line));
    ok(strstr(line, "cut") == NULL, "none when it ended: %s", line);
    /* A head refused before it was read (431) has no method nor target. */
    http_rec(&r, lk_str_make(NULL, 0), lk_str_make(NULL, 0), 431);
    lk_access_format(&r, &who, 0, "", line, sizeof(line));
    ok(strstr(line, " http \" \" - 431 ") != NULL, "text: no method, no target: %s", line);
end:
    lk_conf_unref(conf);
    unlink(log_path);
}

const struct lk_test_case lk_test_access[] = {
    {"access/numbers", test_numbers},
    {"access/cut", test_cut},
    {"access/held_until_iteration_end", test_held_until_iteration_end},
    {"access/full_buffer", test_full_buffer},
    {"access/unbuffered", test_unbuffered},
    {"access/thread_end", test_thread_end},
    {"access/reopen_and_reconfigure", test_reopen_and_reconfigure},
    {"access/socket_writes", test_socket_writes},
    {"access/ring_lines", test_ring_lines},
    {"access/threads", test_threads},
    {"access/conf_key", test_conf_key},
    {NULL, NULL},
};
