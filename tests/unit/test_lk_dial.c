/*
 * Tests for proxy/lk_dial.c: the pick among resolved addresses (pure), and
 * dials on a real loop against 127.0.0.1, with names from a hosts file
 * given to evdns (no network, no /etc/hosts), and name servers on
 * 127.0.0.1 that answer "no such name" or never (the timeout, and the
 * cancel while a lookup is under way).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include "lk_clock.h"
#include "lk_dial.h"
#include "lk_registry.h"
#include "lk_test.h"

static void
set_sin(struct sockaddr_storage *ss, struct evutil_addrinfo *ai, const char *ip)
{
    memset(ss, 0, sizeof(*ss));
    memset(ai, 0, sizeof(*ai));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &s6->sin6_addr);
        ai->ai_addrlen = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, ip, &s4->sin_addr);
        ai->ai_addrlen = sizeof(*s4);
    }
    ai->ai_family = ss->ss_family;
    ai->ai_addr = (struct sockaddr *)ss;
}

static void
test_pick(void)
{
    static const char *const ips[] = {"10.1.2.3", "::1", "127.0.0.9", "::ffff:127.0.0.1"};
    struct sockaddr_storage ss[4];
    struct evutil_addrinfo ai[4];
    struct lk_cidr *nets = NULL;
    char err[128], seen[64];
    int n;

    for (int i = 0; i < 4; i++) {
        set_sin(&ss[i], &ai[i], ips[i]);
        ai[i].ai_next = i < 3 ? &ai[i + 1] : NULL;
    }
    n = lk_cidrs_parse("127.0.0.0/8", &nets, err, sizeof(err));
    if (!ok(n == 1, "networks parse (%s)", err))
        goto end;
    ok(lk_dial_pick(nets, 1, ai, seen, sizeof(seen)) == &ai[2], "the first address inside");
    ok_str(seen, "10.1.2.3, ::1, 127.0.0.9, ::ffff:127.0.0.1", "every answer listed");
    ok(lk_dial_pick(nets, 1, &ai[3], seen, sizeof(seen)) == &ai[3],
       "an IPv4-mapped address matches as IPv4");
    ok(lk_dial_pick(nets, 1, ai, seen, 16) == &ai[2], "a short buffer still picks");
    ok_str(seen, "10.1.2.3, ::...", "a short buffer ends in ...");
    ok(lk_dial_pick(nets, 1, &ai[1], seen, 0) == &ai[2], "no buffer at all");
    free(nets);
    nets = NULL;
    n = lk_cidrs_parse("192.168.0.0/16, fd00::/8", &nets, err, sizeof(err));
    ok(n == 2 && lk_dial_pick(nets, 2, ai, seen, sizeof(seen)) == NULL, "nothing inside: NULL");
    ok(lk_dial_pick(NULL, 0, &ai[1], seen, sizeof(seen)) == &ai[1], "no networks: the first answer");
    ok(lk_dial_pick(nets, 2, NULL, seen, sizeof(seen)) == NULL && seen[0] == '\0',
       "no answers: NULL and nothing listed");
end:
    free(nets);
}

/* Name servers on 127.0.0.1 that a fixture may give evdns. */
enum ns_mode { NS_NONE = 0, NS_MUTE, NS_NXDOMAIN };

/* One dial on a loop: the broker prod/b1 at addr in a cluster with the
 * given internal_networks ("" for none). */
struct dial_fx {
    struct event_base *base;
    struct evdns_base *dns;
    struct lk_cidr *nets;
    struct lk_cluster cl;
    struct lk_broker b;
    struct lk_url addr;
    char hosts[64];
    evutil_socket_t lfd; /* a listener on 127.0.0.1 */
    uint16_t lport;
    evutil_socket_t nsfd; /* the name server's socket */
    struct event *ns_ev;  /* NS_NXDOMAIN: answers its queries */
};

struct dialler {
    struct bufferevent *bev;
    struct lk_dial dial;
    short what;
    int events;
};

static int events_seen; /* by every dialler's callback, freed ones included */

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct dialler *dl = arg;
    dl->what = what;
    dl->events++;
    events_seen++;
    event_base_loopbreak(bufferevent_get_base(bev));
}

/* NS_NXDOMAIN: every query gets "no such name" (RCODE 3). */
static void
nxdomain_cb(evutil_socket_t fd, short what, void *arg)
{
    unsigned char q[512];
    struct sockaddr_storage from;
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);

    if (n < 12)
        return;
    q[2] |= 0x80;                /* QR: a response */
    q[3] = (q[3] & 0x70) | 0x83; /* RA, RCODE 3 */
    sendto(fd, q, (size_t)n, 0, (struct sockaddr *)&from, fl);
}

/* A socket of type on 127.0.0.1, an ephemeral port (in *port), listening
 * if a stream socket; -1 on failure. */
