/*
 * The filter registry: every filter lookout knows.  A cluster's chain is the
 * order of its `filters =` key; without one it is lk_flt_default_chain.
 */
#include <stddef.h>

#include "lk_filter.h"

extern const struct lk_flt_ops lk_flt_listener;
extern const struct lk_flt_ops lk_flt_location;
extern const struct lk_flt_ops lk_flt_lookup;
extern const struct lk_flt_ops lk_flt_leak_guard;
extern const struct lk_flt_ops lk_flt_kafka;
extern const struct lk_flt_ops lk_flt_pulsar;

const struct lk_flt_ops *const lk_flt_registry[] = {
    &lk_flt_listener,
    &lk_flt_location,
    &lk_flt_lookup,
    &lk_flt_leak_guard,
    &lk_flt_kafka,
    &lk_flt_pulsar,
    NULL,
};

const char *const lk_flt_default_chain[] = {
    "listener",
    "lookup",
    "location",
    "pulsar",     /* the Pulsar binary protocol's (binary exchanges only) */
    "kafka",      /* Kafka clusters' rewriting one */
    "leak_guard", /* last: it checks what every other filter left, text and binary */
    NULL,
};
