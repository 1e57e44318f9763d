/* Tests for daemon/http/request.c and accounting.c without a wire protocol: each test builds an
 * md_http_req by hand, as a protocol would (HTTP/2 will, from a stream's fields), and drives
 * the request layer's steps (route, refusal, head, body, answer) and the handlers behind them.
 * Nothing here parses bytes: the handlers answer through request.h alone, and the responses
 * come out as the request layer writes them.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/metrics.h"
#include "http/compress.h"
#include "http/request_internal.h"
#include "http/response.h"
#include "http/routes.h"

#define T0   UINT64_C(1000000000000)
#define DATE "Date: Fri, 21 Nov 2025 08:37:00 GMT\r\nServer: magpied\r\n"

static time_t fixed_clock(void)
{
    return 1763714220;
}

/* The client every test's requests come from (md_http_server.peer_addr): a loopback address,
 * which the built-in /echo and /metrics let in; a test of the allow and deny rules sets
 * another. */
static uint32_t peer_ipv4 = 0x7f000001;

static int test_peer_addr(struct md_http_link *link, struct sockaddr_storage *out)
{
    (void)link;
    memset(out, 0, sizeof *out);
    struct sockaddr_in *in = (struct sockaddr_in *)out;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(peer_ipv4);
    return 0;
}

static md_http_server srv;
static md_outbuf out;

static void setup(void)
{
    memset(&srv, 0, sizeof srv);
    md_http_limits_default(&srv.limits);
    srv.clock = fixed_clock;
    srv.peer_addr = test_peer_addr;
    peer_ipv4 = 0x7f000001;
    md_outbuf_init(&out);
    md_http_date_refresh(fixed_clock);
}

static void teardown(void)
{
    md_outbuf_free(&out);
}

TestSuite(request, .init = setup, .fini = teardown, .timeout = 10);

/* A request as a protocol hands it over once its head is parsed. */
static md_http_req *req_new(unsigned method, unsigned minor, const char *target)
{
    md_http_req *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    md__http_req_init(r, &srv, NULL);
    md__http_req_enter(r, T0, &out);
    r->method = (uint8_t)method;
    r->method_done = true;
    r->http_major = 1;
    r->http_minor = (uint8_t)minor;
    r->keep_alive = true;
    r->start_ns = T0;
    size_t n = strlen(target);
    memcpy(r->target, target, n);
    r->target_len = (uint32_t)n;
    const char *q = strchr(target, '?');
    if (q != NULL) {
        r->path_done = true;
        r->path_len = (uint32_t)(q - target);
    }
    md__http_req_route(r);
    return r;
}

static void req_free(md_http_req *r)
{
    md__http_req_fini(r);
    free(r);
}

static void expect_out(const char *want)
{
    size_t have = md_outbuf_pending(&out);
    const char *p = md_outbuf_pending_data(&out);
    cr_assert(have == strlen(want) && memcmp(p, want, have) == 0, "got %.*s\nwant %s", (int)have, p,
              want);
    md_outbuf_consume(&out, have);
}

Test(request, a_handler_answers_a_request_no_protocol_parsed)
{
    md_http_req *r = req_new(MD_GET, 1, "/");
    cr_assert_not_null(r->route, "the built-in / route");
    cr_assert_eq(md__http_req_refusal(r), 0);
    cr_assert_not(md__http_req_wants_head(r), "text answers from on_req alone");
    cr_assert_eq(md__http_req_answer(r), MD_HANDLER_DONE);
    expect_out("HTTP/1.1 200 OK\r\n" DATE "Content-Type: text/plain\r\nContent-Length: 13\r\n\r\n"
               "Hello, World!");
    cr_assert_not(md_http_req_closes(r));
    req_free(r);
}

