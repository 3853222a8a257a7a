#!/usr/bin/perl
# 125-pulsar-new-commands.t: Pulsar 5.0's commands that hand clients broker URLs (issue 19),
# found in PulsarApi.proto on apache/pulsar's master (proxy/pulsar.proto says where):
# SCALABLE_TOPIC_UPDATE (PIP-460/468: a scalable topic's segments, the broker of each, and
# the controller broker) and WATCH_TC_ASSIGNMENTS_UPDATE (PIP-473: the leader broker of each
# transaction-coordinator partition). The test broker pushes them as a 5.0 broker does,
# with unknown fields in them; a hand-built client (pulsar-probe) gets them straight from
# the broker (internal URLs) and through lookout (each broker's external URL, every other
# byte's meaning kept). One naming a broker the map lacks passes as it came with
# leak_guard = log, logged and counted, and closes the connection with leak_guard = block.
# On a listener with pulsar+ssl but no pulsar:// (tlsedge, a client_listeners one), a
# segment's required broker_url takes the pulsar+ssl address, as broker_url_tls does: no
# internal URL of either scheme is left.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json encode_json);
use Test::More;

use Lookout;
use KafkaMock;
use KafkaTestBroker;
use PulsarBinBroker;

my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';
my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }
sub log_since { my ($lk, $from) = @_; return substr($lk->log // '', $from) }

# b1-b3 are mapped; b9 is a broker the map lacks (advertised only: never dialled).
my $pt = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ (map { { name => "b$_", advertisedListeners => 'internal:pulsar://127.0.0.1:0' } } 1 .. 3),
                 { name => 'b9', advertisedListeners => 'internal:pulsar://127.0.0.9:6650', listen => JSON::PP::false } ],
    topics => [ map { { name => "t-$_", owner => 'b1' } } qw(seg tc unmapped) ]);
my %int = map { ("b$_" => 'pulsar://' . $pt->addr("b$_")) } 1 .. 3;
# (lookout wants an internal http address for each broker today; nothing is sent there)

