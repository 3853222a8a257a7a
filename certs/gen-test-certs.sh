#!/bin/sh
# gen-test-certs.sh: make the throwaway TLS material that lookout's tests and demo use.
#
# Usage: certs/gen-test-certs.sh [DIR]     (DIR defaults to this script's directory)
#
# Two independent CAs, so a test can tell "the client trusts lookout" apart from
# "lookout trusts the brokers":
#   edge-ca.crt/.key       CA that clients (curl --cacert) trust for lookout itself
#   edge.crt/.key          lookout's default server cert: lookout.test, *.lookout.test,
#                          localhost, 127.0.0.1 .. 127.0.0.32
#   edge2.crt/.key         a second server cert (other.test, *.other.test) for SNI selection
#   internal-ca.crt/.key   CA that lookout trusts for brokers (tls.upstream_ca)
#   broker.crt/.key        fake brokers' cert: localhost, 127.0.0.1 .. 127.0.0.32
#   ticket.key             an 80-byte TLS session ticket key (tls.session_ticket_key in
#                          conf/lookout.conf), kept if it has the right size
#
# Client certificates (tls.verify_client), made and kept as one set:
#   client-ca.crt/.key     CA that lookout trusts for clients (tls.client_ca)
#   client.crt/.key        a good client: CN=client alice
#   client-revoked.crt/.key  CN=client revoked, listed in client.crl
#   client-expired.crt/.key  CN=client expired, valid only in January 2020
#   client.crl             client-ca's CRL revoking client-revoked (tls.client_crl)
#   client-none.crl        client-ca's CRL revoking nothing
#   other-ca.crt/.key      a CA lookout does not trust, and
#   client-other.crt/.key  CN=client other, signed by it
#
# Keys are EC P-256 (fast). The script is idempotent: a file set that exists, verifies
# against its CA, matches its key and is valid for another day is kept; anything else
# is regenerated (a new CA forces new leaves). It never prompts, and a lock makes
# concurrent runs (prove -j) safe. Needs only openssl (and flock, if present).
set -eu

script_dir=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$script_dir}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

command -v openssl >/dev/null 2>&1 || { echo "gen-test-certs: openssl not found" >&2; exit 1; }

# Serialise concurrent runs on the same directory.
if command -v flock >/dev/null 2>&1 && [ -z "${GEN_TEST_CERTS_LOCKED:-}" ]; then
    GEN_TEST_CERTS_LOCKED=1 exec flock "$dir/.gen-test-certs.lock" sh "$0" "$dir"
fi

