#!/bin/sh
# The test command: installs what is missing, builds lookout, and runs every
# test (unit tests, fuzz corpora replay, integration tests against real curl
# and openssl), first in a normal build (with io_uring), then in a build without
# io_uring (a subset of the integration tests), then in an ASan+UBSan build, and
# then each libFuzzer harness for a bounded time (tests/fuzz/run.sh), and
# that no include cycle joins the modules (tests/cycles.pl).  After
# the plain build it checks what `make install` ships (tests/install/).
# The later builds run in the background during the plain integration
# tests (prebuild, below).
# The last line is "N passed, N failed".
#
#   tests/check.sh            everything
#   LOOKOUT_SANITIZE=no tests/check.sh   skip the sanitizer pass
#   LOOKOUT_FUZZ=no tests/check.sh       skip the fuzzers (the corpus replay stays)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
"$top/tests/deps.sh" || { echo "0 passed, 1 failed"; exit 1; }

total_pass=0
total_fail=0

# Adds the "N passed, N failed" line at the end of log $1 to the totals;
# a run that printed no such line counts as one failure.
tally() {
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    if [ -z "$line" ]; then
        total_fail=$((total_fail + 1))
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
}

# The clang probe: whether clang can link libFuzzer (deps.sh installs clang and
# libclang-rt-14-dev).
fuzz_available() {
    command -v clang >/dev/null 2>&1 || return 1
    mkdir -p "$top/build"
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d == NULL && n; }' |
        clang -fsanitize=fuzzer -x c - -o "$top/build/fuzz-probe" >/dev/null 2>&1
}

# The later suites' builds (readv, asan, the fuzzers) start in the background,
# niced, when the plain integration tests start: those wait on sockets and
# timers more than they use the CPU (about 300 CPU-seconds in 680 s on a 2-core
# machine), and the builds take about 9 minutes of it.  Each suite waits for
# them (prebuilt) and then runs tests/build.sh as before, which has nothing
# left to do, or reports what failed.  Output: build/prebuild.log.
prebuild_pid=
prebuild() {
    (
        nice -n 10 "$top/tests/build.sh" readv --disable-io-uring
        if [ "${LOOKOUT_SANITIZE:-yes}" != no ]; then
            nice -n 10 "$top/tests/build.sh" asan --enable-asan CFLAGS="-O1 -g"
        fi
        if [ "${LOOKOUT_FUZZ:-yes}" != no ] && fuzz_available; then
            nice -n 10 "$top/tests/build.sh" fuzz --enable-fuzz CC=clang &&
                nice -n 10 make -C "$top/build/fuzz" -j2 fuzzers >"$top/build/fuzz/make-fuzzers.log" 2>&1
        fi
    ) >"$top/build/prebuild.log" 2>&1 &
    prebuild_pid=$!
}
prebuilt() {
    [ -n "$prebuild_pid" ] && wait "$prebuild_pid"
    prebuild_pid=
}

# The fuzzers (below) run niced in the background during the sanitizer
# suite's integration tests, for the same reason; fuzz_pid is set when
# they were started.
fuzz_pid=
fuzz_start() {
    [ "${LOOKOUT_FUZZ:-yes}" != no ] && fuzz_available || return 0
    nice -n 10 "$top/tests/fuzz/run.sh" "${LOOKOUT_FUZZ_SECONDS:-10}" >"$top/build/fuzz.log" 2>&1 &
    fuzz_pid=$!
}

# run_suite NAME CONFIGURE_ARGS...
run_suite() {
    name=$1
    shift
    build="$top/build/$name"
    log="$top/build/$name.log"
    echo "== $name: building in build/$name"
    if ! "$top/tests/build.sh" "$name" "$@"; then
        echo "== $name: build FAILED"
        total_fail=$((total_fail + 1))
        return
    fi
    echo "== $name: unit tests"
    (cd "$build" && ./tests/unit/run) >"$log.unit" 2>&1
    grep -E '^not ok' "$log.unit"
    tail -n 1 "$log.unit"
    tally "$log.unit"
    echo "== $name: fuzz corpus replay"
    (cd "$build" && srcdir="$top" sh "$top/tests/fuzz/replay.sh") >"$log.replay" 2>&1
    grep -E '^not ok' "$log.replay"
    tail -n 1 "$log.replay"
    tally "$log.replay"
    [ "$name" = plain ] && prebuild
    [ "$name" = asan ] && fuzz_start
    echo "== $name: integration tests"
    # shellcheck disable=SC2086 # $suite_tests: a list of files, or none (all)
    LOOKOUT_BIN="$build/lookout" perl "$top/tests/integration/run.pl" ${suite_tests:-} >"$log.integration" 2>&1
    grep -vE '^ok ' "$log.integration" | grep -vE '^\s*$' | tail -n 60
    tally "$log.integration"
}

