/* Tests for daemon/server/proxy_protocol.c: every shape of the PROXY header, v1 and v2, that a
 * balancer sends, each one fed whole and in every split (the parser asks for more until it
 * can decide), and the hostile ones: a wrong signature, truncations, bad lengths, bad
 * addresses and ports, TLVs that overrun, a v1 line past 107 bytes. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "server/proxy_protocol.h"

TestSuite(proxy_protocol, .timeout = 30);

/* Parses h[0..len) whole, and checks that every shorter prefix asks for more (a valid
 * header's beginning is never refused, and never accepted early). */
static md_proxy_error parse_all(const void *h, size_t len, md_proxy_header *out)
{
    for (size_t n = 0; n < len; n++) {
        md_proxy_header tmp;
        md_proxy_error e = md_proxy_parse(h, n, &tmp);
        if (e != MD_PROXY_NEED_MORE)
            return e == MD_PROXY_OK ? (md_proxy_error)99 : e; /* 99: accepted too early */
    }
    return md_proxy_parse(h, len, out);
}

static md_proxy_error v1(const char *line, md_proxy_header *out)
{
    return md_proxy_parse(line, strlen(line), out);
}

static void expect_v4(const struct sockaddr_storage *ss, const char *addr, uint16_t port)
{
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    char buf[INET_ADDRSTRLEN];
    cr_assert_eq(a->sin_family, AF_INET);
    cr_assert_str_eq(inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf), addr);
    cr_assert_eq(ntohs(a->sin_port), port);
}

static void expect_v6(const struct sockaddr_storage *ss, const char *addr, uint16_t port)
{
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    char buf[INET6_ADDRSTRLEN];
    cr_assert_eq(a->sin6_family, AF_INET6);
    cr_assert_str_eq(inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf), addr);
    cr_assert_eq(ntohs(a->sin6_port), port);
}

Test(proxy_protocol, v1_tcp4)
{
    const char *h = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
    md_proxy_header p;
    size_t hl = strlen("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n");
    cr_assert_eq(parse_all(h, hl, &p), MD_PROXY_OK);
    cr_assert_eq(md_proxy_parse(h, strlen(h), &p), MD_PROXY_OK);
    cr_assert_eq(p.version, 1);
    cr_assert_eq(p.len, hl, "only the header is the header's");
    cr_assert(p.has_addr);
    cr_assert_not(p.local);
    expect_v4(&p.src, "192.0.2.1", 56324);
    expect_v4(&p.dst, "198.51.100.2", 443);
}

Test(proxy_protocol, v1_tcp6)
{
    const char *h = "PROXY TCP6 2001:db8::1 ::ffff:192.0.2.9 0 65535\r\n";
    md_proxy_header p;
    cr_assert_eq(parse_all(h, strlen(h), &p), MD_PROXY_OK);
    cr_assert(p.has_addr);
    expect_v6(&p.src, "2001:db8::1", 0);
    expect_v6(&p.dst, "::ffff:192.0.2.9", 65535);
}

Test(proxy_protocol, v1_unknown_keeps_the_peer)
{
    md_proxy_header p;
    cr_assert_eq(v1("PROXY UNKNOWN\r\n", &p), MD_PROXY_OK);
    cr_assert_not(p.has_addr);
    cr_assert(p.local);
    cr_assert_eq(p.len, 15);
    cr_assert_eq(v1("PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", &p), MD_PROXY_OK, "the rest ignored");
    cr_assert_not(p.has_addr);
    cr_assert_eq(v1("PROXY UNKNOWN \r\n", &p), MD_PROXY_OK);
    cr_assert_eq(v1("PROXY UNKNOWNX\r\n", &p), MD_PROXY_MALFORMED);
    cr_assert_eq(v1("PROXY UNKNOWNX \r\n", &p), MD_PROXY_MALFORMED);
}

