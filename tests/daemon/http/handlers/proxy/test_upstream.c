/* Tests for daemon/http/handlers/proxy/upstream.c: [upstream] keys and their errors, the balancer
 * (smooth weights, least_conn, hash stability and spread), passive health, and the pool's check of
 * an idle socket. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/config.h"
#include "http/handler.h"
#include "http/handlers/proxy/upstream.h"

static md_upstream_table t;

static md_upstream_conf *group(void)
{
    memset(&t, 0, sizeof t);
    char msg[256];
    cr_assert_eq(md_upstream_add(&t, " app", 3, msg, sizeof msg), 0, "%s", msg);
    return &t.u[0];
}

static void key_ok(md_upstream_conf *u, const char *k, const char *v)
{
    char msg[256] = "";
    cr_assert_eq(md_upstream_key(u, k, v, msg, sizeof msg), 0, "%s = %s: %s", k, v, msg);
}

static void key_bad(const char *k, const char *v, const char *why)
{
    md_upstream_conf *u = group();
    char msg[256] = "";
    int rc = md_upstream_key(u, k, v, msg, sizeof msg);
    cr_assert_neq(rc, 0, "%s = %s was taken", k, v);
    cr_assert_not_null(strstr(msg, why), "%s = %s: \"%s\" lacks \"%s\"", k, v, msg, why);
}

Test(upstream, keys_and_defaults, .timeout = 5)
{
    md_upstream_conf *u = group();
    cr_assert_eq(u->keepalive, 32);
    cr_assert_eq(u->tries, 3);
    cr_assert_eq(u->buffer_bytes, 65536);
    key_ok(u, "server", "127.0.0.1:8001 weight=5 max_conns=10");
    key_ok(u, "server", "[::1]:8002");
    key_ok(u, "balance", "hash_header X-User");
    key_ok(u, "keepalive", "0");
    cr_assert_eq(u->nservers, 2);
    cr_assert_eq(u->servers[0].weight, 5);
    cr_assert_eq(u->servers[0].max_conns, 10);
    cr_assert_str_eq(u->servers[0].label, "127.0.0.1:8001");
    cr_assert_str_eq(u->servers[1].label, "[::1]:8002");
    cr_assert_eq(u->servers[1].addr.ss_family, AF_INET6);
    cr_assert_eq(u->balance, MD_BALANCE_HASH_HEADER);
    cr_assert_str_eq(u->hash_header, "X-User");
    cr_assert_eq(u->keepalive, 0);
    cr_assert_eq(md_upstream_check(u, NULL, 0), 0);
}

Test(upstream, bad_keys_say_why, .timeout = 5)
{
    key_bad("server", "127.0.0.1", "HOST:PORT");
    key_bad("server", "127.0.0.1:0", "port in 1..65535");
    key_bad("server", "127.0.0.1:80 weight=0", "weight");
    key_bad("server", "127.0.0.1:80 weight=101", "weight");
    key_bad("server", "127.0.0.1:80 max_conns=x", "max_conns");
    key_bad("server", "127.0.0.1:80 backup", "unknown option");
    key_bad("server", "[::1:80", "[IPv6]:PORT");
    key_bad("server", "no-such-host.invalid:80", "cannot resolve");
    key_bad("balance", "random", "expected round_robin");
    key_bad("balance", "hash_header", "expected round_robin");
    key_bad("tries", "0", "1..16");
    key_bad("health_path", "nope", "starting with '/'");
    key_bad("buffer_bytes", "12x", "expected an integer");
    md_upstream_conf *u = group();
    char msg[256];
    cr_assert_eq(md_upstream_key(u, "nope", "1", msg, sizeof msg), -ENOENT);
    key_ok(u, "tries", "2");
    cr_assert_eq(md_upstream_key(u, "tries", "2", msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "set twice"));
    cr_assert_eq(md_upstream_check(u, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "at least one"));
    cr_assert_eq(md_upstream_add(&t, " app", 9, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "line 3"), "%s", msg);
    cr_assert_eq(md_upstream_add(&t, " a b", 9, msg, sizeof msg), -EINVAL);
}

static int parse(md_config *c, const char *text, md_error *err)
{
    md_config_init(c);
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    cr_assert_not_null(f);
    int rc = md_config_parse_file(c, f, "test.conf", err);
    fclose(f);
    return rc;
}

Test(upstream, config_errors_name_file_and_line, .timeout = 5)
{
    static md_config c;
    md_error err;
    cr_assert_eq(parse(&c,
                       "[upstream app]\nserver = 127.0.0.1:9\n[route /]\nhandler = proxy\n"
                       "upstream = app\nhost = upstream\nforwarded = on\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert_eq(c.upstreams.n, 1);
    /* The route's options are the proxy handler's own (what they do: tests/daemon/e2e/). */
    cr_assert_eq(c.routes.r[0].handler, md_handler_find("proxy"));
    cr_assert_not_null(memmem(c.routes.r[0].conf, sizeof c.routes.r[0].conf, "app", 4));

    const struct {
        const char *text, *msg;
    } bad[] = {
        {"[route /]\nhandler = proxy\nupstream = nope\n",
         "test.conf:3: [route /] upstream: no [upstream nope] section"},
        {"[route /]\nhandler = proxy\n", "test.conf:1: [route /] upstream: required"},
        {"[upstream app]\nkeepalive = 2\n", "test.conf:1: [upstream app] server: at least one"},
        {"[upstream app]\nserver = 127.0.0.1:9\nbalance = x\n",
         "test.conf:3: [upstream app] balance: expected round_robin"},
        {"[upstream app]\nserver = 127.0.0.1:9\nnope = 1\n",
         "test.conf:3: [upstream app] nope: unknown key"},
        {"[upstream a/b]\n", "test.conf:1: [upstream a/b]: expected a name"},
        {"[route /]\nhandler = text\nupstream = app\n",
         "test.conf:3: [route /] upstream: only for handler = proxy"},
        {"[upstream app]\nserver = 127.0.0.1:9\n[route /]\nhandler = proxy\nupstream = app\n"
         "via = maybe\n",
         "test.conf:6: [route /] via: expected request, or on"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(parse(&c, bad[i].text, &err), -EINVAL, "%s", bad[i].text);
        cr_assert(strncmp(err.msg, bad[i].msg, strlen(bad[i].msg)) == 0, "got \"%s\", want \"%s\"",
                  err.msg, bad[i].msg);
    }
    cr_assert_eq(md_config_set(&c, "upstream app.tries=2", &err), -EINVAL);
}

