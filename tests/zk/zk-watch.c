/*
 * zk-watch: proxy/lk_zk.c on a libevent loop, as lookout will run it, with
 * every snapshot it delivers printed as one JSON line on stdout:
 *
 *   {"snapshot":N,"t_ms":WALL,"nodes":{"name":"data",...}}
 *
 * (data that is not UTF-8 as {"hex":"..."}).  Commands on stdin, one a line,
 * each answered by one line: "state" (lk_meta_state), "clientid" (the
 * session's id and password, for a test that expires it from another
 * client); "quit" or the end of stdin stops the source and exits 0, so that
 * ASan's leak check sees a full shutdown.  The first line, printed at once,
 * is {"started":true,"pid":N}.  lk_zk's log goes to stderr.
 *
 *   zk-watch [--timeout MS] [--lifetime S] [--debug] SERVERS PATH
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "lk_log.h"
#include "lk_zk.h"

static struct lk_zk *zk;
static struct event_base *base;
static unsigned long long nsnap;
static char inbuf[4096];
static size_t inlen;

static void
put(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);

    printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(j);
}

static void
on_snapshot(const struct lk_meta_node *nodes, size_t n, void *arg)
{
    json_t *o = json_object();

    for (size_t i = 0; i < n; i++) {
        json_t *v = json_stringn((const char *)nodes[i].data, nodes[i].len);
        if (v == NULL) {
            char *hex = malloc(nodes[i].len * 2 + 1);
            for (size_t k = 0; k < nodes[i].len; k++)
                sprintf(hex + 2 * k, "%02x", nodes[i].data[k]);
            hex[nodes[i].len * 2] = '\0';
            v = json_pack("{s:s}", "hex", hex);
            free(hex);
        }
        json_object_set_new(o, nodes[i].name, v);
    }
    /* lk_zk stamps the state just before it calls: the delivery time */
    struct lk_meta_state st;
    lk_zk_state(zk, &st);
    put(json_pack("{s:I,s:I,s:o}", "snapshot", (json_int_t)++nsnap, "t_ms",
                  (json_int_t)st.last_change_ms, "nodes", o));
}

static void
command(const char *line)
{
    if (strcmp(line, "state") == 0) {
        struct lk_meta_state st;
        lk_zk_state(zk, &st);
        put(json_pack("{s:{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}}", "state", "connected",
                      st.connected, "stale_since_ms", (json_int_t)st.stale_since_ms,
                      "last_change_ms", (json_int_t)st.last_change_ms, "nodes",
                      (json_int_t)st.nodes, "snapshots", (json_int_t)st.snapshots, "sessions",
                      (json_int_t)st.sessions, "expiries", (json_int_t)st.expiries, "errors",
                      (json_int_t)st.errors, "session_id", (json_int_t)st.session_id, "attempts",
                      (json_int_t)st.attempts, "probes", (json_int_t)st.probes));
    } else if (strcmp(line, "clientid") == 0) {
        int64_t id;
        char pw[16], hex[33];
        if (lk_zk_client_id(zk, &id, pw) != 0) {
            put(json_pack("{s:n}", "clientid"));
            return;
        }
        for (int i = 0; i < 16; i++)
            sprintf(hex + 2 * i, "%02x", (unsigned char)pw[i]);
        put(json_pack("{s:{s:I,s:s}}", "clientid", "id", (json_int_t)id, "passwd", hex));
    } else if (strcmp(line, "quit") == 0) {
        event_base_loopbreak(base);
    } else {
        put(json_pack("{s:s}", "error", line));
    }
}

static void
on_stdin(evutil_socket_t fd, short what, void *arg)
{
    ssize_t n = read(fd, inbuf + inlen, sizeof(inbuf) - 1 - inlen);
    char *nl;

    if (n <= 0) {
        event_base_loopbreak(base);
        return;
    }
    inlen += (size_t)n;
    inbuf[inlen] = '\0';
    while ((nl = strchr(inbuf, '\n')) != NULL) {
        *nl = '\0';
        command(inbuf);
        inlen -= (size_t)(nl + 1 - inbuf);
        memmove(inbuf, nl + 1, inlen + 1);
    }
    if (inlen == sizeof(inbuf) - 1)
        inlen = 0; /* a line too long for a command: drop it */
}

static void
on_lifetime(evutil_socket_t fd, short what, void *arg)
{
    fprintf(stderr, "zk-watch: lifetime over\n");
    event_base_loopbreak(base);
}

int
main(int argc, char **argv)
{
    struct lk_meta_opts opts = {0};
    struct event_config *cfg;
    int lifetime = 600;
    char err[256];

    while (argc > 1 && strncmp(argv[1], "--", 2) == 0) {
        if (strcmp(argv[1], "--timeout") == 0 && argc > 2) {
            opts.session_timeout_ms = atoi(argv[2]);
            argv += 2, argc -= 2;
        } else if (strcmp(argv[1], "--lifetime") == 0 && argc > 2) {
            lifetime = atoi(argv[2]);
            argv += 2, argc -= 2;
        } else if (strcmp(argv[1], "--debug") == 0) {
            lk_log_level = LK_DEBUG;
            argv++, argc--;
        } else {
            break;
        }
    }
    if (argc != 3) {
        fprintf(stderr, "usage: zk-watch [--timeout MS] [--lifetime S] [--debug] SERVERS PATH\n");
        return 2;
    }
    /* Without locks, as lookout's workers run theirs: lk_zk makes no
     * libevent call off the loop thread. */
    cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    zk = lk_zk_start(base, argv[1], argv[2], &opts, on_snapshot, NULL, err, sizeof(err));
    if (zk == NULL) {
        fprintf(stderr, "zk-watch: %s\n", err);
        event_base_free(base);
        return 1;
    }
    put(json_pack("{s:b,s:i}", "started", 1, "pid", (int)getpid()));
    struct event *in = event_new(base, STDIN_FILENO, EV_READ | EV_PERSIST, on_stdin, NULL);
    struct event *life = evtimer_new(base, on_lifetime, NULL);
    struct timeval tv = {lifetime, 0};
    event_add(in, NULL);
    evtimer_add(life, &tv);
    event_base_dispatch(base);
    lk_zk_stop(zk);
    event_free(in);
    event_free(life);
    event_base_free(base);
    libevent_global_shutdown();
    return 0;
}
