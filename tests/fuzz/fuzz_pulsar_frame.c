/*
 * Fuzzes the Pulsar frame reading of proxy/lk_pulsar_codec.c: the sizes
 * (lk_pulsar_sizes) and the command's type (lk_pulsar_command_type, once
 * the whole command is there, as proxy/lk_pulsar.c's frame_head waits for
 * it), over a byte stream read once whole and once in pieces whose sizes
 * come from the input (fuzz_util's lk_fuzz_piece), the way the protocol
 * module meets it.  The first input byte picks max_frame_bytes (0: the
 * default; a few small values; the largest); the rest is the stream.  The
 * unit tests write such inputs (LK_PULSAR_DUMP=DIR tests/unit/run
 * pulsar_codec).  Invariants:
 *   - the split read finds the same frames (sizes, start, end), the same
 *     type for each, and the same error at the same offset as the one-shot
 *     read: the type never depends on how the bytes arrived;
 *   - the sizes equal a naive reading of the two big-endian words, refused
 *     exactly when commandSize is 0, totalSize is below 4 + commandSize or
 *     above the max;
 *   - each whole command is read as the broker reads it
 *     (lk_fuzz_pulsar_same_reading: the only type field, protobuf-c's
 *     type; a command with two types refused);
 *   - the stream held in extents (pieces again, as an evbuffer's chains),
 *     read as proxy/lk_pulsar.c's pump reads its input
 *     (lk_pulsar_frame_at, lk_pulsar_cursor_skip; a head it cannot read
 *     across extents is read again from contiguous bytes, as the pump
 *     makes them), finds the same frames, types and errors, and each
 *     head's command bytes are the stream's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lk_pulsar_codec.h"

#define MAXF 4096
#define INCOMPLETE (-3) /* the stream ended before the type could be known */

struct frame {
    uint32_t total, cmd;
    int type;
    size_t start, end; /* end 0: the stream ended within the frame */
};

