/*
 * A client paired with one broker connection (lk_pair.h).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_io.h"
#include "lk_log.h"
#include "lk_pair.h"
#include "lk_stats.h"
#include "lk_worker.h"
#include "lk_xrec.h"
#include "lk_xchg.h"

void
lk_pair_close(struct lk_pair *p, const char *why)
{
    if (p->dead)
        return;
    p->dead = 1;
    if (why != NULL)
        lk_log(LK_INFO, p->c, "%s", why);
    lk_conn_close_later(p->c);
}

void
lk_pair_close_drained(struct lk_pair *p)
{
    if (p->dead)
        return;
    p->dead = 1;
    lk_log(LK_DEBUG, p->c, "%s: nothing under way; closing",
           p->c->aged ? "max_connection_age" : "stopping");
    lk_conn_close_after_flush(p->c);
}

void
lk_pair_log_summary(const struct lk_pair *p, enum lk_stat_proto proto, uint64_t bytes_in,
                    uint64_t bytes_out, uint64_t frames_in, uint64_t frames_out)
{
    struct lk_xrec r;

    memset(&r, 0, sizeof(r));
    r.c = p->c;
    r.cluster = p->cluster;
    r.broker = p->broker != NULL ? p->broker->name : NULL;
    r.proto = proto;
    r.summary = 1;
    r.bytes_in = bytes_in;
    r.bytes_out = bytes_out;
    r.frames_in = frames_in;
    r.frames_out = frames_out;
    r.dur_us = lk_now_us() - p->start_us;
    r.upstream_us = -1;
    lk_xrec_done(&r);
}

/* The broker is chosen (or the pair closes): timeout.first_frame is done. */
static void
first_frame_done(struct lk_pair *p)
{
    if (p->first_armed)
        event_del(&p->first);
    p->first_armed = 0;
}

static void
first_frame_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct lk_pair *p = arg;
    char why[160];

    p->first_armed = 0;
    if (p->dead)
        return;
    lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(p->c->st))->first_frame_timeouts, 1);
    snprintf(why, sizeof(why),
             "no first frame within timeout.first_frame (%u ms; %zu bytes came); closing",
             p->c->conf->timeout_first_frame_ms,
             evbuffer_get_length(bufferevent_get_input(p->c->bev)));
    lk_pair_close(p, why);
}

static void
cleanup(void *arg)
{
    struct lk_pair *p = arg;

    first_frame_done(p);
    lk_upstream_free(p->up);
    p->up = NULL;
}

/* The client sent something or the broker can take more (bev is either). */
static void
on_requests(struct bufferevent *bev, void *arg)
{
    struct lk_pair *p = arg;

    if (!p->dead)
        p->ops->requests(p);
}

/* The broker sent something or the client can take more (the broker's
 * callbacks are set once it is connected). */
static void
on_responses(struct bufferevent *bev, void *arg)
{
    struct lk_pair *p = arg;

    if (p->connected && !p->dead)
        p->ops->responses(p);
}

static void
client_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_pair *p = arg;

    if (what & BEV_EVENT_TIMEOUT)
        lk_pair_close(p, "idle client connection timed out");
    else if (p->ops->client_gone != NULL && !p->dead)
        p->ops->client_gone(p); /* EOF or reset */
    else
        lk_pair_close(p, NULL);
}

static void
up_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_pair *p = arg;
    char why[160];

    if (what & BEV_EVENT_ERROR)
        lk_upstream_error(p->c->rt, p->broker, LK_UPERR_RESET);
    snprintf(why, sizeof(why), "broker %s %s; closing", p->broker->name,
             (what & BEV_EVENT_TIMEOUT) ? "idle too long" : "closed the connection");
    /* A broker that answered and left (a Pulsar ERROR before it drops a
     * client that failed to authenticate, a Kafka broker's last answers
     * as it stops): what lookout took of its answers still reaches the
     * client, which may be reading slower, and then the connection
     * closes, as nginx stream {} and HAProxy close it.  The module read
     * all it could at each read; a frame cut short goes out as far as it
     * went, as the broker cut it.  A reset or a timeout ends at once. */
    if (lk_io_clean_eof(what) && !p->dead) {
        p->dead = 1;
        lk_log(LK_INFO, p->c, "%s", why);
        lk_conn_close_after_flush(p->c);
        return;
    }
    lk_pair_close(p, why);
}

static void
up_ready(struct lk_upstream *u, enum lk_upstream_event ev, void *arg)
{
    struct lk_pair *p = arg;

    if (ev != LK_UP_CONNECTED) {
        /* A service-address connection may go to another broker (nothing
         * was sent yet). */
        if (p->any_broker && ++p->connects < p->cluster->nbrokers) {
            const struct lk_broker *next = lk_pick_broker(p->c->rt, p->cluster, p->ops->family);
            if (next != NULL && next != p->broker && !p->c->closing) {
                lk_upstream_free(p->up);
                p->up = NULL;
                p->broker = next;
                lk_pair_connect(p);
                return;
            }
        }
        char why[256];
        snprintf(why, sizeof(why), "broker %s unreachable: %s; closing", p->broker->name,
                 u->error != NULL ? u->error : "connect failed");
        lk_pair_close(p, why);
        return;
    }
    p->connected = 1;
    lk_log(LK_DEBUG, p->c, "to broker %s at %s", p->broker->name, u->addr->hostport);
    bufferevent_setcb(u->bev, on_responses, on_requests, up_event, p);
    lk_io_set_timeouts(&u->io, &p->idle, NULL);
    lk_io_enable(&u->io, EV_READ | EV_WRITE);
    p->c->action = "proxying";
    p->ops->requests(p);
}

