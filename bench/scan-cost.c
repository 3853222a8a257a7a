/*
 * scan-cost: what the leak guard's matcher (proxy/lk_match.c) costs per response, in
 * instructions, apart from the rest of the exchange.  It builds the automaton the guard
 * builds for bench/conf/lookout.conf (one broker: pulsar, pulsar+ssl and http internal
 * addresses on 127.0.0.1, each as a URL and as host:port) and scans one body REPS times,
 * with lk_match_scan (which jumps over the bytes where no pattern can start) or
 * lk_match_scan_plain (the automaton stepped on every byte):
 *   head    a response head of bench/run's backend (status line and 5 fields), scanned
 *           field value by field value as lk_guard.c does (jump: lk_match_none first, a
 *           full scan only for a value it does not call clean)
 *   small   bench/run's 200-byte stats JSON (no broker address)
 *   lookup  bench/run's LookupData, as the lookup filter leaves it (external addresses)
 *   64k     64 KiB of the small JSON over and over (a large text body; bench/run's
 *           64k is application/octet-stream, whose body the guard does not read)
 * Per scan = (Ir at REPS=1010 - Ir at REPS=10) / 1000 under callgrind, so start-up cancels.
 *
 *   cc -O2 -D_GNU_SOURCE -Iproxy bench/scan-cost.c build/plain/liblookout.a -o /tmp/scan-cost
 *   valgrind --tool=callgrind --callgrind-out-file=/dev/null /tmp/scan-cost jump small 1010
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_match.h"

static const char small_json[] =
    "{\"msgRateIn\":0.0,\"msgThroughputIn\":0.0,\"msgRateOut\":0.0,\"msgThroughputOut\":0.0,"
    "\"averageMsgSize\":0.0,\"storageSize\":0,\"backlogSize\":0,\"publishers\":[],"
    "\"subscriptions\":{},\"deduplicationStatus\":\"Disabled\"}";
static const char lookup_json[] =
    "{\"brokerUrl\":\"pulsar://10.1.2.3:6650\",\"brokerUrlTls\":\"pulsar+ssl://10.1.2.3:6651\","
    "\"httpUrl\":\"http://10.1.2.3:8080\",\"httpUrlTls\":\"https://10.1.2.3:8443\","
    "\"nativeUrl\":\"pulsar://10.1.2.3:6650\",\"brokerUrlSsl\":\"\"}";
static const char *const head[] = {"nginx", "Thu, 03 Dec 2026 19:30:00 GMT", "application/json",
                                   "200", "keep-alive"};

static size_t hits;

static void
scan(const struct lk_match *m, int jump, const char *p, size_t len)
{
    struct lk_match_state st;
    struct lk_match_hit hit;
    size_t off = 0;

    lk_match_state_init(&st);
    while (jump ? lk_match_scan(m, &st, p, len, &off, &hit)
                : lk_match_scan_plain(m, &st, p, len, &off, &hit))
        hits++;
    while (lk_match_finish(m, &st, &hit))
        hits++;
}

int
main(int argc, char **argv)
{
    static const char *const pats[] = {
        "pulsar://127.0.0.1:16650", "127.0.0.1:16650", "pulsar+ssl://127.0.0.1:16651",
        "127.0.0.1:16651",          "http://127.0.0.1:18080", "127.0.0.1:18080",
    };
    size_t lens[6], n64 = 64 * 1024;
    char err[128], *big;

    if (argc != 4) {
        fprintf(stderr, "usage: scan-cost jump|plain head|small|lookup|64k REPS\n");
        return 2;
    }
    for (size_t i = 0; i < 6; i++)
        lens[i] = strlen(pats[i]);
    struct lk_match *m = lk_match_new(pats, lens, 6, err, sizeof(err));
    if (m == NULL) {
        fprintf(stderr, "scan-cost: %s\n", err);
        return 1;
    }
    int jump = strcmp(argv[1], "jump") == 0;
    long reps = atol(argv[3]);
    big = malloc(n64);
    for (size_t i = 0; i < n64; i++)
        big[i] = small_json[i % (sizeof(small_json) - 1)];
    for (long r = 0; r < reps; r++) {
        if (strcmp(argv[2], "head") == 0) {
            for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
                if (!jump || !lk_match_none(m, head[i], strlen(head[i])))
                    scan(m, jump, head[i], strlen(head[i]));
        } else if (strcmp(argv[2], "small") == 0)
            scan(m, jump, small_json, sizeof(small_json) - 1);
        else if (strcmp(argv[2], "lookup") == 0)
            scan(m, jump, lookup_json, sizeof(lookup_json) - 1);
        else
            scan(m, jump, big, n64);
    }
    printf("%zu hits\n", hits);
    free(big);
    lk_match_free(m);
    return 0;
}
