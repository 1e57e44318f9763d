#!/usr/bin/python3
"""An HTTP/2 client (python3-h2) for tests/daemon/e2e/test_proxy_h2.c: h2c by prior knowledge
to magpied, whose /app routes proxy to the test upstream (upstream.c). Run with /usr/bin/python3.

    h2_proxy_client.py PORT slow_and_fast
        two streams on one connection: /app/mode/slowhead?ms=1500, then /app/fast; prints
        "fast_first" when the fast one ended before the slow one, then "slow 200 BYTES"
    h2_proxy_client.py PORT small_window PID BYTES
        a 16 KiB stream window, /app/mode/big?bytes=BYTES read slowly (16 KiB per 20 ms for
        2 s, then as fast as it comes); prints "grew KB" (magpied's VmRSS growth, largest seen
        while the body was held back), then "done BYTES OK|BAD" (the bytes checked)

    h2_proxy_client.py PORT trailers
        two POSTs to /app/post with request trailers (one with Content-Length and a Trailer
        field, one with neither), then a GET of /app/mode/trailers; prints "echo N" and the
        upstream's echo of each POST (the request as it read it), then "trailers NAME=VALUE..."
        (the response's trailers, sorted) and "status N"

    h2_proxy_client.py PORT reset_slow N GOFILE
        N streams of /app/mode/slowhead?ms=60000 opened at once; once GOFILE exists (the test
        saw their upstream connections) prints "reset" and resets them all (RST_STREAM
        CANCEL), then GETs /app/fast and prints "fast N" (its status); holds the connection
        open 15 s more (so that only the resets, not the close, can end the upstream
        requests)

Every run ends within 20 s (a socket timeout), printing "timeout" when it did not finish.
"""
import os
import socket
import sys
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings

sys.dont_write_bytecode = True  # no __pycache__ beside the tests
from h2_common import run_mode  # noqa: E402


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Client:
    def __init__(self, port, window=None):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(20)
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.c.initiate_connection()
        if window is not None:
            self.c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()
        self.status = {}
        self.body = {}
        self.ended = []
        self.reset = {}
        self.goaway = None
        self.auto_ack = True

    def flush(self):
        data = self.c.data_to_send()
        if data:
            self.s.sendall(data)

    def get(self, path):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, [(":method", "GET"), (":scheme", "http"),
                                  (":authority", "127.0.0.1"), (":path", path)],
                            end_stream=True)
        self.flush()
        self.body[sid] = bytearray()
        return sid

    def pump(self):
        data = self.s.recv(65536)
        if not data:
            return False
        for e in self.c.receive_data(data):
            if isinstance(e, h2.events.ResponseReceived):
                self.status[e.stream_id] = dict(e.headers)[b":status"].decode()
            elif isinstance(e, h2.events.DataReceived):
                self.body[e.stream_id] += e.data
                if self.auto_ack:
                    self.c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                else:
                    self.unacked.append((e.flow_controlled_length, e.stream_id))
            elif isinstance(e, h2.events.StreamEnded):
                self.ended.append(e.stream_id)
            elif isinstance(e, h2.events.StreamReset):
                self.reset[e.stream_id] = e.error_code
            elif isinstance(e, h2.events.ConnectionTerminated):
                self.goaway = (e.last_stream_id, int(e.error_code))
        self.flush()
        return True


def slow_and_fast(port):
    cl = Client(port)
    slow = cl.get("/app/mode/slowhead?ms=1500")
    fast = cl.get("/app/fast")
    while slow not in cl.ended:
        if not cl.pump():
            break
    if fast in cl.ended and slow in cl.ended and cl.ended.index(fast) < cl.ended.index(slow):
        print("fast_first")
    print("slow %s %d" % (cl.status.get(slow), len(cl.body[slow])))


