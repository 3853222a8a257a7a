#!/usr/bin/perl
# 108-pulsar-binary.t: the Pulsar binary protocol through lookout (issue 9), against the
# test broker (bin/pulsar-testbroker: three brokers, each with an `internal` listener where
# it listens and an `external` one that names lookout) and a client nobody here wrote
# (pulsar-flex from npm), plus hand-built frames (bin/pulsar-probe):
#   - pulsar-flex looks up, produces and consumes through lookout's serviceUrl and only
#     ever dials lookout's addresses;
#   - LOOKUP_RESPONSE (Redirect along a chain, and Connect), CLOSE_PRODUCER and
#     CLOSE_CONSUMER name lookout's addresses, keeping the broker's unknown fields;
#     TOPIC_MIGRATED to a cluster the map lacks passes as it is;
#   - advertised_listener_name picks only a listener the client may choose (the internal
#     one is not, by default: issue 18 item 3; more in 109-pulsar-frames.t) and never
#     reaches a broker;
#   - pulsar_routing = service: Connect answers say proxy_through_service_url, and a
#     CONNECT's proxy_to_broker_url routes to that broker, or is refused, never dialled;
#   - payload frames pass byte for byte; bad sizes, a first frame that is not CONNECT, a
#     frame split byte by byte, unknown commands and a future protocol version.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

sub probe {
    my ($addr, $opts, @steps) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", $addr, @$opts, map { encode_json($_) } @steps ],
                           timeout => 60);
    return json_lines($r->{out});
}

sub flex_missing {
    return 'node not found (tests/deps.sh installs nodejs and npm)' unless Lookout::_which('node');
    my $mod = $ENV{LOOKOUT_PULSAR_FLEX} // repo_top() . '/tests/pulsar/node_modules/pulsar-flex';
    return -f "$mod/package.json" ? undef : "pulsar-flex is not installed in $mod (tests/deps.sh)";
}

