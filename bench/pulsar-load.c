/*
 * pulsar-load: the pulsar scenario's load program (bench/run builds and runs
 * it; bench/README.md says how to read it).  A Pulsar binary-protocol client of
 * our own (bench/pulsar-wire.h) that prints one JSON line and exits 0 when
 * every message was stored and (in throughput mode) came back intact.  It does
 * what bench/pulsar-load.py does, with the same options and output, at a
 * fraction of its cost per message.
 *
 * It looks the topic up through SERVICE (host:port of a pulsar:// service URL),
 * following Redirects as clients do, then connects to the owner the last answer
 * names (or keeps the connection that asked, when that is the owner's) and:
 *
 * throughput mode (the default): one producer sends COUNT messages of SIZE
 * bytes, one per SEND (no batching), with at most WINDOW of them awaiting their
 * SEND_RECEIPT (it writes a tenth of the window's SENDs whenever that many
 * receipts have come, as a client with a send buffer does), every receipt
 * checked for its sequence id in order, and times that (msgs/s, MB/s, and each
 * message's SEND to SEND_RECEIPT latency); then one Exclusive consumer
 * subscribes from the earliest entry, grants RECEIVER permits with FLOW and as
 * many again each time half are used (as the Java client's receiver queue
 * does), acknowledges in groups (individual ACKs, a list each, the last one
 * with a request_id whose ACK_RESPONSE is read once timing is over), times
 * that, and checks that every message arrived once with its payload section
 * (checksum, metadata and payload) byte for byte what was sent.  Each payload
 * starts with "RUNID SEQUENCE " and the rest is a slice of a random printable
 * block picked by both, so another run's message, a duplicate or a changed
 * byte is told apart.  Every SEND frame is built (checksum included) before
 * timing starts.
 *
 * latency mode (--latency): COUNT SENDs one at a time, the next only after the
 * previous SEND_RECEIPT, after 200 untimed: each latency is one SEND round trip
 * (p50, p99, max), which is what a proxy adds to.
 *
 * Each run uses topics of its own (bench-RUNID, lat-RUNID).
 *
 * --map FROM=TO dials TO wherever a URL or SERVICE names FROM (host:port): a
 * byte forwarder that cannot rewrite broker addresses (nginx stream, HAProxy
 * mode tcp) is reached for every broker that way.  Every address dialled is
 * listed in the output ("connected_to"), so the caller can check where the
 * bytes went.
 *
 * Bounded: --timeout SECONDS covers the whole run; past it, one JSON line with
 * "ok": false and exit 3.  Failures exit 1, usage errors 2.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pulsar-wire.h"

#define MAX_MAPS 32
#define MAX_SEEN 32
#define MAX_HOPS 8
#define PRODUCER_ID 1
#define CONSUMER_ID 1
#define WARMUP_LATENCY 200            /* latency mode: round trips before timing */
#define ACK_RECEIPT_ID (1ULL << 40)   /* request_id of the last ACK */
#define BLOCK_EXTRA 512

static struct {
    const char *service, *run_id;
    long count, size, window, receiver;
    double timeout;
    int latency;
    char map_from[MAX_MAPS][64], map_to[MAX_MAPS][64];
    int nmap;
} opt = {.count = 10000, .size = 1024, .window = 1000, .receiver = 1000, .timeout = 60};

static char run_id[32];
static uint8_t *block;
static char seen[MAX_SEEN][64];
static int nseen;
static struct {
    char asked[64], url[128];
    const char *response;
} hops[MAX_HOPS];
static int nhops;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double
cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Context switches so far, voluntary (waiting for the socket) and not. */
static long
switches_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* Strips what JSON would need escaped. */
static void
json_safe(char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            *s = ' ';
}

