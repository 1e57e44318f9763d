/* handler = text: a fixed status, content type and body from the route (the shipped "/" says
 * "Hello, World!"). A 200 comes from the thread's canned cache: the keep-alive GET is one
 * memcpy, or none when the response is lent (response.h).
 */
#include "http/handler.h"

static int text_on_req(md_http_conn *c, const md_route *r)
{
    if (r->status == 200)
        return md_http_respond_canned(c, r, r->body, r->body_len);
    return md_http_respond(c, r->status, NULL, r->content_type, r->body, r->body_len);
}

const md_handler md_handler_text = {.name = "text", .on_req = text_on_req};
