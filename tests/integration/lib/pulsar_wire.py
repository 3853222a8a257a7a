"""Pulsar binary-protocol primitives for lookout's test fixtures (bin/pulsar-testbroker,
bin/pulsar-probe). Python standard library only.

Written from the protocol description (pulsar.apache.org "Pulsar binary protocol
specification") and the field numbers of PulsarApi.proto (../shared/facts/pulsar.md §4):

  - a protobuf (proto2) wire codec driven by small schemas: varints (uint64, int64, int32,
    uint32, bool, enum), length-delimited strings, bytes and nested messages, repeated
    fields; fixed32/fixed64 fields are read and kept. Fields a schema does not name are
    kept in "_unknown" as [number, wire type, hex of the value] and written back as they
    came, after the known ones;
  - the frames: simple commands [totalSize][commandSize][BaseCommand] and payload
    commands [totalSize][commandSize][BaseCommand][0x0e02 size BrokerEntryMetadata]
    [0x0e01 CRC32C][metadataSize][MessageMetadata][payload], the checksum covering
    metadataSize to the end;
  - CRC-32C and base-128 varints, shared with the Kafka fixtures (kafka_wire.py).
"""

import struct

import kafka_wire
from kafka_wire import crc32c  # noqa: F401  (re-exported: Castagnoli, reflected)

MAGIC_CRC32C = 0x0e01                 # Commands.magicCrc32c
MAGIC_BROKER_ENTRY_METADATA = 0x0e02  # Commands.magicBrokerEntryMetadata
MAX_PROTOCOL_VERSION = 21             # ProtocolVersion: v20 added TOPIC_MIGRATED
U64 = (1 << 64) - 1


class WireError(Exception):
    """Bytes that do not parse: truncated, a bad varint or wire type, a bad size."""


# ---- command types (BaseCommand.Type; each sub-command's field number is its value) ------

TYPES = {
    2: 'CONNECT', 3: 'CONNECTED', 4: 'SUBSCRIBE', 5: 'PRODUCER', 6: 'SEND', 7: 'SEND_RECEIPT',
    8: 'SEND_ERROR', 9: 'MESSAGE', 10: 'ACK', 11: 'FLOW', 12: 'UNSUBSCRIBE', 13: 'SUCCESS',
    14: 'ERROR', 15: 'CLOSE_PRODUCER', 16: 'CLOSE_CONSUMER', 17: 'PRODUCER_SUCCESS', 18: 'PING',
    19: 'PONG', 20: 'REDELIVER_UNACKNOWLEDGED_MESSAGES', 21: 'PARTITIONED_METADATA',
    22: 'PARTITIONED_METADATA_RESPONSE', 23: 'LOOKUP', 24: 'LOOKUP_RESPONSE',
    25: 'CONSUMER_STATS', 26: 'CONSUMER_STATS_RESPONSE', 27: 'REACHED_END_OF_TOPIC', 28: 'SEEK',
    29: 'GET_LAST_MESSAGE_ID', 30: 'GET_LAST_MESSAGE_ID_RESPONSE', 31: 'ACTIVE_CONSUMER_CHANGE',
    32: 'GET_TOPICS_OF_NAMESPACE', 33: 'GET_TOPICS_OF_NAMESPACE_RESPONSE', 34: 'GET_SCHEMA',
    35: 'GET_SCHEMA_RESPONSE', 36: 'AUTH_CHALLENGE', 37: 'AUTH_RESPONSE', 38: 'ACK_RESPONSE',
    39: 'GET_OR_CREATE_SCHEMA', 40: 'GET_OR_CREATE_SCHEMA_RESPONSE', 68: 'TOPIC_MIGRATED',
    # Pulsar 5.0 (PIP-460/468 scalable topics, PIP-473 transaction-coordinator discovery),
    # the two that carry broker URLs
    71: 'SCALABLE_TOPIC_UPDATE', 80: 'WATCH_TC_ASSIGNMENTS_UPDATE',
}
TYPE_BY_NAME = {v: k for k, v in TYPES.items()}