static void
print_tail(void)
{
    /* connected_to, sorted and unique (as the Python client prints it) */
    for (int i = 0; i < nseen; i++)
        for (int j = i + 1; j < nseen; j++)
            if (strcmp(seen[j], seen[i]) < 0) {
                char t[64];
                memcpy(t, seen[i], 64);
                memcpy(seen[i], seen[j], 64);
                memcpy(seen[j], t, 64);
            }
    printf(", \"connected_to\": [");
    for (int i = 0, k = 0; i < nseen; i++)
        if (i == 0 || strcmp(seen[i], seen[i - 1]) != 0)
            printf("%s\"%s\"", k++ ? ", " : "", seen[i]);
    printf("], \"lookup\": [");
    for (int i = 0; i < nhops; i++)
        printf("%s{\"asked\": \"%s\", \"response\": \"%s\", \"url\": \"%s\"}", i ? ", " : "", hops[i].asked,
               hops[i].response, hops[i].url);
    printf("]");
}

static void
print_head(int ok)
{
    printf("{\"ok\": %s, \"mode\": \"%s\", \"run_id\": \"%s\", \"count\": %ld, \"size\": %ld", ok ? "true" : "false",
           opt.latency ? "latency" : "throughput", run_id, opt.count, opt.size);
}

/* Stops the run: one JSON line saying why, and exit code rc. */
static void
fail(int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_safe(msg);
    print_head(0);
    printf(", \"error\": \"%s\"", msg);
    print_tail();
    printf("}\n");
    fflush(stdout);
    fprintf(stderr, "pulsar-load: %s\n", msg);
    exit(rc);
}

static void
on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "{\"ok\": false, \"error\": \"timed out: past --timeout\"}\n";
    ssize_t r = write(STDOUT_FILENO, m, sizeof(m) - 1);
    (void)r;
    _exit(3);
}

/* ---- a connection -------------------------------------------------------------- */

struct conn {
    int fd;
    uint8_t *buf; /* what was read: buf[pos..end) unread */
    size_t cap, pos, end;
    uint64_t rid;
};

static void
conn_send(struct conn *c, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t r = send(c->fd, b, n, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            fail(1, "send: %s", strerror(errno));
        }
        b += r;
        n -= (size_t)r;
    }
}

/* Reads what is there (at least one byte) after the unread bytes, moving them to
 * the start first when little room is left after them. */
static void
conn_fill(struct conn *c)
{
    size_t n = c->end - c->pos;
    if (n == 0) {
        c->pos = c->end = 0;
    } else if (c->cap - c->end < c->cap / 4) {
        memmove(c->buf, c->buf + c->pos, n);
        c->pos = 0;
        c->end = n;
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->end, c->cap - c->end, 0);
        if (r > 0) {
            c->end += (size_t)r;
            return;
        }
        if (r == 0)
            fail(1, "the connection was closed");
        if (errno != EINTR)
            fail(1, "recv: %s", strerror(errno));
    }
}

/* The next whole frame (with its size prefix), read when not there yet: its
 * start in c->buf and its length. */
static const uint8_t *
conn_frame(struct conn *c, size_t *len)
{
    for (;;) {
        size_t have = c->end - c->pos;
        if (have >= 4) {
            uint32_t total = pw_get32(c->buf + c->pos);
            if ((size_t)total + 4 > c->cap)
                fail(1, "a frame of %u bytes, over the client's buffer", total + 4);
            if (have >= (size_t)total + 4) {
                const uint8_t *f = c->buf + c->pos;
                c->pos += (size_t)total + 4;
                *len = (size_t)total + 4;
                return f;
            }
        }
        conn_fill(c);
    }
}

struct cmd {
    int type;
    const uint8_t *frame, *sub;
    uint32_t subn;
    size_t len, cend; /* the frame's length; where its command ends (payload starts) */
    struct pw_field f[PW_MAX_FIELD];
};

