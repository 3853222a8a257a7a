#!/usr/bin/perl
# 10-cli.t: the command line (issue 2 item 4, CONTRACT §2 and §5). --version and --help;
# --check prints the resolved listener map and exits 0; a bad config (unknown key,
# duplicate key, bad URL, unknown listener name, conflicting binds) exits 1 with
# `file:line: message` and never starts serving; -c with a missing file exits 1.
# No brokers are needed: --check only validates.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time);

use Lookout;

my $dir = tmp_dir();
my ($w, $p1, $p2, $q1, $q2, $s) = free_ports(6);

# A valid config, with comments in both styles and at line ends (CONTRACT §2).
my $good = <<"EOF";
# lookout config for 10-cli.t
; a semicolon comment
[lookout]
workers = 1          # trailing comment
log_level = info     ; another one

[pulsar prod]
internalListenerName = internal
lookupListenerName   = external
webServiceUrl = http://127.0.0.1:$w

[broker prod/b1]
advertisedListeners = internal:pulsar://127.0.0.1:16651,internal:http://127.0.0.1:$p1,external:http://127.0.0.1:$q1

[broker prod/b2]
advertisedListeners = internal:pulsar://127.0.0.1:16652,internal:http://127.0.0.1:$p2,external:http://127.0.0.1:$q2
EOF

# line_of(TEXT, REGEX): 1-based number of the first line of TEXT matching REGEX.
sub line_of {
    my ($text, $re) = @_;
    my @l = split /\n/, $text, -1;
    for my $i (0 .. $#l) { return $i + 1 if $l[$i] =~ $re }
    die "line_of: no line matches $re";
}

# blocks(TEXT): each line together with the more-indented lines that follow it.
sub blocks {
    my @l = grep { /\S/ } split /\n/, $_[0];
    my @b;
    for my $i (0 .. $#l) {
        my ($ind) = $l[$i] =~ /^(\s*)/;
        my $blk = $l[$i];
        for my $j ($i + 1 .. $#l) {
            my ($ind2) = $l[$j] =~ /^(\s*)/;
            last if length $ind2 <= length $ind;
            $blk .= "\n$l[$j]";
        }
        push @b, $blk;
    }
    return @b;
}

subtest '--version and --help' => sub {
    my $r = run_lookout(args => ['--version'], dir => $dir);
    is($r->{exit}, 0, '--version exits 0');
    like($r->{out}, qr/^lookout \d+\.\d+(?:\.\d+)?\S*\s*$/, '... prints "lookout X.Y.Z"');
    $r = run_lookout(args => ['--help'], dir => $dir);
    is($r->{exit}, 0, '--help exits 0');
    like($r->{out}, qr/-c\b/, '... mentions -c');
    like($r->{out}, qr/--check/, '... mentions --check');
    like($r->{out}, qr/--version/, '... mentions --version');
    like($r->{out}, qr/--live/, '... mentions --live');
    spew("$dir/good-live.conf", $good);
    $r = run_lookout(args => [ '--live', '-c', "$dir/good-live.conf" ], dir => $dir);
    is($r->{exit}, 1, '--live without --check exits 1');
    like($r->{out}, qr/--live goes with --check/, '... saying so');
    $r = run_lookout(args => [ '--check', '--live', '-c', "$dir/good-live.conf" ], dir => $dir);
    is($r->{exit}, 0, '--check --live of a map with no store: exits 0');
    like($r->{out}, qr/^  broker prod\/b1\n/m, '... prints the map, no live or static marks without a store');
    $r = run_lookout(args => ['--no-such-option'], dir => $dir);
    ok(defined $r->{exit} && $r->{exit} != 0, 'an unknown option exits non-zero');
    $r = run_lookout(args => [], dir => $dir);
    ok(defined $r->{exit} && $r->{exit} != 0, 'no -c exits non-zero');
    like($r->{out}, qr/-c|config/i, '... and says a config is needed');
};

subtest '-c with a missing file' => sub {
    my $missing = "$dir/no-such.conf";
    for my $check (0, 1) {
        my $r = run_lookout(args => [ ($check ? '--check' : ()), '-c', $missing ], dir => $dir, timeout => 5);
        is($r->{exit}, 1, ($check ? '--check ' : '') . '-c missing file exits 1');
        like($r->{out}, qr/\Q$missing\E/, '... naming the file');
        like($r->{out}, qr/No such file|not found|cannot open|does not exist/i, '... and why');
    }
};

subtest '--check prints the map' => sub {
    my $t0 = time;
    my $r = run_lookout(conf => $good, args => ['--check'], dir => $dir, name => 'good', timeout => 5);
    is($r->{exit}, 0, 'valid config: exit 0') or diag($r->{out});
    ok(time - $t0 < 4 && !$r->{timed_out}, '... at once, without serving');
    my $out = $r->{out};
    my @blocks = blocks($out);
    my %ext = (1 => $q1, 2 => $q2);
    my %int = (1 => $p1, 2 => $p2);
    for my $n (1, 2) {
        my $o = 3 - $n;
        # A bound address and the broker it routes to, in one entry of the map.
        ok((grep { /127\.0\.0\.1:$ext{$n}\b/ && /\bb$n\b/ && !/127\.0\.0\.1:$ext{$o}\b/ && !/\bb$o\b/ } @blocks),
           "127.0.0.1:$ext{$n} is shown routing to b$n");
        # The internal -> lookup mapping, on one line.
        like($out, qr/^.*(?:127\.0\.0\.1:$int{$n}\b.*127\.0\.0\.1:$ext{$n}\b|127\.0\.0\.1:$ext{$n}\b.*127\.0\.0\.1:$int{$n}\b).*$/m,
             "b$n: internal http address mapped to its lookup address");
    }
    like($out, qr/127\.0\.0\.1:$w\b/, 'the service address is in the map');
    ok(!(grep { /127\.0\.0\.1:$w\b/ && (/\bb1\b/ xor /\bb2\b/) } grep { !/\n/ } @blocks),
       '... not as one broker\'s address');
    # --check must not bind: the addresses are still free afterwards, and are not needed.
    my $blocker = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $q1, Listen => 1, ReuseAddr => 1);
    ok($blocker, 'hold one lookup address busy');
    $r = run_lookout(conf => $good, args => ['--check'], dir => $dir, name => 'good2', timeout => 5);
    is($r->{exit}, 0, '--check passes while an address is in use (it only validates)');
    close $blocker if $blocker;
};

