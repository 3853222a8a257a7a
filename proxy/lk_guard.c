/*
 * The leak guard's matcher: the last check on every text response and on
 * every binary answer that can carry a broker address (CONTRACT §4, "Leak
 * guard"; the binary side, which this file's automaton serves, is read in
 * lk_guard_frame.c), for the leak_guard filter (filters/flt_leak_guard.c).  It looks for any
 * internal listener address of the cluster's brokers, as "host:port" or
 * "scheme://host:port", in every response header, in the status line's
 * reason phrase, in interim (1xx) and 101 heads (lk_guard_interim), and in
 * the body of text responses, with one Aho-Corasick automaton
 * (proxy/lk_match.h) built from the map at load.  The body streams through:
 * a match may straddle two reads, and the automaton's state carries it.
 * A Pulsar broker without an internal web address (a binary-only one,
 * alone in its map or in a mixed one) is looked for by its brokerId too,
 * its host with any port (patterns of the same automaton, lk_guard_ap_hit,
 * as in the binary answers), which is never rewritten: it has no web
 * address to become.
 *
 * What it does with a find depends on the cluster's `leak_guard`:
 *   log      counts it (x->leaks) and logs the first of the exchange at warn;
 *            nothing is changed and nothing is held back;
 *   rewrite  replaces it with the broker's address on the selected listener
 *            (a "scheme://host:port" form becomes that listener's URL, a bare
 *            host:port its host:port; a web address the listener lacks, the
 *            lookup listener's or webServiceUrl, as the Location filter
 *            gives: lk_location_pick), holding back only the bytes a match
 *            in progress may still need; without a selected listener it
 *            counts and logs as `log` does; a reason phrase with a find
 *            becomes the status's standard one instead (RFC 9112 §4: a
 *            client ignores it), so that nothing is left in it;
 *   block    holds the body back up to max_buffer_bytes, so that a leak is
 *            answered with a clean 502 and {"reason"}; past the cap the body
 *            streams, and a leak found after that cuts the connection; a
 *            1xx head with a leak is dropped (it is informational, the
 *            final response follows), a 101 one is answered with the 502;
 *   off      the filter sits every exchange out.
 *
 * Which bodies: those whose Content-Type is any text/ type, JSON
 * (application/json, any +json), XML (application/xml, any +xml),
 * application/javascript, application/x-ndjson or
 * application/x-www-form-urlencoded, and those without a Content-Type
 * (Jersey's default error pages, short bodies that cannot be told apart).
 * Other types are binary to us and pass untouched.
 * Codings: rewrite and block ask the broker for identity (Accept-Encoding:
 * identity, which every client accepts), so that they can act on every
 * body; log leaves the request alone.  A gzip or deflate body that comes
 * anyway is inflated as it streams, only to be read: its bytes go on as
 * they came, so a leak there is counted and logged, and blocked, but not
 * rewritten.  Other codings (br, zstd) are not read (logged at debug).  The
 * lookup filter decodes gzip itself, so the coding is looked at when the
 * body reaches us, not in the head.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_guard.h"
#include "lk_guard_int.h"
#include "lk_kafka_codec.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_pulsar_codec.h"
#include "lk_stats.h" /* lk_kafka_api_name, lk_pulsar_command_name */

const char lk_guard_refusal[] = "response would leak an internal broker address";

struct lk_guard_x *
lk_guard_fill(struct lk_guard_x *x)
{
    void (*fill)(struct lk_guard_x *) = x->fill;

    if (fill != NULL) {
        x->fill = NULL;
        fill(x);
    }
    return x;
}

/* lk_guard_stream.body */
enum body_state { BODY_UNDECIDED = 0, BODY_SCAN, BODY_INFLATE, BODY_SKIP };

/* A compressed body is read up to this many times max_buffer_bytes once
 * inflated (64 MiB by default): past that a worker would spend its time
 * on a decompression bomb, so the rest passes unread (lk_inflate). */
#define LK_GUARD_INFLATE_RATIO 64

void
lk_guard_free(struct lk_guard *conf)
{
    lk_match_free(conf->match);
    for (size_t i = 0; i < conf->ntargets; i++)
        free(conf->targets[i].own);
    for (size_t i = 0; i < conf->nany_port; i++)
        free(conf->any_port_text[i]);
    free(conf->any_port_text);
    free(conf->any_port_broker);
    free(conf->targets);
    free(conf);
}

/* Whether the guard reads for the addresses of listener l of b: the
 * internal one; for Kafka also every other but the lookup listener, the
 * one address lookout serves for a broker (a KRaft CONTROLLER listener
 * copied from advertised.listeners is reached by no client through
 * lookout).  Pulsar's other listeners are given out (client_listeners). */
static int
unserved(const struct lk_broker *b, const struct lk_listener *l)
{
    return l == b->internal || (b->cluster->proto == LK_PROTO_KAFKA && l != b->lookup);
}

