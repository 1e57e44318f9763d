/* Tests for the handler interface (daemon/http/handler.h, implemented in request.c and http1.c): a
 * handler that answers later, polled through md_http_conn_resume() the way the connection task
 * does; pipelined requests behind it wait and are answered in order; a handler that fails half way
 * ends the response with a close; a connection closed while a response is pending cancels it;
 * and the redirect handler's Location. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "http/handler.h"
#include "http/routes.h"
#include "daemon/http_harness.h"

/* A pending response in three pieces: head, "abc", "def"; or an error after the head. */
struct slow {
    md_http_pending p;
    int step;
    int fail_at; /* step at which poll fails with -EIO; 0: never */
    int waits;   /* MD_PENDING_WAIT answers before the first piece */
    int cancelled;
    int polls;
};

static struct slow slow;

static int slow_poll(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                     md_outbuf *out)
{
    (void)cx; /* nothing to wait for in a sans-I/O test */
    (void)io;
    struct slow *s = (struct slow *)p;
    s->polls++;
    if (s->waits > 0) {
        s->waits--;
        return MD_PENDING_WAIT;
    }
    s->step++;
    if (s->step == s->fail_at)
        return -EIO;
    switch (s->step) {
    case 1:
        return md_http_respond_head(req, 200, "X-Slow: 1\r\n", "text/plain", 6) != 0
                   ? -ENOMEM
                   : MD_PENDING_MORE;
    case 2:
        return md_outbuf_append(out, "abc", 3) != 0 ? -ENOMEM : MD_PENDING_MORE;
    default:
        return md_outbuf_append(out, "def", 3) != 0 ? -ENOMEM : 0;
    }
}

static void slow_cancel(md_http_pending *p)
{
    ((struct slow *)p)->cancelled++;
}

static int slow_on_req(md_http_req *req, const md_route *r)
{
    (void)r; /* one route uses it */
    slow.p.poll = slow_poll;
    slow.p.cancel = slow_cancel;
    md_http_req_pend(req, &slow.p);
    return MD_HANDLER_PENDING;
}

static const md_handler slow_handler = {.name = "slow", .on_req = slow_on_req};

static md_route_table table;

static void routes_setup(void)
{
    server_setup();
    memset(&slow, 0, sizeof slow);
    memset(&table, 0, sizeof table);
    char msg[128];
    cr_assert_eq(md_routes_add(&table, " = /", 1, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[0], "handler", "text", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[0], "body", "Hello, World!", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_routes_add(&table, " /slow", 2, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[1], "handler", "text", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_routes_add(&table, " = /go", 3, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[2], "handler", "redirect", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[2], "status", "308", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[2], "location", "/there", 0, msg, sizeof msg), 0);
    md_routes_prepare(&table);
    table.r[1].handler = &slow_handler; /* a test's own handler on the interface */
    srv.routes = &table;
}

TestSuite(handler, .init = routes_setup, .timeout = 10);

static const char slow_resp[] = "HTTP/1.1 200 OK\r\n" DATE "X-Slow: 1\r\nContent-Type: "
                                "text/plain\r\nContent-Length: 6\r\n\r\n";

Test(handler, pending_response_is_polled_in_pieces_and_pipelining_waits)
{
    struct session s;
    session_open(&s);
    const char *in = "GET /slow/x HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    size_t first = strlen("GET /slow/x HTTP/1.1\r\nHost: a\r\n\r\n"), used = 0;
    int want = md_http_conn_feed(&s.c, T0, in, strlen(in), &used, &s.out);
    cr_assert_eq(want, MD_HTTP_WANT_HANDLER);
    cr_assert_eq(used, first, "parsing stops after the pending request");
    cr_assert_eq(md_http_conn_deadline(&s.c), UINT64_MAX, "a pending handler keeps its time");
    cr_assert_not(md_http_conn_idle(&s.c), "a pending request is in flight");
    expect_out(&s, "");

    slow.waits = 1;
    cr_assert_eq(md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out), MD_HTTP_WANT_WAIT);
    expect_out(&s, "");
    cr_assert_eq(md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out), MD_HTTP_WANT_HANDLER);
    expect_out(&s, slow_resp);
    cr_assert_eq(md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out), MD_HTTP_WANT_HANDLER);
    expect_out(&s, "abc");
    cr_assert_eq(md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out), MD_HTTP_WANT_READ);
    expect_out(&s, "def");
    cr_assert_eq(slow.polls, 4);

    /* The rest of the input: the request that waited behind it. */
    want = md_http_conn_feed(&s.c, T0, in + used, strlen(in) - used, &used, &s.out);
    cr_assert_eq(want, MD_HTTP_WANT_READ);
    struct sb b = {0};
    sb_hello(&b, NULL);
    expect_sb(&s, &b);
    cr_assert(md_http_conn_idle(&s.c));
    session_close(&s);
    cr_assert_eq(slow.cancelled, 0);
    expect_no_leaks();
}

Test(handler, failure_half_way_ends_the_response_with_a_close)
{
    struct session s;
    session_open(&s);
    slow.fail_at = 2;
    const char *in = "GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    size_t used;
    cr_assert_eq(md_http_conn_feed(&s.c, T0, in, strlen(in), &used, &s.out), MD_HTTP_WANT_HANDLER);
    cr_assert_eq(md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out), MD_HTTP_WANT_HANDLER);
    expect_out(&s, slow_resp);
    cr_assert_eq(md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out), MD_HTTP_WANT_CLOSE);
    expect_out(&s, ""); /* short of its Content-Length: the close tells the client */
    cr_assert_eq(md_http_conn_feed(&s.c, T0, in + used, strlen(in) - used, &used, &s.out),
                 MD_HTTP_WANT_CLOSE, "nothing more is parsed");
    session_close(&s);
    cr_assert_eq(slow.cancelled, 0, "a handler that ended is not cancelled");
    expect_no_leaks();
}

