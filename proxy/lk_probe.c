/*
 * `lookout --probe`: every broker of the map is asked, on its internal
 * address, what it advertises (Pulsar: its admin REST API and a lookup;
 * Kafka: ApiVersions and Metadata), and the answers are compared with the
 * map.  A one-shot CLI: blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO, a
 * poll()ed connect, OpenSSL on the same socket; findings are gathered per
 * broker and printed once every broker of a cluster has answered.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <event2/buffer.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "lk_kafka_codec.h"
#include "lk_pool.h"
#include "lk_probe.h"
#include "lk_proxyproto.h"
#include "lk_pulsar_codec.h"
#include "lk_runtime.h"
#include "lk_upstream.h"

/* A Pulsar admin answer or a Kafka Metadata response without topics is a
 * few KiB; anything past this is not what the probe asked for. */
#define MAX_ANSWER (4u * 1024 * 1024)

enum verdict { V_OK = 0, V_MISMATCH, V_UNREACHABLE };
static const char *const verdict_names[] = {"OK", "MISMATCH", "UNREACHABLE"};

/* What the probe found about one broker of the map. */
struct finding {
    enum verdict v;
    char detail[2048];
};

static void note(struct finding *f, enum verdict v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Adds a detail ("; "-separated); the worst verdict wins. */
static void
note(struct finding *f, enum verdict v, const char *fmt, ...)
{
    size_t off = strlen(f->detail);
    va_list ap;

    if (v > f->v)
        f->v = v;
    if (off != 0 && off + 2 < sizeof(f->detail)) {
        memcpy(f->detail + off, "; ", 3);
        off += 2;
    }
    va_start(ap, fmt);
    vsnprintf(f->detail + off, sizeof(f->detail) - off, fmt, ap);
    va_end(ap);
}

/* Connections ------------------------------------------------------------ */

struct conn {
    int fd;
    SSL *ssl;
};

static void
conn_close(struct conn *c)
{
    SSL_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->ssl = NULL;
}

/* One connect to ai, bounded by ms.  The fd (blocking, with I/O
 * timeouts of ms), or -1 with errno set (ETIMEDOUT for the bound). */
static int
connect_one(const struct addrinfo *ai, unsigned ms)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    int e = 0;
    socklen_t elen = sizeof(e);

    if (fd < 0)
        return -1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int n;
        if (errno != EINPROGRESS)
            goto fail;
        while ((n = poll(&pfd, 1, (int)ms)) < 0 && errno == EINTR)
            ;
        if (n == 0) {
            errno = ETIMEDOUT;
            goto fail;
        }
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0)
            goto fail;
        if (e != 0) {
            errno = e;
            goto fail;
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
fail:
    e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* upstream.proxy_protocol of the cluster whose broker addr is an internal
 * address of (0: off).  The probe is lookout's own connection: it sends a
 * v2 LOCAL or v1 UNKNOWN header, as the health checks do. */
static unsigned
addr_pp(const struct lk_runtime *rt, const struct lk_url *addr)
{
    const struct lk_conf *conf = rt->conf;

    for (size_t i = 0; i < conf->nbrokers; i++)
        for (int sc = 0; conf->brokers[i]->internal != NULL && sc < LK_SCHEME__COUNT; sc++)
            if (conf->brokers[i]->internal->addr[sc] == addr)
                return (unsigned)conf->brokers[i]->cluster->upstream_proxy_protocol;
    return 0;
}

/* Connects to addr (TLS when its scheme is, as lk_upstream_ssl_new sets it
 * up), every step within ms.  0, or -1 with why. */
static int
conn_open(struct lk_runtime *rt, const struct lk_url *addr, unsigned ms, struct conn *c, char *why,
          size_t whylen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char port[8];
    int rc;

    c->fd = -1;
    c->ssl = NULL;
    snprintf(port, sizeof(port), "%u", addr->port);
    if ((rc = getaddrinfo(addr->host, port, &hints, &res)) != 0) {
        snprintf(why, whylen, "resolving %s: %s", addr->host, gai_strerror(rc));
        return -1;
    }
    for (const struct addrinfo *ai = res; ai != NULL && c->fd < 0; ai = ai->ai_next)
        c->fd = connect_one(ai, ms);
    freeaddrinfo(res);
    if (c->fd < 0) {
        if (errno == ETIMEDOUT)
            snprintf(why, whylen, "connect: no answer within %u ms", ms);
        else
            snprintf(why, whylen, "connect: %s", strerror(errno));
        return -1;
    }
    unsigned pp = addr_pp(rt, addr);
    if (pp != 0) {
        uint8_t hdr[LK_PP_V1_MAX + 1];
        const struct lk_pp_addr none = {0};
        int n = lk_pp_write(pp, &none, hdr, sizeof(hdr));
        if (n < 0 || send(c->fd, hdr, (size_t)n, MSG_NOSIGNAL) != n) {
            snprintf(why, whylen, "the PROXY protocol header could not be sent: %s",
                     strerror(errno));
            goto fail;
        }
    }
    if (!lk_scheme_is_tls(addr->scheme))
        return 0;
    if (rt->client_ctx == NULL || (c->ssl = lk_upstream_ssl_new(rt, addr)) == NULL) {
        snprintf(why, whylen, "TLS: cannot set up a client");
        goto fail;
    }
    SSL_set_fd(c->ssl, c->fd);
    ERR_clear_error();
    if (SSL_connect(c->ssl) != 1) {
        long vr = SSL_get_verify_result(c->ssl);
        unsigned long e = ERR_get_error();
        if (vr != X509_V_OK)
            snprintf(why, whylen, "TLS: certificate verify failed: %s",
                     X509_verify_cert_error_string(vr));
        else if (e != 0)
            snprintf(why, whylen, "TLS: %s", ERR_reason_error_string(e));
        else
            snprintf(why, whylen, "TLS: handshake failed%s%s", errno != 0 ? ": " : "",
                     errno != 0 ? strerror(errno) : "");
        ERR_clear_error();
        goto fail;
    }
    return 0;
fail:
    conn_close(c);
    return -1;
}

static int
conn_write(struct conn *c, const void *p, size_t len)
{
    const char *s = p;
    while (len > 0) {
        ssize_t n =
            c->ssl != NULL ? SSL_write(c->ssl, s, (int)len) : send(c->fd, s, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && c->ssl == NULL && errno == EINTR)
                continue;
            return -1;
        }
        s += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Up to len bytes: >0, 0 at the end, -1 on error or timeout (errno). */
static ssize_t
conn_read(struct conn *c, void *p, size_t len)
{
    for (;;) {
        errno = 0;
        if (c->ssl != NULL) {
            int n = SSL_read(c->ssl, p, (int)len);
            if (n > 0)
                return n;
            int e = SSL_get_error(c->ssl, n);
            ERR_clear_error();
            if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0))
                return 0; /* a close without close_notify ends a Connection: close answer too */
            if (errno == 0)
                errno = EPROTO;
            return -1;
        }
        ssize_t n = recv(c->fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        return n;
    }
}

static const char *
read_error(unsigned ms)
{
    static char buf[128];
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        snprintf(buf, sizeof(buf), "no answer within %u ms", ms);
        return buf;
    }
    return strerror(errno);
}

