/*
 * Tests for the pure parts of proxy/lk_conn.c: routing on a bound socket
 * (SNI, then Host, then the bound address) and broker health.
 */
#include <string.h>

#include "lk_conf.h"
#include "lk_conn.h"
#include "lk_test.h"

static void
test_route(void)
{
    struct lk_broker b1 = {.name = "prod/b1"}, b2 = {.name = "prod/b2"};
    struct lk_vhost shared[] = {
        {.host = "b1.lookout.test", .port = 8443, .broker = &b1},
        {.host = "b2.lookout.test", .port = 8443, .broker = &b2},
        {.host = "pulsar.lookout.test", .port = 8443, .broker = NULL},
    };
    struct lk_vhost single[] = {{.host = "127.0.0.1", .port = 18081, .broker = &b1}};
    struct lk_bind sb = {.text = "0.0.0.0:8443", .vhosts = shared, .nvhosts = 3};
    struct lk_bind ub = {.text = "127.0.0.1:18081", .vhosts = single, .nvhosts = 1};

    ok(lk_route(&sb, LK_STRLIT("b2.lookout.test"), LK_STR_NULL) == &shared[1], "SNI picks");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("B1.Lookout.Test:8443")) == &shared[0],
       "Host picks, case-insensitive, port ignored");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test.")) == &shared[0], "absolute FQDN");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("pulsar.lookout.test")) == &shared[2],
       "the service address");
    ok(lk_route(&sb, LK_STRLIT("b1.lookout.test"), LK_STRLIT("b1.lookout.test")) == &shared[0],
       "SNI and Host agree");
    ok(lk_route(&sb, LK_STRLIT("b1.lookout.test"), LK_STRLIT("b2.lookout.test")) == NULL,
       "SNI and Host disagree: misdirected");
    ok(lk_route(&sb, LK_STRLIT("b1.lookout.test"), LK_STRLIT("unknown.test")) == NULL,
       "an unmapped Host under a mapped SNI: misdirected");
    ok(lk_route(&sb, LK_STRLIT("x.lookout.test"), LK_STRLIT("b1.lookout.test")) == NULL,
       "an unmapped SNI under a mapped Host: misdirected");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test:1")) == NULL,
       "the right name with the wrong port: misdirected");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test:")) == &shared[0], "empty port");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("b1.lookout.test:99999")) == NULL, "bad port");
    ok(lk_route(&sb, LK_STR_NULL, LK_STRLIT("evil.example.com")) == NULL, "unknown Host: 421");
    ok(lk_route(&sb, LK_STRLIT("evil.example.com"), LK_STR_NULL) == NULL, "unknown SNI: 421");
    ok(lk_route(&sb, LK_STR_NULL, LK_STR_NULL) == NULL, "nothing to go by on a shared socket");
    ok(lk_route(&ub, LK_STR_NULL, LK_STRLIT("localhost:18081")) == &single[0],
       "an unshared socket: the bound address decides");
    ok(lk_route(&ub, LK_STR_NULL, LK_STRLIT("[::1]:18081")) == &single[0], "IPv6 Host");
}

const struct lk_test_case lk_test_conn[] = {
    {"conn/route", test_route},
    {NULL, NULL},
};
