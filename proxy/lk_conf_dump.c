/*
 * The resolved listener map as `lookout --check` prints it (lk_conf_dump,
 * declared with the model in lk_conf.h): each cluster with its settings,
 * brokers and address mapping, then every bind and what it routes to.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf.h"
#include "lk_conf_bind.h"
#include "lk_conf_cluster.h"
#include "lk_conf_keys.h"
#include "lk_conf_value.h"
#include "lk_filter.h"
#include "lk_location.h"
#include "lk_registry.h"

static void
print_addrs(FILE *out, const struct lk_listener *l)
{
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
        if (l->addr[sc] != NULL)
            fprintf(out, " %s", l->addr[sc]->text);
}

/* The health.* settings, only when not all defaults, so that the usual
 * map reads as before. */
static void
dump_health(const struct lk_cluster *cl, FILE *out)
{
    const struct lk_health_conf *h = &cl->health;
    unsigned backoff = 0, backoff_max = 0;

    /* the defaults, as the key table gives them */
    lk_parse_duration(lk_conf_key_find(lk_conf_cluster_keys, LK_IN_PULSAR, "health.backoff", 0)->def,
                      &backoff);
    lk_parse_duration(
        lk_conf_key_find(lk_conf_cluster_keys, LK_IN_PULSAR, "health.backoff_max", 0)->def,
        &backoff_max);
    if (h->check == LK_HEALTH_CHECK_OFF && h->fails == 1 && h->backoff_ms == backoff &&
        h->backoff_max_ms == backoff_max)
        return;
    fprintf(out, "  health   out of rotation after %u failure%s, for %u ms doubling up to %u ms",
            h->fails, h->fails == 1 ? "" : "s", h->backoff_ms, h->backoff_max_ms);
    if (h->check != LK_HEALTH_CHECK_OFF)
        fprintf(out, "; %s checks%s%s every %u ms, timeout %u ms", lk_health_check_names[h->check],
                h->check == LK_HEALTH_CHECK_HTTP ? " of " : "",
                h->check == LK_HEALTH_CHECK_HTTP ? h->path : "", h->interval_ms, h->timeout_ms);
    fputc('\n', out);
    if (h->check != LK_HEALTH_CHECK_HTTP)
        return;
    /* lk_health.c checks a broker with binary addresses only otherwise. */
    for (size_t i = 0; i < cl->nbrokers; i++)
        if (lk_broker_upstream(cl->brokers[i], LK_SCHEME_HTTP, 0) == NULL) {
            fprintf(out, "           (a broker without an internal http or https address: a "
                         "Pulsar CONNECT to its binary address, answered CONNECTED)\n");
            break;
        }
}

/* "  internal networks 10.0.0.0/8, fd00::/8" when the cluster sets
 * internal_networks: the addresses lookout may dial. */
static void
dump_networks(const struct lk_cluster *cl, FILE *out)
{
    if (cl->ninternal_networks == 0)
        return;
    fprintf(out, "  internal networks ");
    for (size_t i = 0; i < cl->ninternal_networks; i++) {
        const struct lk_cidr *n = &cl->internal_networks[i];
        char a[INET6_ADDRSTRLEN];
        if (inet_ntop(n->family, n->addr, a, sizeof(a)) == NULL)
            snprintf(a, sizeof(a), "?");
        fprintf(out, "%s%s/%u", i != 0 ? ", " : "", a, n->bits);
    }
    fputc('\n', out);
}

/* The store a cluster's map is read from, and what it gave: its
 * registrations and those the map did not take. */
static void
dump_store(const struct lk_cluster *cl, FILE *out)
{
    if (cl->zk == NULL)
        return;
    fprintf(out, "  store    zookeeper %s %s: ", cl->zk->connect, cl->zk_path);
    if (!cl->zk_read) {
        fprintf(out, "not read (--check --live reads it); [broker] sections win over it for "
                     "the same name\n");
        return;
    }
    fprintf(out, "%zu registration%s, %zu refused\n", cl->nregistrations,
            cl->nregistrations == 1 ? "" : "s", cl->nrejects);
    for (size_t i = 0; i < cl->nrejects; i++)
        fprintf(out, "  refused  %s: %s\n", cl->rejects[i].znode, cl->rejects[i].reason);
}

