#!/usr/bin/perl
# 50-tls.t: TLS (issue 2 item 6). lookout terminates TLS with certificates chosen by SNI
# against their SAN (the first is the default), speaks only TLS 1.2 and 1.3, offers ALPN
# http/1.1, routes by SNI (then Host) on a shared https socket with 421 for a name it does
# not map, and connects to https brokers with TLS verified against tls.upstream_ca (502
# when that fails).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

need_tools('openssl');
need_modules('IO::Socket::SSL');

my $certs = test_certs();
my $dir = tmp_dir();
my ($p1, $p3) = (free_port(), free_port());
my $p2s = free_port('127.0.0.2');
my $p4s = free_port('127.0.0.33');    # 127.0.0.33 is not in broker.crt's SANs
my ($s, $w, $t3) = free_ports(3);
my $c = PulsarBroker->start(dir => "$dir/brokers", cert => $certs->{broker_crt}, key => $certs->{broker_key},
                            brokers => [ "127.0.0.1:$p1", "https://127.0.0.2:$p2s", "127.0.0.1:$p3", "https://127.0.0.33:$p4s" ]);

my $tls_keys = <<"EOF";
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
tls.certificate = $certs->{edge2_crt}
tls.key = $certs->{edge2_key}
EOF

# Main instance: b1 (plain internal) and b2 (https internal) share https socket $s by
# name; b3 has an IP-literal https address; the service address is https too.
my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
${tls_keys}tls.upstream_ca = $certs->{internal_ca}
timeout.connect = 2s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = https://127.0.0.1:$w
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = @{[ $c->internal_listeners(1) ]},external:https://b1.lookout.test:$s

[broker prod/b2]
advertisedListeners = @{[ $c->internal_listeners(2) ]},external:https://b2.lookout.test:$s

[broker prod/b3]
advertisedListeners = @{[ $c->internal_listeners(3) ]},external:https://127.0.0.1:$t3
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

my @ca = ('--cacert', $certs->{edge_ca});
my @resolve = map { ('--resolve', "$_.lookout.test:$s:127.0.0.1") } qw(b1 b2 x);

# s_client(PORT, [ARGS...]): run openssl s_client against 127.0.0.1:PORT, bounded; returns
# { out, protocol, alpn, subject, san, verify }.
sub s_client {
    my ($port, @args) = @_;
    my $out = qx{timeout 8 openssl s_client -connect 127.0.0.1:$port @args </dev/null 2>&1};
    my %r = (out => $out, rc => $? >> 8);
    # s_client prints a "Protocol" line even for a failed handshake: only trust it when
    # a cipher was agreed.
    $r{established} = $out =~ /^(?:New|Reused), \S+, Cipher is (?!\(NONE\))/m ? 1 : 0;
    # The "New, VERSION, Cipher" line names the cipher's version (TLSv1.0 for a TLS 1.1
    # session); the SSL-Session "Protocol" line, when printed, names the protocol.
    if ($r{established}) {
        ($r{protocol}) = $out =~ /^\s*Protocol\s*:\s*(\S+)/m;
        ($r{protocol}) = $out =~ /^(?:New|Reused), (\S+), Cipher is/m unless $r{protocol};
    }
    $r{alpn} = $out =~ /^ALPN protocol: (\S+)/m ? $1 : $out =~ /No ALPN negotiated/ ? 'none' : undef;
    ($r{verify}) = $out =~ /Verify return code: (\d+)/;
    if ($out =~ /(-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----)/s) {
        my $f = spew("$dir/peer.pem", "$1\n");
        my $x = qx{openssl x509 -in $f -noout -subject -ext subjectAltName 2>&1};
        ($r{subject}) = $x =~ /^subject=\s*(.*)$/m;
        ($r{san}) = $x =~ /Subject Alternative Name:.*\n\s*(.*)/;
    }
    return \%r;
}

