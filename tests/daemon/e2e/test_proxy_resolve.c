/* Re-resolution end to end ([upstream] resolve_interval_ms, resolve_file): a group's name
 * moves from upstream A (127.0.0.1:P) to upstream B (127.0.0.2:P) while a slow request is on
 * A, without a reload. The request in flight completes from A, new requests go to B only, the
 * /metrics series follow the set, and an answer that loses the name keeps B. */
#include <criterion/criterion.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_resolve, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 30);

/* The hosts file magpied reads, replaced whole (rename) so a lookup never sees half of it. */
static void hosts_write(const char *line)
{
    char tmp[128], path[128];
    snprintf(tmp, sizeof tmp, "%s/hosts.tmp", proxy_dir);
    snprintf(path, sizeof path, "%s/hosts", proxy_dir);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fprintf(f, "# test\n%s\n", line);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(tmp, path), 0);
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* B's request count: its /stats, on 127.0.0.2 (stats_of asks 127.0.0.1, which is A). */
static long b_requests(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    cr_assert_eq(inet_pton(AF_INET, "127.0.0.2", &sa.sin_addr), 1);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char *req = "GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    char resp[1024];
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    const char *at = strstr(resp, "requests=");
    cr_assert_not_null(at, "no stats from B: %s", resp);
    return strtol(at + 9, NULL, 10);
}

static void get_ok(int port)
{
    response r = get(port, "/plain?token=resolved");
    cr_assert_eq(r.status, 200, "%s", r.head);
    response_free(&r);
}

Test(proxy_resolve, answer_moves_to_another_server_while_a_request_is_in_flight)
{
    upstream_proc a = upstream_start(0), b;
    cr_assert(upstream_try_start_at(a.port, "127.0.0.2", &b), "no upstream on 127.0.0.2:%d",
              a.port);
    hosts_write("127.0.0.1 svc.test");
    daemon_proc d =
        proxy_start("[upstream app]\nresolve_interval_ms = 20\nresolve_file = %s/hosts\n"
                    "server = svc.test:%d\n"
                    "[route /]\nhandler = proxy\nupstream = app\n",
                    proxy_dir, a.port);

    client slow = client_open(d.http);
    client_send(&slow, "GET /mode/slowhead?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\n");
    while (stats_of(&a).requests < 1) /* on A now */
        nap_ms(5);

    hosts_write("127.0.0.2 svc.test");
    char on_b[200];
    snprintf(on_b, sizeof on_b,
             "magpied_upstream_requests_total{upstream=\"app\",server=\"svc.test:%d/127.0.0.2\"}",
             a.port);
    /* Within the suite's timeout: the next round (20 ms) moves the set. */
    while (proxy_metric(d.http, on_b) < 1) {
        get_ok(d.http);
        nap_ms(10);
    }
    long at_a = stats_of(&a).requests;
    for (int i = 0; i < 5; i++)
        get_ok(d.http);
    cr_assert_eq(stats_of(&a).requests, at_a, "new requests go to B only");
    cr_assert_geq(proxy_metric(d.http, on_b), 6);

    response r = read_final(&slow, false, NULL);
    cr_assert_eq(r.status, 200, "the request in flight on A completes: %s", r.head);
    cr_assert(r.complete);
    cr_assert_not_null(strstr(r.body, "GET /mode/slowhead?ms=1500 HTTP/1.1\r\n"), "%s", r.body);
    response_free(&r);
    client_close(&slow);

    cr_assert_eq(proxy_metric(d.http, "magpied_upstream_addresses{upstream=\"app\"}"), 1);
    cr_assert_gt(proxy_metric(d.http, "magpied_upstream_resolutions_total{upstream=\"app\"}"), 0);
    char on_a[200];
    snprintf(on_a, sizeof on_a,
             "magpied_upstream_requests_total{upstream=\"app\",server=\"svc.test:%d/127.0.0.1\"}",
             a.port);
    cr_assert_eq(proxy_metric(d.http, on_a), -1, "a departed address leaves the exposition");

    /* The name gone from the answer: the last address stays, the failures are counted. */
    hosts_write("127.0.0.9 other.test");
    while (proxy_metric(d.http, "magpied_upstream_resolve_failures_total{upstream=\"app\"}") < 2)
        nap_ms(10);
    long at_b = b_requests(b.port);
    get_ok(d.http);
    cr_assert_eq(b_requests(b.port), at_b + 1, "B still serves");

    cr_assert_eq(stop(&d), 0);
    upstream_stop(&a);
    upstream_stop(&b);
}
