/*
 * The lookup-JSON rewrite (CONTRACT §4), pure over bytes: the engine of the
 * lookup filter (filters/flt_lookup.c), kept free of HTTP exchanges and
 * filters so that it can be unit tested and fuzzed as it stands, beside
 * lk_location.c.  A LookupData body is scanned by lk_json_scan, a
 * validating pass that builds nothing; if it names a mapped broker by any
 * of its URLs, brokerUrl, brokerUrlTls, httpUrl, httpUrlTls and nativeUrl
 * become exactly the selected listener's pulsar, pulsar+ssl, http and
 * https addresses (its lookup listener's when the broker lacks the
 * selected one, lk_broker_client_listener): a field the listener has is
 * added, one it lacks is removed.  Everything else (brokerUrlSsl, brokerId, unknown fields, key
 * order) is kept.  The new body is the old one spliced: the address values
 * replaced, members cut out or appended, every other byte as the broker
 * sent it.  What the splice declines (a repeated address field, a NUL
 * byte) goes the reference way: parsed with jansson, edited, dumped
 * compact.
 */
#include <stdint.h>
#include <string.h>
#include <jansson.h>

#include "lk_json.h"
#include "lk_location.h"
#include "lk_lookup.h"

/* LookupData's address fields (pulsar-common lookup/data/LookupData.java)
 * and the listener scheme each one takes; nativeUrl is the legacy name of
 * brokerUrl. */
static const struct {
    const char *name;
    size_t len;
    enum lk_scheme scheme;
} fields[] = {
#define F(name, scheme)                                                                            \
    {                                                                                              \
        name, sizeof(name) - 1, scheme                                                             \
    }
    F("brokerUrl", LK_SCHEME_PULSAR), F("brokerUrlTls", LK_SCHEME_PULSAR_SSL),
    F("httpUrl", LK_SCHEME_HTTP),     F("httpUrlTls", LK_SCHEME_HTTPS),
    F("nativeUrl", LK_SCHEME_PULSAR),
#undef F
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

int
lk_lookup_target(struct lk_str target)
{
    struct lk_url_parts parts;

    if (target.len > 0 && target.p[0] != '/') {
        if (lk_url_split(target, &parts) != 0)
            return 0;
        target = parts.rest;
    }
    const char *q = memchr(target.p, '?', target.len);
    struct lk_str path = q != NULL ? lk_str_make(target.p, (size_t)(q - target.p)) : target;
    if (!lk_str_has_prefix(path, LK_STRLIT("/lookup/v2/topic/")) &&
        !lk_str_has_prefix(path, LK_STRLIT("/lookup/v2/destination/")))
        return 0;
    return !lk_str_has_suffix_i(path, LK_STRLIT("/bundle"));
}

static int
dump_cb(const char *buf, size_t size, void *data)
{
    return evbuffer_add(data, buf, size);
}

/* The broker named by the first of LookupData's URLs that is a listener
 * address of a broker of cl, or NULL. */
static const struct lk_broker *
find_broker(const struct lk_cluster *cl, json_t *root)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        json_t *v = json_object_get(root, fields[i].name);
        struct lk_url_parts parts;
        enum lk_scheme scheme;
        if (!json_is_string(v))
            continue;
        struct lk_str url = lk_str_make(json_string_value(v), json_string_length(v));
        const struct lk_broker *b = lk_url_find_broker(cl, url, &parts, &scheme);
        if (b != NULL)
            return b;
    }
    return NULL;
}

/* Whether "Url" occurs in body: memchr runs a word at a time where glibc's
 * memmem walks a two-way matcher, several times slower on short bodies. */
static int
has_url(const char *body, size_t len)
{
    const char *p = body, *end = body + len;

    while (end - p >= 3 && (p = memchr(p, 'U', (size_t)(end - p - 2))) != NULL) {
        if (p[1] == 'r' && p[2] == 'l')
            return 1;
        p++;
    }
    return 0;
}

/* The reference path: parses body with jansson, edits the five fields and
 * dumps the object compact into out.  An enum lk_lookup_rc; the broker
 * into *broker when it has a listener to rewrite into. */
