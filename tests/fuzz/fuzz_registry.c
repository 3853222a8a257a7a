/*
 * Fuzzes the registration parsers and the networks they are checked
 * against (proxy/lk_registry.c).  The first byte picks the target: a
 * Pulsar or Kafka cluster's registration (the znode name up to the first
 * '\n', then the document), an internal_networks list, or a ZooKeeper
 * connect string.  Invariants: no crash, leak or undefined behaviour; a
 * parse is deterministic (the same input gives the same listeners or the
 * same reason); a refusal leaves nothing behind and gives a reason; an
 * accepted registration has every IP-literal internal address inside the
 * cluster's networks (checked by a naive matcher here, not by the code
 * under test) and every IP-literal lookup address on the cluster's bind;
 * a parsed network list holds its own networks; a connect string parsed
 * back from its normalised form gives the same form.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_conf_ready.h"
#include "lk_log.h"
#include "lk_registry.h"

/* The clusters: both kinds, with and without listener names, one on a
 * specific bind.  Their networks are what lk_fuzz_inside() below knows. */
static const char conf_text[] =
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "internal_networks = 10.0.0.0/8, fd00::/8\n"
    "[broker prod/s1]\n"
    "advertisedListeners = internal:http://10.9.9.9:8080,external:http://s1.example.com:18080\n"
    "[pulsar edge]\n"
    "internal_networks = 10.0.0.0/8, fd00::/8\n"
    "[broker edge/s1]\n"
    "advertisedListeners = internal:http://10.9.9.9:8080\n"
    "[pulsar bound]\n"
    "lookupListenerName = external\n"
    "internalListenerName = internal\n"
    "bind = 127.0.0.2\n"
    "internal_networks = 10.0.0.0/8, fd00::/8\n"
    "[broker bound/s1]\n"
    "advertisedListeners = internal:http://10.9.9.8:8080,external:http://s1.example.com:18081\n"
    "[kafka events]\n"
    "lookupListenerName = EXTERNAL\n"
    "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL,REPLICATION:PLAINTEXT\n"
    "inter.broker.listener.name = INTERNAL\n"
    "internal_networks = 10.0.0.0/8, fd00::/8\n"
    "[broker events/1]\n"
    "advertised.listeners = INTERNAL://10.0.0.1:19092,EXTERNAL://b1.example.com:9093\n";


/* The listeners as text, to compare two parses. */
static void
show(const struct lk_registration *r, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    off += (size_t)snprintf(buf, len, "%s %d %zu %zu;", r->id, (int)r->node_id, r->internal,
                            r->lookup);
    for (size_t i = 0; i < r->nlisteners && off < len; i++)
        for (int sc = 0; sc < LK_SCHEME__COUNT && off < len; sc++)
            if (r->listeners[i].addr[sc] != NULL)
                off += (size_t)snprintf(buf + off, len - off, "%s:%s,", r->listeners[i].name,
                                        r->listeners[i].addr[sc]->text);
}

