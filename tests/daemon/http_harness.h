/* A driver for daemon/http/http1.c in tests: a fixed clock, a server with the default limits, and a
 * session that feeds bytes the way the I/O layer will (re-feeding after MD_HTTP_WANT_WRITE)
 * and compares what comes out.
 */
#ifndef TESTS_DAEMON_HTTP_HARNESS_H
#define TESTS_DAEMON_HTTP_HARNESS_H

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http1.h"
#include "core/metrics.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

/* Under ASan, fails the test if anything unreachable is still allocated. LeakSanitizer's own
 * report at exit comes too late for Criterion to count, so tests call this at their end. */
static inline void expect_no_leaks(void)
{
#ifdef __SANITIZE_ADDRESS__
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "memory leaked (report above)");
#endif
}

#define T0   UINT64_C(1000000000000) /* monotonic ns at accept */
#define MS   UINT64_C(1000000)
#define DATE "Date: Fri, 21 Nov 2025 08:37:00 GMT\r\nServer: magpied\r\n"

static inline time_t fixed_clock(void)
{
    return 1763714220;
}

/* The client every test's requests come from (md_http_server.peer_addr): a loopback address,
 * which the built-in /echo and /metrics let in; a test of the allow and deny rules sets
 * another. */
static uint32_t peer_ipv4 = 0x7f000001;

static inline int test_peer_addr(struct md_http_link *link, struct sockaddr_storage *out)
{
    (void)link;
    memset(out, 0, sizeof *out);
    struct sockaddr_in *in = (struct sockaddr_in *)out;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(peer_ipv4);
    return 0;
}

static md_http_server srv;

static inline void server_setup(void)
{
    memset(&srv, 0, sizeof(srv));
    md_http_limits_default(&srv.limits);
    srv.clock = fixed_clock;
    srv.peer_addr = test_peer_addr;
    peer_ipv4 = 0x7f000001;
}

struct session {
    md_http_conn c;
    md_outbuf out;
    int want;
    int flushes; /* MD_HTTP_WANT_WRITE returns */
};

static inline void session_open(struct session *s)
{
    memset(s, 0, sizeof(*s));
    md_outbuf_init(&s->out);
    md_http_conn_init(&s->c, &srv, T0);
}

static inline void session_close(struct session *s)
{
    md_http_conn_close(&s->c);
    md_outbuf_free(&s->out);
}

/* Feeds everything at time now, as the I/O layer would: after WANT_WRITE the rest again. */
static inline int feed_at(struct session *s, uint64_t now, const char *data, size_t len)
{
    for (;;) {
        size_t used = 0;
        int want = md_http_conn_feed(&s->c, now, data, len, &used, &s->out);
        cr_assert_geq(want, 0, "feed failed: %d", want);
        cr_assert_leq(used, len);
        s->want = want;
        if (want != MD_HTTP_WANT_WRITE) {
            cr_assert_eq(used, len, "used %zu of %zu with want %d", used, len, want);
            return want;
        }
        s->flushes++;
        data += used;
        len -= used;
    }
}

static inline int feed(struct session *s, const char *text)
{
    return feed_at(s, T0, text, strlen(text));
}

/* Test strings in messages: control characters escaped, long ones cut. */
static inline const char *show(const char *p, size_t n)
{
    static char buf[4][2048];
    static int which;
    char *b = buf[which++ % 4];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < sizeof(buf[0]); i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r')
            o += (size_t)sprintf(b + o, "\\r");
        else if (ch == '\n')
            o += (size_t)sprintf(b + o, "\\n");
        else if (ch < 32 || ch > 126)
            o += (size_t)sprintf(b + o, "\\x%02x", ch);
        else
            b[o++] = (char)ch;
    }
    b[o] = '\0';
    return b;
}

/* The input under test, for failure messages. */
static const char *current_input = "";

