/* handler = redirect: the route's status (301, 302, 303, 307 or 308) with its Location, and a
 * short text body for clients that show it. The location was checked when the configuration
 * was read: visible ASCII, no spaces, so it cannot end the field early.
 */
#include <stdio.h>

#include "http/handler.h"

static int redirect_on_req(md_http_conn *c, const md_route *r)
{
    char fields[MD_ROUTE_TEXT_MAX + 16];
    snprintf(fields, sizeof fields, "Location: %s\r\n", r->body);
    const md_http_status *st = md_http_status_of(r->status);
    return md_http_respond(c, r->status, fields, "text/plain", st->body, st->body_len);
}

const md_handler md_handler_redirect = {.name = "redirect", .on_req = redirect_on_req};
