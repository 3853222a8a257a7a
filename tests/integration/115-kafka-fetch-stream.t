#!/usr/bin/perl
# 115-kafka-fetch-stream.t: Fetch v16+ answers stream through lookout (issue 18, defect 4).
# Twenty consumers each fetch about 50 MiB at once (v16, v17 and v18 in turn) from the
# spec-encoded test broker through lookout: every record arrives intact (SHA-256 of each
# answer's records against the broker's own), and lookout's resident set stays under its
# held-bytes budget plus a fixed base, where holding each answer whole (as before) costs
# about twice the sum of the answers in flight. The tail of a Fetch answer, where its
# NodeEndpoints are, keeps the broker's length: rewritten endpoints that fit are padded with
# an unknown tag (16383), ones that do not are dropped, and no internal address ever reaches
# the client. Frames held whole (Metadata here) larger than the whole budget still go through
# with many at once, the excess waiting for its turn (lookout_held_pauses_total).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use KafkaTestBroker;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $top = repo_top();
my $LOAD = "$top/tests/integration/bin/kafka-fetch-load";
my $PROBE = "$top/tests/integration/bin/kafka-probe";
my $BUDGET_MB = 8;
my $bin = Lookout::lookout_bin();
my $SANITIZED = `grep -c __asan_init '$bin' 2>/dev/null` + 0 > 0;
my $CONSUMERS = 20;

# Node 2 advertises a host shorter than lookout's address for it (its endpoints cannot fit
# in the broker's bytes), nodes 1 and 3 longer ones (they can).
my @nodes = ({ id => 1, host => 'internal-1.kafka.test', port => 0, bind => '127.0.0.1:0' },
             { id => 2, host => 'n2', port => 0, bind => '127.0.0.1:0' },
             { id => 3, host => 'internal-3.kafka.test', port => 0, bind => '127.0.0.1:0' });
my $tb = KafkaTestBroker->start(dir => $dir, nodes => \@nodes, timeout => 60,
                                topics => [ { name => 'big', partitions => 3 }, { name => 'wide', partitions => 6000 } ],
                                bulk => { topic => 'big', bytes => 50 * 1024 * 1024 },
                                # Metadata answers of 'wide' (~240 KiB) to client id 'trickle'
                                # come in 16 KiB pieces 20 ms apart: each is held for a while, so
                                # that the last subtest's clients overlap in lookout however the
                                # machine schedules them (sent whole, each could be read in full
                                # before the next began, and none would wait). Other answers go
                                # whole.
                                trickle => { api => 3, client_id => 'trickle', piece => 16384, pause => 0.02 });
my $bulk = $tb->{ready}{bulk};
ok($bulk && $bulk->{bytes} > 49 * 1024 * 1024, "the broker's partition 0 holds $bulk->{bytes} bytes of records");

my @ext = map { free_port() } 1 .. 3;
my $admin = free_port();
my $lk = start_lookout(dir => $dir, conf => KafkaMock::lookout_conf(
    lookout => "admin = 127.0.0.1:$admin\nmax_held_bytes = ${BUDGET_MB}m\n",
    nodes => [ map { [ $_, $tb->node($_)->{listen}, $ext[$_ - 1] ] } 1 .. 3 ]));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
my $tid = $tb->topic('big')->{id};

sub metric {
    my ($name) = @_;
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return $r->{body} =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}

