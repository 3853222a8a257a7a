/*
 * Client connections: accepted (or refused over a connection limit),
 * handed to the protocol module of their bind once TLS, if any, is
 * through; moved to a new generation at exchange boundaries; parked while
 * idle; closed.  They come from a per-worker slab.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <event2/buffer.h>
#include <openssl/err.h>

#include "lk_clock.h"
#include "lk_conn.h"
#include "lk_io.h"
#include "lk_limit.h"
#include "lk_log.h"
#include "lk_proxyproto.h"
#include "lk_registry.h"
#include "lk_route.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_tls.h"
#include "lk_worker.h"

/* Client connections come from a per-worker slab: parked ones, which are
 * about all that is left of an idle connection, then sit together in
 * blocks rather than each in a page among the freed buffers of others,
 * which malloc could not give back. */
#define LK_CONN_BLOCK 64

static struct lk_conn *
conn_alloc(struct lk_worker *w)
{
    if (w->free_conns == NULL) {
        struct lk_conn *block = lk_xmalloc(LK_CONN_BLOCK * sizeof(*block));
        w->conn_blocks = lk_xrealloc(w->conn_blocks, (w->nconn_blocks + 1) * sizeof(void *));
        w->conn_blocks[w->nconn_blocks++] = block;
        for (size_t i = 0; i < LK_CONN_BLOCK; i++) {
            block[i].next = w->free_conns;
            w->free_conns = &block[i];
        }
    }
    struct lk_conn *c = w->free_conns;
    w->free_conns = c->next;
    memset(c, 0, sizeof(*c));
    return c;
}

void (*lk_conn_kept_drop)(struct lk_conn *c);

struct lk_conn_extra *
lk_conn_extra(struct lk_conn *c)
{
    if (c->extra == NULL) {
        /* one per connection with a PROXY header (its pp_dst) */
        c->extra = lk_xtmalloc(sizeof(*c->extra));
        memset(c->extra, 0, sizeof(*c->extra));
    }
    return c->extra;
}

/* Frees c's extra (its timer cancelled with it). */
static void
extra_free(struct lk_conn *c)
{
    struct lk_conn_extra *x = c->extra;

    c->extra = NULL;
    if (x == NULL)
        return;
    free(x->cert_subject);
    if (x->age_ev != NULL)
        event_free(x->age_ev);
    if (x->close_ev != NULL)
        event_free(x->close_ev); /* cancelled */
    lk_tfree(x);
}

static void
conn_release(struct lk_worker *w, struct lk_conn *c)
{
    c->next = w->free_conns;
    w->free_conns = c;
}

static void pp_free(struct lk_conn *c);

void
lk_conn_describe(const struct lk_conn *c, char *buf, size_t len)
{
    char peer[LK_ADDR_TEXT];
    int n = snprintf(buf, len, ", client: %s, server: %s", lk_conn_peer_text(c, peer),
                     c->bind->text);
    if (n > 0 && (size_t)n < len && c->sni != NULL)
        n += snprintf(buf + n, len - (size_t)n, ", sni: %s", c->sni);
    if (n > 0 && (size_t)n < len && c->action != NULL)
        snprintf(buf + n, len - (size_t)n, ", while %s", c->action);
}

void
lk_conn_close(struct lk_conn *c)
{
    struct bufferevent *bev = c->bev;

    c->bev = NULL;
    if (c->pp_wait) /* c->proto is its struct pp_wait */
        pp_free(c);
    c->w->nconns--;
    lk_limit_drop(c->limit);
    if (c->st != NULL)
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->open, (uint64_t)-1);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        c->w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    /* The protocol module's state lives in the pool; its cleanups release
     * upstreams and timers before the client bufferevent goes. */
    lk_pool_free(&c->pool);
    c->peer_text = NULL;
    /* After the pool: its cleanups may have kept one more.  The broker
     * connections whose PROXY header names this client serve no other. */
    if (c->kept != NULL)
        lk_conn_kept_drop(c);
    extra_free(c);
    if (c->io.ssl != NULL)
        lk_tls_keep_session(c->io.ssl);
    lk_io_detach(&c->io);
    if (bev != NULL)
        bufferevent_free(bev);
    if (c->fd >= 0)
        evutil_closesocket(c->fd);
    /* Last: the pool's cleanups above may still use the generation. */
    lk_runtime_unref(c->rt);
    c->rt = NULL;
    if (c->w->draining && c->w->nconns == 0)
        event_active(c->w->drain_ev, EV_TIMEOUT, 1);
    conn_release(c->w, c);
}

