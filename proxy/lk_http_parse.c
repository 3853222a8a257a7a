/*
 * The llhttp glue: bytes in, an lk_http_msg head plus body callbacks out.
 * It collects the head (capped by max_head), checks what llhttp leaves to
 * its caller (bare CR and LF, obs-fold, chunk CRLFs, field name bytes),
 * pauses at the head and at the end of the message, and hands the body on
 * with its framing removed.  Pure over bytes: nothing here touches a socket.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lk_http_parse.h"

enum { EV_NONE = 0, EV_HEAD = 1, EV_DONE = 2 };

#define STR_(x) #x
#define XSTR(x) STR_(x) /* a macro's value as a string literal */
#define P(ll) ((struct lk_http_parser *)((char *)(ll) - offsetof(struct lk_http_parser, ll)))

/* Appends len bytes to the scratch buffer. */
static void
buf_put(struct lk_http_parser *p, const char *at, size_t len)
{
    if (p->buflen + len > p->bufcap) {
        size_t cap = p->bufcap != 0 ? p->bufcap : 256;
        while (cap < p->buflen + len)
            cap *= 2;
        p->buf = realloc(p->buf, cap);
        if (p->buf == NULL)
            abort();
        p->bufcap = cap;
    }
    memcpy(p->buf + p->buflen, at, len);
    p->buflen += len;
}

/* The piece of a span that waits in the input (see span_p): into the
 * scratch buffer, before another piece joins it or the input goes. */
static void
span_keep(struct lk_http_parser *p)
{
    if (p->span_len != 0) {
        buf_put(p, p->span_p, p->span_len);
        p->span_len = 0;
    }
}

static int
grow(struct lk_http_parser *p, const char *at, size_t len)
{
    p->head_bytes += len;
    if (p->head_bytes > p->max_head) {
        p->error = "head too large";
        return -1;
    }
    if (len == 0)
        return 0; /* llhttp reports empty spans too; p->buf may still be NULL */
    if (p->buflen == 0 && p->span_len == 0) {
        /* Most spans come whole, in one input: left where they are until
         * take() copies them once, into the pool. */
        p->span_p = at;
        p->span_len = len;
        return 0;
    }
    span_keep(p);
    buf_put(p, at, len);
    return 0;
}

static struct lk_str
take(struct lk_http_parser *p)
{
    struct lk_str s;

    if (p->span_len != 0) { /* then buflen is 0 */
        s = lk_pstr(p->msg->pool, p->span_p, p->span_len);
        p->span_len = 0;
        return s;
    }
    s = lk_pstr(p->msg->pool, p->buf, p->buflen);
    p->buflen = 0;
    return s;
}

/* A string of the message that lies whole in the input being parsed, left
 * there: keep_block copies the input's part of the head once, at the end
 * of the input, rather than each string on its own. */
static void
block_note(struct lk_http_parser *p, const char *from, const char *to)
{
    if (p->blk_lo == NULL)
        p->blk_lo = from;
    p->blk_hi = to; /* the strings come in the input's order */
}

/* A span that came whole, left in the input (block_note), or the copy
 * take() makes of one that did not. */
static struct lk_str
take_in_place(struct lk_http_parser *p)
{
    if (p->span_len != 0) {
        struct lk_str s = lk_str_make(p->span_p, p->span_len);
        p->span_len = 0;
        block_note(p, s.p, s.p + s.len);
        return s;
    }
    return take(p);
}

/* s, if it points into the block at lo (n bytes), to its copy at d, with a
 * NUL after it (the byte after a string in the head is never part of
 * another: ':', SP, CR, OWS, or the block's end). */
static inline void
rebase(struct lk_str *s, const char *lo, size_t n, char *d)
{
    size_t off = (size_t)((uintptr_t)s->p - (uintptr_t)lo);

    if (s->len != 0 && off < n) {
        char *q = d + off;
        q[s->len] = '\0';
        s->p = q;
    }
}

