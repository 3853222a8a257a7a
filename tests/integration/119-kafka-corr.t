#!/usr/bin/perl
# 119-kafka-corr.t: every Kafka answer is read as the answer to the request it answers,
# whatever correlation ids the client picks (issue 18, defect 1). A raw client sends the
# frames a client may send and the test broker (bin/kafka-testbroker, which advertises names
# only it uses, internal-N.kafka.test) answers them as Kafka does:
#  - a Produce v3 with acks=0 and correlation id 7 (never answered), then a Metadata v1 with
#    id 7: the Metadata answer must be rewritten, not passed on as a Produce answer;
#  - more than 4096 requests in flight at once: acks=0 Produces are not waited for, so the
#    answers behind them stay paired; 4097 answered requests close the connection, saying so;
#  - after a SaslHandshake v0, a bare token more than the mechanism's (a Fetch and a Metadata
#    request in disguise, which the broker reads once PLAIN is done): closed, saying so.
# In every case the client sees only lookout's addresses, or a clean close with a log line:
# never an internal one. The broker's Fetch with MaxWaitMs holds its answers back, so that
# the client's next frames reach lookout first, as they could on any slow broker.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;

plan skip_all => 'python3 not found' unless KafkaTestBroker::python();
$SIG{PIPE} = 'IGNORE';

my $dir = tmp_dir();
my ($USER, $PASS) = ('alice', 'alice-secret');
my $TOPIC = 'corr';
my @spec = map { { id => $_, host => "internal-$_.kafka.test", port => 0, bind => '127.0.0.1:0' } } 1, 2;
my $tb = KafkaTestBroker->start(dir => $dir, nodes => \@spec, unknown_tags => 'none',
                                topics => [ { name => $TOPIC, partitions => 2 } ]);
my $sb = KafkaTestBroker->start(dir => $dir, nodes => \@spec, unknown_tags => 'none',
                                topics => [ { name => $TOPIC, partitions => 2 } ],
                                sasl => { mechanisms => ['PLAIN'], users => { $USER => $PASS } });

# Cluster k over the plain broker, cluster s over the SASL one.
my (%boot, %ext);
my $conf = "[lookout]\nworkers = 1\n\n";
for my $c ([ 'k', $tb, 'PLAINTEXT' ], [ 's', $sb, 'SASL_PLAINTEXT' ]) {
    my ($name, $b, $proto) = @$c;
    $boot{$name} = free_port();
    $ext{$name}{$_} = free_port() for 1, 2;
    $conf .= "[kafka $name]\ninter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
           . "listener.security.protocol.map = INTERNAL:$proto,EXTERNAL:$proto\n"
           . "bootstrap.servers = 127.0.0.1:$boot{$name}\n\n"
           . join '', map { "[broker $name/$_]\nadvertised.listeners = INTERNAL://" . $b->node($_)->{listen}
                            . ",EXTERNAL://127.0.0.1:$ext{$name}{$_}\n\n" } 1, 2;
}
my $lk = start_lookout(dir => $dir, conf => $conf);
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# A request with header v1 (client id CLIENT).
sub request {
    my ($key, $ver, $corr, $client, $body) = @_;
    return pack('nnN n/a*', $key, $ver, $corr, $client) . $body;
}
# Produce v3: TransactionalId null, Acks, TimeoutMs, no topics.
sub produce_v3 { my ($corr, $acks) = @_; request(0, 3, $corr, 'corr', pack('n n N N', 0xffff, $acks, 1000, 0)) }
# Metadata v1, no topics (brokers only).
sub metadata_v1 { request(3, 1, $_[0], 'corr', pack('N', 0)) }
# Fetch v4 for no partition: the broker holds its answer for MaxWaitMs (MinBytes 1).
sub fetch_v4 { request(1, 4, $_[0], 'corr', pack('N N N N C N', 0xffffffff, $_[1], 1, 1 << 20, 0, 0)) }

sub connect_to {
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot{ $_[0] }, Proto => 'tcp',
                                 Timeout => 5);
}

# Every frame until the connection closes or TIMEOUT passes with nothing new: (frames, how).
sub read_all {
    my ($s, $timeout) = @_;
    my (@f, $how);
    while (1) {
        (my $f, $how) = KafkaMock::read_frame($s, $timeout);
        last unless defined $f;
        push @f, $f;
    }
    return (\@f, $how);
}

# Whether the bytes name an internal address, and whether they name each node's lookout one.
sub leaks { return grep { index($_, 'internal-') >= 0 } @_ }
sub names_lookout {
    my ($name, $f) = @_;
    return !grep { index($f, pack('N n/a* N', $_, '127.0.0.1', $ext{$name}{$_})) < 0 } 1, 2;
}

