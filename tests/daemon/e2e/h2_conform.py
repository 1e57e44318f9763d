#!/usr/bin/python3
"""An HTTP/2 conformance pass over magpied (RFC 9113, RFC 7541), for tests/daemon/e2e/
test_http2_conform.c; run with /usr/bin/python3, which has python3-h2's hyperframe and hpack.

    h2_conform.py PORT [--ca CAFILE] [--path PATH] [--post-path PATH] [--big PATH]
                  [--list] [CASE...]

Each case opens a connection of its own (h2c by prior knowledge, or TLS with ALPN h2 when
--ca is given), makes the handshake (the prefaces and SETTINGS, each side's acknowledged),
sends what its section says must be refused or accepted, and reads until its verdict or
3 s: the frames a server must answer with are named in the case's line (e.g. "GOAWAY
PROTOCOL_ERROR or close", "RST_STREAM or GOAWAY STREAM_CLOSED, or close", "PING ACK", "a
200"). Cases are modelled on h2spec's list (generic, http2, hpack). --path is what GETs ask
for (a 200 expected), --post-path what POSTs go to (any answer: a refusal before the body
is the case the body's checks must survive), --big a path of a body larger than 64 KiB (the
flow-control cases). CASE: names or prefixes of names to run (all when none).

Prints "PASS name" or "FAIL name: detail" per case, then "N passed, M failed"; exits 1 when
any case failed.

Where the RFCs leave magpied a choice, the case accepts what magpied chose (config/
magpied.conf.5's HTTP/2 section says why): a preface that begins as HTTP/2's and differs is
closed without GOAWAY (RFC 9113 3.4: MAY); a Host that names another than :authority is
malformed (8.3.1: SHOULD); CONNECT to an authority gets 501 (nothing is tunnelled);
WINDOW_UPDATE frames are not counted as a flood (a client reading many large bodies sends
thousands), so their flood only has to leave others served.
"""
import argparse
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the tests
from h2_common import PREFACE, connect, raw_frame, split_frames  # noqa: E402
from hpack import Decoder, Encoder  # noqa: E402
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame,  # noqa: E402
                              HeadersFrame, PingFrame, PriorityFrame, RstStreamFrame,
                              SettingsFrame, WindowUpdateFrame)

CASE_TIMEOUT = 3.0

# Frame types and error codes (RFC 9113 6, 7).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIO_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 5, 6, 7, 8, 9
ENHANCE_YOUR_CALM = 11
CODE_NAMES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR",
              5: "STREAM_CLOSED", 6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM", 8: "CANCEL",
              9: "COMPRESSION_ERROR", 11: "ENHANCE_YOUR_CALM"}

ARGS = None


def code_name(c):
    return CODE_NAMES.get(c, str(c))


class Conn:
    """One connection: raw frames out, parsed frames in, the server's header blocks decoded in
    order (its HPACK table needs every block)."""

    def __init__(self):
        self.s = connect(ARGS.port, ARGS.ca)
        self.s.settimeout(0.2)
        self.buf = b""
        self.enc = Encoder()
        self.dec = Decoder()
        self.closed = False
        self.block = b""  # a server header block waiting for its CONTINUATION
        self.server_settings = {}
        self.headers = {}  # stream -> the decoded fields of its last header block
        self.credit = {}  # stream (0: the connection) -> the server's WINDOW_UPDATEs, summed
        self.deadline = time.time() + CASE_TIMEOUT

    def send(self, *frames):
        try:
            self.s.sendall(b"".join(frames))
        except OSError:
            self.closed = True

    def next(self):
        """The next frame, "closed" at the connection's end, None when the case's time is up."""
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    frames, _ = split_frames(self.buf[:9 + length])
                    self.buf = self.buf[9 + length:]
                    self._track(frames[0])
                    return frames[0]
            if self.closed:
                return "closed"
            if time.time() >= self.deadline:
                return None
            try:
                chunk = self.s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                continue
            self.buf += chunk

    def _track(self, f):
        if isinstance(f, (HeadersFrame, ContinuationFrame)):
            self.block += f.data
            if "END_HEADERS" in f.flags:
                try:
                    fields = self.dec.decode(self.block)
                except Exception:  # noqa: BLE001 - a block we cannot read is the case's failure
                    fields = [("x-undecodable", "")]
                self.block = b""
                self.headers[f.stream_id] = [(k if isinstance(k, str) else k.decode(),
                                              v if isinstance(v, str) else v.decode())
                                             for k, v in fields]
        elif isinstance(f, SettingsFrame) and "ACK" not in f.flags:
            self.server_settings.update(f.settings)
        elif isinstance(f, WindowUpdateFrame):
            self.credit[f.stream_id] = self.credit.get(f.stream_id, 0) + f.window_increment

    def handshake(self, settings=None):
        """The prefaces and SETTINGS: ours (settings) sent, the server's acknowledged, ours
        acknowledged by the server. False when it did not happen."""
        self.send(PREFACE, SettingsFrame(0, settings=settings or {}).serialize())
        got_settings = got_ack = False
        while not (got_settings and got_ack):
            f = self.next()
            if f is None or f == "closed":
                return False
            if isinstance(f, SettingsFrame):
                if "ACK" in f.flags:
                    got_ack = True
                else:
                    got_settings = True
                    self.send(raw_frame(SETTINGS, ACK, 0))
        return True

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def request(method="GET", path=None, extra=(), scheme=None, authority=True):
    """A request's fields: the pseudo-header fields, then extra."""
    if path is None:
        path = ARGS.path if method in ("GET", "HEAD") else ARGS.post_path
    fields = [(":method", method), (":scheme", scheme or ("https" if ARGS.ca else "http")),
              (":path", path)]
    if authority:
        fields.append((":authority", "127.0.0.1:%d" % ARGS.port))
    return fields + list(extra)


def block(c, fields):
    return c.enc.encode(fields)


def headers(c, sid, fields=None, end_stream=True, end_headers=True, data=None):
    flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
    return raw_frame(HEADERS, flags, sid, data if data is not None else block(c, fields or
                                                                               request()))


def data(sid, payload=b"test", end_stream=True):
    return raw_frame(DATA, END_STREAM if end_stream else 0, sid, payload)


# ---- verdicts: (True, "") or (False, what came instead) ----

def describe(f):
    if f is None:
        return "nothing within %g s" % CASE_TIMEOUT
    if f == "closed":
        return "connection closed"
    if isinstance(f, GoAwayFrame):
        return "GOAWAY %s" % code_name(f.error_code)
    if isinstance(f, RstStreamFrame):
        return "RST_STREAM %s on %d" % (code_name(f.error_code), f.stream_id)
    return "%s on %d" % (type(f).__name__, f.stream_id)


def conn_error(c, *codes):
    """GOAWAY with one of codes, or the connection closed (RFC 9113 5.4.1)."""
    while True:
        f = c.next()
        if f == "closed":
            return True, ""
        if f is None:
            return False, describe(f)
        if isinstance(f, GoAwayFrame):
            return (f.error_code in codes,
                    "" if f.error_code in codes else describe(f))


def stream_error(c, *codes):
    """RST_STREAM or GOAWAY with one of codes, or the connection closed (RFC 9113 5.4.2: a
    stream error may be treated as a connection error)."""
    while True:
        f = c.next()
        if f == "closed":
            return True, ""
        if f is None:
            return False, describe(f)
        if isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return (f.error_code in codes,
                    "" if f.error_code in codes else describe(f))


def ping_ack(c, opaque=b"h2conf!!"):
    """The connection still works: our PING acknowledged, with its payload."""
    c.send(PingFrame(0, opaque_data=opaque).serialize())
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f)
        if isinstance(f, PingFrame) and "ACK" in f.flags:
            if f.opaque_data == opaque:
                return True, ""
            return False, "PING ACK of another payload"


CONNECTION_SPECIFIC = ("connection", "keep-alive", "proxy-connection", "transfer-encoding",
                       "upgrade")


def head_faults(fields):
    """What a response head breaks of RFC 9113 8.1.2 and 8.2: :status first and the only
    pseudo-header field, names lower-case, no connection-specific field. "" when nothing."""
    if not fields or fields[0][0] != ":status":
        return "the head does not begin with :status: %r" % fields
    for name, _ in fields[1:]:
        if name.startswith(":"):
            return "a pseudo-header field %s after :status" % name
        if name != name.lower():
            return "an upper-case field name %s" % name
        if name in CONNECTION_SPECIFIC:
            return "a connection-specific field %s" % name
    return ""


