#!/usr/bin/perl
# 97-admin-access.t: who may ask the admin listener (issue 18, defect 8). admin.allow
# (CIDRs; by default this host only: 127.0.0.0/8 and ::1) says which addresses may ask at
# all; admin.token_file, when set, asks every caller for "Authorization: Bearer TOKEN";
# admin.healthz_allow opens /healthz alone, without the token, to a load balancer's
# addresses. A refused caller gets 403 with lookout's JSON {"reason"} body, whatever the
# path (an unknown one too: nothing is learnt), is logged at most once a second with its
# address, and counted in /metrics (lookout_admin_refused_total). The keys follow a reload,
# which reads the token file again. A missing, empty or malformed token file, or a bad
# CIDR, is a config error naming the file and line.
#
# The admin listener binds 127.0.0.1; callers come from other loopback addresses
# (curl --interface 127.0.0.x), which are outside a narrowed admin.allow.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;

my $dir = tmp_dir();
my ($admin, $ext, $int) = free_ports(3);

sub conf {
    my ($keys) = @_;
    return <<"EOF";
[lookout]
workers = 1
admin = 127.0.0.1:$admin
$keys
[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = internal:http://127.0.0.1:$int,external:http://b1.lookout.test:$ext
EOF
}

# ask(FROM, PATH, [TOKEN or header]): curl from source address FROM.
sub ask {
    my ($from, $path, $auth) = @_;
    return curl('--interface', $from, (defined $auth ? ('-H', $auth =~ /:/ ? $auth : "Authorization: Bearer $auth") : ()),
                "http://127.0.0.1:$admin$path");
}

sub refused {
    my ($r, $name, $why) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    lookout_error_ok($r, 403, "$name: 403 with a JSON reason");
    like($r->{body}, $why, "... saying why") if $why;
}

sub metric {
    my ($reason) = @_;
    my $m = ask('127.0.0.1', '/metrics');
    return $m->{body} =~ /^lookout_admin_refused_total\{reason="$reason"\} (\d+)$/m ? $1 : undef;
}

subtest 'the default: this host only, every path open to it' => sub {
    my $lk = start_lookout(dir => $dir, name => 'default', conf => conf(''));
    ok($lk->started, 'started') or return;
    for my $from ('127.0.0.1', '127.0.0.2') {
        is(ask($from, $_)->{status}, 200, "$_ from $from: 200") for qw(/healthz /map /metrics);
    }
    is(metric('address'), 0, 'no refusal counted');
    is(metric('token'), 0, '... of either kind');
    $lk->stop;
};

subtest 'admin.allow narrowed: every path refused outside it' => sub {
    my $lk = start_lookout(dir => $dir, name => 'allow', conf => conf("admin.allow = 127.0.0.1/32, ::1\n"));
    ok($lk->started, 'started') or return;
    is(ask('127.0.0.1', '/map')->{status}, 200, '/map from 127.0.0.1: 200');
    my $n = 0;
    for my $path (qw(/map /metrics /healthz /nope)) {
        refused(ask('127.0.0.2', $path), "$path from 127.0.0.2", qr/not in admin\.allow/);
        $n++;
    }
    unlike(ask('127.0.0.2', '/map')->{body}, qr/127\.0\.0\.1:$int|generation|config/, 'the refusal shows nothing of the map');
    $n++;
    is(metric('address'), $n, "$n refusals counted (address)");
    like($lk->log, qr/\[warn\] admin: refused 127\.0\.0\.2:\d+ asking for \/map: the caller's address is not in admin\.allow/,
         'logged with the address and the path');
    # A burst: at most one line a second, the rest counted.
    my $t0 = time;
    my $before = () = $lk->log =~ /admin: refused/g;
    refused(ask('127.0.0.2', '/map'), "burst $_") for 1 .. 10;
    my $secs = time - $t0;
    my $lines = (() = $lk->log =~ /admin: refused/g) - $before;
    cmp_ok($lines, '<=', int($secs) + 1, "10 refusals in ${\ sprintf '%.1f', $secs } s: $lines log lines");
    is(metric('address'), $n + 10, '... all counted');
    if ($lines < 10) {
        # The burst may have ended on a logged line (a second boundary): refuse again
        # until one goes unlogged, so that the next logged line has some to count.
        for (1 .. 5) {
            my $was = () = $lk->log =~ /admin: refused/g;
            refused(ask('127.0.0.2', '/map'), "one more after the burst");
            last if (() = $lk->log =~ /admin: refused/g) == $was;
        }
        sleep 1.1;
        refused(ask('127.0.0.2', '/metrics'), 'a refusal a second later');
        like($lk->log, qr/admin: refused 127\.0\.0\.2:\d+ asking for \/metrics: .* \(and \d+ more since the last line\)/,
             '... logged, with how many went unlogged');
    }
    $lk->stop;
};

subtest 'admin.healthz_allow: /healthz alone' => sub {
    my $lk = start_lookout(dir => $dir, name => 'healthz',
                           conf => conf("admin.allow = 127.0.0.1\nadmin.healthz_allow = 127.0.0.3/32\n"));
    ok($lk->started, 'started') or return;
    my $r = ask('127.0.0.3', '/healthz');
    is($r->{status}, 200, '/healthz from 127.0.0.3: 200');
    is($r->{body}, "ok\n", '... ok');
    is(ask('127.0.0.3', '/healthz?verbose=1')->{status}, 200, '... with a query too');
    refused(ask('127.0.0.3', $_), "$_ from 127.0.0.3", qr/admin\.allow/) for qw(/map /metrics /nope);
    refused(ask('127.0.0.4', '/healthz'), '/healthz from 127.0.0.4');
    is(ask('127.0.0.1', '/map')->{status}, 200, '/map from 127.0.0.1 (admin.allow): 200');
    $lk->stop;
};

subtest 'admin.token_file: a bearer token, and reloads read it again' => sub {
    my $tok = 'tok-' . join('', map { ('a' .. 'z', 0 .. 9)[ rand 36 ] } 1 .. 32);
    my $file = spew("$dir/admin.token", "$tok\n");
    my $lk = start_lookout(dir => $dir, name => 'token',
                           conf => conf("admin.allow = 127.0.0.1, ::1\nadmin.token_file = admin.token\nadmin.healthz_allow = 127.0.0.3\n"));
    ok($lk->started, 'started') or return;
    refused(ask('127.0.0.1', '/map'), 'no token', qr/Bearer token is required/);
    refused(ask('127.0.0.1', '/map', 'nope'), 'a wrong token', qr/not admin\.token_file's/);
    refused(ask('127.0.0.1', '/map', "${tok}x"), 'a longer token');
    refused(ask('127.0.0.1', '/map', substr($tok, 0, -1)), 'a shorter token');
    refused(ask('127.0.0.1', '/map', "Authorization: Basic $tok"), 'another scheme');
    refused(ask('127.0.0.1', '/healthz'), '/healthz from admin.allow without the token');
    my $r = ask('127.0.0.1', '/map', $tok);
    is($r->{status}, 200, 'the token: /map 200');
    ok(eval { JSON::PP::decode_json($r->{body})->{clusters} }, '... the map');
    is(ask('127.0.0.1', '/metrics', "authorization: bearer $tok")->{status}, 200, 'scheme and name in any case');
    is(ask('127.0.0.3', '/healthz')->{status}, 200, '/healthz from admin.healthz_allow: no token needed');
    refused(ask('127.0.0.2', '/map', $tok), 'the token from outside admin.allow');
    unlike($lk->log, qr/\Q$tok\E/, 'the token is never logged');
    my $m = ask('127.0.0.1', '/metrics', $tok)->{body};
    like($m, qr/^lookout_admin_refused_total\{reason="token"\} 6$/m, 'token refusals counted');
    like($m, qr/^lookout_admin_refused_total\{reason="address"\} 1$/m, 'address refusals counted');

    my $tok2 = "${tok}2==";
    spew($file, $tok2);
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reloaded .*generation 2/, 10), 'SIGHUP reloads') or diag($lk->log);
    refused(ask('127.0.0.1', '/map', $tok), 'the old token after the reload');
    is(ask('127.0.0.1', '/map', $tok2)->{status}, 200, 'the new one');

    spew($file, "\n");
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reload refused: \S+:\d+: \[lookout\] admin\.token_file: \S+admin\.token is empty/, 10),
       'an emptied token file: the reload is refused, saying where') or diag($lk->log);
    is(ask('127.0.0.1', '/map', $tok2)->{status}, 200, '... and the token of the generation serving still works');
    $lk->stop;
};

