package PulsarBroker;

# A fake Apache Pulsar broker cluster for lookout's integration tests.
#
# Each broker is a forked child process that listens on 127.x addresses (plain HTTP, HTTPS,
# or both) and answers the parts of the broker REST API that leak broker addresses, the way
# real 4.x brokers do (see /work/shared/facts/pulsar.md §1-2): HTTP lookups (200 LookupData,
# or 307 for unowned topics), admin topic calls (200 on the owner, 307 elsewhere, with the
# PulsarWebResource Location shape), /admin/v2/brokers, the functions workers of
# /admin/v2/worker/cluster (one in each broker), Pulsar-shaped errors. Under /test/
# it also offers knobs that are not Pulsar API, for testing lookout's HTTP engine (streamed
# bytes, echo, slow, dying mid-body, close-delimited, 100-continue, WebSocket upgrade,
# fast repeated bytes and a slow sink for backpressure, arbitrary response headers...).
#
# The cluster's shared state (brokers, ownership table, knobs) lives in a small JSON file
# that every broker re-reads on each request, so a test can move a topic or switch the
# LookupData version with $cluster->set(...) without restarting anything. Each broker
# appends one JSON line per request to its own log, so a test can assert what reached it.
#
# Brokers are numbered from 1 in the order given ("b1", "b2", ... like [broker prod/b1]).
# Only core Perl modules are used, plus IO::Socket::SSL for HTTPS brokers. Every process is
# bounded: brokers exit when the process that started them goes away or after `lifetime`
# seconds, connections after `idle_timeout` seconds idle or 300 s per request.

use strict;
use warnings;

use Carp qw(croak);
use Cwd qw(abs_path);
use Digest::SHA qw(sha256 sha1);
use Errno qw(EINTR);
use Fcntl qw(O_WRONLY O_APPEND O_CREAT);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use IO::Compress::Gzip qw(gzip $GzipError);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use MIME::Base64 qw(encode_base64);
use POSIX qw(WNOHANG strftime);
use Socket qw(SOL_SOCKET SO_LINGER);
use Time::HiRes qw(time sleep);

use constant {
    MAX_HEAD         => 64 * 1024,            # request head; over it: 431
    MAX_BODY         => 512 * 1024 * 1024,    # any request body we read or stream
    MAX_SLURP        => 64 * 1024 * 1024,     # bodies we hold in memory to hash
    MAX_TEST_BYTES   => 1024 * 1024 * 1024,   # /test/bytes n cap
    MAX_CONNS        => 256,                  # concurrent connection processes per broker
    REQUEST_DEADLINE => 300,                  # hard cap on one request's handling, seconds
    WS_GUID          => '258EAFA5-E914-47DA-95CA-C5AB0DC85B11',    # RFC 6455 §1.3
    REPEAT_BLOCK     => 65536,                # /test/repeat's block: test_bytes(REPEAT_BLOCK)
};

my $JSON = JSON::PP->new->canonical->allow_nonref;

# Clusters started by this process, so END can stop them if a test forgets (or dies).
my %LIVE;

our %REASON = (
    100 => 'Continue', 101 => 'Switching Protocols', 103 => 'Early Hints', 200 => 'OK', 201 => 'Created',
    204 => 'No Content', 301 => 'Moved Permanently', 302 => 'Found', 303 => 'See Other',
    304 => 'Not Modified', 307 => 'Temporary Redirect', 308 => 'Permanent Redirect',
    400 => 'Bad Request', 401 => 'Unauthorized', 403 => 'Forbidden', 404 => 'Not Found',
    405 => 'Method Not Allowed', 409 => 'Conflict', 412 => 'Precondition Failed',
    413 => 'Payload Too Large', 417 => 'Expectation Failed', 421 => 'Misdirected Request',
    426 => 'Upgrade Required', 431 => 'Request Header Fields Too Large',
    500 => 'Internal Server Error', 501 => 'Not Implemented', 502 => 'Bad Gateway',
    503 => 'Service Unavailable', 504 => 'Gateway Timeout', 508 => 'Loop Detected',
);

# ------------------------------------------------------------------------------------------
# Cluster API (runs in the test process)
# ------------------------------------------------------------------------------------------

=head1 SYNOPSIS

  my $c = PulsarBroker->start(
      brokers => ['127.0.0.1:18081', 'https://127.0.0.2:18443',
                  'http://127.0.0.3:18083,pulsar://127.0.0.3:6650,external:pulsar://b3.lookout.test:6651'],
      own     => { t1 => 1, 'public/default/t2' => 2 },
      version => 4,                   # LookupData form: 2, 4 or 5
  );
  $c->broker(1)->{http};              # "http://127.0.0.1:18081"
  $c->set(own => { t1 => 3 }, chunked => 1);
  my @seen = $c->requests(1);         # what reached b1
  $c->stop;

=cut