/* " (live)" or " (static)" after a broker of a cluster with a store. */
static const char *
origin(const struct lk_broker *b)
{
    if (b->cluster->zk == NULL)
        return "";
    if (b->live)
        return " (live)";
    return b->overrides ? " (static, over its registration)" : " (static)";
}

/* The value of cl's key as its row in the table writes it. */
static const char *
text(const struct lk_cluster *cl, const char *key, char *buf, size_t len)
{
    const struct lk_conf_key *k = lk_conf_key_find(
        lk_conf_cluster_keys, lk_cluster_is_kafka(cl) ? LK_IN_KAFKA : LK_IN_PULSAR, key, 0);

    return lk_conf_key_text(k, cl, buf, len);
}

static void
dump_cluster(const struct lk_cluster *cl, FILE *out)
{
    fprintf(out, "cluster %s (pulsar): ", cl->name);
    if (cl->internal_listener != NULL)
        fprintf(out, "internal listener '%s', ", cl->internal_listener);
    else
        fprintf(out, "internal listener (each broker's first), ");
    if (cl->lookup_listener != NULL)
        fprintf(out, "lookup listener '%s', ", cl->lookup_listener);
    else
        fprintf(out, "no lookup listener (brokers are not exposed, nothing is rewritten), ");
    char buf[32];

    fprintf(out, "redirects %s", text(cl, "redirects", buf, sizeof(buf)));
    if (cl->redirects == LK_REDIRECTS_FOLLOW)
        fprintf(out, " (at most %u hops, replay %zu bytes)", cl->follow_max_hops,
                cl->follow_replay_bytes);
    fprintf(out, ", leak_guard %s", lk_leak_guard_names[cl->leak_guard]);
    /* Only when not the default, so that the usual map reads as before. */
    for (const char *const *key = (const char *const[]){"upstream.tls", "pulsar_routing",
                                                        "forwarded_headers", NULL};
         *key != NULL; key++) {
        const struct lk_conf_key *k = lk_conf_key_find(lk_conf_cluster_keys, LK_IN_PULSAR, *key, 0);
        const char *v = lk_conf_key_text(k, cl, buf, sizeof(buf));
        if (strcmp(v, k->def) != 0)
            fprintf(out, ", %s %s", *key, v);
    }
    if (cl->limit.requests != 0) /* as resolved: [lookout]'s keys inherited */
        fprintf(out, ", limit.requests %u/%s burst %u (%zu exempt networks)", cl->limit.requests,
                cl->limit.per_s == 1 ? "s" : "m", cl->limit.burst, cl->nlimit_exempt);
    for (size_t i = 0; i < cl->nclient_listeners; i++) {
        const char *name = cl->client_listeners[i];
        int internal = 0;
        for (size_t j = 0; j < cl->nbrokers && !internal; j++)
            internal = strcmp(cl->brokers[j]->internal->name, name) == 0;
        fprintf(out, "%s%s%s", i == 0 ? ", client_listeners " : ",", name,
                internal ? " (the internal listener: clients may ask for internal addresses)"
                         : "");
    }
    fprintf(out, ", filters ");
    for (size_t i = 0; i < cl->nfilters; i++)
        fprintf(out, "%s%s", i != 0 ? "," : "", cl->filters[i].ops->name);
    fprintf(out, "%s\n", cl->nfilters == 0 ? "(none)" : "");
    if (cl->web_service != NULL || cl->service != NULL)
        fprintf(out, "  service  %s%s%s\n", cl->web_service != NULL ? cl->web_service->text : "",
                cl->web_service != NULL && cl->service != NULL ? " " : "",
                cl->service != NULL ? cl->service->text : "");
    dump_health(cl, out);
    dump_networks(cl, out);
    dump_store(cl, out);

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        int first = 1;

        fprintf(out, "  broker %s%s\n    internal", b->name, origin(b));
        print_addrs(out, b->internal);
        fputc('\n', out);
        if (b->lookup != NULL) {
            fprintf(out, "    lookup  ");
            print_addrs(out, b->lookup);
            fputc('\n', out);
        }
        for (size_t l = 0; l < b->nlisteners; l++) {
            if (&b->listeners[l] == b->internal || &b->listeners[l] == b->lookup)
                continue;
            fprintf(out, "    listener '%s'", b->listeners[l].name);
            print_addrs(out, &b->listeners[l]);
            fputc('\n', out);
        }
        for (int sc = 0; b->lookup != NULL && sc < LK_SCHEME__COUNT; sc++) {
            const struct lk_url *from = b->internal->addr[sc], *to;
            const char *lacked;
            if (from == NULL)
                continue;
            fprintf(out, "%s%s -> ", first ? "    map      " : "             ", from->text);
            if ((to = lk_location_pick(b, b->lookup->name, sc, lk_scheme_is_tls(sc), &lacked)) !=
                    NULL &&
                lacked == NULL)
                fprintf(out, "%s\n", to->text);
            else if (to != NULL) /* the lookup listener's own: webServiceUrl */
                fprintf(out, "%s (webServiceUrl: listener '%s' has no http or https address)\n",
                        to->text, lacked);
            else
                fprintf(out, "not rewritten (listener '%s' has no %s or %s address)\n",
                        b->lookup->name, lk_scheme_name(sc), lk_scheme_name(lk_scheme_sibling(sc)));
            first = 0;
        }
    }
}

