#!/usr/bin/python3
"""`make fuzz`: hostile configurations and hostile bytes against magpied, a seed per run.

    tests/fuzz/fuzz.py MAGPIED KIND CASES SEED      KIND: config, reload, h1, h2, h2tls, upstream

config  mutated copies of config/*.conf (lines dropped, doubled, cut; keys of magpied.conf(5)
        in any section with values from a list of edge cases; bytes flipped) through
        `magpied -t`: the exit status is 0 or 1, a refusal names the file, no sanitizer report.
reload  one magpied, reloaded with SIGHUP onto such files (most of them valid: keys added,
        routes, sites, listeners and upstreams appended), a request to each listener after
        each reload; it must keep running and stop cleanly, with no sanitizer report.
h1, h2  one magpied with HTTP/1.1 and h2c, sent mutated requests (smuggling shapes, bad
        chunking, huge fields, bytes flipped, split at odd places) and raw HTTP/2 frames (any
        type, flags, stream id and length; SETTINGS and WINDOW_UPDATE edge values; CONTINUATION
        chains; HEADERS with forbidden fields); every 25 cases a normal request must be served.
h2tls   the h2 cases over TLS (ALPN h2 on an [https] listener): the same frames, through the
        TLS transport and its whole-record writes.
upstream  one magpied proxying to a hostile upstream (this script's) that answers each request
        with a mutated response (1xx runs, 101, chunked with trailers, close-delimited, bodies
        to compress, garbage, split at odd places), to HTTP/1.1, HTTP/1.0 and h2c clients;
        every 25 cases a normal request must be served.

A failure prints what failed and the seed; the same SEED replays the same cases. Exit 0 when
every case passed. Needs /usr/bin/python3 with python3-h2 (hpack) for h2, and openssl.
"""
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SANITIZER = re.compile(r'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:')


def fail(msg):
    print(f'fuzz: FAILED: {msg}', flush=True)
    sys.exit(1)


def man_keys():
    """{section: [key, ...]} from magpied.conf(5): every key it documents, as the fuzzer's words."""
    keys, sec, prev = {}, None, ''
    for line in open(os.path.join(ROOT, 'config/magpied.conf.5'), encoding='utf-8'):
        m = re.match(r'^\.SH \[(\w+)', line)
        if m:
            sec = m.group(1)
        elif line.startswith('.SH'):
            sec = None
        else:
            m = re.match(r'^\.BR? (\w+)', line)
            if sec and m and prev.startswith('.TP'):
                keys.setdefault(sec, []).append(m.group(1))
        prev = line
    return keys


VALUES = ['', '0', '1', '-1', '4294967296', '18446744073709551616', '99999999999999999999999', 'on',
          'off', 'ON', 'yes', 'x' * 5000, '127.0.0.1:0', '[::1]:0', '[::1', '127.0.0.1:99999', ':0',
          '/', '/tmp', '/nonexistent', '=', '==', ';', '#', '\\', '"', "'", '%s%s%n', '\x01', '\xff',
          '\u00e9', '0x10', '1e9', ' 5 ', '5ms', 'gzip zstd br', 'a, b, , c', ',', '*', '*.',
          '*.example.com', '1.2.3.4/33', '::/129', '10.0.0.0/8', 'GET POST', 'GET,,POST', '200', '999',
          '301', 'text/html', 'u', 'http://', 'X-A: b', 'X-A:', ':b', 'X-A b', '$host$uri', '${']
GOOD = ['0', '1', '2', '100', '5000', 'on', 'off', '127.0.0.1:0', 'gzip', 'zstd gzip', 'GET POST',
        '*.example.com', '10.0.0.0/8', '::1/128', 'X-A: b', '/tmp', 'text/plain', 'x.example.com']
