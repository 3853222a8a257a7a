/*
 * The [lookout] section (lk_conf_lookout.c): its key table, its defaults
 * and its loader.
 */
#ifndef LK_CONF_LOOKOUT_H
#define LK_CONF_LOOKOUT_H

#include "lk_conf.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"

extern const struct lk_conf_key lk_conf_lookout_keys[];

/* The [lookout] defaults, before the file is read. */
void lk_conf_lookout_init(struct lk_conf *c);
/* Loads [lookout] section s into ld's conf. */
int lk_conf_load_lookout(struct lk_loader *ld, struct lk_conf_section *s);

#endif
