#!/usr/bin/perl
# 123-kafka-kips.t: three Kafka protocol changes of 2025-2026 (issue 19), through lookout, with
# bin/kafka-testbroker answering from bytes encoded per the message specs and bin/kafka-probe
# sending hand-encoded requests.
#
# KIP-1313 (client instance id in every request header; the client id sent on a connection's
# first request only). Not merged: apache/kafka's RequestHeader.json has "validVersions":
# "0-2", and the request header v3 of PR #23544 (KAFKA-20924, open) is not in it. So this
# pins what lookout must do whatever v3 becomes: requests whose client id is null after the
# first are routed, answered and rewritten as before (lookout reads only the 12-byte prefix,
# KAFKA-21160's lesson, and logs no client id), and an OffsetDelete v1 and an ApiVersions v5
# with a v3-shaped header (an assumed layout: ClientId, a 16-byte ClientInstanceId, tags)
# reach the broker byte for byte (it echoes them) and their answers come back.
#
# KIP-1071 (Streams groups): StreamsGroupHeartbeat and StreamsGroupDescribe answers carry the
# application endpoints (Interactive Queries host:port) of the user's Streams instances. One
# that equals a broker's internal address (an instance on a broker's host and port in
# another network namespace) and one in the brokers' network (10.0.0.5:8080) both reach the
# client as the broker sent them, with leak_guard = block: not rewritten, not counted, not
# refused. ApiVersions is clamped to the Streams versions lookout has read (v1).
#
# KIP-853 (DescribeQuorum v2 names the controllers' listeners): a controller whose listener
# is the internal address of a [broker k/ID] entry is rewritten to that entry's lookup
# address; one the map lacks is a leak (logged and counted with log, the connection closed
# with block). DescribeQuorum v0-1, which name no endpoint, pass as they are.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';

# A Kafka string as it sits on the wire (compact: length + 1, for hosts under 127 bytes)
# followed by a uint16 port, in hex.
sub wire16 { my ($host, $port) = @_; return unpack('H*', chr(length($host) + 1) . $host . pack('n', $port)) }

# Node 1 is a broker; node 3000 is a KRaft controller that lookout also maps (as
# [broker k/3000], its controller listener as the internal address), and the test broker
# serves it too; node 3001 is a controller the map lacks.
my $ctl_port = free_port();
my $tb = KafkaTestBroker->start(
    dir => $dir, listen_nodes => JSON::PP::true, unknown => 'echo',
    nodes => [ { id => 1, host => '127.0.0.1', port => 0 }, { id => 3000, host => '127.0.0.1', port => $ctl_port } ],
    topics => [ { name => 'lk-kips', partitions => 1 } ],
    # the broker would let clients use Streams versions lookout has not read
    api_versions => { 88 => [ 0, 3 ], 89 => [ 0, 2 ] },
    quorum => [ { id => 3000, listeners => [ { name => 'CONTROLLER', host => '127.0.0.1', port => $ctl_port } ] },
                { id => 3001, listeners => [ { name => 'CONTROLLER', host => 'controller-3001.kafka.internal', port => 9093 } ] } ]);
my $n1 = $tb->node(1)->{listen};
my ($n1_host, $n1_port) = split /:/, $n1;
is($tb->node(3000)->{listen}, "127.0.0.1:$ctl_port", 'the controller listens where DescribeQuorum says');

my %K = %{ KafkaMock::guard_lookouts(dir => $dir, name => 'kips', nodes => [ [ 1, $n1 ], [ 3000, "127.0.0.1:$ctl_port" ] ]) };

sub kprobe {
    my ($port, $opts, @targets) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/kafka-probe", '--topic', 'lk-kips', '--partitions', 1, @$opts,
                             "127.0.0.1:$port", @targets ], timeout => 60);
    return Lookout::json_lines($r->{out});
}

my $direct_port = (split /:/, $tb->bootstrap)[1];

# ---- KIP-1313 ---------------------------------------------------------------------------