static const char *
type_name(int t)
{
    static char b[16];
    switch (t) {
    case PW_CONNECTED: return "CONNECTED";
    case PW_ERROR: return "ERROR";
    case PW_SEND_ERROR: return "SEND_ERROR";
    case PW_SUCCESS: return "SUCCESS";
    case PW_LOOKUP_RESPONSE: return "LOOKUP_RESPONSE";
    case PW_PRODUCER_SUCCESS: return "PRODUCER_SUCCESS";
    case PW_SEND_RECEIPT: return "SEND_RECEIPT";
    case PW_MESSAGE: return "MESSAGE";
    case PW_ACK_RESPONSE: return "ACK_RESPONSE";
    case PW_CLOSE_PRODUCER: return "CLOSE_PRODUCER";
    case PW_CLOSE_CONSUMER: return "CLOSE_CONSUMER";
    default: snprintf(b, sizeof(b), "type %d", t); return b;
    }
}

static void
send_cmd(struct conn *c, int type, const struct pw_w *w)
{
    uint8_t f[1024];
    size_t n = pw_frame(f, sizeof(f), type, w ? w->p : NULL, w ? w->n : 0, w != NULL, 0);
    if (n == 0 || (w && w->bad))
        fail(1, "a command over the client's buffer");
    conn_send(c, f, n);
}

/* The next frame, which must be of type want (PINGs are answered on the way;
 * anything else fails, saying what it was). */
static void
next_of(struct conn *c, int want, const char *doing, struct cmd *m)
{
    for (;;) {
        m->frame = conn_frame(c, &m->len);
        uint32_t csize = pw_get32(m->frame + 4);
        if (csize > m->len - 8 || pw_base(m->frame + 8, csize, &m->type, &m->sub, &m->subn) < 0 ||
            pw_fields(m->sub, m->subn, m->f) < 0)
            fail(1, "%s: a frame that does not parse", doing);
        m->cend = 8 + csize;
        if (m->type == want)
            return;
        if (m->type == PW_PING) {
            send_cmd(c, PW_PONG, NULL);
            continue;
        }
        const struct pw_field *msg = m->type == PW_ERROR ? &m->f[3]
                                     : m->type == PW_SEND_ERROR || m->type == PW_LOOKUP_RESPONSE
                                         ? &m->f[m->type == PW_SEND_ERROR ? 4 : 7]
                                         : NULL;
        fail(1, "%s: %s%s%.*s", doing, type_name(m->type), msg && msg->set == 2 ? ": " : "",
             msg && msg->set == 2 ? (int)(msg->n < 300 ? msg->n : 300) : 0, msg ? (const char *)msg->p : "");
    }
}

static const char *
dial_of(const char *addr)
{
    for (int i = 0; i < opt.nmap; i++)
        if (strcmp(opt.map_from[i], addr) == 0)
            return opt.map_to[i];
    return addr;
}

static struct conn *
conn_open(const char *addr)
{
    const char *dial = dial_of(addr);
    char host[64];
    const char *colon = strrchr(dial, ':');
    if (colon == NULL || (size_t)(colon - dial) >= sizeof(host))
        fail(1, "not HOST:PORT: %s", dial);
    memcpy(host, dial, (size_t)(colon - dial));
    host[colon - dial] = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        fail(1, "cannot resolve %s", dial);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        fail(1, "connect to %s: %s", dial, strerror(errno));
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (nseen < MAX_SEEN)
        snprintf(seen[nseen++], sizeof(seen[0]), "%s", dial);
    struct conn *c = calloc(1, sizeof(*c));
    c->fd = fd;
    c->cap = (size_t)(4 * (opt.size + (1 << 16)));
    if (c->cap < (1 << 20))
        c->cap = 1 << 20;
    c->buf = malloc(c->cap);
    if (c->buf == NULL)
        fail(1, "out of memory");
    uint8_t b[128];
    struct pw_w w = {b, 0, sizeof(b), 0};
    pw_w_str(&w, 1, "lookout-bench-pulsar-load");
    pw_w_uint(&w, 4, PW_PROTOCOL_VERSION);
    send_cmd(c, PW_CONNECT, &w);
    struct cmd m;
    next_of(c, PW_CONNECTED, "CONNECT", &m);
    return c;
}

