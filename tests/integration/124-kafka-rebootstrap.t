#!/usr/bin/perl
# 124-kafka-rebootstrap.t: KIP-1102 while draining (issue 19). Once SIGTERM has come, a
# Metadata v13 request on a Kafka connection that lookout keeps open for a request under way
# is answered by lookout itself, ErrorCode REBOOTSTRAP_REQUIRED (129), in its turn after the
# answers the broker owes, so that the client bootstraps again from another lookout; it never
# reaches the broker. Metadata v12 and older have no top-level ErrorCode: as every other
# request, they are not read once draining (the client sends them again on its next
# connection). Not draining, a Metadata v13 goes to the broker as always.
#
# Clients that read the answer: librdkafka 2.11+ (rd_kafka_handle_Metadata calls
# rd_kafka_rebootstrap on it) and the Java client 4.0+. Debian's librdkafka 2.0.2 (kcat) and
# kafka-python 2.0.2 never send Metadata v13, so raw frames carry most subtests; the last
# runs a real librdkafka consumer (tests/kafka/kafka-rebootstrap-check) and skips unless the
# librdkafka it loads is 2.11 or newer. It loads the librdkafka 2.15.1 that tests/deps.sh
# builds from the npm package's bundled source (tests/kafka/rdkafka-new.sh, into
# /var/cache/lookout-tests), or LOOKOUT_LIBRDKAFKA_DIR=DIR (a directory holding a newer
# librdkafka.so.1) when set; either goes first on LD_LIBRARY_PATH.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use KafkaTestBroker;

my $dir = tmp_dir();

# A Kafka broker. It answers a Metadata request (v12 or v13, flexible) with itself as node 1
# at its own (internal) address and, in v13, top-level ErrorCode 0; any other request with
# two zero bytes after the correlation id; a request whose client id is 's' after 1.2 s. It
# writes DIR/kafka-got-ID when a request with client id ID came (lookout sends brokers
# correlation ids of its own).
my ($kport, $kpid) = KafkaMock::scripted_broker(sub {
    my ($req, $kport) = @_;
    my ($key, $ver, $corr) = unpack('nnN', $req);
    my $id = substr($req, 10, 1);
    spew("$dir/kafka-got-$id", '');
    sleep 1.2 if $id eq 's';
    return pack('N', $corr) . "\0\0" if $key != 3;
    # header v1 tags; ThrottleTimeMs; Brokers [{1, host, port, Rack null, tags}]; ClusterId
    # null; ControllerId 1; Topics []; ErrorCode (v13); tags
    return pack('N', $corr) . "\0" . pack('N', 0) . "\x02" . pack('N', 1) . "\x0a127.0.0.1" . pack('N', $kport)
        . "\0\0" . "\0" . pack('N', 1) . "\x01" . ($ver >= 13 ? pack('n', 0) : '') . "\0";
});

# A Produce v3 request (streamed, never rewritten) with correlation id CORR and client id ID.
sub produce {
    my ($corr, $id) = @_;
    return KafkaMock::frame(pack('nnN', 0, 3, $corr) . pack('n', 1) . $id);
}

# A Metadata request of version VER (12 or 13: flexible, request header v2) with correlation
# id CORR and client id ID: Topics null (all), AllowAutoTopicCreation true,
# IncludeTopicAuthorizedOperations false, no tags.
sub metadata {
    my ($ver, $corr, $id) = @_;
    return KafkaMock::frame(pack('nnN', 3, $ver, $corr) . pack('n', 1) . $id . "\0" . "\0\x01\0\0");
}

