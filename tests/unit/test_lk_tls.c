/*
 * Tests for proxy/lk_tls.c's handshake-time choices, through real
 * handshakes over memory BIOs against the server contexts of a loaded
 * config: the certificate SNI picks (and its cache: a reload matches the
 * name against the new certificates, and no number of names grows it past
 * its slots), a cluster's own client-certificate settings on a listener of
 * several certificates (the CA names sent, the check), and the subject of
 * a verified certificate (the same text from its cache, cut to the
 * buffer).  The certificates are made here, into a temporary directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lk_conf.h"
#include "lk_conf_ready.h"
#include "lk_test.h"
#include "lk_tls.h"

static char dir[64];

/* A P-256 certificate for cn (and SAN DNS san, when given), signed by
 * issuer (self-signed: NULL), as dir/name.crt and dir/name.key. */
static void
make_cert(const char *name, const char *cn, const char *san, X509 **out, EVP_PKEY **out_key,
          X509 *issuer, EVP_PKEY *issuer_key)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *n = X509_NAME_new();
    char path[128];
    FILE *f;

    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), (long)(random() & 0x7fffffff));
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *)"lookout tests", -1, -1,
                               0);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_subject_name(x, n);
    X509_set_issuer_name(x, issuer != NULL ? X509_get_subject_name(issuer) : n);
    X509_set_pubkey(x, key);
    if (san != NULL) {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san);
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    } else {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, NULL, NID_basic_constraints, "CA:TRUE");
        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    X509_sign(x, issuer_key != NULL ? issuer_key : key, EVP_sha256());
    X509_NAME_free(n);
    snprintf(path, sizeof(path), "%s/%s.crt", dir, name);
    f = fopen(path, "w");
    PEM_write_X509(f, x);
    fclose(f);
    snprintf(path, sizeof(path), "%s/%s.key", dir, name);
    f = fopen(path, "w");
    PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    *out = x;
    *out_key = key;
}

/* The config: certificates a and b in [lookout], with its extra lines
 * global, a pulsar cluster p with extra, on one TLS listener. */
static struct lk_conf *
load(const char *global, const char *extra)
{
    char text[2048], err[512] = "";
    struct lk_conf *c;

    snprintf(text, sizeof(text),
             "[lookout]\n"
             "tls.certificate = %s/a.crt\ntls.key = %s/a.key\n"
             "tls.certificate = %s/b.crt\ntls.key = %s/b.key\n"
             "tls.session_cache = off\ntls.session_tickets = off\n%s"
             "[pulsar p]\ninternalListenerName = internal\nlookupListenerName = external\n%s"
             "[broker p/b1]\nadvertisedListeners = internal:http://127.0.0.1:18080,"
             "external:https://127.0.0.2:8443\n",
             dir, dir, dir, dir, global, extra);
    c = lk_conf_load_buf("t.conf", text, strlen(text), err, sizeof(err));
    ok(c != NULL, "the config loads (%s)", err);
    return c;
}

static int
ctxs(struct lk_tls_ctxs *t, const struct lk_conf *c)
{
    char err[512] = "";
    int rc = lk_tls_ctxs_new(t, c, err, sizeof(err));

    ok(rc == 0 && t->nserver_ctx == 2, "two server contexts (%s)", err);
    return rc;
}

/* The result of one handshake. */
struct hs {
    int done;           /* both ends finished */
    char server_cn[64]; /* the CN of the certificate the server showed */
    char ca_names[256]; /* the CA names of its CertificateRequest, ';'-separated */
    char subject[512];  /* lk_tls_client_subject on the server's end */
    char subject8[8];   /* the same into 8 bytes */
};

static void
handshake(struct lk_tls_ctxs *t, const struct lk_bind *b, const char *sni, X509 *ccert,
          EVP_PKEY *ckey, struct hs *r)
{
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    SSL *s = SSL_new(t->server_ctx[0]), *c;
    BIO *cb, *sb;
    int cdone = 0, sdone = 0;

    memset(r, 0, sizeof(*r));
    if (ccert != NULL) {
        SSL_CTX_use_certificate(cctx, ccert);
        SSL_CTX_use_PrivateKey(cctx, ckey);
    }
    c = SSL_new(cctx);
    if (sni != NULL)
        SSL_set_tlsext_host_name(c, sni);
    BIO_new_bio_pair(&cb, 0, &sb, 0);
    SSL_set_bio(c, cb, cb);
    SSL_set_bio(s, sb, sb);
    SSL_set_connect_state(c);
    SSL_set_accept_state(s);
    if (b != NULL)
        lk_tls_set_bind(s, b);
    for (int i = 0; i < 50 && !(cdone && sdone); i++) {
        int rc = SSL_do_handshake(c), rs = SSL_do_handshake(s);
        cdone = rc == 1;
        sdone = rs == 1;
        if ((rc <= 0 && SSL_get_error(c, rc) != SSL_ERROR_WANT_READ) ||
            (rs <= 0 && SSL_get_error(s, rs) != SSL_ERROR_WANT_READ))
            break;
    }
    ERR_clear_error();
    r->done = cdone && sdone;
    X509 *peer = SSL_get0_peer_certificate(c);
    if (peer != NULL)
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, r->server_cn,
                                  sizeof(r->server_cn));
    STACK_OF(X509_NAME) *cas = SSL_get_client_CA_list(c);
    for (int i = 0; cas != NULL && i < sk_X509_NAME_num(cas); i++) {
        char cn[64] = "";
        X509_NAME_get_text_by_NID(sk_X509_NAME_value(cas, i), NID_commonName, cn, sizeof(cn));
        snprintf(r->ca_names + strlen(r->ca_names), sizeof(r->ca_names) - strlen(r->ca_names),
                 "%s;", cn);
    }
    if (r->done) {
        lk_tls_client_subject(s, r->subject, sizeof(r->subject));
        lk_tls_client_subject(s, r->subject8, sizeof(r->subject8));
    }
    SSL_free(c);
    SSL_free(s);
    SSL_CTX_free(cctx);
}

