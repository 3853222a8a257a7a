#!/usr/bin/perl
# 47-connection-tokens.t: the fields a Connection header nominates (RFC 9110 §7.6.1) are
# removed before a request or response goes on, and a head may nominate at most
# LK_HTTP_MAX_CONNECTION_TOKENS (64) of them, all its Connection fields together (issue 18,
# defect 5). The hostile shape from the issue, 7,000 Connection tokens and 4,000 short
# header lines (about 30 KB, under the default max_header_bytes), is refused with 400
# before anything reaches a broker; a request at the cap still has every nominated field
# removed, and only those. A broker's response over the cap is a 502. What the broker
# received comes from a RawBroker (lib/RawBroker.pm), a strict server that logs every
# request it parses; the response side uses a one-answer server written here. The cost of
# the hostile head (callgrind, before and after) is in bench/results/, not timed here.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(sleep);

use Lookout;
use RawBroker;

my $CAP = 64;
my $dir = tmp_dir();
my $raw = RawBroker->start(dir => $dir, name => 'b1', port => free_port());

# b2 answers every request with one fixed response head naming $n Connection tokens, then
# closes: the response side of the cap.
sub one_answer_server {
    my ($port, $ntok) = @_;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Proto => 'tcp',
                                  Listen => 16, ReuseAddr => 1) or die "listen: $@";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        alarm 120;    # bounded, whatever the test does
        while (my $c = $l->accept) {
            my $head = '';
            while ($head !~ /\r\n\r\n/) { sysread($c, $head, 4096, length $head) or last }
            my ($path) = $head =~ m{^\S+ (\S+)};
            my $n = $path =~ /tokens=(\d+)/ ? $1 : $ntok;
            my $body = "{\"ok\":true}";
            syswrite($c, "HTTP/1.1 200 OK\r\nConnection: " . join(', ', map { "x-hop-$_" } 1 .. $n)
                         . "\r\nX-Hop-1: gone\r\nX-Kept: yes\r\nContent-Type: application/json\r\n"
                         . "Content-Length: " . length($body) . "\r\nConnection: close\r\n\r\n$body");
            close $c;
        }
        POSIX::_exit(0);
    }
    close $l;
    return $pid;
}

my ($s, $b2port) = free_ports(2);
my $b2pid = one_answer_server($b2port, $CAP);
END { kill 'TERM', $b2pid if $b2pid }

my $lk = start_lookout(dir => $dir, conf => <<"EOF");
[lookout]
workers = 1
timeout.client_header = 5s
timeout.response = 5s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = internal:http://${\ $raw->addr },external:http://b1.lookout.test:$s

[broker prod/b2]
advertisedListeners = internal:http://127.0.0.1:$b2port,external:http://b2.lookout.test:$s
EOF
ok($lk->started, 'lookout started') or BAIL_OUT('lookout did not start');

# send(HEAD): one request on its own connection; (the parsed response or undef, the
# requests b1 parsed meanwhile).
sub send_req {
    my ($bytes) = @_;
    my $mark = $raw->mark;
    my $reply = http_raw('127.0.0.1', $s, $bytes, timeout => 10, until => qr/\r\n\r\n.*\}/s);
    $raw->settle(0.2, 3);
    return (parse_response($reply), grep { $_->{ev} eq 'req' } $raw->events_since($mark));
}

sub names_of { return join ',', map { lc $_->[0] } @{ $_[0]{headers} } }

