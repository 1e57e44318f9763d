/* End-to-end tests of the proxy handler's back-pressure: magpied's memory stays bounded (its
 * VmRSS, read from /proc) while a client reads a 50 MiB response slowly, and while an upstream
 * does not read a 50 MiB request body; the bytes arrive whole once the slow side catches up.
 * Each run takes a couple of seconds: the slow phase lasts long enough for an unbounded proxy
 * to have buffered tens of MiB, not for the whole transfer to crawl. */
#include <criterion/criterion.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_flow, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 90);

#define BIG (50L << 20)

/* The pair on conf (its %d the upstream's port), warmed up (buffers and pools as they stay):
 * magpied's VmRSS then, the baseline. */
static long flow_start(const char *conf, upstream_proc *u, daemon_proc *d)
{
    pair_start(conf, u, d);
    for (int i = 0; i < 4; i++) {
        response r = get(d->http, "/mode/big?bytes=1048576");
        cr_assert_eq(r.status, 200, "%s", r.head);
        cr_assert_eq(r.body_len, 1048576);
        response_free(&r);
    }
    long base = rss_kib(d->pid);
    cr_assert_gt(base, 0);
    return base;
}

Test(proxy_flow, slow_client_bounds_memory)
{
    upstream_proc u;
    daemon_proc d;
    long base = flow_start("[upstream app]\nserver = 127.0.0.1:%d\nbuffer_bytes = 65536\n"
                           "read_timeout_ms = 30000\n"
                           "[route /]\nhandler = proxy\nupstream = app\n",
                           &u, &d);

    char req[128];
    snprintf(req, sizeof req, "GET /mode/big?bytes=%ld HTTP/1.1\r\nHost: x\r\n\r\n", BIG);
    slow_reader s;
    slow_open(&s, d.http, d.pid, base, req);
    /* Slow: 4 KiB every 10 ms for 1.5 s (~600 KiB of 50 MiB). The first read keeps the
     * head. */
    slow_read(&s, 0, 1500, 10000);
    const char *first = s.first;
    long got = s.got, peak = s.peak;
    cr_assert(strncmp(first, "HTTP/1.1 200 ", 13) == 0, "%.300s", first);
    const char *e = strstr(first, "\r\n\r\n");
    cr_assert_not_null(e, "a head over 4 KiB: %.300s", first);
    char v[32];
    cr_assert_eq(head_field(first, "Content-Length", v, sizeof v), 1, "%.300s", first);
    cr_assert_eq(strtol(v, NULL, 10), BIG, "%.300s", first);
    long want = (long)(e + 4 - first) + BIG;
    /* Then fast, to the last byte. */
    static char buf[1 << 16];
    while (got < want) {
        struct pollfd pfd = {.fd = s.fd, .events = POLLIN};
        cr_assert_eq(poll(&pfd, 1, 10000), 1, "the response stopped after %ld bytes", got);
        ssize_t n = read(s.fd, buf, sizeof buf);
        cr_assert_gt(n, 0, "closed after %ld of %ld bytes", got, want);
        got += n;
    }
    cr_assert_eq(got, want, "more bytes than the response");
    close(s.fd);
    fprintf(stderr, "slow_client_bounds_memory: VmRSS %ld KiB, peak +%ld KiB\n", base, peak - base);
    cr_assert_lt(peak - base, RSS_SLACK_KIB,
                 "magpied grew by %ld KiB (from %ld) while a client read slowly", peak - base,
                 base);
    still_serves(d.http);
    pair_stop(&u, &d);
}

Test(proxy_flow, slow_upstream_bounds_memory)
{
    upstream_proc u;
    daemon_proc d;
    long base = flow_start("[upstream app]\nserver = 127.0.0.1:%d\nsend_timeout_ms = 30000\n"
                           "read_timeout_ms = 30000\nheader_timeout_ms = 30000\n"
                           "[route /]\nhandler = proxy\nupstream = app\n",
                           &u, &d);

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

/* A response that leaves in pieces (half of it, then the rest 200 ms later) turns Nagle off on
 * the client's connection: with it on, each piece after the first would wait for the client's
 * delayed ACK of the one before (the events of an event stream, up to 40 ms late each). Read
 * off the daemon's own socket. */
Test(proxy_flow, a_response_in_pieces_turns_nagle_off)
{
    upstream_proc u;
    daemon_proc d;
    client c = pair_client("[upstream app]\nserver = 127.0.0.1:%d\n"
                           "[route /]\nhandler = proxy\nupstream = app\n",
                           &u, &d, "GET /mode/slowbody?ms=200 HTTP/1.1\r\nHost: x\r\n\r\n");
    response r = read_response(&c, false);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert(r.complete, "%s", r.head);
    response_free(&r);
    int v = daemon_nodelay(&d, c.fd);
    cr_assert_geq(v, 0, "the daemon's end of the connection was not found");
    cr_assert_eq(v, 1, "TCP_NODELAY is off after a response that came in pieces");
    client_close(&c);
    pair_stop(&u, &d);
}
