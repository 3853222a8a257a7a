#!/usr/bin/perl
# 103-kafka-clients.t: Kafka through lookout against librdkafka's mock cluster (issue 8, "Real
# peers to test against"), with one more client nobody here wrote: kafkajs (npm, pinned in
# tests/kafka/package-lock.json; tests/deps.sh runs npm ci) produces, consumes back in a
# consumer group, and lists the brokers it was given: the round trip matches, and it never
# learnt or dialed anything but lookout's addresses.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json encode_json);
use Test::More;

use Lookout;
use KafkaMock;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();

my $dir = tmp_dir();
my $JS = 'lk-js';
my $m = KafkaMock->start(brokers => 3, topics => ["$JS:3"], dir => $dir);
my @ext = map { free_port() } 1 .. 3;
my $boot = free_port();
my %ext_of = map { ($m->brokers->[$_]{id} => $ext[$_]) } 0 .. 2;
my %ours = map { ("127.0.0.1:$_" => 1) } @ext, $boot;
my $brokers = join '', map {
    my $b = $m->brokers->[$_];
    "[broker k/$b->{id}]\nadvertised.listeners = INTERNAL://$b->{host}:$b->{port},EXTERNAL://127.0.0.1:$ext[$_]\n\n"
} 0 .. 2;
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . $brokers);
[lookout]
workers = 1

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$boot

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

# ---- kafkajs -----------------------------------------------------------------------------

subtest 'kafkajs through lookout: a round trip with a consumer group' => sub {
    plan skip_all => KafkaMock::kafkajs_missing() if KafkaMock::kafkajs_missing();
    my $n = 300;
    my $r = KafkaMock::run([ 'node', "$FindBin::Bin/bin/kafkajs-check", "127.0.0.1:$boot", '--roundtrip', $n,
                             '--topic', $JS, '--partitions', 3, '--group', 'lk-kafkajs', '--timeout', 30 ],
                           timeout => 90);
    my ($j) = map { $_->{roundtrip} ? ($_->{roundtrip}) : () } json_lines($r->{out});
    ok($j, 'kafkajs ran its round trip') or return diag("exit $r->{exit}: $r->{err}");
    note("kafkajs $j->{kafkajs}; requests per address: " . encode_json($j->{requests}));
    is(scalar @{ $j->{sent} }, $n, "$n messages produced");
    is(scalar @{ $j->{got} }, $n, "$n messages consumed by the group, no more");
    is_deeply([ sort map { "@$_" } @{ $j->{got} } ], [ sort map { "@$_" } @{ $j->{sent} } ],
              '... the ones sent, each on its partition');
    is_deeply($j->{brokers}, [ map { [ $_, '127.0.0.1', $ext_of{$_} ] } sort keys %ext_of ],
              'describeCluster: each node id at its EXTERNAL address on lookout');
    my @dialed = @{ $j->{dialed} // [] };
    ok(@dialed > 1 && !(grep { !$ours{$_} } @dialed), 'kafkajs dialed only lookout: ' . join(' ', @dialed));
    my @asked = keys %{ $j->{requests} // {} };
    ok(!(grep { !$ours{$_} } @asked), '... and sent every request to lookout');
    my %api = map { my ($a) = /^(\w+)/; ($a => 1) } map { @$_ } values %{ $j->{requests} // {} };
    ok($api{GroupCoordinator} && $api{JoinGroup} && $api{SyncGroup} && $api{OffsetCommit},
       'the group found its coordinator through lookout, joined, synced and committed');
    # The mock speaks Metadata v0-2 and FindCoordinator v0-2 only: kafkajs asks ApiVersions
    # first and picks within them, so those are what lookout rewrote here.
    my %v = map { /^(\w+) v(\d+)$/ ? ($1 => $2) : () } map { @$_ } values %{ $j->{requests} // {} };
    is_deeply([ @v{qw(Metadata GroupCoordinator)} ], [ 2, 2 ], 'kafkajs used Metadata v2 and FindCoordinator v2');
};

ok($lk->alive, 'lookout still running');
$lk->stop;
$m->stop;
done_testing();