subtest 'KIP-1313: the client id on the first request only, and a header v3 that lookout does not know' => sub {
    my $k = $K{log};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my @targets = qw(ApiVersions:3 Metadata:12 Produce:9 DescribeCluster:0 Metadata:1 OffsetDelete:1 ApiVersions:5 Metadata:12 ApiVersions:0);
    my $from = length($k->{lk}->log // '');
    my $seen = scalar(my @r0 = $tb->requests);
    my @l = kprobe($k->{boot}, [ '--client-id', 'kip1313', '--client-id-once', '--header-v3' ], @targets);
    is(scalar(@l), scalar(@targets), 'every request answered') or return diag(explain(\@l));
    for my $i (0 .. $#l) {
        ok(!$l[$i]{closed} && ($l[$i]{response_correlation_id} // -1) == $i + 1,
           "$targets[$i]: answered with its own correlation id");
    }
    my @got = ($tb->requests)[ $seen .. $seen + $#targets ];
    is_deeply([ map { $_->{client_id} } @got[0, 1, 2] ], [ 'kip1313', undef, undef ],
              'the broker got the client id on the first request only, null after');
    is_deeply([ map { $_->{answer} } @got ], [ qw(ok ok ok ok ok echo unsupported_version ok ok) ],
              '... and answered each (OffsetDelete v1 echoed, ApiVersions v5 told to go lower)');
    # The echo is the request as the broker got it, after its 8-byte prefix: the v3-shaped
    # header and the body came byte for byte.
    my ($od) = grep { $_->{api} eq 'OffsetDelete' } @l;
    is(substr($od->{response_hex}, 8), substr($od->{request_hex}, 16),
       'OffsetDelete v1 with a header v3 reached the broker byte for byte');
    like($od->{request_hex}, qr/^002f0001000000[0-9a-f]{2}ffff6c6f6f6b6f75742d6b697031333133/,
         '... a null client id, then the client instance id');
    my ($av5) = grep { $_->{api} eq 'ApiVersions' && $_->{api_version} == 5 } @l;
    is(substr($av5->{response_hex}, 8), '00230000000100120000' . '0004',
       'ApiVersions v5 with a header v3: error 35 and the broker\'s range, a v0 body, untouched');
    # routing and rewriting do not need a client id
    my ($md) = grep { $_->{api} eq 'Metadata' && $_->{api_version} == 12 } @l[1 .. $#l];
    my $ext = unpack('H*', pack('N', $k->{ext}{1}));
    like($md->{response_hex}, qr/$ext/, 'Metadata v12 without a client id: node 1 rewritten to lookout');
    unlike($md->{response_hex}, qr/${\ unpack('H*', pack('N', $n1_port)) }/, '... its internal port gone');
    # ApiVersions v0 with a null client id, late on the connection: clamped as ever
    my $b = pack('H*', substr($l[-1]{response_hex}, 8));
    my (undef, $n) = unpack('n N', $b);
    my %max = map { unpack('n', substr($b, 6 + 6 * $_, 2)) => unpack('n', substr($b, 10 + 6 * $_, 2)) } 0 .. $n - 1;
    is_deeply([ @max{3, 55, 88} ], [ 13, 2, 1 ], 'ApiVersions v0 without a client id: clamped (Metadata 13, DescribeQuorum 2, StreamsGroupHeartbeat 1)');
    ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"ApiVersions v0"/ }, 5), 'access-log lines came');
    my $log = Lookout::log_since($k->{lk}, $from);
    unlike($log, qr/\[(?:warn|error)\]/, 'no warning or error on the way') or diag($log);
    like($log, qr/"api 47 v1"|"OffsetDelete v1"/, 'OffsetDelete v1 is logged by api and version');
};

# ---- KIP-1071 ---------------------------------------------------------------------------

subtest 'KIP-1071: Streams application endpoints pass as they are, with leak_guard = block' => sub {
    my $k = $K{block};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my $from = length($k->{lk}->log // '');
    my $before = Lookout::leaks_metric($k->{admin}, 'k');
    # member-1's application endpoint is node 1's internal address; member-2's is one in the
    # brokers' network
    my ($h1) = kprobe($k->{boot}, [ '--group', 'app', '--member', 'member-1', '--user-endpoint', $n1 ],
                      'StreamsGroupHeartbeat:0');
    ok($h1 && !$h1->{closed} && defined $h1->{response_hex}, 'member-1 heartbeat answered, connection open')
        or return diag(explain($h1));
    like($h1->{response_hex}, qr/${\ wire16($n1_host, $n1_port) }/,
         '... its PartitionsByUserEndpoint names its endpoint (a broker\'s internal address) as it was');
    my @l = kprobe($k->{boot}, [ '--group', 'app', '--member', 'member-2', '--user-endpoint', '10.0.0.5:8080' ],
                   'StreamsGroupHeartbeat:0', 'StreamsGroupDescribe:0', 'ApiVersions:0');
    is(scalar(grep { !$_->{closed} && defined $_->{response_hex} } @l), 3, 'member-2 heartbeat, describe, ApiVersions answered')
        or return diag(explain(\@l));
    for my $i (0, 1) {
        like($l[$i]{response_hex}, qr/${\ wire16($n1_host, $n1_port) }/, "$l[$i]{api}: $n1 (member-1) as the broker gave it");
        like($l[$i]{response_hex}, qr/${\ wire16('10.0.0.5', 8080) }/, "$l[$i]{api}: 10.0.0.5:8080 (member-2) as the broker gave it");
    }
    ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"ApiVersions v0"/ }, 5), 'access-log lines came');
    my $log = Lookout::log_since($k->{lk}, $from);
    like($log, qr/"StreamsGroupHeartbeat v0" k\/\d+ - \d+ bytes to client, 0 rewrites, 0 leaks/,
         'the access log names the API: 0 rewrites, 0 leaks') or diag($log);
    unlike($log, qr/leak_guard:/, 'the leak guard says nothing');
    is(Lookout::leaks_metric($k->{admin}, 'k'), $before, 'lookout_leaks_total unchanged');
    # ApiVersions v0: int16 error, int32 count, {key, min, max}...
    my %max;
    my $b = pack('H*', substr($l[2]{response_hex}, 8));
    my ($err, $n) = unpack('n N', $b);
    for my $i (0 .. $n - 1) {
        my ($key, $min, $mx) = unpack('n n n', substr($b, 6 + 6 * $i, 6));
        $max{$key} = $mx;
    }
    is_deeply([ @max{88, 89, 55} ], [ 1, 1, 2 ],
              'ApiVersions: StreamsGroupHeartbeat and StreamsGroupDescribe clamped to v1 (broker said 3 and 2), DescribeQuorum 2');
};

