#!/usr/bin/perl
# 15-demo.t: tests/demo.sh, README's first command (issue 6 item 14, issue 19). With a demo
# port already taken by something that answers HTTP, the demo must stop with lookout's own
# error message and a non-zero exit, not print empty results and "Serving until Ctrl-C";
# with a Kafka broker's address taken, with the test broker's own error. And with its ports
# free it serves, shows on each protocol what a client gets straight from the brokers
# (internal addresses) and through lookout (external ones): a rewritten HTTP redirect,
# kcat -L's broker list, a binary LOOKUP followed as clients do; and exits 0 on SIGINT.
# LOOKOUT_DEMO_BIN skips the demo's deps and build steps; every run is bounded, and the
# demo runs in its own process group, which is ended whole.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX qw(WNOHANG setsid);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;

need_tools('curl', 'kcat', 'python3');
my $top = repo_top();
my $dir = tmp_dir();

# The demo's fixed addresses (conf/demo.conf): skip if any is taken already (another demo).
my @demo = ((map { ("127.0.1.$_:8080", "127.0.1.$_:6650") } 1 .. 3), (map { "127.0.1.$_:9092" } 11 .. 13),
            (map { "127.0.0.1:$_" } 18080 .. 18083), (map { "127.0.1.10:$_" } 16650 .. 16653, 19092 .. 19095));

# taken_demo_address(): the first demo address something listens on, or undef.
sub taken_demo_address {
    for my $hp (@demo) {
        my ($h, $p) = split /:/, $hp;
        my $s = IO::Socket::INET->new(LocalAddr => $h, LocalPort => $p, Proto => 'tcp', Listen => 1, ReuseAddr => 1);
        return $hp unless $s;
        close $s;
    }
    return undef;
}
if (my $hp = taken_demo_address()) { plan skip_all => "demo address $hp is in use (a demo running?)" }

# What one demo run started can outlive it by a moment: a test broker notices within
# half a second that its parent is gone. The next run waits (bounded) for every address
# to be free, before a subtest takes the one it wants in use.
sub wait_demo_addresses_free {
    my $hp;
    wait_until(sub { !defined($hp = taken_demo_address()) }, 15, 0.1);
    die "demo address $hp still in use 15 s after the last demo run ended\n" if defined $hp;
}

# demo(SECS [, sub { ... } called with the pid once started]): runs tests/demo.sh in its
# own process group; returns (exit code or undef, output, seconds taken).
sub demo {
    my ($secs, $during) = @_;
    my $out = "$dir/demo.out";
    unlink $out;
    my $t0 = time;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        setsid();
        # A shell cannot trap a signal that was ignored when it started, and a
        # test run in the background of a non-interactive shell (nohup ... &)
        # starts with SIGINT ignored: the demo's Ctrl-C must reach it as from a
        # terminal.
        $SIG{$_} = 'DEFAULT' for qw(INT TERM);
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(126);
        $ENV{LOOKOUT_DEMO_BIN} = lookout_bin();
        exec 'sh', "$top/tests/demo.sh" or POSIX::_exit(127);
    }
    $during->($pid, $out) if $during;
    my $st;
    wait_until(sub { my $r = waitpid($pid, WNOHANG); $st = $? if $r == $pid; $r != 0 }, $secs, 0.05);
    unless (defined $st) {
        kill 'TERM', -$pid;    # the group: the demo, its brokers and its lookout
        wait_until(sub { waitpid($pid, WNOHANG) != 0 }, 5) or kill('KILL', -$pid), waitpid($pid, 0);
        $st = -1;
    }
    kill 'TERM', -$pid;    # anything the demo left behind in its group
    return (($st >= 0 && !($st & 127)) ? $st >> 8 : undef, slurp($out) // '', time - $t0);
}

