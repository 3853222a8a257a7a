/*
 * Tests for proxy/lk_limit.c: connections counted by client (an IPv4
 * address, an IPv6 /64, a mapped IPv4 as its IPv4), refused at the cap,
 * and entries that go with their client's last connection, also when
 * several threads take and drop at once.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lk_limit.h"
#include "lk_test.h"

static struct sockaddr_storage
addr(const char *ip, unsigned short port)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        inet_pton(AF_INET6, ip, &s6->sin6_addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        inet_pton(AF_INET, ip, &s4->sin_addr);
    }
    return ss;
}

/* ss as lookout keeps a client's address (struct lk_conn's peer) */
static const struct lk_addr *
addr_of(const struct sockaddr_storage *ss, struct lk_addr *a)
{
    lk_addr_of(a, (const struct sockaddr *)ss);
    return a;
}
#define SA(ss) addr_of(&(ss), &(struct lk_addr){.family = 0})

static void
test_counts(void)
{
    struct lk_limit_slot *s[4], *x;
    struct sockaddr_storage a = addr("10.0.0.1", 1), b = addr("10.0.0.2", 1);
    size_t base = lk_limit_clients();

    for (int i = 0; i < 3; i++)
        ok(lk_limit_take(SA(a), 3, &s[i]) == 0 && s[i] != NULL, "10.0.0.1: connection %d", i + 1);
    ok(lk_limit_take(SA(a), 3, &x) == -1 && x == NULL, "the 4th over a cap of 3 is refused");
    ok(lk_limit_count(SA(a)) == 3, "... and not counted");
    ok(lk_limit_take(SA(b), 3, &s[3]) == 0, "another address is not held back");
    ok(lk_limit_clients() == base + 2, "two clients in the table");
    lk_limit_drop(s[0]);
    ok(lk_limit_take(SA(a), 3, &s[0]) == 0, "one closed: one more may come");
    for (int i = 0; i < 4; i++)
        lk_limit_drop(s[i]);
    ok(lk_limit_clients() == base, "every entry went with its last connection");
    ok(lk_limit_count(SA(a)) == 0, "10.0.0.1 holds none");
    ok(lk_limit_take(SA(a), 0, &x) == -1, "a cap of 0 takes none");
    lk_limit_drop(NULL);
    ok(lk_limit_clients() == base, "dropping NULL does nothing");
}

static void
test_families(void)
{
    struct lk_limit_slot *s[3], *x;
    struct sockaddr_storage a = addr("2001:db8:1:2::1", 1), b = addr("2001:db8:1:2:ffff::9", 2),
                            c = addr("2001:db8:1:3::1", 1), v4 = addr("192.0.2.7", 1),
                            mapped = addr("::ffff:192.0.2.7", 1);
    struct sockaddr_storage unix_ss;

    ok(lk_limit_take(SA(a), 2, &s[0]) == 0 && lk_limit_take(SA(b), 2, &s[1]) == 0,
       "two addresses of one IPv6 /64");
    ok(lk_limit_take(SA(a), 2, &x) == -1, "... are one client: a third from it is refused");
    ok(lk_limit_take(SA(c), 2, &s[2]) == 0, "the next /64 is another client");
    lk_limit_drop(s[2]);
    lk_limit_drop(s[1]);
    lk_limit_drop(s[0]);
    ok(lk_limit_take(SA(v4), 1, &s[0]) == 0, "192.0.2.7");
    ok(lk_limit_take(SA(mapped), 1, &x) == -1, "::ffff:192.0.2.7 is the same client");
    ok(lk_limit_count(SA(mapped)) == 1, "... sharing its count");
    lk_limit_drop(s[0]);
    memset(&unix_ss, 0, sizeof(unix_ss));
    unix_ss.ss_family = AF_UNIX;
    ok(lk_limit_take(SA(unix_ss), 1, &x) == 0 && x == NULL, "another family is not counted");
}

/* Threads taking and dropping connections of the same few clients. */
static void *
churn(void *arg)
{
    int *refused = arg;

    for (int i = 0; i < 20000; i++) {
        char ip[32];
        struct lk_limit_slot *s[4];
        snprintf(ip, sizeof(ip), "10.1.0.%d", i % 7);
        struct sockaddr_storage a = addr(ip, 1);
        int n = 0;
        while (n < 4 && lk_limit_take(SA(a), 6, &s[n]) == 0)
            n++;
        *refused += n < 4;
        while (n > 0)
            lk_limit_drop(s[--n]);
    }
    return NULL;
}

static void
test_threads(void)
{
    pthread_t t[4];
    int refused[4] = {0};
    size_t base = lk_limit_clients();

    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, &refused[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ok(lk_limit_clients() == base, "four threads' churn leaves no entry behind");
    int left = 0;
    for (int i = 0; i < 7; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.1.0.%d", i);
        struct sockaddr_storage a = addr(ip, 1);
        left += (int)lk_limit_count(SA(a));
    }
    ok(left == 0, "and no count (refusals along the way: %d)",
       refused[0] + refused[1] + refused[2] + refused[3]);
}

/* A client's address as text (logs, the access log, X-Forwarded-For):
 * IPv4 by hand, checked against inet_ntop at the edges of each octet. */
static void
test_text(void)
{
    static const char *const v4[] = {"0.0.0.0", "9.10.99.100", "255.255.255.255", "127.0.0.1",
                                     "1.20.255.0"};
    char text[LK_ADDR_TEXT], want[LK_ADDR_TEXT];
    struct sockaddr_storage ss;
    struct lk_addr a;

    for (size_t i = 0; i < sizeof(v4) / sizeof(v4[0]); i++) {
        ss = addr(v4[i], (unsigned short)(i == 2 ? 65535 : i * 1000));
        lk_addr_of(&a, (const struct sockaddr *)&ss);
        snprintf(want, sizeof(want), "%s:%u", v4[i], a.port);
        ok(lk_addr_text(&a, 1, text) == strlen(want) && strcmp(text, want) == 0,
           "IPv4 with its port: %s", text);
        ok(lk_addr_text(&a, 0, text) == strlen(v4[i]) && strcmp(text, v4[i]) == 0,
           "IPv4 alone: %s", text);
    }
    ss = addr("2001:db8::5", 443);
    lk_addr_of(&a, (const struct sockaddr *)&ss);
    ok(lk_addr_text(&a, 1, text) == 17 && strcmp(text, "[2001:db8::5]:443") == 0,
       "IPv6 with its port, bracketed: %s", text);
    ok(lk_addr_text(&a, 0, text) == 11 && strcmp(text, "2001:db8::5") == 0, "IPv6 alone: %s",
       text);
    ss = addr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    lk_addr_of(&a, (const struct sockaddr *)&ss);
    ok(lk_addr_text(&a, 1, text) < LK_ADDR_TEXT &&
           strcmp(text, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535") == 0,
       "the longest fits: %s", text);
    memset(&ss, 0, sizeof(ss));
    ss.ss_family = AF_UNIX;
    lk_addr_of(&a, (const struct sockaddr *)&ss);
    ok(a.family == 0 && lk_addr_text(&a, 1, text) == 0 && text[0] == '\0',
       "no address: empty text");
}

const struct lk_test_case lk_test_limit[] = {
    {"limit/text", test_text},
    {"limit/counts", test_counts},
    {"limit/families", test_families},
    {"limit/threads", test_threads},
    {NULL, NULL},
};