static md_upstreams *state(const char *balance, const unsigned *weights, unsigned n)
{
    md_upstream_conf *u = group();
    char spec[64];
    for (unsigned i = 0; i < n; i++) {
        snprintf(spec, sizeof spec, "127.0.0.%u:80 weight=%u", i + 1, weights[i]);
        key_ok(u, "server", spec);
    }
    key_ok(u, "balance", balance);
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, NULL, 0), 0);
    return us;
}

Test(upstream, round_robin_is_smooth_and_weighted, .timeout = 5)
{
    const unsigned w[] = {5, 1, 1};
    md_upstreams *us = state("round_robin", w, 3);
    md_upstream *up = &us->u[0];
    char seq[8] = "";
    for (int i = 0; i < 7; i++) {
        md_upstream_peer *p = md_upstream_pick(up, 0, NULL, 0, 1000);
        seq[i] = (char)('a' + (p - up->peers));
        md_upstream_done(p, false, 1000);
    }
    cr_assert_str_eq(seq, "aabacaa", "nginx's smooth order for 5,1,1");
    /* tried servers are skipped */
    md_upstream_peer *p = md_upstream_pick(up, 1, NULL, 0, 1000);
    cr_assert_neq(p, &up->peers[0]);
    md_upstream_done(p, false, 1000);
    cr_assert_null(md_upstream_pick(up, 7, NULL, 0, 1000));
    md_upstreams_free(us);
}

Test(upstream, least_conn_takes_the_idlest, .timeout = 5)
{
    const unsigned w[] = {1, 1, 2};
    md_upstreams *us = state("least_conn", w, 3);
    md_upstream *up = &us->u[0];
    md_upstream_peer *held[4];
    for (int i = 0; i < 4; i++)
        held[i] = md_upstream_pick(up, 0, NULL, 0, 1000);
    /* weight 2 takes two of the four */
    int on_c = 0;
    for (int i = 0; i < 4; i++)
        on_c += held[i] == &up->peers[2];
    cr_assert_eq(on_c, 2);
    for (int i = 0; i < 4; i++)
        md_upstream_done(held[i], false, 1000);
    md_upstreams_free(us);
}

