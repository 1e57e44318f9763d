/* End-to-end tests of the proxy over HTTP/2: magpied with h2c on its plaintext listener, a
 * proxy route to the test upstream (upstream.c, HTTP/1.1), driven with curl
 * (--http2-prior-knowledge), nghttp (a large POST, GOAWAY on reload) and a python3-h2 client
 * (h2_proxy_client.py: a slow upstream stream beside a fast one, a reader with a small
 * window, slow streams reset by the client while their upstream requests wait). What the upstream
 * gets is HTTP/1.1 (its echo shows the request it read); what the client gets is HTTP/2: the head
 * through the protocol's writer, no hop-by-hop fields, the body de-chunked into DATA frames. */
#include <criterion/criterion.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_h2, .init = proxy_dir_make, .fini = proxy_dir_remove);

static const char *src_dir(void)
{
    const char *pwd = getenv("PWD");
    return pwd != NULL ? pwd : ".";
}

/* magpied with h2c on, /app proxied to the upstream u. */
static daemon_proc h2_start(const upstream_proc *u, const char *extra)
{
    return proxy_start_h2("[upstream app]\nserver = 127.0.0.1:%d\n%s\n"
                          "[route /app]\nhandler = proxy\nupstream = app\n",
                          u->port, extra != NULL ? extra : "");
}

/* curl over h2c with prior knowledge; args before the URL. */
static const char *h2c(const daemon_proc *d, const char *args, const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && curl -sS --max-time 15 --http2-prior-knowledge %s "
             "'http://127.0.0.1:%d%s' 2>&1",
             proxy_dir, args, d->http, path);
    return run(cmd);
}

Test(proxy_h2, heads_bodies_and_statuses_over_h2c, .timeout = 90)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    /* The upstream reads HTTP/1.1: the client's :authority as Host, no body framing. */
    const char *echo = h2c(&d, "-H 'X-App: 1'", "/app/x?q=1");
    cr_assert(strstr(echo, "GET /app/x?q=1 HTTP/1.1\r\n") == echo, "%s", echo);
    cr_assert_not_null(strstr(echo, "\r\nHost: 127.0.0.1:"), "%s", echo);
    cr_assert_not_null(strstr(echo, "\r\nx-app: 1\r\n"), "HTTP/2's lower case: %s", echo);
    cr_assert_null(strstr(echo, "Transfer-Encoding"), "%s", echo);
    cr_assert_null(strstr(echo, "Content-Length"), "%s", echo);
    /* The head: HTTP/2, the upstream's fields lower-cased, no hop-by-hop ones. */
    const char *head = h2c(&d, "-D - -o /dev/null", "/app/mode/hop");
    cr_assert(strstr(head, "HTTP/2 200") == head, "%s", head);
    cr_assert_null(strcasestr(head, "\nconnection:"), "%s", head);
    cr_assert_null(strcasestr(head, "\nkeep-alive:"), "%s", head);
    cr_assert_null(strcasestr(head, "\ntransfer-encoding:"), "%s", head);
    cr_assert_null(strcasestr(head, "\nupgrade:"), "%s", head);
    cr_assert_null(strcasestr(head, "\nproxy-connection:"), "%s", head);
    cr_assert_null(strcasestr(head, "\nx-secret:"), "named by Connection: %s", head);
    cr_assert_not_null(strstr(head, "\nx-end-to-end: kept"), "%s", head);
    /* A chunked body de-chunked into DATA frames, its trailers in a HEADERS frame after it. */
    cr_assert_str_eq(h2c(&d, "", "/app/mode/chunked"), "hello world");
    cr_assert_str_eq(h2c(&d, "", "/app/mode/trailers"), "hello");
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "timeout 10 nghttp -v 'http://127.0.0.1:%d/app/mode/chunked' 2>&1 | "
             "grep -a -E 'x-tr|recv (DATA|HEADERS) frame'",
             d.http);
    /* nghttp prints a block's fields, then its frame: the trailer after the DATA frame. */
    const char *tr = run(cmd);
    const char *data = strstr(tr, "recv DATA frame");
    cr_assert(data != NULL && strstr(data, "recv (stream_id=13) x-tr: v\n"),
              "the trailer in a HEADERS frame after the body: %s", tr);
    /* Content-Length passed on when known; a close-delimited body ends the stream. */
    head = h2c(&d, "-D - -o /dev/null", "/app/mode/big?bytes=300000");
    cr_assert_not_null(strstr(head, "content-length: 300000"), "%s", head);
    cr_assert_str_eq(
        h2c(&d, "-o /dev/null -w '%{http_code} %{size_download}'", "/app/mode/big?bytes=3000000"),
        "200 3000000");
    cr_assert_str_eq(
        h2c(&d, "-o /dev/null -w '%{http_code} %{size_download}'", "/app/mode/eof?bytes=100000"),
        "200 100000");
    /* HEAD, 204 and 304: no body whatever the upstream sends. */
    head = h2c(&d, "-I", "/app/mode/headbody");
    cr_assert(strstr(head, "HTTP/2 200") == head && strstr(head, "content-length: 10"), "%s", head);
    cr_assert_str_eq(
        h2c(&d, "-o /dev/null -w '%{http_code} %{size_download}'", "/app/mode/status?code=204"),
        "204 0");
    cr_assert_str_eq(
        h2c(&d, "-o /dev/null -w '%{http_code} %{size_download}'", "/app/mode/status?code=304"),
        "304 0");
    /* Interim responses are relayed as HEADERS of their own (RFC 9113 8.1), hop-by-hop fields
     * removed, before the final one. */
    head = h2c(&d, "-D - -o /dev/null", "/app/mode/interim?codes=102,103");
    const char *early = strstr(head, "HTTP/2 103 ");
    cr_assert(strstr(head, "HTTP/2 102 ") == head && early != NULL, "%s", head);
    cr_assert(strstr(early, "link: </a.css>; rel=preload\r\n") != NULL, "%s", head);
    cr_assert(strstr(head, "x-hop") == NULL && strstr(head, "keep-alive") == NULL, "%s", head);
    cr_assert(strstr(early, "HTTP/2 200 ") != NULL, "%s", head);
    /* A client that waits for 100-continue gets magpied's at once, and the upstream's 100
     * (sent because of the body) is not a second one. */
    head = h2c(&d, "-D - -o /dev/null -H 'Expect: 100-continue' --expect100-timeout 30 -d hello",
               "/app/mode/interim?codes=100");
    cr_assert(strstr(head, "HTTP/2 100 ") == head, "%s", head);
    cr_assert(strstr(head + 1, "HTTP/2 100") == NULL && strstr(head, "HTTP/2 200 "), "%s", head);
    /* The connection served all of it; nothing was refused. */
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_code}'", "/metrics"), "200");
    cr_assert_eq(stats_of(&u).bad, 0);
    pair_stop(&u, &d);
}

