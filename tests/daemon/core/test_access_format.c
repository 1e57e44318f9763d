/* Tests of daemon/core/access_format.c: the combined and JSON access-log lines. (The sample lines,
 * escaping of every byte and the field caps are also checked through the logger in
 * test_log.c.) */
#include <criterion/criterion.h>

#include <string.h>

#include "core/log.h"

TestSuite(access_format, .timeout = 10);

static md_access_entry entry(void)
{
    md_access_entry e;
    memset(&e, 0, sizeof e);
    e.peer = "192.0.2.7";
    e.time = 1763714220; /* 2025-11-21T08:37:00Z */
    e.method = "GET";
    e.method_len = 3;
    e.target = "/a?b=c";
    e.target_len = 6;
    e.http_major = 1;
    e.http_minor = 1;
    e.status = 200;
    e.body_bytes = 13;
    e.duration_ns = 1234567;
    return e;
}

static void expect_line(const md_access_entry *e, md_access_format f, bool prefixed,
                        const char *want)
{
    char buf[MD_LOG_ACCESS_LINE_MAX];
    size_t n = md_log_access_format(buf, f, prefixed, e);
    cr_assert_eq(n, strlen(want), "got %.*s", (int)n, buf);
    cr_assert_eq(memcmp(buf, want, n), 0, "got  %.*swant %s", (int)n, buf, want);
}

Test(access_format, absent_fields_are_a_dash_in_combined_and_empty_in_json)
{
    md_access_entry e = entry();
    expect_line(&e, MD_ACCESS_FORMAT_COMBINED, false,
                "192.0.2.7 - - [21/Nov/2025:08:37:00 +0000] \"GET /a?b=c HTTP/1.1\" 200 13 \"-\" "
                "\"-\"\n");
    expect_line(&e, MD_ACCESS_FORMAT_JSON, false,
                "{\"time\":\"2025-11-21T08:37:00Z\",\"remote_addr\":\"192.0.2.7\",\"method\":"
                "\"GET\",\"target\":\"/a?b=c\",\"protocol\":\"HTTP/1.1\",\"status\":200,"
                "\"body_bytes\":13,\"referer\":\"\",\"user_agent\":\"\",\"duration_us\":1234}\n");
    e.peer = NULL;
    e.target = NULL;
    e.target_len = 0;
    expect_line(&e, MD_ACCESS_FORMAT_COMBINED, false,
                "- - - [21/Nov/2025:08:37:00 +0000] \"GET - HTTP/1.1\" 200 13 \"-\" \"-\"\n");
}

Test(access_format, no_request_line_without_a_method)
{
    md_access_entry e = entry();
    e.method = NULL;
    e.method_len = 0;
    e.status = 400;
    e.body_bytes = 0;
    expect_line(&e, MD_ACCESS_FORMAT_COMBINED, true,
                "<6>192.0.2.7 - - [21/Nov/2025:08:37:00 +0000] \"-\" 400 0 \"-\" \"-\"\n");
    char buf[MD_LOG_ACCESS_LINE_MAX];
    size_t n = md_log_access_format(buf, MD_ACCESS_FORMAT_JSON, false, &e);
    buf[n] = '\0';
    cr_assert_not_null(strstr(buf, "\"method\":\"\",\"target\":\"/a?b=c\",\"protocol\":\"\","),
                       "%s", buf);
}

Test(access_format, escapes_differ_by_format)
{
    md_access_entry e = entry();
    e.user_agent = "a\"b\\c\x01\xff";
    e.user_agent_len = 7;
    char buf[MD_LOG_ACCESS_LINE_MAX];
    size_t n = md_log_access_format(buf, MD_ACCESS_FORMAT_COMBINED, false, &e);
    buf[n] = '\0';
    cr_assert_not_null(strstr(buf, "\"a\\x22b\\x5Cc\\x01\\xFF\"\n"), "%s", buf);
    n = md_log_access_format(buf, MD_ACCESS_FORMAT_JSON, false, &e);
    buf[n] = '\0';
    cr_assert_not_null(strstr(buf, "\"user_agent\":\"a\\\"b\\\\c\\u0001\\u00ff\""), "%s", buf);
}

Test(access_format, the_time_follows_each_entry)
{
    /* The formatted second is cached per thread: a new second must not reuse it. */
    md_access_entry e = entry();
    expect_line(&e, MD_ACCESS_FORMAT_COMBINED, false,
                "192.0.2.7 - - [21/Nov/2025:08:37:00 +0000] \"GET /a?b=c HTTP/1.1\" 200 13 \"-\" "
                "\"-\"\n");
    e.time += 86400 + 3661;
    expect_line(&e, MD_ACCESS_FORMAT_COMBINED, false,
                "192.0.2.7 - - [22/Nov/2025:09:38:01 +0000] \"GET /a?b=c HTTP/1.1\" 200 13 \"-\" "
                "\"-\"\n");
}
