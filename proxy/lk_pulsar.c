/*
 * The Pulsar binary protocol module.  A client connection is paired with one
 * connection to one broker's internal pulsar (or pulsar+ssl) address: the
 * broker whose lookup-listener address the client reached, or, on the
 * serviceUrl, any healthy broker, or the one the client's CONNECT names in
 * proxy_to_broker_url, "host:port" or "pulsar://host:port" (pulsar_routing
 * = service, as through the Pulsar Proxy), when that is a mapped broker's
 * address; anything else is refused, never dialled.  The broker is chosen
 * once the CONNECT, always a client's first frame, has arrived.
 *
 * Frames are [totalSize][commandSize][BaseCommand][payload]; lookout reads
 * each frame's sizes and its command's type (from the whole command:
 * lk_pulsar_command_type, which refuses a command that gives its type
 * twice) and forwards everything else as it comes, payload frames (SEND,
 * MESSAGE) without a copy of their own.  Two kinds are held whole:
 *  - from the client, LOOKUP: its advertised_listener_name picks the
 *    listener that the answer is rewritten into (CONTRACT §3: when the
 *    client may choose it, else the lookup listener's), remembered by
 *    request_id, and is removed before the broker sees it (a broker fails
 *    a lookup for a listener it does not have);
 *  - from the broker, LOOKUP_RESPONSE, CLOSE_PRODUCER, CLOSE_CONSUMER,
 *    TOPIC_MIGRATED and Pulsar 5.0's SCALABLE_TOPIC_UPDATE and
 *    WATCH_TC_ASSIGNMENTS_UPDATE (PIP-460/468, PIP-473: found on
 *    apache/pulsar's master, see proxy/pulsar.proto): through the filters
 *    (filters/flt_pulsar.c), and with
 *    the leak guard on, the answers with an error text (ERROR and its
 *    kind) and any command of a type lookout does not know
 *    (lk_pulsar_type_addrs), which the guard reads.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_conn.h"
#include "lk_io.h"
#include "lk_location.h"
#include "lk_log.h"
#include "lk_pair.h"
#include "lk_pulsar.h"
#include "lk_pulsar_codec.h"
#include "lk_route.h"
#include "lk_stats.h"
#include "lk_worker.h"
#include "lk_xchg.h"
#include "lk_xrec.h"

/* Lookups awaiting their answer, remembered per connection at most; a
 * client keeps far fewer in flight (maxLookupRequest, 50000 per client in
 * Java, but per connection a handful), and past this the oldest goes. */
#define LK_PULSAR_MAX_LOOKUPS 1024

/* One direction's frame stream: where the current frame is. */
struct pstream {
    uint64_t left;  /* bytes of the current streamed frame still to move */
    uint32_t total; /* the frame's totalSize, once its head is read */
    uint32_t cmd_size;
    int type; /* its command's type; -1 until known */
    /* The head above belongs to a held frame that waits for the rest of
     * its bytes: it is not read again (a command that is not in
     * command_type_fast's shape takes a whole walk to type). */
    unsigned waiting : 1;
    uint64_t frames, bytes; /* for the connection's closing line */
};

struct lookup {
    uint64_t request_id;
    const char *listener; /* the map's name, or NULL: the cluster's */
    long long t_us;       /* when it came, for the access log */
    uint32_t size;        /* its frame's */
};

struct pconn {
    struct lk_pair pr; /* first: the pair's callbacks get a pconn */
    const struct lk_vhost *vh;
    struct pstream rq, rs;
    struct lookup *lookups; /* a ring */
    size_t lhead, llen;
    const char *listener; /* the last one a LOOKUP named: for CLOSE_* and TOPIC_MIGRATED */
    struct evbuffer *held;
};

/* What of a frame from the client may wait in its input before it counts
 * against the worker's budget: commands are small (a few hundred bytes;
 * a schema or auth data may be larger), so the common ones never ask. */
