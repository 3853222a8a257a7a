#!/usr/bin/perl
# Runs every tests/integration/*.t with TAP::Harness (as prove does) and
# ends with one line, "N passed, N failed", counting test assertions; a
# file that dies or exits non-zero counts as a failure too.
use strict;
use warnings;
use FindBin;
use TAP::Harness;

my @files = @ARGV ? @ARGV : sort glob("$FindBin::Bin/*.t");
my $h = TAP::Harness->new({ verbosity => 0, lib => ["$FindBin::Bin/lib"],
                            timer => 1, failures => 1 });
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