/* HTTP ------------------------------------------------------------------- */

struct http_answer {
    int status;
    char *location; /* malloc'd, or NULL */
    char *body;     /* malloc'd, NUL-terminated, chunking undone */
    size_t body_len;
};

static void
http_answer_free(struct http_answer *a)
{
    free(a->location);
    free(a->body);
    memset(a, 0, sizeof(*a));
}

/* Undoes chunked framing in place; -1 if it is not well formed. */
static int
dechunk(char *p, size_t len, size_t *out_len)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        unsigned long n = strtoul(p + in, &end, 16);
        char *eol = memchr(p + in, '\n', len - in);
        if (end == p + in || eol == NULL)
            return -1;
        in = (size_t)(eol - p) + 1;
        if (n == 0)
            break;
        if (n > len - in)
            return -1;
        memmove(p + out, p + in, n);
        out += n;
        in += n;
        if (in < len && p[in] == '\r')
            in++;
        if (in < len && p[in] == '\n')
            in++;
    }
    *out_len = out;
    return 0;
}

/* GET path from addr, Connection: close, the whole answer read.  0, or -1
 * with why; a connect failure sets *unreachable. */
static int
http_get(struct lk_runtime *rt, const struct lk_url *addr, const char *path, struct http_answer *a,
         char *why, size_t whylen)
{
    unsigned ms = rt->conf->timeout_connect_ms;
    struct conn c;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = -1;

    memset(a, 0, sizeof(*a));
    if (conn_open(rt, addr, ms, &c, why, whylen) != 0)
        return -1;
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n"
                     "User-Agent: lookout-probe\r\nConnection: close\r\n\r\n",
                     path, addr->hostport);
    if (conn_write(&c, req, (size_t)n) != 0) {
        snprintf(why, whylen, "GET %s: sending: %s", path, strerror(errno));
        goto out;
    }
    for (;;) {
        if (cap - len < 16384) {
            cap = cap != 0 ? cap * 2 : 65536;
            buf = lk_xrealloc(buf, cap + 1);
        }
        ssize_t r = conn_read(&c, buf + len, cap - len);
        if (r == 0)
            break;
        if (r < 0) {
            snprintf(why, whylen, "GET %s: %s", path, read_error(ms));
            goto out;
        }
        len += (size_t)r;
        if (len > MAX_ANSWER) {
            snprintf(why, whylen, "GET %s: an answer over %u bytes", path, MAX_ANSWER);
            goto out;
        }
    }
    buf[len] = '\0';
    char *head_end = strstr(buf, "\r\n\r\n");
    if (len == 0 || head_end == NULL || sscanf(buf, "HTTP/1.%*1[01] %3d", &a->status) != 1) {
        snprintf(why, whylen, "GET %s: not an HTTP answer", path);
        goto out;
    }
    *head_end = '\0';
    int chunked = 0;
    for (char *l = strstr(buf, "\r\n"); l != NULL && l < head_end; l = strstr(l, "\r\n")) {
        l += 2;
        char *eol = strstr(l, "\r\n");
        if (eol != NULL)
            *eol = '\0';
        if (strncasecmp(l, "Location:", 9) == 0) {
            const char *v = l + 9;
            while (*v == ' ' || *v == '\t')
                v++;
            free(a->location);
            a->location = lk_xstrdup(v);
        } else if (strncasecmp(l, "Transfer-Encoding:", 18) == 0 && strcasestr(l, "chunked")) {
            chunked = 1;
        }
        if (eol == NULL)
            break;
        *eol = '\r';
    }
    char *body = head_end + 4;
    size_t blen = len - (size_t)(body - buf);
    if (chunked && dechunk(body, blen, &blen) != 0) {
        snprintf(why, whylen, "GET %s: bad chunked framing", path);
        goto out;
    }
    a->body = lk_xmalloc(blen + 1);
    memcpy(a->body, body, blen);
    a->body[blen] = '\0';
    a->body_len = blen;
    rc = 0;
