/*
 * The brokers of the map (lk_conf_brokers.h): [broker] sections and
 * registration files, listener resolution, and the store's registrations.
 * Addresses are how lookout tells brokers apart, so each broker's
 * addresses are claimed in its cluster's index as it is loaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lk_conf.h"
#include "lk_conf_brokers.h"
#include "lk_conf_ini.h"
#include "lk_conf_keys.h"
#include "lk_conf_value.h"
#include "lk_meta.h"
#include "lk_pool.h"
#include "lk_registry.h"

/* A broker registration is a few hundred bytes; ZooKeeper's znode limit is
 * 1 MiB (jute.maxbuffer). */
#define MAX_REGISTRATION_BYTES (1024u * 1024)

/* clang-format off */
const struct lk_conf_key lk_conf_broker_keys[] = {
    {"advertisedListeners", LK_IN_BROKER_PULSAR, NULL, 0, NULL, 0, "required",
     "the broker's listeners, as its broker.conf has them: NAME:scheme://host:port,..."},
    {"advertised.listeners", LK_IN_BROKER_KAFKA, NULL, 0, NULL, 0, "required (or registration)",
     "the broker's listeners, as its server.properties has them: NAME://host:port,..."},
    {"registration", LK_IN_BROKER_KAFKA, NULL, 0, NULL, 0, "none",
     "a file with the broker's ZooKeeper registration JSON, instead of advertised.listeners"},
    {NULL, 0, NULL, 0, NULL, 0, NULL, NULL},
};
/* clang-format on */

/* [broker CLUSTER/ID] ------------------------------------------------------------ */

/* The entry a loaded broker's listeners come from: advertisedListeners,
 * advertised.listeners or registration. */
static struct lk_conf_entry *
listeners_entry(const struct lk_conf *c, const struct lk_broker *b)
{
    const struct lk_conf_section *s = lk_conf_find_section(c, "broker", b->name);
    struct lk_conf_entry *e;

    if (!lk_cluster_is_kafka(b->cluster))
        return lk_conf_find_entry(s, "advertisedListeners");
    e = lk_conf_find_entry(s, "advertised.listeners");
    return e != NULL ? e : lk_conf_find_entry(s, "registration");
}

int
lk_conf_listeners_line(const struct lk_conf *c, const struct lk_broker *b)
{
    const struct lk_conf_entry *e = b->live ? NULL : listeners_entry(c, b);

    /* A live broker has no section: its store key's line stands for it. */
    return e != NULL ? e->line : b->line;
}


/* Addresses are how lookout tells brokers apart (lk_cluster_find_addr), so
 * two brokers of one cluster cannot share one.  b is the cluster's last
 * broker, so any other match comes first. */
static int
check_broker_addrs(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                   const struct lk_broker *b)
{
    const struct lk_url *u;
    const struct lk_broker *o = lk_cluster_addr_claim(b->cluster, b, &u);

    if (o != NULL)
        return LK_ENTRY_ERR(ld, s, e, "%s is also an address of broker %s (line %d)", u->hostport,
                         o->name, lk_conf_listeners_line(ld->conf, o));
    return 0;
}

/* Registration JSON ------------------------------------------------------------- */

/* Reads a whole regular file of at most max bytes; NULL with errno set
 * (EINVAL: not a regular file, EFBIG: too large). */
static char *
read_small_file(const char *path, size_t max, size_t *len)
{
    /* O_NONBLOCK: a FIFO given by mistake must not hang the load. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n;
    int e;

    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) != 0)
        goto fail;
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        goto fail;
    }
    /* The size is a hint only (a file in /proc says 0, a file may grow):
     * read to EOF, and stop past max. */
    *len = 0;
    do {
        if (*len == cap) {
            if (cap > max) {
                errno = EFBIG;
                goto fail;
            }
            cap = cap == 0 ? (size_t)st.st_size + 1 : cap * 2;
            if (cap > max + 1)
                cap = max + 1;
            buf = lk_xrealloc(buf, cap);
        }
        n = read(fd, buf + *len, cap - *len);
        if (n > 0)
            *len += (size_t)n;
    } while (n > 0);
    if (n < 0)
        goto fail;
    if (*len > max) {
        errno = EFBIG;
        goto fail;
    }
    close(fd);
    return buf;

fail:
    e = errno;
    free(buf);
    close(fd);
    errno = e;
    return NULL;
}

