/*
 * The ZooKeeper source (lk_zk.h): the children of one path and the data of
 * each, read with the official C client and kept live by its one-shot
 * watches, re-armed by every read.  The client calls us on its completion
 * thread; those callbacks only copy what they got into an item, queue it
 * under a mutex and wake the loop with a byte down a pipe.  The loop thread
 * owns every other piece of state: it issues the reads, applies their
 * results to a sorted table of children, handles the session's states and
 * delivers a snapshot once no read of a change is outstanding.
 *
 * Sessions.  The client reconnects by itself (to the next server of the
 * list) while its session lives; we watch its states and bound its retries.  On every
 * (re)connection we re-read the children and all their data, so that what
 * changed while we were away is picked up whatever became of the watches.
 * An expired session is closed and replaced by a new one.  A handle that
 * cannot connect within its window is closed too, and the next one opened
 * after a doubling pause (arm_giveup says why), or as soon as a probe
 * finds a server that was not serving answer "srvr" with its mode
 * (probe_round says why).  Each handle has an epoch:
 * items of an older handle are dropped, so a late completion of a closed
 * session never touches the table.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <zookeeper/zookeeper.h>

#include "lk_log.h"
#include "lk_pool.h"
#include "lk_zk.h"

/* The pause between two handles that could not connect doubles from
 * BACKOFF_MIN_MS to BACKOFF_MAX_MS; each such handle gets RETRY_WINDOW_MS. */
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 10000
#define RETRY_WINDOW_MS 500
/* During a pause every address of the server list gets a connect and the
 * four-letter word "srvr" each PROBE_MS; one still unanswered at the next
 * round counts as down. */
#define PROBE_MS 250
#define PROBE_MAX_ADDRS 32

enum probe_state { PR_UNKNOWN = 0, PR_DOWN, PR_UP };

/* One address of the server list, as resolved when the pause began. */
struct probe {
    struct lk_zk *zk;
    struct sockaddr_storage sa;
    socklen_t salen;
    enum probe_state seen; /* the last round's answer, kept across pauses */
    int fd;                /* the connect in flight, or -1 */
    struct event *ev;      /* its completion, then the answer's */
    int sent;              /* "srvr" is written: reading the answer */
    size_t len;
    char answer[512]; /* enough for the "Mode: " line, the 8th of srvr's */
};

/* A request in flight: the completion's context.  Allocated and freed on the
 * loop thread; the ZooKeeper thread only reads it.  Listed on the source, so
 * that those whose completion never comes are freed with their handle. */
struct req {
    struct req *prev, *next;
    struct lk_zk *zk;
    unsigned epoch;
    int full;    /* children read: re-read every child's data too */
    char name[]; /* data read: the child; "" otherwise */
};

enum item_kind { IT_WATCH, IT_CHILDREN, IT_DATA, IT_EXISTS };

/* One callback's worth, copied off the ZooKeeper thread. */
struct item {
    struct item *next;
    enum item_kind kind;
    unsigned epoch;
    struct req *req; /* completions: freed with the item */
    int rc;          /* completions */
    int type, state; /* watch */
    int64_t session_id;
    char passwd[16];
    char *path;   /* watch: the node's path within the chroot, or NULL */
    char **names; /* children, in the same allocation */
    size_t nnames;
    uint8_t *data; /* data, in the same allocation */
    size_t len;
};

struct child {
    char *name;
    uint8_t *data;
    size_t len;
    int have; /* its data has been read at least once */
    int seen; /* scratch for the children diff */
};

struct lk_zk {
    struct event_base *base;
    char *servers;
    char *path; /* without a trailing '/', except the root itself */
    int timeout_ms;
    lk_meta_snapshot_cb cb;
    void *arg;

    /* loop thread only */
    zhandle_t *zh;
    struct req *watch_ctx; /* the handle's context, read by the watcher */
    unsigned epoch;
    struct req *reqs;
    int connected;
    int inflight;    /* reads of the current handle not completed yet */
    int dirty;       /* the table changed since the last snapshot */
    int published;   /* a snapshot was delivered on the current data */
    int behind;      /* a read failed: the table may lag until the next resync */
    int backoff_ms;  /* the next pause between handles */
    int backing_off; /* the last handle never connected: short windows */
    int renew;       /* the session expired (1) or failed authentication (2): replace it
                      * once the queue is drained */
    struct child *kids;
    size_t nkids, capkids;
    int64_t id;
    char passwd[16];
    struct event *wake, *retry, *giveup;
    struct probe *probes; /* the server list's addresses, for the probe */
    size_t nprobes;
    struct event *tick; /* the next probe round */
    int probed;         /* the handle being opened follows a probe's answer */
    int pause_ms;       /* the pause running, for the log */
    struct lk_log_every edge_log;

