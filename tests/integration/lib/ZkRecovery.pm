package ZkRecovery;

# A Pulsar map read from ZooKeeper, through an outage: the scenario of
# tests/integration/122-zk-recovery.t and bench/zk-recovery (issue 19, defect 3). A real
# ZooKeeper (ZooKeeper.pm), the three fake brokers of E2E.pm, and one lookout with no
# [broker] section and a 2 s session timeout. Brokers 1 and 2 register at first, each
# from its own 30 s session (a broker's default), so the outages here never cost them
# their znodes. Each outage: ZooKeeper killed, and kept down until lookout has opened
# HANDLES more client handles (4 by default: lookout's pause between handles doubles,
# and after the fourth it is 8 s in the old scheme); ZooKeeper restarted on its port and
# data (or frozen and thawed: outage's how); then, as soon as it serves, a broker registers from a new session and one
# whose znode goes (deleted, as a broker shutting down does), broker 3 and 2 in turn.
# Measured: from ZooKeeper serving, and from the change, to lookout's /map listing
# exactly the brokers registered.
#
#   my $s = ZkRecovery->new(dir => $dir);      # ZooKeeper, brokers, lookout; croaks
#   my $r = $s->outage(handles => 4);          # { serving, change, current (seconds, or
#                                              #   undef), handles, probes, ... }
#   $s->stop;
#
#   ZkRecovery::registration(\%internal, \%external [, form => 'lookup'])   # the JSON

use strict;
use warnings;

use Carp qw(croak);
use JSON::PP qw(decode_json encode_json);
use Time::HiRes qw(time sleep);
use Time::Local ();

use Lookout qw(tmp_dir free_port wait_until);
use E2E;
use ZooKeeper;

my $DIR = '/loadbalance/brokers';

