#!/usr/bin/perl
# 20-proxy.t: lookout as an HTTP/1.1 reverse proxy in front of three fake brokers
# (issue 2 item 5). Routing by bound address, the service address's round-robin (and
# skipping a dead broker), keep-alive on both sides, pipelining, X-Forwarded-*, hop-by-hop
# headers, Expect: 100-continue, the WebSocket tunnel, and refusing h2c and CONNECT.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use MIME::Base64 qw(encode_base64);
use Digest::SHA qw(sha1);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

my $dir = tmp_dir();
my @p = free_ports(3);    # brokers' internal http ports
my @q = free_ports(3);    # lookout: each broker's lookup (external) address
my $w = free_port();      # lookout: webServiceUrl
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ],
                            own => { t1 => 1, t2 => 2, t3 => 3 });

my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { map { ($_ => ["http://127.0.0.1:$q[$_ - 1]"]) } 1 .. 3 }));
[lookout]
workers = 1
log_level = debug
timeout.idle = 20s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$w

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

my @u = map { "http://127.0.0.1:$_" } @q;
my $svc = "http://127.0.0.1:$w";

# the headers a broker saw, from /test/headers: [[name, value], ...]
sub seen_headers { my $j = eval { decode_json($_[0]{body}) } // {}; return $j->{headers} // [] }
sub hdr_values { my ($list, $name) = @_; return map { $_->[1] } grep { lc $_->[0] eq lc $name } @$list }

subtest 'routing by bound address' => sub {
    for my $n (1 .. 3) {
        $c->clear_log;
        my $r = curl("$u[$n - 1]/test/headers");
        is($r->{status}, 200, "lookup address of b$n: 200");
        is($r->{headers}{'x-fake-broker'}, "b$n", "... answered by b$n");
        is(scalar $c->requests($n), 1, "... b$n logged it");
        is(scalar $c->requests(), 1, '... and no other broker did');
    }
    # A Pulsar call too: the admin topic owned by b2, through b2's address: 200, no redirect.
    my $r = curl("$u[1]/admin/v2/persistent/public/default/t2/stats");
    is($r->{status}, 200, 'admin call on the owner');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... answered by b2');
};

subtest 'service address: round-robin over the brokers' => sub {
    my %n;
    for (1 .. 6) {
        my $r = curl("$svc/test/headers");
        is($r->{status}, 200, "request $_ via the service address");
        $n{ $r->{headers}{'x-fake-broker'} // 'none' }++;
    }
    is_deeply([ sort keys %n ], [qw(b1 b2 b3)], 'every broker served some') or diag(explain(\%n));
    my @counts = sort { $a <=> $b } values %n;
    ok($counts[-1] - $counts[0] <= 1, 'evenly (round-robin)') or diag(explain(\%n));
};

subtest 'keep-alive: client side' => sub {
    # curl with two URLs reuses its connection only if lookout kept it open.
    my $r = curl('-v', "$u[0]/test/status?code=201", "$u[0]/test/status?code=202");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 201, 202 ], 'two answers');
    like($r->{err}, qr/Re-using existing connection/, 'curl reused the connection');
    unlike($r->{err}, qr/Connected to .*\n(?s:.*)Connected to /, '... it connected once');
    # The same by hand: two requests, the second sent after the first answer arrived.
    my ($raw, $how) = http_raw('127.0.0.1', $q[0],
        [ "GET /test/status?code=203 HTTP/1.1\r\nHost: 127.0.0.1:$q[0]\r\n\r\n",
          "GET /test/status?code=204 HTTP/1.1\r\nHost: 127.0.0.1:$q[0]\r\nConnection: close\r\n\r\n" ],
        pause => 0.5, timeout => 5);
    my $a = parse_response($raw);
    is($a && $a->{status}, 203, 'raw: first answer');
    my $b = $a && parse_response($a->{rest});
    is($b && $b->{status}, 204, 'raw: second answer on the same connection');
    is($how, 'eof', 'raw: closed after Connection: close');
    # HTTP/1.0 with keep-alive asked for.
    ($raw) = http_raw('127.0.0.1', $q[0],
        [ "GET /test/status?code=201 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
          "GET /test/status?code=202 HTTP/1.0\r\nHost: x\r\n\r\n" ], pause => 0.5, timeout => 5);
    $a = parse_response($raw);
    $b = $a && parse_response($a->{rest});
    is(join(',', map { $_ ? $_->{status} : '-' } $a, $b), '201,202', 'HTTP/1.0 keep-alive: two answers on one connection');
};

