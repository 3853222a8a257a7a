#!/usr/bin/perl
# 96-observe.t: the admin listener and the access log (issue 10), for all three protocols
# at once. One lookout serves a Pulsar HTTP cluster (lib/PulsarBroker), a cluster whose
# only broker is dead (behind a TLS service address), a Pulsar binary cluster
# (bin/pulsar-testbroker) and a Kafka cluster (librdkafka's mock). Known traffic must
# move the counters of /metrics by what it is, as read by a Prometheus parser nobody
# here wrote (python3-prometheus-client); /map must describe the config and the dead
# broker's health; /healthz, 404 and 405; the admin address may be no broker's. The
# access log (log.format = json, to a file) has one parseable line per exchange, and
# SIGUSR1 reopens it after a rename (logrotate). A reload moves the generation on and
# leaves the counters counting; draining makes /healthz say 503.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use Test::More;
use Time::HiRes qw(sleep);

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarBroker;

my $PY = '/usr/bin/python3';
plan skip_all => 'no /usr/bin/python3 with prometheus_client (apt-get install python3-prometheus-client)'
    unless -x $PY && system($PY, '-c', 'import prometheus_client') == 0;
plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('kcat');

my $dir = tmp_dir();
my $certs = test_certs();
my $BIN = repo_top() . '/tests/integration/bin';
my ($admin, $web_ext, $web_svc, $dead_svc, $dead_port, $bin_svc, $bin_ext, $kboot, $kext) = free_ports(9);

