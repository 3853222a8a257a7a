#!/usr/bin/perl
# 154-location-fallback.t: a Location naming a broker that has no web address on the
# selected listener never reaches the client with the broker's internal URL while lookout
# has an address to give (CONTRACT §4 "HTTP Location"; lk_location_pick): the broker's
# lookup-listener address, else the cluster's webServiceUrl. Scripted brokers answer every
# request with a 307 to an internal address (their own, or another's with /to=PORT/...),
# in Location and Content-Location.
#   (a) client_listeners = vpn, and b1's vpn listener has a binary address only (PIP-95):
#       ?listenerName=vpn gets b1's lookup-listener (external) address; over TLS the
#       https one;
#   (b) b3 has no vpn listener at all: b2's 307 to b3 for a vpn client gets b3's external
#       address (lk_broker_client_listener, 153-listener-fallback.t's rule, for Location);
#   (c) cluster bin's lookup listener has binary addresses only, and it has webServiceUrl:
#       every 307 gets webServiceUrl, where lookout itself routes the client;
# each with leak_guard = log (no leak counted), rewrite and block (never a 502). A
# fallback is logged at warn once per connection, naming the broker and the listener it
# lacks. Without webServiceUrl, (c)'s map loads with a warning at the broker's line.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;

need_modules('IO::Socket::SSL');

my $certs = test_certs();
my $dir = tmp_dir();
my ($p1, $p2, $p3, $p4) = free_ports(4);    # brokers' internal http: b1, b2, b3, bin/c1

# A broker on 127.0.0.1:PORT answering every request with 307 to its own internal address,
# path and query kept, or for /to=P/REST to 127.0.0.1:P/REST (another broker's), in
# Location and Content-Location, with an empty body; keep-alive.
sub redirect_broker {
    my ($port) = @_;
    return scripted_http_broker($port, sub {
        my ($cx, $line) = @_;
        my ($target) = $line =~ m{^\S+ (\S+) } or return 0;
        my $loc = $target =~ m{^/to=(\d+)(/.*)$} ? "http://127.0.0.1:$1$2" : "http://127.0.0.1:$port$target";
        return syswrite($cx, "HTTP/1.1 307 Temporary Redirect\r\nLocation: $loc\r\n"
                           . "Content-Location: $loc\r\nContent-Length: 0\r\n\r\n");
    });
}
my @brokers = map { redirect_broker($_) } $p1, $p2, $p3, $p4;
END { kill 'TERM', @brokers if @brokers }

my @ca = ('--cacert', $certs->{edge_ca});
my $adm = '/admin/v2/persistent/public/default';
my @internal = map { "127.0.0.1:$_" } $p1, $p2, $p3, $p4;

# One lookout in front of both clusters with leak_guard = MODE (its own ports); returns
# it and its external addresses.
sub start {
    my ($mode, $web) = @_;
    my ($e1, $s1, $e2, $e3, $w, $eb, $admin) = free_ports(7);
    my $pb = free_port();    # bin/c1's internal binary address: never dialled here
    my $conf = <<"EOF";
[lookout]
workers = 1
admin = 127.0.0.1:$admin
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
client_listeners = vpn
leak_guard = $mode

[broker prod/b1]
advertisedListeners = internal:http://127.0.0.1:$p1,external:http://127.0.0.1:$e1,external:https://127.0.0.1:$s1,vpn:pulsar://10.9.9.9:6650

[broker prod/b2]
advertisedListeners = internal:http://127.0.0.1:$p2,external:http://127.0.0.1:$e2,vpn:http://10.9.9.12:8080

[broker prod/b3]
advertisedListeners = internal:http://127.0.0.1:$p3,external:http://127.0.0.1:$e3

[pulsar bin]
internalListenerName = internal
lookupListenerName = external
leak_guard = $mode
EOF
    $conf .= "webServiceUrl = http://127.0.0.1:$w\n" if $web;
    $conf .= <<"EOF";

[broker bin/c1]
advertisedListeners = internal:pulsar://127.0.0.1:$pb,internal:http://127.0.0.1:$p4,external:pulsar://127.0.0.1:$eb
EOF
    return ($conf) unless $web;
    my $lk = start_lookout(dir => $dir, name => "lookout-$mode", conf => $conf);
    return ($lk, { e1 => "127.0.0.1:$e1", s1 => "127.0.0.1:$s1", e2 => "127.0.0.1:$e2",
                   e3 => "127.0.0.1:$e3", w => "127.0.0.1:$w", admin => $admin });
}

