/*
 * Tests for proxy/lk_age.c: the age each connection gets (within the
 * jitter, spread evenly over it), and the check
 * at a response head (nothing when off, nothing before the deadline).
 */
#include <string.h>

#include "lk_age.h"
#include "lk_test.h"

static void
test_pick(void)
{
    unsigned bins[10] = {0};
    uint64_t lo = UINT64_MAX, hi = 0;
    int in_range = 1;

    ok(lk_age_pick(20000, 0, 12345) == 20000, "no jitter: the age itself");
    ok(lk_age_pick(0, 10, 99) == 0, "no age: 0");
    ok(lk_age_pick(5, 10, 7) == 5, "a jitter under 1 ms: the age itself");
    ok(lk_age_pick(20000, 10, 0) == 18000, "r 0: the shortest, 10%% under");
    ok(lk_age_pick(20000, 10, 4000) == 22000, "r at the span: the longest, 10%% over");
    ok(lk_age_pick(20000, 10, 4001) == 18000, "and r wraps round");
    ok(lk_age_pick(4000000000u, 50, UINT64_MAX - 1) <= 6000000000ull,
       "the longest age with 50%% does not wrap (%llu)",
       (unsigned long long)lk_age_pick(4000000000u, 50, UINT64_MAX - 1));
    /* splitmix-like spread of r: the picks cover the range evenly */
    uint64_t r = 0x1234;
    for (int i = 0; i < 10000; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t a = lk_age_pick(10000, 20, r >> 11);
        if (a < 8000 || a > 12000)
            in_range = 0;
        lo = a < lo ? a : lo;
        hi = a > hi ? a : hi;
        bins[a == 12000 ? 9 : (a - 8000) / 400]++;
    }
    ok(in_range, "10000 picks of 10s +-20%%: all within 8s..12s (%llu..%llu)",
       (unsigned long long)lo, (unsigned long long)hi);
    int even = 1;
    for (int i = 0; i < 10; i++)
        if (bins[i] < 850 || bins[i] > 1150)
            even = 0;
    ok(even, "... spread evenly: each tenth of the range has 850..1150 of them (%u %u %u %u %u "
       "%u %u %u %u %u)", bins[0], bins[1], bins[2], bins[3], bins[4], bins[5], bins[6], bins[7],
       bins[8], bins[9]);
}

static void
test_passed(void)
{
    struct lk_conn c;
    struct lk_conn_extra x;

    memset(&c, 0, sizeof(c));
    memset(&x, 0, sizeof(x));
    ok(!lk_age_passed(&c), "off (no extra): never");
    c.extra = &x;
    ok(!lk_age_passed(&c), "off (no deadline): never");
    x.age_due_ms = lk_now_ms() + 60000;
    ok(!lk_age_passed(&c) && !c.aged, "before its deadline: not yet");
    c.aged = 1;
    ok(lk_age_passed(&c), "once past it (its grace running): still past it");
}

const struct lk_test_case lk_test_age[] = {
    {"age/pick", test_pick},
    {"age/passed", test_passed},
    {NULL, NULL},
};
