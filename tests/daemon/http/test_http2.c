/* Tests for daemon/http/http2.c: an nghttp2 client session in memory drives md_h2_conn as the
 * connection task does (feed, run, send), over the built-in routes: responses and their heads,
 * HEAD, the core's refusals, concurrent streams, request bodies both ways with flow control
 * (an echo larger than every window), the limits (431, 413, min_body_rate's 408), GOAWAY on drain
 * and on the idle deadline, and the defences (a PING flood, Rapid Reset, a window held at zero);
 * pending handlers, and bytes a handler lends (md_http_io.lend: sent in order after its output,
 * through small windows, released once, when sent or when the stream or connection ends). */
#include <errno.h>
#include <nghttp2/nghttp2.h>

#include "daemon/http_harness.h"
#include "http/handler.h"
#include "http/http2.h"

TestSuite(http2, .init = server_setup, .timeout = 20);

#define MAXS 1200

struct resp {
    int status;
    char ctype[64];
    long long clen;
    bool has_date, has_connection;
    char allow[64];
    char *body;
    size_t len, cap;
    bool closed;
    uint32_t rst; /* the stream's close code */
};

struct client {
    nghttp2_session *cl;
    md_h2_conn *h;
    md_http_conn hc;
    md_outbuf out;
    uint64_t now;
    struct resp r[MAXS];
    bool goaway; /* the client's session took a GOAWAY */
    /* The server's GOAWAY frames, read off the wire (a client session with no stream open
     * ignores all that follows a first GOAWAY): how many, and the last one's fields. */
    int goaways;
    uint32_t goaway_code;
    int32_t goaway_last;
    /* A request body to send: the data source. */
    const char *up;
    size_t up_len, up_off;
    bool no_read; /* the client does not give its window back */
    size_t piece; /* pump() feeds the server this many bytes at a time (0: as they come) */
};

static struct resp *resp_of(struct client *c, int32_t id)
{
    cr_assert(id > 0 && id < 2 * MAXS, "stream %d", id);
    return &c->r[id / 2];
}

static int c_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                       size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                       void *user)
{
    (void)s;
    (void)flags;
    (void)namelen;
    struct resp *r = resp_of(user, f->hd.stream_id);
    if (strcmp((const char *)name, ":status") == 0)
        r->status = atoi((const char *)value);
    else if (strcmp((const char *)name, "content-type") == 0)
        snprintf(r->ctype, sizeof r->ctype, "%.*s", (int)valuelen, value);
    else if (strcmp((const char *)name, "content-length") == 0)
        r->clen = atoll((const char *)value);
    else if (strcmp((const char *)name, "date") == 0)
        r->has_date = true;
    else if (strcmp((const char *)name, "connection") == 0)
        r->has_connection = true;
    else if (strcmp((const char *)name, "allow") == 0)
        snprintf(r->allow, sizeof r->allow, "%.*s", (int)valuelen, value);
    return 0;
}

static int c_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                     void *user)
{
    (void)s;
    (void)flags;
    struct resp *r = resp_of(user, id);
    cr_assert_eq(md_bytes_grow(&r->body, &r->cap, r->len + len, 4096), 0);
    memcpy(r->body + r->len, data, len);
    r->len += len;
    return 0;
}

static int c_on_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    (void)s;
    struct resp *r = resp_of(user, id);
    r->closed = true;
    r->rst = code;
    return 0;
}

static int c_on_frame(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    (void)s;
    struct client *c = user;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaway = true;
    }
    return 0;
}

static ssize_t c_read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)s;
    (void)id;
    (void)src;
    struct client *c = user;
    size_t n = c->up_len - c->up_off < length ? c->up_len - c->up_off : length;
    memcpy(buf, c->up + c->up_off, n);
    c->up_off += n;
    if (c->up_off == c->up_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* Whether client_open's session gives the server's DATA back to the windows itself (nghttp2's
 * automatic WINDOW_UPDATE), or leaves them to the test. */
static bool client_windows_by_hand;

static void client_open(struct client *c)
{
    memset(c, 0, sizeof *c);
    c->now = T0;
    md_outbuf_init(&c->out);
    md_http_conn_init(&c->hc, &srv, T0);
    nghttp2_session_callbacks *cb;
    cr_assert_eq(nghttp2_session_callbacks_new(&cb), 0);
    nghttp2_session_callbacks_set_on_header_callback(cb, c_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, c_on_frame);
    nghttp2_option *opt;
    cr_assert_eq(nghttp2_option_new(&opt), 0);
    nghttp2_option_set_no_auto_window_update(opt, client_windows_by_hand);
    cr_assert_eq(nghttp2_session_client_new2(&c->cl, cb, c, opt), 0);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    cr_assert_eq(nghttp2_submit_settings(c->cl, NGHTTP2_FLAG_NONE, NULL, 0), 0);
    cr_assert_eq(md_h2_conn_new(&c->h, &srv, md_http_conn_link(&c->hc), T0), 0);
}

static void client_close(struct client *c)
{
    md_h2_conn_free(c->h);
    md_http_conn_close(&c->hc);
    nghttp2_session_del(c->cl);
    md_outbuf_free(&c->out);
    for (int i = 0; i < MAXS; i++)
        free(c->r[i].body);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The next GOAWAY in the frames p[*at..n) (the server's output): true, with its last stream
 * id and error code, and *at past it; false when none is left. */
static bool next_goaway(const unsigned char *p, size_t n, size_t *at, int32_t *last, uint32_t *code)
{
    while (*at + 9 <= n) {
        const unsigned char *f = p + *at;
        size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        bool goaway = f[3] == NGHTTP2_GOAWAY && len >= 8 && *at + 9 + 8 <= n;
        *at += 9 + len;
        if (goaway) {
            *last = (int32_t)(be32(f + 9) & 0x7fffffffu);
            *code = be32(f + 13);
            return true;
        }
    }
    return false;
}

/* The server's output (whole frames) into the client's session, its GOAWAYs counted. */
static void client_take(struct client *c)
{
    const unsigned char *p = (const unsigned char *)md_outbuf_pending_data(&c->out);
    size_t n = md_outbuf_pending(&c->out);
    for (size_t at = 0; next_goaway(p, n, &at, &c->goaway_last, &c->goaway_code);)
        c->goaways++;
    ssize_t used = nghttp2_session_mem_recv(c->cl, p, n);
    cr_assert_eq(used, (ssize_t)n, "client mem_recv: %zd", used);
    md_outbuf_consume(&c->out, n);
}

/* Client to server, the server's handlers, server to client, until neither has anything to
 * say. Returns the server's last feed result. */
static int pump(struct client *c)
{
    int rc = 0;
    for (int round = 0; round < 10000; round++) {
        bool moved = false;
        const uint8_t *data;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c->cl, &data)) > 0) {
            moved = true;
            size_t step = c->piece != 0 ? c->piece : (size_t)n;
            for (size_t at = 0; at < (size_t)n && rc == 0; at += step)
                rc = md_h2_conn_feed(c->h, c->now, (const char *)data + at,
                                     (size_t)n - at < step ? (size_t)n - at : step);
            if (rc != 0)
                return rc;
        }
        if (md_h2_conn_run(c->h, NULL, c->now))
            moved = true;
        cr_assert_eq(md_h2_conn_send(c->h, &c->out, SIZE_MAX), 0);
        if (md_outbuf_pending(&c->out) != 0) {
            moved = true;
            client_take(c);
        }
        if (!moved)
            return rc;
    }
    cr_assert_fail("pump never settled");
    return rc;
}

