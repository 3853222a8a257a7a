#!/usr/bin/perl
# 103-kafka-clients.t: Kafka through lookout against librdkafka's mock cluster (issue 8, "Real
# peers to test against"), with one more client nobody here wrote and a storm of bad input:
#   - kafkajs (npm, pinned in tests/kafka/package-lock.json; tests/deps.sh runs npm ci) produces,
#     consumes back in a consumer group, and lists the brokers it was given: the round trip
#     matches, and it never learnt or dialed anything but lookout's addresses;
#   - 200 connections at once (huge and negative size fields, sizes below the header, frames
#     cut short, random bytes, valid requests dripped a byte at a time) while kcat produces and
#     consumes through lookout: each bad frame is logged with its connection's context, the
#     dripped requests are answered, kcat is served during and after, and lookout's RSS and
#     open descriptors come back to where they were.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256);
use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use POSIX ();
use Socket ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('kcat');

my $dir = tmp_dir();
my ($JS, $STORM) = ('lk-js', 'lk-storm');
my $m = KafkaMock->start(brokers => 3, topics => [ "$JS:3", "$STORM:1" ], dir => $dir);
my @ext = map { free_port() } 1 .. 3;
my $boot = free_port();
my %ext_of = map { ($m->brokers->[$_]{id} => $ext[$_]) } 0 .. 2;
my %ours = map { ("127.0.0.1:$_" => 1) } @ext, $boot;
my $lk = start_lookout(dir => $dir, conf => KafkaMock::lookout_conf(nodes => $m->behind(@ext), boot => $boot));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

# ---- kafkajs -----------------------------------------------------------------------------

