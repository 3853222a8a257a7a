"""Kafka wire primitives for lookout's test fixtures (bin/kafka-testbroker, bin/kafka-probe).

Everything here is written by hand from the Kafka protocol guide and the message specs in
apache/kafka clients/src/main/resources/common/message/*.json (the newest versions as copied
in kafka-python's kafka/protocol/schemas/resources/): the primitive types, compact
(KIP-482 "flexible") strings, arrays and tagged fields, the request and response header
versions, and v2 record batches with their CRC-32C. Python standard library only.
"""

import struct

# API keys the fixtures speak, with the first flexible version of each (request and response
# use the same threshold). From each message's "flexibleVersions".
PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS, DESCRIBE_CLUSTER = 0, 1, 3, 10, 18, 60
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_CONFIGS = 32                   # a broker's configs name its listeners
OFFSET_DELETE = 47                      # never flexible; v1 is KIP-1313's first header-v3 RPC
DESCRIBE_QUORUM = 55                    # KIP-853: v2 names the controllers' listeners
STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 88, 89      # KIP-1071
API_NAMES = {PRODUCE: 'Produce', FETCH: 'Fetch', METADATA: 'Metadata',
             FIND_COORDINATOR: 'FindCoordinator', API_VERSIONS: 'ApiVersions',
             DESCRIBE_CLUSTER: 'DescribeCluster', SASL_HANDSHAKE: 'SaslHandshake',
             SASL_AUTHENTICATE: 'SaslAuthenticate', OFFSET_DELETE: 'OffsetDelete',
             DESCRIBE_CONFIGS: 'DescribeConfigs',
             DESCRIBE_QUORUM: 'DescribeQuorum', STREAMS_GROUP_HEARTBEAT: 'StreamsGroupHeartbeat',
             STREAMS_GROUP_DESCRIBE: 'StreamsGroupDescribe'}
# SaslHandshake and OffsetDelete have no flexible version ("flexibleVersions": "none").
FIRST_FLEXIBLE = {PRODUCE: 9, FETCH: 12, METADATA: 9, FIND_COORDINATOR: 3, API_VERSIONS: 3,
                  DESCRIBE_CLUSTER: 0, SASL_AUTHENTICATE: 2, DESCRIBE_QUORUM: 0, DESCRIBE_CONFIGS: 4,
                  STREAMS_GROUP_HEARTBEAT: 0, STREAMS_GROUP_DESCRIBE: 0}
API_BY_NAME = {name.lower(): key for key, name in API_NAMES.items()}
API_BY_NAME.update({'api_versions': API_VERSIONS, 'find_coordinator': FIND_COORDINATOR,
                    'describe_cluster': DESCRIBE_CLUSTER, 'sasl_handshake': SASL_HANDSHAKE,
                    'sasl_authenticate': SASL_AUTHENTICATE, 'offset_delete': OFFSET_DELETE,
                    'describe_quorum': DESCRIBE_QUORUM, 'describe_configs': DESCRIBE_CONFIGS,
                    'streams_group_heartbeat': STREAMS_GROUP_HEARTBEAT,
                    'streams_group_describe': STREAMS_GROUP_DESCRIBE})

# Error codes (org.apache.kafka.common.protocol.Errors).
NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 2, 3, 6
COORDINATOR_NOT_AVAILABLE, UNSUPPORTED_VERSION, UNKNOWN_TOPIC_ID = 15, 35, 100
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
MISMATCHED_ENDPOINT_TYPE = 114

INT32_MIN = -2147483648


class WireError(Exception):
    """A frame that does not parse: too short, a negative length, a bad varint."""


def is_flexible(api_key, version):
    first = FIRST_FLEXIBLE.get(api_key)
    return first is not None and version >= first


