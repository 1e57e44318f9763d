/* Tests for daemon/core/metrics.c: sharded counters summed across threads, the latency buckets,
 * and exposition text that a Prometheus text-format parser would accept.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/promtext.h"
#include "core/metrics.h"

static md_metrics m;

static void setup(void)
{
    md_metrics_init(&m);
}

TestSuite(metrics, .init = setup, .timeout = 20);

static char *format(size_t *len)
{
    md_outbuf out;
    md_outbuf_init(&out);
    cr_assert_eq(md_metrics_format(&m, &out), 0);
    char *text = malloc(out.len + 1);
    cr_assert_not_null(text);
    memcpy(text, out.data, out.len);
    text[out.len] = '\0';
    *len = out.len;
    md_outbuf_free(&out);
    return text;
}

/* The value of the sample line that starts with "series ", or -1. */
static long long sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        cr_assert_not_null(end, "unterminated line");
        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtoll(line + n + 1, NULL, 10);
        line = end + 1;
    }
    return -1;
}

Test(metrics, buckets)
{
    cr_assert_eq(md_metrics_bucket(0), 0);
    cr_assert_eq(md_metrics_bucket(50000), 0);
    cr_assert_eq(md_metrics_bucket(50001), 1);
    cr_assert_eq(md_metrics_bucket(1000000), 4);
    cr_assert_eq(md_metrics_bucket(10000000000ull), MD_METRICS_BUCKETS - 1);
    cr_assert_eq(md_metrics_bucket(10000000001ull), MD_METRICS_BUCKETS);
    cr_assert_eq(md_metrics_bucket(UINT64_MAX), MD_METRICS_BUCKETS);
}

Test(metrics, counters_and_gauge)
{
    md_metrics_conn_opened(&m, MD_LISTENER_HTTP);
    md_metrics_conn_opened(&m, MD_LISTENER_HTTP);
    md_metrics_conn_opened(&m, MD_LISTENER_ECHO);
    md_metrics_conn_closed(&m, MD_LISTENER_HTTP, MD_CLOSE_SEND_TIMEOUT);
    md_metrics_bytes(&m, MD_LISTENER_ECHO, 10, 20);
    md_metrics_shard *s = md_metrics_local(&m);
    md_metrics_add(&s->responses[1], 5);
    md_metrics_add(&s->responses[3], 2);
    md_metrics_add(&s->latency[0], 3);
    md_metrics_add(&s->latency[MD_METRICS_BUCKETS], 1);
    md_metrics_add(&s->latency_sum_ns, 12500000001ull);
    size_t len;
    char *t = format(&len);
    cr_assert_eq(sample(t, "magpied_connections_open{listener=\"http\"}"), 1);
    cr_assert_eq(sample(t, "magpied_connections_open{listener=\"echo\"}"), 1);
    cr_assert_eq(sample(t, "magpied_connections_total{listener=\"http\"}"), 2);
    cr_assert_eq(
        sample(t, "magpied_connections_closed_total{listener=\"http\",reason=\"send_timeout\"}"),
        1);
    cr_assert_eq(
        sample(t, "magpied_connections_closed_total{listener=\"echo\",reason=\"send_timeout\"}"),
        0);
    cr_assert_eq(
        sample(t, "magpied_connections_closed_total{listener=\"http\",reason=\"peer_closed\"}"), 0);
    cr_assert_eq(sample(t, "magpied_received_bytes_total{listener=\"echo\"}"), 10);
    cr_assert_eq(sample(t, "magpied_sent_bytes_total{listener=\"echo\"}"), 20);
    cr_assert_eq(sample(t, "magpied_http_responses_total{code=\"2xx\"}"), 5);
    cr_assert_eq(sample(t, "magpied_http_responses_total{code=\"4xx\"}"), 2);
    cr_assert_eq(sample(t, "magpied_http_responses_total{code=\"5xx\"}"), 0);
    cr_assert_eq(sample(t, "magpied_http_request_duration_seconds_bucket{le=\"5e-05\"}"), 3);
    cr_assert_eq(sample(t, "magpied_http_request_duration_seconds_bucket{le=\"10\"}"), 3);
    cr_assert_eq(sample(t, "magpied_http_request_duration_seconds_bucket{le=\"+Inf\"}"), 4);
    cr_assert_eq(sample(t, "magpied_http_request_duration_seconds_count"), 4);
    cr_assert_not_null(strstr(t, "\nmagpied_http_request_duration_seconds_sum 12.500000001\n"));
    free(t);
}

static int is_name_char(char ch, int first)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == ':' ||
           (!first && ch >= '0' && ch <= '9');
}