/* registration = FILE: the broker's listeners from its ZooKeeper
 * registration (/brokers/ids/ID), relative to the config's directory. */
static int
load_registration(struct lk_loader *ld, struct lk_conf_section *s, struct lk_conf_entry *e,
                  struct lk_broker *b)
{
    char *text, msg[512];
    size_t len = 0;
    int rc;

    if (e->value[0] == '\0')
        return LK_ENTRY_ERR(ld, s, e, "empty path");
    b->registration = lk_conf_path(ld->conf, e->value);
    if ((text = read_small_file(b->registration, MAX_REGISTRATION_BYTES, &len)) == NULL)
        return LK_ENTRY_ERR(ld, s, e, "cannot read %s: %s", b->registration,
                         errno == EINVAL  ? "not a regular file"
                         : errno == EFBIG ? "larger than 1 MiB: is it a registration?"
                                          : strerror(errno));
    rc = lk_registry_kafka_listeners(text, len, &b->listeners, &b->nlisteners, msg, sizeof(msg));
    free(text);
    if (rc != 0)
        return LK_ENTRY_ERR(ld, s, e, "%s: %s", e->value, msg);
    return 0;
}

/* A Kafka broker: the node id from its name, and its listeners from
 * advertised.listeners or its registration file. */
static int
load_kafka_broker(struct lk_loader *ld, struct lk_conf_section *s, struct lk_broker *b)
{
    const struct lk_cluster *cl = b->cluster;
    struct lk_conf_entry *al = lk_conf_take(s, "advertised.listeners"), *reg = lk_conf_take(s, "registration");
    unsigned long id;
    char msg[512];
    int n;

    /* The canonical decimal form only, so that [broker events/1] and
     * [broker events/01] cannot both name node 1. */
    if (lk_parse_uint(b->id, INT32_MAX, &id) != 0 || (b->id[0] == '0' && b->id[1] != '\0'))
        return lk_conf_err(ld, s->line, s, NULL,
                      "'%s' is not a node id: Kafka's broker.id, an integer from 0 to 2147483647 "
                      "without leading zeros, e.g. [broker %s/1]",
                      b->id, cl->name);
    b->node_id = (int32_t)id;
    if (al != NULL && reg != NULL) {
        struct lk_conf_entry *second = al->line > reg->line ? al : reg;
        return LK_ENTRY_ERR(ld, s, second,
                         "give either advertised.listeners or registration, not both (the other "
                         "is at line %d)",
                         (second == al ? reg : al)->line);
    }
    if (al == NULL && reg == NULL)
        return lk_conf_err(ld, s->line, s, NULL, "advertised.listeners or registration is missing%s",
                      lk_conf_find_entry(s, "advertisedListeners") != NULL
                          ? " (advertisedListeners is Pulsar's key; Kafka's server.properties "
                            "spells it advertised.listeners)"
                          : "");
    if (al != NULL) {
        const struct lk_conf_entry *me = lk_conf_find_entry(cl->section, "listener.security.protocol.map");
        char mapname[128];

        if (me != NULL)
            snprintf(mapname, sizeof(mapname), "listener.security.protocol.map (line %d)",
                     me->line);
        else
            snprintf(mapname, sizeof(mapname),
                     "Kafka's default listener.security.protocol.map (%s)",
                     lk_kafka_default_secmap);
        if ((n = lk_kafka_listeners_parse(al->value, cl->secmap, cl->nsecmap, mapname,
                                          &b->listeners, msg, sizeof(msg))) < 0)
            return LK_ENTRY_ERR(ld, s, al, "%s", msg);
        b->nlisteners = (size_t)n;
    } else if (load_registration(ld, s, reg, b) != 0) {
        return -1;
    }
    return check_broker_addrs(ld, s, al != NULL ? al : reg, b);
}

