#!/usr/bin/perl
# 121-binary-only-map.t: a listener map of pulsar:// and pulsar+ssl:// addresses only, as
# Pulsar's own broker.conf examples give advertisedListeners (issue 19, defect 2). lookout
# serves no HTTP for such brokers, so it must not ask for an internal http address:
#   - the config loads, and --check shows each broker's binary map;
#   - a lookup through the service address names the owner's external (lookout) address,
#     never the internal one the broker said, for each of three brokers (plaintext only,
#     both schemes, TLS only);
#   - a producer on each external address reaches the owner, over TLS where the map says so;
#   - pulsar-flex round-trips through the service address;
#   - health.check = http, with no http address to GET, checks each broker with a Pulsar
#     CONNECT on its binary address (the broker sees it), and a killed broker is taken out of
#     rotation by the checks, and the service address stops sending clients there;
#   - the same brokers registered in ZooKeeper with binary addresses only are taken and
#     routed, and HTTP on webServiceUrl, with no broker to send it to, gets a logged 503;
#   - --probe asks each broker on its binary address (CONNECT, LOOKUP).
# The test brokers are three bin/pulsar-testbroker processes, one per broker, each knowing
# the whole cluster (the others advertised only), so that one can be killed alone.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json encode_json);
use Test::More;
use Time::HiRes qw(time);

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;
use ZooKeeper;

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $c = test_certs();

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

sub probe {
    my ($addr, $opts, @steps) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", $addr, '--timeout', 10, @$opts, map { encode_json($_) } @steps ],
                           timeout => 60);
    return json_lines($r->{out});
}

# Internal addresses (where the test brokers listen) and lookout's external ones.
my %P = map { ($_ => free_port()) } qw(b1 b2 b2s b3s);
my %E = map { ($_ => free_port()) } qw(b1 b2);
my ($tls_port, $svc, $admin) = (free_port(), free_port(), free_port());
my %INT = (b1 => "internal:pulsar://127.0.0.1:$P{b1}",
           b2 => "internal:pulsar://127.0.0.1:$P{b2},internal:pulsar+ssl://127.0.0.1:$P{b2s}",
           b3 => "internal:pulsar+ssl://127.0.0.1:$P{b3s}");
my %EXT = (b1 => "external:pulsar://127.0.0.1:$E{b1}",
           b2 => "external:pulsar://127.0.0.1:$E{b2},external:pulsar+ssl://b2.lookout.test:$tls_port",
           b3 => "external:pulsar+ssl://b3.lookout.test:$tls_port");
my @topics = map { { name => "t-$_", owner => $_ } } qw(b1 b2 b3);

# One process per broker: it listens for its own and advertises the others.
my %proc;
for my $me (qw(b1 b2 b3)) {
    $proc{$me} = PulsarBinBroker->start(
        dir => $dir, tls_cert => $c->{broker_crt}, tls_key => $c->{broker_key}, topics => \@topics,
        brokers => [ map { { name => $_, advertisedListeners => "$INT{$_},$EXT{$_}", listen => ($_ eq $me ? JSON::PP::true : JSON::PP::false) } }
                     qw(b1 b2 b3) ]);
}

my $brokers = join '', map { "[broker prod/$_]\nadvertisedListeners = $INT{$_},$EXT{$_}\n\n" } qw(b1 b2 b3);
my $conf = <<"EOF" . $brokers;
[lookout]
workers = 1
log_level = debug
admin = 127.0.0.1:$admin
timeout.connect = 1s
tls.certificate = $c->{edge_crt}
tls.key = $c->{edge_key}
tls.upstream_ca = $c->{internal_ca}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc
bind = 127.0.0.1
internal_networks = 127.0.0.0/8
health.check = http
health.interval = 300ms
health.timeout = 250ms
EOF
my $conf_file = spew("$dir/binary-only.conf", $conf);

