/*
 * The admin listener (lk_admin.h): a small HTTP/1.x server of its own, on
 * worker 0's loop.  It reads one request head, answers, and closes; it
 * shares nothing with the proxy's HTTP module, so that nothing a broker's
 * clients send can reach it, nor it them.  Who may ask is the serving
 * configuration's to say (admin.allow, admin.healthz_allow,
 * admin.token_file): a caller it does not let in gets 403 and nothing else.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "lk_admin.h"
#include "lk_broker.h"
#include "lk_clock.h"
#include "lk_filter.h"
#include "lk_live.h"
#include "lk_log.h"
#include "lk_registry.h"
#include "lk_runtime.h"
#include "lk_stats.h"
#include "lk_workers.h"

/* A request head longer than this is refused (431): the admin API takes
 * no headers that matter. */
#define LK_ADMIN_HEAD_MAX 8192

struct aconn {
    struct bufferevent *bev;
    struct aconn *prev, *next;
    int family;                      /* the caller's: AF_INET or AF_INET6 */
    uint8_t addr[16];                /* its address, network order */
    char peer[INET6_ADDRSTRLEN + 8]; /* "ip:port", for the log */
};

static struct evconnlistener *listener;
static struct aconn *aconns;
/* Refusals are logged at most once a second; the others are counted into
 * the next line. */
static struct lk_log_every refused_log;
/* /map ------------------------------------------------------------------------ */

static json_t *
str_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

static json_t *
listener_json(const struct lk_listener *l)
{
    json_t *j = json_object();
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++)
        if (l->addr[sc] != NULL)
            json_object_set_new(j, lk_scheme_name((enum lk_scheme)sc),
                                json_string(l->addr[sc]->text));
    return j;
}

/* Health of broker b: whether service addresses send it traffic
 * (lk_broker_up: neither backed off nor ejected by active checks), its
 * consecutive connect failures and until when round-robin skips it for
 * them (wall-clock time, or null), and its consecutive failed checks. */
static json_t *
health_json(struct lk_runtime *rt, const struct lk_broker *b)
{
    unsigned fails = lk_broker_fails(rt, b);
    long long until = __atomic_load_n(&rt->health[b->index].retry_after_ms, __ATOMIC_RELAXED);
    long long left = until - lk_now_ms();
    json_t *ejected = json_null();

    if (left > 0) {
        char when[64];
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        long long ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + left;
        time_t secs = (time_t)(ms / 1000);
        gmtime_r(&secs, &tm);
        snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03lldZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms % 1000);
        ejected = json_string(when);
    }
    return json_pack("{s:b,s:I,s:o,s:I}", "up", lk_broker_up(rt, b), "consecutive_failures",
                     (json_int_t)fails, "ejected_until", ejected, "check_failures",
                     (json_int_t)lk_broker_check_fails(rt, b));
}

static json_t *
protos_json(unsigned proto)
{
    json_t *a = json_array();
    if (proto & LK_PROTO_HTTP)
        json_array_append_new(a, json_string("http"));
    if (proto & LK_PROTO_PULSAR)
        json_array_append_new(a, json_string("pulsar"));
    if (proto & LK_PROTO_KAFKA)
        json_array_append_new(a, json_string("kafka"));
    return a;
}

