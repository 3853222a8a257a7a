#!/usr/bin/perl
# 147-http-bounds.t: what lookout holds for one HTTP connection stays bounded whatever the
# client or the broker sends (CONTRACT §6: "bounded by a small constant plus a per-worker
# budget"; "no input, however hostile, ... affects other clients").
#  - A client that pipelines thousands of requests and reads none of the answers: lookout
#    stops reading it once its output passes the high-water mark, so its answers do not
#    pile up in memory (VmRSS, and how much of the requests lookout took, stay small);
#    another client is served meanwhile; once the client reads, every request is answered,
#    in order. Two shapes: 421s lookout makes itself, and proxied answers that come whole
#    in one read from the broker. The 421s over TLS too, to a second lookout that
#    terminates TLS on an https bind (its own VmRSS, not the first one's to reuse).
#  - A broker that sends interim (1xx) responses without end: past 8, 502 (each is parsed
#    into the exchange's memory); 8 still pass to the client.
#  - A response whose transfer coding is not chunked alone ("gzip, chunked", gzip): 502,
#    never the coded bytes passed on as if plain with Transfer-Encoding dropped.
#  - A head of more than 100 fields: 431 for a request (a 32 KB head of 8,000 "a:" lines held
#    684 KiB a connection), 502 for a broker's response.
#  - A 1xx, 204 or 304 whose Content-Length or Transfer-Encoding announces a body: none is
#    read, so a 100 cannot carry a response into the client's stream, nor a 204 or 304
#    hold the connection until timeout.idle.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Errno qw(EAGAIN EWOULDBLOCK EINTR);
use IO::Select;
use IO::Socket::INET;
use Socket qw(SOL_SOCKET SO_RCVBUF inet_aton pack_sockaddr_in);
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use PulsarBroker;

plan skip_all => 'needs /proc' unless -r "/proc/$$/status";
need_modules('IO::Socket::SSL');
require IO::Socket::SSL;

my $certs = test_certs();
my $dir = tmp_dir();
my ($p1, $p3, $s, $t) = free_ports(4);
my $c = PulsarBroker->start(dir => "$dir/brokers", brokers => [ "127.0.0.1:$p1" ]);

# A fast broker for b3: every request for /n=N gets 200 with a body of N bytes, head and
# body in one write, so that lookout reads each answer whole in one read (the fake
# brokers of PulsarBroker.pm are too slow to outrun a proxy that buffers without bound).
# /interim=K sends K interim responses first; /te=CODINGS answers with that
# Transfer-Encoding; /raw=NAME sends $raw{NAME} as it is.
#
# A 1xx, 204 or 304 response has no body, whatever Content-Length or Transfer-Encoding
# say (RFC 9112 §6.3). 100cl: a 100 whose Content-Length covers a whole response (98
# bytes), then a real one: the 98 bytes are the final response, never the tail of the
# real one's body. 100te: a 100 with Transfer-Encoding: gzip is not read to the close.
# 204cl, 304cl: a Content-Length of 1234 and no body: the next request is answered.
my $inner = "HTTP/1.1 200 OK\r\nContent-Length: 59\r\n\r\n"
          . "internal address 10.0.0.99:8080 sent as the body of a 100!!";
