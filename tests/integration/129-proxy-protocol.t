#!/usr/bin/perl
# 129-proxy-protocol.t: `proxy_protocol` and `proxy_protocol.trusted` (issue 21 item 1).
# HAProxy in front of lookout (send-proxy and send-proxy-v2, from 127.0.0.2, the one
# trusted address) carries clients from 127.0.0.3: the broker's X-Forwarded-For and
# lookout's access log name 127.0.0.3, not HAProxy, on a plain listener (any) and before
# TLS on an https one (v2), whose untrusted clients' handshakes go on untouched. Then raw bytes for each malformation
# (from 127.0.0.2 unless said): a bad v2 signature, a truncated header, a v1 line over 107
# bytes, unknown families, a v2 TLV past its length, no header at all from the trusted
# address, and a header from an untrusted one: each connection is closed and logged with
# its reason, while a keep-alive connection through HAProxy opened before them still works
# after them. max_connections_per_client counts the client behind HAProxy. A client
# neither trusted nor sending a header is served as without the feature.
# Whatever follows a header, in the same write or later ones (a POST's body, a pipelined request,
# a header split mid-way, a TLS handshake), arrives whole and once; so does an untrusted
# client's request that starts like a signature ("PRO", then "PFIND").

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use IO::Select;
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

need_tools('haproxy');

my $dir = tmp_dir();
my ($p) = free_ports(1);
my ($w, $wt, $h1, $h2, $h3, $adm) = free_ports(6);    # lookout http, https; haproxy v1, v2, v2 to https; admin
my $certs = test_certs();
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p"], own => {});

my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', {}) . broker_sections($c, 'edge', {}));
[lookout]
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
workers = 1
admin = 127.0.0.1:$adm
timeout.client_header = 1s
max_connections_per_client = 1
proxy_protocol.trusted = 127.0.0.2/32

[pulsar prod]
webServiceUrl = http://127.0.0.1:$w
proxy_protocol = any

[pulsar edge]
webServiceUrl = https://127.0.0.1:$wt
proxy_protocol = v2

EOF
ok($lk->started, 'lookout started') or diag($lk->log);

start_haproxy_tcp($dir, <<"EOF");
frontend v1
    bind 127.0.0.1:$h1
    default_backend v1
frontend v2
    bind 127.0.0.1:$h2
    default_backend v2
frontend v2tls
    bind 127.0.0.1:$h3
    default_backend v2tls
backend v1
    server lk 127.0.0.1:$w send-proxy source 127.0.0.2
backend v2
    server lk 127.0.0.1:$w send-proxy-v2 source 127.0.0.2
backend v2tls
    server lk 127.0.0.1:$wt send-proxy-v2 source 127.0.0.2
EOF
ok(wait_port('127.0.0.1', $h1) && wait_port('127.0.0.1', $h2), 'haproxy listens') or diag(slurp("$dir/haproxy.out"));

sub seen_headers { my $j = eval { decode_json($_[0]{body}) } // {}; return $j->{headers} // [] }
sub hdr_values { my ($list, $name) = @_; return map { $_->[1] } grep { lc $_->[0] eq lc $name } @$list }

for my $v ([ 'send-proxy (v1)', $h1 ], [ 'send-proxy-v2', $h2 ]) {
    my ($name, $port) = @$v;
    my $r = curl('--interface', '127.0.0.3', "http://127.0.0.1:$port/test/headers");
    is($r->{status}, 200, "$name: 200 through HAProxy");
    is_deeply([ hdr_values(seen_headers($r), 'X-Forwarded-For') ], ['127.0.0.3'],
              "$name: X-Forwarded-For names the client behind HAProxy");
}
# The header comes before TLS: HAProxy in TCP mode, curl's TLS through it to lookout's.
my $rt = curl('-k', '--interface', '127.0.0.3', "https://127.0.0.1:$h3/test/headers");
is($rt->{status}, 200, 'send-proxy-v2 before TLS: 200');
is_deeply([ hdr_values(seen_headers($rt), 'X-Forwarded-For') ], ['127.0.0.3'],
          '... X-Forwarded-For names the client behind HAProxy');
$rt = curl('-k', "https://127.0.0.1:$wt/test/headers");
is($rt->{status}, 200, 'an untrusted TLS client without a header: its handshake untouched, 200');
ok($lk->wait_log(qr/127\.0\.0\.3/, 5), 'the access log names the client behind HAProxy');
unlike($lk->log, qr/127\.0\.0\.2\S* .*GET/, '... never HAProxy') or diag($lk->log);

# A client neither trusted nor sending a header: served as without the feature.
my $r = curl("http://127.0.0.1:$w/test/headers");
is($r->{status}, 200, 'an untrusted client without a header: 200');
is_deeply([ hdr_values(seen_headers($r), 'X-Forwarded-For') ], ['127.0.0.1'], '... its own address');

# A keep-alive connection through HAProxy, open across the malformations below.
sleep 0.5;    # the connections of the curls above closed
my $keep = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $h2, LocalAddr => '127.0.0.3', Timeout => 5)
    or die "connect: $@";
