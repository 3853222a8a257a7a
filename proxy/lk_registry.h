/*
 * Broker registrations as the clusters publish them in ZooKeeper, turned
 * into lookout's listener model, and the safety rules they must pass
 * before lookout would dial or bind anything they name.  A registration
 * is data lookout does not own: each one is parsed and checked on its own,
 * and a bad one is refused with a reason that the caller logs and counts,
 * never taking the rest of the map with it.  Everything here is pure (no
 * ZooKeeper client, no sockets), so it is unit tested and fuzzed as it
 * stands; proxy/lk_zk.c does the reading.
 *
 * What is read (facts: pulsar.md section 3, kafka.md section 0, KIP-103):
 *  - Pulsar: a child of /loadbalance/brokers, named by its brokerId
 *    "host:webServicePort", holding LocalBrokerData (modular load manager)
 *    or BrokerLookupData (extensible one).  Both forms name the URLs the
 *    same way: `advertisedListeners` {NAME: {brokerServiceUrl,
 *    brokerServiceUrlTls, brokerHttpUrl, brokerHttpsUrl}}, and the
 *    internal listener's `webServiceUrl(Tls)` and `pulsarServiceUrl(Tls)`
 *    at the top.
 *  - Kafka (ZooKeeper mode): a child of /brokers/ids, named by the node
 *    id, JSON version 4 or 5 with `endpoints` ["NAME://host:port", ...]
 *    and `listener_security_protocol_map`.
 */
#ifndef LK_REGISTRY_H
#define LK_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "lk_conf.h"

/* Networks -------------------------------------------------------------------- */

/* One CIDR of internal_networks: the network with its host bits zero. */
struct lk_cidr {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network bytes: 4 for AF_INET, 16 for AF_INET6 */
    unsigned bits;    /* prefix length: 0-32 or 0-128 */
};

/*
 * Parses internal_networks, "10.0.0.0/8, fd00::/8, 192.0.2.7": CIDRs of
 * either family; a bare address is a /32 or /128.  A CIDR with host bits
 * set (10.1.2.3/8) is refused as the mistake it usually is.  Returns the
 * number of networks (malloc'd array in *out) or -1 with a message.
 */
int lk_cidrs_parse(const char *s, struct lk_cidr **out, char *err, size_t errlen);

/*
 * Whether the address addr (4 bytes for AF_INET, 16 for AF_INET6, network
 * order) lies in one of the n networks.  An IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d) is matched as the IPv4 address it maps, so that it
 * cannot slip past an IPv4 list.  1 or 0.
 */
int lk_cidr_contains(const struct lk_cidr *nets, size_t n, int family, const void *addr);

/* The same for a host as lk_url keeps it (no brackets): 1 inside, 0
 * outside, -1 when host is a name rather than an IP literal. */
int lk_cidr_contains_host(const struct lk_cidr *nets, size_t n, const char *host);

/* Metadata store addresses -------------------------------------------------------- */

/* A ZooKeeper connect string, as metadataStoreUrl, zookeeperServers or
 * zookeeper.connect give it. */
struct lk_zk_connect {
    char **servers; /* "host:port" each, port 2181 when not given */
    size_t nservers;
    char *chroot;  /* "/pulsar"; NULL for the root */
    char *connect; /* "h1:2181,h2:2181/pulsar", what zookeeper_init takes */
};

/*
 * Parses "host1:2181,host2:2181/chroot".  With metadata_url (Pulsar's
 * metadataStoreUrl) the broker's "zk:" prefix is accepted and other stores
 * (etcd:, oxia://, rocksdb:, memory:) are refused by name.  0, or -1 with
 * a message; lk_zk_connect_free releases out.
 */
int lk_zk_connect_parse(const char *s, int metadata_url, struct lk_zk_connect *out, char *err,
                        size_t errlen);
void lk_zk_connect_free(struct lk_zk_connect *zc);

/* Registrations -------------------------------------------------------------------- */

/* One broker as its registration names it: the shape a [broker] section's
 * advertisedListeners (or a Kafka advertised.listeners) gives lk_conf_brokers.c,
 * so that a map generation can be built from either. */
struct lk_registration {
    char *id;        /* the znode name: Pulsar brokerId "host:8080", Kafka node id "1" */
    int32_t node_id; /* Kafka: the node id; -1 for Pulsar */
    struct lk_listener *listeners;
    size_t nlisteners;
    size_t internal; /* index of the listener lookout dials */
    size_t lookup;   /* index of the lookup listener; nlisteners when the cluster has none */
};

/*
 * Parses the registration of znode `znode` (its name, not its path),
 * data[len], for cluster cl (a Pulsar or Kafka cluster: its proto picks
 * the format; its listener names, bind and internal_networks apply), and
 * checks it:
 *  - the internal listener (cl's internalListenerName or
 *    inter.broker.listener.name; for Pulsar without one, the listener that
 *    holds pulsarServiceUrl, else one named "internal" built from the top
 *    level URLs) exists and can carry what lookout forwards to it;
 *  - the lookup listener exists when cl names one;
 *  - every internal address that is an IP literal lies in cl's
 *    internal_networks.  A host name passes here, since brokers often
 *    register names and a check at parse time would not hold when the
 *    name moves: lk_dial (lk_dial.h) resolves it at each dial and
 *    connects only to an address inside;
 *  - every lookup address that is an IP literal is on cl's `bind` (equal
 *    to it, or bind is the wildcard of its family), as the binding rule
 *    would bind it; names are bound on `bind` anyway.
 * Unknown fields are ignored.  Returns 0 with *out filled
 * (lk_registration_free), or -1 with the reason in err and *out empty.
 */
int lk_registration_parse(const struct lk_cluster *cl, const char *znode, const char *data,
                          size_t len, struct lk_registration *out, char *err, size_t errlen);
void lk_registration_free(struct lk_registration *r);

/*
 * The listeners of a Kafka registration document (version 4 or 5), as
 * lk_conf_brokers.c's `registration = FILE` and the live map read it: 0 with the
 * listeners in *ls and *n (lk_listeners_free), or -1 with a message.
 */
int lk_registry_kafka_listeners(const char *data, size_t len, struct lk_listener **ls, size_t *n,
                                char *err, size_t errlen);

/*
 * Whether a Pulsar broker's internal and lookup (may be NULL) listeners
 * can serve: each scheme of the lookup listener has a counterpart on the
 * internal one, where lookout forwards what it accepts there.  An internal
 * listener without an http or https address is fine when the lookup one
 * has none either: lookout serves no HTTP for that broker.  0, or -1 with
 * a message.  Shared with lk_conf_brokers.c's static brokers.
 */
int lk_pulsar_listeners_check(const struct lk_listener *internal, const struct lk_listener *lookup,
                              char *err, size_t errlen);

/* Checks that every IP-literal address of listener l lies in cl's
 * internal_networks (none set: everything passes).  0, or -1 naming the
 * address. */
int lk_listener_internal_check(const struct lk_cluster *cl, const struct lk_listener *l, char *err,
                               size_t errlen);

#endif