def request_header_version(api_key, version):
    """RequestHeader v2 for flexible request versions, else v1 (ClientId, no tags). v0 (no
    ClientId) is only ControlledShutdown v0, which the fixtures never see."""
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key, version):
    """ResponseHeader v1 (with tags) for flexible versions, except ApiVersions: always v0,
    so that a client can read it whatever version the broker picked (ApiVersionsResponse.json
    and KIP-511)."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0


class Writer:
    """Appends Kafka primitive types; `flex` picks compact strings/arrays and enables tags."""

    def __init__(self, flex=False):
        self.flex = flex
        self.parts = []

    def bytes(self):
        return b''.join(self.parts)

    def raw(self, b):
        self.parts.append(bytes(b))
        return self

    def i8(self, v):
        return self.raw(struct.pack('>b', v))

    def boolean(self, v):
        return self.i8(1 if v else 0)

    def i16(self, v):
        return self.raw(struct.pack('>h', v))

    def i32(self, v):
        return self.raw(struct.pack('>i', v))

    def i64(self, v):
        return self.raw(struct.pack('>q', v))

    def uvarint(self, v):
        return self.raw(uvarint(v))

    def uuid(self, b):
        if len(b) != 16:
            raise ValueError('a uuid is 16 bytes')
        return self.raw(b)

    def string(self, s, classic=False):
        """A (nullable, when s is None) string: int16 length, or a compact uvarint length+1."""
        if s is None:
            return self.i16(-1) if classic or not self.flex else self.uvarint(0)
        b = s.encode('utf-8') if isinstance(s, str) else bytes(s)
        if classic or not self.flex:
            return self.i16(len(b)).raw(b)
        return self.uvarint(len(b) + 1).raw(b)

    def blob(self, b):
        """Nullable bytes (records): int32 length, or a compact uvarint length+1."""
        if b is None:
            return self.i32(-1) if not self.flex else self.uvarint(0)
        if not self.flex:
            return self.i32(len(b)).raw(b)
        return self.uvarint(len(b) + 1).raw(b)

    def array(self, items, each):
        """A (nullable, when items is None) array; each(writer, item) writes one element."""
        if items is None:
            return self.i32(-1) if not self.flex else self.uvarint(0)
        items = list(items)
        if self.flex:
            self.uvarint(len(items) + 1)
        else:
            self.i32(len(items))
        for it in items:
            each(self, it)
        return self

    def struct(self, item, each):
        """A nullable struct field (flexible versions): int8 -1 for null, else 1 and the
        struct, which each(writer, item) writes (the generator's encoding)."""
        if item is None:
            return self.i8(-1)
        self.i8(1)
        each(self, item)
        return self

    def tags(self, fields=None):
        """The tagged-field section of a flexible struct: {tag: bytes}, written in tag order.
        A no-op in non-flexible versions."""
        if not self.flex:
            return self
        fields = fields or {}
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag).uvarint(len(fields[tag])).raw(fields[tag])
        return self


class Reader:
    """Reads Kafka primitive types from a bytes object, with bounds checks."""

    def __init__(self, data, flex=False):
        self.data = bytes(data)
        self.pos = 0
        self.flex = flex

    def left(self):
        return len(self.data) - self.pos

    def take(self, n):
        if n < 0 or n > self.left():
            raise WireError('need %d bytes at offset %d, have %d' % (n, self.pos, self.left()))
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def rest(self):
        return self.take(self.left())

    def _unpack(self, fmt, n):
        return struct.unpack(fmt, self.take(n))[0]

    def i8(self):
        return self._unpack('>b', 1)

    def boolean(self):
        return self.i8() != 0

    def i16(self):
        return self._unpack('>h', 2)

    def i32(self):
        return self._unpack('>i', 4)

    def i64(self):
        return self._unpack('>q', 8)

    def uuid(self):
        return self.take(16)

    def uvarint(self):
        v = shift = 0
        while True:
            if shift > 28:
                raise WireError('uvarint longer than 5 bytes at offset %d' % self.pos)
            b = self.take(1)[0]
            v |= (b & 0x7f) << shift
            if not b & 0x80:
                return v
            shift += 7

    def string(self, classic=False):
        """A nullable string (None for null); classic forces the int16 length form."""
        if classic or not self.flex:
            n = self.i16()
            if n < -1:
                raise WireError('string length %d' % n)
        else:
            n = self.uvarint() - 1
        if n == -1:
            return None
        return self.take(n).decode('utf-8', errors='replace')

    def blob(self):
        n = self.i32() if not self.flex else self.uvarint() - 1
        if n < -1:
            raise WireError('bytes length %d' % n)
        return None if n == -1 else self.take(n)

    def array(self, each):
        """A nullable array (None for null); each(reader) reads one element."""
        n = self.i32() if not self.flex else self.uvarint() - 1
        if n < -1:
            raise WireError('array length %d' % n)
        if n == -1:
            return None
        if n > self.left():   # every element takes at least one byte
            raise WireError('array of %d elements in %d bytes' % (n, self.left()))
        return [each(self) for _ in range(n)]

    def struct(self, each):
        """A nullable struct field: None for null (int8 -1), else each(reader)."""
        present = self.i8()
        if present < 0:
            return None
        if present != 1:
            raise WireError('nullable struct marker %d' % present)
        return each(self)

    def tags(self):
        """The tagged-field section of a flexible struct, as {tag: bytes}; {} when not flex."""
        if not self.flex:
            return {}
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out


