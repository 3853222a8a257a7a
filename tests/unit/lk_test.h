/*
 * A small unit-test harness in the spirit of tinytest and picotest.  Each
 * tests/unit/test_<module>.c ends in a case table ({ "conf/basic", fn },
 * ..., { NULL, NULL }) that tests/unit/main.c lists.  `tests/unit/run
 * [pattern]` runs the cases whose name matches (a substring, or a glob if
 * the pattern has * ? or [), each in a child process so that a crash or a
 * leak (under ASan) fails that case alone.  Output is TAP: one line per
 * ok(), then the plan, then `N passed, N failed`, which CI reads.  The exit
 * status is nonzero if anything failed.  LK_TEST_NOFORK=1 runs the cases in
 * the harness process, for a debugger.
 */
#ifndef LK_TEST_H
#define LK_TEST_H

struct lk_test_case {
    const char *name; /* "group/case" */
    void (*fn)(void);
};

/* Records one assertion and prints its TAP line; returns cond, so that a
 * case can stop early with `if (!ok(...)) goto end;`. */
int lk_test_ok(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* ok() for strings: passes if both are equal (or both NULL); a failure
 * prints both. */
int lk_test_ok_str(const char *got, const char *want, const char *file, int line, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));
/* Prefixes the following assertions of this case with a label, for
 * table-driven cases; NULL clears it. */
void lk_test_subtest(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints a TAP diagnostic line ("# ..."). */
void lk_test_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define ok(cond, ...) lk_test_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define ok_str(got, want, ...) lk_test_ok_str((got), (want), __FILE__, __LINE__, __VA_ARGS__)
#define subtest lk_test_subtest

/* Runs the cases of groups (a NULL-terminated list of case tables). */
int lk_test_main(const struct lk_test_case *const *groups, int argc, char **argv);

#endif