static json_t *
cluster_json(struct lk_runtime *rt, const struct lk_cluster *cl)
{
    json_t *j = json_object(), *brokers = json_array(), *filters = json_array();

    json_object_set_new(j, "name", json_string(cl->name));
    json_object_set_new(j, "protocols", protos_json(cl->proto));
    json_object_set_new(j, "internal_listener", str_or_null(cl->internal_listener));
    json_object_set_new(j, "lookup_listener", str_or_null(cl->lookup_listener));
    if (cl->web_service != NULL)
        json_object_set_new(j, "web_service_url", json_string(cl->web_service->text));
    if (cl->service != NULL)
        json_object_set_new(j, "service_url", json_string(cl->service->text));
    if (cl->nbootstrap != 0) {
        json_t *bs = json_array();
        for (size_t i = 0; i < cl->nbootstrap; i++)
            json_array_append_new(bs, json_string(cl->bootstrap[i].text));
        json_object_set_new(j, "bootstrap_servers", bs);
    }
    if (cl->pattern != NULL)
        json_object_set_new(j, "broker_pattern", json_string(cl->pattern->text));
    for (size_t i = 0; i < cl->nfilters; i++)
        json_array_append_new(filters, json_string(cl->filters[i].ops->name));
    json_object_set_new(j, "filters", filters);
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        json_t *jb = json_object(), *ls = json_object();
        json_object_set_new(jb, "name", json_string(b->name));
        json_object_set_new(jb, "id", json_string(b->id));
        json_object_set_new(jb, "origin", json_string(b->live ? "live" : "static"));
        if (b->node_id >= 0)
            json_object_set_new(jb, "node_id", json_integer(b->node_id));
        json_object_set_new(jb, "internal_listener", json_string(b->internal->name));
        json_object_set_new(jb, "lookup_listener",
                            b->lookup != NULL ? json_string(b->lookup->name) : json_null());
        for (size_t k = 0; k < b->nlisteners; k++)
            json_object_set_new(ls, b->listeners[k].name, listener_json(&b->listeners[k]));
        json_object_set_new(jb, "listeners", ls);
        json_object_set_new(jb, "health", health_json(rt, b));
        json_array_append_new(brokers, jb);
    }
    json_object_set_new(j, "brokers", brokers);
    if (cl->zk != NULL)
        json_object_set_new(j, "store", lk_live_store_json(cl));
    return j;
}

static json_t *
bind_json(const struct lk_bind *b)
{
    json_t *routes = json_array();

    for (size_t i = 0; i < b->nvhosts; i++) {
        const struct lk_vhost *v = &b->vhosts[i];
        json_t *r = json_pack("{s:s,s:i,s:s,s:s}", "host", v->host, "port", (int)v->port, "scheme",
                              lk_scheme_name(v->scheme), "cluster", v->cluster->name);
        json_object_set_new(r, "broker",
                            v->broker != NULL ? json_string(v->broker->name) : json_null());
        if (v->pattern != NULL)
            json_object_set_new(r, "broker_pattern", json_true());
        json_array_append_new(routes, r);
    }
    return json_pack("{s:s,s:s,s:b,s:o}", "address", b->text, "protocol",
                     b->proto == LK_PROTO_KAFKA    ? "kafka"
                     : b->proto == LK_PROTO_PULSAR ? "pulsar"
                                                   : "http",
                     "tls", b->tls, "routes", routes);
}

void
lk_admin_map(struct evbuffer *out, struct lk_runtime *rt)
{
    const struct lk_conf *conf = rt->conf;
    json_t *clusters = json_array(), *binds = json_array();

    for (size_t i = 0; i < conf->nclusters; i++)
        json_array_append_new(clusters, cluster_json(rt, conf->clusters[i]));
    for (size_t i = 0; i < conf->nbinds; i++)
        json_array_append_new(binds, bind_json(conf->binds[i]));
    json_t *root = json_pack("{s:I,s:s,s:o,s:o}", "generation", (json_int_t)rt->generation, "config",
                             conf->file, "clusters", clusters, "binds", binds);
    char *text = json_dumps(root, JSON_COMPACT);
    if (text != NULL) {
        evbuffer_add(out, text, strlen(text));
        evbuffer_add(out, "\n", 1);
        free(text);
    }
    json_decref(root);
}

/* Connections ------------------------------------------------------------------- */

static void
aconn_free(struct aconn *a)
{
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        aconns = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    bufferevent_free(a->bev);
    free(a);
}

static void
drained(struct bufferevent *bev, void *arg)
{
    aconn_free(arg);
}

