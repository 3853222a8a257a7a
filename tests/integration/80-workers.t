#!/usr/bin/perl
# 80-workers.t: `workers = N` (issue 2 item 7): N threads, each with its own event loop,
# all accepting on the same addresses (SO_REUSEPORT). A burst of concurrent clients is
# spread by the kernel over the workers' sockets: every request must succeed (a worker
# that did not accept would leave its share hanging), and more than one thread does work.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

plan skip_all => 'needs /proc' unless -d "/proc/$$/task";

my $certs = test_certs();
my $dir = tmp_dir();
my @p = free_ports(3);
my @q = free_ports(3);
my ($w, $ws) = free_ports(2);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ]);
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { map { ($_ => ["http://127.0.0.1:$q[$_ - 1]"]) } 1 .. 3 }));
[lookout]
workers = 2
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$w

EOF
ok($lk->started, 'lookout with workers = 2 started') or BAIL_OUT('lookout did not start');
my $pid = $lk->pid;

# How much each thread of PID has run: its CPU ticks (utime + stime, 10 ms each) plus its
# voluntary context switches. A worker that served a few requests may spend under one
# tick, but it woke from epoll_wait to do it; an idle worker sleeps there untouched.
sub thread_ticks {
    my %t;
    for my $task (glob "/proc/$pid/task/*") {
        my $st = slurp("$task/stat") // next;
        $st =~ s/^.*\) //s;    # the comm field may hold spaces
        my @f = split ' ', $st;
        my $sw = (slurp("$task/status") // '') =~ /^voluntary_ctxt_switches:\s+(\d+)/m ? $1 : 0;
        $t{ $task =~ s{.*/}{}r } = $f[11] + $f[12] + $sw;    # fields 14 and 15 of stat
    }
    return \%t;
}

# The sockets open before the worker threads start (slowly under valgrind): wait for them.
sub ntasks { return scalar(() = glob("/proc/$_[0]/task/*")) }
wait_until(sub { ntasks($pid) >= 2 }, 10);
cmp_ok(ntasks($pid), '>=', 2, 'at least two threads');

subtest 'a burst of concurrent clients: all served' => sub {
    my $before = thread_ticks();
    my $n = 4 * 1024 * 1024;
    my $sha = PulsarBroker::test_bytes_sha256($n);
    my @jobs;
    for my $i (1 .. 36) {
        my $u = $i % 4 == 0 ? "http://127.0.0.1:$w" : "http://127.0.0.1:$q[$i % 3]";
        my $path = $i % 3 == 0 ? "/test/bytes?n=$n" : "/test/slow?ms=300";
        push @jobs, [ $i, $path, curl_start({ timeout => 30 }, "$u$path") ];
    }
    my ($ok, @bad) = (0);
    for my $j (@jobs) {
        my ($i, $path, $h) = @$j;
        my $r = curl_wait($h);
        my $good = $r->{status} == 200
            && ($path =~ /bytes/ ? sha256_hex($r->{body}) eq $sha : eval { decode_json($r->{body})->{slept_ms} } == 300);
        $good ? $ok++ : push @bad, "#$i $path: status $r->{status} exit $r->{exit} $r->{err}";
    }
    is($ok, scalar @jobs, 'every concurrent request succeeded, with the right body') or diag(join "\n", @bad);
    my $after = thread_ticks();
    my @busy = grep { ($after->{$_} // 0) - ($before->{$_} // 0) > 0 } keys %$after;
    cmp_ok(scalar @busy, '>=', 2, 'more than one thread did work') or diag(explain({ before => $before, after => $after }));
};

subtest 'many short connections, one after another' => sub {
    # Each new connection may land on either worker: none may be lost.
    my @st;
    for my $i (1 .. 30) {
        my ($raw) = http_raw('127.0.0.1', $q[0], "GET /test/status?code=201 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             timeout => 5);
        push @st, $raw =~ m{^HTTP/1\.1 (\d{3})} ? $1 : 'none';
    }
    is(scalar(grep { $_ == 201 } grep { /^\d+$/ } @st), 30, 'thirty connections, thirty answers') or diag("@st");
};

subtest 'workers = auto' => sub {
    my $port = free_port();
    my $auto = start_lookout(dir => $dir, name => 'auto', conf => <<"EOF" . "[broker prod/b1]\nadvertisedListeners = " . $c->internal_listeners(1) . ",external:http://127.0.0.1:$port\n");
[lookout]
workers = auto

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

EOF
    ok($auto->started, 'started');
    my $cores = qx{nproc 2>/dev/null} =~ /(\d+)/ ? $1 : 1;
    wait_until(sub { ntasks($auto->pid) >= $cores }, 10);
    cmp_ok(ntasks($auto->pid), '>=', $cores, "at least one thread per core ($cores)");
    is(curl("http://127.0.0.1:$port/test/status?code=201")->{status}, 201, 'serves');
    $auto->stop;
};

ok($lk->alive, 'lookout still running');
is($lk->stop, 0, 'exits 0 on SIGTERM');
$c->stop;
done_testing();
