/* Integration tests of magpied against hostile clients (daemon/server/conn.c, listener.c): peers
 * that do not read, read a byte at a time, trickle a body, or hold one listener's every slot. Each
 * test has the shape of the attack, on raw loopback sockets, and asserts that the daemon closes the
 * offender (within a generous watchdog, never how fast) and serves others meanwhile. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"

TestSuite(hostile, .fini = kill_leftover);

/* A connection whose receive buffer is small, so that a peer that does not read fills it. */
static int connect_small_rcvbuf(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    int v = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Send what the kernel takes of p[0..n) without blocking (the peer may stop reading). */
static size_t send_some(int fd, const char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    return done;
}

/* POST /echo with a 1 MiB body on fd, sent as far as the kernel takes it; the caller never reads
 * the echo, which then stalls on the daemon's side. */
static void post_echo_and_stall(int fd)
{
    enum { BODY = 1 << 20 };
    char *body = calloc(1, BODY);
    cr_assert_not_null(body);
    char head[128];
    int hn = snprintf(head, sizeof head,
                      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", BODY);
    test_write_all(fd, head, (size_t)hn);
    send_some(fd, body, BODY);
    free(body);
}

/* The value of one sample of GET /metrics, -1 when the daemon did not answer or lacks it. */
static long long metric(int port, const char *sample)
{
    int fd = test_connect(port);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    static char text[1 << 17];
    read_some(fd, text, sizeof text, NULL, 0);
    close(fd);
    char needle[256];
    snprintf(needle, sizeof needle, "\n%s ", sample);
    const char *at = strstr(text, needle);
    return at ? strtoll(at + strlen(needle), NULL, 10) : -1;
}

/* Poll a metric until it reaches want (or the watchdog passes). */
static bool metric_reaches(int port, const char *sample, long long want, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 100) {
        if (metric(port, sample) >= want)
            return true;
        usleep(100000);
    }
    return false;
}

/* Whether the daemon closed fd (EOF or reset) within timeout_ms; reads and drops what comes. */
static bool closed_by_peer(int fd, int timeout_ms)
{
    char buf[65536];
    for (int waited = 0; waited <= timeout_ms; waited += 50) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) == 1) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0)
                return true;
        }
    }
    return false;
}

/* Every HTTP slot held by a client that posts a large body to /echo and never reads the echo:
 * without a send timeout they are held for ever and GET / is never answered. */
Test(hostile, http_peers_that_never_read_are_closed_by_the_send_timeout, .timeout = 90)
{
    const char *extra[] = {
        "--set", "limits.max_connections=3", "--set", "limits.send_timeout_ms=500",
        "--set", "limits.min_send_rate=0",   "--set", "limits.send_buffer=4096",
        NULL};
    daemon_proc d = start(extra);
    enum { N = 3, BODY = 1048576 };
    char *body = calloc(1, BODY);
    memset(body, 'x', BODY);
    char head[128];
    int hn = snprintf(head, sizeof head,
                      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", BODY);
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = connect_small_rcvbuf(d.http);
        test_write_all(fds[i], head, (size_t)hn);
        send_some(fds[i], body, BODY);
    }
    /* All three slots are held until the send timeout closes them; then this is served. */
    cr_assert_eq(http_status(d.http, "/"), 200, "GET / not answered while the slots are held");
    cr_assert(metric_reaches(d.http,
                             "magpied_connections_closed_total{listener=\"http\",reason=\"send_"
                             "timeout\"}",
                             N, 30000));
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(body);
    cr_assert_eq(stop(&d), 0);
}

/* An echo peer that sends and never reads: the echo stalls, and the send timeout closes it
 * (the idle timeout is off, so it is not what ends it). */
Test(hostile, echo_peer_that_never_reads_is_closed_by_the_send_timeout, .timeout = 60)
{
    const char *extra[] = {"--set", "limits.send_timeout_ms=300", "--set", "limits.min_send_rate=0",
                           "--set", "limits.send_buffer=4096",    "--set", "echo.idle_timeout_ms=0",
                           NULL};
    daemon_proc d = start(extra);
    int fd = connect_small_rcvbuf(d.echo);
    enum { DATA = 1 << 20 };
    char *data = calloc(1, DATA);
    cr_assert_gt(send_some(fd, data, DATA), 0);
    cr_assert(metric_reaches(
        d.http, "magpied_connections_closed_total{listener=\"echo\",reason=\"send_timeout\"}", 1,
        30000));
    cr_assert_eq(metric(d.http, "magpied_connections_open{listener=\"echo\"}"), 0);
    close(fd);
    free(data);
    cr_assert_eq(stop(&d), 0);
}

