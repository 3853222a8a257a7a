#!/usr/bin/perl
# 92-follow.t: `redirects = follow` end to end (CONTRACT §4, issue 3 item 3). lookout
# follows broker 307s to mapped brokers itself, so the client gets the final answer and
# never a 3xx: request bodies are replayed (Content-Length, chunked, Expect:
# 100-continue; the final broker must see the client's exact bytes), a body over
# follow.replay_bytes gets the rewritten 307 instead, hops are bounded (follow.max_hops)
# and loops detected (508 with a reason), a redirect to an unmapped host is never
# followed (308s and any listener address of a mapped broker are), Authorization reaches
# the final broker, and a dead final broker gets a 502. Also the Pulsar Proxy's redirect
# bugs (facts §5), which follow mode must not have: #2660 (every third redirected call
# timed out), #5360 (body lost on redirect), PR 25919 (broker answers 307 before reading
# the body).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time);

use Lookout;
use PulsarBroker;
use E2E;

my $dir = tmp_dir();
my $e = E2E->new(dir => $dir, own => { t1 => 1, t2 => 2, t3 => 3 });
my $c = $e->cluster;
my $L = $e->L;

# F: follow, at most 5 hops (the default), bodies up to 1 MiB replayed.
my $lk = $e->start_lookout(name => 'follow', cluster => "redirects = follow\nfollow.replay_bytes = 1m\nleak_guard = log\n");
ok($lk->started, 'lookout F (follow, 5 hops, replay 1m) started') or BAIL_OUT('lookout F did not start: ' . ($lk->log // ''));
# H: follow, at most 1 hop; its own external addresses.
my $lkh = $e->start_lookout(name => 'one-hop', ext => $e->new_external,
                            cluster => "redirects = follow\nfollow.max_hops = 1\nleak_guard = log\n");
ok($lkh->started, 'lookout H (follow.max_hops = 1) started') or BAIL_OUT('lookout H did not start: ' . ($lkh->log // ''));

my %X = map { ($_ => $L->{external}{$_}{http}) } 1 .. 3;
my %H = map { ($_ => $lkh->{e2e_ext}{$_}{http}) } 1 .. 3;
my %I = map { ($_ => $L->{internal}{$_}{http}) } 1 .. 3;
my $S = $lk->{e2e_service};
my $ADM = '/admin/v2/persistent/public/default';
my $LK = '/lookup/v2/topic/persistent/public/default';
my $REPLAY = 1024 * 1024;

sub json { my $j = eval { decode_json($_[0]) }; return $j // { not_json => $_[0] } }
sub statuses { return [ map { $_->{status} } @{ $_[0]{responses} } ] }
sub no_3xx { return !grep { $_ >= 300 && $_ < 400 } @{ statuses($_[0]) } }

# chain(FINAL, N...): a /test/location path that redirects to broker N1's internal
# address, which redirects to N2's, ..., which answers FINAL: one hop per N.
sub chain {
    my ($final, @hops) = @_;
    my $target = $final;
    $target = "/test/location?to=$I{$_}$target" for reverse @hops;
    return $target;
}

my $body3 = PulsarBroker::test_bytes(300_000);
spew("$dir/body3", $body3);
my $sha3 = sha256_hex($body3);

subtest 'admin 307 followed: the client gets the owner\'s 200' => sub {
    for my $via ([ 'b1', $X{1}, 'true' ], [ 'b3', $X{3}, 'false' ], [ 'service', $S, undef ]) {
        my ($name, $base, $auth) = @$via;
        $c->clear_log;
        my $r = curl("$base$ADM/t2/stats?x=1&y=%2F");
        is($r->{status}, 200, "via $name: 200");
        ok(no_3xx($r), "via $name: no 3xx reached the client") or diag(explain(statuses($r)));
        is($r->{headers}{'x-fake-broker'}, 'b2', "via $name: answered by the owner b2");
        is(json($r->{body})->{ownerBroker}, $c->broker(2)->{id}, "via $name: the owner's stats");
        my @b2 = $c->requests(2);
        is(scalar @b2, 1, "via $name: b2 got one request");
        like($b2[0]{target} // '', qr{^\Q$ADM\E/t2/stats\?x=1&y=%2F&authoritative=(true|false)$},
             "via $name: b2 got the Location's path and query byte for byte");
        is($b2[0]{target}, "$ADM/t2/stats?x=1&y=%2F&authoritative=$auth", "via $name: ... authoritative from the leader rule")
            if defined $auth;
    }
    # A lookup 307 is followed too, and its final body still rewritten.
    $c->clear_log;
    my $r = curl("$X{1}$LK/u1");
    is_deeply(statuses($r), [200], 'unowned lookup: one 200');
    is_deeply(json($r->{body}), $e->expect_ld('external', 2), '... LookupData of b2, external');
};

subtest 'request bodies are replayed to the final broker (#5360)' => sub {
    my @cases = (
        [ 'PUT Content-Length', [ '-X', 'PUT', '-H', 'Expect:', '--data-binary', "\@$dir/body3" ], "$ADM/t2/subscription/s1", 'PUT' ],
        [ 'POST chunked', [ '-H', 'Transfer-Encoding: chunked', '-H', 'Expect:', '--data-binary', "\@$dir/body3" ], "$ADM/t2/compaction", 'POST' ],
        [ 'PUT Expect: 100-continue', [ '-X', 'PUT', '-H', 'Expect: 100-continue', '--data-binary', "\@$dir/body3" ], "$ADM/t2/subscription/s2", 'PUT' ],
        [ 'POST chunked + Expect', [ '-H', 'Transfer-Encoding: chunked', '-H', 'Expect: 100-continue', '--data-binary', "\@$dir/body3" ], "$ADM/t2/compaction", 'POST' ],
    );
    for my $cs (@cases) {
        my ($name, $args, $path, $method) = @$cs;
        $c->clear_log;
        my $t0 = time;
        my $r = curl({ timeout => 10 }, @$args, "$X{1}$path");
        is($r->{status}, 200, "$name: 200") or diag($r->{head} . $r->{body} . $r->{err});
        ok(no_3xx($r), "$name: no 3xx") or diag(explain(statuses($r)));
        my $j = json($r->{body});
        is_deeply([ @$j{qw(broker method length sha256)} ], [ 'b2', $method, 300_000, $sha3 ],
                  "$name: the final broker b2 got the client's body, byte for byte");
        my @b2 = grep { $_->{path} eq $path } $c->requests(2);
        is(scalar(@b2) && $b2[0]{body_length}, 300_000, "$name: b2's log: body present after the redirect");
        my @b1 = $c->requests(1);
        is(scalar(@b1) && $b1[0]{status}, 307, "$name: b1 answered 307");
        is(scalar(@b1) && $b1[0]{body_sha256}, $sha3, "$name: b1 got the whole body before its 307");
        is(scalar(grep { $_->{status} >= 400 } @b1), 0, "$name: and nothing b1 took for another request")
            or diag(explain([ map { { status => $_->{status}, error => $_->{error} } } @b1 ]));
        ok(time - $t0 < 5, "$name: in bounded time") or diag(time - $t0);
    }
    $c->clear_log;
    my $r = curl('-X', 'DELETE', "$X{1}$ADM/t2/subscription/s1");
    is_deeply(statuses($r), [204], 'DELETE: followed to a 204');
    is(scalar(() = $c->requests(2)), 1, '... b2 got the DELETE');
};

subtest 'a body over follow.replay_bytes gets the rewritten 307' => sub {
    my $big = PulsarBroker::test_bytes($REPLAY + 200_000);
    spew("$dir/big", $big);
    for my $how ([ 'Content-Length', [] ], [ 'chunked', [ '-H', 'Transfer-Encoding: chunked' ] ]) {
        my ($name, $extra) = @$how;
        $c->clear_log;
        my $r = curl({ timeout => 10 }, '-X', 'PUT', '-H', 'Expect:', @$extra, '--data-binary', "\@$dir/big",
                     "$X{1}$ADM/t2/subscription/big?q=1");
        is($r->{status}, 307, "$name: the client gets the 307") or diag($r->{head} . $r->{body});
        is($r->{headers}{location}, "$X{2}$ADM/t2/subscription/big?q=1&authoritative=true",
           "$name: Location rewritten to b2's external address, path/query exact");
        is(scalar(() = $c->requests(2)), 0, "$name: nothing was replayed to b2");
        my @b1 = $c->requests(1);
        is(scalar(@b1) && $b1[0]{body_length}, length $big, "$name: b1 still got the whole body");
        is(scalar(grep { $_->{status} >= 400 } @b1), 0, "$name: and nothing b1 took for another request")
            or diag(explain([ map { { status => $_->{status}, error => $_->{error} } } @b1 ]));
    }
    # The client can follow that 307 itself (curl re-sends the PUT body on a 307).
    $c->clear_log;
    my $r = curl({ timeout => 10 }, '-L', '-X', 'PUT', '-H', 'Expect:', '--data-binary', "\@$dir/big",
                 "$X{1}$ADM/t2/subscription/big");
    is_deeply(statuses($r), [ 307, 200 ], 'curl -L: 307 then 200');
    is(json($r->{body})->{sha256}, sha256_hex($big), '... b2 got the body from the client');
};

subtest 'hop limit: 508' => sub {
    my $r = curl($H{1} . chain('/test/status?code=200&reason=done', 2));
    is($r->{status}, 200, 'max_hops 1: a 1-hop chain is followed');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... to b2');
    $r = curl("$H{1}$ADM/t2/stats");
    is($r->{status}, 200, 'max_hops 1: an admin 307 is followed');
    $c->clear_log;
    $r = curl($H{1} . chain('/test/status?code=200&reason=done', 2, 3));
    lookout_error_ok($r, 508, 'max_hops 1, a 2-hop chain: 508 from lookout with a reason');
    is(scalar(() = $c->requests(3)), 0, '... b3 was never asked');
    is(scalar(() = $c->requests(2)), 1, '... b2 once');
    $r = curl($X{1} . chain('/test/status?code=200&reason=done', 2, 3, 1, 2, 3));
    is($r->{status}, 200, 'max_hops 5: a 5-hop chain is followed');
    is($r->{headers}{'x-fake-broker'}, 'b3', '... to its end');
    $c->clear_log;
    $r = curl($X{1} . chain('/test/status?code=200&reason=done', 2, 3, 1, 2, 3, 1));
    lookout_error_ok($r, 508, 'max_hops 5, a 6-hop chain: 508');
    is(scalar(() = $c->requests), 6, '... after 6 broker answers (the entry and 5 hops), no more');
};

subtest 'redirect loops: 508' => sub {
    # The fixture itself: base= redirects to base + this very path and query.
    my $self = "/test/location?base=$I{1}";
    my $d = curl("$I{1}$self");
    is($d->{headers}{location}, "$I{1}$self", 'fixture: b1 redirects to itself');
    $c->clear_log;
    my $t0 = time;
    my $r = curl("$X{1}$self");
    lookout_error_ok($r, 508, 'a broker redirecting to itself: 508');
    my $why = eval { decode_json($r->{body})->{reason} } // '';
    like($why, qr/^redirect loop: after \d+ hops? the request was sent back to a broker already asked$/,
         '... the reason says it was a loop') or diag($r->{body});
    unlike($r->{body}, qr{prod/|127\.0\.0\.|localhost}, '... naming no broker and no address');
    like($lk->log, qr{\[warn\] redirect loop: prod/b1 sent the request back to prod/b1}, '... the error log names them');
    my $n = () = $c->requests;
    ok($n >= 1 && $n <= 6, "... bounded: $n broker answers");
    ok(time - $t0 < 3, '... at once');
    my $pp = "/test/location?base=$I{2}&alt=$I{1}";
    $d = curl("$I{1}$pp");
    is($d->{headers}{location}, "$I{2}/test/location?base=$I{1}&alt=$I{2}", 'fixture: b1 -> b2 with base and alt swapped');
    $c->clear_log;
    $r = curl("$X{1}$pp");
    lookout_error_ok($r, 508, 'two brokers redirecting to each other: 508');
    $n = () = $c->requests;
    ok($n >= 2 && $n <= 6, "... bounded: $n broker answers");
    # With a body too (the replay buffer must not matter).
    $r = curl('-X', 'PUT', '-H', 'Expect:', '--data-binary', "\@$dir/body3", "$X{2}/test/location?base=$I{2}");
    lookout_error_ok($r, 508, 'a self-redirecting PUT: 508');
    # And lookout is fine afterwards.
    is(curl("$X{1}$ADM/t1/stats")->{status}, 200, 'next request: 200');
};

subtest 'unmapped hosts are never followed' => sub {
    my $up = free_port('127.0.0.99');
    my $trap = IO::Socket::INET->new(LocalAddr => '127.0.0.99', LocalPort => $up, Listen => 5, ReuseAddr => 1)
        or BAIL_OUT("cannot listen on 127.0.0.99:$up: $@");
    my $to = "http://127.0.0.99:$up/admin/v2/persistent/public/default/t2/stats?authoritative=true";
    $c->clear_log;
    my $r = curl('-H', 'Authorization: Bearer s3cret', "$X{1}/test/location?to=" . uri_escape($to));
    is($r->{status}, 307, 'the client gets the 307');
    is($r->{headers}{location}, $to, '... Location untouched');
    is($r->{headers}{'x-fake-broker'}, 'b1', '... b1\'s answer');
    ok(!IO::Select->new($trap)->can_read(0.3), 'nobody connected to the unmapped host (Authorization stayed home)');
    close $trap;
    # 308 is followed like 307 (same method, same body).
    $r = curl('-X', 'PUT', '-H', 'Expect:', '--data-binary', "\@$dir/body3",
              "$X{1}/test/location?code=308&to=" . uri_escape("$I{3}/test/echo"));
    is($r->{status}, 200, 'a 308 is followed');
    is_deeply([ @{ json($r->{body}) }{qw(method length sha256)} ], [ 'PUT', 300_000, $sha3 ], '... with the PUT body');
    # A Location that already names lookout's own address for b2 (a 5.0 broker that
    # preserves the listener) is a mapped broker too.
    $r = curl("$X{1}/test/location?to=" . uri_escape("$X{2}/test/status?code=202&reason=ext"));
    is($r->{status}, 202, 'a redirect to b2\'s external address is followed');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... to b2');
    # A mapped broker named by another of its listener addresses (vpn) is followed.
    $r = curl("$X{1}/test/location?to=" . uri_escape("$L->{vpn}{3}{http}/test/status?code=201&reason=vpn"));
    is($r->{status}, 201, 'a redirect to a mapped broker\'s vpn address is followed');
    is($r->{headers}{'x-fake-broker'}, 'b3', '... to b3');
};

subtest 'Authorization reaches the final broker' => sub {
    $c->clear_log;
    my $r = curl('-H', 'Authorization: Bearer t0ken', "$X{1}$ADM/t2/stats");
    is($r->{status}, 200, 'GET via b1: 200');
    my @b2 = $c->requests(2);
    is(scalar(@b2) && $b2[0]{headers}{authorization}, 'Bearer t0ken', 'b2 got the Authorization header');
    $c->clear_log;
    $r = curl('-X', 'PUT', '-H', 'Authorization: Basic dTpw', '-H', 'Expect:', '--data-binary', "\@$dir/body3",
              "$X{3}$ADM/t1/subscription/s9");
    @b2 = $c->requests(1);
    is(scalar(@b2) && $b2[0]{headers}{authorization}, 'Basic dTpw', 'PUT: b1 got it with the replayed body');
    is(json($r->{body})->{sha256}, $sha3, '... and the body');
};

subtest '#2660: the same redirected call, 30 times' => sub {
    my $t0 = time;
    my (@st, $slow);
    for my $i (1 .. 30) {
        my $r = http_req(GET => "$X{1}$ADM/t2/stats", timeout => 3);
        push @st, "$r->{status}:" . ($r->{headers}{'x-fake-broker'} // '-');
        $slow++ if $r->{elapsed} > 2;
    }
    is_deeply(\@st, [ ('200:b2') x 30 ], 'one keep-alive connection, 30 x the same redirected call: every one 200 from b2');
    ok(!$slow, 'none took long, none timed out') or diag("$slow slow calls");
    @st = ();
    for my $i (1 .. 12) {
        my $t = ('t2', 't3', 't1')[ $i % 3 ];
        my $r = http_req(GET => "$X{1}$ADM/$t/stats", timeout => 3);
        push @st, "$r->{status}:" . ($r->{headers}{'x-fake-broker'} // '-');
    }
    is_deeply(\@st, [ map { '200:b' . substr(('t2', 't3', 't1')[ $_ % 3 ], 1) } 1 .. 12 ],
              'redirected and direct calls mixed on one connection: all 200 from the owner');
    my $r = curl(map { "$X{3}$ADM/t2/stats?i=$_" } 1 .. 10);
    is_deeply(statuses($r), [ (200) x 10 ], 'curl, 10 calls on one connection: 10 x 200');
    $c->clear_log;
    my @h = map { curl_start("$X{1}$ADM/t2/stats?p=$_") } 1 .. 8;
    my @r = map { curl_wait($_) } @h;
    is_deeply([ map { $_->{status} } @r ], [ (200) x 8 ], '8 concurrent clients: 8 x 200');
    ok(time - $t0 < 15, 'all in bounded time') or diag(time - $t0);
};

subtest 'PR 25919: the broker answers 307 before reading the body' => sub {
    my $body = PulsarBroker::test_bytes(900_000);
    spew("$dir/b9", $body);
    my $to = "$I{2}$ADM/t2/subscription/early";
    for my $how ([ 'Content-Length', [ '-X', 'PUT', '-H', 'Expect:' ] ],
                 [ 'chunked', [ '-X', 'PUT', '-H', 'Expect:', '-H', 'Transfer-Encoding: chunked' ] ],
                 [ 'Expect: 100-continue', [ '-X', 'PUT', '-H', 'Expect: 100-continue' ] ]) {
        my ($name, $args) = @$how;
        $c->clear_log;
        my $t0 = time;
        my $r = curl({ timeout => 10 }, @$args, '--data-binary', "\@$dir/b9", "$X{1}/test/location?early=1&to=" . uri_escape($to));
        is($r->{status}, 200, "$name: 200") or diag($r->{head} . $r->{body} . $r->{err});
        my $j = json($r->{body});
        is_deeply([ @$j{qw(broker length sha256)} ], [ 'b2', 900_000, sha256_hex($body) ],
                  "$name: b2 got the whole body although b1 never read it");
        ok(time - $t0 < 5, "$name: bounded time") or diag(time - $t0);
    }
};

subtest 'the redirect target is down: 502, not a hang' => sub {
    $c->kill_broker(3);
    my $t0 = time;
    my $r = curl({ timeout => 10 }, "$X{1}$ADM/t3/stats");
    lookout_error_ok($r, 502, 'a 307 to a dead broker: 502 from lookout with a reason');
    ok(time - $t0 < 7, '... within timeout.connect') or diag(time - $t0);
    $r = curl({ timeout => 10 }, '-X', 'PUT', '-H', 'Expect:', '--data-binary', "\@$dir/body3", "$X{1}$ADM/t3/subscription/x");
    lookout_error_ok($r, 502, '... with a body too');
    is(curl("$X{1}$ADM/t2/stats")->{status}, 200, 'other redirects still work');
    $c->restart_broker(3);
};

http_close();
$lk->stop;
$lkh->stop;
$c->stop;
done_testing;
