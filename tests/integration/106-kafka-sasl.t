#!/usr/bin/perl
# 106-kafka-sasl.t: SASL through lookout (issue 8, "Frontends": SASL frames pass through
# untouched), on a SASL_PLAINTEXT and a SASL_SSL lookup listener, against the test broker's
# SASL (bin/kafka-testbroker: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 behind SaslHandshake
# v0-1 and SaslAuthenticate v0-2, answered as Kafka's SaslServerAuthenticator does), with
# clients nobody here wrote:
#  - kcat (librdkafka 2.0.2) sends SaslHandshake v1, then its tokens in SaslAuthenticate;
#  - kafka-python 2.0.2 sends SaslHandshake v0, then its tokens bare (size-prefixed, no
#    Kafka header), which lookout must follow to know when Kafka frames start again.
# With good credentials both see only lookout's addresses and round-trip messages; with bad
# ones the broker's own answer reaches them (its error 58 and message, or its close), never
# a lookout error. A raw client checks that what the broker got is what the client sent and
# the other way round, byte for byte; and what lookout refuses after SaslHandshake v0.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;

plan skip_all => 'python3 not found' unless KafkaTestBroker::python();
$SIG{PIPE} = 'IGNORE';

my $certs = test_certs();
my $dir = tmp_dir();
my ($USER, $PASS) = ('alice', 'alice-secret');
my $TOPIC = 'sasl';
my $tb = KafkaTestBroker->start(dir => $dir, listen_nodes => 1, unknown_tags => 'none', # kcat 2.0.2
                                nodes => [ map { { id => $_, host => '127.0.0.1', port => 0 } } 1, 2 ],
                                topics => [ { name => $TOPIC, partitions => 2 } ],
                                sasl => { mechanisms => [qw(PLAIN SCRAM-SHA-256 SCRAM-SHA-512)],
                                          users => { $USER => $PASS } });
my @nodes = @{ $tb->nodes };

# Two clusters over the same brokers: one whose lookup listener is SASL_PLAINTEXT, one
# SASL_SSL (lookout terminates TLS; SASL runs inside it). lookout reaches the brokers over
# SASL_PLAINTEXT either way.
my (%port, %boot);
my $conf = <<"EOF";
[lookout]
workers = 1
log_level = debug
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