/* A response whose only field is its length, on a route whose header rules add nothing: its
 * head has no field left to relay, and still goes (it once failed as out of memory, and the
 * stream was reset). Over HTTP/1.1 tests/daemon/e2e/test_proxy.c's header rules case. */
Test(proxy_h2, a_head_with_no_field_left_is_relayed, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = proxy_start_h2("[upstream app]\nserver = 127.0.0.1:%d\n"
                                   "[route /app]\nhandler = proxy\nupstream = app\n"
                                   "header_remove = X-End\n",
                                   u.port);
    cr_assert_str_eq(h2c(&d, "-w ' %{http_code}'", "/app/mode/big?bytes=26"),
                     "abcdefghijklmnopqrstuvwxyz 200");
    pair_stop(&u, &d);
}

Test(proxy_h2, request_bodies_go_up_streamed, .timeout = 90)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "head -c 3000000 /dev/urandom > '%s/body.bin'", proxy_dir);
    cr_assert_eq(system(cmd), 0);
    /* With Content-Length (curl sends it): passed on as such. */
    const char *head = h2c(&d, "--data-binary @body.bin -D - -o /dev/null", "/app/post");
    cr_assert(strstr(head, "HTTP/2 200") == head, "%s", head);
    cr_assert_not_null(strstr(head, "x-body-bytes: 3000000"), "%s", head);
    /* nghttp sends no Content-Length: chunked upstream, whole. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && timeout 30 nghttp -v -d body.bin 'http://127.0.0.1:%d/app/post2' 2>&1 "
             "| grep -a -i -E 'x-body-bytes|:status' | head -5",
             proxy_dir, d.http);
    const char *out = run(cmd);
    cr_assert_not_null(strstr(out, "x-body-bytes: 3000000"), "%s", out);
    /* A slow sink: the upstream reads nothing for 1 s; the body still goes whole. */
    head = h2c(&d, "--data-binary @body.bin -D - -o /dev/null", "/app/mode/sink?pause_ms=1000");
    cr_assert(strstr(head, "HTTP/2 200") == head, "%s", head);
    /* An answer before the body is all sent (413's shape): the client gets it, the rest of
     * its body is dropped, and the connection goes on. */
    cr_assert_str_eq(
        h2c(&d, "--data-binary @body.bin -w ' %{http_code}'", "/app/mode/early?linger_ms=200"),
        "early 413");
    cr_assert_str_eq(h2c(&d, "", "/app/mode/chunked"), "hello world");
    /* Pooled: ten requests, one connection each way at most. */
    long before = stats_of(&u).accepts;
    for (int i = 0; i < 10; i++)
        cr_assert_str_eq(h2c(&d, "", "/app/mode/chunked"), "hello world");
    cr_assert_leq(stats_of(&u).accepts - before, 2, "the keep-alive pool serves HTTP/2 too");
    cr_assert_eq(stats_of(&u).bad, 0);
    pair_stop(&u, &d);
}

