#!/usr/bin/perl
# 90-listener.t: listener selection end to end (CONTRACT §3, issue 3 item 2, issue 18
# item 3), through lookout in front of three fake brokers. Every broker has three
# listeners in lookout's map: internal (what brokers hand out), external (the
# lookupListenerName) and vpn, each on its own 127.x address (lib/E2E.pm), so the listener
# a response was rewritten into shows in its addresses. Checked on both things that carry
# addresses: a lookup's LookupData body and an admin 307's Location.
#   - the query `listenerName` wins over the header `X-Pulsar-ListenerName`;
#   - either one wins over lookupListenerName when it names a listener the client may
#     choose: lookout A lists vpn in client_listeners; an unknown name, and the internal
#     listener, fall back to lookupListenerName;
#   - by default (lookout C, no client_listeners) a client chooses only the lookup
#     listener: vpn and internal fall back to it, logged once per client connection; the
#     internal listener, when the operator lists it (lookout D), is honoured;
#   - without lookupListenerName (lookout B, client_listeners = vpn, external), a named
#     listener it lists still rewrites, and no name (or any other) rewrites nothing;
#   - the name never reaches a broker (neither the parameter nor the header; the fake
#     brokers know no "vpn" or "external" listener, like a 4.x broker that would fail the
#     lookup), and every other query parameter arrives byte for byte.

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
my $e = E2E->new(dir => $dir, own => { t1 => 1, t2 => 2, t3 => 3 });
my $c = $e->cluster;
my $L = $e->L;

