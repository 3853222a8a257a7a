/*
 * Tests for proxy/lk_registry.c: broker registrations as Pulsar and Kafka
 * write them in ZooKeeper (byte for byte in the shapes of the facts:
 * pulsar.md section 3, kafka.md section 0 and KIP-103), the networks
 * that bound what lookout dials and binds, the ZooKeeper connect strings,
 * and the config keys that carry them.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_meta.h"
#include "lk_registry.h"
#include "lk_test.h"

static char err[1024];

/* Joins lines, each followed by "\n", and loads them as t.conf. */
static struct lk_conf *
load(const char *const *lines)
{
    char text[4096] = "";
    struct lk_conf *c;

    for (size_t i = 0; lines[i] != NULL; i++) {
        strcat(text, lines[i]);
        strcat(text, "\n");
    }
    err[0] = '\0';
    c = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    return c;
}
#define CONF(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A Pulsar cluster with named internal and lookup listeners. */
#define P_PROD                                                                                     \
    "[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",           \
        "internal_networks = 10.0.0.0/8, fd00::/8", "[broker prod/s1]",                            \
        "advertisedListeners = internal:pulsar://10.9.9.9:6650,internal:http://10.9.9.9:8080,"     \
        "external:pulsar://s1.example.com:16650,external:http://s1.example.com:18080"
/* One with neither, as a cluster with only internal listeners has. */
#define P_EDGE                                                                                     \
    "[pulsar edge]", "internal_networks = 192.168.0.0/16", "[broker edge/s1]",                     \
        "advertisedListeners = internal:http://192.168.9.9:8080"
/* A Kafka cluster, the unit tests' usual one. */
#define K_EVENTS                                                                                   \
    "[kafka events]", "lookupListenerName = EXTERNAL",                                             \
        "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",                        \
        "inter.broker.listener.name = INTERNAL", "internal_networks = 10.0.0.0/8,fd00::/8",        \
        "[broker events/1]",                                                                       \
        "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9093"

static const struct lk_cluster *
cluster(struct lk_conf *c, const char *name)
{
    return c != NULL ? lk_conf_cluster(c, name) : NULL;
}

/* "name:url,..." of every address, listeners in order, schemes in enum
 * order, with the internal listener's name starred and the lookup's
 * marked '>': what the assertions compare. */
static const char *
show(const struct lk_registration *r)
{
    static char buf[1024];
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < r->nlisteners; i++)
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *u = r->listeners[i].addr[sc];
            if (u != NULL)
                off +=
                    (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%s%s:%s", off != 0 ? "," : "",
                                     i == r->internal ? "*"
                                     : i == r->lookup ? ">"
                                                      : "",
                                     r->listeners[i].name, u->text);
        }
    return buf;
}

/* Parses doc for cl and checks the outcome: want is show()'s text, or
 * NULL for a refusal whose reason contains why. */
static void
expect(const struct lk_cluster *cl, const char *znode, const char *doc, const char *want,
       const char *why)
{
    struct lk_registration r;
    int rc;

    err[0] = '\0';
    rc = lk_registration_parse(cl, znode, doc, strlen(doc), &r, err, sizeof(err));
    if (want != NULL) {
        if (ok(rc == 0, "accepted (%s)", err)) {
            ok_str(show(&r), want, "listeners");
            ok_str(r.id, znode, "id");
        }
    } else {
        ok(rc == -1, "refused");
        ok(strstr(err, why) != NULL, "reason '%s' says '%s'", err, why);
        ok(r.listeners == NULL && r.nlisteners == 0 && r.id == NULL, "nothing left over");
    }
    lk_registration_free(&r);
}

/* Pulsar ------------------------------------------------------------------------ */

/* The facts' LocalBrokerData example, with its trimmed cpu filled in. */
static const char local_broker_data[] =
    "{\"webServiceUrl\":\"http://broker-1:8080\",\"pulsarServiceUrl\":\"pulsar://broker-1:6650\","
    "\"persistentTopicsEnabled\":true,\n \"nonPersistentTopicsEnabled\":true,\"cpu\":{\"usage\":"
    "12.5,\"limit\":400.0},\"bundles\":[\"my-tenant/my-namespace/0x4ccccccb_0x66666664\"],\n "
    "\"brokerVersionString\":\"3.1.0-SNAPSHOT\",\"protocols\":{},\n "
    "\"advertisedListeners\":{\"internal\":{\"brokerServiceUrl\":\"pulsar://broker-1:6650\"}},\n "
    "\"loadManagerClassName\":\"org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl\""
    ",\n \"startTimestamp\":1690940955211,\"maxResourceUsage\":0.140625,\"loadReportType\":"
    "\"LocalBrokerData\"}";

static void
test_pulsar_local_broker_data(void)
{
    struct lk_conf *c = load(CONF(P_EDGE, P_PROD));
    const struct lk_cluster *edge = cluster(c, "edge"), *prod = cluster(c, "prod");

    if (!ok(edge != NULL && prod != NULL, "config loads (%s)", err))
        goto end;
    /* The map gives the binary address, webServiceUrl the HTTP one;
     * broker-1 is a name, checked when it is dialled. */
    subtest("facts example");
    expect(edge, "broker-1:8080", local_broker_data,
           "*internal:http://broker-1:8080,*internal:pulsar://broker-1:6650", NULL);
    subtest("no external listener");
    expect(prod, "broker-1:8080", local_broker_data, NULL,
           "no listener 'external', the lookup listener");
    /* With TLS, IPs and an external listener, as a 4.x broker with
     * advertisedListeners writes it. */
    subtest("with external");
    expect(
        prod, "10.0.0.11:8080",
        "{\"webServiceUrl\":\"http://10.0.0.11:8080\",\"webServiceUrlTls\":"
        "\"https://10.0.0.11:8443\",\"pulsarServiceUrl\":\"pulsar://10.0.0.11:6650\","
        "\"pulsarServiceUrlTls\":\"pulsar+ssl://10.0.0.11:6651\",\"persistentTopicsEnabled\":"
        "true,\"nonPersistentTopicsEnabled\":true,\"cpu\":{\"usage\":1.0,\"limit\":400.0},"
        "\"bundles\":[],\"brokerVersionString\":\"3.3.2\",\"protocols\":{},"
        "\"advertisedListeners\":{\"internal\":{\"brokerServiceUrl\":\"pulsar://10.0.0.11:6650\","
        "\"brokerServiceUrlTls\":\"pulsar+ssl://10.0.0.11:6651\"},\"external\":{"
        "\"brokerServiceUrl\":\"pulsar://b1.example.com:16650\",\"brokerHttpUrl\":"
        "\"http://b1.example.com:18080\"}},\"loadManagerClassName\":"
        "\"org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl\","
        "\"startTimestamp\":1690940955211,\"maxResourceUsage\":0.01,\"loadReportType\":"
        "\"LocalBrokerData\"}",
        "*internal:http://10.0.0.11:8080,*internal:https://10.0.0.11:8443,"
        "*internal:pulsar://10.0.0.11:6650,*internal:pulsar+ssl://10.0.0.11:6651,"
        ">external:http://b1.example.com:18080,>external:pulsar://b1.example.com:16650",
        NULL);
end:
    lk_conf_unref(c);
}

