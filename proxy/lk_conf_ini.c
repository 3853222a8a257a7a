/*
 * The INI reader (our own dialect, CONTRACT.md section 2): text into
 * sections of key = value entries, kept with their lines, so that every
 * later pass can say where a mistake is.  The loader's error writer lives
 * here too, since every pass reports through it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lk_conf_ini.h"
#include "lk_pool.h"

/* Errors ------------------------------------------------------------------ */

/* Appends to buf (len bytes) at *off, never past len. */
static void
append(char *buf, size_t len, size_t *off, const char *fmt, va_list ap)
{
    int n;

    if (*off >= len)
        return;
    n = vsnprintf(buf + *off, len - *off, fmt, ap);
    if (n > 0)
        *off += (size_t)n;
}

static void appendf(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void
appendf(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    append(buf, len, off, fmt, ap);
    va_end(ap);
}

/* "file:line: [kind name] key: message" into buf (len > 0 bytes). */
static void
where(struct lk_loader *ld, char *buf, size_t len, int line, const struct lk_conf_section *s,
      const char *key, const char *fmt, va_list ap)
{
    size_t off = 0;

    buf[0] = '\0';
    if (line > 0)
        appendf(buf, len, &off, "%s:%d: ", ld->conf->file, line);
    else
        appendf(buf, len, &off, "%s: ", ld->conf->file);
    if (s != NULL)
        appendf(buf, len, &off, SECT_FMT " ", SECT_ARGS(s));
    if (key != NULL)
        appendf(buf, len, &off, "%s: ", key);
    append(buf, len, &off, fmt, ap);
}

int
lk_conf_err(struct lk_loader *ld, int line, const struct lk_conf_section *s, const char *key,
       const char *fmt, ...)
{
    va_list ap;

    if (ld->err == NULL || ld->errlen == 0)
        return -1;
    va_start(ap, fmt);
    where(ld, ld->err, ld->errlen, line, s, key, fmt, ap);
    va_end(ap);
    return -1;
}

void
lk_conf_warn(struct lk_loader *ld, int line, const struct lk_conf_section *s, const char *key,
             const char *fmt, ...)
{
    struct lk_conf *c = ld->conf;
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    where(ld, buf, sizeof(buf), line, s, key, fmt, ap);
    va_end(ap);
    c->warnings = lk_xrealloc(c->warnings, (c->nwarnings + 1) * sizeof(*c->warnings));
    c->warnings[c->nwarnings++] = lk_xstrdup(buf);
}

/* The same, for an entry of section s. */


/* The reader ---------------------------------------------------------------- */

int
lk_conf_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static struct lk_str
trim(struct lk_str s)
{
    while (s.len > 0 && lk_conf_is_ws(s.p[0]))
        s.p++, s.len--;
    while (s.len > 0 && lk_conf_is_ws(s.p[s.len - 1]))
        s.len--;
    return s;
}

/* `#` and `;` open a comment at the start of a line or after whitespace, so
 * that a value may contain them ("a=b#c" keeps "#c"). */
static struct lk_str
strip_comment(struct lk_str l)
{
    for (size_t i = 0; i < l.len; i++)
        if ((l.p[i] == '#' || l.p[i] == ';') && (i == 0 || lk_conf_is_ws(l.p[i - 1])))
            return lk_str_make(l.p, i);
    return l;
}

static int
is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

struct lk_conf_section *
lk_conf_find_section(const struct lk_conf *c, const char *kind, const char *name)
{
    for (size_t i = 0; i < c->nsections; i++) {
        struct lk_conf_section *s = &c->sections[i];
        if (strcmp(s->kind, kind) == 0 &&
            (name == NULL ? s->name == NULL : s->name != NULL && strcmp(s->name, name) == 0))
            return s;
    }
    return NULL;
}

struct lk_conf_entry *
lk_conf_find_entry(const struct lk_conf_section *s, const char *key)
{
    for (size_t i = 0; i < s->nentries; i++)
        if (strcmp(s->entries[i].key, key) == 0)
            return &s->entries[i];
    return NULL;
}

struct lk_conf_entry *
lk_conf_take(struct lk_conf_section *s, const char *key)
{
    struct lk_conf_entry *e = lk_conf_find_entry(s, key);

    if (e != NULL)
        e->used = 1;
    return e;
}

static int
read_header(struct lk_loader *ld, struct lk_str l, int line)
{
    struct lk_conf *c = ld->conf;
    struct lk_str in, kind, name, rest;
    const char *close = memchr(l.p, ']', l.len);
    struct lk_conf_section *s, *dup;
    size_t i;

    if (close == NULL)
        return lk_conf_err(ld, line, NULL, NULL, "section header without ']'");
    if (close != l.p + l.len - 1)
        return lk_conf_err(ld, line, NULL, NULL, "unexpected text after ']'");
    in = trim(lk_str_make(l.p + 1, l.len - 2));
    for (i = 0; i < in.len && !lk_conf_is_ws(in.p[i]); i++)
        ;
    kind = lk_str_make(in.p, i);
    rest = trim(lk_str_skip(in, i));
    for (i = 0; i < rest.len && !lk_conf_is_ws(rest.p[i]); i++)
        ;
    name = lk_str_make(rest.p, i);
    rest = trim(lk_str_skip(rest, i));

    if (kind.len == 0)
        return lk_conf_err(ld, line, NULL, NULL, "empty section header (expected [kind name])");
    if (rest.len != 0)
        return lk_conf_err(ld, line, NULL, NULL,
                      "section header has more than two words (expected [kind name])");
    if (lk_str_eq(kind, LK_STRLIT("lookout"))) {
        if (name.len != 0)
            return lk_conf_err(ld, line, NULL, NULL, "[lookout] takes no name");
    } else if (lk_str_eq(kind, LK_STRLIT("pulsar")) || lk_str_eq(kind, LK_STRLIT("kafka")) ||
               lk_str_eq(kind, LK_STRLIT("broker"))) {
        if (name.len == 0)
            return lk_conf_err(ld, line, NULL, NULL, "[%.*s] needs a name: [%.*s %s]", (int)kind.len,
                          kind.p, (int)kind.len, kind.p,
                          lk_str_eq(kind, LK_STRLIT("broker")) ? "CLUSTER/ID" : "NAME");
    } else {
        return lk_conf_err(ld, line, NULL, NULL,
                      "unknown section kind '%.*s' (expected lookout, pulsar, kafka or broker)",
                      (int)kind.len, kind.p);
    }

    if (c->nsections >= LK_CONF_MAX_SECTIONS)
        return lk_conf_err(ld, line, NULL, NULL, "more than %u sections", LK_CONF_MAX_SECTIONS);
    c->sections = lk_xrealloc(c->sections, (c->nsections + 1) * sizeof(*c->sections));
    s = &c->sections[c->nsections];
    memset(s, 0, sizeof(*s));
    s->kind = lk_xstrndup(kind.p, kind.len);
    s->name = name.len != 0 ? lk_xstrndup(name.p, name.len) : NULL;
    s->file = c->file;
    s->line = line;
    /* Count it before the duplicate check so that it is freed either way. */
    c->nsections++;
    dup = lk_conf_find_section(c, s->kind, s->name);
    if (dup != s)
        return lk_conf_err(ld, line, NULL, NULL, "duplicate section " SECT_FMT " (first at line %d)",
                      SECT_ARGS(s), dup->line);
    return 0;
}

static int
is_repeatable(const struct lk_conf_section *s, const char *key)
{
    /* tls.certificate and tls.key come in ordered pairs, one per cert;
     * ticket keys are a list, the first encrypting. */
    return s->name == NULL && (strcmp(key, "tls.certificate") == 0 || strcmp(key, "tls.key") == 0 ||
                               strcmp(key, "tls.session_ticket_key") == 0);
}

static int
read_entry(struct lk_loader *ld, struct lk_str l, int line)
{
    struct lk_conf *c = ld->conf;
    const char *eq = memchr(l.p, '=', l.len);
    struct lk_conf_section *s;
    struct lk_conf_entry *e, *dup;
    struct lk_str key, value;

    if (eq == NULL)
        return lk_conf_err(ld, line, NULL, NULL, "expected 'key = value' or '[kind name]'");
    key = trim(lk_str_make(l.p, (size_t)(eq - l.p)));
    value = trim(lk_str_make(eq + 1, l.len - (size_t)(eq + 1 - l.p)));
    if (key.len == 0)
        return lk_conf_err(ld, line, NULL, NULL, "missing key before '='");
    for (size_t i = 0; i < key.len; i++)
        if (!is_key_char(key.p[i]))
            return lk_conf_err(ld, line, NULL, NULL,
                          "bad key '%.*s' (letters, digits, '.', '_' and '-' only)",
                          (int)(key.len > 64 ? 64 : key.len), key.p);
    if (c->nsections == 0)
        return lk_conf_err(ld, line, NULL, NULL, "'%.*s' is outside any section",
                      (int)(key.len > 64 ? 64 : key.len), key.p);

    s = &c->sections[c->nsections - 1];
    if (s->nentries >= LK_CONF_MAX_ENTRIES)
        return lk_conf_err(ld, line, NULL, NULL, "more than %u entries in one section",
                      LK_CONF_MAX_ENTRIES);
    s->entries = lk_xrealloc(s->entries, (s->nentries + 1) * sizeof(*s->entries));
    e = &s->entries[s->nentries];
    e->key = lk_xstrndup(key.p, key.len);
    e->value = lk_xstrndup(value.p, value.len);
    e->line = line;
    e->used = 0;
    dup = is_repeatable(s, e->key) ? NULL : lk_conf_find_entry(s, e->key);
    s->nentries++;
    if (dup != NULL)
        return LK_ENTRY_ERR(ld, s, e, "duplicate key (first at line %d)", dup->line);
    return 0;
}

/* Lines have no length limit: the text is in memory whole and lines are
 * (pointer, length) views into it. */
int
lk_conf_read_ini(struct lk_loader *ld, const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    int line = 0;

    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3; /* a UTF-8 byte order mark from a Windows editor */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        struct lk_str l = lk_str_make(p, (size_t)((nl != NULL ? nl : end) - p));

        p = nl != NULL ? nl + 1 : end;
        line++;
        if (memchr(l.p, '\0', l.len) != NULL)
            return lk_conf_err(ld, line, NULL, NULL, "NUL byte in the line");
        l = trim(strip_comment(l));
        if (l.len == 0)
            continue;
        if ((l.p[0] == '[' ? read_header(ld, l, line) : read_entry(ld, l, line)) != 0)
            return -1;
    }
    return 0;
}


char *
lk_conf_path(const struct lk_conf *c, const char *path)
{
    char *r;

    if (path[0] == '/')
        return lk_xstrdup(path);
    while (path[0] == '.' && path[1] == '/')
        path += 2;
    r = lk_xmalloc(strlen(c->dir) + 1 + strlen(path) + 1);
    sprintf(r, "%s%s%s", c->dir, strcmp(c->dir, "/") == 0 ? "" : "/", path);
    return r;
}

const char *
lk_conf_section_get(struct lk_conf_section *s, const char *key, int *line)
{
    struct lk_conf_entry *e = s != NULL ? lk_conf_take(s, key) : NULL;

    if (line != NULL)
        *line = e != NULL ? e->line : s != NULL ? s->line : 0;
    return e != NULL ? e->value : NULL;
}

