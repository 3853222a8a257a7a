#!/usr/bin/perl
# 144-fin-with-answer.t: the last answer of an HTTP connection goes with its FIN
# (issue 22: new connections). When the client itself ends the connection (its request
# says Connection: close, or it is HTTP/1.0 without keep-alive, or the client half-closed
# after it), lookout writes the answer with MSG_MORE (plain) or corked (TLS: the records
# OpenSSL writes) and closes: the kernel sends the tail of the answer and the FIN in one
# segment. When lookout chooses to
# close instead (here a 400 for a malformed request), the client may already have sent its
# next request, and a close with unread bytes resets the connection: then nothing is
# held back, the answer leaves at once and the FIN comes apart, as before.
#
# What the client gets is checked byte for byte in every case, including a pipelined
# request after a close that lookout chose and a 1 MiB answer that takes many writes.
# A client's FIN never costs it an answer already made: not when the FIN is read while a
# 4 MiB answer is still going out to a client slow to read it, nor when it is read in the
# same loop iteration as the broker's answer, after that answer was complete (made
# deterministic by stopping lookout while both arrive).
# Which segment carries the FIN is read from a loopback capture (dumpcap, tshark), an
# independent view of what was on the wire; that part skips when capturing is impossible.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Socket qw(SHUT_WR);
use Test::More;
use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;
use Tshark;
use KafkaMock ();

my $certs = test_certs();
my $dir = tmp_dir();
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ '127.0.0.1:' . free_port() ]);
my ($adm, $w, $t) = free_ports(3);
# $w: the service address, plain; $t: the broker's https listener.
my $lk = start_lookout(dir => $dir, name => 'fin', conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["https://127.0.0.1:$t"] }));
[lookout]
workers = 1
admin = 127.0.0.1:$adm
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$w

