package ZooKeeper;

# A real ZooKeeper for lookout's integration tests: Debian's zookeeper package (3.8), its
# jars run with `java -cp ... org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg` on a
# free port of 127.0.0.1, with a throwaway data dir, started and stopped by pid. It can be
# killed and started again on the same port and data dir (sessions and nodes survive, as in
# a real outage). Clients are tests/integration/bin/zk-client processes (kazoo), one
# session each, so that a test can make a broker's ephemeral node go by ending or killing
# its session, and can expire another client's session.
#
#   my $zk = ZooKeeper->start;            # croaks if it does not serve within 30 s
#   $zk->connect;                         # "127.0.0.1:PORT"
#   $zk->four('srvr');                    # a four-letter word's answer
#   my $c = $zk->client(timeout => 10);   # ZooKeeper::Client, a session
#   $c->create('/loadbalance/brokers/b1:8080', '{...}', ephemeral => 1, makepath => 1);
#   $c->set(PATH, DATA); $c->get(PATH); $c->children(PATH); $c->delete(PATH);
#   $c->expire(ID, PASSWD_HEX);           # expire someone else's session
#   $c->close;                            # end the session: its ephemeral nodes go now
#   $c->kill;                             # SIGKILL: they go when the session times out
#   $zk->kill;                            # SIGKILL the server (an outage)
#   $zk->restart;                         # the same port and data dir
#   ZooKeeper::wait_connected([$c, ...]); # until those sessions are back
#   $zk->stop;
#
# The server gets SIGKILL when the test process dies (prctl PR_SET_PDEATHSIG on
# x86_64 Linux), so a killed test leaves no JVM behind.

use strict;
use warnings;

use Carp qw(croak);
use Config;
use IO::Select;
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

use Lookout qw(tmp_dir free_port spew slurp wait_until repo_top);

my %LIVE;

# The jars: zookeeper.jar's manifest names its dependencies (netty, jetty, slf4j-api...);
# slf4j-simple sends the server's log to stderr, our zk.log.
my @JARS = qw(/usr/share/java/zookeeper.jar /usr/share/java/slf4j-simple.jar);

