/*
 * The leak guard on binary answers (lk_guard_frame.h), the other half of
 * its matcher (lk_guard.c builds it and reads the text responses).
 *
 * Kafka and Pulsar answers come whole (the protocol modules hold the kinds
 * that may carry an address: lk_kafka_response_wanted, the Pulsar module's
 * held_type), after the rewriting filters.  A decoded answer is checked
 * field by field: every address it hands out must be one lookout serves,
 * so what is left is either an internal address of a mapped broker or an
 * address the map lacks (a node broker.pattern does not cover, a Pulsar
 * URL of no mapped broker), which a broker gave out on the internal
 * listener lookout reached it on.  An answer that does not decode is read
 * as bytes with the same automaton as text: "host:port" and URL forms, and
 * for Kafka the host as a whole string with its port after it.  Records
 * (Produce, Fetch, ShareFetch, MESSAGE and SEND payloads) are never read.
 *
 * A Pulsar broker whose internal listener has no http or https address in
 * the map (a binary-only map, or a mixed one's binary-only brokers) still
 * names itself by its brokerId, advertisedAddress:webServicePort, in its
 * exceptions: for such a broker the binary answers are also read for the
 * host of each of its internal addresses followed by any port
 * (lk_guard_ap_hit, as the text scan does), an address lookout
 * serves or gives out excepted.
 *
 * What is not read on purpose: the Streams group answers (KIP-1071,
 * StreamsGroupHeartbeat and StreamsGroupDescribe).  Their only host:port
 * fields are application endpoints, the Interactive Queries addresses of
 * the user's own Streams instances, which clients must get as given and
 * which may be any address: one in the brokers' network (10.0.0.5:8080),
 * or even equal to a broker's internal address (an instance on a broker's
 * host and port in another network namespace).  Read as bytes they would
 * be counted as leaks, and the layout holds no broker address that
 * reading it field by field could find, so the codec rates those answers
 * NONE (lk_kafka_response_addrs): never held, never read, for the
 * versions whose layout was read, and ApiVersions is clamped to those
 * (lk_kafka_clamp_version), so a later layout is not met blind.
 *
 * The fields are read from the answer's view when the chain decoded one
 * (a rewriting filter is in it: lk_filter.h), as the client gets them:
 * as decoded when the bytes that go are the ones the view was read from
 * (nothing edited, or edits that change no byte or cannot be written),
 * with the edits when the bytes are the view written with them.  Only
 * without a view that read them all (no rewriting filter, a layout the
 * codec does not decode) are the bytes decoded here.  The bytes
 * themselves, every other string of the answer, are read as they go in
 * either case.
 *
 * A binary answer's bytes cannot be rewritten in general (a longer string
 * means re-encoding a layout lookout does not know), and what a decoded
 * one still holds, the rewriting filter could not rewrite either: so
 * `rewrite` logs and counts here as `log` does, and `block` closes the
 * connection before any of the answer goes.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lk_guard_frame.h"
#include "lk_guard_int.h"
#include "lk_kafka_codec.h"
#include "lk_kafka_view.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_pulsar_codec.h"
#include "lk_pulsar_view.h"
#include "lk_stats.h" /* lk_kafka_api_name, lk_pulsar_command_name */

/* What one answer holds: leaks counted, the first for the log. */
struct finding {
    unsigned n;
    int unchecked;                  /* it could not be read (records, or no decode) */
    const struct lk_broker *broker; /* whose internal address; NULL: the map lacks it */
    char what[200];                 /* the address, as the log shows it */
};

/* Whether host:port is one of b's internal listener addresses (the trailing
 * dot of a name aside, as lk_cluster_find_addr compares). */
static int
is_internal(const struct lk_broker *b, struct lk_str host, uint16_t port)
{
    if (host.len > 1 && host.p[host.len - 1] == '.')
        host.len--;
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
        const struct lk_url *u = b->internal->addr[sc];
        if (u != NULL && u->port == port && lk_str_eqi(lk_str_c(u->host), host))
            return 1;
    }
    return 0;
}

