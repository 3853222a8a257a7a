#!/usr/bin/perl
# 30-bodies.t: bodies through lookout (issue 2 item 5): 8 MiB up and 8 MiB down with
# Content-Length and chunked framing (sha256 compared end to end), chunked request bodies
# with odd chunk sizes, extensions and trailers, close-delimited responses to an HTTP/1.1
# client, HEAD (and 204/304) responses that have no body although their head says one.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;

my $dir = tmp_dir();
my ($p1, $q1) = (free_port(), free_port());
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p1"]);
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$q1"] }));
[lookout]
workers = 1

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');
my $u = "http://127.0.0.1:$q1";
my $N = 8 * 1024 * 1024;

subtest '8 MiB up' => sub {
    my $data = PulsarBroker::test_bytes($N);
    spew("$dir/up8", $data);
    my $sha = sha256_hex($data);
    undef $data;
    my $r = curl({ timeout => 30 }, '-T', "$dir/up8", "$u/test/echo");
    is($r->{status}, 200, 'PUT with Content-Length: 200');
    my $j = eval { decode_json($r->{body}) } // {};
    is($j->{method}, 'PUT', '... a PUT');
    is($j->{length}, $N, '... the broker got 8 MiB');
    is($j->{sha256}, $sha, '... byte for byte');
    $r = curl({ timeout => 30 }, '-H', 'Transfer-Encoding: chunked', '--data-binary', "\@$dir/up8", "$u/test/echo");
    is($r->{status}, 200, 'POST chunked: 200');
    $j = eval { decode_json($r->{body}) } // {};
    is($j->{length}, $N, '... the broker got 8 MiB');
    is($j->{sha256}, $sha, '... byte for byte');
    # Streamed back as it arrives (both directions at once).
    $r = curl({ timeout => 30 }, '-T', "$dir/up8", "$u/test/echo-body");
    is($r->{status}, 200, 'echo-body: 200');
    is(length $r->{body}, $N, '... 8 MiB back');
    is(sha256_hex($r->{body}), $sha, '... the same bytes');
};