Test(upstream, hash_is_stable_and_spread, .timeout = 5)
{
    const unsigned w[] = {1, 1, 1, 1};
    md_upstreams *us = state("hash_ip", w, 4);
    md_upstream *up = &us->u[0];
    int count[4] = {0};
    for (int k = 0; k < 400; k++) {
        char key[32];
        snprintf(key, sizeof key, "10.0.%d.%d", k / 250, k % 250);
        md_upstream_peer *a = md_upstream_pick(up, 0, key, strlen(key), 1000);
        md_upstream_done(a, false, 1000);
        md_upstream_peer *b = md_upstream_pick(up, 0, key, strlen(key), 1000);
        md_upstream_done(b, false, 1000);
        cr_assert_eq(a, b, "a key keeps its server");
        count[a - up->peers]++;
    }
    for (int i = 0; i < 4; i++)
        cr_assert(count[i] > 50, "server %d got %d of 400 keys", i, count[i]);
    /* a server that is down hands its keys on, and gets them back when it is up */
    md_upstream_peer *a = md_upstream_pick(up, 0, "k", 1, 1000);
    md_upstream_done(a, true, 1000); /* max_fails = 1: out for fail_timeout_ms */
    md_upstream_peer *b = md_upstream_pick(up, 0, "k", 1, 1001);
    cr_assert_neq(a, b);
    md_upstream_done(b, false, 1001);
    md_upstream_peer *c = md_upstream_pick(up, 0, "k", 1, 1000 + 10001);
    cr_assert_eq(a, c);
    md_upstream_done(c, false, 11001);
    md_upstreams_free(us);
}

Test(upstream, passive_health_and_max_conns, .timeout = 5)
{
    const unsigned one[] = {1};
    md_upstreams *us = state("round_robin", one, 1);
    md_upstream_peer *only = md_upstream_pick(&us->u[0], 0, NULL, 0, 1000);
    md_upstream_done(only, true, 1000);
    cr_assert(md_upstream_peer_up(only, 1000), "a lone server is never taken out");
    md_upstreams_free(us);

    const unsigned w[] = {1, 1};
    us = state("round_robin", w, 2);
    md_upstream *up = &us->u[0];
    md_upstream_peer *p = md_upstream_pick(up, 0, NULL, 0, 1000);
    md_upstream_done(p, true, 1000);
    cr_assert(!md_upstream_peer_up(p, 1000));
    md_upstream_peer *q = md_upstream_pick(up, 0, NULL, 0, 5000);
    cr_assert(q != NULL && q != p, "the other server takes it");
    md_upstream_done(q, true, 5000);
    cr_assert_null(md_upstream_pick(up, 0, NULL, 0, 5000), "both down: no wait, no server");
    cr_assert(md_upstream_peer_up(p, 11000));
    /* active health: fall 3, rise 2 */
    for (int i = 0; i < 2; i++)
        md_upstream_health_result(p, false);
    cr_assert(md_upstream_peer_up(p, 11000));
    md_upstream_health_result(p, false);
    cr_assert(!md_upstream_peer_up(p, 11000));
    md_upstream_health_result(p, true);
    cr_assert(!md_upstream_peer_up(p, 11000));
    md_upstream_health_result(p, true);
    cr_assert(md_upstream_peer_up(p, 11000));
    md_upstreams_free(us);

    md_upstream_conf *u = group();
    key_ok(u, "server", "127.0.0.1:80 max_conns=1");
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, NULL, 0), 0);
    up = &us->u[0];
    p = md_upstream_pick(up, 0, NULL, 0, 1);
    cr_assert_not_null(p);
    cr_assert_null(md_upstream_pick(up, 0, NULL, 0, 1), "at max_conns");
    md_upstream_done(p, false, 1);
    cr_assert_not_null(p = md_upstream_pick(up, 0, NULL, 0, 1));
    md_upstream_done(p, false, 1);
    md_upstreams_free(us);
}