def response(c, sid, status=None):
    """A response on sid (its :status status when given), read to its END_STREAM."""
    got = None
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame) or (
                isinstance(f, RstStreamFrame) and f.stream_id == sid):
            return False, describe(f) + (" after :status %s" % got if got else "")
        if isinstance(f, DataFrame) and f.flow_controlled_length:
            # Our windows given back (the connection's for any stream's DATA): the body
            # comes whole however large.
            c.send(WindowUpdateFrame(0, window_increment=f.flow_controlled_length).serialize())
            if f.stream_id == sid:
                c.send(WindowUpdateFrame(sid,
                                         window_increment=f.flow_controlled_length).serialize())
        if f.stream_id != sid:
            continue
        if isinstance(f, HeadersFrame) and got is None and sid in c.headers:
            got = dict(c.headers[sid]).get(":status")
            if status is not None and got != str(status):
                return False, ":status %s" % got
            bad = head_faults(c.headers[sid])
            if bad:
                return False, bad
        if "END_STREAM" in f.flags:
            return (got is not None, "" if got is not None else "END_STREAM without a head")


def no_answer_then_ping(c, sid, wait=0.3):
    """Nothing on sid in reply (a PING ACK to ours after that): for frames that must be
    ignored or answered with nothing."""
    end = time.time() + wait
    while time.time() < end:
        saved, c.deadline = c.deadline, end
        f = c.next()
        c.deadline = saved
        if f is None:
            break
        if f == "closed" or isinstance(f, GoAwayFrame) or (
                isinstance(f, RstStreamFrame) and f.stream_id == sid):
            return False, describe(f)
    return ping_ack(c)


# ---- the cases ----

CASES = []


def case(name, expect):
    def wrap(fn):
        CASES.append((name, expect, fn))
        return fn
    return wrap


def any_status(c, sid):
    return response(c, sid)


# generic: what a server must accept.

@case("generic/1 preface and SETTINGS", "the server's SETTINGS, our SETTINGS acknowledged")
def g_preface(c):
    return True, ""


@case("generic/2.1 PRIORITY on an idle stream", "PING ACK")
def g_priority_idle(c):
    c.send(PriorityFrame(3, depends_on=0, stream_weight=16).serialize())
    return ping_ack(c)


@case("generic/2.2 WINDOW_UPDATE on a half-closed (remote) stream", "a response")
def g_wu_half_closed(c):
    c.send(headers(c, 1), WindowUpdateFrame(1, window_increment=1).serialize())
    return any_status(c, 1)


@case("generic/2.3 PRIORITY on a half-closed (remote) stream", "a response")
def g_prio_half_closed(c):
    c.send(headers(c, 1), PriorityFrame(1, depends_on=0, stream_weight=16).serialize())
    return any_status(c, 1)


@case("generic/2.4 RST_STREAM on a half-closed (remote) stream", "PING ACK")
def g_rst_half_closed(c):
    c.send(headers(c, 1), RstStreamFrame(1, error_code=CANCEL).serialize())
    return ping_ack(c)


@case("generic/2.5 PRIORITY on a closed stream", "PING ACK")
def g_prio_closed(c):
    c.send(headers(c, 1))
    ok, why = response(c, 1)
    if not ok:
        return ok, why
    c.send(PriorityFrame(1, depends_on=0, stream_weight=16).serialize())
    return ping_ack(c)


@case("generic/3.1 DATA: one frame, several, padded", "a response to each")
def g_data(c):
    fields = request("POST")
    c.send(headers(c, 1, fields, end_stream=False), data(1))
    ok, why = any_status(c, 1)
    if not ok:
        return ok, why
    c.send(headers(c, 3, fields, end_stream=False), data(3, b"te", False), data(3, b"st"))
    ok, why = any_status(c, 3)
    if not ok:
        return ok, why
    c.send(headers(c, 5, fields, end_stream=False),
           raw_frame(DATA, END_STREAM | PADDED, 5, b"\x08test" + b"\0" * 8))
    return any_status(c, 5)


@case("generic/3.2 HEADERS: padded, with priority", "a 200 to each")
def g_headers(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS | PADDED, 1, b"\x08" + b + b"\0" * 8))
    ok, why = response(c, 1, 200)
    if not ok:
        return ok, why
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS | PRIO_FLAG, 3,
                     (0).to_bytes(4, "big") + b"\x0f" + b))
    return response(c, 3, 200)


@case("generic/3.3 PRIORITY: exclusive and not", "PING ACK")
def g_priority(c):
    c.send(raw_frame(PRIORITY, 0, 1, (0x80000000).to_bytes(4, "big") + b"\x0f"),
           raw_frame(PRIORITY, 0, 3, (1).to_bytes(4, "big") + b"\x0f"))
    return ping_ack(c)


@case("generic/3.5 SETTINGS: every defined parameter", "SETTINGS ACK")
def g_settings(c):
    c.send(SettingsFrame(0, settings={1: 4096, 2: 0, 3: 100, 4: 65535, 5: 16384,
                                      6: 65536}).serialize())
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f)
        if isinstance(f, SettingsFrame) and "ACK" in f.flags:
            return True, ""


@case("generic/3.7 PING", "PING ACK with the payload")
def g_ping(c):
    return ping_ack(c, b"\x01\x02\x03\x04\x05\x06\x07\x08")


@case("generic/3.8 GOAWAY from the client", "the server's GOAWAY NO_ERROR, then its close")
def g_goaway(c):
    c.send(GoAwayFrame(0, last_stream_id=0, error_code=NO_ERROR).serialize())
    while True:  # RFC 9113 6.8: an endpoint SHOULD send a GOAWAY before it closes
        f = c.next()
        if f is None or f == "closed":
            return False, "no GOAWAY before the close" if f == "closed" else describe(f)
        if isinstance(f, GoAwayFrame):
            return f.error_code == NO_ERROR, describe(f)


@case("generic/3.9 WINDOW_UPDATE on the connection and a stream", "a 200")
def g_wu(c):
    c.send(WindowUpdateFrame(0, window_increment=1).serialize(), headers(c, 1, end_stream=False),
           WindowUpdateFrame(1, window_increment=1).serialize(),
           raw_frame(DATA, END_STREAM, 1))
    return response(c, 1, 200)


@case("generic/3.10 CONTINUATION: one, then several", "a 200 to each")
def g_cont(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b[:3]), raw_frame(CONTINUATION, END_HEADERS, 1, b[3:]))
    ok, why = response(c, 1, 200)
    if not ok:
        return ok, why
    b = block(c, request(extra=[("x-a", "1"), ("x-b", "2")]))
    c.send(raw_frame(HEADERS, END_STREAM, 3, b[:2]), raw_frame(CONTINUATION, 0, 3, b[2:5]),
           raw_frame(CONTINUATION, END_HEADERS, 3, b[5:]))
    return response(c, 3, 200)


@case("generic/4.1 GET", "a 200")
def g_get(c):
    c.send(headers(c, 1))
    return response(c, 1, 200)


@case("generic/4.2 HEAD", "a 200 without a body")
def g_head(c):
    c.send(headers(c, 1, request("HEAD")))
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.data:
            return False, "DATA with %d bytes" % len(f.data)
        if f.stream_id == 1 and "END_STREAM" in f.flags:
            return dict(c.headers.get(1, [])).get(":status") == "200", str(c.headers.get(1))


@case("generic/4.3 POST", "a response")
def g_post(c):
    c.send(headers(c, 1, request("POST", extra=[("content-length", "4")]), end_stream=False),
           data(1))
    return any_status(c, 1)


@case("generic/4.4 POST with trailers", "a response")
def g_post_trailers(c):
    c.send(headers(c, 1, request("POST", extra=[("trailer", "x-sum")]), end_stream=False),
           data(1, end_stream=False), headers(c, 1, [("x-sum", "1")]))
    return any_status(c, 1)


def hpack_case(name, fields_fn):
    @case(name, "a 200")
    def run(c):
        c.send(headers(c, 1, data=fields_fn(c)))
        return response(c, 1, 200)
    return run


def lit(prefix, name, value, index=None):
    """A literal field (RFC 7541 6.2): prefix 0x40 (incremental indexing, a 6-bit index), 0x00
    (without), 0x10 (never indexed; both a 4-bit index); a new name, or the static table's
    index of it."""
    if index is None:
        return bytes([prefix, len(name)]) + name.encode() + bytes([len(value)]) + value.encode()
    top = 0x3F if prefix == 0x40 else 0x0F
    first = bytes([prefix | index]) if index < top else bytes([prefix | top, index - top])
    return first + bytes([len(value)]) + value.encode()


