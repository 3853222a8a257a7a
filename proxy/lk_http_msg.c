/*
 * HTTP/1.x messages: the fields and their index, header editing, hop-by-hop
 * rules, request checks and serialization.  The parser that fills a message
 * from bytes is lk_http_parse.c.  Pure over bytes: nothing here touches a
 * socket.
 */
#include <stdlib.h>
#include <string.h>

#include "lk_http_msg.h"
#include "lk_urlparts.h"

/* Character classes ------------------------------------------------------- */

#define T LK_CH_TCHAR
#define R LK_CH_REG_NAME
#define TR (LK_CH_TCHAR | LK_CH_REG_NAME)
const unsigned char lk_http_chars[256] = {
    ['!'] = TR, ['#'] = T,  ['$'] = TR, ['%'] = TR, ['&'] = TR, ['\''] = TR, ['('] = R, [')'] = R,
    ['*'] = TR, ['+'] = TR, [','] = R,  ['-'] = TR, ['.'] = TR, [';'] = R,    ['='] = R, ['^'] = T,
    ['_'] = TR, ['`'] = T,  ['|'] = T,  ['~'] = TR,
    ['0'] = TR, ['1'] = TR, ['2'] = TR, ['3'] = TR, ['4'] = TR, ['5'] = TR, ['6'] = TR, ['7'] = TR,
    ['8'] = TR, ['9'] = TR,
    ['A'] = TR, ['B'] = TR, ['C'] = TR, ['D'] = TR, ['E'] = TR, ['F'] = TR, ['G'] = TR, ['H'] = TR,
    ['I'] = TR, ['J'] = TR, ['K'] = TR, ['L'] = TR, ['M'] = TR, ['N'] = TR, ['O'] = TR, ['P'] = TR,
    ['Q'] = TR, ['R'] = TR, ['S'] = TR, ['T'] = TR, ['U'] = TR, ['V'] = TR, ['W'] = TR, ['X'] = TR,
    ['Y'] = TR, ['Z'] = TR,
    ['a'] = TR, ['b'] = TR, ['c'] = TR, ['d'] = TR, ['e'] = TR, ['f'] = TR, ['g'] = TR, ['h'] = TR,
    ['i'] = TR, ['j'] = TR, ['k'] = TR, ['l'] = TR, ['m'] = TR, ['n'] = TR, ['o'] = TR, ['p'] = TR,
    ['q'] = TR, ['r'] = TR, ['s'] = TR, ['t'] = TR, ['u'] = TR, ['v'] = TR, ['w'] = TR, ['x'] = TR,
    ['y'] = TR, ['z'] = TR,
};
#undef T
#undef R
#undef TR

/* Known fields ------------------------------------------------------------ */

const struct lk_str lk_hdr_names[LK_HDR_NKNOWN] = {
    [LK_HDR_HOST] = LK_STRLIT("Host"),
    [LK_HDR_CONTENT_LENGTH] = LK_STRLIT("Content-Length"),
    [LK_HDR_TRANSFER_ENCODING] = LK_STRLIT("Transfer-Encoding"),
    [LK_HDR_CONNECTION] = LK_STRLIT("Connection"),
    [LK_HDR_KEEP_ALIVE] = LK_STRLIT("Keep-Alive"),
    [LK_HDR_PROXY_CONNECTION] = LK_STRLIT("Proxy-Connection"),
    [LK_HDR_TE] = LK_STRLIT("TE"),
    [LK_HDR_TRAILER] = LK_STRLIT("Trailer"),
    [LK_HDR_UPGRADE] = LK_STRLIT("Upgrade"),
    [LK_HDR_PROXY_AUTHENTICATE] = LK_STRLIT("Proxy-Authenticate"),
    [LK_HDR_PROXY_AUTHORIZATION] = LK_STRLIT("Proxy-Authorization"),
    [LK_HDR_EXPECT] = LK_STRLIT("Expect"),
    [LK_HDR_X_FORWARDED_FOR] = LK_STRLIT("X-Forwarded-For"),
    [LK_HDR_X_FORWARDED_PROTO] = LK_STRLIT("X-Forwarded-Proto"),
    [LK_HDR_X_FORWARDED_HOST] = LK_STRLIT("X-Forwarded-Host"),
    [LK_HDR_X_PULSAR_LISTENER_NAME] = LK_STRLIT("X-Pulsar-ListenerName"),
    [LK_HDR_LOCATION] = LK_STRLIT("Location"),
    [LK_HDR_CONTENT_LOCATION] = LK_STRLIT("Content-Location"),
    [LK_HDR_CONTENT_TYPE] = LK_STRLIT("Content-Type"),
    [LK_HDR_CONTENT_ENCODING] = LK_STRLIT("Content-Encoding"),
    [LK_HDR_ACCEPT_ENCODING] = LK_STRLIT("Accept-Encoding"),
    [LK_HDR_ETAG] = LK_STRLIT("ETag"),
    [LK_HDR_X_FORWARDED_CLIENT_CERT] = LK_STRLIT("X-Forwarded-Client-Cert"),
};