subtest '--check: the binary-only map loads and is shown' => sub {
    my $r = run_lookout(args => [ '--check', '-c', $conf_file ], dir => $dir, name => 'check');
    is($r->{exit}, 0, 'lookout --check accepts it') or return diag($r->{out});
    like($r->{out}, qr/^    map      pulsar:\/\/127\.0\.0\.1:$P{b1} -> pulsar:\/\/127\.0\.0\.1:$E{b1}$/m, 'b1: its one binary address');
    like($r->{out}, qr/^             pulsar\+ssl:\/\/127\.0\.0\.1:$P{b2s} -> pulsar\+ssl:\/\/b2\.lookout\.test:$tls_port$/m,
         'b2: both schemes');
    like($r->{out}, qr/^    map      pulsar\+ssl:\/\/127\.0\.0\.1:$P{b3s} -> pulsar\+ssl:\/\/b3\.lookout\.test:$tls_port$/m,
         'b3: TLS only');
    unlike($r->{out}, qr/http:/, 'no http address anywhere');
};

my $lk = start_lookout(dir => $dir, name => 'binonly', conf => $conf);
ok($lk->started, 'lookout started on a binary-only map') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
unlike($lk->log, qr/has no http or https address/, 'no refusal in its log');

subtest 'lookups through the service address name lookout, for each broker' => sub {
    my %want = (b1 => [ "pulsar://127.0.0.1:$E{b1}", undef ],
                b2 => [ "pulsar://127.0.0.1:$E{b2}", "pulsar+ssl://b2.lookout.test:$tls_port" ],
                b3 => [ undef, "pulsar+ssl://b3.lookout.test:$tls_port" ]);
    for my $b (qw(b1 b2 b3)) {
        my @r = probe("127.0.0.1:$svc", [], { lookup => "persistent://public/default/t-$b", follow => 0 });
        my ($l) = grep { $_->{lookup} } @r;
        my $f = $l->{hops}[0]{fields} // {};
        # Connect at the owner, a Redirect to it elsewhere: both name the owner.
        like($f->{response} // '', qr/^[01]$/, "t-$b: Connect or Redirect") or diag(explain(\@r));
        is($f->{brokerServiceUrl}, $want{$b}[0], "t-$b: brokerServiceUrl " . ($want{$b}[0] // 'absent'));
        is($f->{brokerServiceUrlTls}, $want{$b}[1], "t-$b: brokerServiceUrlTls " . ($want{$b}[1] // 'absent'));
    }
    # What the brokers themselves answered: their internal addresses.
    my @out = map { $proc{$_}->frames(type => 'LOOKUP_RESPONSE', dir => 'out') } qw(b1 b2 b3);
    my ($b3) = grep { ($_->{fields}{brokerServiceUrlTls} // '') eq "pulsar+ssl://127.0.0.1:$P{b3s}" } @out;
    ok($b3, 'the brokers said the internal pulsar+ssl address of b3, which lookout rewrote') or diag(explain(\@out));
};

subtest 'producers on the external addresses reach the owners' => sub {
    my $producer = sub { { send => 'PRODUCER', fields => { topic => "persistent://public/default/t-$_[0]", producer_id => 1 } } };
    my $send = { send => 'SEND', fields => { producer_id => 1, sequence_id => 0, num_messages => 1 }, text => 'hello' };
    my @tls = ('--tls', '--cafile', $c->{edge_ca});
    my %how = (b1 => [ "127.0.0.1:$E{b1}", [] ],
               b2 => [ "127.0.0.1:$E{b2}", [] ],
               b3 => [ "127.0.0.1:$tls_port", [ @tls, '--sni', 'b3.lookout.test' ] ]);
    for my $b (qw(b1 b2 b3)) {
        my $n = () = $proc{$b}->frames(type => 'SEND', dir => 'in');
        my @r = probe($how{$b}[0], $how{$b}[1], $producer->($b), $send);
        my ($p) = grep { ($_->{step} // '') eq '0' } @r;
        my ($s) = grep { ($_->{step} // '') eq '1' } @r;
        is(($p->{received}[0]{type} // ''), 'PRODUCER_SUCCESS', "$b: PRODUCER at the owner") or diag(explain(\@r));
        is(($s->{received}[0]{type} // ''), 'SEND_RECEIPT', "$b: SEND stored");
        my $m = () = $proc{$b}->frames(type => 'SEND', dir => 'in');
        is($m, $n + 1, "$b: the SEND reached $b itself");
    }
    # b2 through TLS at the edge, to its plaintext internal address (upstream.tls = match
    # prefers TLS for a TLS client: its pulsar+ssl one).
    my @r = probe("127.0.0.1:$tls_port", [ @tls, '--sni', 'b2.lookout.test' ], $producer->('b2'));
    my ($p) = grep { ($_->{step} // '') eq '0' } @r;
    is(($p->{received}[0]{type} // ''), 'PRODUCER_SUCCESS', 'b2 over TLS by SNI');
    like($lk->log, qr/to broker prod\/b3 at 127\.0\.0\.1:$P{b3s}/, 'lookout dialled b3 at its TLS internal address');
    my ($acc) = grep { ($_->{event} // '') eq 'accept' && ($_->{scheme} // '') eq 'pulsar+ssl' } $proc{b3}->frames;
    ok($acc, '... which b3 took as pulsar+ssl');
};

subtest 'pulsar-flex round-trips through the service address' => sub {
    plan skip_all => 'node not found (tests/deps.sh installs nodejs and npm)' unless Lookout::_which('node');
    my $mod = $ENV{LOOKOUT_PULSAR_FLEX} // repo_top() . '/tests/pulsar/node_modules/pulsar-flex';
    plan skip_all => "pulsar-flex is not installed in $mod (tests/deps.sh)" unless -f "$mod/package.json";
    my $r = KafkaMock::run([ 'node', "$BIN/pulsar-flex-check", "127.0.0.1:$svc", '--timeout', 15, '--topic', 't-b1',
                             '--messages', 10 ], timeout => 60);
    my ($j) = json_lines($r->{out});
    ok($j && $j->{ok}, 'pulsar-flex got back the 10 messages it sent') or return diag($r->{out}, $r->{err});
    my %dialed = map { ($_ => 1) } @{ $j->{dialed} // [] };
    is_deeply([ sort keys %dialed ], [ sort("127.0.0.1:$svc", "127.0.0.1:$E{b1}") ],
              'it dialled lookout only: the service address and b1\'s') or diag(explain($j->{dialed}));
};

subtest 'health checks: a Pulsar CONNECT on the binary address; a killed broker goes out of rotation' => sub {
    for my $b (qw(b1 b2 b3)) {
        ok(wait_until(sub { grep { ($_->{fields}{client_version} // '') eq 'lookout-health' }
                            $proc{$b}->frames(type => 'CONNECT', dir => 'in') }, 5),
           "$b: checked with a CONNECT from lookout-health");
    }
    unlike($lk->log, qr/health check failed/, 'every check passed while the brokers ran');
    my $t0 = time;
    $proc{b3}->stop;
    ok($lk->wait_log(qr/broker prod\/b3: 1 health check failed in a row: out of rotation/, 5),
       'b3, killed, is out of rotation by the checks') or diag($lk->log);
    note sprintf 'b3 ejected %.0f ms after it was stopped (health.interval 300 ms)', 1000 * (time - $t0);
    my $at = length($lk->log);
    like($lk->log, qr/broker prod\/b3 at pulsar\+ssl:\/\/127\.0\.0\.1:$P{b3s}: health check failed: /,
         '... checked at its binary address');
    unlike($lk->log, qr/broker prod\/b[12]\S*: health check failed/, 'b1 and b2 still pass');
    my $m = curl("http://127.0.0.1:$admin/metrics")->{body} // '';
    like($m, qr/^lookout_broker_up\{broker="prod\/b3"\} 0$/m, '/metrics says b3 is down');
    like($m, qr/^lookout_broker_up\{broker="prod\/b1"\} 1$/m, '... and b1 up');
    my $map = curl("http://127.0.0.1:$admin/map")->{body} // '';
    like($map, qr/"name":\s*"prod\/b3".*?"pulsar\+ssl":\s*"pulsar\+ssl:\/\/127\.0\.0\.1:$P{b3s}"/s,
         '/map shows b3 with its binary address') or diag($map);
    # The service address now sends clients to b1 and b2 only.
    my @got;
    for (1 .. 6) {
        my @r = probe("127.0.0.1:$svc", [], { send => 'PING' });
        my ($cn) = grep { ($_->{step} // '') eq 'connect' } @r;
        push @got, $cn->{received}[0]{type} // 'none';
    }
    is_deeply(\@got, [ ('CONNECTED') x 6 ], 'six clients on the service address all connected');
    my $after = substr($lk->log, $at);
    unlike($after, qr/to broker prod\/b3 |broker prod\/b3 unreachable/, 'none of them was sent to b3, not even to fail over')
        or diag($after);
    $proc{b3} = PulsarBinBroker->start(
        dir => $dir, tls_cert => $c->{broker_crt}, tls_key => $c->{broker_key}, topics => \@topics,
        brokers => [ map { { name => $_, advertisedListeners => "$INT{$_},$EXT{$_}", listen => ($_ eq 'b3' ? JSON::PP::true : JSON::PP::false) } }
                     qw(b1 b2 b3) ]);
    ok($lk->wait_log(qr/broker prod\/b3: health check passed: back in rotation/, 5), 'b3, restarted, is back');
};

$lk->stop;

# The same brokers registered in ZooKeeper with binary addresses only, as a broker whose
# advertisedListeners has no http listener writes its registration (webServiceUrl left
# out here, as lookout must not need it): taken, routed, and HTTP on webServiceUrl,
# which has no broker to go to, gets a clear 503, never a dial to a binary port.
subtest 'a ZooKeeper map of binary-only registrations' => sub {
    my $why = ZooKeeper::missing();
    plan skip_all => $why if $why;
    mkdir "$dir/zk";
    my $zk = ZooKeeper->start(dir => "$dir/zk");
    my $zc = $zk->client;
    $zc->create('/pulsar', '', makepath => 1);
    my %X = map { ($_ => free_port()) } qw(b1 b2 tls);
    my ($web, $zsvc, $zadmin) = (free_port(), free_port(), free_port());
    my %reg = (
        b1 => { pulsarServiceUrl => "pulsar://127.0.0.1:$P{b1}",
                advertisedListeners => { internal => { brokerServiceUrl => "pulsar://127.0.0.1:$P{b1}" },
                                         external => { brokerServiceUrl => "pulsar://127.0.0.1:$X{b1}" } } },
        b2 => { pulsarServiceUrl => "pulsar://127.0.0.1:$P{b2}", pulsarServiceUrlTls => "pulsar+ssl://127.0.0.1:$P{b2s}",
                advertisedListeners => { external => { brokerServiceUrl => "pulsar://127.0.0.1:$X{b2}",
                                                       brokerServiceUrlTls => "pulsar+ssl://b2.lookout.test:$X{tls}" } } },
        b3 => { pulsarServiceUrlTls => "pulsar+ssl://127.0.0.1:$P{b3s}",
                advertisedListeners => { internal => { brokerServiceUrlTls => "pulsar+ssl://127.0.0.1:$P{b3s}" },
                                         external => { brokerServiceUrlTls => "pulsar+ssl://b3.lookout.test:$X{tls}" } } });
    my %web = (b1 => 18081, b2 => 18082, b3 => 18083); # the brokerIds' webServicePort: named, never dialled
    $zc->create("/pulsar/loadbalance/brokers/127.0.0.1:$web{$_}", encode_json($reg{$_}), makepath => 1) for qw(b1 b2 b3);
    my $zlk = start_lookout(dir => $dir, name => 'zk', conf => <<"EOF");
[lookout]
workers = 1
log_level = debug
admin = 127.0.0.1:$zadmin
tls.certificate = $c->{edge_crt}
tls.key = $c->{edge_key}
tls.upstream_ca = $c->{internal_ca}

[pulsar live]
metadataStoreUrl = zk:@{[ $zk->connect ]}/pulsar
internal_networks = 127.0.0.0/8
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$web
serviceUrl = pulsar://127.0.0.1:$zsvc
bind = 127.0.0.1
EOF
    ok($zlk->started, 'lookout started with webServiceUrl over a store-read map') or return diag($zlk->log);
    ok(wait_until(sub { (curl("http://127.0.0.1:$zadmin/healthz")->{status} // 0) == 200 }, 10), 'the store was read');
    my $map = curl("http://127.0.0.1:$zadmin/map")->{body} // '';
    my $j = eval { decode_json($map) } // {};
    my ($cl) = grep { $_->{name} eq 'live' } @{ $j->{clusters} // [] };
    is(scalar(@{ $cl->{brokers} // [] }), 3, 'the three binary-only registrations are taken') or diag($map);
    unlike($zlk->log, qr/registration .* refused/, 'none refused');
    my @r = probe("127.0.0.1:$zsvc", [], { lookup => 'persistent://public/default/t-b3', follow => 0 });
    my ($l) = grep { $_->{lookup} } @r;
    is($l->{hops}[0]{fields}{brokerServiceUrlTls}, "pulsar+ssl://b3.lookout.test:$X{tls}", 't-b3: rewritten to its registered external address')
        or diag(explain(\@r));
    @r = probe("127.0.0.1:$X{tls}", [ '--tls', '--cafile', $c->{edge_ca}, '--sni', 'b3.lookout.test' ],
               { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b3', producer_id => 1 } });
    my ($p) = grep { ($_->{step} // '') eq '0' } @r;
    is(($p->{received}[0]{type} // ''), 'PRODUCER_SUCCESS', 'a producer on it reaches b3') or diag(explain(\@r));
    my $accepts = sub { scalar grep { ($_->{event} // '') eq 'accept' } map { $proc{$_}->frames } qw(b1 b2 b3) };
    my $before = $accepts->();
    my $h = curl("http://127.0.0.1:$web/admin/v2/clusters");
    is($h->{status}, 503, 'HTTP on webServiceUrl: 503');
    like($h->{body} // '', qr/no broker of the cluster has an internal http or https address/, '... saying why');
    ok($zlk->wait_log(qr/\[warn\].*cluster live: no broker of the cluster has an internal http or https address/, 5),
       '... and logged at warn') or diag($zlk->log);
    is($accepts->(), $before, 'no broker was dialled for it');
    ok($zlk->alive, 'lookout serves on');
    $zlk->stop;
    $zk->stop;
};

subtest '--probe asks each broker on its binary address: CONNECT and a lookup' => sub {
    my $r = run_lookout(args => [ '--probe', '-c', $conf_file ], dir => $dir, name => 'probe', timeout => 20);
    is($r->{exit}, 0, 'every broker agrees with the map') or diag($r->{out});
    like($r->{out}, qr/^OK +prod\/b1 pulsar:\/\/127\.0\.0\.1:$P{b1}: agrees with the map$/m, 'b1, at its pulsar:// address');
    like($r->{out}, qr/^OK +prod\/b3 pulsar\+ssl:\/\/127\.0\.0\.1:$P{b3s}: agrees with the map$/m, 'b3, over TLS');
    my ($l) = grep { ($_->{fields}{topic} // '') =~ /lookout-probe$/ } $proc{b2}->frames(type => 'LOOKUP', dir => 'in');
    ok($l, 'b2 was asked the lookup of lookout-probe on its binary address');
    $proc{b2}->stop;
    $r = run_lookout(args => [ '--probe', '-c', $conf_file ], dir => $dir, name => 'probe-down', timeout => 20);
    is($r->{exit}, 1, 'a stopped broker fails the probe');
    like($r->{out}, qr/^UNREACHABLE +prod\/b2 pulsar:\/\/127\.0\.0\.1:$P{b2}: connect: /m, '... named at its binary address')
        or diag($r->{out});
};

$_->stop for values %proc;
done_testing;