static int32_t request(struct client *c, const char *method, const char *path,
                       const nghttp2_nv *more, size_t nmore, bool body)
{
    nghttp2_nv nv[300] = {
        {(uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"a", 10, 1, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
    };
    cr_assert_leq(nmore, 296);
    if (nmore != 0)
        memcpy(nv + 4, more, nmore * sizeof *more);
    nghttp2_data_provider prd = {.read_callback = c_read_body};
    int32_t id = nghttp2_submit_request(c->cl, NULL, nv, 4 + nmore, body ? &prd : NULL, NULL);
    cr_assert_gt(id, 0);
    return id;
}

Test(http2, get_root)
{
    struct client c;
    client_open(&c);
    int32_t id = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    struct resp *r = resp_of(&c, id);
    cr_assert(r->closed);
    cr_assert_eq(r->rst, 0);
    cr_assert_eq(r->status, 200);
    cr_assert_str_eq(r->ctype, "text/plain");
    cr_assert_eq(r->clen, 13);
    cr_assert(r->has_date);
    cr_assert_not(r->has_connection, "no connection-specific field over HTTP/2");
    cr_assert_eq(r->len, 13);
    cr_assert_eq(memcmp(r->body, "Hello, World!", 13), 0);
    client_close(&c);
    expect_no_leaks();
}

/* The request boundary over HTTP/2: request_begin runs when a stream opens on a session with
 * none open, is told the connection's link, and what it returns is what that stream and the
 * session's later ones run under (md_h2_conn_server()), as over HTTP/1.1. */
static md_http_server *h2_next;
static struct md_http_link *h2_begun_on;
static int h2_begins;

static md_http_server *h2_switch(struct md_http_link *link, md_http_server *now)
{
    h2_begins++;
    h2_begun_on = link;
    return h2_next != NULL ? h2_next : now;
}

Test(http2, request_begin_moves_the_session_to_the_settings_it_returns)
{
    static md_http_server next;
    next = srv;
    next.limits.max_headers = 5; /* the four pseudo-headers and one field */
    srv.request_begin = h2_switch;
    h2_next = NULL;
    h2_begins = 0;
    struct client c;
    client_open(&c);
    nghttp2_nv two[] = {{(uint8_t *)"x-one", (uint8_t *)"1", 5, 1, 0},
                        {(uint8_t *)"x-two", (uint8_t *)"2", 5, 1, 0}};
    int32_t id = request(&c, "GET", "/", two, 2, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id)->status, 200);
    cr_assert_eq(h2_begins, 1);
    cr_assert_eq(h2_begun_on, md_http_conn_link(&c.hc), "the hook is told the connection's link");
    cr_assert_eq(md_h2_conn_server(c.h), &srv);
    h2_next = &next;
    id = request(&c, "GET", "/", two, 2, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(h2_begins, 2);
    cr_assert_eq(md_h2_conn_server(c.h), &next);
    cr_assert_eq(resp_of(&c, id)->status, 431, "the new settings' limits from this stream on");
    client_close(&c);
    srv.request_begin = NULL;
    h2_next = NULL;
    expect_no_leaks();
}

Test(http2, head_refusals_and_options)
{
    struct client c;
    client_open(&c);
    int32_t head = request(&c, "HEAD", "/", NULL, 0, false);
    int32_t nope = request(&c, "GET", "/nope", NULL, 0, false);
    int32_t post = request(&c, "POST", "/healthz", NULL, 0, false);
    int32_t opt = request(&c, "OPTIONS", "/echo", NULL, 0, false);
    int32_t dots = request(&c, "GET", "/a/%2e%2e/%2e%2e/x", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, head)->status, 200);
    cr_assert_eq(resp_of(&c, head)->clen, 13);
    cr_assert_eq(resp_of(&c, head)->len, 0, "HEAD: no body");
    cr_assert_eq(resp_of(&c, nope)->status, 404);
    cr_assert_eq(resp_of(&c, post)->status, 405);
    cr_assert_str_eq(resp_of(&c, post)->allow, "GET, HEAD, OPTIONS");
    cr_assert_eq(resp_of(&c, opt)->status, 200);
    cr_assert_str_eq(resp_of(&c, opt)->allow, "POST, OPTIONS");
    cr_assert_eq(resp_of(&c, dots)->status, 400);
    /* A 400 on one stream leaves the connection to the others. */
    int32_t again = request(&c, "GET", "/healthz", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, again)->status, 200);
    cr_assert_not(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

Test(http2, concurrent_streams)
{
    struct client c;
    client_open(&c);
    int32_t ids[50];
    for (int i = 0; i < 50; i++)
        ids[i] = request(&c, "GET", i % 2 ? "/" : "/healthz", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    for (int i = 0; i < 50; i++) {
        struct resp *r = resp_of(&c, ids[i]);
        cr_assert(r->closed, "stream %d", ids[i]);
        cr_assert_eq(r->status, 200);
        cr_assert_eq(r->len, i % 2 ? 13u : 2u);
    }
    client_close(&c);
    expect_no_leaks();
}

static void echo_of(size_t n, bool with_length)
{
    struct client c;
    client_open(&c);
    char *body = malloc(n);
    for (size_t i = 0; i < n; i++)
        body[i] = (char)('a' + i * 7 % 26);
    c.up = body;
    c.up_len = n;
    char len[24];
    snprintf(len, sizeof len, "%zu", n);
    nghttp2_nv cl[] = {{(uint8_t *)"content-length", (uint8_t *)len, 14, strlen(len), 0}};
    int32_t id = request(&c, "POST", "/echo", cl, with_length ? 1 : 0, true);
    cr_assert_eq(pump(&c), 0);
    struct resp *r = resp_of(&c, id);
    cr_assert(r->closed);
    cr_assert_eq(r->rst, 0, "reset %u", r->rst);
    cr_assert_eq(r->status, 200);
    cr_assert_eq(r->len, n);
    cr_assert_eq(memcmp(r->body, body, n), 0);
    free(body);
    client_close(&c);
    expect_no_leaks();
}

Test(http2, echo_small_gathered)
{
    echo_of(1000, true);
}

/* md_h2_conn_feed follows the frame headers itself (to find DATA on a closed stream): reads cut
 * anywhere, through a frame's header or its payload, give the same body. */
Test(http2, echo_through_reads_cut_anywhere)
{
    static const size_t pieces[] = {1, 2, 5, 9, 10, 17, 4096, 16393};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        struct client c;
        client_open(&c);
        c.piece = pieces[i];
        size_t n = 40000; /* three DATA frames, the last short */
        char *body = malloc(n);
        for (size_t j = 0; j < n; j++)
            body[j] = (char)('a' + j * 11 % 26);
        c.up = body;
        c.up_len = n;
        int32_t id = request(&c, "POST", "/echo", NULL, 0, true);
        cr_assert_eq(pump(&c), 0, "pieces of %zu", pieces[i]);
        struct resp *r = resp_of(&c, id);
        cr_assert_eq(r->status, 200, "pieces of %zu", pieces[i]);
        cr_assert_eq(r->len, n, "pieces of %zu", pieces[i]);
        cr_assert_eq(memcmp(r->body, body, n), 0, "pieces of %zu", pieces[i]);
        free(body);
        client_close(&c);
    }
    expect_no_leaks();
}

Test(http2, echo_without_length_gathered)
{
    echo_of(100000, false); /* more than the stream's window: WINDOW_UPDATEs as it is taken */
}

Test(http2, echo_large_streamed_through_the_windows)
{
    echo_of(600000, true); /* streamed: the body's window comes back as the echo leaves */
}

Test(http2, header_list_too_large_is_431)
{
    struct client c;
    client_open(&c);
    static nghttp2_nv many[200];
    static char names[200][16];
    for (int i = 0; i < 200; i++) {
        snprintf(names[i], sizeof names[i], "x-%d", i);
        many[i] = (nghttp2_nv){(uint8_t *)names[i], (uint8_t *)"v", strlen(names[i]), 1, 0};
    }
    int32_t id = request(&c, "GET", "/", many, 200, false); /* max_headers is 100 */
    int32_t ok = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id)->status, 431);
    cr_assert_eq(resp_of(&c, ok)->status, 200);
    client_close(&c);
    expect_no_leaks();
}

Test(http2, body_over_the_limit_is_413)
{
    srv.limits.max_body_bytes = 1000;
    struct client c;
    client_open(&c);
    char *body = calloc(1, 5000);
    c.up = body;
    c.up_len = 5000;
    nghttp2_nv cl[] = {{(uint8_t *)"content-length", (uint8_t *)"5000", 14, 4, 0}};
    int32_t id = request(&c, "POST", "/echo", cl, 1, true);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id)->status, 413);
    /* Without a length: refused once the body passes it. */
    c.up_off = 0;
    int32_t id2 = request(&c, "POST", "/echo", NULL, 0, true);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id2)->status, 413);
    free(body);
    client_close(&c);
    expect_no_leaks();
}

