#!/usr/bin/perl
# 114-limits.t: connection limits (issue 18, defect 7).
#   - max_connections_per_client: 2,000 connections from 127.0.0.1 with a cap of 100
#     across two workers: exactly 100 are held, the other 1,900 get a 503 with a
#     {"reason": ...} body and a close, while clients from 127.0.0.2 are served; once
#     the 100 close, 127.0.0.1 is served again (its count went back to nothing);
#   - max_connections per worker (workers = 1): over it, plain HTTP gets a 503, a TLS
#     listener a close before any handshake (a FIN, also when its first bytes came); the admin listener still answers;
#   - refusals are counted in /metrics (lookout_connections_refused_total by reason)
#     and logged at most once a second, with how many since the last line;
#   - timeout.client_header: a TLS handshake trickled a byte at a time ends at it, from
#     accept; a new HTTP connection that sends no request closes at it, not at timeout.idle;
#   - timeout.first_frame: a Kafka or Pulsar connection that sends nothing, or trickles
#     its first frame a byte at a time, is closed at the timeout, logged and counted;
#     one whose first request prefix came in time stays open past it.

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

my $N = 2000;
my $CAP = 100;
my $nofile = qx{sh -c 'ulimit -n'} =~ /^(\d+)/ ? $1 : 1024;
# Too few open files allowed (Debian's default soft limit is 1024): raise the soft limit
# up to the hard one, for this test and the lookouts it starts, by running it again.
if ($nofile < $N + 300 && !$ENV{LK_LIMITS_RAISED}) {
    my $hard = qx{sh -c 'ulimit -Hn'};
    if ($hard =~ /^unlimited/ || ($hard =~ /^(\d+)/ && $1 >= $N + 300)) {
        $ENV{LK_LIMITS_RAISED} = 1;
        exec('sh', '-c', 'ulimit -n "$1" && shift && exec "$@"', 'sh', $N + 300, $^X, $0, @ARGV);
    }
}
plan skip_all => "open files limit $nofile: fewer than the test's $N connections (ulimit -n)"
    if $nofile < $N + 300;

my $certs = test_certs();
my $dir = tmp_dir();
my ($admin, $web, $kboot, $kext, $psvc, $fake) = free_ports(6);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ '127.0.0.1:' . free_port() ]);
# A "Kafka broker" that only accepts: lookout dials it once a request prefix came.
my $kbroker = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $fake, Listen => 16, ReuseAddr => 1)
    or BAIL_OUT("listen: $!");

my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$web"] }));
[lookout]
workers = 2
admin = 127.0.0.1:$admin
max_connections_per_client = $CAP
timeout.first_frame = 300ms
# the flood's silent connections are held until the test closes them
timeout.client_header = 60s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

[pulsar bin]
internalListenerName = internal
serviceUrl = pulsar://127.0.0.1:$psvc

[broker bin/b1]
advertisedListeners = internal:pulsar://127.0.0.9:9,internal:http://127.0.0.9:9

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$kboot

[broker k/1]
advertised.listeners = INTERNAL://127.0.0.1:$fake,EXTERNAL://127.0.0.1:$kext
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# /metrics as { 'name{labels}' => value }.
sub metrics {
    my ($port) = @_;
    my $r = curl("http://127.0.0.1:$port/metrics");
    my %m;
    while ($r->{body} =~ /^(\w+\{[^}]*\}) (\S+)$/mg) { $m{$1} = $2 }
    return \%m;
}

# Opens n connections to port from local address from; waits (bounded) until those
# lookout refuses have answered and closed.  Returns (held sockets, refusals' answers).
sub flood {
    my ($port, $from, $n, $want_refused) = @_;
    my (@socks, @answers);
    my $sel = IO::Select->new;
    for (1 .. $n) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, LocalAddr => $from,
                                      Proto => 'tcp', Timeout => 5);
        unless ($s) { diag("connect $_: $!"); last }
        push @socks, $s;
        $sel->add($s);
    }
    my %buf;
    my $deadline = time + 20;
    while (@answers < $want_refused && time < $deadline) {
        for my $s ($sel->can_read(0.5)) {
            my $got = sysread($s, my $b, 4096);
            if ($got) { $buf{ fileno $s } .= $b; next }
            push @answers, $buf{ fileno $s } // '';
            $sel->remove($s);
            close $s;
        }
    }
    return ([ grep { defined fileno $_ } @socks ], \@answers);
}

