#!/usr/bin/perl
# 102-kafka-versions.t: every version of every response that names brokers, through lookout
# (issue 8 item 4), against the spec-encoded test broker: Metadata 0-13, FindCoordinator 0-6,
# DescribeCluster 0-2, Produce 10-13 and Fetch 16-18 (NodeEndpoints). The broker advertises
# names only it uses (internal-N.kafka.test); every answer that reaches the client through
# lookout names lookout's addresses and never those, also as tshark's Kafka dissector decodes
# them (the versions it knows); kafkajs (npm) reads its newest Metadata (v6) through lookout.
# Unknown API keys and versions pass through without closing the connection (KAFKA-21160).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX ();
use Socket ();
use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use Tshark;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $top = repo_top();
my $PROBE = "$top/tests/integration/bin/kafka-probe";
my $TOPIC = 'lk-v';

# Each node listens on a port of its own on 127.0.0.1 but advertises a name only it uses.
my @nodes = map { { id => $_, host => "internal-$_.kafka.test", port => 0, bind => '127.0.0.1:0', rack => "r$_" } } 1 .. 3;
my $tb = KafkaTestBroker->start(dir => $dir, nodes => \@nodes, topics => [ { name => $TOPIC, partitions => 3 } ],
                                unknown => 'echo', api_versions => { 3 => [ 0, 15 ], 0 => [ 3, 14 ], 1 => [ 4, 19 ] },
                                coalesce => JSON::PP::true);
my @ext = map { free_port() } 1 .. 3;
my $boot = free_port();
my $lk = start_lookout(dir => $dir, conf => KafkaMock::lookout_conf(
    nodes => [ map { [ $_, $tb->node($_)->{listen}, $ext[$_ - 1] ] } 1 .. 3 ], boot => $boot));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub probe {
    my (@args) = @_;
    my $r = KafkaMock::run([ $PY, $PROBE, '--topic', $TOPIC, '--topic-id', $tb->topic($TOPIC)->{id},
                             '--partitions', 3, @args ], timeout => 60);
    return ($r, map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $r->{out});
}

my $internal = unpack('H*', 'internal-');
my %ext_port = map { (unpack('H*', pack('n', $_)) => 1) } @ext;

