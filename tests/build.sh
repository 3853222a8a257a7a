#!/bin/sh
# Builds lookout out of tree in build/NAME (default: plain), running
# autogen.sh and configure when needed.  Extra arguments go to configure.
#   tests/build.sh                 -> build/plain/lookout
#   tests/build.sh asan --enable-asan
# It makes lookout, the unit tests, the fuzz corpus replays and, when
# librdkafka is installed, the Kafka mock cluster (tests/kafka/kafka-mock) and
# a KIP-1102 client check (tests/kafka/kafka-rebootstrap-check: built against
# Debian's librdkafka headers, run by 124-kafka-rebootstrap.t with the
# librdkafka 2.15.1 that tests/kafka/rdkafka-new.sh builds from deps.sh);
# and tests/zk/zk-watch, proxy/lk_zk.c on a loop (tests/zk/include.am).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
name=${1:-plain}
[ $# -gt 0 ] && shift
build="$top/build/$name"
mkdir -p "$build"
if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ] ||
    [ "$top/Makefile.am" -nt "$top/configure" ]; then
    (cd "$top" && ./autogen.sh >"$top/build/autogen.log" 2>&1) ||
        { echo "build: autogen.sh failed, see build/autogen.log" >&2; exit 1; }
    rm -f "$build/Makefile"
fi
cd "$build" || exit 1
if [ ! -f Makefile ]; then
    "$top/configure" "$@" >configure.log 2>&1 ||
        { tail -n 20 configure.log >&2; echo "build: configure failed, see build/$name/configure.log" >&2; exit 1; }
fi
make -j"$(nproc)" lookout tests/unit/run fuzz-replay kafka-fixtures zk-fixtures >make.log 2>&1 ||
    { tail -n 30 make.log >&2; echo "build: make failed, see build/$name/make.log" >&2; exit 1; }