# PulsarBroker->start(%opt): start a cluster and return it once every broker listens.
# Options: brokers (required, see parse_broker_spec), own (topic => broker number),
# version (2|4|5, default 4), chunked, gzip, leader (default 1), unowned_to (broker
# number; default: the next broker in the ring), cluster (default "standalone"),
# internal_listener (default "internal"), cert/key (required for https brokers),
# dir (state and logs; default a temp dir), idle_timeout (30 s), lifetime (1800 s;
# 0 = until stopped or orphaned). Croaks on a bad spec or a port that cannot be bound.
sub start {
    my ($class, %opt) = @_;
    my $specs = $opt{brokers} or croak "PulsarBroker->start: brokers => [...] is required";
    croak "PulsarBroker->start: brokers must be a non-empty array" unless ref $specs eq 'ARRAY' && @$specs;

    my $dir = $opt{dir} // tempdir('fake-pulsar-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{LOOKOUT_KEEP});
    -d $dir or mkdir $dir or croak "PulsarBroker: cannot create $dir: $!";
    $dir = abs_path($dir);

    my $iname = $opt{internal_listener} // 'internal';
    my @brokers;
    for my $i (0 .. $#$specs) {
        push @brokers, parse_broker_spec($specs->[$i], $i + 1, $iname);
    }
    my $need_tls = grep { $_->{https} } @brokers;
    if ($need_tls) {
        croak "PulsarBroker: https brokers need cert => and key =>" unless $opt{cert} && $opt{key};
        require IO::Socket::SSL;
    }

    my $self = bless {
        dir      => $dir,
        state    => "$dir/pulsar-state.json",
        owner    => $$,
        pids     => {},                               # broker number => pid
        opt      => \%opt,
        brokers  => \@brokers,
    }, $class;
    $self->{conf} = {
        cluster           => $opt{cluster} // 'standalone',
        version           => "" . ($opt{version} // 4),
        chunked           => $opt{chunked} ? JSON::PP::true : JSON::PP::false,
        gzip              => $opt{gzip} ? JSON::PP::true : JSON::PP::false,
        leader            => $opt{leader} // 1,
        unowned_to        => $opt{unowned_to},
        internal_listener => $iname,
        own               => { %{ $opt{own} // {} } },
        brokers           => \@brokers,
    };
    _check_conf($self->{conf});
    $self->_write_state;
    $LIVE{"$self"} = $self;
    $self->_spawn($_->{n}) for @brokers;
    return $self;
}

# parse_broker_spec(SPEC, N, INTERNAL_NAME): one broker from a comma-separated list of URLs,
# in the style of advertisedListeners. Unprefixed URLs (or the internal listener's name as
# prefix) are the broker's internal addresses; a bare "host:port" means http://host:port.
# "name:scheme://h:p" entries form named listeners (used only for listenerName lookups).
# The broker listens on its internal http and/or https addresses; its pulsar:// URL
# defaults to port 16650+N and pulsar+ssl:// (only when it has https) to 16750+N. Nothing
# listens on those: they only appear in LookupData.
sub parse_broker_spec {
    my ($spec, $n, $iname) = @_;
    $iname //= 'internal';
    my %b = (n => $n, name => "b$n", listeners => {});
    for my $e (split /\s*,\s*/, $spec) {
        next if $e eq '';
        my ($lname, $url);
        if ($e =~ m{^([A-Za-z0-9_.-]+):((?:pulsar\+ssl|pulsar|https|http)://.+)$}) {
            ($lname, $url) = ($1, $2);
        } elsif ($e =~ m{^(?:pulsar\+ssl|pulsar|https|http)://}) {
            $url = $e;
        } elsif ($e =~ m{^[^:/]+:\d+$}) {
            $url = "http://$e";
        } else {
            croak "broker spec '$spec': cannot parse '$e'";
        }
        my ($scheme, $host, $port) = $url =~ m{^(pulsar\+ssl|pulsar|https|http)://([^/:]+):(\d+)/?$}
            or croak "broker spec '$spec': '$url' is not scheme://host:port";
        my $key = { 'pulsar' => 'pulsar', 'pulsar+ssl' => 'pulsar_ssl', 'http' => 'http', 'https' => 'https' }->{$scheme};
        if (defined $lname && $lname ne $iname) {
            $b{listeners}{$lname}{$key} = "$scheme://$host:$port";
        } else {
            croak "broker spec '$spec': two internal $scheme URLs" if $b{$key};
            $b{$key} = "$scheme://$host:$port";
        }
    }
    croak "broker spec '$spec': needs an internal http:// or https:// address" unless $b{http} || $b{https};
    for my $k (qw(http https)) {
        next unless $b{$k};
        my ($h, $p) = $b{$k} =~ m{://([^/:]+):(\d+)};
        my $ip = $h eq 'localhost' ? '127.0.0.1' : $h;
        croak "broker spec '$spec': fake brokers bind only to 127.0.0.0/8, not '$h'"
            unless $ip =~ /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;
        croak "broker spec '$spec': port $p out of range" unless $p > 0 && $p < 65536;
        $b{"${k}_bind"} = "$ip:$p";
        $b{host} //= $h;
        $b{webport} //= $p;
    }
    # brokerId = advertisedAddress:webServicePort (facts §3), so the plain web port wins.
    $b{id} = "$b{host}:$b{webport}";
    $b{pulsar} //= "pulsar://$b{host}:" . (16650 + $n);
    $b{pulsar_ssl} //= "pulsar+ssl://$b{host}:" . (16750 + $n) if $b{https};
    return \%b;
}

sub _check_conf {
    my ($conf) = @_;
    my $nb = @{ $conf->{brokers} };
    croak "version must be 2, 4 or 5" unless $conf->{version} =~ /^[245]$/;
    for my $k (qw(leader unowned_to)) {
        next unless defined $conf->{$k};
        croak "$k must be a broker number 1..$nb" unless $conf->{$k} =~ /^\d+$/ && $conf->{$k} >= 1 && $conf->{$k} <= $nb;
    }
    for my $t (keys %{ $conf->{own} }) {
        my $o = $conf->{own}{$t};
        croak "own: '$t' => '$o' is not a broker number 1..$nb" unless $o =~ /^\d+$/ && $o >= 1 && $o <= $nb;
    }
}

sub _write_state {
    my ($self) = @_;
    my $tmp = "$self->{state}.$$.tmp";
    open my $fh, '>', $tmp or croak "PulsarBroker: $tmp: $!";
    print $fh $JSON->encode($self->{conf});
    close $fh or croak "PulsarBroker: $tmp: $!";
    rename $tmp, $self->{state} or croak "PulsarBroker: rename $tmp: $!";   # atomic for readers
}

# $c->set(KEY => VALUE, ...): change own (replaces the table), version, chunked, gzip,
# leader, unowned_to, cluster, not_ready ([N...]: those brokers answer 503 to
# /admin/v2/brokers/ready and /health) or brokers_list ([brokerId...]: what
# /admin/v2/brokers lists instead of this cluster's brokers, so that a test can name
# brokers it does not run, such as binary-only ones; undef: back to the brokers' own).
# Brokers see it at their next request.
sub set {
    my ($self, %kv) = @_;
    for my $k (keys %kv) {
        croak "PulsarBroker->set: unknown key '$k'" unless $k =~ /^(own|version|chunked|gzip|leader|unowned_to|cluster|not_ready|brokers_list)$/;
        my $v = $kv{$k};
        $v = { %$v } if $k eq 'own';
        $v = $v ? JSON::PP::true : JSON::PP::false if $k eq 'chunked' || $k eq 'gzip';
        $v = [ @$v ] if ($k eq 'not_ready' || $k eq 'brokers_list') && defined $v;
        $v = "$v" if $k eq 'version';
        $self->{conf}{$k} = $v;
    }
    _check_conf($self->{conf});
    $self->_write_state;
    return $self;
}

# $c->own(TOPIC => N): move one topic; N undef makes it unowned.
sub own {
    my ($self, $topic, $n) = @_;
    my %own = %{ $self->{conf}{own} };
    if (defined $n) { $own{$topic} = $n } else { delete $own{$topic} }
    return $self->set(own => \%own);
}

sub dir     { $_[0]{dir} }
sub brokers { @{ $_[0]{brokers} } }

# $c->broker(N): the broker's description: n, name ("b1"), host, id ("host:webport"),
# http, https, pulsar, pulsar_ssl (URLs or undef), listeners {name => {scheme key => URL}},
# log (its request log file), pid.
sub broker {
    my ($self, $n) = @_;
    my $b = $self->{brokers}[ $n - 1 ] or croak "PulsarBroker: no broker $n";
    return { %$b, log => $self->log_file($n), pid => $self->{pids}{$n} };
}

sub log_file { "$_[0]{dir}/b$_[1].log" }

# $c->internal_listeners(N): the broker's internal addresses in advertisedListeners syntax,
# e.g. "internal:pulsar://127.0.0.1:16651,internal:http://127.0.0.1:18081", for a
# lookout [broker] section. The test appends its external (lookup listener) entries.
sub internal_listeners {
    my ($self, $n) = @_;
    my $b = $self->{brokers}[ $n - 1 ] or croak "PulsarBroker: no broker $n";
    my $in = $self->{conf}{internal_listener};
    return join ',', map { "$in:$b->{$_}" } grep { $b->{$_} } qw(pulsar pulsar_ssl http https);
}

# $c->requests([N]): the log records (hashrefs) of broker N, or of all brokers in time
# order. Fields: t, broker, method, target, path, query, version, status, tls, sni, peer,
# headers {lower-case name => value, repeats joined with ", "}, body_length, body_sha256.
sub requests {
    my ($self, $n) = @_;
    my @ns = defined $n ? ($n) : map { $_->{n} } @{ $self->{brokers} };
    my @recs;
    for my $i (@ns) {
        open my $fh, '<', $self->log_file($i) or next;
        while (my $l = <$fh>) {
            my $r = eval { $JSON->decode($l) } or next;    # a torn last line is skipped
            push @recs, $r;
        }
    }
    @recs = sort { $a->{t} <=> $b->{t} } @recs;
    return wantarray ? @recs : scalar @recs;
}

# $c->clear_log([N]): truncate broker N's log (or all of them).
sub clear_log {
    my ($self, $n) = @_;
    my @ns = defined $n ? ($n) : map { $_->{n} } @{ $self->{brokers} };
    for my $i (@ns) {
        open(my $fh, ">", $self->log_file($i)) or next;
        close $fh;
    }
}

# Bind a broker's listening sockets here, in the caller, so that start() returns only
# when they accept connections and a busy port fails loudly and at once.
sub _listen {
    my ($self, $b) = @_;
    my @socks;
    for my $k (qw(http https)) {
        next unless $b->{$k};
        my ($ip, $port) = split /:/, $b->{"${k}_bind"};
        my $s = IO::Socket::INET->new(LocalAddr => $ip, LocalPort => $port, Proto => 'tcp',
                                      Listen => 128, ReuseAddr => 1)
            or do { close $_->{sock} for @socks; croak "PulsarBroker: $b->{name} cannot listen on $ip:$port: $@" };
        push @socks, { sock => $s, tls => $k eq 'https' };
    }
    return \@socks;
}

sub _spawn {
    my ($self, $n) = @_;
    my $b = $self->{brokers}[ $n - 1 ];
    my $socks = $self->_listen($b);
    my $parent = $$;
    my $pid = fork;
    croak "PulsarBroker: fork: $!" unless defined $pid;
    if ($pid == 0) {
        # Child: never return into the test's code, never run its END blocks.
        # Its own process group, so that killing the broker also kills the
        # children serving its open connections, as a dead host would.
        POSIX::setpgid(0, 0);
        my $rc = eval { _broker_main($self, $b, $socks, $parent); 0 } // do { warn "fake broker $b->{name}: $@"; 1 };
        POSIX::_exit($rc);
    }
    close $_->{sock} for @$socks;    # only the broker holds its port, so killing it frees it
    POSIX::setpgid($pid, $pid);      # (also here: whichever runs first wins the race)
    $self->{pids}{$n} = $pid;
}

# $c->kill_broker(N [, SIGNAL]): stop one broker (default KILL: it vanishes, its port
# refuses connections). $c->restart_broker(N) brings it back on the same addresses.
sub kill_broker {
    my ($self, $n, $sig) = @_;
    my $pid = delete $self->{pids}{$n} or return;
    kill $sig // 'KILL', -$pid;    # the broker and its connection children
    kill $sig // 'KILL', $pid;
    _reap([$pid], 5);
}

sub restart_broker {
    my ($self, $n) = @_;
    $self->kill_broker($n, 'TERM');
    $self->_spawn($n);
}

# $c->dead_brokers: reap brokers that exited on their own (say, after
# /test/die-mid?broker=1) and return their numbers.
sub dead_brokers {
    my ($self) = @_;
    my @dead;
    for my $n (sort keys %{ $self->{pids} }) {
        next unless waitpid($self->{pids}{$n}, WNOHANG) == $self->{pids}{$n};
        delete $self->{pids}{$n};
        push @dead, $n;
    }
    return @dead;
}

# $c->stop: TERM every broker, KILL what is left after 3 s. Idempotent.
sub stop {
    my ($self) = @_;
    return unless $self->{owner} == $$;
    my @pids = values %{ $self->{pids} };
    kill 'TERM', (map { -$_ } @pids), @pids if @pids;
    my @left = _reap(\@pids, 3);
    if (@left) { kill 'KILL', (map { -$_ } @left), @left; _reap(\@left, 2) }
    $self->{pids} = {};
    delete $LIVE{"$self"};
}

# Wait up to SECS for PIDS to exit; return those still running.
sub _reap {
    my ($pids, $secs) = @_;
    my %left = map { $_ => 1 } @$pids;
    my $end = time + $secs;
    while (%left && time < $end) {
        for my $p (keys %left) {
            my $r = waitpid($p, WNOHANG);
            delete $left{$p} if $r == $p || $r == -1;
        }
        sleep 0.02 if %left;
    }
    return keys %left;
}

sub DESTROY { $_[0]->stop if $_[0]{owner} && $_[0]{owner} == $$ }
END { $_->stop for values %LIVE }

# ------------------------------------------------------------------------------------------
# Deterministic test bytes: sha256 of a big-endian u32 counter, concatenated. The same
# stream comes out whatever the read/write boundaries, so a test can hash what it got.
# ------------------------------------------------------------------------------------------

# test_bytes(N [, OFFSET]): N bytes of the stream starting at OFFSET.
sub test_bytes {
    my ($n, $off) = @_;
    $off //= 0;
    my $first = int($off / 32);
    my $out = '';
    for (my $i = $first; length($out) < ($off - $first * 32) + $n; $i++) {
        $out .= sha256(pack 'N', $i);
    }
    return substr($out, $off - $first * 32, $n);
}

# repeat_bytes_sha256(N): hex sha256 of /test/repeat?n=N (test_bytes(65536), repeated).
sub repeat_bytes_sha256 {
    my ($n) = @_;
    my $blk = test_bytes(REPEAT_BLOCK);
    my $d = Digest::SHA->new(256);
    for (my $off = 0; $off < $n; $off += REPEAT_BLOCK) {
        $d->add($n - $off < REPEAT_BLOCK ? substr($blk, 0, $n - $off) : $blk);
    }
    return $d->hexdigest;
}

# test_bytes_sha256(N): hex sha256 of the first N bytes, computed in bounded memory.
sub test_bytes_sha256 {
    my ($n) = @_;
    my $d = Digest::SHA->new(256);
    for (my $off = 0; $off < $n; $off += 65536) {
        my $len = $n - $off < 65536 ? $n - $off : 65536;
        $d->add(test_bytes($len, $off));
    }
    return $d->hexdigest;
}

# ------------------------------------------------------------------------------------------
# Broker process
# ------------------------------------------------------------------------------------------

sub _broker_main {
    my ($self, $b, $socks, $parent) = @_;
    my $opt = $self->{opt};
    $0 = "fake-pulsar $b->{name}";
    # The parent closed each earlier broker's listeners right after forking it, so we hold
    # only ours: killing a broker really frees its ports.
    my %kids;
    my $stop = 0;
    $SIG{TERM} = $SIG{INT} = sub { $stop = 1 };
    $SIG{PIPE} = 'IGNORE';
    $SIG{CHLD} = 'DEFAULT';
    my $lifetime = $opt->{lifetime} // 1800;
    my $deadline = $lifetime ? time + $lifetime : 0;
    my $me = $$;
    my $sel = IO::Select->new(map { $_->{sock} } @$socks);
    my %tls_of = map { fileno($_->{sock}) => $_->{tls} } @$socks;

    until ($stop) {
        while ((my $p = waitpid(-1, WNOHANG)) > 0) { delete $kids{$p} }
        last if getppid() != $parent;                  # the test went away: so do we
        last if $deadline && time > $deadline;
        if (keys %kids >= MAX_CONNS) { sleep 0.05; next }
        for my $l ($sel->can_read(0.5)) {
            my $c = $l->accept or next;
            # head and body go out in separate writes: without this, Nagle and
            # delayed ACKs add 40 ms to every response
            setsockopt($c, Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
            my $tls = $tls_of{ fileno $l };
            my $pid = fork;
            if (!defined $pid) { close $c; next }
            if ($pid == 0) {
                $SIG{TERM} = $SIG{INT} = 'DEFAULT';
                close $_->{sock} for @$socks;
                eval { _serve_conn($self, $b, $c, $tls, $me) };
                POSIX::_exit(0);
            }
            $kids{$pid} = 1;
            close $c;
        }
    }
    kill 'TERM', keys %kids if %kids;
    close $_->{sock} for @$socks;
}

# ---- connection I/O ------------------------------------------------------------------------

# A connection: the socket, read-ahead buffer, and what the log needs about it.
sub _conn_new {
    my ($sock, $tls) = @_;
    return { sock => $sock, tls => $tls ? 1 : 0, buf => '', sni => undef,
             peer => $sock->peerhost . ':' . $sock->peerport };
}

# Read more into $c->{buf}. Returns bytes read, 0 at EOF, undef on timeout or error.
sub _fill {
    my ($c, $timeout) = @_;
    my $s = $c->{sock};
    # TLS may already hold decrypted bytes that select() cannot see.
    unless ($c->{tls} && $s->pending) {
        my @r = IO::Select->new($s)->can_read($timeout);
        return undef unless @r;
    }
    my $n = sysread($s, my $chunk, 65536);
    return undef unless defined $n;
    $c->{buf} .= $chunk;
    return $n;
}

sub _write {
    my ($c, $data) = @_;
    my $off = 0;
    while ($off < length $data) {
        my $n = syswrite($c->{sock}, $data, length($data) - $off, $off);
        if (!defined $n) {
            next if $! == EINTR;
            die "write: $!\n";
        }
        $off += $n;
    }
}

# Read the request head. Returns a request hashref, undef on EOF/idle timeout, or
# { error => STATUS } for a head we refuse (the caller answers and closes).
sub _read_head {
    my ($c, $idle) = @_;
    while (1) {
        $c->{buf} =~ s/\A(?:\r?\n)+//;    # RFC 9112 §2.2: ignore CRLFs before a request line
        if ($c->{buf} =~ /\r?\n\r?\n/) {
            my $end = $+[0];
            my $head = substr($c->{buf}, 0, $end, '');
            return { error => 431 } if length $head > MAX_HEAD;
            return _parse_head($head);
        }
        return { error => 431 } if length $c->{buf} > MAX_HEAD;
        # Idle keep-alive wait for the first byte, then 10 s for the rest of the head.
        my $n = _fill($c, length $c->{buf} ? 10 : $idle);
        return undef unless $n;
    }
}

sub _parse_head {
    my ($head) = @_;
    my @lines = split /\r?\n/, $head;
    my $rl = shift @lines;
    my ($method, $target, $maj, $min) = $rl =~ m{^([!#\$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/(\d)\.(\d)$}
        or return { error => 400, why => 'bad request line' };
    my @h;
    for my $l (@lines) {
        # obs-fold and whitespace before the colon are smuggling shapes: refuse them.
        my ($n, $v) = $l =~ /^([!#\$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$/
            or return { error => 400, why => 'bad header line' };
        push @h, [ $n, $v ];
    }
    my %hl;
    for (@h) { my $k = lc $_->[0]; $hl{$k} = exists $hl{$k} ? "$hl{$k}, $_->[1]" : $_->[1] }
    my ($path, $query) = $target =~ /^([^?#]*)(?:\?([^#]*))?/;
    $path = $1 if $path =~ m{^https?://[^/]+(/.*)?$}i && defined $1;    # absolute-form
    my $req = { method => $method, target => $target, path => $path, query => $query,
                version => "$maj.$min", headers => \@h, h => \%hl };
    # Body framing (RFC 9112 §6): both headers, or TE not ending in chunked, is an error.
    if (exists $hl{'transfer-encoding'}) {
        return { %$req, error => 400, why => 'both Content-Length and Transfer-Encoding' }
            if exists $hl{'content-length'};
        return { %$req, error => 400, why => 'Transfer-Encoding without final chunked' }
            unless $hl{'transfer-encoding'} =~ /(?:^|,)\s*chunked\s*$/i;
        $req->{chunked} = 1;
    } elsif (exists $hl{'content-length'}) {
        my @v = split /\s*,\s*/, $hl{'content-length'};
        my %u = map { $_ => 1 } @v;
        return { %$req, error => 400, why => 'bad Content-Length' }
            if keys %u != 1 || $v[0] !~ /^\d{1,12}$/;
        $req->{length} = 0 + $v[0];
        return { %$req, error => 413, why => 'body too large' } if $req->{length} > MAX_BODY;
    } else {
        $req->{length} = 0;
    }
    my $conn = lc($hl{connection} // '');
    $req->{keep} = $req->{version} eq '1.1' ? $conn !~ /\bclose\b/ : $conn =~ /\bkeep-alive\b/;
    $req->{expect_100} = $req->{version} eq '1.1' && lc($hl{expect} // '') eq '100-continue';
    return $req;
}

# A body reader: returns a closure that yields the next piece of the request body, '' at
# its end, and dies on a malformed chunk or a timeout. Sends "100 Continue" on first use
# when the client asked for it, as Jetty does when the application starts reading.
sub _body_reader {
    my ($cx) = @_;
    my ($c, $req) = ($cx->{c}, $cx->{req});
    my $left = $req->{length};     # bytes left (CL), or in the current chunk
    my $done = !$req->{chunked} && !$left;
    my $total = 0;
    my $need = sub {               # ensure the buffer holds N bytes or a line
        my ($pat) = @_;
        while ($pat =~ /^\d+$/ ? length($c->{buf}) < $pat : $c->{buf} !~ $pat) {
            my $n = _fill($c, 30);
            die "body: timeout or EOF\n" unless $n;
        }
    };
    return sub {
        return '' if $done;
        if ($req->{expect_100} && !$cx->{sent_100}) {
            _write($c, "HTTP/1.1 100 Continue\r\n\r\n");
            $cx->{sent_100} = 1;
        }
        if (!$req->{chunked}) {
            _fill($c, 30) || die "body: timeout or EOF\n" unless length $c->{buf};
            my $piece = substr($c->{buf}, 0, $left, '');
            $left -= length $piece;
            $done = 1 unless $left;
            return $piece;
        }
        if (!$left) {
            $need->(qr/\n/);
            $c->{buf} =~ s/\A([^\r\n]*)\r?\n// or die "body: bad chunk line\n";
            my $line = $1;
            $line =~ /^([0-9A-Fa-f]{1,8})[ \t]*(?:;.*)?$/ or die "body: bad chunk size '$line'\n";
            my $size = hex $1;
            $total += $size;
            die "body: too large\n" if $total > MAX_BODY;
            if ($size == 0) {
                # Trailer section: skip fields up to the empty line.
                while (1) {
                    $need->(qr/\n/);
                    $c->{buf} =~ s/\A([^\r\n]*)\r?\n//;
                    last if $1 eq '';
                }
                $done = 1;
                return '';
            }
            $left = $size;
        }
        $need->(1);
        my $piece = substr($c->{buf}, 0, $left, '');
        $left -= length $piece;
        if (!$left) {
            $need->(2) if length($c->{buf}) < 2;
            $c->{buf} =~ s/\A\r?\n// or die "body: chunk data not followed by CRLF\n";
        }
        return $piece;
    };
}

# Read the whole body (bounded) into $req->{body}, with its sha256 and length.
sub _slurp_body {
    my ($cx) = @_;
    my $rd = $cx->{reader} //= _body_reader($cx);
    my $body = '';
    while (1) {
        my $p = $rd->();
        last if $p eq '';
        $body .= $p;
        die "body: over the slurp cap\n" if length $body > MAX_SLURP;
    }
    $cx->{req}{body} = $body;
    $cx->{body_length} = length $body;
    $cx->{body_sha256} = Digest::SHA::sha256_hex($body);
    return $body;
}

# ---- responses -----------------------------------------------------------------------------

# Send a status line and headers, log the exchange. HDRS is [[name, value], ...].
sub _send_head {
    my ($cx, $status, $hdrs, %o) = @_;
    my $reason = $o{reason} // $REASON{$status} // 'Unknown';
    my $ver = $o{version} // 'HTTP/1.1';
    my @h = (@$hdrs, [ 'X-Fake-Broker', $cx->{b}{name} ],
             [ 'Date', strftime('%a, %d %b %Y %H:%M:%S GMT', gmtime) ]);
    push @h, [ 'Connection', 'close' ] if !$cx->{keep} && $status >= 200 && $status != 101;
    push @h, [ 'Connection', 'keep-alive' ] if $cx->{keep} && $cx->{req}{version} eq '1.0';
    $cx->{sent} = 1;
    my $out = "$ver $status $reason\r\n" . join('', map { "$_->[0]: $_->[1]\r\n" } @h) . "\r\n";
    _log($cx, $status);
    _write($cx->{c}, $out);
}

sub _log {
    my ($cx, $status) = @_;
    my $req = $cx->{req} // {};
    my %h = %{ $req->{h} // {} };
    $_ = substr($_, 0, 4096) for values %h;
    my $rec = {
        t => time, broker => $cx->{b}{name}, n => $cx->{b}{n}, status => $status,
        method => $req->{method}, target => $req->{target}, path => $req->{path},
        query => $req->{query}, version => $req->{version}, tls => $cx->{c}{tls},
        sni => $cx->{c}{sni}, peer => $cx->{c}{peer}, headers => \%h,
        body_length => $cx->{body_length}, body_sha256 => $cx->{body_sha256},
        ($req->{why} ? (error => $req->{why}) : ()),
    };
    # One write(2) per line on an O_APPEND fd: lines from concurrent connections never mix.
    sysopen my $fh, $cx->{log}, O_WRONLY | O_APPEND | O_CREAT or return;
    syswrite $fh, $JSON->encode($rec) . "\n";
    close $fh;
}

# Use chunked framing for this response? The state's knob, overridden per request by an
# "X-Fake-Framing: chunked|length" request header; never for HTTP/1.0 clients.
sub _want_chunked {
    my ($cx) = @_;
    return 0 if $cx->{req}{version} eq '1.0';
    my $f = lc($cx->{req}{h}{'x-fake-framing'} // '');
    return 1 if $f eq 'chunked';
    return 0 if $f eq 'length';
    return $cx->{st}{chunked} ? 1 : 0;
}

# Send a complete response with a known body. Honours HEAD, the chunked knob (the body
# then goes out as two chunks, split mid-way, so a proxy must reassemble), and gzip (JSON
# bodies, when the client accepts it and the knob is on).
sub _respond {
    my ($cx, $status, $hdrs, $body) = @_;
    $body //= '';
    my @h = @$hdrs;
    my ($ct) = map { $_->[1] } grep { lc $_->[0] eq 'content-type' } @h;
    if ($cx->{st}{gzip} && length $body && ($ct // '') =~ /json/
        && ($cx->{req}{h}{'accept-encoding'} // '') =~ /\bgzip\b/i) {
        my $z;
        gzip(\$body => \$z) or die "gzip: $GzipError\n";
        $body = $z;
        push @h, [ 'Content-Encoding', 'gzip' ], [ 'Vary', 'Accept-Encoding' ];
    }
    my $no_body = $status == 204 || $status == 304 || $status < 200;
    my $chunked = !$no_body && _want_chunked($cx);
    if ($no_body) {
        # nothing: 204/304 carry neither body nor Content-Length
    } elsif ($chunked) {
        push @h, [ 'Transfer-Encoding', 'chunked' ];
    } else {
        push @h, [ 'Content-Length', length $body ];
    }
    _send_head($cx, $status, \@h);
    return if $no_body || $cx->{head};
    if ($chunked) {
        my $half = int(length($body) / 2);
        _write($cx->{c}, _chunk(substr($body, 0, $half)) . _chunk(substr($body, $half)) . "0\r\n\r\n");
    } else {
        _write($cx->{c}, $body);
    }
}

sub _chunk { length $_[0] ? sprintf("%x\r\n", length $_[0]) . $_[0] . "\r\n" : '' }

sub _json  { _respond($_[0], $_[1], [ [ 'Content-Type', 'application/json' ] ], ref $_[2] ? $JSON->encode($_[2]) : $_[2]) }
sub _reason { _json($_[0], $_[1], { reason => $_[2] }) }     # RestException / ErrorData shape

# ---- connection loop -----------------------------------------------------------------------

sub _serve_conn {
    my ($self, $b, $sock, $tls, $parent) = @_;
    my $opt = $self->{opt};
    $SIG{ALRM} = sub { POSIX::_exit(0) };
    $SIG{PIPE} = 'IGNORE';
    alarm 15;    # bounds the TLS handshake
    if ($tls) {
        IO::Socket::SSL->start_SSL($sock, SSL_server => 1, SSL_cert_file => $opt->{cert},
                                   SSL_key_file => $opt->{key}, Timeout => 10)
            or return;
    }
    my $c = _conn_new($sock, $tls);
    $c->{sni} = $sock->get_servername if $tls;
    my $idle = $opt->{idle_timeout} // 30;
    while (1) {
        alarm 0;
        return if getppid() != $parent;
        my $req = _read_head($c, $idle) or return;
        alarm REQUEST_DEADLINE;
        my $st = eval { _read_state($self->{state}) } or return;
        my $cx = { self => $self, b => $b, c => $c, req => $req, st => $st,
                   log => $self->log_file($b->{n}), keep => $req->{keep},
                   head => ($req->{method} // '') eq 'HEAD' };
        if ($req->{error}) {
            $req->{version} //= "1.1";
            $req->{h} //= {};
            $cx->{keep} = 0;
            _respond($cx, $req->{error}, [ [ 'Content-Type', 'text/plain' ] ], ($req->{why} // 'bad request') . "\n");
            return;
        }
        my $ok = eval { _dispatch($cx); 1 };
        if (!$ok) {
            # A malformed body gets a 400 if nothing was sent yet; a dead peer, a close.
            $cx->{keep} = 0;
            eval { _reason($cx, 400, "bad request body") } unless $cx->{sent};
            return;
        }
        return unless $cx->{keep};
        # A body the handler did not read would be taken for the next request.
        if (!$cx->{reader}) { eval { _slurp_body($cx); 1 } or return }
    }
}

sub _read_state {
    my ($file) = @_;
    open my $fh, '<', $file or die "state: $file: $!\n";
    local $/;
    return $JSON->decode(scalar <$fh>);
}

# ---- routing -------------------------------------------------------------------------------

sub _dispatch {
    my ($cx) = @_;
    my $req = $cx->{req};
    my $p = $req->{path};
    return _test($cx, $1) if $p =~ m{^/test/([A-Za-z0-9-]+)/?$};

    # Pulsar API handlers all want the whole body first (a JAX-RS resource gets it parsed).
    _slurp_body($cx);
    if ($p =~ m{^/lookup/v2/(topic)/((?:persistent|non-persistent)/[^/]+/[^/]+/[^/]+)(/bundle)?/?$}
        || $p =~ m{^/lookup/v2/(destination)/((?:persistent|non-persistent)/[^/]+/[^/]+/[^/]+/[^/]+)(/bundle)?/?$}) {
        return _lookup($cx, $1, $2, $3);
    }
    return _json($cx, 200, [ $cx->{st}{cluster} ]) if $p =~ m{^/admin/v2/clusters/?$};
    if ($p =~ m{^/admin/v2/brokers/leaderBroker/?$}) {
        my $l = _broker_n($cx, $cx->{st}{leader});
        return _json($cx, 200, { serviceUrl => $l->{http} // $l->{https} });
    }
    if ($p =~ m{^/admin/v2/worker/cluster(/leader)?/?$}) {
        # A functions worker in every broker (functionsWorkerEnabled): WorkerInfo
        # {workerId, workerHostname, port}, as PulsarService sets them up: the broker's
        # advertisedAddress and web port, the id "c-CLUSTER-fw-HOST-PORT".
        my $leader = $1;
        my @w = map { { workerId => "c-$cx->{st}{cluster}-fw-$_->{host}-$_->{webport}",
                        workerHostname => $_->{host}, port => $_->{webport} + 0 } }
                $leader ? _broker_n($cx, $cx->{st}{leader}) : @{ $cx->{st}{brokers} };
        return _json($cx, 200, $leader ? $w[0] : \@w);
    }
    if ($p =~ m{^/admin/v2/brokers/(ready|health)/?$}) {
        # BrokersBase: 200 text "ok" when the broker serves (ready), or when a
        # heartbeat round trip works (health); the not_ready knob makes both fail on
        # the brokers it lists, as on a broker still starting, or failing.
        return _reason($cx, 503, "broker is not ready")
            if grep { $_ == $cx->{b}{n} } @{ $cx->{st}{not_ready} // [] };
        return _respond($cx, 200, [ [ 'Content-Type', 'text/plain' ] ], 'ok');
    }
    if ($p =~ m{^/admin/v2/brokers(?:/[^/]+)?/?$}) {
        # The classic leak: every broker's internal host:port (its brokerId).
        return _json($cx, 200, $cx->{st}{brokers_list} // [ map { $_->{id} } @{ $cx->{st}{brokers} } ]);
    }
    if ($p =~ m{^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)(?:/(.*))?$}) {
        return _admin_topic($cx, $1, $2, $3, $4, $5 // '');
    }
    # Jersey finds no resource: Jetty's default error page.
    return _respond($cx, 404, [ [ 'Content-Type', 'text/html;charset=iso-8859-1' ] ],
                    "<html><body><h2>HTTP ERROR 404 Not Found</h2></body></html>\n");
}

sub _broker_n { $_[0]{st}{brokers}[ $_[1] - 1 ] }

sub _uri_unescape { my $s = shift; $s =~ s/\+/ /g if $_[0]; $s =~ s/%([0-9A-Fa-f]{2})/chr hex $1/ge; $s }

# Query parameters: [raw name, raw value, raw pair] in order, and a decoded name => value map
# (the first occurrence wins, as JAX-RS @QueryParam does).
sub _query {
    my ($q) = @_;
    my (@pairs, %v);
    for my $pair (split /&/, $q // '', -1) {
        my ($n, $val) = $pair =~ /^([^=]*)(?:=(.*))?$/s;
        push @pairs, [ $n, $val, $pair ];
        my $dn = _uri_unescape($n, 1);
        $v{$dn} //= _uri_unescape($val // '', 1);
    }
    return (\@pairs, \%v);
}

# Owner of a topic: the table is keyed by full name (persistent://t/n/x), t/n/x, or just x.
sub _owner {
    my ($cx, $domain, $rest, $local) = @_;
    my $own = $cx->{st}{own};
    for my $k ("$domain://$rest", $rest, $local) {
        return $own->{$k} if defined $k && exists $own->{$k};
    }
    return undef;
}

# Broker that takes an unowned topic: the unowned_to knob, else the next one in the ring.
sub _unowned_target {
    my ($cx) = @_;
    my $nb = @{ $cx->{st}{brokers} };
    return $cx->{st}{unowned_to} // ($cx->{b}{n} % $nb) + 1;
}

# Pulsar-shaped errors chosen by the topic's local name (missing*, boom*, busy*).
# Returns true when it answered.
sub _topic_error {
    my ($cx, $full, $local) = @_;
    my $name = _uri_unescape($local);
    if ($name =~ /^missing/) {
        _reason($cx, 404, "Topic not found $full");
        return 1;
    }
    if ($name =~ /^boom/) {
        # RestException(Throwable): text/plain with a stack trace. Real traces often name
        # a broker address; this one names ours, so leak checks have something to find.
        my $msg = "java.lang.IllegalStateException: boom on $full at $cx->{b}{id}";
        _respond($cx, 500, [ [ 'Content-Type', 'text/plain' ] ],
                 "\n --- An unexpected error occurred in the server ---\n\nMessage: $msg\n\nStacktrace:\n\n$msg\n"
                 . "\tat org.apache.pulsar.broker.admin.impl.PersistentTopicsBase.internalGetStats(PersistentTopicsBase.java:1234)\n");
        return 1;
    }
    if ($name =~ /^busy/) {
        _respond($cx, 503, [], '');    # WebApplicationException(SERVICE_UNAVAILABLE): no body
        return 1;
    }
    return 0;
}

# LookupData for broker N in the state's version form (facts §1). LISTENER, when given and
# present on the broker, replaces brokerUrl(Tls)/nativeUrl; httpUrl(Tls) stay internal
# even then (the 4.x behaviour PIP-338 complains about).
sub lookup_data_json {
    my ($st, $b, $listener) = @_;
    my ($pu, $pus) = ($b->{pulsar}, $b->{pulsar_ssl});
    if (defined $listener && $listener ne $st->{internal_listener}) {
        my $l = $b->{listeners}{$listener} // {};
        ($pu, $pus) = ($l->{pulsar}, $l->{pulsar_ssl});
    }
    my $v = $st->{version};
    # Jackson order: fields as declared, then the getter-only brokerUrlSsl. 4.x and 5.0
    # omit nulls (Include.NON_NULL). The "2" form writes them as null instead: an
    # UNVERIFIED variant, there so the rewriter meets explicit nulls too.
    my @kv = ([ brokerUrl => $pu ], [ brokerUrlTls => $pus ], [ httpUrl => $b->{http} ],
              [ httpUrlTls => $b->{https} ], [ nativeUrl => $pu ]);
    push @kv, [ brokerId => $b->{id} ] if $v eq '5';
    push @kv, [ brokerUrlSsl => '' ];
    @kv = grep { defined $_->[1] } @kv unless $v eq '2';
    return '{' . join(',', map { $JSON->encode($_->[0]) . ':' . $JSON->encode($_->[1]) } @kv) . '}';
}

sub _listener_error {
    my ($cx, $target, $listener) = @_;
    return 0 unless defined $listener && $listener ne '';
    return 0 if $listener eq $cx->{st}{internal_listener} || $target->{listeners}{$listener};
    # 4.x NamespaceService: PulsarServerException("the broker do not have <name> listener").
    # The JSON 500 body here is a choice: the real broker may render it via
    # RestException(Throwable) as the text/plain page instead (UNVERIFIED).
    _reason($cx, 500, "the broker do not have $listener listener");
    return 1;
}

# GET /lookup/v2/{topic|destination}/{name...}: 4.x TopicLookupBase.internalLookupTopicAsync.
sub _lookup {
    my ($cx, $kind, $name, $bundle) = @_;
    my $req = $cx->{req};
    my (undef, $q) = _query($req->{query});
    my ($domain, $rest) = $name =~ m{^([^/]+)/(.*)$};
    my ($local) = $rest =~ m{([^/]+)$};
    my $full = "$domain://" . _uri_unescape($rest);
    return if _topic_error($cx, $full, $local);
    return _respond($cx, 200, [ [ 'Content-Type', 'text/plain' ] ], '0x00000000_0xffffffff') if $bundle;

    # Query wins; the header is used only when the query value is empty (PIP-95).
    my $listener = $q->{listenerName};
    $listener = $req->{h}{'x-pulsar-listenername'} if !defined $listener || $listener eq '';
    $listener = undef if defined $listener && $listener eq '';
    my $auth = lc($q->{authoritative} // 'false') eq 'true';

    my $owner = _owner($cx, $domain, _uri_unescape($rest), _uri_unescape($local));
    if (!defined $owner) {
        if ($auth) {
            $owner = $cx->{b}{n};    # authoritative: this broker takes the bundle
        } else {
            my $t = _broker_n($cx, _unowned_target($cx));
            return if _listener_error($cx, $t, $listener);
            my $base = $cx->{c}{tls} ? $t->{https} : $t->{http};
            return _reason($cx, 412, "Redirected cluster's service url is not configured.") unless $base;
            # The original query is dropped; only authoritative (+ listenerName) survive.
            my $loc = "$base/lookup/v2/$kind/$name?authoritative=true";
            $loc .= "&listenerName=$listener" if defined $listener;
            return _respond($cx, 307, [ [ 'Location', $loc ] ], '');
        }
    }
    my $ob = _broker_n($cx, $owner);
    return if _listener_error($cx, $ob, $listener);
    return _json($cx, 200, lookup_data_json($cx->{st}, $ob, $listener));
}

# /admin/v2/{domain}/{tenant}/{ns}/{topic}[/op]: PulsarWebResource.validateTopicOwnership.
sub _admin_topic {
    my ($cx, $domain, $tenant, $ns, $topic, $op) = @_;
    my $req = $cx->{req};
    my $rest = "$tenant/$ns/$topic";
    my $full = "$domain://" . _uri_unescape($rest);
    my ($pairs, $q) = _query($req->{query});

    # Metadata-only operations never redirect (facts §2).
    if ($op eq 'partitions') {
        return _respond($cx, 204, [], '') if $req->{method} =~ /^(PUT|POST|DELETE)$/;
        return _json($cx, 200, '{"partitions":0}');
    }
    return if _topic_error($cx, $full, $topic);

    my $me = $cx->{b}{n};
    my $owner = _owner($cx, $domain, _uri_unescape($rest), _uri_unescape($topic));
    my $auth = lc($q->{authoritative} // 'false') eq 'true';
    my ($target, $newauth);
    if (!defined $owner) {
        ($target, $newauth) = $auth ? ($me, undef) : (_unowned_target($cx), 'true');
    } else {
        ($target, $newauth) = ($owner, $cx->{st}{leader} == $me ? 'true' : 'false');
    }
    if ($target != $me) {
        my $t = _broker_n($cx, $target);
        my $base = $cx->{c}{tls} ? $t->{https} : $t->{http};
        return _reason($cx, 412, "Redirected cluster's service url is not configured.") unless $base;
        # UriBuilder.fromUri(requestUri).host().port().replaceQueryParam("authoritative", v):
        # scheme, path and every other parameter stay byte for byte; authoritative goes last.
        my @keep = map { $_->[2] } grep { $_->[2] ne "" && _uri_unescape($_->[0], 1) ne "authoritative" } @$pairs;
        my $loc = $base . $req->{path} . '?' . join('&', @keep, "authoritative=$newauth");
        return _respond($cx, 307, [ [ 'Location', $loc ] ], '');
    }

    my $m = $req->{method};
    return _respond($cx, 204, [], '') if $m eq 'DELETE';
    if ($m eq 'PUT' || $m eq 'POST') {
        return _json($cx, 200, { method => $m, topic => $full, op => $op, broker => $cx->{b}{name},
                                 length => $cx->{body_length}, sha256 => $cx->{body_sha256} });
    }
    if ($op eq 'stats') {
        # Trimmed TopicStatsImpl; ownerBroker is a real field and a real leak (host:port).
        return _json($cx, 200, '{"msgRateIn":0.0,"msgThroughputIn":0.0,"msgRateOut":0.0,'
            . '"msgThroughputOut":0.0,"bytesInCounter":0,"msgInCounter":0,"averageMsgSize":0.0,'
            . '"storageSize":0,"backlogSize":0,"publishers":[],"waitingPublishers":0,'
            . '"subscriptions":{},"replication":{},"deduplicationStatus":"Disabled",'
            . '"ownerBroker":' . $JSON->encode($cx->{b}{id}) . '}');
    }
    return _json($cx, 200, '[]') if $op eq 'subscriptions';
    return _json($cx, 200, '{"ledgerId":0,"entryId":-1,"partitionIndex":-1}') if $op eq 'lastMessageId';
    return _json($cx, 200, { topic => $full, op => $op, broker => $cx->{b}{name} });
}

# ---- /test/ knobs (not Pulsar API) --------------------------------------------------------

sub _test {
    my ($cx, $what) = @_;
    my $req = $cx->{req};
    my (undef, $q) = _query($req->{query});
    my $c = $cx->{c};

    if ($what eq 'bytes') {
        # n deterministic bytes; te=chunked (or X-Fake-Framing) for chunked framing with
        # irregular chunk sizes, else Content-Length.
        _slurp_body($cx);
        my $n = _num($q->{n}, 0, MAX_TEST_BYTES);
        my $chunked = ($q->{te} // '') eq 'chunked' || (!defined $q->{te} && _want_chunked($cx));
        $chunked = 0 if $req->{version} eq '1.0';
        _send_head($cx, 200, [ [ 'Content-Type', 'application/octet-stream' ],
                               $chunked ? [ 'Transfer-Encoding', 'chunked' ] : [ 'Content-Length', $n ] ]);
        return if $cx->{head};
        my @sizes = (1, 7, 4096, 65536, 13, 32768, 1000, 2);
        my ($off, $i) = (0, 0);
        while ($off < $n) {
            my $len = $chunked ? $sizes[ $i++ % @sizes ] : 65536;
            $len = $n - $off if $len > $n - $off;
            my $data = test_bytes($len, $off);
            _write($c, $chunked ? _chunk($data) : $data);
            $off += $len;
        }
        _write($c, "0\r\n\r\n") if $chunked;
        return;
    }
    if ($what eq 'echo') {
        _slurp_body($cx);
        return _json($cx, 200, { method => $req->{method}, length => $cx->{body_length},
                                 sha256 => $cx->{body_sha256} });
    }
    if ($what eq 'echo-body') {
        # Streams the body back as it arrives: same Content-Length, or chunk for chunk.
        my $rd = $cx->{reader} = _body_reader($cx);
        my $chunked = $req->{chunked};
        # The 100 Continue must come before our head, not when the reader first runs.
        if ($req->{expect_100}) {
            _write($c, "HTTP/1.1 100 Continue\r\n\r\n");
            $cx->{sent_100} = 1;
        }
        _send_head($cx, 200, [ [ 'Content-Type', 'application/octet-stream' ],
                               $chunked ? [ 'Transfer-Encoding', 'chunked' ] : [ 'Content-Length', $req->{length} ] ]);
        while (1) {
            my $p = $rd->();
            last if $p eq '';
            _write($c, $chunked ? _chunk($p) : $p) unless $cx->{head};
        }
        _write($c, "0\r\n\r\n") if $chunked && !$cx->{head};
        return;
    }
    if ($what eq 'slow') {
        # Sleep ms before the head (where=headers, default) or between two body halves.
        _slurp_body($cx);
        my $ms = _num($q->{ms}, 0, 120_000);
        if (($q->{where} // 'headers') eq 'body') {
            my $body = $JSON->encode({ slept_ms => $ms }) . (' ' x 64);
            my $half = int(length($body) / 2);
            _send_head($cx, 200, [ [ 'Content-Type', 'application/json' ], [ 'Content-Length', length $body ] ]);
            return if $cx->{head};
            _write($c, substr($body, 0, $half));
            sleep $ms / 1000;
            _write($c, substr($body, $half));
            return;
        }
        sleep $ms / 1000;
        return _json($cx, 200, { slept_ms => $ms });
    }
    if ($what eq 'die-mid') {
        # Promise n bytes, send half, vanish. rst=1 resets instead of closing; broker=1
        # also kills this whole broker (its port then refuses connections).
        _slurp_body($cx);
        my $n = _num($q->{n}, 2, MAX_TEST_BYTES);
        $cx->{keep} = 0;
        _send_head($cx, 200, [ [ 'Content-Type', 'application/octet-stream' ], [ 'Content-Length', $n ] ]);
        _write($c, test_bytes(int($n / 2)));
        kill 'TERM', getppid() if $q->{broker};
        setsockopt($c->{sock}, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0)) if $q->{rst};
        POSIX::_exit(0);    # the kernel closes (or resets) the socket
    }
    if ($what eq 'location') {
        # A redirect to anywhere: code (default 307), to (Location), content_location.
        # base=URL instead redirects to URL + this request's own path and query, so
        # base=<this broker> loops on itself; with alt=URL2 the two swap places in the
        # query, so two brokers send the request back and forth (apache/pulsar#13946).
        # early=1 answers before reading the request body (then reads and drops it, and
        # closes), as Jetty does with a 307 for a PUT (apache/pulsar PR 25919).
        my $early = $q->{early};
        _slurp_body($cx) unless $early;
        my $code = _num($q->{code}, 300, 399, 307);
        my @h;
        push @h, [ 'Location', $q->{to} ] if defined $q->{to};
        if (defined $q->{base}) {
            my ($pairs) = _query($req->{query});
            my %raw = map { (_uri_unescape($_->[0], 1) => $_->[1] // '') } reverse @$pairs;
            my $query = defined $q->{alt} ? "base=$raw{alt}&alt=$raw{base}" : $req->{query};
            push @h, [ 'Location', $q->{base} . $req->{path} . '?' . $query ];
        }
        push @h, [ 'Content-Location', $q->{content_location} ] if defined $q->{content_location};
        return _respond($cx, $code, \@h, '') unless $early;
        $cx->{keep} = 0;
        $cx->{sent_100} = 1;    # a final status went out instead: never a 100 after it
        _respond($cx, $code, \@h, '');
        my $rd = $cx->{reader} = _body_reader($cx);
        1 while $rd->() ne '';
        return;
    }
    if ($what eq 'coded') {
        # A JSON body in the given coding whatever the client asked for (a broker, or a
        # cache before it, that ignores Accept-Encoding): coding=gzip, or gzip,gzip (gzip
        # twice, "Content-Encoding: gzip, gzip", RFC 9110 8.4: stacked codings); the body is
        # pad spaces (at most MAX_TEST_BYTES), then {"owner":TEXT}.
        _slurp_body($cx);
        my @codings = split /,/, ($q->{coding} // 'gzip');
        return _reason($cx, 400, 'coding: gzip or gzip,gzip') if grep { $_ ne 'gzip' } @codings;
        my $body = (' ' x _num($q->{pad}, 0, MAX_TEST_BYTES)) . $JSON->encode({ owner => $q->{text} // "" });
        for (@codings) {
            my $z;
            gzip(\$body => \$z, Minimal => 1) or die "gzip: $GzipError\n";   # no time: the same bytes each time
            $body = $z;
        }
        _send_head($cx, 200, [ [ 'Content-Type', 'application/json' ], [ 'Content-Encoding', join(', ', @codings) ],
                               [ 'Content-Length', length $body ] ]);
        _write($cx->{c}, $body) unless $cx->{head};
        return;
    }
    if ($what eq 'status') {
        _slurp_body($cx);
        return _reason($cx, _num($q->{code}, 200, 599, 200), $q->{reason} // 'test status');
    }
    if ($what eq 'lookupdata') {
        # LookupData of broker N from a non-lookup path ("any response that is LookupData").
        _slurp_body($cx);
        my $nb = @{ $cx->{st}{brokers} };
        return _json($cx, 200, lookup_data_json($cx->{st}, _broker_n($cx, _num($q->{broker}, 1, $nb, $cx->{b}{n})), undef));
    }
    if ($what eq 'big-headers') {
        # A response head of at least n bytes (for max_header_bytes on responses).
        _slurp_body($cx);
        my $n = _num($q->{n}, 0, 1024 * 1024);
        return _respond($cx, 200, [ [ 'Content-Type', 'text/plain' ], [ 'X-Big', 'a' x $n ] ], "big\n");
    }
    if ($what eq 'close-delimited') {
        # No Content-Length, no chunking: the body ends when we close (v=1.0 for an
        # HTTP/1.0 status line).
        _slurp_body($cx);
        my $n = _num($q->{n}, 0, MAX_TEST_BYTES);
        $cx->{keep} = 0;
        _send_head($cx, 200, [ [ 'Content-Type', 'application/octet-stream' ] ],
                   version => ($q->{v} // '') eq '1.0' ? 'HTTP/1.0' : 'HTTP/1.1');
        return if $cx->{head};
        for (my $off = 0; $off < $n; $off += 65536) {
            _write($c, test_bytes($n - $off < 65536 ? $n - $off : 65536, $off));
        }
        return;
    }
    if ($what eq 'headers') {
        # What arrived, in order, with the original case: for X-Forwarded-* and hop-by-hop
        # checks.
        _slurp_body($cx);
        return _json($cx, 200, { method => $req->{method}, target => $req->{target},
                                 version => "HTTP/$req->{version}", tls => $c->{tls} ? JSON::PP::true : JSON::PP::false,
                                 sni => $c->{sni}, peer => $c->{peer}, headers => $req->{headers},
                                 body_length => $cx->{body_length} });
    }
    if ($what eq '100') {
        # Expect: 100-continue. final=CODE answers at once without 100 and without reading
        # the body (then closes, since the body may still come).
        if (defined $q->{final}) {
            $cx->{keep} = 0;
            $cx->{reader} = sub { '' };
            return _reason($cx, _num($q->{final}, 200, 599, 417), 'final status instead of 100 Continue');
        }
        _slurp_body($cx);
        return _json($cx, 200, { length => $cx->{body_length}, sha256 => $cx->{body_sha256},
                                 expect => $req->{h}{expect},
                                 sent_100 => $cx->{sent_100} ? JSON::PP::true : JSON::PP::false });
    }
    if ($what eq 'ws') {
        return _websocket($cx);
    }
    if ($what eq 'repeat') {
        # n bytes of repeat_bytes(): test_bytes(block) over and over, written as fast as
        # the socket takes it (test_bytes itself runs at ~25 MB/s in Perl, too slow to
        # outrun a proxy that buffers without bound). Content-Length framing.
        _slurp_body($cx);
        my $n = _num($q->{n}, 0, MAX_TEST_BYTES);
        my $blk = test_bytes(REPEAT_BLOCK);
        _send_head($cx, 200, [ [ 'Content-Type', 'application/octet-stream' ], [ 'Content-Length', $n ] ]);
        return if $cx->{head};
        for (my $off = 0; $off < $n; $off += REPEAT_BLOCK) {
            _write($c, $n - $off < REPEAT_BLOCK ? substr($blk, 0, $n - $off) : $blk);
        }
        return;
    }
    if ($what eq 'sink') {
        # Read nothing for ms milliseconds (a slow broker), then stream-hash the whole
        # body (no slurp cap) and answer { length, sha256, slept_ms }.
        my $ms = _num($q->{ms}, 0, 120_000);
        sleep $ms / 1000;
        my $rd = $cx->{reader} = _body_reader($cx);
        my $d = Digest::SHA->new(256);
        my $len = 0;
        while (1) {
            my $p = $rd->();
            last if $p eq '';
            $d->add($p);
            $len += length $p;
        }
        $cx->{body_length} = $len;
        $cx->{body_sha256} = $d->hexdigest;
        return _json($cx, 200, { length => $len, sha256 => $cx->{body_sha256}, slept_ms => $ms });
    }
    if ($what eq 'respond') {
        # A response with the given status and extra header lines: h=Name:Value, repeatable,
        # in order (for hop-by-hop checks on responses). Body: "respond\n". phrase=TEXT: the
        # status line's reason phrase. interim=CODE (100-199 but 101): that interim head
        # first, with ih=Name:Value lines as h= gives.
        my ($pairs) = _query($req->{query});
        _slurp_body($cx);
        my $fields = sub {
            my ($key) = @_;
            my @h = map { [ split /:\s*/, _uri_unescape($_->[1] // '', 1), 2 ] }
                    grep { _uri_unescape($_->[0], 1) eq $key } @$pairs;
            return grep { defined $_->[1] && $_->[0] =~ /^[!#\$%&'*+.^_`|~0-9A-Za-z-]+$/ } @h;
        };
        my $interim = _num($q->{interim}, 100, 199, 0);
        if ($interim && $interim != 101) {
            _write($c, "HTTP/1.1 $interim " . ($REASON{$interim} // 'Interim') . "\r\n"
                       . join('', map { "$_->[0]: $_->[1]\r\n" } $fields->('ih')) . "\r\n");
        }
        local $REASON{_num($q->{code}, 200, 599, 200)} = $q->{phrase} =~ s/[\r\n]//gr if defined $q->{phrase};
        return _respond($cx, _num($q->{code}, 200, 599, 200), [ [ 'Content-Type', 'text/plain' ], $fields->('h') ], "respond\n");
    }
    _slurp_body($cx);
    return _reason($cx, 404, "no such test endpoint /test/$what");
}

sub _num {
    my ($v, $min, $max, $default) = @_;
    return $default // $min unless defined $v && $v =~ /^\d+$/;
    return $v < $min ? $min : $v > $max ? $max : $v;
}

# /test/ws: answer "Upgrade: websocket" with 101, then echo raw bytes until EOF or idle
# (sink=MS: take them instead, below).
sub _websocket {
    my ($cx) = @_;
    my ($req, $c) = ($cx->{req}, $cx->{c});
    if (lc($req->{h}{upgrade} // '') ne 'websocket') {
        _slurp_body($cx);
        return _reason($cx, 426, 'expected Upgrade: websocket');
    }
    $cx->{reader} = sub { '' };
    my $key = $req->{h}{'sec-websocket-key'} // '';
    my $accept = encode_base64(sha1($key . WS_GUID), '');
    $cx->{keep} = 1;    # no "Connection: close" on a 101
    # h=Name:Value lines join the 101 head (what a broker may say in it).
    my ($pairs) = _query($req->{query});
    my @extra = grep { defined $_->[1] } map { [ split /:\s*/, _uri_unescape($_->[1] // '', 1), 2 ] }
                grep { _uri_unescape($_->[0], 1) eq 'h' } @$pairs;
    _send_head($cx, 101, [ [ 'Upgrade', 'websocket' ], [ 'Connection', 'Upgrade' ],
                           [ 'Sec-WebSocket-Accept', $accept ], @extra ]);
    $cx->{keep} = 0;
    # sink=MS: read nothing for MS ms (a slow broker), then take every byte to the end and
    # log how many, with their sha256, as a record of status "tunnel".
    my ($sink) = map { _uri_unescape($_->[1] // '', 1) } grep { $_->[0] eq 'sink' } @$pairs;
    if (defined $sink) {
        sleep _num($sink, 0, 120_000) / 1000;
        my $d = Digest::SHA->new(256);
        my $n = 0;
        while (1) {
            if (length $c->{buf}) {
                $d->add($c->{buf});
                $n += length $c->{buf};
                $c->{buf} = '';
            }
            alarm REQUEST_DEADLINE;
            last unless _fill($c, $cx->{self}{opt}{idle_timeout} // 30);
        }
        @$cx{qw(body_length body_sha256)} = ($n, $d->hexdigest);
        _log($cx, 'tunnel');
        return;
    }
    while (1) {
        if (length $c->{buf}) {
            _write($c, $c->{buf});
            $c->{buf} = '';
        }
        alarm REQUEST_DEADLINE;
        last unless _fill($c, $cx->{self}{opt}{idle_timeout} // 30);
    }
}

1;