static void
setup(void)
{
    X509 *x;
    EVP_PKEY *k;

    snprintf(dir, sizeof(dir), "/tmp/lk-tls-test.XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    make_cert("a", "a one", "DNS:a.test", &x, &k, NULL, NULL);
    X509_free(x), EVP_PKEY_free(k);
    make_cert("b", "b one", "DNS:b.test,DNS:*.b.test", &x, &k, NULL, NULL);
    X509_free(x), EVP_PKEY_free(k);
}

static void
teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        lk_test_diag("could not remove %s", dir);
}

static void
test_sni_cache(void)
{
    struct lk_tls_ctxs g1, g2;
    struct lk_conf *c;
    struct hs r;
    X509 *x;
    EVP_PKEY *k;
    int right = 1;

    setup();
    c = load("", "");
    if (c == NULL || ctxs(&g1, c) != 0)
        goto out;
    handshake(&g1, NULL, "b.test", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "b one") == 0, "b.test: b's certificate (%s)", r.server_cn);
    handshake(&g1, NULL, "b.test", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "b one") == 0, "again, from the cache (%s)", r.server_cn);
    handshake(&g1, NULL, "A.TEST", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0, "A.TEST: a's (%s)", r.server_cn);
    handshake(&g1, NULL, "c.test", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0, "a name no certificate has: the default");
    handshake(&g1, NULL, "c.test", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0, "and again");
    handshake(&g1, NULL, NULL, NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0, "no SNI: the default");
    ok(lk_tls_sni_cached(&g1) == 3, "3 names cached (%zu)", lk_tls_sni_cached(&g1));

    /* A reload with a new certificate in b's files: the new generation's
     * b.test is the new one, the old generation's still the old. */
    make_cert("b", "b two", "DNS:b.test", &x, &k, NULL, NULL);
    X509_free(x), EVP_PKEY_free(k);
    struct lk_conf *c2 = load("", "");
    if (c2 != NULL && ctxs(&g2, c2) == 0) {
        ok(lk_tls_sni_cached(&g2) == 0, "the new generation starts with no name");
        handshake(&g2, NULL, "b.test", NULL, NULL, &r);
        ok(r.done && strcmp(r.server_cn, "b two") == 0, "after the reload, b.test: the new (%s)",
           r.server_cn);
        handshake(&g1, NULL, "b.test", NULL, NULL, &r);
        ok(r.done && strcmp(r.server_cn, "b one") == 0,
           "the old generation's connections keep its own (%s)", r.server_cn);
        handshake(&g2, NULL, "x.b.test", NULL, NULL, &r);
        ok(r.done && strcmp(r.server_cn, "a one") == 0,
           "the old certificate's wildcard is gone with it (%s)", r.server_cn);
        lk_tls_ctxs_free(&g2);
    }
    lk_conf_unref(c2);

    /* Many names: the cache stays within its 256 slots, and a name pushed
     * out is matched again. */
    for (int i = 0; i < 600; i++) {
        char name[32];
        snprintf(name, sizeof(name), "n%d.b.test", i);
        handshake(&g1, NULL, name, NULL, NULL, &r);
        right &= r.done && strcmp(r.server_cn, "b one") == 0;
    }
    ok(right, "600 names under b's wildcard: each b's");
    ok(lk_tls_sni_cached(&g1) > 3 && lk_tls_sni_cached(&g1) <= 256,
       "the cache holds at most its 256 slots (%zu)", lk_tls_sni_cached(&g1));
    handshake(&g1, NULL, "a.test", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0, "a.test still a's");
    handshake(&g1, NULL, "c.test", NULL, NULL, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0, "c.test still the default");
    lk_tls_ctxs_free(&g1);
out:
    lk_conf_unref(c);
    teardown();
}

/* A cluster's own tls.verify_client on a listener of two certificates: the
 * connection switches to the cluster's variant of the certificate SNI
 * picks, so that it shows that certificate, names the cluster's CA and
 * checks against it. */
