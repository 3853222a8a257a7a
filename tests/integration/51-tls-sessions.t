#!/usr/bin/perl
# 51-tls-sessions.t: TLS session resumption and the first request's latency (issue 7).
# tls.session_cache and tls.session_tickets switch resumption by session id and by ticket;
# tickets are encrypted with the first tls.session_ticket_key file and decrypted with any
# (rotation: B+A still takes A's tickets, B alone does not), or with lookout's own keys,
# rotated every tls.session_ticket_lifetime and shared by all workers. The first request
# on a fresh TLS connection is answered at once even when lookout sends nothing after the
# handshake (no tickets): a client with Nagle's algorithm on (Python's) waits for the ACK
# of its Finished, which lookout must not delay. Requests whose head and body reach the
# broker in two writes are not held back by Nagle on lookout's side either.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use List::Util qw(sum);
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use IPC::Open2 qw(open2);
use Socket qw(IPPROTO_TCP TCP_NODELAY);

use Lookout;
use PulsarBroker;

need_tools('python3', 'openssl');

my $certs = test_certs();
my $dir = tmp_dir();
my $probe_bin = "$FindBin::Bin/bin/tls-probe";
my $bp = free_port();
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ "127.0.0.1:$bp" ]);

# lookout(NAME, EXTRA [, WORKERS]): one instance with an https service address and a
# plain one, EXTRA lines in [lookout]; returns (instance, https port, http port).
sub lookout {
    my ($name, $extra, $workers) = @_;
    my ($w, $p) = (free_port(), free_port());
    my $lk = start_lookout(dir => $dir, name => $name, conf => <<"EOF");
[lookout]
workers = @{[ $workers // 1 ]}
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
$extra

[pulsar prod]
internalListenerName = internal
webServiceUrl = https://127.0.0.1:$w

[pulsar plain]
internalListenerName = internal
webServiceUrl = http://127.0.0.1:$p

[broker prod/b1]
advertisedListeners = @{[ $c->internal_listeners(1) ]}

[broker plain/b1x]
advertisedListeners = internal:http://127.0.0.1:$bp
EOF
    ok($lk->started, "lookout $name started") or BAIL_OUT("lookout $name did not start");
    return ($lk, $w, $p);
}

# probe([OPTIONS...], PORTS...): tls-probe's records, one per connection.
sub probe {
    my @args = @_;
    my $out = qx{timeout 60 python3 $probe_bin --ca $certs->{edge_ca} --sni lookout.test @args 2>&1};
    my @r = map { decode_json($_) } grep { /^\{/ } split /\n/, $out;
    diag("tls-probe @args: $out") if $? || !@r;
    return @r;
}

sub reused { join ' ', map { $_->{reused} ? 1 : 0 } @_ }
sub median { my @s = sort { $a <=> $b } @_; return @s ? $s[ $#s / 2 ] : 9999 }

my ($on, $on_w) = lookout('defaults', '', 2);

subtest 'defaults: tickets and the session cache are on, shared by the workers' => sub {
    # Eight resumptions on a 2-worker lookout: SO_REUSEPORT spreads them over both, and
    # each must take the ticket the other worker issued.
    my @r = probe('--resume', ($on_w) x 9);
    is(scalar @r, 9, 'nine connections');
    is(reused(@r), '0 1 1 1 1 1 1 1 1', 'TLS 1.3: the first is a full handshake, the rest resume');
    is($_->{status}, '200', "... answered") for $r[0], $r[-1];
    @r = probe('--tls12', '--resume', ($on_w) x 3);
    is(reused(@r), '0 1 1', 'TLS 1.2 with a ticket: resumes');
    @r = probe('--tls12', '--no-ticket', '--resume', ($on_w) x 3);
    is(reused(@r), '0 1 1', 'TLS 1.2 without a ticket: resumes from the session cache');
};

subtest 'tls.session_tickets = off, tls.session_cache = on' => sub {
    my ($lk, $w) = lookout('cache-only', "tls.session_tickets = off\ntls.session_cache = on");
    is(reused(probe('--tls12', '--resume', ($w) x 3)), '0 1 1', 'TLS 1.2: resumes by session id');
    is(reused(probe('--resume', ($w) x 3)), '0 1 1', 'TLS 1.3: resumes (the ticket names a cached session)');
    $lk->stop;
};

subtest 'tls.session_tickets = on, tls.session_cache = off' => sub {
    my ($lk, $w) = lookout('tickets-only', "tls.session_cache = off");
    is(reused(probe('--resume', ($w) x 3)), '0 1 1', 'TLS 1.3: resumes by ticket');
    is(reused(probe('--tls12', '--no-ticket', '--resume', ($w) x 3)), '0 0 0', 'TLS 1.2 without tickets: no cache to resume from');
    $lk->stop;
};

my ($off, $off_w, $off_p);
subtest 'both off: never resumed' => sub {
    ($off, $off_w, $off_p) = lookout('off', "tls.session_tickets = off\ntls.session_cache = off");
    is(reused(probe('--resume', ($off_w) x 3)), '0 0 0', 'TLS 1.3: full handshakes only');
    is(reused(probe('--tls12', '--resume', ($off_w) x 3)), '0 0 0', 'TLS 1.2: full handshakes only');
};

subtest 'the first request on a fresh TLS connection is not held back' => sub {
    # With no tickets, lookout sends nothing after reading the client's Finished. The
    # client (Nagle on, as Python's sockets are) sends its request right behind the
    # Finished and holds it until that is ACKed; a delayed ACK (40 ms on Linux) stalled
    # every first request. 20 fresh connections: the median must stay far below 40 ms.
    for my $case ([ 'tickets and cache off', $off_w ], [ 'defaults', $on_w ]) {
        my @r = probe(($case->[1]) x 20);
        is(scalar(grep { ($_->{status} // '') eq '200' } @r), 20, "$case->[0]: 20 answers");
        my $m = median(map { $_->{first_byte_ms} } @r);
        cmp_ok($m, '<', 20, "$case->[0]: first byte after a median $m ms (a delayed ACK is 40)");
    }
    my @r = probe('--tls12', '--resume', ($off_w) x 10);
    my $m = median(map { $_->{first_byte_ms} } @r);
    cmp_ok($m, '<', 20, "TLS 1.2, both off: median $m ms");
};

subtest 'a body written after its head is not held back on the way to the broker' => sub {
    # lookout writes the head to the broker at once and the body when it comes; with
    # Nagle on the upstream socket the body waited for the ACK of the head, which the
    # broker delays on a kept-alive connection.
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $off_p, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $!");
    setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);
    my @ms;
    for my $i (1 .. 12) {
        my $t0 = time;
        syswrite($s, "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n");
        sleep 0.003;
        syswrite($s, "0123456789");
        my $buf = '';
        my $end = time + 5;
        while ($buf !~ /\}/ && time < $end) {
            my $n = sysread($s, $buf, 4096, length $buf);
            last unless $n;
        }
        like($buf, qr/^HTTP\/1\.1 200/, "request $i: 200") if $i == 1 || $i == 12;
        push @ms, (time - $t0) * 1000;
    }
    my $m = median(@ms[ 2 .. $#ms ]);    # pooled broker connections
    cmp_ok($m, '<', 20, sprintf('median %.1f ms per request (a delayed ACK is 40)', $m));
};

subtest 'an idle TLS connection holds no OpenSSL buffers' => sub {
    # SSL_MODE_RELEASE_BUFFERS: OpenSSL frees its 16 KiB read and write buffers whenever
    # they are empty. Without it an idle TLS connection cost 23-27 KiB more than a plain
    # one; with it about 14 (OpenSSL 3's SSL object alone is 7). Memory figures from a
    # sanitizer build mean nothing here.
    my $bin = Lookout::lookout_bin();
    plan skip_all => 'sanitizer build' if `grep -c __asan_init '$bin' 2>/dev/null` + 0 > 0;
    my ($lk, $w, $p) = lookout('rss', '');
    my $n = 600;
    my %per;
    for my $kind (qw(plain tls)) {
        my @args = ($kind eq 'plain' ? ('--plain', $p) : ($w));
        hold($lk, 50, @args);    # warm up: one-time allocations, malloc arenas
        my $before = rss_kb($lk->pid);
        my $after = hold($lk, $n, @args);
        $per{$kind} = ($after - $before) / $n;
        note(sprintf('%s: %d -> %d KiB for %d idle connections: %.1f KiB each', $kind, $before, $after, $n, $per{$kind}));
    }
    my $tls = $per{tls} - $per{plain};
    cmp_ok($tls, '<', 15, sprintf('TLS adds %.1f KiB per idle connection (%.1f in all)', $tls, $per{tls}));
    $lk->stop;
};

# hold(LOOKOUT, N, ARGS...): lookout's VmRSS (KiB) while tls-probe holds N idle connections.
sub hold {
    my ($lk, $n, @args) = @_;
    my $pid = open2(my $out, my $in, 'python3', $probe_bin, '--ca', $certs->{edge_ca}, '--sni', 'lookout.test',
                    '--hold', $n, @args);
    my $line = <$out> // '';
    sleep 0.5;
    my $rss = rss_kb($lk->pid);
    close $in;
    waitpid $pid, 0;
    fail("tls-probe --hold $n @args: $line") unless $line =~ /"held": $n/;
    return $rss;
}

# Ticket key files: A, B, and two that are not keys.
my %key;
for my $k (qw(A B)) {
    $key{$k} = "$dir/ticket-$k.key";
    system("openssl rand 80 > $key{$k}") == 0 or BAIL_OUT('openssl rand');
}
system("openssl rand 48 > $dir/ticket-C48.key") == 0 or BAIL_OUT('openssl rand');

subtest 'tls.session_ticket_key rotation' => sub {
    my ($a, $wa) = lookout('key-A', "tls.session_ticket_key = $key{A}");
    my ($ba, $wba) = lookout('key-BA', "tls.session_ticket_key = $key{B}\ntls.session_ticket_key = $key{A}");
    my ($b, $wb) = lookout('key-B', "tls.session_ticket_key = $key{B}");
    my ($c48, $wc) = lookout('key-C48', "tls.session_ticket_key = $dir/ticket-C48.key");
    # Each hop offers the ticket the previous connection ended with.
    is(reused(probe('--resume', $wa, $wa)), '0 1', 'A: its own ticket resumes');
    is(reused(probe('--resume', $wa, $wba)), '0 1', 'a ticket from A resumes on B+A (A still decrypts)');
    is(reused(probe('--resume', $wa, $wb)), '0 0', 'on B alone (A rotated out): a full handshake');
    is(reused(probe('--resume', $wa, $wba, $wb)), '0 1 1', 'B+A renews an A ticket under B, which B takes');
    is(reused(probe('--resume', $wb, $wba, $wa)), '0 1 0', 'B tickets: B+A takes them, A does not');
    is(reused(probe('--tls12', '--resume', $wa, $wba, $wb)), '0 1 1', 'the same over TLS 1.2');
    is(reused(probe('--resume', $wc, $wc)), '0 1', 'a 48-byte key (AES-128) works too');
    unlike($_->log, qr/error/i, 'no errors logged') for $a, $ba;
    $_->stop for $a, $ba, $b, $c48;
};

subtest "lookout's own keys expire after their lifetime" => sub {
    my ($lk, $w) = lookout('lifetime', "tls.session_ticket_lifetime = 1s", 2);
    my @r = probe('--resume', $w, $w, $w);
    is(reused(@r), '0 1 1', 'within the lifetime: resumes');
    # Get a fresh ticket, then let more than two lifetimes pass: its key has rotated out
    # (and the session has expired).
    my $out = qx{timeout 30 python3 -c '
import socket, ssl, time, sys
ctx = ssl.create_default_context(cafile="$certs->{edge_ca}")
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
def get(sess):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", $w)), server_hostname="lookout.test", session=sess)
    s.sendall(b"GET /admin/v2/clusters HTTP/1.1\\r\\nHost: lookout.test\\r\\nConnection: close\\r\\n\\r\\n")
    while s.recv(65536): pass
    r = (s.session, s.session_reused); s.close(); return r
sess, _ = get(None)
time.sleep(2.5)
_, reused = get(sess)
print("late", int(reused))
' 2>&1};
    like($out, qr/^late 0$/m, 'after two lifetimes: a full handshake') or diag($out);
    is(reused(probe('--resume', $w, $w)), '0 1', 'and new tickets resume again');
    $lk->stop;
};

subtest 'config errors' => sub {
    my $base = "[lookout]\ntls.certificate = $certs->{edge_crt}\ntls.key = $certs->{edge_key}\n";
    my $tail = "\n[pulsar p]\nwebServiceUrl = https://127.0.0.1:1\n[broker p/b]\nadvertisedListeners = i:http://127.0.0.1:2\n";
    my %cases = (
        "tls.session_ticket_key = $dir/nope.key" => qr/:4: tls\.session_ticket_key: cannot open \Q$dir\E\/nope\.key/,
        "tls.session_ticket_key = $certs->{edge_crt}" => qr/:4: tls\.session_ticket_key: \S+ is not 80 bytes/,
        "tls.session_ticket_key = $key{A}\ntls.session_ticket_key = $key{A}" => qr/:5: tls\.session_ticket_key: .* same key name .*\(line 4\)/,
        "tls.session_tickets = off\ntls.session_ticket_key = $key{A}" => qr/:5: \[lookout\] tls\.session_ticket_key: tls\.session_tickets is off/,
        "tls.session_cache = maybe" => qr/:4: \[lookout\] tls\.session_cache: 'maybe' is not on or off/,
        "tls.session_ticket_lifetime = 500ms" => qr/:4: \[lookout\] tls\.session_ticket_lifetime: '500ms' is not from 1s to 7 days/,
    );
    for my $extra (sort keys %cases) {
        my $f = spew("$dir/bad.conf", $base . $extra . $tail);
        my $r = run_lookout(args => [ '--check', '-c', $f ]);
        (my $what = $extra) =~ s/\n/; /g;
        is($r->{exit}, 1, "refused: $what");
        like($r->{out}, qr/\Q$f\E$cases{$extra}/, '... with file:line') or diag($r->{out});
        unlike($r->{out}, qr/[^\x20-\x7e\n]/, '... and no key bytes');
    }
};

$on->stop;
$off->stop;
done_testing;
