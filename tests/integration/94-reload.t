#!/usr/bin/perl
# 94-reload.t: SIGHUP (issue 10). lookout reads its config and certificates again and swaps
# them in for new connections and exchanges: listeners on the same address keep their
# socket, added ones open, removed ones close; an idle keep-alive connection serves its next
# request on the new config; an exchange under way on a removed listener finishes; a bad
# config is refused with file:line and the old one keeps serving. Under load (HTTP, Kafka
# and Pulsar binary clients looping) 20 reloads cost no request, and leave no fd behind.

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

plan skip_all => 'needs /proc' unless -d "/proc/$$/fd";

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python();
my $SAN = $ENV{LOOKOUT_SANITIZED} ? 1 : 0;

# HTTP: two brokers; b1's lookup address moves between two ports from one config to the
# next (so one listener is removed and one added per reload), the rest stay.
my @p = free_ports(2);
my ($web, $e1, $e1b, $e2, $t2) = free_ports(5);
# The certificate files the config names; a subtest swaps in another certificate.
my $certs = test_certs();
spew("$dir/edge.crt", slurp($certs->{edge_crt}));
spew("$dir/edge.key", slurp($certs->{edge_key}));
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ]);

# Kafka (librdkafka's mock) and Pulsar binary (the test broker), when this machine has them.
my $kafka_why = KafkaMock::missing() // (Lookout::_which('kcat') ? undef : 'kcat not found');
my ($m, $kboot, $kext);
unless ($kafka_why) {
    $m = KafkaMock->start(brokers => 1, topics => ['lk-reload:1'], dir => $dir);
    ($kboot, $kext) = free_ports(2);
}
my $pulsar_why = $PY ? undef : 'python3 not found';
my ($pb, $psvc, $pext);
unless ($pulsar_why) {
    $pext = free_port();
    $pb = PulsarBinBroker->start(dir => $dir,
        brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$pext" } ],
        topics => [ { name => 't1', owner => 'b1' } ]);
    $psvc = free_port();
}

# The config: variant 'a' has b1 at $e1, 'b' at $e1b.
sub conf {
    my ($v) = @_;
    my $b1 = $v eq 'a' ? $e1 : $e1b;
    my $text = <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$b1"], 2 => ["http://127.0.0.1:$e2", "https://127.0.0.1:$t2"] });
[lookout]
workers = 2
timeout.idle = 3s
tls.certificate = edge.crt
tls.key = edge.key

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$web

EOF
    if ($m) {
        my $b = $m->brokers->[0];
        $text .= "[kafka k]\ninter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
               . "listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
               . "bootstrap.servers = 127.0.0.1:$kboot\n\n"
               . "[broker k/$b->{id}]\nadvertised.listeners = INTERNAL://$b->{host}:$b->{port},EXTERNAL://127.0.0.1:$kext\n\n";
    }
    if ($pb) {
        $text .= "[pulsar bin]\ninternalListenerName = internal\nlookupListenerName = external\n"
               . "serviceUrl = pulsar://127.0.0.1:$psvc\n\n"
               . "[broker bin/b1]\nadvertisedListeners = internal:pulsar://" . $pb->addr('b1')
               . ",internal:http://127.0.0.9:9,external:pulsar://127.0.0.1:$pext\n\n";
    }
    return $text;
}

my $lk = start_lookout(dir => $dir, conf => conf('a'));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');
my $pid = $lk->pid;
my $gen = 1;
sub nfds { my @f = glob("/proc/$pid/fd/*"); return scalar @f }
# What lookout holds open with nothing connected: listeners, pipes, epoll, the log.
sleep 0.3;
my $fd0 = nfds();

