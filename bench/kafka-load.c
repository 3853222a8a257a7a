/*
 * kafka-load: the Kafka scenario's load program (bench/run builds and runs
 * it; bench/README.md says how to read it).  A librdkafka client that
 * prints one JSON line and exits 0 when every message was delivered and
 * (in throughput mode) came back intact.
 *
 * throughput mode (the default): produces COUNT messages of SIZE bytes
 * round-robin over every partition of TOPIC, with at most WINDOW of them
 * awaiting their delivery report, and times that (msgs/s, MB/s, and each
 * message's latency from produce() to its delivery report); then consumes
 * them back from the offsets the delivery reports gave, times that too,
 * and checks that every message arrived once, on its partition, byte for
 * byte.  Each payload holds its sequence number and a run id, and the rest
 * is a pseudo-random stream seeded by both, so a message of another run, a
 * duplicate or a changed byte is told apart.
 *
 * latency mode (--latency): COUNT messages to one partition, one at a
 * time: linger.ms = 0, acks = 1, one request in flight, and the next
 * produce() only after the previous delivery report.  Each latency is then
 * one Produce request's round trip (plus librdkafka's own thread hand-offs,
 * the same with or without a proxy), which is what a proxy adds to.
 *
 * --map FROM=TO sends connections for FROM (host:port, IPv4) to TO: a byte
 * forwarder that cannot rewrite broker addresses (nginx stream, HAProxy
 * mode tcp) is reached for every broker that way.  Every address connected
 * to is listed in the output, so the caller can check where the bytes went.
 *
 * Bounded: --timeout SECONDS covers the whole run; past it, one JSON line
 * with "ok":false and exit 3.  Usage errors exit 2, failures 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define MAX_MAPS 32
#define MAX_SEEN 64
#define MAX_PARTITIONS 256
#define WARMUP_LATENCY 200 /* latency mode: round trips before timing */

struct addr_map {
    struct sockaddr_in from, to;
};

static struct {
    const char *bootstrap, *topic;
    long count, size, window, batch, timeout;
    int latency, partition;
    struct addr_map map[MAX_MAPS];
    int nmap;
} opt = {
    .count = 30000, .size = 1024, .window = 1000, .batch = 12000, .timeout = 60, .partition = 0};

/* Where the client connected (after --map), for the output. */
static struct {
    pthread_mutex_t lock;
    char addr[MAX_SEEN][32];
    int n;
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t run_id;
static double deadline;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Stops the run: one JSON line saying why, and exit code rc. */
static void
fail(int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = ' ';
    printf("{\"ok\":false,\"mode\":\"%s\",\"error\":\"%s\"}\n",
           opt.latency ? "latency" : "throughput", msg);
    fflush(stdout);
    fprintf(stderr, "kafka-load: %s\n", msg);
    _exit(rc); /* never wait on librdkafka's threads */
}

static void
on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "{\"ok\":false,\"error\":\"hard timeout\"}\n";
    ssize_t r = write(STDOUT_FILENO, m, sizeof(m) - 1);
    (void)r;
    _exit(3);
}

static void
check_deadline(const char *what)
{
    if (now() > deadline)
        fail(3, "timeout after %ld s while %s", opt.timeout, what);
}

/* ---- payloads ---------------------------------------------------------- */

static uint64_t
mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Bytes 0-7: seq; 8-15: run id; then an xorshift stream seeded by both. */
static void
fill_payload(uint8_t *p, size_t size, uint64_t seq)
{
    uint64_t s = mix(seq ^ run_id) | 1;

    memcpy(p, &seq, 8);
    memcpy(p + 8, &run_id, 8);
    for (size_t i = 16; i < size; i += 8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        memcpy(p + i, &s, size - i < 8 ? size - i : 8);
    }
}

/* ---- latencies --------------------------------------------------------- */

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of n sorted values (nearest rank). */
static double
quantile(const double *v, long n, double q)
{
    long i = (long)(q * (double)n + 0.999999) - 1;
    if (i < 0)
        i = 0;
    if (i >= n)
        i = n - 1;
    return n > 0 ? v[i] : 0.0;
}

/* ---- librdkafka plumbing ----------------------------------------------- */