Test(request, the_path_is_decoded_and_normalised_for_the_route)
{
    md_http_req *r = req_new(MD_GET, 1, "http://example.com/a/..//healthz?x=1");
    size_t len;
    const char *path = md_http_req_path(r, &len);
    cr_assert_eq(len, 8);
    cr_assert_arr_eq(path, "/healthz", 8);
    cr_assert_not_null(r->route);
    cr_assert_eq(md__http_req_refusal(r), 0);
    req_free(r);

    r = req_new(MD_GET, 1, "/a%00b");
    cr_assert(r->path_bad);
    cr_assert_eq(md__http_req_refusal(r), 400);
    req_free(r);
}

Test(request, refusals_and_options_need_no_handler)
{
    md_http_req *r = req_new(MD_GET, 1, "/nothing-here");
    cr_assert_eq(md__http_req_refusal(r), 404);
    cr_assert_eq(md__http_req_answer(r), 0);
    expect_out("HTTP/1.1 404 Not Found\r\n" DATE "Content-Type: text/plain\r\n"
               "Content-Length: 10\r\n\r\nNot Found\n");
    cr_assert_not(md_http_req_closes(r), "404 keeps the connection");
    req_free(r);

    r = req_new(MD_POST, 1, "/");
    cr_assert_eq(md__http_req_refusal(r), 405);
    cr_assert_eq(md__http_req_answer(r), 0);
    cr_assert_not_null(strstr(md_outbuf_pending_data(&out), "\r\nAllow: GET, HEAD, OPTIONS\r\n"));
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);

    r = req_new(MD_OPTIONS, 1, "/");
    cr_assert_eq(md__http_req_answer(r), 0);
    cr_assert_eq(strncmp(md_outbuf_pending_data(&out), "HTTP/1.1 200 OK\r\n", 17), 0);
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);
}

Test(request, a_gathered_body_goes_back_to_the_echo_handler)
{
    md_http_req *r = req_new(MD_POST, 1, "/echo");
    cr_assert(md__http_req_wants_head(r));
    cr_assert_eq(md__http_req_head(r, 5, false), 0);
    cr_assert(r->collect, "echo gathers a short body");
    cr_assert_eq(md__http_req_body(r, "he", 2), 0);
    cr_assert_eq(md__http_req_body(r, "llo", 3), 0);
    cr_assert_eq(md__http_req_answer(r), 0);
    expect_out("HTTP/1.1 200 OK\r\n" DATE "Content-Type: application/octet-stream\r\n"
               "Content-Length: 5\r\n\r\nhello");
    req_free(r);
}

Test(request, head_and_http10_shape_the_response_not_the_handler)
{
    md_http_req *r = req_new(MD_HEAD, 1, "/");
    cr_assert(md_http_req_is_head(r));
    cr_assert_eq(md_http_respond(r, 200, "X-A: 1\r\n", "text/plain", "body", 4), 0);
    expect_out("HTTP/1.1 200 OK\r\n" DATE "X-A: 1\r\nContent-Type: text/plain\r\n"
               "Content-Length: 4\r\n\r\n");
    req_free(r);

    r = req_new(MD_GET, 0, "/");
    cr_assert_eq(md_http_req_version_minor(r), 0);
    cr_assert_eq(md_http_respond(r, 200, NULL, "text/plain", "x", 1), 0);
    expect_out("HTTP/1.1 200 OK\r\n" DATE "Connection: keep-alive\r\nContent-Type: text/plain\r\n"
               "Content-Length: 1\r\n\r\nx");
    req_free(r);
}

Test(request, a_status_that_closes_closes_whoever_answers)
{
    md_http_req *r = req_new(MD_GET, 1, "/");
    cr_assert_not(md_http_req_closes(r));
    cr_assert_eq(md_http_respond(r, 400, NULL, "text/plain", NULL, 0), 0);
    cr_assert(md_http_req_closes(r), "400 ends the connection");
    cr_assert_not_null(strstr(md_outbuf_pending_data(&out), "\r\nConnection: close\r\n"));
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);

    r = req_new(MD_GET, 1, "/");
    md_http_req_close_after(r);
    cr_assert(md_http_req_closes(r));
    req_free(r);
}

