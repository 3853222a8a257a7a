/*
 * The [pulsar NAME] and [kafka NAME] sections (lk_conf_cluster.c): their
 * key table and loader, and the names of the clusters' enumerated settings.
 */
#ifndef LK_CONF_CLUSTER_H
#define LK_CONF_CLUSTER_H

#include "lk_conf.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"

extern const struct lk_conf_key lk_conf_cluster_keys[];

/* The names of each enumerated setting, indexed by its enum. */
extern const char *const lk_redirects_names[];
extern const char *const lk_pulsar_routing_names[];
extern const char *const lk_leak_guard_names[];
extern const char *const lk_upstream_tls_names[];
extern const char *const lk_unknown_api_names[];
extern const char *const lk_health_check_names[];

/* Loads [pulsar NAME] or [kafka NAME] section s as a new cluster. */
int lk_conf_load_cluster(struct lk_loader *ld, struct lk_conf_section *s);

#endif