# ServerError
SERVER_ERRORS = {
    0: 'UnknownError', 1: 'MetadataError', 2: 'PersistenceError', 3: 'AuthenticationError',
    4: 'AuthorizationError', 5: 'ConsumerBusy', 6: 'ServiceNotReady', 9: 'ChecksumError',
    10: 'UnsupportedVersionError', 11: 'TopicNotFound', 12: 'SubscriptionNotFound',
    13: 'ConsumerNotFound', 14: 'TooManyRequests', 17: 'InvalidTopicName',
}
ERROR_BY_NAME = {v: k for k, v in SERVER_ERRORS.items()}

# CommandLookupTopicResponse.LookupType
REDIRECT, CONNECT, FAILED = 0, 1, 2
LOOKUP_TYPES = {REDIRECT: 'Redirect', CONNECT: 'Connect', FAILED: 'Failed'}

# ---- schemas: {field number: (name, kind, repeated)} -------------------------------------
# kind: 'uint64' 'int64' 'uint32' 'int32' 'bool' 'enum' (varints), 'string', 'bytes', or the
# name of another schema (a nested message).

def _s(*fields):
    return {f[0]: (f[1], f[2], len(f) > 3 and f[3] == 'repeated') for f in fields}


SCHEMAS = {
    'KeyValue': _s((1, 'key', 'string'), (2, 'value', 'string')),
    'KeyLongValue': _s((1, 'key', 'string'), (2, 'value', 'uint64')),
    'MessageIdData': _s((1, 'ledgerId', 'uint64'), (2, 'entryId', 'uint64'), (3, 'partition', 'int32'),
                        (4, 'batch_index', 'int32'), (5, 'ack_set', 'int64', 'repeated'),
                        (6, 'batch_size', 'int32'), (7, 'first_chunk_message_id', 'MessageIdData')),
    'FeatureFlags': _s((1, 'supports_auth_refresh', 'bool'), (2, 'supports_broker_entry_metadata', 'bool'),
                       (3, 'supports_partial_producer', 'bool'), (4, 'supports_topic_watchers', 'bool')),
    'MessageMetadata': _s((1, 'producer_name', 'string'), (2, 'sequence_id', 'uint64'),
                          (3, 'publish_time', 'uint64'), (4, 'properties', 'KeyValue', 'repeated'),
                          (5, 'replicated_from', 'string'), (6, 'partition_key', 'string'),
                          (7, 'replicate_to', 'string', 'repeated'), (8, 'compression', 'enum'),
                          (9, 'uncompressed_size', 'uint32'), (11, 'num_messages_in_batch', 'int32'),
                          (12, 'event_time', 'uint64'), (16, 'schema_version', 'bytes'),
                          (18, 'ordering_key', 'bytes'), (24, 'highest_sequence_id', 'uint64'),
                          (25, 'null_value', 'bool'), (26, 'uuid', 'string')),
    'SingleMessageMetadata': _s((1, 'properties', 'KeyValue', 'repeated'), (2, 'partition_key', 'string'),
                                (3, 'payload_size', 'int32'), (4, 'compacted_out', 'bool'),
                                (5, 'event_time', 'uint64'), (8, 'sequence_id', 'uint64'),
                                (9, 'null_value', 'bool')),
    'BrokerEntryMetadata': _s((1, 'broker_timestamp', 'uint64'), (2, 'index', 'uint64')),
    'CommandConnect': _s((1, 'client_version', 'string'), (2, 'auth_method', 'enum'),
                         (5, 'auth_method_name', 'string'), (3, 'auth_data', 'bytes'),
                         (4, 'protocol_version', 'int32'), (6, 'proxy_to_broker_url', 'string'),
                         (7, 'original_principal', 'string'), (8, 'original_auth_data', 'string'),
                         (9, 'original_auth_method', 'string'), (10, 'feature_flags', 'FeatureFlags'),
                         (11, 'proxy_version', 'string')),
    'CommandConnected': _s((1, 'server_version', 'string'), (2, 'protocol_version', 'int32'),
                           (3, 'max_message_size', 'int32'), (4, 'feature_flags', 'FeatureFlags')),
    'CommandSubscribe': _s((1, 'topic', 'string'), (2, 'subscription', 'string'), (3, 'subType', 'enum'),
                           (4, 'consumer_id', 'uint64'), (5, 'request_id', 'uint64'),
                           (6, 'consumer_name', 'string'), (7, 'priority_level', 'int32'),
                           (8, 'durable', 'bool'), (9, 'start_message_id', 'MessageIdData'),
                           (10, 'metadata', 'KeyValue', 'repeated'), (11, 'read_compacted', 'bool'),
                           (13, 'initialPosition', 'enum'), (14, 'replicate_subscription_state', 'bool'),
                           (15, 'force_topic_creation', 'bool')),
    'CommandPartitionedTopicMetadata': _s((1, 'topic', 'string'), (2, 'request_id', 'uint64')),
    'CommandPartitionedTopicMetadataResponse': _s((1, 'partitions', 'uint32'), (2, 'request_id', 'uint64'),
                                                  (3, 'response', 'enum'), (4, 'error', 'enum'),
                                                  (5, 'message', 'string')),
    'CommandLookupTopic': _s((1, 'topic', 'string'), (2, 'request_id', 'uint64'), (3, 'authoritative', 'bool'),
                             (4, 'original_principal', 'string'), (5, 'original_auth_data', 'string'),
                             (6, 'original_auth_method', 'string'), (7, 'advertised_listener_name', 'string'),
                             (8, 'properties', 'KeyValue', 'repeated')),
    'CommandLookupTopicResponse': _s((1, 'brokerServiceUrl', 'string'), (2, 'brokerServiceUrlTls', 'string'),
                                     (3, 'response', 'enum'), (4, 'request_id', 'uint64'),
                                     (5, 'authoritative', 'bool'), (6, 'error', 'enum'), (7, 'message', 'string'),
                                     (8, 'proxy_through_service_url', 'bool')),
    'CommandProducer': _s((1, 'topic', 'string'), (2, 'producer_id', 'uint64'), (3, 'request_id', 'uint64'),
                          (4, 'producer_name', 'string'), (5, 'encrypted', 'bool'),
                          (6, 'metadata', 'KeyValue', 'repeated'), (8, 'epoch', 'uint64'),
                          (9, 'user_provided_producer_name', 'bool'), (10, 'producer_access_mode', 'enum'),
                          (11, 'topic_epoch', 'uint64'), (12, 'txn_enabled', 'bool'),
                          (13, 'initial_subscription_name', 'string')),
    'CommandSend': _s((1, 'producer_id', 'uint64'), (2, 'sequence_id', 'uint64'), (3, 'num_messages', 'int32'),
                      (6, 'highest_sequence_id', 'uint64'), (7, 'is_chunk', 'bool'), (8, 'marker', 'bool')),
    'CommandSendReceipt': _s((1, 'producer_id', 'uint64'), (2, 'sequence_id', 'uint64'),
                             (3, 'message_id', 'MessageIdData'), (4, 'highest_sequence_id', 'uint64')),
    'CommandSendError': _s((1, 'producer_id', 'uint64'), (2, 'sequence_id', 'uint64'), (3, 'error', 'enum'),
                           (4, 'message', 'string')),
    'CommandMessage': _s((1, 'consumer_id', 'uint64'), (2, 'message_id', 'MessageIdData'),
                         (3, 'redelivery_count', 'uint32'), (4, 'ack_set', 'int64', 'repeated'),
                         (5, 'consumer_epoch', 'uint64')),
    'CommandAck': _s((1, 'consumer_id', 'uint64'), (2, 'ack_type', 'enum'),
                     (3, 'message_id', 'MessageIdData', 'repeated'), (4, 'validation_error', 'enum'),
                     (5, 'properties', 'KeyLongValue', 'repeated'), (6, 'txnid_least_bits', 'uint64'),
                     (7, 'txnid_most_bits', 'uint64'), (8, 'request_id', 'uint64')),
    'CommandAckResponse': _s((1, 'consumer_id', 'uint64'), (2, 'txnid_least_bits', 'uint64'),
                             (3, 'txnid_most_bits', 'uint64'), (4, 'error', 'enum'), (5, 'message', 'string'),
                             (6, 'request_id', 'uint64')),
    'CommandFlow': _s((1, 'consumer_id', 'uint64'), (2, 'messagePermits', 'uint32')),
    'CommandUnsubscribe': _s((1, 'consumer_id', 'uint64'), (2, 'request_id', 'uint64')),
    'CommandSuccess': _s((1, 'request_id', 'uint64')),
    'CommandError': _s((1, 'request_id', 'uint64'), (2, 'error', 'enum'), (3, 'message', 'string')),
    'CommandCloseProducer': _s((1, 'producer_id', 'uint64'), (2, 'request_id', 'uint64'),
                               (3, 'assignedBrokerServiceUrl', 'string'),
                               (4, 'assignedBrokerServiceUrlTls', 'string')),
    'CommandCloseConsumer': _s((1, 'consumer_id', 'uint64'), (2, 'request_id', 'uint64'),
                               (3, 'assignedBrokerServiceUrl', 'string'),
                               (4, 'assignedBrokerServiceUrlTls', 'string')),
    'CommandProducerSuccess': _s((1, 'request_id', 'uint64'), (2, 'producer_name', 'string'),
                                 (3, 'last_sequence_id', 'int64'), (4, 'schema_version', 'bytes'),
                                 (5, 'topic_epoch', 'uint64'), (6, 'producer_ready', 'bool')),
    'CommandPing': {},
    'CommandPong': {},
    'CommandRedeliverUnacknowledgedMessages': _s((1, 'consumer_id', 'uint64'),
                                                 (2, 'message_ids', 'MessageIdData', 'repeated'),
                                                 (3, 'consumer_epoch', 'uint64')),
    'CommandTopicMigrated': _s((1, 'resource_id', 'uint64'), (2, 'resource_type', 'enum'),
                               (3, 'brokerServiceUrl', 'string'), (4, 'brokerServiceUrlTls', 'string')),
    # Pulsar 5.0, from PulsarApi.proto on apache/pulsar's master (as apache/pulsar-client-cpp
    # synced it, 983435aae4c2, 2026-07-09)
    'SegmentInfoProto': _s((1, 'segment_id', 'uint64'), (2, 'hash_start', 'uint32'), (3, 'hash_end', 'uint32'),
                           (4, 'state', 'enum'), (5, 'parent_ids', 'uint64', 'repeated'),
                           (6, 'child_ids', 'uint64', 'repeated'), (7, 'created_at_epoch', 'uint64'),
                           (8, 'sealed_at_epoch', 'uint64'), (9, 'created_at_ms', 'uint64'),
                           (10, 'sealed_at_ms', 'uint64'), (11, 'legacy_topic_name', 'string')),
    'SegmentBrokerAddress': _s((1, 'segment_id', 'uint64'), (2, 'broker_url', 'string'),
                               (3, 'broker_url_tls', 'string')),
    'ScalableTopicDAG': _s((1, 'epoch', 'uint64'), (2, 'segments', 'SegmentInfoProto', 'repeated'),
                           (3, 'segment_brokers', 'SegmentBrokerAddress', 'repeated'),
                           (4, 'controller_broker_url', 'string'), (5, 'controller_broker_url_tls', 'string')),
    'CommandScalableTopicUpdate': _s((1, 'session_id', 'uint64'), (2, 'dag', 'ScalableTopicDAG'),
                                     (3, 'error', 'enum'), (4, 'message', 'string'),
                                     (5, 'resolved_topic_name', 'string')),
    'TcAssignment': _s((1, 'tc_id', 'uint64'), (2, 'broker_service_url', 'string'),
                       (3, 'broker_service_url_tls', 'string')),
    'TcAssignmentsSnapshot': _s((1, 'parallelism', 'uint32'), (2, 'assignments', 'TcAssignment', 'repeated')),
    'CommandWatchTcAssignmentsUpdate': _s((1, 'watch_id', 'uint64'), (2, 'snapshot', 'TcAssignmentsSnapshot'),
                                          (3, 'error', 'enum'), (4, 'message', 'string')),
}

