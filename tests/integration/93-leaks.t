#!/usr/bin/perl
# 93-leaks.t: no internal address ever reaches a client (issue 3 items 4-5). Through
# lookout in front of three fake brokers, `curl -L` and Python's urllib complete every
# admin and lookup call the fake supports (lookups of owned and unowned topics, /topic and
# /destination, bundles, topic stats, subscriptions create/list/delete, compaction,
# partitions, last message id, brokers list, leader, clusters, and the 404/500/503 error
# shapes), through each broker's lookup address and the service address,
#   - with redirects = rewrite and leak_guard = rewrite (the clients follow the 307s),
#   - with redirects = follow and leak_guard = rewrite (lookout follows them),
# and EVERYTHING the client received is scanned (curl's wire trace: every header of every
# response, intermediate 307s included, and every body; urllib: every response of every
# redirect chain) for every internal listener host:port of the map and for the internal
# hosts themselves (b1's is the name "localhost", b2's and b3's are IP literals): there
# must be none. Then leak_guard = block (the brokers list gets a
# 502 with a reason) and leak_guard = log (body unchanged, a leak warning in the log).
#
# The fake broker leaks the way real ones do: LookupData URLs and the 5.0 brokerId, admin
# 307 Locations, stats' ownerBroker, /admin/v2/brokers' host:port list, leaderBroker's
# serviceUrl, and a 500 text/plain stack trace that names the broker.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP qw(decode_json encode_json);
use Test::More;
use Time::HiRes qw(time);

use Lookout;
use PulsarBroker;
use E2E;

my $dir = tmp_dir();
# b1's internal host is the name "localhost" (b2, b3: IP literals): names leak too.
my $e = E2E->new(dir => $dir, own => { t1 => 1, t2 => 2, t3 => 3 }, version => 5, b1_localhost => 1);
my $c = $e->cluster;
my $L = $e->L;
my $have_python = !system('sh', '-c', 'command -v python3 >/dev/null 2>&1');

my %lk;
$lk{rewrite} = $e->start_lookout(name => 'rewrite', cluster => "redirects = rewrite\nleak_guard = rewrite\n");
$lk{follow} = $e->start_lookout(name => 'follow', ext => $e->new_external,
                                cluster => "redirects = follow\nleak_guard = rewrite\n");
