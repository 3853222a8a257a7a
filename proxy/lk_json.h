/*
 * A strict JSON scanner (RFC 8259) that builds nothing: one pass over the
 * text says whether it is valid, exactly as jansson's json_loadb(text, len,
 * 0) would (an object or array at the top, jansson's nesting limit and
 * number ranges), and reports the byte spans of the top-level object's
 * members, so that a filter can splice a body instead of parsing and
 * re-serializing it.  Pure over bytes, like the other codecs.
 */
#ifndef LK_JSON_H
#define LK_JSON_H

#include <stddef.h>

/* jansson's JSON_PARSER_MAX_DEPTH: a value nested deeper than this (the
 * top-level value is at depth 1, scalars count) is refused. */
#define LK_JSON_MAX_DEPTH 2048

enum lk_json_verdict {
    LK_JSON_VALID = 0,
    LK_JSON_INVALID = -1, /* json_loadb(text, len, 0) refuses it too */
    /* Not decided: the text holds a NUL byte, which jansson reads its own
     * way (one right after a number or a literal is skipped), or memory
     * ran out.  Ask jansson. */
    LK_JSON_UNSURE = -2,
};

/* One member of the top-level object; offsets are into the scanned text. */
struct lk_json_member {
    size_t key;             /* the key's opening '"' */
    size_t key_len;         /* the bytes between its quotes, escapes as written */
    size_t value;           /* the value's first byte ('"' for a string) */
    size_t end;             /* one past the value's last byte */
    unsigned key_esc : 1;   /* the key holds a backslash escape */
    unsigned value_str : 1; /* the value is a string */
    unsigned value_esc : 1; /* ... that holds a backslash escape */
};

/* Called for each member of the top-level object, in order, as soon as its
 * value ends: before the rest of the text is checked, so a caller acts on
 * what it recorded only once lk_json_scan returned LK_JSON_VALID. */
typedef void (*lk_json_member_cb)(const struct lk_json_member *m, void *arg);

/*
 * Scans text[0..len) (not NUL-terminated; it is never read past len).
 * When the top level is an object, cb (if not NULL) gets each of its
 * members.  Returns an enum lk_json_verdict.
 */
int lk_json_scan(const char *text, size_t len, lk_json_member_cb cb, void *arg);

/*
 * Decodes the escapes of a string's body raw[0..len) (the bytes between
 * its quotes, of text lk_json_scan found valid) into out, which has room
 * for len bytes: decoding never lengthens.  Returns the decoded length.
 */
size_t lk_json_unescape(const char *raw, size_t len, char *out);

#endif
