#!/usr/bin/perl
# 134-binary-client-certs.t: client certificates on Kafka and Pulsar binary listeners
# (issue 21 item 3). A Kafka cluster with an SSL lookup listener and a pulsar+ssl Pulsar
# cluster, each with tls.verify_client = on in its own section (tls.client_ca from
# [lookout]): kcat (librdkafka) with the client certificate reads metadata and
# round-trips messages through librdkafka's mock cluster, and the Pulsar probe with it
# gets CONNECTED and a lookup answer; without a certificate, or with one from another CA,
# each handshake fails, is logged with the reason and counted in
# lookout_client_cert_refused_total, and the good certificate passes after them. The
# access log's closing line of a binary connection names the verified subject.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json encode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('kcat', 'openssl');
$SIG{PIPE} = 'IGNORE';

my $certs = test_certs();
my $dir = tmp_dir();
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $BIN = repo_top() . '/tests/integration/bin';
my ($kp, $ke, $svc, $pe, $adm) = free_ports(5);

my $m = KafkaMock->start(brokers => 1, topics => ['certs:1'], dir => $dir);
my ($mb) = @{ $m->brokers };
my $pb = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar+ssl://127.0.0.1:$pe" } ],
    topics => [ { name => 't1', owner => 'b1' } ]);

my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
admin = 127.0.0.1:$adm
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
tls.client_ca = $certs->{client_ca}
log.access = $dir/access.log

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL
bootstrap.servers = 127.0.0.1:$kp
bind = 127.0.0.1
tls.verify_client = on

[broker k/$mb->{id}]
advertised.listeners = INTERNAL://$mb->{host}:$mb->{port},EXTERNAL://127.0.0.1:$ke

[pulsar p]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar+ssl://127.0.0.1:$svc
bind = 127.0.0.1
tls.verify_client = on

[broker p/b1]
advertisedListeners = internal:@{[ $pb->url('b1', 'internal', 'pulsar') ]},external:pulsar+ssl://127.0.0.1:$pe
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

my %M = map { ($_ => "lookout_client_cert_refused_total{frontend=\"127.0.0.1:$_\"}") } $kp, $ke, $svc;

# kcat(CERT, ARGS...): kcat over TLS to the bootstrap address with client certificate
# CERT (a test_certs prefix) or none.
sub kcat {
    my ($cert, @args) = @_;
    my @c = $cert ? ('-X', "ssl.certificate.location=$certs->{\"${cert}_crt\"}",
                     '-X', "ssl.key.location=$certs->{\"${cert}_key\"}") : ();
    return KafkaMock::run([ 'kcat', '-X', 'security.protocol=SSL', '-X', "ssl.ca.location=$certs->{edge_ca}",
                            '-X', 'ssl.endpoint.identification.algorithm=none', @c, '-b', "127.0.0.1:$kp", @args ],
                          timeout => 30, @args && $args[0] eq '-P' ? (in => join('', map { "m$_\n" } 1 .. 100)) : ());
}

# probe(CERT, STEPS...): the Pulsar probe over TLS to the service address.
sub probe {
    my ($cert, @steps) = @_;
    my @c = $cert ? ('--cert', $certs->{"${cert}_crt"}, '--key', $certs->{"${cert}_key"}) : ();
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", "127.0.0.1:$svc", '--tls', '--cafile', $certs->{edge_ca},
                             '--sni', 'lookout.test', '--timeout', '3', @c, map { encode_json($_) } @steps ], timeout => 30);
    return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $r->{out};
}