sub _java {
    for my $d (split(/:/, $ENV{PATH} // ''), '/usr/bin') {
        return "$d/java" if -x "$d/java" && !-d _;
    }
    return undef;
}

sub _python { -x '/usr/bin/python3' ? '/usr/bin/python3' : undef }

# ZooKeeper::missing(): why a ZooKeeper cannot run here (a skip reason), or undef.
sub missing {
    return 'java not found (tests/deps.sh installs zookeeper, which brings a JRE)' unless _java();
    return 'zookeeper.jar not found (apt-get install zookeeper)' unless -f $JARS[0];
    return 'python3 with kazoo not found (apt-get install python3-kazoo)'
        unless _python() && system(_python(), '-c', 'import kazoo') == 0;
    return undef;
}

# ZooKeeper->start(%opt): dir => its config, data and log (default a temp dir); port =>
# (default a free one); timeout => seconds to wait until it serves (default 30).
sub start {
    my ($class, %o) = @_;
    my $why = missing();
    croak "ZooKeeper: $why" if $why;
    my $dir = $o{dir} // tmp_dir();
    my $self = bless { dir => $dir, port => $o{port} // free_port(), owner => $$ }, $class;
    mkdir "$dir/zk-data";
    # tickTime 500 ms: sessions may be as short as 1 s (2 ticks), and expire within a tick
    # of their timeout. Only the four-letter words the harness uses; no admin server.
    spew("$dir/zoo.cfg", <<"EOF");
tickTime=500
dataDir=$dir/zk-data
clientPort=$self->{port}
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=1000
maxSessionTimeout=60000
4lw.commands.whitelist=srvr,ruok,stat,cons,mntr
admin.enableServer=false
EOF
    $LIVE{"$self"} = $self;
    $self->_run($o{timeout} // 30);
    return $self;
}

sub port    { $_[0]{port} }
sub connect { "127.0.0.1:$_[0]{port}" }
sub dir     { $_[0]{dir} }
sub pid     { $_[0]{pid} }
sub log     { slurp("$_[0]{dir}/zk.log") // '' }

sub _run {
    my ($self, $timeout) = @_;
    my @argv = (_java(), '-Xmx128m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
                '-Dorg.slf4j.simpleLogger.showDateTime=true',
                '-cp', join(':', @JARS), 'org.apache.zookeeper.server.ZooKeeperServerMain',
                "$self->{dir}/zoo.cfg");
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        # SIGKILL when the test dies: prctl(PR_SET_PDEATHSIG, SIGKILL), syscall 157 on x86_64.
        syscall(157, 1, 9) if $Config{archname} =~ /^x86_64-linux/;
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', "$self->{dir}/zk.log" or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(126);
        { no warnings 'exec'; exec { $argv[0] } @argv; }
        POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    delete $self->{status};
    my $t0 = time;
    my $ok = wait_until(sub { !$self->alive || ($self->four('srvr') // '') =~ /^Mode: /m }, $timeout, 0.05);
    unless ($ok && $self->alive) {
        my $log = $self->log;
        $self->stop;
        croak "ZooKeeper did not serve on port $self->{port} within $timeout s:\n$log";
    }
    $self->{started_in} = time - $t0;
    return $self;
}

# $zk->started_in: seconds from exec to serving, for the last start.
sub started_in { $_[0]{started_in} }

# $zk->four(WORD): the server's answer to a four-letter word, or undef (not listening).
sub four {
    my ($self, $word) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port}, Proto => 'tcp',
                                  Timeout => 1) or return undef;
    syswrite $s, $word;
    my ($out, $buf) = ('');
    my $end = time + 2;
    while (time < $end) {
        last unless IO::Select->new($s)->can_read($end - time);
        my $n = sysread($s, $buf, 4096);
        last unless $n;
        $out .= $buf;
    }
    close $s;
    return $out;
}

sub alive {
    my ($self) = @_;
    return 0 unless $self->{pid};
    return 0 if defined $self->{status};
    my $r = waitpid($self->{pid}, WNOHANG);
    return 1 if $r == 0;
    $self->{status} = $r == $self->{pid} ? $? : -1;
    return 0;
}

# $zk->kill: SIGKILL, and wait until it is gone and its port is closed (an outage).
sub kill {
    my ($self) = @_;
    return unless $self->alive;
    CORE::kill('KILL', $self->{pid});
    wait_until(sub { !$self->alive }, 10);
    wait_until(sub { !defined $self->four('ruok') }, 5);
}

# $zk->restart([TIMEOUT]): start it again on the same port and data dir (after kill or stop).
sub restart {
    my ($self, $timeout) = @_;
    croak 'ZooKeeper: still running' if $self->alive;
    return $self->_run($timeout // 30);
}

# $zk->stop: SIGTERM, then SIGKILL after 5 s. Idempotent.
sub stop {
    my ($self) = @_;
    if ($self->alive) {
        CORE::kill('TERM', $self->{pid});
        CORE::kill('KILL', $self->{pid}) unless wait_until(sub { !$self->alive }, 5);
        wait_until(sub { !$self->alive }, 5);
    }
    delete $LIVE{"$self"};
    return $self->{status};
}

# ZooKeeper::wait_connected(CLIENTS, TIMEOUT=15): true once every client's session is
# connected again (after a restart). A test that kills the server again must wait for
# this first: kazoo caught mid-handshake by a kill can sit out a whole session timeout.
sub wait_connected {
    my ($clients, $timeout) = @_;
    return wait_until(sub { !grep { !$_->connected } @$clients }, $timeout // 15, 0.1);
}

# $zk->client(%opt): a new session (ZooKeeper::Client); timeout => its session timeout in
# seconds (default 10).
sub client {
    my ($self, %o) = @_;
    return ZooKeeper::Client->start($self, %o);
}

sub DESTROY { local ($?, $@); $_[0]->stop if $_[0]{owner} && $_[0]{owner} == $$ }

END { local $?; $_->stop for grep { $_->{owner} == $$ } values %LIVE }

# ---- a session: tests/integration/bin/zk-client ---------------------------------------

package ZooKeeper::Client;

use strict;
use warnings;

use Carp qw(croak);
use JSON::PP ();
use Lookout qw(repo_top);
use KafkaMock ();
our @ISA = ('KafkaMock');    # its process handling: stdin pipe, ready line, stop

my $N = 0;

sub start {
    my ($class, $zk, %o) = @_;
    my @argv = (ZooKeeper::_python(), repo_top() . '/tests/integration/bin/zk-client',
                '--servers', $zk->connect, '--timeout', $o{timeout} // 10);
    my $self = $class->_spawn(\@argv, $zk->dir, 'zk-client-' . $N++, 30);
    $self->{session_id} = $self->{ready}{session_id};
    return $self;
}

sub session_id { $_[0]{session_id} }

# $c->cmd({op => ...} [, TIMEOUT=20]): the answer, decoded; croaks if there is none.
sub cmd {
    my ($self, $cmd, $timeout) = @_;
    croak 'zk-client: not running' unless $self->{in};
    print { $self->{in} } JSON::PP->new->canonical->encode($cmd) . "\n";
    my $line = ZooKeeper::_read_line($self, $timeout // 20)
        // croak 'zk-client: no answer to ' . JSON::PP::encode_json($cmd) . ': ' . $self->log;
    return JSON::PP::decode_json($line);
}

# Each returns the answer; croaks when the operation failed.
sub _ok {
    my ($self, $cmd) = @_;
    my $a = $self->cmd($cmd);
    croak "zk-client: $cmd->{op} $cmd->{path}: $a->{error}" unless $a->{ok};
    return $a;
}

sub create {
    my ($self, $path, $data, %o) = @_;
    return $self->_ok({ op => 'create', path => $path, data => $data // '',
                        ephemeral => $o{ephemeral} ? JSON::PP::true : JSON::PP::false,
                        makepath => $o{makepath} ? JSON::PP::true : JSON::PP::false });
}
sub set      { $_[0]->_ok({ op => 'set', path => $_[1], data => $_[2] }) }
sub get      { $_[0]->_ok({ op => 'get', path => $_[1] })->{data} }
sub children { $_[0]->_ok({ op => 'children', path => $_[1] })->{children} }
sub delete {
    my ($self, $path, %o) = @_;
    return $self->_ok({ op => 'delete', path => $path,
                        recursive => $o{recursive} ? JSON::PP::true : JSON::PP::false });
}
sub expire { $_[0]->_ok({ op => 'expire', id => $_[1], passwd => $_[2] }) }
sub connected { ($_[0]->_ok({ op => 'state' })->{state} // '') eq 'CONNECTED' }

# $c->close: end the session cleanly (its ephemeral nodes go at once) and wait for exit.
sub close {
    my ($self) = @_;
    my $a = $self->cmd({ op => 'close' });
    $self->stop;
    return $a;
}

# $c->kill: SIGKILL: the session lives on until it times out, as a crashed broker's does.
sub kill {
    my ($self) = @_;
    CORE::kill('KILL', $self->{pid});
    $self->stop;
}

# ---- zk-watch (tests/zk/zk-watch: proxy/lk_zk.c on a loop) ----------------------------

package ZooKeeper::Watch;

use strict;
use warnings;

use Carp qw(croak);
use File::Basename qw(dirname);
use JSON::PP ();
use Time::HiRes qw(time);
use Lookout qw(lookout_bin);
use KafkaMock ();
our @ISA = ('KafkaMock');

# ZooKeeper::Watch::bin(): tests/zk/zk-watch beside the lookout under test, or undef.
sub bin {
    my $b = $ENV{LOOKOUT_ZK_WATCH} // dirname(lookout_bin()) . '/tests/zk/zk-watch';
    return -x $b ? $b : undef;
}

# ZooKeeper::Watch->start($zk, PATH, %opt): timeout => session timeout in ms, debug => 1.
sub start {
    my ($class, $zk, $path, %o) = @_;
    my $bin = bin() or croak 'zk-watch is not built (tests/build.sh)';
    my @argv = ($bin, '--lifetime', $o{lifetime} // 300);
    push @argv, '--timeout', $o{timeout} if $o{timeout};
    push @argv, '--debug' if $o{debug};
    my $self = $class->_spawn([ @argv, $zk->connect, $path ], $zk->dir, 'zk-watch', 10);
    $self->{snaps} = [];
    return $self;
}

# Reads what it printed so far (within TIMEOUT seconds for the first line); snapshots go
# to the list that next_snapshot reads, anything else is returned.
sub _pump {
    my ($self, $timeout) = @_;
    my $line = ZooKeeper::_read_line($self, $timeout) // return undef;
    my $j = JSON::PP::decode_json($line);
    if (exists $j->{snapshot}) {
        $j->{seen} = time;
        push @{ $self->{snaps} }, $j;
        return 0;
    }
    return $j;
}

# $w->next_snapshot([TIMEOUT=10]): the next snapshot it printed ({snapshot => N, t_ms,
# nodes => {name => data}, seen => when we read it}), or undef when none came in time.
sub next_snapshot {
    my ($self, $timeout) = @_;
    my $end = time + ($timeout // 10);
    while (!@{ $self->{snaps} }) {
        my $left = $end - time;
        return undef if $left <= 0;
        $self->_pump($left);
    }
    return shift @{ $self->{snaps} };
}

# $w->snapshot_where(CODE [, TIMEOUT=10]): the first snapshot for which CODE->(nodes) is
# true, skipping others; undef if none in time.
sub snapshot_where {
    my ($self, $code, $timeout) = @_;
    my $end = time + ($timeout // 10);
    while (1) {
        my $s = $self->next_snapshot($end - time) // return undef;
        return $s if $code->($s->{nodes});
    }
}

# $w->pending: snapshots printed but not read yet (reads what is there without waiting).
sub pending {
    my ($self) = @_;
    while (1) {
        my $r = $self->_pump(0.01);
        last unless defined $r && !ref $r;
    }
    return scalar @{ $self->{snaps} };
}

# $w->ask(COMMAND [, TIMEOUT=10]): the answer to "state" or "clientid", decoded.
sub ask {
    my ($self, $cmd, $timeout) = @_;
    croak 'zk-watch: not running' unless $self->{in};
    print { $self->{in} } "$cmd\n";
    my $end = time + ($timeout // 10);
    while (1) {
        my $left = $end - time;
        croak "zk-watch: no answer to $cmd: " . $self->log if $left <= 0;
        my $j = $self->_pump($left);
        return $j if ref $j;
    }
}

sub state    { $_[0]->ask('state')->{state} }
sub clientid { $_[0]->ask('clientid')->{clientid} }

# $w->quit: "quit", then its exit status (0: it stopped the source and freed everything).
sub quit {
    my ($self) = @_;
    print { $self->{in} } "quit\n" if $self->{in};
    return $self->stop;
}

sub signal { CORE::kill($_[1], $_[0]{pid}) }

# ---- shared ----------------------------------------------------------------------------

package ZooKeeper;

# _read_line(PROC, TIMEOUT): the next line a KafkaMock-style process printed, or undef.
sub _read_line {
    my ($p, $timeout) = @_;
    my $end = time + $timeout;
    my $sel = IO::Select->new($p->{out});
    while ($p->{out_buf} !~ /\n/) {
        my $left = $end - time;
        return undef if $left <= 0;
        next unless $sel->can_read($left);
        my $n = sysread($p->{out}, my $buf, 65536);
        return undef unless $n;
        $p->{out_buf} .= $buf;
    }
    $p->{out_buf} =~ s/^(.*?)\n//;
    return $1;
}

1;
