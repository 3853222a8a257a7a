/*
 * The streamed side of the Kafka codec (lk_kafka_fstream.h): the
 * incremental parser that lets a Fetch or ShareFetch answer's records pass
 * as they come, the small head that makes its held tail a frame the
 * filters know, and the fitting of the rewritten tail to its original
 * length.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "lk_kafka_fstream.h"
#include "lk_kafka_wire.h"

int
lk_kafka_stream_wanted(int16_t api_key, int16_t api_version)
{
    return (api_key == LK_KAFKA_FETCH && api_version >= 16 && api_version <= 18) ||
           (api_key == LK_KAFKA_SHARE_FETCH && api_version >= 0 && api_version <= 2);
}

/*
 * The parser's states: each names the field being read (a skip of fixed
 * bytes, an unsigned varint, or a string or bytes field's content); when
 * that is done, step() decides what comes next.  Two small sub-machines
 * are shared: a tagged-field section (T_*, returning to tret) and a
 * compact nullable string or bytes (STR_*, returning to sret).  The
 * checks are those of the whole-frame walk (lk_kafka_wire.h): a varint of
 * at most 5 bytes, an array count no larger than the bytes left, a length
 * within the frame, a non-nullable array not null.
 */
enum fs_state {
    FS_HTAGS = 0, /* the response header's tagged fields (header v1) */
    /* FetchResponse v16+ */
    F_FIXED, /* ThrottleTimeMs, ErrorCode, SessionId */
    F_NT,    /* Responses count */
    F_TID,   /* TopicId */
    F_NP,    /* Partitions count */
    F_PFIX,  /* PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset */
    F_NA,    /* AbortedTransactions count (nullable) */
    F_ABORT, /* ProducerId, FirstOffset */
    F_AEND,
    F_PRR,  /* PreferredReadReplica */
    F_RECS, /* Records */
    F_PTAGS,
    F_PEND,
    F_TEND,
    /* ShareFetchResponse v0-2 */
    S_FIXED, /* ThrottleTimeMs, ErrorCode */
    S_EMSG,  /* ErrorMessage */
    S_LOCK,  /* AcquisitionLockTimeoutMs (v1+) */
    S_NT,
    S_TID,
    S_NP,
    S_P1,     /* PartitionIndex, ErrorCode */
    S_PEMSG,  /* ErrorMessage */
    S_P2,     /* AcknowledgeErrorCode */
    S_AEMSG,  /* AcknowledgeErrorMessage */
    S_LEADER, /* CurrentLeader {LeaderId, LeaderEpoch} */
    S_LTAGS,  /* ... its tags */
    S_RECS,
    S_NACQ, /* AcquiredRecords count */
    S_ACQ,  /* FirstOffset, LastOffset, DeliveryCount */
    S_AEND,
    S_PTAGS,
    S_PEND,
    S_TEND,
    /* shared */
    T_COUNT,
    T_TAG,
    T_SIZE,
    T_BODY,
    STR_LEN,
    STR_BODY,
    FS_TAIL,
};

/* Fixed bytes to step over next, then state `next`. */
static int
fs_skip(struct lk_kafka_fstream *s, uint32_t n, int next)
{
    if (n > s->left)
        return -1;
    s->skip = n;
    s->st = (uint8_t)next;
    return 0;
}

static int
fs_var(struct lk_kafka_fstream *s, int next)
{
    s->want_var = 1;
    s->v = 0;
    s->vshift = 0;
    s->st = (uint8_t)next;
    return 0;
}

static int
fs_tags(struct lk_kafka_fstream *s, int ret)
{
    s->tret = (uint8_t)ret;
    return fs_var(s, T_COUNT);
}

static int
fs_str(struct lk_kafka_fstream *s, int ret)
{
    s->sret = (uint8_t)ret;
    return fs_var(s, STR_LEN);
}

/* A compact array count v (n + 1): n, or -1 when null and not nullable,
 * or larger than the bytes left. */
static int64_t
fs_count(const struct lk_kafka_fstream *s, uint32_t v, int nullable)
{
    if (v == 0)
        return nullable ? 0 : -1;
    return v - 1 > s->left ? -1 : (int64_t)(v - 1);
}

/* The field of state s->st is done (v: the varint it was): sets up the
 * next.  -1 when the bytes break the layout. */
