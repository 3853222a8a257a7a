/*
 * The Kafka protocol module (lk_kafka.c), as the connection layer sees it:
 * one table of operations, started on each connection accepted on a Kafka
 * bind.  The registry (lk_protos.c) is its only user.
 */
#ifndef LK_KAFKA_H
#define LK_KAFKA_H

struct lk_proto_ops;

extern const struct lk_proto_ops lk_proto_kafka;

#endif
