/*
 * What one worker holds: a thread with its own event_base, listening
 * sockets (SO_REUSEPORT), flush queue, client connections and idle
 * upstream pools.  The struct only: connections (lk_conn.c), their I/O
 * (lk_io.c) and upstreams (lk_upstream.c) use its fields; the workers'
 * life, reloads and drain are lk_workers.c.
 */
#ifndef LK_WORKER_H
#define LK_WORKER_H

#include <pthread.h>
#include <stddef.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "lk_hold.h"

struct lk_bind;
struct lk_conn;
struct lk_idle_list;
struct lk_io;
struct lk_proto_ops;
struct lk_runtime;
struct lk_stat_obj;
struct lk_worker;

/* A worker's idle upstream connections, one list per key, in hash chains.
 * Only the worker's current generation's connections are in it. */
struct lk_idle_pool {
    struct lk_idle_list **slots;
    size_t nslots; /* a power of two */
};

/* The lists and what they hold: lk_upstream.h. */

/* One bound socket of one worker. */
struct lk_listen {
    struct lk_worker *w;
    const struct lk_bind *b; /* the current generation's (a reload repoints it) */
    struct event *resume;    /* after an accept error: accepting again */
    struct lk_stat_obj *st;  /* the bound address's metrics series */
};

/* One bound for a bind added at run time (lk_dyn_binds). */
struct lk_dyn_listen {
    struct lk_listen ls;
    struct evconnlistener *l; /* NULL: the bind failed */
    struct lk_dyn_listen *next;
};

struct lk_worker {
    int id;
    struct event_base *base;
    struct evdns_base *dns;
    struct lk_runtime *rt;
    struct evconnlistener **listeners;
    struct lk_listen *listen; /* what each listener's callbacks get */
    size_t nlisteners;
    struct lk_dyn_listen *dyn_listen; /* binds added at run time, newest first */
    size_t ndyn_listen;               /* how many of lk_dyn_binds' it has taken */
    struct lk_idle_pool idle; /* idle upstream connections, by what makes reuse safe */
    struct lk_io *flushq;   /* outputs written to in this loop iteration */
    char *tls_out;          /* LK_TLS_RECORD bytes: a TLS record's worth of output, gathered */
    struct event *flush_ev; /* writes them out */
#ifdef LK_IO_URING
    struct lk_uring *uring; /* sends them all in one system call (NULL: one writev each) */
    struct lk_io *flushb;   /* the round being sent; what it queues waits in flushq */
    struct lk_io **readq;   /* sockets found readable in this iteration */
    size_t nreadq, readq_cap;
    char *tls_rx;           /* where the ring receives TLS clients' records (lk_io.c) */
    struct event *read_ev;  /* reads them all in one system call */
#endif
    struct event *stop_ev; /* reads stop_pipe[0]: another thread asks it to stop */
    struct lk_conn *free_conns; /* lk_conn slab: free ones */
    void **conn_blocks;          /* and the blocks they came in */
    size_t nconn_blocks;
    int stop_pipe[2];
    int draining;           /* stopping: no listeners, connections finishing */
    int drained;            /* ... and finished (counted off workers_draining) */
    struct event *drain_ev; /* draining: ends the loop when all are closed, or at the deadline */
    pthread_t thread;
    unsigned nconns;
    struct lk_conn *conns; /* open client connections, for shutdown */
    struct lk_hold hold;   /* what it holds to rewrite, against max_held_bytes */
    /* The protocol module of a bind's proto (lk_workers.c knows them), or
     * NULL: per accepted or woken connection, never per read or write. */
    const struct lk_proto_ops *(*proto_for)(unsigned proto);
    /* What a client connection's io does when its protocol is idle and
     * nothing is buffered (parks it: 1), and when a parked one's read
     * event fires (0: ready to read); lk_conn.c's, reached from lk_io.c
     * on those paths only. */
    int (*park)(struct lk_io *io);
    int (*unpark)(struct lk_io *io, short what);
    /* Gives a client connection just accepted its max_connection_age
     * deadline (lk_age.c's lk_age_start), when that is on. */
    void (*age_start)(struct lk_conn *c);
};

#endif
