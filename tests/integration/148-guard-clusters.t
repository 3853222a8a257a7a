#!/usr/bin/perl
# 148-guard-clusters.t: the leak guard of one Pulsar cluster's HTTP exchanges looks for the
# internal addresses of every cluster with HTTP, not only its own (CONTRACT §4, "Leak
# guard"). Two clusters, a and b, one fake broker each, in one lookout per mode. Broker
# a/a1 answers with a 307 whose Location names b/b1's internal address, and with a JSON
# error whose reason names it:
#   - log: both pass as they came, logged as leaks of broker b/b1 and counted in
#     lookout_leaks_total;
#   - rewrite: both name b/b1's external (the exchange's selected listener) address;
#   - block: 502 with the guard's JSON reason; b/b1's internal address never reaches the
#     client.
# And the other way round (a b/b1 answer naming a/a1), once per mode.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;

use Lookout;
use PulsarBroker;

my $dir = tmp_dir();
my ($pa, $pb) = free_ports(2);    # the brokers' internal http
my $ca = PulsarBroker->start(dir => "$dir/a", brokers => [ "127.0.0.1:$pa" ]);
my $cb = PulsarBroker->start(dir => "$dir/b", brokers => [ "127.0.0.1:$pb" ]);
my %in = (a => "127.0.0.1:$pa", b => "127.0.0.1:$pb");

