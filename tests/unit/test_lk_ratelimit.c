/*
 * Tests for proxy/lk_ratelimit.c and its keys: a bucket's burst and refill
 * on a clock of the test's own, Retry-After rounded up, buckets apart by
 * client and by cluster, a table that stays its size under a flood of
 * addresses, threads that share one bucket; limit.requests, limit.burst
 * and limit.exempt as [lookout] and clusters set and inherit them, and
 * each bad value refused at its file:line.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_conf_value.h"
#include "lk_ratelimit.h"
#include "lk_registry.h"
#include "lk_test.h"

#define MS 1000000ull
#define S 1000000000ull
/* the tests' clock starts late, so that no entry of an earlier test, nor
 * the zeroed table, looks like a bucket still filling */
#define T0 (1000000ull * S)

static struct sockaddr_storage
addr(const char *ip)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &s6->sin6_addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, ip, &s4->sin_addr);
    }
    return ss;
}

/* ss as lookout keeps a client's address (struct lk_conn's peer) */
static const struct lk_addr *
addr_of(const struct sockaddr_storage *ss, struct lk_addr *a)
{
    lk_addr_of(a, (const struct sockaddr *)ss);
    return a;
}
#define SA(ss) addr_of(&(ss), &(struct lk_addr){.family = 0})

/* How many requests of a at now pass before the first refused (at most
 * max); *retry_s the refusal's. */
static unsigned
run(const struct sockaddr_storage *a, unsigned zone, const struct lk_rate *r, uint64_t now,
    unsigned max, unsigned *retry_s)
{
    unsigned n = 0;

    *retry_s = 0;
    while (n < max && lk_rate_take(SA(*a), zone, r, now, retry_s) == 0)
        n++;
    return n;
}

static void
test_burst_refill(void)
{
    struct sockaddr_storage a = addr("10.9.0.1");
    struct lk_rate r = {10, 1, 3}; /* 10/s, burst 3: one every 100ms */
    unsigned retry;

    unsigned n = run(&a, 1, &r, T0, 100, &retry);
    ok(n == 3 && retry == 1,
       "a fresh client sends its burst of 3, then waits 1s (ceil of 100ms) (%u, retry %u)", n,
       retry);
    ok(run(&a, 1, &r, T0 + 99 * MS, 100, &retry) == 0, "99ms on: still nothing");
    ok(run(&a, 1, &r, T0 + 100 * MS, 100, &retry) == 1, "100ms on: one request");
    ok(run(&a, 1, &r, T0 + 350 * MS, 100, &retry) == 2, "350ms on: two more (250ms refilled 2.5)");
    ok(run(&a, 1, &r, T0 + 10 * S, 100, &retry) == 3, "long after: the burst again, no more");

    struct lk_rate paced = {2, 1, 1}; /* 2/s without a burst */
    struct sockaddr_storage b = addr("10.9.0.2");
    unsigned passed = 0;
    for (uint64_t t = 0; t < 10 * S; t += 50 * MS)
        passed += run(&b, 1, &paced, T0 + t, 100, &retry);
    ok(passed == 20, "2/s with burst 1, asked every 50ms for 10s: 20 pass (%u)", passed);
}

static void
test_retry_after(void)
{
    struct sockaddr_storage a = addr("10.9.1.1");
    struct lk_rate per_min = {1, 60, 1};
    unsigned retry;

    unsigned n = run(&a, 1, &per_min, T0, 5, &retry);
    ok(n == 1 && retry == 60, "1/m: 60s to wait (%u)", retry);
    n = run(&a, 1, &per_min, T0 + 30 * S, 5, &retry);
    ok(n == 0 && retry == 30, "30s on: 30 (%u)", retry);
    n = run(&a, 1, &per_min, T0 + 59 * S + 500 * MS, 5, &retry);
    ok(n == 0 && retry == 1, "59.5s on: 1, rounded up, never 0 (%u)", retry);
    ok(run(&a, 1, &per_min, T0 + 60 * S, 5, &retry) == 1, "60s on: one passes");

    /* refused requests take nothing: waiting what Retry-After says works */
    struct sockaddr_storage b = addr("10.9.1.2");
    struct lk_rate r = {3, 1, 3};
    ok(run(&b, 1, &r, T0, 3, &retry) == 3, "burst of 3");
    for (int i = 0; i < 1000; i++)
        lk_rate_take(SA(b), 1, &r, T0 + 1 * MS, &retry);
    ok(retry == 1, "a thousand refusals later, Retry-After is still 1 (%u)", retry);
    ok(run(&b, 1, &r, T0 + (uint64_t)retry * S, 3, &retry) == 3,
       "and after it, the client has its burst back");
}