/* The output so far must be exactly want; it is then consumed, as a write would. */
static inline void expect_out_n(struct session *s, const char *want, size_t n)
{
    size_t have = md_outbuf_pending(&s->out);
    const char *p = md_outbuf_pending_data(&s->out);
    cr_assert(have == n && (n == 0 || memcmp(p, want, n) == 0),
              "output differs\n  input: %s\n  got:   %s\n  want:  %s",
              show(current_input, strlen(current_input)), show(p, have), show(want, n));
    md_outbuf_consume(&s->out, have);
}

static inline void expect_out(struct session *s, const char *want)
{
    expect_out_n(s, want, strlen(want));
}

/* Builds expected responses. */
struct sb {
    char buf[1 << 16];
    size_t len;
};

static inline void sb_add(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void sb_add(struct sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, sizeof(b->buf) - b->len, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof(b->buf) - b->len);
    b->len += (size_t)n;
}

/* status: "200 OK"; conn: NULL, "close" or "keep-alive"; allow may be NULL; head: no body. */
static inline void sb_resp(struct sb *b, const char *status, const char *conn, const char *allow,
                           const char *ctype, const char *body, size_t body_len, int head)
{
    sb_add(b, "HTTP/1.1 %s\r\n" DATE, status);
    if (conn != NULL)
        sb_add(b, "Connection: %s\r\n", conn);
    if (allow != NULL)
        sb_add(b, "Allow: %s\r\n", allow);
    sb_add(b, "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n", ctype, body_len);
    if (!head) {
        cr_assert(b->len + body_len <= sizeof(b->buf));
        memcpy(b->buf + b->len, body, body_len);
        b->len += body_len;
    }
}

static inline void sb_text(struct sb *b, const char *status, const char *conn, const char *body)
{
    sb_resp(b, status, conn, NULL, "text/plain", body, strlen(body), 0);
}

static inline void sb_hello(struct sb *b, const char *conn)
{
    sb_text(b, "200 OK", conn, "Hello, World!");
}

static inline void sb_error(struct sb *b, const char *status, const char *conn)
{
    char body[64];
    snprintf(body, sizeof(body), "%s\n", strchr(status, ' ') + 1);
    sb_text(b, status, conn, body);
}

static inline void expect_sb(struct session *s, const struct sb *b)
{
    expect_out_n(s, b->buf, b->len);
}

/* Requests that must be refused with 400 and a close. */
static const char *const malformed[] = {
    "GARBAGE\r\n\r\n",
    "GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
    "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET / HTTP/1.1\nHost: a\n\n",
    "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
    "GET / HTTP/1.1\r\nBad Name: x\r\nHost: a\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n",
    "GET / HTTP/1.x\r\nHost: a\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
};

static const char *const smuggling[] = {
    /* CL + TE, both orders */
    "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    "0\r\n\r\n",
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
    "0\r\n\r\n",
    /* two Content-Lengths, different and equal, and in one field */
    "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\na",
    "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\nab",
    /* TE in HTTP/1.0 */
    "POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
    /* TE that does not end in chunked, or chunked twice */
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nabc",
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabc",
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
    "\r\n\r\n0\r\n\r\n",
    /* obs-fold: after a value, after an empty value, with a tab, on Host, on Content-Length */
    "GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nX:\r\n c\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n\tc\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n",
    "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n 1\r\n\r\na",
    /* whitespace before the colon */
    "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 0\r\n\r\n",
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    /* Host missing or repeated in HTTP/1.1 */
    "GET / HTTP/1.1\r\n\r\n",
    "GET http://a/ HTTP/1.1\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    /* whitespace in a trailer name, a folded trailer */
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT : v\r\n\r\n",
    "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: v\r\n w\r\n\r\n",
};
#define NMALFORMED (sizeof(malformed) / sizeof(malformed[0]))
#define NSMUGGLING (sizeof(smuggling) / sizeof(smuggling[0]))

#endif
