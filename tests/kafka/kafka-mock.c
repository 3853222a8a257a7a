/*
 * kafka-mock: a librdkafka mock cluster as a test fixture.  It starts an
 * N-broker cluster (rd_kafka_mock_cluster_new: node ids 1..N, each broker
 * on 127.0.0.1 and an ephemeral port), creates the topics named on the
 * command line, asks the cluster for its own Metadata through a real
 * librdkafka client, prints that as one JSON line on stdout, and then runs
 * until its standard input reaches end of file (or --lifetime seconds
 * pass), when it destroys the cluster and exits 0.  A test holds the write
 * end of a pipe on our stdin, so the cluster goes away with the test even
 * when the test dies.  librdkafka 2.0.2's mock speaks only Metadata v0-2,
 * FindCoordinator v0-2, Produce v0-7 and Fetch v0-11 (and answers
 * ApiVersions v3+ with a non-standard error-35 body): the flexible versions
 * are tests/integration/bin/kafka-testbroker's job.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define MAX_BROKERS 16
#define MAX_TOPICS 32
#define METADATA_TIMEOUT_MS 10000

struct topic_arg {
    const char *name;
    int partitions;
    int replicas;
};

static void
usage(FILE *out)
{
    fprintf(out, "Usage: kafka-mock [--lifetime SECONDS] [--rack] BROKERS [TOPIC:PARTITIONS[:REPLICAS]]...\n"
                 "\n"
                 "Starts a librdkafka mock cluster of BROKERS (1-%d) brokers with node ids 1..BROKERS\n"
                 "on 127.0.0.1, creates each TOPIC (partition p led by broker p %% BROKERS + 1),\n"
                 "prints one JSON line\n"
                 "  {\"bootstrap\":\"127.0.0.1:P1,...\",\"brokers\":[{\"id\":1,\"host\":\"127.0.0.1\",\"port\":P1},...],\n"
                 "   \"topics\":[{\"name\":\"t\",\"partitions\":3,\"leaders\":[1,2,3]},...]}\n"
                 "and runs until stdin is closed (or SECONDS pass; default 1800, 0 = no limit).\n"
                 "--rack gives broker N the rack \"rN\".  Exits 0 after a clean shutdown.\n",
            MAX_BROKERS);
}

/*
 * Parses "name:partitions[:replicas]" in place; replicas default to
 * min(3, brokers).  Kafka topic names never hold a ':'.
 */
static int
parse_topic(char *arg, int brokers, struct topic_arg *t)
{
    char *colon = strchr(arg, ':'), *end;
    long n, r = brokers < 3 ? brokers : 3;

    if (colon == NULL || colon == arg)
        return -1;
    *colon = '\0';
    n = strtol(colon + 1, &end, 10);
    if (*end == ':')
        r = strtol(end + 1, &end, 10);
    if (*end != '\0' || n < 1 || n > 1000 || r < 1 || r > brokers)
        return -1;
    t->name = arg;
    t->partitions = (int)n;
    t->replicas = (int)r;
    return 0;
}

/* Writes s as a JSON string (names come from argv and from the mock). */
static void
json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static int
cmp_broker(const void *a, const void *b)
{
    const rd_kafka_metadata_broker_t *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/*
 * Asks the cluster for its Metadata through a client of its own, so what we
 * print is what a client is told (ids, hosts and ports), not our guess at
 * the mock's internals.  Retries until every broker and every topic shows
 * up, for at most METADATA_TIMEOUT_MS.
 */
static int
print_metadata(const char *bootstrap, int brokers, const struct topic_arg *topics, int ntopics)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    const struct rd_kafka_metadata *md = NULL;
    int rc = -1;

    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof(err)) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "client.id", "kafka-mock-self", err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-mock: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (rk == NULL) {
        fprintf(stderr, "kafka-mock: rd_kafka_new: %s\n", err);
        return -1;
    }
    for (int tries = 0; tries < METADATA_TIMEOUT_MS / 100; tries++) {
        rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, 2000);
        int seen = 0;

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            md = NULL;
            continue;
        }
        for (int i = 0; i < ntopics; i++)
            for (int j = 0; j < md->topic_cnt; j++)
                if (strcmp(md->topics[j].topic, topics[i].name) == 0 &&
                    md->topics[j].partition_cnt == topics[i].partitions)
                    seen++;
        if (md->broker_cnt == brokers && seen == ntopics)
            break;
        rd_kafka_metadata_destroy(md);
        md = NULL;
        usleep(100 * 1000);
    }
    if (md == NULL) {
        fprintf(stderr, "kafka-mock: the cluster did not show %d brokers and %d topics within %d ms\n",
                brokers, ntopics, METADATA_TIMEOUT_MS);
        goto out;
    }

    rd_kafka_metadata_broker_t sorted[MAX_BROKERS];
    memcpy(sorted, md->brokers, sizeof(sorted[0]) * (size_t)md->broker_cnt);
    qsort(sorted, (size_t)md->broker_cnt, sizeof(sorted[0]), cmp_broker);

    printf("{\"bootstrap\":");
    json_str(stdout, bootstrap);
    printf(",\"brokers\":[");
    for (int i = 0; i < md->broker_cnt; i++) {
        printf("%s{\"id\":%" PRId32 ",\"host\":", i ? "," : "", sorted[i].id);
        json_str(stdout, sorted[i].host);
        printf(",\"port\":%d}", sorted[i].port);
    }
    printf("],\"topics\":[");
    for (int i = 0; i < ntopics; i++) {
        for (int j = 0; j < md->topic_cnt; j++) {
            const rd_kafka_metadata_topic_t *t = &md->topics[j];
            if (strcmp(t->topic, topics[i].name) != 0)
                continue;
            printf("%s{\"name\":", i ? "," : "");
            json_str(stdout, t->topic);
            printf(",\"partitions\":%d,\"leaders\":[", t->partition_cnt);
            /* the mock lists partitions in index order */
            for (int p = 0; p < t->partition_cnt; p++)
                printf("%s%" PRId32, p ? "," : "", t->partitions[p].leader);
            printf("]}");
            break;
        }
    }
    printf("]}\n");
    fflush(stdout);
    rc = 0;
    rd_kafka_metadata_destroy(md);