static void
on_event(struct bufferevent *bev, short what, void *arg)
{
    aconn_free(arg);
}

static void
reply(struct aconn *a, int status, const char *reason, const char *type, struct evbuffer *body)
{
    struct evbuffer *out = bufferevent_get_output(a->bev);

    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "%sConnection: close\r\n\r\n",
                        status, reason, type, evbuffer_get_length(body),
                        status == 405 ? "Allow: GET\r\n" : "");
    evbuffer_add_buffer(out, body);
    /* Whatever else the client sends is not read; once the answer is out,
     * the connection closes. */
    bufferevent_disable(a->bev, EV_READ);
    bufferevent_setcb(a->bev, NULL, drained, on_event, a);
    bufferevent_enable(a->bev, EV_WRITE);
}

/* Access --------------------------------------------------------------------------- */

/* The value of the first Authorization field of the head (after the request
 * line), trimmed; NULL if there is none. */
static const char *
authorization(const char *head, size_t len, size_t *vlen)
{
    static const char name[] = "authorization:";
    const char *end = head + len, *line = memchr(head, '\n', len);

    while (line != NULL && ++line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        size_t llen = (size_t)((eol != NULL ? eol : end) - line);
        if (llen >= sizeof(name) - 1 && strncasecmp(line, name, sizeof(name) - 1) == 0) {
            struct lk_str v =
                lk_str_trim(lk_str_make(line + sizeof(name) - 1, llen - (sizeof(name) - 1)));
            while (v.len > 0 && v.p[v.len - 1] == '\r')
                v = lk_str_trim(lk_str_make(v.p, v.len - 1));
            *vlen = v.len;
            return v.p;
        }
        line = eol;
    }
    return NULL;
}

/* Whether the head carries "Authorization: Bearer TOKEN" with the configured
 * token.  Both sides are hashed and the digests compared in constant time,
 * so that neither the bytes nor the length of the token show in how long a
 * wrong guess takes. */
static int
bearer_ok(const struct lk_conf *conf, const char *v, size_t vlen)
{
    unsigned char want[EVP_MAX_MD_SIZE], got[EVP_MAX_MD_SIZE];
    unsigned int wlen = 0, glen = 0;

    /* auth-scheme is case-insensitive (RFC 9110 §11.1), then 1*SP */
    if (v == NULL || vlen < 7 || strncasecmp(v, "Bearer ", 7) != 0)
        return 0;
    struct lk_str tok = lk_str_trim(lk_str_make(v + 7, vlen - 7));
    if (!EVP_Digest(conf->admin_token, conf->admin_token_len, want, &wlen, EVP_sha256(), NULL) ||
        !EVP_Digest(tok.p, tok.len, got, &glen, EVP_sha256(), NULL) || wlen != glen)
        return 0;
    return CRYPTO_memcmp(want, got, wlen) == 0;
}

/*
 * Why the caller may not have path, or NULL when it may: /healthz is open
 * to admin.healthz_allow as it stands; anything else needs an address in
 * admin.allow and, with admin.token_file, the bearer token.  *token says
 * whether it was the token that failed.
 */
static const char *
refusal(const struct lk_conf *conf, const struct aconn *a, int healthz, const char *head,
        size_t len, int *token)
{
    size_t vlen = 0;
    const char *v;

    *token = 0;
    if (conf == NULL)
        return "no configuration is serving";
    if (healthz &&
        lk_cidr_contains(conf->admin_healthz_allow, conf->nadmin_healthz_allow, a->family, a->addr))
        return NULL;
    if (!lk_cidr_contains(conf->admin_allow, conf->nadmin_allow, a->family, a->addr))
        return "the caller's address is not in admin.allow";
    if (conf->admin_token == NULL)
        return NULL;
    *token = 1;
    v = authorization(head, len, &vlen);
    if (v == NULL)
        return "an Authorization: Bearer token is required (admin.token_file)";
    return bearer_ok(conf, v, vlen) ? NULL : "the bearer token is not admin.token_file's";
}

