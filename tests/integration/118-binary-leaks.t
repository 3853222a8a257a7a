#!/usr/bin/perl
# 118-binary-leaks.t: the leak guard on the binary paths (issue 18, defect 2). Kafka answers
# lookout cannot rewrite (a Metadata v14, a version no spec has yet; a Metadata v12 that
# does not decode) and one it rewrites but that names a node the map lacks, and Pulsar
# commands it cannot rewrite (a LOOKUP_RESPONSE naming a broker the map lacks, a command of
# a type lookout does not know carrying a broker's internal URL, an ERROR whose text names a
# broker's internal address as Pulsar's "not served by this instance" does), each through a lookout
# with leak_guard = log and one with leak_guard = block. What the client gets (bytes from
# hand-built clients), the warning, lookout_leaks_total on /metrics, and the access log's
# counts: an answer passed through unchanged counts 0 rewrites, and every internal address
# found is a leak. With block the connection closes before the answer's first byte.

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

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';

# ---- Kafka ------------------------------------------------------------------------------

# Node 1 is mapped (lookout connects to it at the address it advertises); node 9 is
# advertised by the broker but not in lookout's map.
my $tb = KafkaTestBroker->start(
    dir => $dir, listen_nodes => JSON::PP::true,
    nodes => [ { id => 1, host => '127.0.0.1', port => 0 }, { id => 9, host => 'internal-9.kafka.test', port => 9092 } ],
    topics => [ { name => 'lk-leak', partitions => 1 } ],
    as_version => { '3:14' => 13, '1:19' => 18 }, malformed => ['3:11']);
my $n1 = $tb->node(1)->{listen};
my ($n1_host, $n1_port) = split /:/, $n1;
# node 1's internal address as a Kafka answer holds it: the host string, the port after it
my $n1_wire = unpack('H*', $n1_host) . unpack('H*', pack('N', $n1_port));

my %K = %{ KafkaMock::guard_lookouts(dir => $dir, name => 'kafka', nodes => [ [ 1, $n1 ] ]) };

sub kprobe {
    my ($port, @targets) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/kafka-probe", '--topic', 'lk-leak', '--partitions', 1, "127.0.0.1:$port", @targets ],
                           timeout => 60);
    return Lookout::json_lines($r->{out});
}

# What the broker says directly: the cases are what they claim to be.
my %direct = map { my ($l) = kprobe((split /:/, $tb->bootstrap)[1], $_); ($_ => $l) } qw(Metadata:14 Metadata:11 Metadata:12);
like($direct{'Metadata:14'}{response_hex} // '', qr/$n1_wire/, 'the broker answers Metadata v14, naming node 1 as it listens');
like($direct{'Metadata:11'}{response_hex} // '', qr/$n1_wire/, '... and a Metadata v11 that does not decode, naming it too');

my @kcases = (
    [ 'Metadata:14', 'a Metadata v14 (a version lookout does not know)', 0,
      qr/the Metadata v14 answer from broker k\/1 \(cluster k\) names \Q$n1\E, an internal address of broker k\/1/ ],
    [ 'Metadata:11', 'a Metadata v11 that does not decode', 0,
      qr/the Metadata v11 answer from broker k\/1 \(cluster k\) names \Q$n1\E, an internal address of broker k\/1/ ],
    [ 'Metadata:12', 'a Metadata v12 naming node 9, which the map lacks', 1,
      qr/the Metadata v12 answer from broker k\/1 \(cluster k\) names internal-9\.kafka\.test:9092 \(node 9\), an address the map lacks/ ],
);

for my $c (@kcases) {
    my ($target, $what, $rewrites, $warn) = @$c;
    my ($v) = $target =~ /:(\d+)$/;
    subtest "kafka, leak_guard = log: $what" => sub {
        my $k = $K{log};
        plan skip_all => 'lookout did not start' unless $k->{lk}->started;
        my $from = length($k->{lk}->log // '');
        my $before = Lookout::leaks_metric($k->{admin}, 'k');
        my ($l) = kprobe($k->{boot}, $target);
        ok($l && !$l->{closed} && defined $l->{response_hex}, 'answered') or return diag(explain($l));
        if ($rewrites) {
            like($l->{response_hex}, qr/696e7465726e616c2d39/, 'it reaches the client, node 9 as the broker named it');
            unlike($l->{response_hex}, qr/$n1_wire/, '... node 1 rewritten');
        } else {
            like($l->{response_hex}, qr/$n1_wire/, 'it reaches the client unchanged (log only)');
        }
        ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"Metadata v$v"/ }, 5), 'its access-log line came');
        my $log = Lookout::log_since($k->{lk}, $from);
        like($log, qr/\[warn\] [^\n]*$warn[^\n]*logged only \(leak_guard = log\)/, 'the leak is logged with what and where');
        like($log, qr/"Metadata v$v" k\/1 - \d+ bytes to client, $rewrites rewrites, 1 leaks/,
             "the access log says $rewrites rewrites, 1 leak")
            or diag($log =~ /("Metadata v$v"[^\n]*)/ ? $1 : $log);
        is(Lookout::leaks_metric($k->{admin}, 'k'), $before + 1, 'lookout_leaks_total{cluster="k"} counts it');
    };
    subtest "kafka, leak_guard = block: $what" => sub {
        my $k = $K{block};
        plan skip_all => 'lookout did not start' unless $k->{lk}->started;
        my $from = length($k->{lk}->log // '');
        my $before = Lookout::leaks_metric($k->{admin}, 'k');
        my ($l) = kprobe($k->{boot}, $target);
        ok($l && $l->{closed} && !defined $l->{response_hex}, 'the connection closes; no byte of the answer came')
            or diag(explain($l));
        ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"Metadata v$v"/ }, 5), 'its access-log line came');
        my $log = Lookout::log_since($k->{lk}, $from);
        like($log, qr/\[warn\] [^\n]*$warn[^\n]*closing the connection \(leak_guard = block\)/,
             'the leak is logged with what and where');
        like($log, qr/"Metadata v$v" k\/1 - 0 bytes to client, $rewrites rewrites, 1 leaks[^\n]*, refused: connection closed/,
             "the access log says 0 bytes to client, $rewrites rewrites, 1 leak, refused");
        is(Lookout::leaks_metric($k->{admin}, 'k'), $before + 1, 'lookout_leaks_total{cluster="k"} counts it');
        my ($ok) = kprobe($k->{boot}, 'ApiVersions:3');
        ok($ok && defined $ok->{response_hex}, 'a new connection is served');
    };
}

