package RawBroker;

# A strict HTTP/1.1 origin server that records every byte it receives, for tests that must
# know exactly what lookout forwarded (46-smuggling.t).
#
# One forked process per broker, one select loop, any number of keep-alive connections on
# 127.0.0.1. Every event goes to a JSON-lines log: a connection opening, each read (the raw
# bytes, hex), each request it parsed, each framing error, each close. Requests are parsed
# strictly (parse_request below): CRLF line endings only, token methods and field names,
# no obs-fold, no control characters, one Host on HTTP/1.1, framing by exactly one
# Content-Length of digits or by Transfer-Encoding: chunked alone, chunk lines and
# trailers checked. Each request gets 200 {"ok":true} with X-Raw-Broker: NAME, and the
# connection stays open (unless the request closes it); `Expect: 100-continue` gets its
# 100 once the head is in and the body is not. A request it cannot parse gets 400 and a
# close, and the log says why: for a proxy in front, any such entry means it forwarded
# something that a strict server reads differently from the proxy.
#
#   my $b = RawBroker->start(dir => $dir, name => 'b1');     # port => P, or a free one
#   my $mark = $b->mark;  ...traffic...  $b->settle;
#   my @ev = $b->events_since($mark);  # {ev => open|data|req|error|close, conn => N, ...}
#
# Only core Perl modules. The process exits when the test process goes away, on TERM, or
# after `lifetime` seconds (default 900).

use strict;
use warnings;

use Carp qw(croak);
use Errno qw(EINTR EAGAIN EWOULDBLOCK);
use Fcntl qw(O_WRONLY O_APPEND O_CREAT);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

use constant {
    MAX_HEAD  => 64 * 1024,
    MAX_CHUNK => 1 << 40,       # a chunk size past this is an error, not a number to trust
};

