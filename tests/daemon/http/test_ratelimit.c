/* Tests for daemon/http/ratelimit.c: the limit_ keys, the rate and burst per client, how much of
 * an address is one client, the bounded table under a flood of addresses, and threads taking
 * from one table at once. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "http/ratelimit.h"
#include "test_net.h"

TestSuite(ratelimit, .timeout = 30);

#define MS UINT64_C(1000000)
#define S  (1000 * MS)

static md_ratelimit_conf conf(const char *rate, const char *burst)
{
    md_ratelimit_conf c;
    md_ratelimit_conf_init(&c);
    char msg[160];
    cr_assert_eq(md_ratelimit_key(&c, "limit_rate", rate, msg, sizeof msg), 0, "%s", msg);
    if (burst != NULL)
        cr_assert_eq(md_ratelimit_key(&c, "limit_burst", burst, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_ratelimit_conf_check(&c, msg, sizeof msg), 0, "%s", msg);
    return c;
}

static bool take(md_ratelimit *rl, const char *who, uint64_t now, uint32_t *retry)
{
    struct sockaddr_storage ss = test_addr(who);
    uint32_t r = 0;
    bool ok = md_ratelimit_take(rl, &ss, now, &r);
    if (retry != NULL)
        *retry = r;
    return ok;
}

Test(ratelimit, keys_and_their_errors)
{
    md_ratelimit_conf c;
    md_ratelimit_conf_init(&c);
    char msg[160];
    cr_assert_eq(md_ratelimit_key(&c, "limit_rate", "10/s", msg, sizeof msg), 0);
    cr_assert_eq(c.interval_ns, 100 * MS);
    cr_assert_eq(c.burst, 10, "the burst defaults to one second's worth");
    cr_assert_eq(md_ratelimit_key(&c, "limit_rate", "120/m", msg, sizeof msg), 0);
    cr_assert_eq(c.interval_ns, 500 * MS);
    cr_assert_eq(c.burst, 2);
    cr_assert_eq(md_ratelimit_key(&c, "limit_burst", "0", msg, sizeof msg), 0);
    cr_assert_eq(md_ratelimit_key(&c, "limit_rate", "5/m", msg, sizeof msg), 0);
    cr_assert_eq(c.burst, 0, "a burst set stays set, whatever the order");
    cr_assert_eq(md_ratelimit_key(&c, "limit_ipv6_prefix", "48", msg, sizeof msg), 0);
    cr_assert_eq(c.v6_bits, 48);
    cr_assert_eq(md_ratelimit_key(&c, "limit_ipv4_prefix", "24", msg, sizeof msg), 0);
    cr_assert_eq(c.v4_bits, 24);
    cr_assert_eq(md_ratelimit_key(&c, "limit_table", "1000", msg, sizeof msg), 0);
    cr_assert_eq(md_ratelimit_key(&c, "limits", "1", msg, sizeof msg), -ENOENT);
    cr_assert_eq(md_ratelimit_key(&c, "root", "/x", msg, sizeof msg), -ENOENT);

    static const char *const bad[][3] = {
        {"limit_rate", "10", "expected N/s or N/m"},
        {"limit_rate", "10/h", "expected N/s or N/m"},
        {"limit_rate", "/s", "expected N/s or N/m"},
        {"limit_rate", "0/s", "N in 1..1000000"},
        {"limit_rate", "1000001/s", "N in 1..1000000"},
        {"limit_rate", "-1/s", "N in 1..1000000"},
        {"limit_burst", "100001", "0..100000"},
        {"limit_table", "10", "64..4194304"},
        {"limit_ipv4_prefix", "33", "1..32"},
        {"limit_ipv6_prefix", "0", "1..128"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = '\0';
        cr_assert_eq(md_ratelimit_key(&c, bad[i][0], bad[i][1], msg, sizeof msg), -EINVAL,
                     "%s = %s", bad[i][0], bad[i][1]);
        cr_assert_not_null(strstr(msg, bad[i][2]), "%s = %s: %s", bad[i][0], bad[i][1], msg);
    }

    md_ratelimit_conf_init(&c);
    cr_assert_eq(md_ratelimit_key(&c, "limit_burst", "3", msg, sizeof msg), 0);
    cr_assert_eq(md_ratelimit_conf_check(&c, msg, sizeof msg), -EINVAL);
    cr_assert_str_eq(msg, "limit_rate: required by the other limit_ keys");
}

Test(ratelimit, rate_and_burst_per_client)
{
    md_ratelimit_conf c = conf("10/s", "2");
    md_ratelimit *rl = md_ratelimit_new(&c);
    cr_assert_not_null(rl);
    uint64_t t = 1000 * S;
    uint32_t retry;
    /* One at once, plus the burst of two; then refused until an interval has passed. */
    for (int i = 0; i < 3; i++)
        cr_assert(take(rl, "192.0.2.1", t, NULL), "request %d", i);
    cr_assert_not(take(rl, "192.0.2.1", t, &retry));
    cr_assert_eq(retry, 1, "Retry-After rounds up to a whole second");
    cr_assert(take(rl, "192.0.2.2", t, NULL), "another client has its own");
    cr_assert_not(take(rl, "192.0.2.1", t + 99 * MS, NULL));
    cr_assert(take(rl, "192.0.2.1", t + 100 * MS, NULL), "one interval later: one more");
    cr_assert_not(take(rl, "192.0.2.1", t + 100 * MS, NULL));
    /* An idle client is back to a full burst, not more. */
    t += 10 * S;
    for (int i = 0; i < 3; i++)
        cr_assert(take(rl, "192.0.2.1", t, NULL));
    cr_assert_not(take(rl, "192.0.2.1", t, NULL));
    md_ratelimit_free(rl);
}

