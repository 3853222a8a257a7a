/*
 * The ZooKeeper source of lk_meta.h: watches the children of one path and
 * the data of each child with the official C client (libzookeeper_mt), and
 * delivers snapshots on an event loop.  The client runs its own IO and
 * completion threads; every watch event and every completion is copied into
 * a mutex-protected queue and the loop is woken by a byte down a pipe.  No
 * libevent call is made off the loop thread, so the base needs no locks
 * (no evthread_use_pthreads()): the workers' lock-free bases serve.
 * Everything else (reads, session changes, snapshots) happens on the loop
 * thread.
 */
#ifndef LK_ZK_H
#define LK_ZK_H

#include "lk_meta.h"

struct lk_zk;

/* The session timeout asked for when lk_meta_opts leaves it 0.  The client
 * gives up on a silent connection after two thirds of it (then tries the
 * next server), and that is how long the view can lag behind a ZooKeeper
 * that dies without a reset, or a 3.8.0 server that takes a connection while
 * loading its database and never answers it.  Brokers use 30 s because an
 * expiry drops their registration; lookout holds no ephemeral node, so for
 * it an expiry costs only a re-read, and a shorter timeout is cheap. */
#define LK_ZK_SESSION_TIMEOUT_MS 10000

/*
 * Connects to SERVERS ("host:port,host:port", optionally followed by a
 * chroot "/path", the form of metadataStoreUrl after "zk:" and of
 * zookeeper.connect) and watches PATH (absolute, within the chroot).
 * Returns NULL with a message in err for unusable arguments; otherwise it
 * keeps trying until it gets a session, whether or not ZooKeeper is up.
 */
struct lk_zk *lk_zk_start(struct event_base *base, const char *servers, const char *path,
                          const struct lk_meta_opts *opts, lk_meta_snapshot_cb cb, void *arg,
                          char *err, size_t errlen);
/* Closes the session (zookeeper_close: joins the client's threads) and frees
 * everything.  On the loop thread, never from the snapshot callback. */
void lk_zk_stop(struct lk_zk *zk);
/* Any thread. */
void lk_zk_state(struct lk_zk *zk, struct lk_meta_state *st);
/* The current session's id and password, as ZooKeeper gave them when it
 * connected; -1 without a session.  For tests that expire the session from
 * another client (the password must never be logged).  Loop thread. */
int lk_zk_client_id(struct lk_zk *zk, int64_t *id, char passwd[16]);

extern const struct lk_meta_ops lk_meta_zk;

#endif