/* The bind that serves cl's address host:port (for broker b, or the
 * bootstrap when b is NULL), or NULL. */
static const struct lk_bind *
bind_of(const struct lk_conf *conf, const struct lk_cluster *cl, const struct lk_broker *b,
        const struct lk_kafka_pattern *pt, const char *host, uint16_t port)
{
    for (size_t i = 0; i < conf->nbinds; i++)
        for (size_t j = 0; j < conf->binds[i]->nvhosts; j++) {
            const struct lk_vhost *v = &conf->binds[i]->vhosts[j];
            if (v->cluster == cl && v->broker == b && v->pattern == pt && v->port == port &&
                (host == NULL || strcmp(v->host, host) == 0))
                return conf->binds[i];
        }
    return NULL;
}

/* "SSL: lookout terminates TLS, SASL passes through": what lookout does on
 * a Kafka listener, as the client side (lookup) or the broker side. */
static void
print_security(FILE *out, enum lk_scheme scheme, int sasl, int upstream)
{
    enum lk_kafka_security sec =
        scheme == LK_SCHEME_KAFKA_SSL ? (sasl ? LK_KAFKA_SASL_SSL : LK_KAFKA_SSL)
                                      : (sasl ? LK_KAFKA_SASL_PLAINTEXT : LK_KAFKA_PLAINTEXT);

    fprintf(out, " (%s: %s%s)", lk_kafka_security_name(sec),
            lk_scheme_is_tls(scheme) ? (upstream ? "TLS to the broker" : "lookout terminates TLS")
                                     : (upstream ? "plaintext to the broker" : "plaintext"),
            sasl ? ", SASL passes through" : "");
}

static void
print_on_bind(FILE *out, const struct lk_bind *b)
{
    fprintf(out, " on bind %s\n", b != NULL ? b->text : "?");
}