#define LK_PULSAR_WAIT_FREE (64 * 1024)

/* have bytes of a client's frame wait for the rest of its command (or of
 * the frame, when it is held): past LK_PULSAR_WAIT_FREE, counted as the
 * broker's held frames are; the client is read while the budget allows
 * (p->pr.cpaused, see pump_requests). */
static void
client_wait(struct pconn *p, size_t have)
{
    if (have > LK_PULSAR_WAIT_FREE)
        lk_pair_client_wait(&p->pr, have);
    else
        lk_pair_client_release(&p->pr);
}

static void
pconn_cleanup(void *arg)
{
    struct pconn *p = arg;

    if (p->rq.frames != 0)
        lk_pair_log_summary(&p->pr, LK_SP_PULSAR, p->rq.bytes, p->rs.bytes, p->rq.frames,
                            p->rs.frames);
    free(p->lookups);
    if (p->held != NULL)
        evbuffer_free(p->held);
    lk_pair_hold_release(&p->pr);
    lk_pair_client_release(&p->pr);
}

static uint32_t
frame_cap(const struct lk_cluster *cl)
{
    return cl->max_frame_bytes > UINT32_MAX - 4 ? UINT32_MAX - 4 : (uint32_t)cl->max_frame_bytes;
}

/* The extents of an input pump_frames sees at once; past them, what came
 * before moves on and the rest is looked at again. */
#define LK_PULSAR_VIEW 16

/* What pump_frames sees of in: up to LK_PULSAR_VIEW extents from its
 * start, the cursor at the first; *seen: the bytes they hold. */
static void
view(struct evbuffer *in, struct evbuffer_iovec *v, struct lk_pulsar_cursor *cur, size_t *seen)
{
    int n = evbuffer_peek(in, -1, NULL, v, LK_PULSAR_VIEW);

    *cur = (struct lk_pulsar_cursor){v, n < LK_PULSAR_VIEW ? n : LK_PULSAR_VIEW, 0, 0};
    *seen = 0;
    for (int i = 0; i < cur->nv; i++)
        *seen += v[i].iov_len;
}

static int head_refused(struct pstream *s, const struct lk_pulsar_head *h, uint32_t cap, int r,
                        char *why, size_t whylen);

/*
 * The head of the frame at cur, avail bytes from there in cur's extents
 * (the frames before it stream on, not moved yet: pump): its sizes and
 * its command's type (lk_pulsar_frame_at, which reads them in place when
 * one extent holds them).  1 when known (s->total, cmd_size, type), 0
 * when fewer than *need bytes are there, 2 when *need bytes must be made
 * contiguous first, -1 on an impossible frame or a command lookout
 * refuses (why says what).
 *
 * The type comes from the whole command, never from its first bytes: a
 * command may give its type twice, and the broker, like every protobuf
 * reader, takes the last, so a frame that starts as a PING may be a
 * LOOKUP to the broker (or, from the broker, a LOOKUP_RESPONSE to the
 * client).  Such a frame is refused.  So every frame waits until its
 * command is here (at most max_frame_bytes; a few dozen bytes for SEND
 * and MESSAGE, whose payload still streams), and is read in one place.
 */
static inline int
frame_head(struct pstream *s, const struct lk_pulsar_cursor *cur, size_t avail, uint32_t cap,
           uint8_t *copy, size_t *need, char *why, size_t whylen)
{
    struct lk_pulsar_head h;
    int r = lk_pulsar_frame_at(cur, avail, cap, copy, &h);

    *need = h.need;
    if (r == 0 || r == 2)
        return r;
    s->total = h.total;
    s->cmd_size = h.cmd_size;
    s->type = h.type;
    return r == 1 && h.type >= 0 ? 1 : head_refused(s, &h, cap, r, why, whylen);
}