SECTIONS = ['[http]', '[echo]', '[https]', '[listener a]', '[listener]', '[site x]', '[site]',
            '[runtime]', '[limits]', '[log]', '[server]', '[static]', '[route /x]', '[route = /y]',
            '[route]', '[route /]', '[upstream u]', '[upstream]', '[]', '[' + 's' * 300 + ']',
            '[bogus]', '[route /x/../y]']
BLOCKS = [['[route /p]', 'handler = proxy', 'upstream = u', '[upstream u]', 'server = 127.0.0.1:9'],
          ['[route /s]', 'handler = static', 'root = /tmp', 'compress = gzip'],
          ['[site x]', 'names = x.example.com', '[route = /]', 'handler = text', 'body = x'],
          ['[listener l]', 'listen = 127.0.0.1:0'],
          ['[route /r]', 'handler = redirect', 'location = /x'],
          ['[route /a]', 'handler = text', 'body = a', 'allow = 127.0.0.1', 'deny = all',
           'header_add = X-A: b', 'limit_rate = 5', 'limit_burst = 5']]


class Configs:
    def __init__(self, rnd, tmp):
        self.rnd, self.keys = rnd, man_keys()
        self.bases = []
        for name in ('magpied.conf', 'magpied-tls.conf', 'magpied-proxy.conf'):
            text = open(os.path.join(ROOT, 'config', name), encoding='utf-8').read()
            text = re.sub(r'/etc/magpied/tls/[\w/.-]*privkey\.pem', tmp + '/key.pem', text)
            text = re.sub(r'/etc/magpied/tls/[\w/.-]*\.pem', tmp + '/cert.pem', text)
            self.bases.append(text)

    def line(self):
        r = self.rnd.random()
        if r < 0.15:
            return self.rnd.choice(SECTIONS)
        if r < 0.2:
            return self.rnd.choice(['', ';c', '#c', '=', 'novalue', ' = x', '[', ']', 'k = v = w', '\t\tk=v'])
        sec = self.rnd.choice(list(self.keys))
        key = self.rnd.choice(self.keys[sec])
        if self.rnd.random() < 0.1:
            key += self.rnd.choice(['x', '_', ' ', '.a'])
        if self.rnd.random() < 0.7:
            value = self.rnd.choice(VALUES)
        else:
            value = str(self.rnd.randint(-10, 10 ** self.rnd.randint(1, 12)))
        return f'{key} = {value}'

    def hostile(self):
        lines = self.rnd.choice(self.bases).split('\n')
        for _ in range(self.rnd.randint(1, 8)):
            op, i = self.rnd.random(), self.rnd.randrange(len(lines))
            if op < 0.4:
                lines.insert(i, self.line())
            elif op < 0.55:
                del lines[i]
            elif op < 0.7:
                lines.insert(i, self.rnd.choice(lines))
            elif op < 0.85 and '=' in lines[i]:
                lines[i] = lines[i].split('=')[0] + '= ' + self.rnd.choice(VALUES)
            elif lines[i]:
                p = self.rnd.randrange(len(lines[i]))
                lines[i] = lines[i][:p] + chr(self.rnd.randrange(1, 256)) + lines[i][p + 1:]
        text = '\n'.join(lines)
        return text[:self.rnd.randrange(1, 2000)] if self.rnd.random() < 0.05 else text

    def plausible(self):
        """Mostly valid: a key with a likely value at the end of a section, or a block appended."""
        lines = self.rnd.choice(self.bases).split('\n')
        heads = [i for i, l in enumerate(lines) if l.startswith('[')]
        i = self.rnd.choice(heads)
        sec = lines[i][1:].split(']')[0].split(' ')[0].split('=')[0].strip()
        if sec in self.keys and self.rnd.random() < 0.4:
            j = i + 1
            while j < len(lines) and not lines[j].startswith('['):
                j += 1
            lines.insert(j, f'{self.rnd.choice(self.keys[sec])} = {self.rnd.choice(GOOD + VALUES[:12])}')
        if self.rnd.random() < 0.7:
            lines += self.rnd.choice(BLOCKS)
        return '\n'.join(lines)


