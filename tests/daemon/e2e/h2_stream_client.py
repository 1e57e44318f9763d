#!/usr/bin/python3
"""HTTP/2 clients for tests/daemon/e2e/test_http2.c that check a stream's end (run with
/usr/bin/python3, which has python3-h2):

    h2_stream_client.py PORT early PATH CONTENT_LENGTH|- ROUNDS
        ROUNDS POSTs of PATH on one connection, one after the other, each with a body of 64
        KiB (16 KiB a frame, sent without waiting) that the server answers before it is
        whole; prints "status N..." and "reset CODE..." (the distinct statuses and RST_STREAM
        codes seen, "none" when none came), "dropped over 1 MiB" (or "dropped K KiB"), then
        "second N BODY" for a GET of / on the same
        connection; "stalled after I rounds" when the connection's window ran dry (dropped
        DATA not credited back)
    h2_stream_client.py PORT bad_trailers
        raw frames: trailers with a pseudo-header (stream 1), trailers without END_STREAM
        (stream 3), then a GET of / (stream 5); prints "rst1 CODE", "rst3 CODE" (RST_STREAM
        codes, "none" when absent), "goaway CODE" if one came, and "status5 N"
    h2_stream_client.py PORT fetch WINDOW CAFILE|- ROOT PATH...
        every PATH requested at once on one connection (TLS with ALPN h2 when CAFILE is
        given), with WINDOW as the client's stream window (SETTINGS_INITIAL_WINDOW_SIZE; the
        client gives it back as it reads); a PATH that starts with "!" is reset (RST_STREAM
        CANCEL) once its first DATA came. Each body is compared with ROOT + PATH, byte for
        byte; then one more GET of the first PATH on the same connection. Prints "same N"
        (N bodies whole and equal, the extra GET included), "differ PATH GOT_LEN" for each
        that is not, "reset N" (the streams reset, none answered after)
    h2_stream_client.py PORT quiet SECONDS ROUNDS
        ROUNDS GETs of / on one connection, SECONDS of silence before each after the first
        (long enough for the server to give back a quiet session's frame buffer); prints
        "got N BODY" for each

    h2_stream_client.py PORT expect PATH VALUE
        a POST of PATH with "expect: VALUE" and a 5-byte body announced, the body held back
        until an answer comes: prints "interim N" for each 1xx, then sends "hello" (after a
        100 only) and prints "final N BODY", or "waited" when nothing came within 3 s

    h2_stream_client.py PORT records CAFILE PATH
        one GET of PATH over TLS (ALPN h2, windows of 2^31-1), the TLS records read off the
        socket before they are decrypted; prints "body N" (the bytes of DATA), then
        "records R short S": the records that came after the request, and how many of them
        carried less than a full record's 16 KiB of plaintext

Every run ends within 15 s (a socket timeout), printing "timeout" when it did not finish.
"""
import socket
import sys
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hpack import Decoder, Encoder
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame, RstStreamFrame

sys.dont_write_bytecode = True  # no __pycache__ beside the tests
from h2_common import headers_frame, raw_connect, run_mode, split_frames  # noqa: E402


