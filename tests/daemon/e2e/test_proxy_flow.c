/* End-to-end tests of the proxy handler's back-pressure: magpied's memory stays bounded (its
 * VmRSS, read from /proc) while a client reads a 50 MiB response slowly, and while an upstream
 * does not read a 50 MiB request body; the bytes arrive whole once the slow side catches up.
 * Each run takes a couple of seconds: the slow phase lasts long enough for an unbounded proxy
 * to have buffered tens of MiB, not for the whole transfer to crawl. */
#include <criterion/criterion.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_flow, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 90);

#define BIG (50L << 20)

/* The growth allowed over the baseline: the response window (64 KiB) and read buffers, with
 * room for the allocator; far under the 50 MiB an unbounded proxy would take. The sanitizers
 * keep freed blocks in quarantine and shadow what is touched, so they get more. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_SLACK_KIB (24L << 10)
#else
#define RSS_SLACK_KIB (8L << 10)
#endif

static void warm_up(int port)
{
    for (int i = 0; i < 4; i++) {
        response r = get(port, "/mode/big?bytes=1048576");
        cr_assert_eq(r.status, 200, "%s", r.head);
        cr_assert_eq(r.body_len, 1048576);
        response_free(&r);
    }
}

static long elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

Test(proxy_flow, slow_client_bounds_memory)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = proxy_start("[upstream app]\nserver = 127.0.0.1:%d\nbuffer_bytes = 65536\n"
                                "read_timeout_ms = 30000\n"
                                "[route /]\nhandler = proxy\nupstream = app\n",
                                u.port);
    warm_up(d.http);
    long base = rss_kib(d.pid);
    cr_assert_gt(base, 0);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 16384;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.http)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[128];
    snprintf(req, sizeof req, "GET /mode/big?bytes=%ld HTTP/1.1\r\nHost: x\r\n\r\n", BIG);
    test_write_all(fd, req, strlen(req));

    /* Slow: 4 KiB every 10 ms for 1.5 s (~600 KiB of 50 MiB). The first read keeps the
     * head. */
    static char buf[1 << 16];
    char first[4097];
    long got = 0, peak = base;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (elapsed_ms(&t0) < 1500) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        cr_assert_eq(poll(&pfd, 1, 5000), 1, "the response stopped");
        ssize_t n = read(fd, got == 0 ? first : buf, 4096);
        cr_assert_gt(n, 0);
        if (got == 0)
            first[n] = 0;
        got += n;
        long rss = rss_kib(d.pid);
        peak = rss > peak ? rss : peak;
        usleep(10000);
    }
    cr_assert(strncmp(first, "HTTP/1.1 200 ", 13) == 0, "%.300s", first);
    const char *e = strstr(first, "\r\n\r\n");
    cr_assert_not_null(e, "a head over 4 KiB: %.300s", first);
    char v[32];
    cr_assert_eq(head_field(first, "Content-Length", v, sizeof v), 1, "%.300s", first);
    cr_assert_eq(strtol(v, NULL, 10), BIG, "%.300s", first);
    long want = (long)(e + 4 - first) + BIG;
    /* Then fast, to the last byte. */
    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        cr_assert_eq(poll(&pfd, 1, 10000), 1, "the response stopped after %ld bytes", got);
        ssize_t n = read(fd, buf, sizeof buf);
        cr_assert_gt(n, 0, "closed after %ld of %ld bytes", got, want);
        got += n;
    }
    cr_assert_eq(got, want, "more bytes than the response");
    close(fd);
    fprintf(stderr, "slow_client_bounds_memory: VmRSS %ld KiB, peak +%ld KiB\n", base, peak - base);
    cr_assert_lt(peak - base, RSS_SLACK_KIB,
                 "magpied grew by %ld KiB (from %ld) while a client read slowly", peak - base,
                 base);
    still_serves(d.http);
    pair_stop(&u, &d);
}

Test(proxy_flow, slow_upstream_bounds_memory)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = proxy_start("[upstream app]\nserver = 127.0.0.1:%d\nsend_timeout_ms = 30000\n"
                                "read_timeout_ms = 30000\nheader_timeout_ms = 30000\n"
                                "[route /]\nhandler = proxy\nupstream = app\n",
                                u.port);
    warm_up(d.http);
    long base = rss_kib(d.pid);
    cr_assert_gt(base, 0);

    client c = client_open(d.http);
    char req[160];
    snprintf(req, sizeof req,
             "POST /mode/sink?pause_ms=1500 HTTP/1.1\r\nHost: x\r\nContent-Length: %ld\r\n\r\n",
             BIG);
    static char chunk[1 << 16];
    memset(chunk, 'z', sizeof chunk);
    long sent = 0, peak = base;
    struct timespec t0; /* before the head goes: the upstream's pause starts after it */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    client_send(&c, req);
    /* While the upstream reads nothing: push what the path takes, without blocking. */
    while (elapsed_ms(&t0) < 1200 && sent < BIG) {
        size_t k = BIG - sent < (long)sizeof chunk ? (size_t)(BIG - sent) : sizeof chunk;
        ssize_t w = send(c.fd, chunk, k, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            sent += w;
        else
            usleep(5000);
        long rss = rss_kib(d.pid);
        peak = rss > peak ? rss : peak;
    }
    cr_assert_lt(sent, BIG, "all 50 MiB went in while the upstream read nothing");
    long taken = sent; /* what the path held while the upstream slept */
    /* Then the rest, as fast as it goes. */
    while (sent < BIG) {
        size_t k = BIG - sent < (long)sizeof chunk ? (size_t)(BIG - sent) : sizeof chunk;
        test_write_all(c.fd, chunk, k);
        sent += (long)k;
    }
    response r = read_final(&c, false, NULL);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert_eq(strtol(r.body, NULL, 10), BIG, "the upstream got %s bytes", r.body);
    response_free(&r);
    client_close(&c);
    fprintf(stderr, "slow_upstream_bounds_memory: VmRSS %ld KiB, peak +%ld KiB, %ld MiB taken in\n",
            base, peak - base, taken >> 20);
    cr_assert_lt(peak - base, RSS_SLACK_KIB,
                 "magpied grew by %ld KiB (from %ld) while its upstream read nothing", peak - base,
                 base);
    still_serves(d.http);
    pair_stop(&u, &d);
}
