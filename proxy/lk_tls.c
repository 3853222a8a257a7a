/*
 * TLS: server contexts (one per configured certificate, chosen by SNI
 * against the certificate's SAN, the first being the default) and the client
 * context lookout uses towards TLS brokers.  TLS 1.2 and 1.3 only; ALPN
 * offers http/1.1 on HTTP binds.  Session resumption: OpenSSL's in-process
 * session cache (tls.session_cache) and tickets (tls.session_tickets) whose
 * keys come from tls.session_ticket_key files, the first encrypting and all
 * decrypting, or else are lookout's own, made at start and rotated every
 * tls.session_ticket_lifetime.  Client certificates (tls.verify_client):
 * [lookout]'s settings on every server context, a cluster's own applied to
 * the connection whose SNI routes to it.  The contexts, and so the cache
 * and the keys, are shared by every worker.
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
#include "lk_route.h"
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


/* Client certificates ------------------------------------------------------ */

/* One set of client-certificate settings: [lookout]'s or a cluster's. */
struct lk_client_auth {
    int mode;                   /* SSL_VERIFY_*; 0: none asked */
    X509_STORE *store;          /* the CAs and the CRL */
    STACK_OF(X509_NAME) *names; /* the CAs the CertificateRequest names */
    /* The session id context of its connections: a session resumes only
     * under the settings it was verified with. */
    unsigned char sid[SHA256_DIGEST_LENGTH];
    /* A cluster's own settings, by certificate: a server context like that
     * certificate's with these settings on it, which servername_cb switches
     * to; NULL: they go on each connection (a copy of the CA names, ~30k
     * instructions a handshake).  See variants_new. */
    SSL_CTX **ctx;
    size_t nctx;
    int on_ctx; /* [lookout]'s: on every server context, so on each connection from its start */
};

struct lk_client_auths {
    struct lk_client_auth global;
    struct lk_client_auth *cluster; /* by cluster index; NULL: all inherit */
    size_t ncluster;
};

static void sni_cache_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                           void *argp);

/* SSL: the bind, the settings chosen, why a certificate was refused
 * (malloc'd text); SSL_CTX: the auths, and the first server context of a
 * generation its SNI cache. */
static int ex_bind = -1, ex_chosen = -1, ex_refusal = -1, ex_auths = -1, ex_sni = -1;
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;

static void
refusal_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    free(ptr);
}

static void
ex_init(void)
{
    ex_bind = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    ex_chosen = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    ex_refusal = SSL_get_ex_new_index(0, NULL, NULL, NULL, refusal_free);
    ex_auths = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    ex_sni = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, sni_cache_free);
}

