/*
 * A config made ready to run (lk_conf_ready.c): the step above both the
 * config and the filters: loading a config is lk_conf_parse() then
 * lk_conf_ready(), and a caller that loads one includes this header, so
 * the dependency on the filters shows (tests/cycles.pl sees it).
 */
#ifndef LK_CONF_READY_H
#define LK_CONF_READY_H

#include <stddef.h>
#include <stdio.h>

#include "lk_conf.h"


/*
 * Finishes a config lk_conf_parse() made: each filter's keys (every filter
 * of the cluster's protocol, in the chain or not), each cluster's filter
 * chain from its `filters =` key, then the check that every entry was
 * taken, then the binds.  0, or -1 with "file:line: message" in err (the
 * config is then only good for lk_conf_unref).
 */
int lk_conf_ready(struct lk_conf *c, char *err, size_t errlen);
/* `lookout --keys`: every key of the config's sections and of the
 * filters (lk_conf_keys_print). */
void lk_conf_keys_print_all(FILE *out);

/* Loading: lk_conf_load.h's passes, then the filter chains, the unknown-key
 * check and the binds. */

/*
 * Loads and validates a config file.  Returns NULL and writes
 * "file:line: message" into err on any error: unknown or duplicate key, bad
 * URL, unknown listener name, conflicting binds, bad filter list.
 * The result has one reference.
 */
struct lk_conf *lk_conf_load(const char *path, char *err, size_t errlen);
/* The same over text in memory; `name` stands for the file in messages and
 * its directory anchors relative paths. */
struct lk_conf *lk_conf_load_buf(const char *name, const char *text, size_t len, char *err,
                                 size_t errlen);
/*
 * The same with the brokers that clusters' stores (metadataStoreUrl,
 * zookeeper.connect) registered: each set's nodes are parsed and checked
 * (lk_registration_parse) and added as brokers of its cluster after the
 * static ones.  A static [broker] section of the same name wins over its
 * registration; a registration that does not parse, or whose addresses
 * another broker has, is left out and listed in cl->rejects.  Whatever else
 * fails (a bind conflict) fails the whole load, as for a file.
 */
struct lk_conf *lk_conf_load_live(const char *name, const char *text, size_t len,
                                  const struct lk_live_set *sets, size_t nsets, char *err,
                                  size_t errlen);

#endif
