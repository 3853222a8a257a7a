/*
 * TLS: server contexts (one per configured certificate, chosen by SNI
 * against the certificate's SAN, the first being the default) and the client
 * context lookout uses towards TLS brokers.  TLS 1.2 and 1.3 only; ALPN
 * offers http/1.1 on HTTP binds.  Session resumption: OpenSSL's in-process
 * session cache (tls.session_cache) and tickets (tls.session_tickets) whose
 * keys come from tls.session_ticket_key files, the first encrypting and all
 * decrypting, or else are lookout's own, made at start and rotated every
 * tls.session_ticket_lifetime.  The contexts, and so the cache and the keys,
 * are shared by every worker.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <event2/bufferevent_ssl.h>

#include "lk_clock.h"
#include "lk_conf.h"
#include "lk_log.h"
#include "lk_pool.h"
#include "lk_tls.h"

static void
ssl_err(char *err, size_t errlen, const char *what, const char *file, int line,
        const char *conf_file)
{
    unsigned long e = ERR_peek_last_error();
    char reason[256] = "";
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    snprintf(err, errlen, "%s:%d: %s %s%s%s", conf_file, line, what, file, e ? ": " : "",
             reason);
}

/* Session tickets --------------------------------------------------------- */

/* One ticket key, laid out as nginx's ssl_session_ticket_key file: name,
 * then the HMAC-SHA256 secret, then the AES-CBC key (32 and 32 bytes in an
 * 80-byte file, AES-256; 16 and 16 in a 48-byte one, AES-128). */
struct ticket_key {
    unsigned char name[16];
    unsigned char hmac[32];
    unsigned char aes[32];
    size_t secret_len; /* 32 or 16: the length of hmac and of aes */
};

/* Own keys: the current one and the one before, so that a ticket lives at
 * least one lifetime and at most two. */
#define OWN_KEYS 2

struct lk_ticket_keys {
    pthread_mutex_t lock;
    struct ticket_key *keys; /* [0] encrypts, all decrypt */
    size_t nkeys;
    int own;              /* lookout's own keys, rotated */
    long long rotated_ms; /* when keys[0] became current (own keys) */
    long long lifetime_ms;
};

static int
key_random(struct ticket_key *k)
{
    k->secret_len = sizeof(k->aes);
    return RAND_bytes(k->name, sizeof(k->name)) == 1 && RAND_bytes(k->hmac, sizeof(k->hmac)) == 1 &&
                   RAND_bytes(k->aes, sizeof(k->aes)) == 1
               ? 0
               : -1;
}

/* Reads an 80- or 48-byte key file; never says anything about its bytes. */
static int
key_read(struct ticket_key *k, const struct lk_ticket_key_file *f, const char *conf_file, char *err,
         size_t errlen)
{
    unsigned char buf[81];
    FILE *fp = fopen(f->file, "rb");
    size_t n;

    if (fp == NULL) {
        snprintf(err, errlen, "%s:%d: tls.session_ticket_key: cannot open %s", conf_file, f->line,
                 f->file);
        return -1;
    }
    n = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    if (n != 80 && n != 48) {
        OPENSSL_cleanse(buf, sizeof(buf));
        snprintf(err, errlen,
                 "%s:%d: tls.session_ticket_key: %s is not 80 bytes (or 48) of key, as "
                 "`openssl rand 80 > FILE` makes",
                 conf_file, f->line, f->file);
        return -1;
    }
    k->secret_len = n == 80 ? 32 : 16;
    memcpy(k->name, buf, 16);
    memcpy(k->hmac, buf + 16, k->secret_len);
    memcpy(k->aes, buf + 16 + k->secret_len, k->secret_len);
    OPENSSL_cleanse(buf, sizeof(buf));
    return 0;
}

