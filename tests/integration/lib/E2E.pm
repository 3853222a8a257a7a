package E2E;

# Shared setup for the end-to-end tests 90-93: a three-broker fake Pulsar cluster with a
# listener map of three listeners per broker, lookout instances in front of it, and a
# small keep-alive HTTP client (a curl process costs ~0.1 s; these tests make hundreds of
# requests, and keep-alive on both sides of lookout is the normal case anyway).
#
# Addresses (all on 127.0.0.0/8, ports from free_port):
#   internal  b1 http://127.0.0.21:P1            pulsar://127.0.0.21:16651
#             b2 http://127.0.0.22:P2            pulsar://127.0.0.22:16652, pulsar+ssl://127.0.0.22:16752
#             b3 http://127.0.0.23:P3            pulsar://127.0.0.23:16653
#   external  bN http://127.0.0.3N:Q  pulsar://127.0.0.3N:Q'      (lookupListenerName; bound by lookout)
#   vpn       bN http://127.0.0.5N:V  https://127.0.0.5N:V'  pulsar://..  pulsar+ssl://..  (never bound)
#   service   http://127.0.0.40:W (webServiceUrl)
# vpn is a listener the operator lets clients choose (client_listeners = vpn, unless
# start_lookout/conf say otherwise): a client may name only those and the lookup listener
# (issue 18 item 3), never the internal one unless it is listed too.
# So a response's addresses tell which listener it was rewritten into, and the listeners
# differ in schemes: LookupData fields must be added (vpn: brokerUrlTls of b1/b3,
# httpUrlTls) and removed (external: brokerUrlTls of b2).
#
#   my $e  = E2E->new(dir => $dir, own => { t1 => 1 });
#   my $lk = $e->start_lookout(name => 'a', cluster => "redirects = follow\n");
#   my $r  = http_req(GET => "$lk->{e2e_ext}{1}{http}/admin/v2/...");

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use IO::Select;
use IO::Socket::INET;
use Socket qw(IPPROTO_TCP TCP_NODELAY);
use Time::HiRes qw(time);

use Lookout ();
use PulsarBroker;

sub free_port { Lookout::free_port(@_) }

our @EXPORT = qw(http_req http_close uri_escape);

# E2E->new(%opt): start the brokers. opt: dir, own, version, chunked, gzip (passed on to
# PulsarBroker->start), b1_localhost => 1 (b1's internal host is the name "localhost",
# on 127.0.0.1, as in a standalone broker's LookupData: an internal host *name*).
sub new {
    my ($class, %o) = @_;
    my $dir = $o{dir} // Lookout::tmp_dir();
    my @p = map { free_port("127.0.0.2$_") } 1 .. 3;
    my $b1 = "127.0.0.21:$p[0]";
    $b1 = 'localhost:' . free_port('127.0.0.1') if $o{b1_localhost};
    my $c = PulsarBroker->start(
        dir     => "$dir/brokers",
        brokers => [ $b1, "http://127.0.0.22:$p[1],pulsar+ssl://127.0.0.22:16752", "127.0.0.23:$p[2]" ],
        own     => $o{own} // {},
        map { exists $o{$_} ? ($_ => $o{$_}) : () } qw(version chunked gzip),
    );
    my $self = bless { dir => $dir, c => $c, L => {} }, $class;
    for my $n (1 .. 3) {
        my $b = $c->broker($n);
        $self->{L}{internal}{$n} = { map { ($_ => $b->{$_}) } grep { $b->{$_} } qw(pulsar pulsar_ssl http https) };
        my $vh = "127.0.0.5$n";
        $self->{L}{vpn}{$n} = { pulsar => "pulsar://$vh:" . free_port($vh), pulsar_ssl => "pulsar+ssl://$vh:" . free_port($vh),
                                http => "http://$vh:" . free_port($vh), https => "https://$vh:" . free_port($vh) };
    }
    $self->{L}{external} = $self->new_external;
    return $self;
}

sub cluster { $_[0]{c} }
sub dir     { $_[0]{dir} }

# $e->L: { internal|external|vpn => { N => { pulsar, pulsar_ssl, http, https } } }.
sub L { $_[0]{L} }

# $e->new_external: a fresh set of external addresses (for a second lookout at once).
sub new_external {
    my %x;
    for my $n (1 .. 3) {
        my $eh = "127.0.0.3$n";
        $x{$n} = { pulsar => "pulsar://$eh:" . free_port($eh), http => "http://$eh:" . free_port($eh) };
    }
    return \%x;
}