/* The strings the message took from this input (block_note) into the
 * pool, in one copy: the input is the caller's only until lk_http_parse
 * returns.  A non-empty string points into the block only if it was left
 * there, since pool memory never lies inside the input; a field's name
 * and value were left there together or not at all (an empty value is
 * static then). */
static void
keep_block(struct lk_http_parser *p)
{
    struct lk_http_msg *m = p->msg;
    const char *lo = p->blk_lo;
    size_t n = (size_t)(p->blk_hi - lo);
    char *d = lk_pnalloc(m->pool, n + 1);

    memcpy(d, lo, n);
    d[n] = '\0';
    for (size_t i = p->blk_first; i < m->nheaders; i++) { /* headers may be NULL */
        struct lk_http_header *h = &m->headers[i];
        size_t off = (size_t)((uintptr_t)h->name.p - (uintptr_t)lo);
        if (off >= n)
            continue;
        char *q = d + off;
        q[h->name.len] = '\0';
        h->name.p = q;
        if (h->value.len != 0) {
            q = d + (h->value.p - lo);
            q[h->value.len] = '\0';
            h->value.p = q;
        }
    }
    rebase(&m->target, lo, n, d);
    rebase(&m->reason, lo, n, d);
    p->blk_lo = NULL;
}

static int
on_message_begin(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);
    p->head_bytes = 0;
    p->buflen = 0;
    p->span_len = 0;
    p->name_in_input = 0;
    p->conn_tokens = 0;
    return 0;
}

static int
on_data(llhttp_t *ll, const char *at, size_t len)
{
    return grow(P(ll), at, len) == 0 ? 0 : -1;
}

/* The k-th byte (1 to 4) before at, a position in the input being parsed;
 * it may lie in an earlier input. */
static char
before(const struct lk_http_parser *p, const char *at, size_t k)
{
    size_t here = (size_t)(at - p->input_start);
    return k <= here ? at[-(ptrdiff_t)k] : p->hist[4 - (k - here)];
}

/* Whether the head line before at ended in CRLF: llhttp takes a bare LF
 * after the request line and as the empty line, which some parsers behind
 * a proxy do not (RFC 9112 §2.2 lets a recipient choose). */
static int
crlf_before(const struct lk_http_parser *p, const char *at)
{
    return before(p, at, 1) == '\n' && before(p, at, 2) == '\r';
}

/* Whether CRLF CRLF comes before at: how a head or a chunked body ends. */
static int
blank_line_before(const struct lk_http_parser *p, const char *at)
{
    return crlf_before(p, at) && before(p, at, 3) == '\n' && before(p, at, 4) == '\r';
}

static int
on_field(llhttp_t *ll, const char *at, size_t len)
{
    struct lk_http_parser *p = P(ll);

    /* a field's first byte */
    if (p->buflen == 0 && p->span_len == 0 && len != 0 && !crlf_before(p, at)) {
        p->error = "a line of the head ends in a bare LF";
        p->error_at = at;
        return -1;
    }
    p->gap_from = at + len;
    p->lf_in_gap = 0;
    return on_data(ll, at, len);
}

static int
on_value(llhttp_t *ll, const char *at, size_t len)
{
    struct lk_http_parser *p = P(ll);

    /* Obsolete line folding is a smuggling vector (RFC 9112 §5.2).  llhttp
     * skips the line break and reports the folded line as (another piece
     * of) the value: a LF between the field's name or last piece and this
     * piece is a fold, even when the first line's value was empty.  (An
     * empty value comes as an empty piece placed after its line break.) */
    if (len == 0)
        return 0;
    /* The gap is ": " or a line break and little more: a loop, not a call. */
    int lf = p->lf_in_gap;
    for (const char *q = p->gap_from != NULL ? p->gap_from : p->input_start; q < at; q++)
        lf |= *q == '\n';
    if (lf) {
        p->error = "obsolete line folding in a header";
        p->error_at = at;
        return -1;
    }
    p->gap_from = at + len;
    return on_data(ll, at, len);
}