static int
host_cmp(const void *a, const void *b)
{
    return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

/* The hosts of Kafka cluster cl's lookup-listener and bootstrap addresses,
 * sorted, into conf->served (config memory) for kafka_host_served: made
 * once per build, not asked of every broker for every address. */
static void
served_new(struct lk_guard *conf, const struct lk_cluster *cl)
{
    size_t n = 0;

    if (cl->proto != LK_PROTO_KAFKA)
        return;
    conf->served = lk_xcalloc(cl->nbrokers + cl->nbootstrap + 1, sizeof(*conf->served));
    for (size_t i = 0; i < cl->nbrokers; i++)
        if (cl->brokers[i]->lookup != NULL && lk_kafka_addr(cl->brokers[i]->lookup) != NULL)
            conf->served[n++] = lk_kafka_addr(cl->brokers[i]->lookup)->host;
    for (size_t i = 0; i < cl->nbootstrap; i++)
        conf->served[n++] = cl->bootstrap[i].host;
    qsort(conf->served, n, sizeof(*conf->served), host_cmp);
    conf->nserved = n;
}

/*
 * Kafka: whether host is that of an address lookout serves for cl's
 * clients: a broker's lookup listener, a bootstrap entry point or
 * broker.pattern's.  An internal host that is none of these is the
 * broker's own name for itself inside its network: a client given it
 * with any port, or alone as a string, has been handed an internal host
 * (controller.quorum.voters' "1@10.0.0.21:9093", a node at another port).
 * One that is (a test rig, or every listener on one host) is looked for
 * only with the ports of the map's unserved addresses.
 */
static int
kafka_host_served(const struct lk_guard *conf, const struct lk_cluster *cl, const char *host)
{
    const struct lk_kafka_pattern *p = cl->pattern;
    struct lk_str h = lk_str_c(host), pre, suf;

    if (bsearch(&host, conf->served, conf->nserved, sizeof(*conf->served), host_cmp) != NULL)
        return 1;
    if (p == NULL)
        return 0;
    pre = lk_str_c(p->host_prefix);
    suf = lk_str_c(p->host_suffix);
    if (!p->host_has_id)
        return lk_str_eqi(h, pre);
    return h.len > pre.len + suf.len && lk_str_eqi(lk_str_make(h.p, pre.len), pre) &&
           lk_str_eqi(lk_str_make(h.p + h.len - suf.len, suf.len), suf);
}

/* The any_port patterns of host, b's: "HOST:", and "[HOST]:" too for an
 * IPv6 literal (a host two listeners share repeats them: the matcher
 * keeps a repeated pattern's first id). */
static void
any_port_add(struct lk_guard *conf, size_t *n, const struct lk_broker *b, const char *host)
{
    /* an IPv6 literal both as a URL writes it, "[fd00::11]:", and as a
     * brokerId may ("%s:%d" of advertisedAddress) */
    for (int br = strchr(host, ':') != NULL; br >= 0; br--) {
        size_t hl = strlen(host) + 2 * (size_t)br + 2;
        conf->any_port_text[*n] = lk_xmalloc(hl);
        snprintf(conf->any_port_text[*n], hl, br ? "[%s]:" : "%s:", host);
        conf->any_port_broker[(*n)++] = b;
    }
}

/*
 * A Pulsar broker names itself in its exceptions by its brokerId,
 * advertisedAddress:webServicePort ("Namespace bundle for topic (...) not
 * served by this instance:10.0.0.11:8080", BrokerService
 * .checkTopicNsOwnership): an address the map holds only when the broker's
 * internal listener has an http or https address.  A binary-only map
 * (conf/pulsar-binary.conf) has none, nor has a mixed map for its
 * binary-only brokers, so for such a broker the answers, binary and text,
 * are also read for the host of each of its internal addresses with any
 * port after it: these patterns join the automaton, raw (lk_guard_ap_hit
 * checks what is around them).  A Kafka broker's unserved addresses
 * (unserved()) are read so too, when their host is none lookout serves
 * (kafka_host_served): a broker's config values name it with other ports
 * (controller.quorum.voters, listeners that are not advertised).
 */
static void
any_port_new(struct lk_guard *conf, const struct lk_cluster *cl)
{
    size_t max = 0, n = 0;

    for (size_t i = 0; i < cl->nbrokers; i++)
        max += cl->brokers[i]->nlisteners * LK_SCHEME__COUNT * 2;
    if (!(cl->proto & (LK_PROTO_PULSAR | LK_PROTO_KAFKA)) || max == 0)
        return;
    conf->any_port_text = lk_xcalloc(max, sizeof(*conf->any_port_text));
    conf->any_port_broker = lk_xcalloc(max, sizeof(*conf->any_port_broker));
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        if (cl->proto == LK_PROTO_KAFKA) {
            for (size_t k = 0; k < b->nlisteners; k++)
                for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
                    const struct lk_url *u = b->listeners[k].addr[sc];
                    if (u != NULL && unserved(b, &b->listeners[k]) &&
                        !kafka_host_served(conf, cl, u->host))
                        any_port_add(conf, &n, b, u->host);
                }
            continue;
        }
        if (lk_listener_pick(b->internal, LK_SCHEME_HTTP, 0) != NULL)
            continue; /* its web address is in the map */
        for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
            if (b->internal->addr[sc] != NULL)
                any_port_add(conf, &n, b, b->internal->addr[sc]->host);
    }
    conf->nany_port = n;
}

/*
 * Whether cl's guard also looks for the internal addresses of another
 * cluster o's brokers (its own it always does): for a cluster with HTTP,
 * every other one with HTTP.  A broker of one cluster may redirect or point to a broker of
 * another (a 307 across clusters, an error text naming a peer): that is an
 * internal address all the same, as the binary answers' check
 * (lk_guard_frame.c check_url) already holds.  Every chain is built anew
 * with its config, a live map's included, so the patterns follow every
 * cluster's map.
 */
static int
guards_other(const struct lk_cluster *cl, const struct lk_cluster *o)
{
    return o != cl && (cl->proto & LK_PROTO_HTTP) && (o->proto & LK_PROTO_HTTP);
}

/* Whether host is that of an address some broker of c gives out (on a
 * listener other than its internal one): lookout's own, on the brokers'
 * host, which a body may name by its host alone. */
static int
host_given_out(const struct lk_cluster *c, const char *host)
{
    for (size_t i = 0; i < c->nbrokers; i++) {
        const struct lk_broker *b = c->brokers[i];
        for (size_t k = 0; k < b->nlisteners; k++) {
            if (&b->listeners[k] == b->internal)
                continue;
            for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
                if (b->listeners[k].addr[sc] != NULL &&
                    strcmp(b->listeners[k].addr[sc]->host, host) == 0)
                    return 1;
        }
    }
    return 0;
}

/*
 * A Pulsar broker names itself by its host alone too, outside host:port:
 * the functions worker that runs in a broker (functionsWorkerEnabled)
 * takes the broker's advertisedAddress as its workerHostname and its web
 * port as its port, two JSON fields of /admin/v2/worker/cluster's
 * {"workerId", "workerHostname", "port"}; a broker's config values have
 * its advertisedAddress.  So for each host of its internal addresses, the
 * host at the end of a JSON string: HOST and a quote, after no host
 * character ("10.0.0.11", "http://10.0.0.11"; not "10.0.0.111",
 * "x10.0.0.11" or "10.0.0.11:8080").  It starts as the addresses' own
 * patterns do, with the host, so the matcher's skip over bytes that start
 * none (by their first two, lk_match.c) costs nothing more.  A host that a
 * broker's address on another listener has too, of its cluster or of the
 * guard's own, is not read for alone: that may be lookout's own.
 *
 * Not read: the workerId, "c-CLUSTER-fw-HOST-PORT".  Its end would be a
 * raw pattern (a host character is before it) ending in the port's digits
 * and a quote, which ordinary JSON has often enough that lk_match_none
 * could rarely say "nothing" at once: 100 to 150 instructions more on
 * each of bench/run's small, redirect and lookup exchanges (bench/
 * guard-cost --http), for an identifier the worker's hostname in the same
 * answers names already.
 */
