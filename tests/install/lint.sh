#!/bin/sh
# Static checks of what `make install` and the Dockerfile ship, cheap enough
# for every `make check` (a second or two):
#  - the man pages format with no groff or man warnings;
#  - lookout.conf.5 documents every config key, with its default, both
#    ways: every key `lookout --keys` lists (the binary's key tables, the
#    filters' own included) and every key conf/*.conf sets, section by
#    section, is on the page, and the page has no key the binary does not
#    list;
#  - conf/lookout.service.in passes systemd-analyze verify (filled in with
#    this build's lookout), keeps its hardening, and stops later than
#    drain_timeout;
#  - the Dockerfile's packages exist in this Debian (12), and its runtime
#    stage has every library lookout links.
# TAP lines, then "N passed, N failed, N skipped"; exit 1 on any failure.
# A check whose tool is missing is skipped, saying so.
#
#   tests/install/lint.sh       (LOOKOUT_BIN: the lookout to check the unit
#                                and Dockerfile against; default build/plain)
set -u
# Whatever locale the caller has (perl and man warn about a missing one).
LC_ALL=C
export LC_ALL
top=${srcdir:-$(dirname "$0")/../..}
top=$(cd "$top" && pwd)
bin=${LOOKOUT_BIN:-$top/build/plain/lookout}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lookout-lint-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

. "$top/tests/install/tap.sh"
# check NAME CMD...: passes when CMD exits 0 and prints nothing.
check() {
    name=$1
    shift
    if "$@" >"$tmp/out" 2>&1 && [ ! -s "$tmp/out" ]; then ok "$name"; else not_ok "$name" "$tmp/out"; fi
}

# ---- man pages --------------------------------------------------------
man8=$top/man/lookout.8
man5=$top/man/lookout.conf.5
if command -v groff >/dev/null 2>&1; then
    # A page with a known fault first, so that a groff that stopped warning
    # cannot pass the real pages by saying nothing.
    printf '.TH X 1\n.SH NAME\n.BOGUS\n\\fQx\n' >"$tmp/bad.1"
    if [ -n "$(groff -man -ww -z "$tmp/bad.1" 2>&1)" ]; then
        ok "groff -ww reports a broken page"
    else
        echo "groff printed nothing for $tmp/bad.1" >"$tmp/out"
        not_ok "groff -ww reports a broken page" "$tmp/out"
    fi
    for p in "$man8" "$man5"; do
        check "groff -man -ww: $(basename "$p") without warnings" groff -man -ww -z "$p"
    done
else
    skip "groff -man -ww" "groff not found (apt-get install groff-base)"
fi
if command -v man >/dev/null 2>&1; then
    for p in "$man8" "$man5"; do
        # man sends the page to stdout, its warnings to stderr.
        if MANWIDTH=80 man --warnings -E UTF-8 -l "$p" >"$tmp/page" 2>"$tmp/out" &&
            [ ! -s "$tmp/out" ] && grep -q 'NAME' "$tmp/page"; then
            ok "man --warnings: $(basename "$p") renders without warnings"
        else
            not_ok "man --warnings: $(basename "$p") renders without warnings" "$tmp/out"
        fi
    done
else
    skip "man --warnings" "man not found (apt-get install man-db)"
fi

# Every key in lookout.conf.5: the page marks each section's key list with
# '.\" keys: KIND' and each key as '.TP' then '.B key'; KIND is lookout,
# pulsar, kafka, broker-pulsar or broker-kafka, as `lookout --keys` names
# the sections.  Prints what is wrong, if anything.  The arguments: the
# output of `lookout --keys`, the man page, then config files.
cat >"$tmp/keys.pl" <<'EOF'
use strict;
use warnings;
my ($code, $page, @confs) = @ARGV;
my (%code, %conf, %man, %nodefault, @err);

# lookout --keys: "SECTION<tab>KEY<tab>DEFAULT<tab>what it does" a line.
open(my $k, '<', $code) or die "$code: $!";
while (my $l = <$k>) {
    chomp $l;
    my ($kind, $key) = split /\t/, $l;
    die "$code:$.: not SECTION<tab>KEY<tab>DEFAULT<tab>TEXT: $l\n"
        unless defined $key && $kind =~ /^(lookout|pulsar|kafka|broker-pulsar|broker-kafka)$/;
    $code{$kind}{$key} = 1;
}
die "found no keys in $code: has the output of lookout --keys changed?\n" unless %code;