Test(proxy_protocol, v1_longest_line_and_one_more)
{
    /* The longest TCP6 line, and the specification's worst case, 107 bytes with CRLF. */
    const char *h = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    md_proxy_header p;
    cr_assert_eq(parse_all(h, strlen(h), &p), MD_PROXY_OK);
    cr_assert(p.has_addr);
    expect_v6(&p.src, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    h = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    cr_assert_eq(strlen(h), MD_PROXY_V1_MAX);
    cr_assert_eq(parse_all(h, strlen(h), &p), MD_PROXY_OK);
    cr_assert_eq(p.len, MD_PROXY_V1_MAX);
    /* 108 bytes without a line end: refused without waiting for more. */
    char big[200];
    memset(big, 'x', sizeof big);
    memcpy(big, "PROXY UNKNOWN ", 14);
    cr_assert_eq(md_proxy_parse(big, 106, &p), MD_PROXY_NEED_MORE);
    cr_assert_eq(md_proxy_parse(big, 107, &p), MD_PROXY_OVERSIZED);
    cr_assert_eq(md_proxy_parse(big, 108, &p), MD_PROXY_OVERSIZED);
    cr_assert_eq(md_proxy_parse(big, sizeof big, &p), MD_PROXY_OVERSIZED);
    /* 108 with its CRLF just past the limit. */
    memcpy(big + 106, "\r\n", 2);
    cr_assert_eq(md_proxy_parse(big, 108, &p), MD_PROXY_OVERSIZED);
}

Test(proxy_protocol, v1_hostile)
{
    md_proxy_header p;
    static const char *const bad[] = {
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n",     /* LF alone */
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\r\n", /* a CR inside */
        "PROXY TCP4  192.0.2.1 198.51.100.2 56324 443\r\n",  /* two spaces */
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 \r\n",  /* a trailing space */
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",       /* a field short */
        "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 1\r\n", /* one too many */
        "PROXY TCP4 2001:db8::1 198.51.100.2 56324 443\r\n", /* IPv6 in TCP4 */
        "PROXY TCP6 192.0.2.1 2001:db8::2 56324 443\r\n",    /* IPv4 in TCP6 */
        "PROXY TCP4 192.0.2.256 198.51.100.2 56324 443\r\n", /* not an address */
        "PROXY TCP4 192.0.2 198.51.100.2 56324 443\r\n",
        "PROXY TCP4 0x7f.0.0.1 198.51.100.2 56324 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n", /* ports */
        "PROXY TCP4 192.0.2.1 198.51.100.2 -1 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 080 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 +80 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 999999 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 8a 443\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 80 \r\n",
        "PROXY UDP4 192.0.2.1 198.51.100.2 80 443\r\n", /* protocols */
        "PROXY tcp4 192.0.2.1 198.51.100.2 80 443\r\n",
        "PROXY TCP 192.0.2.1 198.51.100.2 80 443\r\n",
        "PROXY \r\n",
        "PROXY\t\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        md_proxy_error e = v1(bad[i], &p);
        cr_assert(e == MD_PROXY_MALFORMED || e == MD_PROXY_BAD_SIGNATURE, "%s: %s", bad[i],
                  md_proxy_error_name(e));
    }
    char nul[] = "PROXY TCP4 192.0.2.1 198.51.100.2 80 443\r\n";
    nul[20] = '\0';
    cr_assert_eq(md_proxy_parse(nul, sizeof nul - 1, &p), MD_PROXY_MALFORMED);
}

Test(proxy_protocol, wrong_signature_refused_at_once)
{
    md_proxy_header p;
    cr_assert_eq(v1("GET / HTTP/1.1\r\n", &p), MD_PROXY_BAD_SIGNATURE);
    cr_assert_eq(v1("G", &p), MD_PROXY_BAD_SIGNATURE, "one byte decides");
    cr_assert_eq(v1("PROXX", &p), MD_PROXY_BAD_SIGNATURE);
    cr_assert_eq(v1("PRI * HTTP/2.0\r\n", &p), MD_PROXY_BAD_SIGNATURE);
    cr_assert_eq(md_proxy_parse("\x16\x03\x01", 3, &p), MD_PROXY_BAD_SIGNATURE, "a ClientHello");
    cr_assert_eq(md_proxy_parse("\r\n\r\n\0\r\nQUIX", 12, &p), MD_PROXY_BAD_SIGNATURE);
    cr_assert_eq(md_proxy_parse("\r\n\r\n", 4, &p), MD_PROXY_NEED_MORE);
    cr_assert_eq(md_proxy_parse("", 0, &p), MD_PROXY_NEED_MORE);
}

/* A v2 header: signature, ver_cmd, fam, then body (blen bytes) into buf; its length. */
static size_t v2(uint8_t *buf, uint8_t ver_cmd, uint8_t fam, const void *body, uint16_t blen)
{
    memcpy(buf, "\r\n\r\n\0\r\nQUIT\n", 12);
    buf[12] = ver_cmd;
    buf[13] = fam;
    buf[14] = (uint8_t)(blen >> 8);
    buf[15] = (uint8_t)blen;
    if (blen != 0)
        memcpy(buf + 16, body, blen);
    return 16 + (size_t)blen;
}

static const uint8_t inet4[12] = {192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb};

Test(proxy_protocol, v2_tcp4)
{
    uint8_t buf[64];
    size_t n = v2(buf, 0x21, 0x11, inet4, sizeof inet4);
    md_proxy_header p;
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_eq(p.version, 2);
    cr_assert_eq(p.len, 28);
    cr_assert(p.has_addr);
    expect_v4(&p.src, "192.0.2.1", 56324);
    expect_v4(&p.dst, "198.51.100.2", 443);
}

Test(proxy_protocol, v2_tcp6)
{
    uint8_t body[36] = {0};
    body[0] = 0x20, body[1] = 0x01, body[2] = 0x0d, body[3] = 0xb8, body[15] = 1;
    body[16] = 0x20, body[17] = 0x01, body[18] = 0x0d, body[19] = 0xb8, body[31] = 2;
    body[32] = 0x30, body[33] = 0x39, body[34] = 0, body[35] = 80;
    uint8_t buf[64];
    size_t n = v2(buf, 0x21, 0x21, body, sizeof body);
    md_proxy_header p;
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_eq(p.len, 52);
    cr_assert(p.has_addr);
    expect_v6(&p.src, "2001:db8::1", 12345);
    expect_v6(&p.dst, "2001:db8::2", 80);
}

Test(proxy_protocol, v2_tlvs_skipped_within_bounds)
{
    uint8_t body[12 + 3 + 5 + 3 + 0 + 3 + 2];
    memcpy(body, inet4, 12);
    uint8_t *t = body + 12;
    t[0] = 0x01, t[1] = 0, t[2] = 5; /* ALPN "h2/xx" */
    memcpy(t + 3, "h2/xx", 5);
    t += 8;
    t[0] = 0x04, t[1] = 0, t[2] = 0; /* NOOP, empty */
    t += 3;
    t[0] = 0xe0, t[1] = 0, t[2] = 2; /* a custom type */
    t[3] = 'a', t[4] = 'b';
    uint8_t buf[128];
    size_t n = v2(buf, 0x21, 0x11, body, sizeof body);
    md_proxy_header p;
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_eq(p.len, n);
    expect_v4(&p.src, "192.0.2.1", 56324);

    /* The last TLV's length one past the end; a TLV header cut short. */
    n = v2(buf, 0x21, 0x11, body, sizeof body);
    buf[n - 3] = 3; /* the custom TLV's length: 3 for its 2 bytes */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x11, body, sizeof body - 1); /* the custom TLV's value cut to 1 of 2 */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x11, body, 12 + 2); /* two bytes of a TLV's three */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    uint8_t huge[12 + 3] = {0};
    memcpy(huge, inet4, 12);
    huge[12] = 0x20, huge[13] = 0xff, huge[14] = 0xff; /* 65535 bytes claimed */
    n = v2(buf, 0x21, 0x11, huge, sizeof huge);
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
}

