/*
 * The loader's passes that need no filter (lk_conf_load.c): text to
 * settings, clusters and resolved brokers.  lk_conf_ready.h finishes the
 * job (filter chains, unknown keys, binds); lk_conf_load() and its kin
 * (lk_conf.h) do both.
 */
#ifndef LK_CONF_LOAD_H
#define LK_CONF_LOAD_H

#include <stddef.h>

#include "lk_conf.h"
#include "lk_conf_keys.h"

/* The key tables of the config's own sections, NULL-terminated (a
 * filter's keys are in its ops table). */
extern const struct lk_conf_key *const lk_conf_tables[];

/*
 * Reads text (name stands for the file) into a config with the stores'
 * registrations in sets: every section loaded, every broker resolved.  Its
 * filter chains, the unknown-key check and its binds are still to come
 * (lk_conf_ready).  NULL with "file:line: message" in err.
 */
struct lk_conf *lk_conf_parse(const char *name, const char *text, size_t len,
                              const struct lk_live_set *sets, size_t nsets, char *err,
                              size_t errlen);

#endif