# BaseCommand: type = 1, then one optional sub-command per type, at the type's number, under
# the field name PulsarApi.proto gives it.
BASE_FIELDS = {
    2: 'connect', 3: 'connected', 4: 'subscribe', 5: 'producer', 6: 'send', 7: 'send_receipt',
    8: 'send_error', 9: 'message', 10: 'ack', 11: 'flow', 12: 'unsubscribe', 13: 'success', 14: 'error',
    15: 'close_producer', 16: 'close_consumer', 17: 'producer_success', 18: 'ping', 19: 'pong',
    20: 'redeliverUnacknowledgedMessages', 21: 'partitionMetadata', 22: 'partitionMetadataResponse',
    23: 'lookupTopic', 24: 'lookupTopicResponse', 38: 'ackResponse', 68: 'topicMigrated',
    71: 'scalableTopicUpdate', 80: 'watchTcAssignmentsUpdate',
}
BASE_SCHEMAS = {
    2: 'CommandConnect', 3: 'CommandConnected', 4: 'CommandSubscribe', 5: 'CommandProducer', 6: 'CommandSend',
    7: 'CommandSendReceipt', 8: 'CommandSendError', 9: 'CommandMessage', 10: 'CommandAck', 11: 'CommandFlow',
    12: 'CommandUnsubscribe', 13: 'CommandSuccess', 14: 'CommandError', 15: 'CommandCloseProducer',
    16: 'CommandCloseConsumer', 17: 'CommandProducerSuccess', 18: 'CommandPing', 19: 'CommandPong',
    20: 'CommandRedeliverUnacknowledgedMessages', 21: 'CommandPartitionedTopicMetadata',
    22: 'CommandPartitionedTopicMetadataResponse', 23: 'CommandLookupTopic', 24: 'CommandLookupTopicResponse',
    38: 'CommandAckResponse', 68: 'CommandTopicMigrated',
    71: 'CommandScalableTopicUpdate', 80: 'CommandWatchTcAssignmentsUpdate',
}
SCHEMAS['BaseCommand'] = {1: ('type', 'enum', False)}
SCHEMAS['BaseCommand'].update({n: (BASE_FIELDS[n], BASE_SCHEMAS[n], False) for n in BASE_FIELDS})
FIELD_OF_TYPE = {TYPES[n]: BASE_FIELDS[n] for n in BASE_FIELDS}