static int
fs_step(struct lk_kafka_fstream *s, uint32_t v)
{
    int64_t n;
    int share = s->api_key == LK_KAFKA_SHARE_FETCH;

    switch ((enum fs_state)s->st) {
    /* a tagged-field section, then tret */
    case T_COUNT:
        s->ntag = v;
        if (v != 0)
            return fs_var(s, T_TAG);
        s->st = s->tret;
        return fs_step(s, 0);
    case T_TAG:
        return fs_var(s, T_SIZE);
    case T_SIZE:
        return fs_skip(s, v, T_BODY);
    case T_BODY:
        if (--s->ntag != 0)
            return fs_var(s, T_TAG);
        s->st = s->tret;
        return fs_step(s, 0);
    /* a compact nullable string or bytes, then sret */
    case STR_LEN:
        if (v != 0)
            return fs_skip(s, v - 1, STR_BODY);
        /* null: */
        /* fall through */
    case STR_BODY:
        s->st = s->sret;
        return fs_step(s, 0);

    case FS_HTAGS: /* entered at init: the header's tags are done */
        return share ? fs_skip(s, 4 + 2, S_FIXED) : fs_skip(s, 4 + 2 + 4, F_FIXED);

    /* FetchResponse v16+ */
    case F_FIXED:
        return fs_var(s, F_NT);
    case F_NT:
        if ((n = fs_count(s, v, 0)) < 0)
            return -1;
        s->nt = (uint32_t)n;
        goto f_topic;
    case F_TID:
        return fs_var(s, F_NP);
    case F_NP:
        if ((n = fs_count(s, v, 0)) < 0)
            return -1;
        s->np = (uint32_t)n;
        goto f_part;
    case F_PFIX:
        return fs_var(s, F_NA);
    case F_NA:
        if ((n = fs_count(s, v, 1)) < 0)
            return -1;
        s->na = (uint32_t)n;
        goto f_abort;
    case F_ABORT:
        return fs_tags(s, F_AEND);
    case F_AEND:
        s->na--;
    f_abort:
        if (s->na != 0)
            return fs_skip(s, 8 + 8, F_ABORT);
        return fs_skip(s, 4, F_PRR);
    case F_PRR:
        return fs_str(s, F_RECS);
    case F_RECS:
        return fs_tags(s, F_PEND);
    case F_PEND:
        s->np--;
    f_part:
        if (s->np != 0)
            return fs_skip(s, 4 + 2 + 8 + 8 + 8, F_PFIX);
        return fs_tags(s, F_TEND);
    case F_TEND:
        s->nt--;
    f_topic:
        if (s->nt != 0)
            return fs_skip(s, 16, F_TID);
        s->st = FS_TAIL;
        s->tail = 1;
        return 0;

    /* ShareFetchResponse v0-2 */
    case S_FIXED:
        return fs_str(s, S_EMSG);
    case S_EMSG:
        if (s->api_version >= 1)
            return fs_skip(s, 4, S_LOCK);
        /* fall through */
    case S_LOCK:
        return fs_var(s, S_NT);
    case S_NT:
        if ((n = fs_count(s, v, 0)) < 0)
            return -1;
        s->nt = (uint32_t)n;
        goto s_topic;
    case S_TID:
        return fs_var(s, S_NP);
    case S_NP:
        if ((n = fs_count(s, v, 0)) < 0)
            return -1;
        s->np = (uint32_t)n;
        goto s_part;
    case S_P1:
        return fs_str(s, S_PEMSG);
    case S_PEMSG:
        return fs_skip(s, 2, S_P2);
    case S_P2:
        return fs_str(s, S_AEMSG);
    case S_AEMSG:
        return fs_skip(s, 4 + 4, S_LEADER);
    case S_LEADER:
        return fs_tags(s, S_LTAGS);
    case S_LTAGS:
        return fs_str(s, S_RECS);
    case S_RECS:
        return fs_var(s, S_NACQ);
    case S_NACQ:
        if ((n = fs_count(s, v, 0)) < 0)
            return -1;
        s->na = (uint32_t)n;
        goto s_acq;
    case S_ACQ:
        return fs_tags(s, S_AEND);
    case S_AEND:
        s->na--;
    s_acq:
        if (s->na != 0)
            return fs_skip(s, 8 + 8 + 2, S_ACQ);
        return fs_tags(s, S_PEND);
    case S_PTAGS: /* not reached: S_PEND follows the partition's tags */
    case S_PEND:
        s->np--;
    s_part:
        if (s->np != 0)
            return fs_skip(s, 4 + 2, S_P1);
        return fs_tags(s, S_TEND);
    case S_TEND:
        s->nt--;
    s_topic:
        if (s->nt != 0)
            return fs_skip(s, 16, S_TID);
        s->st = FS_TAIL;
        s->tail = 1;
        return 0;
    default:
        return -1;
    }
}

void
lk_kafka_fstream_init(struct lk_kafka_fstream *s, int16_t api_key, int16_t api_version,
                      int32_t size)
{
    memset(s, 0, sizeof(*s));
    s->api_key = api_key;
    s->api_version = api_version;
    s->left = size >= 4 ? (uint32_t)size - 4 : 0;
    s->tret = FS_HTAGS;
    fs_var(s, T_COUNT); /* the response header v1's tagged fields first */
}