subtest 'a demo port in use: the demo stops with lookout\'s error' => sub {
    wait_demo_addresses_free();
    # Something that answers HTTP on the service address, so that only lookout fails.
    my $blocker = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 18080, Proto => 'tcp',
                                        Listen => 16, ReuseAddr => 1) or die "listen 18080: $!";
    my $bpid = fork // die "fork: $!";
    if ($bpid == 0) {
        while (my $c = $blocker->accept) {
            sysread($c, my $buf, 4096);
            print $c "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            close $c;
        }
        POSIX::_exit(0);
    }
    close $blocker;
    my ($code, $out, $took) = demo(60);
    kill 'TERM', $bpid;
    waitpid($bpid, 0);
    ok(defined $code && $code != 0, 'the demo exits non-zero') or diag('exit ' . ($code // 'none (killed)') . "\n$out");
    like($out, qr/cannot listen on 127\.0\.0\.1:18080: Address already in use/, '... with lookout\'s own error message')
        or diag($out);
    unlike($out, qr/Serving until Ctrl-C/, '... and does not claim to serve');
    unlike($out, qr/^== /m, '... nor print results');
    cmp_ok($took, '<', 30, '... at once (' . sprintf('%.1f', $took) . ' s)');
};

subtest 'a Kafka broker address in use: the demo stops with the broker\'s error' => sub {
    wait_demo_addresses_free();
    my $blocker = IO::Socket::INET->new(LocalAddr => '127.0.1.12', LocalPort => 9092, Proto => 'tcp',
                                        Listen => 16, ReuseAddr => 1) or die "listen 127.0.1.12:9092: $!";
    my ($code, $out, $took) = demo(60);
    close $blocker;
    ok(defined $code && $code != 0, 'the demo exits non-zero') or diag('exit ' . ($code // 'none (killed)') . "\n$out");
    like($out, qr/cannot bind 127\.0\.1\.12:9092: .*Address already in use/, '... with the Kafka broker\'s own error')
        or diag($out);
    unlike($out, qr/Serving until Ctrl-C/, '... and does not claim to serve');
    unlike($out, qr/^== /m, '... nor print results');
    cmp_ok($took, '<', 30, '... at once (' . sprintf('%.1f', $took) . ' s)');
};

subtest 'ports free: the demo serves, then exits 0 on SIGINT' => sub {
    wait_demo_addresses_free();
    my $served = 0;
    my ($code, $out) = demo(150, sub {
        my ($pid, $file) = @_;
        $served = wait_until(sub { (slurp($file) // '') =~ /Serving until Ctrl-C/ }, 120, 0.1);
        kill 'INT', -$pid;
    });
    ok($served, 'it prints "Serving until Ctrl-C"') or diag($out);
    is($code, 0, '... and exits 0 on SIGINT') or diag($out);
    like($out, qr{location: http://127\.0\.0\.1:1808\d/}i, '... after a redirect rewritten to an external address')
        or diag($out);

    # Kafka: kcat -L straight at a broker lists the internal addresses, through lookout's
    # bootstrap address the external ones, and nothing else.
    my ($direct, $through) = $out =~ /kcat -L -b 127\.0\.1\.11:9092\n(.*?)\n\n.*?kcat -L -b 127\.0\.1\.10:19092\n(.*?)\n\n/s;
    is_deeply([ sort map { /broker (\d+) at (\S+)/ ? "$1=$2" : "? $_" } split /\n/, $direct // '' ],
              [ '1=127.0.1.11:9092', '2=127.0.1.12:9092', '3=127.0.1.13:9092' ],
              'kcat -L straight from the brokers: the 3 internal addresses') or diag($out);
    is_deeply([ sort map { /broker (\d+) at (\S+)/ ? "$1=$2" : "? $_" } split /\n/, $through // '' ],
              [ '1=127.0.1.10:19093', '2=127.0.1.10:19094', '3=127.0.1.10:19095' ],
              'kcat -L through lookout: the 3 external addresses') or diag($out);

    # Pulsar binary: the lookup followed straight among the brokers, and through lookout.
    my ($pd, $pl) = $out =~ /pulsar-probe 127\.0\.1\.1:6650 .*?\n(.*?)\n\n.*?pulsar-probe 127\.0\.1\.10:16651 .*?\n(.*?)\n\n/s;
    is($pd // '', "  asked 127.0.1.1:6650: Redirect to pulsar://127.0.1.3:6650\n"
                . "  asked 127.0.1.3:6650: Connect to pulsar://127.0.1.3:6650",
       'a binary lookup straight from the brokers: Redirect to b3\'s internal URL') or diag($out);
    is($pl // '', "  asked 127.0.1.10:16651: Redirect to pulsar://127.0.1.10:16653\n"
                . "  asked 127.0.1.10:16653: Connect to pulsar://127.0.1.10:16653",
       '... through lookout: to b3\'s external URL, which the client reaches') or diag($out);
};

done_testing();
