/*
 * Fuzzes the live map's build (proxy/lk_live.c lk_live_build_sets over
 * lk_conf_load_live): a snapshot of a cluster's store, as lk_meta.h hands
 * it over, made into brokers next to the config's static ones.  The first
 * byte picks the cluster (Pulsar "prod" or Kafka "events"); the rest is up
 * to 12 registrations separated by NUL, each "znode\ndocument", given
 * sorted by name with duplicates dropped (the watcher's guarantee).
 * Invariants: no crash, leak or undefined behaviour; the build never
 * fails (the file is valid alone, and whatever a registration breaks is
 * left out); every registration is exactly one of: a live broker of its
 * name, overridden by the static section of its name, or refused with a
 * reason; no two brokers of the cluster share an address, and the address
 * index finds each broker by each of its addresses; a live broker's
 * IP-literal internal addresses are inside internal_networks (a naive
 * matcher here) and, for Kafka, its lookup listener speaks SSL as the
 * cluster's map says; building twice prints the same map.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_conf.h"
#include "lk_live.h"
#include "lk_log.h"
#include "lk_meta.h"

static const char conf_text[] =
    "[pulsar prod]\n"
    "metadataStoreUrl = zk:zk1:2181/pulsar\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "internal_networks = 10.0.0.0/8, fd00::/8\n"
    "webServiceUrl = http://127.0.0.3:8080\n"
    "[broker prod/10.0.0.7:8080]\n"
    "advertisedListeners = internal:http://10.0.0.7:8080,external:http://s7.example.com:18080\n"
    "[kafka events]\n"
    "zookeeper.connect = zk1:2181/kafka\n"
    "lookupListenerName = EXTERNAL\n"
    "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL,REPLICATION:PLAINTEXT\n"
    "inter.broker.listener.name = INTERNAL\n"
    "internal_networks = 10.0.0.0/8, fd00::/8\n"
    "bootstrap.servers = bootstrap.example.com:9093\n"
    "[broker events/1]\n"
    "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9093\n";

#define MAX_NODES 12


static int
by_name(const void *a, const void *b)
{
    return strcmp(((const struct lk_meta_node *)a)->name, ((const struct lk_meta_node *)b)->name);
}

/* One node's fate: 1 live broker, 2 overridden, 3 refused; counted. */
static void
account(const struct lk_cluster *cl, const char *name)
{
    int fates = 0;

    for (size_t k = 0; k < cl->nbrokers; k++)
        if (strcmp(cl->brokers[k]->id, name) == 0) {
            const struct lk_broker *b = cl->brokers[k];
            LK_FUZZ_CHECK(b->live || b->overrides);
            fates++;
        }
    for (size_t k = 0; k < cl->nrejects; k++)
        if (strcmp(cl->rejects[k].znode, name) == 0) {
            LK_FUZZ_CHECK(cl->rejects[k].reason[0] != '\0');
            fates++;
        }
    LK_FUZZ_CHECK(fates == 1);
}

/* The scheme of b's first address (listener, then scheme order) at u's
 * host:port. */
static enum lk_scheme
first_scheme(const struct lk_broker *b, const struct lk_url *u)
{
    for (size_t l = 0; l < b->nlisteners; l++)
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *v = b->listeners[l].addr[sc];
            if (v != NULL && v->port == u->port && strcasecmp(v->host, u->host) == 0)
                return (enum lk_scheme)sc;
        }
    return LK_SCHEME__COUNT;
}

