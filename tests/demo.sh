#!/bin/sh
# The demo: installs what is missing, builds lookout, starts test brokers and
# lookout with conf/demo.conf in front of them, shows what a client gets with
# and without lookout on each protocol, then keeps serving until Ctrl-C:
#   - Pulsar over HTTP: three fake brokers (tests/integration/bin/fake-pulsar)
#     on 127.0.1.1-3:8080;
#   - Pulsar's binary protocol: three test brokers
#     (tests/integration/bin/pulsar-testbroker) on 127.0.1.1-3:6650, and a
#     lookup by tests/integration/bin/pulsar-probe;
#   - Kafka: a three-broker test cluster (tests/integration/bin/kafka-testbroker)
#     on 127.0.1.11-13:9092, and kcat -L.  (librdkafka's mock cluster would
#     do, but it binds only ephemeral ports on 127.0.0.1, and the demo's
#     addresses are fixed, as conf/demo.conf names them.)
# If any of them cannot start (a demo address in use, say), it stops with
# their own error messages and a non-zero exit.
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
for tool in curl kcat python3 perl; do
    command -v "$tool" >/dev/null || {
        echo "demo: $tool is not installed (tests/deps.sh installs it)" >&2
        exit 1
    }
done
run=$(mktemp -d /tmp/lookout-demo.XXXXXX)
pids=""
# Stops what the demo started: TERM, and their standard input closed; what
# is still there 5 s later (a broker caught by Ctrl-C mid-way through its
# own shutdown, say) is killed, so the demo always ends.
cleanup() {
    exec 3>&-
    for p in $pids; do kill "$p" 2>/dev/null; done
    n=0
    left=""
    while [ $n -lt 50 ]; do
        left=""
        for p in $pids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
        [ -n "$left" ] || break
        n=$((n + 1))
        sleep 0.1
    done
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$run"
}
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT

# The test brokers serve until their standard input ends: it is a FIFO that
# only this shell holds open for writing (fd 3, closed in each child), so
# they go away with the demo however it ends.
mkfifo "$run/hold" || exit 1
exec 3<>"$run/hold"

perl tests/integration/bin/fake-pulsar --dir "$run/brokers" \
    --broker http://127.0.1.1:8080,pulsar://127.0.1.1:6650 \
    --broker http://127.0.1.2:8080,pulsar://127.0.1.2:6650 \
    --broker http://127.0.1.3:8080,pulsar://127.0.1.3:6650 \
    --own orders=3 --own payments=2 >"$run/brokers.log" 2>&1 3>&- &
http_brokers=$!
pids="$pids $http_brokers"
python3 tests/integration/bin/pulsar-testbroker --lifetime 0 --unknown-fields off \
    --internal-listener internal \
    --broker b1=internal:pulsar://127.0.1.1:6650,external:pulsar://127.0.1.10:16651 \
    --broker b2=internal:pulsar://127.0.1.2:6650,external:pulsar://127.0.1.10:16652 \
    --broker b3=internal:pulsar://127.0.1.3:6650,external:pulsar://127.0.1.10:16653 \
    --topic orders=b3 --topic payments=b2 \
    <"$run/hold" >"$run/pulsar.log" 2>&1 3>&- &
bin_brokers=$!
pids="$pids $bin_brokers"
python3 tests/integration/bin/kafka-testbroker --lifetime 0 --unknown-tags none \
    --node 1=127.0.1.11:9092 --node 2=127.0.1.12:9092 --node 3=127.0.1.13:9092 \
    --listen-nodes --topic orders:3 \
    <"$run/hold" >"$run/kafka.log" 2>&1 3>&- &
kafka=$!
pids="$pids $kafka"
"$bin" -c conf/demo.conf 2>"$run/lookout.log" 3>&- &
lookout=$!
pids="$pids $lookout"