subtest 'keep-alive: upstream side' => sub {
    $c->clear_log;
    # Separate client connections, one after another: lookout's idle pool should hand
    # them the same upstream connection (the broker sees one peer port).
    for (1 .. 4) {
        is(curl("$u[2]/test/headers")->{status}, 200, "request $_");
    }
    my @peers = map { $_->{peer} } $c->requests(3);
    is(scalar @peers, 4, 'b3 saw four requests');
    my %uniq = map { $_ => 1 } @peers;
    is(scalar keys %uniq, 1, '... all on one upstream connection') or diag("peers: @peers");
};

subtest 'pipelining: answered in order' => sub {
    $c->clear_log;
    # The first is slow, so out-of-order answering would show.
    my $req = "GET /test/slow?ms=400 HTTP/1.1\r\nHost: x\r\n\r\n"
            . "GET /test/status?code=201 HTTP/1.1\r\nHost: x\r\n\r\n"
            . "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    my ($raw, $how) = http_raw('127.0.0.1', $q[0], $req, timeout => 8);
    my @r;
    my $rest = $raw;
    while (length $rest and my $x = parse_response($rest)) {
        push @r, $x;
        $rest = $x->{rest};
        last unless $x->{complete};
    }
    is_deeply([ map { $_->{status} } @r ], [ 200, 201, 200 ], 'three answers: slow, 201, echo');
    is(eval { decode_json($r[0]{body})->{slept_ms} }, 400, 'first is the slow one');
    is(eval { decode_json($r[2]{body})->{length} }, 5, 'third is the echo of 5 bytes');
    is($how, 'eof', 'closed after the last (Connection: close)');
    is(scalar $c->requests(1), 3, 'b1 got all three');
};

