/*
 * TLS contexts (lk_tls.c): the server contexts of a config's certificates,
 * chosen by SNI, with session resumption, and the client context for TLS
 * brokers.  Built for each generation by lk_runtime.c; nothing here knows
 * the runtime.
 */
#ifndef LK_TLS_H
#define LK_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/ssl.h>

struct lk_bind;
struct lk_conf;
struct lk_ticket_keys;
struct lk_client_auths;

/* What a config's TLS needs, as struct lk_runtime holds it. */
struct lk_tls_ctxs {
    SSL_CTX **server_ctx; /* one per certificate, chosen by SNI; [0] is default;
                           * NULL-terminated */
    size_t nserver_ctx;
    SSL_CTX *client_ctx;            /* for TLS to brokers; NULL when no broker is TLS */
    struct lk_ticket_keys *tickets; /* session ticket keys; NULL: no tickets */
    /* Client certificates (tls.verify_client): [lookout]'s are set on
     * every server context; a cluster's own, SNI applies to the connection
     * (lk_tls_set_bind).  NULL: off everywhere. */
    struct lk_client_auths *auths;
};

/* Builds t for conf (zeroed first): server contexts when a bind terminates
 * TLS, the client context when a broker address is TLS.  0, or -1 with
 * err (what was built is in t, for lk_tls_ctxs_free). */
int lk_tls_ctxs_new(struct lk_tls_ctxs *t, const struct lk_conf *conf, char *err, size_t errlen);
void lk_tls_ctxs_free(struct lk_tls_ctxs *t);
/* Before a client's TLS connection is freed: keeps its session resumable
 * (tls.session_cache).  Nothing is sent. */
void lk_tls_keep_session(SSL *ssl);
/* The bind a client's TLS connection came in on, given when the runtime
 * asks for client certificates (its auths): SNI then chooses a cluster's
 * own settings by the cluster it routes to. */
void lk_tls_set_bind(SSL *ssl, const struct lk_bind *b);
/*
 * Why a client's certificate was refused ("client certificate
 * '/O=x/CN=y' refused: certificate has expired"), written into buf, or
 * NULL when the handshake did not fail on one.
 */
const char *lk_tls_client_refusal(SSL *ssl, char *buf, size_t len);
/*
 * Which client-certificate check a connection passed, as a number that
 * stays the same across reloads while the settings do: the connection's
 * (lk_tls_conn_auth_id, at the end of its handshake) and the one a
 * cluster asks for (lk_tls_auth_id, as routed later).  0: none.
 */
uint64_t lk_tls_conn_auth_id(SSL *ssl);
uint64_t lk_tls_auth_id(const struct lk_client_auths *as, size_t cluster_index);
/* The subject of the client's verified certificate, RFC 2253, into buf
 * (at most len - 1 bytes, never a control character); NULL: none. */
const char *lk_tls_client_subject(SSL *ssl, char *buf, size_t len);
/* How many names the SNI cache of t's server contexts holds (at most its
 * fixed number of slots); 0 with fewer than two certificates. */
size_t lk_tls_sni_cached(const struct lk_tls_ctxs *t);

/*
 * The host name in the body of a ClientHello's server_name extension (RFC
 * 6066 §3), checked as OpenSSL checks it: a 2-byte list length covering
 * the rest, one entry of type host_name (0) whose 2-byte length covers
 * the rest, a name of 1 to 255 bytes without NUL.  Writes it lower-cased
 * and NUL-terminated into out (outlen > 255) and returns its length, or -1
 * when the body is not that.  Pure; the client-hello callback uses it to
 * keep each session to the name it was made for.
 */
int lk_tls_sni_parse(const unsigned char *p, size_t len, char *out, size_t outlen);

#endif
