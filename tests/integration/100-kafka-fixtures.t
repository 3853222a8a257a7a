#!/usr/bin/perl
# 100-kafka-fixtures.t: the Kafka fixtures themselves, without lookout, checked by peers
# nobody here wrote (issue 8, "Real peers to test against"):
#   - librdkafka's mock cluster (tests/kafka/kafka-mock, lib/KafkaMock.pm): kcat -L lists its
#     3 brokers at the addresses the fixture printed; kcat produces and consumes through it;
#   - the spec-encoded test broker (bin/kafka-testbroker, lib/KafkaTestBroker.pm): kafka-python
#     (/usr/bin/python3, bin/kafka-python-check) encodes requests and decodes every answer of
#     every version it knows, to the last byte, and sees the configured node map; kcat
#     (librdkafka) reads its ApiVersions v3 and Metadata and round-trips messages through it;
#     both authenticate to it with SASL (PLAIN, SCRAM-SHA-256/512): kcat with SaslAuthenticate,
#     kafka-python with bare tokens, and a wrong password is refused;
#   - tshark's Kafka dissector decodes a loopback capture of kafka-probe against the test
#     broker: for each version it knows, node ids, hosts and ports match the node map and
#     nothing is malformed; versions it does not know are listed as notes.
# Each part skips with its reason when its tool is missing; tests/deps.sh installs them all.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use Tshark;

my $dir = tmp_dir();
my $top = repo_top();
my $PROBE = "$top/tests/integration/bin/kafka-probe";
my $PYCHECK = "$top/tests/integration/bin/kafka-python-check";
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $TOPIC = 'lookout-t1';

