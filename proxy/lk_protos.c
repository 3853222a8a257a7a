/*
 * The protocol registry (lk_protos.h).
 */
#include <stddef.h>

#include "lk_conf.h"
#include "lk_http.h"
#include "lk_kafka.h"
#include "lk_protos.h"
#include "lk_pulsar.h"

const struct lk_proto_ops *
lk_proto_for(unsigned proto)
{
    if (proto == LK_PROTO_HTTP)
        return &lk_proto_http;
    if (proto == LK_PROTO_KAFKA)
        return &lk_proto_kafka;
    if (proto == LK_PROTO_PULSAR)
        return &lk_proto_pulsar;
    return NULL;
}