/* A name as RFC 2253 text, escaped by OpenSSL, and never a control byte. */
static const char *
name_text(const X509_NAME *n, char *buf, size_t len)
{
    BIO *b = BIO_new(BIO_s_mem());
    int got = 0;

    if (len == 0)
        return NULL;
    if (b != NULL && n != NULL && X509_NAME_print_ex(b, n, 0, XN_FLAG_RFC2253) >= 0)
        got = BIO_read(b, buf, (int)(len - 1));
    BIO_free(b);
    buf[got > 0 ? got : 0] = '\0';
    for (char *p = buf; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '.';
    return buf;
}

/* OpenSSL's verdict stands; the first failure is kept to be logged with the
 * certificate's subject (the alert OpenSSL sends follows the reason). */
static int
client_verify_cb(int ok, X509_STORE_CTX *x)
{
    SSL *ssl;
    char subject[512], msg[1024];
    int err, depth;

    if (ok)
        return 1;
    ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
    if (ssl == NULL || SSL_get_ex_data(ssl, ex_refusal) != NULL)
        return 0;
    err = X509_STORE_CTX_get_error(x);
    depth = X509_STORE_CTX_get_error_depth(x);
    name_text(X509_get_subject_name(X509_STORE_CTX_get0_cert(x)), subject, sizeof(subject));
    snprintf(msg, sizeof(msg), "client certificate '%s' refused: %s", subject,
             X509_verify_cert_error_string(err));
    if (depth > 0)
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (its issuer at depth %d)", depth);
    if (SSL_set_ex_data(ssl, ex_refusal, lk_xstrdup(msg)) != 1)
        free(SSL_get_ex_data(ssl, ex_refusal));
    return 0;
}

static int
auth_setup(struct lk_client_auth *a, int verify, const char *ca, const char *crl,
           const char *who, const struct lk_conf *conf, char *err, size_t errlen)
{
    EVP_MD_CTX *h;
    BIO *b;
    X509_CRL *x;
    int ncrl = 0;

    if (verify != LK_VERIFY_OPTIONAL && verify != LK_VERIFY_ON)
        return 0;
    if (ca == NULL) {
        snprintf(err, errlen, "%s: %s: tls.verify_client = %s needs a tls.client_ca", conf->file,
                 who, lk_verify_client_names[verify]);
        return -1;
    }
    if ((a->store = X509_STORE_new()) == NULL || X509_STORE_load_file(a->store, ca) != 1) {
        ssl_err(err, errlen, "tls.client_ca: cannot load", ca, 0, conf->file);
        return -1;
    }
    if ((a->names = SSL_load_client_CA_file(ca)) == NULL) {
        ssl_err(err, errlen, "tls.client_ca: no CA certificate in", ca, 0, conf->file);
        return -1;
    }
    if (crl != NULL) {
        if ((b = BIO_new_file(crl, "r")) == NULL) {
            ssl_err(err, errlen, "tls.client_crl: cannot open", crl, 0, conf->file);
            return -1;
        }
        while ((x = PEM_read_bio_X509_CRL(b, NULL, NULL, NULL)) != NULL) {
            ncrl += X509_STORE_add_crl(a->store, x) == 1;
            X509_CRL_free(x);
        }
        BIO_free(b);
        ERR_clear_error(); /* the end of the file */
        if (ncrl == 0) {
            snprintf(err, errlen, "%s: tls.client_crl: no PEM CRL in %s", conf->file, crl);
            return -1;
        }
        /* The leaf's issuer must have a CRL in the file. */
        X509_STORE_set_flags(a->store, X509_V_FLAG_CRL_CHECK);
    }
    a->mode = SSL_VERIFY_PEER | (verify == LK_VERIFY_ON ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0);
    if ((h = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(h, "lookout verify", 15) != 1 ||
        EVP_DigestUpdate(h, who, strlen(who) + 1) != 1 ||
        EVP_DigestUpdate(h, &a->mode, sizeof(a->mode)) != 1 ||
        EVP_DigestUpdate(h, ca, strlen(ca) + 1) != 1 ||
        EVP_DigestFinal_ex(h, a->sid, NULL) != 1) {
        EVP_MD_CTX_free(h);
        snprintf(err, errlen, "%s: %s: cannot hash the session context", conf->file, who);
        return -1;
    }
    EVP_MD_CTX_free(h);
    return 0;
}

static void
auth_clear(struct lk_client_auth *a)
{
    for (size_t i = 0; i < a->nctx; i++)
        SSL_CTX_free(a->ctx[i]);
    free(a->ctx);
    X509_STORE_free(a->store);
    sk_X509_NAME_pop_free(a->names, X509_NAME_free);
}

static void
auths_free(struct lk_client_auths *as)
{
    if (as == NULL)
        return;
    auth_clear(&as->global);
    for (size_t i = 0; as->cluster != NULL && i < as->ncluster; i++)
        auth_clear(&as->cluster[i]);
    free(as->cluster);
    free(as);
}

/* The settings of conf; NULL with err empty when no one asks for a
 * certificate. */
static struct lk_client_auths *
auths_new(const struct lk_conf *conf, char *err, size_t errlen)
{
    struct lk_client_auths *as = lk_xcalloc(1, sizeof(*as));
    int any = conf->verify_client != LK_VERIFY_OFF, own = 0;
    char who[300];

    pthread_once(&ex_once, ex_init);
    for (size_t i = 0; i < conf->nclusters; i++)
        own |= conf->clusters[i]->verify_client != LK_VERIFY_INHERIT ||
               conf->clusters[i]->client_ca != NULL;
    if (auth_setup(&as->global, conf->verify_client, conf->client_ca, conf->client_crl,
                   "[lookout]", conf, err, errlen) != 0)
        goto fail;
    as->global.on_ctx = 1; /* server_ctx_new */
    if (own) {
        as->cluster = lk_xcalloc(conf->nclusters, sizeof(*as->cluster));
        as->ncluster = conf->nclusters;
        for (size_t i = 0; i < conf->nclusters; i++) {
            const struct lk_cluster *cl = conf->clusters[i];
            int v = cl->verify_client != LK_VERIFY_INHERIT ? cl->verify_client
                                                           : conf->verify_client;
            snprintf(who, sizeof(who), "[%s %s]", cl->proto & LK_PROTO_KAFKA ? "kafka" : "pulsar",
                     cl->name);
            if (auth_setup(&as->cluster[i], v, cl->client_ca ? cl->client_ca : conf->client_ca,
                           conf->client_crl, who, conf, err, errlen) != 0)
                goto fail;
            any |= v != LK_VERIFY_OFF;
        }
    }
    if (any)
        return as;
fail:
    auths_free(as);
    return NULL;
}

/* Which settings a connection gets: those of the cluster its SNI routes to
 * on its socket; with no SNI, or one naming no cluster there, the strictest
 * of the socket's clusters, so that an HTTP Host cannot pass a check. */
static const struct lk_client_auth *
auth_for(SSL *ssl, const struct lk_client_auths *as, const char *sni)
{
    const struct lk_bind *b;
    const struct lk_vhost *vh;
    const struct lk_client_auth *a = NULL;

    if (as->cluster == NULL || (b = SSL_get_ex_data(ssl, ex_bind)) == NULL)
        return &as->global;
    if ((vh = lk_route(b, lk_str_c(sni), LK_STR_NULL, 0)) != NULL && sni != NULL)
        return &as->cluster[vh->cluster->index];
    for (size_t i = 0; i < b->nvhosts; i++) {
        const struct lk_client_auth *c = &as->cluster[b->vhosts[i].cluster->index];
        if (a == NULL || c->mode > a->mode)
            a = c;
    }
    return a != NULL ? a : &as->global;
}

void
lk_tls_set_bind(SSL *ssl, const struct lk_bind *b)
{
    SSL_set_ex_data(ssl, ex_bind, (void *)(uintptr_t)b);
}

static uint64_t
auth_id(const struct lk_client_auth *a)
{
    uint64_t id = 0;

    if (a != NULL && a->mode != 0)
        memcpy(&id, a->sid, sizeof(id));
    return id;
}

uint64_t
lk_tls_conn_auth_id(SSL *ssl)
{
    return ex_chosen >= 0 ? auth_id(SSL_get_ex_data(ssl, ex_chosen)) : 0;
}

uint64_t
lk_tls_auth_id(const struct lk_client_auths *as, size_t cluster_index)
{
    if (as == NULL)
        return 0;
    return auth_id(as->cluster != NULL ? &as->cluster[cluster_index] : &as->global);
}

const char *
lk_tls_client_refusal(SSL *ssl, char *buf, size_t len)
{
    const char *why = ex_refusal >= 0 ? SSL_get_ex_data(ssl, ex_refusal) : NULL;

    if (why == NULL && ERR_GET_LIB(ERR_peek_last_error()) == ERR_LIB_SSL &&
        ERR_GET_REASON(ERR_peek_last_error()) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
        why = "a client certificate is required and none was sent";
    if (why == NULL)
        return NULL;
    snprintf(buf, len, "%s", why);
    return buf;
}

/*
 * The text of recent client certificates' subjects, by the subject's DER:
 * name_text costs some 15k instructions, once per handshake, and clients
 * show the same few certificates again and again.  The text depends on
 * the DER alone, so it never goes stale across reloads; a subject in a
 * taken slot replaces what was there, so the table never grows.
 */
#define SUBJECT_SLOTS 64
#define SUBJECT_DER_MAX 256
#define SUBJECT_TEXT_MAX 512

struct subject_slot {
    size_t derlen; /* 0: empty */
    unsigned char der[SUBJECT_DER_MAX];
    char text[SUBJECT_TEXT_MAX]; /* name_text's with a buffer this long */
};

static struct {
    pthread_mutex_t lock;
    struct subject_slot slot[SUBJECT_SLOTS];
} subjects = {PTHREAD_MUTEX_INITIALIZER, {{0}}};

/* name_text(n, buf, len), from the table when it has n. */
static const char *
subject_text(const X509_NAME *n, char *buf, size_t len)
{
    const unsigned char *der;
    size_t derlen;
    uint32_t h = 2166136261u; /* FNV-1a */
    struct subject_slot *sl;
    char text[SUBJECT_TEXT_MAX];
    size_t k;
    int hit;

    /* A longer buffer could take more of a long subject than a slot keeps. */
    if (len == 0 || len > SUBJECT_TEXT_MAX || X509_NAME_get0_der(n, &der, &derlen) != 1 ||
        derlen == 0 || derlen > SUBJECT_DER_MAX)
        return name_text(n, buf, len);
    for (size_t i = 0; i < derlen; i++)
        h = (h ^ der[i]) * 16777619u;
    sl = &subjects.slot[h % SUBJECT_SLOTS];
    pthread_mutex_lock(&subjects.lock);
    hit = sl->derlen == derlen && memcmp(sl->der, der, derlen) == 0;
    if (hit)
        memcpy(text, sl->text, sizeof(text));
    pthread_mutex_unlock(&subjects.lock);
    if (!hit && name_text(n, text, sizeof(text))[0] != '\0') {
        /* (an empty text may be a failure: made again each time) */
        pthread_mutex_lock(&subjects.lock);
        sl->derlen = derlen;
        memcpy(sl->der, der, derlen);
        memcpy(sl->text, text, sizeof(text));
        pthread_mutex_unlock(&subjects.lock);
    }
    /* The same text cut at len - 1: name_text's cut keeps a prefix. */
    k = strnlen(text, len - 1);
    memcpy(buf, text, k);
    buf[k] = '\0';
    return buf;
}

const char *
lk_tls_client_subject(SSL *ssl, char *buf, size_t len)
{
    X509 *x = SSL_get0_peer_certificate(ssl);

    if (x == NULL || SSL_get_verify_result(ssl) != X509_V_OK)
        return NULL;
    return subject_text(X509_get_subject_name(x), buf, len);
}

static const unsigned char sid_ctx_base[] = "lookout";

/* Whether a session made on ssl could ever be resumed: not with neither a
 * session cache nor tickets (sessions_setup), and then a session id
 * context per name is a SHA-256 per handshake for nothing. */
static int
can_resume(SSL *ssl)
{
    SSL_CTX *ctx = SSL_get_SSL_CTX(ssl);

    return SSL_CTX_get_session_cache_mode(ctx) != SSL_SESS_CACHE_OFF ||
           !(SSL_CTX_get_options(ctx) & SSL_OP_NO_TICKET);
}

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
    const struct lk_client_auths *as = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ex_auths);
    const struct lk_client_auth *a = NULL;
    const unsigned char *ext, *base = sid_ctx_base;
    size_t len, baselen = sizeof(sid_ctx_base);
    char name[256];
    unsigned char md[SHA256_DIGEST_LENGTH];
    EVP_MD_CTX *h = NULL;
    int n;

    (void)arg;
    if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) ||
        (n = lk_tls_sni_parse(ext, len, name, sizeof(name))) < 0)
        n = -1; /* none; OpenSSL refuses a malformed one itself */
    if (as != NULL) {
        /* Chosen here, before OpenSSL looks for a session; applied in
         * servername_cb, after the certificate's context is switched to. */
        a = auth_for(ssl, as, n >= 0 ? name : NULL);
        SSL_set_ex_data(ssl, ex_chosen, (void *)(uintptr_t)a);
        if (a->mode != 0) {
            base = a->sid;
            baselen = sizeof(a->sid);
        }
        if (n < 0 && a->mode != 0 && SSL_set_session_id_context(ssl, base, (unsigned)baselen) != 1)
            n = -2;
    }
    if (n == -1 || (n >= 0 && !can_resume(ssl)))
        return SSL_CLIENT_HELLO_SUCCESS;
    if (n == -2 || (h = EVP_MD_CTX_new()) == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(h, base, baselen) != 1 ||
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

/*
 * SNI: which certificate answers a name.  X509_check_host decodes a
 * certificate's SAN on each call, some 10k instructions a certificate, so
 * with several the choice is kept by name: a table of SNI_SLOTS slots, one
 * per hash of the name (a name in a taken slot replaces what was there, so
 * that no number of names grows it), per generation: it hangs off the
 * first server context of the generation whose contexts it indexes, made
 * and gone with them, so that after a reload a name is matched against the
 * new certificates.  Only with two certificates or more: one answers every
 * name.
 */
#define SNI_SLOTS 256

struct sni_slot {
    uint32_t ctx;      /* the index of the context that answers it */
    uint16_t len;      /* 0: empty */
    char name[255];    /* as the client sent it (OpenSSL refuses longer) */
};

struct sni_cache {
    pthread_mutex_t lock; /* the workers share the contexts */
    size_t used;          /* slots taken */
    struct sni_slot slot[SNI_SLOTS];
};

static void
sni_cache_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    struct sni_cache *sc = ptr;

    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    if (sc == NULL)
        return;
    pthread_mutex_destroy(&sc->lock);
    free(sc);
}