static void
conf_set(rd_kafka_conf_t *c, const char *k, const char *v)
{
    char err[256];
    if (rd_kafka_conf_set(c, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
        fail(2, "config %s=%s: %s", k, v, err);
}

/* connect_cb: --map, and a note of where the bytes go. */
static int
connect_cb(int fd, const struct sockaddr *addr, int addrlen, const char *id, void *opaque)
{
    (void)id;
    (void)opaque;
    struct sockaddr_in to;
    const struct sockaddr *dst = addr;
    char buf[32];

    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        for (int i = 0; i < opt.nmap; i++)
            if (opt.map[i].from.sin_addr.s_addr == in->sin_addr.s_addr &&
                opt.map[i].from.sin_port == in->sin_port) {
                to = opt.map[i].to;
                dst = (const struct sockaddr *)&to;
                addrlen = sizeof(to);
                break;
            }
        const struct sockaddr_in *d = (const struct sockaddr_in *)dst;
        snprintf(buf, sizeof(buf), "%s:%u", inet_ntoa(d->sin_addr), ntohs(d->sin_port));
    } else {
        snprintf(buf, sizeof(buf), "family-%d", addr->sa_family);
    }
    /* Brokers connect from their own threads. */
    pthread_mutex_lock(&seen.lock);
    int dup = 0;
    for (int i = 0; i < seen.n; i++)
        dup |= strcmp(seen.addr[i], buf) == 0;
    if (!dup && seen.n < MAX_SEEN)
        snprintf(seen.addr[seen.n++], sizeof(seen.addr[0]), "%s", buf);
    pthread_mutex_unlock(&seen.lock);

    if (connect(fd, dst, (socklen_t)addrlen) == -1 && errno != EINPROGRESS)
        return errno;
    return 0;
}

static rd_kafka_conf_t *
base_conf(void)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    conf_set(c, "bootstrap.servers", opt.bootstrap);
    conf_set(c, "client.id", "kafka-load");
    conf_set(c, "log_level", "4");
    rd_kafka_conf_set_connect_cb(c, connect_cb);
    return c;
}

static int
partition_count(rd_kafka_t *rk)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, opt.topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int n = -1;

    while (n < 0) {
        check_deadline("reading the topic's metadata");
        if (rd_kafka_metadata(rk, 0, t, &md, 2000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            continue;
        rd_kafka_resp_err_t e =
            md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            n = md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART &&
            e != RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
            fail(1, "topic %s: %s", opt.topic, rd_kafka_err2str(e));
        if (n < 0)
            usleep(100 * 1000);
    }
    rd_kafka_topic_destroy(t);
    if (n < 1 || n > MAX_PARTITIONS)
        fail(1, "topic %s has %d partitions (1-%d wanted)", opt.topic, n, MAX_PARTITIONS);
    return n;
}

/* ---- producing --------------------------------------------------------- */

/* Per produce run: send times by sequence number, and what came back. */
static struct {
    double *sent, *lat;
    long delivered, failed;
    rd_kafka_resp_err_t first_err;
    int64_t first_offset[MAX_PARTITIONS];
    int64_t last_offset; /* latency mode: offsets must grow */
    long disorder;
} pr;

static void
dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    uint64_t seq = (uint64_t)(uintptr_t)m->_private;

    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (pr.failed++ == 0)
            pr.first_err = m->err;
        return;
    }
    if (seq == UINT64_MAX) /* warm-up */
        return;
    pr.lat[pr.delivered++] = now() - pr.sent[seq];
    if (m->partition >= 0 && m->partition < MAX_PARTITIONS &&
        (pr.first_offset[m->partition] < 0 || m->offset < pr.first_offset[m->partition]))
        pr.first_offset[m->partition] = m->offset;
    if (opt.latency && m->offset <= pr.last_offset)
        pr.disorder++;
    pr.last_offset = m->offset;
}

static void
produce_one(rd_kafka_t *rk, int32_t part, uint64_t seq, uint8_t *buf)
{
    fill_payload(buf, (size_t)opt.size, seq);
    for (;;) {
        if (seq != UINT64_MAX)
            pr.sent[seq] = now();
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(opt.topic), RD_KAFKA_V_PARTITION(part),
            RD_KAFKA_V_VALUE(buf, (size_t)opt.size), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)seq), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            fail(1, "produce: %s", rd_kafka_err2str(e));
        rd_kafka_poll(rk, 100);
        check_deadline("producing");
    }
}

/* Serves delivery reports until fewer than `left` messages are out. */
static void
drain_to(rd_kafka_t *rk, long left)
{
    while (rd_kafka_outq_len(rk) > left) {
        rd_kafka_poll(rk, 100);
        check_deadline("waiting for delivery reports");
    }
    rd_kafka_poll(rk, 0);
}