static int produce_fails(void *arg, md_outbuf *o)
{
    (void)arg;
    (void)md_outbuf_append(o, "partial", 7);
    return -EIO;
}

Test(request, a_failed_producer_is_a_500_and_a_close)
{
    md_http_req *r = req_new(MD_GET, 1, "/metrics");
    cr_assert_eq(md_http_respond_produced(r, "text/plain", produce_fails, NULL), 0);
    expect_out("HTTP/1.1 500 Internal Server Error\r\n" DATE "Connection: close\r\n"
               "Content-Type: text/plain\r\nContent-Length: 22\r\n\r\nInternal Server Error\n");
    cr_assert(md_http_req_closes(r));
    req_free(r);
}

static md_http_exchange logged;
static int logs;

static void record(void *arg, const struct md_http_link *link, const md_http_exchange *x)
{
    (void)arg;
    cr_assert_null(link, "the protocol's connection, passed through untouched");
    logged = *x;
    logs++;
}

Test(request, every_response_is_accounted_once)
{
    static md_metrics metrics;
    md_metrics *m = &metrics;
    md_metrics_init(m);
    srv.metrics = m;
    srv.access_log = record;
    logs = 0;
    md_http_req *r = req_new(MD_GET, 1, "/x?y");
    cr_assert_eq(md__http_req_answer(r), 0);
    cr_assert_eq(logs, 1);
    cr_assert_eq(logged.status, 404);
    cr_assert_eq(logged.method_len, 3);
    cr_assert_arr_eq(logged.method, "GET", 3);
    cr_assert_eq(logged.target_len, 4);
    cr_assert_eq(logged.http_minor, 1);
    cr_assert_eq(logged.body_bytes, 10);
    md_metrics_shard *s = md_metrics_local(m);
    cr_assert_eq(atomic_load_explicit(&s->responses[3], memory_order_relaxed), 1, "one 4xx");
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);
    srv.metrics = NULL;
}

/* A route's allow and deny rules answer 403 before its handler, its body and its methods: the
 * built-in /echo and /metrics let loopback clients in alone; a client whose address is not
 * known matches "all" alone. */
Test(request, a_client_the_rules_refuse_gets_403_before_anything_else)
{
    peer_ipv4 = 0x0a000001; /* 10.0.0.1 */
    md_http_req *r = req_new(MD_GET, 1, "/metrics");
    cr_assert_eq(md__http_req_refusal(r), 403);
    cr_assert_not(md__http_req_wants_head(r));
    cr_assert_eq(md__http_req_answer(r), 0);
    expect_out("HTTP/1.1 403 Forbidden\r\n" DATE "Content-Type: text/plain\r\n"
               "Content-Length: 10\r\n\r\nForbidden\n");
    cr_assert_not(md_http_req_closes(r), "403 keeps the connection");
    req_free(r);
    r = req_new(MD_DELETE, 1, "/echo");
    cr_assert_eq(md__http_req_refusal(r), 403, "403, not 405: nothing of the route is told");
    req_free(r);
    r = req_new(MD_GET, 1, "/healthz");
    cr_assert_eq(md__http_req_refusal(r), 0, "a route without rules lets everyone in");
    req_free(r);

    peer_ipv4 = 0x7f000002;
    r = req_new(MD_POST, 1, "/echo");
    cr_assert_eq(md__http_req_refusal(r), 0);
    req_free(r);
    srv.peer_addr = NULL;
    r = req_new(MD_POST, 1, "/echo");
    cr_assert_eq(md__http_req_refusal(r), 403);
    req_free(r);
}

/* Whether the pending output holds needle (it is not NUL-terminated). */
static const char *out_has(const char *needle)
{
    return memmem(md_outbuf_pending_data(&out), md_outbuf_pending(&out), needle, strlen(needle));
}

/* The filters around a handler that a route's keys add: auth_basic (401 with its challenge,
 * before the handler and before 405) and the header rules, on a table opened as a
 * generation's is. */
