/*
 * Which broker gets traffic: round-robin over a cluster's brokers, skipping
 * those whose health state (struct lk_broker_health, per generation) says
 * they are backed off after connect failures or ejected by active checks
 * (lk_health.c runs those).  Callable from any worker: atomics only.
 */
#include <event2/buffer.h>

#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_log.h"
#include "lk_runtime.h"
#include "lk_stats.h"

int
lk_broker_up(const struct lk_runtime *rt, const struct lk_broker *b)
{
    const struct lk_broker_health *h = &rt->health[b->index];

    /* check_down counts only while checks run: a reload that turns them
     * off must not leave a broker out with nothing to readmit it. */
    if (b->cluster->health.check != LK_HEALTH_CHECK_OFF &&
        __atomic_load_n(&h->check_down, __ATOMIC_RELAXED))
        return 0;
    return __atomic_load_n(&h->retry_after_ms, __ATOMIC_RELAXED) <= lk_now_ms();
}

unsigned
lk_broker_fails(const struct lk_runtime *rt, const struct lk_broker *b)
{
    return __atomic_load_n(&rt->health[b->index].fails, __ATOMIC_RELAXED);
}

unsigned
lk_broker_check_fails(const struct lk_runtime *rt, const struct lk_broker *b)
{
    return __atomic_load_n(&rt->health[b->index].check_fails, __ATOMIC_RELAXED);
}

const struct lk_broker *
lk_pick_broker(struct lk_runtime *rt, const struct lk_cluster *cl, enum lk_scheme family)
{
    const struct lk_broker *any = NULL;

    if (cl->nbrokers == 0)
        return NULL;
    unsigned start = __atomic_fetch_add(&rt->rr[cl->index], 1, __ATOMIC_RELAXED);
    for (size_t k = 0; k < cl->nbrokers; k++) {
        const struct lk_broker *b = cl->brokers[(start + k) % cl->nbrokers];
        /* A broker without an internal address of the family (a map of
         * binary addresses only, for HTTP) is never one to send it to. */
        if (lk_listener_pick(b->internal, family, 0) == NULL)
            continue;
        if (lk_broker_up(rt, b))
            return b;
        if (any == NULL)
            any = b;
    }
    /* All are failing: try anyway rather than refuse outright. */
    return any;
}

void
lk_broker_connect_result(struct lk_runtime *rt, const struct lk_broker *b, int ok)
{
    struct lk_broker_health *h = &rt->health[b->index];
    const struct lk_health_conf *hc = &b->cluster->health;

    if (ok) {
        if (__atomic_exchange_n(&h->fails, 0, __ATOMIC_RELAXED) != 0)
            __atomic_store_n(&h->retry_after_ms, 0, __ATOMIC_RELAXED);
        return;
    }
    unsigned fails = __atomic_add_fetch(&h->fails, 1, __ATOMIC_RELAXED);
    if (fails < hc->fails)
        return;
    /* health.backoff, doubled per failure past the threshold, capped;
     * the shift is bounded so that it cannot overflow. */
    unsigned extra = fails - hc->fails;
    long long backoff = (long long)hc->backoff_ms << (extra < 20 ? extra : 20);
    if (backoff > hc->backoff_max_ms)
        backoff = hc->backoff_max_ms;
    __atomic_store_n(&h->retry_after_ms, lk_now_ms() + backoff, __ATOMIC_RELAXED);
    lk_log(fails == hc->fails ? LK_WARN : LK_DEBUG, NULL,
           "broker %s: %u connect failure%s in a row: out of rotation for %lld ms", b->name, fails,
           fails == 1 ? "" : "s", backoff);
}

void
lk_broker_check_result(struct lk_runtime *rt, const struct lk_broker *b, int ok)
{
    struct lk_broker_health *h = &rt->health[b->index];

    if (ok) {
        __atomic_store_n(&h->check_fails, 0, __ATOMIC_RELAXED);
        /* It takes connections again: whatever clients saw before is past. */
        lk_broker_connect_result(rt, b, 1);
        if (__atomic_exchange_n(&h->check_down, 0, __ATOMIC_RELAXED))
            lk_log(LK_WARN, NULL, "broker %s: health check passed: back in rotation", b->name);
        return;
    }
    unsigned fails = __atomic_add_fetch(&h->check_fails, 1, __ATOMIC_RELAXED);
    if (fails >= b->cluster->health.fails &&
        !__atomic_exchange_n(&h->check_down, 1, __ATOMIC_RELAXED))
        lk_log(LK_WARN, NULL, "broker %s: %u health check%s failed in a row: out of rotation",
               b->name, fails, fails == 1 ? "" : "s");
}

void
lk_broker_write_health(struct evbuffer *out, const void *arg)
{
    const struct lk_runtime *rt = arg;

    if (rt == NULL)
        return;
    const struct lk_conf *conf = rt->conf;
    lk_stats_family(
        out, "lookout_broker_up", "gauge",
        "1 unless the broker is skipped for now: its connects are failing, or its health "
        "checks.");
    for (size_t i = 0; i < conf->nbrokers; i++) {
        lk_stats_series(out, "lookout_broker_up", "broker", conf->brokers[i]->name, NULL, NULL,
                        NULL, NULL);
        evbuffer_add_printf(out, "%d\n", lk_broker_up(rt, conf->brokers[i]));
    }
    lk_stats_family(out, "lookout_broker_connect_failures", "gauge",
                    "Consecutive failed connects to the broker (0 after a success).");
    for (size_t i = 0; i < conf->nbrokers; i++) {
        lk_stats_series(out, "lookout_broker_connect_failures", "broker", conf->brokers[i]->name,
                        NULL, NULL, NULL, NULL);
        evbuffer_add_printf(out, "%u\n", __atomic_load_n(&rt->health[i].fails, __ATOMIC_RELAXED));
    }
}
