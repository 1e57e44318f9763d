/* Tests for daemon/http/handlers/proxy/proxy_msg.c: the upstream request head (every hop-by-hop
 * case, the forwarding fields, Host, re-framing) and the response parser (garbage status lines, an
 * oversized head, 1xx, trailers kept or not, 204/304/HEAD, close-delimited bodies, bytes after
 * the response, compression) with the parts it hands its sink. The sink here writes them as
 * HTTP/1.1 text with response.h's writers, as the request layer does for an HTTP/1.1 client
 * (tests/daemon/http/test_request.c tests the rest of that: HTTP/1.0, a 100 already sent,
 * HTTP/2), or keeps them apart ("raw", as HTTP/2 takes them). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "http/handlers/proxy/proxy_msg.h"
#include "http/response.h"

static char *head(const char *target, const char *fields, md_proxy_req rq)
{
    static char text[8192];
    md_outbuf out = {0};
    rq.method = rq.method != NULL ? rq.method : "GET";
    rq.target = target;
    rq.target_len = strlen(target);
    rq.fields = fields;
    rq.fields_len = strlen(fields);
    if (rq.upstream_host == NULL)
        rq.upstream_host = "10.0.0.1:8080";
    cr_assert_eq(md_proxy_request_head(&rq, &out), 0);
    snprintf(text, sizeof text, "%.*s", (int)md_outbuf_pending(&out), md_outbuf_pending_data(&out));
    md_outbuf_free(&out);
    return text;
}

Test(proxy_msg, hop_by_hop_fields_never_go_upstream, .timeout = 5)
{
    const char *f = "Host: a.test\r\nConnection: keep-alive, X-Secret,x-other\r\n"
                    "X-Secret: 1\r\nX-Other: 2\r\nKeep-Alive: 300\r\nTE: trailers\r\n"
                    "Trailer: X-T\r\nTransfer-Encoding: chunked\r\nUpgrade: websocket\r\n"
                    "Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n"
                    "PROXY-Foo: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n"
                    "X-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n";
    char *h = head(
        "/p", f,
        (md_proxy_req){.peer = "192.0.2.1", .keepalive = true, .framing = MD_PROXY_BODY_CHUNKED});
    const char *gone[] = {
        "Connection", "X-Secret", "X-Other",        "Keep-Alive", "TE:",     "Upgrade",
        "Proxy-",     "PROXY-",   "Content-Length", "Expect",     "6.6.6.6", "https"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        cr_assert_null(strstr(h, gone[i]), "%s went upstream:\n%s", gone[i], h);
    /* Trailer stays with a chunked body: it announces the trailers of its last chunk. */
    cr_assert_str_eq(h, "GET /p HTTP/1.1\r\nHost: a.test\r\nTrailer: X-T\r\nAccept: */*\r\n"
                        "X-Forwarded-For: 192.0.2.1\r\nX-Real-IP: 192.0.2.1\r\n"
                        "X-Forwarded-Proto: http\r\nTransfer-Encoding: chunked\r\n\r\n");
    /* Not with a body framed otherwise, nor when Connection names it. */
    h = head("/p", "Host: a.test\r\nTrailer: X-T\r\n",
             (md_proxy_req){.peer = "192.0.2.1", .framing = MD_PROXY_BODY_LENGTH, .length = 3});
    cr_assert_null(strstr(h, "Trailer"), "%s", h);
    h = head("/p", "Host: a.test\r\nConnection: trailer\r\nTrailer: X-T\r\n",
             (md_proxy_req){.peer = "192.0.2.1", .framing = MD_PROXY_BODY_CHUNKED});
    cr_assert_null(strstr(h, "Trailer"), "%s", h);
    /* Any number of Connection fields, the names in any of them (past the four the parser
     * keeps at hand, it walks the head). */
    for (int k = 1; k <= 6; k++) {
        char many[512];
        int n = snprintf(many, sizeof many, "Host: a.test\r\nX-Named: 1\r\nX-Kept: 2\r\n");
        for (int i = 1; i < k; i++)
            n += snprintf(many + n, sizeof many - (size_t)n, "Connection: keep-alive\r\n");
        snprintf(many + n, sizeof many - (size_t)n, "Connection: close, x-named\r\n");
        h = head("/p", many, (md_proxy_req){.peer = "192.0.2.1"});
        cr_assert_null(strstr(h, "X-Named"), "%d Connection fields: %s", k, h);
        cr_assert_not_null(strstr(h, "\r\nX-Kept: 2\r\n"), "%d Connection fields: %s", k, h);
    }
}