static int
rewrite_jansson(const struct lk_cluster *cl, const char *name, const char *body, size_t len,
                struct evbuffer *out, const struct lk_broker **broker)
{
    json_error_t jerr;
    struct evbuffer *dump = NULL;
    int rc = LK_LOOKUP_PASS, changed = 0;

    /* No JSON_REJECT_DUPLICATES: on a repeated key the last value wins and
     * one key is written back, so no internal address survives in a
     * duplicate.  Input over jansson's nesting limit fails to parse. */
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(root))
        goto out;
    const struct lk_broker *b = find_broker(cl, root);
    if (b == NULL)
        goto out;
    const struct lk_listener *l = lk_broker_client_listener(b, name);
    if (l == NULL)
        goto out;
    *broker = b;
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct lk_url *u = l->addr[fields[i].scheme];
        json_t *cur = json_object_get(root, fields[i].name);
        if (u == NULL) {
            /* the listener has no such address: the field goes, even as null */
            if (cur != NULL) {
                json_object_del(root, fields[i].name);
                changed = 1;
            }
            continue;
        }
        if (json_is_string(cur) && strcmp(json_string_value(cur), u->text) == 0)
            continue;
        /* an existing key is replaced in place, a new one is appended:
         * jansson keeps insertion order */
        if (json_object_set_new(root, fields[i].name, json_string(u->text)) != 0)
            goto out;
        changed = 1;
    }
    if (!changed) {
        rc = LK_LOOKUP_SAME; /* already the listener's addresses: keep the bytes */
        goto out;
    }
    /* A dump can fail half-way: out gets it whole or not at all. */
    if ((dump = evbuffer_new()) == NULL ||
        json_dump_callback(root, dump_cb, dump, JSON_COMPACT) != 0 ||
        evbuffer_add_buffer(out, dump) != 0)
        goto out;
    rc = LK_LOOKUP_NEW;
out:
    if (dump != NULL)
        evbuffer_free(dump);
    json_decref(root);
    return rc;
}

/*
 * The splice: lk_json_scan validates the body and reports the top-level
 * members; the five fields are found among them by their (decoded) keys,
 * and the answer is the body with their values replaced, the members the
 * listener lacks cut out and the ones it adds appended, every other byte as
 * the broker sent it.  It decides as rewrite_jansson does, and declines
 * (hands the body to jansson) only where jansson's reading is not plain:
 * a repeated field (jansson keeps the last), a NUL byte, an escaped value
 * too long for the stack.
 */

/* A field's member in the body; idx is SIZE_MAX when there is none. */
struct span {
    size_t idx;       /* the member's position in the object */
    size_t key;       /* its key's opening quote */
    size_t value;     /* its value's first byte */
    size_t end;       /* one past its value */
    size_t prev_end;  /* one past the value of the member before (idx > 0) */
    size_t next_key;  /* the key of the member after; SIZE_MAX: none */
    unsigned str : 1; /* the value is a string */
    unsigned esc : 1; /* ... with escapes */
};

struct splice {
    const char *body;
    size_t n;         /* members so far */
    size_t first_key; /* the first member's key */
    size_t last_end;  /* one past the last member's value */
    int prev;         /* the field the last member was, or -1 */
    int repeated;     /* a field occurs twice */
    struct span f[NFIELDS];
};

/* The field that a key (its raw bytes between the quotes) names, or -1. */
static int
field_of(const char *raw, size_t len, int esc)
{
    char buf[6 * 12]; /* the longest name, every byte written "\uXXXX" */

    if (esc) {
        if (len > sizeof(buf))
            return -1;
        len = lk_json_unescape(raw, len, buf);
        raw = buf;
    }
    for (size_t i = 0; i < NFIELDS; i++)
        if (len == fields[i].len && memcmp(raw, fields[i].name, len) == 0)
            return (int)i;
    return -1;
}

