#!/usr/bin/perl
# 40-errors.t: what bad input and bad brokers get (issue 2 item 5, CONTRACT §6): 431 for
# an oversized request head, 400 and a close for request smuggling shapes, 502 for a dead
# broker (and an oversized response head), 504 for a slow one, 421 on a shared socket when
# the Host names no mapped broker, a broker killed mid-response (that client sees a short
# body, others are unaffected), 408 or a close for a head that never ends. Every error
# lookout makes itself is JSON {"reason": ...} with Content-Type application/json, and
# names no broker: b1 and b2 are named by their internal host:port, as a map read from
# ZooKeeper names its brokers, and their 502 and 504 reasons hold neither name nor address
# (the error log names the broker).

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

my $dir = tmp_dir();
my ($p1, $p2, $p3) = free_ports(3);
my ($s, $q2) = (free_port(), free_port());
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } $p1, $p2, $p3 ]);
$c->kill_broker(2);    # b2 is dead from the start: its port refuses connections

# b1 and b3 share one plaintext socket (127.0.0.1:$s), told apart by Host; b2 is dead.
# b1 and b2 are named as a live map names brokers: CLUSTER/internal-host:port.
my ($n1, $n2) = ("127.0.0.1:$p1", "127.0.0.1:$p2");
my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
max_header_bytes = 4k
timeout.connect = 2s
timeout.response = 600ms
timeout.client_header = 1s
timeout.idle = 3s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/$n1]
advertisedListeners = internal:http://127.0.0.1:$p1,external:http://b1.lookout.test:$s

[broker prod/$n2]
advertisedListeners = internal:http://127.0.0.1:$p2,external:http://127.0.0.1:$q2

[broker prod/b3]
advertisedListeners = internal:http://127.0.0.1:$p3,external:http://b3.lookout.test:$s
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

my $b1 = "http://b1.lookout.test:$s";
my $b3 = "http://b3.lookout.test:$s";
my @resolve = ('--resolve', "b1.lookout.test:$s:127.0.0.1", '--resolve', "b3.lookout.test:$s:127.0.0.1");
my $H1 = "Host: b1.lookout.test:$s\r\n";

sub raw { my ($bytes, %o) = @_; return http_raw('127.0.0.1', $s, $bytes, timeout => 5, %o) }

subtest 'routing by Host on a shared socket' => sub {
    my $r = curl(@resolve, "$b1/test/headers");
    is($r->{status}, 200, 'b1.lookout.test: 200');
    is($r->{headers}{'x-fake-broker'}, 'b1', '... from b1');
    $r = curl(@resolve, "$b3/test/headers");
    is($r->{headers}{'x-fake-broker'}, 'b3', '... b3.lookout.test from b3');
    $r = curl('-H', "Host: B1.Lookout.TEST:$s", "http://127.0.0.1:$s/test/headers");
    is($r->{headers}{'x-fake-broker'}, 'b1', 'Host is case-insensitive');
};

