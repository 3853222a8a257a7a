/*
 * HTTP/1.x messages as filters see them: a request or status line plus an
 * ordered list of header fields, all in exchange-pool memory.  Parsing is
 * llhttp's (lk_http_parse.h); this file holds the pure parts: header
 * editing, hop-by-hop rules and serialization.  No sockets here.
 */
#ifndef LK_HTTP_MSG_H
#define LK_HTTP_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <event2/buffer.h>

#include "lk_pool.h"
#include "lk_str.h"

/*
 * The fields lookout asks about, known by an id given once, when the
 * parser completes the name (nginx's headers_in) or when a field is added:
 * finding, counting or removing them needs no name compare.  Any other
 * name is LK_HDR_OTHER.  lk_hdr_names holds each one's usual spelling.
 */
enum lk_hdr {
    LK_HDR_OTHER = 0,
    LK_HDR_HOST,
    LK_HDR_CONTENT_LENGTH,
    LK_HDR_TRANSFER_ENCODING,
    LK_HDR_CONNECTION,
    LK_HDR_KEEP_ALIVE,
    LK_HDR_PROXY_CONNECTION,
    LK_HDR_TE,
    LK_HDR_TRAILER,
    LK_HDR_UPGRADE,
    LK_HDR_PROXY_AUTHENTICATE,
    LK_HDR_PROXY_AUTHORIZATION,
    LK_HDR_EXPECT,
    LK_HDR_X_FORWARDED_FOR,
    LK_HDR_X_FORWARDED_PROTO,
    LK_HDR_X_FORWARDED_HOST,
    LK_HDR_X_PULSAR_LISTENER_NAME,
    LK_HDR_LOCATION,
    LK_HDR_CONTENT_LOCATION,
    LK_HDR_CONTENT_TYPE,
    LK_HDR_CONTENT_ENCODING,
    LK_HDR_ACCEPT_ENCODING,
    LK_HDR_ETAG,
    LK_HDR_X_FORWARDED_CLIENT_CERT,
    LK_HDR_NKNOWN
};
extern const struct lk_str lk_hdr_names[LK_HDR_NKNOWN];

/* Character classes, a table because they are asked of every byte of every
 * field name and Host: RFC 9110 §5.6.2 tchar, and RFC 3986 reg-name
 * (unreserved, pct-encoded, sub-delims). */
#define LK_CH_TCHAR 1
#define LK_CH_REG_NAME 2
extern const unsigned char lk_http_chars[256];

/* The id of a field name, ASCII case-insensitively; LK_HDR_OTHER if it is
 * none of the known ones. */
enum lk_hdr lk_http_hdr_id(struct lk_str name);

struct lk_http_header {
    struct lk_str name, value;
    enum lk_hdr id; /* of name: kept by the functions below */
};

/*
 * A message's fields are edited through the functions below, which keep
 * the index right: for each known id present, its bit in present, the
 * position of its first field and how many there are.  Filters may change
 * a field's value in place, never its name, and add or remove fields only
 * through these functions.
 */
struct lk_http_msg {
    struct lk_pool *pool;
    int is_request;
    struct lk_str method, target; /* request line */
    int status;                   /* status line */
    struct lk_str reason;
    int http_major, http_minor;
    struct lk_http_header *headers;
    size_t nheaders, cap;
    uint32_t present;              /* 1 << id for each known id present */
    uint32_t first[LK_HDR_NKNOWN]; /* valid where present */
    uint32_t count[LK_HDR_NKNOWN]; /* valid where present */
};

void lk_http_msg_init(struct lk_http_msg *m, struct lk_pool *pool, int is_request);
/* The value of the first field named name, or NULL. */
struct lk_str *lk_http_find(struct lk_http_msg *m, struct lk_str name);
/* Appends a field; name and value are copied into the pool. */
void lk_http_add(struct lk_http_msg *m, struct lk_str name, struct lk_str value);
/* The parser's lk_http_add: name and value are pool memory already (not
 * copied), and id is lk_http_hdr_id(name). */
void lk_http_append(struct lk_http_msg *m, struct lk_str name, struct lk_str value, enum lk_hdr id);
/* Replaces every field named name by one with value (appends if absent). */
void lk_http_set(struct lk_http_msg *m, struct lk_str name, struct lk_str value);
/* How many fields are named name. */
size_t lk_http_count(const struct lk_http_msg *m, struct lk_str name);
/* Removes every field named name; returns how many went. */
size_t lk_http_del(struct lk_http_msg *m, struct lk_str name);
/* Whether a comma-separated field (Connection, Upgrade, TE) holds token. */
int lk_http_has_token(struct lk_http_msg *m, struct lk_str name, struct lk_str token);

/* The same for a known id (not LK_HDR_OTHER), in constant time but for
 * the removals; lk_http_add_id names the field as lk_hdr_names does,
 * without copying the name. */
struct lk_str *lk_http_find_id(struct lk_http_msg *m, enum lk_hdr id);
size_t lk_http_count_id(const struct lk_http_msg *m, enum lk_hdr id);
void lk_http_add_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value);
void lk_http_set_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value);
/* lk_http_set_id without the copy: value must live as long as the message
 * (static text, the message's pool, the connection's). */