static ssize_t c_defer_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)s, (void)id, (void)buf, (void)length, (void)flags, (void)src, (void)user;
    return NGHTTP2_ERR_DEFERRED; /* a body that never comes */
}

/* POST /echo announcing 100 bytes of body that never come; its stream. */
static int32_t post_held_back(struct client *c)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":authority", (uint8_t *)"a", 10, 1, 0},
        {(uint8_t *)":path", (uint8_t *)"/echo", 5, 5, 0},
        {(uint8_t *)"content-length", (uint8_t *)"100", 14, 3, 0},
    };
    nghttp2_data_provider prd = {.read_callback = c_defer_body};
    int32_t id = nghttp2_submit_request(c->cl, NULL, nv, 5, &prd, NULL);
    cr_assert_gt(id, 0);
    cr_assert_eq(pump(c), 0);
    return id;
}

/* Stream id got 408, and the connection and its other streams go on. */
static void expect_408_and_the_rest_served(struct client *c, int32_t id)
{
    cr_assert_eq(pump(c), 0);
    cr_assert_eq(resp_of(c, id)->status, 408);
    int32_t ok = request(c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(c), 0);
    cr_assert_eq(resp_of(c, ok)->status, 200);
    cr_assert_not(md_h2_conn_done(c->h));
    cr_assert_not(c->goaway);
}

Test(http2, a_body_below_min_body_rate_gets_408_on_its_stream)
{
    srv.limits.min_body_rate = 1000;
    srv.limits.min_rate_grace_ms = 1000;
    struct client c;
    client_open(&c);
    int32_t id = post_held_back(&c);
    cr_assert_eq(resp_of(&c, id)->status, 0, "within the grace");
    uint64_t deadline = md_h2_conn_deadline(c.h);
    cr_assert_eq(deadline, T0 + UINT64_C(1000000000), "the grace ends first");
    c.now = deadline;
    bool stall;
    cr_assert_eq(md_h2_conn_timeout(c.h, c.now, &stall), MD_HTTP_EXPIRED_NONE);
    cr_assert_not(stall);
    expect_408_and_the_rest_served(&c, id);
    client_close(&c);
    expect_no_leaks();
}

/* A graceful stop (RFC 9113 6.8): a notice naming 2^31-1 with a PING; the client's ACK brings
 * the final GOAWAY, naming the last stream processed. */
Test(http2, drain_sends_goaway_and_finishes_in_flight)
{
    struct client c;
    client_open(&c);
    int32_t id = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id)->status, 200);
    md_h2_conn_drain(c.h, c.now);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(c.goaways, 2, "the notice, then the final one");
    cr_assert_eq(c.goaway_code, NGHTTP2_NO_ERROR);
    cr_assert_eq(c.goaway_last, id);
    cr_assert(md_h2_conn_done(c.h));
    cr_assert_not(md_h2_conn_refused(c.h));
    client_close(&c);
    expect_no_leaks();
}

/* What the notice is for: a stream the client opened before it read the notice is served,
 * and the final GOAWAY names it. */