sub http_get {
    my ($s, $path) = @_;
    print $s "GET $path HTTP/1.1\r\nHost: x\r\n\r\n";
    my $buf = '';
    my $end = time + 5;
    while (time < $end) {
        my $r = parse_response($buf);
        return $r if $r && $r->{complete} && length($r->{body}) == ($r->{headers}{'content-length'} // -1);
        last unless IO::Select->new($s)->can_read($end - time);
        last unless sysread($s, $buf, 65536, length $buf);
    }
    return parse_response($buf);
}

# The inodes of the sockets listening on 127.0.0.1:PORT (one per worker), sorted.
sub listen_inodes {
    my ($port) = @_;
    my $want = sprintf('0100007F:%04X', $port);
    my @ino;
    for my $l (split /\n/, slurp('/proc/net/tcp') // '') {
        my @f = split ' ', $l;
        push @ino, $f[9] if ($f[1] // '') eq $want && ($f[3] // '') eq '0A';
    }
    return join ' ', sort @ino;
}

sub esc { my $s = shift; $s =~ s/([^A-Za-z0-9._~-])/sprintf('%%%02X', ord $1)/ge; return $s }

subtest 'keep-alive connection, removed and added listeners' => sub {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $web, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    my $path = '/test/location?to=' . esc("http://127.0.0.1:$p[0]/ka?x=1");
    my $r = http_get($s, $path);
    is($r && $r->{headers}{location}, "http://127.0.0.1:$e1/ka?x=1", 'before: b1 rewritten to its address in config a');
    # An exchange under way on the listener the reload removes.
    my $slow = curl_start({ timeout => 20 }, "http://127.0.0.1:$e1/test/slow?ms=800");
    # And one with the next request pipelined behind it: that one begins on the removed
    # listener, where the connection closes, but only once the answer before it is out.
    my $piped = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $e1, Proto => 'tcp', Timeout => 5)
        or return fail("connect: $@");
    syswrite($piped, "GET /test/slow?ms=800 HTTP/1.1\r\nHost: x\r\n\r\n"
                   . "GET /test/status?code=201 HTTP/1.1\r\nHost: x\r\n\r\n");
    sleep 0.3; # on its way to the broker (which logs it once answered)
    my $inodes = listen_inodes($web);

    like($lk->reload(conf('b')), qr/^SIGHUP: reloaded \Q${\ $lk->conf }\E, generation 2 \(\d+ listeners kept, 1 added, 1 removed\)$/,
         'reloaded: generation 2, one listener added and one removed');
    $gen = 2;
    is(listen_inodes($web), $inodes, "a kept listener keeps its sockets ($inodes)");
    $r = http_get($s, $path);
    is($r && $r->{headers}{location}, "http://127.0.0.1:$e1b/ka?x=1",
       'the same connection, its next request: on the new config');
    close $s;
    my $sr = curl_wait($slow);
    is($sr->{status}, 200, 'the exchange under way on the removed listener finished') or diag($sr->{err});
    my ($got, $end) = ('', time + 10);
    while (time < $end && IO::Select->new($piped)->can_read($end - time)) {
        last unless sysread($piped, my $buf, 65536);
        $got .= $buf;
    }
    my $pr = parse_response($got);
    ok($pr && $pr->{status} == 200 && $pr->{complete} && $pr->{rest} eq '',
       'pipelined on the removed listener: the answer under way, whole, then the close')
        or diag("reply: '" . substr($got, 0, 300) . "'");
    like($lk->log, qr/a reload removed its listener; closing/, '... the next request logged as closed by the reload');
    ok(!IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $e1, Proto => 'tcp', Timeout => 2),
       'the removed listener refuses new connections');
    is(curl("http://127.0.0.1:$e1b/test/status?code=201")->{status}, 201, 'the added one accepts');
};