# ---- KIP-853 ----------------------------------------------------------------------------

my $c3000_in = wire16('127.0.0.1', $ctl_port);
my $c3001 = wire16('controller-3001.kafka.internal', 9093);

subtest 'KIP-853: DescribeQuorum v2 controllers, leak_guard = log' => sub {
    my $k = $K{log};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my @d = kprobe($direct_port, [], 'DescribeQuorum:0-2');
    like($d[2]{response_hex} // '', qr/$c3000_in/, 'the broker names controller 3000 at its listener');
    like($d[2]{response_hex} // '', qr/$c3001/, '... and controller 3001');
    my $from = length($k->{lk}->log // '');
    my $before = Lookout::leaks_metric($k->{admin}, 'k');
    my @l = kprobe($k->{boot}, [], 'DescribeQuorum:0-2');
    is(scalar(grep { defined $_->{response_hex} } @l), 3, 'v0, v1 and v2 answered') or return diag(explain(\@l));
    is($l[$_]{response_hex}, $d[$_]{response_hex}, "DescribeQuorum v$_ (no endpoint) passes as it is") for 0, 1;
    my $v2 = $l[2]{response_hex};
    unlike($v2, qr/$c3000_in/, 'v2: controller 3000\'s internal address is gone');
    like($v2, qr/${\ wire16('127.0.0.1', $k->{ext}{3000}) }/, '... rewritten to [broker k/3000]\'s lookup address');
    like($v2, qr/$c3001/, '... controller 3001, which the map lacks, left as it came');
    ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"DescribeQuorum v2"/ }, 5), 'access-log lines came');
    my $log = Lookout::log_since($k->{lk}, $from);
    like($log, qr/\[warn\] [^\n]*the DescribeQuorum v2 answer from broker k\/\d+ \(cluster k\) names controller-3001\.kafka\.internal:9093 \(node 3001\), an address the map lacks[^\n]*logged only/,
         'the unmapped controller is a leak, logged with what and where') or diag($log);
    like($log, qr/"DescribeQuorum v2" k\/\d+ - \d+ bytes to client, 1 rewrites, 1 leaks/, 'the access log: 1 rewrite, 1 leak');
    is(Lookout::leaks_metric($k->{admin}, 'k'), $before + 1, 'lookout_leaks_total counts it');
};

subtest 'KIP-853: DescribeQuorum v2 naming a controller the map lacks, leak_guard = block' => sub {
    my $k = $K{block};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my ($l) = kprobe($k->{boot}, [], 'DescribeQuorum:2');
    ok($l && $l->{closed} && !defined $l->{response_hex}, 'the connection closes before any byte of it')
        or diag(explain($l));
    my ($ok) = kprobe($k->{boot}, [], 'DescribeQuorum:1');
    ok($ok && defined $ok->{response_hex}, 'DescribeQuorum v1 (no endpoint) is served');
};

$_->{lk}->stop for values %K;
$tb->stop;
done_testing();