my (%P, %ext, %tls);
$ext{"b$_"} = free_port() for 1 .. 3;
$tls{"b$_"} = free_port() for 1 .. 3; # tlsedge: advertised, never bound by lookout
my $b2_int_tls = 'pulsar+ssl://127.0.0.12:6651'; # b2's internal pulsar+ssl (the map's; not bound)
for my $mode (qw(log block)) {
    my $admin = free_port();
    my %e = $mode eq 'log' ? %ext : map { ($_ => free_port()) } keys %ext;
    my $brokers = join '', map { "[broker prod/$_]\nadvertisedListeners = internal:$int{$_},"
                                 . ($_ eq 'b2' ? "internal:$b2_int_tls," : '')
                                 . "internal:http://127.0.0.1:" . (8 + substr($_, 1)) . ","
                                 . "external:pulsar://127.0.0.1:$e{$_},tlsedge:pulsar+ssl://127.0.0.1:$tls{$_}\n\n" } sort keys %int;
    my $lk = start_lookout(dir => $dir, name => "pulsar-$mode", conf => Lookout::guard_conf($admin, $mode, <<"EOF"));
client_listeners = tlsedge

$brokers
EOF
    ok($lk->started, "lookout (leak_guard = $mode) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    $P{$mode} = { lk => $lk, b1 => $e{b1}, admin => $admin };
}

# A client that looks up TOPIC at ADDR (naming LISTENER, if given) and waits; the broker (b1)
# pushes ACTION right after answering that lookup, on the connection it came on. Returns the
# frames received.
sub pushed {
    my ($addr, $topic, $action, $listener) = @_;
    $pt->control({ cmd => 'arm', on => 'lookup', topic => $topic, broker => 'b1',
                   actions => [ { %$action, broker => 'b1' } ] });
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", $addr,
                             encode_json({ send => 'LOOKUP', fields => { topic => "persistent://public/default/$topic",
                                                                          authoritative => JSON::PP::true,
                                                                          $listener ? (advertised_listener_name => $listener) : () } }),
                             encode_json({ wait => 2 }) ], timeout => 60);
    my @lines = json_lines($r->{out});
    return ([ map { @{ $_->{received} // [] } } @lines ], \@lines);
}

sub leaks_metric {
    my ($admin) = @_;
    my $r = curl("http://127.0.0.1:$admin/metrics");
    return $r->{body} =~ /^lookout_leaks_total\{cluster="prod"\} (\d+)$/m ? $1 : -1;
}

my $seg = { cmd => 'scalable_topic_update', session_id => 42, epoch => 3, topic_name => 'topic://public/default/t-seg',
            segments => [ { id => 1, broker => 'b1' }, { id => 2, broker => 'b2' }, { id => 3, broker => 'b3' } ],
            controller => 'b2' };

subtest 'SCALABLE_TOPIC_UPDATE: every segment broker and the controller rewritten' => sub {
    my ($direct) = pushed($pt->addr('b1'), 't-seg', $seg);
    my ($d) = grep { ($_->{type} // '') eq 'SCALABLE_TOPIC_UPDATE' } @$direct;
    ok($d, 'straight from the broker, the update comes') or return diag(explain($direct));
    is_deeply([ map { $_->{broker_url} } @{ $d->{fields}{dag}{segment_brokers} } ], [ @int{qw(b1 b2 b3)} ],
              '... naming the brokers\' internal URLs');

    my $from = length($P{log}{lk}->log // '');
    my ($got) = pushed("127.0.0.1:$P{log}{b1}", 't-seg', $seg);
    my ($u) = grep { ($_->{type} // '') eq 'SCALABLE_TOPIC_UPDATE' } @$got;
    ok($u, 'through lookout, the update comes') or return diag(explain($got));
    my $dag = $u->{fields}{dag};
    is_deeply([ map { [ $_->{segment_id}, $_->{broker_url} ] } @{ $dag->{segment_brokers} } ],
              [ map { [ $_, "pulsar://127.0.0.1:$ext{qq(b$_)}" ] } 1 .. 3 ],
              'each segment names its broker\'s external URL, in order');
    is($dag->{controller_broker_url}, "pulsar://127.0.0.1:$ext{b2}", 'the controller\'s too');
    ok(!exists $dag->{controller_broker_url_tls} && !grep({ exists $_->{broker_url_tls} } @{ $dag->{segment_brokers} }),
       'no TLS URL, as the external listener has none');
    is_deeply($dag->{segments}, $d->{fields}{dag}{segments}, 'the segments (hash ranges, states) as the broker sent them');
    is_deeply([ $u->{fields}{session_id}, $dag->{epoch}, $u->{fields}{resolved_topic_name} ],
              [ 42, 3, 'topic://public/default/t-seg' ], 'session, epoch and resolved topic name kept');
    is_deeply($u->{fields}{_unknown}, $d->{fields}{_unknown}, 'the unknown field in the sub-command kept');
    is_deeply($u->{unknown_fields}, $d->{unknown_fields}, '... and in BaseCommand');
    ok(wait_until(sub { log_since($P{log}{lk}, $from) =~ /pulsar "SCALABLE_TOPIC_UPDATE"/ }, 5), 'an access-log line');
    like(log_since($P{log}{lk}, $from), qr/pulsar "SCALABLE_TOPIC_UPDATE" prod\/b1 - \d+ bytes to client, 4 rewrites, 0 leaks/,
         '... with 4 rewrites and no leak');
};

subtest 'SCALABLE_TOPIC_UPDATE on a listener with pulsar+ssl only: no internal URL left' => sub {
    my $b2 = { url => $int{b2}, url_tls => $b2_int_tls };
    my $upd = { %$seg, segments => [ { id => 1, broker => 'b1' }, { id => 2, broker => $b2 } ], controller => $b2 };
    my ($direct) = pushed($pt->addr('b1'), 't-seg', $upd);
    my ($d) = grep { ($_->{type} // '') eq 'SCALABLE_TOPIC_UPDATE' } @$direct;
    is_deeply([ map { [ $_->{broker_url}, $_->{broker_url_tls} ] } @{ $d->{fields}{dag}{segment_brokers} // [] } ],
              [ [ $int{b1}, undef ], [ $int{b2}, $b2_int_tls ] ], 'straight from the broker: internal URLs, b2\'s of both schemes')
        or diag(explain($direct));

    my $from = length($P{log}{lk}->log // '');
    my ($got, $lines) = pushed("127.0.0.1:$P{log}{b1}", 't-seg', $upd, 'tlsedge');
    my ($u) = grep { ($_->{type} // '') eq 'SCALABLE_TOPIC_UPDATE' } @$got;
    ok($u, 'through lookout (advertised_listener_name tlsedge), the update comes') or return diag(explain($lines));
    my $hex = $u->{frame_hex} // '';
    for my $internal ($int{b1}, $int{b2}, $b2_int_tls) {
        my $h = unpack('H*', $internal);
        unlike($hex, qr/$h/, "$internal is nowhere in it");
    }
    my $dag = $u->{fields}{dag};
    is_deeply([ map { [ $_->{segment_id}, $_->{broker_url}, $_->{broker_url_tls} ] } @{ $dag->{segment_brokers} } ],
              [ map { [ $_, ("pulsar+ssl://127.0.0.1:$tls{qq(b$_)}") x 2 ] } 1 .. 2 ],
              'each segment\'s broker_url and broker_url_tls: its broker\'s tlsedge pulsar+ssl URL');
    ok(!exists $dag->{controller_broker_url}, 'the controller\'s plain URL, which may go, is gone');
    is($dag->{controller_broker_url_tls}, "pulsar+ssl://127.0.0.1:$tls{b2}", '... its TLS one is b2\'s tlsedge URL');
    ok(wait_until(sub { log_since($P{log}{lk}, $from) =~ /pulsar "SCALABLE_TOPIC_UPDATE"/ }, 5), 'an access-log line');
    my $log = log_since($P{log}{lk}, $from);
    like($log, qr/pulsar "SCALABLE_TOPIC_UPDATE" prod\/b1 - \d+ bytes to client, 3 rewrites, 0 leaks/,
         '... with 3 rewrites and no leak');
    unlike($log, qr/passed through unchanged/, 'nothing passed through unchanged');
};

subtest 'WATCH_TC_ASSIGNMENTS_UPDATE: each coordinator\'s leader rewritten' => sub {
    my $tc = { cmd => 'tc_assignments_update', watch_id => 7, parallelism => 3,
               assignments => [ { tc_id => 0, broker => 'b3' }, { tc_id => 1 }, { tc_id => 2, broker => 'b1' } ] };
    my ($direct) = pushed($pt->addr('b1'), 't-tc', $tc);
    my ($d) = grep { ($_->{type} // '') eq 'WATCH_TC_ASSIGNMENTS_UPDATE' } @$direct;
    is_deeply([ map { $_->{broker_service_url} } @{ $d->{fields}{snapshot}{assignments} // [] } ],
              [ $int{b3}, undef, $int{b1} ], 'straight from the broker: internal URLs') or diag(explain($direct));
    my ($got) = pushed("127.0.0.1:$P{log}{b1}", 't-tc', $tc);
    my ($u) = grep { ($_->{type} // '') eq 'WATCH_TC_ASSIGNMENTS_UPDATE' } @$got;
    is_deeply([ map { [ $_->{tc_id}, $_->{broker_service_url} ] } @{ $u->{fields}{snapshot}{assignments} // [] } ],
              [ [ 0, "pulsar://127.0.0.1:$ext{b3}" ], [ 1, undef ], [ 2, "pulsar://127.0.0.1:$ext{b1}" ] ],
              'through lookout: external URLs; the partition without a leader as it was') or diag(explain($got));
    is_deeply([ $u->{fields}{watch_id}, $u->{fields}{snapshot}{parallelism} ], [ 7, 3 ], 'watch id and parallelism kept');
};

my $unmapped = { %$seg, segments => [ { id => 1, broker => 'b1' }, { id => 9, broker => 'b9' } ] };
my $b9_hex = unpack('H*', 'pulsar://127.0.0.9:6650');
for my $mode (qw(log block)) {
    subtest "SCALABLE_TOPIC_UPDATE naming a broker the map lacks, leak_guard = $mode" => sub {
        my $p = $P{$mode};
        my $from = length($p->{lk}->log // '');
        my $before = leaks_metric($p->{admin});
        my ($got, $lines) = pushed("127.0.0.1:$p->{b1}", 't-unmapped', $unmapped);
        my $hex = join '', map { $_->{frame_hex} // '' } @$got;
        if ($mode eq 'log') {
            like($hex, qr/$b9_hex/, 'b9\'s URL reaches the client as the broker sent it (log only)') or diag(explain($lines));
        } else {
            unlike($hex, qr/$b9_hex/, 'no byte of it reaches the client');
            ok((grep { $_->{closed} } @$lines), 'the connection closes') or diag(explain($lines));
        }
        ok(wait_until(sub { log_since($p->{lk}, $from) =~ /pulsar "SCALABLE_TOPIC_UPDATE"/ }, 5), 'its access-log line came');
        my $log = log_since($p->{lk}, $from);
        like($log, qr/\[warn\] [^\n]*SCALABLE_TOPIC_UPDATE names pulsar:\/\/127\.0\.0\.9:6650, no broker in the map; passed through unchanged/,
             'the pulsar filter says which URL it could not map');
        like($log, qr/\[warn\] [^\n]*the SCALABLE_TOPIC_UPDATE command from broker prod\/b1 \(cluster prod\) names pulsar:\/\/127\.0\.0\.9:6650, an address the map lacks/,
             'the leak guard names it');
        is(leaks_metric($p->{admin}), $before + 1, 'lookout_leaks_total counts it');
    };
}

done_testing();