def small_window(port, pid, nbytes):
    cl = Client(port, window=16384)
    cl.auto_ack = False
    cl.unacked = []
    sid = cl.get("/app/mode/big?bytes=%d" % nbytes)
    base = rss_kb(pid)
    grew = 0
    slow_until = time.time() + 2
    while sid not in cl.ended and sid not in cl.reset:
        if time.time() < slow_until:
            cl.s.settimeout(0.02)
            try:
                if not cl.pump():
                    break
            except socket.timeout:
                pass
            # give back one frame's worth at a time: 16 KiB per 20 ms at most
            if cl.unacked:
                n, s = cl.unacked.pop(0)
                cl.c.acknowledge_received_data(n, s)
                cl.flush()
            grew = max(grew, rss_kb(pid) - base)
            time.sleep(0.02)
        else:
            cl.s.settimeout(20)
            for n, s in cl.unacked:
                cl.c.acknowledge_received_data(n, s)
            cl.unacked = []
            cl.flush()
            cl.auto_ack = True
            if not cl.pump():
                break
    body = bytes(cl.body[sid])
    ok = len(body) == nbytes and all(body[i] == 97 + i % 26 for i in range(0, nbytes, 4099))
    print("grew %d" % grew)
    print("done %d %s" % (len(body), "OK" if ok else "BAD"))


def post_with_trailers(cl, path, head, body, trailers):
    sid = cl.c.get_next_available_stream_id()
    cl.c.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                            (":authority", "127.0.0.1"), (":path", path)] + head)
    cl.c.send_data(sid, body)
    cl.c.send_headers(sid, trailers, end_stream=True)
    cl.flush()
    cl.body[sid] = bytearray()
    return sid


def trailers(port):
    cl = Client(port)
    got = {}
    orig = cl.c.receive_data

    def receive(data):
        events = orig(data)
        for e in events:
            if isinstance(e, h2.events.TrailersReceived):
                got[e.stream_id] = [(k.decode(), v.decode()) for k, v in e.headers]
        return events
    cl.c.receive_data = receive
    t = [("x-checksum", "abc"), ("authorization", "Basic eDp5"), ("host", "evil.example"),
         ("content-type", "text/evil"), ("x-late", "1")]
    one = post_with_trailers(cl, "/app/post", [("content-length", "5"),
                                               ("trailer", "x-checksum, x-late")], b"hello", t)
    two = post_with_trailers(cl, "/app/post", [], b"world", t)
    three = cl.get("/app/mode/trailers")
    while not all(s in cl.ended or s in cl.reset for s in (one, two, three)):
        if not cl.pump():
            break
    for sid in (one, two):
        print("echo %s" % cl.status.get(sid))
        print(bytes(cl.body[sid]).decode(errors="replace"))
    print("trailers " + " ".join("%s=%s" % kv for kv in sorted(got.get(three, []))))
    print("status %s %s" % (cl.status.get(three), bytes(cl.body[three]).decode()))


def reset_slow(port, n, gofile):
    cl = Client(port)
    sids = [cl.get("/app/mode/slowhead?ms=60000") for _ in range(n)]
    end = time.time() + 15
    while not os.path.exists(gofile) and time.time() < end:
        time.sleep(0.05)
    print("reset")
    sys.stdout.flush()
    for sid in sids:
        cl.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    cl.flush()
    fast = cl.get("/app/fast")
    while fast not in cl.ended and fast not in cl.reset:
        if not cl.pump():
            break
    print("fast %s" % cl.status.get(fast))
    sys.stdout.flush()
    end = time.time() + 15
    cl.s.settimeout(0.2)
    while time.time() < end:
        try:
            if not cl.pump():
                break
        except socket.timeout:
            pass


def main():
    run_mode({
        "reset_slow": lambda port, a: reset_slow(port, int(a[0]), a[1]),
        "slow_and_fast": lambda port, a: slow_and_fast(port),
        "trailers": lambda port, a: trailers(port),
        "small_window": lambda port, a: small_window(port, int(a[0]), int(a[1])),
    })


if __name__ == "__main__":
    main()