static size_t
host_alone(struct lk_guard *conf, const struct lk_cluster *own, const struct lk_broker *b, int sc,
           const char **pats, size_t *lens, size_t n)
{
    const struct lk_url *u = b->internal->addr[sc];

    for (int e = 0; e < sc; e++)
        if (b->internal->addr[e] != NULL && strcmp(b->internal->addr[e]->host, u->host) == 0)
            return n;
    if (host_given_out(b->cluster, u->host) || (own != b->cluster && host_given_out(own, u->host)))
        return n;
    size_t tl = strlen(u->host) + 2;
    char *text = lk_xmalloc(tl);
    snprintf(text, tl, "%s\"", u->host);
    conf->targets[n] = (struct lk_guard_target){b, (enum lk_scheme)sc, 0, 0, u, u->host, text, 0};
    pats[n] = text;
    lens[n] = tl - 1;
    return n + 1;
}

/* The patterns of the addresses of broker b's listener l, made from
 * conf->targets[n] on (pats, lens and flags alike); the new n.  own: the
 * cluster the guard is for. */
static size_t
listener_targets(struct lk_guard *conf, const struct lk_cluster *own, const struct lk_broker *b,
                 const struct lk_listener *l, const char **pats, size_t *lens, unsigned *flags,
                 size_t n)
{
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
        const struct lk_url *u = l->addr[sc];
        if (u == NULL)
            continue;
        /* Two forms: the URL, so that a rewrite can change the scheme
         * with the address, and the bare host:port (the broker list of
         * /admin/v2/brokers, "ownerBroker" in stats, error texts). */
        for (int url = 1; url >= 0; url--) {
            conf->targets[n] = (struct lk_guard_target){b, (enum lk_scheme)sc,          url,  0,
                                                        u, url ? u->text : u->hostport, NULL, 0};
            pats[n] = conf->targets[n].text;
            lens[n] = strlen(pats[n]);
            n++;
        }
        /* Kafka answers hold a host as a string and its port as an
         * integer after it (Metadata's Brokers, DescribeQuorum's
         * Listeners): a third form, for the answers read as bytes.
         * Kafka clusters have no text to scan, so it meets no text. */
        if (b->cluster->proto == LK_PROTO_KAFKA) {
            conf->targets[n] =
                (struct lk_guard_target){b,    (enum lk_scheme)sc,
                                         0,    1,
                                         u,    u->host,
                                         NULL, !kafka_host_served(conf, b->cluster, u->host)};
            pats[n] = u->host;
            lens[n] = strlen(u->host);
            flags[n++] = LK_MATCH_RAW;
        } else {
            n = host_alone(conf, own, b, sc, pats, lens, n);
        }
    }
    return n;
}

/* The patterns of cluster c's brokers' unserved addresses (internal ones,
 * and Kafka's other listeners: unserved()); the new n.  cl's own come
 * first, so that an address two clusters share is reported as its
 * broker's (a repeated pattern reports the first's id).  own: the cluster
 * the guard is for (c, or one whose guard reads c's too). */
static size_t
cluster_targets(struct lk_guard *conf, const struct lk_cluster *own, const struct lk_cluster *c,
                const char **pats, size_t *lens, unsigned *flags, size_t n)
{
    for (size_t i = 0; i < c->nbrokers; i++) {
        const struct lk_broker *b = c->brokers[i];
        for (size_t k = 0; k < b->nlisteners; k++)
            if (unserved(b, &b->listeners[k]))
                n = listener_targets(conf, own, b, &b->listeners[k], pats, lens, flags, n);
    }
    return n;
}

/* How many patterns cluster_targets makes for c at most: per address of
 * an unserved listener, the URL, host:port, and Kafka's bare host or
 * host_alone's. */
static size_t
cluster_max(const struct lk_cluster *c)
{
    size_t max = 0;

    for (size_t i = 0; i < c->nbrokers; i++)
        for (size_t k = 0; k < c->brokers[i]->nlisteners; k++)
            if (unserved(c->brokers[i], &c->brokers[i]->listeners[k]))
                max += LK_SCHEME__COUNT * 3;
    return max;
}

struct lk_guard *
lk_guard_new(const struct lk_cluster *cl, enum lk_leak_guard mode, char *err, size_t errlen)
{
    struct lk_guard *conf;
    const char **pats;
    unsigned *flags;
    size_t *lens, n, max = cluster_max(cl);
    size_t nclusters = cl->conf != NULL ? cl->conf->nclusters : 0;
    char msg[256];

    for (size_t k = 0; k < nclusters; k++)
        if (guards_other(cl, cl->conf->clusters[k]))
            max += cluster_max(cl->conf->clusters[k]);
    conf = lk_xcalloc(1, sizeof(*conf));
    conf->mode = mode;
    served_new(conf, cl);
    any_port_new(conf, cl);
    conf->targets = lk_xcalloc(max + 1, sizeof(*conf->targets));
    pats = lk_xcalloc(max + conf->nany_port + 1, sizeof(*pats));
    lens = lk_xcalloc(max + conf->nany_port + 1, sizeof(*lens));
    flags = lk_xcalloc(max + conf->nany_port + 1, sizeof(*flags));
    n = cluster_targets(conf, cl, cl, pats, lens, flags, 0);
    for (size_t k = 0; k < nclusters; k++)
        if (guards_other(cl, cl->conf->clusters[k]))
            n = cluster_targets(conf, cl, cl->conf->clusters[k], pats, lens, flags, n);
    conf->ntargets = n;
    for (size_t i = 0; i < conf->nany_port; i++) {
        pats[n] = conf->any_port_text[i];
        lens[n] = strlen(pats[n]);
        flags[n++] = LK_MATCH_RAW;
    }
    conf->match = lk_match_new_flags(pats, lens, flags, n, msg, sizeof(msg));
    free(pats);
    free(lens);
    free(flags);
    free(conf->served); /* the build's alone */
    conf->served = NULL;
    conf->nserved = 0;
    if (conf->match == NULL) {
        snprintf(err, errlen, "leak_guard: %s", msg);
        lk_guard_free(conf);
        return NULL;
    }
    return conf;
}

void
lk_guard_req_head(const struct lk_guard *g, struct lk_http_msg *req)
{
    /* A compressed body cannot be read as it streams: ask for it plain.
     * The client gets it plain too (identity is always acceptable, RFC
     * 9110 §12.5.3); between lookout and the brokers it costs bandwidth on
     * the internal network only.  log reads gzip and deflate as they come. */
    if (g->mode == LK_LEAK_REWRITE || g->mode == LK_LEAK_BLOCK)
        lk_http_set_id(req, LK_HDR_ACCEPT_ENCODING, LK_STRLIT("identity"));
}

/* The field name scan_header is given for a reason phrase (report says so). */
static const char reason_field[] = ":reason";