# The Location and Content-Location of response R: each the URL WANT, no internal address.
sub check_loc {
    my ($what, $r, $want) = @_;
    is($r->{status}, 307, "$what: 307, not refused");
    is($r->{headers}{location}, $want, "$what: Location is $want");
    is($r->{headers}{'content-location'}, $want, "$what: Content-Location too");
    my $head = $r->{head} // '';
    ok(!grep({ index($head, $_) >= 0 } @internal), "$what: no internal address in the head")
        or diag($head);
}

for my $mode (qw(log rewrite block)) {
    subtest "leak_guard = $mode" => sub {
        my ($lk, $a) = start($mode, 1);
        ok($lk->started, 'lookout started') or return;
        my $from = length($lk->log // '');

        # (a) b1's own 307, vpn asked: b1's vpn listener is binary only
        check_loc('(a) vpn, binary only', curl("http://$a->{e1}$adm/t1/stats?listenerName=vpn"),
                  "http://$a->{e1}$adm/t1/stats");
        check_loc('(a) over TLS: the https address', curl(@ca, "https://$a->{s1}$adm/t1/stats?listenerName=vpn"),
                  "https://$a->{s1}$adm/t1/stats");
        check_loc('(a) no listener named: the lookup listener, as before',
                  curl("http://$a->{e1}$adm/t1/stats"), "http://$a->{e1}$adm/t1/stats");
        # (b) b2 sends a vpn client to b3, which has no vpn listener; to b2 itself the
        # vpn address (the operator's choice: not internal)
        check_loc('(b) b3 lacks vpn', curl("http://$a->{e2}/to=$p3$adm/t2/stats?listenerName=vpn"),
                  "http://$a->{e3}$adm/t2/stats");
        check_loc('(b) b2 has vpn', curl("http://$a->{e2}/x?listenerName=vpn"), 'http://10.9.9.12:8080/x');
        # (c) the lookup listener is binary only: webServiceUrl
        check_loc('(c) webServiceUrl', curl("http://$a->{w}$adm/t3/stats?x=%2F"),
                  "http://$a->{w}$adm/t3/stats?x=%2F");

        my $log = Lookout::log_since($lk, $from);
        like($log, qr/\[warn\] [^\n]*broker prod\/b1 has no http or https address on listener 'vpn': the client is sent to http:\/\/\Q$a->{e1}\E \(lookupListenerName 'external'\)/,
             'the fallback is logged: broker, listener, the address given');
        like($log, qr/broker prod\/b3 has no listener 'vpn', which the client chose; its lookup listener 'external' is used/,
             '... and b3 without vpn (the listener selection warning)');
        like($log, qr/broker bin\/c1 has no http or https address on listener 'external': the client is sent to http:\/\/\Q$a->{w}\E \(webServiceUrl\)/,
             '... and webServiceUrl for c1');
        # once per connection: two requests on one connection, one line
        $from = length($lk->log // '');
        my $r = curl("http://$a->{w}$adm/t4/stats", "http://$a->{w}$adm/t5/stats");
        is(scalar @{ $r->{responses} }, 2, 'two requests on one connection');
        is($r->{headers}{location}, "http://$a->{w}$adm/t5/stats", '... the second rewritten too');
        my $n = () = Lookout::log_since($lk, $from) =~ /has no http or https address/g;
        is($n, 1, '... logged once');
        is(Lookout::leaks_metric($a->{admin}, $_), 0, "no leak counted in $_") for qw(prod bin);
        $lk->stop;
    };
}

# Without webServiceUrl, c1's 307s have no address to take: the map loads, with a warning
# at c1's line.
my ($conf) = start('log', 0);
my $r = run_lookout(dir => $dir, conf => $conf, args => ['--check']);
is($r->{exit}, 0, '--check: the map without webServiceUrl is valid') or diag($r->{out});
my @lines = split /\n/, $conf;
my ($line) = grep { $lines[$_ - 1] =~ /^advertisedListeners = .*127\.0\.0\.1:$p4/ } 1 .. @lines;
like($r->{out}, qr/\[warn\] \Q$r->{conf}\E:$line: \[broker bin\/c1\] advertisedListeners: the lookup listener 'external' has no http or https address, and the cluster no webServiceUrl/,
     "... with a warning at c1's line ($line)");
unlike($r->{out}, qr/\[broker prod\//, '... and none for prod, whose lookup listener has http');

done_testing();