/* A client's trailer fields as the upstream gets them: hop-by-hop and forbidden ones out. */
Test(proxy_msg, request_trailers_filtered, .timeout = 5)
{
    const char *t = "X-Checksum: abc\r\nContent-Length: 5\r\nHost: evil\r\nTE: trailers\r\n"
                    "Authorization: Basic x\r\nServer-Timing: db;dur=53\r\nCookie: c=1\r\n";
    char out[256];
    size_t n = md_proxy_trailers(out, t, strlen(t));
    cr_assert_leq(n, strlen(t));
    out[n] = '\0';
    cr_assert_str_eq(out, "X-Checksum: abc\r\nServer-Timing: db;dur=53\r\n");
    cr_assert_eq(md_proxy_trailers(out, "Host: x\r\n", 9), 0);
}

Test(proxy_msg, forwarding_fields_and_host, .timeout = 5)
{
    const char *f = "Host: a.test\r\nX-Forwarded-For: 10.1.1.1\r\nX-Forwarded-For: 10.2.2.2, "
                    "10.3.3.3\r\nForwarded: for=10.1.1.1\r\nVia: 1.0 other\r\n";
    char *h = head("/q?x=1", f,
                   (md_proxy_req){.peer = "::1",
                                  .forwarded = true,
                                  .via = true,
                                  .framing = MD_PROXY_BODY_LENGTH,
                                  .length = 12});
    cr_assert_not_null(strstr(h, "GET /q?x=1 HTTP/1.1\r\nHost: a.test\r\n"), "%s", h);
    cr_assert_not_null(strstr(h, "\r\nX-Forwarded-For: 10.1.1.1, 10.2.2.2, 10.3.3.3, ::1\r\n"),
                       "%s", h);
    cr_assert_not_null(strstr(h, "\r\nForwarded: for=10.1.1.1\r\n"), "%s", h);
    cr_assert_not_null(strstr(h, "\r\nForwarded: for=\"[::1]\";host=\"a.test\";proto=http\r\n"),
                       "%s", h);
    cr_assert_not_null(strstr(h, "\r\nVia: 1.0 other\r\nX-Forwarded-For"), "%s", h);
    cr_assert_not_null(strstr(h, "\r\nVia: 1.1 magpied\r\n"), "%s", h);
    cr_assert_not_null(strstr(h, "\r\nContent-Length: 12\r\nConnection: close\r\n\r\n"), "%s", h);
    /* host = upstream, a literal, and absolute-form */
    h = head("/", "Host: a.test\r\n", (md_proxy_req){.host = "10.0.0.1:8080", .keepalive = true});
    cr_assert_not_null(strstr(h, "\r\nHost: 10.0.0.1:8080\r\n"), "%s", h);
    h = head("http://b.test:81/x?y", "Host: a.test\r\n", (md_proxy_req){.keepalive = true});
    cr_assert_not_null(strstr(h, "GET /x?y HTTP/1.1\r\nHost: b.test:81\r\n"), "%s", h);
    h = head("/", "", (md_proxy_req){.keepalive = true});
    cr_assert_not_null(strstr(h, "\r\nHost: 10.0.0.1:8080\r\n"), "HTTP/1.0 without Host: %s", h);
}

/* Feeds the response in pieces of step bytes; the client's bytes in out. */
static int feed(md_proxy_resp *r, const char *text, size_t step, md_outbuf *out, size_t *left)
{
    size_t len = strlen(text), at = 0;
    int rc = MD_RESP_MORE;
    while (at < len) {
        size_t n = len - at < step ? len - at : step, used;
        rc = md_proxy_resp_feed(r, text + at, n, &used, out);
        at += used;
        if (rc != MD_RESP_MORE)
            break;
    }
    *left = len - at;
    return rc;
}

/* The sink: what it was handed, and the HTTP/1.1 text of it (not in raw mode). */
static struct sink_rec {
    bool head_req, raw, chunked;
    unsigned heads, ends;
    unsigned status;
    char fields[1024], trailers[1024];
    uint64_t length;
} rec;

static int rec_interim(void *arg, unsigned status, const char *reason, size_t rlen,
                       const char *fields, size_t len)
{
    (void)arg;
    return rec.raw ? 0 : md_http1_put_interim(arg, status, reason, rlen, fields, len);
}

