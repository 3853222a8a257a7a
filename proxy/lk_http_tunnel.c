/*
 * An upgraded HTTP connection (a WebSocket, after the broker's 101): the
 * exchange ends and the connection becomes a byte tunnel between the client
 * and that broker, both ways under the same watermarks, until either side
 * closes or goes idle.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lk_http_xchg.h"
#include "lk_io.h"
#include "lk_upstream.h"

/* Moves bytes both ways once a 101 has switched the connection over. */
static void
tunnel_move(struct lk_io *from, struct lk_io *to)
{
    evbuffer_add_buffer(bufferevent_get_output(to->bev), bufferevent_get_input(from->bev));
    if (evbuffer_get_length(bufferevent_get_output(to->bev)) > LK_HWM) {
        lk_io_disable(from, EV_READ);
        bufferevent_setwatermark(to->bev, EV_WRITE, LK_LWM, 0);
    }
}

static void
tunnel_client_read(struct bufferevent *bev, void *arg)
{
    struct lk_hconn *hc = arg;
    tunnel_move(&hc->c->io, &hc->tunnel_up->io);
}

static void
tunnel_up_read(struct bufferevent *bev, void *arg)
{
    struct lk_hconn *hc = arg;
    tunnel_move(&hc->tunnel_up->io, &hc->c->io);
}

static void
tunnel_client_write(struct bufferevent *bev, void *arg)
{
    struct lk_hconn *hc = arg;
    lk_io_enable(&hc->tunnel_up->io, EV_READ);
}

static void
tunnel_up_write(struct bufferevent *bev, void *arg)
{
    struct lk_hconn *hc = arg;

    if (hc->client_eof) { /* tunnel_client_event: closing once the broker has it all */
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
            lk_conn_close(hc->c);
        return;
    }
    lk_io_enable(&hc->c->io, EV_READ);
}

static void
tunnel_client_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_hconn *hc = arg;
    struct lk_upstream *up = hc->tunnel_up;

    /* The client finished: what it sent still reaches the broker (a
     * WebSocket producer's last messages, its close frame), and then the
     * tunnel closes, as nginx closes an upgraded connection; meanwhile the
     * broker's bytes still flow to the client.  A broker that takes none
     * of it is closed at timeout.idle.  A reset or a timeout ends it at
     * once. */
    if (lk_io_clean_eof(what) && up != NULL) {
        evbuffer_add_buffer(bufferevent_get_output(up->bev), bufferevent_get_input(bev));
        if (evbuffer_get_length(bufferevent_get_output(up->bev)) != 0) {
            struct timeval idle = lk_hx_tv(hc->c->conf->timeout_idle_ms);
            hc->client_eof = 1;
            bufferevent_setwatermark(up->bev, EV_WRITE, 0, 0);
            lk_io_set_timeouts(&up->io, &idle, &idle);
            return;
        }
    }
    lk_conn_close(hc->c); /* the pool cleanup frees the upstream side */
}

static void
tunnel_up_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_hconn *hc = arg;
    tunnel_move(&hc->tunnel_up->io, &hc->c->io);
    lk_upstream_free(hc->tunnel_up);
    hc->tunnel_up = NULL;
    lk_conn_close_after_flush(hc->c);
}

void
lk_hx_start_tunnel(struct lk_hx *hx)
{
    struct lk_hconn *hc = hx->hc;
    struct lk_conn *c = hc->c;
    struct lk_http_msg *res = &hx->x.res;

    /* Forward the 101 with its Upgrade and Connection fields intact. */
    res->http_minor = 1;
    lk_http_write_head(res, bufferevent_get_output(c->bev));
    hx->res_head_sent = 1;
    hc->tunnel = 1;
    hc->tunnel_up = hx->up;
    hx->up = NULL;
    hx->req_done = 1;
    hc->x = NULL;
    lk_hx_log(hx);
    lk_hx_free(hx);
    if (hc->timer != NULL)
        event_del(hc->timer);
    c->action = "tunnelling";
    struct timeval idle = lk_hx_tv(c->conf->timeout_idle_ms);
    bufferevent_setcb(c->bev, tunnel_client_read, tunnel_client_write, tunnel_client_event, hc);
    bufferevent_setcb(hc->tunnel_up->bev, tunnel_up_read, tunnel_up_write, tunnel_up_event, hc);
    lk_io_set_timeouts(&c->io, &idle, NULL);
    lk_io_set_timeouts(&hc->tunnel_up->io, &idle, NULL);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    bufferevent_setwatermark(hc->tunnel_up->bev, EV_READ, 0, 0);
    lk_io_enable(&c->io, EV_READ | EV_WRITE);
    lk_io_enable(&hc->tunnel_up->io, EV_READ | EV_WRITE);
    /* bytes that arrived behind either head already belong to the tunnel */
    tunnel_move(&hc->tunnel_up->io, &c->io);
    tunnel_move(&c->io, &hc->tunnel_up->io);
}