# Until lookout has closed every connection to port (start_lookout's probes of its ports
# among them), which would count against the caps.
sub settle {
    my ($adm, $port) = @_;
    wait_until(sub { (metrics($adm)->{"lookout_connections_open{frontend=\"127.0.0.1:$port\",protocol=\"http\"}"} // -1) == 0 }, 5) == 1
        or diag("connections to $port still open");
}

subtest "$N connections from one address, $CAP per client" => sub {
    settle($admin, $web);
    my $t0 = time;
    my ($held, $answers) = flood($web, '127.0.0.1', $N, $N - $CAP);
    my $took = time - $t0;
    is(scalar @$answers, $N - $CAP, ($N - $CAP) . ' were refused and closed');
    is(scalar(grep { m{^HTTP/1\.1 503 } && /\r\nConnection: close\r\n/ } @$answers), $N - $CAP,
       '... each with a 503 and Connection: close');
    like($answers->[0] // '', qr/\{"reason": "too many connections from your address \(max_connections_per_client\)"\}$/,
         '... and a JSON reason');
    # Still open after the refusals: nothing more comes on them.
    ok(!IO::Select->new(@$held)->can_read(0.3), "the other $CAP are held open") if @$held == $CAP;
    is(scalar @$held, $CAP, "exactly $CAP held");

    # Another address is served meanwhile, by either worker.
    my $ok = 0;
    for (1 .. 6) {
        my $r = curl('--interface', '127.0.0.2', "http://127.0.0.1:$web/test/status?code=204");
        $ok++ if $r->{status} == 204;
    }
    is($ok, 6, 'clients from 127.0.0.2 are served while 127.0.0.1 is at its cap');
    my $r = curl("http://127.0.0.1:$web/test/status?code=204");
    is($r->{status}, 503, 'one more from 127.0.0.1 gets 503');
    is($r->{headers}{'content-type'}, 'application/json', '... as JSON');

    my $m = metrics($admin);
    is($m->{"lookout_connections_refused_total{frontend=\"127.0.0.1:$web\",reason=\"max_connections_per_client\"}"},
       $N - $CAP + 1, '/metrics counts them by reason');
    is($m->{"lookout_connections_refused_total{frontend=\"127.0.0.1:$web\",reason=\"max_connections\"}"},
       0, '... and none over max_connections');

    # Rate-limited log: a line a second at most, carrying the counts.
    my @lines = $lk->log =~ /refused (\d+) client connections since the last such line: \d+ over max_connections \(off\), \d+ over max_connections_per_client \($CAP\); the latest from 127\.0\.0\.1 on 127\.0\.0\.1:$web/g;
    cmp_ok(scalar @lines, '>=', 1, 'the refusals are logged');
    cmp_ok(scalar @lines, '<=', int($took) + 2, sprintf('... in at most a line a second (%d lines in %.1f s)', scalar @lines, $took));
    my $sum = 0;
    $sum += $_ for @lines;
    cmp_ok($sum, '<=', $N - $CAP + 1, "... counting $sum of them (the rest wait for the next line)");

    close $_ for @$held;
    ok(wait_until(sub { curl("http://127.0.0.1:$web/test/status?code=204")->{status} == 204 }, 5) == 1,
       '127.0.0.1 is served again once its connections closed');
};

subtest 'timeout.first_frame' => sub {
    # ApiVersions v0, correlation id 7, client id "t"
    my $kreq = pack('s> s> l> s> a*', 18, 0, 7, 1, 't');
    $kreq = pack('N', length $kreq) . $kreq;
    # The start of a CONNECT (command type 2) of 20 bytes
    my $pconnect = pack('N N', 20, 16) . "\x08\x02" . ("\0" x 14);
    for my $t ([ 'Kafka', $kboot, $kreq ], [ 'Pulsar', $psvc, $pconnect ]) {
        my ($name, $port, $first) = @$t;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 5) or return fail("connect: $!");
        my $t0 = time;
        my $got = IO::Select->new($s)->can_read(5) ? sysread($s, my $b, 1) : undef;
        my $took = time - $t0;
        ok(defined $got && $got == 0, "$name: a silent connection is closed");
        cmp_ok($took, '<', 2, sprintf('... at the timeout (%.2f s)', $took));

        # Its first frame a byte every 100 ms: never idle for long, but not there
        # within 300 ms.
        $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 5) or return fail("connect: $!");
        $t0 = time;
        my $closed = 0;
        for my $i (0 .. length($first) - 1) {
            last unless syswrite($s, substr($first, $i, 1));
            if (IO::Select->new($s)->can_read(0.1)) { $closed = 1; last }
        }
        $took = time - $t0;
        ok($closed, "$name: a trickled first frame is closed");
        cmp_ok($took, '<', 2, sprintf('... at the timeout, not at each byte (%.2f s)', $took));
    }
    like($lk->log, qr/no first frame within timeout\.first_frame \(300 ms; 0 bytes came\); closing, client: 127\.0\.0\.1:\d+, server: 127\.0\.0\.1:$kboot/,
         'logged with the client and the listener');
    like($lk->log, qr/no first frame within timeout\.first_frame \(300 ms; [1-9]\d* bytes came\); closing, client: 127\.0\.0\.1:\d+, server: 127\.0\.0\.1:$psvc/,
         '... with how much of it came');
    my $m = metrics($admin);
    is($m->{"lookout_first_frame_timeouts_total{frontend=\"127.0.0.1:$kboot\"}"}, 2, 'counted: Kafka');
    is($m->{"lookout_first_frame_timeouts_total{frontend=\"127.0.0.1:$psvc\"}"}, 2, '... and Pulsar');

    # A request prefix in time: the broker is dialled, and the connection outlives the timeout.
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $kboot, Timeout => 5) or return fail("connect: $!");
    syswrite($s, $kreq);
    $kbroker->blocking(1);
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 5;
    my $up = eval { $kbroker->accept };
    alarm 0;
    ok($up, 'Kafka: a prefix in time dials the broker');
    ok(!IO::Select->new($s)->can_read(1), '... and the connection stays open past timeout.first_frame');
    close $s;
};