my $JSON = JSON::PP->new->canonical;
my $TCHAR = qr/[!#\$%&'*+\-.^_`|~0-9A-Za-z]/;

# RawBroker->start(dir => DIR, name => NAME [, port => P, host => '127.0.0.1', lifetime => S])
sub start {
    my ($class, %o) = @_;
    my $dir = $o{dir} // croak 'RawBroker->start: dir => DIR required';
    my $name = $o{name} // 'b1';
    my $host = $o{host} // '127.0.0.1';
    my $l = IO::Socket::INET->new(LocalAddr => $host, LocalPort => $o{port} // 0, Proto => 'tcp',
                                  Listen => 128, ReuseAddr => 1)
        or croak "RawBroker $name: cannot listen on $host:" . ($o{port} // 0) . ": $@";
    my $self = bless { dir => $dir, name => $name, host => $host, port => $l->sockport,
                       log => "$dir/$name.raw.jsonl", owner => $$ }, $class;
    open my $fh, '>', $self->{log} or croak "RawBroker: $self->{log}: $!";
    close $fh;
    my $parent = $$;
    my $pid = fork;
    croak "RawBroker: fork: $!" unless defined $pid;
    if ($pid == 0) {
        my $rc = eval { _main($self, $l, $parent, $o{lifetime} // 900); 0 } // do { warn "RawBroker $name: $@"; 1 };
        POSIX::_exit($rc);
    }
    close $l;
    $self->{pid} = $pid;
    return $self;
}

sub name { $_[0]{name} }
sub port { $_[0]{port} }
sub addr { "$_[0]{host}:$_[0]{port}" }
sub log_file { $_[0]{log} }

# $b->mark: a position in the log; events_since(MARK) returns what came after it.
sub mark { -s $_[0]{log} // 0 }

sub events_since {
    my ($self, $mark) = @_;
    open my $fh, '<', $self->{log} or return ();
    seek $fh, $mark // 0, 0;
    my @ev;
    while (my $line = <$fh>) {
        last unless $line =~ /\n\z/;    # a line still being written
        my $e = eval { $JSON->decode($line) } or next;
        $e->{$_} = pack('H*', delete $e->{"${_}_hex"}) for grep { exists $e->{"${_}_hex"} } qw(bytes body target);
        if ($e->{headers}) { $_->[1] = pack('H*', $_->[1]) for @{ $e->{headers} } }
        push @ev, $e;
    }
    return @ev;
}

# $b->settle([QUIET=0.15, MAX=2]): wait until the log has not grown for QUIET seconds.
sub settle {
    my ($self, $quiet, $max) = @_;
    $quiet //= 0.15;
    my $end = time + ($max // 2);
    my ($size, $since) = (-s $self->{log}, time);
    while (time < $end) {
        sleep 0.03;
        my $s = -s $self->{log};
        if ($s != $size) { ($size, $since) = ($s, time); next }
        return 1 if time - $since >= $quiet;
    }
    return 0;
}

# $b->drop_all: close every connection the broker holds (a clean slate between cases).
sub drop_all {
    my ($self) = @_;
    my $m = $self->mark;
    kill 'USR1', $self->{pid};
    $self->settle(0.1, 1);
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid} && $self->{owner} == $$;
    kill 'TERM', $self->{pid};
    my $end = time + 3;
    while (time < $end) {
        my $r = waitpid($self->{pid}, WNOHANG);
        last if $r == $self->{pid} || $r == -1;
        sleep 0.02;
    }
    if (waitpid($self->{pid}, WNOHANG) == 0) { kill 'KILL', $self->{pid}; waitpid($self->{pid}, 0) }
    delete $self->{pid};
}

sub DESTROY { local ($?, $@); $_[0]->stop if $_[0]{owner} && $_[0]{owner} == $$ }

# ---- the strict parser ---------------------------------------------------------------------

# parse_request(BUF): one request from the start of BUF.
# Returns ('more'), ('error', WHY), or ('ok', REQ, CONSUMED) with REQ = { method, target,
# version, headers => [[name, value]...], framing => none|length|chunked, body, trailers,
# expect_continue }. ('head', REQ) when the head is complete but the body is not, so the
# caller can answer Expect: 100-continue.
sub parse_request {
    my ($buf) = @_;
    my $end = index($buf, "\r\n\r\n");
    my $head = $end >= 0 ? substr($buf, 0, $end + 2) : $buf;
    # Bare CR or bare LF anywhere in the head (a CR at the very end may be half a CRLF).
    my $scan = $end >= 0 ? $head : substr($buf, 0, length($buf) - ($buf =~ /\r\z/ ? 1 : 0));
    return ('error', 'bare LF in the head') if $scan =~ /(?<!\r)\n/;
    return ('error', 'bare CR in the head') if $scan =~ /\r(?!\n)/;
    if ($end < 0) {
        return ('error', 'head over ' . MAX_HEAD . ' bytes') if length($buf) > MAX_HEAD;
        return ('more');
    }
    my @lines = split /\r\n/, $head, -1;
    pop @lines;    # the empty string after the last CRLF
    my $rl = shift @lines // '';
    my ($method, $target, $minor) = $rl =~ m{\A($TCHAR+) ([\x21-\x7e]+) HTTP/1\.([01])\z}
        or return ('error', 'bad request line');
    my (@h, %n);
    for my $l (@lines) {
        return ('error', 'obs-fold') if $l =~ /\A[ \t]/;
        my ($name, $v) = $l =~ /\A($TCHAR+):[ \t]*(.*?)[ \t]*\z/s or return ('error', 'bad header line');
        return ('error', "control character in the value of $name") if $v =~ /[\x00-\x08\x0a-\x1f\x7f]/;
        push @h, [ $name, $v ];
        push @{ $n{ lc $name } }, $v;
    }
    my $req = { method => $method, target => $target, version => "1.$minor", headers => \@h,
                framing => 'none', body => '', trailers => [] };
    if ($minor == 1) {
        return ('error', 'no Host on HTTP/1.1') unless $n{host};
        return ('error', 'more than one Host') if @{ $n{host} } > 1;
    }
    if ($n{host}) {
        return ('error', "bad Host '$n{host}[0]'")
            unless $n{host}[0] =~ /\A(?:[A-Za-z0-9.\-_~]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?\z/;
    }
    my $pos = $end + 4;
    if ($n{'transfer-encoding'}) {
        return ('error', 'Transfer-Encoding and Content-Length') if $n{'content-length'};
        return ('error', 'Transfer-Encoding on HTTP/1.0') if $minor == 0;
        return ('error', "Transfer-Encoding '@{ $n{'transfer-encoding'} }'")
            unless @{ $n{'transfer-encoding'} } == 1 && lc $n{'transfer-encoding'}[0] eq 'chunked';
        $req->{framing} = 'chunked';
    } elsif ($n{'content-length'}) {
        return ('error', 'more than one Content-Length') if @{ $n{'content-length'} } > 1;
        return ('error', "Content-Length '$n{'content-length'}[0]'") unless $n{'content-length'}[0] =~ /\A\d{1,15}\z/;
        $req->{framing} = 'length';
    }
    $req->{expect_continue} = ($n{expect} && lc $n{expect}[0] eq '100-continue') ? 1 : 0;
    if ($req->{framing} eq 'length') {
        my $len = 0 + $n{'content-length'}[0];
        return ('head', $req) if length($buf) < $pos + $len;
        $req->{body} = substr($buf, $pos, $len);
        return ('ok', $req, $pos + $len);
    }
    if ($req->{framing} eq 'chunked') {
        my $body = '';
        while (1) {
            my $eol = index($buf, "\r\n", $pos);
            my $line = $eol >= 0 ? substr($buf, $pos, $eol - $pos) : substr($buf, $pos);
            return ('error', 'bare LF in a chunk line') if $line =~ /\n/;
            return ('error', 'bare CR in a chunk line') if $line =~ /\r(?!\z)/;
            return ('error', 'chunk line too long') if length($line) > 4096;
            return ('head', $req) if $eol < 0;
            my ($hex, $ext) = $line =~ /\A([0-9A-Fa-f]{1,16})((?:;$TCHAR+(?:=(?:$TCHAR+|"(?:[^"\\\x00-\x1f\x7f]|\\[\x20-\x7e])*"))?)*)\z/
                or return ('error', 'bad chunk line');
            my $size = hex $hex;
            return ('error', 'chunk size too large') if length($hex) > 10 || $size > MAX_CHUNK;
            $pos = $eol + 2;
            if ($size == 0) {
                while (1) {
                    my $e = index($buf, "\r\n", $pos);
                    if ($e < 0) {
                        my $rest = substr($buf, $pos);
                        return ('error', 'bare LF in the trailers') if $rest =~ /\n/;
                        return ('head', $req);
                    }
                    my $t = substr($buf, $pos, $e - $pos);
                    $pos = $e + 2;
                    last if $t eq '';
                    return ('error', 'bad trailer line') if $t =~ /[\r\n]/;
                    my ($name, $v) = $t =~ /\A($TCHAR+):[ \t]*(.*?)[ \t]*\z/ or return ('error', 'bad trailer line');
                    return ('error', 'control character in a trailer') if $v =~ /[\x00-\x08\x0a-\x1f\x7f]/;
                    push @{ $req->{trailers} }, [ $name, $v ];
                }
                $req->{body} = $body;
                return ('ok', $req, $pos);
            }
            return ('head', $req) if length($buf) < $pos + $size + 2;
            $body .= substr($buf, $pos, $size);
            return ('error', 'chunk data not followed by CRLF') if substr($buf, $pos + $size, 2) ne "\r\n";
            $pos += $size + 2;
        }
    }
    return ('ok', $req, $pos);
}

# ---- the server ----------------------------------------------------------------------------

sub _main {
    my ($self, $l, $parent, $lifetime) = @_;
    $0 = "raw-broker $self->{name}";
    my ($stop, $drop) = (0, 0);
    $SIG{TERM} = $SIG{INT} = sub { $stop = 1 };
    $SIG{USR1} = sub { $drop = 1 };
    $SIG{PIPE} = 'IGNORE';
    sysopen(my $log, $self->{log}, O_WRONLY | O_APPEND | O_CREAT) or die "$self->{log}: $!";
    my $emit = sub { my $line = $JSON->encode({ t => sprintf('%.3f', time), @_ }) . "\n"; syswrite($log, $line) };
    my $deadline = time + $lifetime;
    my $sel = IO::Select->new($l);
    my %conn;    # fileno => { s, id, buf, sent100 }
    my $next_id = 0;
    my $close = sub {
        my ($c, $by) = @_;
        $emit->(ev => 'close', conn => $c->{id}, by => $by, pending => length $c->{buf},
                pending_hex => unpack('H*', substr($c->{buf}, 0, 4096)));
        $sel->remove($c->{s});
        delete $conn{ fileno $c->{s} };
        close $c->{s};
    };
    until ($stop) {
        last if getppid() != $parent || time > $deadline;
        if ($drop) {
            $drop = 0;
            $close->($_, 'broker') for sort { $a->{id} <=> $b->{id} } values %conn;
        }
        for my $s ($sel->can_read(0.2)) {
            if ($s == $l) {
                my $c = $l->accept or next;
                setsockopt($c, Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
                my $id = ++$next_id;
                $conn{ fileno $c } = { s => $c, id => $id, buf => '', sent100 => 0 };
                $sel->add($c);
                $emit->(ev => 'open', conn => $id, peer => $c->peerhost . ':' . $c->peerport);
                next;
            }
            my $c = $conn{ fileno $s } or next;
            my $n = sysread($s, my $data, 65536);
            next if !defined $n && ($! == EINTR || $! == EAGAIN || $! == EWOULDBLOCK);
            if (!$n) { $close->($c, defined $n ? 'peer' : 'reset'); next }
            $c->{buf} .= $data;
            my @out;
            my $closing;
            while (length $c->{buf}) {
                my ($st, $req, $used) = parse_request($c->{buf});
                if ($st eq 'more') { last }
                if ($st eq 'head') {
                    if ($req->{expect_continue} && !$c->{sent100}) {
                        push @out, "HTTP/1.1 100 Continue\r\n\r\n";
                        $c->{sent100} = 1;
                    }
                    last;
                }
                if ($st eq 'error') {
                    $emit->(ev => 'data', conn => $c->{id}, bytes_hex => unpack('H*', $data), pending => length $c->{buf});
                    $data = '';
                    $emit->(ev => 'error', conn => $c->{id}, error => $req,
                            near_hex => unpack('H*', substr($c->{buf}, 0, 512)));
                    push @out, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                             . "X-Raw-Broker: $self->{name}\r\nContent-Length: 14\r\nConnection: close\r\n\r\n{\"ok\":false}\r\n";
                    $closing = 1;
                    $c->{buf} = '';
                    last;
                }
                substr($c->{buf}, 0, $used, '');
                $c->{sent100} = 0;
                my %r = %$req;
                my $body = '{"ok":true}';
                my $conn_hdr = join(',', map { lc $_->[1] } grep { lc $_->[0] eq 'connection' } @{ $r{headers} });
                my $close_after = $conn_hdr =~ /\bclose\b/ || ($r{version} eq '1.0' && $conn_hdr !~ /\bkeep-alive\b/);
                push @out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Raw-Broker: $self->{name}\r\n"
                         . "Content-Length: " . length($body) . "\r\n" . ($close_after ? "Connection: close\r\n" : '')
                         . "\r\n$body";
                push @{ $c->{done} }, \%r;
                if ($close_after) { $closing = 1; last }
            }
            # The raw read first, then what was parsed out of it, so a reader of the log
            # sees bytes before the requests they made.
            $emit->(ev => 'data', conn => $c->{id}, bytes_hex => unpack('H*', $data), pending => length $c->{buf})
                if length $data;
            for my $r (@{ delete $c->{done} // [] }) {
                $emit->(ev => 'req', conn => $c->{id}, method => $r->{method}, target_hex => unpack('H*', $r->{target}),
                        version => $r->{version}, headers => [ map { [ $_->[0], unpack('H*', $_->[1]) ] } @{ $r->{headers} } ],
                        framing => $r->{framing}, body_hex => unpack('H*', $r->{body}), trailers => $r->{trailers});
            }
            _write_all($s, join('', @out)) if @out;
            $close->($c, 'broker') if $closing;
        }
    }
    $close->($_, 'broker') for values %conn;
    close $l;
}

sub _write_all {
    my ($s, $data) = @_;
    my $off = 0;
    my $end = time + 5;
    while ($off < length $data && time < $end) {
        my $n = syswrite($s, $data, length($data) - $off, $off);
        if (!defined $n) {
            return if $! != EINTR && $! != EAGAIN && $! != EWOULDBLOCK;
            IO::Select->new($s)->can_write(0.1);
            next;
        }
        $off += $n;
    }
}

1;