umask 077                       # keys are private even when throwaway
tmp=$(mktemp -d "$dir/.gen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

# 127.0.0.1 .. 127.0.0.32: tests give each broker or listener its own loopback address.
loopback_ips() {
    i=1
    while [ $i -le 32 ]; do
        printf ',IP:127.0.0.%d' $i
        i=$((i + 1))
    done
}
EDGE_SAN="DNS:lookout.test,DNS:*.lookout.test,DNS:localhost$(loopback_ips)"
EDGE2_SAN="DNS:other.test,DNS:*.other.test"
BROKER_SAN="DNS:localhost$(loopback_ips)"

# new_key FILE: an EC P-256 private key in PKCS#8 PEM.
new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# san_of CRT: the subjectAltName line as openssl prints it ("DNS:a, IP Address:1.2.3.4").
san_of() {
    openssl x509 -in "$1" -noout -ext subjectAltName 2>/dev/null | sed -n "2s/^ *//p"
}

# cert_ok NAME CA [SAN]: NAME.crt/NAME.key exist, match, chain to CA.crt, live another day,
# and (for a leaf) carry exactly SAN, so editing the SAN list above regenerates.
# For a CA pass NAME as its own CA.
cert_ok() {
    [ -s "$dir/$1.crt" ] && [ -s "$dir/$1.key" ] || return 1
    openssl x509 -in "$dir/$1.crt" -noout -checkend 86400 >/dev/null 2>&1 || return 1
    openssl verify -CAfile "$dir/$2.crt" "$dir/$1.crt" >/dev/null 2>&1 || return 1
    a=$(openssl x509 -in "$dir/$1.crt" -noout -pubkey 2>/dev/null) || return 1
    b=$(openssl pkey -in "$dir/$1.key" -pubout 2>/dev/null) || return 1
    [ "$a" = "$b" ] || return 1
    [ -z "${3:-}" ] || [ "$(san_of "$dir/$1.crt")" = "$(echo "$3" | sed "s/IP:/IP Address:/g; s/,/, /g")" ]
}

# install NAME: move freshly made NAME.key/NAME.crt from $tmp into place. The key goes
# first, so a reader never pairs a new cert with an old key for long.
install_pair() {
    mv -f "$tmp/$1.key" "$dir/$1.key"
    chmod 644 "$tmp/$1.crt"
    mv -f "$tmp/$1.crt" "$dir/$1.crt"
}

# make_ca NAME CN
make_ca() {
    new_key "$tmp/$1.key"
    openssl req -new -x509 -batch -key "$tmp/$1.key" -out "$tmp/$1.crt" -days 3650 -sha256 \
        -subj "/O=lookout tests/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash" 2>/dev/null
    install_pair "$1"
    echo "gen-test-certs: made $dir/$1.crt"
}

# make_leaf NAME CA CN SAN: a server certificate signed by CA.
make_leaf() {
    new_key "$tmp/$1.key"
    openssl req -new -batch -key "$tmp/$1.key" -out "$tmp/$1.csr" -subj "/O=lookout tests/CN=$3" 2>/dev/null
    cat >"$tmp/$1.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
subjectAltName=$4
EOF
    # A random serial avoids a .srl file and collisions between reruns.
    openssl x509 -req -in "$tmp/$1.csr" -CA "$dir/$2.crt" -CAkey "$dir/$2.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 \
        -extfile "$tmp/$1.ext" -out "$tmp/$1.crt" 2>/dev/null
    install_pair "$1"
    echo "gen-test-certs: made $dir/$1.crt"
}

# ensure_ca NAME CN: keep or make a CA; a new CA invalidates its leaves, which
# cert_ok then catches because they no longer verify.
ensure_ca() {
    cert_ok "$1" "$1" || make_ca "$1" "$2"
}
ensure_leaf() {
    cert_ok "$1" "$2" "$4" || make_leaf "$1" "$2" "$3" "$4"
}

ensure_ca   edge-ca     "lookout edge test CA"
ensure_leaf edge        edge-ca     lookout.test "$EDGE_SAN"
ensure_leaf edge2       edge-ca     other.test   "$EDGE2_SAN"
ensure_ca   internal-ca "lookout internal test CA"
ensure_leaf broker      internal-ca localhost    "$BROKER_SAN"

# make_client_set: the client CA's certificates and CRLs, through `openssl ca` (the
# expired one needs dates in the past, the CRLs its database).
make_client_set() {
    make_ca client-ca "lookout client test CA"
    make_ca other-ca "lookout other test CA"
    make_leaf client client-ca "client alice" "DNS:alice.client.test"
    make_leaf client-other other-ca "client other" "DNS:other.client.test"
    : >"$tmp/index.txt"
    echo 01 >"$tmp/crlnumber"
    openssl rand -hex 16 >"$tmp/serial"
    cat >"$tmp/ca.cnf" <<EOF
[ca]
default_ca = c
[c]
database = $tmp/index.txt
new_certs_dir = $tmp
certificate = $dir/client-ca.crt
private_key = $dir/client-ca.key
default_md = sha256
policy = p
crlnumber = $tmp/crlnumber
serial = $tmp/serial
default_crl_days = 3650
unique_subject = no
[p]
organizationName = optional
commonName = supplied
[ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
EOF
    for n in revoked expired; do
        new_key "$tmp/client-$n.key"
        openssl req -new -batch -key "$tmp/client-$n.key" -out "$tmp/client-$n.csr" \
            -subj "/O=lookout tests/CN=client $n" 2>/dev/null
    done
    openssl ca -batch -config "$tmp/ca.cnf" -extensions ext -days 825 -notext \
        -in "$tmp/client-revoked.csr" -out "$tmp/client-revoked.crt" 2>/dev/null
    openssl ca -batch -config "$tmp/ca.cnf" -extensions ext -notext \
        -startdate 20200101000000Z -enddate 20200131000000Z \
        -in "$tmp/client-expired.csr" -out "$tmp/client-expired.crt" 2>/dev/null
    openssl ca -batch -config "$tmp/ca.cnf" -gencrl -out "$tmp/client-none.crl" 2>/dev/null
    openssl ca -batch -config "$tmp/ca.cnf" -revoke "$tmp/client-revoked.crt" \
        -crl_reason keyCompromise 2>/dev/null
    openssl ca -batch -config "$tmp/ca.cnf" -gencrl -out "$tmp/client.crl" 2>/dev/null
    install_pair client-revoked
    install_pair client-expired
    chmod 644 "$tmp/client-none.crl" "$tmp/client.crl"
    mv -f "$tmp/client-none.crl" "$dir/client-none.crl"
    mv -f "$tmp/client.crl" "$dir/client.crl"
    echo "gen-test-certs: made the client set in $dir"
}

# client_set_ok: every file of the set is there and good, and client.crl is
# client-ca's and revokes client-revoked.
client_set_ok() {
    cert_ok client-ca client-ca && cert_ok other-ca other-ca &&
        cert_ok client client-ca && cert_ok client-other other-ca &&
        cert_ok client-revoked client-ca || return 1
    [ -s "$dir/client-expired.key" ] && [ -s "$dir/client-none.crl" ] || return 1
    openssl verify -no_check_time -CAfile "$dir/client-ca.crt" "$dir/client-expired.crt" \
        >/dev/null 2>&1 || return 1
    openssl crl -in "$dir/client.crl" -CAfile "$dir/client-ca.crt" -noout 2>/dev/null || return 1
    serial=$(openssl x509 -in "$dir/client-revoked.crt" -noout -serial | sed 's/^serial=//')
    openssl crl -in "$dir/client.crl" -noout -text 2>/dev/null | grep -q "Serial Number: $serial"
}
client_set_ok || make_client_set

if [ ! -f "$dir/ticket.key" ] || [ "$(wc -c <"$dir/ticket.key")" -ne 80 ]; then
    openssl rand -out "$tmp/ticket.key" 80
    mv "$tmp/ticket.key" "$dir/ticket.key"
    echo "gen-test-certs: made $dir/ticket.key"
fi