Test(proxy_protocol, v2_local_and_unspec_keep_the_peer)
{
    uint8_t buf[64];
    md_proxy_header p;
    size_t n = v2(buf, 0x20, 0x00, NULL, 0); /* a balancer's health check */
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert(p.local);
    cr_assert_not(p.has_addr);
    cr_assert_eq(p.len, 16);
    n = v2(buf, 0x20, 0x11, inet4, sizeof inet4); /* LOCAL with addresses: ignored */
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_not(p.has_addr);
    cr_assert_eq(p.len, 28);
    n = v2(buf, 0x21, 0x00, "xyz", 3); /* PROXY over UNSPEC: the block discarded */
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_not(p.has_addr);
    cr_assert_eq(p.len, 19);
}

Test(proxy_protocol, v2_unix_and_udp_keep_the_peer)
{
    uint8_t body[216] = {0};
    memcpy(body, "/run/client.sock", 16);
    uint8_t buf[256];
    md_proxy_header p;
    size_t n = v2(buf, 0x21, 0x31, body, sizeof body);
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_not(p.has_addr);
    cr_assert_eq(p.len, 232);
    n = v2(buf, 0x21, 0x31, body, 215); /* a Unix block one short */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x12, inet4, sizeof inet4); /* UDP over IPv4 */
    cr_assert_eq(parse_all(buf, n, &p), MD_PROXY_OK);
    cr_assert_not(p.has_addr);
}

