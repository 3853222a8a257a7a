#!/usr/bin/perl
# 145-http-head-leaks.t: the parts of a broker's HTTP answer that are not header fields of
# a final response go through the leak guard too (CONTRACT §4, "Leak guard"):
#   - an interim (1xx) head, e.g. a 103 Early Hints whose Link names the broker's internal
#     address: log counts and logs it and lets it by, rewrite rewrites it as a header
#     value, block drops it (the final response still comes);
#   - the 101 Switching Protocols head a WebSocket tunnel starts with: logged, rewritten,
#     or, in block mode, answered with the guard's 502 instead of a tunnel;
#   - the status line's reason phrase ("503 not served by this instance:HOST:PORT"):
#     logged, replaced by the standard phrase, or answered with the 502.
# One lookout per mode in front of the same three fake brokers (lib/E2E.pm). Every answer
# but log's is checked, byte for byte, for every internal host:port of the map.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;
use E2E;

my $dir = tmp_dir();
my $e = E2E->new(dir => $dir);
my $L = $e->L;

my %lk = %{ $e->guard_lookouts(qw(log rewrite block)) };

my ($in1) = $L->{internal}{1}{http} =~ m{//([^/]+)};    # b1's internal host:port
my @internal = map { m{//([^/]+)} } map { values %{ $L->{internal}{$_} } } 1 .. 3;

# A raw request to b1 through the lookout of MODE: (reply bytes, how it ended).
sub ask {
    my ($mode, $target, %o) = @_;
    my ($hp) = $lk{$mode}{e2e_ext}{1}{http} =~ m{//([^/]+)};
    my ($h, $p) = $hp =~ /^(.*):(\d+)$/;
    my $extra = $o{head} // "Connection: close\r\n";
    return http_raw($h, $p, "GET $target HTTP/1.1\r\nHost: $hp\r\n$extra\r\n", timeout => 5, %o);
}
sub ext_hp { my ($hp) = $lk{ $_[0] }{e2e_ext}{1}{http} =~ m{//([^/]+)}; return $hp }
sub clean {
    my ($raw, $name) = @_;
    my @found = grep { index($raw, $_) >= 0 } @internal;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    return ok(!@found, $name) || diag("found @found in:\n$raw");
}
sub q_esc { my $s = $_[0]; $s =~ s/([^A-Za-z0-9._~-])/sprintf '%%%02X', ord $1/ge; return $s }

my $early = '/test/respond?interim=103&ih=' . q_esc("Link: <http://$in1/static/app.js>; rel=preload");
my $phrase = '/test/respond?code=503&phrase=' . q_esc("not served by this instance:$in1");
my $ws = '/test/ws?h=' . q_esc("X-Served-By: $in1");
my $ws_head = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            . "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

subtest 'the fixtures leak as meant (control, straight to b1)' => sub {
    my ($h, $p) = $in1 =~ /^(.*):(\d+)$/;
    my $raw = http_raw($h, $p, "GET $early HTTP/1.1\r\nHost: $in1\r\nConnection: close\r\n\r\n");
    like($raw, qr{^HTTP/1\.1 103 Early Hints\r\nLink: <http://\Q$in1\E/static/app\.js>}, 'a 103 naming b1, then')
        or diag($raw);
    like($raw, qr{\r\n\r\nHTTP/1\.1 200 OK\r\n.*respond\n$}s, '... the 200');
    $raw = http_raw($h, $p, "GET $phrase HTTP/1.1\r\nHost: $in1\r\nConnection: close\r\n\r\n");
    like($raw, qr{^HTTP/1\.1 503 not served by this instance:\Q$in1\E\r\n}, 'a 503 whose phrase names b1');
    $raw = http_raw($h, $p, "GET $ws HTTP/1.1\r\nHost: $in1\r\n$ws_head\r\n", until => qr/\r\n\r\n/);
    like($raw, qr{^HTTP/1\.1 101 .*\r\nX-Served-By: \Q$in1\E\r\n}s, 'a 101 naming b1');
};

subtest 'leak_guard = log: the heads pass as they are, the finds are logged and counted' => sub {
    my $raw = ask(log => $early);
    like($raw, qr{^HTTP/1\.1 103 Early Hints\r\nLink: <http://\Q$in1\E/static/app\.js>}, 'the 103 as it came');
    like($raw, qr{HTTP/1\.1 200 OK\r\n.*respond\n$}s, '... and the 200');
    ok($lk{log}->wait_log(qr/the header Link names \S*\Q$in1\E, an internal address of broker prod\/b1, .*logged only \(leak_guard = log\)/, 2),
       'the 103\'s Link is logged') or diag($lk{log}->log);
    $raw = ask(log => $phrase);
    like($raw, qr{^HTTP/1\.1 503 not served by this instance:\Q$in1\E\r\n}, 'the phrase as it came');
    ok($lk{log}->wait_log(qr/the status line's reason phrase names \Q$in1\E, an internal address of broker prod\/b1/, 2),
       '... logged');
    $raw = ask(log => $ws, head => $ws_head, until => qr/\r\n\r\n/);
    like($raw, qr{^HTTP/1\.1 101 .*\r\nX-Served-By: \Q$in1\E\r\n}s, 'the 101 as it came');
    ok($lk{log}->wait_log(qr/the header X-Served-By names \Q$in1\E/, 2), '... logged');
};

subtest 'leak_guard = rewrite: the heads name the external address' => sub {
    my $x = ext_hp('rewrite');
    my $raw = ask(rewrite => $early);
    like($raw, qr{^HTTP/1\.1 103 Early Hints\r\nLink: <http://\Q$x\E/static/app\.js>; rel=preload\r\n},
         "the 103's Link names b1's external address") or diag($raw);
    like($raw, qr{HTTP/1\.1 200 OK\r\n.*respond\n$}s, '... and the 200 follows');
    clean($raw, '... no internal address');
    $raw = ask(rewrite => $phrase);
    like($raw, qr{^HTTP/1\.1 503 Service Unavailable\r\n}, 'the phrase: the standard one') or diag($raw);
    clean($raw, '... no internal address');
    $raw = ask(rewrite => $ws, head => $ws_head, until => qr/\r\n\r\n/);
    like($raw, qr{^HTTP/1\.1 101 .*\r\nX-Served-By: \Q$x\E\r\n}s, "the 101's field names b1's external address")
        or diag($raw);
    like($raw, qr{\r\nUpgrade: websocket\r\n}i, '... and keeps its Upgrade');
    clean($raw, '... no internal address');
};

subtest 'leak_guard = block: a 1xx is dropped, a 101 and a phrase get the 502' => sub {
    my $raw = ask(block => $early);
    like($raw, qr{^HTTP/1\.1 200 OK\r\n.*respond\n$}s, 'no 103: the 200 comes first') or diag($raw);
    clean($raw, '... no internal address');
    ok($lk{block}->wait_log(qr/the header Link names .*the interim response dropped, the final one follows \(leak_guard = block\)/, 2),
       '... and the log says the 103 was dropped');
    for my $case ([ 'the 503 with the phrase', $phrase ], [ 'the 101', $ws, head => $ws_head ]) {
        my ($what, $target, @o) = @$case;
        my ($raw, $how) = ask(block => $target, @o);
        my $r = parse_response($raw) // {};
        lookout_error_ok($r, 502, "$what: 502") or diag($raw);
        is(eval { decode_json($r->{body})->{reason} }, 'response would leak an internal broker address', '... the guard\'s reason');
        clean($raw, '... no internal address');
    }
    is($lk{block}->log =~ /answered 502 \(leak_guard = block\)/, 1, 'the 502s are logged as such');
};

for my $mode (sort keys %lk) {
    ok($lk{$mode}->alive, "lookout ($mode) is still running");
}

done_testing;
