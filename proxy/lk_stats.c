/*
 * The metrics registry (lk_stats.h): series by name, one shard of values
 * per worker, summed and written as Prometheus text when scraped.  It
 * knows neither connections nor exchanges: lk_xrec.c turns an ended
 * exchange into counts here and a line in the access log.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lk_clock.h"
#include "lk_pool.h"
#include "lk_ratelimit.h"
#include "lk_stats.h"

_Static_assert(LK_RATE_ENTRIES == 65536, "the help of lookout_http_rate_limit_entries says so");

struct lk_stat_filter lk_stat_filters[LK_STAT_FILTERS + 1];

enum obj_kind { OBJ_FRONTEND = 0, OBJ_CLUSTER, OBJ_BROKER };

struct lk_stat_obj {
    struct lk_stat_obj *next;
    enum obj_kind kind;
    char *name;
    unsigned proto; /* frontend: its LK_PROTO_*; cluster: what it serves */
    size_t stride;  /* bytes per shard, a multiple of 64 */
    unsigned char *mem;
};

__thread unsigned lk_stat_shard;
static unsigned nshards;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct lk_stat_obj *objs; /* newest first; never freed before exit */

static const long long bounds_us[LK_HIST_BOUNDS] = {
    1000,   2500,   5000,    10000,   25000,   50000,    100000,
    250000, 500000, 1000000, 2500000, 5000000, 10000000,
};
static const char *const bounds_le[LK_HIST_BOUNDS] = {
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
    "0.25",  "0.5",    "1",     "2.5",  "5",     "10",
};
static const char *const proto_names[LK_SP__COUNT] = {"http", "kafka", "pulsar"};
static const char *const uperr_names[LK_UPERR__COUNT] = {"connect", "timeout", "reset", "tls",
                                                         "outside_internal_networks"};

__thread struct lk_clock_wake lk_clock_wake; /* lk_clock.h */

void
lk_stats_init(int n)
{
    pthread_mutex_lock(&lock);
    if (nshards == 0)
        nshards = n >= 1 ? (unsigned)n : 1;
    pthread_mutex_unlock(&lock);
}

void
lk_stats_set_shard(int worker_id)
{
    lk_stat_shard = nshards != 0 ? (unsigned)worker_id % nshards : 0;
}

void *
lk_stat_vals(struct lk_stat_obj *o)
{
    return o->mem + (size_t)lk_stat_shard * o->stride;
}

void
lk_hist_add(struct lk_hist *h, long long us)
{
    int i = 0;

    if (us < 0)
        us = 0;
    while (i < LK_HIST_BOUNDS && us > bounds_us[i])
        i++;
    lk_stat_add(&h->bucket[i], 1);
    lk_stat_add(&h->sum_us, (uint64_t)us);
    lk_stat_add(&h->count, 1);
}

static size_t
vals_size(enum obj_kind kind)
{
    switch (kind) {
    case OBJ_FRONTEND:
        return sizeof(struct lk_fe_vals);
    case OBJ_CLUSTER:
        return sizeof(struct lk_cl_vals);
    case OBJ_BROKER:
        return sizeof(struct lk_br_vals);
    }
    return 0;
}

/* The series of that kind and name, made if new.  Under the lock. */
static struct lk_stat_obj *
obj_get_locked(enum obj_kind kind, const char *name, unsigned proto)
{
    struct lk_stat_obj *o;

    for (o = objs; o != NULL; o = o->next)
        if (o->kind == kind && strcmp(o->name, name) == 0) {
            o->proto |= proto;
            return o;
        }
    if (nshards == 0)
        nshards = 1;
    o = lk_xcalloc(1, sizeof(*o));
    o->kind = kind;
    o->name = lk_xstrdup(name);
    o->proto = proto;
    o->stride = (vals_size(kind) + 63) & ~(size_t)63;
    o->mem = aligned_alloc(64, o->stride * nshards);
    if (o->mem == NULL)
        abort(); /* out of memory, as lk_xmalloc */
    memset(o->mem, 0, o->stride * nshards);
    o->next = objs;
    objs = o;
    return o;
}

static struct lk_stat_obj *
obj_get(enum obj_kind kind, const char *name, unsigned proto)
{
    pthread_mutex_lock(&lock);
    struct lk_stat_obj *o = obj_get_locked(kind, name, proto);
    pthread_mutex_unlock(&lock);
    return o;
}

