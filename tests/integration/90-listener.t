#!/usr/bin/perl
# 90-listener.t: listener selection end to end (CONTRACT §3, issue 3 item 2), through
# lookout in front of three fake brokers. Every broker has three listeners in lookout's
# map: internal (what brokers hand out), external (the lookupListenerName) and vpn, each
# on its own 127.x address, so the listener a response was rewritten into shows in its
# addresses. Checked on both things that carry addresses: a lookup's LookupData body and an
# admin 307's Location.
#   - the query `listenerName` wins over the header `X-Pulsar-ListenerName`;
#   - either one wins over lookupListenerName; an unknown name falls back to it;
#   - without lookupListenerName (second lookout), only a named listener rewrites, and no
#     name (or an unknown one) rewrites nothing;
#   - the name never reaches a broker (neither the parameter nor the header: the fake
#     brokers have no "vpn" or "external" listener, as a 4.x broker that would then fail
#     the lookup), and every other query parameter arrives byte for byte.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;

my $certs = test_certs();
my $dir = tmp_dir();

# Internal: b1 and b3 plain http, b2 http + https (so its LookupData has TLS fields).
my @p = map { free_port("127.0.0.2$_") } 1 .. 3;
my $p2s = free_port('127.0.0.22');
my $c = PulsarBroker->start(
    dir     => "$dir/brokers",
    brokers => [ "127.0.0.21:$p[0]", "http://127.0.0.22:$p[1],https://127.0.0.22:$p2s", "127.0.0.23:$p[2]" ],
    own     => { t1 => 1, t2 => 2, t3 => 3 },
    cert    => $certs->{broker_crt}, key => $certs->{broker_key},
);

# Listener addresses per broker: external = pulsar + pulsar+ssl + http (no https),
# vpn = pulsar + http + https (no pulsar+ssl). Only external addresses are bound.
my (%L, %ext_sect);
for my $n (1 .. 3) {
    my $b = $c->broker($n);
    $L{internal}{$n} = { map { ($_ => $b->{$_}) } grep { $b->{$_} } qw(pulsar pulsar_ssl http https) };
    my $eh = "127.0.0.3$n";
    $L{external}{$n} = { pulsar => "pulsar://$eh:" . free_port($eh), pulsar_ssl => "pulsar+ssl://$eh:" . free_port($eh),
                         http => "http://$eh:" . free_port($eh) };
    my $vh = "127.0.0.5$n";
    $L{vpn}{$n} = { pulsar => "pulsar://$vh:" . free_port($vh), http => "http://$vh:" . free_port($vh),
                    https => "https://$vh:" . free_port($vh) };
}

sub broker_conf {
    my $t = '';
    for my $n (1 .. 3) {
        my @l = $c->internal_listeners($n);
        for my $ln (qw(external vpn)) {
            push @l, map { "$ln:$L{$ln}{$n}{$_}" } grep { $L{$ln}{$n}{$_} } qw(pulsar pulsar_ssl http https);
        }
        $t .= "[broker prod/b$n]\nadvertisedListeners = " . join(',', @l) . "\n\n";
    }
    return $t;
}

my $tls = <<"EOF";
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
tls.upstream_ca = $certs->{internal_ca}
EOF

