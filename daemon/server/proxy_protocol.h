/* The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2): the header a balancer
 * in front of magpied sends first on each connection, naming the client it accepted.
 *
 * Version 1 is one text line of at most 107 bytes, CRLF included:
 *
 *   PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n
 *   PROXY TCP6 2001:db8::1 2001:db8::2 56324 443\r\n
 *   PROXY UNKNOWN[ anything]\r\n
 *
 * Version 2 is binary: a 12-byte signature, then version and command (0x21 PROXY, 0x20
 * LOCAL), family and transport, a 16-bit big-endian length, then that many bytes: the
 * addresses (12 for IPv4, 36 for IPv6, 216 for Unix sockets) and TLVs (type, 16-bit length,
 * value), which are walked to check that they fit and otherwise skipped.
 *
 * md_proxy_parse() is a pure function over the bytes received so far: it answers as soon as
 * they decide (a wrong first byte is refused at once, not at the timeout). The connection's
 * client address is the header's source address for PROXY over TCP4/TCP6 (v1) or
 * AF_INET/AF_INET6 stream (v2); for LOCAL (a balancer's own health check), UNKNOWN, AF_UNSPEC,
 * AF_UNIX and datagram transports the connection keeps its own peer address, as the
 * specification asks. A v2 CRC32C TLV is not verified.
 */
#ifndef MD_PROXY_PROTOCOL_H
#define MD_PROXY_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Version 1's longest line, CRLF included (the specification's 107). */
#define MD_PROXY_V1_MAX 107
/* Version 2's fixed part: signature, version/command, family, length. */
#define MD_PROXY_V2_FIXED 16
/* The longest version 2 header magpied takes, fixed part included: the addresses and a few
 * TLVs (a balancer's TLS details, a cloud's endpoint id) fit many times over. */
#define MD_PROXY_HEADER_MAX 4096

/* What md_proxy_parse() found wrong; md_proxy_error_name() spells each for logs. */
typedef enum md_proxy_error {
    MD_PROXY_OK = 0,
    MD_PROXY_NEED_MORE = 1,     /* a valid beginning: read more */
    MD_PROXY_BAD_SIGNATURE = 2, /* neither "PROXY " nor the v2 signature */
    MD_PROXY_MALFORMED = 3,     /* a field out of the grammar, a TLV past the end */
    MD_PROXY_OVERSIZED = 4,     /* v1 past 107 bytes, v2 past MD_PROXY_HEADER_MAX */
} md_proxy_error;

typedef struct md_proxy_header {
    int version;                 /* 1 or 2 */
    bool local;                  /* v2 LOCAL, v1 UNKNOWN: no address carried */
    bool has_addr;               /* src and dst hold the client's and the balancer's addresses */
    struct sockaddr_storage src; /* AF_INET or AF_INET6 with its port, when has_addr */
    struct sockaddr_storage dst;
    size_t len; /* bytes of the header, to consume */
} md_proxy_header;

/* Parses the header at data[0..len). MD_PROXY_OK with *out filled (out->len bytes are the
 * header; what follows is the connection's own), MD_PROXY_NEED_MORE when len bytes are a
 * valid beginning, or an error: the connection is to be closed. */
md_proxy_error md_proxy_parse(const void *data, size_t len, md_proxy_header *out);

/* "bad_signature", "malformed", "oversized", ... */
const char *md_proxy_error_name(md_proxy_error e);

#endif
