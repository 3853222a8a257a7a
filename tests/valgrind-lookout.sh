#!/bin/sh
# Runs lookout under valgrind, for `make check-valgrind` (tests/check-valgrind.sh),
# which sets it as LOOKOUT_BIN.  Each lookout process writes its own log,
# $LOOKOUT_VALGRIND_LOGS/vg.PID.log, which the check reads at the end.  exec
# keeps the pid: the harness's signals reach lookout itself.
: "${LOOKOUT_VALGRIND_BIN:?the lookout binary to run}"
: "${LOOKOUT_VALGRIND_LOGS:?a directory for the logs}"
exec valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --num-callers=30 \
    --log-file="$LOOKOUT_VALGRIND_LOGS/vg.%p.log" "$LOOKOUT_VALGRIND_BIN" "$@"