def write(path, text):
    with open(path, 'w', encoding='latin-1', errors='replace') as f:
        f.write(text)


def pki(tmp):
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
                    '-nodes', '-keyout', tmp + '/key.pem', '-out', tmp + '/cert.pem', '-days', '2',
                    '-subj', '/CN=localhost'], check=True, capture_output=True)


def fuzz_config(mg, cases, rnd, tmp):
    gen, path = Configs(rnd, tmp), tmp + '/fuzz.conf'
    for n in range(cases):
        text = gen.hostile()
        write(path, text)
        try:
            p = subprocess.run([mg, '-t', '-c', path], capture_output=True, timeout=30)
        except subprocess.TimeoutExpired:
            fail(f'case {n}: magpied -t did not finish in 30 s:\n{text}')
        out = (p.stdout + p.stderr).decode('latin-1')
        if p.returncode not in (0, 1) or SANITIZER.search(out) or (p.returncode and path not in out):
            fail(f'case {n}: magpied -t exited {p.returncode} on:\n{text}\n---- it said:\n{out[-3000:]}')


def start(mg, conf, log_path, listener='http'):
    log = open(log_path, 'w')
    p = subprocess.Popen([mg, '-c', conf], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = open(log_path, encoding='latin-1').read()
        m = re.search(r'listening .*\b' + listener + r'=127\.0\.0\.1:(\d+)', text)
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            fail(f'magpied exited at start:\n{text[-3000:]}')
        time.sleep(0.05)
    p.kill()
    fail('magpied did not start in 30 s')


def stop(p, log_path):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        fail('magpied did not stop within 30 s of SIGTERM')
    text = open(log_path, encoding='latin-1').read()
    if p.returncode != 0 or SANITIZER.search(text):
        fail(f'magpied exited {p.returncode}:\n{text[-4000:]}')


def fuzz_reload(mg, cases, rnd, tmp):
    gen, conf, log_path = Configs(rnd, tmp), tmp + '/reload.conf', tmp + '/reload.log'

    def loopback(text):  # every listener on loopback, on a port the kernel picks
        return re.sub(r'(listen[ \t]*=[ \t]*)[^\n]+', lambda m: m.group(1) + '127.0.0.1:0', text)

    write(conf, loopback(gen.bases[0]))
    p, _ = start(mg, conf, log_path)
    for n in range(cases):
        write(conf, loopback(gen.plausible() if rnd.random() < 0.8 else gen.hostile()))
        p.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        text = open(log_path, encoding='latin-1').read()
        ports = re.findall(r'listening http=127\.0\.0\.1:(\d+)', text)
        for url in ('/', '/metrics', '/healthz'):
            try:
                s = socket.create_connection(('127.0.0.1', int(ports[-1])), timeout=5)
                s.sendall(f'GET {url} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n'.encode())
                while s.recv(65536):
                    pass
                s.close()
            except OSError:
                pass
        if p.poll() is not None:
            fail(f'case {n}: magpied exited {p.returncode} after a reload:\n{text[-3000:]}')
    stop(p, log_path)
    text = open(log_path, encoding='latin-1').read()
    print(f'fuzz: reload: {text.count("reloaded ")} of {cases} files taken, the others refused')


# HTTP/1.1 and h2c on one loopback port, the text route normal() asks for.
WIRE_HEAD = """[http]
listen = 127.0.0.1:0
http2 = on
[echo]
listen =
[runtime]
workers = 2
[log]
access_log = off
[route = /]
handler = text
body = Hello, World!
"""


def serve(tmp):
    os.makedirs(tmp + '/www', exist_ok=True)
    with open(tmp + '/www/big.bin', 'wb') as f:
        f.write(os.urandom(70000))
    write(tmp + '/www/a.txt', 'hello\n' * 100)
    write(tmp + '/wire.conf', WIRE_HEAD + f"""[https]
listen = 127.0.0.1:0
certificate = {tmp}/cert.pem
certificate_key = {tmp}/key.pem
[route = /echo]
handler = echo
methods = POST
[route = /metrics]
handler = metrics
[route /static]
handler = static
root = {tmp}/www
compress = gzip zstd
compress_min_length = 10
""")


H1_REQUESTS = [
    b'GET / HTTP/1.1\r\nHost: a\r\n\r\n',
    b'POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello',
    b'POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n',
    b'GET /static/big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=0-10,100-200\r\nAccept-Encoding: gzip\r\n\r\n',
    b'GET /static/a.txt HTTP/1.1\r\nHost: a\r\nIf-None-Match: "x", W/"y"\r\nAccept-Encoding: zstd;q=0.5, gzip\r\n\r\n',
    b'GET /metrics HTTP/1.0\r\n\r\n', b'OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n',
    b'POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc',
    b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n']
H1_PIECES = [b'\r\n', b'\n', b'\r', b' ', b'\t', b':', b'\x00', b'\xff', b'Transfer-Encoding: chunked\r\n',
             b'Content-Length: 0\r\n', b'Content-Length: 99999999999999999999\r\n', b'Content-Length: -1\r\n',
             b'Transfer-Encoding: gzip, chunked\r\n', b'Host: b\r\n', b'Connection: close\r\n',
             b'Connection: upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n',
             b'ffffffffffffffff\r\n', b'0\r\n\r\n', b'1;ext=1\r\nA\r\n', b'GET', b'HTTP/1.1', b'HTTP/9.9',
             b'/../../', b'%2e%2e/', b'?a=b', b'#f', b'x' * 9000, b'A: ' + b'b' * 70000 + b'\r\n',
             b'Range: bytes=-5, 0-0,,100-\r\n', b'Range: bytes=0-1,0-1,99999999999-\r\n', b',-', b'If-Range: "x"\r\n']


def h1_case(rnd):
    def mutate(b):
        b = bytearray(b)
        for _ in range(rnd.randint(1, 6)):
            r, i = rnd.random(), rnd.randrange(len(b) + 1)
            if r < 0.4:
                b[i:i] = rnd.choice(H1_PIECES)
            elif r < 0.6 and b:
                del b[i:i + rnd.randint(1, 5)]
            elif r < 0.8 and b:
                b[min(i, len(b) - 1)] = rnd.randrange(256)
            else:
                b[i:i] = rnd.choice(H1_REQUESTS)
        return bytes(b)
    return b''.join(mutate(rnd.choice(H1_REQUESTS)) if rnd.random() < 0.7 else rnd.choice(H1_REQUESTS)
                    for _ in range(rnd.randint(1, 4)))


def frame(kind, flags, sid, payload):
    return struct.pack('>I', len(payload))[1:] + bytes([kind, flags]) + struct.pack('>I', sid & 0xffffffff) + payload


def h2_case(rnd):
    import hpack

    def block():
        h = [(b':method', rnd.choice([b'GET', b'POST', b'HEAD', b'CONNECT', b'', b'OPTIONS'])),
             (b':scheme', b'http'),
             (b':path', rnd.choice([b'/', b'/echo', b'/static/big.bin', b'/static/a.txt', b'/metrics', b'*', b'',
                                    b'//..//x', b'/static/../../etc/passwd'])),
             (b':authority', b'localhost')]
        h += rnd.choice([[], [(b'accept-encoding', b'gzip')], [(b'range', b'bytes=0-10,20-30')],
                         [(b'range', rnd.choice([b'bytes=-5,0-0,,100-', b'bytes=0-1,0-1', b'bytes=1-,-1,5-9']))],
                         [(b'content-length', b'5')]])
        if rnd.random() < 0.2:
            rnd.shuffle(h)
        if rnd.random() < 0.2:
            h.append((rnd.choice([b':x', b'Upper', b'connection', b'te', b'transfer-encoding', b'content-length',
                                  b'host', b'']),
                      rnd.choice([b'', b'1', b'chunked', b'trailers', b'\x00', b'x' * 20000])))
        return hpack.Encoder().encode(h)

    def noise():
        r = rnd.random()
        return b'' if r < 0.3 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 20 if r < 0.6 else 3000)))

    out = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' if rnd.random() < 0.95 else noise()
    if rnd.random() < 0.9:
        out += frame(4, 0, 0, b'')
    sid = 1
    for _ in range(rnd.randrange(1, 40)):
        kind = rnd.choice([0, 1, 1, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 8, 9, 9, 10, 0x10, rnd.randrange(256)])
        flags = rnd.choice([0, 1, 4, 5, 8, 0x20, 0x25, rnd.randrange(256)])
        to = rnd.choice([0, 1, 3, 5, 2, sid, sid + 2, 0x7fffffff, 0x80000001, rnd.randrange(1, 100)])
        if kind == 1 and rnd.random() < 0.7:
            p = block()
            if flags & 0x8:
                p = b'\x05' + p + b'\x00' * 5
            if flags & 0x20:
                p = b'\x00\x00\x00\x01\x10' + p
            out += frame(1, flags, to, p)
        elif kind == 4 and rnd.random() < 0.6:
            p = b''.join(struct.pack('>HI', rnd.choice([1, 2, 3, 4, 5, 6, 8, 9, 0xff]),
                                     rnd.choice([0, 1, 100, 16384, 65535, 2**31 - 1, 2**31, 2**32 - 1, 2**24 - 1, 2**24]))
                         for _ in range(rnd.randrange(0, 5)))
            out += frame(4, flags & 1, to if rnd.random() < 0.1 else 0, p)
        elif kind == 8 and rnd.random() < 0.6:
            out += frame(8, 0, to, struct.pack('>I', rnd.choice([0, 1, 65535, 2**31 - 1, 2**31])))
        elif kind == 3 and rnd.random() < 0.6:
            out += frame(3, 0, to, struct.pack('>I', rnd.randrange(0, 16)))
        elif kind == 0 and rnd.random() < 0.5:
            out += frame(0, flags, to, b'hello' * rnd.randrange(0, 5000))
        else:
            out += frame(kind, flags, to, noise())
        if rnd.random() < 0.3:
            sid += 2
    if rnd.random() < 0.2:  # a CONTINUATION chain
        out += frame(1, 0, sid, block()[:3]) + b''.join(frame(9, 0, sid, b'\x00' * rnd.randrange(0, 50))
                                                         for _ in range(rnd.randrange(1, 300)))
    return out