out:
    if (rc != 0)
        http_answer_free(a);
    free(buf);
    conn_close(&c);
    return rc;
}

/* Pulsar ------------------------------------------------------------------ */

/* Whether the URL text (an absolute URL, path allowed) names an address
 * of a broker of cl in the map, of the same scheme. */
static int
url_in_map(const struct lk_cluster *cl, const char *text)
{
    const char *sep = strstr(text, "://");
    const char *path = sep != NULL ? strchr(sep + 3, '/') : NULL;
    size_t len = path != NULL ? (size_t)(path - text) : strlen(text);
    struct lk_url u;
    enum lk_scheme sc;
    char msg[256];
    int ok;

    if (lk_url_parse(text, len, &u, msg, sizeof(msg)) != 0)
        return 0;
    ok = lk_cluster_find_addr(cl, lk_str_c(u.host), u.port, &sc) != NULL && sc == u.scheme;
    lk_url_free(&u);
    return ok;
}

/* The brokers the cluster says are active: "host:port" of each web service. */
struct active {
    char **ids;
    size_t n;
    char cluster[256]; /* the Pulsar cluster they came from; "" until known */
};

static void
active_free(struct active *ac)
{
    for (size_t i = 0; i < ac->n; i++)
        free(ac->ids[i]);
    free(ac->ids);
}

/* Whether broker b is one of the active ones: its internal web-service
 * host:port is the brokerId (advertisedAddress:webServicePort). */
static int
broker_active(const struct lk_broker *b, const char *id)
{
    for (int sc = LK_SCHEME_HTTP; sc <= LK_SCHEME_HTTPS; sc++) {
        const struct lk_url *u = b->internal != NULL ? b->internal->addr[sc] : NULL;
        if (u != NULL && strcasecmp(u->hostport, id) == 0)
            return 1;
    }
    return 0;
}

/* Asks addr for its cluster names, then each for its active brokers; a
 * cluster that is not the broker's own answers with a 307 to its own
 * service URL (validateClusterOwnership) and is skipped.  0 once a list
 * is known, -1 (with why) if not. */