/* Text format 0.0.4: HELP and TYPE before a family's samples, names and labels well formed,
 * values numbers, buckets cumulative and ending in +Inf equal to _count. */
Test(metrics, exposition_is_valid)
{
    md_metrics_shard *s = md_metrics_local(&m);
    for (unsigned i = 0; i <= MD_METRICS_BUCKETS; i++)
        md_metrics_add(&s->latency[i], i + 1);
    size_t len;
    char *t = format(&len);
    cr_assert_gt(len, 0);
    cr_assert_eq(t[len - 1], '\n');
    /* The whole format and promtool's naming rules (promtext.h); then a reading of its own. */
    static char problems[8192];
    cr_assert_eq(prom_check(t, problems, sizeof problems), 0, "%s\n%s", problems, t);
    char typed[32][96];
    size_t ntyped = 0;
    long long last_bucket = -1, inf = -1;
    for (char *line = t; *line != '\0';) {
        char *end = strchr(line, '\n');
        *end = '\0';
        if (line[0] == '#') {
            char name[96], kind[32];
            if (strncmp(line, "# TYPE ", 7) == 0) {
                cr_assert_eq(sscanf(line, "# TYPE %95s %31s", name, kind), 2, "%s", line);
                cr_assert(strcmp(kind, "counter") == 0 || strcmp(kind, "gauge") == 0 ||
                              strcmp(kind, "histogram") == 0,
                          "%s", line);
                strcpy(typed[ntyped++], name);
            } else {
                cr_assert_eq(strncmp(line, "# HELP ", 7), 0, "%s", line);
            }
        } else {
            const char *p = line;
            cr_assert(is_name_char(*p, 1), "%s", line);
            while (is_name_char(*p, 0))
                p++;
            size_t nlen = (size_t)(p - line);
            if (*p == '{') {
                const char *close = strchr(p, '}');
                cr_assert_not_null(close, "%s", line);
                cr_assert_not_null(strstr(p, "=\""), "%s", line);
                p = close + 1;
            }
            cr_assert_eq(*p, ' ', "%s", line);
            char *num_end;
            double v = strtod(p + 1, &num_end);
            cr_assert(num_end != p + 1 && *num_end == '\0' && v >= 0, "%s", line);
            /* The family is the name, or for a histogram the name less _bucket/_sum/_count. */
            int known = 0;
            for (size_t i = 0; i < ntyped; i++) {
                size_t tl = strlen(typed[i]);
                if (strncmp(line, typed[i], tl) == 0 && (tl == nlen || line[tl] == '_'))
                    known = 1;
            }
            cr_assert(known, "sample before its TYPE: %s", line);
            if (strncmp(line, "magpied_http_request_duration_seconds_bucket", 44) == 0) {
                long long b = (long long)v;
                cr_assert_geq(b, last_bucket, "buckets not cumulative: %s", line);
                last_bucket = b;
                if (strstr(line, "le=\"+Inf\"") != NULL)
                    inf = b;
            }
            if (strncmp(line, "magpied_http_request_duration_seconds_count ", 44) == 0)
                cr_assert_eq((long long)v, inf, "_count differs from the +Inf bucket");
        }
        line = end + 1;
    }
    cr_assert_eq(inf, (MD_METRICS_BUCKETS + 1) * (MD_METRICS_BUCKETS + 2) / 2);
    free(t);
}

static int extra(void *arg, md_outbuf *out)
{
    const char *text = arg;
    return md_outbuf_append(out, text, strlen(text));
}

Test(metrics, extra_hook_is_appended)
{
    static const char more[] = "# TYPE magpie_tasks_spawned_total counter\n"
                               "magpie_tasks_spawned_total 7\n";
    md_metrics_set_extra(&m, extra, (void *)more);
    size_t len;
    char *t = format(&len);
    cr_assert_geq(len, sizeof(more) - 1);
    cr_assert_str_eq(t + len - (sizeof(more) - 1), more);
    free(t);
    md_outbuf out;
    md_outbuf_init(&out);
    cr_assert_eq(md_metrics_text(&m, &out), 0);
    cr_assert_eq(out.len, len);
    md_outbuf_free(&out);
}

enum { THREADS = MD_METRICS_SHARDS + 8, ADDS = 100000 };

static void *add_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < ADDS; i++) {
        md_metrics_shard *s = md_metrics_local(&m);
        md_metrics_add(&s->responses[1], 1);
        md_metrics_add(&s->latency[i % (MD_METRICS_BUCKETS + 1)], 1);
    }
    md_metrics_conn_opened(&m, MD_LISTENER_HTTP);
    return NULL;
}

/* More threads than shards still add up exactly: the first threads own their shards and add
 * with a plain load and store, the later ones share the last shard with fetch_add. */
