/* handler = redirect: the route's status (301, 302, 303, 307 or 308) with its Location, and a
 * short text body for clients that show it. The location was checked when the configuration
 * was read: visible ASCII, no spaces, so it cannot end the field early. With keep_path, the
 * request's path below the route's prefix follows it (the prefix replaced: [route /old] with
 * location /new sends /old/a to /new/a), encoded again for a URI; with keep_query, the query
 * as the client sent it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "http/handler.h"

enum { LOCATION_MAX = 200 }; /* bytes of the location, with its NUL */

typedef struct redirect_conf {
    uint16_t status;
    bool keep_path, keep_query;
    char location[LOCATION_MAX];
} redirect_conf;

_Static_assert(sizeof(redirect_conf) <= MD_ROUTE_CONF_MAX, "redirect_conf fits a route");

static void redirect_init(void *conf)
{
    ((redirect_conf *)conf)->status = 302;
}

static int redirect_key(void *conf, const char *key, const char *value, uint32_t line, char *msg,
                        size_t msg_len)
{
    (void)line;
    redirect_conf *d = conf;
    if (strcmp(key, "keep_path") == 0 || strcmp(key, "keep_query") == 0) {
        return md_conf_bool(value, key[5] == 'p' ? &d->keep_path : &d->keep_query, msg, msg_len);
    }
    if (strcmp(key, "location") == 0) {
        if (value[0] == '\0' || strlen(value) >= LOCATION_MAX ||
            !md_text_field_safe(value, false)) {
            md_say(msg, msg_len, "expected a URI of visible ASCII without spaces, at most %d bytes",
                   LOCATION_MAX - 1);
            return -EINVAL;
        }
        md_text_set(d->location, sizeof d->location, value);
        return 0;
    }
    uint64_t s; /* status */
    if (strlen(value) != 3 || md_parse_u64(value, 301, 308, &s) != 0 || s == 304 || s == 305 ||
        s == 306) {
        md_say(msg, msg_len, "expected 301, 302, 303, 307 or 308, got \"%s\"", value);
        return -EINVAL;
    }
    d->status = (uint16_t)s;
    return 0;
}

static int redirect_check(const void *conf, char *msg, size_t msg_len)
{
    const redirect_conf *d = conf;
    if (d->location[0] == '\0') {
        md_say(msg, msg_len, "location: required for handler = redirect");
        return -EINVAL;
    }
    /* What is appended goes at the location's end: a path after its query or fragment, or a
     * query after its fragment, would land in the wrong part (never reaching the server). */
    if (d->keep_path && strpbrk(d->location, "?#") != NULL) {
        md_say(msg, msg_len,
               "keep_path: location has a query or fragment, where the path "
               "would follow");
        return -EINVAL;
    }
    if (d->keep_query && strchr(d->location, '#') != NULL) {
        md_say(msg, msg_len, "keep_query: location has a fragment, where the query would follow");
        return -EINVAL;
    }
    return 0;
}

static int redirect_on_req(md_http_req *req, const md_route *r)
{
    const redirect_conf *d = md_route_conf(r);
    const md_http_status *st = md_http_status_of(d->status);
    char fields[LOCATION_MAX + 4 * MD_HTTP_TARGET_MAX + 16];
    size_t n = (size_t)snprintf(fields, sizeof fields, "Location: %s", d->location);
    size_t plen, qlen;
    const char *path = md_http_req_path(req, &plen);
    const char *query = md_http_req_query(req, &qlen);
    if (d->keep_path && plen > r->path_len) {
        /* What follows the route's path: "/a" below "/old", or "a" below "/old/". The
         * location's own trailing '/' and the rest's leading one are not doubled. */
        const char *rest = path + r->path_len;
        size_t rlen = plen - r->path_len;
        if (n > 10 && fields[n - 1] == '/' && rest[0] == '/') {
            rest++;
            rlen--;
        }
        n += md_uri_path_encode(rest, rlen, fields + n, 3 * MD_HTTP_TARGET_MAX);
    }
    if (d->keep_query && query == NULL && md_http_req_path_cut(req))
        return md_http_respond(req, 414, NULL, "text/plain", md_http_status_of(414)->body,
                               md_http_status_of(414)->body_len);
    if (d->keep_query && query != NULL)
        n += (size_t)snprintf(fields + n, sizeof fields - n, "%s%.*s",
                              strchr(d->location, '?') != NULL ? "&" : "?", (int)qlen, query);
    snprintf(fields + n, sizeof fields - n, "\r\n");
    return md_http_respond(req, d->status, fields, "text/plain", st->body, st->body_len);
}

const md_handler md_handler_redirect = {
    .name = "redirect",
    .methods = MD_METHODS_GET,
    .keys = (const char *const[]){"status", "location", "keep_path", "keep_query", NULL},
    .conf_size = sizeof(redirect_conf),
    .conf_init = redirect_init,
    .conf_key = redirect_key,
    .conf_check = redirect_check,
    .on_req = redirect_on_req,
};
