/*
 * The leak guard's matcher (CONTRACT §4, "Leak guard"): what the
 * leak_guard filter (filters/flt_leak_guard.c) runs on every text response
 * and every binary answer that can carry a broker address, kept free of
 * filters and connections so that it reads as one piece.  It is built once
 * per cluster from the map (patterns, one automaton) and reads a response
 * through a per-exchange lk_guard_stream; what it finds it counts, logs and
 * acts on by the cluster's mode, and says what the caller is to do.  The
 * binary answers are lk_guard_frame.h's.
 */
#ifndef LK_GUARD_H
#define LK_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include <event2/buffer.h>

#include "lk_conf.h"
#include "lk_http_msg.h"
#include "lk_inflate.h"
#include "lk_match.h"
#include "lk_pool.h"

struct lk_conn;
struct lk_guard;
struct lk_guard_ap;

/* What the caller is to do with the response. */
enum lk_guard_verdict {
    LK_GUARD_PASS = 0, /* let it go on (rewritten, or as it was) */
    LK_GUARD_REFUSE,   /* answer 502 with lk_guard_refusal instead */
    LK_GUARD_CUT,      /* too late to answer: close the client's connection */
};

/* The reason of the 502 that LK_GUARD_REFUSE asks for. */
extern const char lk_guard_refusal[];

/*
 * The exchange as the guard sees it, for one call.  The caller sets fill
 * only (and keeps beside it what fill needs); the guard calls fill(v) for
 * the rest the first time it needs any of it (a find, a log line, block's
 * cap, a binary answer), which most text responses never do: they pay for
 * no view.  fill sets every field after it, and leaves fill NULL.
 */
struct lk_guard_x {
    void (*fill)(struct lk_guard_x *v);
    struct lk_pool *pool;             /* the exchange's */
    const struct lk_conn *conn;       /* the log's context */
    const char *id;                   /* the log's prefix: the filter instance */
    const struct lk_conf *conf;       /* every cluster, max_buffer_bytes */
    const struct lk_cluster *cluster; /* the exchange's */
    const struct lk_broker *broker;   /* where the request went; NULL: not known */
    const char *listener_name;        /* finds are rewritten into it; NULL: none */
    int client_tls;                   /* the client reached us over TLS */
    const int *vetted;                /* set when every address field of the body was
                                       * rewritten (LookupData): what is left of it
                                       * is an identifier */
    const struct lk_http_msg *req;    /* HTTP: the request, for the log */
    unsigned *leaks;                  /* the exchange's counts, added to */
    unsigned *rewrites;
    /* A find rewritten into a fallback of lk_location_pick (lacked, the
     * listener broker b has no web address on; to, the address given):
     * the caller logs it.  NULL: not logged. */
    void (*fallback)(struct lk_guard_x *v, const struct lk_broker *b, const char *lacked,
                     const struct lk_url *to);
};

/* How the body of a text response is to be read (lk_guard_head). */
enum lk_guard_read {
    LK_GUARD_READ_NONE = 0, /* not text: not read */
    LK_GUARD_READ_OBSERVE,  /* log: read as it passes, never changed nor held */
    LK_GUARD_READ_STREAM,   /* rewrite, block: changed as it passes, or held */
};

/* One response as it is read: per exchange, zeroed, in its pool. */
struct lk_guard_stream {
    struct lk_match_state st;
    uint64_t base;          /* stream offset of the first byte held in `in` */
    uint64_t leak_start;    /* the last leak counted, so that the two forms of */
    uint64_t leak_end;      /*   one address ("http://h:1", "h:1") count once */
    uint64_t fed;           /* raw stream offset read into the automaton so far */
    int body;               /* how the body is read (lk_guard.c) */
    struct lk_inflate z;    /* a compressed body: ended by a pool cleanup */
    struct lk_guard_ap *ap; /* the body, for brokerIds; in the pool, only when
                             * the map has a binary-only broker */
    int released;           /* block: body bytes have gone out */
    unsigned logged;        /* by log level: the exchange's first leak is logged */
};

/* The guard of cluster cl in mode (not LK_LEAK_OFF), or NULL with err set. */
struct lk_guard *lk_guard_new(const struct lk_cluster *cl, enum lk_leak_guard mode, char *err,
                              size_t errlen);
void lk_guard_free(struct lk_guard *g);
/* The request head req, before it goes to the broker: in rewrite and
 * block mode, asks for the body uncompressed. */
void lk_guard_req_head(const struct lk_guard *g, struct lk_http_msg *req);

/*
 * Reads the reason phrase and every header of the response head res (a
 * find in rewrite mode may change a value, in x->pool; a reason phrase
 * with a find becomes lk_http_reason's) and, when its body is text, readies
 * s for it; *read says how the body is to be read.
 */
enum lk_guard_verdict lk_guard_head(const struct lk_guard *g, struct lk_guard_stream *s,
                                    struct lk_guard_x *x, struct lk_http_msg *res,
                                    enum lk_guard_read *read);
/*
 * Reads an interim (1xx) or a 101 head res as lk_guard_head reads a final
 * one, with no body after it.  LK_GUARD_REFUSE (block): a 1xx is to be
 * dropped, a 101 answered with the 502 (logged as such).
 */
enum lk_guard_verdict lk_guard_interim(const struct lk_guard *g, struct lk_guard_stream *s,
                                       struct lk_guard_x *x, struct lk_http_msg *res);
/*
 * Reads the body bytes in `in` not read yet, as a body filter takes them
 * (res is the head, for its coding): what may go on is moved to out, what
 * a match in progress (rewrite) or a 502 still to give (block) may need is
 * kept in `in`.  last: the body ends here.  In log mode out may be NULL:
 * then `in` is read where it lies and left as it is, all of it read.
 */
enum lk_guard_verdict lk_guard_body(const struct lk_guard *g, struct lk_guard_stream *s,
                                    struct lk_guard_x *x, const struct lk_http_msg *res,
                                    struct evbuffer *in, struct evbuffer *out, int last);

#endif