my $lka = $e->start_lookout(name => 'a', cluster => "leak_guard = log\n");
ok($lka->started, 'lookout A (lookupListenerName = external) started')
    or BAIL_OUT('lookout A did not start: ' . ($lka->log // ''));
my $lkb = $e->start_lookout(name => 'b', no_lookup_listener => 1, client_listeners => 'vpn, external',
                            cluster => "leak_guard = off\n");
ok($lkb->started, 'lookout B (no lookupListenerName) started')
    or BAIL_OUT('lookout B did not start: ' . ($lkb->log // ''));

my $A1 = $L->{external}{1}{http};    # b1's lookup-listener address on lookout A
my $SA = $lka->{e2e_service};
my $SB = $lkb->{e2e_service};
my $LK = '/lookup/v2/topic/persistent/public/default';
my $ADM = '/admin/v2/persistent/public/default';

sub json { my $j = eval { decode_json($_[0]{body}) }; return $j // { not_json => $_[0]{body} } }

# What reached the brokers since the last clear_log must carry no listener name; and the
# first request's target must be WANT (a string or a regex) when given.
sub broker_saw_no_name {
    my ($what, $want_target) = @_;
    my @recs = $c->requests;
    ok(@recs >= 1, "$what: reached a broker") or return;
    my @bad = grep { ($_->{target} // '') =~ /[?&]listenerName(?:[=&#]|$)/
                     || exists $_->{headers}{'x-pulsar-listenername'} } @recs;
    ok(!@bad, "$what: no listenerName parameter, no X-Pulsar-ListenerName header upstream")
        or diag(explain([ map { { target => $_->{target}, headers => $_->{headers} } } @bad ]));
    if (defined $want_target) {
        my $t = $recs[0]{target} // '';
        ok(ref $want_target ? $t =~ $want_target : $t eq $want_target, "$what: upstream target byte-exact")
            or diag("got '$t', want '$want_target'");
    }
}

# One selection case on lookout A: a lookup of t2 (owner b2) and an admin call on t2
# through b1 (a 307 to b2), with QUERY and HDRS. Both must come out in listener WANT.
sub case_a {
    my ($name, $query, $hdrs, $want) = @_;
    subtest $name => sub {
        my $sep = length $query ? '?' : '';
        $c->clear_log;
        my $r = http_req(GET => "$A1$LK/t2$sep$query", headers => $hdrs);
        is($r->{status}, 200, 'lookup: 200') or diag($r->{raw});
        is_deeply(json($r), $e->expect_ld($want, 2), "lookup body: b2 in listener $want") or diag($r->{body});
        broker_saw_no_name('lookup');
        $c->clear_log;
        $r = http_req(GET => "$A1$ADM/t2/stats$sep$query", headers => $hdrs);
        is($r->{status}, 307, 'admin call on a non-owner: 307');
        is($e->listener_of($r->{headers}{location}), "$want:2", "Location names b2 in listener $want")
            or diag($r->{headers}{location} // 'no Location');
        broker_saw_no_name('admin');
    };
}

case_a('no name: lookupListenerName', '', [], 'external');
case_a('query listenerName', 'listenerName=vpn', [], 'vpn');
case_a('header X-Pulsar-ListenerName', '', ['X-Pulsar-ListenerName: vpn'], 'vpn');
case_a('header name is case-insensitive', '', ['x-pulsar-listenername: vpn'], 'vpn');
case_a('query wins over header (query vpn)', 'listenerName=vpn', ['X-Pulsar-ListenerName: external'], 'vpn');
case_a('query wins over header (query external)', 'listenerName=external', ['X-Pulsar-ListenerName: vpn'], 'external');
case_a('unknown query name falls back to lookupListenerName', 'listenerName=nope', [], 'external');
case_a('unknown header name falls back to lookupListenerName', '', ['X-Pulsar-ListenerName: nope'], 'external');
case_a('empty query value: the header is used (PIP-95)', 'listenerName=', ['X-Pulsar-ListenerName: vpn'], 'vpn');
case_a('percent-encoded query value is decoded', 'listenerName=v%70n', [], 'vpn');
case_a('look-alike parameters are not the name', 'xlistenerName=vpn&listenerNameX=vpn', [], 'external');
# issue 18 item 3: the internal listener is no client's to choose unless listed
case_a('query internal falls back to lookupListenerName', 'listenerName=internal', [], 'external');
case_a('header internal falls back to lookupListenerName', '', ['X-Pulsar-ListenerName: internal'], 'external');
case_a('query internal wins over header vpn, and falls back', 'listenerName=internal',
       ['X-Pulsar-ListenerName: vpn'], 'external');

subtest 'the name is removed, every other parameter arrives byte for byte' => sub {
    my $q = 'b=%2Fx%20y&a=1+2&flag&b=2';
    # [client query, query the broker must get, listener the Location must be in]
    my @cases = (
        [ "b=%2Fx%20y&listenerName=vpn&a=1+2&flag&b=2", "?$q", 'vpn' ],
        [ "listenerName=vpn&$q", "?$q", 'vpn' ],
        [ "$q&listenerName=vpn", "?$q", 'vpn' ],
        [ "listenerName=vpn&$q&listenerName=external", "?$q", 'vpn' ],
        [ "xlistenerName=vpn&$q&listenerNameX=1", "?xlistenerName=vpn&$q&listenerNameX=1", 'external' ],
        [ "authoritative=false&listenerName=vpn", '?authoritative=false', 'vpn' ],
    );
    for my $cs (@cases) {
        my ($in, $up, $ln) = @$cs;
        $c->clear_log;
        my $r = http_req(GET => "$A1$ADM/t2/stats?$in");
        is($r->{status}, 307, "?$in: 307");
        broker_saw_no_name("?$in", "$ADM/t2/stats$up");
        # The broker built its Location from what it got (authoritative replaced, last);
        # lookout changes host:port only.
        (my $keep = $up) =~ s/^\?//;
        $keep = join '&', grep { !/^authoritative=/ } split /&/, $keep;
        $keep .= '&' if length $keep;
        is($r->{headers}{location}, "$L->{$ln}{2}{http}$ADM/t2/stats?${keep}authoritative=true",
           "?$in: Location in listener $ln, same path and query");
    }
    $c->clear_log;
    my $r = http_req(GET => "$A1$ADM/t2/stats?listenerName=vpn", headers => ['X-Pulsar-ListenerName: vpn']);
    broker_saw_no_name('only the name', qr{^\Q$ADM\E/t2/stats\??$});
    is($r->{headers}{location}, "$L->{vpn}{2}{http}$ADM/t2/stats?authoritative=true", '... Location');
};

subtest 'lookup 307s and the service address follow the selection too' => sub {
    $c->clear_log;
    my $r = http_req(GET => "$A1$LK/u1?listenerName=vpn");
    is($r->{status}, 307, 'unowned lookup: 307');
    is($r->{headers}{location}, "$L->{vpn}{2}{http}$LK/u1?authoritative=true", 'Location in listener vpn, path/query exact');
    broker_saw_no_name('lookup 307', "$LK/u1");
    $r = http_req(GET => "$A1/lookup/v2/destination/persistent/pr/cl/ns/u1", headers => ['X-Pulsar-ListenerName: vpn']);
    is($r->{headers}{location}, "$L->{vpn}{2}{http}/lookup/v2/destination/persistent/pr/cl/ns/u1?authoritative=true",
       '/destination 307 in listener vpn');
    for my $n (1 .. 3) {
        $c->clear_log;
        $r = http_req(GET => "$SA$LK/t$n?listenerName=vpn");
        is_deeply(json($r), $e->expect_ld('vpn', $n), "service address, t$n, vpn") or diag($r->{body});
        broker_saw_no_name("service address t$n");
        $r = http_req(GET => "$SA$LK/t$n");
        is_deeply(json($r), $e->expect_ld('external', $n), "service address, t$n, no name: external")
            or diag($r->{body});
    }
};

# ---- lookouts C and D: no client_listeners, and the internal listener listed ------------------

subtest 'by default a client chooses only the lookup listener; logged once per connection' => sub {
    my $lkc = $e->start_lookout(name => 'c', ext => $e->new_external, client_listeners => '');
    ok($lkc->started, 'lookout C (no client_listeners) started') or return diag($lkc->log);
    my $C1 = $lkc->{e2e_ext}{1}{http};
    for my $how ([ 'query vpn', '?listenerName=vpn', [] ], [ 'header vpn', '', ['X-Pulsar-ListenerName: vpn'] ],
                 [ 'query internal', '?listenerName=internal', [] ],
                 [ 'header internal', '', ['X-Pulsar-ListenerName: internal'] ]) {
        my ($what, $q, $hd) = @$how;
        $c->clear_log;
        my $r = http_req(GET => "$C1$LK/t2$q", headers => $hd);
        is_deeply(json($r), $e->expect_ld($lkc->{e2e_ext}, 2), "$what: lookup in the lookup listener")
            or diag($r->{body});
        broker_saw_no_name("$what lookup");
        $r = http_req(GET => "$C1$ADM/t2/stats$q", headers => $hd);
        is($e->listener_of($r->{headers}{location}, $lkc->{e2e_ext}), 'external:2', "$what: Location in the lookup listener");
    }
    http_close();
    my @lines = $lkc->log =~ /(client asked for listener .*)/g;
    is(scalar(@lines), 1, 'eight refusals on one keep-alive connection: logged once') or diag(explain(\@lines));
    like($lines[0] // '', qr/client asked for listener 'vpn' \(query listenerName\), which is not in client_listeners; the lookup listener 'external' is used/,
         '... naming what was asked, where, and what was used');
    http_req(GET => "$C1$LK/t2", headers => ['X-Pulsar-ListenerName: internal']);
    ok($lkc->wait_log(qr/client asked for listener 'internal' \(header X-Pulsar-ListenerName\), the internal listener, which clients may not choose/, 5),
       'a new connection logs again');
    http_close();
    $lkc->stop;

    my $lkd = $e->start_lookout(name => 'd', ext => $e->new_external, client_listeners => 'internal');
    ok($lkd->started, 'lookout D (client_listeners = internal) started') or return diag($lkd->log);
    my $D1 = $lkd->{e2e_ext}{1}{http};
    $c->clear_log;
    my $r = http_req(GET => "$D1$LK/t2?listenerName=internal");
    is_deeply(json($r), $e->expect_ld('internal', 2), 'listed internal: the lookup names the internal listener')
        or diag($r->{body});
    broker_saw_no_name('listed internal');
    $r = http_req(GET => "$D1$LK/t2", headers => ['X-Pulsar-ListenerName: vpn']);
    is_deeply(json($r), $e->expect_ld($lkd->{e2e_ext}, 2), '... and vpn, not listed, falls back')
        or diag($r->{body});
    http_close();
    $lkd->stop;
};

# ---- lookout B: no lookupListenerName -------------------------------------------------------
my $to = "$L->{internal}{2}{http}/x/y?z=1&authoritative=true";

subtest 'no lookupListenerName: no name rewrites nothing' => sub {
    for my $n (1 .. 3) {
        my $direct = http_req(GET => "$L->{internal}{2}{http}$LK/t$n");
        is($direct->{status}, 200, "direct lookup of t$n");
        my $r = http_req(GET => "$SB$LK/t$n");
        is($r->{status}, 200, "through lookout B: t$n 200");
        is($r->{body}, $direct->{body}, '... body byte for byte what the broker sent');
        is_deeply(json($r), $e->expect_ld('internal', $n), '... internal LookupData');
    }
    my $r = http_req(GET => "$SB/test/location?to=" . uri_escape($to));
    is($r->{status}, 307, '307 through lookout B');
    is($r->{headers}{location}, $to, '... Location untouched');
    for my $name ('listenerName=nope', 'listenerName=') {
        $c->clear_log;
        $r = http_req(GET => "$SB$LK/t2?$name");
        is_deeply(json($r), $e->expect_ld('internal', 2), "?$name: nothing rewritten");
        broker_saw_no_name("?$name");
        $r = http_req(GET => "$SB/test/location?$name&to=" . uri_escape($to));
        is($r->{headers}{location}, $to, "?$name: Location untouched");
    }
    $c->clear_log;
    $r = http_req(GET => "$SB$LK/t2", headers => ['X-Pulsar-ListenerName: nope']);
    is_deeply(json($r), $e->expect_ld('internal', 2), 'unknown header name: nothing rewritten');
    broker_saw_no_name('unknown header');
    $r = http_req(GET => "$SB$LK/t2?listenerName=internal");
    is_deeply(json($r), $e->expect_ld('internal', 2), 'internal, not listed: nothing rewritten either');
    broker_saw_no_name('internal');
};

subtest 'no lookupListenerName: a listed listener, named, still rewrites' => sub {
    for my $how ([ 'query', ['listenerName=vpn'], [], 'vpn' ],
                 [ 'header', [], ['X-Pulsar-ListenerName: vpn'], 'vpn' ],
                 [ 'query over header', ['listenerName=vpn'], ['X-Pulsar-ListenerName: external'], 'vpn' ],
                 [ 'query external', ['listenerName=external'], [], 'external' ]) {
        my ($what, $q, $hd, $want) = @$how;
        my $qs = @$q ? "?$q->[0]" : '';
        for my $n (1 .. 3) {
            $c->clear_log;
            my $r = http_req(GET => "$SB$LK/t$n$qs", headers => $hd);
            is_deeply(json($r), $e->expect_ld($want, $n), "$what: t$n in listener $want") or diag($r->{body});
            broker_saw_no_name("$what t$n");
        }
        $c->clear_log;
        my $r = http_req(GET => "$SB/test/location?" . join('&', @$q, 'to=' . uri_escape($to)), headers => $hd);
        is($r->{headers}{location}, "$L->{$want}{2}{http}/x/y?z=1&authoritative=true",
           "$what: Location in listener $want, path and query kept");
        broker_saw_no_name("$what location", '/test/location?to=' . uri_escape($to));
    }
};

http_close();
$lka->stop;
$lkb->stop;
$c->stop;
done_testing;
