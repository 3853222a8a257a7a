#!/usr/bin/perl
# 110-zk-watch.t: proxy/lk_zk.c, the ZooKeeper source of the live listener map (issue 11
# groundwork), against a real ZooKeeper (Debian's zookeeper, lib/ZooKeeper.pm).
# tests/zk/zk-watch runs it on a libevent loop and prints every snapshot it delivers.
# Brokers register as Pulsar's do: ephemeral children of /loadbalance/brokers, each held
# by its own kazoo session (bin/zk-client). What must hold: a path that does not exist
# yet is watched until it does; a registration, a data change and a broker going away
# (its session killed) each reach the snapshot within a second (registrations) or within
# the session timeout (a crash); a ZooKeeper outage leaves the last snapshot in place with
# the state saying disconnected and stale, and a restart brings the same session back
# with no new snapshot; changes made while it was away are picked up; an expired session
# is replaced and everything is read again. zk-watch then shuts down cleanly (exit 0, and
# no sanitizer report in an ASan build).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use ZooKeeper;

my $why = ZooKeeper::missing()
    // (ZooKeeper::Watch::bin() ? undef : 'tests/zk/zk-watch is not built (tests/build.sh)');
plan skip_all => $why if $why;

my $DIR = '/loadbalance/brokers';
# LocalBrokerData as a 3.x broker writes it (facts/pulsar.md §3), per broker.
sub reg {
    my ($host, %o) = @_;
    my $v = $o{version} // '3.1.0';
    return qq({"webServiceUrl":"http://$host:8080","pulsarServiceUrl":"pulsar://$host:6650",)
         . qq("persistentTopicsEnabled":true,"nonPersistentTopicsEnabled":true,"bundles":[],)
         . qq("brokerVersionString":"$v","protocols":{},)
         . qq("advertisedListeners":{"internal":{"brokerServiceUrl":"pulsar://$host:6650"}},)
         . qq("loadReportType":"LocalBrokerData"});
}
sub names { join ',', sort keys %{ $_[0] } }
sub ms { sprintf '%.0f ms', 1000 * $_[0] }

my $t0 = time;
my $zk = ZooKeeper->start;
note sprintf 'ZooKeeper serving after %.2f s', $zk->started_in;
my $admin = $zk->client;