def base_block(c):
    return c.enc.encode(request(), huffman=False)


hpack_case("generic/5.1 HPACK indexed field", lambda c: base_block(c) + b"\x90")
hpack_case("generic/5.2 HPACK literal with indexing, indexed name",
           lambda c: base_block(c) + lit(0x40, None, "x", index=24))
hpack_case("generic/5.3 HPACK literal with indexing, new name",
           lambda c: base_block(c) + lit(0x40, "x-new", "v"))
hpack_case("generic/5.4 HPACK literal without indexing, indexed name",
           lambda c: base_block(c) + lit(0x00, None, "x", index=15))
hpack_case("generic/5.5 HPACK literal without indexing, new name",
           lambda c: base_block(c) + lit(0x00, "x-new", "v"))
hpack_case("generic/5.6 HPACK literal never indexed, indexed name",
           lambda c: base_block(c) + lit(0x10, None, "x", index=15))
hpack_case("generic/5.7 HPACK literal never indexed, new name",
           lambda c: base_block(c) + lit(0x10, "x-new", "v"))
hpack_case("generic/5.8 HPACK dynamic table size update", lambda c: b"\x3f\xe1\x1f" + base_block(c))
hpack_case("generic/5.9 HPACK Huffman-coded strings",
           lambda c: c.enc.encode(request(extra=[("x-huff", "abcdef")]), huffman=True))


# http2/3.5 The connection preface.

@case("http2/3.5.1 preface and SETTINGS", "the server's SETTINGS")
def h_preface(c):
    return bool(c.server_settings) or True, ""


@case("http2/3.5.2 a preface that differs", "GOAWAY PROTOCOL_ERROR or close",)
def h_bad_preface(c):
    c.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
    return conn_error(c, PROTOCOL_ERROR)


h_bad_preface.no_handshake = True


@case("http2/3.5.3 a preface not HTTP/2's at all (h2spec's)",
      "the connection closed, nothing before the close but HTTP/2 frames (no HTTP/1.1 400)")
def h_not_preface(c):
    c.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
    while True:
        f = c.next()
        if f is None:
            return False, describe(f)
        if f == "closed":
            return not c.buf, "bytes that are not frames: %r" % c.buf[:40] if c.buf else ""


h_not_preface.no_handshake = True


# http2/4 Frames.

@case("http2/4.1.1 an unknown frame type is ignored", "PING ACK")
def h_unknown_type(c):
    c.send(raw_frame(0x16, 0, 0, b"0123"))
    return ping_ack(c)


@case("http2/4.1.2 undefined flags are ignored", "PING ACK")
def h_undefined_flags(c):
    c.send(raw_frame(PING, 0x16, 0, b"h2conf!!"))
    while True:  # the PING with unknown flags is a PING: its ACK comes
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f)
        if isinstance(f, PingFrame) and "ACK" in f.flags:
            return True, ""


@case("http2/4.1.3 the reserved bit is ignored", "a 200")
def h_reserved_bit(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS, 1 | 0x80000000, b))
    return response(c, 1, 200)


@case("http2/4.2.1 DATA of 2^14 bytes", "a response")
def h_data_16k(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), data(1, b"x" * 16384))
    return any_status(c, 1)


@case("http2/4.2.2 DATA over SETTINGS_MAX_FRAME_SIZE", "FRAME_SIZE_ERROR (stream or connection)")
def h_data_too_big(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), data(1, b"x" * 16385))
    return stream_error(c, FRAME_SIZE_ERROR)


@case("http2/4.2.3 HEADERS over SETTINGS_MAX_FRAME_SIZE", "GOAWAY FRAME_SIZE_ERROR or close")
def h_headers_too_big(c):
    b = c.enc.encode(request(extra=[("x-pad-%d" % i, "x" * 1000) for i in range(17)]),
                     huffman=False)
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b))
    return conn_error(c, FRAME_SIZE_ERROR)


@case("http2/4.3.1 an invalid header block", "GOAWAY COMPRESSION_ERROR or close")
def h_bad_block(c):
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x00\x00\x00\x00"))
    return conn_error(c, COMPRESSION_ERROR)


@case("http2/4.3.2 PRIORITY between HEADERS and CONTINUATION", "GOAWAY PROTOCOL_ERROR or close")
def h_prio_in_block(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b[:3]),
           PriorityFrame(1, depends_on=0, stream_weight=16).serialize(),
           raw_frame(CONTINUATION, END_HEADERS, 1, b[3:]))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/4.3.3 HEADERS on another stream within a header block",
      "GOAWAY PROTOCOL_ERROR or close")
def h_headers_in_block(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b), headers(c, 3))
    return conn_error(c, PROTOCOL_ERROR)


# http2/5.1 Stream states.

@case("http2/5.1.1 idle: DATA", "GOAWAY PROTOCOL_ERROR or close")
def h_idle_data(c):
    c.send(data(1))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.2 idle: RST_STREAM", "GOAWAY PROTOCOL_ERROR or close")
def h_idle_rst(c):
    c.send(RstStreamFrame(1, error_code=CANCEL).serialize())
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.3 idle: WINDOW_UPDATE", "GOAWAY PROTOCOL_ERROR or close")
def h_idle_wu(c):
    c.send(WindowUpdateFrame(1, window_increment=100).serialize())
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.4 idle: CONTINUATION", "GOAWAY PROTOCOL_ERROR or close")
def h_idle_cont(c):
    c.send(raw_frame(CONTINUATION, END_HEADERS, 1, block(c, request())))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.5 half-closed (remote): DATA", "STREAM_CLOSED (stream or connection)")
def h_hcr_data(c):
    c.send(headers(c, 1), data(1))
    return stream_error(c, STREAM_CLOSED)


@case("http2/5.1.6 half-closed (remote): HEADERS", "STREAM_CLOSED (stream or connection)")
def h_hcr_headers(c):
    c.send(headers(c, 1), headers(c, 1))
    return stream_error(c, STREAM_CLOSED)


@case("http2/5.1.7 half-closed (remote): CONTINUATION",
      "STREAM_CLOSED or PROTOCOL_ERROR (stream or connection)")
def h_hcr_cont(c):
    c.send(headers(c, 1), raw_frame(CONTINUATION, END_HEADERS, 1, block(c, [("x-a", "1")])))
    return stream_error(c, STREAM_CLOSED, PROTOCOL_ERROR)


@case("http2/5.1.8 closed: DATA after RST_STREAM", "STREAM_CLOSED (stream or connection)")
def h_closed_rst_data(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           RstStreamFrame(1, error_code=CANCEL).serialize(), data(1))
    return stream_error(c, STREAM_CLOSED)


@case("http2/5.1.9 closed: HEADERS after RST_STREAM", "STREAM_CLOSED (stream or connection)")
def h_closed_rst_headers(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           RstStreamFrame(1, error_code=CANCEL).serialize(), headers(c, 1))
    return stream_error(c, STREAM_CLOSED)


@case("http2/5.1.10 closed: CONTINUATION after RST_STREAM",
      "STREAM_CLOSED or PROTOCOL_ERROR (stream or connection)")
def h_closed_rst_cont(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           RstStreamFrame(1, error_code=CANCEL).serialize(),
           raw_frame(CONTINUATION, END_HEADERS, 1, block(c, [("x-a", "1")])))
    return stream_error(c, STREAM_CLOSED, PROTOCOL_ERROR)


def closed_then(c, frame_fn, *codes):
    c.send(headers(c, 1))
    ok, why = response(c, 1)
    if not ok:
        return ok, "the first response: " + why
    c.send(frame_fn())
    return conn_error(c, *codes)


@case("http2/5.1.11 closed: DATA", "GOAWAY STREAM_CLOSED or close")
def h_closed_data(c):
    return closed_then(c, lambda: data(1), STREAM_CLOSED)


@case("http2/5.1.12 closed: HEADERS", "GOAWAY STREAM_CLOSED or close")
def h_closed_headers(c):
    return closed_then(c, lambda: headers(c, 1), STREAM_CLOSED)


@case("http2/5.1.13 closed: CONTINUATION", "GOAWAY STREAM_CLOSED or PROTOCOL_ERROR or close")
def h_closed_cont(c):
    return closed_then(c, lambda: raw_frame(CONTINUATION, END_HEADERS, 1,
                                            block(c, [("x-a", "1")])),
                       STREAM_CLOSED, PROTOCOL_ERROR)