# A flexible Metadata answer (v9+, no tagged fields anywhere), decoded: correlation id,
# throttle, brokers [[id, host, port]], cluster id, controller, topic count, and for v13 the
# top-level ErrorCode; undef when it does not decode exactly to its end.
sub decode_metadata {
    my ($f, $ver) = @_;
    my $o = 0;
    my $take = sub { my $n = shift; die "short\n" if $o + $n > length $f; my $s = substr($f, $o, $n); $o += $n; $s };
    my $uv = sub { my ($v, $sh) = (0, 0); while (1) { my $b = ord $take->(1); $v |= ($b & 0x7f) << $sh; last unless $b & 0x80; $sh += 7 } $v };
    my $str = sub { my $n = $uv->(); $n == 0 ? undef : $take->($n - 1) };
    my %m;
    my $ok = eval {
        $m{corr} = unpack('l>', $take->(4));
        die "header tags\n" if $uv->() != 0;
        $m{throttle} = unpack('l>', $take->(4));
        my $nb = $uv->() - 1;
        for (1 .. $nb) {
            my $id = unpack('l>', $take->(4));
            my $host = $str->();
            my $port = unpack('l>', $take->(4));
            $str->();
            die "broker tags\n" if $uv->() != 0;
            push @{ $m{brokers} }, [ $id, $host, $port ];
        }
        $m{brokers} //= [];
        $m{cluster} = $str->();
        $m{controller} = unpack('l>', $take->(4));
        $m{topics} = $uv->() - 1;
        die "topics\n" if $m{topics} != 0;    # the tests ask none that have any
        $m{error} = unpack('s>', $take->(2)) if $ver >= 13;
        die "tags\n" if $uv->() != 0;
        die "trailing bytes\n" if $o != length $f;
        1;
    };
    return $ok ? \%m : undef;
}

sub start {
    my ($name) = @_;
    my ($kboot, $kext) = free_ports(2);
    my $lk = start_lookout(dir => $dir, name => $name, conf => KafkaMock::lookout_conf(
        nodes => [ [ 1, "127.0.0.1:$kport", $kext ] ], boot => $kboot, lookout => "drain_timeout = 8s\n"));
    ok($lk->started, "lookout ($name) started") or BAIL_OUT('lookout did not start');
    return ($lk, $kboot, $kext);
}

# A connection with a slow request (correlation id 7) under way at the broker, and lookout
# told to stop.
sub draining_with_slow_request {
    my ($name, $slow) = @_;
    my ($lk, $kboot) = start($name);
    unlink "$dir/kafka-got-s";
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $kboot, Proto => 'tcp', Timeout => 5)
        or die "connect: $!";
    syswrite($s, $slow // produce(7, 's'));
    wait_until(sub { -e "$dir/kafka-got-s" }, 5) or diag('the slow request did not reach the broker');
    $lk->signal('TERM');
    wait_until(sub { $lk->log =~ /SIGTERM: stopping/ }, 3) or diag('no SIGTERM line');
    return ($lk, $s);
}

subtest 'not draining: Metadata v13 goes to the broker, rewritten' => sub {
    my ($lk, $kboot, $kext) = start('live');
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $kboot, Proto => 'tcp', Timeout => 5);
    syswrite($s, metadata(13, 5, 'a'));
    my $m = decode_metadata(KafkaMock::read_frame($s, 5) // '', 13);
    ok($m, 'a Metadata v13 answer that decodes') or return;
    is($m->{corr}, 5, '... to its correlation id');
    is($m->{error}, 0, "... the broker's top-level ErrorCode 0");
    is_deeply($m->{brokers}, [ [ 1, '127.0.0.1', $kext ] ], '... naming the external address');
    ok(-e "$dir/kafka-got-a", 'the broker got it');
    $lk->stop;
};

