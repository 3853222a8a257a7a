#!/usr/bin/perl
# 60-backpressure.t: a slow reader never makes lookout buffer without bound (issue 2
# item 5, "backpressure by watermarks"). A client that stops reading a 160 MiB download
# for a few seconds, and a broker that stops reading a 160 MiB upload: lookout's resident
# memory (VmRSS) stays within 64 MiB of where it started, and both transfers then finish
# intact. The fake broker's /test/repeat and /test/sink run at memory speed, so a lookout
# that buffered everything would show it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json);
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

plan skip_all => 'needs /proc' unless -r "/proc/$$/status";

my $N = 160 * 1024 * 1024;
my $LIMIT_KB = 64 * 1024;
my $PAUSE = 3;

my $dir = tmp_dir();
my ($p1, $q1) = (free_port(), free_port());
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p1"]);
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$q1"] }));
[lookout]
workers = 1
timeout.idle = 30s
timeout.response = 30s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');
my $pid = $lk->pid;
my $expect_sha = PulsarBroker::repeat_bytes_sha256($N);

# Warm up (allocator arenas, TLS-free buffers, the upstream pool) before the baseline.
my $r = curl({ timeout => 20 }, "http://127.0.0.1:$q1/test/repeat?n=" . (16 * 1024 * 1024));
is(length $r->{body}, 16 * 1024 * 1024, 'warm-up transfer');
my $base = rss_kb($pid);
ok($base, "baseline VmRSS ${\ ($base // 0)} kB");


subtest 'a client that stops reading a large download' => sub {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $q1, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    syswrite $s, "GET /test/repeat?n=$N HTTP/1.1\r\nHost: 127.0.0.1:$q1\r\nConnection: close\r\n\r\n";
    my $b = body_reader($s, wait => 60);
    $b->{read}->(1024 * 1024);
    ok(defined $b->{head} && $b->{head} =~ m{^HTTP/1\.1 200}, 'the download started');
    like($b->{head} // '', qr/^Content-Length: $N\r?$/mi, '... with its Content-Length');
    # Stop reading: lookout must stop reading the broker too.
    my $peak = peak_rss_kb($pid, $PAUSE);
    my $grew = $peak - $base;
    cmp_ok($grew, '<', $LIMIT_KB, "client paused ${PAUSE}s: VmRSS grew by $grew kB (limit $LIMIT_KB kB)");
    my $held = $b->{got};
    $b->{read}->($N);
    is($b->{got}, $N, "resumed: all $N bytes arrived (had $held before resuming)");
    is($b->{sha}->hexdigest, $expect_sha, '... intact');
    close $s;
};

subtest 'a broker that stops reading a large upload' => sub {
    my $out = "$dir/upload.out";
    my $child = fork;
    die "fork: $!" unless defined $child;
    if ($child == 0) {
        # The client: send as fast as the socket takes it, then read the answer.
        $SIG{ALRM} = sub { POSIX::_exit(3) };
        alarm 60;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $q1, Proto => 'tcp', Timeout => 5)
            or POSIX::_exit(2);
        my $blk = PulsarBroker::test_bytes(65536);
        my $data = "PUT /test/sink?ms=" . ($PAUSE * 1000) . " HTTP/1.1\r\nHost: 127.0.0.1:$q1\r\n"
                 . "Content-Length: $N\r\nConnection: close\r\n\r\n";
        for (my $off = 0; $off < $N; $off += 65536) {
            $data .= $blk;
            next if length $data < 1048576 && $off + 65536 < $N;
            while (length $data) {
                my $n = syswrite($s, $data);
                POSIX::_exit(4) unless defined $n;
                substr($data, 0, $n, '');
            }
        }
        my $reply = '';
        while (sysread($s, my $chunk, 65536)) { $reply .= $chunk }
        open my $fh, '>', $out or POSIX::_exit(5);
        print $fh $reply;
        close $fh;
        POSIX::_exit(0);
    }
    my $peak = peak_rss_kb($pid, $PAUSE);
    my $grew = $peak - $base;
    cmp_ok($grew, '<', $LIMIT_KB, "broker paused ${PAUSE}s: VmRSS grew by $grew kB (limit $LIMIT_KB kB)");
    my $st;
    my $done = wait_until(sub { my $w = waitpid($child, POSIX::WNOHANG()); $st = $?; $w == $child }, 60);
    unless ($done) { kill 'KILL', $child; waitpid $child, 0 }
    ok($done && $st == 0, 'the client finished sending and got an answer') or diag("status " . ($st // 'none'));
    my $resp = parse_response(slurp($out) // '');
    is($resp && $resp->{status}, 200, '200 from the broker');
    my $j = eval { decode_json($resp->{body}) } // {};
    is($j->{length}, $N, "the broker read all $N bytes");
    is($j->{sha256}, $expect_sha, '... intact');
};

my $end = rss_kb($pid) // 0;
note("VmRSS: baseline $base kB, at the end $end kB");
ok($lk->alive, 'lookout still running');
$lk->stop;
$c->stop;
done_testing();