sub ask {
    my ($s) = @_;
    syswrite $s, "GET /test/headers HTTP/1.1\r\nHost: x\r\n\r\n";
    my ($buf, $end) = ('', time + 5);
    while (time < $end && $buf !~ /\r\n\r\n.*\}/s) {
        last unless IO::Select->new($s)->can_read($end - time);
        sysread($s, my $b, 65536) or last;
        $buf .= $b;
    }
    return $buf;
}
like(ask($keep), qr{^HTTP/1\.1 200}, 'keep-alive through HAProxy: first answer');

# max_connections_per_client = 1 counts the client behind HAProxy, not HAProxy.
$r = curl('--interface', '127.0.0.5', "http://127.0.0.1:$h1/test/headers");
is($r->{status}, 200, 'another client through the same HAProxy: served');
$r = curl('--interface', '127.0.0.3', "http://127.0.0.1:$h1/test/headers");
is($r->{status}, 503, 'a second connection of 127.0.0.3 (holding one): 503');
like($r->{body} // '', qr/max_connections_per_client/, '... over max_connections_per_client');

# raw(FROM, BYTES [, PORT]): connects from FROM to PORT (default: the http listener), sends BYTES (or each of a list of
# strings, 0.2 s apart); returns what came back, how it ended (eof, reset or timeout) and the seconds it took.
sub raw {
    my ($from, $bytes, $port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port // $w, LocalAddr => $from, Timeout => 5)
        or return ('', "connect: $@", 0);
    local $SIG{PIPE} = 'IGNORE';
    my $t0 = time;
    my @parts = ref $bytes ? @$bytes : ($bytes);
    while (@parts) {
        syswrite $s, shift @parts;
        sleep 0.2 if @parts;
    }
    my ($buf, $how) = ('', 'timeout');
    while (time < $t0 + 5) {
        last unless IO::Select->new($s)->can_read($t0 + 5 - time);
        my $n = sysread($s, my $b, 65536);
        if (!defined $n) { $how = 'reset'; last }
        if ($n == 0) { $how = 'eof'; last }
        $buf .= $b;
    }
    close $s;
    return ($buf, $how, time - $t0);
}

my $sig = "\r\n\r\n\0\r\nQUIT\n";
my $get = "GET /test/headers HTTP/1.1\r\nHost: x\r\n\r\n";
my @bad = (
    [ 'a bad v2 signature', '127.0.0.2', "\r\n\r\n\0\r\nQUIX\n\x21\x11\x00\x0c" . ("\0" x 12) . $get,
      qr/no PROXY protocol signature/ ],
    [ 'a truncated v1 header', '127.0.0.2', 'PROXY TCP4 192.0.2.7 127.0.0.1 5',
      qr/no complete PROXY protocol header within timeout.client_header/ ],
    [ 'a truncated v2 header', '127.0.0.2', $sig . "\x21\x11\x00\x0c\xc0\x00",
      qr/no complete PROXY protocol header within timeout.client_header/ ],
    [ 'a v1 line over 107 bytes', '127.0.0.2', 'PROXY UNKNOWN ' . ('1' x 120) . "\r\n" . $get,
      qr/v1 header longer than 107 bytes/ ],
    [ 'a v1 unknown family', '127.0.0.2', "PROXY TCP5 192.0.2.7 127.0.0.1 5 6\r\n" . $get,
      qr/v1 header: unknown family/ ],
    [ 'a v2 unknown family', '127.0.0.2', $sig . "\x21\x41\x00\x0c" . ("\0" x 12) . $get,
      qr/v2 header: unknown family/ ],
    [ 'a v2 TLV past its length', '127.0.0.2', $sig . "\x21\x11\x00\x0f" . ("\0" x 12) . "\x02\x00\x09" . $get,
      qr/v2 header: a TLV overruns the header/ ],
    [ 'no header from the trusted address', '127.0.0.2', $get,
      qr/bad PROXY protocol header from a trusted address: no PROXY protocol signature/ ],
    [ 'a v1 header where only v2 is taken', '127.0.0.2', "PROXY TCP4 192.0.2.7 127.0.0.1 5 6\r\n", $wt,
      qr/a v1 header where only v2 is accepted; closed, client: 127\.0\.0\.2:\d+, server: 127\.0\.0\.1:$wt/ ],
    [ 'a v1 header from an untrusted address', '127.0.0.1', "PROXY TCP4 192.0.2.7 127.0.0.1 5 6\r\n" . $get,
      qr/a PROXY protocol header from an address not in proxy_protocol.trusted/ ],
    [ 'a v2 header from an untrusted address', '127.0.0.4', $sig . "\x21\x11\x00\x0c" . ("\0" x 12) . $get,
      qr/a PROXY protocol header from an address not in proxy_protocol.trusted.*client: 127\.0\.0\.4/ ],
);

# A header and what follows it, in one read or across several: a plaintext listener reads
# the header with the bytes after it and hands them on, so nothing after the header may be
# lost or seen twice. v2(SRC) is a v2 header naming the client SRC.
sub v2 { return pp_v2_header($_[0], 80) }
sub answers { my ($got) = @_; return [ map { eval { decode_json($_) } // {} } $got =~ /\r\n\r\n(\{.*?\})(?=HTTP\/|\z)/gs ] }
my $close = "Host: x\r\nConnection: close\r\n\r\n";
{
    my ($got) = raw('127.0.0.2', v2('192.0.2.9') . "POST /test/headers HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                                 . "GET /test/headers?second HTTP/1.1\r\n$close");
    my $a = answers($got);
    is(scalar(() = $got =~ m{HTTP/1\.1 200 OK\r\n}g), 2, 'v2 header, a POST with its body and a pipelined GET in one write: two 200s')
        or diag($got);
    is_deeply([ map { $_->{method} // '' } @$a ], [ 'POST', 'GET' ], '... in order');
    is($a->[0]{body_length}, 5, '... the body whole');
    is($a->[1]{target}, '/test/headers?second', '... the second request whole');
    is_deeply([ map { [ hdr_values($_->{headers} // [], 'X-Forwarded-For') ] } @$a ], [ ['192.0.2.9'], ['192.0.2.9'] ],
              '... both from the client the header names');

    # More than the header's first read takes (1 KiB): the rest comes from the socket.
    ($got) = raw('127.0.0.2', v2('192.0.2.10') . "POST /test/headers HTTP/1.1\r\nContent-Length: 100000\r\n$close"
                              . ('x' x 100000));
    is(answers($got)->[0]{body_length}, 100000, 'v2 header and a 100,000-byte POST in one write: the body whole')
        or diag($got);

    ($got) = raw('127.0.0.2', [ "PROXY TCP4 192.0.2.8 127.0.0.1 5 6\r", "\nGET /test/headers?split HTTP/1.1\r\n$close" ]);
    $a = answers($got);
    like($got, qr{^HTTP/1\.1 200}, 'v1 header split before its LF, the request with its end: 200') or diag($got);
    is($a->[0]{target}, '/test/headers?split', '... the request whole');
    is_deeply([ hdr_values($a->[0]{headers} // [], 'X-Forwarded-For') ], ['192.0.2.8'], '... from the client the header names');

    ($got) = raw('127.0.0.2', [ substr(v2('192.0.2.7'), 0, 9), substr(v2('192.0.2.7'), 9), "GET /test/headers?after HTTP/1.1\r\n$close" ]);
    $a = answers($got);
    like($got, qr{^HTTP/1\.1 200}, 'v2 header in two writes, the request in a third: 200') or diag($got);
    is_deeply([ hdr_values($a->[0]{headers} // [], 'X-Forwarded-For') ], ['192.0.2.7'], '... from the client the header names');

    # Untrusted: the first bytes are a prefix of the v1 signature ("PRO"), then not.
    ($got) = raw('127.0.0.1', [ 'PRO', "PFIND /test/headers HTTP/1.1\r\n$close" ]);
    $a = answers($got);
    like($got, qr{^HTTP/1\.1 200}, 'an untrusted client whose first bytes look like a signature\'s start: 200') or diag($got);
    is($a->[0]{method}, 'PROPFIND', '... its request whole');
    is_deeply([ hdr_values($a->[0]{headers} // [], 'X-Forwarded-For') ], ['127.0.0.1'], '... its own address');

    # Untrusted, the start of a v2 signature, then the end: logged as what it was.
    my $u = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $w, LocalAddr => '127.0.0.6', Timeout => 5)
        or die "connect: $@";
    syswrite $u, "\r\n\r\n";
    sleep 0.2;
    close $u;
    ok($lk->wait_log(qr/the client closed after the start of a PROXY protocol signature; closed, client: 127\.0\.0\.6:/, 3),
       'an untrusted client closing after the start of a signature: logged as that') or diag($lk->log);

    # TLS: the header is taken off the socket and OpenSSL reads the rest; split mid-header.
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $wt, LocalAddr => '127.0.0.2', Timeout => 5)
        or die "connect: $@";
    syswrite $s, substr(v2('192.0.2.6'), 0, 20);
    sleep 0.2;
    syswrite $s, substr(v2('192.0.2.6'), 20);
    require IO::Socket::SSL;
    my $ok = IO::Socket::SSL->start_SSL($s, SSL_verify_mode => 0, SSL_hostname => 'localhost', Timeout => 5);
    ok($ok, 'v2 header in two writes before TLS: the handshake completes') or diag(IO::Socket::SSL::errstr());
    my $buf = '';
    if ($ok) {
        print $s "GET /test/headers?tls HTTP/1.1\r\n$close";
        local $/;
        $buf = <$s> // '';
    }
    close $s;
    $a = answers($buf);
    like($buf, qr{^HTTP/1\.1 200}, '... 200') or diag($buf);
    is_deeply([ hdr_values($a->[0]{headers} // [], 'X-Forwarded-For') ], ['192.0.2.6'], '... from the client the header names');
}

my $m0 = Lookout::metrics_map($adm);
for my $b (@bad) {
    my ($name, $from, $bytes, $port, $re) = @$b == 5 ? @$b : (@$b[ 0 .. 2 ], undef, $b->[3]);
    my ($got, $how, $secs) = raw($from, $bytes, $port);
    is($got, '', "$name: no answer");
    like($how, qr/^(?:eof|reset)$/, "$name: closed ($how after " . sprintf('%.1f', $secs) . ' s)');
    ok($lk->wait_log($re, 3), "$name: logged") or diag($lk->log);
}
# Counted by reason: 8 bad or missing headers from the trusted address on the http
# listener and 1 on the https one, 2 headers from untrusted addresses.
my $m1 = Lookout::metrics_map($adm);
for (["127.0.0.1:$w", 'proxy_protocol_bad', 8], ["127.0.0.1:$wt", 'proxy_protocol_bad', 1],
     ["127.0.0.1:$w", 'proxy_protocol_untrusted', 2], ["127.0.0.1:$wt", 'proxy_protocol_untrusted', 0]) {
    my ($fe, $why, $n) = @$_;
    my $k = "lookout_connections_refused_total{frontend=\"$fe\",reason=\"$why\"}";
    is(($m1->{$k} // -1) - ($m0->{$k} // 0), $n, "/metrics: $k +$n");
}
like($lk->log, qr/no PROXY protocol signature; closed, client: 127\.0\.0\.2:\d+, server: 127\.0\.0\.1:$w/,
     'the log line names the client and the listener');
like(ask($keep), qr{^HTTP/1\.1 200}, 'keep-alive through HAProxy: still answered after all that');
close $keep;
ok($lk->alive, 'lookout still runs');

$lk->stop;
done_testing();
