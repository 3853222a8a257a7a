/*
 * Config keys as data, in the spirit of nginx's ngx_command_t: every key
 * is one row of its section's table (struct lk_conf_key), with the
 * sections it may stand in, the setter that parses its value into the
 * field at `off`, its default and a line saying what it does.  The rows
 * drive the loading of each section, the defaults, the unknown-key check
 * and its "did you mean" hints, and `lookout --keys`, which the man-page
 * lint reads; a key is added by adding its row.
 *
 * The tables: [lookout] in lk_conf_lookout.c, [pulsar NAME] and [kafka
 * NAME] in lk_conf_cluster.c, [broker CLUSTER/ID] in lk_conf_brokers.c;
 * a filter's own keys sit beside its ops table (lk_filter.h).
 */
#ifndef LK_CONF_KEYS_H
#define LK_CONF_KEYS_H

#include <stddef.h>
#include <stdio.h>

#include "lk_conf.h"
#include "lk_conf_ini.h"

/* Where a key may stand: a section kind ([broker] by its cluster's kind). */
#define LK_IN_LOOKOUT 0x01u
#define LK_IN_PULSAR 0x02u
#define LK_IN_KAFKA 0x04u
#define LK_IN_BROKER_PULSAR 0x08u
#define LK_IN_BROKER_KAFKA 0x10u
#define LK_IN_CLUSTER (LK_IN_PULSAR | LK_IN_KAFKA)

/* Row flags. */
#define LK_KEY_INIT 0x01u   /* def is applied through set before the file's value */
#define LK_KEY_ALWAYS 0x02u /* set also runs, with e NULL, when the key is absent */
#define LK_KEY_NAMES 0x08u  /* arg names the values of an enum its own setter parses */
#define LK_KEY_REFUSED 0x04u /* a key of another kind that set refuses, saying why:
                              * no hint names it, and --keys leaves it out */

struct lk_conf_key;
/*
 * Parses entry e of section s into obj (the struct lk_conf, or the
 * section's struct lk_cluster) at k->off.  e is NULL for an absent
 * LK_KEY_ALWAYS key.  0, or -1 having reported at e's line.
 */
typedef int lk_conf_set_fn(struct lk_loader *ld, struct lk_conf_section *s,
                           struct lk_conf_entry *e, const struct lk_conf_key *k, void *obj);

struct lk_conf_key {
    const char *name;
    unsigned in;        /* LK_IN_* */
    lk_conf_set_fn *set; /* NULL: read by another row's setter, its section's
                          * loader, or the filter chain (the key is still known) */
    size_t off;         /* the field set fills */
    const void *arg;    /* the setter's: enum names, a range */
    unsigned flags;     /* LK_KEY_* */
    const char *def;    /* the default, as a value (LK_KEY_INIT) or in words; NULL: none */
    const char *doc;    /* one line */
};

/* A row's field in obj. */
#define LK_KEY_FIELD(k, obj, type) ((type *)(void *)((char *)(obj) + (k)->off))

/* The setters most keys share: set_duration (unsigned ms, above 0),
 * set_onoff (int), set_size (size_t; arg: a const size_t * minimum, NULL
 * for 1), set_uint (unsigned; arg: a const struct lk_key_range *) and
 * set_enum (int-sized enum; arg: NULL-terminated names, listed in the
 * error). */
struct lk_key_range {
    unsigned long min, max;
};
lk_conf_set_fn lk_set_duration, lk_set_onoff, lk_set_size, lk_set_uint, lk_set_enum;
/* A file's path (char *), relative to the config file's folder. */
lk_conf_set_fn lk_set_path;
/* CIDRs (struct lk_cidr *; arg: a const size_t * offset of the count). */
lk_conf_set_fn lk_set_cidrs;
/* A request rate, "100/s", "30/m" or off (struct lk_rate: its requests,
 * 0 when off, and per_s). */
lk_conf_set_fn lk_set_rate;
/* The duration, on/off and size parsers of those setters, for setters of
 * their own. */
int lk_conf_duration(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                     unsigned *ms);
int lk_conf_onoff(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                  int *on);
int lk_conf_size(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                 size_t min, size_t *bytes);

/* The value of row k in obj as the key would be written, for the rows of
 * the shared setters and LK_KEY_NAMES ones (a duration in its largest
 * whole unit: 10m, 30s, 250ms); NULL for the others. */
const char *lk_conf_key_text(const struct lk_conf_key *k, const void *obj, char *buf, size_t len);

/* A table's rows end with one whose name is NULL. */
/* Applies the defaults of the rows of table for section kind `in` to obj
 * (aborts if one does not parse: they are constants). */
void lk_conf_keys_init(const struct lk_conf_key *table, unsigned in, void *obj);
/* Takes and sets, in table order, every row's key of kind `in` from s. */
int lk_conf_keys_load(struct lk_loader *ld, struct lk_conf_section *s,
                      const struct lk_conf_key *table, unsigned in, void *obj);
/* The row of name for kind `in`, or NULL; nocase: case-insensitively. */
const struct lk_conf_key *lk_conf_key_find(const struct lk_conf_key *table, unsigned in,
                                           const char *name, int nocase);

/* Fails on the first entry of the file nobody took, with a hint when it is
 * a typo of a key of its own section or a key of another section. */
int lk_conf_check_unknown(struct lk_loader *ld, const struct lk_conf_key *const *tables);
/* `lookout --keys`: every key of tables, one a line, tab-separated:
 * SECTION KEY DEFAULT WHAT-IT-DOES, SECTION one of lookout, pulsar, kafka,
 * broker-pulsar, broker-kafka, in that order (a key of several sections
 * has a line in each). */
void lk_conf_keys_print(const struct lk_conf_key *const *tables, FILE *out);

#endif
