/*
 * The workers: one thread each, with its own event loop and listeners on
 * every bind (SO_REUSEPORT).  Generations: a reload publishes a new
 * runtime, and each worker switches its listeners to it (lk_workers_reload);
 * a drain stops accepting and lets connections finish (lk_workers_drain).
 * Other threads reach a worker through one byte down its pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <event2/event.h>

#include "lk_access.h"
#include "lk_age.h"
#include "lk_clock.h"
#include "lk_conn.h"
#include "lk_dyn.h"
#include "lk_io.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_route.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_upstream.h"
#include "lk_worker.h"
#include "lk_workers.h"
#include "lk_xrec.h"

static struct lk_worker *workers;
static int nworkers;

_Atomic unsigned long lk_reloads_ok, lk_reloads_failed;
/* The current generation: what workers switch to (their own reference
 * each), under cur_mu since the main thread replaces it. */
static pthread_mutex_t cur_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lk_runtime *cur_rt;
static atomic_int draining;
static _Atomic long long drain_deadline_ms;
/* The protocol registry lk_workers_start was given (lk_protos.h). */
static const struct lk_proto_ops *(*proto_for)(unsigned proto);

/* Workers whose drain is not over yet.  Worker 0 ends last: its loop also
 * serves the admin listener, whose /healthz says 503 while the others
 * finish (lk_admin.h). */
static atomic_int workers_draining;

static void
resume_accept(evutil_socket_t fd, short what, void *arg)
{
    evconnlistener_enable(arg);
}

static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
    struct lk_listen *ls = arg;
    const struct lk_bind *b = ls->b;
    int err = EVUTIL_SOCKET_ERROR();

    /* EMFILE/ENFILE: stay up; the listener retries on the next event.  Pause
     * it briefly so that a full fd table does not spin the loop. */
    lk_log(LK_ERR, NULL, "accept on %s: %s", b->text, evutil_socket_error_to_string(err));
    evconnlistener_disable(l);
    struct timeval tv = {0, 100000};
    /* The listener's own event: a reload or a drain that closes the
     * listener first cancels it. */
    if (ls->resume == NULL)
        ls->resume = evtimer_new(evconnlistener_get_base(l), resume_accept, l);
    event_add(ls->resume, &tv);
}

/* Closes a listener (ls: what its callbacks get). */
static void
listener_free(struct evconnlistener *l, struct lk_listen *ls)
{
    if (ls->resume != NULL)
        event_free(ls->resume);
    ls->resume = NULL;
    evconnlistener_free(l);
}

/* What listen.backlog and listen.defer_accept say, on a bound socket fd;
 * again on a kept one when a reload changes them (listen() on a listening
 * socket sets its backlog anew). */
static int
listen_opts(evutil_socket_t fd, const struct lk_conf *conf)
{
    int secs = conf->defer_accept ? 1 : 0;

    if (setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs)) != 0)
        return -1;
    return listen(fd, conf->listen_backlog);
}

/* Binds b and listens as conf says (listen_opts, again when a reload
 * changes them on a kept socket): its backlog (the kernel caps it at
 * net.core.somaxconn), and deferred accept.  The caller hands the socket to
 * evconnlistener_new with a backlog of 0: given -1, libevent would listen()
 * again with 128.  TCP_NODELAY is set here once: every socket accepted from
 * it has it too (Linux copies it to the accepted socket), rather than a
 * setsockopt per connection.
 *
 * Deferred accept: every protocol lookout serves has the client speak first
 * (an HTTP request, a TLS ClientHello, a PROXY header, a Kafka or Pulsar
 * frame), so the kernel is asked to finish a connection only once its first
 * bytes are in.  The worker reads them in the same turn of its loop as the
 * accept (lk_conn.c sets the lk_io's read_now), and does not go to sleep
 * between the accept and the request and wake again for it: that sleep is
 * most of what epoll costs per new connection
 * (bench/results/2026-12-05-0136-defer-accept.md).  A client that
 * sends nothing is accepted after 1 s all the same (the kernel's
 * TCP_DEFER_ACCEPT ends at the first SYN-ACK resent, and the client's ACK of
 * that finishes it), and then meets lookout's own timeouts. */