static void
test_pulsar_broker_lookup_data(void)
{
    struct lk_conf *c = load(CONF(P_PROD));
    const struct lk_cluster *prod = cluster(c, "prod");

    if (!ok(prod != NULL, "config loads (%s)", err))
        goto end;
    /* Extensible load manager, 4.x: no brokerId field, TLS omitted
     * (NON_NULL), all four URLs in the external listener. */
    subtest("4.x");
    expect(
        prod, "10.0.0.12:8080",
        "{\"webServiceUrl\":\"http://10.0.0.12:8080\",\"pulsarServiceUrl\":"
        "\"pulsar://10.0.0.12:6650\",\"advertisedListeners\":{\"external\":{"
        "\"brokerServiceUrl\":\"pulsar://b2.example.com:16650\",\"brokerServiceUrlTls\":"
        "\"pulsar+ssl://b2.example.com:16651\",\"brokerHttpUrl\":\"http://b2.example.com:18080\","
        "\"brokerHttpsUrl\":\"https://b2.example.com:18443\"}},\"protocols\":{},"
        "\"persistentTopicsEnabled\":true,\"nonPersistentTopicsEnabled\":true,"
        "\"loadManagerClassName\":"
        "\"org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl\","
        "\"startTimestamp\":1690940955211,\"brokerVersion\":\"4.0.1\",\"properties\":{}}",
        ">external:http://b2.example.com:18080,>external:https://b2.example.com:18443,"
        ">external:pulsar://b2.example.com:16650,>external:pulsar+ssl://b2.example.com:16651,"
        "*internal:http://10.0.0.12:8080,*internal:pulsar://10.0.0.12:6650",
        NULL);
    /* 5.0 prepends brokerId; nulls where a writer keeps them; IPv6. */
    subtest("5.0, IPv6");
    expect(prod, "fd00::13:8080",
           "{\"brokerId\":\"fd00::13:8080\",\"webServiceUrl\":\"http://[fd00::13]:8080\","
           "\"webServiceUrlTls\":null,\"pulsarServiceUrl\":\"pulsar://[fd00::13]:6650\","
           "\"pulsarServiceUrlTls\":null,\"advertisedListeners\":{\"internal\":{"
           "\"brokerServiceUrl\":\"pulsar://[fd00::13]:6650\",\"brokerHttpUrl\":"
           "\"http://[fd00::13]:8080\"},\"external\":{\"brokerServiceUrl\":"
           "\"pulsar://b3.example.com:16650\"}},\"protocols\":{},\"persistentTopicsEnabled\":true,"
           "\"nonPersistentTopicsEnabled\":true,\"loadManagerClassName\":"
           "\"org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl\","
           "\"startTimestamp\":1690940955211,\"brokerVersion\":\"5.0.0\",\"properties\":{}}",
           "*internal:http://[fd00::13]:8080,*internal:pulsar://[fd00::13]:6650,"
           ">external:pulsar://b3.example.com:16650",
           NULL);
    /* Fields lookout does not know, at every level, are ignored. */
    subtest("unknown fields");
    expect(
        prod, "10.0.0.14:8080",
        "{\"futureField\":{\"a\":[1,2,{\"b\":null}]},\"webServiceUrl\":\"http://10.0.0.14:8080\","
        "\"advertisedListeners\":{\"external\":{\"brokerServiceUrl\":"
        "\"pulsar://b4.example.com:16650\",\"brokerQuicUrl\":\"quic://x\"},\"x-new\":null},"
        "\"pulsarServiceUrl\":\"pulsar://10.0.0.14:6650\",\"properties\":{\"k\":\"v\"}}",
        ">external:pulsar://b4.example.com:16650,*internal:http://10.0.0.14:8080,"
        "*internal:pulsar://10.0.0.14:6650",
        NULL);
end:
    lk_conf_unref(c);
}

/* Registrations of binary addresses only, as Pulsar's broker.conf examples
 * give advertisedListeners: lookout serves no HTTP for such a broker, so
 * none is required; the same rule as a [broker] section's (lk_conf_brokers.c). */
static void
test_pulsar_binary_only(void)
{
    struct lk_conf *c = load(CONF(P_PROD, P_EDGE));
    const struct lk_cluster *prod = cluster(c, "prod"), *edge = cluster(c, "edge");

    if (!ok(prod != NULL && edge != NULL, "config loads (%s)", err))
        goto end;
    subtest("top-level pulsarServiceUrl, external pulsar://");
    expect(
        prod, "10.0.0.1:8080",
        "{\"pulsarServiceUrl\":\"pulsar://10.0.0.1:6650\",\"advertisedListeners\":{\"external\":{"
        "\"brokerServiceUrl\":\"pulsar://b.example.com:16650\"}}}",
        ">external:pulsar://b.example.com:16650,*internal:pulsar://10.0.0.1:6650", NULL);
    subtest("both binary schemes on both listeners, no webServiceUrl");
    expect(
        prod, "10.0.0.2:8080",
        "{\"advertisedListeners\":{\"internal\":{\"brokerServiceUrl\":\"pulsar://10.0.0.2:6650\","
        "\"brokerServiceUrlTls\":\"pulsar+ssl://10.0.0.2:6651\"},\"external\":{"
        "\"brokerServiceUrl\":\"pulsar://b2.example.com:16650\",\"brokerServiceUrlTls\":"
        "\"pulsar+ssl://b2.example.com:16651\"}}}",
        "*internal:pulsar://10.0.0.2:6650,*internal:pulsar+ssl://10.0.0.2:6651,"
        ">external:pulsar://b2.example.com:16650,>external:pulsar+ssl://b2.example.com:16651",
        NULL);
    subtest("a cluster without a lookup listener");
    expect(edge, "192.168.1.7:8080", "{\"pulsarServiceUrlTls\":\"pulsar+ssl://192.168.1.7:6651\"}",
           "*internal:pulsar+ssl://192.168.1.7:6651", NULL);
    /* What the lookup listener takes, the internal one must still carry. */
    subtest("lookup pulsar+ssl, internal pulsar only: the sibling serves");
    expect(
        prod, "10.0.0.3:8080",
        "{\"pulsarServiceUrl\":\"pulsar://10.0.0.3:6650\",\"advertisedListeners\":{\"external\":{"
        "\"brokerServiceUrlTls\":\"pulsar+ssl://b3.example.com:16651\"}}}",
        ">external:pulsar+ssl://b3.example.com:16651,*internal:pulsar://10.0.0.3:6650", NULL);
    subtest("lookup https, internal binary only");
    expect(
        prod, "10.0.0.4:8080",
        "{\"pulsarServiceUrl\":\"pulsar://10.0.0.4:6650\",\"advertisedListeners\":{\"external\":{"
        "\"brokerServiceUrl\":\"pulsar://b4.example.com:16650\",\"brokerHttpsUrl\":"
        "\"https://b4.example.com:18443\"}}}",
        NULL,
        "the lookup listener 'external' has https://b4.example.com:18443, but the internal "
        "listener 'internal' has no https or http address to forward it to");
end:
    lk_conf_unref(c);
}