static rd_kafka_t *
new_producer(void)
{
    char err[256], v[32];
    rd_kafka_conf_t *c = base_conf();

    rd_kafka_conf_set_dr_msg_cb(c, dr_cb);
    if (opt.latency) {
        conf_set(c, "linger.ms", "0");
        conf_set(c, "acks", "1");
        conf_set(c, "max.in.flight.requests.per.connection", "1");
        conf_set(c, "batch.num.messages", "1");
    } else {
        snprintf(v, sizeof(v), "%ld", opt.window);
        conf_set(c, "queue.buffering.max.messages", v);
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    if (rk == NULL)
        fail(1, "rd_kafka_new: %s", err);
    return rk;
}

static void
alloc_times(long n)
{
    pr.sent = calloc((size_t)n, sizeof(double));
    pr.lat = calloc((size_t)n, sizeof(double));
    if (pr.sent == NULL || pr.lat == NULL)
        fail(1, "out of memory for %ld latencies", n);
    for (int i = 0; i < MAX_PARTITIONS; i++)
        pr.first_offset[i] = -1;
    pr.last_offset = -1;
}

static void
print_latencies(const char *name, long n)
{
    qsort(pr.lat, (size_t)n, sizeof(double), cmp_double);
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += pr.lat[i];
    printf(
        "\"%s\":{\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f}",
        name, quantile(pr.lat, n, 0.50) * 1e6, quantile(pr.lat, n, 0.90) * 1e6,
        quantile(pr.lat, n, 0.99) * 1e6, n ? pr.lat[n - 1] * 1e6 : 0.0,
        n ? sum / (double)n * 1e6 : 0.0);
}

static void
print_seen(void)
{
    printf("\"connected_to\":[");
    for (int i = 0; i < seen.n; i++)
        printf("%s\"%s\"", i ? "," : "", seen.addr[i]);
    printf("]");
}

/* ---- latency mode ------------------------------------------------------ */

static int
run_latency(void)
{
    rd_kafka_t *rk = new_producer();
    uint8_t *buf = malloc((size_t)opt.size);
    int parts = partition_count(rk);

    if (opt.partition >= parts)
        fail(2, "--partition %d, but %s has %d partitions", opt.partition, opt.topic, parts);
    alloc_times(opt.count);
    for (int i = 0; i < WARMUP_LATENCY; i++) {
        produce_one(rk, opt.partition, UINT64_MAX, buf);
        drain_to(rk, 0);
    }
    pr.last_offset = -1;
    double t0 = now();
    for (long i = 0; i < opt.count; i++) {
        produce_one(rk, opt.partition, (uint64_t)i, buf);
        while (pr.delivered + pr.failed <= i) {
            rd_kafka_poll(rk, 100);
            check_deadline("waiting for a delivery report");
        }
        if (pr.failed)
            fail(1, "delivery failed: %s", rd_kafka_err2str(pr.first_err));
    }
    double secs = now() - t0;
    if (pr.disorder)
        fail(1, "%ld delivery reports out of offset order", pr.disorder);

    printf("{\"ok\":true,\"mode\":\"latency\",\"count\":%ld,\"size\":%ld,\"partition\":%d,"
           "\"seconds\":%.4f,\"requests_per_s\":%.1f,",
           opt.count, opt.size, opt.partition, secs, (double)opt.count / secs);
    print_latencies("rtt", opt.count);
    printf(",");
    print_seen();
    printf("}\n");
    fflush(stdout);
    rd_kafka_destroy(rk);
    return 0;
}

/* ---- throughput mode --------------------------------------------------- */

/*
 * The broker keeps only so much per partition (librdkafka's mock: 5 MiB),
 * so COUNT messages go in cycles of at most BATCH: produce a batch, then
 * consume it back with a new consumer from the offsets its delivery
 * reports gave.  Only producing and consuming are timed, not setting up.
 */
static struct {
    uint8_t *got, *want;
    long received, dups, corrupt, foreign, misplaced;
} cs;

static double
consume_batch(int parts, long first, long n)
{
    char err[256];
    rd_kafka_conf_t *c = base_conf();

    conf_set(c, "group.id", "kafka-load"); /* assign() wants one; nothing is committed */
    conf_set(c, "enable.auto.commit", "false");
    conf_set(c, "auto.offset.reset", "error");
    conf_set(c, "enable.partition.eof", "false");
    rd_kafka_t *rc = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
    if (rc == NULL)
        fail(1, "rd_kafka_new (consumer): %s", err);
    rd_kafka_poll_set_consumer(rc);
    /* Warm-up: querying the watermarks connects to every leader. */
    for (int p = 0; p < parts; p++) {
        int64_t lo, hi;
        while (rd_kafka_query_watermark_offsets(rc, opt.topic, p, &lo, &hi, 2000) !=
               RD_KAFKA_RESP_ERR_NO_ERROR)
            check_deadline("querying watermarks");
        if (pr.first_offset[p] >= 0 && pr.first_offset[p] < lo)
            fail(1,
                 "partition %d starts at %" PRId64 ", after our first offset %" PRId64
                 " (the broker's retention dropped some: use a smaller batch)",
                 p, lo, pr.first_offset[p]);
    }
    rd_kafka_topic_partition_list_t *tp = rd_kafka_topic_partition_list_new(parts);
    for (int p = 0; p < parts; p++)
        if (pr.first_offset[p] >= 0)
            rd_kafka_topic_partition_list_add(tp, opt.topic, p)->offset = pr.first_offset[p];

    long want = cs.received + n;
    double t0 = now(), t1 = t0;
    rd_kafka_resp_err_t e = rd_kafka_assign(rc, tp);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        fail(1, "assign: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(tp);
    while (cs.received < want) {
        check_deadline("consuming");
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rc, 100);
        if (m == NULL)
            continue;
        if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
            fail(1, "consume: %s", rd_kafka_message_errstr(m));
        uint64_t seq = UINT64_MAX, rid = 0;
        if (m->len >= 16) {
            memcpy(&seq, m->payload, 8);
            memcpy(&rid, (const uint8_t *)m->payload + 8, 8);
        }
        if (rid != run_id || seq < (uint64_t)first || seq >= (uint64_t)(first + n)) {
            cs.foreign++; /* another run's or batch's, or a warm-up */
        } else if (cs.got[seq]) {
            cs.dups++;
        } else {
            cs.got[seq] = 1;
            cs.received++;
            t1 = now();
            fill_payload(cs.want, (size_t)opt.size, seq);
            if (m->len != (size_t)opt.size || memcmp(m->payload, cs.want, (size_t)opt.size) != 0)
                cs.corrupt++;
            if (m->partition != (int32_t)(seq % (uint64_t)parts))
                cs.misplaced++;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rc);
    rd_kafka_destroy(rc);
    return t1 - t0;
}

static int
run_throughput(void)
{
    rd_kafka_t *rk = new_producer();
    uint8_t *buf = malloc((size_t)opt.size);
    int parts = partition_count(rk);
    double produce_s = 0, consume_s = 0;
    int batches = 0;

    alloc_times(opt.count);
    cs.got = calloc((size_t)opt.count, 1);
    cs.want = malloc((size_t)opt.size);
    if (buf == NULL || cs.got == NULL || cs.want == NULL)
        fail(1, "out of memory");
    /* Warm-up: one message per partition, so every leader is connected
     * before the clock starts. */
    for (int p = 0; p < parts; p++)
        produce_one(rk, p, UINT64_MAX, buf);
    drain_to(rk, 0);
    if (pr.failed)
        fail(1, "warm-up delivery failed: %s", rd_kafka_err2str(pr.first_err));

    for (long first = 0; first < opt.count; first += opt.batch, batches++) {
        long n = opt.count - first < opt.batch ? opt.count - first : opt.batch;
        for (int p = 0; p < MAX_PARTITIONS; p++)
            pr.first_offset[p] = -1;
        double t0 = now();
        for (long i = first; i < first + n; i++) {
            produce_one(rk, (int32_t)(i % parts), (uint64_t)i, buf);
            rd_kafka_poll(rk, 0);
        }
        drain_to(rk, 0);
        produce_s += now() - t0;
        if (pr.failed)
            fail(1, "%ld deliveries failed: %s", pr.failed, rd_kafka_err2str(pr.first_err));
        if (pr.delivered != first + n)
            fail(1, "%ld of %ld delivered", pr.delivered, first + n);
        consume_s += consume_batch(parts, first, n);
    }
    rd_kafka_destroy(rk);

    double mb = (double)opt.count * (double)opt.size / 1e6;
    int ok = cs.received == opt.count && cs.dups == 0 && cs.corrupt == 0 && cs.misplaced == 0;
    printf("{\"ok\":%s,\"mode\":\"throughput\",\"count\":%ld,\"size\":%ld,\"partitions\":%d,"
           "\"window\":%ld,"
           "\"batches\":%d,",
           ok ? "true" : "false", opt.count, opt.size, parts, opt.window, batches);
    printf("\"produce\":{\"seconds\":%.4f,\"msgs_per_s\":%.1f,\"mb_per_s\":%.2f,", produce_s,
           (double)opt.count / produce_s, mb / produce_s);
    print_latencies("delivery", opt.count);
    printf("},\"consume\":{\"seconds\":%.4f,\"msgs_per_s\":%.1f,\"mb_per_s\":%.2f},", consume_s,
           (double)opt.count / consume_s, mb / consume_s);
    printf("\"verified\":{\"received\":%ld,\"duplicates\":%ld,\"corrupt\":%ld,\"misplaced\":%ld,"
           "\"other\":%ld},",
           cs.received, cs.dups, cs.corrupt, cs.misplaced, cs.foreign);
    print_seen();
    printf("}\n");
    fflush(stdout);
    return ok ? 0 : 1;
}

/* ---- main -------------------------------------------------------------- */

static int
parse_addr(const char *s, size_t len, struct sockaddr_in *out)
{
    char host[64];
    const char *colon = memrchr(s, ':', len);
    char *end;

    if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    long port = strtol(colon + 1, &end, 10);
    if (end != s + len || port < 1 || port > 65535)
        return -1;
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

static void
usage(FILE *out)
{
    fprintf(out,
            "Usage: kafka-load -b BOOTSTRAP -t TOPIC [options]\n"
            "  -n COUNT        messages (default 30000)\n"
            "  -s SIZE         bytes per message, 16 or more (default 1024)\n"
            "  -B BATCH        throughput mode: messages per produce-then-consume cycle (default "
            "12000)\n"
            "  -w WINDOW       throughput mode: messages awaiting delivery at most (default 1000)\n"
            "  -T SECONDS      bound on the whole run (default 60); exit 3 past it\n"
            "  --latency       latency mode: one message at a time (linger.ms=0, acks=1)\n"
            "  -p PARTITION    latency mode: the partition (default 0)\n"
            "  --map FROM=TO   connect to TO (IPv4 host:port) whenever the client dials FROM\n"
            "Prints one JSON line; bench/README.md describes it.\n");
}

int
main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--latency") == 0) {
            opt.latency = 1;
            continue;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "-b") == 0) {
            opt.bootstrap = v;
        } else if (strcmp(a, "-t") == 0) {
            opt.topic = v;
        } else if (strcmp(a, "-n") == 0) {
            opt.count = strtol(v, &end, 10);
        } else if (strcmp(a, "-s") == 0) {
            opt.size = strtol(v, &end, 10);
        } else if (strcmp(a, "-B") == 0) {
            opt.batch = strtol(v, &end, 10);
        } else if (strcmp(a, "-w") == 0) {
            opt.window = strtol(v, &end, 10);
        } else if (strcmp(a, "-T") == 0) {
            opt.timeout = strtol(v, &end, 10);
        } else if (strcmp(a, "-p") == 0) {
            opt.partition = (int)strtol(v, &end, 10);
        } else if (strcmp(a, "--map") == 0) {
            const char *eq = strchr(v, '=');
            if (opt.nmap == MAX_MAPS || eq == NULL ||
                parse_addr(v, (size_t)(eq - v), &opt.map[opt.nmap].from) != 0 ||
                parse_addr(eq + 1, strlen(eq + 1), &opt.map[opt.nmap].to) != 0) {
                fprintf(stderr, "kafka-load: bad --map %s (want IP:PORT=IP:PORT, at most %d)\n", v,
                        MAX_MAPS);
                return 2;
            }
            opt.nmap++;
        } else {
            usage(stderr);
            return 2;
        }
        if (end != NULL && *end != '\0') {
            fprintf(stderr, "kafka-load: %s wants a number, not %s\n", a, v);
            return 2;
        }
    }
    if (opt.bootstrap == NULL || opt.topic == NULL || opt.count < 1 || opt.count > 10000000 ||
        opt.size < 16 || opt.size > 1000000 || opt.window < 1 || opt.batch < 1 || opt.timeout < 1 ||
        opt.partition < 0) {
        usage(stderr);
        return 2;
    }
    signal(SIGALRM, on_alarm);
    alarm((unsigned)opt.timeout + 15); /* if librdkafka itself hangs */
    deadline = now() + (double)opt.timeout;
    run_id = mix((uint64_t)getpid() << 32 ^ (uint64_t)(now() * 1e9));
    return opt.latency ? run_latency() : run_throughput();
}
