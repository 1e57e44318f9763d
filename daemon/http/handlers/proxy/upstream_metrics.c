/* upstream_metrics.c: the upstream groups' /metrics: counters kept by (group, server) for the
 * process's life, and their exposition.
 *
 * A generation's groups and peers (upstream.c) come and go with reloads; their counters do
 * not. Each peer points at the counters of its (group, server label) in a registry that only
 * grows, so a reload that keeps a server keeps counting where the last generation left off
 * (Prometheus reads a counter that drops as a restart), and requests still finishing under an
 * old generation count in the same place as new ones. A server the configuration no longer
 * names drops out of the exposition (only the current generation's groups are shown) but
 * keeps its counters should it come back. The registry is bounded by the distinct servers
 * ever configured, a few hundred bytes each.
 */
#include "http/handlers/proxy/upstream.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    pthread_mutex_t mu;
    md_upstream_counters *head;
} registry = {.mu = PTHREAD_MUTEX_INITIALIZER};

md_upstream_counters *md_upstream_counters_of(const char *group, const char *server)
{
    pthread_mutex_lock(&registry.mu);
    md_upstream_counters *n = registry.head;
    while (n != NULL && !(strcmp(n->group, group) == 0 && strcmp(n->server, server) == 0))
        n = n->next;
    if (n == NULL && (n = calloc(1, sizeof *n)) != NULL) {
        snprintf(n->group, sizeof n->group, "%s", group);
        snprintf(n->server, sizeof n->server, "%s", server);
        n->next = registry.head;
        registry.head = n;
    }
    pthread_mutex_unlock(&registry.mu);
    return n;
}

