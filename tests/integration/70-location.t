#!/usr/bin/perl
# 70-location.t: the `location` filter (issue 2 item 8, CONTRACT §4 "HTTP Location").
# Brokers redirect to each other's INTERNAL web address (admin calls on a non-owner,
# lookups of unowned topics); through lookout the client sees the owner's EXTERNAL
# (lookup listener) address instead, path and query byte for byte, Content-Location too.
# Relative URLs and unknown hosts are untouched; a TLS client gets the https address when
# the listener has one; with no lookupListenerName nothing is rewritten.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;

need_modules('IO::Socket::SSL');

my $certs = test_certs();
my $dir = tmp_dir();
my @p = free_ports(3);                   # brokers' internal http
my @q = free_ports(3);                   # lookout: external http
my ($t1, $t2) = free_ports(2);           # lookout: external https (b3 has none)
my ($w, $w2) = free_ports(2);            # service addresses (main lookout, and one without a lookup listener)
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ],
                            own => { t => 2, t3 => 3 }, leader => 1);

my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', {
[lookout]
workers = 1
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$w

EOF
    1 => [ "http://127.0.0.1:$q[0]", "https://127.0.0.1:$t1" ],
    2 => [ "http://127.0.0.1:$q[1]", "https://127.0.0.1:$t2" ],
    3 => [ "http://127.0.0.1:$q[2]" ] }));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

my @int = map { "http://127.0.0.1:$_" } @p;
my @ext = map { "http://127.0.0.1:$_" } @q;
my @exts = ("https://127.0.0.1:$t1", "https://127.0.0.1:$t2");
my @ca = ('--cacert', $certs->{edge_ca});
my $adm = '/admin/v2/persistent/public/default';
my $lkp = '/lookup/v2/topic/persistent/public/default';
my $q = '?b=x+y&a=%2F%3f&c=&d=%E2%82%AC&e=a%26b';    # odd but legal bytes, kept as they are

# The Location a broker sends directly (to its internal peers), for the same request.
sub direct_location {
    my ($n, $path) = @_;
    my $r = curl("$int[$n - 1]$path");
    return $r->{headers}{location};
}