static int
pulsar_active(struct lk_runtime *rt, const struct lk_url *addr, struct active *ac, char *why,
              size_t whylen)
{
    struct http_answer a;
    json_t *names = NULL;
    size_t i;
    int rc = -1;

    if (http_get(rt, addr, "/admin/v2/clusters", &a, why, whylen) != 0)
        return -1;
    names = json_loadb(a.body, a.body_len, 0, NULL);
    if (a.status != 200 || !json_is_array(names)) {
        snprintf(why, whylen, "/admin/v2/clusters: HTTP %d, %s", a.status,
                 json_is_array(names) ? "a list" : "not a JSON list");
        goto out;
    }
    snprintf(why, whylen, "no cluster of /admin/v2/clusters lists its active brokers here");
    for (i = 0; i < json_array_size(names) && rc != 0; i++) {
        const char *name = json_string_value(json_array_get(names, i));
        struct http_answer b;
        char path[512];
        if (name == NULL || strlen(name) > 200 || strpbrk(name, "/?#% ") != NULL)
            continue;
        snprintf(path, sizeof(path), "/admin/v2/brokers/%s", name);
        if (http_get(rt, addr, path, &b, why, whylen) != 0)
            break;
        json_t *ids = json_loadb(b.body, b.body_len, 0, NULL);
        if (b.status == 200 && json_is_array(ids)) {
            ac->ids = lk_xcalloc(json_array_size(ids) + 1, sizeof(*ac->ids));
            for (size_t k = 0; k < json_array_size(ids); k++) {
                const char *id = json_string_value(json_array_get(ids, k));
                if (id != NULL)
                    ac->ids[ac->n++] = lk_xstrdup(id);
            }
            snprintf(ac->cluster, sizeof(ac->cluster), "%s", name);
            rc = 0;
        }
        json_decref(ids);
        http_answer_free(&b);
    }
out:
    json_decref(names);
    http_answer_free(&a);
    return rc;
}

/* The lookup's addresses: each LookupData URL, or a redirect's Location. */
static void
pulsar_lookup(struct lk_runtime *rt, const struct lk_broker *b, const struct lk_url *addr,
              struct finding *f)
{
    static const char *const fields[] = {"brokerUrl",  "brokerUrlTls", "httpUrl",
                                         "httpUrlTls", "nativeUrl",    NULL};
    const char *path = "/lookup/v2/topic/persistent/public/default/" LK_PROBE_TOPIC;
    struct http_answer a;
    char why[512];

    if (http_get(rt, addr, path, &a, why, sizeof(why)) != 0) {
        note(f, V_UNREACHABLE, "lookup: %s", why);
        return;
    }
    if (a.status >= 300 && a.status < 400 && a.location != NULL) {
        if (!url_in_map(b->cluster, a.location))
            note(f, V_MISMATCH, "its lookup redirects to %s, which no listener in the map has",
                 a.location);
    } else if (a.status == 200) {
        json_t *j = json_loadb(a.body, a.body_len, 0, NULL);
        if (!json_is_object(j))
            note(f, V_MISMATCH, "its lookup answer is not LookupData JSON");
        for (size_t i = 0; j != NULL && fields[i] != NULL; i++) {
            const char *u = json_string_value(json_object_get(j, fields[i]));
            char names[128] = "";
            size_t k;
            if (u == NULL || u[0] == '\0' || url_in_map(b->cluster, u))
                continue;
            /* nativeUrl repeats brokerUrl: one finding per address. */
            for (k = 0; k < i; k++) {
                const char *v = json_string_value(json_object_get(j, fields[k]));
                if (v != NULL && strcmp(u, v) == 0)
                    break;
            }
            if (k < i)
                continue;
            for (k = i; fields[k] != NULL; k++) {
                const char *v = json_string_value(json_object_get(j, fields[k]));
                if (v != NULL && strcmp(u, v) == 0)
                    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                             k == i ? "" : ", ", fields[k]);
            }
            note(f, V_MISMATCH, "its lookup names %s (%s), which no listener in the map has", u,
                 names);
        }
        json_decref(j);
    } else {
        /* Auto-creation off, or authorization: nothing to compare, which
         * is not a disagreement. */
        note(f, V_OK, "lookup of %s not checked: HTTP %d", LK_PROBE_TOPIC, a.status);
    }
    http_answer_free(&a);
}