Test(metrics, threads_sum_exactly)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, add_many, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_join(t[i], NULL), 0);
    size_t len;
    char *text = format(&len);
    cr_assert_eq(sample(text, "magpied_http_responses_total{code=\"2xx\"}"), THREADS * ADDS);
    cr_assert_eq(sample(text, "magpied_http_request_duration_seconds_count"), THREADS * ADDS);
    cr_assert_eq(sample(text, "magpied_connections_total{listener=\"http\"}"), THREADS);
    free(text);
}

/* md_metrics_family: head and samples; an error before it passes through untouched, and sample
 * text over MD_METRICS_PUT_MAX is -EINVAL (the caller fails the whole exposition). */
Test(metrics, family_chains_and_bounds)
{
    md_outbuf out;
    md_outbuf_init(&out);
    int rc = md_metrics_family(&out, 0, "x_total", "counter", "Xs.", "x_total %d\n", 3);
    cr_assert_eq(rc, 0);
    static const char want[] = "# HELP x_total Xs.\n# TYPE x_total counter\nx_total 3\n";
    cr_assert_eq(out.len, sizeof want - 1);
    cr_assert_eq(memcmp(out.data, want, out.len), 0);
    cr_assert_eq(md_metrics_family(&out, -ENOMEM, "y", "gauge", "Y.", "y 1\n"), -ENOMEM);
    cr_assert_eq(out.len, sizeof want - 1, "nothing appended after an error");
    char big[MD_METRICS_PUT_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(md_metrics_family(&out, 0, "z", "gauge", "Z.", "%s\n", big), -EINVAL);
    md_outbuf_free(&out);
}

/* Per-route counters: one slot per label for the process's life, "other" once they run out,
 * labels escaped, and the families valid exposition. */
Test(metrics, route_slots_and_their_families)
{
    cr_assert_eq(md_metrics_route_slot(&m, "/api"), 0);
    cr_assert_eq(md_metrics_route_slot(&m, "= /metrics"), 1);
    cr_assert_eq(md_metrics_route_slot(&m, "/api"), 0, "the same label, the same slot");
    cr_assert_eq(md_metrics_route_slot(&m, "/q\"\\\n"), 2);
    md_metrics_shard *s = md_metrics_local(&m);
    md_metrics_route_response(s, 0, 1, md_metrics_bucket(2000000), 2000000); /* 2xx, 2 ms */
    md_metrics_route_response(s, 0, 3, md_metrics_bucket(30000), 30000);     /* 4xx */
    md_metrics_route_response(s, 2, 4, 0, 1);
    size_t len;
    char *t = format(&len);
    static char problems[8192];
    cr_assert_eq(prom_check(t, problems, sizeof problems), 0, "%s\n%s", problems, t);
    cr_assert_eq(sample(t, "magpied_route_responses_total{route=\"/api\",code=\"2xx\"}"), 1);
    cr_assert_eq(sample(t, "magpied_route_responses_total{route=\"/api\",code=\"4xx\"}"), 1);
    cr_assert_eq(sample(t, "magpied_route_responses_total{route=\"= /metrics\",code=\"2xx\"}"), 0);
    cr_assert_eq(sample(t, "magpied_route_responses_total{route=\"/q\\\"\\\\\\n\",code=\"5xx\"}"),
                 1, "%s", t);
    cr_assert_eq(
        sample(t, "magpied_route_request_duration_seconds_bucket{route=\"/api\",le=\"0.001\"}"), 1);
    cr_assert_eq(
        sample(t, "magpied_route_request_duration_seconds_bucket{route=\"/api\",le=\"+Inf\"}"), 2);
    cr_assert_eq(sample(t, "magpied_route_request_duration_seconds_count{route=\"/api\"}"), 2);
    free(t);

    /* Slots run out: the last is "other", shared by every later label. */
    char label[32];
    unsigned last = 0;
    for (int i = 0; i < MD_METRICS_ROUTES + 5; i++) {
        snprintf(label, sizeof label, "/r%d", i);
        last = md_metrics_route_slot(&m, label);
        cr_assert_lt(last, MD_METRICS_ROUTES);
    }
    cr_assert_eq(last, MD_METRICS_ROUTES - 1);
    cr_assert_str_eq(m.route_label[MD_METRICS_ROUTES - 1], "other");
    cr_assert_eq(md_metrics_route_slot(&m, "/api"), 0, "an early label keeps its slot");
    t = format(&len);
    cr_assert_eq(prom_check(t, problems, sizeof problems), 0, "%s", problems);
    cr_assert_geq(sample(t, "magpied_route_responses_total{route=\"other\",code=\"2xx\"}"), 0);
    free(t);
}