static int
on_url_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);
    p->msg->target = take_in_place(p);
    return 0;
}

static int
on_status_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);
    p->msg->reason = take_in_place(p);
    return 0;
}

static int
on_field_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);
    if (p->span_len != 0) {
        /* left in the input: on_value_complete takes it with the value */
        p->cur_name = lk_str_make(p->span_p, p->span_len);
        p->span_len = 0;
        p->name_in_input = 1;
    } else {
        p->cur_name = take(p);
    }
    if (p->cur_name.len == 0) { /* ": value" (RFC 9110 §5.1: token = 1*tchar) */
        p->error = "empty header field name";
        return -1;
    }
    /* A known name matched whole is all tchar; any other is checked byte
     * by byte.  RFC 9112 §5.1: no whitespace between the field name and
     * the colon (llhttp takes a SP there, as part of the name). */
    p->cur_id = lk_http_hdr_id(p->cur_name);
    if (p->cur_id == LK_HDR_OTHER)
        for (size_t i = 0; i < p->cur_name.len; i++)
            if (!(lk_http_chars[(unsigned char)p->cur_name.p[i]] & LK_CH_TCHAR)) {
                p->error = "invalid character in a header field name";
                return -1;
            }
    return 0;
}

/* The field joins the message: v trimmed, and where it was left in the
 * input (in_place), noted for keep_block with its name. */
static inline int
join_field(struct lk_http_parser *p, struct lk_str v, int in_place)
{
    if (__builtin_expect(p->msg->nheaders >= LK_HTTP_MAX_FIELDS, 0)) {
        p->error = "more than " XSTR(LK_HTTP_MAX_FIELDS) " header fields";
        p->too_many_fields = 1;
        return -1;
    }
    /* Identified once, when its name completed, and indexed as the field
     * joins the message (the message of this value: llhttp may run on
     * into the next message's head, whose fields then join the message
     * the caller starts next); every later question about the field is
     * an index lookup. */
    if (in_place) {
        /* the field, from its name to its value's end */
        block_note(p, p->cur_name.p, v.len != 0 ? v.p + v.len : p->cur_name.p + p->cur_name.len);
        if (v.len == 0)
            v = LK_STRLIT(""); /* NUL-terminated, as a copy would be */
    }
    lk_http_append(p->msg, p->cur_name, v, p->cur_id);
    return 0;
}

/* join_field for a Connection field, whose tokens are counted first: each
 * names a field to remove, capped as the fields are by max_header_bytes
 * (see LK_HTTP_MAX_CONNECTION_TOKENS). */
static __attribute__((noinline)) int
join_connection(struct lk_http_parser *p, struct lk_str v, int in_place)
{
    p->conn_tokens += lk_http_count_tokens(v);
    if (p->conn_tokens > LK_HTTP_MAX_CONNECTION_TOKENS) {
        p->error = "more than " XSTR(LK_HTTP_MAX_CONNECTION_TOKENS) " Connection tokens";
        return -1;
    }
    return join_field(p, v, in_place);
}

/* The value, trimmed, joins the message with its name: v and the name
 * were both left in the input (in_place) or are copies. */
static inline int
add_field(struct lk_http_parser *p, struct lk_str v, int in_place)
{
    /* No CR or LF in v: llhttp ends a value's span at either (without its
     * lenient flags, which lookout never sets, a bare LF there is an
     * error), and a folded line's piece is refused by on_value; the fuzz
     * harnesses hold every parsed value to that. */
    v = lk_str_trim(v);
    /* A trailer field (after a chunked body) never joins the head's
     * fields: the head has gone on already, or goes on later with fields
     * no filter has seen (a Location, an internal address, a second
     * Transfer-Encoding).  Trailers are not forwarded. */
    if (p->head_done)
        return 0;
    if (p->cur_id == LK_HDR_CONNECTION)
        return join_connection(p, v, in_place);
    return join_field(p, v, in_place);
}

