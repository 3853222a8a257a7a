#!/usr/bin/perl
# 105-kafka-pattern.t: brokers the map lacks (issue 8, item 5). Only node 1 of a 3-broker
# librdkafka mock cluster is in lookout's map; broker.pattern gives nodes 2 and 3 their
# addresses. lookout learns where they are from the brokers' own Metadata, and serves the
# pattern's addresses: a port of their own (bound at run time on every worker), or one TLS
# port shared by SNI name. kcat produces to and consumes from partitions that nodes 2 and 3
# lead, through those addresses only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use IO::Socket::SSL qw(SSL_VERIFY_NONE $SSL_ERROR);
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('kcat');

my $dir = tmp_dir();
my $TOPIC = 'lk-pattern';
my $m = KafkaMock->start(brokers => 3, topics => ["$TOPIC:3"], dir => $dir);
my %mock = map { ($_->{id} => "$_->{host}:$_->{port}") } @{ $m->brokers };
my %internal = reverse %mock;
my $b1 = $m->broker(1);
my $probe = "$FindBin::Bin/bin/kafka-probe";

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

# The pattern's ports are on an address of their own: every port above the base on it
# would be some node's. A base whose ports for nodes 2 and 3 are free there.
my $PIP = '127.0.0.3';
sub pattern_base {
    for (1 .. 100) {
        my $p = free_port($PIP);
        my $s = IO::Socket::INET->new(LocalAddr => $PIP, LocalPort => $p + 1, Proto => 'tcp',
                                      Listen => 1) or next;
        close $s;
        return $p - 2;
    }
    die "no two free ports in a row\n";
}

my $base = pattern_base();
my ($ext1, $boot) = (free_port(), free_port());
my $lk = start_lookout(dir => $dir, name => 'ports', conf => <<"EOF");
[lookout]
workers = 2
log_level = debug
timeout.idle = 1s

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$boot
broker.pattern = $PIP:\$($base+nodeId)

[broker k/1]
advertised.listeners = INTERNAL://$b1->{host}:$b1->{port},EXTERNAL://127.0.0.1:$ext1
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

my %want = (1 => "127.0.0.1:$ext1", 2 => "$PIP:" . ($base + 2), 3 => "$PIP:" . ($base + 3));

subtest 'before any Metadata, no pattern port is bound' => sub {
    my $s = IO::Socket::INET->new(PeerAddr => $PIP, PeerPort => $base + 2, Proto => 'tcp', Timeout => 2);
    ok(!$s, "nothing on node 2's port yet");
};

subtest 'kcat -L: nodes 2 and 3 at the pattern addresses, learned and bound' => sub {
    my $r = KafkaMock::run([ 'kcat', '-L', '-J', '-b', "127.0.0.1:$boot", '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L -J exits 0') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    my %seen = map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] };
    is_deeply(\%seen, \%want, 'node 1 at its lookup address, 2 and 3 at the pattern ones') or diag($r->{out});
    ok(!(grep { $internal{$_} } values %seen), 'no internal address handed out');
    for my $id (2, 3) {
        like($lk->log, qr/cluster k: learned node $id at \Q$mock{$id}\E from broker k\/\d; serving it as \Q$want{$id}\E on \Q$want{$id}\E/,
             "node $id learned at its mock address");
        ok(wait_port($PIP, $base + $id, 5), "node $id\'s port accepts connections");
    }
    unlike($lk->log, qr/the map lacks and broker.pattern does not cover/, 'no gap logged');
};

subtest 'produce and consume through the pattern addresses' => sub {
    # The mock spreads the 3 partitions' leaders over the 3 brokers.
    my $leaders = $m->topic($TOPIC)->{leaders};
    is_deeply([ sort @$leaders ], [ 1, 2, 3 ], 'each broker leads one partition') or diag("@$leaders");
    for my $p (0 .. 2) {
        my @msgs = map { "p$p-$_" } 1 .. 300;
        my $r = KafkaMock::run([ 'kcat', '-P', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', $p ],
                               in => join("\n", @msgs) . "\n", timeout => 60);
        is($r->{exit}, 0, "produced to partition $p (leader $leaders->[$p])") or diag($r->{err});
        $r = KafkaMock::run([ 'kcat', '-C', '-b', "127.0.0.1:$boot", '-t', $TOPIC, '-p', $p, '-o', 'beginning',
                              '-e', '-q' ], timeout => 60);
        is_deeply([ split /\n/, $r->{out} ], \@msgs, "partition $p: the 300 messages back") or diag($r->{err});
    }
    for my $id (2, 3) {
        like($lk->log, qr/to broker k\/$id at \Q$mock{$id}\E/, "connections reached node $id");
    }
    my $log = $lk->log;
    my $line2 = "listening on $PIP:" . ($base + 2) . " (kafka, for $PIP)";
    my $listens = () = $log =~ /\Q$line2\E/g;
    is($listens, 1, 'the port was logged once, by the worker that bound it first') or diag($log);
    unlike($log, qr/cannot listen|not served/, 'every worker bound it');
};

subtest 'a node no broker has named: its port is never bound' => sub {
    my $s = IO::Socket::INET->new(PeerAddr => $PIP, PeerPort => $base + 7, Proto => 'tcp', Timeout => 2);
    ok(!$s, 'node 7 has no socket');
};
# ApiVersions v0 on a raw connection: its answer's correlation id, or undef once closed.
sub api_versions {
    my ($s, $corr) = @_;
    syswrite($s, pack('N n n N n', 10, 18, 0, $corr, 0xffff)) or return undef;
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 10;
    my ($head, $body) = ('', '');
    my $ok = eval {
        sysread($s, $head, 4 - length $head, length $head) || die "eof\n" while length $head < 4;
        my $n = unpack 'N', $head;
        sysread($s, $body, $n - length $body, length $body) || die "eof\n" while length $body < $n;
        1;
    };
    alarm 0;
    return $ok ? unpack('N', $body) : undef;
}

subtest "Kafka connections idle for the cluster's timeout.idle, not [lookout]'s" => sub {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    is(api_versions($s, 1), 1, 'answered');
    sleep 2.5; # [lookout] timeout.idle = 1s is HTTP's; the Kafka default is 10m
    is(api_versions($s, 2), 2, 'still open after 2.5 s idle');
    close $s;
};
subtest 'the broker is dialled only once a sane request prefix has come' => sub {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    my $port = $s->sockport;
    syswrite $s, pack('N', 0xffffffff);
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 10;
    my $n = eval { sysread($s, my $buf, 16) };
    alarm 0;
    is($n, 0, 'a negative size: closed');
    ok($lk->wait_log(qr/client: 127\.0\.0\.1:$port\b/, 5), '... and logged');
    unlike($lk->log, qr/to broker [^,]*, client: 127\.0\.0\.1:$port\b/, 'no broker was dialled for it');
    $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot, Proto => 'tcp', Timeout => 5);
    $port = $s->sockport;
    is(api_versions($s, 3), 3, 'a request: answered');
    like($lk->log, qr/to broker k\/1 at [^,]*, client: 127\.0\.0\.1:$port\b/, '... through the broker dialled for it');
    close $s;
};
$lk->stop;

