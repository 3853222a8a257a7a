/*
 * floor.c: the least an HTTP/1.1 reverse proxy can do per exchange on this
 * kernel, for bench/kernel-split's target "floor".  It is the bound the
 * real proxies are measured against, not a proxy: one thread, one epoll set,
 * no configuration, no logging, no TLS, no timeouts, GET requests without a
 * body and answers with a Content-Length only.  What it does per exchange is
 * what nginx, HAProxy and lookout must all do for the same bytes:
 *
 *   - accept the client (one accept4() per readiness of the listener, as
 *     nginx's multi_accept off), and register it for reading;
 *   - read the request head, and send it to the backend on a kept-alive
 *     connection from a pool (a new one only when the pool is empty), without
 *     the client's Connection header, as proxy_set_header Connection "";
 *   - read the answer's head and its Content-Length bytes, and send them to
 *     the client in one writev(), with "Connection: close" added when the
 *     client asked for it (then in one sendmsg() with MSG_MORE, so that the
 *     close sends the answer's tail and the FIN in one segment);
 *   - then close the client (Connection: close) or wait for its next request.
 *
 * Nothing else: no parsing past finding the end of the head, the Connection
 * header and Content-Length; buffers are the connection's own 16 KiB, a head
 * or answer larger than that closes the exchange.  A partial write of an
 * answer waits for EPOLLOUT.  The backend must be on this host: a new
 * upstream connection is made with a blocking connect().
 *
 * The "-d" switch sets TCP_DEFER_ACCEPT on the listener (the kernel hands a
 * connection over only once its first bytes are in) and reads right after
 * accept4(), saving a turn of the loop per new connection.
 *
 * "-t IP:PORT CERT KEY" adds a TLS listener (OpenSSL, TLS 1.2 and 1.3, no
 * session cache and no tickets, as bench/run sets every proxy): the
 * handshake, then the same exchange with SSL_read and one SSL_write per
 * answer (one record).  A handshake or an answer the socket will not take at
 * once ends the connection: on loopback neither happens.  A closing client
 * gets its close_notify, and its socket is corked before the answer's
 * SSL_write, so that the close sends the record, the alert and the FIN in
 * one segment.
 *
 *   floor [-d] [-t TLS_IP:PORT CERT KEY] LISTEN_IP:PORT BACKEND_IP:PORT
 *
 * Runs until killed.  Binds where it is told (bench/ uses 127.0.0.0/8).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define BUF 16384

enum kind { LISTENER, TLS_LISTENER, CLIENT, UPSTREAM, DEAD };

struct conn {
    enum kind kind;
    int fd;
    struct conn *peer;      /* the client's upstream while an exchange runs, and back */
    struct conn *next_idle; /* upstreams in the pool */
    int close_after;        /* client: Connection: close was asked */
    size_t len;             /* bytes in buf */
    size_t out_off, out_len;/* client: a write waiting for EPOLLOUT */
    SSL *ssl;               /* client of the TLS listener */
    int handshaking;
    char buf[BUF];
};

static int ep;
static struct sockaddr_in backend;
static struct conn *pool;
static struct conn *dead;       /* freed after the batch of events that may name them */
static int defer_accept;
static SSL_CTX *tls;

static void
die(const char *what)
{
    perror(what);
    exit(1);
}

static void
addr_of(const char *s, struct sockaddr_in *sin)
{
    char host[64];
    const char *colon = strrchr(s, ':');

    if (colon == NULL || (size_t) (colon - s) >= sizeof(host)) {
        fprintf(stderr, "floor: %s: want IP:PORT\n", s);
        exit(2);
    }
    memcpy(host, s, colon - s);
    host[colon - s] = '\0';
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons(atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sin->sin_addr) != 1) {
        fprintf(stderr, "floor: %s: not an IPv4 address\n", host);
        exit(2);
    }
}

static struct conn *
conn_new(enum kind kind, int fd)
{
    struct conn *c = malloc(sizeof(*c));
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

    if (c == NULL)
        die("malloc");
    c->kind = kind;
    c->fd = fd;
    c->peer = c->next_idle = NULL;
    c->close_after = 0;
    c->len = c->out_off = c->out_len = 0;
    c->ssl = NULL;
    c->handshaking = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl");
    return c;
}

