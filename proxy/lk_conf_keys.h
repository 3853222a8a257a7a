/*
 * The sections' keys (lk_conf_keys.c): the loaders of [lookout], [pulsar
 * NAME] and [kafka NAME], the defaults, and the unknown-key check.
 */
#ifndef LK_CONF_KEYS_H
#define LK_CONF_KEYS_H

#include "lk_conf.h"
#include "lk_conf_ini.h"

/* Broker health, either kind of cluster (struct lk_health_conf). */
#define DEFAULT_HEALTH_BACKOFF_MS 1000u
#define DEFAULT_HEALTH_BACKOFF_MAX_MS 30000u

/* The names of each enumerated setting, indexed by its enum. */
extern const char *const lk_redirects_names[];
extern const char *const lk_pulsar_routing_names[];
extern const char *const lk_leak_guard_names[];
extern const char *const lk_upstream_tls_names[];
extern const char *const lk_unknown_api_names[];
extern const char *const lk_health_check_names[];

/* The [lookout] settings before the file is read. */
void lk_conf_defaults(struct lk_conf *c);
/* Loads [lookout] section s; [pulsar NAME]; [kafka NAME] (a new cluster). */
int lk_conf_load_lookout(struct lk_loader *ld, struct lk_conf_section *s);
int lk_conf_load_pulsar(struct lk_loader *ld, struct lk_conf_section *s);
int lk_conf_load_kafka(struct lk_loader *ld, struct lk_conf_section *s);
/* Fails on the first entry of the file nobody took, with a hint when it is
 * a typo of a known key or a key of another section. */
int lk_conf_check_unknown(struct lk_loader *ld);

#endif
