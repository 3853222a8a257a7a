#!/bin/sh
# Replays every fuzz corpus (tests/fuzz/corpus/<target>/) through its
# harness built with a plain main() (tests/fuzz/replay_<target>), so that
# a regression fails `make check` and tests/check.sh without libFuzzer.
# Run from the build directory; $srcdir (set by `make check`) is the source
# tree.  One TAP line per target, then "N passed, N failed".
set -u
top=${srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
pass=0
fail=0
for t in http_request http_response location lookup match conf kafka_prefix kafka_response kafka_fetch_stream pulsar_frame pulsar_command pulsar_filter registry live_map frame_guard sni kafka_pair proxyproto pulsar_pair; do
    log=tests/fuzz/replay_$t.log
    if ./tests/fuzz/replay_$t "$top/tests/fuzz/corpus/$t" >"$log" 2>&1; then
        echo "ok - fuzz replay $t: $(tail -n 1 "$log")"
        pass=$((pass + 1))
    else
        echo "not ok - fuzz replay $t (see $log)"
        tail -n 20 "$log" | sed 's/^/# /'
        fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
