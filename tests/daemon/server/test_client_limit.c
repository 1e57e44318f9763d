/* Tests for daemon/server/client_limit.c: connections counted per client address, the limit,
 * what one client is (IPv4, an IPv6 /64, an IPv4 client of an IPv6 socket), and the table
 * against a plain model through many clients coming and going (growth, backward-shift
 * deletion). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/client_limit.h"
#include "test_net.h"

TestSuite(client_limit, .timeout = 30);

static uint64_t key_of(const md_client_counts *t, const char *text)
{
    struct sockaddr_storage ss = test_addr(text);
    return md_client_key(t, &ss);
}

Test(client_limit, the_limit_per_client)
{
    md_client_counts *t = md_client_counts_new();
    cr_assert_not_null(t);
    uint64_t a = key_of(t, "192.0.2.1"), b = key_of(t, "192.0.2.2");
    cr_assert_neq(a, 0);
    cr_assert_neq(a, b);
    cr_assert(md_client_counts_add(t, a, 2));
    cr_assert(md_client_counts_add(t, a, 2));
    cr_assert_not(md_client_counts_add(t, a, 2), "a third of the same client");
    cr_assert(md_client_counts_add(t, b, 2), "another client is not held back");
    cr_assert_eq(md_client_counts_clients(t), 2);
    md_client_counts_remove(t, a);
    cr_assert(md_client_counts_add(t, a, 2), "one closed: room for one");
    md_client_counts_remove(t, a);
    md_client_counts_remove(t, a);
    md_client_counts_remove(t, b);
    cr_assert_eq(md_client_counts_clients(t), 0, "nothing kept for clients gone");
    cr_assert_not(md_client_counts_add(t, a, 0), "a limit of 0 lets nobody in");
    md_client_counts_free(t);
}

Test(client_limit, what_one_client_is)
{
    md_client_counts *t = md_client_counts_new();
    cr_assert_eq(key_of(t, "2001:db8:0:1::1"), key_of(t, "2001:db8:0:1:ffff::2"), "one /64");
    cr_assert_neq(key_of(t, "2001:db8:0:1::1"), key_of(t, "2001:db8:0:2::1"));
    cr_assert_eq(key_of(t, "198.51.100.7"), key_of(t, "::ffff:198.51.100.7"));
    cr_assert_neq(key_of(t, "198.51.100.7"), key_of(t, "198.51.100.8"));
    cr_assert_neq(key_of(t, "0.0.0.1"), key_of(t, "::1"), "the families never meet");
    md_client_counts_free(t);
}

/* Random adds and removes over 5,000 clients against an array of counts: the table agrees at
 * every step, grows past its first size and empties again. */
Test(client_limit, the_table_agrees_with_a_model)
{
    enum { CLIENTS = 5000, STEPS = 200000, LIMIT = 3 };
    md_client_counts *t = md_client_counts_new();
    static uint64_t keys[CLIENTS];
    static uint32_t model[CLIENTS];
    char text[32];
    for (int i = 0; i < CLIENTS; i++) {
        snprintf(text, sizeof text, "10.%d.%d.1", i / 256, i % 256);
        keys[i] = key_of(t, text);
    }
    unsigned seed = 12345;
    uint32_t clients = 0;
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(rand_r(&seed) % CLIENTS);
        if (rand_r(&seed) % 2 == 0) {
            bool want = model[i] < LIMIT;
            cr_assert_eq(md_client_counts_add(t, keys[i], LIMIT), want, "step %d", step);
            if (want && model[i]++ == 0)
                clients++;
        } else if (model[i] != 0) {
            md_client_counts_remove(t, keys[i]);
            if (--model[i] == 0)
                clients--;
        }
        cr_assert_eq(md_client_counts_clients(t), clients, "step %d", step);
    }
    for (int i = 0; i < CLIENTS; i++) {
        /* Each client's count, read back: it takes exactly LIMIT - model more. */
        uint32_t more = 0;
        while (md_client_counts_add(t, keys[i], LIMIT))
            more++;
        cr_assert_eq(more, LIMIT - model[i], "client %d", i);
        for (uint32_t k = 0; k < LIMIT; k++)
            md_client_counts_remove(t, keys[i]);
    }
    cr_assert_eq(md_client_counts_clients(t), 0);
    md_client_counts_free(t);
}
