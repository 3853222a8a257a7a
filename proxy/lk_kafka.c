/*
 * The Kafka protocol module (KIP-103 at the edge).  A client connection is
 * paired with one connection to one broker's inter.broker.listener.name
 * address (ApiVersions answers hold for the connection they came on, so
 * never more than one): the broker its bound address names, or for a
 * bootstrap address any healthy broker.
 *
 * Requests are never parsed past their fixed prefix (size, api_key,
 * api_version, correlation_id: KAFKA-21160), but for a Produce's Acks: each
 * frame is forwarded as it arrives, with a correlation id of lookout's own
 * in place of the client's (one counter per connection, so no two requests
 * in flight share one, whatever ids the client picks), and (lookout's id,
 * the client's, api key, version) is queued unless the broker will not
 * answer (Produce with acks=0).  Responses come back in request order; each
 * names exactly one queued request by lookout's id (entries before it were
 * never answered: a Produce whose Acks lookout could not read), gets the
 * client's id back, and is forwarded as it arrives unless the filters may
 * rewrite or read it (lk_kafka_response_wanted), in which case the whole
 * frame is held, rewritten and its size fixed, or refused (the leak
 * guard's block closes the connection); those are small (Metadata,
 * coordinators, Produce errors), and what a worker holds at once is
 * bounded by max_held_bytes (lk_hold.h).  Fetch v16+ and ShareFetch
 * answers, which are mostly records, are streamed instead
 * (lk_kafka_fstream): records go on as they come, at the client's pace,
 * and only the tail with the NodeEndpoints is held, rewritten, checked and
 * fitted to its original length (see stream_piece).  An answer is thus
 * always read as the answer to the request it answers: a client that
 * reuses an id, or sends a Produce with acks=0 and then a Metadata with
 * the same id, cannot make a Metadata answer pass as a Produce one, which
 * is never rewritten.
 *
 * SASL passes through.  SaslHandshake v1 and SaslAuthenticate are Kafka
 * frames like any other.  After a SaslHandshake v0 (KIP-43's first form,
 * which kafka-python 2.0.2 still sends) the tokens go bare, size-prefixed
 * with no header, both ways, until the mechanism is done: the handshake's
 * mechanism says after how many broker tokens (lk_kafka_sasl_bare_rounds),
 * and both readers read bare tokens until then.  The client speaks first
 * and then only after each broker token, so that no client token is left
 * over for the broker to read as a Kafka request once its mechanism is
 * done (such a request would carry the client's correlation id, not
 * lookout's).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_conn.h"
#include "lk_dyn.h"
#include "lk_hold.h"
#include "lk_io.h"
#include "lk_kafka.h"
#include "lk_kafka_codec.h"
#include "lk_kafka_fstream.h"
#include "lk_log.h"
#include "lk_pair.h"
#include "lk_route.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_worker.h"
#include "lk_workers.h"
#include "lk_xchg.h"
#include "lk_xrec.h"

struct kreq {
    int32_t id;   /* lookout's correlation id: what the broker got */
    int32_t corr; /* the client's, put back in the answer */
    int16_t key, version;
    uint32_t size;  /* the request frame's, size field included */
    long long t_us; /* when its prefix came */
    int local;      /* answered by lookout itself (draining: answer_local), never sent */
};

struct kconn {
    struct lk_pair pr; /* first: the pair's callbacks get a kconn */
    struct lk_kafka_reader rq, rs; /* request and response frames */
    /* requests sent, awaiting their response: a ring */
    struct kreq *q;
    size_t qhead, qlen, qcap;
    uint32_t next_id; /* lookout's next correlation id */
    /* the response under way, when the filters may change it: held whole
     * (holding), or streamed with its tail held (streaming) */
    struct kreq cur;
    struct evbuffer *held; /* made when first needed */
    int holding;
    int streaming;
    struct lk_kafka_fstream fs;
    int records_warned; /* an answer with records lookout cannot read was logged */
    /* a request whose prefix was read (the reader's event, kept) waits in
     * the input, its prefix bytes not moved, until enough of it is there:
     * a SaslHandshake v0 whole, a Produce up to its Acks */
    int head_wait;
    /* the bytes of the waiting Produce head its last reading had, too few
     * (0: not read yet): it is read again once they have doubled
     * (lk_kafka_produce_head_due) */
    size_t produce_tried;
    /* draining: the request being read is a Metadata lookout answers
     * itself (answer_local), so its bytes are dropped, not forwarded; it
     * is queued once whole */
    int local_body;
    struct kreq local_req;
    int rebootstrap_logged; /* a REBOOTSTRAP_REQUIRED answer went out */
    /* and then, draining, the connection waits a little for the client to
     * leave (drain_check) */
    struct event *linger_ev;
    int lingered;
    /* SASL after a SaslHandshake v0: its mechanism's rounds, and once the
     * broker has accepted it, the bare tokens the broker has still to
     * send (0: Kafka frames both ways). */
    int sasl_rounds;
    int sasl_left;
    int sasl_client_turn; /* the client may send its next bare token */
    int sasl_v0_asked;    /* a SaslHandshake v0 went to the broker, unanswered */
    /* the response under way: when its head came, and its exchange record
     * (rewrites) while it is held */
    long long cur_head_us;
    struct lk_xrec cur_rec;
    /* for the connection's closing line */
    uint64_t bytes_in, bytes_out, frames_in, frames_out;
};

/* Whether k holds part of an answer: one held whole, or a streamed one's
 * tail. */
static int
holds(const struct kconn *k)
{
    return k->holding || (k->streaming && k->fs.tail);
}

static struct lk_hold *
hold_of(struct kconn *k)
{
    return &k->pr.c->w->hold;
}

/* Moves n bytes from in into k->held, on the budget. */
static void
hold_bytes(struct kconn *k, struct evbuffer *in, size_t n)
{
    if (k->held == NULL)
        k->held = evbuffer_new();
    evbuffer_remove_buffer(in, k->held, n);
    lk_hold_set(hold_of(k), &k->pr.hw, k->pr.hw.counted + n);
}

static void
kconn_cleanup(void *arg)
{
    struct kconn *k = arg;

    if (k->frames_in != 0)
        lk_pair_log_summary(&k->pr, LK_SP_KAFKA, k->bytes_in, k->bytes_out, k->frames_in,
                            k->frames_out);
    free(k->q);
    if (k->held != NULL)
        evbuffer_free(k->held);
    if (k->linger_ev != NULL)
        event_free(k->linger_ev);
    lk_pair_hold_release(&k->pr);
}

