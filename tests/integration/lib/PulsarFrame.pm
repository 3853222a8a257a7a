package PulsarFrame;

# Pulsar binary frames written by hand, for tests that send what no client library would:
# the protobuf wire format's pieces (a varint, a varint field, a length-delimited field,
# by Pulsar's field numbers in PulsarApi.proto) and a simple frame around a BaseCommand
# ([totalSize][commandSize][command], both sizes big-endian u32), with any bytes after
# the command inside totalSize. The test brokers' own writer is pulsar_wire.py.

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(varint fv fb frame);

sub varint {
    my ($v) = @_;
    my $out = '';
    while ($v >= 0x80) { $out .= chr(($v & 0x7f) | 0x80); $v >>= 7 }
    return $out . chr($v);
}

# fv(FIELD, VALUE): a varint field; fb(FIELD, BYTES): a length-delimited one.
sub fv { my ($n, $v) = @_; return varint($n << 3) . varint($v) }
sub fb { my ($n, $b) = @_; return varint($n << 3 | 2) . varint(length $b) . $b }

# frame(COMMAND [, AFTER]): the frame of a BaseCommand's bytes, AFTER (default none) after
# the command within totalSize (a payload, or bytes where none belong).
sub frame {
    my ($cmd, $after) = @_;
    $after //= '';
    return pack('NN', 4 + length($cmd) + length($after), length $cmd) . $cmd . $after;
}

1;
