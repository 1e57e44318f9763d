/* handler = metrics: the Prometheus text of md_http_server.metrics_text; 404 when the server
 * has none (a core driven without metrics, as in tests).
 */
#include "http/handler.h"

static int metrics_on_req(md_http_req *req, const md_route *r)
{
    (void)r;
    const md_http_server *srv = md_http_req_server(req);
    if (srv->metrics_text == NULL) {
        const md_http_status *st = md_http_status_of(404);
        return md_http_respond(req, 404, NULL, "text/plain", st->body, st->body_len);
    }
    return md_http_respond_produced(req, "text/plain; version=0.0.4; charset=utf-8",
                                    srv->metrics_text, srv->metrics_arg);
}

const md_handler md_handler_metrics = {
    .name = "metrics", .methods = MD_METHODS_GET, .on_req = metrics_on_req};
