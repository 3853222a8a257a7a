/*
 * The Pulsar binary protocol module (lk_pulsar.c), as the connection layer
 * sees it: one table of operations, started on each connection accepted on
 * a Pulsar binary bind.  The registry (lk_protos.c) is its only user.
 */
#ifndef LK_PULSAR_H
#define LK_PULSAR_H

struct lk_proto_ops;

extern const struct lk_proto_ops lk_proto_pulsar;

#endif
