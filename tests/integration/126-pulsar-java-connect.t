#!/usr/bin/perl
# 126-pulsar-java-connect.t: single-address mode (pulsar_routing = service) with the CONNECT
# the Java client sends (issue 19, defect 1). Through a proxy, the Java client (and the C++
# and Go clients, which copy it) names the broker in CONNECT proxy_to_broker_url as
# "host:port", without a scheme: ClientCnx.setTargetBroker formats the lookup answer's
# address as String.format("%s:%d", getHostString(), getPort()), and that address is
# InetSocketAddress.createUnresolved(uri.getHost(), uri.getPort()) of the answer's
# brokerServiceUrl, or brokerServiceUrlTls when the client uses TLS (BinaryProtoLookupService);
# the Pulsar Proxy splits it at the last ':' (BrokerProxyValidator
# .resolveAndCheckTargetAddress). The frames here are the Java client's bytes (java_connect
# below), sent with bin/pulsar-probe --no-connect:
#   - host:port of the lookup-listener address lookout itself returned in a LOOKUP_RESPONSE,
#     and host:port of a broker's internal address, reach that broker;
#   - pulsar://host:port still does;
#   - host:port of a broker that is not in the map (a test broker listening there) is refused
#     and never dialled; malformed ones (empty, no port, port out of range, garbage, IPv6
#     without or with broken brackets) are refused with a log line saying what is wrong;
#   - over TLS, host:port of the TLS address the answer gave reaches the broker over
#     pulsar+ssl: the text picks the broker, the client's TLS picks the address dialled.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarFrame qw(fv fb);

KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();


# The CONNECT frame of a Java client 4.x with no authentication, as hex: ClientCnx
# .newConnectCommand calls Commands.newConnect(authentication.getAuthMethodName() = "none"
# (AuthenticationDisabled), authData = AuthData.of("") (AuthenticationDataProvider
# .authenticate's default: no command data, so empty bytes), protocolVersion = the newest
# (v21), clientVersion = "Pulsar-Java-v" + PulsarVersion.getVersion(), targetBroker =
# proxyToTargetBrokerAddress, ...), which sets client_version, auth_method_name,
# proxy_to_broker_url, auth_data, protocol_version and setFeatureFlags (supports_auth_refresh,
# supports_broker_entry_metadata, supports_partial_producer,
# supports_get_partitioned_metadata_without_auto_creation: apache/pulsar Commands.java at
# 007b153c). LightProto writes a message's fields in field-number order (its writeTo walks
# protostuff's Message.getFields(), sorted by number), so: client_version 1, auth_data 3,
# protocol_version 4, auth_method_name 5, proxy_to_broker_url 6, feature_flags 10
# (PulsarApi.proto CommandConnect; FeatureFlags 1, 2, 3, 5), inside BaseCommand type 1 =
# CONNECT (2), connect 2; framed [totalSize][commandSize][BaseCommand].
sub java_connect {
    my ($target) = @_;
    my $flags = fv(1, 1) . fv(2, 1) . fv(3, 1) . fv(5, 1);
    my $connect = fb(1, 'Pulsar-Java-v4.0.0') . fb(3, '') . fv(4, 21) . fb(5, 'none')
                . fb(6, $target) . fb(10, $flags);
    my $cmd = fv(1, 2) . fb(2, $connect);
    return unpack('H*', pack('NN', 4 + length $cmd, length $cmd) . $cmd);
}