static md_route_table *filter_table(const char *users_file)
{
    static md_route_table t;
    memset(&t, 0, sizeof t);
    char msg[300];
    struct {
        const char *route, *key, *value;
    } keys[] = {
        {"/private", "handler", "text"},
        {"/private", "body", "secret"},
        {"/private", "auth_basic", "Staff"},
        {"/private", "auth_basic_user_file", users_file},
        {"/private", "header_add", "X-Private: yes"},
        {"/plain", "handler", "text"},
        {"/plain", "body", "hello"},
        {"/plain", "header_add", "X-Frame-Options: DENY"},
        {"/plain", "header_set", "Cache-Control: no-store"},
        {"= /plain/always", "handler", "text"},
        {"= /plain/always", "status", "404"},
        {"= /plain/always", "body", "gone"},
        {"= /plain/always", "header_add", "X-A: 1"},
        {"= /plain/always", "header_always", "on"},
        {"/go", "handler", "redirect"},
        {"/go", "location", "/there"},
        {"/go", "header_remove", "Location"},
    };
    const char *last = "";
    md_route *r = NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(keys[i].route, last) != 0) {
            if (r != NULL)
                cr_assert_eq(md_route_check(r, msg, sizeof msg), 0, "%s", msg);
            cr_assert_eq(md_routes_add(&t, keys[i].route, 1, msg, sizeof msg), 0, "%s", msg);
            r = &t.r[t.n - 1];
            last = keys[i].route;
        }
        cr_assert_eq(md_route_key(r, keys[i].key, keys[i].value, 2, msg, sizeof msg), 0, "%s: %s",
                     keys[i].key, msg);
    }
    cr_assert_eq(md_route_check(r, msg, sizeof msg), 0, "%s", msg);
    md_routes_prepare(&t);
    cr_assert_eq(md_routes_open(&t, msg, sizeof msg), 0, "%s", msg);
    return &t;
}

/* bob:pw as sha512-crypt (openssl passwd -6 -salt saltsalt pw). */
#define BOB_PW                                                                                     \
    "$6$saltsalt$pauPrmdmG4BTE9h2HPmywiw152IFch6BJCEsaY6D.PLTfpV8sqvXwWdyfsgVgozkYH9B80bAip/"      \
    "08R2BPH2xk/"

/* A users file with bob:pw in path (a mkstemp template). */
static void users_file(char *path)
{
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char line[] = "bob:" BOB_PW "\n";
    cr_assert_eq(write(fd, line, sizeof line - 1), (ssize_t)(sizeof line - 1));
    close(fd);
}

static md_http_req *req_auth(unsigned method, const char *target, const char *authorization)
{
    md_http_req *r = req_new(method, 1, target);
    if (authorization != NULL) {
        md__http_req_keep(r, MD_FIELD_AUTHORIZATION, authorization, strlen(authorization));
        md__http_req_route(r);
    }
    return r;
}

