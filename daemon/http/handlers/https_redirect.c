/* handler = https_redirect: sends the request to the same place over TLS, keeping it:
 * "https://" + the request's host (without its port) + ":" https_port unless 443 + the target as
 * sent (path and query). What a plaintext listener answers when every site lives on TLS, as
 * nginx's `return 301 https://$host$request_uri;` and Caddy's automatic redirect do. Every
 * method is taken (308 keeps POST a POST); a request without a host gets 400, one whose target
 * was longer than magpied keeps gets 414, rather than a Location that points elsewhere.
 *
 * The host was checked by the protocol (RFC 3986 host characters: no spaces, CR, LF or '/'),
 * so it cannot end the Location field early or point at another authority's path.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "http/handler.h"
#include "http/http.h"

typedef struct https_redirect_conf {
    uint16_t status;
    uint16_t port; /* the TLS listener's port in the Location; 443 is left out */
} https_redirect_conf;

_Static_assert(sizeof(https_redirect_conf) <= MD_ROUTE_CONF_MAX, "the conf fits a route");

static void https_redirect_init(void *conf)
{
    https_redirect_conf *d = conf;
    d->status = 301; /* as nginx's users write it; 308 keeps the method */
    d->port = 443;
}

static int https_redirect_key(void *conf, const char *key, const char *value, uint32_t line,
                              char *msg, size_t msg_len)
{
    (void)line;
    https_redirect_conf *d = conf;
    uint64_t v;
    if (strcmp(key, "https_port") == 0) {
        if (md_parse_u64(value, 1, 65535, &v) != 0) {
            md_say(msg, msg_len, "expected a port in 1..65535, got \"%s\"", value);
            return -EINVAL;
        }
        d->port = (uint16_t)v;
        return 0;
    }
    if (strlen(value) != 3 || md_parse_u64(value, 301, 308, &v) != 0 || v == 304 || v == 305 ||
        v == 306) {
        md_say(msg, msg_len, "expected 301, 302, 303, 307 or 308, got \"%s\"", value);
        return -EINVAL;
    }
    d->status = (uint16_t)v;
    return 0;
}

/* host without its port: "example.com:80" -> "example.com", "[::1]:80" -> "[::1]". */
static size_t host_only(const char *h, size_t n)
{
    if (n != 0 && h[0] == '[') {
        const char *close = memchr(h, ']', n);
        return close != NULL ? (size_t)(close - h) + 1 : n;
    }
    const char *colon = memchr(h, ':', n);
    return colon != NULL ? (size_t)(colon - h) : n;
}

static int https_redirect_on_req(md_http_req *req, const md_route *r)
{
    const https_redirect_conf *d = md_route_conf(r);
    size_t hlen, tlen;
    bool cut;
    const char *host = md_http_req_host(req, &hlen);
    const char *target = md_http_req_target(req, &tlen, &cut);
    if (host != NULL)
        hlen = host_only(host, hlen);
    while (hlen != 0 && (host[hlen - 1] == ' ' || host[hlen - 1] == '\t'))
        hlen--;
    if (host == NULL || hlen == 0 || hlen >= MD_HTTP_FIELD_KEEP) {
        const md_http_status *st = md_http_status_of(400);
        return md_http_respond(req, 400, NULL, "text/plain", st->body, st->body_len);
    }
    if (cut) {
        const md_http_status *st = md_http_status_of(414);
        return md_http_respond(req, 414, NULL, "text/plain", st->body, st->body_len);
    }
    /* An absolute-form target ("http://host/p?q") gives its path and query only. */
    if (tlen != 0 && target[0] != '/') {
        const char *auth = memchr(target, ':', tlen);
        const char *slash = auth != NULL && (size_t)(auth - target) + 3 <= tlen
                                ? memchr(auth + 3, '/', tlen - (size_t)(auth + 3 - target))
                                : NULL;
        if (slash != NULL) {
            tlen -= (size_t)(slash - target);
            target = slash;
        } else {
            target = "/";
            tlen = 1;
        }
    }
    char fields[sizeof "Location: https://:65535\r\n" + MD_HTTP_FIELD_KEEP + MD_HTTP_TARGET_MAX];
    char port[8] = "";
    if (d->port != 443)
        snprintf(port, sizeof port, ":%u", (unsigned)d->port);
    snprintf(fields, sizeof fields, "Location: https://%.*s%s%.*s\r\n", (int)hlen, host, port,
             (int)tlen, target);
    const md_http_status *st = md_http_status_of(d->status);
    return md_http_respond(req, d->status, fields, "text/plain", st->body, st->body_len);
}

const md_handler md_handler_https_redirect = {
    .name = "https_redirect",
    .methods = MD_METHODS_GET | MD_METHOD(MD_POST) | MD_METHOD(MD_PUT) | MD_METHOD(MD_DELETE) |
               MD_METHOD(MD_PATCH),
    .keys = (const char *const[]){"status", "https_port", NULL},
    .conf_size = sizeof(https_redirect_conf),
    .conf_init = https_redirect_init,
    .conf_key = https_redirect_key,
    .on_req = https_redirect_on_req,
};