static void
conn_close(struct conn *c)
{
    close(c->fd);
    free(c->buf);
    free(c);
}

/* ---- the run ------------------------------------------------------------------- */

/* Looks topic up through the service address, following Redirects: the
 * connection to the owner (the one that asked, when it is the owner's). */
static struct conn *
owner(const char *topic)
{
    char addr[64], target[64];
    int authoritative = 0;
    struct conn *c = NULL;

    snprintf(addr, sizeof(addr), "%s", opt.service);
    for (int hop = 0; hop < MAX_HOPS; hop++) {
        if (c == NULL)
            c = conn_open(addr);
        uint8_t b[600];
        struct pw_w w = {b, 0, sizeof(b), 0};
        pw_w_str(&w, 1, topic);
        pw_w_uint(&w, 2, ++c->rid);
        pw_w_uint(&w, 3, (uint64_t)authoritative);
        send_cmd(c, PW_LOOKUP, &w);
        struct cmd m;
        next_of(c, PW_LOOKUP_RESPONSE, "LOOKUP", &m);
        const struct pw_field *url = &m.f[1];
        uint64_t resp = m.f[3].set ? m.f[3].v : 99;
        snprintf(hops[nhops].asked, sizeof(hops[0].asked), "%s", addr);
        snprintf(hops[nhops].url, sizeof(hops[0].url), "%.*s", url->set == 2 ? (int)url->n : 0,
                 url->set == 2 ? (const char *)url->p : "");
        json_safe(hops[nhops].url);
        hops[nhops++].response = resp == PW_REDIRECT ? "Redirect" : resp == PW_LOOKUP_CONNECT ? "Connect" : "Failed";
        if (m.f[4].v != c->rid)
            fail(1, "LOOKUP_RESPONSE for request %" PRIu64 ", want %" PRIu64, m.f[4].v, c->rid);
        if ((resp != PW_REDIRECT && resp != PW_LOOKUP_CONNECT) || url->set != 2)
            fail(1, "LOOKUP %s: %s %.*s", topic, hops[nhops - 1].response, m.f[7].set == 2 ? (int)m.f[7].n : 0,
                 m.f[7].set == 2 ? (const char *)m.f[7].p : "");
        if (pw_url_addr(url->p, url->n, target, sizeof(target)) < 0)
            fail(1, "LOOKUP %s: not a pulsar:// URL: %s", topic, hops[nhops - 1].url);
        if (resp == PW_LOOKUP_CONNECT) {
            if (strcmp(target, addr) != 0) {
                conn_close(c);
                c = conn_open(target);
            }
            return c;
        }
        authoritative = m.f[5].set && m.f[5].v;
        if (strcmp(target, addr) != 0) {
            conn_close(c);
            c = NULL;
        }
        snprintf(addr, sizeof(addr), "%s", target);
    }
    fail(1, "LOOKUP %s: more than %d Redirects", topic, MAX_HOPS);
    return NULL;
}

static void
producer(struct conn *c, const char *topic)
{
    uint8_t b[600];
    char name[64];
    struct pw_w w = {b, 0, sizeof(b), 0};
    struct cmd m;
    snprintf(name, sizeof(name), "bench-%s", run_id);
    pw_w_str(&w, 1, topic);
    pw_w_uint(&w, 2, PRODUCER_ID);
    pw_w_uint(&w, 3, ++c->rid);
    pw_w_str(&w, 4, name);
    send_cmd(c, PW_PRODUCER, &w);
    next_of(c, PW_PRODUCER_SUCCESS, "PRODUCER", &m);
    if (m.f[1].v != c->rid)
        fail(1, "PRODUCER_SUCCESS for request %" PRIu64, m.f[1].v);
}

/* Every SEND frame, one after the other in one buffer: frame i at off[i],
 * its payload section at sec[i] (to the end of the frame). */
struct frames {
    uint8_t *buf;
    size_t *off, *sec;
    long n;
};