/* Answers 403 with {"reason": why}, counts it, and logs it unless another
 * refusal was logged less than a second ago. */
static void
refuse(struct aconn *a, const char *why, int token, const char *path, size_t plen)
{
    struct evbuffer *body = evbuffer_new();
    json_t *j = json_pack("{s:s}", "reason", why);
    char *text = json_dumps(j, JSON_COMPACT);
    unsigned long n;

    lk_stats_admin_refused(token);
    if ((n = lk_log_every(&refused_log, 1000)) != 0) {
        char sample[100];
        char more[64] = "";
        if (n > 1)
            snprintf(more, sizeof(more), " (and %lu more since the last line)", n - 1);
        lk_log(LK_WARN, NULL, "admin: refused %s asking for %s: %s%s", a->peer,
               lk_log_sanitize(sample, path, plen, 64), why, more);
    }
    evbuffer_add_printf(body, "%s\n", text != NULL ? text : "{}");
    free(text);
    json_decref(j);
    reply(a, 403, "Forbidden", "application/json", body);
    evbuffer_free(body);
}

static void
serve(struct aconn *a, const char *method, size_t mlen, const char *path, size_t plen)
{
    struct evbuffer *body = evbuffer_new();
    const char *q = memchr(path, '?', plen);

    if (q != NULL)
        plen = (size_t)(q - path);
#define IS(p) (plen == sizeof(p) - 1 && memcmp(path, p, plen) == 0)
    if (!IS("/metrics") && !IS("/healthz") && !IS("/map")) {
        evbuffer_add_printf(body, "not found: /metrics, /healthz, /map\n");
        reply(a, 404, "Not Found", "text/plain; charset=utf-8", body);
    } else if (!(mlen == 3 && memcmp(method, "GET", 3) == 0)) {
        evbuffer_add_printf(body, "method not allowed: GET only\n");
        reply(a, 405, "Method Not Allowed", "text/plain; charset=utf-8", body);
    } else if (IS("/metrics")) {
        struct lk_runtime *rt = lk_workers_runtime(); /* the generation serving now */
        lk_stats_write(body, lk_broker_write_health, rt, rt != NULL ? rt->generation : 0,
                       atomic_load(&lk_reloads_ok), atomic_load(&lk_reloads_failed));
        if (rt != NULL)
            lk_live_metrics(body, rt->conf);
        lk_runtime_unref(rt);
        reply(a, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
    } else if (IS("/healthz")) {
        /* Not ready while draining, or until every store has been read
         * once (the map lacks its brokers until then).  A store outage
         * later leaves it ready: the last map keeps serving, and the
         * lines below say since when it may be stale. */
        struct lk_runtime *rt = lk_workers_runtime();
        struct evbuffer *lines = evbuffer_new();
        int d = lk_workers_draining();
        int starting = rt != NULL && lk_live_health(lines, rt->conf);
        evbuffer_add_printf(body, d ? "draining\n" : starting ? "starting\n" : "ok\n");
        evbuffer_add_buffer(body, lines);
        evbuffer_free(lines);
        lk_runtime_unref(rt);
        reply(a, d || starting ? 503 : 200, d || starting ? "Service Unavailable" : "OK",
              "text/plain; charset=utf-8", body);
    } else {
        struct lk_runtime *rt = lk_workers_runtime();
        if (rt != NULL)
            lk_admin_map(body, rt);
        lk_runtime_unref(rt);
        reply(a, 200, "OK", "application/json", body);
    }
#undef IS
    evbuffer_free(body);
}

static void
on_read(struct bufferevent *bev, void *arg)
{
    struct aconn *a = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);

    if (end.pos < 0)
        end = evbuffer_search(in, "\n\n", 2, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(in) > LK_ADMIN_HEAD_MAX) {
            struct evbuffer *body = evbuffer_new();
            evbuffer_add_printf(body, "request head too large\n");
            reply(a, 431, "Request Header Fields Too Large", "text/plain; charset=utf-8", body);
            evbuffer_free(body);
        }
        return;
    }
    size_t len = (size_t)end.pos;
    const char *head = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
    const char *eol = memchr(head, '\n', len);
    size_t llen = eol != NULL ? (size_t)(eol - head) : len;
    const char *sp1 = memchr(head, ' ', llen);
    const char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', llen - (size_t)(sp1 + 1 - head)) : NULL;
    if (sp1 == NULL || sp2 == NULL || sp2 == sp1 + 1 || sp1 == head) {
        struct evbuffer *body = evbuffer_new();
        evbuffer_add_printf(body, "bad request\n");
        reply(a, 400, "Bad Request", "text/plain; charset=utf-8", body);
        evbuffer_free(body);
        return;
    }
    /* Access comes first: a caller let in to nothing learns nothing, not
     * even which paths exist.  The serving generation's keys decide, so a
     * reload (SIGHUP) changes them, and re-reads the token file. */
    const char *path = sp1 + 1, *q;
    size_t plen = (size_t)(sp2 - sp1 - 1);
    size_t bare = (q = memchr(path, '?', plen)) != NULL ? (size_t)(q - path) : plen;
    int healthz = bare == 8 && memcmp(path, "/healthz", 8) == 0, token;
    struct lk_runtime *rt = lk_workers_runtime();
    const char *why = refusal(rt != NULL ? rt->conf : NULL, a, healthz, head, len, &token);
    lk_runtime_unref(rt);
    if (why != NULL) {
        refuse(a, why, token, path, bare);
        return;
    }
    serve(a, head, (size_t)(sp1 - head), path, plen);
}