    /* shared with the ZooKeeper thread, under mu */
    pthread_mutex_t mu;
    struct item *q_head, **q_tail;
    int woken; /* a byte is in the pipe that the loop has not read yet */
    struct lk_meta_state st;

    /* The wake-up: the ZooKeeper thread writes, the loop reads.  Not
     * event_active(): that is safe across threads only on a base with locks,
     * and the workers' bases run without them (lk_workers_start). */
    int wake_fd[2];
};

static int64_t
wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the ZooKeeper thread's side ---------------------------------------- */

static void
enqueue(struct lk_zk *zk, struct item *it)
{
    int wake;

    pthread_mutex_lock(&zk->mu);
    *zk->q_tail = it;
    zk->q_tail = &it->next;
    wake = !zk->woken;
    zk->woken = 1;
    pthread_mutex_unlock(&zk->mu);
    /* One byte per batch, so the pipe never fills.  The pipe outlives the
     * client's threads (lk_zk_stop joins them before closing it). */
    if (wake && write(zk->wake_fd[1], "w", 1) != 1)
        lk_log(LK_ERR, NULL, "zookeeper: cannot wake the loop: %s", strerror(errno));
}

static struct item *
item_new(enum item_kind kind, const struct req *r, size_t extra)
{
    struct item *it = lk_xcalloc(1, sizeof(*it) + extra);

    it->kind = kind;
    it->epoch = r->epoch;
    return it;
}

static void
on_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    const struct req *r = ctx;
    size_t plen = path != NULL ? strlen(path) : 0;
    struct item *it = item_new(IT_WATCH, r, plen + 1);

    it->type = type;
    it->state = state;
    if (plen > 0) {
        it->path = (char *)(it + 1);
        memcpy(it->path, path, plen + 1);
    }
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
        const clientid_t *cid = zoo_client_id(zh);
        it->session_id = cid->client_id;
        memcpy(it->passwd, cid->passwd, sizeof(it->passwd));
    }
    enqueue(r->zk, it);
}

static void
on_children(int rc, const struct String_vector *sv, const void *data)
{
    struct req *r = (struct req *)data;
    size_t n = rc == ZOK && sv != NULL ? (size_t)sv->count : 0, bytes = n * sizeof(char *);

    for (size_t i = 0; i < n; i++)
        bytes += strlen(sv->data[i]) + 1;
    struct item *it = item_new(IT_CHILDREN, r, bytes);
    it->req = r;
    it->rc = rc;
    it->names = (char **)(it + 1);
    it->nnames = n;
    char *p = (char *)(it->names + n);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(sv->data[i]) + 1;
        it->names[i] = memcpy(p, sv->data[i], l);
        p += l;
    }
    enqueue(r->zk, it);
}

static void
on_data(int rc, const char *value, int value_len, const struct Stat *stat, const void *data)
{
    struct req *r = (struct req *)data;
    /* value_len is -1 for a node created without data */
    size_t len = rc == ZOK && value != NULL && value_len > 0 ? (size_t)value_len : 0;
    struct item *it = item_new(IT_DATA, r, len);

    it->req = r;
    it->rc = rc;
    it->data = (uint8_t *)(it + 1);
    it->len = len;
    if (len > 0)
        memcpy(it->data, value, len);
    enqueue(r->zk, it);
}

static void
on_exists(int rc, const struct Stat *stat, const void *data)
{
    struct req *r = (struct req *)data;
    struct item *it = item_new(IT_EXISTS, r, 0);

    it->req = r;
    it->rc = rc;
    enqueue(r->zk, it);
}

/* The client's own log lines ("...:ZOO_ERROR@handle_socket_error_msg@...:
 * Socket [...] zk retcode=-4, errno=111(Connection refused)..."): ours say
 * what matters for the session, so these go to the debug level, with the
 * client's timestamp and thread cut off. */
static void
on_zk_log(const char *msg)
{
    const char *p = strstr(msg, "ZOO_");

    lk_log(LK_DEBUG, NULL, "zookeeper client: %s", p != NULL ? p : msg);
}

/* ---- requests (loop thread) --------------------------------------------- */

static struct req *
req_new(struct lk_zk *zk, const char *name, int full)
{
    size_t l = strlen(name) + 1;
    struct req *r = lk_xcalloc(1, sizeof(*r) + l);

    r->zk = zk;
    r->epoch = zk->epoch;
    r->full = full;
    memcpy(r->name, name, l);
    r->next = zk->reqs;
    if (zk->reqs != NULL)
        zk->reqs->prev = r;
    zk->reqs = r;
    return r;
}

static void
req_free(struct lk_zk *zk, struct req *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        zk->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    free(r);
}

/* Issued: the completion will come (with an error if the session goes). */
static void
issued(struct lk_zk *zk, struct req *r, int rc, const char *what)
{
    if (rc == ZOK) {
        zk->inflight++;
        return;
    }
    /* The handle refused it (expired or closing): the session's state
     * event that follows decides what to do. */
    lk_log(LK_DEBUG, NULL, "zookeeper: %s %s%s%s not sent: %s", what, zk->path,
           r->name[0] != '\0' ? "/" : "", r->name, zerror(rc));
    req_free(zk, r);
}

