#!/usr/bin/perl
# 130-client-certs.t: client certificates at the edge (issue 21 item 3). tls.verify_client
# and tls.client_ca in [lookout] and per cluster, SNI choosing the cluster: a good
# certificate passes; none, where one is required, fails the handshake with TLS 1.3's
# certificate_required alert (116); one from another CA, an expired one and a revoked one
# (tls.client_crl) fail with their alerts, each logged with the subject and the reason;
# optional lets a client without one through; a cluster with verification off is not
# asked; and SIGHUP reads the CRL again.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;

need_tools('openssl');

my $certs = test_certs();
my $dir = tmp_dir();
my ($s, $b1, $b2, $b3, $adm) = free_ports(5);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ "127.0.0.1:$b1", "127.0.0.1:$b2", "127.0.0.1:$b3" ]);

# The CRL starts revoking nothing: a reload with the real one revokes client-revoked.
my $crl = "$dir/clients.crl";
copy($certs->{client_none_crl}, $crl) or die "copy: $!";

# One https socket, three clusters by name: prod requires a certificate ([lookout]'s
# setting), opt asks for one, open does not.
my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
admin = 127.0.0.1:$adm
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
tls.verify_client = on
tls.client_ca = $certs->{client_ca}
tls.client_crl = $crl
timeout.connect = 2s
log.access = $dir/access.log

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = https://prod.lookout.test:$s
bind = 127.0.0.1
forwarded_client_cert = on

[broker prod/b1]
advertisedListeners = @{[ $c->internal_listeners(1) ]},external:https://b1.lookout.test:$s

[pulsar opt]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = https://opt.lookout.test:$s
bind = 127.0.0.1
tls.verify_client = optional

[broker opt/b2]
advertisedListeners = @{[ $c->internal_listeners(2) ]},external:https://b2.lookout.test:$s

[pulsar open]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = https://open.lookout.test:$s
bind = 127.0.0.1
tls.verify_client = off
forwarded_client_cert = on
forwarded_headers = off

[broker open/b3]
advertisedListeners = @{[ $c->internal_listeners(3) ]},external:https://b3.lookout.test:$s
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

my @resolve = map { ('--resolve', "$_.lookout.test:$s:127.0.0.1") } qw(prod opt open);

# get(NAME, CERT, CURL_ARGS...): curl https://NAME.lookout.test/test/headers with client
# certificate CERT (a test_certs prefix: client, client_other...) or none.
sub get {
    my ($name, $cert, @args) = @_;
    my @cert = $cert ? ('--cert', $certs->{"${cert}_crt"}, '--key', $certs->{"${cert}_key"}) : ();
    return curl('--cacert', $certs->{edge_ca}, @resolve, @cert, @args, "https://$name.lookout.test:$s/test/headers");
}

# xfcc(NAME, CERT, CURL_ARGS...): the X-Forwarded-Client-Cert fields the broker got.
sub xfcc {
    my $r = get(@_);
    return [ 'status ' . $r->{status} ] unless $r->{status} == 200;
    return [ map { $_->[1] } grep { lc $_->[0] eq 'x-forwarded-client-cert' } @{ decode_json($r->{body})->{headers} } ];
}

# s_client(NAME, CERT, ARGS...): openssl s_client with SNI NAME.lookout.test, waiting a
# second for what the server says after the client's Finished (TLS 1.3 sends the alert
# then). Returns its output.
sub s_client {
    my ($name, $cert, @args) = @_;
    my $cert_args = $cert ? "-cert $certs->{\"${cert}_crt\"} -key $certs->{\"${cert}_key\"}" : '';
    return scalar qx{sleep 1 | timeout 8 openssl s_client -connect 127.0.0.1:$s -servername $name.lookout.test -CAfile $certs->{edge_ca} $cert_args @args 2>&1};
}

