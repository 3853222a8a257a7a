#!/usr/bin/perl
# 46-smuggling.t: request smuggling and malformed requests, as a table (issue 6, CONTRACT
# §6). Each row is a raw request shape, what the client must get (a status, and whether
# lookout closes), and exactly what the broker must have received: nothing, or the
# requests it parsed (method, origin-form target, key headers, body bytes). Every shape
# runs over plain TCP and over TLS (lookout terminating it, SNI b1.lookout.test).
#
# The brokers are RawBrokers (lib/RawBroker.pm): strict HTTP/1.1 servers that log every
# byte they receive and every request they parse. The property under test is that lookout
# never forwards anything a strict server parses differently from lookout: a broker
# framing error, a request the table does not list (a body read as a second request), or
# an unfinished request left on a pooled upstream connection all fail the shape. A failing
# shape's diagnostic shows the whole exchange, sanitised: what the client sent, what it
# got back, and the raw bytes on each upstream connection; the run ends with a summary of
# every failing shape. Before the table, a few requests go straight to a RawBroker, to show
# that it is as strict as the table needs.
#
# The "note" column records what nginx 1.22 and HAProxy 2.6 (Debian 12) do with the shape
# when they stand in front of the same RawBroker (tests/integration/tools/compare-proxies.pl
# reruns that, optionally; CI does not), and the choice made here: the stricter of the two
# unless it breaks a legal request.
#
#   LOOKOUT_BIN=$PWD/build/plain/lookout prove -v tests/integration/46-smuggling.t
#   SMUGGLING_ONLY=regex     run only the shapes whose name matches
#   SMUGGLING_TRANSPORT=tls  run only one transport (plain or tls)

package Smuggling;

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);

use Lookout;
use RawBroker;

# ---- expectations --------------------------------------------------------------------------
#
# An expectation is a hash:
#   responses => [S, ...]  the client gets exactly these responses, in order; S is a status or
#                          [S1, S2] (either). 200 is the broker's answer (X-Raw-Broker names
#                          the request's broker); any other status must be lookout's own
#                          JSON {"reason"} error (Lookout::lookout_error_problems).
#   close     => 1 | 0     lookout closes the connection after the last response (and says
#                          Connection: close), or keeps it open; undef: either.
#   reqs      => [REQ...]  exactly the requests the brokers parsed, in order; REQ from req().
# or { any => [EXP, ...] } (one of them), or { plain => EXP, tls => EXP }.

# req(FIELD => VALUE...): one request the broker must have parsed.
#   method (GET), target ('/a', origin-form), body (''), broker ('b1'), hdr => { lower-case
#   name => 'exact value' | undef (absent) | qr/.../ | [alternatives] }. Host, unless hdr
#   says otherwise, must name the broker it reached: its external host:port on this
#   transport ({H1}/{H2}) or its internal address.
sub req { return { method => 'GET', target => '/a', body => '', broker => 'b1', hdr => {}, @_ } }

# fwd(REQ..., [close => X]): every request forwarded, each answered 200 by its broker.
sub fwd {
    my (@r, %o);
    while (@_) { my $x = shift; if (ref $x) { push @r, $x } else { $o{$x} = shift } }
    return { responses => [ (200) x @r ], reqs => \@r, close => $o{close} };
}

# refuse(STATUS or [STATUS...], [close => X]): lookout answers itself; nothing reaches a
# broker. close defaults to 1 (CONTRACT §6: malformed or ambiguous framing gets 400 and a
# close).
sub refuse {
    my ($st, %o) = @_;
    return { responses => [$st], reqs => [], close => exists $o{close} ? $o{close} : 1 };
}

sub any { return { any => [@_] } }

# ---- the table -----------------------------------------------------------------------------
#
# [ name, raw bytes, expectation, note ]
# Placeholders in raw bytes and expectations: {H1} {H2} the external host:port of b1 / b2 on
# this transport, {SCHEME} http or https, {CL} the length of what follows the first blank
# line (so a body may contain {H1}), {SMUGHEX} and {SMUGHEX+N} the length of $SMUG (+ N) in
# hex, for a chunk that holds it.

my $SMUG = "GET /smuggled HTTP/1.1\r\nHost: {H1}\r\n\r\n";
my $POST = "POST /a HTTP/1.1\r\nHost: {H1}\r\n";
my $GET = "GET /a HTTP/1.1\r\nHost: {H1}\r\n";
my $CHUNKED = "Transfer-Encoding: chunked\r\n";
my $HELLO = req(method => 'POST', body => 'hello');
my $E400 = refuse(400);

