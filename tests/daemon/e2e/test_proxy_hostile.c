/* End-to-end tests of magpied's proxy handler in front of upstreams that misbehave
 * (tests/daemon/e2e/upstream.c): garbage and oversized heads, connections cut or reset at each
 * point of a response, heads and bodies that come too late, a server that never accepts, bytes
 * after a complete response, bodies on bodiless responses, interim 1xx responses (endless ones
 * too). For each: the client gets the right status (502 before the response started, 504 for a
 * time-out before the head) or a clean close, never bytes meant for another request; magpied
 * serves the next request; and an upstream connection in doubt is never used again (the
 * upstream numbers its connections in X-Conn). */
#include <criterion/criterion.h>

#include <errno.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_hostile, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 60);

/* One upstream, tight time-outs, and no passive health (a failure here must not take the only
 * server out for the requests that follow). */
#define UPSTREAM_CONF                                                                              \
    "[upstream app]\nserver = 127.0.0.1:%d\nconnect_timeout_ms = 500\nread_timeout_ms = 1000\n"    \
    "header_timeout_ms = 1000\nmax_fails = 0\ntries = 1\n"                                         \
    "[route /]\nhandler = proxy\nupstream = app\n"

/* The failures magpied counted for the server on port for reason (magpied_upstream_failures_total).
 */
static long long failures(int http, int port, const char *reason)
{
    char sample[256];
    snprintf(
        sample, sizeof sample,
        "magpied_upstream_failures_total{upstream=\"app\",server=\"127.0.0.1:%d\",reason=\"%s\"}",
        port, reason);
    return proxy_metric(http, sample);
}

/* A response that was cut short: a 502 (nothing had gone to the client yet), or a response
 * that does not complete and a connection closed after it. Never a complete 200. */
static void expect_clean_failure(client *c, const char *what)
{
    response r = read_final(c, false, NULL);
    if (r.status == 502 || r.status == 504) {
        response_free(&r);
        return;
    }
    if (r.status == 0) {
        cr_assert(c->eof, "%s: neither a response nor a close", what);
        response_free(&r);
        return;
    }
    cr_assert(!r.complete, "%s: a complete %d response from a broken one: %s", what, r.status,
              r.head);
    cr_assert(client_closed(c, 5000), "%s: the connection stayed open after a short body", what);
    response_free(&r);
}

static void expect_status(int port, const char *path, int want)
{
    response r = get(port, path);
    cr_assert_eq(r.status, want, "GET %s: want %d, got: %s", path, want, r.head);
    response_free(&r);
}

Test(proxy_hostile, garbage_and_oversized_heads_are_502)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    for (int v = 0; v < 8; v++) {
        char path[64];
        snprintf(path, sizeof path, "/mode/garbage?v=%d", v);
        expect_status(d.http, path, 502);
        still_serves(d.http);
    }
    /* Over max_response_header_bytes (64 KiB): a 502, no part of the head passed on. */
    response r = get(d.http, "/mode/bighead?bytes=70000");
    cr_assert_eq(r.status, 502, "%.200s", r.head);
    cr_assert_eq(head_field(r.head, "X-Big", NULL, 0), 0);
    response_free(&r);
    r = get(d.http, "/mode/bighead?bytes=1000");
    cr_assert_eq(r.status, 200, "%.200s", r.head);
    cr_assert_eq(head_field(r.head, "X-Big", NULL, 0), 1);
    response_free(&r);
    still_serves(d.http);
    cr_expect_geq(failures(d.http, u.port, "bad_response"), 1);
    cr_expect_eq(failures(d.http, u.port, "header_too_big"), 1);
    pair_stop(&u, &d);
}

Test(proxy_hostile, cut_and_reset_responses_fail_cleanly)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    expect_status(d.http, "/mode/cut?at=none", 502);
    expect_status(d.http, "/mode/reset?at=none", 502);
    static const char *const cut[] = {"/mode/cut?at=head", "/mode/cut?at=body",
                                      "/mode/cut?at=chunk", "/mode/reset?at=body"};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        /* A keep-alive client: it must see the failure, not wait for the rest. */
        client c = client_open(d.http);
        char req[256];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", cut[i]);
        client_send(&c, req);
        expect_clean_failure(&c, cut[i]);
        client_close(&c);
        still_serves(d.http);
    }
    pair_stop(&u, &d);
}

/* A head that does not come within header_timeout_ms is a 504; a body that stops after the
 * head went out ends in a close. */