@case("http2/5.1.1.1 an even stream id from the client", "GOAWAY PROTOCOL_ERROR or close")
def h_even_id(c):
    c.send(headers(c, 2))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.1.2 a stream id below one used before", "GOAWAY PROTOCOL_ERROR or close")
def h_lower_id(c):
    c.send(headers(c, 5))
    ok, why = response(c, 5)
    if not ok:
        return ok, why
    c.send(headers(c, 3))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.2.1 more streams than SETTINGS_MAX_CONCURRENT_STREAMS",
      "RST_STREAM or GOAWAY PROTOCOL_ERROR or REFUSED_STREAM, or close")
def h_concurrency(c):
    n = c.server_settings.get(3)
    if n is None or n > 1000:
        return False, "SETTINGS_MAX_CONCURRENT_STREAMS is %s" % n
    # Streams held open (no END_STREAM), then one more.
    fields = request("POST")
    c.send(*[headers(c, 1 + 2 * i, fields, end_stream=False) for i in range(n + 1)])
    return stream_error(c, PROTOCOL_ERROR, REFUSED_STREAM)


@case("http2/5.3.1.1 HEADERS depending on its own stream", "PROTOCOL_ERROR (stream or connection)")
def h_self_dep_headers(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS | PRIO_FLAG, 3,
                     (3).to_bytes(4, "big") + b"\x0f" + b))
    return stream_error(c, PROTOCOL_ERROR)


@case("http2/5.3.1.3 trailers depending on their own stream",
      "PROTOCOL_ERROR (stream or connection)")
def h_self_dep_trailers(c):
    c.send(headers(c, 3, request("POST"), end_stream=False), data(3, end_stream=False),
           raw_frame(HEADERS, END_STREAM | END_HEADERS | PRIO_FLAG, 3,
                     (3).to_bytes(4, "big") + b"\x0f" + block(c, [("x-sum", "1")])))
    return stream_error(c, PROTOCOL_ERROR)


@case("http2/5.3.1.2 PRIORITY depending on its own stream", "PROTOCOL_ERROR (stream or connection)")
def h_self_dep_prio(c):
    c.send(raw_frame(PRIORITY, 0, 3, (3).to_bytes(4, "big") + b"\x0f"))
    return stream_error(c, PROTOCOL_ERROR)


@case("http2/5.4.1.1 a connection error ends with GOAWAY", "GOAWAY, then close")
def h_goaway_then_close(c):
    c.send(raw_frame(PING, 0, 3, b"h2conf!!"))
    seen = False
    while True:
        f = c.next()
        if f is None:
            return False, "GOAWAY seen %s, no close" % seen
        if f == "closed":
            return seen, "" if seen else "closed without GOAWAY"
        if isinstance(f, GoAwayFrame):
            seen = True
            if f.error_code != PROTOCOL_ERROR:
                return False, describe(f)


@case("http2/5.5.1 an unknown extension frame is ignored", "PING ACK")
def h_ext_frame(c):
    c.send(raw_frame(0xFF, 0xFF, 0, b"extension"), raw_frame(0x20, 0, 1, b"x"))
    return ping_ack(c)


@case("http2/5.5.2 an unknown frame within a header block", "GOAWAY PROTOCOL_ERROR or close")
def h_ext_in_block(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b[:3]), raw_frame(0x16, 0, 0, b"0123"),
           raw_frame(CONTINUATION, END_HEADERS, 1, b[3:]))
    return conn_error(c, PROTOCOL_ERROR)


# http2/6 Frame definitions.

@case("http2/6.1.1 DATA on stream 0", "GOAWAY PROTOCOL_ERROR or close")
def h_data_0(c):
    c.send(data(0))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.1.2 DATA on a half-closed (remote) stream", "STREAM_CLOSED (stream or connection)")
def h_data_hcr(c):
    c.send(headers(c, 1, request("POST")), data(1))
    return stream_error(c, STREAM_CLOSED)


@case("http2/6.1.3 DATA whose padding is too long", "GOAWAY PROTOCOL_ERROR or close")
def h_data_pad(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           raw_frame(DATA, END_STREAM | PADDED, 1, b"\x06test"))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.2.1 HEADERS without END_HEADERS, then PRIORITY", "GOAWAY PROTOCOL_ERROR or close")
def h_headers_prio(c):
    c.send(raw_frame(HEADERS, END_STREAM, 1, block(c, request())),
           PriorityFrame(1, depends_on=0, stream_weight=16).serialize())
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.2.2 HEADERS without END_HEADERS, then HEADERS on another stream",
      "GOAWAY PROTOCOL_ERROR or close")
def h_headers_headers(c):
    c.send(raw_frame(HEADERS, END_STREAM, 1, block(c, request())), headers(c, 3))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.2.3 HEADERS on stream 0", "GOAWAY PROTOCOL_ERROR or close")
def h_headers_0(c):
    c.send(headers(c, 0))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.2.4 HEADERS whose padding is too long", "GOAWAY PROTOCOL_ERROR or close")
def h_headers_pad(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS | PADDED, 1, bytes([len(b) + 1]) + b))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.3.1 PRIORITY on stream 0", "GOAWAY PROTOCOL_ERROR or close")
def h_prio_0(c):
    c.send(raw_frame(PRIORITY, 0, 0, (1).to_bytes(4, "big") + b"\x0f"))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.3.2 PRIORITY of 4 bytes", "FRAME_SIZE_ERROR (stream or connection)")
def h_prio_len(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           raw_frame(PRIORITY, 0, 1, (0).to_bytes(4, "big")))
    return stream_error(c, FRAME_SIZE_ERROR)


@case("http2/6.4.1 RST_STREAM on stream 0", "GOAWAY PROTOCOL_ERROR or close")
def h_rst_0(c):
    c.send(raw_frame(RST_STREAM, 0, 0, (CANCEL).to_bytes(4, "big")))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.4.2 RST_STREAM on an idle stream", "GOAWAY PROTOCOL_ERROR or close")
def h_rst_idle(c):
    c.send(raw_frame(RST_STREAM, 0, 3, (CANCEL).to_bytes(4, "big")))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.4.3 RST_STREAM of 3 bytes", "GOAWAY FRAME_SIZE_ERROR or close")
def h_rst_len(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), raw_frame(RST_STREAM, 0, 1, b"\0\0\0"))
    return conn_error(c, FRAME_SIZE_ERROR)


@case("http2/6.5.1 SETTINGS ACK with a payload", "GOAWAY FRAME_SIZE_ERROR or close")
def h_settings_ack_len(c):
    c.send(raw_frame(SETTINGS, ACK, 0, b"\0\x01\0\0\x10\0"))
    return conn_error(c, FRAME_SIZE_ERROR)


@case("http2/6.5.2 SETTINGS on a stream", "GOAWAY PROTOCOL_ERROR or close")
def h_settings_sid(c):
    c.send(raw_frame(SETTINGS, 0, 1, b"\0\x03\0\0\0\x64"))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.5.3 SETTINGS of a length not a multiple of 6", "GOAWAY FRAME_SIZE_ERROR or close")
def h_settings_len(c):
    c.send(raw_frame(SETTINGS, 0, 0, b"\0\x03\0\0"))
    return conn_error(c, FRAME_SIZE_ERROR)


def setting(ident, value):
    return raw_frame(SETTINGS, 0, 0, ident.to_bytes(2, "big") + value.to_bytes(4, "big"))


@case("http2/6.5.2.1 SETTINGS_ENABLE_PUSH of 2", "GOAWAY PROTOCOL_ERROR or close")
def h_push_2(c):
    c.send(setting(2, 2))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.5.2.2 SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
      "GOAWAY FLOW_CONTROL_ERROR or close")
def h_window_max(c):
    c.send(setting(4, 2 ** 31))
    return conn_error(c, FLOW_CONTROL_ERROR)


@case("http2/6.5.2.3 SETTINGS_MAX_FRAME_SIZE below 2^14", "GOAWAY PROTOCOL_ERROR or close")
def h_frame_size_low(c):
    c.send(setting(5, 16383))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.5.2.4 SETTINGS_MAX_FRAME_SIZE over 2^24-1", "GOAWAY PROTOCOL_ERROR or close")
