/*
 * Bounded inflate: a gzip (or zlib) body read through zlib with a cap on
 * what it may inflate to, one piece at a time into a sink, or whole into an
 * evbuffer.  The lookup filter inflates a whole buffered body to rewrite
 * it; the leak guard inflates a streamed one only to read it.
 */
#ifndef LK_INFLATE_H
#define LK_INFLATE_H

#include <stddef.h>
#include <stdint.h>
#include <event2/buffer.h>
#include <zlib.h>

/* What the stream may be wrapped in. */
enum lk_inflate_wrap {
    LK_INFLATE_GZIP,         /* gzip only (RFC 1952) */
    LK_INFLATE_GZIP_OR_ZLIB, /* either, told apart by zlib; not raw deflate */
};

enum lk_inflate_rc {
    LK_INFLATE_MORE = 0, /* the input is taken; the stream goes on */
    LK_INFLATE_END,      /* the input is taken and ends a member: a whole stream */
    LK_INFLATE_BROKEN,   /* not the format, or its checks failed */
    LK_INFLATE_TOO_BIG,  /* it inflated past the cap */
    LK_INFLATE_STOPPED,  /* the sink asked to stop */
};

struct lk_inflate {
    z_stream z;
    uint64_t out; /* bytes inflated so far */
};

/* Takes n inflated bytes (n may be 0); nonzero stops the inflating. */
typedef int (*lk_inflate_sink)(void *arg, const void *p, size_t n);

/* 0, or -1 when zlib cannot start (lk_inflate_end is then not needed). */
int lk_inflate_init(struct lk_inflate *zi, enum lk_inflate_wrap wrap);
/*
 * Inflates in[0..len) (len at most UINT_MAX) into sink, a bounded piece at
 * a time; concatenated members (RFC 1952 §2.2) follow one another.  max
 * caps what the whole stream inflates to; every piece goes to the sink
 * before the cap is looked at, so the piece that crosses it is read too.  After BROKEN or TOO_BIG
 * the stream is not to be fed again.
 */
enum lk_inflate_rc lk_inflate_feed(struct lk_inflate *zi, const void *in, size_t len, uint64_t max,
                                   lk_inflate_sink sink, void *arg);
void lk_inflate_end(struct lk_inflate *zi);

/*
 * Inflates the gzip body in (one or more members) into out, empty, up to
 * max bytes; in is left as it was.  0, or -1 if in is not complete gzip or
 * inflates to more than max (out then holds part of it).
 */
int lk_inflate_gunzip(struct evbuffer *in, struct evbuffer *out, size_t max);

#endif