out:
    rd_kafka_destroy(rk);
    return rc;
}

/* Blocks until stdin reaches EOF (or errors), or the deadline passes. */
static void
wait_for_eof(long lifetime)
{
    time_t end = lifetime > 0 ? time(NULL) + lifetime : 0;
    char buf[256];

    for (;;) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int ms = 1000;

        if (end != 0 && time(NULL) >= end) {
            fprintf(stderr, "kafka-mock: lifetime of %ld s is over\n", lifetime);
            return;
        }
        int n = poll(&p, 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return;
        if (n == 0)
            continue;
        ssize_t r = read(STDIN_FILENO, buf, sizeof(buf));
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            return;
    }
}

/*
 * The mock's brokers listen with a backlog of 5.  A burst of connections
 * (lookout opens one to a broker for each client, and 103-kafka-clients.t
 * sends 200 at once) overflows that; the kernel then answers with SYN
 * cookies, and a connection whose first segments were dropped for the full
 * queue is reset when a later segment fails the cookie check.  Brokers
 * listen with more room (Kafka's socket.listen.backlog.size is 50), so
 * every listening socket of ours, all of them the mock's, is given the
 * system's maximum: listen() again on a listening socket only changes its
 * backlog.
 */
static void
widen_backlogs(void)
{
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096 ? (int)rl.rlim_cur : 4096;

    for (int fd = 3; fd < max; fd++) {
        int on = 0;
        socklen_t len = sizeof(on);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == 0 && on)
            listen(fd, SOMAXCONN);
    }
}

int
main(int argc, char **argv)
{
    long lifetime = 1800;
    int rack = 0, brokers, ntopics = 0, argi = 1;
    struct topic_arg topics[MAX_TOPICS];
    char err[512];
    rd_kafka_conf_t *conf;
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mc;
    char *end;

    for (; argi < argc && strncmp(argv[argi], "--", 2) == 0; argi++) {
        if (strcmp(argv[argi], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[argi], "--rack") == 0) {
            rack = 1;
        } else if (strcmp(argv[argi], "--lifetime") == 0 && argi + 1 < argc) {
            lifetime = strtol(argv[++argi], &end, 10);
            if (*end != '\0' || lifetime < 0) {
                usage(stderr);
                return 2;
            }
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (argi >= argc) {
        usage(stderr);
        return 2;
    }
    brokers = (int)strtol(argv[argi++], &end, 10);
    if (*end != '\0' || brokers < 1 || brokers > MAX_BROKERS) {
        usage(stderr);
        return 2;
    }
    for (; argi < argc; argi++) {
        if (ntopics == MAX_TOPICS || parse_topic(argv[argi], brokers, &topics[ntopics]) != 0) {
            fprintf(stderr, "kafka-mock: bad topic '%s' (want name:partitions[:replicas], "
                            "at most %d topics, replicas <= brokers)\n",
                    argv[argi], MAX_TOPICS);
            return 2;
        }
        ntopics++;
    }
    /* A test that goes away closes our stdin; never die of SIGPIPE on stdout. */
    signal(SIGPIPE, SIG_IGN);

    /* The cluster needs an rd_kafka_t for its bookkeeping; it never connects
     * (so its notice about having no bootstrap.servers is noise). */
    conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "4", err, sizeof(err));
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (rk == NULL) {
        fprintf(stderr, "kafka-mock: rd_kafka_new: %s\n", err);
        return 1;
    }
    mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (mc == NULL) {
        fprintf(stderr, "kafka-mock: rd_kafka_mock_cluster_new failed\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    widen_backlogs();
    for (int i = 1; rack && i <= brokers; i++) {
        char name[16];
        snprintf(name, sizeof(name), "r%d", i);
        rd_kafka_mock_broker_set_rack(mc, i, name);
    }
    for (int i = 0; i < ntopics; i++) {
        rd_kafka_resp_err_t e =
            rd_kafka_mock_topic_create(mc, topics[i].name, topics[i].partitions, topics[i].replicas);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "kafka-mock: topic %s: %s\n", topics[i].name, rd_kafka_err2str(e));
            rd_kafka_mock_cluster_destroy(mc);
            rd_kafka_destroy(rk);
            return 1;
        }
        /* The mock picks leaders from a random start; tests want to know them
         * beforehand: partition p is led by broker p % N + 1. */
        for (int p = 0; p < topics[i].partitions; p++)
            rd_kafka_mock_partition_set_leader(mc, topics[i].name, p, p % brokers + 1);
    }

    int rc = print_metadata(rd_kafka_mock_cluster_bootstraps(mc), brokers, topics, ntopics);
    if (rc == 0)
        wait_for_eof(lifetime);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return rc == 0 ? 0 : 1;
}
