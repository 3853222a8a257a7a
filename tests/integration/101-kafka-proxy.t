#!/usr/bin/perl
# 101-kafka-proxy.t: Kafka through lookout (issue 8), against librdkafka's mock cluster and
# clients nobody here wrote. lookout bootstraps kcat, hands out only its own (lookup
# listener) addresses in Metadata and FindCoordinator, and carries produce, consume and a
# consumer group to the right brokers; bad frames close only their own connection, and
# are logged, those the client cuts short too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('kcat');

my $dir = tmp_dir();
my $TOPIC = 'lk-t1';
my $m = KafkaMock->start(brokers => 3, topics => ["$TOPIC:3"], dir => $dir);
my @ext = map { free_port() } 1 .. 3;
my $boot = free_port();
my %ext_of = map { ($m->brokers->[$_]{id} => "127.0.0.1:$ext[$_]") } 0 .. 2;
my %internal = map { ("$_->{host}:$_->{port}" => 1) } @{ $m->brokers };

my $lk = start_lookout(dir => $dir, conf => KafkaMock::lookout_conf(nodes => $m->behind(@ext), boot => $boot,
                                                                    lookout => "log_level = debug\n"));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

subtest 'kcat -L through lookout lists only lookout addresses' => sub {
    my $r = KafkaMock::run([ 'kcat', '-L', '-J', '-b', "127.0.0.1:$boot", '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L -J exits 0') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    my %seen = map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] };
    is_deeply(\%seen, \%ext_of, 'each node id at its EXTERNAL address on lookout') or diag($r->{out});
    ok(!(grep { $internal{$_} } values %seen), 'no internal address handed out');
    my ($t) = grep { $_->{topic} eq $TOPIC } @{ $md->{topics} // [] };
    is(scalar @{ $t->{partitions} // [] }, 3, "$TOPIC with its 3 partitions");
};

subtest '10,000 messages produced and consumed through lookout' => sub {
    my $n = 10000;
    my @msgs = map { sprintf 'message %05d %s', $_, 'x' x 100 } 1 .. $n;
    my $r = KafkaMock::run([ 'kcat', '-P', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', '0' ],
                           in => join("\n", @msgs) . "\n", timeout => 60);
    is($r->{exit}, 0, 'kcat -P exits 0') or diag($r->{err});
    $r = KafkaMock::run([ 'kcat', '-C', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', '0', '-o', 'beginning',
                          '-e', '-q' ], timeout => 60);
    is($r->{exit}, 0, 'kcat -C exits 0') or diag($r->{err});
    my @got = split /\n/, $r->{out};
    is(scalar @got, $n, "$n messages back");
    is_deeply(\@got, \@msgs, '... the same, in order');
};

subtest 'a consumer group through lookout' => sub {
    my @msgs = map { "g$_" } 1 .. 30;
    for my $p (1, 2) {
        my $r = KafkaMock::run([ 'kcat', '-P', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', $p ],
                               in => join("\n", grep { substr($_, 1) % 2 == $p - 1 } @msgs) . "\n",
                               timeout => 30);
        is($r->{exit}, 0, "produced to partition $p") or diag($r->{err});
    }
    my $r = KafkaMock::run([ 'kcat', '-b', "127.0.0.1:$boot", '-G', 'lk-group', '-o', 'beginning', '-c', '10030',
                             '-e', '-q', $TOPIC ], timeout => 60);
    my %got = map { ($_ => 1) } split /\n/, $r->{out};
    ok(!(grep { !$got{$_} } @msgs), 'the group consumer got every message') or diag($r->{err});
    unlike($r->{err}, qr/\Q127.0.0.1:$m->{ready}{brokers}[0]{port}\E/, 'kcat never saw an internal address');
};

subtest 'kafka-python through lookout' => sub {
    plan skip_all => 'no /usr/bin/python3 with kafka-python (apt-get install python3-kafka)'
        unless -x '/usr/bin/python3' && system('/usr/bin/python3', '-c', 'import kafka') == 0;
    my $r = KafkaMock::run([ '/usr/bin/python3', "$FindBin::Bin/bin/kafka-python-check", "127.0.0.1:$boot",
                             '--roundtrip', 600, '--topic', $TOPIC, '--partitions', 3 ], timeout => 120);
    my ($j) = map { $_->{roundtrip} ? ($_->{roundtrip}) : () } json_lines($r->{out});
    ok($j, 'kafka-python ran its round trip') or return diag($r->{err});
    my @got = grep { $_->[1] =~ /^kafka-python-roundtrip-/ } @{ $j->{got} }; # the topic has others too
    is(scalar @got, 600, '600 messages back');
    is_deeply([ sort map { "@$_" } @got ], [ sort map { "@$_" } @{ $j->{sent} } ], '... the ones sent');
    is_deeply({ map { ($_->[0] => "$_->[1]:$_->[2]") } @{ $j->{brokers} } }, \%ext_of,
              'kafka-python learnt only lookout addresses, by node id');
};

subtest 'bad frames close only their own connection' => sub {
    for my $case ([ 'negative size', pack('N', 0xffffffff) ], [ 'size below the header', pack('N', 3) . 'abc' ],
                  [ 'over max_frame_bytes', pack('N', 0x7fffffff) . 'x' x 8 ]) {
        is(closed_after($boot, $case->[1]), 0, "$case->[0]: closed");
    }
    # Frames the client cuts short, in the prefix or after it: lookout says how far they got.
    my $p = pack('nnN', 3, 1, 4242) . pack('n/a*', 'cut') . pack('N', 0xffffffff);
    my $frame = pack('N', length($p) + 100) . $p . 'z' x 100;
    for my $keep (7, 20) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5)
            or return fail("connect: $@");
        syswrite $s, substr($frame, 0, $keep);
        sleep 0.2;    # the broker connected, the bytes read
        my $port = $s->sockport;
        close $s;
        my $what = $keep < 12 ? qr/$keep bytes into a request frame's 12-byte prefix/
            : qr/${\ (length($frame) - $keep)} bytes short of the end of a request frame of ${\ (length($frame) - 4)} bytes \(api key 3 v1, correlation id 4242\)/;
        ok($lk->wait_log(qr/client closed the connection $what, client: 127\.0\.0\.1:$port\b/),
           "a frame cut after $keep of its bytes: logged, with the client");
    }
    my $r = KafkaMock::run([ 'kcat', '-L', '-b', "127.0.0.1:$boot", '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat still served');
    like($lk->log, qr/request frame of -1 bytes/, 'logged with the size');
};

subtest 'TLS on the external listener (SSL), plaintext to the brokers' => sub {
    my $certs = test_certs();
    my @sext = map { free_port() } 1 .. 3;
    my $sboot = free_port();
    my $lk2 = start_lookout(dir => $dir, name => 'tls', conf => KafkaMock::lookout_conf(
        nodes => $m->behind(@sext), boot => $sboot, external => 'SSL',
        lookout => "tls.certificate = $certs->{edge_crt}\ntls.key = $certs->{edge_key}\n"));
    ok($lk2->started, 'a lookout with SSL external listeners started') or return diag($lk2->log);
    my @tls = ('-X', 'security.protocol=SSL', '-X', "ssl.ca.location=$certs->{edge_ca}");
    my $r = KafkaMock::run([ 'kcat', '-L', '-J', @tls, '-b', "127.0.0.1:$sboot", '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L over TLS exits 0') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    my %seen = map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] };
    is_deeply(\%seen, { map { ($m->brokers->[$_]{id} => "127.0.0.1:$sext[$_]") } 0 .. 2 },
              'each node id at its SSL address on lookout');
    my @msgs = map { "tls message $_" } 1 .. 500;
    $r = KafkaMock::run([ 'kcat', '-P', @tls, '-b', "127.0.0.1:$sboot", '-t', $TOPIC, '-p', '2' ],
                        in => join("\n", @msgs) . "\n", timeout => 60);
    is($r->{exit}, 0, 'produced over TLS') or diag($r->{err});
    $r = KafkaMock::run([ 'kcat', '-C', @tls, '-b', "127.0.0.1:$sboot", '-t', $TOPIC, '-p', '2', '-o', '-500',
                          '-e', '-q' ], timeout => 60);
    is_deeply([ split /\n/, $r->{out} ], \@msgs, 'consumed over TLS, the same') or diag($r->{err});
    $lk2->stop;
};

ok($lk->alive, 'lookout still running');
$lk->stop;
$m->stop;
done_testing();