subtest 'draining: Metadata v13 is answered REBOOTSTRAP_REQUIRED by lookout, in its turn' => sub {
    my ($lk, $s) = draining_with_slow_request('v13');
    my $t0 = time;
    syswrite($s, metadata(13, 8, 'm') . metadata(13, -3, 'm'));
    my ($f, $how) = KafkaMock::read_frame($s, 5);
    my $t7 = time;
    is($f && unpack('N', $f), 7, 'the answer to the request under way comes first') or diag("read: $how");
    cmp_ok($t7 - $t0, '>', 0.3, sprintf('... when the broker gave it (%.2f s)', $t7 - $t0));
    for my $corr (8, -3) {
        ($f, $how) = KafkaMock::read_frame($s, 3);
        my $m = decode_metadata($f // '', 13);
        ok($m, "then a Metadata v13 answer that decodes to its end (correlation id $corr)") or diag("read: $how");
        next unless $m;
        is($m->{corr}, $corr, '... with the correlation id of its request');
        is($m->{error}, 129, '... top-level ErrorCode 129, REBOOTSTRAP_REQUIRED');
        is($m->{throttle}, 0, '... ThrottleTimeMs 0');
        is_deeply($m->{brokers}, [], '... no brokers');
        is($m->{controller}, -1, '... ControllerId -1');
        ok(!defined $m->{cluster}, '... ClusterId null');
    }
    my $t1 = time;
    ($f, $how) = KafkaMock::read_frame($s, 6);
    my $lingered = time - $t1;
    is($how, 'eof', 'then the connection closes');
    cmp_ok($lingered, '>', 1.5, sprintf('... once the client has had 2 s to leave first (%.2f s)', $lingered));
    cmp_ok($lingered, '<', 4, '... and not much later');
    ok(!-e "$dir/kafka-got-m", 'the broker never got them');
    $lk->wait_exit(10);
    is($lk->exit_code, 0, 'lookout exits 0');
    my @lines = $lk->log =~ /(Metadata v13 \(correlation id 8\) answered REBOOTSTRAP_REQUIRED)/g;
    is(scalar @lines, 1, 'logged, once for the connection');
    $lk->check_sanitizers;
};

subtest 'draining: behind a Metadata answer lookout holds and rewrites' => sub {
    my ($lk, $s) = draining_with_slow_request('held', metadata(12, 7, 's'));
    syswrite($s, metadata(13, 8, 'm'));
    my ($f, $how) = KafkaMock::read_frame($s, 5);
    my $m = decode_metadata($f // '', 12);
    ok($m && $m->{corr} == 7 && @{ $m->{brokers} } == 1 && $m->{brokers}[0][2] != $kport,
       "the broker's Metadata v12 answer first, rewritten") or diag("read: $how");
    ($f, $how) = KafkaMock::read_frame($s, 3);
    $m = decode_metadata($f // '', 13);
    ok($m && $m->{corr} == 8 && $m->{error} == 129, "then lookout's REBOOTSTRAP_REQUIRED") or diag("read: $how");
    ($f, $how) = KafkaMock::read_frame($s, 6);
    is($how, 'eof', 'then the connection closes');
    $lk->wait_exit(10);
    is($lk->exit_code, 0, 'lookout exits 0');
    $lk->check_sanitizers;
};

subtest 'draining: a client that leaves after the answer is not waited for' => sub {
    my ($lk, $s) = draining_with_slow_request('leaves');
    syswrite($s, metadata(13, 8, 'm'));
    KafkaMock::read_frame($s, 5);
    my $m = decode_metadata(KafkaMock::read_frame($s, 3) // '', 13);
    ok($m && $m->{error} == 129, 'REBOOTSTRAP_REQUIRED') or return;
    my $t0 = time;
    close $s;
    $lk->wait_exit(10);
    my $took = time - $t0;
    is($lk->exit_code, 0, 'lookout exits 0');
    cmp_ok($took, '<', 1.5, sprintf('as soon as the client closed (%.2f s)', $took));
    $lk->check_sanitizers;
};

subtest 'draining: Metadata v12 (no top-level ErrorCode) is not read, as any request' => sub {
    my ($lk, $s) = draining_with_slow_request('v12');
    syswrite($s, metadata(12, 8, 'n'));
    my ($f, $how) = KafkaMock::read_frame($s, 5);
    is($f && unpack('N', $f), 7, 'the request under way is answered') or diag("read: $how");
    ($f, $how) = KafkaMock::read_frame($s, 3);
    is($how, 'eof', '... then the connection closes, the Metadata v12 unanswered');
    ok(!-e "$dir/kafka-got-n", 'the broker never got it');
    $lk->wait_exit(10);
    is($lk->exit_code, 0, 'lookout exits 0');
    $lk->check_sanitizers;
};

subtest 'draining: after a request lookout does not read, nothing more is read' => sub {
    my ($lk, $s) = draining_with_slow_request('mixed');
    syswrite($s, metadata(13, 8, 'm') . produce(9, 'p') . metadata(13, 10, 'm'));
    my @got;
    while (1) {
        my ($f, $how) = KafkaMock::read_frame($s, 5);
        push(@got, $how), last unless $f;
        push @got, unpack('l>', $f);
    }
    is_deeply(\@got, [ 7, 8, 'eof' ], 'answers to 7 (the broker) and 8 (lookout), then the close');
    ok(!-e "$dir/kafka-got-p", 'the Produce never reached the broker');
    $lk->wait_exit(10);
    is($lk->exit_code, 0, 'lookout exits 0');
    $lk->check_sanitizers;
};

# The client side: librdkafka 2.11+ (kafka-rebootstrap-check, built by tests/build.sh against
# the installed librdkafka's headers and run with $ENV{LOOKOUT_LIBRDKAFKA_DIR}, else the
# library tests/kafka/rdkafka-new.sh built, first on LD_LIBRARY_PATH). Two lookouts in front of one broker; the client's
# bootstrap.servers names both, lookout A first (B is not up yet, so the client starts on
# A). A consumer with a long Fetch poll under way on A's address for node 1, Metadata every
# 200 ms: A drains, answers a Metadata v13 REBOOTSTRAP_REQUIRED, the client bootstraps again
# and goes on fetching through B.
subtest 'librdkafka 2.11+: it bootstraps again and moves to the other lookout' => sub {
    local $ENV{LD_LIBRARY_PATH} = $ENV{LD_LIBRARY_PATH};
    my ($check, $v) = KafkaMock::rebootstrap_check();
    plan skip_all => $v unless $check;
    diag("client: librdkafka $v");
    my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
    my $tb = KafkaTestBroker->start(dir => $dir, nodes => [ { id => 1, host => 'internal-1.kafka.test', port => 0, bind => '127.0.0.1:0' } ],
                                    topics => [ { name => 'lk-rb', partitions => 1 } ]);
    my ($bootA, $extA, $bootB, $extB) = free_ports(4);
    my %lk;
    my $conf = sub {
        my ($boot, $ext) = @_;
        return KafkaMock::lookout_conf(nodes => [ [ 1, $tb->node(1)->{listen}, $ext ] ], boot => $boot,
                                       lookout => "drain_timeout = 8s\nlog.kafka = all\nlog_level = debug\n");
    };
    $lk{A} = start_lookout(dir => $dir, name => 'rbA', conf => $conf->($bootA, $extA));
    ok($lk{A}->started, 'lookout A started') or return;
    my $out = "$dir/rebootstrap-check.out";
    my $pid = fork // die;
    if ($pid == 0) {
        open STDOUT, '>', $out;
        open STDERR, '>&', \*STDOUT;
        { no warnings "exec"; exec $check, "127.0.0.1:$bootA,127.0.0.1:$bootB", 'lk-rb', 25; }
        POSIX::_exit(127);
    }
    ok(wait_until(sub { $lk{A}->log =~ /\bFetch\b/ }, 10), 'the client fetches through A') or diag(slurp($out));
    $lk{B} = start_lookout(dir => $dir, name => 'rbB', conf => $conf->($bootB, $extB));
    ok($lk{B}->started, 'lookout B started') or return;
    sleep 0.5;
    $lk{A}->signal('TERM');
    ok(wait_until(sub { $lk{A}->log =~ /answered REBOOTSTRAP_REQUIRED/ }, 10), 'A answered a Metadata v13 REBOOTSTRAP_REQUIRED');
    ok(wait_until(sub { (slurp($out) // '') =~ /top level error code 129/ }, 10), 'the client read error 129 in it');
    ok(wait_until(sub { (slurp($out) // '') =~ /Starting re-bootstrap sequence/ }, 10), '... and bootstrapped again');
    ok(wait_until(sub { $lk{B}->log =~ /\bFetch\b/ }, 15), 'then it fetches through B');
    $lk{A}->wait_exit(10);
    is($lk{A}->exit_code, 0, 'A exited 0');
    kill 'TERM', $pid;
    waitpid($pid, 0);
    $lk{B}->stop;
    $tb->stop;
    diag(join "\n", grep { /error code 129|re-bootstrap|REBOOTSTRAP/ } split /\n/, slurp($out) // '') if $ENV{TEST_VERBOSE};
};

kill 'TERM', $kpid;
waitpid($kpid, 0);
done_testing();
