#!/usr/bin/perl
# 116-pool-mixed.t: HTTP and Pulsar binary traffic to the same brokers, with the default
# idle pool (issue 18).  Every real Pulsar broker has an http:// and a pulsar:// internal
# address; an idle upstream connection left by an HTTP exchange must never be handed to a
# binary client (its CONNECT would reach the broker's web server), nor a connection to one
# address be reused for another.  Brokers: bin/pulsar-testbroker (binary) and
# lib/PulsarBroker.pm (HTTP), two processes per broker, one [broker] section each in
# lookout's map; clients: curl and bin/pulsar-probe, interleaved, each on every broker and
# on the service addresses, with one worker so that every exchange meets the same pool.

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
use PulsarBroker;

my $dir = tmp_dir();
my $BIN = repo_top() . '/tests/integration/bin';
my $PY = KafkaTestBroker::python() or plan skip_all => 'python3 not found';

sub json_lines { return map { my $j = eval { decode_json($_) }; $j ? ($j) : () } split /\n/, $_[0] }

sub probe {
    my ($addr, @steps) = @_;
    my $r = KafkaMock::run([ $PY, "$BIN/pulsar-probe", $addr, '--timeout', 5, map { encode_json($_) } @steps ],
                           timeout => 30);
    return json_lines($r->{out});
}

my @B = qw(b1 b2);
# lookout's external addresses: binary and web, per broker, and the two service addresses.
my %EP = map { ($_ => free_port()) } @B;
my %EW = map { ($_ => free_port()) } @B;
my ($svc, $web) = (free_port(), free_port());

my $bin = PulsarBinBroker->start(
    dir => $dir,
    brokers => [ map { { name => $_, advertisedListeners => "internal:pulsar://127.0.0.1:0" } } @B ],
    topics => [ { name => 't-b1', owner => 'b1' }, { name => 't-b2', owner => 'b2' } ]);
my %IP = map { ($_ => $bin->addr($_)) } @B;
# The web servers, each naming its broker's real binary address in LookupData.
my %IW = map { ($_ => '127.0.0.1:' . free_port()) } @B;
my $http = PulsarBroker->start(
    dir => "$dir/web",
    brokers => [ map { "http://$IW{$_},pulsar://$IP{$_}" } @B ],
    own => { 't-b1' => 1, 't-b2' => 2 });

my $brokers = join '', map {
    "[broker prod/$_]\nadvertisedListeners = internal:pulsar://$IP{$_},internal:http://$IW{$_},"
        . "external:pulsar://127.0.0.1:$EP{$_},external:http://127.0.0.1:$EW{$_}\n\n"
} @B;
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . $brokers);
[lookout]
workers = 1
log_level = debug

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
serviceUrl = pulsar://127.0.0.1:$svc
webServiceUrl = http://127.0.0.1:$web
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
unlike($lk->conf, qr/idle_pool/, 'with the default idle pool');

# One HTTP lookup (it leaves an idle upstream connection to the broker's web address).
sub http_lookup {
    my ($port, $topic, $what) = @_;
    my $r = curl("http://127.0.0.1:$port/lookup/v2/topic/persistent/public/default/$topic");
    my $j = eval { decode_json($r->{body}) } // {};
    my $owner = $topic =~ s/^t-//r;
    ok($r->{status} == 200 && ($j->{brokerUrl} // '') eq "pulsar://127.0.0.1:$EP{$owner}",
       "$what: HTTP lookup of $topic answered, naming lookout's address of $owner")
        or diag(explain($r));
}

# One binary client: CONNECT, then a LOOKUP.
sub bin_lookup {
    my ($port, $topic, $what) = @_;
    my @r = probe("127.0.0.1:$port", { lookup => "persistent://public/default/$topic", follow => 3 });
    my ($c) = grep { ($_->{step} // '') eq 'connect' } @r;
    my ($l) = grep { $_->{lookup} } @r;
    my $owner = $topic =~ s/^t-//r;
    my $last = ($l->{hops} // [])->[-1]{fields} // {};
    ok(($c->{received}[0]{type} // '') eq 'CONNECTED'
           && ($last->{brokerServiceUrl} // '') eq "pulsar://127.0.0.1:$EP{$owner}",
       "$what: binary client CONNECTED and LOOKUP of $topic answered") or diag(explain(\@r));
}

subtest 'a binary client to a broker after an HTTP request to it' => sub {
    for my $b (@B) {
        for my $round (1 .. 3) {
            http_lookup($EW{$b}, "t-$b", "$b round $round");
            bin_lookup($EP{$b}, "t-$b", "$b round $round");
        }
    }
};

subtest 'interleaved on the service addresses and the brokers' => sub {
    for my $round (1 .. 4) {
        my $t = "t-" . $B[ $round % 2 ];
        http_lookup($web, $t, "round $round, webServiceUrl");
        bin_lookup($svc, $t, "round $round, serviceUrl");
        http_lookup($EW{b1}, $t, "round $round, b1's web address");
        bin_lookup($EP{b2}, $t, "round $round, b2's binary address");
    }
};

subtest 'HTTP connections to a broker are still reused' => sub {
    $http->clear_log(1);
    http_lookup($EW{b1}, 't-b1', "lookup $_") for 1 .. 3;
    my @peers = map { $_->{peer} // '' } $http->requests(1);
    my %distinct = map { ($_ => 1) } @peers;
    is(scalar(@peers), 3, 'b1 web server saw the three lookups');
    is(scalar(keys %distinct), 1, '... on one pooled connection') or diag(explain(\@peers));
};

my @frames = $bin->frames(dir => 'in', type => 'CONNECT');
ok(@frames >= 12, 'every binary client reached a binary broker (' . scalar(@frames) . ' CONNECTs)');
my @bad = grep { ($_->{method} // '') eq '' } map { $http->requests($_) } 1 .. 2;
is(scalar(@bad), 0, 'no web server saw anything but HTTP') or diag(explain(\@bad));
unlike($lk->log, qr/frame of \d{7,} bytes|too large/i, 'lookout never read an HTTP answer as a frame');
ok($lk->alive, 'lookout still runs');
$lk->stop;

done_testing();
