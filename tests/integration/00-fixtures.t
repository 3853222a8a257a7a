#!/usr/bin/perl
# 00-fixtures.t: the test fixtures themselves, without lookout. The fake brokers must
# answer like real 4.x/5.0 Pulsar brokers (facts/pulsar.md §1-2) and their /test/ knobs
# must do what the engine tests rely on; the harness helpers and the certs must work.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use JSON::PP qw(decode_json);
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time);

use Lookout;
use PulsarBroker;

my $certs = test_certs();
my $dir = tmp_dir();
my ($p1, $p2, $p2s, $p3) = (free_port('127.0.0.1'), free_port('127.0.0.2'), free_port('127.0.0.2'), free_port('127.0.0.3'));

my $c = PulsarBroker->start(
    dir     => $dir,
    brokers => [
        "127.0.0.1:$p1,external:pulsar://b1.lookout.test:6651",
        "http://127.0.0.2:$p2,https://127.0.0.2:$p2s,external:pulsar://b2.lookout.test:6651,external:pulsar+ssl://b2.lookout.test:6652",
        "127.0.0.3:$p3",
    ],
    own     => { t1 => 1, t2 => 2, 'public/default/t3' => 3, 'persistent://public/default/tt' => 3 },
    cert    => $certs->{broker_crt},
    key     => $certs->{broker_key},
);
my ($u1, $u2, $u2s, $u3) = ("http://127.0.0.1:$p1", "http://127.0.0.2:$p2", "https://127.0.0.2:$p2s", "http://127.0.0.3:$p3");
my $lk = '/lookup/v2/topic/persistent/public/default';
my $adm = '/admin/v2/persistent/public/default';

# ---- certificates ---------------------------------------------------------------------------
subtest 'certs' => sub {
    for my $k (sort keys %$certs) {
        next if $k eq 'dir';
        ok(-s $certs->{$k}, "$k exists");
    }
    my $v = qx{openssl verify -CAfile $certs->{internal_ca} $certs->{broker_crt} 2>&1};
    like($v, qr/: OK$/m, 'broker cert chains to the internal CA');
    $v = qx{openssl verify -CAfile $certs->{edge_ca} $certs->{edge_crt} $certs->{edge2_crt} 2>&1};
    is(() = $v =~ /: OK$/mg, 2, 'edge certs chain to the edge CA');
    my $san = qx{openssl x509 -in $certs->{edge_crt} -noout -ext subjectAltName 2>&1};
    like($san, qr/DNS:\*\.lookout\.test.*IP Address:127\.0\.0\.1\b.*IP Address:127\.0\.0\.32\b/s, 'edge SANs');
    $san = qx{openssl x509 -in $certs->{edge2_crt} -noout -ext subjectAltName 2>&1};
    like($san, qr/DNS:other\.test, DNS:\*\.other\.test/, 'edge2 SANs');
    my $out = qx{sh $certs->{dir}/gen-test-certs.sh $certs->{dir} 2>&1};
    is($out, '', 'second run keeps valid files');
};

# ---- HTTP lookups ---------------------------------------------------------------------------
subtest 'lookup: owned topic, 4.x form' => sub {
    my $r = curl("$u1$lk/t2");
    is($r->{status}, 200, '200 from a non-owner');
    is($r->{headers}{'content-type'}, 'application/json', 'json');
    is($r->{body}, qq({"brokerUrl":"pulsar://127.0.0.2:16652","brokerUrlTls":"pulsar+ssl://127.0.0.2:16752",)
                 . qq("httpUrl":"$u2","httpUrlTls":"$u2s","nativeUrl":"pulsar://127.0.0.2:16652","brokerUrlSsl":""}),
       'LookupData of the owner, TLS fields present');
    $r = curl("$u2$lk/t1");
    is($r->{body}, qq({"brokerUrl":"pulsar://127.0.0.1:16651","httpUrl":"$u1","nativeUrl":"pulsar://127.0.0.1:16651","brokerUrlSsl":""}),
       'no TLS: null fields omitted (Include.NON_NULL), as the captured body');
    for my $t ('t3', 'tt') {
        is(decode_json(curl("$u1$lk/$t")->{body})->{httpUrl}, $u3, "ownership key form for $t");
    }
    $r = curl("$u1/lookup/v2/destination/persistent/public/cl/default/t1");
    is($r->{status}, 200, 'v1 /destination path');
    is(decode_json($r->{body})->{httpUrl}, $u1, '... owner b1');
    $r = curl('-I', "$u1$lk/t1");
    is($r->{status}, 200, 'HEAD');
    ok($r->{headers}{'content-length'} > 0 && $r->{body} eq '', 'HEAD: length, no body');
};