static evutil_socket_t
local_socket(int type, uint16_t *port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    evutil_socket_t fd = socket(AF_INET, type, 0);

    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        (type == SOCK_STREAM && listen(fd, 8) != 0) ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(sin.sin_port);
    return fd;
}

static int
fx_init(struct dial_fx *fx, const char *networks, const char *hosts_text, enum ns_mode ns)
{
    char err[128], nsaddr[32];
    uint16_t nsport;
    int fd;

    memset(fx, 0, sizeof(*fx));
    fx->lfd = fx->nsfd = -1;
    fx->base = event_base_new();
    fx->dns = evdns_base_new(fx->base, 0);
    if (networks[0] != '\0' && lk_cidrs_parse(networks, &fx->nets, err, sizeof(err)) < 0)
        return -1;
    fx->cl.name = "prod";
    fx->cl.internal_networks = fx->nets;
    fx->cl.ninternal_networks = networks[0] != '\0' ? 1 : 0;
    fx->b.name = "prod/b1";
    fx->b.cluster = &fx->cl;
    strcpy(fx->hosts, "/tmp/lk-dial-hostsXXXXXX");
    if ((fd = mkstemp(fx->hosts)) < 0)
        return -1;
    if (write(fd, hosts_text, strlen(hosts_text)) != (ssize_t)strlen(hosts_text))
        return close(fd), -1;
    close(fd);
    if (evdns_base_load_hosts(fx->dns, fx->hosts) != 0)
        return -1;
    if ((fx->lfd = local_socket(SOCK_STREAM, &fx->lport)) < 0)
        return -1;
    fx->addr.scheme = LK_SCHEME_HTTP;
    fx->addr.port = fx->lport;
    if (ns == NS_NONE)
        return 0;
    if ((fx->nsfd = local_socket(SOCK_DGRAM, &nsport)) < 0)
        return -1;
    snprintf(nsaddr, sizeof(nsaddr), "127.0.0.1:%u", (unsigned)nsport);
    if (evdns_base_nameserver_ip_add(fx->dns, nsaddr) != 0)
        return -1;
    if (ns == NS_NXDOMAIN) {
        fx->ns_ev = event_new(fx->base, fx->nsfd, EV_READ | EV_PERSIST, nxdomain_cb, NULL);
        event_add(fx->ns_ev, NULL);
    }
    return 0;
}

static void
fx_free(struct dial_fx *fx)
{
    if (fx->lfd >= 0)
        close(fx->lfd);
    if (fx->hosts[0] != '\0')
        unlink(fx->hosts);
    /* Let the callbacks of cancelled lookups run: they free what they hold. */
    for (int i = 0; i < 3; i++)
        event_base_loop(fx->base, EVLOOP_NONBLOCK);
    if (fx->ns_ev != NULL)
        event_free(fx->ns_ev);
    if (fx->nsfd >= 0)
        close(fx->nsfd);
    if (fx->dns != NULL)
        evdns_base_free(fx->dns, 0);
    event_base_free(fx->base);
    free(fx->nets);
}

/* Starts a dial of host; its outcome never comes before this returns. */
static struct dialler *
dial_start(struct dial_fx *fx, const char *host, unsigned timeout_ms)
{
    struct dialler *dl = calloc(1, sizeof(*dl));

    fx->addr.host = (char *)host;
    dl->bev = bufferevent_socket_new(fx->base, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(dl->bev, NULL, NULL, event_cb, dl);
    bufferevent_enable(dl->bev, EV_READ | EV_WRITE);
    lk_dial_start(&dl->dial, dl->bev, fx->dns, NULL, &fx->b, &fx->addr, timeout_ms);
    ok(dl->events == 0, "%s: no outcome before lk_dial_start returns", host);
    return dl;
}

/* Runs the loop for at most ms, or until a dialler's outcome. */
static void
run_loop(struct dial_fx *fx, unsigned ms)
{
    struct timeval guard = {ms / 1000, (ms % 1000) * 1000};

    event_base_loopexit(fx->base, &guard);
    event_base_dispatch(fx->base);
}

/* A dial of host, run to its outcome. */
static struct dialler *
dial(struct dial_fx *fx, const char *host, unsigned timeout_ms)
{
    struct dialler *dl = dial_start(fx, host, timeout_ms);

    run_loop(fx, 3000);
    return dl;
}

static void
dialler_free(struct dialler *dl)
{
    lk_dial_cancel(&dl->dial);
    bufferevent_free(dl->bev);
    free(dl);
}

/* Where dl's socket is connected: "127.0.0.1:port", or "" if nowhere. */
static const char *
peer(struct dialler *dl, char *buf, size_t len)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);
    char ip[INET_ADDRSTRLEN];

    buf[0] = '\0';
    if (getpeername(bufferevent_getfd(dl->bev), (struct sockaddr *)&sin, &sl) == 0 &&
        inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip)) != NULL)
        snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(sin.sin_port));
    return buf;
}