/* The caller's address, for admin.allow, and its text, for the log; a
 * family other than IPv4 or IPv6 matches no network. */
static void
take_peer(struct aconn *a, const struct sockaddr *sa)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    a->family = sa->sa_family;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        memcpy(a->addr, &in->sin_addr, 4);
        port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(a->addr, &in6->sin6_addr, 16);
        port = ntohs(in6->sin6_port);
    }
    if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
        inet_ntop(sa->sa_family, a->addr, ip, sizeof(ip));
    snprintf(a->peer, sizeof(a->peer), sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct aconn *a = lk_xcalloc(1, sizeof(*a));
    struct timeval tv = {10, 0};

    take_peer(a, sa);
    a->bev = bufferevent_socket_new(evconnlistener_get_base(l), fd, BEV_OPT_CLOSE_ON_FREE);
    if (a->bev == NULL) {
        evutil_closesocket(fd);
        free(a);
        return;
    }
    a->next = aconns;
    if (aconns != NULL)
        aconns->prev = a;
    aconns = a;
    bufferevent_setcb(a->bev, on_read, NULL, on_event, a);
    bufferevent_set_timeouts(a->bev, &tv, &tv);
    bufferevent_enable(a->bev, EV_READ);
}

int
lk_admin_start(struct event_base *base, const struct lk_conf *conf, char *err, size_t errlen)
{
    const char *addr = conf->admin;
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);

    if (addr == NULL)
        return 0;
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) != 0) {
        snprintf(err, errlen, "admin = %s: not IP:port", addr);
        return -1;
    }
    listener = evconnlistener_new_bind(
        base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
        64, (struct sockaddr *)&ss, sslen);
    if (listener == NULL) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, errlen, "admin = %s: cannot listen: %s", addr,
                 evutil_socket_error_to_string(e));
        return -1;
    }
    lk_log(LK_INFO, NULL, "admin listener on %s (/metrics, /healthz, /map)", addr);
    return 0;
}

void
lk_admin_stop(void)
{
    if (listener != NULL)
        evconnlistener_free(listener);
    listener = NULL;
    while (aconns != NULL)
        aconn_free(aconns);
}