static int rec_head(void *arg, unsigned status, const char *reason, size_t rlen, const char *fields,
                    size_t len, uint64_t length)
{
    rec.heads++;
    rec.status = status;
    rec.length = length;
    snprintf(rec.fields, sizeof rec.fields, "%.*s", (int)len, fields);
    md_http1_framing f = status == 101                                    ? MD_HTTP1_UPGRADE
                         : rec.head_req || status == 204 || status == 304 ? MD_HTTP1_NO_BODY
                         : length != MD_PROXY_LENGTH_UNKNOWN              ? MD_HTTP1_LENGTH
                                                                          : MD_HTTP1_CHUNKED;
    rec.chunked = f == MD_HTTP1_CHUNKED && !rec.raw;
    return rec.raw ? 0
                   : md_http1_put_relayed(arg, status, reason, rlen, fields, len, f, length, false,
                                          false);
}

static int rec_body(void *arg, md_outbuf *out, const char *data, size_t len)
{
    (void)arg;
    return rec.chunked ? md_http1_put_chunk(out, data, len) : md_outbuf_append(out, data, len);
}

static int rec_end(void *arg, md_outbuf *out, const char *trailers, size_t len)
{
    (void)arg;
    rec.ends++;
    snprintf(rec.trailers, sizeof rec.trailers, "%.*s", (int)len, trailers);
    return rec.chunked ? md_http1_put_last(out, trailers, len) : 0;
}

static const md_proxy_sink sink = {rec_interim, rec_head, rec_body, rec_end};

/* A parser onto the sink, whose head and interim text go to out. */
static void resp_init(md_proxy_resp *r, bool head_req, bool raw, md_outbuf *out)
{
    memset(&rec, 0, sizeof rec);
    rec.head_req = head_req;
    rec.raw = raw;
    md_proxy_resp_init(r, 1024, head_req, &sink, out);
}

static char client[65536];

static int run(const char *text, bool head_req, size_t step, size_t *left)
{
    md_proxy_resp r;
    md_outbuf out = {0};
    resp_init(&r, head_req, false, &out);
    size_t l;
    int rc = feed(&r, text, step, &out, &l);
    if (rc == MD_RESP_MORE && l == 0)
        rc = md_proxy_resp_eof(&r, &out);
    if (left != NULL)
        *left = l;
    snprintf(client, sizeof client, "%.*s", (int)md_outbuf_pending(&out),
             md_outbuf_pending_data(&out));
    md_outbuf_free(&out);
    md_proxy_resp_free(&r);
    return rc;
}

Test(proxy_msg, responses_by_length_chunks_and_close, .timeout = 5)
{
    for (size_t step = 1; step <= 64; step *= 4) {
        size_t left;
        cr_assert_eq(
            run("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello", false, step, &left),
            MD_RESP_DONE);
        cr_assert_str_eq(client, "HTTP/1.1 200 OK\r\nX-A: b\r\nContent-Length: 5\r\n\r\nhello");
        cr_assert_eq(rec.length, 5);
        cr_assert_eq(rec.ends, 1);
        cr_assert_eq(run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
                         "X-Trailer: t\r\n\r\n",
                         false, step, NULL),
                     MD_RESP_DONE);
        cr_assert_eq(rec.length, MD_PROXY_LENGTH_UNKNOWN);
        cr_assert_str_eq(rec.trailers, "X-Trailer: t\r\n");
        if (step == 64) /* smaller steps re-chunk per piece */
            cr_assert_str_eq(client, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n"
                                     "abc\r\n0\r\nX-Trailer: t\r\n\r\n");
        /* close-delimited: its length unknown to the sink, the end at the upstream's */
        cr_assert_eq(run("HTTP/1.1 200 OK\r\n\r\nuntil close", false, step, NULL), MD_RESP_DONE);
        cr_assert(strncmp(client, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 47) == 0,
                  "%s", client);
        cr_assert(strstr(client, "\r\n0\r\n\r\n") != NULL, "%s", client);
        cr_assert_eq(rec.ends, 1);
        if (step == 64)
            cr_assert_str_eq(client + 47, "b\r\nuntil close\r\n0\r\n\r\n");
    }
    md_proxy_resp r;
    md_outbuf out = {0};
    resp_init(&r, false, true, &out);
    size_t used;
    const char *t = "HTTP/1.0 200 OK\r\nServer: x\r\n\r\nbody";
    cr_assert_eq(md_proxy_resp_feed(&r, t, strlen(t), &used, &out), MD_RESP_MORE);
    cr_assert(r.close_delimited);
    cr_assert(!r.upstream_keepalive);
    cr_assert_eq(rec.ends, 0);
    cr_assert_eq(md_proxy_resp_eof(&r, &out), MD_RESP_DONE);
    cr_assert_eq(rec.ends, 1);
    cr_assert_str_eq(rec.fields, "Server: x\r\n");
    cr_assert_eq(md_outbuf_pending(&out), 4);
    md_outbuf_free(&out);
    md_proxy_resp_free(&r);
    /* HTTP/1.0 with Transfer-Encoding: de-chunked, but its framing is suspect (RFC 9112 6.1):
     * the upstream connection is not used again, whatever its Connection says. */
    out = (md_outbuf){0};
    resp_init(&r, false, true, &out);
    t = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
        "2\r\nok\r\n0\r\n\r\n";
    cr_assert_eq(md_proxy_resp_feed(&r, t, strlen(t), &used, &out), MD_RESP_DONE);
    cr_assert_eq(used, strlen(t));
    cr_assert(!r.upstream_keepalive);
    md_outbuf_free(&out);
    md_proxy_resp_free(&r);
}