Test(http2, a_stream_opened_as_the_stop_begins_is_served)
{
    struct client c;
    client_open(&c);
    int32_t first = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    md_h2_conn_drain(c.h, c.now);
    int32_t late = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, first)->status, 200);
    cr_assert_eq(resp_of(&c, late)->status, 200);
    cr_assert_eq(resp_of(&c, late)->rst, 0);
    cr_assert_eq(c.goaways, 2);
    cr_assert_eq(c.goaway_last, late);
    cr_assert(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

/* A client that does not answer the PING gets the final GOAWAY a second after the notice. */
Test(http2, the_final_goaway_goes_a_second_after_the_notice_without_an_ack)
{
    struct client c;
    client_open(&c);
    int32_t id = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    md_h2_conn_drain(c.h, c.now);
    /* The notice and the PING reach the client; its ACK never comes back. */
    cr_assert_eq(md_h2_conn_send(c.h, &c.out, SIZE_MAX), 0);
    client_take(&c);
    cr_assert_eq(c.goaways, 1);
    cr_assert_eq(c.goaway_last, INT32_MAX, "the notice names the highest id there can be");
    cr_assert_not(md_h2_conn_done(c.h), "still open for the client's streams");
    cr_assert_eq(md_h2_conn_deadline(c.h), c.now + 1000 * MS);
    bool stall;
    cr_assert_eq(md_h2_conn_timeout(c.h, c.now + 1000 * MS - 1, &stall), MD_HTTP_EXPIRED_NONE);
    cr_assert_eq(md_h2_conn_send(c.h, &c.out, SIZE_MAX), 0);
    cr_assert_eq(md_outbuf_pending(&c.out), 0, "nothing before the second");
    cr_assert_eq(md_h2_conn_timeout(c.h, c.now + 1000 * MS, &stall), MD_HTTP_EXPIRED_NONE);
    cr_assert_not(stall);
    cr_assert_eq(md_h2_conn_send(c.h, &c.out, SIZE_MAX), 0);
    client_take(&c);
    cr_assert_eq(c.goaways, 2);
    cr_assert_eq(c.goaway_last, id);
    cr_assert(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

Test(http2, idle_deadline_sends_goaway)
{
    struct client c;
    client_open(&c);
    int32_t id = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id)->status, 200);
    uint64_t at = md_h2_conn_deadline(c.h);
    cr_assert_eq(at, T0 + srv.limits.keepalive_timeout_ms * MS);
    bool stall;
    cr_assert_eq(md_h2_conn_timeout(c.h, at - 1, &stall), MD_HTTP_EXPIRED_NONE);
    cr_assert_not(stall);
    cr_assert_eq(md_h2_conn_timeout(c.h, at, &stall), MD_HTTP_EXPIRED_KEEPALIVE);
    cr_assert_eq(pump(&c), 0);
    cr_assert(c.goaway);
    cr_assert(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

/* A quiet session gives nghttp2's frame buffer back a second after its last frames, and serves
 * the next request as before from the zeroed pages. */
Test(http2, a_quiet_session_gives_its_frame_buffer_back_and_serves_on)
{
    struct client c;
    client_open(&c);
    int32_t id = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, id)->status, 200);
    uint64_t at = md_h2_conn_release_at(c.h);
    cr_assert_eq(at, T0 + MD_H2_RELEASE_NS);
    cr_assert_lt(at, md_h2_conn_deadline(c.h), "before the keep-alive deadline");
    /* nghttp2's frame buffer (16,394 bytes: five pages) and its stream map's table (one page,
     * empty again once stream 1 closed). */
    cr_assert_eq(md_h2_conn_release(c.h), 6 * 4096);
    cr_assert_eq(md_h2_conn_release_at(c.h), UINT64_MAX, "nothing more to give back");
    cr_assert_eq(md_h2_conn_release(c.h), 0, "nothing given twice");
    c.now = at + MS;
    for (int i = 0; i < 3; i++) {
        id = request(&c, "GET", "/", NULL, 0, false);
        cr_assert_eq(pump(&c), 0);
        struct resp *r = resp_of(&c, id);
        cr_assert_eq(r->status, 200);
        cr_assert_eq(r->len, 13);
        cr_assert_eq(memcmp(r->body, "Hello, World!", 13), 0);
        cr_assert_eq(md_h2_conn_release_at(c.h), c.now + MD_H2_RELEASE_NS);
        cr_assert_eq(md_h2_conn_release(c.h), 6 * 4096, "the map read as zeros, and is again");
    }
    client_close(&c);
    expect_no_leaks();
}

Test(http2, max_requests_per_connection_sends_goaway)
{
    srv.limits.max_requests_per_connection = 3;
    struct client c;
    client_open(&c);
    int32_t ids[5];
    for (int i = 0; i < 3; i++) {
        ids[i] = request(&c, "GET", "/", NULL, 0, false);
        cr_assert_eq(pump(&c), 0);
        cr_assert_eq(resp_of(&c, ids[i])->status, 200);
    }
    cr_assert(c.goaway);
    cr_assert_eq(c.goaway_code, NGHTTP2_NO_ERROR);
    cr_assert_eq(c.goaway_last, ids[2]);
    cr_assert(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

Test(http2, pings_do_not_hold_an_idle_connection)
{
    struct client c;
    client_open(&c);
    cr_assert_eq(pump(&c), 0);
    uint64_t at = md_h2_conn_deadline(c.h);
    cr_assert_eq(at, T0 + srv.limits.header_timeout_ms * MS);
    c.now = at - MS;
    cr_assert_eq(nghttp2_submit_ping(c.cl, NGHTTP2_FLAG_NONE, NULL), 0);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(md_h2_conn_deadline(c.h), at, "a PING is not a request");
    client_close(&c);
    expect_no_leaks();
}

Test(http2, ping_flood_ends_with_goaway)
{
    struct client c;
    client_open(&c);
    cr_assert_eq(pump(&c), 0);
    for (int i = 0; i < 3000; i++)
        cr_assert_eq(nghttp2_submit_ping(c.cl, NGHTTP2_FLAG_NONE, NULL), 0);
    (void)pump(&c);
    cr_assert(md_h2_conn_refused(c.h));
    cr_assert(c.goaway, "a GOAWAY says why");
    cr_assert_eq(c.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    client_close(&c);
    expect_no_leaks();
}

/* A server session fed raw frames, for what a well-behaved client library will not send. */
struct raw {
    md_http_conn hc;
    md_h2_conn *h;
    md_outbuf out;
};

static void raw_open(struct raw *x)
{
    md_outbuf_init(&x->out);
    md_http_conn_init(&x->hc, &srv, T0);
    cr_assert_eq(md_h2_conn_new(&x->h, &srv, md_http_conn_link(&x->hc), T0), 0);
}

static void raw_close(struct raw *x)
{
    md_h2_conn_free(x->h);
    md_http_conn_close(&x->hc);
    md_outbuf_free(&x->out);
}

/* Raw frames, for what a well-behaved client library will not send. */
static size_t frame(char *w, uint8_t type, uint8_t flags, uint32_t sid, const void *p, size_t n)
{
    w[0] = (char)(n >> 16);
    w[1] = (char)(n >> 8);
    w[2] = (char)n;
    w[3] = (char)type;
    w[4] = (char)flags;
    w[5] = (char)(sid >> 24);
    w[6] = (char)(sid >> 16);
    w[7] = (char)(sid >> 8);
    w[8] = (char)sid;
    if (n != 0)
        memcpy(w + 9, p, n);
    return 9 + n;
}

/* The client preface and an empty SETTINGS into buf: their length. */
static size_t raw_hello(char *buf)
{
    memcpy(buf, MD_H2_PREFACE, MD_H2_PREFACE_LEN);
    return MD_H2_PREFACE_LEN + frame(buf + MD_H2_PREFACE_LEN, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
}

/* Whether out holds a GOAWAY frame (after our SETTINGS and the rest), and its code. */
static bool find_goaway(const md_outbuf *out, uint32_t *code)
{
    size_t at = 0;
    int32_t last;
    return next_goaway((const unsigned char *)md_outbuf_pending_data(out), md_outbuf_pending(out),
                       &at, &last, code);
}

Test(http2, rapid_reset_ends_with_goaway)
{
    struct raw x;
    raw_open(&x);
    md_h2_conn *h = x.h;
    md_outbuf *out = &x.out;
    static char buf[1 << 20];
    size_t n = raw_hello(buf);
    /* GET / (static table: :method GET, :scheme http, :path /; :authority "a"), no
     * END_STREAM, then at once RST_STREAM CANCEL: each stream starts a request and is gone. */
    static const unsigned char block[] = {0x82, 0x86, 0x84, 0x01, 0x01, 'a'};
    static const unsigned char cancel[] = {0, 0, 0, NGHTTP2_CANCEL};
    for (uint32_t i = 0; i < 2000; i++) {
        n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1 + 2 * i, block,
                   sizeof block);
        n += frame(buf + n, NGHTTP2_RST_STREAM, 0, 1 + 2 * i, cancel, sizeof cancel);
    }
    (void)md_h2_conn_feed(h, T0, buf, n);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint32_t code = 0;
    cr_assert(find_goaway(out, &code), "the resets stop with a GOAWAY");
    cr_assert_neq(code, NGHTTP2_NO_ERROR);
    cr_assert(md_h2_conn_done(h));
    raw_close(&x);
    expect_no_leaks();
}

Test(http2, continuation_flood_ends_with_goaway)
{
    struct raw x;
    raw_open(&x);
    md_h2_conn *h = x.h;
    md_outbuf *out = &x.out;
    static char buf[1 << 16];
    size_t n = raw_hello(buf);
    static const unsigned char block[] = {0x82, 0x86, 0x84};
    n += frame(buf + n, NGHTTP2_HEADERS, 0, 1, block, sizeof block);
    /* CONTINUATION frames without END_HEADERS, never ending (CVE-2024-27316's shape). */
    static const unsigned char more[] = {0x40, 0x01, 'x', 0x01, 'y'};
    for (int i = 0; i < 1000; i++)
        n += frame(buf + n, NGHTTP2_CONTINUATION, 0, 1, more, sizeof more);
    (void)md_h2_conn_feed(h, T0, buf, n);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint32_t code = 0;
    cr_assert(find_goaway(out, &code), "a GOAWAY ends it");
    cr_assert(md_h2_conn_done(h));
    raw_close(&x);
    expect_no_leaks();
}

/* RFC 9113 5.1: a DATA or HEADERS on a stream the client reset is a STREAM_CLOSED error.
 * nghttp2 keeps no closed stream, so md_h2_conn_feed finds the DATA: in one read, or cut at
 * any byte, its stream is closed by the RST_STREAM before it when it is looked up. */
Test(http2, data_or_headers_after_the_clients_reset_is_stream_closed_wherever_reads_cut)
{
    static char buf[256];
    static const unsigned char block[] = {0x83, 0x86, 0x84, 0x01, 0x01, 'a'}; /* POST / */
    static const unsigned char cancel[] = {0, 0, 0, NGHTTP2_CANCEL};
    for (uint8_t last = NGHTTP2_DATA; last <= NGHTTP2_HEADERS; last++) {
        size_t n = raw_hello(buf);
        n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block, sizeof block);
        n += frame(buf + n, NGHTTP2_RST_STREAM, 0, 1, cancel, sizeof cancel);
        if (last == NGHTTP2_DATA)
            n += frame(buf + n, NGHTTP2_DATA, 0, 1, "xy", 2);
        else
            n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block, sizeof block);
        for (size_t cut = 0; cut <= n; cut++) { /* cut == n: byte by byte */
            struct raw x;
            raw_open(&x);
            md_h2_conn *h = x.h;
            md_outbuf *out = &x.out;
            if (cut < n) {
                cr_assert_eq(md_h2_conn_feed(h, T0, buf, cut), 0);
                cr_assert_eq(md_h2_conn_feed(h, T0, buf + cut, n - cut), 0);
            } else {
                for (size_t i = 0; i < n; i++)
                    cr_assert_eq(md_h2_conn_feed(h, T0, buf + i, 1), 0);
            }
            cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
            uint32_t code = 0;
            cr_assert(find_goaway(out, &code), "frame %u, cut at %zu", last, cut);
            cr_assert_eq(code, NGHTTP2_STREAM_CLOSED, "frame %u, cut at %zu", last, cut);
            cr_assert(md_h2_conn_done(h));
            raw_close(&x);
        }
    }
    expect_no_leaks();
}

/* The first frame of a type on a stream in the server's output (whole frames): its flags and
 * the first byte of its payload, or false. */
static bool find_frame(const md_outbuf *out, uint8_t type, int32_t sid, uint8_t *flags,
                       uint8_t *first)
{
    const unsigned char *p = (const unsigned char *)md_outbuf_pending_data(out);
    size_t n = md_outbuf_pending(out);
    for (size_t at = 0; at + 9 <= n;) {
        size_t len = (size_t)p[at] << 16 | (size_t)p[at + 1] << 8 | p[at + 2];
        if (p[at + 3] == type && (int32_t)(be32(p + at + 5) & 0x7fffffffu) == sid) {
            *flags = p[at + 4];
            *first = len != 0 && at + 10 <= n ? p[at + 9] : 0;
            return true;
        }
        at += 9 + len;
    }
    return false;
}

/* ... but a stream the server reset (a malformed request: a Host that is not :authority) may
 * still see the client's DATA that was on its way: that is ignored (RFC 9113 5.1), and the
 * connection serves on. */
Test(http2, data_on_a_stream_the_server_reset_is_ignored)
{
    struct raw x;
    raw_open(&x);
    md_h2_conn *h = x.h;
    md_outbuf *out = &x.out;
    char buf[256];
    size_t n = raw_hello(buf);
    static const unsigned char post[] = {0x83, 0x86, 0x84, 0x01, 0x01, 'a', /* POST / */
                                         0x00, 0x04, 'h',  'o',  's',  't', 0x01, 'b'};
    n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, post, sizeof post);
    cr_assert_eq(md_h2_conn_feed(h, T0, buf, n), 0);
    (void)md_h2_conn_run(h, NULL, T0);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint8_t flags, first;
    cr_assert(find_frame(out, NGHTTP2_RST_STREAM, 1, &flags, &first), "reset at the head");
    md_outbuf_consume(out, md_outbuf_pending(out));
    cr_assert_eq(md_h2_conn_streams(h), 0, "the stream is gone");
    n = frame(buf, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "xy", 2);
    static const unsigned char get[] = {0x82, 0x86, 0x84, 0x01, 0x01, 'a'}; /* GET / */
    n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3, get,
               sizeof get);
    cr_assert_eq(md_h2_conn_feed(h, T0, buf, n), 0);
    (void)md_h2_conn_run(h, NULL, T0);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint32_t code;
    cr_assert_not(find_goaway(out, &code), "no error for the late DATA");
    cr_assert(find_frame(out, NGHTTP2_HEADERS, 3, &flags, &first), "stream 3 answered");
    cr_assert_eq(first, 0x88, "200 (HPACK's static :status 200)");
    cr_assert_not(md_h2_conn_refused(h));
    raw_close(&x);
    expect_no_leaks();
}

