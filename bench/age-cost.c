/*
 * age-cost: what max_connection_age's deadlines would cost a worker, two ways, to choose
 * between them (proxy/lk_age.c took the second):
 *  - a sweep: a persistent timer per worker walking every connection a few times a second,
 *    reading each one's deadline.  Modelled here with N structs of struct lk_conn's size
 *    (472 bytes), in blocks of 64 as lk_conn.c's slab, linked in a shuffled order as a
 *    worker's list ends up, walked with cold caches (64 MiB of other work in between);
 *  - a timer per connection: evtimer_new and evtimer_add with a jittered timeout at accept,
 *    event_free at close, with N pending in libevent's min-heap.
 *
 *   cc -O2 bench/age-cost.c -o /tmp/age-cost $(pkg-config --cflags --libs libevent)
 *   /tmp/age-cost
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <event2/event.h>

struct conn {
    char pad0[200];
    long long due;
    struct conn *prev, *next;
    char pad1[472 - 200 - 8 - 16];
};

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void
fire(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what, (void)arg;
}

static void
sweep(int n)
{
    struct conn **v = malloc(n * sizeof(*v));
    size_t big = 64u << 20;
    char *junk = malloc(big);
    double best = 1e9;
    long long due = 0;

    for (int i = 0; i < n; i += 64) {
        struct conn *b = calloc(64, sizeof(*b));
        for (int j = 0; j < 64 && i + j < n; j++)
            v[i + j] = &b[j];
    }
    for (int i = n - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        struct conn *t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    for (int i = 0; i < n; i++) {
        v[i]->next = i + 1 < n ? v[i + 1] : NULL;
        v[i]->due = 1000000 + i;
    }
    for (int r = 0; r < 5; r++) {
        for (size_t k = 0; k < big; k += 64)
            junk[k]++;
        double t0 = now();
        for (struct conn *c = v[0]; c != NULL; c = c->next)
            due += c->due != 0 && c->due < 500;
        double t = now() - t0;
        best = t < best ? t : best;
    }
    printf("sweep, %6d connections: %7.3f ms a tick (%4.0f ns each)%s\n", n, best * 1e3,
           best * 1e9 / n, due ? "" : "");
}

static void
timers(int n)
{
    struct event_base *b = event_base_new();
    struct event **e = malloc(n * sizeof(*e));
    double t0 = now();

    for (int i = 0; i < n; i++) {
        struct timeval tv = {540 + rand() % 120, rand() % 1000000};
        e[i] = evtimer_new(b, fire, NULL);
        evtimer_add(e[i], &tv);
    }
    double t1 = now();
    for (int i = 0; i < n; i++)
        event_free(e[i]);
    double t2 = now();
    printf("timer, %6d pending:     %4.0f ns to make and arm one, %4.0f ns to free one (once a "
           "connection)\n", n, (t1 - t0) * 1e9 / n, (t2 - t1) * 1e9 / n);
    event_base_free(b);
    free(e);
}

int
main(void)
{
    for (int n = 1000; n <= 100000; n *= 10)
        sweep(n);
    for (int n = 1000; n <= 100000; n *= 10)
        timers(n);
    return 0;
}
