/* Tests for daemon/core/addr.c: a client's address as a key, prefixes as masks, and the hash
 * the per-client tables share. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/un.h>

#include "core/addr.h"
#include "test_net.h"

static md_addr_key key_of(const char *text, unsigned *family)
{
    struct sockaddr_storage ss = test_addr(text);
    md_addr_key k;
    *family = md_addr_key_of(&ss, &k);
    return k;
}

Test(addr, an_ipv4_client_is_one_key_on_either_socket, .timeout = 5)
{
    unsigned f4, f6;
    md_addr_key a = key_of("192.0.2.7", &f4), b = key_of("::ffff:192.0.2.7", &f6);
    cr_assert_eq(f4, MD_ADDR_V4);
    cr_assert_eq(f6, MD_ADDR_V4);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
    /* IPv4-compatible (::a.b.c.d) is an IPv6 address, not the IPv4 client */
    md_addr_key c = key_of("::192.0.2.7", &f6);
    cr_assert_eq(f6, MD_ADDR_V6);
    cr_assert_neq(memcmp(&a, &c, sizeof a), 0);
    /* the bytes in order: 2001:db8:: starts with 0x20 0x01 */
    md_addr_key d = key_of("2001:db8::1", &f6);
    cr_assert_eq(f6, MD_ADDR_V6);
    uint8_t bytes[16];
    memcpy(bytes, d.w, 16);
    cr_assert_eq(bytes[0], 0x20);
    cr_assert_eq(bytes[1], 0x01);
    cr_assert_eq(bytes[15], 0x01);
}

Test(addr, no_address_is_all_ones, .timeout = 5)
{
    md_addr_key k;
    cr_assert_eq(md_addr_key_of(NULL, &k), MD_ADDR_NONE);
    cr_assert_eq(k.w[0], UINT64_MAX);
    cr_assert_eq(k.w[1], UINT64_MAX);
    struct sockaddr_storage un = {.ss_family = AF_UNIX};
    cr_assert_eq(md_addr_key_of(&un, &k), MD_ADDR_NONE);
    cr_assert_eq(k.w[0] & k.w[1], UINT64_MAX);
}

Test(addr, prefixes_mask_whole_and_partial_bytes, .timeout = 5)
{
    unsigned f;
    md_addr_key m = md_addr_mask(96 + 24); /* an IPv4 /24 */
    md_addr_key net = md_addr_masked(key_of("10.1.2.3", &f), &m);
    md_addr_key in = key_of("10.1.2.200", &f), out = key_of("10.1.3.1", &f);
    cr_assert(md_addr_in(&in, &net, &m));
    cr_assert_not(md_addr_in(&out, &net, &m));
    /* a prefix that ends inside a byte: 2001:db8::/33 holds 2001:db8:7fff:: but not 2001:db8:8000::
     */
    m = md_addr_mask(33);
    net = md_addr_masked(key_of("2001:db8::", &f), &m);
    in = key_of("2001:db8:7fff::1", &f);
    out = key_of("2001:db8:8000::1", &f);
    cr_assert(md_addr_in(&in, &net, &m));
    cr_assert_not(md_addr_in(&out, &net, &m));
    /* /0 holds everything, /128 one address */
    m = md_addr_mask(0);
    cr_assert_eq(m.w[0] | m.w[1], 0);
    m = md_addr_mask(128);
    cr_assert_eq(m.w[0] & m.w[1], UINT64_MAX);
}

Test(addr, the_hash_depends_on_the_seed_and_every_word, .timeout = 5)
{
    md_addr_key a = {{1, 2}}, b = {{1, 3}}, c = {{0, 2}};
    cr_assert_neq(md_addr_hash(&a, 7), md_addr_hash(&a, 8));
    cr_assert_neq(md_addr_hash(&a, 7), md_addr_hash(&b, 7));
    cr_assert_neq(md_addr_hash(&a, 7), md_addr_hash(&c, 7));
    cr_assert_eq(md_addr_hash(&a, 7), md_addr_hash(&a, 7));
}