/* Reads exactly n bytes into p: 0, or -1 with why. */
static int
read_full(struct conn *c, unsigned ms, void *p, size_t n, char *why, size_t whylen)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = conn_read(c, (char *)p + got, n - got);
        if (r <= 0) {
            snprintf(why, whylen, "%s",
                     r == 0 ? "the broker closed the connection" : read_error(ms));
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

/* Sends frame (and empties it), then reads one whole answer frame into
 * *cmd (malloc'd, commandSize bytes in *len) and returns its type, or -1
 * with why. */
static int
pulsar_call(struct conn *c, unsigned ms, struct evbuffer *frame, uint8_t **cmd, size_t *len,
            char *why, size_t whylen)
{
    uint8_t pre[LK_PULSAR_PREFIX], *buf;
    uint32_t total, cmd_size;
    int rc;

    *cmd = NULL;
    rc = conn_write(c, evbuffer_pullup(frame, -1), evbuffer_get_length(frame));
    evbuffer_drain(frame, evbuffer_get_length(frame));
    if (rc != 0) {
        snprintf(why, whylen, "sending: %s", strerror(errno));
        return -1;
    }
    if (read_full(c, ms, pre, sizeof(pre), why, whylen) != 0)
        return -1;
    if (lk_pulsar_sizes(pre, MAX_ANSWER, &total, &cmd_size) != 0) {
        snprintf(why, whylen, "not a Pulsar frame in answer");
        return -1;
    }
    buf = lk_xmalloc(total - 4 + 1);
    if (read_full(c, ms, buf, total - 4, why, whylen) != 0) {
        free(buf);
        return -1;
    }
    *cmd = buf;
    *len = cmd_size;
    return lk_pulsar_command_type(buf, cmd_size);
}

/*
 * A broker with binary addresses only has no web service in the map to
 * ask: it is asked on its binary address instead, CONNECT then a LOOKUP of
 * LK_PROBE_TOPIC, whose brokerServiceUrl(Tls) must be in the map.
 */
static void
pulsar_binary(struct lk_runtime *rt, const struct lk_broker *b, const struct lk_url *addr,
              struct finding *f)
{
    unsigned ms = rt->conf->timeout_connect_ms;
    struct evbuffer *frame = evbuffer_new();
    struct lk_pulsar_cmd r;
    struct conn c;
    uint8_t *cmd = NULL;
    size_t len;
    char why[512];
    int type;

    if (conn_open(rt, addr, ms, &c, why, sizeof(why)) != 0) {
        note(f, V_UNREACHABLE, "%s", why);
        goto out;
    }
    lk_pulsar_connect_frame(frame, "lookout-probe", 21);
    if ((type = pulsar_call(&c, ms, frame, &cmd, &len, why, sizeof(why))) != LK_PULSAR_CONNECTED) {
        if (cmd != NULL)
            snprintf(why, sizeof(why), "answered command type %d", type);
        note(f, V_UNREACHABLE, "CONNECT: %s", why);
        goto out;
    }
    free(cmd);
    lk_pulsar_lookup_frame(frame, "persistent://public/default/" LK_PROBE_TOPIC, 1);
    type = pulsar_call(&c, ms, frame, &cmd, &len, why, sizeof(why));
    if (type != LK_PULSAR_LOOKUP_RESPONSE || lk_pulsar_decode(cmd, len, &r) != 0) {
        note(f, V_OK, "binary lookup of %s not checked: %s", LK_PROBE_TOPIC,
             cmd == NULL ? why : "the answer is not a LOOKUP_RESPONSE");
        goto out;
    }
    if (r.lookup_type == LK_PULSAR_FAILED) {
        note(f, V_OK, "binary lookup of %s not checked: Failed", LK_PROBE_TOPIC);
        goto out;
    }
    for (int k = 0; k < 2; k++) {
        const struct lk_str *u = k == 0 ? &r.url : &r.url_tls;
        char text[320];
        if (!(k == 0 ? r.has_url : r.has_url_tls) || u->len == 0)
            continue;
        snprintf(text, sizeof(text), "%.*s", (int)(u->len < 300 ? u->len : 300), u->p);
        if (!url_in_map(b->cluster, text))
            note(f, V_MISMATCH, "its binary lookup names %s (%s), which no listener in the map has",
                 text, k == 0 ? "brokerServiceUrl" : "brokerServiceUrlTls");
    }
out:
    free(cmd);
    conn_close(&c);
    evbuffer_free(frame);
}

static void
probe_pulsar(struct lk_runtime *rt, const struct lk_cluster *cl, struct finding *fs,
             struct active *ac, char *active_why, size_t whylen)
{
    int asked = 0;

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        const struct lk_url *addr = lk_broker_upstream(b, LK_SCHEME_HTTP, 0);
        struct finding *f = &fs[i];
        struct http_answer a;
        char why[512];

        if (addr == NULL) {
            if ((addr = lk_broker_upstream(b, LK_SCHEME_PULSAR, 0)) != NULL)
                pulsar_binary(rt, b, addr, f);
            else
                note(f, V_OK, "no internal web-service address: nothing to ask");
            continue;
        }
        if (http_get(rt, addr, "/admin/v2/brokers/ready", &a, why, sizeof(why)) != 0) {
            note(f, V_UNREACHABLE, "%s", why);
            continue;
        }
        if (a.status >= 500)
            note(f, V_UNREACHABLE, "not ready: /admin/v2/brokers/ready answered HTTP %d", a.status);
        else if (a.status != 200)
            note(f, V_OK, "/admin/v2/brokers/ready answered HTTP %d", a.status);
        http_answer_free(&a);
        if (f->v == V_UNREACHABLE)
            continue;
        /* The active list is the metadata store's: one broker's is all. */
        if (!asked && ac->cluster[0] == '\0') {
            asked = pulsar_active(rt, addr, ac, active_why, whylen) == 0;
        }
        pulsar_lookup(rt, b, addr, f);
    }
    if (ac->cluster[0] == '\0')
        return;
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        size_t k;
        if (fs[i].v == V_UNREACHABLE || lk_broker_upstream(b, LK_SCHEME_HTTP, 0) == NULL)
            continue;
        for (k = 0; k < ac->n && !broker_active(b, ac->ids[k]); k++)
            ;
        if (k == ac->n)
            note(&fs[i], V_MISMATCH, "not among cluster %s's active brokers", ac->cluster);
    }
}

