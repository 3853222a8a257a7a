#!/bin/sh
# The demo: installs what is missing, builds lookout, starts three fake Pulsar
# brokers (internal addresses 127.0.1.1-3:8080) and lookout with
# conf/demo.conf in front of them, shows what a client gets with and without
# lookout, then keeps serving until Ctrl-C.  If the brokers or lookout cannot
# start (a demo address in use, say), it stops with their own error messages
# and a non-zero exit.
#
#   LOOKOUT_DEMO_BIN=path/to/lookout tests/demo.sh   skip the deps and build
#                                                    steps, run that binary
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
if [ -n "${LOOKOUT_DEMO_BIN:-}" ]; then
    bin=$LOOKOUT_DEMO_BIN
else
    tests/deps.sh || exit 1
    echo "building lookout (build/plain) ..."
    tests/build.sh plain || exit 1
    bin="$top/build/plain/lookout"
fi
run=$(mktemp -d /tmp/lookout-demo.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$run"
}
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT

perl tests/integration/bin/fake-pulsar --quiet --dir "$run/brokers" \
    --broker http://127.0.1.1:8080,pulsar://127.0.1.1:6650 \
    --broker http://127.0.1.2:8080,pulsar://127.0.1.2:6650 \
    --broker http://127.0.1.3:8080,pulsar://127.0.1.3:6650 \
    --own orders=3 --own payments=2 >"$run/brokers.log" 2>&1 &
brokers=$!
pids="$pids $brokers"
"$bin" -c conf/demo.conf 2>"$run/lookout.log" &
lookout=$!
pids="$pids $lookout"

# Waits (bounded) for the brokers and lookout.  lookout logs "started" once
# every socket is bound; until then an answer on its ports may come from
# whatever else holds them, so the answers alone prove nothing.  A process
# that exits instead stops the demo with its own messages and exit code.
failed() {
    wait "$1"
    rc=$?
    [ "$rc" -ne 0 ] || rc=1
    echo "demo: $2 did not start:" >&2
    cat "$3" >&2
    exit "$rc"
}
i=0
until grep -q 'started with' "$run/lookout.log" &&
    curl -s -m 2 -o /dev/null http://127.0.1.3:8080/admin/v2/clusters; do
    kill -0 "$lookout" 2>/dev/null || failed "$lookout" lookout "$run/lookout.log"
    kill -0 "$brokers" 2>/dev/null || failed "$brokers" "the fake brokers" "$run/brokers.log"
    i=$((i + 1))
    if [ $i -gt 100 ]; then
        echo "demo: the brokers or lookout did not start within 10 s:" >&2
        cat "$run/brokers.log" "$run/lookout.log" >&2
        exit 1
    fi
    sleep 0.1
done

topic=admin/v2/persistent/public/default/orders/stats
show() { curl -s -m 5 -D - -o /dev/null "$1" | grep -i '^location:' | tr -d '\r'; }
cat <<MSG

== An admin call for topic 'orders', which broker b3 owns, sent to broker b1.

Straight to the broker, the 307 names its INTERNAL address:
  \$ curl -i http://127.0.1.1:8080/$topic
  $(show "http://127.0.1.1:8080/$topic")

Through lookout, at b1's external address, the same 307 names b3's EXTERNAL
address:
  \$ curl -i http://127.0.0.1:18081/$topic
  $(show "http://127.0.0.1:18081/$topic")

so curl -L (or pulsar-admin, Terraform...) completes the call from outside,
here through the cluster's service address:
  \$ curl -sL http://127.0.0.1:18080/$topic
  $(curl -sL -m 5 "http://127.0.0.1:18080/$topic" | cut -c1-110)...

== An HTTP lookup of 'orders'. The broker's answer names internal addresses:
  \$ curl http://127.0.1.1:8080/lookup/v2/topic/persistent/public/default/orders
  $(curl -s -m 5 http://127.0.1.1:8080/lookup/v2/topic/persistent/public/default/orders)

Through lookout, the lookup listener's (a client may name another listener
with ?listenerName= or the X-Pulsar-ListenerName header):
  \$ curl http://127.0.0.1:18080/lookup/v2/topic/persistent/public/default/orders
  $(curl -s -m 5 http://127.0.0.1:18080/lookup/v2/topic/persistent/public/default/orders)

== An HTTP lookup of an unowned topic: the broker redirects to the broker
   that will own it; lookout rewrites that redirect too.
  \$ curl -i http://127.0.0.1:18081/lookup/v2/topic/persistent/public/default/fresh
  $(show http://127.0.0.1:18081/lookup/v2/topic/persistent/public/default/fresh)

lookout's map: build/plain/lookout --check -c conf/demo.conf
lookout's log: $run/lookout.log
Serving until Ctrl-C.
MSG
wait
