#!/usr/bin/perl
# 146-pulsar-waiting-frames.t: what a Pulsar frame that waits for its bytes costs lookout.
#   - A simple command (CONNECT, a client's LOOKUP, a broker's LOOKUP_RESPONSE) whose
#     totalSize leaves room for bytes after the command is refused, logged: only SEND and
#     MESSAGE carry a payload (PulsarApi.proto), and a LOOKUP lookout holds whole would
#     otherwise wait for up to max_frame_bytes of nothing it reads.
#   - A held broker frame that waits for its payload (the leak guard holds a command of a
#     type lookout does not know) has its head read once: a command of 3.6 MB of unknown
#     fields, not in the shape lookout types in a few instructions, takes a whole walk, and
#     its last bytes trickled one a segment cost lookout little CPU, not one walk each.
#   - What clients have sent of commands not all in yet counts against max_held_bytes past
#     64 KiB: with a budget of 256k, four clients each part-way through a 1 MB command are
#     held to about the budget's owner's bytes and 64 KiB and a read for each other (they
#     are paused: lookout_held_pauses_total), and every command completes once the rest
#     comes; a 600 kB CONNECT passes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(encode_json);
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarFrame qw(fv fb frame);

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $bin = Lookout::lookout_bin();
my $SANITIZED = `grep -c __asan_init '$bin' 2>/dev/null` + 0 > 0;

use constant { CONNECT => 2, LOOKUP => 23 };
my $CONNECT = fv(1, CONNECT) . fb(2, fb(1, 'lookout-test') . fv(4, 21));
sub lookup_cmd { my ($id) = @_; return fv(1, LOOKUP) . fb(LOOKUP, fb(1, 'persistent://public/default/t-b1') . fv(2, $id)) }

my $E = free_port();
my $admin = free_port();
my $t = PulsarBinBroker->start(
    dir => $dir, unknown_command => 'ignore',
    brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$E" } ],
    topics => [ { name => 't-b1', owner => 'b1' } ]);
my $INT = 'pulsar://' . $t->addr('b1');

my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
log_level = debug
admin = 127.0.0.1:$admin
max_held_bytes = 256k

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
leak_guard = log

[broker prod/b1]
advertisedListeners = internal:$INT,external:pulsar://127.0.0.1:$E
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub client {
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$E", Proto => 'tcp') or BAIL_OUT("connect: $!");
    $s->autoflush(1);
    return $s;
}

# Frames from $s within $secs (or until it closes): [ [type, frame bytes]... ], closed.
sub read_frames {
    my ($s, $secs, $want) = @_;
    my ($buf, @f, $closed) = ('');
    my $end = time + $secs;
    while (time < $end && (!defined $want || @f < $want)) {
        my $rin = '';
        vec($rin, fileno($s), 1) = 1;
        next unless select(my $rout = $rin, undef, undef, 0.05);
        my $n = sysread($s, my $chunk, 1 << 20);
        if (!$n) { $closed = 1; last }
        $buf .= $chunk;
        while (length $buf >= 8) {
            my ($total, $cs) = unpack('NN', $buf);
            last if length $buf < 4 + $total;
            my $cmd = substr($buf, 8, $cs);
            my ($type) = $cmd =~ /^\x08(.)/s ? (ord $1) : (-1);
            push @f, [ $type, substr($buf, 0, 4 + $total) ];
            substr($buf, 0, 4 + $total) = '';
        }
    }
    return (\@f, $closed);
}