/* on_value_complete for a field that did not come whole in this input:
 * its value (and its name, if that is still in the input) copied. */
static __attribute__((noinline)) int
add_field_copied(struct lk_http_parser *p)
{
    struct lk_str v;

    if (p->name_in_input) {
        /* the name in this input, the value joined from pieces (so not a
         * span in the input): one copy into the pool, each NUL-terminated */
        struct lk_str n = p->cur_name, raw = lk_str_make(p->buf, p->buflen);
        char *d = lk_pnalloc(p->msg->pool, n.len + raw.len + 2);
        memcpy(d, n.p, n.len);
        d[n.len] = '\0';
        if (raw.len != 0)
            memcpy(d + n.len + 1, raw.p, raw.len);
        d[n.len + 1 + raw.len] = '\0';
        p->cur_name = lk_str_make(d, n.len);
        v = lk_str_make(d + n.len + 1, raw.len);
        p->span_len = p->buflen = 0;
        p->name_in_input = 0;
    } else {
        v = take(p);
    }
    return add_field(p, v, 0);
}

static int
on_value_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);

    if (!p->name_in_input || p->buflen != 0)
        return add_field_copied(p);
    /* name and value, both whole in this input (most fields): left there,
     * for keep_block */
    struct lk_str v = p->span_len != 0 ? lk_str_make(p->span_p, p->span_len) : LK_STR_NULL;
    p->span_len = 0;
    p->name_in_input = 0;
    return add_field(p, v, 1);
}

/* llhttp_method_name's text with its length, known when compiled: no
 * strlen per request. */
#define METHOD_TEXT(num, name, text) [HTTP_##name] = LK_STRLIT(#text),
static const struct lk_str method_texts[] = {HTTP_ALL_METHOD_MAP(METHOD_TEXT)};
#undef METHOD_TEXT

static struct lk_str
method_text(llhttp_method_t method)
{
    if ((size_t)method < sizeof(method_texts) / sizeof(method_texts[0]) &&
        method_texts[method].p != NULL)
        return method_texts[method];
    return lk_str_c(llhttp_method_name(method));
}

static int
on_headers_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);
    struct lk_http_msg *m = p->msg;

    if (m->is_request)
        m->method = method_text(llhttp_get_method(ll));
    else
        m->status = llhttp_get_status_code(ll);
    m->http_major = llhttp_get_http_major(ll);
    m->http_minor = llhttp_get_http_minor(ll);
    p->chunked = (ll->flags & F_CHUNKED) != 0;
    p->has_cl = (ll->flags & F_CONTENT_LENGTH) != 0;
    p->content_length = ll->content_length;
    if (p->has_cl && p->content_length > LK_HTTP_MAX_LENGTH) {
        p->error = "Content-Length too large";
        return -1;
    }
    p->keep_alive = llhttp_should_keep_alive(ll);
    p->upgrade = ll->upgrade;
    p->head_done = 1;
    p->state = EV_HEAD;
    /* A 1xx, 204 or 304 response has no body, whatever its fields say
     * (RFC 9112 §6.3), and llhttp 8 reads one for them when Content-Length
     * or Transfer-Encoding announces it: the next response's bytes would
     * pass as this one's body, or a 100 with Transfer-Encoding take all
     * that follows.  The head ends the message, as for HEAD. */
    if (!m->is_request && (m->status / 100 == 1 || m->status == 204 || m->status == 304)) {
        /* A 304 may carry them (RFC 9110 §8.6, RFC 9112 §6.1), a 1xx or a
         * 204 never: a body may follow that is no response of its own. */
        p->body_ignored = m->status != 304 && ((ll->flags & (F_CHUNKED | F_TRANSFER_ENCODING)) ||
                                               (p->has_cl && p->content_length != 0));
        return 1;
    }
    if (p->no_body)
        return 1; /* on_message_complete follows at once */
    /* A request without a body (no Transfer-Encoding, Content-Length
     * absent or 0, no upgrade) ends here: llhttp goes on to
     * on_message_complete, which pauses, and the head and the end come
     * out of one run (lk_http_parse reports HEAD, then DONE without
     * running llhttp again). */
    if (m->is_request && !(ll->flags & (F_CHUNKED | F_TRANSFER_ENCODING)) &&
        ll->content_length == 0 && !ll->upgrade)
        return 0;
    return HPE_PAUSED;
}