static void
read_children(struct lk_zk *zk, int full)
{
    struct req *r = req_new(zk, "", full);

    issued(zk, r, zoo_aget_children(zk->zh, zk->path, 1, on_children, r), "list");
}

static void
read_data(struct lk_zk *zk, const char *name)
{
    const char *dir = strcmp(zk->path, "/") == 0 ? "" : zk->path;
    size_t len = strlen(dir) + 1 + strlen(name) + 1;
    char *path = lk_xmalloc(len);
    struct req *r = req_new(zk, name, 0);

    snprintf(path, len, "%s/%s", dir, name);
    issued(zk, r, zoo_aget(zk->zh, path, 1, on_data, r), "read");
    free(path);
}

/* ---- the table (loop thread) -------------------------------------------- */

static struct child *
child_find(struct lk_zk *zk, const char *name, size_t *at)
{
    size_t lo = 0, hi = zk->nkids;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(zk->kids[mid].name, name);
        if (c == 0)
            return &zk->kids[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (at != NULL)
        *at = lo;
    return NULL;
}

static struct child *
child_add(struct lk_zk *zk, const char *name)
{
    size_t at;
    struct child *c = child_find(zk, name, &at);

    if (c != NULL)
        return c;
    if (zk->nkids == zk->capkids) {
        zk->capkids = zk->capkids ? zk->capkids * 2 : 16;
        zk->kids = lk_xrealloc(zk->kids, zk->capkids * sizeof(*zk->kids));
    }
    memmove(&zk->kids[at + 1], &zk->kids[at], (zk->nkids - at) * sizeof(*zk->kids));
    zk->nkids++;
    c = &zk->kids[at];
    memset(c, 0, sizeof(*c));
    c->name = lk_xstrdup(name);
    return c;
}

static void
child_remove(struct lk_zk *zk, struct child *c)
{
    size_t at = (size_t)(c - zk->kids);

    if (c->have)
        zk->dirty = 1;
    free(c->name);
    free(c->data);
    memmove(c, c + 1, (zk->nkids - at - 1) * sizeof(*c));
    zk->nkids--;
}

static void
clear_children(struct lk_zk *zk)
{
    while (zk->nkids > 0)
        child_remove(zk, &zk->kids[zk->nkids - 1]);
}

static void
set_stale(struct lk_zk *zk)
{
    pthread_mutex_lock(&zk->mu);
    if (zk->st.stale_since_ms == 0)
        zk->st.stale_since_ms = wall_ms();
    pthread_mutex_unlock(&zk->mu);
}

/* Delivers the table when it changed and nothing of a change is pending. */
static void
publish(struct lk_zk *zk)
{
    if (zk->inflight > 0 || zk->zh == NULL)
        return;
    if (zk->connected && !zk->behind) {
        pthread_mutex_lock(&zk->mu);
        zk->st.stale_since_ms = 0;
        pthread_mutex_unlock(&zk->mu);
    }
    if (!zk->dirty && zk->published)
        return;

    struct lk_meta_node *nodes = lk_xcalloc(zk->nkids + 1, sizeof(*nodes));
    size_t n = 0;
    for (size_t i = 0; i < zk->nkids; i++) {
        if (!zk->kids[i].have)
            continue;
        nodes[n].name = zk->kids[i].name;
        nodes[n].data = zk->kids[i].data;
        nodes[n].len = zk->kids[i].len;
        n++;
    }
    zk->dirty = 0;
    zk->published = 1;
    pthread_mutex_lock(&zk->mu);
    zk->st.nodes = n;
    zk->st.last_change_ms = wall_ms();
    zk->st.snapshots++;
    pthread_mutex_unlock(&zk->mu);
    zk->cb(nodes, n, zk->arg);
    free(nodes);
}

static void
count_error(struct lk_zk *zk)
{
    pthread_mutex_lock(&zk->mu);
    zk->st.errors++;
    pthread_mutex_unlock(&zk->mu);
}

/* A read failed while the session may still be fine (or it is going, and
 * its state event will resync): try again later, from scratch. */
static void
read_failed(struct lk_zk *zk, const char *what, const char *name, int rc)
{
    lk_log(LK_WARN, NULL, "zookeeper: %s %s%s%s failed: %s; keeping the last view", what, zk->path,
           name[0] != '\0' ? "/" : "", name, zerror(rc));
    count_error(zk);
    zk->behind = 1;
    set_stale(zk);
    if (zk->connected && !evtimer_pending(zk->retry, NULL)) {
        struct timeval tv = {1, 0};
        evtimer_add(zk->retry, &tv);
    }
}

/* The connection loss and closing codes: the session's state event, which
 * comes too, handles those. */
static int
session_rc(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONEXPIRED ||
           rc == ZCLOSING || rc == ZINVALIDSTATE || rc == ZSESSIONMOVED;
}

static void
got_children(struct lk_zk *zk, struct item *it)
{
    if (it->rc == ZNONODE) {
        /* Not there (yet): an empty table, and a watch for its creation. */
        clear_children(zk);
        struct req *r = req_new(zk, "", 0);
        issued(zk, r, zoo_aexists(zk->zh, zk->path, 1, on_exists, r), "watch");
        return;
    }
    if (it->rc != ZOK) {
        if (!session_rc(it->rc))
            read_failed(zk, "list", "", it->rc);
        return;
    }
    for (size_t i = 0; i < zk->nkids; i++)
        zk->kids[i].seen = 0;
    for (size_t i = 0; i < it->nnames; i++) {
        struct child *c = child_find(zk, it->names[i], NULL);
        int is_new = c == NULL;
        if (is_new)
            c = child_add(zk, it->names[i]);
        c->seen = 1;
        if (is_new || it->req->full)
            read_data(zk, it->names[i]);
    }
    for (size_t i = zk->nkids; i-- > 0;)
        if (!zk->kids[i].seen)
            child_remove(zk, &zk->kids[i]);
}

static void
got_data(struct lk_zk *zk, struct item *it)
{
    struct child *c = child_find(zk, it->req->name, NULL);

    if (c == NULL)
        return; /* gone from the list meanwhile */
    if (it->rc == ZNONODE) {
        child_remove(zk, c);
        return;
    }
    if (it->rc != ZOK) {
        if (!session_rc(it->rc))
            read_failed(zk, "read", c->name, it->rc);
        return;
    }
    if (c->have && c->len == it->len && memcmp(c->data, it->data, it->len) == 0)
        return;
    free(c->data);
    c->data = lk_xmalloc(it->len + 1);
    memcpy(c->data, it->data, it->len);
    c->len = it->len;
    c->have = 1;
    zk->dirty = 1;
}

static void sess_open(struct lk_zk *zk);
static void sess_close(struct lk_zk *zk);

/* ---- the probe (loop thread) -------------------------------------------- */

static void
probe_cancel(struct probe *p)
{
    if (p->fd == -1)
        return;
    event_free(p->ev);
    p->ev = NULL;
    close(p->fd);
    p->fd = -1;
}

static void
probe_stop(struct lk_zk *zk)
{
    evtimer_del(zk->tick);
    for (size_t i = 0; i < zk->nprobes; i++)
        probe_cancel(&zk->probes[i]);
}

static void
probe_add(struct lk_zk *zk, struct probe *old, size_t nold, const struct addrinfo *ai)
{
    struct probe *p;

    if (zk->nprobes == PROBE_MAX_ADDRS || ai->ai_addrlen > sizeof(p->sa))
        return;
    p = &zk->probes[zk->nprobes++];
    memset(p, 0, sizeof(*p));
    p->zk = zk;
    p->fd = -1;
    memcpy(&p->sa, ai->ai_addr, ai->ai_addrlen);
    p->salen = ai->ai_addrlen;
    /* The same address as before keeps what it last said, so that a server
     * that came back while a handle was trying is not missed. */
    for (size_t i = 0; i < nold; i++)
        if (old[i].salen == p->salen && memcmp(&old[i].sa, &p->sa, p->salen) == 0)
            p->seen = old[i].seen;
}

/* The addresses of "host:port,[v6]:port,.../chroot", resolved anew for each
 * pause (the client resolves them for each handle, on this thread too). */
static void
probe_resolve(struct lk_zk *zk)
{
    struct probe *old = zk->probes;
    size_t nold = zk->nprobes;
    char *list = lk_xstrdup(zk->servers), *save = NULL;
    char *slash = strchr(list, '/');

    if (slash != NULL)
        *slash = '\0';
    zk->probes = lk_xcalloc(PROBE_MAX_ADDRS, sizeof(*zk->probes));
    zk->nprobes = 0;
    for (char *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        char *port = strrchr(tok, ':');
        int rc;

        while (*tok == ' ')
            tok++;
        if (port == NULL || port == tok)
            continue; /* the client refuses it too */
        *port++ = '\0';
        if (tok[0] == '[' && port - tok > 2 && port[-2] == ']') {
            tok++;
            port[-2] = '\0';
        }
        if ((rc = getaddrinfo(tok, port, &hints, &res)) != 0) {
            lk_log(LK_DEBUG, NULL, "zookeeper: probe: cannot resolve %s: %s", tok,
                   gai_strerror(rc));
            continue;
        }
        for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
            probe_add(zk, old, nold, ai);
        freeaddrinfo(res);
    }
    for (size_t i = 0; i < nold; i++)
        probe_cancel(&old[i]);
    free(old);
    free(list);
}

static void
probe_name(const struct probe *p, char *buf, size_t len)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];

    if (getnameinfo((const struct sockaddr *)&p->sa, p->salen, host, sizeof(host), serv,
                    sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(buf, len, "?");
    else
        snprintf(buf, len, p->sa.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

/* An answer.  Returns 1 when it opened a handle (the probe has stopped). */
static int
probe_seen(struct probe *p, int up)
{
    struct lk_zk *zk = p->zk;
    enum probe_state was = p->seen;
    unsigned long n;
    char name[NI_MAXHOST + NI_MAXSERV + 4];

    p->seen = up ? PR_UP : PR_DOWN;
    if (!up || was != PR_DOWN)
        return 0;
    probe_name(p, name, sizeof(name));
    if ((n = lk_log_every(&zk->edge_log, 10000)) != 0)
        lk_log(LK_INFO, NULL,
               "zookeeper: %s serves again; opening a session now, within the "
               "%d ms pause (%lu such in 10 s)",
               name, zk->pause_ms, n);
    evtimer_del(zk->retry);
    zk->probed = 1;
    sess_open(zk);
    return 1;
}

/* Whether srvr's answer says the server serves.  "This ZooKeeper instance
 * is not currently serving requests" while it elects a leader or loads its
 * database; nothing at all from whatever takes connections without being a
 * ZooKeeper; "srvr is not executed because it is not in the whitelist" from
 * one that does not allow it (4lw.commands.whitelist, which has srvr by
 * default): that one answers, which is all the probe can know. */
static int
answer_serves(const struct probe *p)
{
    if (p->len == 0 || strstr(p->answer, "not currently serving") != NULL)
        return 0;
    return 1;
}

static void
on_probe(evutil_socket_t fd, short what, void *arg)
{
    struct probe *p = arg;
    int err = 0;
    socklen_t len = sizeof(err);
    ssize_t n;

    if (!p->sent) {
        /* connected, or refused */
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0 || send(fd, "srvr", 4, MSG_NOSIGNAL) != 4) {
            probe_cancel(p);
            probe_seen(p, 0);
            return;
        }
        p->sent = 1;
        event_free(p->ev);
        p->ev = event_new(p->zk->base, fd, EV_READ | EV_PERSIST, on_probe, p);
        event_add(p->ev, NULL);
        return;
    }
    n = read(fd, p->answer + p->len, sizeof(p->answer) - 1 - p->len);
    if (n == -1 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0) {
        p->len += (size_t)n;
        p->answer[p->len] = '\0';
        if (strstr(p->answer, "Mode: ") == NULL && p->len < sizeof(p->answer) - 1)
            return; /* the server closes once it has said it all */
    }
    probe_cancel(p);
    probe_seen(p, answer_serves(p));
}

/*
 * The pause is what keeps the client from storming an ensemble that is down,
 * but it also keeps a lookout away from one that is back: after a long
 * outage it has grown to BACKOFF_MAX_MS.  A connect to a port where nothing
 * listens costs the server's kernel a reset and the server nothing, and
 * "srvr" to one that listens costs it a few lines of text (it is the word
 * ZooKeeper's own scripts use), so during the pause each address gets one
 * every PROBE_MS, and the first that says it serves after having been down
 * (refused, silent, frozen, or not serving) opens the next handle at once.
 * Only that change counts, not "serves": a server that answers while our
 * handles fail for another reason keeps answering, and there the pause
 * keeps ruling as before.  The rate is bounded whatever the servers do: one
 * connect per address per round, no round while a handle is open, and a new
 * handle per change only.
 */
static void
probe_round(evutil_socket_t fd_unused, short what, void *arg)
{
    struct lk_zk *zk = arg;
    struct timeval tv = {0, PROBE_MS * 1000};

    for (size_t i = 0; i < zk->nprobes; i++) {
        struct probe *p = &zk->probes[i];
        int fd, rc;

        if (p->fd != -1) {
            /* no answer within a round: dropped on the way, or a frozen host */
            probe_cancel(p);
            probe_seen(p, 0);
        }
        p->sent = 0;
        p->len = 0;
        p->answer[0] = '\0';
        fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd == -1)
            continue;
        pthread_mutex_lock(&zk->mu);
        zk->st.probes++;
        pthread_mutex_unlock(&zk->mu);
        /* connected (at once, or later): on_probe says srvr when it can */
        rc = connect(fd, (const struct sockaddr *)&p->sa, p->salen);
        if (rc == 0 || errno == EINPROGRESS) {
            p->fd = fd;
            p->ev = event_new(zk->base, fd, EV_WRITE, on_probe, p);
            event_add(p->ev, NULL);
            continue;
        }
        close(fd);
        probe_seen(p, 0);
    }
    evtimer_add(zk->tick, &tv);
}

/* The pause before the next handle, probing meanwhile. */
static void
reopen_later(struct lk_zk *zk)
{
    struct timeval tv = {zk->backoff_ms / 1000, (zk->backoff_ms % 1000) * 1000};
    struct timeval now = {0, 0};

    evtimer_add(zk->retry, &tv);
    zk->pause_ms = zk->backoff_ms;
    probe_resolve(zk);
    lk_log(LK_DEBUG, NULL, "zookeeper: next session in %d ms; probing %zu address%s every %d ms",
           zk->backoff_ms, zk->nprobes, zk->nprobes == 1 ? "" : "es", PROBE_MS);
    if (zk->nprobes > 0)
        evtimer_add(zk->tick, &now); /* not from here: the caller may be sess_open */
    zk->backoff_ms = zk->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : zk->backoff_ms * 2;
}

/*
 * The client retries on its own, without backoff: every 1/60th of the session
 * timeout while connections are refused, and at once when a server takes
 * the connection and closes it (as a ZooKeeper does while it elects a
 * leader or loads its database), some fifty times a second.  Against an
 * ensemble that is down for long, and with many lookouts, that is a storm.
 * So a handle gets a window to connect: half the session timeout once it
 * has lost its connection (enough to ride out a server restart and keep the
 * session), RETRY_WINDOW_MS when the last one never connected.  When the
 * window passes, the handle is closed and the next one opened after a pause
 * that doubles up to BACKOFF_MAX_MS, or as soon as the probe finds a server
 * back (probe_round).  Giving up a session costs nothing we hold: the next
 * one reads everything again.
 */
static void
arm_giveup(struct lk_zk *zk, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    if (!evtimer_pending(zk->giveup, NULL))
        evtimer_add(zk->giveup, &tv);
}

static void
on_giveup(evutil_socket_t fd, short what, void *arg)
{
    struct lk_zk *zk = arg;

    if (zk->zh == NULL || zk->connected)
        return;
    if (!zk->backing_off)
        lk_log(LK_WARN, NULL,
               "zookeeper: no server of %s answered; retrying with backoff (%d ms, doubling "
               "to %d ms), serving the last view",
               zk->servers, zk->backoff_ms, BACKOFF_MAX_MS);
    sess_close(zk);
    zk->backing_off = 1;
    reopen_later(zk);
}

static void
got_session_event(struct lk_zk *zk, struct item *it)
{
    if (it->state == ZOO_CONNECTED_STATE || it->state == ZOO_READONLY_STATE) {
        int fresh = it->session_id != zk->id;
        zk->connected = 1;
        zk->backoff_ms = BACKOFF_MIN_MS;
        zk->backing_off = 0;
        evtimer_del(zk->giveup);
        for (size_t i = 0; i < zk->nprobes; i++)
            zk->probes[i].seen = PR_UNKNOWN;
        zk->id = it->session_id;
        memcpy(zk->passwd, it->passwd, sizeof(zk->passwd));
        pthread_mutex_lock(&zk->mu);
        zk->st.connected = 1;
        zk->st.session_id = zk->id;
        if (fresh)
            zk->st.sessions++;
        pthread_mutex_unlock(&zk->mu);
        lk_log(LK_INFO, NULL, "zookeeper: %s session 0x%" PRIx64 " on %s, watching %s",
               fresh ? "new" : "resumed", (uint64_t)zk->id, zk->servers, zk->path);
        /* Whatever happened while we were away: read it all again (which
         * re-arms every watch too). */
        zk->behind = 0;
        evtimer_del(zk->retry);
        read_children(zk, 1);
    } else if (it->state == ZOO_CONNECTING_STATE || it->state == ZOO_ASSOCIATING_STATE) {
        if (zk->connected)
            lk_log(LK_WARN, NULL,
                   "zookeeper: lost %s, reconnecting; serving the last view (%zu nodes)",
                   zk->servers, zk->nkids);
        zk->connected = 0;
        pthread_mutex_lock(&zk->mu);
        zk->st.connected = 0;
        pthread_mutex_unlock(&zk->mu);
        set_stale(zk);
        arm_giveup(zk, zk->timeout_ms / 2);
    } else if (it->state == ZOO_EXPIRED_SESSION_STATE || it->state == ZOO_AUTH_FAILED_STATE) {
        int expired = it->state == ZOO_EXPIRED_SESSION_STATE;
        lk_log(LK_WARN, NULL,
               "zookeeper: session 0x%" PRIx64 " %s; opening a new one and reading %s again",
               (uint64_t)zk->id, expired ? "expired" : "failed authentication", zk->path);
        pthread_mutex_lock(&zk->mu);
        zk->st.expiries += expired;
        pthread_mutex_unlock(&zk->mu);
        zk->connected = 0;
        zk->renew = expired ? 1 : 2;
    }
}

static void
got_watch(struct lk_zk *zk, struct item *it)
{
    if (it->type == ZOO_SESSION_EVENT) {
        got_session_event(zk, it);
        return;
    }
    if (it->path == NULL)
        return;
    if (strcmp(it->path, zk->path) == 0) {
        /* the children changed, or the node itself came or went */
        if (it->type == ZOO_CHILD_EVENT || it->type == ZOO_CREATED_EVENT ||
            it->type == ZOO_DELETED_EVENT)
            read_children(zk, 0);
        return;
    }
    /* A child's data changed, or it was deleted.  The parent's child event
     * covers the deletion, but the child may be back under the same name
     * (a broker restarting) before we list them, and then its new data and
     * a new watch come only from reading it: ZNONODE otherwise. */
    size_t plen = strcmp(zk->path, "/") == 0 ? 0 : strlen(zk->path);
    if ((it->type == ZOO_CHANGED_EVENT || it->type == ZOO_DELETED_EVENT) &&
        strncmp(it->path, zk->path, plen) == 0 && it->path[plen] == '/' &&
        child_find(zk, it->path + plen + 1, NULL) != NULL)
        read_data(zk, it->path + plen + 1);
}

static void
item_free(struct lk_zk *zk, struct item *it)
{
    if (it->req != NULL)
        req_free(zk, it->req);
    free(it);
}

/* Takes the queue and applies what belongs to the current handle. */
static void
drain(struct lk_zk *zk)
{
    pthread_mutex_lock(&zk->mu);
    struct item *it = zk->q_head;
    zk->q_head = NULL;
    zk->q_tail = &zk->q_head;
    pthread_mutex_unlock(&zk->mu);

    while (it != NULL) {
        struct item *next = it->next;
        if (it->epoch == zk->epoch && zk->zh != NULL && zk->renew == 0) {
            if (it->kind != IT_WATCH)
                zk->inflight--;
            switch (it->kind) {
            case IT_WATCH:
                got_watch(zk, it);
                break;
            case IT_CHILDREN:
                got_children(zk, it);
                break;
            case IT_DATA:
                got_data(zk, it);
                break;
            case IT_EXISTS:
                /* created between our list and our watch: list it now */
                if (it->rc == ZOK)
                    read_children(zk, 0);
                else if (it->rc != ZNONODE && !session_rc(it->rc))
                    read_failed(zk, "watch", "", it->rc);
                break;
            }
        }
        item_free(zk, it);
        it = next;
    }
}

static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct lk_zk *zk = arg;
    char buf[64];

    /* Cleared before the queue is taken: an item queued after this point
     * writes a new byte, so none waits for an unrelated wake-up. */
    while (read(zk->wake_fd[0], buf, sizeof(buf)) > 0)
        ;
    pthread_mutex_lock(&zk->mu);
    zk->woken = 0;
    pthread_mutex_unlock(&zk->mu);
    drain(zk);
    if (zk->renew != 0) {
        /* Not from within drain: closing drains the queue itself. */
        int expired = zk->renew == 1;
        zk->renew = 0;
        sess_close(zk);
        if (expired)
            sess_open(zk);
        else
            reopen_later(zk);
    }
    publish(zk);
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct lk_zk *zk = arg;

    if (zk->zh == NULL)
        sess_open(zk);
    else if (zk->connected) {
        zk->behind = 0;
        read_children(zk, 1);
    }
}

