#!/usr/bin/perl
# 104-kafka-tls.t: Kafka frontends over TLS (issue 8, "Frontends"), end to end with kcat
# (librdkafka) against librdkafka's mock cluster.
#  - SNI: three brokers' SSL lookup listeners (b1..b3.lookout.test) and the bootstrap
#    address share one port. kcat, given those names through a private /etc/hosts
#    (hosts_argv), sees only them, and a 1,000-message round trip over every partition
#    leader matches; lookout's log shows each connection reached the broker its SNI names.
#    An SNI no broker has, or none at all, is refused and logged; other clients go on.
#  - TLS to the broker: the internal listener is SSL. stunnel4 (Debian's, code nobody here
#    wrote) terminates TLS in front of each mock broker with a certificate from the
#    internal CA; lookout verifies it (tls.upstream_ca) and kcat round-trips through both
#    TLS legs. A broker whose certificate fails verification gets a logged TLS error and a
#    clean close of that client's connection only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::SSL;
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;
use Stunnel;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('kcat');
$SIG{PIPE} = 'IGNORE';

my $certs = test_certs();
my $dir = tmp_dir();
my $m = KafkaMock->start(brokers => 3, topics => [ 'sni:3', 'tls:3' ], dir => $dir);
my @mb = @{ $m->brokers };

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

# An ApiVersions v0 request (header v1, client id "probe"), correlation id CORR.
sub api_versions_v0 { return KafkaMock::frame(pack('nnN n/a*', 18, 0, $_[0], 'probe')) }

# tls_client(PORT, SNI): a TLS connection to lookout on 127.0.0.1:PORT, verified against the
# edge CA for that name; SNI undef sends none (and verifies the IP).
sub tls_client {
    my ($port, $sni) = @_;
    return IO::Socket::SSL->new(PeerHost => '127.0.0.1', PeerPort => $port, Timeout => 5,
                                SSL_ca_file => $certs->{edge_ca},
                                SSL_hostname => $sni // '', SSL_verifycn_name => $sni // '127.0.0.1',
                                SSL_verifycn_scheme => 'http');
}

