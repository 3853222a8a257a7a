/*
 * fullhs.c: preloaded into wrk for the "TLS new handshakes" scenario.
 *
 * wrk closes a connection with SSL_shutdown() and SSL_clear(), which keeps
 * the SSL's session, so its next connect offers that session and a server
 * that allows resumption (tickets, a session cache) gets an abbreviated
 * handshake.  This wrapper drops the session after SSL_clear(), so every
 * connection does a full handshake whatever the server allows.  bench/run
 * checks it against a server with tickets on before using it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <openssl/ssl.h>

int
SSL_clear(SSL *s)
{
    static int (*real_clear)(SSL *);

    if (real_clear == NULL)
        real_clear = (int (*)(SSL *))dlsym(RTLD_NEXT, "SSL_clear");
    if (real_clear == NULL)
        return 0;
    int r = real_clear(s);
    SSL_set_session(s, NULL);
    return r;
}
