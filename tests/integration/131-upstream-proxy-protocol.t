#!/usr/bin/perl
# 131-upstream-proxy-protocol.t: `upstream.proxy_protocol` (issue 21 item 2): lookout
# starts each broker connection with a PROXY header naming its client. HAProxy stands
# before the fake brokers as the party that reads the header (`accept-proxy`), setting
# X-Src and X-Dst on what it forwards and logging binary connections:
#  - v1 and v2 reach a raw backend as the exact bytes, with curl's address and port
#    (--local-port), and HAProxy reads the client's address from both;
#  - with HAProxy's send-proxy-v2 in front of lookout, the header names the client behind
#    that HAProxy and the address it connected to, not the balancer;
#  - before TLS on an https broker address, and on health checks and lookout --probe (a
#    v2 LOCAL);
#  - two clients never share a pooled broker connection (keep-alive, interleaved), and one
#    that leaves (Connection: close) leaves none in the pool; a keep-alive client's next
#    request reuses its own, which is closed as soon as that client closes (not after
#    timeout.idle); off, a pooled connection outlives its client and serves the next;
#  - off: a backend that expects no header gets none;
#  - Pulsar binary: a CONNECT through lookout arrives with the client's address, and Kafka
#    (bootstrap and a node's own address) too;
#  - a broker that takes no PROXY header gets one: lookout answers what the broker did
#    (HTTP) or closes (binary), logged, and goes on serving.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json encode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarBroker;

need_tools('haproxy');
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $BIN = repo_top() . '/tests/integration/bin';

my $dir = tmp_dir();
my $certs = test_certs();
my ($p) = free_ports(1);
my ($w1, $w2, $wraw1, $wraw2, $woff, $wt, $wbad, $bsvc, $bsvcbad, $ext, $ext2) = free_ports(11);
my ($hb, $hb1, $hbs, $hbin, $hf, $raw1, $raw2, $rawoff, $hk, $kboot, $kext) = free_ports(11);
my ($hoff, $woffka) = free_ports(2);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p"], own => {});
my $t = PulsarBinBroker->start(
    dir => $dir, unknown_command => 'ignore',
    brokers => [ { name => 'b1', advertisedListeners => "internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:$ext" } ]);
my $binaddr = $t->addr('b1');
my $tb = KafkaTestBroker->start(dir => $dir, nodes => [ { id => 1, host => '127.0.0.1', port => 0, bind => '127.0.0.1:0' } ],
                                topics => [ { name => 'lk-pp', partitions => 1 } ]);
my $kaddr = $tb->node(1)->{listen};

# A backend that reads no header but records the bytes before the HTTP request, one hex
# line per connection, and answers 200 "ok".
my @kids;
sub raw_backend {
    my ($port, $file) = @_;
    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Listen => 16, ReuseAddr => 1)
        or die "listen $port: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        $SIG{ALRM} = sub { exit 0 };
        alarm 120;
        while (my $s = $ls->accept) {
            my ($buf, $end) = ('', time + 5);
            while ($buf !~ /\r\n\r\n/ && time < $end) {
                next unless IO::Select->new($s)->can_read(0.5);
                sysread($s, my $b, 4096) or last;
                $buf .= $b;
            }
            my $at = $buf =~ m{(?:GET|POST) /\S* HTTP/1\.1\r\n} ? $-[0] : length $buf;
            open my $fh, '>>', $file or die;
            print $fh unpack('H*', substr($buf, 0, $at)), "\n";
            close $fh;
            syswrite $s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
            close $s;
        }
        exit 0;
    }
    close $ls;
    push @kids, $pid;
}
raw_backend($raw1, "$dir/raw1");
raw_backend($raw2, "$dir/raw2");
raw_backend($rawoff, "$dir/rawoff");

spew("$dir/broker.pem", slurp($certs->{broker_crt}) . slurp($certs->{broker_key}));
start_haproxy($dir, <<"EOF");
global
    log stderr format raw local0 info
defaults
    log global
    timeout connect 2s
    timeout client 20s
    timeout server 20s