def h_frame_size_high(c):
    c.send(setting(5, 2 ** 24))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.5.2.5 an unknown SETTINGS parameter is ignored", "SETTINGS ACK")
def h_settings_unknown(c):
    c.send(setting(0xFF, 1))
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f)
        if isinstance(f, SettingsFrame) and "ACK" in f.flags:
            return True, ""


@case("http2/6.5.3.1 SETTINGS_INITIAL_WINDOW_SIZE twice: the last one holds",
      "DATA of 1 byte")
def h_settings_order(c):
    c.send(raw_frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + (100).to_bytes(4, "big") +
                     (4).to_bytes(2, "big") + (1).to_bytes(4, "big")))
    c.send(headers(c, 1))
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.stream_id == 1:
            return len(f.data) == 1, "DATA of %d bytes" % len(f.data)


@case("http2/6.5.3.2 SETTINGS are acknowledged", "SETTINGS ACK")
def h_settings_ack(c):
    return g_settings(c)


@case("http2/6.7.1 PING is answered with its payload", "PING ACK")
def h_ping(c):
    return ping_ack(c, b"\xff" * 8)


@case("http2/6.7.2 a PING ACK is not answered", "no PING ACK of its payload")
def h_ping_ack(c):
    c.send(raw_frame(PING, ACK, 0, b"unsolici"))
    c.send(PingFrame(0, opaque_data=b"h2conf!!").serialize())
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f)
        if isinstance(f, PingFrame) and "ACK" in f.flags:
            return f.opaque_data == b"h2conf!!", "ACK of %r" % f.opaque_data


@case("http2/6.7.3 PING on a stream", "GOAWAY PROTOCOL_ERROR or close")
def h_ping_sid(c):
    c.send(raw_frame(PING, 0, 1, b"h2conf!!"))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.7.4 PING of 6 bytes", "GOAWAY FRAME_SIZE_ERROR or close")
def h_ping_len(c):
    c.send(raw_frame(PING, 0, 0, b"h2conf"))
    return conn_error(c, FRAME_SIZE_ERROR)


@case("http2/6.8.1 GOAWAY on a stream", "GOAWAY PROTOCOL_ERROR or close")
def h_goaway_sid(c):
    c.send(raw_frame(GOAWAY, 0, 1, b"\0\0\0\0\0\0\0\0"))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.9.1 WINDOW_UPDATE of 0 on the connection", "GOAWAY PROTOCOL_ERROR or close")
def h_wu0_conn(c):
    c.send(raw_frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.9.2 WINDOW_UPDATE of 0 on a stream", "PROTOCOL_ERROR (stream or connection)")
def h_wu0_stream(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           raw_frame(WINDOW_UPDATE, 0, 1, b"\0\0\0\0"))
    return stream_error(c, PROTOCOL_ERROR)


@case("http2/6.9.3 WINDOW_UPDATE of 3 bytes", "GOAWAY FRAME_SIZE_ERROR or close")
def h_wu_len(c):
    c.send(raw_frame(WINDOW_UPDATE, 0, 0, b"\0\0\x01"))
    return conn_error(c, FRAME_SIZE_ERROR)


@case("http2/6.9.1.1 SETTINGS_INITIAL_WINDOW_SIZE of 1", "DATA of 1 byte")
def h_window_1(c):
    c.send(setting(4, 1), headers(c, 1))
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.stream_id == 1:
            return len(f.data) == 1, "DATA of %d bytes" % len(f.data)


@case("http2/6.9.1.2 the connection's window over 2^31-1", "GOAWAY FLOW_CONTROL_ERROR or close")
def h_conn_window_overflow(c):
    c.send(WindowUpdateFrame(0, window_increment=2 ** 31 - 1).serialize(),
           WindowUpdateFrame(0, window_increment=2 ** 31 - 1).serialize())
    return conn_error(c, FLOW_CONTROL_ERROR)


@case("http2/6.9.1.3 a stream's window over 2^31-1", "FLOW_CONTROL_ERROR (stream or connection)")
def h_stream_window_overflow(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           WindowUpdateFrame(1, window_increment=2 ** 31 - 1).serialize(),
           WindowUpdateFrame(1, window_increment=2 ** 31 - 1).serialize())
    return stream_error(c, FLOW_CONTROL_ERROR)


@case("http2/6.9.2.1 SETTINGS_INITIAL_WINDOW_SIZE raised after the window was spent",
      "DATA of 1 byte after the raise")
def h_window_raise(c):
    c.send(setting(4, 0), headers(c, 1, request("GET", ARGS.big)))
    # The head comes, no DATA (the window is 0); then a window of 1: DATA of 1 byte.
    end = time.time() + 0.5
    while time.time() < end:
        saved, c.deadline = c.deadline, end
        f = c.next()
        c.deadline = saved
        if f is None:
            break
        if f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.data:
            return False, "DATA of %d bytes with a window of 0" % len(f.data)
    c.send(setting(4, 1))
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.stream_id == 1:
            return len(f.data) == 1, "DATA of %d bytes" % len(f.data)


@case("http2/6.9.2.2 SETTINGS_INITIAL_WINDOW_SIZE makes a window negative",
      "no DATA until WINDOW_UPDATE makes it positive, then DATA")
def h_window_negative(c):
    c.send(headers(c, 1, request("GET", ARGS.big)))
    got = 0
    while got < 65535:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f) + " after %d bytes" % got
        if isinstance(f, DataFrame) and f.stream_id == 1:
            got += len(f.data)
    # The stream's window is 0: lowered by 100 it is -100; 100 brings it to 0, 1 more to 1.
    c.send(setting(4, 65535 - 100), WindowUpdateFrame(0, window_increment=1 << 20).serialize(),
           WindowUpdateFrame(1, window_increment=100).serialize())
    end = time.time() + 0.5
    while time.time() < end:
        saved, c.deadline = c.deadline, end
        f = c.next()
        c.deadline = saved
        if f is None:
            break
        if f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.data:
            return False, "DATA of %d bytes in a window of 0" % len(f.data)
    c.send(WindowUpdateFrame(1, window_increment=1).serialize())
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.stream_id == 1:
            return len(f.data) == 1, "DATA of %d bytes" % len(f.data)


def first_data(c, sid):
    """The length of the next DATA on sid, or the verdict's failure."""
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return None, describe(f)
        if isinstance(f, DataFrame) and f.stream_id == sid:
            return len(f.data), ""


def settings_acked(c):
    while True:
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f)
        if isinstance(f, SettingsFrame) and "ACK" in f.flags:
            return True, ""


@case("http2/6.9.2.4 windows of 3, then of 2 (h2spec's shape): -1, then 1 after WINDOW_UPDATE 2",
      "DATA of 3 bytes, then of 1 byte (a body of 5 bytes or more at --path)")
def h_window_3_2(c):
    c.send(setting(4, 3))
    ok, why = settings_acked(c)
    if not ok:
        return ok, why
    c.send(headers(c, 1))
    n, why = first_data(c, 1)
    if n != 3:
        return False, why or "DATA of %d bytes" % n
    c.send(setting(4, 2))
    ok, why = settings_acked(c)
    if not ok:
        return ok, why
    c.send(WindowUpdateFrame(1, window_increment=2).serialize())
    n, why = first_data(c, 1)
    return n == 1, why or "DATA of %d bytes" % n


@case("http2/6.9.2.5 a window of 0, then of 1 after the HEADERS (h2spec's shape)",
      "DATA of 1 byte")
def h_window_0_1(c):
    c.send(setting(4, 0))
    ok, why = settings_acked(c)
    if not ok:
        return ok, why
    c.send(headers(c, 1), setting(4, 1))
    n, why = first_data(c, 1)
    return n == 1, why or "DATA of %d bytes" % n


@case("http2/6.9.2.3 SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1 (with a stream open)",
      "GOAWAY FLOW_CONTROL_ERROR or close")
def h_window_max_open(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), setting(4, 2 ** 31))
    return conn_error(c, FLOW_CONTROL_ERROR)