subtest 'lookup: version forms' => sub {
    $c->set(version => 5);
    my $r = curl("$u1$lk/t1");
    is($r->{body}, qq({"brokerUrl":"pulsar://127.0.0.1:16651","httpUrl":"$u1","nativeUrl":"pulsar://127.0.0.1:16651",)
                 . qq("brokerId":"127.0.0.1:$p1","brokerUrlSsl":""}), '5.0 form adds brokerId host:webport');
    $c->set(version => 2);
    my $j = decode_json(curl("$u1$lk/t1")->{body});
    ok(exists $j->{brokerUrlTls} && !defined $j->{brokerUrlTls}, '2.x form: explicit null TLS fields');
    ok(!exists $j->{brokerId}, '2.x form: no brokerId');
    $c->set(version => 4);
};

subtest 'lookup: unowned topic redirects like 4.x' => sub {
    my $r = curl("$u1$lk/u1?foo=bar&authoritative=false");
    is($r->{status}, 307, 'status 307');
    is($r->{headers}{location}, "$u2$lk/u1?authoritative=true", 'Location: next broker, original query dropped');
    is($r->{body}, '', 'empty body');
    $r = curl("$u1/lookup/v2/destination/persistent/pr/cl/ns/u1");
    is($r->{headers}{location}, "$u2/lookup/v2/destination/persistent/pr/cl/ns/u1?authoritative=true", '/destination keeps its path');
    $r = curl("$u1$lk/u1?listenerName=external");
    is($r->{headers}{location}, "$u2$lk/u1?authoritative=true&listenerName=external", 'listenerName carried');
    $r = curl('-H', 'X-Pulsar-ListenerName: external', "$u1$lk/u1");
    is($r->{headers}{location}, "$u2$lk/u1?authoritative=true&listenerName=external", 'header listener carried as query');
    $r = curl("$u2$lk/u1?authoritative=true");
    is(decode_json($r->{body})->{httpUrl}, $u2, 'authoritative=true: the target takes it');
    $r = curl('-L', "$u1$lk/u1");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [ 307, 200 ], 'curl -L follows to a 200');
    $r = curl("$u3$lk/u1");
    is($r->{headers}{location}, "$u1$lk/u1?authoritative=true", 'ring wraps around');
    $c->set(unowned_to => 2);
    $r = curl('--cacert', $certs->{internal_ca}, "$u2s$lk/u9");
    is($r->{headers}{location}, "$u2s$lk/u9?authoritative=true", 'over TLS: https URL of the target');
    $c->set(unowned_to => undef);
    $r = curl('--cacert', $certs->{internal_ca}, "$u2s$lk/u9");
    is($r->{status}, 412, 'target without https: 412');
};

subtest 'lookup: listeners' => sub {
    my $r = curl("$u1$lk/t2?listenerName=external");
    my $j = decode_json($r->{body});
    is($j->{brokerUrl}, 'pulsar://b2.lookout.test:6651', 'listener brokerUrl');
    is($j->{brokerUrlTls}, 'pulsar+ssl://b2.lookout.test:6652', 'listener brokerUrlTls');
    is($j->{nativeUrl}, $j->{brokerUrl}, 'nativeUrl = brokerUrl');
    is($j->{httpUrl}, $u2, 'httpUrl stays internal (the PIP-338 gap)');
    $r = curl("$u1$lk/t2?listenerName=internal");
    is(decode_json($r->{body})->{brokerUrl}, 'pulsar://127.0.0.2:16652', 'the internal listener by name');
    $r = curl('-H', 'X-Pulsar-ListenerName: external', "$u1$lk/t1");
    is(decode_json($r->{body})->{brokerUrl}, 'pulsar://b1.lookout.test:6651', 'header listener');
    $r = curl("$u1$lk/t2?listenerName=nope");
    is($r->{status}, 500, 'unknown listener: 500');
    is($r->{body}, '{"reason":"the broker do not have nope listener"}', '... 4.x message');
    $r = curl('-H', 'X-Pulsar-ListenerName: nope', "$u1$lk/t2?listenerName=external");
    is($r->{status}, 200, 'query wins over header');
    $r = curl("$u1$lk/t3?listenerName=external");
    is($r->{status}, 500, 'owner b3 lacks the listener: 500');
};