subtest 'X-Forwarded-For, -Proto, -Host' => sub {
    my $r = curl("$u[0]/test/headers");
    my $h = seen_headers($r);
    is_deeply([ hdr_values($h, 'X-Forwarded-For') ], ['127.0.0.1'], 'X-Forwarded-For: the client address');
    is_deeply([ hdr_values($h, 'X-Forwarded-Proto') ], ['http'], 'X-Forwarded-Proto: http');
    is_deeply([ hdr_values($h, 'X-Forwarded-Host') ], ["127.0.0.1:$q[0]"], 'X-Forwarded-Host: the Host the client sent');
    # A client's own X-Forwarded-For: ours ends the list, there is still only one header.
    $r = curl('-H', 'X-Forwarded-For: 192.0.2.7', '-H', 'X-Forwarded-Proto: https', '-H', 'Host: example.test', "$u[0]/test/headers");
    $h = seen_headers($r);
    my @xff = hdr_values($h, 'X-Forwarded-For');
    is(scalar @xff, 1, 'one X-Forwarded-For header');
    like($xff[0] // '', qr/(?:^|,\s*)127\.0\.0\.1$/, '... ending with the client address') or diag("got: @xff");
    is_deeply([ hdr_values($h, 'X-Forwarded-Proto') ], ['http'], 'a client\'s X-Forwarded-Proto is replaced');
    is_deeply([ hdr_values($h, 'X-Forwarded-Host') ], ['example.test'], 'X-Forwarded-Host follows Host');
    is_deeply([ hdr_values($h, 'Host') ], ['example.test'], 'Host passes through');
};

subtest 'X-Forwarded-Host after a repeated X-Forwarded-For' => sub {
    # The two X-Forwarded-For fields become one list, ours at its end; the second
    # one goes, which moves the fields after it up: X-Forwarded-Host must still be
    # the Host, not its neighbour.
    my ($raw) = http_raw('127.0.0.1', $q[0],
        "GET /test/headers HTTP/1.1\r\nX-Forwarded-For: 192.0.2.7\r\nX-Forwarded-For: 192.0.2.8\r\n"
        . "Host: example.test\r\nX-Other: z\r\nConnection: close\r\n\r\n",
        until => qr/\r\n\r\n.*\}/s, timeout => 5);
    my $r = parse_response($raw);
    is($r && $r->{status}, 200, '200');
    my $h = seen_headers($r // {});
    is_deeply([ hdr_values($h, 'X-Forwarded-Host') ], ['example.test'], 'X-Forwarded-Host: the Host');
    is_deeply([ hdr_values($h, 'X-Other') ], ['z'], 'the field after Host unchanged');
    is_deeply([ hdr_values($h, 'X-Forwarded-For') ], ['192.0.2.7, 192.0.2.8, 127.0.0.1'],
              'X-Forwarded-For: both fields, in order, then the client');
};

subtest 'hop-by-hop headers are dropped' => sub {
    my ($raw) = http_raw('127.0.0.1', $q[0],
        "GET /test/headers HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Foo, X-Drop-Me\r\nFoo: bar\r\n"
        . "X-Drop-Me: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Authorization: Basic dXNlcjpwYXNz\r\n"
        . "Proxy-Connection: keep-alive\r\nTrailer: X-T\r\nAuthorization: Bearer end-to-end\r\nX-Keep: 1\r\n\r\n",
        until => qr/\r\n\r\n.*\}/s, timeout => 5);
    my $r = parse_response($raw);
    is($r && $r->{status}, 200, '200');
    my $h = seen_headers($r // {});
    my %names = map { (lc $_->[0] => 1) } @$h;
    for my $gone (qw(foo x-drop-me keep-alive te proxy-authorization proxy-connection trailer)) {
        ok(!$names{$gone}, "$gone did not reach the broker");
    }
    ok(!grep({ /foo|x-drop-me/i } hdr_values($h, 'Connection')), 'Connection does not name the dropped headers');
    is_deeply([ hdr_values($h, 'Authorization') ], ['Bearer end-to-end'], 'Authorization (end to end) kept');
    is_deeply([ hdr_values($h, 'X-Keep') ], ['1'], 'other headers kept');

    # Response side: the broker's hop-by-hop headers do not reach the client.
    $r = curl("$u[0]/test/respond?h=Connection:%20X-Secret&h=X-Secret:%201&h=Keep-Alive:%20timeout%3D9"
              . "&h=Proxy-Authenticate:%20Basic&h=Trailer:%20X-T&h=X-Visible:%20yes");
    is($r->{status}, 200, 'response with hop-by-hop headers: 200');
    ok(!exists $r->{headers}{'x-secret'}, 'a header the broker\'s Connection names is dropped');
    ok(!exists $r->{headers}{'keep-alive'} || $r->{headers}{'keep-alive'} !~ /timeout=9/, 'the broker\'s Keep-Alive is dropped');
    ok(!exists $r->{headers}{'trailer'}, 'Trailer is dropped');
    is($r->{headers}{'x-visible'}, 'yes', 'other response headers kept');
    is($r->{body}, "respond\n", 'body intact');
};

subtest 'Expect: 100-continue' => sub {
    my $data = PulsarBroker::test_bytes(300_000);
    spew("$dir/up", $data);
    my $sha = Digest::SHA::sha256_hex($data);
    # --expect100-timeout 10: if lookout swallowed the 100, curl would wait 10 s.
    for my $path ('/test/100', '/test/echo') {
        my $t0 = time;
        my $r = curl('--expect100-timeout', '10', '-H', 'Expect: 100-continue', '--data-binary', "\@$dir/up", "$u[0]$path");
        my $dt = time - $t0;
        is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 100, 200 ], "$path: 100 Continue, then 200");
        my $j = eval { decode_json($r->{body}) } // {};
        is($j->{length}, 300_000, "$path: the broker read the whole body");
        is($j->{sha256}, $sha, "$path: ... intact");
        ok($dt < 5, "$path: without waiting for curl's expect timeout") or diag(sprintf('took %.1fs', $dt));
    }
    # A final status instead of 100: the client gets it, without a 100 first.
    my $r = curl('--expect100-timeout', '10', '-H', 'Expect: 100-continue', '--data-binary', "\@$dir/up",
                 "$u[0]/test/100?final=417");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [417], 'final 417 without 100, once')
        or diag("curl exit $r->{exit}: $r->{err}");
    is($r->{exit}, 0, '... curl is done (exit 0)');
    # The same by hand: the body is never sent, so the connection cannot carry another
    # request (the client may or may not send the body now): the broker said
    # Connection: close, and lookout must close too, not keep it open for reuse.
    my ($raw, $how) = http_raw('127.0.0.1', $q[0], "POST /test/100?final=417 HTTP/1.1\r\nHost: x\r\n"
                               . "Expect: 100-continue\r\nContent-Length: 300000\r\n\r\n", timeout => 4);
    my $p = parse_response($raw);
    is($p && $p->{status}, 417, 'raw: 417');
    is($how, 'eof', '... then lookout closes');
    like($p ? $p->{headers}{connection} // '' : '', qr/\bclose\b/i,
         '... and says so: Connection: close (as the broker did)') or diag($raw);
    # lookout still serves on that address afterwards.
    is(curl("$u[0]/test/status?code=201")->{status}, 201, 'next request fine');
};