enum lk_hdr
lk_http_hdr_id(struct lk_str name)
{
    enum lk_hdr id = LK_HDR_OTHER;
    const char *x = name.p;

    /* The length and the first letter (in lower case) leave at most one
     * candidate, which the whole name must then match. */
    switch (name.len) {
    case 2: id = LK_HDR_TE; break;
    case 4: id = (x[0] | 0x20) == 'h' ? LK_HDR_HOST : LK_HDR_ETAG; break;
    case 6: id = LK_HDR_EXPECT; break;
    case 7: id = (x[0] | 0x20) == 't' ? LK_HDR_TRAILER : LK_HDR_UPGRADE; break;
    case 8: id = LK_HDR_LOCATION; break;
    case 10: id = (x[0] | 0x20) == 'c' ? LK_HDR_CONNECTION : LK_HDR_KEEP_ALIVE; break;
    case 12: id = LK_HDR_CONTENT_TYPE; break;
    case 14: id = LK_HDR_CONTENT_LENGTH; break;
    case 15: id = (x[0] | 0x20) == 'a' ? LK_HDR_ACCEPT_ENCODING : LK_HDR_X_FORWARDED_FOR; break;
    case 16:
        switch (x[0] | 0x20) {
        case 'p': id = LK_HDR_PROXY_CONNECTION; break;
        case 'x': id = LK_HDR_X_FORWARDED_HOST; break;
        default: /* Content-Encoding, Content-Location */
            id = (x[8] | 0x20) == 'e' ? LK_HDR_CONTENT_ENCODING : LK_HDR_CONTENT_LOCATION;
        }
        break;
    case 17: id = (x[0] | 0x20) == 't' ? LK_HDR_TRANSFER_ENCODING : LK_HDR_X_FORWARDED_PROTO; break;
    case 18: id = LK_HDR_PROXY_AUTHENTICATE; break;
    case 19: id = LK_HDR_PROXY_AUTHORIZATION; break;
    case 21: id = LK_HDR_X_PULSAR_LISTENER_NAME; break;
    case 23: id = LK_HDR_X_FORWARDED_CLIENT_CERT; break;
    default: return LK_HDR_OTHER;
    }
    return lk_fold_eq(x, lk_hdr_names[id].p, name.len) ? id : LK_HDR_OTHER;
}

/* Header editing ------------------------------------------------------- */

#define BIT(id) ((uint32_t)1 << (id))
/* The id of a field that sweep() is to remove. */
#define DROPPED LK_HDR_NKNOWN
_Static_assert(DROPPED < 32, "the known ids and DROPPED are bits of a uint32_t");

/* The fields that are hop-by-hop whatever Connection says (RFC 9110
 * §7.6.1), and those Connection may not name: the framing and routing
 * fields, which lookout alone decides (RFC 9110 §7.6.1 lets a sender list
 * any field; a proxy that obeys it for Content-Length forwards a body the
 * next hop reads as a second request). */
static const uint32_t hop_by_hop =
    BIT(LK_HDR_CONNECTION) | BIT(LK_HDR_KEEP_ALIVE) | BIT(LK_HDR_PROXY_CONNECTION) |
    BIT(LK_HDR_TE) | BIT(LK_HDR_TRAILER) | BIT(LK_HDR_TRANSFER_ENCODING) | BIT(LK_HDR_UPGRADE) |
    BIT(LK_HDR_PROXY_AUTHENTICATE) | BIT(LK_HDR_PROXY_AUTHORIZATION);
static const uint32_t never_named =
    BIT(LK_HDR_CONTENT_LENGTH) | BIT(LK_HDR_TRANSFER_ENCODING) | BIT(LK_HDR_HOST);

void
lk_http_msg_init(struct lk_http_msg *m, struct lk_pool *pool, int is_request)
{
    memset(m, 0, sizeof(*m));
    m->pool = pool;
    m->is_request = is_request;
    m->http_major = 1;
    m->http_minor = 1;
}

