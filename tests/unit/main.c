/*
 * The unit-test binary, tests/unit/run: one entry per test_<module>.c case
 * table (libevent's regress_main.c).  Add a group: declare its table and
 * list it, in any order.
 */
#include <stddef.h>

#include "lk_test.h"

extern const struct lk_test_case lk_test_url[];
extern const struct lk_test_case lk_test_json[];
extern const struct lk_test_case lk_test_conf[];
extern const struct lk_test_case lk_test_http_msg[];
extern const struct lk_test_case lk_test_location[];
extern const struct lk_test_case lk_test_proxyproto[];
extern const struct lk_test_case lk_test_filter[];
extern const struct lk_test_case lk_test_conn[];
extern const struct lk_test_case lk_test_dial[];
extern const struct lk_test_case lk_test_ppout[];
extern const struct lk_test_case lk_test_flt_listener[];
extern const struct lk_test_case lk_test_flt_lookup[];
extern const struct lk_test_case lk_test_match[];
extern const struct lk_test_case lk_test_flt_leak_guard[];
extern const struct lk_test_case lk_test_kafka_codec[];
extern const struct lk_test_case lk_test_pulsar_codec[];
extern const struct lk_test_case lk_test_stats[];
extern const struct lk_test_case lk_test_access[];
extern const struct lk_test_case lk_test_registry[];
extern const struct lk_test_case lk_test_zk[];
extern const struct lk_test_case lk_test_limit[];
extern const struct lk_test_case lk_test_ratelimit[];
extern const struct lk_test_case lk_test_hold[];
extern const struct lk_test_case lk_test_age[];
extern const struct lk_test_case lk_test_uring[];
extern const struct lk_test_case lk_test_io[];
extern const struct lk_test_case lk_test_pool[];
extern const struct lk_test_case lk_test_tls[];
extern const struct lk_test_case lk_test_clock[];

static const struct lk_test_case *const groups[] = {
    lk_test_url,
    lk_test_json,
    lk_test_conf,
    lk_test_http_msg,
    lk_test_location,
    lk_test_proxyproto,
    lk_test_filter,
    lk_test_conn,
    lk_test_dial,
    lk_test_ppout,
    lk_test_flt_listener,
    lk_test_flt_lookup,
    lk_test_match,
    lk_test_flt_leak_guard,
    lk_test_kafka_codec,
    lk_test_pulsar_codec,
    lk_test_stats,
    lk_test_access,
    lk_test_registry,
    lk_test_zk,
    lk_test_limit,
    lk_test_ratelimit,
    lk_test_hold,
    lk_test_age,
    lk_test_pool,
    lk_test_tls,
    lk_test_clock,
    lk_test_uring,
    lk_test_io,
    NULL,
};

int
main(int argc, char **argv)
{
    return lk_test_main(groups, argc, argv);
}