static void
test_cluster_verify(void)
{
    struct lk_tls_ctxs t;
    struct lk_conf *c;
    const struct lk_bind *b = NULL;
    struct hs r;
    X509 *ca, *other_ca, *cl, *other;
    EVP_PKEY *cak, *other_cak, *clk, *otherk;
    char extra[256];

    setup();
    make_cert("ca", "client ca", NULL, &ca, &cak, NULL, NULL);
    make_cert("other-ca", "other ca", NULL, &other_ca, &other_cak, NULL, NULL);
    make_cert("client", "client one", "DNS:client.test", &cl, &clk, ca, cak);
    make_cert("other", "client other", "DNS:client.test", &other, &otherk, other_ca, other_cak);
    snprintf(extra, sizeof(extra), "tls.verify_client = on\ntls.client_ca = %s/ca.crt\n", dir);
    c = load("", extra);
    for (size_t i = 0; c != NULL && i < c->nbinds; i++)
        if (c->binds[i]->tls)
            b = c->binds[i];
    if (!ok(b != NULL, "a TLS bind") || ctxs(&t, c) != 0)
        goto out;
    handshake(&t, b, "b.test", cl, clk, &r);
    ok(r.done, "b.test with the CA's client certificate: accepted");
    ok(strcmp(r.server_cn, "b one") == 0, "b's certificate shown (%s)", r.server_cn);
    ok(strcmp(r.ca_names, "client ca;") == 0, "the cluster's CA named (%s)", r.ca_names);
    ok(strcmp(r.subject, "CN=client one,O=lookout tests") == 0, "its subject (%s)", r.subject);
    ok(strcmp(r.subject8, "CN=clie") == 0, "cut to 8 bytes (%s)", r.subject8);
    handshake(&t, b, "b.test", cl, clk, &r);
    ok(r.done && strcmp(r.subject, "CN=client one,O=lookout tests") == 0 &&
           strcmp(r.subject8, "CN=clie") == 0,
       "again: the same subject, the same cut (%s, %s)", r.subject, r.subject8);
    handshake(&t, b, "a.test", cl, clk, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0 && strcmp(r.ca_names, "client ca;") == 0,
       "a.test: a's certificate, the same CA named (%s, %s)", r.server_cn, r.ca_names);
    handshake(&t, b, "b.test", NULL, NULL, &r);
    ok(!r.done, "no client certificate: refused");
    handshake(&t, b, "b.test", other, otherk, &r);
    ok(!r.done, "another CA's: refused");
    handshake(&t, b, NULL, other, otherk, &r);
    ok(!r.done, "another CA's without SNI: refused");
    handshake(&t, b, NULL, cl, clk, &r);
    ok(r.done && strcmp(r.server_cn, "a one") == 0 &&
           strcmp(r.subject, "CN=client one,O=lookout tests") == 0,
       "without SNI: the default certificate, checked (%s)", r.subject);
    handshake(&t, b, "c.test", other, otherk, &r);
    ok(r.done == 0, "a name no certificate has, another CA's: refused");
    handshake(&t, b, "c.test", other, otherk, &r);
    ok(r.done == 0, "and again, from the cache");
    lk_tls_ctxs_free(&t);
    lk_conf_unref(c);

    /* [lookout] asks for the other CA's, the cluster for its own: the
     * cluster's settings replace those each connection starts with. */
    char global[256];
    snprintf(global, sizeof(global), "tls.verify_client = on\ntls.client_ca = %s/other-ca.crt\n",
             dir);
    c = load(global, extra);
    b = NULL;
    for (size_t i = 0; c != NULL && i < c->nbinds; i++)
        if (c->binds[i]->tls)
            b = c->binds[i];
    if (b == NULL || ctxs(&t, c) != 0)
        goto out;
    for (int i = 0; i < 2; i++) {
        const char *sni = i == 0 ? "b.test" : "a.test";
        subtest("[lookout] another CA, SNI %s", sni);
        handshake(&t, b, sni, cl, clk, &r);
        ok(r.done && strcmp(r.ca_names, "client ca;") == 0,
           "the cluster's CA's certificate accepted, its CA alone named (%s)", r.ca_names);
        handshake(&t, b, sni, other, otherk, &r);
        ok(!r.done, "[lookout]'s CA's refused");
    }
    subtest(NULL);
    handshake(&t, NULL, "b.test", other, otherk, &r);
    ok(r.done && strcmp(r.ca_names, "other ca;") == 0,
       "a connection of no known bind: [lookout]'s settings (%s)", r.ca_names);
    lk_tls_ctxs_free(&t);
out:
    lk_conf_unref(c);
    X509_free(ca), X509_free(other_ca), X509_free(cl), X509_free(other);
    EVP_PKEY_free(cak), EVP_PKEY_free(other_cak), EVP_PKEY_free(clk), EVP_PKEY_free(otherk);
    teardown();
}

const struct lk_test_case lk_test_tls[] = {
    {"tls/sni_cache", test_sni_cache},
    {"tls/cluster_verify", test_cluster_verify},
    {NULL, NULL},
};
