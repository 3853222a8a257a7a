/*
 * A client connection paired with one connection to one broker: what the
 * binary-protocol modules (Kafka, Pulsar) share.  A module embeds struct
 * lk_pair first in its own state, fills ops, cluster and broker (or
 * any_broker), and calls lk_pair_start, then lk_pair_connect when it knows
 * the broker.  The pair owns the callbacks on both bufferevents and calls
 * the module back: requests when the client has sent something or the
 * broker can take more, responses the other way round.  Both sides close
 * together, once, from the event loop.  It also holds what the modules do
 * alike: the exchange each held frame from the broker goes through the
 * filters in, backpressure both ways, and when a draining pair may close.
 */
#ifndef LK_PAIR_H
#define LK_PAIR_H

#include <sys/time.h>

#include "lk_conn.h"
#include "lk_hold.h"
#include "lk_stats.h"
#include "lk_upstream.h"
#include "lk_xchg.h"

/* Over this much waiting in one side's output, the other side is not read. */
#define LK_PAIR_HIGH (256 * 1024)

struct lk_pair;

struct lk_pair_ops {
    enum lk_scheme family; /* of the broker's internal address: LK_SCHEME_KAFKA, _PULSAR */
    void (*requests)(struct lk_pair *p);
    void (*responses)(struct lk_pair *p);
    /* The client closed or reset its connection; NULL: the pair closes
     * quietly. */
    void (*client_gone)(struct lk_pair *p);
};

struct lk_pair {
    const struct lk_pair_ops *ops;
    struct lk_conn *c;
    const struct lk_cluster *cluster;
    const struct lk_broker *broker;
    struct lk_upstream *up;
    struct timeval idle; /* both sides' read timeout */
    struct event first;  /* timeout.first_frame: armed until the broker is chosen */
    long long start_us;  /* when it began, for its closing line */
    unsigned connects;   /* brokers tried */
    unsigned connected : 1;
    unsigned any_broker : 1; /* a service address: another broker will do */
    unsigned dead : 1;       /* closing */
    unsigned draining : 1;   /* lookout is stopping (lk_proto_ops.drain) */
    unsigned first_armed : 1;
    unsigned paused : 1;      /* the broker is not read: the worker's max_held_bytes */
    struct lk_hold_waiter hw; /* its place in that budget (lk_hold.h); resumed
                               * by running ops->responses */
    unsigned cpaused : 1;     /* the client is not read: the same budget */
    struct lk_hold_waiter cw; /* the client's place in it, for what waits of a
                               * frame from the client (lk_pair_client_wait);
                               * resumed by running ops->requests */
};

/* Takes over c's callbacks, with idle as the read timeout, and frees the
 * broker connection with c's pool.  Until lk_pair_connect (the module has
 * what decides the broker: Kafka a request's fixed prefix, Pulsar the
 * whole CONNECT), the client has timeout.first_frame from now, however
 * it trickles its bytes (a read timeout would restart at each); then
 * idle as before. */
void lk_pair_start(struct lk_pair *p, const struct lk_pair_ops *ops, struct lk_conn *c,
                   struct timeval idle);
/* n bytes of a frame from the broker are held whole (counted against the
 * worker's budget): 0 while the broker may be read on, 1 when it may not
 * (paused, until the budget has room: ops->responses runs again). */
int lk_pair_hold_wait(struct lk_pair *p, size_t n);
/* What p holds, off the worker's budget; those waiting may go on. */
void lk_pair_hold_release(struct lk_pair *p);
/* n bytes of a frame from the client wait in its input, for the rest of
 * the frame (what the module must have whole before anything moves):
 * counted against the worker's budget, as held frames from the broker
 * are.  0 while the client may be read on, 1 when it may not (cpaused,
 * until the budget has room: ops->requests runs again). */
int lk_pair_client_wait(struct lk_pair *p, size_t n);
/* Nothing of a frame from the client waits any more (it has moved, or the
 * pair closes): what was counted for it leaves the budget (nothing to do
 * when nothing was). */
void lk_pair_client_release(struct lk_pair *p);
/* Connects to p->broker (another of the cluster's when any_broker and it
 * cannot be reached); once connected, ops->requests runs. */
void lk_pair_connect(struct lk_pair *p);
/* Closes both sides from the loop, logging why (NULL: nothing), once. */
void lk_pair_close(struct lk_pair *p, const char *why);
/* Draining, and nothing under way: closes once the client has what was
 * sent to it (the broker's side goes at once). */
void lk_pair_close_drained(struct lk_pair *p);
/* The connection's closing line in the access log (no exchange): frames
 * and bytes each way, and its lifetime. */
void lk_pair_log_summary(const struct lk_pair *p, enum lk_stat_proto proto, uint64_t bytes_in,
                         uint64_t bytes_out, uint64_t frames_in, uint64_t frames_out);

/* Started on a bind address with no route for the client's SNI name (or
 * for none): closes, saying so (proto: "Kafka", "Pulsar"). */
void lk_pair_no_route(struct lk_pair *p, const char *proto);
/* The pair's cluster and broker from its route: the broker it names, or
 * for a service address any healthy one of the cluster's (any_broker;
 * NULL when there is none). */
void lk_pair_route(struct lk_pair *p, const struct lk_vhost *vh);

/* A read timeout of ms milliseconds (timeout.idle). */
struct timeval lk_pair_tv(unsigned ms);

/* Backpressure.  A broker that reads slowly stops the client: the client
 * is read unless the broker's output holds over LK_PAIR_HIGH (but while
 * part of a frame from the client waits, counted, it is read until the
 * frame is in: nothing moves to the broker meanwhile, and the budget's
 * owner must not wait on the broker), or stop, or the budget says no
 * (cpaused). */
void lk_pair_pace_client(struct lk_pair *p, int stop);
/* A client that reads slowly stops the broker, but never while the pair
 * holds part of a frame (holding): that counts against the worker's
 * budget, which others may be waiting for, and the budget's owner must
 * never wait on a client (lk_hold.h); it is bounded by max_frame_bytes.
 * Nor is the broker read while the budget has no room (paused). */
void lk_pair_pace_broker(struct lk_pair *p, int holding);
/* Draining: whether the pair may close now, with busy saying whether the
 * module has something under way (which counts only once connected). */
int lk_pair_drain_due(const struct lk_pair *p, int busy);

/* The exchange of one held frame from the broker, in x: of the pair's
 * cluster and broker, rewriting into listener (NULL: the cluster's lookup
 * listener), its filters attached.  lk_pair_xchg_end takes its counts into
 * r and releases it. */
void lk_pair_xchg_begin(struct lk_pair *p, struct lk_xchg *x, unsigned proto, const char *listener);
void lk_pair_xchg_end(struct lk_xchg *x, struct lk_xrec *r);

#endif