subtest 'SSL: nodes the map lacks on one port, told apart by SNI' => sub {
    my $certs = test_certs();
    my ($port, $sboot) = (free_port(), free_port());
    my $lk2 = start_lookout(dir => $dir, name => 'sni', conf => <<"EOF");
[lookout]
workers = 1
log_level = debug
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL
bootstrap.servers = 127.0.0.1:$sboot
broker.pattern = b\$(nodeId).kafka.test:$port
bind = 127.0.0.1
timeout.idle = 1s

[broker k/1]
advertised.listeners = INTERNAL://$b1->{host}:$b1->{port},EXTERNAL://b1.kafka.test:$port
EOF
    ok($lk2->started, 'lookout started') or return diag($lk2->log);
    my @probe = ($probe, '--timeout', 10, '--topic', $TOPIC, '--partitions', 3);

    my $r = KafkaMock::run([ @probe, '--tls-sni', 'b2.kafka.test', "127.0.0.1:$port", 'ApiVersions:0' ],
                           timeout => 20);
    my ($j) = json_lines($r->{out});
    ok($j && $j->{closed}, 'node 2 before any Metadata: closed');
    like($lk2->log, qr/node 2 \(broker\.pattern\) has not been named by any broker yet/, '... and logged');

    $r = KafkaMock::run([ @probe, '--tls-sni', 'b1.kafka.test', "127.0.0.1:$port", 'Metadata:1' ], timeout => 20);
    ($j) = json_lines($r->{out});
    ok($j && $j->{response_hex}, 'Metadata through node 1 (its own vhost on the shared port)') or diag($r->{err});
    ok(index($j->{response_hex} // '', unpack('H*', "b2.kafka.test")) >= 0, '... names node 2 by the pattern') or diag($r->{out});
    ok(index($j->{response_hex} // '', unpack('H*', $b1->{host})) < 0, '... and no internal host');
    my $m1 = $mock{1};
    like($lk2->log, qr/to broker k\/1 at \Q$m1\E/, "... which went to node 1");

    for my $id (2, 3) {
        $r = KafkaMock::run([ @probe, '--tls-sni', "b$id.kafka.test", "127.0.0.1:$port", 'ApiVersions:0', 'Metadata:1' ],
                            timeout => 20);
        my @a = json_lines($r->{out});
        is(scalar(grep { $_->{response_hex} } @a), 2, "SNI b$id.kafka.test: answered") or diag($r->{out} . $r->{err});
        like($lk2->log, qr/to broker k\/$id at \Q$mock{$id}\E/, "... at its mock address");
    }
    $r = KafkaMock::run([ @probe, '--tls-sni', 'b9.kafka.test', "127.0.0.1:$port", 'ApiVersions:0' ], timeout => 20);
    ($j) = json_lines($r->{out});
    ok($j && $j->{closed}, 'a node no broker has named (9): closed');
    $r = KafkaMock::run([ @probe, '--tls-sni', 'other.example.com', "127.0.0.1:$port", 'ApiVersions:0' ], timeout => 20);
    ($j) = json_lines($r->{out});
    ok($j && $j->{closed}, 'a name the pattern does not spell: closed');
    like($lk2->log, qr/no Kafka broker on this address for that SNI name/, '... and logged');

    my $s = IO::Socket::SSL->new(PeerAddr => '127.0.0.1', PeerPort => $sboot, SSL_hostname => 'kafka.test',
                                 SSL_verify_mode => SSL_VERIFY_NONE, Timeout => 5)
        or return fail("TLS connect: $SSL_ERROR");
    my $t0 = time;
    my $n = do { local $SIG{ALRM} = sub { die "timeout\n" }; alarm 10; my $r = eval { sysread($s, my $b, 16) }; alarm 0; $r };
    is($n, 0, 'timeout.idle = 1s in [kafka k]: an idle connection is closed');
    cmp_ok(time - $t0, '>=', 0.9, '... after about a second');
    like($lk2->log, qr/idle client connection timed out/, '... and logged');
    $lk2->stop;
};

$m->stop;
done_testing;
