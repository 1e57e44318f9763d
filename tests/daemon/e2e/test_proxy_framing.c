/* End-to-end tests of what magpied's proxy handler forwards, byte for byte (the test upstream,
 * tests/daemon/e2e/upstream.c, echoes the request exactly as it arrived): hop-by-hop fields
 * removed both ways (RFC 9110 section 7.6.1), X-Forwarded-For appended, the Host choices, request
 * bodies re-framed, request shapes that could desynchronise an upstream (RFC 9112 sections 6.3
 * and 11.2) never reaching it, responses framed by chunks, trailers or the close, trailers
 * passed on, pipelining, and Upgrade tunnelled only where the route allows it (half-closes
 * passed through). */
#include <criterion/criterion.h>
#include <netinet/tcp.h>

#include "daemon/e2e/proxy_harness.h"

TestSuite(proxy_framing, .init = proxy_dir_make, .fini = proxy_dir_remove, .timeout = 60);

#define ROUTES                                                                                     \
    "[upstream app]\nserver = 127.0.0.1:%d\nmax_fails = 0\n"                                       \
    "[route /ws]\nhandler = proxy\nupstream = app\nwebsocket = on\n"                               \
    "[route /literal]\nhandler = proxy\nupstream = app\nhost = backend.example\n"                  \
    "[route /uphost]\nhandler = proxy\nupstream = app\nhost = upstream\n"                          \
    "[route /fwd]\nhandler = proxy\nupstream = app\nforwarded = on\nvia = on\n"                    \
    "[route /novia]\nhandler = proxy\nupstream = app\nvia = OFF\n"                                 \
    "[route /]\nhandler = proxy\nupstream = app\n"

/* The head the upstream received, from an echo body (which is head, then body). */
static const char *echoed_head(const response *r)
{
    static char head[32768];
    const char *e = strstr(r->body, "\r\n\r\n");
    cr_assert_not_null(e, "not an echo: %s %s", r->head, r->body);
    size_t n = (size_t)(e - r->body) + 4;
    cr_assert_lt(n, sizeof head);
    memcpy(head, r->body, n);
    head[n] = 0;
    return head;
}

static void expect_absent(const char *head, const char *const *names, const char *where)
{
    for (; *names; names++)
        cr_expect_eq(head_field(head, *names, NULL, 0), 0, "%s: %s passed on:\n%s", where, *names,
                     head);
}

Test(proxy_framing, hop_by_hop_fields_removed_both_ways)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    response r = ask(d.http, "GET /hop HTTP/1.1\r\nHost: x\r\nConnection: X-Secret, keep-alive\r\n"
                             "X-Secret: s\r\nKeep-Alive: timeout=9\r\nTE: trailers, deflate\r\n"
                             "Trailer: X-T\r\nUpgrade: h2c\r\nProxy-Authorization: Basic YTpi\r\n"
                             "Proxy-Connection: keep-alive\r\nX-End-To-End: kept\r\n\r\n");
    cr_assert_eq(r.status, 200, "%s", r.head);
    const char *up = echoed_head(&r);
    static const char *const gone[] = {"X-Secret", "Keep-Alive",       "Trailer",
                                       "Upgrade",  "Proxy-Connection", "Proxy-Authorization",
                                       NULL};
    expect_absent(up, gone, "to the upstream");
    char v[256];
    if (head_field(up, "TE", v, sizeof v) > 0) /* its own, "trailers" at most */
        cr_expect_str_eq(v, "trailers", "%s", up);
    if (head_field(up, "Connection", v, sizeof v) > 0)
        cr_expect(strcasestr(v, "x-secret") == NULL, "%s", up);
    cr_expect_eq(head_field(up, "X-End-To-End", NULL, 0), 1, "%s", up);
    response_free(&r);

    r = get(d.http, "/mode/hop");
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert_str_eq(r.body, "hello");
    static const char *const gone_back[] = {"X-Secret",         "Keep-Alive", "Upgrade",
                                            "Proxy-Connection", "TE",         NULL};
    expect_absent(r.head, gone_back, "to the client");
    /* Trailer is end-to-end (RFC 9110 6.6.2): it announces the trailers that follow. */
    cr_expect(head_field(r.head, "Trailer", v, sizeof v) == 1 && strcmp(v, "X-Tr") == 0, "%s",
              r.head);
    if (head_field(r.head, "Connection", v, sizeof v) > 0)
        cr_expect(strcasestr(v, "x-secret") == NULL, "%s", r.head);
    cr_expect_eq(head_field(r.head, "X-End-To-End", NULL, 0), 1, "%s", r.head);
    response_free(&r);
    pair_stop(&u, &d);
}