/* Kafka ------------------------------------------------------------------- */

struct node {
    int32_t id;
    char host[256];
    int32_t port;
};

struct nodes {
    struct node *v;
    size_t n;
};

static enum lk_kafka_ep
collect_node(void *arg, int32_t node_id, struct lk_str *host, int32_t *port)
{
    struct nodes *ns = arg;
    struct node *nd;

    ns->v = lk_xrealloc(ns->v, (ns->n + 1) * sizeof(*ns->v));
    nd = &ns->v[ns->n++];
    nd->id = node_id;
    snprintf(nd->host, sizeof(nd->host), "%.*s", (int)(host->len < 255 ? host->len : 255), host->p);
    nd->port = *port;
    return LK_KAFKA_EP_KEEP;
}

static void
put16(uint8_t *p, int v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void
put32(uint8_t *p, int32_t v)
{
    p[0] = (uint8_t)((uint32_t)v >> 24);
    p[1] = (uint8_t)((uint32_t)v >> 16);
    p[2] = (uint8_t)((uint32_t)v >> 8);
    p[3] = (uint8_t)v;
}

static int
get16(const uint8_t *p)
{
    return (int16_t)((p[0] << 8) | p[1]);
}

static int32_t
get32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     p[3]);
}

/*
 * One request, one response: the request header (v1, or v2 with an empty
 * tag section when flexible, client id "lookout-probe") and body; the whole
 * response frame, size included, in *resp (malloc'd).  0, or -1 with why.
 */
static int
kafka_call(struct conn *c, unsigned ms, int16_t key, int16_t ver, int flexible, int32_t corr,
           const uint8_t *body, size_t blen, uint8_t **resp, size_t *rlen, char *why, size_t whylen)
{
    static const char client[] = "lookout-probe";
    uint8_t req[256];
    size_t n = 4;

    put16(req + n, key);
    put16(req + n + 2, ver);
    put32(req + n + 4, corr);
    put16(req + n + 8, (int)sizeof(client) - 1);
    memcpy(req + n + 10, client, sizeof(client) - 1);
    n += 10 + sizeof(client) - 1;
    if (flexible)
        req[n++] = 0; /* no tagged fields (request header v2) */
    if (blen != 0)    /* ApiVersions v0 has no body, and body is NULL then */
        memcpy(req + n, body, blen);
    n += blen;
    put32(req, (int32_t)(n - 4));
    if (conn_write(c, req, n) != 0) {
        snprintf(why, whylen, "sending: %s", strerror(errno));
        return -1;
    }
    uint8_t head[4];
    size_t got = 0, size;
    while (got < 4) {
        ssize_t r = conn_read(c, head + got, 4 - got);
        if (r <= 0) {
            snprintf(why, whylen, "%s",
                     r == 0 ? "the broker closed the connection" : read_error(ms));
            return -1;
        }
        got += (size_t)r;
    }
    size = (size_t)(uint32_t)get32(head);
    if (size < 4 || size > MAX_ANSWER) {
        snprintf(why, whylen, "a response of %zu bytes: not Kafka", size);
        return -1;
    }
    *resp = lk_xmalloc(size + 4);
    memcpy(*resp, head, 4);
    for (got = 0; got < size;) {
        ssize_t r = conn_read(c, *resp + 4 + got, size - got);
        if (r <= 0) {
            snprintf(why, whylen, "%s",
                     r == 0 ? "the broker closed the connection" : read_error(ms));
            free(*resp);
            return -1;
        }
        got += (size_t)r;
    }
    if (get32(*resp + 4) != corr) {
        snprintf(why, whylen, "a response with the wrong correlation id");
        free(*resp);
        return -1;
    }
    *rlen = size + 4;
    return 0;
}

/* The Metadata request body asking for no topic (MetadataRequest.json):
 * v0 cannot say "none", so it asks for all. */
