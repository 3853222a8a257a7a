#!/usr/bin/perl
# 153-listener-fallback.t: a listener the client may choose (client_listeners = vpn) that the
# topic's owner lacks. b1 has a vpn listener, b2 does not. Pulsar fails such a lookup ("the
# broker do not have vpn listener"); lookout gives the owner's lookup-listener (external)
# address instead, and never its internal one, logged once per client connection:
#   - binary (the test broker, hand-built frames from bin/pulsar-probe): LOOKUP_RESPONSE
#     for a LOOKUP naming vpn, and CLOSE_PRODUCER and TOPIC_MIGRATED on the connection that
#     named it, all naming b2;
#   - HTTP (the fake brokers of lib/PulsarBroker.pm, curl): a lookup's LookupData and a
#     307's Location naming b2, with listenerName=vpn, and with leak_guard = rewrite an
#     error text naming b2's internal host:port;
# and b1, which has vpn, still gets its vpn address.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json encode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarBroker;

need_tools('curl');
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }
# A lookout config: cluster prod with client_listeners = vpn, EXTRA keys, then BROKERS.
sub conf_of {
    my ($extra, $brokers) = @_;
    return "[lookout]\nworkers = 1\n\n[pulsar prod]\ninternalListenerName = internal\nlookupListenerName = external\n"
         . "client_listeners = vpn\n$extra\n$brokers";
}
my $LACKS = qr/\[warn\] [^\n]*broker prod\/b2 has no listener 'vpn', which the client chose; its lookup listener 'external' is used \(logged once per connection\)/;

# ---- binary ------------------------------------------------------------------------------

my %E = map { ($_ => free_port()) } qw(b1 b2);
my $vpn1 = free_port(); # b1's vpn address: advertised, never bound by lookout
my $t = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ map { { name => $_, advertisedListeners => 'internal:pulsar://127.0.0.1:0' } } qw(b1 b2) ],
    topics => [ { name => 't-b1', owner => 'b1' }, { name => 't-b2', owner => 'b2' },
                { name => 't-close', owner => 'b1' }, { name => 't-mig', owner => 'b1' } ]);
my %INT = map { ($_ => 'pulsar://' . $t->addr($_)) } qw(b1 b2);
my %EXT = map { ($_ => "pulsar://127.0.0.1:$E{$_}") } qw(b1 b2);
$t->control({ cmd => 'arm', on => 'producer', topic => 't-close', broker => 'b1',
              actions => [ { cmd => 'close_producer', topic => 't-close', assigned => 'b2', listener => 'internal' } ] });
$t->control({ cmd => 'arm', on => 'subscribe', topic => 't-mig', broker => 'b1',
              actions => [ { cmd => 'topic_migrated', topic => 't-mig', resource => 'consumer', force => JSON::PP::true,
                             url => $INT{b2} } ] });

mkdir "$dir/lk-bin";
my $lk = start_lookout(dir => "$dir/lk-bin", conf => conf_of('', <<"EOF"));
[broker prod/b1]
advertisedListeners = internal:$INT{b1},internal:http://127.0.0.1:9,external:$EXT{b1},vpn:pulsar://127.0.0.1:$vpn1

