/*
 * The clock every layer reads: milliseconds on the monotonic clock.  A
 * header only, below everything (the log, the connection I/O, broker
 * health, TLS ticket rotation and dials all read it).
 */
#ifndef LK_CLOCK_H
#define LK_CLOCK_H

#include <time.h>

static inline long long
lk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
