/*
 * The unit-test runner behind lk_test.h: TAP output, one child process per
 * case, and the `N passed, N failed` summary line.
 */
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lk_test.h"

static int counts[3]; /* TAP number, passed, failed: continued across cases */
static const char *case_name = "";
static char label[256];
static int report_fd = -1; /* in a child: where counts go after each ok() */

/* Prints s as TAP description text: one line, and '#' escaped so that a
 * config comment in a message is not read as a TODO or SKIP directive. */
static void
put_text(const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '#')
            fputs("\\#", stdout);
        else if (*s == '\n')
            fputs("\\n", stdout);
        else
            putchar(*s);
    }
}

static int
record(int cond, const char *file, int line, const char *fmt, va_list ap)
{
    char msg[1024];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    counts[0]++;
    counts[cond ? 1 : 2]++;
    printf("%s %d - %s: ", cond ? "ok" : "not ok", counts[0], case_name);
    if (label[0] != '\0') {
        putchar('[');
        put_text(label);
        fputs("] ", stdout);
    }
    put_text(msg);
    putchar('\n');
    if (!cond)
        printf("#   at %s:%d\n", file, line);
    fflush(stdout);
    if (report_fd >= 0 && write(report_fd, counts, sizeof(counts)) != sizeof(counts))
        _exit(99);
    return cond;
}

int
lk_test_ok(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    cond = record(cond, file, line, fmt, ap);
    va_end(ap);
    return cond;
}

int
lk_test_ok_str(const char *got, const char *want, const char *file, int line, const char *fmt, ...)
{
    int cond = (got == NULL || want == NULL) ? got == want : strcmp(got, want) == 0;
    va_list ap;

    va_start(ap, fmt);
    record(cond, file, line, fmt, ap);
    va_end(ap);
    if (!cond) {
        printf("#   got:  ");
        put_text(got != NULL ? got : "(null)");
        printf("\n#   want: ");
        put_text(want != NULL ? want : "(null)");
        putchar('\n');
        fflush(stdout);
    }
    return cond;
}

void
lk_test_subtest(const char *fmt, ...)
{
    va_list ap;

    label[0] = '\0';
    if (fmt == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(label, sizeof(label), fmt, ap);
    va_end(ap);
}

void
lk_test_diag(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("# ");
    put_text(msg);
    putchar('\n');
    fflush(stdout);
}

static void
run_here(const struct lk_test_case *tc)
{
    int before = counts[0];

    case_name = tc->name;
    label[0] = '\0';
    tc->fn();
    label[0] = '\0';
    if (counts[0] == before)
        lk_test_ok(0, __FILE__, __LINE__, "the case asserted nothing");
}

static void
run_forked(const struct lk_test_case *tc)
{
    int fds[2], got[3], st;
    pid_t pid;

    fflush(stdout);
    if (pipe(fds) != 0 || (pid = fork()) < 0) {
        perror("lk_test: pipe/fork");
        exit(2);
    }
    if (pid == 0) {
        close(fds[0]);
        report_fd = fds[1];
        run_here(tc);
        /* exit(), not _exit(): LeakSanitizer checks for leaks at exit and
         * then fails the process, which fails the case. */
        exit(0);
    }
    close(fds[1]);
    /* Counts arrive after every assertion, so a crash keeps the numbering. */
    while (read(fds[0], got, sizeof(got)) == sizeof(got))
        memcpy(counts, got, sizeof(counts));
    close(fds[0]);
    waitpid(pid, &st, 0);
    case_name = tc->name;
    if (WIFSIGNALED(st))
        lk_test_ok(0, __FILE__, __LINE__, "killed by signal %d", WTERMSIG(st));
    else if (WEXITSTATUS(st) != 0)
        lk_test_ok(0, __FILE__, __LINE__,
                   "exited with status %d (see stderr: a leak or a sanitizer report?)",
                   WEXITSTATUS(st));
}

static int
matches(const char *name, const char *pattern)
{
    if (pattern == NULL)
        return 1;
    if (strpbrk(pattern, "*?[") != NULL)
        return fnmatch(pattern, name, 0) == 0;
    return strstr(name, pattern) != NULL;
}

int
lk_test_main(const struct lk_test_case *const *groups, int argc, char **argv)
{
    const char *pattern = argc > 1 ? argv[1] : NULL;
    int nofork = getenv("LK_TEST_NOFORK") != NULL, ran = 0;

    for (size_t g = 0; groups[g] != NULL; g++)
        for (const struct lk_test_case *tc = groups[g]; tc->name != NULL; tc++) {
            if (!matches(tc->name, pattern))
                continue;
            printf("# %s\n", tc->name);
            ran++;
            if (nofork)
                run_here(tc);
            else
                run_forked(tc);
        }
    if (ran == 0)
        printf("# no case matches '%s'\n", pattern != NULL ? pattern : "");
    printf("1..%d\n%d passed, %d failed\n", counts[0], counts[1], counts[2]);
    return counts[2] != 0 || ran == 0;
}
