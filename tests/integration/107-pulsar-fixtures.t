#!/usr/bin/perl
# 107-pulsar-fixtures.t: the Pulsar binary-protocol fixtures themselves, without lookout
# (issue 9, "Tests"), checked by code nobody here wrote where there is some:
#   - pulsar-flex (npm, a pure JavaScript client: bin/pulsar-flex-check) looks topics up at
#     one broker, is redirected to the owner, produces (singly and in batches, with CRC-32C
#     checksums the broker verifies), consumes and acknowledges through the test broker
#     (bin/pulsar-testbroker, lib/PulsarBinBroker.pm); it survives CLOSE_PRODUCER and
#     CLOSE_CONSUMER with assigned URLs mid-stream and answers the broker's PINGs;
#   - what pulsar-flex 1.1.1 cannot do is pinned here, so that lookout's tests know: it
#     does not check MESSAGE checksums, misreads 0x0e02 broker entry metadata, dies on command
#     types it does not know, and (so) on TOPIC_MIGRATED, which a broker therefore never
#     sends to its protocol v17; it takes any Redirect for the owner, so chains fail;
#   - google-protobuf, with the code Apache's PulsarApi.proto generates (as pulsar-flex ships
#     it: bin/pulsar-pb-check), decodes every frame the test broker sent and received and
#     agrees field by field with the broker's own decoder. tshark 4.0 has no Pulsar
#     dissector (`tshark -G protocols` lists none), so it is not used here;
#   - hand-built frames (bin/pulsar-probe): lookups with Redirect chains and authoritative,
#     advertised_listener_name (an unknown one fails as a 4.x broker fails it), bind-address
#     listeners, partitioned metadata, topics not owned here, bad checksums, a future
#     protocol version, a frame split byte by byte, and frames that close the connection;
#   - the test-broker's control commands and triggers (CLOSE_PRODUCER/CLOSE_CONSUMER with
#     assigned URLs, TOPIC_MIGRATED, PING, unknown commands, raw bytes) and its TLS listener.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
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
my $NO_REQUEST_ID = '18446744073709551615';    # uint64 -1: what brokers put in commands they start

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

# Why pulsar-flex cannot run here, or undef.
sub flex_missing {
    return 'node not found (tests/deps.sh installs nodejs and npm)' unless Lookout::_which('node');
    my $mod = $ENV{LOOKOUT_PULSAR_FLEX} // repo_top() . '/tests/pulsar/node_modules/pulsar-flex';
    return "pulsar-flex is not installed in $mod (tests/deps.sh runs npm ci in tests/pulsar)"
        unless -f "$mod/package.json";
    return undef;
}

