#!/usr/bin/env python3
"""Open N keep-alive connections to HOST:PORT, send one request on each, read
its answer, and keep them all open and idle.

Prints one JSON line when every connection has its answer (or the deadline
passed): {"opened": n, "failed": n, "seconds": s}; then holds the
connections until a line (or EOF) arrives on stdin or `--hold` seconds pass,
and closes them.  bench/run reads the proxy's RSS while they are held.

Bounded: at most --window connections in progress at once, --deadline
seconds to open them all, --hold seconds to hold them.
"""
import argparse
import json
import selectors
import socket
import ssl
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("-n", type=int, default=10000, help="connections (10000)")
    p.add_argument("--tls", action="store_true", help="TLS, without verifying")
    p.add_argument("--path", default="/")
    p.add_argument("--window", type=int, default=200, help="connections in progress at once (200)")
    p.add_argument("--deadline", type=float, default=120.0, help="seconds to open them all (120)")
    p.add_argument("--hold", type=float, default=120.0, help="seconds to hold them at most (120)")
    return p.parse_args()


class Conn:
    """One connection's progress: connect, handshake, send, read one answer."""

    def __init__(self, sock, tls_sock, request):
        self.sock = tls_sock or sock
        self.tls = tls_sock is not None
        self.state = "connect"
        self.out = request
        self.buf = b""
        self.need = None          # bytes of body still wanted, or "chunked"

    def answered(self):
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return False
        head = self.buf[:head_end].lower()
        body = self.buf[head_end + 4:]
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip() == b"content-length":
                return len(body) >= int(value.strip())
            if name.strip() == b"transfer-encoding" and b"chunked" in value:
                return body.endswith(b"0\r\n\r\n")
        return True


def main():
    a = parse_args()
    request = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: lookout-bench-idle\r\n\r\n"
               % (a.path, a.host, a.port)).encode()
    ctx = None
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    sel = selectors.DefaultSelector()
    done, failed, started = [], 0, 0
    t0 = time.monotonic()
    deadline = t0 + a.deadline
    inflight = 0

    def start_one():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex((a.host, a.port))
        c = Conn(s, None, request)
        c.raw = s
        sel.register(s, selectors.EVENT_WRITE, c)

    def fail(c):
        nonlocal failed, inflight
        failed += 1
        inflight -= 1
        try:
            sel.unregister(c.raw)
        except (KeyError, ValueError):
            pass
        c.raw.close()

    while (started < a.n or inflight > 0) and time.monotonic() < deadline:
        while started < a.n and inflight < a.window:
            start_one()
            started += 1
            inflight += 1
        for key, _ in sel.select(timeout=0.5):
            c = key.data
            try:
                if c.state == "connect":
                    err = c.raw.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        fail(c)
                        continue
                    if ctx is not None:
                        c.sock = ctx.wrap_socket(c.raw, do_handshake_on_connect=False)
                        c.state = "handshake"
                    else:
                        c.sock = c.raw
                        c.state = "send"
                if c.state == "handshake":
                    try:
                        c.sock.do_handshake()
                        c.state = "send"
                    except ssl.SSLWantReadError:
                        sel.modify(c.raw, selectors.EVENT_READ, c)
                        continue
                    except ssl.SSLWantWriteError:
                        sel.modify(c.raw, selectors.EVENT_WRITE, c)
                        continue
                if c.state == "send":
                    n = c.sock.send(c.out)
                    c.out = c.out[n:]
                    if c.out:
                        sel.modify(c.raw, selectors.EVENT_WRITE, c)
                        continue
                    c.state = "read"
                    sel.modify(c.raw, selectors.EVENT_READ, c)
                    continue
                if c.state == "read":
                    try:
                        data = c.sock.recv(65536)
                    except (ssl.SSLWantReadError, BlockingIOError):
                        continue
                    if not data:
                        fail(c)
                        continue
                    c.buf += data
                    if c.answered():
                        sel.unregister(c.raw)
                        c.buf = b""
                        done.append(c)
                        inflight -= 1
            except (OSError, ssl.SSLError):
                fail(c)
    seconds = time.monotonic() - t0
    failed += a.n - len(done) - failed
    print(json.dumps({"opened": len(done), "failed": failed, "seconds": round(seconds, 3)}), flush=True)

    # Hold them idle until told, or --hold seconds.
    hold = selectors.DefaultSelector()
    hold.register(sys.stdin, selectors.EVENT_READ)
    hold.select(timeout=a.hold)
    for c in done:
        try:
            c.raw.close()
        except OSError:
            pass
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
