#!/usr/bin/perl
# 52-upstream-tls.t: the cluster keys upstream.tls and forwarded_headers (issue 7).
# upstream.tls = match | plain | tls decides how a client reaches a broker whose internal
# listener has both an http and an https address: match (the default) by the client's own
# TLS-ness, plain always over http (TLS ends at lookout), tls always over https; a broker
# with one address is reached there whatever the mode. forwarded_headers = on (default)
# adds X-Forwarded-For/-Proto/-Host; off adds none and passes the client's own as sent.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;

need_tools('curl', 'openssl');
need_modules('IO::Socket::SSL');

my $certs = test_certs();
my $dir = tmp_dir();
my @modes = qw(match plain tls);
# Brokers 1-3 have both addresses (one per mode's cluster); 4 has http only, 5 https only.
my @specs = map { my ($h, $s) = (free_port(), free_port()); "http://127.0.0.1:$h,https://127.0.0.1:$s" } @modes;
push @specs, '127.0.0.1:' . free_port(), 'https://127.0.0.1:' . free_port();
my $c = PulsarBroker->start(dir => "$dir/brokers", cert => $certs->{broker_crt}, key => $certs->{broker_key},
                            brokers => \@specs);

my (%tls_port, %plain_port, $conf);
for my $i (0 .. $#modes) {
    my $m = $modes[$i];
    ($tls_port{$m}, $plain_port{$m}) = (free_port(), free_port());
    my ($ht, $hp) = (free_port(), free_port());
    $conf .= <<"EOF";
[pulsar $m]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = https://127.0.0.1:$tls_port{$m}
upstream.tls = $m
@{[ $m eq 'plain' ? 'forwarded_headers = off' : $m eq 'tls' ? 'forwarded_headers = on' : '' ]}

[broker $m/b]
advertisedListeners = @{[ $c->internal_listeners($i + 1) ]},external:https://127.0.0.1:$ht,external:http://127.0.0.1:$plain_port{$m}

EOF
}
# One-address brokers under upstream.tls = plain: b4 has http only, b5 https only.
my ($one_plain, $one_tls) = (free_port(), free_port());
$conf .= <<"EOF";
[pulsar one]
internalListenerName = internal
lookupListenerName = external
upstream.tls = plain

[broker one/http-only]
advertisedListeners = @{[ $c->internal_listeners(4) ]},external:https://127.0.0.1:$one_tls

[broker one/https-only]
advertisedListeners = @{[ $c->internal_listeners(5) ]},external:http://127.0.0.1:$one_plain
EOF

my $lk = start_lookout(dir => $dir, conf => <<"EOF" . $conf);
[lookout]
workers = 1
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
tls.upstream_ca = $certs->{internal_ca}

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');
my @ca = ('--cacert', $certs->{edge_ca});

# via(N, URL): fetch URL through lookout; returns (status, whether broker N saw TLS, its
# record of the request).
sub via {
    my ($n, $url, @h) = @_;
    $c->clear_log($n);
    my $r = curl(@ca, @h, $url);
    my @seen = $c->requests($n);
    return ($r->{status}, @seen ? ($seen[-1]{tls} ? 'https' : 'http') : 'none', $seen[-1], $r);
}

subtest 'upstream.tls with a broker that has both addresses' => sub {
    my %want = (match => [ 'https', 'http' ], plain => [ 'http', 'http' ], tls => [ 'https', 'https' ]);
    for my $i (0 .. $#modes) {
        my $m = $modes[$i];
        my ($st, $how) = via($i + 1, "https://127.0.0.1:$tls_port{$m}/test/headers");
        is($st, 200, "$m, TLS client: 200");
        is($how, $want{$m}[0], "... reached the broker over $want{$m}[0]");
        ($st, $how) = via($i + 1, "http://127.0.0.1:$plain_port{$m}/test/headers");
        is($st, 200, "$m, plaintext client: 200");
        is($how, $want{$m}[1], "... reached the broker over $want{$m}[1]");
    }
};

subtest 'a broker with one address is reached there whatever the mode' => sub {
    my ($st, $how) = via(4, "https://127.0.0.1:$one_tls/test/headers");
    is("$st $how", '200 http', 'upstream.tls = plain, http-only broker, TLS client: http');
    ($st, $how) = via(5, "http://127.0.0.1:$one_plain/test/headers");
    is("$st $how", '200 https', 'upstream.tls = plain, https-only broker: still https');
};

sub fwd_headers {
    my ($rec) = @_;
    my $h = $rec->{headers} // {};
    return join ' | ', map { "$_: " . ($h->{$_} // '-') } qw(x-forwarded-for x-forwarded-proto x-forwarded-host);
}

subtest 'forwarded_headers' => sub {
    # match: the default (on); tls: on, written out; plain: off.
    for my $m (qw(match tls)) {
        my $i = $m eq 'match' ? 1 : 3;
        my (undef, undef, $rec) = via($i, "https://127.0.0.1:$tls_port{$m}/test/headers");
        is(fwd_headers($rec), "x-forwarded-for: 127.0.0.1 | x-forwarded-proto: https | x-forwarded-host: 127.0.0.1:$tls_port{$m}",
           "$m cluster (forwarded_headers on): all three added");
        (undef, undef, $rec) = via($i, "http://127.0.0.1:$plain_port{$m}/test/headers", '-H', 'X-Forwarded-For: 192.0.2.7');
        is(fwd_headers($rec), "x-forwarded-for: 192.0.2.7, 127.0.0.1 | x-forwarded-proto: http | x-forwarded-host: 127.0.0.1:$plain_port{$m}",
           "... appended to the client's X-Forwarded-For, over http");
    }
    my (undef, undef, $rec) = via(2, "https://127.0.0.1:$tls_port{plain}/test/headers");
    is(fwd_headers($rec), 'x-forwarded-for: - | x-forwarded-proto: - | x-forwarded-host: -', 'forwarded_headers = off: none added');
    (undef, undef, $rec) = via(2, "http://127.0.0.1:$plain_port{plain}/test/headers",
                                '-H', 'X-Forwarded-For: 192.0.2.7', '-H', 'X-Forwarded-Proto: gopher');
    is(fwd_headers($rec), 'x-forwarded-for: 192.0.2.7 | x-forwarded-proto: gopher | x-forwarded-host: -',
       "... and the client's own pass as sent");
};

subtest '--check shows the non-default modes' => sub {
    my $r = run_lookout(args => [ '--check', '-c', $lk->conf ]);
    is($r->{exit}, 0, '--check: valid');
    like($r->{out}, qr/^cluster plain \(pulsar\):.*, upstream\.tls plain, forwarded_headers off,/m, 'plain cluster: both shown');
    like($r->{out}, qr/^cluster tls \(pulsar\):.*, upstream\.tls tls, filters/m, 'tls cluster: upstream.tls shown');
    unlike($r->{out}, qr/^cluster match .*(upstream\.tls|forwarded_headers)/m, 'match cluster: defaults not shown');
    my ($b_plain) = $specs[1] =~ m{^(http://[^,]+)};
    my ($b_tls) = $specs[2] =~ m{,(https://\S+)$};
    like($r->{out}, qr/127\.0\.0\.1 -> broker plain\/b at \Q$b_plain\E$/m, 'plain: the https bind maps to the http address');
    like($r->{out}, qr/127\.0\.0\.1 -> broker tls\/b at \Q$b_tls\E$/m, 'tls: the http bind maps to the https address');
};

$lk->stop;
done_testing;