void
lk_pair_connect(struct lk_pair *p)
{
    first_frame_done(p);
    p->c->action = "connecting to the broker";
    p->up = lk_upstream_get(p->c->w, p->c->rt, p->broker, p->ops->family, p->c, up_ready, p);
    if (p->up == NULL)
        lk_pair_close(p, "cannot set up a connection to the broker (no internal address of its "
                         "protocol); closing");
}

/* q (p's hw or cw) holds n bytes now: 1 when the budget says it may not
 * read on (it is queued), else 0. */
static int
hold_wait(struct lk_pair *p, struct lk_hold_waiter *q, size_t n)
{
    struct lk_hold *h = &p->c->w->hold;

    lk_hold_set(h, q, n);
    return !lk_hold_may_read(h, q, p->c->conf->max_held_bytes);
}

int
lk_pair_hold_wait(struct lk_pair *p, size_t n)
{
    return p->paused = hold_wait(p, &p->hw, n);
}

void
lk_pair_hold_release(struct lk_pair *p)
{
    p->paused = 0;
    lk_hold_release(&p->c->w->hold, &p->hw, p->c->conf->max_held_bytes);
}

int
lk_pair_client_wait(struct lk_pair *p, size_t n)
{
    return p->cpaused = hold_wait(p, &p->cw, n);
}

void
lk_pair_client_release(struct lk_pair *p)
{
    if (p->cw.counted == 0 && !p->cpaused)
        return; /* nothing counted, so not queued nor owner (lk_hold.h) */
    p->cpaused = 0;
    lk_hold_release(&p->c->w->hold, &p->cw, p->c->conf->max_held_bytes);
}

/* The budget has room again for the client's frame: what is in its input
 * is looked at again, and it is read if the budget still says so. */
static void
client_resume(struct lk_hold_waiter *q)
{
    struct lk_pair *p = (struct lk_pair *)((char *)q - offsetof(struct lk_pair, cw));

    p->cpaused = 0;
    if (!p->dead)
        p->ops->requests(p);
}

/* The budget has room again: read the broker (what is already in its
 * input goes first). */
static void
hold_resume(struct lk_hold_waiter *q)
{
    struct lk_pair *p = (struct lk_pair *)((char *)q - offsetof(struct lk_pair, hw));

    p->paused = 0;
    if (!p->dead && p->up != NULL)
        p->ops->responses(p);
}

void
lk_pair_start(struct lk_pair *p, const struct lk_pair_ops *ops, struct lk_conn *c,
              struct timeval idle)
{
    p->ops = ops;
    p->c = c;
    p->idle = idle;
    p->start_us = lk_now_us();
    p->hw.resume = hold_resume;
    p->cw.resume = client_resume;
    lk_pool_cleanup_add(&c->pool, cleanup, p);
    bufferevent_setcb(c->bev, on_requests, on_responses, client_event, p);
    lk_io_set_timeouts(&c->io, &idle, NULL);
    unsigned ms = c->conf->timeout_first_frame_ms;
    if (ms != 0) {
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_assign(&p->first, c->w->base, first_frame_timeout, p);
        evtimer_add(&p->first, &tv);
        p->first_armed = 1;
    }
}

void
lk_pair_no_route(struct lk_pair *p, const char *proto)
{
    char why[96];

    snprintf(why, sizeof(why), "no %s broker on this address %s; closing", proto,
             p->c->sni != NULL ? "for that SNI name" : "without SNI");
    lk_pair_close(p, why);
}

void
lk_pair_route(struct lk_pair *p, const struct lk_vhost *vh)
{
    p->cluster = vh->cluster;
    p->any_broker = vh->broker == NULL;
    p->broker =
        vh->broker != NULL ? vh->broker : lk_pick_broker(p->c->rt, vh->cluster, p->ops->family);
}

struct timeval
lk_pair_tv(unsigned ms)
{
    return (struct timeval){ms / 1000, (ms % 1000) * 1000};
}

void
lk_pair_pace_client(struct lk_pair *p, int stop)
{
    if (stop || p->cpaused ||
        (evbuffer_get_length(bufferevent_get_output(p->up->bev)) > LK_PAIR_HIGH &&
         p->cw.counted == 0))
        lk_io_disable(&p->c->io, EV_READ);
    else
        lk_io_enable(&p->c->io, EV_READ);
}

void
lk_pair_pace_broker(struct lk_pair *p, int holding)
{
    if (p->paused ||
        (evbuffer_get_length(bufferevent_get_output(p->c->bev)) > LK_PAIR_HIGH && !holding))
        lk_io_disable(&p->up->io, EV_READ);
    else
        lk_io_enable(&p->up->io, EV_READ);
}

int
lk_pair_drain_due(const struct lk_pair *p, int busy)
{
    return p->draining && !p->dead && !(p->connected && busy);
}

void
lk_pair_xchg_begin(struct lk_pair *p, struct lk_xchg *x, unsigned proto, const char *listener)
{
    memset(x, 0, sizeof(*x));
    lk_pool_init(&x->pool);
    x->conn = p->c;
    x->conf = p->c->conf;
    x->cluster = p->cluster;
    x->broker = p->broker;
    x->proto = proto;
    x->listener_name = listener != NULL ? listener : p->cluster->lookup_listener;
    x->client_tls = p->c->tls;
    lk_flt_attach_all(x);
}

void
lk_pair_xchg_end(struct lk_xchg *x, struct lk_xrec *r)
{
    lk_xrec_take(r, x);
    lk_flt_detach_all(x);
    lk_pool_free(&x->pool);
}
