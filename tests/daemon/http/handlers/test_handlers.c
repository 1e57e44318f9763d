/* Tests of daemon/http/handlers/handlers.c, the registry, and of each handler's configurator
 * (keys, defaults, checks) as a [route] section drives it through md_route_key(). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "http/handler.h"
#include "http/routes.h"

static const char *const names[] = {"text",     "echo",   "metrics", "health",
                                    "redirect", "static", "proxy"};

Test(handlers, every_handler_is_registered_once_by_name, .timeout = 5)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const md_handler *h = md_handler_find(names[i]);
        cr_assert_not_null(h, "%s", names[i]);
        cr_assert_str_eq(h->name, names[i]);
        cr_assert_not_null(h->on_req, "%s answers", names[i]);
        cr_assert_leq(h->conf_size, MD_ROUTE_CONF_MAX, "%s", names[i]);
        cr_assert_neq(h->methods, 0, "%s takes some method by default", names[i]);
        if (h->keys != NULL)
            cr_assert_not_null(h->conf_key, "%s declares keys and reads them", names[i]);
    }
    cr_assert_null(md_handler_find("files"));
    cr_assert_null(md_handler_find(""));
    char buf[160];
    md_handler_names(buf, sizeof buf);
    cr_assert_str_eq(buf, "text, echo, metrics, health, redirect, static, proxy or https_redirect");
    cr_assert_eq(md_handler_key_owners("content_type", buf, sizeof buf), 2);
    cr_assert_str_eq(buf, "text or echo");
    cr_assert_eq(md_handler_key_owners("status", buf, sizeof buf), 3);
    cr_assert_str_eq(buf, "text, redirect or https_redirect");
    cr_assert_eq(md_handler_key_owners("nope", buf, sizeof buf), 0);
}

static md_route route(const char *handler)
{
    md_route r;
    memset(&r, 0, sizeof r);
    char msg[256];
    cr_assert_eq(md_route_key(&r, "handler", handler, 1, msg, sizeof msg), 0, "%s", msg);
    return r;
}

static void takes(md_route *r, const char *key, const char *value)
{
    char msg[256] = "";
    cr_assert_eq(md_route_key(r, key, value, 2, msg, sizeof msg), 0, "%s = %s: %s", key, value,
                 msg);
}

static void refuses(md_route *r, const char *key, const char *value, const char *why)
{
    char msg[256] = "";
    cr_assert_eq(md_route_key(r, key, value, 2, msg, sizeof msg), -EINVAL, "%s = %s taken", key,
                 value);
    cr_assert_not_null(strstr(msg, why), "%s = %s: \"%s\" lacks \"%s\"", key, value, msg, why);
}

/* Every boolean of a handler reads the one grammar of the manual, in any case: static's
 * precompressed took only "on" and "off". */
Test(handlers, booleans_take_every_word_of_the_manual, .timeout = 5)
{
    const char *yes[] = {"on", "ON", "yes", "Yes", "true", "TRUE", "1"};
    const char *no[] = {"off", "Off", "no", "NO", "false", "False", "0"};
    md_route st = route("static"), px = route("proxy");
    for (size_t i = 0; i < 7; i++) {
        takes(&st, "precompressed", yes[i]);
        takes(&st, "precompressed", no[i]);
        takes(&px, "forwarded", yes[i]);
        takes(&px, "via", no[i]);
        takes(&px, "websocket", yes[i]);
    }
    refuses(&st, "precompressed", "maybe", "on, yes, true or 1");
    refuses(&st, "precompressed", "", "on, yes, true or 1");
    refuses(&px, "via", "2", "on, yes, true or 1");
    takes(&px, "via", "request");
    takes(&px, "via", "Request");
    refuses(&px, "via", "requests", "expected request, or on");
}

Test(handlers, each_checks_what_it_requires, .timeout = 5)
{
    char msg[256];
    md_route t = route("text");
    cr_assert_eq(md_route_check(&t, msg, sizeof msg), 0, "text needs nothing");
    refuses(&t, "status", "299", "expected a status");
    refuses(&t, "status", "20", "expected a status");
    refuses(&t, "status", "204", "expected a status"); /* no body */
    takes(&t, "status", "404");
    refuses(&t, "content_type", "text/html\r\nX: y", "visible ASCII");
    refuses(&t, "location", "/x", "only for handler = redirect");

    md_route d = route("redirect");
    cr_assert_eq(md_route_check(&d, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "location: required"), "%s", msg);
    refuses(&d, "status", "304", "expected 301, 302, 303, 307 or 308");
    refuses(&d, "status", "300", "expected 301");
    takes(&d, "status", "308");
    takes(&d, "location", "https://example.com/");
    cr_assert_eq(md_route_check(&d, msg, sizeof msg), 0, "%s", msg);
    /* What keep_path and keep_query append goes at the location's end: not after a query
     * (the path) or a fragment (either), where it would be in the wrong part. */
    md_route q = route("redirect");
    takes(&q, "location", "https://example.com/p?a=1");
    takes(&q, "keep_query", "on");
    cr_assert_eq(md_route_check(&q, msg, sizeof msg), 0, "%s", msg);
    takes(&q, "keep_path", "on");
    cr_assert_eq(md_route_check(&q, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "keep_path: location has a query or fragment"), "%s", msg);
    md_route fr = route("redirect");
    takes(&fr, "location", "https://example.com/p#top");
    cr_assert_eq(md_route_check(&fr, msg, sizeof msg), 0, "a fragment alone is fine");
    takes(&fr, "keep_query", "on");
    cr_assert_eq(md_route_check(&fr, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "keep_query: location has a fragment"), "%s", msg);

    md_route p = route("proxy");
    cr_assert_eq(md_route_check(&p, msg, sizeof msg), -EINVAL);
    cr_assert_not_null(strstr(msg, "upstream: required"), "%s", msg);
    refuses(&p, "upstream", "a b", "expected an upstream name");
    refuses(&p, "host", "a b", "expected pass, upstream");
    takes(&p, "upstream", "app");
    cr_assert_eq(md_route_check(&p, msg, sizeof msg), 0, "%s", msg);

    md_route m = route("metrics"), h = route("health");
    refuses(&m, "body", "x", "only for handler = text");
    refuses(&h, "content_type", "a/b", "only for handler = text or echo");
    cr_assert_eq(md_route_check(&m, msg, sizeof msg), 0);
    cr_assert_eq(md_route_check(&h, msg, sizeof msg), 0);
}

/* A route opens what its handler needs per generation (static: its root) and closes it. */
Test(handlers, a_table_opens_and_closes_what_its_handlers_need, .timeout = 5)
{
    md_route_table t;
    memset(&t, 0, sizeof t);
    char msg[256];
    cr_assert_eq(md_routes_add(&t, " /s", 1, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[0], "handler", "static", 2, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[0], "root", "/tmp", 3, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_routes_add(&t, " /t", 4, msg, sizeof msg), 0);
    cr_assert_eq(md_route_key(&t.r[1], "handler", "text", 5, msg, sizeof msg), 0);
    md_routes_prepare(&t);
    cr_assert_eq(md_routes_open(&t, msg, sizeof msg), 0, "%s", msg);
    md_routes_close(&t);
    md_routes_close(&t); /* twice is harmless: a closed route holds nothing */
}
