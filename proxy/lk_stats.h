/*
 * Counters for /metrics and the exchange record that feeds them and the
 * access log.  Series are keyed by names (a frontend's bound address text,
 * a cluster's name, a broker's "cluster/name"), never by pointers into a
 * config, so that they outlive a reload: a new runtime finds the same
 * series by name (lk_stats_runtime) and counting carries on.  Series are
 * created when a runtime or a listener is set up, never per request.
 *
 * Hot path: each series holds one copy of its values per worker (a shard,
 * 64-byte aligned, so that workers never share a cache line), bumped with
 * relaxed atomics (uncontended: each worker mostly writes its own shard);
 * no lock, no lookup, no formatting.  A scrape sums the shards and builds
 * the text (lk_stats_write).  Errors and TLS failures, which are rare, may
 * find their series by name under the registry's lock.
 */
#ifndef LK_STATS_H
#define LK_STATS_H

#include <stdint.h>
#include <event2/buffer.h>

#include "lk_conf.h"
#include "lk_str.h"

struct lk_conn;

/* Histogram buckets (upper bounds in microseconds), +Inf last. */
#define LK_HIST_BOUNDS 13
#define LK_HIST_BUCKETS (LK_HIST_BOUNDS + 1)
/* Label slots: Kafka api keys 0..127 (128: any other), Pulsar command
 * types 0..127 (likewise), filters by registry index. */
#define LK_STAT_KEYS 129
#define LK_STAT_FILTERS 16

/* The filters as labels name them, by registry index: filled once, before
 * any exchange ends or /metrics is scraped, by lk_xrec_init (which knows
 * the registry); a NULL name ends it. */
struct lk_stat_filter {
    const char *name;
    unsigned protos; /* LK_PROTO_*: the clusters it can count for */
};
extern struct lk_stat_filter lk_stat_filters[LK_STAT_FILTERS + 1];

enum lk_stat_proto { LK_SP_HTTP = 0, LK_SP_KAFKA, LK_SP_PULSAR, LK_SP__COUNT };
enum lk_upstream_err_kind {
    LK_UPERR_CONNECT = 0,
    LK_UPERR_TIMEOUT,
    LK_UPERR_RESET,
    LK_UPERR_TLS,
    LK_UPERR_OUTSIDE, /* every address outside internal_networks: not dialled (lk_dial.h) */
    LK_UPERR__COUNT
};

struct lk_hist {
    uint64_t bucket[LK_HIST_BUCKETS]; /* not cumulative: cumulated when scraped */
    uint64_t sum_us;
    uint64_t count;
};

/* One shard's values of each kind of series. */
struct lk_fe_vals {
    uint64_t open; /* incremented at accept, decremented at close: summed, it is the gauge */
    uint64_t total;
    uint64_t tls_failures;
    uint64_t refused[4];          /* max_connections, max_connections_per_client, PROXY header
                                     from an untrusted address, bad or missing from a trusted one */
    uint64_t client_cert_refused; /* handshakes failed on the client's certificate */
    uint64_t first_frame_timeouts; /* binary connections closed by timeout.first_frame */
    uint64_t aged, aged_forced; /* past max_connection_age: ended, and closed at its grace */
};

struct lk_cl_vals {
    uint64_t http[6]; /* status class 1xx..5xx at [1..5]; [0] anything else */
    uint64_t kafka[LK_STAT_KEYS];
    uint64_t pulsar[LK_STAT_KEYS];
    uint64_t rewrites[LK_STAT_FILTERS];
    uint64_t leaks, unmapped;
    uint64_t listener_refused; /* names a client may not choose (lk_client_listener) */
    uint64_t limited;          /* HTTP requests answered 429 (limit.requests) */
    struct lk_hist dur[LK_SP__COUNT], up[LK_SP__COUNT];
};

struct lk_br_vals {
    uint64_t err[LK_UPERR__COUNT];
};

/* A series object: one frontend, cluster or broker (see lk_stats.c). */
struct lk_stat_obj;

/* The calling thread's shard: worker id modulo the shard count.  Set by
 * each worker thread when it starts (0 elsewhere). */
extern __thread unsigned lk_stat_shard;
void lk_stats_set_shard(int worker_id);

/* The shard count (at most the workers at start-up; fixed from the first
 * call on: later calls do nothing). */
void lk_stats_init(int nshards);
/* Frees every series (at exit). */
void lk_stats_free(void);

/* The values of o in the calling thread's shard. */
void *lk_stat_vals(struct lk_stat_obj *o);
static inline void
lk_stat_add(uint64_t *v, uint64_t n)
{
    __atomic_fetch_add(v, n, __ATOMIC_RELAXED);
}
void lk_hist_add(struct lk_hist *h, long long us);

/* The frontend series of bound address text (created if new). */
struct lk_stat_obj *lk_stats_frontend(const char *text, unsigned proto);

