/* Tests for daemon/http/acl.c: a route's allow and deny rules, parsed from their values and
 * matched against client addresses of both families. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#include "http/acl.h"
#include "test_net.h"

static bool permits(const md_acl *a, const char *text)
{
    struct sockaddr_storage ss = test_addr(text);
    return md_acl_permits(a, &ss);
}

static md_acl acl_of(const char *allow, const char *deny)
{
    md_acl a = {0};
    char msg[160];
    if (allow != NULL)
        cr_assert_eq(md_acl_add(&a, true, allow, msg, sizeof msg), 0, "%s: %s", allow, msg);
    if (deny != NULL)
        cr_assert_eq(md_acl_add(&a, false, deny, msg, sizeof msg), 0, "%s: %s", deny, msg);
    return a;
}

Test(acl, no_rules_let_everyone_in, .timeout = 5)
{
    md_acl a = {0};
    cr_assert(permits(&a, "203.0.113.9"));
    cr_assert(permits(&a, "2001:db8::1"));
    cr_assert(md_acl_permits(&a, NULL));
}

Test(acl, loopback_then_deny_all, .timeout = 5)
{
    md_acl a = acl_of(MD_ACL_LOOPBACK, "all");
    cr_assert_eq(a.n, 3);
    cr_assert(permits(&a, "127.0.0.1"));
    cr_assert(permits(&a, "127.255.0.7"));
    cr_assert(permits(&a, "::1"));
    cr_assert(permits(&a, "::ffff:127.0.0.1"), "an IPv4 client of an IPv6 socket");
    cr_assert_not(permits(&a, "128.0.0.1"));
    cr_assert_not(permits(&a, "10.0.0.1"));
    cr_assert_not(permits(&a, "::2"));
    cr_assert_not(permits(&a, "::ffff:10.0.0.1"));
    cr_assert_not(permits(&a, "::127.0.0.1"), "IPv4-compatible is not IPv4-mapped");
    cr_assert_not(md_acl_permits(&a, NULL), "an unknown address matches all alone");
    /* A v4-mapped block is the IPv4 block it maps. */
    md_acl m = acl_of("::ffff:10.0.0.0/104", "all");
    cr_assert(permits(&m, "10.9.9.9"));
    cr_assert(permits(&m, "::ffff:10.9.9.9"));
    cr_assert_not(permits(&m, "11.0.0.1"));
    char msg[160];
    md_acl bad = {0};
    cr_assert_eq(md_acl_add(&bad, true, "::ffff:10.0.0.0/64", msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "96 or more"), "%s", msg);
}

Test(acl, first_match_wins, .timeout = 5)
{
    md_acl a = {0};
    char msg[160];
    /* deny 10.1.0.0/16, then allow 10.0.0.0/8, then deny all: the order is the file's. */
    cr_assert_eq(md_acl_add(&a, false, "10.1.0.0/16", msg, sizeof msg), 0);
    cr_assert_eq(md_acl_add(&a, true, "10.0.0.0/8", msg, sizeof msg), 0);
    cr_assert_eq(md_acl_add(&a, false, "all", msg, sizeof msg), 0);
    cr_assert_not(permits(&a, "10.1.2.3"));
    cr_assert(permits(&a, "10.2.2.3"));
    cr_assert_not(permits(&a, "11.0.0.1"));
    /* Nothing matches a deny-only list's other addresses: they are let in. */
    md_acl d = acl_of(NULL, "192.0.2.0/24");
    cr_assert_not(permits(&d, "192.0.2.200"));
    cr_assert(permits(&d, "192.0.3.1"));
}

Test(acl, prefixes_of_every_length, .timeout = 5)
{
    md_acl a = acl_of("192.168.4.0/22, 2001:db8:ab00::/40 ,0.0.0.0/0", NULL);
    cr_assert_eq(a.n, 3);
    md_acl b = acl_of("192.168.4.0/22 2001:db8:ab00::/40", "all");
    cr_assert(permits(&b, "192.168.7.255"));
    cr_assert_not(permits(&b, "192.168.8.0"));
    cr_assert_not(permits(&b, "192.168.3.255"));
    cr_assert(permits(&b, "2001:db8:abff::1"));
    cr_assert_not(permits(&b, "2001:db8:ac00::1"));
    md_acl c = acl_of("::/0", "all");
    cr_assert(permits(&c, "2001:db8::1"));
    cr_assert_not(permits(&c, "192.0.2.1"), "::/0 is IPv6's alone");
    md_acl e = acl_of("198.51.100.7", "all");
    cr_assert(permits(&e, "198.51.100.7"));
    cr_assert_not(permits(&e, "198.51.100.6"));
}

/* A client of another family (a Unix socket) matches "all" alone. */
Test(acl, other_families_match_all_only, .timeout = 5)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_family = AF_UNIX;
    md_acl a = acl_of("0.0.0.0/0, ::/0", "all");
    cr_assert_not(md_acl_permits(&a, &ss));
    md_acl b = acl_of("all", NULL);
    cr_assert(md_acl_permits(&b, &ss));
}

Test(acl, bad_values_name_the_word, .timeout = 5)
{
    const char *bad[][2] = {
        {"10.0.0.300", "\"10.0.0.300\" is not an address"},
        {"10.0.0.0/33", "\"10.0.0.0/33\": the prefix length is 0..32"},
        {"::/129", "\"::/129\": the prefix length is 0..128"},
        {"10.0.0.0/-1", "the prefix length"},
        {"10.0.0.0/", "the prefix length"},
        {"10.0.0.1/8", "\"10.0.0.1/8\": bits set past the /8 prefix"},
        {"2001:db8::1/32", "bits set past the /32 prefix"},
        {"localhost", "\"localhost\" is not an address"},
        {"/8", "is not an address"},
        {"", "expected addresses"},
        {" , ", "expected addresses"},
        {"1.2.3.4, everyone", "\"everyone\" is not an address"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        md_acl a = {0};
        char msg[160] = "";
        cr_expect_eq(md_acl_add(&a, true, bad[i][0], msg, sizeof msg), -EINVAL, "%s", bad[i][0]);
        cr_expect(strstr(msg, bad[i][1]) != NULL, "%s: %s", bad[i][0], msg);
    }
}

Test(acl, at_most_sixteen_rules, .timeout = 5)
{
    md_acl a = {0};
    char msg[160];
    for (int i = 0; i < MD_ACL_MAX; i++)
        cr_assert_eq(md_acl_add(&a, i % 2, "10.0.0.0/8", msg, sizeof msg), 0);
    cr_assert_eq(md_acl_add(&a, false, "all", msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "more than 16") != NULL, "%s", msg);
    cr_assert_eq(a.n, MD_ACL_MAX);
}