/* Without internalListenerName, the listener holding pulsarServiceUrl is
 * the internal one, whatever its name and place in the map. */
static void
test_pulsar_internal_by_url(void)
{
    struct lk_conf *c = load(CONF(P_EDGE));
    const struct lk_cluster *edge = cluster(c, "edge");

    if (!ok(edge != NULL, "config loads (%s)", err))
        goto end;
    expect(edge, "192.168.1.7:8080",
           "{\"advertisedListeners\":{\"public\":{\"brokerServiceUrl\":\"pulsar://"
           "p.example.com:6650\"},"
           "\"private\":{\"brokerServiceUrl\":\"pulsar://192.168.1.7:6650\"}},"
           "\"webServiceUrl\":\"http://192.168.1.7:8080\",\"pulsarServiceUrl\":"
           "\"pulsar://192.168.1.7:6650\"}",
           "public:pulsar://p.example.com:6650,*private:http://192.168.1.7:8080,"
           "*private:pulsar://192.168.1.7:6650",
           NULL);
    /* The 4.x broker without advertisedListeners writes an empty map. */
    expect(edge, "192.168.1.7:8080",
           "{\"webServiceUrl\":\"http://192.168.1.7:8080\",\"pulsarServiceUrl\":"
           "\"pulsar://192.168.1.7:6650\",\"advertisedListeners\":{}}",
           "*internal:http://192.168.1.7:8080,*internal:pulsar://192.168.1.7:6650", NULL);
end:
    lk_conf_unref(c);
}

static void
test_pulsar_refused(void)
{
    struct lk_conf *c = load(CONF(P_PROD, P_EDGE));
    const struct lk_cluster *prod = cluster(c, "prod"), *edge = cluster(c, "edge");
    static const struct {
        const char *znode, *doc, *why;
    } t[] = {
        {"10.0.0.1:8080", "{\"webServiceUrl\":", "not valid JSON"},
        {"10.0.0.1:8080", "", "not valid JSON"},
        {"10.0.0.1:8080", "[]", "not a JSON object but an array"},
        {"10.0.0.1:8080", "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"webServiceUrl\":\"x\"}",
         "duplicate object key"},
        {"10.0.0.1:8080", "{}", "no internal listener 'internal'"},
        {"10.0.0.1:8080", "{\"advertisedListeners\":[]}", "advertisedListeners is an array"},
        {"10.0.0.1:8080", "{\"advertisedListeners\":{\"external\":\"pulsar://h:1\"}}",
         "advertisedListeners.external is a string, not an object"},
        {"10.0.0.1:8080", "{\"webServiceUrl\":8080}", "webServiceUrl is an integer"},
        {"10.0.0.1:8080", "{\"webServiceUrl\":\"pulsar://10.0.0.1:6650\"}",
         "webServiceUrl: pulsar://10.0.0.1:6650 is not a http URL"},
        {"10.0.0.1:8080",
         "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"advertisedListeners\":{\"external\":{"
         "\"brokerServiceUrl\":\"pulsar+ssl://b.example.com:1\"}}}",
         "advertisedListeners.external.brokerServiceUrl: pulsar+ssl://b.example.com:1 is not a "
         "pulsar URL"},
        {"10.0.0.1:8080",
         "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"advertisedListeners\":{\"ext ernal\":{"
         "\"brokerServiceUrl\":\"pulsar://b.example.com:1\"}}}",
         "bad listener name 'ext ernal'"},
        {"10.0.0.1:8080", "{\"webServiceUrl\":\"http://10.0.0.1:8080/admin\"}",
         "unexpected '/admin'"},
        /* the lookup listener takes HTTP, and the internal one has none to
         * forward it to */
        {"10.0.0.1:8080",
         "{\"pulsarServiceUrl\":\"pulsar://10.0.0.1:6650\",\"advertisedListeners\":{\"external\":{"
         "\"brokerServiceUrl\":\"pulsar://b.example.com:16650\",\"brokerHttpUrl\":"
         "\"http://b.example.com:18080\"}}}",
         "the lookup listener 'external' has http://b.example.com:18080, but the internal listener "
         "'internal' has no http or https address to forward it to"},
        /* an external address that is also the internal one */
        {"10.0.0.1:8080",
         "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"advertisedListeners\":{\"external\":{"
         "\"brokerHttpUrl\":\"http://10.0.0.1:8080\"}}}",
         "10.0.0.1:8080 is in two listeners"},
        /* outside internal_networks: IPv4, IPv6, IPv4-mapped */
        {"203.0.113.5:8080",
         "{\"webServiceUrl\":\"http://203.0.113.5:8080\",\"advertisedListeners\":{\"external\":{"
         "\"brokerHttpUrl\":\"http://b.example.com:18080\"}}}",
         "has http://203.0.113.5:8080, outside internal_networks"},
        {"10.0.0.1:8080",
         "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"pulsarServiceUrl\":"
         "\"pulsar://[2001:db8::1]:6650\",\"advertisedListeners\":{\"external\":{"
         "\"brokerServiceUrl\":\"pulsar://b.example.com:16650\"}}}",
         "has pulsar://[2001:db8::1]:6650, outside internal_networks"},
        {"10.0.0.1:8080",
         "{\"webServiceUrl\":\"http://[::ffff:8.8.8.8]:8080\",\"advertisedListeners\":{"
         "\"external\":{\"brokerHttpUrl\":\"http://b.example.com:18080\"}}}",
         "outside internal_networks"},
        /* an external IP literal lookout would bind, off its bind 0.0.0.0's family */
        {"10.0.0.1:8080",
         "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"pulsarServiceUrl\":"
         "\"pulsar://10.0.0.1:6650\",\"advertisedListeners\":{\"external\":{"
         "\"brokerServiceUrl\":\"pulsar://[2001:db8::7]:16650\"}}}",
         "would bind outside the cluster's bind 0.0.0.0"},
        {"nohost", "{\"webServiceUrl\":\"http://10.0.0.1:8080\"}",
         "znode name is not a brokerId host:port"},
        {"10.0.0.1:0", "{\"webServiceUrl\":\"http://10.0.0.1:8080\"}", "out of range"},
    };

    if (!ok(prod != NULL && edge != NULL, "config loads (%s)", err))
        goto end;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        subtest("%zu: %.40s", i, t[i].doc);
        expect(prod, t[i].znode, t[i].doc, NULL, t[i].why);
    }
    /* A cluster without internal_networks dials no registration at all. */
    lk_conf_unref(c);
    c = load(CONF("[pulsar open]", "[broker open/s1]",
                  "advertisedListeners = internal:http://10.9.9.9:8080"));
    subtest("no internal_networks");
    if (ok(cluster(c, "open") != NULL, "config loads (%s)", err))
        expect(cluster(c, "open"), "10.0.0.1:8080", "{\"webServiceUrl\":\"http://10.0.0.1:8080\"}",
               NULL, "the cluster has no internal_networks");