static void
test_apart(void)
{
    struct sockaddr_storage a = addr("10.9.2.1"), b = addr("10.9.2.2"),
                            v6a = addr("2001:db8:9:2::1"), v6b = addr("2001:db8:9:2::ffff"),
                            v6c = addr("2001:db8:9:3::1"), mapped = addr("::ffff:10.9.2.1");
    struct lk_rate r = {1, 60, 2};
    unsigned retry;

    ok(run(&a, 1, &r, T0, 10, &retry) == 2, "10.9.2.1: its burst");
    ok(run(&b, 1, &r, T0, 10, &retry) == 2, "10.9.2.2 is not held back by it");
    ok(run(&a, 2, &r, T0, 10, &retry) == 2, "nor is 10.9.2.1 in another cluster");
    ok(run(&mapped, 1, &r, T0, 10, &retry) == 0, "::ffff:10.9.2.1 is 10.9.2.1");
    ok(run(&v6a, 1, &r, T0, 10, &retry) == 2, "2001:db8:9:2::1: its burst");
    ok(run(&v6b, 1, &r, T0, 10, &retry) == 0, "another address of its /64 shares it");
    ok(run(&v6c, 1, &r, T0, 10, &retry) == 2, "the next /64 does not");

    struct sockaddr_un un;
    memset(&un, 0, sizeof(un));
    un.sun_family = AF_UNIX;
    ok(run((const struct sockaddr_storage *)(void *)&un, 1, &r, T0, 10, &retry) == 10,
       "an address of another family is never limited");
}

static void
test_bounded(void)
{
    struct lk_rate r = {1, 60, 1};
    struct sockaddr_storage victim = addr("10.9.3.1");
    uint64_t ev0 = lk_rate_evictions();
    unsigned retry, passed = 0;

    run(&victim, 3, &r, T0, 1, &retry);
    /* a flood from 4 table's worth of addresses, each once */
    for (uint32_t i = 0; i < 4u * LK_RATE_ENTRIES; i++) {
        struct lk_addr a = {.family = AF_INET};
        uint32_t ip = htonl(0x0a400000u + i); /* 10.64.0.0 on */
        memcpy(a.ip, &ip, 4);
        passed += lk_rate_take(&a, 3, &r, T0, &retry) == 0;
    }
    size_t entries = lk_rate_entries(T0);
    ok(entries <= LK_RATE_ENTRIES, "the table holds at most its %d entries (%zu)", LK_RATE_ENTRIES,
       entries);
    ok(entries > LK_RATE_ENTRIES / 2, "and is well used (%zu)", entries);
    ok(passed == 4u * LK_RATE_ENTRIES, "each new address had its burst of 1");
    ok(lk_rate_evictions() - ev0 >= 3u * LK_RATE_ENTRIES,
       "the rest took over buckets still filling (%llu evictions)",
       (unsigned long long)(lk_rate_evictions() - ev0));
    ok(lk_rate_entries(T0 + 3600 * S) == 0, "an hour on, every bucket is full: none held");
}

static struct lk_rate shared_rate = {1, 60, 1000};
static void *
hammer(void *arg)
{
    struct sockaddr_storage a = addr("10.9.4.1");
    unsigned *passed = arg, retry;

    for (int i = 0; i < 5000; i++)
        *passed += lk_rate_take(SA(a), 4, &shared_rate, T0, &retry) == 0;
    return NULL;
}

