#!/usr/bin/perl
# 139-http-timers.t: the client's timers on a keep-alive connection (issue 22, the HTTP hot
# path). The client's timer is set lazily (lk_hc_deadline): an exchange that comes whole
# leaves it where the last idle wait put it, and it is only moved when it must fire sooner.
# So timeout.client_header must still run from a later request's first byte, whatever the
# timer was left at, on a connection that parked in between or not; a head that comes in
# pieces within it is served; and an idle keep-alive connection still closes at
# timeout.idle, however many exchanges came before.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

my $dir = tmp_dir();
my ($p1, $s) = free_ports(2);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p1"]);

my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
timeout.response = 5s
timeout.client_header = 1s
timeout.idle = 3s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = internal:http://127.0.0.1:$p1,external:http://127.0.0.1:$s
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

my $H = "Host: 127.0.0.1:$s\r\n";
my $req = "GET /test/status?code=201 HTTP/1.1\r\n$H\r\n";

# The statuses of every response in a raw reply, in order.
sub statuses { my ($raw) = @_; return [ $raw =~ m{HTTP/1\.1 (\d{3}) }g ] }

subtest 'timeout.client_header on a later request of a keep-alive connection' => sub {
    for my $gap (0.02, 0.3) {    # before the idle connection parks (50 ms), and after
        my $t0 = time;
        my ($raw, $how) = http_raw('127.0.0.1', $s, [ $req, $req, "GET /test/headers HTTP/1.1\r\n$H" ],
                                   pause => $gap, timeout => 6);
        my $dt = time - $t0;
        is_deeply(statuses($raw), [ 201, 201, 408 ], "gap $gap s: two answers, then a 408") or diag($raw);
        ok($how eq 'eof', '... and a close') or diag("how: $how");
        # the third head began at 2 * gap; timeout.client_header is 1 s
        ok($dt > 2 * $gap + 0.8 && $dt < 2 * $gap + 2, '... timeout.client_header after its first byte')
            or diag(sprintf('%.2fs', $dt));
    }
};

subtest 'the deadline runs from the first byte of the head, not the last' => sub {
    my $t0 = time;
    my ($raw, $how) = http_raw('127.0.0.1', $s, [ $req, "GET /test/headers HTTP/1.1\r\n", map({ "X-$_: 1\r\n" } 1 .. 5), "\r\n" ],
                               pause => 0.3, timeout => 6);
    my $dt = time - $t0;
    # the second head began at 0.3 s and would end at 2.1 s
    is_deeply(statuses($raw), [ 201, 408 ], 'a head trickled past timeout.client_header: 408') or diag($raw);
    ok($dt > 1.1 && $dt < 2.0, '... 1 s after its first byte, before its last') or diag(sprintf('%.2fs', $dt));
};

subtest 'a head in pieces within the deadline is served' => sub {
    my ($raw, $how) = http_raw('127.0.0.1', $s, [ $req, "GET /test/status?code=202 HTTP/1.1\r\n", "$H\r\n", $req ],
                               pause => 0.35, timeout => 3, until => qr/202 .*201 /s);
    is_deeply(statuses($raw), [ 201, 202, 201 ], 'three answers, the second from a head in two pieces 0.35 s apart')
        or diag($raw);
};

subtest 'idle after many exchanges: closed at timeout.idle' => sub {
    my $t0 = time;
    my ($raw, $how) = http_raw('127.0.0.1', $s, [ ($req) x 20 ], pause => 0.03, timeout => 8);
    my $dt = time - $t0;
    is(scalar @{ statuses($raw) }, 20, 'twenty answers');
    # the last request went at 0.57 s; timeout.idle is 3 s
    ok($how eq 'eof' && $dt > 3.2 && $dt < 5, '... then closed about 3 s after the last') or diag(sprintf('how %s %.2fs', $how, $dt));
};

ok($lk->alive, 'lookout survived all of it');
$lk->stop;
$c->stop;
done_testing();