/* llhttp takes any chunk size that fits 64 bits and then waits for that
 * many bytes; one past what any peer can mean is malformed (nginx refuses
 * sizes over its off_t too), and the exchange ends rather than hang. */
static int
on_chunk_header(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);

    if (ll->content_length > LK_HTTP_MAX_LENGTH) {
        p->error = "chunk size too large";
        return -1;
    }
    p->chunk_left = ll->content_length;
    p->chunk_started = 0;
    return 0;
}

/*
 * llhttp 8 skips the two bytes after a chunk's data without looking at
 * them, so "5\r\nhelloXX0\r\n\r\n" passes as one chunk: a framing that
 * another parser reads differently.  They are checked here instead: n of
 * them are at p->crlf_from, in the input being parsed.
 */
static int
check_crlf(struct lk_http_parser *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char want = p->crlf_need == 2 ? '\r' : '\n';
        if (p->crlf_from[i] != want) {
            p->error = "chunk data not followed by CRLF";
            return -1;
        }
        p->crlf_need--;
    }
    p->crlf_from += n;
    return 0;
}

/* A chunk extension is token [= value] (RFC 9112 §7.1.1); llhttp 8 takes
 * ";=value", with no name, and drops it. */
static int
on_ext_name(llhttp_t *ll, const char *at, size_t len)
{
    P(ll)->ext_named |= len != 0;
    return 0;
}

static int
on_ext_name_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);

    if (!p->ext_named) {
        p->error = "chunk extension without a name";
        return -1;
    }
    p->ext_named = 0;
    return 0;
}

static int
on_chunk_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);

    /* both bytes were consumed just now, in this input */
    return p->crlf_need != 0 ? check_crlf(p, p->crlf_need) : 0;
}

static int
on_body(llhttp_t *ll, const char *at, size_t len)
{
    struct lk_http_parser *p = P(ll);
    if (p->chunked && len != 0) {
        /* the chunk-size line ends in CRLF: llhttp takes "5;a\r" plus any
         * byte as its end */
        if (!p->chunk_started && !crlf_before(p, at)) {
            p->error = "chunk size line not ended by CRLF";
            return -1;
        }
        p->chunk_started = 1;
        p->chunk_left -= len;
        if (p->chunk_left == 0) {
            p->crlf_need = 2;
            p->crlf_from = at + len;
        }
    }
    /* llhttp may report an empty piece when stepped without input */
    if (p->on_body != NULL && len != 0)
        p->on_body(p->body_arg, at, len);
    return 0;
}

static int
on_message_complete(llhttp_t *ll)
{
    struct lk_http_parser *p = P(ll);
    p->msg_done = 1;
    /* Head not yet reported: lk_http_parse reports HEAD, then DONE.  A
     * bodyless message stops here, before the next pipelined request or
     * the final response after an interim one, whose fields would
     * otherwise run on into this message.  keep_alive is what
     * on_headers_complete found just now, from the same flags. */
    if (p->state != EV_HEAD) {
        p->keep_alive = llhttp_should_keep_alive(ll);
        p->state = EV_DONE;
    }
    /* An upgrade must reach HPE_PAUSED_UPGRADE, which a pause here would hide. */
    return ll->upgrade ? 0 : HPE_PAUSED;
}