# The config files: [broker C/N] takes its cluster's kind.
for my $file (@confs) {
    my ($kind, %cluster, @pending) = ('');
    open(my $f, '<', $file) or die "$file: $!";
    while (my $l = <$f>) {
        if ($l =~ /^\s*\[\s*(\w+)(?:\s+([^\]\s]+))?\s*\]/) {
            my ($k, $name) = ($1, $2 // '');
            if ($k eq 'broker') { $kind = "broker:" . ($name =~ s{/.*}{}r) }
            else { $kind = $k; $cluster{$name} = $k if $k ne 'lookout' }
        } elsif ($l =~ /^\s*([^\s#;=][^=]*?)\s*=/) {
            push @pending, [ $kind, $1, $. ];
        }
    }
    for (@pending) {
        my ($k, $key, $line) = @$_;
        $k = "broker-" . ($cluster{$1} // '?') if $k =~ /^broker:(.*)/;
        $conf{$k}{$key} //= "$file:$line";
    }
}

# The man page.
open(my $m, '<', $page) or die "$page: $!";
my ($kind, $tp, $cur) = ('', 0, undef);
while (my $l = <$m>) {
    chomp $l;
    if ($l =~ /^\.\\" keys: (\S+)/) { $kind = $1; next }
    if ($l =~ /^\.(SH|SS)\b/) { $kind = ''; $cur = undef; next }
    if ($l =~ /^\.TP\b/) { $tp = 1; $cur = undef; next }
    if ($tp && $kind ne '' && $l =~ /^\.B\s+"?([^"\s]+)/) {
        push @err, "$page:$.: [$kind] $1 documented twice" if $man{$kind}{$1}++;
        $cur = $1;
        $nodefault{$kind}{$cur} = $.;
    } elsif (defined $cur && $l =~ /\b(Default|Required)\b/) {
        delete $nodefault{$kind}{$cur};
    }
    $tp = 0;
}
die "found no keys in $page\n" unless %man;

for my $k (sort keys %code) {
    push @err, "[$k] $_: accepted by lookout (--keys), missing from $page"
        for grep { !$man{$k}{$_} } sort keys %{ $code{$k} };
}
for my $k (sort keys %conf) {
    push @err, "[$k] $_: set at $conf{$k}{$_}, missing from $page"
        for grep { !$man{$k}{$_} } sort keys %{ $conf{$k} };
}
for my $k (sort keys %man) {
    push @err, "[$k] $_: in $page, but lookout --keys does not list it"
        for grep { !$code{$k}{$_} } sort keys %{ $man{$k} };
    push @err, "[$k] $_: $page:$nodefault{$k}{$_} says no Default (or Required)"
        for sort keys %{ $nodefault{$k} };
}
print "$_\n" for @err;
EOF
if ! command -v perl >/dev/null 2>&1; then
    skip "config keys in lookout.conf.5" "perl not found"
elif [ ! -x "$bin" ]; then
    skip "config keys in lookout.conf.5" "no lookout binary at $bin (set LOOKOUT_BIN)"
elif ! "$bin" --keys >"$tmp/keys" 2>"$tmp/out"; then
    not_ok "lookout --keys lists the config keys" "$tmp/out"
else
    set -- "$tmp/keys"
    confs=$(ls "$top"/conf/*.conf)
    # shellcheck disable=SC2086
    check "lookout.conf.5 documents every key lookout --keys lists, with its default, and no other" \
        perl "$tmp/keys.pl" "$1" "$man5" $confs
    # The same check must fail on a page with one key taken out, and on
    # a binary that lists one key less.
    awk '/^\.B tls\.upstream_ca$/ && !done { done = 1; print ".B tls.upstream_c"; next } { print }' \
        "$man5" >"$tmp/short.5"
    # shellcheck disable=SC2086
    if perl "$tmp/keys.pl" "$1" "$tmp/short.5" $confs 2>&1 | grep -q 'tls.upstream_ca: accepted'; then
        ok "the key check notices a key missing from the page"
    else
        echo "no complaint about tls.upstream_ca" >"$tmp/out"
        not_ok "the key check notices a key missing from the page" "$tmp/out"
    fi
    grep -v '^lookout	tls\.upstream_ca	' "$1" >"$tmp/keys-short"
    # shellcheck disable=SC2086
    if perl "$tmp/keys.pl" "$tmp/keys-short" "$man5" $confs 2>&1 |
        grep -q 'tls.upstream_ca: in .*, but lookout --keys does not list it'; then
        ok "the key check notices a documented key the binary does not list"
    else
        echo "no complaint about tls.upstream_ca" >"$tmp/out"
        not_ok "the key check notices a documented key the binary does not list" "$tmp/out"
    fi
fi

# ---- systemd unit -----------------------------------------------------
unit_in=$top/conf/lookout.service.in
# The brief of every directive the unit must keep: systemd-analyze accepts
# a unit without them, so their absence is checked here.
missing=""
for d in 'ExecStart=@sbindir@/lookout -c @sysconfdir@/lookout/lookout.conf' \
    'ExecReload=/bin/kill -HUP $MAINPID' KillSignal=SIGTERM Restart=on-failure \
    NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
    ProtectKernelTunables=yes ProtectKernelModules=yes ProtectKernelLogs=yes \
    ProtectControlGroups=yes 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
    RestrictNamespaces=yes LockPersonality=yes MemoryDenyWriteExecute=yes \
    SystemCallFilter=@system-service CapabilityBoundingSet=CAP_NET_BIND_SERVICE \
    AmbientCapabilities=CAP_NET_BIND_SERVICE User=lookout LogsDirectory=lookout; do
    grep -qxF "$d" "$unit_in" || missing="$missing
$d"
done
if [ -z "$missing" ]; then
    ok "lookout.service.in has its run, reload, stop and sandboxing directives"
else
    echo "missing:$missing" >"$tmp/out"
    not_ok "lookout.service.in has its run, reload, stop and sandboxing directives" "$tmp/out"
fi
# TimeoutStopSec must exceed drain_timeout's default, when conf/lookout.conf
# documents one (as `drain_timeout = 30s # ... (default 30s)`).
to_ms() {
    case $1 in
    *ms) echo "${1%ms}" ;;
    *s) echo $((${1%s} * 1000)) ;;
    *m) echo $((${1%m} * 60000)) ;;
    *) echo "" ;;
    esac
}
stop=$(sed -n 's/^TimeoutStopSec=//p' "$unit_in")
drain=$(sed -n 's/^drain_timeout *= *\([0-9]*m*s*\).*/\1/p' "$top/conf/lookout.conf" | head -n 1)
if [ -z "$drain" ]; then
    skip "TimeoutStopSec above drain_timeout" "conf/lookout.conf has no drain_timeout line"
elif [ "$(to_ms "$stop")" -gt "$(to_ms "$drain")" ] 2>/dev/null; then
    ok "TimeoutStopSec ($stop) above drain_timeout ($drain)"
else
    echo "TimeoutStopSec=$stop, drain_timeout = $drain" >"$tmp/out"
    not_ok "TimeoutStopSec above drain_timeout" "$tmp/out"
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
    skip "systemd-analyze verify" "systemd-analyze not found (apt-get install systemd)"
elif [ ! -x "$bin" ]; then
    skip "systemd-analyze verify" "no lookout binary at $bin (set LOOKOUT_BIN)"
else
    # Filled in as make does, with this build's binary so that verify finds
    # the executable; verify exits 0 on some faults (an unknown system call
    # group), so any output fails too.
    mkdir -p "$tmp/unit"
    sed -e "s|@sbindir@|$(dirname "$bin")|g" -e "s|@sysconfdir@|$tmp/etc|g" "$unit_in" \
        >"$tmp/unit/lookout.service"
    check "systemd-analyze verify lookout.service" \
        systemd-analyze verify --man=no "$tmp/unit/lookout.service"
    # Exposure 0 (locked down) to 10 (none): the unit scores 1.5; 2.0 fails
    # when a hardening line goes.
    if systemd-analyze security --offline=yes --threshold=20 "$tmp/unit/lookout.service" \
        >"$tmp/out" 2>&1; then
        ok "systemd-analyze security: $(grep -o 'exposure level[^:]*: [0-9.]* [A-Z]*' "$tmp/out")"
    else
        not_ok "systemd-analyze security: exposure at most 2.0" "$tmp/out"
    fi
fi

# ---- Dockerfile -------------------------------------------------------
# The packages each stage's `apt-get install` names: one line per stage,
# "STAGE pkg pkg ...".
awk '
    /^FROM / { stage = ($3 == "AS" || $3 == "as") ? $4 : "runtime"; next }
    { line = line " " $0 }
    !/\\$/ {
        if (line ~ /apt-get install/) {
            sub(/.*apt-get install/, "", line); sub(/&&.*/, "", line); gsub(/\\/, " ", line)
            out = stage
            n = split(line, w, " ")
            for (i = 1; i <= n; i++) if (w[i] !~ /^-/) out = out " " w[i]
            print out
        }
        line = ""
    }' "$top/Dockerfile" >"$tmp/stages"
if ! grep -q '^build .' "$tmp/stages" || ! grep -q '^runtime .' "$tmp/stages"; then
    not_ok "Dockerfile: a build and a runtime stage installing packages" "$tmp/stages"
elif grep '^FROM' "$top/Dockerfile" | grep -vqE 'debian:(12|bookworm)'; then
    grep '^FROM' "$top/Dockerfile" >"$tmp/out"
    not_ok "Dockerfile: every stage on Debian 12" "$tmp/out"
else
    ok "Dockerfile: build and runtime stages on Debian 12"
fi
if ! command -v apt-cache >/dev/null 2>&1 || [ "$(. /etc/os-release && echo "$VERSION_ID")" != 12 ]; then
    skip "Dockerfile packages exist in Debian 12" "not on Debian 12 with apt"
elif ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then
    skip "Dockerfile packages exist in Debian 12" "no apt lists (run apt-get update)"
else
    # One apt-cache call (each reads every list: about a second).
    pkgs=$(cut -d' ' -f2- "$tmp/stages" | tr ' ' '\n' | sort -u)
    # shellcheck disable=SC2086
    apt-cache show --no-all-versions $pkgs 2>/dev/null | sed -n 's/^Package: //p' | sort -u >"$tmp/known"
    echo "$pkgs" | grep -vxF -f "$tmp/known" | sed 's/$/: not in Debian 12/' >"$tmp/out"
    if [ -s "$tmp/out" ]; then not_ok "Dockerfile packages exist in Debian 12" "$tmp/out"
    else ok "Dockerfile packages exist in Debian 12 ($(echo "$pkgs" | wc -l))"; fi
fi
if ! command -v dpkg >/dev/null 2>&1 || ! command -v ldd >/dev/null 2>&1 || [ ! -x "$bin" ]; then
    skip "Dockerfile runtime stage has lookout's libraries" "no dpkg, ldd or lookout binary"
else
    # Each library's package, less those every Debian image has: the ones
    # an Essential package depends on (libc6, zlib1g...).  Sanitizer
    # runtimes (an ASan build) are no runtime dependency.
    : >"$tmp/out"
    dpkg-query -W -f='${Essential}|${Pre-Depends}, ${Depends}\n' |
        awk -F'|' '$1 == "yes" { print $2 }' | tr ',|' '\n\n' | sed 's/^ *//; s/[ :(].*//' |
        sort -u >"$tmp/base"
    found=0
    runtime=" $(sed -n 's/^runtime //p' "$tmp/stages") "
    for lib in $(ldd "$bin" | awk '/=> \// { print $3 }'); do
        case $lib in */libasan* | */libubsan*) continue ;; esac
        pkg=$( (dpkg -S "$lib" || dpkg -S "$(readlink -f "$lib")" ||
            dpkg -S "/usr$(readlink -f "$lib")") 2>/dev/null | head -n 1 | cut -d: -f1)
        if [ -z "$pkg" ]; then
            echo "$lib: no package owns it" >>"$tmp/out"
            continue
        fi
        found=$((found + 1))
        case $runtime in *" $pkg "*) ;; *)
            grep -qxF "$pkg" "$tmp/base" ||
                echo "$lib: package $pkg is not in the runtime stage" >>"$tmp/out" ;;
        esac
    done
    if [ -s "$tmp/out" ] || [ "$found" -eq 0 ]; then
        not_ok "Dockerfile runtime stage has lookout's libraries" "$tmp/out"
    else
        ok "Dockerfile runtime stage has lookout's libraries ($found, by ldd)"
    fi
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