void md_upstream_count_response(md_upstream_peer *peer, unsigned status, uint64_t ms)
{
    md_upstream_counters *n = peer->n;
    unsigned cls = status / 100 - 1;
    /* Relaxed: monotonic counters (upstream.h). */
    atomic_fetch_add_explicit(
        &n->responses[cls < MD_HTTP_STATUS_CLASSES ? cls : MD_HTTP_STATUS_CLASSES - 1], 1,
        memory_order_relaxed);
    atomic_fetch_add_explicit(&n->header_ms[md_metrics_bucket(ms * 1000000)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&n->header_ms_sum, ms, memory_order_relaxed);
}

/* A live server's state for its lines, copied under its group's mutex: re-resolution may give
 * its slot to another address once it is out of the set (upstream.h). */
typedef struct snap {
    char label[MD_UPSTREAM_LABEL_MAX];
    md_upstream_counters *n;
    bool up;
    uint32_t idle;
} snap;

/* Every live server of every group of us, one sample line each from put_line. */
typedef int (*put_fn)(md_outbuf *out, const md_upstream *up, const snap *p);

static int each_server(md_outbuf *out, md_upstreams *us, int rc, const char *name, const char *type,
                       const char *help, put_fn put_line)
{
    uint64_t now = mp_now_ms();
    if (rc == 0)
        rc = md_metrics_put_head(out, name, type, help);
    for (uint32_t i = 0; rc == 0 && i < us->conf.n; i++) {
        md_upstream *up = &us->u[i];
        for (uint32_t j = 0; rc == 0 && j < MD_UPSTREAM_SLOTS_MAX; j++) {
            md_upstream_peer *p = &up->peers[j];
            snap sn;
            pthread_mutex_lock(&up->mu);
            bool live = p->live;
            if (live) {
                memcpy(sn.label, p->slot.label, sizeof sn.label);
                sn.n = p->n;
                sn.up = now >= p->down_until_ms && !p->health_down;
                sn.idle = p->nidle;
            }
            pthread_mutex_unlock(&up->mu);
            if (live)
                rc = put_line(out, up, &sn);
        }
    }
    return rc;
}

static uint64_t load(const _Atomic uint64_t *c)
{
    /* Relaxed: monotonic counters (upstream.h). */
    return atomic_load_explicit(c, memory_order_relaxed);
}

static int put_requests(md_outbuf *out, const md_upstream *up, const snap *p)
{
    return md_metrics_put(
        out, "magpied_upstream_requests_total{upstream=\"%s\",server=\"%s\"} %" PRIu64 "\n",
        up->conf->name, p->label, load(&p->n->requests));
}

static int put_failures(md_outbuf *out, const md_upstream *up, const snap *p)
{
    int rc = 0;
    for (unsigned r = 0; rc == 0 && r < MD_UP_REASONS; r++) {
        uint64_t v = load(&p->n->failures[r]);
        if (v != 0 || r == MD_UP_CONNECT_REFUSED)
            rc = md_metrics_put(out,
                                "magpied_upstream_failures_total{upstream=\"%s\",server=\"%s\","
                                "reason=\"%s\"} %" PRIu64 "\n",
                                up->conf->name, p->label,
                                md_upstream_reason_name((md_upstream_reason)r), v);
    }
    return rc;
}

static int put_responses(md_outbuf *out, const md_upstream *up, const snap *p)
{
    int rc = 0;
    for (unsigned c = 0; rc == 0 && c < MD_HTTP_STATUS_CLASSES; c++)
        rc = md_metrics_put(out,
                            "magpied_upstream_responses_total{upstream=\"%s\",server=\"%s\","
                            "code=\"%uxx\"} %" PRIu64 "\n",
                            up->conf->name, p->label, c + 1, load(&p->n->responses[c]));
    return rc;
}

static int put_header_time(md_outbuf *out, const md_upstream *up, const snap *p)
{
    int rc = 0;
    uint64_t cumulative = 0;
    for (unsigned i = 0; rc == 0 && i <= MD_METRICS_BUCKETS; i++) {
        cumulative += load(&p->n->header_ms[i]);
        rc = md_metrics_put(out,
                            "magpied_upstream_header_duration_seconds_bucket{upstream=\"%s\","
                            "server=\"%s\",le=\"%s\"} %" PRIu64 "\n",
                            up->conf->name, p->label, md_metrics_bucket_le(i), cumulative);
    }
    uint64_t ms = load(&p->n->header_ms_sum);
    if (rc == 0)
        rc = md_metrics_put(out,
                            "magpied_upstream_header_duration_seconds_sum{upstream=\"%s\","
                            "server=\"%s\"} %" PRIu64 ".%03u\n",
                            up->conf->name, p->label, ms / 1000, (unsigned)(ms % 1000));
    if (rc == 0)
        rc = md_metrics_put(out,
                            "magpied_upstream_header_duration_seconds_count{upstream=\"%s\","
                            "server=\"%s\"} %" PRIu64 "\n",
                            up->conf->name, p->label, cumulative);
    return rc;
}

static int put_up(md_outbuf *out, const md_upstream *up, const snap *p)
{
    return md_metrics_put(out, "magpied_upstream_server_up{upstream=\"%s\",server=\"%s\"} %d\n",
                          up->conf->name, p->label, p->up ? 1 : 0);
}

static int put_idle(md_outbuf *out, const md_upstream *up, const snap *p)
{
    return md_metrics_put(out,
                          "magpied_upstream_idle_connections{upstream=\"%s\",server=\"%s\"} %u\n",
                          up->conf->name, p->label, (unsigned)p->idle);
}

/* Re-resolution's series, for the groups that re-resolve (resolve_interval_ms). */
static int resolve_metrics(md_outbuf *out, md_upstreams *us, int rc)
{
    bool any = false;
    for (uint32_t i = 0; i < us->conf.n; i++)
        any = any || us->u[i].conf->resolve_interval_ms != 0;
    if (!any)
        return rc;
    static const struct {
        const char *name, *type, *help;
    } heads[] = {
        {"magpied_upstream_resolutions_total", "counter",
         "Re-resolutions of an upstream's server names that answered."},
        {"magpied_upstream_resolve_failures_total", "counter",
         "Re-resolutions that failed (the last addresses were kept)."},
        {"magpied_upstream_addresses", "gauge", "Servers (addresses) an upstream has in its set."},
    };
    for (unsigned k = 0; rc == 0 && k < sizeof heads / sizeof heads[0]; k++) {
        rc = md_metrics_put_head(out, heads[k].name, heads[k].type, heads[k].help);
        for (uint32_t i = 0; rc == 0 && i < us->conf.n; i++) {
            md_upstream *up = &us->u[i];
            if (up->conf->resolve_interval_ms == 0)
                continue;
            uint64_t v;
            if (k == 0) {
                v = load(&up->n->resolutions);
            } else if (k == 1) {
                v = load(&up->n->resolve_failures);
            } else {
                pthread_mutex_lock(&up->mu);
                v = up->nlive;
                pthread_mutex_unlock(&up->mu);
            }
            rc = md_metrics_put(out, "%s{upstream=\"%s\"} %" PRIu64 "\n", heads[k].name,
                                up->conf->name, v);
        }
    }
    return rc;
}

int md_upstreams_metrics_text(md_upstreams *us, md_outbuf *out)
{
    if (us == NULL || us->conf.n == 0)
        return 0;
    int rc = each_server(out, us, 0, "magpied_upstream_requests_total", "counter",
                         "Attempts sent to each upstream server.", put_requests);
    rc = each_server(out, us, rc, "magpied_upstream_failures_total", "counter",
                     "Failed attempts, by upstream server and reason.", put_failures);
    rc = each_server(out, us, rc, "magpied_upstream_responses_total", "counter",
                     "Response heads passed on from each upstream server, by status class.",
                     put_responses);
    rc = each_server(out, us, rc, "magpied_upstream_header_duration_seconds", "histogram",
                     "From a request's first attempt to its response head (ms resolution).",
                     put_header_time);
    if (rc == 0)
        rc = md_metrics_put_head(out, "magpied_upstream_retries_total", "counter",
                                 "Attempts after the first, per upstream.");
    for (uint32_t i = 0; rc == 0 && i < us->conf.n; i++)
        rc = md_metrics_put(out, "magpied_upstream_retries_total{upstream=\"%s\"} %" PRIu64 "\n",
                            us->u[i].conf->name, load(&us->u[i].n->retries));
    rc = each_server(out, us, rc, "magpied_upstream_server_up", "gauge",
                     "1 while a server takes requests (passive and active health).", put_up);
    rc = each_server(out, us, rc, "magpied_upstream_idle_connections", "gauge",
                     "Pooled keep-alive connections to each server.", put_idle);
    return resolve_metrics(out, us, rc);
}
