/*
 * Absolute URLs and "host:port" split into their parts, pure over strings
 * (lk_urlparts.c): no schemes, no config.  lk_location.h builds on them.
 */
#ifndef LK_URLPARTS_H
#define LK_URLPARTS_H

#include <stdint.h>

#include "lk_str.h"

/* The parts of an absolute URL "scheme://[userinfo@]host[:port]rest". */
struct lk_url_parts {
    struct lk_str scheme;
    struct lk_str host; /* without brackets */
    uint16_t port;      /* explicit, or (lk_url_split) the scheme's default; else 0 */
    struct lk_str rest; /* path, query and fragment, byte for byte */
};

/* 0 on an absolute URL with an authority, -1 otherwise (relative,
 * scheme-relative, bad port); the parts point into url.  The port is 0 when
 * the URL gives none. */
int lk_url_parts_split(struct lk_str url, struct lk_url_parts *out);

/*
 * Splits "host:port": host a name or an IPv4 address, or an IPv6 address
 * in brackets ("[fd00::13]:6650"), and a port of 1 to 65535, required.  0
 * with *host (without brackets) and *port, or -1 with *why saying what is
 * wrong (a static string).
 */
int lk_hostport_split(struct lk_str s, struct lk_str *host, uint16_t *port, const char **why);

#endif