static struct lk_ticket_keys *
tickets_new(const struct lk_conf *conf, char *err, size_t errlen)
{
    struct lk_ticket_keys *t = lk_xcalloc(1, sizeof(*t));

    pthread_mutex_init(&t->lock, NULL);
    t->lifetime_ms = (long long)conf->session_lifetime_s * 1000;
    t->own = conf->nticket_keys == 0;
    t->keys = lk_xcalloc(t->own ? OWN_KEYS : conf->nticket_keys, sizeof(*t->keys));
    if (t->own) {
        if (key_random(&t->keys[0]) != 0) {
            snprintf(err, errlen, "%s: cannot make a session ticket key", conf->file);
            goto fail;
        }
        t->nkeys = 1;
        t->rotated_ms = lk_now_ms();
        return t;
    }
    for (size_t i = 0; i < conf->nticket_keys; i++) {
        if (key_read(&t->keys[i], &conf->ticket_keys[i], conf->file, err, errlen) != 0)
            goto fail;
        t->nkeys++;
        for (size_t j = 0; j < i; j++)
            if (memcmp(t->keys[j].name, t->keys[i].name, sizeof(t->keys[i].name)) == 0) {
                snprintf(err, errlen,
                         "%s:%d: tls.session_ticket_key: %s has the same key name (its first 16 "
                         "bytes) as %s (line %d)",
                         conf->file, conf->ticket_keys[i].line, conf->ticket_keys[i].file,
                         conf->ticket_keys[j].file, conf->ticket_keys[j].line);
                goto fail;
            }
    }
    return t;
fail:
    OPENSSL_cleanse(t->keys, (t->own ? OWN_KEYS : conf->nticket_keys) * sizeof(*t->keys));
    free(t->keys);
    pthread_mutex_destroy(&t->lock);
    free(t);
    return NULL;
}

static void
tickets_free(struct lk_ticket_keys *t)
{
    if (t == NULL)
        return;
    OPENSSL_cleanse(t->keys, (t->own ? OWN_KEYS : t->nkeys) * sizeof(*t->keys));
    free(t->keys);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* Own keys: a new current key each lifetime; the previous one still
 * decrypts for one more, then goes.  Called with t->lock held.  Every
 * worker comes through here, so whichever handshake first sees the period
 * over rotates for all of them. */
static void
tickets_rotate(struct lk_ticket_keys *t, long long now)
{
    long long age = now - t->rotated_ms;

    if (!t->own || age < t->lifetime_ms)
        return;
    if (age >= 2 * t->lifetime_ms) {
        t->nkeys = 1; /* idle for two lifetimes: the current key is too old to keep */
    } else {
        t->keys[1] = t->keys[0];
        t->nkeys = 2;
    }
    if (key_random(&t->keys[0]) != 0) {
        /* No randomness: stop issuing tickets rather than reuse a key. */
        t->nkeys = 0;
        return;
    }
    t->rotated_ms = now;
}

/*
 * OpenSSL's ticket callback: with enc, names the key and sets up cipher
 * and MAC to encrypt a new ticket (1, or -1 to send none); without, finds
 * the key the ticket names: 0 when none has it (a full handshake follows),
 * 1 when it is the current key, 2 when it is an older one (the ticket is
 * renewed under the current key).
 */
static int
ticket_key_cb(SSL *ssl, unsigned char name[16], unsigned char iv[16], EVP_CIPHER_CTX *cctx,
              EVP_MAC_CTX *hctx, int enc)
{
    struct lk_ticket_keys *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    struct ticket_key k;
    size_t i = 0;
    int ret = -1;

    pthread_mutex_lock(&t->lock);
    tickets_rotate(t, lk_now_ms());
    if (!enc)
        while (i < t->nkeys && memcmp(t->keys[i].name, name, sizeof(t->keys[i].name)) != 0)
            i++;
    if (i >= t->nkeys) {
        pthread_mutex_unlock(&t->lock);
        return enc ? -1 : 0;
    }
    k = t->keys[i]; /* a copy: a rotation may overwrite the slot */
    pthread_mutex_unlock(&t->lock);

    if (enc) {
        memcpy(name, k.name, sizeof(k.name));
        if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1)
            goto out;
    }
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac, k.secret_len),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_CipherInit_ex(cctx, k.secret_len == 32 ? EVP_aes_256_cbc() : EVP_aes_128_cbc(), NULL,
                          k.aes, iv, enc) != 1 ||
        EVP_MAC_CTX_set_params(hctx, params) != 1)
        goto out;
    ret = enc || i == 0 ? 1 : 2;
out:
    OPENSSL_cleanse(&k, sizeof(k));
    return ret;
}

int
lk_tls_sni_parse(const unsigned char *p, size_t len, char *out, size_t outlen)
{
    size_t n;

    if (len < 5 || (size_t)(p[0] << 8 | p[1]) != len - 2 || p[2] != TLSEXT_NAMETYPE_host_name)
        return -1;
    n = (size_t)(p[3] << 8 | p[4]);
    if (n != len - 5 || n == 0 || n > 255 || n >= outlen || memchr(p + 5, 0, n) != NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)(p[5 + i] >= 'A' && p[5 + i] <= 'Z' ? p[5 + i] + ('a' - 'A') : p[5 + i]);
    out[n] = '\0';
    return (int)n;
}

