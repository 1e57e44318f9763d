/* handler = health: 200 "ok" for load balancers and probes; the process answering is the
 * whole check.
 */
#include "http/handler.h"

static int health_on_req(md_http_req *req, const md_route *r)
{
    return md_http_respond_canned(req, r, "text/plain", "ok", 2);
}

const md_handler md_handler_health = {
    .name = "health", .methods = MD_METHODS_GET, .on_req = health_on_req};