static evutil_socket_t
bind_socket(const struct lk_bind *b, const struct lk_conf *conf, char *err, size_t errlen)
{
    evutil_socket_t fd = socket(b->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0)
        goto fail;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (b->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        goto fail;
    if (bind(fd, (const struct sockaddr *)&b->addr, b->addrlen) != 0)
        goto fail;
    if (listen_opts(fd, conf) != 0)
        goto fail;
    return fd;
fail:
    snprintf(err, errlen, "cannot listen on %s: %s", b->text, strerror(errno));
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Listens on b on worker w, ls being what the callbacks get. */
static struct evconnlistener *
listen_on(struct lk_worker *w, const struct lk_bind *b, struct lk_listen *ls, char *err,
          size_t errlen)
{
    evutil_socket_t fd = bind_socket(b, w->rt->conf, err, errlen);
    struct evconnlistener *l;

    if (fd < 0)
        return NULL;
    ls->w = w;
    ls->b = b;
    ls->st = lk_stats_frontend(b->text, b->proto);
    l = evconnlistener_new(w->base, lk_conn_accept, ls,
                           LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
    if (l == NULL) {
        close(fd);
        snprintf(err, errlen, "cannot listen on %s", b->text);
        return NULL;
    }
    evconnlistener_set_error_cb(l, accept_error_cb);
    return l;
}

/* Listens on the binds added at run time that w does not have yet.  Only
 * the worker that added them logs a failure; the others would repeat it. */
static void
sync_binds(struct lk_worker *w, int log_errors)
{
    const struct lk_bind *nb[16];
    size_t n;

    if (w->draining)
        return; /* stopping: no new listeners */
    while ((n = lk_dyn_binds(w->rt->dyn, w->ndyn_listen, nb, 16)) != 0) {
        for (size_t i = 0; i < n; i++) {
            struct lk_dyn_listen *d = lk_xcalloc(1, sizeof(*d));
            char err[256];

            d->l = listen_on(w, nb[i], &d->ls, err, sizeof(err));
            if (d->l == NULL && log_errors)
                lk_log(LK_ERR, NULL, "%s; the node it was bound for is not served", err);
            else if (d->l != NULL && log_errors)
                lk_log(LK_INFO, NULL, "listening on %s (%skafka, for %s)", nb[i]->text,
                       nb[i]->tls ? "TLS, " : "", nb[i]->vhosts[0].host);
            d->next = w->dyn_listen;
            w->dyn_listen = d;
        }
        w->ndyn_listen += n;
    }
}

void
lk_workers_learn_node(struct lk_worker *w, struct lk_runtime *rt, const struct lk_cluster *cl,
                      const struct lk_broker *from, int32_t node_id, struct lk_str host,
                      int32_t port)
{
    if (lk_dyn_learn(rt->dyn, rt->conf->nbrokers, cl, from, node_id, host, port) && rt == w->rt)
        lk_workers_binds_changed(w);
}

void
lk_workers_binds_changed(struct lk_worker *w)
{
    sync_binds(w, 1);
    for (int i = 0; i < nworkers; i++)
        if (&workers[i] != w && write(workers[i].stop_pipe[1], "b", 1) != 1)
            lk_log(LK_ERR, NULL, "cannot reach worker %d: %s", i, strerror(errno));
}

/* Closes the listeners on binds learned at run time: they belong to w's
 * generation's lk_dyn, which the next one does not inherit. */
static void
drop_dyn_listeners(struct lk_worker *w)
{
    while (w->dyn_listen != NULL) {
        struct lk_dyn_listen *d = w->dyn_listen;
        w->dyn_listen = d->next;
        if (d->l != NULL)
            listener_free(d->l, &d->ls);
        free(d);
    }
    w->ndyn_listen = 0;
}

/* Room for the keys a config's brokers are dialled by: one per scheme of
 * each broker's internal listener, or two. */
static size_t
pool_keys(const struct lk_conf *conf)
{
    return conf->nbrokers * 2 + 2;
}

/*
 * A new generation was published: w takes it.  Its listeners are matched
 * to the new binds by address, TLS-ness and protocol: a kept one goes on
 * accepting on the same socket (its callbacks get the new bind), so no
 * client is refused in between; a new bind gets a socket of its own
 * (SO_REUSEPORT, like every worker's); what is left closes.  Connections
 * keep their own reference to the old generation.
 */
static void
worker_switch(struct lk_worker *w)
{
    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *rt = lk_runtime_ref(cur_rt);
    pthread_mutex_unlock(&cur_mu);
    struct lk_runtime *old = w->rt;

    if (rt == old || w->draining) {
        lk_runtime_unref(rt);
        return;
    }
    const struct lk_conf *conf = rt->conf;
    struct evconnlistener **ls = lk_xcalloc(conf->nbinds + 1, sizeof(*ls));
    struct lk_listen *lsn = lk_xcalloc(conf->nbinds + 1, sizeof(*lsn));
    size_t n = 0;
    for (size_t k = 0; k < conf->nbinds; k++) {
        const struct lk_bind *b = conf->binds[k];
        size_t i;
        for (i = 0; i < w->nlisteners; i++)
            if (w->listeners[i] != NULL && lk_bind_same(w->listen[i].b, b))
                break;
        if (i < w->nlisteners) {
            ls[n] = w->listeners[i];
            w->listeners[i] = NULL;
            lsn[n] = w->listen[i];
            lsn[n].b = b;
            evconnlistener_set_cb(ls[n], lk_conn_accept, &lsn[n]);
            /* listen() again on a listening socket sets its backlog anew. */
            if ((conf->defer_accept != old->conf->defer_accept ||
                 conf->listen_backlog != old->conf->listen_backlog) &&
                listen_opts(evconnlistener_get_fd(ls[n]), conf) != 0)
                lk_log(LK_ERR, NULL, "worker %d: %s: cannot apply listen.backlog or "
                       "listen.defer_accept: %s; the old values stay", w->id, b->text,
                       strerror(errno));
            n++;
            continue;
        }
        char err[256];
        /* lk_workers_reload bound it once already: a failure is a race. */
        if ((ls[n] = listen_on(w, b, &lsn[n], err, sizeof(err))) == NULL) {
            lk_log(LK_ERR, NULL, "worker %d: %s; not serving it", w->id, err);
            continue;
        }
        if (w->id == 0)
            lk_log(LK_INFO, NULL, "listening on %s (%s%s)", b->text, b->tls ? "TLS, " : "",
                   proto_for(b->proto)->name);
        n++;
    }
    for (size_t i = 0; i < w->nlisteners; i++)
        if (w->listeners[i] != NULL)
            listener_free(w->listeners[i], &w->listen[i]); /* removed: its connections finish */
    free(w->listeners);
    free(w->listen);
    w->listeners = ls;
    w->listen = lsn;
    w->nlisteners = n;
    drop_dyn_listeners(w);
    lk_idle_pool_free(&w->idle); /* dialled for the old generation: their keys name it */
    lk_idle_pool_init(&w->idle, pool_keys(conf));
    w->rt = rt;
    lk_runtime_unref(old);
    sync_binds(w, 0); /* nodes another worker learned on rt already */
}

static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;

    if (w->nconns != 0 && lk_now_ms() < atomic_load(&drain_deadline_ms))
        return;
    if (w->nconns != 0)
        lk_log(LK_WARN, NULL, "worker %d: drain_timeout: closing %u connection%s still open", w->id,
               w->nconns, w->nconns == 1 ? "" : "s");
    while (w->conns != NULL)
        lk_conn_close(w->conns);
    if (w->id == 0 && atomic_load(&workers_draining) > 1 &&
        lk_now_ms() < atomic_load(&drain_deadline_ms) + 1000)
        return; /* the others have not finished (nor passed the deadline) */
    if (!w->drained) {
        w->drained = 1;
        atomic_fetch_sub(&workers_draining, 1);
    }
    event_base_loopbreak(w->base);
}

/* lookout is stopping: w stops accepting and lets its connections finish. */
static void
worker_drain(struct lk_worker *w)
{
    struct timeval tick = {0, 50000};

    if (w->draining)
        return; /* a second signal: only the deadline changed */
    w->draining = 1;
    /* Made first: the last close below wakes it. */
    w->drain_ev = event_new(w->base, -1, EV_PERSIST, drain_cb, w);
    event_add(w->drain_ev, &tick);
    for (size_t i = 0; i < w->nlisteners; i++)
        listener_free(w->listeners[i], &w->listen[i]);
    w->nlisteners = 0;
    drop_dyn_listeners(w);
    lk_idle_pool_free(&w->idle);
    lk_idle_pool_init(&w->idle, 0); /* what exchanges still under way release */
    for (struct lk_conn *c = w->conns, *next; c != NULL; c = next) {
        const struct lk_proto_ops *ops = proto_for(c->bind->proto);
        next = c->next;
        if (c->closing)
            continue;
        /* Parked, still in its TLS handshake, or a protocol without a say:
         * nothing under way. */
        if (c->bev == NULL || c->proto == NULL || ops->drain == NULL)
            lk_conn_close(c);
        else
            ops->drain(c);
    }
    if (w->nconns == 0)
        event_active(w->drain_ev, EV_TIMEOUT, 1);
}

/* A byte from another thread: 's' stops the loop, 'b' takes new binds, 'r'
 * a new generation, 'd' drains. */
static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
    struct lk_worker *w = arg;
    char bytes[64];
    ssize_t n = read(fd, bytes, sizeof(bytes));

    for (ssize_t i = 0; i < n; i++) {
        if (bytes[i] == 'b')
            sync_binds(w, 0);
        else if (bytes[i] == 'r')
            worker_switch(w);
        else if (bytes[i] == 'd')
            worker_drain(w);
        else
            event_base_loopbreak(w->base);
    }
}

/* One byte down every worker's pipe. */
static void
tell_workers(char what)
{
    for (int i = 0; i < nworkers; i++)
        if (write(workers[i].stop_pipe[1], &what, 1) != 1)
            lk_log(LK_ERR, NULL, "cannot reach worker %d: %s", i, strerror(errno));
}

/* Whether b can be bound now (it is not yet): bound without listening, so
 * that no connection lands on a socket that is closed again at once. */
static int
can_bind(const struct lk_bind *b, char *err, size_t errlen)
{
    evutil_socket_t fd = socket(b->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, r = -1;

    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        if (b->addr.ss_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        r = bind(fd, (const struct sockaddr *)&b->addr, b->addrlen);
    }
    if (r != 0)
        snprintf(err, errlen, "cannot listen on %s: %s", b->text, strerror(errno));
    if (fd >= 0)
        close(fd);
    return r;
}

int
lk_workers_can_bind(const struct lk_conf *conf, char *err, size_t errlen)
{
    char why[256];

    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *cur = cur_rt != NULL ? lk_runtime_ref(cur_rt) : NULL;
    pthread_mutex_unlock(&cur_mu);
    int rc = 0;
    for (size_t i = 0; cur != NULL && i < conf->nbinds && rc == 0; i++) {
        const struct lk_bind *b = conf->binds[i];
        if (lk_bind_find(cur->conf, b) == NULL && can_bind(b, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "%s:%d: %s", conf->file, b->vhosts[0].line, why);
            rc = -1;
        }
    }
    lk_runtime_unref(cur);
    return rc;
}

int
lk_workers_reload(struct lk_runtime *rt, struct lk_reload_stats *st, char *err, size_t errlen)
{
    const struct lk_conf *conf = rt->conf;

    if (atomic_load(&draining)) {
        snprintf(err, errlen, "%s: lookout is stopping", conf->file);
        return -1;
    }
    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *old = cur_rt;
    pthread_mutex_unlock(&cur_mu);
    const struct lk_conf *oc = old->conf;
    memset(st, 0, sizeof(*st));
    if (lk_workers_can_bind(conf, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < conf->nbinds; i++)
        if (lk_bind_find(oc, conf->binds[i]) != NULL)
            st->kept++;
    st->added = conf->nbinds - st->kept;
    st->removed = oc->nbinds - st->kept;
    /* A broker that was failing still is: health goes over by name. */
    for (size_t i = 0; i < conf->nbrokers; i++)
        for (size_t j = 0; j < oc->nbrokers; j++)
            if (strcmp(conf->brokers[i]->name, oc->brokers[j]->name) == 0) {
                struct lk_broker_health *h = &old->health[j];
                rt->health[i].fails = __atomic_load_n(&h->fails, __ATOMIC_RELAXED);
                rt->health[i].retry_after_ms =
                    __atomic_load_n(&h->retry_after_ms, __ATOMIC_RELAXED);
                rt->health[i].check_fails = __atomic_load_n(&h->check_fails, __ATOMIC_RELAXED);
                rt->health[i].check_down = __atomic_load_n(&h->check_down, __ATOMIC_RELAXED);
                break;
            }
    rt->generation = old->generation + 1;
    pthread_mutex_lock(&cur_mu);
    cur_rt = rt;
    pthread_mutex_unlock(&cur_mu);
    lk_runtime_unref(old); /* the workers hold theirs until they switch */
    tell_workers('r');
    return 0;
}

struct lk_runtime *
lk_workers_runtime(void)
{
    pthread_mutex_lock(&cur_mu);
    struct lk_runtime *rt = cur_rt != NULL ? lk_runtime_ref(cur_rt) : NULL;
    pthread_mutex_unlock(&cur_mu);
    return rt;
}

uint64_t
lk_workers_generation(void)
{
    pthread_mutex_lock(&cur_mu);
    uint64_t g = cur_rt != NULL ? cur_rt->generation : 0;
    pthread_mutex_unlock(&cur_mu);
    return g;
}

void
lk_workers_drain(unsigned timeout_ms)
{
    long long deadline = lk_now_ms() + timeout_ms;
    long long was = atomic_load(&drain_deadline_ms);

    /* A second signal may bring the end nearer, never put it off. */
    while ((was == 0 || deadline < was) &&
           !atomic_compare_exchange_weak(&drain_deadline_ms, &was, deadline))
        ;
    if (atomic_exchange(&draining, 1) == 0) {
        atomic_store(&workers_draining, nworkers);
        tell_workers('d');
    }
}

int
lk_workers_draining(void)
{
    return atomic_load(&draining);
}

int
lk_workers_start(struct lk_runtime *rt, int n, const struct lk_proto_ops *(*protos)(unsigned),
                 char *err, size_t errlen)
{
    const struct lk_conf *conf = rt->conf;

    /* Each worker's loop is its own: nothing but the stop pipe crosses
     * threads, so the bases take no locks (they cost a mutex pair on every
     * event_add and evbuffer callback). */
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    /* Bodies pass through in chains of up to LK_READ_MAX: with glibc's
     * default 128 KiB trim threshold, freeing them gave memory back to the
     * kernel and took it again, a brk per large exchange.  Free memory up
     * to 8 MiB stays with the process instead. */
    mallopt(M_TRIM_THRESHOLD, 8 * 1024 * 1024);
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
    proto_for = protos;
    lk_log_set_describe(lk_conn_describe); /* log lines name their connection */
    lk_xrec_init();
    nworkers = n;
    workers = lk_xcalloc((size_t)n, sizeof(*workers));
    rt->generation = 1;
    cur_rt = lk_runtime_ref(rt);
    for (int i = 0; i < n; i++) {
        struct lk_worker *w = &workers[i];
        w->id = i;
        w->rt = lk_runtime_ref(rt);
        w->stop_pipe[0] = w->stop_pipe[1] = -1;
        w->base = event_base_new_with_config(cfg);
        if (w->base == NULL || pipe2(w->stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
            snprintf(err, errlen, "cannot create an event loop");
            goto fail;
        }
        w->dns = evdns_base_new(w->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                             EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (w->dns == NULL) /* no resolv.conf: IP literals still work */
            w->dns = evdns_base_new(w->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        lk_idle_pool_init(&w->idle, pool_keys(conf));
        w->listeners = lk_xcalloc(conf->nbinds + 1, sizeof(*w->listeners));
        w->listen = lk_xcalloc(conf->nbinds + 1, sizeof(*w->listen));
        lk_io_worker_init(w);
        w->proto_for = proto_for;
        w->park = lk_conn_park_io;
        w->unpark = lk_conn_unpark_io;
        w->age_start = lk_age_start;
        lk_hold_init(&w->hold, w->base);
        w->stop_ev = event_new(w->base, w->stop_pipe[0], EV_READ | EV_PERSIST, stop_cb, w);
        event_add(w->stop_ev, NULL);
        for (size_t k = 0; k < conf->nbinds; k++) {
            const struct lk_bind *b = conf->binds[k];
            struct evconnlistener *l = listen_on(w, b, &w->listen[w->nlisteners], err, errlen);
            if (l == NULL)
                goto fail;
            w->listeners[w->nlisteners++] = l;
            if (i == 0)
                lk_log(LK_INFO, NULL, "listening on %s (%s%s)", b->text, b->tls ? "TLS, " : "",
                       proto_for(b->proto)->name);
        }
    }
    event_config_free(cfg);
    return 0;
fail:
    event_config_free(cfg);
    return -1;
}

void
lk_workers_loop(struct event_base *base)
{
    for (;;) {
        lk_clock_tick();
        if (event_base_loop(base, EVLOOP_ONCE) != 0 || event_base_got_break(base) ||
            event_base_got_exit(base))
            break;
    }
    lk_clock_untick();
}

static void *
worker_main(void *arg)
{
    struct lk_worker *w = arg;
    lk_stats_set_shard(w->id);
    lk_access_thread_start(w->base);
    lk_workers_loop(w->base);
    /* The last iteration's access lines: a drain or a stop breaks the
     * loop off before their write. */
    lk_access_thread_end();
    return NULL;
}

void
lk_workers_run(void)
{
    for (int i = 1; i < nworkers; i++)
        pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
    worker_main(&workers[0]);
    for (int i = 1; i < nworkers; i++)
        pthread_join(workers[i].thread, NULL);
}

struct event_base *
lk_workers_main_base(void)
{
    return workers[0].base;
}

void
lk_workers_stop(void)
{
    /* A byte down each worker's pipe: the bases are lock-free, so no
     * event_active across threads.  Signal handlers call this through the
     * main loop's evsignal. */
    tell_workers('s');
}

void
lk_workers_free(void)
{
    for (int i = 0; i < nworkers; i++) {
        struct lk_worker *w = &workers[i];
        for (size_t k = 0; k < w->nlisteners; k++)
            listener_free(w->listeners[k], &w->listen[k]);
        drop_dyn_listeners(w);
        w->draining = 0; /* no drain_ev wake-ups from the closes below */
        while (w->conns != NULL)
            lk_conn_close(w->conns);
        lk_idle_pool_free(&w->idle);
        if (w->drain_ev != NULL)
            event_free(w->drain_ev);
        lk_runtime_unref(w->rt);
        w->rt = NULL;
        for (size_t k = 0; k < w->nconn_blocks; k++)
            free(w->conn_blocks[k]);
        free(w->conn_blocks);
        free(w->listeners);
        free(w->listen);
        event_free(w->stop_ev);
        lk_io_worker_free(w);
        lk_hold_free(&w->hold);
        close(w->stop_pipe[0]);
        close(w->stop_pipe[1]);
        if (w->dns != NULL)
            evdns_base_free(w->dns, 0);
        event_base_free(w->base);
    }
    free(workers);
    workers = NULL;
    nworkers = 0;
    lk_runtime_unref(cur_rt);
    cur_rt = NULL;
}