Test(proxy_hostile, slow_upstream_times_out)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    expect_status(d.http, "/mode/slowhead?ms=3000", 504);
    still_serves(d.http);
    cr_expect_eq(failures(d.http, u.port, "header_timeout"), 1);
    client c = client_open(d.http);
    client_send(&c, "GET /mode/slowbody?ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n");
    expect_clean_failure(&c, "a body stalled past read_timeout_ms");
    client_close(&c);
    /* Slow but within the time-outs: passed on whole. */
    response r = get(d.http, "/mode/slowhead?ms=200");
    cr_assert_eq(r.status, 200, "%s", r.head);
    response_free(&r);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* Refused: 502. Never accepted (the connect hangs): 504 or 502 within connect_timeout_ms
 * and some slack, never a hang. */
Test(proxy_hostile, refused_and_unaccepted_connects)
{
    upstream_proc u = upstream_start(0);
    int refused = free_port();
    daemon_proc d = proxy_start("[upstream app]\nserver = 127.0.0.1:%d\nconnect_timeout_ms = 300\n"
                                "max_fails = 0\ntries = 1\n"
                                "[upstream wedged]\nserver = 127.0.0.1:%d\n"
                                "connect_timeout_ms = 300\nmax_fails = 0\ntries = 1\n"
                                "[route /wedged]\nhandler = proxy\nupstream = wedged\n"
                                "[route /]\nhandler = proxy\nupstream = app\n",
                                refused, u.noaccept);
    expect_status(d.http, "/refused", 502);
    cr_expect_eq(failures(d.http, refused, "connect_refused"), 1);
    response r = get(d.http, "/wedged");
    cr_assert(r.status == 504 || r.status == 502, "a connect that hangs: %s", r.head);
    response_free(&r);
    r = get(d.http, "/wedged");
    cr_assert(r.status == 504 || r.status == 502, "a connect that hangs, again: %s", r.head);
    response_free(&r);
    pair_stop(&u, &d);
}

/* Every server down (passive health took both out, each after one connect that hung): 502
 * at once, without another connect (the connect time-outs counted in /metrics stay one per
 * server). A group of one server is never taken out (as nginx), hence two. */
Test(proxy_hostile, all_servers_down_is_502_at_once)
{
    upstream_proc u = upstream_start(0), v = upstream_start(0);
    daemon_proc d = proxy_start("[upstream app]\nserver = 127.0.0.1:%d\nserver = 127.0.0.1:%d\n"
                                "connect_timeout_ms = 300\nmax_fails = 1\n"
                                "fail_timeout_ms = 30000\ntries = 2\n"
                                "[route /]\nhandler = proxy\nupstream = app\n",
                                u.noaccept, v.noaccept);
    response r = get(d.http, "/first"); /* both tried, both time out */
    cr_assert(r.status == 504 || r.status == 502, "%s", r.head);
    response_free(&r);
    cr_assert_eq(failures(d.http, u.noaccept, "connect_timeout"), 1);
    cr_assert_eq(failures(d.http, v.noaccept, "connect_timeout"), 1);
    for (int i = 0; i < 3; i++)
        expect_status(d.http, "/again", 502);
    cr_assert_eq(failures(d.http, u.noaccept, "connect_timeout"), 1,
                 "a server that is down was tried");
    cr_assert_eq(failures(d.http, v.noaccept, "connect_timeout"), 1,
                 "a server that is down was tried");
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
    upstream_stop(&v);
}

/* The X-Conn of a response, 0 when it has none. */
static long conn_of(const response *r)
{
    char v[32];
    return head_field(r->head, "X-Conn", v, sizeof v) ? strtol(v, NULL, 10) : 0;
}

/* An upstream that sends a second, unrequested response after the first (at once, or a moment
 * later while the connection sits idle in the pool): the client gets the first only, and the
 * connection is never used again, so no later request gets the stray one. */