/* ---- sessions (loop thread) --------------------------------------------- */

static void
sess_open(struct lk_zk *zk)
{
    int probed = zk->probed;

    zk->probed = 0;
    probe_stop(zk);
    zk->epoch++;
    zk->inflight = 0;
    zk->id = 0;
    zk->watch_ctx = lk_xcalloc(1, sizeof(*zk->watch_ctx) + 1);
    zk->watch_ctx->zk = zk;
    zk->watch_ctx->epoch = zk->epoch;
    zk->zh =
        zookeeper_init2(zk->servers, on_watch, zk->timeout_ms, NULL, zk->watch_ctx, 0, on_zk_log);
    if (zk->zh == NULL) {
        lk_log(LK_WARN, NULL, "zookeeper: cannot create a client for %s: %s; retrying in %d ms",
               zk->servers, strerror(errno), zk->backoff_ms);
        free(zk->watch_ctx);
        zk->watch_ctx = NULL;
        reopen_later(zk);
        return;
    }
    pthread_mutex_lock(&zk->mu);
    zk->st.attempts++;
    pthread_mutex_unlock(&zk->mu);
    /* After a probe's answer, the whole session timeout: the client's own
     * retries ride out a server that took the connection before it could
     * serve (it gives up on a silent one after two thirds of it). */
    arm_giveup(zk, probed            ? zk->timeout_ms
                   : zk->backing_off ? RETRY_WINDOW_MS
                                     : zk->timeout_ms / 2);
}

