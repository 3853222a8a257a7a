/*
 * A config made ready to run (lk_conf_ready.c): the step above both the
 * config and the filters.  lk_conf_load(), lk_conf_load_buf() and
 * lk_conf_load_live() (declared with the model in lk_conf.h) are
 * lk_conf_parse() then lk_conf_ready().
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

#endif
