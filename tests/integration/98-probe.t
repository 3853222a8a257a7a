#!/usr/bin/perl
# 98-probe.t: `lookout --probe -c FILE` (issue 10) against the fake Pulsar cluster's admin
# API and lookups, and the Kafka test broker's ApiVersions and Metadata: a map that agrees
# exits 0; a broker or node the map lacks, an address no listener covers, and a dead
# broker each exit 1 naming it; a bad config exits 2. Every run is bounded by
# timeout.connect (1s here) per step.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time);

use Lookout;
use PulsarBroker;
use KafkaTestBroker;

my $dir = tmp_dir();

sub probe {
    my ($name, $conf) = @_;
    my $t0 = time;
    my $r = run_lookout(dir => $dir, name => $name, conf => $conf, args => ['--probe'], timeout => 20);
    $r->{secs} = time - $t0;
    return $r;
}

# ---- Pulsar ---------------------------------------------------------------------------------
my @hp = map { free_port() } 1 .. 3;
my $pc = PulsarBroker->start(brokers => [ map { "127.0.0.1:$_" } @hp ], dir => "$dir/pulsar",
                             own => { 'lookout-probe' => 2 });
my @ext = map { free_port() } 1 .. 3;

sub pulsar_conf {
    my (%o) = @_;    # brokers => [N...], internal => {N => listeners text}
    my $c = "[lookout]\nworkers = 1\ntimeout.connect = 1s\n\n[pulsar prod]\n"
          . "internalListenerName = internal\nlookupListenerName = external\n\n";
    for my $n (@{ $o{brokers} }) {
        my $in = $o{internal}{$n} // $pc->internal_listeners($n);
        $c .= "[broker prod/b$n]\nadvertisedListeners = $in,external:http://127.0.0.1:$ext[$n - 1]\n\n";
    }
    return $c;
}

my $r = probe('p-agree', pulsar_conf(brokers => [ 1, 2, 3 ]));
is($r->{exit}, 0, 'pulsar: a map that agrees exits 0') or diag($r->{out});
is(scalar(() = $r->{out} =~ /^OK +prod\/b\d http:\/\/127\.0\.0\.1:\d+: agrees with the map$/mg), 3,
   'pulsar: one OK line per broker');
like($r->{out}, qr/^probe: 3 brokers: 3 OK, 0 MISMATCH, 0 UNREACHABLE; 0 in the cluster, not in the map$/m,
     'pulsar: the summary line');
# The probe asked what it says it asks, of every broker.
my @seen = map { $_->{path} } $pc->requests;
for my $p ('/admin/v2/brokers/ready', '/admin/v2/clusters', '/admin/v2/brokers/standalone',
           '/lookup/v2/topic/persistent/public/default/lookout-probe') {
    ok((grep { $_ eq $p } @seen), "pulsar: asked $p");
}

$r = probe('p-lacks', pulsar_conf(brokers => [ 1, 2 ]));
is($r->{exit}, 1, 'pulsar: a broker the map lacks exits 1');
like($r->{out}, qr/^MISMATCH +prod broker 127\.0\.0\.1:$hp[2]: active in cluster standalone, not in the map$/m,
     'pulsar: names the active broker the map lacks') or diag($r->{out});

# b2 owns the probe topic, and the map gives b2 no pulsar:// address: every lookup names
# one no listener covers.
my $b2 = $pc->broker(2);
$r = probe('p-uncovered', pulsar_conf(brokers => [ 1, 2, 3 ], internal => { 2 => "internal:$b2->{http}" }));
is($r->{exit}, 1, 'pulsar: an uncovered advertised address exits 1');
like($r->{out}, qr/^MISMATCH +prod\/b1 \S+: its lookup names \Q$b2->{pulsar}\E \(brokerUrl, nativeUrl\), which no listener in the map has$/m,
     'pulsar: names the address and the field') or diag($r->{out});

$pc->kill_broker(3);
$r = probe('p-down', pulsar_conf(brokers => [ 1, 2, 3 ]));
is($r->{exit}, 1, 'pulsar: a dead broker exits 1');
like($r->{out}, qr/^UNREACHABLE prod\/b3 http:\/\/127\.0\.0\.1:$hp[2]: connect: Connection refused$/m,
     'pulsar: UNREACHABLE with the error') or diag($r->{out});