void lk_http_put_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value);
size_t lk_http_del_id(struct lk_http_msg *m, enum lk_hdr id);
int lk_http_has_token_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str token);
/* How many comma-separated, non-empty tokens the fields with id hold. */
size_t lk_http_count_tokens_id(const struct lk_http_msg *m, enum lk_hdr id);
/* How many comma-separated, non-empty tokens one value holds. */
size_t lk_http_count_tokens(struct lk_str s);
/* Whether every field's id and the index agree with the names: for the
 * unit tests and fuzz harnesses, after any edit. */
int lk_http_index_ok(const struct lk_http_msg *m);
/* Whether every field is as the parser promises (lk_http_parse.c relies
 * on llhttp for part of it): a name of tchar only, a value trimmed of SP
 * and HTAB with no CR or LF in it.  For the unit tests and fuzz harnesses. */
int lk_http_fields_ok(const struct lk_http_msg *m);

/*
 * The most tokens the Connection fields of one head may hold, all fields
 * together; a head with more is malformed (a request gets 400, a broker's
 * response 502).  Each token nominates a field for removal; real clients
 * send one to three (close, keep-alive, upgrade, TE), and 64 leaves room
 * for any proxy chain while bounding what one head can ask of the strip.
 */
#define LK_HTTP_MAX_CONNECTION_TOKENS 64

/*
 * The most fields one parsed head may hold (trailers, which never join it,
 * aside); a request with more gets 431, a broker's response 502.  Each
 * field costs its entry (40 bytes) over its bytes, so a head of tiny ones
 * ("a:" 8,000 times in 32 KB) would cost ten times its size; real heads
 * hold 5 to 30.  HAProxy's tune.http.maxhdr is 101, Apache's
 * LimitRequestFields 100.
 */
#define LK_HTTP_MAX_FIELDS 100

/*
 * Removes the hop-by-hop fields (RFC 9110 §7.6.1): Connection and every
 * field it names, Keep-Alive, Proxy-Connection, TE, Trailer,
 * Transfer-Encoding, Upgrade, Proxy-Authenticate, Proxy-Authorization.
 * Content-Length is end-to-end and stays, and so does Host: Connection
 * naming either (or Transfer-Encoding) is ignored, since framing and
 * routing are lookout's to decide, never the sender's.  One pass over the
 * fields, whatever the number of tokens: linear in the head's size.
 */
void lk_http_strip_hop_by_hop(struct lk_http_msg *m);

/* Whether h is a valid Host value (RFC 9110 §7.2, RFC 3986 §3.2.2):
 * reg-name, IPv4 or [IP-literal], then an optional ":port" of at most 5
 * digits up to 65535.  No userinfo, whitespace or control characters.  The
 * empty value is valid (RFC 9112 §3.2). */
int lk_http_host_valid(struct lk_str h);

/*
 * Checks a parsed request head against what llhttp leaves to its caller
 * (RFC 9112): the version is HTTP/1.0 or 1.1 (else 505); HTTP/1.1 has
 * exactly one Host and 1.0 at most one, each valid (else 400); HTTP/1.0
 * carries no Transfer-Encoding (400, §6.1) and 1.1 none but a single
 * "chunked" (501); the target is origin-form, absolute-form (http or
 * https, without userinfo or fragment) or "*" for OPTIONS (else 400).
 * An absolute-form target is turned into origin-form in place and its
 * authority becomes the Host field (§3.2.2: the target's authority is the
 * host, whatever Host said); *absolute tells which form it was.
 * Returns 0, or the status to answer with *reason set to a static text.
 */
int lk_http_check_request(struct lk_http_msg *m, int *absolute, const char **reason);
/*
 * Whether m's transfer coding is one lookout can carry: none, or chunked
 * alone (one Transfer-Encoding field, one token).  0 if so, -1 for any
 * other coding (gzip, "gzip, chunked", chunked twice...): a proxy may not
 * remove a coding it does not decode (RFC 9112 §6.1), and Transfer-Encoding
 * is hop-by-hop, so its body cannot be passed on as it came.
 */
int lk_http_te_only_chunked(const struct lk_http_msg *m);

/* Writes the head ("METHOD target HTTP/1.1" or status line, fields, blank
 * line) to out, in one piece. */
void lk_http_write_head(const struct lk_http_msg *m, struct evbuffer *out);
/* The same in front of what buf holds (a buffer of our own, whose whole
 * content then goes on in one addition). */
void lk_http_prepend_head(const struct lk_http_msg *m, struct evbuffer *buf);

/* Writes v in decimal (or lower-case hex) to buf, which has room for 20
 * bytes; returns the length.  No locale, no printf. */
size_t lk_fmt_u64(char *buf, uint64_t v, int hex);

const char *lk_http_reason(int status);

/* The media type of Content-Type, without parameters, trimmed; an empty
 * string when the field is absent. */
struct lk_str lk_http_media_type(struct lk_http_msg *m);

/* What Content-Encoding says the body is: no field, an empty one or
 * identity; gzip (or x-gzip, RFC 9110 §8.4.1.3); deflate (zlib); or
 * anything else, stacked codings included. */
enum lk_coding { LK_CODING_IDENTITY = 0, LK_CODING_GZIP, LK_CODING_DEFLATE, LK_CODING_OTHER };
enum lk_coding lk_http_content_coding(const struct lk_http_msg *m);

#endif