int
lk_kafka_fstream_feed(struct lk_kafka_fstream *s, const uint8_t *p, size_t len, size_t *pass)
{
    size_t i = 0;

    *pass = 0;
    if (s->failed || len > s->left)
        goto fail;
    while (!s->tail && i < len) {
        if (s->skip != 0) {
            size_t n = len - i < s->skip ? len - i : s->skip;
            s->skip -= (uint32_t)n;
            s->left -= (uint32_t)n;
            i += n;
            if (s->skip == 0 && fs_step(s, 0) != 0)
                goto fail;
            continue;
        }
        if (!s->want_var) { /* a field of 0 bytes: a null, an empty tag */
            if (fs_step(s, 0) != 0)
                goto fail;
            continue;
        }
        if (p == NULL)
            goto fail; /* the caller broke lk_kafka_fstream_skippable */
        uint8_t b = p[i++];
        s->left--;
        s->v |= (uint32_t)(b & 0x7f) << s->vshift;
        if (b & 0x80) {
            s->vshift += 7;
            if (s->vshift > 28)
                goto fail; /* a sixth byte: "Varint is too long" */
            if (s->left == 0)
                goto fail;
            continue;
        }
        s->want_var = 0;
        if (fs_step(s, s->v) != 0)
            goto fail;
    }
    *pass = i;
    if (s->tail) {
        s->left -= (uint32_t)(len - i);
        return s->left == 0 ? 1 : 0;
    }
    if (s->left == 0)
        goto fail; /* the frame ended inside Responses: no tail at all */
    /* A field of 0 bytes may end the layout after the last byte came. */
    while (!s->tail && !s->want_var && s->skip == 0)
        if (fs_step(s, 0) != 0)
            goto fail;
    return 0;
fail:
    s->failed = 1;
    return -1;
}

size_t
lk_kafka_fstream_head(int16_t api_key, int16_t api_version, int32_t correlation_id, size_t tail_len,
                      uint8_t *out)
{
    size_t n = 8;

    out[n++] = 0;              /* response header v1: no tagged fields */
    memset(out + n, 0, 4 + 2); /* ThrottleTimeMs, ErrorCode */
    n += 4 + 2;
    if (api_key == LK_KAFKA_SHARE_FETCH) {
        out[n++] = 0; /* ErrorMessage: null */
        if (api_version >= 1) {
            memset(out + n, 0, 4); /* AcquisitionLockTimeoutMs */
            n += 4;
        }
    } else {
        memset(out + n, 0, 4); /* SessionId */
        n += 4;
    }
    out[n++] = 1; /* Responses: empty */
    if (tail_len > INT32_MAX - n)
        return 0;
    lk_kw_put32(out, (uint32_t)(n - 4 + tail_len));
    lk_kw_put32(out + 4, (uint32_t)correlation_id);
    return n;
}

/* Whether c holds a whole NodeEndpoints array {NodeId, Host, Port, Rack?,
 * tags} (KIP-951), as the rewrite walk reads it. */
static int
endpoints_ok(struct lk_kw *c)
{
    int64_t n = lk_kw_array(c, 1, 0);

    for (int64_t i = 0; i < n && !c->bad; i++) {
        lk_kw_skip(c, 4);
        lk_kw_string(c, 1, 0);
        lk_kw_skip(c, 4);
        lk_kw_string(c, 1, 1);
        lk_kw_tags(c);
    }
    return !c->bad;
}

/* The s of a padding field of exactly len bytes (a two-byte tag, the
 * uvarint size s, s zero bytes), or -1 when no s makes len. */
static int64_t
pad_body(int64_t len)
{
    for (int64_t u = 1; u <= 5; u++) {
        int64_t s = len - 2 - u;
        if (s >= 0 && s <= INT32_MAX && (int64_t)lk_kw_uvarint_len((uint32_t)s) == u)
            return s;
    }
    return -1;
}

static void
pad_field(struct evbuffer *out, uint32_t tag, int64_t s)
{
    uint8_t tmp[8];
    static const uint8_t zero[256];

    evbuffer_add(out, tmp, lk_kw_put_uvarint(tmp, tag));
    evbuffer_add(out, tmp, lk_kw_put_uvarint(tmp, (uint32_t)s));
    for (; s > 0; s -= s < (int64_t)sizeof(zero) ? s : (int64_t)sizeof(zero))
        evbuffer_add(out, zero, s < (int64_t)sizeof(zero) ? (size_t)s : sizeof(zero));
}

/* A top-level tagged-field section's fields, as ranges of the tail. */
struct tfield {
    size_t off, len;
    uint32_t tag;
};

/*
 * Writes pre, the section's fields (those of tag 0 left out when drop),
 * padding, and the bytes after the section, in exactly want bytes; -1 (and
 * nothing written) when no padding makes that length.
 */