# ---- the path does not exist yet ------------------------------------------------------
# A 30 s session: ZooKeeper's restarts below (a JVM, on a loaded CI machine) and the
# reconnect must come within it for the session to survive them, as the test expects.
# debug: the client's own messages are in the log that a failure shows.
my $w = ZooKeeper::Watch->start($zk, $DIR, timeout => 30000, debug => 1);
my $s = $w->next_snapshot(10);
ok($s, 'a first snapshot once connected, though the path does not exist');
is(names($s->{nodes} // {}), '', '... and it is empty');
my $st = $w->state;
ok($st->{connected} && $st->{stale_since_ms} == 0, 'state: connected, not stale')
    or diag explain $st;
is($st->{sessions}, 1, 'state: one session');

# ---- two brokers register -------------------------------------------------------------
my %b;
$b{1} = $zk->client(timeout => 10);
$b{2} = $zk->client(timeout => 10);
$admin->create($DIR, '', makepath => 1);
$b{1}->create("$DIR/10.0.0.11:8080", reg('10.0.0.11'), ephemeral => 1);
my $t = $b{2}->create("$DIR/10.0.0.12:8080", reg('10.0.0.12'), ephemeral => 1)->{t};
$s = $w->snapshot_where(sub { keys %{ $_[0] } == 2 }, 5);
ok($s, 'the path appears with two children: both in a snapshot');
is(names($s->{nodes}), '10.0.0.11:8080,10.0.0.12:8080', '... by name');
is($s->{nodes}{'10.0.0.12:8080'}, reg('10.0.0.12'), '... with their bytes');
my $lat = $s->{t_ms} / 1000 - $t;
cmp_ok($lat, '<', 1, 'within a second of the second znode (' . ms($lat) . ')');

# ---- a third registers: how long from znode to snapshot ------------------------------
$b{3} = $zk->client(timeout => 2);
my @lat;
for my $i (1 .. 3) {
    # a registration, then its removal, three times: the latency is noisy
    $t = $b{3}->create("$DIR/10.0.0.13:8080", reg('10.0.0.13'), ephemeral => 1)->{t};
    $s = $w->snapshot_where(sub { exists $_[0]{'10.0.0.13:8080'} }, 5);
    push @lat, $s ? $s->{t_ms} / 1000 - $t : 99;
    last if $i == 3;
    $b{3}->delete("$DIR/10.0.0.13:8080");
    $w->snapshot_where(sub { !exists $_[0]{'10.0.0.13:8080'} }, 5);
}
is(names($s->{nodes}), '10.0.0.11:8080,10.0.0.12:8080,10.0.0.13:8080', 'a third broker registers');
my ($max) = sort { $b <=> $a } @lat;
cmp_ok($max, '<', 1, 'in the snapshot within a second of its znode');
diag 'znode created -> lk_zk snapshot delivered: ' . join(', ', map { ms($_) } @lat);

# ---- a broker's data changes ------------------------------------------------------------
$t = $b{1}->set("$DIR/10.0.0.11:8080", reg('10.0.0.11', version => '3.1.1'))->{t};
$s = $w->snapshot_where(sub { ($_[0]{'10.0.0.11:8080'} // '') =~ /3\.1\.1/ }, 5);
ok($s, 'a data change reaches a snapshot');
cmp_ok($s ? $s->{t_ms} / 1000 - $t : 99, '<', 1, '... within a second');

# ---- a broker dies: its session times out ---------------------------------------------
$t = time;
$b{3}->kill;
$s = $w->snapshot_where(sub { !exists $_[0]{'10.0.0.13:8080'} }, 8);
ok($s, 'a killed broker (session timeout 2 s) leaves the snapshot');
$lat = $s ? $s->{t_ms} / 1000 - $t : 99;
cmp_ok($lat, '<', 4, '... within its session timeout and a little (' . ms($lat) . ')');
is(names($s->{nodes}), '10.0.0.11:8080,10.0.0.12:8080', '... and only it');

# ---- ZooKeeper goes down, nothing changes, it comes back ----------------------------------
$st = $w->state;
my $snaps = $st->{snapshots};
$zk->kill;
ok(wait_until(sub { !$w->state->{connected} }, 5), 'ZooKeeper killed: state says disconnected');
$st = $w->state;
cmp_ok($st->{stale_since_ms}, '>', 0, '... and stale');
is($st->{nodes}, 2, '... and still holds the last snapshot');
$zk->restart;
ok(ZooKeeper::wait_connected([ $admin, @b{1, 2} ]), "the brokers' sessions are back");
# 20 s: within the watch's 15 s window to reconnect after the loss (arm_giveup), which
# began before ZooKeeper's restart; a loaded CI machine once took more than 10 s.
ok(wait_until(sub { my $x = $w->state; $x->{connected} && !$x->{stale_since_ms} }, 20),
   'ZooKeeper back: connected and in sync again')
    or diag "zk-watch:\n", $w->log, "ZooKeeper, last lines:\n",
            join('', grep { defined } (split /^/, $zk->log)[-30 .. -1]);
$st = $w->state;
is($st->{sessions}, 1, '... on the same session');
is($st->{snapshots}, $snaps, '... with no new snapshot, since nothing changed');
is($w->pending, 0, '... none printed either');

# ---- changes made while it was away ----------------------------------------------------
# Stopped (SIGSTOP) while ZooKeeper dies and comes back, so that the changes are made
# while its connection is dead; continued, it reconnects and must find them.
$w->signal('STOP');
$zk->kill;
$zk->restart;
ok(ZooKeeper::wait_connected([ $admin, @b{1, 2} ]), "the brokers' sessions are back again");
$b{4} = $zk->client(timeout => 10);
$b{4}->create("$DIR/10.0.0.14:8080", reg('10.0.0.14'), ephemeral => 1);
$b{2}->set("$DIR/10.0.0.12:8080", reg('10.0.0.12', version => '3.2.0'));
$t = time;
$w->signal('CONT');
$s = $w->snapshot_where(sub { keys %{ $_[0] } == 3 }, 10);
ok($s, 'changes made while it was away are picked up after it reconnects');
is(names($s->{nodes}), '10.0.0.11:8080,10.0.0.12:8080,10.0.0.14:8080', '... a new broker');
like($s->{nodes}{'10.0.0.12:8080'} // '', qr/3\.2\.0/, '... and new data');
note 'picked up ' . ms($s->{t_ms} / 1000 - $t) . ' after it was continued' if $s;
like($w->log, qr/resumed session/, '... on its resumed session');

# ---- its session expires -----------------------------------------------------------------
# Stopped again; its session is expired by another client with its id and password, and
# the tree changes meanwhile: a broker leaves, one joins, one changes. The old session's
# watches die with it, so only reading everything again in a new session finds these.
my $cid = $w->clientid;
ok($cid && $cid->{id}, 'its session id and password');
$w->signal('STOP');
$admin->expire($cid->{id}, $cid->{passwd});
$b{1}->close;
$b{5} = $zk->client(timeout => 10);
$b{5}->create("$DIR/10.0.0.15:8080", reg('10.0.0.15'), ephemeral => 1);
$b{4}->set("$DIR/10.0.0.14:8080", reg('10.0.0.14', version => '3.3.0'));
$w->signal('CONT');
$s = $w->snapshot_where(sub { keys %{ $_[0] } == 3 && exists $_[0]{'10.0.0.15:8080'} }, 10);
ok($s, 'expired: a new session reads everything again');
is(names($s->{nodes}), '10.0.0.12:8080,10.0.0.14:8080,10.0.0.15:8080', '... the brokers as they are now');
like($s->{nodes}{'10.0.0.14:8080'} // '', qr/3\.3\.0/, '... with their data as it is now');
$st = $w->state;
is_deeply([ @$st{qw(sessions expiries connected)} ], [ 2, 1, JSON::PP::true ], 'state: 2 sessions, 1 expiry, connected');
isnt($st->{session_id}, $cid->{id}, '... a new session id');
like($w->log, qr/session 0x[0-9a-f]+ expired/, 'the expiry is logged');

# the new session's watches work
$b{5}->set("$DIR/10.0.0.15:8080", reg('10.0.0.15', version => '3.4.0'));
ok($w->snapshot_where(sub { ($_[0]{'10.0.0.15:8080'} // '') =~ /3\.4\.0/ }, 5),
   'the new session watches: a later change arrives');

# ---- shutdown ------------------------------------------------------------------------------
is($w->quit, 0, 'zk-watch stops the source and exits 0');
my $log = $w->log;
unlike($log, qr/ERROR: (?:Address|Leak)Sanitizer|runtime error:/, 'no sanitizer report')
    or diag $log;
$_->close for grep { $_->alive } values %b;
$admin->close;
$zk->stop;
note sprintf 'took %.1f s', time - $t0;

done_testing;