# Runs kafka-fetch-load (ARGS) in the background, sampling lookout's RSS every 50 ms until it
# is done: (its answers, peak RSS in KiB, exit code).
sub load_with_rss {
    my (@args) = @_;
    my $out = "$dir/load.out";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', $out or POSIX::_exit(126);
        open STDERR, '>', "$dir/load.err" or POSIX::_exit(126);
        { no warnings 'exec'; exec 'nice', 'timeout', '-k', '2', '90', $PY, $LOAD, @args; }
        POSIX::_exit(127);
    }
    my $peak = 0;
    while (waitpid($pid, WNOHANG) == 0) {
        my $r = rss_kb($lk->pid) // 0;
        $peak = $r if $r > $peak;
        sleep 0.05;
    }
    my $code = $? >> 8;
    return ([ map { decode_json($_) } grep { /^\{/ } split /\n/, slurp($out) // '' ], $peak, $code);
}

subtest "$CONSUMERS consumers fetch ~50 MiB each at once: intact, under the budget" => sub {
    my $base = rss_kb($lk->pid);
    my $t0 = time;
    my ($ans, $peak, $code) = load_with_rss("127.0.0.1:$ext[0]", '--topic-id', $tid,
                                            '--consumers', $CONSUMERS, '--versions', '16,17,18');
    my $secs = time - $t0;
    is($code, 0, 'every consumer got a whole answer that decodes') or diag(slurp("$dir/load.err"));
    is(scalar @$ans, $CONSUMERS, "$CONSUMERS answers");
    my $intact = grep { !$_->{failed} && $_->{error} == 0 && $_->{records_bytes} == $bulk->{bytes}
                        && $_->{records_sha256} eq $bulk->{sha256} } @$ans;
    is($intact, $CONSUMERS, 'every answer carries every record, byte for byte (SHA-256)')
        or diag(explain([ grep { $_->{failed} || $_->{records_sha256} ne $bulk->{sha256} } @$ans ]));
    my %v = map { ($_->{api_version} => 1) } @$ans;
    is(join(',', sort keys %v), '16,17,18', 'v16, v17 and v18');
    # lookout's own base, then its budget; the answers in flight are 20 x 50 MiB
    my $limit = $base + ($BUDGET_MB + 32) * 1024;
    my $mb = $CONSUMERS * $bulk->{bytes} / 1048576;
    SKIP: {
        # ASan's quarantine keeps freed memory: figures from a sanitizer build mean nothing here.
        skip 'sanitizer build: RSS not measured', 1 if $SANITIZED;
        ok($peak < $limit, sprintf('peak RSS %.1f MiB < base %.1f MiB + budget %d MiB + 32 MiB (%.0f MiB in flight, %.1f s)',
                                   $peak / 1024, $base / 1024, $BUDGET_MB, $mb, $secs));
    }
    diag(sprintf('peak RSS %.1f MiB (base %.1f), %d x %.1f MiB in %.1f s', $peak / 1024, $base / 1024,
                 $CONSUMERS, $bulk->{bytes} / 1048576, $secs));
    is(metric('lookout_held_bytes'), 0, 'nothing held once they are done');
};

# The same Fetch, straight from the broker and through lookout, for a partition another node
# leads: NOT_LEADER_OR_FOLLOWER with CurrentLeader and NodeEndpoints.
sub fetch_one {
    my ($addr, $part, $v) = @_;
    my $r = KafkaMock::run([ $PY, $LOAD, $addr, '--topic-id', $tid, '--partition', $part, '--versions', $v ], timeout => 30);
    my ($j) = map { decode_json($_) } grep { /^\{/ } split /\n/, $r->{out};
    return $j // { failed => $r->{err} };
}

for my $v (16 .. 18) {
    subtest "Fetch v$v NodeEndpoints: rewritten when they fit, dropped when not, same size" => sub {
        # partition 2: node 3 leads, internal-3.kafka.test -> 127.0.0.1 (shorter: fits)
        my $d = fetch_one($tb->node(1)->{listen}, 2, $v);
        my $l = fetch_one("127.0.0.1:$ext[0]", 2, $v);
        is($d->{error}, 6, 'direct: NOT_LEADER_OR_FOLLOWER') or diag(explain($d));
        is_deeply($d->{node_endpoints}, [ { id => 3, host => 'internal-3.kafka.test', port => $tb->node(3)->{port}, rack => undef } ],
                  'direct: the broker names its internal host');
        is($l->{size}, $d->{size}, 'through lookout: the same frame size as the broker\'s');
        is_deeply($l->{node_endpoints}, [ { id => 3, host => '127.0.0.1', port => $ext[2], rack => undef } ],
                  'through lookout: node 3 at its address on lookout');
        is_deeply($l->{tags}, [ 0, 1000, 16383 ], '... the broker\'s other tag kept, padding (16383) last');
        # partition 1: node 2 leads, n2 -> 127.0.0.1 (longer: cannot fit)
        $d = fetch_one($tb->node(1)->{listen}, 1, $v);
        $l = fetch_one("127.0.0.1:$ext[0]", 1, $v);
        is($d->{node_endpoints}[0]{host}, 'n2', 'direct: node 2 as n2');
        is($l->{size}, $d->{size}, 'through lookout: the same frame size');
        ok(!$l->{node_endpoints} && !$l->{failed}, 'through lookout: NodeEndpoints dropped (the client asks Metadata)')
            or diag(explain($l));
        ok(!grep({ $_ == 0 } @{ $l->{tags} // [] }) && grep({ $_ == 16383 } @{ $l->{tags} // [] }),
           '... the room padded with tag 16383');
        is($l->{error}, 6, '... the partition error as the broker sent it');
    };
}

# A second lookout whose budget (64 KiB) is smaller than any one of these answers.
my @ext2 = map { free_port() } 1 .. 3;
my $admin2 = free_port();
my $lk2 = start_lookout(dir => $dir, name => 'lookout-small', conf => KafkaMock::lookout_conf(
    lookout => "admin = 127.0.0.1:$admin2\nmax_held_bytes = 64k\n",
    nodes => [ map { [ $_, $tb->node($_)->{listen}, $ext2[$_ - 1] ] } 1 .. 3 ]));
ok($lk2->started, 'a lookout with max_held_bytes = 64k started') or BAIL_OUT('lookout did not start');
$admin = $admin2;

subtest 'held frames larger than the budget, many at once: all answered, the excess waits' => sub {
    my $pauses = metric('lookout_held_pauses_total') // 0;
    my @pids;
    for my $i (1 .. 12) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            open STDOUT, '>', "$dir/meta-$i.out" or POSIX::_exit(126);
            open STDERR, '>', "$dir/meta-$i.err" or POSIX::_exit(126);
            { no warnings 'exec'; exec 'timeout', '-k', '2', '60', $PY, $PROBE, '--client-id', 'trickle', '--topic', 'wide', "127.0.0.1:$ext2[0]", 'Metadata:12', 'Metadata:12', 'Metadata:12'; }
            POSIX::_exit(127);
        }
        push @pids, $pid;
    }
    my $answered = 0;
    my ($size, $leak) = (0, 0);
    for my $i (1 .. 12) {
        waitpid($pids[$i - 1], 0);
        for my $j (map { decode_json($_) } grep { /^\{/ } split /\n/, slurp("$dir/meta-$i.out") // '') {
            next unless defined $j->{response_hex};
            $answered++;
            $size = length($j->{response_hex}) / 2;
            $leak++ if $j->{response_hex} =~ /\Q${\ unpack('H*', 'internal-')}\E/;
        }
    }
    is($answered, 36, '36 Metadata answers of the 6000-partition topic, 12 clients at once');
    ok($size > 64 * 1024, sprintf('each %.0f KiB, over the 64 KiB budget', $size / 1024));
    is($leak, 0, 'every one rewritten');
    is(metric('lookout_held_bytes'), 0, 'nothing held after');
    my $waited = (metric('lookout_held_pauses_total') // 0) - $pauses;
    cmp_ok($waited, '>', 0, "some waited for the budget (lookout_held_pauses_total: $waited pauses)");
};

for my $l ($lk, $lk2) {
    $l->stop;
    is($l->exit_code, 0, 'lookout exited cleanly');
}
done_testing();