void
lk_stats_free(void)
{
    pthread_mutex_lock(&lock);
    while (objs != NULL) {
        struct lk_stat_obj *o = objs;
        objs = o->next;
        free(o->name);
        free(o->mem);
        free(o);
    }
    pthread_mutex_unlock(&lock);
}

struct lk_stat_obj *
lk_stats_frontend(const char *text, unsigned proto)
{
    return obj_get(OBJ_FRONTEND, text, proto);
}

struct lk_rt_stats *
lk_stats_runtime(const struct lk_conf *conf)
{
    struct lk_rt_stats *s = lk_xcalloc(1, sizeof(*s));

    lk_stats_init(conf->workers);
    s->cluster = lk_xcalloc(conf->nclusters + 1, sizeof(*s->cluster));
    s->broker = lk_xcalloc(conf->nbrokers + 1, sizeof(*s->broker));
    for (size_t i = 0; i < conf->nclusters; i++)
        s->cluster[i] = obj_get(OBJ_CLUSTER, conf->clusters[i]->name, conf->clusters[i]->proto);
    for (size_t i = 0; i < conf->nbrokers; i++)
        s->broker[i] = obj_get(OBJ_BROKER, conf->brokers[i]->name, 0);
    s->none = obj_get(OBJ_CLUSTER, "-", 0);
    s->brokers = conf->brokers;
    s->nbrokers = conf->nbrokers;
    return s;
}

void
lk_stats_runtime_free(struct lk_rt_stats *s, const struct lk_conf *conf)
{
    if (s == NULL)
        return;
    free(s->cluster);
    free(s->broker);
    free(s);
}

static struct lk_stat_obj *
broker_obj(struct lk_rt_stats *s, const struct lk_broker *b)
{
    if (s != NULL && b->index < s->nbrokers && s->brokers[b->index] == b)
        return s->broker[b->index];
    return obj_get(OBJ_BROKER, b->name, 0); /* learned at run time (lk_dyn.h) */
}

void
lk_stats_broker_error(struct lk_rt_stats *s, const struct lk_broker *b,
                      enum lk_upstream_err_kind kind)
{
    if (b == NULL)
        return;
    struct lk_br_vals *v = lk_stat_vals(broker_obj(s, b));
    lk_stat_add(&v->err[kind], 1);
}

void
lk_stats_listener_refused(struct lk_rt_stats *s, const struct lk_cluster *cl)
{
    if (s != NULL)
        lk_stat_add(&((struct lk_cl_vals *)lk_stat_vals(s->cluster[cl->index]))->listener_refused,
                    1);
}

void
lk_stats_limited(struct lk_rt_stats *s, const struct lk_cluster *cl)
{
    if (s != NULL)
        lk_stat_add(&((struct lk_cl_vals *)lk_stat_vals(s->cluster[cl->index]))->limited, 1);
}

void
lk_stats_count(const struct lk_rt_stats *s, const struct lk_xrec *r)
{
    if (s == NULL)
        return;
    struct lk_cl_vals *v =
        lk_stat_vals(r->cluster != NULL ? s->cluster[r->cluster->index] : s->none);

    switch (r->proto) {
    case LK_SP_HTTP:
        lk_stat_add(&v->http[r->status >= 100 && r->status < 600 ? r->status / 100 : 0], 1);
        break;
    case LK_SP_KAFKA:
        lk_stat_add(&v->kafka[r->api_key >= 0 && r->api_key < LK_STAT_KEYS - 1 ? r->api_key
                                                                               : LK_STAT_KEYS - 1],
                    1);
        break;
    case LK_SP_PULSAR:
        lk_stat_add(&v->pulsar[r->command >= 0 && r->command < LK_STAT_KEYS - 1 ? r->command
                                                                                : LK_STAT_KEYS - 1],
                    1);
        break;
    default:
        break;
    }
    if (r->rewrites != 0)
        for (int i = 0; i < LK_STAT_FILTERS; i++)
            if (r->flt_rewrites[i] != 0)
                lk_stat_add(&v->rewrites[i], r->flt_rewrites[i]);
    if (r->leaks != 0)
        lk_stat_add(&v->leaks, r->leaks);
    if (r->unmapped != 0)
        lk_stat_add(&v->unmapped, r->unmapped);
    lk_hist_add(&v->dur[r->proto], r->dur_us);
    if (r->upstream_us >= 0)
        lk_hist_add(&v->up[r->proto], r->upstream_us);
}