/* frame_head's -1, with why saying what is wrong with the frame. */
static int
head_refused(struct pstream *s, const struct lk_pulsar_head *h, uint32_t cap, int r, char *why,
             size_t whylen)
{
    if (r < 0) {
        snprintf(why, whylen, "frame of %lu bytes with a command of %lu (%s); closing",
                 (unsigned long)s->total + 4, (unsigned long)s->cmd_size,
                 s->total > cap ? "over max_frame_bytes" : "impossible sizes");
    } else if (s->type == LK_PULSAR_TYPE_TWICE) {
        char hex[2 * 32 + 1];
        size_t n = s->cmd_size < 32 ? s->cmd_size : 32;
        for (size_t i = 0; i < n; i++)
            snprintf(hex + 2 * i, 3, "%02x", h->cmd[i]);
        snprintf(why, whylen,
                 "command that gives its type twice (%lu bytes, starting %s%s): a protobuf "
                 "reader takes the last, refused; closing",
                 (unsigned long)s->cmd_size, hex, n < s->cmd_size ? "..." : "");
    } else {
        snprintf(why, whylen, "frame whose command does not decode (%lu bytes); closing",
                 (unsigned long)s->cmd_size);
    }
    return -1;
}

/* need bytes at in's start made contiguous: 0, or -1 (why says so). */
static int
gather(struct evbuffer *in, size_t need, char *why, size_t whylen)
{
    if (evbuffer_pullup(in, (ev_ssize_t)need) != NULL)
        return 0;
    snprintf(why, whylen, "frame whose command of %lu bytes lookout had no memory for; closing",
             (unsigned long)(need - LK_PULSAR_PREFIX));
    return -1;
}

/* Whether frame_head's answer r, with avail bytes from the head in in,
 * means that need bytes must first be put together at in's start: the
 * head spans extents and is over LK_PULSAR_COPY, or lies past the view. */
static int
must_gather(int r, size_t seen, size_t len, size_t need, size_t avail)
{
    return r == 2 || (r == 0 && seen < len && need <= avail);
}

/* The head of the frame at the start of in, as frame_head reads it, made
 * contiguous when it must be: 1, 0 to wait, -1 (why says what). */
static int
first_head(struct pstream *s, struct evbuffer *in, uint32_t cap, char *why, size_t whylen)
{
    struct evbuffer_iovec v[LK_PULSAR_VIEW];
    struct lk_pulsar_cursor cur;
    uint8_t copy[LK_PULSAR_COPY];
    size_t seen, len = evbuffer_get_length(in), need;

    for (;;) {
        view(in, v, &cur, &seen);
        int r = frame_head(s, &cur, seen, cap, copy, &need, why, whylen);
        if (!must_gather(r, seen, len, need, len))
            return r;
        if (gather(in, need, why, whylen) != 0)
            return -1;
    }
}

static void
lookup_push(struct pconn *p, uint64_t id, const char *listener, uint32_t size)
{
    if (p->lookups == NULL)
        p->lookups = lk_xcalloc(LK_PULSAR_MAX_LOOKUPS, sizeof(*p->lookups));
    if (p->llen == LK_PULSAR_MAX_LOOKUPS) {
        p->lhead = (p->lhead + 1) % LK_PULSAR_MAX_LOOKUPS;
        p->llen--;
    }
    p->lookups[(p->lhead + p->llen) % LK_PULSAR_MAX_LOOKUPS] =
        (struct lookup){id, listener, lk_now_us(), size};
    p->llen++;
}

/* The lookup with this request id (and forgets it) into *out: 0, or -1 if
 * there is none. */
static int
lookup_take(struct pconn *p, uint64_t id, struct lookup *out)
{
    for (size_t i = 0; i < p->llen; i++) {
        struct lookup *l = &p->lookups[(p->lhead + i) % LK_PULSAR_MAX_LOOKUPS];
        if (l->request_id == id) {
            *out = *l;
            /* The answers come in any order: fill the hole with the oldest. */
            *l = p->lookups[p->lhead];
            p->lhead = (p->lhead + 1) % LK_PULSAR_MAX_LOOKUPS;
            p->llen--;
            return 0;
        }
    }
    return -1;
}