/* Enters field i, with a known id, into the index. */
static inline void
index_field(struct lk_http_msg *m, enum lk_hdr id, size_t i)
{
    if (id == LK_HDR_OTHER)
        return;
    if (!(m->present & BIT(id))) {
        m->present |= BIT(id);
        m->first[id] = (uint32_t)i;
        m->count[id] = 0;
    }
    m->count[id]++;
}

/* Fields lookout itself may add to a parsed head (X-Forwarded-*,
 * Connection, Content-Length...), and more: room kept beside the most
 * LK_HTTP_MAX_FIELDS a parsed head holds. */
#define ADDED_FIELDS 16

/* lk_http_append with no room left: the array grows and the append is
 * made again.  An array left behind stays in the pool until the exchange
 * ends, so the array does not double (every old copy would stay, as much
 * again as the last): it holds 16 fields, then at once what a parsed head
 * may hold with what lookout adds, and only a message of more than that,
 * which no parsed head is, doubles on from there.  Out of line and
 * reached by a tail call, so that the common append saves no registers. */
static __attribute__((noinline)) void
append_growing(struct lk_http_msg *m, struct lk_str name, struct lk_str value, enum lk_hdr id)
{
    size_t cap = m->cap == 0                                   ? 16
                 : m->cap < LK_HTTP_MAX_FIELDS + ADDED_FIELDS ? LK_HTTP_MAX_FIELDS + ADDED_FIELDS
                                                               : m->cap * 2;
    struct lk_http_header *h = lk_pnalloc(m->pool, cap * sizeof(*h));

    if (m->nheaders != 0)
        memcpy(h, m->headers, m->nheaders * sizeof(*h));
    m->headers = h;
    m->cap = cap;
    lk_http_append(m, name, value, id);
}

void
lk_http_append(struct lk_http_msg *m, struct lk_str name, struct lk_str value, enum lk_hdr id)
{
    size_t i = m->nheaders;

    if (__builtin_expect(i == m->cap, 0)) {
        append_growing(m, name, value, id);
        return;
    }
    struct lk_http_header *h = &m->headers[i];
    h->name = name;
    h->value = value;
    h->id = id;
    index_field(m, id, i);
    m->nheaders = i + 1;
}

/* Removes the fields whose id is in drop (DROPPED: those marked one by
 * one), keeping the order of the rest, and indexes them again; returns how
 * many went. */
static size_t
sweep(struct lk_http_msg *m, uint32_t drop)
{
    size_t j = 0, n = m->nheaders;

    m->present = 0;
    for (size_t i = 0; i < n; i++) {
        if (drop & BIT(m->headers[i].id))
            continue;
        if (j != i)
            m->headers[j] = m->headers[i];
        index_field(m, m->headers[j].id, j);
        j++;
    }
    m->nheaders = j;
    return n - j;
}

/* The first field with a known id at or after i; there must be one. */
static size_t
next_of(const struct lk_http_msg *m, enum lk_hdr id, size_t i)
{
    while (m->headers[i].id != id)
        i++;
    return i;
}

/* The first field of an unknown name at or after i, or nheaders.  A known
 * field never has it: names equal but for case have the same id. */
static size_t
next_named(const struct lk_http_msg *m, struct lk_str name, size_t i)
{
    while (i < m->nheaders &&
           !(m->headers[i].id == LK_HDR_OTHER && lk_str_eqi(m->headers[i].name, name)))
        i++;
    return i;
}

struct lk_str *
lk_http_find_id(struct lk_http_msg *m, enum lk_hdr id)
{
    return m->present & BIT(id) ? &m->headers[m->first[id]].value : NULL;
}

struct lk_str *
lk_http_find(struct lk_http_msg *m, struct lk_str name)
{
    enum lk_hdr id = lk_http_hdr_id(name);
    size_t i;

    if (id != LK_HDR_OTHER)
        return lk_http_find_id(m, id);
    i = next_named(m, name, 0);
    return i < m->nheaders ? &m->headers[i].value : NULL;
}

size_t
lk_http_count_id(const struct lk_http_msg *m, enum lk_hdr id)
{
    return m->present & BIT(id) ? m->count[id] : 0;
}

size_t
lk_http_count(const struct lk_http_msg *m, struct lk_str name)
{
    enum lk_hdr id = lk_http_hdr_id(name);
    size_t n = 0;

    if (id != LK_HDR_OTHER)
        return lk_http_count_id(m, id);
    for (size_t i = next_named(m, name, 0); i < m->nheaders; i = next_named(m, name, i + 1))
        n++;
    return n;
}