static void
conn_free(struct conn *c)
{
    if (c->ssl != NULL) {
        if (!c->handshaking)
            SSL_shutdown(c->ssl);       /* its close_notify; no wait for the peer's */
        SSL_free(c->ssl);
    }
    close(c->fd);   /* also leaves the epoll set */
    c->kind = DEAD;
    c->next_idle = dead;
    dead = c;
}

static void
pool_drop(struct conn *u)
{
    struct conn **p;

    for (p = &pool; *p != NULL; p = &(*p)->next_idle)
        if (*p == u) {
            *p = u->next_idle;
            break;
        }
}

static void
end_client(struct conn *c)
{
    if (c->peer != NULL) {      /* mid-exchange: the upstream's state is unknown */
        c->peer->peer = NULL;
        conn_free(c->peer);
    }
    conn_free(c);
}

static struct conn *
upstream_get(void)
{
    struct conn *u = pool;
    int fd, one = 1;

    if (u != NULL) {
        pool = u->next_idle;
        return u;
    }
    /* Blocking, then non-blocking: the backend is on this host, so the
     * connect is over at once, and the request can be written straight
     * after it; this happens only while the pool fills. */
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *) &backend, sizeof(backend)) < 0 ||
        fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
        close(fd);
        return NULL;
    }
    return conn_new(UPSTREAM, fd);
}

/* A case-insensitive search for a header name at a line's start in head[0, len). */
static const char *
header(const char *head, size_t len, const char *name, size_t nlen)
{
    const char *p = head, *end = head + len;

    while ((p = memchr(p, '\n', end - p)) != NULL) {
        p++;
        if ((size_t) (end - p) > nlen && strncasecmp(p, name, nlen) == 0)
            return p;
    }
    return NULL;
}

/* write(2) to a client, through its TLS session if it has one: -1 with
 * EAGAIN when the socket would block. */
static ssize_t
client_write(struct conn *c, const void *p, size_t n)
{
    int r;

    if (c->ssl == NULL)
        return write(c->fd, p, n);
    r = SSL_write(c->ssl, p, (int) n);
    if (r > 0)
        return r;
    errno = SSL_get_error(c->ssl, r) == SSL_ERROR_WANT_WRITE ? EAGAIN : EIO;
    return -1;
}

/* The client's request head is in c->buf[0, head): send it upstream without
 * its Connection line (a connection of the pool stays open). */
static void
forward_request(struct conn *c, size_t head)
{
    struct conn *u = upstream_get();
    const char *conn = header(c->buf, head, "connection:", 11);
    struct iovec iov[2];
    int n = 1;
    ssize_t w;
    size_t want = head;

    if (u == NULL) {
        end_client(c);
        return;
    }
    c->close_after = 0;
    iov[0].iov_base = c->buf;
    iov[0].iov_len = head;
    if (conn != NULL) {
        const char *eol = memchr(conn, '\n', c->buf + head - conn);

        c->close_after = memmem(conn, eol - conn, "close", 5) != NULL;
        iov[0].iov_len = conn - c->buf;
        iov[1].iov_base = (char *) eol + 1;
        iov[1].iov_len = c->buf + head - (eol + 1);
        want = iov[0].iov_len + iov[1].iov_len;
        n = 2;
    }
    c->peer = u;
    u->peer = c;
    u->len = 0;
    /* A request head is well under a socket's send buffer: one write. */
    w = writev(u->fd, iov, n);
    if (w != (ssize_t) want)
        end_client(c);
}