Test(proxy_framing, forwarding_fields_and_host)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    char v[256];
    response r = ask(d.http, "GET /a HTTP/1.1\r\nHost: client.example\r\nX-Forwarded-For: 10.0.0.1"
                             "\r\nX-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n"
                             "Connection: close\r\n\r\n");
    cr_assert_eq(r.status, 200, "%s", r.head);
    const char *up = echoed_head(&r);
    cr_expect_eq(head_field(up, "X-Forwarded-For", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "10.0.0.1, 127.0.0.1", "%s", up);
    cr_expect_eq(head_field(up, "X-Real-IP", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "127.0.0.1", "%s", up);
    cr_expect_eq(head_field(up, "X-Forwarded-Proto", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "http", "%s", up);
    cr_expect_eq(head_field(up, "Host", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "client.example", "%s", up);
    cr_expect_eq(head_field(up, "Forwarded", NULL, 0), 0, "forwarded is off: %s", up);
    /* via = request, the default (RFC 9110 7.6.3: a gateway adds it to what it forwards). */
    cr_expect_eq(head_field(up, "Via", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "1.1 magpied", "%s", up);
    cr_expect_eq(head_field(r.head, "Via", NULL, 0), 0, "a Via in the response: %s", r.head);
    response_free(&r);
    r = get(d.http, "/novia");
    up = echoed_head(&r);
    cr_expect_eq(head_field(up, "Via", NULL, 0), 0, "via is off: %s", up);
    response_free(&r);

    r = get(d.http, "/fwd");
    up = echoed_head(&r);
    cr_expect_eq(head_field(up, "X-Forwarded-For", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "127.0.0.1", "%s", up);
    cr_expect_eq(head_field(up, "Forwarded", v, sizeof v), 1, "%s", up);
    cr_expect(strstr(v, "for=127.0.0.1") != NULL || strstr(v, "for=\"127.0.0.1") != NULL, "%s", v);
    cr_expect_eq(head_field(up, "Via", v, sizeof v), 1, "%s", up);
    cr_expect(strncmp(v, "1.1 ", 4) == 0, "Via: %s", v);
    cr_expect_eq(head_field(r.head, "Via", v, sizeof v), 1, "via = on: %s", r.head);
    response_free(&r);

    r = get(d.http, "/literal");
    up = echoed_head(&r);
    cr_expect_eq(head_field(up, "Host", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, "backend.example");
    response_free(&r);
    r = get(d.http, "/uphost");
    up = echoed_head(&r);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", u.port);
    cr_expect_eq(head_field(up, "Host", v, sizeof v), 1, "%s", up);
    cr_expect_str_eq(v, want);
    response_free(&r);
    pair_stop(&u, &d);
}

/* The request target reaches the upstream as the client sent it, byte for byte (percent-encoding,
 * an encoded slash as GitLab's API and object stores use, dot segments and empty ones, the
 * query: decoding or normalising would change what the upstream reads; the decoded,
 * normalised path only picks the route), and an absolute-form target is sent in origin form
 * (RFC 9112 section 3.2). */
Test(proxy_framing, request_target_passed_as_sent)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    static const char *const targets[] = {
        "/a%41b/c%20d?x=%2F&y=1+2%26",
        "/api/v4/projects/group%2Fproject/files/a%2Fb.txt",
        "/a%2Fb",
        "/a%2f%2e%2e%2fb?%2F",
        "/x/../y//z/./w",
        "/%7Euser/%C3%A9?a=%00",
    };
    response r;
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        r = get(d.http, targets[i]);
        cr_assert_eq(r.status, 200, "%s: %s", targets[i], r.head);
        char want[256];
        snprintf(want, sizeof want, "GET %s HTTP/1.1\r\n", targets[i]);
        cr_expect(strncmp(r.body, want, strlen(want)) == 0, "%s", echoed_head(&r));
        response_free(&r);
    }
    /* Routed by the decoded path: /literal%2Fx takes /literal's route, as /literal/x would. */
    r = get(d.http, "/literal%2Fx");
    cr_assert_eq(r.status, 200, "%s", r.head);
    char v[256];
    cr_expect_eq(head_field(echoed_head(&r), "Host", v, sizeof v), 1);
    cr_expect_str_eq(v, "backend.example");
    response_free(&r);
    const char *want;
    r = ask(d.http, "GET http://client.example/abs?q=1 HTTP/1.1\r\nHost: client.example\r\n"
                    "Connection: close\r\n\r\n");
    cr_assert_eq(r.status, 200, "%s", r.head);
    want = "GET /abs?q=1 HTTP/1.1\r\n";
    cr_expect(strncmp(r.body, want, strlen(want)) == 0, "%s", echoed_head(&r));
    response_free(&r);
    pair_stop(&u, &d);
}

/* Request bodies arrive with exactly one framing, whatever the client used. */
Test(proxy_framing, request_bodies_reframed)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    static const char *const reqs[] = {
        "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
        "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
        "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        "0\r\n\r\n",
    };
    static const size_t lens[] = {11, 11, 0};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        response r = ask(d.http, reqs[i]);
        cr_assert_eq(r.status, 200, "%s", r.head);
        const char *up = echoed_head(&r);
        int te = head_field(up, "Transfer-Encoding", NULL, 0);
        int cl = head_field(up, "Content-Length", NULL, 0);
        cr_expect(te + cl <= 1, "two framings reached the upstream:\n%s", up);
        char v[32];
        head_field(r.head, "X-Body-Bytes", v, sizeof v);
        cr_expect_eq(strtoul(v, NULL, 10), lens[i], "%s", r.body);
        if (lens[i] > 0)
            cr_expect(te + cl == 1, "a body with no framing:\n%s", up);
        response_free(&r);
    }
    cr_assert_eq(stats_of(&u).bad, 0);
    pair_stop(&u, &d);
}

/* A chunked request body's trailers reach the upstream in its last chunk, less hop-by-hop
 * fields and those a trailer must not carry (RFC 9110 6.5.1), and the client's Trailer field
 * announces them; trailers past max_header_bytes are all dropped, the body still whole. */
Test(proxy_framing, request_trailers_passed_on)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    response r = ask(d.http, "POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                             "Trailer: X-Checksum, Server-Timing\r\nConnection: close\r\n\r\n"
                             "5\r\nhello\r\n0\r\nX-Checksum:  abc  \r\nContent-Length: 5\r\n"
                             "Host: evil\r\nKeep-Alive: 1\r\n"
                             "Authorization: Basic x\r\nServer-Timing: db;dur=53\r\n\r\n");
    cr_assert_eq(r.status, 200, "%s", r.head);
    const char *up = echoed_head(&r);
    cr_expect(strstr(up, "\r\nTrailer: X-Checksum, Server-Timing\r\n") != NULL, "%s", up);
    cr_expect(strstr(r.body, "5\r\nhello\r\n0\r\nX-Checksum: abc\r\n"
                             "Server-Timing: db;dur=53\r\n\r\n") != NULL,
              "the upstream got: %s", r.body);
    cr_expect(strstr(r.body, "evil") == NULL && strstr(r.body, "Basic x") == NULL &&
                  strstr(r.body, "Keep-Alive") == NULL,
              "forbidden trailers passed: %s", r.body);
    response_free(&r);
    /* No trailers: the last chunk alone, as before. */
    r = ask(d.http, "POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                    "Connection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n");
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_expect(strstr(r.body, "2\r\nhi\r\n0\r\n\r\n") != NULL, "%s", r.body);
    response_free(&r);
    /* Trailers that arrive a few bytes per read are kept whole. */
    client c = client_open(d.http);
    int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    client_send(&c, "POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                    "Connection: close\r\n\r\n2\r\nhi\r\n0\r\n");
    const char *tail = "X-Split:  one two \r\nX-Second: 2\r\n\r\n";
    for (size_t i = 0; i < strlen(tail); i += 3) {
        char piece[4] = {0};
        memcpy(piece, tail + i, strlen(tail) - i < 3 ? strlen(tail) - i : 3);
        usleep(2000);
        client_send(&c, piece);
    }
    r = read_response(&c, false);
    client_close(&c);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_expect(strstr(r.body, "0\r\nX-Split: one two\r\nX-Second: 2\r\n\r\n") != NULL, "%s", r.body);
    response_free(&r);
    /* Trailers past max_header_bytes (64 KiB by default): dropped, the body served. */
    static char big[80000];
    int n = snprintf(big, sizeof big,
                     "POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n2\r\nhi\r\n0\r\nX-Big: ");
    memset(big + n, 'b', 70000);
    snprintf(big + n + 70000, sizeof big - (size_t)n - 70000, "\r\nX-After: 1\r\n\r\n");
    r = ask(d.http, big);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_expect(strstr(r.body, "2\r\nhi\r\n0\r\n\r\n") != NULL, "%.200s", r.body);
    cr_expect(strstr(r.body, "X-After") == NULL, "%.200s", r.body);
    response_free(&r);
    cr_assert_eq(stats_of(&u).bad, 0);
    pair_stop(&u, &d);
}

/* Shapes a front end and a back end could read differently (RFC 9112 sections 6.3, 5.2, 2.2,
 * 7.1): each is refused (a 4xx) or closed without reaching the upstream. */
Test(proxy_framing, smuggling_shapes_never_reach_the_upstream)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    static const char *const shapes[] = {
        /* two different lengths */
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!",
        /* a length that is not a number */
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\nhello",
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\nhello",
        /* white space before the colon */
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello",
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
        /* a coding other than chunked last, or a chunked that is not quite */
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\x0b"
        "chunked\r\n\r\n0\r\n\r\n",
        /* a chunk size that overflows, or is not hex */
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "10000000000000001\r\nx\r\n0\r\n\r\n",
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        /* a chunk longer than its size says */
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n",
        /* a NUL, a CR alone inside a field */
        "GET /s HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n",
        "GET /s HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
        /* a request line with no version */
        "GET /s\r\nHost: x\r\n\r\n",
        /* no Host, and two */
        "GET /s HTTP/1.1\r\n\r\n",
        "GET /s HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    };
    /* the one with a NUL: its length */
    static const size_t lens[sizeof shapes / sizeof shapes[0]] = {[14] = 38};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        upstream_stats before = stats_of(&u);
        client c = client_open(d.http);
        test_write_all(c.fd, shapes[i], lens[i] ? lens[i] : strlen(shapes[i]));
        response r = read_response(&c, false);
        cr_expect(r.status == 0 || (r.status >= 400 && r.status < 500) || r.status == 501 ||
                      r.status == 505,
                  "shape %zu (%.60s...) got: %s %s", i, shapes[i], r.head, r.body);
        response_free(&r);
        client_close(&c);
        upstream_stats after = stats_of(&u);
        cr_expect_eq(after.requests, before.requests, "shape %zu reached the upstream", i);
        cr_expect_eq(after.bad, before.bad, "shape %zu reached the upstream as ambiguous", i);
        still_serves(d.http);
    }
    pair_stop(&u, &d);
}

/* The shapes RFC 9112 lets a server either refuse or repair: Content-Length with
 * Transfer-Encoding (section 6.1: chunked wins, and the connection closes after), obs-fold
 * (section 5.2: 400 or each fold replaced by a space), a bare LF (section 2.2: 400 or read as a
 * line end). Whatever magpied does, the upstream gets one framing and no fold or bare LF. */
Test(proxy_framing, ambiguous_shapes_refused_or_repaired)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    static const char *const shapes[] = {
        "POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\n",
        "POST /s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
        "0\r\n\r\n",
        "GET /s HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
        "GET /s HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n\tb\r\n\r\n",
        "GET /s HTTP/1.1\nHost: x\n\n",
        "GET /s HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
        /* two spaces in the request line (section 3: may be read on word boundaries) */
        "GET  /s HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        client c = client_open(d.http);
        client_send(&c, shapes[i]);
        response r = read_response(&c, false);
        cr_expect(r.status == 0 || r.status == 200 || (r.status >= 400 && r.status < 500),
                  "shape %zu got: %s", i, r.head);
        if (r.status == 200) {
            const char *up = echoed_head(&r);
            cr_expect(head_field(up, "Transfer-Encoding", NULL, 0) +
                              head_field(up, "Content-Length", NULL, 0) <=
                          1,
                      "shape %zu: two framings passed on:\n%s", i, up);
            cr_expect(strstr(up, "\r\n ") == NULL && strstr(up, "\r\n\t") == NULL,
                      "shape %zu: a fold passed on:\n%s", i, up);
            cr_expect(strncmp(up, "GET /s HTTP/1.1\r\n", 17) == 0 ||
                          strncmp(up, "POST /s HTTP/1.1\r\n", 18) == 0,
                      "shape %zu: the request line passed on as:\n%s", i, up);
            if (i < 2) /* RFC 9112 section 6.1: close after a request with both */
                cr_expect(client_closed(&c, 5000), "shape %zu: the connection stayed open", i);
        }
        response_free(&r);
        client_close(&c);
    }
    cr_assert_eq(stats_of(&u).bad, 0, "an ambiguous request reached the upstream");
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* Responses framed by chunks with an extension and a trailer, or by the close: the client
 * gets the body whole and framed so that it knows where it ends. */
Test(proxy_framing, response_framings)
{
    upstream_proc u;
    daemon_proc d;
    client c = pair_client(ROUTES, &u, &d, "GET /mode/chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    response r = read_final(&c, false, NULL);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert(r.complete);
    cr_assert_str_eq(r.body, "hello world");
    response_free(&r);
    client_send(&c, "GET /mode/eof?bytes=100000 HTTP/1.1\r\nHost: x\r\n\r\n");
    r = read_final(&c, false, NULL);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert(r.complete);
    cr_assert_eq(r.body_len, 100000);
    for (size_t i = 0; i < r.body_len; i++)
        cr_assert_eq(r.body[i], 'a' + (int)(i % 26), "byte %zu", i);
    bool framed = r.chunked || head_field(r.head, "Content-Length", NULL, 0) == 1;
    response_free(&r);
    if (framed) { /* the client connection goes on */
        client_send(&c, "GET /after-eof HTTP/1.1\r\nHost: x\r\n\r\n");
        r = read_final(&c, false, NULL);
        cr_assert(strstr(r.body, "GET /after-eof") != NULL, "%s %s", r.head, r.body);
        response_free(&r);
    }
    client_close(&c);
    pair_stop(&u, &d);
}

/* Trailers of a chunked response reach an HTTP/1.1 client, announced by the upstream's Trailer
 * field, less hop-by-hop fields and those a trailer must not carry (RFC 9110 section 6.5.1); an
 * HTTP/1.0 client's body has none. */
Test(proxy_framing, response_trailers_passed_on)
{
    upstream_proc u;
    daemon_proc d;
    client c = pair_client(ROUTES, &u, &d,
                           "GET /mode/trailers HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert(!client_closed(&c, 5000) || c.len != 0, "nothing came");
    const char *end = "\r\n5\r\nhello\r\n0\r\nX-Checksum: 5d41402a\r\n"
                      "Server-Timing: app;dur=7\r\n\r\n";
    cr_assert(c.len > strlen(end) && strcmp(c.buf + c.len - strlen(end), end) == 0, "%s", c.buf);
    cr_assert(strncmp(c.buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", c.buf);
    cr_assert_not_null(strstr(c.buf, "\r\nTrailer: X-Checksum, Server-Timing\r\n"), "%s", c.buf);
    client_close(&c);
    c = client_open(d.http);
    client_send(&c, "GET /mode/trailers HTTP/1.0\r\nHost: x\r\n\r\n");
    response r = read_response(&c, false);
    cr_assert_eq(r.status, 200, "%s", r.head);
    cr_assert(r.complete);
    cr_assert_str_eq(r.body, "hello");
    client_close(&c);
    response_free(&r);
    pair_stop(&u, &d);
}

/* Pipelined requests with bodies: each response in order, each to its own request. */
Test(proxy_framing, pipelined_requests_answered_in_order)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    client c = client_open(d.http);
    char all[4096] = "";
    for (int i = 0; i < 8; i++) {
        char one[256];
        snprintf(one, sizeof one,
                 "POST /p?token=t%d HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nb%03d", i, i);
        strcat(all, one);
    }
    client_send(&c, all);
    for (int i = 0; i < 8; i++) {
        response r = read_final(&c, false, NULL);
        char want[64];
        snprintf(want, sizeof want, "POST /p?token=t%d HTTP/1.1\r\n", i);
        cr_assert_eq(r.status, 200, "%s", r.head);
        cr_assert(strncmp(r.body, want, strlen(want)) == 0, "response %d: %s", i, r.body);
        snprintf(want, sizeof want, "\r\n\r\nb%03d", i);
        cr_assert(strstr(r.body, want) != NULL, "response %d: %s", i, r.body);
        response_free(&r);
    }
    client_close(&c);
    pair_stop(&u, &d);
}

/* The Upgrade request of a WebSocket client, to target %s. */
static const char *const upgrade_req =
    "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/* A client whose Upgrade request to target got its 101: the tunnel is open. */
static client tunnel_open(int port, const char *target)
{
    char text[512];
    client c = client_open(port);
    snprintf(text, sizeof text, upgrade_req, target);
    client_send(&c, text);
    response r = read_response(&c, false);
    cr_assert_eq(r.status, 101, "%s %s", r.head, r.body);
    response_free(&r);
    return c;
}

/* Upgrade: tunnelled (101, then raw bytes both ways) on a route with websocket = on. */
Test(proxy_framing, upgrade_tunnelled_where_allowed)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    client c = tunnel_open(d.http, "/ws/mode/upgrade");
    for (int i = 0; i < 3; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "raw bytes %d\r\n\r\n", i);
        client_send(&c, msg);
        while (strstr(c.buf, msg) == NULL)
            cr_assert(client_fill(&c, 5000), "no echo of %s through the tunnel", msg);
        client_take(&c, c.len);
    }
    client_close(&c);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* A half-close passes through the tunnel: the client sends its last bytes and shuts down its
 * sending side; the upstream sees the EOF, then still answers, and the client gets all of it,
 * then the EOF. */
Test(proxy_framing, upgrade_tunnel_passes_a_half_close_on)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    client c = tunnel_open(d.http, "/ws/mode/upgrade?linger_ms=200");
    client_send(&c, "last words\n");
    cr_assert_eq(shutdown(c.fd, SHUT_WR), 0);
    while (client_fill(&c, 5000)) {
    }
    cr_assert(c.eof, "the tunnel did not end: %s", c.buf);
    cr_assert_str_eq(c.buf, "last words\nBYE\n");
    client_close(&c);
    still_serves(d.http);
    pair_stop(&u, &d);
}

/* Elsewhere (websocket = off) the upstream never sees the Upgrade and the client never gets a
 * 101. */
Test(proxy_framing, upgrade_refused_elsewhere)
{
    upstream_proc u;
    daemon_proc d;
    pair_start(ROUTES, &u, &d);
    char text[512];
    client c = client_open(d.http);
    snprintf(text, sizeof text, upgrade_req, "/mode/upgrade");
    client_send(&c, text);
    response r = read_response(&c, false);
    cr_assert_neq(r.status, 101, "websocket = off, but a 101 came");
    if (r.status == 200)
        cr_assert(strstr(r.head, "X-Upgrade: none\r\n") != NULL, "%s", r.head);
    response_free(&r);
    client_close(&c);
    still_serves(d.http);
    pair_stop(&u, &d);
}
