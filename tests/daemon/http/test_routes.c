/* Tests for daemon/http/routes.c: the built-in table, building a table from sections, the
 * lookup (exact and longest prefix), methods and Allow, and the path rules. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "http/handler.h"
#include "http/routes.h"
#include "llhttp.h"

static md_route_table t;

static const md_route *find(const char *path)
{
    return md_routes_find(&t, path, strlen(path));
}

/* The route's handler keeps value (with its NUL) among its options: the handlers' option
 * structs are their own, so a table's test looks for the bytes. */
static bool conf_has(const md_route *r, const char *value)
{
    return memmem(r->conf, sizeof r->conf, value, strlen(value) + 1) != NULL;
}

Test(routes, builtin_lookup_is_exact, .timeout = 5)
{
    md_routes_builtin(&t);
    cr_assert_eq(find("/")->handler, md_handler_find("text"));
    cr_assert(conf_has(find("/"), "Hello, World!"));
    cr_assert_eq(find("/echo")->handler, md_handler_find("echo"));
    cr_assert_eq(find("/metrics")->handler, md_handler_find("metrics"));
    cr_assert_eq(find("/healthz")->handler, md_handler_find("health"));
    cr_assert_null(md_handler_find("files"));
    const char *misses[] = {"",     "/healthz/", "/Healthz", "/echo2",
                            "/ech", "/metrics?", "healthz",  "/index.html"};
    for (size_t i = 0; i < sizeof(misses) / sizeof(misses[0]); i++)
        cr_assert_null(find(misses[i]), "%s", misses[i]);
}

Test(routes, builtin_methods_and_allow, .timeout = 5)
{
    md_routes_builtin(&t);
    const char *get_paths[] = {"/", "/metrics", "/healthz"};
    for (size_t i = 0; i < 3; i++) {
        const md_route *r = find(get_paths[i]);
        cr_assert(md_route_allows(r, HTTP_GET));
        cr_assert(md_route_allows(r, HTTP_HEAD), "HEAD goes wherever GET does");
        cr_assert_not(md_route_allows(r, HTTP_POST));
        cr_assert_not(md_route_allows(r, HTTP_DELETE));
        cr_assert_str_eq(r->allow, "GET, HEAD, OPTIONS");
    }
    const md_route *echo = find("/echo");
    cr_assert(md_route_allows(echo, HTTP_POST));
    cr_assert_not(md_route_allows(echo, HTTP_GET));
    cr_assert_str_eq(echo->allow, "POST, OPTIONS");
    cr_assert_not(md_route_allows(echo, 200), "out-of-range methods are refused");
    cr_assert_str_eq(t.allow_any, "GET, HEAD, POST, OPTIONS");
}

static void add(const char *spec, const char *const *kv)
{
    char msg[256];
    cr_assert_eq(md_routes_add(&t, spec, 1, msg, sizeof msg), 0, "%s: %s", spec, msg);
    md_route *r = &t.r[t.n - 1];
    for (; kv[0] != NULL; kv += 2)
        cr_assert_eq(md_route_key(r, kv[0], kv[1], 0, msg, sizeof msg), 0, "%s: %s", kv[0], msg);
    cr_assert_eq(md_route_check(r, msg, sizeof msg), 0, "%s", msg);
}

static void table(void)
{
    memset(&t, 0, sizeof t);
    add(" /", (const char *[]){"handler", "text", "body", "root", NULL});
    add(" /a", (const char *[]){"handler", "text", "body", "a", NULL});
    add(" /a/b/", (const char *[]){"handler", "text", "body", "ab", NULL});
    add(" = /a/b/c", (const char *[]){"handler", "text", "body", "exact", NULL});
    add(" /a/b/c", (const char *[]){"handler", "text", "body", "abc", NULL});
    add(" /old",
        (const char *[]){"handler", "redirect", "status", "301", "location", "/new", NULL});
    add(" = /up", (const char *[]){"handler", "echo", "methods", "PUT, POST", NULL});
    md_routes_prepare(&t);
}