static const unsigned char sid_ctx_base[] = "lookout";

/*
 * Before OpenSSL looks for a session to resume (by id or ticket, TLS 1.2
 * and 1.3): the session id context becomes one of the name the client
 * asks for, so that a session resumes only under the name it was made
 * for.  One context for all names would let a session made for b1 resume
 * with SNI b2, and in TLS 1.2 OpenSSL then reports the session's name,
 * b1, and lookout would route by it.  No SNI keeps the plain context.
 */
static int
client_hello_cb(SSL *ssl, int *alert, void *arg)
{
    const unsigned char *ext;
    size_t len;
    char name[256];
    unsigned char md[SHA256_DIGEST_LENGTH];
    EVP_MD_CTX *h;
    int n;

    if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) ||
        (n = lk_tls_sni_parse(ext, len, name, sizeof(name))) < 0)
        return SSL_CLIENT_HELLO_SUCCESS; /* OpenSSL refuses a malformed one itself */
    if ((h = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(h, sid_ctx_base, sizeof(sid_ctx_base)) != 1 ||
        EVP_DigestUpdate(h, name, (size_t)n) != 1 || EVP_DigestFinal_ex(h, md, NULL) != 1 ||
        SSL_set_session_id_context(ssl, md, sizeof(md)) != 1) {
        /* Resuming nothing is safe; resuming across names is not. */
        EVP_MD_CTX_free(h);
        *alert = SSL_AD_INTERNAL_ERROR;
        ERR_clear_error();
        return SSL_CLIENT_HELLO_ERROR;
    }
    EVP_MD_CTX_free(h);
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* Session resumption as the config says, on one server context. */
static void
sessions_setup(const struct lk_conf *conf, struct lk_ticket_keys *tickets, SSL_CTX *ctx)
{
    /* Sessions live in the context the handshake began with (the default
     * certificate's) whatever SNI picks; the same id contexts on every
     * context let a session resume after the switch, and one per name
     * (client_hello_cb, which sets the SSL's own before the switch, so
     * that it stays) keeps it to its name. */
    SSL_CTX_set_session_id_context(ctx, sid_ctx_base, sizeof(sid_ctx_base) - 1);
    SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, NULL);
    SSL_CTX_set_app_data(ctx, tickets); /* ticket_key_cb's */
    SSL_CTX_set_timeout(ctx, (long)conf->session_lifetime_s);
    SSL_CTX_set_session_cache_mode(ctx, conf->session_cache ? SSL_SESS_CACHE_SERVER
                                                            : SSL_SESS_CACHE_OFF);
    if (conf->session_tickets) {
        SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb);
    } else {
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
        /* TLS 1.3 would still send tickets naming cached sessions; with no
         * cache either they could never resume, so send none at all. */
        if (!conf->session_cache)
            SSL_CTX_set_num_tickets(ctx, 0);
    }
}

static int
alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
            unsigned int inlen, void *arg)
{
    static const unsigned char h11[] = "\x08http/1.1";
    unsigned char *o;
    if (SSL_select_next_proto(&o, outlen, h11, sizeof(h11) - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK; /* e.g. only h2 offered: no ALPN, HTTP/1.1 anyway */
    *out = o;
    return SSL_TLSEXT_ERR_OK;
}

/* Whether ctx's certificate covers name (SAN DNS with wildcards, or IP). */
static int
cert_matches(SSL_CTX *ctx, const char *name)
{
    X509 *x = SSL_CTX_get0_certificate(ctx);
    if (x == NULL)
        return 0;
    if (X509_check_host(x, name, 0, 0, NULL) == 1)
        return 1;
    return X509_check_ip_asc(x, name, 0) == 1;
}

/* SNI: switch to the context whose certificate names the server (arg:
 * the generation's NULL-terminated server contexts). */
static int
servername_cb(SSL *ssl, int *alert, void *arg)
{
    SSL_CTX **server_ctx = arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

    if (name == NULL)
        return SSL_TLSEXT_ERR_OK;
    for (size_t i = 0; server_ctx[i] != NULL; i++) {
        if (cert_matches(server_ctx[i], name)) {
            if (SSL_get_SSL_CTX(ssl) != server_ctx[i])
                SSL_set_SSL_CTX(ssl, server_ctx[i]);
            return SSL_TLSEXT_ERR_OK;
        }
    }
    /* No certificate names it: the default answers; routing decides later. */
    return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *
server_ctx_new(const struct lk_conf *conf, struct lk_tls_ctxs *t, const struct lk_cert *cert,
               char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "%s: cannot create a TLS context", conf->file);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert->cert_file) != 1) {
        ssl_err(err, errlen, "tls.certificate: cannot load", cert->cert_file, cert->line,
                conf->file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cert->key_file, SSL_FILETYPE_PEM) != 1) {
        ssl_err(err, errlen, "tls.key: cannot load", cert->key_file, cert->line, conf->file);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_err(err, errlen, "tls.key does not match the certificate", cert->key_file,
                cert->line, conf->file);
        goto fail;
    }
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, t->server_ctx);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    sessions_setup(conf, t->tickets, ctx);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