# Another lookout, in front of the same HTTP broker on plain port w and TLS port tls, with
# these [lookout] lines.
sub web_lookout {
    my ($name, $keys, $w, $tls) = @_;
    return start_lookout(dir => $dir, name => $name, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$w", "https://127.0.0.1:$tls"] }));
[lookout]
${keys}tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
EOF
}

subtest 'slow and silent clients: timeout.client_header' => sub {
    my ($w, $tls) = free_ports(2);
    my $lk3 = web_lookout('slow', "timeout.client_header = 1s\n", $w, $tls);
    ok($lk3->started, 'a lookout with timeout.client_header = 1s started') or return;

    # A byte every 100 ms of a ClientHello whose record claims 200 bytes: the handshake
    # never ends, and no read waits long.
    my $hello = "\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" . ("\0" x 60);
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $tls, Timeout => 5) or return fail("connect: $!");
    my ($t0, $closed) = (time, 0);
    for my $i (0 .. length($hello) - 1) {
        last unless syswrite($s, substr($hello, $i, 1));
        if (IO::Select->new($s)->can_read(0.1)) { $closed = 1; last }
    }
    my $took = time - $t0;
    ok($closed, 'TLS: a trickled handshake is closed while the client still sends');
    cmp_ok($took, '<', 2.5, sprintf('... at the timeout, counted from accept (%.2f s)', $took));
    ok($lk3->wait_log(qr/TLS handshake timed out, client: 127\.0\.0\.1:\d+, server: 127\.0\.0\.1:$tls/, 5), '... and logged');

    # A new plain connection that never sends a request.
    $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $w, Timeout => 5) or return fail("connect: $!");
    $t0 = time;
    my $got = IO::Select->new($s)->can_read(10) ? sysread($s, my $b, 1) : undef;
    $took = time - $t0;
    ok(defined $got && $got == 0, 'HTTP: a connection with no request is closed');
    cmp_ok($took, '<', 2.5, sprintf('... at timeout.client_header, not timeout.idle (%.2f s)', $took));

    # After a request, the connection waits timeout.idle (60 s) for the next.
    $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $w, Timeout => 5) or return fail("connect: $!");
    syswrite($s, "GET /test/status?code=204 HTTP/1.1\r\nHost: h\r\n\r\n");
    my $resp = '';
    while (IO::Select->new($s)->can_read(5)) { sysread($s, $resp, 4096, length $resp) or last; last if $resp =~ /\r\n\r\n/ }
    like($resp, qr{^HTTP/1\.1 204 }, 'a request answered');
    ok(!IO::Select->new($s)->can_read(2), '... and the keep-alive connection stays open past timeout.client_header');
    $lk3->stop;
};

