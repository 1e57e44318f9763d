/* Tests for daemon/http/headers.c: header_add, header_set, header_remove and header_always,
 * their strict checks, and the filter over a handler's fields. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "http/headers.h"

static int key(md_route_headers *h, const char *k, const char *v)
{
    char msg[200];
    return md_headers_key(h, k, v, msg, sizeof msg);
}

static const char *filter(const md_route_headers *h, const char *fields)
{
    static char out[2048];
    size_t n = md_headers_filter(h, fields, strlen(fields), out);
    out[n] = '\0';
    return out;
}

Test(headers, add_set_remove_on_a_handlers_fields, .timeout = 5)
{
    md_route_headers h = {0};
    cr_assert_eq(key(&h, "header_add", "X-Frame-Options: DENY"), 0);
    cr_assert_eq(key(&h, "header_set", "Cache-Control:   no-store  "), 0);
    cr_assert_eq(key(&h, "header_remove", "ETag"), 0);
    cr_assert_eq(key(&h, "header_add", "Link: </a.css>; rel=preload"), 0);
    cr_assert_eq(key(&h, "header_remove", "x-powered-by"), 0);
    cr_assert_str_eq(filter(&h, "ETag: \"1\"\r\ncache-control: max-age=60\r\nLocation: /x\r\n"
                                "X-Powered-By: php\r\n"),
                     "Location: /x\r\nX-Frame-Options: DENY\r\nCache-Control: no-store\r\n"
                     "Link: </a.css>; rel=preload\r\n");
    cr_assert_str_eq(filter(&h, ""), "X-Frame-Options: DENY\r\nCache-Control: no-store\r\n"
                                     "Link: </a.css>; rel=preload\r\n");
    cr_assert(md_headers_drops(&h, "ETAG", 4));
    cr_assert(md_headers_drops(&h, "Cache-Control", 13));
    cr_assert_not(md_headers_drops(&h, "X-Frame-Options", 15), "added, not replaced");
    cr_assert_not(md_headers_drops(&h, "ETa", 3));
}

Test(headers, statuses_they_apply_to, .timeout = 5)
{
    md_route_headers h = {0};
    cr_assert_not(md_headers_apply(&h, 200), "no rules");
    key(&h, "header_add", "X-A: 1");
    cr_assert(md_headers_apply(&h, 200));
    cr_assert(md_headers_apply(&h, 304));
    cr_assert(md_headers_apply(&h, 308));
    cr_assert_not(md_headers_apply(&h, 404));
    cr_assert_not(md_headers_apply(&h, 401));
    cr_assert_eq(key(&h, "header_always", "on"), 0);
    cr_assert(md_headers_apply(&h, 404));
    cr_assert(md_headers_apply(&h, 502));
    cr_assert_eq(key(&h, "header_always", "maybe"), -EINVAL);
}

Test(headers, strict_names_and_values, .timeout = 5)
{
    md_route_headers h = {0};
    const char *bad_add[] = {
        "X-A",              /* no colon */
        ": v",              /* no name */
        "X A: v",           /* a space in the name */
        "X-A : v",          /* a space before the colon */
        "X-\"A\": v",       /* not a token */
        "X-A: caf\xc3\xa9", /* not ASCII */
        "X-A: a\tb",        /* a control byte */
        "X-A: a\rb",        /* CR */
        "Content-Length: 5",
        "Transfer-Encoding: chunked",
        "connection: close",
        "Date: x",
        "Server: x",
        "Content-Type: text/html",
        "WWW-Authenticate: Basic",
    };
    for (size_t i = 0; i < sizeof bad_add / sizeof bad_add[0]; i++) {
        cr_assert_eq(key(&h, "header_add", bad_add[i]), -EINVAL, "%s", bad_add[i]);
        cr_assert_eq(key(&h, "header_set", bad_add[i]), -EINVAL, "%s", bad_add[i]);
    }
    cr_assert_eq(key(&h, "header_remove", "X-A: v"), -EINVAL);
    cr_assert_eq(key(&h, "header_remove", "Content-Length"), -EINVAL);
    cr_assert_eq(key(&h, "header_remove", ""), -EINVAL);
    cr_assert_eq(key(&h, "header_other", "X: y"), -ENOENT);
    cr_assert_eq(h.add_len, 0);
    cr_assert_eq(h.drop_len, 0);
    cr_assert_eq(key(&h, "header_add", "X-Empty:"), 0, "an empty value is a value");
    cr_assert_str_eq(filter(&h, ""), "X-Empty: \r\n");
}

Test(headers, rules_past_their_room_are_refused, .timeout = 5)
{
    md_route_headers h = {0};
    char v[128];
    memset(v, 'a', sizeof v);
    memcpy(v, "X-Long: ", 8);
    v[sizeof v - 1] = '\0';
    int rc = 0, i;
    for (i = 0; i < 10 && rc == 0; i++)
        rc = key(&h, "header_add", v);
    cr_assert_eq(rc, -EINVAL);
    cr_assert_leq(h.add_len, MD_HEADERS_ADD_MAX);
    char msg[200];
    cr_assert_eq(md_headers_key(&h, "header_add", v, msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "bytes of fields added"), "%s", msg);
}