static SSL_CTX *
client_ctx_new(const struct lk_conf *conf, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "%s: cannot create a TLS context", conf->file);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (conf->upstream_verify) {
        int ok = conf->upstream_ca != NULL
                     ? SSL_CTX_load_verify_locations(ctx, conf->upstream_ca, NULL)
                     : SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1) {
            ssl_err(err, errlen, "tls.upstream_ca: cannot load",
                    conf->upstream_ca ? conf->upstream_ca : "(system store)", 0, conf->file);
            SSL_CTX_free(ctx);
            return NULL;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    return ctx; /* ALPN is per connection: lk_upstream_get offers http/1.1 to HTTP brokers */
}

static int
needs_tls(const struct lk_conf *conf, int server)
{
    if (server) {
        for (size_t i = 0; i < conf->nbinds; i++)
            if (conf->binds[i]->tls)
                return 1;
        return 0;
    }
    for (size_t i = 0; i < conf->nbrokers; i++) {
        const struct lk_listener *l = conf->brokers[i]->internal;
        for (int sc = 0; l != NULL && sc < LK_SCHEME__COUNT; sc++)
            if (l->addr[sc] != NULL && lk_scheme_is_tls((enum lk_scheme)sc))
                return 1;
    }
    return 0;
}

void
lk_tls_keep_session(SSL *ssl)
{
    /* OpenSSL drops from the cache the session of any connection freed
     * without a close_notify sent, which is how lookout, and most HTTP
     * clients, end every connection: the cache would never hit.  Mark it
     * shut down, as nginx does, without changing what goes on the wire. */
    if (ssl != NULL && SSL_is_init_finished(ssl))
        SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
}

int
lk_tls_ctxs_new(struct lk_tls_ctxs *t, const struct lk_conf *conf, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    if (needs_tls(conf, 1)) {
        if (conf->ncerts == 0) {
            for (size_t i = 0; i < conf->nbinds; i++)
                if (conf->binds[i]->tls) {
                    snprintf(err, errlen,
                             "%s: bind %s terminates TLS but [lookout] has no tls.certificate",
                             conf->file, conf->binds[i]->text);
                    break;
                }
            return -1;
        }
        if (conf->session_tickets && (t->tickets = tickets_new(conf, err, errlen)) == NULL)
            return -1;
        t->server_ctx = lk_xcalloc(conf->ncerts + 1, sizeof(SSL_CTX *));
        for (size_t i = 0; i < conf->ncerts; i++) {
            t->server_ctx[i] = server_ctx_new(conf, t, &conf->certs[i], err, errlen);
            if (t->server_ctx[i] == NULL)
                return -1;
            t->nserver_ctx++;
        }
    }
    if (needs_tls(conf, 0)) {
        t->client_ctx = client_ctx_new(conf, err, errlen);
        if (t->client_ctx == NULL)
            return -1;
        if (!conf->upstream_verify)
            lk_log(LK_WARN, NULL,
                   "tls.upstream_verify = off: broker certificates are NOT verified");
    }
    return 0;
}

void
lk_tls_ctxs_free(struct lk_tls_ctxs *t)
{
    for (size_t i = 0; i < t->nserver_ctx; i++)
        SSL_CTX_free(t->server_ctx[i]);
    free(t->server_ctx);
    tickets_free(t->tickets);
    SSL_CTX_free(t->client_ctx);
    memset(t, 0, sizeof(*t));
}
