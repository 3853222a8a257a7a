#!/usr/bin/perl
# 143-proxy-protocol-kafka.t: the PROXY protocol on a binary listener. A plaintext listener
# reads the header with whatever follows it and hands those bytes to the protocol module,
# so a Kafka request in the same segment as the header must arrive whole and be answered.
#  - raw bytes from the trusted address: a v2 header and an ApiVersions v0 request in one
#    write, then a v1 header split mid-line with two pipelined requests after it; each
#    answered, in order, with its own correlation id;
#  - an untrusted client's request in two writes, the first shorter than a signature:
#    answered, its bytes handed on;
#  - kcat through HAProxy (send-proxy-v2 from the trusted address) to the bootstrap
#    listener, then straight to the brokers' listeners from an untrusted address: it lists
#    the cluster and round-trips messages.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use KafkaMock;

plan skip_all => KafkaMock::missing() if KafkaMock::missing();
need_tools('haproxy', 'kcat');

my $dir = tmp_dir();
my $TOPIC = 'lk-pp';
my $m = KafkaMock->start(brokers => 3, topics => ["$TOPIC:1"], dir => $dir);
my @ext = map { free_port() } 1 .. 3;
my ($boot, $hp) = free_ports(2);
my $conf = KafkaMock::lookout_conf(nodes => $m->behind(@ext), boot => $boot,
                                   lookout => "proxy_protocol.trusted = 127.0.0.2/32\n");
$conf =~ s/^\[kafka k\]\n/[kafka k]\nproxy_protocol = any\n/m or die 'no [kafka k] section';
my $lk = start_lookout(dir => $dir, conf => $conf);
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start: ' . ($lk->log // ''));

start_haproxy_tcp($dir, <<"EOF");
frontend boot
    bind 127.0.0.1:$hp
    default_backend lk
backend lk
    server lk 127.0.0.1:$boot send-proxy-v2 source 127.0.0.2
EOF
ok(wait_port('127.0.0.1', $hp), 'haproxy listens') or diag(slurp("$dir/haproxy.out"));

sub v2 { return pp_v2_header($_[0], 9092) }
# ApiVersions v0 (api key 18), request header v1: a frame of its own.
sub api_versions {
    my ($corr) = @_;
    my $body = pack('nnN', 18, 0, $corr) . pack('n/a*', 'pp-test');
    return pack('N', length $body) . $body;
}

# exchange(FROM, PORT, [BYTES, ...], N): sends each string 0.2 s apart, reads N response
# frames; returns [correlation id, error code] of each (undef where none came).
sub exchange {
    my ($from, $port, $parts, $n) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, LocalAddr => $from, Timeout => 5)
        or return [];
    my @parts = @$parts;
    while (@parts) {
        syswrite $s, shift @parts;
        sleep 0.2 if @parts;
    }
    my ($buf, $end, @got) = ('', time + 5);
    while (@got < $n && time < $end) {
        while (length($buf) >= 4 && length($buf) >= 4 + unpack('N', $buf)) {
            my $len = unpack('N', $buf);
            my ($corr, $err) = unpack('Nn', substr($buf, 4, 6));
            push @got, [ $corr, $err ];
            substr($buf, 0, 4 + $len) = '';
        }
        last if @got >= $n;
        last unless IO::Select->new($s)->can_read($end - time);
        sysread($s, my $b, 65536) or last;
        $buf .= $b;
    }
    close $s;
    return \@got;
}

is_deeply(exchange('127.0.0.2', $boot, [ v2('192.0.2.20') . api_versions(7001) ], 1), [ [ 7001, 0 ] ],
          'v2 header and ApiVersions in one write: answered, error 0');
is_deeply(exchange('127.0.0.2', $ext[0],
                   [ "PROXY TCP4 192.0.2.21 127.0.0.1 5 6\r", "\n" . api_versions(7002) . api_versions(7003) ], 2),
          [ [ 7002, 0 ], [ 7003, 0 ] ], 'v1 header split before its LF, two requests after it: both answered, in order');
is_deeply(exchange('127.0.0.1', $ext[1], [ substr(api_versions(7004), 0, 3), substr(api_versions(7004), 3) ], 1),
          [ [ 7004, 0 ] ], 'an untrusted client without a header, its request in two writes: answered');

my $md = KafkaMock::run([ 'kcat', '-L', '-b', "127.0.0.1:$hp", '-m', '10' ], timeout => 30);
is($md->{exit}, 0, 'kcat -L through HAProxy (PROXY v2 from the trusted address): exits 0') or diag($md->{err});
like($md->{out}, qr/3 brokers:/, '... lists the three brokers');
like($md->{out}, qr/\Q127.0.0.1:$ext[$_]\E/, "... at lookout's listener $ext[$_]") for 0 .. 2;
my @msgs = map { "pp message $_" } 1 .. 200;
my $p = KafkaMock::run([ 'kcat', '-P', '-b', "127.0.0.1:$hp", '-t', $TOPIC, '-p', '0' ], in => join("\n", @msgs) . "\n",
                       timeout => 60);
is($p->{exit}, 0, 'kcat -P: exits 0') or diag($p->{err});
my $c = KafkaMock::run([ 'kcat', '-C', '-b', "127.0.0.1:$hp", '-t', $TOPIC, '-p', '0', '-o', 'beginning', '-e', '-q' ],
                       timeout => 60);
is_deeply([ split /\n/, $c->{out} ], \@msgs, '... 200 messages back, the same, in order') or diag($c->{err});
ok($lk->alive, 'lookout still runs');
unlike($lk->log, qr/bad PROXY protocol header/, 'no PROXY header refused') or diag($lk->log);

$lk->stop;
done_testing();