/* An echo peer that reads its echo a few bytes at a time: a write that averages under
 * min_send_rate after the grace closes it, although each byte keeps the send timeout away. */
Test(hostile, echo_reader_slower_than_min_send_rate_is_closed, .timeout = 90)
{
    const char *extra[] = {
        "--set", "limits.send_timeout_ms=0",     "--set", "limits.min_send_rate=100000",
        "--set", "limits.min_rate_grace_ms=500", "--set", "limits.send_buffer=4096",
        "--set", "echo.idle_timeout_ms=0",       NULL};
    daemon_proc d = start(extra);
    int fd = connect_small_rcvbuf(d.echo);
    enum { DATA = 1 << 20 };
    char *data = calloc(1, DATA);
    size_t sent = send_some(fd, data, DATA);
    cr_assert_gt(sent, 0);
    const char *sample =
        "magpied_connections_closed_total{listener=\"echo\",reason=\"min_send_rate\"}";
    bool closed = false;
    char ch[8];
    for (int i = 0; i < 300 && !closed; i++) { /* 8 bytes every 100 ms, for up to 30 s */
        if (read(fd, ch, sizeof ch) <= 0)
            break;
        usleep(100000);
        if (i % 5 == 4)
            closed = metric(d.http, sample) >= 1;
    }
    cr_assert(closed || metric_reaches(d.http, sample, 1, 5000),
              "a reader at 80 bytes/s kept its echo connection");
    close(fd);
    free(data);
    cr_assert_eq(stop(&d), 0);
}

/* The same for an HTTP response: a GET /metrics... too small; a streamed /echo body read a
 * byte at a time. */
Test(hostile, http_reader_slower_than_min_send_rate_is_closed, .timeout = 90)
{
    const char *extra[] = {
        "--set", "limits.send_timeout_ms=0",     "--set", "limits.min_send_rate=100000",
        "--set", "limits.min_rate_grace_ms=500", "--set", "limits.send_buffer=4096",
        NULL};
    daemon_proc d = start(extra);
    int fd = connect_small_rcvbuf(d.http);
    post_echo_and_stall(fd);
    const char *sample =
        "magpied_connections_closed_total{listener=\"http\",reason=\"min_send_rate\"}";
    bool closed = false;
    char ch[8];
    for (int i = 0; i < 300 && !closed; i++) {
        if (read(fd, ch, sizeof ch) <= 0)
            break;
        usleep(100000);
        if (i % 5 == 4)
            closed = metric(d.http, sample) >= 1;
    }
    cr_assert(closed || metric_reaches(d.http, sample, 1, 5000),
              "a reader at 80 bytes/s kept its HTTP connection");
    close(fd);
    cr_assert_eq(stop(&d), 0);
}

/* An HTTP connection's send limits are its settings generation's: a reload that turns the send
 * timeout on applies to a connection opened before it, from its next request (as the other
 * [limits] do), and a peer on it that stops reading is closed. */
Test(hostile, a_reloaded_send_timeout_reaches_an_open_connection_at_its_next_request, .timeout = 90)
{
    char dir[64];
    harness_dir_make(dir, sizeof dir, "hostile");
    char conf[128], err[128];
    snprintf(conf, sizeof conf, "%s", harness_path(dir, "magpied.conf"));
    snprintf(err, sizeof err, "%s", harness_path(dir, "error.log"));
    static const char base[] = "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
                               "[limits]\nmin_send_rate = 0\nsend_buffer = 4096\n";
    char text[256];
    snprintf(text, sizeof text, "%ssend_timeout_ms = 0\n", base);
    harness_write_file(conf, text);
    daemon_proc d = start_with(conf, NULL, err);
    int fd = connect_small_rcvbuf(d.http);
    const char *get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    test_write_all(fd, get, strlen(get));
    char resp[512];
    read_some(fd, resp, sizeof resp, "Hello, World!", 1); /* accepted, served, kept alive */

    snprintf(text, sizeof text, "%ssend_timeout_ms = 300\n", base);
    harness_write_file(conf, text);
    kill(d.pid, SIGHUP);
    const char *sample = "magpied_reloads_total{result=\"success\"}";
    cr_assert(metric_reaches(d.http, sample, 1, 10000), "the reload did not happen");

    post_echo_and_stall(fd);
    cr_assert(metric_reaches(d.http,
                             "magpied_connections_closed_total{listener=\"http\",reason=\"send_"
                             "timeout\"}",
                             1, 30000),
              "the connection from before the reload kept send_timeout_ms = 0");
    close(fd);
    cr_assert_eq(stop(&d), 0);
    harness_dir_remove(dir);
}