Test(proxy_protocol, v2_hostile)
{
    uint8_t buf[64];
    md_proxy_header p;
    size_t n = v2(buf, 0x11, 0x11, inet4, sizeof inet4); /* version 1 in binary */
    cr_assert_eq(md_proxy_parse(buf, 13, &p), MD_PROXY_MALFORMED, "refused at its 13th byte");
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x22, 0x11, inet4, sizeof inet4); /* command 2 */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x41, inet4, sizeof inet4); /* family 4 */
    cr_assert_eq(md_proxy_parse(buf, 14, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x13, inet4, sizeof inet4); /* transport 3 */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x10, inet4, sizeof inet4); /* IPv4, transport UNSPEC: not listed */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x11, inet4, 11); /* IPv4 block one short */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x21, inet4, 12); /* IPv6 with an IPv4-sized block */
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_MALFORMED);
    n = v2(buf, 0x21, 0x11, inet4, sizeof inet4);
    cr_assert_eq(md_proxy_parse(buf, n - 1, &p), MD_PROXY_NEED_MORE, "truncated: more wanted");
}

Test(proxy_protocol, v2_oversized_refused_from_its_length)
{
    uint8_t buf[16];
    md_proxy_header p;
    v2(buf, 0x21, 0x11, NULL, 0);
    uint16_t blen = MD_PROXY_HEADER_MAX - 16 + 1;
    buf[14] = (uint8_t)(blen >> 8), buf[15] = (uint8_t)blen;
    cr_assert_eq(md_proxy_parse(buf, 16, &p), MD_PROXY_OVERSIZED, "known before the body comes");
    buf[14] = 0xff, buf[15] = 0xff;
    cr_assert_eq(md_proxy_parse(buf, 16, &p), MD_PROXY_OVERSIZED);
    blen = MD_PROXY_HEADER_MAX - 16;
    buf[14] = (uint8_t)(blen >> 8), buf[15] = (uint8_t)blen;
    cr_assert_eq(md_proxy_parse(buf, 16, &p), MD_PROXY_NEED_MORE, "the largest taken");
}

Test(proxy_protocol, v2_largest_with_tlvs)
{
    static uint8_t buf[MD_PROXY_HEADER_MAX];
    static uint8_t body[MD_PROXY_HEADER_MAX - 16];
    memcpy(body, inet4, 12);
    size_t rest = sizeof body - 12;
    body[12] = 0xe1;
    body[13] = (uint8_t)((rest - 3) >> 8);
    body[14] = (uint8_t)(rest - 3);
    size_t n = v2(buf, 0x21, 0x11, body, (uint16_t)sizeof body);
    md_proxy_header p;
    cr_assert_eq(n, MD_PROXY_HEADER_MAX);
    cr_assert_eq(md_proxy_parse(buf, n, &p), MD_PROXY_OK);
    cr_assert_eq(p.len, n);
    cr_assert(p.has_addr);
}

Test(proxy_protocol, error_names)
{
    cr_assert_str_eq(md_proxy_error_name(MD_PROXY_MALFORMED), "malformed");
    cr_assert_str_eq(md_proxy_error_name(MD_PROXY_OVERSIZED), "oversized");
    cr_assert_str_eq(md_proxy_error_name(MD_PROXY_BAD_SIGNATURE), "bad_signature");
    cr_assert_str_eq(md_proxy_error_name(MD_PROXY_NEED_MORE), "truncated");
}
