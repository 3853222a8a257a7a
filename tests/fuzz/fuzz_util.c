/*
 * Helpers shared by the fuzz harnesses (fuzz_util.h).
 */
#include <string.h>

#include "fuzz_util.h"
#include "lk_log.h"

uint64_t
lk_fuzz_seed(const uint8_t *data, size_t len)
{
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */

    for (size_t i = 0; i < len; i++)
        h = (h ^ data[i]) * UINT64_C(1099511628211);
    return h | 1;
}

size_t
lk_fuzz_piece(uint64_t *state, size_t left)
{
    uint64_t x = *state;
    size_t n;

    /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    if (left == 0)
        return 0;
    switch (x & 7) {
    case 0: /* the rest at once */
        n = left;
        break;
    case 1: /* byte by byte, a quarter of the time */
    case 2:
        n = 1;
        break;
    case 3:
        n = 1 + (size_t)((x >> 8) % 4);
        break;
    default:
        n = 1 + (size_t)((x >> 8) % 64);
        break;
    }
    return n < left ? n : left;
}

/* Every family of b1 on its external listener; b2 only http and pulsar;
 * b3 (an IPv6 internal address) only https outside, so its pulsar
 * addresses have no replacement; b4's internal address is a prefix of
 * b1's ("10.0.0.1:80" and "10.0.0.11:8080"). */
static const char map_fmt[] =
    "[lookout]\n"
    "max_buffer_bytes = 8k\n"
    "[pulsar prod]\n"
    "internalListenerName = internal\n"
    "lookupListenerName = external\n"
    "webServiceUrl = http://127.0.0.1:8080\n"
    "leak_guard = %s\n"
    "[broker prod/b1]\n"
    "advertisedListeners = internal:pulsar://10.0.0.11:6650,internal:pulsar+ssl://10.0.0.11:6651,"
    "internal:http://10.0.0.11:8080,internal:https://10.0.0.11:8443,"
    "external:pulsar://127.0.1.1:6650,external:pulsar+ssl://127.0.1.1:6651,"
    "external:http://127.0.1.1:8080,external:https://127.0.1.1:8443,other:http://127.0.2.1:8080\n"
    "[broker prod/b2]\n"
    "advertisedListeners = internal:http://pulsar-broker-2.pulsar-broker.svc.cluster.local:8080,"
    "internal:pulsar://pulsar-broker-2.pulsar-broker.svc.cluster.local:6650,"
    "external:http://127.0.1.2:8080,external:pulsar://127.0.1.2:6650\n"
    "[broker prod/b3]\n"
    "advertisedListeners = internal:http://[fd00::13]:8080,internal:pulsar://[fd00::13]:6650,"
    "external:https://127.0.1.3:8443\n"
    "[broker prod/b4]\n"
    "advertisedListeners = internal:http://10.0.0.1:80,external:http://127.0.1.4:8080\n";

struct lk_conf *
lk_fuzz_map(enum lk_leak_guard mode)
{
    static struct lk_conf *confs[4];
    static const char *const names[] = {"off", "log", "rewrite", "block"};
    char text[2048], err[512];

    if (confs[mode] != NULL)
        return confs[mode];
    lk_log_level = LK_ERR; /* the filters' warnings are expected here */
    snprintf(text, sizeof(text), map_fmt, names[mode]);
    confs[mode] = lk_conf_load_buf("fuzz.conf", text, strlen(text), err, sizeof(err));
    if (confs[mode] == NULL) {
        fprintf(stderr, "fuzz: the listener map does not load: %s\n", err);
        abort();
    }
    return confs[mode];
}

static int
is_host_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

/* strncasecmp stops at a NUL; patterns and text may hold any byte. */
static int
same_folded(const char *a, const char *b, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return 1;
}

size_t
lk_fuzz_naive_find(const char *const *pats, const size_t *lens, size_t npats, const char *text,
                   size_t len, lk_fuzz_find_cb fn, void *arg)
{
    size_t found = 0;

    /* By end position, then longest first: the order the matcher reports. */
    for (size_t end = 1; end <= len; end++) {
        if (end < len && text[end] >= '0' && text[end] <= '9')
            continue;
        size_t best_len = 0;
        for (;;) {
            /* the longest pattern ending here shorter than the last one */
            size_t pick = npats, plen = 0;
            for (size_t i = 0; i < npats; i++) {
                size_t l = lens[i];
                if (l > end || (best_len != 0 && l >= best_len) || l <= plen)
                    continue;
                size_t start = end - l;
                if (start > 0 && is_host_char((unsigned char)text[start - 1]))
                    continue;
                if (!same_folded(text + start, pats[i], l))
                    continue;
                pick = i, plen = l;
            }
            if (pick == npats)
                break;
            /* a pattern that repeats an earlier one (ignoring case) is
             * reported under the earlier id */
            for (size_t i = 0; i < pick; i++)
                if (lens[i] == plen && same_folded(pats[i], pats[pick], plen)) {
                    pick = i;
                    break;
                }
            if (fn != NULL)
                fn(arg, pick, end - plen, plen);
            found++;
            best_len = plen;
        }
    }
    return found;
}

void
lk_fuzz_hit(void *hits, size_t id, size_t start, size_t len)
{
    struct lk_fuzz_hits *hs = hits;

    if (hs->n < LK_FUZZ_MAX_HITS)
        hs->h[hs->n++] = (struct lk_match_hit){id, (uint64_t)(start + len), len};
}

int
lk_fuzz_hits_same(const struct lk_fuzz_hits *a, const struct lk_fuzz_hits *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->h[i].id != b->h[i].id || a->h[i].end != b->h[i].end || a->h[i].len != b->h[i].len)
            return 0;
    return 1;
}

size_t
lk_fuzz_internal_addrs(const struct lk_cluster *cl, struct lk_fuzz_addr *out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < cl->nbrokers; i++) {
        const struct lk_broker *b = cl->brokers[i];
        for (int s = 0; s < LK_SCHEME__COUNT; s++) {
            const struct lk_url *u = b->internal->addr[s];
            if (u == NULL || n + 2 > max)
                continue;
            out[n++] = (struct lk_fuzz_addr){u->text, b, (enum lk_scheme)s};
            out[n++] = (struct lk_fuzz_addr){u->hostport, b, (enum lk_scheme)s};
        }
    }
    return n;
}

struct lk_xchg *
lk_fuzz_xchg_new(struct lk_conf *conf, const struct lk_broker *b, const char *method,
                 const char *target, int tls)
{
    struct lk_xchg *x = calloc(1, sizeof(*x));

    if (x == NULL)
        abort();
    lk_pool_init(&x->pool);
    x->conf = conf;
    x->cluster = b->cluster;
    x->broker = b;
    x->listener_name = b->cluster->lookup_listener; /* the listener filter may change it */
    x->client_tls = tls;
    lk_http_msg_init(&x->req, &x->pool, 1);
    x->req.method = lk_str_c(method);
    x->req.target = lk_str_c(target);
    lk_http_msg_init(&x->res, &x->pool, 0);
    return x;
}

void
lk_fuzz_xchg_free(struct lk_xchg *x)
{
    lk_flt_detach_all(x);
    lk_pool_free(&x->pool);
    free(x);
}
