#!/usr/bin/perl
# 109-pulsar-frames.t: lookout reads every Pulsar binary frame as the broker and the clients
# do, and a client picks only listeners it may choose (issue 18 items 6 and 3), against the
# test broker (bin/pulsar-testbroker: an `internal` listener where each broker listens, an
# `external` one naming lookout; its reader, lib/pulsar_wire.py, takes the last of a field
# given twice, as protobuf and the broker's LightProto do) and hand-built frames
# (bin/pulsar-probe):
#   - google-protobuf (the PulsarApi code pulsar-flex ships) reads {PING, ..., LOOKUP} as a
#     LOOKUP: the last type counts;
#   - a command that gives its type twice is refused, from either side: {PING, ...,
#     LOOKUP, lookupTopic{advertised_listener_name}} never reaches the broker as a LOOKUP,
#     {PONG, ..., LOOKUP_RESPONSE{internal URL}} never reaches the client; the connection
#     closes, logged;
#   - a LOOKUP_RESPONSE with brokerServiceUrl twice (the internal one first, lookout's own
#     last) is refused rather than passed on with the internal one inside;
#   - advertised_listener_name: by default only the lookup listener is the client's to
#     choose; the internal one, another listener of the map or an unknown name get the
#     lookup listener's address, logged once per connection and counted
#     (lookout_listener_refused_total); with client_listeners = vpn, internal those two
#     are honoured. The name never reaches a broker.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(encode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;
use PulsarFrame qw(fv fb frame);

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';

sub probe { PulsarBinBroker::probe(@_) }
sub json_lines { PulsarBinBroker::json_lines(@_) }

# A protobuf writer of this file's own (the wire format; Pulsar's field numbers).
sub frame_hex { return unpack('H*', frame($_[0])) }

use constant { PING => 18, PONG => 19, LOOKUP => 23, LOOKUP_RESPONSE => 24 };

my %E = map { ($_ => free_port()) } qw(b1 b2);
my %V = map { ($_ => 'pulsar://127.0.0.5' . substr($_, 1) . ':' . free_port('127.0.0.5' . substr($_, 1))) } qw(b1 b2);
my %EXT = map { ($_ => "pulsar://127.0.0.1:$E{$_}") } qw(b1 b2);
my ($svc, $admin) = (free_port(), free_port());

my $t = PulsarBinBroker->start(
    dir => $dir, unknown_command => 'ignore',
    brokers => [ map { { name => $_, advertisedListeners => "internal:pulsar://127.0.0.1:0,external:$EXT{$_}" } } qw(b1 b2) ],
    topics => [ { name => 't-b2', owner => 'b2' }, { name => 't-b1', owner => 'b1' } ]);
my %I = map { ($_ => $t->addr($_)) } qw(b1 b2);
my %INT = map { ($_ => "pulsar://$I{$_}") } qw(b1 b2);
my $INT_HEX = unpack('H*', $INT{b1});

sub lookout_conf {
    my (%o) = @_;
    my %web = (b1 => 1, b2 => 2);
    my $brokers = join '', map { "[broker prod/$_]\nadvertisedListeners = internal:$INT{$_},internal:http://127.0.0.$web{$_}:9,"
                                 . "external:$EXT{$_},vpn:$V{$_}\n\n" } qw(b1 b2);
    return <<"EOF" . $brokers;
[lookout]
workers = 1
log_level = debug
admin = 127.0.0.1:$admin

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc
$o{extra}
EOF
}