[broker prod/b2]
advertisedListeners = internal:$INT{b2},internal:http://127.0.0.2:9,external:$EXT{b2}
EOF
ok($lk->started, 'lookout (binary) started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# The frames a client gets at lookout's b1 address for STEPS, each its own.
sub probe {
    my (@steps) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", "127.0.0.1:$E{b1}", map { encode_json($_) } @steps ],
                           timeout => 60);
    my @lines = json_lines($r->{out});
    return ([ map { @{ $_->{received} // [] } } grep { ($_->{step} // '') =~ /^\d+$/ } @lines ], \@lines);
}
sub lookup_vpn {
    my ($topic, $id) = @_;
    return { send => 'LOOKUP', fields => { topic => "persistent://public/default/$topic", request_id => $id,
                                           authoritative => JSON::PP::true, advertised_listener_name => 'vpn' } };
}
sub hex_of { return join '', map { $_->{frame_hex} // '' } @{ $_[0] } }
my $b2_int_hex = unpack('H*', $INT{b2});

subtest 'LOOKUP naming vpn, for a topic of b2 (no vpn): b2\'s external URL, never its internal one' => sub {
    my $from = length($lk->log // '');
    my ($got, $lines) = probe(lookup_vpn('t-b2', 1), lookup_vpn('t-b2', 2));
    my @ans = grep { ($_->{type} // '') eq 'LOOKUP_RESPONSE' } @$got;
    is(scalar @ans, 2, 'two answers') or return diag(explain($lines));
    is_deeply([ map { $_->{fields}{brokerServiceUrl} } @ans ], [ ($EXT{b2}) x 2 ], 'brokerServiceUrl: b2 on lookout, both times');
    unlike(hex_of($got), qr/$b2_int_hex/, "$INT{b2} is in no frame the client gets");
    ok(wait_until(sub { substr($lk->log // '', $from) =~ $LACKS }, 5), 'logged: b2 lacks vpn, external is used')
        or diag(substr($lk->log // '', $from));
    my @n = substr($lk->log // '', $from) =~ /$LACKS/g;
    is(scalar @n, 1, '... once for the connection');
    unlike(substr($lk->log // '', $from), qr/passed through unchanged/, 'nothing passed through unchanged');
};

subtest 'LOOKUP naming vpn, for a topic of b1 (vpn): b1\'s vpn URL' => sub {
    my ($got, $lines) = probe(lookup_vpn('t-b1', 1));
    is(($got->[0]{fields}{brokerServiceUrl} // ''), "pulsar://127.0.0.1:$vpn1", 'brokerServiceUrl: b1\'s vpn address')
        or diag(explain($lines));
};

subtest 'CLOSE_PRODUCER on a connection that chose vpn, assigning b2: b2\'s external URL' => sub {
    my ($got, $lines) = probe(lookup_vpn('t-close', 1),
                              { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-close', producer_id => 1 },
                                expect => 2 });
    my ($cp) = grep { ($_->{type} // '') eq 'CLOSE_PRODUCER' } @$got;
    ok($cp, 'CLOSE_PRODUCER came through') or return diag(explain($lines));
    is($cp->{fields}{assignedBrokerServiceUrl}, $EXT{b2}, 'assignedBrokerServiceUrl: b2 on lookout');
    unlike(hex_of($got), qr/$b2_int_hex/, "$INT{b2} is in no frame the client gets");
};

subtest 'TOPIC_MIGRATED on a connection that chose vpn, to b2: b2\'s external URL' => sub {
    my ($got, $lines) = probe(lookup_vpn('t-mig', 1),
                              { send => 'SUBSCRIBE', fields => { topic => 'persistent://public/default/t-mig', consumer_id => 1,
                                                                 subscription => 's', subType => 0 }, expect => 2 });
    my ($m) = grep { ($_->{type} // '') eq 'TOPIC_MIGRATED' } @$got;
    ok($m, 'TOPIC_MIGRATED came through') or return diag(explain($lines));
    is($m->{fields}{brokerServiceUrl}, $EXT{b2}, 'brokerServiceUrl: b2 on lookout');
    unlike(hex_of($got), qr/$b2_int_hex/, "$INT{b2} is in no frame the client gets");
};

# ---- HTTP --------------------------------------------------------------------------------

my ($p1, $p2, $h1, $h2, $hv1) = free_ports(5);
my $c = PulsarBroker->start(dir => "$dir/http-brokers", brokers => [ "127.0.0.1:$p1", "127.0.0.2:$p2" ],
                            cluster => 'prod', own => { 't-b1' => 1, 't-b2' => 2 });
mkdir "$dir/lk-http";
my $lh = start_lookout(dir => "$dir/lk-http", conf => conf_of("leak_guard = rewrite\n", <<"EOF"));
[broker prod/b1]
advertisedListeners = @{[ $c->internal_listeners(1) ]},external:http://127.0.0.1:$h1,vpn:http://127.0.0.1:$hv1

[broker prod/b2]
advertisedListeners = @{[ $c->internal_listeners(2) ]},external:http://127.0.0.1:$h2
EOF
ok($lh->started, 'lookout (HTTP) started') or BAIL_OUT('lookout did not start: ' . ($lh->log // ''));
my $LK = '/lookup/v2/topic/persistent/public/default';

subtest 'HTTP lookup with listenerName=vpn, for a topic of b2: b2\'s external address' => sub {
    my $direct = curl("http://127.0.0.2:$p2$LK/t-b2");
    like($direct->{body}, qr/127\.0\.0\.2:$p2/, 'straight from the broker, LookupData names b2\'s internal address');
    my $from = length($lh->log // '');
    my $r = curl("http://127.0.0.1:$h1$LK/t-b2?listenerName=vpn");
    is($r->{status}, 200, 'status 200');
    my $j = eval { decode_json($r->{body}) } // {};
    is($j->{httpUrl}, "http://127.0.0.1:$h2", 'httpUrl: b2\'s external address') or diag($r->{body});
    unlike($r->{body}, qr/127\.0\.0\.2:$p2/, 'b2\'s internal address is nowhere in the body');
    ok(wait_until(sub { substr($lh->log // '', $from) =~ $LACKS }, 5), 'logged: b2 lacks vpn, external is used')
        or diag(substr($lh->log // '', $from));
};

subtest 'HTTP lookup with listenerName=vpn, for a topic of b1: b1\'s vpn address' => sub {
    my $r = curl("http://127.0.0.1:$h1$LK/t-b1?listenerName=vpn");
    my $j = eval { decode_json($r->{body}) } // {};
    is($j->{httpUrl}, "http://127.0.0.1:$hv1", 'httpUrl: b1\'s vpn address') or diag($r->{body});
};

subtest 'a 307 to b2 with X-Pulsar-ListenerName: vpn: Location on b2\'s external address' => sub {
    my $r = curl('-H', 'X-Pulsar-ListenerName: vpn', "http://127.0.0.1:$h1$LK/t-unowned");
    is($r->{status}, 307, 'status 307');
    is($r->{headers}{location}, "http://127.0.0.1:$h2$LK/t-unowned?authoritative=true", 'Location: b2 on lookout')
        or diag(explain($r->{headers}));
};

subtest 'leak_guard = rewrite, listenerName=vpn: an error naming b2\'s internal address names its external one' => sub {
    my $reason = "not served here, try 127.0.0.2:$p2";
    (my $q = $reason) =~ s/([^A-Za-z0-9._~-])/sprintf '%%%02X', ord $1/ge;
    my $r = curl("http://127.0.0.1:$h1/test/status?code=503&reason=$q&listenerName=vpn");
    is($r->{status}, 503, 'the 503');
    is(eval { decode_json($r->{body})->{reason} }, "not served here, try 127.0.0.1:$h2", 'its reason names b2 on lookout')
        or diag($r->{body});
    unlike($r->{body}, qr/127\.0\.0\.2:$p2/, '... and not b2\'s internal address');
};

done_testing();
