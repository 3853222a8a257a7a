#!/usr/bin/perl
# 128-http-brokerid-leak.t: the leak guard's HTTP scan over a mixed map (issue 19, review).
# One cluster, b1 mapped with its internal http address (so lookout serves HTTP for the
# cluster) and b3 with pulsar:// addresses only. A Pulsar broker names every broker by its
# brokerId, advertisedAddress:webServicePort, in /admin/v2/brokers/CLUSTER (and in 5.0
# LookupData, and "not served by this instance:HOST:PORT"), and b3's web port is in no map.
# The fake brokers list what the test sets: b3's brokerId (127.0.0.3:8080) must be a
# 502 with leak_guard = block, and pass, logged and counted, with log. A list naming
# lookout's own address on b3's host and a longer host (127.0.0.30) is no leak: it passes
# byte for byte, in both modes. Client: curl.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use Test::More;

use Lookout;
use PulsarBroker;

need_tools('curl');

my $dir = tmp_dir();
my ($p1) = free_ports(1);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p1"], cluster => 'prod');

my %L;
for my $mode (qw(log block)) {
    my ($ext1, $ext3, $admin) = free_ports(3);
    mkdir "$dir/$mode";
    my $lk = start_lookout(dir => "$dir/$mode", conf => Lookout::guard_conf($admin, $mode, <<"EOF"));
[broker prod/b1]
advertisedListeners = @{[ $c->internal_listeners(1) ]},external:http://127.0.0.1:$ext1

[broker prod/b3]
advertisedListeners = internal:pulsar://127.0.0.3:6650,external:pulsar://127.0.0.3:$ext3
EOF
    ok($lk->started, "lookout (mixed map, leak_guard = $mode) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    $L{$mode} = { lk => $lk, ext1 => $ext1, ext3 => $ext3, admin => $admin };
}

my $PATH = '/admin/v2/brokers/prod';
for my $chunked (0, 1) {
    $c->set(chunked => $chunked, brokers_list => ['127.0.0.3:8080']);
    my $direct = curl("http://127.0.0.1:$p1$PATH");
    is($direct->{body}, '["127.0.0.3:8080"]', "chunked = $chunked: the broker lists b3 by its brokerId");
    for my $mode (qw(log block)) {
        subtest "leak_guard = $mode, chunked = $chunked: a brokers list naming b3 (127.0.0.3:8080)" => sub {
            my $p = $L{$mode};
            my $from = length($p->{lk}->log // '');
            my $before = Lookout::leaks_metric($p->{admin}, 'prod');
            my $r = curl("http://127.0.0.1:$p->{ext1}$PATH");
            if ($mode eq 'log') {
                is($r->{status}, 200, 'status 200');
                is($r->{body}, $direct->{body}, 'the body as the broker sent it (log only)');
            } else {
                is($r->{status}, 502, 'status 502');
                my $j = eval { decode_json($r->{body}) };
                $j = {} unless ref $j eq 'HASH';
                is($j->{reason}, 'response would leak an internal broker address', 'with the reason');
                unlike($r->{body}, qr/127\.0\.0\.3:8080/, 'and no byte of the brokerId');
            }
            ok(wait_until(sub { Lookout::log_since($p->{lk}, $from) =~ /names 127\.0\.0\.3:8080/ }, 5),
               'the leak is logged') or diag(Lookout::log_since($p->{lk}, $from));
            my $outcome = $mode eq 'log' ? 'logged only \(leak_guard = log\)' : 'answered 502 \(leak_guard = block\)';
            like(Lookout::log_since($p->{lk}, $from),
                 qr/\[warn\] [^\n]*the body names 127\.0\.0\.3:8080, an internal address of broker prod\/b3, in the response to GET \Q$PATH\E; $outcome/,
                 'with what, whose and where');
            is(Lookout::leaks_metric($p->{admin}, 'prod'), $before + 1, 'lookout_leaks_total{cluster="prod"} counts it');
        };
    }
}

for my $mode (qw(log block)) {
    my $p = $L{$mode};
    subtest "leak_guard = $mode: lookout's own address on b3's host, and a longer host, pass" => sub {
        $c->set(chunked => 0, brokers_list => ["127.0.0.3:$p->{ext3}", '127.0.0.30:8080', 'x127.0.0.3:8080']);
        my $direct = curl("http://127.0.0.1:$p1$PATH");
        my $before = Lookout::leaks_metric($p->{admin}, 'prod');
        my $r = curl("http://127.0.0.1:$p->{ext1}$PATH");
        is($r->{status}, 200, 'status 200');
        is($r->{body}, $direct->{body}, 'byte for byte');
        is(Lookout::leaks_metric($p->{admin}, 'prod'), $before, 'no leak counted');
    };
}

$c->set(brokers_list => undef);
done_testing();