# flex(ADDRESS, ARGS...): pulsar-flex-check's JSON answer and the run ({exit, out, err}).
sub flex {
    my ($addr, @args) = @_;
    my $r = KafkaMock::run([ 'node', "$BIN/pulsar-flex-check", $addr, '--timeout', 15, @args ], timeout => 60);
    my ($j) = json_lines($r->{out});
    return ($j // {}, $r);
}

# probe(ADDRESS, [OPTIONS], STEPS...): pulsar-probe's JSON lines (CONNECT's answer first,
# unless --no-connect).
sub probe {
    my ($addr, $opts, @steps) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", $addr, @$opts, map { encode_json($_) } @steps ], timeout => 60);
    diag($r->{err}) if $r->{err};
    return json_lines($r->{out});
}

# The received frames of a probe step, as [type, fields].
sub got { return map { [ $_->{type} // $_->{type_id}, $_->{fields} ] } @{ $_[0]{received} // [] } }

# The payload section of a logged frame (what follows the command): hex.
sub section_hex {
    my ($f) = @_;
    my $bytes = pack('H*', $f->{frame_hex});
    my $csize = unpack('N', substr($bytes, 4, 4));
    return unpack('H*', substr($bytes, 8 + $csize));
}

my $flex_missing = flex_missing();

# ---- the main cluster --------------------------------------------------------------------
# b1 has an external listener with both schemes (and a bind address on it), b2 an external
# listener with pulsar+ssl only, b3 none. Nothing listens on the external addresses.
my $ext = free_port();
my $t = PulsarBinBroker->start(
    dir => $dir, keepalive => 1,
    brokers => [
        { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$ext,"
              . 'external:pulsar+ssl://b1.pulsar.example:6651', bindAddresses => 'external:pulsar://127.0.0.1:0' },
        { name => 'b2', advertisedListeners => 'internal:pulsar://127.0.0.1:0,external:pulsar+ssl://b2.pulsar.example:6651' },
        { name => 'b3', advertisedListeners => 'internal:pulsar://127.0.0.1:0' },
    ],
    topics => [ { name => 't-b2', owner => 'b2' }, { name => 't-b3', owner => 'b3' },
                { name => 't-chain', owner => 'b2', redirects => ['b3'] },
                { name => 'p3', partitions => 3, owners => [qw(b1 b2 b3)] },
                { name => 't-close', owner => 'b1' }, { name => 't-mig', owner => 'b1' },
                { name => 't-cc', owner => 'b1' } ],
    triggers => [
        { on => 'producer', topic => 't-close', actions => [ { cmd => 'close_producer', topic => 't-close',
                                                               assigned => 'b2', listener => 'external' } ] },
        { on => 'subscribe', topic => 't-cc', actions => [ { cmd => 'close_consumer', topic => 't-cc', assigned => 'b3' } ] },
        { on => 'subscribe', topic => 't-mig', actions => [ { cmd => 'topic_migrated', topic => 't-mig', resource => 'consumer',
                                                              url => 'pulsar://other.example:6650',
                                                              url_tls => 'pulsar+ssl://other.example:6651' } ] },
    ]);
my %A = map { ($_ => $t->addr($_)) } qw(b1 b2 b3);
my %U = map { ($_ => $t->url($_, 'internal', 'pulsar')) } qw(b1 b2 b3);
my $bind = $t->broker('b1')->{binds}[1]{address};

subtest 'ready line: brokers, listeners, addresses' => sub {
    for my $b (qw(b1 b2 b3)) {
        like($A{$b}, qr/^127\.0\.0\.1:[1-9]\d*$/, "$b listens on an ephemeral port of 127.0.0.1");
        is($U{$b}, "pulsar://$A{$b}", "... and advertises it as its internal pulsar URL");
        ok(IO::Socket::INET->new(PeerAddr => $A{$b}, Timeout => 5), '... where a client can connect');
    }
    is_deeply($t->broker('b1')->{listeners}{external},
              { pulsar => "pulsar://127.0.0.1:$ext", 'pulsar+ssl' => 'pulsar+ssl://b1.pulsar.example:6651' },
              'b1 external: as configured');
    is($t->broker('b1')->{binds}[1]{listener}, 'external', 'b1 also listens on a bind address of its external listener');
    like($bind, qr/^127\.0\.0\.1:\d+$/, '... an ephemeral port');
    is($t->broker('b2')->{internal}, 'internal', 'the internal listener is the first one');
};

# ---- pulsar-flex -----------------------------------------------------------------------------

subtest 'pulsar-flex: lookup, redirect, produce, consume, ack' => sub {
    plan skip_all => $flex_missing if $flex_missing;
    my $before = () = $t->frames;
    my ($j, $r) = flex($A{b1}, '--topic', 't-b2', '--messages', 10, '--linger', 2.5);
    ok($j->{ok}, 'pulsar-flex round-trips 10 messages through the service address b1 (owner b2)')
        or diag(explain($j), $r->{err});
    note("pulsar-flex $j->{pulsar_flex}");
    is_deeply([ sort map { $_->{payload} } @{ $j->{got} // [] } ], [ sort map { "pulsar-flex-$_" } 0 .. 9 ],
              'each message came back once, with its content') or diag(explain($j->{got}));
    ok(!(grep { ($_->{properties}{i} // '') ne ($_->{payload} =~ /(\d+)$/)[0] } @{ $j->{got} // [] }), '... and its properties');
    is_deeply([ sort keys %{ { map { ($_ => 1) } @{ $j->{dialed} // [] } } } ], [ sort @A{qw(b1 b2)} ],
              'it dialed b1 (lookups) and b2 (the owner) only') or diag(explain($j->{dialed}));
    is(($j->{dialed} // [])->[0], $A{b1}, '... b1 first');

    my @log = ($t->frames)[$before .. (() = $t->frames) - 1];
    my @lk = grep { ($_->{type} // '') eq 'LOOKUP_RESPONSE' } @log;
    is(scalar @lk, 2, 'two lookups (producer, consumer), both at b1') or diag(explain(\@lk));
    ok(!(grep { $_->{broker} ne 'b1' } @lk), '... at b1');
    is_deeply([ map { [ @{ $_->{fields} }{qw(response authoritative brokerServiceUrl)} ] } @lk ],
              [ ([ 0, JSON::PP::true, $U{b2} ]) x 2 ], '... Redirect to b2, authoritative') or diag(explain(\@lk));
    my @in = grep { ($_->{dir} // '') eq 'in' } @log;
    my ($c) = grep { $_->{type} eq 'CONNECT' } @in;
    is($c->{fields}{protocol_version}, 17, 'pulsar-flex speaks protocol v17');
    ok(!(grep { exists $_->{fields}{advertised_listener_name} } grep { $_->{type} eq 'LOOKUP' } @in),
       '... and never names a listener in LOOKUP');
    my @owned = grep { $_->{type} =~ /^(?:PRODUCER|SUBSCRIBE)$/ } @in;
    is_deeply([ sort map { "$_->{type}\@$_->{broker}:$_->{answer}" } @owned ], [ 'PRODUCER@b2:ok', 'SUBSCRIBE@b2:ok' ],
              'PRODUCER and SUBSCRIBE went to the owner and succeeded');
    my @send = grep { $_->{type} eq 'SEND' } @in;
    is(scalar @send, 10, '10 SENDs');
    is(scalar(grep { $_->{payload}{checksum_ok} } @send), 10, "... each with a CRC-32C checksum the broker verified");
    my @msg = grep { ($_->{type} // '') eq 'MESSAGE' } @log;
    is_deeply([ sort map { section_hex($_) } @msg ], [ sort map { section_hex($_) } @send ],
              'MESSAGE frames carry the SENDs\' sections byte for byte (the producer\'s checksum)');
    is(scalar(grep { $_->{type} eq 'ACK' && defined $_->{fields}{request_id} } @in), 10, 'each message ACKed with a request id');
    is(scalar(grep { ($_->{type} // '') eq 'ACK_RESPONSE' } @log), 10, '... and answered with ACK_RESPONSE');
    is_deeply([ sort map { $_->{type} } grep { $_->{type} =~ /^CLOSE_/ } @in ], [qw(CLOSE_CONSUMER CLOSE_PRODUCER)],
              'it closes with CLOSE_CONSUMER (its "unsubscribe") and CLOSE_PRODUCER');
    my %pinged = map { ($_->{conn} => 1) } grep { ($_->{type} // '') eq 'PING' && $_->{dir} eq 'out' } @log;
    my %ponged = map { ($_->{conn} => 1) } grep { $_->{type} eq 'PONG' } @in;
    ok(%pinged && !(grep { !$ponged{$_} } keys %pinged), 'it answers the broker\'s keep-alive PINGs with PONG')
        or diag(explain([ \%pinged, \%ponged ]));
    ok(!(grep { ($_->{reason} // '') =~ /PING/ } @log), '... so no connection is closed for silence');

    ($j, $r) = flex($A{b1}, '--topic', 't-batch', '--messages', 7, '--batch', 3);
    ok($j->{ok}, 'pulsar-flex round-trips 7 messages in batches of 3') or diag(explain($j), $r->{err});
    my @bs = grep { ($_->{type} // '') eq 'SEND' && $_->{dir} eq 'in' && ($_->{payload}{metadata}{producer_name} // '') ne '' }
             grep { ($_->{fields}{producer_id} // -1) == 0 } ($t->frames)[-60 .. -1];
    is_deeply([ map { $_->{payload}{metadata}{num_messages_in_batch} } @bs[-3 .. -1] ], [ 3, 3, 1 ],
              '... three SENDs of 3, 3 and 1 messages');
};

subtest 'pulsar-flex: CLOSE_PRODUCER and CLOSE_CONSUMER with assigned URLs, mid-stream' => sub {
    plan skip_all => $flex_missing if $flex_missing;
    my $c = PulsarBinBroker->start(
        dir => $dir,
        brokers => [ { name => 'b1', advertisedListeners => 'internal:pulsar://127.0.0.1:0' },
                     { name => 'b2', advertisedListeners => 'internal:pulsar://127.0.0.1:0' } ],
        topics => [ { name => 't', owner => 'b1' } ],
        triggers => [ { on => 'send', count => 4, topic => 't',
                        actions => [ { cmd => 'close_producer', topic => 't', assigned => 'b2' },
                                     { cmd => 'close_consumer', topic => 't', assigned => 'b2' } ] } ]);
    my ($j, $r) = flex($c->addr('b1'), '--topic', 't', '--messages', 10);
    ok($j->{ok}, 'pulsar-flex gets all 10 messages across the move to b2') or diag(explain($j), $r->{err});
    is(scalar @{ $j->{missing} // [1] }, 0, '... none missing');
    my @cl = grep { ($_->{type} // '') =~ /^CLOSE_(?:PRODUCER|CONSUMER)$/ && $_->{dir} eq 'out' } $c->frames;
    is(scalar @cl, 2, 'the broker sent CLOSE_PRODUCER and CLOSE_CONSUMER');
    for my $f (@cl) {
        is($f->{fields}{assignedBrokerServiceUrl}, 'pulsar://' . $c->addr('b2'), "$f->{type}: assignedBrokerServiceUrl is b2's");
        is($f->{fields}{request_id} . '', $NO_REQUEST_ID, "$f->{type}: request_id -1, as brokers send it");
        is_deeply($f->{unknown_fields}, [ 1000, 1000 ], "$f->{type}: with an unknown field in BaseCommand and in the command");
    }
    # pulsar-flex closes the connection and looks the topic up again through its service URL:
    # it never uses the assigned URL.
    my @lk = grep { ($_->{type} // '') eq 'LOOKUP' } $c->frames;
    is_deeply([ map { $_->{broker} } @lk ], [qw(b1 b1 b1 b1)], 'pulsar-flex looks up again, at the service address (b1)');
    my @after = grep { ($_->{type} // '') =~ /^(?:PRODUCER|SUBSCRIBE)$/ && $_->{broker} eq 'b2' } $c->frames;
    is(scalar @after, 2, '... and its producer and consumer come back on b2');
    is($c->control({ cmd => 'state' })->{topics}{'persistent://public/default/t'}{owner}, 'b2', 'b2 owns the topic now');
    $c->stop;
};

subtest 'pulsar-flex limits: checksums, broker entry metadata, unknown commands, TOPIC_MIGRATED, chains' => sub {
    plan skip_all => $flex_missing if $flex_missing;
    my $one = 'internal:pulsar://127.0.0.1:0';
    my $x = PulsarBinBroker->start(
        dir => $dir, corrupt_checksums => 1, broker_entry_metadata => 'supported', unknown_command => 'ignore',
        brokers => [ { name => 'b1', advertisedListeners => $one } ],
        triggers => [ { on => 'send', count => 2, actions => [ { cmd => 'topic_migrated', resource => 'both',
                                                                   url => 'pulsar://other.example:6650' } ] } ]);
    my ($j, $r) = flex($x->addr('b1'), '--topic', 't', '--messages', 4);
    ok($j->{ok}, 'pulsar-flex takes MESSAGEs whose checksum is wrong: it does not check it') or diag(explain($j), $r->{err});
    my @msg = grep { ($_->{type} // '') eq 'MESSAGE' } $x->frames;
    ok(@msg == 4 && !(grep { $_->{payload}{checksum_ok} } @msg), '... (all 4 had a wrong one)');
    ok(!(grep { $_->{payload}{broker_entry_metadata} } @msg),
       'no broker entry metadata for it: its CONNECT does not say supports_broker_entry_metadata');
    my ($trig) = grep { ($_->{event} // '') eq 'trigger' } $x->frames;
    ok($trig && !@{ $trig->{results}[0]{sent} } && @{ $trig->{results}[0]{skipped} } == 2,
       'TOPIC_MIGRATED is not sent to protocol v17 (producer and consumer skipped), as brokers do') or diag(explain($trig));

    # A client that says it supports broker entry metadata gets it, behind 0x0e02.
    my @p = probe($x->addr('b1'), [ '--connect', '{"feature_flags": {"supports_broker_entry_metadata": true}}' ],
                  { send => 'SUBSCRIBE', fields => { topic => 't', subscription => 'bem', subType => 0, consumer_id => 1,
                                                     initialPosition => 1 } },
                  { send => 'FLOW', fields => { consumer_id => 1, messagePermits => 1 } });
    my ($m) = @{ $p[2]{received} // [] };
    is($m->{payload}{broker_entry_metadata}{index}, 0, 'with supports_broker_entry_metadata: MESSAGE has 0x0e02 metadata, index 0')
        or diag(explain(\@p));
    # unknown_command => ignore: an unknown type is skipped, the connection stays.
    @p = probe($x->addr('b1'), [], { send => '99', expect => 0 }, { send => 'PING' });
    is(($p[2]{received}[0] // {})->{type}, 'PONG', 'unknown_command ignore: type 99 skipped, PING still answered');
    $x->stop;

    # 0x0e02 to a client that did not ask for it: pulsar-flex reads it as the checksum magic.
    $x = PulsarBinBroker->start(dir => $dir, broker_entry_metadata => 'always',
                                brokers => [ { name => 'b1', advertisedListeners => $one } ]);
    ($j, $r) = flex($x->addr('b1'), '--topic', 't', '--messages', 1);
    # What it makes of those bytes depends on them (the broker timestamp, the time of day):
    # it throws decoding the metadata, or hands over a message that is not the one sent.
    isnt($r->{exit}, 0, 'broker entry metadata (0x0e02): pulsar-flex does not get the message');
    ok(join(' ', @{ $j->{errors} // [] }) =~ /MessageMetadata|Assertion/ || @{ $j->{missing} // [] } == 1,
       '... it throws decoding the metadata, or the message it hands over is not the one sent')
        or diag(explain($j));
    $x->stop;

    # A command type pulsar-flex does not know (as TOPIC_MIGRATED, 68, would be): it throws
    # in its frame decoder, outside any promise.
    $x = PulsarBinBroker->start(dir => $dir, brokers => [ { name => 'b1', advertisedListeners => $one } ],
                                triggers => [ { on => 'subscribe', actions => [ { cmd => 'unknown', type => 68 } ] } ]);
    ($j, $r) = flex($x->addr('b1'), '--topic', 't', '--messages', 1);
    is($r->{exit}, 3, 'an unknown command type (68): pulsar-flex throws');
    like(join(' ', @{ $j->{errors} // [] }), qr/simpleCommand.*deserializer|deserializer/s, '... in its simple-command decoder');
    $x->stop;

    # A Redirect that does not name the owner (a chain, as through a leader): pulsar-flex
    # connects to the named broker as if it were the owner and never asks again.
    ($j, $r) = flex($A{b1}, '--topic', 't-chain', '--messages', 1);
    is($r->{exit}, 3, 'a Redirect chain (b1 -> b3 -> b2): pulsar-flex fails');
    like(join(' ', @{ $j->{errors} // [] }), qr/not served by this instance:\Q$A{b3}\E/,
         '... with ServiceNotReady from b3, the first hop, where it subscribed') or diag(explain($j));
};

# ---- hand-built frames ------------------------------------------------------------------------

subtest 'lookups: Redirect chains, authoritative, listeners' => sub {
    my @r = probe($A{b1}, [],
                  { lookup => 't-b2', follow => 3 },                                  # 1
                  { lookup => 't-chain', follow => 5 },                               # 2
                  { lookup => 't-b2', authoritative => JSON::PP::true },              # 3
                  { lookup => 't-b2', listener => 'external' },                       # 4
                  { lookup => 't-b1', listener => 'external' },                       # 5
                  { lookup => 't-b3', listener => 'external' },                       # 6
                  { lookup => 't-b1', listener => 'nope' },                           # 7
                  { lookup => 't-b1', listener => ' ' },                              # 8
                  { send => 'PARTITIONED_METADATA', fields => { topic => 'p3' } },    # 9
                  { send => 'PARTITIONED_METADATA', fields => { topic => 't-b2' } },  # 10
                  { lookup => 'persistent://public/default/p3-partition-1' },         # 11
                  { lookup => 'a/b/c/d/e' });                                         # 12
    is($r[0]{received}[0]{type}, 'CONNECTED', 'CONNECTED');
    my $hops = sub { [ map { [ $_->{address}, @{ $_->{fields} }{qw(response authoritative brokerServiceUrl)} ] } @{ $_[0]{hops} } ] };
    my ($T, $F) = (JSON::PP::true, JSON::PP::false);
    is_deeply($hops->($r[1]), [ [ $A{b1}, 0, $T, $U{b2} ], [ $A{b2}, 1, $T, $U{b2} ] ],
              'owned elsewhere: Redirect (authoritative) to the owner, which answers Connect') or diag(explain($r[1]));
    is_deeply($hops->($r[2]), [ [ $A{b1}, 0, $F, $U{b3} ], [ $A{b3}, 0, $T, $U{b2} ], [ $A{b2}, 1, $T, $U{b2} ] ],
              'a chain: b1 -> b3 (not authoritative, as to a leader) -> b2 (authoritative) -> Connect') or diag(explain($r[2]));
    is_deeply([ @{ $r[3]{hops}[0]{fields} }{qw(response authoritative brokerServiceUrl)} ], [ 1, $T, $U{b2} ],
              'authoritative=true at a non-owner: Connect to the owner');
    my $f4 = $r[4]{hops}[0]{fields};
    is_deeply([ $f4->{response}, $f4->{brokerServiceUrl}, $f4->{brokerServiceUrlTls} ], [ 0, undef, 'pulsar+ssl://b2.pulsar.example:6651' ],
              'listener external, owner b2 (pulsar+ssl only): brokerServiceUrlTls alone');
    my $f5 = $r[5]{hops}[0]{fields};
    is_deeply([ $f5->{response}, $f5->{brokerServiceUrl}, $f5->{brokerServiceUrlTls} ],
              [ 1, "pulsar://127.0.0.1:$ext", 'pulsar+ssl://b1.pulsar.example:6651' ], 'listener external, owner b1: both URLs');
    for my $case ([ 6, 'external', 'the owner (b3) lacks it' ], [ 7, 'nope', 'no broker has it' ]) {
        my ($i, $name, $why) = @$case;
        my $f = $r[$i]{hops}[0]{fields};
        is_deeply([ @$f{qw(response error message)}, exists $f->{brokerServiceUrl} ? 1 : 0 ],
                  [ 2, 6, "org.apache.pulsar.broker.PulsarServerException: the broker do not have $name listener", 0 ],
                  "listener $name ($why): Failed, ServiceNotReady, as 4.x says it") or diag(explain($f));
    }
    is($r[8]{hops}[0]{fields}{brokerServiceUrl}, $U{b1}, 'a blank listener name counts as none: internal URLs');
    is($r[9]{received}[0]{fields}{partitions}, 3, 'PARTITIONED_METADATA: 3 partitions');
    is_deeply([ @{ $r[10]{received}[0]{fields} }{qw(partitions response)} ], [ 0, 0 ], '... 0 for a topic that is not partitioned');
    is($r[11]{hops}[0]{fields}{brokerServiceUrl}, $U{b2}, 'partition 1 of p3 is owned by b2');
    is($r[12]{hops}[0]{fields}{error}, 17, 'an invalid topic name: InvalidTopicName');
    is_deeply($r[1]{hops}[0]{unknown_fields}, [ 1000, 1000 ], 'LOOKUP_RESPONSE carries an unknown field in both messages');
    my @log = grep { ($_->{type} // '') eq 'LOOKUP_RESPONSE' } $t->frames;
    ok(!(grep { !defined $_->{rule} } grep { $_->{fields}{response} != 2 } @log), 'the broker logged the rule of each lookup');

    # A connection to a bind address of the external listener gets that listener by default.
    @r = probe($bind, [], { lookup => 't-b1' }, { lookup => 't-b3' }, { lookup => 't-b3', listener => 'internal' });
    is($r[1]{hops}[0]{fields}{brokerServiceUrl}, "pulsar://127.0.0.1:$ext", 'on a bind address of listener external: its URLs');
    is($r[2]{hops}[0]{fields}{error}, 6, '... a topic on a broker without that listener fails');
    is($r[3]{hops}[0]{fields}{brokerServiceUrl}, $U{b3}, '... unless the lookup names another listener');

    @r = probe($A{b1}, [ '--split', 1 ], { lookup => 't-b1' });
    is($r[1]{hops}[0]{fields}{response}, 1, 'frames written one byte at a time: answered');
    @r = probe($A{b1}, [ '--protocol-version', 99 ]);
    is($r[0]{received}[0]{fields}{protocol_version}, 21, 'CONNECT with protocol v99: CONNECTED says 21 (ours)');
    @r = probe($A{b1}, [ '--protocol-version', 6 ]);
    is($r[0]{received}[0]{fields}{protocol_version}, 6, '... with v6: 6');
};

subtest 'producers, consumers, checksums' => sub {
    my $st = sub { { send => $_[0], fields => { topic => $_[1], producer_id => 1, consumer_id => 1, subscription => 's',
                                                subType => 0, %{ $_[2] // {} } } } };
    my $p = sub { my %f = @_; { send => 'PRODUCER', fields => { topic => $f{topic}, producer_id => 1 } } };
    my @r = probe($A{b1}, [], $p->(topic => 't-b2'),
                  { send => 'SUBSCRIBE', fields => { topic => 't-b2', subscription => 's', subType => 0, consumer_id => 1 } },
                  $p->(topic => 't-b1'),
                  { text => 'good', fields => { producer_id => 1 } },
                  { text => 'bad', checksum => 'bad', fields => { producer_id => 1 } },
                  { text => 'no-checksum', checksum => JSON::PP::false, fields => { producer_id => 1 } },
                  { send => 'SUBSCRIBE', fields => { topic => 't-b1', subscription => 's', subType => 0, consumer_id => 1,
                                                     initialPosition => 1 } },
                  { send => 'SUBSCRIBE', fields => { topic => 't-b1', subscription => 's', subType => 0, consumer_id => 2 } },
                  { send => 'FLOW', fields => { consumer_id => 1, messagePermits => 5 }, expect => 2 },
                  { send => 'ACK', fields => { consumer_id => 1, ack_type => 0, message_id => [ { ledgerId => 1, entryId => 0 } ] },
                    expect => 0 },
                  { send => 'ACK', fields => { consumer_id => 1, ack_type => 0, message_id => [ { ledgerId => 1, entryId => 1 } ],
                                               request_id => 77 } });
    for my $i (1, 2) {
        my ($type, $f) = @{ (got($r[$i]))[0] };
        is_deeply([ $type, $f->{error} ], [ 'ERROR', 6 ], ("PRODUCER", "SUBSCRIBE")[$i - 1] . ' for a topic owned elsewhere: ServiceNotReady');
        like($f->{message}, qr{^Namespace bundle for topic \(persistent://public/default/t-b2\) not served by this instance:\Q$A{b1}\E\. Please redo the lookup\. Request is denied: namespace=public/default$},
             '... with the broker\'s message');
    }
    is((got($r[3]))[0][0], 'PRODUCER_SUCCESS', 'PRODUCER at the owner: PRODUCER_SUCCESS');
    is((got($r[4]))[0][0], 'SEND_RECEIPT', 'SEND with a good checksum: SEND_RECEIPT');
    my ($type, $f) = @{ (got($r[5]))[0] };
    is_deeply([ $type, @$f{qw(error message)} ], [ 'SEND_ERROR', 9, 'Checksum failed on the broker' ], 'a bad checksum: SEND_ERROR ChecksumError');
    is((got($r[6]))[0][0], 'SEND_RECEIPT', 'no checksum (as before protocol v6): stored');
    is((got($r[8]))[0][1]{error}, 5, 'a second consumer on an Exclusive subscription: ConsumerBusy');
    my @m = @{ $r[9]{received} };
    is_deeply([ map { $_->{payload}{payload} } @m ], [ 'good', 'no-checksum' ], 'FLOW: the two stored messages, from the start (Earliest)');
    is_deeply([ map { $_->{payload}{checksum_ok} } @m ], [ JSON::PP::true, undef ], '... the first with its checksum, the second without');
    is_deeply([ map { [ $_->[0], $_->[1]{request_id} ] } got($r[10]), got($r[11]) ], [ [ 'ACK_RESPONSE', 77 ] ],
              'ACK: no answer without a request_id, ACK_RESPONSE with one');
};

subtest 'bad frames close the connection' => sub {
    my $lookup = { send => 'LOOKUP', fields => { topic => 't-b1' } };
    for my $case ([ 'a command before CONNECT', [ '--no-connect' ], $lookup ],
                  [ 'an unknown command type', [], { send => '99' } ],
                  [ 'a frame over max_message_size + 10 KiB', [], { raw => sprintf('%08x', 5 * 1024 * 1024 + 10 * 1024 + 1) } ],
                  [ 'commandSize over totalSize', [], { raw => '00000006000000100802' } ],
                  [ 'a BaseCommand that does not parse', [], { raw => '0000000500000001ff' } ],
                  [ 'totalSize 0', [], { raw => '00000000' } ]) {
        my ($what, $opts, $step) = @$case;
        my @r = probe($A{b1}, $opts, $step);
        my ($last) = reverse @r;
        ok($last->{closed} && !@{ $last->{received} }, "$what: closed, nothing answered") or diag(explain(\@r));
    }
    my @r = probe($A{b1}, [], $lookup);
    is($r[1]{received}[0]{type}, 'LOOKUP_RESPONSE', 'and the next client is served');
    @r = probe($A{b1}, [], { send => 'PING' });
    is($r[1]{received}[0]{type}, 'PONG', 'a PING from the client: PONG');

    # Keep-alive (1 s here): a client that never answers PING is closed.
    @r = probe($A{b1}, [ '--no-pong' ], { wait => 3 });
    is_deeply([ map { $_->{type} } @{ $r[1]{received} } ], ['PING'], 'a silent client gets a PING');
    ok($r[1]{closed}, '... and is closed when it does not answer');
};

subtest 'control commands and triggers' => sub {
    # A client whose bytes are built here by hand: CONNECT (client_version, protocol v21).
    my $str = sub { chr($_[0] << 3 | 2) . chr(length $_[1]) . $_[1] };
    my $base = chr(8) . chr(2) . $str->(2, $str->(1, 'perl-client') . chr(4 << 3) . chr(21));
    my $s = IO::Socket::INET->new(PeerAddr => $A{b3}, Timeout => 5) or die "connect: $!";
    print $s pack('N N', 4 + length $base, length $base) . $base;
    my $cmd = sub { my $p = KafkaMock::read_frame($s, 5); defined $p ? unpack('H*', substr($p, 4)) : 'none' };
    like($cmd->(), qr/^0803/, 'CONNECTED to a hand-built CONNECT');
    my ($conn) = grep { $_->{broker} eq 'b3' && $_->{protocol} == 21 } @{ $t->control({ cmd => 'state' })->{conns} };
    ok($conn, 'state lists the connection, protocol 21');
    my $a = $t->control({ cmd => 'ping', broker => 'b3', conn => $conn->{conn} });
    ok($a->{ok} && @{ $a->{sent} } == 1, 'control ping: sent to it');
    is($cmd->(), '08129201' . '00', '... it reads PING (type 18, an empty CommandPing)');
    $t->control({ cmd => 'unknown', type => 99, hex => 'abcd', conn => $conn->{conn} });
    is($cmd->(), '08639a0602abcd', 'control unknown: type 99 with field 99 holding the bytes');
    $t->control({ cmd => 'raw', hex => '0000000600000002' . '0812', conn => $conn->{conn} });
    is($cmd->(), '0812', 'control raw: the bytes as given');
    is($t->control({ cmd => 'nonsense' })->{ok}, JSON::PP::false, 'an unknown control command: ok false');
    $t->control({ cmd => 'drop', conn => $conn->{conn} });
    ok(!defined KafkaMock::read_frame($s, 5), 'control drop: closed');

    # Triggers on the main cluster, seen by probes of protocol v21.
    my @r = probe($A{b1}, [], { send => 'PRODUCER', fields => { topic => 't-close', producer_id => 7 }, expect => 2 });
    my @g = got($r[1]);
    is_deeply([ map { $_->[0] } @g ], [qw(PRODUCER_SUCCESS CLOSE_PRODUCER)], 'trigger: CLOSE_PRODUCER right after PRODUCER_SUCCESS');
    is_deeply([ @{ $g[1][1] }{qw(producer_id request_id assignedBrokerServiceUrl assignedBrokerServiceUrlTls)} ],
              [ 7, $NO_REQUEST_ID, undef, 'pulsar+ssl://b2.pulsar.example:6651' ],
              '... assigned to b2 on listener external (pulsar+ssl only there)');
    is($t->control({ cmd => 'state' })->{topics}{'persistent://public/default/t-close'}{owner}, 'b2', '... and b2 owns the topic now');
    my $sub = sub { { send => 'SUBSCRIBE', fields => { topic => $_[0], subscription => 's', subType => 1, consumer_id => 3 }, expect => 2 } };
    @r = probe($A{b1}, [], $sub->('t-cc'), $sub->('t-mig'));
    @g = got($r[1]);
    is_deeply([ $g[1][0], @{ $g[1][1] }{qw(consumer_id assignedBrokerServiceUrl)} ], [ 'CLOSE_CONSUMER', 3, $U{b3} ],
              'CLOSE_CONSUMER assigned to b3, on the connection\'s listener (internal)');
    @g = got($r[2]);
    is_deeply([ $g[1][0], @{ $g[1][1] }{qw(resource_id resource_type brokerServiceUrl brokerServiceUrlTls)} ],
              [ 'TOPIC_MIGRATED', 3, 1, 'pulsar://other.example:6650', 'pulsar+ssl://other.example:6651' ],
              'TOPIC_MIGRATED to a v21 consumer, with the other cluster\'s URLs');
};

subtest 'TLS (pulsar+ssl) listener' => sub {
    my $c = test_certs();
    my $x = PulsarBinBroker->start(dir => $dir, tls_cert => $c->{broker_crt}, tls_key => $c->{broker_key},
                                   brokers => [ { name => 'b1', advertisedListeners => 'internal:pulsar+ssl://127.0.0.1:0' } ]);
    my $addr = $x->addr('b1');
    like($x->url('b1', 'internal', 'pulsar+ssl'), qr{^pulsar\+ssl://127\.0\.0\.1:[1-9]}, 'a pulsar+ssl internal listener');
    my @r = probe($addr, [ '--tls', '--cafile', $c->{internal_ca} ], { lookup => 't' });
    is($r[0]{received}[0]{type}, 'CONNECTED', 'CONNECT over TLS, the certificate verified');
    is_deeply([ @{ $r[1]{hops}[0]{fields} }{qw(brokerServiceUrl brokerServiceUrlTls)} ], [ undef, "pulsar+ssl://$addr" ],
              'a lookup answers brokerServiceUrlTls only');
    my ($acc) = grep { ($_->{event} // '') eq 'accept' } $x->frames;
    is($acc->{scheme}, 'pulsar+ssl', 'logged as pulsar+ssl');
    $x->stop;
};

subtest 'google-protobuf (PulsarApi.proto v17) decodes every frame alike' => sub {
    plan skip_all => $flex_missing if $flex_missing;
    # Every test broker's log: this one's and those the subtests above started and stopped.
    my $logs = join '', map { slurp($_) // '' } glob("$dir/pulsar-testbroker-*.requests");
    my $r = KafkaMock::run([ 'node', "$BIN/pulsar-pb-check" ], in => $logs, timeout => 60);
    my @res = json_lines($r->{out});
    my @bad = grep { !$_->{ok} } @res;
    ok(@res > 100, scalar(@res) . ' frames decoded by both') or diag($r->{err});
    ok(!@bad, 'no frame that google-protobuf cannot decode or reads differently') or diag(explain(\@bad));
    my $checked = 0;
    $checked += $_->{checked} for @res;
    my %types = map { ($_->{type_id} => 1) } grep { $_->{checked} } @res;
    ok($checked > 500 && keys %types >= 20, "$checked fields compared, in " . scalar(keys %types) . ' command types');
    my %newer;
    $newer{"$_->{type_id}:" . join(',', @{ $_->{unknown_to_them} })}++ for grep { @{ $_->{unknown_to_them} } } @res;
    note('newer than v17 (unknown to it): ' . join('; ', sort keys %newer));
};

is($t->stop, 0, 'closing its stdin stops the test broker (exit 0)');
done_testing();
