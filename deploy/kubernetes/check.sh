#!/bin/sh
# check.sh: checks deploy/kubernetes/ offline, in a few seconds.
#
#   deploy/kubernetes/check.sh          (LOOKOUT_BIN: the lookout to run; default build/plain/lookout)
#
# 1. Every manifest kustomization.yaml lists, and the ConfigMap it makes of
#    lookout.conf, against the Kubernetes 1.32 schemas and types, plus what the
#    fleet relies on (check/validate.js says what; its npm packages are pinned by
#    check/package-lock.json and installed by tests/deps.sh); the same for what
#    kustomize builds of them, when kubectl is on the machine (else skipped).
# 2. That the check can fail: copies of the manifests, each broken one way (a
#    field of the wrong type, an unknown field, a required field missing, bad
#    YAML, an unknown kind, a grace period shorter than the drain, a port the
#    pod does not have, a pod the namespace's Pod Security Standard refuses),
#    must each be refused, naming the field.
# 3. lookout.conf, taken from the ConfigMap, through `lookout --check`, with the
#    test certificates of certs/gen-test-certs.sh where the Secret would be.
#    A key the binary does not know fails the check, and a config with a
#    misspelt key must fail.
# The last line is "N passed, N failed, N skipped"; the exit status is 1 on a failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=${LOOKOUT_BIN:-$top/build/plain/lookout}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass=0
fail=0
skip=0
n=0
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $*"; }
skipped() { n=$((n + 1)); skip=$((skip + 1)); echo "ok $n - # SKIP $*"; }
finish() {
    echo "$pass passed, $fail failed, $skip skipped"
    [ "$fail" -eq 0 ]
    exit
}

if [ ! -d "$here/check/node_modules/kubernetes-models" ]; then
    not_ok "deploy/kubernetes/check/node_modules is missing: run tests/deps.sh (npm ci there)"
    finish
fi

# 1. The manifests, and what kustomize builds of them when kubectl is here (what
# `kubectl apply -k` sends: the ConfigMap under its hashed name, which the
# Deployment must mount, the namespace, the image): validate.js's lines, each
# counted as ours.
mkdir -p "$tmp/conf" "$tmp/tls"
built=""
if command -v kubectl >/dev/null 2>&1 && kubectl kustomize --help >/dev/null 2>&1; then
    if kubectl kustomize "$here" >"$tmp/built.yaml" 2>"$tmp/built.err"; then
        ok "kubectl kustomize builds it (in built.yaml below)"
        built="$tmp/built.yaml"
    else
        not_ok "kubectl kustomize failed: $(head -n 3 "$tmp/built.err")"
    fi
else
    skipped "kubectl kustomize: no kubectl with kustomize on this machine"
fi
# shellcheck disable=SC2086
node "$here/check/validate.js" "$here" $built --conf-out "$tmp/conf/lookout.conf" >"$tmp/manifests.log" 2>&1
if grep -qE '^[0-9]+ passed, [0-9]+ failed$' "$tmp/manifests.log"; then
    while IFS= read -r line; do
        case $line in
        "ok "*) ok "manifest: ${line#ok * - }" ;;
        "not ok "*) not_ok "manifest: ${line#not ok * - }" ;;
        "#   "*) echo "$line" ;;
        esac
    done <"$tmp/manifests.log"
else
    not_ok "manifests: validate.js did not finish"
    sed 's/^/    /' "$tmp/manifests.log"
fi

