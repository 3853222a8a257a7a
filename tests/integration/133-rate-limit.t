#!/usr/bin/perl
# 133-rate-limit.t: `limit.requests`, `limit.burst` and `limit.exempt` (issue 21 item 5).
# [lookout] sets 2/s with a burst of 5, which cluster prod inherits, cluster open turns
# off and cluster edge slows to 5/m (its burst still [lookout]'s 5). A flood from
# 127.0.0.2 on one keep-alive connection gets its burst of 200s, then 429 with
# Retry-After: 1 and a JSON reason, on the same connection, never closed; while it floods,
# a client from 127.0.0.3 gets its own 200s, and after waiting Retry-After the flooder gets
# 200 again. The same address is not limited on cluster open, nor from the exempt
# 127.0.0.4, nor on the admin listener. Behind a trusted balancer (raw PROXY v1 headers from
# 127.0.0.9), the header's source is what is limited: 192.0.2.7 across two connections,
# while 192.0.2.8 through the same balancer is served; the same with HAProxy's send-proxy
# in front of curl from 127.0.0.6 and 127.0.0.7. 2000 more source addresses through it grow
# lookout's memory by less than 4 MiB. /metrics counts every 429 by cluster, the access log
# shows them, and the log says so in a line a second at most, however many there were. A
# SIGHUP limits cluster open; one with 100/h is refused at its line. Every loop is bounded
# in count and time.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use IO::Select;
use JSON::PP qw(decode_json);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

$SIG{PIPE} = 'IGNORE';
my $dir = tmp_dir();
my ($p) = free_ports(1);
my ($w, $wo, $we, $adm) = free_ports(4);    # prod, open, edge (PROXY v1), admin
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p"], own => {});

my $lk = start_lookout(dir => $dir, conf => <<"EOF" . join('', map { broker_sections($c, $_, {}) } qw(prod open edge)));
[lookout]
workers = 2
admin = 127.0.0.1:$adm
timeout.client_header = 2s
admin.allow = 127.0.0.0/8
limit.requests = 2/s
limit.burst = 5
limit.exempt = 127.0.0.4/32
proxy_protocol.trusted = 127.0.0.9/32

[pulsar prod]
webServiceUrl = http://127.0.0.1:$w

[pulsar open]
webServiceUrl = http://127.0.0.1:$wo
limit.requests = off

[pulsar edge]
webServiceUrl = http://127.0.0.1:$we
proxy_protocol = v1
limit.requests = 5/m

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

# A keep-alive connection from local address $from to $port, with $pre sent first.
sub conn {
    my ($from, $port, $pre) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, LocalAddr => $from, Timeout => 5)
        or die "connect from $from: $@";
    syswrite $s, $pre if defined $pre;
    return $s;
}

# One GET on $s: { status, head, body }, or { status => 0, how => eof|timeout } (5 s at most).
sub ask {
    my ($s, $path) = @_;
    syswrite $s, "GET " . ($path // '/test/headers') . " HTTP/1.1\r\nHost: x\r\n\r\n";
    my ($buf, $end) = ('', time + 5);
    while (time < $end) {
        if ($buf =~ /^(HTTP\/1\.1 (\d{3}).*?\r\n\r\n)/s) {
            my ($head, $status) = ($1, $2);
            my ($len) = $head =~ /^Content-Length: (\d+)/mi;
            $len //= 0;
            return { status => 0 + $status, head => $head, body => substr($buf, length $head, $len) }
                if length($buf) >= length($head) + $len;
        }
        last unless IO::Select->new($s)->can_read($end - time);
        sysread($s, my $b, 65536) or return { status => 0, how => 'eof', got => $buf };
        $buf .= $b;
    }
    return { status => 0, how => 'timeout', got => $buf };
}

# /metrics as { 'name{labels}' => value } (and bare names).
sub metrics {
    my $r = curl("http://127.0.0.1:$adm/metrics");
    my %m;
    while ($r->{body} =~ /^(\w+(?:\{[^}]*\})?) (\S+)$/mg) { $m{$1} = $2 }
    return \%m;
}

# --- a flood from 127.0.0.2, one keep-alive connection; 127.0.0.3 meanwhile ------------
my $t0 = time;
my $flood = conn('127.0.0.2', $w);
my (@st, $first429);
for my $i (1 .. 30) {
    my $r = ask($flood);
    push @st, $r->{status};
    $first429 //= $r if $r->{status} == 429;
    last if $r->{status} == 0;
}
my $elapsed = time - $t0;
my $ok200 = grep { $_ == 200 } @st;
my $n429 = grep { $_ == 429 } @st;
is(scalar(grep { $_ == 0 } @st), 0, '30 requests on one connection: each answered, none closed it');
is_deeply([ @st[0 .. 4] ], [ (200) x 5 ], 'the burst of 5 passes');
ok($ok200 <= 5 + int(2 * $elapsed) + 1,
   sprintf('then no more than 2/s pass (%d 200s in %.2f s)', $ok200, $elapsed));