/* Trailers both ways: an HTTP/2 request's go upstream in the last chunk of a chunked body
 * (also when it had a Content-Length and announced them), less those a trailer must not carry;
 * an upstream's chunked response trailers come back in a HEADERS frame that ends the stream,
 * filtered the same way. */
Test(proxy_h2, trailers_both_ways, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "timeout 25 /usr/bin/python3 %s/tests/daemon/e2e/h2_proxy_client.py %d trailers",
             src_dir(), d.http);
    const char *out = run(cmd);
    /* Content-Length 5 and a Trailer field: chunked upstream, the Trailer field with it. */
    const char *one = strstr(out, "echo 200\nPOST /app/post HTTP/1.1\r\n");
    cr_assert_not_null(one, "%s", out);
    const char *two = strstr(one + 1, "echo 200\nPOST /app/post HTTP/1.1\r\n");
    cr_assert_not_null(two, "%s", out);
    const char *tail = strstr(out, "\ntrailers ");
    cr_assert_not_null(tail, "%s", out);
    for (const char *e = one; e != NULL; e = e == one ? two : NULL) {
        const char *end = e == one ? two : tail;
        char echo[4096];
        size_t n = (size_t)(end - e) < sizeof echo - 1 ? (size_t)(end - e) : sizeof echo - 1;
        memcpy(echo, e, n);
        echo[n] = 0;
        cr_assert_not_null(strstr(echo, "\r\nTransfer-Encoding: chunked\r\n"), "%s", echo);
        cr_assert_null(strstr(echo, "Content-Length"), "%s", echo);
        cr_assert_not_null(strstr(echo, "0\r\nx-checksum: abc\r\nx-late: 1\r\n\r\n"),
                           "the trailers in the last chunk, filtered: %s", echo);
        cr_assert_null(strstr(echo, "Basic eDp5"), "%s", echo);
        cr_assert_null(strstr(echo, "evil"), "%s", echo);
    }
    cr_assert_not_null(strstr(one, "\r\ntrailer: x-checksum, x-late\r\n"), "%s", out);
    /* The upstream's: only the end-to-end ones, after "hello". */
    cr_assert_not_null(
        strstr(tail, "\ntrailers server-timing=app;dur=7 x-checksum=5d41402a\nstatus 200 hello\n"),
        "%s", out);
    cr_assert_eq(stats_of(&u).bad, 0);
    pair_stop(&u, &d);
}

Test(proxy_h2, upstream_failures_are_502_or_a_reset, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, "max_fails = 0\n");
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_code}'", "/app/mode/cut?at=none"), "502");
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_code}'", "/app/mode/reset?at=none"), "502");
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_code}'", "/app/mode/garbage?v=1"), "502");
    /* After the head: the stream is reset, the connection goes on. */
    const char *out = h2c(&d, "-o /dev/null", "/app/mode/cut?at=body");
    cr_assert(strstr(out, "INTERNAL_ERROR") || strstr(out, "stream") || strstr(out, "(92)"), "%s",
              out);
    cr_assert_str_eq(h2c(&d, "", "/app/mode/chunked"), "hello world");
    pair_stop(&u, &d);
}

Test(proxy_h2, a_slow_upstream_stream_holds_no_other_up, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "timeout 25 /usr/bin/python3 %s/tests/daemon/e2e/h2_proxy_client.py %d "
             "slow_and_fast",
             src_dir(), d.http);
    const char *out = run(cmd);
    cr_assert_not_null(strstr(out, "fast_first\n"), "%s", out);
    cr_assert_not_null(strstr(out, "slow 200 "), "%s", out);
    pair_stop(&u, &d);
}