static int
fit_out(const uint8_t *t, const uint8_t *pre, size_t pre_len, const struct tfield *f, size_t nf,
        int drop, size_t sec_end, size_t len, size_t want, struct evbuffer *out)
{
    int64_t base = (int64_t)pre_len + (int64_t)(len - sec_end);
    uint32_t n = 0;
    int64_t s1 = -1, s2 = -1;
    int k;
    uint8_t tmp[8];

    for (size_t i = 0; i < nf; i++)
        if (!(drop && f[i].tag == 0)) {
            base += (int64_t)f[i].len;
            n++;
        }
    for (k = 0; k <= 2; k++) {
        if (n + (uint32_t)k < n)
            return -1;
        int64_t r = (int64_t)want - base - (int64_t)lk_kw_uvarint_len(n + (uint32_t)k);
        if (k == 0 && r == 0)
            break;
        if (k == 1 && (s1 = pad_body(r)) >= 0)
            break;
        /* two fields: the smallest padding field (3 bytes) or the next,
         * and the rest; a length no single field can take is one point
         * between two uvarint sizes, so one of these fits */
        if (k == 2 && (((s1 = pad_body(3)) >= 0 && (s2 = pad_body(r - 3)) >= 0) ||
                       ((s1 = pad_body(4)) >= 0 && (s2 = pad_body(r - 4)) >= 0)))
            break;
    }
    if (k > 2)
        return -1;
    evbuffer_add(out, pre, pre_len);
    evbuffer_add(out, tmp, lk_kw_put_uvarint(tmp, n + (uint32_t)k));
    for (size_t i = 0; i < nf; i++)
        if (!(drop && f[i].tag == 0))
            evbuffer_add(out, t + f[i].off, f[i].len);
    /* ascending, after every tag a spec defines */
    if (k == 1)
        pad_field(out, LK_KAFKA_PAD_TAG, s1);
    if (k == 2) {
        pad_field(out, LK_KAFKA_PAD_TAG2, s1);
        pad_field(out, LK_KAFKA_PAD_TAG, s2);
    }
    evbuffer_add(out, t + sec_end, len - sec_end);
    return 0;
}

enum lk_kafka_fit
lk_kafka_tail_fit(int16_t api_key, const uint8_t *t, size_t len, size_t want, struct evbuffer *out)
{
    struct lk_kw c = {t, len, 0, 0};
    struct tfield inl[8] = {{0, 0, 0}}, *f = inl;
    size_t nf = 0, cap = sizeof(inl) / sizeof(inl[0]), pre_len = 0;
    static const uint8_t empty_array = 1;
    enum lk_kafka_fit rc = LK_KAFKA_FIT_BAD;

    if (api_key == LK_KAFKA_SHARE_FETCH) { /* NodeEndpoints, a plain field, first */
        if (!endpoints_ok(&c))
            return LK_KAFKA_FIT_BAD;
        pre_len = c.off;
    }
    uint32_t n = lk_kw_uvarint(&c);
    for (uint32_t i = 0; i < n && !c.bad; i++) {
        size_t start = c.off;
        uint32_t tag = lk_kw_uvarint(&c);
        uint32_t size = lk_kw_uvarint(&c);
        if (!lk_kw_need(&c, size))
            break;
        if (tag == 0 && api_key == LK_KAFKA_FETCH) {
            struct lk_kw e = {t, c.off + size, c.off, 0};
            if (!endpoints_ok(&e))
                c.bad = 1; /* what the rewrite could not read, it did not rewrite */
        }
        c.off += size;
        if (nf == cap) {
            struct tfield *nfp = malloc(cap * 2 * sizeof(*nfp));
            if (nfp == NULL)
                abort(); /* out of memory, as lk_xmalloc */
            memcpy(nfp, f, nf * sizeof(*nfp));
            if (f != inl)
                free(f);
            f = nfp;
            cap *= 2;
        }
        f[nf++] = (struct tfield){start, c.off - start, tag};
    }
    if (c.bad)
        goto out;
    /* As long as it was: as it is (a count in a longer uvarint than need
     * be, too, which re-encoding would shorten). */
    if (len == want) {
        evbuffer_add(out, t, len);
        rc = LK_KAFKA_FIT_KEPT;
    } else if (fit_out(t, t, pre_len, f, nf, 0, c.off, len, want, out) == 0)
        rc = LK_KAFKA_FIT_KEPT;
    else if (api_key == LK_KAFKA_SHARE_FETCH
                 ? fit_out(t, &empty_array, 1, f, nf, 0, c.off, len, want, out) == 0
                 : fit_out(t, NULL, 0, f, nf, 1, c.off, len, want, out) == 0)
        rc = LK_KAFKA_FIT_DROPPED;
out:
    if (f != inl)
        free(f);
    return rc;
}