sub have { my ($t) = @_; return grep { -x "$_/$t" } split /:/, $ENV{PATH} // '' }

# JSON lines from a tool's stdout (lines that are not JSON are skipped).
sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

sub kafka_python { return -x '/usr/bin/python3' && !system('/usr/bin/python3', '-c', 'import kafka') }

# kafka_python_roundtrip(BOOTSTRAP, PARTITIONS, N): KafkaProducer sends N messages over the
# partitions, KafkaConsumer reads every partition from offset 0; checks that each sent
# message came back on its partition, and returns {sent, got, brokers}.
sub kafka_python_roundtrip {
    my ($boot, $parts, $n) = @_;
    my $r = KafkaMock::run([ '/usr/bin/python3', $PYCHECK, $boot, '--topic', $TOPIC, '--partitions', $parts,
                             '--roundtrip', $n ], timeout => 60);
    my ($j) = map { $_->{roundtrip} ? $_->{roundtrip} : () } json_lines($r->{out});
    ok($j, "kafka-python: $n messages produced") or return diag($r->{err}) // {};
    my %got = map { ("$_->[0]:$_->[1]" => 1) } @{ $j->{got} };
    my @lost = grep { !$got{"$_->[0]:$_->[1]"} } @{ $j->{sent} };
    ok(!@lost, 'kafka-python: each consumed back from its partition') or diag(explain(\@lost, $r->{err}));
    return $j;
}

# ---- librdkafka's mock cluster ---------------------------------------------------------------

subtest 'mock cluster: 3 brokers, kcat -L' => sub {
    plan skip_all => KafkaMock::missing() if KafkaMock::missing();
    plan skip_all => 'kcat not found (apt-get install kcat)' unless have('kcat');
    my $m = KafkaMock->start(brokers => 3, topics => ["$TOPIC:3", 'lookout-t2:1:1'], dir => $dir);
    is(scalar @{ $m->brokers }, 3, 'the fixture prints 3 brokers');
    is_deeply([ map { $_->{id} } @{ $m->brokers } ], [ 1, 2, 3 ], 'node ids 1..3');
    ok(!(grep { $_->{host} ne '127.0.0.1' } @{ $m->brokers }), 'all on 127.0.0.1');
    is($m->bootstrap, join(',', map { "$_->{host}:$_->{port}" } @{ $m->brokers }),
       'bootstrap = the brokers in id order');
    is_deeply($m->topic($TOPIC)->{leaders}, [ 1, 2, 3 ], "$TOPIC: one partition led by each broker")
        or diag(explain($m->topics));

    my $r = KafkaMock::run([ 'kcat', '-L', '-J', '-b', $m->bootstrap, '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L -J exits 0') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    my %seen = map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] };
    is_deeply(\%seen, { map { ($_->{id} => "$_->{host}:$_->{port}") } @{ $m->brokers } },
              'kcat sees the 3 brokers at the printed addresses') or diag($r->{out});
    my ($t) = grep { $_->{topic} eq $TOPIC } @{ $md->{topics} // [] };
    is(scalar @{ $t->{partitions} // [] }, 3, "kcat sees $TOPIC with 3 partitions");

    $r = KafkaMock::run([ 'kcat', '-L', '-b', $m->bootstrap, '-m', '10' ], timeout => 30);
    like($r->{out}, qr/^ 3 brokers:$/m, 'kcat -L (text): "3 brokers:"');
    for my $b (@{ $m->brokers }) {
        like($r->{out}, qr/^  broker $b->{id} at \Q$b->{host}:$b->{port}\E\b/m, "... broker $b->{id} at its address");
    }
    is($m->stop, 0, 'closing its stdin stops the fixture cleanly (exit 0)') or diag($m->log);
};

subtest 'mock cluster: kcat produces and consumes' => sub {
    plan skip_all => KafkaMock::missing() if KafkaMock::missing();
    plan skip_all => 'kcat not found (apt-get install kcat)' unless have('kcat');
    my $m = KafkaMock->start(brokers => 3, topics => ["$TOPIC:3"], dir => $dir);
    my $n = 30;
    my @msgs = map { sprintf "k%d:message %03d", $_ % 3, $_ } 1 .. $n;
    for my $p (0 .. 2) {
        my @mine = grep { /^k$p:/ } @msgs;
        my $r = KafkaMock::run([ 'kcat', '-P', '-b', $m->bootstrap, '-t', $TOPIC, '-p', $p, '-K', ':' ],
                               in => join("\n", @mine) . "\n", timeout => 30);
        is($r->{exit}, 0, "produce " . scalar(@mine) . " messages to partition $p (leader "
           . $m->topic($TOPIC)->{leaders}[$p] . ')') or diag($r->{err});
    }
    my @got;
    for my $p (0 .. 2) {
        my $r = KafkaMock::run([ 'kcat', '-C', '-b', $m->bootstrap, '-t', $TOPIC, '-p', $p, '-o', 'beginning',
                                 '-e', '-q', '-f', '%k:%s\n' ], timeout => 30);
        is($r->{exit}, 0, "consume partition $p to its end") or diag($r->{err});
        my @lines = split /\n/, $r->{out};
        is_deeply(\@lines, [ grep { /^k$p:/ } @msgs ], "partition $p: every message, in order");
        push @got, @lines;
    }
    is(scalar @got, $n, "$n messages round-tripped");
    SKIP: {
        skip 'kafka-python not importable by /usr/bin/python3', 3 unless kafka_python();
        my $rt = kafka_python_roundtrip($m->bootstrap, 3, 12);
        is_deeply([ sort { $a->[0] <=> $b->[0] } @{ $rt->{brokers} // [] } ],
                  [ map { [ $_->{id}, $_->{host}, $_->{port} ] } @{ $m->brokers } ], 'kafka-python sees the 3 brokers');
    }
    # ApiVersions v3+: the 2.0.2 mock answers error 35 with a body that is neither v0 nor v3
    # (facts/kafka.md §5). Pinned here so lookout's tests know what passes through.
    my $r = KafkaMock::run([ $PY, $PROBE, $m->broker(1)->{host} . ':' . $m->broker(1)->{port},
                             'ApiVersions:3' ], timeout => 30);
    my ($a) = json_lines($r->{out});
    ok($a && $a->{response_hex}, 'the mock answers ApiVersions v3') or diag($r->{err});
    is(substr($a->{response_hex} // '', 8, 4), '0023', '... with error 35 (UNSUPPORTED_VERSION) after a v0 header')
        or diag($a->{response_hex});
    $m->stop;
};

# ---- the spec-encoded test broker ------------------------------------------------------------

# Node 1 is listened on (a client can follow it); 2 and 3 only advertise names.
my @NODES = ({ id => 1, host => '127.0.0.1', port => 0, rack => 'r1' },
             { id => 2, host => 'b2.kafka.internal', port => 19093, rack => 'r2' },
             { id => 3, host => 'b3.kafka.internal', port => 19094 });
my $tb = KafkaTestBroker->start(dir => $dir, nodes => \@NODES, listen_nodes => 1,
                                topics => [ { name => $TOPIC, partitions => 3 } ]);
my $node1 = $tb->node(1);
ok($node1->{port} > 0 && $node1->{listen} eq "127.0.0.1:$node1->{port}", 'test broker: node 1 listens on the port it advertises');
my %MAP = map { ($_->{id} => { host => $_->{host}, port => $_->{port}, rack => $_->{rack} }) } @{ $tb->nodes };
my $TID = $tb->topic($TOPIC)->{id};

subtest 'test broker: kafka-python decodes every version it knows' => sub {
    my $r = KafkaMock::run([ '/usr/bin/python3', $PYCHECK, $tb->bootstrap, '--topic', $TOPIC ], timeout => 60);
    plan skip_all => 'kafka-python not importable by /usr/bin/python3 (apt-get install python3-kafka)'
        if $r->{exit} == 2 || !-x '/usr/bin/python3';
    is($r->{exit}, 0, 'kafka-python-check ran to the end') or diag($r->{err});
    my ($ver, @res) = json_lines($r->{out});
    note("kafka-python $ver->{kafka_python}");
    my %max;
    for my $x (@res) {
        my $what = "$x->{api} v$x->{api_version}";
        $max{ $x->{api} } = $x->{api_version};
        if ($x->{skipped}) {
            note("$what: not checked: $x->{skipped}");
            next;
        }
        ok(!$x->{error} && $x->{consumed} && $x->{correlation_id_ok}, "$what: decoded, every byte used")
            or diag(explain($x));
        my $resp = $x->{response} or next;
        if ($x->{api} eq 'Metadata') {
            my %got = map { ($_->{node_id} => { host => $_->{host}, port => $_->{port},
                                                rack => $x->{api_version} >= 1 ? $_->{rack} : $MAP{ $_->{node_id} }{rack} }) }
                      @{ $resp->{brokers} };
            is_deeply(\%got, \%MAP, "$what: the node map") or diag(explain($resp->{brokers}));
            my ($t) = grep { $_->{topic} eq $TOPIC } @{ $resp->{topics} };
            is_deeply([ map { $_->{leader} } @{ $t->{partitions} } ], [ 1, 2, 3 ], "$what: partition leaders");
        } elsif ($x->{api} eq 'DescribeConfigs') {
            my ($res) = @{ $resp->{resources} // [] };
            my %cfg = map { ($_->{config_names} => $_->{config_value}) } @{ $res->{config_entries} // [] };
            is_deeply([ $res->{error_code}, $cfg{'advertised.listeners'}, $cfg{'broker.id'} ],
                      [ 0, "PLAINTEXT://$MAP{1}{host}:$MAP{1}{port}", '1' ],
                      "$what: broker 1's configs, advertised.listeners its address") or diag(explain($resp));
        } elsif ($x->{api} eq 'FindCoordinator') {
            is_deeply([ @$resp{qw(coordinator_id host port)} ], [ 1, $MAP{1}{host}, $MAP{1}{port} ],
                      "$what: coordinator = node 1") or diag(explain($resp));
        } elsif ($x->{api} eq 'ApiVersions') {
            my %k = map { ($_->{api_key} => [ $_->{min_version}, $_->{max_version} ]) } @{ $resp->{api_versions} };
            is_deeply([ @k{0, 1, 3, 10, 18, 32, 60} ], [ [3, 13], [4, 18], [0, 13], [0, 6], [0, 4], [0, 4], [0, 2] ],
                      "$what: the advertised ranges");
        } elsif ($x->{api} eq 'Produce') {
            my @e = map { [ $_->{partition}, $_->{error_code} ] } @{ $resp->{topics}[0]{partitions} };
            is_deeply(\@e, [ [0, 0], [1, 6], [2, 6] ], "$what: partition 0 stored here, 1-2 NOT_LEADER_OR_FOLLOWER");
        } elsif ($x->{api} eq 'Fetch') {
            my @p0 = grep { $_->{partition} == 0 } @{ $x->{records} };
            ok(@p0 >= 2 && !(grep { !$_->{crc_ok} } @p0), "$what: record batches with good CRC-32C")
                or diag(explain($x->{records}));
            is_deeply([ map { $_->{value} } @p0[0, 1] ], [ 'hello', 'world' ], "$what: the seed batch first");
            ok((grep { ($_->{value} // '') eq 'kafka-python-0' } @p0), "$what: what kafka-python produced");
        }
    }
    note('kafka-python newest versions here: ' . join(', ', map { "$_ v$max{$_}" } sort keys %max));
    ok($max{Metadata} >= 5, "kafka-python's newest Metadata (v$max{Metadata}) was checked");
    my @log = grep { ($_->{client_id} // '') eq 'kafka-python-check' } $tb->requests;
    is(scalar @log, scalar @res, 'the broker logged each request, with its client id');
    ok(!(grep { $_->{answer} ne 'ok' || $_->{header_version} != 1 || $_->{trailing} } @log),
       'all answered, request header v1, no trailing bytes left unread');

    # As an application, against a broker whose only node leads every partition.
    my $one = KafkaTestBroker->start(dir => $dir, nodes => [ { id => 1, host => '127.0.0.1', port => 0 } ],
                                     listen_nodes => 1, topics => [ { name => $TOPIC, partitions => 2 } ]);
    my $rt = kafka_python_roundtrip('127.0.0.1:' . $one->node(1)->{port}, 2, 10);
    my @p0 = map { $_->[1] } grep { $_->[0] == 0 } @{ $rt->{got} // [] };
    is_deeply([ @p0[0, 1] ], [ 'hello', 'world' ], 'kafka-python reads the seed batch first');
    $one->stop;
};

subtest 'test broker: kcat (librdkafka) reads it' => sub {
    plan skip_all => 'kcat not found (apt-get install kcat)' unless have('kcat');
    # A broker of its own, where every partition is led by node 1. No unknown tagged
    # fields: librdkafka before 2.2.0 (Debian has 2.0.2) skips one byte too few for every
    # tagged field it does not know (rd_kafka_buf_skip_tags, fixed by librdkafka PR #4278),
    # so a tag number above 127 or a second unknown tag derails its ApiVersions parse.
    my $one = KafkaTestBroker->start(dir => $dir, nodes => [ { id => 1, host => '127.0.0.1', port => 0 } ],
                                     listen_nodes => 1, unknown_tags => 'none',
                                     topics => [ { name => $TOPIC, partitions => 2 } ]);
    my $addr = '127.0.0.1:' . $one->node(1)->{port};
    my $r = KafkaMock::run([ 'kcat', '-L', '-J', '-b', $addr, '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L exits 0') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    is_deeply([ map { $_->{name} } @{ $md->{brokers} // [] } ], [ $addr ], 'kcat sees node 1 at its address');
    my @api = grep { $_->{api} && $_->{api} eq 'ApiVersions' } $one->requests;
    ok(@api && $api[0]{api_version} >= 3 && $api[0]{header_version} == 2,
       "kcat asked ApiVersions v$api[0]{api_version} (flexible, header v2) and went on");
    $r = KafkaMock::run([ 'kcat', '-P', '-b', $addr, '-t', $TOPIC, '-p', '1' ], in => "one\ntwo\nthree\n", timeout => 30);
    is($r->{exit}, 0, 'kcat produces to partition 1') or diag($r->{err});
    $r = KafkaMock::run([ 'kcat', '-C', '-b', $addr, '-t', $TOPIC, '-p', '1', '-o', '0', '-e', '-q' ], timeout => 30);
    is_deeply([ split /\n/, $r->{out} ], [ qw(hello world one two three) ], 'kcat consumes the seed batch and them')
        or diag($r->{err});
    my %v = map { ($_->{api} // '?') => $_->{api_version} } $one->requests;
    note('librdkafka used: ' . join(', ', map { "$_ v$v{$_}" } sort keys %v));
    $one->stop;
};

subtest 'test broker: flexible versions, request log, acks=0' => sub {
    my @targets = ('ApiVersions:all', 'Metadata:all', 'FindCoordinator:all', 'DescribeCluster:all',
                   'Produce:10-13', 'Fetch:16-18');
    my $r = KafkaMock::run([ $PY, $PROBE, $tb->bootstrap, '--topic', $TOPIC, '--topic-id', $TID, @targets ], timeout => 60);
    is($r->{exit}, 0, 'kafka-probe: every request answered') or diag($r->{err} . $r->{out});
    my @res = json_lines($r->{out});
    is(scalar @res, 5 + 14 + 7 + 3 + 4 + 3, 'one answer per request');
    for my $x (@res) {
        my $hex = $x->{response_hex} // '';
        # NodeEndpoints (tag 0) and the unknown tag (1000 = e8 07) ride at the end of
        # Produce v10+ / Fetch v16+ answers: partitions 1 and 2 are led by nodes 2 and 3.
        if ($x->{api} eq 'Produce' || $x->{api} eq 'Fetch') {
            my $h2 = unpack('H*', 'b2.kafka.internal');
            like($hex, qr/\Q$h2\E/, "$x->{api} v$x->{api_version}: NodeEndpoints name node 2");
            like($hex, qr/e807\Q13\E\Q@{[ unpack('H*', 'lookout:unknown-tag') ]}\E$/,
                 "$x->{api} v$x->{api_version}: ends with the unknown tag");
        }
    }
    my @log = grep { ($_->{client_id} // '') eq 'kafka-probe' } $tb->requests;
    is(scalar @log, scalar @res, 'logged');
    my @flex = grep { $_->{header_version} == 2 } @log;
    is(scalar @flex, 2 + 5 + 4 + 3 + 4 + 3, 'request header v2 for exactly the flexible versions');
    ok(!(grep { defined $_->{response_header_version} && $_->{api} eq 'ApiVersions' && $_->{response_header_version} != 0 } @log),
       'ApiVersions answers always use response header v0');

    $r = KafkaMock::run([ $PY, $PROBE, $tb->bootstrap, '--topic', $TOPIC, '--acks', '0', 'Produce:12', 'Metadata:1' ], timeout => 30);
    my ($p, $md) = json_lines($r->{out});
    ok($p && !defined $p->{response_hex} && $md && $md->{response_correlation_id} == 2,
       'Produce acks=0: no answer, and the next answer is the next request\'s') or diag($r->{out} . $r->{err});
    $r = KafkaMock::run([ $PY, $PROBE, $tb->bootstrap, 'ApiVersions:7' ], timeout => 30);
    my ($a) = json_lines($r->{out});
    like($a->{response_hex} // '', qr/^0000000100230000000100120000/, 'ApiVersions v7: error 35 and our range in a v0 body');
};

subtest 'test broker: header tags, unknown APIs, bad frames' => sub {
    my $tag = 'e80713' . unpack('H*', 'lookout:unknown-tag');    # tag 1000, 19 bytes
    my $b = KafkaTestBroker->start(dir => $dir, unknown_tags => 'all', unknown => 'echo',
                                   topics => [ { name => $TOPIC, partitions => 1 } ]);
    my $r = KafkaMock::run([ $PY, $PROBE, $b->bootstrap, '--topic', $TOPIC, '--partitions', '1',
                             'Metadata:8-9', 'ApiVersions:3', 'Produce:9' ], timeout => 30);
    my ($m8, $m9, $av, $p9) = json_lines($r->{out});
    like($m9->{response_hex}, qr/^00000002\Q01$tag\E/, 'unknown_tags all: a tag in response header v1 (Metadata v9)');
    unlike($m8->{response_hex}, qr/^00000001\Q01$tag\E/, '... none in header v0 (Metadata v8)');
    like($av->{response_hex}, qr/^000000030000/, '... nor in ApiVersions v3 (header v0 always)');
    like($p9->{response_hex}, qr/\Q$tag\E$/, '... and still in the body (Produce v9)');

    # unknown => echo: an API the broker does not speak comes back behind a v0 header.
    my $s = IO::Socket::INET->new(PeerAddr => $b->bootstrap, Timeout => 10) or die "connect: $!";
    my $req = pack('n n N n/a* a*', 9999, 3, 77, 'raw', 'opaque-body');
    print $s pack('N/a*', $req);
    my $got = '';
    IO::Select->new($s)->can_read(10) and $s->sysread($got, 4096);
    is($got, pack('N/a*', pack('N', 77) . substr($req, 8)), 'unknown => echo: the request after its 8-byte prefix');
    close $s;
    my ($last) = reverse $b->requests;
    is($last->{answer}, 'echo', '... logged as echoed');
    $b->stop;

    # unknown => close (the default, as a broker does), and frames out of bounds.
    for my $case ([ 'unknown API', pack('N/a*', pack('n n N n/a*', 9999, 0, 1, 'raw')) ],
                  [ 'negative size', pack('N', 0xffffff00) ],
                  [ 'size below the prefix', pack('N', 4) . 'abcd' ]) {
        my ($what, $bytes) = @$case;
        my $c = IO::Socket::INET->new(PeerAddr => $tb->bootstrap, Timeout => 10) or die "connect: $!";
        print $c $bytes;
        # EOF, or a reset when our unread bytes were still in its buffer.
        my $ready = IO::Select->new($c)->can_read(10);
        my $n = $ready ? $c->sysread(my $buf, 64) : -1;
        ok(!$n, "$what: the connection is closed, nothing answered");
        close $c;
    }
    $r = KafkaMock::run([ $PY, $PROBE, $tb->bootstrap, 'Metadata:1' ], timeout => 30);
    is($r->{exit}, 0, '... and the broker serves the next client');
};

subtest 'test broker: SASL, as kcat and kafka-python see it' => sub {
    my $b = KafkaTestBroker->start(dir => $dir, unknown_tags => 'none', topics => [ { name => $TOPIC, partitions => 1 } ],
                                   sasl => { mechanisms => [qw(PLAIN SCRAM-SHA-256 SCRAM-SHA-512)],
                                             users => { alice => 'alice-secret' } });
    my $r = KafkaMock::run([ $PY, $PROBE, $b->bootstrap, 'Metadata:1' ], timeout => 30);
    ok($r->{out} =~ /"closed": true/, 'Metadata before authenticating: closed, as Kafka does');
    for my $mech (qw(PLAIN SCRAM-SHA-256 SCRAM-SHA-512)) {
        SKIP: {
            skip 'kcat not found', 2 unless have('kcat');
            my @kc = ('kcat', '-X', 'security.protocol=SASL_PLAINTEXT', '-X', "sasl.mechanisms=$mech",
                      '-X', 'sasl.username=alice', '-b', $b->bootstrap, '-L');
            $r = KafkaMock::run([ @kc, '-X', 'sasl.password=alice-secret', '-m', '10' ], timeout => 30);
            is($r->{exit}, 0, "kcat (SaslAuthenticate), $mech: authenticated") or diag($r->{err});
            $r = KafkaMock::run([ @kc, '-X', 'sasl.password=wrong', '-m', '1' ], timeout => 30);
            like($r->{err}, qr/SASL authentication error: Authentication failed/, '... a wrong password: refused');
        }
        SKIP: {
            skip 'no /usr/bin/python3 with kafka-python', 2 unless kafka_python();
            for my $pw ('alice-secret', 'wrong') {
                $r = KafkaMock::run([ '/usr/bin/python3', $PYCHECK, $b->bootstrap, '--auth', '--security-protocol',
                                      'SASL_PLAINTEXT', '--sasl-mechanism', $mech, '--sasl-user', 'alice',
                                      '--sasl-password', $pw ], timeout => 30);
                my ($j) = json_lines($r->{out});
                is($j && $j->{auth}{connected} ? 1 : 0, $pw eq 'wrong' ? 0 : 1,
                   "kafka-python (bare tokens), $mech, " . ($pw eq 'wrong' ? 'a wrong password: refused' : 'authenticated'))
                    or diag($r->{out} . $r->{err});
            }
        }
    }
    my @log = $b->requests;
    ok((grep { ($_->{api} // '') eq 'SaslAuthenticate' && $_->{request_hex} && $_->{response_hex} } @log) &&
       (grep { $_->{bare_token} && $_->{request_hex} } @log), '... logged with the bytes, framed and bare');
    $b->stop;
};

subtest 'test broker: tshark decodes its answers' => sub {
    plan skip_all => Tshark::missing() if Tshark::missing();
    my $port = (split /:/, $tb->bootstrap)[1];
    my $out;
    my ($pcap, $why) = Tshark::capture($port, sub {
        $out = KafkaMock::run([ $PY, $PROBE, $tb->bootstrap, '--topic', $TOPIC, '--topic-id', $TID,
                                'ApiVersions:all', 'Metadata:all', 'FindCoordinator:all', 'DescribeCluster:all',
                                'Produce:all', 'Fetch:all', 'DescribeConfigs:all' ], timeout => 60);
    }, $dir);
    plan skip_all => "cannot capture: $why" unless $pcap;
    is($out->{exit}, 0, 'kafka-probe ran') or diag($out->{err});
    my $ver = Tshark::version();
    note("tshark $ver");
    my @resp = grep { $_->{dir} eq 'response' } @{ Tshark::kafka_pdus($pcap, $port) };
    my @sent = json_lines($out->{out});
    is(scalar @resp, scalar @sent, 'tshark found one response PDU per request') or diag(explain([ map { $_->{summary} } @resp ]));
    my (%known, %unknown, $tshark_knows);
    for my $i (0 .. $#sent) {
        my ($x, $pdu) = ($sent[$i], $resp[$i]) or last;
        my $what = "$x->{api} v$x->{api_version}";
        # Unknown to tshark: it says so, or could not even match the answer to its request.
        if ($pdu->{unsupported} || ($pdu->{api} // '') ne $x->{api} || $pdu->{version} != $x->{api_version}) {
            push @{ $unknown{ $x->{api} } }, $x->{api_version};
            next;
        }
        push @{ $known{ $x->{api} } }, $x->{api_version};
        ok(!$pdu->{malformed}, "$what: not malformed") or diag(explain($pdu));
        my @ep = Tshark::endpoints($pdu);
        if ($x->{api} eq 'Metadata' || $x->{api} eq 'DescribeCluster') {
            is_deeply(\@ep, [ map { [ $_, $MAP{$_}{host}, $MAP{$_}{port} ] } 1 .. 3 ], "$what: the node map")
                or diag(explain($pdu->{fields}));
        } elsif ($x->{api} eq 'FindCoordinator') {
            my @want = ([ 1, $MAP{1}{host}, $MAP{1}{port} ]);
            push @want, [ -1, '', -1 ] if $x->{api_version} >= 4;
            is_deeply(\@ep, \@want, "$what: coordinator node 1" . ($x->{api_version} >= 4 ? ', then -1' : ''))
                or diag(explain($pdu->{fields}));
        } elsif ($x->{api} eq 'ApiVersions') {
            my @k = Tshark::field_values($pdu, 'kafka.api_versions.api_key');
            my @lo = Tshark::field_values($pdu, 'kafka.api_versions.min_version');
            my @hi = Tshark::field_values($pdu, 'kafka.api_versions.max_version');
            is_deeply([ map { "$k[$_]:$lo[$_]-$hi[$_]" } 0 .. $#k ], [ qw(0:3-13 1:4-18 3:0-13 10:0-6 18:0-4 32:0-4 55:0-2 60:0-2 88:0-0 89:0-0) ],
                      "$what: the advertised ranges");
            $tshark_knows //= Tshark::known_versions($pdu);
        } elsif ($x->{api} eq 'Produce' || $x->{api} eq 'Fetch') {
            is_deeply([ Tshark::field_values($pdu, 'kafka.partition_id') ], [ 0, 1, 2 ], "$what: partitions 0-2")
                if $x->{api} eq 'Produce';
            is(scalar(grep { $_ == 6 } Tshark::field_values($pdu, 'kafka.error')), 2, "$what: 2 partitions NOT_LEADER_OR_FOLLOWER");
            if ($x->{api} eq 'Fetch') {
                my @v = Tshark::field_values($pdu, 'kafka.message_value');
                is_deeply([ @v[0, 1] ], [ map { join ':', unpack('(H2)*', $_) } 'hello', 'world' ], "$what: the seed records first");
            }
        }
    }
    note("tshark ${ver}'s own limits, from its ApiVersions decode: "
         . join(', ', map { "$_ v0-$tshark_knows->{$_}" } sort keys %{ $tshark_knows // {} }));
    note("tshark $ver decodes: " . join('; ', map { "$_ v" . _ranges(@{ $known{$_} }) } sort keys %known));
    note("tshark $ver does not know: " . join('; ', map { "$_ v" . _ranges(@{ $unknown{$_} }) } sort keys %unknown));
    # Guard against a check that silently checks nothing: tshark 4.0 knows these at least.
    ok(@{ $known{Metadata} // [] } >= 9 && @{ $known{FindCoordinator} // [] } >= 3 && @{ $known{ApiVersions} // [] } >= 3
       && @{ $known{Produce} // [] } >= 1 && @{ $known{Fetch} // [] } >= 1,
       'tshark decoded at least Metadata v0-8, FindCoordinator v0-2, ApiVersions v0-2, some Produce and Fetch');
};

sub _ranges {
    my @v = sort { $a <=> $b } @_;
    my @out;
    while (@v) {
        my $lo = shift @v;
        my $hi = $lo;
        $hi = shift @v while @v && $v[0] == $hi + 1;
        push @out, $lo == $hi ? $lo : "$lo-$hi";
    }
    return join ',', @out;
}

is($tb->stop, 0, 'test broker: closing its stdin stops it (exit 0)');
done_testing();