/* Logs the exchange's first leak at each level (later ones are only
 * counted).  header is the field's name (reason_field: the reason phrase),
 * or NULL for the body. */
static void
report(struct lk_guard_x *x, struct lk_guard_stream *g, int level, const struct lk_broker *b,
       const char *text, const struct lk_str *header, const char *outcome)
{
    char name[64 + 4], method[16 + 4], target[160 + 4];

    if (g->logged & (1u << level))
        return;
    g->logged |= 1u << level;
    lk_log(level, lk_guard_fill(x)->conn,
           "%s: %s%s names %s, an internal address of broker %s, in the response to %s %s; %s",
           lk_guard_fill(x)->id,
           header == NULL              ? "the body"
           : header->p == reason_field ? "the status line's reason phrase"
                                       : "the header ",
           header != NULL && header->p != reason_field
               ? lk_log_sanitize(name, header->p, header->len, 64)
               : "",
           text, b->name,
           lk_log_sanitize(method, lk_guard_fill(x)->req->method.p,
                           lk_guard_fill(x)->req->method.len, 16),
           lk_log_sanitize(target, lk_guard_fill(x)->req->target.p,
                           lk_guard_fill(x)->req->target.len, 160),
           outcome);
}

/* What block logs for a refusal (LK_GUARD_REFUSE) of a response head or
 * body; an interim head says what is done with it instead. */
static const char refused_502[] = "answered 502 (leak_guard = block)";

/* block's answer to a find in a text response: a 502 while none of it
 * has gone (released: body bytes have), else the connection closes.
 * refused: what the log says a refusal does (refused_502 but for a 1xx). */
static enum lk_guard_verdict
block(struct lk_guard_x *x, struct lk_guard_stream *g, const struct lk_broker *b, const char *text,
      const struct lk_str *header, int released, const char *refused)
{
    if (!released) {
        report(x, g, LK_WARN, b, text, header, refused);
        return LK_GUARD_REFUSE;
    }
    /* Too late for a 502: the client has part of the body.  Logged
     * whether or not an earlier leak was. */
    g->logged &= ~(1u << LK_WARN);
    report(x, g, LK_WARN, b, text, NULL,
           "found past max_buffer_bytes, after the response began: closing the connection "
           "(leak_guard = block)");
    return LK_GUARD_CUT;
}

/* The text that replaces target t: the broker's address that the Location
 * filter gives too (lk_location_pick: the selected listener's, or for a
 * web address the lookup listener's, else webServiceUrl), or NULL when
 * there is none: no listener selected, or none of those has one. */
static const char *
replacement(struct lk_guard_x *x, const struct lk_guard_target *t)
{
    const char *lacked;
    const struct lk_url *u = lk_location_pick(t->broker, lk_guard_fill(x)->listener_name, t->scheme,
                                              lk_guard_fill(x)->client_tls, &lacked);

    if (u == NULL)
        return NULL;
    if (lacked != NULL && lk_guard_fill(x)->fallback != NULL)
        lk_guard_fill(x)->fallback(x, t->broker, lacked, u);
    if (t->own != NULL) /* the host alone */
        return lk_psprintf(lk_guard_fill(x)->pool, "%s\"", u->host);
    return t->url ? u->text : u->hostport;
}

/* Whether a match lies outside the last one taken (the bare form of an
 * address inside its URL form, reported right after it, is the same
 * find); if so it is taken. */
int
lk_guard_fresh(struct lk_guard_stream *g, const struct lk_match_hit *hit)
{
    uint64_t start = hit->end - hit->len;

    if (g->leak_end != 0 && start >= g->leak_start && hit->end <= g->leak_end)
        return 0;
    g->leak_start = start;
    g->leak_end = hit->end;
    return 1;
}

/* Counts a match unless lk_guard_fresh() says it is the last one again. */
static int
count(struct lk_guard_x *x, struct lk_guard_stream *g, const struct lk_match_hit *hit)
{
    if (!lk_guard_fresh(g, hit))
        return 0;
    (*lk_guard_fill(x)->leaks)++;
    return 1;
}

/* Whether host:port is an address lookout has in its map or serves: any
 * address of a broker of the map (an unserved one is the main automaton's
 * find), or a Pulsar cluster's service address. */
static int
known_addr(struct lk_guard_x *x, struct lk_str host, uint16_t port)
{
    enum lk_scheme scheme;

    for (size_t k = 0; k < lk_guard_fill(x)->conf->nclusters; k++) {
        const struct lk_cluster *cl = lk_guard_fill(x)->conf->clusters[k];
        if (lk_cluster_find_addr(cl, host, port, &scheme) != NULL)
            return 1;
        if (!(cl->proto & LK_PROTO_PULSAR))
            continue;
        struct lk_str h = host; /* lk_url's host: an IPv6 literal without brackets */
        if (h.len >= 2 && h.p[0] == '[' && h.p[h.len - 1] == ']')
            h = lk_str_make(h.p + 1, h.len - 2);
        for (int i = 0; i < 2; i++) {
            const struct lk_url *u = i == 0 ? cl->service : cl->web_service;
            if (u != NULL && u->port == port && lk_str_eqi(lk_str_c(u->host), h))
                return 1;
        }
    }
    return 0;
}

/*
 * "HOST:PORT" of a broker without an internal web address (any_port_new):
 * one matcher for the binary answers, read whole, and for the text ones,
 * whose headers are read whole and whose bodies stream.  A "HOST:" match
 * counts when the byte before it is no host character (nor a lone '/'),
 * and the port is the 1 to 5 digits after it, which may come in the next
 * pieces: the match waits for them (a bounded lookahead), and the stream's
 * last bytes are kept for the bytes before a match that began in an
 * earlier piece.
 */
void
lk_guard_ap_init(struct lk_guard_ap *s)
{
    s->at = 0;
    s->nopen = 0;
}

/* The byte at stream offset o, or -1 when it has not come yet (or is
 * before the stream, or too far back). */
static int
any_port_byte(const struct lk_guard_ap *s, const uint8_t *p, size_t len, uint64_t o)
{
    if (o >= s->at + len)
        return -1;
    if (o >= s->at)
        return p[o - s->at];
    if (s->at - o > sizeof(s->tail))
        return -1;
    return s->tail[o % sizeof(s->tail)];
}

/* Reads the port digits of the waiting matches from the bytes at hand and
 * decides each one whose digits have ended (or all, once the stream ends):
 * cb for a find, stopping when it returns nonzero (that is returned). */
