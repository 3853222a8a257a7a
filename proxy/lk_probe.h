/*
 * `lookout --probe -c FILE`: a one-shot check of the listener map against
 * the live cluster.  It asks every broker, on its internal address, what
 * the broker itself advertises, and prints where that and the map
 * disagree.  Blocking sockets with timeouts; nothing here runs inside the
 * proxy.
 */
#ifndef LK_PROBE_H
#define LK_PROBE_H

#include <stdio.h>

struct lk_runtime;

/* The topic the Pulsar probe looks up (persistent://public/default/...):
 * a lookup assigns its bundle an owner but creates no topic. */
#define LK_PROBE_TOPIC "lookout-probe"

/*
 * Probes every broker of rt->conf (TLS to brokers through rt->client_ctx)
 * and writes one line per broker to out:
 *   OK|MISMATCH|UNREACHABLE <cluster/broker> <internal address>: details
 * then one MISMATCH line per broker or node the cluster has and the map
 * lacks, then a summary line.  Each connect and each read waits at most
 * timeout.connect.
 *   Pulsar: GET /admin/v2/brokers/ready, /admin/v2/clusters and
 *   /admin/v2/brokers/{cluster} (the active brokers, as host:port of their
 *   web service), and a lookup of LK_PROBE_TOPIC, whose addresses (LookupData
 *   URLs, or a 307's Location) must all be in the map.
 *   Kafka: ApiVersions v0, then Metadata (no topics) at the newest version
 *   both sides know; each node it names must be in the map, at the address
 *   of the map's internal listener for that node.
 * Returns 0 when everything agrees, 1 when anything disagrees or a broker
 * cannot be asked.
 */
int lk_probe_run(struct lk_runtime *rt, FILE *out);

#endif