static void
test_threads(void)
{
    pthread_t t[4];
    unsigned passed[4] = {0};

    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, &passed[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ok(passed[0] + passed[1] + passed[2] + passed[3] == 1000,
       "four threads on one bucket of 1000 pass 1000 in all (%u)",
       passed[0] + passed[1] + passed[2] + passed[3]);
}

/* Config ----------------------------------------------------------------------------- */

static char err[1024];

static struct lk_conf *
load(const char *const *lines)
{
    char text[2048] = "";

    for (size_t i = 0; lines[i] != NULL; i++) {
        strcat(text, lines[i]);
        strcat(text, "\n");
    }
    return lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
}

#define LOAD(...) load((const char *const[]){__VA_ARGS__, NULL})
#define CLUSTER(name)                                                                              \
    "[pulsar " name "]", "[broker " name "/b]", "advertisedListeners = i:http://h:1"

static void
test_parse_rate(void)
{
    unsigned n = 0, per = 0;

    ok(lk_parse_rate("100/s", LK_RATE_MAX, &n, &per) == 0 && n == 100 && per == 1, "100/s");
    ok(lk_parse_rate("30/m", LK_RATE_MAX, &n, &per) == 0 && n == 30 && per == 60, "30/m");
    ok(lk_parse_rate("1000000/s", LK_RATE_MAX, &n, &per) == 0 && n == 1000000, "1000000/s");
    static const char *const bad[] = {"100/h",
                                      "0/s",
                                      "abc",
                                      "100",
                                      "/s",
                                      "100/",
                                      "1000001/s",
                                      "-1/s",
                                      "1.5/s",
                                      " 1/s",
                                      "1/s ",
                                      "1/S",
                                      "99999999999999999/s",
                                      ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ok(lk_parse_rate(bad[i], LK_RATE_MAX, &n, &per) == -1, "'%s' refused", bad[i]);
}

static void
test_keys(void)
{
    struct lk_conf *c = LOAD(CLUSTER("p"));
    const struct lk_cluster *cl;

    if (ok(c != NULL, "loads (%s)", err))
        ok(c->clusters[0]->limit.requests == 0, "off by default");
    lk_conf_unref(c);

    c = LOAD("[lookout]", "limit.requests = 100/s", "limit.exempt = 10.0.0.0/8, ::1", CLUSTER("p"),
             "[pulsar q]", "limit.requests = 30/m", "limit.burst = 5", "[broker q/b]",
             "advertisedListeners = i:http://h:1", "[pulsar r]", "limit.requests = off",
             "[broker r/b]", "advertisedListeners = i:http://h:1", "[pulsar s]",
             "limit.exempt = 192.0.2.0/24", "[broker s/b]", "advertisedListeners = i:http://h:1");
    if (!ok(c != NULL, "loads (%s)", err))
        return;
    cl = lk_conf_cluster(c, "p");
    ok(cl->limit.requests == 100 && cl->limit.per_s == 1 && cl->limit.burst == 100,
       "p inherits 100/s, and its burst is the rate's N (%u %u %u)", cl->limit.requests,
       cl->limit.per_s, cl->limit.burst);
    ok(cl->nlimit_exempt == 2 && cl->limit_exempt != c->limit_exempt &&
           cl->limit_exempt[0].bits == 8,
       "and [lookout]'s two exempt networks, its own copy");
    cl = lk_conf_cluster(c, "q");
    ok(cl->limit.requests == 30 && cl->limit.per_s == 60 && cl->limit.burst == 5,
       "q: its own 30/m, burst 5");
    cl = lk_conf_cluster(c, "r");
    ok(cl->limit.requests == 0, "r: off overrides [lookout]'s");
    cl = lk_conf_cluster(c, "s");
    ok(cl->nlimit_exempt == 1 && cl->limit_exempt[0].bits == 24, "s: its own exempt networks");
    ok(lk_conf_cluster(c, "p")->limit_zone != lk_conf_cluster(c, "q")->limit_zone,
       "each cluster's buckets apart");
    char *dump = lk_conf_dump_text(c);
    ok(strstr(dump, "cluster p (pulsar): ") != NULL &&
           strstr(dump, ", limit.requests 100/s burst 100 (2 exempt networks), ") != NULL &&
           strstr(dump, ", limit.requests 30/m burst 5 (2 exempt networks), ") != NULL,
       "--check shows each cluster's limit as resolved");
    ok(strstr(strstr(dump, "cluster r (pulsar)"), "limit.requests") ==
           strstr(strstr(dump, "cluster s (pulsar)"), "limit.requests"),
       "and none for r, which turned it off");
    free(dump);
    lk_conf_unref(c);

    c = LOAD("[lookout]", "limit.burst = 10", "[pulsar p]", "limit.requests = 1000/s",
             "[broker p/b]", "advertisedListeners = i:http://h:1");
    ok(c != NULL && c->clusters[0]->limit.burst == 10,
       "a cluster's rate with [lookout]'s burst: each key inherits on its own (%s)", err);
    struct lk_conf *again =
        LOAD("[pulsar q]", "[broker q/b]", "advertisedListeners = i:http://h:1", "[pulsar p]",
             "[broker p/b]", "advertisedListeners = i:http://h:1");
    ok(c != NULL && again != NULL &&
           lk_conf_cluster(again, "p")->limit_zone == c->clusters[0]->limit_zone &&
           lk_conf_cluster(again, "p")->index != c->clusters[0]->index,
       "a reload that moves p keeps its buckets (keyed by its name)");
    lk_conf_unref(again);
    lk_conf_unref(c);
}

/* lines refused with "WHERE MSG". */
static void
expect_err(const char *const *lines, const char *where, const char *msg)
{
    char want[512];
    struct lk_conf *c = load(lines);

    snprintf(want, sizeof(want), "%s %s", where, msg);
    ok(c == NULL, "refused");
    ok_str(err, want, "message");
    lk_conf_unref(c);
}

static void
test_errors(void)
{
    static const struct {
        const char *line, *err;
    } t[] = {
        {"limit.requests = 100/h",
         "limit.requests: '100/h' is not a rate: N/s or N/m, N from 1 to 1000000 (or off)"},
        {"limit.requests = 0/s",
         "limit.requests: '0/s' is not a rate: N/s or N/m, N from 1 to 1000000 (or off)"},
        {"limit.requests = abc",
         "limit.requests: 'abc' is not a rate: N/s or N/m, N from 1 to 1000000 (or off)"},
        {"limit.requests = 100",
         "limit.requests: '100' is not a rate: N/s or N/m, N from 1 to 1000000 (or off)"},
        {"limit.burst = 0", "limit.burst: '0' is not a number from 1 to 1000000"},
        {"limit.burst = 1000001", "limit.burst: '1000001' is not a number from 1 to 1000000"},
        {"limit.exempt = 10.0.0.1/8", "limit.exempt: '10.0.0.1/8' has host bits set (write the "
                                      "network, or the address alone for one host)"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        subtest("[lookout] %s", t[i].line);
        expect_err((const char *const[]){"# x", "[lookout]", t[i].line, CLUSTER("p"), NULL},
                   "t.conf:3: [lookout]", t[i].err);
        subtest("[pulsar p] %s", t[i].line);
        expect_err((const char *const[]){"[pulsar p]", "# x", "", "", t[i].line, "[broker p/b]",
                                         "advertisedListeners = i:http://h:1", NULL},
                   "t.conf:5: [pulsar p]", t[i].err);
    }
    struct lk_conf *c =
        LOAD("[kafka k]", "lookupListenerName = EXTERNAL",
             "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",
             "inter.broker.listener.name = INTERNAL", "limit.requests = 10/s", "[broker k/1]",
             "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b:9093");
    ok(c == NULL && strstr(err, "t.conf:5: [kafka k] limit.requests: unknown key") != NULL,
       "a Kafka cluster has no HTTP requests to limit (%s)", err);
    lk_conf_unref(c);
}

const struct lk_test_case lk_test_ratelimit[] = {
    {"ratelimit/burst_refill", test_burst_refill},
    {"ratelimit/retry_after", test_retry_after},
    {"ratelimit/apart", test_apart},
    {"ratelimit/bounded", test_bounded},
    {"ratelimit/threads", test_threads},
    {"ratelimit/parse_rate", test_parse_rate},
    {"ratelimit/keys", test_keys},
    {"ratelimit/errors", test_errors},
    {NULL, NULL},
};