static void
close_when_drained(struct bufferevent *bev, void *arg)
{
    struct lk_conn *c = arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        lk_conn_close(c);
}

static void
close_on_event(struct bufferevent *bev, short what, void *arg)
{
    /* The peer's end of sending is no reason to drop what it has still to
     * read: the reading stops (lk_io did), the writing goes on. */
    if (lk_io_clean_eof(what) && evbuffer_get_length(bufferevent_get_output(bev)) != 0)
        return;
    lk_conn_close(arg);
}

static void
discard_input(struct bufferevent *bev, void *arg)
{
    evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

static void
close_later_cb(evutil_socket_t fd, short what, void *arg)
{
    lk_conn_close(arg);
}

void
lk_conn_close_later(struct lk_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->io.park_wanted = 0; /* closing, not parking */
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    lk_io_disable(&c->io, EV_READ | EV_WRITE);
    /* c's own event, not event_base_once: should c be closed some other way
     * first, freeing the event cancels this.  Made when first needed, with
     * c's extra: idle connections hold neither. */
    struct lk_conn_extra *x = lk_conn_extra(c);
    if (x->close_ev == NULL)
        x->close_ev = evtimer_new(c->w->base, close_later_cb, c);
    event_active(x->close_ev, EV_TIMEOUT, 1);
}

void
lk_conn_close_after_flush(struct lk_conn *c)
{
    struct timeval grace = {5, 0};

    if (c->closing)
        return;
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        lk_conn_close_later(c);
        return;
    }
    c->closing = 1;
    /* Once drained it closes: it must not park instead (lk_io.c parks an
     * idle connection whose protocol asked, lk_conn_park, once its output
     * is out). */
    c->io.park_wanted = 0;
    /* Keep reading (and discarding) so that a client still sending does not
     * get a reset that would destroy the response in flight. */
    bufferevent_setcb(c->bev, discard_input, close_when_drained, close_on_event, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    lk_io_set_timeouts(&c->io, &grace, &grace);
    lk_io_enable(&c->io, EV_READ);
    /* TLS: each flush that makes progress runs close_when_drained.  HTTP:
     * the flush queue writes the rest straight away, as any response, and
     * runs close_when_drained once it is out; what the kernel does not take
     * goes the bufferevent's way, with the grace as its write timeout.
     * Asking the bufferevent to write it all costs an epoll_ctl to add
     * EV_WRITE, a loop iteration to learn the socket is writable and
     * another epoll_ctl to drop it, per connection closed after its
     * response (Connection: close).  The binary protocols keep that way,
     * a loop iteration later: their clients send on without waiting for
     * answers, and closing sooner after the last answer changes what one
     * racing the close sees (kafka-python drops an answer it reads
     * together with the end of the connection, and sends its request
     * again: in test 132, a message written twice in 2 runs of 7 with the
     * direct write here too, in none of 9 without). */
    if (c->io.ssl == NULL && c->bind->proto == LK_PROTO_HTTP)
        lk_io_queue(&c->io);
    else if (c->io.ssl == NULL)
        bufferevent_enable(c->bev, EV_WRITE); /* the bufferevent's writes: close_when_drained */
}

/* Generations ---------------------------------------------------------------- */

int
lk_conn_renew(struct lk_conn *c)
{
    struct lk_runtime *rt = c->w->rt;

    if (c->rt == rt)
        return 0;
    const struct lk_bind *b = lk_bind_find(rt->conf, c->bind);
    if (b == NULL)
        return -1;
    /* c->sni is OpenSSL's and c->io.ssl keeps its own reference to the old
     * generation's SSL_CTX, which only the handshake (done) called into. */
    c->bind = b;
    c->conf = rt->conf;
    if (c->kept != NULL) /* the old generation's, which c's reference kept alive */
        lk_conn_kept_drop(c);
    lk_runtime_unref(c->rt);
    c->rt = lk_runtime_ref(rt);
    return 1;
}

/* c->peer_text, in c's pool: when its protocol starts, and again on
 * waking, so that requests find it made and a parked connection holds none. */
static void
peer_text(struct lk_conn *c)
{
    char buf[LK_ADDR_TEXT];
    size_t n = lk_addr_text(&c->peer, 1, buf);

    c->peer_text = lk_pstrndup(&c->pool, buf, n);
    c->peer_ip_off = c->peer.family == AF_INET6;
    c->peer_ip_len = n == 0 ? 0 : (unsigned char)(strrchr(buf, ':') - buf - 2 * c->peer_ip_off);
}

/* Parking ------------------------------------------------------------------ */

/* The client connection whose lk_io this is (only those park). */
#define CONN_OF(io) ((struct lk_conn *)(void *)((char *)(io) - offsetof(struct lk_conn, io)))

void
lk_conn_park(struct lk_conn *c, const struct timeval *timeout)
{
    struct lk_io *io = &c->io;

    if (io->unparking || !io->plain || c->closing)
        return; /* just woken for input: it is read next */
    c->park_ms = (uint32_t)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
    io->park_wanted = 1;
    /* Parked from the flush queue, outside the protocol's callbacks, once
     * the output is out. */
    if (!io->wwait)
        lk_io_queue(io);
}

/* Parks the connection (its io is idle: lk_io.c checked): frees the
 * bufferevent and the pool, and leaves the read event waiting with the
 * idle timeout.  1: it parked. */
int
lk_conn_park_io(struct lk_io *io)
{
    struct lk_conn *c = CONN_OF(io);

    lk_log(LK_DEBUG, c, "idle: parked");
    lk_pool_clear(&c->pool); /* the protocol's state: its cleanups free its timers */
    c->proto = NULL;
    c->peer_text = NULL; /* made again on waking: 56 bytes less while parked */
    c->action = "waiting for a request";
    evbuffer_remove_cb_entry(bufferevent_get_output(io->bev), io->cb);
    io->cb = NULL;
    if (io->wev != NULL)
        event_free(io->wev);
    io->wev = NULL;
    bufferevent_free(c->bev); /* the socket stays: c->fd */
    c->bev = io->bev = NULL;
    io->has_rtv = 1;
    io->rtv.tv_sec = c->park_ms / 1000;
    io->rtv.tv_usec = (c->park_ms % 1000) * 1000;
    io->reading = 1;
    /* Parked connections wait the same time: in libevent's queue for that
     * one timeout, a list through the events themselves (no slot each in
     * the timer heap, and O(1) in and out); its own if there are too many
     * such queues (256 per base). */
    const struct timeval *common = event_base_init_common_timeout(c->w->base, &io->rtv);
    event_add(io->rev, common != NULL ? common : &io->rtv);
    return 1;
}

/* The read event of a parked connection fired: its idle time is over
 * (closed), or the client speaks and the connection gets a bufferevent and
 * its protocol again.  0 when io is ready to read. */
int
lk_conn_unpark_io(struct lk_io *io, short what)
{
    struct lk_conn *c = CONN_OF(io);

    if (what & EV_TIMEOUT) {
        lk_log(LK_DEBUG, c, "idle: timed out");
        lk_conn_close(c);
        return -1;
    }
    lk_log(LK_DEBUG, c, "idle: the client speaks again");
    if (lk_conn_renew(c) < 0) {
        lk_log(LK_DEBUG, c, "idle: its listener was removed by a reload; closing");
        lk_conn_close(c);
        return -1;
    }
    c->bev = bufferevent_socket_new(c->w->base, c->fd, BEV_OPT_DEFER_CALLBACKS);
    if (c->bev == NULL) {
        lk_log(LK_ERR, c, "cannot resume an idle connection: out of memory");
        lk_conn_close(c);
        return -1;
    }
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    lk_io_rebind(io, c->bev);
    peer_text(c);
    io->unparking = 1;
    c->w->proto_for(c->bind->proto)->start(c);
    io->unparking = 0;
    return 0;
}

static void
tls_handshake_event(struct bufferevent *bev, short what, void *arg)
{
    struct lk_conn *c = arg;

    if (what & BEV_EVENT_CONNECTED) {
        /* OpenSSL's copy lives as long as the SSL: through parking */
        c->sni = SSL_get_servername(c->io.ssl, TLSEXT_NAMETYPE_host_name);
        c->action = NULL;
        if (c->rt->auths != NULL) {
            char subject[512];
            uint64_t auth_id = lk_tls_conn_auth_id(c->io.ssl);
            if (auth_id != 0)
                lk_conn_extra(c)->auth_id = auth_id;
            if (lk_tls_client_subject(c->io.ssl, subject, sizeof(subject)) != NULL)
                lk_conn_extra(c)->cert_subject = lk_xstrdup(subject);
        }
#ifdef TCP_QUICKACK
        /* The client spoke last (its Finished: always in TLS 1.3, on a
         * resumption in 1.2) and usually sends its request right behind it,
         * in a second write that Nagle's algorithm holds until the Finished
         * is ACKed.  With nothing of ours to carry that ACK (no tickets),
         * the kernel delays it 40 ms; send it now. */
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
#endif
        const struct lk_proto_ops *ops = c->w->proto_for(c->bind->proto);
        ops->start(c);
        return;
    }
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->tls_failures, 1);
    char why[1200];
    c->sni = SSL_get_servername(c->io.ssl, TLSEXT_NAMETYPE_host_name); /* for the log line */
    if ((what & BEV_EVENT_ERROR) && c->rt->auths != NULL &&
        lk_tls_client_refusal(c->io.ssl, why + 22, sizeof(why) - 22) != NULL) {
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->client_cert_refused, 1);
        memcpy(why, "TLS handshake failed: ", 22);
        lk_log_ssl(LK_INFO, c, why); /* the subject and the reason */
    } else if (what & BEV_EVENT_ERROR)
        lk_log_ssl(LK_INFO, c, "TLS handshake failed");
    else if (what & BEV_EVENT_TIMEOUT)
        lk_log(LK_INFO, c, "TLS handshake timed out");
    else
        ERR_clear_error();
    lk_conn_close(c);
}