Test(request, auth_basic_refuses_with_401_and_its_challenge_and_lets_a_user_in)
{
    char path[] = "/tmp/md-users-XXXXXX";
    users_file(path);
    md_route_table *t = filter_table(path);
    srv.routes = t;

    md_http_req *r = req_auth(MD_GET, "/private/x", NULL);
    cr_assert_eq(md__http_req_refusal(r), 401);
    cr_assert_not(md__http_req_wants_head(r));
    cr_assert_eq(md__http_req_answer(r), 0);
    expect_out("HTTP/1.1 401 Unauthorized\r\n" DATE
               "WWW-Authenticate: Basic realm=\"Staff\", charset=\"UTF-8\"\r\n"
               "Content-Type: text/plain\r\nContent-Length: 13\r\n\r\nUnauthorized\n");
    cr_assert_not(md_http_req_closes(r), "401 keeps the connection");
    req_free(r);

    /* bob:wrong, then bob:pw (base64). */
    r = req_auth(MD_GET, "/private", "Basic Ym9iOndyb25n");
    cr_assert_eq(md__http_req_refusal(r), 401);
    req_free(r);
    r = req_auth(MD_DELETE, "/private", NULL);
    cr_assert_eq(md__http_req_refusal(r), 401, "401 before 405: nothing of the route is told");
    req_free(r);
    r = req_auth(MD_GET, "/private", "Basic Ym9iOnB3");
    cr_assert_eq(md__http_req_refusal(r), 0);
    cr_assert_eq(md__http_req_answer(r), 0);
    expect_out("HTTP/1.1 200 OK\r\n" DATE "X-Private: yes\r\n"
               "Content-Type: text/plain\r\nContent-Length: 6\r\n\r\nsecret");
    req_free(r);
    r = req_auth(MD_GET, "/plain", NULL);
    cr_assert_eq(md__http_req_refusal(r), 0, "another route asks nothing");
    req_free(r);

    /* A table that was not opened for serving has no users: nobody passes. */
    md_routes_close(t);
    r = req_auth(MD_GET, "/private", "Basic Ym9iOnB3");
    cr_assert_eq(md__http_req_refusal(r), 401);
    req_free(r);
    srv.routes = NULL;
    unlink(path);
}

Test(request, header_rules_change_the_routes_responses)
{
    char path[] = "/tmp/md-users-XXXXXX";
    users_file(path);
    md_route_table *t = filter_table(path);
    srv.routes = t;
    /* The canned path of a text route is left for the rules. */
    for (int i = 0; i < 2; i++) {
        md_http_req *r = req_auth(MD_GET, "/plain", NULL);
        cr_assert_eq(md__http_req_answer(r), 0);
        expect_out("HTTP/1.1 200 OK\r\n" DATE "X-Frame-Options: DENY\r\nCache-Control: no-store\r\n"
                   "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
        req_free(r);
    }
    /* Not on an error of the route, unless header_always. */
    md_http_req *r = req_auth(MD_POST, "/plain", NULL);
    cr_assert_eq(md__http_req_answer(r), 0);
    cr_assert_null(out_has("X-Frame-Options"));
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);
    r = req_auth(MD_GET, "/plain/always", NULL);
    cr_assert_eq(md__http_req_answer(r), 0);
    expect_out("HTTP/1.1 404 Not Found\r\n" DATE "X-A: 1\r\n"
               "Content-Type: text/plain\r\nContent-Length: 4\r\n\r\ngone");
    req_free(r);
    r = req_auth(MD_DELETE, "/plain/always", NULL);
    cr_assert_eq(md__http_req_answer(r), 0);
    cr_assert_not_null(out_has("\r\nX-A: 1\r\n"), "405 too");
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);
    /* A handler's own field removed. */
    r = req_auth(MD_GET, "/go", NULL);
    cr_assert_eq(md__http_req_answer(r), 0);
    cr_assert_null(out_has("Location"));
    md_outbuf_consume(&out, md_outbuf_pending(&out));
    req_free(r);
    md_routes_close(t);
    srv.routes = NULL;
    unlink(path);
}

/* A relayed response (a proxied one) over HTTP/1.x: the request layer writes the framing from
 * the length, the version and the status, and passes interim responses on where they may go. */