def connect(port, tls, timeout):
    """A connection to 127.0.0.1:port, over TLS with ALPN h2 (the certificate not checked) if
    tls."""
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    if not tls:
        return s
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(['h2'])
    return ctx.wrap_socket(s, server_hostname='localhost')


def normal(port, h2, tls=False):
    """A plain request on a new connection: served with the expected body within 10 s."""
    s = connect(port, tls, 10)
    if h2:
        import hpack
        head = hpack.Encoder().encode([(b':method', b'GET'), (b':scheme', b'https' if tls else b'http'),
                                       (b':path', b'/'), (b':authority', b'localhost')])
        s.sendall(b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + frame(4, 0, 0, b'') + frame(1, 5, 1, head))
    else:
        s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')
    data, deadline = b'', time.time() + 10
    try:
        while time.time() < deadline and b'Hello, World!' not in data:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    s.close()
    return b'Hello, World!' in data


def fuzz_wire(mg, cases, rnd, tmp, h2, tls=False):
    serve(tmp)
    log_path = tmp + '/wire.log'
    p, port = start(mg, tmp + '/wire.conf', log_path, 'https' if tls else 'http')
    for n in range(cases):
        data = h2_case(rnd) if h2 else h1_case(rnd)
        step = rnd.choice([len(data), 1, 3, 64, 4096])
        try:
            s = connect(port, tls, 2)
            for i in range(0, len(data), step):
                s.sendall(data[i:i + step])
            if rnd.random() < 0.3:
                s.shutdown(socket.SHUT_WR)
            if rnd.random() < 0.6:
                while s.recv(65536):
                    pass
            s.close()
        except OSError:
            pass  # the server may close on a hostile case: that is an answer
        if p.poll() is not None:
            fail(f'case {n}: magpied exited {p.returncode}:\n{open(log_path, encoding="latin-1").read()[-4000:]}')
        if n % 25 == 24 and not normal(port, h2, tls):
            fail(f'case {n}: a normal request was not served after it')
    stop(p, log_path)