static size_t
metadata_body(int ver, uint8_t *p)
{
    size_t n = 0;
    if (ver >= 9) {
        p[n++] = 1; /* Topics: an empty compact array */
    } else {
        put32(p, 0);
        n = 4;
    }
    if (ver >= 4)
        p[n++] = 0; /* AllowAutoTopicCreation */
    if (ver >= 8 && ver <= 10)
        p[n++] = 0; /* IncludeClusterAuthorizedOperations */
    if (ver >= 8)
        p[n++] = 0; /* IncludeTopicAuthorizedOperations */
    if (ver >= 9)
        p[n++] = 0; /* no tagged fields */
    return n;
}

/* ApiVersions v0 and Metadata from one broker: the nodes its Metadata
 * names.  0, or -1 with why. */
static int
kafka_nodes(struct lk_runtime *rt, const struct lk_url *addr, struct nodes *ns, char *why,
            size_t whylen)
{
    unsigned ms = rt->conf->timeout_connect_ms;
    struct conn c;
    uint8_t *resp = NULL, body[16];
    size_t rlen, off;
    int lo = -1, hi = -1, rc = -1, ver, ncount;
    char sub[256];

    if (conn_open(rt, addr, ms, &c, why, whylen) != 0)
        return -1;
    /* ApiVersions v0: every broker takes it (KIP-511 keeps v0 answerable). */
    if (kafka_call(&c, ms, LK_KAFKA_API_VERSIONS, 0, 0, 1, NULL, 0, &resp, &rlen, sub,
                   sizeof(sub)) != 0) {
        snprintf(why, whylen, "ApiVersions: %s", sub);
        goto out;
    }
    /* size, correlation id, ErrorCode, ApiKeys[] {ApiKey, MinVersion, MaxVersion} */
    if (rlen < 14 || get16(resp + 8) != 0) {
        snprintf(why, whylen, "ApiVersions: error %d", rlen >= 10 ? get16(resp + 8) : -1);
        goto out;
    }
    ncount = get32(resp + 10);
    for (off = 14; ncount > 0 && off + 6 <= rlen; ncount--, off += 6)
        if (get16(resp + off) == LK_KAFKA_METADATA) {
            lo = get16(resp + off + 2);
            hi = get16(resp + off + 4);
        }
    free(resp);
    resp = NULL;
    ver = hi < lk_kafka_rewrite_max_version(LK_KAFKA_METADATA)
              ? hi
              : lk_kafka_rewrite_max_version(LK_KAFKA_METADATA);
    if (hi < 0 || ver < lo) {
        snprintf(why, whylen, "ApiVersions: no Metadata version in common (broker %d-%d)", lo, hi);
        goto out;
    }
    if (kafka_call(&c, ms, LK_KAFKA_METADATA, (int16_t)ver, ver >= 9, 2, body,
                   metadata_body(ver, body), &resp, &rlen, sub, sizeof(sub)) != 0) {
        snprintf(why, whylen, "Metadata v%d: %s", ver, sub);
        goto out;
    }
    struct evbuffer *scratch = evbuffer_new();
    struct lk_kafka_rewrite rw = {.endpoint = collect_node, .arg = ns};
    enum lk_kafka_rw r =
        lk_kafka_rewrite_response(resp, rlen, LK_KAFKA_METADATA, (int16_t)ver, &rw, scratch);
    evbuffer_free(scratch);
    if (r != LK_KAFKA_RW_UNCHANGED) {
        snprintf(why, whylen, "Metadata v%d: the response does not decode", ver);
        goto out;
    }
    rc = 0;
out:
    free(resp);
    conn_close(&c);
    return rc;
}

static int
node_at(const struct node *nd, const struct lk_url *u)
{
    return u != NULL && nd->port == u->port && strcasecmp(nd->host, u->host) == 0;
}