static void
client_readable(struct conn *c)
{
    ssize_t r;
    char *end;

    if (c->peer != NULL || c->out_len != 0) {   /* pipelining: not in the floor */
        end_client(c);
        return;
    }
    if (c->ssl == NULL)
        r = read(c->fd, c->buf + c->len, BUF - c->len);
    else {
        if (c->handshaking) {
            int h = SSL_do_handshake(c->ssl);

            if (h != 1) {
                if (SSL_get_error(c->ssl, h) != SSL_ERROR_WANT_READ)
                    end_client(c);
                return;
            }
            c->handshaking = 0;
        }
        r = SSL_read(c->ssl, c->buf + c->len, (int) (BUF - c->len));
        if (r <= 0) {
            int e = SSL_get_error(c->ssl, r);

            errno = e == SSL_ERROR_WANT_READ ? EAGAIN : EIO;
            r = e == SSL_ERROR_ZERO_RETURN ? 0 : -1;
        }
    }
    if (r <= 0) {
        if (r < 0 && errno == EAGAIN)
            return;
        end_client(c);
        return;
    }
    c->len += r;
    end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (end == NULL) {
        if (c->len == BUF)
            end_client(c);
        return;
    }
    forward_request(c, end + 4 - c->buf);
    /* a client whose exchange ended has been freed: nothing of c after this */
}

static void
client_done(struct conn *c)
{
    c->len = 0;
    if (c->close_after)
        end_client(c);
}

static void
client_flush(struct conn *c, struct conn *u)
{
    ssize_t w = client_write(c, u->buf + c->out_off, c->out_len);
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };

    if (w < 0) {
        if (errno != EAGAIN) {
            end_client(c);
            return;
        }
        w = 0;
    }
    c->out_off += w;
    c->out_len -= w;
    if (c->out_len == 0) {
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->peer = NULL;
        u->peer = NULL;
        u->next_idle = pool;
        pool = u;
        client_done(c);
    }
}

static void
upstream_readable(struct conn *u)
{
    struct conn *c = u->peer;
    ssize_t r, w;
    char *end;
    const char *cl;
    size_t head, total, want;
    static const char close_hdr[] = "Connection: close\r\n";
    struct iovec iov[4];

    r = read(u->fd, u->buf + u->len, BUF - u->len);
    if (r <= 0) {
        if (r < 0 && errno == EAGAIN)
            return;
        if (c != NULL)
            end_client(c);      /* frees u too */
        else {
            pool_drop(u);
            conn_free(u);
        }
        return;
    }
    if (c == NULL) {            /* bytes on an idle connection */
        pool_drop(u);
        conn_free(u);
        return;
    }
    u->len += r;
    end = memmem(u->buf, u->len, "\r\n\r\n", 4);
    if (end == NULL)
        goto more;
    head = end + 4 - u->buf;
    cl = header(u->buf, head, "content-length:", 15);
    if (cl == NULL) {
        end_client(c);
        return;
    }
    total = head + strtoul(cl + 15, NULL, 10);
    if (total > BUF) {
        end_client(c);
        return;
    }
    if (u->len < total)
        goto more;
    /* The whole answer: to the client, as it is to one that keeps the
     * connection; to one that asked for a close, with the backend's own
     * Connection line (keep-alive) left out and Connection: close before the
     * head's last CRLF. */
    if (c->close_after) {
        const char *conn = header(u->buf, head, "connection:", 11);
        const char *after = conn != NULL ? (const char *) memchr(conn, '\n', u->buf + head - conn) + 1 : NULL;
        int n = 0;

        iov[n].iov_base = u->buf;
        iov[n++].iov_len = (conn != NULL ? conn : u->buf + head - 2) - u->buf;
        if (conn != NULL) {
            iov[n].iov_base = (char *) after;
            iov[n++].iov_len = u->buf + head - 2 - after;
        }
        iov[n].iov_base = (char *) close_hdr;
        iov[n++].iov_len = sizeof(close_hdr) - 1;
        iov[n].iov_base = u->buf + head - 2;
        iov[n++].iov_len = total - (head - 2);
        want = 0;
        for (int i = 0; i < n; i++)
            want += iov[i].iov_len;
        if (c->ssl == NULL) {
            /* MSG_MORE: the kernel holds the tail, and the close right
             * after sends it with the FIN, one segment (and one ACK)
             * less, as lookout does for a client that asked for the close. */
            struct msghdr m = { .msg_iov = iov, .msg_iovlen = n };

            w = sendmsg(c->fd, &m, MSG_MORE | MSG_NOSIGNAL);
        }
        else {                  /* one SSL_write: one record */
            static char one[BUF + sizeof(close_hdr)];
            size_t at = 0;
            int on = 1;

            /* corked, as lookout does: the record, the close_notify and
             * the FIN leave together at the close */
            setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on));

            for (int i = 0; i < n; i++) {
                memcpy(one + at, iov[i].iov_base, iov[i].iov_len);
                at += iov[i].iov_len;
            }
            w = client_write(c, one, want);
        }
    } else {
        want = total;
        w = client_write(c, u->buf, total);
    }
    if (w == (ssize_t) want) {
        c->peer = NULL;
        u->peer = NULL;
        u->next_idle = pool;
        pool = u;
        client_done(c);
        return;
    }
    if (c->close_after || (w < 0 && errno != EAGAIN)) {
        end_client(c);          /* the floor does not keep a closing client's rest */
        return;
    }
    c->out_off = w < 0 ? 0 : (size_t) w;
    c->out_len = total - c->out_off;
    {
        struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };

        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    }
    return;