static void
on_member(const struct lk_json_member *m, void *arg)
{
    struct splice *sp = arg;
    int i = field_of(sp->body + m->key + 1, m->key_len, m->key_esc);

    if (sp->n == 0)
        sp->first_key = m->key;
    else if (sp->prev >= 0)
        sp->f[sp->prev].next_key = m->key;
    if (i >= 0) {
        struct span *f = &sp->f[i];
        sp->repeated |= f->idx != SIZE_MAX;
        *f = (struct span){.idx = sp->n,
                           .key = m->key,
                           .value = m->value,
                           .end = m->end,
                           .prev_end = sp->last_end,
                           .next_key = SIZE_MAX,
                           .str = m->value_str,
                           .esc = m->value_esc};
    }
    sp->prev = i;
    sp->last_end = m->end;
    sp->n++;
}

/* Field f's string value into *v: the body's bytes, or decoded into
 * buf[0..cap) when it has escapes.  -1 when it does not fit. */
static int
string_of(const char *body, const struct span *f, char *buf, size_t cap, struct lk_str *v)
{
    const char *raw = body + f->value + 1;
    size_t len = f->end - f->value - 2;

    if (!f->esc) {
        *v = lk_str_make(raw, len);
        return 0;
    }
    if (len > cap)
        return -1;
    *v = lk_str_make(buf, lk_json_unescape(raw, len, buf));
    return 0;
}

/* One change to the body: [from, to) becomes the field's new value (SET),
 * nothing (DEL), or the appended members (ADD, from == to). */
struct edit {
    size_t from, to;
    enum { SET, DEL, ADD } op;
    size_t field;
};

static char *
put(char *w, const char *s, size_t n)
{
    memcpy(w, s, n);
    return w + n;
}

/* Writes "name":"text" for field i into w. */
static char *
put_member(char *w, size_t i, const char *text, size_t tlen)
{
    *w++ = '"';
    w = put(w, fields[i].name, fields[i].len);
    w = put(w, "\":\"", 3);
    w = put(w, text, tlen);
    *w++ = '"';
    return w;
}

static int
rewrite_splice(const struct lk_cluster *cl, const char *name, const char *body, size_t len,
               struct evbuffer *out, const struct lk_broker **broker)
{
    struct splice sp = {.body = body, .prev = -1};
    char buf[256];
    struct lk_str v;
    const struct lk_broker *b = NULL;
    const struct lk_url *u[NFIELDS];
    size_t tlen[NFIELDS], removed = 0, nedits = 0, bound = len;
    struct edit edits[NFIELDS + 1];
    int add = 0;

    for (size_t i = 0; i < NFIELDS; i++)
        sp.f[i].idx = SIZE_MAX;
    switch (lk_json_scan(body, len, on_member, &sp)) {
    case LK_JSON_VALID:
        break;
    case LK_JSON_INVALID:
        return LK_LOOKUP_PASS; /* what jansson's refusal gets */
    default:
        return LK_LOOKUP_DECLINED;
    }
    /* The caller saw '{' first: the top level is an object. */
    if (sp.repeated)
        return LK_LOOKUP_DECLINED;
    for (size_t i = 0; i < NFIELDS && b == NULL; i++) {
        struct lk_url_parts parts;
        enum lk_scheme scheme;
        if (sp.f[i].idx == SIZE_MAX || !sp.f[i].str)
            continue;
        if (string_of(body, &sp.f[i], buf, sizeof(buf), &v) != 0)
            return LK_LOOKUP_DECLINED;
        b = lk_url_find_broker(cl, v, &parts, &scheme);
    }
    if (b == NULL)
        return LK_LOOKUP_PASS;
    const struct lk_listener *l = lk_broker_client_listener(b, name);
    if (l == NULL)
        return LK_LOOKUP_PASS;
    *broker = b;