/* Kafka: whether host:port is b's lookup-listener address, the one
 * lookout serves for it.  Its other listeners are not served: an
 * inter-broker one is internal, and one copied from advertised.listeners
 * for another use (a KRaft CONTROLLER listener, a replication network) is
 * no address a client reaches lookout at. */
static int
is_served(const struct lk_broker *b, struct lk_str host, uint16_t port)
{
    const struct lk_url *u = b->lookup != NULL ? lk_kafka_addr(b->lookup) : NULL;

    if (host.len > 1 && host.p[host.len - 1] == '.')
        host.len--;
    return u != NULL && u->port == port && lk_str_eqi(lk_str_c(u->host), host);
}

/* Counts a find; the first is kept for the log: the address (sanitised),
 * with its node id when node >= 0 (Kafka) and its port when port >= 0. */
static void
found(struct finding *fd, const struct lk_broker *b, struct lk_str s, long port, long node)
{
    char text[160];
    int n;

    if (fd->n++ != 0)
        return;
    fd->broker = b;
    lk_log_sanitize(text, s.p, s.len, 120);
    n = snprintf(fd->what, sizeof(fd->what), "%s", text);
    if (port >= 0 && n > 0 && (size_t)n < sizeof(fd->what))
        n += snprintf(fd->what + n, sizeof(fd->what) - (size_t)n, ":%ld", port);
    if (node >= 0 && n > 0 && (size_t)n < sizeof(fd->what))
        snprintf(fd->what + n, sizeof(fd->what) - (size_t)n, " (node %ld)", node);
}

/* Kafka: one decoded endpoint, as the client will get it. */
struct kcheck {
    struct lk_guard_x *x;
    struct finding *fd;
};

static enum lk_kafka_ep
check_endpoint(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    struct kcheck *k = arg;
    const struct lk_cluster *cl = k->x->cluster;
    const struct lk_broker *b = NULL;
    int32_t id;

    if (*port > 0 && *port <= 65535) {
        b = lk_cluster_find_addr(cl, *host, (uint16_t)*port, &(enum lk_scheme){0});
        if (b != NULL && is_served(b, *host, (uint16_t)*port))
            return LK_KAFKA_EP_KEEP; /* the lookup-listener address lookout serves */
        if (b == NULL && cl->pattern != NULL &&
            lk_kafka_pattern_match(cl->pattern, *host, (uint16_t)*port, &id))
            return LK_KAFKA_EP_KEEP; /* broker.pattern's: lookout serves it */
    }
    found(k->fd, b, *host, (long)*port, node_id < 0 ? -1 : (long)node_id);
    return LK_KAFKA_EP_KEEP;
}

/* A raw hit (a Kafka host) is a find when the bytes around it are a
 * Kafka string of exactly that host (an INT16 length before it, or a
 * compact one: the length plus 1 as an unsigned varint) with the port of
 * one of the host's unserved addresses right after it, as an INT32 or a
 * UINT16 (DescribeQuorum), or with any bytes after it when lookout serves
 * nothing on that host (t->alone).  The target of that address, or NULL. */
static const struct lk_guard_target *
raw_find(const struct lk_guard *conf, const uint8_t *p, size_t len, const struct lk_match_hit *hit)
{
    size_t start = (size_t)(hit->end - hit->len), end = (size_t)hit->end, hl = hit->len;
    int str = (start >= 2 && p[start - 2] == (uint8_t)(hl >> 8) && p[start - 1] == (uint8_t)hl) ||
              (hl + 1 < 128 ? start >= 1 && p[start - 1] == hl + 1
                            : start >= 2 && p[start - 2] == (uint8_t)(((hl + 1) & 0x7f) | 0x80) &&
                                  p[start - 1] == (uint8_t)((hl + 1) >> 7));

    if (!str)
        return NULL;
    for (size_t i = 0; i < conf->ntargets; i++) {
        const struct lk_guard_target *t = &conf->targets[i];
        uint16_t port = t->raw ? t->addr->port : 0;
        if (!t->raw || strlen(t->text) != hl ||
            strncasecmp(t->text, (const char *)p + start, hl) != 0)
            continue;
        if (t->alone)
            return t; /* a host lookout serves nothing on: any port */
        if ((end + 4 <= len && p[end] == 0 && p[end + 1] == 0 && p[end + 2] == (port >> 8) &&
             p[end + 3] == (port & 0xff)) ||
            (end + 2 <= len && p[end] == (port >> 8) && p[end + 1] == (port & 0xff)))
            return t;
    }
    return NULL;
}