Test(http2, empty_data_flood_ends_with_goaway)
{
    struct raw x;
    raw_open(&x);
    md_h2_conn *h = x.h;
    md_outbuf *out = &x.out;
    static char buf[1 << 18];
    size_t n = raw_hello(buf);
    static const unsigned char block[] = {0x83, 0x86, 0x84, 0x01, 0x01, 'a'}; /* POST / */
    n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block, sizeof block);
    for (int i = 0; i < 5000; i++)
        n += frame(buf + n, NGHTTP2_DATA, 0, 1, NULL, 0);
    (void)md_h2_conn_feed(h, T0, buf, n);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint32_t code = 0;
    cr_assert(find_goaway(out, &code), "a GOAWAY ends it");
    cr_assert_eq(code, NGHTTP2_ENHANCE_YOUR_CALM);
    cr_assert(md_h2_conn_refused(h));
    raw_close(&x);
    expect_no_leaks();
}

/* A HEADERS on a stream id the client skipped (RFC 9113 5.1.1: ids only grow) is a connection
 * error PROTOCOL_ERROR; nghttp2 alone ignores it. One on an id the client did open (trailers
 * for a stream since reset) is not. */
static uint32_t skipped_id_verdict(uint32_t first, uint32_t second)
{
    struct raw x;
    raw_open(&x);
    md_h2_conn *h = x.h;
    md_outbuf *out = &x.out;
    static char buf[1024];
    size_t n = raw_hello(buf);
    static const unsigned char block[] = {0x82, 0x86, 0x84, 0x01, 0x01, 'a'}; /* GET / */
    const uint8_t flags = NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM;
    n += frame(buf + n, NGHTTP2_HEADERS, flags, first, block, sizeof block);
    n += frame(buf + n, NGHTTP2_HEADERS, flags, second, block, sizeof block);
    cr_assert_eq(md_h2_conn_feed(h, T0, buf, n), 0);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint32_t code = UINT32_MAX;
    (void)find_goaway(out, &code);
    raw_close(&x);
    return code;
}

Test(http2, headers_on_a_skipped_stream_id_is_a_protocol_error)
{
    cr_assert_eq(skipped_id_verdict(5, 3), NGHTTP2_PROTOCOL_ERROR);
    cr_assert_eq(skipped_id_verdict(0x7fffffff, 1), NGHTTP2_PROTOCOL_ERROR);
    cr_assert_eq(skipped_id_verdict(1, 3), UINT32_MAX, "ids in order: no GOAWAY");
    expect_no_leaks();
}

/* Whether out holds a RST_STREAM frame, and its code. */
static bool find_rst(const md_outbuf *out, uint32_t *code)
{
    const unsigned char *p = (const unsigned char *)md_outbuf_pending_data(out);
    size_t n = md_outbuf_pending(out), at = 0;
    while (at + 9 <= n) {
        size_t len = (size_t)p[at] << 16 | (size_t)p[at + 1] << 8 | p[at + 2];
        if (p[at + 3] == NGHTTP2_RST_STREAM && at + 9 + 4 <= n) {
            const unsigned char *e = p + at + 9;
            *code = (uint32_t)e[0] << 24 | (uint32_t)e[1] << 16 | (uint32_t)e[2] << 8 | e[3];
            return true;
        }
        at += 9 + len;
    }
    return false;
}

/* A request of one header block (HPACK) on stream 1: whether the server reset it, and with
 * what code (UINT32_MAX: it answered). */
static uint32_t reset_code_of_block(const unsigned char *block, size_t len)
{
    struct raw x;
    raw_open(&x);
    md_h2_conn *h = x.h;
    md_outbuf *out = &x.out;
    static char buf[2048];
    size_t n = raw_hello(buf);
    n += frame(buf + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1,
               block, len);
    cr_assert_eq(md_h2_conn_feed(h, T0, buf, n), 0);
    cr_assert_eq(md_h2_conn_send(h, out, SIZE_MAX), 0);
    uint32_t code = UINT32_MAX;
    (void)find_rst(out, &code);
    raw_close(&x);
    return code;
}

/* GET / with :authority "a" and then the fields in more (HPACK), as reset_code_of_block. */
static uint32_t reset_code_of(const unsigned char *more, size_t more_len)
{
    unsigned char block[128] = {0x82, 0x86, 0x84, 0x01, 0x01, 'a'};
    cr_assert_leq(more_len, sizeof block - 6);
    memcpy(block + 6, more, more_len);
    return reset_code_of_block(block, 6 + more_len);
}

/* An :authority with a port and no host is malformed (RFC 9110 4.2.1: an http URI's host is
 * never empty), as is a Host of that shape: the stream is reset with PROTOCOL_ERROR. */
Test(http2, an_authority_without_a_host_is_malformed)
{
    /* :authority (static index 1), literal without indexing */
    static const unsigned char port_only[] = {0x82, 0x86, 0x84, 0x01, 0x03, ':', '8', '0'};
    static const unsigned char colon[] = {0x82, 0x86, 0x84, 0x01, 0x01, ':'};
    static const unsigned char fine[] = {0x82, 0x86, 0x84, 0x01, 0x04, 'a', ':', '8', '0'};
    cr_assert_eq(reset_code_of_block(port_only, sizeof port_only), NGHTTP2_PROTOCOL_ERROR);
    cr_assert_eq(reset_code_of_block(colon, sizeof colon), NGHTTP2_PROTOCOL_ERROR);
    cr_assert_eq(reset_code_of_block(fine, sizeof fine), UINT32_MAX);
    expect_no_leaks();
}

/* The Host against :authority check holds past the bytes the request keeps of them (256):
 * 300-byte names that differ in their last byte are malformed, the same ones are served. */
Test(http2, host_against_a_long_authority)
{
    static unsigned char block[700];
    for (int differ = 0; differ < 2; differ++) {
        size_t n = 0;
        static const unsigned char get[] = {0x82, 0x86, 0x84};
        memcpy(block, get, 3);
        n = 3;
        /* :authority (static 1) and host (static 38), literal without indexing, 300 bytes
         * each (7-bit prefix: 127, then 173) */
        static const unsigned char auth[] = {0x01, 0x7f, 0xad, 0x01};
        static const unsigned char host[] = {0x0f, 0x17, 0x7f, 0xad, 0x01};
        memcpy(block + n, auth, sizeof auth);
        n += sizeof auth;
        memset(block + n, 'a', 300);
        n += 300;
        memcpy(block + n, host, sizeof host);
        n += sizeof host;
        memset(block + n, 'A', 300);
        if (differ)
            block[n + 299] = 'b';
        n += 300;
        cr_assert_eq(reset_code_of_block(block, n), differ ? NGHTTP2_PROTOCOL_ERROR : UINT32_MAX,
                     "differ %d", differ);
    }
    expect_no_leaks();
}