subtest 'config errors name the file and line' => sub {
    spew("$dir/empty.token", " \n");
    spew("$dir/bad.token", "two words\n");
    for my $case ([ "admin.token_file = missing.token", qr/admin\.token_file: \S+missing\.token: No such file/ ],
                  [ "admin.token_file = empty.token", qr/admin\.token_file: \S+empty\.token is empty/ ],
                  [ "admin.token_file = bad.token", qr/admin\.token_file: \S+bad\.token: not a bearer token/ ],
                  [ "admin.token_file = .", qr/admin\.token_file: .*not a readable regular file/ ],
                  [ "admin.allow = 127.0.0.1/33", qr/admin\.allow: .*prefix length/ ],
                  [ "admin.healthz_allow = lb.example", qr/admin\.healthz_allow: .*not an IPv4 or IPv6 address/ ]) {
        my $r = run_lookout(dir => $dir, name => 'bad', conf => conf("$case->[0]\n"), args => ['--check']);
        is($r->{exit}, 1, "$case->[0]: refused");
        like($r->{out}, qr/bad\.conf:4: \[lookout\] /, '... at bad.conf:4');
        like($r->{out}, $case->[1], '... saying why') or diag($r->{out});
    }
};

subtest 'IPv6: ::1 is in the default' => sub {
    my $s6 = eval { require IO::Socket::IP; IO::Socket::IP->new(Listen => 1, LocalHost => '::1', LocalPort => 0) };
    plan skip_all => 'no IPv6 loopback' unless $s6;
    my $p6 = $s6->sockport;
    close $s6;
    (my $c = conf('')) =~ s/^admin = .*$/admin = [::1]:$p6/m;
    my $lk = start_lookout(dir => $dir, name => 'v6', conf => $c, wait => []);
    ok($lk->started, 'started') or return;
    ok(wait_until(sub { curl('-g', "http://[::1]:$p6/healthz")->{status} == 200 }, 10), '/healthz from ::1: 200');
    $lk->stop;
    ($c = conf("admin.allow = 127.0.0.1\n")) =~ s/^admin = .*$/admin = [::1]:$p6/m;
    $lk = start_lookout(dir => $dir, name => 'v6b', conf => $c, wait => []);
    ok($lk->started, 'started without ::1 in admin.allow') or return;
    my $r;
    wait_until(sub { ($r = curl('-g', "http://[::1]:$p6/map"))->{status} != 0 }, 10);
    refused($r, '/map from ::1 outside admin.allow');
    $lk->stop;
};

done_testing();
