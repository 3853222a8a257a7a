package KafkaMock;

# Kafka peers for lookout's integration tests: librdkafka's mock cluster.
#
# KafkaMock->start runs tests/kafka/kafka-mock (built by tests/build.sh when librdkafka-dev
# is installed): an N-broker librdkafka 2.0.2 mock cluster, node ids 1..N, each broker on
# 127.0.0.1 and an ephemeral port. The fixture prints one JSON line once the cluster
# answers Metadata (what a client is told: ids, hosts, ports, partition leaders), then runs
# until its stdin closes. We hold the write end of that pipe, so the cluster dies with the
# test even when the test itself is killed. The mock speaks only Metadata v0-2,
# FindCoordinator v0-2, Produce v0-7 and Fetch v0-11, and answers ApiVersions v3+ with a
# non-standard error-35 body (facts/kafka.md §5); KafkaTestBroker covers the rest.
#
# The process handling here (spawn with a stdin pipe, read the ready line with a deadline,
# stop by closing stdin, then TERM and KILL by pid) is shared with KafkaTestBroker.

use strict;
use warnings;

use Carp qw(croak);
use File::Basename qw(dirname);
use IO::Handle;
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

use Lookout qw(lookout_bin repo_top tmp_dir slurp free_port);

my %LIVE;    # fixtures started by this process, stopped at END if a test forgets

=head1 SYNOPSIS

  my $m = KafkaMock->start(brokers => 3, topics => ['t1:3', 't2:1:1']);
  $m->bootstrap;                 # "127.0.0.1:40001,127.0.0.1:40002,127.0.0.1:40003"
  $m->brokers;                   # [{id => 1, host => '127.0.0.1', port => 40001}, ...]
  $m->broker(2)->{port};
  $m->topic('t1')->{leaders};    # [1, 2, 3]: the leader of each partition
  $m->stop;                      # 0 when the fixture shut the cluster down cleanly

=cut

# KafkaMock::bin(): the kafka-mock program, or undef. $ENV{LOOKOUT_KAFKA_MOCK}, else
# tests/kafka/kafka-mock beside the lookout under test (out-of-tree builds put lookout in
# build/NAME/ and the fixture in build/NAME/tests/kafka/).
sub bin {
    my $b = $ENV{LOOKOUT_KAFKA_MOCK} // dirname(lookout_bin()) . '/tests/kafka/kafka-mock';
    return -x $b ? $b : undef;
}

# KafkaMock::missing(): why the mock cannot run here (a skip reason), or undef.
sub missing {
    return undef if bin();
    return 'tests/kafka/kafka-mock is not built (apt-get install librdkafka-dev, then tests/build.sh)';
}

# KafkaMock::rebootstrap_check(): a KIP-1102 client, tests/kafka/kafka-rebootstrap-check (a
# librdkafka consumer, see its source), and the librdkafka it is to run with: ($path, $version)
# with $ENV{LD_LIBRARY_PATH} set (the caller localizes it) to $ENV{LOOKOUT_LIBRDKAFKA_DIR},
# else the librdkafka 2.15.1 that tests/kafka/rdkafka-new.sh built, first; or (undef, why)
# when it is not built or that librdkafka is older than 2.11.
sub rebootstrap_check {
    my $check = bin() && (bin() =~ s{kafka-mock$}{kafka-rebootstrap-check}r);
    return (undef, 'tests/kafka/kafka-rebootstrap-check is not built (librdkafka-dev)') unless $check && -x $check;
    my $libdir = $ENV{LOOKOUT_LIBRDKAFKA_DIR};
    my $why = '';
    unless (defined $libdir && length $libdir) {
        my $got = `sh "@{[ repo_top() ]}/tests/kafka/rdkafka-new.sh" --libdir`;
        chomp $got;
        ($? == 0 ? $libdir : $why) = $got;
    }
    $ENV{LD_LIBRARY_PATH} = join(':', grep { defined && length } $libdir, $ENV{LD_LIBRARY_PATH});
    my $v = `$check 127.0.0.1:1 t 0`;
    return (undef, "needs librdkafka 2.11+ (KIP-1102): $1" . ($why && "; $why")) if $v =~ /^skip (.*)$/m;
    return ($check, $v =~ /^version (.*)$/m ? $1 : '?');
}

