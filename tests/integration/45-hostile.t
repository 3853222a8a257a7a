#!/usr/bin/perl
# 45-hostile.t: a bounded storm of malformed and truncated input (CONTRACT §6: no input,
# however hostile, crashes lookout or affects other clients). Seeded mutations of real
# request shapes (plain, chunked, pipelined, upgrade, follow-mode redirects, listener
# names) are written in random pieces, half-closed or dropped at random, on both a
# broker address and the service address, while another client downloads a large body.
# Afterwards lookout still answers, that download arrived intact, and (in the ASan
# build) its log holds no sanitizer report (checked when it stops).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

my $CONNECTIONS = 600;    # bounded in count ...
my $SECONDS = 20;         # ... and in time
srand(20261130);

my $dir = tmp_dir();
my @p = free_ports(2);
my ($q1, $q2, $w) = free_ports(3);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ],
                            own => { t1 => 2 });
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$q1"], 2 => ["http://127.0.0.1:$q2"] }));
[lookout]
workers = 2
max_header_bytes = 4k
max_buffer_bytes = 64k
timeout.client_header = 2s
timeout.response = 3s
timeout.idle = 5s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$w
redirects = follow
leak_guard = rewrite
follow.replay_bytes = 16k

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

my @base = (
    "GET /admin/v2/persistent/public/default/t1/stats?x=1 HTTP/1.1\r\nHost: h\r\n\r\n",
    "PUT /admin/v2/persistent/public/default/t1/subscription/s HTTP/1.1\r\nHost: h\r\n"
        . "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "GET /lookup/v2/topic/persistent/public/default/t1?listenerName=external HTTP/1.1\r\n"
        . "Host: h\r\nX-Pulsar-ListenerName: internal\r\n\r\n",
    "POST /test/echo HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n0123456789",
    "GET /test/ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        . "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nping",
    "GET /admin/v2/brokers/standalone HTTP/1.1\r\nHost: h\r\n\r\n",
    "GET /test/bytes?n=100000&te=chunked HTTP/1.1\r\nHost: h\r\n\r\n",
);

sub mutate {
    my ($b) = @_;
    for (1 .. 1 + int(rand 6)) {
        my $i = int(rand(length($b) || 1));
        my $op = int(rand 5);
        if    ($op == 0 && length $b) { substr($b, $i, 1) = chr(int rand 256) }
        elsif ($op == 1) { substr($b, $i, 0) = join '', map { chr(int rand 256) } 1 .. 1 + int(rand 16) }
        elsif ($op == 2 && length $b) { substr($b, $i, 1 + int(rand 8)) = '' }
        elsif ($op == 3) { substr($b, $i, 0) = $base[ int rand @base ] }
        else { substr($b, $i, 0) = ("\r\n", ":", " ", "0\r\n", "Content-Length: 99\r\n")[ int rand 5 ] }
    }
    return $b;
}

# A large download on its own connection, running through the storm.
my $big = 48 * 1024 * 1024;
my $dl = curl_start("http://127.0.0.1:$q1/test/repeat?n=$big", '--limit-rate', '8M');

my ($n, $end) = (0, time + $SECONDS);
while ($n < $CONNECTIONS && time < $end) {
    $n++;
    my $port = rand() < 0.5 ? $q1 : $w;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 1) or next;
    my $data = rand() < 0.15 ? $base[ int rand @base ] : mutate($base[ int rand @base ]);
    $data x= 1 + int(rand 3);
    my $off = 0;
    local $SIG{PIPE} = 'IGNORE';
    while ($off < length $data) {
        my $k = 1 + int(rand 200);
        last unless defined syswrite($s, $data, $k, $off);
        $off += $k;
    }
    my $how = rand;
    shutdown($s, 1) if $how < 0.4;
    if ($how < 0.8) {    # read a little of whatever comes, bounded
        my ($buf, $rin) = ('', '');
        vec($rin, fileno($s), 1) = 1;
        sysread($s, $buf, 65536) if select(my $rout = $rin, undef, undef, 0.05);
    }
    close $s;            # else: dropped at once, mid-request
}
# Clients that send a whole request and vanish at once, while lookout is
# still taking a pooled upstream connection for it: the upstream's pending
# "ready" report must die with the exchange.
my $warm = curl("http://127.0.0.1:$q1/test/status?code=204");    # fill the idle pool
for my $i (1 .. 300) {
    last if time > $end + 10;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:" . ($i % 2 ? $q1 : $w), Timeout => 1) or next;
    syswrite($s, "GET /test/status?code=204 HTTP/1.1\r\nHost: h\r\n\r\n");
    shutdown($s, 1) if $i % 3;
    close $s;
}
note("$n hostile connections");
ok($n >= 100, "at least 100 hostile connections ($n)");
ok($lk->alive, 'lookout is still running');

my $r = curl("http://127.0.0.1:$q1/admin/v2/persistent/public/default/t1/stats");
is($r->{status}, 200, 'a normal request still succeeds (redirect followed)');
$r = curl("http://127.0.0.1:$w/lookup/v2/topic/persistent/public/default/t1");
is($r->{status}, 200, '... and a lookup on the service address');
unlike($r->{body} // '', qr/127\.0\.0\.1:\Q$p[1]\E/, '... naming no internal address');

my $d = curl_wait($dl, 60);
is($d->{exit}, 0, 'the concurrent download completed') or diag($d->{err});
is(length($d->{body} // ''), $big, '... with every byte');
is(sha256_hex($d->{body} // ''), PulsarBroker::repeat_bytes_sha256($big), '... intact');

$lk->stop;
is($lk->exit_code, 0, 'lookout stops cleanly on SIGTERM');
$c->stop;
done_testing();
