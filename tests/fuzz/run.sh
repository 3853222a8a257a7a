#!/bin/sh
# Builds the libFuzzer binaries (build/fuzz: clang, --enable-fuzz, so ASan
# and UBSan too) and runs each fuzzer for SECONDS (default 30) over a copy
# of its corpus with its dictionary.  A crash, leak, timeout or violated
# invariant fails that fuzzer; its input is kept in build/fuzz/artifacts/.
# One TAP line per fuzzer, then "N passed, N failed".
#   tests/fuzz/run.sh [SECONDS] [TARGET...]
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-30}
[ $# -gt 0 ] && shift
targets=${*:-http_request http_response location lookup match conf kafka_prefix kafka_response kafka_fetch_stream pulsar_frame pulsar_command pulsar_filter registry live_map frame_guard sni kafka_pair proxyproto pulsar_pair}
build="$top/build/fuzz"

if ! "$top/tests/build.sh" fuzz --enable-fuzz CC=clang ||
    ! make -C "$build" -j2 fuzzers >"$build/make-fuzzers.log" 2>&1; then
    tail -n 20 "$build/make-fuzzers.log" 2>/dev/null
    echo "0 passed, 1 failed"
    exit 1
fi
mkdir -p "$build/artifacts"
pass=0
fail=0
for t in $targets; do
    work=$(mktemp -d)
    cp "$top/tests/fuzz/corpus/$t/"* "$work/" 2>/dev/null
    log="$build/fuzz_$t.log"
    # -timeout: one input may take at most 10 s; -rss_limit_mb: a leak or
    # an unbounded buffer shows up as a failure rather than a slow machine.
    if "$build/tests/fuzz/fuzz_$t" "$work" -dict="$top/tests/fuzz/$t.dict" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" >"$log" 2>&1; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "ok - fuzz $t: ${execs:-?} runs in ${secs}s"
        pass=$((pass + 1))
    else
        echo "not ok - fuzz $t (log: $log)"
        grep -E 'ERROR|invariant|SUMMARY|Test unit written' "$log" | head -n 10 | sed 's/^/# /'
        fail=$((fail + 1))
    fi
    rm -rf "$work"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