VARINT_KINDS = ('uint64', 'int64', 'uint32', 'int32', 'bool', 'enum')


# ---- varints -----------------------------------------------------------------------------

def uvarint(v):
    """A base-128 varint of v taken as 64 bits: negative int32/int64 values (and uint64 -1,
    as brokers send for "no request id") become their 10-byte two's complement form."""
    return kafka_wire.uvarint(v & U64)


def read_uvarint(data, pos):
    """(value, next position); at most 10 bytes, as protobuf allows."""
    v = shift = 0
    for i in range(10):
        if pos + i >= len(data):
            raise WireError('truncated varint')
        b = data[pos + i]
        v |= (b & 0x7f) << shift
        if not b & 0x80:
            return v & U64, pos + i + 1
        shift += 7
    raise WireError('varint longer than 10 bytes')


def _signed(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


# ---- messages ----------------------------------------------------------------------------

def decode(schema, data):
    """Decodes a message of `schema` (a name in SCHEMAS or a dict) from bytes into a dict of
    field names; repeated fields are lists, nested messages dicts, bytes fields hex strings.
    Unknown fields go to "_unknown": [[number, wire type, value hex], ...]. Raises WireError."""
    fields = SCHEMAS[schema] if isinstance(schema, str) else schema
    out = {}
    pos = 0
    data = bytes(data)
    while pos < len(data):
        key, pos = read_uvarint(data, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise WireError('field number 0')
        if wt == 0:
            raw_start = pos
            value, pos = read_uvarint(data, pos)
            raw = data[raw_start:pos]
        elif wt == 2:
            n, pos = read_uvarint(data, pos)
            if n > len(data) - pos:
                raise WireError('field %d: length %d past the end' % (num, n))
            value = raw = data[pos:pos + n]
            pos += n
        elif wt == 1 or wt == 5:
            n = 8 if wt == 1 else 4
            if pos + n > len(data):
                raise WireError('truncated fixed%d' % (n * 8))
            value = raw = data[pos:pos + n]
            pos += n
        else:
            raise WireError('field %d: wire type %d' % (num, wt))
        spec = fields.get(num)
        if spec is None or (spec[1] in VARINT_KINDS) != (wt == 0) or \
                (spec[1] not in VARINT_KINDS and wt != 2):
            out.setdefault('_unknown', []).append([num, wt, raw.hex()])
            continue
        name, kind, repeated = spec
        if kind in ('uint64', 'uint32'):
            v = value if kind == 'uint64' else value & 0xffffffff
        elif kind in ('int64', 'int32', 'enum'):
            v = _signed(value, 64)         # negative int32s are sign-extended to 10 bytes
        elif kind == 'bool':
            v = bool(value)
        elif kind == 'string':
            v = value.decode('utf-8', 'replace')
        elif kind == 'bytes':
            v = value.hex()
        else:
            v = decode(kind, value)
        if repeated:
            out.setdefault(name, []).append(v)
        else:
            out[name] = v
    return out


def encode(schema, msg):
    """The bytes of message `msg` (a dict as decode() returns) under `schema`, known fields
    in field-number order, then msg["_unknown"] as given. Bytes fields take bytes or hex."""
    fields = SCHEMAS[schema] if isinstance(schema, str) else schema
    by_name = {spec[0]: (num, spec) for num, spec in fields.items()}
    for name in msg:
        if name != '_unknown' and name not in by_name:
            raise KeyError('%s has no field %r' % (schema, name))
    out = bytearray()
    for num in sorted(fields):
        name, kind, repeated = fields[num]
        if name not in msg or msg[name] is None:
            continue
        for v in (msg[name] if repeated else [msg[name]]):
            if kind in VARINT_KINDS:
                out += uvarint(num << 3) + uvarint(int(v))
            else:
                if kind == 'string':
                    b = v.encode('utf-8')
                elif kind == 'bytes':
                    b = bytes.fromhex(v) if isinstance(v, str) else bytes(v)
                else:
                    b = encode(kind, v)
                out += uvarint(num << 3 | 2) + uvarint(len(b)) + b
    for num, wt, hexval in msg.get('_unknown', []):
        raw = bytes.fromhex(hexval)
        out += uvarint(num << 3 | wt)
        if wt == 2:
            out += uvarint(len(raw))
        out += raw
    return bytes(out)


def command(type_name, fields=None, unknown=None, sub_unknown=None):
    """The BaseCommand bytes of a command: type_name is a TYPES name ("LOOKUP"...) or a
    number (unknown types too); fields the sub-command's fields; unknown / sub_unknown extra
    unknown fields ([number, wire type, hex]) for the BaseCommand and the sub-command."""
    type_id = type_name if isinstance(type_name, int) else TYPE_BY_NAME[type_name]
    msg = {'type': type_id}
    if type_id in BASE_FIELDS:
        sub = dict(fields or {})
        if sub_unknown:
            sub['_unknown'] = list(sub.get('_unknown', [])) + list(sub_unknown)
        msg[BASE_FIELDS[type_id]] = sub
    elif fields:
        raise KeyError('command type %r has no known fields' % type_name)
    if unknown:
        msg['_unknown'] = list(unknown)
    return encode('BaseCommand', msg)


def decode_command(data):
    """(type number, type name or None, sub-command dict, BaseCommand dict)."""
    base = decode('BaseCommand', data)
    if 'type' not in base:
        raise WireError('BaseCommand without a type')
    t = base['type']
    return t, TYPES.get(t), base.get(BASE_FIELDS.get(t), {}), base


# ---- frames ------------------------------------------------------------------------------

def simple_frame(cmd):
    """[totalSize][commandSize][BaseCommand]."""
    return struct.pack('>II', 4 + len(cmd), len(cmd)) + cmd


def payload_section(metadata, payload, checksum=True):
    """What follows the command in SEND: [0x0e01][CRC32C][metadataSize][metadata][payload],
    the checksum over metadataSize..end (or, checksum=False, the section without it, as
    clients before protocol v6 sent it)."""
    body = struct.pack('>I', len(metadata)) + metadata + payload
    if not checksum:
        return body
    return struct.pack('>HI', MAGIC_CRC32C, crc32c(body)) + body


def payload_frame(cmd, section, broker_entry_metadata=None):
    """A payload frame: the command, optionally [0x0e02][size][BrokerEntryMetadata] (broker
    to client only), then `section` as payload_section() makes it."""
    extra = b''
    if broker_entry_metadata is not None:
        extra = struct.pack('>HI', MAGIC_BROKER_ENTRY_METADATA, len(broker_entry_metadata)) + broker_entry_metadata
    total = 4 + len(cmd) + len(extra) + len(section)
    return struct.pack('>II', total, len(cmd)) + cmd + extra + section


def split_frame(frame):
    """Splits one whole frame (with its 4-byte totalSize) into a dict: command (bytes),
    and for payload frames: broker_entry_metadata (bytes or None), checksum (int or None),
    checksum_ok, section (the bytes after the command and broker entry metadata, as stored
    and re-sent), metadata (bytes), payload (bytes). Raises WireError."""
    if len(frame) < 8:
        raise WireError('frame shorter than its two sizes')
    total, csize = struct.unpack_from('>II', frame, 0)
    if total != len(frame) - 4:
        raise WireError('totalSize %d for %d bytes' % (total, len(frame) - 4))
    if csize > total - 4:
        raise WireError('commandSize %d over totalSize %d' % (csize, total))
    out = {'command': frame[8:8 + csize]}
    rest = frame[8 + csize:]
    if not rest:
        return out
    out['broker_entry_metadata'] = None
    if len(rest) >= 6 and struct.unpack_from('>H', rest)[0] == MAGIC_BROKER_ENTRY_METADATA:
        n = struct.unpack_from('>I', rest, 2)[0]
        if 6 + n > len(rest):
            raise WireError('broker entry metadata size %d past the end' % n)
        out['broker_entry_metadata'] = rest[6:6 + n]
        rest = rest[6 + n:]
    out['section'] = rest
    out['checksum'] = None
    if len(rest) >= 6 and struct.unpack_from('>H', rest)[0] == MAGIC_CRC32C:
        out['checksum'] = struct.unpack_from('>I', rest, 2)[0]
        rest = rest[6:]
        out['checksum_ok'] = crc32c(rest) == out['checksum']
    if len(rest) < 4:
        raise WireError('payload section without a metadata size')
    n = struct.unpack_from('>I', rest)[0]
    if 4 + n > len(rest):
        raise WireError('metadata size %d past the end' % n)
    out['metadata'] = rest[4:4 + n]
    out['payload'] = rest[4 + n:]
    return out


def batch_entries(payload, count):
    """The single messages of a batch payload: [(SingleMessageMetadata dict, bytes)]."""
    out = []
    pos = 0
    for _ in range(count):
        if pos + 4 > len(payload):
            raise WireError('truncated batch entry')
        n = struct.unpack_from('>I', payload, pos)[0]
        meta = decode('SingleMessageMetadata', payload[pos + 4:pos + 4 + n])
        pos += 4 + n
        size = meta.get('payload_size', 0)
        if size < 0 or pos + size > len(payload):
            raise WireError('batch entry payload size %d' % size)
        out.append((meta, payload[pos:pos + size]))
        pos += size
    return out


class FrameReader:
    """Cuts whole frames out of a byte stream: feed() bytes, then next() gives the next
    frame (with its size prefix) or None until more bytes come. A totalSize over `limit`
    (or under 4) raises WireError, before anything is buffered for it."""

    def __init__(self, limit):
        self.limit = limit
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data

    def next(self):
        if len(self.buf) < 4:
            return None
        total = struct.unpack_from('>I', self.buf)[0]
        if total < 4 or total > self.limit:
            raise WireError('frame size %d' % total)
        if len(self.buf) < 4 + total:
            return None
        frame = bytes(self.buf[:4 + total])
        del self.buf[:4 + total]
        return frame


def parse_url(url):
    """(scheme, host, port) of pulsar://host:port or pulsar+ssl://host:port; None if not."""
    scheme, sep, rest = (url or '').partition('://')
    if not sep or scheme not in ('pulsar', 'pulsar+ssl', 'http', 'https'):
        return None
    rest = rest.rstrip('/')
    host, sep, port = rest.rpartition(':')
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return scheme, host, int(port)