int
lk_guard_ap_settle(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_ap *s,
                   const uint8_t *p, size_t len, int last, lk_guard_ap_cb cb, void *arg)
{
    for (unsigned i = 0; i < s->nopen;) {
        struct any_port_open o = s->open[i];
        int c = -1;
        while (o.nd < 6 && (c = any_port_byte(s, p, len, o.end + o.nd)) >= 0 && isdigit(c))
            o.digits[o.nd++] = (char)c;
        if (o.nd < 6 && c < 0 && !last) {
            s->open[i++] = o; /* its digits may go on in the next piece */
            continue;
        }
        s->open[i] = s->open[--s->nopen];
        unsigned port = 0;
        for (unsigned d = 0; d < o.nd; d++)
            port = port * 10 + (unsigned)(o.digits[d] - '0');
        if (o.nd == 0 || o.nd > 5 || port == 0 || port > 65535)
            continue;
        const char *pat = conf->any_port_text[o.id];
        size_t hl = strlen(pat) - 1; /* without its ':' */
        if (known_addr(x, lk_str_make(pat, hl), (uint16_t)port))
            continue;
        char text[LK_MATCH_MAX_LEN + 8];
        snprintf(text, sizeof(text), "%s%.*s", pat, (int)o.nd, o.digits);
        int r = cb(arg, conf->any_port_broker[o.id], text);
        if (r != 0)
            return r;
    }
    return 0;
}

/* A hit of an any_port pattern (hit->id >= conf->ntargets) in the piece p
 * (at stream offset s->at); cb as lk_guard_ap_settle. */
int
lk_guard_ap_hit(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_ap *s,
                const uint8_t *p, size_t len, const struct lk_match_hit *hit, lk_guard_ap_cb cb,
                void *arg)
{
    uint64_t start = hit->end - hit->len;
    int b1 = start >= 1 ? any_port_byte(s, p, len, start - 1) : -1;
    int b2 = start >= 2 ? any_port_byte(s, p, len, start - 2) : -1;

    if (b1 >= 0 && lk_guard_host_char((uint8_t)b1))
        return 0; /* "110.0.0.11:" is not "10.0.0.11:" */
    /* "/10.0.0.11:54321", Java's InetSocketAddress text, is how a broker
     * prints a peer (CONSUMER_STATS_RESPONSE's address: lookout's own
     * connection, when it runs on the broker's host), not itself; a URL's
     * "//" is not that */
    if (b1 == '/' && b2 != '/')
        return 0;
    s->open[s->nopen++] = (struct any_port_open){.id = hit->id - conf->ntargets, .end = hit->end};
    /* Only patterns ending at one byte wait together (a ':' ends the
     * digits of the ones before); should more than fit, they are decided
     * with the bytes at hand. */
    return lk_guard_ap_settle(conf, x, s, p, len, s->nopen == ANY_PORT_OPEN, cb, arg);
}

/* The piece p has been read: its last bytes are kept for the next. */
static void
any_port_next(struct lk_guard_ap *s, const uint8_t *p, size_t len)
{
    size_t keep = len < sizeof(s->tail) ? len : sizeof(s->tail);
    size_t o = (size_t)((s->at + len - keep) % sizeof(s->tail));
    size_t first = sizeof(s->tail) - o < keep ? sizeof(s->tail) - o : keep;

    memcpy(s->tail + o, p + len - keep, first);
    memcpy(s->tail, p + len - keep + first, keep - first);
    s->at += len;
}

/* An any_port find in a text response (a header, or the body when in is
 * set), acted on as on_hit acts on a target's, except that it is never
 * rewritten: the broker has no web address on any listener (lk_conf
 * refuses one without an internal one), so there is nothing to put in its
 * place, and block refuses even a LookupData's brokerId (as on_hit does
 * one without a replacement). */
struct text_find {
    const struct lk_guard *conf;
    struct lk_guard_x *x;
    struct lk_guard_stream *g;
    struct evbuffer *in; /* the body's, or NULL */
    const struct lk_str *header;
    enum lk_guard_verdict v;
    const char *refused; /* block's log text for a refusal (block()) */
    int whole; /* rewrite: 1, a find replaces the whole value (a reason phrase); 2, it did */
};

/* rewrite: a find in a reason phrase (tf->whole) is not rewritten in
 * place, the whole phrase is replaced by the standard one (scan_header). */
static void
reason_replaced(struct text_find *tf, const struct lk_broker *b, const char *text)
{
    (*lk_guard_fill(tf->x)->rewrites)++;
    report(tf->x, tf->g, LK_DEBUG, b, text, tf->header,
           "replaced by the standard reason phrase (leak_guard = rewrite)");
    tf->whole = 2;
}

static int
text_any_port(void *arg, const struct lk_broker *b, const char *text)
{
    struct text_find *tf = arg;
    struct lk_guard_x *x = tf->x;
    struct lk_guard_stream *g = tf->g;

    (*lk_guard_fill(x)->leaks)++;
    switch (tf->conf->mode) {
    case LK_LEAK_BLOCK:
        tf->v = block(x, g, b, text, tf->header, tf->in != NULL && g->released, tf->refused);
        return 1;
    case LK_LEAK_REWRITE:
        if (tf->whole) {
            reason_replaced(tf, b, text);
            return 0;
        }
        report(x, g, LK_WARN, b, text, tf->header,
               "not rewritten: the broker's web address is not in the map (leak_guard = rewrite)");
        return 0;
    default:
        report(x, g, LK_WARN, b, text, tf->header, "logged only (leak_guard = log)");
        return 0;
    }
}

/* Headers ------------------------------------------------------------------ */

/* Scans one header value (one lk_match_none did not find clean); in
 * rewrite mode h->value may be replaced: the finds in it by their
 * replacements, or, when std is set (a reason phrase), the whole value by
 * std.  refused: block's log text for a refusal. */
static enum lk_guard_verdict
scan_header(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
            struct lk_http_header *h, const char *std, const char *refused)
{
    struct lk_match_state st;
    struct lk_match_hit hit;
    struct lk_str value = h->value, out = LK_STR_NULL;
    size_t off = 0, done = 0;
    int more = 1, changed = 0;

    struct text_find tf = {conf, x, g, NULL, &h->name, LK_GUARD_PASS, refused, std != NULL};
    struct lk_guard_ap ap;