static void
test_names(void)
{
    struct dial_fx fx;
    struct dialler *dl;
    char want[32], got[32];

    if (!ok(fx_init(&fx, "127.0.0.0/8",
                    "10.1.2.3 mixed.test\n127.0.0.1 mixed.test\n10.1.2.4 outside.test\n"
                    "::1 outside.test\n",
                    NS_NONE) == 0,
            "fixture"))
        goto end;
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)fx.lport);

    dl = dial(&fx, "mixed.test", 2000);
    ok(dl->events == 1 && (dl->what & BEV_EVENT_CONNECTED),
       "a name with an address inside: connected");
    ok_str(peer(dl, got, sizeof(got)), want, "to the address inside, past the first answer");
    dialler_free(dl);

    dl = dial(&fx, "outside.test", 2000);
    ok(dl->events == 1 && (dl->what & BEV_EVENT_ERROR), "every address outside: an error");
    ok(dl->dial.error == lk_err_outside_networks, "named as outside internal_networks");
    ok_str(peer(dl, got, sizeof(got)), "", "nothing dialled");
    dialler_free(dl);

    dl = dial(&fx, "10.1.2.3", 2000);
    ok(dl->events == 1 && (dl->what & BEV_EVENT_ERROR) && dl->dial.error == lk_err_outside_networks,
       "an IP literal outside: refused without a lookup");
    dialler_free(dl);

    dl = dial(&fx, "127.0.0.1", 2000);
    ok(dl->events == 1 && (dl->what & BEV_EVENT_CONNECTED), "an IP literal inside: connected");
    dialler_free(dl);
end:
    fx_free(&fx);
}

static void
test_no_such_name(void)
{
    struct dial_fx fx;
    struct dialler *dl;

    if (!ok(fx_init(&fx, "127.0.0.0/8", "", NS_NXDOMAIN) == 0, "fixture"))
        goto end;
    dl = dial(&fx, "nosuch.test", 2000);
    ok(dl->events == 1 && (dl->what & BEV_EVENT_ERROR) && dl->dial.error == NULL,
       "a name that does not resolve: an error, not a refusal");
    ok(lk_dial_dns_error(&dl->dial, dl->bev) == EVUTIL_EAI_NONAME, "the resolver's: %s",
       evutil_gai_strerror(lk_dial_dns_error(&dl->dial, dl->bev)));
    dialler_free(dl);
end:
    fx_free(&fx);
}

static void
test_no_networks(void)
{
    struct dial_fx fx;
    struct dialler *dl;

    if (!ok(fx_init(&fx, "", "10.1.2.3 b.test\n", NS_NONE) == 0, "fixture"))
        goto end;
    /* Without internal_networks nothing is checked: libevent dials. */
    dl = dial(&fx, "127.0.0.1", 2000);
    ok(dl->events == 1 && (dl->what & BEV_EVENT_CONNECTED), "connected as before");
    ok(dl->dial.req == NULL && dl->dial.error == NULL, "no lookup of ours");
    dialler_free(dl);
end:
    fx_free(&fx);
}

static void
test_slow_lookup(void)
{
    struct dial_fx fx;
    struct dialler *dl;

    if (!ok(fx_init(&fx, "127.0.0.0/8", "", NS_MUTE) == 0, "fixture"))
        goto end;
    /* The connect timeout covers the lookup. */
    long long t0 = lk_now_ms();
    dl = dial(&fx, "slow.test", 150);
    long long took = lk_now_ms() - t0;
    ok(dl->events == 1 && (dl->what & BEV_EVENT_TIMEOUT), "timed out while resolving");
    ok(took >= 140 && took < 1500, "after the dial's timeout (%lld ms)", took);
    ok(dl->dial.req != NULL, "the lookup was still under way");
    dialler_free(dl); /* cancels it; its late callback must touch nothing freed */

    /* Freed right after the start, before any outcome. */
    events_seen = 0;
    dl = dial_start(&fx, "slow2.test", 100);
    ok(dl->dial.req != NULL, "a lookup under way");
    dialler_free(dl);
    run_loop(&fx, 300);
    ok(events_seen == 0, "a dial freed while resolving reports nothing");

    /* Abandoned as lk_health_stop does, its resolver freed with it: the
     * lookup fails, and its callback frees what it holds (ASan: no leak),
     * touching neither the dialler nor the resolver. */
    dl = dial_start(&fx, "slow3.test", 100);
    lk_dial_abandon(&dl->dial);
    bufferevent_free(dl->bev);
    free(dl);
    evdns_base_free(fx.dns, 1);
    fx.dns = NULL;
    run_loop(&fx, 50);
    ok(events_seen == 0, "an abandoned dial reports nothing");
end:
    fx_free(&fx);
}

const struct lk_test_case lk_test_dial[] = {
    {"dial/pick", test_pick},
    {"dial/names", test_names},
    {"dial/no_such_name", test_no_such_name},
    {"dial/no_networks", test_no_networks},
    {"dial/slow_lookup", test_slow_lookup},
    {NULL, NULL},
};