/* Connection limits --------------------------------------------------------- */

/* The reasons of lookout_connections_refused_total, in lk_fe_vals.refused. */
enum { REFUSED_MAX, REFUSED_PER_CLIENT, REFUSED_PP_UNTRUSTED, REFUSED_PP_BAD };
/* Refusals not yet in a log line, by reason, and when the last line was:
 * a flood makes one line a second, not one per connection. */
static atomic_ulong refused_unlogged[2];
static struct lk_log_every refused_log;

/*
 * A connection over a limit: closed at once, before anything is allocated
 * for it.  Plaintext HTTP first gets a 503 with Connection: close, written
 * straight to the new socket (it is empty: the write takes it whole).  TLS
 * listeners just close, as the binary protocols do: a 503 would need a
 * full handshake per refused connection, the very work a flood wants out
 * of lookout (HAProxy's `tcp-request connection reject` likewise closes
 * before any handshake).
 */
static void
refuse(struct lk_stat_obj *st, const struct lk_bind *b, const struct lk_conf *conf,
       evutil_socket_t fd, const struct lk_addr *peer, int why)
{
    static const char *const bodies[2] = {
        "{\"reason\": \"too many connections (max_connections)\"}",
        "{\"reason\": \"too many connections from your address (max_connections_per_client)\"}"};

    lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(st))->refused[why], 1);
    if (b->proto == LK_PROTO_HTTP && !b->tls) {
        char resp[256];
        int n = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(bodies[why]), bodies[why]);
        (void)!send(fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    /* The client's first bytes are here, unread (listen.defer_accept hands
     * over a connection once they are): closed on them, the socket would
     * send a reset rather than a FIN, which can destroy the 503 on its way
     * and ends a TLS or binary client's connection as an error. */
    char junk[4096];
    (void)!recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
    evutil_closesocket(fd);

    atomic_fetch_add(&refused_unlogged[why], 1);
    if (lk_log_every(&refused_log, 1000) == 0)
        return;
    unsigned long by[2] = {atomic_exchange(&refused_unlogged[REFUSED_MAX], 0),
                           atomic_exchange(&refused_unlogged[REFUSED_PER_CLIENT], 0)};
    char caps[2][16], ip[LK_ADDR_TEXT];
    snprintf(caps[0], sizeof(caps[0]), "%u per worker", conf->max_connections);
    snprintf(caps[1], sizeof(caps[1]), "%u", conf->max_connections_per_client);
    if (lk_addr_text(peer, 0, ip) == 0)
        strcpy(ip, "?");
    lk_log(LK_WARN, NULL,
           "refused %lu client connections since the last such line: %lu over max_connections "
           "(%s), %lu over max_connections_per_client (%s); the latest from %s on %s",
           by[0] + by[1], by[0], conf->max_connections != 0 ? caps[0] : "off", by[1],
           conf->max_connections_per_client != 0 ? caps[1] : "off", ip, b->text);
}

