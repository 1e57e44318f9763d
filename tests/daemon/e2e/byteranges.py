#!/usr/bin/python3
"""A multipart/byteranges response (RFC 9110 14.6) checked against the file it came from, for
the e2e suites that fetch with curl (test_tls.c). Run with /usr/bin/python3.

    byteranges.py HEAD_FILE BODY_FILE DATA_FILE
        HEAD_FILE: curl -D's output (the status line and fields), BODY_FILE: curl -o's;
        prints "parts N" (each part's Content-Range and bytes matched the file's, the
        Content-Length the body's, and the body ends with the closing delimiter), or what
        did not match
"""
import re
import sys


def main():
    head = open(sys.argv[1], 'rb').read()
    body = open(sys.argv[2], 'rb').read()
    data = open(sys.argv[3], 'rb').read()
    fields = {}
    for line in head.split(b'\r\n')[1:]:
        if b':' in line:
            name, value = line.split(b':', 1)
            fields[name.strip().lower()] = value.strip()
    m = re.fullmatch(rb'multipart/byteranges; boundary=([0-9A-Za-z]+)',
                     fields.get(b'content-type', b''))
    if not m:
        return print('not multipart:', fields.get(b'content-type'))
    if int(fields.get(b'content-length', b'-1')) != len(body):
        return print('Content-Length', fields.get(b'content-length'), 'body', len(body))
    delim = b'--' + m.group(1)
    at, parts = 0, 0
    while body.startswith(delim + b'\r\n', at):
        end = body.index(b'\r\n\r\n', at)
        part_head = body[at + len(delim) + 2:end].decode()
        r = re.search(r'(?im)^content-range: bytes (\d+)-(\d+)/(\d+)$', part_head)
        if not r or int(r.group(3)) != len(data):
            return print('part', parts, 'head', repr(part_head))
        first, last = int(r.group(1)), int(r.group(2))
        at = end + 4
        if body[at:at + last - first + 1] != data[first:last + 1]:
            return print('part', parts, 'bytes differ')
        at += last - first + 1
        if not body.startswith(b'\r\n', at):
            return print('part', parts, 'not followed by CRLF')
        at += 2
        parts += 1
    if body[at:] != delim + b'--\r\n':
        return print('no closing delimiter at', at, repr(body[at:at + 40]))
    print('parts', parts)


main()
