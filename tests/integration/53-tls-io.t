#!/usr/bin/perl
# 53-tls-io.t: lookout's own TLS reads and writes on client connections (issue 7). It
# reads what OpenSSL holds rather than waiting for the socket, so input that arrives
# with the client's Finished, or several records in one segment, or three requests in
# one record, must each be answered without the client sending more; close_notify after
# a request still gets the answer; a TLS 1.3 KeyUpdate from the client is answered; a
# client that stops reading a large download gets it intact once it resumes, lookout
# holding at most a bounded amount meanwhile (the writes that wait for the socket); and
# a large upload arrives intact.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::SSL;
use IPC::Open2;
use JSON::PP qw(decode_json);
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

need_tools('python3', 'openssl');
plan skip_all => 'needs /proc' unless -r "/proc/$$/status";

my $certs = test_certs();
my $dir = tmp_dir();
my ($p1, $s) = (free_port(), free_port());
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => ["127.0.0.1:$p1"]);
my $lk = start_lookout(dir => $dir, conf => <<"EOF" . broker_sections($c, 'prod', { 1 => ["https://127.0.0.1:$s"] }));
[lookout]
workers = 1
tls.certificate = $certs->{edge_crt}
tls.key = $certs->{edge_key}
timeout.idle = 30s
timeout.response = 30s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external

EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');
my $pid = $lk->pid;
my $edge = "$FindBin::Bin/bin/tls-edge";

sub edge {
    my ($mode) = @_;
    my $out = qx{timeout 30 python3 $edge --ca $certs->{edge_ca} --sni lookout.test $s $mode 2>&1};
    my $r = eval { decode_json($out) } // { error => "tls-edge printed: $out" };
    diag("tls-edge $mode: $r->{error}") if $r->{error};
    return $r;
}

subtest 'a request sent with the client Finished is answered' => sub {
    my $r = edge('finished');
    is_deeply($r->{answers}, [ [ 200, 1 ] ], 'one answer, to GET /test/repeat?n=1');
};

subtest 'three requests in one record, then three records in one segment' => sub {
    my $r = edge('pipeline');
    is_deeply($r->{answers}, [ map { [ 200, $_ ] } 1 .. 6 ], 'six answers, in order');
};

subtest 'close_notify right behind a request' => sub {
    my $r = edge('close-notify');
    is_deeply($r->{answers}, [ [ 200, 1 ] ], 'the request is answered');
    ok($r->{eof}, '... and then the connection ends');
};

subtest 'a KeyUpdate from the client, then another request' => sub {
    # s_client's "K" command sends a KeyUpdate asking for ours in return.
    # It says KEYUPDATE on stderr.
    my $spid = open2(my $out, my $in, 'sh', '-c', 'exec "$@" 2>&1', 'sh', 'timeout', '20', 'openssl',
                     's_client', '-connect', "127.0.0.1:$s", '-servername', 'lookout.test',
                     '-CAfile', $certs->{edge_ca}, '-tls1_3', '-crlf');
    my $req = sub { "GET /test/repeat?n=$_[0] HTTP/1.1\nHost: lookout.test\n\n" };
    $in->autoflush(1);
    sleep 0.5;
    print $in $req->(7);
    sleep 0.5;
    print $in "K\n";
    sleep 0.5;
    print $in $req->(9);
    sleep 0.8;
    close $in;
    my $text = do { local $/; <$out> } // '';
    waitpid $spid, 0;
    like($text, qr/KEYUPDATE/, 's_client sent its KeyUpdate');
    my @lengths = $text =~ /^Content-Length: (\d+)\r?$/mgi;
    is_deeply(\@lengths, [ 7, 9 ], 'both requests answered, before and after it');
};

my $N = 64 * 1024 * 1024;
my $LIMIT_KB = 32 * 1024;
my $PAUSE = 2;

sub tls_socket {
    return IO::Socket::SSL->new(PeerAddr => '127.0.0.1', PeerPort => $s, SSL_hostname => 'lookout.test',
                                SSL_ca_file => $certs->{edge_ca}, Timeout => 10);
}


subtest 'a client that stops reading a large download' => sub {
    my $t = tls_socket() or return fail("TLS connect: $SSL_ERROR");
    my $base = rss_kb($pid);
    syswrite $t, "GET /test/repeat?n=$N HTTP/1.1\r\nHost: lookout.test\r\nConnection: close\r\n\r\n";
    my $b = body_reader($t, wait => 60);
    $b->{read}->(1024 * 1024);
    like($b->{head} // '', qr{^HTTP/1\.1 200}, 'the download started');
    my $grew = peak_rss_kb($pid, $PAUSE) - $base;
    cmp_ok($grew, '<', $LIMIT_KB, "client paused ${PAUSE}s: VmRSS grew by $grew kB (limit $LIMIT_KB kB)");
    $b->{read}->($N);
    is($b->{got}, $N, "resumed: all $N bytes arrived");
    is($b->{sha}->hexdigest, PulsarBroker::repeat_bytes_sha256($N), '... intact');
    close $t;
};

subtest 'a large upload' => sub {
    my $t = tls_socket() or return fail("TLS connect: $SSL_ERROR");
    my $blk = PulsarBroker::test_bytes(65536);
    my $ok = syswrite($t, "PUT /test/sink?ms=0 HTTP/1.1\r\nHost: lookout.test\r\nContent-Length: $N\r\n"
                        . "Connection: close\r\n\r\n");
    for (my $off = 0; $ok && $off < $N; $off += 65536) {
        my $data = $blk;
        while ($ok && length $data) {
            $ok = syswrite($t, $data);
            substr($data, 0, $ok, '') if $ok;
        }
    }
    ok($ok, "sent $N bytes");
    my $reply = '';
    while (sysread($t, my $chunk, 65536)) { $reply .= $chunk }
    my $resp = parse_response($reply);
    is($resp && $resp->{status}, 200, '200 from the broker');
    my $j = eval { decode_json($resp->{body}) } // {};
    is($j->{length}, $N, "the broker read all $N bytes");
    is($j->{sha256}, PulsarBroker::repeat_bytes_sha256($N), '... intact');
};

ok($lk->alive, 'lookout still running');
unlike($lk->log, qr/\[(?:error|crit|alert|emerg)\]/, 'no errors logged');
$lk->stop;
$c->stop;
done_testing();
