/*
 * TLS: server contexts (one per configured certificate, chosen by SNI
 * against the certificate's SAN, the first being the default) and the client
 * context lookout uses towards TLS brokers.  TLS 1.2 and 1.3 only; ALPN
 * offers http/1.1 on HTTP binds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lk_conn.h"
#include "lk_log.h"

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

/* SNI: switch to the context whose certificate names the server. */
static int
servername_cb(SSL *ssl, int *alert, void *arg)
{
    struct lk_runtime *rt = arg;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

    if (name == NULL)
        return SSL_TLSEXT_ERR_OK;
    for (size_t i = 0; i < rt->nserver_ctx; i++) {
        if (cert_matches(rt->server_ctx[i], name)) {
            if (SSL_get_SSL_CTX(ssl) != rt->server_ctx[i])
                SSL_set_SSL_CTX(ssl, rt->server_ctx[i]);
            return SSL_TLSEXT_ERR_OK;
        }
    }
    /* No certificate names it: the default answers; routing decides later. */
    return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *
server_ctx_new(struct lk_runtime *rt, const struct lk_cert *cert, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "%s: cannot create a TLS context", rt->conf->file);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert->cert_file) != 1) {
        ssl_err(err, errlen, "tls.certificate: cannot load", cert->cert_file, cert->line,
                rt->conf->file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cert->key_file, SSL_FILETYPE_PEM) != 1) {
        ssl_err(err, errlen, "tls.key: cannot load", cert->key_file, cert->line, rt->conf->file);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_err(err, errlen, "tls.key does not match the certificate", cert->key_file,
                cert->line, rt->conf->file);
        goto fail;
    }
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, rt);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
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
    static const unsigned char h11[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, h11, sizeof(h11) - 1);
    return ctx;
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
        if (l != NULL && l->addr[LK_SCHEME_HTTPS] != NULL)
            return 1;
    }
    return 0;
}

struct lk_runtime *
lk_runtime_new(struct lk_conf *conf, char *err, size_t errlen)
{
    struct lk_runtime *rt = lk_xcalloc(1, sizeof(*rt));

    rt->conf = lk_conf_ref(conf);
    rt->health = lk_xcalloc(conf->nbrokers + 1, sizeof(*rt->health));
    rt->rr = lk_xcalloc(conf->nclusters + 1, sizeof(*rt->rr));
    if (needs_tls(conf, 1)) {
        if (conf->ncerts == 0) {
            for (size_t i = 0; i < conf->nbinds; i++)
                if (conf->binds[i]->tls) {
                    snprintf(err, errlen,
                             "%s: bind %s terminates TLS but [lookout] has no tls.certificate",
                             conf->file, conf->binds[i]->text);
                    break;
                }
            goto fail;
        }
        rt->server_ctx = lk_xcalloc(conf->ncerts, sizeof(SSL_CTX *));
        for (size_t i = 0; i < conf->ncerts; i++) {
            rt->server_ctx[i] = server_ctx_new(rt, &conf->certs[i], err, errlen);
            if (rt->server_ctx[i] == NULL)
                goto fail;
            rt->nserver_ctx++;
        }
    }
    if (needs_tls(conf, 0)) {
        rt->client_ctx = client_ctx_new(conf, err, errlen);
        if (rt->client_ctx == NULL)
            goto fail;
        if (!conf->upstream_verify)
            lk_log(LK_WARN, NULL,
                   "tls.upstream_verify = off: broker certificates are NOT verified");
    }
    return rt;
fail:
    lk_runtime_free(rt);
    return NULL;
}

void
lk_runtime_free(struct lk_runtime *rt)
{
    if (rt == NULL)
        return;
    for (size_t i = 0; i < rt->nserver_ctx; i++)
        SSL_CTX_free(rt->server_ctx[i]);
    free(rt->server_ctx);
    SSL_CTX_free(rt->client_ctx);
    free(rt->health);
    free(rt->rr);
    lk_conf_unref(rt->conf);
    free(rt);
}