subtest 'long lines' => sub {
    # "Lines have no length limit" (Debian's libinih stops at 200): a 5000-byte comment
    # and a 2000+ byte advertisedListeners with many listeners.
    my @more = map { "l$_:http://127.0.0.1:" . (40000 + $_) } 1 .. 100;
    my $long = $good;
    $long =~ s/^(\[broker prod\/b1\]\nadvertisedListeners = [^\n]*)/"# " . ("x" x 5000) . "\n$1," . join(',', @more)/me;
    cmp_ok(length((grep { /l100:/ } split /\n/, $long)[0]), '>', 2000, 'a line over 2000 bytes');
    my $r = run_lookout(conf => $long, args => ['--check'], dir => $dir, name => 'long', timeout => 5);
    is($r->{exit}, 0, 'accepted') or diag($r->{out});
    like($r->{out}, qr/127\.0\.0\.1:$q1\b/, '... and the map still has b1\'s lookup address (after the long line)');
};

subtest '--check shows internal_networks, normalized' => sub {
    # The networks lookout may dial: each as a CIDR, a bare address as a /32 or /128, an
    # IPv4-mapped network as the IPv4 one it maps; a cluster without the key shows none.
    (my $t = $good) =~ s/^(webServiceUrl = [^\n]*\n)/$1internal_networks = 127.0.0.0\/8, 10.1.2.3 ,fd00::\/8, ::ffff:192.168.0.0\/112\n/m;
    my $r = run_lookout(conf => $t, args => ['--check'], dir => $dir, name => 'nets', timeout => 5);
    is($r->{exit}, 0, 'accepted') or diag($r->{out});
    like($r->{out}, qr{^  internal networks 127\.0\.0\.0/8, 10\.1\.2\.3/32, fd00::/8, 192\.168\.0\.0/16$}m,
         'listed under the cluster, normalized') or diag($r->{out});
    $r = run_lookout(conf => $good, args => ['--check'], dir => $dir, name => 'nonets', timeout => 5);
    unlike($r->{out}, qr/internal networks/, 'and not shown when unset');
};