# A Fetch v19 (a version no spec has yet, answered in v18's layout): records lookout cannot
# read, so it is never held (it could be up to max_frame_bytes); it streams, logged once per
# connection, and with block the connection closes before any of it moves.
subtest 'kafka: a Fetch answer of a version lookout cannot read' => sub {
    plan skip_all => 'lookout did not start' unless $K{log}{lk}->started && $K{block}{lk}->started;
    my ($d) = kprobe((split /:/, $tb->bootstrap)[1], 'Fetch:19');
    ok($d && defined $d->{response_hex}, 'the broker answers Fetch v19') or diag(explain($d));
    for my $mode (qw(log block)) {
        my $k = $K{$mode};
        my $from = length($k->{lk}->log // '');
        my @l = kprobe($k->{boot}, 'Fetch:19', 'Fetch:19');
        if ($mode eq 'log') {
            ok(@l == 2 && !grep({ !defined $_->{response_hex} } @l), 'log: both answered, as the broker sent them')
                or diag(explain(\@l));
        } else {
            ok(@l && $l[0]{closed} && !defined $l[0]{response_hex}, 'block: the connection closes; no byte of it came')
                or diag(explain(\@l));
        }
        ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /cannot be checked/ }, 5), "$mode: logged");
        my $log = Lookout::log_since($k->{lk}, $from);
        my @lines = $log =~ /(api 1 v19 answer from broker k\/1 carries records in a version lookout cannot read[^\n]*)/g;
        is(scalar @lines, 1, "$mode: one line for the connection") or diag($log);
        like($lines[0] // '', $mode eq 'log' ? qr/passed \(once per connection\)/ : qr/closing \(leak_guard = block\)/,
             "$mode: it says what was done");
    }
};

subtest 'kafka: answers that carry no internal address pass, even with block' => sub {
    plan skip_all => 'lookout did not start' unless $K{block}{lk}->started;
    my ($l) = kprobe($K{block}{boot}, 'ApiVersions:3', 'FindCoordinator:3');
    ok($l && defined $l->{response_hex}, 'ApiVersions and FindCoordinator answered') or diag(explain($l));
};

# ---- Pulsar -----------------------------------------------------------------------------

# b1 is mapped; b9 is a broker the map lacks (advertised only: lookout never dials it).
my $pt = PulsarBinBroker->start(
    dir => $dir, unknown_command => 'ignore',
    brokers => [ { name => 'b1', advertisedListeners => 'internal:pulsar://127.0.0.1:0' },
                 { name => 'b9', advertisedListeners => 'internal:pulsar://127.0.0.9:6650', listen => JSON::PP::false } ],
    topics => [ { name => 't-b9', owner => 'b9' }, { name => 't-b1', owner => 'b1' }, { name => 't-unk', owner => 'b1' } ]);
my $b1 = $pt->addr('b1');
my $b1_url = "pulsar://$b1";