/*
 * A held frame (in p->held), decoded into *c: a simple frame (no payload
 * section) whose command decodes, with the request id the type needs.  0,
 * or -1 having closed the connection: a malformed command, like a
 * malformed frame, ends the connection rather than pass unread (an answer
 * lookout cannot read could carry an internal address).
 */
static int
held_command(struct pconn *p, int from_client, struct lk_pulsar_cmd *c)
{
    size_t len = evbuffer_get_length(p->held);
    const uint8_t *fr = evbuffer_pullup(p->held, -1);
    char why[200];

    if (len == LK_PULSAR_PREFIX + (size_t)(from_client ? p->rq : p->rs).cmd_size &&
        lk_pulsar_decode(fr + LK_PULSAR_PREFIX, len - LK_PULSAR_PREFIX, c) == 0 &&
        (c->has_request_id || c->type != LK_PULSAR_LOOKUP))
        return 0;
    snprintf(why, sizeof(why),
             "%s sent a command of type %d that does not decode (%zu bytes; or it "
             "gives a field lookout reads twice); closing",
             from_client ? "client" : "broker", (from_client ? p->rq : p->rs).type, len);
    lk_pair_close(&p->pr, why);
    return -1;
}

/* A whole LOOKUP from the client (in p->held): its listener is taken and
 * remembered, and what goes on to the broker is appended to out.  0, or
 * -1 having closed. */
static int
client_lookup(struct pconn *p, struct evbuffer *out)
{
    size_t len = evbuffer_get_length(p->held);
    const uint8_t *fr;
    struct lk_pulsar_cmd c;

    if (held_command(p, 1, &c) != 0)
        return -1;
    fr = evbuffer_pullup(p->held, -1);
    const char *name = c.has_listener ? lk_client_listener(p->pr.c, p->pr.cluster, c.listener,
                                                           "LOOKUP advertised_listener_name")
                                      : NULL;
    lookup_push(p, c.request_id, name, (uint32_t)len);
    if (name != NULL)
        p->listener = name;
    if (c.has_listener) {
        struct lk_pulsar_edit e = {.proxy_through = -1, .strip_listener = 1};
        if (lk_pulsar_reencode(fr + LK_PULSAR_PREFIX, len - LK_PULSAR_PREFIX, &e, out) == 1) {
            evbuffer_drain(p->held, len);
            return 0;
        }
    }
    evbuffer_add_buffer(out, p->held);
    return 0;
}

/* A whole command from the broker that names brokers, or of a type
 * lookout does not know: through the filters; an exchange of its own (a
 * LOOKUP's, with its LOOKUP_RESPONSE).  0, or -1 having closed: a
 * command that does not decode, or one a filter refused (the leak
 * guard's block). */
static int
broker_command(struct pconn *p, int type, struct evbuffer *out)
{
    enum lk_flt_verdict v;
    const char *listener = p->listener;
    struct lk_pulsar_cmd c;
    struct lk_xchg x;
    struct lk_xrec r;
    struct lookup l;
    long long now = lk_now_us();
    size_t before = evbuffer_get_length(out);

    /* A type lookout does not know is not decoded: the guard reads its
     * bytes. */
    memset(&c, 0, sizeof(c));
    if (lk_pulsar_type_addrs(type) == LK_PULSAR_ADDRS_DECODED && held_command(p, 0, &c) != 0)
        return -1;
    memset(&r, 0, sizeof(r));
    r.command = type;
    r.upstream_us = -1;
    if (type == LK_PULSAR_LOOKUP_RESPONSE && c.has_request_id) {
        listener = NULL;
        if (lookup_take(p, c.request_id, &l) == 0) {
            listener = l.listener;
            r.command = LK_PULSAR_LOOKUP;
            r.bytes_in = l.size;
            r.dur_us = r.upstream_us = now - l.t_us;
        }
    }
    lk_pair_xchg_begin(&p->pr, &x, LK_PROTO_PULSAR, listener);
    v = lk_flt_run_pulsar(
        &x, type, lk_pulsar_type_addrs(type) == LK_PULSAR_ADDRS_DECODED ? &c : NULL, p->held, out);
    lk_pair_xchg_end(&x, &r);
    evbuffer_drain(p->held, evbuffer_get_length(p->held));
    r.c = p->pr.c;
    r.cluster = p->pr.cluster;
    r.broker = p->pr.broker->name;
    r.proto = LK_SP_PULSAR;
    r.bytes_out = evbuffer_get_length(out) - before;
    r.refused = v != LK_FLT_CONTINUE;
    lk_xrec_done(&r);
    if (v != LK_FLT_CONTINUE) {
        lk_pair_close(&p->pr, "a filter refused the broker's command; closing");
        return -1;
    }
    return 0;
}

