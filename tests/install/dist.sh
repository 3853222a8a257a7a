#!/bin/sh
# The release path, the cheap way: `make dist`, the tarball against
# `git ls-files`, then configure and build from the unpacked tarball out of
# tree, `make install DESTDIR=...` and `make uninstall`, checking every file
# that lands and that an operator's config survives both.
#
# Not `make distcheck`, for CI's time: distcheck also builds every test
# program, runs `make check` (unit tests, every fuzz corpus replay, and
# tests/install/lint.sh) from the tarball, and builds the tarball twice:
# 70 s with make -j2 on this project's 2-core machines (it passed on
# 2026-12-01), against about 40 s for this script, and CI had a minute for
# both.  What distcheck adds beyond this script is the tarball's `make
# check` and its read-only source tree; tests/check.sh already runs the
# same tests on the tree the tarball is made from.  Before a release, run
# `make distcheck` in a build directory too.
#
#   tests/install/dist.sh      builds in build/dist; TAP, then
#                              "N passed, N failed"; exit 1 on any failure
set -u
LC_ALL=C
export LC_ALL
top=$(cd "$(dirname "$0")/../.." && pwd)
work=$top/build/dist
. "$top/tests/install/tap.sh"
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}
# step NAME LOG CMD...: runs CMD with its output in LOG; on failure, ends
# the script (what follows needs it).
step() {
    name=$1 log=$2
    shift 2
    if "$@" >"$log" 2>&1; then ok "$name"; else not_ok "$name" "$log"; finish; fi
}
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] && jobs=2

rm -rf "$work"
mkdir -p "$work/tree" "$work/obj" "$work/root"
if [ ! -x "$top/configure" ]; then
    (cd "$top" && ./autogen.sh) >"$work/autogen.log" 2>&1 || {
        not_ok "autogen.sh" "$work/autogen.log"
        finish
    }
fi

# 1. The tarball, from a build directory of the tree.
step "make dist" "$work/dist.log" \
    sh -c "cd '$work/tree' && '$top/configure' --with-systemdsystemunitdir=no && make dist-gzip"
tarball=$(ls "$work"/tree/lookout-*.tar.gz)
name=$(basename "$tarball" .tar.gz)

# 2. Every file of the clone is in it, but for the ones only a clone needs;
# and nothing else is, but for what autogen.sh and make dist generate.
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    tar -tzf "$tarball" | sed "s|^$name/||" | grep -v '/$' | grep . | sort >"$work/in-tarball"
    git -C "$top" ls-files | grep -vxE '\.gitignore|\.ci/run' | sort >"$work/in-git"
    comm -23 "$work/in-git" "$work/in-tarball" | sed 's/^/missing from the tarball: /' >"$work/diff"
    comm -13 "$work/in-git" "$work/in-tarball" |
        grep -vxE 'configure|Makefile\.in|aclocal\.m4|config\.h\.in|build-aux/[^/]+' |
        sed 's/^/in the tarball, not in git: /' >>"$work/diff"
    if [ -s "$work/diff" ]; then not_ok "the tarball holds exactly the tracked files" "$work/diff"
    else ok "the tarball holds exactly the tracked files ($(wc -l <"$work/in-git"))"; fi
else
    echo "ok $((n = n + 1)) - the tarball against git ls-files # SKIP not a git clone"
fi

# 3. Build and install from the tarball, out of tree, the way a package
# does.
step "unpack, configure and build from $name.tar.gz" "$work/build.log" sh -c "
    cd '$work' && tar -xzf '$tarball' && cd obj &&
    ../$name/configure --prefix=/usr --sysconfdir=/etc \
        --with-systemdsystemunitdir=/lib/systemd/system && make -j$jobs"
root=$work/root
step "make install DESTDIR=..." "$work/install.log" make -C "$work/obj" install DESTDIR="$root"

