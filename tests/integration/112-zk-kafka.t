#!/usr/bin/perl
# 112-zk-kafka.t: the listener map of a Kafka cluster read live from its ZooKeeper (issue
# 11): brokers in ZooKeeper mode register an ephemeral /brokers/ids/<node id> holding JSON
# version 4 or 5 with `endpoints` and `listener_security_protocol_map` (KIP-103,
# facts/kafka.md §0). Here the brokers are librdkafka's mock cluster (lib/KafkaMock.pm)
# and the registrations are written for them into a real ZooKeeper. What must hold:
#   - kcat, bootstrapped through lookout, is told every node at its EXTERNAL address from
#     the registrations, and produces and consumes through them;
#   - a registration whose lookup listener speaks another protocol than bootstrap.servers
#     is refused (logged, counted) and its node is not in the map; once the broker writes
#     it right (a data change, not a new znode), the node is mapped;
#   - a node whose znode goes leaves the map; --check --live agrees with /map.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use ZooKeeper;

plan skip_all => $_ for grep { defined } ZooKeeper::missing(), KafkaMock::missing();
need_tools('kcat');

my $dir = tmp_dir();
mkdir "$dir/zk";
my $zk = ZooKeeper->start(dir => "$dir/zk");
my $TOPIC = 'zk-t1';
my $m = KafkaMock->start(brokers => 3, topics => ["$TOPIC:3"], dir => $dir);
my @ext = map { free_port() } 1 .. 3;
my $boot = free_port();
my $aport = free_port();
my %ext_of = map { ($m->brokers->[$_]{id} => "127.0.0.1:$ext[$_]") } 0 .. 2;

# The registration of node $i (0-based), as a broker of that version writes it.
sub registration {
    my ($i, %o) = @_;
    my $b = $m->brokers->[$i];
    my %doc = (listener_security_protocol_map => { INTERNAL => 'PLAINTEXT', EXTERNAL => $o{external} // 'PLAINTEXT' },
               endpoints => [ "INTERNAL://$b->{host}:$b->{port}", "EXTERNAL://127.0.0.1:$ext[$i]" ],
               jmx_port => -1, host => undef, port => -1, timestamp => '' . int(time * 1000),
               version => $o{version} // 5);
    $doc{features} = {} if $doc{version} == 5;
    $doc{rack} = "r$i" if $o{rack};
    return encode_json(\%doc);
}
my %sess;
for my $i (0 .. 2) {
    my $id = $m->brokers->[$i]{id};
    $sess{$id} = $zk->client(timeout => 10);
    $sess{$id}->create("/kafka/brokers/ids/$id",
                       registration($i, version => $i == 0 ? 4 : 5, rack => $i == 1,
                                    external => $i == 2 ? 'SSL' : 'PLAINTEXT'),
                       ephemeral => 1, makepath => 1);
}

my $conf = "[lookout]\nworkers = 1\nadmin = 127.0.0.1:$aport\n\n[kafka k]\n"
         . "zookeeper.connect = " . $zk->connect . "/kafka\ninternal_networks = 127.0.0.0/8\n"
         . "inter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
         . "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
         . "bootstrap.servers = 127.0.0.1:$boot\n";
my $lk = start_lookout(dir => $dir, conf => $conf, wait => ["127.0.0.1:$boot"]);
ok($lk->started, 'lookout started with no [broker] section') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub get { Lookout::curl("http://127.0.0.1:$aport$_[0]") }
ok(wait_until(sub { (get('/healthz')->{status} // 0) == 200 }, 10, 0.05), 'ready once ZooKeeper was read');

sub kcat_brokers {
    my $r = KafkaMock::run([ 'kcat', '-L', '-J', '-b', "127.0.0.1:$boot", '-m', '10' ], timeout => 30);
    my $md = eval { decode_json((split /\n/, $r->{out})[0] // '') } // {};
    return { map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] } };
}
my ($id3) = $m->brokers->[2]{id};
my $b3 = $m->brokers->[2];

subtest 'registered nodes are handed out at their EXTERNAL addresses' => sub {
    ok($lk->wait_log(qr{registration /brokers/ids/$id3 refused: .*EXTERNAL.* is SSL here but PLAINTEXT}, 5),
       'the node whose EXTERNAL listener is SSL is refused, and why');
    my $seen = kcat_brokers();
    is($seen->{$_}, $ext_of{$_}, "node $_ (version " . ($_ == $m->brokers->[0]{id} ? 4 : 5) . "): its EXTERNAL address")
        for map { $_->{id} } @{ $m->brokers }[0, 1];
    is($seen->{$id3}, "$b3->{host}:$b3->{port}", 'the refused node is not in the map: its address passes (and is logged)');
    like(get('/metrics')->{body}, qr/^lookout_map_registrations_refused\{cluster="k"\} 1$/m, '/metrics: one refused');
};

subtest 'the broker writes its registration right: the node is mapped' => sub {
    my $t = time;
    $sess{$id3}->set("/kafka/brokers/ids/$id3", registration(2));
    ok(wait_until(sub { (get('/healthz')->{body} // '') =~ /3 brokers \(3 live/ }, 5, 0.02), 'three live brokers');
    note sprintf 'data change to mapped: %.0f ms', 1000 * (time - $t);
    is_deeply(kcat_brokers(), \%ext_of, 'every node at its EXTERNAL address');
    my @msgs = map { "zk message $_" } 1 .. 100;
    my $r = KafkaMock::run([ 'kcat', '-P', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', '2' ],
                           in => join("\n", @msgs) . "\n", timeout => 30);
    is($r->{exit}, 0, 'produced through lookout') or diag($r->{err});
    $r = KafkaMock::run([ 'kcat', '-C', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', '2', '-o', 'beginning', '-e', '-q' ],
                        timeout => 30);
    is_deeply([ split /\n/, $r->{out} ], \@msgs, '... and consumed back');
};

subtest 'a node whose znode goes leaves the map' => sub {
    $sess{$id3}->close;
    ok(wait_until(sub { (get('/healthz')->{body} // '') =~ /2 brokers \(2 live/ }, 5, 0.02), 'two live brokers');
    ok(!served($ext[2]), "its EXTERNAL address is no longer served");
    my $map = decode_json(get('/map')->{body});
    my ($k) = grep { $_->{name} eq 'k' } @{ $map->{clusters} };
    is_deeply([ sort map { $_->{node_id} } @{ $k->{brokers} } ], [ sort map { $_->{id} } @{ $m->brokers }[0, 1] ],
              '/map: the two nodes');
    my $r = run_lookout(args => [ '--check', '--live', '-c', $lk->conf ], timeout => 20);
    is($r->{exit}, 0, '--check --live exits 0') or diag($r->{out});
    my @live = $r->{out} =~ /^  broker k\/(\d+): node \d+ \(live\)$/mg;
    is_deeply([ sort @live ], [ sort map { $_->{id} } @{ $m->brokers }[0, 1] ], '--check --live: the same two, live');
};

sub served {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $_[0], Proto => 'tcp', Timeout => 1);
    close $s if $s;
    return $s ? 1 : 0;
}

$lk->stop;
is($lk->exit_code, 0, 'lookout exits 0');
done_testing;
