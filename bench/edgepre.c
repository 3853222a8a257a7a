/*
 * edgepre.c: preloaded into wrk (LD_PRELOAD) for the scenarios that open a
 * new connection per request, to make it do what a client behind a load
 * balancer, or one with a certificate, does.  Each part is on only when
 * bench/run asks for it:
 *
 * - Full handshakes (always).  wrk closes a connection with SSL_shutdown()
 *   and SSL_clear(), which keeps the SSL's session, so its next connect
 *   offers that session and a server that allows resumption (tickets, a
 *   session cache) gets an abbreviated handshake.  SSL_clear() here drops the
 *   session after the real one, so every connection does a full handshake
 *   whatever the server allows.
 *
 * - A PROXY protocol v2 header (EDGEPRE_PROXY=1).  Every TCP socket wrk
 *   connect()s is remembered; its first write() or send() is preceded by a
 *   v2 PROXY header (command PROXY, TCP over IPv4) carrying the connection's
 *   own addresses: source = getsockname(), destination = getpeername().  The
 *   header and the caller's bytes go out in one writev()/sendmsg(), so the
 *   byte stream is exactly header then request.  A write that takes only
 *   part of the header keeps the rest for the next call and reports EAGAIN
 *   (nothing of the caller's buffer went), which wrk retries when the socket
 *   is writable again.
 *
 * - A client certificate (EDGEPRE_CERT and EDGEPRE_KEY, PEM files).  Every
 *   SSL_CTX wrk makes loads them, so the client answers a server's
 *   CertificateRequest with that certificate; a file that does not load stops
 *   wrk with a message.
 *
 * bench/run checks each part against a server that logs what it got before
 * anything is measured.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define PP2_LEN 28      /* 12 signature, 4 fixed, 12 of TCP4 addresses */
#define MAX_FD 65536

/* Per descriptor: how many header bytes are still to send (0: none, or
 * not a connection of ours); the header is made on the first write. */
static unsigned char pending[MAX_FD];
static unsigned char header[MAX_FD][PP2_LEN];
static unsigned char built[MAX_FD];

static void *
real(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);

    if (f == NULL) {
        fprintf(stderr, "edgepre: no %s to wrap\n", name);
        abort();
    }
    return f;
}

static int
proxy_on(void)
{
    static int on = -1;

    if (on < 0) {
        const char *v = getenv("EDGEPRE_PROXY");
        on = v != NULL && strcmp(v, "1") == 0;
    }
    return on;
}

int
connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    static int (*real_connect)(int, const struct sockaddr *, socklen_t);
    int type = 0;
    socklen_t tl = sizeof(type);

    if (real_connect == NULL)
        real_connect = real("connect");
    if (fd >= 0 && fd < MAX_FD) {
        pending[fd] = 0;
        if (proxy_on() && addr != NULL && addr->sa_family == AF_INET &&
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
            pending[fd] = PP2_LEN;
            built[fd] = 0;
        }
    }
    return real_connect(fd, addr, len);
}

int
close(int fd)
{
    static int (*real_close)(int);

    if (real_close == NULL)
        real_close = real("close");
    if (fd >= 0 && fd < MAX_FD)
        pending[fd] = 0;
    return real_close(fd);
}

/* The v2 header of fd's connection: PROXY, TCP over IPv4, its addresses. */
static int
build_header(int fd)
{
    static const unsigned char sig[12] = "\r\n\r\n\0\r\nQUIT\n";
    struct sockaddr_in src, dst;
    socklen_t sl = sizeof(src), dl = sizeof(dst);
    unsigned char *h = header[fd];

    if (getsockname(fd, (struct sockaddr *)&src, &sl) != 0 ||
        getpeername(fd, (struct sockaddr *)&dst, &dl) != 0 ||
        src.sin_family != AF_INET || dst.sin_family != AF_INET)
        return -1;
    memcpy(h, sig, 12);
    h[12] = 0x21;                       /* version 2, PROXY */
    h[13] = 0x11;                       /* AF_INET, STREAM */
    h[14] = 0;
    h[15] = 12;                         /* address length, big endian */
    memcpy(h + 16, &src.sin_addr, 4);
    memcpy(h + 20, &dst.sin_addr, 4);
    memcpy(h + 24, &src.sin_port, 2);   /* already in network order */
    memcpy(h + 26, &dst.sin_port, 2);
    built[fd] = 1;
    return 0;
}

/* Sends what is left of fd's header and then buf, in one sendmsg(): the
 * bytes of buf that went (r), or -1 with errno (EAGAIN when only header
 * bytes went). */
static ssize_t
send_with_header(int fd, const void *buf, size_t len, int flags)
{
    static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
    unsigned left = pending[fd];
    struct iovec iov[2];
    struct msghdr msg;
    ssize_t r;

    if (real_sendmsg == NULL)
        real_sendmsg = real("sendmsg");
    if (!built[fd] && build_header(fd) != 0) {
        /* Not connected (yet): let the plain call report it. */
        return -2;
    }
    iov[0].iov_base = header[fd] + (PP2_LEN - left);
    iov[0].iov_len = left;
    iov[1].iov_base = (void *)buf;
    iov[1].iov_len = len;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    r = real_sendmsg(fd, &msg, flags | MSG_NOSIGNAL);
    if (r < 0)
        return r;
    if ((size_t)r < left) {
        pending[fd] = (unsigned char)(left - r);
        errno = EAGAIN;
        return -1;
    }
    pending[fd] = 0;
    if ((size_t)r == left && len > 0) {
        errno = EAGAIN;
        return -1;
    }
    return r - left;
}

ssize_t
write(int fd, const void *buf, size_t len)
{
    static ssize_t (*real_write)(int, const void *, size_t);

    if (real_write == NULL)
        real_write = real("write");
    if (fd >= 0 && fd < MAX_FD && pending[fd]) {
        ssize_t r = send_with_header(fd, buf, len, 0);
        if (r != -2)
            return r;
    }
    return real_write(fd, buf, len);
}

ssize_t
send(int fd, const void *buf, size_t len, int flags)
{
    static ssize_t (*real_send)(int, const void *, size_t, int);

    if (real_send == NULL)
        real_send = real("send");
    if (fd >= 0 && fd < MAX_FD && pending[fd]) {
        ssize_t r = send_with_header(fd, buf, len, flags);
        if (r != -2)
            return r;
    }
    return real_send(fd, buf, len, flags);
}

SSL_CTX *
SSL_CTX_new(const SSL_METHOD *method)
{
    static SSL_CTX *(*real_ctx_new)(const SSL_METHOD *);
    const char *crt = getenv("EDGEPRE_CERT"), *key = getenv("EDGEPRE_KEY");
    SSL_CTX *ctx;

    if (real_ctx_new == NULL)
        real_ctx_new = real("SSL_CTX_new");
    ctx = real_ctx_new(method);
    if (ctx == NULL || crt == NULL || *crt == '\0')
        return ctx;
    if (SSL_CTX_use_certificate_chain_file(ctx, crt) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key != NULL ? key : crt, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        fprintf(stderr, "edgepre: cannot load the client certificate %s and key %s\n", crt,
                key != NULL ? key : crt);
        ERR_print_errors_fp(stderr);
        exit(2);
    }
    return ctx;
}

int
SSL_clear(SSL *s)
{
    static int (*real_clear)(SSL *);

    if (real_clear == NULL)
        real_clear = real("SSL_clear");
    int r = real_clear(s);
    SSL_set_session(s, NULL);
    return r;
}