    lk_match_state_init(&st);
    lk_guard_ap_init(&ap);
    g->leak_end = 0;
    while (more) {
        more = lk_match_scan(conf->match, &st, value.p, value.len, &off, &hit) ||
               lk_match_finish(conf->match, &st, &hit);
        if (more && hit.id >= conf->ntargets) {
            if (lk_guard_ap_hit(conf, x, &ap, (const uint8_t *)value.p, value.len, &hit,
                                text_any_port, &tf) != 0)
                return tf.v;
            continue;
        }
        if (!more || !count(x, g, &hit))
            continue;
        const struct lk_guard_target *t = &conf->targets[hit.id];
        size_t start = (size_t)(hit.end - hit.len);
        const char *to;
        switch (conf->mode) {
        case LK_LEAK_BLOCK:
            return block(x, g, t->broker, t->text, &h->name, 0, refused);
        case LK_LEAK_REWRITE:
            if (std != NULL) {
                reason_replaced(&tf, t->broker, t->text);
                break;
            }
            if (start >= done && (to = replacement(x, t)) != NULL) {
                out = lk_pstr_concat(lk_guard_fill(x)->pool, out,
                                     lk_str_make(value.p + done, start - done));
                out = lk_pstr_concat(lk_guard_fill(x)->pool, out, lk_str_c(to));
                done = (size_t)hit.end;
                changed = 1;
                (*lk_guard_fill(x)->rewrites)++;
                report(x, g, LK_DEBUG, t->broker, t->text, &h->name,
                       "rewritten (leak_guard = rewrite)");
                break;
            }
            report(x, g, LK_WARN, t->broker, t->text, &h->name,
                   "not rewritten: no address on the selected listener (leak_guard = rewrite)");
            break;
        default:
            report(x, g, LK_WARN, t->broker, t->text, &h->name, "logged only (leak_guard = log)");
            break;
        }
    }
    if (ap.nopen != 0 && lk_guard_ap_settle(conf, x, &ap, (const uint8_t *)value.p, value.len, 1,
                                            text_any_port, &tf) != 0)
        return tf.v;
    if (tf.whole == 2)
        h->value = lk_str_c(std);
    else if (changed)
        h->value = lk_pstr_concat(lk_guard_fill(x)->pool, out, lk_str_skip(value, done));
    return LK_GUARD_PASS;
}

/* lk_str_eqi(t, lit) for a lit in lower case, a word at a time. */
static inline int
eqi_lower(struct lk_str t, struct lk_str lit)
{
    return t.len == lit.len && lk_fold_eq(t.p, lit.p, lit.len);
}

/* Whether a body of this media type is text we should read (see the top
 * of the file); none (no Content-Type) counts as text. */
static int
is_text(struct lk_str t)
{
    static const struct lk_str exact[] = {
        LK_STRLIT("application/json"),
        LK_STRLIT("application/xml"),
        LK_STRLIT("application/javascript"),
        LK_STRLIT("application/x-ndjson"),
        LK_STRLIT("application/x-www-form-urlencoded"),
    };

    if (t.len == 0)
        return 1;
    /* the exact ones first: application/json, the most common, is one compare */
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (eqi_lower(t, exact[i]))
            return 1;
    /* a byte first, so that a binary type is turned down in a few compares */
    if (t.len >= 5 && t.p[4] == '/') {
        uint32_t w, text;
        memcpy(&w, t.p, 4);
        memcpy(&text, "text", 4);
        if ((w | 0x20202020U) == text)
            return 1; /* text/: its four letters in either case (as in eqi_lower) */
    }
    return (t.len >= 5 && t.p[t.len - 5] == '+' && lk_str_has_suffix_i(t, LK_STRLIT("+json"))) ||
           (t.len >= 4 && t.p[t.len - 4] == '+' && lk_str_has_suffix_i(t, LK_STRLIT("+xml")));
}

/* The reason phrase and every header of the head res, as lk_guard_head
 * reads them; refused: block's log text for a refusal. */
static enum lk_guard_verdict
scan_head(const struct lk_guard *conf, struct lk_guard_stream *g, struct lk_guard_x *x,
          struct lk_http_msg *res, const char *refused)
{
    enum lk_guard_verdict v;

    /* "HTTP/1.1 503 not served by this instance:10.0.0.11:8080": the
     * phrase is read as a header value is */
    if (!lk_match_none(conf->match, res->reason.p, res->reason.len)) {
        struct lk_http_header h = {.name = lk_str_make(reason_field, sizeof(reason_field) - 1),
                                   .value = res->reason};
        if ((v = scan_header(conf, x, g, &h, lk_http_reason(res->status), refused)) !=
            LK_GUARD_PASS)
            return v;
        res->reason = h.value;
    }
    for (size_t i = 0; i < res->nheaders; i++) {
        const struct lk_str *value = &res->headers[i].value;
        if (lk_match_none(conf->match, value->p, value->len))
            continue; /* most are (those shorter than every pattern at once) */
        if ((v = scan_header(conf, x, g, &res->headers[i], NULL, refused)) != LK_GUARD_PASS)
            return v;
    }
    return LK_GUARD_PASS;
}

enum lk_guard_verdict
lk_guard_interim(const struct lk_guard *conf, struct lk_guard_stream *g, struct lk_guard_x *x,
                 struct lk_http_msg *res)
{
    return scan_head(conf, g, x, res,
                     res->status == 101
                         ? refused_502
                         : "the interim response dropped, the final one follows (leak_guard = "
                           "block)");
}

enum lk_guard_verdict
lk_guard_head(const struct lk_guard *conf, struct lk_guard_stream *g, struct lk_guard_x *x,
              struct lk_http_msg *res, enum lk_guard_read *read)
{
    *read = LK_GUARD_READ_NONE;
    enum lk_guard_verdict v = scan_head(conf, g, x, res, refused_502);
    if (v != LK_GUARD_PASS)
        return v;
    if (!is_text(lk_http_media_type(res)))
        return LK_GUARD_PASS;
    lk_match_state_init(&g->st);
    if (conf->nany_port != 0) {
        if (g->ap == NULL)
            g->ap = lk_palloc(lk_guard_fill(x)->pool, sizeof(*g->ap));
        lk_guard_ap_init(g->ap);
    }
    g->leak_end = 0;
    *read = conf->mode == LK_LEAK_LOG ? LK_GUARD_READ_OBSERVE : LK_GUARD_READ_STREAM;
    return LK_GUARD_PASS;
}

/* Body ---------------------------------------------------------------------- */

/*
 * How the body reaches us, decided at its first bytes (a filter before us
 * may have decoded it and dropped Content-Encoding): identity, gzip or
 * deflate (read through zlib; the bytes themselves pass unchanged, so a
 * find there is counted and logged, blocks, but is never rewritten), or
 * another coding (not read).
 */
static enum body_state
body_coding(const struct lk_http_msg *res)
{
    switch (lk_http_content_coding(res)) {
    case LK_CODING_IDENTITY:
        return BODY_SCAN;
    case LK_CODING_GZIP:
    case LK_CODING_DEFLATE:
        return BODY_INFLATE;
    default:
        return BODY_SKIP; /* br, zstd, stacked codings */
    }
}

