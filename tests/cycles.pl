#!/usr/bin/perl
# Fails on any include cycle among the modules of proxy/ and filters/.
#
# A module is a .c file and its .h (lk_log.c and lk_log.h are "lk_log"); it
# depends on every module whose header either of its files includes.  A
# cycle is a set of modules that depend on each other round a circle: none
# of them can then be read, built or unit-tested without the others (the
# log calling back into the connection code, the config loader building
# filter chains).  Tarjan's algorithm finds every strongly connected
# component; each one with more than a module is printed with its edges,
# and the exit status is 1.  Run from the top of the tree (tests/check.sh
# does), or give the top as the argument.
use strict;
use warnings;

my $top = shift // '.';
chdir $top or die "cycles.pl: $top: $!\n";

my (%deps, %module);
for my $file (glob('proxy/*.[ch] filters/*.[ch]')) {
    (my $m = $file) =~ s{^.*/|\.[ch]$}{}g;
    $module{$m} = 1;
    open my $fh, '<', $file or die "cycles.pl: $file: $!\n";
    while (<$fh>) {
        next unless /^\s*#\s*include\s+"(?:[^"]*\/)?([^"\/]+)\.h"/;
        push @{$deps{$m}}, $1 if $1 ne $m;
    }
}
for my $m (keys %deps) {
    my %seen;
    $deps{$m} = [grep { $module{$_} && !$seen{$_}++ } @{$deps{$m}}];
}

my ($next, %index, %low, %on_stack, @stack, @cycles) = (0);
sub visit {
    my ($v) = @_;
    $index{$v} = $low{$v} = $next++;
    push @stack, $v;
    $on_stack{$v} = 1;
    for my $w (@{$deps{$v} // []}) {
        if (!defined $index{$w}) {
            visit($w);
            $low{$v} = $low{$w} if $low{$w} < $low{$v};
        } elsif ($on_stack{$w} && $index{$w} < $low{$v}) {
            $low{$v} = $index{$w};
        }
    }
    return if $low{$v} != $index{$v};
    my @scc;
    while (1) {
        my $w = pop @stack;
        $on_stack{$w} = 0;
        push @scc, $w;
        last if $w eq $v;
    }
    push @cycles, [sort @scc] if @scc > 1;
}
visit($_) for grep { !defined $index{$_} } sort keys %module;

for my $scc (@cycles) {
    my %in = map { $_ => 1 } @$scc;
    print "include cycle: @$scc\n";
    for my $m (@$scc) {
        print "  $m -> $_\n" for grep { $in{$_} } @{$deps{$m}};
    }
}
printf "%d module(s), %d include cycle(s)\n", scalar(keys %module), scalar(@cycles);
exit(@cycles ? 1 : 0);