static void
check_brokers(const struct lk_cluster *cl)
{
    for (size_t k = 0; k < cl->nbrokers; k++) {
        const struct lk_broker *b = cl->brokers[k];

        LK_FUZZ_CHECK(b->internal != NULL && b->cluster == cl && b->index < SIZE_MAX);
        for (size_t l = 0; l < b->nlisteners; l++)
            for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
                const struct lk_url *u = b->listeners[l].addr[sc];
                enum lk_scheme found;
                if (u == NULL)
                    continue;
                LK_FUZZ_CHECK(lk_cluster_find_addr(cl, lk_str_c(u->host), u->port, &found) == b);
                /* Pulsar lets one host:port carry two schemes of a listener
                 * (http://h:1 and pulsar://h:1): the scheme found is then
                 * the first, in listener and scheme order. */
                LK_FUZZ_CHECK(found == first_scheme(b, u));
                /* the naive way: no other broker has it */
                for (size_t o = 0; o < cl->nbrokers; o++)
                    for (size_t ol = 0; o != k && ol < cl->brokers[o]->nlisteners; ol++)
                        for (int osc = 0; osc < LK_SCHEME__COUNT; osc++) {
                            const struct lk_url *v = cl->brokers[o]->listeners[ol].addr[osc];
                            LK_FUZZ_CHECK(v == NULL || v->port != u->port ||
                                          strcasecmp(v->host, u->host) != 0);
                        }
            }
        if (!b->live)
            continue;
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
            LK_FUZZ_CHECK(b->internal->addr[sc] == NULL || lk_fuzz_inside(b->internal->addr[sc]->host) != 0);
        if (cl->proto == LK_PROTO_KAFKA)
            LK_FUZZ_CHECK(b->lookup != NULL && lk_kafka_listener_security(b->lookup) == LK_KAFKA_SSL);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lk_meta_node nodes[MAX_NODES];
    char *copy, *p, *end, err[1024];
    size_t n = 0;

    if (size == 0)
        return 0;
    lk_log_level = LK_ERR - 1; /* quiet */
    const char *cname = data[0] % 2 ? "events" : "prod";
    copy = malloc(size);
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    end = copy + size - 1;
    for (p = copy; p <= end && n < MAX_NODES; p += strlen(p) + 1) {
        char *nl = strchr(p, '\n');
        if (nl == NULL || nl == p)
            continue;
        *nl = '\0';
        nodes[n].name = p;
        nodes[n].data = (const uint8_t *)nl + 1;
        nodes[n].len = strlen(nl + 1);
        n++;
    }
    qsort(nodes, n, sizeof(*nodes), by_name);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || strcmp(nodes[u - 1].name, nodes[i].name) != 0)
            nodes[u++] = nodes[i];
    n = u;

    struct lk_live_set set = {cname, nodes, n, NULL};
    struct lk_conf *a = lk_live_build_sets("fuzz.conf", conf_text, sizeof(conf_text) - 1, &set, 1,
                                           0, err, sizeof(err));
    if (a == NULL) {
        fprintf(stderr, "%s\n", err);
        LK_FUZZ_CHECK(a != NULL);
    }
    LK_FUZZ_CHECK(set.skip == NULL);
    struct lk_conf *b = lk_live_build_sets("fuzz.conf", conf_text, sizeof(conf_text) - 1, &set,
                                           1, 0, err, sizeof(err));
    LK_FUZZ_CHECK(b != NULL);
    const struct lk_cluster *cl = lk_conf_cluster(a, cname);
    LK_FUZZ_CHECK(cl != NULL && cl->zk_read && cl->nregistrations == n);
    for (size_t i = 0; i < n; i++)
        account(cl, nodes[i].name);
    size_t live = 0, over = 0;
    for (size_t k = 0; k < cl->nbrokers; k++) {
        live += cl->brokers[k]->live;
        over += cl->brokers[k]->overrides;
    }
    LK_FUZZ_CHECK(live + over + cl->nrejects == n);
    check_brokers(cl);
    char *da = lk_conf_dump_text(a), *db = lk_conf_dump_text(b);
    LK_FUZZ_CHECK(strcmp(da, db) == 0);
    free(da);
    free(db);
    lk_conf_unref(a);
    lk_conf_unref(b);
    free(copy);
    return 0;
}