Test(proxy_msg, bodiless_responses, .timeout = 5)
{
    size_t left;
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, 7, &left), MD_RESP_DONE);
    cr_assert_str_eq(client, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD keeps it");
    cr_assert_eq(run("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", false, 100, &left),
                 MD_RESP_DONE);
    cr_assert_str_eq(client, "HTTP/1.1 204 No Content\r\n\r\n");
    cr_assert_eq(run("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", false, 100, &left),
                 MD_RESP_DONE);
    cr_assert_str_eq(client, "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n");
}

/* Each 1xx but 101 goes to the sink whole, without hop-by-hop fields (whether a client gets it
 * is the request layer's: tests/daemon/http/test_request.c). */
Test(proxy_msg, interim_responses_passed_on, .timeout = 5)
{
    const char *text = "HTTP/1.1 100 Continue\r\n\r\n"
                       "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nConnection: X-Hop\r\n"
                       "X-Hop: 1\r\nKeep-Alive: 5\r\nContent-Length: 0\r\n\r\n"
                       "HTTP/1.1 199 Odd\r\nX: y\r\n\r\n"
                       "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    const char *hints = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                        "HTTP/1.1 199 Odd\r\nX: y\r\n\r\n"
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for (size_t step = 1; step <= 256; step *= 4) {
        size_t left;
        cr_assert_eq(run(text, false, step, &left), MD_RESP_DONE);
        cr_assert_eq(left, 0);
        cr_assert(strncmp(client, "HTTP/1.1 100 Continue\r\n\r\n", 25) == 0, "%s", client);
        cr_assert_str_eq(client + 25, hints, "step %zu", step);
        cr_assert_eq(rec.heads, 1);
    }
    cr_assert_eq(run("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", false, 100, NULL),
                 MD_RESP_GARBAGE, "101 without a tunnel asked for");
    /* One asked for: the head with its Upgrade, then the tunnel's bytes are not the parser's. */
    md_proxy_resp r;
    md_outbuf out = {0};
    resp_init(&r, false, false, &out);
    r.tunnel_ok = true;
    const char *up = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\nConnection: upgrade\r\n"
                     "\r\nframes";
    size_t used;
    cr_assert_eq(md_proxy_resp_feed(&r, up, strlen(up), &used, &out), MD_RESP_UPGRADE);
    cr_assert_eq(used, strlen(up) - 6);
    cr_assert_eq(rec.status, 101);
    cr_assert_str_eq(rec.fields, "Upgrade: ws\r\n");
    md_outbuf_free(&out);
    md_proxy_resp_free(&r);
}

/* n bytes of ch, NUL-terminated, in pad. */
static char *padding(char *pad, char ch, size_t n)
{
    memset(pad, ch, n);
    pad[n] = 0;
    return pad;
}

/* Each head has max_head (1024 here) of its own; an oversized interim one is TOO_BIG with none
 * of it passed on; more than MD_PROXY_MAX_INTERIM of them is GARBAGE. */
Test(proxy_msg, interim_responses_bounded, .timeout = 5)
{
    static char text[16384];
    char pad[1201];
    padding(pad, 'p', 900);
    snprintf(text, sizeof text,
             "HTTP/1.1 103 Early Hints\r\nX-P: %s\r\n\r\n"
             "HTTP/1.1 200 OK\r\nX-P: %s\r\nContent-Length: 0\r\n\r\n",
             pad, pad);
    cr_assert_eq(run(text, false, 100, NULL), MD_RESP_DONE, "two heads of 900 bytes");
    snprintf(text, sizeof text,
             "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
             "HTTP/1.1 103 Early Hints\r\nX-B: %s\r\n\r\n"
             "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
             padding(pad, 'b', 1200));
    for (size_t step = 7; step <= 7000; step *= 10) {
        cr_assert_eq(run(text, false, step, NULL), MD_RESP_TOO_BIG);
        cr_assert_str_eq(client, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
                         "nothing of the oversized head (step %zu)", step);
    }
    size_t n = 0;
    for (int i = 0; i < MD_PROXY_MAX_INTERIM; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "HTTP/1.1 102 Processing\r\n\r\n");
    snprintf(text + n, sizeof text - n, "HTTP/1.1 204 No Content\r\n\r\n");
    cr_assert_eq(run(text, false, 64, NULL), MD_RESP_DONE, "the most 1xx allowed");
    snprintf(text + n, sizeof text - n, "HTTP/1.1 102 Processing\r\n\r\n");
    cr_assert_eq(run(text, false, 64, NULL), MD_RESP_GARBAGE, "one 1xx too many");
}

