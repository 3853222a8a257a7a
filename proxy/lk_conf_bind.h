/*
 * Bind planning: every lookup-listener, service and bootstrap address of
 * the map becomes a virtual host on a socket to bind (the binding rule,
 * CONTRACT section 2), with the checks that keep sockets apart and keep
 * lookout from dialling itself.
 */
#ifndef LK_CONF_BIND_H
#define LK_CONF_BIND_H

#include "lk_conf.h"
#include "lk_conf_ini.h"

/* Plans c's binds from its resolved clusters.  0, or -1 with the message. */
int lk_conf_build_binds(struct lk_loader *ld);
/* The LK_PROTO_* a scheme is served by, and a protocol's name. */
unsigned lk_scheme_proto(enum lk_scheme scheme);
const char *lk_proto_name(unsigned proto);

#endif
