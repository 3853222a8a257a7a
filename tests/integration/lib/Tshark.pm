package Tshark;

# An independent decoder for Kafka bytes in lookout's integration tests: capture loopback
# traffic with dumpcap and read it back through Wireshark's Kafka dissector (tshark -T pdml).
# Capturing needs root (or CAP_NET_RAW); capture() says why when it cannot, so a test can
# skip with that reason. The dissector knows a fixed set of API versions per Wireshark
# release; for the others it flags "unsupported" rather than guessing, and kafka_pdus()
# reports that per PDU.

use strict;
use warnings;

use Carp qw(croak);
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);

use Lookout qw(tmp_dir slurp);
use KafkaMock ();

# Tshark::missing(): why tshark/dumpcap cannot be used here (a skip reason), or undef.
sub missing {
    for my $t (qw(tshark dumpcap)) {
        return "$t not found (apt-get install tshark)" unless _which($t);
    }
    return undef;
}

sub _which {
    my ($p) = @_;
    for my $d (split(/:/, $ENV{PATH} // ''), '/usr/bin', '/usr/sbin') {
        return "$d/$p" if -x "$d/$p";
    }
    return undef;
}

# Tshark::version(): "4.0.17" or so.
sub version {
    my $r = KafkaMock::run([ _which('tshark'), '--version' ], timeout => 20);
    return $r->{out} =~ /TShark \(Wireshark\) (\d+\.\d+\.\d+)/ ? $1 : 'unknown';
}

# Tshark::capture(PORTS, CODE, [DIR]): run CODE while dumpcap captures TCP traffic to or
# from PORTS (a port or [ports]) on lo. Returns (PCAP, undef), or (undef, REASON) when
# capturing is impossible here (no privileges, no loopback device...).
sub capture {
    my ($ports, $code, $dir) = @_;
    $dir //= tmp_dir();
    my @p = ref $ports ? @$ports : ($ports);
    my $pcap = "$dir/capture-$p[0].pcapng";
    my $err = "$dir/dumpcap-$p[0].log";
    my $filter = join ' or ', map { "tcp port $_" } @p;
    my $pid = fork;
    croak "fork: $!" unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', $err or POSIX::_exit(126);
        my @argv = (_which('dumpcap'), '-i', 'lo', '-f', $filter, '-w', $pcap, '-a', 'duration:300');
        { no warnings 'exec'; exec { $argv[0] } @argv; }
        POSIX::_exit(127);
    }
    # dumpcap says "Capturing on 'Loopback: lo'" once the filter is in place.
    my $started = Lookout::wait_until(sub {
        return -1 if waitpid($pid, WNOHANG) == $pid;
        return (slurp($err) // '') =~ /Capturing on/ ? 1 : 0;
    }, 15);
    if ($started != 1) {
        kill 'KILL', $pid if $started == 0;
        waitpid($pid, 0);
        my $why = slurp($err) // '';
        $why =~ s/\s+/ /g;
        return (undef, "dumpcap could not capture on lo: " . ($why || 'no output'));
    }
    eval { $code->(); 1 } or do { my $e = $@; _stop($pid); die $e };
    sleep 0.5;    # let the last segments reach the capture file
    _stop($pid);
    return (-s $pcap ? $pcap : undef, -s $pcap ? undef : 'dumpcap wrote nothing');
}

sub _stop {
    my ($pid) = @_;
    kill 'INT', $pid;    # dumpcap flushes and closes the file on SIGINT
    my $ok = Lookout::wait_until(sub { waitpid($pid, WNOHANG) == $pid }, 10);
    unless ($ok) { kill 'KILL', $pid; waitpid($pid, 0) }
}

# Tshark::kafka_pdus(PCAP, PORTS): the Kafka PDUs in PCAP, decoding TCP port PORTS (a port or
# [ports]: the servers' side) as Kafka, in capture order: [{ dir => 'request'|'response',
# port => the server's port of the two, summary => 'Kafka (Metadata v5 Response)',
# api => 'Metadata', version => 5 (both undef when tshark could not match a response to
# its request), fields => [[name, show], ...] in tree order, unsupported => 1 when tshark
# says it does not know this PDU's own API version, malformed => 0|1 }].
sub kafka_pdus {
    my ($pcap, $ports) = @_;
    my %server = map { ($_ => 1) } ref $ports ? @$ports : ($ports);
    my $r = KafkaMock::run([ _which('tshark'), '-n', '-r', $pcap, (map { ('-d', "tcp.port==$_,kafka") } sort keys %server),
                             '-o', 'tcp.desegment_tcp_streams:TRUE', '-T', 'pdml' ], timeout => 120);
    croak "tshark failed: $r->{err}" if $r->{exit} != 0;
    my @out;
    for my $pkt (split m{</packet>}, $r->{out}) {
        my ($src) = $pkt =~ /<field name="tcp\.srcport"[^>]*\sshow="(\d+)"/;
        my ($dst) = $pkt =~ /<field name="tcp\.dstport"[^>]*\sshow="(\d+)"/;
        next unless defined $src && defined $dst;
        my $malformed = $pkt =~ /<proto name="_ws\.malformed"/ ? 1 : 0;
        # Each Kafka PDU is one <proto name="kafka"> element; they do not nest.
        while ($pkt =~ m{<proto name="kafka"\s+showname="([^"]*)"(.*?)</proto>}sg) {
            my ($summary, $body) = (_unxml($1), $2);
            my @f;
            while ($body =~ /<field\s+name="([^"]*)"[^>]*?\sshow="([^"]*)"/g) {
                push @f, [ $1, _unxml($2) ];
            }
            my ($api, $ver) = $summary =~ /^Kafka \((\w+) v(\d+) (?:Request|Response)\)$/;
            # tshark flags its own version right after the version field; an ApiVersions
            # answer also flags each *advertised* range it does not know, further down.
            my ($vi) = grep { $f[$_][0] =~ /^kafka\.(?:request|response)\.version$/ } 0 .. $#f;
            my $unsupported = defined $vi && $vi < $#f && $f[$vi + 1][0] eq 'kafka.unsupported_api_version';
            push @out, { dir => $server{$src} ? 'response' : 'request', port => $server{$src} ? $src : $dst,
                         summary => $summary,
                         api => $api, version => $ver, fields => \@f, malformed => $malformed,
                         unsupported => $unsupported ? 1 : 0 };
        }
    }
    return \@out;
}

