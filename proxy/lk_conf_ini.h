/*
 * The INI reader and the loader's common ground: the state every loader
 * pass shares (struct lk_loader), the one way they fail (lk_conf_err:
 * "file:line: [kind name] key: message"), and the sections and entries the
 * reader made of the text, which the passes take from.
 */
#ifndef LK_CONF_INI_H
#define LK_CONF_INI_H

#include <stddef.h>

#include "lk_conf.h"

struct lk_loader {
    struct lk_conf *conf;
    char *err;
    size_t errlen;
    const struct lk_live_set *sets; /* lk_conf_load_live: the stores' registrations */
    size_t nsets;
};

#define SECT_FMT "[%s%s%s]"
#define SECT_ARGS(s) (s)->kind, (s)->name != NULL ? " " : "", (s)->name != NULL ? (s)->name : ""

/* The most sections and entries a file may hold (lk_conf_load.c has the
 * most bytes): far above any real cluster, so that a wrong or hostile file
 * fails fast instead of eating memory and time. */
#define LK_CONF_MAX_SECTIONS 10000u
#define LK_CONF_MAX_ENTRIES 1000u

/*
 * Writes "file:line: [kind name] key: message" into the loader's err; s and
 * key may be NULL, line 0 means "no line".  Returns -1 for `return lk_conf_err()`.
 */
int lk_conf_err(struct lk_loader *ld, int line, const struct lk_conf_section *s, const char *key,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The same, for an entry e of section s. */
#define LK_ENTRY_ERR(ld, s, e, ...) lk_conf_err((ld), (e)->line, (s), (e)->key, __VA_ARGS__)
/* A mistake that does not stop the load, in the same form, kept in the
 * config's warnings (lk_conf_warnings_log says them). */
void lk_conf_warn(struct lk_loader *ld, int line, const struct lk_conf_section *s, const char *key,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Splits text into sections and entries.  0, or -1 with the message. */
int lk_conf_read_ini(struct lk_loader *ld, const char *text, size_t len);

/* Space or tab (and \r, \v, \f), as the reader trims values. */
int lk_conf_is_ws(char c);
/* The section [kind name] (name NULL for [lookout]), or NULL. */
struct lk_conf_section *lk_conf_find_section(const struct lk_conf *c, const char *kind,
                                             const char *name);
/* The entry for key in s, or NULL; lk_conf_take marks it used too. */
struct lk_conf_entry *lk_conf_find_entry(const struct lk_conf_section *s, const char *key);
struct lk_conf_entry *lk_conf_take(struct lk_conf_section *s, const char *key);

/* A path from the config, resolved against the config's directory (malloc'd). */
char *lk_conf_path(const struct lk_conf *c, const char *path);

#endif
