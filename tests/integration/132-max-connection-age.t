#!/usr/bin/perl
# 132-max-connection-age.t: max_connection_age (issue 21 item 4). A client connection older
# than its age (from accept, jitter 0% here so that the times are exact) is ended at its next
# boundary, so that clients reconnect and a balancer in front of several lookouts spreads
# them again:
#   - HTTP: the first answer past the age says Connection: close and the connection closes
#     after it; the next request goes over a new connection; a request in flight at the age
#     completes; an idle keep-alive connection is closed at its age; one still busy at
#     max_connection_age.grace is closed then, and logged; curl over TLS, asking at 4 a
#     second, is told Connection: close and opens a new connection after each age;
#   - Kafka: a connection is closed between answers (a request in flight at the age is
#     answered first); a Metadata v13 that comes behind it is answered REBOOTSTRAP_REQUIRED
#     (KIP-1102), and librdkafka 2.11+ then bootstraps again and goes on; kafka-python
#     produces and consumes through several ages and loses nothing;
#   - Pulsar binary: an idle connection is closed between frames at its age, and the client's
#     next connection is served;
#   - off (the default): connections live on.
# lookout_connections_aged_total counts them by frontend and protocol.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use POSIX ();
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
my $SLOW = $ENV{LOOKOUT_SANITIZED} ? 2 : 1; # sanitizers: everything slower
my @p = free_ports(1);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ]);

# A Kafka broker that answers any request with an empty body after the correlation id, at
# once, or after 1.5 s for a request whose client id is 's'. It writes DIR/kafka-got-ID
# when a request with client id ID came.
my ($kport, $kpid) = KafkaMock::scripted_broker(sub {
    my ($req) = @_;
    my $id = substr($req, 10, 1);
    spew("$dir/kafka-got-$id", '');
    sleep 1.5 if $id eq 's';
    return substr($req, 4, 4) . "\0\0";
});

sub kreq { # Produce v3 (streamed, never rewritten), client id 's' when slow
    my ($corr, $slow) = @_;
    return KafkaMock::frame(pack('nnN', 0, 3, $corr) . pack('n', 1) . ($slow ? 's' : 'x'));
}

sub metadata13 { # Metadata v13 (flexible, header v2), client id 'm': Topics null, auto-create on
    my ($corr) = @_;
    return KafkaMock::frame(pack('nnN', 3, 13, $corr) . pack('n', 1) . 'm' . "\0" . "\0\x01\0\0");
}

sub start_with {
    my (%o) = @_;
    my ($web, $kboot, $e1, $kext, $adm) = free_ports(5);
    my $conf = <<"CONF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$e1"] });
[lookout]
workers = 1
admin = 127.0.0.1:$adm
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

CONF
    my $lk = start_lookout(dir => $dir, name => $o{name}, conf => $conf);
    ok($lk->started, "lookout ($o{name}) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    return { lk => $lk, web => $web, kboot => $kboot, adm => $adm };
}

# A keep-alive HTTP client on one connection: { s, buf }.
sub ka_open {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
        or die "connect: $@";
    return { s => $s, buf => '' };
}