subtest 'kafkajs through lookout: a round trip with a consumer group' => sub {
    plan skip_all => KafkaMock::kafkajs_missing() if KafkaMock::kafkajs_missing();
    my $n = 300;
    my $r = KafkaMock::run([ 'node', "$FindBin::Bin/bin/kafkajs-check", "127.0.0.1:$boot", '--roundtrip', $n,
                             '--topic', $JS, '--partitions', 3, '--group', 'lk-kafkajs', '--timeout', 30 ],
                           timeout => 90);
    my ($j) = map { $_->{roundtrip} ? ($_->{roundtrip}) : () } json_lines($r->{out});
    ok($j, 'kafkajs ran its round trip') or return diag("exit $r->{exit}: $r->{err}");
    note("kafkajs $j->{kafkajs}; requests per address: " . encode_json($j->{requests}));
    is(scalar @{ $j->{sent} }, $n, "$n messages produced");
    is(scalar @{ $j->{got} }, $n, "$n messages consumed by the group, no more");
    is_deeply([ sort map { "@$_" } @{ $j->{got} } ], [ sort map { "@$_" } @{ $j->{sent} } ],
              '... the ones sent, each on its partition');
    is_deeply($j->{brokers}, [ map { [ $_, '127.0.0.1', $ext_of{$_} ] } sort keys %ext_of ],
              'describeCluster: each node id at its EXTERNAL address on lookout');
    my @dialed = @{ $j->{dialed} // [] };
    ok(@dialed > 1 && !(grep { !$ours{$_} } @dialed), 'kafkajs dialed only lookout: ' . join(' ', @dialed));
    my @asked = keys %{ $j->{requests} // {} };
    ok(!(grep { !$ours{$_} } @asked), '... and sent every request to lookout');
    my %api = map { my ($a) = /^(\w+)/; ($a => 1) } map { @$_ } values %{ $j->{requests} // {} };
    ok($api{GroupCoordinator} && $api{JoinGroup} && $api{SyncGroup} && $api{OffsetCommit},
       'the group found its coordinator through lookout, joined, synced and committed');
    # The mock speaks Metadata v0-2 and FindCoordinator v0-2 only: kafkajs asks ApiVersions
    # first and picks within them, so those are what lookout rewrote here.
    my %v = map { /^(\w+) v(\d+)$/ ? ($1 => $2) : () } map { @$_ } values %{ $j->{requests} // {} };
    is_deeply([ @v{qw(Metadata GroupCoordinator)} ], [ 2, 2 ], 'kafkajs used Metadata v2 and FindCoordinator v2');
};

# ---- bad input at scale ------------------------------------------------------------------

# kcat_roundtrip(TAG, N): kcat produces N messages to $STORM through lookout and consumes
# the last N back; true when they match.
sub kcat_roundtrip {
    my ($tag, $n) = @_;
    my @msgs = map { "$tag $_" } 1 .. $n;
    my $r = KafkaMock::run([ 'kcat', '-P', '-b', "127.0.0.1:$boot", '-t', $STORM, '-p', '0' ],
                           in => join("\n", @msgs) . "\n", timeout => 30);
    return diag("kcat -P: $r->{err}") && 0 if $r->{exit};
    $r = KafkaMock::run([ 'kcat', '-C', '-b', "127.0.0.1:$boot", '-t', $STORM, '-p', '0', '-o', "-$n",
                          '-e', '-q' ], timeout => 30);
    my $same = join("\n", @msgs) eq join("\n", split /\n/, $r->{out});
    diag("kcat -C: exit $r->{exit}: $r->{err}") unless $same;
    return $same;
}

sub connect_lookout {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5)
        or return undef;
    $s->setsockopt(Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
    return $s;
}

# A Metadata v1 request for every topic (the mock speaks v0-2).
sub metadata_v1 {
    my ($corr) = @_;
    my $p = pack('nnN', 3, 1, $corr) . pack('n/a*', 'drip') . pack('N', 0xffffffff);
    return pack('N', length $p) . $p;
}

# A request of 226 bytes (Metadata v1 with 200 bytes more than it needs): what is cut short.
sub padded_request {
    my ($corr) = @_;
    my $p = pack('nnN', 3, 1, $corr) . pack('n/a*', 'cut') . pack('N', 0xffffffff) . 'y' x 200;
    return pack('N', length $p) . $p;
}

# The [node id, host, port] of a Metadata v1 answer (the frame after its size field).
sub metadata_v1_brokers {
    my ($b) = @_;
    my ($o, @out) = (8);
    for (1 .. unpack('N', substr($b, 4, 4))) {
        my ($id, $hl) = unpack('l>n', substr($b, $o, 6));
        my $host = substr($b, $o + 6, $hl);
        $o += 6 + $hl;
        my ($port, $rl) = unpack('l>s>', substr($b, $o, 6));
        $o += 6 + ($rl > 0 ? $rl : 0);
        push @out, [ $id, $host, $port ];
    }
    return @out;
}

# The first 4 bytes as the size field lookout reads: its verdict on a frame.
sub bad_size { return undef if length $_[0] < 4; my $s = unpack('l>', $_[0]); return ($s < 8 || $s > 100 * 1024 * 1024) ? $s : undef }

subtest '200 bad connections at once: lookout logs each, serves kcat, and its RSS comes back' => sub {
    my $pid = $lk->pid;
    # Warm up first (a client's connections, the allocator's arenas), so that the baseline
    # is lookout at work, not lookout fresh.
    ok(kcat_roundtrip('warm-up', 300), 'kcat round trip before the storm');
    my $rss0 = rss_kb($pid);
    my $fds0 = () = glob("/proc/$pid/fd/*");

    # The storm: every kind at once, in one burst of connects.
    my @kinds = ((map { [ huge => pack('N', 100 * 1024 * 1024 + 1 + $_ * 53_000_000) . 'x' x 8 ] } 0 .. 34),
                 (map { [ negative => pack('l>', -1 - $_ * 61_000_000) . "\0" x 8 ] } 0 .. 34),
                 (map { [ tiny => pack('N', $_ % 8) . 'abcdefgh' ] } 0 .. 9),
                 (map { [ truncated => substr(padded_request(1000 + $_), 0, (2, 9, 30)[$_ % 3]) ] } 0 .. 39),
                 (map { [ random => sha256("lookout storm $_") . sha256("lookout storm $_ more") ] } 0 .. 39),
                 (map { [ drip => metadata_v1(2000 + $_) ] } 0 .. 39));
    is(scalar @kinds, 200, '200 connections: 35 huge, 35 negative, 10 below the header, 40 cut short, '
                           . '40 random, 40 dripped');
    my @c;
    for my $k (@kinds) {
        my $s = connect_lookout() or last;
        push @c, { kind => $k->[0], bytes => $k->[1], sock => $s, port => $s->sockport };
    }
    is(scalar @c, 200, 'all 200 connected');
    my @drip = grep { $_->{kind} eq 'drip' } @c;
    my @shot = grep { $_->{kind} ne 'drip' } @c;
    syswrite($_->{sock}, $_->{bytes}) for @shot;

    # A child drips the valid requests, a byte per 50 ms on every connection, and reads the
    # answers; meanwhile kcat runs through lookout.
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $child = fork // die "fork: $!";
    if ($child == 0) {
        close $rd;
        close $_->{sock} for @shot;
        $SIG{ALRM} = sub { POSIX::_exit(3) };
        $SIG{PIPE} = 'IGNORE';    # a connection closed under it is a finding, not a death
        alarm 30;
        my $len = length $drip[0]{bytes};
        my %err;
        for my $i (0 .. $len - 1) {
            for my $d (grep { !$err{ $_->{port} } } @drip) {
                syswrite($d->{sock}, substr($d->{bytes}, $i, 1)) or $err{ $d->{port} } = "write $i: $!";
            }
            sleep 0.05;
        }
        my @res;
        for my $d (@drip) {
            my $buf = '';
            while (!$err{ $d->{port} } && (length($buf) < 4 || length($buf) < 4 + unpack('N', $buf))) {
                my $n = sysread($d->{sock}, $buf, 65536, length $buf);
                $err{ $d->{port} } = defined $n ? 'closed' : "read: $!" unless $n;
            }
            my $f = length($buf) >= 8 ? substr($buf, 4) : '';
            push @res, { corr => length $f ? unpack('N', $f) : -1, brokers => [ length $f ? metadata_v1_brokers($f) : () ],
                         port => $d->{port}, err => $err{ $d->{port} } };
        }
        print $wr encode_json(\@res);
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    close $_->{sock} for @drip;
    my $t0 = time;
    ok(kcat_roundtrip('during', 300), 'kcat round trip during the storm');
    my $during = time - $t0;
    my $rss_storm = rss_kb($pid);

    # Bad sizes are closed by lookout at once; the rest wait for bytes that never come.
    my %closed;
    my $sel = IO::Select->new(map { $_->{sock} } @shot);
    my $end = time + 10;
    while ($sel->count && time < $end) {
        for my $s ($sel->can_read(0.2)) {
            my $n = sysread($s, my $x, 4096);
            next if $n;
            $closed{ $s->sockport } = 1;
            $sel->remove($s);
        }
        last unless grep { defined bad_size($_->{bytes}) && !$closed{ $_->{port} } } @shot;
    }
    my @bad = grep { defined bad_size($_->{bytes}) } @shot;
    my @cut = grep { $_->{kind} eq 'truncated' } @shot;
    # A random frame whose size is in range goes to the broker, which may refuse it.
    my @odd = grep { $_->{kind} eq 'random' && !defined bad_size($_->{bytes}) } @shot;
    is(scalar(grep { $closed{ $_->{port} } } @bad), scalar @bad, scalar(@bad) . ' bad size fields: each closed by lookout');
    is(scalar(grep { $closed{ $_->{port} } } @cut), 0, scalar(@cut) . ' frames cut short: still open (more may come)');
    note(scalar(@odd) . ' of the random ones had a size in range, and went to a broker: '
         . (join(', ', map { $closed{ $_->{port} } ? 'closed' : 'open' } @odd) || 'none'));
    close $_->{sock} for @cut, @odd;

    my $json = '';
    1 while sysread($rd, $json, 65536, length $json);
    waitpid($child, 0);
    is($?, 0, 'the dripping child finished in time');
    my $res = eval { decode_json($json) } // [];
    is_deeply([ map { $_->{corr} } @$res ], [ map { 2000 + $_ } 0 .. 39 ], 'each dripped request answered, to its correlation id')
        or diag(join "\n", map { my $p = $_->{port}; "client port $p: $_->{err}: " . join(' | ', grep { /127\.0\.0\.1:$p\b/ } split /\n/, $lk->log) }
                           grep { $_->{err} } @$res);
    my $map = join ',', map { "$_ 127.0.0.1 $ext_of{$_}" } sort keys %ext_of;
    is(scalar(grep { $map eq join ',', map { "@$_" } sort { $a->[0] <=> $b->[0] } @{ $_->{brokers} } } @$res),
       40, '... each naming lookout\'s addresses only, by node id');
    note(sprintf 'the drip lasted %.1f s; kcat\'s round trip in the storm %.1f s', 0.05 * length($drip[0]{bytes}), $during);

    # Each bad frame is in the log, with its client's address and the listener.
    my @want = map {
        my ($b, $ctx) = ($_->{bytes}, qr/, client: 127\.0\.0\.1:$_->{port}, server: 127\.0\.0\.1:$boot\b/);
        my $sz = length($b) >= 4 ? unpack('l>', $b) : undef;
        my $short = defined $sz ? 4 + $sz - length $b : undef;
        my $cut = length($b) < 12 ? qr/client closed the connection ${\ length $b} bytes into a request frame's 12-byte prefix/
            : $_->{kind} eq 'truncated' ? qr/client closed the connection $short bytes short of the end of a request frame of $sz bytes \(api key 3 v1, correlation id ${\ unpack('x8N', $b)}\)/
            : qr/client closed the connection $short bytes short of the end of a request frame of $sz bytes \(api key -?\d+ v-?\d+, correlation id -?\d+\)|broker k\/\d closed the connection; closing/;
        defined bad_size($b) ? qr/request frame of $sz bytes \([^)]*\); closing$ctx/ : qr/(?:$cut)$ctx/;
    } @bad, @cut, @odd;
    wait_until(sub { my $log = $lk->log; !(grep { $log !~ $_ } @want) }, 10);
    my $log = $lk->log;
    my @missing = grep { $log !~ $_ } @want;
    is(scalar @missing, 0, scalar(@want) . ' bad frames logged, each with its client and listener')
        or diag(explain([ @missing[0 .. ($#missing > 4 ? 4 : $#missing)] ]));

    ok(kcat_roundtrip('after', 300), 'kcat round trip after the storm');
    ok($lk->alive, 'lookout still running');
    # lookout's VmRSS before the storm, in it and after. Measured here (x86-64 Debian 12, one
    # worker): the plain build +1.0-1.3 MiB in the storm and after it; under ASan +4.3 MiB in
    # it and +6.7-7.7 MiB after (its 16 MiB quarantine holds freed memory: tests/check.sh).
    # The bound, +16 MiB, is twice the worst of those. What it catches is memory sized by
    # what a client claims: the 35 huge frames claim 100 MiB to 1.9 GiB each, and a proxy
    # that reserved or buffered a frame by its size field would pass it at once. Connections
    # left behind show in the descriptor count (and, under ASan, in LeakSanitizer at exit).
    my $fds1;
    wait_until(sub { $fds1 = () = glob("/proc/$pid/fd/*"); $fds1 <= $fds0 + 4 }, 10);
    cmp_ok($fds1, '<=', $fds0 + 4, "open descriptors back to $fds1 (before: $fds0)");
    my $rss1 = rss_kb($pid);
    cmp_ok($rss_storm - $rss0, '<', 16 * 1024, "VmRSS $rss0 kB before, $rss_storm kB in the storm (limit +16 MiB)");
    cmp_ok($rss1 - $rss0, '<', 16 * 1024, "VmRSS $rss0 kB before, $rss1 kB after (limit +16 MiB)");
};

ok($lk->alive, 'lookout still running');
$lk->stop;
$m->stop;
done_testing();
