#!/usr/bin/perl
# 140-access-log-cut.t: every HTTP request whose head was read gets exactly one access-log
# line however its exchange ends (issue 22). A client that resets its connection before
# the answer: 499, 0 bytes, cut "client closed"; a client that stops reading a big answer:
# the status sent, the bytes the socket took, cut "client timeout"; exchanges under way at
# drain_timeout: 499 (nothing sent yet) or the status sent with the bytes sent (an upload
# echoed as it comes), cut
# "drain_timeout"; one still busy at max_connection_age.grace: 499, cut
# "max_connection_age.grace"; a broker dying mid-body: the status sent and the upstream
# error, as before. A client that only half-closes is still answered (one line, 200), and a
# keep-alive sequence logs one line per request, none twice. lookout_exchanges_total counts
# a 499 among the 4xx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP qw(decode_json);
use Socket qw(SOL_SOCKET SO_LINGER SO_RCVBUF);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

my $SLOW = $ENV{LOOKOUT_SANITIZED} ? 2 : 1;
my $dir = tmp_dir();
my @bp = free_ports(1);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @bp ]);

# lookout with one worker, its access log (JSON) at DIR/NAME-access.log and an admin
# listener; returns (lookout, HTTP port, the log's path, admin port).
sub start_with {
    my ($name, $extra) = @_;
    my ($web, $e1, $adm) = free_ports(3);
    my $access = "$dir/$name-access.log";
    unlink $access;
    my $lk = start_lookout(dir => $dir, name => $name, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$e1"] }));
[lookout]
workers = 1
admin = 127.0.0.1:$adm
log.access = $access
log.format = json
$extra

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$web
EOF
    ok($lk->started, "lookout ($name) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    return ($lk, $web, $access, $adm);
}

# The access log's lines whose path has id=ID.
sub lines_for {
    my ($access, $id) = @_;
    return grep { ($_->{path} // '') =~ /[?&]id=\Q$id\E(?:&|$)/ } Lookout::json_lines(slurp($access) // '');
}

# Waits up to secs for ID's line; checks there is exactly one and returns it ({} if none).
sub one_line {
    my ($access, $id, $secs) = @_;
    wait_until(sub { scalar lines_for($access, $id) }, $secs // 3);
    sleep 0.2; # a second line, if any, would come with the first one's turn
    my @l = lines_for($access, $id);
    is(scalar @l, 1, "$id: exactly one line") or diag(slurp($access));
    return $l[0] // {};
}

sub connect_to {
    my ($port) = @_;
    return IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
        // die "connect: $@";
}

sub send_get {
    my ($s, $path) = @_;
    local $SIG{PIPE} = 'IGNORE';
    syswrite($s, "GET $path HTTP/1.1\r\nHost: x\r\n\r\n");
}

# Closes s with a reset (SO_LINGER 0): a client that is gone, not one that half-closes.
sub reset_close {
    my ($s) = @_;
    setsockopt($s, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
    close $s;
}

# The sum of lookout_exchanges_total's HTTP series of status class CLASS ("4xx").
sub exchanges {
    my ($adm, $class) = @_;
    my $r = curl("http://127.0.0.1:$adm/metrics");
    my $n = 0;
    $n += $1 while $r->{body} =~ /^lookout_exchanges_total\{[^}]*protocol="http"[^}]*status="\Q$class\E"[^}]*\} (\d+)$/mg;
    return $n;
}

my ($lk, $web, $access, $adm) = start_with('main', "timeout.idle = 1s");

subtest 'keep-alive: one line per request, none twice' => sub {
    my $s = connect_to($web);
    my $buf = '';
    for my $i (1 .. 5) {
        send_get($s, "/test/status?code=200&id=ka-$i");
        my $end = time + 5;
        my $r;
        while (time < $end) {
            $r = parse_response($buf);
            last if $r && $r->{complete};
            IO::Select->new($s)->can_read(1) or next;
            sysread($s, my $b, 65536) or last;
            $buf .= $b;
        }
        ok($r && $r->{complete} && $r->{status} == 200, "request $i answered");
        $buf = $r ? $r->{rest} // '' : '';
    }
    close $s;
    for my $i (1 .. 5) {
        my $l = one_line($access, "ka-$i");
        is($l->{status}, 200, "ka-$i: status 200");
        ok(!defined $l->{cut}, "ka-$i: not cut");
    }
};

subtest 'the client resets its connection before the answer: 499' => sub {
    my $before = exchanges($adm, '4xx');
    my $s = connect_to($web);
    send_get($s, '/test/slow?ms=1500&id=rst-1');
    sleep 0.3;
    my $t0 = time;
    reset_close($s);
    my $l = one_line($access, 'rst-1');
    cmp_ok(time - $t0, '<', 1.2 * $SLOW, 'logged when the client went, not when the broker answered');
    is($l->{status}, 499, 'status 499');
    is($l->{bytes_out}, 0, '0 bytes to the client');
    is($l->{cut}, 'client closed', 'cut: client closed');
    ok($lk->wait_log(qr/client went away before the response/, 2), 'the error log says so too');
    is(exchanges($adm, '4xx') - $before, 1, 'lookout_exchanges_total counts it among the 4xx');
};

subtest 'a client that half-closes is still answered: one line, 200' => sub {
    my $s = connect_to($web);
    send_get($s, '/test/slow?ms=300&id=half-1');
    shutdown($s, 1);
    my $got = '';
    my $end = time + 5;
    while (time < $end && IO::Select->new($s)->can_read($end - time)) {
        sysread($s, my $b, 65536) or last;
        $got .= $b;
    }
    like($got, qr{^HTTP/1\.1 200 }, 'answered');
    my $l = one_line($access, 'half-1');
    is($l->{status}, 200, 'status 200');
    ok(!defined $l->{cut}, 'not cut');
};

subtest 'the client stops reading a big answer: the status sent, the bytes taken' => sub {
    my $n = 64 * 1024 * 1024;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $web, Proto => 'tcp', Timeout => 5)
        or die "connect: $@";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, pack('i', 4096));
    send_get($s, "/test/bytes?n=$n&id=stall-1");
    # read the head and a little, then nothing: timeout.idle (1 s) ends it
    IO::Select->new($s)->can_read(5);
    sysread($s, my $b, 4096);
    like($b // '', qr{^HTTP/1\.1 200 }, 'the answer began');
    my $l = one_line($access, 'stall-1', 6 * $SLOW);
    is($l->{status}, 200, 'the status sent');
    is($l->{cut}, 'client timeout', 'cut: client timeout');
    cmp_ok($l->{bytes_out}, '>', 0, "bytes to the client: $l->{bytes_out}");
    cmp_ok($l->{bytes_out}, '<', $n, '... fewer than the answer\'s');
    cmp_ok($l->{bytes_out}, '<=', $l->{bytes_from_broker}, '... no more than came from the broker');
    reset_close($s);
};

subtest 'a broker dying mid-body: the status sent, the error, once' => sub {
    my $r = curl("http://127.0.0.1:$web/test/die-mid?n=200000&id=die-1");
    isnt($r->{exit}, 0, 'the client sees the answer cut');
    my $l = one_line($access, 'die-1');
    is($l->{status}, 200, 'the status sent');
    is($l->{error}, 'closed the connection', 'the upstream error');
    cmp_ok($l->{bytes_out}, '<=', 100000, "no more bytes than the broker sent ($l->{bytes_out})");
};

$lk->stop;
is($lk->exit_code, 0, 'lookout exited 0');

subtest 'max_connection_age.grace: a request still under way is cut, 499' => sub {
    my ($lk, $web, $access) = start_with('aged', "max_connection_age = 1s\nmax_connection_age.jitter = 0%\n"
                                                 . "max_connection_age.grace = 1s");
    my $s = connect_to($web);
    send_get($s, '/test/slow?ms=6000&id=aged-1');
    my $l = one_line($access, 'aged-1', 5 * $SLOW);
    is($l->{status}, 499, 'status 499');
    is($l->{bytes_out}, 0, '0 bytes to the client');
    is($l->{cut}, 'max_connection_age.grace', 'cut: max_connection_age.grace');
    close $s;
    $lk->stop;
    is($lk->exit_code, 0, 'lookout exited 0');
};

subtest 'drain_timeout: exchanges under way are cut, each logged once' => sub {
    my ($lk, $web, $access) = start_with('drain', 'drain_timeout = 1s');
    my $before = connect_to($web);
    send_get($before, '/test/slow?ms=8000&id=drain-1');
    # an upload the broker echoes as it comes: 40 of its 100 bytes, then nothing
    my $mid = connect_to($web);
    syswrite($mid, "POST /test/echo-body?id=drain-2 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" . ('x' x 40));
    sleep 0.5;
    $lk->signal('TERM');
    ok(defined $lk->wait_exit(6 * $SLOW), 'lookout exits');
    is($lk->exit_code, 0, '... 0');
    my $l1 = one_line($access, 'drain-1', 1);
    is($l1->{status}, 499, 'nothing sent yet: 499');
    is($l1->{bytes_out}, 0, '... 0 bytes');
    is($l1->{cut}, 'drain_timeout', '... cut: drain_timeout');
    my $l2 = one_line($access, 'drain-2', 1);
    is($l2->{status}, 200, 'part of the body sent: the status sent') or diag(explain($l2));
    is($l2->{bytes_out}, 40, '... the 40 bytes sent');
    is($l2->{bytes_in}, 40, '... the 40 bytes from the client');
    is($l2->{cut}, 'drain_timeout', '... cut: drain_timeout');
    is(scalar(Lookout::json_lines(slurp($access) // '')), 2, 'no other line');
};

$c->stop;
done_testing;
