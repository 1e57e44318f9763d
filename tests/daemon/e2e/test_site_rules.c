/* End-to-end tests of a site's own header rules and error pages (sites.h): [http]'s for the
 * default site and [site NAME]'s, on the responses given without a route. Errors found before
 * the route is known (a malformed request's 400, an oversized header's 431, an unsupported
 * version's 505) and the 404 of a path no route matches get the site's fields and page, keep
 * Connection: close where the error ends the connection, over HTTP/1.1 and HTTP/2; a route
 * with rules of its own keeps them, one without has the site's; magpied -t names bad keys
 * with file:line. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"

static char dir[64];

static void dir_make(void)
{
    harness_dir_make(dir, sizeof dir, "site");
}

static void dir_remove(void)
{
    harness_dir_remove(dir);
}

TestSuite(site_rules, .init = dir_make, .fini = dir_remove, .timeout = 30);

/* The default site ([http]) with a security header on every response it gives without a
 * route and pages for 400 (a file) and 431 (a text); [site b] with its own; routes /r (with a
 * rule of its own) and /plain. */
static daemon_proc rules_start(void)
{
    harness_write_file(harness_path(dir, "bad.html"), "<h1>bad request, sorry</h1>\n");
    char conf[8192], path[128];
    snprintf(conf, sizeof conf,
             "[http]\nlisten = 127.0.0.1:0\nhttp2 = on\n"
             "header_add = X-Frame-Options: DENY\nheader_always = on\n"
             "error_page = 400 %s/bad.html\nerror_page = 431 headers too large here\n"
             "error_page = 404 no such page\n"
             "[echo]\nlisten =\n[runtime]\nworkers = 2\n"
             "[limits]\nmax_header_bytes = 1024\nmax_request_line = 512\n"
             "[route = /r]\nhandler = text\nbody = routed\nheader_add = X-Route: r\n"
             "[route = /plain]\nhandler = text\nbody = plain\n"
             "[site b]\nnames = b.test\nheader_add = X-Site: b\nheader_always = on\n"
             "error_page = 404 b has no such page\n"
             "[route = /r]\nhandler = text\nbody = b routed\n",
             dir);
    harness_write_file(harness_path(dir, "magpied.conf"), conf);
    snprintf(path, sizeof path, "%s/magpied.conf", dir);
    static char err[128];
    snprintf(err, sizeof err, "%s/err.log", dir);
    return start_with(path, NULL, err);
}

/* req on a new connection: the whole answer, read until magpied closes (or until once is
 * seen: for an answer that keeps the connection), which has the status given. */
static char *exchange(int port, const char *req, const char *once, int status)
{
    static char buf[65536];
    int fd = test_connect(port);
    test_write_all(fd, req, strlen(req));
    read_some(fd, buf, sizeof buf, once, 1);
    close(fd);
    char line[16];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    cr_assert(strncmp(buf, line, strlen(line)) == 0, "%.60s: %s", req, buf);
    return buf;
}

static bool has_field(const char *r, const char *line)
{
    const char *end = strstr(r, "\r\n\r\n");
    const char *at = strstr(r, line);
    return at != NULL && end != NULL && at < end;
}

static const char *body_of(const char *r)
{
    const char *e = strstr(r, "\r\n\r\n");
    return e != NULL ? e + 4 : "";
}

