/* server_metrics.c: the part of /metrics that is not the daemon's own counters (metrics.c):
 * the runtime's counters per worker, its read buffers and tasks, the process's build,
 * uptime, reloads, access-log drops and HTTP settings generations, and the static handler's
 * open-file caches (http/handlers/static/file_cache.c). Written with metrics.c's
 * writer, after its text (md_metrics_set_extra). Runs on the worker that serves the scrape.
 */
#include <errno.h>
#include <stddef.h>

#include "server/conn.h"
#include "core/log.h"
#include "core/version.h"
#include "http/handlers/static/file_cache.h"
#include "http/compress.h"
#include "http/http2.h"
#include "server/tls.h"
#include "llhttp.h"

/* The worker counters, per worker. */
static int worker_metrics(md_server *s, md_outbuf *out)
{
    static const struct {
        const char *name, *help;
        size_t offset;
    } counters[] = {
#define C(f, h) {#f, h, offsetof(mp_worker_stats, f)},
        MP_WORKER_COUNTERS(C)
#undef C
    };
    unsigned workers = mp_runtime_workers(s->rt);
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < sizeof counters / sizeof counters[0]; k++) {
        rc = md_metrics_put(
            out, "# HELP magpie_worker_%s_total %s\n# TYPE magpie_worker_%s_total counter\n",
            counters[k].name, counters[k].help, counters[k].name);
        for (unsigned w = 0; rc == 0 && w < workers; w++) {
            mp_worker_stats ws;
            mp_runtime_worker_stats(s->rt, w, &ws);
            uint64_t v = *(const uint64_t *)((const char *)&ws + counters[k].offset);
            rc = md_metrics_put(out, "magpie_worker_%s_total{worker=\"%u\"} %llu\n",
                                counters[k].name, w, (unsigned long long)v);
        }
    }
    return rc;
}

/* The runtime as a whole: read buffers, workers, tasks, wake-up latency, the blocking pool. */
static int runtime_metrics(md_server *s, md_outbuf *out)
{
    mp_stats st;
    mp_runtime_stats_get(s->rt, &st);
    size_t bufs_used = 0, bufs_pooled = 0;
    mp_tcp_buffer_stats(&bufs_used, &bufs_pooled);
    int rc = md_metrics_family(out, 0, "magpie_tcp_read_buffers", "gauge",
                               "Read buffers: held by connections, or pooled.",
                               "magpie_tcp_read_buffers{state=\"in_use\"} %zu\n"
                               "magpie_tcp_read_buffers{state=\"pooled\"} %zu\n",
                               bufs_used, bufs_pooled);
    rc = md_metrics_family(out, rc, "magpie_runtime_workers", "gauge",
                           "Worker threads configured and started.",
                           "magpie_runtime_workers{state=\"configured\"} %u\n"
                           "magpie_runtime_workers{state=\"started\"} %u\n",
                           st.workers, st.workers_started);
    rc = md_metrics_family(out, rc, "magpie_runtime_live_tasks", "gauge",
                           "Tasks spawned and not complete.", "magpie_runtime_live_tasks %llu\n",
                           (unsigned long long)st.live_tasks);
    rc = md_metrics_family(out, rc, "magpie_runtime_wake_latency_seconds", "gauge",
                           "Recent time from unparking a worker to its running (moving average).",
                           "magpie_runtime_wake_latency_seconds %.9f\n",
                           (double)st.wake_latency_ns / 1e9);
    rc = md_metrics_family(out, rc, "magpie_blocking_threads", "gauge",
                           "Threads of the blocking pool (file reads), and of them idle.",
                           "magpie_blocking_threads{state=\"alive\"} %u\n"
                           "magpie_blocking_threads{state=\"idle\"} %u\n",
                           st.blocking_threads, st.blocking_idle);
    rc = md_metrics_family(out, rc, "magpie_blocking_jobs", "gauge",
                           "Blocking-pool jobs waiting for a thread, and running.",
                           "magpie_blocking_jobs{state=\"queued\"} %u\n"
                           "magpie_blocking_jobs{state=\"running\"} %u\n",
                           st.blocking_queued, st.blocking_running);
    rc = md_metrics_family(out, rc, "magpie_blocking_jobs_total", "counter",
                           "Jobs given to the blocking pool.", "magpie_blocking_jobs_total %llu\n",
                           (unsigned long long)st.blocking_jobs);
    return md_metrics_family(out, rc, "magpie_blocking_threads_started_total", "counter",
                             "Blocking-pool threads started, and starts that failed.",
                             "magpie_blocking_threads_started_total{result=\"success\"} %llu\n"
                             "magpie_blocking_threads_started_total{result=\"failure\"} %llu\n",
                             (unsigned long long)st.blocking_threads_started,
                             (unsigned long long)st.blocking_spawn_failures);
}

