#!/usr/bin/python3
"""Hostile HTTP/2 clients for tests/daemon/e2e/test_http2.c (run with /usr/bin/python3, which
has python3-h2's hyperframe and hpack).

    h2_attack.py PORT MODE      MODE: rapid_reset, ping_flood, settings_flood, continuation,
                                empty_data, hpack_bomb, no_read, padded_data, unknown_type,
                                closed_data, closed_priority, closed_headers

padded_data is DATA with nothing but padding on an open stream; unknown_type, frames of a type
HTTP/2 does not define; the closed_ ones, empty DATA, PRIORITY or an empty HEADERS on stream 1
once 20 streams have been answered since (older than what the server remembers of closed
streams): frames nghttp2 ignores without a callback, which the server counts all the same.

Sends the attack over h2c (prior knowledge), then reads until the server closes or 10 s pass,
and prints one line: "goaway CODE" when a GOAWAY came (CODE its error code), "rst CODE" for a
stream reset without one, "status N" for a response, "closed" for a close without either, or
"open" when the connection is still open at the end.
"""
import socket
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the tests
from h2_common import headers_frame, raw_connect, raw_frame, split_frames  # noqa: E402
from hpack import Encoder  # noqa: E402
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame,  # noqa: E402
                              HeadersFrame, PingFrame, RstStreamFrame, SettingsFrame,
                              WindowUpdateFrame)


def headers(enc, sid, end_stream=True, path="/"):
    return headers_frame(enc, sid, [(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                                    (":path", path)], end_stream)


def send_all(s, data):
    try:
        s.sendall(data)
    except OSError:
        pass


def verdict(s, deadline, buf=b""):
    status = None
    rst = None
    s.settimeout(0.5)
    while time.time() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
        frames, buf = split_frames(buf)
        for f in frames:
            if isinstance(f, GoAwayFrame):
                return "goaway %d" % f.error_code
            if isinstance(f, RstStreamFrame) and rst is None:
                rst = f.error_code
            if isinstance(f, HeadersFrame) and status is None:
                status = "status ?"
                try:
                    from hpack import Decoder
                    for k, v in Decoder().decode(f.data):
                        if k in (b":status", ":status"):
                            status = "status %s" % (v.decode() if isinstance(v, bytes) else v)
                except Exception:  # noqa: BLE001 - a later block needs the earlier table
                    pass
    else:
        return "open" if status is None and rst is None else (status or "rst %d" % rst)
    if rst is not None:
        return "rst %d" % rst
    return status or "closed"


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    s, out = raw_connect(port)
    enc = Encoder()
    left = b""  # the server's bytes read before the verdict, past the last whole frame
    if mode == "rapid_reset":
        for i in range(5000):
            sid = 1 + 2 * i
            out.append(headers(enc, sid, end_stream=False))
            out.append(RstStreamFrame(sid, error_code=8).serialize())
    elif mode == "ping_flood":
        for i in range(20000):
            out.append(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize())
    elif mode == "settings_flood":
        for _ in range(20000):
            out.append(SettingsFrame(0, settings={4: 65535}).serialize())
    elif mode == "continuation":
        f = HeadersFrame(1)
        f.data = enc.encode([(":method", "GET"), (":scheme", "http"), (":path", "/")])
        out.append(f.serialize())
        for i in range(5000):
            c = ContinuationFrame(1)
            c.data = enc.encode([("x-%d" % i, "y" * 10)])
            out.append(c.serialize())
    elif mode in ("empty_data", "padded_data"):
        h = HeadersFrame(1)
        h.data = enc.encode([(":method", "POST"), (":scheme", "http"), (":authority", "a"),
                             (":path", "/echo")])
        h.flags.add("END_HEADERS")
        out.append(h.serialize())
        # DATA without data: empty, or PADDED with a Pad Length of 0
        one = (DataFrame(1, data=b"").serialize() if mode == "empty_data"
               else raw_frame(0, 0x8, 1, b"\x00"))
        out.append(one * 20000)
    elif mode == "unknown_type":
        for _ in range(20000):
            out.append(raw_frame(0xfa, 0, 0))
    elif mode.startswith("closed_"):
        # 20 streams answered, then frames on the first: closed long ago.
        send_all(s, b"".join(out) + b"".join(headers(enc, 1 + 2 * i) for i in range(20)))
        out = []
        s.settimeout(0.5)
        end = time.time() + 5
        ended = 0
        while time.time() < end and ended < 20:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            frames, left = split_frames(left + chunk)
            ended += sum(1 for f in frames if isinstance(f, DataFrame) and
                         "END_STREAM" in f.flags)
        if mode == "closed_data":
            one = raw_frame(0, 0, 1)
        elif mode == "closed_priority":
            one = raw_frame(2, 0, 1, b"\x00\x00\x00\x00\x10")
        else:
            one = raw_frame(1, 0x4, 1)  # END_HEADERS, an empty block
        out.append(one * 20000)
    elif mode == "hpack_bomb":
        # One 4000-byte entry in the dynamic table, then a block that names it again and
        # again: a few bytes on the wire, megabytes decoded.
        big = ("x-bomb", "z" * 4000)
        block = enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "a"),
                            (":path", "/"), big])
        block += enc.encode([big] * 3000)
        for i in range(0, len(block), 16384):
            piece = block[i:i + 16384]
            last = i + 16384 >= len(block)
            f = HeadersFrame(1) if i == 0 else ContinuationFrame(1)
            f.data = piece
            if i == 0:
                f.flags.add("END_STREAM")
            if last:
                f.flags.add("END_HEADERS")
            out.append(f.serialize())
    elif mode == "no_read":
        # Many large responses asked for, none read: the server's writes hit the send limits.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        out.append(SettingsFrame(0, settings={4: 2147483647 - 1}).serialize())
        out.append(WindowUpdateFrame(0, window_increment=2147483647 - 65535).serialize())
        for i in range(50):
            out.append(headers(enc, 1 + 2 * i, path="/files/big.bin"))
        send_all(s, b"".join(out))
        time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 3)
        print("slept")
        return
    send_all(s, b"".join(out))
    print(verdict(s, time.time() + 10, left))
    s.close()


if __name__ == "__main__":
    main()