Test(site_rules, errors_before_the_route_get_the_sites_fields_and_pages)
{
    daemon_proc d = rules_start();
    /* A malformed field line: 400, the page from the file, the header, and the close. */
    char *r = exchange(d.http, "GET /r HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", NULL, 400);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_expect(has_field(r, "\r\nConnection: close\r\n"), "%s", r);
    cr_expect(has_field(r, "\r\nContent-Type: text/html\r\n"), "%s", r);
    cr_expect_str_eq(body_of(r), "<h1>bad request, sorry</h1>\n");
    cr_expect(!has_field(r, "X-Route"), "%s", r);

    /* A field over max_header_bytes: 431 with the text page. */
    char big[2048 + 128];
    snprintf(big, sizeof big, "GET /r HTTP/1.1\r\nHost: x\r\nX-Big: %02000d\r\n\r\n", 7);
    r = exchange(d.http, big, NULL, 431);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_expect(has_field(r, "\r\nConnection: close\r\n"), "%s", r);
    cr_expect_str_eq(body_of(r), "headers too large here");

    /* An HTTP version magpied does not speak: 505, the header, its own body. */
    r = exchange(d.http, "GET /r HTTP/2.5\r\nHost: x\r\n\r\n", NULL, 505);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_expect(has_field(r, "\r\nConnection: close\r\n"), "%s", r);

    /* A path no route matches: the site's 404, and the connection stays. */
    r = exchange(d.http, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", "no such page", 404);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_expect(!has_field(r, "Connection: close"), "%s", r);
    cr_expect_str_eq(body_of(r), "no such page");

    /* A routed response has its route's rules, not the site's. */
    r = exchange(d.http, "GET /r HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NULL, 200);
    cr_expect(has_field(r, "\r\nX-Route: r\r\n"), "%s", r);
    cr_expect(!has_field(r, "X-Frame-Options"), "%s", r);
    /* A route that sets no rule has its site's. */
    r = exchange(d.http, "GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NULL, 200);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_expect_str_eq(body_of(r), "plain");
    /* ... also on its 405, with its site's page if it had one (it has none for 405). */
    r = exchange(d.http, "DELETE /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NULL,
                 405);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_assert_eq(stop(&d), 0);
}

Test(site_rules, a_named_site_has_its_own)
{
    daemon_proc d = rules_start();
    char *r = exchange(d.http, "GET /nowhere HTTP/1.1\r\nHost: b.test\r\n\r\n", "page", 404);
    cr_expect(has_field(r, "\r\nX-Site: b\r\n"), "%s", r);
    cr_expect(!has_field(r, "X-Frame-Options"), "%s", r);
    cr_expect_str_eq(body_of(r), "b has no such page");
    /* Before its Host is read, a request is the listener's default site's. */
    r = exchange(d.http, "GET /r HTTP/1.1\r\nBad Header\r\nHost: b.test\r\n\r\n", NULL, 400);
    cr_expect(has_field(r, "\r\nX-Frame-Options: DENY\r\n"), "%s", r);
    cr_assert_eq(stop(&d), 0);
}

/* HTTP/2 (h2c): the site's fields and page on a 404 no route gives, and on a 431. */
Test(site_rules, http2)
{
    daemon_proc d = rules_start();
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "curl -sS --max-time 10 --http2-prior-knowledge -i 'http://127.0.0.1:%d/nowhere' "
             "2>&1",
             d.http);
    char *out = run(cmd);
    cr_expect(strstr(out, "HTTP/2 404") != NULL, "%s", out);
    cr_expect(strstr(out, "x-frame-options: DENY\r\n") != NULL, "%s", out);
    cr_expect(strstr(out, "no such page") != NULL, "%s", out);
    /* A field over max_header_bytes: 431 on its stream, with the site's page. */
    char big[2100];
    memset(big, 'x', 2000);
    big[2000] = '\0';
    char cmd2[2700];
    snprintf(cmd2, sizeof cmd2,
             "curl -sS --max-time 10 --http2-prior-knowledge -i -H 'X-Big: %s' "
             "'http://127.0.0.1:%d/r' 2>&1",
             big, d.http);
    out = run(cmd2);
    cr_expect(strstr(out, "HTTP/2 431") != NULL, "%.400s", out);
    cr_expect(strstr(out, "x-frame-options: DENY\r\n") != NULL, "%.400s", out);
    cr_expect(strstr(out, "headers too large here") != NULL, "%.400s", out);
    cr_assert_eq(stop(&d), 0);
}

/* magpied -t: each bad key named with its file and line, in [http] and in [site]. */
Test(site_rules, check_keys)
{
    static const char *const cases[][3] = {
        {"[http]\n", "header_add = Bad Name: x", ":4: [http] header_add:"},
        {"[http]\n", "error_page = 404 /nonexistent/page.html", "[http] error_page:"},
        {"[http]\n", "error_page = 99 nope", ":4: [http] error_page:"},
        {"[site s]\nnames = s.test\n", "header_set = Content-Length: 5",
         ":5: [site s] header_set:"},
        {"[site s]\nnames = s.test\n", "error_page = 404 /nonexistent/page.html",
         "[site s] error_page:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "[echo]\nlisten =\n%s%s\n[http]\nlisten = 127.0.0.1:0\n",
                 cases[i][0], cases[i][1]);
        char *out = check_conf(dir, text);
        cr_expect(strstr(out, cases[i][2]) != NULL && strstr(out, "rc=1") != NULL, "%s: %s",
                  cases[i][1], out);
    }
}