suite_tests=
# The default build reads and writes plaintext through io_uring (configure turns it on
# when liburing is there, and deps.sh installs it): 141-io-uring.t fails, rather than
# skips, if it is not.
export LOOKOUT_EXPECT_IO_URING=1
run_suite plain
unset LOOKOUT_EXPECT_IO_URING
# A build without io_uring (./configure --disable-io-uring, or no liburing): the unit
# tests, the corpora and the integration tests of the plain HTTP path, which is what
# readv and writev serve there (the rest does not depend on it), a few minutes.
suite_tests=$(cd "$top" && ls tests/integration/20-*.t tests/integration/30-*.t \
    tests/integration/40-*.t tests/integration/45-*.t tests/integration/50-*.t \
    tests/integration/54-*.t tests/integration/60-*.t tests/integration/95-*.t \
    tests/integration/108-*.t tests/integration/135-*.t tests/integration/139-*.t \
    tests/integration/140-*.t tests/integration/141-*.t)
prebuilt
run_suite readv --disable-io-uring
suite_tests=
# What `make install` ships, against the plain build: man pages, systemd
# unit, Dockerfile (lint.sh, a few seconds; `make check` runs it too), then
# the tarball built, installed and uninstalled (dist.sh, about 40 s; why not
# `make distcheck` is in its header).
echo "== install: man pages, systemd unit, Dockerfile"
LOOKOUT_BIN="$top/build/plain/lookout" "$top/tests/install/lint.sh" >"$top/build/install-lint.log" 2>&1
grep -E '^not ok|^# ' "$top/build/install-lint.log"
tail -n 1 "$top/build/install-lint.log"
tally "$top/build/install-lint.log"
echo "== install: make dist, build from the tarball, make install and uninstall, in build/dist"
"$top/tests/install/dist.sh" >"$top/build/install-dist.log" 2>&1
grep -E '^not ok|^# ' "$top/build/install-dist.log"
tail -n 1 "$top/build/install-dist.log"
tally "$top/build/install-dist.log"
# The Kubernetes manifests of deploy/kubernetes/, offline, against the Kubernetes
# schemas (and broken copies of them, which must be refused), and the lookout.conf
# of their ConfigMap through the plain build's --check (a few seconds).
echo "== deploy/kubernetes: manifests against the Kubernetes schemas, lookout.conf through --check"
LOOKOUT_BIN="$top/build/plain/lookout" "$top/deploy/kubernetes/check.sh" >"$top/build/kubernetes.log" 2>&1
grep -E '^not ok|# SKIP' "$top/build/kubernetes.log"
tail -n 1 "$top/build/kubernetes.log"
tally "$top/build/kubernetes.log"
if [ "${LOOKOUT_SANITIZE:-yes}" != no ]; then
    # A small quarantine: the backpressure tests measure lookout's RSS, and
    # ASan's default 256 MiB of freed-but-held memory would swamp it.
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=16
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export LOOKOUT_SANITIZED=1
    export LOOKOUT_EXPECT_IO_URING=1
    run_suite asan --enable-asan CFLAGS="-O1 -g"
    unset LOOKOUT_EXPECT_IO_URING
fi
# The fuzzers, LOOKOUT_FUZZ_SECONDS each (default 10: in CI they are a smoke test over
# the corpus, and CI must stay under 30 minutes; longer runs are done by hand), when clang can link
# libFuzzer (fuzz_available above); LOOKOUT_FUZZ=no skips them.
if [ "${LOOKOUT_FUZZ:-yes}" != no ]; then
    [ -z "$fuzz_pid" ] && fuzz_start
    if [ -n "$fuzz_pid" ]; then
        wait "$fuzz_pid"
        echo "== fuzz: ${LOOKOUT_FUZZ_SECONDS:-10} s per fuzzer, in build/fuzz"
        grep -E '^(not )?ok|^#' "$top/build/fuzz.log"
        tail -n 1 "$top/build/fuzz.log"
        tally "$top/build/fuzz.log"
    else
        echo "== fuzz: skipped (clang with libFuzzer not found: apt-get install clang libclang-rt-14-dev)"
    fi
fi
# Include cycles among the modules of proxy/ and filters/ (tests/cycles.pl):
# one check, passed when there is none.  A cycle it prints names its edges.
echo "== include cycles (tests/cycles.pl)"
if perl "$top/tests/cycles.pl" "$top" >"$top/build/cycles.log" 2>&1; then
    echo "1 passed, 0 failed" >>"$top/build/cycles.log"
else
    echo "0 passed, 1 failed" >>"$top/build/cycles.log"
fi
grep -vE '^  ' "$top/build/cycles.log"
tally "$top/build/cycles.log"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