# lookout's external addresses: one per broker, and the service address.
my %E = map { ($_ => free_port()) } qw(b1 b2 b3);
my $svc = free_port();
my $t = PulsarBinBroker->start(
    dir => $dir, unknown_command => 'ignore',
    brokers => [ map { { name => $_, advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$E{$_}" } }
                 qw(b1 b2 b3) ],
    topics => [ { name => 't-b2', owner => 'b2' }, { name => 't-chain', owner => 'b2', redirects => ['b3'] },
                { name => 't-close', owner => 'b1' }, { name => 't-mig', owner => 'b1' },
                { name => 't-bad', owner => 'b1' } ],
    triggers => [
        # a LOOKUP_RESPONSE whose lookupTopicResponse is not protobuf (a varint cut short)
        # sent after the lookup's answer, on the connection it came on
        { on => 'lookup', topic => 't-bad', actions => [ { cmd => 'raw', broker => 'b1', hex => '0000000c000000080818c20103ffffff' } ] },
        { on => 'producer', topic => 't-close',
          actions => [ { cmd => 'close_producer', topic => 't-close', assigned => 'b2', listener => 'internal' } ] },
        { on => 'subscribe', topic => 't-mig',
          actions => [ { cmd => 'topic_migrated', topic => 't-mig', resource => 'consumer', force => JSON::PP::true,
                         url => 'pulsar://other.example:6650', url_tls => 'pulsar+ssl://other.example:6651' } ] },
    ]);
my %I = map { ($_ => $t->addr($_)) } qw(b1 b2 b3);
my %EXT = map { ($_ => "pulsar://127.0.0.1:$E{$_}") } qw(b1 b2 b3);
my %INT = map { ($_ => "pulsar://$I{$_}") } qw(b1 b2 b3);

sub lookout_conf {
    my (%o) = @_;
    # Real brokers have a web address too; nothing listens on this one, and no test goes there.
    my %web = (b1 => 1, b2 => 2, b3 => 3);
    my $brokers = join '', map { "[broker prod/$_]\nadvertisedListeners = internal:$INT{$_},internal:http://127.0.0.$web{$_}:9,"
                                 . "external:$EXT{$_}\n\n" } qw(b1 b2 b3);
    return <<"EOF" . $brokers;
[lookout]
workers = 1
log_level = debug

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc
$o{extra}
EOF
}

my $lk = start_lookout(dir => $dir, name => 'per-broker', conf => lookout_conf(extra => ''));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
like($lk->log, qr/listening on 127\.0\.0\.1:$svc \(pulsar\)/, 'it listens on the serviceUrl');

subtest 'a lookup through the service address names lookout, never a broker' => sub {
    my @r = probe("127.0.0.1:$svc", [], { lookup => 'persistent://public/default/t-b2', follow => 0 });
    my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
    is(($c->{received}[0]{type} // ''), 'CONNECTED', 'CONNECT answered through lookout') or diag(explain(\@r));
    my ($l) = grep { $_->{lookup} } @r;
    my $resp = $l->{hops}[0]{fields} // {};
    is($resp->{brokerServiceUrl}, $EXT{b2}, 'brokerServiceUrl: the owner b2 at its external (lookout) address')
        or diag(explain($l));
    ok(!exists $resp->{brokerServiceUrlTls}, 'no brokerServiceUrlTls: the external listener has none');
    my ($out) = grep { $_->{type} eq 'LOOKUP_RESPONSE' } $t->frames(dir => 'out');
    is($out->{fields}{brokerServiceUrl}, $INT{b2}, '... where the broker had said its internal one');
};

subtest 'a Redirect chain: every hop is a lookout address, and the client follows it through lookout' => sub {
    my @r = probe("127.0.0.1:$svc", [], { lookup => 'persistent://public/default/t-chain', follow => 5 });
    my ($l) = grep { $_->{lookup} } @r;
    my @hops = @{ $l->{hops} // [] };
    ok(@hops >= 2, 'at least two hops') or return diag(explain(\@r));
    ok(!(grep { ($_->{fields}{brokerServiceUrl} // '') !~ /^pulsar:\/\/127\.0\.0\.1:(?:$E{b1}|$E{b2}|$E{b3})$/ } @hops),
       'each answer names a lookout address') or diag(explain(\@hops));
    is($hops[-1]{fields}{response}, 1, 'the last one is Connect') or diag(explain(\@hops));
    is($hops[-1]{fields}{brokerServiceUrl}, $EXT{b2}, '... to the owner b2');
    ok(!(grep { $_->{address} !~ /^127\.0\.0\.1:(?:$svc|$E{b1}|$E{b2}|$E{b3})$/ } @hops), 'the client dialled only lookout');
};

subtest 'advertised_listener_name: the internal listener is not the client\'s; no name reaches a broker' => sub {
    my $n = () = $t->frames(type => 'LOOKUP', dir => 'in');
    my @r = probe("127.0.0.1:$svc", [],
                  { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b2', request_id => 7,
                                                  authoritative => JSON::PP::true, advertised_listener_name => 'internal' } },
                  { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b2', request_id => 8,
                                                  authoritative => JSON::PP::true, advertised_listener_name => 'nosuch' } });
    my @ans = map { $_->{received}[0]{fields} // {} } grep { ($_->{step} // '') =~ /^\d+$/ } @r;
    is($ans[0]{brokerServiceUrl}, $EXT{b2}, "naming 'internal' gets lookupListenerName's, never the internal address");
    is($ans[1]{brokerServiceUrl}, $EXT{b2}, "naming a listener the map lacks gets lookupListenerName's");
    my @in = ($t->frames(type => 'LOOKUP', dir => 'in'))[$n .. $n + 1];
    ok(@in == 2 && !(grep { exists $_->{fields}{advertised_listener_name} } @in), 'the broker saw neither name')
        or diag(explain(\@in));
    is_deeply([ map { $_->{fields}{request_id} } @in ], [ 7, 8 ], '... and the rest of each LOOKUP as sent');
};

subtest 'CLOSE_PRODUCER: the assigned URL is rewritten, unknown fields kept' => sub {
    my @r = probe("127.0.0.1:$E{b1}", [],
                  { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-close', producer_id => 1 },
                    expect => 2 });
    my @got = map { @{ $_->{received} // [] } } grep { ($_->{step} // '') =~ /^\d+$/ } @r;
    my ($cp) = grep { ($_->{type} // '') eq 'CLOSE_PRODUCER' } @got;
    ok($cp, 'CLOSE_PRODUCER came through') or return diag(explain(\@r));
    is($cp->{fields}{assignedBrokerServiceUrl}, $EXT{b2}, 'assignedBrokerServiceUrl: b2 on lookout');
    my ($sent) = $t->frames(type => 'CLOSE_PRODUCER', dir => 'out');
    is($sent->{fields}{assignedBrokerServiceUrl}, $INT{b2}, '... where the broker named its internal address');
    is_deeply($cp->{unknown_fields}, $sent->{unknown_fields}, "... the broker's unknown fields kept")
        or diag(explain([ $cp, $sent ]));
};

subtest 'TOPIC_MIGRATED to a cluster the map lacks passes as it is, logged' => sub {
    my @r = probe("127.0.0.1:$E{b1}", [],
                  { send => 'SUBSCRIBE', fields => { topic => 'persistent://public/default/t-mig', consumer_id => 1,
                                                     subscription => 's', subType => 0 }, expect => 2 });
    my @got = map { @{ $_->{received} // [] } } grep { ($_->{step} // '') =~ /^\d+$/ } @r;
    my ($m) = grep { ($_->{type} // '') eq 'TOPIC_MIGRATED' } @got;
    ok($m, 'TOPIC_MIGRATED came through') or return diag(explain(\@r));
    is($m->{fields}{brokerServiceUrl}, 'pulsar://other.example:6650', 'unchanged');
    ok($lk->wait_log(qr/TOPIC_MIGRATED names pulsar:\/\/other\.example:6650.*a cluster the map does not have/, 5),
       '... and logged');
};

subtest 'pulsar-flex round-trips through the service address' => sub {
    my $why = flex_missing();
    plan skip_all => $why if $why;
    my $r = KafkaMock::run([ 'node', "$BIN/pulsar-flex-check", "127.0.0.1:$svc", '--timeout', 15, '--topic', 't-b2',
                             '--messages', 20 ], timeout => 60);
    my ($j) = json_lines($r->{out});
    ok($j && $j->{ok}, 'pulsar-flex got back the 20 messages it sent') or return diag($r->{out}, $r->{err});
    my %dialed = map { ($_ => 1) } @{ $j->{dialed} // [] };
    is_deeply([ sort keys %dialed ], [ sort("127.0.0.1:$svc", "127.0.0.1:$E{b2}") ],
              'it dialled lookout only: the service address and b2\'s') or diag(explain($j->{dialed}));
    my @send = $t->frames(type => 'SEND', dir => 'in');
    ok(@send >= 20 && !(grep { !$_->{payload}{checksum_ok} } @send), 'every SEND reached the broker with its checksum intact');
};

subtest 'frames lookout does not know, and versions it has not met, pass' => sub {
    my @r = probe("127.0.0.1:$E{b1}", [ '--protocol-version', 99 ],
                  { raw => '0000000f0000000b08e807' . 'ba3e0568656c6c6f', expect => 0 }, { wait => 0.3 },
                  { send => 'PING' });
    my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
    is(($c->{received}[0]{type} // ''), 'CONNECTED', 'a CONNECT of protocol version 99 is answered');
    my ($u) = grep { ($_->{type_id} // 0) == 1000 } $t->frames(dir => 'in');
    ok($u, 'an unknown command type (1000) reached the broker') or diag(explain([ $t->frames(dir => 'in') ]));
    is($u->{command_hex}, '08e807ba3e0568656c6c6f', '... byte for byte');
    my ($p) = grep { ($_->{step} // '') eq '2' } @r;
    is(($p->{received}[0]{type} // ''), 'PONG', 'and the connection goes on');

    @r = probe("127.0.0.1:$E{b2}", [ '--split', 1 ],
               { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b2', authoritative => JSON::PP::true } });
    my ($l) = grep { ($_->{step} // '') eq '0' } @r;
    is(($l->{received}[0]{fields}{brokerServiceUrl} // ''), $EXT{b2}, 'a LOOKUP sent one byte at a time is answered and rewritten');
};

subtest 'bad input closes that connection only' => sub {
    for my $case ([ 'a frame over max_frame_bytes', pack('NN', 0x7ffffff0, 8) ],
                  [ 'a command size of 0', pack('NN', 4, 0) ],
                  [ 'a command larger than its frame', pack('NN', 8, 100) ],
                  [ 'a first frame that is not CONNECT', pack('NN', 6, 2) . "\x08\x12" ]) {
        is(closed_after($svc, $case->[1]), 0, "$case->[0]: closed");
    }
    like($lk->log, qr/client sent a frame of \d+ bytes with a command of \d+ \(over max_frame_bytes\)/, 'logged with the sizes');
    like($lk->log, qr/first frame is command type 18, not CONNECT/, 'logged with the type');
    my @r = probe("127.0.0.1:$E{b1}", [], { raw => '0000000c000000080817ba0103ffffff', expect => 1 });
    my ($m) = grep { ($_->{step} // '') eq '0' } @r;
    ok($m->{closed}, 'a LOOKUP that does not decode: closed') or diag(explain(\@r));
    like($lk->log, qr/client sent a command of type 23 that does not decode/, '... and logged');
    @r = probe("127.0.0.1:$E{b1}", [], { lookup => 'persistent://public/default/t-bad', follow => 0 }, { wait => 1 });
    my ($w) = grep { ($_->{step} // '') eq '1' } @r;
    ok($w->{closed} && !@{ $w->{received} // [] },
       'a LOOKUP_RESPONSE that does not decode: the connection closed, nothing of it passed') or diag(explain(\@r));
    ok($lk->wait_log(qr/broker sent a command of type 24 that does not decode/, 5), '... and logged');
    @r = probe("127.0.0.1:$svc", [], { send => 'PING' });
    my ($p) = grep { ($_->{step} // '') eq '0' } @r;
    is(($p->{received}[0]{type} // ''), 'PONG', 'others are still served');
};
$lk->stop;

subtest 'pulsar_routing = service: Connect says proxy_through_service_url; CONNECT proxy_to_broker_url routes' => sub {
    my $lk2 = start_lookout(dir => $dir, name => 'service', conf => lookout_conf(extra => 'pulsar_routing = service'));
    ok($lk2->started, 'lookout started') or return diag($lk2->log);
    my @r = probe("127.0.0.1:$svc", [], { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b2',
                                                                          authoritative => JSON::PP::true } });
    my ($l) = grep { ($_->{step} // '') eq '0' } @r;
    my $f = $l->{received}[0]{fields} // {};
    is($f->{response}, 1, 'Connect');
    ok($f->{proxy_through_service_url}, '... with proxy_through_service_url') or diag(explain($f));
    is($f->{brokerServiceUrl}, $EXT{b2}, '... naming the owner by its lookup-listener address');

    @r = probe("127.0.0.1:$svc", [ '--connect', encode_json({ proxy_to_broker_url => $EXT{b2} }) ],
               { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b2', producer_id => 1 } });
    my ($pr) = grep { ($_->{step} // '') eq '0' } @r;
    is(($pr->{received}[0]{type} // ''), 'PRODUCER_SUCCESS', 'proxy_to_broker_url = b2: the producer reaches the owner')
        or diag(explain(\@r));
    like($lk2->log, qr/to broker prod\/b2 at \Q$I{b2}\E/, '... b2, through the service address');

    @r = probe("127.0.0.1:$svc", [ '--connect', encode_json({ proxy_to_broker_url => 'pulsar://10.9.9.9:6650' }) ],
               { send => 'PING' });
    my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
    ok($c->{closed} || !@{ $c->{received} // [] }, 'proxy_to_broker_url naming no mapped broker: closed') or diag(explain(\@r));
    like($lk2->log, qr/proxy_to_broker_url pulsar:\/\/10\.9\.9\.9:6650 names no broker in the map; refused, not dialled/,
         '... refused, not dialled');
    $lk2->stop;
};

$t->stop;

subtest 'pulsar+ssl: TLS at the edge, brokers told apart by SNI on one port, TLS to the brokers' => sub {
    my $c = test_certs();
    my ($port, $ssvc) = (free_port(), free_port());
    my $x = PulsarBinBroker->start(
        dir => $dir, tls_cert => $c->{broker_crt}, tls_key => $c->{broker_key},
        brokers => [ map { { name => $_, advertisedListeners => "internal:pulsar+ssl://127.0.0.1:0,"
                                                                . "external:pulsar+ssl://$_.lookout.test:$port" } } qw(b1 b2) ],
        topics => [ { name => 't-b2', owner => 'b2' } ]);
    my %web = (b1 => 1, b2 => 2);
    my $brokers = join '', map {
        "[broker tls/$_]\nadvertisedListeners = internal:" . $x->url($_, 'internal', 'pulsar+ssl')
            . ",internal:http://127.0.0.$web{$_}:9,external:pulsar+ssl://$_.lookout.test:$port\n\n"
    } qw(b1 b2);
    my $lk3 = start_lookout(dir => $dir, name => 'tls', conf => <<"EOF" . $brokers);
[lookout]
workers = 1
log_level = debug
tls.certificate = $c->{edge_crt}
tls.key = $c->{edge_key}
tls.upstream_ca = $c->{internal_ca}

[pulsar tls]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar+ssl://127.0.0.1:$ssvc
bind = 127.0.0.1
EOF
    ok($lk3->started, 'lookout started') or return diag($lk3->log);
    my @tls = ('--tls', '--cafile', $c->{edge_ca});
    my @r = probe("127.0.0.1:$ssvc", [ @tls, '--sni', 'lookout.test' ], { lookup => 'persistent://public/default/t-b2', follow => 0 });
    my ($l) = grep { $_->{lookup} } @r;
    my $f = $l->{hops}[0]{fields} // {};
    is($f->{brokerServiceUrlTls}, "pulsar+ssl://b2.lookout.test:$port", 'the answer names b2 by its name on the shared port')
        or diag(explain(\@r));
    ok(!exists $f->{brokerServiceUrl}, '... and no pulsar:// address: the listener has none');
    my $producer = { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b2', producer_id => 1 } };
    @r = probe("127.0.0.1:$port", [ @tls, '--sni', 'b2.lookout.test' ], $producer);
    my ($p) = grep { ($_->{step} // '') eq '0' } @r;
    is(($p->{received}[0]{type} // ''), 'PRODUCER_SUCCESS', 'SNI b2.lookout.test reaches the owner b2') or diag(explain(\@r));
    @r = probe("127.0.0.1:$port", [ @tls, '--sni', 'b1.lookout.test' ], $producer);
    ($p) = grep { ($_->{step} // '') eq '0' } @r;
    is(($p->{received}[0]{type} // ''), 'ERROR', 'SNI b1.lookout.test reaches b1, which does not own the topic');
    my $b2 = $x->addr('b2');
    like($lk3->log, qr/to broker tls\/b2 at \Q$b2\E.*sni: b2\.lookout\.test/, 'lookout connected to b2 (over TLS, verified)');
    my ($acc) = grep { ($_->{event} // '') eq 'accept' && ($_->{broker} // '') eq 'b2' } $x->frames;
    is($acc->{scheme}, 'pulsar+ssl', '... which the broker took as pulsar+ssl');
    @r = probe("127.0.0.1:$port", [ @tls, '--sni', 'b9.lookout.test' ], { send => 'PING' });
    my ($cn) = grep { ($_->{step} // '') eq 'connect' } @r;
    ok(!@{ $cn->{received} // [] }, 'an SNI name that names no broker: closed');
    like($lk3->log, qr/no Pulsar broker on this address for that SNI name/, '... and logged');
    $lk3->stop;
    $x->stop;
};

done_testing;