UP_RESPONSES = [
    b'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 40\r\nETag: "e"\r\n\r\n' + b'hello ' * 6 + b'!!!!',
    b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n'
    b'5\r\nhello\r\n6;e=1\r\n world\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n',
    b'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\nuntil the upstream closes ' * 3,
    b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n'
    b'HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok',
    b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\nframes',
    b'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n',
    b'HTTP/1.1 304 Not Modified\r\nETag: "e"\r\n\r\n',
    b'HTTP/1.1 200 OK\r\nConnection: close, X-A\r\nX-A: 1\r\nKeep-Alive: 5\r\nContent-Length: 3\r\n\r\nabc',
    b'HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n' + b'x' * 3000,
    b'HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n'
    b'400\r\n' + b'n' * 1024 + b'\r\n0\r\n\r\n',
    b'HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n']
UP_PIECES = [b'\r\n', b'\n', b' ', b':', b'\x00', b'\xff', b'HTTP/1.1 200 OK\r\n', b'HTTP/1.1 102 Processing\r\n\r\n',
             b'Transfer-Encoding: chunked\r\n', b'Content-Length: 3\r\n', b'Content-Length: 99999999999\r\n',
             b'Transfer-Encoding: gzip\r\n', b'Connection: x-b\r\n', b'Trailer: x\r\n', b'0\r\n\r\n',
             b'ffffffff\r\n', b'Content-Encoding: gzip\r\n', b'Cache-Control: no-transform\r\n',
             b'Vary: *\r\n', b'Upgrade: h2c\r\n', b'X: ' + b'v' * 5000 + b'\r\n']
