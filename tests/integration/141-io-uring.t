#!/usr/bin/perl
# 141-io-uring.t: the io_uring engine and its switch (issue 22). Built with io_uring (the
# default when liburing is there), each worker holds one io_uring instance (an
# anon_inode:[io_uring] descriptor in /proc/PID/fd) and says at start that it reads and writes
# through it; `io_uring = off` leaves no such descriptor and says readv and writev. Either
# way, concurrent downloads of 4 MiB bodies and a run of short connections all arrive whole.
# A reload that changes the key says it needs a restart and keeps the engine it has.
# The access log's lines ride the submission that sends an iteration's outputs when they go
# to a pipe (stderr, read by cat as a supervisor would): 200 keep-alive requests in a row
# cost lookout two write system calls fewer each (/proc/PID/io syscw: write(2) and
# writev(2), not io_uring's writes) than with stderr a regular file, which takes write(2);
# a named pipe, on which the kernel may refuse a write that must not wait, gets write(2)
# after one try; and every line arrives, whole and in order, every way. Over TLS, OpenSSL's
# records of an answer ride the same submission as its line: 200 keep-alive requests make
# about one write system call each (the request's writev to the broker), not three; and six
# concurrent 4 MiB downloads over TLS, three read slowly, arrive whole, as do three of 32 MiB
# whose clients stop reading for 2 s while a fourth downloads. TLS clients' records are read
# through the ring too: twenty sending at once get their own answers with few recvfrom(2)
# (strace), and four concurrent 8 MiB uploads arrive whole.

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

# One worker, TLS listeners on the ports T (the test CA's certificate), and EXTRA in
# [lookout].
sub tls_conf {
    my ($extra, @t) = @_;
    my $certs = test_certs();
    return <<"EOF" . broker_sections($c, 'prod', { 1 => ["https://127.0.0.1:$t[0]"], 2 => ["https://127.0.0.1:$t[1]"] });
[lookout]
workers = 1
$extra
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}

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

# The curl downloads JOBS (curl_start) waited for: what went wrong with each that did not
# bring a 200 and a body of SHA.
sub bad_bodies {
    my ($sha, @jobs) = @_;
    my @bad;
    for my $h (@jobs) {
        my $r = curl_wait($h);
        push @bad, "status $r->{status} exit $r->{exit} $r->{err}"
            unless $r->{status} == 200 && sha256_hex($r->{body}) eq $sha;
    }
    return @bad;
}

# Six concurrent 4 MiB downloads and twenty short connections through lookout.
sub traffic_ok {
    my ($what) = @_;
    my $n = 4 * 1024 * 1024;
    my @bad = bad_bodies(PulsarBroker::test_bytes_sha256($n),
                         map { curl_start({ timeout => 30 }, "http://127.0.0.1:$q[$_ % 2]/test/bytes?n=$n") } 1 .. 6);
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

# syscw of PID: its write(2), writev(2) and the like so far.
sub syscw {
    my ($pid) = @_;
    my $io = slurp("/proc/$pid/io") // '';
    return $io =~ /^syscw: (\d+)/m ? $1 : undef;
}

# N keep-alive GETs in a row on one connection through lookout at PORT (over TLS when TLS
# is set, with the test CA); the answers' count.
sub in_a_row {
    my ($port, $n, $tls) = @_;
    my $s = $tls
        ? IO::Socket::SSL->new(PeerAddr => '127.0.0.1', PeerPort => $port, SSL_hostname => 'lookout.test',
                               SSL_ca_file => test_certs()->{edge_ca}, Timeout => 5)
        : IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5);
    return 0 unless $s;
    my ($got, $buf) = (0, '');
    for my $i (1 .. $n) {
        print $s "GET /test/status?code=200&row=$i HTTP/1.1\r\nHost: x\r\n\r\n";
        last unless defined answer($s, \$buf, $tls);
        $got++;
    }
    close $s;
    return $got;
}

# One whole 200 answer (head and Content-Length body) from socket S (TLS when TLS is set),
# taken off the front of what *BUF holds, reading more within 5 s as needed: its body, or
# undef.
sub answer {
    my ($s, $buf, $tls) = @_;
    my $end = time + 5;
    for (;;) {
        if ($$buf =~ m{^HTTP/1\.1 200 [^\r]*\r\n((?:[^\r]+\r\n)*)\r\n}) {
            my ($head, $fields) = ($+[0], $1); # copies: the next match resets both
            my ($cl) = $fields =~ /^Content-Length: (\d+)\r$/mi;
            if (defined $cl && length($$buf) >= $head + $cl) {
                my $body = substr($$buf, $head, $cl);
                substr($$buf, 0, $head + $cl) = '';
                return $body;
            }
        }
        return undef if time > $end;
        # what OpenSSL holds already is no news to select
        my $r = ($tls && $s->pending) || IO::Select->new($s)->can_read($end - time)
            ? sysread($s, my $more, 65536) : 0;
        return undef unless $r;
        $$buf .= $more;
    }
}