/* Where bytes [off, off + n) of in are, when they lie in its first chain
 * (most do: a read lands in one chain), else NULL.  A pullup within the
 * first chain moves nothing; an evbuffer_ptr or evbuffer_peek would cost
 * several times as much. */
static uint8_t *
in_first_chain(struct evbuffer *in, size_t off, size_t n)
{
    if (off + n > evbuffer_get_contiguous_space(in))
        return NULL;
    return evbuffer_pullup(in, (ev_ssize_t)(off + n)) + off;
}

/* Copies n bytes of in from offset off to p; 0, or -1 when in holds fewer. */
static int
copy_at(struct evbuffer *in, size_t off, void *p, size_t n)
{
    struct evbuffer_ptr at;
    const uint8_t *f = in_first_chain(in, off, n);

    if (f != NULL) {
        memcpy(p, f, n);
        return 0;
    }
    if (evbuffer_ptr_set(in, &at, off, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(in, &at, p, n) != (ev_ssize_t)n)
        return -1;
    return 0;
}

/*
 * Writes v, big-endian, over the 4 bytes at offset off of in (a
 * correlation id in a frame prefix the pumps have read but not moved).
 * In place: the input buffers hold only what libevent read into their own
 * chains (lookout adds no reference to one), and writing there keeps one
 * evbuffer_remove_buffer per read where a new prefix would cost a chain
 * per frame (f93d1ab).
 */
static void
put32_at(struct evbuffer *in, size_t off, uint32_t v)
{
    struct evbuffer_ptr at;
    struct evbuffer_iovec vec[4];
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    uint8_t *f = in_first_chain(in, off, 4);
    size_t done = 0;

    if (f != NULL) {
        memcpy(f, b, 4);
        return;
    }
    if (evbuffer_ptr_set(in, &at, off, EVBUFFER_PTR_SET) != 0)
        return; /* cannot happen: the prefix is there */
    int nvec = evbuffer_peek(in, 4, &at, vec, 4);
    for (int i = 0; i < nvec && i < 4 && done < 4; i++) {
        size_t m = vec[i].iov_len < 4 - done ? vec[i].iov_len : 4 - done;
        memcpy(vec[i].iov_base, b + done, m);
        done += m;
    }
}

/*
 * The next piece of the frame stream in, from offset off (the bytes before
 * it are pieces already read, which the caller moves later, all at once:
 * one evbuffer_remove_buffer() per read rather than two per frame).
 * Returns the count of bytes after off that are one piece (a whole prefix,
 * or body bytes), and *ev tells what the piece was.  Prefix bytes are fed
 * to the reader as they come (a bad size field is seen after its 4 bytes)
 * but left in the buffer until the prefix is complete, so that the caller
 * decides where the frame goes before any of it moves.  Returns 0 to wait
 * for more, or -1 on a bad size field.
 */
static ssize_t
next_piece(struct lk_kafka_reader *r, struct evbuffer *in, size_t off, int *ev)
{
    size_t avail = evbuffer_get_length(in) - off, used = 0;
    uint8_t p[LK_KAFKA_REQ_PREFIX];

    *ev = 0;
    if (lk_kafka_reader_in_body(r)) {
        size_t want = lk_kafka_reader_want(r), n = avail < want ? avail : want;
        if (n == 0)
            return 0;
        *ev = lk_kafka_reader_feed(r, NULL, n, &used);
        return (ssize_t)used;
    }
    size_t have = r->have, upto = avail < r->prefix_len ? avail : r->prefix_len;
    if (upto <= have)
        return 0;
    if (copy_at(in, off, p, upto) != 0)
        return 0; /* cannot happen: off + upto bytes are there */
    *ev = lk_kafka_reader_feed(r, p + have, upto - have, &used);
    if (*ev < 0)
        return -1;
    return (*ev & LK_KAFKA_RD_PREFIX) ? (ssize_t)r->prefix_len : 0;
}

/* Requests awaiting a response, at most: clients keep a handful in flight
 * (max.in.flight.requests.per.connection, 5 by default), and a Produce
 * with acks=0 is not queued.  A client with this many unanswered requests
 * is closed, with a log line (pump_requests): an entry is never dropped,
 * since its answer would then have no request to be read against. */
#define LK_KAFKA_MAX_PENDING 4096

/* Queues a request sent to the broker with lookout's id (fewer than
 * LK_KAFKA_MAX_PENDING are queued). */
static void
queue_push(struct kconn *k, int32_t id, int32_t corr, int16_t key, int16_t version, uint32_t size,
           int local)
{
    if (k->qlen == k->qcap) {
        size_t ncap = k->qcap != 0 ? k->qcap * 2 : 16;
        struct kreq *nq = lk_xmalloc(ncap * sizeof(*nq));
        for (size_t i = 0; i < k->qlen; i++)
            nq[i] = k->q[(k->qhead + i) % k->qcap];
        free(k->q);
        k->q = nq;
        k->qcap = ncap;
        k->qhead = 0;
    }
    k->q[(k->qhead + k->qlen) % k->qcap] =
        (struct kreq){id, corr, key, version, size, lk_now_us(), local};
    k->qlen++;
}

/* The request a response with lookout's correlation id `id` answers: one
 * at most, as no two queued share an id; the requests queued before it got
 * none.  A request lookout answers itself was never sent: the broker
 * answers nothing at or after it (none goes to the broker after it).
 * 0, or -1 when nothing matches. */
static int
queue_match(struct kconn *k, int32_t id, struct kreq *out)
{
    for (size_t i = 0; i < k->qlen; i++) {
        const struct kreq *r = &k->q[(k->qhead + i) % k->qcap];
        if (r->local)
            break;
        if (r->id == id) {
            *out = *r;
            k->qhead = (k->qhead + i + 1) % k->qcap;
            k->qlen -= i + 1;
            return 0;
        }
    }
    return -1;
}

static uint32_t
frame_cap(const struct lk_cluster *cl)
{
    return cl->max_frame_bytes > INT32_MAX ? INT32_MAX : (uint32_t)cl->max_frame_bytes;
}

/* A SaslHandshake v0 request whose prefix was just read, whole in `in`
 * (its prefix bytes still there): its mechanism must be one whose bare
 * tokens can be followed.  0, or -1 when the connection was closed. */
static int
handshake_v0(struct kconn *k, struct evbuffer *in)
{
    size_t len = 4 + (size_t)k->rq.prefix.size;
    const uint8_t *f = NULL;
    struct lk_str mech;
    char why[256], m[80];

    if (len <= LK_KAFKA_SASL_HANDSHAKE_MAX && evbuffer_get_length(in) >= len)
        f = evbuffer_pullup(in, (ev_ssize_t)len);
    if (f == NULL || lk_kafka_sasl_mechanism(f, len, &mech) != 0) {
        lk_pair_close(&k->pr, "malformed SaslHandshake v0 request; closing");
        return -1;
    }
    k->sasl_rounds = lk_kafka_sasl_bare_rounds(mech);
    if (k->sasl_rounds == 0) {
        snprintf(why, sizeof(why),
                 "SaslHandshake v0 for mechanism '%s', whose bare tokens lookout cannot follow "
                 "(v0 works with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER, v1 with any); closing",
                 lk_log_sanitize(m, mech.p, mech.len, 40));
        lk_pair_close(&k->pr, why);
        return -1;
    }
    return 0;
}

/* A client that spoke out of turn around a SaslHandshake v0. */
static const char sasl_early[] =
    "client sent more while its SASL exchange (after SaslHandshake v0) was waiting for the broker; "
    "closing";

/* Both readers to bare SASL tokens (sasl_left > 0) or back to Kafka
 * frames, between frames: the client waits for the broker's token before
 * it sends anything, so neither direction is inside a frame.  0, or -1
 * when the client broke that and the connection was closed. */
static int
sasl_switch(struct kconn *k, int left)
{
    if (k->rq.have != 0 || lk_kafka_reader_in_body(&k->rq) || k->qlen != 0) {
        lk_pair_close(&k->pr, sasl_early);
        return -1;
    }
    k->sasl_left = left;
    k->sasl_client_turn = 1;
    lk_kafka_reader_init(&k->rq, left > 0 ? LK_KAFKA_BARE : LK_KAFKA_REQUEST,
                         frame_cap(k->pr.cluster));
    lk_kafka_reader_init(&k->rs, left > 0 ? LK_KAFKA_BARE : LK_KAFKA_RESPONSE,
                         frame_cap(k->pr.cluster));
    return 0;
}

/*
 * Whether the broker answers the Produce request whose prefix was just read
 * at offset off of in: 1, or 0 for acks=0 (Kafka never answers those), or
 * -2 to wait for more of it.  A version whose layout lookout does not know
 * or a head it cannot read counts as answered, never guessed (KAFKA-21160):
 * its entry waits, and since the ids are lookout's own, a later answer
 * still names its own request and passes it.
 */
static int
produce_answered(struct kconn *k, struct evbuffer *in, size_t off)
{
    size_t frame = 4 + (size_t)k->rq.prefix.size, avail = evbuffer_get_length(in) - off;
    size_t lim = frame < LK_KAFKA_PRODUCE_HEAD_MAX ? frame : LK_KAFKA_PRODUCE_HEAD_MAX;
    size_t have = avail < lim ? avail : lim;
    const uint8_t *h;
    int16_t acks = 1;
    int r;

    /* read again once it has grown enough */
    if (!lk_kafka_produce_head_due(k->produce_tried, have, lim))
        return -2;
    h = in_first_chain(in, off, have); /* most often: read in place */
    if (h != NULL) {
        r = lk_kafka_produce_acks(h, have, &acks);
    } else {
        uint8_t head[512]; /* enough but for long client or transactional ids */
        size_t n = have < sizeof(head) ? have : sizeof(head);
        r = copy_at(in, off, head, n) == 0 ? lk_kafka_produce_acks(head, n, &acks) : -1;
        if (r == -2 && n < have) {
            uint8_t *big = lk_xmalloc(have);
            r = copy_at(in, off, big, have) == 0 ? lk_kafka_produce_acks(big, have, &acks) : -1;
            free(big);
        }
    }
    k->produce_tried = r == -2 && have < lim ? have : 0;
    if (r == -2)
        return have < lim ? -2 : 1;
    return r != 0 || acks != 0;
}

/* A request frame whose size field is out of range ends the connection. */
static void
close_bad_size(struct kconn *k, int32_t size)
{
    char why[128];

    snprintf(why, sizeof(why), "request frame of %d bytes (%s); closing", size,
             size < 8 ? "shorter than its header" : "over max_frame_bytes");
    lk_pair_close(&k->pr, why);
}

/* Client to broker: forwards frames as they come, reading only each one's
 * prefix.  Before the broker is connected, input waits; it is dialled
 * when the first request prefix has come. */
/* Draining, between two requests from the client: no request goes to
 * the broker from here on. */
static int
at_boundary(const struct kconn *k)
{
    return k->pr.draining && k->sasl_left == 0 && !k->head_wait &&
           !lk_kafka_reader_in_body(&k->rq);
}

/* How long a draining connection that was told REBOOTSTRAP_REQUIRED waits,
 * once nothing is owed, for its client to leave first (answer_local). */
#define LK_KAFKA_REBOOTSTRAP_LINGER_MS 2000

static void drain_check(struct kconn *k);

static void
linger_done(evutil_socket_t fd, short what, void *arg)
{
    struct kconn *k = arg;

    (void)fd;
    (void)what;
    k->lingered = 1;
    drain_check(k);
}

/*
 * Draining: closes once no request awaits its response (and no response
 * is part-way to the client).  A connection that never reached its
 * broker closes at once.  A Produce with acks=0 is not waited for; one
 * whose Acks lookout could not read is, and if it had acks=0 its entry goes
 * only when a later response passes it, so such a connection may stay
 * until drain_timeout.  One whose client was told REBOOTSTRAP_REQUIRED
 * waits up to LK_KAFKA_REBOOTSTRAP_LINGER_MS more for the client to close
 * it (client_gone): a client that honours it reads the answer, bootstraps
 * again elsewhere and leaves, where lookout closing first would show it a
 * broker down on top, with its own consequences (librdkafka 2.15 may then
 * never bootstrap again: 124-kafka-rebootstrap.t).
 */
static void
drain_check(struct kconn *k)
{
    if (!lk_pair_drain_due(&k->pr, k->qlen != 0 || k->holding || k->streaming ||
                                       k->sasl_left != 0 || !at_boundary(k) ||
                                       lk_kafka_reader_in_body(&k->rs) || k->rs.have != 0))
        return;
    if (k->rebootstrap_logged && !k->lingered) {
        if (k->linger_ev == NULL) {
            struct timeval tv = {LK_KAFKA_REBOOTSTRAP_LINGER_MS / 1000,
                                 (LK_KAFKA_REBOOTSTRAP_LINGER_MS % 1000) * 1000};
            k->linger_ev = evtimer_new(k->pr.c->w->base, linger_done, k);
            evtimer_add(k->linger_ev, &tv);
        }
        return;
    }
    lk_pair_close_drained(&k->pr);
}

/* Draining, at a request boundary: what becomes of the client's next
 * request, whose prefix would start at offset off of in. */
enum drain_next {
    NEXT_STOP = 0, /* not read: it goes on the client's next connection */
    NEXT_WAIT,     /* its prefix is not all there yet: read on, to see */
    NEXT_LOCAL,    /* a Metadata lookout answers itself (answer_local) */
};

static enum drain_next
drain_next(struct kconn *k, struct evbuffer *in, size_t off)
{
    struct lk_kafka_reader r = k->rq; /* a copy: the prefix is read again */
    int ev;

    if (k->sasl_v0_asked)
        return NEXT_STOP;
    ssize_t n = next_piece(&r, in, off, &ev);
    if (n == 0)
        return NEXT_WAIT;
    if (n > 0 && r.prefix.api_key == LK_KAFKA_METADATA &&
        lk_kafka_rebootstrap_version(r.prefix.api_version))
        return NEXT_LOCAL;
    return NEXT_STOP;
}

static void exchange_done(struct kconn *k, uint64_t bytes_out);

/*
 * KIP-1102 while draining: the Metadata requests lookout took for itself
 * (drain_next) are answered REBOOTSTRAP_REQUIRED, so that the client goes
 * back to its bootstrap.servers (another lookout) rather than to this
 * one's broker addresses, which stop answering when it exits.  Answered
 * here, not by the broker: the broker is not asked and not waited for,
 * and its answer would name this lookout's addresses.  Kafka clients read
 * answers in request order, so an answer goes out only when it heads the
 * queue and no broker answer is part-way to the client: the requests the
 * broker has still to answer were all queued before it.
 */
static void
answer_local(struct kconn *k)
{
    struct evbuffer *out = bufferevent_get_output(k->pr.c->bev);

    while (k->qlen != 0 && k->q[k->qhead].local && !k->holding && !k->streaming &&
           k->rs.have == 0 && !lk_kafka_reader_in_body(&k->rs) && k->sasl_left == 0) {
        uint8_t a[LK_KAFKA_REBOOTSTRAP_LEN];
        k->cur = k->q[k->qhead];
        k->qhead = (k->qhead + 1) % k->qcap;
        k->qlen--;
        size_t n = lk_kafka_rebootstrap_answer(k->cur.version, k->cur.corr, a);
        evbuffer_add(out, a, n);
        if (!k->rebootstrap_logged)
            lk_log(LK_INFO, k->pr.c,
                   "%s: Metadata v%d (correlation id %d) answered REBOOTSTRAP_REQUIRED "
                   "(KIP-1102): the client bootstraps again (once per connection)",
                   k->pr.c->aged ? "max_connection_age" : "stopping", k->cur.version, k->cur.corr);
        k->rebootstrap_logged = 1;
        k->cur_head_us = k->cur.t_us; /* no broker: no upstream time */
        exchange_done(k, n);
    }
}

static void
pump_requests(struct lk_pair *pr)
{
    struct kconn *k = (struct kconn *)pr;
    struct evbuffer *in = bufferevent_get_input(k->pr.c->bev);

    if (k->pr.dead)
        return;
    if (k->pr.up == NULL) {
        /* The broker is dialled once a whole request prefix with a sane
         * size has come, so that junk and port scans never reach it.  The
         * prefix is read by a copy of the reader: it is read again once
         * the broker is there. */
        struct lk_kafka_reader r = k->rq;
        int ev;
        ssize_t n = next_piece(&r, in, 0, &ev);
        if (n < 0)
            close_bad_size(k, r.prefix.size);
        else if (n > 0)
            lk_pair_connect(&k->pr);
        return;
    }
    if (!k->pr.connected) { /* input waits, up to a point */
        if (evbuffer_get_length(in) > LK_PAIR_HIGH)
            lk_io_disable(&k->pr.c->io, EV_READ);
        return;
    }
    struct evbuffer *out = bufferevent_get_output(k->pr.up->bev);
    size_t ready = 0; /* whole pieces at the start of in, to forward */
    int stop = 0, local = 0;
    for (;;) {
        if (at_boundary(k)) {
            /* Stopping: the request under way goes whole, no new one
             * starts; the client sends it again on its next connection.
             * But for a Metadata lookout answers itself (KIP-1102). */
            enum drain_next next = drain_next(k, in, ready);
            if (next != NEXT_LOCAL) {
                stop = next == NEXT_STOP;
                break;
            }
            local = 1;
        }
        if (k->sasl_v0_asked && !lk_kafka_reader_in_body(&k->rq) &&
            evbuffer_get_length(in) > ready) {
            /* Its answer decides how the broker reads what follows (bare
             * tokens or Kafka frames): nothing goes before it is known. */
            evbuffer_remove_buffer(in, out, ready);
            lk_pair_close(&k->pr, sasl_early);
            return;
        }
        int ev = k->head_wait; /* set only when ready is 0: the prefix is at the start */
        ssize_t n = ev != 0 ? (ssize_t)k->rq.prefix_len : next_piece(&k->rq, in, ready, &ev);
        k->head_wait = 0;
        if (n < 0) {
            evbuffer_remove_buffer(in, out, ready);
            close_bad_size(k, k->rq.prefix.size);
            return;
        }
        if (n == 0)
            break;
        if (local || k->local_body) {
            /* A request lookout answers itself (from its prefix, at the
             * start of in: what came before it goes first): its bytes are
             * dropped as they come, and once it is whole it is queued
             * behind the requests the broker has, answered in turn. */
            if (local) {
                local = 0;
                evbuffer_remove_buffer(in, out, ready);
                ready = 0;
                k->local_req = (struct kreq){.corr = k->rq.prefix.correlation_id,
                                             .key = k->rq.prefix.api_key,
                                             .version = k->rq.prefix.api_version,
                                             .size = 4 + (uint32_t)k->rq.prefix.size,
                                             .local = 1};
                k->frames_in++;
                k->bytes_in += 4 + (uint64_t)k->rq.prefix.size;
            }
            evbuffer_drain(in, (size_t)n);
            k->local_body = !(ev & LK_KAFKA_RD_END);
            if (k->local_body)
                continue;
            if (k->qlen == LK_KAFKA_MAX_PENDING) {
                lk_pair_close(&k->pr,
                              "client has too many requests awaiting their answers; closing");
                return;
            }
            const struct kreq *r = &k->local_req;
            queue_push(k, 0, r->corr, r->key, r->version, r->size, 1);
            answer_local(k);
            continue;
        }
        if ((ev & LK_KAFKA_RD_PREFIX) && k->sasl_left == 0) { /* else a bare token */
            if (k->pr.cluster->unknown_api == LK_UNKNOWN_API_DROP &&
                !lk_kafka_api_known(k->rq.prefix.api_key)) {
                char why[128];
                snprintf(why, sizeof(why),
                         "request with api key %d, unknown (unknown_api = drop); closing",
                         k->rq.prefix.api_key);
                evbuffer_remove_buffer(in, out, ready);
                lk_pair_close(&k->pr, why);
                return;
            }
            if (k->rq.prefix.api_key == LK_KAFKA_SASL_HANDSHAKE && k->rq.prefix.api_version == 0) {
                /* Its mechanism decides what follows: it is read whole (it
                 * is small) before any of it moves, from the start of in. */
                evbuffer_remove_buffer(in, out, ready);
                ready = 0;
                size_t whole = 4 + (size_t)k->rq.prefix.size;
                if (whole <= LK_KAFKA_SASL_HANDSHAKE_MAX && evbuffer_get_length(in) < whole) {
                    k->head_wait = ev;
                    break;
                }
                if (handshake_v0(k, in) != 0)
                    return;
                k->sasl_v0_asked = 1;
            }
            int answered = 1;
            if (k->rq.prefix.api_key == LK_KAFKA_PRODUCE) {
                answered = produce_answered(k, in, ready);
                if (answered == -2) { /* its head is not all there: the prefix waits at the start */
                    evbuffer_remove_buffer(in, out, ready);
                    ready = 0;
                    k->head_wait = ev;
                    break;
                }
            }
            if (answered && k->qlen == LK_KAFKA_MAX_PENDING) {
                char why[160];
                snprintf(why, sizeof(why),
                         "client has %d requests awaiting their answers, the most lookout follows on "
                         "one connection; closing",
                         LK_KAFKA_MAX_PENDING);
                evbuffer_remove_buffer(in, out, ready);
                lk_pair_close(&k->pr, why);
                return;
            }
            /* The broker gets lookout's id; the client's comes back with the answer. */
            int32_t id = (int32_t)k->next_id++;
            put32_at(in, ready + 8, (uint32_t)id);
            if (answered)
                queue_push(k, id, k->rq.prefix.correlation_id, k->rq.prefix.api_key,
                           k->rq.prefix.api_version, 4 + (uint32_t)k->rq.prefix.size, 0);
            k->frames_in++;
            k->bytes_in += 4 + (uint64_t)k->rq.prefix.size;
        } else if (ev & LK_KAFKA_RD_PREFIX) { /* a bare SASL token */
            if (!k->sasl_client_turn) {
                evbuffer_remove_buffer(in, out, ready);
                lk_pair_close(&k->pr, "client sent a SASL token before the broker answered its last "
                               "(after SaslHandshake v0); closing");
                return;
            }
            k->sasl_client_turn = 0;
        }
        ready += (size_t)n;
    }
    if (ready != 0)
        evbuffer_remove_buffer(in, out, ready);
    lk_pair_pace_client(&k->pr, stop);
    drain_check(k);
}

/* A held response (in, drained) is whole: through the filters to out.
 * 0, or -1 when a filter refused it (the leak guard's block, which has
 * said why): nothing of it went out, and the connection is to close. */
static int
filter_response(struct kconn *k, struct evbuffer *in, struct evbuffer *out)
{
    enum lk_flt_verdict v;
    struct lk_xchg x;

    lk_pair_xchg_begin(&k->pr, &x, LK_PROTO_KAFKA, NULL);
    v = lk_flt_run_frame(&x, k->cur.key, k->cur.version, in, out);
    /* The nodes broker.pattern placed: served from now on, bound before
     * this response leaves. */
    for (size_t i = 0; i < x.nlearned && x.broker != NULL; i++)
        lk_workers_learn_node(k->pr.c->w, k->pr.c->rt, x.cluster, x.broker, x.learned[i].node_id,
                              x.learned[i].host, x.learned[i].port);
    lk_pair_xchg_end(&x, &k->cur_rec);
    evbuffer_drain(in, evbuffer_get_length(in));
    return v == LK_FLT_CONTINUE ? 0 : -1;
}

/*
 * A streamed answer's tail is whole (in k->held): the bytes after
 * Responses, for Fetch the top-level tagged fields with NodeEndpoints
 * (tag 0), for ShareFetch NodeEndpoints and those fields.  The size prefix
 * and every record have left already, so the tail must leave exactly as
 * long as it came.  It goes through the filters as the answer they know,
 * made whole by a small head with no records (lk_kafka_fstream_head), so
 * that the kafka filter rewrites its NodeEndpoints as in any held frame
 * (its logs, counts, broker.pattern learning), and then
 * lk_kafka_tail_fit pads the rewritten tail to the original length with
 * unknown tagged fields, or drops the endpoints when they no longer fit
 * (the client then asks Metadata, which is rewritten).  0, or -1 having
 * closed: a tail that does not decode cannot be fitted, and passing it
 * as it came could hand out internal addresses.
 */
static int
stream_tail(struct kconn *k, struct evbuffer *out)
{
    size_t tlen = evbuffer_get_length(k->held);
    uint8_t head[LK_KAFKA_FSTREAM_HEAD_MAX];
    size_t hn =
        lk_kafka_fstream_head(k->cur.key, k->cur.version, k->cur.corr, tlen, head);
    struct evbuffer *whole = evbuffer_new(), *rew = evbuffer_new();
    enum lk_kafka_fit fit = LK_KAFKA_FIT_BAD;

    if (hn != 0) {
        evbuffer_add(whole, head, hn);
        evbuffer_add_buffer(whole, k->held);
        if (filter_response(k, whole, rew) != 0) {
            /* The leak guard's block, which has said why: the records
             * have gone, the tail with the address must not. */
            evbuffer_free(whole);
            evbuffer_free(rew);
            evbuffer_drain(k->held, evbuffer_get_length(k->held));
            k->cur_rec.refused = 1;
            exchange_done(k, 4 + (uint64_t)k->rs.prefix.size - tlen);
            lk_pair_close(&k->pr, "a filter refused the broker's response; closing");
            return -1;
        }
        size_t rlen = evbuffer_get_length(rew);
        const uint8_t *r = evbuffer_pullup(rew, -1);
        if (rlen >= hn)
            fit = lk_kafka_tail_fit(k->cur.key, r + hn, rlen - hn, tlen, out);
    }
    evbuffer_free(whole);
    evbuffer_free(rew);
    evbuffer_drain(k->held, evbuffer_get_length(k->held));
    if (fit == LK_KAFKA_FIT_BAD) {
        char why[200];
        snprintf(why, sizeof(why),
                 "broker's api %d v%d answer ends in %zu bytes that do not decode as its "
                 "NodeEndpoints and tagged fields (correlation id %d); closing",
                 k->cur.key, k->cur.version, tlen, k->cur.corr);
        lk_pair_close(&k->pr, why);
        return -1;
    }
    if (fit == LK_KAFKA_FIT_DROPPED)
        lk_log(LK_DEBUG, k->pr.c,
               "api %d v%d answer: the rewritten NodeEndpoints do not fit the broker's %zu bytes; "
               "dropped (the client asks Metadata)",
               k->cur.key, k->cur.version, tlen);
    return 0;
}

/*
 * The n bytes at offset *ready of in are the next of a streamed answer.
 * Bytes before the tail join *ready (they go on as they are, moved later
 * with the rest); the parser is shown only the bytes it must read, in
 * small copies, and told of the records' by count alone.  Tail bytes are
 * held.  Returns 1 when the answer has ended, 0 before, -1 having closed.
 */
static int
stream_piece(struct kconn *k, struct evbuffer *in, struct evbuffer *out, size_t *ready, size_t n)
{
    int r = 0;

    while (n != 0) {
        uint8_t p[64];
        size_t m, used;
        size_t sk = lk_kafka_fstream_skippable(&k->fs);
        if (k->fs.tail) {
            m = n;
            r = lk_kafka_fstream_feed(&k->fs, NULL, m, &used);
        } else if (sk != 0) {
            m = n < sk ? n : sk;
            r = lk_kafka_fstream_feed(&k->fs, NULL, m, &used);
        } else {
            struct evbuffer_ptr at;
            m = n < sizeof(p) ? n : sizeof(p);
            if (evbuffer_ptr_set(in, &at, *ready, EVBUFFER_PTR_SET) != 0 ||
                evbuffer_copyout_from(in, &at, p, m) != (ev_ssize_t)m)
                r = -1; /* cannot happen: the bytes are there */
            else
                r = lk_kafka_fstream_feed(&k->fs, p, m, &used);
        }
        if (r < 0) {
            char why[200];
            evbuffer_remove_buffer(in, out, *ready);
            *ready = 0;
            snprintf(why, sizeof(why),
                     "broker's api %d v%d answer (correlation id %d) does not follow its layout; "
                     "closing",
                     k->cur.key, k->cur.version, k->cur.corr);
            lk_pair_close(&k->pr, why);
            return -1;
        }
        *ready += used;
        if (used < m) { /* the tail: what came before it goes first */
            evbuffer_remove_buffer(in, out, *ready);
            *ready = 0;
            hold_bytes(k, in, m - used);
        }
        n -= m;
    }
    return r;
}
/*
 * An answer that carries records in a version the codec cannot read
 * (Produce past v13, Fetch past v18; ApiVersions is clamped below them, so
 * only a client that ignores it asks): its endpoints, if any, cannot be
 * checked without holding the whole answer, and then could not be read
 * either.  So it is never held.  With leak_guard = block the connection
 * closes before any of it moves; otherwise it streams as it is, logged
 * once per connection.  0, or -1 having closed.
 */
static int
records_unchecked(struct kconn *k)
{
    char why[256];

    snprintf(why, sizeof(why),
             "api %d v%d answer from broker %s carries records in a version lookout cannot read: "
             "its broker addresses cannot be checked",
             k->cur.key, k->cur.version, k->pr.broker->name);
    if (k->pr.cluster->leak_guard == LK_LEAK_BLOCK) {
        char line[320];
        snprintf(line, sizeof(line), "%s; closing (leak_guard = block)", why);
        k->cur_rec.refused = 1;
        exchange_done(k, 0);
        lk_pair_close(&k->pr, line);
        return -1;
    }
    if (!k->records_warned)
        lk_log(LK_WARN, k->pr.c, "%s; passed (once per connection)", why);
    k->records_warned = 1;
    return 0;
}

/* The broker's answer to a SaslHandshake v0, held whole: forwarded, and
 * when it accepts the mechanism (ErrorCode 0), bare tokens follow. */
static void
handshake_v0_answered(struct kconn *k, struct evbuffer *out)
{
    uint8_t p[LK_KAFKA_RES_PREFIX + 2];
    int accepted = evbuffer_copyout(k->held, p, sizeof(p)) == (ev_ssize_t)sizeof(p) &&
                   p[LK_KAFKA_RES_PREFIX] == 0 && p[LK_KAFKA_RES_PREFIX + 1] == 0;

    evbuffer_add_buffer(out, k->held);
    k->sasl_v0_asked = 0;
    if (accepted)
        sasl_switch(k, k->sasl_rounds);
}

/* The response to k->cur is out, bytes_out of it: its exchange ends. */
static void
exchange_done(struct kconn *k, uint64_t bytes_out)
{
    struct lk_xrec *r = &k->cur_rec;
    long long now = lk_now_us();

    r->c = k->pr.c;
    r->cluster = k->pr.cluster;
    r->broker = k->pr.broker->name;
    r->proto = LK_SP_KAFKA;
    r->api_key = k->cur.key;
    r->api_version = k->cur.version;
    r->bytes_in = k->cur.size;
    r->bytes_out = bytes_out;
    r->dur_us = now - k->cur.t_us;
    r->upstream_us = k->cur_head_us - k->cur.t_us;
    lk_xrec_done(r);
    memset(r, 0, sizeof(*r));
    k->frames_out++;
    k->bytes_out += bytes_out;
}

/* Broker to client: each response frame is matched to its request, and
 * streamed, or held whole when the filters may change it, or streamed
 * with its tail held (Fetch v16+, ShareFetch).  What is held counts
 * against the worker's max_held_bytes; over it, the broker is not read
 * (lk_hold.h) until the budget has room or this connection owns the
 * excess. */
static void
pump_responses(struct lk_pair *pr)
{
    struct kconn *k = (struct kconn *)pr;
    struct evbuffer *in = bufferevent_get_input(k->pr.up->bev);
    struct evbuffer *out = bufferevent_get_output(k->pr.c->bev);

    size_t ready = 0; /* whole pieces at the start of in, for the client as they are */
    while (!k->pr.dead) {
        int ev;
        /* Between answers: those lookout owes the client itself, in turn
         * after what came before them. */
        if (k->qlen != 0 && k->q[k->qhead].local && !k->holding && !k->streaming &&
            k->rs.have == 0 && !lk_kafka_reader_in_body(&k->rs)) {
            evbuffer_remove_buffer(in, out, ready);
            ready = 0;
            answer_local(k);
        }
        /* A client that reads slowly: no new answer is begun for it (the
         * rest waits in the input, and the broker is not read). */
        if (!k->holding && !k->streaming && k->sasl_left == 0 && k->rs.have == 0 &&
            !lk_kafka_reader_in_body(&k->rs) && evbuffer_get_length(out) + ready > LK_PAIR_HIGH)
            break;
        if (holds(k) && !lk_hold_may_read(hold_of(k), &k->pr.hw, k->pr.c->conf->max_held_bytes)) {
            k->pr.paused = 1; /* lk_pair's hold_resume comes back here */
            break;
        }
        ssize_t n = next_piece(&k->rs, in, ready, &ev);
        if (n < 0) {
            evbuffer_remove_buffer(in, out, ready);
            lk_pair_close(&k->pr, "broker sent a response frame of impossible size; closing");
            return;
        }
        if (n == 0)
            break;
        if (k->sasl_left > 0) { /* a bare SASL token: no header, no request to match */
            ready += (size_t)n;
            if ((ev & LK_KAFKA_RD_END) && --k->sasl_left == 0)
                sasl_switch(k, 0);
            else if (ev & LK_KAFKA_RD_END)
                k->sasl_client_turn = 1; /* its next token may come */
            continue;
        }
        if (ev & LK_KAFKA_RD_PREFIX) {
            int32_t id = k->rs.prefix.correlation_id;
            if (queue_match(k, id, &k->cur) != 0) {
                char why[128];
                snprintf(why, sizeof(why),
                         "broker answered correlation id %d, which no request has; closing", id);
                evbuffer_remove_buffer(in, out, ready);
                lk_pair_close(&k->pr, why);
                return;
            }
            put32_at(in, ready + 4, (uint32_t)k->cur.corr); /* the client's own id back */
            k->cur_head_us = lk_now_us();
            int filtered = k->pr.cluster->nfilters != 0;
            if (filtered && k->pr.cluster->leak_guard != LK_LEAK_OFF &&
                lk_kafka_response_addrs(k->cur.key, k->cur.version) == LK_KAFKA_ADDRS_RECORDS) {
                evbuffer_remove_buffer(in, out, ready);
                ready = 0;
                if (records_unchecked(k) != 0)
                    return;
            }
            k->streaming = filtered && lk_kafka_stream_wanted(k->cur.key, k->cur.version);
            k->holding = (!k->streaming && filtered &&
                          lk_kafka_response_wanted(k->cur.key, k->cur.version,
                                                   k->pr.cluster->leak_guard == LK_LEAK_BLOCK)) ||
                         (k->cur.key == LK_KAFKA_SASL_HANDSHAKE && k->cur.version == 0);
            if (k->streaming) {
                /* The prefix goes on as it came: the answer keeps its size. */
                lk_kafka_fstream_init(&k->fs, k->cur.key, k->cur.version, k->rs.prefix.size);
                ready += (size_t)n;
                if (!(ev & LK_KAFKA_RD_END))
                    continue;
                n = 0; /* a frame of its correlation id alone: its tail is empty */
            }
        }
        if (k->streaming) {
            int r = n != 0 ? stream_piece(k, in, out, &ready, (size_t)n) : 0;
            if (r < 0)
                return;
            if (ev & LK_KAFKA_RD_END) {
                k->streaming = 0;
                evbuffer_remove_buffer(in, out, ready);
                ready = 0;
                if (k->held == NULL)
                    k->held = evbuffer_new();
                int rc = stream_tail(k, out);
                lk_pair_hold_release(&k->pr);
                if (rc != 0)
                    return;
                exchange_done(k, 4 + (uint64_t)k->rs.prefix.size);
            }
            continue;
        }
        if (!k->holding) {
            ready += (size_t)n;
            if (ev & LK_KAFKA_RD_END)
                exchange_done(k, 4 + (uint64_t)k->rs.prefix.size);
            continue;
        }
        /* A held frame: what came before it goes first. */
        evbuffer_remove_buffer(in, out, ready);
        ready = 0;
        hold_bytes(k, in, (size_t)n);
        if (ev & LK_KAFKA_RD_END) {
            size_t before = evbuffer_get_length(out);
            k->holding = 0;
            int refused = 0;
            if (k->cur.key == LK_KAFKA_SASL_HANDSHAKE && k->cur.version == 0)
                handshake_v0_answered(k, out);
            else
                refused = filter_response(k, k->held, out) != 0;
            lk_pair_hold_release(&k->pr);
            k->cur_rec.refused = refused;
            exchange_done(k, evbuffer_get_length(out) - before);
            if (refused) {
                /* The client must not get it, nor the answers after it
                 * (they would be matched to the wrong requests). */
                lk_pair_close(&k->pr, "a filter refused the broker's response; closing");
                return;
            }
        }
    }
    if (ready != 0)
        evbuffer_remove_buffer(in, out, ready);
    if (k->pr.dead)
        return;
    /* Streamed answers too move at the client's pace, between answers;
     * one held goes on to its end (the loop above begins no other). */
    lk_pair_pace_broker(&k->pr, holds(k));
    drain_check(k);
}

/*
 * The client closed or reset its connection.  Between frames it is simply
 * done; a frame it cut short (a request, or a bare SASL token after a
 * SaslHandshake v0) is bad input like a bad size field, and is logged
 * with how far it got.
 */
static void
client_gone(struct lk_pair *pr)
{
    struct kconn *k = (struct kconn *)pr;
    struct evbuffer *in = bufferevent_get_input(k->pr.c->bev);
    size_t rest = evbuffer_get_length(in);
    struct lk_kafka_reader r = k->rq;
    const char *what = k->sasl_left > 0 ? "SASL token" : "request frame";
    char why[192];

    if (k->head_wait) /* a whole prefix, still in the buffer */
        rest -= r.prefix_len;
    else if (!lk_kafka_reader_in_body(&r) && !r.failed && rest > 0) {
        /* A prefix stays in the buffer until it is whole, and so does all
         * input while the broker is not connected yet: read it again. */
        uint8_t p[LK_KAFKA_REQ_PREFIX];
        size_t n = rest < k->rq.prefix_len ? rest : k->rq.prefix_len, used;
        lk_kafka_reader_init(&r, k->sasl_left > 0 ? LK_KAFKA_BARE : LK_KAFKA_REQUEST,
                             k->rq.max_size);
        evbuffer_copyout(in, p, n);
        int ev = lk_kafka_reader_feed(&r, p, n, &used);
        if (ev < 0) {
            close_bad_size(k, r.prefix.size);
            return;
        }
        if (ev == 0) {
            snprintf(why, sizeof(why),
                     "client closed the connection %zu bytes into a %s's %d-byte prefix", n, what,
                     r.prefix_len);
            lk_pair_close(&k->pr, why);
            return;
        }
        rest -= n;
    }
    if (!lk_kafka_reader_in_body(&r) || r.left <= rest) {
        lk_pair_close(&k->pr, NULL);
        return;
    }
    if (k->sasl_left > 0)
        snprintf(
            why, sizeof(why),
            "client closed the connection %zu bytes short of the end of a SASL token of %d bytes",
            r.left - rest, r.prefix.size);
    else
        snprintf(why, sizeof(why),
                 "client closed the connection %zu bytes short of the end of a request frame of "
                 "%d bytes (api key %d v%d, correlation id %d)",
                 r.left - rest, r.prefix.size, r.prefix.api_key, r.prefix.api_version,
                 r.prefix.correlation_id);
    lk_pair_close(&k->pr, why);
}

/*
 * A broker.pattern address: the node id is in the SNI name or the bound
 * port, and the node is one the map lacks, learned from a broker's
 * response (lk_dyn.h), or a known one whose own address follows the
 * pattern.  0, or -1 having closed.
 */
static int
pattern_broker(struct kconn *k, const struct lk_vhost *vh)
{
    struct lk_conn *c = k->pr.c;
    int32_t id;
    char why[256];

    if (!(c->sni != NULL && lk_kafka_pattern_match(vh->pattern, lk_str_c(c->sni), vh->port, &id)) &&
        !lk_kafka_pattern_match(vh->pattern, lk_str_c(vh->host), vh->port, &id)) {
        lk_pair_close(&k->pr, "broker.pattern address reached without a TLS SNI name that names a node; "
                       "closing");
        return -1;
    }
    k->pr.broker = lk_cluster_find_node(k->pr.cluster, id);
    if (k->pr.broker == NULL)
        k->pr.broker = lk_dyn_find_node(c->rt->dyn, k->pr.cluster, id);
    if (k->pr.broker == NULL) {
        snprintf(why, sizeof(why),
                 "node %ld (broker.pattern) has not been named by any broker yet, so lookout does "
                 "not know where it is; closing",
                 (long)id);
        lk_pair_close(&k->pr, why);
        return -1;
    }
    return 0;
}

static const struct lk_pair_ops kafka_pair = {
    .family = LK_SCHEME_KAFKA,
    .requests = pump_requests,
    .responses = pump_responses,
    .client_gone = client_gone,
};

static void
start(struct lk_conn *c)
{
    struct kconn *k = lk_palloc(&c->pool, sizeof(*k));
    const struct lk_vhost *vh = lk_route(c->bind, lk_str_c(c->sni), LK_STR_NULL, 0);
    /* (vh NULL is closed at once below) */
    /* timeout.idle of the cluster's: Kafka clients keep connections for
     * minutes between requests (connections.max.idle.ms). */
    struct timeval idle =
        lk_pair_tv((vh != NULL ? vh->cluster : c->bind->vhosts[0].cluster)->idle_ms);

    c->proto = k;
    lk_pair_start(&k->pr, &kafka_pair, c, idle);
    lk_pool_cleanup_add(&c->pool, kconn_cleanup, k);
    if (vh == NULL) {
        lk_pair_no_route(&k->pr, "Kafka");
        return;
    }
    k->pr.cluster = vh->cluster;
    lk_kafka_reader_init(&k->rq, LK_KAFKA_REQUEST, frame_cap(k->pr.cluster));
    lk_kafka_reader_init(&k->rs, LK_KAFKA_RESPONSE, frame_cap(k->pr.cluster));
    if (vh->pattern != NULL) {
        if (pattern_broker(k, vh) != 0)
            return;
    } else {
        lk_pair_route(&k->pr, vh);
    }
    if (k->pr.broker == NULL) {
        lk_pair_close(&k->pr, "the cluster has no brokers; closing");
        return;
    }
    c->action = "waiting for a request";
    lk_io_enable(&c->io, EV_READ);
}

static void
drain(struct lk_conn *c)
{
    struct kconn *k = c->proto;

    k->pr.draining = 1;
    if (k->pr.connected && !k->pr.dead)
        pump_requests(&k->pr); /* from here on, reads only what lookout answers itself */
    else if (at_boundary(k))
        lk_io_disable(&c->io, EV_READ);
    drain_check(k);
}

const struct lk_proto_ops lk_proto_kafka = {
    .proto = LK_PROTO_KAFKA,
    .name = "kafka",
    .start = start,
    .drain = drain,
};
