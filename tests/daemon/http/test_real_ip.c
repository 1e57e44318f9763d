/* Tests for daemon/http/real_ip.c: the keys, and the rightmost untrusted address of
 * X-Forwarded-For and Forwarded behind trusted hops. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "http/real_ip.h"
#include "test_net.h"

static const char *text(const struct sockaddr_storage *ss)
{
    static char buf[64];
    const void *a = ss->ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
    cr_assert_not_null(inet_ntop(ss->ss_family, a, buf, sizeof buf));
    return buf;
}

static md_route_real_ip conf(const char *from, const char *header)
{
    md_route_real_ip ri = {0};
    char msg[200];
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_from", from, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_header", header, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_real_ip_check(&ri, msg, sizeof msg), 0, "%s", msg);
    return ri;
}

/* The address for a request from peer with value; "" when the peer's is kept. */
static const char *client(const md_route_real_ip *ri, const char *peer, const char *value, bool cut)
{
    struct sockaddr_storage p = test_addr(peer), out;
    if (!md_real_ip(ri, &p, value, strlen(value), cut, &out))
        return "";
    return text(&out);
}

Test(real_ip, x_forwarded_for_rightmost_untrusted, .timeout = 5)
{
    md_route_real_ip ri = conf("10.0.0.0/8, 2001:db8::/32", "X-Forwarded-For");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "203.0.113.7", false), "203.0.113.7");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "198.51.100.1, 203.0.113.7", false), "203.0.113.7",
                     "a client's own entries on the left are not believed");
    cr_assert_str_eq(
        client(&ri, "10.0.0.1", "198.51.100.1, 203.0.113.7, 10.1.1.1 ,10.2.2.2", false),
        "203.0.113.7", "trusted hops are walked past (recursive)");
    cr_assert_str_eq(client(&ri, "198.51.100.9", "203.0.113.7", false), "",
                     "an untrusted peer keeps its own address");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "2001:db8::5, 2001:db9::1", false), "2001:db9::1");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "[2001:db9::1]:443", false), "2001:db9::1");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "203.0.113.7:5555", false), "203.0.113.7");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "unknown", false), "", "not an address: the peer");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "203.0.113.7, garbage, 10.0.0.3", false), "10.0.0.3",
                     "the walk stops at the last trusted address");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "10.0.0.2", false), "10.0.0.2", "all trusted");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "", false), "");
    /* Cut at the front: the first element kept is not read. */
    cr_assert_str_eq(client(&ri, "10.0.0.1", "3.0.113.7, 10.0.0.9", true), "10.0.0.9");
    cr_assert_str_eq(client(&ri, "10.0.0.1", "3.0.113.7, 198.51.100.2", true), "198.51.100.2");
    /* An IPv4 client of an IPv6 socket is matched as IPv4. */
    cr_assert_str_eq(client(&ri, "::ffff:10.0.0.1", "203.0.113.7", false), "203.0.113.7");
}

Test(real_ip, forwarded_for_parameters, .timeout = 5)
{
    md_route_real_ip ri = conf("127.0.0.1", "forwarded");
    cr_assert_str_eq(client(&ri, "127.0.0.1", "for=192.0.2.60;proto=http;by=203.0.113.43", false),
                     "192.0.2.60");
    cr_assert_str_eq(
        client(&ri, "127.0.0.1", "for=192.0.2.43, FOR=\"[2001:db8:cafe::17]:4711\"", false),
        "2001:db8:cafe::17");
    cr_assert_str_eq(client(&ri, "127.0.0.1", "proto=https; for=198.51.100.17", false),
                     "198.51.100.17");
    cr_assert_str_eq(client(&ri, "127.0.0.1", "for=_hidden", false), "", "an obfuscated node");
    cr_assert_str_eq(client(&ri, "127.0.0.1", "proto=http", false), "", "no for=");
}

Test(real_ip, keys_are_strict, .timeout = 5)
{
    md_route_real_ip ri = {0};
    char msg[200];
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_from", "all", msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "not \"all\""), "%s", msg);
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_from", "10.0.0.1/8", msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_header", "X-Real-IP", msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_other", "x", msg, sizeof msg), -ENOENT);
    cr_assert_eq(md_real_ip_key(&ri, "real_ip_from", "10.0.0.0/8", msg, sizeof msg), 0);
    cr_assert_eq(md_real_ip_check(&ri, msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "real_ip_from: needs real_ip_header"), "%s", msg);
    md_route_real_ip only_header = {0};
    cr_assert_eq(md_real_ip_key(&only_header, "real_ip_header", "Forwarded", msg, sizeof msg), 0);
    cr_assert_eq(md_real_ip_check(&only_header, msg, sizeof msg), -EINVAL);
}