static void conn_start(struct lk_conn *c, evutil_socket_t fd, const uint8_t *in, size_t inlen);
static void pp_wait(struct lk_conn *c, evutil_socket_t fd);

void
lk_conn_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
          void *arg)
{
    const struct lk_listen *ls = arg;
    const struct lk_bind *b = ls->b;
    struct lk_worker *w = ls->w;
    const struct lk_conf *conf = w->rt->conf;
    struct lk_limit_slot *slot = NULL;
    struct lk_addr peer;

    lk_addr_of(&peer, sa);
    if (conf->max_connections != 0 && w->nconns >= conf->max_connections) {
        refuse(ls->st, b, conf, fd, &peer, REFUSED_MAX);
        return;
    }
    /* With the PROXY protocol, the client's count waits for its address. */
    if (conf->max_connections_per_client != 0 && b->proxy_protocol == 0 &&
        lk_limit_take(&peer, conf->max_connections_per_client, &slot) != 0) {
        refuse(ls->st, b, conf, fd, &peer, REFUSED_PER_CLIENT);
        return;
    }
    struct lk_conn *c = conn_alloc(w);
    c->limit = slot;
    c->peer = peer;
    c->fd = -1; /* until a bufferevent has it: closed by whoever fails first */
    /* An idle keep-alive connection holds this pool: the protocol's state
     * (the HTTP module: about 600 bytes) and little else. */
    lk_pool_init_sized(&c->pool, 768);
    c->w = w;
    c->rt = lk_runtime_ref(w->rt); /* an atomic per connection: see struct lk_runtime */
    c->conf = w->rt->conf;
    c->bind = b;
    c->tls = b->tls;
    c->st = ls->st;
    struct lk_fe_vals *fv = lk_stat_vals(c->st);
    lk_stat_add(&fv->total, 1);
    lk_stat_add(&fv->open, 1);
    /* TCP_NODELAY: the accepted socket has it from the listener
     * (bind_socket in lk_workers.c), as Linux copies it over. */
    w->nconns++;
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;
    if (conf->max_connection_age_ms != 0)
        w->age_start(c); /* its deadline (lk_age.c) */
    if (b->proxy_protocol != 0) {
        pp_wait(c, fd);
        return;
    }
    conn_start(c, fd, NULL, 0);
}