ok($n429 >= 30 - $ok200 && $n429 >= 20, "the rest are 429 ($n429)");
ok($first429, 'a 429') or BAIL_OUT('no 429: ' . join(' ', @st));
like($first429->{head}, qr/^Retry-After: 1\r$/m, '429: Retry-After: 1 (half a second to the next token, rounded up)');
unlike($first429->{head}, qr/^Connection: close/mi, '429: the connection is kept');
like($first429->{head}, qr{^Content-Type: application/json}mi, '429: a JSON body');
is(eval { decode_json($first429->{body})->{reason} }, 'too many requests from your address (limit.requests)',
   '429: its reason');

# Another client at the same time: its own bucket.
my @other = map { curl_start('--interface', '127.0.0.3', "http://127.0.0.1:$w/test/headers") } 1 .. 4;
my $during = ask($flood);
my @ost = map { curl_wait($_)->{status} } @other;
is($during->{status}, 429, 'the flooder is still held back');
is_deeply(\@ost, [ (200) x 4 ], 'while 127.0.0.3 gets 200s');

# After Retry-After, the flooder is served again, on the same connection.
sleep 1.05;
is(ask($flood)->{status}, 200, 'after Retry-After, the flooder gets 200 again (same connection)');

# --- what is not limited -----------------------------------------------------------------
my $open = conn('127.0.0.2', $wo);
my @open = map { ask($open)->{status} } 1 .. 20;
is_deeply(\@open, [ (200) x 20 ], 'the same address on cluster open (limit.requests = off): 20 x 200');
my $ex = conn('127.0.0.4', $w);
my @ex = map { ask($ex)->{status} } 1 .. 20;
is_deeply(\@ex, [ (200) x 20 ], 'the exempt 127.0.0.4 on prod: 20 x 200');
my @adm = map { ask(conn('127.0.0.2', $adm), '/healthz')->{status} } 1 .. 20;
is_deeply(\@adm, [ (200) x 20 ], 'the admin listener (a connection a request): 20 x 200');
close $_ for $open, $ex;

# --- behind a trusted balancer: the PROXY header's source is the client ------------------
my $pp7 = "PROXY TCP4 192.0.2.7 127.0.0.1 40000 $we\r\n";
my $b1 = conn('127.0.0.9', $we, $pp7);
my @b1 = map { ask($b1)->{status} } 1 .. 8;
is_deeply([ @b1[0 .. 4] ], [ (200) x 5 ], '192.0.2.7 behind the balancer: its burst');
is_deeply([ @b1[5 .. 7] ], [ (429) x 3 ], '... then 429 (5/m: the next in 12 s)');
my $b2 = conn('127.0.0.9', $we, "PROXY TCP4 192.0.2.8 127.0.0.1 40001 $we\r\n");
is(ask($b2)->{status}, 200, '192.0.2.8 through the same balancer: 200');
my $b3 = conn('127.0.0.9', $we, $pp7);
is(ask($b3)->{status}, 429, '192.0.2.7 on a new connection: still 429 (its bucket, not the connection\'s)');
close $_ for $b1, $b2, $b3;

# HAProxy in front (send-proxy from the trusted 127.0.0.9): curl from 127.0.0.6, a new
# connection each time, gets its burst then 429; 127.0.0.7 through the same HAProxy, 200.
SKIP: {
    skip 'haproxy not installed', 4 unless -x '/usr/sbin/haproxy';
    my ($hp_port) = free_ports(1);
    my $hp = start_haproxy_tcp($dir, <<"HAP");
frontend fe
    bind 127.0.0.1:$hp_port
    default_backend lk
backend lk
    server lk 127.0.0.1:$we send-proxy source 127.0.0.9
HAP
    ok(wait_port('127.0.0.1', $hp_port), 'haproxy listens') or diag(slurp("$dir/haproxy.out"));
    my @hst = map { curl('--interface', '127.0.0.6', "http://127.0.0.1:$hp_port/test/headers")->{status} } 1 .. 7;
    is_deeply([ @hst[0 .. 4] ], [ (200) x 5 ], 'curl from 127.0.0.6 through HAProxy, 7 connections: the burst of 5 passes');
    is_deeply([ @hst[5, 6] ], [ 429, 429 ], '... then 429');
    is(curl('--interface', '127.0.0.7', "http://127.0.0.1:$hp_port/test/headers")->{status}, 200,
       '127.0.0.7 through the same HAProxy: 200');
    kill 'TERM', $hp;
    waitpid $hp, 0;
}