void
lk_http_add_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value)
{
    lk_http_append(m, lk_hdr_names[id], lk_pstr(m->pool, value.p, value.len), id);
}

void
lk_http_add(struct lk_http_msg *m, struct lk_str name, struct lk_str value)
{
    lk_http_append(m, lk_pstr(m->pool, name.p, name.len), lk_pstr(m->pool, value.p, value.len),
           lk_http_hdr_id(name));
}

size_t
lk_http_del_id(struct lk_http_msg *m, enum lk_hdr id)
{
    return m->present & BIT(id) ? sweep(m, BIT(id)) : 0;
}

size_t
lk_http_del(struct lk_http_msg *m, struct lk_str name)
{
    enum lk_hdr id = lk_http_hdr_id(name);
    size_t n = 0;

    if (id != LK_HDR_OTHER)
        return lk_http_del_id(m, id);
    for (size_t i = next_named(m, name, 0); i < m->nheaders; i = next_named(m, name, i + 1)) {
        m->headers[i].id = DROPPED;
        n++;
    }
    return n != 0 ? sweep(m, BIT(DROPPED)) : 0;
}

/* lk_http_put_id on a message that has the field already: the first
 * keeps its place with the new value; any later ones go. */
static __attribute__((noinline)) void
replace_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value)
{
    size_t i = m->first[id];

    m->headers[i].value = value;
    if (m->count[id] == 1)
        return;
    for (size_t k = m->count[id] - 1; k != 0; k--) {
        i = next_of(m, id, i + 1);
        m->headers[i].id = DROPPED;
    }
    sweep(m, BIT(DROPPED));
}

void
lk_http_set_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value)
{
    lk_http_put_id(m, id, lk_pstr(m->pool, value.p, value.len));
}

void
lk_http_put_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str value)
{
    /* both calls tail calls: most puts add a field the message lacks */
    if (m->present & BIT(id))
        replace_id(m, id, value);
    else
        lk_http_append(m, lk_hdr_names[id], value, id);
}

void
lk_http_set(struct lk_http_msg *m, struct lk_str name, struct lk_str value)
{
    enum lk_hdr id = lk_http_hdr_id(name);

    if (id != LK_HDR_OTHER && (m->present & BIT(id))) {
        lk_http_set_id(m, id, value);
        return;
    }
    size_t i = id != LK_HDR_OTHER ? m->nheaders : next_named(m, name, 0);
    if (i == m->nheaders) { /* absent: added in the caller's spelling */
        lk_http_append(m, lk_pstr(m->pool, name.p, name.len), lk_pstr(m->pool, value.p, value.len), id);
        return;
    }
    m->headers[i].value = lk_pstr(m->pool, value.p, value.len);
    size_t n = 0;
    for (i = next_named(m, name, i + 1); i < m->nheaders; i = next_named(m, name, i + 1)) {
        m->headers[i].id = DROPPED;
        n++;
    }
    if (n != 0)
        sweep(m, BIT(DROPPED));
}

/* Calls fn for each comma-separated, trimmed, non-empty token of s until fn
 * returns nonzero; returns that value. */
static int
each_token(struct lk_str s, int (*fn)(struct lk_str tok, void *arg), void *arg)
{
    size_t start = 0;
    for (size_t i = 0; i <= s.len; i++) {
        if (i == s.len || s.p[i] == ',') {
            struct lk_str tok = lk_str_trim(lk_str_make(s.p + start, i - start));
            if (tok.len != 0) {
                int r = fn(tok, arg);
                if (r != 0)
                    return r;
            }
            start = i + 1;
        }
    }
    return 0;
}

/* each_token over every field with a known id, in order. */
static int
each_token_id(const struct lk_http_msg *m, enum lk_hdr id, int (*fn)(struct lk_str tok, void *arg),
              void *arg)
{
    size_t left = lk_http_count_id(m, id);

    for (size_t i = left != 0 ? m->first[id] : 0; left != 0; i++) {
        if (m->headers[i].id != id)
            continue;
        left--;
        int r = each_token(m->headers[i].value, fn, arg);
        if (r != 0)
            return r;
    }
    return 0;
}

static int
token_eq(struct lk_str tok, void *arg)
{
    return lk_str_eqi(tok, *(struct lk_str *)arg);
}

int
lk_http_has_token_id(struct lk_http_msg *m, enum lk_hdr id, struct lk_str token)
{
    return each_token_id(m, id, token_eq, &token);
}

