package KafkaTestBroker;

# Kafka peers for lookout's integration tests: bin/kafka-testbroker, a broker that answers
# the flexible versions librdkafka's mock lacks (ApiVersions v0-4, Metadata v0-13,
# FindCoordinator v0-6, DescribeCluster v0-2, Produce v3-13, Fetch v4-18) from bytes encoded
# by hand per the message specs, with unknown tagged fields in places. Its node map (id ->
# host:port[/rack]) is what Metadata, DescribeCluster, FindCoordinator and NodeEndpoints
# advertise; nodes with a 127.x host can also be listened on (listen_nodes), so that a client
# that follows an advertised address reaches "that node". Every request it gets is a JSON
# line in its log: $b->requests. Started and stopped like KafkaMock (stdin pipe).

use strict;
use warnings;

use Carp qw(croak);
use JSON::PP ();

use Lookout qw(repo_top tmp_dir slurp spew);
use KafkaMock ();
our @ISA = ('KafkaMock');

=head1 SYNOPSIS

  my $b = KafkaTestBroker->start(
      nodes  => [ { id => 1, host => '127.0.0.1', port => 0 },          # listened on
                  { id => 2, host => 'b2.kafka.internal', port => 9093, rack => 'r2' } ],
      topics => [ { name => 't1', partitions => 3 } ],
      listen_nodes => 1,
  );
  $b->bootstrap;            # "127.0.0.1:41234"
  $b->nodes;                # [{id, host, port, rack, listen}], ports resolved
  $b->topic('t1')->{id};    # the topic id (hex) for Produce v13 / Fetch v13+
  my @r = $b->requests;     # [{api, api_key, api_version, correlation_id, client_id, ...}]
  $b->stop;

=cut

# KafkaTestBroker::python(): the interpreter to run it with (standard library only).
sub python {
    return '/usr/bin/python3' if -x '/usr/bin/python3';
    for my $d (split /:/, $ENV{PATH} // '') {
        return "$d/python3" if -x "$d/python3";
    }
    return undef;
}

# $class->script: the program; $class->prog: its name (files in the test's dir are named
# after it). PulsarBinBroker starts bin/pulsar-testbroker the same way.
sub prog   { 'kafka-testbroker' }
sub script { repo_top() . '/tests/integration/bin/' . $_[0]->prog }

# KafkaTestBroker->start(%opt): every option but dir/timeout goes into its JSON config
# (see bin/kafka-testbroker --help): nodes, topics, listen (default 127.0.0.1:0),
# listen_nodes, cluster_id, controller_id, coordinator, coordinators, bootstrap_node,
# leader_epoch, unknown_tags (body|all|none), unknown (close|echo), api_versions, coalesce,
# bulk ({topic, bytes}: $b->{ready}{bulk} has the records' bytes and sha256), lifetime
# (default 600). Returns once it listens; croaks otherwise.
sub start {
    my ($class, %o) = @_;
    my $py = python() or croak "$class: python3 not found";
    my $dir = delete $o{dir} // tmp_dir();
    my $timeout = delete $o{timeout} // 20;
    my $prog = $class->prog;
    my $n = 0;
    $n++ while -e "$dir/$prog-$n.json";
    my $name = "$prog-$n";
    $o{log} //= "$dir/$name.requests";
    $o{lifetime} //= 600;
    my $conf = spew("$dir/$name.json", JSON::PP->new->canonical->encode(\%o));
    my $self = $class->_spawn([ $py, $class->script, '--config', $conf ], $dir, $name, $timeout);
    $self->{requests_file} = $o{log};
    return $self;
}

sub nodes { $_[0]{ready}{nodes} }

# $b->node(ID): {id, host, port, rack, listen} or undef.
sub node {
    my ($self, $id) = @_;
    my ($n) = grep { $_->{id} == $id } @{ $self->nodes };
    return $n;
}

# $b->requests: every request it has logged so far, oldest first.
sub requests {
    my ($self) = @_;
    my $text = slurp($self->{requests_file}) // '';
    return map { JSON::PP::decode_json($_) } grep { /\S/ } split /\n/, $text;
}

1;
