#!/usr/bin/perl
# 111-zk-map.t: the listener map of a Pulsar cluster read live from its ZooKeeper (issue
# 11), against a real ZooKeeper (lib/ZooKeeper.pm) and the fake Pulsar brokers of E2E.pm.
# The brokers register as Pulsar's do: an ephemeral child of /loadbalance/brokers named by
# brokerId (host:webServicePort), each held by its own session, in the LocalBrokerData
# (modular load manager) or BrokerLookupData (extensible) JSON of facts/pulsar.md §3.
# lookout has no [broker] section. What must hold:
#   - three registered brokers: lookups and admin 307s through lookout come out with their
#     external listener, /healthz is 503 "starting" until the store has been read;
#   - --check --live prints the map as it stands, each broker marked live or static, and
#     two lookouts on one ZooKeeper print the same map and give the same answers;
#   - a fourth broker registers under load and is used within a second, with no failed
#     request; a broker whose znode goes leaves the rotation with no failed request;
#   - a malformed registration and one outside internal_networks are refused, logged and
#     counted, and the rest of the map serves on;
#   - a [broker] section wins over the registration of the same name;
#   - ZooKeeper killed: lookout serves on the last map, /healthz and /metrics say it is
#     disconnected and since when; restarted: a change made meanwhile is picked up;
#   - lookout's session expires (lookout frozen past its timeout): it re-reads everything.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;
use E2E;
use ZooKeeper;
use ZkRecovery ();

plan skip_all => $_ for grep { defined } ZooKeeper::missing();

my $DIR = '/loadbalance/brokers';
my $dir = tmp_dir();
mkdir "$dir/zk";
my $zk = ZooKeeper->start(dir => "$dir/zk");
note sprintf 'ZooKeeper serving after %.2f s', $zk->started_in;
my $admin = $zk->client;
$admin->create('/pulsar', '', makepath => 1);

my $e = E2E->new(dir => $dir, own => { t1 => 1, t2 => 2, t3 => 3 });
my $c = $e->cluster;
my $L = $e->L;