/* Trailers go to the sink's end without hop-by-hop fields and those a trailer must not carry
 * (RFC 9110 6.5.1); trailers over max_head are dropped and the body still ends properly. */
Test(proxy_msg, trailers_passed_on_to_a_chunked_client, .timeout = 5)
{
    const char *text =
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n"
        "Connection: X-Named\r\n\r\n3\r\nabc\r\n0\r\n"
        "X-Sum: 900150983cd24fb0\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n"
        "Host: h\r\nAuthorization: a\r\nContent-Type: t\r\nContent-Encoding: gzip\r\n"
        "Trailer: x\r\nKeep-Alive: 1\r\nX-Named: n\r\nProxy-Foo: p\r\n"
        "Server-Timing: db;dur=53\r\n\r\n";
    const char *end = "\r\n0\r\nX-Sum: 900150983cd24fb0\r\nServer-Timing: db;dur=53\r\n\r\n";
    for (size_t step = 1; step <= 512; step *= 8) {
        cr_assert_eq(run(text, false, step, NULL), MD_RESP_DONE);
        size_t cl = strlen(client), el = strlen(end);
        cr_assert(cl > el && strcmp(client + cl - el, end) == 0, "step %zu: %s", step, client);
        /* Trailer is end-to-end (RFC 9110 6.6.2): the head announces what the end carries. */
        cr_assert(strncmp(client, "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\n", 33) == 0, "%s", client);
    }
    /* ... unless its Connection names it. */
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n"
                     "Connection: trailer\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n",
                     false, 100, NULL),
                 MD_RESP_DONE);
    cr_assert_null(strstr(client, "Trailer"), "%s", client);
    static char big[4096];
    char pad[1201];
    snprintf(big, sizeof big,
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
             "X-A: a\r\nX-Big: %s\r\nX-C: c\r\n\r\n",
             padding(pad, 't', 1200));
    cr_assert_eq(run(big, false, 100, NULL), MD_RESP_DONE);
    cr_assert_str_eq(client, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
                             "0\r\n\r\n");
    cr_assert_lt(
        run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nBad Name: x\r\n\r\n", false,
            100, NULL),
        0, "a malformed trailer");
}

Test(proxy_msg, garbage_and_oversized_heads, .timeout = 5)
{
    const char *garbage[] = {
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 X\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTX/1.1 200 OK\r\n\r\n",
        "SSH-2.0-OpenSSH\r\n\r\n",
        "HTTP/1.1 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nA: b\r\n: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        /* chunked last, but a coding under it magpied would strip unseen (RFC 9112 6.1) */
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        int rc = run(garbage[i], false, 3, NULL);
        cr_assert(rc < 0, "taken: %s", garbage[i]);
    }
    char big[4096];
    int n = snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nX: ");
    memset(big + n, 'a', 2000);
    strcpy(big + n + 2000, "\r\n\r\n");
    cr_assert_eq(run(big, false, 100, NULL), MD_RESP_TOO_BIG);
    cr_assert_str_eq(client, "", "nothing of an oversized head reaches the client");
    /* cut short */
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhalf", false, 100, NULL),
                 MD_RESP_GARBAGE);
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nContent-", false, 100, NULL), MD_RESP_GARBAGE);
}

Test(proxy_msg, bytes_after_the_response_are_not_its, .timeout = 5)
{
    size_t left;
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n", false,
                     1000, &left),
                 MD_RESP_DONE);
    cr_assert_eq(left, strlen("HTTP/1.1 200 OK\r\n\r\n"));
    cr_assert_eq(
        run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX", false, 1000, &left),
        MD_RESP_DONE);
    cr_assert_eq(left, 1);
}