end:
    lk_conf_unref(c);
}

/* External IP literals must be on the cluster's bind. */
static void
test_pulsar_bind(void)
{
    struct lk_conf *c = load(CONF("[pulsar prod]", "internalListenerName = internal",
                                  "lookupListenerName = external", "bind = 127.0.0.2",
                                  "internal_networks = 10.0.0.0/8", "[broker prod/s1]",
                                  "advertisedListeners = internal:http://10.9.9.9:8080,"
                                  "external:http://s1.example.com:18080"));
    const struct lk_cluster *prod = cluster(c, "prod");

    if (!ok(prod != NULL, "config loads (%s)", err))
        goto end;
#define DOC(ext)                                                                                   \
    "{\"webServiceUrl\":\"http://10.0.0.1:8080\",\"advertisedListeners\":{\"external\":{"          \
    "\"brokerHttpUrl\":\"" ext "\"}}}"
    expect(prod, "10.0.0.1:8080", DOC("http://127.0.0.2:18081"),
           ">external:http://127.0.0.2:18081,*internal:http://10.0.0.1:8080", NULL);
    expect(prod, "10.0.0.1:8080", DOC("http://b.example.com:18081"),
           ">external:http://b.example.com:18081,*internal:http://10.0.0.1:8080", NULL);
    expect(prod, "10.0.0.1:8080", DOC("http://127.0.0.3:18081"), NULL,
           "has http://127.0.0.3:18081, which lookout would bind outside the cluster's bind "
           "127.0.0.2");
    expect(prod, "10.0.0.1:8080", DOC("http://0.0.0.0:18081"), NULL, "outside the cluster's bind");
#undef DOC
end:
    lk_conf_unref(c);
}

/* Kafka -------------------------------------------------------------------------- */

