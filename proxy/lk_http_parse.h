/*
 * Incremental HTTP/1.x head parser over llhttp (lk_http_parse.c), filling an
 * lk_http_msg (lk_http_msg.h).
 */
#ifndef LK_HTTP_PARSE_H
#define LK_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <llhttp.h>

#include "lk_http_msg.h"

/*
 * Incremental head parser over llhttp.  It collects the head into msg and
 * then pauses, so that the caller decides what to do with the body; the
 * body comes through on_body with framing removed.  Pure over bytes: no
 * sockets, no event base.
 */
struct lk_http_parser;
typedef void (*lk_http_body_cb)(void *arg, const char *at, size_t len);

/* The largest Content-Length or chunk size taken (nginx's off_t bound);
 * anything larger is malformed. */
#define LK_HTTP_MAX_LENGTH ((uint64_t)INT64_MAX)

enum lk_http_event {
    LK_HTTP_NEED_MORE = 0, /* all input consumed */
    LK_HTTP_HEAD,          /* the head is complete: msg is filled; parser paused */
    LK_HTTP_DONE,          /* the message (and its body) is complete; paused */
    LK_HTTP_UPGRADE,       /* message done and the connection switched protocols */
    LK_HTTP_ERROR,         /* malformed; error text in lk_http_parser_error */
    LK_HTTP_TOO_LARGE,     /* the head is over max_head bytes, or LK_HTTP_MAX_FIELDS fields */
};

struct lk_http_parser {
    llhttp_t ll;
    struct lk_http_msg *msg;
    size_t head_bytes, raw_head, max_head;
    size_t conn_tokens; /* Connection tokens of this head so far */
    int too_many_fields; /* the head went over LK_HTTP_MAX_FIELDS (LK_HTTP_TOO_LARGE) */
    int state; /* internal */
    const char *gap_from; /* end of the last field name or value piece, in this input */
    int lf_in_gap;        /* a LF came after it, in an earlier input */
    const char *input_start; /* the buffer being parsed, for look-behind */
    char hist[4];            /* the last bytes consumed before it, hist[3] last */
    struct lk_str cur_name, cur_value;
    enum lk_hdr cur_id; /* lk_http_hdr_id(cur_name) */
    int name_in_input; /* cur_name still points into the input being parsed */
    char *buf; /* growable scratch for the field being read */
    size_t buflen, bufcap;
    const char *span_p; /* or its first piece, span_len bytes still in the input */
    size_t span_len;
    /* The part of the input that strings of the message still point into,
     * from blk_lo to blk_hi (blk_lo NULL: none), and the first field
     * added from this input; copied at its end (keep_block). */
    const char *blk_lo, *blk_hi;
    size_t blk_first;
    lk_http_body_cb on_body;
    void *body_arg;
    int no_body;    /* response to HEAD / CONNECT: no body follows */
    /* A 1xx or 204 response whose Content-Length (not 0) or
     * Transfer-Encoding announced a body it cannot have: ignored, but
     * what follows on the connection may be that body. */
    int body_ignored;
    int head_done, msg_done;
    int chunked, has_cl, keep_alive, upgrade;
    uint64_t chunk_left;   /* data bytes of the current chunk still to come */
    int chunk_started;     /* a byte of the current chunk's data was seen */
    int ext_named;         /* the current chunk extension has a name */
    unsigned crlf_need;    /* bytes of the CRLF after chunk data not yet checked */
    const char *crlf_from; /* where they are, in the input being parsed */
    uint64_t content_length;
    const char *error;
    const char *error_at; /* where a callback found the input bad, in the input being parsed */
};

void lk_http_parser_init(struct lk_http_parser *p, int is_request, size_t max_head);
/* Starts the next message: its head goes into msg. */
void lk_http_parser_next(struct lk_http_parser *p, struct lk_http_msg *msg);
/*
 * Parses from data; *consumed gets the number of bytes used.  Returns at the
 * first event (head complete, message complete) so the caller can act
 * before the next bytes are read.
 */
enum lk_http_event lk_http_parse(struct lk_http_parser *p, const char *data, size_t len,
                                 size_t *consumed);
/* At end of input: completes a close-delimited body (LK_HTTP_DONE) or
 * reports a truncated message (LK_HTTP_ERROR). */
enum lk_http_event lk_http_parse_eof(struct lk_http_parser *p);
/* Whether a call without input can make progress: the head was reported
 * and the message's end is still to be (or has not yet been) reported. */
int lk_http_parser_can_step(const struct lk_http_parser *p);
/* Whether the message's end came with its head, reported: the next
 * lk_http_parse reports the end (DONE or UPGRADE) without using input. */
int lk_http_parser_end_known(const struct lk_http_parser *p);
void lk_http_parser_free(struct lk_http_parser *p);

#endif