/* Names ------------------------------------------------------------------- */

/* Kafka's api keys (the protocol guide's names), as far as there are names. */
static const char *const kafka_apis[] = {
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "LeaderAndIsr",
    "StopReplica",
    "UpdateMetadata",
    "ControlledShutdown",
    "OffsetCommit",
    "OffsetFetch",
    "FindCoordinator",
    "JoinGroup",
    "Heartbeat",
    "LeaveGroup",
    "SyncGroup",
    "DescribeGroups",
    "ListGroups",
    "SaslHandshake",
    "ApiVersions",
    "CreateTopics",
    "DeleteTopics",
    "DeleteRecords",
    "InitProducerId",
    "OffsetForLeaderEpoch",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "WriteTxnMarkers",
    "TxnOffsetCommit",
    "DescribeAcls",
    "CreateAcls",
    "DeleteAcls",
    "DescribeConfigs",
    "AlterConfigs",
    "AlterReplicaLogDirs",
    "DescribeLogDirs",
    "SaslAuthenticate",
    "CreatePartitions",
    "CreateDelegationToken",
    "RenewDelegationToken",
    "ExpireDelegationToken",
    "DescribeDelegationToken",
    "DeleteGroups",
    "ElectLeaders",
    "IncrementalAlterConfigs",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "OffsetDelete",
    "DescribeClientQuotas",
    "AlterClientQuotas",
    "DescribeUserScramCredentials",
    "AlterUserScramCredentials",
    "Vote",
    "BeginQuorumEpoch",
    "EndQuorumEpoch",
    "DescribeQuorum",
    "AlterPartition",
    "UpdateFeatures",
    "Envelope",
    "FetchSnapshot",
    "DescribeCluster",
    "DescribeProducers",
    "BrokerRegistration",
    "BrokerHeartbeat",
    "UnregisterBroker",
    "DescribeTransactions",
    "ListTransactions",
    "AllocateProducerIds",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe",
    "ControllerRegistration",
    "GetTelemetrySubscriptions",
    "PushTelemetry",
    "AssignReplicasToDirs",
    "ListClientMetricsResources",
    "DescribeTopicPartitions",
    "ShareGroupHeartbeat",
    "ShareGroupDescribe",
    "ShareFetch",
    "ShareAcknowledge",
    "AddRaftVoter",
    "RemoveRaftVoter",
    "UpdateRaftVoter",
    "InitializeShareGroupState",
    "ReadShareGroupState",
    "WriteShareGroupState",
    "DeleteShareGroupState",
    "ReadShareGroupStateSummary",
    "StreamsGroupHeartbeat",
    "StreamsGroupDescribe",
};

const char *
lk_kafka_api_name(int key)
{
    if (key < 0 || (size_t)key >= sizeof(kafka_apis) / sizeof(kafka_apis[0]))
        return NULL;
    return kafka_apis[key];
}

const char *
lk_pulsar_command_name(int type)
{
    switch (type) {
    case 2:
        return "CONNECT";
    case 3:
        return "CONNECTED";
    case 15:
        return "CLOSE_PRODUCER";
    case 16:
        return "CLOSE_CONSUMER";
    case 23:
        return "LOOKUP";
    case 24:
        return "LOOKUP_RESPONSE";
    case 68:
        return "TOPIC_MIGRATED";
    case 71:
        return "SCALABLE_TOPIC_UPDATE";
    case 80:
        return "WATCH_TC_ASSIGNMENTS_UPDATE";
    /* the answers with an error text, which the leak guard reads
     * (lk_pulsar_type_addrs TEXT) */
    case 8:
        return "SEND_ERROR";
    case 14:
        return "ERROR";
    case 22:
        return "PARTITIONED_METADATA_RESPONSE";
    case 26:
        return "CONSUMER_STATS_RESPONSE";
    case 35:
        return "GET_SCHEMA_RESPONSE";
    case 40:
        return "GET_OR_CREATE_SCHEMA_RESPONSE";
    case 51:
        return "NEW_TXN_RESPONSE";
    case 53:
        return "ADD_PARTITION_TO_TXN_RESPONSE";
    case 55:
        return "ADD_SUBSCRIPTION_TO_TXN_RESPONSE";
    case 57:
        return "END_TXN_RESPONSE";
    case 59:
        return "END_TXN_ON_PARTITION_RESPONSE";
    case 61:
        return "END_TXN_ON_SUBSCRIPTION_RESPONSE";
    case 63:
        return "TC_CLIENT_CONNECT_RESPONSE";
    case 74:
        return "SCALABLE_TOPIC_SUBSCRIBE_RESPONSE";
    case 77:
        return "WATCH_SCALABLE_TOPICS_UPDATE";
    default:
        return NULL;
    }
}