/* The series one runtime uses, by cluster and broker index. */
struct lk_rt_stats {
    struct lk_stat_obj **cluster; /* by cluster index */
    struct lk_stat_obj **broker;  /* by broker index (the map's; learned ones go by name) */
    struct lk_stat_obj *none;     /* exchanges that reached no cluster */
    struct lk_broker **brokers;   /* the config's, to tell a map broker from a learned one */
    size_t nbrokers;
};
struct lk_rt_stats *lk_stats_runtime(const struct lk_conf *conf);
void lk_stats_runtime_free(struct lk_rt_stats *s, const struct lk_conf *conf);

/* A listener name that a client may not choose, for cluster cl of the
 * runtime whose series s are (lookout_listener_refused_total). */
void lk_stats_listener_refused(struct lk_rt_stats *s, const struct lk_cluster *cl);

/* An HTTP request of cluster cl answered 429 by limit.requests
 * (lookout_http_requests_limited_total). */
void lk_stats_limited(struct lk_rt_stats *s, const struct lk_cluster *cl);

/* An upstream error of broker b, under the runtime whose series s are (a
 * learned broker's series is found by name: rare). */
void lk_stats_broker_error(struct lk_rt_stats *s, const struct lk_broker *b,
                           enum lk_upstream_err_kind kind);

/*
 * The exchange record: one per exchange of any protocol, built by the
 * protocol module when the exchange ends and handed to lk_xrec_done
 * (lk_xrec.h), which counts it (/metrics) and logs it (the access log).  summary marks a
 * binary connection's closing line, which is logged but is no exchange.
 */
struct lk_xrec {
    const struct lk_conn *c;
    const struct lk_cluster *cluster; /* NULL: routed nowhere */
    const char *broker;               /* its name, or NULL */
    enum lk_stat_proto proto;
    struct lk_str method, target;   /* HTTP */
    int status;                     /* HTTP status; 0 for the binary protocols */
    int api_key, api_version;       /* Kafka */
    int command;                    /* Pulsar command type */
    const char *what;               /* Pulsar/Kafka: the command's name, or "connection" */
    uint64_t bytes_in, bytes_out;   /* from the client, to the client */
    uint64_t bytes_upstream;        /* HTTP: body bytes from the broker */
    uint64_t frames_in, frames_out; /* a summary's */
    unsigned rewrites, leaks, unmapped, hops;
    uint16_t flt_rewrites[LK_STAT_FILTERS]; /* by filter registry index */
    long long dur_us;                       /* the whole exchange */
    long long upstream_us;                  /* request sent to response head; -1: none */
    const char *error;                      /* what went wrong upstream, or NULL */
    const char *cut; /* HTTP: why the exchange was cut before its end ("client closed",
                      * "client timeout", "drain_timeout", "max_connection_age.grace",
                      * "connection closed"); NULL: it ended */
    unsigned overflowed : 1;                /* a body over max_buffer_bytes passed through */
    unsigned refused : 1;                   /* binary: a filter refused the answer (the leak
                                             * guard's block); the connection closed */
    unsigned summary : 1;
};

/* Counts an ended exchange (not a summary) in the series s of its
 * runtime (lk_xrec_done calls it). */
void lk_stats_count(const struct lk_rt_stats *s, const struct lk_xrec *r);

/* The workers' held bytes (lk_hold.h) change by delta, and `pauses`
 * connections stopped reading their brokers for the budget: the gauge
 * lookout_held_bytes and the counter lookout_held_pauses_total. */
void lk_stats_held(long long delta, unsigned pauses);

/* Names for labels and logs: a Kafka api key's ("Metadata"; NULL if
 * unknown) and a Pulsar command type's ("LOOKUP"; NULL). */
const char *lk_kafka_api_name(int key);
const char *lk_pulsar_command_name(int type);

/* "# HELP name help" and "# TYPE name type": a metric family's head. */
void lk_stats_family(struct evbuffer *out, const char *name, const char *type, const char *help);

/* Counts an admin request refused (403): for its address, or (token != 0)
 * for a missing or wrong bearer token; /metrics shows
 * lookout_admin_refused_total. */
void lk_stats_admin_refused(int token);

/* name{k1="v1",k2="v2",k3="v3"} and a space (NULL keys end the list early). */
void lk_stats_series(struct evbuffer *out, const char *name, const char *k1, const char *v1,
                     const char *k2, const char *v2, const char *k3, const char *v3);

/* A counter family with one series per cluster, its value at off in the
 * values a writer sums (struct lk_cl_vals here, lk_live.c's own). */
struct lk_stat_counter {
    const char *name, *help;
    size_t off;
};

/* Writes families of its own onto out (health(out, arg)). */
typedef void (*lk_stats_write_fn)(struct evbuffer *out, const void *arg);
/* The Prometheus text (format 0.0.4) of every series onto out, with
 * health's families (the serving runtime's broker health: lk_broker.h) in
 * their place; health may be NULL. */
void lk_stats_write(struct evbuffer *out, lk_stats_write_fn health, const void *arg,
                    uint64_t generation, uint64_t reloads_ok, uint64_t reloads_failed);

#endif
