/*
 * The protocol registry: which module serves a bind's protocol.  It sits
 * above the modules and the workers alike, as filters/filters.c sits above
 * the filters: lk_main.c hands lk_proto_for to lk_workers_start, and the
 * connection layer reaches a module through its worker (struct lk_worker's
 * proto_for), never by name.  A new protocol is a module with its
 * lk_proto_ops, an LK_PROTO_* bit, and a line here.
 */
#ifndef LK_PROTOS_H
#define LK_PROTOS_H

struct lk_proto_ops;

/* The module of LK_PROTO_* proto, or NULL for none. */
const struct lk_proto_ops *lk_proto_for(unsigned proto);

#endif