/* A new broker ID of cluster cl, last in both lists. */
static struct lk_broker *
broker_add(struct lk_conf *c, struct lk_cluster *cl, const char *id, int line)
{
    struct lk_broker *b = lk_xcalloc(1, sizeof(*b));
    size_t n = strlen(cl->name) + 1 + strlen(id) + 1;

    b->name = lk_xmalloc(n);
    snprintf(b->name, n, "%s/%s", cl->name, id);
    b->id = lk_xstrdup(id);
    b->node_id = -1;
    b->cluster = cl;
    b->line = line;
    b->index = c->nbrokers;
    c->brokers = lk_xrealloc(c->brokers, (c->nbrokers + 1) * sizeof(*c->brokers));
    c->brokers[c->nbrokers++] = b;
    cl->brokers = lk_xrealloc(cl->brokers, (cl->nbrokers + 1) * sizeof(*cl->brokers));
    cl->brokers[cl->nbrokers++] = b;
    return b;
}

/* Undoes broker_add for the last broker, b. */
static void
broker_drop(struct lk_conf *c, struct lk_broker *b)
{
    c->nbrokers--;
    b->cluster->nbrokers--;
    lk_broker_free(b);
}

int
lk_conf_load_broker(struct lk_loader *ld, struct lk_conf_section *s)
{
    struct lk_conf *c = ld->conf;
    const char *slash = strchr(s->name, '/');
    struct lk_cluster *cl;
    struct lk_broker *b;
    struct lk_conf_entry *e;
    char msg[512];
    int n;

    if (slash == NULL || slash == s->name || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return lk_conf_err(ld, s->line, s, NULL, "the name must be CLUSTER/ID, e.g. [broker prod/b1]");
    cl = lk_conf_find_cluster(c, s->name, (size_t)(slash - s->name));
    if (cl == NULL)
        return lk_conf_err(ld, s->line, s, NULL,
                      "cluster '%.*s' is not defined (no [pulsar %.*s] or [kafka %.*s])",
                      (int)(slash - s->name), s->name, (int)(slash - s->name), s->name,
                      (int)(slash - s->name), s->name);

    b = broker_add(c, cl, slash + 1, s->line);

    if (lk_cluster_is_kafka(cl))
        return load_kafka_broker(ld, s, b);
    if ((e = lk_conf_take(s, "advertisedListeners")) == NULL)
        return lk_conf_err(ld, s->line, s, NULL, "advertisedListeners is missing%s",
                      lk_conf_find_entry(s, "advertised.listeners") != NULL
                          ? " (advertised.listeners is Kafka's key; Pulsar's broker.conf spells "
                            "it advertisedListeners)"
                          : "");
    if ((n = lk_listeners_parse(e->value, &b->listeners, msg, sizeof(msg))) < 0)
        return LK_ENTRY_ERR(ld, s, e, "%s", msg);
    b->nlisteners = (size_t)n;
    return check_broker_addrs(ld, s, e, b);
}

/* Whether any broker of cl has a listener called name. */
static int
cluster_has_listener(const struct lk_cluster *cl, const char *name)
{
    for (size_t i = 0; i < cl->nbrokers; i++)
        if (lk_broker_listener(cl->brokers[i], name) != NULL)
            return 1;
    return 0;
}

/* "internal, external, vpn": the listener names of cl's brokers, each once,
 * in the order they first appear; "..." ends a list too long for buf. */
static void
listener_names(const struct lk_cluster *cl, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < cl->nbrokers; i++)
        for (size_t l = 0; l < cl->brokers[i]->nlisteners; l++) {
            const char *name = cl->brokers[i]->listeners[l].name;
            size_t j = 0;
            int n;

            /* a broker's listeners have distinct names (lk_listeners_parse) */
            while (j < i && lk_broker_listener(cl->brokers[j], name) == NULL)
                j++;
            if (j < i)
                continue;
            if (off + 2 + strlen(name) + sizeof(", ...") > len) {
                snprintf(buf + off, len - off, "%s...", off != 0 ? ", " : "");
                return;
            }
            n = snprintf(buf + off, len - off, "%s%s", off != 0 ? ", " : "", name);
            off += (size_t)n;
        }
}