EOF
ok($lk->started, 'lookout started') or BAIL_OUT($lk->log // '');

# One case a connection, in this order: its request, how the client ends, what it must
# get, and whether the FIN must ride with the answer's last bytes (1), come apart (0), or
# either (undef: an answer of many writes, whose last may not be the one the kernel held).
my $small = PulsarBroker::test_bytes(100, 0);
my @cases = (
    { name => 'Connection: close',
      req => "GET /test/bytes?n=100 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      body => $small, with => 1 },
    { name => 'HTTP/1.0 without keep-alive',
      req => "GET /test/bytes?n=100 HTTP/1.0\r\nHost: x\r\n\r\n",
      body => $small, with => 1 },
    # Its end reaches lookout before the broker's answer does, mostly: either is right.
    { name => 'half-closed after its request',
      req => "GET /test/bytes?n=100 HTTP/1.1\r\nHost: x\r\n\r\n", shutdown => 1,
      body => $small, with => undef },
    { name => 'a close lookout chooses (400)',
      req => "GET /test/bytes?n=100 HTTP/1.1\r\nHost: x\r\nBad\x01Name: 1\r\n\r\n",
      status => 400, with => 0 },
    { name => 'a close lookout chooses, with the next request already sent',
      req => "GET /test/bytes?n=100 HTTP/1.1\r\nHost: x\r\nBad\x01Name: 1\r\n\r\n"
           . "GET /test/bytes?n=5 HTTP/1.1\r\nHost: x\r\n\r\n",
      status => 400, with => 0, reset_ok => 1 },
    { name => 'Connection: close, 1 MiB',
      req => "GET /test/bytes?n=1048576 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      body => PulsarBroker::test_bytes(1048576, 0), with => undef },
    # The client's FIN is read while the answer is still going out, the client slow to
    # read it: no reason to drop the rest of it.
    { name => 'half-closed after its request, 4 MiB read late',
      req => "GET /test/bytes?n=4194304 HTTP/1.1\r\nHost: x\r\n\r\n", shutdown => 1,
      read_after => 1, unseen => 1,   # 4 MiB at once is more than dumpcap keeps up with
      body => PulsarBroker::test_bytes(4194304, 0), with => undef },
);

# The same cases over TLS, after the plain ones: the FIN with the last record or apart.
# (A record's overhead makes the bytes on the wire more than the client's.) Not the
# half-close: a TCP half-close under TLS, without close_notify, is a truncated stream,
# which lookout, as nginx, does not answer. The client's close_notify, sent once it has
# read lookout's FIN, meets a closed socket, which answers it with a reset: that one comes
# after the answer and is allowed.
my @plain = @cases;
push @cases, map { { %$_, name => "TLS, $_->{name}", tls => 1, reset_ok => 1 } }
    grep { !$_->{shutdown} } @plain;

my $ran = 0;
sub run_cases {
    $ran = 1;
    for my $k (@cases) {
        my ($reply, $how) = http_raw('127.0.0.1', $k->{tls} ? $t : $w, $k->{req}, timeout => 10,
                                     $k->{tls} ? (tls => 1) : (),
                                     $k->{shutdown} ? (shutdown => 1) : (),
                                     read_after => $k->{read_after});
        my $r = parse_response($reply);
        my $status = $k->{status} // 200;
        ok($r && $r->{status} == $status && $r->{complete}, "$k->{name}: a complete $status")
            or diag(substr($reply, 0, 300));
        ok($r && $r->{body} eq $k->{body}, "$k->{name}: the body, byte for byte") if $r && defined $k->{body};
        # A close with the next request unread resets the connection: after the answer.
        ok($how eq 'eof' || ($k->{reset_ok} && $how eq 'reset'),
           "$k->{name}: then the end of the connection ($how)");
        $k->{reply_len} = length $reply;
    }
}

my $why = Tshark::missing();
my ($pcap, $cant);
($pcap, $cant) = Tshark::capture([ $w, $t ], \&run_cases, $dir) unless $why;
run_cases() unless $ran;    # no capture: the answers are checked all the same

SKIP: {
    skip $why // $cant, 1 if $why || !$pcap;
    # Each segment lookout sent: its stream (one per case, in order), length and flags.
    my $r = KafkaMock::run([ 'tshark', '-n', '-r', $pcap, '-Y', "tcp.srcport == $w || tcp.srcport == $t",
                             '-T', 'fields', '-e', 'tcp.stream', '-e', 'tcp.len',
                             '-e', 'tcp.flags.fin', '-e', 'tcp.flags.reset' ], timeout => 60);
    is($r->{exit}, 0, 'tshark read the capture') or diag($r->{err});
    my (%fin, %bytes, %reset, %fin_at, %first_reset);
    my $at = 0;
    for my $line (split /\n/, $r->{out}) {
        my ($stream, $len, $fin, $rst) = split /\t/, $line;
        next unless defined $rst;
        $at++;
        $bytes{$stream} += $len;
        if ($rst eq '1' || $rst eq 'True') {
            $reset{$stream} = 1;
            $first_reset{$stream} //= $at;
        }
        if ($fin eq '1' || $fin eq 'True') {
            $fin{$stream} //= $len;
            $fin_at{$stream} //= $at;
        }
    }
    my @streams = sort { $a <=> $b } keys %bytes;
    is(scalar @streams, scalar @cases, 'one TCP stream a case') or diag($r->{out});
    for my $i (0 .. $#cases) {
        my ($k, $s) = ($cases[$i], $streams[$i]);
        next unless defined $s && !$k->{unseen};
        if ($k->{tls}) {
            ok($bytes{$s} > $k->{reply_len}, "$k->{name}: the records on the wire hold the answer");
        } else {
            is($bytes{$s}, $k->{reply_len}, "$k->{name}: every byte on the wire reached the client");
        }
        ok(defined $fin{$s}, "$k->{name}: lookout sent a FIN");
        ok(!$reset{$s}, "$k->{name}: and no reset") unless $k->{reset_ok};
        ok(!defined $first_reset{$s} || $first_reset{$s} > $fin_at{$s},
           "$k->{name}: any reset came after the FIN") if $k->{tls} && defined $fin_at{$s};
        next unless defined $k->{with} && defined $fin{$s};
        if ($k->{with}) {
            ok($fin{$s} > 0, "$k->{name}: the FIN came with the answer's last bytes ($fin{$s} bytes)");
        } else {
            is($fin{$s}, 0, "$k->{name}: the FIN came apart, the answer not held back");
        }
    }
}

# The half-close and the broker's answer in one loop iteration: lookout is stopped while
# the answer reaches its socket and the client's FIN follows, then goes on and finds both
# ready at once. The answer is complete before the FIN is read, and still queued for the
# client when the FIN is seen: it must go out before the close, not be dropped with it.
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $w, Proto => 'tcp', Timeout => 5);
    ok($s, 'FIN and answer at once: connected') or diag("connect: $@");
    syswrite($s, "GET /test/slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n");
    sleep 0.15;                 # lookout has sent it on: the broker sleeps
    $lk->signal('STOP');
    sleep 0.6;                  # the broker's answer waits in lookout's socket
    CORE::shutdown($s, SHUT_WR);
    sleep 0.1;
    $lk->signal('CONT');
    my ($reply, $end) = ('', time + 10);
    while (time < $end && IO::Select->new($s)->can_read($end - time)) {
        my $n = sysread($s, my $buf, 65536);
        last unless $n;
        $reply .= $buf;
    }
    close $s;
    my $r = parse_response($reply);
    ok($r && $r->{status} == 200 && $r->{complete} && $r->{body} =~ /"slept_ms":300/,
       'FIN and answer at once: the complete answer, then the close')
        or diag("reply: '" . substr($reply, 0, 300) . "'");
}

ok($lk->alive, 'lookout still running');
$lk->stop;
$lk->check_sanitizers;
done_testing();
