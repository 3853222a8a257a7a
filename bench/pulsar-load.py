#!/usr/bin/env python3
"""pulsar-load.py: the Python twin of bench/pulsar-load.c, the pulsar scenario's load program
(bench/run runs this one with --pulsar-python, bench/soak always; bench/README.md says how to
read it). A Pulsar binary-protocol client of our own, built on the test fixtures' encoder
(tests/integration/lib/pulsar_wire.py), that prints one JSON line and exits 0 when every
message was stored and (in throughput mode) came back intact.

It looks the topic up through SERVICE (host:port of a pulsar:// service URL), following
Redirects as clients do, then connects to the owner that the last answer names and:

throughput mode (the default): one producer sends COUNT messages of SIZE bytes, one per
SEND (no batching), with at most WINDOW of them awaiting their SEND_RECEIPT, and times that
(msgs/s, MB/s, and each message's SEND to SEND_RECEIPT latency); then one consumer
subscribes from the earliest entry, grants RECEIVER permits with FLOW and half as many
again each time half are used (as the Java client's receiver queue does), acknowledges
what came in groups (individual ACKs, a list each), times that, and checks that every
message arrived once with its payload section (checksum, metadata and payload) byte for
byte what was sent. Each payload holds a run id and its sequence number, and the rest is a
slice of a random block picked by both, so another run's message, a duplicate or a changed
byte is told apart (the block is printable ASCII, as text payloads are). Every SEND frame is built (checksum included) before timing starts.

latency mode (--latency): COUNT SENDs one at a time, the next only after the previous
SEND_RECEIPT: each latency is one SEND round trip (p50, p99, max), which is what a proxy
adds to.

Each run uses topics of its own (bench-RUNID, lat-RUNID), so no run reads another's.

--map FROM=TO dials TO wherever a URL or SERVICE names FROM (host:port): a byte forwarder
that cannot rewrite broker addresses (nginx stream, HAProxy mode tcp) is reached for every
broker that way. Every address dialled is listed in the output ("connected_to"), so the
caller can check where the bytes went.

Bounded: --timeout SECONDS covers the whole run; past it, one JSON line with "ok": false and
exit 3. Failures exit 1, usage errors 2.
"""

import argparse
import json
import os
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True          # nothing written into the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'integration', 'lib'))
import pulsar_wire as pw  # noqa: E402

PRODUCER_ID = 1
CONSUMER_ID = 1
WARMUP_LATENCY = 200     # latency mode: round trips before timing
WARM_UP = 10000          # messages the readers go through before timing (see warm_up)
ACK_RECEIPT_ID = 1 << 40 # request_id of the last ACK
T_SEND_RECEIPT = pw.TYPE_BY_NAME['SEND_RECEIPT']
T_MESSAGE = pw.TYPE_BY_NAME['MESSAGE']
T_PING = pw.TYPE_BY_NAME['PING']
T_ACK_RESPONSE = pw.TYPE_BY_NAME['ACK_RESPONSE']


class Failed(Exception):
    pass


class TimedOut(Exception):
    pass


def varint_at(b, pos):
    """A base-128 varint in b at pos: (value, next position). Hot-path twin of
    pw.read_uvarint for the few fields read per message."""
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7f) << shift
        if c < 0x80:
            return v, pos
        shift += 7


def fields(b, pos, end):
    """The top-level fields of the protobuf message b[pos:end]: {number: varint value, or
    (start, end) of a length-delimited value}; the last one wins."""
    out = {}
    while pos < end:
        key, pos = varint_at(b, pos)
        wt = key & 7
        if wt == 0:
            out[key >> 3], pos = varint_at(b, pos)
        elif wt == 2:
            n, pos = varint_at(b, pos)
            out[key >> 3] = (pos, pos + n)
            pos += n
        elif wt == 1:
            pos += 8
        elif wt == 5:
            pos += 4
        else:
            raise Failed('wire type %d in a command' % wt)
    return out