/*
 * Each client_listeners name must be a listener of a broker of the file's
 * own ([broker] sections): a typo would otherwise let no client choose
 * anything, silently.  The store's brokers are not asked: they come and
 * go, and a map rebuilt from them must not fail on a name the file was
 * right about.  A cluster whose every broker comes from its store is
 * checked by no one; a name none of them has selects their lookup
 * listener then (lk_broker_client_listener, logged once per connection).
 */
static int
check_client_listeners(struct lk_loader *ld, const struct lk_cluster *cl)
{
    size_t stat = 0;
    char have[256];

    for (size_t i = 0; i < cl->nbrokers; i++)
        stat += !cl->brokers[i]->live;
    for (size_t k = 0; stat != 0 && k < cl->nclient_listeners; k++) {
        const char *name = cl->client_listeners[k];
        size_t i = 0;

        while (i < cl->nbrokers &&
               (cl->brokers[i]->live || lk_broker_listener(cl->brokers[i], name) == NULL))
            i++;
        if (i < cl->nbrokers)
            continue;
        listener_names(cl, have, sizeof(have));
        return lk_conf_err(ld, cl->client_listeners_line, cl->section, "client_listeners",
                      "no broker has a listener '%s' (their listeners: %s)", name, have);
    }
    return 0;
}

/*
 * A service address sends what it accepts to any broker with an internal
 * address of its family (lk_pick_broker), so a static map needs one such
 * broker: webServiceUrl over a map of binary addresses only would answer
 * every request 503.  A store's brokers come later; lk_http.c and
 * lk_pulsar.c say so at run time while none has one.
 */
static int
check_service_families(struct lk_loader *ld, struct lk_cluster *cl)
{
    static const char *const keys[] = {"webServiceUrl", "serviceUrl"};
    const struct lk_url *const urls[] = {cl->web_service, cl->service};
    static const enum lk_scheme families[] = {LK_SCHEME_HTTP, LK_SCHEME_PULSAR};

    if (cl->zk != NULL)
        return 0;
    for (int k = 0; k < 2; k++) {
        size_t i = 0;

        if (urls[k] == NULL)
            continue;
        while (i < cl->nbrokers &&
               lk_listener_pick(cl->brokers[i]->internal, families[k], 0) == NULL)
            i++;
        if (i < cl->nbrokers)
            continue;
        return LK_ENTRY_ERR(ld, cl->section, lk_conf_find_entry(cl->section, keys[k]),
                         "%s has nowhere to go: no broker's internal listener has a %s or %s "
                         "address",
                         urls[k]->text, lk_scheme_name(families[k]),
                         lk_scheme_name(lk_scheme_sibling(families[k])));
    }
    return 0;
}

/*
 * A broker with an internal web address can send a client a 307 to
 * itself; when its lookup listener has no http or https address and the
 * cluster no webServiceUrl, lookout has no address to put in that
 * Location (lk_location_pick), and the client gets the internal one.
 * Allowed (a map for binary clients alone is fine), but said at its line.
 */
