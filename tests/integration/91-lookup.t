#!/usr/bin/perl
# 91-lookup.t: Pulsar HTTP lookups through lookout (CONTRACT §4, issue 3 items 1-2), for
# the LookupData forms of real brokers (facts §1): 2.x (explicit nulls), 4.x (nulls
# omitted) and 5.0 (brokerId). The 200 bodies must hold exactly the selected listener's
# addresses in brokerUrl/brokerUrlTls/httpUrl/httpUrlTls/nativeUrl (fields added and
# removed per the listener's schemes: lib/E2E.pm), keep brokerUrlSsl and brokerId, and be
# framed right (Content-Length, chunked brokers, keep-alive and pipelining, gzip). Lookup
# 307s for unowned topics (/topic and /destination, and the 4.x shape that carries
# &listenerName=x) must come out as followable external URLs, path and query byte-exact.
# Also HEAD lookups, and a lookup body over max_buffer_bytes (502, logged: never the
# unrewritten LookupData).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;
use E2E;

my $dir = tmp_dir();
my $e = E2E->new(dir => $dir, own => { t1 => 1, t2 => 2, t3 => 3 });
my $c = $e->cluster;
my $L = $e->L;
# leak_guard = log: the body must be exactly what the lookup filter made (brokerId kept).
my $lk = $e->start_lookout(name => 'lookup', cluster => "leak_guard = log\n");
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

my %X = map { ($_ => $L->{external}{$_}{http}) } 1 .. 3;    # lookout, per broker
my $S = $lk->{e2e_service};
my $LK = '/lookup/v2/topic/persistent/public/default';
my $DST = '/lookup/v2/destination/persistent/pr/cl/ns';