def ack_frame(consumer_id, ids, request_id=None):
    """An ACK frame (Individual) of message ids given as the bytes of their MessageIdData, as
    they came in each MESSAGE: written field by field (CommandAck: consumer_id 1, ack_type 2,
    message_id 3, request_id 8; it is BaseCommand field 10), without decoding them."""
    sub = bytearray(pw.uvarint(1 << 3) + pw.uvarint(consumer_id) + pw.uvarint(2 << 3) + pw.uvarint(0))
    for raw in ids:
        sub += pw.uvarint(3 << 3 | 2) + pw.uvarint(len(raw)) + raw
    if request_id is not None:
        sub += pw.uvarint(8 << 3) + pw.uvarint(request_id)
    t = pw.TYPE_BY_NAME['ACK']
    return pw.simple_frame(pw.uvarint(1 << 3) + pw.uvarint(t) + pw.uvarint(t << 3 | 2) + pw.uvarint(len(sub)) +
                           bytes(sub))


class Conn:
    """One connection to a broker (or a proxy), after CONNECT/CONNECTED. What it reads goes
    into one buffer of a fixed size, made once (a buffer that grows and is copied costs
    fresh pages, and page faults, all along a run)."""

    def __init__(self, load, addr):
        self.load = load
        dial = load.maps.get(addr, addr)
        host, port = dial.rsplit(':', 1)
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=load.left())
        except OSError as e:
            raise Failed('connect to %s: %s' % (dial, e))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        load.connected_to.append(dial)
        self.bound_at = time.monotonic()
        self.init_buffer(load)
        self.request_id = 0
        r = self.call('CONNECT', {'client_version': 'lookout-bench-pulsar-load',
                                  'protocol_version': pw.MAX_PROTOCOL_VERSION}, ('CONNECTED',))

    def init_buffer(self, load):
        self.buf = bytearray(max(1 << 20, 4 * (load.a.size + (1 << 16))))
        self.view = memoryview(self.buf)
        self.pos = self.end = 0     # the unread bytes: buf[pos:end]

    def bound(self):
        """The socket's timeout: what is left of --timeout, renewed at most once a second
        (each renewal is a system call)."""
        now = time.monotonic()
        if now - self.bound_at > 1.0:
            self.sock.settimeout(self.load.left())
            self.bound_at = now

    def send(self, data):
        self.bound()
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise TimedOut('sending')
        except OSError as e:
            raise Failed('send: %s' % e)

    def fill(self):
        """Reads what is there (waiting for at least one byte), after the unread bytes,
        which first move to the start of the buffer when little room is left after them."""
        n = self.end - self.pos
        if n == 0:
            self.pos = self.end = 0
        elif len(self.buf) - self.end < len(self.buf) // 4:
            self.buf[:n] = self.buf[self.pos:self.end]
            self.pos, self.end = 0, n
        got = self.read_into(self.view[self.end:])
        if not got:
            raise Failed('the connection was closed')
        self.end += got

    def read_into(self, view):
        self.load.left()
        self.bound()
        try:
            return self.sock.recv_into(view)
        except socket.timeout:
            raise TimedOut('waiting for the broker')
        except OSError as e:
            raise Failed('recv: %s' % e)

    def frame(self):
        """The next whole frame in the buffer: (start, end) of it in self.buf with its size
        prefix, or None."""
        b, pos = self.buf, self.pos
        if self.end - pos < 4:
            return None
        total = struct.unpack_from('>I', b, pos)[0]
        if self.end - pos < 4 + total:
            if 4 + total > len(b):
                raise Failed('a frame of %d bytes, over the client\'s buffer' % (4 + total))
            return None
        self.pos = pos + 4 + total
        return pos, pos + 4 + total

    def command_of(self, start, end):
        """(type, BaseCommand fields, end of the command) of the frame at start."""
        csize = struct.unpack_from('>I', self.buf, start + 4)[0]
        cend = start + 8 + csize
        if cend > end:
            raise Failed('commandSize %d over its frame' % csize)
        base = fields(self.buf, start + 8, cend)
        return base.get(1, 0), base, cend

    def next_frame(self):
        """The next frame, read when it is not there yet."""
        while True:
            f = self.frame()
            if f is not None:
                return f
            self.fill()

    def next_of(self, want, doing):
        """The next frame, which must be a command of type want (PINGs are answered on the
        way): (start, end, BaseCommand fields, end of the command)."""
        while True:
            s, e = self.next_frame()
            t, base, cend = self.command_of(s, e)
            if t == want:
                return s, e, base, cend
            if t != T_PING:
                _, name, f, _ = pw.decode_command(bytes(self.buf[s + 8:cend]))
                raise Failed('%s: %s %s' % (doing, name or t, json.dumps(f, sort_keys=True)))
            self.send(pw.simple_frame(pw.command('PONG')))

    def call(self, type_name, fields_, want):
        """Sends a simple command (request_id added when the command has one) and waits for
        its answer, one of the types in want: (type name, BaseCommand dict, sub-command
        dict). PINGs are answered on the way; anything else unexpected fails."""
        schema = pw.SCHEMAS[pw.BASE_SCHEMAS[pw.TYPE_BY_NAME[type_name]]]
        f = dict(fields_)
        rid = None
        if any(spec[0] == 'request_id' for spec in schema.values()):
            self.request_id += 1
            rid = f['request_id'] = self.request_id
        self.send(pw.simple_frame(pw.command(type_name, f)))
        while True:
            s, e = self.next_frame()
            t, name, sub, base = pw.decode_command(pw.split_frame(bytes(self.buf[s:e]))['command'])
            if t == T_PING:
                self.send(pw.simple_frame(pw.command('PONG')))
                continue
            if name in want and (rid is None or sub.get('request_id', rid) == rid):
                return name, base, sub
            raise Failed('%s answered with %s %s' % (type_name, name or t, json.dumps(sub, sort_keys=True)))