subtest 'SSL lookup listeners sharing one port, routed by SNI' => sub {
    my $P = free_port();
    my %name = map { ($_->{id} => "b$_->{id}.lookout.test") } @mb;
    my ($prefix, $why) = hosts_argv($dir, { map { ($_ => '127.0.0.1') } values(%name), 'kafka.lookout.test',
                                            'nobody.lookout.test' });
    plan skip_all => $why unless $prefix;
    my $lk = start_lookout(dir => $dir, name => 'sni', conf => <<"EOF" . join '', map {
[lookout]
workers = 1
log_level = debug
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:SSL
bootstrap.servers = kafka.lookout.test:$P
bind = 127.0.0.1

EOF
        "[broker k/$_->{id}]\nadvertised.listeners = INTERNAL://$_->{host}:$_->{port},EXTERNAL://$name{$_->{id}}:$P\n\n"
    } @mb);
    ok($lk->started, 'lookout started, one socket for three brokers and the bootstrap address')
        or return diag($lk->log);
    my @kc = (@$prefix, 'kcat', '-X', 'security.protocol=SSL', '-X', "ssl.ca.location=$certs->{edge_ca}",
              '-b', "kafka.lookout.test:$P");

    my $r = KafkaMock::run([ @kc, '-L', '-J', '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L over TLS, by name') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    is_deeply({ map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] } },
              { map { ($_ => "$name{$_}:$P") } keys %name }, 'each node id at its name on the shared port')
        or diag($r->{out});

    # Partition p is led by broker p % 3 + 1, and the mock answers NOT_LEADER to a broker
    # that does not lead: every partition getting its messages back means each SNI name
    # reached its own broker.
    my $n = 1000;
    my @msgs = map { sprintf 'k%04d:sni message %04d %s', $_, $_, 'x' x 64 } 1 .. $n;
    $r = KafkaMock::run([ @kc, '-P', '-t', 'sni', '-K', ':' ], in => join("\n", @msgs) . "\n", timeout => 60);
    is($r->{exit}, 0, "kcat produced $n keyed messages") or diag($r->{err});
    $r = KafkaMock::run([ @kc, '-C', '-t', 'sni', '-o', 'beginning', '-e', '-q', '-f', '%p %k:%s\n' ],
                        timeout => 60);
    is($r->{exit}, 0, 'kcat consumed every partition') or diag($r->{err});
    my %by_part;
    for (split /\n/, $r->{out}) {
        my ($p, $msg) = /^(\d+) (.*)$/ or next;
        push @{ $by_part{$p} }, $msg;
    }
    is_deeply([ sort map { @$_ } values %by_part ], [ sort @msgs ], "the $n messages came back");
    is_deeply([ sort keys %by_part ], [ 0, 1, 2 ], '... from all three partitions (all three leaders)');
    ok(!(grep { my $l = $_; join("\n", @$l) ne join("\n", sort @$l) } values %by_part),
       '... each partition in the order produced');

    # lookout's debug line per connection: "to broker k/N at HOST:PORT, client: ..., sni: NAME"
    my (%sni_to, @boot);
    for ($lk->log =~ /^.*\bto broker .*$/mg) {
        my ($to) = /to broker (k\/\d+ at [^\s,]+)/ or next;
        my ($sni) = /sni: ([^\s,]+)/;
        if (($sni // '') eq 'kafka.lookout.test') { push @boot, $to } else { $sni_to{ $sni // '' }{$to}++ }
    }
    is_deeply({ map { ($_ => [ sort keys %{ $sni_to{$_} } ]) } keys %sni_to },
              { map { ($name{ $_->{id} } => ["k/$_->{id} at $_->{host}:$_->{port}"]) } @mb },
              "lookout's log: each SNI name went to its own broker's internal address")
        or diag(explain(\%sni_to));
    ok(@boot, 'bootstrap connections (SNI kafka.lookout.test) went to any broker: ' . join(', ', sort @boot));

    # A connection open on broker 1 before and after the refused ones still answers.
    my $good = tls_client($P, $name{1}) or return fail('TLS to b1: ' . IO::Socket::SSL::errstr());
    for my $case ([ 'an SNI no broker has', 'nobody.lookout.test', qr/no Kafka broker on this address for that SNI name; closing.*sni: nobody\.lookout\.test/ ],
                  [ 'no SNI at all', undef, qr/no Kafka broker on this address without SNI; closing/ ]) {
        my ($what, $sni, $log) = @$case;
        my $bad = tls_client($P, $sni) or return fail("TLS handshake with $what: " . IO::Socket::SSL::errstr());
        syswrite $bad, api_versions_v0(7);
        # lookout closes at once, maybe before it reads the request: a reset then is fine
        my ($frame, $how) = KafkaMock::read_frame($bad, 5);
        like($how, qr/^(?:eof|error)$/, "$what: closed without an answer ($how)");
        ok($lk->wait_log($log, 5), "... and logged");
        close $bad;
    }
    syswrite $good, api_versions_v0(42);
    my $frame = KafkaMock::read_frame($good, 5);
    is(defined $frame ? unpack('N', $frame) : 'nothing', 42, 'the connection to b1 opened before still answers');
    close $good;
    $r = KafkaMock::run([ @kc, '-L', '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'and new clients are served') or diag($r->{err});
    ok($lk->alive, 'lookout still running');
    $lk->stop;
};

subtest 'TLS to the brokers (internal listener SSL), verified' => sub {
    plan skip_all => Stunnel::missing() if Stunnel::missing();
    # stunnel terminates TLS in front of each mock broker: lookout connects to stunnel, the
    # broker's INTERNAL address. The mock still advertises its own 127.0.0.1:port in
    # Metadata, an address lookout has in no map; that is fine, as lookout rewrites by node
    # id: each [broker k/N] must carry the mock's node id N, with stunnel's address for N.
    my %t = map { ($_->{id} => free_port()) } @mb;
    my %e = map { ($_->{id} => free_port()) } @mb;
    my ($boot, $bad_t, $bad_e) = (free_port(), free_port(), free_port());
    my $st = Stunnel->start(dir => $dir, services => [
        (map { { name => "b$_->{id}", accept => "127.0.0.1:$t{ $_->{id} }", connect => "$_->{host}:$_->{port}",
                 cert => $certs->{broker_crt}, key => $certs->{broker_key} } } @mb),
        # a broker whose certificate lookout must refuse: signed by the edge CA, not the internal one
        { name => 'bad', accept => "127.0.0.1:$bad_t", connect => "$mb[0]{host}:$mb[0]{port}",
          cert => $certs->{edge_crt}, key => $certs->{edge_key} } ]);
    my $lk = start_lookout(dir => $dir, name => 'upstream-tls', conf => <<"EOF" . join '', map {
[lookout]
workers = 1
log_level = debug
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
tls.upstream_ca = $certs->{internal_ca}

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:SSL,EXTERNAL:SSL
bootstrap.servers = 127.0.0.1:$boot

[kafka bad]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:SSL,EXTERNAL:SSL

[broker bad/1]
advertised.listeners = INTERNAL://127.0.0.1:$bad_t,EXTERNAL://127.0.0.1:$bad_e

EOF
        "[broker k/$_->{id}]\nadvertised.listeners = INTERNAL://127.0.0.1:$t{ $_->{id} },EXTERNAL://127.0.0.1:$e{ $_->{id} }\n\n"
    } @mb);
    ok($lk->started, 'lookout started') or return diag($lk->log);
    my $chk = run_lookout(args => [ '--check', '-c', $lk->conf ]);
    my $t1 = $t{1};
    like($chk->{out}, qr/internal INTERNAL:\/\/127\.0\.0\.1:$t1 \(SSL: TLS to the broker/,
         '--check: TLS to the broker') or diag($chk->{out});
    my @kc = ('kcat', '-X', 'security.protocol=SSL', '-X', "ssl.ca.location=$certs->{edge_ca}", '-b', "127.0.0.1:$boot");

    my $r = KafkaMock::run([ @kc, '-L', '-J', '-m', '10' ], timeout => 30);
    is($r->{exit}, 0, 'kcat -L over both TLS legs') or diag($r->{err});
    my ($md) = json_lines($r->{out});
    is_deeply({ map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] } },
              { map { ($_ => "127.0.0.1:$e{$_}") } keys %e }, 'each node id at its lookup address, by node id')
        or diag($r->{out});
    my @msgs = map { sprintf 'k%03d:tls message %03d', $_, $_ } 1 .. 300;
    $r = KafkaMock::run([ @kc, '-P', '-t', 'tls', '-K', ':' ], in => join("\n", @msgs) . "\n", timeout => 60);
    is($r->{exit}, 0, 'kcat produced 300 keyed messages') or diag($r->{err});
    $r = KafkaMock::run([ @kc, '-C', '-t', 'tls', '-o', 'beginning', '-e', '-q', '-f', '%p %k:%s\n' ], timeout => 60);
    my @got = map { /^(\d+) (.*)$/ ? [ $1, $2 ] : () } split /\n/, $r->{out};
    is_deeply([ sort map { $_->[1] } @got ], [ sort @msgs ], '... and consumed them back') or diag($r->{err});
    is_deeply([ sort { $a <=> $b } keys %{ { map { ($_->[0] => 1) } @got } } ], [ 0, 1, 2 ],
              '... from all three partition leaders');
    is_deeply([ map { $st->forwarded("b$_->{id}") > 0 ? 1 : 0 } @mb ], [ 1, 1, 1 ],
              'each broker was reached over TLS, through its terminator');

    # The bad broker: a client's connection gets a clean close, logged with the TLS reason;
    # a client already on cluster k is not disturbed.
    my $good = tls_client($e{1}) or return fail('TLS to lookout: ' . IO::Socket::SSL::errstr());
    syswrite $good, api_versions_v0(1);
    is(unpack('N', KafkaMock::read_frame($good, 5) // "\xff\xff\xff\xff"), 1, 'a client on broker k/1 is answered');
    my $bad = tls_client($bad_e) or return fail('TLS to lookout: ' . IO::Socket::SSL::errstr());
    syswrite $bad, api_versions_v0(2);
    my ($frame, $how) = KafkaMock::read_frame($bad, 10);
    is($how, 'eof', 'a client of the broker with a bad certificate: closed, no answer');
    like($lk->log, qr/broker bad\/1 at INTERNAL:\/\/127\.0\.0\.1:$bad_t: [^\n]*certificate verify failed/,
         'lookout logged the verify failure') or diag($lk->log);
    like($lk->log, qr/broker bad\/1 unreachable: [^\n]*; closing, client: 127\.0\.0\.1:\d+, server: 127\.0\.0\.1:$bad_e/,
         '... and the client it closed');
    ok(wait_until(sub { $st->log =~ /alert unknown ca/ }, 5), 'stunnel saw lookout abort the handshake (unknown CA)')
        or diag($st->log);
    syswrite $good, api_versions_v0(3);
    is(unpack('N', KafkaMock::read_frame($good, 5) // "\xff\xff\xff\xff"), 3, 'the other client is still answered');
    close $good;
    close $bad;
    ok($lk->alive, 'lookout still running');
    $lk->stop;
    $st->stop;
};

$m->stop;
done_testing();
