/* What every response and every entry point leaves behind: the access-log entry, the
 * per-status-class and latency metrics, and the bytes in and out (core/metrics.h), whatever
 * protocol carried the request.
 *
 * A response's duration runs from the entry point that brought the request's first byte
 * (md_http_req.start_ns) to the srv->mono_clock() reading taken once per entry point, as its
 * first response is queued (a pipelined batch shares that reading). Metrics are plain adds on
 * the calling thread's shard: nothing to batch per connection, nothing atomic.
 */
#include <string.h>

#include "core/kinds.h"
#include "core/metrics.h"
#include "http/request_internal.h"

static void log_exchange(md_http_req *r, unsigned code, uint64_t body_bytes, uint64_t ns)
{
    md_http_exchange x = {
        .target = r->target,
        .target_len = r->target_len,
        .target_cut = r->target_full,
        .http_major = r->http_major,
        .http_minor = r->http_minor,
        .status = (uint16_t)code,
        .body_bytes = body_bytes,
        .referer = r->referer,
        .referer_len = r->referer_len,
        .user_agent = r->user_agent,
        .user_agent_len = r->user_agent_len,
        .duration_ns = ns,
        .upstream = r->upstream,
        .upstream_len = r->upstream != NULL ? strlen(r->upstream) : 0,
        .upstream_ms = r->upstream_ms,
        .peer = r->client_set ? r->client_text : NULL, /* NULL: the I/O layer's peer */
    };
    if (r->method_done) {
        x.method = md_method_name(r->method);
        x.method_len = strlen(x.method);
    }
    r->srv->access_log(r->srv->access_log_arg, r->link, &x);
}

void md__http_account_response(md_http_req *r, unsigned code, uint64_t body_bytes)
{
    const md_http_server *srv = r->srv;
    if (r->done_ns == 0)
        r->done_ns = srv->mono_clock != NULL ? srv->mono_clock() : r->now_ns;
    uint64_t ns = r->done_ns > r->start_ns ? r->done_ns - r->start_ns : 0;
    if (srv->access_log != NULL)
        log_exchange(r, code, body_bytes, ns);
    if (srv->metrics == NULL)
        return;
    md_metrics_shard *s = md_metrics_local(srv->metrics);
    bool owned = md_metrics_self.owned;
    /* Classes 1xx .. 5xx; a code outside them counts as 5xx. */
    unsigned cls = code / 100 - 1;
    if (cls >= MD_HTTP_STATUS_CLASSES)
        cls = MD_HTTP_STATUS_CLASSES - 1;
    md_metrics_add_as(&s->responses[cls], 1, owned);
    unsigned bucket = md_metrics_bucket(ns);
    md_metrics_add_as(&s->latency[bucket], 1, owned);
    md_metrics_add_as(&s->latency_sum_ns, ns, owned);
    if (r->route != NULL)
        md_metrics_route_response(s, r->route->metric_slot, cls, bucket, ns);
}

void md__http_account_bytes(const md_http_server *srv, unsigned listener, size_t in, size_t out)
{
    md_metrics *m = srv->metrics;
    if (m == NULL)
        return;
    md_metrics_shard *s = md_metrics_local(m);
    bool owned = md_metrics_self.owned;
    if (in != 0)
        md_metrics_add_as(&s->bytes_in[listener], in, owned);
    if (out != 0)
        md_metrics_add_as(&s->bytes_out[listener], out, owned);
}