Test(proxy_msg, response_hop_by_hop_fields_removed, .timeout = 5)
{
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nConnection: a\r\nConnection: b\r\nConnection: c\r\n"
                     "Connection: d\r\nConnection: e, x-e\r\nX-E: 1\r\nX-B: 2\r\n"
                     "Content-Length: 0\r\n\r\n",
                     false, 100, NULL),
                 MD_RESP_DONE);
    cr_assert_str_eq(client, "HTTP/1.1 200 OK\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n",
                     "named by a fifth Connection field");
    cr_assert_eq(run("HTTP/1.1 200 OK\r\nConnection: close, X-A\r\nX-A: 1\r\nKeep-Alive: t=5\r\n"
                     "Proxy-Authenticate: B\r\nTrailer: X\r\nUpgrade: y\r\nX-B: 2\r\n"
                     "Content-Length: 0\r\n\r\n",
                     false, 100, NULL),
                 MD_RESP_DONE);
    cr_assert_str_eq(client, "HTTP/1.1 200 OK\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n");
}

/* The parts apart (as HTTP/2 takes them): the final head's fields, the body de-chunked, the
 * trailers at the end. */
static int run_raw(const char *text, bool head_req, size_t step, md_outbuf *out)
{
    md_proxy_resp r;
    resp_init(&r, head_req, true, out);
    r.via = true;
    size_t left;
    int rc = feed(&r, text, step, out, &left);
    if (rc == MD_RESP_MORE)
        rc = md_proxy_resp_eof(&r, out);
    md_proxy_resp_free(&r);
    return rc;
}

Test(proxy_msg, the_sink_gets_the_head_apart_and_the_body_dechunked, .timeout = 5)
{
    static const size_t steps[] = {1, 7, 4096};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        md_outbuf out = {0};
        /* Chunked, with an interim response before, trailers after, hop-by-hop fields. */
        int rc = run_raw("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                         "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\n"
                         "Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n"
                         "Content-Type: text/x\r\n\r\n"
                         "5\r\nhello\r\n6\r\n world\r\n0\r\nX-Tr: t\r\n\r\n",
                         false, steps[i], &out);
        cr_assert_eq(rc, MD_RESP_DONE);
        cr_assert_eq(rec.heads, 1);
        cr_assert_eq(rec.status, 200);
        cr_assert_str_eq(rec.fields, "Content-Type: text/x\r\nVia: 1.1 magpied\r\n");
        cr_assert_eq(rec.length, MD_PROXY_LENGTH_UNKNOWN);
        cr_assert_eq(md_outbuf_pending(&out), 11);
        cr_assert_eq(memcmp(md_outbuf_pending_data(&out), "hello world", 11), 0);
        cr_assert_eq(rec.ends, 1);
        cr_assert_str_eq(rec.trailers, "X-Tr: t\r\n");
        md_outbuf_free(&out);
    }
    /* By length: the length given, the field not repeated. */
    md_outbuf out = {0};
    cr_assert_eq(run_raw("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", false, 2, &out),
                 MD_RESP_DONE);
    cr_assert_eq(rec.length, 3);
    cr_assert_str_eq(rec.fields, "Via: 1.1 magpied\r\n");
    cr_assert_eq(md_outbuf_pending(&out), 3);
    md_outbuf_free(&out);
    /* Close-delimited: the bytes as they come, done at the upstream's end. */
    cr_assert_eq(run_raw("HTTP/1.1 200 OK\r\n\r\nuntil the end", false, 5, &out), MD_RESP_DONE);
    cr_assert_eq(md_outbuf_pending(&out), 13);
    cr_assert_eq(rec.ends, 1);
    md_outbuf_free(&out);
    /* HEAD: Content-Length passed as a field, no body, the length unknown to the writer. */
    cr_assert_eq(run_raw("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true, 4, &out),
                 MD_RESP_DONE);
    cr_assert_str_eq(rec.fields, "Content-Length: 10\r\nVia: 1.1 magpied\r\n");
    cr_assert_eq(rec.length, MD_PROXY_LENGTH_UNKNOWN);
    cr_assert_eq(md_outbuf_pending(&out), 0);
    cr_assert_eq(rec.ends, 0, "no body, no end");
    md_outbuf_free(&out);
}

/* Compression on the fly (proxy_msg.h): text through a route's compress, fed a byte at a time
 * and whole. The coded body is chunked, its head says the coding and Vary, the ETag is weak,
 * the length and ranges are gone, and a response coded by the upstream is passed as it is. */