# Sends the Java CONNECT naming $target to $addr, then $then (a probe step) if given.
# Returns (the CONNECT step's answer, the next step's answer).
sub java_client {
    my ($addr, $target, $then, @opts) = @_;
    my @r = PulsarBinBroker::probe($addr, [ '--no-connect', '--timeout', 5, @opts ],
                                   { raw => java_connect($target), expect => 1 }, $then ? ($then) : ());
    my ($c) = grep { ($_->{step} // '') eq '0' } @r;
    my ($n) = grep { ($_->{step} // '') eq '1' } @r;
    return ($c // {}, $n // {});
}

sub first_type { return ($_[0]{received}[0]{type} // '') }

my $producer = { send => 'PRODUCER', fields => { topic => 'persistent://public/default/t-b2', producer_id => 1 } };

subtest 'the frame is a CONNECT the test broker decodes as the Java client meant it' => sub {
    my $x = PulsarBinBroker->start(dir => $dir, brokers => [ { name => 'b1', advertisedListeners => 'internal:pulsar://127.0.0.1:0' } ]);
    my ($c) = java_client($x->addr('b1'), '127.0.0.1:6650');
    is(first_type($c), 'CONNECTED', 'a broker answers it');
    my ($in) = $x->frames(type => 'CONNECT', dir => 'in');
    my $f = $in->{fields} // {};
    is($f->{client_version}, 'Pulsar-Java-v4.0.0', 'client_version');
    is($f->{protocol_version}, 21, 'protocol_version');
    is($f->{proxy_to_broker_url}, '127.0.0.1:6650', 'proxy_to_broker_url, host:port') or diag(explain($in));
    $x->stop;
};

# Three mapped brokers with an internal and an external (lookup) listener; b4 listens too,
# but is not in lookout's map.
my %E = map { ($_ => free_port()) } qw(b1 b2 b3);
my $svc = free_port();
my $t = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ (map { { name => $_, advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$E{$_}" } }
                  qw(b1 b2 b3)),
                 { name => 'b4', advertisedListeners => 'internal:pulsar://127.0.0.1:0' } ],
    topics => [ { name => 't-b2', owner => 'b2' } ]);
my %I = map { ($_ => $t->addr($_)) } qw(b1 b2 b3 b4);
# Real brokers have a web address too (and lookout wants one); nothing listens on it.
my %web = (b1 => 1, b2 => 2, b3 => 3);
my $brokers = join '', map { "[broker prod/$_]\nadvertisedListeners = internal:pulsar://$I{$_},internal:http://127.0.0.$web{$_}:9,"
                             . "external:pulsar://127.0.0.1:$E{$_}\n\n" } qw(b1 b2 b3);
my $lk = start_lookout(dir => $dir, name => 'service', conf => <<"EOF" . $brokers);
[lookout]
workers = 1
log_level = debug

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc
pulsar_routing = service
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# How often lookout has logged that it connected to broker $b at $addr so far.
sub dialled { my ($l, $b, $addr) = @_; my @m = ($l->log // '') =~ /to broker \Q$b\E at \Q$addr\E/g; return scalar @m }

sub accepts { my ($b) = @_; return scalar(grep { ($_->{event} // '') eq 'accept' && ($_->{broker} // '') eq $b } $t->frames) }

subtest 'host:port of the lookup-listener address lookout returned reaches that broker' => sub {
    my @r = PulsarBinBroker::probe("127.0.0.1:$svc", [], { lookup => 'persistent://public/default/t-b2', authoritative => 1 });
    my ($l) = grep { $_->{lookup} } @r;
    my $f = $l->{hops}[0]{fields} // {};
    ok($f->{proxy_through_service_url}, 'the answer says proxy_through_service_url') or diag(explain(\@r));
    # the Java client's logical address: URI host and port of brokerServiceUrl
    my ($hp) = ($f->{brokerServiceUrl} // '') =~ m{^pulsar://([^/]+)$};
    is($hp, "127.0.0.1:$E{b2}", 'it names b2 by its lookup-listener address') or return;
    my ($before, $logged) = (accepts('b2'), dialled($lk, 'prod/b2', $I{b2}));
    my ($c, $p) = java_client("127.0.0.1:$svc", $hp, $producer);
    is(first_type($c), 'CONNECTED', "CONNECT proxy_to_broker_url $hp: CONNECTED") or diag(explain($c));
    is(first_type($p), 'PRODUCER_SUCCESS', '... and the producer reaches the owner, b2') or diag(explain($p));
    is(dialled($lk, 'prod/b2', $I{b2}), $logged + 1, '... dialled at its internal address');
    is(accepts('b2'), $before + 1, '... one connection to b2');
    my ($in) = reverse grep { ($_->{broker} // '') eq 'b2' } $t->frames(type => 'CONNECT', dir => 'in');
    is($in->{fields}{proxy_to_broker_url}, $hp, 'the broker got the CONNECT as the client sent it');
};

subtest 'host:port of a broker\'s internal address reaches that broker' => sub {
    my ($c, $p) = java_client("127.0.0.1:$svc", $I{b2}, $producer);
    is(first_type($c), 'CONNECTED', "proxy_to_broker_url $I{b2} (b2's internal address): CONNECTED") or diag(explain($c));
    is(first_type($p), 'PRODUCER_SUCCESS', '... at the owner, b2');
    my $logged = dialled($lk, 'prod/b3', $I{b3});
    my ($c3, $p3) = java_client("127.0.0.1:$svc", $I{b3}, $producer);
    is(first_type($c3), 'CONNECTED', "proxy_to_broker_url $I{b3} (b3's): CONNECTED");
    is(first_type($p3), 'ERROR', '... at b3, which does not own the topic, so it says so') or diag(explain($p3));
    is(dialled($lk, 'prod/b3', $I{b3}), $logged + 1, '... dialled at b3');
};

subtest 'pulsar://host:port still reaches that broker' => sub {
    my ($c, $p) = java_client("127.0.0.1:$svc", "pulsar://127.0.0.1:$E{b2}", $producer);
    is(first_type($c), 'CONNECTED', 'CONNECTED') or diag(explain($c));
    is(first_type($p), 'PRODUCER_SUCCESS', '... at the owner, b2');
};

subtest 'host:port of a broker not in the map: refused, never dialled' => sub {
    my %before = map { ($_ => accepts($_)) } qw(b1 b2 b3 b4);
    # b4's address (a broker listens there), lookout's own service address, another host
    for my $target ($I{b4}, "127.0.0.1:$svc", '127.0.0.2:6650', "localhost:$E{b2}") {
        my ($c) = java_client("127.0.0.1:$svc", $target);
        ok($c->{closed} && !@{ $c->{received} // [] }, "proxy_to_broker_url $target: closed, no answer") or diag(explain($c));
        ok($lk->wait_log(qr/CONNECT proxy_to_broker_url \Q$target\E names no broker in the map; refused, not dialled; closing/, 5),
           '... logged');
    }
    is(accepts($_), $before{$_}, "$_ saw no connection") for qw(b1 b2 b3 b4);
};

subtest 'malformed proxy_to_broker_url: refused with what is wrong, never dialled' => sub {
    my %before = map { ($_ => accepts($_)) } qw(b1 b2 b3 b4);
    my @t = ([ '', 'is empty' ],
             [ '127.0.0.1', "has no ':port'" ],
             [ '127.0.0.1:0', 'has a port that is not a number from 1 to 65535' ],
             [ '127.0.0.1:65536', 'has a port that is not a number from 1 to 65535' ],
             [ "127.0.0.1:$E{b2}x", 'has a port that is not a number from 1 to 65535' ],
             [ "b2 broker!:$E{b2}", 'has a host that is neither a name nor an address' ],
             [ "\x01\x02\xff", "has no ':port'" ],
             [ '::1:6650', 'has an IPv6 address without brackets' ],
             [ '[::1:6650', "has an unclosed '['" ],
             [ '[::1]6650', "has no ':port' after the bracketed IPv6 address" ],
             [ '[127.0.0.1]:6650', 'has no IPv6 address in its brackets' ],
             [ 'pulsar://127.0.0.1:99999', 'is a URL without a valid host and port' ]);
    for my $x (@t) {
        my ($target, $why) = @$x;
        (my $shown = $target) =~ s/[^\x20-\x7e]/./g;
        $shown = '""' if $shown eq '';
        my ($c) = java_client("127.0.0.1:$svc", $target);
        ok($c->{closed} && !@{ $c->{received} // [] }, "proxy_to_broker_url '$shown': closed, no answer") or diag(explain($c));
        ok($lk->wait_log(qr/CONNECT proxy_to_broker_url \Q$shown\E \Q$why\E; refused, not dialled; closing/, 5),
           "... logged: $why");
    }
    is(accepts($_), $before{$_}, "$_ saw no connection") for qw(b1 b2 b3 b4);
    my ($c, $p) = java_client("127.0.0.1:$svc", "127.0.0.1:$E{b2}", $producer);
    is(first_type($p), 'PRODUCER_SUCCESS', 'others are still served');
};

$lk->stop;
$t->stop;

subtest 'TLS: host:port of the TLS address the answer gave; lookout dials pulsar+ssl' => sub {
    my $c = test_certs();
    my ($port, $ssvc) = (free_port(), free_port());
    my $x = PulsarBinBroker->start(
        dir => $dir, tls_cert => $c->{broker_crt}, tls_key => $c->{broker_key},
        brokers => [ map { { name => $_, advertisedListeners => 'internal:pulsar://127.0.0.1:0,internal:pulsar+ssl://127.0.0.1:0,'
                                                                . "external:pulsar+ssl://$_.lookout.test:$port" } } qw(b1 b2) ],
        topics => [ { name => 't-b2', owner => 'b2' } ]);
    my $brokers = join '', map {
        "[broker tls/$_]\nadvertisedListeners = internal:" . $x->url($_, 'internal', 'pulsar') . ',internal:'
            . $x->url($_, 'internal', 'pulsar+ssl') . ",internal:http://127.0.0.$web{$_}:9,external:pulsar+ssl://$_.lookout.test:$port\n\n"
    } qw(b1 b2);
    my $lk3 = start_lookout(dir => $dir, name => 'tls', conf => <<"EOF" . $brokers);
[lookout]
workers = 1
log_level = debug
tls.certificate = $c->{edge_crt}
tls.key = $c->{edge_key}
tls.upstream_ca = $c->{internal_ca}

[pulsar tls]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar+ssl://127.0.0.1:$ssvc
pulsar_routing = service
bind = 127.0.0.1
EOF
    ok($lk3->started, 'lookout started') or return diag($lk3->log);
    my @tls = ('--tls', '--cafile', $c->{edge_ca}, '--sni', 'lookout.test');
    my @r = PulsarBinBroker::probe("127.0.0.1:$ssvc", [@tls], { lookup => 'persistent://public/default/t-b2', authoritative => 1 });
    my ($l) = grep { $_->{lookup} } @r;
    my $f = $l->{hops}[0]{fields} // {};
    # a client with TLS takes brokerServiceUrlTls (BinaryProtoLookupService)
    my ($hp) = ($f->{brokerServiceUrlTls} // '') =~ m{^pulsar\+ssl://([^/]+)$};
    is($hp, "b2.lookout.test:$port", 'the answer names b2 by its TLS lookup-listener address') or return diag(explain(\@r));
    my ($cn, $p) = java_client("127.0.0.1:$ssvc", $hp, $producer, @tls);
    is(first_type($cn), 'CONNECTED', "proxy_to_broker_url $hp over TLS: CONNECTED") or diag(explain($cn));
    is(first_type($p), 'PRODUCER_SUCCESS', '... at the owner, b2');
    my @acc = grep { ($_->{event} // '') eq 'accept' && ($_->{broker} // '') eq 'b2' } $x->frames;
    is(scalar(@acc), 1, 'b2 got one connection') or diag(explain(\@acc));
    is($acc[0]{scheme}, 'pulsar+ssl', '... on its pulsar+ssl address: the client came over TLS');
    # the internal pulsar:// address names b2 just as well; the address dialled stays TLS
    my ($plain) = $x->url('b2', 'internal', 'pulsar') =~ m{^pulsar://(.+)$};
    ($cn, $p) = java_client("127.0.0.1:$ssvc", $plain, $producer, @tls);
    is(first_type($p), 'PRODUCER_SUCCESS', "proxy_to_broker_url $plain (b2's pulsar:// address) over TLS: at b2");
    @acc = grep { ($_->{event} // '') eq 'accept' && ($_->{broker} // '') eq 'b2' } $x->frames;
    is(($acc[1] // {})->{scheme}, 'pulsar+ssl', '... over pulsar+ssl as well') or diag(explain(\@acc));
    $lk3->stop;
    $x->stop;
};

done_testing;