/* A body that trickles one byte every 200 ms (each pause far under body_timeout_ms) gets 408
 * once it averages under min_body_rate after the grace. */
Test(hostile, trickling_body_gets_408_from_min_body_rate, .timeout = 90)
{
    const char *extra[] = {"--set", "limits.min_body_rate=240", "--set",
                           "limits.min_rate_grace_ms=500", NULL};
    daemon_proc d = start(extra);
    int fd = test_connect(d.http);
    const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
    test_write_all(fd, head, strlen(head));
    char resp[4096];
    size_t got = 0;
    for (int i = 0; i < 150 && got == 0; i++) { /* up to 30 s */
        send(fd, "x", 1, MSG_NOSIGNAL);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 200) == 1) {
            ssize_t n = read(fd, resp, sizeof resp - 1);
            got = n > 0 ? (size_t)n : 0;
            resp[got] = 0;
            if (n <= 0)
                break;
        }
    }
    cr_assert_gt(got, 0, "no response to a trickling body");
    cr_assert(strncmp(resp, "HTTP/1.1 408 ", 13) == 0, "got: %s", resp);
    cr_assert(closed_by_peer(fd, 10000));
    /* magpied's close, and its count, come once the lingering close ends: at our close. */
    close(fd);
    const char *sample =
        "magpied_connections_closed_total{listener=\"http\",reason=\"min_body_rate\"}";
    cr_assert(metric_reaches(d.http, sample, 1, 10000), "no min_body_rate close counted");
    cr_assert_eq(metric(d.http, sample), 1);
    cr_assert_eq(stop(&d), 0);
}

/* Echo peers holding every echo slot do not lock HTTP out: each listener has its own budget,
 * and pausing one does not pause the other. */
Test(hostile, echo_slots_do_not_lock_out_http, .timeout = 60)
{
    const char *extra[] = {"--set", "echo.max_connections=2", "--set", "limits.max_connections=2",
                           "--set", "echo.idle_timeout_ms=0", NULL};
    daemon_proc d = start(extra);
    int a = test_connect(d.echo), b = test_connect(d.echo);
    test_write_all(a, "a", 1);
    test_write_all(b, "b", 1);
    char ch;
    cr_assert_eq(read(a, &ch, 1), 1);
    cr_assert_eq(read(b, &ch, 1), 1);
    int c = test_connect(d.echo); /* waits in the backlog: the echo budget is spent */
    test_write_all(c, "c", 1);
    struct pollfd pfd = {.fd = c, .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 300), 0, "a third echo connection was served over the limit");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(http_status(d.http, "/healthz"), 200);
    /* And the reverse: HTTP at its limit does not stop echo. */
    int h1 = test_connect(d.http), h2 = test_connect(d.http);
    close(a);
    cr_assert_eq(poll(&pfd, 1, 5000), 1, "echo not served once an echo connection closed");
    cr_assert_eq(read(c, &ch, 1), 1);
    close(h1);
    close(h2);
    close(b);
    close(c);
    cr_assert_eq(stop(&d), 0);
}

/* send_buffer bounds the kernel memory a connection that does not read can pin: the server
 * side of such a connection holds about 2 x send_buffer (the kernel doubles SO_SNDBUF), not
 * the megabytes tcp_wmem would let it grow to. Read from ss(8)'s skmem of the daemon's
 * socket. */
