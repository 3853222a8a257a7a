#!/usr/bin/perl
# 142-defer-accept.t: `listen.defer_accept` (issue 22: new connections). By default a
# listening socket has TCP_DEFER_ACCEPT: the kernel hands lookout a connection once its
# first bytes are in. So a client that connects and says nothing is not yet one of
# lookout's connections (lookout_connections_total does not move), and when it then
# sends a request, it is accepted and answered: nothing is lost. One that stays silent
# is accepted all the same after about a second (the kernel's deferral ends with the
# first SYN-ACK it resends), and then closed at timeout.client_header like any other.
# With `listen.defer_accept = off`, a silent connection is accepted at once. Both on a
# plain HTTP listener and a TLS one (whose ClientHello is the first bytes). A reload
# that changes it applies it to the listeners it keeps, without a new socket.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

my $dir = tmp_dir();
my $certs = test_certs();
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ '127.0.0.1:' . free_port() ]);

# total(ADMIN, PORT): lookout_connections_total of the frontend 127.0.0.1:PORT (0 before
# its first connection).
sub total {
    my ($adm, $port, $proto) = @_;
    return Lookout::metrics_map($adm)->{"lookout_connections_total{frontend=\"127.0.0.1:$port\",protocol=\"$proto\"}"} // 0;
}

sub connect_to {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
        or BAIL_OUT("connect 127.0.0.1:$port: $!");
    return $s;
}

# read_all(SOCKET, TIMEOUT): what the peer sends until it closes, or undef at TIMEOUT.
sub read_all {
    my ($s, $timeout) = @_;
    my $sel = IO::Select->new($s);
    my ($buf, $end) = ('', time + $timeout);
    while (time < $end) {
        next unless $sel->can_read($end - time);
        my $n = sysread($s, my $b, 65536);
        return $buf if !$n;
        $buf .= $b;
    }
    return undef;
}

# lookout with one HTTP and one HTTPS frontend, LINE in [lookout].
sub start {
    my ($name, $line) = @_;
    my ($adm, $w, $wt) = free_ports(3);
    my $lk = start_lookout(dir => $dir, name => $name, conf => <<"EOF" . broker_sections($c, 'prod', {}) . broker_sections($c, 'edge', {}));
[lookout]
workers = 1
admin = 127.0.0.1:$adm
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
timeout.client_header = 2s
$line

[pulsar prod]
webServiceUrl = http://127.0.0.1:$w

[pulsar edge]
webServiceUrl = https://127.0.0.1:$wt

EOF
    ok($lk->started, "$name: lookout started") or diag($lk->log);
    # start_lookout's probes connect and close: each is a connection (its FIN is a byte
    # of the stream), counted before the test's own.
    for my $p ([ $w, 'http' ], [ $wt, 'http' ]) {
        my $last = -1;
        wait_until(sub { my $t = total($adm, $p->[0], $p->[1]); my $same = $t == $last; $last = $t; $same }, 5, 0.3);
    }
    return ($lk, $adm, $w, $wt);
}

subtest 'default: deferred' => sub {
    my ($lk, $adm, $w, $wt) = start('default', '');
    my ($t0, $tt0) = (total($adm, $w, 'http'), total($adm, $wt, 'http'));

    # Silent: connected (the client's side is established) but not yet accepted.
    my $s = connect_to($w);
    my $st = connect_to($wt);
    my $tc = time;
    sleep 0.5;
    is(total($adm, $w, 'http'), $t0, 'http: a connection that sent nothing is not accepted yet');
    is(total($adm, $wt, 'http'), $tt0, 'https: likewise');

    # Its request arrives: accepted and answered.
    syswrite $s, "GET /test/headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    my $r = read_all($s, 10);
    like($r // '', qr{^HTTP/1\.1 200 }, 'http: the request sent after the pause is answered 200')
        or diag($r);
    is(total($adm, $w, 'http'), $t0 + 1, 'http: accepted once its bytes came');
    close $s;

    # The TLS one stays silent: accepted after about a second, then closed at
    # timeout.client_header (2 s) like any handshake that does not come.
    ok(wait_until(sub { total($adm, $wt, 'http') == $tt0 + 1 }, 8, 0.1),
       'https: a silent connection is accepted after the deferral ends');
    my $took = time - $tc;
    ok($took > 0.8 && $took < 7,
       sprintf('https: accepted %.1f s after its connect (the kernel resends its SYN-ACK at 1 s)', $took));
    my $gone = read_all($st, 10);
    is($gone, '', 'https: then closed without a byte, at timeout.client_header');
    close $st;
    ok($lk->alive, 'lookout still running');
    $lk->stop;
    $lk->check_sanitizers;
};

subtest 'listen.defer_accept = off' => sub {
    my ($lk, $adm, $w, $wt) = start('off', 'listen.defer_accept = off');
    my ($t0, $tt0) = (total($adm, $w, 'http'), total($adm, $wt, 'http'));
    my $s = connect_to($w);
    my $st = connect_to($wt);
    ok(wait_until(sub { total($adm, $w, 'http') == $t0 + 1 }, 0.8, 0.05),
       'http: a silent connection is accepted at once');
    ok(wait_until(sub { total($adm, $wt, 'http') == $tt0 + 1 }, 0.8, 0.05), 'https: likewise');
    syswrite $s, "GET /test/headers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    like(read_all($s, 10) // '', qr{^HTTP/1\.1 200 }, 'http: and served');
    close $s;
    close $st;
    $lk->stop;
    $lk->check_sanitizers;
};

subtest 'a reload turns it off and on again, on the same sockets' => sub {
    my ($lk, $adm, $w, $wt) = start('reload', '');
    my $conf = slurp($lk->conf);
    (my $off = $conf) =~ s/^\[lookout\]\n/[lookout]\nlisten.defer_accept = off\n/m;
    like($lk->reload($off), qr/^SIGHUP: reloaded .*\(2 listeners kept, 0 added/, 'reloaded: listeners kept');
    my $t0 = total($adm, $w, 'http');
    my $s = connect_to($w);
    ok(wait_until(sub { total($adm, $w, 'http') == $t0 + 1 }, 0.8, 0.05),
       'off after the reload: a silent connection is accepted at once');
    close $s;
    like($lk->reload($conf), qr/^SIGHUP: reloaded/, 'reloaded with the default again');
    $t0 = total($adm, $w, 'http');
    $s = connect_to($w);
    sleep 0.5;
    is(total($adm, $w, 'http'), $t0, 'on again: a silent connection is not accepted yet');
    close $s;
    unlike($lk->log, qr/cannot apply listen/, 'no error applying it');
    $lk->stop;
    $lk->check_sanitizers;
};

done_testing();