# Each bad config: a description, the text, the regex of the line the error must name,
# and a regex the message must match.
my @bad;
{
    my $t = $good;
    $t =~ s/^(workers = 1.*)$/$1\nworkerz = 2/m;
    push @bad, [ 'unknown key in [lookout]', $t, qr/^workerz/, qr/workerz/ ];
}
{
    my $t = $good;
    $t =~ s/^(webServiceUrl = .*)$/$1\nredirect = follow/m;
    push @bad, [ 'unknown key in [pulsar]', $t, qr/^redirect =/, qr/redirect\b/ ];
}
{
    my $t = $good;
    $t =~ s/^(advertisedListeners = .*$q2)$/$1\nadvertisedListener = internal:http:\/\/127.0.0.1:1/m;
    push @bad, [ 'unknown key in [broker]', $t, qr/^advertisedListener =/, qr/advertisedListener\b/ ];
}
{
    my $t = $good;
    $t =~ s/^(log_level = .*)$/$1\nworkers = 2/m;
    push @bad, [ 'duplicate key', $t, qr/^workers = 2/, qr/duplicate/i ];
}
{
    my $t = $good;
    $t =~ s/^(lookupListenerName .*)$/$1\nlookupListenerName = external/m;
    push @bad, [ 'duplicate key in [pulsar]', $t, qr/^lookupListenerName = external$/, qr/duplicate/i ];
}
{
    my $t = $good;
    $t =~ s{^webServiceUrl = .*$}{webServiceUrl = htp://127.0.0.1:$w}m;
    push @bad, [ 'bad URL scheme (webServiceUrl)', $t, qr/^webServiceUrl/, qr/htp/ ];
}
{
    my $t = $good;
    $t =~ s{external:http://127\.0\.0\.1:$q1}{external:http://127.0.0.1:99999}m;
    push @bad, [ 'bad URL port (advertisedListeners)', $t, qr/127\.0\.0\.1:99999/, qr/99999|port/i ];
}
{
    my $t = $good;
    $t =~ s{external:http://127\.0\.0\.1:$q2}{external:http//127.0.0.1:$q2}m;
    push @bad, [ 'bad URL (no ://)', $t, qr{http//}, qr/./ ];
}
{
    my $t = $good;
    $t =~ s/^lookupListenerName   = external$/lookupListenerName   = extrnal/m;
    # No broker has it: the name is wrong, and the error names its line (issue 6 item 10).
    push @bad, [ 'unknown lookup listener name', $t, qr/^lookupListenerName/, qr/extrnal/ ];
}
{
    my $t = $good;
    $t =~ s/^internalListenerName = internal$/internalListenerName = intern/m;
    push @bad, [ 'unknown internal listener name', $t, qr/^internalListenerName/, qr/intern\b/ ];
}
{
    # Only b2 lacks the lookup listener: its advertisedListeners line is the one to fix.
    my $t = $good;
    $t =~ s{,external:http://127\.0\.0\.1:$q2}{}m;
    push @bad, [ 'a broker without the lookup listener', $t, qr/^advertisedListeners = .*$p2/, qr/'external'/ ];
}
{
    my $t = $good;
    $t =~ s{external:http://127\.0\.0\.1:$q2}{external:http://127.0.0.1:$q1}m;
    push @bad, [ 'two brokers on one IP-literal address', $t, qr/^advertisedListeners = .*$p2/, qr/127\.0\.0\.1:$q1|conflict|b1/ ];
}
{
    # Names on one port, but one TLS and one plaintext: cannot share a socket.
    my $t = $good;
    $t =~ s{external:http://127\.0\.0\.1:$q1}{external:http://b1.lookout.test:$s}m;
    $t =~ s{external:http://127\.0\.0\.1:$q2}{external:https://b2.lookout.test:$s}m;
    $t =~ s/^(webServiceUrl = .*)$/$1\nbind = 127.0.0.1/m;
    push @bad, [ 'TLS and plaintext on one bind', $t, qr/^advertisedListeners = .*$p2/, qr/TLS|plaintext|conflict/i ];
}
{
    # Pulsar binary on a shared plaintext port: no SNI, no Host, nothing to route by.
    my $t = $good;
    $t =~ s{(external:http://127\.0\.0\.1:$q1)}{$1,external:pulsar://b1.lookout.test:$s}m;
    $t =~ s{(external:http://127\.0\.0\.1:$q2)}{$1,external:pulsar://b2.lookout.test:$s}m;
    $t =~ s/^(webServiceUrl = .*)$/$1\nbind = 127.0.0.1/m;
    push @bad, [ 'plaintext pulsar:// brokers sharing a bind', $t, qr/^advertisedListeners = .*$p2/, qr/apart|SNI|share|conflict/i ];
}
{
    # The service address on a broker's lookup address.
    my $t = $good;
    $t =~ s{^webServiceUrl = .*$}{webServiceUrl = http://127.0.0.1:$q1}m;
    push @bad, [ 'service address on a broker address', $t, qr/^(?:webServiceUrl|advertisedListeners = .*$q1)/,
                 qr/127\.0\.0\.1:$q1|conflict/i ];
}
{
    # lookout would dial itself (issue 6 item 11): the service address is b1's internal one.
    my $t = $good;
    $t =~ s{^webServiceUrl = .*$}{webServiceUrl = http://127.0.0.1:$p1}m;
    push @bad, [ 'service address on an internal address', $t, qr/^webServiceUrl/,
                 qr/connect to it as the internal address http:\/\/127\.0\.0\.1:$p1 of broker prod\/b1/ ];
}
{
    # A name binds 0.0.0.0 on its port, which takes connections to b1's internal 127.0.0.1:p1.
    my $t = $good;
    $t =~ s{external:http://127\.0\.0\.1:$q2}{external:http://b2.lookout.test:$p1}m;
    push @bad, [ 'a wildcard bind on an internal address', $t, qr/^advertisedListeners = .*$p2/,
                 qr/bind 0\.0\.0\.0:$p1\b.*internal address http:\/\/127\.0\.0\.1:$p1 of broker prod\/b1/ ];
}
{
    # lookout serves HTTP for b2 (its lookup listener has an http address), and b2's
    # internal listener has no http address to send it to (issue 19 defect 2: still refused).
    my $t = $good;
    $t =~ s{,internal:http://127\.0\.0\.1:$p2}{}m;
    push @bad, [ 'HTTP served for a broker without an internal http address', $t, qr/^advertisedListeners = .*16652/,
                 qr/the lookup listener 'external' has http:\/\/127\.0\.0\.1:$q2, but the internal listener 'internal' has no http or https address/ ];
}
{
    # webServiceUrl over a map of binary addresses only: nowhere to send its requests.
    my $t = $good;
    $t =~ s{,internal:http://127\.0\.0\.1:(?:$p1|$p2)}{}mg;
    $t =~ s{external:http://}{external:pulsar://}mg;
    push @bad, [ 'webServiceUrl over a binary-only map', $t, qr/^webServiceUrl/,
                 qr/webServiceUrl: http:\/\/127\.0\.0\.1:$w has nowhere to go: no broker's internal listener has a http or https address/ ];
}
{
    my $t = $good;
    $t =~ s/^\[broker prod\/b2\]$/[broker staging\/b2]/m;
    push @bad, [ 'broker of an undefined cluster', $t, qr/^\[broker staging/, qr/staging/ ];
}
{
    my $t = $good;
    $t =~ s/^(\[lookout\])$/$1\ntimeout.response = 10/m;
    push @bad, [ 'duration without unit', $t, qr/^timeout\.response/, qr/timeout\.response|duration/ ];
}
{
    my $t = "workers = 1\n$good";
    push @bad, [ 'key outside any section', $t, qr/^workers = 1$/, qr/section|workers/ ];
}

for my $case (@bad) {
    my ($what, $text, $line_re, $msg_re) = @$case;
    subtest "bad config: $what" => sub {
        (my $name = $what) =~ s/\W+/-/g;
        my $r = run_lookout(conf => $text, args => ['--check'], dir => $dir, name => "bad-$name", timeout => 5);
        is($r->{exit}, 1, '--check exits 1');
        my $line = line_of($text, $line_re);
        # Where the error is reported may be one of two lines (listener names): accept
        # the first line matching, or any later line the regex also matches.
        my @lines = do { my @l = split /\n/, $text, -1; grep { $l[ $_ - 1 ] =~ $line_re } 1 .. @l };
        my $alt = join '|', @lines;
        like($r->{out}, qr/\Q$r->{conf}\E:(?:$alt): /, "file:line: names line " . join(' or ', @lines))
            or diag($r->{out});
        like($r->{out}, $msg_re, '... and the message says what is wrong');
        is(scalar(() = $r->{out} =~ /\Q$r->{conf}\E:\d+:/g), 1, '... one error line');
        # Without --check it refuses to start: exits 1 at once instead of serving.
        my $run = run_lookout(conf => $text, dir => $dir, name => "bad-run-$name", timeout => 5);
        is($run->{exit}, 1, 'lookout -c refuses to start (exit 1)');
        like($run->{out}, qr/\Q$run->{conf}\E:(?:$alt): /, '... with the same file:line');
    };
}

subtest 'a binary-only map, as in Pulsar\'s broker.conf examples, is accepted (issue 19 defect 2)' => sub {
    my $t = $good;
    $t =~ s{,internal:http://127\.0\.0\.1:(?:$p1|$p2)}{}mg;
    $t =~ s{external:http://}{external:pulsar://}mg;
    $t =~ s{^webServiceUrl = .*$}{serviceUrl = pulsar://127.0.0.1:$w}m;
    my $r = run_lookout(conf => $t, args => ['--check'], dir => $dir, name => 'binonly', timeout => 5);
    is($r->{exit}, 0, 'exit 0') or diag($r->{out});
    like($r->{out}, qr/^    map      pulsar:\/\/127\.0\.0\.1:16651 -> pulsar:\/\/127\.0\.0\.1:$q1$/m, 'b1 mapped') or diag($r->{out});
    like($r->{out}, qr/^    map      pulsar:\/\/127\.0\.0\.1:16652 -> pulsar:\/\/127\.0\.0\.1:$q2$/m, 'b2 mapped');
    like($r->{out}, qr/^  127\.0\.0\.1 -> broker prod\/b1 at pulsar:\/\/127\.0\.0\.1:16651$/m, 'its bind routes to b1\'s binary address');
};

subtest 'names sharing a plaintext http bind are fine (Host tells them apart)' => sub {
    my $t = $good;
    $t =~ s{external:http://127\.0\.0\.1:$q1}{external:http://b1.lookout.test:$s}m;
    $t =~ s{external:http://127\.0\.0\.1:$q2}{external:http://b2.lookout.test:$s}m;
    $t =~ s/^(webServiceUrl = .*)$/$1\nbind = 127.0.0.1/m;
    my $r = run_lookout(conf => $t, args => ['--check'], dir => $dir, name => 'shared', timeout => 5);
    is($r->{exit}, 0, 'exit 0') or diag($r->{out});
    like($r->{out}, qr/127\.0\.0\.1:$s\b/, 'one bind 127.0.0.1:PORT in the map');
    like($r->{out}, qr/b1\.lookout\.test/, '... with b1\'s name');
    like($r->{out}, qr/b2\.lookout\.test/, '... and b2\'s');
};

done_testing();