struct result {
    struct frame f[MAXF];
    size_t n;
    long err_at; /* offset of the bad sizes, or -1 */
};

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static size_t
min(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* What the module does with the command bytes it has (have of cmd_size):
 * the type from the whole command, or INCOMPLETE when it must wait for
 * more. */
static int
type_of(const uint8_t *cmd, size_t have, size_t cmd_size)
{
    return have >= cmd_size ? lk_pulsar_command_type(cmd, cmd_size) : INCOMPLETE;
}

/* Checks a whole command's type against the broker's reading. */
static void
check_whole(const uint8_t *cmd, size_t len)
{
    int c = lk_pulsar_command_type(cmd, len);

    LK_FUZZ_CHECK(c >= LK_PULSAR_TYPE_TWICE);
    if (len >= 2 && cmd[0] == 0x08 && cmd[1] < 0x80 && c >= 0)
        LK_FUZZ_CHECK(c == cmd[1]);
    lk_fuzz_pulsar_same_reading(cmd, len);
}

static void
read_once(const uint8_t *s, size_t len, uint32_t max, struct result *r)
{
    size_t at = 0;

    r->n = 0;
    r->err_at = -1;
    while (len - at >= LK_PULSAR_PREFIX && r->n < MAXF) {
        uint32_t total, cmd, nt = be32(s + at), nc = be32(s + at + 4);
        int rc = lk_pulsar_sizes(s + at, max, &total, &cmd);
        int bad = nc == 0 || (uint64_t)nt < 4 + (uint64_t)nc || nt > max;
        LK_FUZZ_CHECK(total == nt && cmd == nc);
        LK_FUZZ_CHECK(rc == (bad ? -1 : 0));
        if (rc != 0) {
            r->err_at = (long)at;
            return;
        }
        struct frame *f = &r->f[r->n++];
        size_t avail = len - at - LK_PULSAR_PREFIX;
        f->total = total;
        f->cmd = cmd;
        f->start = at;
        f->type = type_of(s + at + LK_PULSAR_PREFIX, min(avail, cmd), cmd);
        if (avail >= cmd)
            check_whole(s + at + LK_PULSAR_PREFIX, cmd);
        if (avail < (size_t)total - 4) {
            f->end = 0;
            return;
        }
        at += 4 + (size_t)total;
        f->end = at;
    }
}

/* The same stream in pieces: the prefix gathered, then the command's
 * bytes as they come until the type is known, then the rest counted. */
static void
read_split(const uint8_t *s, size_t len, uint32_t max, uint64_t *state, uint8_t *cmdbuf,
           struct result *r)
{
    uint8_t pre[LK_PULSAR_PREFIX];
    size_t at = 0, have = 0, cmd_have = 0, skip = 0;
    struct frame *f = NULL;

    r->n = 0;
    r->err_at = -1;
    while (at < len) {
        size_t piece = lk_fuzz_piece(state, len - at), used = 0;
        while (used < piece) {
            const uint8_t *p = s + at + used;
            size_t left = piece - used;
            if (f == NULL) { /* the prefix */
                if (r->n == MAXF)
                    return;
                size_t n = min(left, LK_PULSAR_PREFIX - have);
                memcpy(pre + have, p, n);
                have += n;
                used += n;
                if (have < LK_PULSAR_PREFIX)
                    continue;
                uint32_t total, cmd;
                if (lk_pulsar_sizes(pre, max, &total, &cmd) != 0) {
                    r->err_at = (long)(at + used - LK_PULSAR_PREFIX);
                    return;
                }
                f = &r->f[r->n++];
                *f = (struct frame){total, cmd, INCOMPLETE, at + used - LK_PULSAR_PREFIX, 0};
                cmd_have = 0;
                skip = (size_t)total - 4;
                continue;
            }
            /* command bytes are kept while the type is unknown, the rest
             * only counted */
            size_t n = min(left, skip);
            if (f->type == INCOMPLETE && cmd_have < f->cmd) {
                n = min(n, f->cmd - cmd_have);
                memcpy(cmdbuf + cmd_have, p, n);
                cmd_have += n;
                f->type = type_of(cmdbuf, cmd_have, f->cmd);
            }
            used += n;
            skip -= n;
            if (skip == 0) {
                f->end = at + used;
                f = NULL;
                have = 0;
            }
        }
        at += used;
    }
}

/* The stream in extents, read frame by frame through a cursor. */
static void
read_extents(const uint8_t *s, size_t len, uint32_t max, uint64_t *state, struct result *r)
{
    struct evbuffer_iovec *v = malloc((len != 0 ? len : 1) * sizeof(*v));
    uint8_t copy[LK_PULSAR_COPY];
    struct lk_pulsar_cursor cur;
    size_t nv = 0, at = 0;

    /* each extent a copy of its own: a read past one's end is caught */
    for (size_t off = 0; off < len;) {
        size_t piece = lk_fuzz_piece(state, len - off);
        v[nv].iov_base = malloc(piece);
        memcpy(v[nv].iov_base, s + off, piece);
        v[nv++].iov_len = piece;
        off += piece;
    }
    cur = (struct lk_pulsar_cursor){v, (int)nv, 0, 0};
    r->n = 0;
    r->err_at = -1;
    while (r->n < MAXF) {
        struct lk_pulsar_head h;
        struct evbuffer_iovec one = {(void *)(s + at), len - at};
        int rc = lk_pulsar_frame_at(&cur, len - at, max, copy, &h);
        if (rc == 2) { /* the pump makes the head contiguous, then reads it */
            LK_FUZZ_CHECK(h.need > LK_PULSAR_COPY && h.need <= len - at);
            struct lk_pulsar_cursor c1 = {&one, 1, 0, 0};
            rc = lk_pulsar_frame_at(&c1, len - at, max, copy, &h);
            LK_FUZZ_CHECK(rc == 1);
        }
        if (rc == -1) {
            r->err_at = (long)at;
            break;
        }
        if (rc == 0) { /* the stream ends in the sizes or the command */
            LK_FUZZ_CHECK(h.need > len - at);
            if (h.need > LK_PULSAR_PREFIX)
                r->f[r->n++] = (struct frame){h.total, h.cmd_size, INCOMPLETE, at, 0};
            break;
        }
        LK_FUZZ_CHECK(rc == 1 && memcmp(h.cmd, s + at + LK_PULSAR_PREFIX, h.cmd_size) == 0);
        struct frame *f = &r->f[r->n++];
        *f = (struct frame){h.total, h.cmd_size, h.type, at, 0};
        if (len - at < (size_t)h.total + 4)
            break;
        at += (size_t)h.total + 4;
        f->end = at;
        lk_pulsar_cursor_skip(&cur, (size_t)h.total + 4);
    }
    for (size_t i = 0; i < nv; i++)
        free(v[i].iov_base);
    free(v);
}

static int
same(const struct result *a, const struct result *b)
{
    if (a->n != b->n || a->err_at != b->err_at)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->f[i].total != b->f[i].total || a->f[i].cmd != b->f[i].cmd ||
            a->f[i].type != b->f[i].type || a->f[i].start != b->f[i].start ||
            a->f[i].end != b->f[i].end)
            return 0;
    return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t maxes[] = {
        LK_PULSAR_DEFAULT_MAX_FRAME, 5, 12, 16, 64, 4096, 0xffffffff, 0};
    static struct result one, split;

    if (size < 1)
        return 0;
    uint32_t max = maxes[data[0] & 7];
    const uint8_t *s = data + 1;
    size_t len = size - 1;
    uint64_t state = lk_fuzz_seed(data, size);
    uint8_t *cmdbuf = malloc(len != 0 ? len : 1);

    read_once(s, len, max, &one);
    read_split(s, len, max, &state, cmdbuf, &split);
    LK_FUZZ_CHECK(same(&one, &split));
    read_extents(s, len, max, &state, &split);
    LK_FUZZ_CHECK(same(&one, &split));
    free(cmdbuf);
    return 0;
}