subtest 'max_connections per worker' => sub {
    my ($w, $tls, $adm) = free_ports(3);
    my $lk2 = web_lookout('one', "workers = 1\nadmin = 127.0.0.1:$adm\nmax_connections = 50\ntimeout.client_header = 60s\n",
                          $w, $tls);
    ok($lk2->started, 'a one-worker lookout started') or return;
    settle($adm, $w);
    my ($held, $answers) = flood($w, '127.0.0.1', 60, 10);
    is(scalar @$held, 50, '50 held');
    is(scalar(grep { m{^HTTP/1\.1 503 .*"reason": "too many connections \(max_connections\)"}s } @$answers), 10,
       'the other 10 get a 503 with its reason');
    my $r = curl('--interface', '127.0.0.2', "http://127.0.0.1:$w/test/status?code=204");
    is($r->{status}, 503, 'the cap is for every address: 127.0.0.2 too');
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $tls, Timeout => 5);
    my $got = $s && IO::Select->new($s)->can_read(5) ? sysread($s, my $b, 1) : undef;
    ok(defined $got && $got == 0, 'a TLS listener closes without a handshake (nothing sent)');
    # Its first bytes already in (listen.defer_accept hands it over then): still a FIN,
    # not the reset a close on unread bytes sends.
    my $s2 = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $tls, Timeout => 5);
    syswrite $s2, "\x16\x03\x01\x00\x2a" . ("\x00" x 42) if $s2;
    my $got2 = $s2 && IO::Select->new($s2)->can_read(5) ? sysread($s2, my $b2, 1) : undef;
    ok(defined $got2 && $got2 == 0, 'a TLS client whose first record came: a clean close, not a reset')
        or diag("read: " . ($! // ''));
    is(curl("http://127.0.0.1:$adm/healthz")->{status}, 200, 'the admin listener still answers');
    like($lk2->log, qr/refused \d+ client connections since the last such line: [1-9]\d* over max_connections \(50 per worker\), 0 over max_connections_per_client \(off\)/,
         'logged, with the cap');
    my $m = metrics($adm);
    is($m->{"lookout_connections_refused_total{frontend=\"127.0.0.1:$w\",reason=\"max_connections\"}"}, 11,
       '/metrics: refused over max_connections');
    is($m->{"lookout_connections_refused_total{frontend=\"127.0.0.1:$tls\",reason=\"max_connections\"}"}, 2,
       '... on the TLS listener too');
    close $_ for @$held;
    ok(wait_until(sub { curl("http://127.0.0.1:$w/test/status?code=204")->{status} == 204 }, 5) == 1,
       'served again once they closed');
    $lk2->stop;
};

ok($lk->alive, 'lookout is still running');
$lk->stop;
done_testing();