# Tshark::endpoints(PDU): the [node id, host, port] triples of a PDU (Metadata brokers,
# FindCoordinator coordinators...): each kafka.node_id directly followed by kafka.host and
# kafka.port (a lone node id, such as Metadata's controller id, is not one).
sub endpoints {
    my ($pdu) = @_;
    my @f = grep { $_->[0] ne '' } @{ $pdu->{fields} };
    my @out;
    for my $i (0 .. $#f - 2) {
        push @out, [ $f[$i][1], $f[$i + 1][1], $f[$i + 2][1] ]
            if $f[$i][0] eq 'kafka.node_id' && $f[$i + 1][0] eq 'kafka.host' && $f[$i + 2][0] eq 'kafka.port';
    }
    return @out;
}

# Tshark::known_versions(PDU): from an ApiVersions answer, what tshark says it supports for
# each advertised API it does not fully know: { Produce => 8, ... } ("Supports v0-8").
sub known_versions {
    my ($pdu) = @_;
    my %k;
    for (@{ $pdu->{fields} }) {
        $k{$1} = $2 if $_->[0] eq '_ws.expert.message' && $_->[1] =~ /^Unsupported (\w+) version\. Supports v\d+-(\d+)/;
    }
    return \%k;
}

sub _unxml {
    my ($s) = @_;
    $s =~ s/&quot;/"/g;
    $s =~ s/&apos;/'/g;
    $s =~ s/&lt;/</g;
    $s =~ s/&gt;/>/g;
    $s =~ s/&amp;/&/g;
    return $s;
}

# Tshark::field_values(PDU, NAME): every value of field NAME in the PDU, in order.
sub field_values {
    my ($pdu, $name) = @_;
    return map { $_->[1] } grep { $_->[0] eq $name } @{ $pdu->{fields} };
}

1;