# KafkaMock::lookout_conf(%opt): the config of a lookout in front of a Kafka cluster "k",
# plaintext to its brokers, each broker's external address on its own port of 127.0.0.1:
#   nodes    => [[node id, internal host:port, external port], ...] (see $m->behind)
#   boot     => the bootstrap port on 127.0.0.1 (no bootstrap.servers without it)
#   external => the protocol of the EXTERNAL listener (default PLAINTEXT; SSL wants
#               tls.certificate and tls.key in lookout)
#   lookout  => more lines for [lookout]
sub lookout_conf {
    my (%o) = @_;
    my $conf = "[lookout]\nworkers = 1\n" . ($o{lookout} // '')
        . "\n[kafka k]\ninter.broker.listener.name = INTERNAL\nlookupListenerName = EXTERNAL\n"
        . 'listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:' . ($o{external} // 'PLAINTEXT') . "\n";
    $conf .= "bootstrap.servers = 127.0.0.1:$o{boot}\n" if $o{boot};
    $conf .= "\n[broker k/$_->[0]]\nadvertised.listeners = INTERNAL://$_->[1],EXTERNAL://127.0.0.1:$_->[2]\n"
        for @{ $o{nodes} };
    return $conf;
}

# KafkaMock::guard_lookouts(dir => D, name => N, nodes => [[ID, INTERNAL], ...]): one lookout
# per leak_guard mode (log, the default, and block), each mapping the nodes (internal
# host:port, an EXTERNAL listener on a free port) with a bootstrap and an admin listener of
# its own. Returns {log => {lk, boot, admin, ext => {ID => port}}, block => {...}}; each
# start is one test (ok).
sub guard_lookouts {
    my (%o) = @_;
    my %K;
    for my $mode (qw(log block)) {
        my ($boot, $admin) = (free_port(), free_port());
        my %ext = map { ($_->[0] => free_port()) } @{ $o{nodes} };
        my $conf = lookout_conf(nodes => [ map { [ @$_[0, 1], $ext{ $_->[0] } ] } @{ $o{nodes} } ],
                                boot => $boot, lookout => "admin = 127.0.0.1:$admin\n");
        # log is the default, for Kafka clusters too
        $conf =~ s/^(\[kafka k\]\n)/$1leak_guard = $mode\n/m if $mode ne 'log';
        my $lk = Lookout::start_lookout(dir => $o{dir}, name => "$o{name}-$mode", conf => $conf);
        Test::More::ok($lk->started, "lookout (kafka, leak_guard = $mode) started")
            or Test::More::diag($lk->log // '');
        $K{$mode} = { lk => $lk, boot => $boot, admin => $admin, ext => \%ext };
    }
    return \%K;
}

# KafkaMock::kafkajs_missing(): why bin/kafkajs-check cannot run here (a skip reason), or
# undef. It needs node, and kafkajs in tests/kafka/node_modules (or $ENV{LOOKOUT_KAFKAJS}).
sub kafkajs_missing {
    return 'node not found (tests/deps.sh installs nodejs and npm)' unless Lookout::_which('node');
    my $mod = $ENV{LOOKOUT_KAFKAJS} // repo_top() . '/tests/kafka/node_modules/kafkajs';
    return "kafkajs is not installed in $mod (tests/deps.sh runs npm ci in tests/kafka)" unless -f "$mod/package.json";
    return undef;
}

# KafkaMock->start(%opt): start a mock cluster and return it once it answers Metadata.
#   brokers  => N (1-16, default 3)
#   topics   => ['name:partitions[:replicas]', ...] (replicas default min(3, N))
#   rack     => 1 gives broker N the rack "rN"
#   dir      => where its stderr goes (kafka-mock.log; default a temp dir)
#   lifetime => seconds before it stops by itself (default 600)
#   timeout  => seconds to wait for the ready line (default 30)
# Croaks if the fixture is missing, exits, or does not get ready in time.
sub start {
    my ($class, %o) = @_;
    my $bin = bin() or croak 'KafkaMock: ' . missing();
    my @argv = ($bin, '--lifetime', $o{lifetime} // 600);
    push @argv, '--rack' if $o{rack};
    push @argv, $o{brokers} // 3, @{ $o{topics} // [] };
    my $self = $class->_spawn(\@argv, $o{dir}, 'kafka-mock', $o{timeout} // 30,
                              # librdkafka's own allocations are not ours to judge
                              { ASAN_OPTIONS => 'detect_leaks=0' });
    return $self;
}

sub bootstrap { $_[0]{ready}{bootstrap} }
sub brokers   { $_[0]{ready}{brokers} }
sub topics    { $_[0]{ready}{topics} }
sub ready     { $_[0]{ready} }
sub pid       { $_[0]{pid} }
sub log_file  { $_[0]{log_file} }
sub log       { slurp($_[0]{log_file}) // '' }

# $m->behind(PORTS...): its brokers, in order, each with the next of PORTS as its external
# port: [[node id, host:port, port], ...], the nodes of KafkaMock::lookout_conf.
sub behind {
    my ($self, @ports) = @_;
    my @b = @{ $self->brokers };
    return [ map { [ $b[$_]{id}, "$b[$_]{host}:$b[$_]{port}", $ports[$_] ] } 0 .. $#b ];
}

# $m->broker(ID): the broker entry {id, host, port} for node id ID, or undef.
sub broker {
    my ($self, $id) = @_;
    my ($b) = grep { $_->{id} == $id } @{ $self->brokers };
    return $b;
}

# $m->topic(NAME): {name, partitions, leaders} or undef.
sub topic {
    my ($self, $name) = @_;
    my ($t) = grep { $_->{name} eq $name } @{ $self->topics };
    return $t;
}

# KafkaMock::run(ARGV, %opt): run a client (kcat, a Python script...) to completion, bounded
# by coreutils' timeout: in => text for its stdin (default none), timeout => seconds (default
# 60; then TERM, and KILL 2 s later), env => {...}. Returns {exit => code (124 = timed out),
# out => stdout, err => stderr}.
sub run {
    my ($argv, %o) = @_;
    my $dir = tmp_dir();
    my $in = "$dir/in";
    Lookout::spew($in, $o{in} // '');
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', $in or POSIX::_exit(126);
        open STDOUT, '>', "$dir/out" or POSIX::_exit(126);
        open STDERR, '>', "$dir/err" or POSIX::_exit(126);
        $ENV{$_} = $o{env}{$_} for keys %{ $o{env} // {} };
        my @cmd = ('timeout', '-k', '2', $o{timeout} // 60, @$argv);
        { no warnings 'exec'; exec { $cmd[0] } @cmd; }
        POSIX::_exit(127);
    }
    waitpid($pid, 0);
    return { exit => $? >> 8, out => slurp("$dir/out") // '', err => slurp("$dir/err") // '' };
}

# ---- raw clients ----------------------------------------------------------------------------

# KafkaMock::frame(PAYLOAD): PAYLOAD behind its 4-byte size.
sub frame { return pack('N', length $_[0]) . $_[0] }

# KafkaMock::scripted_broker(ANSWER): a Kafka broker on 127.0.0.1, in a child process with
# one child per connection, that reads each request frame and writes
# frame(ANSWER->(PAYLOAD, PORT)) back (PAYLOAD: the request without its size field; PORT:
# the broker's own; ANSWER may sleep, or return undef to answer nothing). Returns (port, pid); kill TERM the pid to stop it. It also stops with
# the test, and after 120 s.
sub scripted_broker {
    my ($answer) = @_;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 16, Proto => 'tcp', ReuseAddr => 1)
        or croak("listen: $@");
    my $port = $l->sockport;
    my $pid = fork // croak("fork: $!");
    if ($pid == 0) {
        my $parent = getppid;
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', '/dev/null';
        local $SIG{ALRM} = sub { POSIX::_exit(0) };
        alarm 120;
        while (getppid == $parent) {
            next unless IO::Select->new($l)->can_read(1);
            my $s = $l->accept or next;
            next if fork;    # one child per connection
            while (my $req = read_frame($s, 60)) {
                my $a = $answer->($req, $port);
                syswrite($s, frame($a)) if defined $a;
            }
            POSIX::_exit(0);
        }
        POSIX::_exit(0);
    }
    close $l;
    return ($port, $pid);
}

# KafkaMock::read_frame(SOCK, TIMEOUT): the payload of the next size-prefixed frame on SOCK (a
# plain or an IO::Socket::SSL socket), or undef. In list context also how it ended: "frame",
# "eof" (closed), "error" (reset) or "timeout". It never reads past the frame's end: what
# follows stays in the socket for the next call.
sub read_frame {
    my ($s, $timeout) = @_;
    my ($buf, $want) = ('', 4);
    my $end = time + $timeout;
    while (length $buf < $want) {
        my $left = $end - time;
        return wantarray ? (undef, 'timeout') : undef if $left <= 0;
        next unless ($s->can('pending') && $s->pending) || IO::Select->new($s)->can_read($left);
        my $n = sysread($s, $buf, $want - length $buf, length $buf);
        return wantarray ? (undef, defined $n ? 'eof' : 'error') : undef unless $n;
        $want = 4 + unpack('N', $buf) if $want == 4 && length $buf == 4;
    }
    my $payload = substr($buf, 4);
    return wantarray ? ($payload, 'frame') : $payload;
}

# ---- process handling, shared with KafkaTestBroker -----------------------------------------

# $class->_spawn(ARGV, DIR, NAME, TIMEOUT, ENV): fork+exec ARGV with stdin a pipe we hold,
# stdout a pipe we read one JSON line from (within TIMEOUT seconds), stderr to
# DIR/NAME.log. Returns the object with {ready} = that line, decoded.
sub _spawn {
    my ($class, $argv, $dir, $name, $timeout, $env) = @_;
    $dir //= tmp_dir();
    my $log = "$dir/$name.log";
    pipe(my $in_r, my $in_w) or croak "pipe: $!";
    pipe(my $out_r, my $out_w) or croak "pipe: $!";
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        # Child: never return into the test's code.
        close $in_w;
        close $out_r;
        open STDIN, '<&', $in_r or POSIX::_exit(126);
        open STDOUT, '>&', $out_w or POSIX::_exit(126);
        open STDERR, '>>', $log or POSIX::_exit(126);
        $ENV{$_} = $env->{$_} for keys %{ $env // {} };
        { no warnings 'exec'; exec { $argv->[0] } @$argv; }
        print STDERR "exec $argv->[0]: $!\n";
        POSIX::_exit(127);
    }
    close $in_r;
    close $out_w;
    $in_w->autoflush(1);
    my $self = bless { pid => $pid, in => $in_w, out => $out_r, log_file => $log, dir => $dir,
                       name => $name, owner => $$ }, $class;
    $LIVE{"$self"} = $self;

    my ($line, $buf) = ('', '');
    my $sel = IO::Select->new($out_r);
    my $end = time + $timeout;
    while ($line !~ /\n/) {
        my $left = $end - time;
        last if $left <= 0;
        next unless $sel->can_read($left > 0.5 ? 0.5 : $left);
        my $n = sysread($out_r, $buf, 65536);
        last unless $n;    # EOF: it exited
        $line .= $buf;
    }
    my ($first, $rest) = $line =~ /^(.*?)\n(.*)\z/s;
    $self->{out_buf} = $rest // '';    # what came after it: see PulsarBinBroker::control
    my $ready = defined $first ? eval { JSON::PP::decode_json($first) } : undef;
    unless ($ready) {
        $self->stop(2);
        croak "$name did not get ready within $timeout s: " . ($self->log || '(no output)');
    }
    $self->{ready} = $ready;
    return $self;
}

# $x->alive: still running (reaps it if it has exited).
sub alive {
    my ($self) = @_;
    return 0 if defined $self->{status};
    my $r = waitpid($self->{pid}, WNOHANG);
    return 1 if $r == 0;
    $self->{status} = $r == $self->{pid} ? $? : -1;
    return 0;
}

# $x->stop([TIMEOUT=10]): close its stdin and wait for it to exit; TERM, then KILL, when it
# has not within TIMEOUT seconds. Returns the wait status (0 = it shut down cleanly).
# Idempotent.
sub stop {
    my ($self, $timeout) = @_;
    return $self->{status} if defined $self->{status};
    close $self->{in} if $self->{in};
    delete $self->{in};
    for my $sig (undef, 'TERM', 'KILL') {
        kill $sig, $self->{pid} if $sig;
        my $end = time + ($sig ? 5 : $timeout // 10);
        while (time < $end) {
            last unless $self->alive;
            sleep 0.05;
        }
        last unless $self->alive;
    }
    close $self->{out} if $self->{out};
    delete $self->{out};
    delete $LIVE{"$self"};
    return $self->{status};
}

sub DESTROY { local ($?, $@); $_[0]->stop(5) if $_[0]{owner} && $_[0]{owner} == $$ }

END { local $?; $_->stop(5) for grep { $_->{owner} == $$ } values %LIVE }

1;