/* A "HOST:PORT" of a broker without an internal web address (lk_guard_ap_hit)
 * in a binary answer. */
static int
frame_any_port(void *arg, const struct lk_broker *b, const char *text)
{
    found(arg, b, lk_str_c(text), -1, -1);
    return 0;
}

/* Reads a whole answer's bytes. */
static void
scan_frame(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
           const uint8_t *p, size_t len, struct finding *fd)
{
    struct lk_match_hit hit;
    size_t off = 0;
    int more = 1;
    struct lk_guard_ap ap;

    if (lk_match_none(conf->match, p, len))
        return; /* most are */
    lk_match_state_init(&g->st);
    lk_guard_ap_init(&ap);
    g->leak_end = 0;
    while (more) {
        more = lk_match_scan(conf->match, &g->st, p, len, &off, &hit) ||
               lk_match_finish(conf->match, &g->st, &hit);
        if (!more)
            break;
        if (hit.id >= conf->ntargets) {
            lk_guard_ap_hit(conf, x, &ap, p, len, &hit, frame_any_port, fd);
            continue;
        }
        const struct lk_guard_target *t = &conf->targets[hit.id];
        if (t->raw && (t = raw_find(conf, p, len, &hit)) == NULL)
            continue;
        if (!lk_guard_fresh(g, &hit))
            continue;
        found(fd, t->broker, lk_str_c(t->raw ? t->addr->hostport : t->text), -1, -1);
    }
    lk_guard_ap_settle(conf, x, &ap, p, len, 1, frame_any_port, fd);
}

/* Kafka: the endpoints of a decoded answer, each as the client gets it:
 * from the view when it read them all (the bytes are the ones it read, or
 * it written with its edits: a->written), else from the bytes.  0, or
 * LK_KAFKA_RW_MALFORMED when they do not decode. */
static enum lk_kafka_rw
kafka_endpoints(const struct lk_guard_answer *a, struct kcheck *k)
{
    const struct lk_kafka_view *v = a->kafka;
    struct lk_kafka_rewrite rw = {
        .endpoint = check_endpoint, .controller = check_endpoint, .arg = k};

    if (v == NULL || v->decoded != LK_KAFKA_RW_UNCHANGED)
        return lk_kafka_rewrite_response(a->p, a->len, a->key, a->version, &rw, NULL);
    for (size_t i = 0; i < v->nep; i++) {
        const struct lk_kafka_endpoint *e = &v->ep[i];
        struct lk_str host = a->written && e->set ? e->new_host : e->host;
        int32_t port = a->written && e->set ? e->new_port : e->port;
        check_endpoint(k, e->node_id, &host, &port);
    }
    return LK_KAFKA_RW_UNCHANGED;
}

/* The lengths p[t..) may have as a Kafka string, by the bytes right
 * before t: an INT16 one (flex 0, or -1: not known), or a compact one,
 * the length plus 1 as an unsigned varint of one or two bytes (flex 1 or
 * -1); each within the answer.  How many, in n[0..3). */
