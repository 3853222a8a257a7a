#!/usr/bin/perl
# 152-host-alone-leaks.t: a broker named by its host alone, outside host:port. The functions
# worker that runs in a Pulsar broker (functionsWorkerEnabled) answers
# /admin/v2/worker/cluster (pulsar-admin functions-worker get-cluster) with WorkerInfo
# {workerId, workerHostname, port}: its workerHostname is the broker's advertisedAddress and
# its port the web port, two JSON fields apart. lookout read only host:port and URLs, so the
# hostname went out whatever leak_guard said. Now a JSON string ending with an internal host
# is a leak: log counts it, rewrite puts the selected listener's host, block answers 502. The
# workerId, "c-CLUSTER-fw-HOST-PORT", is not read (proxy/lk_guard.c says why). curl through
# one lookout per mode in front of the same fake brokers (lib/E2E.pm).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;
use E2E;

my $dir = tmp_dir();
my $e = E2E->new(dir => $dir);
my $L = $e->L;

my %lk = %{ $e->guard_lookouts(qw(log rewrite block)) };

my %host = map { my ($h) = $L->{internal}{$_}{http} =~ m{//([^/:]+)}; ($_ => $h) } 1 .. 3;
my %ext_host = map { my $m = $_; ($m => { map { my ($h) = $lk{$m}{e2e_ext}{$_}{http} =~ m{//([^/:]+)}; ($_ => $h) } 1 .. 3 }) }
               keys %lk;

sub workers {
    my ($base) = @_;
    my $r = curl("$base/admin/v2/worker/cluster");
    return ($r, eval { decode_json($r->{body}) });
}

my ($direct, $dw) = workers($L->{internal}{1}{http});
is($direct->{status}, 200, 'the broker lists its cluster\'s functions workers (control)');
is_deeply([ map { $_->{workerHostname} } @{ $dw // [] } ], [ @host{1 .. 3} ], '... each named by its broker\'s internal host')
    or diag($direct->{body});
my $h1 = $host{1};
like($dw->[0]{workerId} // '', qr/-fw-\Q$h1\E-\d+$/, '... and its id holding it');

subtest 'leak_guard = log: counted and logged, passed as it came' => sub {
    my $from = length($lk{log}->log // '');
    my ($r) = workers($lk{log}{e2e_ext}{1}{http});
    is($r->{status}, 200, 'answered 200');
    is($r->{body}, $direct->{body}, '... the body as the broker sent it');
    ok(wait_until(sub { Lookout::log_since($lk{log}, $from) =~ /\[warn\][^\n]*the body names \S*\Q$h1\E\S*, an internal address of broker prod\/b1[^\n]*logged only \(leak_guard = log\)/ }, 5),
       'the leak is logged') or diag(Lookout::log_since($lk{log}, $from));
    ok(wait_until(sub { Lookout::log_since($lk{log}, $from) =~ m{"GET /admin/v2/worker/cluster" prod/b1 200 [^\n]*, 0 rewrites, 3 leaks,} }, 5),
       'the access log counts the three hostnames') or diag(Lookout::log_since($lk{log}, $from));
};

subtest 'leak_guard = rewrite: the hostnames become the selected listener\'s' => sub {
    my ($r, $w) = workers($lk{rewrite}{e2e_ext}{1}{http});
    is($r->{status}, 200, 'answered 200');
    is_deeply([ map { $_->{workerHostname} } @{ $w // [] } ], [ @{ $ext_host{rewrite} }{1 .. 3} ],
              '... each workerHostname the broker\'s external host') or diag($r->{body});
    is_deeply([ map { $_->{workerId} } @{ $w // [] } ], [ map { $_->{workerId} } @$dw ],
              '... the ids as they were (not read)');
};

subtest 'leak_guard = block: 502' => sub {
    my ($r) = workers($lk{block}{e2e_ext}{1}{http});
    is($r->{status}, 502, 'answered 502');
    for my $n (1 .. 3) {
        my $h = $host{$n};
        unlike($r->{body}, qr/\Q$h\E/, "... naming no internal host (b$n)");
    }
    my ($l) = curl("$lk{block}{e2e_ext}{1}{http}/admin/v2/worker/cluster/leader");
    is($l->{status}, 502, 'the leader alone: 502 too');
};

done_testing;