class Replay(Conn):
    """A connection that reads bytes made here and writes nowhere (see Load.warm_up)."""

    def __init__(self, load, data):
        self.load = load
        self.data = data
        self.off = 0
        self.init_buffer(load)

    def send(self, data):
        pass

    def call(self, type_name, fields_, want):
        return None

    def read_into(self, view):
        n = min(len(view), 1 << 16, len(self.data) - self.off)
        if n <= 0:
            raise Failed('warm-up: out of frames')
        view[:n] = self.data[self.off:self.off + n]
        self.off += n
        return n


class Load:
    def __init__(self, a):
        self.a = a
        self.deadline = time.monotonic() + a.timeout
        self.maps = {}
        for m in a.map or []:
            frm, sep, to = m.partition('=')
            if not sep or ':' not in frm or ':' not in to:
                raise SystemExit('pulsar-load: --map %r: want HOST:PORT=HOST:PORT' % m)
            self.maps[frm] = to
        self.connected_to = []
        self.run_id = a.run_id or '%08x' % (int.from_bytes(os.urandom(4), 'big'))
        # Printable ASCII, as text payloads (JSON...) are: the test broker keeps each
        # payload as text too, which random bytes make slow (pypy's utf-8 'replace').
        alphabet = b'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/'
        self.block = bytes(alphabet[b & 63] for b in os.urandom(a.size + 512))
        self.hops = []

    def left(self):
        t = self.deadline - time.monotonic()
        if t <= 0:
            raise TimedOut('past --timeout')
        return t

    def payload(self, seq):
        head = b'%s %010d ' % (self.run_id.encode(), seq)
        off = (seq * 7 + len(self.run_id)) % 512
        return (head + self.block[off:off + self.a.size])[:self.a.size]

    def lookup(self, topic):
        """Looks topic up through the service address, following Redirects: the owner's
        host:port and the connection that asked last (kept when it is the owner's)."""
        addr, authoritative = self.a.service, False
        conn = None
        for _ in range(8):
            if conn is None:
                conn = Conn(self, addr)
            name, _, r = conn.call('LOOKUP', {'topic': topic, 'authoritative': authoritative},
                                   ('LOOKUP_RESPONSE',))
            url = r.get('brokerServiceUrl')
            self.hops.append({'asked': addr, 'response': pw.LOOKUP_TYPES.get(r.get('response'), r.get('response')),
                              'url': url})
            if r.get('response') not in (pw.REDIRECT, pw.CONNECT) or not url:
                raise Failed('LOOKUP %s: %s' % (topic, json.dumps(r, sort_keys=True)))
            u = pw.parse_url(url)
            target = '%s:%d' % (u[1], u[2])
            if r['response'] == pw.CONNECT:
                return target, (conn if target == addr else None)
            authoritative = bool(r.get('authoritative'))
            if target != addr:
                conn.sock.close()
                conn = None
            addr = target
        raise Failed('LOOKUP %s: more than 8 Redirects' % topic)

    def owner(self, topic):
        target, conn = self.lookup(topic)
        if conn is None:
            conn = Conn(self, target)
        return conn

    def send_frames(self, topic, count):
        """The SEND frames of messages 0..count-1, and what a MESSAGE must carry for each
        (the payload section as sent)."""
        frames, sections = [], []
        name = 'bench-%s' % self.run_id
        t0 = int(time.time() * 1000)
        for seq in range(count):
            md = pw.encode('MessageMetadata', {'producer_name': name, 'sequence_id': seq, 'publish_time': t0})
            section = pw.payload_section(md, self.payload(seq))
            cmd = pw.command('SEND', {'producer_id': PRODUCER_ID, 'sequence_id': seq, 'num_messages': 1})
            frames.append(pw.payload_frame(cmd, section))
            sections.append(section)
        return frames, sections

    def producer(self, conn, topic):
        conn.call('PRODUCER', {'topic': topic, 'producer_id': PRODUCER_ID,
                               'producer_name': 'bench-%s' % self.run_id}, ('PRODUCER_SUCCESS',))

    def receipts(self, conn, expect):
        """Reads frames until SEND_RECEIPTs came for every sequence id in expect (a range,
        in order); yields each one's sequence id as it comes."""
        want = expect.start
        while want < expect.stop:
            s, e, base, cend = conn.next_of(T_SEND_RECEIPT, 'while producing')
            sub = fields(conn.buf, *base[7])
            if sub.get(1) != PRODUCER_ID or sub.get(2) != want:
                raise Failed('SEND_RECEIPT for producer %s sequence %s, want %d' % (sub.get(1), sub.get(2), want))
            yield want
            want += 1

    def produce(self, conn, frames):
        """Sends every frame, at most window awaiting their receipt: (seconds, [latency s])."""
        n, window = len(frames), self.a.window
        sent_at = [0.0] * n
        lat = [0.0] * n
        clock = time.perf_counter
        nxt = min(window, n)
        cpu0 = time.process_time()
        t0 = clock()
        for i in range(nxt):
            sent_at[i] = t0
        conn.send(b''.join(frames[:nxt]))
        acked = 0
        for seq in self.receipts(conn, range(n)):
            now = clock()
            lat[seq] = now - sent_at[seq]
            acked += 1
            # Refill when a tenth of the window is free: writes of that many SENDs, however
            # the receipts come in (one by one through a proxy on another core, in bursts
            # straight from the broker), as a client with a send buffer makes them.
            if nxt < n and nxt - acked <= window - max(1, window // 10):
                upto = min(n, acked + window)
                for i in range(nxt, upto):
                    sent_at[i] = now
                conn.send(b''.join(frames[nxt:upto]))
                nxt = upto
        secs = clock() - t0
        self.cpu_produce = time.process_time() - cpu0
        return secs, lat

    def consume(self, conn, topic, sections):
        """Subscribes from the earliest entry and reads every message back: seconds."""
        n, q = len(sections), self.a.receiver
        conn.call('SUBSCRIBE', {'topic': topic, 'subscription': 'bench-%s' % self.run_id, 'subType': 0,
                                'consumer_id': CONSUMER_ID, 'initialPosition': 1}, ('SUCCESS',))
        seen = bytearray(n)
        got = used = 0
        acks = []
        rid = self.run_id.encode()
        clock = time.perf_counter
        cpu0 = time.process_time()
        t0 = clock()
        conn.send(pw.simple_frame(pw.command('FLOW', {'consumer_id': CONSUMER_ID, 'messagePermits': q})))
        while got < n:
            s, e, base, cend = conn.next_of(T_MESSAGE, 'while consuming')
            b = conn.buf
            sub = fields(b, *base[9])
            # The payload section: [magic, CRC32C][metadataSize][metadata][payload], and the
            # payload starts with "RUNID SEQUENCE ": which message this is.
            p = cend + 10 + struct.unpack_from('>I', b, cend + 6)[0]
            try:
                seq = int(b[p + len(rid) + 1:p + len(rid) + 11]) if b[p:p + len(rid)] == rid else -1
            except ValueError:
                seq = -1
            if sub.get(1) != CONSUMER_ID or not 0 <= seq < n:
                raise Failed('MESSAGE for consumer %s of another run or out of range: %r' %
                             (sub.get(1), bytes(b[p:p + len(rid) + 11])))
            if seen[seq]:
                raise Failed('message %d came twice' % seq)
            if e - cend != len(sections[seq]) or not b.startswith(sections[seq], cend):
                raise Failed('message %d differs from what was sent (%d bytes, sent %d)' %
                             (seq, e - cend, len(sections[seq])))
            seen[seq] = 1
            got += 1
            used += 1
            acks.append(bytes(b[sub[2][0]:sub[2][1]]))
            if used >= q // 2 or got == n:
                # The last ACK asks for a receipt (protocol v17), read once timing is over.
                out = [ack_frame(CONSUMER_ID, acks, ACK_RECEIPT_ID if got == n else None)]
                if got < n:
                    out.append(pw.simple_frame(pw.command('FLOW', {'consumer_id': CONSUMER_ID,
                                                                   'messagePermits': used})))
                conn.send(b''.join(out))
                acks, used = [], 0
        secs = clock() - t0
        self.cpu_consume = time.process_time() - cpu0
        s, e, base, cend = conn.next_of(T_ACK_RESPONSE, 'after the last MESSAGE')
        f = pw.decode('CommandAckResponse', bytes(conn.buf[slice(*base[T_ACK_RESPONSE])]))
        if f.get('request_id') != ACK_RECEIPT_ID or f.get('error') is not None:
            raise Failed('the last ACK: %s' % json.dumps(f, sort_keys=True))
        return secs

    def throughput(self):
        a = self.a
        topic = 'persistent://public/default/bench-%s' % self.run_id
        frames, sections = self.send_frames(topic, a.count)
        self.warm_up(frames, sections, False)
        active = time.perf_counter()
        conn = self.owner(topic)
        self.producer(conn, topic)
        secs, lat = self.produce(conn, frames)
        csecs = self.consume(conn, topic, sections)
        conn.sock.close()
        active = time.perf_counter() - active
        lat.sort()
        n, mb = a.count, a.count * a.size / 1e6
        return {
            'active_s': round(active, 6),
            'produce': {'msgs': n, 'seconds': round(secs, 6), 'cpu_s': round(self.cpu_produce, 6), 'msgs_per_s': round(n / secs, 1),
                        'mb_per_s': round(mb / secs, 3),
                        'receipt': {'p50_us': round(pct(lat, 50) * 1e6, 1), 'p99_us': round(pct(lat, 99) * 1e6, 1),
                                    'max_us': round(lat[-1] * 1e6, 1)}},
            'consume': {'msgs': n, 'seconds': round(csecs, 6), 'cpu_s': round(self.cpu_consume, 6), 'msgs_per_s': round(n / csecs, 1),
                        'mb_per_s': round(mb / csecs, 3)},
        }

    def round_trips(self, conn, frames, first=0):
        """Sends each frame once the previous one's receipt came (sequence ids from first
        on): [round trip, s]."""
        clock = time.perf_counter
        rtt = []
        receipts = self.receipts(conn, range(first, first + len(frames)))
        for f in frames:
            s = clock()
            conn.send(f)
            next(receipts)
            rtt.append(clock() - s)
        return rtt

    def warm_up(self, frames, sections, latency):
        """Runs the readers of receipts and messages over frames made here as a broker
        would send them, before anything is timed: under pypy, the first thousands of
        messages are otherwise read by the interpreter while its JIT compiles them, at a
        cost in every timed run (each run is a new process)."""
        n = min(len(frames), WARM_UP)
        receipts = b''.join(pw.simple_frame(pw.command('SEND_RECEIPT', {
            'producer_id': PRODUCER_ID, 'sequence_id': i, 'message_id': {'ledgerId': 1, 'entryId': i},
            'highest_sequence_id': i})) for i in range(n))
        if latency:
            self.round_trips(Replay(self, receipts), frames[:n])
            return
        self.produce(Replay(self, receipts), frames[:n])
        messages = b''.join(pw.payload_frame(pw.command('MESSAGE', {
            'consumer_id': CONSUMER_ID, 'message_id': {'ledgerId': 1, 'entryId': i}}), sections[i])
            for i in range(n))
        ack = pw.simple_frame(pw.command('ACK_RESPONSE', {'consumer_id': CONSUMER_ID, 'request_id': ACK_RECEIPT_ID}))
        self.consume(Replay(self, messages + ack), 'warm-up', sections[:n])

    def latency(self):
        a = self.a
        topic = 'persistent://public/default/lat-%s' % self.run_id
        total = a.count + WARMUP_LATENCY
        frames, sections = self.send_frames(topic, total)
        self.warm_up(frames, sections, True)
        active = time.perf_counter()
        conn = self.owner(topic)
        self.producer(conn, topic)
        self.round_trips(conn, frames[:WARMUP_LATENCY])
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        rtt = self.round_trips(conn, frames[WARMUP_LATENCY:], WARMUP_LATENCY)
        secs = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        conn.sock.close()
        active = time.perf_counter() - active
        rtt.sort()
        return {'active_s': round(active, 6), 'requests': a.count, 'seconds': round(secs, 6), 'cpu_s': round(cpu, 6),
                'requests_per_s': round(a.count / secs, 1),
                'rtt': {'p50_us': round(pct(rtt, 50) * 1e6, 1), 'p99_us': round(pct(rtt, 99) * 1e6, 1),
                        'max_us': round(rtt[-1] * 1e6, 1), 'mean_us': round(sum(rtt) / len(rtt) * 1e6, 1)}}


def pct(sorted_xs, p):
    """The p-th percentile (nearest rank) of a sorted list."""
    if not sorted_xs:
        return float('nan')
    k = max(0, min(len(sorted_xs) - 1, int(round(p / 100.0 * len(sorted_xs) + 0.5)) - 1))
    return sorted_xs[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('service', help='HOST:PORT of the pulsar:// service URL')
    ap.add_argument('-n', '--count', type=int, default=10000, help='messages (latency: SENDs timed)')
    ap.add_argument('-s', '--size', type=int, default=1024, help='payload bytes per message')
    ap.add_argument('-w', '--window', type=int, default=1000, help='SENDs awaiting their receipt, at most')
    ap.add_argument('-r', '--receiver', type=int, default=1000, help="consumer's permits (receiver queue)")
    ap.add_argument('-T', '--timeout', type=float, default=60, help='bound on the whole run, s')
    ap.add_argument('--latency', action='store_true', help='one SEND at a time, timed to its receipt')
    ap.add_argument('--map', action='append', help='FROM=TO: dial TO for FROM (host:port)')
    ap.add_argument('--run-id', help='(default: random) the payloads\' and topics\' run id')
    a = ap.parse_args()
    if a.count < 1 or a.size < 32 or a.window < 1 or a.receiver < 2:
        ap.error('-n >= 1, -s >= 32, -w >= 1, -r >= 2')
    load = Load(a)
    out = {'ok': False, 'mode': 'latency' if a.latency else 'throughput', 'run_id': load.run_id,
           'count': a.count, 'size': a.size}
    rc = 1
    try:
        out.update(load.latency() if a.latency else load.throughput())
        out['ok'] = True
        rc = 0
    except TimedOut as e:
        out['error'] = 'timed out (%g s): %s' % (a.timeout, e)
        rc = 3
    except (Failed, pw.WireError) as e:
        out['error'] = str(e)
    out['connected_to'] = sorted(set(load.connected_to))
    out['lookup'] = load.hops
    sys.stdout.write(json.dumps(out, sort_keys=True) + '\n')
    return rc


if __name__ == '__main__':
    sys.exit(main())
