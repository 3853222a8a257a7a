#!/usr/bin/perl
# 11-kafka-conf.t: Kafka clusters in the config (issue 8 item 1, CONTRACT §2 and §4).
# --check prints the Kafka map: per broker the node id, the internal address (TLS or
# not), the lookup address and the bound socket it is served on, and the bootstrap
# addresses with theirs; a broker may come from its ZooKeeper registration JSON; bad
# configs exit 1 with `file:line: message` (for a registration file, the file and what
# is wrong). `lookout -c` on a valid Kafka config starts and listens on every Kafka
# socket. No brokers are needed: --check only validates, and lookout connects to one only
# when a client comes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;

my $certs = test_certs();
my $dir = tmp_dir();
my ($b1, $b2, $bs, $i1, $i2, $tls) = free_ports(6);

# Plaintext: a port per broker and one for the bootstrap, all on 127.0.0.1.
my $plain = <<"EOF";
[lookout]
workers = 1

[kafka events]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$bs

[broker events/1]
advertised.listeners = INTERNAL://10.0.0.21:$i1,EXTERNAL://127.0.0.1:$b1

[broker events/2]
registration = 2.json
EOF
spew("$dir/2.json", <<"EOF");
{"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"PLAINTEXT"},
 "endpoints":["INTERNAL://10.0.0.22:$i2","EXTERNAL://127.0.0.1:$b2"],
 "jmx_port":-1,"host":"10.0.0.22","timestamp":"1764547200000","port":$i2,"version":4}
EOF

# TLS: the brokers and the bootstrap share one socket, told apart by SNI.
my $shared = <<"EOF";
[lookout]
workers = 1
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[kafka events]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:SSL,EXTERNAL:SASL_SSL
bootstrap.servers = kafka.lookout.test:$tls
broker.pattern = b\$(nodeId).lookout.test:$tls
bind = 127.0.0.1

[broker events/1]
advertised.listeners = INTERNAL://10.0.0.21:$i1,EXTERNAL://b1.lookout.test:$tls

[broker events/2]
advertised.listeners = INTERNAL://10.0.0.22:$i1,EXTERNAL://b2.lookout.test:$tls
EOF

