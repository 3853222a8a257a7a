#!/bin/sh
# `make check-valgrind`: the integration tests with every lookout process run
# under valgrind (memcheck, full leak check), then a check of every
# process's log: zero errors and zero definite leaks, or it fails.
#
#   tests/check-valgrind.sh BIN [TEST.t...]   BIN: a lookout binary (a plain build);
#                                              default: every tests/integration/*.t
#
# Every test runs, the timing-bound ones too (60-backpressure.t passes under
# valgrind, its 160 MiB in about 25 s).  It takes about 4 minutes, too long
# for CI.  The last line is "valgrind: N processes, N errors, N with
# definite leaks, N s"; the exit status is non-zero if a test failed or any
# process had an error or a definite leak.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: tests/check-valgrind.sh BIN [TEST.t...]" >&2; exit 2; }
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
[ -x "$bin" ] || { echo "check-valgrind: no lookout binary at $1" >&2; exit 1; }
shift
command -v valgrind >/dev/null 2>&1 ||
    { echo "check-valgrind: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
logs=${LOOKOUT_VALGRIND_LOGS:-$(dirname "$bin")/valgrind-logs}
rm -rf "$logs"
mkdir -p "$logs"
export LOOKOUT_VALGRIND_BIN="$bin" LOOKOUT_VALGRIND_LOGS="$logs"
export LOOKOUT_BIN="$top/tests/valgrind-lookout.sh"

start=$(date +%s)
perl "$top/tests/integration/run.pl" "$@" >"$logs/integration.log" 2>&1
suite=$?
grep -vE '^ok ' "$logs/integration.log" | grep -vE '^\s*$' | tail -n 60

# A log without an ERROR SUMMARY is a process that valgrind could not finish
# (killed with SIGKILL): it counts as an error, since nothing was checked.
procs=0 errors=0 leaks=0 bad=""
for f in "$logs"/vg.*.log; do
    [ -e "$f" ] || continue
    procs=$((procs + 1))
    n=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) errors.*/\1/p' "$f" | tail -n 1)
    d=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tr -d , | tail -n 1)
    [ -n "$n" ] || { n=1; echo "check-valgrind: $f: no ERROR SUMMARY (killed?)"; }
    [ -n "$d" ] || d=0
    errors=$((errors + n))
    [ "$d" -gt 0 ] && leaks=$((leaks + 1))
    [ "$n" -gt 0 ] && bad="$bad $f"
done
# The first few bad logs, without valgrind's banner.
for f in $(echo $bad | tr ' ' '\n' | head -n 5); do
    echo "== $f"
    grep -vE 'Memcheck, a memory|Copyright|Using Valgrind|rerun with|Parent PID|^==[0-9]+== $' "$f" |
        head -n 60
done
echo "valgrind: $procs processes, $errors errors, $leaks with definite leaks, $(( $(date +%s) - start )) s; logs in $logs"
[ "$suite" -eq 0 ] && [ "$errors" -eq 0 ] && [ "$leaks" -eq 0 ]