# One lookout per mode: its admin port, and a/a1's and b/b1's external http ports.
my (%lk, %ext, %admin);
for my $mode (qw(log rewrite block)) {
    my ($adm, $xa, $xb) = free_ports(3);
    ($admin{$mode}, $ext{$mode}) = ($adm, { a => "127.0.0.1:$xa", b => "127.0.0.1:$xb" });
    mkdir "$dir/lk-$mode" or die "mkdir: $!";
    $lk{$mode} = start_lookout(dir => "$dir/lk-$mode", conf => <<"EOF");
[lookout]
workers = 1
admin = 127.0.0.1:$adm
log.buffer = 0

[pulsar a]
internalListenerName = internal
lookupListenerName = external
leak_guard = $mode

[broker a/a1]
advertisedListeners = internal:http://$in{a},external:http://$ext{$mode}{a}

[pulsar b]
internalListenerName = internal
lookupListenerName = external
leak_guard = $mode

[broker b/b1]
advertisedListeners = internal:http://$in{b},external:http://$ext{$mode}{b}
EOF
    ok($lk{$mode}->started, "lookout ($mode) started") or BAIL_OUT("lookout $mode did not start: " . ($lk{$mode}->log // ''));
}

sub q_esc { my $s = $_[0]; $s =~ s/([^A-Za-z0-9._~-])/sprintf '%%%02X', ord $1/ge; return $s }

my $path = '/admin/v2/persistent/public/default/t?authoritative=false';
# What broker FROM answers naming broker TO's internal address: a 307 to it, a JSON error
# (Pulsar's {"reason"} shape) naming it.
sub redirect { my ($to) = @_; return '/test/location?to=' . q_esc("http://$in{$to}$path") }
sub error    { my ($to) = @_; return '/test/status?code=503&reason=' . q_esc("not served here, try $in{$to}") }

# A request through the lookout of MODE to broker FROM (its external address): the
# response, and the log written meanwhile.
sub ask {
    my ($mode, $from, $target) = @_;
    my $x = $ext{$mode}{$from};
    my ($h, $p) = $x =~ /^(.*):(\d+)$/;
    my $at = length($lk{$mode}->log // '');
    my $raw = http_raw($h, $p, "GET $target HTTP/1.1\r\nHost: $x\r\nConnection: close\r\n\r\n", timeout => 5);
    return ($raw, parse_response($raw) // {}, $at);
}

subtest 'the fixtures leak as meant (control, straight to a/a1)' => sub {
    my ($h, $p) = $in{a} =~ /^(.*):(\d+)$/;
    my $raw = http_raw($h, $p, "GET @{[ redirect('b') ]} HTTP/1.1\r\nHost: $in{a}\r\nConnection: close\r\n\r\n");
    like($raw, qr{^HTTP/1\.1 307 .*\r\nLocation: http://\Q$in{b}$path\E\r\n}s, 'a 307 to b/b1\'s internal address')
        or diag($raw);
    $raw = http_raw($h, $p, "GET @{[ error('b') ]} HTTP/1.1\r\nHost: $in{a}\r\nConnection: close\r\n\r\n");
    my $r = parse_response($raw) // {};
    is($r->{status}, 503, 'a 503');
    is(eval { decode_json($r->{body})->{reason} }, "not served here, try $in{b}", '... whose JSON reason names it');
};

for my $dir ([ 'a', 'b' ], [ 'b', 'a' ]) {
    my ($from, $to) = @$dir;
    my $leak = qr/names \S*\Q$in{$to}\E\S*, an internal address of broker $to\/${to}1\b/;

    subtest "leak_guard = log: $from/${from}1 naming $to/${to}1 passes, logged and counted" => sub {
        my $before = Lookout::leaks_metric($admin{log}, $from);
        my ($raw, $r, $at) = ask(log => $from, redirect($to));
        is($r->{status}, 307, 'the 307');
        is($r->{headers}{location}, "http://$in{$to}$path", '... as it came');
        like(Lookout::log_since($lk{log}, $at), qr/the header Location $leak.*logged only \(leak_guard = log\)/,
             "... logged as a leak of $to/${to}1") or diag(Lookout::log_since($lk{log}, $at));
        ($raw, $r, $at) = ask(log => $from, error($to));
        is($r->{status}, 503, 'the 503');
        is(eval { decode_json($r->{body})->{reason} }, "not served here, try $in{$to}", '... as it came');
        like(Lookout::log_since($lk{log}, $at), qr/the body $leak.*logged only \(leak_guard = log\)/,
             "... logged as a leak of $to/${to}1") or diag(Lookout::log_since($lk{log}, $at));
        is(Lookout::leaks_metric($admin{log}, $from), $before + 2, "lookout_leaks_total{cluster=\"$from\"} counts both");
    };

    subtest "leak_guard = rewrite: $from/${from}1 naming $to/${to}1 names its external address" => sub {
        my $x = $ext{rewrite}{$to};
        my ($raw, $r) = ask(rewrite => $from, redirect($to));
        is($r->{status}, 307, 'the 307');
        is($r->{headers}{location}, "http://$x$path", "... to $to/${to}1's external address") or diag($raw);
        unlike($raw, qr/\Q$in{$to}\E/, '... and not its internal one');
        ($raw, $r) = ask(rewrite => $from, error($to));
        is($r->{status}, 503, 'the 503');
        is(eval { decode_json($r->{body})->{reason} }, "not served here, try $x", "... naming $to/${to}1's external address")
            or diag($raw);
        unlike($raw, qr/\Q$in{$to}\E/, '... and not its internal one');
    };

    subtest "leak_guard = block: $from/${from}1 naming $to/${to}1 gets 502" => sub {
        for my $case ([ 'the 307', redirect($to) ], [ 'the 503', error($to) ]) {
            my ($what, $target) = @$case;
            my ($raw, $r, $at) = ask(block => $from, $target);
            lookout_error_ok($r, 502, "$what: 502") or diag($raw);
            is(eval { decode_json($r->{body})->{reason} }, 'response would leak an internal broker address',
               '... with the guard\'s JSON reason');
            unlike($raw, qr/\Q$in{$to}\E/, "... $to/${to}1's internal address never reaches the client");
            like(Lookout::log_since($lk{block}, $at), qr/$leak.*answered 502 \(leak_guard = block\)/,
                 "... logged as a leak of $to/${to}1") or diag(Lookout::log_since($lk{block}, $at));
        }
    };
}

for my $mode (sort keys %lk) {
    ok($lk{$mode}->alive, "lookout ($mode) is still running");
    $lk{$mode}->stop;
}
$ca->stop;
$cb->stop;
done_testing;