Test(handler, close_while_pending_cancels)
{
    struct session s;
    session_open(&s);
    cr_assert_eq(feed(&s, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"), MD_HTTP_WANT_HANDLER);
    session_close(&s);
    cr_assert_eq(slow.cancelled, 1);
    cr_assert_eq(slow.polls, 0);
    expect_no_leaks();
}

Test(handler, pending_response_that_closes)
{
    struct session s;
    session_open(&s);
    cr_assert_eq(feed(&s, "GET /slow HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
                 MD_HTTP_WANT_HANDLER);
    int want;
    while ((want = md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out)) == MD_HTTP_WANT_HANDLER)
        ;
    cr_assert_eq(want, MD_HTTP_WANT_CLOSE);
    char got[512];
    size_t n = md_outbuf_pending(&s.out);
    cr_assert_lt(n, sizeof got);
    memcpy(got, md_outbuf_pending_data(&s.out), n);
    got[n] = '\0';
    cr_assert(strstr(got, "Connection: close\r\n") != NULL, "%s", got);
    cr_assert(strstr(got, "\r\n\r\nabcdef") != NULL, "%s", got);
    md_outbuf_consume(&s.out, md_outbuf_pending(&s.out));
    session_close(&s);
    expect_no_leaks();
}

Test(handler, redirect_sends_its_location)
{
    struct session s;
    session_open(&s);
    feed(&s, "GET /go HTTP/1.1\r\nHost: a\r\n\r\n");
    const char *want = "HTTP/1.1 308 Permanent Redirect\r\n" DATE "Location: /there\r\n"
                       "Content-Type: text/plain\r\nContent-Length: 19\r\n\r\n"
                       "Permanent Redirect\n";
    expect_out(&s, want);
    session_close(&s);
    expect_no_leaks();
}

/* MD_BODY_PIPE: a handler that pends at the head and takes the body one span at a time. */
struct pipe {
    md_http_pending p;
    char got[256];
    size_t got_len;
    int spans;
    bool held;        /* a span not yet passed on */
    md_http_req *req; /* the request, from on_head */
};

static struct pipe pipe_h;

static int pipe_poll(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                     md_outbuf *out)
{
    (void)p; /* the one static instance */
    (void)cx;
    (void)io;
    (void)out;
    pipe_h.held = false;
    if (!md_http_req_body_done(req))
        return MD_PENDING_READ;
    return md_http_respond(req, 200, NULL, "text/plain", pipe_h.got, pipe_h.got_len) != 0 ? -ENOMEM
                                                                                          : 0;
}

static void pipe_cancel(md_http_pending *p)
{
    (void)p; /* nothing held */
}

static int pipe_on_head(md_http_req *req, const md_route *r, uint64_t length, bool chunked)
{
    (void)r; /* one route */
    (void)length;
    (void)chunked;
    pipe_h.p.poll = pipe_poll;
    pipe_h.p.cancel = pipe_cancel;
    pipe_h.req = req;
    md_http_req_pend(req, &pipe_h.p);
    return MD_BODY_PIPE;
}

static int pipe_on_body(md_http_req *req, const md_route *r, const char *at, size_t len)
{
    (void)req;
    (void)r;
    cr_assert_not(pipe_h.held, "a second span before the first was passed on");
    memcpy(pipe_h.got + pipe_h.got_len, at, len);
    pipe_h.got_len += len;
    pipe_h.spans++;
    pipe_h.held = true;
    return 0;
}

static int pipe_on_req(md_http_req *req, const md_route *r)
{
    (void)req;
    (void)r;
    cr_assert_fail("on_req is not called for a piped body");
    return 0;
}

static const md_handler pipe_handler = {
    .name = "pipe", .on_head = pipe_on_head, .on_body = pipe_on_body, .on_req = pipe_on_req};

Test(handler, piped_body_goes_span_by_span_with_back_pressure)
{
    memset(&pipe_h, 0, sizeof pipe_h);
    table.r[1].handler = &pipe_handler;
    table.r[1].methods |= UINT64_C(1) << MD_POST;
    struct session s;
    session_open(&s);
    const char *in = "POST /slow HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    size_t at = 0, used;
    int want = md_http_conn_feed(&s.c, T0, in, strlen(in), &used, &s.out);
    int rounds = 0;
    while (want != MD_HTTP_WANT_CLOSE && rounds++ < 20) {
        at += used;
        if (want == MD_HTTP_WANT_HANDLER) {
            cr_assert(pipe_h.held || md_http_req_body_done(pipe_h.req));
            want = md_http_conn_resume(&s.c, NULL, NULL, T0, &s.out);
            used = 0;
            continue;
        }
        cr_assert_eq(want, MD_HTTP_WANT_READ);
        if (at == strlen(in))
            break;
        want = md_http_conn_feed(&s.c, T0, in + at, strlen(in) - at, &used, &s.out);
    }
    cr_assert_eq(pipe_h.spans, 2, "one span per chunk, each passed on before the next");
    cr_assert_eq(pipe_h.got_len, 5);
    const char *out = md_outbuf_pending_data(&s.out);
    cr_assert_not_null(strstr(out, "\r\n\r\nabcde"), "%s", out);
    cr_assert_not_null(strstr(out, "Hello, World!"), "the pipelined request after it: %s", out);
    session_close(&s);
}
