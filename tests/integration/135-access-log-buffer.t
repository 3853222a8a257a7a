#!/usr/bin/perl
# 135-access-log-buffer.t: the access log written through each worker's buffer (log.buffer,
# issue 22). With real clients (curl), every exchange's line is in the file exactly once and
# whole: under concurrent load, across a SIGHUP reload and a SIGUSR1 reopen made while the
# load runs, after a graceful stop (SIGTERM and SIGINT, with exchanges under way and Kafka
# connections cut at drain_timeout), and when a broker dies in the middle of its answer. A lone request's
# line is in the file within a second, with no more traffic behind it; log.buffer = 0 still
# writes each line at once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use IO::Socket::INET;

use Lookout;
use KafkaMock;
use PulsarBroker;

my $dir = tmp_dir();
my @bp = free_ports(1);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ map { "127.0.0.1:$_" } @bp ]);

# A Kafka broker that answers any request with an empty body after the correlation id, at
# once, or after 5 s for a request whose client id is 's' (past any drain_timeout here).
my ($kport, $kpid) = KafkaMock::scripted_broker(sub {
    my ($req) = @_;
    sleep 5 if substr($req, 10, 1) eq 's';
    return substr($req, 4, 4) . "\0\0";
});

# lookout with two workers, its access log (JSON lines) at DIR/NAME-access.log; returns it,
# its HTTP base URL, the log's path and its Kafka bootstrap port.
sub start_with {
    my ($name, $extra) = @_;
    my ($web, $e1, $kboot, $kext) = free_ports(4);
    my $access = "$dir/$name-access.log";
    unlink $access;
    my $lk = start_lookout(dir => $dir, name => $name, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["http://127.0.0.1:$e1"] }));
[lookout]
workers = 2
log.access = $access
log.format = json
drain_timeout = 2s
${\ ($extra // '')}

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
webServiceUrl = http://127.0.0.1:$web

[kafka k]
inter.broker.listener.name = INTERNAL
lookupListenerName = EXTERNAL
listener.security.protocol.map = INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
bootstrap.servers = 127.0.0.1:$kboot

[broker k/1]
advertised.listeners = INTERNAL://127.0.0.1:$kport,EXTERNAL://127.0.0.1:$kext
EOF
    ok($lk->started, "lookout ($name) started") or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));
    return ($lk, "http://127.0.0.1:$web", $access, $kboot);
}