/* Whether a held frame of this type is a simple command, nothing after the
 * command (PulsarApi.proto: only SEND and MESSAGE frames carry a payload):
 * a client's LOOKUP, a broker's command lookout decodes (held_command
 * takes no other).  The unknown types the leak guard holds may have
 * anything after. */
static int
simple_type(int from_client, int type)
{
    return from_client || lk_pulsar_type_addrs(type) == LK_PULSAR_ADDRS_DECODED;
}

/* A frame s whose command is a simple one: 0, or -1
 * when totalSize leaves room for bytes after the command (why says so). */
static int
no_payload(const struct pstream *s, char *why, size_t whylen)
{
    if ((uint64_t)s->total == 4 + (uint64_t)s->cmd_size)
        return 0;
    snprintf(why, whylen,
             "command of type %d in a frame of %lu bytes, with %lu after the command's %lu: "
             "only SEND and MESSAGE carry a payload; closing",
             s->type, (unsigned long)s->total + 4, (unsigned long)(s->total - 4 - s->cmd_size),
             (unsigned long)s->cmd_size);
    return -1;
}

/* Whether a frame of this type is held whole: a LOOKUP from the client;
 * from the broker, a command that names brokers, and, when the leak guard
 * is on, one with an error text or of a type lookout does not know (it
 * could carry an address: the guard reads it). */
static int
held_type(const struct pconn *p, int from_client, int type)
{
    if (from_client)
        return type == LK_PULSAR_LOOKUP;
    switch (lk_pulsar_type_addrs(type)) {
    case LK_PULSAR_ADDRS_DECODED:
        return 1;
    case LK_PULSAR_ADDRS_TEXT:
    case LK_PULSAR_ADDRS_BYTES:
        return p->pr.cluster->leak_guard != LK_LEAK_OFF;
    default:
        return 0;
    }
}

/*
 * Moves frames from in to out: streamed as they come, or held whole and
 * handed to client_lookup / broker_command.  The streamed frames that
 * follow one another are moved together (*skip counts their bytes at the
 * start of in), in one evbuffer_remove_buffer: libevent then hands over
 * whole chains of in rather than copying each frame into out, and runs
 * out's callbacks once.  Their heads are read where they lie, through a
 * view of in's first extents (seen bytes; cur is *skip bytes in), taken
 * again whenever in changes.  0, or -1 having closed.
 */
