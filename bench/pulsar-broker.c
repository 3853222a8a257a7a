/*
 * pulsar-broker: the pulsar scenario's backend (bench/run builds and runs it;
 * bench/README.md says how to read it).  A stand-in for a cluster of Pulsar
 * brokers, as librdkafka's mock is for Kafka: one process, one thread, one
 * libevent loop, N brokers each listening on its own port of 127.0.0.1 and
 * speaking the binary protocol (bench/pulsar-wire.h), with one topic store
 * shared by all.  Every topic is owned by broker --owner.  What each broker
 * answers, as a 4.x broker does:
 *
 *   CONNECT               CONNECTED (protocol_version: the client's, at most 21;
 *                         max_message_size 5 MiB).  Anything else before CONNECT,
 *                         or a second CONNECT, closes the connection.
 *   LOOKUP                LOOKUP_RESPONSE naming the owner's own address (the
 *                         brokers have one listener, their internal one, which a
 *                         proxy rewrites): Connect (authoritative) at the owner or
 *                         when the LOOKUP is authoritative, else Redirect to the
 *                         owner (authoritative, as the leader answers).  A LOOKUP
 *                         naming an advertised_listener_name fails, as it does on
 *                         a broker without that listener.
 *   PARTITIONED_METADATA  0 partitions
 *   PRODUCER              at the owner PRODUCER_SUCCESS, elsewhere ERROR
 *                         ServiceNotReady; SUBSCRIBE the same, with SUCCESS (a new
 *                         subscription starts at the end, or at the start with
 *                         initialPosition Earliest; a second consumer on an
 *                         Exclusive one: ERROR ConsumerBusy)
 *   SEND                  checks the CRC32C (SEND_ERROR ChecksumError when it
 *                         does not match), stores the payload section as it came
 *                         and answers SEND_RECEIPT with its message id
 *   FLOW                  MESSAGE frames while the consumer has permits (a SEND of
 *                         num_messages K takes K), the stored section unchanged
 *   ACK                   individual or cumulative; with a request_id ACK_RESPONSE.
 *                         An entry every subscription acknowledged is freed
 *   CLOSE_PRODUCER, CLOSE_CONSUMER, UNSUBSCRIBE   SUCCESS
 *   PING                  PONG (PONG is taken and ignored)
 *   any other type        closes the connection, as does a frame that does not
 *                         parse or is over 5 MiB + 10 KiB
 *
 * A consumer that goes (closed, or its connection) has the subscription's
 * unacknowledged entries sent again.  A topic with no subscription whose last
 * producer goes is deleted, as brokers delete inactive topics
 * (delete_when_no_subscriptions) but without their wait.  Not served: batches
 * are stored and counted, not split; no keep-alive PINGs, TLS, partitioned
 * topics, schemas, transactions.
 *
 * Usage: pulsar-broker [--brokers N] [--owner K] [--lifetime S]
 * It prints one JSON line once listening:
 *   {"brokers": [{"name": "b1", "address": "127.0.0.1:P", "service": "pulsar://127.0.0.1:P"}, ...],
 *    "owner": "bK"}
 * then serves until its standard input reaches end of file, SIGTERM or SIGINT,
 * or --lifetime seconds (default 1800) pass.  Usage errors exit 2.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "pulsar-wire.h"

#define MAX_BROKERS 16
#define MAX_FRAME (5 * 1024 * 1024 + 10 * 1024) /* maxMessageSize + MESSAGE_SIZE_FRAME_PADDING */
#define MAX_MESSAGE_SIZE (5 * 1024 * 1024)
#define SERVER_VERSION "Pulsar Server4.0.0-lookout-bench-broker"

struct entry {
    uint8_t *sec; /* the payload section as sent; NULL once freed */
    uint32_t len, num;
};

struct consumer;

struct sub {
    char *name;
    int type;        /* SubType: Exclusive 0 */
    uint64_t read;   /* next entry to send */
    uint64_t mark;   /* first entry not acknowledged */
    uint8_t *acked;  /* per entry, sized as the topic's entries */
    struct consumer *cons;
    unsigned rr;
    struct sub *next;
};

