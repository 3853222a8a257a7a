#!/usr/bin/perl
# 120-held-slow-clients.t: a client's pace never keeps part of a held answer counted
# against the worker's budget (max_held_bytes, issue 18 defect 4). Clients that pipeline
# many Metadata requests and read none of the answers fill their sockets, and lookout then
# stops reading their brokers (backpressure). The broker here writes pipelined answers back
# to back, as a real one does, so that lookout's reads end anywhere in an answer: had it
# stopped in the middle of one it holds whole, that part would stay counted for as long as
# the client liked, and a connection owning the budget's excess would make every other
# client's held answer on the worker wait for it. Checked: once those clients have stalled,
# nothing is held, and another client's Metadata (held whole, larger than the budget) is
# answered.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Socket qw(SOL_SOCKET SO_RCVBUF pack_sockaddr_in inet_aton);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use KafkaTestBroker;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $PROBE = repo_top() . '/tests/integration/bin/kafka-probe';
my ($CLIENTS, $REQUESTS) = (3, 40);

my $tb = KafkaTestBroker->start(dir => $dir, timeout => 60, coalesce => JSON::PP::true,
                                nodes => [ { id => 1, host => 'internal-1.kafka.test', port => 0, bind => '127.0.0.1:0' } ],
                                topics => [ { name => 'wide', partitions => 6000 } ]);
my ($ext, $admin) = (free_port(), free_port());
my $bin = Lookout::lookout_bin();
my $SANITIZED = `grep -c __asan_init '$bin' 2>/dev/null` + 0 > 0;
my $lk = start_lookout(dir => $dir, conf => KafkaMock::lookout_conf(
    lookout => "admin = 127.0.0.1:$admin\nmax_held_bytes = 64k\n",
    nodes => [ [ 1, $tb->node(1)->{listen}, $ext ] ]));
ok($lk->started, 'lookout (max_held_bytes = 64k) started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub metric {
    my ($name) = @_;
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return $r->{body} =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}

sub answers {
    my ($out) = @_;
    return grep { defined $_->{response_hex} } map { decode_json($_) } grep { /^\{/ } split /\n/, $out // '';
}

my $r = KafkaMock::run([ $PY, $PROBE, '--topic', 'wide', $tb->node(1)->{listen}, 'Metadata:12' ], timeout => 30);
my ($d) = answers($r->{out});
ok($d && length($d->{response_hex}) / 2 > 64 * 1024,
   sprintf('the broker answers Metadata v12 for the 6000-partition topic in %.0f KiB, over the budget',
           length($d->{response_hex} // '') / 2048)) or BAIL_OUT('no answer from the broker');
my $req = pack('H*', $d->{request_hex});
my $base = rss_kb($lk->pid) // 0;

my @socks;
for my $i (1 .. $CLIENTS) {
    # a small receive buffer: the kernel takes little of what lookout writes
    my $s = IO::Socket::INET->new(Proto => 'tcp') or BAIL_OUT("socket: $!");
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096) or BAIL_OUT("SO_RCVBUF: $!");
    $s->connect(pack_sockaddr_in($ext, inet_aton('127.0.0.1'))) or BAIL_OUT("connect: $!");
    my $all = '';
    for my $id (1 .. $REQUESTS) {
        my $q = $req;
        substr($q, 4, 4) = pack('N', 1000 * $i + $id);   # its own correlation id
        $all .= pack('N', length $q) . $q;
    }
    print {$s} $all;
    push @socks, $s;
}

# The broker reads every request before it writes (coalesce), then writes all the answers
# at once; once each client has its first bytes (FIONREAD), lookout is reading them, and
# its output to each fills within moments. When the held bytes have not moved for 1.5 s,
# every one of those connections has stopped: nothing may be held then.
my $FIONREAD = 0x541B;
ok(wait_until(sub {
    for my $s (@socks) { my $b = pack('i', 0); ioctl($s, $FIONREAD, $b) or return 0; return 0 if unpack('i', $b) == 0 }
    return 1;
}, 60, 0.1), 'the answers reach each client, which reads none');
my ($held, $since) = (-2, time);
wait_until(sub {
    my $m = metric('lookout_held_bytes') // -1;
    ($held, $since) = ($m, time) if $m != $held;
    time - $since > 1.5;
}, 30, 0.25);
is($held, 0, 'nothing stays held for the clients that read nothing');
SKIP: {
    skip 'sanitizer build: RSS not measured', 1 if $SANITIZED;
    # what they were sent: $CLIENTS x $REQUESTS answers; what lookout keeps of it: per
    # client about its output's high mark and one answer
    my $rss = rss_kb($lk->pid) // 0;
    ok($rss < $base + 16 * 1024, sprintf('lookout keeps little of what they do not read: RSS %.1f MiB (base %.1f; %.1f MiB sent their way)',
                                        $rss / 1024, $base / 1024, $CLIENTS * $REQUESTS * length($d->{response_hex}) / 2 / 1048576));
}

my $t0 = time;
my $p = KafkaMock::run([ $PY, $PROBE, '--topic', 'wide', "127.0.0.1:$ext", 'Metadata:12' ], timeout => 20);
my ($a) = answers($p->{out});
ok($a && $a->{response_hex} !~ /\Q${\ unpack('H*', 'internal-')}\E/,
   sprintf("another client's Metadata answer, held whole, is not kept waiting on them (%.1f s)", time - $t0))
    or diag($p->{out} // '', $p->{err} // '');

close $_ for @socks;
ok(wait_until(sub { (metric('lookout_held_bytes') // -1) == 0 }, 10), 'nothing held once they have gone');
$lk->stop;
is($lk->exit_code, 0, 'lookout exited cleanly');
done_testing();