Test(request, a_relayed_response_is_framed_for_an_http1_client)
{
    md_http_req *r = req_new(MD_GET, 1, "/");
    cr_assert_eq(md_http_respond_interim(r, 103, "Early Hints", 11, "Link: </a>\r\n", 12), 0);
    expect_out("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n");
    cr_assert_eq(md_http_respond_interim(r, 100, "Continue", 8, NULL, 0), 0);
    expect_out("HTTP/1.1 100 Continue\r\n\r\n");
    cr_assert_eq(md_http_respond_relayed(r, 200, "OK", 2, "X-A: 1\r\n", 8, 3), 0);
    cr_assert_eq(md_http_relay_body(r, &out, "abc", 3), 0);
    cr_assert_eq(md_http_relay_end(r, &out, "X-T: 1\r\n", 8), 0);
    expect_out("HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 3\r\n\r\nabc"); /* no trailers */
    cr_assert_not(md_http_req_closes(r));
    req_free(r);

    /* Its length unknown: chunked, with the trailers in the last chunk; a 100 after magpied's
     * own is not a second one. */
    r = req_new(MD_GET, 1, "/");
    r->continued = true;
    cr_assert_eq(md_http_respond_interim(r, 100, "Continue", 8, NULL, 0), 0);
    cr_assert_eq(md_outbuf_pending(&out), 0);
    cr_assert_eq(md_http_respond_relayed(r, 200, NULL, 0, NULL, 0, MD_HTTP_LENGTH_UNKNOWN), 0);
    cr_assert_eq(md_http_relay_body(r, &out, "hello", 5), 0);
    cr_assert_eq(md_http_relay_body(r, &out, "", 0), 0);
    cr_assert_eq(md_http_relay_body(r, &out, "0123456789abcdefX", 17), 0);
    cr_assert_eq(md_http_relay_end(r, &out, "X-T: 1\r\n", 8), 0);
    expect_out("HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
               "11\r\n0123456789abcdefX\r\n0\r\nX-T: 1\r\n\r\n");
    cr_assert_not(md_http_req_closes(r));
    req_free(r);

    /* HTTP/1.0: no interim response, no chunks (the body ends with the connection), and
     * keep-alive said when the length is known. */
    r = req_new(MD_GET, 0, "/");
    cr_assert_eq(md_http_respond_interim(r, 103, "Early Hints", 11, NULL, 0), 0);
    cr_assert_eq(md_outbuf_pending(&out), 0);
    cr_assert_eq(
        md_http_respond_relayed(r, 101, "Switching Protocols", 19, NULL, 0, MD_HTTP_LENGTH_UNKNOWN),
        -EINVAL, "no upgrade from HTTP/1.0");
    cr_assert_eq(md_http_respond_relayed(r, 200, "OK", 2, NULL, 0, MD_HTTP_LENGTH_UNKNOWN), 0);
    cr_assert_eq(md_http_relay_body(r, &out, "abc", 3), 0);
    cr_assert_eq(md_http_relay_end(r, &out, "X-T: 1\r\n", 8), 0);
    expect_out("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc");
    cr_assert(md_http_req_closes(r));
    req_free(r);
    r = req_new(MD_GET, 0, "/");
    cr_assert_eq(md_http_respond_relayed(r, 200, "OK", 2, NULL, 0, 1), 0);
    expect_out("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n");
    req_free(r);

    /* HEAD, 204 and 304: the fields as they are, no framing of ours. */
    r = req_new(MD_HEAD, 1, "/");
    cr_assert_eq(md_http_respond_relayed(r, 200, "OK", 2, "Content-Length: 10\r\n", 20,
                                         MD_HTTP_LENGTH_UNKNOWN),
                 0);
    expect_out("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n");
    req_free(r);
    r = req_new(MD_GET, 1, "/");
    cr_assert_eq(md_http_respond_relayed(r, 304, "Not Modified", 12, "ETag: \"x\"\r\n", 11,
                                         MD_HTTP_LENGTH_UNKNOWN),
                 0);
    cr_assert_eq(md_http_relay_end(r, &out, NULL, 0), 0);
    expect_out("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n");
    req_free(r);

    /* A 101: Connection: upgrade, and nothing after the tunnel is HTTP. */
    r = req_new(MD_GET, 1, "/");
    cr_assert_eq(md_http_respond_relayed(r, 101, "Switching Protocols", 19, "Upgrade: ws\r\n", 13,
                                         MD_HTTP_LENGTH_UNKNOWN),
                 0);
    expect_out("HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\nConnection: upgrade\r\n\r\n");
    cr_assert(md_http_req_closes(r));
    req_free(r);

    /* A connection that ends after it says so. */
    r = req_new(MD_GET, 1, "/");
    md_http_req_close_after(r);
    cr_assert_eq(md_http_respond_relayed(r, 502, "Bad Gateway", 11, NULL, 0, 0), 0);
    expect_out("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    req_free(r);
}

/* Over a protocol that frames the body itself (HTTP/2's wire): the head and trailers go to the
 * wire, the body as it is, no interim response, no 101. */
static struct {
    unsigned relays, trailers, status;
    uint64_t length;
    char fields[256];
} wire_seen;

static int wire_relay(md_http_req *r, unsigned status, const char *fields, size_t fields_len,
                      uint64_t length)
{
    (void)r;
    wire_seen.relays++;
    wire_seen.status = status;
    wire_seen.length = length;
    snprintf(wire_seen.fields, sizeof wire_seen.fields, "%.*s", (int)fields_len, fields);
    return 0;
}

static int wire_trailers(md_http_req *r, const char *fields, size_t fields_len)
{
    (void)r;
    wire_seen.trailers++;
    snprintf(wire_seen.fields, sizeof wire_seen.fields, "%.*s", (int)fields_len, fields);
    return 0;
}

Test(request, a_relayed_response_goes_to_a_framing_wire_as_parts)
{
    static const md_http_wire wire = {.relay = wire_relay, .trailers = wire_trailers};
    memset(&wire_seen, 0, sizeof wire_seen);
    md_http_req *r = req_new(MD_GET, 1, "/");
    r->wire = &wire;
    cr_assert(md_http_req_frames_body(r));
    cr_assert_eq(md_http_respond_interim(r, 103, "Early Hints", 11, "Link: </a>\r\n", 12), 0);
    cr_assert_eq(
        md_http_respond_relayed(r, 101, "Switching Protocols", 19, NULL, 0, MD_HTTP_LENGTH_UNKNOWN),
        -EINVAL);
    cr_assert_eq(wire_seen.relays, 0);
    cr_assert_eq(md_http_respond_relayed(r, 200, "OK", 2, "X-A: 1\r\n", 8, MD_HTTP_LENGTH_UNKNOWN),
                 0);
    cr_assert_eq(wire_seen.relays, 1);
    cr_assert_eq(wire_seen.status, 200);
    cr_assert_eq(wire_seen.length, MD_HTTP_LENGTH_UNKNOWN);
    cr_assert_str_eq(wire_seen.fields, "X-A: 1\r\n");
    cr_assert_eq(md_http_relay_body(r, &out, "hello", 5), 0);
    expect_out("hello");
    cr_assert_eq(md_http_relay_end(r, &out, NULL, 0), 0);
    cr_assert_eq(wire_seen.trailers, 0, "none to send");
    cr_assert_eq(md_http_relay_end(r, &out, "X-T: 1\r\n", 8), 0);
    cr_assert_eq(wire_seen.trailers, 1);
    cr_assert_str_eq(wire_seen.fields, "X-T: 1\r\n");
    cr_assert_eq(md_outbuf_pending(&out), 0);
    r->wire = NULL;
    req_free(r);
}

/* The coding a relayed body may be coded in: the client's choice, none for HTTP/1.0. */
Test(request, the_accepted_coding_needs_a_framing_for_a_body_of_unknown_length)
{
    unsigned gz = 1u << MD_CODING_GZIP;
    md_http_req *r = req_new(MD_GET, 1, "/");
    md__http_req_keep(r, MD_FIELD_ACCEPT_ENCODING, "gzip, br", 8);
    cr_assert_eq(md_http_req_accept_coding(r, gz), MD_CODING_GZIP);
    cr_assert_eq(md_http_req_accept_coding(r, 1u << MD_CODING_ZSTD), MD_CODING_NONE);
    req_free(r);
    r = req_new(MD_GET, 0, "/");
    md__http_req_keep(r, MD_FIELD_ACCEPT_ENCODING, "gzip", 4);
    cr_assert_eq(md_http_req_accept_coding(r, gz), MD_CODING_NONE);
    req_free(r);
}