my %raw = (
    '100cl' => "HTTP/1.1 100 Continue\r\nContent-Length: " . length($inner) . "\r\n\r\n$inner"
             . "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    '100te' => "HTTP/1.1 100 Continue\r\nTransfer-Encoding: gzip\r\n\r\n"
             . "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    '204cl' => "HTTP/1.1 204 No Content\r\nContent-Length: 1234\r\n\r\n",
    '304cl' => "HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nETag: \"e\"\r\n\r\n",
    # a head of 100 fields (the most lookout takes), and of 101
    'fields100' => "HTTP/1.1 200 OK\r\n" . ("a: 1\r\n" x 99) . "Content-Length: 2\r\n\r\nok",
    'fields101' => "HTTP/1.1 200 OK\r\n" . ("a: 1\r\n" x 100) . "Content-Length: 2\r\n\r\nok",
);
sub fast_broker {
    my ($port) = @_;
    return scripted_http_broker($port, sub {
        my ($cx, $line) = @_;
        if ($line =~ m{^GET /interim=(\d+) }) {
            # that many 100s (endless, near enough, for a big number), then 200
            for (1 .. $1) { syswrite($cx, "HTTP/1.1 100 Continue\r\n\r\n") or return 0 }
            syswrite($cx, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone");
            return 1;
        }
        if ($line =~ m{^GET /raw=(\w+) }) {
            # a bodiless status whose fields announce a body (%raw above)
            syswrite($cx, $raw{$1} // "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            return 1;
        }
        if ($line =~ m{^GET /te=([\w-]+) }) {
            # Transfer-Encoding: the codings, '-' for ', '; chunked last: a
            # chunked body, else one to the close
            (my $te = $1) =~ s/-/, /g;
            my $body = $te =~ /chunked$/ ? "5\r\nhello\r\n0\r\n\r\n" : 'hello';
            syswrite($cx, "HTTP/1.1 200 OK\r\nTransfer-Encoding: $te\r\n\r\n$body");
            return $te =~ /chunked$/;
        }
        my $n = $line =~ m{^GET /n=(\d+) } ? $1 : 0;
        my $out = "HTTP/1.1 200 OK\r\nContent-Length: $n\r\n\r\n" . ('x' x $n);
        while (length $out) { my $w = syswrite($cx, $out) or return 0; substr($out, 0, $w, '') }
        return 1;
    });
}

my $fast = fast_broker($p3);
END { kill 'TERM', $fast if $fast }

# b1 (the fake broker) and b3 (fast_broker) share one plaintext socket, told apart by
# Host: any other Host gets 421.
# A lookout in front of b1 and b3 on one socket (port $port, external scheme $scheme),
# told apart by Host (and SNI with TLS); extra: more [lookout] keys.
sub bounds_conf {
    my ($scheme, $port, $extra) = @_;
    return <<"EOF";
[lookout]
workers = 1
timeout.response = 10s
timeout.idle = 30s
log.buffer = 0
$extra
[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = internal:http://127.0.0.1:$p1,external:$scheme://b1.lookout.test:$port

[broker prod/b3]
advertisedListeners = internal:http://127.0.0.1:$p3,external:$scheme://b3.lookout.test:$port
EOF
}

my $lk = start_lookout(dir => $dir, conf => bounds_conf('http', $s, ''));
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');
my $pid = $lk->pid;

# The same brokers on one https socket, told apart by SNI then Host, in a lookout of its
# own: its VmRSS is not what the plaintext subtests' answers left for it to reuse.
mkdir "$dir/tls" or die "mkdir: $!";
my $lkt = start_lookout(dir => "$dir/tls",
                        conf => bounds_conf('https', $t, "tls.certificate = $certs->{edge_crt}\ntls.key = $certs->{edge_key}\n"));
ok($lkt->started, 'lookout (TLS) started') or BAIL_OUT('lookout (TLS) did not start');
my $H1 = "Host: b1.lookout.test:$s";
my $H3 = "Host: b3.lookout.test:$s";

# pipeline(REQS, PAUSE, LIMIT_KB[, tls => SNI]): one connection sends the requests of
# REQS (a list of [bytes, expected status, expected Content-Length or undef]) as fast as
# lookout takes them and reads nothing for PAUSE seconds; meanwhile another client must be
# served. Then it reads every answer. Checks the growth of lookout's VmRSS in the pause
# (under LIMIT_KB), that lookout stopped answering (its access log), and that the answers
# match REQS in order. With tls, the connection is TLS to the https socket of the TLS
# lookout, with that SNI.
sub pipeline {
    my ($name, $reqs, $pause, $limit_kb, %o) = @_;
    my ($L, $P) = $o{tls} ? ($lkt, $lkt->pid) : ($lk, $pid);
    my $all = join '', map { $_->[0] } @$reqs;
    my $base = rss_kb($P);
    # A small receive buffer, set before the handshake (the window scale follows it): the
    # kernel holds less of lookout's answers, so lookout's own memory shows them.
    my $sock = IO::Socket::INET->new(Proto => 'tcp') or return fail("$name: socket: $!");
    setsockopt($sock, SOL_SOCKET, SO_RCVBUF, 8192);
    $sock->connect(pack_sockaddr_in($o{tls} ? $t : $s, inet_aton('127.0.0.1'))) or return fail("$name: connect: $!");
    if ($o{tls}) {
        IO::Socket::SSL->start_SSL($sock, SSL_hostname => $o{tls}, SSL_ca_file => $certs->{edge_ca},
                                   SSL_verifycn_name => $o{tls}, Timeout => 10)
            or return fail("$name: TLS handshake: " . IO::Socket::SSL::errstr());
    }
    $sock->blocking(0);
    local $SIG{PIPE} = 'IGNORE';
    my $sent = 0;
    my $peak = 0;
    my $sel = IO::Select->new($sock);
    my $port = $sock->sockport;
    my $answered = sub { my $n = () = ($L->log // '') =~ /^\S+ \[info\] 127\.0\.0\.1:$port > /mg; $n };
    # PAUSE seconds at least, then on while lookout still answers (a sanitizer build
    # takes longer to fill the kernel's buffers), for 30 s at most.
    my ($t0, $mark, $mark_t, $done) = (time, -1, time);
    while (time < $t0 + 30) {
        if (time >= $mark_t + 1) {
            $done = $answered->();
            last if $done == $mark && time >= $t0 + $pause;
            ($mark, $mark_t) = ($done, time);
        }
        if ($sent < length $all && $sel->can_write(0.05)) {
            my $n = syswrite($sock, $all, 65536, $sent);
            $sent += $n if $n;
        } else {
            sleep 0.05;
        }
        my $v = rss_kb($P) // 0;
        $peak = $v if $v > $peak;
    }
    my $grew = $peak - $base;
    SKIP: {
        # as 54-parking.t: ASan keeps freed memory (its quarantine), so each exchange's
        # pool shows; the access-log check below holds for any build
        skip "$name: ASan keeps freed memory (quarantine): VmRSS grew by $grew kB, not measured", 1
            if $ENV{LOOKOUT_SANITIZED};
        cmp_ok($grew, '<', $limit_kb, sprintf("$name: the client read nothing for %.1fs: VmRSS grew by $grew kB"
                                              . " (limit $limit_kb kB)", time - $t0));
    }
    # The access log: lookout answered none of them for a second, with some left.
    ok($done == $mark && $done < @$reqs, "$name: lookout stopped answering, at $done of " . @$reqs . " requests");
    my $other = $o{tls}
        ? curl('--cacert', $certs->{edge_ca}, '--resolve', "b1.lookout.test:$t:127.0.0.1", "https://b1.lookout.test:$t/test/headers")
        : curl('-H', $H1, "http://127.0.0.1:$s/test/headers");
    is($other->{status}, 200, "$name: another client is served meanwhile");

    # Now read everything, sending the rest as lookout takes it.
    my ($buf, @got) = ('');
    my $want = @$reqs;
    my $end = time + 120;
    while (@got < $want && time < $end) {
        # (TLS: bytes already decrypted but not yet read show to no select)
        my ($r, $w) = $o{tls} && $sock->pending ? ([ $sock ], [])
                    : IO::Select->select($sel, $sent < length $all ? $sel : undef, undef, 1);
        if ($w && @$w) {
            my $n = syswrite($sock, $all, 262144, $sent);
            $sent += $n if $n;
        }
        next unless $r && @$r;
        my $n = sysread($sock, $buf, 262144, length $buf);
        next if !defined $n && ($! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR);
        last unless $n;
        while ($buf =~ /\A(HTTP\/1\.1 (\d{3})[^\r]*\r\n(.*?)\r\n\r\n)/s) {
            my ($hlen, $st, $fields) = (length $1, $2, $3);
            my $cl = $fields =~ /^Content-Length:\s*(\d+)/mi ? $1 : 0;
            last if length($buf) < $hlen + $cl;
            push @got, [ $st, $cl ];
            substr($buf, 0, $hlen + $cl, '');
        }
    }
    close $sock;
    is(scalar @got, $want, "$name: every request was answered");
    my @bad = grep { !$got[$_] || $got[$_][0] != $reqs->[$_][1]
                     || (defined $reqs->[$_][2] && $got[$_][1] != $reqs->[$_][2]) } 0 .. $#$reqs;
    ok(!@bad, "$name: ... in order") or diag("first wrong answer: #$bad[0], got "
        . ($got[$bad[0]] ? "$got[$bad[0]][0] length $got[$bad[0]][1]" : 'none') . ", want $reqs->[$bad[0]][1]");
}

# Warm up (the allocator's arenas, the upstream pool) before any baseline.
my $warm = join '', map { "GET /n=" . (16384 + $_) . " HTTP/1.1\r\n$H3\r\n\r\n" } 1 .. 200;
my $got = http_raw('127.0.0.1', $s, $warm . "GET http://nomatch/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                   timeout => 30);
like($got, qr/421 [^\n]*\r\n(?:.*\r\n)*Connection: close\r\n/, 'warm-up: 200 pipelined requests answered');

subtest 'pipelined 421s that the client does not read' => sub {
    # 421s lookout makes at once, then three proxied answers whose length is their number
    # (the order). Unbounded, the 421s alone would be ~17 MiB.
    my @reqs = map { [ "GET http://nomatch/ HTTP/1.1\r\nHost: x\r\n\r\n", 421, undef ] } 1 .. 100_000;
    push @reqs, map { [ "GET /n=$_ HTTP/1.1\r\n$H3\r\n\r\n", 200, $_ ] } 1001 .. 1003;
    pipeline('421s', \@reqs, 5, 8 * 1024);
};

subtest 'pipelined 421s over TLS that the client does not read' => sub {
    # The same over TLS: SNI b3, so the requests for b3 are proxied; "Host: x" is not
    # b3's (nor anyone's) name: 421.
    my @reqs = map { [ "GET http://nomatch/ HTTP/1.1\r\nHost: x\r\n\r\n", 421, undef ] } 1 .. 100_000;
    push @reqs, map { [ "GET /n=$_ HTTP/1.1\r\nHost: b3.lookout.test:$t\r\n\r\n", 200, $_ ] } 1001 .. 1003;
    pipeline('TLS 421s', \@reqs, 3, 8 * 1024, tls => 'b3.lookout.test');
};

subtest 'pipelined proxied answers that the client does not read' => sub {
    # Each answer (16 KiB and up, its length its number) comes whole in one read from
    # the broker, so the broker read's own brake never acts. Unbounded: ~50 MiB.
    my @reqs = map { [ "GET /n=" . (16384 + $_) . " HTTP/1.1\r\n$H3\r\n\r\n", 200, 16384 + $_ ] } 1 .. 3000;
    pipeline('proxied', \@reqs, 5, 16 * 1024);
};

sub get3 {
    my ($path) = @_;
    my $raw = http_raw('127.0.0.1', $s, "GET $path HTTP/1.1\r\n$H3\r\nConnection: close\r\n\r\n",
                       timeout => 10);
    # (parse_response skips 1xx one at a time: not over megabytes of them)
    return ($raw, length $raw < 1 << 20 ? parse_response($raw) // {} : { head => 'over 1 MiB of answer' });
}

subtest 'interim responses: a few pass, an endless stream gets 502' => sub {
    my ($raw, $r) = get3('/interim=8');
    my $n = () = $raw =~ m{^HTTP/1\.1 100 }mg;
    is($n, 8, '8 interim responses reach the client');
    is($r->{status}, 200, '... then the final one');
    is($r->{body}, 'done', '... whole');
    for my $k (9, 1_000_000) {
        my $from = length($lk->log // '');
        ($raw, $r) = get3("/interim=$k");
        lookout_error_ok($r, 502, "$k interim responses: 502");
        like($r->{body} // '', qr/more than 8 interim/, '... saying why');
        unlike($r->{body} // '', qr{prod/b3}, '... naming no broker');
        like(Lookout::log_since($lk, $from), qr/\[warn\] broker prod\/b3 sent more than 8 interim \(1xx\) responses.*client: /,
             '... logged with the client');
    }
    is(curl('-H', $H1, "http://127.0.0.1:$s/test/headers")->{status}, 200, 'other clients are served');
};

subtest 'a response transfer coding other than chunked alone gets 502' => sub {
    my ($raw, $r) = get3('/te=chunked');
    is($r->{status}, 200, 'chunked: 200');
    is($r->{body}, 'hello', '... with its body');
    for my $te ('gzip-chunked', 'gzip', 'identity-chunked') {
        (my $shown = $te) =~ s/-/, /g;
        my $from = length($lk->log // '');
        ($raw, $r) = get3("/te=$te");
        lookout_error_ok($r, 502, "Transfer-Encoding: $shown: 502");
        unlike($raw, qr/hello/, '... and not the coded body');
        like($r->{body} // '', qr/transfer coding other than chunked alone/, '... saying why');
        unlike($r->{body} // '', qr{prod/b3}, '... naming no broker');
        like(Lookout::log_since($lk, $from), qr/\[warn\] broker prod\/b3 answered with a transfer coding other than chunked alone \(Transfer-Encoding: \Q$shown\E\)/,
             '... logged');
    }
};

subtest 'a 1xx, 204 or 304 has no body, whatever its fields announce' => sub {
    is(length $inner, 98, 'the response hidden in the 100 is 98 bytes');
    my ($raw, $r) = get3('/raw=100cl');
    like($raw, qr{\AHTTP/1\.1 100 Continue\r\n}, '100 with Content-Length: 98: the 100 passes');
    is($r->{status}, 200, '... then the 98 bytes are the final response');
    is($r->{body}, substr($inner, -59), '... whose body the client gets');
    is($r->{rest}, '', '... and nothing after it');
    unlike($raw, qr/ok\z/, '... not the real 200 with the 98 bytes after its body');
    ($raw, $r) = get3('/raw=100te');
    is($r->{status}, 200, '100 with Transfer-Encoding: gzip: the client gets the final response');
    is($r->{body}, 'ok', '... whole');
    is($r->{rest}, '', '... and nothing after it');
    for my $st (204, 304) {
        my $from = length($lk->log // '');
        my $t0 = time;
        ($raw, my $how) = http_raw('127.0.0.1', $s,
                                   "GET /raw=${st}cl HTTP/1.1\r\n$H3\r\n\r\n"
                                 . "GET /n=3 HTTP/1.1\r\n$H3\r\nConnection: close\r\n\r\n",
                                   timeout => 8);
        $r = parse_response($raw) // {};
        is($r->{status}, $st, "$st with Content-Length: 1234: $st");
        is($r->{body}, '', '... with no body');
        my $next = parse_response($r->{rest} // '') // {};
        is($next->{status}, 200, '... and the next request on the connection is answered');
        is($next->{body}, 'xxx', '... whole');
        is($how, 'eof', '... and the connection closes as that one asked');
        ok(time - $t0 < 5, '... at once, not at timeout.idle (' . sprintf('%.1f', time - $t0) . ' s)');
        my $log = Lookout::log_since($lk, $from);
        if ($st == 204) {
            like($log, qr{\[warn\] broker prod/b3 sent a 204 with a body's framing .*not reused.*client: },
                 '... logged: the broker connection is not reused (the body may still come)');
        } else {
            unlike($log, qr/body's framing/, '... a 304 may say so (RFC 9110 §8.6): nothing logged');
        }
    }
};

subtest 'a head of more than 100 fields: 431 (request), 502 (response)' => sub {
    # a keep-alive connection opened before, used after
    my $other = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $s, Proto => 'tcp',
                                      Timeout => 5) or die "connect: $@";
    my $fields = sub { "GET /n=2 HTTP/1.1\r\n$H3\r\n" . ("a:\r\n" x $_[0]) };
    my ($raw, $how) = http_raw('127.0.0.1', $s, $fields->(98) . "Connection: close\r\n\r\n");
    is((parse_response($raw) // {})->{status}, 200, '100 fields: forwarded');
    for my $n (102, 8000) {
        my $from = length($lk->log // '');
        # unfinished, as an attacker holding it for timeout.client_header would send it (a
        # field is complete once the next line begins: 101 of the 102 are)
        ($raw, $how) = http_raw('127.0.0.1', $s, $fields->($n - 1), timeout => 5);
        ok($n < 8000 || length($fields->($n - 1)) < 32 * 1024, "$n fields, under max_header_bytes");
        my $r = parse_response($raw) // {};
        lookout_error_ok($r, 431, "$n fields: 431");
        like($r->{body} // '', qr/too many request header fields/, '... saying why');
        is($how, 'eof', '... and the connection closed');
        like(Lookout::log_since($lk, $from), qr/\[info\] request head of more than 100 header fields.*client: 127\.0\.0\.1/,
             '... logged with the client');
    }
    my $from = length($lk->log // '');
    my ($raw3, $r) = get3('/raw=fields100');
    is($r->{status}, 200, "a broker's response of 100 fields: passed on");
    ($raw3, $r) = get3('/raw=fields101');
    lookout_error_ok($r, 502, '... of 101: 502');
    unlike($r->{body} // '', qr{prod/b3}, '... naming no broker');
    like(Lookout::log_since($lk, $from), qr{\[warn\] broker prod/b3 sent a response head of more than 100 header fields.*client: },
         '... logged with the broker and the client');
    syswrite($other, "GET /n=3 HTTP/1.1\r\n$H3\r\nConnection: close\r\n\r\n");
    my $got = '';
    while (IO::Select->new($other)->can_read(5)) { sysread($other, $got, 4096, length $got) or last }
    is((parse_response($got) // {})->{body}, 'xxx', 'a connection opened before is served after');
};

ok($lk->alive, 'lookout still running');
ok($lkt->alive, 'lookout (TLS) still running');
$lk->stop;
$lkt->stop;
$c->stop;
done_testing();