Test(upstream, pool_check_sees_eof_and_stray_bytes, .timeout = 5)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    cr_assert(md_upstream_fd_idle_ok(sv[0]), "quiet: reusable");
    cr_assert_eq(write(sv[1], "x", 1), 1);
    cr_assert(!md_upstream_fd_idle_ok(sv[0]), "bytes nobody asked for");
    char b;
    cr_assert_eq(read(sv[0], &b, 1), 1);
    close(sv[1]);
    cr_assert(!md_upstream_fd_idle_ok(sv[0]), "closed by the server");
    close(sv[0]);
}

/* A pooled connection whose socket was never opened: closing it only frees it (ASan sees a
 * leak if the pool drops one, a double free if it closes one twice). */
static md_upstream_conn *fake_conn(md_upstream_peer *p, int id)
{
    md_upstream_conn *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    c->peer = p;
    c->idle_since_ms = (uint64_t)id; /* a tag the test reads back; put overwrites the time */
    return c;
}

static md_upstreams *pool_state(const char *keepalive, const char *surplus)
{
    md_upstream_conf *u = group();
    key_ok(u, "server", "127.0.0.1:80");
    key_ok(u, "keepalive", keepalive);
    key_ok(u, "keepalive_timeout_ms", "60000");
    key_ok(u, "keepalive_surplus_ms", surplus);
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, NULL, 0), 0);
    return us;
}

Test(upstream, pool_reuses_the_newest_and_keeps_a_burst_briefly, .timeout = 5)
{
    md_upstreams *us = pool_state("2", "1000");
    md_upstream_peer *p = &us->u[0].peers[0];
    md_upstream_conn *c[4];
    for (int i = 0; i < 4; i++)
        c[i] = fake_conn(p, i);
    /* A burst returns four: over keepalive (2), but none idle 1000 ms yet, so all stay. */
    for (int i = 0; i < 4; i++)
        md_upstream_pool_put(c[i], 100 + (uint64_t)i);
    cr_assert_eq(md_upstream_pool_idle(p), 4);
    /* The most recently returned goes out first. */
    cr_assert_eq(md_upstream_pool_take(p, 200), c[3]);
    md_upstream_pool_put(c[3], 300);
    /* At 1100 c[0] has been idle 1000 ms with the pool over its cap: the least recently used
     * close, one by one from the old end, until the pool is at its cap or the rest are
     * younger. */
    md_upstream_pool_sweep(p, 1100);
    cr_assert_eq(md_upstream_pool_idle(p), 3, "c[0] closed, c[1] is 999 ms idle");
    md_upstream_pool_sweep(p, 1102);
    cr_assert_eq(md_upstream_pool_idle(p), 2, "c[1] closed; then at the cap, c[2] stays");
    md_upstream_pool_sweep(p, 5000);
    cr_assert_eq(md_upstream_pool_idle(p), 2, "within the cap, only the idle timeout closes");
    cr_assert_eq(md_upstream_pool_take(p, 5000), c[3]);
    md_upstream_pool_put(c[3], 5000);
    md_upstream_pool_sweep(p, 60102);
    cr_assert_eq(md_upstream_pool_idle(p), 1, "c[2], put at 102, timed out");
    md_upstream_pool_sweep(p, 65000);
    cr_assert_eq(md_upstream_pool_idle(p), 0);
    md_upstreams_free(us);
}

Test(upstream, pool_without_surplus_closes_the_oldest_at_once, .timeout = 5)
{
    md_upstreams *us = pool_state("2", "0");
    md_upstream_peer *p = &us->u[0].peers[0];
    md_upstream_conn *a = fake_conn(p, 0), *b = fake_conn(p, 1), *c = fake_conn(p, 2);
    md_upstream_pool_put(a, 10);
    md_upstream_pool_put(b, 11);
    md_upstream_pool_put(c, 12); /* a, the least recently used, closes */
    cr_assert_eq(md_upstream_pool_idle(p), 2);
    cr_assert_eq(md_upstream_pool_take(p, 13), c);
    cr_assert_eq(md_upstream_pool_take(p, 13), b);
    cr_assert_null(md_upstream_pool_take(p, 13));
    md_upstream_pool_put(b, 14);
    md_upstream_pool_put(c, 14);
    md_upstreams_free(us); /* closes what is pooled */

    us = pool_state("0", "1000");
    p = &us->u[0].peers[0];
    md_upstream_pool_put(fake_conn(p, 0), 10);
    cr_assert_eq(md_upstream_pool_idle(p), 0, "keepalive 0: a connection per request");
    md_upstreams_free(us);
}