# Sends a GET of path on k and reads its response: (response as parse_response gives it,
# how), how "ok", "eof" (closed before a whole response) or "timeout".
sub ka_get {
    my ($k, $path, $timeout) = @_;
    local $SIG{PIPE} = 'IGNORE';
    syswrite($k->{s}, "GET $path HTTP/1.1\r\nHost: x\r\n\r\n") or return (undef, 'eof');
    my $end = time + ($timeout // 10);
    while (1) {
        my $r = parse_response($k->{buf});
        if ($r && $r->{complete} &&
            (defined $r->{headers}{'content-length'} || ($r->{headers}{'transfer-encoding'} // '') =~ /chunked/)) {
            $k->{buf} = $r->{rest};
            return ($r, 'ok');
        }
        my $left = $end - time;
        return (undef, 'timeout') if $left <= 0;
        next unless IO::Select->new($k->{s})->can_read($left);
        my $n = sysread($k->{s}, my $b, 65536);
        return (undef, 'eof') unless $n;
        $k->{buf} .= $b;
    }
}

# Whether the peer closed s within secs.
sub closed_within {
    my ($s, $secs) = @_;
    my $end = time + $secs;
    while ((my $left = $end - time) > 0) {
        return 0 unless IO::Select->new($s)->can_read($left);
        my $n = sysread($s, my $buf, 4096);
        return 1 unless $n;
    }
    return 0;
}

# The sum of the series of NAME (default lookout_connections_aged_total) for protocol proto,
# from the admin listener at port adm.
sub aged {
    my ($adm, $proto, $name) = @_;
    $name //= 'lookout_connections_aged_total';
    my $r = curl("http://127.0.0.1:$adm/metrics");
    my $n = 0;
    $n += $1 while $r->{body} =~ /^\Q$name\E\{[^}]*protocol="\Q$proto\E"[^}]*\} (\d+)$/mg;
    return $n;
}

# ---- HTTP -----------------------------------------------------------------------------------

my $on = start_with(name => 'on', lookout => "max_connection_age = 1s\nmax_connection_age.jitter = 0%\n"
                                             . "max_connection_age.grace = 3s");

subtest 'HTTP keep-alive: Connection: close on the first answer past the age, then a new connection' => sub {
    my $k = ka_open($on->{web});
    my $t0 = time;
    my (@keep, $last, $how);
    # a request every 150 ms, for 3 s at most
    while (time - $t0 < 3) {
        (my $r, $how) = ka_get($k, '/test/status?code=200');
        last unless $r;
        if (lc($r->{headers}{connection} // '') eq 'close') { $last = [ $r, time - $t0 ]; last }
        push @keep, $r;
        sleep 0.15;
    }
    cmp_ok(scalar @keep, '>=', 4, scalar(@keep) . ' answers kept the connection before its age');
    ok($last, 'then an answer said Connection: close') or return diag("last read: $how");
    is($last->[0]{status}, 200, '... a whole 200');
    cmp_ok($last->[1], '>=', 0.95, sprintf('... past the age (%.2f s)', $last->[1]));
    cmp_ok($last->[1], '<', 1.3 * $SLOW + 0.2, '... on the first answer past it');
    ok(closed_within($k->{s}, 2), 'and the connection closed after it');
    my $k2 = ka_open($on->{web});
    my ($r) = ka_get($k2, '/test/status?code=200');
    ok($r && $r->{status} == 200 && lc($r->{headers}{connection} // '') ne 'close',
       'the next request goes over a new connection, kept alive');
};

subtest 'HTTP: a request in flight at the age is not cut' => sub {
    my $k = ka_open($on->{web});
    my $t0 = time;
    my ($r, $how) = ka_get($k, '/test/slow?ms=1800', 10);
    ok($r, 'the slow request got its answer') or return diag($how);
    is($r->{status}, 200, '... 200');
    is(lc($r->{headers}{connection} // ''), 'close', '... saying Connection: close (the age passed during it)');
    cmp_ok(time - $t0, '>=', 1.7, '... after the whole 1.8 s');
    ok(closed_within($k->{s}, 2), 'then the connection closed');
};

subtest 'HTTP: an idle keep-alive connection is closed a second past its age' => sub {
    my $k = ka_open($on->{web});
    my $t0 = time;
    my ($r) = ka_get($k, '/test/status?code=200');
    is($r && $r->{status}, 200, 'one request');
    is(lc($r->{headers}{connection} // ''), '', '... kept alive');
    ok(closed_within($k->{s}, 4), 'then, idle, the connection is closed');
    my $took = time - $t0;
    cmp_ok($took, '>=', 1.95, sprintf('... once idle for 1 s past its age (%.2f s)', $took));
    cmp_ok($took, '<', 2.0 + 0.5 * $SLOW, '... not much later');
};

subtest 'HTTP: still busy at max_connection_age.grace: closed, and logged' => sub {
    my $from = length($on->{lk}->log // '');
    my $k = ka_open($on->{web});
    my $t0 = time;
    my ($r, $how) = ka_get($k, '/test/slow?ms=8000', 10);
    my $took = time - $t0;
    ok(!$r, "the 8 s request was cut ($how)");
    cmp_ok($took, '>=', 3.8, sprintf('... at the age plus the grace (%.2f s)', $took));
    cmp_ok($took, '<', 5 + $SLOW, '... not later');
    ok(wait_until(sub { Lookout::log_since($on->{lk}, $from) =~ /max_connection_age\.grace \(3000 ms\) is over and the connection is still busy; closing/ }, 2),
       'logged, with the grace');
    cmp_ok(aged($on->{adm}, 'http', 'lookout_connections_aged_forced_total'), '>=', 1,
           'lookout_connections_aged_forced_total counts it');
    cmp_ok(aged($on->{adm}, 'http'), '>=', 4, 'lookout_connections_aged_total counts the HTTP ones');
};

subtest 'HTTPS keep-alive with curl: told Connection: close past the age, then a second connection' => sub {
    my $certs = test_certs();
    my ($w, $adm, $e1) = free_ports(3);
    my $conf = <<"CONF" . broker_sections($c, 'prod', { 1 => ["https://127.0.0.1:$e1"] });
[lookout]
workers = 1
admin = 127.0.0.1:$adm
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
max_connection_age = 1s
max_connection_age.jitter = 0%

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = https://127.0.0.1:$w

CONF
    my $lk = start_lookout(dir => $dir, name => 'tls', conf => $conf);
    ok($lk->started, 'lookout started') or return diag($lk->log);
    # 10 requests at 4 a second over curl's kept-alive connection: about 2.5 s, two ages
    my $h = curl_start({ timeout => 20 }, '--cacert', $certs->{edge_ca}, '--rate', '4/s',
                       '-w', '%{http_code} %{num_connects}\n', "https://127.0.0.1:$w/test/status?code=200",
                       map { ('-o', '/dev/null', "https://127.0.0.1:$w/test/status?code=200") } 2 .. 10);
    my $r = curl_wait($h);
    my @w = split /\n/, slurp("$h->{dir}/out") // '';
    is(scalar(grep { /^200 / } @w), 10, 'all 10 requests answered 200') or diag("$r->{err}\n@w");
    my $new = grep { /^200 1$/ } @w;
    cmp_ok($new, '>=', 2, "$new of them opened a connection (the first, and one after each age)");
    cmp_ok($new, '<=', 4, '... the others reused the kept-alive one');
    my $closes = grep { lc($_->{headers}{connection} // '') eq 'close' } @{ $r->{responses} };
    # each connection but the last was told; the last may have been, on the last answer
    ok($closes == $new - 1 || $closes == $new, "$closes answers said Connection: close, each before a new connection");
    $lk->stop;
    $lk->check_sanitizers;
};

# ---- Kafka ----------------------------------------------------------------------------------

subtest 'Kafka: idle, closed at its age; busy, answered first, then closed' => sub {
    my $kidle = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $on->{kboot}, Proto => 'tcp', Timeout => 5);
    my $t0 = time;
    syswrite($kidle, kreq(1));
    is(unpack('N', KafkaMock::read_frame($kidle, 5) // "\xff\xff\xff\xff"), 1, 'a request answered');
    sleep 0.3;
    my $kbusy = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $on->{kboot}, Proto => 'tcp', Timeout => 5);
    my $t1 = time;
    syswrite($kbusy, kreq(7, 'slow')); # in flight from 0 to 1.5 s: across its age
    ok(closed_within($kidle, 2), 'the idle connection is closed');
    my $took = time - $t0;
    cmp_ok($took, '>=', 0.95, sprintf('... at its age (%.2f s)', $took));
    cmp_ok($took, '<', 1.0 + 0.5 * $SLOW, '... not much later');
    sleep(1.1 - (time - $t1)) if time - $t1 < 1.1;
    syswrite($kbusy, metadata13(8)); # behind the slow one, past the age
    my ($f, $how) = KafkaMock::read_frame($kbusy, 5);
    is($f && unpack('N', $f), 7, 'the request in flight at the age is answered') or diag("read: $how");
    ($f, $how) = KafkaMock::read_frame($kbusy, 5);
    is($f && unpack('N', $f), 8, 'the Metadata v13 behind it is answered by lookout') or diag("read: $how");
    # its last bytes: the top-level ErrorCode, then the empty tag buffer
    ok($f && unpack('n', substr($f, -3, 2)) == 129, '... REBOOTSTRAP_REQUIRED (129)') or diag(unpack('H*', $f // ''));
    ok(!-e "$dir/kafka-got-m", '... and never reaches the broker');
    ($f, $how) = KafkaMock::read_frame($kbusy, 5);
    is($how, 'eof', 'then the connection closes');
    like($on->{lk}->log, qr/max_connection_age: Metadata v13 \(correlation id 8\) answered REBOOTSTRAP_REQUIRED/, 'logged');
    cmp_ok(aged($on->{adm}, 'kafka'), '>=', 2, 'lookout_connections_aged_total counts both (kafka)');
};

subtest 'Kafka: kafka-python produces and consumes through several ages, and loses nothing' => sub {
    plan skip_all => KafkaMock::missing() if KafkaMock::missing();
    plan skip_all => 'kafka-python not importable' if system('/usr/bin/python3', '-c', 'import kafka') != 0;
    plan skip_all => 'kcat not found' unless grep { -x "$_/kcat" } split /:/, $ENV{PATH};
    my $m = KafkaMock->start(brokers => 2, topics => ['lk-age:2'], dir => $dir);
    my @ext = free_ports(2);
    my ($boot, $adm) = free_ports(2);
    my $lk = start_lookout(dir => $dir, name => 'kpy', conf => KafkaMock::lookout_conf(
        nodes => $m->behind(@ext), boot => $boot,
        lookout => "admin = 127.0.0.1:$adm\nmax_connection_age = 700ms\nmax_connection_age.jitter = 10%\n"));
    ok($lk->started, 'lookout started') or return;
    my $n = 60;
    # a message every 50 ms and more (3 s and more): several ages of each connection. A
    # request sent just as its connection closes goes unanswered and is sent again on the
    # next connection, by a client that retries: kafka-python's default is retries=0, which
    # would fail it (librdkafka and the Java client retry by default).
    my $r = KafkaMock::run([ '/usr/bin/python3', "$BIN/kafka-python-check", "127.0.0.1:$boot", '--roundtrip', $n,
                             '--topic', 'lk-age', '--partitions', 2, '--pause', '0.05', '--timeout', 20,
                             '--retries', 5 ],
                           timeout => 90);
    my ($j) = map { $_->{roundtrip} ? ($_->{roundtrip}) : () } Lookout::json_lines($r->{out});
    ok($j, 'kafka-python ran its round trip') or return diag("exit $r->{exit}: $r->{err}");
    is(scalar @{ $j->{sent} }, $n, "$n messages produced, each acknowledged");
    # what the broker holds, read from it directly with kcat: each message once
    my $k = KafkaMock::run([ 'kcat', '-C', '-b', $m->bootstrap, '-t', 'lk-age', '-o', 'beginning', '-e',
                             '-f', '%p %s\n' ], timeout => 30);
    is_deeply([ sort split /\n/, $k->{out} ], [ sort map { "@$_" } @{ $j->{sent} } ],
              '... and the broker holds each once: none lost, none written twice') or diag($k->{err});
    # kafka-python's consumer, through lookout: each message (at least once, as Kafka
    # consumers promise: a fetch cut by a close it retries)
    my %got = map { ("@$_" => 1) } @{ $j->{got} };
    is_deeply([ sort keys %got ], [ sort map { "@$_" } @{ $j->{sent} } ], '... and kafka-python consumed them all back');
    note(scalar(@{ $j->{got} }) - scalar(keys %got) . ' consumed twice');
    my $aged = aged($adm, 'kafka');
    cmp_ok($aged, '>=', 4, "its connections were ended $aged times along the way");
    unlike($r->{err}, qr/Traceback|Error/, 'kafka-python raised nothing') or diag($r->{err});
    $lk->check_sanitizers;
    $m->stop;
};

# librdkafka 2.11+ (tests/kafka/kafka-rebootstrap-check, run as in 124-kafka-rebootstrap.t): a
# consumer whose broker connection has a long Fetch poll under way most of the time and sends
# Metadata v13 every 200 ms, so that a Metadata comes while its connection, past its age,
# waits for the Fetch's answer: it gets REBOOTSTRAP_REQUIRED, bootstraps again (through the
# same lookout here) and goes on fetching, with no error.
subtest 'librdkafka 2.11+: REBOOTSTRAP_REQUIRED past the age, and it bootstraps again and goes on' => sub {
    local $ENV{LD_LIBRARY_PATH} = $ENV{LD_LIBRARY_PATH};
    my ($check, $v) = KafkaMock::rebootstrap_check();
    plan skip_all => $v unless $check;
    note("client: librdkafka $v");
    plan skip_all => 'python3 not found' unless $PY;
    my $tb = KafkaTestBroker->start(dir => $dir, nodes => [ { id => 1, host => 'internal-1.kafka.test', port => 0, bind => '127.0.0.1:0' } ],
                                    topics => [ { name => 'lk-rb', partitions => 1 } ]);
    my ($boot, $ext, $adm) = free_ports(3);
    my $lk = start_lookout(dir => $dir, name => 'rdk', conf => KafkaMock::lookout_conf(
        nodes => [ [ 1, $tb->node(1)->{listen}, $ext ] ], boot => $boot,
        lookout => "admin = 127.0.0.1:$adm\nlog.kafka = all\nmax_connection_age = 2s\n"));
    ok($lk->started, 'lookout started') or return;
    my $out = "$dir/rdk-check.out";
    my $pid = fork // die;
    if ($pid == 0) {
        open STDOUT, '>', $out;
        open STDERR, '>&', \*STDOUT;
        { no warnings 'exec'; exec $check, "127.0.0.1:$boot", 'lk-rb', 15; }
        POSIX::_exit(127);
    }
    ok(wait_until(sub { $lk->log =~ /max_connection_age: Metadata v13 \(correlation id \d+\) answered REBOOTSTRAP_REQUIRED/ }, 12 * $SLOW),
       'lookout answered a Metadata v13 past the age REBOOTSTRAP_REQUIRED') or diag($lk->log);
    ok(wait_until(sub { (slurp($out) // '') =~ /top level error code 129/ }, 5), 'the client read error 129 in it');
    ok(wait_until(sub { (slurp($out) // '') =~ /Starting re-bootstrap sequence/ }, 5), '... and bootstrapped again');
    my $fetches = () = $lk->log =~ /\bFetch\b/g;
    ok(wait_until(sub { my $n = () = $lk->log =~ /\bFetch\b/g; $n > $fetches }, 10), 'then it goes on fetching')
        or diag(join("\n", grep { /Fetch|REBOOTSTRAP|max_connection_age|closing/ } split /\n/, $lk->log), "\n---\n",
                join("\n", grep { /re-bootstrap|129|Fetch|fetch|Disconnect|Connect/i } split /\n/, slurp($out) // ''));
    waitpid($pid, 0);
    my $rc = $? >> 8;
    is($rc, 0, 'the client ran its 15 s and exited 0') or diag(slurp($out));
    unlike(slurp($out) // '', qr/\bERROR\b|All broker connections are down/, '... with no error') or diag(slurp($out));
    cmp_ok(aged($adm, 'kafka'), '>=', 2, 'lookout_connections_aged_total counts its connections');
    $lk->check_sanitizers;
    $tb->stop;
};

# ---- Pulsar binary -------------------------------------------------------------------------

subtest 'Pulsar binary: an idle connection is closed between frames at its age' => sub {
    plan skip_all => 'python3 not found' unless $PY;
    my $pext = free_port();
    my $pb = PulsarBinBroker->start(dir => $dir,
        brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$pext" } ],
        topics => [ { name => 't1', owner => 'b1' } ]);
    my ($svc, $adm) = free_ports(2);
    my $lk = start_lookout(dir => $dir, name => 'pulsar', conf => <<"CONF");
[lookout]
workers = 1
admin = 127.0.0.1:$adm
max_connection_age = 1s
max_connection_age.jitter = 0%

[pulsar bin]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc

[broker bin/b1]
advertisedListeners = internal:pulsar://@{[ $pb->addr('b1') ]},internal:http://127.0.0.9:9,external:pulsar://127.0.0.1:$pext
CONF
    ok($lk->started, 'lookout started') or return;
    for my $round (1, 2) {
        my $out = "$dir/probe$round.out";
        my $t0 = time;
        my $probe = fork // die;
        if ($probe == 0) {
            open STDOUT, '>', $out;
            { no warnings 'exec';
              exec $PY, "$BIN/pulsar-probe", "127.0.0.1:$svc",
                  encode_json({ lookup => 'persistent://public/default/t1', follow => 0 }), encode_json({ wait => 5 }); }
            POSIX::_exit(127);
        }
        waitpid($probe, 0);
        my $took = time - $t0;
        my @steps = map { eval { decode_json($_) } // () } split /\n/, slurp($out) // '';
        ok((grep { $_->{lookup} } @steps), "connection $round: its lookup is answered") or diag(slurp($out));
        my ($w) = grep { ($_->{step} // '') eq '1' } @steps;
        ok($w && $w->{closed}, '... then, idle, it is closed by lookout') or diag(slurp($out));
        cmp_ok($took, '<', 1.0 + 1.0 * $SLOW, sprintf('... at its age (%.2f s), not after the 5 s wait', $took));
    }
    is(aged($adm, 'pulsar'), 2, 'lookout_connections_aged_total counts both (pulsar)');
    $lk->check_sanitizers;
    $pb->stop;
};

# ---- off ------------------------------------------------------------------------------------

subtest 'off (the default): a keep-alive connection lives on' => sub {
    my $off = start_with(name => 'off', lookout => '');
    my $k = ka_open($off->{web});
    my $t0 = time;
    my ($n, $closed) = (0, 0);
    while (time - $t0 < 2.5) {
        my ($r) = ka_get($k, '/test/status?code=200');
        last unless $r;
        $closed = 1 if lc($r->{headers}{connection} // '') eq 'close';
        $n++;
        sleep 0.2;
    }
    cmp_ok($n, '>=', 8, "$n answers over 2.5 s on one connection");
    ok(!$closed, 'none said Connection: close');
    is(aged($off->{adm}, 'http'), 0, 'lookout_connections_aged_total stays 0');
    $off->{lk}->stop;
    $off->{lk}->check_sanitizers;
};

$on->{lk}->stop;
$on->{lk}->check_sanitizers;
kill 'TERM', $kpid;
waitpid($kpid, 0);
$c->stop;
done_testing();