# The issue's shape: 7,000 tokens and 4,000 header lines the tokens all nominate.
{
    my $head = "GET /a HTTP/1.1\r\nHost: b1.lookout.test:$s\r\nConnection: " . join(',', ('a') x 7000)
             . "\r\n" . ("a:\r\n" x 4000) . "\r\n";
    ok(length($head) > 29_000 && length($head) < 32 * 1024, 'the hostile head is about 30 KB, under max_header_bytes (' . length($head) . ' bytes)');
    my ($r, @reqs) = send_req($head);
    ok($r, 'the hostile head gets an answer') or diag('no response');
    lookout_error_ok($r // {}, 400, '7,000 Connection tokens: 400 with a JSON reason');
    like($r && $r->{body}, qr/more than $CAP Connection tokens/, 'the reason names the cap');
    is(scalar @reqs, 0, 'nothing reached the broker');
    like($lk->log, qr/malformed request: more than $CAP Connection tokens/, 'logged with what was wrong');
}

# The cap counts every Connection field of the head together.
{
    my $head = "GET /a HTTP/1.1\r\nHost: b1.lookout.test:$s\r\n";
    for my $f (1 .. 5) { $head .= "Connection: " . join(', ', map { "x-$f-$_" } 1 .. 13) . "\r\n" }
    $head .= "\r\n";
    my ($r, @reqs) = send_req($head);
    lookout_error_ok($r // {}, 400, '65 tokens over five Connection fields: 400');
    is(scalar @reqs, 0, '... nothing reached the broker');
}

# At the cap: forwarded, every nominated field gone (in any case), the others kept. Every
# other nominated field has an X-Keep- twin, so that the head stays within 100 fields
# (LK_HTTP_MAX_FIELDS): 99.
{
    my @tok = map { "X-Hop-$_" } 1 .. $CAP - 1;
    my @keep = grep { $_ % 2 } 1 .. $CAP - 1;
    my $head = "GET /a HTTP/1.1\r\nHost: b1.lookout.test:$s\r\nConnection: keep-alive, "
             . join(', ', map { $_ % 2 ? lc $tok[$_] : $tok[$_] } 0 .. $#tok) . "\r\n"
             . join('', map { "$_: v\r\n" . (/(\d+)$/ && $1 % 2 ? "X-Keep-$_: kept\r\n" : '') } @tok)
             . "x-hop-1: again\r\nX-Other: stays\r\n\r\n";
    is(scalar(() = $head =~ /\r\n(?=[^\r])/g), 99, 'the head holds 99 fields');
    my ($r, @reqs) = send_req($head);
    is($r && $r->{status}, 200, "$CAP tokens: forwarded") or diag($r && $r->{body});
    is(scalar @reqs, 1, '... the broker parsed one request');
    my $names = @reqs ? names_of($reqs[0]) : '';
    unlike($names, qr/(?:^|,)(?:x-hop-\d+|connection|keep-alive)(?:,|$)/, '... without any nominated field')
        or diag($names);
    is(scalar(() = $names =~ /(?:^|,)x-keep-x-hop-\d+(?=,|$)/g), scalar @keep, '... with every field not nominated')
        or diag($names);
    like($names, qr/(?:^|,)x-other(?:,|$)/, '... X-Other kept');
}

# A few tokens: only those go (the coordinator's "a few tokens" case, with Upgrade-like
# and Keep-Alive neighbours).
{
    my $head = "GET /a HTTP/1.1\r\nHost: b1.lookout.test:$s\r\nConnection: X-A,x-b\r\n"
             . "X-A: 1\r\nX-B: 2\r\nX-C: 3\r\nx-a: 4\r\nKeep-Alive: timeout=5\r\n\r\n";
    my ($r, @reqs) = send_req($head);
    is($r && $r->{status}, 200, 'two tokens: forwarded');
    is(@reqs ? names_of($reqs[0]) =~ s/,x-forwarded.*//r : '', 'host,x-c', '... only X-C of the four went on');
}

# The response side: a broker's head over the cap is a 502, at the cap the nominated
# fields are removed.
{
    my $r = parse_response(scalar http_raw('127.0.0.1', $s, "GET /r?tokens=" . ($CAP + 1) . " HTTP/1.1\r\nHost: b2.lookout.test:$s\r\n\r\n",
                                           timeout => 10, until => qr/\r\n\r\n.*\}/s));
    lookout_error_ok($r // {}, 502, 'a response with 66 Connection tokens: 502');
    like($r && $r->{body}, qr/more than $CAP Connection tokens/, '... the reason names the cap');
    # 63 and the server's "Connection: close": 64 in all
    $r = parse_response(scalar http_raw('127.0.0.1', $s, "GET /r?tokens=" . ($CAP - 1) . " HTTP/1.1\r\nHost: b2.lookout.test:$s\r\n\r\n",
                                        timeout => 10, until => qr/\r\n\r\n.*\}/s));
    is($r && $r->{status}, 200, "a response with $CAP tokens in two fields: passed on");
    ok($r && !exists $r->{headers}{'x-hop-1'}, '... without the nominated X-Hop-1');
    is($r && $r->{headers}{'x-kept'}, 'yes', '... with X-Kept');
}

ok($lk->alive, 'lookout is still running');
done_testing();
