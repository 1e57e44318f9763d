/* handler = echo: the request body back, with the route's content type.
 *
 * A body with a Content-Length up to MD_HTTP_ECHO_GATHER, or chunked, is gathered and answered
 * once complete, so that a body that never completes gets no 200. A longer one streams: its
 * head goes out with the request head, each span of the body as it arrives, and an incomplete
 * one ends short of its Content-Length (the connection closes).
 */
#include <string.h>

#include "core/text.h"
#include "http/handler.h"

typedef struct echo_conf {
    char content_type[MD_CTYPE_MAX];
} echo_conf;

_Static_assert(sizeof(echo_conf) <= MD_ROUTE_CONF_MAX, "echo_conf fits a route");

static void echo_init(void *conf)
{
    echo_conf *e = conf;
    md_text_set(e->content_type, sizeof e->content_type, "application/octet-stream");
}

static int echo_key(void *conf, const char *key, const char *value, uint32_t line, char *msg,
                    size_t msg_len)
{
    (void)key; /* content_type, its one key */
    (void)line;
    echo_conf *e = conf;
    return md_handler_conf_ctype(e->content_type, value, msg, msg_len);
}

static int echo_on_head(md_http_req *req, const md_route *r, uint64_t length, bool chunked)
{
    if (chunked || length <= MD_HTTP_ECHO_GATHER)
        return MD_BODY_GATHER;
    const echo_conf *e = md_route_conf(r);
    int rc = md_http_respond_head(req, 200, NULL, e->content_type, length);
    return rc != 0 ? rc : MD_BODY_STREAM;
}

static int echo_on_body(md_http_req *req, const md_route *r, const char *at, size_t len)
{
    (void)r; /* the handler's shape: the head said everything about the route */
    return md_outbuf_append(md_http_req_out(req), at, len);
}

static int echo_on_req(md_http_req *req, const md_route *r)
{
    const echo_conf *e = md_route_conf(r);
    size_t len;
    const char *body = md_http_req_body(req, &len);
    return md_http_respond(req, 200, NULL, e->content_type, body, len);
}

const md_handler md_handler_echo = {
    .name = "echo",
    .methods = MD_METHODS_POST,
    .keys = (const char *const[]){"content_type", NULL},
    .conf_size = sizeof(echo_conf),
    .conf_init = echo_init,
    .conf_key = echo_key,
    .on_head = echo_on_head,
    .on_body = echo_on_body,
    .on_req = echo_on_req,
};