frontend bk_http
    mode http
    bind 127.0.0.1:$hb accept-proxy
    bind 127.0.0.1:$hb1 accept-proxy
    bind 127.0.0.1:$hbs accept-proxy ssl crt $dir/broker.pem
    bind 127.0.0.1:$hoff
    log-format "PPHTTP src=%[src]:%[src_port] dst=%[dst]:%[dst_port] pp=%[fc_rcvd_proxy] %HM %HU"
    http-request set-header X-Src %[src]:%[src_port]
    http-request set-header X-Dst %[dst]:%[dst_port]
    default_backend broker_http
backend broker_http
    mode http
    server b1 127.0.0.1:$p
frontend bk_bin
    mode tcp
    bind 127.0.0.1:$hbin accept-proxy
    option logasap
    log-format "PPBIN src=%[src]:%[src_port] dst=%[dst]:%[dst_port]"
    default_backend broker_bin
backend broker_bin
    mode tcp
    server b1 $binaddr
frontend bk_kafka
    mode tcp
    bind 127.0.0.1:$hk accept-proxy
    option logasap
    log-format "PPKAFKA src=%[src]:%[src_port] dst=%[dst]:%[dst_port]"
    default_backend broker_kafka
backend broker_kafka
    mode tcp
    server k1 $kaddr
frontend front
    mode tcp
    bind 127.0.0.1:$hf
    default_backend lk
backend lk
    mode tcp
    server lk 127.0.0.1:$w2 send-proxy-v2 source 127.0.0.2
EOF
END { local $?; kill 'TERM', $_ for @kids; waitpid($_, 0) for @kids }
ok(wait_port('127.0.0.1', $hb) && wait_port('127.0.0.1', $hbin) && wait_port('127.0.0.1', $hf), 'haproxy listens')
    or diag(slurp("$dir/haproxy.out"));

my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
log_level = debug
proxy_protocol.trusted = 127.0.0.2/32
tls.upstream_ca = $certs->{internal_ca}

[pulsar v2]
webServiceUrl = http://127.0.0.1:$w2
proxy_protocol = any
upstream.proxy_protocol = v2
[broker v2/b1]
advertisedListeners = internal:http://127.0.0.1:$hb

[pulsar v1]
webServiceUrl = http://127.0.0.1:$w1
upstream.proxy_protocol = v1
[broker v1/b1]
advertisedListeners = internal:http://127.0.0.1:$hb1

[pulsar raw1]
webServiceUrl = http://127.0.0.1:$wraw1
upstream.proxy_protocol = v1
[broker raw1/b1]
advertisedListeners = internal:http://127.0.0.1:$raw1

[pulsar raw2]
webServiceUrl = http://127.0.0.1:$wraw2
upstream.proxy_protocol = v2
[broker raw2/b1]
advertisedListeners = internal:http://127.0.0.1:$raw2

[pulsar off]
webServiceUrl = http://127.0.0.1:$woff
[broker off/b1]
advertisedListeners = internal:http://127.0.0.1:$rawoff

[pulsar offka]
webServiceUrl = http://127.0.0.1:$woffka
[broker offka/b1]
advertisedListeners = internal:http://127.0.0.1:$hoff

[pulsar tls]
webServiceUrl = http://127.0.0.1:$wt
upstream.proxy_protocol = v2
health.check = http
health.interval = 1s
health.path = /admin/v2/brokers/ready
[broker tls/b1]
advertisedListeners = internal:https://127.0.0.1:$hbs

[pulsar bad]
webServiceUrl = http://127.0.0.1:$wbad
upstream.proxy_protocol = v1
[broker bad/b1]
advertisedListeners = internal:http://127.0.0.1:$p

[pulsar bin]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$bsvc
upstream.proxy_protocol = v2
[broker bin/b1]
advertisedListeners = internal:pulsar://127.0.0.1:$hbin,external:pulsar://127.0.0.1:$ext

[pulsar binbad]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$bsvcbad
upstream.proxy_protocol = v1
[broker binbad/b1]
advertisedListeners = internal:pulsar://$binaddr,external:pulsar://127.0.0.1:$ext2

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$kboot
upstream.proxy_protocol = v1
[broker k/1]
advertised.listeners = INTERNAL://127.0.0.1:$hk,EXTERNAL://127.0.0.1:$kext
EOF
ok($lk->started, 'lookout started') or diag($lk->log);