subtest '8 MiB down' => sub {
    my $sha = PulsarBroker::test_bytes_sha256($N);
    my $r = curl({ timeout => 30 }, "$u/test/bytes?n=$N");
    is($r->{status}, 200, 'Content-Length: 200');
    is($r->{headers}{'content-length'}, $N, '... Content-Length kept');
    is(length $r->{body}, $N, '... 8 MiB');
    is(sha256_hex($r->{body}), $sha, '... byte for byte');
    $r = curl({ timeout => 30 }, "$u/test/bytes?n=$N&te=chunked");
    is($r->{status}, 200, 'chunked (irregular chunk sizes): 200');
    is(length $r->{body}, $N, '... 8 MiB');
    is(sha256_hex($r->{body}), $sha, '... byte for byte');
    is($r->{exit}, 0, '... curl saw proper framing');
    # Odd sizes, and a big body followed by another request on the same connection.
    my ($raw) = http_raw('127.0.0.1', $q1, "GET /test/bytes?n=1000003&te=chunked HTTP/1.1\r\nHost: x\r\n\r\n"
                         . "GET /test/bytes?n=65537 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout => 10);
    my $a = parse_response($raw);
    my $b = $a && parse_response($a->{rest});
    is(join(',', map { $_ ? $_->{status} : '-' } $a, $b), '200,200', 'two downloads on one connection');
    ok($a && $a->{body} eq PulsarBroker::test_bytes(1000003), '... the first intact');
    ok($b && $b->{body} eq PulsarBroker::test_bytes(65537), '... the second intact');
};

subtest 'chunked request bodies' => sub {
    my $body = PulsarBroker::test_bytes(70_000);
    my @sizes = (1, 0x10, 4095, 3, 65536, 70_000);    # the rest goes in the last chunk
    my ($chunked, $off) = ('', 0);
    my $i = 0;
    while ($off < length $body) {
        my $n = $sizes[ $i++ ];
        $n = length($body) - $off if $off + $n > length $body;
        # Upper- and lower-case hex, a chunk extension on some.
        my $sz = $i % 2 ? sprintf('%x', $n) : sprintf('%X', $n);
        $chunked .= $sz . ($i == 2 ? ';name=value' : '') . "\r\n" . substr($body, $off, $n) . "\r\n";
        $off += $n;
    }
    $chunked .= "0\r\nX-Trailer: yes\r\n\r\n";
    my $head = "POST /test/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    # Sent in pieces that split the size lines and the CRLFs.
    my $all = $head . $chunked;
    my @pieces = map { substr($all, $_ * 997, 997) } 0 .. int(length($all) / 997);
    my ($raw) = http_raw('127.0.0.1', $q1, \@pieces, pause => 0.002, timeout => 10);
    my $r = parse_response($raw);
    is($r && $r->{status}, 200, 'odd chunks, extension, trailer, split anywhere: 200');
    my $j = eval { decode_json($r->{body}) } // {};
    is($j->{length}, 70_000, '... all bytes arrived');
    is($j->{sha256}, sha256_hex($body), '... in order');
    # An empty chunked body.
    ($raw) = http_raw('127.0.0.1', $q1, "POST /test/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      . "Connection: close\r\n\r\n0\r\n\r\n", timeout => 5);
    $r = parse_response($raw);
    is($r && eval { decode_json($r->{body})->{length} }, 0, 'empty chunked body');
    # Two chunked requests pipelined on one connection: the first body's end is found.
    my $req = "POST /test/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    ($raw) = http_raw('127.0.0.1', $q1, $req . $req =~ s/\r\n\r\n3/\r\nConnection: close\r\n\r\n3/r, timeout => 5);
    $r = parse_response($raw);
    my $r2 = $r && parse_response($r->{rest});
    is(join(',', map { $_ ? eval { decode_json($_->{body})->{length} } // 'x' : '-' } $r, $r2), '3,3',
       'two pipelined chunked requests');
};

subtest 'close-delimited responses' => sub {
    my $n = 1_500_000;
    my $sha = PulsarBroker::test_bytes_sha256($n);
    for my $v ('1.1', '1.0') {
        my $r = curl({ timeout => 20 }, "$u/test/close-delimited?n=$n&v=$v");
        is($r->{status}, 200, "broker HTTP/$v, no length: 200");
        is($r->{exit}, 0, '... curl is satisfied with the framing');
        is(length $r->{body}, $n, '... all bytes');
        is(sha256_hex($r->{body}), $sha, '... intact');
    }
    # By hand: whatever framing lookout picks (chunked, or close), the body is complete,
    # and a pipelined request behind it is answered or the connection closed cleanly.
    my ($raw, $how) = http_raw('127.0.0.1', $q1, "GET /test/close-delimited?n=$n HTTP/1.1\r\nHost: x\r\n\r\n"
                               . "GET /test/status?code=202 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout => 10);
    my $r = parse_response($raw);
    ok($r && ($r->{headers}{'transfer-encoding'} // '') =~ /chunked/i || $how eq 'eof', 'raw: chunked, or closed');
    is($r && length $r->{body}, $n, 'raw: all bytes');
    my $r2 = $r && parse_response($r->{rest});
    ok(!$r2 || $r2->{status} == 202, 'raw: the pipelined request after it is answered in order, or not at all');
    # An HTTP/1.0 client: close-delimited is the only framing it has.
    ($raw, $how) = http_raw('127.0.0.1', $q1, "GET /test/close-delimited?n=100000 HTTP/1.0\r\nHost: x\r\n\r\n", timeout => 10);
    $r = parse_response($raw);
    is($r && $r->{body}, PulsarBroker::test_bytes(100000), 'HTTP/1.0 client: intact');
    unlike($r ? $r->{headers}{'transfer-encoding'} // '' : '', qr/chunked/i, '... not chunked (1.0 has no chunking)');
};

subtest 'HEAD and bodiless responses' => sub {
    my $r = curl('-I', "$u/test/bytes?n=12345");
    is($r->{status}, 200, 'HEAD: 200');
    is($r->{headers}{'content-length'}, 12345, '... Content-Length of the GET');
    is($r->{exit}, 0, '... curl did not wait for a body');
    # HEAD then GET pipelined: lookout must not read the HEAD's Content-Length (or chunked
    # framing) as a body.
    for my $te ('', '&te=chunked') {
        my ($raw, $how) = http_raw('127.0.0.1', $q1, "HEAD /test/bytes?n=12345$te HTTP/1.1\r\nHost: x\r\n\r\n"
                                   . "GET /test/status?code=202 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout => 3);
        my $h = parse_response($raw, head => 1);
        is($h && $h->{status}, 200, "HEAD$te: 200");
        my $g = $h && parse_response($h->{rest});
        is($g && $g->{status}, 202, "... then the next response, at once (no body in between)") or diag($raw);
        is($how, 'eof', '... and the close asked for');
    }
    for my $code (204, 304) {
        my ($raw) = http_raw('127.0.0.1', $q1, "GET /test/status?code=$code HTTP/1.1\r\nHost: x\r\n\r\n"
                             . "GET /test/status?code=202 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout => 3);
        my $a = parse_response($raw);
        is($a && $a->{status}, $code, "$code");
        my $b = $a && parse_response($a->{rest});
        is($b && $b->{status}, 202, '... no body, the next response follows') or diag($raw);
    }
};

subtest 'empty and small bodies' => sub {
    my $r = curl('-X', 'POST', '-H', 'Content-Length: 0', "$u/test/echo");
    is(eval { decode_json($r->{body})->{length} }, 0, 'POST with Content-Length: 0');
    $r = curl('--data-binary', 'x', "$u/test/echo");
    is(eval { decode_json($r->{body})->{sha256} }, sha256_hex('x'), 'one byte');
    $r = curl('-X', 'DELETE', "$u/test/echo");
    is(eval { decode_json($r->{body})->{method} }, 'DELETE', 'DELETE without a body');
};

$lk->stop;
$c->stop;
done_testing();
