package Lookout;

# Harness helpers for lookout's integration tests (tests/integration/*.t, Test::More).
#
# A test writes its config from a heredoc, starts lookout with start_lookout(), talks to it
# with curl() or http_raw(), and stops it (or lets the object go out of scope). Every
# helper is bounded in time: nothing here can hang a prove run. Processes are started
# with fork+exec and ended by their own pid only.
#
#   use FindBin; use lib "$FindBin::Bin/lib";
#   use Test::More; use Lookout; use PulsarBroker;
#   my $dir  = tmp_dir();
#   my $port = free_port();
#   my $lk   = start_lookout(dir => $dir, conf => <<"EOF");
#   [lookout]
#   admin = 127.0.0.1:$port
#   EOF
#   my $r = curl("http://127.0.0.1:$port/healthz");
#   is($r->{status}, 200, 'healthz');
#   $lk->stop;

use strict;
use warnings;

use Carp qw(croak);
use Cwd qw(abs_path);
use Errno qw(EINTR);
use Exporter qw(import);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use POSIX qw(WNOHANG);
use Socket qw(SHUT_WR);
use Test::More ();
use Time::HiRes qw(time sleep);

our @EXPORT = qw(repo_top lookout_bin tmp_dir test_certs free_port free_ports wait_port
                 wait_until start_lookout run_lookout curl http_raw parse_response
                 need_tools need_modules slurp spew conf_ports curl_start curl_wait
                 broker_sections rss_kb peak_rss_kb lookout_error_ok
                 lookout_error_problems hosts_argv closed_after start_haproxy start_haproxy_tcp
                 pp_v2_header body_reader scripted_http_broker);

# ---- locations -----------------------------------------------------------------------------

# repo_top(): absolute path of the repository's top directory. This module lives in
# tests/integration/lib, as the .t files live in tests/integration, so both give the
# same answer; the module's own path does not depend on the caller's cwd or FindBin.
my $TOP;
sub repo_top {
    $TOP //= abs_path(dirname(abs_path(__FILE__)) . '/../../..');
    return $TOP;
}

# lookout_bin(): $ENV{LOOKOUT_BIN}, or ./lookout at the top of the repository.
sub lookout_bin {
    my $b = $ENV{LOOKOUT_BIN} // repo_top() . '/lookout';
    return abs_path($b) // $b;
}