int
lk_http_has_token(struct lk_http_msg *m, struct lk_str name, struct lk_str token)
{
    enum lk_hdr id = lk_http_hdr_id(name);

    if (id != LK_HDR_OTHER)
        return lk_http_has_token_id(m, id, token);
    for (size_t i = next_named(m, name, 0); i < m->nheaders; i = next_named(m, name, i + 1))
        if (each_token(m->headers[i].value, token_eq, &token))
            return 1;
    return 0;
}

/*
 * What Connection names (RFC 9110 §7.6.1): known fields as bits, the others
 * in a set keyed by a case-folded hash, gathered before any field is
 * dropped.  Removing them is then one pass over the fields, each name
 * looked up once: never every field compared with every token, which a
 * head of a few thousand tokens and fields would turn into tens of
 * millions of compares.
 */
struct named {
    uint32_t known;
    struct lk_str *slot; /* nslots, a power of two; an empty slot has p NULL */
    size_t n, nslots;
};

static uint32_t
fold_hash(struct lk_str s)
{
    uint32_t h = 2166136261u; /* FNV-1a over the bytes with the 0x20 bit set */

    for (size_t i = 0; i < s.len; i++)
        h = (h ^ ((unsigned char)s.p[i] | 0x20)) * 16777619u;
    return h;
}

/* The slot holding name, or the empty one where it would go. */
static struct lk_str *
named_slot(const struct named *nd, struct lk_str name)
{
    size_t mask = nd->nslots - 1;

    for (size_t i = fold_hash(name) & mask;; i = (i + 1) & mask)
        if (nd->slot[i].p == NULL || lk_str_eqi(nd->slot[i], name))
            return &nd->slot[i];
}

static int
add_named(struct lk_str tok, void *arg)
{
    struct named *nd = arg;
    enum lk_hdr id = lk_http_hdr_id(tok);

    if (id != LK_HDR_OTHER) {
        nd->known |= BIT(id) & ~never_named;
        return 0;
    }
    struct lk_str *s = named_slot(nd, tok);
    if (s->p == NULL) {
        *s = tok;
        nd->n++;
    }
    return 0;
}

static int
count_token(struct lk_str tok, void *arg)
{
    (void)tok;
    (*(size_t *)arg)++;
    return 0;
}

size_t
lk_http_count_tokens(struct lk_str s)
{
    size_t n = 0, i = 0; /* indexes: s.p may be NULL when s.len is 0 */

    /* each_token's count in one pass, without a call per token (the parser
     * counts every Connection field): a token is a run between commas
     * holding a byte other than SP and HTAB. */
    while (i < s.len) {
        char ch = s.p[i];
        if (ch == ',' || ch == ' ' || ch == '\t') {
            i++;
            continue;
        }
        n++;
        while (i < s.len && s.p[i] != ',')
            i++;
    }
    return n;
}

size_t
lk_http_count_tokens_id(const struct lk_http_msg *m, enum lk_hdr id)
{
    size_t n = 0;

    each_token_id(m, id, count_token, &n);
    return n;
}

int
lk_http_index_ok(const struct lk_http_msg *m)
{
    uint32_t present = 0, count[LK_HDR_NKNOWN] = {0};

    for (size_t i = 0; i < m->nheaders; i++) {
        enum lk_hdr id = m->headers[i].id;
        if (id != lk_http_hdr_id(m->headers[i].name))
            return 0;
        if (id == LK_HDR_OTHER)
            continue;
        if (!(present & BIT(id)) && m->first[id] != i)
            return 0;
        present |= BIT(id);
        count[id]++;
    }
    if (present != m->present)
        return 0;
    for (int id = 1; id < LK_HDR_NKNOWN; id++)
        if ((present & BIT(id)) && count[id] != m->count[id])
            return 0;
    return 1;
}

int
lk_http_fields_ok(const struct lk_http_msg *m)
{
    for (size_t i = 0; i < m->nheaders; i++) {
        struct lk_str n = m->headers[i].name, v = m->headers[i].value;
        if (n.len == 0)
            return 0;
        for (size_t k = 0; k < n.len; k++)
            if (!(lk_http_chars[(unsigned char)n.p[k]] & LK_CH_TCHAR))
                return 0;
        for (size_t k = 0; k < v.len; k++)
            if (v.p[k] == '\r' || v.p[k] == '\n')
                return 0;
        if (v.len != 0 && (v.p[0] == ' ' || v.p[0] == '\t' || v.p[v.len - 1] == ' ' ||
                           v.p[v.len - 1] == '\t'))
            return 0;
    }
    return 1;
}