sub json { my $j = eval { decode_json($_[0]) }; return $j // { not_json => $_[0] } }
sub id_of { my $b = $c->broker($_[0]); return "$b->{host}:$b->{webport}" }

# The framing of a response from http_req: Content-Length right, or chunked and complete;
# nothing after the body.
sub framing_ok {
    my ($r, $what) = @_;
    my $h = $r->{headers};
    my $ok = $r->{how} eq 'complete' && !length($r->{rest} // '')
        && (defined $h->{'content-length'} ? $h->{'content-length'} == length $r->{body}
                                           : ($h->{'transfer-encoding'} // '') =~ /^chunked$/i);
    ok($ok, "$what: framing (Content-Length = body, or chunked)")
        or diag("how=$r->{how} CL=" . ($h->{'content-length'} // 'none') . ' TE=' . ($h->{'transfer-encoding'} // 'none')
                . ' body=' . length($r->{body}) . " rest=" . length($r->{rest} // '') . "\n$r->{raw}");
}

for my $v (2, 4, 5) {
    subtest "LookupData $v.x form" => sub {
        $c->set(version => $v);
        for my $n (1 .. 3) {
            my %extra = $v == 5 ? (brokerId => id_of($n)) : ();
            my $direct = json(http_req(GET => "$L->{internal}{1}{http}$LK/t$n")->{body});
            if ($v == 2) {
                ok(exists $direct->{httpUrlTls} && !defined $direct->{httpUrlTls}, "t$n: the broker sent httpUrlTls: null");
            }
            for my $entry ([ "b1", $X{1} ], [ "b$n", $X{$n} ], [ 'service', $S ]) {
                my ($via, $base) = @$entry;
                for my $ln ('external', 'vpn') {
                    my $q = $ln eq 'external' ? '' : '?listenerName=vpn';
                    my $r = http_req(GET => "$base$LK/t$n$q");
                    is($r->{status}, 200, "t$n via $via, $ln: 200");
                    is_deeply(json($r->{body}), $e->expect_ld($ln, $n, %extra),
                              "t$n via $via, $ln: exactly the listener's addresses"
                              . ($v == 5 ? ', brokerId kept' : '') . ', brokerUrlSsl kept') or diag($r->{body});
                    framing_ok($r, "t$n via $via, $ln");
                }
            }
            my $r = http_req(GET => "$X{1}$DST/t$n");
            is_deeply(json($r->{body}), $e->expect_ld('external', $n, %extra), "t$n: /lookup/v2/destination too")
                or diag($r->{body});
        }
        # b2 sends brokerUrlTls (pulsar+ssl); external has no pulsar+ssl: it must go.
        my $r = http_req(GET => "$X{1}$LK/t2");
        ok(!exists json($r->{body})->{brokerUrlTls}, 'b2 via external: brokerUrlTls removed (listener has no pulsar+ssl)');
        ok(!exists json($r->{body})->{httpUrlTls}, '... httpUrlTls absent (no https)');
        # b1 sends no TLS fields; vpn has pulsar+ssl and https: they must appear.
        my $j = json(http_req(GET => "$X{1}$LK/t1?listenerName=vpn")->{body});
        is_deeply([ @$j{qw(brokerUrlTls httpUrlTls)} ], [ @{ $L->{vpn}{1} }{qw(pulsar_ssl https)} ],
                  'b1 via vpn: brokerUrlTls and httpUrlTls added');
    };
}
$c->set(version => 4);

subtest 'framing as curl sees it' => sub {
    for my $v (4, 5) {
        $c->set(version => $v);
        for my $n (1 .. 3) {
            my $r = curl("$X{1}$LK/t$n");
            is($r->{exit}, 0, "v$v t$n: curl is happy") or diag($r->{err});
            is($r->{headers}{'content-length'}, length $r->{body}, "v$v t$n: Content-Length = body length");
            is_deeply(json($r->{body}), $e->expect_ld('external', $n, $v == 5 ? (brokerId => id_of($n)) : ()),
                      "v$v t$n: body");
        }
    }
    $c->set(version => 4);
    # Three lookups on one connection: a wrong length would garble the next answer.
    my $r = curl("$X{1}$LK/t1", "$X{1}$LK/t2?listenerName=vpn", "$X{1}$LK/t3");
    is($r->{exit}, 0, 'three lookups on one curl connection') or diag($r->{err});
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 200, 200, 200 ], '... three 200s');
};

subtest 'chunked broker responses' => sub {
    $c->set(chunked => 1);
    my $direct = http_req(GET => "$L->{internal}{1}{http}$LK/t2");
    is($direct->{headers}{'transfer-encoding'}, 'chunked', 'the broker answers chunked');
    for my $n (1 .. 3) {
        for my $ln ('external', 'vpn') {
            my $r = http_req(GET => "$X{2}$LK/t$n" . ($ln eq 'vpn' ? '?listenerName=vpn' : ''));
            is_deeply(json($r->{body}), $e->expect_ld($ln, $n), "t$n $ln: rewritten") or diag($r->{raw});
            framing_ok($r, "t$n $ln");
        }
        my $r = curl("$X{3}$LK/t$n");
        is($r->{exit}, 0, "t$n: curl is happy with the framing") or diag($r->{err});
        is_deeply(json($r->{body}), $e->expect_ld('external', $n), "t$n: curl gets the rewritten body");
    }
    # Pipelined: two lookups in one write, both answers complete and in order.
    my ($hp) = $X{1} =~ m{//(.*)};
    my ($h, $p) = split /:/, $hp;
    my $req = "GET $LK/t2 HTTP/1.1\r\nHost: $hp\r\n\r\nGET $LK/t3?listenerName=vpn HTTP/1.1\r\nHost: $hp\r\nConnection: close\r\n\r\n";
    my $raw = http_raw($h, $p, $req, timeout => 5);
    my $r1 = parse_response($raw);
    my $r2 = $r1 ? parse_response($r1->{rest}) : undef;
    ok($r1 && $r1->{complete} && $r2 && $r2->{complete}, 'pipelined: two complete answers') or diag($raw);
    is_deeply(json($r1 ? $r1->{body} : ''), $e->expect_ld('external', 2), '... first: t2 external');
    is_deeply(json($r2 ? $r2->{body} : ''), $e->expect_ld('vpn', 3), '... second: t3 vpn');
    $c->set(chunked => 0);
};

subtest 'gzip' => sub {
    $c->set(gzip => 1);
    my $direct = curl('-H', 'Accept-Encoding: gzip', "$L->{internal}{1}{http}$LK/t2");
    is($direct->{headers}{'content-encoding'}, 'gzip', 'the broker gzips when asked');
    for my $path ("$LK/t2", "$DST/t2", '/test/lookupdata?broker=2') {
        # A client that accepts gzip but decodes by hand: whatever lookout did, the bytes
        # must decode to the rewritten JSON.
        $c->clear_log;
        my $r = curl('-H', 'Accept-Encoding: gzip', "$X{1}$path");
        is($r->{status}, 200, "$path: 200");
        is($r->{headers}{'content-length'} // length $r->{body}, length $r->{body}, "$path: Content-Length matches");
        my $body = $r->{body};
        if (($r->{headers}{'content-encoding'} // '') =~ /gzip/i) {
            my $out;
            ok(gunzip(\$body => \$out), "$path: gzip body decodes") or diag($GunzipError);
            $body = $out // '';
        } else {
            ok(!defined $r->{headers}{'content-encoding'}, "$path: identity, no Content-Encoding left");
        }
        is_deeply(json($body), $e->expect_ld('external', 2), "$path: valid JSON with external addresses")
            or diag($body);
        my ($rec) = $c->requests;
        note("$path: broker got Accept-Encoding: " . ($rec->{headers}{'accept-encoding'} // '(none)')
             . ', client got Content-Encoding: ' . ($r->{headers}{'content-encoding'} // '(none)'));
        $r = curl('--compressed', "$X{1}$path");
        is($r->{exit}, 0, "$path: curl --compressed is happy") or diag($r->{err});
        is_deeply(json($r->{body}), $e->expect_ld('external', 2), "$path: --compressed: external JSON");
        $r = http_req(GET => "$X{3}$path", headers => ['Accept-Encoding: gzip, deflate']);
        framing_ok($r, "$path keep-alive");
    }
    $c->set(gzip => 0);
};

subtest 'lookup 307 for unowned topics' => sub {
    for my $case ([ 1, 2, "$LK/u1?authoritative=false&foo=bar", "$LK/u1?authoritative=true" ],
                  [ 3, 1, "$LK/u2", "$LK/u2?authoritative=true" ],
                  [ 1, 2, "$LK/u%20x%2Fy%3F", "$LK/u%20x%2Fy%3F?authoritative=true" ],
                  [ 2, 3, "$DST/u3?x=1", "$DST/u3?authoritative=true" ]) {
        my ($from, $to, $path, $loc) = @$case;
        $c->clear_log;
        my $r = http_req(GET => "$X{$from}$path");
        is($r->{status}, 307, "$path via b$from: 307");
        is($r->{headers}{location}, "$X{$to}$loc", '... Location: b' . $to . "'s external address, path/query byte-exact");
        framing_ok($r, '... 307');
        # Follow it as a client would: it is an address lookout serves.
        $c->clear_log;
        my $f = http_req(GET => $r->{headers}{location} // "$X{$to}/none");
        is($f->{status}, 200, '... following it: 200');
        is_deeply(json($f->{body}), $e->expect_ld('external', $to), '... LookupData of the new owner, external')
            or diag($f->{body});
        my @seen = $c->requests($to);
        is(scalar(@seen) && $seen[0]{target}, $loc, "... b$to got the redirected request byte for byte");
        # And curl -L does the same.
        my $cl = curl('-L', "$X{$from}$path");
        is_deeply([ map { $_->{status} } @{ $cl->{responses} } ], [ 307, 200 ], '... curl -L: 307 then 200');
        is_deeply(json($cl->{body}), $e->expect_ld('external', $to), '... curl -L: external LookupData');
    }
    my $r = http_req(GET => "$S$LK/u5");
    my $who = ($r->{headers}{'x-fake-broker'} // 'b0') =~ /(\d)/ ? $1 : 0;
    is($e->listener_of($r->{headers}{location}), 'external:' . ($who % 3 + 1),
       'via the service address: Location names the next broker, external');
};

subtest '4.x lookup 307 with &listenerName=x' => sub {
    for my $ln ('external', 'vpn') {
        my $path = "$LK/u7?authoritative=true&listenerName=$ln";
        my $to = "$L->{internal}{2}{http}$path";
        my $r = http_req(GET => "$X{1}/test/location?to=" . uri_escape($to));
        is($r->{status}, 307, "$ln: 307");
        is($r->{headers}{location}, "$X{2}$path", "$ln: Location moved to b2's external address, query byte-exact");
        $c->clear_log;
        my $f = http_req(GET => $r->{headers}{location} // "$X{2}/none");
        is($f->{status}, 200, "$ln: following it: 200");
        is_deeply(json($f->{body}), $e->expect_ld($ln, 2), "$ln: the carried name selects the listener")
            or diag($f->{body});
        my @seen = $c->requests(2);
        is(scalar(@seen) && $seen[0]{target}, "$LK/u7?authoritative=true", "$ln: b2 got it without the name");
    }
};

subtest 'HEAD lookups' => sub {
    for my $chunked (0, 1) {
        $c->set(chunked => $chunked);
        my $r = http_req(HEAD => "$X{1}$LK/t2");
        is($r->{status}, 200, ($chunked ? 'chunked broker' : 'Content-Length broker') . ': HEAD 200');
        is($r->{body}, '', '... no body');
        is($r->{how}, 'complete', '... complete');
        # The next request on the same connection must not be eaten as a body.
        my $g = http_req(GET => "$X{1}$LK/t3");
        is_deeply(json($g->{body}), $e->expect_ld('external', 3), '... and the connection goes on');
    }
    $c->set(chunked => 0);
    my $r = curl('-I', "$X{2}$LK/t1");
    is($r->{exit}, 0, 'curl -I is happy') or diag($r->{err});
};

subtest 'other lookup answers pass through' => sub {
    my $r = http_req(GET => "$X{1}$LK/missing-x");
    is_deeply([ $r->{status}, $r->{body} ], [ 404, '{"reason":"Topic not found persistent://public/default/missing-x"}' ],
              '404 reason unchanged');
    $r = http_req(GET => "$X{1}$LK/busy1");
    is_deeply([ $r->{status}, $r->{body} ], [ 503, '' ], '503 empty');
    framing_ok($r, '503');
    $r = http_req(GET => "$X{1}$LK/t2/bundle");
    is_deeply([ $r->{status}, $r->{body} ], [ 200, '0x00000000_0xffffffff' ], '/bundle: text unchanged');
    $r = http_req(GET => "$X{2}$LK/t1?listenerName=nope");
    is_deeply(json($r->{body}), $e->expect_ld('external', 1), 'unknown listener name: external, and no 500 from the broker');
};

subtest 'the access log counts the body bytes from the broker and to the client' => sub {
    # issue 6 item 13: a rewritten body differs in size from the broker's; both are logged
    # (body bytes, after de-chunking, as README says).
    for my $chunked (0, 1) {
        $c->set(chunked => $chunked);
        my $what = $chunked ? 'chunked broker' : 'Content-Length broker';
        my $direct = http_req(GET => "$L->{internal}{1}{http}$LK/t1");
        my $path = "$LK/t1?listenerName=vpn&probe=access$chunked";
        my $r = http_req(GET => "$X{1}$path");
        is($r->{status}, 200, "$what: 200");
        isnt(length $r->{body}, length $direct->{body}, "$what: the rewritten body has another size ("
             . length($direct->{body}) . ' -> ' . length($r->{body}) . ')');
        # (logged as forwarded: without the listenerName the listener filter took out)
        my $re = qr/"GET \Q$LK\E\/t1\?[^"]*probe=access$chunked" prod\/b1 200 (\d+) bytes from broker, (\d+) bytes to client, 1 rewrites?,/;
        ok($lk->wait_log($re, 5), "$what: an access log line with both counts") or diag($lk->log);
        my ($from, $to) = ($lk->log // '') =~ $re;
        is($from, length $direct->{body}, "$what: bytes from broker = the broker's body");
        is($to, length $r->{body}, "$what: bytes to client = the body the client got");
    }
    $c->set(chunked => 0);
    # Untouched: the same count both ways.
    my $r = http_req(GET => "$X{1}$LK/missing-y");
    my $n = length $r->{body};
    ok($lk->wait_log(qr/"GET \Q$LK\E\/missing-y" prod\/b1 404 $n bytes from broker, $n bytes to client,/, 5),
       "a 404 passed through: $n bytes both ways") or diag($lk->log);
};

subtest 'a lookup body over max_buffer_bytes gets 502, never the broker\'s addresses' => sub {
    # The default leak_guard (log): the guard would only log, so the cap must not let the
    # unrewritten LookupData (brokerUrl and all) through (CONTRACT §6).
    my $lkc = $e->start_lookout(name => 'small-buffer', ext => $e->new_external,
                                lookout => "max_buffer_bytes = 100\n");
    ok($lkc->started, 'lookout with max_buffer_bytes = 100 started') or return diag($lkc->log);
    my $base = $lkc->{e2e_ext}{1}{http};
    for my $chunked (0, 1) {
        my $what = $chunked ? 'chunked' : 'Content-Length';
        $c->set(chunked => $chunked);
        my $direct = http_req(GET => "$L->{internal}{1}{http}$LK/t2");
        ok(length $direct->{body} > 100, 'the LookupData is over the cap (' . length($direct->{body}) . ' bytes)');
        my ($internal) = $direct->{body} =~ m{"brokerUrl":"pulsar://([^"]+)"};
        ok($internal, "... and names the broker's internal address (" . ($internal // 'none') . ')');
        my $r = curl("$base$LK/t2");
        lookout_error_ok($r, 502, "$what: 502");
        like($r->{body} // '', qr/max_buffer_bytes/, "$what: ... saying why");
        unlike($r->{body} // '', qr/\Q$internal\E/, "$what: ... and no internal address");
    }
    $c->set(chunked => 0);
    ok($lkc->wait_log(qr/\[warn\] .*lookup.*over max_buffer_bytes \(100\), which it must rewrite; answered 502.*client: /, 3),
       'logged') or diag($lkc->log);
    $lkc->stop;
};

http_close();
$lk->stop;
$c->stop;
done_testing;