sub seen { my $j = eval { decode_json($_[0]{body}) } // {}; my %h = map { (lc $_->[0] => $_->[1]) } @{ $j->{headers} // [] }; \%h }
sub last_line { my @l = split /\n/, slurp($_[0]) // ''; $l[-1] // '' }

# v1 and v2, the exact bytes: curl from 127.0.0.3 and a port of our choosing.
{
    my $cp = free_port();
    my $r = curl('--interface', '127.0.0.3', '--local-port', $cp, "http://127.0.0.1:$wraw1/x");
    is($r->{status}, 200, 'v1 to a raw backend: 200');
    is(pack('H*', last_line("$dir/raw1")), "PROXY TCP4 127.0.0.3 127.0.0.1 $cp $wraw1\r\n",
       '... the first bytes are the v1 line: the client, and the address it connected to');
    $cp = free_port();
    $r = curl('--interface', '127.0.0.3', '--local-port', $cp, "http://127.0.0.1:$wraw2/x");
    is($r->{status}, 200, 'v2 to a raw backend: 200');
    is(last_line("$dir/raw2"),
       '0d0a0d0a000d0a515549540a' . '21' . '11' . '000c' . '7f000003' . '7f000001' . sprintf('%04x%04x', $cp, $wraw2),
       '... the first bytes are the v2 header: PROXY, TCP over IPv4, the client and the address it connected to');
    $r = curl("http://127.0.0.1:$woff/x");
    is($r->{status}, 200, 'off: 200');
    is(slurp("$dir/rawoff"), "\n", '... and nothing before the request');
}

# HAProxy reads what lookout sends.
for my $v ([ 'v1', $w1 ], [ 'v2', $w2 ]) {
    my ($name, $port) = @$v;
    my $cp = free_port();
    my $r = curl('--interface', '127.0.0.3', '--local-port', $cp, "http://127.0.0.1:$port/test/headers");
    is($r->{status}, 200, "$name through HAProxy accept-proxy: 200");
    is(seen($r)->{'x-src'}, "127.0.0.3:$cp", "$name: HAProxy names the client, port included");
    is(seen($r)->{'x-dst'}, "127.0.0.1:$port", "$name: ... and lookout's listener as the destination");
}

# An inbound PROXY header: the outbound one names the client behind the balancer.
{
    my $r = curl('--interface', '127.0.0.4', "http://127.0.0.1:$hf/test/headers");
    is($r->{status}, 200, 'through HAProxy send-proxy-v2 in front of lookout: 200');
    like(seen($r)->{'x-src'} // '', qr/^127\.0\.0\.4:\d+$/, '... the broker sees the client behind it, not 127.0.0.2');
    is(seen($r)->{'x-dst'}, "127.0.0.1:$hf", '... and the address that client connected to (the balancer\'s)');
}

# https: the header goes before the TLS handshake.
{
    my $r = curl('--interface', '127.0.0.5', "http://127.0.0.1:$wt/test/headers");
    is($r->{status}, 200, 'an https broker address: 200') or diag($lk->log);
    like(seen($r)->{'x-src'} // '', qr/^127\.0\.0\.5:\d+$/, '... HAProxy read the header before TLS');
    ok(wait_until(sub { slurp("$dir/haproxy.out") =~ m{PPHTTP src=127\.0\.0\.1:\d+ dst=127\.0\.0\.1:$hbs pp=1 GET /admin/v2/brokers/ready} }, 5),
       'health checks send a header too (v2 LOCAL: HAProxy keeps the connection\'s own address)')
        or diag(slurp("$dir/haproxy.out"));
    unlike($lk->log, qr/health check failed/, '... and pass');
}

# lookout --probe is lookout's own connection too: a LOCAL header, then its requests.
{
    my $r = run_lookout(dir => $dir, name => 'probe', args => [ '--probe', '-c', $lk->conf ], timeout => 30);
    like($r->{out}, qr{^\S+\s+tls/b1 https://127\.0\.0\.1:$hbs}m, 'lookout --probe asks the https broker')
        or diag($r->{out});
    ok(wait_until(sub { slurp("$dir/haproxy.out") =~ m{PPHTTP src=127\.0\.0\.1:\d+ dst=127\.0\.0\.1:$hbs pp=1 GET /admin/v2/clusters} }, 5),
       '... through a header HAProxy took') or diag(slurp("$dir/haproxy.out"));
}

# Two clients, interleaved on keep-alive connections: never one's pooled connection for the other.
{
    sub open_from { IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $_[1] // $w2, LocalAddr => $_[0], Timeout => 5) or die "connect: $@" }
    sub ask {
        my ($s) = @_;
        syswrite $s, "GET /test/headers HTTP/1.1\r\nHost: x\r\n\r\n";
        my ($buf, $end) = ('', time + 5);
        while (time < $end) {
            if ($buf =~ /\r\n\r\n/ && $buf =~ /Content-Length: (\d+)/i) {
                my $need = $1;
                my ($head, $body) = split /\r\n\r\n/, $buf, 2;
                if (length($body) >= $need) {
                    my %h = map { (lc $_->[0] => $_->[1]) } @{ (eval { decode_json($body) } // {})->{headers} // [] };
                    return $h{'x-src'} // '';
                }
            }
            last unless IO::Select->new($s)->can_read($end - time);
            sysread($s, my $b, 65536) or last;
            $buf .= $b;
        }
        return "no answer: $buf";
    }
    my ($a, $b, $a2) = (open_from('127.0.0.3'), open_from('127.0.0.6'), open_from('127.0.0.3'));
    my %me = map { ($_ => $_->sockhost . ':' . $_->sockport) } ($a, $b, $a2);
    my @order = ($a, $b, $a2, $a, $b, $a2, $a);
    my @got = map { ask($_) } @order;
    is_deeply(\@got, [ map { $me{$_} } @order ],
              'seven requests of three keep-alive clients, interleaved: each broker connection names its own client')
        or diag(explain(\@got));
    close $_ for ($a, $b, $a2);
}

# lookout's established connections to a broker port: their local ports, sorted.
sub up_ports { my ($port) = @_; join ' ', sort { $a <=> $b } map { /127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:$port\b/ ? ($1) : () } split /\n/, `ss -Htn state established '( dport = :$port )' 2>/dev/null` }
sub nports { my @p = split ' ', up_ports($_[0]); scalar @p }

# Clients that leave: the broker connections whose header names them go at once (they
# served no one else), not after timeout.idle (60 s).
{
    ok(wait_until(sub { nports($hb) == 0 }, 3), 'the clients above gone: none of their broker connections left open')
        or diag('still open: ', up_ports($hb));
    my $s = open_from('127.0.0.10');
    my $me = $s->sockhost . ':' . $s->sockport;
    is(ask($s), $me, 'a keep-alive client: its request names it');
    my $first = up_ports($hb);
    is(nports($hb), 1, '... one broker connection, kept for it');
    is(ask($s), $me, '... its second request names it too');
    is(up_ports($hb), $first, '... over the same broker connection');
    my $t0 = time;
    close $s;
    ok(wait_until(sub { nports($hb) == 0 }, 2), 'the client closes: its broker connection is closed too')
        or diag('still open: ', up_ports($hb));
    note(sprintf('closed after %.2f s', time - $t0));
}

# Off: a pooled connection is anyone's, and outlives the client that used it.
{
    my $s = open_from('127.0.0.11', $woffka);
    like(ask($s), qr/^127\.0\.0\.1:\d+$/, 'off: a keep-alive client, served (the broker sees lookout)');
    my $pooled = up_ports($hoff);
    like($pooled, qr/^\d+$/, '... over one broker connection');
    close $s;
    sleep 1;
    is(up_ports($hoff), $pooled, '... the client gone a second, its broker connection is still pooled');
    $s = open_from('127.0.0.12', $woffka);
    ask($s);
    is(up_ports($hoff), $pooled, '... and another client reuses it');
    close $s;
}

# A reload while a client keeps its broker connection: that one is of the old generation,
# freed once the client moves to the new one at its next request, which dials anew.  One
# more client keeps its connection until lookout stops (the drain frees it).
my $held = open_from('127.0.0.14');
{
    my $s = open_from('127.0.0.13');
    my $me = $s->sockhost . ':' . $s->sockport;
    is(ask($s), $me, 'a keep-alive client before a reload: served');
    is(ask($held), $held->sockhost . ':' . $held->sockport, '... and another, kept until lookout stops');
    my $before = up_ports($hb);
    like($lk->reload(slurp($lk->conf)), qr/^SIGHUP: reloaded/, 'reloaded while they keep their broker connections');
    is(ask($s), $me, '... the first one\'s next request is served');
    my @after = split ' ', up_ports($hb);
    my %was = map { ($_ => 1) } split ' ', $before;
    ok(keys(%was) == 2 && @after == 2 && (grep { $was{$_} } @after) == 1,
       '... over a new broker connection, its old one closed (the other client\'s still there)')
        or diag("before: $before, after: @after");
    close $s;
    ok(wait_until(sub { nports($hb) == 1 }, 2), '... and that one closed with it') or diag('open: ', up_ports($hb));
}

# A client that leaves (Connection: close): its broker connection, of no use to anyone
# else, is closed rather than pooled.
{
    my $est = sub { scalar grep { /\S/ } split /\n/, `ss -Htn state established '( dport = :$hb )' 2>/dev/null` };
    my $n0 = $est->();
    my $r = curl('-H', 'Connection: close', '--interface', '127.0.0.9', "http://127.0.0.1:$w2/test/headers");
    is($r->{status}, 200, 'a client asking Connection: close: 200');
    sleep 0.3;
    is($est->(), $n0, '... its broker connection is not left in the pool');
}

# Pulsar binary: CONNECT through lookout arrives with the client's address.
sub probe {
    my ($addr, @opts) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", $addr, @opts ], timeout => 30);
    return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $r->{out};
}
{
    my @r = probe("127.0.0.1:$bsvc", '--source', '127.0.0.7');
    my ($hello) = grep { ($_->{step} // '') eq 'connect' } @r;
    is(($hello->{received}[0]{type} // ''), 'CONNECTED', 'Pulsar binary through lookout: CONNECTED')
        or diag(explain(\@r), $lk->log);
    ok(wait_until(sub { slurp("$dir/haproxy.out") =~ /PPBIN src=127\.0\.0\.7:\d+ dst=127\.0\.0\.1:$bsvc/ }, 5),
       '... HAProxy read the client\'s address and lookout\'s service address from its header')
        or diag(slurp("$dir/haproxy.out"));
}

# Kafka: the bootstrap connection and a node's own both arrive with the client's address.
for my $to ([ 'bootstrap', $kboot ], [ 'node 1', $kext ]) {
    my ($name, $port) = @$to;
    my $r = KafkaMock::run([ $PY, "$BIN/kafka-probe", '--source', '127.0.0.8', "127.0.0.1:$port", 'ApiVersions:0' ], timeout => 30);
    my ($l) = map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $r->{out};
    ok($l && !$l->{closed} && defined $l->{response_hex}, "Kafka $name through lookout: ApiVersions answered")
        or diag($r->{out}, $r->{err});
    ok(wait_until(sub { slurp("$dir/haproxy.out") =~ /PPKAFKA src=127\.0\.0\.8:\d+ dst=127\.0\.0\.1:$port/ }, 5),
       "... HAProxy read the client's address from its header (v1)") or diag(slurp("$dir/haproxy.out"));
}

# Brokers that take no PROXY header get one.
{
    my $r = curl("http://127.0.0.1:$wbad/test/headers");
    is($r->{status}, 400, 'an HTTP broker without PROXY support: its own answer (400 to a request line "PROXY TCP4 ...")');
    ok($lk->wait_log(qr{"GET /test/headers" bad/b1 400 }, 3), '... in the access log') or diag($lk->log);
    my @r = probe("127.0.0.1:$bsvcbad");
    my ($hello) = grep { ($_->{step} // '') eq 'connect' } @r;
    ok(!$hello || !@{ $hello->{received} // [] } || $hello->{closed}, 'a binary broker without PROXY support: the client is closed')
        or diag(explain(\@r));
    ok($lk->wait_log(qr{broker binbad/b1 closed the connection; closing, client: 127\.0\.0\.1:\d+}, 3), '... logged')
        or diag($lk->log);
    my $ok = curl("http://127.0.0.1:$w2/test/headers");
    is($ok->{status}, 200, 'other clusters are still served');
}

ok($lk->alive, 'lookout still runs');
$lk->stop;
done_testing();