static int
pump_frames(struct pconn *p, int from_client, struct evbuffer *in, struct evbuffer *out,
            size_t *skip)
{
    struct pstream *s = from_client ? &p->rq : &p->rs;
    struct evbuffer_iovec v[LK_PULSAR_VIEW];
    struct lk_pulsar_cursor cur;
    uint8_t copy[LK_PULSAR_COPY]; /* a head that spans extents */
    size_t len = evbuffer_get_length(in), seen, need = 0;
    char why[300];

#define MOVE_ON()                                  \
    do {                                           \
        evbuffer_remove_buffer(in, out, *skip);    \
        len -= *skip;                              \
        *skip = 0;                                 \
        view(in, v, &cur, &seen);                  \
    } while (0)

    view(in, v, &cur, &seen);
    while (!p->pr.dead) {
        if (s->left == 0 && from_client && p->pr.draining)
            return 0; /* stopping: no new frame goes to the broker */
        /* A client that reads slowly: no new frame is begun for it (the
         * rest waits in the input, and the broker is not read), unless a
         * held one is part-way: it ends first (see pump_responses). */
        if (s->left == 0 && !from_client && p->pr.hw.counted == 0 &&
            evbuffer_get_length(out) + *skip > LK_PAIR_HIGH)
            return 0;
        if (*skip != 0 && *skip == seen && seen < len)
            MOVE_ON(); /* the view is used up; in has more */
        if (s->left == 0) {
            /* a held frame that waits: its head was read when it began */
            int r = s->waiting ? 1
                               : frame_head(s, &cur, seen - *skip, frame_cap(p->pr.cluster), copy,
                                            &need, why, sizeof(why));
            if (must_gather(r, seen, len, need, len - *skip)) {
                /* what comes before goes on first, then the head is put
                 * together at in's start */
                if (*skip != 0)
                    MOVE_ON();
                else if (gather(in, need, why, sizeof(why)) == 0)
                    view(in, v, &cur, &seen);
                else
                    r = -1;
                if (r != -1)
                    continue;
            }
            int held = r == 1 && held_type(p, from_client, s->type) &&
                       (from_client || p->pr.cluster->nfilters != 0);
            if (held && !s->waiting && simple_type(from_client, s->type) &&
                no_payload(s, why, sizeof(why)) != 0)
                r = -1;
            if (*skip != 0 && (r < 0 || held))
                MOVE_ON(); /* what comes before goes on first */
            if (r < 0) {
                char msg[340];
                snprintf(msg, sizeof(msg), "%s %s", from_client ? "client sent a" : "broker sent a",
                         why);
                lk_pair_close(&p->pr, msg);
                return -1;
            }
            if (r == 0) {
                /* its command is not all here: what waits of it counts */
                if (from_client)
                    client_wait(p, len - *skip);
                return 0;
            }
            if (held) {
                size_t whole = (size_t)s->total + 4;
                if (len < whole) {
                    /* wait for all of it, within the worker's budget */
                    if (from_client)
                        client_wait(p, len);
                    else
                        lk_pair_hold_wait(&p->pr, len);
                    s->waiting = 1;
                    return 0;
                }
                s->waiting = 0;
                s->frames++;
                s->bytes += whole;
                if (p->held == NULL)
                    p->held = evbuffer_new();
                evbuffer_remove_buffer(in, p->held, whole);
                len -= whole;
                if (from_client)
                    lk_pair_client_release(&p->pr);
                view(in, v, &cur, &seen);
                int rc = from_client ? client_lookup(p, out) : broker_command(p, s->type, out);
                if (!from_client)
                    lk_pair_hold_release(&p->pr);
                if (rc != 0)
                    return -1;
                continue;
            }
            if (from_client)
                lk_pair_client_release(&p->pr); /* it moves now */
            s->left = (uint64_t)s->total + 4;
            s->frames++;
            s->bytes += s->left;
        }
        size_t avail = seen - *skip;
        if (avail == 0)
            return 0;
        /* As much of the frame as is here: no copy of lookout's own for
         * the payload frames, the hot path. */
        size_t n = avail < s->left ? avail : (size_t)s->left;
        lk_pulsar_cursor_skip(&cur, n);
        *skip += n;
        s->left -= n;
    }
#undef MOVE_ON
    return -1;
}

static int
pump(struct pconn *p, int from_client, struct evbuffer *in, struct evbuffer *out)
{
    size_t skip = 0;
    int r = pump_frames(p, from_client, in, out, &skip);

    if (skip != 0 && !p->pr.dead)
        evbuffer_remove_buffer(in, out, skip);
    return r;
}