static void
end_inflate(void *arg)
{
    lk_inflate_end(arg);
}

/* Acts on one match in the body.  Rewrite moves the bytes before it to out
 * and puts the replacement in its place; block answers or fails. */
static enum lk_guard_verdict
on_hit(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
       struct evbuffer *in, struct evbuffer *out, const struct lk_match_hit *hit)
{
    const struct lk_guard_target *t = &conf->targets[hit->id];
    uint64_t start = hit->end - hit->len;
    const char *to;

    if (!count(x, g, hit))
        return LK_GUARD_PASS;
    enum lk_leak_guard mode = conf->mode;
    /* A LookupData body the lookup filter rewrote has only the selected
     * listener's addresses in its address fields; what is left (the 5.0
     * brokerId, "host:webport") is an identifier, so block mode rewrites
     * it rather than refuse every 5.0 lookup -- when it can. */
    if (mode == LK_LEAK_BLOCK && *lk_guard_fill(x)->vetted && g->body != BODY_INFLATE &&
        start >= g->base && replacement(x, t) != NULL)
        mode = LK_LEAK_REWRITE;
    switch (mode) {
    case LK_LEAK_BLOCK:
        return block(x, g, t->broker, t->text, NULL, g->released, refused_502);
    case LK_LEAK_REWRITE:
        if (g->body == BODY_INFLATE) {
            report(x, g, LK_WARN, t->broker, t->text, NULL,
                   "not rewritten: the body is compressed (leak_guard = rewrite)");
            return LK_GUARD_PASS;
        }
        /* start < base: it overlaps an address just replaced */
        if (start >= g->base && (to = replacement(x, t)) != NULL) {
            evbuffer_remove_buffer(in, out, (size_t)(start - g->base));
            evbuffer_drain(in, hit->len);
            evbuffer_add(out, to, strlen(to));
            g->base = hit->end;
            (*lk_guard_fill(x)->rewrites)++;
            report(x, g, LK_DEBUG, t->broker, t->text, NULL, "rewritten (leak_guard = rewrite)");
            return LK_GUARD_PASS;
        }
        report(x, g, LK_WARN, t->broker, t->text, NULL,
               "not rewritten: no address on the selected listener (leak_guard = rewrite)");
        return LK_GUARD_PASS;
    default:
        report(x, g, LK_WARN, t->broker, t->text, NULL, "logged only (leak_guard = log)");
        return LK_GUARD_PASS;
    }
}

/* Acts on a match in the body, read up to the piece data[0..len): an
 * any_port pattern's (a brokerId) or a target's. */
static enum lk_guard_verdict
take_hit(struct text_find *tf, struct evbuffer *out, const void *data, size_t len,
         const struct lk_match_hit *hit)
{
    struct lk_guard_stream *g = tf->g;

    if (hit->id < tf->conf->ntargets)
        return on_hit(tf->conf, tf->x, g, tf->in, out, hit);
    if (g->ap != NULL &&
        lk_guard_ap_hit(tf->conf, tf->x, g->ap, data, len, hit, text_any_port, tf) != 0)
        return tf->v;
    return LK_GUARD_PASS;
}

/* Runs the automaton over len bytes of the scanned stream. */
static enum lk_guard_verdict
scan_bytes(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
           struct evbuffer *in, struct evbuffer *out, const void *data, size_t len)
{
    struct text_find tf = {conf, x, g, in, NULL, LK_GUARD_PASS, refused_502, 0};
    struct lk_match_hit hit;
    enum lk_guard_verdict v;
    size_t off = 0;

    /* the digits of a brokerId that ended the last piece */
    if (g->ap != NULL && g->ap->nopen != 0 &&
        lk_guard_ap_settle(conf, x, g->ap, data, len, 0, text_any_port, &tf) != 0)
        return tf.v;
    while (lk_match_scan(conf->match, &g->st, data, len, &off, &hit))
        if ((v = take_hit(&tf, out, data, len, &hit)) != LK_GUARD_PASS)
            return v;
    if (g->ap != NULL)
        any_port_next(g->ap, data, len);
    return LK_GUARD_PASS;
}

/* The body's inflated bytes, into the automaton. */
struct inflated {
    const struct lk_guard *conf;
    struct lk_guard_x *x;
    struct lk_guard_stream *g;
    struct evbuffer *in, *out;
    enum lk_guard_verdict v;
};

static int
scan_inflated(void *arg, const void *p, size_t n)
{
    struct inflated *s = arg;

    s->v = scan_bytes(s->conf, s->x, s->g, s->in, s->out, p, n);
    return s->v != LK_GUARD_PASS;
}

/*
 * A text body the guard cannot read on (a coding it does not know, or
 * compressed data that is broken or inflates past its bound), from its
 * first bytes or from some way in: log and rewrite let the rest go unread,
 * block will not pass what it could not check, and answers 502 while none
 * of the body has gone, or closes the connection.
 */
static enum lk_guard_verdict
unread(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
       const char *why)
{
    struct lk_guard_x *f = lk_guard_fill(x);

    if (conf->mode != LK_LEAK_BLOCK) {
        lk_log(LK_DEBUG, f->conn, "%s: the response body %s; not read further", f->id, why);
        return LK_GUARD_PASS;
    }
    lk_log(LK_WARN, f->conn, "%s: the response body %s, so it cannot be checked: %s", f->id, why,
           g->released ? "closing the connection (leak_guard = block)"
                       : "answered 502 (leak_guard = block)");
    return g->released ? LK_GUARD_CUT : LK_GUARD_REFUSE;
}

/* Inflates raw bytes into the automaton, a bounded piece at a time.  A
 * broken stream, or one that inflates past its cap, is no longer read. */
static enum lk_guard_verdict
inflate_bytes(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
              struct evbuffer *in, struct evbuffer *out, const void *data, size_t len)
{
    struct inflated s = {conf, x, g, in, out, LK_GUARD_PASS};
    const char *why;

    switch (
        lk_inflate_feed(&g->z, data, len,
                        LK_GUARD_INFLATE_RATIO * (uint64_t)lk_guard_fill(x)->conf->max_buffer_bytes,
                        scan_inflated, &s)) {
    case LK_INFLATE_STOPPED:
        return s.v;
    case LK_INFLATE_TOO_BIG:
        why = "is too large once inflated";
        break;
    case LK_INFLATE_BROKEN:
        why = "is broken compressed data";
        break;
    default:
        return LK_GUARD_PASS;
    }
    g->body = BODY_SKIP;
    return unread(conf, x, g, why);
}

