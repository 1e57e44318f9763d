/* Tests for daemon/routes.c: exact path lookup and the methods each route allows. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "llhttp.h"
#include "http/routes.h"

static const md_route *find(const char *path)
{
    return md_route_find(path, strlen(path));
}

Test(routes, lookup_is_exact, .timeout = 5)
{
    cr_assert_eq(find("/")->kind, MD_ROUTE_STATIC);
    cr_assert_str_eq(find("/")->body, "Hello, World!");
    cr_assert_eq(find("/")->body_len, 13);
    cr_assert_eq(find("/echo")->kind, MD_ROUTE_ECHO);
    cr_assert_eq(find("/metrics")->kind, MD_ROUTE_METRICS);
    cr_assert_str_eq(find("/healthz")->body, "ok");
    const char *misses[] = {"",     "//",        "/healthz/",  "/Healthz", "/echo2",
                            "/ech", "/metrics?", "/%68ealthz", "healthz",  "/index.html"};
    for (size_t i = 0; i < sizeof(misses) / sizeof(misses[0]); i++)
        cr_assert_null(find(misses[i]), "%s", misses[i]);
}

Test(routes, methods, .timeout = 5)
{
    const char *get_paths[] = {"/", "/metrics", "/healthz"};
    for (size_t i = 0; i < 3; i++) {
        const md_route *r = find(get_paths[i]);
        cr_assert(md_route_allows(r, HTTP_GET));
        cr_assert(md_route_allows(r, HTTP_HEAD), "HEAD goes wherever GET does");
        cr_assert_not(md_route_allows(r, HTTP_POST));
        cr_assert_not(md_route_allows(r, HTTP_DELETE));
        cr_assert_str_eq(r->allow, "GET, HEAD, OPTIONS"); /* OPTIONS: http.c */
    }
    const md_route *echo = find("/echo");
    cr_assert(md_route_allows(echo, HTTP_POST));
    cr_assert_not(md_route_allows(echo, HTTP_GET));
    cr_assert_not(md_route_allows(echo, HTTP_HEAD));
    cr_assert_str_eq(echo->allow, "POST, OPTIONS");
    cr_assert_not(md_route_allows(echo, 200), "out-of-range methods are refused");
}

Test(routes, indices_are_distinct, .timeout = 5)
{
    const char *paths[] = {"/", "/echo", "/metrics", "/healthz"};
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(find(paths[i])->index, i);
}

/* OPTIONS * answers MD_ROUTES_ALLOW_ANY: it must name every method some route allows. */
Test(routes, allow_any_covers_every_route, .timeout = 5)
{
    const char *paths[] = {"/", "/echo", "/metrics", "/healthz"};
    for (size_t i = 0; i < 4; i++) {
        char allow[64];
        snprintf(allow, sizeof(allow), "%s", find(paths[i])->allow);
        for (char *save = NULL, *m = strtok_r(allow, ", ", &save); m != NULL;
             m = strtok_r(NULL, ", ", &save))
            cr_assert_not_null(strstr(MD_ROUTES_ALLOW_ANY, m), "%s allows %s", paths[i], m);
    }
}