void
lk_http_strip_hop_by_hop(struct lk_http_msg *m)
{
    struct lk_str inline_slot[16];
    struct named nd = {.known = 0, .slot = inline_slot, .n = 0, .nslots = 16};

    if (!(m->present & hop_by_hop))
        return; /* Connection among them: nothing is named either */
    int has_conn = (m->present & BIT(LK_HDR_CONNECTION)) != 0;
    struct lk_str conn = has_conn ? m->headers[m->first[LK_HDR_CONNECTION]].value : LK_STR_NULL;
    if (has_conn && m->count[LK_HDR_CONNECTION] == 1 && conn.len == 10 &&
        lk_fold_eq(conn.p, "keep-alive", 10)) {
        /* what most peers send: names a field that goes anyway (compared
         * as the known names are, a word at a time) */
    } else if (has_conn) {
        /* At most half full, so that a probe ends soon.  The parser caps
         * the tokens (LK_HTTP_MAX_CONNECTION_TOKENS); a filter's own
         * fields are not capped, and cost no more than their length. */
        size_t ntok = lk_http_count_tokens_id(m, LK_HDR_CONNECTION);
        while (nd.nslots < 2 * ntok)
            nd.nslots *= 2;
        if (nd.nslots != 16)
            nd.slot = lk_palloc(m->pool, nd.nslots * sizeof(*nd.slot));
        memset(nd.slot, 0, nd.nslots * sizeof(*nd.slot));
        /* Token values point into Connection fields, which the sweep
         * leaves where they are in the pool. */
        each_token_id(m, LK_HDR_CONNECTION, add_named, &nd);
    }
    if (nd.n != 0)
        for (size_t i = 0; i < m->nheaders; i++)
            if (m->headers[i].id == LK_HDR_OTHER && named_slot(&nd, m->headers[i].name)->p != NULL)
                m->headers[i].id = DROPPED;
    sweep(m, hop_by_hop | nd.known | BIT(DROPPED));
}

/* Appends n bytes of p at d; p may be NULL when n is 0 (an empty reason or
 * value), which memcpy must not be given.  Most pieces of a head are short
 * (names, "nginx", "keep-alive"): those are moved by two loads and two
 * stores that overlap, inside the piece, rather than by a call. */
