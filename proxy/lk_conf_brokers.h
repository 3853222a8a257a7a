/*
 * The brokers of the map: [broker CLUSTER/ID] sections (a Kafka broker's
 * listeners may come from its ZooKeeper registration file), the
 * resolution of every broker's internal and lookup listener once all are
 * loaded, and the registrations a cluster's store delivered.
 */
#ifndef LK_CONF_BROKERS_H
#define LK_CONF_BROKERS_H

#include "lk_conf.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"

/* The keys of [broker CLUSTER/ID], which lk_conf_load_broker reads itself. */
extern const struct lk_conf_key lk_conf_broker_keys[];

/* Loads [broker CLUSTER/ID] section s (its cluster is loaded). */
int lk_conf_load_broker(struct lk_loader *ld, struct lk_conf_section *s);
/* Each broker's internal and lookup listener, once every broker of cl is
 * loaded: a Pulsar cluster's, and a Kafka cluster's. */
int lk_conf_resolve_pulsar(struct lk_loader *ld, struct lk_cluster *cl);
int lk_conf_resolve_kafka(struct lk_loader *ld, struct lk_cluster *cl);
/* Adds the registrations of set (cluster cl's store) as live brokers;
 * those refused go to cl->rejects. */
void lk_conf_load_store(struct lk_loader *ld, struct lk_cluster *cl,
                        const struct lk_live_set *set);
/* The line a broker's listeners come from (its store key's for a live one). */
int lk_conf_listeners_line(const struct lk_conf *c, const struct lk_broker *b);

#endif
