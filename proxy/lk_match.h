/*
 * A multi-pattern matcher over bytes: an Aho-Corasick automaton (ASCII
 * case-insensitive) for finding any of a set of "host:port" strings in a
 * stream.  It is built once, is immutable afterwards and may be shared
 * read-only by every thread; the scan position lives in a small caller-owned
 * struct lk_match_state, so a stream can arrive in any number of pieces and
 * a match that straddles two of them is still found.  Scans never allocate.
 *
 * Address boundaries.  A match counts only when the byte before it is not a
 * host character [A-Za-z0-9._-] (or the match starts the stream), and the
 * byte after it is not a digit (or the stream ends there).  So
 * "10.0.0.1:80" is not found inside "110.0.0.1:80" nor "10.0.0.1:8080".
 * A raw pattern (LK_MATCH_RAW) has no boundary rule: any occurrence counts.
 * Deciding the byte after means a match is reported only once the next
 * byte has been seen, or at lk_match_finish().
 *
 * Memory is bounded by the patterns: at most 1 + (sum of pattern lengths)
 * states, each with one transition per byte class (the distinct
 * case-folded bytes of the patterns, plus one for all other bytes).
 */
#ifndef LK_MATCH_H
#define LK_MATCH_H

#include <stddef.h>
#include <stdint.h>

/* The longest pattern accepted; longer ones fail lk_match_new.  A
 * bracketed IPv6 literal or a 253-byte DNS name plus scheme and port fit. */
#define LK_MATCH_MAX_LEN 480

struct lk_match;

/*
 * The scan position in one stream.  Initialise with lk_match_state_init;
 * it holds no pointers, so it can live anywhere (an exchange pool) and be
 * copied.  The history is one bit per recent byte (is it a host
 * character), for the boundary rule of a match that began in an earlier
 * piece: kept, when a piece ends, for the bytes such a match may still
 * need (lk_match_pending's and the one before them).
 */
struct lk_match_state {
    uint64_t pos;     /* bytes consumed so far */
    uint32_t node;    /* automaton state after those bytes */
    uint32_t emit;    /* the next state whose output waits at pos for the byte
                         after it (internal; none: UINT32_MAX) */
    uint64_t hist[8]; /* 512 bits: whether the byte at offset k is a host
                         character, at bit k % 512 (for the bytes above) */
};

/* A match: pattern `id` occupies stream bytes [end - len, end). */
struct lk_match_hit {
    size_t id;
    uint64_t end;
    size_t len;
};

/*
 * Builds the automaton for patterns[0..n) (pattern i has id i; each is
 * lens[i] bytes, 1 to LK_MATCH_MAX_LEN).  Case is folded for ASCII
 * letters.  A pattern that repeats an earlier one (ignoring case) is never
 * reported: the earlier id is.  Returns the automaton (free with
 * lk_match_free), or NULL with a message in err.
 */
struct lk_match *lk_match_new(const char *const *patterns, const size_t *lens, size_t n, char *err,
                              size_t errlen);
/* A pattern that is bytes, not an address in text: the boundary rule does
 * not apply to it (the leak guard's Kafka host strings, whose length
 * prefix before them and port after them are bytes of any value; the
 * caller checks those itself). */
#define LK_MATCH_RAW 1u
/* lk_match_new with a flags word per pattern (LK_MATCH_RAW; flags NULL:
 * all 0).  A raw pattern repeating a text one, or the reverse, is a
 * pattern of its own. */
struct lk_match *lk_match_new_flags(const char *const *patterns, const size_t *lens,
                                    const unsigned *flags, size_t n, char *err, size_t errlen);
void lk_match_free(struct lk_match *m);

/* The number of patterns, and the length of the longest. */
size_t lk_match_count(const struct lk_match *m);
size_t lk_match_max_len(const struct lk_match *m);
/* The number of automaton states and the bytes the automaton holds. */
size_t lk_match_states(const struct lk_match *m);
size_t lk_match_memory(const struct lk_match *m);

void lk_match_state_init(struct lk_match_state *st);

/*
 * Scans data[*off .. len), the next bytes of the stream.  Returns 1 at the
 * next match, with *hit filled in and *off at the first byte not yet
 * consumed (call again with the same data to go on); returns 0 once every
 * byte is consumed (*off == len).  Matches come in order of their end, and
 * for one end the longest first.  A match is reported when the byte after
 * it arrives, so one ending at the last byte of data comes with the next
 * piece or from lk_match_finish.
 */
int lk_match_scan(const struct lk_match *m, struct lk_match_state *st, const void *data, size_t len,
                  size_t *off, struct lk_match_hit *hit);

/* lk_match_scan stepping the automaton on every byte, without jumping
 * over the bytes that cannot start a pattern: the reference the tests and
 * the fuzzer hold lk_match_scan to (same matches, same state). */
int lk_match_scan_plain(const struct lk_match *m, struct lk_match_state *st, const void *data,
                        size_t len, size_t *off, struct lk_match_hit *hit);

/* lk_match_scan and lk_match_finish with every pattern taken as raw: no
 * boundary rule, for a caller that decides the bytes around each match
 * itself (the leak guard's reading of binary strings, whose length before
 * them and the field after them are bytes of any value).  A stream is read
 * with one pair or the other throughout. */
int lk_match_scan_raw(const struct lk_match *m, struct lk_match_state *st, const void *data,
                      size_t len, size_t *off, struct lk_match_hit *hit);
int lk_match_finish_raw(const struct lk_match *m, struct lk_match_state *st,
                        struct lk_match_hit *hit);

/* Whether data[0..len), a whole stream, holds no match: then
 * lk_match_scan and lk_match_finish would find nothing in it.  The cheap
 * answer for a header value, a frame or a whole body that is clean, as
 * most are: shorter than every pattern, or without any of the patterns'
 * last three bytes (a port's end), or without any of their host's ends
 * with the ':' and the port's start (16 places at a time), or else with no
 * byte where a pattern may start, as lk_match_scan jumps. */
int lk_match_none(const struct lk_match *m, const void *data, size_t len);

/* Ends the stream: returns 1 for each match that ends with it (call until
 * it returns 0).  The state is then spent; lk_match_state_init reuses it. */
int lk_match_finish(const struct lk_match *m, struct lk_match_state *st, struct lk_match_hit *hit);

/*
 * How many of the last bytes consumed may still turn out to be part of a
 * match (the depth of the automaton state, which includes a match waiting
 * for its next byte).  Bytes before stream offset st->pos - lk_match_pending()
 * can be released: no match reported later starts before it.  At most
 * lk_match_max_len().
 */
size_t lk_match_pending(const struct lk_match *m, const struct lk_match_state *st);

#endif