/* Starts c on fd: its TLS handshake, or its protocol module, with the
 * inlen bytes at in that were read off a plaintext socket before it. */
static void
conn_start(struct lk_conn *c, evutil_socket_t fd, const uint8_t *in, size_t inlen)
{
    const struct lk_bind *b = c->bind;
    struct lk_worker *w = c->w;
    struct event_base *base = w->base;
    const struct lk_proto_ops *ops = w->proto_for(b->proto);

    c->fd = -1;
    if (ops == NULL) {
        c->bev = NULL;
        evutil_closesocket(fd);
        lk_conn_close(c);
        return;
    }
    peer_text(c);
    /* Accepted once its first bytes came: the first read needs no epoll_wait. */
    c->io.read_now = c->conf->defer_accept;
    if (b->tls) {
        SSL *ssl = SSL_new(w->rt->server_ctx[0]);
        if (ssl == NULL) {
            lk_log_ssl(LK_ERR, c, "SSL_new failed");
            evutil_closesocket(fd);
            lk_conn_close(c);
            return;
        }
        c->fd = fd;
        c->bev = bufferevent_socket_new(base, fd, BEV_OPT_DEFER_CALLBACKS);
        if (c->bev == NULL || SSL_set_fd(ssl, fd) != 1) {
            SSL_free(ssl);
            lk_conn_close(c);
            return;
        }
        SSL_set_accept_state(ssl);
        if (w->rt->auths != NULL)
            lk_tls_set_bind(ssl, b); /* client certificates by cluster: lk_tls.c */
        /* One read takes what the socket has, not a record header and then
         * its body; and a write retried after WANT_WRITE may come from
         * another place in memory (tls_flush). */
        SSL_set_read_ahead(ssl, 1);
        SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        lk_io_attach(&c->io, w, c->bev);
        lk_io_go_tls(&c->io, ssl, &c->rev);
        struct timeval tv = {c->conf->timeout_client_header_ms / 1000,
                             (c->conf->timeout_client_header_ms % 1000) * 1000};
        c->action = "TLS handshaking";
        bufferevent_setcb(c->bev, NULL, NULL, tls_handshake_event, c);
        lk_io_set_timeouts(&c->io, &tv, &tv);
        c->io.hs_deadline_ms = lk_now_ms() + c->conf->timeout_client_header_ms;
        lk_io_enable(&c->io, EV_READ);
        return;
    }
    c->fd = fd;
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_DEFER_CALLBACKS);
    if (c->bev == NULL) {
        lk_conn_close(c);
        return;
    }
    lk_io_attach(&c->io, w, c->bev);
    lk_io_go_plain(&c->io, &c->rev);
    if (inlen != 0 && lk_io_prefill(&c->io, in, inlen) != 0) {
        lk_log(LK_ERR, c, "cannot keep the bytes after the PROXY protocol header: out of memory; "
                          "closed");
        lk_conn_close(c);
        return;
    }
    ops->start(c);
}

