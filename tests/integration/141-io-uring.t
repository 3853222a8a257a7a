#!/usr/bin/perl
# 141-io-uring.t: the io_uring engine and its switch (issue 22). Built with io_uring (the
# default when liburing is there), each worker holds one io_uring instance (an
# anon_inode:[io_uring] descriptor in /proc/PID/fd) and says at start that it reads and writes
# through it; `io_uring = off` leaves no such descriptor and says readv and writev. Either
# way, concurrent downloads of 4 MiB bodies and a run of short connections all arrive whole.
# A reload that changes the key says it needs a restart and keeps the engine it has.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use Test::More;

use Lookout;
use PulsarBroker;

plan skip_all => 'needs /proc' unless -d "/proc/$$/fd";

my $dir = tmp_dir();
my @p = free_ports(2);
my @q = free_ports(2);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @p ]);

sub conf_with {
    my ($key) = @_;
    return <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$q[0]"], 2 => ["http://127.0.0.1:$q[1]"] });
[lookout]
workers = 2
$key

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

EOF
}

# The io_uring instances PID holds open.
sub rings {
    my ($pid) = @_;
    return scalar grep { (readlink($_) // '') eq 'anon_inode:[io_uring]' } glob "/proc/$pid/fd/*";
}

# Six concurrent 4 MiB downloads and twenty short connections through lookout.
sub traffic_ok {
    my ($what) = @_;
    my $n = 4 * 1024 * 1024;
    my $sha = PulsarBroker::test_bytes_sha256($n);
    my @jobs = map { curl_start({ timeout => 30 }, "http://127.0.0.1:$q[$_ % 2]/test/bytes?n=$n") } 1 .. 6;
    my @bad;
    for my $h (@jobs) {
        my $r = curl_wait($h);
        push @bad, "status $r->{status} exit $r->{exit} $r->{err}"
            unless $r->{status} == 200 && sha256_hex($r->{body}) eq $sha;
    }
    is(scalar @bad, 0, "$what: six concurrent 4 MiB bodies arrived whole") or diag(join "\n", @bad);
    my @st;
    for my $i (1 .. 20) {
        my ($raw) = http_raw('127.0.0.1', $q[$i % 2], "GET /test/status?code=201 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             timeout => 5);
        push @st, $raw =~ m{^HTTP/1\.1 (\d{3})} ? $1 : 'none';
    }
    is(scalar(grep { $_ eq '201' } @st), 20, "$what: twenty short connections, twenty answers") or diag("@st");
}

my $lk = start_lookout(dir => $dir, name => 'default', conf => conf_with(''));
ok($lk->started, 'lookout with the default engine started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
wait_until(sub { ($lk->log // '') =~ /workers read and write plaintext with/ }, 10);
my ($engine) = ($lk->log // '') =~ /workers read and write plaintext with ([^\n]*)/;
ok(defined $engine, 'it says at start how the workers read and write') or diag($lk->log);
$engine //= '';

# tests/check.sh sets LOOKOUT_EXPECT_IO_URING for the builds that must have it: there, an
# engine other than io_uring fails rather than skips.
SKIP: {
    unless ($ENV{LOOKOUT_EXPECT_IO_URING}) {
        skip "this build has no io_uring ($engine)", 7 if $engine =~ /built without io_uring/;
        skip "the kernel refuses io_uring here ($engine)", 7 if $engine =~ /kernel refused/;
    }
    is($engine, 'io_uring', 'the default engine is io_uring');
    wait_until(sub { rings($lk->pid) >= 2 }, 10);
    is(rings($lk->pid), 2, 'one io_uring instance per worker');
    traffic_ok('io_uring');

    my $line = $lk->reload(conf_with('io_uring = off'));
    like($line // '', qr/reloaded/, 'a reload changing io_uring is applied') or diag($lk->log);
    like($lk->log // '', qr/SIGHUP: io_uring = off needs a restart; still on/, 'and says the key needs a restart');
    is(rings($lk->pid), 2, 'the workers keep their io_uring instances');
}
$lk->stop;
$lk->check_sanitizers;

my $off = start_lookout(dir => $dir, name => 'off', conf => conf_with('io_uring = off'));
ok($off->started, 'lookout with io_uring = off started') or BAIL_OUT('lookout did not start: ' . ($off->log // ''));
wait_until(sub { ($off->log // '') =~ /workers read and write plaintext with/ }, 10);
my ($eoff) = ($off->log // '') =~ /workers read and write plaintext with ([^\n]*)/;
like($eoff // '', qr/^readv and writev \((io_uring = off|built without io_uring)\)$/, 'io_uring = off: readv and writev');
unlike($off->log // '', qr/\[warn\] io_uring/, 'and no warning about it');
is(rings($off->pid), 0, 'no io_uring instance');
traffic_ok('readv and writev');
$off->stop;
$off->check_sanitizers;

done_testing();