(cd "$root" && find . -type f | sed 's|^\./||' | sort) >"$work/installed"
cat >"$work/expected" <<'EOF'
etc/lookout/lookout.conf
lib/systemd/system/lookout.service
usr/sbin/lookout
usr/share/doc/lookout/README.md
usr/share/doc/lookout/examples/demo.conf
usr/share/doc/lookout/examples/kafka.conf
usr/share/doc/lookout/examples/kafka/3.json
usr/share/doc/lookout/examples/lookout.conf
usr/share/doc/lookout/examples/pulsar-binary.conf
usr/share/doc/lookout/examples/pulsar-follow.conf
usr/share/man/man5/lookout.conf.5
usr/share/man/man8/lookout.8
EOF
if diff -u "$work/expected" "$work/installed" >"$work/diff"; then
    ok "installed: binary, man pages, config, examples, unit"
else
    not_ok "installed: binary, man pages, config, examples, unit" "$work/diff"
fi

# 4. What was installed works where it was put.
if "$root/usr/sbin/lookout" --version 2>&1 | grep -qx "lookout [0-9.]*"; then
    ok "usr/sbin/lookout --version"
else
    "$root/usr/sbin/lookout" --version >"$work/out" 2>&1
    not_ok "usr/sbin/lookout --version" "$work/out"
fi
ex=$root/usr/share/doc/lookout/examples
if "$root/usr/sbin/lookout" --check -c "$ex/demo.conf" >"$work/out" 2>&1; then
    ok "lookout --check accepts the installed demo.conf"
else
    not_ok "lookout --check accepts the installed demo.conf" "$work/out"
fi
unit=$root/lib/systemd/system/lookout.service
if grep -qx 'ExecStart=/usr/sbin/lookout -c /etc/lookout/lookout.conf' "$unit" &&
    ! grep -q '@[a-z]*@\|\${' "$unit"; then
    ok "lookout.service names /usr/sbin/lookout and /etc/lookout/lookout.conf"
else
    grep -n 'Exec\|@\|\$' "$unit" >"$work/out"
    not_ok "lookout.service names /usr/sbin/lookout and /etc/lookout/lookout.conf" "$work/out"
fi
if cmp -s "$top/conf/lookout.conf" "$root/etc/lookout/lookout.conf" && MANWIDTH=80 \
    man -l "$root/usr/share/man/man5/lookout.conf.5" 2>/dev/null | grep -q 'tls.upstream_ca'; then
    ok "etc/lookout/lookout.conf is the reference; the man page reads"
else
    echo "etc/lookout/lookout.conf differs from conf/lookout.conf, or man failed" >"$work/out"
    not_ok "etc/lookout/lookout.conf is the reference; the man page reads" "$work/out"
fi

# 5. An operator's config outlives a reinstall and an uninstall; the rest
# goes, and so does an unchanged config.
echo "# the operator's own" >>"$root/etc/lookout/lookout.conf"
step "make install again" "$work/install2.log" make -C "$work/obj" install DESTDIR="$root"
if tail -n 1 "$root/etc/lookout/lookout.conf" | grep -q "operator's own" &&
    grep -q "^keeping .*lookout.conf" "$work/install2.log"; then
    ok "a reinstall keeps the operator's lookout.conf, and says so"
else
    tail -n 5 "$work/install2.log" >"$work/out"
    not_ok "a reinstall keeps the operator's lookout.conf, and says so" "$work/out"
fi
step "make uninstall" "$work/uninstall.log" make -C "$work/obj" uninstall DESTDIR="$root"
left=$(cd "$root" && find . -type f | sed 's|^\./||')
if [ "$left" = etc/lookout/lookout.conf ]; then
    ok "make uninstall removes everything but the changed config"
else
    echo "left: $left" >"$work/out"
    not_ok "make uninstall removes everything but the changed config" "$work/out"
fi
rm -f "$root/etc/lookout/lookout.conf"
make -C "$work/obj" install DESTDIR="$root" >"$work/install3.log" 2>&1 &&
    make -C "$work/obj" uninstall DESTDIR="$root" >>"$work/install3.log" 2>&1
left=$(cd "$root" && find . -type f)
if [ -z "$left" ]; then
    ok "install then uninstall leaves no file"
else
    echo "left: $left" >"$work/out"
    not_ok "install then uninstall leaves no file" "$work/out"
fi
finish