static inline char *
put(char *d, const char *p, size_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t a = lk_load8(p), b = lk_load8(p + n - 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t a = (uint32_t)lk_load4(p), b = (uint32_t)lk_load4(p + n - 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else if (n > 16) {
        memcpy(d, p, n);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = p[i];
    }
    return d + n;
}

size_t
lk_fmt_u64(char *buf, uint64_t v, int hex)
{
    char tmp[24];
    size_t n = 0;

    if (!hex)
        return lk_fmt_dec(buf, v);
    do {
        unsigned digit = (unsigned)(hex ? v & 15 : v % 10);
        tmp[n++] = (char)(digit < 10 ? '0' + digit : 'a' + digit - 10);
        v = hex ? v >> 4 : v / 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

/* The bytes lk_http_write_head writes for m. */
static size_t
head_len(const struct lk_http_msg *m)
{
    size_t len = m->is_request ? m->method.len + 1 + m->target.len + 11
                               : 13 + m->reason.len + 2; /* "HTTP/1.x NNN " */
    for (size_t i = 0; i < m->nheaders; i++)
        len += m->headers[i].name.len + 2 + m->headers[i].value.len + 2;
    return len + 2;
}

/* Writes m's head at d, head_len(m) bytes. */
static void
head_put(const struct lk_http_msg *m, char *d)
{
    if (m->is_request) {
        d = put(d, m->method.p, m->method.len);
        *d++ = ' ';
        d = put(d, m->target.p, m->target.len);
        d = put(d, " HTTP/1.1\r\n", 11);
    } else {
        int st = m->status >= 100 && m->status <= 999 ? m->status : 502;
        d = put(d, m->http_minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
        *d++ = (char)('0' + st / 100);
        *d++ = (char)('0' + st / 10 % 10);
        *d++ = (char)('0' + st % 10);
        *d++ = ' ';
        d = put(d, m->reason.p, m->reason.len);
        d = put(d, "\r\n", 2);
    }
    for (size_t i = 0; i < m->nheaders; i++) {
        const struct lk_http_header *h = &m->headers[i];
        d = put(d, h->name.p, h->name.len);
        d = put(d, ": ", 2);
        d = put(d, h->value.p, h->value.len);
        d = put(d, "\r\n", 2);
    }
    put(d, "\r\n", 2);
}

void
lk_http_write_head(const struct lk_http_msg *m, struct evbuffer *out)
{
    /* One reservation and one commit: every evbuffer_add on a bufferevent's
     * output runs its callbacks, and a head has dozens of pieces. */
    size_t len = head_len(m);
    struct evbuffer_iovec v;

    if (evbuffer_reserve_space(out, (ev_ssize_t)len, &v, 1) != 1)
        abort(); /* out of memory: as lk_xmalloc */
    head_put(m, v.iov_base);
    v.iov_len = len;
    evbuffer_commit_space(out, &v, 1);
}

void
lk_http_prepend_head(const struct lk_http_msg *m, struct evbuffer *buf)
{
    size_t len = head_len(m);
    char *d = lk_pnalloc(m->pool, len);

    head_put(m, d);
    if (evbuffer_prepend(buf, d, len) != 0)
        abort(); /* out of memory: as lk_xmalloc */
}

/* Request validation --------------------------------------------------- */


int
lk_http_host_valid(struct lk_str h)
{
    size_t i = 0;

    if (h.len == 0)
        return 1;
    if (h.p[0] == '[') { /* IP-literal: hex digits, ':' and '.' (IPv4 tail) */
        for (i = 1; i < h.len && h.p[i] != ']'; i++)
            if (!((h.p[i] >= '0' && h.p[i] <= '9') || (h.p[i] >= 'a' && h.p[i] <= 'f') ||
                  (h.p[i] >= 'A' && h.p[i] <= 'F') || h.p[i] == ':' || h.p[i] == '.'))
                return 0;
        if (i == h.len || i == 1)
            return 0;
        i++;
    } else {
        while (i < h.len && (lk_http_chars[(unsigned char)h.p[i]] & LK_CH_REG_NAME))
            i++;
        if (i == 0)
            return 0; /* a port without a host */
    }
    if (i == h.len)
        return 1;
    if (h.p[i++] != ':')
        return 0;
    unsigned port = 0;
    size_t digits = 0;
    for (; i < h.len; i++, digits++) {
        if (h.p[i] < '0' || h.p[i] > '9' || digits == 5)
            return 0;
        port = port * 10 + (unsigned)(h.p[i] - '0');
    }
    return port <= 65535;
}

/* Bytes of a word: each of the 8 set to b. */
#define BYTES(b) (0x0101010101010101u * (uint8_t)(b))

/* Whether a word holds a byte below ' ' + 1, above '~', or a '#' (the
 * bit-twiddling hasless, hasmore and haszero: exact as to whether any
 * byte does, not as to which). */
static inline int
word_suspect(uint64_t x)
{
    uint64_t below = (x - BYTES(0x21)) & ~x;
    uint64_t above = (x + BYTES(1)) | x; /* hasmore(x, 0x7e) */
    uint64_t hash = ((x ^ BYTES('#')) - BYTES(1)) & ~(x ^ BYTES('#'));
    return ((below | above | hash) & BYTES(0x80)) != 0;
}

/* Whether the target may hold a byte lk_http_check_request refuses: a
 * control, SP, DEL, a byte over 0x7f or '#'.  A word at a time; the
 * checks that say which run only when it does. */
static int
target_suspect(struct lk_str t)
{
    size_t i = 0;

    if (t.len < 8) {
        for (; i < t.len; i++) {
            unsigned char ch = (unsigned char)t.p[i];
            if (ch <= ' ' || ch >= 0x7f || ch == '#')
                return 1;
        }
        return 0;
    }
    for (; i + 8 < t.len; i += 8)
        if (word_suspect(lk_load8(t.p + i)))
            return 1;
    return word_suspect(lk_load8(t.p + t.len - 8)); /* overlaps */
}

/* Every Transfer-Encoding token, across all its fields, in *n; 0 if they
 * are exactly one "chunked". */
static int
te_token(struct lk_str tok, void *arg)
{
    unsigned *n = arg;
    (*n)++;
    return !lk_str_eqi(tok, LK_STRLIT("chunked"));
}

int
lk_http_te_only_chunked(const struct lk_http_msg *m)
{
    size_t nte = lk_http_count_id(m, LK_HDR_TRANSFER_ENCODING);
    unsigned tokens = 0;

    if (nte == 0)
        return 0;
    if (each_token_id(m, LK_HDR_TRANSFER_ENCODING, te_token, &tokens) || tokens != 1)
        return -1;
    return 0;
}

/* An absolute-form target (RFC 9112 §3.2.2) becomes origin-form; its
 * authority goes to *authority.  0 if it was one (http or https, a valid
 * host without userinfo), -1 otherwise.  The target has no fragment. */
static int
absolute_form(struct lk_http_msg *m, struct lk_str *authority)
{
    struct lk_url_parts parts;

    if (lk_url_parts_split(m->target, &parts) != 0 ||
        (!lk_str_eqi(parts.scheme, LK_STRLIT("http")) &&
         !lk_str_eqi(parts.scheme, LK_STRLIT("https"))))
        return -1;
    /* lk_url_parts_split drops userinfo; the raw authority keeps it, and is refused */
    const char *a = parts.scheme.p + parts.scheme.len + 3;
    *authority = lk_str_make(a, (size_t)(parts.rest.p - a));
    if (!lk_http_host_valid(*authority))
        return -1;
    m->target = parts.rest.len != 0 && parts.rest.p[0] == '/'
                    ? parts.rest
                    : lk_pstr_concat(m->pool, LK_STRLIT("/"), parts.rest);
    return 0;
}

int
lk_http_check_request(struct lk_http_msg *m, int *absolute, const char **reason)
{
    /* Host and Transfer-Encoding were counted as the head was parsed: a
     * second Host is refused here, after the version, as before */
    struct lk_str *host = lk_http_find_id(m, LK_HDR_HOST), authority;
    size_t nhost = lk_http_count_id(m, LK_HDR_HOST);
    size_t nte = lk_http_count_id(m, LK_HDR_TRANSFER_ENCODING);

    *absolute = 0;
    if (m->http_major != 1 || m->http_minor > 1) {
        *reason = "HTTP version not supported";
        return 505;
    }
    if (nhost > 1) {
        *reason = "more than one Host header";
        return 400;
    }
    if (host == NULL && m->http_minor == 1) {
        *reason = "missing Host header";
        return 400;
    }
    if (host != NULL && !lk_http_host_valid(*host)) {
        *reason = "invalid Host header";
        return 400;
    }
    if (nte != 0 && m->http_minor == 0) {
        *reason = "Transfer-Encoding in an HTTP/1.0 request";
        return 400;
    }
    if (lk_http_te_only_chunked(m) != 0) {
        *reason = "unsupported Transfer-Encoding (only chunked)";
        return 501;
    }
    if (target_suspect(m->target)) {
        for (size_t i = 0; i < m->target.len; i++) {
            /* llhttp takes HTAB and bytes over 0x7f; RFC 3986 has neither */
            unsigned char ch = (unsigned char)m->target.p[i];
            if (ch <= ' ' || ch >= 0x7f) {
                *reason = "invalid character in the request target";
                return 400;
            }
        }
        if (memchr(m->target.p, '#', m->target.len) != NULL) {
            *reason = "fragment in the request target";
            return 400;
        }
    }
    if (m->target.len != 0 && m->target.p[0] == '/')
        return 0;
    if (lk_str_eq(m->target, LK_STRLIT("*")) && lk_str_eq(m->method, LK_STRLIT("OPTIONS")))
        return 0;
    if (absolute_form(m, &authority) != 0) {
        *reason = "invalid request target";
        return 400;
    }
    *absolute = 1;
    lk_http_set_id(m, LK_HDR_HOST, authority);
    return 0;
}

const char *
lk_http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 429:
        return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 508: return "Loop Detected";
    default: return "Unknown";
    }
}

struct lk_str
lk_http_media_type(struct lk_http_msg *m)
{
    struct lk_str *ct = lk_http_find_id(m, LK_HDR_CONTENT_TYPE);
    struct lk_str t = ct != NULL ? *ct : LK_STRLIT("");
    const char *semi = memchr(t.p, ';', t.len);

    if (semi != NULL)
        t.len = (size_t)(semi - t.p);
    return lk_str_trim(t);
}

enum lk_coding
lk_http_content_coding(const struct lk_http_msg *m)
{
    size_t n = lk_http_count_id(m, LK_HDR_CONTENT_ENCODING);
    struct lk_str coding =
        n != 0 ? lk_str_trim(m->headers[m->first[LK_HDR_CONTENT_ENCODING]].value) : LK_STR_NULL;
    if (n == 0 || (n == 1 && (coding.len == 0 || lk_str_eqi(coding, LK_STRLIT("identity")))))
        return LK_CODING_IDENTITY;
    if (n == 1 && (lk_str_eqi(coding, LK_STRLIT("gzip")) || lk_str_eqi(coding, LK_STRLIT("x-gzip"))))
        return LK_CODING_GZIP;
    if (n == 1 && lk_str_eqi(coding, LK_STRLIT("deflate")))
        return LK_CODING_DEFLATE;
    return LK_CODING_OTHER;
}