def early(port, path, length, rounds):
    s = socket.create_connection(("127.0.0.1", port))
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    s.settimeout(0.5)
    head = [(":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1"),
            (":path", path)]
    if length is not None:
        head.append(("content-length", str(length)))
    chunk = b"x" * 16384
    statuses, resets = set(), set()
    dropped = 0
    deadline = time.time() + 12
    events = []

    def pump():
        try:
            data = s.recv(65536)
        except socket.timeout:
            return True
        if not data:
            return False
        for e in c.receive_data(data):
            if isinstance(e, h2.events.DataReceived):
                c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
            events.append(e)
        s.sendall(c.data_to_send())
        return True

    # Each round: a POST whose body fills the stream's window (sent without waiting for the
    # answer), then the answer's end (or a reset) awaited. Were the dropped DATA not credited to
    # the connection's window, it would run dry before the rounds end: "stalled".
    for i in range(rounds):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, head)
        sent = 0
        while sent < 64 * 1024 and time.time() < deadline:
            n = min(len(chunk), c.local_flow_control_window(sid), c.max_outbound_frame_size)
            if n == 0:
                s.sendall(c.data_to_send())
                if not pump():
                    break
                if any(isinstance(e, h2.events.StreamReset) and e.stream_id == sid
                       for e in events):
                    break
                continue
            c.send_data(sid, chunk[:n])
            sent += n
        s.sendall(c.data_to_send())  # the head and the body in one write: all read at once
        dropped += sent
        while time.time() < deadline and not any(
                isinstance(e, (h2.events.StreamReset, h2.events.StreamEnded)) and e.stream_id == sid
                for e in events):
            if not pump():
                break
        for e in events:
            if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                statuses.add(dict(e.headers)[b":status"].decode())
            elif isinstance(e, h2.events.StreamReset) and e.stream_id == sid:
                resets.add(int(e.error_code))
        if time.time() >= deadline:
            print("stalled after %d rounds" % i)
            return
        events.clear()
    print("status %s" % " ".join(sorted(statuses)))
    print("reset %s" % (" ".join(str(r) for r in sorted(resets)) or "none"))
    # More than the connection's 1 MiB window: the dropped DATA was credited back.
    print("dropped %s" % ("over 1 MiB" if dropped > 1 << 20 else "%d KiB" % (dropped // 1024)))
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1"),
                         (":path", "/")], end_stream=True)
    s.sendall(c.data_to_send())
    body, status = b"", None
    while time.time() < deadline and not any(
            isinstance(e, h2.events.StreamEnded) and e.stream_id == sid for e in events):
        if not pump():
            break
        for e in events:
            if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                status = dict(e.headers)[b":status"].decode()
            elif isinstance(e, h2.events.DataReceived) and e.stream_id == sid:
                body += e.data
        events[:] = [e for e in events if isinstance(e, h2.events.StreamEnded)]
    print("second %s %s" % (status, body.decode()))


def quiet(port, seconds, rounds):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    for i in range(rounds):
        if i:
            time.sleep(seconds)
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "GET"), (":scheme", "http"),
                             (":authority", "127.0.0.1"), (":path", "/")], end_stream=True)
        s.sendall(c.data_to_send())
        status, body, ended = None, b"", False
        while not ended:
            data = s.recv(65536)
            if not data:
                print("closed")
                return
            for e in c.receive_data(data):
                if isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                    status = dict(e.headers)[b":status"].decode()
                elif isinstance(e, h2.events.DataReceived) and e.stream_id == sid:
                    c.acknowledge_received_data(e.flow_controlled_length, sid)
                    body += e.data
                elif isinstance(e, h2.events.StreamEnded) and e.stream_id == sid:
                    ended = True
            s.sendall(c.data_to_send())
        print("got %s %s" % (status, body.decode()))


def expect(port, path, value):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(3)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1"),
                         (":path", path), ("content-length", "5"), ("expect", value)])
    s.sendall(c.data_to_send())
    status, body = None, b""
    while True:
        try:
            data = s.recv(65536)
        except socket.timeout:
            print("waited")
            return
        if not data:
            print("closed")
            return
        for e in c.receive_data(data):
            if isinstance(e, h2.events.InformationalResponseReceived) and e.stream_id == sid:
                code = dict(e.headers)[b":status"].decode()
                print("interim " + code)
                if code == "100":
                    c.send_data(sid, b"hello", end_stream=True)
            elif isinstance(e, h2.events.ResponseReceived) and e.stream_id == sid:
                status = dict(e.headers)[b":status"].decode()
            elif isinstance(e, h2.events.DataReceived) and e.stream_id == sid:
                c.acknowledge_received_data(e.flow_controlled_length, sid)
                body += e.data
            elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) and \
                    e.stream_id == sid:
                print("final %s %s" % (status, body.decode()))
                return
        s.sendall(c.data_to_send())


def bad_trailers(port):
    s, out = raw_connect(port)
    s.settimeout(15)
    enc = Encoder()
    post = [(":method", "POST"), (":scheme", "http"), (":authority", "a"), (":path", "/echo")]
    out.append(headers_frame(enc, 1, post, False))
    out.append(DataFrame(1, data=b"x").serialize())
    out.append(headers_frame(enc, 1, [(":path", "/other"), ("x-t", "1")], True))
    out.append(headers_frame(enc, 3, post, False))
    out.append(DataFrame(3, data=b"x").serialize())
    out.append(headers_frame(enc, 3, [("x-t", "1")], False))
    out.append(headers_frame(enc, 5, [(":method", "GET"), (":scheme", "http"),
                                      (":authority", "a"), (":path", "/")], True))
    s.sendall(b"".join(out))
    dec = Decoder()
    rst = {}
    status5 = None
    buf = b""
    deadline = time.time() + 10
    while time.time() < deadline and status5 is None:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        frames, buf = split_frames(buf)
        for f in frames:
            if isinstance(f, RstStreamFrame):
                rst[f.stream_id] = f.error_code
            elif isinstance(f, GoAwayFrame):
                print("goaway %d" % f.error_code)
            elif isinstance(f, HeadersFrame):
                fields = dict((k if isinstance(k, str) else k.decode(),
                               v if isinstance(v, str) else v.decode())
                              for k, v in dec.decode(f.data))
                if f.stream_id == 5:
                    status5 = fields.get(":status")
    print("rst1 %s" % rst.get(1, "none"))
    print("rst3 %s" % rst.get(3, "none"))
    print("status5 %s" % status5)


