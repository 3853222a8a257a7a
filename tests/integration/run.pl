#!/usr/bin/perl
# Runs every tests/integration/*.t with TAP::Harness (as prove does) and
# ends with one line, "N passed, N failed", counting test assertions; a
# file that dies or exits non-zero counts as a failure too.
use strict;
use warnings;
use FindBin;
use TAP::Harness;

my @files = @ARGV ? @ARGV : sort glob("$FindBin::Bin/*.t");

# Files that spend their minute waiting (quiet periods after each exchange, a broker's
# backoff), with a few CPU-seconds in it and no tight bound on time: they run one after
# the other alongside the rest, which still run one at a time, in order. That keeps
# tests/check.sh, which runs the whole set twice, inside CI's 30 minutes. Every file
# picks its ports at random (free_port), or skips when a fixed address it needs is taken.
my %alongside = map { $_ => 1 } qw(46-smuggling.t 124-kafka-rebootstrap.t);
my @side = grep { m{([^/]+)$} && $alongside{$1} } @files;
my @rest = grep { !(m{([^/]+)$} && $alongside{$1}) } @files;
my %opt = (verbosity => 0, lib => ["$FindBin::Bin/lib"], timer => 1, failures => 1);
if (@side && @rest) {
    # TAP::Harness reads each name as a glob: quote what a glob would take for itself.
    my $glob = sub { (my $f = $_[0]) =~ s/([*?\[\]{}\\])/\\$1/g; $f };
    %opt = (%opt, jobs => 2, rules => { par => [ { seq => [ map { $glob->($_) } @side ] },
                                                 { seq => [ map { $glob->($_) } @rest ] } ] });
}
my $h = TAP::Harness->new(\%opt);
my $agg = $h->runtests(@files);
my $passed = scalar $agg->passed;
my $failed = scalar $agg->failed;
# a file whose plan was not met or that exited badly adds one failure
for my $f (@files) {
    my ($parser) = $agg->parsers($f);
    next unless $parser;
    $failed++ if !$parser->is_good_plan || $parser->exit || $parser->wait;
}
$failed++ if $agg->has_errors && $failed == 0;
print "$passed passed, $failed failed\n";
exit($failed ? 1 : 0);