subtest 'Kafka: kcat with the client certificate' => sub {
    my $r = kcat('client', '-L', '-J', '-m', '10');
    is($r->{exit}, 0, 'kcat -L with a certificate') or diag($r->{err});
    my ($md) = map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $r->{out};
    is_deeply([ map { "$_->{name}" } @{ $md->{brokers} // [] } ], ["127.0.0.1:$ke"], 'the broker at its external address');
    $r = kcat('client', '-P', '-t', 'certs');
    is($r->{exit}, 0, 'kcat produced 100 messages') or diag($r->{err});
    $r = kcat('client', '-C', '-t', 'certs', '-o', 'beginning', '-e', '-q');
    is_deeply([ split /\n/, $r->{out} ], [ map { "m$_" } 1 .. 100 ], '... and read them back');
    ok(wait_until(sub { (slurp("$dir/access.log") // '') =~ /\bk\b.*client certificate "CN=client alice,O=lookout tests"/ }, 5) == 1,
       "the access log's Kafka line names the verified subject") or diag(slurp("$dir/access.log"));
    is(Lookout::metrics_map($adm)->{ $M{$kp} }, 0, "$M{$kp}: 0");
};

subtest 'Kafka: no certificate, another CA' => sub {
    for my $case ([ 'no certificate', undef, qr/a client certificate is required and none was sent.*server: 127\.0\.0\.1:$kp/ ],
                  [ 'another CA', 'client_other', qr/client certificate 'CN=client other,O=lookout tests' refused: unable to get local issuer certificate.*server: 127\.0\.0\.1:$kp/ ]) {
        my ($what, $cert, $log) = @$case;
        my $from = length($lk->log // '');
        my $n0 = Lookout::metrics_map($adm)->{ $M{$kp} } // -1;
        # librdkafka retries; -m bounds it, and every attempt is refused.
        my $r = kcat($cert, '-L', '-m', '3');
        isnt($r->{exit}, 0, "$what: kcat -L fails") or diag($r->{out});
        ok(wait_until(sub { Lookout::log_since($lk, $from) =~ $log }, 5) == 1, "$what: logged with the reason")
            or diag(Lookout::log_since($lk, $from));
        cmp_ok((Lookout::metrics_map($adm)->{ $M{$kp} } // -1) - $n0, '>=', 1, "$what: counted in $M{$kp}");
    }
    is(kcat('client', '-L', '-m', '10')->{exit}, 0, 'the good certificate still passes');
};

subtest 'Pulsar binary: the probe with the client certificate' => sub {
    my @r = probe('client', { lookup => 'persistent://public/default/t1', follow => 0 });
    my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
    is(($c->{received}[0]{type} // ''), 'CONNECTED', 'CONNECTED over TLS with a certificate') or diag(explain(\@r));
    my ($l) = grep { $_->{lookup} } @r;
    is(($l->{hops}[0]{fields} // {})->{brokerServiceUrlTls}, "pulsar+ssl://127.0.0.1:$pe", 'the lookup names lookout')
        or diag(explain(\@r));
    ok(wait_until(sub { (slurp("$dir/access.log") // '') =~ /\bp\b.*client certificate "CN=client alice,O=lookout tests"/ }, 5) == 1,
       "the access log's Pulsar line names the verified subject") or diag(slurp("$dir/access.log"));
};

subtest 'Pulsar binary: no certificate, another CA, expired' => sub {
    for my $case ([ 'no certificate', undef, qr/a client certificate is required and none was sent.*server: 127\.0\.0\.1:$svc/ ],
                  [ 'another CA', 'client_other', qr/'CN=client other,O=lookout tests' refused: unable to get local issuer certificate/ ],
                  [ 'expired', 'client_expired', qr/'CN=client expired,O=lookout tests' refused: certificate has expired/ ]) {
        my ($what, $cert, $log) = @$case;
        my $from = length($lk->log // '');
        my $n0 = Lookout::metrics_map($adm)->{ $M{$svc} } // -1;
        my @r = probe($cert, { send => 'PING' });
        my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
        isnt(($c->{received}[0]{type} // ''), 'CONNECTED', "$what: no CONNECTED") or diag(explain(\@r));
        ok(wait_until(sub { Lookout::log_since($lk, $from) =~ $log }, 5) == 1, "$what: logged with the reason")
            or diag(Lookout::log_since($lk, $from));
        is((Lookout::metrics_map($adm)->{ $M{$svc} } // -1) - $n0, 1, "$what: $M{$svc} +1");
    }
    my @r = probe('client', { send => 'PING' });
    my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
    is(($c->{received}[0]{type} // ''), 'CONNECTED', 'the good certificate still passes');
};

ok($lk->alive, 'lookout still runs');
$lk->stop;
$pb->stop;
done_testing();