for my $case ([ 'Metadata', '0-13' ], [ 'FindCoordinator', '0-6' ], [ 'DescribeCluster', '0-2' ],
              [ 'Produce', '10-13' ], [ 'Fetch', '16-18' ]) {
    my ($api, $versions) = @$case;
    subtest "$api $versions" => sub {
        my ($r, @lines) = probe("127.0.0.1:$boot", "$api:$versions");
        my ($lo, $hi) = split /-/, $versions;
        is(scalar @lines, $hi - $lo + 1, 'one answer per version') or diag($r->{err});
        for my $l (@lines) {
            my $v = $l->{api_version};
            ok(!$l->{closed} && defined $l->{response_hex}, "v$v answered") or next;
            is($l->{response_correlation_id}, $l->{correlation_id}, "v$v: its own correlation id");
            unlike($l->{response_hex}, qr/$internal/, "v$v: no internal host left");
            like($l->{response_hex}, qr/7f000001|3132372e302e302e31/, "v$v: lookout's host in it");
        }
        # and the broker itself did advertise its own names
        my ($d) = (probe($tb->bootstrap, "$api:$hi"))[1];
        like($d->{response_hex} // '', qr/$internal/, "direct v$hi: the broker's names are there");
    };
}

# tshark's Kafka dissector, a decoder nobody here wrote, reads lookout's rewritten answers on
# the client's side of lookout and the broker's own on the other, captured together.
subtest 'tshark decodes lookout\'s rewritten Metadata, FindCoordinator and DescribeCluster' => sub {
    plan skip_all => Tshark::missing() if Tshark::missing();
    my @node_ports = map { (split /:/, $tb->node($_)->{listen})[1] } 1 .. 3;
    my ($out, @sent);
    my ($pcap, $why) = Tshark::capture([ $boot, @node_ports ], sub {
        ($out, @sent) = probe("127.0.0.1:$boot", 'Metadata:0-13', 'FindCoordinator:0-6', 'DescribeCluster:0-2');
    }, $dir);
    plan skip_all => "cannot capture: $why" unless $pcap;
    is($out->{exit}, 0, 'kafka-probe through lookout: every request answered') or diag($out->{err});
    my $ver = Tshark::version();
    my @pdus = @{ Tshark::kafka_pdus($pcap, [ $boot, @node_ports ]) };
    my @client = grep { $_->{dir} eq 'response' && $_->{port} == $boot } @pdus;
    my @broker = grep { $_->{dir} eq 'response' && $_->{port} != $boot } @pdus;
    is(scalar @client, scalar @sent, 'tshark found every answer lookout sent the client');
    is(scalar @broker, scalar @sent, '... and as many from the broker behind it');
    my $ours = join '|', map { "127\\.0\\.0\\.1:$_" } @ext;
    my (%known, %unknown);
    for my $i (0 .. $#sent) {
        my ($x, $pdu, $up) = ($sent[$i], $client[$i] // {}, $broker[$i] // {});
        my ($api, $v) = ($x->{api}, $x->{api_version});
        # Not tshark's: it says so, or could not even match the answer to its request.
        if ($pdu->{unsupported} || ($pdu->{api} // '') ne $api || $pdu->{version} != $v) {
            push @{ $unknown{$api} }, $v;
            next;
        }
        push @{ $known{$api} }, $v;
        ok(!$up->{unsupported} && ($up->{api} // '') eq $api && $up->{version} == $v, "$api v$v: the broker's answer beside it")
            or next;
        # Node -1 (no coordinator) has no address to rewrite: lookout leaves it alone.
        my @got = grep { $_->[0] >= 0 } Tshark::endpoints($pdu);
        my @had = grep { $_->[0] >= 0 } Tshark::endpoints($up);
        ok(@got && @had, "$api v$v: endpoints decoded on both sides") or next;
        is_deeply([ map { $_->[0] } @got ], [ map { $_->[0] } @had ], "$api v$v: the same node ids as the broker's");
        is_deeply([ map { "$_->[0] $_->[1]:$_->[2]" } @got ], [ map { "$_->[0] 127.0.0.1:$ext[$_->[0] - 1]" } @got ],
                  "$api v$v: each at its own address on lookout");
        ok(!(grep { "$_->[1]:$_->[2]" !~ /^(?:$ours)$/ } @got), "$api v$v: no other host:port");
        ok(!(grep { $_->[1] !~ /^internal-\d\.kafka\.test$/ } @had), "$api v$v: where the broker named internal hosts only");
    }
    # tshark marks what it cannot parse as malformed, versions it does not know included;
    # of those it knows, no request or answer on either side of lookout may be.
    my $knows = sub { my ($p) = @_; defined $p->{api} && grep { $_ == $p->{version} } @{ $known{ $p->{api} } // [] } };
    my @malformed = grep { $_->{malformed} } @pdus;
    is(scalar(grep { $knows->($_) } @malformed), 0,
       'no PDU of a version tshark knows is malformed, requests and answers, on either side')
        or diag(explain([ map { $_->{summary} } grep { $knows->($_) } @malformed ]));
    note("tshark $ver decodes, through lookout: " . join('; ', map { "$_ v" . join(',', @{ $known{$_} }) } sort keys %known));
    note("tshark $ver does not know: " . join('; ', map { "$_ v" . join(',', @{ $unknown{$_} }) } sort keys %unknown)
         . ' (' . scalar(@malformed) . ' PDUs of those are malformed to it)');
    # tshark 4.0 knows Metadata v0-9 and FindCoordinator v0-3, and no DescribeCluster at all:
    # a check that quietly checked nothing would fail here.
    ok(@{ $known{Metadata} // [] } >= 10 && @{ $known{FindCoordinator} // [] } >= 4,
       'tshark decoded at least Metadata v0-9 and FindCoordinator v0-3');
};

subtest 'kafkajs reads lookout\'s answer to its newest Metadata' => sub {
    plan skip_all => KafkaMock::kafkajs_missing() if KafkaMock::kafkajs_missing();
    my $r = KafkaMock::run([ 'node', "$top/tests/integration/bin/kafkajs-check", "127.0.0.1:$boot", '--describe',
                             '--topic', $TOPIC ], timeout => 60);
    my ($j) = map { my $x = eval { decode_json($_) }; $x && $x->{describe} ? ($x->{describe}) : () } split /\n/, $r->{out};
    ok($j, 'kafkajs described the cluster') or return diag("exit $r->{exit}: $r->{err}");
    my %v = map { /^(\w+) v(\d+)$/ ? ($1 => $2) : () } map { @$_ } values %{ $j->{requests} };
    is($v{Metadata}, 6, 'with Metadata v6, the newest kafkajs speaks (the mock stops at v2)');
    is_deeply($j->{brokers}, [ map { [ $_, '127.0.0.1', $ext[$_ - 1] ] } 1 .. 3 ], 'brokers: lookout\'s addresses, by node id');
    is_deeply($j->{topic}, [ [ 0, 1 ], [ 1, 2 ], [ 2, 3 ] ], "$TOPIC: the partition leaders");
    my %ours = map { ("127.0.0.1:$_" => 1) } $boot, @ext;
    ok(!(grep { !$ours{$_} } @{ $j->{dialed} }), 'kafkajs dialed lookout only: ' . join(' ', @{ $j->{dialed} }));
};

subtest 'unknown api keys, versions and headers pass through byte for byte' => sub {
    # An api key nobody has, Metadata at a version past what lookout rewrites, and a
    # "header v3" request (bytes after the prefix no version today has): each frame reaches
    # the broker unchanged, the broker echoes it (unknown => echo), and the client gets the
    # answer on the same connection (KAFKA-21160: never closed for being new).
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    my @frames = ([ 999, 0, 71, "\xff\xff" . 'opaque body' ], [ 3, 99, 72, "\x00\x02id\x00" . 'future' ],
                  [ 18, 9, 73, "\x00\x00\x01\x02\x03" . 'header v3?' ]);
    for my $f (@frames) {
        my ($key, $ver, $corr, $rest) = @$f;
        my $payload = pack('nnN', $key, $ver, $corr) . $rest;
        syswrite($s, pack('N', length $payload) . $payload);
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 10;
        my $buf = '';
        eval {
            while (length($buf) < 4 || length($buf) < 4 + unpack('N', $buf)) {
                my $n = sysread($s, my $chunk, 65536);
                last unless $n;
                $buf .= $chunk;
            }
        };
        alarm 0;
        my ($size, $rcorr) = length($buf) >= 8 ? unpack('NN', $buf) : (0, -1);
        if ($key == 18) {
            # ApiVersions the broker cannot read: its error-35 answer, passed through
            is($rcorr, $corr, "ApiVersions v$ver: answered on the same connection");
            next;
        }
        is($rcorr, $corr, "api $key v$ver: the answer to correlation id $corr");
        is(substr($buf, 8), $rest, "api $key v$ver: the bytes after the prefix arrived unchanged");
    }
    # (with correlation ids of lookout's own: the client's came back above)
    my %sent = map { ("$_->[0]/$_->[1]" => 1) } @frames;
    my @seen = grep { $sent{"$_->{api_key}/$_->{api_version}"} } $tb->requests;
    is_deeply([ map { [ $_->{api_key}, $_->{api_version} ] } @seen ],
              [ map { [ @$_[0, 1] ] } @frames ], 'the broker got all three as sent');
    close $s;
};

subtest 'ApiVersions: what lookout cannot rewrite is clamped, the rest kept' => sub {
    # The broker advertises Metadata 0-15, Produce 3-14 and Fetch 4-19; through lookout the
    # maxima become 13, 13 and 18 (what it rewrites), and nothing else changes.
    for my $v (0 .. 2) {
        my ($direct) = (probe($tb->bootstrap, "ApiVersions:$v"))[1];
        my ($r, $via) = probe("127.0.0.1:$boot", "ApiVersions:$v");
        my %d = api_versions($direct->{response_hex} // '');
        my %l = api_versions($via->{response_hex} // '');
        is_deeply([ @{ $d{3} // [] }, @{ $d{0} // [] }, @{ $d{1} // [] } ], [ 0, 15, 3, 14, 4, 19 ],
                  "v$v direct: Metadata 0-15, Produce 3-14, Fetch 4-19");
        is_deeply([ @{ $l{3} // [] }, @{ $l{0} // [] }, @{ $l{1} // [] } ], [ 0, 13, 3, 13, 4, 18 ],
                  "v$v through lookout: 0-13, 3-13, 4-18");
        delete @d{0, 1, 3};
        delete @l{0, 1, 3};
        is_deeply(\%l, \%d, "v$v: every other api as the broker said");
    }
};

subtest 'Produce with acks=0 gets no answer; the next request still gets its own' => sub {
    my ($r, @lines) = probe('--acks', 0, "127.0.0.1:$boot", 'Produce:9', 'Metadata:12', 'Produce:9', 'Metadata:1');
    is(scalar @lines, 4, 'four requests') or diag($r->{err});
    is_deeply([ map { defined $_->{response_hex} ? 1 : 0 } @lines ], [ 0, 1, 0, 1 ],
              'answers to the Metadata requests only');
    is_deeply([ map { $_->{response_correlation_id} // 'none' } grep { defined $_->{response_hex} } @lines ],
              [ map { $_->{correlation_id} } grep { defined $_->{response_hex} } @lines ],
              '... each with its own correlation id');
};

subtest 'requests pipelined in one write: answers in order, streamed ones and rewritten ones' => sub {
    # lookout forwards whole pieces of one read at once, and holds only the answers it may
    # rewrite: a held answer between streamed ones must keep its place. The test broker
    # coalesces answers to pipelined requests, so they reach lookout in one read.
    my @targets = ('Produce:9', 'Metadata:12', 'Fetch:11', 'Metadata:1', 'Produce:12', 'ApiVersions:3', 'Fetch:4',
                   'FindCoordinator:4');
    my ($r, @lines) = probe('--pipeline', "127.0.0.1:$boot", @targets);
    is(scalar @lines, scalar @targets, 'one answer per request') or diag($r->{err});
    is_deeply([ map { $_->{response_correlation_id} // 'none' } @lines ], [ 1 .. scalar @targets ],
              'each with its own correlation id, in order');
    for my $l (grep { $_->{api} =~ /^(Metadata|FindCoordinator)$/ || ($_->{api} eq 'Produce' && $_->{api_version} >= 10) } @lines) {
        unlike($l->{response_hex} // '', qr/$internal/, "$l->{api} v$l->{api_version}: no internal host left");
        like($l->{response_hex} // '', qr/7f000001|3132372e302e302e31/, "... lookout's host in it");
    }
};

# The (api_key => [min, max]) of a v0-2 ApiVersions response (hex, without its size field):
# correlation id, error code, int32 count, then key, min, max as int16.
sub api_versions {
    my $b = pack('H*', $_[0]);
    return () if length($b) < 10;
    my ($corr, $err, $n) = unpack('NnN', $b);
    my %v;
    for my $i (0 .. $n - 1) {
        my ($k, $lo, $hi) = unpack('nnn', substr($b, 10 + 6 * $i, 6));
        $v{$k} = [ $lo, $hi ];
    }
    return %v;
}

subtest 'unknown_api = drop closes a connection that sends an unknown api key' => sub {
    my $boot2 = free_port();
    (my $conf2 = slurp($lk->conf)) =~ s/^bootstrap\.servers = .*$/bootstrap.servers = 127.0.0.1:$boot2\nunknown_api = drop/m;
    $conf2 =~ s/EXTERNAL:\/\/127\.0\.0\.1:(\d+)/'EXTERNAL:\/\/127.0.0.1:' . free_port()/ge;
    my $lk2 = start_lookout(dir => $dir, name => 'drop', conf => $conf2);
    ok($lk2->started, 'a lookout with unknown_api = drop') or return diag($lk2->log);
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot2, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    my $payload = pack('nnN', 999, 0, 81) . "\xff\xff";
    syswrite($s, pack('N', length $payload) . $payload);
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 10;
    my $n = eval { sysread($s, my $buf, 64) };
    alarm 0;
    is($n, 0, 'closed, no answer');
    like($lk2->log, qr/api key 999, unknown \(unknown_api = drop\)/, 'logged');
    my ($r, $l) = probe("127.0.0.1:$boot2", 'Metadata:12');
    ok($l && defined $l->{response_hex}, 'known apis still served');
    $lk2->stop;
};

# Garbage at scale (200 connections at once, while kcat works) is 103-kafka-clients.t's.
subtest 'a request one byte at a time' => sub {
    # Metadata v0 for every topic, client id "x", written a byte per write.
    my $payload = pack('nnN', 3, 0, 91) . pack('n', 1) . 'x' . pack('N', 0);
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    $s->setsockopt(Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
    for my $byte (split //, pack('N', length $payload) . $payload) {
        syswrite($s, $byte);
        select(undef, undef, undef, 0.002);
    }
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 10;
    my $buf = '';
    eval { while (length($buf) < 8) { sysread($s, my $c, 65536) or last; $buf .= $c } };
    alarm 0;
    is(length($buf) >= 8 ? unpack('N', substr($buf, 4, 4)) : -1, 91, 'answered, to its correlation id');
    close $s;
    my ($r, $l) = probe("127.0.0.1:$boot", 'Metadata:12');
    ok($l && defined $l->{response_hex}, 'others still served');
};

subtest 'a broker that answers what nobody asked, or a frame of impossible size' => sub {
    for my $case ([ 'unknown correlation id', sub { pack('NN', 8, 4242) . pack('N', 0) } ],
                  [ 'negative size', sub { pack('N', 0xfffffff0) . pack('N', $_[0]) } ]) {
        my $srv = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 5, ReuseAddr => 1)
            or return fail("listen: $@");
        my $bp = $srv->sockport;
        my $child = fork // die "fork: $!";
        if ($child == 0) {    # the broker: reads one request, answers with the bad frame
            $SIG{ALRM} = sub { POSIX::_exit(0) };
            alarm 15;
            # (start_lookout's port probe opens a connection that sends nothing)
            while (my $a = $srv->accept) {
                my $hdr = '';
                while (length($hdr) < 12) { sysread($a, $hdr, 12 - length($hdr), length($hdr)) or last }
                next if length($hdr) < 12;
                syswrite($a, $case->[1]->(unpack('N', substr($hdr, 8, 4))));
                sleep 5;
                POSIX::_exit(0);
            }
            POSIX::_exit(0);
        }
        my $f = free_port();
        my $lk3 = start_lookout(dir => $dir, name => 'bad' . $bp,
                                conf => KafkaMock::lookout_conf(nodes => [ [ 1, "127.0.0.1:$bp", $f ] ]));
        ok($lk3->started, "$case->[0]: lookout started") or next;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $f, Proto => 'tcp', Timeout => 5);
        my $payload = pack('nnN', 3, 0, 17) . pack('n', 1) . 'x' . pack('N', 0);
        syswrite($s, pack('N', length $payload) . $payload);
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 10;
        my $n = eval { sysread($s, my $x, 4096) };
        alarm 0;
        is($n, 0, "$case->[0]: the client connection closes, nothing passed on");
        like($lk3->log, qr/correlation id 4242, which no request has|impossible size/, "$case->[0]: logged");
        ok($lk3->alive, "$case->[0]: lookout still running");
        $lk3->stop;
        kill 'TERM', $child;
        waitpid $child, 0;
    }
};

ok($lk->alive, 'lookout still running');
$lk->stop;
$tb->stop;
done_testing();