Test(proxy_hostile, extra_bytes_after_a_response_never_reach_a_client)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    static const char *const paths[] = {"/mode/extra", "/mode/extra?delay_ms=50"};
    for (int round = 0; round < 4; round++) {
        const char *path = paths[round % 2];
        client c = client_open(d.http);
        char req[256];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
        client_send(&c, req);
        response r = read_final(&c, false, NULL);
        cr_assert_eq(r.status, 200, "%s", r.head);
        cr_assert_str_eq(r.body, "ok");
        long bad_conn = conn_of(&r);
        response_free(&r);
        /* The stray response has been sent (and, on loopback, is in magpied's socket) before
         * the next request: a proxy cannot tell one that comes after it wrote a request from
         * that request's answer, but this one it can see before it reuses the connection. */
        for (int waited = 0; stats_of(&u).strays <= round; waited += 5) {
            cr_assert_lt(waited, 5000, "the upstream sent no stray response");
            usleep(5000);
        }
        /* The same client, and a new one: each gets its own echo on another connection. */
        client_send(&c, "GET /after?token=same-client HTTP/1.1\r\nHost: x\r\n\r\n");
        r = read_final(&c, false, NULL);
        cr_assert_eq(r.status, 200, "%s", r.head);
        cr_assert(strstr(r.body, "token=same-client") != NULL, "round %d (%s), got: %s %s", round,
                  path, r.head, r.body);
        cr_assert_neq(conn_of(&r), bad_conn, "the connection that sent extra bytes was reused");
        response_free(&r);
        cr_assert(strstr(c.buf, "SMUGGLED") == NULL);
        client_close(&c);
        r = get(d.http, "/after?token=other-client");
        cr_assert(strstr(r.body, "token=other-client") != NULL, "got: %s %s", r.head, r.body);
        cr_assert_neq(conn_of(&r), bad_conn, "the connection that sent extra bytes was reused");
        response_free(&r);
    }
    cr_assert_eq(stats_of(&u).bad, 0);
    pair_stop(&u, &d);
}

/* 204 and 304 end at their heads (RFC 9112 section 6.3), and so does any response to HEAD: the
 * body bytes an upstream sends anyway are not passed on, and its connection is not reused. */
Test(proxy_hostile, bodiless_responses_stay_bodiless)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    static const char *const reqs[] = {
        "GET /mode/status?code=204 HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /mode/status?code=304 HTTP/1.1\r\nHost: x\r\n\r\n",
        "HEAD /mode/headbody HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        client c = client_open(d.http);
        client_send(&c, reqs[i]);
        response r = read_final(&c, reqs[i][0] == 'H', NULL);
        cr_assert(r.status == 204 || r.status == 304 || r.status == 200, "%s", r.head);
        long bad_conn = conn_of(&r);
        response_free(&r);
        size_t before = c.len;
        client_fill(&c, 100);
        cr_assert_eq(c.len, before, "bytes after a bodiless response: %s", c.buf);
        if (c.eof) { /* closing the client's connection is clean too */
            client_close(&c);
            c = client_open(d.http);
        }
        client_send(&c, "GET /next?token=after-bodiless HTTP/1.1\r\nHost: x\r\n\r\n");
        r = read_final(&c, false, NULL);
        cr_assert_eq(r.status, 200, "%s: the next request got %s", reqs[i], r.head);
        cr_assert(strstr(r.body, "token=after-bodiless") != NULL, "%s", r.body);
        cr_assert_neq(conn_of(&r), bad_conn, "a connection that sent a stray body was reused");
        response_free(&r);
        client_close(&c);
    }
    /* A correct HEAD: the length of the GET, no body, the connection goes on. */
    client c = client_open(d.http);
    client_send(&c, "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /h HTTP/1.1\r\nHost: x\r\n\r\n");
    response h = read_final(&c, true, NULL);
    response g = read_final(&c, false, NULL);
    cr_assert_eq(h.status, 200, "%s", h.head);
    cr_assert_eq(g.status, 200, "%s", g.head);
    char hl[32], gl[32];
    cr_assert_eq(head_field(h.head, "Content-Length", hl, sizeof hl), 1);
    cr_assert_eq(head_field(g.head, "Content-Length", gl, sizeof gl), 1);
    /* The echo of HEAD is its request: one byte longer than GET's. */
    cr_assert_eq(strtol(hl, NULL, 10) + 0, strtol(gl, NULL, 10) + 1, "HEAD %s GET %s", hl, gl);
    response_free(&h);
    response_free(&g);
    client_close(&c);
    pair_stop(&u, &d);
}

/* 1xx before the final response (RFC 9110 section 15.2): an HTTP/1.1 client gets each, whole
 * and without hop-by-hop fields, then the final one; an HTTP/1.0 client never sees one. */