# 2. Broken copies, each of which must be refused with the message given; all
# are checked in one run of validate.js (one compiler start), each on its own.
# broken FILE SED-EXPRESSION EXPECTED-TEXT NAME
cases=0
broken() {
    cases=$((cases + 1))
    mkdir -p "$tmp/broken/case$cases"
    cp "$here"/*.yaml "$here"/lookout.conf "$tmp/broken/case$cases/"
    sed -e "$2" "$here/$1" >"$tmp/broken/case$cases/$1"
    printf '%s\t%s\t%s\n' "$1" "$3" "$4" >"$tmp/broken/case$cases.want"
}
broken deployment.yaml 's/^  replicas: 3$/  replicas: "3"/' \
    'Deployment lookout: /spec/replicas: must be integer' \
    "a field of the wrong type"
broken service.yaml 's/^  externalTrafficPolicy: Local$/  externalTraficPolicy: Local/' \
    'Service lookout: /spec/externalTraficPolicy: unknown field: ServiceSpec has no field externalTraficPolicy' \
    "an unknown field"
broken service.yaml '/^      port: 8443$/d' \
    'Service lookout: /spec/ports/0: must have required property port' \
    "a required field missing"
broken pdb.yaml 's/^  unhealthyPodEvictionPolicy: AlwaysAllow$/  unhealthyPodEvictionPolicy: Always/' \
    '/spec/unhealthyPodEvictionPolicy: must be equal to one of the allowed values' \
    "a value outside its enum"
broken pdb.yaml 's/^  maxUnavailable: 1$/  maxUnavailable: [1/' \
    'pdb.yaml: document 1:' \
    "YAML that does not parse"
broken pdb.yaml 's/^kind: PodDisruptionBudget$/kind: PodDisruptionBudgets/' \
    'no schema for apiVersion policy/v1, kind PodDisruptionBudgets' \
    "an unknown kind"
broken deployment.yaml 's/terminationGracePeriodSeconds: 60$/terminationGracePeriodSeconds: 45/' \
    'terminationGracePeriodSeconds: 45 s is not above the preStop sleep (15 s) plus drain_timeout (30 s)' \
    "a grace period shorter than preStop and drain"
broken service.yaml 's/targetPort: kafka-ssl$/targetPort: kafka/' \
    '/spec/ports/2/targetPort: no container port is named kafka' \
    "a Service port the pod does not have"
broken deployment.yaml 's/allowPrivilegeEscalation: false$/allowPrivilegeEscalation: true/' \
    '/spec/template/spec/containers/0/securityContext/allowPrivilegeEscalation: must be false (restricted Pod Security Standard)' \
    "a pod the restricted Pod Security Standard refuses"
broken lookout.conf 's|^serviceUrl = pulsar+ssl://pulsar.example.com:6651$|serviceUrl = pulsar+ssl://pulsar.example.com:6650|' \
    "[pulsar prod] serviceUrl's port 6650 is not a container port" \
    "a service address on a port the pod does not open"
i=0
dirs=""
while [ $i -lt $cases ]; do
    i=$((i + 1))
    dirs="$dirs $tmp/broken/case$i"
done
# shellcheck disable=SC2086
node "$here/check/validate.js" $dirs >"$tmp/broken.log" 2>&1
i=0
while [ $i -lt $cases ]; do
    i=$((i + 1))
    IFS='	' read -r file want name <"$tmp/broken/case$i.want"
    if cmp -s "$here/$file" "$tmp/broken/case$i/$file"; then
        not_ok "refused: $name: the edit did not apply to $file (update this test)"
    elif grep -q "^# case$i: [0-9]* passed, 0 failed\$" "$tmp/broken.log"; then
        not_ok "refused: $name: validate.js accepted it"
    elif grep "^#   case$i: " "$tmp/broken.log" | grep -qF -- "$want"; then
        ok "refused: $name"
        grep "^#   case$i: " "$tmp/broken.log" | grep -F -- "$want" | head -n 1 | sed "s/^#   case$i: /    got: /"
    else
        not_ok "refused: $name: not with \"$want\""
        grep "case$i: " "$tmp/broken.log" | sed 's/^/    /'
    fi
done

# 3. lookout.conf from the ConfigMap through lookout --check.
if [ ! -x "$bin" ]; then
    skipped "lookout --check: no lookout at $bin (build it: tests/build.sh plain)"
    skipped "lookout --check refuses a misspelt key: no lookout at $bin"
    finish
fi
if ! sh "$top/certs/gen-test-certs.sh" "$tmp/certs" >"$tmp/certs.log" 2>&1; then
    not_ok "certs/gen-test-certs.sh failed: $(tail -n 1 "$tmp/certs.log")"
    finish
fi
cp "$tmp/certs/edge.crt" "$tmp/tls/tls.crt"
cp "$tmp/certs/edge.key" "$tmp/tls/tls.key"
if "$bin" --check -c "$tmp/conf/lookout.conf" >"$tmp/check.log" 2>&1 &&
    grep -q 'is valid$' "$tmp/check.log"; then
    ok "lookout --check accepts lookout.conf from the ConfigMap"
else
    not_ok "lookout --check refuses lookout.conf from the ConfigMap:"
    sed 's/^/    /' "$tmp/check.log"
fi
# The same check must refuse a config with a misspelt key.
sed 's/^drain_timeout = /drain_timout = /' "$tmp/conf/lookout.conf" >"$tmp/conf/misspelt.conf"
if cmp -s "$tmp/conf/lookout.conf" "$tmp/conf/misspelt.conf"; then
    not_ok "lookout --check refuses a misspelt key: the edit did not apply (update this test)"
elif "$bin" --check -c "$tmp/conf/misspelt.conf" >"$tmp/misspelt.log" 2>&1; then
    not_ok "lookout --check accepted drain_timout"
elif grep -q 'drain_timout: unknown key' "$tmp/misspelt.log"; then
    ok "lookout --check refuses a misspelt key"
    grep 'unknown key' "$tmp/misspelt.log" | head -n 1 | sed 's/^/    got: /'
else
    not_ok "lookout --check refused drain_timout, but not as an unknown key:"
    sed 's/^/    /' "$tmp/misspelt.log"
fi
finish