static int choose_broker(struct pconn *p);

/*
 * Draining: the connection closes at the first point where neither
 * direction is part-way through a frame: frames from the client stop at
 * their next boundary, and the broker's are passed on until one ends.
 * Nothing is cut mid-frame, but what the broker has not answered yet goes
 * unanswered: the Pulsar clients treat that as they treat a broker
 * restart (producers send their pending messages again, unacknowledged
 * messages are redelivered), which is why waiting for answers is not
 * worth keeping a connection that a busy client would never let idle.
 * A connection that never reached its broker closes at once.
 */
static void
drain_check(struct pconn *p)
{
    if (lk_pair_drain_due(&p->pr, p->rq.left != 0 || p->rs.left != 0))
        lk_pair_close_drained(&p->pr);
}

/* The client's input: its CONNECT first (which decides the broker), then
 * frames to the broker. */
static void
pump_requests(struct lk_pair *pr)
{
    struct pconn *p = (struct pconn *)pr;
    struct evbuffer *in = bufferevent_get_input(p->pr.c->bev);

    if (p->pr.up == NULL) {
        int r = choose_broker(p);
        if (r > 0)
            lk_pair_connect(&p->pr);
        else if (r == 0 && p->pr.cpaused) /* the CONNECT waits, over the budget */
            lk_io_disable(&p->pr.c->io, EV_READ);
        else if (r == 0)
            lk_io_enable(&p->pr.c->io, EV_READ);
        return;
    }
    if (!p->pr.connected) { /* input waits, up to a point */
        if (evbuffer_get_length(in) > LK_PAIR_HIGH)
            lk_io_disable(&p->pr.c->io, EV_READ);
        return;
    }
    struct evbuffer *out = bufferevent_get_output(p->pr.up->bev);
    if (pump(p, 1, in, out) != 0)
        return;
    lk_pair_pace_client(&p->pr, p->pr.draining && p->rq.left == 0);
    drain_check(p);
}

static void
pump_responses(struct lk_pair *pr)
{
    struct pconn *p = (struct pconn *)pr;
    struct evbuffer *in = bufferevent_get_input(p->pr.up->bev);
    struct evbuffer *out = bufferevent_get_output(p->pr.c->bev);

    if (pump(p, 0, in, out) != 0)
        return;
    lk_pair_pace_broker(&p->pr, p->pr.hw.counted != 0); /* pump begins no other */
    drain_check(p);
}

/*
 * The client's first frame, CONNECT, is here whole: it decides the broker
 * (proxy_to_broker_url on the service address), then the connection is
 * made and the CONNECT goes first.  0 to wait, -1 having closed, 1 when
 * the broker is chosen.
 */