/* A Host that names another than :authority makes the request malformed (RFC 9113 8.3.1):
 * its stream is reset with PROTOCOL_ERROR. The same name, in another case, is served. */
Test(http2, host_other_than_authority_is_malformed)
{
    /* host (static index 38: 4-bit prefix 15, then 23), literal without indexing */
    static const unsigned char other[] = {0x0f, 0x17, 0x01, 'b'};
    static const unsigned char same[] = {0x0f, 0x17, 0x01, 'A'};
    static const unsigned char longer[] = {0x0f, 0x17, 0x02, 'a', 'a'};
    cr_assert_eq(reset_code_of(other, sizeof other), NGHTTP2_PROTOCOL_ERROR);
    cr_assert_eq(reset_code_of(longer, sizeof longer), NGHTTP2_PROTOCOL_ERROR);
    cr_assert_eq(reset_code_of(same, sizeof same), UINT32_MAX);
    expect_no_leaks();
}

/* GET / from a client that gives the server no window for its response: its stream, the
 * head come, the body waiting. */
static int32_t get_without_window(struct client *c)
{
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
    cr_assert_eq(nghttp2_submit_settings(c->cl, NGHTTP2_FLAG_NONE, iv, 1), 0);
    cr_assert_eq(pump(c), 0);
    int32_t id = request(c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(c), 0);
    cr_assert_eq(resp_of(c, id)->status, 200);
    return id;
}