sub shapes {
    return (
    # -- legal shapes: they pass, and prove the harness sees what lookout forwards --------
    [ 'baseline: GET', "$GET\r\n", fwd(req()), 'nginx forwards, HAProxy forwards' ],
    [ 'baseline: POST with Content-Length', "${POST}Content-Length: 5\r\n\r\nhello",
      fwd(req(method => 'POST', body => 'hello', hdr => { 'content-length' => ['5', undef] })),
      'nginx forwards, HAProxy forwards' ],
    [ 'baseline: POST chunked', "$POST$CHUNKED\r\n5\r\nhello\r\n0\r\n\r\n", fwd($HELLO),
      'nginx forwards, HAProxy forwards' ],
    [ 'baseline: two chunks and a trailer', "$POST$CHUNKED\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: 1\r\n\r\n",
      fwd($HELLO),
      'nginx forwards, HAProxy forwards' ],
    [ 'baseline: pipelined GETs', "$GET\r\nGET /b HTTP/1.1\r\nHost: {H1}\r\n\r\n",
      fwd(req(), req(target => '/b')),
      'nginx forwards both, HAProxy forwards both' ],
    [ 'baseline: HTTP/1.0 with Host', "GET /a HTTP/1.0\r\nHost: {H1}\r\n\r\n", fwd(req(), close => 1),
      'nginx forwards, HAProxy forwards; 1.0 without keep-alive closes' ],
    [ 'baseline: Content-Length: 05 (leading zero, 1*DIGIT)', "${POST}Content-Length: 05\r\n\r\nhello", fwd($HELLO),
      'nginx forwards, HAProxy forwards' ],
    [ 'baseline: Content-Length with trailing OWS', "${POST}Content-Length: 5 \r\n\r\nhello", fwd($HELLO),
      'nginx forwards, HAProxy forwards; OWS is legal' ],
    [ 'baseline: Transfer-Encoding: Chunked (case)', "${POST}Transfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      fwd($HELLO),
      'nginx forwards, HAProxy forwards; codings are case-insensitive' ],
    [ 'baseline: Transfer-Encoding with two spaces of OWS', "${POST}Transfer-Encoding:  chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      fwd($HELLO),
      'nginx forwards, HAProxy forwards; OWS is legal' ],
    [ 'baseline: Transfer-Encoding:\\tchunked (HTAB OWS)', "${POST}Transfer-Encoding:\tchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      fwd($HELLO),
      'nginx 501 + close, HAProxy forwards; nginx\'s 501 refuses a legal request (HTAB is OWS): ' .
        'forwarded' ],
    [ 'baseline: obs-text in a header value', "${GET}X-Text: caf\xc3\xa9\r\n\r\n", fwd(req()),
      'nginx forwards, HAProxy forwards; obs-text is legal in values' ],
    [ 'baseline: GET with a Content-Length body', "${GET}Content-Length: 5\r\n\r\nhello", fwd(req(body => 'hello')),
      'nginx forwards, HAProxy forwards; a GET body is framed like any other' ],

    # -- a request hidden in a body: body bytes, never a request --------------------------
    [ 'body that looks like a request (Content-Length)', "${POST}Content-Length: {CL}\r\n\r\n$SMUG",
      fwd(req(method => 'POST', body => $SMUG)),
      'nginx forwards, HAProxy forwards' ],
    [ 'body that looks like a request (chunked)', "$POST$CHUNKED\r\n{SMUGHEX}\r\n$SMUG\r\n0\r\n\r\n",
      fwd(req(method => 'POST', body => $SMUG)),
      'nginx forwards, HAProxy forwards' ],
    [ 'chunk data holding a last-chunk and a request', "$POST$CHUNKED\r\n{SMUGHEX+5}\r\n0\r\n\r\n$SMUG\r\n0\r\n\r\n",
      fwd(req(method => 'POST', body => "0\r\n\r\n$SMUG")),
      'nginx forwards, HAProxy forwards' ],
    [ 'request pipelined right after a Content-Length body', "${POST}Content-Length: 5\r\n\r\nhello$SMUG",
      fwd($HELLO, req(target => '/smuggled')),
      'nginx forwards both, HAProxy forwards both; a real second request' ],
    [ 'Content-Length shorter than the body sent', "${POST}Content-Length: 3\r\n\r\nhelGET /x HTTP/1.1\r\nHost: {H1}\r\n\r\n",
      fwd(req(method => 'POST', body => 'hel'), req(target => '/x')),
      'nginx forwards both, HAProxy forwards both; what follows the body is the next request for every ' .
        'party' ],
    [ 'a good request, then a CL.TE one', "$GET\r\n${POST}Content-Length: 6\r\n$CHUNKED\r\n0\r\n\r\nG",
      { responses => [ 200, 400 ], reqs => [ req() ], close => 1 }, 'nginx 200 then 400 + close, HAProxy forwards both (the second chunked); stricter: the first ' .
        'forwarded, then 400 + close' ],
    [ 'a good request, then obs-fold', "$GET\r\n${GET}X-Folded: a\r\n b\r\n\r\n",
      { responses => [ 200, 400 ], reqs => [ req() ], close => 1 }, 'nginx 200 then 400 + close, HAProxy unfolds and forwards both; stricter: 200, then 400 + close' ],

    # -- CL.TE, TE.CL, TE.TE ----------------------------------------------------------------
    [ 'CL.TE: Content-Length then Transfer-Encoding', "${POST}Content-Length: 6\r\n$CHUNKED\r\n0\r\n\r\nG", $E400,
      'nginx 400 + close, HAProxy forwards it chunked (Content-Length dropped) then closes; RFC 9112 ' .
        '6.3 allows that; stricter: 400 + close' ],
    [ 'TE.CL: Transfer-Encoding then Content-Length', "$POST${CHUNKED}Content-Length: 4\r\n\r\n5c\r\nGPOST /a HTTP/1.1\r\nHost: {H1}\r\nContent-Length: 15\r\n\r\nx=1\r\n0\r\n\r\n",
      $E400,
      'nginx 400 + close, HAProxy reads it chunked and times out (504); stricter: 400 + close' ],
    [ 'CL.TE with Content-Length: 0', "${POST}Content-Length: 0\r\n$CHUNKED\r\n5\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards it chunked; stricter: 400 + close' ],
    [ 'TE: xchunked alone', "${POST}Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 400 + close; unknown coding, length unknown: 400 (501 allowed) + ' .
        'close' ],
    [ 'TE: xchunked with Content-Length', "${POST}Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\nhello",
      refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 400 + close; both framings: 400 + close' ],
    [ 'TE: chunked, identity', "${POST}Transfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 400 + close; chunked not final (RFC 9112 6.3): 400 + close' ],
    [ 'TE: identity, chunked', "${POST}Transfer-Encoding: identity, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 422 + close; identity is no longer a coding (RFC 9112): 400/501 + ' .
        'close' ],
    [ 'TE: chunked, chunked', "${POST}Transfer-Encoding: chunked, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 400 + close; chunked applied twice (RFC 9112 7): 400 + close' ],
    [ 'TE: chunked twice (two fields)', "$POST$CHUNKED$CHUNKED\r\n5\r\nhello\r\n0\r\n\r\n", refuse([ 400, 501 ]),
      'nginx 400 + close, HAProxy 400 + close; combined "chunked, chunked": 400 + close' ],
    [ 'TE: chunked and a second TE: identity', "$POST${CHUNKED}Transfer-Encoding: identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      refuse([ 400, 501 ]),
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'TE: chunked and a second TE: xchunked', "$POST${CHUNKED}Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\nhello",
      refuse([ 400, 501 ]),
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'TE: gzip, chunked', "${POST}Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 422 + close; lookout decodes chunked only: 501 (400 allowed) + close' ],
    [ 'TE with obs-fold', "${POST}Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy 400 + close; obs-fold: 400 + close' ],
    [ 'TE with obs-fold, no Content-Length', "${POST}Transfer-Encoding:\r\n chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy unfolds and forwards; stricter: 400 + close' ],
    [ 'obs-fold after an empty value', "${GET}X-Folded:\r\n b\r\n\r\n", $E400, 'nginx 400 + close, HAProxy unfolds and forwards; stricter: 400 + close' ],
    [ 'TE: space before the colon', "${POST}Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy 400 + close; RFC 9112 5.1 MUST 400' ],
    [ 'TE: field line starting with a space', "${POST}Content-Length: 5\r\n Transfer-Encoding: chunked\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy 400 + close; a fold of Content-Length: 400 + close' ],
    [ 'TE: "chunked" quoted', "${POST}Transfer-Encoding: \"chunked\"\r\n\r\n5\r\nhello\r\n0\r\n\r\n", refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 400 + close; not the token chunked: 400/501 + close' ],
    [ 'TE: chunked with a vertical tab', "${POST}Transfer-Encoding: \x0bchunked\r\nContent-Length: 5\r\n\r\nhello", $E400,
      'nginx 501 + close, HAProxy 400 + close; control character: 400 + close' ],
    [ 'TE: chunked on HTTP/1.0', "POST /a HTTP/1.0\r\nHost: {H1}\r\n$CHUNKED\r\n5\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards it (the strict broker rejects it); RFC 9112 6.1, issue 6: ' .
        '400 + close' ],
    [ 'TE: Transfer_Encoding (underscore) with Content-Length', "${POST}Transfer_Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
      fwd(req(method => 'POST', body => 'hello', hdr => { 'transfer-encoding' => undef })),
      'nginx forwards, HAProxy forwards; a different field name: framed by Content-Length either way' ],

    # -- Content-Length ---------------------------------------------------------------------
    [ 'CL: +5', "${POST}Content-Length: +5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy 400 + close; not 1*DIGIT: 400 + close' ],
    [ 'CL: -1', "${POST}Content-Length: -1\r\n\r\nhello", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: 5, 5 (one field)', "${POST}Content-Length: 5, 5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy merges and forwards; RFC 9110 8.6 allows either; stricter: 400 + ' .
        'close' ],
    [ 'CL: two fields, same value', "${POST}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy merges and forwards; stricter: 400 + close' ],
    [ 'CL: two fields, different values', "${POST}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: 5, 6 (one field)', "${POST}Content-Length: 5, 6\r\n\r\nhello!", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: huge (20 digits)', "${POST}Content-Length: 99999999999999999999\r\n\r\nhello", refuse([ 400, 413 ]),
      'nginx 400 + close, HAProxy 400 + close; overflows 64 bits: 400 (413 allowed) + close' ],
    [ 'CL: 2^63', "${POST}Content-Length: 9223372036854775808\r\n\r\nhello", refuse([ 400, 413 ]), 'nginx 400 + close, HAProxy 400 + close; over 2^63-1 (README, Security)' ],
    [ 'CL: 0x5', "${POST}Content-Length: 0x5\r\n\r\nhello", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: 5.0', "${POST}Content-Length: 5.0\r\n\r\nhello", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: empty', "${POST}Content-Length: \r\n\r\nhello", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: 5 with a space inside (5 5)', "${POST}Content-Length: 5 5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CL: with Transfer-Encoding: identity', "${POST}Content-Length: 5\r\nTransfer-Encoding: identity\r\n\r\nhello",
      refuse([ 400, 501 ]),
      'nginx 501 + close, HAProxy 400 + close; two framings: 400 + close' ],

    # -- chunk sizes, extensions, chunk lines ---------------------------------------------
    [ 'chunk size ffffffffffffffff', "$POST$CHUNKED\r\nffffffffffffffff\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk size 17 digits (overflow)', "$POST$CHUNKED\r\n10000000000000005\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk size 32 digits', "$POST$CHUNKED\r\n" . ('f' x 32) . "\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk size 2^63', "$POST$CHUNKED\r\n8000000000000000\r\nhello\r\n0\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close; over 2^63-1 (README, Security)' ],
    [ 'chunk size -5', "$POST$CHUNKED\r\n-5\r\nhello\r\n0\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk size 0x5', "$POST$CHUNKED\r\n0x5\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk size empty', "$POST$CHUNKED\r\n\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk size with trailing space', "$POST$CHUNKED\r\n5 \r\nhello\r\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards; not in the grammar (BWS only before ";", RFC 9112 7.1.1) and ' .
        'CONTRACT §6 refuses bad chunk sizes: 400 + close' ],
    [ 'chunk data longer than its size', "$POST$CHUNKED\r\n3\r\nhelloXX\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'chunk ext: 5;name=value', "$POST$CHUNKED\r\n5;name=value\r\nhello\r\n0\r\n\r\n", fwd($HELLO),
      'nginx forwards, HAProxy forwards' ],
    [ 'chunk ext: 5;name="quoted value"', "$POST$CHUNKED\r\n5;name=\"quoted value\"\r\nhello\r\n0\r\n\r\n", fwd($HELLO),
      'nginx forwards, HAProxy forwards' ],
    [ 'chunk ext: 5;flag and 0;last', "$POST$CHUNKED\r\n5;flag\r\nhello\r\n0;last\r\n\r\n", fwd($HELLO),
      'nginx forwards, HAProxy forwards' ],
    [ 'chunk ext: 5; (no name)', "$POST$CHUNKED\r\n5;\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (both skip extensions unread); issue 6: a malformed extension ' .
        'gets 400 + close' ],
    [ 'chunk ext: 5;=value', "$POST$CHUNKED\r\n5;=value\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (both skip extensions unread); issue 6: 400 + close' ],
    [ 'chunk ext: unterminated quote', "$POST$CHUNKED\r\n5;a=\"b\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (both skip extensions unread); issue 6: 400 + close' ],
    [ 'chunk ext: NUL in the name', "$POST$CHUNKED\r\n5;a\0b=c\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (both skip extensions unread); issue 6: 400 + close' ],
    [ 'chunk ext: bare LF inside', "$POST$CHUNKED\r\n5;a=b\nX\r\nhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close; bare LF: 400 + close' ],
    [ 'chunk line ended by bare LF', "$POST$CHUNKED\r\n5\nhello\r\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (RFC 9112 2.2 MAY accept LF); chosen: CRLF only, 400 + close' ],
    [ 'chunk data ended by bare LF', "$POST$CHUNKED\r\n5\r\nhello\n0\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards; chosen: CRLF only, 400 + close' ],
    [ 'chunk line ended by bare CR', "$POST$CHUNKED\r\n5\rhello\r\n0\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'last chunk ended by bare LF', "$POST$CHUNKED\r\n5\r\nhello\r\n0\n\r\n", $E400,
      'nginx forwards, HAProxy forwards; chosen: CRLF only, 400 + close' ],
    [ 'trailer line without a colon', "$POST$CHUNKED\r\n5\r\nhello\r\n0\r\nbad trailer\r\n\r\n", $E400,
      'nginx forwards, HAProxy 400 + close' ],
    [ 'trailer with obs-fold', "$POST$CHUNKED\r\n5\r\nhello\r\n0\r\nX-T: a\r\n b\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (both drop trailers); chosen: 400 + close, as obs-fold in the ' .
        'head' ],

    # -- bare CR / bare LF in the head, obs-fold ---------------------------------------
    [ 'bare LF ends the request line', "GET /a HTTP/1.1\nHost: {H1}\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards (RFC 9112 2.2 MAY accept LF); chosen: a bare LF anywhere in the ' .
        'head gets 400 + close (README, Security; 40-errors.t)' ],
    [ 'bare LF between header lines', "${GET}X-A: 1\nX-B: 2\r\n\r\n", $E400,
      'nginx forwards, HAProxy forwards; chosen: 400 + close (40-errors.t)' ],
    [ 'bare LF ends the head', "${GET}X-A: 1\r\n\n", $E400,
      'nginx forwards, HAProxy forwards; chosen: 400 + close (README, Security: a bare LF anywhere in the head)' ],
    [ 'head entirely in bare LFs', "GET /a HTTP/1.1\nHost: {H1}\nContent-Length: 5\n\nhello", $E400,
      'nginx forwards, HAProxy forwards; chosen: 400 + close' ],
    [ 'bare CR inside a header value', "${GET}X-A: a\rb\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close; RFC 9112 2.2 MUST reject or replace: 400 + close' ],
    [ 'bare CR as a line end', "${GET}X-A: 1\rX-B: 2\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'bare CR in the request line', "GET /a\r HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'obs-fold in a header', "${GET}X-Folded: a\r\n  b\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy unfolds and forwards; RFC 9112 5.2 allows either; stricter: 400 + ' .
        'close' ],
    [ 'obs-fold with HTAB', "${GET}X-Folded: a\r\n\tb\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy unfolds and forwards; stricter: 400 + close' ],
    [ 'obs-fold on Host', "GET /a HTTP/1.1\r\nHost: b1\r\n .lookout.test\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy unfolds it (421: no such host); stricter: 400 + close' ],
    [ 'first header line starts with a space', "GET /a HTTP/1.1\r\n Host: {H1}\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close; RFC 9112 2.2 MUST reject or ignore; stricter: 400 + ' .
        'close' ],

    # -- NUL and control characters, field names ------------------------------------------
    [ 'NUL in a header value', "${GET}X-A: a\0b\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards it (the strict broker rejects it)' ],
    [ 'NUL in a header name', "${GET}X-\0A: 1\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'NUL in the target', "GET /a\0b HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CTL 0x01 in a header value', "${GET}X-A: a\x01b\r\n\r\n", $E400,
      'nginx and HAProxy forward it (the strict broker rejects it); not field-vchar (RFC 9110 5.5): 400 ' .
        '+ close' ],
    [ 'DEL in a header value', "${GET}X-A: a\x7fb\r\n\r\n", $E400,
      'nginx and HAProxy forward it (the strict broker rejects it); not field-vchar: 400 + close' ],
    [ 'ESC in a header value', "${GET}X-A: a\x1b[31mb\r\n\r\n", $E400,
      'nginx and HAProxy forward it (the strict broker rejects it); not field-vchar: 400 + close' ],
    [ 'DEL in the target', "GET /a\x7f HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CTL 0x01 in the target', "GET /a\x01 HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'space in a header name', "${GET}X A: 1\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'non-tchar in a header name', "${GET}X(A): 1\r\n\r\n", $E400, 'nginx forwards, HAProxy 400 + close' ],
    [ 'non-ASCII in a header name', "${GET}X-\xe9: 1\r\n\r\n", $E400, 'nginx forwards, HAProxy 400 + close' ],
    [ 'empty header name', "$GET: value\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'header line without a colon', "${GET}X-A 1\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'whitespace before the colon (Content-Length)', "${POST}Content-Length : 5\r\n\r\nhello", $E400,
      'nginx 400 + close, HAProxy 400 + close; RFC 9112 5.1 MUST 400 + close' ],

    # -- methods and targets -----------------------------------------------------------
    [ 'method in lower case', "get /a HTTP/1.1\r\nHost: {H1}\r\n\r\n", refuse([ 400, 405, 501 ]),
      'nginx 400 + close, HAProxy forwards; methods are case-sensitive, "get" is unknown: 400 (405/501 ' .
        'allowed) + close' ],
    [ 'unknown method', "FOO /a HTTP/1.1\r\nHost: {H1}\r\n\r\n", refuse([ 400, 405, 501 ]),
      'nginx forwards, HAProxy forwards; lookout\'s parser knows the registered methods only and no ' .
        'Pulsar API uses another: refused, 400/405/501 + close' ],
    [ 'method with a non-tchar', "G(T /a HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'no method', " /a HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400, 'nginx 400 + close, HAProxy 400 + close' ],
    [ 'two spaces after the method', "GET  /a HTTP/1.1\r\nHost: {H1}\r\n\r\n", any($E400, fwd(req())),
      'nginx forwards, HAProxy forwards (RFC 9112 3 allows a lenient parse); lookout writes the request ' .
        'line anew, so either 400 + close or forwarded as "GET /a"' ],
    [ 'space after the version', "GET /a HTTP/1.1 \r\nHost: {H1}\r\n\r\n", refuse([ 400, 505 ]),
      'nginx forwards, HAProxy 400 + close; a malformed request line: 400 + close (505 accepted: it ' .
        'reads as an unknown version)' ],
    [ 'space in the target', "GET /a b HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'HTAB in the target', "GET /a\tb HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'non-ASCII bytes in the target', "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx forwards it (the strict broker rejects it), HAProxy 400 + close; not URI characters: 400 + ' .
        'close' ],
    [ 'fragment in the target', "GET /a#frag HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx forwards, HAProxy 400 + close; origin-form has no fragment (RFC 9112 3.2.1): 400 + close' ],
    [ 'absolute-form with an ftp scheme', "GET ftp://{H1}/x HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400, 'nginx forwards "/x", HAProxy forwards it in absolute-form; README (Security): a scheme other ' .
        'than http/https gets 400 + close' ],
    [ 'asterisk-form on GET', "GET * HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards; only OPTIONS may use *: 400 + close' ],
    [ 'authority-form on GET', "GET {H1} HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards; only CONNECT: 400 + close' ],
    [ 'target not starting with /', "GET a/b HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close' ],
    [ 'CONNECT', "CONNECT {H1} HTTP/1.1\r\nHost: {H1}\r\n\r\n", refuse(405, close => undef),
      'nginx 400 + close, HAProxy forwards it; README: 405, never tunnelled' ],
    [ 'Upgrade: h2c', "${GET}Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
      $E400, 'nginx and HAProxy forward it without the upgrade; README: 400 + close, never tunnelled' ],

    # -- versions --------------------------------------------------------------------------
    [ 'HTTP/2.0', "GET /a HTTP/2.0\r\nHost: {H1}\r\n\r\n", refuse(505),
      'nginx 505 + close, HAProxy forwards it as HTTP/1.1; issue 6: 505 + close' ],
    [ 'HTTP/3.0', "GET /a HTTP/3.0\r\nHost: {H1}\r\n\r\n", refuse(505),
      'nginx 505 + close, HAProxy forwards it as HTTP/1.1; a major version other than 1: 505 + close, ' .
        'as nginx' ],
    [ 'HTTP/1.2', "GET /a HTTP/1.2\r\nHost: {H1}\r\n\r\n", refuse([ 400, 505 ]),
      'nginx forwards, HAProxy forwards (RFC 9110 2.5: serve it as 1.1); no client sends it and ' .
        'lookout\'s parser refuses it: 400/505 + close' ],
    [ 'HTTP/0.9 request (no version)', "GET /a\r\n\r\n", refuse([ 400, 505 ]),
      'nginx answers in HTTP/0.9 (a bare body) and closes, HAProxy 400 + close; stricter: 400 (505 ' .
        'allowed) + close' ],
    [ 'HTTP/0.9 named', "GET /a HTTP/0.9\r\nHost: {H1}\r\n\r\n", refuse([ 400, 505 ]),
      'nginx 400 + close, HAProxy forwards it (the strict broker rejects it); 400/505 + close' ],
    [ 'HTTP/1.10', "GET /a HTTP/1.10\r\nHost: {H1}\r\n\r\n", refuse([ 400, 505 ]),
      'nginx forwards, HAProxy 400 + close; HTTP-version is DIGIT "." DIGIT: 400 (505 allowed) + close' ],
    [ 'http/1.1 in lower case', "GET /a http/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close; HTTP-name is case-sensitive: 400 + close' ],
    [ 'HTTP/1', "GET /a HTTP/1\r\nHost: {H1}\r\n\r\n", refuse([ 400, 505 ]),
      'nginx 400 + close, HAProxy 400 + close; 400 (505 accepted) + close' ],

    # -- absolute-form -----------------------------------------------------------------
    [ 'absolute-form to b1', "GET {SCHEME}://{H1}/x?q=1 HTTP/1.1\r\nHost: {H1}\r\n\r\n",
      fwd(req(target => '/x?q=1', hdr => { host => '{H1}' })),
      'nginx forwards in origin-form, HAProxy forwards in absolute-form; issue 6: routed on the ' .
        'authority, forwarded in origin-form' ],
    [ 'absolute-form to b2, Host names b1', "GET {SCHEME}://{H2}/x HTTP/1.1\r\nHost: {H1}\r\n\r\n",
      { plain => any($E400, fwd(req(target => '/x', broker => 'b2'))),
        tls   => any(refuse(421, close => undef), refuse(400)) },
      'nginx routes on the authority (to b2), HAProxy 400 + close (authority and Host differ); either ' .
        'HAProxy\'s 400 + close or RFC 9112 3.2.2 (routed on the authority, Host replaced by it), never ' .
        'routed on Host; over TLS the authority also differs from the SNI (b1): 421 or 400' ],
    [ 'absolute-form naming no mapped broker', "GET {SCHEME}://nowhere.lookout.test/x HTTP/1.1\r\nHost: {H1}\r\n\r\n",
      refuse(421, close => undef),
      'nginx 421, HAProxy 400 + close (authority and Host differ); issue 6: 421, never forwarded' ],
    [ 'absolute-form without Host', "GET {SCHEME}://{H1}/x HTTP/1.1\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 421 (routing on Host in this setup); RFC 9112 3.2: HTTP/1.1 without ' .
        'Host MUST get 400' ],
    [ 'absolute-form with userinfo', "GET {SCHEME}://user\@{H1}/x HTTP/1.1\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards; RFC 9110 4.2.4: userinfo is an error: 400 + close' ],
    [ 'absolute-form with an empty path', "GET {SCHEME}://{H1}?q=1 HTTP/1.1\r\nHost: {H1}\r\n\r\n",
      fwd(req(target => '/?q=1', hdr => { host => '{H1}' })),
      'nginx forwards "/?q=1", HAProxy 400 + close; HAProxy\'s 400 refuses a legal request: forwarded ' .
        'as "/?q=1" (RFC 9112 3.2.1)' ],

    # -- Host ----------------------------------------------------------------------------
    [ 'two Host fields, identical', "GET /a HTTP/1.1\r\nHost: {H1}\r\nHost: {H1}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy merges and forwards; RFC 9112 3.2 MUST 400: 400 + close' ],
    [ 'two Host fields, different', "GET /a HTTP/1.1\r\nHost: {H1}\r\nHost: {H2}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 400 + close; RFC 9112 3.2 MUST 400' ],
    [ 'Host: a, b in one field', "GET /a HTTP/1.1\r\nHost: {H1}, {H2}\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards it (the strict broker rejects it); not a host: 400 + close' ],
    [ 'Host with userinfo', "GET /a HTTP/1.1\r\nHost: user\@{H1}\r\n\r\n", $E400,
      'nginx 421, HAProxy 421 (no server name matches); issue 6: 400 + close' ],
    [ 'Host with a space', "GET /a HTTP/1.1\r\nHost: b1.lookout.test :1\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 421; issue 6: 400 + close' ],
    [ 'Host with a path', "GET /a HTTP/1.1\r\nHost: {H1}/x\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy forwards it (the strict broker rejects it); issue 6: 400 + close' ],
    [ 'Host with a quote', "GET /a HTTP/1.1\r\nHost: {H1}\"\r\n\r\n", $E400,
      'nginx and HAProxy forward it (the strict broker rejects it); issue 6: 400 + close' ],
    [ 'HTTP/1.1 without Host', "GET /a HTTP/1.1\r\n\r\n", $E400,
      'nginx 400 + close, HAProxy 421 (routing on Host in this setup); RFC 9112 3.2 MUST 400' ],
    [ 'HTTP/1.0 without Host', "GET /a HTTP/1.0\r\n\r\n",
      any(refuse([ 400, 421 ], close => undef), fwd(req(), close => 1)),
      'nginx 421 + close, HAProxy 421 + close; issue 6: forwarded WITH the routed broker\'s Host, or ' .
        'refused 400/421; never forwarded without one' ],

    # -- Expect -------------------------------------------------------------------------
    [ 'Expect: 100-continue on a bodiless GET', "${GET}Expect: 100-continue\r\n\r\n", fwd(req()),
      'nginx forwards, HAProxy forwards; nothing to continue: forwarded, one final response' ],
    [ 'Expect: 100-continue with a body', "${POST}Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", fwd($HELLO),
      'nginx forwards, HAProxy forwards; the body follows at once: forwarded' ],
    [ 'Expect: an unknown expectation', "${GET}Expect: something-else\r\n\r\n", refuse(417, close => undef),
      'nginx forwards, HAProxy forwards; RFC 9110 10.1.1 allows 417; chosen (stricter): 417 from ' .
        'lookout, never forwarded; the connection may stay open' ],
    [ 'Expect: 100-continue, something-else', "${GET}Expect: 100-continue, something-else\r\n\r\n",
      refuse(417, close => undef),
      'nginx forwards, HAProxy forwards; an unknown member: 417, as above' ],
    [ 'Expect: an unknown expectation on HTTP/1.0', "GET /a HTTP/1.0\r\nHost: {H1}\r\nExpect: something-else\r\n\r\n",
      any(refuse(417, close => undef), fwd(req(hdr => { expect => undef }), close => 1)),
      'nginx forwards, HAProxy forwards; RFC 9110 10.1.1: a 1.0 Expect is ignored, so forwarded without ' .
        'it (README, Security), or 417' ],

    # -- Connection naming end-to-end fields --------------------------------------------
    [ 'Connection: Content-Length with a body', "${POST}Connection: Content-Length\r\nContent-Length: 5\r\n\r\nhello",
      fwd(req(method => 'POST', body => 'hello', hdr => { 'content-length' => '5' })),
      'nginx forwards, HAProxy forwards; lookout frames what it forwards: Content-Length stays' ],
    [ 'Connection: Keep-Alive, Content-Length', "${POST}Connection: Keep-Alive, Content-Length\r\nContent-Length: 5\r\n\r\nhello",
      fwd(req(method => 'POST', body => 'hello', hdr => { 'content-length' => '5' })),
      'nginx forwards, HAProxy forwards; Content-Length stays' ],
    [ 'Connection: close, Content-Length', "${POST}Connection: close, Content-Length\r\nContent-Length: 5\r\n\r\nhello",
      fwd(req(method => 'POST', body => 'hello', hdr => { 'content-length' => '5' }), close => 1),
      'nginx forwards, HAProxy forwards; Content-Length stays; the client asked for a close' ],
    [ 'Connection: Transfer-Encoding with a chunked body', "${POST}Connection: Transfer-Encoding\r\n$CHUNKED\r\n5\r\nhello\r\n0\r\n\r\n",
      fwd($HELLO),
      'nginx forwards, HAProxy forwards; the body stays framed (chunked or Content-Length)' ],
    [ 'Connection: Host', "${GET}Connection: Host\r\n\r\n", fwd(req(hdr => { host => '{H1}' })),
      'nginx forwards, HAProxy forwards; Host is end-to-end: it stays' ],
    [ 'Connection: X-Forwarded-For', "${GET}Connection: X-Forwarded-For\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
      fwd(req(hdr => { 'x-forwarded-for' => qr/(?:^|, )127\.0\.0\.1\z/ })),
      'nginx forwards "6.6.6.6, 127.0.0.1", HAProxy forwards two fields; the broker must see the real ' .
        'peer last' ],
    [ 'Connection: X-Forwarded-Proto', "${GET}Connection: X-Forwarded-Proto\r\nX-Forwarded-Proto: https\r\n\r\n",
      fwd(req(hdr => { 'x-forwarded-proto' => '{SCHEME}' })),
      'nginx and HAProxy drop it; lookout sets it to what the client used' ],
    [ 'Connection: Expect, with a body', "${POST}Connection: Expect\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
      fwd($HELLO),
      'nginx forwards, HAProxy forwards; forwarded with its body' ],
    );
}

# ---- running a shape -----------------------------------------------------------------------

my %CTX;    # the running instance: lookout, brokers, ports, certs
sub ctx { return \%CTX }    # for tools/compare-proxies.pl

sub expand {
    my ($s, $t) = @_;
    return $s unless defined $s && !ref $s;
    if ($s =~ /\{SMUGHEX/) {
        my $smug = length expand($SMUG, $t);
        $s =~ s/\{SMUGHEX(?:\+(\d+))?\}/sprintf('%x', $smug + ($1 \/\/ 0))/ge;
    }
    $s =~ s/\{H1\}/b1.lookout.test:$t->{port}/g;
    $s =~ s/\{H2\}/b2.lookout.test:$t->{port}/g;
    $s =~ s/\{SCHEME\}/$t->{scheme}/g;
    if ($s =~ /\{CL\}/) {
        my $i = index($s, "\r\n\r\n");
        my $len = length($s) - $i - 4;
        $s =~ s/\{CL\}/$len/;
    }
    return $s;
}

# Shows bytes to a reader: printable ASCII as is, CR LF as \r\n (and a line break), other
# bytes as \xNN; cut at MAX characters.
sub show {
    my ($b, $max) = @_;
    $max //= 1200;
    my $cut = length($b) > $max;
    $b = substr($b, 0, $max);
    $b =~ s/([^\x20-\x7e\r\n])/sprintf('\\x%02x', ord $1)/ge;
    $b =~ s/(\r\n|\r|\n)/$1 eq "\r\n" ? "\\r\\n\n" : $1 eq "\r" ? '\\r' : "\\n\n"/ge;
    $b =~ s/\n\z//;
    $b =~ s/^/    | /mg;
    return ($b eq '' ? '    | (nothing)' : $b) . ($cut ? "\n    | ... (cut)" : '');
}

# exchange(T, BYTES [, WANT=1]): send BYTES on a new connection (plain or TLS per T), read
# until lookout closes, or until WANT complete responses are in and nothing more comes for
# 0.3 s (1.5 s when the last says Connection: close), or 4 s. Returns { reply, how,
# responses }.
sub exchange {
    my ($t, $bytes, $want) = @_;
    $want //= 1;
    my $s;
    if ($t->{tls}) {
        $s = IO::Socket::SSL->new(PeerHost => '127.0.0.1', PeerPort => $t->{port}, Timeout => 3,
                                  SSL_hostname => 'b1.lookout.test', SSL_ca_file => $CTX{certs}{edge_ca},
                                  SSL_verifycn_name => 'b1.lookout.test');
        return { reply => '', how => 'connect: ' . IO::Socket::SSL::errstr(), responses => [] } unless $s;
    } else {
        $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->{port}, Proto => 'tcp', Timeout => 3)
            or return { reply => '', how => "connect: $@", responses => [] };
    }
    local $SIG{PIPE} = 'IGNORE';
    my $end = time + 4;
    my ($off, $reply, $how) = (0, '', undef);
    while ($off < length $bytes) {
        my $n = syswrite($s, $bytes, length($bytes) - $off, $off);
        last unless defined $n && $n > 0;    # lookout may answer and close before all is sent
        $off += $n;
    }
    my $last_data = time;
    my @resp;
    while (1) {
        @resp = parse_all($reply);
        my $done = grep { $_->{complete} } @resp;
        my $quiet = @resp && ($resp[-1]{headers}{connection} // '') =~ /\bclose\b/i ? 1.5 : 0.3;
        if ($done >= $want && time - $last_data >= $quiet) { $how = 'open'; last }
        if (time >= $end) { $how = 'timeout'; last }
        my $wait = $done >= $want ? $quiet - (time - $last_data) : $end - time;
        $wait = 0.05 if $wait < 0.05;
        next unless ($t->{tls} && $s->pending) || IO::Select->new($s)->can_read($wait);
        my $n = sysread($s, my $buf, 65536);
        if (!defined $n) { $how = 'reset'; last }
        if ($n == 0) { $how = 'eof'; last }
        $reply .= $buf;
        $last_data = time;
    }
    close $s;
    return { reply => $reply, how => $how, responses => [ parse_all($reply) ], sent => $off };
}

# want_count(EXP, T): how many responses the client may get at most under EXP.
sub want_count {
    my ($exp, $t) = @_;
    return want_count($exp->{ $t->{name} }, $t) if exists $exp->{plain};
    return (sort { $b <=> $a } map { want_count($_, $t) } @{ $exp->{any} })[0] if $exp->{any};
    return scalar @{ $exp->{responses} };
}

# Every complete response in BYTES (1xx skipped), then an incomplete one if any.
sub parse_all {
    my ($raw) = @_;
    my @r;
    while (length $raw) {
        my $r = parse_response($raw) or last;
        push @r, $r;
        last unless $r->{complete};
        $raw = $r->{rest};
    }
    return @r;
}

# What the brokers saw during one shape: requests and errors in log order, and the raw bytes
# per upstream connection.
sub broker_view {
    my ($marks) = @_;
    my (@reqs, @errors, %raw, %pending, %closed);
    for my $b (@{ $CTX{brokers} }) {
        for my $e ($b->events_since($marks->{ $b->name })) {
            my $key = $b->name . '#' . $e->{conn};
            if ($e->{ev} eq 'data') { $raw{$key} .= $e->{bytes}; $pending{$key} = $e->{pending}; delete $closed{$key} }
            elsif ($e->{ev} eq 'req') { push @reqs, { %$e, broker => $b->name } }
            elsif ($e->{ev} eq 'error') { push @errors, { %$e, broker => $b->name } }
            elsif ($e->{ev} eq 'close') { $closed{$key} = $e->{by} }
        }
    }
    return { reqs => \@reqs, errors => \@errors, raw => \%raw, pending => \%pending, closed => \%closed };
}

sub hdr_values {
    my ($req, $name) = @_;
    return map { $_->[1] } grep { lc $_->[0] eq $name } @{ $req->{headers} };
}

sub spec_ok {
    my ($spec, $v, $t) = @_;
    return !defined $v if !defined $spec;
    return 0 unless defined $v;
    return $v =~ $spec if ref $spec eq 'Regexp';
    return scalar grep { spec_ok($_, $v, $t) } @$spec if ref $spec eq 'ARRAY';
    return $v eq expand($spec, $t);
}

sub spec_text {
    my ($spec, $t) = @_;
    return 'absent' unless defined $spec;
    return "/$spec/" if ref $spec eq 'Regexp';
    return join(' or ', map { spec_text($_, $t) } @$spec) if ref $spec eq 'ARRAY';
    return "'" . expand($spec, $t) . "'";
}

# check(EXP, T, RESULT, VIEW): the problems, as a list of sentences (none: the shape passed).
sub check {
    my ($exp, $t, $res, $view) = @_;
    return check($exp->{ $t->{name} }, $t, $res, $view) if exists $exp->{plain};
    if ($exp->{any}) {
        my @why;
        for my $i (0 .. $#{ $exp->{any} }) {
            my @p = check($exp->{any}[$i], $t, $res, $view);
            return () unless @p;
            push @why, "(" . ($i + 1) . ") " . join('; ', @p);
        }
        return ("matches none of the allowed outcomes: " . join(' | ', @why));
    }
    my @p;
    my @resp = @{ $res->{responses} };
    my @want = @{ $exp->{responses} };
    my $got_st = join(', ', map { $_->{status} . ($_->{complete} ? '' : ' (incomplete)') } @resp) || 'no response';
    my $want_st = join(', ', map { ref $_ ? join('/', @$_) : $_ } @want);
    if (@resp != @want || grep { !$_->{complete} } @resp) {
        push @p, "client got [$got_st], want [$want_st]";
    } else {
        for my $i (0 .. $#want) {
            my @ok = ref $want[$i] ? @{ $want[$i] } : ($want[$i]);
            my $r = $resp[$i];
            if (!grep { $_ == $r->{status} } @ok) {
                push @p, "response " . ($i + 1) . " is $r->{status}, want " . join('/', @ok)
                       . ($r->{headers}{'x-raw-broker'} ? " (from broker $r->{headers}{'x-raw-broker'})" : '');
            } elsif ($r->{status} == 200) {
                my $from = $r->{headers}{'x-raw-broker'} // 'not a broker';
                my $rq = $exp->{reqs}[$i] // {};
                push @p, "response " . ($i + 1) . " came from $from, want $rq->{broker}"
                    if $from ne ($rq->{broker} // 'b1');
            } else {
                my @e = lookout_error_problems($r, $r->{status});
                push @p, "response " . ($i + 1) . " ($r->{status}) is not lookout's own error: " . join('; ', @e) if @e;
            }
        }
    }
    if (defined $exp->{close} && @resp) {
        my $closed = $res->{how} eq 'eof' || $res->{how} eq 'reset';
        my $says = ($resp[-1]{headers}{connection} // '') =~ /\bclose\b/i;
        if ($exp->{close}) {
            push @p, "lookout did not close the connection (how: $res->{how})" unless $closed;
            push @p, "the last response does not say Connection: close" if $closed && !$says && $resp[-1]{status} != 200;
        } else {
            push @p, "lookout closed the connection (how: $res->{how})" if $closed;
        }
    }
    # The brokers: never a framing error, exactly the listed requests, nothing left unfinished.
    for my $e (@{ $view->{errors} }) {
        push @p, "broker $e->{broker} could not parse what lookout forwarded: $e->{error}";
    }
    my @got = @{ $view->{reqs} };
    my @wr = @{ $exp->{reqs} };
    if (@got != @wr) {
        push @p, sprintf('brokers parsed %d request(s) [%s], want %d [%s]', scalar @got,
                         join(', ', map { "$_->{method} $_->{target} to $_->{broker}" } @got), scalar @wr,
                         join(', ', map { "$_->{method} $_->{target} to $_->{broker}" } @wr));
    } else {
        for my $i (0 .. $#wr) {
            my ($g, $w) = ($got[$i], $wr[$i]);
            my $n = 'forwarded request ' . ($i + 1);
            push @p, "$n went to $g->{broker}, want $w->{broker}" if $g->{broker} ne $w->{broker};
            push @p, "$n method $g->{method}, want $w->{method}" if $g->{method} ne $w->{method};
            my $wt = expand($w->{target}, $t);
            push @p, "$n target '$g->{target}', want '$wt'" if $g->{target} ne $wt;
            my $wb = expand($w->{body}, $t);
            push @p, sprintf("%s body %d bytes '%s', want %d bytes '%s'", $n, length $g->{body},
                             substr($g->{body}, 0, 60), length $wb, substr($wb, 0, 60)) if $g->{body} ne $wb;
            push @p, "$n is chunked with an empty body" if $wb eq '' && $g->{framing} eq 'chunked';
            my %hdr = %{ $w->{hdr} };
            unless (exists $hdr{host}) {
                my $n2 = $w->{broker} eq 'b2' ? 2 : 1;
                $hdr{host} = [ "{H$n2}", $CTX{internal}{ $w->{broker} } ];
            }
            for my $h (sort keys %hdr) {
                my @v = hdr_values($g, $h);
                if (@v > 1) { push @p, "$n has " . scalar(@v) . " $h fields"; next }
                push @p, "$n $h is " . (defined $v[0] ? "'$v[0]'" : 'absent') . ", want " . spec_text($hdr{$h}, $t)
                    unless spec_ok($hdr{$h}, $v[0], $t);
            }
        }
    }
    for my $k (sort keys %{ $view->{pending} }) {
        next unless $view->{pending}{$k} && !$view->{closed}{$k};
        push @p, "lookout left $view->{pending}{$k} bytes of an unfinished request on upstream connection $k";
    }
    s/\r?\n/\\n/g for @p;    # one line each, for the summary
    return @p;
}

# describe(EXP, T): the expectation in words, for the diagnostic.
sub describe {
    my ($exp, $t) = @_;
    return describe($exp->{ $t->{name} }, $t) if exists $exp->{plain};
    return join(' OR ', map { '(' . describe($_, $t) . ')' } @{ $exp->{any} }) if $exp->{any};
    my $st = join(', ', map { ref $_ ? join('/', @$_) : $_ } @{ $exp->{responses} });
    my $close = !defined $exp->{close} ? '' : $exp->{close} ? ' then a close' : ', connection kept open';
    my $reqs = join(', ', map {
        my $b = expand($_->{body}, $t);
        "$_->{method} " . expand($_->{target}, $t) . (length $b ? ' with a ' . length($b) . '-byte body' : '') . " to $_->{broker}"
    } @{ $exp->{reqs} }) || 'nothing';
    return "client gets [$st]$close; brokers get $reqs";
}

# What happened, for the diagnostic: the client's side and each upstream connection.
sub story {
    my ($t, $raw, $res, $view) = @_;
    my $s = "  client sent (" . length($raw) . " bytes, $t->{name}):\n" . show($raw) . "\n";
    $s .= "  client got (" . ($res->{how} // '?') . "):\n" . show($res->{reply}) . "\n";
    for my $k (sort keys %{ $view->{raw} }) {
        $s .= "  upstream $k received" . ($view->{closed}{$k} ? " (closed by $view->{closed}{$k})" : '') . ":\n"
            . show($view->{raw}{$k}) . "\n";
    }
    $s .= "  no upstream bytes\n" unless %{ $view->{raw} };
    return $s;
}

# settle_all(QUIET, MAX): wait until no broker's log has grown for QUIET seconds.
sub settle_all {
    my ($quiet, $max) = @_;
    my $end = time + $max;
    my $size = join ',', map { -s $_->log_file } @{ $CTX{brokers} };
    my $since = time;
    while (time < $end) {
        sleep 0.03;
        my $now = join ',', map { -s $_->log_file } @{ $CTX{brokers} };
        if ($now ne $size) { ($size, $since) = ($now, time); next }
        return 1 if time - $since >= $quiet;
    }
    return 0;
}

# The table proves nothing if the backend is lenient: straight to a RawBroker, what a strict
# server must refuse is refused, and what it must split is split.
sub backend_is_strict {
    my ($b) = @_;
    my $h = "Host: " . $b->addr . "\r\n";
    my @cases = (
        [ 'two requests', "GET /1 HTTP/1.1\r\n$h\r\nPOST /2 HTTP/1.1\r\n${h}Content-Length: 2\r\n\r\nokGET /3 HTTP/1.1\r\n$h\r\n",
          'GET /1|POST /2 ok|GET /3' ],
        [ 'chunked body with extensions and a trailer', "POST /c HTTP/1.1\r\n${h}Transfer-Encoding: chunked\r\n\r\n2;a=b\r\nok\r\n0\r\nX: 1\r\n\r\n",
          'POST /c ok' ],
        [ 'Content-Length with Transfer-Encoding', "POST /x HTTP/1.1\r\n${h}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
          'error: Transfer-Encoding and Content-Length' ],
        [ 'obs-fold', "GET /x HTTP/1.1\r\n${h}X: a\r\n b\r\n\r\n", 'error: obs-fold' ],
        [ 'bare LF', "GET /x HTTP/1.1\n$h\r\n", 'error: bare LF in the head' ],
        [ 'no Host', "GET /x HTTP/1.1\r\n\r\n", 'error: no Host on HTTP/1.1' ],
        [ 'a bad chunk extension', "POST /x HTTP/1.1\r\n${h}Transfer-Encoding: chunked\r\n\r\n2;=b\r\nok\r\n0\r\n\r\n",
          'error: bad chunk line' ],
    );
    for my $c (@cases) {
        my ($what, $bytes, $want) = @$c;
        my $m = $b->mark;
        http_raw('127.0.0.1', $b->port, $bytes, timeout => 2, until => qr/\{"ok":(?:true|false)\}(?![\s\S]*HTTP\/1\.1)/);
        $b->settle(0.1, 2);
        my $got = join '|', map { $_->{ev} eq 'req' ? "$_->{method} $_->{target}" . (length $_->{body} ? " $_->{body}" : '')
                                                     : "error: $_->{error}" }
                            grep { $_->{ev} eq 'req' || $_->{ev} eq 'error' } $b->events_since($m);
        is($got, $want, "RawBroker alone: $what");
    }
}

sub start_instance {
    my $dir = $CTX{dir};
    $CTX{lk} = start_lookout(dir => $dir, name => "lookout-" . ++$CTX{starts}, conf => <<"EOF");
[lookout]
workers = 1
tls.certificate = $CTX{certs}{edge_crt}
tls.key = $CTX{certs}{edge_key}
max_header_bytes = 16k
timeout.client_header = 2s
timeout.response = 3s
timeout.idle = 20s

[pulsar prod]
internalListenerName = internal
lookupListenerName = external
bind = 127.0.0.1

[broker prod/b1]
advertisedListeners = internal:http://$CTX{internal}{b1},external:http://b1.lookout.test:$CTX{s},external:https://b1.lookout.test:$CTX{t}

[broker prod/b2]
advertisedListeners = internal:http://$CTX{internal}{b2},external:http://b2.lookout.test:$CTX{s},external:https://b2.lookout.test:$CTX{t}
EOF
    return $CTX{lk}->started;
}

sub main {
    need_modules('IO::Socket::SSL');
    need_tools('openssl');
    require IO::Socket::SSL;
    $CTX{certs} = test_certs();
    $CTX{dir} = tmp_dir();
    my @b = map { RawBroker->start(dir => $CTX{dir}, name => $_, port => free_port()) } qw(b1 b2);
    $CTX{brokers} = \@b;
    $CTX{internal} = { map { $_->name => $_->addr } @b };
    ($CTX{s}, $CTX{t}) = free_ports(2);
    backend_is_strict($b[0]);
    ok(start_instance(), 'lookout started') or BAIL_OUT('lookout did not start');

    my @transports = ({ name => 'plain', tls => 0, port => $CTX{s}, scheme => 'http' },
                      { name => 'tls', tls => 1, port => $CTX{t}, scheme => 'https' });
    @transports = grep { $_->{name} eq $ENV{SMUGGLING_TRANSPORT} } @transports if $ENV{SMUGGLING_TRANSPORT};
    my @shapes = shapes();
    my %seen;
    $seen{ $_->[0] }++ and die "duplicate shape name: $_->[0]" for @shapes;
    note(scalar(@shapes) . " shapes");
    @shapes = grep { $_->[0] =~ /$ENV{SMUGGLING_ONLY}/ } @shapes if $ENV{SMUGGLING_ONLY};

    my @failed;
    for my $t (@transports) {
        for my $shape (@shapes) {
            my ($name, $raw, $exp, $note) = @$shape;
            $raw = expand($raw, $t);
            my %marks = map { $_->name => $_->mark } @b;
            my $res = exchange($t, $raw, want_count($exp, $t));
            # Whatever lookout forwards, it forwards before the client's exchange ends;
            # wait until both brokers have been quiet for a moment.
            settle_all(0.12, 2);
            my $view = broker_view(\%marks);
            my @p = check($exp, $t, $res, $view);
            unless ($CTX{lk}->alive) {
                push @p, 'lookout died: ' . $CTX{lk}->exit_text;
                start_instance() or BAIL_OUT('lookout did not restart');
            }
            ok(!@p, "$t->{name}: $name") or do {
                diag("  $_") for @p;
                diag("  expected: " . describe($exp, $t));
                diag("  note: $note");
                diag(story($t, $raw, $res, $view));
                push @failed, [ $t->{name}, $name, \@p ];
            };
            # A broker connection left mid-request would mix this shape's bytes into the
            # next one's: start the next shape from clean upstream connections.
            my %messy = map { (split /#/)[0] => 1 } grep { $view->{pending}{$_} && !$view->{closed}{$_} } keys %{ $view->{pending} };
            $_->drop_all for grep { $messy{ $_->name } } @b;
        }
    }
    if (@failed) {
        diag(scalar(@failed) . " of " . (@shapes * @transports) . " shape runs failed:");
        diag("  $_->[0]: $_->[1]: " . join('; ', @{ $_->[2] })) for @failed;
    }
    ok($CTX{lk}->alive, 'lookout is still running');
    $CTX{lk}->stop;
    $_->stop for @b;
    done_testing();
}

main() unless caller;

1;