subtest 'WebSocket Upgrade: a byte tunnel' => sub {
    my $key = encode_base64('lookout-ws-key-1', '');
    my $accept = encode_base64(sha1($key . '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'), '');
    my $head = "GET /test/ws HTTP/1.1\r\nHost: 127.0.0.1:$q[1]\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             . "Sec-WebSocket-Key: $key\r\nSec-WebSocket-Version: 13\r\n\r\n";
    my $bin = join '', map { chr($_ % 256) } 0 .. 70_000;    # binary, with CR LF and NUL
    my ($raw, $how) = http_raw('127.0.0.1', $q[1], [ $head, "one\r\n", "two\0", $bin . 'END' ],
                               pause => 0.3, until => qr/END\z/, timeout => 8);
    my $r = parse_response($raw);
    is($r && $r->{status}, 101, '101 Switching Protocols');
    is($r && $r->{headers}{'sec-websocket-accept'}, $accept, '... with the broker\'s accept key');
    like($r && $r->{headers}{upgrade} // '', qr/^websocket$/i, '... Upgrade: websocket');
    like($r && $r->{headers}{connection} // '', qr/\bupgrade\b/i, '... Connection: upgrade');
    is($r && $r->{headers}{'x-fake-broker'}, 'b2', '... from b2');
    my $echo = $r ? $r->{rest} : '';    # after a 101, everything is tunnel bytes
    is(length $echo, length("one\r\ntwo\0" . $bin . 'END'), 'every byte came back through the tunnel');
    ok($echo eq "one\r\ntwo\0" . $bin . 'END', '... unchanged and in order');
    is($how, 'until', '... while the tunnel stayed open');
    # Without Upgrade the broker says 426: a normal exchange.
    is(curl("$u[1]/test/ws")->{status}, 426, 'no Upgrade: the broker\'s 426 passes through');

    # The client sends 4 MiB and its FIN at once, to a broker that reads nothing for a
    # second: lookout holds what the broker's socket does not take, and closes the tunnel
    # only once the broker has it all (nginx's way), not with the client's FIN.
    my $big = join '', map { pack('N', $_ * 2654435761 % 4294967296) } 0 .. (1 << 20) - 1;
    my $sink = $head =~ s{/test/ws }{/test/ws?sink=1000 }r;
    ($raw) = http_raw('127.0.0.1', $q[1], [ $sink, $big ], pause => 0.3, shutdown => 1, timeout => 15);
    is(parse_response($raw) && parse_response($raw)->{status}, 101, 'a tunnel to a slow broker: 101');
    my $rec = wait_until(sub { (grep { ($_->{status} // '') eq 'tunnel' } $c->requests(2))[0] }, 15);
    is($rec && $rec->{body_length}, length $big, '... the client\'s 4 MiB, sent with its FIN, all reached the broker');
    is($rec && $rec->{body_sha256}, Digest::SHA::sha256_hex($big), '... byte for byte');
};

subtest 'h2c and CONNECT are refused' => sub {
    $c->clear_log;
    my ($raw, $how) = http_raw('127.0.0.1', $q[0],
        "GET /test/headers HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        . "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", timeout => 5);
    my $r = parse_response($raw);
    ok($r && $r->{status} >= 400 && $r->{status} < 500, 'Upgrade: h2c: a 4xx') or diag($raw);
    lookout_error_ok($r // {}, $r ? $r->{status} : 400, '... with a JSON reason');
    unlike($raw, qr/\A[^\r\n]* 101 /, 'no 101');

    ($raw, $how) = http_raw('127.0.0.1', $q[0], "CONNECT 127.0.0.1:$p[0] HTTP/1.1\r\nHost: 127.0.0.1:$p[0]\r\n\r\n"
                            . "GET /test/status?code=299 HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 5);
    $r = parse_response($raw);
    ok($r && $r->{status} >= 400 && $r->{status} < 500, 'CONNECT: a 4xx') or diag($raw);
    lookout_error_ok($r // {}, $r ? $r->{status} : 405, '... with a JSON reason');
    unlike($raw, qr/ 299 /, 'the bytes after CONNECT were not tunnelled to the broker');
    is(scalar $c->requests(), 0, 'no broker saw either');

    # HTTP/2 prior knowledge: not HTTP/1.1, never forwarded.
    ($raw, $how) = http_raw('127.0.0.1', $q[0], "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", timeout => 3);
    ok($raw eq '' || $raw =~ m{\AHTTP/1\.[01] 4\d\d }, 'h2 preface: a 4xx or a close') or diag($raw);
    is(scalar $c->requests(), 0, '... not forwarded');
};

subtest 'service address skips a killed broker' => sub {
    $c->kill_broker(2);
    my (@status, %by);
    for (1 .. 9) {
        my $r = curl("$svc/test/headers");
        push @status, $r->{status};
        $by{ $r->{headers}{'x-fake-broker'} // 'none' }++;
    }
    is_deeply(\@status, [ (200) x 9 ], 'every request via the service address succeeds')
        or diag("statuses: @status");
    ok(!$by{b2}, 'none went to the dead broker');
    ok($by{b1} && $by{b3}, 'the others share the load') or diag(explain(\%by));
    # The dead broker's own address: 502 (40-errors.t checks the body).
    is(curl("$u[1]/test/headers")->{status}, 502, 'b2\'s own address: 502');
    is(curl("$u[0]/test/headers")->{status}, 200, 'b1\'s own address: fine');
    ok($lk->alive, 'lookout still running');
};

my $st = $lk->stop;
is($st, 0, 'lookout exits 0 on SIGTERM');
$c->stop;
done_testing();