static int run_coded(const char *text, size_t step, bool raw, md_outbuf *out)
{
    static md_route_compress c;
    md_compress_init(&c);
    c.codings = 1u << MD_CODING_GZIP;
    c.min_length = 10;
    md_proxy_resp r;
    resp_init(&r, false, raw, out);
    r.compress = &c;
    r.accept_coding = MD_CODING_GZIP;
    size_t l;
    int rc = feed(&r, text, step, out, &l);
    if (rc == MD_RESP_MORE && l == 0)
        rc = md_proxy_resp_eof(&r, out);
    md_proxy_resp_free(&r);
    return rc;
}

/* With date (the proxy's): a final head without a Date gets one, after the upstream's fields,
 * in every split; the upstream's is kept as the only one; interim heads get none. */
Test(proxy_msg, a_final_head_without_date_gets_one, .timeout = 5)
{
    static const char *const texts[] = {
        "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nX-A: b\r\n"
        "Content-Length: 2\r\n\r\nok",
        "HTTP/1.1 200 OK\r\nDATE: Mon, 01 Jan 2001 00:00:00 GMT\r\nContent-Length: 2\r\n\r\nok",
    };
    for (size_t t = 0; t < 2; t++) {
        for (size_t step = 1; step <= 4096; step *= 8) {
            md_proxy_resp r;
            md_outbuf out = {0};
            resp_init(&r, false, true, &out);
            r.date = true;
            size_t left;
            cr_assert_eq(feed(&r, texts[t], step, &out, &left), MD_RESP_DONE);
            md_proxy_resp_free(&r);
            md_outbuf_free(&out);
            cr_assert_eq(rec.heads, 1);
            const char *d = strcasestr(rec.fields, "ate: ");
            cr_assert_not_null(d, "%s", rec.fields);
            cr_assert_null(strcasestr(d + 1, "ate: "), "two: %s", rec.fields);
            if (t == 0) {
                cr_assert(strncmp(rec.fields, "X-A: b\r\nDate: ", 14) == 0, "%s", rec.fields);
                cr_assert(strncmp(d + 5 + 25, " GMT\r\n", 6) == 0, "%s", rec.fields);
            } else {
                cr_assert_str_eq(rec.fields, "DATE: Mon, 01 Jan 2001 00:00:00 GMT\r\n");
            }
        }
    }
}

Test(proxy_msg, compressed_on_the_fly, .timeout = 5)
{
    static const char *const texts[] = {
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"x\"\r\nAccept-Ranges: bytes\r\n"
        "Vary: Origin\r\nContent-Length: 40\r\n\r\nhello hello hello hello hello hello !!!!",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"x\"\r\nAccept-Ranges: bytes\r\n"
        "Vary: Origin\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
        "14\r\nhello hello hello he\r\n14\r\nllo hello hello !!!!\r\n0\r\nX-T: 1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"x\"\r\nAccept-Ranges: bytes\r\n"
        "Vary: Origin\r\n\r\nhello hello hello hello hello hello !!!!",
    };
    for (size_t t = 0; t < 3; t++) {
        for (size_t step = 1; step <= 4096; step += 4095) {
            md_outbuf out = {0};
            cr_assert_eq(run_coded(texts[t], step, false, &out), MD_RESP_DONE);
            const char *o = md_outbuf_pending_data(&out);
            size_t n = md_outbuf_pending(&out);
            const char *end = memmem(o, n, "\r\n\r\n", 4);
            cr_assert_not_null(end);
            char h[1024];
            snprintf(h, sizeof h, "%.*s", (int)(end + 4 - o), o);
            cr_expect_not_null(strstr(h, "\r\nContent-Encoding: gzip\r\n"), "%s", h);
            cr_expect_not_null(strstr(h, "\r\nVary: Origin\r\n"), "%s", h);
            cr_expect_not_null(strstr(h, "\r\nVary: Accept-Encoding\r\n"), "%s", h);
            cr_expect_not_null(strstr(h, "\r\nETag: W/\"x\"\r\n"), "%s", h);
            cr_expect_not_null(strstr(h, "\r\nTransfer-Encoding: chunked\r\n"), "%s", h);
            cr_expect_null(strstr(h, "Content-Length"), "%s", h);
            cr_expect_null(strstr(h, "Accept-Ranges"), "%s", h);
            /* the chunks' end: the last chunk with no trailer (the upstream's are dropped) */
            cr_expect(n > 5 && memcmp(o + n - 5, "0\r\n\r\n", 5) == 0, "the last chunk");
            cr_expect_null(memmem(o, n, "X-T", 3), "no trailer, nor its announcement");
            cr_expect_null(memmem(o, n, "hello", 5), "coded");
            md_outbuf_free(&out);
        }
    }
    /* Passed as they are: coded already, no-transform, a 206, a small body. */
    static const char *const plain[] = {
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
        "Content-Length: 20\r\n\r\nhello hello hello !!",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: max-age=1, no-transform\r\n"
        "Content-Length: 20\r\n\r\nhello hello hello !!",
        "HTTP/1.1 206 OK\r\nContent-Type: text/html\r\nContent-Length: 20\r\n\r\n"
        "hello hello hello !!",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello",
    };
    for (size_t t = 0; t < 4; t++) {
        md_outbuf out = {0};
        cr_assert_eq(run_coded(plain[t], 4096, false, &out), MD_RESP_DONE);
        char o[1024];
        snprintf(o, sizeof o, "%.*s", (int)md_outbuf_pending(&out), md_outbuf_pending_data(&out));
        cr_expect_null(strstr(o, "Content-Encoding: gzip\r\nContent-Encoding"), "%s", o);
        cr_expect_not_null(strstr(o, "Content-Length: "), "%s", o);
        cr_expect_not_null(strstr(o, "hello"), "%s", o);
        cr_expect_eq(strstr(o, "Vary: Accept-Encoding") != NULL, t == 3, "%s", o);
        md_outbuf_free(&out);
    }
    /* The parts apart (HTTP/2): no length, the body raw gzip, no trailers. */
    md_outbuf out = {0};
    cr_assert_eq(run_coded(texts[1], 7, true, &out), MD_RESP_DONE);
    cr_expect_eq(rec.length, MD_PROXY_LENGTH_UNKNOWN);
    cr_expect_not_null(strstr(rec.fields, "Content-Encoding: gzip\r\n"), "%s", rec.fields);
    cr_expect_eq(rec.ends, 1);
    cr_expect_str_eq(rec.trailers, "");
    const unsigned char *b = (const unsigned char *)md_outbuf_pending_data(&out);
    cr_expect(md_outbuf_pending(&out) > 2 && b[0] == 0x1f && b[1] == 0x8b, "a gzip stream");
    md_outbuf_free(&out);
}