Test(ratelimit, retry_after_counts_the_wait_in_seconds)
{
    md_ratelimit_conf c = conf("6/m", "0"); /* one every 10 s */
    md_ratelimit *rl = md_ratelimit_new(&c);
    uint32_t retry;
    uint64_t t = 5 * S;
    cr_assert(take(rl, "2001:db8::1", t, NULL));
    cr_assert_not(take(rl, "2001:db8::1", t + 1 * S, &retry));
    cr_assert_eq(retry, 9);
    cr_assert_not(take(rl, "2001:db8::1", t + 9 * S + 1, &retry));
    cr_assert_eq(retry, 1);
    cr_assert(take(rl, "2001:db8::1", t + 10 * S, NULL));
    md_ratelimit_free(rl);
}

Test(ratelimit, how_much_of_an_address_is_one_client)
{
    md_ratelimit_conf c = conf("1/m", "0");
    md_ratelimit *rl = md_ratelimit_new(&c);
    uint64_t t = S;
    /* IPv6 by /64: the same /64 is one client, the next /64 another. */
    cr_assert(take(rl, "2001:db8:0:1::1", t, NULL));
    cr_assert_not(take(rl, "2001:db8:0:1:ffff::2", t, NULL));
    cr_assert(take(rl, "2001:db8:0:2::1", t, NULL));
    /* IPv4 by /32, and an IPv4 client on an IPv6 socket is the same client. */
    cr_assert(take(rl, "198.51.100.7", t, NULL));
    cr_assert_not(take(rl, "::ffff:198.51.100.7", t, NULL));
    cr_assert(take(rl, "198.51.100.8", t, NULL));
    /* An address not known is one client of its own. */
    uint32_t retry;
    cr_assert(md_ratelimit_take(rl, NULL, t, &retry));
    cr_assert_not(md_ratelimit_take(rl, NULL, t, &retry));
    md_ratelimit_free(rl);

    md_ratelimit_conf wide = conf("1/m", "0");
    char msg[160];
    cr_assert_eq(md_ratelimit_key(&wide, "limit_ipv4_prefix", "24", msg, sizeof msg), 0);
    cr_assert_eq(md_ratelimit_key(&wide, "limit_ipv6_prefix", "128", msg, sizeof msg), 0);
    rl = md_ratelimit_new(&wide);
    cr_assert(take(rl, "198.51.100.7", t, NULL));
    cr_assert_not(take(rl, "198.51.100.200", t, NULL), "the same /24");
    cr_assert(take(rl, "2001:db8::1", t, NULL));
    cr_assert(take(rl, "2001:db8::2", t, NULL), "by /128, each address");
    md_ratelimit_free(rl);
}

/* A flood of distinct addresses never grows the table nor locks out a newcomer: entries are
 * evicted, so a newcomer always gets its burst (and a client evicted by the flood may come
 * back with a full one: the documented cost). */
Test(ratelimit, a_flood_of_addresses_is_bounded)
{
    md_ratelimit_conf c = conf("1/m", "0");
    char msg[160];
    cr_assert_eq(md_ratelimit_key(&c, "limit_table", "64", msg, sizeof msg), 0);
    md_ratelimit *rl = md_ratelimit_new(&c);
    uint64_t t = S;
    char who[64];
    for (int i = 0; i < 100000; i++) {
        snprintf(who, sizeof who, "10.%d.%d.%d", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        cr_assert(take(rl, who, t, NULL), "newcomer %s refused", who);
    }
    md_ratelimit_free(rl);
}

/* Threads taking for the same clients at the same instant: exactly 1 + burst each get in. */
typedef struct hammer {
    md_ratelimit *rl;
    _Atomic int admitted;
} hammer;

static void *hammer_run(void *arg)
{
    hammer *h = arg;
    char who[32];
    for (int round = 0; round < 200; round++)
        for (int client = 0; client < 8; client++) {
            snprintf(who, sizeof who, "203.0.113.%d", client);
            struct sockaddr_storage ss = test_addr(who);
            uint32_t retry;
            if (md_ratelimit_take(h->rl, &ss, 7 * S, &retry))
                atomic_fetch_add(&h->admitted, 1);
        }
    return NULL;
}

Test(ratelimit, threads_share_one_table)
{
    md_ratelimit_conf c = conf("1/m", "4");
    hammer h = {.rl = md_ratelimit_new(&c)};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, hammer_run, &h), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&h.admitted), 8 * 5, "%d admitted", atomic_load(&h.admitted));
    md_ratelimit_free(h.rl);
}
