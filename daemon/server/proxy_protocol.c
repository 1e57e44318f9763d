/* proxy_protocol.c: the PROXY protocol header's parser (proxy_protocol.h has the formats).
 * Strict: exactly one space between v1's fields, ports without leading zeros, the v2 family
 * bytes the specification lists, TLVs inside the header. Anything else is refused, since a
 * header magpied misreads would hand a client a wrong address for its access rules. */
#include "server/proxy_protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

static const uint8_t v2_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                   0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

const char *md_proxy_error_name(md_proxy_error e)
{
    switch (e) {
    case MD_PROXY_OK:
        return "ok";
    case MD_PROXY_NEED_MORE:
        return "truncated";
    case MD_PROXY_BAD_SIGNATURE:
        return "bad_signature";
    case MD_PROXY_MALFORMED:
        return "malformed";
    case MD_PROXY_OVERSIZED:
        return "oversized";
    }
    return "?";
}

/* The next space-separated field of s[*at..end): exactly one space before every field but
 * the first. false when there is none or it is empty. */
static bool field(const char *s, size_t end, size_t *at, const char **f, size_t *flen)
{
    size_t b = *at, e = b;
    while (e < end && s[e] != ' ')
        e++;
    if (e == b)
        return false;
    *f = s + b;
    *flen = e - b;
    *at = e < end ? e + 1 : e; /* past the one space */
    if (e < end && e + 1 == end)
        return false; /* a trailing space */
    return true;
}

static bool v1_addr(int family, const char *f, size_t n, struct sockaddr_storage *ss)
{
    char buf[INET6_ADDRSTRLEN];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, f, n);
    buf[n] = '\0';
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        return inet_pton(AF_INET, buf, &a->sin_addr) == 1;
    }
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    return inet_pton(AF_INET6, buf, &a->sin6_addr) == 1;
}

/* A port in 0..65535, decimal, without a leading zero ("0" itself is one). */
static bool v1_port(const char *f, size_t n, uint16_t *port)
{
    if (n == 0 || n > 5 || (n > 1 && f[0] == '0'))
        return false;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (f[i] < '0' || f[i] > '9')
            return false;
        v = v * 10 + (uint32_t)(f[i] - '0');
    }
    if (v > 65535)
        return false;
    *port = htons((uint16_t)v);
    return true;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port_be)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = port_be;
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = port_be;
}

/* "PROXY " seen (or a beginning of it). */
static md_proxy_error parse_v1(const char *s, size_t len, md_proxy_header *out)
{
    size_t n = len < MD_PROXY_V1_MAX ? len : MD_PROXY_V1_MAX;
    const char *lf = memchr(s, '\n', n);
    if (lf == NULL)
        return len >= MD_PROXY_V1_MAX ? MD_PROXY_OVERSIZED : MD_PROXY_NEED_MORE;
    size_t end = (size_t)(lf - s); /* the LF */
    if (end < 7 || s[end - 1] != '\r')
        return MD_PROXY_MALFORMED;
    end--; /* the CR: the line is s[6..end) */
    if (memchr(s, '\r', end) != NULL || memchr(s, '\0', end) != NULL)
        return MD_PROXY_MALFORMED;
    memset(out, 0, sizeof *out);
    out->version = 1;
    out->len = end + 2;
    size_t at = 6;
    const char *f;
    size_t fl;
    if (!field(s, end, &at, &f, &fl)) {
        /* "PROXY UNKNOWN " and what follows it: ignored, as the specification says */
        if (end - 6 >= 8 && memcmp(s + 6, "UNKNOWN ", 8) == 0) {
            out->local = true;
            return MD_PROXY_OK;
        }
        return MD_PROXY_MALFORMED;
    }
    if (fl == 7 && memcmp(f, "UNKNOWN", 7) == 0) {
        out->local = true; /* what follows it is to be ignored */
        return MD_PROXY_OK;
    }
    int family;
    if (fl == 4 && memcmp(f, "TCP4", 4) == 0)
        family = AF_INET;
    else if (fl == 4 && memcmp(f, "TCP6", 4) == 0)
        family = AF_INET6;
    else
        return MD_PROXY_MALFORMED;
    const char *src, *dst, *sp, *dp;
    size_t srcl, dstl, spl, dpl;
    uint16_t sport, dport;
    if (!field(s, end, &at, &src, &srcl) || !field(s, end, &at, &dst, &dstl) ||
        !field(s, end, &at, &sp, &spl) || !field(s, end, &at, &dp, &dpl) || at != end)
        return MD_PROXY_MALFORMED;
    if (!v1_addr(family, src, srcl, &out->src) || !v1_addr(family, dst, dstl, &out->dst) ||
        !v1_port(sp, spl, &sport) || !v1_port(dp, dpl, &dport))
        return MD_PROXY_MALFORMED;
    set_port(&out->src, sport);
    set_port(&out->dst, dport);
    out->has_addr = true;
    return MD_PROXY_OK;
}

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