# refused(NAME, CERT, ALERT, LOG, WHAT): the handshake fails with ALERT (s_client's
# text and number) and lookout logs LOG for it; both count in
# lookout_client_cert_refused_total.
my $refused_key = "lookout_client_cert_refused_total{frontend=\"127.0.0.1:$s\"}";
sub refused {
    my ($name, $cert, $alert, $log, $what) = @_;
    my $from = length($lk->log // '');
    my $n0 = Lookout::metrics_map($adm)->{$refused_key} // -1;
    my $r = get($name, $cert);
    isnt($r->{status}, 200, "$what: curl gets no answer") or diag(explain($r));
    my $out = s_client($name, $cert);
    like($out, $alert, "$what: s_client gets the alert") or diag($out);
    ok(wait_until(sub { substr($lk->log // "", $from) =~ $log }, 5) == 1, "$what: logged with the reason")
        or diag(substr($lk->log // "", $from));
    is((Lookout::metrics_map($adm)->{$refused_key} // -1) - $n0, 2, "$what: $refused_key +2");
}

subtest 'a good certificate passes' => sub {
    my $r = get('prod', 'client');
    is($r->{status}, 200, 'prod: 200 with the client certificate') or diag(explain($r));
    like(s_client('prod', 'client'), qr/Verify return code: 0/, 's_client -cert: handshake done');
    ok(wait_until(sub { (slurp("$dir/access.log") // '') =~ m{"GET /test/headers" prod/b1 200 .*, client certificate "CN=client alice,O=lookout tests"\n} }, 5) == 1,
       'the access log names the verified subject') or diag(slurp("$dir/access.log"));
    is(Lookout::metrics_map($adm)->{$refused_key}, 0, "$refused_key: 0 after good certificates");
};

subtest 'required and missing: certificate_required' => sub {
    refused('prod', undef, qr/certificate required.*SSL alert number 116/i,
            qr/TLS handshake failed: a client certificate is required and none was sent.*sni: prod\.lookout\.test/,
            'no certificate');
    my $out = s_client('prod', undef, '-tls1_2');
    like($out, qr/alert handshake failure.*SSL alert number 40/i, 'TLS 1.2: handshake_failure (40)') or diag($out);
};

subtest 'another CA, expired, revoked' => sub {
    refused('prod', 'client_other', qr/unknown ca.*SSL alert number 48/i,
            qr/client certificate 'CN=client other,O=lookout tests' refused: unable to get local issuer certificate/,
            'another CA');
    refused('prod', 'client_expired', qr/certificate expired.*SSL alert number 45/i,
            qr/client certificate 'CN=client expired,O=lookout tests' refused: certificate has expired/,
            'expired');
    is(get('prod', 'client_revoked')->{status}, 200, 'not yet revoked: the CRL lists nothing');
    copy($certs->{client_crl}, $crl) or die "copy: $!";
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reloaded .*generation 2/, 10), 'SIGHUP reloads the CRL') or diag($lk->log);
    refused('prod', 'client_revoked', qr/certificate revoked.*SSL alert number 44/i,
            qr/client certificate 'CN=client revoked,O=lookout tests' refused: certificate revoked/,
            'revoked');
    is(get('prod', 'client')->{status}, 200, 'the good one still passes');
    # A broken CRL file: the reload is refused, the running CRL stays.
    spew($crl, "-----BEGIN X509 CRL-----\nnot base64\n-----END X509 CRL-----\n");
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reload refused: .*tls\.client_crl: no PEM CRL in \Q$crl\E; still serving generation 2/, 10),
       'a broken CRL: the reload is refused, saying why') or diag($lk->log);
    isnt(get('prod', 'client_revoked')->{status}, 200, '... and the revoked one stays refused');
    is(get('prod', 'client')->{status}, 200, '... the good one passes');
};

subtest 'optional and off, by SNI' => sub {
    my $from = length(slurp("$dir/access.log") // '');
    is(get('opt', undef)->{status}, 200, 'optional: no certificate passes');
    ok(wait_until(sub { substr(slurp("$dir/access.log") // '', $from) =~ m{"GET /test/headers" opt/b2 200 } }, 5) == 1,
       '... logged') or diag(slurp("$dir/access.log"));
    unlike(substr(slurp("$dir/access.log") // '', $from), qr/client certificate/, '... with no certificate named');
    is(get('opt', 'client')->{status}, 200, 'optional: a good one passes');
    refused('opt', 'client_other', qr/unknown ca.*SSL alert number 48/i,
            qr/client certificate 'CN=client other,O=lookout tests' refused.*sni: opt\.lookout\.test/,
            'optional: a bad one');
    is(get('open', undef)->{status}, 200, 'off: no certificate passes');
    my $out = s_client('open', undef);
    unlike($out, qr/Acceptable client certificate CA names/, 'off: no certificate is asked for') or diag($out);
    like(s_client('prod', undef), qr/Acceptable client certificate CA names\n.*CN ?= ?lookout client test CA/,
         'on: the client CA is named in the request');
};

subtest 'no SNI: the strictest cluster of the socket, and Host must not reach past it' => sub {
    my @ip = ('--cacert', $certs->{edge_ca}, '--cert', $certs->{client_crt}, '--key', $certs->{client_key});
    my $r = curl(@ip, '-H', "Host: prod.lookout.test:$s", "https://127.0.0.1:$s/test/headers");
    is($r->{status}, 200, 'no SNI, a certificate, Host prod: 200') or diag(explain($r));
    $r = curl('--cacert', $certs->{edge_ca}, '-H', "Host: open.lookout.test:$s", "https://127.0.0.1:$s/test/headers");
    isnt($r->{status}, 200, 'no SNI, no certificate: refused in the handshake (prod requires one)');
    my $from = length($lk->log // '');
    $r = curl(@ip, '-H', "Host: opt.lookout.test:$s", "https://127.0.0.1:$s/test/headers");
    is($r->{status}, 421, "no SNI, Host opt: 421, since the check passed was prod's, not opt's") or diag(explain($r));
    ok(wait_until(sub { substr($lk->log // '', $from) =~ /refused 421: this cluster's client certificate check was not the one this TLS connection passed/ }, 5) == 1,
       '... logged') or diag(substr($lk->log // '', $from));
    $r = curl(@ip, @resolve, '-H', "Host: open.lookout.test:$s", "https://prod.lookout.test:$s/test/headers");
    is($r->{status}, 421, 'SNI prod, Host open: 421 (SNI and Host must agree)');
};

subtest 'X-Forwarded-Client-Cert' => sub {
    my @forged = ('-H', 'X-Forwarded-Client-Cert: Subject="CN=admin"', '-H', 'x-forwarded-client-cert: By=x');
    is_deeply(xfcc('prod', 'client'), [ 'Subject="CN=client alice,O=lookout tests"' ],
              'forwarded_client_cert = on: the verified subject');
    is_deeply(xfcc('prod', 'client', @forged), [ 'Subject="CN=client alice,O=lookout tests"' ],
              '... and only it: the client\'s own fields are removed');
    is_deeply(xfcc('opt', 'client', @forged), [], 'off (the default): none, and the client\'s removed');
    is_deeply(xfcc('opt', undef, @forged), [], '... without a certificate too');
    is_deeply(xfcc('open', undef, @forged), [], 'on, forwarded_headers = off, no certificate asked: the client\'s removed');
};

subtest 'config errors' => sub {
    my $base = "[lookout]\ntls.certificate = $certs->{edge_crt}\ntls.key = $certs->{edge_key}\n";
    my $cl = "[pulsar p]\nwebServiceUrl = https://127.0.0.1:$b1\n[broker p/b1]\n"
        . "advertisedListeners = internal:http://127.0.0.1:$b2\n";
    my %cases = (
        "tls.verify_client = on\n$cl" => qr/\[lookout\]: tls\.verify_client = on needs a tls\.client_ca/,
        ($cl =~ s/\n/\ntls.verify_client = optional\n/r) => qr/\[pulsar p\]: tls\.verify_client = optional needs a tls\.client_ca/,
        "tls.verify_client = inherit\n$cl" => qr/:4: \[lookout\] tls\.verify_client: 'inherit' is for a cluster/,
        "tls.verify_client = on\ntls.client_ca = $dir/none.crt\n$cl" => qr/tls\.client_ca: cannot load \Q$dir\E\/none\.crt/,
        "tls.verify_client = on\ntls.client_ca = $certs->{client_ca}\ntls.client_crl = $certs->{client_ca}\n$cl"
            => qr/tls\.client_crl: no PEM CRL in/,
    );
    for my $conf (sort keys %cases) {
        my $r = run_lookout(dir => $dir, conf => $base . $conf, args => ['--check']);
        is($r->{exit}, 1, 'refused: ' . ($conf =~ s/\n.*//sr));
        like($r->{out}, $cases{$conf}, '... saying why') or diag($r->{out});
    }
};

ok($lk->alive, 'lookout still running');
$lk->stop;
$c->stop;
done_testing();