@case("http2/6.10.1 CONTINUATION frames of one block", "a 200")
def h_cont_ok(c):
    b = block(c, request(extra=[("x-%d" % i, "v" * 10) for i in range(5)]))
    step = max(1, len(b) // 4)
    parts = [b[i:i + step] for i in range(0, len(b), step)]
    frames = [raw_frame(HEADERS, END_STREAM, 1, parts[0])]
    frames += [raw_frame(CONTINUATION, END_HEADERS if i == len(parts) - 1 else 0, 1, p)
               for i, p in enumerate(parts) if i > 0]
    c.send(*frames)
    return response(c, 1, 200)


@case("http2/6.10.2 a block followed by a frame that is not CONTINUATION",
      "GOAWAY PROTOCOL_ERROR or close")
def h_cont_missing(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b[:3]), data(1))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.10.3 CONTINUATION on stream 0", "GOAWAY PROTOCOL_ERROR or close")
def h_cont_0(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b[:3]), raw_frame(CONTINUATION, END_HEADERS, 0, b[3:]))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/6.10.4 CONTINUATION after END_HEADERS", "GOAWAY PROTOCOL_ERROR or close")
def h_cont_after_end(c):
    c.send(headers(c, 1), raw_frame(CONTINUATION, END_HEADERS, 1, block(c, [("x-a", "1")])))
    return conn_error(c, PROTOCOL_ERROR, STREAM_CLOSED)


@case("http2/6.10.5 CONTINUATION after a CONTINUATION with END_HEADERS",
      "GOAWAY PROTOCOL_ERROR or close")
def h_cont_after_cont(c):
    b = block(c, request())
    c.send(raw_frame(HEADERS, END_STREAM, 1, b[:3]), raw_frame(CONTINUATION, END_HEADERS, 1, b[3:]),
           raw_frame(CONTINUATION, END_HEADERS, 1, block(c, [("x-a", "1")])))
    return conn_error(c, PROTOCOL_ERROR, STREAM_CLOSED)


@case("http2/6.10.6 CONTINUATION after DATA", "GOAWAY PROTOCOL_ERROR or close")
def h_cont_after_data(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), data(1, end_stream=False),
           raw_frame(CONTINUATION, END_HEADERS, 1, block(c, [("x-a", "1")])))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/5.1.14 half-closed (remote): DATA after trailers with END_STREAM",
      "STREAM_CLOSED (stream or connection)")
def h_data_after_trailers(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), data(1, end_stream=False),
           headers(c, 1, [("x-t", "1")]), data(1))
    return stream_error(c, STREAM_CLOSED)


# http2/7 Error codes.

@case("http2/7.1 GOAWAY of an unknown error code", "no error from the server")
def h_goaway_unknown(c):
    c.send(GoAwayFrame(0, last_stream_id=0, error_code=0xFF).serialize())
    while True:
        f = c.next()
        if f is None or f == "closed":
            return True, ""
        if isinstance(f, GoAwayFrame) and f.error_code != NO_ERROR:
            return False, describe(f)


@case("http2/7.2 RST_STREAM of an unknown error code", "PING ACK")
def h_rst_unknown(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           RstStreamFrame(1, error_code=0xFF).serialize())
    return ping_ack(c)


# http2/8.1 HTTP message exchange: malformed requests are stream errors PROTOCOL_ERROR.

def malformed(name, fields_fn, extra_frames=None):
    @case(name, "PROTOCOL_ERROR (stream or connection), or a 400")
    def run(c):
        fields = fields_fn()
        end = extra_frames is None
        frames = [headers(c, 1, fields, end_stream=end)]
        if extra_frames is not None:
            frames += extra_frames(c)
        c.send(*frames)
        return malformed_verdict(c, 1)
    return run


def malformed_verdict(c, sid):
    """RST_STREAM/GOAWAY PROTOCOL_ERROR, a close, or a 400 (magpied's own checks answer a
    request it cannot take with 400, as over HTTP/1.1)."""
    while True:
        f = c.next()
        if f == "closed":
            return True, ""
        if f is None:
            return False, describe(f)
        if isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return (f.error_code == PROTOCOL_ERROR,
                    "" if f.error_code == PROTOCOL_ERROR else describe(f))
        if isinstance(f, HeadersFrame) and f.stream_id == sid:
            st = dict(c.headers.get(sid, [])).get(":status")
            if st != "400":
                return False, ":status %s" % st
            return True, ""


malformed("http2/8.1.1 a second HEADERS without END_STREAM",
          lambda: request("POST"),
          lambda c: [data(1, end_stream=False), headers(c, 1, [("x-trailer", "1")],
                                                        end_stream=False)])
malformed("http2/8.1.2.1 an upper-case field name", lambda: request(extra=[("X-Upper", "1")]))
malformed("http2/8.1.2.1.1 an unknown pseudo-header field",
          lambda: request()[:3] + [(":foo", "x")] + request()[3:])
malformed("http2/8.1.2.1.2 a response pseudo-header field in a request",
          lambda: request()[:3] + [(":status", "200")] + request()[3:])
malformed("http2/8.1.2.1.3 a pseudo-header field in trailers", lambda: request("POST"),
          lambda c: [data(1, end_stream=False), headers(c, 1, [(":method", "POST")])])
malformed("http2/8.1.2.1.4 a pseudo-header field after a regular one",
          lambda: request()[:3] + [("x-a", "1"), (":authority", "127.0.0.1")])
malformed("http2/8.1.2.2.1 connection", lambda: request(extra=[("connection", "keep-alive")]))
malformed("http2/8.1.2.2.2 keep-alive", lambda: request(extra=[("keep-alive", "300")]))
malformed("http2/8.1.2.2.3 proxy-connection", lambda: request(extra=[("proxy-connection", "x")]))
malformed("http2/8.1.2.2.4 transfer-encoding",
          lambda: request(extra=[("transfer-encoding", "chunked")]))
malformed("http2/8.1.2.2.5 upgrade", lambda: request(extra=[("upgrade", "h2c")]))
malformed("http2/8.1.2.2.6 TE other than trailers", lambda: request(extra=[("te", "gzip")]))
malformed("http2/8.1.2.3.1 an empty :path", lambda: request(path=""))
malformed("http2/8.1.2.3.2 no :method", lambda: request()[1:])
malformed("http2/8.1.2.3.3 no :scheme", lambda: [request()[0]] + request()[2:])
malformed("http2/8.1.2.3.4 no :path", lambda: request()[:2] + request()[3:])
malformed("http2/8.1.2.3.5 :method twice", lambda: [request()[0]] + request())
malformed("http2/8.1.2.3.6 :scheme twice", lambda: request()[:2] + request()[1:])
malformed("http2/8.1.2.3.7 :path twice", lambda: request()[:3] + request()[2:])
malformed("http2/8.1.2.3.8 a :path not absolute", lambda: request(path="foo"))
malformed("http2/8.1.2.6.1 content-length above the DATA",
          lambda: request("POST", extra=[("content-length", "1")]),
          lambda c: [data(1, b"test")])
malformed("http2/8.1.2.6.2 content-length above the DATA of several frames",
          lambda: request("POST", extra=[("content-length", "1")]),
          lambda c: [data(1, b"te", False), data(1, b"st")])
malformed("http2/8.1.2.6.3 content-length below the DATA",
          lambda: request("POST", extra=[("content-length", "8")]),
          lambda c: [data(1, b"test")])
malformed("http2/8.1.2.6.4 content-length, and END_STREAM on the HEADERS",
          lambda: request("POST", extra=[("content-length", "4")]))
malformed("http2/8.1.2.6.5 two content-length values",
          lambda: request("POST", extra=[("content-length", "4"), ("content-length", "5")]),
          lambda c: [data(1, b"test")])
malformed("http2/8.1.2.6.6 a content-length not a number",
          lambda: request("POST", extra=[("content-length", "4x")]),
          lambda c: [data(1, b"test")])
malformed("http2/8.2.1.1 a field value with a CR", lambda: request(extra=[("x-a", "a\rb")]))
malformed("http2/8.2.1.2 a field value with leading space", lambda: request(extra=[("x-a", " a")]))
malformed("http2/8.2.1.3 a field name with a space", lambda: request(extra=[("x a", "a")]))
malformed("http2/8.2.1.4 an empty field name", lambda: request(extra=[("", "a")]))
malformed("http2/8.5.1 CONNECT with :scheme and :path",
          lambda: [(":method", "CONNECT"), (":scheme", "http"), (":path", "/"),
                   (":authority", "127.0.0.1:1")])
malformed("http2/8.5.2 CONNECT without :authority", lambda: [(":method", "CONNECT")])
malformed("http2/8.3.1.1 :authority with userinfo (RFC 9113 8.3.1: MUST NOT)",
          lambda: request(authority=False) + [(":authority", "user@127.0.0.1")])
malformed("http2/8.3.1.2 :authority not an authority (an IP-literal without its ']')",
          lambda: request(authority=False) + [(":authority", "[::1")])
