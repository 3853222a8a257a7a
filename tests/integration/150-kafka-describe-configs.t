#!/usr/bin/perl
# 150-kafka-describe-configs.t: the leak guard reads DescribeConfigs answers. A broker's
# configs name its listeners: advertised.listeners holds the internal address lookout
# reached it on, and here controller.quorum.bootstrap.servers is that address alone. Before,
# the answer was streamed unread, so no leak_guard mode saw it, block included. kafkajs (an
# admin client nobody here wrote, asking v2) and hand-built requests (v4, flexible) through
# a lookout with leak_guard = log and one with block: what the client gets, the warning,
# lookout_leaks_total and the access log. A topic's configs name no address and pass.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';

my $tb = KafkaTestBroker->start(
    dir => $dir, listen_nodes => JSON::PP::true,
    nodes => [ { id => 1, host => '127.0.0.1', port => 0 } ],
    topics => [ { name => 'lk-configs', partitions => 1 } ],
    broker_configs => { 'controller.quorum.bootstrap.servers' => '{self}' });
my $n1 = $tb->node(1)->{listen};
my $n1_hex = unpack('H*', $n1);

my %K = %{ KafkaMock::guard_lookouts(dir => $dir, name => 'configs', nodes => [ [ 1, $n1 ] ]) };

sub kprobe {
    my ($port, @args) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/kafka-probe", '--topic', 'lk-configs', '--partitions', 1,
                             "127.0.0.1:$port", @args ], timeout => 60);
    return Lookout::json_lines($r->{out});
}

sub kafkajs_configs {
    my ($port) = @_;
    my $r = KafkaMock::run([ 'node', "$BIN/kafkajs-check", "127.0.0.1:$port", '--configs', 1, '--timeout', 10 ],
                           timeout => 60);
    my ($j) = Lookout::json_lines($r->{out});
    return ($j && $j->{configs}, $r);
}

# What the broker says directly: the case is what it claims to be.
my ($direct) = kprobe((split /:/, $n1)[1], 'DescribeConfigs:4');
like($direct->{response_hex} // '', qr/$n1_hex/, "the broker's DescribeConfigs v4 answer names $n1");
like($direct->{response_hex} // '', qr/\Q@{[unpack('H*', "controller.quorum.bootstrap.servers")]}\E..\Q$n1_hex\E/,
     '... alone as one config\'s value, its length right before it');

my $warn = qr/the DescribeConfigs v(\d) answer from broker k\/1 \(cluster k\) names [^\n]*\Q$n1\E, an internal address of broker k\/1/;

subtest 'leak_guard = log: kafkajs describeConfigs of broker 1' => sub {
    plan skip_all => KafkaMock::kafkajs_missing() if KafkaMock::kafkajs_missing();
    my $k = $K{log};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my $from = length($k->{lk}->log // '');
    my $before = Lookout::leaks_metric($k->{admin}, 'k');
    my ($c, $r) = kafkajs_configs($k->{boot});
    ok($c && $c->{resources}, 'kafkajs got the configs') or return diag(explain($c) . " $r->{err}");
    is($c->{resources}[0]{entries}{'advertised.listeners'}, "PLAINTEXT://$n1", '... as the broker gave them (log only)');
    is_deeply($c->{dialed}, [ sort("127.0.0.1:$k->{boot}", "127.0.0.1:$k->{ext}{1}") ], '... dialing only lookout');
    ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"DescribeConfigs v2"/ }, 5), 'its access-log line came');
    my $log = Lookout::log_since($k->{lk}, $from);
    like($log, qr/\[warn\] [^\n]*$warn[^\n]*logged only \(leak_guard = log\)/, 'the leak is logged with what and where');
    like($log, qr/"DescribeConfigs v2" k\/1 - \d+ bytes to client, 0 rewrites, [1-9]\d* leaks/,
         'the access log counts it') or diag($log);
    cmp_ok(Lookout::leaks_metric($k->{admin}, 'k'), '>', $before, 'lookout_leaks_total{cluster="k"} counts it');
};

subtest 'leak_guard = log: DescribeConfigs v4 (flexible)' => sub {
    my $k = $K{log};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my $from = length($k->{lk}->log // '');
    my ($l) = kprobe($k->{boot}, 'DescribeConfigs:4');
    ok($l && !$l->{closed} && defined $l->{response_hex}, 'answered') or diag(explain($l));
    like($l->{response_hex} // '', qr/$n1_hex/, '... unchanged (log only)');
    ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"DescribeConfigs v4"/ }, 5), 'its access-log line came');
    like(Lookout::log_since($k->{lk}, $from), qr/\[warn\] [^\n]*$warn/, 'the leak is logged');
};

subtest 'leak_guard = block: no byte of the answer goes' => sub {
    my $k = $K{block};
    plan skip_all => 'lookout did not start' unless $k->{lk}->started;
    my $from = length($k->{lk}->log // '');
    my $before = Lookout::leaks_metric($k->{admin}, 'k');
    my ($l) = kprobe($k->{boot}, 'DescribeConfigs:4');
    ok($l && $l->{closed} && !defined $l->{response_hex}, 'v4: the connection closes; no byte of the answer came')
        or diag(explain($l));
    ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"DescribeConfigs v4"/ }, 5), 'its access-log line came');
    my $log = Lookout::log_since($k->{lk}, $from);
    like($log, qr/\[warn\] [^\n]*$warn[^\n]*closing the connection \(leak_guard = block\)/,
         'the leak is logged with what and where');
    like($log, qr/"DescribeConfigs v4" k\/1 - 0 bytes to client, 0 rewrites, [1-9]\d* leaks[^\n]*, refused: connection closed/,
         'the access log says 0 bytes to client, refused') or diag($log);
    cmp_ok(Lookout::leaks_metric($k->{admin}, 'k'), '>', $before, 'lookout_leaks_total{cluster="k"} counts it');
    SKIP: {
        skip KafkaMock::kafkajs_missing(), 3 if KafkaMock::kafkajs_missing();
        my ($c) = kafkajs_configs($k->{boot});
        ok($c && $c->{error} && !$c->{resources}, "kafkajs gets no configs: $c->{error}") or diag(explain($c));
        ok(wait_until(sub { Lookout::log_since($k->{lk}, $from) =~ /"DescribeConfigs v2"/ }, 5), '... its access-log line came');
        like(Lookout::log_since($k->{lk}, $from), qr/"DescribeConfigs v2" k\/1 - 0 bytes to client[^\n]*refused: connection closed/,
             '... saying 0 bytes went to it');
    }
    my ($t) = kprobe($k->{boot}, '--resource', 'topic:lk-configs', 'DescribeConfigs:4');
    ok($t && !$t->{closed} && ($t->{response_hex} // '') =~ /^00000001/ &&
       $t->{response_hex} =~ /\Q@{[unpack('H*', 'cleanup.policy')]}\E/,
       "a topic's configs, naming no address, are answered") or diag(explain($t));
};

done_testing();
