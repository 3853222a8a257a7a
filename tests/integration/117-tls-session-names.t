#!/usr/bin/perl
# 117-tls-session-names.t: a client TLS session resumes only under the name (SNI) it was
# made for (issue 18, reuse keyed by what makes it safe).  Two brokers share one https
# socket of lookout, routed by SNI, under one certificate naming both.  A session made for
# b1.lookout.test, offered with SNI b2.lookout.test, must not resume: in TLS 1.2 OpenSSL
# would report the session's name (b1) and lookout would route by it (a correct request
# for b2 got 421); in TLS 1.3 the client would skip b2's certificate.  Under its own name
# a session still resumes, by ticket and by session id.  Client: openssl s_client.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;
use PulsarBroker;

need_tools('openssl');

my $dir = tmp_dir();
my $certs = test_certs();
my ($p1, $p2, $s, $s2) = free_ports(4);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ "127.0.0.1:$p1", "127.0.0.1:$p2" ]);

sub conf {
    my ($port, $extra) = @_;
    return <<"EOF";
[lookout]
workers = 1
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
$extra

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = @{[ $c->internal_listeners(1) ]},external:https://b1.lookout.test:$port

[broker prod/b2]
advertisedListeners = @{[ $c->internal_listeners(2) ]},external:https://b2.lookout.test:$port
EOF
}

# One request over openssl s_client: (status line, "Reused" or "New").
sub get {
    my ($port, $version, $sni, $sess_opt) = @_;
    my $req = "GET /test/headers HTTP/1.1\\r\\nHost: $sni\\r\\nConnection: close\\r\\n\\r\\n";
    my $out = qx{printf '$req' | timeout 15 openssl s_client $version -connect 127.0.0.1:$port -servername $sni -CAfile $certs->{edge_ca} $sess_opt -ign_eof 2>&1};
    my ($st) = $out =~ m{^HTTP/1\.1 (\d+)}m;
    my ($how) = $out =~ /^(Reused|New),/m;
    return ($st // 0, $how // '?');
}

for my $case ([ 'tickets (default)', $s, '' ], [ 'session cache only', $s2, "tls.session_tickets = off" ]) {
    my ($what, $port, $extra) = @$case;
    mkdir "$dir/$port";
    my $lk = start_lookout(dir => "$dir/$port", conf => conf($port, $extra));
    ok($lk->started, "$what: lookout started") or next;
    for my $v ('-tls1_2', '-tls1_3') {
        my $sess = "$dir/sess-$port$v";
        unlink $sess;
        $c->clear_log;
        my ($st, $how) = get($port, $v, 'b1.lookout.test', "-sess_out $sess");
        is("$st $how", '200 New', "$what, $v: a first handshake for b1");
        ($st, $how) = get($port, $v, 'b1.lookout.test', "-sess_in $sess");
        is("$st $how", '200 Reused', "$what, $v: b1's session resumes for b1");
        ($st, $how) = get($port, $v, 'b2.lookout.test', "-sess_in $sess");
        is("$st $how", '200 New', "$what, $v: offered for b2, it does not resume: a full handshake, then b2 answers");
        is(scalar($c->requests(1)), 2, "$what, $v: b1 got its two requests");
        is(scalar($c->requests(2)), 1, "$what, $v: b2 got the third");
    }
    unlike($lk->log, qr/\s421\s/, "$what: nothing answered 421");
    $lk->stop;
}

done_testing();