static struct sni_slot *
sni_slot(struct sni_cache *sc, const char *name, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return &sc->slot[h & (SNI_SLOTS - 1)];
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

/* The index of the first of server_ctx (NULL-terminated, two or more)
 * whose certificate covers name; 0, the default, when none does. */
static size_t
sni_pick(SSL_CTX **server_ctx, const char *name)
{
    struct sni_cache *sc = SSL_CTX_get_ex_data(server_ctx[0], ex_sni);
    size_t len = strlen(name), i;
    struct sni_slot *sl = NULL;

    if (sc != NULL && len > 0 && len <= sizeof(sl->name)) {
        sl = sni_slot(sc, name, len);
        pthread_mutex_lock(&sc->lock);
        if (sl->len == len && memcmp(sl->name, name, len) == 0) {
            i = sl->ctx;
            pthread_mutex_unlock(&sc->lock);
            return i;
        }
        pthread_mutex_unlock(&sc->lock);
    }
    for (i = 0; server_ctx[i] != NULL && !cert_matches(server_ctx[i], name); i++)
        ;
    if (server_ctx[i] == NULL)
        i = 0;
    if (sl != NULL) {
        pthread_mutex_lock(&sc->lock);
        sc->used += sl->len == 0;
        sl->ctx = (uint32_t)i;
        sl->len = (uint16_t)len;
        memcpy(sl->name, name, len);
        pthread_mutex_unlock(&sc->lock);
    }
    return i;
}

size_t
lk_tls_sni_cached(const struct lk_tls_ctxs *t)
{
    struct sni_cache *sc;
    size_t n;

    if (t->nserver_ctx == 0 || ex_sni < 0 ||
        (sc = SSL_CTX_get_ex_data(t->server_ctx[0], ex_sni)) == NULL)
        return 0;
    pthread_mutex_lock(&sc->lock);
    n = sc->used;
    pthread_mutex_unlock(&sc->lock);
    return n;
}

/*
 * SNI: switch to the context whose certificate names the server (arg: the
 * generation's NULL-terminated server contexts, the connection on [0]),
 * and put on the connection the client-certificate settings client_hello_cb
 * chose: a cluster's own by switching to its variant of that context when
 * it has them (variants_new), else on the connection itself.
 */
static int
servername_cb(SSL *ssl, int *alert, void *arg)
{
    SSL_CTX **server_ctx = arg, *to;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    const struct lk_client_auth *a = ex_chosen >= 0 ? SSL_get_ex_data(ssl, ex_chosen) : NULL;
    size_t i = 0;

    /* No certificate names it: the default answers; routing decides later.
     * One certificate answers every name: no SAN to look through. */
    if (name != NULL && server_ctx[1] != NULL)
        i = sni_pick(server_ctx, name);
    to = a != NULL && a->ctx != NULL ? a->ctx[i] : server_ctx[i];
    if (SSL_get_SSL_CTX(ssl) != to && SSL_set_SSL_CTX(ssl, to) != to && a != NULL &&
        a->ctx != NULL) {
        /* Without its variant the connection would not be checked. */
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    /* A switch takes the context's verify store and CA names, not its
     * verify mode: that one is the connection's own. */
    if (a != NULL) {
        SSL_set_verify(ssl, a->mode, a->mode != 0 ? client_verify_cb : NULL);
        if (a->mode != 0 && a->ctx == NULL && !a->on_ctx) {
            STACK_OF(X509_NAME) *names = SSL_dup_CA_list(a->names);
            if (SSL_set1_verify_cert_store(ssl, a->store) != 1 || names == NULL) {
                sk_X509_NAME_pop_free(names, X509_NAME_free);
                *alert = SSL_AD_INTERNAL_ERROR;
                return SSL_TLSEXT_ERR_ALERT_FATAL;
            }
            SSL_set_client_CA_list(ssl, names);
        }
    }
    return SSL_TLSEXT_ERR_OK;
}

/* What every server context has besides its certificate: callbacks, session
 * resumption, and the client-certificate settings a (its session id context
 * stays that of [lookout]'s, t->auths->global, so that a switch to a
 * variant keeps the connection's: variants_new). */
static int
server_ctx_setup(const struct lk_conf *conf, struct lk_tls_ctxs *t, SSL_CTX *ctx,
                 const struct lk_client_auth *a, char *err, size_t errlen)
{
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, t->server_ctx);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    sessions_setup(conf, t->tickets, ctx);
    if (t->auths != NULL) {
        STACK_OF(X509_NAME) *names = a->mode != 0 ? SSL_dup_CA_list(a->names) : NULL;
        SSL_CTX_set_ex_data(ctx, ex_auths, t->auths);
        if (a->mode != 0) {
            if (names == NULL || SSL_CTX_set1_verify_cert_store(ctx, a->store) != 1) {
                sk_X509_NAME_pop_free(names, X509_NAME_free);
                ssl_err(err, errlen, "tls.client_ca: cannot use", conf->client_ca, 0, conf->file);
                return -1;
            }
            SSL_CTX_set_client_CA_list(ctx, names);
            SSL_CTX_set_verify(ctx, a->mode, client_verify_cb);
        }
        if (t->auths->global.mode != 0)
            SSL_CTX_set_session_id_context(ctx, t->auths->global.sid,
                                           sizeof(t->auths->global.sid));
    }
    return 0;
}

static SSL_CTX *
server_ctx_base(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    return ctx;
}

static SSL_CTX *
server_ctx_new(const struct lk_conf *conf, struct lk_tls_ctxs *t, const struct lk_cert *cert,
               char *err, size_t errlen)
{
    SSL_CTX *ctx = server_ctx_base();
    if (ctx == NULL) {
        snprintf(err, errlen, "%s: cannot create a TLS context", conf->file);
        return NULL;
    }
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
    if (server_ctx_setup(conf, t, ctx, t->auths != NULL ? &t->auths->global : NULL, err,
                         errlen) != 0)
        goto fail;
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* At most this many variants (server contexts by certificate and cluster
 * settings, one SSL_CTX each); past it, the settings go on each connection
 * as before. */
#define VARIANTS_MAX 64

/*
 * For each cluster with client-certificate settings of its own, one server
 * context per certificate with them on it: its certificate, key and chain
 * those of the certificate's own context (shared, not read again), the
 * rest as server_ctx_setup makes it.  servername_cb then switches a
 * connection to it (SSL_set_SSL_CTX takes the verify store from the
 * context, and OpenSSL reads the CA names to send from it) instead of
 * giving the connection its own copy of the names.  0, or -1 with err.
 */
static int
variants_new(const struct lk_conf *conf, struct lk_tls_ctxs *t, char *err, size_t errlen)
{
    struct lk_client_auths *as = t->auths;
    size_t n = 0;

    if (as == NULL || as->cluster == NULL)
        return 0;
    for (size_t c = 0; c < as->ncluster; c++)
        n += as->cluster[c].mode != 0 ? t->nserver_ctx : 0;
    if (n > VARIANTS_MAX)
        return 0;
    for (size_t c = 0; c < as->ncluster; c++) {
        struct lk_client_auth *a = &as->cluster[c];
        if (a->mode == 0)
            continue;
        a->ctx = lk_xcalloc(t->nserver_ctx, sizeof(*a->ctx));
        for (size_t i = 0; i < t->nserver_ctx; i++) {
            SSL_CTX *base = t->server_ctx[i], *v = server_ctx_base();
            STACK_OF(X509) *chain = NULL;
            if (v == NULL || SSL_CTX_use_certificate(v, SSL_CTX_get0_certificate(base)) != 1 ||
                SSL_CTX_use_PrivateKey(v, SSL_CTX_get0_privatekey(base)) != 1 ||
                SSL_CTX_get0_chain_certs(base, &chain) != 1 ||
                (chain != NULL && SSL_CTX_set1_chain(v, chain) != 1) ||
                server_ctx_setup(conf, t, v, a, err, errlen) != 0) {
                SSL_CTX_free(v);
                if (err[0] == '\0')
                    ssl_err(err, errlen, "tls.certificate: cannot use",
                            conf->certs[i].cert_file, conf->certs[i].line, conf->file);
                return -1;
            }
            a->ctx[i] = v;
            a->nctx++;
        }
    }
    return 0;
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
        pthread_once(&ex_once, ex_init);
        if (conf->session_tickets && (t->tickets = tickets_new(conf, err, errlen)) == NULL)
            return -1;
        err[0] = '\0';
        if ((t->auths = auths_new(conf, err, errlen)) == NULL && err[0] != '\0')
            return -1;
        t->server_ctx = lk_xcalloc(conf->ncerts + 1, sizeof(SSL_CTX *));
        for (size_t i = 0; i < conf->ncerts; i++) {
            t->server_ctx[i] = server_ctx_new(conf, t, &conf->certs[i], err, errlen);
            if (t->server_ctx[i] == NULL)
                return -1;
            t->nserver_ctx++;
        }
        if (variants_new(conf, t, err, errlen) != 0)
            return -1;
        if (t->nserver_ctx > 1) {
            struct sni_cache *sc = lk_xcalloc(1, sizeof(*sc));
            pthread_mutex_init(&sc->lock, NULL);
            if (SSL_CTX_set_ex_data(t->server_ctx[0], ex_sni, sc) != 1)
                sni_cache_free(NULL, sc, NULL, 0, 0, NULL); /* matched each time, as before */
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
    auths_free(t->auths);
    SSL_CTX_free(t->client_ctx);
    memset(t, 0, sizeof(*t));
}
