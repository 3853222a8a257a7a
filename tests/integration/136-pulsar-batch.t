#!/usr/bin/perl
# 136-pulsar-batch.t: lookout moves the streamed Pulsar frames that follow one another in
# its input together (proxy/lk_pulsar.c, pump), and a frame it holds (a client's LOOKUP, a
# broker's LOOKUP_RESPONSE) still goes in its place, after the frames before it and before
# those after it, when they all come in one read. Against the test broker
# (bin/pulsar-testbroker, its frame log) and hand-built frames (bin/pulsar-probe):
#   - from the client, {PING, LOOKUP, PING, PING} in one write reach the broker in that
#     order, and the answers come back in order, the LOOKUP_RESPONSE naming lookout;
#   - from the broker, {PING, LOOKUP_RESPONSE (its internal address), PING} in one write
#     reach the client in that order, the LOOKUP_RESPONSE rewritten.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarFrame qw(fv fb frame);

my $dir = tmp_dir();
KafkaTestBroker::python() or plan skip_all => 'python3 not found';

my %E = map { ($_ => free_port()) } qw(b1 b2);
my $svc = free_port();

# A frame [totalSize][commandSize][BaseCommand], and the protobuf pieces of its command.
sub cmd_frame {
    my ($type, $sub) = @_;
    return frame(fv(1, $type) . (defined $sub ? fb($type, $sub) : ''));
}
my $PING = cmd_frame(18);
my $TOPIC = 'persistent://public/default/t-batch';

my $t = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ map { { name => $_, advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$E{$_}" } }
                 qw(b1 b2) ],
    topics => [ { name => 't-batch', owner => 'b2' } ]);
my %I = map { ($_ => $t->addr($_)) } qw(b1 b2);
my $brokers = join '', map { "[broker prod/$_]\nadvertisedListeners = internal:pulsar://$I{$_},"
                             . "internal:http://127.0.0.1:9,external:pulsar://127.0.0.1:$E{$_}\n\n" } qw(b1 b2);
$brokers =~ s/127\.0\.0\.1:9,/127.0.0.2:9,/;    # a web address per broker, each its own (nothing listens)
my $lk = start_lookout(dir => $dir, name => 'batch', conf => <<"EOF" . $brokers);
[lookout]
workers = 1
log_level = debug

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

subtest 'from the client: a held LOOKUP between streamed PINGs keeps its place' => sub {
    my $lookup = cmd_frame(23, fb(1, $TOPIC) . fv(2, 5));
    my $n0 = () = $t->frames(dir => 'in', broker => 'b2');
    my @r = PulsarBinBroker::probe("127.0.0.1:$E{b2}", ['--no-pong'],
                                   { raw => unpack('H*', $PING . $lookup . $PING . $PING), expect => 4 });
    my @got = @{ $r[-1]{received} // [] };
    is(join(',', map { $_->{type} // '?' } @got), 'PONG,LOOKUP_RESPONSE,PONG,PONG', 'the answers in order')
        or diag(explain(\@r));
    my ($resp) = grep { ($_->{type} // '') eq 'LOOKUP_RESPONSE' } @got;
    is($resp->{fields}{brokerServiceUrl}, "pulsar://127.0.0.1:$E{b2}", '... the LOOKUP_RESPONSE naming lookout');
    my @in = $t->frames(dir => 'in', broker => 'b2');
    is(join(',', map { $_->{type} } @in[ $n0 + 1 .. $#in ]), 'PING,LOOKUP,PING,PING',
       'the broker got PING, LOOKUP, PING, PING, in that order (after the CONNECT)') or diag(explain(\@in));
};

subtest 'from the broker: a held LOOKUP_RESPONSE between streamed PINGs keeps its place' => sub {
    my $resp = cmd_frame(24, fb(1, "pulsar://$I{b2}") . fv(3, 1) . fv(4, 99));
    my $burst = unpack('H*', $PING . $resp . $PING);
    $t->control({ cmd => 'arm', on => 'lookup', topic => 't-batch', broker => 'b2',
                  actions => [ { cmd => 'raw', broker => 'b2', hex => $burst } ] });
    my @r = PulsarBinBroker::probe("127.0.0.1:$E{b2}", ['--no-pong'],
                                   { send => 'LOOKUP', fields => { topic => $TOPIC }, expect => 4 });
    my @got = @{ $r[-1]{received} // [] };
    is(join(',', map { $_->{type} // '?' } @got), 'LOOKUP_RESPONSE,PING,LOOKUP_RESPONSE,PING',
       'the lookup\'s answer, then PING, LOOKUP_RESPONSE, PING in order') or diag(explain(\@r));
    is($got[2]{fields}{brokerServiceUrl}, "pulsar://127.0.0.1:$E{b2}", '... that LOOKUP_RESPONSE rewritten')
        or diag(explain(\@got));
    is($got[2]{fields}{request_id}, 99, '... its request id as the broker gave it');
};

$lk->stop;
$t->stop;
done_testing;