static void
warn_no_web(struct lk_loader *ld, const struct lk_cluster *cl, const struct lk_broker *b,
            const struct lk_conf_section *s, const struct lk_conf_entry *e)
{
    if (!(cl->proto & LK_PROTO_HTTP) || b->lookup == NULL || cl->web_service != NULL ||
        lk_listener_pick(b->internal, LK_SCHEME_HTTP, 0) == NULL ||
        lk_listener_pick(b->lookup, LK_SCHEME_HTTP, 0) != NULL)
        return;
    lk_conf_warn(ld, e != NULL ? e->line : b->line, s, e != NULL ? e->key : NULL,
                 "the lookup listener '%s' has no http or https address, and the cluster no "
                 "webServiceUrl: a 307 to this broker reaches clients with its internal "
                 "Location (add an http or https address to '%s', or set "
                 "webServiceUrl)",
                 b->lookup->name, b->lookup->name);
}

/*
 * Finds each broker's internal and lookup listener once every broker of cl
 * is loaded.  A name that no broker has is the cluster key's mistake (a typo
 * in internalListenerName or lookupListenerName), so its line is named; a
 * name that only some brokers lack is those brokers' mistake.
 */
int
lk_conf_resolve_pulsar(struct lk_loader *ld, struct lk_cluster *cl)
{
    static const char *const keys[] = {"internalListenerName", "lookupListenerName"};
    const char *const names[] = {cl->internal_listener, cl->lookup_listener};
    char msg[512];

    for (int k = 0; k < 2; k++) {
        char have[256];

        /* A store's brokers bring their listeners later, each checked. */
        if (names[k] == NULL || cluster_has_listener(cl, names[k]) ||
            (cl->zk != NULL && cl->nbrokers == 0))
            continue;
        listener_names(cl, have, sizeof(have));
        return LK_ENTRY_ERR(ld, cl->section, lk_conf_find_entry(cl->section, keys[k]),
                         "no broker has a listener '%s' (their listeners: %s)", names[k], have);
    }
    if (check_client_listeners(ld, cl) != 0)
        return -1;
    for (size_t i = 0; i < cl->nbrokers; i++) {
        struct lk_broker *b = cl->brokers[i];
        struct lk_conf_section *s = lk_conf_find_section(ld->conf, "broker", b->name);
        struct lk_conf_entry *e = lk_conf_find_entry(s, "advertisedListeners");

        /* Pulsar's own rule: no internalListenerName means the first listener. */
        if (cl->internal_listener == NULL)
            b->internal = &b->listeners[0];
        else if ((b->internal = lk_broker_listener(b, cl->internal_listener)) == NULL)
            return LK_ENTRY_ERR(ld, s, e, "listener '%s' is not defined", cl->internal_listener);
        if (cl->lookup_listener != NULL) {
            if ((b->lookup = lk_broker_listener(b, cl->lookup_listener)) == NULL)
                return LK_ENTRY_ERR(ld, s, e, "listener '%s' is not defined", cl->lookup_listener);
            if (b->lookup == b->internal)
                return LK_ENTRY_ERR(
                    ld, s, e,
                    "the lookup listener '%s' is the internal listener (the first one): "
                    "lookout would listen on the addresses it connects to",
                    b->lookup->name);
        }
        if (lk_pulsar_listeners_check(b->internal, b->lookup, msg, sizeof(msg)) != 0 ||
            lk_listener_internal_check(cl, b->internal, msg, sizeof(msg)) != 0)
            return LK_ENTRY_ERR(ld, s, e, "%s", msg);
        warn_no_web(ld, cl, b, s, e);
    }
    return check_service_families(ld, cl);
}

/*
 * The Kafka counterpart: each broker's inter.broker.listener.name and
 * lookup listener, by name as Kafka normalises them.  The lookup listener
 * has one protocol across the cluster, since bootstrap.servers and
 * broker.pattern serve that protocol for any broker.
 */
