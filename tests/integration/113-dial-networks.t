#!/usr/bin/perl
# 113-dial-networks.t: internal_networks holds at dial time (issue 11). A broker whose
# internal address is a host name is resolved when lookout dials it, and only an address
# inside its cluster's internal_networks is dialled: `localhost` (127.0.0.1, maybe ::1,
# from /etc/hosts through evdns) passes 127.0.0.0/8, and the request gets the broker's
# 200; under 10.0.0.0/8 nothing it resolves to is inside, so the client gets lookout's
# 502, the refusal is logged as an error naming the cluster, broker, host and what it
# resolved to, and counted in lookout_upstream_errors_total. An active health check of
# such a broker fails the same way, without dialling it; and a Kafka client's connection
# to a broker at a name outside is closed as on a failed connect, nothing dialled. The
# TLS dial takes the same path: https://localhost (SNI and verified name "localhost").

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;

use Lookout;
use KafkaMock;
use PulsarBroker;

need_tools('openssl');
need_modules('IO::Socket::SSL');

my $dir = tmp_dir();
my ($bport, $sport, $admin, $w_in, $w_out, $w_chk, $w_tls, $k_in, $k_out) = free_ports(9);
my $certs = test_certs();
# A Kafka "broker" that only has to be dialled (or not): a listening socket.
my $kb = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 8, ReuseAddr => 1)
    or BAIL_OUT("listen: $!");
my $kport = $kb->sockport;
my $pc = PulsarBroker->start(brokers => ["http://127.0.0.1:$bport,https://127.0.0.1:$sport"], dir => "$dir/pc",
                             cert => $certs->{broker_crt}, key => $certs->{broker_key});

# Pulsar clusters in front of the same broker, which they name "localhost".
sub cluster {
    my ($name, $w, $nets, $extra, $url) = @_;
    return "[pulsar $name]\ninternalListenerName = internal\nwebServiceUrl = http://127.0.0.1:$w\n"
         . "internal_networks = $nets\n" . ($extra // '')
         . "[broker $name/b1]\nadvertisedListeners = internal:" . ($url // "http://localhost:$bport") . "\n\n";
}
my $conf = "[lookout]\nworkers = 1\ntimeout.connect = 2s\nadmin = 127.0.0.1:$admin\n"
         . "tls.upstream_ca = $certs->{internal_ca}\n\n"
         . cluster('tls', $w_tls, '127.0.0.0/8', '', "https://localhost:$sport")
         . cluster('inside', $w_in, '127.0.0.0/8')
         . cluster('outside', $w_out, '10.0.0.0/8')
         . cluster('checked', $w_chk, '10.0.0.0/8, fd00::/8',
                   "health.check = tcp\nhealth.interval = 1s\nhealth.timeout = 500ms\n");
for ([ 'kin', $k_in, '127.0.0.0/8' ], [ 'kout', $k_out, '10.0.0.0/8' ]) {
    my ($name, $port, $nets) = @$_;
    $conf .= "[kafka $name]\ninter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
           . "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
           . "internal_networks = $nets\n"
           . "[broker $name/1]\nadvertised.listeners = INTERNAL://localhost:$kport,EXTERNAL://127.0.0.1:$port\n\n";
}
my $lk = start_lookout(dir => $dir, name => 'dial', conf => $conf);
ok($lk->started, 'lookout started') or BAIL_OUT($lk->log // '');

my $r = curl({ timeout => 10 }, "http://127.0.0.1:$w_in/test/echo?via=inside");
is($r->{status}, 200, 'a name resolving inside internal_networks: the broker answers');
is(scalar(grep { ($_->{query} // '') eq 'via=inside' } $pc->requests(1)), 1, '... and got the request');

$r = curl({ timeout => 10 }, "http://127.0.0.1:$w_tls/test/echo?via=tls");
is($r->{status}, 200, 'https://localhost inside: the broker answers');
my ($rec) = grep { ($_->{query} // '') eq 'via=tls' } $pc->requests(1);
ok($rec && $rec->{tls} && ($rec->{sni} // '') eq 'localhost', '... over TLS, SNI localhost');

$r = curl({ timeout => 10 }, "http://127.0.0.1:$w_out/test/echo?via=outside");
lookout_error_ok($r, 502, 'a name resolving only outside: lookout\'s 502');
is(scalar(grep { ($_->{query} // '') eq 'via=outside' } $pc->requests(1)), 0, '... and the broker never saw it');
like($lk->log, qr/\[error\] cluster outside: broker outside\/b1: localhost resolved to 127\.0\.0\.1\b[^\n]*: outside internal_networks; not dialling it/,
     'the refusal is logged: cluster, broker, host, the addresses, why');

my $m = curl("http://127.0.0.1:$admin/metrics")->{body} // '';
like($m, qr/^lookout_upstream_errors_total\{broker="outside\/b1",kind="outside_internal_networks"\} 1$/m,
     'counted as kind outside_internal_networks');
like($m, qr/^lookout_upstream_errors_total\{broker="inside\/b1",kind="outside_internal_networks"\} 0$/m,
     'not for the cluster whose broker is inside');
unlike($lk->log, qr/broker outside\/b1 at \S+: connect failed/, 'not also logged as a connect failure');

# The active check (tcp, every second) refuses the same way, and fails.
ok(wait_until(sub { ($lk->log // '') =~ /broker checked\/b1 at \S+: health check failed: outside internal_networks/ }, 5),
   'a health check of a broker outside fails without dialling it');
like($lk->log, qr/\[error\] cluster checked: broker checked\/b1: localhost resolved to /, 'and logs why');

# Kafka: an ApiVersions v0 request makes lookout dial the node. Whichever comes first: the
# dial (the node's socket) or the end of the client's connection; then a short look at the
# other. Returns (how the client's read ended, whether the node was dialled).
sub kafka_try {
    my ($port) = @_;
    my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 5) or return ('no connect', 0);
    print $c KafkaMock::frame(pack('n n N n/a', 18, 0, 1, 't'));
    IO::Select->new($kb, $c)->can_read(3);
    my $dialled = 0;
    if (IO::Select->new($kb)->can_read(0.2)) {
        my $a = $kb->accept;
        $dialled = 1;
        close $a if $a;
    }
    my (undef, $how) = KafkaMock::read_frame($c, 0.5);
    close $c;
    return ($how, $dialled);
}
my ($how, $dialled) = kafka_try($k_in);
ok($dialled, 'Kafka: a node at a name inside is dialled');
($how, $dialled) = kafka_try($k_out);
ok(!$dialled, 'Kafka: a node at a name outside is not');
is($how, 'eof', '... and the client\'s connection is closed');
like($lk->log, qr/\[error\] cluster kout: broker kout\/1: localhost resolved to 127\.0\.0\.1\b[^\n]*: outside internal_networks/,
     '... with the refusal logged');

$lk->stop;
$lk->check_sanitizers if $lk->can('check_sanitizers');
done_testing();