# ---- admin -----------------------------------------------------------------------------------
subtest 'admin: owner answers, others redirect' => sub {
    my $q = 'b=%2Fx%20y&authoritative=true&a=1+2&flag&b=2';
    my $r = curl("$u1$adm/t2/stats?$q");
    is($r->{status}, 307, '307 from the leader');
    is($r->{headers}{location}, "$u2$adm/t2/stats?b=%2Fx%20y&a=1+2&flag&b=2&authoritative=true",
       'host:port swapped, other params byte-exact, authoritative replaced and last');
    $r = curl("$u3$adm/t2/stats?$q");
    is($r->{headers}{location}, "$u2$adm/t2/stats?b=%2Fx%20y&a=1+2&flag&b=2&authoritative=false", 'non-leader: authoritative=false');
    $r = curl("$u3$adm/t2/subscription/s%2F1/skip/5");
    is($r->{headers}{location}, "$u2$adm/t2/subscription/s%2F1/skip/5?authoritative=false", 'no query: only authoritative');
    $r = curl("$u2$adm/t2/stats");
    is($r->{status}, 200, 'owner: 200');
    my $j = decode_json($r->{body});
    is($j->{msgRateIn}, 0, 'stats shape');
    is($j->{ownerBroker}, "127.0.0.2:$p2", 'ownerBroker is the internal host:port');
    is(curl("$u2$adm/t2/subscriptions")->{body}, '[]', 'subscriptions');
    my $body = join '', map { chr($_ % 251) } 1 .. 300_000;
    spew("$dir/body", $body);
    $r = curl('-X', 'PUT', '--data-binary', "\@$dir/body", '-H', 'Content-Type: application/octet-stream',
              "$u2$adm/t2/subscription/s1");
    $j = decode_json($r->{body});
    is_deeply([ @$j{qw(length sha256 method)} ], [ 300_000, sha256_hex($body), 'PUT' ], 'PUT: length and sha256 of the body');
    $r = curl('-X', 'POST', '--data-binary', "\@$dir/body", '-H', 'Transfer-Encoding: chunked', "$u2$adm/t2/compaction");
    $j = decode_json($r->{body});
    is_deeply([ @$j{qw(length sha256)} ], [ 300_000, sha256_hex($body) ], 'POST chunked: same');
    $r = curl('-X', 'DELETE', "$u2$adm/t2");
    is($r->{status}, 204, 'DELETE: 204');
    $r = curl("$u3$adm/t2/partitions");
    is_deeply([ $r->{status}, $r->{body} ], [ 200, '{"partitions":0}' ], 'partitions: metadata, no redirect');
    $r = curl("$u3$adm/u5/stats");
    is($r->{headers}{location}, "$u1$adm/u5/stats?authoritative=true", 'unowned: redirect to the next broker');
    $r = curl('--cacert', $certs->{internal_ca}, "$u2s$adm/t1/stats");
    is($r->{status}, 412, 'https request, owner without https: 412');
    $c->own(t1 => 2);
    $r = curl('--cacert', $certs->{internal_ca}, "$u2s$adm/t1/stats");
    is($r->{status}, 200, 'ownership moves at the next request');
    $c->own(t1 => 1);
};

subtest 'admin: cluster-wide calls' => sub {
    my $r = curl("$u3/admin/v2/brokers/standalone");
    is_deeply(decode_json($r->{body}), [ "127.0.0.1:$p1", "127.0.0.2:$p2", "127.0.0.3:$p3" ], 'brokers: internal host:port list');
    is(curl("$u1/admin/v2/clusters")->{body}, '["standalone"]', 'clusters');
    is(curl("$u2/admin/v2/brokers/leaderBroker")->{body}, qq({"serviceUrl":"$u1"}), 'leaderBroker');
    $r = curl("$u1/admin/v2/nothing/here");
    is($r->{status}, 404, 'unknown path: 404');
};