sub metric {
    my ($name) = @_;
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return ($r->{body} // '') =~ /^\Q$name\E\{cluster="prod"\} (\d+)$/m ? $1 : undef;
}

my $lk = start_lookout(dir => $dir, name => 'default', conf => lookout_conf(extra => ''));
ok($lk->started, 'lookout started (no client_listeners)') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# ---- item 6: a frame is what the broker reads it as -----------------------------------------

subtest 'google-protobuf (pulsar-flex\'s PulsarApi code) reads {PING, ..., LOOKUP} as a LOOKUP' => sub {
    my $mod = $ENV{LOOKOUT_PULSAR_FLEX} // repo_top() . '/tests/pulsar/node_modules/pulsar-flex';
    plan skip_all => "pulsar-flex is not installed in $mod (tests/deps.sh)"
        unless Lookout::_which('node') && -f "$mod/package.json";
    my $lookup = fb(1, 'persistent://public/default/t-b1') . fv(2, 31) . fv(3, 1) . fb(7, 'internal');
    my $cmd = fv(1, PING) . fb(PING, '') . fv(1, LOOKUP) . fb(LOOKUP, $lookup);
    my $line = encode_json({ command_hex => unpack('H*', $cmd), type_id => LOOKUP,
                             fields => { topic => 'persistent://public/default/t-b1', request_id => 31,
                                         authoritative => JSON::PP::true, advertised_listener_name => 'internal' } });
    my $r = KafkaMock::run([ 'node', "$BIN/pulsar-pb-check" ], in => "$line\n", timeout => 60,
                           env => { LOOKOUT_PULSAR_FLEX => $mod });
    my ($j) = json_lines($r->{out});
    is($j->{type_id_theirs}, LOOKUP, 'its type is the last one, LOOKUP (a reader of the first sees PING)')
        or diag($r->{out}, $r->{err});
    ok($j->{ok}, '... with the lookup and its listener name') or diag(explain($j));
};

subtest 'a client command that gives its type twice never reaches the broker' => sub {
    my $lookup = fb(1, 'persistent://public/default/t-b1') . fv(2, 31) . fv(3, 1) . fb(7, 'internal');
    for my $case ([ 'PING first, LOOKUP last', fv(1, PING) . fb(PING, '') . fv(1, LOOKUP) . fb(LOOKUP, $lookup) ],
                  [ 'LOOKUP first, PING last', fv(1, LOOKUP) . fb(LOOKUP, $lookup) . fv(1, PING) ]) {
        my ($what, $cmd) = @$case;
        my $n = () = $t->frames(dir => 'in');
        my @r = probe("127.0.0.1:$E{b1}", [], { raw => frame_hex($cmd), expect => 1 }, { wait => 0.5 });
        my @steps = grep { ($_->{step} // '') =~ /^\d+$/ } @r;
        ok((grep { $_->{closed} } @steps), "$what: the connection is closed") or diag(explain(\@r));
        my @got = map { @{ $_->{received} // [] } } @steps;
        ok(!@got, "$what: no answer") or diag(explain(\@got));
        my @all = $t->frames(dir => 'in');
        my @in = @all[$n .. $#all];
        ok(!(grep { ($_->{fields}{request_id} // 0) == 31 || exists $_->{fields}{advertised_listener_name} } @in),
           "$what: the broker saw neither the lookup nor its listener name") or diag(explain(\@in));
    }
    like($lk->log, qr/client sent a command that gives its type twice \(\d+ bytes, starting 0812/,
         'logged, with the first bytes');
};

subtest 'a broker command that gives its type twice never reaches the client' => sub {
    # {PONG, pong{}, LOOKUP_RESPONSE, lookupTopicResponse{internal URL, Connect}}: PONG to a
    # reader of the first type, a LOOKUP_RESPONSE naming b1's internal address to the client.
    my $resp = fb(1, $INT{b1}) . fv(3, 1) . fv(4, 77) . fv(5, 1);
    my $bad = fv(1, PONG) . fb(PONG, '') . fv(1, LOOKUP_RESPONSE) . fb(LOOKUP_RESPONSE, $resp);
    my @p = probe_with_push("127.0.0.1:$E{b1}", frame_hex($bad));
    my @got = map { @{ $_->{received} // [] } } grep { ($_->{step} // '') =~ /^\d+$/ } @p;
    ok(!(grep { ($_->{frame_hex} // '') =~ /$INT_HEX/ } @got), "no frame naming b1's internal address reached the client")
        or diag(explain(\@got));
    ok((grep { $_->{closed} } @p), 'the connection is closed') or diag(explain(\@p));
    ok($lk->wait_log(qr/broker sent a command that gives its type twice/, 5), '... and logged');
};

subtest 'a LOOKUP_RESPONSE giving brokerServiceUrl twice is refused, not passed with the first inside' => sub {
    # the last URL is already lookout's own for b1, so a reader of the last has nothing to
    # rewrite; the first, internal, would go out unread
    my $resp = fb(1, $INT{b1}) . fb(1, $EXT{b1}) . fv(3, 1) . fv(4, 78) . fv(5, 1);
    my $bad = fv(1, LOOKUP_RESPONSE) . fb(LOOKUP_RESPONSE, $resp);
    my @p = probe_with_push("127.0.0.1:$E{b1}", frame_hex($bad));
    my @got = map { @{ $_->{received} // [] } } grep { ($_->{step} // '') =~ /^\d+$/ } @p;
    ok(!(grep { ($_->{frame_hex} // '') =~ /$INT_HEX/ } @got), "no frame naming b1's internal address reached the client")
        or diag(explain(\@got));
    ok((grep { $_->{closed} } @p), 'the connection is closed') or diag(explain(\@p));
    ok($lk->wait_log(qr/broker sent a command of type 24 that does not decode .*twice/, 5), '... and logged');
};

subtest 'well-formed frames still pass' => sub {
    my @r = probe("127.0.0.1:$svc", [], { send => 'PING' },
                  { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b2', authoritative => JSON::PP::true } });
    my ($p, $l) = grep { ($_->{step} // '') =~ /^\d+$/ } @r;
    is(($p->{received}[0]{type} // ''), 'PONG', 'PING answered');
    is(($l->{received}[0]{fields}{brokerServiceUrl} // ''), $EXT{b2}, 'a lookup answered with lookout\'s address');
};

# A probe on ADDR that connects, looks up t-b1 (so that the broker has the connection on b1),
# then has the broker push HEX on it, and reads what comes for a second.
sub probe_with_push {
    my ($addr, $hex) = @_;
    my $pid = open(my $fh, '-|', $PY, "$BIN/pulsar-probe", $addr,
                   encode_json({ send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b1',
                                                               authoritative => JSON::PP::true } }),
                   encode_json({ wait => 2 })) or die "pulsar-probe: $!";
    # wait until the broker has answered that lookup, then push
    my $seen = () = $t->frames(dir => 'out', type => 'LOOKUP_RESPONSE');
    wait_until(sub { my $k = () = $t->frames(dir => 'out', type => 'LOOKUP_RESPONSE'); $k > $seen }, 10);
    select(undef, undef, undef, 0.1);
    my $peer;
    for my $f (reverse $t->frames(dir => 'out', type => 'LOOKUP_RESPONSE')) { $peer = $f->{peer}; last }
    $t->control({ cmd => 'raw', broker => 'b1', peer => $peer, hex => $hex });
    local $/;
    my $out = <$fh>;
    close $fh;
    return json_lines($out // '');
}

# ---- item 3: which listener a client may choose ----------------------------------------------

sub lookups {
    my ($addr, @names) = @_;
    my $id = 40;
    my @r = probe($addr, [], map { { send => 'LOOKUP', fields => { topic => 'persistent://public/default/t-b2',
                                                                   request_id => $id++, authoritative => JSON::PP::true,
                                                                   advertised_listener_name => $_ } } } @names);
    return map { $_->{received}[0]{fields}{brokerServiceUrl} } grep { ($_->{step} // '') =~ /^\d+$/ } @r;
}

subtest 'by default a client chooses only the lookup listener' => sub {
    my $before = metric('lookout_listener_refused_total') // 0;
    my $n = () = $t->frames(type => 'LOOKUP', dir => 'in');
    my @urls = lookups("127.0.0.1:$svc", 'internal', 'vpn', 'nosuch', 'external');
    is($urls[0], $EXT{b2}, "'internal': the lookup listener's address, not the internal one");
    is($urls[1], $EXT{b2}, "'vpn' (in the map, not in client_listeners): the lookup listener's");
    is($urls[2], $EXT{b2}, "'nosuch': the lookup listener's");
    is($urls[3], $EXT{b2}, "'external': the lookup listener's");
    my @in = ($t->frames(type => 'LOOKUP', dir => 'in'))[$n .. $n + 3];
    ok(@in == 4 && !(grep { exists $_->{fields}{advertised_listener_name} } @in), 'the broker saw no name')
        or diag(explain(\@in));
    my @lines = $lk->log =~ /(client asked for listener .*)/g;
    is(scalar(@lines), 1, 'logged once for the connection') or diag(explain(\@lines));
    like($lines[0] // '', qr/client asked for listener 'internal' \(LOOKUP advertised_listener_name\), the internal listener, which clients may not choose; the lookup listener 'external' is used/,
         '... naming what was asked and what was used');
    is(metric('lookout_listener_refused_total'), $before + 3, 'lookout_listener_refused_total counts all three');
    lookups("127.0.0.1:$svc", 'vpn');
    ok($lk->wait_log(qr/client asked for listener 'vpn' \(LOOKUP advertised_listener_name\), which is not in client_listeners/, 5),
       'a new connection logs again');
};
$lk->stop;

subtest 'client_listeners = vpn, internal: the operator lets clients choose those' => sub {
    my $lk2 = start_lookout(dir => $dir, name => 'listed', conf => lookout_conf(extra => 'client_listeners = vpn, internal'));
    ok($lk2->started, 'lookout started') or return diag($lk2->log);
    my $n = () = $t->frames(type => 'LOOKUP', dir => 'in');
    my @urls = lookups("127.0.0.1:$svc", 'vpn', 'internal', 'nosuch');
    is($urls[0], $V{b2}, "'vpn': b2's vpn address (listed, never bound by lookout)");
    is($urls[1], $INT{b2}, "'internal': b2's internal address (listed explicitly)");
    is($urls[2], $EXT{b2}, "'nosuch': the lookup listener's");
    my @in = ($t->frames(type => 'LOOKUP', dir => 'in'))[$n .. $n + 2];
    ok(@in == 3 && !(grep { exists $_->{fields}{advertised_listener_name} } @in), 'the broker saw no name')
        or diag(explain(\@in));
    like($lk2->log, qr/client asked for listener 'nosuch' \(LOOKUP advertised_listener_name\), which no broker has/,
         'the unknown name logged');
    $lk2->stop;
};

subtest 'client_listeners naming a listener no broker has: refused with file and line' => sub {
    my $conf = lookout_conf(extra => 'client_listeners = vpn, vnp');
    my $r = run_lookout(dir => $dir, name => 'bad', conf => $conf, args => ['--check']);
    isnt($r->{exit}, 0, '--check fails');
    like($r->{out}, qr/bad\.conf:10: \[pulsar prod\] client_listeners: no broker has a listener 'vnp'/,
         'file:line: the key and the name') or diag($r->{out});
};

$t->stop;
done_testing;