static int
choose_broker(struct pconn *p)
{
    struct evbuffer *in = bufferevent_get_input(p->pr.c->bev);
    char why[300];
    int r = first_head(&p->rq, in, frame_cap(p->pr.cluster), why, sizeof(why));

    if (r < 0) {
        char msg[340];
        snprintf(msg, sizeof(msg), "client sent a %s", why);
        lk_pair_close(&p->pr, msg);
        return -1;
    }
    if (r == 0) {
        /* the CONNECT's command is not all here (it is bounded by
         * max_frame_bytes): what waits of it counts, and stays counted
         * until it moves to the broker (pump_frames) */
        client_wait(p, evbuffer_get_length(in));
        return 0;
    }
    if (p->rq.type != LK_PULSAR_CONNECT) {
        snprintf(why, sizeof(why), "first frame is command type %d, not CONNECT; closing",
                 p->rq.type);
        lk_pair_close(&p->pr, why);
        return -1;
    }
    /* A CONNECT is a simple command: with its command here (first_head),
     * the frame is whole. */
    if (no_payload(&p->rq, why, sizeof(why)) != 0) {
        char msg[340];
        snprintf(msg, sizeof(msg), "client sent a %s", why);
        lk_pair_close(&p->pr, msg);
        return -1;
    }
    size_t whole = (size_t)p->rq.total + 4;
    const uint8_t *fr = evbuffer_pullup(in, (ev_ssize_t)whole);
    struct lk_pulsar_cmd c;
    if (lk_pulsar_decode(fr + LK_PULSAR_PREFIX, p->rq.cmd_size, &c) != 0) {
        lk_pair_close(&p->pr, "CONNECT does not decode; closing");
        return -1;
    }
    if (c.has_proxy_to_broker_url) {
        /* Only to a broker in the map, by any of its addresses, in either
         * form clients send ("host:port" from the Java, C++ and Go
         * clients, or "pulsar://host:port": lk_proxy_target_find); and on
         * a broker's own address, only to that broker.  The text picks
         * the broker, not the address: lookout dials the broker's internal
         * address that lk_broker_upstream picks (pulsar+ssl for a TLS
         * client when the broker has one, unless upstream.tls says), as
         * it would have had the client reached that broker's own address.
         * The Pulsar Proxy, too, takes only the target from the text and
         * decides TLS by its own configuration (tlsEnabledWithBroker,
         * ProxyConnection.createClientConfiguration). */
        const char *bad;
        const struct lk_broker *b = lk_proxy_target_find(p->pr.cluster, c.proxy_to_broker_url, &bad);
        if (b == NULL || (p->vh->broker != NULL && b != p->vh->broker)) {
            char u[120];
            lk_log_sanitize(u, c.proxy_to_broker_url.p, c.proxy_to_broker_url.len, 100);
            snprintf(why, sizeof(why), "CONNECT proxy_to_broker_url %s %s%s; refused, not dialled; closing",
                     u[0] != '\0' ? u : "\"\"", bad != NULL ? "" : "names ",
                     bad != NULL  ? bad
                     : b == NULL ? "no broker in the map"
                                 : "another broker than this address's");
            lk_pair_close(&p->pr, why);
            return -1;
        }
        p->pr.broker = b;
        p->pr.any_broker = 0;
    }
    return 1;
}

static const struct lk_pair_ops pulsar_pair = {
    .family = LK_SCHEME_PULSAR,
    .requests = pump_requests,
    .responses = pump_responses,
};

static void
start(struct lk_conn *c)
{
    struct pconn *p = lk_palloc(&c->pool, sizeof(*p));
    struct timeval idle = lk_pair_tv(c->conf->timeout_idle_ms);
    const struct lk_vhost *vh = lk_route(c->bind, lk_str_c(c->sni), LK_STR_NULL, 0);

    c->proto = p;
    lk_pair_start(&p->pr, &pulsar_pair, c, idle);
    lk_pool_cleanup_add(&c->pool, pconn_cleanup, p);
    if (vh == NULL) {
        lk_pair_no_route(&p->pr, "Pulsar");
        return;
    }
    p->vh = vh;
    p->rq.type = p->rs.type = -1;
    lk_pair_route(&p->pr, vh);
    if (p->pr.broker == NULL) {
        lk_pair_close(&p->pr, vh->cluster->nbrokers == 0
                                  ? "the cluster has no brokers; closing"
                                  : "no broker of the cluster has an internal pulsar or "
                                    "pulsar+ssl address; closing");
        return;
    }
    c->action = "waiting for CONNECT";
    lk_io_enable(&c->io, EV_READ);
}

static void
drain(struct lk_conn *c)
{
    struct pconn *p = c->proto;

    p->pr.draining = 1;
    if (p->rq.left == 0)
        lk_io_disable(&c->io, EV_READ);
    drain_check(p);
}

const struct lk_proto_ops lk_proto_pulsar = {
    .proto = LK_PROTO_PULSAR,
    .name = "pulsar",
    .start = start,
    .drain = drain,
};
