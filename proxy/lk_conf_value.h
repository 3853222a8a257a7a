/*
 * The config's values as text: numbers, durations, sizes, enumerations
 * and IP addresses.  Pure functions over C strings, shared by the loader
 * passes (lk_conf_*.c) and by the tests; nothing here knows a key.
 */
#ifndef LK_CONF_VALUE_H
#define LK_CONF_VALUE_H

#include <stddef.h>
#include <stdint.h>

/* Plain decimal digits, nothing else, at most max.  0/-1. */
int lk_parse_uint(const char *s, unsigned long max, unsigned long *out);
/* "10s", "250ms", "2m" -> milliseconds; "32k", "1m", "512" -> bytes.  0/-1. */
int lk_parse_duration(const char *s, unsigned *ms);
int lk_parse_size(const char *s, size_t *bytes);
/* "100/s", "30/m" -> requests (1 to max) and the period in seconds (1 or
 * 60).  0/-1. */
int lk_parse_rate(const char *s, unsigned max, unsigned *requests, unsigned *per_s);
/* The index of s in the NULL-terminated names, or -1. */
int lk_parse_enum(const char *s, const char *const *names);
/* "127.0.0.1", "::1" or "[::1]" -> canonical text (out) and family.  0/-1. */
int lk_parse_ip(const char *s, char *out, size_t outlen, int *family);
/* "IP:port" or "[IPv6]:port".  0/-1. */
int lk_parse_ip_port(const char *s, char *ip, size_t iplen, int *family, uint16_t *port);

#endif