malformed("http2/8.3.1.3 Host alone, with a port that is not one",
          lambda: request(authority=False, extra=[("host", "127.0.0.1:8o")]))
malformed("http2/8.3.1 :protocol without extended CONNECT",
          lambda: request() + [(":protocol", "websocket")])


@case("http2/8.2.1 PUSH_PROMISE from the client", "GOAWAY PROTOCOL_ERROR or close")
def h_push_promise(c):
    c.send(headers(c, 1, request("POST"), end_stream=False),
           raw_frame(PUSH_PROMISE, END_HEADERS, 1, (2).to_bytes(4, "big") + block(c, request())))
    return conn_error(c, PROTOCOL_ERROR)


@case("http2/8.5.3 CONNECT to an authority", "a response (magpied tunnels nothing: 501)")
def h_connect(c):
    c.send(headers(c, 1, [(":method", "CONNECT"), (":authority", "127.0.0.1:1")],
                   end_stream=False))
    return any_status(c, 1)


malformed("http2/8.3.2 a Host that names another than :authority (RFC 9113 8.3.1's SHOULD)",
          lambda: request(extra=[("host", "other.example")]))


@case("http2/8.3.3 Host as :authority, and Host alone", "a 200 to each")
def h_host_same(c):
    c.send(headers(c, 1, request(extra=[("host", "127.0.0.1:%d" % ARGS.port)])))
    ok, why = response(c, 1, 200)
    if not ok:
        return ok, why
    c.send(headers(c, 3, request(authority=False, extra=[("host", "127.0.0.1")])))
    return response(c, 3, 200)


@case("http2/8.2.4 response heads of several kinds (404, 405, 206, 304, HEAD, OPTIONS *)",
      "each head well-formed: :status first, lower-case names, no connection-specific field")
def h_heads(c):
    asks = [(request(path="/h2conf-nothing-here"), None),
            (request("DELETE"), None),
            (request("GET", ARGS.big, extra=[("range", "bytes=0-9")]), None),
            (request("HEAD", ARGS.big), None),
            (request("OPTIONS", "*"), None)]
    sid = 1
    for fields, status in asks:
        c.send(headers(c, sid, fields))
        ok, why = response(c, sid, status)
        if not ok:
            return False, "%s: %s" % (dict(fields)[":path"], why)
        sid += 2
    etag = dict(c.headers.get(5, [])).get("etag")
    if etag is not None:
        c.send(headers(c, sid, request("GET", ARGS.big, extra=[("if-none-match", etag)])))
        ok, why = response(c, sid, 304)
        if not ok:
            return False, "If-None-Match: " + why
    return True, ""


@case("http2/8.2.2 TE: trailers, and cookie crumbs", "a 200")
def h_te_trailers(c):
    c.send(headers(c, 1, request(extra=[("te", "trailers"), ("cookie", "a=1"),
                                        ("cookie", "b=2")])))
    return response(c, 1, 200)


@case("http2/6.5.2.6 a header list over SETTINGS_MAX_HEADER_LIST_SIZE",
      "a 431, or RST_STREAM or GOAWAY (any code), or close")
def h_header_list_size(c):
    limit = c.server_settings.get(6)
    if limit is None:
        return False, "no SETTINGS_MAX_HEADER_LIST_SIZE"
    n = limit // 4000 + 2
    b = c.enc.encode(request(extra=[("x-big-%d" % i, "v" * 4000) for i in range(n)]),
                     huffman=False)
    parts = [b[i:i + 16384] for i in range(0, len(b), 16384)]
    frames = [raw_frame(HEADERS, END_STREAM | (END_HEADERS if len(parts) == 1 else 0), 1,
                        parts[0])]
    frames += [raw_frame(CONTINUATION, END_HEADERS if i == len(parts) - 1 else 0, 1, p)
               for i, p in enumerate(parts) if i > 0]
    c.send(*frames)
    while True:
        f = c.next()
        if f is None:
            return False, describe(f)
        if f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return True, ""
        if isinstance(f, HeadersFrame) and f.stream_id == 1:
            st = dict(c.headers.get(1, [])).get(":status")
            return st == "431", ":status %s" % st


@case("http2/5.4.2.1 a stream reset while its response is sent",
      "the connection goes on: a 200 after")
def h_reset_midway(c):
    c.send(headers(c, 1, request("GET", ARGS.big)))
    while True:  # the head and a first DATA, then the reset
        f = c.next()
        if f is None or f == "closed" or isinstance(f, (GoAwayFrame, RstStreamFrame)):
            return False, describe(f)
        if isinstance(f, DataFrame) and f.stream_id == 1:
            break
    c.send(RstStreamFrame(1, error_code=CANCEL).serialize(), headers(c, 3))
    return response(c, 3, 200)


@case("http2/5.4.2.2 a stream reset while its body is read", "the connection goes on: a 200 after")
def h_reset_body(c):
    c.send(headers(c, 1, request("POST"), end_stream=False), data(1, b"x" * 1000, False),
           RstStreamFrame(1, error_code=CANCEL).serialize(), headers(c, 3))
    return response(c, 3, 200)


@case("http2/5.1.2.2 streams held by a window of 0 (h2spec's shape), one too many",
      "RST_STREAM or GOAWAY PROTOCOL_ERROR or REFUSED_STREAM, or close")
def h_concurrency_window(c):
    n = c.server_settings.get(3)
    if n is None or n > 1000:
        return False, "SETTINGS_MAX_CONCURRENT_STREAMS is %s" % n
    b = block(c, request())
    c.send(setting(4, 0), *[raw_frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, b)
                            for i in range(n + 1)])
    return stream_error(c, PROTOCOL_ERROR, REFUSED_STREAM)


@case("http2/6.1.4 padding counts against the windows and is given back",
      "the body sent whole within the windows (2 MiB, four fifths of it padding), then PING ACK")