# tmp_dir(): a fresh directory, removed at exit unless LOOKOUT_KEEP=1 (then its path is
# printed as a TAP comment so it can be inspected).
sub tmp_dir {
    my $d = tempdir('lookout-test-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{LOOKOUT_KEEP});
    Test::More::note("keeping $d") if $ENV{LOOKOUT_KEEP};
    return $d;
}

sub slurp {
    my ($file) = @_;
    open my $fh, '<', $file or return undef;
    binmode $fh;
    local $/;
    return scalar <$fh>;
}

sub spew {
    my ($file, $data) = @_;
    open my $fh, '>', $file or croak "spew: $file: $!";
    binmode $fh;
    print $fh $data;
    close $fh or croak "spew: $file: $!";
    return $file;
}

# test_certs(): run certs/gen-test-certs.sh (idempotent, fast) and return absolute paths:
# { dir, edge_ca, edge_crt, edge_key, edge2_crt, edge2_key, internal_ca, broker_crt,
#   broker_key }. The directory is $ENV{LOOKOUT_CERTS_DIR} or certs/ in the repository.
my $CERTS;
sub test_certs {
    return $CERTS if $CERTS;
    my $dir = $ENV{LOOKOUT_CERTS_DIR} // repo_top() . '/certs';
    my $out = qx{sh '@{[ repo_top() ]}/certs/gen-test-certs.sh' '$dir' 2>&1};
    croak "gen-test-certs.sh failed:\n$out" if $?;
    $dir = abs_path($dir);
    $CERTS = {
        dir         => $dir,
        edge_ca     => "$dir/edge-ca.crt",
        edge_crt    => "$dir/edge.crt",     edge_key   => "$dir/edge.key",
        edge2_crt   => "$dir/edge2.crt",    edge2_key  => "$dir/edge2.key",
        internal_ca => "$dir/internal-ca.crt",
        broker_crt  => "$dir/broker.crt",   broker_key => "$dir/broker.key",
        client_ca   => "$dir/client-ca.crt",   client_crl => "$dir/client.crl",
        client_none_crl => "$dir/client-none.crl",
        map { my $n = $_ =~ s/-/_/gr; ("${n}_crt" => "$dir/$_.crt", "${n}_key" => "$dir/$_.key") }
            qw(client client-revoked client-expired client-other),
    };
    return $CERTS;
}

# ---- skipping ------------------------------------------------------------------------------

# need_tools(NAME...): plan skip_all unless every program is on PATH. Only for tools a
# test genuinely cannot do without and that a machine may legitimately lack.
sub need_tools {
    my @missing = grep { !_which($_) } @_;
    Test::More::plan(skip_all => "missing tools: @missing") if @missing;
}

# need_modules(MODULE...): plan skip_all unless every Perl module loads.
sub need_modules {
    my @missing = grep { my $m = $_; !eval "require $m; 1" } @_;
    Test::More::plan(skip_all => "missing Perl modules: @missing") if @missing;
}

sub _which {
    my ($prog) = @_;
    return -x $prog ? $prog : undef if $prog =~ m{/};
    for my $d (split /:/, $ENV{PATH} // '') {
        return "$d/$prog" if -x "$d/$prog" && !-d _;
    }
    return undef;
}

# ---- ports ---------------------------------------------------------------------------------

# free_port([HOST]): a TCP port on HOST (default 127.0.0.1) that nothing listens on now.
# Picked at random in 20000-32767, below Linux's ephemeral range so that outgoing
# connections do not grab it, and never handed out twice by this process. Another process
# can still take it before the test binds it; the range is large enough that a clash
# between parallel tests is rare.
my %GIVEN;
sub free_port {
    my ($host) = @_;
    $host //= '127.0.0.1';
    for (1 .. 200) {
        my $p = 20000 + int(rand(12768));
        next if $GIVEN{$p};
        my $s = IO::Socket::INET->new(LocalAddr => $host, LocalPort => $p, Proto => 'tcp',
                                      Listen => 1, ReuseAddr => 0) or next;
        close $s;
        $GIVEN{$p} = 1;
        return $p;
    }
    croak "free_port: no free port found on $host";
}

# free_ports(N [, HOST]): N distinct free ports.
sub free_ports {
    my ($n, $host) = @_;
    return map { free_port($host) } 1 .. $n;
}

# wait_port(HOST, PORT [, TIMEOUT=10]): true once HOST:PORT accepts a connection.
sub wait_port {
    my ($host, $port, $timeout) = @_;
    return wait_until(sub {
        my $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port, Proto => 'tcp', Timeout => 1);
        return 0 unless $s;
        close $s;
        return 1;
    }, $timeout // 10);
}

# closed_after(PORT, BYTES [, TIMEOUT=10]): connects to 127.0.0.1:PORT, sends BYTES and
# reads: 0 when the peer closed without answering, the bytes read when it answered, undef
# when it did neither within TIMEOUT (or the connection failed).
sub closed_after {
    my ($port, $bytes, $timeout) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp', Timeout => 5)
        or return undef;
    syswrite $s, $bytes;
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm($timeout // 10);
    my $n = eval { sysread($s, my $buf, 16) };
    alarm 0;
    close $s;
    return $n;
}

# start_haproxy(DIR, CONFIG): HAProxy in the foreground (-db) on CONFIG, written to
# DIR/haproxy.cfg, its log and errors in DIR/haproxy.out; stopped when the test ends.
# Returns its pid. For a test that needs HAProxy on either side of lookout (need_tools).
my @HAPROXY;
sub start_haproxy {
    my ($dir, $config) = @_;
    spew("$dir/haproxy.cfg", $config);
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$dir/haproxy.out";
        open STDERR, '>&', \*STDOUT;
        { exec 'haproxy', '-db', '-f', "$dir/haproxy.cfg" }
        POSIX::_exit(127);
    }
    push @HAPROXY, [ $pid, $$ ];
    return $pid;
}
END { local $?; for (@HAPROXY) { next unless $_->[1] == $$; kill 'TERM', $_->[0]; waitpid($_->[0], 0) } }

# start_haproxy_tcp(DIR, SECTIONS): start_haproxy with its log on stderr and TCP mode
# (connect 2 s, client and server 20 s) by default, then SECTIONS (frontends, backends).
sub start_haproxy_tcp {
    my ($dir, $sections) = @_;
    return start_haproxy($dir, <<"EOF" . $sections);
global
    log stderr local0 info
defaults
    mode tcp
    timeout connect 2s
    timeout client 20s
    timeout server 20s
EOF
}

# pp_v2_header(SRC, DPORT): a PROXY protocol v2 header (PROXY, TCP4) from SRC (an IPv4
# address, source port 4711) to 127.0.0.1:DPORT, as a load balancer sends it.
sub pp_v2_header {
    my ($src, $dport) = @_;
    return "\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c" . pack('C4C4nn', split(/\./, $src), 127, 0, 0, 1, 4711, $dport);
}

# wait_until(CODE [, TIMEOUT=10 [, STEP=0.05]]): poll CODE until it returns true (and
# return that value) or TIMEOUT seconds pass (return false).
sub wait_until {
    my ($code, $timeout, $step) = @_;
    my $end = time + ($timeout // 10);
    while (1) {
        my $v = $code->();
        return $v if $v;
        return 0 if time >= $end;
        sleep($step // 0.05);
    }
}

# ---- running lookout -----------------------------------------------------------------------

# conf_ports(TEXT): the host:port addresses a config makes lookout listen on, per
# CONTRACT §2: [lookout] admin, each cluster's webServiceUrl / serviceUrl /
# bootstrap.servers, and every broker's lookup-listener entries. A name (not an IP literal)
# binds the cluster's `bind` (default 0.0.0.0), which we probe on 127.0.0.1.
sub conf_ports {
    my ($text) = @_;
    my (%cl, @brokers, @addrs, $sec);
    for my $line (split /\n/, $text) {
        $line =~ s/(?:^|\s)[#;].*//;
        next unless $line =~ /\S/;
        if ($line =~ /^\s*\[\s*(\S+)(?:\s+(\S+))?\s*\]/) {
            $sec = { kind => $1, name => $2 // '' };
            if ($sec->{kind} eq 'broker') { push @brokers, $sec }
            elsif ($sec->{kind} ne 'lookout') { $cl{ $sec->{name} } = $sec }
            next;
        }
        my ($k, $v) = $line =~ /^\s*([^=\s]+)\s*=\s*(.*?)\s*$/ or next;
        next unless $sec;
        $sec->{$k} = $v;
        push @addrs, $v if $sec->{kind} eq 'lookout' && $k eq 'admin';
    }
    my $hp = sub {
        my ($c, $host, $port) = @_;
        $host =~ s/^\[(.*)\]$/$1/;
        $host = $c->{bind} // '0.0.0.0' unless $host =~ /^\d+\.\d+\.\d+\.\d+$/;
        $host = '127.0.0.1' if $host eq '0.0.0.0';
        return "$host:$port";
    };
    for my $c (values %cl) {
        for my $k (qw(webServiceUrl serviceUrl bootstrap.servers)) {
            next unless defined $c->{$k};
            for my $u (split /\s*,\s*/, $c->{$k}) {
                push @addrs, $hp->($c, $1, $2) if $u =~ m{^(?:[a-z+]+://)?([^/:]+|\[[^\]]+\]):(\d+)};
            }
        }
    }
    for my $b (@brokers) {
        my ($cname) = $b->{name} =~ m{^([^/]+)/};
        my $c = $cl{ $cname // '' } or next;
        my $ln = $c->{lookupListenerName} or next;
        my $list = $b->{advertisedListeners} // $b->{'advertised.listeners'} // '';
        for my $e (split /\s*,\s*/, $list) {
            # Pulsar "name:scheme://h:p" or Kafka "NAME://h:p".
            if ($e =~ m{^([^:]+):[a-z+]+://([^/:]+|\[[^\]]+\]):(\d+)} && $1 eq $ln) {
                push @addrs, $hp->($c, $2, $3);
            } elsif ($e =~ m{^([^:/]+)://([^/:]+|\[[^\]]+\]):(\d+)} && $1 eq $ln) {
                push @addrs, $hp->($c, $2, $3);
            }
        }
    }
    my %seen;
    return grep { !$seen{$_}++ } @addrs;
}

# start_lookout(%opt): write the config and start `lookout -c FILE` in the background.
#   conf    => TEXT       config text (CONTRACT §2), written to DIR/NAME.conf
#   conf_file => FILE     use this file instead of conf
#   dir     => DIR        where the config and log go (default: tmp_dir())
#   name    => NAME       file stem (default "lookout")
#   args    => [...]      extra arguments after -c FILE
#   env     => {...}      extra environment
#   wait    => [h:p...]   addresses to wait for (default: conf_ports of the config)
#   timeout => SECS       how long to wait for them (default 10)
#   quiet   => 1          no diag when it fails to start (tests that expect a failure)
# Returns a Lookout object. stderr and stdout go to DIR/NAME.log. If lookout exits or its
# ports do not open in time, $lk->started is false and the log is printed as a diag.
sub start_lookout {
    my (%o) = @_;
    my $bin = lookout_bin();
    croak "lookout binary not found at $bin (build it, or set LOOKOUT_BIN)" unless -x $bin;
    my $dir = $o{dir} // tmp_dir();
    my $name = $o{name} // 'lookout';
    my $conf = $o{conf_file} // spew("$dir/$name.conf", $o{conf} // croak "start_lookout: conf => TEXT required");
    my $log = "$dir/$name.log";
    my @wait = @{ $o{wait} // [ conf_ports(slurp($conf) // '') ] };

    my $self = bless { pid => undef, dir => $dir, conf => $conf, log_file => $log,
                       owner => $$, started => 0, status => undef }, __PACKAGE__;
    $self->{pid} = _spawn([ $bin, '-c', $conf, @{ $o{args} // [] } ], $log, $o{env});

    my $deadline = time + ($o{timeout} // 10);
    my $ok = 1;
    for my $hp (@wait) {
        my ($h, $p) = $hp =~ /^(.*):(\d+)$/ or croak "start_lookout: bad wait address '$hp'";
        my $up = wait_until(sub {
            return -1 unless $self->alive;
            my $s = IO::Socket::INET->new(PeerAddr => $h, PeerPort => $p, Proto => 'tcp', Timeout => 1);
            return $s ? do { close $s; 1 } : 0;
        }, $deadline - time);
        if ($up != 1) { $ok = 0; last }
    }
    # With nothing to wait for, at least make sure it did not exit at once: give it up to
    # a second (a loaded machine starts processes slowly) to fail before calling it started.
    if ($ok && !@wait) { wait_until(sub { !$self->alive }, 1); $ok = $self->alive }
    $self->{started} = $ok ? 1 : 0;
    unless ($ok || $o{quiet}) {
        my $why = $self->alive ? "ports (@wait) did not open in time" : 'lookout exited: ' . $self->exit_text;
        Test::More::diag("start_lookout: $why\n--- $log ---\n" . ($self->log // ''));
    }
    return $self;
}

# fork+exec ARGV with stdout and stderr to LOG; returns the pid.
sub _spawn {
    my ($argv, $log, $env) = @_;
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(126);
        $ENV{$_} = $env->{$_} for keys %{ $env // {} };
        { no warnings "exec"; exec { $argv->[0] } @$argv; }
        print STDERR "exec $argv->[0]: $!\n";
        POSIX::_exit(127);
    }
    return $pid;
}

sub pid      { $_[0]{pid} }
sub dir      { $_[0]{dir} }
sub conf     { $_[0]{conf} }
sub log_file { $_[0]{log_file} }
sub started  { $_[0]{started} }

# $lk->log: everything lookout wrote to stderr/stdout so far.
sub log { slurp($_[0]{log_file}) }

# $lk->alive: still running (reaps it if it has exited).
sub alive {
    my ($self) = @_;
    return 0 if defined $self->{status} || !$self->{pid};
    my $r = waitpid($self->{pid}, WNOHANG);
    return 1 if $r == 0;
    $self->{status} = $r == $self->{pid} ? $? : -1;
    return 0;
}

# $lk->status: the wait status ($?) once it has exited, else undef.
sub status { $_[0]->alive; $_[0]{status} }

# $lk->exit_code: exit code once exited normally, else undef.
sub exit_code {
    my $s = $_[0]->status;
    return defined $s && $s >= 0 && !($s & 127) ? $s >> 8 : undef;
}

sub exit_text {
    my $s = $_[0]{status};
    return 'still running' unless defined $s;
    return 'unknown status' if $s < 0;
    return $s & 127 ? 'killed by signal ' . ($s & 127) : 'exit code ' . ($s >> 8);
}

# $lk->signal(NAME): send a signal (HUP, TERM, INT...) to this lookout only.
sub signal {
    my ($self, $sig) = @_;
    return $self->alive ? kill($sig, $self->{pid}) : 0;
}

# $lk->wait_log(REGEX [, TIMEOUT=10]): true once the log matches (e.g. after a SIGHUP).
sub wait_log {
    my ($self, $re, $timeout) = @_;
    return wait_until(sub { ($self->log // '') =~ $re }, $timeout // 10);
}

# $lk->wait_exit([TIMEOUT=10]): wait for it to exit by itself; returns the wait status
# or undef if it is still running.
sub wait_exit {
    my ($self, $timeout) = @_;
    wait_until(sub { !$self->alive }, $timeout // 10);
    return $self->{status};
}

# $lk->reload(TEXT): writes TEXT as lookout's config, sends SIGHUP and waits (10 s at
# most) for its outcome: the new "SIGHUP: ..." log line ('' if none came).
sub reload {
    my ($self, $text) = @_;
    spew($self->{conf}, $text);
    my $before = () = ($self->log // '') =~ /SIGHUP: /g;
    $self->signal('HUP');
    wait_until(sub { (() = ($self->log // '') =~ /SIGHUP: /g) > $before }, 10);
    my @lines = ($self->log // '') =~ /(SIGHUP: [^\n]*)/g;
    return $lines[-1] // '';
}

# $lk->stop([TIMEOUT=10 [, SIGNAL=TERM]]): SIGNAL, then SIGKILL if it has not exited
# within TIMEOUT seconds. Returns the wait status. Idempotent.
sub stop {
    my ($self, $timeout, $sig) = @_;
    return $self->{status} unless $self->{owner} == $$ && $self->alive;
    kill $sig // 'TERM', $self->{pid};
    unless (defined $self->wait_exit($timeout // 10)) {
        Test::More::note("lookout (pid $self->{pid}) ignored SIG" . ($sig // "TERM") . ", killing it");
        kill 'KILL', $self->{pid};
        $self->wait_exit(5);
    }
    $self->check_sanitizers;
    return $self->{status};
}

# Fails a test when lookout's log holds an AddressSanitizer, LeakSanitizer or
# UndefinedBehaviorSanitizer report (CI runs the suite in an ASan+UBSan
# build too); checked once, when lookout has exited.
sub check_sanitizers {
    my ($self) = @_;
    return if $self->{sanitizers_checked}++;
    my $log = $self->log // '';
    if ($log =~ /(ERROR: (?:Address|Leak)Sanitizer[^\n]*|runtime error:[^\n]*)/) {
        Test::More::ok(0, "no sanitizer report in lookout's log: $1");
        Test::More::diag($log =~ /((?:=+\n)?(?:==\d+==ERROR|[^\n]*runtime error).{0,3000})/s ? $1 : $log);
    }
}

sub DESTROY { local ($?, $@); $_[0]->stop(5) if $_[0]{owner} && $_[0]{owner} == $$ }

# run_lookout(%opt): run lookout to completion (--check, --version, --help, a bad config).
#   args => [...], conf => TEXT (written to DIR/NAME.conf and passed as -c FILE, before
#   args), dir, name, env, timeout (default 10; then SIGKILL).
# Returns { exit => code or undef, signal => n, out => stdout+stderr, conf => file,
#           timed_out => 0|1 }.
sub run_lookout {
    my (%o) = @_;
    my $bin = lookout_bin();
    croak "lookout binary not found at $bin (build it, or set LOOKOUT_BIN)" unless -x $bin;
    my $dir = $o{dir} // tmp_dir();
    my $name = $o{name} // 'lookout-run';
    my @argv = ($bin);
    my $conf;
    if (defined $o{conf}) {
        $conf = spew("$dir/$name.conf", $o{conf});
        push @argv, '-c', $conf;
    }
    push @argv, @{ $o{args} // [] };
    my $out = "$dir/$name.out";
    unlink $out;
    my $pid = _spawn(\@argv, $out, $o{env});
    my ($st, $timed_out) = _wait_pid($pid, $o{timeout} // 10);
    return { exit => ($st & 127) ? undef : $st >> 8, signal => $st & 127,
             out => slurp($out) // '', conf => $conf, timed_out => $timed_out };
}

# Wait for PID up to SECS, SIGKILL it after that. Returns (wait status, timed_out).
sub _wait_pid {
    my ($pid, $secs) = @_;
    my $st;
    my $done = wait_until(sub {
        my $r = waitpid($pid, WNOHANG);
        return 0 if $r == 0;
        $st = $r == $pid ? $? : -1;
        return 1;
    }, $secs, 0.02);
    return ($st, 0) if $done;
    kill 'KILL', $pid;
    waitpid($pid, 0);
    return ($?, 1);
}

# ---- clients -------------------------------------------------------------------------------

# curl([\%opt,] ARGS...): run curl with ARGS plus -sS, --globoff, --noproxy '*', and
# --max-time (opt timeout, default 15) unless ARGS set one. ~/.curlrc is ignored.
# Returns {
#   status    => last response's status code (0 if none),
#   headers   => { lower-case name => value, repeats joined with ", " } of the last response,
#   header_list => [[name, value], ...] of the last response, in order,
#   responses => [ { status, head, header_list, headers }, ... ] every head curl saw
#                (100 Continue, each redirect hop with -L, ...),
#   head      => the last response's raw head, body => the body bytes,
#   exit      => curl's exit code, err => its stderr, cmd => the argv (for diag)
# }
# Lookout::json_lines(TEXT): the JSON objects of TEXT's lines (a probe's output), lines that
# are not JSON left out. Lookout::log_since(LK, FROM): lookout's log after its first FROM
# bytes. Lookout::leaks_metric(ADMIN_PORT, CLUSTER): lookout_leaks_total{cluster=CLUSTER}
# on that admin port's /metrics, or -1. Lookout::metrics_map(ADMIN_PORT): that /metrics as
# { 'name{labels}' => value }. Not exported: many tests have their own.
sub json_lines { return map { my $j = eval { JSON::PP::decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

sub log_since { my ($lk, $from) = @_; return substr($lk->log // '', $from) }

# guard_conf(ADMIN, MODE, BROKERS): the config of a one-worker lookout with its admin
# listener on 127.0.0.1:ADMIN in front of Pulsar cluster "prod" (listeners "internal" and
# "external") with leak_guard = MODE, then BROKERS, its [broker prod/...] sections.
sub guard_conf {
    my ($admin, $mode, $brokers) = @_;
    return "[lookout]\nworkers = 1\nadmin = 127.0.0.1:$admin\n\n[pulsar prod]\n"
         . "internalListenerName = internal\nlookupListenerName = external\nleak_guard = $mode\n\n$brokers";
}

sub metrics_map {
    my ($admin) = @_;
    my %m;
    my $body = curl("http://127.0.0.1:$admin/metrics")->{body} // '';
    while ($body =~ /^(\w+\{[^}]*\}) (\S+)$/mg) { $m{$1} = $2 }
    return \%m;
}

sub leaks_metric {
    my ($admin, $cluster) = @_;
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return $r->{body} =~ /^lookout_leaks_total\{cluster="\Q$cluster\E"\} (\d+)$/m ? $1 : -1;
}

sub curl {
    return curl_wait(curl_start(@_));
}

# curl_start([\%opt,] ARGS...): the same as curl(), but in the background: returns a
# handle at once; curl_wait(HANDLE) waits for it (bounded) and returns what curl() does.
# For concurrent clients.
sub curl_start {
    my $o = ref $_[0] eq 'HASH' ? shift : {};
    my @args = @_;
    # curl is a hard dependency of the integration tests, not an optional tool: fail loudly.
    croak "curl not found on PATH (apt-get install curl)" unless _which("curl");
    my $dir = tempdir('lookout-curl-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    my $timeout = $o->{timeout} // 15;
    my @argv = ('curl', '-q', '-sS', '--globoff', '--noproxy', '*', '-D', "$dir/head", '-o', "$dir/body");
    push @argv, '--max-time', $timeout unless grep { /^(?:-m|--max-time)$/ } @args;
    push @argv, @args;
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', "$dir/out";
        open STDERR, '>', "$dir/err";
        { no warnings "exec"; exec { "curl" } @argv; }
        POSIX::_exit(127);
    }
    return { pid => $pid, dir => $dir, timeout => $timeout, args => \@args, argv => \@argv };
}

sub curl_wait {
    my ($h) = @_;
    my ($dir, @args) = ($h->{dir}, @{ $h->{args} });
    my ($st) = _wait_pid($h->{pid}, $h->{timeout} + 5);
    my $heads = slurp("$dir/head") // '';
    my @resp;
    # -D writes each head in turn; split on status lines.
    for my $hd (split /(?=^HTTP\/[\d.]+ \d{3})/m, $heads) {
        next unless $hd =~ m{^HTTP/[\d.]+ (\d{3})};
        my $r = { status => 0 + $1, head => $hd };
        @{$r}{qw(header_list headers)} = _headers_of($hd);
        push @resp, $r;
    }
    # With -I/--head curl also writes the head to -o: there is no body.
    my $is_head = grep { /^(?:-I|--head)$/ } @args;
    my $last = $resp[-1] // { status => 0, head => '', header_list => [], headers => {} };
    return { %$last, responses => \@resp, body => $is_head ? '' : slurp("$dir/body") // '',
             exit => ($st & 127) ? -1 : $st >> 8, err => slurp("$dir/err") // '', cmd => $h->{argv} };
}

sub _headers_of {
    my ($head) = @_;
    my (@list, %h);
    for my $l (split /\r?\n/, $head) {
        next unless $l =~ /^([^:\s]+):\s*(.*?)\s*$/;
        push @list, [ $1, $2 ];
        my $k = lc $1;
        $h{$k} = exists $h{$k} ? "$h{$k}, $2" : $2;
    }
    return (\@list, \%h);
}

# scripted_http_broker(PORT, CODE): an HTTP broker on 127.0.0.1:PORT, in a child process
# (bounded to 300 s), each connection in a child of its own, which calls
# CODE->(SOCKET, REQUEST_LINE) for each request head it reads (bodies are not read): CODE
# writes the answer to SOCKET and returns true to read on, false to close. For answers
# the fake brokers of PulsarBroker.pm do not give. Returns the pid (TERM it when done).
sub scripted_http_broker {
    my ($port, $code) = @_;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Proto => 'tcp',
                                  Listen => 16, ReuseAddr => 1) or croak "listen: $@";
    my $pid = fork // croak "fork: $!";
    if ($pid == 0) {
        alarm 300;    # bounded, whatever the test does
        $SIG{CHLD} = 'IGNORE';
        while (my $cx = $l->accept) {
            next if fork;
            my $buf = '';
            while (sysread($cx, $buf, 65536, length $buf)) {
                while ($buf =~ s/\A([^\r]*)\r\n(?:.*?\r\n)?\r\n//s) {
                    $code->($cx, $1) or POSIX::_exit(0);
                }
            }
            POSIX::_exit(0);
        }
        POSIX::_exit(0);
    }
    close $l;
    return $pid;
}

# http_raw(HOST, PORT, BYTES, %opt): connect, send BYTES, read until the server closes,
# `until` matches, or `timeout` (default 5 s) passes. BYTES may be an array ref of pieces,
# sent `pause` seconds apart (default 0.1; slow-client and split-head tests).
# Options: tls => 1 (verify against `ca` if given, else no verification), sni => NAME,
#   until => qr/.../ (stop reading once the reply matches), shutdown => 1 (half-close
#   our side after sending), timeout, pause.
# Scalar context: the reply bytes. List context: (reply, how), how = "eof" (server closed),
# "until", "timeout", "reset" (connection reset), or "connect: ERROR".
sub http_raw {
    my ($host, $port, $bytes, %o) = @_;
    my $timeout = $o{timeout} // 5;
    my $end = time + $timeout;
    my $s;
    if ($o{tls}) {
        require IO::Socket::SSL;
        $s = IO::Socket::SSL->new(
            PeerHost => $host, PeerPort => $port, Timeout => $timeout,
            SSL_hostname => $o{sni} // '',
            ($o{ca} ? (SSL_ca_file => $o{ca}, SSL_verifycn_name => $o{sni} // $host)
                    : (SSL_verify_mode => IO::Socket::SSL::SSL_VERIFY_NONE())));
        return wantarray ? ("", "connect: " . (IO::Socket::SSL::errstr() // $@)) : '' unless $s;
    } else {
        $s = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port, Proto => 'tcp', Timeout => $timeout);
        return wantarray ? ('', "connect: $@") : '' unless $s;
    }
    local $SIG{PIPE} = 'IGNORE';
    my @pieces = ref $bytes eq 'ARRAY' ? @$bytes : ($bytes);
    my ($reply, $how) = ('', undef);
    for my $i (0 .. $#pieces) {
        sleep($o{pause} // 0.1) if $i;
        # A server may answer (and close) before we are done sending: keep what it said.
        unless (_send_all($s, $pieces[$i], $end)) { $how = 'reset'; last }
    }
    if (!$how && $o{shutdown}) {
        CORE::shutdown($s, SHUT_WR);
    }
    sleep $o{read_after} if $o{read_after};   # a client slow to read its answer
    while (1) {
        if ($o{until} && $reply =~ $o{until}) { $how = 'until'; last }
        my $left = $end - time;
        if ($left <= 0) { $how //= 'timeout'; last }
        unless (($o{tls} && $s->pending) || IO::Select->new($s)->can_read($left)) { $how //= 'timeout'; next }
        my $n = sysread($s, my $buf, 65536);
        if (!defined $n) {
            next if $! == EINTR;
            $how = 'reset';
            last;
        }
        if ($n == 0) { $how = 'eof'; last }
        $reply .= $buf;
    }
    close $s;
    return wantarray ? ($reply, $how) : $reply;
}

sub _send_all {
    my ($s, $data, $end) = @_;
    my $off = 0;
    while ($off < length $data) {
        return 0 if time > $end;
        next unless IO::Select->new($s)->can_write($end - time);
        my $n = syswrite($s, $data, length($data) - $off, $off);
        if (!defined $n) { next if $! == EINTR; return 0 }
        $off += $n;
    }
    return 1;
}

# parse_response(BYTES [, %opt]): parse one HTTP response from raw bytes (say, from
# http_raw). opt: head => 1 (the request was HEAD: no body), keep_1xx => 1 (return a
# 100/103 instead of skipping it). Returns undef if BYTES hold no complete head, else
# { version, status, reason, header_list => [[n, v]...], headers => {lc => v},
#   body, complete => 0|1 (body framing satisfied), rest => bytes after this response }.
# The body follows Content-Length, chunked (decoded; trailers dropped), or runs to the
# end of BYTES (close-delimited).
sub parse_response {
    my ($raw, %o) = @_;
    while (1) {
        # A head may have no header lines at all (a bare "100 Continue").
        $raw =~ /\A(HTTP\/(\d\.\d) (\d{3})(?: ([^\r\n]*))?\r?\n((?:[^\r\n]+\r?\n)*)\r?\n)/ or return undef;
        my ($hlen, $ver, $st, $reason, $hdrs) = (length($&), $2, 0 + $3, $4 // '', $5);
        my ($list, $h) = _headers_of($hdrs);
        my $rest = substr($raw, $hlen);
        if ($st >= 100 && $st < 200 && $st != 101 && !$o{keep_1xx}) { $raw = $rest; next }
        my $r = { version => $ver, status => $st, reason => $reason, header_list => $list,
                  headers => $h, body => '', complete => 1, rest => '' };
        if ($o{head} || $st == 204 || $st == 304 || $st < 200) {
            $r->{rest} = $rest;
        } elsif (($h->{'transfer-encoding'} // '') =~ /chunked\s*$/i) {
            $r->{complete} = 0;
            while ($rest =~ s/\A([0-9A-Fa-f]+)[^\r\n]*\r?\n//) {
                my $size = hex $1;
                if ($size == 0) {
                    $rest =~ s/\A(?:[^\r\n]+\r?\n)*\r?\n// and $r->{complete} = 1;
                    last;
                }
                last if length($rest) < $size;
                $r->{body} .= substr($rest, 0, $size, '');
                $rest =~ s/\A\r?\n//;
            }
            $r->{rest} = $rest;
        } elsif (defined $h->{'content-length'}) {
            my $len = $h->{'content-length'} =~ /^(\d+)/ ? $1 : 0;
            $r->{body} = substr($rest, 0, $len);
            $r->{complete} = length($rest) >= $len ? 1 : 0;
            $r->{rest} = length($rest) > $len ? substr($rest, $len) : '';
        } else {
            $r->{body} = $rest;
        }
        return $r;
    }
}

# hosts_argv(DIR, {NAME => IP, ...}): an argv prefix that runs a client with those names
# resolving to those addresses, for clients that take no resolve override (librdkafka):
# util-linux's unshare gives the client a mount namespace of its own, in which a hosts file
# written to DIR is bind-mounted over /etc/hosts (glibc reads it first: "hosts: files").
# The machine's own /etc/hosts is never written, and nothing else sees the change. Needs
# root, or unprivileged user namespaces (then the client runs as a mapped root). Returns
# the prefix (an array ref), or (undef, why) when this machine cannot do it.
sub hosts_argv {
    my ($dir, $map) = @_;
    my $file = spew("$dir/hosts", join('', map { "$map->{$_} $_\n" } sort keys %$map));
    my @inner = ('sh', '-c', 'mount --bind "$0" /etc/hosts && exec "$@"', $file);
    my ($name) = sort keys %$map;
    my @tried;
    for my $ns ([ 'unshare', '--mount' ], [ 'unshare', '--user', '--map-root-user', '--mount' ]) {
        next if $ns->[1] eq '--mount' && $> != 0;
        my @argv = (@$ns, @inner);
        my $out = qx{@{[ join ' ', map { "'$_'" } @argv, 'getent', 'hosts', $name ]} 2>&1};
        return [@argv] if $? == 0 && $out =~ /^\Q$map->{$name}\E\s+\Q$name\E\b/m;
        push @tried, "@$ns: " . ($out =~ s/\s+$//r || "exit " . ($? >> 8));
    }
    return (undef, 'cannot give a client its own /etc/hosts (' . join('; ', @tried) . ')');
}

# ---- config and checks ---------------------------------------------------------------------

# broker_sections(CLUSTER, NAME, {N => [URL...]}): the [broker NAME/bN] sections for every
# broker of a PulsarBroker cluster: its internal addresses (listener "internal") plus, for
# broker N, each URL given as an "external" listener address.
sub broker_sections {
    my ($c, $name, $ext) = @_;
    my $text = '';
    for my $b ($c->brokers) {
        my @e = map { "external:$_" } @{ $ext->{ $b->{n} } // [] };
        $text .= "[broker $name/$b->{name}]\nadvertisedListeners = "
               . join(',', $c->internal_listeners($b->{n}), @e) . "\n\n";
    }
    return $text;
}

# rss_kb(PID): the process's resident set (VmRSS) in KiB, or undef.
sub rss_kb {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/status") // return undef;
    return $s =~ /^VmRSS:\s+(\d+)\s+kB/m ? $1 : undef;
}

# body_reader(SOCK, [wait => SECS]): reads one response off SOCK as its body arrives, the
# body hashed as it comes. $r->{read}->(LIMIT) reads until LIMIT body bytes are in, the end,
# or (with wait) no byte for SECS seconds; then $r->{head} is the head (undef until it is
# whole), $r->{got} the body bytes so far and $r->{sha}->hexdigest their SHA-256 at the end.
sub body_reader {
    my ($sock, %o) = @_;
    require Digest::SHA;
    require IO::Select;
    my $r = { head => undef, got => 0, sha => Digest::SHA->new(256) };
    my $buf = '';
    my $sel = IO::Select->new($sock);
    $r->{read} = sub {
        my ($limit) = @_;
        while ($r->{got} < $limit) {
            # what an SSL socket holds already is no news to select
            last if $o{wait} && !($sock->can('pending') && $sock->pending) && !$sel->can_read($o{wait});
            my $n = sysread($sock, my $chunk, 262144);
            last unless $n;
            if (!defined $r->{head}) {
                $buf .= $chunk;
                next unless $buf =~ /\r\n\r\n/;
                ($r->{head}, $chunk) = ($`, $');
            }
            $r->{sha}->add($chunk);
            $r->{got} += length $chunk;
        }
        return $r->{got};
    };
    return $r;
}

# peak_rss_kb(PID, SECS): the largest VmRSS of PID sampled every 0.1 s for SECS seconds.
sub peak_rss_kb {
    my ($pid, $secs) = @_;
    my $max = 0;
    my $end = time + $secs;
    while (time < $end) {
        my $v = rss_kb($pid) // 0;
        $max = $v if $v > $max;
        sleep 0.1;
    }
    return $max;
}

# lookout_error_ok(RESPONSE, STATUS, NAME): RESPONSE (from curl() or parse_response()) is
# an error lookout generated itself (CONTRACT §6): that status, Content-Type
# application/json, a JSON body with a non-empty "reason", a Content-Length that matches,
# and no X-Fake-Broker or X-Raw-Broker header (a fake broker's own answer would carry one).
sub lookout_error_ok {
    my ($r, $status, $name) = @_;
    my @bad = lookout_error_problems($r, $status);
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $ok = Test::More::ok(!@bad, $name);
    Test::More::diag("$name: " . join('; ', @bad) . "\n" . ($r->{head} // '')) if @bad;
    return $ok;
}

# lookout_error_problems(RESPONSE, STATUS): what lookout_error_ok checks, as a list of
# problems (empty when RESPONSE is lookout's own STATUS error), for tests that fold it into
# a larger check.
sub lookout_error_problems {
    my ($r, $status) = @_;
    my $h = $r->{headers} // {};
    my $reason = eval { JSON::PP::decode_json($r->{body} // '')->{reason} };
    my @bad;
    push @bad, "status " . ($r->{status} // 'none') . ", want $status" if ($r->{status} // 0) != $status;
    push @bad, "Content-Type '" . ($h->{'content-type'} // '') . "'"
        unless ($h->{'content-type'} // '') =~ m{^application/json\b}i;
    push @bad, "no JSON reason in body '" . substr($r->{body} // '', 0, 200) . "'"
        unless defined $reason && !ref $reason && length $reason;
    push @bad, "Content-Length $h->{'content-length'} but body of " . length($r->{body} // '')
        if defined $h->{'content-length'} && $h->{'content-length'} != length($r->{body} // '');
    push @bad, "came from broker $h->{'x-fake-broker'}" if defined $h->{'x-fake-broker'};
    push @bad, "came from broker $h->{'x-raw-broker'}" if defined $h->{'x-raw-broker'};
    return @bad;
}

1;