# Waits (bounded) for each to say it serves: fake-pulsar "ready", the test
# brokers their JSON line (printed once every socket is bound), lookout
# "started with" (logged once every socket is bound).  Until then an answer
# on a demo port may come from whatever else holds it, so answers alone
# prove nothing.  A process that exits instead stops the demo with its own
# messages and exit code.
failed() {
    wait "$1"
    rc=$?
    [ "$rc" -ne 0 ] || rc=1
    echo "demo: $2 did not start:" >&2
    cat "$3" >&2
    exit "$rc"
}
i=0
until grep -q 'fake-pulsar: ready' "$run/brokers.log" &&
    grep -q '^{"brokers"' "$run/pulsar.log" &&
    grep -q '^{"bootstrap"' "$run/kafka.log" &&
    grep -q 'started with' "$run/lookout.log"; do
    kill -0 "$lookout" 2>/dev/null || failed "$lookout" lookout "$run/lookout.log"
    kill -0 "$http_brokers" 2>/dev/null ||
        failed "$http_brokers" "the fake Pulsar brokers (HTTP)" "$run/brokers.log"
    kill -0 "$bin_brokers" 2>/dev/null ||
        failed "$bin_brokers" "the Pulsar test brokers (binary)" "$run/pulsar.log"
    kill -0 "$kafka" 2>/dev/null || failed "$kafka" "the Kafka test brokers" "$run/kafka.log"
    i=$((i + 1))
    if [ $i -gt 600 ]; then
        echo "demo: the brokers or lookout did not start within 60 s:" >&2
        cat "$run/brokers.log" "$run/pulsar.log" "$run/kafka.log" "$run/lookout.log" >&2
        exit 1
    fi
    sleep 0.1
done

# kcat -L's broker list, one line per broker, or kcat's own error.
brokers() {
    kcat -L -b "$1" -t orders -m 10 2>&1 | sed -n 's/^ *\(broker [0-9]* at .*\)/  \1/p; s/^% ERROR: /  kcat: /p'
}
# A binary lookup of 'orders' as clients make it (pulsar-probe follows
# Redirects to the brokerServiceUrl they name): one line per answer.
plookup() {
    python3 tests/integration/bin/pulsar-probe "$1" '{"lookup": "orders", "follow": 3}' 2>&1 | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        d = json.loads(line)
    except ValueError:
        print("  pulsar-probe: " + line.strip())
        continue
    for h in d.get("hops", []):
        f = h.get("fields") or {}
        kind = {0: "Redirect to", 1: "Connect to", 2: "Failed:"}.get(f.get("response"), "?")
        print("  asked %s: %s %s" % (h["address"], kind, f.get("brokerServiceUrl", f.get("message", ""))))
'
}

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

== Kafka: the broker list (kcat -L), topic 'orders' on three brokers.

Straight from the brokers, their INTERNAL addresses:
  \$ kcat -L -b 127.0.1.11:9092
$(brokers 127.0.1.11:9092)

Through lookout, at its bootstrap address, every broker's EXTERNAL one:
  \$ kcat -L -b 127.0.1.10:19092
$(brokers 127.0.1.10:19092)

== Pulsar binary protocol: a LOOKUP of 'orders', which broker b3 owns.

A client asks broker b1 and follows the Redirect, as Pulsar clients do.
Straight to the brokers, the answers name b3's INTERNAL address:
  \$ pulsar-probe 127.0.1.1:6650 '{"lookup": "orders", "follow": 3}'
$(plookup 127.0.1.1:6650)

Through lookout, at b1's external address, they name b3's EXTERNAL one, so
the client's next hop reaches b3 through lookout too:
  \$ pulsar-probe 127.0.1.10:16651 '{"lookup": "orders", "follow": 3}'
$(plookup 127.0.1.10:16651)

lookout's map: build/plain/lookout --check -c conf/demo.conf
lookout's log: $run/lookout.log
Serving until Ctrl-C.
MSG
wait