/* One table for every parser: llhttp only reads it. */
static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_data,
    .on_status = on_data,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_url_complete = on_url_complete,
    .on_status_complete = on_status_complete,
    .on_header_field_complete = on_field_complete,
    .on_header_value_complete = on_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_chunk_complete = on_chunk_complete,
    .on_chunk_extension_name = on_ext_name,
    .on_chunk_extension_name_complete = on_ext_name_complete,
    .on_message_complete = on_message_complete,
};

void
lk_http_parser_init(struct lk_http_parser *p, int is_request, size_t max_head)
{
    memset(p, 0, sizeof(*p));
    llhttp_init(&p->ll, is_request ? HTTP_REQUEST : HTTP_RESPONSE, &settings);
    p->max_head = max_head;
}

void
lk_http_parser_next(struct lk_http_parser *p, struct lk_http_msg *msg)
{
    p->msg = msg;
    p->head_done = p->msg_done = 0;
    p->chunked = p->has_cl = p->upgrade = 0;
    p->chunk_left = 0;
    p->crlf_need = 0;
    p->no_body = 0;
    p->body_ignored = 0;
    p->content_length = 0;
    p->state = EV_NONE;
    p->error = NULL;
    p->head_bytes = 0;
    p->raw_head = 0;
    p->too_many_fields = 0;
    p->buflen = 0;
    p->span_len = 0;
    p->name_in_input = 0;
    p->conn_tokens = 0;
}