int
lk_conf_resolve_kafka(struct lk_loader *ld, struct lk_cluster *cl)
{
    static const char *const keys[] = {"inter.broker.listener.name", "lookupListenerName"};
    const char *const names[] = {cl->internal_listener, cl->lookup_listener};
    const struct lk_broker *first = NULL;
    char msg[512];

    const struct lk_kafka_secmap *lsec = lk_kafka_secmap_find(
        cl->secmap, cl->nsecmap, lk_str_c(cl->lookup_listener));

    /* With a store, bootstrap.servers must be bound before any broker has
     * registered, so the cluster's own map gives the lookup listener's
     * protocol, and every registration must agree with it. */
    if (cl->zk != NULL && lsec == NULL)
        return lk_conf_err(ld, cl->line, cl->section, "listener.security.protocol.map",
                      "does not name the lookup listener '%s': with %s it gives the protocol "
                      "bootstrap.servers speaks before any broker registers (e.g. "
                      "listener.security.protocol.map = %s:SSL,%s:PLAINTEXT)",
                      cl->lookup_listener, "zookeeper.connect", cl->lookup_listener,
                      cl->internal_listener);
    for (int k = 0; k < 2; k++) {
        struct lk_conf_entry *e = lk_conf_find_entry(cl->section, keys[k]);
        char have[256];

        if (cluster_has_listener(cl, names[k]) || (cl->zk != NULL && cl->nbrokers == 0))
            continue;
        listener_names(cl, have, sizeof(have));
        if (e == NULL) /* the default PLAINTEXT */
            return lk_conf_err(ld, cl->line, cl->section, NULL,
                          "no broker has a listener '%s', Kafka's default "
                          "inter.broker.listener.name: set inter.broker.listener.name (their "
                          "listeners: %s)",
                          names[k], have);
        return LK_ENTRY_ERR(ld, cl->section, e, "no broker has a listener '%s' (their listeners: %s)",
                         names[k], have);
    }
    for (size_t i = 0; i < cl->nbrokers; i++) {
        struct lk_broker *b = cl->brokers[i];
        struct lk_conf_section *s = lk_conf_find_section(ld->conf, "broker", b->name);
        struct lk_conf_entry *e = listeners_entry(ld->conf, b);

        if ((b->internal = lk_broker_listener(b, cl->internal_listener)) == NULL)
            return LK_ENTRY_ERR(ld, s, e, "listener '%s' is not defined", cl->internal_listener);
        if ((b->lookup = lk_broker_listener(b, cl->lookup_listener)) == NULL)
            return LK_ENTRY_ERR(ld, s, e, "listener '%s' is not defined", cl->lookup_listener);
        if (lk_listener_internal_check(cl, b->internal, msg, sizeof(msg)) != 0)
            return LK_ENTRY_ERR(ld, s, e, "%s", msg);
        if (first == NULL) {
            first = b;
        } else if (lk_kafka_listener_security(b->lookup) !=
                   lk_kafka_listener_security(first->lookup)) {
            return LK_ENTRY_ERR(ld, s, e,
                             "the lookup listener '%s' is %s here but %s on broker %s (line %d): "
                             "bootstrap.servers and broker.pattern serve one protocol for every "
                             "broker",
                             b->lookup->name,
                             lk_kafka_security_name(lk_kafka_listener_security(b->lookup)),
                             lk_kafka_security_name(lk_kafka_listener_security(first->lookup)),
                             first->name, lk_conf_listeners_line(ld->conf, first));
        }
    }
    /* The entry points speak what the lookup listener speaks: static
     * brokers take their protocols from the cluster's map, as a store
     * cluster does before its brokers register. */
    enum lk_kafka_security sec =
        first != NULL ? lk_kafka_listener_security(first->lookup) : lsec->sec;
    for (size_t i = 0; i < cl->nbootstrap; i++)
        cl->bootstrap[i].scheme = lk_kafka_security_scheme(sec);
    cl->bootstrap_sasl = sec == LK_KAFKA_SASL_PLAINTEXT || sec == LK_KAFKA_SASL_SSL;
    if (cl->pattern != NULL) {
        cl->pattern->scheme = lk_kafka_security_scheme(sec);
        cl->pattern->sasl = cl->bootstrap_sasl;
    }
    return 0;
}