    /* What becomes of each field, as rewrite_jansson decides it. */
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct span *f = &sp.f[i];
        u[i] = l->addr[fields[i].scheme];
        if (u[i] == NULL) {
            /* the listener has no such address: the member goes, even as null */
            if (f->idx != SIZE_MAX) {
                edits[nedits++] = (struct edit){f->key, f->end, DEL, i};
                removed++;
            }
            continue;
        }
        /* It goes between quotes as it is: lk_url_parse builds it of a
         * scheme name, host characters [A-Za-z0-9._-] or an IPv6 literal
         * inet_pton took, and digits, nothing JSON escapes. */
        tlen[i] = strlen(u[i]->text);
        bound += fields[i].len + tlen[i] + 6; /* ,"name":"text" */
        if (f->idx == SIZE_MAX) {
            add = 1;
            continue;
        }
        if (f->str) {
            if (string_of(body, f, buf, sizeof(buf), &v) != 0)
                return LK_LOOKUP_DECLINED;
            if (lk_str_eq(v, lk_str_make(u[i]->text, tlen[i])))
                continue;
        }
        edits[nedits++] = (struct edit){f->value, f->end, SET, i};
    }
    if (nedits == 0 && !add)
        return LK_LOOKUP_SAME; /* already the listener's addresses: keep the bytes */

    /* A member cut out takes one comma with it: the one before it when a
     * kept member precedes it, else the one after it (with the space up to
     * the next key).  Consecutive cuts then meet end to end. */
    for (size_t k = 0; k < nedits; k++) {
        struct edit *e = &edits[k];
        const struct span *f = &sp.f[e->field];
        size_t cut_before = 0;
        if (e->op != DEL)
            continue;
        for (size_t j = 0; j < NFIELDS; j++)
            cut_before += sp.f[j].idx < f->idx && u[j] == NULL;
        if (f->idx > cut_before)
            e->from = f->prev_end;
        else if (f->next_key != SIZE_MAX)
            e->to = f->next_key;
    }
    /* Added members go after the last one: there is one, the field that
     * named the broker (cut out, maybe, but its end is still a place). */
    if (add)
        edits[nedits++] = (struct edit){sp.last_end, sp.last_end, ADD, 0};
    /* in body order (at most six) */
    for (size_t k = 1; k < nedits; k++)
        for (size_t j = k; j > 0 && edits[j].from < edits[j - 1].from; j--) {
            struct edit t = edits[j];
            edits[j] = edits[j - 1];
            edits[j - 1] = t;
        }

    struct evbuffer_iovec vec;
    if (evbuffer_reserve_space(out, (ev_ssize_t)bound, &vec, 1) != 1)
        return LK_LOOKUP_DECLINED;
    char *w = vec.iov_base;
    size_t at = 0;
    for (size_t k = 0; k < nedits; k++) {
        const struct edit *e = &edits[k];
        w = put(w, body + at, e->from - at);
        at = e->to;
        if (e->op == SET) {
            *w++ = '"';
            w = put(w, u[e->field]->text, tlen[e->field]);
            *w++ = '"';
        } else if (e->op == ADD) {
            int first = sp.n == removed;
            for (size_t i = 0; i < NFIELDS; i++) {
                if (u[i] == NULL || sp.f[i].idx != SIZE_MAX)
                    continue;
                if (!first)
                    *w++ = ',';
                w = put_member(w, i, u[i]->text, tlen[i]);
                first = 0;
            }
        }
    }
    w = put(w, body + at, len - at);
    vec.iov_len = (size_t)(w - (char *)vec.iov_base);
    if (evbuffer_commit_space(out, &vec, 1) != 0)
        return LK_LOOKUP_DECLINED;
    return LK_LOOKUP_NEW;
}

int
lk_lookup_rewrite(const struct lk_cluster *cl, const char *name, const char *body, size_t len,
                  enum lk_lookup_path path, struct evbuffer *out, const struct lk_broker **broker)
{
    const struct lk_broker *dummy;

    if (broker == NULL)
        broker = &dummy;
    *broker = NULL;
    /* LookupData is a small object with *Url fields: anything else (the
     * other JSON responses that pass here) is not worth a parse. */
    size_t lead = 0;
    while (lead < len &&
           (body[lead] == ' ' || body[lead] == '\t' || body[lead] == '\r' || body[lead] == '\n'))
        lead++;
    if (lead == len || body[lead] != '{' || !has_url(body + lead, len - lead))
        return LK_LOOKUP_PASS;
    if (path != LK_LOOKUP_JANSSON) {
        int rc = rewrite_splice(cl, name, body, len, out, broker);
        if (rc != LK_LOOKUP_DECLINED || path == LK_LOOKUP_SPLICE)
            return rc;
    }
    return rewrite_jansson(cl, name, body, len, out, broker);
}