$lk{block} = $e->start_lookout(name => 'block', ext => $e->new_external, cluster => "leak_guard = block\n");
$lk{log} = $e->start_lookout(name => 'log', ext => $e->new_external, cluster => "leak_guard = log\n");
for my $m (sort keys %lk) {
    ok($lk{$m}->started, "lookout ($m) started") or BAIL_OUT("lookout $m did not start: " . ($lk{$m}->log // ''));
}

my $LK = '/lookup/v2/topic/persistent/public/default';
my $DST = '/lookup/v2/destination/persistent/pr/cl/ns';
my $ADM = '/admin/v2/persistent/public/default';
my $payload = '{"leak-test":"' . ('payload ' x 500) . '"}';
spew("$dir/payload", $payload);

# Every call: [method, path, final status a following client must end with, body?].
my @CALLS = (
    [ GET => "$LK/t1", 200 ], [ GET => "$LK/t2", 200 ], [ GET => "$LK/t3", 200 ],
    [ GET => "$DST/t2", 200 ], [ GET => "$LK/t3?listenerName=vpn", 200 ],
    [ GET => "$LK/u1", 200 ], [ GET => "$DST/u2?x=1", 200 ], [ GET => "$LK/t1/bundle", 200 ],
    [ GET => "$LK/missing-a", 404 ], [ GET => "$LK/boom-a", 500 ], [ GET => "$LK/busy-a", 503 ],
    [ GET => "$ADM/t1/stats", 200 ], [ GET => "$ADM/t2/stats?a=1", 200 ], [ GET => "$ADM/t3/stats", 200 ],
    [ GET => "$ADM/t2/internalStats", 200 ], [ GET => "$ADM/t3/subscriptions", 200 ],
    [ PUT => "$ADM/t2/subscription/leak-sub", 200, 1 ], [ DELETE => "$ADM/t2/subscription/leak-sub", 204 ],
    [ POST => "$ADM/t3/compaction", 200, 1 ], [ GET => "$ADM/t1/lastMessageId", 200 ],
    [ GET => "$ADM/t2/partitions", 200 ], [ PUT => "$ADM/t2/partitions", 204, 1 ],
    [ GET => "$ADM/u9/stats", 200 ],
    [ GET => '/admin/v2/brokers/standalone', 200 ], [ GET => '/admin/v2/brokers', 200 ],
    [ GET => '/admin/v2/brokers/leaderBroker', 200 ], [ GET => '/admin/v2/clusters', 200 ],
    [ GET => "$ADM/missing-b/stats", 404 ], [ GET => "$ADM/boom-b/stats", 500 ], [ GET => "$ADM/busy-b/stats", 503 ],
    [ GET => '/admin/v2/nothing/here', 404 ],
);

sub entries {
    my ($lk) = @_;
    return ((map { [ "b$_", $lk->{e2e_ext}{$_}{http} ] } 1 .. 3), [ 'service', $lk->{e2e_service} ]);
}

sub leak_text {
    my ($hits) = @_;
    return join ', ', map { "$_ x$hits->{$_}" } sort keys %$hits;
}

# What is around each internal address in TEXT, for the diagnosis.
sub leak_context {
    my ($text) = @_;
    my @ctx;
    for my $hp ($e->internal_hostports, $e->internal_hosts) {
        while ($text =~ /\Q$hp\E(?!\d)/gi) {
            my $s = $-[0] > 80 ? $-[0] - 80 : 0;
            (my $x = substr($text, $s, 160)) =~ s/[^\x20-\x7e]/./g;
            push @ctx, $x;
            last if @ctx > 8;
        }
    }
    my %u;
    return join "\n", grep { !$u{$_}++ } @ctx;
}

# The bytes of a curl --trace file, both directions, plus its Info lines.
sub trace_bytes {
    my ($file) = @_;
    my $out = '';
    for my $line (split /\n/, slurp($file) // '') {
        if ($line =~ /^== Info: (.*)/) { $out .= "$1\n" }
        elsif ($line =~ /^[0-9a-f]{4,}: (.{0,48})/) { $out .= pack 'H*', join '', $1 =~ /\b([0-9a-f]{2})\b/g }
        elsif ($line =~ /^(?:<=|=>) /) { $out .= "\n" }
    }
    return $out;
}

# All calls through one entry with one curl process (--next between calls, -L each).
# Returns ([ { status, statuses, head, body } per call ], trace bytes, curl exit).
sub curl_run {
    my ($tag, $base, $calls, @extra) = @_;
    my @CALLS = @{ $calls // \@CALLS };
    my $d = "$dir/curl-$tag";
    mkdir $d;
    my @argv = ('curl', '-q', '--trace', "$d/trace");
    for my $i (0 .. $#CALLS) {
        my ($m, $path, undef, $body) = @{ $CALLS[$i] };
        push @argv, '--next' if $i;
        push @argv, '-sS', '-L', '--globoff', '--noproxy', '*', '--max-time', '10', '-D', "$d/h$i", '-o', "$d/b$i", @extra;
        push @argv, '-X', $m unless $m eq 'GET';
        push @argv, '-H', 'Expect:', '-H', 'Content-Type: application/json', '--data-binary', "\@$dir/payload" if $body;
        push @argv, "$base$path";
    }
    my $rc = system('timeout', '60', @argv) >> 8;
    my @res;
    for my $i (0 .. $#CALLS) {
        my $heads = slurp("$d/h$i") // '';
        my @st = $heads =~ /^HTTP\/[\d.]+ (\d{3})/mg;
        push @res, { status => $st[-1] // 0, statuses => \@st, head => $heads, body => slurp("$d/b$i") // '' };
    }
    return (\@res, trace_bytes("$d/trace"), $rc);
}

# urllib: all calls (GET only unless ALL), every response of every chain recorded.
my $PY = <<'PY';
import io, json, sys, urllib.request, urllib.error
calls = json.load(open(sys.argv[1]))
out = []
class Rec(urllib.request.HTTPRedirectHandler):
    def __init__(self):
        self.chain = []
    def _rec(self, req, fp, code, msg, headers):
        body = fp.read()
        self.chain.append({"status": code, "headers": list(headers.items()), "body": body.decode("latin-1")})
        return super().http_error_302(req, io.BytesIO(b""), code, msg, headers)
    http_error_301 = http_error_302 = http_error_303 = http_error_307 = http_error_308 = _rec
for c in calls:
    rec = Rec()
    opener = urllib.request.build_opener(rec)
    data = c["body"].encode() if c.get("body") else None
    req = urllib.request.Request(c["url"], data=data, method=c["method"])
    if data:
        req.add_header("Content-Type", "application/json")
    r = {"url": c["url"], "method": c["method"]}
    try:
        resp = opener.open(req, timeout=10)
        final = {"status": resp.status, "headers": list(resp.headers.items()), "body": resp.read().decode("latin-1")}
    except urllib.error.HTTPError as e:
        final = {"status": e.code, "headers": list(e.headers.items()), "body": e.read().decode("latin-1")}
    except Exception as e:
        final = {"status": 0, "headers": [], "body": "", "error": repr(e)}
    r["chain"] = rec.chain + [final]
    r["status"] = final["status"]
    out.append(r)
print(json.dumps(out))
PY
spew("$dir/client.py", $PY);

sub urllib_run {
    my ($lk, $all) = @_;
    my @calls;
    # b1 (a 307 for every topic it does not own) and the service address (any broker).
    for my $en (grep { $_->[0] =~ /^(?:b1|service)$/ } entries($lk)) {
        for my $cl (@CALLS) {
            next unless $all || $cl->[0] eq 'GET';
            push @calls, { method => $cl->[0], url => "$en->[1]$cl->[1]", want => $cl->[2], entry => $en->[0],
                           ($cl->[3] ? (body => $payload) : ()) };
        }
    }
    spew("$dir/calls.json", encode_json(\@calls));
    my $out = qx{timeout 60 python3 $dir/client.py $dir/calls.json 2>&1};
    my $res = eval { decode_json($out) };
    return (\@calls, $res, $out);
}

sub complete_and_clean {
    my ($mode) = @_;
    my $lk = $lk{$mode};
    subtest "$mode mode: curl -L completes every call, sees no internal address" => sub {
        for my $en (entries($lk)) {
            my ($name, $base) = @$en;
            my $t0 = time;
            my ($res, $trace, $rc) = curl_run("$mode-$name", $base);
            my @bad = grep { $res->[$_]{status} != $CALLS[$_][2] } 0 .. $#CALLS;
            ok(!@bad, "via $name: every call ends with its status (" . scalar(@CALLS) . ' calls)')
                or diag(join "\n", map { "$CALLS[$_][0] $CALLS[$_][1]: got " . join('>', @{ $res->[$_]{statuses} })
                                         . ", want $CALLS[$_][2]\n" . $res->[$_]{head} } @bad);
            if ($mode eq 'follow') {
                my @r3 = grep { grep { $_ >= 300 && $_ < 400 } @{ $res->[$_]{statuses} } } 0 .. $#CALLS;
                ok(!@r3, "via $name: no 3xx reached the client")
                    or diag(join "\n", map { "$CALLS[$_][1]: " . join('>', @{ $res->[$_]{statuses} }) } @r3);
            }
            my $all = $trace . join('', map { $_->{head} . $_->{body} } @$res);
            ok(length($trace) > 1000, "via $name: the wire trace was captured") or diag("curl exit $rc");
            my $hits = $e->leaks($all);
            ok(!%$hits, "via $name: no internal address in any header or body") or diag(leak_text($hits) . "\n" . leak_context($all));
            note(sprintf('via %s: %.1f s', $name, time - $t0));
        }
    };
}

sub urllib_clean {
    my ($mode, $all) = @_;
    subtest "$mode mode: Python urllib completes every " . ($all ? '' : 'GET ') . 'call, sees no internal address' => sub {
        plan skip_all => 'python3 not installed' unless $have_python;
        my ($calls, $res, $out) = urllib_run($lk{$mode}, $all);
        ok(ref $res eq 'ARRAY' && @$res == @$calls, 'urllib ran ' . scalar(@$calls) . ' calls') or return diag($out);
        my @bad = grep { $res->[$_]{status} != $calls->[$_]{want} } 0 .. $#$calls;
        ok(!@bad, 'every call ends with its status')
            or diag(join "\n", map { "$calls->[$_]{method} $calls->[$_]{url}: got " . join('>', map { $_->{status} } @{ $res->[$_]{chain} })
                                     . " want $calls->[$_]{want} " . ($res->[$_]{chain}[-1]{error} // '') } @bad);
        my $chains = grep { @{ $_->{chain} } > 1 } @$res;
        if ($mode eq 'rewrite') {
            ok($chains >= 8, "urllib followed redirects ($chains chains)");
        } else {
            is($chains, 0, 'follow mode: urllib never saw a redirect');
        }
        my $hits = $e->leaks($out);
        ok(!%$hits, 'no internal address in any header or body of any response') or diag(leak_text($hits) . "\n" . leak_context($out));
    };
}

subtest 'the scanner finds what the brokers leak (control, without lookout)' => sub {
    my $r = curl("$L->{internal}{2}{http}/admin/v2/brokers/standalone");
    my $hits = $e->leaks($r->{body});
    is_deeply([ sort grep { /:/ } keys %$hits ], [ sort map { m{//(.*)} } map { $L->{internal}{$_}{http} } 1 .. 3 ],
              'brokers list: every internal host:port found') or diag($r->{body});
    is_deeply([ sort grep { !/:/ } keys %$hits ], [ sort $e->internal_hosts ], '... and every internal host')
        or diag(explain($hits));
    ok($e->leaks("x LOCALHOST y")->{localhost} && !%{ $e->leaks('127.0.0.221 127.0.0.2 localhosts 127.0.0.31') },
       'host matching: names case-insensitive, no partial IPs or names');
};

complete_and_clean('rewrite');
urllib_clean('rewrite', 0);
complete_and_clean('follow');
urllib_clean('follow', 1);

subtest 'lookups in every LookupData form stay clean' => sub {
    for my $v (2, 4) {
        $c->set(version => $v);
        for my $mode ('rewrite', 'follow') {
            my @lk = grep { $_->[1] =~ m{^/lookup/} } @CALLS;
            my ($res, $trace) = curl_run("v$v-$mode", $lk{$mode}{e2e_ext}{1}{http}, \@lk);
            is_deeply([ map { $_->{status} } @$res ], [ map { $_->[2] } @lk ], "v$v $mode: lookups complete");
            my $hits = $e->leaks($trace);
            ok(!%$hits, "v$v $mode: nothing internal") or diag(leak_text($hits) . "\n" . leak_context($trace));
        }
    }
    $c->set(version => 5);
};

subtest 'chunked and gzip brokers: still clean' => sub {
    # Brokers that chunk every answer (split mid-body, so addresses straddle chunks) and
    # gzip JSON for a client that accepts it (curl --compressed): the client's decoded
    # bodies and every header must still be clean.
    $c->set(chunked => 1, gzip => 1);
    for my $mode ('rewrite', 'follow') {
        for my $en (grep { $_->[0] =~ /^(?:b1|service)$/ } entries($lk{$mode})) {
            my ($res, $trace) = curl_run("gz-$mode-$en->[0]", $en->[1], \@CALLS, '--compressed');
            my @bad = grep { $res->[$_]{status} != $CALLS[$_][2] } 0 .. $#CALLS;
            ok(!@bad, "$mode via $en->[0]: every call ends with its status")
                or diag(join "\n", map { "$CALLS[$_][1]: " . join('>', @{ $res->[$_]{statuses} }) } @bad);
            my $gz = grep { $_->{head} =~ /^content-encoding:\s*gzip/mi } @$res;
            note("$mode via $en->[0]: $gz answers reached the client gzipped");
            my $all = join('', map { $_->{head} . $_->{body} } @$res) . $trace;
            my $hits = $e->leaks($all);
            ok(!%$hits, "$mode via $en->[0]: no internal address in any header or decoded body")
                or diag(leak_text($hits) . "\n" . leak_context($all));
            my $bl = (grep { $CALLS[$_][1] eq '/admin/v2/brokers/standalone' } 0 .. $#CALLS)[0];
            my $ext = $lk{$mode}{e2e_ext};
            is_deeply(eval { decode_json($res->[$bl]{body}) }, [ map { $ext->{$_}{http} =~ m{//(.*)} } 1 .. 3 ],
                      "$mode via $en->[0]: the brokers list decodes to the external host:ports")
                or diag($res->[$bl]{head} . $res->[$bl]{body});
        }
    }
    $c->set(chunked => 0, gzip => 0);
};

subtest 'rewrite mode: what the leaks became' => sub {
    my $x = $lk{rewrite}{e2e_ext};
    my %hp = map { ($_ => $x->{$_}{http} =~ m{//(.*)}) } 1 .. 3;
    my $r = http_req(GET => "$x->{1}{http}/admin/v2/brokers/standalone");
    is_deeply(eval { decode_json($r->{body}) }, [ @hp{1 .. 3} ], 'brokers list: each broker\'s lookup-listener host:port')
        or diag($r->{body});
    is($r->{headers}{'content-length'}, length $r->{body}, '... Content-Length fixed');
    $r = http_req(GET => "$x->{3}{http}/admin/v2/brokers/leaderBroker");
    is_deeply(eval { decode_json($r->{body}) }, { serviceUrl => $x->{1}{http} }, 'leaderBroker: b1\'s external http URL');
    $r = http_req(GET => "$x->{2}{http}$ADM/t2/stats");
    is(eval { decode_json($r->{body})->{ownerBroker} }, $hp{2}, 'stats ownerBroker: b2\'s external host:port');
    $r = http_req(GET => "$x->{1}{http}$LK/t1");
    is(eval { decode_json($r->{body})->{brokerId} }, $hp{1}, 'v5 brokerId: rewritten too (it is a host:port of the map)');
    $r = http_req(GET => "$x->{1}{http}$ADM/boom-c/stats");
    my $h1 = $hp{1};
    like($r->{body}, qr/boom on persistent:\/\/public\/default\/boom-c at \Q$h1\E\n/, '500 text/plain: the address in the trace rewritten');
    $c->set(chunked => 1);
    $r = http_req(GET => "$x->{2}{http}/admin/v2/brokers/standalone");
    is_deeply(eval { decode_json($r->{body}) }, [ @hp{1 .. 3} ], 'chunked brokers list: rewritten') or diag($r->{raw});
    $c->set(chunked => 0);
};

subtest 'leak_guard = block' => sub {
    my $x = $lk{block}{e2e_ext};
    my $r = curl("$x->{1}{http}/admin/v2/brokers/standalone");
    lookout_error_ok($r, 502, 'brokers list: 502 from lookout with a reason');
    my $hits = $e->leaks($r->{head} . $r->{body});
    ok(!%$hits, '... and the 502 itself names no internal address') or diag(leak_text($hits));
    $r = curl("$x->{2}{http}$ADM/t2/stats");
    lookout_error_ok($r, 502, 'stats with an internal ownerBroker: 502');
    $r = curl("$x->{1}{http}/admin/v2/clusters");
    is_deeply([ $r->{status}, $r->{body} ], [ 200, '["standalone"]' ], 'a clean answer passes');
    $c->set(version => 4);
    $r = curl("$x->{1}{http}$LK/t2");
    is($r->{status}, 200, 'a 4.x lookup (rewritten by the lookup filter, nothing left) passes');
    $c->set(version => 5);
    $r = curl("$x->{1}{http}$ADM/t2/stats");
    is($r->{status}, 307, 'an admin 307 (Location rewritten) passes');
    ok(!%{ $e->leaks($r->{head}) }, '... clean') or diag($r->{head});
    is(curl("$x->{1}{http}/admin/v2/clusters")->{status}, 200, 'lookout still serves');
};

subtest 'leak_guard = log' => sub {
    my $x = $lk{log}{e2e_ext};
    my $direct = curl("$L->{internal}{1}{http}/admin/v2/brokers/standalone");
    my $r = curl("$x->{1}{http}/admin/v2/brokers/standalone");
    is($r->{status}, 200, 'brokers list: 200');
    is($r->{body}, $direct->{body}, '... body unchanged (the internal list, as the broker sent it)');
    ok($lk{log}->wait_log(qr/\[warn\][^\n]*leak/i, 5), 'lookout logged a leak warning')
        or diag(join "\n", grep { /leak|brokers/i } split /\n/, $lk{log}->log // '');
    my @warn = grep { /\[warn\].*leak/i } split /\n/, $lk{log}->log // '';
    note("log: " . ($warn[0] // 'none'));
    # A broker that gzips (the client accepts gzip): log mode changes nothing, but the leak
    # is still there in the (decoded) body, so it must still be logged.
    $c->set(gzip => 1);
    $r = curl('--compressed', "$x->{2}{http}/admin/v2/brokers/leaderBroker");
    is_deeply(eval { decode_json($r->{body}) }, { serviceUrl => $L->{internal}{1}{http} }, 'gzip: body unchanged')
        or diag($r->{head} . $r->{body});
    ok(wait_until(sub { (grep { /\[warn\].*leak/i } split /\n/, $lk{log}->log // '') > @warn }, 5),
       'gzip: a leak warning for this exchange too')
        or diag(join "\n", grep { /leak|encoded|leaderBroker/i } split /\n/, $lk{log}->log // '');
    $c->set(gzip => 0);
};

http_close();
$_->stop for values %lk;
$c->stop;
done_testing;