/* Closes the handle: zookeeper_close joins the client's threads and runs the
 * completions still pending (with ZCLOSING) on this thread, so once it has
 * returned the queue holds all there will ever be of this handle. */
static void
sess_close(struct lk_zk *zk)
{
    zhandle_t *zh = zk->zh;

    evtimer_del(zk->giveup);
    zk->zh = NULL;
    zk->epoch++; /* everything queued from now on is stale */
    zk->connected = 0;
    zk->inflight = 0;
    zk->id = 0;
    if (zh != NULL)
        zookeeper_close(zh);
    drain(zk);
    while (zk->reqs != NULL)
        req_free(zk, zk->reqs);
    free(zk->watch_ctx);
    zk->watch_ctx = NULL;
    pthread_mutex_lock(&zk->mu);
    zk->st.connected = 0;
    zk->st.session_id = 0;
    pthread_mutex_unlock(&zk->mu);
    set_stale(zk);
}

/* ---- the interface ------------------------------------------------------ */

struct lk_zk *
lk_zk_start(struct event_base *base, const char *servers, const char *path,
            const struct lk_meta_opts *opts, lk_meta_snapshot_cb cb, void *arg, char *err,
            size_t errlen)
{
    if (servers == NULL || servers[0] == '\0' || servers[0] == '/') {
        snprintf(err, errlen, "no ZooKeeper servers given");
        return NULL;
    }
    if (path == NULL || path[0] != '/' || strlen(path) > 512) {
        snprintf(err, errlen, "the path to watch must be absolute (and at most 512 bytes)");
        return NULL;
    }
    struct lk_zk *zk = lk_xcalloc(1, sizeof(*zk));
    zk->base = base;
    zk->servers = lk_xstrdup(servers);
    zk->path = lk_xstrdup(path);
    for (size_t l = strlen(zk->path); l > 1 && zk->path[l - 1] == '/'; l--)
        zk->path[l - 1] = '\0';
    zk->timeout_ms = opts != NULL && opts->session_timeout_ms > 0 ? opts->session_timeout_ms
                                                                  : LK_ZK_SESSION_TIMEOUT_MS;
    zk->cb = cb;
    zk->arg = arg;
    zk->backoff_ms = BACKOFF_MIN_MS;
    zk->q_tail = &zk->q_head;
    if (pipe2(zk->wake_fd, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "cannot create a pipe: %s", strerror(errno));
        free(zk->servers);
        free(zk->path);
        free(zk);
        return NULL;
    }
    pthread_mutex_init(&zk->mu, NULL);
    zk->wake = event_new(base, zk->wake_fd[0], EV_READ | EV_PERSIST, on_wake, zk);
    event_add(zk->wake, NULL);
    zk->retry = evtimer_new(base, on_retry, zk);
    zk->giveup = evtimer_new(base, on_giveup, zk);
    zk->tick = evtimer_new(base, probe_round, zk);
    zk->st.stale_since_ms = wall_ms(); /* until the first full read */
    /* The client's library-wide level: its errors and warnings reach
     * on_zk_log, which keeps them at debug. */
    zoo_set_debug_level(lk_log_level >= LK_DEBUG ? ZOO_LOG_LEVEL_INFO : ZOO_LOG_LEVEL_WARN);
    sess_open(zk);
    return zk;
}