/* The PROXY protocol ----------------------------------------------------------
 *
 * A bind with proxy_protocol reads nothing else until it knows who the
 * client is: from proxy_protocol.trusted, the connection must start with a
 * PROXY header of an accepted version, whose source address then names
 * the client everywhere (c->peer: logs, the access log,
 * max_connections_per_client, limit.requests, X-Forwarded-For, the PROXY
 * header lookout sends); from anywhere else, it must not.
 *
 * A plaintext bind reads what comes into buf: one read mostly brings the
 * header and the request after it, and what follows the header goes to
 * the protocol module's input (lk_io_prefill) rather than being read a
 * second time.  A TLS bind takes the header off the socket and nothing
 * after it, so that OpenSSL reads the ClientHello from the socket: the
 * bytes are peeked, and an incomplete header is read into buf (every byte
 * of it is header) and waited on; an untrusted client's first bytes are
 * left where they are, so a prefix of a signature is looked at again after
 * a short pause rather than on a socket that stays readable.
 */
#define LK_PP_WAIT_MAX 1024 /* a v2 header with TLVs up to this is taken */
#define LK_PP_WAIT_BLOCK 2048 /* what a struct pp_wait is allocated as */

struct pp_wait {
    struct lk_conn *c;
    long long deadline_ms;
    size_t have;
    unsigned trusted : 1;
    unsigned readable : 1; /* ev waits for the socket (persistent), else only for time */
    /* The wait's own event, not c->rev: it stays added until the
     * connection's read event is (pp_done), so that the socket stays in
     * epoll throughout, rather than taken out when the header is in and
     * put back for the request: two epoll_ctl calls. */
    struct event ev;
    uint8_t buf[LK_PP_WAIT_MAX];
};