my $web = PulsarBroker->start(dir => $dir, brokers => ['127.0.0.1:' . free_port()], own => { t1 => 1 });
my $pb = PulsarBinBroker->start(
    dir => $dir, topics => [ { name => 't-b1', owner => 'b1' } ],
    brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$bin_ext" } ]);
my $km = KafkaMock->start(brokers => 1, topics => ['lk-obs:1'], dir => $dir);
my $kb = $km->brokers->[0];
my ($kid, $kint) = ($kb->{id}, "$kb->{host}:$kb->{port}");

my $web_int = $web->internal_listeners(1);
my $bin_int = $pb->addr('b1');
my $access = "$dir/access.log";
my $conf = <<"EOF";
[lookout]
workers = 2
admin = 127.0.0.1:$admin
log.format = json
log.access = $access
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
timeout.connect = 2s

[pulsar web]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$web_svc

[broker web/b1]
advertisedListeners = $web_int,external:http://127.0.0.1:$web_ext

[pulsar dead]
internalListenerName = internal
webServiceUrl = https://127.0.0.1:$dead_svc
# long enough that /map still finds it out of rotation a few subtests later
health.backoff = 10s

[broker dead/d1]
advertisedListeners = internal:http://127.0.0.1:$dead_port

[pulsar bin]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$bin_svc

[broker bin/b1]
advertisedListeners = internal:pulsar://$bin_int,internal:http://127.0.0.9:9,external:pulsar://127.0.0.1:$bin_ext

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$kboot

[broker k/$kid]
advertised.listeners = INTERNAL://$kint,EXTERNAL://127.0.0.1:$kext
EOF
my $lk = start_lookout(dir => $dir, conf => $conf);
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# /metrics, parsed by prometheus_client: { 'name{k=v,...}' => value }, labels sorted.
my $PARSE = <<'EOF';
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out[s.name + '{' + ','.join('%s=%s' % (k, s.labels[k]) for k in sorted(s.labels)) + '}'] = s.value
print(json.dumps(out))
EOF
sub scrape {
    my $r = curl("http://127.0.0.1:$admin/metrics");
    is($r->{status}, 200, 'GET /metrics: 200') or return {};
    spew("$dir/metrics.txt", $r->{body});
    like($r->{headers}{'content-type'} // '', qr{^text/plain; version=0\.0\.4}, '... in the text format 0.0.4');
    my $p = KafkaMock::run([ $PY, '-c', $PARSE ], in => $r->{body}, timeout => 20);
    my $m = eval { decode_json($p->{out}) };
    ok($m, '... which prometheus_client parses') or diag($p->{err}, $r->{body});
    return $m // {};
}
sub delta { my ($a, $b, $k) = @_; return ($b->{$k} // 0) - ($a->{$k} // 0) }

my $m0 = scrape();
is($m0->{'lookout_config_generation{}'}, 1, 'config generation 1');
is($m0->{'lookout_reloads_total{result=ok}'}, 0, 'no reloads');
is($m0->{"lookout_connections_open{frontend=127.0.0.1:$web_ext,protocol=http}"}, 0, 'a frontend series before any traffic');

subtest 'HTTP: five lookups, a dead broker, a failed TLS handshake' => sub {
    for (1 .. 5) {
        my $r = curl("http://127.0.0.1:$web_ext/lookup/v2/topic/persistent/public/default/t1");
        is($r->{status}, 200, "lookup $_: 200");
    }
    my $r = curl('-k', "https://127.0.0.1:$dead_svc/admin/v2/clusters");
    is($r->{status}, 502, 'the dead broker: 502');
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$dead_svc", Timeout => 5);
    print $s "GET / HTTP/1.1\r\nHost: x\r\n\r\n";    # no ClientHello: a failed handshake
    my $junk = '';
    sysread($s, $junk, 100);
    close $s;
    my $m = scrape();
    is(delta($m0, $m, 'lookout_exchanges_total{cluster=web,protocol=http,status=2xx}'), 5, 'exchanges_total 2xx +5');
    is(delta($m0, $m, 'lookout_rewrites_total{cluster=web,filter=lookup}'), 5, 'rewrites_total by the lookup filter +5');
    is(delta($m0, $m, 'lookout_exchange_duration_seconds_count{cluster=web,protocol=http}'), 5, 'duration histogram count +5');
    is(delta($m0, $m, 'lookout_upstream_response_seconds_count{cluster=web,protocol=http}'), 5, 'upstream histogram count +5');
    ok($m->{'lookout_exchange_duration_seconds_bucket{cluster=web,le=+Inf,protocol=http}'}
       >= $m->{'lookout_exchange_duration_seconds_bucket{cluster=web,le=0.001,protocol=http}'}, 'buckets cumulate');
    is(delta($m0, $m, "lookout_connections_total{frontend=127.0.0.1:$web_ext,protocol=http}"), 5, 'connections_total +5');
    is(delta($m0, $m, 'lookout_exchanges_total{cluster=dead,protocol=http,status=5xx}'), 1, 'dead: exchanges_total 5xx +1');
    is(delta($m0, $m, 'lookout_upstream_errors_total{broker=dead/d1,kind=connect}'), 1, 'upstream_errors connect +1');
    is(delta($m0, $m, "lookout_tls_handshake_failures_total{frontend=127.0.0.1:$dead_svc}"), 1, 'tls_handshake_failures +1');
    is($m->{'lookout_broker_up{broker=dead/d1}'}, 0, 'the dead broker is down');
    is($m->{'lookout_broker_up{broker=web/b1}'}, 1, 'the live one up');
    is($m->{'lookout_broker_connect_failures{broker=dead/d1}'}, 1, 'one consecutive connect failure');
};

subtest 'Kafka Metadata (kcat) and a Pulsar LOOKUP' => sub {
    my $m1 = scrape();
    my $r = KafkaMock::run([ 'kcat', '-L', '-b', "127.0.0.1:$kboot", '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L') or diag($r->{err});
    my @p = KafkaMock::run([ $PY, "$BIN/pulsar-probe", "127.0.0.1:$bin_svc",
                             encode_json({ lookup => 'persistent://public/default/t-b1', follow => 0 }) ], timeout => 30);
    like($p[0]{out}, qr/\Q127.0.0.1:$bin_ext\E/, 'the LOOKUP answered with lookout\'s address') or diag($p[0]{err});
    my $m = scrape();
    cmp_ok(delta($m1, $m, 'lookout_exchanges_total{api=Metadata,cluster=k,protocol=kafka}'), '>=', 1, 'Kafka: api Metadata counted');
    cmp_ok(delta($m1, $m, 'lookout_exchanges_total{api=ApiVersions,cluster=k,protocol=kafka}'), '>=', 1, '... and ApiVersions');
    cmp_ok(delta($m1, $m, 'lookout_rewrites_total{cluster=k,filter=kafka}'), '>=', 1, '... broker addresses rewritten by the kafka filter');
    is(delta($m1, $m, 'lookout_exchanges_total{cluster=bin,command=LOOKUP,protocol=pulsar}'), 1, 'Pulsar: one LOOKUP');
    is(delta($m1, $m, 'lookout_rewrites_total{cluster=bin,filter=pulsar}'), 1, '... rewritten by the pulsar filter');
    is(delta($m1, $m, 'lookout_upstream_response_seconds_count{cluster=bin,protocol=pulsar}'), 1, '... timed');
};

subtest '/healthz, /map, 404, 405' => sub {
    my $r = curl("http://127.0.0.1:$admin/healthz");
    is("$r->{status} $r->{body}", "200 ok\n", '/healthz: 200 ok');
    is(curl("http://127.0.0.1:$admin/nope")->{status}, 404, 'an unknown path: 404');
    is(curl('-X', 'POST', "http://127.0.0.1:$admin/metrics")->{status}, 405, 'POST: 405');
    $r = curl("http://127.0.0.1:$admin/map");
    my $map = eval { decode_json($r->{body}) };
    ok($map, '/map is JSON') or return diag($r->{body});
    my %cl = map { ($_->{name} => $_) } @{ $map->{clusters} };
    is_deeply([ sort keys %cl ], [qw(bin dead k web)], 'every cluster of the config');
    my ($wb) = @{ $cl{web}{brokers} };
    is($wb->{name}, 'web/b1', 'web/b1');
    is($wb->{listeners}{external}{http}, "http://127.0.0.1:$web_ext", "... its external listener's address");
    is($cl{k}{brokers}[0]{node_id}, $kid, 'the Kafka broker with its node id');
    is_deeply($cl{k}{bootstrap_servers}, ["127.0.0.1:$kboot"], '... and the bootstrap address');
    my $dh = $cl{dead}{brokers}[0]{health};
    ok(!$dh->{up} && $dh->{consecutive_failures} == 1 && $dh->{ejected_until}, 'dead/d1: down, 1 failure, ejected until a time')
        or diag(explain($dh));
    ok($wb->{health}{up} && !defined $wb->{health}{ejected_until}, 'web/b1: up');
    my %binds = map { ($_->{address} => $_) } @{ $map->{binds} };
    ok($binds{"127.0.0.1:$dead_svc"}{tls}, "the dead cluster's service address is TLS");
    is($binds{"127.0.0.1:$kboot"}{protocol}, 'kafka', 'the bootstrap address is Kafka');
    ok(!$binds{"127.0.0.1:$admin"}, 'the admin address is no bind');
};

subtest 'the admin listener: bad requests get 400 or 431, and it keeps serving' => sub {
    # raw(TEXT): what the admin listener answers to TEXT, up to its close.
    my $raw = sub {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$admin", Timeout => 5) or return '';
        print $s $_[0];
        my $got = '';
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 5;
        eval { while (my $n = sysread($s, my $buf, 4096)) { $got .= $buf } };
        alarm 0;
        return $got;
    };
    like($raw->("GARBAGE\r\n\r\n"), qr{^HTTP/1\.[01] 400 }, 'a request line without a path: 400');
    like($raw->("GET /healthz HTTP/1.1\r\nX-Pad: " . ('a' x 9000)), qr{^HTTP/1\.[01] 431 },
         'a head over 8 KiB: 431, without waiting for its end');
    is(curl("http://127.0.0.1:$admin/healthz")->{status}, 200, '/healthz still answers');
};

subtest 'the access log: one JSON line per exchange, reopened on SIGUSR1' => sub {
    ok(wait_until(sub { (slurp($access) // '') =~ /"command":"LOOKUP"/ }, 5), 'the Pulsar LOOKUP line is there');
    my @lines = split /\n/, slurp($access) // '';
    my @j = map { my $x = eval { decode_json($_) }; $x } @lines;
    is(scalar(grep { !defined } @j), 0, 'every line parses as JSON') or diag(slurp($access));
    my @get = grep { ($_->{path} // '') =~ m{/t1$} } @j;
    is(scalar @get, 5, 'the five lookups');
    my $g = $get[0];
    is_deeply([ @{$g}{qw(protocol cluster broker method status frontend)} ],
              [ 'http', 'web', 'web/b1', 'GET', 200, "127.0.0.1:$web_ext" ], '... protocol, cluster, broker, method, status, frontend');
    is_deeply($g->{filters}, { lookup => 1 }, '... and the rewrite, by filter');
    ok($g->{bytes_out} > 0 && $g->{client} =~ /^127\.0\.0\.1:\d+$/ && $g->{duration_ms} >= 0, '... bytes, client, duration');
    my ($md) = grep { ($_->{api} // '') eq 'Metadata' } @j;
    ok($md && $md->{cluster} eq 'k' && $md->{rewrites} >= 1 && defined $md->{api_version}, 'a Kafka Metadata line')
        or diag(explain(\@j));
    my ($lu) = grep { ($_->{command} // '') eq 'LOOKUP' } @j;
    ok($lu && $lu->{filters}{pulsar} == 1 && $lu->{bytes_in} > 0, 'a Pulsar LOOKUP line') or diag(explain($lu));
    ok(wait_until(sub { (slurp($access) // '') =~ /"event":"connection","frames_in":\d+/ }, 5), 'a binary connection\'s closing line');
    my ($dead) = grep { ($_->{cluster} // '') eq 'dead' } @j;
    is($dead->{status}, 502, 'the dead broker\'s 502, with its error') && like($dead->{error}, qr/connect/);

    rename $access, "$access.1" or die "rename: $!";
    $lk->signal('USR1');
    ok($lk->wait_log(qr/SIGUSR1: access log reopened/, 5), 'SIGUSR1 reopens the file');
    is(curl("http://127.0.0.1:$web_ext/lookup/v2/topic/persistent/public/default/t1?after=rotate")->{status}, 200, 'a lookup');
    ok(wait_until(sub { (slurp($access) // '') =~ /after=rotate/ }, 5), '... logged in the new file');
    unlike(slurp("$access.1"), qr/after=rotate/, '... not in the renamed one');
};

my $m = scrape();
is($m->{"lookout_connections_open{frontend=127.0.0.1:$web_ext,protocol=http}"}, 0, 'every connection closed: none open');

subtest 'the admin address may be no broker\'s, nor a bound one' => sub {
    for my $case ([ "127.0.0.1:$dead_port", qr/bad\.conf:3: \[lookout\] admin.*internal address http:\/\/127\.0\.0\.1:$dead_port of broker dead\/d1/ ],
                  [ "127.0.0.1:$web_ext", qr/bad\.conf:3: \[lookout\] admin: .*conflicts with bind 127\.0\.0\.1:$web_ext/ ]) {
        (my $c = $conf) =~ s/^admin = .*$/admin = $case->[0]/m;
        my $r = run_lookout(dir => $dir, name => 'bad', conf => $c, args => ['--check']);
        is($r->{exit}, 1, "admin = $case->[0] is refused");
        like($r->{out}, $case->[1], '... saying where and why');
    }
};

subtest 'a reload: the generation moves on, the counters carry on' => sub {
    my $m1 = scrape();
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reloaded .*generation 2/, 10), 'SIGHUP reloads') or return diag($lk->log);
    is(curl("http://127.0.0.1:$web_ext/lookup/v2/topic/persistent/public/default/t1")->{status}, 200, 'a lookup after it');
    my $m = scrape();
    is($m->{'lookout_config_generation{}'}, 2, 'config generation 2');
    is(delta($m1, $m, 'lookout_reloads_total{result=ok}'), 1, 'reloads_total ok +1');
    is(delta($m1, $m, 'lookout_exchanges_total{cluster=web,protocol=http,status=2xx}'), 1,
       'exchanges_total went on from where it was: +1');
    my $map = eval { decode_json(curl("http://127.0.0.1:$admin/map")->{body}) } // {};
    is($map->{generation}, 2, '/map describes generation 2');
};

subtest 'draining: /healthz says 503 while an exchange finishes' => sub {
    # Two workers: whichever the request lands on, worker 0 (whose loop serves the admin
    # listener) must stay up until it is answered.
    my $slow = curl_start({ timeout => 20 }, "http://127.0.0.1:$web_ext/test/slow?ms=1500");
    ok(wait_until(sub { (scrape()->{"lookout_connections_open{frontend=127.0.0.1:$web_ext,protocol=http}"} // 0) == 1 }, 5),
       'the slow request is under way');
    $lk->signal('TERM');
    ok(wait_until(sub { curl("http://127.0.0.1:$admin/healthz")->{status} == 503 }, 5), '/healthz: 503 while draining');
    is(curl_wait($slow)->{status}, 200, 'the slow request still gets its answer');
    ok(defined $lk->wait_exit(10), 'and lookout exits');
};

$lk->stop;
$lk->check_sanitizers;
done_testing;