/* Exposition ---------------------------------------------------------------- */

/* A label value, escaped as the text format wants (\\, \", \n). */
static void
add_label(struct evbuffer *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            evbuffer_add_printf(out, "\\%c", *s);
        else if (*s == '\n')
            evbuffer_add(out, "\\n", 2);
        else
            evbuffer_add(out, s, 1);
    }
}

void
lk_stats_family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{k1="v1",k2="v2"} (NULL keys end the list early) */
void
lk_stats_series(struct evbuffer *out, const char *name, const char *k1, const char *v1,
                const char *k2, const char *v2, const char *k3, const char *v3)
{
    evbuffer_add_printf(out, "%s{%s=\"", name, k1);
    add_label(out, v1);
    if (k2 != NULL) {
        evbuffer_add_printf(out, "\",%s=\"", k2);
        add_label(out, v2);
    }
    if (k3 != NULL) {
        evbuffer_add_printf(out, "\",%s=\"", k3);
        add_label(out, v3);
    }
    evbuffer_add(out, "\"} ", 3);
}

/* The sum over every shard of the uint64_t at offset off of o's values. */
static uint64_t
sum_at(const struct lk_stat_obj *o, size_t off)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < nshards; i++)
        n += __atomic_load_n((const uint64_t *)(o->mem + (size_t)i * o->stride + off),
                             __ATOMIC_RELAXED);
    return n;
}

#define SUM(o, type, field) sum_at((o), offsetof(type, field))

/* A counter with one series per cluster, at c->off in struct lk_cl_vals. */
static void
cluster_counter(struct evbuffer *out, const struct lk_stat_counter *c)
{
    lk_stats_family(out, c->name, "counter", c->help);
    for (const struct lk_stat_obj *o = objs; o != NULL; o = o->next)
        if (o->kind == OBJ_CLUSTER && o->proto != 0) {
            lk_stats_series(out, c->name, "cluster", o->name, NULL, NULL, NULL, NULL);
            evbuffer_add_printf(out, "%llu\n", (unsigned long long)sum_at(o, c->off));
        }
}

static void
write_hist(struct evbuffer *out, const char *name, const struct lk_stat_obj *o, size_t off,
           const char *proto)
{
    uint64_t cum = 0, count = sum_at(o, off + offsetof(struct lk_hist, count));
    char key[96];

    snprintf(key, sizeof(key), "%s_bucket", name);
    for (int i = 0; i < LK_HIST_BUCKETS; i++) {
        cum += sum_at(o, off + offsetof(struct lk_hist, bucket) + (size_t)i * sizeof(uint64_t));
        lk_stats_series(out, key, "cluster", o->name, "protocol", proto, "le",
               i < LK_HIST_BOUNDS ? bounds_le[i] : "+Inf");
        /* +Inf is the count: shards read a moment apart could disagree */
        evbuffer_add_printf(out, "%llu\n", (unsigned long long)(i < LK_HIST_BOUNDS ? cum : count));
    }
    uint64_t sum = sum_at(o, off + offsetof(struct lk_hist, sum_us));
    snprintf(key, sizeof(key), "%s_sum", name);
    lk_stats_series(out, key, "cluster", o->name, "protocol", proto, NULL, NULL);
    evbuffer_add_printf(out, "%llu.%06llu\n", (unsigned long long)(sum / 1000000),
                        (unsigned long long)(sum % 1000000));
    snprintf(key, sizeof(key), "%s_count", name);
    lk_stats_series(out, key, "cluster", o->name, "protocol", proto, NULL, NULL);
    evbuffer_add_printf(out, "%llu\n", (unsigned long long)count);
}

/* The protocols a cluster series shows: those it serves, and any that
 * counted something (the "-" series, a cluster a reload changed). */
