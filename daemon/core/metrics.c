/* Sharded daemon counters and the Prometheus text they are scraped as.
 *
 * A thread picks its shard once (in order over a process-wide counter) and keeps it for
 * every md_metrics instance, so the index is a plain thread-local integer; the first
 * MD_METRICS_SHARDS - 1 threads own theirs and add without read-modify-writes. Formatting sums the
 * shards with relaxed loads; see metrics.h for why relaxed is enough.
 */
#include "core/metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(md_metrics_shard) % 64 == 0, "shards must not share cache lines");

/* Upper bounds of the finite latency buckets, in ns and as the le label. */
static const uint64_t bucket_ns[MD_METRICS_BUCKETS] = {
    50000,    100000,   250000,   500000,    1000000,   2500000,    5000000,
    10000000, 25000000, 50000000, 100000000, 250000000, 1000000000, 10000000000,
};
static const char *const bucket_le[MD_METRICS_BUCKETS] = {
    "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
    "0.01",  "0.025",  "0.05",    "0.1",    "0.25",  "1",      "10",
};

static const char *const listener_names[MD_LISTENERS] = {"http", "echo", "https"};

/* Process-wide: shards are handed out in order the first time a thread counts. */
static atomic_uint next_shard;
_Thread_local md_metrics_thread md_metrics_self = {.index = MD_METRICS_SHARDS};

void md_metrics_pick_shard(void)
{
    /* Relaxed: only distinctness matters, and fetch_add gives it in any order. */
    unsigned i = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed);
    md_metrics_self.owned = i < MD_METRICS_SHARDS - 1;
    md_metrics_self.index = md_metrics_self.owned ? i : MD_METRICS_SHARDS - 1;
}

void md_metrics_init(md_metrics *m)
{
    memset(m, 0, sizeof(*m));
}

void md_metrics_set_extra(md_metrics *m, md_metrics_extra_fn fn, void *arg)
{
    m->extra = fn;
    m->extra_arg = arg;
}

unsigned md_metrics_route_slot(md_metrics *m, const char *label)
{
    /* Relaxed: the one thread that assigns slots reads its own writes. */
    uint32_t n = atomic_load_explicit(&m->nroutes, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(m->route_label[i], label) == 0)
            return i;
    if (n == MD_METRICS_ROUTES)
        return MD_METRICS_ROUTES - 1;
    const char *name = n == MD_METRICS_ROUTES - 1 ? "other" : label;
    snprintf(m->route_label[n], MD_METRICS_LABEL_MAX, "%s", name);
    /* Release: the label's bytes before the count that shows it (pairs with the acquire in
     * md_metrics_format). */
    atomic_store_explicit(&m->nroutes, n + 1, memory_order_release);
    return n;
}

const char *md_metrics_bucket_le(unsigned i)
{
    return i < MD_METRICS_BUCKETS ? bucket_le[i] : "+Inf";
}

unsigned md_metrics_bucket(uint64_t ns)
{
    unsigned i = 0;
    while (i < MD_METRICS_BUCKETS && ns > bucket_ns[i])
        i++;
    return i;
}

void md_metrics_conn_opened(md_metrics *m, md_listener l)
{
    md_metrics_add(&md_metrics_local(m)->conn_opened[l], 1);
}

void md_metrics_conn_refused(md_metrics *m, md_listener l)
{
    md_metrics_add(&md_metrics_local(m)->conn_refused[l], 1);
}

static const char *const close_names[MD_CLOSE_REASONS] = {
    [MD_CLOSE_PEER] = "peer_closed",
    [MD_CLOSE_ERROR] = "error",
    [MD_CLOSE_DONE] = "server_closed",
    [MD_CLOSE_HEADER_TIMEOUT] = "header_timeout",
    [MD_CLOSE_BODY_TIMEOUT] = "body_timeout",
    [MD_CLOSE_KEEPALIVE_TIMEOUT] = "keepalive_timeout",
    [MD_CLOSE_IDLE_TIMEOUT] = "idle_timeout",
    [MD_CLOSE_SEND_TIMEOUT] = "send_timeout",
    [MD_CLOSE_MIN_BODY_RATE] = "min_body_rate",
    [MD_CLOSE_MIN_SEND_RATE] = "min_send_rate",
    [MD_CLOSE_SHUTDOWN] = "shutdown",
    [MD_CLOSE_NO_MEMORY] = "out_of_memory",
    [MD_CLOSE_HANDSHAKE_TIMEOUT] = "handshake_timeout",
    [MD_CLOSE_PROXY_UNTRUSTED] = "proxy_untrusted",
    [MD_CLOSE_PROXY_INVALID] = "proxy_invalid",
    [MD_CLOSE_PROXY_TIMEOUT] = "proxy_timeout",
};