/* Max-Forwards (RFC 9110 7.6.2) on OPTIONS and TRACE: one less, the first field alone; a
 * value past what we count is the most we do, less one. Via names the protocol the request
 * came in (7.6.3). */
Test(proxy_msg, max_forwards_and_via, .timeout = 5)
{
    md_proxy_req rq = {.peer = "192.0.2.1", .method = "OPTIONS", .hop_count = true};
    char *h = head("/p", "Host: a\r\nMax-Forwards: 5\r\nMax-Forwards: 0\r\n", rq);
    cr_assert_not_null(strstr(h, "\r\nMax-Forwards: 4\r\n"), "%s", h);
    cr_assert_null(strstr(h, "Max-Forwards: 0"), "%s", h);
    h = head("/p", "Host: a\r\nMax-Forwards: 18446744073709551616\r\n", rq);
    cr_assert_not_null(strstr(h, "\r\nMax-Forwards: 18446744073709551614\r\n"), "%s", h);
    h = head("/p", "Host: a\r\nMax-Forwards: 99999999999999999999999999\r\n", rq);
    cr_assert_not_null(strstr(h, "\r\nMax-Forwards: 18446744073709551614\r\n"), "%s", h);
    uint64_t hops;
    cr_assert_eq(md_proxy_max_forwards("12x", 3, &hops), -EINVAL);
    cr_assert_eq(md_proxy_max_forwards("", 0, &hops), -EINVAL);
    rq.via = true;
    rq.via_protocol = "2";
    h = head("/p", "Host: a\r\nVia: 1.1 front\r\n", rq);
    cr_assert_not_null(strstr(h, "\r\nVia: 1.1 front\r\n"), "%s", h);
    cr_assert_not_null(strstr(h, "\r\nVia: 2 magpied\r\n"), "%s", h);
    rq.via_protocol = "1.0";
    cr_assert_not_null(strstr(head("/p", "Host: a\r\n", rq), "\r\nVia: 1.0 magpied\r\n"));
    /* The response's names the upstream's (run_raw appends Via). */
    md_outbuf out = {0};
    cr_assert_eq(run_raw("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 4096, &out),
                 MD_RESP_DONE);
    cr_assert_not_null(strstr(rec.fields, "Via: 1.0 magpied\r\n"), "%s", rec.fields);
    md_outbuf_free(&out);
    cr_assert_eq(run_raw("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 4096, &out),
                 MD_RESP_DONE);
    cr_assert_not_null(strstr(rec.fields, "Via: 1.1 magpied\r\n"), "%s", rec.fields);
    md_outbuf_free(&out);
}