static void
payload(uint8_t *out, long seq)
{
    char head[64];
    int hn = snprintf(head, sizeof(head), "%s %010ld ", run_id, seq);
    long off = (seq * 7 + (long)strlen(run_id)) % BLOCK_EXTRA;
    long k = hn < opt.size ? hn : opt.size;
    memcpy(out, head, (size_t)k);
    memcpy(out + k, block + off, (size_t)(opt.size - k));
}

static void
build_frames(struct frames *fr, long count)
{
    uint8_t md[256], cmd[64], *pay = malloc((size_t)opt.size);
    char name[64];
    uint64_t t0 = (uint64_t)time(NULL) * 1000;
    size_t per = 64 + sizeof(md) + (size_t)opt.size + 10;

    snprintf(name, sizeof(name), "bench-%s", run_id);
    fr->n = count;
    fr->buf = malloc(per * (size_t)count);
    fr->off = malloc(sizeof(size_t) * (size_t)(count + 1));
    fr->sec = malloc(sizeof(size_t) * (size_t)count);
    if (pay == NULL || fr->buf == NULL || fr->off == NULL || fr->sec == NULL)
        fail(1, "out of memory");
    size_t at = 0;
    for (long seq = 0; seq < count; seq++) {
        struct pw_w m = {md, 0, sizeof(md), 0}, s = {cmd, 0, sizeof(cmd), 0};
        pw_w_str(&m, 1, name);
        pw_w_uint(&m, 2, (uint64_t)seq);
        pw_w_uint(&m, 3, t0);
        pw_w_uint(&s, 1, PRODUCER_ID);
        pw_w_uint(&s, 2, (uint64_t)seq);
        pw_w_uint(&s, 3, 1);
        payload(pay, seq);
        size_t secn = 10 + m.n + (size_t)opt.size;
        size_t hn = pw_frame(fr->buf + at, 64, PW_SEND, s.p, s.n, 1, secn);
        fr->off[seq] = at;
        fr->sec[seq] = at + hn;
        pw_section(fr->buf + at + hn, md, m.n, pay, (size_t)opt.size);
        at += hn + secn;
    }
    fr->off[count] = at;
    free(pay);
}