sub id_of { my $b = $_[0]; return "$b->{host}:$b->{webport}" }
sub json { my $j = eval { decode_json($_[0]) }; return $j // { not_json => $_[0] } }

# The registration of a broker, in the form a 3.x broker writes (lib/ZkRecovery.pm).
sub registration { ZkRecovery::registration(@_) }

# Each broker registers from its own session, as a broker does.
my %sess;
sub register {
    my ($n, $id, $data) = @_;
    $sess{$n} = $zk->client(timeout => 10);
    return $sess{$n}->create("/pulsar$DIR/$id", $data, ephemeral => 1, makepath => 1)->{t};
}
for my $n (1 .. 3) {
    register($n, id_of($c->broker($n)),
             registration($L->{internal}{$n}, $L->{external}{$n}, form => $n == 3 ? 'lookup' : 'local'));
}

my $aport = free_port();
my $svc = '127.0.0.40:' . free_port('127.0.0.40');
sub conf {
    my (%o) = @_;
    return "[lookout]\nworkers = 1\nlog_level = debug\ntimeout.response = 5s\nadmin = 127.0.0.1:$o{admin}\n\n"
         . "[pulsar prod]\nmetadataStoreUrl = zk:" . $zk->connect . "/pulsar\n"
         . "metadataStoreSessionTimeoutMillis = 2000\n"
         . "internal_networks = 127.0.0.0/8\ninternalListenerName = internal\n"
         . "lookupListenerName = external\nwebServiceUrl = http://$svc\n" . ($o{extra} // '');
}
my $t_start = time;
my $lk = start_lookout(dir => $dir, name => 'a', conf => conf(admin => $aport), wait => [$svc]);
ok($lk->started, 'lookout started with no [broker] section') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub get { http_req(GET => "http://127.0.0.1:$_[0]$_[1]", close => 1) }
# Whether anything accepts connections at URL's host:port.
sub served {
    my ($hp) = $_[0] =~ m{//([^/]+)};
    my ($h, $p) = $hp =~ /^(.*):(\d+)$/;
    my $s = IO::Socket::INET->new(PeerAddr => $h, PeerPort => $p, Proto => 'tcp', Timeout => 1);
    close $s if $s;
    return $s ? 1 : 0;
}
my $ready = wait_until(sub { (get($aport, '/healthz')->{status} // 0) == 200 }, 10, 0.02);
ok($ready, sprintf 'ready once ZooKeeper was read (%.0f ms after start)', 1000 * (time - $t_start));

my $LK = '/lookup/v2/topic/persistent/public/default';
my %X = map { ($_ => $L->{external}{$_}{http}) } 1 .. 3;

subtest 'three registered brokers: lookups and redirects rewritten' => sub {
    for my $n (1 .. 3) {
        my $r = http_req(GET => "http://$svc$LK/t$n");
        is($r->{status}, 200, "lookup of t$n: 200");
        is_deeply(json($r->{body}), $e->expect_ld('external', $n), "t$n: the owner's external listener")
            or diag($r->{body});
        $r = http_req(GET => "$X{1}/admin/v2/persistent/public/default/t$n/stats");
        if ($n == 1) {
            is($r->{status}, 200, 'admin call on the owner, b1: 200');
        } else {
            is($r->{status}, 307, "admin call for t$n on b1: 307");
            like($r->{headers}{location} // '', qr{^\Q$X{$n}\E/admin/v2/persistent/public/default/t$n/stats},
                 "... Location is b${n}'s external address");
        }
    }
    my $h = get($aport, '/healthz');
    like($h->{body}, qr/^ok\ncluster prod: zookeeper \S+ connected; generation \d+; 3 brokers \(3 live, 0 static\)/,
         '/healthz: connected, 3 live brokers') or diag($h->{body});
    my $m = get($aport, '/metrics')->{body};
    like($m, qr/^lookout_map_brokers\{cluster="prod",origin="live"\} 3$/m, '/metrics: 3 live brokers');
    like($m, qr/^lookout_map_store_connected\{cluster="prod"\} 1$/m, '/metrics: connected');
    like($m, qr/^lookout_map_store_stale_since_seconds\{cluster="prod"\} 0\.000$/m, '/metrics: not stale');
    my $map = json(get($aport, '/map')->{body});
    my ($cl) = grep { $_->{name} eq 'prod' } @{ $map->{clusters} // [] };
    is_deeply([ sort map { "$_->{id} $_->{origin}" } @{ $cl->{brokers} // [] } ],
              [ sort map { id_of($c->broker($_)) . ' live' } 1 .. 3 ], '/map: the three, live');
};

# --check --live of a config file, without the admin line (two lookouts differ there).
sub check_live {
    my ($file) = @_;
    my $r = run_lookout(args => [ '--check', '--live', '-c', $file ], timeout => 20);
    # stdout and stderr come together: the map without the log lines.
    $r->{map} = join '', grep { !/^\d{4}-\d\d-\d\dT/ } split /^/m, $r->{out};
    return $r;
}
spew("$dir/check.conf", conf(admin => free_port()));
my $ck = check_live("$dir/check.conf");
is($ck->{exit}, 0, '--check --live exits 0') or diag($ck->{out});
for my $n (1 .. 3) {
    like($ck->{out}, qr/^  broker prod\/\Q${\ id_of($c->broker($n))}\E \(live\)$/m, "--check --live: b$n marked live");
}
like($ck->{out}, qr/^  store    zookeeper \S+\/pulsar \/loadbalance\/brokers: 3 registrations, 0 refused$/m,
     '--check --live: the store line');
my $plain = run_lookout(args => [ '--check', '-c', "$dir/check.conf" ], timeout => 20);
like($plain->{out}, qr/store    zookeeper .* not read \(--check --live reads it\)/, '--check alone does not connect');

# ---- a second lookout on the same ZooKeeper ---------------------------------------------
my $aport2 = free_port();
my $lk2 = start_lookout(dir => $dir, name => 'b', conf => conf(admin => $aport2), wait => [$svc]);
ok(wait_until(sub { (get($aport2, '/healthz')->{status} // 0) == 200 }, 10, 0.02), 'a second lookout is ready');

sub same_answers {
    my ($what) = @_;
    my (%seen, %bad);
    # The kernel spreads connections to the shared sockets (SO_REUSEPORT) over both.
    for my $i (1 .. 30) {
        my $n = 1 + $i % 3;
        my $r = http_req(GET => "http://$svc$LK/t$n", close => 1);
        $seen{"$r->{status} $r->{body}"}{$n}++;
        $bad{$r->{status}}++ if $r->{status} != 200;
    }
    is(scalar(keys %bad), 0, "$what: 30 lookups, all 200") or diag explain \%bad;
    is(scalar(keys %seen), 3, "$what: one answer per topic, whichever lookout served it");
}
same_answers('two lookouts');
my $ck2 = check_live("$dir/check.conf");
is($ck2->{map}, $ck->{map}, 'two runs of --check --live print the same map');

# ---- a fourth broker registers under load ----------------------------------------------
my $c4 = PulsarBroker->start(dir => "$dir/b4", brokers => ['127.0.0.24:' . free_port('127.0.0.24')], own => { t4 => 1 });
my $b4 = $c4->broker(1);
my %in4 = (http => $b4->{http}, pulsar => $b4->{pulsar});
my %ex4 = (http => 'http://127.0.0.34:' . free_port('127.0.0.34'), pulsar => 'pulsar://127.0.0.34:' . free_port('127.0.0.34'));

# Lookups of t1-t3 on the service address, one every few ms, until $until returns true.
sub load_until {
    my ($until, $max) = @_;
    my ($n, @fail) = (0);
    my $end = time + $max;
    while (time < $end) {
        my $t = 1 + $n % 3;
        my $r = http_req(GET => "http://$svc$LK/t$t");
        $n++;
        # 307: a broker that does not own the topic (b4 owns only t4) sends the client on
        push @fail, "$r->{status} $r->{how}" if $r->{status} != 200 && $r->{status} != 307;
        last if $until->();
    }
    return ($n, \@fail);
}

subtest 'a fourth broker registers under load' => sub {
    my ($t_reg, $t_up);
    my ($n, $fail) = load_until(sub {
        $t_reg //= register(4, id_of($b4), registration(\%in4, \%ex4));
        my $r = http_req(GET => "$ex4{http}$LK/t4", timeout => 1);
        return 0 unless $r->{status} == 200;
        $t_up = time;
        return 1;
    }, 5);
    ok($t_up, 'b4 is served at its external address') or diag($lk->log);
    my $lat = $t_up - $t_reg;
    cmp_ok($lat, '<', 1, sprintf 'within a second of its znode (%.0f ms)', 1000 * $lat);
    note sprintf 'znode to routable: %.0f ms', 1000 * $lat;
    is(scalar @$fail, 0, "no failed request among $n under load") or diag explain $fail;
    my $r = http_req(GET => "$ex4{http}$LK/t4");
    is_deeply(json($r->{body}), { brokerUrl => $ex4{pulsar}, nativeUrl => $ex4{pulsar}, httpUrl => $ex4{http},
                                  brokerUrlSsl => '' }, "t4's lookup: b4's external listener") or diag($r->{body});
    ok(wait_until(sub { (get($aport2, '/healthz')->{body} // '') =~ /4 brokers \(4 live/ }, 3, 0.02),
       'the second lookout has it too');
    is(check_live("$dir/check.conf")->{map}, check_live("$dir/check.conf")->{map}, '--check --live still agrees');
};

subtest 'a broker whose znode goes leaves the rotation' => sub {
    my $deleted;
    my ($n, $fail) = load_until(sub {
        $deleted //= do { $sess{3}->close; time };
        return (get($aport, '/healthz')->{body} // '') =~ /3 brokers \(3 live/;
    }, 5);
    ok((get($aport, '/healthz')->{body} // '') =~ /3 brokers \(3 live/, 'b3 left the map')
        or diag(get($aport, '/healthz')->{body});
    note sprintf 'znode gone to out of the map: %.0f ms', 1000 * (time - $deleted);
    is(scalar @$fail, 0, "no failed request among $n") or diag explain $fail;
    ok(wait_until(sub { !served($X{3}) }, 2), "b3's external address is no longer served");
    my $r = http_req(GET => "http://$svc$LK/t1");
    is($r->{status}, 200, 'the others serve on');
};

subtest 'a load report rewrites a registration: no new generation' => sub {
    my $m0 = get($aport, '/metrics')->{body};
    my ($g0) = $m0 =~ /^lookout_config_generation (\d+)$/m;
    my ($u0) = $m0 =~ /^lookout_map_updates_total\{cluster="prod",result="unchanged"\} (\d+)$/m;
    sleep 0.002;    # another startTimestamp: other bytes, the same listeners
    $sess{1}->set("/pulsar$DIR/" . id_of($c->broker(1)), registration($L->{internal}{1}, $L->{external}{1}));
    ok(wait_until(sub { my ($u) = get($aport, '/metrics')->{body} =~ /^lookout_map_updates_total\{cluster="prod",result="unchanged"\} (\d+)$/m;
                        $u > $u0 }, 3, 0.02), 'the change is read, and counted as unchanged');
    my ($g1) = get($aport, '/metrics')->{body} =~ /^lookout_config_generation (\d+)$/m;
    is($g1, $g0, '... with no new generation');
};

subtest 'SIGHUP: the file again, the stores kept' => sub {
    my ($s0) = get($aport, '/metrics')->{body} =~ /^lookout_map_store_sessions_total\{cluster="prod"\} (\d+)$/m;
    my ($g0) = get($aport, '/healthz')->{body} =~ /generation (\d+)/;
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reloaded .* generation ${\ ($g0 + 1)}/, 5), 'reloaded: a new generation');
    my $h = get($aport, '/healthz')->{body};
    like($h, qr/generation ${\ ($g0 + 1)}; 3 brokers \(3 live, 0 static\)/, '... with the live brokers in it') or diag($h);
    my ($s1) = get($aport, '/metrics')->{body} =~ /^lookout_map_store_sessions_total\{cluster="prod"\} (\d+)$/m;
    is($s1, $s0, '... and the same ZooKeeper session');
    is(http_req(GET => "$ex4{http}$LK/t4")->{status}, 200, 'b4 still served');
};

subtest 'ZooKeeper unreachable at start' => sub {
    my $p = free_port();
    my $svc2 = '127.0.0.41:' . free_port('127.0.0.41');
    my $a3 = free_port();
    (my $cf = conf(admin => $a3)) =~ s/zk:\S+/zk:127.0.0.1:$p\/pulsar/;
    $cf =~ s/\Q$svc\E/$svc2/;
    my $lk3 = start_lookout(dir => $dir, name => 'c', conf => $cf, wait => [$svc2]);
    ok($lk3->started, 'lookout starts all the same');
    my $h = get($a3, '/healthz');
    is($h->{status}, 503, '/healthz: 503 until the store is read');
    like($h->{body}, qr/^starting\ncluster prod: zookeeper 127\.0\.0\.1:$p\/pulsar disconnected, not read yet/, '... and why')
        or diag($h->{body});
    my $ck3 = run_lookout(args => [ '--check', '--live', '-c', $lk3->conf ], timeout => 20);
    is($ck3->{exit}, 1, '--check --live exits 1');
    like($ck3->{out}, qr/cluster prod: zookeeper 127\.0\.0\.1:$p\/pulsar not read within 2000 ms/, '... saying which store');
    unlike($ck3->{out}, qr/is valid/, '... and not that the configuration is valid');
    my $r = http_req(GET => "http://$svc2$LK/t1");
    lookout_error_ok($r, 503, 'a request meanwhile: 503 from lookout');
    like($r->{body}, qr/not been read from ZooKeeper yet/, '... saying why');
    $lk3->stop;
    is($lk3->exit_code, 0, 'it stops cleanly');
};

subtest 'brokers registering names on one TLS port are routed by SNI' => sub {
    my $certs = test_certs();
    my ($a4, $port) = (free_port(), free_port());
    $admin->create('/sni', '', makepath => 1);
    (my $cf = conf(admin => $a4)) =~ s{zk:(\S+)/pulsar}{zk:$1/sni};
    $cf =~ s/^webServiceUrl = .*\n//m;
    $cf =~ s/^\[lookout\]\n/[lookout]\ntls.certificate = $certs->{edge_crt}\ntls.key = $certs->{edge_key}\n/m;
    my $lk4 = start_lookout(dir => $dir, name => 'd', conf => $cf, wait => ["127.0.0.1:$a4"]);
    ok(wait_until(sub { (get($a4, '/healthz')->{status} // 0) == 200 }, 10, 0.02), 'a lookout on another chroot, ready');
    my %s;
    for my $n (1, 2) {
        my $ex = { http => "https://b$n.lookout.test:$port", pulsar => undef };
        my $doc = decode_json(registration($L->{internal}{$n}, { http => 'x', pulsar => 'x' }));
        $doc->{advertisedListeners}{external} = { brokerHttpsUrl => "https://b$n.lookout.test:$port" };
        $doc->{advertisedListeners}{internal}{brokerHttpsUrl} = undef;
        delete $doc->{advertisedListeners}{internal}{brokerHttpsUrl};
        $s{$n} = $zk->client(timeout => 10);
        $s{$n}->create("/sni$DIR/" . id_of($c->broker($n)), encode_json($doc), ephemeral => 1, makepath => 1);
    }
    ok(wait_until(sub { (get($a4, '/healthz')->{body} // '') =~ /2 brokers \(2 live/ }, 5, 0.02), 'both registered')
        or diag(get($a4, '/healthz')->{body}, $lk4->log);
    for my $n (1, 2) {
        my $r = curl('--cacert', $certs->{edge_ca}, '--resolve', "b$n.lookout.test:$port:127.0.0.1",
                     "https://b$n.lookout.test:$port/admin/v2/clusters");
        is($r->{status}, 200, "https://b$n.lookout.test:$port: 200");
        is($r->{headers}{'x-fake-broker'}, "b$n", "... from broker $n, by SNI");
    }
    $_->close for values %s;
    $lk4->stop;
    is($lk4->exit_code, 0, 'it stops cleanly');
};

subtest 'malformed registrations are refused, the rest serves' => sub {
    my $m0 = get($aport, '/metrics')->{body};
    my ($before) = $m0 =~ /^lookout_map_registrations_refused_total\{cluster="prod"\} (\d+)$/m;
    my ($gen0) = $m0 =~ /^lookout_config_generation (\d+)$/m;
    $admin->create("/pulsar$DIR/127.0.0.29:8080", '{"webServiceUrl": "http://127.0.0.29:8080", ', ephemeral => 1);
    my %in10 = (http => 'http://10.1.2.3:8080', pulsar => 'pulsar://10.1.2.3:6650');
    my %ex10 = (http => 'http://127.0.0.38:' . free_port('127.0.0.38'), pulsar => 'pulsar://127.0.0.38:6650');
    $admin->create("/pulsar$DIR/10.1.2.3:8080", registration(\%in10, \%ex10), ephemeral => 1);
    # An external address this machine does not have (TEST-NET-1): it passes the bind rule
    # (the cluster binds 0.0.0.0) but cannot be bound.
    my %in28 = (http => 'http://127.0.0.28:8080', pulsar => 'pulsar://127.0.0.28:6650');
    my %ex28 = (http => 'http://192.0.2.1:18080', pulsar => 'pulsar://192.0.2.1:16650');
    $admin->create("/pulsar$DIR/127.0.0.28:8080", registration(\%in28, \%ex28), ephemeral => 1);
    ok($lk->wait_log(qr/registration \/loadbalance\/brokers\/127\.0\.0\.29:8080 refused: not valid JSON/, 3),
       'the malformed one is logged with its znode and why');
    ok($lk->wait_log(qr/registration \/loadbalance\/brokers\/10\.1\.2\.3:8080 refused: .*10\.1\.2\.3.*internal_networks/, 3),
       'the one outside internal_networks too');
    my $m;
    ok($lk->wait_log(qr/registration \/loadbalance\/brokers\/127\.0\.0\.28:8080 refused: .*cannot listen on 192\.0\.2\.1:\d+/, 3),
       'the one whose external address cannot be bound too');
    like($m = get($aport, '/metrics')->{body}, qr/^lookout_map_registrations_refused\{cluster="prod"\} 3$/m, '/metrics: 3 refused now');
    my ($after) = $m =~ /^lookout_map_registrations_refused_total\{cluster="prod"\} (\d+)$/m;
    is($after - $before, 3, '... counted once each');
    ok(!served($ex10{http}), 'nothing bound for the refused one');
    my ($gen1) = $m =~ /^lookout_config_generation (\d+)$/m;
    is($gen1, $gen0, 'refused registrations make no new generation');
    my ($st) = map { $_->{store} } grep { $_->{name} eq 'prod' } @{ json(get($aport, '/map')->{body})->{clusters} // [] };
    is_deeply([ sort map { $_->{znode} } @{ $st->{refused} // [] } ], [ '10.1.2.3:8080', '127.0.0.28:8080', '127.0.0.29:8080' ],
              '/map: the store lists the three refused') or diag explain $st;
    ok($st->{connected} && $st->{read}, '/map: the store is connected and read');
    for my $t (1, 2, 4) {
        # 200 from the owner, or 307 from b4 (it owns only t4), as under load above
        like(http_req(GET => "http://$svc$LK/t$t")->{status}, qr/^(?:200|307)$/, "t$t still served");
    }
    my $o = check_live("$dir/check.conf")->{out};
    like($o, qr/^  refused  10\.1\.2\.3:8080: .*internal_networks/m, '--check --live lists the refusal');
    $admin->delete("/pulsar$DIR/$_") for '127.0.0.29:8080', '10.1.2.3:8080', '127.0.0.28:8080';
};

subtest 'a [broker] section wins over the registration of its name' => sub {
    my $id = id_of($c->broker(1));
    my %other = (http => 'http://127.0.0.39:' . free_port('127.0.0.39'), pulsar => 'pulsar://127.0.0.39:6650');
    my $static = "[broker prod/$id]\nadvertisedListeners = internal:$L->{internal}{1}{http},"
               . "internal:$L->{internal}{1}{pulsar},external:$other{http},external:$other{pulsar}\n";
    spew("$dir/static.conf", conf(admin => free_port()) . "\n$static");
    my $o = check_live("$dir/static.conf")->{out};
    like($o, qr/^  broker prod\/\Q$id\E \(static, over its registration\)$/m, '--check --live marks it static');
    like($o, qr/^  broker prod\/\Q${\ id_of($c->broker(2))}\E \(live\)$/m, '... and the others live');
    like($o, qr/\Q$L->{internal}{1}{http}\E -> \Q$other{http}\E/, 'its listeners are the section\'s');
};

subtest "a live broker that is down: the 502 names neither it nor its address" => sub {
    # Its znode, and so its name in the map, is its internal host:port (brokerId).
    my $hp = '127.0.0.26:' . free_port('127.0.0.26');    # nothing listens there
    my %in = (http => "http://$hp", pulsar => 'pulsar://127.0.0.26:6650');
    my %ex = (http => 'http://127.0.0.36:' . free_port('127.0.0.36'), pulsar => 'pulsar://127.0.0.36:' . free_port('127.0.0.36'));
    $admin->create("/pulsar$DIR/$hp", registration(\%in, \%ex), ephemeral => 1);
    ok(wait_until(sub { served($ex{http}) }, 3, 0.02), 'its external address is served') or return;
    my $r = http_req(GET => "$ex{http}/admin/v2/brokers/health");
    is($r->{status}, 502, 'a request for it: 502');
    is(json($r->{body})->{reason}, 'broker unreachable: connect failed (Connection refused)',
       '... saying what failed') or diag($r->{body});
    unlike($r->{body}, qr/127\.0\.0\.26|\Q$hp\E|prod\//, '... and naming neither the broker nor its address');
    # Lookouts a and b share the external sockets (SO_REUSEPORT): either may have answered.
    ok(wait_until(sub { grep { ($_->log // '') =~ /\[warn\] broker prod\/\Q$hp\E unreachable: connect failed/ } $lk, $lk2 }, 2),
       'the error log names it');
    $admin->delete("/pulsar$DIR/$hp");
    ok(wait_until(sub { !served($ex{http}) }, 3, 0.02), 'gone with its znode');
};

subtest 'ZooKeeper killed and restarted' => sub {
    $zk->kill;
    my ($n, $fail) = load_until(sub { 0 }, 1.5);
    is(scalar @$fail, 0, "no failed request among $n while ZooKeeper is down") or diag explain $fail;
    my $h = get($aport, '/healthz');
    is($h->{status}, 200, '/healthz stays 200: the last map serves');
    like($h->{body}, qr/zookeeper \S+ disconnected, stale since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+ s ago\)/,
         '... and says since when it may be stale') or diag($h->{body});
    like(get($aport, '/metrics')->{body}, qr/^lookout_map_store_connected\{cluster="prod"\} 0$/m, '/metrics: disconnected');
    sleep 1.5;    # lookout's pause between attempts grows (0.5 s doubling)
    $zk->restart;
    ZooKeeper::wait_connected([ $admin, grep { $_->{in} } values %sess ]);
    # A change made as ZooKeeper comes back, most likely before lookout's next attempt:
    # b4 goes.
    $sess{4}->close;
    my $t = time;
    my $away = get($aport, '/metrics')->{body} =~ /^lookout_map_store_connected\{cluster="prod"\} 0$/m;
    ok(wait_until(sub { (get($aport, '/healthz')->{body} // '') =~ /connected; generation \d+; 2 brokers \(2 live/ }, 15, 0.05),
       'reconnected, and b4 is gone from the map') or diag(get($aport, '/healthz')->{body});
    note sprintf 'the change was made while lookout was %s; seen %.0f ms later',
        $away ? 'still disconnected' : 'already back', 1000 * (time - $t);
    is(http_req(GET => "http://$svc$LK/t1")->{status}, 200, 'lookups still served');
};

subtest "lookout's session expires" => sub {
    my ($exp0) = get($aport, '/metrics')->{body} =~ /^lookout_map_store_expiries_total\{cluster="prod"\} (\d+)$/m;
    $lk->signal('STOP');
    # A change while lookout is frozen: b3 registers again.
    register(3, id_of($c->broker(3)), registration($L->{internal}{3}, $L->{external}{3}));
    sleep 3;    # past its 2 s session timeout
    $lk->signal('CONT');
    ok(wait_until(sub { (get($aport, '/metrics')->{body} // '') =~ /^lookout_map_store_expiries_total\{cluster="prod"\} (\d+)$/m && $1 > $exp0 }, 10, 0.05),
       'the expiry is seen and counted');
    ok(wait_until(sub { (get($aport, '/healthz')->{body} // '') =~ /connected; generation \d+; 3 brokers \(3 live/ }, 10, 0.05),
       'a new session read everything again: b3 is back') or diag(get($aport, '/healthz')->{body});
    my $r = http_req(GET => "http://$svc$LK/t3");
    is_deeply(json($r->{body}), $e->expect_ld('external', 3), 't3 served by b3 again');
};

for my $l ([ a => $lk ], [ b => $lk2 ]) {
    $l->[1]->stop;
    is($l->[1]->exit_code, 0, "lookout $l->[0] exits 0");
}
done_testing;