/* Build, uptime, reloads, the access log's drops, the HTTP settings generations. */
static int process_metrics(md_server *s, md_outbuf *out)
{
    /* Relaxed: independent counters (see md_server_count_reload). */
    unsigned long long ok = atomic_load_explicit(&s->reloads_ok, memory_order_relaxed);
    unsigned long long failed = atomic_load_explicit(&s->reloads_failed, memory_order_relaxed);
    bool last_ok = atomic_load_explicit(&s->last_reload_ok, memory_order_relaxed);
    int rc = md_metrics_family(
        out, 0, "magpied_build_info", "gauge", "Versions magpied was built with; always 1.",
        "magpied_build_info{version=\"%s\",magpie=\"%d.%d.%d\",libuv=\"%s\","
        "llhttp=\"%d.%d.%d\"} 1\n",
        MAGPIED_VERSION, MP_VERSION_MAJOR, MP_VERSION_MINOR, MP_VERSION_PATCH, uv_version_string(),
        LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
    rc = md_metrics_family(out, rc, "magpied_uptime_seconds", "gauge",
                           "Time since magpied started.", "magpied_uptime_seconds %.3f\n",
                           (double)(uv_hrtime() - s->start_ns) / 1e9);
    rc = md_metrics_family(out, rc, "magpied_reloads_total", "counter",
                           "Configuration reloads (SIGHUP), by result.",
                           "magpied_reloads_total{result=\"success\"} %llu\n"
                           "magpied_reloads_total{result=\"failure\"} %llu\n",
                           ok, failed);
    rc = md_metrics_family(out, rc, "magpied_config_last_reload_successful", "gauge",
                           "Whether the last reload applied (1) or kept the old configuration (0).",
                           "magpied_config_last_reload_successful %d\n", last_ok ? 1 : 0);
    rc = md_metrics_family(out, rc, "magpied_access_log_dropped_total", "counter",
                           "Access log lines dropped because the writer fell behind.",
                           "magpied_access_log_dropped_total %llu\n",
                           (unsigned long long)md_log_access_dropped());
    return md_metrics_family(out, rc, "magpied_http_config_generations", "gauge",
                             "HTTP settings kept in memory: the current ones and older ones "
                             "that open connections started under.",
                             "magpied_http_config_generations %u\n",
                             (unsigned)md_http_gens_count(&s->gens));
}

int md_server_metrics_text(void *arg, md_outbuf *out)
{
    md_server *s = arg;
    int rc = worker_metrics(s, out);
    if (rc == 0)
        rc = runtime_metrics(s, out);
    if (rc == 0)
        rc = process_metrics(s, out);
    if (rc == 0)
        rc = md_file_cache_metrics(out);
    if (rc == 0)
        rc = md_tls_metrics_text(out); /* [https]: handshakes (tls.c) */
    if (rc == 0)
        rc = md_h2_metrics_text(out); /* HTTP/2 connections, streams, refusals (http2.c) */
    if (rc == 0)
        rc = md_compress_metrics(out); /* compression on the fly (compress.c) */
    return rc != 0 ? -ENOMEM : 0;
}