subtest 'Produce v3 acks=0 id 7, then Metadata v1 id 7' => sub {
    my $s = connect_to('k') or return fail("connect: $@");
    syswrite $s, KafkaMock::frame(produce_v3(7, 0)) . KafkaMock::frame(metadata_v1(7));
    my $r = KafkaMock::read_frame($s, 5) // '';
    is(length $r ? unpack('N', $r) : 'none', 7, 'one answer, with the client\'s correlation id 7');
    ok(!leaks($r), '... naming no internal address') or diag(unpack('H*', $r));
    ok(names_lookout('k', $r), "... but each node's lookout address (it was rewritten)");
    # and the same once more on the same connection: ids may repeat
    syswrite $s, KafkaMock::frame(produce_v3(7, 0)) . KafkaMock::frame(metadata_v1(7));
    $r = KafkaMock::read_frame($s, 5) // '';
    ok(unpack('N', $r . "\0" x 4) == 7 && !leaks($r) && names_lookout('k', $r), 'again: rewritten');
    my ($more, $how) = read_all($s, 1);
    is(scalar @$more, 0, 'nothing else came (the Produces got no answer)');
    close $s;
};

subtest 'acks=0 Produces past 4096 between two answers with the same id' => sub {
    # The Fetch holds the broker for 1.5 s; lookout reads all the rest meanwhile.
    my $s = connect_to('k') or return fail("connect: $@");
    my $out = KafkaMock::frame(fetch_v4(7, 1500)) . KafkaMock::frame(metadata_v1(7))
            . join '', map { KafkaMock::frame(produce_v3(7, 0)) } 1 .. 4100;
    syswrite $s, $out;
    my ($f, $how) = read_all($s, 4);
    is(scalar @$f, 2, 'two answers (the Fetch and the Metadata)');
    is_deeply([ map { unpack('N', $_) } @$f ], [ 7, 7 ], '... both with id 7');
    ok(!leaks(@$f), '... naming no internal address') or diag(join "\n", map { unpack('H*', $_) } @$f);
    ok(@$f == 2 && names_lookout('k', $f->[1]), "... the Metadata naming each node's lookout address");
    ok($lk->alive, 'lookout still running');
    close $s;
};

subtest '4097 answered requests in flight: closed, saying so' => sub {
    my $s = connect_to('k') or return fail("connect: $@");
    my $cport = $s->sockport;
    my $out = KafkaMock::frame(fetch_v4(7, 1500)) . join '', map { KafkaMock::frame(metadata_v1(7)) } 1 .. 4096;
    syswrite $s, $out;
    my ($f, $how) = read_all($s, 4);
    like($how // '', qr/^(?:eof|error)$/, 'the connection closed');
    ok(!leaks(@$f), '... and what came before named no internal address');
    ok($lk->wait_log(qr/client has 4096 requests awaiting their answers, the most lookout follows on one connection; closing, client: 127\.0\.0\.1:$cport\b/, 5),
       '... with a log line saying why');
    close $s;
};

subtest 'SaslHandshake v0, then more bare tokens than PLAIN has' => sub {
    my $s = connect_to('s') or return fail("connect: $@");
    my $cport = $s->sockport;
    syswrite $s, KafkaMock::frame(request(17, 0, 1, 'corr', pack('n/a*', 'PLAIN')));
    my $r = KafkaMock::read_frame($s, 5);
    is(defined $r ? unpack('x4 n', $r) : 'none', 0, 'the broker took PLAIN');
    # PLAIN's one token, and two more: a Fetch (held 1.5 s) and a Metadata, both id 7, which
    # the broker would read as Kafka requests once PLAIN is done.
    syswrite $s, KafkaMock::frame("\0$USER\0$PASS") . KafkaMock::frame(fetch_v4(7, 1500))
               . KafkaMock::frame(metadata_v1(7));
    my @got;
    my ($t, $how) = KafkaMock::read_frame($s, 5);
    push @got, $t if defined $t;
    # Kafka frames again: two Produces with acks=0 and id 7, which the broker never answers.
    syswrite $s, KafkaMock::frame(produce_v3(7, 0)) x 2 if defined $t;
    my ($f) = read_all($s, 4);
    push @got, @$f;
    ok(!leaks(@got), 'no internal address reached the client') or diag(join "\n", map { unpack('H*', $_) } @got);
    ok($lk->wait_log(qr/client sent a SASL token before the broker answered its last \(after SaslHandshake v0\); closing, client: 127\.0\.0\.1:$cport\b/, 5),
       'lookout closed, saying why');
    close $s;
};

ok($lk->alive, 'lookout still running');
$lk->stop;
$tb->stop;
$sb->stop;
done_testing();