# registration(IN, EX [, form => 'lookup']): the registration of a broker with internal
# addresses IN and external EX ({http, pulsar}), in the form a 3.x broker writes:
# LocalBrokerData (the modular load manager), or BrokerLookupData (the extensible one).
sub registration {
    my ($in, $ex, %o) = @_;
    my %al = (internal => { brokerServiceUrl => $in->{pulsar}, brokerHttpUrl => $in->{http} },
              external => { brokerServiceUrl => $ex->{pulsar}, brokerHttpUrl => $ex->{http} });
    if (($o{form} // '') eq 'lookup') {
        return encode_json({ webServiceUrl => $in->{http}, pulsarServiceUrl => $in->{pulsar},
                             advertisedListeners => \%al, protocols => {}, persistentTopicsEnabled => JSON::PP::true,
                             nonPersistentTopicsEnabled => JSON::PP::true,
                             loadManagerClassName => 'org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl',
                             startTimestamp => int(time * 1000), brokerVersion => '3.3.0', properties => {} });
    }
    return encode_json({ webServiceUrl => $in->{http}, pulsarServiceUrl => $in->{pulsar},
                         persistentTopicsEnabled => JSON::PP::true, nonPersistentTopicsEnabled => JSON::PP::true,
                         cpu => { usage => 12.5, limit => 200 }, bundles => [], brokerVersionString => '3.1.0',
                         protocols => {}, advertisedListeners => \%al,
                         loadManagerClassName => 'org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl',
                         startTimestamp => int(time * 1000), maxResourceUsage => 0.14, loadReportType => 'LocalBrokerData' });
}

sub new {
    my ($class, %o) = @_;
    my $dir = $o{dir} // tmp_dir();
    mkdir "$dir/zk";
    my $zk = ZooKeeper->start(dir => "$dir/zk");
    my $e = E2E->new(dir => $dir, own => { t1 => 1, t2 => 2, t3 => 3 });
    my $self = bless { dir => $dir, zk => $zk, e => $e, sess => {}, in => {} }, $class;
    $self->_register($_) for 1, 2;
    $self->{admin} = free_port();
    $self->{svc} = '127.0.0.40:' . free_port('127.0.0.40');
    my $conf = "[lookout]\nworkers = 1\nlog_level = debug\nadmin = 127.0.0.1:$self->{admin}\n\n"
             . "[pulsar prod]\nmetadataStoreUrl = zk:" . $zk->connect . "/pulsar\n"
             . "metadataStoreSessionTimeoutMillis = 2000\ninternal_networks = 127.0.0.0/8\n"
             . "internalListenerName = internal\nlookupListenerName = external\n"
             . "webServiceUrl = http://$self->{svc}\n";
    $self->{lk} = Lookout::start_lookout(dir => $dir, name => 'lookout', conf => $conf, wait => [ $self->{svc} ]);
    croak 'lookout did not start: ' . ($self->{lk}->log // '') unless $self->{lk}->started;
    croak 'lookout did not read the map: ' . join(' ', $self->ids) unless wait_until(sub { $self->current }, 15, 0.05);
    return $self;
}

sub lk    { $_[0]{lk} }
sub zk    { $_[0]{zk} }
sub e2e   { $_[0]{e} }
sub admin { $_[0]{admin} }
sub svc   { $_[0]{svc} }

sub id_of { my $b = $_[0]{e}->cluster->broker($_[1]); return "$b->{host}:$b->{webport}" }

# Broker N registers from a new session of its own.
sub _register {
    my ($self, $n) = @_;
    my $L = $self->{e}->L;
    my $c = $self->{zk}->client(timeout => 30);
    $c->create("/pulsar$DIR/" . $self->id_of($n), registration($L->{internal}{$n}, $L->{external}{$n}),
               ephemeral => 1, makepath => 1);
    $self->{sess}{$n} //= [];
    push @{ $self->{sess}{$n} }, $c;
    $self->{in}{$n} = 1;
}

# Broker N's znode goes; its sessions are closed later (_tidy), off the clock.
sub _deregister {
    my ($self, $n, $via) = @_;
    $via->delete("/pulsar$DIR/" . $self->id_of($n));
    delete $self->{in}{$n};
}

sub _tidy {
    my ($self) = @_;
    for my $n (grep { !$self->{in}{$_} } keys %{ $self->{sess} }) {
        $_->close for @{ delete $self->{sess}{$n} };
    }
}

sub get { E2E::http_req(GET => "http://127.0.0.1:$_[0]{admin}$_[1]", close => 1) }

# The ids of the brokers in lookout's /map, sorted ("" when it does not answer).
sub ids {
    my ($self) = @_;
    my $m = eval { decode_json($self->get('/map')->{body} // '') } // return ();
    my ($cl) = grep { $_->{name} eq 'prod' } @{ $m->{clusters} // [] };
    return sort map { $_->{id} } @{ $cl->{brokers} // [] };
}

# True when /map lists exactly the brokers registered now.
sub current {
    my ($self) = @_;
    return join(' ', $self->ids) eq join(' ', sort map { $self->id_of($_) } keys %{ $self->{in} });
}

sub metric {
    my ($self, $name) = @_;
    my ($v) = ($self->get('/metrics')->{body} // '') =~ /^\Q$name\E\{cluster="prod"\} (\d+)$/m;
    return $v;
}

# Client handles lookout opened so far, from its log (the C client's line at each
# zookeeper_init): the same count whichever version of lookout runs.
# When lookout last logged a session (new or resumed), in epoch seconds, or undef.
sub session_logged {
    my @t = ($_[0]{lk}->log // '') =~ /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z \[info\] zookeeper: (?:new|resumed) session/mg;
    return undef unless @t;
    my ($Y, $M, $D, $h, $m, $sec) = $t[-1] =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):([\d.]+)$/;
    return Time::Local::timegm(0, $m, $h, $D, $M - 1, $Y) + $sec;
}

sub handles_logged {
    my @l = ($_[0]{lk}->log // '') =~ /Initiating client connection/g;
    return scalar @l;
}

# $s->outage(handles => N [, how => 'freeze']): one outage and recovery, as the head
# says; with how => 'freeze' ZooKeeper is not killed but stopped (SIGSTOP) and continued
# (SIGCONT): its port takes connections all along and nothing answers, as from a frozen
# or partitioned host. Returns
# { down => s ZooKeeper was down, serving => s from its kill to serving again,
#   change => s from serving to the change made, current => s from the change to /map
#   current (undef if not within 20 s), from_serving => s from serving to current,
#   session => s from serving to lookout's new session (its log; < 0: before the harness
#   saw ZooKeeper serve, which it polls every 50 ms),
#   handles => handles opened while it was down (log), attempts, probes => the
#   metrics' increase over the outage (undef where lookout has none), in => N, out => N }.
sub outage {
    my ($self, %o) = @_;
    my $want = $o{handles} // 4;
    my $zk = $self->{zk};
    my ($in) = grep { !$self->{in}{$_} } 2, 3;
    my ($out) = grep { $self->{in}{$_} } 2, 3;
    my %m0 = map { ($_ => $self->metric("lookout_map_store_${_}_total")) } qw(attempts probes);
    my $h0 = $self->handles_logged;
    my $freeze = ($o{how} // 'kill') eq 'freeze';
    my $t_kill = time;
    if ($freeze) {
        kill 'STOP', $zk->pid;
    } else {
        $zk->kill;
    }
    croak 'lookout opened no new handle in 30 s: ' . $self->{lk}->log
        unless wait_until(sub { $self->handles_logged >= $h0 + $want }, 30, 0.02);
    sleep 0.7;    # past that handle's 0.5 s window: the next pause has begun
    my $h1 = $self->handles_logged;
    my %m1 = map { ($_ => $self->metric("lookout_map_store_${_}_total")) } qw(attempts probes);
    my $t_down = time - $t_kill;
    if ($freeze) {
        kill 'CONT', $zk->pid;
        croak 'ZooKeeper does not serve after SIGCONT'
            unless wait_until(sub { ($zk->four('srvr') // '') =~ /^Mode: /m }, 30, 0.05);
    } else {
        $zk->restart;
    }
    my $t_serving = time;
    my $c = $self->{zk}->client(timeout => 30);
    $c->create("/pulsar$DIR/" . $self->id_of($in),
               registration($self->{e}->L->{internal}{$in}, $self->{e}->L->{external}{$in}),
               ephemeral => 1, makepath => 1);
    push @{ $self->{sess}{$in} }, $c;
    $self->{in}{$in} = 1;
    $self->_deregister($out, $c);
    my $t_change = time;
    my $ok = wait_until(sub { $self->current }, 20, 0.02);
    my $t_current = time;
    my $t_session = $self->session_logged;
    my %r = (down => $t_down, serving => $t_serving - $t_kill, change => $t_change - $t_serving,
             current => $ok ? $t_current - $t_change : undef,
             from_serving => $ok ? $t_current - $t_serving : undef,
             session => defined $t_session && $t_session > $t_kill ? $t_session - $t_serving : undef,
             handles => $h1 - $h0, in => $in, out => $out,
             map { ($_ => defined $m0{$_} && defined $m1{$_} ? $m1{$_} - $m0{$_} : undef) } qw(attempts probes));
    $self->_tidy;
    return \%r;
}

sub stop {
    my ($self) = @_;
    $self->{lk}->stop;
    $_->close for map { @$_ } values %{ $self->{sess} };
    $self->{sess} = {};
    return $self->{lk}->exit_code;
}

1;