void
lk_zk_stop(struct lk_zk *zk)
{
    if (zk == NULL)
        return;
    sess_close(zk);
    probe_stop(zk);
    free(zk->probes);
    event_free(zk->tick);
    event_free(zk->wake);
    close(zk->wake_fd[0]);
    close(zk->wake_fd[1]);
    event_free(zk->retry);
    event_free(zk->giveup);
    clear_children(zk);
    free(zk->kids);
    pthread_mutex_destroy(&zk->mu);
    free(zk->servers);
    free(zk->path);
    free(zk);
}

void
lk_zk_state(struct lk_zk *zk, struct lk_meta_state *st)
{
    pthread_mutex_lock(&zk->mu);
    *st = zk->st;
    pthread_mutex_unlock(&zk->mu);
}

int
lk_zk_client_id(struct lk_zk *zk, int64_t *id, char passwd[16])
{
    if (zk->zh == NULL || zk->id == 0)
        return -1;
    *id = zk->id;
    memcpy(passwd, zk->passwd, 16);
    return 0;
}

static void *
meta_start(struct event_base *base, const char *target, const char *path,
           const struct lk_meta_opts *opts, lk_meta_snapshot_cb cb, void *arg, char *err,
           size_t errlen)
{
    return lk_zk_start(base, target, path, opts, cb, arg, err, errlen);
}

static void
meta_stop(void *src)
{
    lk_zk_stop(src);
}

static void
meta_state(void *src, struct lk_meta_state *st)
{
    lk_zk_state(src, st);
}

const struct lk_meta_ops lk_meta_zk = {"zk", meta_start, meta_stop, meta_state};
