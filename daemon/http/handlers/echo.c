/* handler = echo: the request body back, with the route's content type.
 *
 * A body with a Content-Length up to MD_HTTP_ECHO_GATHER, or chunked, is gathered and answered
 * once complete, so that a body that never completes gets no 200. A longer one streams: its
 * head goes out with the request head, each span of the body as it arrives, and an incomplete
 * one ends short of its Content-Length (the connection closes).
 */
#include "http/handler.h"

#include <string.h>

static int echo_on_head(md_http_conn *c, const md_route *r, uint64_t length, bool chunked)
{
    if (chunked || length <= MD_HTTP_ECHO_GATHER)
        return MD_BODY_GATHER;
    int rc = md_http_respond_head(c, 200, NULL, r->content_type, length);
    return rc != 0 ? rc : MD_BODY_STREAM;
}

static int echo_on_body(md_http_conn *c, const md_route *r, const char *at, size_t len)
{
    (void)r; /* the handler's shape: the head said everything about the route */
    return md_outbuf_append(md_http_conn_out(c), at, len);
}

static int echo_on_req(md_http_conn *c, const md_route *r)
{
    size_t len;
    const char *body = md_http_req_body(c, &len);
    return md_http_respond(c, 200, NULL, r->content_type, body, len);
}

const md_handler md_handler_echo = {
    .name = "echo", .on_head = echo_on_head, .on_body = echo_on_body, .on_req = echo_on_req};