static void pp_cb(evutil_socket_t fd, short what, void *arg);

static void
pp_arm(struct pp_wait *p, int readable)
{
    struct lk_conn *c = p->c;
    long long now = lk_now_ms(), left = p->deadline_ms > now ? p->deadline_ms - now : 0;

    if (!readable && left > 10)
        left = 10;
    struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
    if (readable != p->readable) {
        event_del(&p->ev);
        event_assign(&p->ev, c->w->base, readable ? c->fd : -1, readable ? EV_READ | EV_PERSIST : 0,
                     pp_cb, p);
        p->readable = readable;
    }
    event_add(&p->ev, &tv); /* added again: the time left from now */
}

/* Ends c's wait for its header (c->proto is its struct pp_wait). */
static void
pp_free(struct lk_conn *c)
{
    struct pp_wait *p = c->proto;

    event_del(&p->ev);
    lk_tfree(p);
    c->proto = NULL;
    c->pp_wait = 0;
}

#define PP_UNCOUNTED (-1)

static void
pp_close(struct lk_conn *c, int why, int level, const char *fmt, const char *what)
{
    if (why != PP_UNCOUNTED)
        lk_stat_add(&((struct lk_fe_vals *)lk_stat_vals(c->st))->refused[why], 1);
    lk_log(level, c, fmt, what);
    lk_conn_close(c);
}

static void
pp_wait(struct lk_conn *c, evutil_socket_t fd)
{
    /* Off the pool, which keeps what it holds for the connection's life;
     * a block of 2 KiB, which each thread keeps for the next (lk_tmalloc),
     * as malloc's own cache takes nothing over 1 KiB. */
    _Static_assert(sizeof(struct pp_wait) <= LK_PP_WAIT_BLOCK, "a pp_wait fits its block");
    struct pp_wait *p = lk_tmalloc(LK_PP_WAIT_BLOCK);
    if (p == NULL) {
        lk_log(LK_ERR, c, "cannot wait for a PROXY protocol header: out of memory");
        evutil_closesocket(fd);
        lk_conn_close(c);
        return;
    }
    const struct lk_conf *conf = c->conf;

    memset(p, 0, offsetof(struct pp_wait, buf));
    c->proto = p; /* until pp_done */
    p->c = c;
    p->deadline_ms = lk_now_ms() + conf->timeout_client_header_ms;
    p->trusted = lk_cidr_contains(conf->proxy_protocol_trusted, conf->nproxy_protocol_trusted,
                                  c->peer.family, c->peer.ip) == 1;
    c->fd = fd;
    c->pp_wait = 1;
    c->action = "waiting for its PROXY protocol header";
    /* The header mostly comes with the connection: look before waiting. */
    event_assign(&p->ev, c->w->base, fd, EV_READ | EV_PERSIST, pp_cb, p);
    p->readable = 1;
    pp_cb(fd, EV_READ, p);
}

/* The header is off the socket (or there is none): c goes on as accepted,
 * with what buf has past its first off bytes (plaintext: read after the
 * header). */
static void
pp_done(struct pp_wait *p, size_t off)
{
    struct lk_conn *c = p->c;
    const struct lk_conf *conf = c->conf;
    evutil_socket_t fd = c->fd;

    c->pp_wait = 0;
    c->action = NULL;
    c->proto = NULL;
    if (conf->max_connections_per_client != 0 &&
        lk_limit_take(&c->peer, conf->max_connections_per_client, &c->limit) != 0) {
        event_del(&p->ev);
        lk_tfree(p);
        c->fd = -1;
        refuse(c->st, c->bind, conf, fd, &c->peer, REFUSED_PER_CLIENT);
        lk_conn_close(c);
        return;
    }
    conn_start(c, fd, p->buf + off, p->have - off);
    /* Only now: the connection's read event is added (or it closed), so
     * taking this one off leaves the socket in epoll. */
    event_del(&p->ev);
    lk_tfree(p);
}

