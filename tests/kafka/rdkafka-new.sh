#!/bin/sh
# A librdkafka new enough for KIP-1102 (2.11+) for the real-client subtest of
# tests/integration/124-kafka-rebootstrap.t: Debian 12 has 2.0.2, and CI can
# reach only Debian's and npm's registries.  The npm package
# @confluentinc/kafka-javascript ships librdkafka's complete C source in
# deps/librdkafka/ (1.10.1 bundles librdkafka 2.15.1), so this fetches that
# exact version with `npm pack`, checks the tarball against the integrity
# pinned below, unpacks deps/librdkafka alone into a cache directory outside
# the clone, and builds the shared C library with no optional features
# (about 2 minutes on 2 cores).  The next run on the machine reuses it.
#
#   tests/kafka/rdkafka-new.sh           fetch and build unless built (deps.sh)
#   tests/kafka/rdkafka-new.sh --libdir  print the directory holding the built
#                                        librdkafka.so.1; otherwise print why
#                                        there is none and exit 1
#
# The cache is $LOOKOUT_CACHE_DIR, by default /var/cache/lookout-tests when
# that is writable and ~/.cache/lookout-tests otherwise.  A failure to fetch
# or build is a warning, never an error: the subtest then skips and says why
# (the reason is kept in the cache, beside where the build would be).
set -u
PKG=@confluentinc/kafka-javascript
PKG_VERSION=1.10.1
# `npm view @confluentinc/kafka-javascript@1.10.1 dist.integrity`
PKG_INTEGRITY=sha512-KVePUBn21EqCVP9mfxzEuM3SYJHHEF7X+iiC2e43QQgDSyEaksInmCGooT3w5q+cNAdkSCrK71j0ICfqoSqZLw==
RDKAFKA_VERSION=2.15.1
# Nothing the test needs: TLS, SASL/GSSAPI, OIDC over curl, zstd, zlib and the
# system LZ4 (the bundled one stays); --no-download keeps mklove off the
# network.  mklove requires a C++ compiler by name although only the C library
# is built (src/, not src-cpp/), so the C compiler stands in for it.
CONFIGURE_ARGS="--no-download --disable-ssl --disable-gssapi --disable-curl --disable-zstd --disable-zlib --disable-lz4-ext"

if [ -n "${LOOKOUT_CACHE_DIR:-}" ]; then
    cache=$LOOKOUT_CACHE_DIR
elif mkdir -p /var/cache/lookout-tests 2>/dev/null && [ -w /var/cache/lookout-tests ]; then
    cache=/var/cache/lookout-tests
else
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/lookout-tests
fi
dest="$cache/librdkafka-$RDKAFKA_VERSION"
failed="$dest.failed"
stamp="$PKG@$PKG_VERSION $PKG_INTEGRITY $CONFIGURE_ARGS"

built() {
    [ -f "$dest/src/librdkafka.so.1" ] && [ "$(cat "$dest/.lookout-built" 2>/dev/null)" = "$stamp" ]
}

if [ "${1:-}" = --libdir ]; then
    built && { echo "$dest/src"; exit 0; }
    if [ -f "$failed" ]; then
        cat "$failed"
    else
        echo "librdkafka $RDKAFKA_VERSION is not built in $dest (tests/deps.sh runs tests/kafka/rdkafka-new.sh)"
    fi
    exit 1
fi

built && exit 0

# fail REASON: keep REASON for the subtest, warn, and leave deps.sh going.
fail() {
    printf '%s\n' "$1" >"$failed" 2>/dev/null
    echo "deps: WARNING: $1; the real-client subtest of 124-kafka-rebootstrap.t will skip" >&2
    [ -n "${work:-}" ] && rm -rf "$work"
    exit 0
}

mkdir -p "$cache" || fail "cannot create the cache directory $cache"
rm -f "$failed"
work=$(mktemp -d "$cache/.librdkafka-build.XXXXXX") || fail "cannot create a build directory in $cache"
echo "deps: librdkafka $RDKAFKA_VERSION from npm $PKG@$PKG_VERSION into $dest"
t0=$(date +%s)
tgz=$(cd "$work" && timeout 300 npm pack --loglevel=error --ignore-scripts "$PKG@$PKG_VERSION" 2>"$work/npm.log" | tail -n 1)
{ [ -n "$tgz" ] && [ -f "$work/$tgz" ]; } ||
    fail "npm pack $PKG@$PKG_VERSION failed: $(grep -m 3 . "$work/npm.log" | tr '\n' ' ')"
got="sha512-$(openssl dgst -sha512 -binary "$work/$tgz" | openssl base64 -A)"
[ "$got" = "$PKG_INTEGRITY" ] ||
    fail "npm pack $PKG@$PKG_VERSION gave a tarball whose integrity is $got, not the pinned $PKG_INTEGRITY"
tar -xzf "$work/$tgz" -C "$work" package/deps/librdkafka ||
    fail "$tgz has no package/deps/librdkafka"
src="$work/package/deps/librdkafka"
grep -q "RD_KAFKA_VERSION  *0x020f01ff" "$src/src/rdkafka.h" ||
    fail "$PKG@$PKG_VERSION does not bundle librdkafka $RDKAFKA_VERSION"
# shellcheck disable=SC2086
(cd "$src" && CXX=${CC:-cc} timeout 300 nice ./configure $CONFIGURE_ARGS) >"$work/configure.log" 2>&1 ||
    fail "librdkafka's configure failed: $(tail -n 3 "$work/configure.log" | tr '\n' ' ')"
timeout 900 nice make -j2 -C "$src/src" librdkafka.so.1 >"$work/make.log" 2>&1 ||
    fail "building librdkafka failed: $(tail -n 3 "$work/make.log" | tr '\n' ' ')"
# What the test loads is src/librdkafka.so.1 (and tests may read the headers):
# the objects and the debug copy are 60 MB the cache need not keep.
find "$src" -name '*.o' -exec rm -f {} +
rm -f "$src/src/librdkafka-dbg.so.1"
printf '%s\n' "$stamp" >"$src/.lookout-built"
# Into place in one rename, so that a run that stops half-way (or a second one
# at the same time) never leaves a half-built library where the test looks.
rm -rf "$dest"
mv "$src" "$dest" || fail "cannot move the build to $dest"
rm -rf "$work"
echo "deps: librdkafka $RDKAFKA_VERSION built in $(($(date +%s) - t0)) s: $dest/src/librdkafka.so.1"