static int
shows(const struct lk_stat_obj *o, int p)
{
    static const unsigned bits[LK_SP__COUNT] = {LK_PROTO_HTTP, LK_PROTO_KAFKA, LK_PROTO_PULSAR};
    return (o->proto & bits[p]) != 0 ||
           sum_at(o, offsetof(struct lk_cl_vals, dur) + (size_t)p * sizeof(struct lk_hist) +
                         offsetof(struct lk_hist, count)) != 0;
}

/* Admin refusals: by address, by token (lk_admin.c, worker 0's loop). */
static uint64_t admin_refused[2];

void
lk_stats_admin_refused(int token)
{
    __atomic_fetch_add(&admin_refused[token ? 1 : 0], 1, __ATOMIC_RELAXED);
}

/* Held bytes and pauses: process-wide, changed rarely enough (once per
 * held frame or streamed tail) that one shared pair of atomics does. */
static long long held_bytes;
static uint64_t held_pauses;

void
lk_stats_held(long long delta, unsigned pauses)
{
    if (delta != 0)
        __atomic_fetch_add(&held_bytes, delta, __ATOMIC_RELAXED);
    if (pauses != 0)
        __atomic_fetch_add(&held_pauses, pauses, __ATOMIC_RELAXED);
}

void
lk_stats_write(struct evbuffer *out, lk_stats_write_fn health, const void *arg, uint64_t generation,
               uint64_t reloads_ok, uint64_t reloads_failed)
{
    const struct lk_stat_obj *o;
    char num[16];

    pthread_mutex_lock(&lock);
    /* The frontends' series; open is a sum of +1s and -1s, so signed. */
    static const struct {
        const char *name, *type, *help;
        size_t off;
        int with_proto;
    } fes[] = {
        {"lookout_connections_open", "gauge", "Client connections open, by bound address.",
         offsetof(struct lk_fe_vals, open), 1},
        {"lookout_connections_total", "counter", "Client connections accepted.",
         offsetof(struct lk_fe_vals, total), 1},
        {"lookout_tls_handshake_failures_total", "counter",
         "Client TLS handshakes that failed or timed out.",
         offsetof(struct lk_fe_vals, tls_failures), 0},
        {"lookout_client_cert_refused_total", "counter",
         "Client TLS handshakes that failed on the client's certificate (tls.verify_client); "
         "also counted in lookout_tls_handshake_failures_total.",
         offsetof(struct lk_fe_vals, client_cert_refused), 0},
        {"lookout_first_frame_timeouts_total", "counter",
         "Kafka and Pulsar client connections closed for sending no first frame within "
         "timeout.first_frame.",
         offsetof(struct lk_fe_vals, first_frame_timeouts), 0},
        {"lookout_connections_aged_total", "counter",
         "Client connections ended for max_connection_age (Connection: close, or a close "
         "between answers or frames).",
         offsetof(struct lk_fe_vals, aged), 1},
        {"lookout_connections_aged_forced_total", "counter",
         "Client connections past max_connection_age still busy at max_connection_age.grace, "
         "closed.",
         offsetof(struct lk_fe_vals, aged_forced), 1},
    };
    for (size_t f = 0; f < sizeof(fes) / sizeof(fes[0]); f++) {
        lk_stats_family(out, fes[f].name, fes[f].type, fes[f].help);
        for (o = objs; o != NULL; o = o->next) {
            if (o->kind != OBJ_FRONTEND)
                continue;
            lk_stats_series(out, fes[f].name, "frontend", o->name,
                            fes[f].with_proto ? "protocol" : NULL,
                            proto_names[o->proto == LK_PROTO_KAFKA    ? LK_SP_KAFKA
                                        : o->proto == LK_PROTO_PULSAR ? LK_SP_PULSAR
                                                                      : LK_SP_HTTP],
                            NULL, NULL);
            evbuffer_add_printf(out, "%lld\n", (long long)sum_at(o, fes[f].off));
        }
    }
    static const char *const refusals[4] = {"max_connections", "max_connections_per_client",
                                            "proxy_protocol_untrusted", "proxy_protocol_bad"};
    lk_stats_family(out, "lookout_connections_refused_total", "counter",
                    "Client connections refused at accept, by the limit they were over, or "
                    "for their PROXY protocol header (one from an address not in "
                    "proxy_protocol.trusted; a bad or missing one from a trusted address).");
    for (o = objs; o != NULL; o = o->next)
        for (int r = 0; r < 4 && o->kind == OBJ_FRONTEND; r++) {
            lk_stats_series(out, "lookout_connections_refused_total", "frontend", o->name, "reason",
                   refusals[r], NULL, NULL);
            evbuffer_add_printf(out, "%llu\n",
                                (unsigned long long)SUM(o, struct lk_fe_vals, refused[r]));
        }

    lk_stats_family(out, "lookout_exchanges_total", "counter",
           "Exchanges: HTTP by status class, Kafka by api, Pulsar by command.");
    for (o = objs; o != NULL; o = o->next) {
        if (o->kind != OBJ_CLUSTER)
            continue;
        if (shows(o, LK_SP_HTTP))
            for (int i = 1; i <= 5; i++) {
                snprintf(num, sizeof(num), "%dxx", i);
                lk_stats_series(out, "lookout_exchanges_total", "cluster", o->name, "protocol",
                                "http", "status", num);
                evbuffer_add_printf(out, "%llu\n",
                                    (unsigned long long)SUM(o, struct lk_cl_vals, http[i]));
            }
        for (int i = 0; i < LK_STAT_KEYS; i++) {
            uint64_t n = SUM(o, struct lk_cl_vals, kafka[i]);
            const char *name = lk_kafka_api_name(i);
            if (n == 0)
                continue;
            snprintf(num, sizeof(num), "%d", i);
            lk_stats_series(out, "lookout_exchanges_total", "cluster", o->name, "protocol", "kafka",
                            "api",
                            i == LK_STAT_KEYS - 1 ? "other"
                            : name != NULL        ? name
                                                  : num);
            evbuffer_add_printf(out, "%llu\n", (unsigned long long)n);
        }
        for (int i = 0; i < LK_STAT_KEYS; i++) {
            uint64_t n = SUM(o, struct lk_cl_vals, pulsar[i]);
            const char *name = lk_pulsar_command_name(i);
            if (n == 0)
                continue;
            snprintf(num, sizeof(num), "%d", i);
            lk_stats_series(out, "lookout_exchanges_total", "cluster", o->name, "protocol",
                            "pulsar", "command",
                            i == LK_STAT_KEYS - 1 ? "other"
                            : name != NULL        ? name
                                                  : num);
            evbuffer_add_printf(out, "%llu\n", (unsigned long long)n);
        }
    }

    lk_stats_family(out, "lookout_rewrites_total", "counter",
                    "Broker addresses rewritten, by filter.");
    for (o = objs; o != NULL; o = o->next) {
        if (o->kind != OBJ_CLUSTER || o->proto == 0)
            continue;
        for (int i = 0; lk_stat_filters[i].name != NULL && i < LK_STAT_FILTERS; i++) {
            if ((lk_stat_filters[i].protos & o->proto) == 0)
                continue;
            lk_stats_series(out, "lookout_rewrites_total", "cluster", o->name, "filter",
                   lk_stat_filters[i].name, NULL, NULL);
            evbuffer_add_printf(out, "%llu\n",
                                (unsigned long long)SUM(o, struct lk_cl_vals, rewrites[i]));
        }
    }
    static const struct lk_stat_counter cluster_counters[] = {
        {"lookout_leaks_total", "Internal addresses the leak guard found in responses.",
         offsetof(struct lk_cl_vals, leaks)},
        {"lookout_unmapped_total",
         "Broker addresses a filter could not map, passed through unchanged.",
         offsetof(struct lk_cl_vals, unmapped)},
        {"lookout_listener_refused_total",
         "Listener names clients asked for that they may not choose (CONTRACT 3): the lookup "
         "listener was used.",
         offsetof(struct lk_cl_vals, listener_refused)},
        {"lookout_http_requests_limited_total",
         "HTTP requests answered 429 Too Many Requests by limit.requests.",
         offsetof(struct lk_cl_vals, limited)},
    };
    for (size_t i = 0; i < sizeof(cluster_counters) / sizeof(cluster_counters[0]); i++)
        cluster_counter(out, &cluster_counters[i]);

    lk_stats_family(out, "lookout_upstream_errors_total", "counter",
                    "Failures talking to brokers: connect, timeout, reset, tls, "
                    "outside_internal_networks (not dialled).");
    for (o = objs; o != NULL; o = o->next)
        if (o->kind == OBJ_BROKER)
            for (int k = 0; k < LK_UPERR__COUNT; k++) {
                lk_stats_series(out, "lookout_upstream_errors_total", "broker", o->name, "kind",
                       uperr_names[k], NULL, NULL);
                evbuffer_add_printf(out, "%llu\n",
                                    (unsigned long long)SUM(o, struct lk_br_vals, err[k]));
            }

    static const struct {
        const char *name, *help;
        size_t off;
    } hists[] = {
        {"lookout_exchange_duration_seconds",
         "Exchange time, from the request's first byte to the response's last.",
         offsetof(struct lk_cl_vals, dur)},
        {"lookout_upstream_response_seconds",
         "Broker time, from the request sent to the response's head.",
         offsetof(struct lk_cl_vals, up)},
    };
    for (size_t h = 0; h < sizeof(hists) / sizeof(hists[0]); h++) {
        lk_stats_family(out, hists[h].name, "histogram", hists[h].help);
        for (o = objs; o != NULL; o = o->next)
            if (o->kind == OBJ_CLUSTER)
                for (int p = 0; p < LK_SP__COUNT; p++)
                    if (shows(o, p))
                        write_hist(out, hists[h].name, o,
                                   hists[h].off + (size_t)p * sizeof(struct lk_hist),
                                   proto_names[p]);
    }
    pthread_mutex_unlock(&lock);

    /* Health, from the runtime serving now (the map's brokers). */
    if (health != NULL)
        health(out, arg);
    lk_stats_family(out, "lookout_held_bytes", "gauge",
           "Bytes the workers hold to rewrite them (whole response frames, the tails of streamed "
           "Fetch answers), against max_held_bytes per worker.");
    evbuffer_add_printf(out, "lookout_held_bytes %lld\n",
                        (long long)__atomic_load_n(&held_bytes, __ATOMIC_RELAXED));
    lk_stats_family(out, "lookout_held_pauses_total", "counter",
           "Times a connection stopped reading its broker because its worker held max_held_bytes.");
    evbuffer_add_printf(out, "lookout_held_pauses_total %llu\n",
                        (unsigned long long)__atomic_load_n(&held_pauses, __ATOMIC_RELAXED));
    lk_stats_family(out, "lookout_http_rate_limit_entries", "gauge",
                    "Clients whose limit.requests bucket is not full again, of the table's fixed "
                    "size (65536).");
    evbuffer_add_printf(out, "lookout_http_rate_limit_entries %zu\n",
                        lk_rate_entries((uint64_t)lk_now_us() * 1000));
    lk_stats_family(
        out, "lookout_http_rate_limit_evictions_total", "counter",
        "limit.requests buckets not yet full taken over by another client (the table is "
        "full): their clients start again from a full bucket.");
    evbuffer_add_printf(out, "lookout_http_rate_limit_evictions_total %llu\n",
                        (unsigned long long)lk_rate_evictions());
    lk_stats_family(out, "lookout_config_generation", "gauge",
           "The configuration generation serving (1 at start, +1 per reload).");
    evbuffer_add_printf(out, "lookout_config_generation %llu\n", (unsigned long long)generation);
    lk_stats_family(out, "lookout_admin_refused_total", "counter",
                    "Admin requests answered 403, by what was missing: an address in admin.allow "
                    "(or admin.healthz_allow for /healthz), or admin.token_file's bearer token.");
    evbuffer_add_printf(out, "lookout_admin_refused_total{reason=\"address\"} %llu\n",
                        (unsigned long long)__atomic_load_n(&admin_refused[0], __ATOMIC_RELAXED));
    evbuffer_add_printf(out, "lookout_admin_refused_total{reason=\"token\"} %llu\n",
                        (unsigned long long)__atomic_load_n(&admin_refused[1], __ATOMIC_RELAXED));
    lk_stats_family(out, "lookout_reloads_total", "counter", "Configuration reloads, by result.");
    evbuffer_add_printf(out, "lookout_reloads_total{result=\"ok\"} %llu\n",
                        (unsigned long long)reloads_ok);
    evbuffer_add_printf(out, "lookout_reloads_total{result=\"failed\"} %llu\n",
                        (unsigned long long)reloads_failed);
}
