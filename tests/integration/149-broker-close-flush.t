#!/usr/bin/perl
# 149-broker-close-flush.t: what a broker said before it closed reaches the client.
# A broker that answers and leaves (a Pulsar broker's ERROR before it drops a client whose
# authentication failed, a Kafka broker's last answers as it shuts down) sends its last
# frames and its FIN together. lookout reads them, and the FIN, while the client may still
# be reading earlier frames: it closes the client's connection once those bytes are out,
# as nginx stream {} and HAProxy do, not at once with them dropped. A broker that resets
# the connection loses what was still queued for the client, as it does everywhere.
#
# Here the Pulsar test broker sends 4 MiB of frames lookout passes as they are (a command
# of a type it does not know, holding no address) and closes; the client reads nothing
# for a second and a half, then reads to the end: every frame, then the close.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock ();
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarFrame qw(fv fb frame);

my $dir = tmp_dir();
KafkaTestBroker::python() or plan skip_all => 'python3 not found';

my $E = free_port();
my $admin = free_port();
my $t = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$E" } ],
    topics => [ { name => 't-b1', owner => 'b1' } ]);
my $INT = 'pulsar://' . $t->addr('b1');

my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
admin = 127.0.0.1:$admin

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

[broker prod/b1]
advertisedListeners = internal:$INT,external:pulsar://127.0.0.1:$E
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$E", Proto => 'tcp', Timeout => 5)
    or BAIL_OUT("connect: $!");
syswrite($s, frame(fv(1, 2) . fb(2, fb(1, 'lookout-test') . fv(4, 21))));   # CONNECT, v21
my $connected = KafkaMock::read_frame($s, 5);
ok(defined $connected && substr($connected, 4, 2) eq "\x08\x03", 'CONNECTED through lookout');

my ($conn) = map { $_->{conn} } grep { $_->{broker} eq 'b1' } @{ $t->control({ cmd => 'state' })->{conns} };
ok(defined $conn, "the broker's connection");

# A BaseCommand of type 99 (none of PulsarApi.proto's), its field 99 holding 64,000 bytes.
my $one = frame(fv(1, 99) . fb(99, 'z' x 64000));
my $n = 64;
my $r = $t->control({ cmd => 'raw', hex => unpack('H*', $one), repeat => $n, close => JSON::PP::true(), conn => $conn });
is($r->{sent}[0]{size}, $n * length $one, "the broker sent $n frames, " . $n * length($one) . ' bytes, and closed');

sleep 1.5;   # the client reads nothing yet: lookout holds what the socket does not take
my ($got, $how, $end) = ('', 'timeout', time + 20);
while (time < $end) {
    next unless IO::Select->new($s)->can_read($end - time);
    my $k = sysread($s, my $buf, 1 << 20);
    if (!defined $k) { $how = "error: $!"; last }
    if ($k == 0) { $how = 'eof'; last }
    $got .= $buf;
}
is(length $got, $n * length $one, 'every byte the broker sent reached the client');
ok($got eq $one x $n, '... byte for byte');
is($how, 'eof', 'then the close');
ok($lk->wait_log(qr/broker prod\/b1 closed the connection/, 5), "the broker's close logged");

ok($lk->alive, 'lookout still running');
$lk->stop;
$lk->check_sanitizers;
$t->stop;
done_testing();