static unsigned
kafka_string_lens(const uint8_t *p, size_t len, size_t t, int flex, size_t n[3])
{
    unsigned k = 0;

    if (flex != 1 && t >= 2)
        n[k++] = (size_t)p[t - 2] << 8 | p[t - 1];
    if (flex != 0 && t >= 1 && p[t - 1] < 0x80 && p[t - 1] != 0) {
        n[k++] = (size_t)p[t - 1] - 1;
        if (t >= 2 && p[t - 2] >= 0x80)
            n[k++] = ((size_t)(p[t - 2] & 0x7f) | (size_t)p[t - 1] << 7) - 1;
    }
    unsigned kept = 0;
    for (unsigned i = 0; i < k; i++)
        if (n[i] <= len - t)
            n[kept++] = n[i];
    return kept;
}

/* Whether a Kafka string of p starts at s and covers [s, e) (whole, when
 * to_end), or, start unknown, one starting up to KAFKA_STRING_BACK bytes
 * before s ends at e. */
#define KAFKA_STRING_BACK 256
static int
kafka_string_around(const uint8_t *p, size_t len, size_t s, size_t e, int at_start, int to_end,
                    int flex)
{
    size_t n[3];

    if (at_start) {
        for (unsigned i = kafka_string_lens(p, len, s, flex, n); i-- > 0;)
            if (to_end ? s + n[i] == e : s + n[i] >= e)
                return 1;
        return 0;
    }
    for (size_t t = s + 1; t-- > 0 && s - t <= KAFKA_STRING_BACK;)
        for (unsigned i = kafka_string_lens(p, len, t, flex, n); i-- > 0;)
            if (t + n[i] == e)
                return 1;
    return 0;
}

/* Kafka: a string that starts or ends with an address has bytes of any
 * value around it, its length before it and the next field after it,
 * which scan_frame's boundary rule may take for part of a longer name or
 * port: a compact length of 46 is '.', of 49 to 58 a digit.  So, when the
 * answer's bytes showed nothing, they are read again with no boundary
 * rule, and a "host:port" find counts where the rule failed only on a
 * side where a Kafka string begins or ends (kafka_string_around).  At most
 * KAFKA_STRING_FINDS such finds are weighed an answer: bytes that hold
 * more are a broker's making, not its mistake, and cost no more. */
#define KAFKA_STRING_FINDS 256
static void
kafka_strings(const struct lk_guard *conf, const struct lk_guard_answer *a, struct finding *fd)
{
    const uint8_t *p = a->p;
    struct lk_match_state st;
    struct lk_match_hit hit;
    size_t off = 0, len = a->len;
    int hv = lk_kafka_response_header_version(a->key, a->version);
    unsigned weighed = 0;

    if (lk_match_none(conf->match, p, len))
        return;
    lk_match_state_init(&st);
    while ((lk_match_scan_raw(conf->match, &st, p, len, &off, &hit) ||
            lk_match_finish_raw(conf->match, &st, &hit)) &&
           weighed < KAFKA_STRING_FINDS) {
        if (hit.id >= conf->ntargets || conf->targets[hit.id].raw)
            continue; /* raw hosts: raw_find read them in scan_frame */
        size_t s = (size_t)(hit.end - hit.len), e = (size_t)hit.end;
        int before = s == 0 || !lk_guard_host_char(p[s - 1]);
        int after = e == len || !isdigit(p[e]);
        if (before && after)
            continue; /* scan_frame's to decide (lk_guard_fresh) */
        weighed++;
        if (kafka_string_around(p, len, s, e, !before, !after, hv)) {
            const struct lk_guard_target *t = &conf->targets[hit.id];
            found(fd, t->broker, lk_str_c(t->text), -1, -1);
            return;
        }
    }
}