my %P;
for my $mode (qw(log block)) {
    my ($ext, $admin) = (free_port(), free_port());
    my $lk = start_lookout(dir => $dir, name => "pulsar-$mode", conf => Lookout::guard_conf($admin, $mode, <<"EOF"));
[broker prod/b1]
advertisedListeners = internal:$b1_url,internal:http://127.0.0.1:9,external:pulsar://127.0.0.1:$ext
EOF
    ok($lk->started, "lookout (pulsar, leak_guard = $mode) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    $P{$mode} = { lk => $lk, ext => $ext, admin => $admin };
}

sub pprobe {
    my ($port, @steps) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", "127.0.0.1:$port", map { encode_json($_) } @steps ], timeout => 60);
    return Lookout::json_lines($r->{out});
}

my $unknown_hex = unpack('H*', "owner $b1_url");
my $lookup = sub {
    my ($topic) = @_;
    return { send => 'LOOKUP', fields => { topic => "persistent://public/default/$topic", authoritative => JSON::PP::true } };
};
my @pcases = (
    [ 'a LOOKUP_RESPONSE naming a broker the map lacks',
      [ $lookup->('t-b9') ],
      'LOOKUP', qr/the LOOKUP_RESPONSE command from broker prod\/b1 \(cluster prod\) names pulsar:\/\/127\.0\.0\.9:6650, an address the map lacks/,
      unpack('H*', 'pulsar://127.0.0.9:6650') ],
    [ 'a command of a type lookout does not know, carrying b1\'s internal URL',
      [ $lookup->('t-unk'), { wait => 2 } ],
      'command 99', qr/a command of type 99 from broker prod\/b1 \(cluster prod\) names \Q$b1_url\E, an internal address of broker prod\/b1/,
      unpack('H*', $b1_url) ],
    # Pulsar's own text (ServerCnx, ServiceNotReady): "Namespace bundle for topic (...) not
    # served by this instance:HOST:PORT" names the broker as it knows itself, internally.
    [ 'an ERROR whose message names b1\'s internal address (a PRODUCER for a topic b1 does not own)',
      [ { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b9', producer_id => 1 } } ],
      'ERROR', qr/the ERROR command from broker prod\/b1 \(cluster prod\) names \Q$b1\E, an internal address of broker prod\/b1/,
      unpack('H*', "instance:$b1") ],
);

for my $c (@pcases) {
    my ($what, $steps, $access, $warn, $bytes) = @$c;
    for my $mode (qw(log block)) {
        subtest "pulsar, leak_guard = $mode: $what" => sub {
            my $p = $P{$mode};
            my $from = length($p->{lk}->log // '');
            my $before = Lookout::leaks_metric($p->{admin}, 'prod');
            # The command of type 99 goes right after b1 has answered a lookup of t-unk, on
            # the connections b1 has then: lookout's, for this client.
            $pt->control({ cmd => 'arm', on => 'lookup', topic => 't-unk',
                           actions => [ { cmd => 'unknown', broker => 'b1', type => 99, hex => $unknown_hex } ] })
                if $access eq 'command 99';
            my @r = pprobe($p->{ext}, @$steps);
            my @got = map { @{ $_->{received} // [] } } @r;
            my $hex = join '', map { $_->{frame_hex} // '' } @got;
            if ($mode eq 'log') {
                like($hex, qr/$bytes/, 'it reaches the client as the broker sent it (log only)') or diag(explain(\@r));
            } else {
                unlike($hex, qr/$bytes/, 'no byte of it reaches the client');
                ok((grep { $_->{closed} } @r), 'the connection closes') or diag(explain(\@r));
            }
            ok(wait_until(sub { Lookout::log_since($p->{lk}, $from) =~ /pulsar "\Q$access\E"/ }, 5), 'its access-log line came');
            my $log = Lookout::log_since($p->{lk}, $from);
            my $outcome = $mode eq 'log' ? 'logged only \(leak_guard = log\)' : 'closing the connection \(leak_guard = block\)';
            like($log, qr/\[warn\] [^\n]*$warn[^\n]*$outcome/, 'the leak is logged with what and where');
            like($log, qr/pulsar "\Q$access\E" prod\/b1 - \d+ bytes to client, 0 rewrites, 1 leaks/,
                 'the access log says 0 rewrites, 1 leak');
            like($log, qr/pulsar "\Q$access\E" prod\/b1 - 0 bytes to client, [^\n]*, refused: connection closed/,
                 '... 0 bytes to client, refused') if $mode eq 'block';
            is(Lookout::leaks_metric($p->{admin}, 'prod'), $before + 1, 'lookout_leaks_total{cluster="prod"} counts it');
        };
    }
}

subtest 'pulsar: SEND and MESSAGE payloads are never read, even with block' => sub {
    my @r = pprobe($P{block}{ext},
                   { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b1', producer_id => 1 } },
                   { send => 'SEND', fields => { producer_id => 1, sequence_id => 0 }, text => "see $b1_url" });
    my @types = map { $_->{type} // '' } map { @{ $_->{received} // [] } } @r;
    ok((grep { $_ eq 'SEND_RECEIPT' } @types), 'a message naming b1\'s internal URL is produced through block')
        or diag(explain(\@r));
    ok(!(grep { $_->{closed} } @r), 'the connection stays open');
};

done_testing();