enum lk_http_event
lk_http_parse(struct lk_http_parser *p, const char *data, size_t len, size_t *consumed)
{
    *consumed = 0;
    if (p->error != NULL)
        return LK_HTTP_ERROR;
    if (p->state == EV_HEAD && p->msg_done) {
        /* the head was reported; the message had no body and is done too */
        p->state = EV_DONE;
        return p->ll.upgrade ? LK_HTTP_UPGRADE : LK_HTTP_DONE;
    }
    p->state = EV_NONE;
    if (len == 0 && !(p->head_done && !p->msg_done))
        return LK_HTTP_NEED_MORE;
    if (data == NULL)
        data = ""; /* no input: llhttp still steps past a completed head */

    int in_head = !p->head_done;
    p->input_start = data;
    p->blk_lo = NULL;
    p->blk_first = p->msg->nheaders;
    p->gap_from = NULL;
    p->error_at = NULL;
    if (p->crlf_need != 0)
        p->crlf_from = data; /* the rest of a chunk's CRLF starts this input */
    llhttp_errno_t err = llhttp_execute(&p->ll, data, len);
    /* the input is the caller's only until we return */
    if (p->blk_lo != NULL)
        keep_block(p);
    span_keep(p);
    if (p->name_in_input) {
        p->cur_name = lk_pstr(p->msg->pool, p->cur_name.p, p->cur_name.len);
        p->name_in_input = 0;
    }
    if (p->crlf_need != 0 && (err == HPE_OK || err == HPE_PAUSED)) {
        /* the chunk's CRLF straddles inputs: check what was consumed of it */
        const char *end = err == HPE_OK ? data + len : llhttp_get_error_pos(&p->ll);
        size_t n = (size_t)(end - p->crlf_from);
        if (check_crlf(p, n < p->crlf_need ? n : p->crlf_need) != 0)
            return LK_HTTP_ERROR;
    }
    size_t used = err == HPE_OK ? len : (size_t)(llhttp_get_error_pos(&p->ll) - data);
    /* The cap counts every byte of the head, separators included, and
     * comes before the checks at the head's end: a head over it was over it
     * before its last line, however it was split. */
    if (in_head && (err == HPE_OK || err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE)) {
        p->raw_head += used;
        if (p->raw_head > p->max_head) {
            p->error = "head too large";
            return LK_HTTP_TOO_LARGE;
        }
    }
    if (in_head && err == HPE_PAUSED && p->state == EV_HEAD &&
        !blank_line_before(p, data + used)) {
        p->error = "the head ends in a bare LF";
        return LK_HTTP_ERROR;
    }
    if (err == HPE_PAUSED && p->state == EV_DONE && p->chunked &&
        !blank_line_before(p, data + used)) {
        p->error = "the chunked body ends in a bare LF";
        return LK_HTTP_ERROR;
    }
    /* A line break in the gap after the last name or value piece counts
     * for a value piece in the next input.  Only when parsing goes on
     * there: after a pause (head or message done, upgrade) the next value
     * piece follows a field name of its own, which clears the flag. */
    const char *gap = p->gap_from != NULL ? p->gap_from : data;
    if (err == HPE_OK && gap < data + used &&
        memchr(gap, '\n', (size_t)(data + used - gap)) != NULL)
        p->lf_in_gap = 1;
    /* keep the last bytes consumed for the next input's look-behind */
    if (used >= 4) {
        memcpy(p->hist, data + used - 4, 4);
    } else if (used != 0) {
        memmove(p->hist, p->hist + used, 4 - used);
        memcpy(p->hist + 4 - used, data, used);
    }
    switch (err) {
    case HPE_OK:
        *consumed = len;
        /* the input used up mid-message (one that ends with its head pauses) */
        return p->state == EV_HEAD ? LK_HTTP_HEAD : LK_HTTP_NEED_MORE;
    case HPE_PAUSED:
        *consumed = (size_t)(llhttp_get_error_pos(&p->ll) - data);
        llhttp_resume(&p->ll);
        return p->state == EV_HEAD ? LK_HTTP_HEAD : LK_HTTP_DONE;
    case HPE_PAUSED_UPGRADE:
        *consumed = (size_t)(llhttp_get_error_pos(&p->ll) - data);
        if (p->state == EV_HEAD)
            return LK_HTTP_HEAD; /* the next call reports the upgrade */
        p->state = EV_DONE;
        return LK_HTTP_UPGRADE;
    default:
        /* The cap counts the head's bytes before a malformed one too: where
         * the input happened to be split must not turn a 431 into a 400.  A
         * span callback runs when llhttp hands over the span (at its end, or
         * at the end of the input), so it says where the bad bytes began. */
        if (in_head && p->raw_head + (size_t)((p->error_at != NULL ? p->error_at
                                                                  : llhttp_get_error_pos(&p->ll)) -
                                              data) > p->max_head) {
            p->error = "head too large";
            return LK_HTTP_TOO_LARGE;
        }
        if (p->error == NULL)
            p->error = llhttp_get_error_reason(&p->ll);
        if (p->error == NULL)
            p->error = llhttp_errno_name(err);
        return p->head_bytes > p->max_head || p->too_many_fields ? LK_HTTP_TOO_LARGE
                                                                 : LK_HTTP_ERROR;
    }
}

enum lk_http_event
lk_http_parse_eof(struct lk_http_parser *p)
{
    if (p->state == EV_HEAD && p->msg_done) {
        p->state = EV_DONE;
        return LK_HTTP_DONE;
    }
    llhttp_errno_t err = llhttp_finish(&p->ll);
    if (err == HPE_OK && p->msg_done)
        return LK_HTTP_DONE;
    if (err == HPE_PAUSED) {
        llhttp_resume(&p->ll);
        return LK_HTTP_DONE;
    }
    if (p->error == NULL)
        p->error = err == HPE_OK ? "connection closed before the message ended"
                                 : llhttp_get_error_reason(&p->ll);
    return LK_HTTP_ERROR;
}

int
lk_http_parser_can_step(const struct lk_http_parser *p)
{
    return (p->head_done && !p->msg_done) || (p->state == EV_HEAD && p->msg_done);
}

int
lk_http_parser_end_known(const struct lk_http_parser *p)
{
    return p->state == EV_HEAD && p->msg_done;
}

void
lk_http_parser_free(struct lk_http_parser *p)
{
    free(p->buf);
    p->buf = NULL;
    p->bufcap = p->buflen = 0;
}

/* Resume-after-upgrade for a request whose upgrade was refused upstream. */