subtest 'admin 307: internal owner address becomes its lookup address' => sub {
    my $path = "$adm/t/stats$q";
    my $raw = direct_location(1, $path);
    like($raw // '', qr{^\Q$int[1]\E/}, "direct from b1: 307 to b2's internal address ($raw)");
    (my $want = $raw // '') =~ s{^\Q$int[1]\E}{$ext[1]};
    my $r = curl("$ext[0]$path");
    is($r->{status}, 307, 'through lookout: 307');
    is($r->{headers}{location}, $want, '... Location is b2\'s external address, path and query byte for byte');
    is($r->{headers}{'x-fake-broker'}, 'b1', '... answered by b1');
    # An encoded path segment (unowned topic "a%2Fb": 307 to the next broker, b2).
    $path = "$adm/a%2Fb/stats?x=%2F";
    $raw = direct_location(1, $path);
    ($want = $raw // '') =~ s{^\Q$int[1]\E}{$ext[1]};
    $r = curl("$ext[0]$path");
    is($r->{headers}{location}, $want, 'encoded path bytes kept');
    like($lk->log, qr/"GET \Q$adm\E\/t\/stats[^"]*".* 307 .*\b1 rewrite/, 'the access log counts the rewrite');
};

subtest 'curl -L through lookout completes the admin call' => sub {
    $c->clear_log;
    my $r = curl('-L', "$ext[0]$adm/t/stats");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 307, 200 ], '307, then 200');
    is($r->{headers}{'x-fake-broker'}, 'b2', 'the owner answered');
    ok(eval { exists decode_json($r->{body})->{msgRateIn} }, '... with topic stats');
    my @b2 = $c->requests(2);
    is(scalar @b2, 1, 'b2 got one request');
    ok(@b2 && $b2[0]{headers}{'x-forwarded-for'}, '... through lookout (it carries X-Forwarded-For)');
    # PUT with a body follows a 307 too (curl keeps the method and body on 307).
    spew("$dir/body", '{"x":1}');
    $r = curl('-L', '-X', 'PUT', '-H', 'Content-Type: application/json', '--data-binary', "\@$dir/body", "$ext[0]$adm/t/subscription/s1");
    is($r->{status}, 200, 'PUT -L: 200 from the owner');
    is(eval { decode_json($r->{body})->{length} }, 7, '... with the body replayed by the client');
};

subtest 'lookup 307 (unowned topic)' => sub {
    my $path = "$lkp/u1";
    my $raw = direct_location(1, $path);
    like($raw // '', qr{^\Q$int[1]\E/lookup/v2/topic/.*authoritative=true$}, "direct: $raw");
    (my $want = $raw // '') =~ s{^\Q$int[1]\E}{$ext[1]};
    my $r = curl("$ext[0]$path");
    is($r->{status}, 307, 'through lookout: 307');
    is($r->{headers}{location}, $want, '... to b2\'s lookup address');
    $r = curl('-L', "$ext[0]$path");
    is($r->{status}, 200, '-L: LookupData from b2');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... answered by b2');
};

# Percent-encode a query parameter value (core Perl only).
sub esc { my $s = shift; $s =~ s/([^A-Za-z0-9._~-])/sprintf('%%%02X', ord $1)/ge; return $s }

# /test/location on b1: a redirect to anywhere.
sub via {
    my ($base, $to, %o) = @_;
    my $url = "$base/test/location?to=" . esc($to);
    $url .= "&code=$o{code}" if $o{code};
    $url .= '&content_location=' . esc($o{cl}) if $o{cl};
    return curl(@{ $o{curl} // [] }, $url);
}

subtest 'Location and Content-Location rules' => sub {
    my $r = via($ext[0], "$int[2]/x/y?z=1%202&w=$int[1]#frag", cl => "$int[1]/c?d=1");
    is($r->{headers}{location}, "$ext[2]/x/y?z=1%202&w=$int[1]#frag", 'host:port swapped; path, query, fragment kept');
    is($r->{headers}{'content-location'}, "$ext[1]/c?d=1", 'Content-Location rewritten');
    for my $code (301, 302, 303, 308) {
        is(via($ext[0], "$int[1]/p", code => $code)->{headers}{location}, "$ext[1]/p", "$code: rewritten");
    }
    my %untouched = (
        'relative path'            => "/admin/v2/x?to=$int[1]",
        'relative, no slash'       => 'stats?x=1',
        'unknown host'             => 'http://unknown.example:8080/p?q=1',
        'known IP, unknown port'   => "http://127.0.0.1:1/p",
        'already external'         => "$ext[1]/p",
    );
    for my $what (sort keys %untouched) {
        is(via($ext[0], $untouched{$what})->{headers}{location}, $untouched{$what}, "$what: untouched");
    }
    $r = via($ext[0], '/rel', cl => 'http://unknown.example/c');
    is($r->{headers}{'content-location'}, 'http://unknown.example/c', 'Content-Location to an unknown host: untouched');
    # The broker's own address (b1 redirecting to itself).
    is(via($ext[0], "$int[0]/self")->{headers}{location}, "$ext[0]/self", 'a redirect to the answering broker itself');
};

subtest 'over TLS: the https address of the listener is preferred' => sub {
    my $path = "$adm/t/stats$q";
    my $raw = direct_location(1, $path);
    (my $want = $raw // '') =~ s{^\Q$int[1]\E}{$exts[1]};
    my $r = curl(@ca, "$exts[0]$path");
    is($r->{status}, 307, 'https client: 307');
    is($r->{headers}{location}, $want, '... to b2\'s https lookup address');
    $r = via($exts[0], "$int[2]/x?y", curl => \@ca);
    is($r->{headers}{location}, "$ext[2]/x?y", 'b3 has no https address: falls back to its http one');
    $r = via($exts[0], "$int[1]/x", cl => "$int[0]/c", curl => \@ca);
    is($r->{headers}{'content-location'}, "$exts[0]/c", 'Content-Location over TLS: https too');
    # And a plaintext client gets http even though the listener has https.
    is(via($ext[0], "$int[1]/x")->{headers}{location}, "$ext[1]/x", 'plaintext client: http');
    $r = curl(@ca, '-L', "$exts[0]$adm/t/stats");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 307, 200 ], 'curl -L over TLS: 307, then 200');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... from the owner');
};

subtest 'the service address' => sub {
    my $r = curl('-L', "http://127.0.0.1:$w$adm/t/stats");
    is($r->{status}, 200, '-L via the service address: 200');
    is($r->{headers}{'x-fake-broker'}, 'b2', '... from the owner');
    for my $resp (@{ $r->{responses} }) {
        next unless $resp->{status} == 307;
        like($resp->{headers}{location}, qr{^\Q$ext[1]\E/}, '... the redirect named b2\'s lookup address');
    }
};

subtest 'no lookupListenerName: nothing is rewritten' => sub {
    my $plain = join '', map { "[broker prod/b$_]\nadvertisedListeners = " . $c->internal_listeners($_) . "\n\n" } 1 .. 3;
    my $lk2 = start_lookout(dir => $dir, name => 'no-lookup', conf => <<"EOF" . $plain);
[lookout]
workers = 1

[pulsar prod]
internalListenerName = internal
webServiceUrl = http://127.0.0.1:$w2

EOF
    ok($lk2->started, 'lookout without lookupListenerName started');
    my $r = via("http://127.0.0.1:$w2", "$int[1]/x?y=1", cl => "$int[2]/c");
    is($r->{headers}{location}, "$int[1]/x?y=1", 'Location untouched');
    is($r->{headers}{'content-location'}, "$int[2]/c", 'Content-Location untouched');
    # Whichever broker answers, an admin redirect keeps the internal address.
    my $seen = 0;
    for (1 .. 3) {
        $r = curl("http://127.0.0.1:$w2$adm/t/stats");
        next unless $r->{status} == 307;
        $seen++;
        like($r->{headers}{location}, qr{^\Q$int[1]\E/}, 'admin 307 keeps the internal address');
    }
    ok($seen, 'a non-owner answered at least once (round-robin over three)');
    $lk2->stop;
};

$lk->stop;
$c->stop;
done_testing();