# A lookout at the listener $q[0] with CONF, its stderr a pipe that cat empties into FILE
# (as a supervisor's): (lookout's pid, cat's pid).
sub start_piped {
    my ($name, $conf, $file) = @_;
    my $cf = "$dir/$name.conf";
    spew($cf, $conf);
    pipe(my $r, my $w) or die "pipe: $!";
    my $cat = fork // die "fork: $!";
    if ($cat == 0) {
        close $w;
        open STDIN, '<&', $r or POSIX::_exit(1);
        open STDOUT, '>', $file or POSIX::_exit(1);
        exec 'cat' or POSIX::_exit(127);
    }
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $r;
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', '/dev/null';
        open STDERR, '>&', $w or POSIX::_exit(1);
        exec lookout_bin(), '-c', $cf or POSIX::_exit(127);
    }
    close $r;
    close $w;
    return ($pid, $cat);
}

# The request numbers of the access lines in TEXT, in their order.
sub rows { return $_[0] =~ m{"GET /test/status\?code=200&row=(\d+)" [^\n]*\n}g }

SKIP: {
    skip "no io_uring here ($engine)", 9 unless $engine eq 'io_uring';
    require IO::Select;
    require POSIX;
    my $n = 200;
    my (%delta, %text);

    # stderr a regular file (start_lookout's log): write(2) for the lines.
    my $l = start_lookout(dir => $dir, name => 'log-file', conf => conf_with("log_level = info"));
    ok($l->started, 'lookout with its access log on stderr, a file, started') or diag($l->log);
    in_a_row($q[0], 5); # the upstream connection opened and kept
    my $before = syscw($l->pid);
    is(in_a_row($q[0], $n), $n, "file: $n answers in a row on one connection");
    my $after = syscw($l->pid);
    $delta{file} = defined $before && defined $after ? $after - $before : undef;
    $l->stop;
    $l->check_sanitizers;
    $text{file} = $l->log // '';

    # stderr a pipe: the lines ride.
    my ($pid, $cat) = start_piped('log-pipe', conf_with("log_level = info"), "$dir/pipe.out");
    ok(wait_port('127.0.0.1', $q[0]), 'lookout with its access log on stderr, a pipe, started');
    in_a_row($q[0], 5);
    $before = syscw($pid);
    is(in_a_row($q[0], $n), $n, "pipe: $n answers in a row on one connection");
    $after = syscw($pid);
    $delta{pipe} = defined $before && defined $after ? $after - $before : undef;
    kill 'TERM', $pid;
    waitpid($pid, 0);
    waitpid($cat, 0); # cat ends with lookout's end of the pipe
    $text{pipe} = slurp("$dir/pipe.out") // '';

    # log.access a named pipe, which this kernel may refuse such a write on
    # (-EOPNOTSUPP): after one try, write(2), and every line all the same.
    my $fifo = "$dir/access.fifo";
    POSIX::mkfifo($fifo, 0600) or die "mkfifo: $!";
    my $fcat = fork // die "fork: $!";
    if ($fcat == 0) {
        open STDIN, '<', $fifo or POSIX::_exit(1);
        open STDOUT, '>', "$dir/fifo.out" or POSIX::_exit(1);
        exec 'cat' or POSIX::_exit(127);
    }
    $l = start_lookout(dir => $dir, name => 'log-fifo', conf => conf_with("log.access = $fifo"));
    ok($l->started, 'lookout with log.access a named pipe started') or diag($l->log);
    in_a_row($q[0], 5);
    is(in_a_row($q[0], $n), $n, "named pipe: $n answers in a row on one connection");
    $l->stop;
    $l->check_sanitizers;
    waitpid($fcat, 0);
    $text{fifo} = slurp("$dir/fifo.out") // '';

    for my $name (qw(file pipe fifo)) {
        is_deeply([ rows($text{$name}) ], [ 1 .. 5, 1 .. $n ], "$name: every line, whole, in order")
            or diag(substr($text{$name}, 0, 3000));
    }
    ok(defined $delta{pipe} && defined $delta{file} && $delta{pipe} <= $delta{file} - 1.5 * $n,
       sprintf('the lines on the pipe rode io_uring: %s write system calls for %d requests, against %s to a file',
               $delta{pipe} // '?', $n, $delta{file} // '?'));
}

# TLS: OpenSSL's records of an answer go in the same submission as the line (and as the
# other connections' outputs), not by a write(2) each. The request to the broker, alone in
# its iteration, still takes one writev: about one write system call a request, where the
# records and the line by write(2) made three.
SKIP: {
    skip "no io_uring here ($engine)", 6 unless $engine eq 'io_uring';
    require IO::Select;
    require IO::Socket::SSL;
    require POSIX;
    my $n = 200;
    my $certs = test_certs();
    my @t = free_ports(2);
    my $conf = tls_conf('log_level = info', @t);
    my ($pid, $cat) = start_piped('tls-pipe', $conf, "$dir/tls-pipe.out");
    ok(wait_port('127.0.0.1', $t[0]), 'lookout with a TLS listener and its access log on a pipe started');
    in_a_row($t[0], 5, 1);
    my $before = syscw($pid);
    is(in_a_row($t[0], $n, 1), $n, "TLS: $n answers in a row on one connection");
    my $after = syscw($pid);
    my $delta = defined $before && defined $after ? $after - $before : undef;
    # Six concurrent 4 MiB downloads over TLS, three of them read slowly: rounds with
    # several outputs, records the kernel takes only part of, the rest sent once the
    # socket takes more.
    my $big = 4 * 1024 * 1024;
    my @bad = bad_bodies(PulsarBroker::test_bytes_sha256($big), map {
        curl_start({ timeout => 30 }, '--cacert', $certs->{edge_ca}, '--resolve', "lookout.test:$t[0]:127.0.0.1",
                   ($_ % 2 ? ('--limit-rate', '4M') : ()), "https://lookout.test:$t[0]/test/bytes?n=$big")
    } 1 .. 6);
    is(scalar @bad, 0, 'TLS: six concurrent 4 MiB bodies, three read slowly, arrived whole') or diag(join "\n", @bad);
    # Three clients that stop reading a 32 MiB body each for a while, as another downloads:
    # rounds of several outputs whose records the kernel takes only part of, the rest sent
    # once each socket takes more.
    my $huge = 32 * 1024 * 1024;
    my $want = PulsarBroker::test_bytes_sha256($huge);
    my @paused = grep { defined } map {
        IO::Socket::SSL->new(PeerAddr => '127.0.0.1', PeerPort => $t[0], SSL_hostname => 'lookout.test',
                             SSL_ca_file => $certs->{edge_ca}, Timeout => 10)
    } 1 .. 3;
    syswrite $_, "GET /test/bytes?n=$huge HTTP/1.1\r\nHost: lookout.test\r\nConnection: close\r\n\r\n" for @paused;
    my $other = curl_start({ timeout => 30 }, '--cacert', $certs->{edge_ca}, '--resolve',
                           "lookout.test:$t[0]:127.0.0.1", "https://lookout.test:$t[0]/test/bytes?n=$huge");
    sleep 2;
    my @whole;
    for my $sock (@paused) {
        my $b = body_reader($sock, wait => 30);
        $b->{read}->($huge);
        push @whole, $b->{got} == $huge && $b->{sha}->hexdigest eq $want ? 'whole' : "$b->{got} bytes";
    }
    my @o = bad_bodies($want, $other);
    push @whole, @o ? "curl: @o" : 'whole';
    is("@whole", 'whole whole whole whole',
       'TLS: three 32 MiB bodies read after a 2 s pause, and a fourth alongside, arrived whole');
    kill 'TERM', $pid;
    waitpid($pid, 0);
    waitpid($cat, 0);
    my $text = slurp("$dir/tls-pipe.out") // '';
    is_deeply([ rows($text) ], [ 1 .. 5, 1 .. $n ], 'TLS: every line, whole, in order')
        or diag(substr($text, 0, 3000));
    ok(defined $delta && $delta <= 1.5 * $n,
       sprintf('TLS answers and their lines rode io_uring: %s write system calls for %d requests',
               $delta // '?', $n));
}

# TLS reads: the records of clients whose sockets an iteration finds readable are read in
# one io_uring submission, into memory, where OpenSSL reads them (no recvfrom(2) each, as
# its socket BIO made). Twenty keep-alive clients each send a request at once, ten times
# over: each gets its own answers (the broker's sha256 of its body), and a system call
# tracer sees far fewer recvfrom(2) than requests. Four clients at once upload 8 MiB
# each, in records that fill the ring's reads (the rest read from the socket after them):
# the broker gets every body whole.
SKIP: {
    skip "no io_uring here ($engine)", 5 unless $engine eq 'io_uring';
    require IO::Select;
    require IO::Socket::SSL;
    require POSIX;
    my $certs = test_certs();
    my @t = free_ports(2);
    my $conf = tls_conf('', @t);
    my $l = start_lookout(dir => $dir, name => 'tls-reads', conf => $conf);
    ok($l->started, 'lookout with a TLS listener and one worker started') or diag($l->log);
    my @s = grep { defined } map {
        IO::Socket::SSL->new(PeerAddr => '127.0.0.1', PeerPort => $t[0], SSL_hostname => 'lookout.test',
                             SSL_ca_file => $certs->{edge_ca}, Timeout => 5)
    } 1 .. 20;
    my @buf = ('') x @s;
    # Requests with a body of their own on each, all sent before any answer is read: how
    # many answers carried the sha256 of their own request's body.
    my $round = sub {
        my ($r) = @_;
        my @want;
        for my $k (0 .. $#s) {
            my $body = "client $k round $r";
            push @want, sha256_hex($body);
            print { $s[$k] } "POST /test/echo HTTP/1.1\r\nHost: lookout.test\r\nContent-Length: "
                . length($body) . "\r\n\r\n$body";
        }
        my $right = 0;
        for my $k (0 .. $#s) {
            my $got = answer($s[$k], \$buf[$k], 1) // '';
            $right++ if $got =~ /"sha256"\s*:\s*"$want[$k]"/;
        }
        return $right;
    };
    $round->(0); # handshakes done, and the broker connections open
    my $strace = -x '/usr/bin/strace' ? '/usr/bin/strace' : undef;
    my ($tracer, $trace) = (undef, "$dir/tls-reads.strace");
    if ($strace) {
        $tracer = fork // die "fork: $!";
        if ($tracer == 0) {
            open STDERR, '>', "$dir/strace.err";
            exec { $strace } $strace, '-f', '-e', 'trace=recvfrom', '-o', $trace, '-p', $l->pid
                or POSIX::_exit(127);
        }
        # "Process N attached", once for each thread, or why not (ptrace refused)
        wait_until(sub { (() = (slurp("$dir/strace.err") // '') =~ /attached/g) >= 2 }, 5);
    }
    my $right = 0;
    $right += $round->($_) for 1 .. 10;
    is($right, 10 * @s, sprintf('TLS: %d clients sending at once, ten times: each answer its own', scalar @s));
    SKIP: {
        skip 'no strace here', 1 unless $tracer;
        kill 'INT', $tracer;
        waitpid($tracer, 0);
        my $err = slurp("$dir/strace.err") // '';
        skip "strace could not attach: $err", 1 unless $err =~ /attached/;
        my $calls = () = (slurp($trace) // '') =~ /recvfrom\(/g;
        ok($calls <= 5 * @s, sprintf('the records came through the ring: %d recvfrom(2) for %d requests',
                                     $calls, 10 * @s))
            or diag(slurp("$dir/strace.err") // '');
    }
    close $_ for @s;

    # Uploads whose records fill the ring's reads.
    my $size = 8 * 1024 * 1024;
    my $file = "$dir/upload.bin";
    open my $fh, '>:raw', $file or die "$file: $!";
    my $bytes = PulsarBroker::test_bytes($size);
    print $fh $bytes;
    close $fh;
    my $want = sha256_hex($bytes);
    my @up = map {
        curl_start({ timeout => 60 }, '--cacert', $certs->{edge_ca}, '--resolve', "lookout.test:$t[0]:127.0.0.1",
                   '--data-binary', "\@$file", '-H', 'Content-Type: application/octet-stream',
                   "https://lookout.test:$t[0]/test/echo")
    } 1 .. 4;
    my @bad;
    for my $h (@up) {
        my $r = curl_wait($h);
        push @bad, "status $r->{status} exit $r->{exit} $r->{err} " . substr($r->{body} // '', 0, 200)
            unless $r->{status} == 200 && ($r->{body} // '') =~ /"sha256"\s*:\s*"$want"/;
    }
    is(scalar @bad, 0, 'TLS: four concurrent 8 MiB uploads arrived whole') or diag(join "\n", @bad);
    $l->stop;
    $l->check_sanitizers;
    unlike($l->log // '', qr/\[(?:error|crit)\]/, 'and lookout logged no error') or diag($l->log);
}

done_testing();
