/* Tests for daemon/http/response.c: the status table, IMF-fixdate, heads, the canned cache. */
#include <criterion/criterion.h>
#include <locale.h>
#include <stdio.h>
#include <string.h>

#include "http/response.h"

static time_t fake_now;

static time_t fake_clock(void)
{
    return fake_now;
}

static char *head(char *buf, const md_http_status *st, bool close, bool http10, const char *allow,
                  uint64_t length)
{
    char *end = md_http_put_head(buf, st, close, http10, allow, "text/plain", length);
    cr_assert_lt((size_t)(end - buf), MD_HTTP_HEAD_MAX);
    *end = '\0';
    return buf;
}

Test(response, statuses, .timeout = 5)
{
    unsigned codes[] = {200, 400, 404, 405, 408, 413, 414, 417, 431, 500, 501, 505};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const md_http_status *st = md_http_status_of(codes[i]);
        cr_assert_eq(st->code, codes[i]);
        cr_assert_eq(strlen(st->line), st->line_len);
        cr_assert_eq(strlen(st->body), st->body_len);
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "HTTP/1.1 %u ", codes[i]);
        cr_assert_eq(strncmp(st->line, prefix, strlen(prefix)), 0);
    }
    cr_assert_eq(md_http_status_of(299)->code, 500);
    cr_assert_str_eq(md_http_status_of(413)->line, "HTTP/1.1 413 Content Too Large\r\n");
}

Test(response, date_is_imf_fixdate_in_any_locale, .timeout = 5)
{
    char buf[MD_HTTP_HEAD_MAX];
    setlocale(LC_ALL, ""); /* whatever the environment says: the names must stay English */
    fake_now = 784111777;  /* RFC 9110's example */
    md_http_date_refresh(fake_clock);
    cr_assert_str_eq(head(buf, md_http_status_of(200), false, false, NULL, 5),
                     "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
                     "Server: magpied\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n");
    fake_now = 1763714220;
    md_http_date_refresh(fake_clock);
    cr_assert_not_null(strstr(head(buf, md_http_status_of(200), false, false, NULL, 0),
                              "\r\nDate: Fri, 21 Nov 2025 08:37:00 GMT\r\n"));
    fake_now = 951782400; /* a leap day */
    md_http_date_refresh(fake_clock);
    cr_assert_not_null(strstr(head(buf, md_http_status_of(200), false, false, NULL, 0),
                              "\r\nDate: Tue, 29 Feb 2000 00:00:00 GMT\r\n"));
}

Test(response, connection_and_allow, .timeout = 5)
{
    char buf[MD_HTTP_HEAD_MAX];
    fake_now = 784111777;
    md_http_date_refresh(fake_clock);
    cr_assert_str_eq(head(buf, md_http_status_of(405), true, false, "GET, HEAD", 19),
                     "HTTP/1.1 405 Method Not Allowed\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
                     "Server: magpied\r\nConnection: close\r\nAllow: GET, HEAD\r\n"
                     "Content-Type: text/plain\r\nContent-Length: 19\r\n\r\n");
    cr_assert_not_null(strstr(head(buf, md_http_status_of(200), false, true, NULL, 0),
                              "\r\nConnection: keep-alive\r\n"));
    cr_assert_not_null(strstr(head(buf, md_http_status_of(200), true, true, NULL, 0),
                              "\r\nConnection: close\r\n"));
    cr_assert_not_null(strstr(head(buf, md_http_status_of(200), false, false, NULL, UINT64_MAX - 1),
                              "\r\nContent-Length: 18446744073709551614\r\n\r\n"));
    /* A body coded on the fly: chunked, no length. */
    cr_assert_not_null(
        strstr(head(buf, md_http_status_of(200), false, false, NULL, MD_HTTP_LENGTH_CODED),
               "\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"));
}

Test(response, canned_follows_the_second, .timeout = 5)
{
    size_t len;
    fake_now = 784111777;
    md_http_date_refresh(fake_clock);
    const char *r = md_http_canned(0, 1, "text/plain", NULL, 0, "Hello, World!", 13, &len);
    cr_assert_not_null(r);
    const char want[] =
        "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nServer: magpied\r\n"
        "Content-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
    cr_assert_eq(len, sizeof(want) - 1);
    cr_assert_eq(memcmp(r, want, len), 0);
    fake_now++;
    md_http_date_refresh(fake_clock);
    r = md_http_canned(0, 1, "text/plain", NULL, 0, "Hello, World!", 13, &len);
    cr_assert_not_null(memmem(r, len, "08:49:38 GMT", 12), "stale Date after the second changed");
    cr_assert_null(md_http_canned(MD_HTTP_CANNED_SLOTS, 1, "text/plain", NULL, 0, "x", 1, &len));
}

/* A route's added fields are part of its canned response; fields that cannot fit refuse it. */
Test(response, canned_carries_the_fields, .timeout = 5)
{
    size_t len;
    fake_now = 784111777;
    md_http_date_refresh(fake_clock);
    const char *r = md_http_canned(1, 2, "text/plain", "X-A: 1\r\nX-B: 2\r\n", 16, "hi", 2, &len);
    cr_assert_not_null(r);
    cr_assert_not_null(memmem(r, len, "\r\nX-A: 1\r\nX-B: 2\r\n", 18));
    cr_assert_not_null(memmem(r, len, "Content-Length: 2\r\n", 19));
    cr_assert_eq(memcmp(r + len - 6, "\r\n\r\nhi", 6), 0);
    static char big[MD_HTTP_CANNED_MAX];
    memset(big, 'x', sizeof big);
    memcpy(big, "X-C: ", 5);
    memcpy(big + sizeof big - 2, "\r\n", 2);
    cr_assert_null(md_http_canned(2, 2, "text/plain", big, sizeof big, "hi", 2, &len));
}