def fetch(port, window, cafile, root, paths):
    raw = socket.create_connection(("127.0.0.1", port))
    if cafile != "-":
        import ssl
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(raw, server_hostname="localhost")
    else:
        s = raw
    s.settimeout(15)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
    c.initiate_connection()
    bodies, done, resets, want = {}, set(), set(), {}
    deadline = time.time() + 12

    def ask(path):
        sid = c.get_next_available_stream_id()
        c.send_headers(sid, [(":method", "GET"), (":scheme", "https" if cafile != "-" else "http"),
                             (":authority", "localhost"), (":path", path.lstrip("!"))],
                       end_stream=True)
        want[sid] = path
        bodies[sid] = b""

    for p in paths:
        ask(p)
    s.sendall(c.data_to_send())
    extra = False
    while time.time() < deadline:
        if len(done) == len(want):
            if extra:
                break
            extra = True
            ask(paths[0].lstrip("!"))
            s.sendall(c.data_to_send())
        data = s.recv(65536)
        if not data:
            break
        for e in c.receive_data(data):
            if isinstance(e, h2.events.DataReceived):
                c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                if e.stream_id in resets:
                    continue
                bodies[e.stream_id] += e.data
                if want[e.stream_id].startswith("!"):
                    c.reset_stream(e.stream_id, h2.errors.ErrorCodes.CANCEL)
                    resets.add(e.stream_id)
                    done.add(e.stream_id)
            elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                done.add(e.stream_id)
        s.sendall(c.data_to_send())
    same = 0
    for sid, path in want.items():
        if path.startswith("!"):
            continue
        with open(root + path, "rb") as f:
            expect = f.read()
        if bodies[sid] == expect:
            same += 1
        else:
            print("differ %s %d" % (path, len(bodies[sid])))
    print("same %d" % same)
    print("reset %d" % len(resets))


def records(port, cafile, path):
    import ssl
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["h2"])
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # a record's overhead: 5 + 16 + 1 bytes
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, outg, server_hostname="localhost")
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(15)
    raw = b""
    sizes = []

    def pump():
        """Moves what TLS wrote to the socket and one read's records into TLS, their sizes
        noted."""
        nonlocal raw
        if outg.pending:
            s.sendall(outg.read())
        data = s.recv(65536)
        if not data:
            raise EOFError
        raw += data
        while len(raw) >= 5 and len(raw) >= 5 + int.from_bytes(raw[3:5], "big"):
            n = int.from_bytes(raw[3:5], "big")
            sizes.append(n)
            inc.write(raw[:5 + n])
            raw = raw[5 + n:]

    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            pump()
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
    c.initiate_connection()
    c.increment_flow_control_window(2**31 - 1 - 65535)
    c.send_headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", "localhost"),
                       (":path", path)], end_stream=True)
    tls.write(c.data_to_send())
    sizes.clear()
    body, ended = 0, False
    while not ended:
        try:
            pump()
        except EOFError:
            break
        while True:
            try:
                data = tls.read(65536)
            except ssl.SSLWantReadError:
                break
            for e in c.receive_data(data):
                if isinstance(e, h2.events.DataReceived):
                    body += len(e.data)
                elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                    ended = True
        if c.data_to_send():
            tls.write(c.data_to_send())
    print("body %d" % body)
    print("records %d short %d" % (len(sizes), sum(1 for n in sizes if n < 16384 + 17)))


def main():
    run_mode({
        "early": lambda port, a: early(port, a[0], int(a[1]) if a[1] != "-" else None, int(a[2])),
        "bad_trailers": lambda port, a: bad_trailers(port),
        "fetch": lambda port, a: fetch(port, int(a[0]), a[1], a[2], a[3:]),
        "quiet": lambda port, a: quiet(port, float(a[0]), int(a[1])),
        "records": lambda port, a: records(port, a[0], a[1]),
        "expect": lambda port, a: expect(port, a[0], a[1]),
    })


if __name__ == "__main__":
    main()