/* The store's registrations -------------------------------------------------------- */

void
lk_conf_reject_add(struct lk_cluster *cl, const char *znode, const char *reason)
{
    struct lk_live_reject *r;

    cl->rejects = lk_xrealloc(cl->rejects, (cl->nrejects + 1) * sizeof(*cl->rejects));
    r = &cl->rejects[cl->nrejects++];
    r->znode = lk_xstrdup(znode);
    r->reason = lk_xstrdup(reason);
}

/* Why live broker b (the cluster's last) cannot join the brokers before it,
 * or NULL: an address another broker has (lookout tells brokers apart by
 * address), or, for Kafka, a lookup protocol other than the one
 * bootstrap.servers speaks. */
static const char *
live_conflict(const struct lk_broker *b, char *msg, size_t len)
{
    struct lk_cluster *cl = b->cluster;

    if (lk_cluster_is_kafka(cl)) {
        enum lk_kafka_security want =
            lk_kafka_secmap_find(cl->secmap, cl->nsecmap, lk_str_c(cl->lookup_listener))->sec;
        enum lk_kafka_security have = lk_kafka_listener_security(b->lookup);

        if (have != want) {
            snprintf(msg, len,
                     "the lookup listener '%s' is %s here but %s in the cluster's "
                     "listener.security.protocol.map, which bootstrap.servers speaks",
                     b->lookup->name, lk_kafka_security_name(have), lk_kafka_security_name(want));
            return msg;
        }
    }
    const struct lk_url *u;
    const struct lk_broker *o = lk_cluster_addr_claim(cl, b, &u);
    if (o != NULL) {
        snprintf(msg, len, "%s is also an address of broker %s", u->hostport, o->name);
        return msg;
    }
    return NULL;
}

/*
 * Adds the registrations of set (cluster cl's store) as live brokers, in
 * znode order, after the static ones are resolved: a static broker of the
 * same name wins, and a registration that does not parse or conflicts with
 * an earlier broker is left out with its reason.
 */
void
lk_conf_load_store(struct lk_loader *ld, struct lk_cluster *cl, const struct lk_live_set *set)
{
    char msg[768];

    size_t nstatic = cl->nbrokers; /* live ones come after them */

    cl->zk_read = 1;
    cl->nregistrations = set->n;
    for (size_t i = 0; i < set->n; i++) {
        const struct lk_meta_node *nd = &set->nodes[i];
        struct lk_registration reg;
        struct lk_broker *b = NULL;
        const char *why;

        if (set->skip != NULL && set->skip[i])
            continue;
        for (size_t k = 0; k < nstatic && b == NULL; k++)
            if (strcmp(cl->brokers[k]->id, nd->name) == 0)
                b = cl->brokers[k];
        if (b != NULL) {
            b->overrides = 1;
            continue;
        }
        if (lk_registration_parse(cl, nd->name, (const char *)nd->data, nd->len, &reg, msg,
                                  sizeof(msg)) != 0) {
            lk_conf_reject_add(cl, nd->name, msg);
            continue;
        }
        b = broker_add(ld->conf, cl, nd->name, cl->zk_line);
        b->live = 1;
        b->node_id = reg.node_id;
        b->listeners = reg.listeners;
        b->nlisteners = reg.nlisteners;
        b->internal = &b->listeners[reg.internal];
        b->lookup = reg.lookup < reg.nlisteners ? &b->listeners[reg.lookup] : NULL;
        reg.listeners = NULL;
        reg.nlisteners = 0;
        lk_registration_free(&reg);
        if ((why = live_conflict(b, msg, sizeof(msg))) != NULL) {
            lk_conf_reject_add(cl, nd->name, why);
            broker_drop(ld->conf, b);
        }
    }
}