/* The v2 signature seen (or a beginning of it). */
static md_proxy_error parse_v2(const uint8_t *p, size_t len, md_proxy_header *out)
{
    if (len > 12) {
        if ((p[12] >> 4) != 2 || (p[12] & 0x0f) > 1)
            return MD_PROXY_MALFORMED; /* version 2; LOCAL or PROXY */
    }
    if (len > 13) {
        switch (p[13]) {
        case 0x00: /* UNSPEC */
        case 0x11: /* TCP over IPv4 */
        case 0x12: /* UDP over IPv4 */
        case 0x21: /* TCP over IPv6 */
        case 0x22: /* UDP over IPv6 */
        case 0x31: /* Unix stream */
        case 0x32: /* Unix datagram */
            break;
        default:
            return MD_PROXY_MALFORMED;
        }
    }
    if (len < MD_PROXY_V2_FIXED)
        return MD_PROXY_NEED_MORE;
    size_t total = MD_PROXY_V2_FIXED + (size_t)be16(p + 14);
    if (total > MD_PROXY_HEADER_MAX)
        return MD_PROXY_OVERSIZED;
    if (len < total)
        return MD_PROXY_NEED_MORE;
    memset(out, 0, sizeof *out);
    out->version = 2;
    out->len = total;
    bool proxy = (p[12] & 0x0f) == 1;
    unsigned fam = p[13] >> 4;
    size_t alen = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
    if (!proxy || fam == 0) {
        /* LOCAL, or UNSPEC: the block is discarded, the connection's own address stays */
        out->local = !proxy;
        return MD_PROXY_OK;
    }
    if (total - MD_PROXY_V2_FIXED < alen)
        return MD_PROXY_MALFORMED;
    /* The TLVs after the addresses: each must end inside the header. */
    for (size_t at = MD_PROXY_V2_FIXED + alen; at < total;) {
        if (total - at < 3 || total - at - 3 < be16(p + at + 1))
            return MD_PROXY_MALFORMED;
        at += 3 + (size_t)be16(p + at + 1);
    }
    const uint8_t *a = p + MD_PROXY_V2_FIXED;
    if ((p[13] & 0x0f) != 1 || fam == 3)
        return MD_PROXY_OK; /* a datagram or Unix socket's client: not an address for us */
    if (fam == 1) {
        struct sockaddr_in *s = (struct sockaddr_in *)&out->src;
        struct sockaddr_in *d = (struct sockaddr_in *)&out->dst;
        s->sin_family = d->sin_family = AF_INET;
        memcpy(&s->sin_addr, a, 4);
        memcpy(&d->sin_addr, a + 4, 4);
        memcpy(&s->sin_port, a + 8, 2); /* both in network order */
        memcpy(&d->sin_port, a + 10, 2);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&out->src;
        struct sockaddr_in6 *d = (struct sockaddr_in6 *)&out->dst;
        s->sin6_family = d->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, a, 16);
        memcpy(&d->sin6_addr, a + 16, 16);
        memcpy(&s->sin6_port, a + 32, 2);
        memcpy(&d->sin6_port, a + 34, 2);
    }
    out->has_addr = true;
    return MD_PROXY_OK;
}

md_proxy_error md_proxy_parse(const void *data, size_t len, md_proxy_header *out)
{
    const uint8_t *p = data;
    if (len == 0)
        return MD_PROXY_NEED_MORE;
    size_t n = len < 6 ? len : 6;
    if (memcmp(p, "PROXY ", n) == 0)
        return n < 6 ? MD_PROXY_NEED_MORE : parse_v1(data, len, out);
    n = len < sizeof v2_sig ? len : sizeof v2_sig;
    if (memcmp(p, v2_sig, n) == 0)
        return n < sizeof v2_sig ? MD_PROXY_NEED_MORE : parse_v2(p, len, out);
    return MD_PROXY_BAD_SIGNATURE;
}