# A flood from 2000 source addresses (each its own PROXY header): each is a new client with
# its burst, lookout's memory stays what it was, and 127.0.0.3 is served meanwhile.
my $rss0 = rss_kb($lk->pid);
my ($served, $n, $end) = (0, 0, time + 60);
while ($n < 2000 && time < $end) {
    my $s = conn('127.0.0.9', $we, sprintf("PROXY TCP4 10.77.%d.%d 127.0.0.1 1 $we\r\n", $n >> 8, $n & 255));
    $served++ if ask($s)->{status} == 200;
    close $s;
    $n++;
}
my $rss1 = rss_kb($lk->pid);
is($served, 2000, "2000 addresses, one request each: each served ($served of $n)");
SKIP: {
    # ASan's quarantine keeps freed memory: figures from a sanitizer build mean nothing here.
    my $bin = lookout_bin();
    skip 'sanitizer build: RSS not measured', 1 if `grep -c __asan_init '$bin' 2>/dev/null` + 0 > 0;
    ok($rss1 - $rss0 < 4096, "lookout's memory grew by less than 4 MiB ($rss0 -> $rss1 KiB; the table is 2 MiB)");
}
is(curl('--interface', '127.0.0.3', "http://127.0.0.1:$w/test/headers")->{status}, 200, '127.0.0.3 is still served');

# --- counted, logged, in the access log ----------------------------------------------------
my $m = metrics();
is($m->{'lookout_http_requests_limited_total{cluster="prod"}'}, $n429 + 1,
   "/metrics: lookout_http_requests_limited_total{cluster=\"prod\"} counts prod's 429s");
ok(($m->{'lookout_http_requests_limited_total{cluster="edge"}'} // 0) >= 3, '... and edge\'s, apart');
is($m->{'lookout_http_requests_limited_total{cluster="open"}'}, 0, '... open has none');
# One request at 5/m is refilled in 12 s: the 2000 buckets are still filling.
ok(($m->{lookout_http_rate_limit_entries} // 0) >= 2000 && $m->{lookout_http_rate_limit_entries} <= 65536,
   "lookout_http_rate_limit_entries: the buckets still filling ($m->{lookout_http_rate_limit_entries})");
is($m->{lookout_http_rate_limit_evictions_total}, 0, 'no eviction');
ok($lk->wait_log(qr/127\.0\.0\.2:\d+ > 127\.0\.0\.1:$w http "GET \/test\/headers" - 429 /, 3),
   'the access log shows the 429') or diag($lk->log);
like($lk->log, qr/192\.0\.2\.7:40000 > 127\.0\.0\.1:$we http "GET \/test\/headers" - 429 /, '... with the PROXY source as the client');
my @lines = $lk->log =~ /limited \d+ HTTP requests since the last such line/g;
ok(@lines >= 1 && @lines <= int(time - $t0) + 2,
   scalar(@lines) . ' "limited" log lines for ' . ($n429 + 6) . ' refusals: one a second at most');
like($lk->log, qr/limited \d+ HTTP requests since the last such line \(limit\.requests\); the latest to cluster prod, at 2\/s with a burst of 5, may come again in 1s, client: 127\.0\.0\.2:\d+/,
     'the line names the cluster, the limit and the client');

# A reload that limits cluster open, and one with a bad rate, refused at its line.
my $conf = slurp($lk->conf);
(my $limited_open = $conf) =~ s/^limit\.requests = off$/limit.requests = 1\/m\nlimit.burst = 2/m or die;
like($lk->reload($limited_open), qr/^SIGHUP: reloaded/, 'SIGHUP: open gets limit.requests = 1/m, burst 2');
my @after = map { curl('--interface', '127.0.0.5', "http://127.0.0.1:$wo/test/headers") } 1 .. 3;
is_deeply([ map { $_->{status} } @after ], [ 200, 200, 429 ], '... its clients now get 2, then 429');
my $ra = $after[2]{headers}{'retry-after'} // '';
ok($ra =~ /^\d+$/ && $ra >= 58 && $ra <= 60, "... with Retry-After: $ra (a minute for the next token)")
    or diag($after[2]{head});
(my $bad = $conf) =~ s/^limit\.requests = off$/limit.requests = 100\/h/m or die;
my $line = 1 + (() = substr($bad, 0, index($bad, 'limit.requests = 100/h')) =~ /\n/g);
like($lk->reload($bad), qr/^SIGHUP: reload refused: \Q${\ $lk->conf }\E:$line: \[pulsar open\] limit\.requests: '100\/h' is not a rate: N\/s or N\/m, N from 1 to 1000000 \(or off\); still serving/,
     "a reload with limit.requests = 100/h is refused at its line ($line)");

close $flood;
ok($lk->alive, 'lookout still runs');
$lk->stop;
done_testing();