subtest 'certificates are read again' => sub {
    need_modules('IO::Socket::SSL');
    my $cn = sub {
        my $s = IO::Socket::SSL->new(PeerHost => '127.0.0.1', PeerPort => $t2, Timeout => 5,
                                     SSL_verify_mode => IO::Socket::SSL::SSL_VERIFY_NONE()) or return "connect: " . IO::Socket::SSL::errstr();
        my $name = $s->peer_certificate('commonName');
        close $s;
        return $name;
    };
    is($cn->(), 'lookout.test', 'before: the first certificate');
    spew("$dir/edge.crt", slurp($certs->{edge2_crt}));
    spew("$dir/edge.key", slurp($certs->{edge2_key}));
    like($lk->reload(conf('b')), qr/^SIGHUP: reloaded .*generation 3 \(\d+ listeners kept, 0 added, 0 removed\)$/,
         'reloaded (the config itself unchanged)');
    $gen = 3;
    is($cn->(), 'other.test', 'after: the new certificate, on the kept TLS listener');
    spew("$dir/edge.key", "not a key\n");
    like($lk->reload(conf('b')), qr/^SIGHUP: reload refused: \Q${\ $lk->conf }\E:\d+: tls.key: cannot load .*still serving generation 3$/,
         'a key that does not load: refused, with the line of tls.key');
    is($cn->(), 'other.test', '... and the certificate of before still served');
    spew("$dir/edge.key", slurp($certs->{edge2_key}));
};

subtest 'a bad config is refused; the old one keeps serving' => sub {
    my $bad = conf('a');
    $bad =~ s/^timeout\.idle = 3s$/timeout.idle = 3s\ntimeout.idel = 1s/m or die;
    my $line = 1 + (() = substr($bad, 0, index($bad, 'timeout.idel')) =~ /\n/g);
    like($lk->reload($bad), qr/^SIGHUP: reload refused: \Q${\ $lk->conf }\E:$line: .*; still serving generation $gen$/,
         "refused with file:line ($line)");
    is(curl("http://127.0.0.1:$e1b/test/status?code=201")->{status}, 201, 'generation 2 still serves (b1 at its new address)');
    ok(!IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $e1, Proto => 'tcp', Timeout => 2),
       '... and not config a');
    # Taken for a reload that loads but cannot be served: a port another process holds.
    my $hold = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1, Proto => 'tcp');
    my $busy = conf('b') =~ s/webServiceUrl = http:\/\/127\.0\.0\.1:$web/webServiceUrl = http:\/\/127.0.0.1:@{[ $hold->sockport ]}/r;
    like($lk->reload($busy), qr/^SIGHUP: reload refused: .*cannot listen on 127\.0\.0\.1:${\ $hold->sockport }: .*still serving generation $gen$/,
         'a listener that cannot be bound: refused too');
    is(curl("http://127.0.0.1:$web/test/status?code=202")->{status}, 202, '... the old service address still serves');
};

# ---- under load ------------------------------------------------------------------------

# A loader: a child that runs CODE (one round, returning (ok, failed, note)) until DIR/stop
# appears or 60 s pass, and writes its totals to DIR/NAME.
sub loader {
    my ($name, $code) = @_;
    my $pid = fork // die "fork: $!";
    return $pid if $pid;
    my ($ok, $bad, @notes) = (0, 0);
    my $end = time + 60;
    while (!-e "$dir/stop" && time < $end) {
        my ($o, $b, $note) = $code->();
        $ok += $o;
        $bad += $b;
        push @notes, $note if $b && @notes < 5;
    }
    spew("$dir/load-$name", encode_json({ ok => $ok, failed => $bad, notes => \@notes }));
    POSIX::_exit(0);
}

sub run_cmd {
    my (@argv) = @_;
    my $r = KafkaMock::run(\@argv, timeout => 20);
    return $r;
}

