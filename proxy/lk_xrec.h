/*
 * The exchange record's way out (lk_xrec.c): an ended exchange of any
 * protocol becomes counts in its runtime's metrics series (lk_stats.h) and
 * a line in the access log (lk_access.h).  It sits above both, which know
 * neither connections nor exchanges; the record itself is lk_stats.h's.
 */
#ifndef LK_XREC_H
#define LK_XREC_H

#include "lk_stats.h"

struct lk_xchg;

/* Fills lk_stat_filters from the filter registry: once, before the first
 * exchange or scrape (lk_workers_start). */
void lk_xrec_init(void);
/* Takes an exchange's rewrites, leaks and unmapped addresses (by filter)
 * into r. */
void lk_xrec_take(struct lk_xrec *r, const struct lk_xchg *x);
/* The exchange ended: counts it and writes its access-log line. */
void lk_xrec_done(const struct lk_xrec *r);

#endif