static void
kafka_answer(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
             const struct lk_guard_answer *a, struct finding *fd)
{
    enum lk_kafka_addrs addrs = lk_kafka_response_addrs(a->key, a->version);
    struct kcheck k = {x, fd};

    if (addrs == LK_KAFKA_ADDRS_NONE)
        return;
    lk_guard_fill(x);
    if (addrs == LK_KAFKA_ADDRS_DECODED) {
        /* The endpoints are checked field by field; the answer's other
         * strings (an ErrorMessage, a ClusterId, a Rack) and any bytes
         * after its last field are the broker's too, and can name a host
         * as well, so when the fields found nothing the whole answer is
         * read as bytes (not both: one address, one find).  Answers held
         * here are small: Fetch and ShareFetch records never come here,
         * only their NodeEndpoints tail (lk_kafka.c streams them). */
        if (kafka_endpoints(a, &k) != LK_KAFKA_RW_MALFORMED) {
            if (fd->n == 0)
                scan_frame(conf, x, g, a->p, a->len, fd);
            if (fd->n == 0)
                kafka_strings(conf, a, fd);
            return;
        }
        fd->n = 0; /* what the walk met before it failed is read again below */
        if (a->key == LK_KAFKA_PRODUCE || a->key == LK_KAFKA_FETCH ||
            a->key == LK_KAFKA_SHARE_FETCH || a->key == LK_KAFKA_SHARE_ACKNOWLEDGE)
            addrs = LK_KAFKA_ADDRS_RECORDS;
    }
    if (addrs == LK_KAFKA_ADDRS_RECORDS) {
        fd->unchecked = 1;
    } else {
        scan_frame(conf, x, g, a->p, a->len, fd);
        if (fd->n == 0)
            kafka_strings(conf, a, fd);
    }
}

/* Pulsar: a URL of a decoded command, as the client will get it. */
static void
check_url(struct lk_guard_x *x, int type, struct lk_str url, struct finding *fd)
{
    struct lk_url_parts parts;
    enum lk_scheme scheme;

    if (url.len == 0 || lk_url_split(url, &parts) != 0)
        return; /* no address a client could dial */
    for (size_t k = 0; k <= x->conf->nclusters; k++) {
        const struct lk_cluster *cl = k == 0 ? x->cluster : x->conf->clusters[k - 1];
        const struct lk_broker *b;
        if ((k != 0 && cl == x->cluster) || !(cl->proto & LK_PROTO_PULSAR))
            continue;
        if ((b = lk_cluster_find_addr(cl, parts.host, parts.port, &scheme)) != NULL) {
            if (is_internal(b, parts.host, parts.port))
                found(fd, b, url, -1, -1);
            return;
        }
    }
    /* A migration names another cluster's service URL, which may well be
     * one its clients reach; any other command names a broker, and one
     * lookout does not serve came from the broker's internal listener. */
    if (type != LK_PULSAR_TOPIC_MIGRATED)
        found(fd, NULL, url, -1, -1);
}

/* Pulsar: the URLs of a command of a->key, pair by pair, as the client
 * gets them (as kafka_endpoints reads a view).  0, or -1 when the view
 * did not read them all and the bytes do not decode. */
static int
pulsar_urls(struct lk_guard_x *x, const struct lk_guard_answer *a, struct finding *fd)
{
    const struct lk_pulsar_view *v = a->pulsar;
    uint32_t total, cmd_size;
    struct lk_pulsar_cmd c;

    /* a view whose pairs did not read as its decode counted them has
     * none: the bytes say which there are */
    if (v != NULL && v->state == LK_PULSAR_VIEW_DECODED &&
        (v->cmd.npairs != 0 || v->pairs == NULL)) {
        for (size_t i = 0; i < v->cmd.npairs; i++) {
            const struct lk_pulsar_pair *pr = &v->pairs[i];
            const struct lk_pulsar_pair_edit *e =
                a->written && v->pair_edits != NULL ? &v->pair_edits[i] : NULL;
            if (e != NULL && e->set_url ? e->url != NULL : pr->has_url)
                check_url(x, a->key, e != NULL && e->set_url ? *e->url : pr->url, fd);
            if (e != NULL && e->set_url_tls ? e->url_tls != NULL : pr->has_url_tls)
                check_url(x, a->key, e != NULL && e->set_url_tls ? *e->url_tls : pr->url_tls, fd);
        }
        return 0;
    }
    if (a->len < LK_PULSAR_PREFIX || lk_pulsar_sizes(a->p, UINT32_MAX, &total, &cmd_size) != 0 ||
        (size_t)total + 4 != a->len || (size_t)cmd_size + LK_PULSAR_PREFIX != a->len ||
        lk_pulsar_decode(a->p + LK_PULSAR_PREFIX, cmd_size, &c) != 0)
        return -1;
    struct lk_pulsar_pair *pairs = lk_palloc(x->pool, (c.npairs + 1) * sizeof(*pairs));
    long n = lk_pulsar_pairs(a->p + LK_PULSAR_PREFIX, cmd_size, pairs, c.npairs);
    for (long i = 0; i < n && (size_t)i < c.npairs; i++) {
        if (pairs[i].has_url)
            check_url(x, a->key, pairs[i].url, fd);
        if (pairs[i].has_url_tls)
            check_url(x, a->key, pairs[i].url_tls, fd);
    }
    return 0;
}

