#!/usr/bin/perl
# 25-backlog.t: `listen.backlog` (issue 6 item 12). Every listening socket gets the
# configured backlog, capped by the kernel at net.core.somaxconn: `ss -ltn` shows it as
# the Send-Q of a listening socket. With workers = 2 each worker has its own socket
# (SO_REUSEPORT), and each must have it. libevent's evconnlistener_new calls listen()
# again with 128 when asked for its default, which is what this catches. A reload that
# changes it applies it to the sockets it keeps.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use Lookout;

need_tools('ss');
my $somaxconn = slurp('/proc/sys/net/core/somaxconn');
plan skip_all => 'no /proc/sys/net/core/somaxconn' unless defined $somaxconn && $somaxconn =~ /^(\d+)/;
$somaxconn = $1;

my $dir = tmp_dir();

sub min { $_[0] < $_[1] ? $_[0] : $_[1] }

# The Send-Q column of every socket listening on 127.0.0.1:PORT.
sub send_q {
    my ($port) = @_;
    my $out = qx{ss -ltnH "sport = :$port" 2>&1};
    return map { (split ' ')[2] } grep { /127\.0\.0\.1:$port\b/ } split /\n/, $out;
}

# run(BACKLOG_LINE, NAME): start lookout with two workers on one service address and
# return the Send-Q of its sockets.
sub run {
    my ($line, $name) = @_;
    my ($w, $p) = free_ports(2);
    my $lk = start_lookout(dir => $dir, name => $name, conf => <<"EOF");
[lookout]
workers = 2
$line

[pulsar prod]
webServiceUrl = http://127.0.0.1:$w

[broker prod/b1]
advertisedListeners = internal:http://127.0.0.1:$p
EOF
    ok($lk->started, "$name: lookout started") or diag($lk->log);
    # Its first socket opens before the second worker binds its own (slowly under valgrind).
    $lk->wait_log(qr/started with 2 workers/);
    my @q = send_q($w);
    $lk->stop;
    return @q;
}

my @q = run('listen.backlog = 100', 'set');
is(scalar @q, 2, 'two listening sockets (one per worker)');
is_deeply(\@q, [ 100, 100 ], 'listen.backlog = 100: Send-Q 100 on each') or diag("@q");

@q = run('', 'default');
my $want = min(4096, $somaxconn);
is_deeply(\@q, [ $want, $want ], "default: Send-Q min(4096, somaxconn = $somaxconn) = $want") or diag("@q");

# A reload that changes it: the sockets are kept, and listen() again gives them the new one.
{
    my ($w, $p) = free_ports(2);
    my $conf = "[lookout]\nworkers = 2\nlisten.backlog = 100\n\n[pulsar prod]\nwebServiceUrl = http://127.0.0.1:$w\n\n"
             . "[broker prod/b1]\nadvertisedListeners = internal:http://127.0.0.1:$p\n";
    my $lk = start_lookout(dir => $dir, name => 'reload', conf => $conf);
    ok($lk->started, 'reload: lookout started') or diag($lk->log);
    $lk->wait_log(qr/started with 2 workers/);
    (my $more = $conf) =~ s/listen\.backlog = 100/listen.backlog = 50/;
    like($lk->reload($more), qr/^SIGHUP: reloaded .*\(1 listeners kept/, 'reloaded, its listener kept');
    my @q;
    wait_until(sub { @q = send_q($w); @q == 2 && $q[0] == 50 && $q[1] == 50 }, 5);
    is_deeply(\@q, [ 50, 50 ], 'listen.backlog 100 -> 50 by a reload: Send-Q 50 on each') or diag("@q");
    $lk->stop;
}

if ($somaxconn < 2147483647) {
    my $over = $somaxconn + 1;
    @q = run("listen.backlog = $over", 'over');
    is_deeply(\@q, [ $somaxconn, $somaxconn ], "listen.backlog = $over: capped at somaxconn") or diag("@q");
}

done_testing();
