#!/bin/sh
# Installs the Debian packages lookout needs to build, test and run its demo,
# skipping those already present.  Needs root (or sudo) only when something
# is missing.
set -e
PKGS="autoconf automake libtool pkg-config make gcc libc6-dev
libevent-dev libssl-dev libjansson-dev zlib1g-dev node-llhttp
libprotobuf-c-dev protobuf-c-compiler
curl openssl perl libio-socket-ssl-perl python3 procps iproute2"
# prometheus_client's parser reads /metrics in 96-observe.t (Debian's prometheus,
# with promtool, is 96 MB installed; this is 200 kB).
PKGS="$PKGS python3-prometheus-client"
# HAProxy in front of lookout, sending the PROXY protocol (129-proxy-protocol.t).
PKGS="$PKGS haproxy"
# The Kafka fixtures and the clients run against them: librdkafka's mock
# cluster (tests/kafka/kafka-mock), kcat, kafka-python (run with
# /usr/bin/python3), and tshark to decode the test broker's bytes
# independently (tests/integration/100-kafka-fixtures.t).
PKGS="$PKGS librdkafka-dev kcat python3-kafka tshark"
# stunnel4 terminates TLS in front of the mock's brokers, so that lookout's TLS to
# Kafka brokers is tested against a server nobody here wrote (104-kafka-tls.t);
# util-linux's unshare gives kcat a private /etc/hosts for SNI names there.
PKGS="$PKGS stunnel4 util-linux mount"
# kafkajs and pulsar-flex come from npm (tests/kafka/package-lock.json and
# tests/pulsar/package-lock.json pin them), so node and npm are needed; Debian's
# nodejs and npm when the machine has neither.
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"
# A real ZooKeeper for the listener map read live from the cluster (issue 11):
# Debian's zookeeper (its jars, started by tests/integration/lib/ZooKeeper.pm
# on a loopback port; it brings a JRE), the official C client lookout links,
# and kazoo, which writes registrations and holds ephemeral znodes in tests.
PKGS="$PKGS zookeeper libzookeeper-mt-dev python3-kazoo"
# groff and man check the man pages, systemd-analyze the unit
# (tests/install/lint.sh).
PKGS="$PKGS groff-base man-db systemd"
# clang with libFuzzer for tests/fuzz/run.sh, which tests/check.sh (and so
# CI) runs; LOOKOUT_FUZZ=no leaves them out.
# liburing for io_uring, built in by configure when it is there (proxy/lk_uring.c:
# reads and sends gathered per loop iteration); without it the build uses readv and writev.
PKGS="$PKGS liburing-dev"
# strace counts the system calls a TLS client's reads make, which the ring
# takes over (141-io-uring.t).
PKGS="$PKGS strace"
[ "${LOOKOUT_FUZZ:-yes}" != no ] && PKGS="$PKGS clang libclang-rt-14-dev"
[ -n "$LOOKOUT_EXTRA_PKGS" ] && PKGS="$PKGS $LOOKOUT_EXTRA_PKGS"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done

if [ -n "$missing" ]; then
    echo "deps: installing:$missing"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "deps: these packages are missing and I am not root:$missing" >&2
            exit 1
        }
        SUDO=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    # wireshark-common asks whether non-root users may capture; answer no
    # (the tests capture as root) so that the install never waits for a human.
    case " $missing " in
    *" tshark "*)
        echo "wireshark-common wireshark-common/install-setuid boolean false" |
            $SUDO debconf-set-selections 2>/dev/null || true
        ;;
    esac
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The npm packages of a directory of the tree, into its node_modules (ignored by
# git), exactly as its lock file says; again only when the lock file changed
# since the last install.
top=$(cd "$(dirname "$0")/.." && pwd)
npm_ci() {
    dir="$top/$1"
    cmp -s "$dir/package-lock.json" "$dir/node_modules/.lookout-lock" 2>/dev/null && return 0
    echo "deps: npm ci in $1"
    (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) >&2
    cp "$dir/package-lock.json" "$dir/node_modules/.lookout-lock"
}
npm_ci tests/kafka     # kafkajs (103-kafka-clients.t)
npm_ci tests/pulsar    # pulsar-flex (107-pulsar-fixtures.t)
# kubernetes-models (the Kubernetes API schemas and types), typescript and yaml, for
# the offline check of the Kubernetes manifests (deploy/kubernetes/check.sh).
npm_ci deploy/kubernetes/check

# librdkafka 2.15.1 for the real KIP-1102 client in 124-kafka-rebootstrap.t
# (Debian's 2.0.2 predates it), built from the C source bundled in the npm
# package @confluentinc/kafka-javascript into /var/cache/lookout-tests, once per
# machine (tests/kafka/rdkafka-new.sh; about 2 minutes).  A failure only warns:
# that subtest then skips and says why.  LOOKOUT_RDKAFKA_NEW=no leaves it out.
[ "${LOOKOUT_RDKAFKA_NEW:-yes}" != no ] && "$top/tests/kafka/rdkafka-new.sh"
exit 0