subtest '421: no mapped broker for this Host' => sub {
    $c->clear_log;
    for my $host ("unknown.lookout.test:$s", "127.0.0.1:$s", "lookout.test:$s") {
        my $r = curl('-H', "Host: $host", "http://127.0.0.1:$s/test/headers");
        lookout_error_ok($r, 421, "Host $host: 421");
    }
    TODO: {
        # CONTRACT §6 says "names no mapped address"; b1's address is b1.lookout.test:$s.
        # Matching the name alone (ignoring a Host port) is common practice behind port
        # mappings, and cannot pick another broker on this socket: recorded, not failed.
        local $TODO = 'a Host whose port differs from the socket\'s: 421 or routed by name?';
        my $r = curl('-H', "Host: b1.lookout.test:1", "http://127.0.0.1:$s/test/headers");
        is($r->{status}, 421, 'Host b1.lookout.test:1 (wrong port): 421');
    }
    $c->clear_log;
    my ($raw) = raw("GET /test/headers HTTP/1.0\r\n\r\n");
    my $r = parse_response($raw);
    lookout_error_ok($r // {}, 421, 'HTTP/1.0 without Host on a shared socket: 421');
    is(scalar $c->requests(), 0, 'nothing was forwarded');
    # The connection stays usable after a 421 (nothing is wrong with its framing).
    my $how;
    ($raw, $how) = raw("GET /x HTTP/1.1\r\nHost: nowhere.test\r\n\r\nGET /test/status?code=201 HTTP/1.1\r\n${H1}Connection: close\r\n\r\n");
    my $a = parse_response($raw);
    my $b = $a && parse_response($a->{rest});
    is(join(',', map { $_ ? $_->{status} : '-' } $a, $b), '421,201', '421 then a good request on the same connection');
    # If lookout does close after the 421, it must say so (RFC 9112 §9.6).
    ok($b || ($a && ($a->{headers}{connection} // '') =~ /\bclose\b/i),
       '... or, if it closes instead, the 421 says Connection: close') or diag("how: $how\n$raw");
};

subtest '431: request head over max_header_bytes' => sub {
    $c->clear_log;
    my $r = curl(@resolve, '-H', 'X-Big: ' . ('a' x 5000), "$b1/test/headers");
    lookout_error_ok($r, 431, '5000-byte header, 4k limit: 431');
    $r = curl(@resolve, '-H', 'X-Big: ' . ('a' x 500), '-H', 'X-Big2: ' . ('b' x 500), '-H', 'X-Big3: ' . ('c' x 500), "$b1/test/headers");
    is($r->{status}, 200, '1500 bytes of headers: 200');
    my ($raw, $how) = raw("GET /test/headers HTTP/1.1\r\n$H1" . join('', map { "X-H$_: " . ('v' x 100) . "\r\n" } 1 .. 60) . "\r\n");
    lookout_error_ok(parse_response($raw) // {}, 431, 'many small headers over 4k: 431');
    is($how, 'eof', '... and a close');
    ($raw) = raw("GET /test/headers?" . ('q' x 6000) . " HTTP/1.1\r\n$H1\r\n");
    $r = parse_response($raw);
    ok($r && ($r->{status} == 431 || $r->{status} == 414), 'a 6000-byte request line: 431 (or 414)');
    lookout_error_ok($r // {}, $r ? $r->{status} : 431, '... from lookout');
    # The head arrives slowly, in pieces: the limit still holds.
    ($raw) = raw([ "GET /test/headers HTTP/1.1\r\n$H1", map { "X-P$_: " . ('w' x 1000) . "\r\n" } 1 .. 6 ], pause => 0.05);
    lookout_error_ok(parse_response($raw) // {}, 431, 'oversized head in pieces: 431');
    is(scalar(grep { $_->{status} == 200 } $c->requests()), 1, 'only the small one was forwarded');
};

subtest '400 and close: smuggling shapes' => sub {
    my @cases = (
        [ 'Content-Length and Transfer-Encoding',
          "POST /test/echo HTTP/1.1\r\n${H1}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /test/status?code=299 HTTP/1.1\r\n$H1\r\n" ],
        [ 'Transfer-Encoding then Content-Length',
          "POST /test/echo HTTP/1.1\r\n${H1}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\nGET /test/status?code=299 HTTP/1.1\r\n$H1\r\n" ],
        [ 'two Content-Lengths that differ',
          "POST /test/echo HTTP/1.1\r\n${H1}Content-Length: 5\r\nContent-Length: 40\r\n\r\nhelloGET /test/status?code=299 HTTP/1.1\r\n$H1\r\n" ],
        [ 'Content-Length: 5, 40 in one field',
          "POST /test/echo HTTP/1.1\r\n${H1}Content-Length: 5, 40\r\n\r\nhelloGET /test/status?code=299 HTTP/1.1\r\n$H1\r\n" ],
        [ 'Content-Length not a number',
          "POST /test/echo HTTP/1.1\r\n${H1}Content-Length: 5x\r\n\r\nhello" ],
        [ 'negative Content-Length',
          "POST /test/echo HTTP/1.1\r\n${H1}Content-Length: -5\r\n\r\nhello" ],
        [ 'bad chunk size',
          "POST /test/echo HTTP/1.1\r\n${H1}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n" ],
        [ 'chunk size overflow',
          "POST /test/echo HTTP/1.1\r\n${H1}Transfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n" ],
        [ 'chunk data longer than its size',
          "POST /test/echo HTTP/1.1\r\n${H1}Transfer-Encoding: chunked\r\n\r\n3\r\nhelloXX\r\n0\r\n\r\n" ],
        [ 'Transfer-Encoding not ending in chunked',
          "POST /test/echo HTTP/1.1\r\n${H1}Transfer-Encoding: chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n" ],
        [ 'obs-fold (a header line continued)',
          "GET /test/headers HTTP/1.1\r\n${H1}X-Folded: a\r\n  b\r\n\r\n" ],
        [ 'obs-fold on Transfer-Encoding',
          "POST /test/echo HTTP/1.1\r\n${H1}Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello" ],
        [ 'whitespace before the colon',
          "POST /test/echo HTTP/1.1\r\n${H1}Content-Length : 5\r\n\r\nhello" ],
        [ 'bare LF in a header line',
          "GET /test/headers HTTP/1.1\r\n${H1}X-A: 1\nX-B: 2\r\n\r\n" ],
        [ 'NUL in a header value',
          "GET /test/headers HTTP/1.1\r\n${H1}X-A: a\0b\r\n\r\n" ],
    );
    for my $case (@cases) {
        my ($what, $bytes) = @$case;
        $c->clear_log;
        my ($raw, $how) = raw($bytes);
        my $r = parse_response($raw);
        lookout_error_ok($r // {}, 400, "$what: 400 from lookout") or diag($raw);
        like($r ? $r->{headers}{connection} // '' : '', qr/\bclose\b/i, '... Connection: close');
        is($how, 'eof', '... and the connection closes');
        my @seen = $c->requests();
        ok(!grep({ ($_->{query} // '') eq 'code=299' } @seen), '... the smuggled request never reached a broker');
        ok(!grep({ ($_->{status} // 0) == 200 } @seen), '... and no broker answered it with a 200');
    }
    ok($lk->alive, 'lookout is still running');
};

subtest '502: broker down' => sub {
    my $t0 = time;
    my $r = curl("http://127.0.0.1:$q2/test/headers");
    lookout_error_ok($r, 502, 'connection refused: 502');
    ok(time - $t0 < 1.5, '... at once, not after timeout.connect') or diag(sprintf('%.2fs', time - $t0));
    my $why = eval { decode_json($r->{body})->{reason} } // '';
    like($why, qr/^broker unreachable: connect failed \(Connection refused\)$/, '... the reason says what happened')
        or diag($r->{body});
    unlike($r->{body}, qr/\Q$p2\E|127\.0\.0\.1|prod\//, '... and names neither the broker nor its address');
    $r = curl('-X', 'POST', '--data-binary', 'x' x 1000, "http://127.0.0.1:$q2/test/echo");
    lookout_error_ok($r, 502, 'with a request body: 502 too');
    unlike($r->{body}, qr/\Q$p2\E|127\.0\.0\.1/, '... naming no address either');
    like($lk->log, qr/\[warn\] broker prod\/\Q$n2\E unreachable: connect failed \(Connection refused\), client: /,
         'the error log names the broker that failed, with the client');
};

subtest '502: broker response head over max_header_bytes' => sub {
    my $r = curl(@resolve, "$b1/test/big-headers?n=8000");
    lookout_error_ok($r, 502, '8000-byte response header, 4k limit: 502');
    is(curl(@resolve, "$b1/test/big-headers?n=100")->{status}, 200, 'a small one: 200');
};

subtest '504: broker too slow to answer' => sub {
    my $t0 = time;
    my $r = curl(@resolve, "$b1/test/slow?ms=1500");
    my $dt = time - $t0;
    lookout_error_ok($r, 504, 'slow head, timeout.response 600ms: 504');
    is(eval { decode_json($r->{body})->{reason} }, 'broker did not answer within 600 ms',
       '... the reason says what happened, naming no broker') or diag($r->{body});
    like($lk->log, qr/\[warn\] broker prod\/\Q$n1\E did not answer within 600 ms/, '... the error log names it');
    ok($dt > 0.5 && $dt < 1.4, '... after about 600 ms') or diag(sprintf('%.2fs', $dt));
    # The late answer to that request must never reach the next client: the broker
    # replies at ~1.5 s on the connection lookout gave up on.
    sleep 1.2;
    for (1 .. 3) {
        $r = curl(@resolve, "$b1/test/status?code=201");
        is($r->{status}, 201, "request $_ after the 504 gets its own answer")
            or diag("got $r->{status}: $r->{body}");
    }
    $r = curl(@resolve, "$b1/test/slow?ms=100");
    is($r->{status}, 200, 'under the timeout: 200');
    # timeout.response covers the head; a body that pauses after it is fine.
    $r = curl(@resolve, "$b1/test/slow?ms=1200&where=body");
    is($r->{status}, 200, 'head in time, body pauses 1.2 s: 200');
    is(eval { decode_json($r->{body})->{slept_ms} }, 1200, '... complete body');
};

subtest 'a broker killed mid-response' => sub {
    my $n = 4_000_000;
    # Others, in flight across the failure: a 16 MiB chunked download from the same
    # broker (~0.7 s at the fake's speed), and an 8 MiB one from another broker.
    my $m = 16 * 1024 * 1024;
    my $slow = curl_start({ timeout => 20 }, @resolve, "$b1/test/bytes?n=$m&te=chunked");
    my $big = curl_start({ timeout => 20 }, @resolve, "$b3/test/bytes?n=8388608");
    sleep 0.2;
    my $r = curl(@resolve, "$b1/test/die-mid?n=$n");
    is($r->{status}, 200, 'the head came through');
    ok($r->{exit} == 18 || $r->{exit} == 56, 'curl saw the transfer cut short (exit 18 or 56)') or diag("exit $r->{exit}: $r->{err}");
    ok(length($r->{body}) < $n, '... fewer bytes than Content-Length');
    ok(length($r->{body}) > 0 && $r->{body} eq PulsarBroker::test_bytes(length $r->{body}), '... and what came was right');
    my $rs = curl_wait($slow);
    is($rs->{status}, 200, 'the concurrent download from the same broker: 200');
    is(sha256_hex($rs->{body}), PulsarBroker::test_bytes_sha256($m), '... intact');
    my $rb = curl_wait($big);
    is($rb->{status}, 200, 'the concurrent download from another broker: 200');
    is(sha256_hex($rb->{body}), PulsarBroker::test_bytes_sha256(8388608), '... intact');

    # Reset instead of close: the same for the client.
    $r = curl(@resolve, "$b1/test/die-mid?n=$n&rst=1");
    ok($r->{exit} == 18 || $r->{exit} == 56, 'reset mid-response: cut short') or diag("exit $r->{exit}");
    # By hand: the client connection closes (it cannot be reused after a short body).
    my ($raw, $how) = raw("GET /test/die-mid?n=100000 HTTP/1.1\r\n$H1\r\n");
    my $p = parse_response($raw);
    is($p && $p->{complete}, 0, 'raw: the body is incomplete');
    is($how, 'eof', 'raw: and the connection closed (not left hanging)');
    # The broker itself is fine, and so is lookout's pool for it.
    is(curl(@resolve, "$b1/test/status?code=201")->{status}, 201, 'next request to that broker: fine');

    # The broker process itself dies: next requests get 502, then it comes back.
    curl(@resolve, "$b1/test/die-mid?n=100000&broker=1");
    ok(wait_until(sub { grep { $_ == 1 } $c->dead_brokers }, 5), 'broker b1 is gone');
    lookout_error_ok(curl(@resolve, "$b1/test/headers"), 502, 'b1 gone: 502');
    is(curl(@resolve, "$b3/test/status?code=201")->{status}, 201, '... b3 unaffected');
    $c->restart_broker(1);
    ok(wait_until(sub { curl(@resolve, "$b1/test/status?code=201")->{status} == 201 }, 8), 'b1 back: served again');
};

subtest '408 or close: a request head that never ends' => sub {
    my $t0 = time;
    my ($raw, $how) = raw("GET /test/headers HTTP/1.1\r\n$H1", timeout => 5);
    my $dt = time - $t0;
    ok($how eq 'eof' || $how eq 'reset', 'incomplete head: lookout closes') or diag("how: $how");
    ok($dt > 0.8 && $dt < 3, '... after timeout.client_header (1 s)') or diag(sprintf('%.2fs', $dt));
    if (length $raw) {
        lookout_error_ok(parse_response($raw) // {}, 408, '... with a 408');
    } else {
        pass('... with no answer (a close is allowed)');
    }
    # Slowloris: a byte now and then does not extend the deadline.
    $t0 = time;
    ($raw, $how) = raw([ "GET /test/headers HTTP/1.1\r\n", map { "X-$_: 1\r\n" } 1 .. 20 ], pause => 0.25, timeout => 8);
    $dt = time - $t0;
    ok($how eq 'eof' || $how eq 'reset', 'trickled head: closed') or diag("how: $how");
    ok($dt < 3.5, '... long before the trickle would end (5 s)') or diag(sprintf('%.2fs', $dt));
    ok(!length($raw) || $raw =~ m{\AHTTP/1\.1 408 }, '... with a 408 or nothing') or diag($raw);
    # Connected, silent: closed too (client_header or idle).
    $t0 = time;
    (undef, $how) = raw('', timeout => 6);
    ok($how eq 'eof' || $how eq 'reset', 'silent connection: closed');
    ok(time - $t0 < 4, '... within timeout.idle (3 s)') or diag(sprintf('%.2fs', time - $t0));
    # Idle keep-alive after a response: closed after timeout.idle, not at once.
    $t0 = time;
    ($raw, $how) = raw("GET /test/status?code=201 HTTP/1.1\r\n$H1\r\n", timeout => 8);
    $dt = time - $t0;
    is(parse_response($raw // '')->{status}, 201, 'keep-alive response');
    ok($how eq 'eof' && $dt > 0.8 && $dt < 5, '... then closed when idle (after 1-3 s)') or diag(sprintf('how %s %.2fs', $how, $dt));
};

ok($lk->alive, 'lookout survived all of it');
$lk->stop;
$c->stop;
done_testing();
