/*
 * A live view of one directory of a cluster's metadata store: the children
 * of a path, each with its bytes, kept up to date by watches and handed to
 * the owner as whole snapshots on its own event loop.  Brokers register
 * there (Pulsar under /loadbalance/brokers, Kafka under /brokers/ids), so
 * the snapshot is the raw material of a listener map; parsing it is the
 * caller's business.  ZooKeeper (lk_zk.c) is the first store; etcd or Oxia
 * would be another file with the same start/stop/state calls and an ops
 * table, picked by the scheme of Pulsar's metadataStoreUrl ("zk:",
 * "etcd:", "oxia:").
 */
#ifndef LK_META_H
#define LK_META_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

/* One child: its name (the last path element) and its bytes (len 0 for a
 * node without data). */
struct lk_meta_node {
    const char *name;
    const uint8_t *data;
    size_t len;
};

/*
 * Called on the event loop thread of the base given to start, with every
 * child whose data has been read, sorted by name (strcmp).  The array and
 * everything it points to are valid only during the call: copy what you
 * keep.  A snapshot comes once the first full read is done (possibly with
 * n == 0: the path is empty or does not exist yet) and then after each
 * change, never while reads of a change are still outstanding, so that the
 * owner never sees half of a re-read.  It must not call stop.
 */
typedef void (*lk_meta_snapshot_cb)(const struct lk_meta_node *nodes, size_t n, void *arg);

/* What /healthz and /metrics show of a source.  Times are wall-clock
 * milliseconds since the epoch, 0 for "never". */
struct lk_meta_state {
    int connected;          /* the session is up and usable */
    int64_t stale_since_ms; /* since when the last snapshot may be behind the store
                             * (connection lost, a read failed, not synced yet);
                             * 0 while in sync */
    int64_t last_change_ms; /* when the last snapshot was delivered */
    size_t nodes;           /* children in the last snapshot */
    uint64_t snapshots;     /* delivered so far */
    uint64_t sessions;      /* sessions established: the first, then one per expiry
                             * or per session given up after an outage */
    uint64_t attempts;      /* sessions tried (handles opened), backoff included */
    uint64_t probes;        /* TCP connects made to find a server back during a pause */
    uint64_t expiries;      /* sessions the store expired */
    uint64_t errors;        /* failed reads (each logged) */
    int64_t session_id;     /* the store's id of the current session, 0 = none */
};

struct lk_meta_opts {
    int session_timeout_ms; /* asked of the store; 0 = the source's default */
};

/* A source, selected by the scheme of its URL. */
struct lk_meta_ops {
    const char *scheme;
    /* Starts watching PATH on the store at TARGET (for ZooKeeper
     * "host:port,host:port[/chroot]"); returns NULL with a message in err
     * when the arguments are unusable.  An unreachable store is no error:
     * the source retries and reports it in its state. */
    void *(*start)(struct event_base *base, const char *target, const char *path,
                   const struct lk_meta_opts *opts, lk_meta_snapshot_cb cb, void *arg, char *err,
                   size_t errlen);
    /* Closes the session and frees everything; no callback after it returns.
     * Call it on the base's thread, not from the snapshot callback. */
    void (*stop)(void *src);
    /* Copies the state; callable from any thread. */
    void (*state)(void *src, struct lk_meta_state *st);
};

#endif