Test(hostile, send_buffer_bounds_what_a_stalled_reader_pins, .timeout = 60)
{
    const char *extra[] = {"--set", "limits.send_buffer=16384", "--set", "limits.send_timeout_ms=0",
                           "--set", "limits.min_send_rate=0",   NULL};
    daemon_proc d = start(extra);
    int fd = connect_small_rcvbuf(d.echo);
    enum { DATA = 4 << 20 };
    char *data = calloc(1, DATA);
    send_some(fd, data, DATA);
    usleep(500000);
    char cmd[256];
    /* tb: the socket's send buffer limit; t: bytes queued for sending. */
    snprintf(cmd, sizeof cmd,
             "ss -tmnH state established '( sport = :%d )' | grep -o 'tb[0-9]*' | head -1", d.echo);
    char *out = run(cmd);
    cr_assert(strncmp(out, "tb", 2) == 0, "ss said: %s", out);
    long tb = strtol(out + 2, NULL, 10);
    cr_assert_leq(tb, 2 * 16384 + 4096, "SO_SNDBUF not applied: tb%ld", tb);
    close(fd);
    free(data);
    cr_assert_eq(stop(&d), 0);
}

/* Idle keep-alive connections (a request answered, the next not begun) hold no read buffer:
 * only the connection scraping /metrics holds one. */
Test(hostile, idle_keepalive_connections_hold_no_read_buffer, .timeout = 60)
{
    daemon_proc d = start(NULL);
    enum { N = 32 };
    int fds[N];
    const char *req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    char resp[4096];
    for (int i = 0; i < N; i++) {
        fds[i] = test_connect(d.http);
        test_write_all(fds[i], req, strlen(req));
        cr_assert_gt(read_some(fds[i], resp, sizeof resp, "Hello, World!", 1), 0);
    }
    /* A task writes its response before it gives its buffer back: poll for that. */
    long long held = -1;
    for (int waited = 0; waited < 100 && held != 1; waited++) {
        held = metric(d.http, "magpie_tcp_read_buffers{state=\"in_use\"}");
        if (held != 1)
            usleep(50000);
    }
    cr_assert_eq(held, 1, "%lld read buffers held with %d idle connections open", held, N);
    cr_assert_leq(metric(d.http, "magpie_tcp_read_buffers{state=\"pooled\"}"), N + 1);
    /* They still serve their next request. */
    for (int i = 0; i < N; i++) {
        test_write_all(fds[i], req, strlen(req));
        cr_assert_gt(read_some(fds[i], resp, sizeof resp, "Hello, World!", 1), 0);
        cr_assert(strstr(resp, "200 OK") != NULL);
        close(fds[i]);
    }
    cr_assert_eq(stop(&d), 0);
}

/* The number of responses (status lines) in text. */
static int responses_in(const char *text)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, "HTTP/1.1 ")) != NULL; p++)
        n++;
    return n;
}

/* What an HTTP fuzzer found: a 400 about a path magpied cannot serve (above the root, a bad
 * escape) kept the connection, and the request pipelined behind it was answered. Every error
 * about a request not understood as sent ends the connection, as nginx's do: one response,
 * with Connection: close, then the close. */
Test(hostile, errors_about_the_request_end_the_connection, .timeout = 60)
{
    static const char *const reqs[] = {
        "GET /../../../../../../../../../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST /%%%%%%%% HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "4\r\nbody\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/2.0\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    static const char *const status[] = {"400", "400", "400", "400", "505"};
    daemon_proc d = start(NULL);
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        int fd = test_connect(d.http);
        test_write_all(fd, reqs[i], strlen(reqs[i]));
        char resp[8192];
        read_some(fd, resp, sizeof resp, NULL, 0); /* to the close */
        char want[32];
        snprintf(want, sizeof want, "HTTP/1.1 %s ", status[i]);
        cr_expect(strncmp(resp, want, strlen(want)) == 0, "%zu: %s", i, resp);
        cr_expect(strstr(resp, "\r\nConnection: close\r\n") != NULL, "%zu: %s", i, resp);
        cr_expect_eq(responses_in(resp), 1, "%zu: answered after the error: %s", i, resp);
        cr_expect(closed_by_peer(fd, 10000));
        close(fd);
    }
    /* A 404 about a request read whole keeps the connection. */
    int fd = test_connect(d.http);
    const char *two =
        "GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    test_write_all(fd, two, strlen(two));
    char resp[8192];
    read_some(fd, resp, sizeof resp, "\r\n\r\nok", 1);
    cr_expect(strncmp(resp, "HTTP/1.1 404 ", 13) == 0, "%s", resp);
    cr_expect(strstr(resp, "Connection: close") == NULL, "%s", resp);
    cr_expect_eq(responses_in(resp), 2, "%s", resp);
    close(fd);
    cr_assert_eq(stop(&d), 0);
}