Test(proxy_hostile, interim_responses)
{
    upstream_proc u;
    daemon_proc d;
    client c = pair_client(UPSTREAM_CONF, &u, &d,
                           "GET /mode/interim?codes=100,102,103 HTTP/1.1\r\nHost: x\r\n\r\n");
    static const int want[] = {100, 102, 103, 200};
    response r;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        r = read_response(&c, false);
        cr_assert_eq(r.status, want[i], "response %zu: %s", i, r.head);
        if (i < 3)
            response_free(&r);
        if (want[i] != 103)
            continue;
        char link[128];
        cr_assert_eq(head_field(r.head, "Link", link, sizeof link), 1, "%s", r.head);
        cr_assert_str_eq(link, "</a.css>; rel=preload");
        static const char *const hop[] = {"Connection", "X-Hop", "Keep-Alive", "Content-Length",
                                          "Transfer-Encoding"};
        for (size_t k = 0; k < sizeof hop / sizeof hop[0]; k++)
            cr_assert_eq(head_field(r.head, hop[k], NULL, 0), 0, "%s passed on: %s", hop[k],
                         r.head);
    }
    cr_assert(strstr(r.body, "GET /mode/interim") != NULL, "%s", r.body);
    response_free(&r);
    client_send(&c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
    r = read_response(&c, false);
    cr_assert(strstr(r.body, "GET /next HTTP/1.1") != NULL, "%s", r.body);
    response_free(&r);
    client_close(&c);

    c = client_open(d.http);
    client_send(&c, "GET /mode/interim?codes=103,100 HTTP/1.0\r\nHost: x\r\n\r\n");
    r = read_response(&c, false);
    cr_assert_eq(r.status, 200, "an HTTP/1.0 client got: %s", r.head);
    response_free(&r);
    client_close(&c);

    /* Expect: 100-continue: magpied answers 100 before the body, and an upstream's 100 after
     * it is not passed on (never two); its 103 is. */
    c = client_open(d.http);
    client_send(&c, "POST /mode/interim?codes=100,103 HTTP/1.1\r\nHost: x\r\n"
                    "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    r = read_response(&c, false);
    cr_assert_eq(r.status, 100, "no 100 Continue before the body: %s", r.head);
    response_free(&r);
    client_send(&c, "hello");
    r = read_response(&c, false);
    cr_assert_eq(r.status, 103, "a second 100, or no 103: %s", r.head);
    response_free(&r);
    r = read_response(&c, false);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert(strstr(r.body, "\r\n\r\nhello") != NULL, "%s", r.body);
    response_free(&r);
    client_close(&c);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* An upstream that sends 1xx for ever: a bounded number reach the client, then 502. */
Test(proxy_hostile, endless_interim_responses_are_bounded)
{
    upstream_proc u;
    daemon_proc d;
    client c =
        pair_client(UPSTREAM_CONF, &u, &d, "GET /mode/endless1xx HTTP/1.1\r\nHost: x\r\n\r\n");
    int interim = -1;
    response r = read_final(&c, false, &interim);
    cr_assert_eq(r.status, 502, "%s", r.head);
    cr_assert_leq(interim, 32);
    response_free(&r);
    client_close(&c);
    cr_assert_geq(failures(d.http, u.port, "bad_response"), 1);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* A response that ends its connection (Connection: close, or HTTP/1.0 without keep-alive):
 * the upstream keeps the socket open and marks any later answer on it X-After-Close; no client
 * may get one (RFC 9112 section 9.6: nothing more is sent on such a connection). */
Test(proxy_hostile, connection_closed_by_the_response_is_not_reused)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    static const char *const paths[] = {"/mode/saysclose", "/mode/http10"};
    for (int round = 0; round < 4; round++) {
        client c = client_open(d.http);
        char req[256];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", paths[round % 2]);
        client_send(&c, req);
        response r = read_final(&c, false, NULL);
        cr_assert_eq(r.status, 200, "%s", r.head);
        cr_assert_str_eq(r.body, "ok");
        long closing = conn_of(&r);
        response_free(&r);
        if (c.eof || client_closed(&c, 0)) {
            client_close(&c);
            c = client_open(d.http);
        }
        for (int i = 0; i < 2; i++) {
            client_send(&c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
            r = read_final(&c, false, NULL);
            cr_assert_eq(r.status, 200, "%s", r.head);
            cr_assert_eq(head_field(r.head, "X-After-Close", NULL, 0), 0,
                         "%s: a connection the response closed was used again", paths[round % 2]);
            cr_assert_neq(conn_of(&r), closing);
            response_free(&r);
        }
        client_close(&c);
    }
    pair_stop(&u, &d);
}

/* A 101 to a request that asked for no upgrade: not a response to pass on (a 502, or a close),
 * and none of the bytes after it reaches the client. */
Test(proxy_hostile, unrequested_101_is_502)
{
    upstream_proc u;
    daemon_proc d;
    client c = pair_client(UPSTREAM_CONF, &u, &d, "GET /mode/force101 HTTP/1.1\r\nHost: x\r\n\r\n");
    response r = read_response(&c, false);
    cr_assert(r.status == 502 || (r.status == 0 && c.eof), "got: %s", r.head);
    response_free(&r);
    client_closed(&c, 1000);
    cr_assert(strstr(c.buf, "RAW-AFTER-101") == NULL, "%s", c.buf);
    client_close(&c);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* Send a body of `body` bytes after req until an answer comes or the body is all sent, never
 * blocking on a full socket; the final response. */
static response post_until_answered(client *c, const char *req, long body)
{
    client_send(c, req);
    static char chunk[1 << 16];
    memset(chunk, 'e', sizeof chunk);
    long sent = 0;
    while (sent < body && c->len == 0 && !c->eof) {
        size_t k = sizeof chunk < (size_t)(body - sent) ? sizeof chunk : (size_t)(body - sent);
        ssize_t w = send(c->fd, chunk, k, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            sent += w;
        else if (w < 0 && errno != EAGAIN)
            break; /* the other side closed: read what it said */
        else
            client_fill(c, 10);
    }
    return read_final(c, false, NULL);
}

/* POST a body of `body` bytes to path; the answer is the upstream's early 413, and magpied
 * serves the next request. */
static void expect_early(const char *path, long body)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    client c = client_open(d.http);
    char req[256];
    snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %ld\r\n\r\n", path,
             body);
    response r = post_until_answered(&c, req, body);
    cr_assert_eq(r.status, 413, "%s: %s", path, r.head);
    cr_assert_str_eq(r.body, "early");
    response_free(&r);
    client_close(&c);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* An upstream that answers before it has read the body (a 413, then close after reading and
 * dropping the rest): the client gets that answer, and magpied serves the next request. */
Test(proxy_hostile, early_response_reaches_the_client)
{
    expect_early("/mode/early", 4L << 20);
}

/* The same answer from an upstream that then reads nothing for 3 s before it closes: the proxy
 * watches the upstream connection while it sends the body (RFC 9112 section 9.5: a client
 * sending a body SHOULD monitor the connection for an error response) and passes the 413 on at
 * once; a proxy that reads only after sending the whole body would be stuck until the close,
 * and the reset that comes with it would destroy the answer (a 502). */
Test(proxy_hostile, early_response_from_a_stuck_upstream)
{
    expect_early("/mode/early?drain=0&linger_ms=3000", 32L << 20);
}

/* Responses a proxy may refuse or repair, never pass on as they are: Content-Length with
 * Transfer-Encoding (RFC 9112 section 6.3: chunked wins, and the connection must close after)
 * and obs-fold (section 5.2: a 502, or each fold replaced by spaces). The client gets one
 * framing and no fold; the upstream connection is not used again. */
Test(proxy_hostile, ambiguous_responses_refused_or_repaired)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(UPSTREAM_CONF, &u, &d);
    static const char *const paths[] = {"/mode/clte", "/mode/fold"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        client c = client_open(d.http);
        char req[128];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", paths[i]);
        client_send(&c, req);
        response r = read_final(&c, false, NULL);
        cr_assert(r.status == 502 || r.status == 200, "%s: %s", paths[i], r.head);
        long bad_conn = conn_of(&r);
        if (r.status == 200) {
            cr_assert_leq(head_field(r.head, "Content-Length", NULL, 0) +
                              head_field(r.head, "Transfer-Encoding", NULL, 0),
                          1, "%s: two framings passed on:\n%s", paths[i], r.head);
            cr_assert(strstr(r.head, "\r\n ") == NULL, "%s: a fold passed on:\n%s", paths[i],
                      r.head);
            cr_assert_str_eq(r.body, i == 0 ? "hello" : "ok", "%s", paths[i]);
        }
        response_free(&r);
        if (c.eof || client_closed(&c, 0)) {
            client_close(&c);
            c = client_open(d.http);
        }
        client_send(&c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
        r = read_final(&c, false, NULL);
        cr_assert_eq(r.status, 200, "%s", r.head);
        if (i == 0 && bad_conn != 0)
            cr_assert_neq(conn_of(&r), bad_conn, "the connection of a CL+TE response was reused");
        response_free(&r);
        client_close(&c);
    }
    pair_stop(&u, &d);
}