# Lookout A: lookupListenerName = external.
my $wa = free_port('127.0.0.40');
my $lka = start_lookout(dir => $dir, name => 'with-lookup-listener',
    wait => [ "127.0.0.40:$wa", map { $L{external}{$_}{http} =~ m{//(.*)} } 1 .. 3 ], conf => <<"EOF" . broker_conf());
[lookout]
workers = 1
log_level = debug
timeout.response = 5s
$tls
[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.40:$wa
leak_guard = log

EOF
ok($lka->started, 'lookout A (lookupListenerName = external) started')
    or BAIL_OUT('lookout A did not start: ' . ($lka->log // ''));

# Lookout B: no lookupListenerName; only its service address is bound.
my $wb = free_port('127.0.0.41');
my $lkb = start_lookout(dir => $dir, name => 'without-lookup-listener', wait => ["127.0.0.41:$wb"],
                        conf => <<"EOF" . broker_conf());
[lookout]
workers = 1
log_level = debug
timeout.response = 5s
$tls
[pulsar prod]
internalListenerName = internal
webServiceUrl = http://127.0.0.41:$wb
leak_guard = off

EOF
ok($lkb->started, 'lookout B (no lookupListenerName) started')
    or BAIL_OUT('lookout B did not start: ' . ($lkb->log // ''));

my $A1 = $L{external}{1}{http};    # b1's lookup-listener address on lookout A
my $SA = "http://127.0.0.40:$wa";
my $SB = "http://127.0.0.41:$wb";
my $LK = '/lookup/v2/topic/persistent/public/default';
my $ADM = '/admin/v2/persistent/public/default';

# The LookupData lookout must produce for broker N in listener LN: exactly that listener's
# addresses, plus the fields the broker sent that are not addresses.
sub expect_ld {
    my ($ln, $n) = @_;
    my $a = $L{$ln}{$n};
    my %j = (brokerUrlSsl => '');
    $j{brokerUrl} = $j{nativeUrl} = $a->{pulsar} if $a->{pulsar};
    $j{brokerUrlTls} = $a->{pulsar_ssl} if $a->{pulsar_ssl};
    $j{httpUrl} = $a->{http} if $a->{http};
    $j{httpUrlTls} = $a->{https} if $a->{https};
    return \%j;
}

# Which listener an http URL belongs to ("internal:2", "vpn:3", ...), or "unknown:URL".
sub listener_of_url {
    my ($url) = @_;
    return 'none' unless defined $url;
    my ($hp) = $url =~ m{^[a-z+]+://([^/?#]+)} or return "unknown:$url";
    for my $ln (sort keys %L) {
        for my $n (1 .. 3) {
            for my $u (values %{ $L{$ln}{$n} }) {
                return "$ln:$n" if $u =~ m{//\Q$hp\E$};
            }
        }
    }
    return "unknown:$url";
}

# What reached the brokers since the last clear_log must carry no listener name, and the
# query must be WANT (when given) byte for byte.
sub broker_saw_no_name {
    my ($what, $want_target) = @_;
    my @recs = $c->requests;
    ok(@recs >= 1, "$what: reached a broker") or return;
    my @bad = grep { ($_->{target} // '') =~ /[?&]listenerName(?:[=&#]|$)/ || exists $_->{headers}{'x-pulsar-listenername'} } @recs;
    ok(!@bad, "$what: no listenerName parameter and no X-Pulsar-ListenerName header upstream")
        or diag(explain([ map { { target => $_->{target}, headers => $_->{headers} } } @bad ]));
    if (defined $want_target) {
        my $t = $recs[0]{target};
        ok(ref $want_target ? $t =~ $want_target : $t eq $want_target, "$what: upstream target byte-exact")
            or diag("got '$t', want '$want_target'");
    }
}

# One selection case on lookout A: a lookup of t2 (owner b2) and an admin call on t2
# through b1 (307 to b2), with QUERY added to both and HDRS sent. Both must come out in
# listener WANT.
sub case_a {
    my ($name, $query, $hdrs, $want) = @_;
    subtest $name => sub {
        my @h = map { ('-H', $_) } @$hdrs;
        my $sep = length $query ? '?' : '';
        $c->clear_log;
        my $r = curl(@h, "$A1$LK/t2$sep$query");
        is($r->{status}, 200, 'lookup: 200') or diag($r->{head} . $r->{body});
        my $j = eval { decode_json($r->{body}) };
        is_deeply($j, expect_ld($want, 2), "lookup body: b2 in listener $want") or diag($r->{body});
        broker_saw_no_name('lookup');
        $c->clear_log;
        $r = curl(@h, "$A1$ADM/t2/stats$sep$query");
        is($r->{status}, 307, 'admin call on a non-owner: 307');
        is(listener_of_url($r->{headers}{location}), "$want:2", "Location names b2 in listener $want")
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
        my $r = curl("$A1$ADM/t2/stats?$in");
        is($r->{status}, 307, "?$in: 307");
        broker_saw_no_name("?$in", "$ADM/t2/stats$up");
        # The broker rebuilt its Location from what it got (authoritative replaced, last);
        # lookout moves host:port only.
        (my $keep = $up) =~ s/^\?//;
        $keep = join '&', grep { !/^authoritative=/ } split /&/, $keep;
        $keep .= '&' if length $keep;
        is($r->{headers}{location}, "$L{$ln}{2}{http}$ADM/t2/stats?${keep}authoritative=true",
           "?$in: Location in listener $ln, same path and query");
    }
    $c->clear_log;
    my $r = curl('-H', 'X-Pulsar-ListenerName: vpn', "$A1$ADM/t2/stats?listenerName=vpn");
    broker_saw_no_name('only the name', qr{^\Q$ADM\E/t2/stats\??$});
    is($r->{headers}{location}, "$L{vpn}{2}{http}$ADM/t2/stats?authoritative=true", '... Location');
};

subtest 'lookup 307 and service address follow the selection too' => sub {
    $c->clear_log;
    my $r = curl("$A1$LK/u1?listenerName=vpn");
    is($r->{status}, 307, 'unowned lookup: 307');
    is($r->{headers}{location}, "$L{vpn}{2}{http}$LK/u1?authoritative=true", 'Location in listener vpn, path/query exact');
    broker_saw_no_name('lookup 307', "$LK/u1");
    $r = curl('-H', 'X-Pulsar-ListenerName: vpn', "$A1/lookup/v2/destination/persistent/pr/cl/ns/u1");
    is($r->{headers}{location}, "$L{vpn}{2}{http}/lookup/v2/destination/persistent/pr/cl/ns/u1?authoritative=true",
       '/destination 307 in listener vpn');
    for my $n (1 .. 3) {
        $c->clear_log;
        $r = curl("$SA$LK/t$n?listenerName=vpn");
        is_deeply(eval { decode_json($r->{body}) }, expect_ld('vpn', $n), "service address, t$n, vpn")
            or diag($r->{body});
        broker_saw_no_name("service address t$n");
        $r = curl("$SA$LK/t$n");
        is_deeply(eval { decode_json($r->{body}) }, expect_ld('external', $n), "service address, t$n, no name: external")
            or diag($r->{body});
    }
};

# ---- lookout B: no lookupListenerName -------------------------------------------------------
subtest 'no lookupListenerName: no name rewrites nothing' => sub {
    for my $n (1 .. 3) {
        my $direct = curl("$L{internal}{2}{http}$LK/t$n");
        is($direct->{status}, 200, "direct lookup of t$n");
        $c->clear_log;
        my $r = curl("$SB$LK/t$n");
        is($r->{status}, 200, "through lookout B: t$n 200");
        is($r->{body}, $direct->{body}, "... body byte for byte what the broker sent (internal)");
        is_deeply(eval { decode_json($r->{body}) }, expect_ld('internal', $n), '... internal LookupData');
    }
    my $to = "$L{internal}{2}{http}/x/y?z=1&authoritative=true";
    my $r = curl("$SB/test/location?to=" . uri_escape($to));
    is($r->{status}, 307, '307 through lookout B');
    is($r->{headers}{location}, $to, '... Location untouched');
    for my $name ('listenerName=nope', 'listenerName=') {
        $c->clear_log;
        $r = curl("$SB$LK/t2?$name");
        is_deeply(eval { decode_json($r->{body}) }, expect_ld('internal', 2), "?$name: nothing rewritten");
        broker_saw_no_name("?$name");
        $r = curl("$SB/test/location?$name&to=" . uri_escape($to));
        is($r->{headers}{location}, $to, "?$name: Location untouched");
    }
    $c->clear_log;
    $r = curl('-H', 'X-Pulsar-ListenerName: nope', "$SB$LK/t2");
    is_deeply(eval { decode_json($r->{body}) }, expect_ld('internal', 2), 'unknown header name: nothing rewritten');
    broker_saw_no_name('unknown header');
};

subtest 'no lookupListenerName: a named listener still rewrites' => sub {
    my $to = "$L{internal}{2}{http}/x/y?z=1&authoritative=true";
    for my $how ([ 'query', ['listenerName=vpn'], [] ],
                 [ 'header', [], ['X-Pulsar-ListenerName: vpn'] ],
                 [ 'query over header', ['listenerName=vpn'], ['X-Pulsar-ListenerName: external'] ],
                 [ 'query external', ['listenerName=external'], [] ]) {
        my ($what, $q, $hd) = @$how;
        my $want = $what eq 'query external' ? 'external' : 'vpn';
        my @h = map { ('-H', $_) } @$hd;
        my $qs = @$q ? "?$q->[0]" : '';
        for my $n (1 .. 3) {
            $c->clear_log;
            my $r = curl(@h, "$SB$LK/t$n$qs");
            is_deeply(eval { decode_json($r->{body}) }, expect_ld($want, $n), "$what: t$n in listener $want")
                or diag($r->{body});
            broker_saw_no_name("$what t$n");
        }
        $c->clear_log;
        my $r = curl(@h, "$SB/test/location?" . join('&', @$q, 'to=' . uri_escape($to)));
        is($r->{headers}{location}, "$L{$want}{2}{http}/x/y?z=1&authoritative=true",
           "$what: Location in listener $want, path and query kept");
        broker_saw_no_name("$what location", "/test/location?to=" . uri_escape($to));
    }
};

sub uri_escape {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9\-._~\/:])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

$lka->stop;
$lkb->stop;
$c->stop;
done_testing;