/* Reads the receipt of sequence id want (in order). */
static void
receipt(struct conn *c, long want)
{
    struct cmd m;
    next_of(c, PW_SEND_RECEIPT, "while producing", &m);
    if (m.f[1].v != PRODUCER_ID || m.f[2].v != (uint64_t)want)
        fail(1, "SEND_RECEIPT for producer %" PRIu64 " sequence %" PRIu64 ", want %ld", m.f[1].v, m.f[2].v, want);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (nearest rank) of sorted xs. */
static double
pct(const double *xs, long n, double p)
{
    long k = (long)nearbyint(p / 100.0 * (double)n + 0.5) - 1; /* as Python round() */
    if (k < 0)
        k = 0;
    if (k > n - 1)
        k = n - 1;
    return xs[k];
}

static void
throughput(void)
{
    char topic[128], sub[64];
    struct frames fr;
    long n = opt.count, q = opt.receiver;
    snprintf(topic, sizeof(topic), "persistent://public/default/bench-%s", run_id);
    build_frames(&fr, n);
    double *sent_at = calloc((size_t)n, sizeof(double)), *lat = calloc((size_t)n, sizeof(double));
    uint8_t *got_seq = calloc((size_t)n, 1);
    if (sent_at == NULL || lat == NULL || got_seq == NULL)
        fail(1, "out of memory");

    double active = now();
    struct conn *c = owner(topic);
    producer(c, topic);

    /* produce */
    long window = opt.window, nxt = n < window ? n : window, acked = 0;
    long refill = window - (window / 10 > 1 ? window / 10 : 1);
    long sw0 = switches_now();
    double cpu0 = cpu_now(), t0 = now();
    for (long i = 0; i < nxt; i++)
        sent_at[i] = t0;
    conn_send(c, fr.buf + fr.off[0], fr.off[nxt] - fr.off[0]);
    for (long seq = 0; seq < n; seq++) {
        receipt(c, seq);
        double t = now();
        lat[seq] = t - sent_at[seq];
        acked++;
        if (nxt < n && nxt - acked <= refill) {
            long upto = acked + window < n ? acked + window : n;
            for (long i = nxt; i < upto; i++)
                sent_at[i] = t;
            conn_send(c, fr.buf + fr.off[nxt], fr.off[upto] - fr.off[nxt]);
            nxt = upto;
        }
    }
    double psecs = now() - t0, pcpu = cpu_now() - cpu0;

    /* consume */
    uint8_t b[1024];
    struct pw_w w = {b, 0, sizeof(b), 0};
    struct cmd m;
    snprintf(sub, sizeof(sub), "bench-%s", run_id);
    pw_w_str(&w, 1, topic);
    pw_w_str(&w, 2, sub);
    pw_w_uint(&w, 3, 0);
    pw_w_uint(&w, 4, CONSUMER_ID);
    pw_w_uint(&w, 5, ++c->rid);
    pw_w_uint(&w, 13, 1);
    send_cmd(c, PW_SUBSCRIBE, &w);
    next_of(c, PW_SUCCESS, "SUBSCRIBE", &m);

    size_t rlen = strlen(run_id);
    long got = 0, used = 0;
    size_t acap = (size_t)q * 40 + 256, an;
    uint8_t *ack = malloc(acap + 64), *out = malloc(acap + 256);
    if (ack == NULL || out == NULL)
        fail(1, "out of memory");
    /* the ACK being built: consumer_id, ack_type Individual, then the ids */
    struct pw_w aw = {ack, 0, acap, 0};
    pw_w_uint(&aw, 1, CONSUMER_ID);
    pw_w_uint(&aw, 2, 0);
    size_t ack_head = aw.n;
    double ccpu0 = cpu_now(), c0 = now();
    w = (struct pw_w){b, 0, sizeof(b), 0};
    pw_w_uint(&w, 1, CONSUMER_ID);
    pw_w_uint(&w, 2, (uint64_t)q);
    send_cmd(c, PW_FLOW, &w);
    while (got < n) {
        next_of(c, PW_MESSAGE, "while consuming", &m);
        /* the payload section: [magic, CRC32C][metadataSize][metadata][payload],
         * and the payload starts with "RUNID SEQUENCE " */
        const uint8_t *s = m.frame + m.cend, *e = m.frame + m.len;
        long seq = -1;
        if (e - s >= 10) {
            const uint8_t *p = s + 10 + pw_get32(s + 6);
            if (p + rlen + 11 <= e && memcmp(p, run_id, rlen) == 0 && p[rlen] == ' ') {
                seq = 0;
                for (size_t i = rlen + 1; i < rlen + 11; i++) {
                    if (p[i] < '0' || p[i] > '9') {
                        seq = -1;
                        break;
                    }
                    seq = seq * 10 + (p[i] - '0');
                }
            }
        }
        if (m.f[1].v != CONSUMER_ID || seq < 0 || seq >= n)
            fail(1, "MESSAGE for consumer %" PRIu64 " of another run or out of range", m.f[1].v);
        if (got_seq[seq])
            fail(1, "message %ld came twice", seq);
        size_t want = fr.off[seq + 1] - fr.sec[seq];
        if ((size_t)(e - s) != want || memcmp(s, fr.buf + fr.sec[seq], want) != 0)
            fail(1, "message %ld differs from what was sent (%ld bytes, sent %zu)", seq, (long)(e - s), want);
        got_seq[seq] = 1;
        got++;
        used++;
        if (m.f[2].set != 2)
            fail(1, "MESSAGE without a message_id");
        pw_w_bytes(&aw, 3, m.f[2].p, m.f[2].n);
        if (aw.bad)
            fail(1, "an ACK over the client's buffer");
        if (used >= q / 2 || got == n) {
            /* the last ACK asks for a receipt (protocol v17), read once timing is over */
            if (got == n)
                pw_w_uint(&aw, 8, ACK_RECEIPT_ID);
            an = pw_frame(out, acap + 256, PW_ACK, aw.p, aw.n, 1, 0);
            if (an == 0)
                fail(1, "an ACK over the client's buffer");
            if (got < n) {
                w = (struct pw_w){b, 0, sizeof(b), 0};
                pw_w_uint(&w, 1, CONSUMER_ID);
                pw_w_uint(&w, 2, (uint64_t)used);
                an += pw_frame(out + an, 64, PW_FLOW, w.p, w.n, 1, 0);
            }
            conn_send(c, out, an);
            aw.n = ack_head;
            used = 0;
        }
    }
    double csecs = now() - c0, ccpu = cpu_now() - ccpu0;
    long sw = switches_now() - sw0;
    next_of(c, PW_ACK_RESPONSE, "after the last MESSAGE", &m);
    if (m.f[6].v != ACK_RECEIPT_ID || m.f[4].set)
        fail(1, "the last ACK: ACK_RESPONSE request %" PRIu64 "%s", m.f[6].v, m.f[4].set ? " with an error" : "");
    conn_close(c);
    active = now() - active;

    qsort(lat, (size_t)n, sizeof(double), cmp_double);
    double mb = (double)n * (double)opt.size / 1e6;
    print_head(1);
    printf(", \"active_s\": %.6f, \"produce\": {\"msgs\": %ld, \"seconds\": %.6f, \"cpu_s\": %.6f, "
           "\"msgs_per_s\": %.1f, \"mb_per_s\": %.3f, \"receipt\": {\"p50_us\": %.1f, \"p99_us\": %.1f, "
           "\"max_us\": %.1f}}, \"consume\": {\"msgs\": %ld, \"seconds\": %.6f, \"cpu_s\": %.6f, "
           "\"msgs_per_s\": %.1f, \"mb_per_s\": %.3f}, \"switches\": %ld",
           active, n, psecs, pcpu, (double)n / psecs, mb / psecs, pct(lat, n, 50) * 1e6, pct(lat, n, 99) * 1e6,
           lat[n - 1] * 1e6, n, csecs, ccpu, (double)n / csecs, mb / csecs, sw);
}

/* Sends frames first..first+k-1 one at a time, each once the previous one's
 * receipt came; the round trips into rtt (when not NULL). */
static void
round_trips(struct conn *c, const struct frames *fr, long first, long k, double *rtt)
{
    for (long i = first; i < first + k; i++) {
        double s = now();
        conn_send(c, fr->buf + fr->off[i], fr->off[i + 1] - fr->off[i]);
        receipt(c, i);
        if (rtt)
            rtt[i - first] = now() - s;
    }
}

static void
latency(void)
{
    char topic[128];
    struct frames fr;
    long n = opt.count;
    snprintf(topic, sizeof(topic), "persistent://public/default/lat-%s", run_id);
    build_frames(&fr, n + WARMUP_LATENCY);
    double *rtt = calloc((size_t)n, sizeof(double));
    if (rtt == NULL)
        fail(1, "out of memory");
    double active = now();
    struct conn *c = owner(topic);
    producer(c, topic);
    round_trips(c, &fr, 0, WARMUP_LATENCY, NULL);
    double cpu0 = cpu_now(), t0 = now();
    round_trips(c, &fr, WARMUP_LATENCY, n, rtt);
    double secs = now() - t0, cpu = cpu_now() - cpu0;
    conn_close(c);
    active = now() - active;
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += rtt[i];
    qsort(rtt, (size_t)n, sizeof(double), cmp_double);
    print_head(1);
    printf(", \"active_s\": %.6f, \"requests\": %ld, \"seconds\": %.6f, \"cpu_s\": %.6f, \"requests_per_s\": %.1f, "
           "\"rtt\": {\"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f, \"mean_us\": %.1f}",
           active, n, secs, cpu, (double)n / secs, pct(rtt, n, 50) * 1e6, pct(rtt, n, 99) * 1e6, rtt[n - 1] * 1e6,
           sum / (double)n * 1e6);
}

static void
usage(const char *why)
{
    fprintf(stderr, "pulsar-load: %s\nusage: pulsar-load HOST:PORT [-n COUNT] [-s SIZE] [-w WINDOW] "
            "[-r RECEIVER] [-T SECONDS] [--latency] [--map FROM=TO]... [--run-id ID]\n", why);
    exit(2);
}

static long
num(const char *s, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0)
        usage(what);
    return v;
}