void md_metrics_conn_closed(md_metrics *m, md_listener l, md_close_reason why)
{
    md_metrics_shard *s = md_metrics_local(m);
    md_metrics_add(&s->conn_closed[l], 1);
    md_metrics_add(&s->conn_closed_why[l][(unsigned)why < MD_CLOSE_REASONS ? why : MD_CLOSE_ERROR],
                   1);
}

void md_metrics_bytes(md_metrics *m, md_listener l, uint64_t in, uint64_t out)
{
    md_metrics_shard *s = md_metrics_local(m);
    if (in != 0)
        md_metrics_add(&s->bytes_in[l], in);
    if (out != 0)
        md_metrics_add(&s->bytes_out[l], out);
}

/* Sum of one counter over all shards; offset is the counter's place within a shard. */
static uint64_t sum(const md_metrics *m, size_t offset)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < MD_METRICS_SHARDS; i++) {
        const atomic_uint_fast64_t *c =
            (const atomic_uint_fast64_t *)(const void *)((const char *)&m->shards[i] + offset);
        total += atomic_load_explicit(c, memory_order_relaxed);
    }
    return total;
}

#define SUM(m, field) sum((m), offsetof(md_metrics_shard, field))

static int vput(md_outbuf *out, const char *fmt, va_list ap)
{
    char text[MD_METRICS_PUT_MAX + 1];
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    if (n < 0 || (size_t)n >= sizeof(text))
        return -EINVAL; /* every caller's text is far shorter */
    return md_outbuf_append(out, text, (size_t)n);
}

int md_metrics_put(md_outbuf *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vput(out, fmt, ap);
    va_end(ap);
    return rc;
}

int md_metrics_put_head(md_outbuf *out, const char *name, const char *type, const char *help)
{
    return md_metrics_put(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int md_metrics_family(md_outbuf *out, int rc, const char *name, const char *type, const char *help,
                      const char *fmt, ...)
{
    if (rc == 0)
        rc = md_metrics_put_head(out, name, type, help);
    if (rc != 0)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    rc = vput(out, fmt, ap);
    va_end(ap);
    return rc;
}

static int put_per_listener(md_outbuf *out, const md_metrics *m, const char *name, const char *type,
                            const char *help, size_t opened, size_t closed)
{
    int rc = md_metrics_put_head(out, name, type, help);
    for (unsigned l = 0; rc == 0 && l < MD_LISTENERS; l++) {
        uint64_t c = 0;
        /* A gauge from two counters: closed is read first, so open never goes negative. */
        if (closed != 0)
            c = sum(m, closed + l * sizeof(atomic_uint_fast64_t));
        uint64_t v = sum(m, opened + l * sizeof(atomic_uint_fast64_t));
        v = v > c ? v - c : 0;
        rc = md_metrics_put(out, "%s{listener=\"%s\"} %llu\n", name, listener_names[l],
                            (unsigned long long)v);
    }
    return rc;
}

/* A label value as the exposition format wants it: \\, \" and \n escaped. */
static void label_text(const char *s, char *buf, size_t len)
{
    size_t j = 0;
    for (; *s != '\0' && j + 3 < len; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            buf[j++] = '\\';
        buf[j++] = *s == '\n' ? 'n' : *s;
    }
    buf[j] = '\0';
}

/* Per route: responses by status class, and the latency histogram. */
static int put_routes(md_outbuf *out, const md_metrics *m)
{
    /* Acquire: every label counted is written (pairs with md_metrics_route_slot's release). */
    uint32_t n = atomic_load_explicit(&m->nroutes, memory_order_acquire);
    if (n == 0)
        return 0;
    char label[2 * MD_METRICS_LABEL_MAX];
    int rc = md_metrics_put_head(out, "magpied_route_responses_total", "counter",
                                 "HTTP responses per route (its [route] header), by status class.");
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        label_text(m->route_label[r], label, sizeof label);
        for (unsigned i = 0; rc == 0 && i < MD_HTTP_STATUS_CLASSES; i++)
            rc = md_metrics_put(out,
                                "magpied_route_responses_total{route=\"%s\",code=\"%uxx\"} "
                                "%llu\n",
                                label, i + 1, (unsigned long long)SUM(m, routes[r].responses[i]));
    }
    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_route_rate_limited_total", "counter",
                                 "Requests per route refused by its limit_rate (429).");
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        label_text(m->route_label[r], label, sizeof label);
        rc = md_metrics_put(out, "magpied_route_rate_limited_total{route=\"%s\"} %llu\n", label,
                            (unsigned long long)SUM(m, routes[r].limited));
    }
    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_route_request_duration_seconds", "histogram",
                                 "Per route: from a request's first byte to its response.");
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        label_text(m->route_label[r], label, sizeof label);
        uint64_t cumulative = 0;
        for (unsigned i = 0; rc == 0 && i <= MD_METRICS_BUCKETS; i++) {
            cumulative += SUM(m, routes[r].latency[i]);
            rc = md_metrics_put(
                out, "magpied_route_request_duration_seconds_bucket{route=\"%s\",le=\"%s\"} %llu\n",
                label, md_metrics_bucket_le(i), (unsigned long long)cumulative);
        }
        uint64_t ns = SUM(m, routes[r].latency_sum_ns);
        if (rc == 0)
            rc = md_metrics_put(out,
                                "magpied_route_request_duration_seconds_sum{route=\"%s\"} "
                                "%llu.%09llu\n",
                                label, (unsigned long long)(ns / 1000000000u),
                                (unsigned long long)(ns % 1000000000u));
        if (rc == 0)
            rc = md_metrics_put(out,
                                "magpied_route_request_duration_seconds_count{route=\"%s\"} %llu\n",
                                label, (unsigned long long)cumulative);
    }
    return rc;
}