sub cpu_s {
    my ($pid) = @_;
    my $stat = slurp("/proc/$pid/stat") // return 0;
    my @f = split ' ', substr($stat, rindex($stat, ')') + 2);
    return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

subtest 'a CONNECT with bytes after its command is refused, logged' => sub {
    my $s = client();
    print {$s} frame($CONNECT, 'x' x 10);
    my ($f, $closed) = read_frames($s, 5);
    ok($closed && !@$f, 'closed, nothing answered') or diag(explain($f));
    ok($lk->wait_log(qr/client sent a command of type 2 in a frame of \d+ bytes, with 10 after the command's \d+: only SEND and MESSAGE carry a payload; closing/, 5),
       'logged, with the sizes');
};

subtest 'a LOOKUP with bytes after its command is refused before the broker sees it' => sub {
    my $n = () = $t->frames(type => 'LOOKUP', dir => 'in');
    my $s = client();
    print {$s} frame($CONNECT);
    my ($f) = read_frames($s, 5, 1);
    is($f->[0][0] // -1, 3, 'CONNECTED');
    # what would make lookout hold it: room for a megabyte after the command, 3 bytes of it sent
    my $cmd = lookup_cmd(7);
    print {$s} pack('NN', 4 + length($cmd) + (1 << 20), length $cmd) . $cmd . 'abc';
    my $closed;
    ($f, $closed) = read_frames($s, 5);
    ok($closed && !@$f, 'closed at once, nothing answered') or diag(explain($f));
    my $m = () = $t->frames(type => 'LOOKUP', dir => 'in');
    is($m, $n, 'the broker saw no LOOKUP');
    ok($lk->wait_log(qr/client sent a command of type 23 in a frame of \d+ bytes, with 1048576 after the command's \d+/, 5),
       'logged, with the sizes');
    # a well-formed one still passes
    $s = client();
    print {$s} frame($CONNECT), frame(lookup_cmd(8));
    ($f) = read_frames($s, 5, 2);
    is(join(',', map { $_->[0] } @$f), '3,24', 'a LOOKUP without payload answered');
};

# A probe that looked up t-b1 and reads for 4 s: its output, and its peer at the broker,
# which the broker may push frames on.
sub pushed_on {
    my $seen = () = $t->frames(dir => 'out', type => 'LOOKUP_RESPONSE');
    open(my $fh, '-|', $PY, "$BIN/pulsar-probe", "127.0.0.1:$E",
         encode_json({ send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b1',
                                                     authoritative => JSON::PP::true } }),
         encode_json({ wait => 4 })) or die "pulsar-probe: $!";
    ok(wait_until(sub { my $k = () = $t->frames(dir => 'out', type => 'LOOKUP_RESPONSE'); $k > $seen }, 10),
       'the probe looked up');
    my ($peer) = map { $_->{peer} } reverse $t->frames(dir => 'out', type => 'LOOKUP_RESPONSE');
    return ($fh, $peer);
}

subtest 'a broker LOOKUP_RESPONSE with bytes after its command is refused, logged' => sub {
    my ($fh, $peer) = pushed_on();
    my $resp = fb(1, 'pulsar://127.0.0.1:1') . fv(3, 1) . fv(4, 77);
    $t->control({ cmd => 'raw', broker => 'b1', peer => $peer,
                  hex => unpack('H*', frame(fv(1, 24) . fb(24, $resp), 'zz')) });
    my $out = do { local $/; <$fh> };
    close $fh;
    my @steps = PulsarBinBroker::json_lines($out);
    ok((grep { $_->{closed} } @steps), 'the client\'s connection is closed');
    ok(!(grep { ($_->{fields}{request_id} // 0) == 77 } map { @{ $_->{received} // [] } } @steps), 'nothing of it reached the client');
    ok($lk->wait_log(qr/broker sent a command of type 24 in a frame of \d+ bytes, with 2 after the command's \d+/, 5), 'logged');
};

subtest 'a held broker frame that waits is typed once' => sub {
    my ($fh, $peer) = pushed_on();
    # type 150, which lookout does not know (the leak guard holds it whole), then 3.6 MB of
    # unknown fields: the command's type takes a walk of them all
    my $cmd = fv(1, 150) . (fv(1000, 1) x 1_200_000);
    my $TRICKLE = 300;
    my $head = frame($cmd, 'p' x $TRICKLE);
    $head = substr($head, 0, length($head) - $TRICKLE);
    $t->control({ cmd => 'raw', broker => 'b1', peer => $peer, hex => unpack('H*', $head) }, 30);
    ok(wait_until(sub { ($lk->log // '') =~ /./ && held_now() >= length $head }, 20, 0.05),
       'lookout holds the frame\'s command') or diag(held_now(), join("\n", grep { /closing|broker sent/ } split /\n/, $lk->log // ""));
    my $cpu0 = cpu_s($lk->pid);
    my $t0 = time;
    for (1 .. $TRICKLE) { $t->control({ cmd => 'raw', broker => 'b1', peer => $peer, hex => '70' }); sleep 0.002 }
    my $cpu = cpu_s($lk->pid) - $cpu0;
    my $limit = $SANITIZED ? 0.5 : 0.3;
    ok($cpu < $limit, sprintf('%d bytes trickled one a segment over %.1f s cost lookout %.2f s of CPU (under %.1f)',
                              $TRICKLE, time - $t0, $cpu, $limit));
    ok(wait_until(sub { (held_now() // -1) == 0 }, 10), 'the frame went on, nothing held');
    my $out = do { local $/; <$fh> };
    close $fh;
    my $whole = unpack('H*', $head . ('p' x $TRICKLE));
    my @got = grep { ($_->{frame_hex} // '') eq $whole } map { @{ $_->{received} // [] } } PulsarBinBroker::json_lines($out);
    is(scalar(@got), 1, 'the client has the frame, whole');
};

subtest 'commands that wait for their bytes count against max_held_bytes' => sub {
    # four clients each send a command of 1 MB (a PING with an unknown field: the broker
    # answers PONG) after their CONNECT, at first 600 kB of it; with max_held_bytes = 256k
    # one of them (the budget's owner) is read on, the others stop past 64 KiB
    my ($N, $BIG, $PART) = (4, 1_000_000, 600_000);
    my $cmd = fv(1, 18) . fb(18, '') . fb(1000, 'x' x $BIG);
    my $f = frame($cmd);
    my $pauses0 = metric('lookout_held_pauses_total') // 0;
    my @c = map { client() } 1 .. $N;
    for my $s (@c) {
        print {$s} frame($CONNECT);
        my ($r) = read_frames($s, 5, 1);
        is($r->[0][0] // -1, 3, 'CONNECTED');
        $s->blocking(0);
    }
    my @left = map { substr($f, 0, 8 + $PART) } @c;
    my $pump = sub {   # writes what the sockets take; 1 when all is written
        my $all = 1;
        for my $i (0 .. $#c) {
            next unless length $left[$i];
            my $n = syswrite($c[$i], $left[$i], 1 << 16);
            substr($left[$i], 0, $n) = '' if $n;
            $all = 0 if length $left[$i];
        }
        return $all;
    };
    my ($max, $held, $since) = (0, -1, time);
    wait_until(sub {
        $pump->();
        my $h = held_now() // -1;
        $max = $h if $h > $max;
        ($held, $since) = ($h, time) if $h != $held;
        time - $since > 1.5;
    }, 30, 0.05);
    my $bound = 256 * 1024 + 8 + $PART + ($N - 1) * (64 * 1024 + 256 * 1024);
    ok($held > $PART && $max <= $bound,
       sprintf('the waiting commands are counted, bounded: %d bytes held (at most %d; %d without the budget)',
               $held, $max, $N * (8 + $PART)));
    ok((metric('lookout_held_pauses_total') // 0) > $pauses0, 'clients were paused (lookout_held_pauses_total)');
    # the rest comes: every command completes, one after another
    $left[$_] .= substr($f, 8 + $PART) for 0 .. $#c;
    ok(wait_until(sub { $pump->() }, 60, 0.02), 'lookout takes all of it');
    $_->blocking(1) for @c;
    for my $i (0 .. $#c) {
        my ($r) = read_frames($c[$i], 20, 1);
        is($r->[0][0] // -1, 19, "client $i: its PING answered (PONG)");
    }
    ok(wait_until(sub { (held_now() // -1) == 0 }, 10), 'nothing held once they are through');
    close $_ for @c;
};

subtest 'a large CONNECT (600 kB of auth_data) passes' => sub {
    my $big = fv(1, CONNECT) . fb(2, fb(1, 'lookout-test') . fb(3, 'a' x 600_000) . fv(4, 21));
    my $s = client();
    print {$s} frame($big);
    my ($r) = read_frames($s, 10, 1);
    is($r->[0][0] // -1, 3, 'CONNECTED');
    ok(wait_until(sub { (held_now() // -1) == 0 }, 10), 'nothing held once it is through');
};

sub metric {
    my ($name) = @_;
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return ($r->{body} // '') =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}

sub held_now {
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return ($r->{body} // '') =~ /^lookout_held_bytes (\d+)$/m ? $1 : undef;
}

$lk->stop;
is($lk->exit_code, 0, 'lookout exited cleanly');
$t->stop;
done_testing();
