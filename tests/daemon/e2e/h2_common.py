"""What the HTTP/2 test clients share (h2_attack.py, h2_stream_client.py, h2_proxy_client.py;
run with /usr/bin/python3, which has python3-h2's hyperframe and hpack): a raw h2c connection
opened, HEADERS frames made, the frames read split out, and the command line's mode run.
"""
import socket
import sys

from hyperframe.frame import Frame, HeadersFrame, SettingsFrame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def raw_connect(port):
    """A connection to 127.0.0.1:port and the client's first frames (the preface and an empty
    SETTINGS), to send with the frames that follow them."""
    return socket.create_connection(("127.0.0.1", port)), [PREFACE, SettingsFrame(0).serialize()]


def headers_frame(enc, sid, fields, end_stream):
    """A HEADERS frame of the fields, coded with the hpack encoder enc."""
    f = HeadersFrame(sid)
    f.data = enc.encode(fields)
    f.flags.add("END_HEADERS")
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()


def split_frames(buf):
    """The whole frames at the start of buf (bytes read), parsed, and the bytes after them."""
    frames = []
    while len(buf) >= 9:
        f, length = Frame.parse_frame_header(memoryview(buf[:9]))
        if len(buf) < 9 + length:
            break
        f.parse_body(memoryview(buf[9:9 + length]))
        buf = buf[9 + length:]
        frames.append(f)
    return frames, buf


def run_mode(modes):
    """argv: PORT MODE ARGS...: modes[MODE](port, ARGS); "timeout" when a socket timed out,
    "unknown mode" for a mode not in modes."""
    port, mode = int(sys.argv[1]), sys.argv[2]
    try:
        if mode in modes:
            modes[mode](port, sys.argv[3:])
        else:
            print("unknown mode")
    except socket.timeout:
        print("timeout")
    sys.stdout.flush()


def raw_frame(ftype, flags, sid, payload=b""):
    """A frame as bytes, whatever its fields: for the malformed ones hyperframe refuses to make."""
    return (len(payload).to_bytes(3, "big") + bytes([ftype, flags]) +
            (sid & 0xFFFFFFFF).to_bytes(4, "big") + payload)


def connect(port, cafile=None, alpn="h2"):
    """A connection to 127.0.0.1:port: plain (h2c by prior knowledge), or TLS with ALPN alpn
    offered and the server's certificate checked against cafile when cafile is given."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small frames go at once
    if cafile is None:
        return s
    import ssl
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    ctx.set_alpn_protocols([alpn])
    return ctx.wrap_socket(s, server_hostname="localhost")