/* magpied's connections to the upstream u, established (ss). */
static int upstream_conns(const upstream_proc *u)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ss -Htn state established '( dport = :%d )' | wc -l", u->port);
    return atoi(run(cmd));
}

/* A stream the client resets while its handler waits on the upstream: the handler is
 * cancelled and its upstream request ended with it (the connection closed, not left until the
 * upstream answers), while the client's connection stays open and is served. */
Test(proxy_h2, a_reset_stream_ends_its_upstream_request, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    char go[PATH_MAX], out[PATH_MAX], cmd[PATH_MAX * 2 + 300];
    snprintf(go, sizeof go, "%s/reset.go", proxy_dir);
    snprintf(out, sizeof out, "%s/reset.out", proxy_dir);
    snprintf(cmd, sizeof cmd,
             "(timeout 40 /usr/bin/python3 %s/tests/daemon/e2e/h2_proxy_client.py %d reset_slow "
             "20 '%s' > '%s' 2>&1 &)",
             src_dir(), d.http, go, out);
    cr_assert_eq(system(cmd), 0);
    int n = 0;
    for (int i = 0; i < 200 && n < 20; i++) {
        n = upstream_conns(&u);
        if (n < 20)
            usleep(50000);
    }
    cr_assert_eq(n, 20, "the 20 slow requests reached the upstream");
    harness_write_file(go, "go\n");
    cr_assert(file_has(out, "fast 200\n", 20000), "served after the resets");
    for (int i = 0; i < 200 && n > 1; i++) {
        n = upstream_conns(&u);
        if (n > 1)
            usleep(50000);
    }
    cr_assert_leq(n, 1,
                  "the reset streams' upstream connections closed (the fast one's may "
                  "stay in the pool): %d",
                  n);
    pair_stop(&u, &d);
}

Test(proxy_h2, a_slow_reader_holds_the_upstream_back, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    char cmd[512];
    /* 16 MB that the client takes 16 KiB at a time for 2 s: were it read ahead, magpied
     * would hold twice the bound below. */
    snprintf(cmd, sizeof cmd,
             "timeout 40 /usr/bin/python3 %s/tests/daemon/e2e/h2_proxy_client.py %d "
             "small_window %d 16000000",
             src_dir(), d.http, (int)d.pid);
    const char *out = run(cmd);
    long grew = -1;
    const char *g = strstr(out, "grew ");
    cr_assert_not_null(g, "%s", out);
    grew = atol(g + 5);
    cr_assert_lt(grew, 8192, "magpied grew %ld KiB while the reader held the body back", grew);
    cr_assert_not_null(strstr(out, "done 16000000 OK"), "%s", out);
    pair_stop(&u, &d);
}

Test(proxy_h2, reload_sends_goaway_and_finishes_the_stream, .timeout = 60)
{
    upstream_proc u = upstream_start(0);
    daemon_proc d = h2_start(&u, NULL);
    char cmd[1024];
    /* A stream in flight (the upstream answers after 1.5 s) when SIGHUP comes. (nghttp, not
     * python3-h2: h2 refuses frames that follow a GOAWAY it has read.) */
    snprintf(cmd, sizeof cmd,
             "(timeout 20 nghttp -v 'http://127.0.0.1:%d/app/mode/slowhead?ms=1500' > "
             "'%s/nghttp.out' 2>&1 &) ; sleep 0.4; kill -HUP %d",
             d.http, proxy_dir, (int)d.pid);
    cr_assert_eq(system(cmd), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/nghttp.out", proxy_dir);
    /* The drain's first GOAWAY (RFC 9113 6.8's notice, NO_ERROR, naming 2^31-1), at the
     * connection's next move (here the stream's answer); the stream (nghttp's first request is
     * stream 13) completes. nghttp closes once its one request is done, before the final
     * GOAWAY that the PING's ACK would bring. */
    cr_assert(file_has(path, "recv GOAWAY", 10000), "no GOAWAY after the reload");
    cr_assert(file_has(path, "last_stream_id=2147483647, error_code=NO_ERROR", 100));
    cr_assert(file_has(path, "recv (stream_id=13) :status: 200", 5000));
    cr_assert(file_has(path, "; END_STREAM", 5000), "the stream in flight finished");
    /* New connections are served under the new settings. */
    cr_assert_str_eq(h2c(&d, "", "/app/mode/chunked"), "hello world");
    pair_stop(&u, &d);
}
