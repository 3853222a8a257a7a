package PulsarBinBroker;

# Pulsar binary-protocol brokers for lookout's integration tests: bin/pulsar-testbroker, one
# process serving a cluster of brokers, each with its advertisedListeners (Pulsar's syntax),
# one topic->owner map and one message store (see its --help for what each command gets).
# Started and stopped like KafkaTestBroker (a JSON config, a stdin pipe whose end stops
# it); its stdin also takes control commands (control()), and every frame it received or
# sent is a JSON line in its log (frames()).

use strict;
use warnings;

use Carp qw(croak);
use IO::Select;
use JSON::PP ();
use Time::HiRes qw(time);

use Lookout qw(repo_top slurp);
use KafkaTestBroker ();
our @ISA = ('KafkaTestBroker');

=head1 SYNOPSIS

  my $b = PulsarBinBroker->start(
      brokers => [ { name => 'b1', advertisedListeners => 'internal:pulsar://127.0.0.1:0,external:pulsar://127.0.0.1:7001' },
                   { name => 'b2', advertisedListeners => 'internal:pulsar://127.0.0.1:0' } ],
      topics  => [ { name => 't1', owner => 'b2' } ],
      triggers => [ { on => 'send', count => 3, topic => 't1',
                      actions => [ { cmd => 'close_producer', topic => 't1', assigned => 'b1' } ] } ],
  );
  $b->addr('b1');                      # "127.0.0.1:41234": its internal pulsar:// address
  $b->url('b1', 'external', 'pulsar'); # "pulsar://127.0.0.1:7001"
  $b->broker('b2')->{listeners};       # {internal => {pulsar => URL}, ...}, ports resolved
  my $r = $b->control({ cmd => 'ping', broker => 'b1' });   # {ok => 1, sent => [...]}
  my @f = $b->frames(type => 'LOOKUP_RESPONSE', dir => 'out'); # its log, filtered
  $b->stop;

=cut

sub prog { 'pulsar-testbroker' }

sub brokers { $_[0]{ready}{brokers} }

# $b->broker(NAME): {name, internal, listeners, service, address, binds} or undef.
sub broker {
    my ($self, $name) = @_;
    my ($b) = grep { $_->{name} eq $name } @{ $self->brokers };
    return $b;
}

# $b->addr(NAME): host:port of the broker's internal listener (where it listens).
sub addr { $_[0]->broker($_[1])->{address} }

# $b->url(NAME, LISTENER, SCHEME): that advertised URL, or undef.
sub url {
    my ($self, $name, $listener, $scheme) = @_;
    return $self->broker($name)->{listeners}{$listener}{$scheme};
}

# $b->frames(%filter): its log lines (frames and events), oldest first, those whose keys
# equal the filter's values (type => 'LOOKUP', dir => 'in', broker => 'b1', ...).
sub frames {
    my ($self, %f) = @_;
    my $text = slurp($self->{requests_file}) // '';
    my @all = map { JSON::PP::decode_json($_) } grep { /\S/ } split /\n/, $text;
    return grep {
        my $e = $_;
        !grep { !defined $e->{$_} || $e->{$_} ne $f{$_} } keys %f
    } @all;
}

# $b->control(COMMAND, [TIMEOUT=10]): sends one control command (a hash, see
# bin/pulsar-testbroker --help) and returns its answer (a hash); croaks on no answer.
sub control {
    my ($self, $cmd, $timeout) = @_;
    croak 'PulsarBinBroker: not running' unless $self->{in};
    print { $self->{in} } JSON::PP->new->canonical->encode($cmd) . "\n";
    my $end = time + ($timeout // 10);
    my $sel = IO::Select->new($self->{out});
    while ($self->{out_buf} !~ /\n/) {
        my $left = $end - time;
        croak 'PulsarBinBroker: no answer to ' . JSON::PP::encode_json($cmd) if $left <= 0;
        next unless $sel->can_read($left);
        my $n = sysread($self->{out}, my $buf, 65536);
        croak 'PulsarBinBroker: it exited: ' . $self->log unless $n;
        $self->{out_buf} .= $buf;
    }
    $self->{out_buf} =~ s/^(.*?)\n//;
    return JSON::PP::decode_json($1);
}

# PulsarBinBroker::probe(ADDR, [OPTIONS], STEP...): runs bin/pulsar-probe against ADDR
# (host:port) with OPTIONS and the STEPs (hashes, see its --help) and returns its JSON
# lines, decoded (bounded: 60 s).
sub probe {
    my ($addr, $opts, @steps) = @_;
    require KafkaMock;
    my $py = KafkaTestBroker::python() or croak 'PulsarBinBroker::probe: python3 not found';
    my $r = KafkaMock::run([ $py, repo_top() . '/tests/integration/bin/pulsar-probe', $addr, @$opts,
                             map { JSON::PP::encode_json($_) } @steps ], timeout => 60);
    return json_lines($r->{out});
}

# json_lines(TEXT): the lines of TEXT that are JSON, decoded.
sub json_lines { return map { my $j = eval { JSON::PP::decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] // '' }

1;
