/*
 * The key tables' machinery (lk_conf_keys.h): the setters most keys share,
 * the loops that load a section and apply its defaults from its table, the
 * unknown-key check with its hints, and the listing `lookout --keys`
 * prints.  The tables themselves sit with their sections' loaders.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lk_conf.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"
#include "lk_conf_value.h"
#include "lk_registry.h"

/* Setters ------------------------------------------------------------------------ */

int
lk_conf_duration(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                 unsigned *ms)
{
    if (lk_parse_duration(e->value, ms) != 0 || *ms == 0)
        return LK_ENTRY_ERR(ld, s, e,
                            "'%s' is not a duration (expected e.g. 250ms, 10s or 2m, above 0)",
                            e->value);
    return 0;
}

int
lk_conf_onoff(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, int *on)
{
    if (strcmp(e->value, "on") == 0)
        *on = 1;
    else if (strcmp(e->value, "off") == 0)
        *on = 0;
    else
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not on or off", e->value);
    return 0;
}

int
lk_conf_size(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e, size_t min,
             size_t *bytes)
{
    if (lk_parse_size(e->value, bytes) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a size (expected e.g. 512, 32k or 5m)",
                            e->value);
    if (*bytes < min)
        return LK_ENTRY_ERR(ld, s, e, "%s is below the minimum of %zu bytes", e->value, min);
    return 0;
}

int
lk_set_duration(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                const struct lk_conf_key *k, void *obj)
{
    return lk_conf_duration(ld, s, e, LK_KEY_FIELD(k, obj, unsigned));
}

int
lk_set_onoff(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
             const struct lk_conf_key *k, void *obj)
{
    return lk_conf_onoff(ld, s, e, LK_KEY_FIELD(k, obj, int));
}

int
lk_set_size(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    size_t min = k->arg != NULL ? *(const size_t *)k->arg : 1;

    return lk_conf_size(ld, s, e, min, LK_KEY_FIELD(k, obj, size_t));
}

int
lk_set_uint(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    const struct lk_key_range *r = k->arg;
    unsigned long n;

    if (lk_parse_uint(e->value, r->max, &n) != 0 || n < r->min)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a number from %lu to %lu", e->value, r->min,
                            r->max);
    *LK_KEY_FIELD(k, obj, unsigned) = (unsigned)n;
    return 0;
}

/* CIDRs (admin.allow, internal_networks): the array at k->off, its count
 * at the offset arg points to. */
int
lk_set_cidrs(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
             const struct lk_conf_key *k, void *obj)
{
    struct lk_cidr **nets = LK_KEY_FIELD(k, obj, struct lk_cidr *);
    char msg[512];
    int r;

    free(*nets);
    *nets = NULL;
    if ((r = lk_cidrs_parse(e->value, nets, msg, sizeof(msg))) < 0)
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    *(size_t *)(void *)((char *)obj + *(const size_t *)k->arg) = (size_t)r;
    return 0;
}

int
lk_set_rate(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    struct lk_rate *r = LK_KEY_FIELD(k, obj, struct lk_rate);

    if (strcmp(e->value, "off") == 0) {
        r->requests = 0;
        return 0;
    }
    if (lk_parse_rate(e->value, LK_RATE_MAX, &r->requests, &r->per_s) != 0)
        return LK_ENTRY_ERR(ld, s, e, "'%s' is not a rate: N/s or N/m, N from 1 to %u (or off)",
                            e->value, LK_RATE_MAX);
    return 0;
}

/* "'%s' is not a, b or c", from the names. */
int
lk_set_path(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    char **p = LK_KEY_FIELD(k, obj, char *);

    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty path");
    free(*p);
    *p = lk_conf_path(ld->conf, e->value);
    return 0;
}

int
lk_set_enum(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
            const struct lk_conf_key *k, void *obj)
{
    const char *const *names = k->arg;
    char list[256];
    size_t off = 0;
    int v = lk_parse_enum(e->value, names);

    if (v >= 0) {
        *LK_KEY_FIELD(k, obj, int) = v;
        return 0;
    }
    list[0] = '\0';
    for (int i = 0; names[i] != NULL && off < sizeof(list); i++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s",
                                i == 0 ? "" : names[i + 1] == NULL ? " or " : ", ", names[i]);
    return LK_ENTRY_ERR(ld, s, e, "'%s' is not %s", e->value, list);
}

const char *
lk_conf_key_text(const struct lk_conf_key *k, const void *obj, char *buf, size_t len)
{
    const void *p = (const char *)obj + k->off;

    if (k->set == lk_set_enum || (k->flags & LK_KEY_NAMES))
        return ((const char *const *)k->arg)[*(const int *)p];
    if (k->set == lk_set_onoff)
        return *(const int *)p ? "on" : "off";
    if (k->set == lk_set_size)
        snprintf(buf, len, "%zu", *(const size_t *)p);
    else if (k->set == lk_set_uint)
        snprintf(buf, len, "%u", *(const unsigned *)p);
    else if (k->set == lk_set_duration) {
        unsigned ms = *(const unsigned *)p;
        snprintf(buf, len, "%u%s", ms % 60000 == 0 ? ms / 60000 : ms % 1000 == 0 ? ms / 1000 : ms,
                 ms % 60000 == 0 ? "m" : ms % 1000 == 0 ? "s" : "ms");
    } else
        return NULL;
    return buf;
}