# $e->conf(%opt): lookout's config. opt: ext (external set, default $e->L->{external}),
# service (host:port of webServiceUrl), no_lookup_listener => 1, client_listeners (default
# "vpn"; "" for none), lookout => extra [lookout] lines, cluster => extra [pulsar prod] lines.
sub conf {
    my ($self, %o) = @_;
    my $ext = $o{ext} // $self->{L}{external};
    my $t = "[lookout]\nworkers = 1\nlog_level = debug\ntimeout.response = 5s\n" . ($o{lookout} // '')
          . "\n[pulsar prod]\ninternalListenerName = internal\n"
          . ($o{no_lookup_listener} ? '' : "lookupListenerName = external\n")
          . (length($o{client_listeners} // 'vpn') ? 'client_listeners = ' . ($o{client_listeners} // 'vpn') . "\n" : '')
          . ($o{service} ? "webServiceUrl = http://$o{service}\n" : '')
          . ($o{cluster} // '') . "\n";
    for my $n (1 .. 3) {
        my @l = $self->{c}->internal_listeners($n);
        push @l, map { "external:$ext->{$n}{$_}" } grep { $ext->{$n}{$_} } qw(pulsar pulsar_ssl http https);
        push @l, map { "vpn:$self->{L}{vpn}{$n}{$_}" } qw(pulsar pulsar_ssl http https);
        $t .= "[broker prod/b$n]\nadvertisedListeners = " . join(',', @l) . "\n\n";
    }
    return $t;
}

# $e->start_lookout(%opt): conf(%opt) plus name; a fresh service address unless
# service => 0. Returns the Lookout object with e2e_ext (the external set) and
# e2e_service ("http://127.0.0.40:W") added.
sub start_lookout {
    my ($self, %o) = @_;
    $o{ext} //= $self->{L}{external};
    $o{service} //= '127.0.0.40:' . free_port('127.0.0.40');
    my @wait = (($o{service} ? ($o{service}) : ()),
                $o{no_lookup_listener} ? () : map { $o{ext}{$_}{http} =~ m{//(.*)} } 1 .. 3);
    my $lk = Lookout::start_lookout(dir => $self->{dir}, name => $o{name} // 'lookout', wait => \@wait,
                                    conf => $self->conf(%o));
    $lk->{e2e_ext} = $o{ext};
    $lk->{e2e_service} = $o{service} ? "http://$o{service}" : undef;
    return $lk;
}

# $e->guard_lookouts(MODE...[, {lookout => TEXT}]): one lookout per leak_guard mode, each on
# new external addresses, named by its mode, started (one ok each; a failed start bails
# out, as every later test needs them). Returns {MODE => lookout}.
sub guard_lookouts {
    my ($self, @modes) = @_;
    my $o = ref $modes[-1] eq 'HASH' ? pop @modes : {};
    my %lk;
    for my $mode (@modes) {
        $lk{$mode} = $self->start_lookout(name => $mode, ext => $self->new_external,
                                          cluster => "leak_guard = $mode\n", lookout => $o->{lookout});
        Test::More::ok($lk{$mode}->started, "lookout ($mode) started")
            or Test::More::BAIL_OUT("lookout $mode did not start: " . ($lk{$mode}->log // ''));
    }
    return \%lk;
}

# $e->expect_ld(LISTENER, N [, extra => value...]): the LookupData lookout must give for
# broker N in LISTENER (a name, or a set as new_external returns): exactly that listener's
# addresses, brokerUrlSsl "" and the extras.
sub expect_ld {
    my ($self, $ln, $n, %extra) = @_;
    my $a = (ref $ln ? $ln->{$n} : $self->{L}{$ln}{$n}) or croak "no listener $ln for b$n";
    my %j = (brokerUrlSsl => '', %extra);
    $j{brokerUrl} = $j{nativeUrl} = $a->{pulsar} if $a->{pulsar};
    $j{brokerUrlTls} = $a->{pulsar_ssl} if $a->{pulsar_ssl};
    $j{httpUrl} = $a->{http} if $a->{http};
    $j{httpUrlTls} = $a->{https} if $a->{https};
    return \%j;
}

# $e->listener_of(URL [, EXT]): "LISTENER:N" for the listener address URL's host:port
# belongs to (EXT: the external set to look in), "unknown:URL" otherwise.
sub listener_of {
    my ($self, $url, $ext) = @_;
    return 'none' unless defined $url;
    my ($hp) = $url =~ m{^[a-z+]+://([^/?#]+)} or return "unknown:$url";
    my %L = (%{ $self->{L} }, external => $ext // $self->{L}{external});
    for my $ln (sort keys %L) {
        for my $n (1 .. 3) {
            return "$ln:$n" if grep { m{//\Q$hp\E$} } values %{ $L{$ln}{$n} };
        }
    }
    return "unknown:$url";
}

# $e->internal_hostports: every internal listener host:port of the map.
sub internal_hostports {
    my ($self) = @_;
    return map { m{//(.*)} } map { values %{ $self->{L}{internal}{$_} } } 1 .. 3;
}

# $e->internal_hosts: the internal hosts (IP literals and names) of the map.
sub internal_hosts {
    my ($self) = @_;
    my %h = map { /^(.*):\d+$/ ? ($1 => 1) : () } $self->internal_hostports;
    return sort keys %h;
}

# $e->leaks(TEXT): the internal addresses TEXT contains: every internal host:port, and
# the internal hosts on their own (a host leaks even with another port, or none).
sub leaks {
    my ($self, $text) = @_;
    my %hit;
    for my $hp ($self->internal_hostports) {
        $hit{$hp}++ while $text =~ /\Q$hp\E(?!\d)/gi;
    }
    for my $h ($self->internal_hosts) {
        $hit{$h}++ while $text =~ /(?<![\w.-])\Q$h\E(?![\w-]|\.\d)/gi;
    }
    return \%hit;
}

# ---- keep-alive client ----------------------------------------------------------------------

my %CONN;

# http_req(METHOD, URL, %opt): one request on a kept-alive connection to URL's host:port
# (a new one if there is none, or if the old one turns out closed before any reply byte).
# opt: headers => [ "Name: value", ... ], body => BYTES (sent with Content-Length unless
# a Transfer-Encoding header is given, then the caller's BYTES are sent as they are),
# timeout (default 10 s), close => 1 (send Connection: close).
# Returns parse_response's hash plus raw (the bytes), how ("complete", "eof", "timeout",
# "reset") and elapsed; status 0 if nothing came back.
sub http_req {
    my ($method, $url, %o) = @_;
    my ($hp, $target) = $url =~ m{^http://([^/?#]+)(.*)$} or croak "http_req: bad URL $url";
    $target = '/' unless length $target;
    my @h = @{ $o{headers} // [] };
    my $body = $o{body};
    my $te = grep { /^transfer-encoding:/i } @h;
    push @h, 'Content-Length: ' . length($body) if defined $body && !$te && !grep { /^content-length:/i } @h;
    push @h, 'Connection: close' if $o{close};
    my $req = "$method $target HTTP/1.1\r\nHost: $hp\r\n" . join('', map { "$_\r\n" } @h) . "\r\n" . ($body // '');
    my $timeout = $o{timeout} // 10;
    my $t0 = time;
    for my $try (1, 2) {
        my $reused = $CONN{$hp} ? 1 : 0;
        my $s = $CONN{$hp} //= _connect($hp, $timeout) or return { status => 0, how => 'connect', raw => '', elapsed => time - $t0 };
        local $SIG{PIPE} = 'IGNORE';
        my $sent = Lookout::_send_all($s, $req, $t0 + $timeout);
        my ($raw, $how, $r) = ('', undef, undef);
        while (1) {
            $r = Lookout::parse_response($raw, head => $method eq 'HEAD');
            if ($r && $r->{complete} && ($r->{headers}{'content-length'} // '') ne ''
                || $r && $r->{complete} && ($r->{headers}{'transfer-encoding'} // '') =~ /chunked/i
                || $r && ($method eq 'HEAD' || $r->{status} == 204 || $r->{status} == 304)) {
                $how = 'complete';
                last;
            }
            my $left = $t0 + $timeout - time;
            if ($left <= 0) { $how = 'timeout'; last }
            next unless IO::Select->new($s)->can_read($left);
            my $n = sysread($s, my $buf, 65536);
            if (!defined $n) { $how = 'reset'; last }
            if ($n == 0) { $how = 'eof'; last }
            $raw .= $buf;
        }
        if ($raw eq '' && $reused && $try == 1 && $how ne 'timeout') {
            close $s;
            delete $CONN{$hp};
            next;    # the kept connection had been closed: once more on a new one
        }
        $r = Lookout::parse_response($raw, head => $method eq 'HEAD') if $how ne 'complete';
        $r //= { status => 0, headers => {}, header_list => [], body => '' };
        ($r->{head}) = $raw =~ /\A(.*?\r?\n\r?\n)/s;
        $r->{head} //= '';
        @{$r}{qw(raw how elapsed sent)} = ($raw, $how, time - $t0, $sent);
        if ($how ne 'complete' || ($r->{headers}{connection} // '') =~ /close/i || $o{close} || length($r->{rest} // '')) {
            close $s;
            delete $CONN{$hp};
        }
        return $r;
    }
}

# http_close(): drop every kept connection.
sub http_close {
    close $_ for values %CONN;
    %CONN = ();
}

sub _connect {
    my ($hp, $timeout) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => $hp, Proto => 'tcp', Timeout => $timeout) or return undef;
    setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);
    binmode $s;
    return $s;
}

# uri_escape(S): percent-encode everything but unreserved characters, '/' and ':'.
sub uri_escape {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9\-._~\/:])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

1;