Test(http2, zero_window_hits_the_send_deadline)
{
    srv.limits.min_send_rate = 0; /* the timeout alone (min_send_rate's test is below) */
    struct client c;
    client_open(&c);
    int32_t id = get_without_window(&c);
    cr_assert_not(resp_of(&c, id)->closed, "its body waits for a window");
    uint64_t at = md_h2_conn_deadline(c.h);
    cr_assert_eq(at, T0 + srv.limits.send_timeout_ms * MS);
    bool stall;
    cr_assert_eq(md_h2_conn_timeout(c.h, at, &stall), MD_HTTP_EXPIRED_NONE);
    cr_assert(stall);
    cr_assert_eq(pump(&c), 0);
    cr_assert(c.goaway);
    cr_assert(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

/* A window opened a byte at a time moves the last DATA's time, so send_timeout_ms alone never
 * ends the wait: min_send_rate, on the DATA since the wait began, does (as a blocked HTTP/1.1
 * write's), after its grace. */
Test(http2, a_window_opened_a_byte_at_a_time_hits_min_send_rate)
{
    srv.limits.send_timeout_ms = 30000;
    srv.limits.min_send_rate = 100;
    srv.limits.min_rate_grace_ms = 90000;
    client_windows_by_hand = true;
    struct client c;
    client_open(&c);
    int32_t id = get_without_window(&c);
    uint64_t begun = c.now;
    bool stall;
    for (int i = 0; i < 4; i++) { /* a byte every 20 s: within send_timeout_ms each time */
        c.now += 20000 * MS;
        cr_assert_lt(c.now, md_h2_conn_deadline(c.h), "round %d", i);
        cr_assert_eq(nghttp2_submit_window_update(c.cl, NGHTTP2_FLAG_NONE, id, 1), 0);
        cr_assert_eq(pump(&c), 0);
        cr_assert_eq(md_h2_conn_timeout(c.h, c.now, &stall), MD_HTTP_EXPIRED_NONE);
        cr_assert_not(md_h2_conn_done(c.h));
    }
    cr_assert_eq(resp_of(&c, id)->len, 4, "a byte each time");
    /* 4 bytes in 90 s, where 100 a second are asked once the grace has passed. */
    uint64_t at = md_h2_conn_deadline(c.h);
    cr_assert_eq(at, begun + 90000 * MS, "the grace's end, before send_timeout_ms");
    cr_assert_eq(md_h2_conn_timeout(c.h, at, &stall), MD_HTTP_EXPIRED_SEND_RATE);
    cr_assert_eq(pump(&c), 0);
    cr_assert(c.goaway);
    client_close(&c);
    expect_no_leaks();
}

/* body_timeout_ms bounds a pause in a stream's body: its DATA (or its window's opening) moves
 * it, a PING or a WINDOW_UPDATE of the peer's does not. The stream gets 408; the connection
 * and its other streams go on. */
Test(http2, a_body_paused_past_body_timeout_gets_408_whatever_else_comes)
{
    srv.limits.body_timeout_ms = 10000;
    srv.limits.min_body_rate = 0;
    struct client c;
    client_open(&c);
    int32_t id = post_held_back(&c);
    uint64_t head = c.now;
    cr_assert_eq(md_h2_conn_deadline(c.h), head + 10000 * MS);
    for (int i = 0; i < 3; i++) { /* a PING and a WINDOW_UPDATE every 3 s */
        c.now += 3000 * MS;
        cr_assert_eq(nghttp2_submit_ping(c.cl, NGHTTP2_FLAG_NONE, NULL), 0);
        cr_assert_eq(nghttp2_submit_window_update(c.cl, NGHTTP2_FLAG_NONE, 0, 1000), 0);
        cr_assert_eq(pump(&c), 0);
        cr_assert_eq(md_h2_conn_deadline(c.h), head + 10000 * MS, "round %d", i);
    }
    c.now = head + 10000 * MS;
    bool stall;
    cr_assert_eq(md_h2_conn_timeout(c.h, c.now, &stall), MD_HTTP_EXPIRED_NONE);
    cr_assert_not(stall);
    expect_408_and_the_rest_served(&c, id);
    client_close(&c);
    expect_no_leaks();
}

Test(http2, bad_preface_closes)
{
    md_http_conn hc;
    md_h2_conn *h;
    md_http_conn_init(&hc, &srv, T0);
    cr_assert_eq(md_h2_conn_new(&h, &srv, md_http_conn_link(&hc), T0), 0);
    static const char junk[] = "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n";
    cr_assert_eq(md_h2_conn_feed(h, T0, junk, sizeof junk - 1), -EPROTO);
    md_h2_conn_free(h);
    md_http_conn_close(&hc);
    cr_assert(md_h2_is_preface(MD_H2_PREFACE, MD_H2_PREFACE_LEN));
    cr_assert(md_h2_is_preface("PRI * HT", 8));
    cr_assert_not(md_h2_is_preface("PRI", 3), "too short to tell");
    cr_assert_not(md_h2_is_preface("GET / HTTP/1.1\r\n", 16));
    expect_no_leaks();
}

/* ---- pending handlers: one that waits holds no other stream up ---- */

struct held {
    md_http_pending p;
    bool released;
    int fail_at; /* the step that fails (-EIO), 0: none */
    int step, cancelled;
};

static struct held held[4];
static int nheld;

static int held_poll(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                     md_outbuf *out)
{
    (void)cx; /* nothing to wait for in a sans-I/O test: released by the test */
    (void)io;
    struct held *h = (struct held *)p;
    if (!h->released)
        return MD_PENDING_WAIT;
    h->step++;
    if (h->step == h->fail_at)
        return -EIO;
    switch (h->step) {
    case 1:
        return md_http_respond_head(req, 200, "X-Slow: 1\r\nCache-Control: no-store\r\n",
                                    "text/plain", 6) != 0
                   ? -ENOMEM
                   : MD_PENDING_MORE;
    case 2:
        return md_outbuf_append(out, "abc", 3) != 0 ? -ENOMEM : MD_PENDING_MORE;
    default:
        return md_outbuf_append(out, "def", 3) != 0 ? -ENOMEM : 0;
    }
}

static void held_cancel(md_http_pending *p)
{
    ((struct held *)p)->cancelled++;
}

static int held_on_req(md_http_req *req, const md_route *r)
{
    (void)r; /* one route uses it */
    cr_assert_lt(nheld, 4);
    struct held *h = &held[nheld++];
    h->p.poll = held_poll;
    h->p.cancel = held_cancel;
    md_http_req_pend(req, &h->p);
    return MD_HANDLER_PENDING;
}

static const md_handler held_handler = {.name = "held", .on_req = held_on_req};

/* A piping handler (the proxy's shape): pends at the head, takes the body span by span (each
 * passed on before it asks for the next), and answers with a relayed head of unknown length. */
static struct piper {
    md_http_pending p;
    size_t got, spans, polls;
    bool held_span; /* a span is in hand, not yet passed on */
    bool stall;     /* the sink takes nothing: the span stays in hand */
    bool cancelled;
    char kept[512];
} piper;

static int piper_poll(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                      md_outbuf *out)
{
    (void)p;
    (void)cx;
    (void)io;
    piper.polls++;
    if (piper.held_span) {
        if (piper.stall)
            return MD_PENDING_WAIT;
        piper.held_span = false;
    }
    if (!md_http_req_body_done(req))
        return MD_PENDING_READ;
    char fields[128];
    int n = snprintf(fields, sizeof fields, "Content-Type: text/x\r\nX-Got: %zu\r\n", piper.got);
    if (md_http_respond_relayed(req, 201, "Created", 7, fields, (size_t)n,
                                MD_HTTP_LENGTH_UNKNOWN) != 0)
        return -ENOMEM;
    md_http_count_response(req, 201, 5);
    if (md_http_relay_body(req, out, "hello", 5) != 0)
        return -ENOMEM;
    return md_http_relay_end(req, out, NULL, 0) != 0 ? -ENOMEM : 0;
}

static void piper_cancel(md_http_pending *p)
{
    (void)p;
    piper.cancelled = true;
}

static int piper_on_head(md_http_req *req, const md_route *r, uint64_t length, bool chunked)
{
    (void)r;
    (void)length;
    (void)chunked;
    size_t tlen, len;
    const char *kept = md_http_req_head(req, &tlen, &len);
    if (kept != NULL)
        snprintf(piper.kept, sizeof piper.kept, "%.*s", (int)len, kept);
    piper.p.poll = piper_poll;
    piper.p.cancel = piper_cancel;
    md_http_req_pend(req, &piper.p);
    return MD_BODY_PIPE;
}

static int piper_on_body(md_http_req *req, const md_route *r, const char *at, size_t len)
{
    (void)req;
    (void)r;
    (void)at;
    cr_assert_not(piper.held_span, "a span came before the last was passed on");
    piper.held_span = true;
    piper.got += len;
    piper.spans++;
    return 0;
}

static const md_handler pipe_handler = {
    .name = "pipe", .on_head = piper_on_head, .on_body = piper_on_body, .on_req = held_on_req};

/* A handler that lends its body (md_http_io.lend): three bytes through out, then LEND_N bytes
 * of its own, which DATA frames take without a copy into the stream; counts its releases. */
#define LEND_N 200000
static char lend_src[LEND_N];
static struct lender {
    md_http_pending p;
    int step, released, cancelled;
    bool now; /* /lend/now: head and lent bytes in one poll, no bytes through out */
} lenders[4];
static int nlenders;

static void lend_release(void *arg)
{
    ((struct lender *)arg)->released++;
}

static int lender_poll(md_http_pending *p, md_http_req *req, mp_context *cx, md_http_io *io,
                       md_outbuf *out)
{
    struct lender *l = (struct lender *)p;
    int err = -1;
    if (l->now) {
        l->step = 2;
        cr_assert_eq(md_http_respond_head(req, 200, "", "application/octet-stream", LEND_N), 0);
        cr_assert_eq(io->lend(io, cx, lend_src, LEND_N, lend_release, l, &err), MP_READY);
        cr_assert_eq(err, 0);
        return 0;
    }
    if (++l->step == 1)
        return md_http_respond_head(req, 200, "", "application/octet-stream", 3 + LEND_N) != 0
                   ? -ENOMEM
                   : MD_PENDING_MORE;
    if (md_outbuf_append(out, "abc", 3) != 0)
        return -ENOMEM;
    cr_assert_not_null(io->lend, "an HTTP/2 stream takes lent bytes");
    cr_assert_eq(io->lend(io, cx, lend_src, LEND_N, lend_release, l, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq(io->write(io, cx, "x", 1, &err), MP_PENDING, "nothing goes after lent bytes");
    return 0;
}

static void lender_cancel(md_http_pending *p)
{
    ((struct lender *)p)->cancelled++;
}

static int lender_on_req(md_http_req *req, const md_route *r)
{
    (void)r;
    cr_assert_lt(nlenders, 4);
    struct lender *l = &lenders[nlenders++];
    size_t len;
    const char *path = md_http_req_path(req, &len);
    l->now = len == 9 && memcmp(path, "/lend/now", 9) == 0;
    l->p.poll = lender_poll;
    l->p.cancel = lender_cancel;
    md_http_req_pend(req, &l->p);
    return MD_HANDLER_PENDING;
}

static const md_handler lend_handler = {.name = "lend", .on_req = lender_on_req};

static md_route_table table;

static void held_setup(void)
{
    server_setup();
    memset(held, 0, sizeof held);
    nheld = 0;
    memset(&table, 0, sizeof table);
    char msg[128];
    cr_assert_eq(md_routes_add(&table, " = /", 1, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[0], "handler", "text", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[0], "body", "Hello, World!", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_routes_add(&table, " /slow", 2, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[1], "handler", "text", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_routes_add(&table, " /h1", 3, msg, sizeof msg), 0); /* the piping one */
    cr_assert_eq(md_route_key(&table.r[2], "handler", "text", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_routes_add(&table, " /lend", 5, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&table.r[3], "handler", "text", 0, msg, sizeof msg), 0);
    md_routes_prepare(&table);
    table.r[1].handler = &held_handler; /* a test's own handlers on the interface */
    table.r[2].handler = &pipe_handler;
    table.r[2].methods |= MD_METHOD(MD_POST);
    table.r[3].handler = &lend_handler;
    srv.routes = &table;
    srv.keep_fields = true;
    memset(&piper, 0, sizeof piper);
    memset(lenders, 0, sizeof lenders);
    nlenders = 0;
    for (size_t i = 0; i < LEND_N; i++)
        lend_src[i] = (char)(i * 7 + i / 251);
}

TestSuite(http2_pending, .init = held_setup, .timeout = 20);

Test(http2_pending, a_waiting_handler_holds_no_other_stream_up)
{
    struct client c;
    client_open(&c);
    int32_t slow = request(&c, "GET", "/slow/a", NULL, 0, false);
    int32_t fast[5];
    for (int i = 0; i < 5; i++)
        fast[i] = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    for (int i = 0; i < 5; i++) {
        cr_assert(resp_of(&c, fast[i])->closed, "stream %d answered while /slow waits", fast[i]);
        cr_assert_eq(resp_of(&c, fast[i])->status, 200);
    }
    cr_assert_not(resp_of(&c, slow)->closed);
    cr_assert_eq(resp_of(&c, slow)->status, 0);
    /* More streams come and go while it still waits. */
    int32_t later = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, later)->status, 200);
    held[0].released = true;
    cr_assert_eq(pump(&c), 0);
    struct resp *r = resp_of(&c, slow);
    cr_assert(r->closed);
    cr_assert_eq(r->rst, 0);
    cr_assert_eq(r->status, 200);
    cr_assert_eq(r->len, 6);
    cr_assert_eq(memcmp(r->body, "abcdef", 6), 0);
    cr_assert_eq(held[0].cancelled, 0);
    client_close(&c);
    expect_no_leaks();
}

Test(http2_pending, a_failing_handler_resets_its_stream_only)
{
    struct client c;
    client_open(&c);
    int32_t bad = request(&c, "GET", "/slow/a", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    held[0].fail_at = 2; /* after its head */
    held[0].released = true;
    int32_t ok = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert(resp_of(&c, bad)->closed);
    cr_assert_eq(resp_of(&c, bad)->rst, NGHTTP2_INTERNAL_ERROR);
    cr_assert_eq(resp_of(&c, ok)->status, 200);
    cr_assert_not(md_h2_conn_done(c.h));
    client_close(&c);
    expect_no_leaks();
}

Test(http2_pending, closing_cancels_waiting_handlers)
{
    struct client c;
    client_open(&c);
    (void)request(&c, "GET", "/slow/a", NULL, 0, false);
    (void)request(&c, "GET", "/slow/b", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(nheld, 2);
    client_close(&c);
    cr_assert_eq(held[0].cancelled, 1);
    cr_assert_eq(held[1].cancelled, 1);
    expect_no_leaks();
}

Test(http2_pending, a_piping_handler_takes_the_body_span_by_span_and_relays_its_head)
{
    struct client c;
    client_open(&c);
    static char big[200000];
    memset(big, 'x', sizeof big);
    c.up = big;
    c.up_len = sizeof big;
    nghttp2_nv cookie[] = {
        {(uint8_t *)"cookie", (uint8_t *)"a=1", 6, 3, 0},
        {(uint8_t *)"x-app", (uint8_t *)"v", 5, 1, 0},
        {(uint8_t *)"cookie", (uint8_t *)"b=2", 6, 3, 0},
    };
    int32_t id = request(&c, "POST", "/h1/up?q=1", cookie, 3, true);
    int32_t ok = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    struct resp *r = resp_of(&c, id);
    cr_assert(r->closed);
    cr_assert_eq(r->rst, 0);
    cr_assert_eq(r->status, 201);
    cr_assert_str_eq(r->ctype, "text/x");
    cr_assert_eq(r->clen, 0, "no content-length for a body of unknown length");
    cr_assert_not(r->has_date, "a relayed head carries the upstream's fields only");
    cr_assert_eq(r->len, 5);
    cr_assert_eq(piper.got, sizeof big);
    cr_assert_gt(piper.spans, 12, "spans of at most 16 KiB");
    cr_assert_str_eq(piper.kept, "/h1/up?q=1\r\nhost: a\r\nx-app: v\r\ncookie: a=1; b=2\r\n");
    cr_assert_eq(resp_of(&c, ok)->status, 200);
    cr_assert_not(piper.cancelled);
    client_close(&c);
    expect_no_leaks();
}

Test(http2_pending, a_piping_handler_that_holds_its_span_holds_the_window_shut)
{
    struct client c;
    client_open(&c);
    static char big[300000];
    memset(big, 'y', sizeof big);
    c.up = big;
    c.up_len = sizeof big;
    piper.stall = true;
    int32_t id = request(&c, "POST", "/h1/up", NULL, 0, true);
    cr_assert_eq(pump(&c), 0);
    /* One span in hand, the rest of the stream's window held by the server: no more. */
    cr_assert_eq(piper.spans, 1);
    cr_assert_lt(c.up_off, sizeof big);
    cr_assert_leq(c.up_off, (size_t)srv.limits.http2_window + 16384);
    int32_t ok = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, ok)->status, 200, "another stream is not held up");
    piper.stall = false;
    cr_assert(md_h2_conn_run(c.h, NULL, c.now));
    cr_assert_eq(pump(&c), 0);
    struct resp *r = resp_of(&c, id);
    cr_assert_eq(r->status, 201);
    cr_assert_eq(piper.got, sizeof big);
    client_close(&c);
    expect_no_leaks();
}

/* The body a lender sends: "abc", then lend_src. */
static void expect_lent_body(struct client *c, int32_t id)
{
    struct resp *r = resp_of(c, id);
    cr_assert(r->closed);
    cr_assert_eq(r->rst, 0);
    cr_assert_eq(r->status, 200);
    cr_assert_eq(r->clen, 3 + LEND_N);
    cr_assert_eq(r->len, 3 + LEND_N);
    cr_assert_eq(memcmp(r->body, "abc", 3), 0);
    cr_assert_eq(memcmp(r->body + 3, lend_src, LEND_N), 0, "the lent bytes, in order");
}

Test(http2_pending, lent_bytes_follow_the_output_and_are_released_once_sent)
{
    struct client c;
    client_open(&c);
    int32_t id = request(&c, "GET", "/lend/a", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    expect_lent_body(&c, id);
    cr_assert_eq(lenders[0].released, 1);
    cr_assert_eq(lenders[0].cancelled, 0);
    client_close(&c);
    cr_assert_eq(lenders[0].released, 1, "not again at the close");
    expect_no_leaks();
}

Test(http2_pending, lent_bytes_go_through_small_windows_on_streams_side_by_side)
{
    struct client c;
    client_open(&c);
    /* 1000-byte stream windows: the first frame is "abc" and 997 lent bytes, the rest of
     * them a thousand at a time, as the client gives its window back; four streams share the
     * connection's window, with a small response between them. */
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1000}};
    cr_assert_eq(nghttp2_submit_settings(c.cl, NGHTTP2_FLAG_NONE, iv, 1), 0);
    cr_assert_eq(pump(&c), 0);
    int32_t id[4];
    for (int i = 0; i < 4; i++)
        id[i] = request(&c, "GET", "/lend/a", NULL, 0, false);
    int32_t small = request(&c, "GET", "/", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    for (int i = 0; i < 4; i++) {
        expect_lent_body(&c, id[i]);
        cr_assert_eq(lenders[i].released, 1);
    }
    cr_assert_eq(resp_of(&c, small)->status, 200);
    client_close(&c);
    expect_no_leaks();
}

Test(http2_pending, lent_bytes_are_released_when_the_stream_or_connection_ends_first)
{
    struct client c;
    client_open(&c);
    /* No window for responses: the lent bytes wait in the stream. */
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
    cr_assert_eq(nghttp2_submit_settings(c.cl, NGHTTP2_FLAG_NONE, iv, 1), 0);
    cr_assert_eq(pump(&c), 0);
    int32_t reset = request(&c, "GET", "/lend/a", NULL, 0, false);
    (void)request(&c, "GET", "/lend/b", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(resp_of(&c, reset)->status, 200);
    cr_assert_eq(lenders[0].step, 2, "its bytes are lent");
    cr_assert_eq(lenders[0].released, 0, "and held while they wait for a window");
    /* The client resets one stream mid-body: its bytes go back at once. */
    cr_assert_eq(nghttp2_submit_rst_stream(c.cl, NGHTTP2_FLAG_NONE, reset, NGHTTP2_CANCEL), 0);
    cr_assert_eq(pump(&c), 0);
    cr_assert_eq(lenders[0].released, 1);
    cr_assert_eq(lenders[1].released, 0);
    /* The connection closes under the other: released there. */
    client_close(&c);
    cr_assert_eq(lenders[1].released, 1);
    cr_assert_eq(lenders[0].released + lenders[1].released, 2, "once each");
    expect_no_leaks();
}

Test(http2_pending, lent_bytes_of_a_head_response_are_released_at_once)
{
    struct client c;
    client_open(&c);
    /* Lent in the poll that gave the head: a HEAD has no body to send them in. */
    int32_t id = request(&c, "HEAD", "/lend/now", NULL, 0, false);
    /* A later poll's: the stream ended with its HEADERS, the handler is cancelled unpolled. */
    int32_t later = request(&c, "HEAD", "/lend/a", NULL, 0, false);
    /* And the same lend in a GET goes out whole. */
    int32_t get = request(&c, "GET", "/lend/now", NULL, 0, false);
    cr_assert_eq(pump(&c), 0);
    for (int i = 0; i < 2; i++) {
        struct resp *r = resp_of(&c, i == 0 ? id : later);
        cr_assert(r->closed);
        cr_assert_eq(r->status, 200);
        cr_assert_eq(r->len, 0);
    }
    cr_assert(lenders[0].now);
    cr_assert_eq(lenders[0].released, 1);
    cr_assert_eq(lenders[1].released, 0);
    cr_assert_eq(lenders[1].cancelled, 1);
    struct resp *g = resp_of(&c, get);
    cr_assert_eq(g->len, LEND_N);
    cr_assert_eq(memcmp(g->body, lend_src, LEND_N), 0);
    cr_assert_eq(lenders[2].released, 1);
    client_close(&c);
    cr_assert_eq(lenders[0].released + lenders[1].released + lenders[2].released, 2);
    expect_no_leaks();
}
