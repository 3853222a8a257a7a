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

#include <event2/buffer.h>
#include <event2/bufferevent.h>
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

/* What a serving ZooKeeper says to "srvr" (trimmed), then it closes; the
 * client's handshake gets closed without a word, as from a server that
 * gives no session. */
static void
on_first_bytes(struct bufferevent *bev, void *arg)
{
    static const char answer[] = "Zookeeper version: 3.8.0\nMode: standalone\nNode count: 5\n";
    struct evbuffer *in = bufferevent_get_input(bev);
    char word[4];

    if (evbuffer_get_length(in) < 4)
        return;
    evbuffer_remove(in, word, sizeof(word));
    if (memcmp(word, "srvr", 4) == 0 &&
        write(bufferevent_getfd(bev), answer, sizeof(answer) - 1) < 0)
        perror("write");
    bufferevent_free(bev);
}

static void
on_conn_event(struct bufferevent *bev, short what, void *arg)
{
    bufferevent_free(bev);
}

static void
on_accept_srvr(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
               void *arg)
{
    struct bufferevent *bev =
        bufferevent_socket_new(evconnlistener_get_base(l), fd, BEV_OPT_CLOSE_ON_FREE);

    (*(int *)arg)++;
    bufferevent_setcb(bev, on_first_bytes, NULL, on_conn_event, NULL);
    bufferevent_enable(bev, EV_READ);
}

struct probe_fixture {
    struct event_base *base;
    struct evconnlistener *l;
    struct lk_zk *zk;
    int fd; /* bound, listening from the timer on */
    int accepts;
    uint64_t attempts_before; /* handles opened when the port began to listen */
};

static void
on_listen(evutil_socket_t unused, short what, void *arg)
{
    struct probe_fixture *f = arg;
    struct lk_meta_state st;

    lk_zk_state(f->zk, &st);
    f->attempts_before = st.attempts;
    evutil_make_socket_nonblocking(f->fd); /* evconnlistener_new wants it so */
    f->l =
        evconnlistener_new(f->base, on_accept_srvr, &f->accepts, LEV_OPT_CLOSE_ON_FREE, 64, f->fd);
    if (f->l != NULL)
        f->fd = -1;
}

/*
 * A server comes back during a long pause.  A port bound but not listening
 * refuses connections; with a 1 s session timeout the handles open at 0, 1
 * and 2.5 s, and the next would at 5 s.  At 3.2 s the port starts to take
 * connections and to answer "srvr" as a serving ZooKeeper does (and nothing
 * else): the probe sees the change and opens a handle at once, one, not one
 * per round, and then none while the server keeps answering without giving
 * a session (the pause rules there).  test_backoff's server, which closes
 * without a word, never counts as serving.
 */
static void
test_probe(void)
{
    struct probe_fixture f = {.fd = -1};
    struct lk_meta_state st;
    struct lk_meta_opts opts = {.session_timeout_ms = 1000};
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    struct timeval at_listen = {3, 200000}, first = {4, 400000}, second = {1, 200000};
    struct event *ev = NULL;
    char servers[64], err[256] = "";

    evthread_use_pthreads();
    f.base = event_base_new();
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f.fd = socket(AF_INET, SOCK_STREAM, 0);
    if (!ok(f.fd != -1 && bind(f.fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
                getsockname(f.fd, (struct sockaddr *)&sin, &len) == 0,
            "a port bound, not listening"))
        goto end;
    snprintf(servers, sizeof(servers), "127.0.0.1:%d", ntohs(sin.sin_port));
    f.zk = lk_zk_start(f.base, servers, "/x", &opts, on_snapshot, NULL, err, sizeof(err));
    if (!ok(f.zk != NULL, "started: %s", err))
        goto end;
    ev = evtimer_new(f.base, on_listen, &f);
    evtimer_add(ev, &at_listen);
    event_base_loopexit(f.base, &first);
    event_base_dispatch(f.base);
    lk_zk_state(f.zk, &st);
    ok(f.l != NULL, "the port listens from 3.2 s on");
    ok(f.attempts_before == 3, "handles opened while it refused: %llu",
       (unsigned long long)f.attempts_before);
    ok(st.attempts == f.attempts_before + 1,
       "one more handle within 1.2 s of it listening, not at 5 s: %llu",
       (unsigned long long)st.attempts);
    ok(st.probes > 0 && st.probes < 40, "probes so far: %llu", (unsigned long long)st.probes);
    event_base_loopexit(f.base, &second);
    event_base_dispatch(f.base);
    lk_zk_state(f.zk, &st);
    ok(st.attempts == f.attempts_before + 1,
       "no further handle while it answers but gives no session: %llu",
       (unsigned long long)st.attempts);
    ok(!st.connected && st.sessions == 0, "no session");
end:
    lk_zk_stop(f.zk);
    if (ev != NULL)
        event_free(ev);
    if (f.l != NULL)
        evconnlistener_free(f.l);
    if (f.fd != -1)
        close(f.fd);
    event_base_free(f.base);
}

const struct lk_test_case lk_test_zk[] = {
    {"zk/args", test_args},
    {"zk/unreachable", test_unreachable},
    {"zk/backoff", test_backoff},
    {"zk/probe", test_probe},
    {NULL, NULL},
};