subtest 'errors like Pulsar' => sub {
    for my $base ("$u1$lk", "$u1$adm") {
        my $r = curl("$base/missing-x" . ($base =~ /admin/ ? '/stats' : ''));
        is($r->{status}, 404, "$base missing: 404");
        is($r->{headers}{'content-type'}, 'application/json', '... json');
        is($r->{body}, '{"reason":"Topic not found persistent://public/default/missing-x"}', '... reason');
        $r = curl("$base/boom1");
        is($r->{status}, 500, 'boom: 500');
        is($r->{headers}{'content-type'}, 'text/plain', '... text/plain');
        like($r->{body}, qr/\A\n --- An unexpected error occurred in the server ---\n\nMessage: /, '... Pulsar page');
        $r = curl("$base/busy1");
        is_deeply([ $r->{status}, $r->{body}, $r->{headers}{'content-length'} ], [ 503, '', 0 ], 'busy: 503, empty');
    }
};

# ---- framing knobs ----------------------------------------------------------------------------
subtest 'chunked and gzip knobs' => sub {
    my $plain = curl("$u1$lk/t2")->{body};
    $c->set(chunked => 1);
    my $r = curl("$u1$lk/t2");
    is($r->{headers}{'transfer-encoding'}, 'chunked', 'chunked');
    is($r->{body}, $plain, 'same body');
    my $raw = http_raw('127.0.0.1', $p1, "GET $lk/t2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    my ($chunks) = $raw =~ /\r\n\r\n(.*)\z/s;
    is(() = $chunks =~ /(?:^|\n)[0-9a-f]+\r\n/g, 3, 'two data chunks and the last one');
    is(parse_response($raw)->{body}, $plain, 'parse_response decodes chunks');
    $r = curl('-H', 'X-Fake-Framing: length', "$u1$lk/t2");
    is($r->{headers}{'content-length'}, length $plain, 'per-request override');
    $c->set(chunked => 0, gzip => 1);
    $r = curl('--compressed', "$u1$lk/t2");
    is($r->{headers}{'content-encoding'}, 'gzip', 'gzip when accepted');
    is($r->{body}, $plain, 'decodes to the same');
    is(curl("$u1$lk/t2")->{headers}{'content-encoding'}, undef, 'identity when not accepted');
    $c->set(gzip => 0);
};

# ---- /test knobs ------------------------------------------------------------------------------
subtest '/test/bytes, echo, echo-body' => sub {
    my $n = 1_000_003;
    my $r = curl("$u1/test/bytes?n=$n");
    is($r->{headers}{'content-length'}, $n, 'Content-Length');
    is(sha256_hex($r->{body}), PulsarBroker::test_bytes_sha256($n), 'deterministic bytes');
    $r = curl("$u1/test/bytes?n=$n&te=chunked");
    is($r->{headers}{'transfer-encoding'}, 'chunked', 'chunked');
    is(sha256_hex($r->{body}), PulsarBroker::test_bytes_sha256($n), 'same bytes chunked');
    is(PulsarBroker::test_bytes(10, 30), substr(PulsarBroker::test_bytes(40), 30), 'test_bytes offsets');
    my $body = PulsarBroker::test_bytes(200_000);
    spew("$dir/b2", $body);
    $r = curl('--data-binary', "\@$dir/b2", "$u1/test/echo");
    is(decode_json($r->{body})->{sha256}, sha256_hex($body), 'echo: sha256');
    $r = curl('-X', 'PUT', '--data-binary', "\@$dir/b2", "$u1/test/echo-body");
    ok($r->{body} eq $body, 'echo-body: Content-Length body back');
    $r = curl('--data-binary', "\@$dir/b2", '-H', 'Transfer-Encoding: chunked', "$u1/test/echo-body");
    is($r->{headers}{'transfer-encoding'}, 'chunked', 'echo-body: chunked in, chunked out');
    ok($r->{body} eq $body, '... same bytes');
};

subtest '/test/slow, die-mid, location, close-delimited, status, big-headers, lookupdata' => sub {
    my $t0 = time;
    my $r = curl("$u1/test/slow?ms=300");
    ok(time - $t0 >= 0.3, 'slow: waited');
    is(decode_json($r->{body})->{slept_ms}, 300, '... then answered');
    $r = curl({ timeout => 1 }, "$u1/test/slow?ms=3000");
    is($r->{exit}, 28, 'a client timeout fires first');
    $r = curl("$u1/test/slow?ms=200&where=body");
    is($r->{status}, 200, 'slow body');
    $r = curl("$u1/test/die-mid?n=1000");
    is($r->{exit}, 18, 'die-mid: curl sees a partial body');
    is(length $r->{body}, 500, '... half of it');
    $r = curl("$u1/test/location?to=http%3A%2F%2F10.0.0.12%3A8080%2Fa%3Fb%3D1&code=302&content_location=http%3A%2F%2F10.0.0.12%3A8080%2Fc");
    is($r->{status}, 302, 'location: code');
    is($r->{headers}{location}, 'http://10.0.0.12:8080/a?b=1', '... Location');
    is($r->{headers}{'content-location'}, 'http://10.0.0.12:8080/c', '... Content-Location');
    $r = curl("$u1/test/close-delimited?n=70000");
    ok(!defined $r->{headers}{'content-length'} && !defined $r->{headers}{'transfer-encoding'}, 'close-delimited: no framing headers');
    is(sha256_hex($r->{body}), PulsarBroker::test_bytes_sha256(70000), '... body to EOF');
    my ($raw, $how) = http_raw('127.0.0.1', $p1, "GET /test/close-delimited?n=10&v=1.0 HTTP/1.1\r\nHost: x\r\n\r\n");
    like($raw, qr{\AHTTP/1\.0 200 }, 'v=1.0 status line');
    is($how, 'eof', '... closed by the server');
    is(curl("$u1/test/status?code=418")->{status}, 418, 'status');
    $r = curl("$u1/test/big-headers?n=40000");
    is(length $r->{headers}{'x-big'}, 40000, 'big-headers');
    is(decode_json(curl("$u1/test/lookupdata?broker=3")->{body})->{httpUrl}, $u3, 'lookupdata');
};

subtest '/test/headers, 100, ws, keep-alive, bad framing' => sub {
    my $r = curl('-H', 'X-Forwarded-For: 1.2.3.4', '-H', 'Connection: keep-alive, X-Hop', '-H', 'X-Hop: 1', "$u1/test/headers?x=1");
    my $j = decode_json($r->{body});
    is($j->{target}, '/test/headers?x=1', 'target');
    is_deeply([ grep { $_->[0] =~ /^X-/ } @{ $j->{headers} } ], [ [ 'X-Forwarded-For', '1.2.3.4' ], [ 'X-Hop', '1' ] ],
              'headers in order, original case');
    spew("$dir/small", 'hello');
    $r = curl('--data-binary', "\@$dir/small", '-H', 'Expect: 100-continue', "$u1/test/100");
    is($r->{responses}[0]{status}, 100, '100 Continue first');
    $j = decode_json($r->{body});
    ok($j->{sent_100} && $j->{length} == 5, '... then the body was read');
    $r = curl('--data-binary', "\@$dir/small", '-H', 'Expect: 100-continue', "$u1/test/100?final=417");
    is_deeply([ map { $_->{status} } @{ $r->{responses} } ], [417], 'final status without 100');

    # WebSocket: RFC 6455 §1.3's sample key; bytes after the head are echoed.
    my ($raw) = http_raw('127.0.0.1', $p1,
        "GET /test/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        . "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\nping-bytes",
        until => qr/ping-bytes\z/, timeout => 3);
    my $p = parse_response($raw);
    is($p->{status}, 101, 'ws: 101');
    is($p->{headers}{'sec-websocket-accept'}, 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=', '... accept key');
    like($raw, qr/\r\n\r\nping-bytes\z/, '... then raw echo');
    is(curl("$u1/test/ws")->{status}, 426, 'ws without Upgrade: 426');

    ($raw) = http_raw('127.0.0.1', $p1, "GET /test/status?code=201 HTTP/1.1\r\nHost: x\r\n\r\n"
                      . "GET /test/status?code=202 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    $p = parse_response($raw);
    is($p->{status}, 201, 'keep-alive: first');
    is(parse_response($p->{rest})->{status}, 202, '... pipelined second');
    my $how;
    ($raw, $how) = http_raw('127.0.0.1', $p1, "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                            . "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    like($raw, qr{\AHTTP/1\.1 400 }, 'CL+TE: 400');
    is($how, 'eof', '... and close');
    ($raw) = http_raw('127.0.0.1', $p1, "POST /test/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    like($raw, qr{\AHTTP/1\.1 400 }, 'bad chunk size: 400');
};

subtest 'https broker' => sub {
    my $r = curl('--cacert', $certs->{internal_ca}, "$u2s/test/headers");
    is($r->{status}, 200, 'verifies with the internal CA');
    ok(decode_json($r->{body})->{tls}, '... over TLS');
    $r = curl('--cacert', $certs->{internal_ca}, '--resolve', "localhost:$p2s:127.0.0.2", "https://localhost:$p2s/test/headers");
    is(decode_json($r->{body})->{sni}, 'localhost', 'SNI recorded');
    $r = curl("$u2s/test/headers");
    is($r->{exit}, 60, 'without the CA: verification fails');
    $r = curl('--cacert', $certs->{edge_ca}, "$u2s/test/headers");
    is($r->{exit}, 60, 'the edge CA does not vouch for brokers');
    my ($raw) = http_raw('127.0.0.2', $p2s, "GET $lk/t2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                         tls => 1, ca => $certs->{internal_ca}, sni => 'localhost');
    is(parse_response($raw)->{status}, 200, 'http_raw over TLS');
};

subtest 'request log' => sub {
    $c->clear_log;
    curl('-H', 'X-Pulsar-ListenerName: external', "$u2$lk/t1?x=1");
    my @r = $c->requests(2);
    is(scalar @r, 1, 'one line per request');
    is($r[0]{path}, "$lk/t1", 'path');
    is($r[0]{query}, 'x=1', 'query');
    is($r[0]{headers}{'x-pulsar-listenername'}, 'external', 'headers of interest');
    is($r[0]{status}, 200, 'status');
    # (b1 may still log the earlier /test/slow request the client gave up on)
    is(scalar(grep { $_->{path} eq "$lk/t1" } $c->requests(1)), 0, 'other brokers saw nothing');
    is(scalar(grep { $_->{path} eq "$lk/t1" } $c->requests(3)), 0, '... of this request');
};

subtest 'a broker vanishes and comes back' => sub {
    $c->kill_broker(3);
    my $r = curl("$u3$lk/t3");
    is($r->{exit}, 7, 'connection refused');
    $c->restart_broker(3);
    is(curl("$u3$lk/t3")->{status}, 200, 'back');
    curl("$u3/test/die-mid?n=10&broker=1");
    ok(wait_until(sub { grep { $_ == 3 } $c->dead_brokers }, 5), 'die-mid broker=1 kills the broker');
    $c->restart_broker(3);
};

subtest 'fake-pulsar CLI' => sub {
    my $bin = "$FindBin::Bin/bin/fake-pulsar";
    my $help = qx{$^X $bin --help};
    is($?, 0, '--help exits 0');
    like($help, qr/--broker SPEC.*--own TOPIC=N/s, '--help documents options');
    my $port = free_port();
    my $pid = fork;
    if ($pid == 0) {
        open STDOUT, '>', "$dir/cli.out";
        open STDERR, '>&', \*STDOUT;
        { no warnings 'exec'; exec $^X, $bin, '--broker', "127.0.0.1:$port", '--own', 't1=1', '--lifetime', '60', '--dir', "$dir/cli"; }
        POSIX::_exit(127);
    }
    ok(wait_port('127.0.0.1', $port, 10), 'listens');
    is(decode_json(curl("http://127.0.0.1:$port$lk/t1")->{body})->{httpUrl}, "http://127.0.0.1:$port", 'serves lookups');
    kill 'TERM', $pid;
    my $t0 = time;
    waitpid($pid, 0);
    is($?, 0, 'exits 0 on SIGTERM');
    ok(time - $t0 < 5, '... promptly');
    like(slurp("$dir/cli.out"), qr/b1 .*advertisedListeners = internal:pulsar:\/\/127\.0\.0\.1:16651,internal:http:/s,
         'prints the brokers');
    is(curl("http://127.0.0.1:$port/")->{exit}, 7, 'brokers gone');
};

# ---- the harness itself, with a stand-in for the lookout binary ------------------------------
subtest 'Lookout.pm helpers' => sub {
    my @addrs = conf_ports(<<'EOF');
[lookout]
admin = 127.0.0.1:9901   # comment
[pulsar prod]
lookupListenerName = external
webServiceUrl = https://127.0.0.5:8443
serviceUrl = pulsar+ssl://pulsar.example.com:6651 ; name: binds 0.0.0.0
[broker prod/b1]
advertisedListeners = internal:pulsar://10.0.0.11:6650,external:pulsar+ssl://127.0.0.6:6651,external:https://127.0.0.6:8443
[kafka events]
lookupListenerName = EXTERNAL
bind = 127.0.0.7
bootstrap.servers = kafka.example.com:9093
[broker events/1]
advertised.listeners = INTERNAL://10.0.0.21:9092,EXTERNAL://127.0.0.8:9093
EOF
    is_deeply([ sort @addrs ], [ sort qw(127.0.0.1:9901 127.0.0.5:8443 127.0.0.1:6651 127.0.0.6:6651
                                         127.0.0.6:8443 127.0.0.7:9093 127.0.0.8:9093) ], 'conf_ports');

    # The stand-in listens on [lookout] admin, logs to stderr, reloads on HUP, exits on
    # TERM (or ignores it when asked), and fails on a config containing "bad".
    my $stub = spew("$dir/stub-lookout", <<"EOF");
#!$^X
use IO::Socket::INET;
if (\$ARGV[0] eq '--version') { print "lookout stub 0.0\\n"; exit 0 }
my (\$conf) = grep { -f } \@ARGV;
open my \$fh, '<', \$conf or die "no config\\n";
my \$text = do { local \$/; <\$fh> };
if (\$text =~ /bad/) { print STDERR "\$conf:1: bad config\\n"; exit 1 }
my (\$hp) = \$text =~ /admin\\s*=\\s*(\\S+)/;
\$SIG{HUP} = sub { print STDERR "reloaded\\n" };
\$SIG{TERM} = \$ENV{STUB_IGNORE_TERM} ? 'IGNORE' : sub { print STDERR "draining\\n"; exit 0 };
my \$l = IO::Socket::INET->new(LocalAddr => \$hp, Listen => 5, ReuseAddr => 1) or die "listen \$hp: \$!\\n";
\$| = 1;
print STDERR "listening on \$hp\\n";
sleep 1 while 1;
EOF
    chmod 0755, $stub;
    local $ENV{LOOKOUT_BIN} = $stub;
    my $port = free_port();
    my $lk = start_lookout(dir => $dir, conf => "[lookout]\nadmin = 127.0.0.1:$port\n");
    ok($lk->started, 'started, admin port open');
    ok($lk->alive, 'alive');
    $lk->signal('HUP');
    ok($lk->wait_log(qr/reloaded/, 5), 'signal + wait_log');
    is($lk->stop, 0, 'stop: SIGTERM, exit 0');
    like($lk->log, qr/listening on 127\.0\.0\.1:$port\n.*draining/s, 'log');

    my $bad = start_lookout(dir => $dir, name => 'bad', conf => "bad\n", timeout => 5, quiet => 1);
    ok(!$bad->started, 'a failing config: not started');
    is($bad->exit_code, 1, '... exit code 1');
    like($bad->log, qr/bad\.conf:1: bad config/, '... its message');

    $port = free_port();
    my $t0 = time;
    my $stubborn = start_lookout(dir => $dir, name => 'stubborn', conf => "[lookout]\nadmin = 127.0.0.1:$port\n",
                                 env => { STUB_IGNORE_TERM => 1 });
    ok($stubborn->started, 'stubborn started');
    $stubborn->stop(1);
    is($stubborn->status & 127, 9, 'ignored SIGTERM: SIGKILL after the bound');
    ok(time - $t0 < 5, '... promptly');

    my $r = run_lookout(args => ['--version']);
    is_deeply([ $r->{exit}, $r->{out} ], [ 0, "lookout stub 0.0\n" ], 'run_lookout');
    $r = run_lookout(dir => $dir, conf => "bad\n");
    is($r->{exit}, 1, 'run_lookout with conf');

    ok(!http_raw('127.0.0.1', free_port(), "x", timeout => 1), 'http_raw: refused gives empty');
    my (undef, $how) = http_raw('127.0.0.1', $p1, "GET /test/slow?ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 0.5);
    is($how, 'timeout', 'http_raw: bounded by its timeout');
};

$c->stop;
done_testing();