UP_REQUESTS = [
    b'GET /p/a HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n',
    b'GET /p/a HTTP/1.1\r\nHost: a\r\n\r\n',
    b'GET /p/a HTTP/1.0\r\n\r\n',
    b'HEAD /p/a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n',
    b'POST /p/a HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\nConnection: close\r\n'
    b'\r\nabc',
    b'POST /p/a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n'
    b'3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n',
    b'GET /ws/a HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nclient bytes',
    b'GET /p/a HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n'
    b'GET /p/b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n']


class HostileUpstream:
    """Answers every request head it reads with self.response, written in pieces of self.step."""

    def __init__(self):
        import threading
        self.response, self.step, self.close = UP_RESPONSES[0], 1 << 20, False
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        import threading
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.conn, args=(c,), daemon=True).start()

    def conn(self, c):
        c.settimeout(5)
        buf = b''
        try:
            while True:
                while b'\r\n\r\n' not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                buf = buf[buf.index(b'\r\n\r\n') + 4:]  # a body is read as the next head's bytes
                resp, step, close = self.response, self.step, self.close
                for i in range(0, len(resp), step):
                    c.sendall(resp[i:i + step])
                if close:
                    return
        except OSError:
            return
        finally:
            c.close()


def fuzz_upstream(mg, cases, rnd, tmp):
    up = HostileUpstream()
    write(tmp + '/proxy.conf', WIRE_HEAD + f"""[upstream u]
server = 127.0.0.1:{up.port}
keepalive = 4
connect_timeout_ms = 1000
header_timeout_ms = 500
read_timeout_ms = 500
send_timeout_ms = 500
tries = 1
[route /p]
handler = proxy
upstream = u
compress = gzip
compress_min_length = 10
header_add = X-Added: 1
header_remove = X-A
[route /ws]
handler = proxy
upstream = u
websocket = on
""")
    log_path = tmp + '/proxy.log'
    p, port = start(mg, tmp + '/proxy.conf', log_path)

    def mutate(b, pieces):
        b = bytearray(b)
        for _ in range(rnd.randint(1, 4)):
            r, i = rnd.random(), rnd.randrange(len(b) + 1)
            if r < 0.5:
                b[i:i] = rnd.choice(pieces)
            elif r < 0.75 and b:
                del b[i:i + rnd.randint(1, 5)]
            elif b:
                b[min(i, len(b) - 1)] = rnd.randrange(256)
        return bytes(b)

    for n in range(cases):
        resp = rnd.choice(UP_RESPONSES)
        up.response = mutate(resp, UP_PIECES) if rnd.random() < 0.6 else resp
        up.step = rnd.choice([1 << 20, 1, 7, 64])
        up.close = rnd.random() < 0.3
        if rnd.random() < 0.3:
            import hpack
            path = rnd.choice([b'/p/a', b'/ws/a'])
            head = hpack.Encoder().encode([(b':method', rnd.choice([b'GET', b'HEAD', b'POST'])),
                                           (b':scheme', b'http'), (b':path', path), (b':authority', b'a'),
                                           (b'accept-encoding', b'gzip')])
            data = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + frame(4, 0, 0, b'') + frame(1, 5, 1, head)
        else:
            req = rnd.choice(UP_REQUESTS)
            data = mutate(req, H1_PIECES) if rnd.random() < 0.2 else req
        step = rnd.choice([len(data), 1, 64])
        try:
            s = socket.create_connection(('127.0.0.1', port), timeout=0.8)  # > the upstream's 500 ms
            for i in range(0, len(data), step):
                s.sendall(data[i:i + step])
            while s.recv(65536):
                pass
            s.close()
        except OSError:
            pass  # a timeout or a reset: a hostile upstream's answer may be either
        if p.poll() is not None:
            fail(f'case {n}: magpied exited {p.returncode}:\n{open(log_path, encoding="latin-1").read()[-4000:]}')
        if n % 25 == 24 and not (normal(port, False) and normal(port, True)):
            fail(f'case {n}: a normal request was not served after it')
    stop(p, log_path)
    up.sock.close()


def main():
    if len(sys.argv) != 5 or sys.argv[2] not in ('config', 'reload', 'h1', 'h2', 'h2tls', 'upstream'):
        sys.exit(__doc__)
    mg, kind, cases, seed = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix='magpied-fuzz-') as tmp:
        pki(tmp)
        try:
            {'config': lambda: fuzz_config(mg, cases, rnd, tmp),
             'reload': lambda: fuzz_reload(mg, cases, rnd, tmp),
             'h1': lambda: fuzz_wire(mg, cases, rnd, tmp, False),
             'h2': lambda: fuzz_wire(mg, cases, rnd, tmp, True),
             'h2tls': lambda: fuzz_wire(mg, cases, rnd, tmp, True, True),
             'upstream': lambda: fuzz_upstream(mg, cases, rnd, tmp)}[kind]()
        except SystemExit as e:
            if e.code:
                print(f'fuzz: replay with: tests/fuzz/fuzz.py {sys.argv[1]} {kind} {cases} {seed}', flush=True)
            raise
    print(f'fuzz: {kind}: {cases} cases passed (seed {seed})')


if __name__ == '__main__':
    main()