struct topic {
    char *name;
    uint64_t ledger;
    struct entry *e;
    uint64_t n, cap, freed; /* entries, room, freed from the start */
    struct sub *subs;
    int producers;
    struct topic *next;
};

struct conn;

struct producer {
    uint64_t id;
    struct topic *t;
    struct producer *next;
};

struct consumer {
    uint64_t id;
    struct conn *c;
    struct sub *s;
    struct topic *t;
    int64_t permits;
    struct consumer *next;  /* on its connection */
    struct consumer *snext; /* on its subscription */
};

struct conn {
    struct bufferevent *bev;
    int broker;
    int connected;
    struct producer *prods;
    struct consumer *cons;
};

static struct {
    int nbrokers, owner;
    double lifetime;
    char addr[MAX_BROKERS][32];
    struct event_base *base;
    struct topic *topics;
    uint64_t ntopics;
    int live;
} g = {.nbrokers = 3, .owner = 2, .lifetime = 1800};

static void *
xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "pulsar-broker: out of memory\n");
        exit(1);
    }
    return p;
}

static void *
xgrow(void *p, size_t n)
{
    p = realloc(p, n);
    if (p == NULL) {
        fprintf(stderr, "pulsar-broker: out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- sending ------------------------------------------------------------------- */

static void
out_cmd(struct conn *c, int type, const struct pw_w *sub)
{
    uint8_t f[4096];
    size_t n = pw_frame(f, sizeof(f), type, sub ? sub->p : NULL, sub ? sub->n : 0, sub != NULL, 0);
    if (n > 0 && !(sub && sub->bad))
        bufferevent_write(c->bev, f, n);
}

static void
out_error(struct conn *c, uint64_t rid, int err, const char *msg)
{
    uint8_t b[1024];
    struct pw_w w = {b, 0, sizeof(b), 0};
    pw_w_uint(&w, 1, rid);
    pw_w_uint(&w, 2, (uint64_t)err);
    pw_w_str(&w, 3, msg);
    out_cmd(c, PW_ERROR, &w);
}

static void
out_success(struct conn *c, uint64_t rid)
{
    uint8_t b[16];
    struct pw_w w = {b, 0, sizeof(b), 0};
    pw_w_uint(&w, 1, rid);
    out_cmd(c, PW_SUCCESS, &w);
}

/* ---- topics -------------------------------------------------------------------- */

/* A topic's full name as brokers give it ("t" -> persistent://public/default/t)
 * into out: 0, or -1 when it is not a valid name. */
static int
topic_name(const uint8_t *p, size_t n, char *out, size_t cap)
{
    char in[512];
    if (n == 0 || n >= sizeof(in) || memchr(p, 0, n) != NULL)
        return -1;
    memcpy(in, p, n);
    in[n] = 0;
    const char *rest = strstr(in, "://");
    int r;
    if (rest != NULL) {
        if (strncmp(in, "persistent://", 13) != 0 && strncmp(in, "non-persistent://", 17) != 0)
            return -1;
        r = snprintf(out, cap, "%s", in);
        rest += 3;
    } else if (strchr(in, '/') == NULL) {
        r = snprintf(out, cap, "persistent://public/default/%s", in);
        rest = out + 13;
    } else {
        r = snprintf(out, cap, "persistent://%s", in);
        rest = out + 13;
    }
    if (r < 0 || (size_t)r >= cap)
        return -1;
    int parts = 1;
    for (const char *s = rest; *s; s++)
        if (*s == '/') {
            if (s[1] == '/' || s[1] == 0 || s == rest)
                return -1;
            parts++;
        }
    return parts == 3 || parts == 4 ? 0 : -1;
}

static struct topic *
topic_get(const char *name)
{
    for (struct topic *t = g.topics; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    struct topic *t = xalloc(sizeof(*t));
    t->name = strdup(name);
    t->ledger = 1000 + g.ntopics++;
    t->next = g.topics;
    g.topics = t;
    return t;
}

static void
topic_drop(struct topic *t)
{
    for (struct topic **pp = &g.topics; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    for (uint64_t i = t->freed; i < t->n; i++)
        free(t->e[i].sec);
    free(t->e);
    free(t->name);
    free(t);
}

/* Frees the entries every subscription has acknowledged. */
static void
topic_trim(struct topic *t)
{
    uint64_t low = UINT64_MAX;
    for (struct sub *s = t->subs; s; s = s->next)
        if (s->mark < low)
            low = s->mark;
    if (low == UINT64_MAX)
        return;
    for (; t->freed < low && t->freed < t->n; t->freed++) {
        free(t->e[t->freed].sec);
        t->e[t->freed].sec = NULL;
    }
}

static void
send_message(struct consumer *k, struct topic *t, uint64_t eid)
{
    struct entry *e = &t->e[eid];
    uint8_t b[128], f[160];
    struct pw_w w = {b, 0, sizeof(b), 0};
    pw_w_uint(&w, 1, k->id);
    size_t at = pw_w_open(&w, 2);
    pw_w_uint(&w, 1, t->ledger);
    pw_w_uint(&w, 2, eid);
    pw_w_close(&w, at);
    size_t n = pw_frame(f, sizeof(f), PW_MESSAGE, w.p, w.n, 1, e->len);
    struct evbuffer *out = bufferevent_get_output(k->c->bev);
    evbuffer_add(out, f, n);
    evbuffer_add(out, e->sec, e->len);
    k->permits -= e->num ? e->num : 1;
}

/* The next consumer of s with permits, round robin; NULL when none has any. */
static struct consumer *
next_consumer(struct sub *s)
{
    if (s->cons->snext == NULL)
        return s->cons->permits > 0 ? s->cons : NULL;
    unsigned count = 0;
    for (struct consumer *x = s->cons; x; x = x->snext)
        count++;
    unsigned start = s->rr++ % count;
    for (unsigned j = 0; j < count; j++) {
        struct consumer *x = s->cons;
        for (unsigned i = (start + j) % count; i > 0; i--)
            x = x->snext;
        if (x->permits > 0)
            return x;
    }
    return NULL;
}

/* Sends what each subscription of t has to its consumers with permits. */
static void
dispatch(struct topic *t)
{
    for (struct sub *s = t->subs; s; s = s->next) {
        struct consumer *k;
        while (s->cons && s->read < t->n && (k = next_consumer(s)) != NULL) {
            uint64_t eid = s->read++;
            if (eid < t->freed || s->acked[eid])
                continue;
            send_message(k, t, eid);
        }
    }
}

static void
sub_grow(struct sub *s, uint64_t cap, uint64_t old)
{
    s->acked = xgrow(s->acked, cap ? cap : 1);
    if (cap > old)
        memset(s->acked + old, 0, cap - old);
}

static void
consumer_drop(struct consumer *k)
{
    struct sub *s = k->s;
    for (struct consumer **pp = &s->cons; *pp; pp = &(*pp)->snext)
        if (*pp == k) {
            *pp = k->snext;
            break;
        }
    s->read = s->mark; /* what it had and did not acknowledge goes out again */
    dispatch(k->t);
    free(k);
}

static void
producer_drop(struct producer *p)
{
    struct topic *t = p->t;
    free(p);
    if (--t->producers == 0 && t->subs == NULL)
        topic_drop(t);
}

/* ---- connections --------------------------------------------------------------- */

static void
conn_free(struct conn *c)
{
    while (c->cons) {
        struct consumer *k = c->cons;
        c->cons = k->next;
        consumer_drop(k);
    }
    while (c->prods) {
        struct producer *p = c->prods;
        c->prods = p->next;
        producer_drop(p);
    }
    bufferevent_free(c->bev);
    free(c);
}

static struct consumer *
find_consumer(struct conn *c, uint64_t id)
{
    for (struct consumer *k = c->cons; k; k = k->next)
        if (k->id == id)
            return k;
    return NULL;
}

/* The topic of a PRODUCER or SUBSCRIBE at the owner, or NULL having answered ERROR. */
static struct topic *
owned_topic(struct conn *c, const struct pw_field *tf, uint64_t rid)
{
    char name[600], msg[1024];
    if (tf->set != 2 || topic_name(tf->p, tf->n, name, sizeof(name)) < 0) {
        out_error(c, rid, PW_E_INVALID_TOPIC, "Invalid topic name");
        return NULL;
    }
    if (c->broker != g.owner) {
        const char *ns = name + (strncmp(name, "persistent://", 13) == 0 ? 13 : 17);
        snprintf(msg, sizeof(msg), "Namespace bundle for topic (%s) not served by this instance:%s. "
                 "Please redo the lookup. Request is denied: namespace=%.*s", name, g.addr[c->broker],
                 (int)(strrchr(ns, '/') - ns), ns);
        out_error(c, rid, PW_E_SERVICE_NOT_READY, msg);
        return NULL;
    }
    return topic_get(name);
}

static int
h_connect(struct conn *c, const struct pw_field *f)
{
    uint8_t b[256];
    struct pw_w w = {b, 0, sizeof(b), 0};
    uint64_t v = f[4].set ? f[4].v : 0;
    if (c->connected)
        return -1;
    c->connected = 1;
    pw_w_str(&w, 1, SERVER_VERSION);
    pw_w_uint(&w, 2, v < PW_PROTOCOL_VERSION ? v : PW_PROTOCOL_VERSION);
    pw_w_uint(&w, 3, MAX_MESSAGE_SIZE);
    out_cmd(c, PW_CONNECTED, &w);
    return 0;
}

static void
h_lookup(struct conn *c, const struct pw_field *f)
{
    uint8_t b[1024];
    char name[600], url[64];
    struct pw_w w = {b, 0, sizeof(b), 0};
    uint64_t rid = f[2].v;
    if (f[1].set != 2 || topic_name(f[1].p, f[1].n, name, sizeof(name)) < 0) {
        pw_w_uint(&w, 3, PW_LOOKUP_FAILED);
        pw_w_uint(&w, 4, rid);
        pw_w_uint(&w, 6, PW_E_INVALID_TOPIC);
        pw_w_str(&w, 7, "Invalid topic name");
    } else if (f[7].set == 2 && f[7].n > 0) {
        char m[300];
        snprintf(m, sizeof(m), "org.apache.pulsar.broker.PulsarServerException: the broker do not have "
                 "%.*s listener", (int)(f[7].n < 200 ? f[7].n : 200), (const char *)f[7].p);
        pw_w_uint(&w, 3, PW_LOOKUP_FAILED);
        pw_w_uint(&w, 4, rid);
        pw_w_uint(&w, 6, PW_E_SERVICE_NOT_READY);
        pw_w_str(&w, 7, m);
    } else {
        int connect = c->broker == g.owner || (f[3].set && f[3].v);
        snprintf(url, sizeof(url), "pulsar://%s", g.addr[g.owner]);
        pw_w_str(&w, 1, url);
        pw_w_uint(&w, 3, connect ? PW_LOOKUP_CONNECT : PW_REDIRECT);
        pw_w_uint(&w, 4, rid);
        pw_w_uint(&w, 5, 1);
        pw_w_uint(&w, 8, 0);
    }
    out_cmd(c, PW_LOOKUP_RESPONSE, &w);
}

static void
h_partitioned(struct conn *c, const struct pw_field *f)
{
    uint8_t b[32];
    struct pw_w w = {b, 0, sizeof(b), 0};
    pw_w_uint(&w, 1, 0);
    pw_w_uint(&w, 2, f[2].v);
    pw_w_uint(&w, 3, 0);
    out_cmd(c, PW_PARTITIONED_METADATA_RESPONSE, &w);
}

static void
h_producer(struct conn *c, const struct pw_field *f)
{
    uint8_t b[600];
    char pname[300];
    struct pw_w w = {b, 0, sizeof(b), 0};
    uint64_t rid = f[3].v;
    struct topic *t = owned_topic(c, &f[1], rid);
    if (t == NULL)
        return;
    struct producer *p = xalloc(sizeof(*p));
    p->id = f[2].v;
    p->t = t;
    p->next = c->prods;
    c->prods = p;
    t->producers++;
    if (f[4].set == 2 && f[4].n > 0 && f[4].n < sizeof(pname))
        snprintf(pname, sizeof(pname), "%.*s", (int)f[4].n, (const char *)f[4].p);
    else
        snprintf(pname, sizeof(pname), "b%d-%" PRIu64, c->broker + 1, p->id);
    pw_w_uint(&w, 1, rid);
    pw_w_str(&w, 2, pname);
    pw_w_uint(&w, 3, UINT64_MAX); /* last_sequence_id -1 (int64) */
    pw_w_uint(&w, 6, 1);
    out_cmd(c, PW_PRODUCER_SUCCESS, &w);
}

static void
h_send(struct conn *c, const struct pw_field *f, const uint8_t *sec, size_t secn)
{
    uint8_t b[64];
    struct pw_w w = {b, 0, sizeof(b), 0};
    struct producer *p = c->prods;
    while (p && p->id != f[1].v)
        p = p->next;
    if (p == NULL)
        return; /* ServerCnx drops a SEND of no producer */
    uint64_t seq = f[2].v;
    if (secn >= 10 && pw_get32(sec) >> 16 == PW_MAGIC_CRC32C &&
        pw_crc32c(sec + 6, secn - 6) != pw_get32(sec + 2)) {
        pw_w_uint(&w, 1, p->id);
        pw_w_uint(&w, 2, seq);
        pw_w_uint(&w, 3, PW_E_CHECKSUM);
        pw_w_str(&w, 4, "Checksum failed on the broker");
        out_cmd(c, PW_SEND_ERROR, &w);
        return;
    }
    struct topic *t = p->t;
    if (t->n == t->cap) {
        uint64_t old = t->cap;
        t->cap = old ? old * 2 : 1024;
        t->e = xgrow(t->e, t->cap * sizeof(*t->e));
        for (struct sub *s = t->subs; s; s = s->next)
            sub_grow(s, t->cap, old);
    }
    struct entry *e = &t->e[t->n];
    e->sec = malloc(secn ? secn : 1);
    if (e->sec == NULL) {
        fprintf(stderr, "pulsar-broker: out of memory\n");
        exit(1);
    }
    memcpy(e->sec, sec, secn);
    e->len = (uint32_t)secn;
    e->num = f[3].set && f[3].v > 0 ? (uint32_t)f[3].v : 1;
    uint64_t eid = t->n++;
    pw_w_uint(&w, 1, p->id);
    pw_w_uint(&w, 2, seq);
    size_t at = pw_w_open(&w, 3);
    pw_w_uint(&w, 1, t->ledger);
    pw_w_uint(&w, 2, eid);
    pw_w_close(&w, at);
    pw_w_uint(&w, 4, f[6].set ? f[6].v : seq);
    out_cmd(c, PW_SEND_RECEIPT, &w);
    if (t->subs)
        dispatch(t);
}

static void
h_subscribe(struct conn *c, const struct pw_field *f)
{
    uint64_t rid = f[5].v;
    struct topic *t = owned_topic(c, &f[1], rid);
    if (t == NULL)
        return;
    if (f[2].set != 2) {
        out_error(c, rid, 0, "no subscription name");
        return;
    }
    struct sub *s = t->subs;
    while (s && (strlen(s->name) != f[2].n || memcmp(s->name, f[2].p, f[2].n) != 0))
        s = s->next;
    if (s == NULL) {
        s = xalloc(sizeof(*s));
        s->name = strndup((const char *)f[2].p, f[2].n);
        s->type = (int)f[3].v;
        s->read = s->mark = f[13].set && f[13].v == 1 ? t->freed : t->n;
        s->acked = NULL;
        sub_grow(s, t->cap, 0);
        for (uint64_t i = 0; i < s->mark; i++)
            s->acked[i] = 1;
        s->next = t->subs;
        t->subs = s;
    }
    if (s->type == 0 && s->cons != NULL) {
        out_error(c, rid, PW_E_CONSUMER_BUSY, "Exclusive consumer is already connected");
        return;
    }
    struct consumer *k = xalloc(sizeof(*k));
    k->id = f[4].v;
    k->c = c;
    k->s = s;
    k->t = t;
    k->next = c->cons;
    c->cons = k;
    k->snext = s->cons;
    s->cons = k;
    out_success(c, rid);
}

static void
h_flow(struct conn *c, const struct pw_field *f)
{
    struct consumer *k = find_consumer(c, f[1].v);
    if (k == NULL)
        return;
    k->permits += (int64_t)f[2].v;
    dispatch(k->t);
}

static void
ack_one(struct sub *s, struct topic *t, uint64_t eid, int cumulative)
{
    if (eid >= t->n)
        return;
    if (cumulative)
        for (uint64_t i = s->mark; i <= eid; i++)
            s->acked[i] = 1;
    else
        s->acked[eid] = 1;
    while (s->mark < t->n && s->acked[s->mark])
        s->mark++;
}

static int
h_ack(struct conn *c, const uint8_t *p, size_t n)
{
    /* message_id (3) is repeated: read field by field, the ids once the
     * consumer (1) and the ack type (2) are known */
    const uint8_t *end = p + n, *d = NULL, *q;
    uint64_t num, v = 0, cid = 0, type = 0, rid = 0;
    uint32_t dn = 0;
    unsigned wt;
    int has_rid = 0, r;

    for (q = p; (r = pw_next(&q, end, &num, &wt, &v, &d, &dn)) > 0;) {
        if (wt == 0 && num == 1)
            cid = v;
        else if (wt == 0 && num == 2)
            type = v;
        else if (wt == 0 && num == 8) {
            rid = v;
            has_rid = 1;
        }
    }
    if (r < 0)
        return -1;
    struct consumer *k = find_consumer(c, cid);
    for (q = p; k != NULL && pw_next(&q, end, &num, &wt, &v, &d, &dn) > 0;) {
        struct pw_field m[PW_MAX_FIELD];
        if (wt != 2 || num != 3)
            continue;
        if (pw_fields(d, dn, m) < 0)
            return -1;
        ack_one(k->s, k->t, m[2].v, type == 1);
    }
    if (k != NULL)
        topic_trim(k->t);
    if (has_rid) {
        uint8_t b[32];
        struct pw_w w = {b, 0, sizeof(b), 0};
        pw_w_uint(&w, 1, cid);
        pw_w_uint(&w, 6, rid);
        out_cmd(c, PW_ACK_RESPONSE, &w);
    }
    return 0;
}

static void
h_close_consumer(struct conn *c, const struct pw_field *f, int unsubscribe)
{
    for (struct consumer **pp = &c->cons; *pp; pp = &(*pp)->next)
        if ((*pp)->id == f[1].v) {
            struct consumer *k = *pp;
            struct topic *t = k->t;
            struct sub *s = k->s;
            *pp = k->next;
            consumer_drop(k);
            if (unsubscribe && s->cons == NULL) {
                for (struct sub **sp = &t->subs; *sp; sp = &(*sp)->next)
                    if (*sp == s) {
                        *sp = s->next;
                        break;
                    }
                free(s->acked);
                free(s->name);
                free(s);
                topic_trim(t);
            }
            break;
        }
    out_success(c, f[2].v);
}

static void
h_close_producer(struct conn *c, const struct pw_field *f)
{
    for (struct producer **pp = &c->prods; *pp; pp = &(*pp)->next)
        if ((*pp)->id == f[1].v) {
            struct producer *p = *pp;
            *pp = p->next;
            producer_drop(p);
            break;
        }
    out_success(c, f[2].v);
}

/* One frame (with its size prefix): 0, or -1 to close the connection. */
static int
handle(struct conn *c, const uint8_t *fr, size_t n)
{
    uint32_t csize = pw_get32(fr + 4);
    const uint8_t *sub;
    uint32_t subn;
    int type;
    struct pw_field f[PW_MAX_FIELD];

    if (n < 8 || csize > n - 8 || pw_base(fr + 8, csize, &type, &sub, &subn) < 0)
        return -1;
    if (!c->connected && type != PW_CONNECT)
        return -1;
    if (type != PW_ACK && pw_fields(sub, subn, f) < 0)
        return -1;
    switch (type) {
    case PW_CONNECT:
        return h_connect(c, f);
    case PW_LOOKUP:
        h_lookup(c, f);
        return 0;
    case PW_PARTITIONED_METADATA:
        h_partitioned(c, f);
        return 0;
    case PW_PRODUCER:
        h_producer(c, f);
        return 0;
    case PW_SEND:
        if (n - 8 - csize < 10)
            return -1;
        h_send(c, f, fr + 8 + csize, n - 8 - csize);
        return 0;
    case PW_SUBSCRIBE:
        h_subscribe(c, f);
        return 0;
    case PW_FLOW:
        h_flow(c, f);
        return 0;
    case PW_ACK:
        return h_ack(c, sub, subn);
    case PW_CLOSE_PRODUCER:
        h_close_producer(c, f);
        return 0;
    case PW_CLOSE_CONSUMER:
    case PW_UNSUBSCRIBE:
        h_close_consumer(c, f, type == PW_UNSUBSCRIBE);
        return 0;
    case PW_PING:
        out_cmd(c, PW_PONG, NULL);
        return 0;
    case PW_PONG:
    case PW_REDELIVER:
        return 0;
    default:
        return -1;
    }
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    for (;;) {
        uint8_t head[4];
        size_t have = evbuffer_get_length(in);
        if (have < 4)
            return;
        evbuffer_copyout(in, head, 4);
        uint32_t total = pw_get32(head);
        if (total < 4 || total > MAX_FRAME) {
            conn_free(c);
            return;
        }
        if (have < 4 + (size_t)total)
            return;
        const uint8_t *fr = evbuffer_pullup(in, 4 + (ev_ssize_t)total);
        if (fr == NULL || handle(c, fr, 4 + (size_t)total) < 0) {
            conn_free(c);
            return;
        }
        evbuffer_drain(in, 4 + (size_t)total);
    }
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_free(arg);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = xalloc(sizeof(*c));
    c->broker = (int)(intptr_t)arg;
    c->bev = bufferevent_socket_new(g.base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        close(fd);
        free(c);
        return;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void
on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    (void)arg;
    if (fd == STDIN_FILENO) {
        char buf[4096];
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r > 0 || (r < 0 && errno == EINTR))
            return;
    }
    event_base_loopbreak(g.base);
}

static void
usage(void)
{
    fprintf(stderr, "usage: pulsar-broker [--brokers N] [--owner K] [--lifetime S]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (strcmp(argv[i], "--brokers") == 0)
            g.nbrokers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--owner") == 0)
            g.owner = atoi(argv[++i]);
        else if (strcmp(argv[i], "--lifetime") == 0)
            g.lifetime = atof(argv[++i]);
        else
            usage();
    }
    if (g.nbrokers < 1 || g.nbrokers > MAX_BROKERS || g.owner < 1 || g.owner > g.nbrokers)
        usage();
    g.owner--;
    signal(SIGPIPE, SIG_IGN);
    pw_crc_init();
    g.base = event_base_new();
    if (g.base == NULL)
        return 1;
    printf("{\"brokers\": [");
    for (int b = 0; b < g.nbrokers; b++) {
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct evconnlistener *l = evconnlistener_new_bind(
            g.base, on_accept, (void *)(intptr_t)b, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
            (struct sockaddr *)&sin, sizeof(sin));
        socklen_t sl = sizeof(sin);
        if (l == NULL || getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&sin, &sl) < 0) {
            fprintf(stderr, "pulsar-broker: cannot listen: %s\n", strerror(errno));
            return 1;
        }
        snprintf(g.addr[b], sizeof(g.addr[b]), "127.0.0.1:%d", ntohs(sin.sin_port));
        printf("%s{\"name\": \"b%d\", \"address\": \"%s\", \"service\": \"pulsar://%s\"}", b ? ", " : "", b + 1,
               g.addr[b], g.addr[b]);
    }
    printf("], \"owner\": \"b%d\"}\n", g.owner + 1);
    fflush(stdout);

    struct event *in = event_new(g.base, STDIN_FILENO, EV_READ | EV_PERSIST, on_stop, NULL);
    struct event *term = evsignal_new(g.base, SIGTERM, on_stop, NULL);
    struct event *intr = evsignal_new(g.base, SIGINT, on_stop, NULL);
    struct event *life = evtimer_new(g.base, on_stop, NULL);
    struct timeval tv = {(time_t)g.lifetime, (suseconds_t)((g.lifetime - (double)(time_t)g.lifetime) * 1e6)};
    event_add(in, NULL);
    event_add(term, NULL);
    event_add(intr, NULL);
    if (g.lifetime > 0)
        event_add(life, &tv);
    event_base_dispatch(g.base);
    return 0;
}