static void
test_kafka(void)
{
    struct lk_conf *c = load(CONF(K_EVENTS));
    const struct lk_cluster *k = cluster(c, "events");
    struct lk_registration r;

    if (!ok(k != NULL, "config loads (%s)", err))
        goto end;
    /* Version 4, as Kafka's BrokerIdZNode writes it (timestamp a string,
     * host/port the PLAINTEXT endpoint's, null and -1 without one). */
    subtest("v4");
    expect(k, "2",
           "{\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":\"SSL\"},"
           "\"endpoints\":[\"INTERNAL://10.0.0.2:19092\",\"EXTERNAL://b2.example.com:9093\"],"
           "\"jmx_port\":-1,\"host\":null,\"timestamp\":\"1690940955211\",\"port\":-1,"
           "\"version\":4}",
           "*INTERNAL:INTERNAL://10.0.0.2:19092,>EXTERNAL:EXTERNAL://b2.example.com:9093", NULL);
    if (lk_registration_parse(k, "2",
                              "{\"version\":4,\"endpoints\":[\"INTERNAL://10.0.0.2:1\","
                              "\"EXTERNAL://b.example.com:2\"],\"listener_security_"
                              "protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":"
                              "\"SSL\"}}",
                              strlen("{\"version\":4,\"endpoints\":[\"INTERNAL://10.0.0.2:1\","
                                     "\"EXTERNAL://b.example.com:2\"],\"listener_security_"
                                     "protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":"
                                     "\"SSL\"}}"),
                              &r, err, sizeof(err)) == 0) {
        ok(r.node_id == 2, "node id 2");
        ok(r.listeners[r.lookup].addr[LK_SCHEME_KAFKA_SSL] != NULL, "EXTERNAL is SSL");
        lk_registration_free(&r);
    } else {
        ok(0, "parses (%s)", err);
    }
    /* Version 5 adds features; rack, IPv6, unknown fields. */
    subtest("v5");
    expect(k, "3",
           "{\"features\":{},\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\","
           "\"EXTERNAL\":\"SSL\",\"REPLICATION\":\"PLAINTEXT\"},\"endpoints\":["
           "\"INTERNAL://[fd00::3]:19092\",\"EXTERNAL://b3.example.com:9093\","
           "\"REPLICATION://10.0.0.3:19093\"],\"rack\":\"rack1\",\"jmx_port\":9999,\"host\":null,"
           "\"timestamp\":\"1690940955211\",\"port\":-1,\"version\":5,\"someday\":[1]}",
           "*INTERNAL:INTERNAL://[fd00::3]:19092,>EXTERNAL:EXTERNAL://b3.example.com:9093,"
           "REPLICATION:REPLICATION://10.0.0.3:19093",
           NULL);
    /* KIP-103's example as the wiki shows it: its map key is mangled
     * ("listener._security._protocol._map", so unknown, and Kafka's
     * default map applies), so CLIENT has no protocol. */
    subtest("KIP-103 wiki text");
    expect(
        k, "1",
        "{\n\t\"version\": 4,\n\t\"jmx_port\": 9999,\n\t\"timestamp\": 2233345666,\n\t\"host\": "
        "\"localhost\",\n\t\"port\": 9092,\n\t\"rack\": \"rack1\",\n\t"
        "\"listener._security._protocol._map\": {\n\t\t\"PLAINTEXT\": \"PLAINTEXT\",\n\t\t\"SSL\": "
        "\"SSL\",\n\t\t\"SASL_PLAINTEXT\": \"SASL_PLAINTEXT\",\n\t\t\"SASL_SSL\": "
        "\"SASL_SSL\"\n\t},"
        "\n\t\"endpoints\": [\n\t\t\"CLIENT://cluster1.foo.com:9092\",\n\t\t\"REPLICATION: "
        "//broker1.replication.local:9093\",\n\t\t\"INTERNAL_PLAINTEXT: //broker1.local:9094\",\n"
        "\t\t\"INTERNAL_SASL://broker1.local:9095\"\n\t]\n}",
        NULL, "endpoints[0]");
    static const struct {
        const char *znode, *doc, *why;
    } t[] = {
        {"1", "{\"version\":4,", "not valid JSON"},
        {"1", "{\"version\":3,\"host\":\"10.0.0.1\",\"port\":9092}", "version 3 is not supported"},
        {"1", "{\"version\":4,\"endpoints\":[]}", "endpoints is an empty array"},
        {"1",
         "{\"version\":4,\"endpoints\":[\"EXTERNAL://b.example.com:9093\"],"
         "\"listener_security_protocol_map\":{\"EXTERNAL\":\"SSL\"}}",
         "no listener 'INTERNAL', the inter.broker.listener.name"},
        {"1",
         "{\"version\":4,\"endpoints\":[\"INTERNAL://10.0.0.1:9092\"],"
         "\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\"}}",
         "no listener 'EXTERNAL', the lookup listener"},
        {"1",
         "{\"version\":4,\"endpoints\":[\"INTERNAL://172.16.0.1:9092\",\"EXTERNAL://b:1\"],"
         "\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":\"SSL\"}}",
         "INTERNAL://172.16.0.1:9092, outside internal_networks"},
        {"1",
         "{\"version\":4,\"endpoints\":[\"INTERNAL://[2001:db8::1]:9092\",\"EXTERNAL://b:1\"],"
         "\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":\"SSL\"}}",
         "outside internal_networks"},
        {"01", "{}", "znode '01' is not a node id"},
        {"-1", "{}", "is not a node id"},
        {"2147483648", "{}", "is not a node id"},
        {"1", "{\"version\":4,\"host\":7}", "host is an integer"},
        {"1",
         "{\"version\":4,\"endpoints\":[\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://"
         "a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\","
         "\"A://a:1\",\"A://a:1\",\"A://a:1\",\"A://a:1\"]}",
         "endpoints has 65 entries, more than 64"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        subtest("refused %zu: %.40s", i, t[i].doc);
        expect(k, t[i].znode, t[i].doc, NULL, t[i].why);
    }
end:
    lk_conf_unref(c);
}

/* Networks ----------------------------------------------------------------------- */

static int
has(const struct lk_cidr *n, size_t nn, const char *ip)
{
    return lk_cidr_contains_host(n, nn, ip);
}

static void
test_cidr(void)
{
    struct lk_cidr *n = NULL;
    int nn;

    nn = lk_cidrs_parse(" 10.0.0.0/8, ,192.168.1.7,fd00::/8 , 172.16.0.0/12,2001:db8::/127", &n,
                        err, sizeof(err));
    if (!ok(nn == 5, "five networks (%s)", err))
        goto end;
    ok(has(n, 5, "10.0.0.0") == 1 && has(n, 5, "10.255.255.255") == 1, "10/8 both ends");
    ok(has(n, 5, "11.0.0.0") == 0 && has(n, 5, "9.255.255.255") == 0, "10/8 neighbours");
    ok(has(n, 5, "192.168.1.7") == 1 && has(n, 5, "192.168.1.6") == 0, "a bare address is /32");
    ok(has(n, 5, "172.31.255.255") == 1 && has(n, 5, "172.32.0.0") == 0, "/12 edge");
    ok(has(n, 5, "fd12:3456::1") == 1 && has(n, 5, "fe00::1") == 0, "fd00::/8");
    ok(has(n, 5, "2001:db8::1") == 1 && has(n, 5, "2001:db8::2") == 0, "/127 edge");
    ok(has(n, 5, "::ffff:10.1.2.3") == 1 && has(n, 5, "::ffff:8.8.8.8") == 0,
       "IPv4-mapped IPv6 is matched as IPv4");
    ok(has(n, 5, "::a00:1") == 0, "an IPv4-compatible address is not IPv4");
    ok(has(n, 5, "broker-1") == -1 && has(n, 5, "10.0.0.1.example.com") == -1, "names: -1");
    ok(has(n, 0, "10.0.0.1") == 0, "no networks: nothing is inside");
    free(n);
    n = NULL;
    /* A mapped network is the IPv4 network it maps (the fuzzer's find). */
    nn = lk_cidrs_parse("::ffff:8:228, ::ffff:10.0.0.0/104", &n, err, sizeof(err));
    ok(nn == 2 && n[0].family == AF_INET && n[0].bits == 32 && n[1].family == AF_INET &&
           n[1].bits == 8,
       "mapped networks become IPv4 (%s)", err);
    ok(nn == 2 && has(n, 2, "0.8.2.40") == 1 && has(n, 2, "::ffff:0.8.2.40") == 1 &&
           has(n, 2, "10.9.9.9") == 1 && has(n, 2, "::ffff:10.9.9.9") == 1 &&
           has(n, 2, "11.0.0.1") == 0,
       "and match both spellings");
    free(n);
    n = NULL;
    nn = lk_cidrs_parse("::/0", &n, err, sizeof(err));
    ok(nn == 1 && has(n, 1, "2001:db8::1") == 1 && has(n, 1, "::ffff:10.0.0.1") == 0,
       "::/0 takes no IPv4-mapped address");
    free(n);
    n = NULL;
    nn = lk_cidrs_parse("0.0.0.0/0,::/0", &n, err, sizeof(err));
    ok(nn == 2 && has(n, 2, "203.0.113.1") == 1 && has(n, 2, "2001:db8::9") == 1,
       "/0 takes everything (%s)", err);
    free(n);
    n = NULL;

    static const struct {
        const char *in, *why;
    } bad[] = {
        {"", "no network"},
        {" , ", "no network"},
        {"10.0.0.0/33", "the prefix length must be 0 to 32"},
        {"fd00::/129", "the prefix length must be 0 to 128"},
        {"10.0.0.0/", "the prefix length"},
        {"10.0.0.0/+8", "the prefix length"},
        {"10.0.0.0/8/8", "the prefix length"},
        {"10.1.2.3/8", "has host bits set"},
        {"fd00::1/8", "has host bits set"},
        {"10.0.0/8", "is not an IPv4 or IPv6 address"},
        {"[fd00::]/8", "is not an IPv4 or IPv6 address"},
        {"localhost", "is not an IPv4 or IPv6 address"},
        {"10.0.0.0/8,nope", "'nope'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        subtest("%s", bad[i].in);
        err[0] = '\0';
        ok(lk_cidrs_parse(bad[i].in, &n, err, sizeof(err)) == -1 && n == NULL, "refused");
        ok(strstr(err, bad[i].why) != NULL, "'%s' says '%s'", err, bad[i].why);
    }
end:
    free(n);
}

/* ZooKeeper connect strings -------------------------------------------------------- */

static void
test_zk_connect(void)
{
    static const struct {
        const char *in;
        int metadata_url;
        const char *connect, *chroot;
        size_t nservers;
    } t[] = {
        {"zk:host1:2181,host2:2181/chroot", 1, "host1:2181,host2:2181/chroot", "/chroot", 2},
        {"host1:2181,host2:2181/chroot", 0, "host1:2181,host2:2181/chroot", "/chroot", 2},
        {"zk:ZK1.Example.com:2181", 1, "zk1.example.com:2181", NULL, 1},
        {"zk1,zk2:2182", 0, "zk1:2181,zk2:2182", NULL, 2},
        {" zk:[::1]:2181,[fd00::2],fd00::3:2183/a/b ", 1,
         "[::1]:2181,[fd00::2]:2181,[fd00::3]:2183/a/b", "/a/b", 3},
        {"zk1:2181/", 0, "zk1:2181", NULL, 1},
        {"zk1:2181,,zk2:2181", 0, "zk1:2181,zk2:2181", NULL, 2},
        /* an older Pulsar form: no "zk:" prefix */
        {"10.0.0.5:2181", 1, "10.0.0.5:2181", NULL, 1},
    };
    static const struct {
        const char *in;
        int metadata_url;
        const char *why;
    } bad[] = {
        {"zk:", 1, "no ZooKeeper server"},
        {"/chroot", 0, "no ZooKeeper server"},
        {"etcd:http://etcd:2379", 1, "is not a ZooKeeper store"},
        {"oxia://oxia:6648", 1, "is not a ZooKeeper store"},
        {"rocksdb:///data", 1, "is not a ZooKeeper store"},
        {"memory:local", 1, "is not a ZooKeeper store"},
        {"zk1:99999", 0, "out of range"},
        {"zk1:", 0, "no port"},
        {"zk 1:2181", 0, "bad character"},
        {"zk1:2181/a//b", 0, "empty, '.' or '..'"},
        {"zk1:2181/a/../b", 0, "empty, '.' or '..'"},
        {"zk1:2181/a/", 0, "empty, '.' or '..'"},
        {"zk1:2181/a b", 0, "bad character"},
        /* zk: only in metadataStoreUrl; elsewhere it is a host "zk" */
        {"zk:zk1:2181", 0, "bad address"},
    };

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct lk_zk_connect zc;
        subtest("%s", t[i].in);
        if (ok(lk_zk_connect_parse(t[i].in, t[i].metadata_url, &zc, err, sizeof(err)) == 0,
               "parses (%s)", err)) {
            ok_str(zc.connect, t[i].connect, "connect");
            ok_str(zc.chroot, t[i].chroot, "chroot");
            ok(zc.nservers == t[i].nservers, "%zu servers", zc.nservers);
        }
        lk_zk_connect_free(&zc);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct lk_zk_connect zc;
        subtest("%s", bad[i].in);
        err[0] = '\0';
        ok(lk_zk_connect_parse(bad[i].in, bad[i].metadata_url, &zc, err, sizeof(err)) == -1 &&
               zc.connect == NULL && zc.servers == NULL,
           "refused");
        ok(strstr(err, bad[i].why) != NULL, "'%s' says '%s'", err, bad[i].why);
    }
}

/* The config keys ------------------------------------------------------------------- */

static void
expect_conf_err(int line, const char *want, const char *const *lines)
{
    struct lk_conf *c = load(lines);

    lk_test_ok(c == NULL, __FILE__, line, "refused");
    lk_test_ok_str(err, want, __FILE__, line, "message");
    lk_conf_unref(c);
}
#define EXPECT_ERR(want, ...) expect_conf_err(__LINE__, (want), CONF(__VA_ARGS__))
#define P_B1 "[broker p/b1]", "advertisedListeners = internal:http://10.0.0.1:8080"
#define K_B1                                                                                       \
    "[broker k/1]",                                                                                \
        "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9093"
#define K_HEAD                                                                                     \
    "[kafka k]", "lookupListenerName = EXTERNAL",                                                  \
        "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL",                        \
        "inter.broker.listener.name = INTERNAL"

static void
test_conf_keys(void)
{
    struct lk_conf *c;

    c = load(CONF("[pulsar p]", "internal_networks = 10.0.0.0/8, fd00::/8", P_B1));
    if (ok(c != NULL, "internal_networks loads (%s)", err))
        ok(c->clusters[0]->ninternal_networks == 2 &&
               c->clusters[0]->internal_networks[1].family == AF_INET6 &&
               c->clusters[0]->internal_networks[1].bits == 8,
           "two networks, the second fd00::/8");
    lk_conf_unref(c);
    EXPECT_ERR("t.conf:2: [pulsar p] internal_networks: '10.1.0.0/8' has host bits set (write the "
               "network, or the address alone for one host)",
               "[pulsar p]", "internal_networks = 10.1.0.0/8", P_B1);
    /* Static brokers are held to internal_networks too, when it is set. */
    EXPECT_ERR("t.conf:4: [broker p/b1] advertisedListeners: the internal listener 'internal' has "
               "http://10.0.0.1:8080, outside internal_networks: lookout dials only inside them",
               "[pulsar p]", "internal_networks = 192.168.0.0/16", P_B1);
    EXPECT_ERR("t.conf:7: [broker k/1] advertised.listeners: the internal listener 'INTERNAL' has "
               "INTERNAL://10.0.0.1:19092, outside internal_networks: lookout dials only inside "
               "them",
               K_HEAD, "internal_networks = fd00::/8", K_B1);
    /* A cluster with a store may start with no broker at all. */
    c = load(CONF("[pulsar p]", "internal_networks = 10.0.0.0/8",
                  "metadataStoreUrl = zk:zk1:2181,zk2:2181/pulsar",
                  "metadataStoreSessionTimeoutMillis = 4000"));
    if (ok(c != NULL, "metadataStoreUrl without [broker] loads (%s)", err)) {
        const struct lk_cluster *cl = c->clusters[0];
        ok(cl->zk != NULL && strcmp(cl->zk->connect, "zk1:2181,zk2:2181/pulsar") == 0 &&
               strcmp(cl->zk_path, "/loadbalance/brokers") == 0 && cl->nbrokers == 0 &&
               cl->zk_session_timeout_ms == 4000 && !cl->zk_read,
           "the store, its path and timeout; no broker, not read");
    }
    lk_conf_unref(c);
    EXPECT_ERR("t.conf:3: [pulsar p] metadataStoreSessionTimeoutMillis: '500' is not a session "
               "timeout in milliseconds from 1000 to 600000",
               "[pulsar p]", "internal_networks = 10.0.0.0/8",
               "metadataStoreSessionTimeoutMillis = 500", "metadataStoreUrl = zk:zk1:2181", P_B1);
    EXPECT_ERR("t.conf:2: [pulsar p] zooKeeperSessionTimeoutMillis: there is no ZooKeeper to time "
               "out: metadataStoreUrl is not set",
               "[pulsar p]", "zooKeeperSessionTimeoutMillis = 5000", P_B1);
    /* Kafka: bootstrap.servers is bound before any broker registers, so
     * the cluster's own map must say what the lookup listener speaks. */
    EXPECT_ERR("t.conf:1: [kafka k] listener.security.protocol.map: does not name the lookup "
               "listener 'EXTERNAL': with zookeeper.connect it gives the protocol "
               "bootstrap.servers speaks before any broker registers (e.g. "
               "listener.security.protocol.map = EXTERNAL:SSL,INTERNAL:PLAINTEXT)",
               "[kafka k]", "lookupListenerName = EXTERNAL", "inter.broker.listener.name = INTERNAL",
               "internal_networks = 10.0.0.0/8", "zookeeper.connect = zk1:2181/kafka");
    c = load(CONF(K_HEAD, "internal_networks = 10.0.0.0/8", "zookeeper.connect = zk1:2181/kafka",
                  "zookeeper.session.timeout.ms = 18000", "bootstrap.servers = 127.0.0.1:9093"));
    if (ok(c != NULL, "zookeeper.connect without [broker] loads (%s)", err))
        ok(strcmp(c->clusters[0]->zk_path, "/brokers/ids") == 0 &&
               c->clusters[0]->bootstrap[0].scheme == LK_SCHEME_KAFKA_SSL,
           "/brokers/ids; bootstrap.servers speaks SSL, as the map says");
    lk_conf_unref(c);
    EXPECT_ERR("t.conf:2: [pulsar p] zookeeperServers: internal_networks is missing: a map read "
               "from ZooKeeper needs the networks lookout may dial (e.g. internal_networks = "
               "10.0.0.0/8)",
               "[pulsar p]", "zookeeperServers = zk1:2181", P_B1);
    EXPECT_ERR("t.conf:3: [pulsar p] zookeeperServers: give either metadataStoreUrl or "
               "zookeeperServers, not both (the other is at line 2)",
               "[pulsar p]", "metadataStoreUrl = zk:zk1:2181", "zookeeperServers = zk1:2181", P_B1);
    EXPECT_ERR("t.conf:2: [pulsar p] metadataStoreUrl: 'etcd:http://e:2379' is not a ZooKeeper "
               "store: lookout reads the map from ZooKeeper only (zk:host:2181,...)",
               "[pulsar p]", "metadataStoreUrl = etcd:http://e:2379", P_B1);
    EXPECT_ERR("t.conf:6: [kafka k] zookeeper.connect: bad address 'zk1:0': port 0 is out of "
               "range 1-65535",
               K_HEAD, "internal_networks = 10.0.0.0/8", "zookeeper.connect = zk1:0/kafka", K_B1);
    /* Each kind has its own broker's key. */
    EXPECT_ERR("t.conf:2: [pulsar p] zookeeper.connect: unknown key (zookeeper.connect belongs "
               "in a [kafka] section)",
               "[pulsar p]", "zookeeper.connect = zk1:2181", P_B1);
}

/* The live map ------------------------------------------------------------------------ */

/* LocalBrokerData of a broker at internal host:8080 with external http://EXT. */
#define LBD(in, ext)                                                                               \
    "{\"webServiceUrl\":\"http://" in ":8080\",\"pulsarServiceUrl\":\"pulsar://" in ":6650\","      \
    "\"bundles\":[],\"advertisedListeners\":{\"internal\":{\"brokerServiceUrl\":\"pulsar://" in    \
    ":6650\",\"brokerHttpUrl\":\"http://" in ":8080\"},\"external\":{\"brokerHttpUrl\":\"http://"  \
    ext "\"}},\"loadReportType\":\"LocalBrokerData\"}"

static struct lk_conf *
load_live(const char *const *lines, const struct lk_live_set *sets, size_t n)
{
    char text[4096] = "";

    for (size_t i = 0; lines[i] != NULL; i++) {
        strcat(text, lines[i]);
        strcat(text, "\n");
    }
    err[0] = '\0';
    return lk_conf_load_live("t.conf", text, strlen(text), sets, n, err, sizeof(err));
}

static const struct lk_broker *
broker_of(const struct lk_cluster *cl, const char *id)
{
    for (size_t i = 0; cl != NULL && i < cl->nbrokers; i++)
        if (strcmp(cl->brokers[i]->id, id) == 0)
            return cl->brokers[i];
    return NULL;
}

static const char *
reason_of(const struct lk_cluster *cl, const char *znode)
{
    for (size_t i = 0; cl != NULL && i < cl->nrejects; i++)
        if (strcmp(cl->rejects[i].znode, znode) == 0)
            return cl->rejects[i].reason;
    return NULL;
}

#define NODE(name, doc) {(name), (const uint8_t *)(doc), sizeof(doc) - 1}

/* Registrations of binary addresses only, in a cluster with webServiceUrl
 * and serviceUrl: each is taken (lookout serves it no HTTP on its own
 * address), and the service addresses pick among brokers by family
 * (lk_pick_broker); one whose lookup listener takes HTTP it cannot forward
 * is refused, the rest of the map kept. */
static void
test_live_binary_only(void)
{
    static const struct lk_meta_node nodes[] = {
        NODE("10.0.0.21:8080", "{\"pulsarServiceUrl\":\"pulsar://10.0.0.21:6650\","
                               "\"advertisedListeners\":{\"external\":{\"brokerServiceUrl\":"
                               "\"pulsar://10.1.0.21:6650\"}}}"),
        NODE("10.0.0.22:8080", "{\"pulsarServiceUrlTls\":\"pulsar+ssl://10.0.0.22:6651\","
                               "\"advertisedListeners\":{\"external\":{\"brokerServiceUrlTls\":"
                               "\"pulsar+ssl://b22.example.com:6651\"}}}"),
        NODE("10.0.0.23:8080",
             "{\"pulsarServiceUrl\":\"pulsar://10.0.0.23:6650\","
             "\"advertisedListeners\":{\"external\":{\"brokerServiceUrl\":"
             "\"pulsar://10.1.0.23:6650\",\"brokerHttpUrl\":\"http://10.1.0.23:80\"}}}"),
    };
    const char *const *conf =
        CONF("[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",
             "internal_networks = 10.0.0.0/16", "metadataStoreUrl = zk:zk1:2181/pulsar",
             "webServiceUrl = https://pulsar.example.com",
             "serviceUrl = pulsar+ssl://pulsar.example.com");
    struct lk_live_set set = {"prod", nodes, sizeof(nodes) / sizeof(nodes[0]), NULL};
    struct lk_conf *c = load_live(conf, &set, 1);
    const struct lk_cluster *cl = cluster(c, "prod");
    const struct lk_broker *b;
    const char *why;

    if (!ok(cl != NULL, "the map loads with binary-only registrations (%s)", err))
        goto end;
    ok(cl->nbrokers == 2 && cl->nrejects == 1, "two taken, one refused (%zu, %zu)", cl->nbrokers,
       cl->nrejects);
    b = broker_of(cl, "10.0.0.21:8080");
    ok(b != NULL && lk_broker_upstream(b, LK_SCHEME_HTTP, 0) == NULL &&
           lk_broker_upstream(b, LK_SCHEME_PULSAR, 0) != NULL,
       "10.0.0.21: a pulsar:// upstream, no http one");
    b = broker_of(cl, "10.0.0.22:8080");
    ok(b != NULL && b->lookup != NULL && b->lookup->addr[LK_SCHEME_PULSAR_SSL] != NULL,
       "10.0.0.22: pulsar+ssl:// only, with its lookup address");
    why = reason_of(cl, "10.0.0.23:8080");
    ok(why != NULL && strstr(why, "has http://10.1.0.23:80, but the internal listener 'internal' "
                                  "has no http or https address") != NULL,
       "a lookup http address with no internal one to forward to: %s",
       why != NULL ? why : "(none)");
end:
    lk_conf_unref(c);
}

static void
test_live_pulsar(void)
{
    static const struct lk_meta_node nodes[] = {
        NODE("10.0.0.5:8080", LBD("10.0.0.5", "b5.example.com:18080")),
        NODE("10.0.0.6:8080", "{\"webServiceUrl\":"),
        NODE("10.0.0.7:8080", LBD("10.0.0.7", "b7.example.com:18080")),
        NODE("10.0.0.8:8080", LBD("10.0.0.8", "b5.example.com:18080")),
        NODE("10.0.0.9:8080", LBD("192.168.1.9", "b9.example.com:18080")),
        NODE("10.0.0.10:8080", LBD("10.0.0.10", "b10.example.com:18080")),
    };
    const unsigned char skip[] = {0, 0, 0, 0, 0, 1};
    const char *const *conf =
        CONF("[pulsar prod]", "internalListenerName = internal", "lookupListenerName = external",
             "internal_networks = 10.0.0.0/8", "metadataStoreUrl = zk:zk1:2181/pulsar",
             "[broker prod/10.0.0.7:8080]",
             "advertisedListeners = internal:http://10.0.0.7:8080,external:http://s7.example.com:80");
    struct lk_live_set set = {"prod", nodes, sizeof(nodes) / sizeof(nodes[0]), skip};
    struct lk_live_set other = {"gone", nodes, 1, NULL};
    struct lk_live_set sets[] = {other, set};
    struct lk_conf *c = load_live(conf, sets, 2);
    const struct lk_cluster *cl = cluster(c, "prod");
    const struct lk_broker *b;
    const char *why;
    char *dump = NULL;

    if (!ok(cl != NULL, "the map loads with the registrations (%s)", err))
        goto end;
    ok(cl->zk_read && cl->nregistrations == 6, "read, six registrations");
    ok(cl->nbrokers == 2, "two brokers: the static one and 10.0.0.5 (%zu)", cl->nbrokers);
    b = broker_of(cl, "10.0.0.5:8080");
    if (ok(b != NULL && b->live && !b->overrides, "10.0.0.5:8080 is live"))
        ok(strcmp(b->name, "prod/10.0.0.5:8080") == 0 && strcmp(b->internal->name, "internal") == 0 &&
               b->lookup != NULL &&
               strcmp(b->lookup->addr[LK_SCHEME_HTTP]->text, "http://b5.example.com:18080") == 0,
           "its name, internal and lookup listeners");
    b = broker_of(cl, "10.0.0.7:8080");
    ok(b != NULL && !b->live && b->overrides &&
           strcmp(b->lookup->addr[LK_SCHEME_HTTP]->text, "http://s7.example.com:80") == 0,
       "10.0.0.7:8080: the [broker] section wins, with its own listeners");
    ok(cl->nrejects == 3, "three refused (%zu)", cl->nrejects);
    why = reason_of(cl, "10.0.0.6:8080");
    ok(why != NULL && strstr(why, "not valid JSON") != NULL, "a broken document: %s", why != NULL ? why : "(none)");
    why = reason_of(cl, "10.0.0.8:8080");
    ok(why != NULL && strstr(why, "b5.example.com:18080 is also an address of broker "
                                  "prod/10.0.0.5:8080") != NULL,
       "an external address another broker has: %s", why != NULL ? why : "(none)");
    why = reason_of(cl, "10.0.0.9:8080");
    ok(why != NULL && strstr(why, "192.168.1.9") != NULL && strstr(why, "internal_networks"),
       "an internal address outside internal_networks: %s", why != NULL ? why : "(none)");
    ok(broker_of(cl, "10.0.0.10:8080") == NULL && reason_of(cl, "10.0.0.10:8080") == NULL,
       "a skipped node is neither taken nor refused");
    ok(c->nbinds == 2, "binds for the two lookup addresses (%zu)", c->nbinds);

    dump = lk_conf_dump_text(c);
    ok(strstr(dump, "  broker prod/10.0.0.7:8080 (static, over its registration)\n") != NULL &&
           strstr(dump, "  broker prod/10.0.0.5:8080 (live)\n") != NULL &&
           strstr(dump, "  store    zookeeper zk1:2181/pulsar /loadbalance/brokers: 6 "
                        "registrations, 3 refused\n") != NULL &&
           strstr(dump, "  refused  10.0.0.6:8080: not valid JSON") != NULL,
       "--check marks each broker and lists the refused:\n%s", dump);
    free(dump);
end:
    lk_conf_unref(c);
}

static void
test_live_kafka(void)
{
#define KREG(id, ext_proto)                                                                        \
    "{\"listener_security_protocol_map\":{\"INTERNAL\":\"PLAINTEXT\",\"EXTERNAL\":\"" ext_proto    \
    "\"},\"endpoints\":[\"INTERNAL://10.0.0." id ":19092\",\"EXTERNAL://b" id                       \
    ".example.com:9093\"],\"jmx_port\":-1,\"features\":{},\"host\":null,\"timestamp\":"            \
    "\"1690940955211\",\"port\":-1,\"version\":5}"
    static const struct lk_meta_node nodes[] = {
        NODE("1", KREG("1", "SSL")),
        NODE("2", KREG("2", "PLAINTEXT")),
        NODE("x", KREG("3", "SSL")),
    };
    struct lk_live_set set = {"k", nodes, 3, NULL};
    struct lk_conf *c = load_live(CONF(K_HEAD, "internal_networks = 10.0.0.0/8",
                                       "zookeeper.connect = zk1:2181/kafka",
                                       "bootstrap.servers = b.example.com:9093"),
                                  &set, 1);
    const struct lk_cluster *cl = cluster(c, "k");
    const struct lk_broker *b;
    const char *why;

    if (!ok(cl != NULL, "the map loads with the registrations (%s)", err))
        goto end;
    b = broker_of(cl, "1");
    ok(b != NULL && b->live && b->node_id == 1 &&
           strcmp(lk_kafka_addr(b->lookup)->text, "EXTERNAL://b1.example.com:9093") == 0,
       "node 1 is live, with its EXTERNAL listener");
    why = reason_of(cl, "2");
    ok(why != NULL && strstr(why, "is PLAINTEXT here but SSL") != NULL,
       "a lookup listener of another protocol than bootstrap.servers': %s",
       why != NULL ? why : "(none)");
    why = reason_of(cl, "x");
    ok(why != NULL && strstr(why, "not a node id") != NULL, "a znode that is no node id: %s",
       why != NULL ? why : "(none)");
#undef KREG
end:
    lk_conf_unref(c);
}
#undef NODE

const struct lk_test_case lk_test_registry[] = {
    {"registry/pulsar_local_broker_data", test_pulsar_local_broker_data},
    {"registry/pulsar_broker_lookup_data", test_pulsar_broker_lookup_data},
    {"registry/pulsar_internal_by_url", test_pulsar_internal_by_url},
    {"registry/pulsar_binary_only", test_pulsar_binary_only},
    {"registry/live_binary_only", test_live_binary_only},
    {"registry/pulsar_refused", test_pulsar_refused},
    {"registry/pulsar_bind", test_pulsar_bind},
    {"registry/kafka", test_kafka},
    {"registry/cidr", test_cidr},
    {"registry/zk_connect", test_zk_connect},
    {"registry/conf_keys", test_conf_keys},
    {"registry/live_pulsar", test_live_pulsar},
    {"registry/live_kafka", test_live_kafka},
    {NULL, NULL},
};