/* Expect: 100-continue: a refused target gets its final status and no 100 (then the close:
 * the client may or may not send its body), and a client that sent the body with its head gets
 * no 100 either (RFC 9110 10.1.1); one that waits gets it. */
Test(hostile, expect_100_continue_only_to_a_client_that_waits_for_a_target_served, .timeout = 60)
{
    daemon_proc d = start(NULL);
    static const char *const refused[] = {
        "POST /nope HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        "PUT /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        "POST /../echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        "Content-Length: 999999999\r\n\r\n",
    };
    static const char *const status[] = {"404", "405", "400", "413"};
    char resp[8192];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        int fd = test_connect(d.http);
        test_write_all(fd, refused[i], strlen(refused[i]));
        read_some(fd, resp, sizeof resp, NULL, 0); /* to the close, without sending the body */
        char want[32];
        snprintf(want, sizeof want, "HTTP/1.1 %s ", status[i]);
        cr_expect(strncmp(resp, want, strlen(want)) == 0, "%zu: %s", i, resp);
        cr_expect(strstr(resp, "100 Continue") == NULL, "%zu: %s", i, resp);
        cr_expect(strstr(resp, "\r\nConnection: close\r\n") != NULL, "%zu: %s", i, resp);
        close(fd);
    }
    /* Head and body in one write: they arrive together, so no 100. */
    int fd = test_connect(d.http);
    const char *whole = "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                        "Content-Length: 5\r\n\r\nhello";
    test_write_all(fd, whole, strlen(whole));
    read_some(fd, resp, sizeof resp, "hello", 1);
    cr_expect(strncmp(resp, "HTTP/1.1 200 ", 13) == 0, "%s", resp);
    /* The head alone: the 100, then the body, then the echo. */
    const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                       "Content-Length: 5\r\n\r\n";
    test_write_all(fd, head, strlen(head));
    read_some(fd, resp, sizeof resp, "\r\n\r\n", 1);
    cr_expect_str_eq(resp, "HTTP/1.1 100 Continue\r\n\r\n");
    test_write_all(fd, "world", 5);
    read_some(fd, resp, sizeof resp, "world", 1);
    cr_expect(strncmp(resp, "HTTP/1.1 200 ", 13) == 0, "%s", resp);
    close(fd);
    cr_assert_eq(stop(&d), 0);
}

/* A connection to port from the loopback address from (127.0.0.x). */
static int connect_from(const char *from, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, from, &a.sin_addr), 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind %s", from);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    return fd;
}

/* One keep-alive GET / on fd: its status, or 0 when the connection closed instead. */
static int get_on(int fd)
{
    const char *req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0)
        return 0;
    char resp[4096];
    size_t n = read_some(fd, resp, sizeof resp, "Hello, World!", 1);
    int code = 0;
    return n > 0 && sscanf(resp, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

/* max_connections_per_client: a client with its share open has its next connection closed at
 * accept, while another client is served; a connection it closes makes room again. */
Test(hostile, one_client_cannot_take_every_slot, .timeout = 60)
{
    const char *extra[] = {"--set", "limits.max_connections_per_client=2", NULL};
    daemon_proc d = start(extra);
    int a = connect_from("127.0.0.1", d.http), b = connect_from("127.0.0.1", d.http);
    cr_assert_eq(get_on(a), 200);
    cr_assert_eq(get_on(b), 200);
    int c = connect_from("127.0.0.1", d.http);
    cr_assert(closed_by_peer(c, 5000), "a third connection of one client was kept");
    close(c);
    int other = connect_from("127.0.0.2", d.http);
    cr_assert_eq(get_on(other), 200, "another client is served");
    close(a);
    int code = 0;
    for (int i = 0; i < 100 && code != 200; i++) { /* the close is counted on the loop's side */
        int e = connect_from("127.0.0.1", d.http);
        code = get_on(e);
        close(e);
        if (code != 200)
            usleep(20000);
    }
    cr_assert_eq(code, 200, "a connection closed makes room for another");
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    test_write_all(other, req, strlen(req));
    static char text[1 << 17];
    read_some(other, text, sizeof text, "magpied_connections_refused_total{listener=\"echo\"}", 1);
    const char *at = strstr(text, "magpied_connections_refused_total{listener=\"http\"} ");
    cr_assert_not_null(at, "%s", text);
    cr_assert_geq(atoll(at + strlen("magpied_connections_refused_total{listener=\"http\"} ")), 1);
    close(b);
    close(other);
    cr_assert_eq(stop(&d), 0);
}

/* The RLIMIT_NOFILE under which pid can open `room` more descriptors: the limit bounds the
 * numbers, and a new descriptor takes the lowest free one, so it counts the free numbers. */
static rlim_t limit_leaving(pid_t pid, int room)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    static bool used[65536];
    memset(used, 0, sizeof used);
    DIR *dir = opendir(path);
    cr_assert_not_null(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd >= 0 && fd < 65536)
            used[fd] = true;
    }
    closedir(dir);
    int n = 0;
    for (int free_seen = 0; free_seen < room; n++)
        free_seen += !used[n];
    return (rlim_t)n;
}