# line_of(TEXT, REGEX): 1-based number of the first line of TEXT matching REGEX.
sub line_of {
    my ($text, $re) = @_;
    my @l = split /\n/, $text, -1;
    for my $i (0 .. $#l) { return $i + 1 if $l[$i] =~ $re }
    die "line_of: no line matches $re";
}

subtest '--check prints the Kafka map (plaintext, a registration)' => sub {
    my $r = run_lookout(conf => $plain, args => ['--check'], dir => $dir, name => 'plain', timeout => 5);
    is($r->{exit}, 0, 'exit 0') or diag($r->{out});
    my $out = $r->{out};
    like($out, qr/^cluster events \(kafka\): inter\.broker\.listener\.name 'INTERNAL', lookup listener 'EXTERNAL'/m,
         'the cluster, its listeners');
    like($out, qr/^  bootstrap 127\.0\.0\.1:$bs \(PLAINTEXT: plaintext\) on bind 127\.0\.0\.1:$bs$/m,
         'the bootstrap address and its socket');
    like($out, qr/^  broker events\/1: node 1$/m, 'node 1');
    like($out, qr/^    internal INTERNAL:\/\/10\.0\.0\.21:$i1 \(PLAINTEXT: plaintext to the broker\)$/m,
         '... its internal address, without TLS');
    like($out, qr/^    lookup   EXTERNAL:\/\/127\.0\.0\.1:$b1 \(PLAINTEXT: plaintext\) on bind 127\.0\.0\.1:$b1$/m,
         '... its external address and the socket it is served on');
    like($out, qr/^  broker events\/2: node 2, from \Q$dir\E\/2\.json$/m, 'node 2, from its registration');
    like($out, qr/^    lookup   EXTERNAL:\/\/127\.0\.0\.1:$b2 .* on bind 127\.0\.0\.1:$b2$/m, '... its socket');
    like($out, qr/^    map      node 2: 10\.0\.0\.22:$i2 -> 127\.0\.0\.1:$b2$/m, '... the map, on one line');
    like($out, qr/^bind 127\.0\.0\.1:$b1 kafka \(kafka\)\n  127\.0\.0\.1 -> broker events\/1 \(node 1\) at INTERNAL:\/\/10\.0\.0\.21:$i1$/m,
         'the bind routes to node 1');
    like($out, qr/^bind 127\.0\.0\.1:$bs kafka \(kafka\)\n  127\.0\.0\.1 -> cluster events bootstrap\.servers \(any broker\)$/m,
         'the bootstrap bind serves any broker');
    like($out, qr/is valid$/m, '... and the config is valid');
};

subtest '--check prints the Kafka map (SASL_SSL, shared by SNI, a pattern)' => sub {
    my $r = run_lookout(conf => $shared, args => ['--check'], dir => $dir, name => 'shared', timeout => 5);
    is($r->{exit}, 0, 'exit 0') or diag($r->{out});
    my $out = $r->{out};
    like($out, qr/^    internal INTERNAL:\/\/10\.0\.0\.21:$i1 \(SSL: TLS to the broker\)$/m,
         'an SSL internal listener: TLS to the broker');
    like($out, qr/^    lookup   EXTERNAL:\/\/b1\.lookout\.test:$tls \(SASL_SSL: lookout terminates TLS, SASL passes through\) on bind 127\.0\.0\.1:$tls$/m,
         'SASL_SSL: lookout terminates TLS, SASL passes through');
    like($out, qr/^  pattern   b\$\(nodeId\)\.lookout\.test:$tls .* on bind 127\.0\.0\.1:$tls$/m, 'the pattern');
    my ($bind) = $out =~ /^(bind 127\.0\.0\.1:$tls kafka\+ssl \(kafka\)\n(?:  .*\n)+)/m;
    ok($bind, 'one TLS bind') or diag($out);
    like($bind // '', qr/b1\.lookout\.test -> broker events\/1/, '... with b1');
    like($bind // '', qr/b2\.lookout\.test -> broker events\/2/, '... b2');
    like($bind // '', qr/kafka\.lookout\.test -> cluster events bootstrap\.servers/, '... the bootstrap');
    like($bind // '', qr/b\$\(nodeId\)\.lookout\.test -> cluster events broker\.pattern/, '... and the pattern');
};

subtest 'a Kafka config starts and listens' => sub {
    my $lk = start_lookout(dir => $dir, conf => $plain, name => 'run');
    ok($lk->started, 'starts, every Kafka socket open') or diag($lk->log);
    unlike($lk->log, qr/not served yet/, 'nothing left unserved');
    ok($lk->alive, 'stays up');
    $lk->stop;
};

subtest 'TLS without a certificate' => sub {
    (my $t = $shared) =~ s/^tls\.(?:certificate|key) = .*\n//mg;
    my $r = run_lookout(conf => $t, args => ['--check'], dir => $dir, name => 'nocert', timeout => 5);
    is($r->{exit}, 1, 'exit 1');
    like($r->{out}, qr/bind 127\.0\.0\.1:$tls terminates TLS but \[lookout\] has no tls\.certificate/,
         '... a SASL_SSL lookup listener needs a certificate');
};

# Each bad config: a description, the text, the regex of the line the error must name,
# and a regex the message must match.
my @bad;
{
    # PLAINTEXT brokers sharing a socket cannot be told apart.
    my $t = $plain;
    $t =~ s/^(listener\.security\.protocol\.map = .*)$/$1\nbind = 127.0.0.1/m;
    $t =~ s{EXTERNAL://127\.0\.0\.1:$b1}{EXTERNAL://b1.lookout.test:$b1}m;
    $t =~ s{^bootstrap\.servers = .*$}{bootstrap.servers = kafka.lookout.test:$b1}m;
    push @bad, [ 'plaintext broker and bootstrap on one socket', $t, qr/^bootstrap\.servers/,
                 qr/share plaintext bind 127\.0\.0\.1:$b1, and lookout cannot tell them apart/ ];
}
{
    my $t = $plain;
    $t =~ s/^\[broker events\/1\]$/[broker events\/b1]/m;
    push @bad, [ 'a node id that is not a number', $t, qr/^\[broker events\/b1\]/, qr/'b1' is not a node id/ ];
}
{
    my $t = $plain;
    $t =~ s{EXTERNAL://127\.0\.0\.1:$b1}{CLIENT://127.0.0.1:$b1}m;
    push @bad, [ 'a listener not in the protocol map', $t, qr/^advertised\.listeners/,
                 qr/listener 'CLIENT' is not in listener\.security\.protocol\.map/ ];
}
{
    my $t = $plain;
    $t =~ s{EXTERNAL://127\.0\.0\.1:$b1}{EXTERNAL://:$b1}m;
    push @bad, [ 'an empty advertised host', $t, qr/^advertised\.listeners/, qr/no host/ ];
}
{
    my $t = $plain;
    $t =~ s/^lookupListenerName = .*\n//m;
    push @bad, [ 'no lookupListenerName', $t, qr/^\[kafka events\]/, qr/lookupListenerName is missing/ ];
}
{
    my $t = $plain;
    $t =~ s/^(registration = 2\.json)$/$1\nadvertised.listeners = INTERNAL:\/\/10.0.0.22:$i2/m;
    push @bad, [ 'both advertised.listeners and registration', $t, qr/^advertised\.listeners = INTERNAL:\/\/10\.0\.0\.22/,
                 qr/either advertised\.listeners or registration/ ];
}
{
    my $t = $plain;
    $t =~ s/^registration = 2\.json$/registration = 3.json/m;
    spew("$dir/3.json", qq({"version":4,"endpoints":["INTERNAL://10.0.0.23:$i2","EXTERNAL: //127.0.0.1:$b2"],)
                        . qq("listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"PLAINTEXT"}}\n));
    push @bad, [ 'a malformed registration endpoint', $t, qr/^registration/,
                 qr/registration: 3\.json: endpoints\[1\]: 'EXTERNAL: \/\/127\.0\.0\.1:$b2' is not NAME:\/\/host:port/ ];
}
{
    my $t = $plain;
    $t =~ s/^registration = 2\.json$/registration = 4.json/m;
    spew("$dir/4.json", qq({"version":4,"endpoints":\n));
    push @bad, [ 'a registration that is not JSON', $t, qr/^registration/, qr/4\.json: not valid JSON: .*\(line \d+, column \d+\)/ ];
}
{
    my $t = $plain;
    $t =~ s/^registration = 2\.json$/registration = missing.json/m;
    push @bad, [ 'a missing registration', $t, qr/^registration/, qr/cannot read \Q$dir\E\/missing\.json: No such file/ ];
}
{
    my $t = $shared;
    $t =~ s/^broker\.pattern = .*$/broker.pattern = kafka.lookout.test:$tls/m;
    push @bad, [ 'a pattern without the node id', $t, qr/^broker\.pattern/, qr/holds no \$\(nodeId\)/ ];
}
{
    # A Kafka and an HTTP vhost on one socket.
    my $t = $shared . "\n[pulsar prod]\nwebServiceUrl = https://127.0.0.1:$tls\n[broker prod/b1]\nadvertisedListeners = internal:http://10.0.0.31:8080\n";
    push @bad, [ 'Kafka and HTTP on one socket', $t, qr/^webServiceUrl/, qr/cannot serve both kafka and http/ ];
}

for my $case (@bad) {
    my ($what, $text, $line_re, $msg_re) = @$case;
    subtest "bad config: $what" => sub {
        (my $name = $what) =~ s/\W+/-/g;
        my $r = run_lookout(conf => $text, args => ['--check'], dir => $dir, name => "bad-$name", timeout => 5);
        is($r->{exit}, 1, '--check exits 1');
        my $line = line_of($text, $line_re);
        like($r->{out}, qr/\Q$r->{conf}\E:$line: /, "file:line names line $line") or diag($r->{out});
        like($r->{out}, $msg_re, '... and the message says what is wrong') or diag($r->{out});
        is(scalar(() = $r->{out} =~ /\Q$r->{conf}\E:\d+:/g), 1, '... one error line');
        my $run = run_lookout(conf => $text, dir => $dir, name => "bad-run-$name", timeout => 5);
        is($run->{exit}, 1, 'lookout -c refuses to start (exit 1)');
    };
}

subtest 'the shipped conf/kafka.conf' => sub {
    # With the test certificates in place of its own, beside a copy of its registration.
    my $top = "$FindBin::Bin/../..";
    my $text = slurp("$top/conf/kafka.conf");
    $text =~ s/^tls\.certificate = .*$/tls.certificate = $certs->{edge_crt}/m;
    $text =~ s/^tls\.key = .*$/tls.key = $certs->{edge_key}/m;
    $text =~ s/^tls\.upstream_ca = .*$/tls.upstream_ca = $certs->{internal_ca}/m;
    mkdir "$dir/shipped";
    mkdir "$dir/shipped/kafka";
    spew("$dir/shipped/kafka/3.json", slurp("$top/conf/kafka/3.json"));
    my $r = run_lookout(conf => $text, args => ['--check'], dir => "$dir/shipped", name => 'kafka', timeout => 5);
    is($r->{exit}, 0, 'exit 0') or diag($r->{out});
    like($r->{out}, qr/^  broker events\/3: node 3, from .*\/kafka\/3\.json$/m, 'node 3 from its registration');
    like($r->{out}, qr/^  pattern   b\$\(nodeId\)\.kafka\.example\.com:9093 /m, 'the pattern');
};

done_testing();
