/*
 * Routing on a bound socket (lk_route.c).
 */
#ifndef LK_ROUTE_H
#define LK_ROUTE_H

#include "lk_conf.h"
#include "lk_str.h"

/*
 * Routing on a bound socket: the vhost named by sni (if any), else by the
 * Host header's host, else the bind's only vhost.  Returns NULL when the
 * bind is shared and nothing matches, or when SNI and Host name different
 * vhosts (421 for HTTP).  With host_must_match, host must name a vhost of
 * the bind even when the bind has only one (an absolute-form target).
 */
const struct lk_vhost *lk_route(const struct lk_bind *b, struct lk_str sni, struct lk_str host,
                                int host_must_match);

/* Whether a and b are the same socket: address, TLS-ness and protocol (a
 * kept listener keeps its fd; anything else is a new socket). */
int lk_bind_same(const struct lk_bind *a, const struct lk_bind *b);
/* conf's bind that is the same socket as b, or NULL. */
const struct lk_bind *lk_bind_find(const struct lk_conf *conf, const struct lk_bind *b);

#endif