my %loaders;
# HTTP: five requests per curl, on one keep-alive connection, to two kept listeners.
$loaders{http} = loader('http', sub {
    my @urls = map { ("http://127.0.0.1:$web/test/status?code=200", "http://127.0.0.1:$e2/test/status?code=200") } 1 .. 3;
    my $r = run_cmd('curl', '-q', '-s', (map { ('-o', '/dev/null') } @urls), '--max-time', '10', '-w', '%{http_code}\n', @urls);
    my @codes = split /\n/, $r->{out};
    my $ok = grep { $_ eq '200' } @codes;
    return ($ok, @urls - $ok, "curl exit $r->{exit}: @codes");
});
unless ($kafka_why) {
    # Kafka: Metadata through the bootstrap address, and a produce to the broker's.
    $loaders{kafka} = loader('kafka', sub {
        my $r = run_cmd('kcat', '-L', '-J', '-b', "127.0.0.1:$kboot", '-m', '5');
        my $md = eval { decode_json($r->{out}) } // {};
        my $good = $r->{exit} == 0 && grep { ($_->{name} // '') eq "127.0.0.1:$kext" } @{ $md->{brokers} // [] };
        return (1, 0) if $good;
        return (0, 1, "kcat -L exit $r->{exit}: $r->{err}");
    });
}
unless ($pulsar_why) {
    # Pulsar binary: a connection with three lookups, 0.2 s apart (it spans reloads).
    $loaders{pulsar} = loader('pulsar', sub {
        my @steps = map { ({ lookup => 'persistent://public/default/t1', follow => 0 }, { wait => 0.2 }) } 1 .. 3;
        my $r = run_cmd($PY, "$BIN/pulsar-probe", "127.0.0.1:$psvc", map { encode_json($_) } @steps);
        my @l = grep { $_->{lookup} } map { eval { decode_json($_) } // () } split /\n/, $r->{out};
        my $ok = grep { ($_->{hops}[0]{fields}{brokerServiceUrl} // '') eq "pulsar://127.0.0.1:$pext" } @l;
        return ($ok, 3 - $ok, "probe exit $r->{exit}: " . substr($r->{out} . $r->{err}, 0, 300));
    });
}

subtest '20 reloads under load' => sub {
    my $rss0 = rss_kb($pid); # warm: after the subtests above
    my ($kept, $bad) = (0, 0);
    for my $i (1 .. 20) {
        my $v = $i % 2 ? 'a' : 'b';
        my $line = $lk->reload(conf($v));
        $gen++;
        $line =~ /^SIGHUP: reloaded .*, generation $gen \(/ ? $kept++ : do { $bad++; diag($line) };
        sleep 0.15;
    }
    is($kept, 20, 'twenty reloads, each a new generation');
    sleep 0.5;
    spew("$dir/stop", '');
    for my $name (sort keys %loaders) {
        waitpid($loaders{$name}, 0);
        my $t = eval { decode_json(slurp("$dir/load-$name")) } // {};
        is($t->{failed}, 0, "$name: no request failed") or diag(explain($t->{notes}));
        cmp_ok($t->{ok} // 0, '>=', $name eq 'http' ? 30 : 5, "$name: requests served during the reloads ($t->{ok})");
    }
    note("skipped: Kafka ($kafka_why)") if $kafka_why;
    note("skipped: Pulsar binary ($pulsar_why)") if $pulsar_why;
    # Idle upstream connections go after timeout.idle (3 s); the clients have closed theirs.
    ok(wait_until(sub { nfds() <= $fd0 }, 10), "fds back to the baseline ($fd0)")
        or diag('now ' . nfds() . ': ' . join(' ', map { readlink($_) // '?' } glob("/proc/$pid/fd/*")));
    my $rss1 = rss_kb($pid);
    cmp_ok($rss1 - $rss0, '<', $SAN ? 96 * 1024 : 24 * 1024, "RSS growth bounded ($rss0 -> $rss1 KiB)");
    is(curl("http://127.0.0.1:$e1b/test/status?code=201")->{status}, 201, 'and it serves config b (the last one)');
};

ok($lk->alive, 'lookout still running');
is($lk->stop, 0, 'exits 0 on SIGTERM');
$c->stop;
done_testing();
