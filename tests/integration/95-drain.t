#!/usr/bin/perl
# 95-drain.t: SIGTERM and SIGINT (issue 10). lookout stops accepting at once, closes idle
# connections, lets exchanges under way finish for up to drain_timeout, and exits 0: as
# soon as nothing is left, or at drain_timeout, cutting what still runs. SIGINT does the
# same within 1 s. Kafka connections close once no request awaits its answer; Pulsar
# binary ones at a frame boundary.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarBroker;

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python();
my @p = free_ports(1);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ]);

# A Kafka broker that answers any request with an empty body after the correlation id, at
# once, or after 1.2 s for a request whose client id is 's'; it writes DIR/kafka-got-ID
# when a request with client id ID came.  (Not by correlation id: lookout sends the broker
# ids of its own.)
my ($kport, $kpid) = KafkaMock::scripted_broker(sub {
    my ($req) = @_;
    my $id = substr($req, 10, 1);
    spew("$dir/kafka-got-$id", '');
    sleep 1.2 if $id eq 's';
    return substr($req, 4, 4) . "\0\0";
});

# A Kafka request (Produce v3: never rewritten, streamed) with correlation id CORR, and
# client id 's' when SLOW (the broker answers it after 1.2 s).
sub kreq {
    my ($corr, $slow) = @_;
    return KafkaMock::frame(pack('nnN', 0, 3, $corr) . pack('n', 1) . ($slow ? 's' : 'x'));
}

sub start_with {
    my (%o) = @_;
    my ($web, $kboot, $e1, $kext) = free_ports(4);
    my $lk = start_lookout(dir => $dir, name => $o{name}, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$e1"] }));
[lookout]
workers = 2
$o{lookout}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$web

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$kboot

[broker k/1]
advertised.listeners = INTERNAL://127.0.0.1:$kport,EXTERNAL://127.0.0.1:$kext

EOF
    ok($lk->started, "lookout ($o{name}) started") or BAIL_OUT('lookout did not start');
    return ($lk, $web, $kboot);
}

# A slow request (ms) through lookout, given time to reach the broker (which logs a
# request only once it has answered).
sub slow_request {
    my ($web, $ms) = @_;
    my $h = curl_start({ timeout => 20 }, "http://127.0.0.1:$web/test/slow?ms=$ms");
    sleep($ENV{LOOKOUT_SANITIZED} ? 0.8 : 0.4);
    return $h;
}

# Whether the peer closed s within secs (1), or not (0).
sub closed_within {
    my ($s, $secs) = @_;
    return 0 unless IO::Select->new($s)->can_read($secs);
    my $n = sysread($s, my $buf, 4096);
    return !$n ? 1 : 0;
}

sub refused { return !IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $_[0], Proto => 'tcp', Timeout => 2) }

