/*
 * Value parsers of the config (lk_conf_value.h): what a key's text means,
 * before any key gives it a place.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "lk_conf_value.h"


int
lk_parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    unsigned long v = 0;

    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (max - (unsigned long)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (unsigned long)(*s - '0');
    }
    *out = v;
    return 0;
}

int
lk_parse_duration(const char *s, unsigned *ms)
{
    unsigned long long v = 0;
    unsigned long mult;
    const char *p = s;

    if (s == NULL || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (unsigned long long)(*p - '0');
        if (v > UINT_MAX)
            return -1;
    }
    /* A bare number is refused: "5" could mean seconds or milliseconds. */
    if (strcmp(p, "ms") == 0)
        mult = 1;
    else if (strcmp(p, "s") == 0)
        mult = 1000;
    else if (strcmp(p, "m") == 0)
        mult = 60 * 1000;
    else
        return -1;
    if (v > UINT_MAX / mult)
        return -1;
    *ms = (unsigned)(v * mult);
    return 0;
}

int
lk_parse_size(const char *s, size_t *bytes)
{
    size_t v = 0, mult = 1;
    const char *p = s;

    if (s == NULL || *p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (SIZE_MAX - (size_t)(*p - '0')) / 10)
            return -1;
        v = v * 10 + (size_t)(*p - '0');
    }
    if (*p == 'k' || *p == 'K')
        mult = 1024, p++;
    else if (*p == 'm' || *p == 'M')
        mult = 1024 * 1024, p++;
    if (*p != '\0' || v > SIZE_MAX / mult)
        return -1;
    *bytes = v * mult;
    return 0;
}

int
lk_parse_rate(const char *s, unsigned max, unsigned *requests, unsigned *per_s)
{
    const char *slash = strchr(s, '/');
    char num[16];
    unsigned long n;

    if (slash == NULL || (size_t)(slash - s) >= sizeof(num))
        return -1;
    memcpy(num, s, (size_t)(slash - s));
    num[slash - s] = '\0';
    if (lk_parse_uint(num, max, &n) != 0 || n == 0)
        return -1;
    if (strcmp(slash, "/s") == 0)
        *per_s = 1;
    else if (strcmp(slash, "/m") == 0)
        *per_s = 60;
    else
        return -1;
    *requests = (unsigned)n;
    return 0;
}

int
lk_parse_enum(const char *s, const char *const *names)
{
    for (int i = 0; names[i] != NULL; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

int
lk_parse_ip(const char *s, char *out, size_t outlen, int *family)
{
    unsigned char a[sizeof(struct in6_addr)];
    char buf[INET6_ADDRSTRLEN + 2];
    size_t len = strlen(s);

    if (len >= sizeof(buf))
        return -1;
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
        memcpy(buf, s + 1, len - 2);
        buf[len - 2] = '\0';
    } else {
        memcpy(buf, s, len + 1);
    }
    if (inet_pton(AF_INET, buf, a) == 1)
        *family = AF_INET;
    else if (inet_pton(AF_INET6, buf, a) == 1)
        *family = AF_INET6;
    else
        return -1;
    return inet_ntop(*family, a, out, (socklen_t)outlen) != NULL ? 0 : -1;
}

int
lk_parse_ip_port(const char *s, char *ip, size_t iplen, int *family, uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    char host[INET6_ADDRSTRLEN + 2];
    unsigned long p;

    if (colon == NULL || (size_t)(colon - s) >= sizeof(host) ||
        lk_parse_uint(colon + 1, 65535, &p) != 0 || p == 0)
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    /* An IPv6 address needs its brackets here, or its last group would be
     * taken for the port. */
    if (strchr(host, ':') != NULL && host[0] != '[')
        return -1;
    if (lk_parse_ip(host, ip, iplen, family) != 0)
        return -1;
    *port = (uint16_t)p;
    return 0;
}