static int
probe_kafka(struct lk_runtime *rt, const struct lk_cluster *cl, struct finding *fs, FILE *out)
{
    struct nodes all = {NULL, 0};
    int bad = 0;

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        struct nodes ns = {NULL, 0};
        char why[512];

        if (kafka_nodes(rt, lk_kafka_addr(b->internal), &ns, why, sizeof(why)) != 0) {
            note(&fs[i], V_UNREACHABLE, "%s", why);
            free(ns.v);
            continue;
        }
        /* Every broker answers for the whole cluster; keep each node once. */
        for (size_t k = 0; k < ns.n; k++) {
            size_t j;
            for (j = 0; j < all.n && all.v[j].id != ns.v[k].id; j++)
                ;
            if (j == all.n) {
                all.v = lk_xrealloc(all.v, (all.n + 1) * sizeof(*all.v));
                all.v[all.n++] = ns.v[k];
            }
        }
        free(ns.v);
    }
    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        const struct lk_url *in = lk_kafka_addr(b->internal);
        size_t j;
        if (fs[i].v == V_UNREACHABLE)
            continue; /* its line says why already */
        for (j = 0; j < all.n && all.v[j].id != b->node_id; j++)
            ;
        if (j == all.n)
            note(&fs[i], V_MISMATCH, "node %d is not in the cluster's metadata", b->node_id);
        else if (!node_at(&all.v[j], in))
            note(&fs[i], V_MISMATCH, "node %d advertises %s:%d on %s, which the map has at %s",
                 b->node_id, all.v[j].host, all.v[j].port, b->internal->name, in->hostport);
    }
    for (size_t j = 0; j < all.n; j++) {
        if (lk_cluster_find_node(cl, all.v[j].id) != NULL)
            continue;
        if (cl->pattern != NULL) {
            fprintf(out,
                    "OK          %s node %d %s:%d: not in the map, served by broker.pattern %s\n",
                    cl->name, all.v[j].id, all.v[j].host, all.v[j].port, cl->pattern->text);
            continue;
        }
        fprintf(out, "MISMATCH    %s node %d %s:%d: in the cluster, not in the map\n", cl->name,
                all.v[j].id, all.v[j].host, all.v[j].port);
        bad++;
    }
    free(all.v);
    return bad;
}

/* The run ----------------------------------------------------------------- */

int
lk_probe_run(struct lk_runtime *rt, FILE *out)
{
    const struct lk_conf *conf = rt->conf;
    unsigned counts[3] = {0, 0, 0}, unmapped = 0;

    for (size_t c = 0; c < conf->nclusters; c++) {
        const struct lk_cluster *cl = conf->clusters[c];
        struct finding *fs = lk_xcalloc(cl->nbrokers, sizeof(*fs));
        struct active ac = {NULL, 0, ""};
        char active_why[512] = "no broker answered";
        int kafka = cl->proto == LK_PROTO_KAFKA;
        unsigned extra = 0;

        if (kafka) {
            extra = (unsigned)probe_kafka(rt, cl, fs, out);
        } else {
            probe_pulsar(rt, cl, fs, &ac, active_why, sizeof(active_why));
        }
        for (size_t i = 0; i < cl->nbrokers; i++) {
            const struct lk_broker *b = cl->brokers[i];
            const struct lk_url *addr =
                kafka ? lk_kafka_addr(b->internal) : lk_broker_upstream(b, LK_SCHEME_HTTP, 0);
            if (addr == NULL && !kafka) /* a binary-only map: asked there */
                addr = lk_broker_upstream(b, LK_SCHEME_PULSAR, 0);
            /* Kafka's text is "NAME://host:port": the listener is in the details. */
            fprintf(out, "%-11s %s %s: %s\n", verdict_names[fs[i].v], b->name,
                    addr == NULL ? "-"
                    : kafka      ? addr->hostport
                                 : addr->text,
                    fs[i].detail[0] != '\0' ? fs[i].detail : "agrees with the map");
            counts[fs[i].v]++;
        }
        /* The active list names web-service host:ports, which a broker the
         * map gives binary addresses only has none of to compare. */
        for (size_t i = 0; !kafka && ac.cluster[0] != '\0' && i < cl->nbrokers; i++)
            if (lk_broker_upstream(cl->brokers[i], LK_SCHEME_HTTP, 0) == NULL) {
                snprintf(active_why, sizeof(active_why),
                         "broker %s has binary addresses only in the map, and the active list "
                         "names web-service addresses",
                         cl->brokers[i]->name);
                ac.cluster[0] = '\0';
            }
        if (!kafka && ac.cluster[0] != '\0') {
            for (size_t k = 0; k < ac.n; k++) {
                size_t i;
                for (i = 0; i < cl->nbrokers && !broker_active(cl->brokers[i], ac.ids[k]); i++)
                    ;
                if (i < cl->nbrokers)
                    continue;
                fprintf(out, "MISMATCH    %s broker %s: active in cluster %s, not in the map\n",
                        cl->name, ac.ids[k], ac.cluster);
                extra++;
            }
        } else if (!kafka) {
            fprintf(out, "note        %s: active brokers not compared: %s\n", cl->name, active_why);
        }
        unmapped += extra;
        active_free(&ac);
        free(fs);
    }
    fprintf(out,
            "probe: %zu broker%s: %u OK, %u MISMATCH, %u UNREACHABLE; %u in the cluster, not in "
            "the map\n",
            conf->nbrokers, conf->nbrokers == 1 ? "" : "s", counts[V_OK], counts[V_MISMATCH],
            counts[V_UNREACHABLE], unmapped);
    return counts[V_MISMATCH] != 0 || counts[V_UNREACHABLE] != 0 || unmapped != 0 ? 1 : 0;
}
