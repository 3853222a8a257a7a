/*
 * kafka-rebootstrap-check: a librdkafka consumer that shows whether its
 * client honours KIP-1102's top-level REBOOTSTRAP_REQUIRED in a Metadata
 * answer (tests/integration/124-kafka-rebootstrap.t).
 *
 *   kafka-rebootstrap-check BOOTSTRAP TOPIC SECONDS
 *
 * It consumes partition 0 of TOPIC from offset 0 for SECONDS (the simple
 * consumer, no group),
 * with long Fetch polls (fetch.wait.max.ms 3000: a request is under way
 * on its broker connection most of the time) and a Metadata refresh every
 * 200 ms, so that a Metadata request comes while a Fetch waits.  Every
 * line librdkafka logs (debug=metadata,broker) goes to stdout as
 * "log FAC: TEXT", then "end" (stdout is line-buffered: a test reads it as
 * it comes).
 *
 * librdkafka learned KIP-1102 in 2.11.0 (its CHANGELOG): it then sends
 * Metadata up to v13 (rd_kafka_MetadataRequest0, metadata_max_version
 * 13), reads the top-level ErrorCode (rd_kafka_parse_Metadata: "Metadata
 * response: received top level error code"), and on
 * RD_KAFKA_RESP_ERR_REBOOTSTRAP_REQUIRED (129) starts a re-bootstrap
 * (rd_kafka_handle_Metadata -> rd_kafka_rebootstrap: "Starting
 * re-bootstrap sequence").  An older librdkafka (Debian's 2.0.2) cannot,
 * so this exits 77 (skip) when the librdkafka it runs with is older: it is
 * built against the installed headers and may run with a newer library
 * (LD_LIBRARY_PATH), whose extra properties it sets by name.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

static void
on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    (void)level;
    printf("log %s: %s\n", fac, buf);
}

static int
set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char err[256];

    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s=%s: %s\n", k, v, err);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    char err[512];

    if (argc != 4) {
        fprintf(stderr, "usage: kafka-rebootstrap-check BOOTSTRAP TOPIC SECONDS\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("version %s\n", rd_kafka_version_str());
    if (rd_kafka_version() < 0x020b0000) {
        printf("skip librdkafka %s has no KIP-1102 (2.11.0 added it)\n", rd_kafka_version_str());
        return 77;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, on_log);
    if (set(conf, "bootstrap.servers", argv[1]) != 0 ||
        set(conf, "debug", "metadata,broker") != 0 || set(conf, "fetch.wait.max.ms", "3000") != 0 ||
        set(conf, "topic.metadata.refresh.interval.ms", "200") != 0 ||
        set(conf, "metadata.recovery.strategy", "rebootstrap") != 0 ||
        set(conf, "reconnect.backoff.max.ms", "200") != 0)
        return 1;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (rk == NULL) {
        fprintf(stderr, "rd_kafka_new: %s\n", err);
        return 1;
    }
    /* The simple consumer: no group, so no coordinator connection, and
     * the Metadata refreshes go to the one broker it fetches from. */
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[2], NULL);
    if (rd_kafka_consume_start(rkt, 0, 0) != 0) { /* from offset 0: no ListOffsets */
        fprintf(stderr, "consume_start: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
        return 1;
    }
    time_t end = time(NULL) + atoi(argv[3]);
    while (time(NULL) < end) {
        rd_kafka_message_t *m = rd_kafka_consume(rkt, 0, 100);
        if (m != NULL)
            rd_kafka_message_destroy(m);
        rd_kafka_poll(rk, 0);
    }
    rd_kafka_consume_stop(rkt, 0);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    printf("end\n");
    return 0;
}
