/*
 * proxy/lk_zk.c without a ZooKeeper: what it refuses, and what it reports
 * while nothing answers (tests/integration/110-zk-watch.t runs it against a
 * real server).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <event2/thread.h>

#include "lk_test.h"
#include "lk_zk.h"

static int ncalls;

static void
on_snapshot(const struct lk_meta_node *nodes, size_t n, void *arg)
{
    ncalls++;
}

static void
test_args(void)
{
    struct event_base *base;
    char err[256] = "";

    evthread_use_pthreads();
    base = event_base_new();
    ok(lk_zk_start(base, "", "/loadbalance/brokers", NULL, on_snapshot, NULL, err, sizeof(err)) ==
           NULL,
       "no servers: refused (%s)", err);
    ok(lk_zk_start(base, "/chroot", "/x", NULL, on_snapshot, NULL, err, sizeof(err)) == NULL,
       "a chroot alone: refused (%s)", err);
    ok(lk_zk_start(base, "127.0.0.1:2181", "loadbalance/brokers", NULL, on_snapshot, NULL, err,
                   sizeof(err)) == NULL,
       "a relative path: refused (%s)", err);
    ok_str(lk_meta_zk.scheme, "zk", "the ops table's scheme");
    event_base_free(base);
}

/* A port nothing listens on: refused connections, so no session. */
static int
closed_port(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd == -1 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        if (fd != -1)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(sin.sin_port);
}

static void
test_unreachable(void)
{
    struct event_base *base;
    struct lk_zk *zk = NULL;
    struct lk_meta_state st;
    struct lk_meta_opts opts = {.session_timeout_ms = 2000};
    struct timeval tv = {0, 300000};
    char servers[64], err[256] = "";
    int port = closed_port();

    evthread_use_pthreads();
    base = event_base_new();
    if (!ok(port > 0, "a closed port"))
        goto end;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d/chroot", port);
    zk = lk_meta_zk.start(base, servers, "/loadbalance/brokers/", &opts, on_snapshot, NULL, err,
                          sizeof(err));
    if (!ok(zk != NULL, "started with nothing listening: %s", err))
        goto end;
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    lk_meta_zk.state(zk, &st);
    ok(!st.connected && st.session_id == 0 && st.sessions == 0, "not connected, no session");
    ok(st.stale_since_ms > 0, "stale since it started");
    ok(st.snapshots == 0 && ncalls == 0, "no snapshot: there is nothing to show yet");
end:
    lk_zk_stop(zk); /* joins the client's threads: LSan sees no leak */
    event_base_free(base);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    (*(int *)arg)++;
    close(fd);
}

/*
 * A server that takes each connection and closes it, as a ZooKeeper does
 * while it elects a leader: the client alone would retry some fifty times a
 * second for as long as that lasts.  With a 1 s session timeout a handle gets
 * 500 ms, and the next ones 500 ms after pauses of 0.5, 1, 2 s: in 4 s, three
 * or four handles and a fraction of the connections.
 */
static void
test_backoff(void)
{
    struct event_base *base;
    struct evconnlistener *l = NULL;
    struct lk_zk *zk = NULL;
    struct lk_meta_state st;
    struct lk_meta_opts opts = {.session_timeout_ms = 1000};
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    struct timeval tv = {4, 0};
    char servers[64], err[256] = "";
    int accepts = 0;

    evthread_use_pthreads();
    base = event_base_new();
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l = evconnlistener_new_bind(base, on_accept, &accepts, LEV_OPT_CLOSE_ON_FREE, 64,
                                (struct sockaddr *)&sin, sizeof(sin));
    if (!ok(l != NULL, "a listener") ||
        !ok(getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&sin, &len) == 0, "its port"))
        goto end;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", ntohs(sin.sin_port));
    zk = lk_zk_start(base, servers, "/x", &opts, on_snapshot, NULL, err, sizeof(err));
    if (!ok(zk != NULL, "started: %s", err))
        goto end;
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    lk_zk_state(zk, &st);
    ok(st.attempts >= 3 && st.attempts <= 5, "handles opened in 4 s: %llu",
       (unsigned long long)st.attempts);
    ok(accepts > 0 && accepts < 150, "connections in 4 s: %d (some 200 without backoff)", accepts);
    ok(!st.connected && st.sessions == 0 && ncalls == 0, "no session, no snapshot");
end:
    lk_zk_stop(zk);
    if (l != NULL)
        evconnlistener_free(l);
    event_base_free(base);
}

const struct lk_test_case lk_test_zk[] = {
    {"zk/args", test_args},
    {"zk/unreachable", test_unreachable},
    {"zk/backoff", test_backoff},
    {NULL, NULL},
};