/* log reads the bytes of `in` not seen yet where they lie: nothing it does
 * on a find changes `in`. */
static enum lk_guard_verdict
scan_in_place(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
              struct evbuffer *in, struct evbuffer *out)
{
    uint64_t end = g->base + evbuffer_get_length(in);
    enum lk_guard_verdict v;

    while (g->fed < end) {
        struct evbuffer_iovec vec[4];
        struct evbuffer_ptr p;
        int n;

        if (evbuffer_ptr_set(in, &p, (size_t)(g->fed - g->base), EVBUFFER_PTR_SET) != 0 ||
            (n = evbuffer_peek(in, (ev_ssize_t)(end - g->fed), &p, vec, 4)) <= 0)
            return LK_GUARD_CUT; /* cannot happen: the bytes are there */
        for (int k = 0; k < n && k < 4 && g->fed < end; k++) {
            size_t len = vec[k].iov_len < end - g->fed ? vec[k].iov_len : (size_t)(end - g->fed);
            g->fed += len;
            if ((v = scan_bytes(conf, x, g, in, out, vec[k].iov_base, len)) != LK_GUARD_PASS)
                return v;
        }
    }
    return LK_GUARD_PASS;
}

/* The length of `in` if it is a whole body, in one piece, with no match
 * in it, else 0: the matcher's cheap answer (lk_match_none) for most
 * small bodies, which come whole. */
static size_t
whole_clean(const struct lk_guard *conf, struct evbuffer *in)
{
    struct evbuffer_iovec vec;
    size_t len = evbuffer_get_length(in);

    /* a length, not -1: with -1, libevent counts no further than vec */
    return len != 0 && evbuffer_peek(in, (ev_ssize_t)len, NULL, &vec, 1) == 1 &&
                   vec.iov_len == len && lk_match_none(conf->match, vec.iov_base, len)
               ? len
               : 0;
}

/* Feeds the bytes of `in` not seen yet (it holds held-back bytes already
 * seen) through the automaton, a bounded copy at a time (in place for
 * log): on_hit may drain `in`, so nothing points into it across a hit.
 * Invariant: g->base plus the length of `in` is the raw stream offset of
 * the end of the data; g->fed is the raw offset read so far. */
static enum lk_guard_verdict
scan(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
     struct evbuffer *in, struct evbuffer *out, int last)
{
    struct lk_match_hit hit;
    enum lk_guard_verdict v;
    char buf[4096];
    size_t whole;

    if (last && g->fed == 0 && g->body == BODY_SCAN && (whole = whole_clean(conf, in)) != 0) {
        g->fed = whole;
        return LK_GUARD_PASS;
    }
    if (conf->mode == LK_LEAK_LOG && g->body == BODY_SCAN &&
        (v = scan_in_place(conf, x, g, in, out)) != LK_GUARD_PASS)
        return v;
    while (g->body != BODY_SKIP) {
        uint64_t end = g->base + evbuffer_get_length(in);
        struct evbuffer_ptr p;
        size_t n;

        if (g->fed >= end)
            break;
        n = end - g->fed < sizeof(buf) ? (size_t)(end - g->fed) : sizeof(buf);
        if (evbuffer_ptr_set(in, &p, (size_t)(g->fed - g->base), EVBUFFER_PTR_SET) != 0 ||
            evbuffer_copyout_from(in, &p, buf, n) != (ev_ssize_t)n)
            return LK_GUARD_CUT; /* cannot happen: the bytes are there */
        g->fed += n;
        v = g->body == BODY_INFLATE ? inflate_bytes(conf, x, g, in, out, buf, n)
                                    : scan_bytes(conf, x, g, in, out, buf, n);
        if (v != LK_GUARD_PASS)
            return v;
    }
    if (last && g->body != BODY_SKIP) {
        struct text_find tf = {conf, x, g, in, NULL, LK_GUARD_PASS, refused_502, 0};
        while (lk_match_finish(conf->match, &g->st, &hit))
            if ((v = take_hit(&tf, out, (const uint8_t *)"", 0, &hit)) != LK_GUARD_PASS)
                return v;
        if (g->ap != NULL &&
            lk_guard_ap_settle(conf, x, g->ap, (const uint8_t *)"", 0, 1, text_any_port, &tf) != 0)
            return tf.v;
    }
    return LK_GUARD_PASS;
}

enum lk_guard_verdict
lk_guard_body(const struct lk_guard *conf, struct lk_guard_stream *g, struct lk_guard_x *x,
              const struct lk_http_msg *res, struct evbuffer *in, struct evbuffer *out, int last)
{
    size_t len, keep = 0;
    enum lk_guard_verdict v;

    if (g->body == BODY_UNDECIDED && evbuffer_get_length(in) != 0) {
        const char *why = "is in a coding lookout does not read (Content-Encoding)";
        g->body = body_coding(res);
        if (g->body == BODY_INFLATE) {
            if (lk_inflate_init(&g->z, LK_INFLATE_GZIP_OR_ZLIB) == 0)
                lk_pool_cleanup_add(lk_guard_fill(x)->pool, end_inflate, &g->z);
            else
                g->body = BODY_SKIP, why = "could not be inflated (no memory)";
        }
        if (g->body == BODY_SKIP && (v = unread(conf, x, g, why)) != LK_GUARD_PASS)
            return v;
    }
    if ((v = scan(conf, x, g, in, out, last)) != LK_GUARD_PASS)
        return v;
    len = evbuffer_get_length(in);
    if (last || g->body == BODY_SKIP) {
        keep = 0;
    } else if (conf->mode == LK_LEAK_REWRITE && g->body == BODY_SCAN) {
        /* A match in progress may still need its bytes replaced. */
        keep = lk_match_pending(conf->match, &g->st);
        keep = keep < len ? keep : len;
    } else if (conf->mode == LK_LEAK_BLOCK && !g->released) {
        if (len <= lk_guard_fill(x)->conf->max_buffer_bytes) {
            keep = len; /* everything, so that a leak can still be a 502 */
        } else {
            g->released = 1;
            lk_log(LK_DEBUG, lk_guard_fill(x)->conn,
                   "%s: the response body is over max_buffer_bytes (%zu); it streams now, and a "
                   "leak found later closes the connection",
                   lk_guard_fill(x)->id, lk_guard_fill(x)->conf->max_buffer_bytes);
        }
    }
    if (out != NULL)
        evbuffer_remove_buffer(in, out, len - keep);
    g->base += len - keep; /* out NULL (log): `in` is left as it is, read */
    return LK_GUARD_PASS;
}