int
main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--latency") == 0) {
            opt.latency = 1;
            continue;
        }
        if (a[0] != '-') {
            if (opt.service)
                usage("one service address");
            opt.service = a;
            continue;
        }
        if (v == NULL)
            usage("an option without its value");
        i++;
        if (strcmp(a, "-n") == 0 || strcmp(a, "--count") == 0)
            opt.count = num(v, "-n");
        else if (strcmp(a, "-s") == 0 || strcmp(a, "--size") == 0)
            opt.size = num(v, "-s");
        else if (strcmp(a, "-w") == 0 || strcmp(a, "--window") == 0)
            opt.window = num(v, "-w");
        else if (strcmp(a, "-r") == 0 || strcmp(a, "--receiver") == 0)
            opt.receiver = num(v, "-r");
        else if (strcmp(a, "-T") == 0 || strcmp(a, "--timeout") == 0)
            opt.timeout = atof(v);
        else if (strcmp(a, "--run-id") == 0)
            opt.run_id = v;
        else if (strcmp(a, "--map") == 0) {
            const char *eq = strchr(v, '=');
            if (opt.nmap == MAX_MAPS || eq == NULL || (size_t)(eq - v) >= sizeof(opt.map_from[0]) ||
                strlen(eq + 1) >= sizeof(opt.map_to[0]) || memchr(v, ':', (size_t)(eq - v)) == NULL ||
                strchr(eq + 1, ':') == NULL)
                usage("--map: want HOST:PORT=HOST:PORT");
            memcpy(opt.map_from[opt.nmap], v, (size_t)(eq - v));
            opt.map_from[opt.nmap][eq - v] = 0;
            strcpy(opt.map_to[opt.nmap++], eq + 1);
        } else
            usage("unknown option");
    }
    if (opt.service == NULL || strchr(opt.service, ':') == NULL || strlen(opt.service) >= 64)
        usage("want the service's HOST:PORT");
    if (opt.count < 1 || opt.size < 32 || opt.window < 1 || opt.receiver < 2 || opt.timeout <= 0)
        usage("-n >= 1, -s >= 32, -w >= 1, -r >= 2, -T > 0");
    if (opt.run_id) {
        if (strlen(opt.run_id) > 20 || strpbrk(opt.run_id, " \"\\/") != NULL)
            usage("--run-id: at most 20 characters, no space, quote or slash");
        snprintf(run_id, sizeof(run_id), "%s", opt.run_id);
    }
    /* printable ASCII, as text payloads (JSON...) are */
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
    size_t bn = (size_t)opt.size + BLOCK_EXTRA;
    block = malloc(bn);
    uint8_t rnd[4];
    if (block == NULL || getrandom(block, bn, 0) != (ssize_t)bn || getrandom(rnd, 4, 0) != 4)
        fail(1, "no random bytes");
    for (size_t i = 0; i < bn; i++)
        block[i] = (uint8_t)alphabet[block[i] & 63];
    if (!opt.run_id)
        snprintf(run_id, sizeof(run_id), "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
    pw_crc_init();
    signal(SIGALRM, on_alarm);
    alarm((unsigned)ceil(opt.timeout));
    if (opt.latency)
        latency();
    else
        throughput();
    print_tail();
    printf("}\n");
    return 0;
}