/* Takes the header's source as the client. */
static void
pp_take(struct lk_conn *c, const struct lk_pp_hdr *h)
{
    if (h->addr.family != AF_INET && h->addr.family != AF_INET6) {
        c->pp_local = 1; /* LOCAL, UNKNOWN: the balancer's own connection */
        return;
    }
    memset(&c->peer, 0, sizeof(c->peer));
    c->peer.family = (uint8_t)h->addr.family;
    c->peer.port = h->addr.sport;
    memcpy(c->peer.ip, h->addr.src, h->addr.family == AF_INET ? 4 : 16);
    struct lk_addr *dst = &lk_conn_extra(c)->pp_dst;
    dst->family = c->peer.family;
    dst->port = h->addr.dport;
    memcpy(dst->ip, h->addr.dst, sizeof(dst->ip));
}

static void
pp_cb(evutil_socket_t fd, short what, void *arg)
{
    struct pp_wait *p = arg;
    struct lk_conn *c = p->c;
    int peek = c->tls; /* else what comes is read, header or not */
    size_t room = p->trusted || !peek ? sizeof(p->buf) - p->have : LK_PP_V2_MIN;
    char err[128];
    struct lk_pp_hdr h;

    if (lk_now_ms() >= p->deadline_ms) {
        pp_close(c, p->trusted ? REFUSED_PP_BAD : PP_UNCOUNTED, LK_INFO,
                 "no %s within timeout.client_header; closed",
                 p->trusted ? "complete PROXY protocol header" : "first bytes");
        return;
    }
    ssize_t n = recv(c->fd, p->buf + p->have, room, (peek ? MSG_PEEK : 0) | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        const char *why = "the client closed before its first byte";
        if (p->have > 0) /* untrusted: what it sent so far could start a signature */
            why = p->trusted ? "the client closed within its PROXY protocol header"
                             : "the client closed after the start of a PROXY protocol signature";
        pp_close(c, PP_UNCOUNTED, LK_INFO, "%s; closed", why);
        return;
    }
    if (n < 0) {
        pp_arm(p, 1);
        return;
    }
    size_t len = p->have + (size_t)n; /* what buf shows */
    if (!peek)
        p->have = len;
    if (!p->trusted) {
        int d = lk_pp_detect(p->buf, len, LK_PP_ANY);
        if (d == 1)
            pp_close(c, REFUSED_PP_UNTRUSTED, LK_WARN,
                     "a PROXY protocol header from an address not in %s; closed",
                     "proxy_protocol.trusted");
        else if (d == 0)
            pp_done(p, 0);
        else
            pp_arm(p, !peek); /* a read prefix: the socket says when more comes */
        return;
    }
    int r = lk_pp_parse(p->buf, len, c->bind->proxy_protocol, &h, err, sizeof(err));
    if (r < 0) {
        pp_close(c, REFUSED_PP_BAD, LK_WARN,
                 "bad PROXY protocol header from a trusted address: %s; closed", err);
        return;
    }
    if (peek) {
        /* Off the socket: the rest of the header (r > 0), or all there is of it. */
        size_t take = r > 0 ? (size_t)r - p->have : (size_t)n;
        if (recv(c->fd, p->buf + p->have, take, MSG_DONTWAIT) != (ssize_t)take) {
            pp_close(c, PP_UNCOUNTED, LK_INFO, "%s; closed",
                     "the PROXY protocol header could not be read");
            return;
        }
        p->have += take;
    }
    if (r > 0) {
        pp_take(c, &h);
        pp_done(p, (size_t)r);
    } else if (p->have == sizeof(p->buf)) {
        pp_close(c, REFUSED_PP_BAD, LK_WARN,
                 "a PROXY protocol header over %s bytes, lookout's limit; closed", "1024");
    } else {
        pp_arm(p, 1);
    }
}