more:
    if (u->len == BUF)
        end_client(c);
}

static void
accept_one(int lfd, int with_tls)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int one = 1;
    struct conn *c;

    if (fd < 0)
        return;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c = conn_new(CLIENT, fd);
    if (with_tls) {
        c->ssl = SSL_new(tls);
        if (c->ssl == NULL || SSL_set_fd(c->ssl, fd) != 1) {
            end_client(c);
            return;
        }
        SSL_set_accept_state(c->ssl);
        c->handshaking = 1;
    }
    if (defer_accept)
        client_readable(c);     /* its first bytes are in */
}

/* A listener on where ("IP:PORT"), in the epoll set as lc. */
static void
listen_on(const char *where, struct conn *lc)
{
    struct sockaddr_in sin;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = lc };

    addr_of(where, &sin);
    if (lfd < 0)
        die("socket");
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (defer_accept) {
        int secs = 10;

        setsockopt(lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs));
    }
    if (bind(lfd, (struct sockaddr *) &sin, sizeof(sin)) < 0 || listen(lfd, 4096) < 0)
        die(where);
    lc->fd = lfd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
        die("epoll_ctl");
}

static SSL_CTX *
tls_context(const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

    if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        exit(2);
    }
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return ctx;
}

int
main(int argc, char **argv)
{
    struct epoll_event evs[64];
    struct conn lc = { .kind = LISTENER }, tlc = { .kind = TLS_LISTENER };
    const char *tls_at = NULL;
    int arg = 1;

    if (argc > arg && strcmp(argv[arg], "-d") == 0) {
        defer_accept = 1;
        arg++;
    }
    if (argc > arg + 3 && strcmp(argv[arg], "-t") == 0) {
        tls_at = argv[arg + 1];
        tls = tls_context(argv[arg + 2], argv[arg + 3]);
        arg += 4;
    }
    if (argc - arg != 2) {
        fprintf(stderr, "usage: floor [-d] [-t TLS_IP:PORT CERT KEY] LISTEN_IP:PORT BACKEND_IP:PORT\n");
        return 2;
    }
    addr_of(argv[arg + 1], &backend);
    signal(SIGPIPE, SIG_IGN);   /* a close_notify to a client gone: EPIPE, not death */
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    listen_on(argv[arg], &lc);
    if (tls_at != NULL)
        listen_on(tls_at, &tlc);
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1), i;

        for (i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;

            if (c->kind == DEAD)
                continue;
            if (c->kind == LISTENER || c->kind == TLS_LISTENER)
                accept_one(c->fd, c->kind == TLS_LISTENER);
            else if (c->kind == CLIENT) {
                if (evs[i].events & EPOLLOUT)
                    client_flush(c, c->peer);
                else
                    client_readable(c);
            } else
                upstream_readable(c);
        }
        while (dead != NULL) {
            struct conn *c = dead;

            dead = c->next_idle;
            free(c);
        }
    }
}