EOF
for my $c ([ 'plain', 'SASL_PLAINTEXT' ], [ 'tls', 'SASL_SSL' ]) {
    my ($name, $proto) = @$c;
    $boot{$name} = free_port();
    $port{$name}{ $_->{id} } = free_port() for @nodes;
    $conf .= "[kafka $name]\ninter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
           . "listener.security.protocol.map = INTERNAL:SASL_PLAINTEXT,EXTERNAL:$proto\n"
           . "bootstrap.servers = 127.0.0.1:$boot{$name}\n\n"
           . join '', map { "[broker $name/$_->{id}]\nadvertised.listeners = INTERNAL://$_->{listen},"
                            . "EXTERNAL://127.0.0.1:$port{$name}{ $_->{id} }\n\n" } @nodes;
}
my $lk = start_lookout(dir => $dir, conf => $conf);
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }
sub hex_of { return unpack('H*', $_[0]) }
# A request's or an answer's hex (as the broker logs them: no size) with its correlation id
# blanked: the broker gets lookout's own ids, the client gets its own back.
sub req_hex { my $h = hex_of($_[0]); substr($h, 8, 8) = 'x' x 8 if length $h >= 16; $h }
sub res_hex { my $h = hex_of($_[0]); substr($h, 0, 8) = 'x' x 8 if length $h >= 8; $h }
sub blank_req { my $h = $_[0] // ''; substr($h, 8, 8) = 'x' x 8 if length $h >= 16; $h }
sub blank_res { my $h = $_[0] // ''; substr($h, 0, 8) = 'x' x 8 if length $h >= 8; $h }

# The lookout addresses each node must be known by, through cluster NAME.
sub ext_of { my ($name) = @_; return { map { ($_ => "127.0.0.1:$port{$name}{$_}") } keys %{ $port{$name} } } }

# Whatever went wrong on lookout's side of a SASL exchange shows as one of these.
my $LOOKOUT_FAULT = qr/impossible size|no request has|shorter than its header|over max_frame_bytes/;

subtest 'kcat: SaslHandshake v1 and SaslAuthenticate' => sub {
    need_tools('kcat');
    for my $c ([ 'plain', 'SASL_PLAINTEXT', 'SCRAM-SHA-256' ], [ 'tls', 'SASL_SSL', 'SCRAM-SHA-512' ]) {
        my ($name, $proto, $scram) = @$c;
        my @kc = ('kcat', '-X', "security.protocol=$proto", '-X', "sasl.username=$USER", '-b', "127.0.0.1:$boot{$name}",
                  $proto eq 'SASL_SSL' ? ('-X', "ssl.ca.location=$certs->{edge_ca}") : ());
        for my $mech ('PLAIN', $scram) {
            my $r = KafkaMock::run([ @kc, '-X', "sasl.mechanisms=$mech", '-X', "sasl.password=$PASS", '-L', '-J', '-m', '10' ],
                                   timeout => 30);
            is($r->{exit}, 0, "$proto $mech: kcat -L") or diag($r->{err});
            my ($md) = json_lines($r->{out});
            is_deeply({ map { ($_->{id} => $_->{name}) } @{ $md->{brokers} // [] } }, ext_of($name),
                      '... lists only lookout addresses') or diag($r->{out});
        }
        my @auth = ('-X', "sasl.mechanisms=$scram", '-X', "sasl.password=$PASS");
        my @msgs = map { sprintf 'k%03d:%s message %03d', $_, $name, $_ } 1 .. 200;
        my $r = KafkaMock::run([ @kc, @auth, '-P', '-t', $TOPIC, '-K', ':' ], in => join("\n", @msgs) . "\n", timeout => 30);
        is($r->{exit}, 0, "$proto $scram: kcat produced 200 keyed messages") or diag($r->{err});
        # -o 0, not "beginning": the test broker has no ListOffsets
        $r = KafkaMock::run([ @kc, @auth, '-C', '-t', $TOPIC, '-o', '0', '-e', '-q', '-f', '%p %k:%s\n' ],
                            timeout => 30);
        my @got = grep { $_->[1] =~ /:$name message / } map { /^(\d+) (.*)$/ ? [ $1, $2 ] : () } split /\n/, $r->{out};
        is_deeply([ sort map { $_->[1] } @got ], [ sort @msgs ], '... and consumed them back') or diag($r->{err});
        is_deeply([ sort keys %{ { map { ($_->[0] => 1) } @got } } ], [ 0, 1 ], '... from both partitions (both brokers)');
    }

    # A wrong password: the broker answers SaslAuthenticate with error 58 and closes; kcat
    # shows the broker's own message.
    my $r = KafkaMock::run([ 'kcat', '-X', 'security.protocol=SASL_PLAINTEXT', '-X', 'sasl.mechanisms=PLAIN',
                             '-X', "sasl.username=$USER", '-X', 'sasl.password=wrong', '-b', "127.0.0.1:$boot{plain}",
                             '-L', '-m', '2' ], timeout => 30);
    isnt($r->{exit}, 0, 'a wrong password: kcat fails');
    like($r->{err}, qr/SASL authentication error: Authentication failed: Invalid username or password/,
         "... with the broker's own message") or diag($r->{err});
    my ($sent) = grep { ($_->{api} // '') eq 'SaslAuthenticate' && ($_->{client_id} // '') eq 'rdkafka'
                        && ($_->{close_after} // '') } $tb->requests;
    like($sent->{request_hex} // '', qr/\Q@{[ hex_of("\0$USER\0wrong") ]}\E$/, "... the broker got librdkafka's token as it is");
    unlike($lk->log, $LOOKOUT_FAULT, 'lookout found nothing wrong with any frame');
};

subtest 'kafka-python: SaslHandshake v0 and bare tokens' => sub {
    plan skip_all => 'no /usr/bin/python3 with kafka-python (apt-get install python3-kafka)'
        unless -x '/usr/bin/python3' && system('/usr/bin/python3', '-c', 'import kafka') == 0;
    my $check = sub {
        my ($name, $proto, $mech, $pass, @more) = @_;
        my @sec = ('--security-protocol', $proto, '--sasl-mechanism', $mech, '--sasl-user', $USER, '--sasl-password', $pass,
                   $proto eq 'SASL_SSL' ? ('--cafile', $certs->{edge_ca}) : ());
        my $r = KafkaMock::run([ '/usr/bin/python3', "$FindBin::Bin/bin/kafka-python-check", "127.0.0.1:$boot{$name}",
                                 @sec, @more ], timeout => 60);
        my ($j) = json_lines($r->{out});
        return ($j, $r);
    };
    for my $mech (qw(PLAIN SCRAM-SHA-256 SCRAM-SHA-512)) {
        my ($j, $r) = $check->('plain', 'SASL_PLAINTEXT', $mech, $PASS, '--auth');
        ok($j && $j->{auth}{connected}, "SASL_PLAINTEXT $mech: authenticated") or diag($r->{out} . $r->{err});
    }
    my @bare = grep { $_->{bare_token} } $tb->requests;
    ok((grep { $_->{request_hex} eq hex_of("$USER\0$USER\0$PASS") && $_->{answer} eq 'ok' && $_->{response_hex} eq '' } @bare),
       "the broker got kafka-python's PLAIN token as it is, and answered it (an empty token)");
    is(scalar(grep { $_->{request_hex} =~ /^\Q@{[ hex_of('n,,n=alice,r=') ]}\E/ } @bare), 2,
       '... and both SCRAM client-first tokens');

    my $closes = sub { my $n = () = $lk->log =~ /broker plain\/\d+ closed the connection; closing/g; $n };
    for my $mech (qw(PLAIN SCRAM-SHA-256)) {
        my $before = $closes->();
        my ($j, $r) = $check->('plain', 'SASL_PLAINTEXT', $mech, 'wrong', '--auth');
        ok($j && !$j->{auth}{connected}, "SASL_PLAINTEXT $mech, a wrong password: refused") or diag($r->{out} . $r->{err});
        my ($last) = reverse grep { $_->{bare_token} } $tb->requests;
        is($last->{answer}, 'close', '... by the broker, which closed') or diag(explain($last));
        ok(wait_until(sub { $closes->() > $before }, 5), "... and lookout passed the broker's close on");
    }
    unlike($lk->log, $LOOKOUT_FAULT, 'lookout found nothing wrong with any frame');

    my ($j, $r) = $check->('tls', 'SASL_SSL', 'SCRAM-SHA-512', $PASS, '--roundtrip', 100, '--topic', $TOPIC,
                           '--partitions', 2);
    my $rt = $j && $j->{roundtrip};
    ok($rt, 'SASL_SSL SCRAM-SHA-512: kafka-python ran its round trip') or return diag($r->{out} . $r->{err});
    my @got = grep { $_->[1] =~ /^kafka-python-roundtrip-/ } @{ $rt->{got} };
    is_deeply([ sort map { "@$_" } @got ], [ sort map { "@$_" } @{ $rt->{sent} } ], '... 100 messages back');
    is_deeply({ map { ($_->[0] => "$_->[1]:$_->[2]") } @{ $rt->{brokers} } }, ext_of('tls'),
              '... knowing only lookout addresses, by node id');
};

# ---- a raw client: the bytes on both sides --------------------------------------------------

# A request with header v1 (client id CLIENT) or v2 (a flexible version: no header tags).
sub request {
    my ($key, $ver, $corr, $client, $body, $v2) = @_;
    return pack('nnN n/a*', $key, $ver, $corr, $client) . ($v2 ? "\0" : '') . $body;
}

sub connect_raw {
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $boot{plain}, Proto => 'tcp', Timeout => 5);
}

# The broker's log entries of the connection whose first SASL request came from CLIENT: its
# SaslHandshake/SaslAuthenticate entries and the bare tokens on the same peer address.
sub broker_saw {
    my ($client) = @_;
    my @all = $tb->requests;
    my ($first) = grep { ($_->{client_id} // '') eq $client } @all or return ();
    return grep { ($_->{peer} // '') eq $first->{peer} && ($_->{request_hex} // '') ne '' } @all;
}

subtest 'raw client: SaslHandshake v1, SaslAuthenticate v2 with a wrong password' => sub {
    my $s = connect_raw() or return fail("connect: $@");
    my $cport = $s->sockport;
    my @req = (request(17, 1, 1, 'raw-v1', pack('n/a*', 'PLAIN')),
               request(36, 2, 2, 'raw-v1', chr(length("\0$USER\0wrong") + 1) . "\0$USER\0wrong" . "\0", 1));
    my @got;
    for my $q (@req) {
        syswrite $s, KafkaMock::frame($q);
        push @got, scalar KafkaMock::read_frame($s, 5);
    }
    my (undef, $how) = KafkaMock::read_frame($s, 5);
    is($how, 'eof', 'closed after the answer');
    my @saw = broker_saw('raw-v1');
    is_deeply([ map { blank_req($_->{request_hex}) } @saw ], [ map { req_hex($_) } @req ],
              'the broker got both requests as sent (but for the correlation ids)');
    is_deeply([ map { blank_res($_->{response_hex}) } @saw ], [ map { res_hex($_ // '') } @got ],
              'the client got both answers as the broker sent them (but for the correlation ids)');
    is_deeply([ map { unpack('N', $_ // '') } @got ], [ 1, 2 ], '... with its own correlation ids');
    my ($corr, $tags, $err, $mlen) = unpack('N C n C', $got[1] // '');
    is($err, 58, "... SaslAuthenticate's error 58 (SASL_AUTHENTICATION_FAILED)");
    like($got[1] // '', qr/Authentication failed: Invalid username or password/, '... and its message');
    ok($lk->wait_log(qr/broker plain\/\d+ closed the connection; closing, client: 127\.0\.0\.1:$cport\b/, 5),
       'lookout closed because the broker did');
};

subtest 'raw client: SaslHandshake v0, a bare token, then Kafka frames again' => sub {
    my $s = connect_raw() or return fail("connect: $@");
    my $hs = request(17, 0, 1, 'raw-v0', pack('n/a*', 'PLAIN'));
    my $token = "\0$USER\0$PASS";
    my $md = request(3, 1, 3, 'raw-v0', pack('N', 0xffffffff));   # Metadata v1, all topics
    # the handshake in two pieces: lookout reads it whole before it goes on
    my $f = KafkaMock::frame($hs);
    syswrite $s, substr($f, 0, 15);
    select(undef, undef, undef, 0.2);
    syswrite $s, substr($f, 15);
    my $r1 = KafkaMock::read_frame($s, 5);
    is(defined $r1 ? unpack('x4 n', $r1) : 'none', 0, 'the broker took PLAIN');
    syswrite $s, KafkaMock::frame($token);
    my ($r2, $how) = KafkaMock::read_frame($s, 5);
    is($how, 'frame', '... answered the bare token');
    is($r2, '', '... with an empty one (authenticated)');
    syswrite $s, KafkaMock::frame($md);
    my $r3 = KafkaMock::read_frame($s, 5) // '';
    is(unpack('N', $r3), 3, 'Metadata after it: answered, correlation id 3');
    for my $n (@nodes) {
        ok(index($r3, pack('n/a* N', '127.0.0.1', $port{plain}{ $n->{id} })) >= 0, "... node $n->{id} at its lookout address");
        ok(index($r3, pack('N n/a* N', $n->{id}, '127.0.0.1', $n->{port})) < 0, '... not at its own');
    }
    my @saw = broker_saw('raw-v0');
    is_deeply([ blank_req($saw[0]{request_hex}), map { $_->{request_hex} } @saw[1 .. $#saw] ], [ req_hex($hs), hex_of($token) ],
              'the broker got the handshake (but for its correlation id) and the token as sent');
    is_deeply([ blank_res($saw[0]{response_hex}), map { $_->{response_hex} } @saw[1 .. $#saw] ], [ res_hex($r1), '' ],
              '... and the client its answers as sent');
    is(unpack('N', $r1 // ''), 1, "... the handshake's answer with the client's correlation id");
    close $s;
};

subtest 'raw client: what lookout refuses after SaslHandshake v0' => sub {
    # GSSAPI's rounds depend on Kerberos: lookout cannot tell where its bare tokens end.
    my $s = connect_raw() or return fail("connect: $@");
    syswrite $s, KafkaMock::frame(request(17, 0, 1, 'raw-gssapi', pack('n/a*', 'GSSAPI')));
    my (undef, $how) = KafkaMock::read_frame($s, 5);
    like($how, qr/^(?:eof|error)$/, 'GSSAPI over SaslHandshake v0: closed');
    ok($lk->wait_log(qr/SaslHandshake v0 for mechanism 'GSSAPI', whose bare tokens lookout cannot follow/, 5),
       '... saying why');
    ok(!(grep { ($_->{client_id} // '') eq 'raw-gssapi' } $tb->requests), '... and the broker never saw it');

    # A token sent before the handshake's answer came back.
    $s = connect_raw() or return fail("connect: $@");
    syswrite $s, KafkaMock::frame(request(17, 0, 1, 'raw-eager', pack('n/a*', 'PLAIN'))) . KafkaMock::frame("\0$USER\0$PASS");
    1 while defined KafkaMock::read_frame($s, 5);
    ok($lk->wait_log(qr/client sent more while its SASL exchange \(after SaslHandshake v0\) was waiting for the broker; closing/, 5),
       'a token sent before the handshake was answered: closed, saying why');
    close $s;

    # A bare token the client cuts short: 10 of its 100 bytes, then it goes.
    $s = connect_raw() or return fail("connect: $@");
    syswrite $s, KafkaMock::frame(request(17, 0, 1, 'raw-cut', pack('n/a*', 'PLAIN')));
    my $r = KafkaMock::read_frame($s, 5);
    is(defined $r ? unpack('x4 n', $r) : 'none', 0, 'the broker took PLAIN');
    syswrite $s, substr(KafkaMock::frame('t' x 100), 0, 14);
    select(undef, undef, undef, 0.2);
    my $cport = $s->sockport;
    close $s;
    ok($lk->wait_log(qr/client closed the connection 90 bytes short of the end of a SASL token of 100 bytes, client: 127\.0\.0\.1:$cport\b/, 5),
       'a bare token cut short: logged, with how far it got');
    ok($lk->alive, 'lookout still running');
};

$lk->stop;
$tb->stop;
done_testing();
