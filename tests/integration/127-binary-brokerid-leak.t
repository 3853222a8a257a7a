#!/usr/bin/perl
# 127-binary-brokerid-leak.t: the leak guard over a binary-only map (issue 19, review). A
# Pulsar broker names itself in its exceptions by its brokerId, advertisedAddress:
# webServicePort ("Namespace bundle for topic (...) not served by this instance:HOST:8080",
# BrokerService.checkTopicNsOwnership), and a map of pulsar:// addresses only has no http
# address for the guard to know that port by. The test broker answers a PRODUCER for a
# topic it does not own with that ERROR, naming itself by such a brokerId; through a lookout
# with leak_guard = log it arrives and is counted, with block the connection closes before
# any byte of it. A lookup whose rewritten URL is lookout's own address on the broker's
# internal host (127.0.0.1 for both here) is no leak, even with block.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;

use Lookout;
use KafkaTestBroker;
use PulsarBinBroker;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();

# b1 is mapped by its binary address only; its brokerId names a web port the map lacks.
# b9 owns t-b9 and is only advertised (lookout never dials it).
my $web = free_port();
my $pt = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ { name => 'b1', advertisedListeners => 'internal:pulsar://127.0.0.1:0', brokerId => "127.0.0.1:$web" },
                 { name => 'b9', advertisedListeners => 'internal:pulsar://127.0.0.9:6650', listen => JSON::PP::false } ],
    topics => [ { name => 't-b9', owner => 'b9' }, { name => 't-b1', owner => 'b1' } ]);
my $b1 = $pt->addr('b1');

my %P;
for my $mode (qw(log block)) {
    my ($ext, $admin) = (free_port(), free_port());
    my $lk = start_lookout(dir => $dir, name => "pulsar-$mode", conf => Lookout::guard_conf($admin, $mode, <<"EOF"));
[broker prod/b1]
advertisedListeners = internal:pulsar://$b1,external:pulsar://127.0.0.1:$ext
EOF
    ok($lk->started, "lookout (binary-only map, leak_guard = $mode) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    $P{$mode} = { lk => $lk, ext => $ext, admin => $admin };
}

sub pprobe {
    my ($port, @steps) = @_;
    return PulsarBinBroker::probe("127.0.0.1:$port", [], @steps);
}

my $id_hex = unpack('H*', "instance:127.0.0.1:$web");
for my $mode (qw(log block)) {
    subtest "leak_guard = $mode: an ERROR naming b1 by its brokerId (127.0.0.1:$web)" => sub {
        my $p = $P{$mode};
        my $from = length($p->{lk}->log // '');
        my $before = Lookout::leaks_metric($p->{admin}, 'prod');
        my @r = pprobe($p->{ext}, { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b9', producer_id => 1 } });
        my @got = map { @{ $_->{received} // [] } } @r;
        my $hex = join '', map { $_->{frame_hex} // '' } @got;
        if ($mode eq 'log') {
            like($hex, qr/$id_hex/, 'it reaches the client as the broker sent it (log only)') or diag(explain(\@r));
        } else {
            unlike($hex, qr/$id_hex/, 'no byte of it reaches the client') or diag(explain(\@r));
            ok((grep { $_->{closed} } @r), 'the connection closes') or diag(explain(\@r));
        }
        ok(wait_until(sub { Lookout::log_since($p->{lk}, $from) =~ /pulsar "ERROR"/ }, 5), 'its access-log line came');
        my $log = Lookout::log_since($p->{lk}, $from);
        my $outcome = $mode eq 'log' ? 'logged only \(leak_guard = log\)' : 'closing the connection \(leak_guard = block\)';
        like($log, qr/\[warn\] [^\n]*the ERROR command from broker prod\/b1 \(cluster prod\) names 127\.0\.0\.1:$web, [^\n]*$outcome/,
             'the leak is logged with what and where') or diag($log);
        is(Lookout::leaks_metric($p->{admin}, 'prod'), $before + 1, 'lookout_leaks_total{cluster="prod"} counts it');
    };
}

subtest 'block: a lookup rewritten to lookout\'s address on b1\'s internal host is no leak' => sub {
    my $p = $P{block};
    my $before = Lookout::leaks_metric($p->{admin}, 'prod');
    my @r = pprobe($p->{ext}, { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b1', authoritative => JSON::PP::true } });
    my @got = map { @{ $_->{received} // [] } } @r;
    my $hex = join '', map { $_->{frame_hex} // '' } @got;
    my $url_hex = unpack('H*', "pulsar://127.0.0.1:$p->{ext}");
    like($hex, qr/$url_hex/, 'the answer names lookout\'s address') or diag(explain(\@r));
    ok(!(grep { $_->{closed} } @r), 'the connection stays open') or diag(explain(\@r));
    is(Lookout::leaks_metric($p->{admin}, 'prod'), $before, 'no leak counted');
};

done_testing();
