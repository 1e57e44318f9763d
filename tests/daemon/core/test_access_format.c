/* Tests of daemon/core/access_format.c: the combined, JSON and template access-log lines. (The
 * sample lines, escaping of every byte and the field caps are also checked through the logger in
 * test_log.c.) */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
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

/* Templates (access_format = a line of $fields). */

static void expect_template(const char *text, const md_access_entry *e, const char *want)
{
    char msg[256] = "";
    const md_access_template *t = md_access_template_intern(text, msg, sizeof msg);
    cr_assert_not_null(t, "%s: %s", text, msg);
    char buf[MD_LOG_ACCESS_LINE_MAX];
    size_t n = md_log_access_format_template(buf, t, false, e);
    cr_assert_eq(n, strlen(want), "got %.*s", (int)n, buf);
    cr_assert_eq(memcmp(buf, want, n), 0, "got  %.*swant %s", (int)n, buf, want);
}

Test(access_format, a_template_shows_every_field)
{
    md_access_entry e = entry();
    e.referer = "http://r/";
    e.referer_len = 9;
    e.user_agent = "ua \"x\"";
    e.user_agent_len = 6;
    e.duration_ns = 1234567890; /* 1.234 s */
    /* $request and $request_uri both hold the target: one template each, as a line of both
     * and every other field could outgrow an access line (refused below). */
    expect_template("$remote_addr [$time_local] $time_iso8601 \"$request\" $status "
                    "$body_bytes_sent \"$http_referer\" \"$http_user_agent\" rt=$request_time "
                    "ua=$upstream_addr uht=$upstream_header_time",
                    &e,
                    "192.0.2.7 [21/Nov/2025:08:37:00 +0000] 2025-11-21T08:37:00Z \"GET /a?b=c "
                    "HTTP/1.1\" 200 13 \"http://r/\" \"ua \\x22x\\x22\" rt=1.234 ua=- uht=-\n");
    expect_template("$request_method $request_uri $server_protocol", &e, "GET /a?b=c HTTP/1.1\n");
    e.upstream = "app.internal:8080";
    e.upstream_len = strlen(e.upstream);
    e.upstream_ms = 7;
    expect_template("${upstream_addr}:${upstream_header_time}$status", &e,
                    "app.internal:8080:0.007200\n");
}

Test(access_format, a_template_without_a_request_shows_dashes)
{
    md_access_entry e = entry();
    e.method = NULL;
    e.method_len = 0;
    e.target = NULL;
    e.target_len = 0;
    e.peer = NULL;
    e.duration_ns = 0;
    expect_template("$remote_addr \"$request\" $status $request_time", &e, "- \"-\" 200 0.000\n");
    expect_template("$request_method $request_uri $server_protocol", &e, "- - -\n");
}

Test(access_format, a_template_is_escaped_and_cut_as_combined)
{
    md_access_entry e = entry();
    static char target[5000];
    memset(target, 'a', sizeof target);
    target[0] = '/';
    target[1] = '\x01';
    e.target = target;
    e.target_len = sizeof target;
    char buf[MD_LOG_ACCESS_LINE_MAX];
    const md_access_template *t = md_access_template_intern("$request_uri", NULL, 0);
    cr_assert_not_null(t);
    size_t n = md_log_access_format_template(buf, t, true, &e);
    cr_assert_leq(n, 4096 + 4);
    cr_assert_eq(memcmp(buf, "<6>/\\x01aaa", 11), 0, "got %.20s", buf);
    cr_assert_eq(memcmp(buf + n - 4, "...\n", 4), 0);
}

Test(access_format, templates_are_interned_by_their_text)
{
    const md_access_template *a = md_access_template_intern("$status x", NULL, 0);
    const md_access_template *b = md_access_template_intern("$status x", NULL, 0);
    const md_access_template *c = md_access_template_intern("$status y", NULL, 0);
    cr_assert_not_null(a);
    cr_assert_eq(a, b);
    cr_assert_neq(a, c);
    cr_assert_eq((uintptr_t)a % 8, 0, "the access log's word keeps flags in the low bits");
}

static void expect_refused(const char *text, const char *why)
{
    char msg[256] = "";
    cr_assert_eq(md_access_template_check(text, msg, sizeof msg), -EINVAL, "%s", text);
    cr_assert_not_null(strstr(msg, why), "%s: %s", text, msg);
    cr_assert_null(md_access_template_intern(text, msg, sizeof msg));
}

Test(access_format, bad_templates_are_refused_with_the_reason)
{
    expect_refused("$status $bogus", "unknown field \"$bogus\"");
    expect_refused("cost $", "not followed by a field name");
    expect_refused("${status", "not followed by a field name and \"}\"");
    expect_refused("${}", "not followed by a field name");
    expect_refused("$status\x01", "control byte");
    expect_refused("$request_uri $request_uri $http_user_agent", "over the 8192");
    char many[MD_LOG_TEMPLATE_MAX + 8];
    memset(many, 'x', sizeof many - 1);
    many[sizeof many - 1] = '\0';
    expect_refused(many, "at most");
    char ops[600] = "";
    for (int i = 0; i < 70; i++)
        strcat(ops, "$status ");
    expect_refused(ops, "more than 64");
    cr_assert_eq(md_access_template_check("$status\t${status}x", NULL, 0), 0);
}

Test(access_format, json_names_the_upstream_of_a_proxied_request)
{
    md_access_entry e = entry();
    e.upstream = "10.0.0.2:80";
    e.upstream_len = strlen(e.upstream);
    e.upstream_ms = 42;
    expect_line(&e, MD_ACCESS_FORMAT_JSON, false,
                "{\"time\":\"2025-11-21T08:37:00Z\",\"remote_addr\":\"192.0.2.7\",\"method\":"
                "\"GET\",\"target\":\"/a?b=c\",\"protocol\":\"HTTP/1.1\",\"status\":200,"
                "\"body_bytes\":13,\"referer\":\"\",\"user_agent\":\"\",\"duration_us\":1234,"
                "\"upstream_addr\":\"10.0.0.2:80\",\"upstream_header_ms\":42}\n");
}