subtest 'certificate chosen by SNI' => sub {
    my %cases = (
        'other.test'      => qr/DNS:other\.test/,
        'x.other.test'    => qr/DNS:other\.test/,
        'b1.lookout.test' => qr/DNS:lookout\.test/,
        'lookout.test'    => qr/DNS:lookout\.test/,
        'unknown.example' => qr/DNS:lookout\.test/,
    );
    for my $sni (sort keys %cases) {
        my $r = s_client($w, '-servername', $sni, '-CAfile', $certs->{edge_ca});
        like($r->{san} // '', $cases{$sni}, "SNI $sni: the right certificate") or diag($r->{out});
        is($r->{verify}, 0, '... which verifies against the edge CA');
    }
    my $r = s_client($w, '-noservername');
    like($r->{san} // '', qr/DNS:lookout\.test/, 'no SNI: the first certificate (the default)') or diag($r->{out});
    unlike($r->{san} // '', qr/other\.test/, '... not the second');
    # The same on the shared socket and the IP-literal one.
    like(s_client($s, '-servername', 'other.test')->{san} // '', qr/other\.test/, 'shared socket: SNI other.test gets edge2');
    like(s_client($t3, '-noservername')->{san} // '', qr/lookout\.test/, 'IP-literal socket: default certificate');
};

subtest 'TLS versions' => sub {
    # First prove this openssl client can speak TLS 1.1 at all (seclevel 0), against a
    # throwaway s_server, so that a refusal below is lookout's.
    my $port = free_port();
    my $pid = fork;
    if ($pid == 0) {
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', '/dev/null';
        { no warnings 'exec'; exec 'timeout', '10', 'openssl', 's_server', '-accept', "127.0.0.1:$port", '-cert', $certs->{edge_crt},
             '-key', $certs->{edge_key}, '-tls1_1', '-cipher', 'DEFAULT@SECLEVEL=0', '-www'; }
        POSIX::_exit(127);
    }
    wait_port('127.0.0.1', $port, 5);
    my $ctl = s_client($port, '-tls1_1', '-cipher', 'DEFAULT@SECLEVEL=0');
    kill 'TERM', $pid;
    waitpid $pid, 0;
    my $can11 = ($ctl->{protocol} // '') eq 'TLSv1.1';
    ok($can11, 'control: this client speaks TLS 1.1 to a server that allows it') or diag($ctl->{out});

    for my $v ([ '-tls1_1', 'TLSv1.1' ], [ '-tls1', 'TLSv1' ]) {
        my $r = s_client($w, $v->[0], '-cipher', 'DEFAULT@SECLEVEL=0', '-servername', 'lookout.test');
        ok(!$r->{established}, "$v->[1] refused: no session") or diag($r->{out});
        like($r->{out}, qr/alert protocol version|unsupported protocol|no protocols available|wrong version/i,
             '... for the protocol version');
    }
    for my $v ([ '-tls1_2', 'TLSv1.2' ], [ '-tls1_3', 'TLSv1.3' ]) {
        my $r = s_client($w, $v->[0], '-servername', 'lookout.test');
        is($r->{protocol}, $v->[1], "$v->[1] accepted") or diag($r->{out});
    }
    ok($lk->alive, 'lookout still running');
};

subtest 'ALPN' => sub {
    is(s_client($w, '-alpn', 'http/1.1')->{alpn}, 'http/1.1', 'http/1.1 offered: selected');
    is(s_client($w, '-alpn', 'h2,http/1.1')->{alpn}, 'http/1.1', 'h2,http/1.1 offered: http/1.1 selected');
    my $r = s_client($w, '-alpn', 'h2');
    isnt($r->{alpn} // 'none', 'h2', 'h2 only: never h2');
    $r = curl(@ca, '--http2', "https://127.0.0.1:$w/test/headers");
    is($r->{status}, 200, 'curl --http2: falls back to HTTP/1.1, 200');
    like($r->{head}, qr{^HTTP/1\.1 200}, '... over HTTP/1.1');
};

subtest 'https to a broker through lookout' => sub {
    my $r = curl(@ca, @resolve, "https://b1.lookout.test:$s/test/headers");
    is($r->{status}, 200, 'curl --cacert edge-ca.crt https://b1.lookout.test: 200');
    is($r->{headers}{'x-fake-broker'}, 'b1', '... from b1');
    my $j = eval { decode_json($r->{body}) } // {};
    is_deeply([ map { $_->[1] } grep { $_->[0] =~ /^x-forwarded-proto$/i } @{ $j->{headers} // [] } ], ['https'],
              '... X-Forwarded-Proto: https');
    ok(!$j->{tls}, '... b1 is plaintext inside');
    $r = curl(@ca, "https://127.0.0.1:$t3/test/headers");
    is($r->{headers}{'x-fake-broker'}, 'b3', 'IP-literal https address: b3');
    $r = curl(@ca, "https://127.0.0.1:$w/test/headers");
    is($r->{status}, 200, 'the https service address: 200');
    # Plain HTTP to a TLS socket: refused, and nothing breaks.
    my ($raw, $how) = http_raw('127.0.0.1', $s, "GET /test/headers HTTP/1.1\r\nHost: b1.lookout.test\r\n\r\n", timeout => 3);
    ok($how eq 'eof' || $how eq 'reset', 'plaintext HTTP on the TLS socket: closed') or diag("how $how: $raw");
    unlike($raw, qr/X-Fake-Broker/, '... never forwarded');
    is(curl(@ca, @resolve, "https://b1.lookout.test:$s/test/status?code=201")->{status}, 201, 'TLS still fine after that');
};

subtest 'TLS to an https broker, verified with tls.upstream_ca' => sub {
    $c->clear_log(2);
    my $r = curl(@ca, @resolve, "https://b2.lookout.test:$s/test/headers");
    is($r->{status}, 200, 'b2 (https inside): 200');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... from b2');
    my @seen = $c->requests(2);
    ok(@seen && $seen[-1]{tls}, '... which b2 received over TLS');
    my $n = 8 * 1024 * 1024;
    $r = curl({ timeout => 30 }, @ca, @resolve, "https://b2.lookout.test:$s/test/bytes?n=$n");
    is(sha256_hex($r->{body}), PulsarBroker::test_bytes_sha256($n), '8 MiB down, TLS on both sides: intact');
    spew("$dir/up", PulsarBroker::test_bytes(1_000_000));
    $r = curl({ timeout => 30 }, @ca, @resolve, '-T', "$dir/up", "https://b2.lookout.test:$s/test/echo");
    is(eval { decode_json($r->{body})->{sha256} }, sha256_hex(PulsarBroker::test_bytes(1_000_000)), '1 MB up: intact');
    # Keep-alive both sides over TLS.
    $r = curl('-v', @ca, @resolve, "https://b2.lookout.test:$s/test/status?code=201", "https://b2.lookout.test:$s/test/status?code=202");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 201, 202 ], 'two requests on one TLS connection');
    like($r->{err}, qr/Re-using existing connection/, '... reused');
};

subtest 'SNI and Host routing on a shared https socket' => sub {
    $c->clear_log;
    my $forwarded = 0;    # how many of these requests should reach a broker
    my $r = curl(@ca, @resolve, "https://b2.lookout.test:$s/test/headers");
    is($r->{headers}{'x-fake-broker'}, 'b2', 'SNI b2.lookout.test: b2');
    $forwarded++;
    $r = curl(@ca, @resolve, "https://x.lookout.test:$s/test/headers");
    lookout_error_ok($r, 421, 'SNI x.lookout.test (a name no broker has): 421');
    # No SNI (an IP literal): the Host decides.
    $r = curl(@ca, '-H', "Host: b1.lookout.test:$s", "https://127.0.0.1:$s/test/headers");
    is($r->{headers}{'x-fake-broker'}, 'b1', 'no SNI, Host b1: b1');
    $forwarded++;
    $r = curl(@ca, '-H', "Host: x.lookout.test:$s", "https://127.0.0.1:$s/test/headers");
    lookout_error_ok($r, 421, 'no SNI, unknown Host: 421');
    # SNI names b1, Host names b2: SNI wins or it is refused; never b2.
    $r = curl(@ca, @resolve, '-H', "Host: b2.lookout.test:$s", "https://b1.lookout.test:$s/test/headers");
    ok($r->{status} == 421 || ($r->{headers}{'x-fake-broker'} // '') eq 'b1', 'SNI b1 + Host b2: b1 or 421, never b2')
        or diag("status $r->{status}, broker " . ($r->{headers}{'x-fake-broker'} // '-'));
    $forwarded++ if $r->{status} != 421;
    # SNI unknown, Host b1: not forwarded by the Host alone.
    $r = curl(@ca, @resolve, '-H', "Host: b1.lookout.test:$s", "https://x.lookout.test:$s/test/headers");
    lookout_error_ok($r, 421, 'SNI x.lookout.test + Host b1: 421');
    my @seen = $c->requests();
    is(scalar(@seen), $forwarded, 'refused requests never reached a broker');
};

subtest 'upstream verification failures: 502' => sub {
    my ($qa, $qb, $qc, $qd) = free_ports(4);
    my $ext = sub { my ($n, $port) = @_; "[broker prod/b$n]\nadvertisedListeners = " . $c->internal_listeners($n) . ",external:http://127.0.0.1:$port\n" };
    my $head = "[lookout]\nworkers = 1\ntimeout.connect = 2s\n%s\n[pulsar prod]\ninternalListenerName = internal\nlookupListenerName = external\n\n";

    # The wrong CA: the edge CA does not vouch for brokers.
    my $bad = start_lookout(dir => $dir, name => 'wrong-ca', conf => sprintf($head, "tls.upstream_ca = $certs->{edge_ca}")
                            . $ext->(2, $qa) . $ext->(1, $qb));
    ok($bad->started, 'lookout with tls.upstream_ca = edge-ca.crt started');
    my $r = curl("http://127.0.0.1:$qa/test/headers");
    lookout_error_ok($r, 502, 'wrong CA: 502');
    is(curl("http://127.0.0.1:$qb/test/headers")->{status}, 200, '... a plaintext broker on the same lookout: 200');
    like($bad->log, qr/verif|certificate/i, '... and the log says why');
    $bad->stop;

    # The right CA, but the broker's certificate does not name its address.
    my $mis = start_lookout(dir => $dir, name => 'mismatch', conf => sprintf($head, "tls.upstream_ca = $certs->{internal_ca}")
                            . $ext->(4, $qc) . $ext->(2, $qd));
    ok($mis->started, 'lookout with the internal CA started');
    lookout_error_ok(curl("http://127.0.0.1:$qc/test/headers"), 502, 'certificate without 127.0.0.33: 502');
    is(curl("http://127.0.0.1:$qd/test/headers")->{status}, 200, '... b2, whose certificate names it: 200');
    $mis->stop;

    # tls.upstream_verify = off: it works, and lookout says so loudly.
    my ($qe) = free_ports(1);
    my $off = start_lookout(dir => $dir, name => 'verify-off', conf => sprintf($head, "tls.upstream_verify = off")
                            . $ext->(4, $qe));
    ok($off->started, 'lookout with tls.upstream_verify = off started');
    is(curl("http://127.0.0.1:$qe/test/headers")->{status}, 200, 'verification off: 200');
    like($off->log, qr/^.*\[(?:warn|error)\].*verif.*$/mi, '... with a warning in the log');
    $off->stop;
};

ok($lk->alive, 'lookout survived');
$lk->stop;
$c->stop;
done_testing();