# The lines of FILES: (count by request id, lines that are not one whole JSON object with
# an id, total lines, Kafka connections' closing lines).
sub lines_of {
    my (@files) = @_;
    my (%ids, @bad);
    my ($n, $kconn) = (0, 0);
    for my $f (@files) {
        my $t = slurp($f) // '';
        push @bad, "$f: no final newline" if $t ne '' && substr($t, -1) ne "\n";
        for my $l (split /\n/, $t) {
            my $j = eval { decode_json($l) };
            if ($j && ref $j eq 'HASH' && ($j->{event} // '') eq 'connection' && $j->{protocol} eq 'kafka') {
                $kconn++;
                next;
            }
            $n++;
            my ($id) = $j && ref $j eq 'HASH' ? ($j->{path} // '') =~ /[?&]id=([\w-]+)/ : ();
            if (!defined $id) { push @bad, $l; next }
            $ids{$id}++;
        }
    }
    return (\%ids, \@bad, $n, $kconn);
}

# Whether every id of WANT is there exactly once, nothing else, and every line whole.
sub exactly_once {
    my ($want, $files, $what) = @_;
    my ($ids, $bad, $n) = lines_of(@$files);
    my @missing = grep { !$ids->{$_} } @$want;
    my @twice = grep { $ids->{$_} > 1 } sort keys %$ids;
    my %w = map { $_ => 1 } @$want;
    my @extra = grep { !$w{$_} } sort keys %$ids;
    my $ok = ok(!@missing && !@twice && !@extra && !@$bad && $n == @$want,
                "$what: " . scalar(@$want) . " lines, each request's exactly once, each whole");
    diag("missing: @missing[0 .. ($#missing < 9 ? $#missing : 9)]") if @missing;
    diag("twice: @twice") if @twice;
    diag("extra: @extra") if @extra;
    diag("not whole: " . join("\n", @$bad[0 .. ($#$bad < 4 ? $#$bad : 4)])) if @$bad;
    return $ok;
}

# Concurrent clients: P curl processes, each N keep-alive requests ?id=TAG-p-i on one
# connection, bounded in time. Returns the ids and the handles.
sub load_start {
    my ($url, $tag, $p, $n, $path) = @_;
    my (@ids, @h);
    for my $k (1 .. $p) {
        my @urls = map { "$url" . ($path // '/test/status?code=200') . "&id=$tag-$k-$_" } 1 .. $n;
        push @ids, map { "$tag-$k-$_" } 1 .. $n;
        push @h, curl_start({ timeout => 30 }, @urls);
    }
    return (\@ids, \@h);
}

# Waits for the clients; how many did not end with curl's exit 0.
sub load_wait {
    my ($h) = @_;
    return scalar grep { curl_wait($_)->{exit} != 0 } @$h;
}

my ($lk, $url, $access) = start_with('main');

subtest 'a lone request: its line is there within a second, with nothing after it' => sub {
    sleep 0.3; # the start's own traffic long over
    my $r = curl("$url/test/status?code=200&id=lone-1");
    is($r->{status}, 200, 'answered');
    my $t0 = time;
    ok(wait_until(sub { (slurp($access) // '') =~ /id=lone-1/ }, 1), 'its line is in the file within 1 s');
    note(sprintf('after %.3f s', time - $t0));
    exactly_once(['lone-1'], [$access], 'the file');
};

subtest 'concurrent load: 8 clients of 40 requests' => sub {
    my ($ids, $h) = load_start($url, 'load', 8, 40);
    is(load_wait($h), 0, 'every client got every answer');
    ok(wait_until(sub { (() = (slurp($access) // '') =~ /\n/g) >= 321 }, 5), 'the lines came');
    exactly_once([ 'lone-1', @$ids ], [$access], 'the file');
};

subtest 'SIGUSR1 and SIGHUP while the load runs' => sub {
    truncate $access, 0;
    # 10 ms a request: the signals come while the clients are half way through
    my ($ids, $h) = load_start($url, 'rot', 6, 60, '/test/slow?ms=10');
    sleep 0.25;
    rename $access, "$access.1" or die "rename: $!";
    $lk->signal('USR1');
    ok($lk->wait_log(qr/SIGUSR1: access log reopened/, 5), 'reopened');
    $lk->signal('HUP');
    ok($lk->wait_log(qr/SIGHUP: reloaded .*generation 2/, 10), 'reloaded');
    is(load_wait($h), 0, 'every client got every answer');
    ok(wait_until(sub { (() = ((slurp($access) // '') . (slurp("$access.1") // '')) =~ /\n/g) >= 360 }, 5),
       'the lines came');
    exactly_once($ids, [ $access, "$access.1" ], 'the rotated file and the new one together');
    my ($new) = lines_of($access);
    ok(scalar(keys %$new) > 0, 'the new file has lines after the reopen (' . scalar(keys %$new) . ')');
};

subtest 'a broker dying in the middle of its answer' => sub {
    truncate $access, 0;
    my $r = curl("$url/test/die-mid?n=200000&id=die-1");
    isnt($r->{exit}, 0, 'the client sees the answer cut');
    is(curl("$url/test/status?code=200&id=die-2")->{status}, 200, 'the next request is answered');
    ok(wait_until(sub { (slurp($access) // '') =~ /id=die-2/ }, 2), 'its line came');
    exactly_once([ 'die-1', 'die-2' ], [$access], 'the file');
    my ($l) = grep { /id=die-1/ } split /\n/, slurp($access) // '';
    my $j = eval { decode_json($l // '') } // {};
    ok(defined $j->{error} || ($j->{bytes_out} // 0) < 200000, 'the cut exchange\'s line says so')
        or diag($l);
};

$lk->stop;
is($lk->exit_code, 0, 'lookout exited 0');

# A graceful stop with exchanges under way: each one finished has its line; Kafka
# connections whose request is still with the broker at drain_timeout are cut, and their
# closing lines are written as the worker's loop ends, after its last iteration.
for my $sig ('TERM', 'INT') {
    subtest "SIG$sig with exchanges under way" => sub {
        my ($lk, $url, $access, $kboot) = start_with("stop-$sig");
        # Four (so that both workers have some), each with a Produce v3 (no line of its own
        # under log.kafka = control) from client id 's'.
        my @kbusy = map { IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $kboot, Proto => 'tcp', Timeout => 5) } 1 .. 4;
        syswrite($_, KafkaMock::frame(pack('nnN', 0, 3, 7) . pack('n', 1) . 's')) for @kbusy;
        # The slow one first, so that it is under way when the signal comes (SIGINT's drain
        # is 1 s at most: it ends within that).
        my $slow = curl_start({ timeout => 20 }, "$url/test/slow?ms=900&id=slow$sig-1");
        sleep 0.3;
        my ($ids, $h) = load_start($url, "q$sig", 4, 30);
        ok(wait_until(sub { (() = (slurp($access) // '') =~ /\n/g) >= 20 }, 10), 'the load is under way');
        $lk->signal($sig);
        load_wait($h);
        is(curl_wait($slow)->{status}, 200, 'the slow request still gets its answer');
        ok(defined $lk->wait_exit(10), 'lookout exits');
        is($lk->exit_code, 0, '... 0');
        # The clients that were between two requests when the drain began are closed and
        # send the rest nowhere: only what was answered counts.
        my ($got, undef, undef, $kconn) = lines_of($access);
        my @answered = grep { $got->{$_} } @$ids;
        ok(@answered >= 20, scalar(@answered) . ' of the load\'s requests were answered');
        exactly_once([ @answered, "slow$sig-1" ], [$access], 'the file');
        is($kconn, 4, 'the Kafka connections cut at drain_timeout have their closing lines, once');
    };
}

subtest 'log.buffer = 0: each line at once' => sub {
    my ($lk, $url, $access) = start_with('unbuffered', 'log.buffer = 0');
    my ($ids, $h) = load_start($url, 'nb', 4, 25);
    is(load_wait($h), 0, 'every client got every answer');
    ok(wait_until(sub { (() = (slurp($access) // '') =~ /\n/g) >= 100 }, 5), 'the lines came');
    exactly_once($ids, [$access], 'the file');
    $lk->stop;
    is($lk->exit_code, 0, 'lookout exited 0');
};

$c->stop;
kill 'TERM', $kpid;
waitpid($kpid, 0);
done_testing;