static void
dump_kafka(const struct lk_conf *conf, const struct lk_cluster *cl, FILE *out)
{
    const struct lk_kafka_pattern *pt = cl->pattern;
    char b1[32], b2[32], b3[32];

    fprintf(out,
            "cluster %s (kafka): inter.broker.listener.name '%s', lookup listener '%s', "
            "unknown_api %s, leak_guard %s, max_frame_bytes %s, timeout.idle %s, filters ",
            cl->name, cl->internal_listener, cl->lookup_listener,
            text(cl, "unknown_api", b1, sizeof(b1)), lk_leak_guard_names[cl->leak_guard],
            text(cl, "max_frame_bytes", b2, sizeof(b2)), text(cl, "timeout.idle", b3, sizeof(b3)));
    for (size_t i = 0; i < cl->nfilters; i++)
        fprintf(out, "%s%s", i != 0 ? "," : "", cl->filters[i].ops->name);
    fprintf(out, "%s\n", cl->nfilters == 0 ? "(none)" : "");
    for (size_t i = 0; i < cl->nbootstrap; i++) {
        const struct lk_url *u = &cl->bootstrap[i];
        fprintf(out, "  bootstrap %s", u->hostport);
        print_security(out, u->scheme, cl->bootstrap_sasl, 0);
        print_on_bind(out, bind_of(conf, cl, NULL, NULL, u->host, u->port));
    }
    dump_health(cl, out);
    dump_networks(cl, out);
    dump_store(cl, out);
    if (pt != NULL) {
        fprintf(out, "  pattern   %s", pt->text);
        print_security(out, pt->scheme, pt->sasl, 0);
        fprintf(out, " for node ids not in the map");
        if (pt->port_has_id)
            fprintf(out, ", a socket per node, bound when it appears\n");
        else
            print_on_bind(out, bind_of(conf, cl, NULL, pt, NULL, pt->port));
    }
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        const struct lk_url *in = lk_kafka_addr(b->internal), *lu = lk_kafka_addr(b->lookup);

        fprintf(out, "  broker %s: node %ld", b->name, (long)b->node_id);
        if (b->registration != NULL)
            fprintf(out, ", from %s", b->registration);
        fputs(origin(b), out);
        fprintf(out, "\n    internal %s", in->text);
        print_security(out, in->scheme, b->internal->sasl, 1);
        fprintf(out, "\n    lookup   %s", lu->text);
        print_security(out, lu->scheme, b->lookup->sasl, 0);
        print_on_bind(out, bind_of(conf, cl, b, NULL, lu->host, lu->port));
        for (size_t l = 0; l < b->nlisteners; l++)
            if (&b->listeners[l] != b->internal && &b->listeners[l] != b->lookup)
                fprintf(out, "    listener %s\n", lk_kafka_addr(&b->listeners[l])->text);
        fprintf(out, "    map      node %ld: %s -> %s\n", (long)b->node_id, in->hostport,
                lu->hostport);
    }
}

char *
lk_conf_dump_text(const struct lk_conf *conf)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (f == NULL) { /* out of memory: as lk_xmalloc */
        fputs("lookout: out of memory\n", stderr);
        abort();
    }
    lk_conf_dump(conf, f);
    fclose(f);
    return buf;
}

void
lk_conf_dump(const struct lk_conf *conf, FILE *out)
{
    for (size_t i = 0; i < conf->nclusters; i++) {
        if (lk_cluster_is_kafka(conf->clusters[i]))
            dump_kafka(conf, conf->clusters[i], out);
        else
            dump_cluster(conf->clusters[i], out);
    }
    if (conf->nbinds == 0)
        fprintf(out, "no binds: nothing is exposed\n");
    for (size_t i = 0; i < conf->nbinds; i++) {
        const struct lk_bind *b = conf->binds[i];

        fprintf(out, "bind %s %s (%s)\n", b->text, lk_scheme_name(b->vhosts[0].scheme),
                lk_proto_name(b->proto));
        for (size_t j = 0; j < b->nvhosts; j++) {
            const struct lk_vhost *v = &b->vhosts[j];
            const struct lk_url *up;

            if (v->pattern != NULL) {
                fprintf(out, "  %s -> cluster %s broker.pattern (node ids not in the map)\n",
                        v->host, v->cluster->name);
                continue;
            }
            if (v->broker == NULL) {
                fprintf(out, "  %s -> cluster %s %s (any broker)\n", v->host, v->cluster->name,
                        lk_cluster_is_kafka(v->cluster) ? "bootstrap.servers" : "service address");
                continue;
            }
            if (lk_cluster_is_kafka(v->cluster)) {
                fprintf(out, "  %s -> broker %s (node %ld) at %s\n", v->host, v->broker->name,
                        (long)v->broker->node_id, lk_kafka_addr(v->broker->internal)->text);
                continue;
            }
            fprintf(out, "  %s -> broker %s at ", v->host, v->broker->name);
            /* Checked at load: the internal listener has this family. */
            up = lk_broker_upstream(v->broker, v->scheme, lk_scheme_is_tls(v->scheme));
            fprintf(out, "%s\n", up != NULL ? up->text : "?");
        }
    }
}