Test(routes, longest_prefix_wins_and_exact_first, .timeout = 5)
{
    table();
    /* The route that answers, by its header: "= /p" exact, " /p" prefix. */
    const struct {
        const char *path, *route;
    } cases[] = {
        {"/", " /"},
        {"/x", " /"},
        {"/a", " /a"},
        {"/a/", " /a"},
        {"/ab", " /"},
        {"/a/x", " /a"},
        {"/a/b", " /a"},
        {"/a/b/", " /a/b/"},
        {"/a/b/x", " /a/b/"},
        {"/a/b/c", "= /a/b/c"},
        {"/a/b/c/", " /a/b/c"},
        {"/a/b/c/d", " /a/b/c"},
        {"/a/b/cd", " /a/b/"},
        {"/old/x", " /old"},
        {"/up/x", " /"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const md_route *r = find(cases[i].path);
        cr_assert_not_null(r, "%s", cases[i].path);
        char got[MD_ROUTE_PATH_MAX + 3];
        snprintf(got, sizeof got, "%s%s", r->exact ? "= " : " ", r->path);
        cr_assert_str_eq(got, cases[i].route, "%s", cases[i].path);
    }
    cr_assert_str_eq(find("/up")->allow, "POST, PUT, OPTIONS");
    cr_assert(conf_has(find("/a/b/c"), "exact"));
    cr_assert(conf_has(find("/old"), "/new"));
    cr_assert_str_eq(t.allow_any, "GET, HEAD, POST, PUT, OPTIONS");
}

Test(routes, prepared_tables_have_distinct_ids, .timeout = 5)
{
    table();
    uint64_t a = t.id;
    table();
    cr_assert_neq(a, t.id, "a reloaded table must not reuse the canned responses of the old");
    cr_assert_neq(t.id, 0);
}

static void refused(const char *spec, const char *key, const char *value, const char *why)
{
    memset(&t, 0, sizeof t);
    char msg[256] = "";
    int rc = md_routes_add(&t, spec, 7, msg, sizeof msg);
    if (key == NULL) {
        cr_assert_eq(rc, -EINVAL, "%s was taken", spec);
    } else {
        cr_assert_eq(rc, 0, "%s: %s", spec, msg);
        md_route *r = &t.r[0];
        if (strcmp(key, "handler") != 0)
            cr_assert_eq(
                md_route_key(r, "handler",
                             key[0] == 'l' || !strcmp(key, "status") ? "redirect" : "metrics", 0,
                             msg, sizeof msg),
                0);
        rc = md_route_key(r, key, value, 0, msg, sizeof msg);
        cr_assert_neq(rc, 0, "%s = %s was taken", key, value);
    }
    cr_assert_not_null(strstr(msg, why), "%s %s: \"%s\" lacks \"%s\"", spec, key ? key : "", msg,
                       why);
}

/* A handler that serves some methods' meaning only (static: GET and HEAD) takes no others,
 * rather than answering a POST or DELETE as a GET (RFC 9110 13.1, 14.2). */
Test(routes, methods_a_handler_cannot_serve_are_refused, .timeout = 5)
{
    char msg[256];
    memset(&t, 0, sizeof t);
    cr_assert_eq(md_routes_add(&t, " /a", 3, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[0], "handler", "static", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[0], "methods", "GET, POST", 0, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "handler = static serves GET, HEAD, OPTIONS only"), "%s", msg);
    cr_assert_eq(md_routes_add(&t, " /b", 4, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[1], "handler", "static", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[1], "methods", "HEAD, OPTIONS", 0, msg, sizeof msg), 0, "%s",
                 msg);
    cr_assert_eq(md_routes_add(&t, " /c", 5, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[2], "handler", "text", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[2], "methods", "GET, POST, DELETE", 0, msg, sizeof msg), 0, "%s",
                 msg);
}

Test(routes, bad_sections_and_options_say_why, .timeout = 5)
{
    refused(" x", NULL, NULL, "expected [route /path]");
    refused(" /a/../b", NULL, NULL, "normalised");
    refused(" /a//b", NULL, NULL, "normalised");
    refused(" /%41", NULL, NULL, "normalised");
    refused(" /a b", NULL, NULL, "visible ASCII");
    refused(" /a?b", NULL, NULL, "visible ASCII");
    refused(" /a", "handler", "files",
            "expected text, echo, metrics, health, redirect, static, proxy or https_redirect");
    refused(" /a", "handler", "files", "expected text, echo");
    refused(" /a", "status", "200", "expected 301");
    refused(" /a", "location", "/x\r\nSet-Cookie: a", "visible ASCII");
    refused(" /a", "location", "/a b", "visible ASCII");
    refused(" /a", "methods", "get", "unknown method");
    refused(" /a", "methods", "CONNECT", "CONNECT");
    refused(" /a", "body", "x", "only for handler = text");
    refused(" /a", "nope", "x", ""); /* -ENOENT: the caller names the key */

    memset(&t, 0, sizeof t);
    char msg[256];
    cr_assert_eq(md_routes_add(&t, " /a", 3, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[0], "body", "x", 0, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "set handler first"), "%s", msg);
    cr_assert_eq(md_route_check(&t.r[0], msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "handler: required"), "%s", msg);
    cr_assert_eq(md_routes_add(&t, " /a", 9, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "line 3"), "%s", msg);
    cr_assert_eq(md_routes_add(&t, "= /a", 9, msg, sizeof msg), 0, "exact and prefix differ");
    cr_assert_eq(md_route_key(&t.r[1], "handler", "redirect", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_check(&t.r[1], msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "location: required"), "%s", msg);

    /* static: an absolute directory that exists, a plain index name, its root required. */
    cr_assert_eq(md_routes_add(&t, " /s", 11, msg, sizeof msg), 0);
    md_route *st = &t.r[2];
    cr_assert_eq(md_route_key(st, "handler", "static", 0, msg, sizeof msg), 0);
    cr_assert_eq(md_route_check(st, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "root: required"), "%s", msg);
    cr_assert_eq(md_route_key(st, "root", "srv/www", 0, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "absolute"), "%s", msg);
    cr_assert_eq(md_route_key(st, "root", "/nonexistent-magpied-root", 0, msg, sizeof msg),
                 -EINVAL);
    cr_assert_not_null(strstr(msg, "No such file"), "%s", msg);
    cr_assert_eq(md_route_key(st, "root", "/etc/hostname", 0, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "not a directory"), "%s", msg);
    cr_assert_eq(md_route_key(st, "index", "../x", 0, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_route_key(st, "index", ".hidden", 0, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_route_key(st, "precompressed", "maybe", 0, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_route_key(st, "body", "x", 0, msg, sizeof msg), -EINVAL);
    cr_assert_eq(md_route_key(st, "root", "/tmp", 0, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_route_check(st, msg, sizeof msg), 0, "%s", msg);
    cr_assert(conf_has(st, "index.html"));
    cr_assert(conf_has(st, "application/octet-stream"));
    cr_assert_eq(md_route_key(&t.r[1], "root", "/tmp", 0, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "only for handler = static"), "%s", msg);
}

Test(routes, table_is_bounded, .timeout = 5)
{
    memset(&t, 0, sizeof t);
    char spec[32], msg[256];
    for (int i = 0; i < MD_ROUTES_MAX; i++) {
        snprintf(spec, sizeof spec, " /r%d", i);
        cr_assert_eq(md_routes_add(&t, spec, 1, msg, sizeof msg), 0);
    }
    cr_assert_eq(md_routes_add(&t, " /one-more", 1, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "more than"), "%s", msg);
}

static const char *norm(const char *in)
{
    static char out[256];
    size_t n;
    if (md_path_normalise(in, strlen(in), out, &n) != 0)
        return NULL;
    out[n] = '\0';
    return out;
}

Test(routes, path_normalisation, .timeout = 5)
{
    const struct {
        const char *in, *out;
    } ok[] = {
        {"/", "/"},
        {"/a/b", "/a/b"},
        {"//a///b//", "/a/b/"},
        {"/a/./b/.", "/a/b/"},
        {"/a/b/../c", "/a/c"},
        {"/a/b/..", "/a/"},
        {"/a/..", "/"},
        {"/a/%2e%2e/b", "/b"},
        {"/a/%2E./b", "/b"},
        {"/%61%62", "/ab"},
        {"/a%20b", "/a b"},
        {"/%C3%A9", "/\xc3\xa9"},
        {"/.a/..b/...", "/.a/..b/..."},
        {"/a/.%2e", "/"},
        /* An escaped slash separates segments once decoded: what a decoding application
         * reads, so an escape cannot reach past a route. */
        {"/a%2fb", "/a/b"},
        {"/a%2Fb", "/a/b"},
        {"/api%2F..%2Fadmin", "/admin"},
        {"/a%2F%2Fb%2F", "/a/b/"},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        const char *got = norm(ok[i].in);
        cr_assert_not_null(got, "%s refused", ok[i].in);
        cr_assert_str_eq(got, ok[i].out, "%s", ok[i].in);
    }
    const char *bad[] = {
        "",
        "a",
        "/..",
        "/../a",
        "/a/../..",
        "/%2e%2e",
        "/%2e%2e/a",
        "/a%00b",
        "/a%2F..%2F..",
        "/%2F..",
        "/a%5cb",
        "/a%5C..%5Cb",
        "/a\\b",
        "/%",
        "/%4",
        "/%zz",
        "/%0a",
        "/%7f",
        "/a/%2e%2e/%2e%2e",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_null(norm(bad[i]), "%s was taken as %s", bad[i], norm(bad[i]));
}

Test(routes, normal_paths_need_no_copy, .timeout = 5)
{
    const char *normal[] = {"/", "/a", "/a/b/", "/.a", "/a..", "/a/...", "/a.b/c"};
    for (size_t i = 0; i < sizeof(normal) / sizeof(normal[0]); i++) {
        cr_assert(md_path_is_normal(normal[i], strlen(normal[i])), "%s", normal[i]);
        cr_assert_str_eq(norm(normal[i]), normal[i]);
    }
    const char *other[] = {"", "a", "//", "/a//b", "/.", "/./a", "/a/..", "/a/../b", "/%41"};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        cr_assert_not(md_path_is_normal(other[i], strlen(other[i])), "%s", other[i]);
}

/* allow and deny are the table's keys, for any handler, in the order given; the built-in
 * /echo and /metrics answer loopback clients alone. */
Test(routes, allow_and_deny_are_route_keys, .timeout = 5)
{
    md_routes_builtin(&t);
    cr_assert_eq(find("/echo")->acl.n, 3);
    cr_assert_eq(find("/metrics")->acl.n, 3);
    cr_assert_eq(find("/")->acl.n, 0);
    cr_assert_eq(find("/healthz")->acl.n, 0);

    memset(&t, 0, sizeof t);
    char msg[160];
    cr_assert_eq(md_routes_add(&t, " = /m", 1, msg, sizeof msg), 0);
    md_route *r = &t.r[0];
    cr_assert_eq(md_route_key(r, "deny", "10.1.0.0/16", 2, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(r, "handler", "metrics", 3, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(r, "allow", "10.0.0.0/8, ::1", 4, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(r, "deny", "all", 5, msg, sizeof msg), 0);
    cr_assert_eq(r->acl.n, 4);
    cr_assert_eq(r->acl.r[0].allow, 0);
    cr_assert_eq(r->acl.r[1].allow, 1);
    cr_assert_eq(r->acl.r[3].family, 0);
    cr_assert_eq(md_route_key(r, "allow", "10.0.0.1/8", 6, msg, sizeof msg), -EINVAL);
    cr_assert(strstr(msg, "bits set past") != NULL, "%s", msg);
}