static void
registration(const struct lk_cluster *cl, const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t zlen = nl != NULL ? (size_t)(nl - data) : size;
    char znode[256], err1[512], err2[512], show1[8192], show2[8192];
    struct lk_registration r1, r2;
    const char *doc = nl != NULL ? (const char *)nl + 1 : "";
    size_t dlen = nl != NULL ? size - zlen - 1 : 0;
    int rc1, rc2;

    if (zlen >= sizeof(znode))
        return;
    memcpy(znode, data, zlen);
    znode[zlen] = '\0';
    err1[0] = err2[0] = '\0';
    rc1 = lk_registration_parse(cl, znode, doc, dlen, &r1, err1, sizeof(err1));
    rc2 = lk_registration_parse(cl, znode, doc, dlen, &r2, err2, sizeof(err2));
    LK_FUZZ_CHECK(rc1 == rc2);
    if (rc1 != 0) {
        LK_FUZZ_CHECK(rc1 == -1 && err1[0] != '\0' && strcmp(err1, err2) == 0);
        LK_FUZZ_CHECK(r1.listeners == NULL && r1.nlisteners == 0 && r1.id == NULL);
        return;
    }
    show(&r1, show1, sizeof(show1));
    show(&r2, show2, sizeof(show2));
    LK_FUZZ_CHECK(strcmp(show1, show2) == 0);
    LK_FUZZ_CHECK(strcmp(r1.id, znode) == 0);
    LK_FUZZ_CHECK(r1.internal < r1.nlisteners && r1.internal != r1.lookup);
    LK_FUZZ_CHECK(cl->lookup_listener == NULL ? r1.lookup == r1.nlisteners
                                              : r1.lookup < r1.nlisteners);
    LK_FUZZ_CHECK(cl->proto != LK_PROTO_KAFKA || r1.node_id >= 0);
    for (int sc = 0; sc < LK_SCHEME__COUNT; sc++) {
        const struct lk_url *u = r1.listeners[r1.internal].addr[sc];
        LK_FUZZ_CHECK(u == NULL || lk_fuzz_inside(u->host) != 0);
        if (r1.lookup < r1.nlisteners && (u = r1.listeners[r1.lookup].addr[sc]) != NULL) {
            uint8_t a[16];
            /* "bound" binds 127.0.0.2; the others 0.0.0.0 */
            if (strcmp(cl->bind, "127.0.0.2") == 0)
                LK_FUZZ_CHECK(lk_fuzz_inside(u->host) == -1 || strcmp(u->host, "127.0.0.2") == 0);
            else
                LK_FUZZ_CHECK(lk_fuzz_inside(u->host) == -1 || inet_pton(AF_INET, u->host, a) == 1);
        }
    }
    lk_registration_free(&r1);
    lk_registration_free(&r2);
}

static void
networks(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct lk_cidr *n;
    char err[512];
    int nn;

    memcpy(s, data, size);
    s[size] = '\0';
    nn = lk_cidrs_parse(s, &n, err, sizeof(err));
    if (nn < 0) {
        LK_FUZZ_CHECK(n == NULL);
    } else {
        LK_FUZZ_CHECK(nn > 0);
        for (int i = 0; i < nn; i++) {
            unsigned max = n[i].family == AF_INET ? 32 : 128;
            LK_FUZZ_CHECK(n[i].bits <= max);
            LK_FUZZ_CHECK(lk_cidr_contains(&n[i], 1, n[i].family, n[i].addr) == 1);
            for (unsigned b = n[i].bits; b < max; b++)
                LK_FUZZ_CHECK((n[i].addr[b / 8] & (0x80u >> (b % 8))) == 0);
        }
        free(n);
    }
    free(s);
}

static void
connect_string(const uint8_t *data, size_t size, int metadata_url)
{
    char *s = malloc(size + 1);
    struct lk_zk_connect a, b;
    char err[512];

    memcpy(s, data, size);
    s[size] = '\0';
    if (lk_zk_connect_parse(s, metadata_url, &a, err, sizeof(err)) == 0) {
        LK_FUZZ_CHECK(a.nservers > 0 && a.connect != NULL);
        LK_FUZZ_CHECK(lk_zk_connect_parse(a.connect, 0, &b, err, sizeof(err)) == 0);
        LK_FUZZ_CHECK(strcmp(a.connect, b.connect) == 0 && a.nservers == b.nservers);
        LK_FUZZ_CHECK((a.chroot == NULL) == (b.chroot == NULL));
        lk_zk_connect_free(&b);
    } else {
        LK_FUZZ_CHECK(a.connect == NULL && a.servers == NULL && a.chroot == NULL);
    }
    lk_zk_connect_free(&a);
    free(s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct lk_conf *conf;
    char err[1024];

    if (conf == NULL) {
        lk_log_level = LK_ERR;
        conf = lk_conf_load_buf("fuzz.conf", conf_text, sizeof(conf_text) - 1, err, sizeof(err));
        if (conf == NULL) {
            fprintf(stderr, "%s\n", err);
            abort();
        }
    }
    if (size == 0)
        return 0;
    switch (data[0] % 8) {
    case 0:
    case 1:
    case 2:
    case 3:
        registration(conf->clusters[data[0] % 8], data + 1, size - 1);
        break;
    case 4:
        networks(data + 1, size - 1);
        break;
    default:
        connect_string(data + 1, size - 1, data[0] % 8 == 5);
        break;
    }
    return 0;
}