int md_metrics_format(md_metrics *m, md_outbuf *out)
{
    int rc;
    rc = put_per_listener(out, m, "magpied_connections_open", "gauge", "Connections open now.",
                          offsetof(md_metrics_shard, conn_opened),
                          offsetof(md_metrics_shard, conn_closed));
    if (rc == 0)
        rc = put_per_listener(out, m, "magpied_connections_total", "counter",
                              "Connections accepted.", offsetof(md_metrics_shard, conn_opened), 0);
    if (rc == 0)
        rc = put_per_listener(out, m, "magpied_connections_refused_total", "counter",
                              "Connections closed at accept: their client had "
                              "max_connections_per_client open.",
                              offsetof(md_metrics_shard, conn_refused), 0);
    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_connections_closed_total", "counter",
                                 "Connections closed, by reason.");
    for (unsigned l = 0; rc == 0 && l < MD_LISTENERS; l++)
        for (unsigned r = 0; rc == 0 && r < MD_CLOSE_REASONS; r++)
            rc = md_metrics_put(
                out, "magpied_connections_closed_total{listener=\"%s\",reason=\"%s\"} %llu\n",
                listener_names[l], close_names[r],
                (unsigned long long)SUM(m, conn_closed_why[l][r]));
    if (rc == 0)
        rc = put_per_listener(out, m, "magpied_received_bytes_total", "counter",
                              "Bytes read from clients.", offsetof(md_metrics_shard, bytes_in), 0);
    if (rc == 0)
        rc =
            put_per_listener(out, m, "magpied_sent_bytes_total", "counter",
                             "Bytes queued for clients.", offsetof(md_metrics_shard, bytes_out), 0);
    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_http_responses_total", "counter",
                                 "HTTP responses, by status class.");
    for (unsigned i = 0; rc == 0 && i < MD_HTTP_STATUS_CLASSES; i++)
        rc = md_metrics_put(out, "magpied_http_responses_total{code=\"%uxx\"} %llu\n", i + 1,
                            (unsigned long long)SUM(m, responses[i]));

    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_http_request_duration_seconds", "histogram",
                                 "From a request's first byte to its response.");
    uint64_t cumulative = 0;
    for (unsigned i = 0; rc == 0 && i <= MD_METRICS_BUCKETS; i++) {
        cumulative += SUM(m, latency[i]);
        rc = md_metrics_put(out, "magpied_http_request_duration_seconds_bucket{le=\"%s\"} %llu\n",
                            md_metrics_bucket_le(i), (unsigned long long)cumulative);
    }
    if (rc == 0) {
        uint64_t ns = SUM(m, latency_sum_ns);
        rc = md_metrics_put(out,
                            "magpied_http_request_duration_seconds_sum %llu.%09llu\n"
                            "magpied_http_request_duration_seconds_count %llu\n",
                            (unsigned long long)(ns / 1000000000u),
                            (unsigned long long)(ns % 1000000000u), (unsigned long long)cumulative);
    }
    if (rc == 0)
        rc = put_routes(out, m);
    if (rc == 0 && m->extra != NULL)
        rc = m->extra(m->extra_arg, out);
    return rc;
}

int md_metrics_text(void *arg, md_outbuf *out)
{
    return md_metrics_format(arg, out);
}