/* utime + stime of pid, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* past the command's name, which may hold spaces */
    cr_assert_not_null(p);
    long utime = 0, stime = 0;
    cr_assert_eq(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime), 2);
    return utime + stime;
}

static bool echoed_within(int fd, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char ch;
    return poll(&pfd, 1, ms) == 1 && read(fd, &ch, 1) == 1;
}

/* Out of descriptors, accept4 fails while the peer stays queued and the listening socket
 * readable. The listener pauses rather than spin, says so once (not at each retry), and serves
 * the queued peers as descriptors come back (a connection's close). */
Test(hostile, out_of_descriptors_pauses_the_listener_then_serves_the_queue, .timeout = 60)
{
    char dir[64];
    harness_dir_make(dir, sizeof dir, "emfile");
    const char *err = harness_path(dir, "stderr");
    const char *extra[] = {"--set", "echo.idle_timeout_ms=0", NULL};
    daemon_proc d = start_with(NULL, extra, err);
    cr_assert_eq(http_status(d.http, "/healthz"), 200); /* every lazy descriptor made */
    struct rlimit lim = {.rlim_cur = limit_leaving(d.pid, 3)};
    lim.rlim_max = lim.rlim_cur;
    cr_assert_eq(prlimit(d.pid, RLIMIT_NOFILE, &lim, NULL), 0, "prlimit: %s", strerror(errno));
    /* Connections until one is not served: the limit (a descriptor the daemon held for a
     * moment when it was read, a sanitizer's say, may have come back since). */
    int served[10], nserved = 0, queued[2] = {-1, -1};
    while (queued[0] < 0) {
        cr_assert_lt(nserved, 10, "served past the descriptor limit");
        int fd = test_connect(d.echo); /* the kernel completes it, served or queued */
        test_write_all(fd, "s", 1);
        if (echoed_within(fd, 1000))
            served[nserved++] = fd;
        else
            queued[0] = fd;
    }
    cr_assert_geq(nserved, 1);
    queued[1] = test_connect(d.echo);
    test_write_all(queued[1], "q", 1);
    long before = cpu_ticks(d.pid);
    usleep(1000 * 1000);
    long spent = cpu_ticks(d.pid) - before;
    cr_assert_lt(spent, sysconf(_SC_CLK_TCK) / 4, "%ld ticks in a second while starved: a spin",
                 spent);
    for (int i = 0; i < 2; i++) {
        close(served[--nserved]); /* a descriptor back: the next queued peer is accepted */
        cr_assert(echoed_within(queued[i], 5000), "queued connection %d not served", i);
        served[nserved++] = queued[i];
    }
    FILE *f = fopen(err, "r");
    cr_assert_not_null(f);
    static char said[16384];
    said[fread(said, 1, sizeof said - 1, f)] = 0;
    fclose(f);
    int times = 0;
    for (const char *p = said; (p = strstr(p, "accept: Too many open files")) != NULL; p++)
        times++;
    cr_assert_eq(times, 1, "the starvation is said once, not at each retry:\n%s", said);
    while (nserved > 0)
        close(served[--nserved]);
    cr_assert_eq(stop(&d), 0);
    harness_dir_remove(dir);
}
