/*
 * Dialling a broker: connects a bufferevent to one of its internal
 * addresses, and, when the broker's cluster sets internal_networks, only
 * to an address inside them.  A broker's internal address may be a host
 * name (brokers often register names, and Kafka nodes are learnt from
 * Metadata at run time), so a check when the map is built does not hold:
 * the name could resolve anywhere by the time lookout dials it.  Here a
 * name is resolved on the caller's loop (evdns, never a blocking
 * getaddrinfo), the answers outside internal_networks are dropped, and
 * the first one left is dialled, as libevent's own
 * bufferevent_socket_connect_hostname dials only the first answer.  An IP
 * literal is checked as it stands.  Without internal_networks every
 * address passes, and a name is still resolved here (libevent's own lookup
 * in bufferevent_socket_connect_hostname cannot be cancelled safely when
 * the resolver is freed with a generation's health checks); an IP literal
 * is connected at once.  Both the upstream
 * connections (lk_upstream.c) and the active health checks (lk_health.c) dial
 * through here.
 */
#ifndef LK_DIAL_H
#define LK_DIAL_H

#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <openssl/ssl.h>

#include "lk_registry.h"

struct lk_rt_stats;

/* Why a dial refused to connect: every address of the broker lies outside
 * its cluster's internal_networks. */
extern const char lk_err_outside_networks[];

struct lk_dial_req;

/* One dial, embedded in its owner (an upstream, a health probe); zeroed
 * before the first lk_dial_start. */
struct lk_dial {
    struct lk_dial_req *req; /* while a name is being resolved */
    /* Set when the dial itself failed, before any connect: error is
     * lk_err_outside_networks (already logged at LK_ERR and counted in
     * lookout_upstream_errors_total), or dns_error an EVUTIL_EAI_* code. */
    const char *error;
    int dns_error;
};

/*
 * Starts connecting bev (made with fd -1, its callbacks set and
 * EV_READ|EV_WRITE enabled) to addr, an internal address of broker b,
 * resolving a name on dns; a refusal counts in stats (the series of b's
 * generation).  timeout_ms bounds the whole
 * dial from now, the name lookup included: it becomes bev's read and write
 * timeouts, which the caller may change once connected.  The outcome
 * always comes back through bev's event callback, from the loop and never
 * before this returns: BEV_EVENT_CONNECTED, a timeout, or
 * BEV_EVENT_ERROR, after which d->error and lk_dial_dns_error say whether
 * the dial step failed rather than the connect.  The caller keeps stats, b
 * and addr alive until the outcome or lk_dial_cancel.
 */
void lk_dial_start(struct lk_dial *d, struct bufferevent *bev, struct evdns_base *dns,
                   struct lk_rt_stats *stats, const struct lk_broker *b, const struct lk_url *addr,
                   unsigned timeout_ms);
/* Stops a name lookup still under way (nothing if none is), so that the
 * owner of d and bev may be freed: the lookup's callback, which libevent
 * still runs once, touches neither.  Call it before freeing bev. */
void lk_dial_cancel(struct lk_dial *d);
/* The same for an owner about to free dns itself, with
 * evdns_base_free(dns, 1): leaves the lookup to fail with the resolver
 * (libevent then calls back without touching dns), since a cancelled
 * lookup's late callback would read the freed evdns_base. */
void lk_dial_abandon(struct lk_dial *d);
/* The resolver error behind a BEV_EVENT_ERROR on bev, whether it came from
 * the dial's own lookup or libevent's: an EVUTIL_EAI_* code, or 0. */
int lk_dial_dns_error(const struct lk_dial *d, struct bufferevent *bev);

/*
 * upstream.proxy_protocol: *bevp, a socket bufferevent whose dial has just
 * connected, gets hdr[len] (a PROXY protocol header) written on its socket
 * before anything else.  With ssl (the connection is TLS), TLS then starts
 * on the same socket: *bevp becomes a TLS bufferevent with opts, in the
 * connecting state, with the plain one's callbacks, EV_READ|EV_WRITE on and
 * timeout_ms for its handshake, whose event callback gets
 * BEV_EVENT_CONNECTED once the handshake is done; the plain one is freed.
 * The header goes first and unencrypted, as the PROXY protocol wants, and
 * nothing is copied through a filter bufferevent.  0, or -1 with errno
 * when the socket did not take the header at once or the TLS bufferevent
 * could not be made (*bevp is then unchanged, ssl freed).
 */
int lk_dial_proxy_header(struct bufferevent **bevp, const uint8_t *hdr, size_t len, SSL *ssl,
                         int opts, unsigned timeout_ms);

/*
 * The pure step of a dial: of the resolver's answers ai, the first whose
 * address lies in nets[n] (lk_cidr_contains; any address when n is 0), or
 * NULL if none does.
 * Writes every answer's address, ", "-separated, into seen[seenlen] for
 * the log, ending in "..." when it does not fit.
 */
const struct evutil_addrinfo *lk_dial_pick(const struct lk_cidr *nets, size_t n,
                                           const struct evutil_addrinfo *ai, char *seen,
                                           size_t seenlen);

#endif