def uvarint(v):
    if v < 0:
        raise ValueError('uvarint of a negative number')
    out = bytearray()
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v):
    """A signed (zigzag) varint, as in record fields."""
    return uvarint((v << 1) ^ (v >> 63))


def read_varint(r):
    u = r.uvarint()
    return (u >> 1) ^ -(u & 1)


# CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the record batch checksum.
_CRC32C = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C.append(_c)


def crc32c(data):
    c = 0xffffffff
    for b in data:
        c = _CRC32C[(c ^ b) & 0xff] ^ (c >> 8)
    return c ^ 0xffffffff


def record_batch(base_offset, records, timestamp_ms, leader_epoch=-1):
    """A magic-2 RecordBatch (uncompressed, no producer id) of (key, value) pairs; key or
    value may be None. Layout from the protocol guide's "Record Batch" section."""
    body = Writer()
    recs = []
    for i, (key, value) in enumerate(records):
        r = bytearray(b'\x00')               # attributes
        r += varint(0)                       # timestampDelta
        r += varint(i)                       # offsetDelta
        for f in (key, value):
            if f is None:
                r += varint(-1)
            else:
                r += varint(len(f)) + f
        r += varint(0)                       # headers
        recs.append(varint(len(r)) + bytes(r))
    body.i16(0)                              # attributes: no compression, CreateTime
    body.i32(len(records) - 1)               # lastOffsetDelta
    body.i64(timestamp_ms).i64(timestamp_ms)  # baseTimestamp, maxTimestamp
    body.i64(-1).i16(-1).i32(-1)             # producerId, producerEpoch, baseSequence
    body.i32(len(records))
    for r in recs:
        body.raw(r)
    after_crc = body.bytes()
    head = Writer().i32(leader_epoch).i8(2).raw(struct.pack('>I', crc32c(after_crc)))
    tail = head.bytes() + after_crc
    return struct.pack('>qi', base_offset, len(tail)) + tail


def split_batches(records):
    """Splits a records field into (base_offset, last_offset_delta, magic, batch bytes)
    tuples; raises WireError on a truncated batch."""
    out = []
    pos = 0
    while pos < len(records):
        if len(records) - pos < 61:           # the v2 batch header is 61 bytes
            raise WireError('truncated record batch header')
        base, length = struct.unpack_from('>qi', records, pos)
        if length < 49 or pos + 12 + length > len(records):
            raise WireError('record batch length %d' % length)
        magic = records[pos + 16]
        delta = struct.unpack_from('>i', records, pos + 23)[0]
        out.append((base, delta, magic, records[pos:pos + 12 + length]))
        pos += 12 + length
    return out


def frame(payload):
    """A size-prefixed frame."""
    return struct.pack('>i', len(payload)) + payload


def recv_exact(sock, n):
    """n bytes from a socket, or None if the peer closed first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 65536))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
