package Stunnel;

# A TLS terminator for lookout's integration tests: Debian's stunnel4 (code nobody here
# wrote) in front of a plaintext server, so that lookout can be tested speaking TLS to a
# peer that only speaks plaintext (librdkafka 2.0.2's mock cluster cannot listen with TLS).
# Each service accepts TLS on one address, with its own certificate, and forwards the bytes
# in plaintext to another. stunnel logs every connection it takes (log level info), which
# is how a test sees that lookout reached a broker over TLS.
#
#   my $st = Stunnel->start(dir => $dir, services => [
#       { name => 'b1', accept => '127.0.0.1:30001', connect => '127.0.0.1:40001',
#         cert => $certs->{broker_crt}, key => $certs->{broker_key} } ]);
#   $st->accepted('b1');    # connections service b1 took so far
#   $st->forwarded('b1');   # ... that completed a TLS handshake and were forwarded
#   $st->log;               # everything stunnel wrote
#   $st->stop;
#
# It runs under coreutils' timeout (lifetime, default 600 s), so that it goes away even if
# the test is killed before it can stop it. alive, stop and log are KafkaMock's.

use strict;
use warnings;

use Carp qw(croak);
use IO::Socket::INET;

use Lookout qw(tmp_dir spew wait_until);
use KafkaMock ();
our @ISA = ('KafkaMock');

# Stunnel::bin(): the stunnel program (Debian stunnel4), or undef.
sub bin {
    for my $name (qw(stunnel4 stunnel)) {
        for my $d (split(/:/, $ENV{PATH} // ''), '/usr/bin', '/usr/sbin') {
            return "$d/$name" if -x "$d/$name" && !-d _;
        }
    }
    return undef;
}

# Stunnel::missing(): why it cannot run here (a skip reason), or undef.
sub missing { bin() ? undef : 'stunnel4 not found (apt-get install stunnel4)' }

# Stunnel->start(%opt): services => [{name, accept => 'IP:PORT', connect => 'HOST:PORT',
# cert, key}], dir => where the config and log go, lifetime => seconds (default 600),
# timeout => seconds to wait for the accept ports (default 10). Croaks if it does not
# listen in time.
sub start {
    my ($class, %o) = @_;
    my $bin = bin() or croak 'Stunnel: ' . missing();
    my $dir = $o{dir} // tmp_dir();
    my $n = 0;
    $n++ while -e "$dir/stunnel-$n.conf";
    my $conf = "foreground = yes\npid =\ndebug = info\n\n";
    for my $s (@{ $o{services} }) {
        $conf .= "[$s->{name}]\naccept = $s->{accept}\nconnect = $s->{connect}\n"
               . "cert = $s->{cert}\nkey = $s->{key}\n\n";
    }
    my $file = spew("$dir/stunnel-$n.conf", $conf);
    my $log = "$dir/stunnel-$n.log";
    my $pid = Lookout::_spawn([ 'timeout', $o{lifetime} // 600, $bin, $file ], $log);
    my $self = bless { pid => $pid, log_file => $log, owner => $$, services => $o{services} }, $class;
    for my $s (@{ $o{services} }) {
        my ($h, $p) = $s->{accept} =~ /^(.*):(\d+)$/ or croak "Stunnel: bad accept address '$s->{accept}'";
        next if wait_until(sub { !$self->alive || IO::Socket::INET->new(PeerAddr => $h, PeerPort => $p,
                                                                        Proto => 'tcp', Timeout => 1) },
                           $o{timeout} // 10) && $self->alive;
        my $why = $self->log;
        $self->stop;
        croak "Stunnel: service $s->{name} did not listen on $s->{accept}:\n$why";
    }
    return $self;
}

# $st->accepted(NAME): how many connections service NAME has taken (port probes too).
sub accepted {
    my ($self, $name) = @_;
    my @n = $self->log =~ /Service \[\Q$name\E\] accepted connection from/g;
    return scalar @n;
}

# $st->forwarded(NAME): how many of them completed a TLS handshake and were forwarded
# (stunnel connects to the remote only after TLS is accepted).
sub forwarded {
    my ($self, $name) = @_;
    my @n = $self->log =~ /Service \[\Q$name\E\] connected remote server from/g;
    return scalar @n;
}

# $st->stop: TERM at once (timeout passes it on to stunnel), then KILL. Idempotent.
sub stop { return $_[0]->SUPER::stop(0) }

1;