subtest 'SIGTERM: exchanges under way finish, then exit 0 before drain_timeout' => sub {
    my ($lk, $web, $kboot) = start_with(name => 'term', lookout => 'drain_timeout = 6s');
    # An idle keep-alive connection, after one request.
    my $idle = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $web, Proto => 'tcp', Timeout => 5);
    print $idle "GET /test/status?code=200 HTTP/1.1\r\nHost: x\r\n\r\n";
    my $first = '';
    wait_until(sub { sysread($idle, $first, 4096, length $first); $first =~ /\r\n\r\n.*test status/s }, 5);
    # A Kafka connection with a slow request under way, another idle after its answer.
    my $kbusy = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $kboot, Proto => 'tcp', Timeout => 5);
    my $kidle = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $kboot, Proto => 'tcp', Timeout => 5);
    syswrite($kidle, kreq(1));
    is(unpack('N', KafkaMock::read_frame($kidle, 5) // "\xff\xff\xff\xff"), 1, 'Kafka: a request answered before');
    my $slow = slow_request($web, 1500);
    syswrite($kbusy, kreq(7, 'slow'));
    wait_until(sub { -e "$dir/kafka-got-s" }, 5) or diag('the slow Kafka request did not reach the broker');

    my $t0 = time;
    $lk->signal('TERM');
    ok(wait_until(sub { refused($web) }, 2), 'new connections are refused at once');
    ok(closed_within($idle, 2), 'the idle keep-alive connection is closed at once');
    ok(closed_within($kidle, 2), 'the idle Kafka connection too');
    my ($k, $how) = KafkaMock::read_frame($kbusy, 5);
    is($k && unpack('N', $k), 7, 'the Kafka request under way is answered') or diag("read: $how");
    ($k, $how) = KafkaMock::read_frame($kbusy, 3);
    is($how, 'eof', '... then its connection closes');
    my $r = curl_wait($slow);
    is($r->{status}, 200, 'the HTTP request under way completes with 200') or diag($r->{err});
    is(lc($r->{headers}{connection} // ''), 'close', '... saying Connection: close');
    my $st = $lk->wait_exit(10);
    my $took = time - $t0;
    is($lk->exit_code, 0, 'exit code 0');
    cmp_ok($took, '<', 5, sprintf('exits once nothing is left (%.2f s), before drain_timeout (6 s)', $took));
    cmp_ok($took, '>=', 1, '... and not before the slow request was done');
    like($lk->log, qr/SIGTERM: stopping; exchanges under way may take up to 6000 ms/, 'logged');
    $lk->check_sanitizers;
};

# A 6 s request under way, then SIG: lookout cuts it and exits 0 after about a second,
# having logged what.
sub cut_after_a_second {
    my ($name, $sig, $lookout, $log) = @_;
    my ($lk, $web) = start_with(name => $name, lookout => $lookout);
    my $slow = slow_request($web, 6000);
    my $t0 = time;
    $lk->signal($sig);
    $lk->wait_exit(10);
    my $took = time - $t0;
    is($lk->exit_code, 0, 'exit code 0');
    cmp_ok($took, '>=', 0.9, sprintf('waited about 1 s (%.2f s)', $took));
    cmp_ok($took, '<', 3, '... and no longer');
    my $r = curl_wait($slow);
    isnt($r->{status}, 200, 'the slow request was cut') or diag(explain($r));
    like($lk->log, $_, "logged: $_") for @$log;
    $lk->check_sanitizers;
}

subtest 'an exchange slower than drain_timeout is cut; exit 0' => sub {
    cut_after_a_second('cut', 'TERM', 'drain_timeout = 1s', [qr/drain_timeout: closing 1 connection still open/]);
};

subtest 'SIGINT: the same, within 1 s (drain_timeout is 30 s)' => sub {
    cut_after_a_second('int', 'INT', '', [qr/SIGINT: stopping; exchanges under way may take up to 1000 ms/,
                                          qr/drain_timeout: closing 1 connection still open/]);
};

subtest 'Pulsar binary: an idle connection closes at once' => sub {
    plan skip_all => 'python3 not found' unless $PY;
    my $pext = free_port();
    my $pb = PulsarBinBroker->start(dir => $dir,
        brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$pext" } ],
        topics => [ { name => 't1', owner => 'b1' } ]);
    my $svc = free_port();
    my $lk = start_lookout(dir => $dir, name => 'pulsar', conf => <<"EOF");
[lookout]
workers = 1
drain_timeout = 10s

[pulsar bin]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc

[broker bin/b1]
advertisedListeners = internal:pulsar://@{[ $pb->addr('b1') ]},internal:http://127.0.0.9:9,external:pulsar://127.0.0.1:$pext
EOF
    ok($lk->started, 'lookout started') or return;
    # A lookup, then a connection that sits idle (8 s at most) until lookout closes it.
    my $out = "$dir/probe.out";
    my $probe = fork // die;
    if ($probe == 0) {
        open STDOUT, '>', $out;
        { no warnings 'exec';
          exec $PY, "$BIN/pulsar-probe", "127.0.0.1:$svc",
              encode_json({ lookup => 'persistent://public/default/t1', follow => 0 }), encode_json({ wait => 8 }); }
        POSIX::_exit(127);
    }
    wait_until(sub { (slurp($out) // '') =~ /"lookup"/ }, 10) or diag('no lookup answer');
    my $t0 = time;
    $lk->signal('TERM');
    $lk->wait_exit(10);
    my $took = time - $t0;
    is($lk->exit_code, 0, 'exit code 0');
    cmp_ok($took, '<', 2, sprintf('at once (%.2f s)', $took));
    waitpid($probe, 0);
    my ($w) = grep { ($_->{step} // '') eq '1' } map { eval { decode_json($_) } // () } split /\n/, slurp($out) // '';
    ok($w && $w->{closed}, 'the client saw its connection closed') or diag(slurp($out));
    $lk->check_sanitizers;
    $pb->stop;
};

kill 'TERM', $kpid;
waitpid($kpid, 0);
$c->stop;
done_testing();