/* A protobuf varint at q[*o..end): 0 and *o past it, or -1. */
static int
pb_varint(const uint8_t *q, size_t *o, size_t end, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; *o < end && shift < 64; shift += 7) {
        uint8_t b = q[(*o)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The next protobuf field of q[*o..end): its key, and for a string or
 * message (wire type 2) its bytes' offset and length.  0, or -1 when the
 * bytes are no field. */
static int
pb_field(const uint8_t *q, size_t *o, size_t end, uint64_t *key, size_t *at, size_t *n)
{
    uint64_t v;

    if (pb_varint(q, o, end, key) != 0 || *key >> 3 == 0)
        return -1;
    switch (*key & 7) {
    case 0:
        return pb_varint(q, o, end, &v);
    case 1:
    case 5:
        v = (*key & 7) == 1 ? 8 : 4;
        break;
    case 2:
        if (pb_varint(q, o, end, &v) != 0)
            return -1;
        *at = *o;
        *n = (size_t)v;
        break;
    default: /* groups, or no wire type */
        return -1;
    }
    if (v > end - *o)
        return -1;
    *o += (size_t)v;
    return 0;
}

/* Pulsar: a string that starts or ends with an address has bytes of any
 * value around it, its length before it and the next field's key after
 * it, which scan_frame's boundary rule may take for part of a longer
 * name or port: a message of 45 bytes follows '-', one of 48 to 57 a
 * digit, and a key of field 6 or 7 is a digit too.  So each string or
 * message of p[off..end), if those bytes are protobuf fields to their end,
 * is read on its own, as text is, and a message's fields in turn, to a
 * depth of PB_DEPTH (a string may parse as fields too: it is read before
 * its "fields" are).  1 once something is found. */
#define PB_DEPTH 8
static int
pulsar_fields(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
              const uint8_t *p, size_t off, size_t end, int depth, struct finding *fd)
{
    uint64_t key;
    size_t o = off, at, n;

    while (o < end)
        if (pb_field(p, &o, end, &key, &at, &n) != 0)
            return 0;
    for (o = off; o < end;) {
        pb_field(p, &o, end, &key, &at, &n);
        if ((key & 7) != 2 || n == 0)
            continue;
        scan_frame(conf, x, g, p + at, n, fd);
        if (fd->n != 0 || (depth < PB_DEPTH && pulsar_fields(conf, x, g, p, at, at + n,
                                                               depth + 1, fd)))
            return 1;
    }
    return 0;
}

/* pulsar_fields over a command whose bytes as they came showed nothing:
 * those reads find all that one does and more. */
static void
pulsar_strings(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
               const struct lk_guard_answer *a, struct finding *fd)
{
    uint32_t total, cmd_size;

    if (a->len < LK_PULSAR_PREFIX ||
        lk_pulsar_sizes(a->p, UINT32_MAX, &total, &cmd_size) != 0 ||
        (size_t)cmd_size + LK_PULSAR_PREFIX > a->len || lk_match_none(conf->match, a->p, a->len))
        return;
    pulsar_fields(conf, x, g, a->p, LK_PULSAR_PREFIX, LK_PULSAR_PREFIX + (size_t)cmd_size, 0, fd);
}

static void
pulsar_answer(const struct lk_guard *conf, struct lk_guard_x *x, struct lk_guard_stream *g,
              const struct lk_guard_answer *a, struct finding *fd)
{
    enum lk_pulsar_addrs addrs = lk_pulsar_type_addrs(a->key);

    if (addrs == LK_PULSAR_ADDRS_NONE)
        return; /* never SEND, MESSAGE nor their payloads */
    lk_guard_fill(x);
    /* every URL pair: one of its own, or one per segment broker or
     * coordinator within (SCALABLE_TOPIC_UPDATE, WATCH_TC_ASSIGNMENTS_UPDATE);
     * the rest, a LOOKUP_RESPONSE's message, is read as bytes (the URLs,
     * rewritten, are no longer internal ones) */
    if (addrs == LK_PULSAR_ADDRS_DECODED && pulsar_urls(x, a, fd) == 0 && fd->n != 0)
        return;
    scan_frame(conf, x, g, a->p, a->len, fd);
    if (fd->n == 0)
        pulsar_strings(conf, x, g, a, fd);
}

/* "the Metadata v14 answer", "the LOOKUP_RESPONSE command" */
static void
answer_name(unsigned proto, int32_t key, int16_t version, char *buf, size_t len)
{
    const char *name;

    if (proto == LK_PROTO_KAFKA) {
        if ((name = lk_kafka_api_name(key)) != NULL)
            snprintf(buf, len, "the %s v%d answer", name, version);
        else
            snprintf(buf, len, "the answer to api key %d v%d", key, version);
    } else if ((name = lk_pulsar_command_name(key)) != NULL) {
        snprintf(buf, len, "the %s command", name);
    } else {
        snprintf(buf, len, "a command of type %d", key);
    }
}

enum lk_guard_verdict
lk_guard_frame(const struct lk_guard *conf, struct lk_guard_x *x, const struct lk_guard_answer *a)
{
    struct lk_guard_stream g; /* scan_frame starts what it reads of it */
    struct finding fd;
    char what[96];

    memset(&fd, 0, sizeof(fd));
    if (a->proto == LK_PROTO_KAFKA)
        kafka_answer(conf, x, &g, a, &fd);
    else
        pulsar_answer(conf, x, &g, a, &fd);
    if (fd.n == 0 && !fd.unchecked)
        return LK_GUARD_PASS;
    *x->leaks += fd.n;
    answer_name(a->proto, a->key, a->version, what, sizeof(what));
    const char *outcome =
        conf->mode == LK_LEAK_BLOCK     ? "closing the connection (leak_guard = block)"
        : conf->mode == LK_LEAK_REWRITE ? "passed: a binary answer's bytes are not rewritten, so "
                                          "leak_guard = rewrite logs it as log does"
                                        : "logged only (leak_guard = log)";
    if (fd.unchecked)
        lk_log(LK_WARN, x->conn,
               "%s: %s from broker %s (cluster %s) does not decode, and it carries records, "
               "which are never read: its addresses cannot be checked; %s",
               x->id, what, x->broker != NULL ? x->broker->name : "-", x->cluster->name,
               conf->mode == LK_LEAK_BLOCK ? "closing the connection (leak_guard = block)"
                                           : "passed");
    else
        lk_log(LK_WARN, x->conn,
               "%s: %s from broker %s (cluster %s) names %s, %s%s (%u in all); %s", x->id, what,
               x->broker != NULL ? x->broker->name : "-", x->cluster->name, fd.what,
               fd.broker != NULL ? "an internal address of broker " : "",
               fd.broker != NULL ? fd.broker->name
                                 : "an address the map lacks, which the broker gave out on its "
                                   "internal listener",
               fd.n, outcome);
    return conf->mode == LK_LEAK_BLOCK ? LK_GUARD_CUT : LK_GUARD_PASS;
}
