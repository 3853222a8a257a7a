/*
 * Bounded inflate over zlib, one loop for every body lookout reads
 * compressed (see lk_inflate.h).  The bound is what the caller gives: the
 * lookup filter's is max_buffer_bytes, the leak guard's a multiple of it,
 * past which a worker would spend its time on a decompression bomb.
 */
#include <limits.h>
#include <string.h>

#include "lk_inflate.h"

int
lk_inflate_init(struct lk_inflate *zi, enum lk_inflate_wrap wrap)
{
    memset(zi, 0, sizeof(*zi));
    /* 16 + 15: a gzip header only; 32 + 15: a zlib or gzip header, told
     * apart by zlib.  A raw deflate stream, as some servers send for
     * "deflate", is refused either way (inflate reports it broken). */
    return inflateInit2(&zi->z, (wrap == LK_INFLATE_GZIP ? 16 : 32) + MAX_WBITS) == Z_OK ? 0 : -1;
}

enum lk_inflate_rc
lk_inflate_feed(struct lk_inflate *zi, const void *in, size_t len, uint64_t max,
                lk_inflate_sink sink, void *arg)
{
    unsigned char buf[16384];
    z_stream *z = &zi->z;

    z->next_in = (unsigned char *)in;
    z->avail_in = (uInt)len;
    for (;;) {
        z->next_out = buf;
        z->avail_out = sizeof(buf);
        int zr = inflate(z, Z_NO_FLUSH);
        size_t n = sizeof(buf) - z->avail_out;
        if (sink(arg, buf, n) != 0)
            return LK_INFLATE_STOPPED;
        zi->out += n;
        if (zi->out > max)
            return LK_INFLATE_TOO_BIG;
        if (zr == Z_STREAM_END) {
            if (z->avail_in == 0)
                return LK_INFLATE_END;
            if (inflateReset(z) != Z_OK)
                return LK_INFLATE_BROKEN;
            continue; /* another member follows; garbage fails there */
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR)
            return LK_INFLATE_BROKEN;
        /* Z_BUF_ERROR: no progress possible until more input comes */
        if (zr == Z_BUF_ERROR || (z->avail_in == 0 && z->avail_out != 0))
            return LK_INFLATE_MORE;
    }
}

void
lk_inflate_end(struct lk_inflate *zi)
{
    inflateEnd(&zi->z);
}

static int
to_evbuffer(void *arg, const void *p, size_t n)
{
    return n != 0 && evbuffer_add(arg, p, n) != 0;
}

int
lk_inflate_gunzip(struct evbuffer *in, struct evbuffer *out, size_t max)
{
    struct lk_inflate zi;
    size_t len = evbuffer_get_length(in);
    enum lk_inflate_rc rc;

    if (len == 0 || len > UINT_MAX || lk_inflate_init(&zi, LK_INFLATE_GZIP) != 0)
        return -1;
    /* bounded: the caller holds at most max_buffer_bytes of it; a stream
     * that is not whole ends MORE (zlib's Z_BUF_ERROR: the input ended) */
    rc = lk_inflate_feed(&zi, evbuffer_pullup(in, -1), len, max, to_evbuffer, out);
    lk_inflate_end(&zi);
    return rc == LK_INFLATE_END ? 0 : -1;
}