like($r->{out}, qr/^OK +prod\/b1 /m, 'pulsar: the live brokers still agree');
$pc->stop;

# ---- Kafka ----------------------------------------------------------------------------------
SKIP: {
    skip 'python3 not found', 9 unless KafkaTestBroker::python();
    # Nodes 1 and 2 advertise the address they listen on; node 3 advertises a name while
    # listening on 127.0.0.1 (an address the map will not cover).
    my $tb = KafkaTestBroker->start(dir => $dir, listen_nodes => JSON::PP::true,
        nodes => [ { id => 1, host => '127.0.0.1', port => 0 }, { id => 2, host => '127.0.0.1', port => 0 },
                   { id => 3, host => 'internal-3.kafka.test', port => 0, bind => '127.0.0.1:0' } ]);
    my %at = map { $_ => $tb->node($_)->{listen} } 1 .. 3;
    my $dead = free_port();
    my $kconf = sub {
        my (@nodes) = @_;    # [id, internal address]
        my $c = "[lookout]\nworkers = 1\ntimeout.connect = 1s\n\n[kafka k]\n"
              . "inter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
              . "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n";
        $c .= "\n[broker k/$_->[0]]\nadvertised.listeners = INTERNAL://$_->[1],EXTERNAL://127.0.0.1:" . free_port() . "\n"
            for @nodes;
        return $c;
    };
    my $tk = KafkaTestBroker->start(dir => $dir, listen_nodes => JSON::PP::true,
        nodes => [ map { { id => $_, host => '127.0.0.1', port => 0 } } 1 .. 2 ]);
    $r = probe('k-agree', $kconf->(map { [ $_, $tk->node($_)->{listen} ] } 1 .. 2));
    is($r->{exit}, 0, 'kafka: a map that agrees exits 0') or diag($r->{out});
    is(scalar(() = $r->{out} =~ /^OK +k\/\d 127\.0\.0\.1:\d+: agrees with the map$/mg), 2, 'kafka: one OK line per node');
    ok((grep { $_->{api_key} == 3 } $tk->requests), 'kafka: it asked Metadata');
    $tk->stop;

    $r = probe('k-lacks', $kconf->([ 1, $at{1} ], [ 2, $at{2} ]));
    is($r->{exit}, 1, 'kafka: a node the map lacks exits 1');
    like($r->{out}, qr/^MISMATCH +k node 3 internal-3\.kafka\.test:\d+: in the cluster, not in the map$/m,
         'kafka: names the node') or diag($r->{out});

    # A broker that takes the connection and never answers: the read is bounded.
    my $mute = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 5, Proto => 'tcp')
        or die "listen: $!";
    my $mp = $mute->sockport;
    $r = probe('k-uncovered', $kconf->([ 1, $at{1} ], [ 2, $at{2} ], [ 3, $at{3} ], [ 4, "127.0.0.1:$dead" ],
                                      [ 5, "127.0.0.1:$mp" ]));
    like($r->{out}, qr/^UNREACHABLE k\/5 127\.0\.0\.1:$mp: ApiVersions: no answer within 1000 ms$/m,
         'kafka: a broker that never answers is UNREACHABLE after timeout.connect');
    cmp_ok($r->{secs}, '<', 6, 'kafka: the whole probe stayed bounded');
    my $at3 = $at{3};
    like($r->{out}, qr/^MISMATCH +k\/3 \Q$at3\E: node 3 advertises internal-3\.kafka\.test:\d+ on INTERNAL, which the map has at \Q$at3\E$/m,
         'kafka: names the address no listener covers') or diag($r->{out});
    like($r->{out}, qr/^UNREACHABLE k\/4 127\.0\.0\.1:$dead: connect: Connection refused$/m,
         'kafka: a dead broker is UNREACHABLE with the error');
    $tb->stop;
}

# ---- bad config: 2 ---------------------------------------------------------------------------
$r = probe('bad', "[pulsar prod]\nbogus = 1\n\n[broker prod/b1]\nadvertisedListeners = internal:http://127.0.0.1:$hp[0]\n");
is($r->{exit}, 2, 'a config error exits 2');
like($r->{out}, qr/bad\.conf:2: .*bogus/, 'with file:line');

done_testing();