def h_padding_flow(c):
    c.send(headers(c, 1, request("POST"), end_stream=False))
    # The pad length, data, padding: 320 bytes, 2 MiB of them outrun the connection's window
    # (1 MiB), and their data stays below max_body_bytes (1 MiB by default).
    payload = b"\xff" + b"x" * 64 + b"\0" * 255
    sent, total = 0, 6554 * len(payload)  # 2 MiB
    while sent < total:
        conn_win = 65535 + c.credit.get(0, 0) - sent
        stream_win = c.server_settings.get(4, 65535) + c.credit.get(1, 0) - sent
        k = min(min(conn_win, stream_win) // len(payload), (total - sent) // len(payload))
        if k > 0:  # what the windows take, in one write
            last = sent + k * len(payload) >= total
            c.send(*[raw_frame(DATA, PADDED | (END_STREAM if last and i == k - 1 else 0), 1,
                               payload) for i in range(k)])
            sent += k * len(payload)
            continue
        f = c.next()
        if f is None or f == "closed" or isinstance(f, GoAwayFrame):
            return False, describe(f) + " with %d of %d bytes sent" % (sent, total)
        if isinstance(f, RstStreamFrame) or (f.stream_id == 1 and "END_STREAM" in f.flags):
            break  # answered (or refused) before the whole body: the windows are moot
        if isinstance(f, DataFrame) and f.flow_controlled_length:
            c.send(WindowUpdateFrame(0, window_increment=f.flow_controlled_length).serialize(),
                   WindowUpdateFrame(1, window_increment=f.flow_controlled_length).serialize())
    ok, why = ping_ack(c)
    return ok, why


@case("hpack/6.3.2 SETTINGS_HEADER_TABLE_SIZE of 0: the server's blocks keep to it",
      "two 200s, each block decoded with no dynamic table")
def p_table_0(c):
    c.send(setting(1, 0))
    c.dec.max_allowed_table_size = 0
    for sid in (1, 3):
        c.send(headers(c, sid))
        ok, why = response(c, sid, 200)
        if not ok:
            return ok, why
    return True, ""


# hpack (RFC 7541)

@case("hpack/2.3.3.1 an indexed field past the tables", "GOAWAY COMPRESSION_ERROR or close")
def p_index_past(c):
    c.send(headers(c, 1, data=base_block(c) + b"\xff\x7f"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/2.3.3.2 a literal whose name index is past the tables",
      "GOAWAY COMPRESSION_ERROR or close")
def p_lit_index_past(c):
    c.send(headers(c, 1, data=base_block(c) + b"\x7f\x7f\x01a"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/4.2.1 a table size update at the end of a block", "GOAWAY COMPRESSION_ERROR or close")
def p_size_update_late(c):
    c.send(headers(c, 1, data=base_block(c) + b"\x20"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/5.2.1 Huffman padding longer than 7 bits", "GOAWAY COMPRESSION_ERROR or close")
def p_huff_long_pad(c):
    c.send(headers(c, 1, data=base_block(c) + b"\x00\x06x-test\x82\x1f\xff"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/5.2.2 Huffman padding not of EOS's bits", "GOAWAY COMPRESSION_ERROR or close")
def p_huff_bad_pad(c):
    c.send(headers(c, 1, data=base_block(c) + b"\x00\x06x-test\x81\x18"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/5.2.3 EOS within a Huffman string", "GOAWAY COMPRESSION_ERROR or close")
def p_huff_eos(c):
    c.send(headers(c, 1, data=base_block(c) + b"\x00\x06x-test\x84\xff\xff\xff\xff"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/6.1.1 index 0", "GOAWAY COMPRESSION_ERROR or close")
def p_index_0(c):
    c.send(headers(c, 1, data=base_block(c) + b"\x80"))
    return conn_error(c, COMPRESSION_ERROR)


@case("hpack/6.3.1 a table size update over SETTINGS_HEADER_TABLE_SIZE",
      "GOAWAY COMPRESSION_ERROR or close")
def p_size_update_big(c):
    size = c.server_settings.get(1, 4096)
    n = size + 1 - 31
    enc = b"\x3f"
    while n >= 128:
        enc += bytes([0x80 | (n & 0x7F)])
        n >>= 7
    enc += bytes([n])
    c.send(headers(c, 1, data=enc + base_block(c)))
    return conn_error(c, COMPRESSION_ERROR)


# Defences: a connection that misbehaves is ended, and a normal client is served meanwhile.

def served_meanwhile():
    """A GET on a connection of its own answered within a second. True or False."""
    d = Conn()
    d.deadline = time.time() + 1.0
    try:
        if not d.handshake():
            return False
        d.send(headers(d, 1))
        return response(d, 1, 200)[0]
    finally:
        d.close()


def flood(c, frames, *codes):
    """frames sent without reading; another client served meanwhile; then GOAWAY with one of
    codes (or a close) within the case's time."""
    c.s.settimeout(5)
    c.send(*frames)
    c.s.settimeout(0.2)
    if not served_meanwhile():
        return False, "a normal client was not served within 1 s"
    c.deadline = time.time() + CASE_TIMEOUT
    return conn_error(c, *codes)


@case("defence/1 PRIORITY flood", "GOAWAY ENHANCE_YOUR_CALM or close; others served")
def d_priority_flood(c):
    return flood(c, [raw_frame(PRIORITY, 0, 1 + 2 * (i % 1000), (0).to_bytes(4, "big") + b"\x0f")
                     for i in range(20000)], ENHANCE_YOUR_CALM)


@case("defence/2 RST_STREAM provoked by invalid requests, none read",
      "GOAWAY (ENHANCE_YOUR_CALM or PROTOCOL_ERROR) or close; others served")
def d_rst_provoked(c):
    c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frames = []
    for i in range(5000):
        frames.append(headers(c, 1 + 2 * i, request(extra=[("connection", "x")])))
    return flood(c, frames, ENHANCE_YOUR_CALM, PROTOCOL_ERROR)


def made_you_reset(c, extra):
    """Requests each followed by a frame that makes the server reset its stream (MadeYouReset,
    CVE-2025-8671: the resets are the server's, so a client's reset budget does not see them,
    while each request still costs its handler's work)."""
    b = block(c, request())
    frames = []
    for i in range(5000):
        sid = 1 + 2 * i
        frames += [raw_frame(HEADERS, END_STREAM | END_HEADERS, sid, b), extra(sid)]
    return flood(c, frames, *range(1, 14))


@case("defence/2.1 streams reset by the server for a window overflow (MadeYouReset)",
      "GOAWAY (an error) or close; others served")
def d_myr_window(c):
    return made_you_reset(c, lambda sid: WindowUpdateFrame(
        sid, window_increment=2 ** 31 - 1).serialize())


@case("defence/2.2 streams reset by the server for DATA after END_STREAM (MadeYouReset)",
      "GOAWAY (an error) or close; others served")
def d_myr_data(c):
    return made_you_reset(c, lambda sid: data(sid))


@case("defence/2.3 streams reset by the server for a PRIORITY of 4 bytes (MadeYouReset)",
      "GOAWAY (an error) or close; others served")
def d_myr_priority(c):
    return made_you_reset(c, lambda sid: raw_frame(PRIORITY, 0, sid, b"\0\0\0\0"))


@case("defence/3 WINDOW_UPDATE flood", "others served; the connection answers PING or is ended")
def d_wu_flood(c):
    c.s.settimeout(5)
    c.send(*[raw_frame(WINDOW_UPDATE, 0, 0, (1).to_bytes(4, "big")) for _ in range(50000)])
    c.s.settimeout(0.2)
    if not served_meanwhile():
        return False, "a normal client was not served within 1 s"
    c.deadline = time.time() + CASE_TIMEOUT
    ok, why = ping_ack(c)
    return True, "" if ok else why


@case("defence/4 streams held open with windows shut",
      "others served; RST_STREAM REFUSED_STREAM or PROTOCOL_ERROR past the limit")
def d_held_streams(c):
    n = c.server_settings.get(3, 100)
    c.send(setting(4, 0))
    c.send(*[headers(c, 1 + 2 * i, request("GET", ARGS.big)) for i in range(n)])
    if not served_meanwhile():
        return False, "a normal client was not served within 1 s"
    c.send(headers(c, 1 + 2 * n, request("GET", ARGS.big)))
    c.deadline = time.time() + CASE_TIMEOUT
    return stream_error(c, REFUSED_STREAM, PROTOCOL_ERROR)


@case("defence/5 the last stream id", "a 200 on stream 2^31-1, then a lower id refused")
def d_last_id(c):
    c.send(headers(c, 2 ** 31 - 1))
    ok, why = response(c, 2 ** 31 - 1, 200)
    if not ok:
        return ok, why
    c.send(headers(c, 3))
    return conn_error(c, PROTOCOL_ERROR)


@case("defence/6 data dribble: windows of 1 byte given back a byte at a time (CVE-2019-9511)",
      "others served; the connection ended or still answering PING")
def d_dribble(c):
    n = min(c.server_settings.get(3, 100), 100)
    c.send(setting(4, 1), *[headers(c, 1 + 2 * i, request("GET", ARGS.big)) for i in range(n)])
    c.s.settimeout(5)
    for _ in range(20):
        c.send(*[WindowUpdateFrame(1 + 2 * i, window_increment=1).serialize()
                 for i in range(n)])
    c.s.settimeout(0.2)
    if not served_meanwhile():
        return False, "a normal client was not served within 1 s"
    c.deadline = time.time() + CASE_TIMEOUT
    # The 1-byte DATA frames owed, then our PING's ACK, or the connection's end.
    c.send(PingFrame(0, opaque_data=b"dribble!").serialize())
    f = c.next()
    while f is not None and f != "closed" and not isinstance(f, GoAwayFrame) and not (
            isinstance(f, PingFrame) and "ACK" in f.flags):
        f = c.next()
    return f is not None, describe(f)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--ca")
    p.add_argument("--path", default="/")
    p.add_argument("--post-path", default="/")
    p.add_argument("--big", default="/")
    p.add_argument("--list", action="store_true")
    p.add_argument("cases", nargs="*")
    ARGS = p.parse_intermixed_args()
    selected = [cs for cs in CASES
                if not ARGS.cases or any(cs[0].startswith(n) for n in ARGS.cases)]
    if ARGS.list:
        for name, expect, _ in selected:
            print("%s: %s" % (name, expect))
        return 0
    passed = failed = 0
    for name, expect, fn in selected:
        try:
            c = Conn()
        except OSError as e:
            print("FAIL %s: connect: %s" % (name, e))
            failed += 1
            continue
        try:
            if getattr(fn, "no_handshake", False) or c.handshake():
                ok, why = fn(c)
            else:
                ok, why = False, "no handshake"
        except OSError as e:
            ok, why = False, "socket: %s" % e
        finally:
            c.close()
        if ok:
            passed += 1
            print("PASS %s" % name)
        else:
            failed += 1
            print("FAIL %s: expected %s; got %s" % (name, expect, why))
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