/* Loading by table ------------------------------------------------------------------ */

void
lk_conf_keys_init(const struct lk_conf_key *table, unsigned in, void *obj)
{
    for (const struct lk_conf_key *k = table; k->name != NULL; k++) {
        struct lk_conf_entry e = {(char *)k->name, (char *)k->def, 0, 1};
        struct lk_loader ld = {0};

        if ((k->in & in) == 0 || !(k->flags & LK_KEY_INIT))
            continue;
        if (k->set(&ld, NULL, &e, k, obj) != 0) {
            fprintf(stderr, "lookout: the default of %s does not parse\n", k->name);
            abort(); /* a constant */
        }
    }
}

int
lk_conf_keys_load(struct lk_loader *ld, struct lk_conf_section *s, const struct lk_conf_key *table,
                  unsigned in, void *obj)
{
    for (const struct lk_conf_key *k = table; k->name != NULL; k++) {
        struct lk_conf_entry *e;

        if ((k->in & in) == 0 || k->set == NULL)
            continue;
        e = lk_conf_take(s, k->name);
        if ((e != NULL || (k->flags & LK_KEY_ALWAYS)) && k->set(ld, s, e, k, obj) != 0)
            return -1;
    }
    return 0;
}

const struct lk_conf_key *
lk_conf_key_find(const struct lk_conf_key *table, unsigned in, const char *name, int nocase)
{
    for (const struct lk_conf_key *k = table; k->name != NULL; k++)
        if ((k->in & in) != 0 && (nocase ? strcasecmp(k->name, name) : strcmp(k->name, name)) == 0)
            return k;
    return NULL;
}

/* Unknown keys ------------------------------------------------------------------- */

/* The section kinds, in the order the hints try them. */
static const struct {
    const char *kind, *list; /* the section's word, and its name in --keys */
    unsigned in;
    const char *where; /* what the hint adds after "a [kind] section" */
} kinds[] = {
    {"lookout", "lookout", LK_IN_LOOKOUT, ""},
    {"pulsar", "pulsar", LK_IN_PULSAR, ""},
    {"kafka", "kafka", LK_IN_KAFKA, ""},
    {"broker", "broker-pulsar", LK_IN_BROKER_PULSAR, " of a Pulsar cluster"},
    {"broker", "broker-kafka", LK_IN_BROKER_KAFKA, " of a Kafka cluster"},
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static const struct lk_conf_key *
find_in(const struct lk_conf_key *const *tables, unsigned in, const char *name)
{
    for (size_t t = 0; tables[t] != NULL; t++)
        for (const struct lk_conf_key *k = tables[t]; k->name != NULL; k++)
            if ((k->in & in) != 0 && !(k->flags & LK_KEY_REFUSED) && strcasecmp(k->name, name) == 0)
                return k;
    return NULL;
}

int
lk_conf_check_unknown(struct lk_loader *ld, const struct lk_conf_key *const *tables)
{
    struct lk_conf *c = ld->conf;

    for (size_t i = 0; i < c->nsections; i++) {
        struct lk_conf_section *s = &c->sections[i];
        unsigned own = strcmp(s->kind, "lookout") == 0  ? LK_IN_LOOKOUT
                       : strcmp(s->kind, "pulsar") == 0 ? LK_IN_PULSAR
                       : strcmp(s->kind, "kafka") == 0  ? LK_IN_KAFKA
                                                        : LK_IN_BROKER_PULSAR;

        /* A [broker]'s keys depend on its cluster's kind. */
        if (own == LK_IN_BROKER_PULSAR)
            for (size_t b = 0; b < c->nbrokers; b++)
                if (strcmp(c->brokers[b]->name, s->name) == 0 &&
                    lk_cluster_is_kafka(c->brokers[b]->cluster))
                    own = LK_IN_BROKER_KAFKA;
        for (size_t j = 0; j < s->nentries; j++) {
            struct lk_conf_entry *e = &s->entries[j];
            const struct lk_conf_key *k;

            if (e->used)
                continue;
            /* A typo of the section's own key first, then a key of
             * another kind. */
            if ((k = find_in(tables, own, e->key)) != NULL)
                return LK_ENTRY_ERR(ld, s, e, "unknown key (did you mean %s?)", k->name);
            for (size_t n = 0; n < NKINDS; n++) {
                if (kinds[n].in == own || (k = find_in(tables, kinds[n].in, e->key)) == NULL)
                    continue;
                return LK_ENTRY_ERR(ld, s, e, "unknown key (%s belongs in a [%s] section%s)",
                                    k->name, kinds[n].kind, kinds[n].where);
            }
            return LK_ENTRY_ERR(ld, s, e, "unknown key");
        }
    }
    return 0;
}

/* Listing -------------------------------------------------------------------------- */

void
lk_conf_keys_print(const struct lk_conf_key *const *tables, FILE *out)
{
    for (size_t n = 0; n < NKINDS; n++)
        for (size_t t = 0; tables[t] != NULL; t++)
            for (const struct lk_conf_key *k = tables[t]; k->name != NULL; k++)
                if ((k->in & kinds[n].in) && !(k->flags & LK_KEY_REFUSED))
                    fprintf(out, "%s\t%s\t%s\t%s\n", kinds[n].list, k->name,
                            k->def != NULL ? k->def : "-", k->doc);
}
