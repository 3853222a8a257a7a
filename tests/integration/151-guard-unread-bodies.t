#!/usr/bin/perl
# 151-guard-unread-bodies.t: leak_guard = block does not pass a text body it could not read.
# rewrite and block ask the broker for identity (Accept-Encoding: identity); a broker, or a
# cache before it, may send a coding anyway. gzip is read as it streams; but a body in a
# coding lookout does not read (here gzip twice, "Content-Encoding: gzip, gzip"), or gzip
# that inflates past 64 times max_buffer_bytes, used to go on unread even with block. Now
# block answers 502 (the connection cut if some of the body had gone) and says why; log and
# rewrite still let it go by, as they do any leak. curl is the client; PulsarBroker's
# /test/coded sends the coding whatever the request asked.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use Test::More;

use Lookout;
use PulsarBroker;
use E2E;

my $dir = tmp_dir();
my $e = E2E->new(dir => $dir);
my $L = $e->L;

# max_buffer_bytes 16k: block holds 16 KiB of a body, gzip inflates to 1 MiB at most
my %lk = %{ $e->guard_lookouts(qw(log block), { lookout => "max_buffer_bytes = 16k\n" }) };

my ($in1) = $L->{internal}{1}{http} =~ m{//([^/]+)};    # b1's internal host:port

sub get {
    my ($base, $q) = @_;
    return curl('-H', 'Accept-Encoding: identity', "$base/test/coded?$q");
}
sub via { $lk{ $_[0] }{e2e_ext}{1}{http} }
sub gunzip_all {
    my ($z, $times) = @_;
    for (1 .. $times) {
        my $out;
        gunzip(\$z => \$out) or return undef;
        $z = $out;
    }
    return $z;
}

my %case = (
    twice     => [ "coding=gzip,gzip&text=$in1", 2 ],
    big       => [ "coding=gzip&pad=" . (2 * 1024 * 1024) . "&text=$in1", 1 ],
    clean     => [ 'coding=gzip&text=nothing-here', 1 ],
    readable  => [ "coding=gzip&text=$in1", 1 ],
);

subtest 'the broker sends what it claims (control, straight to b1)' => sub {
    for my $name (sort keys %case) {
        my ($q, $times) = @{ $case{$name} };
        my $r = get($L->{internal}{1}{http}, $q);
        is($r->{status}, 200, "$name: 200");
        like($r->{head}, qr/^content-encoding: gzip${\ ($times == 2 ? ', gzip' : '')}\r?$/mi, "... gzip x$times, though identity was asked");
        my $plain = gunzip_all($r->{body}, $times) // '';
        like($plain, $name eq 'clean' ? qr/"owner":"nothing-here"\}$/ : qr/"owner":"\Q$in1\E"\}$/, '... holding what it says');
    }
    my $big = length(get($L->{internal}{1}{http}, $case{big}[0])->{body});
    cmp_ok($big, '<', 16 * 1024, "big: $big bytes, under max_buffer_bytes, 2 MiB once inflated (over 64 x 16 KiB)");
};

subtest 'leak_guard = block: what it cannot read gets 502' => sub {
    for my $name (qw(twice big)) {
        my $from = length($lk{block}->log // '');
        my $r = get(via('block'), $case{$name}[0]);
        is($r->{status}, 502, "$name: 502") or diag($r->{head});
        unlike($r->{body}, qr/\Q$in1\E/, '... naming no internal address');
        my $why = $name eq 'twice' ? 'is in a coding lookout does not read' : 'is too large once inflated';
        ok(wait_until(sub { Lookout::log_since($lk{block}, $from) =~ /\[warn\][^\n]*the response body \Q$why\E[^\n]*, so it cannot be checked: answered 502 \(leak_guard = block\)/ }, 5),
           "... logged: $why") or diag(Lookout::log_since($lk{block}, $from));
    }
    my $r = get(via('block'), $case{readable}[0]);
    is($r->{status}, 502, 'gzip it can read, naming b1: 502 too (a leak, found)');
    $r = get(via('block'), $case{clean}[0]);
    is($r->{status}, 200, 'gzip it can read, clean: 200');
    is(gunzip_all($r->{body}, 1), '{"owner":"nothing-here"}', '... the body as the broker sent it');
};

subtest 'leak_guard = log: it goes by, as the broker sent it' => sub {
    for my $name (qw(twice big)) {
        my ($q, $times) = @{ $case{$name} };
        my $direct = get($L->{internal}{1}{http}, $q);
        my $r = get(via('log'), $q);
        is($r->{status}, 200, "$name: 200");
        ok($r->{body} eq $direct->{body}, '... the bytes the broker sent (' . length($r->{body}) . ')');
    }
};

done_testing;
