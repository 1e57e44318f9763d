/* Tests for tests/daemon/promtext.h, the Prometheus text-format checker that the /metrics
 * tests use in place of `promtool check metrics`: it passes well-formed text, and names each
 * kind of problem promtool reports (a parse error or a lint) in text that has it.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "daemon/promtext.h"

static char problems[8192];

static int check(const char *text)
{
    return prom_check(text, problems, sizeof problems);
}

static const char good[] = "# HELP app_requests_total Requests.\n"
                           "# TYPE app_requests_total counter\n"
                           "app_requests_total{code=\"2xx\",path=\"/a \\\"b\\\" \\\\ \\n\"} 3\n"
                           "app_requests_total{code=\"4xx\",} 0 1700000000000\n"
                           "# A comment.\n"
                           "\n"
                           "# HELP app_open_connections Open now; \\\\ and \\n escaped.\n"
                           "# TYPE app_open_connections gauge\n"
                           "app_open_connections -1.5e3\n"
                           "# HELP app_duration_seconds Durations.\n"
                           "# TYPE app_duration_seconds histogram\n"
                           "app_duration_seconds_bucket{op=\"r\",le=\"0.5\"} 1\n"
                           "app_duration_seconds_bucket{op=\"r\",le=\"1\"} 2\n"
                           "app_duration_seconds_bucket{op=\"r\",le=\"+Inf\"} 2\n"
                           "app_duration_seconds_sum{op=\"r\"} 1.25\n"
                           "app_duration_seconds_count{op=\"r\"} 2\n"
                           "app_duration_seconds_bucket{op=\"w\",le=\"+Inf\"} 0\n"
                           "app_duration_seconds_sum{op=\"w\"} 0\n"
                           "app_duration_seconds_count{op=\"w\"} 0\n"
                           "# HELP app_rpc_seconds Quantiles.\n"
                           "# TYPE app_rpc_seconds summary\n"
                           "app_rpc_seconds{quantile=\"0.5\"} NaN\n"
                           "app_rpc_seconds_sum 0\n"
                           "app_rpc_seconds_count 0\n"
                           "# HELP app_temperature_celsius Untyped.\n"
                           "app_temperature_celsius +Inf\n";

Test(promtext, passes_well_formed_text)
{
    cr_assert_eq(check(good), 0, "%s", problems);
}

/* Each bad text gives exactly its problem(s), with what promtool would say in words. */
static void expect_problem(const char *text, const char *words)
{
    int n = check(text);
    cr_expect_geq(n, 1, "no problem found in:\n%s", text);
    cr_expect(strstr(problems, words) != NULL, "wanted \"%s\" for:\n%s\ngot:\n%s", words, text,
              problems);
}

#define FAMILY(name, type) "# HELP " name " h\n# TYPE " name " " type "\n"

Test(promtext, parse_errors)
{
    expect_problem(FAMILY("a_total", "counter") "a_total 1", "does not end in a newline");
    expect_problem(FAMILY("a_total", "counter") "a_total\n", "a blank before the value");
    expect_problem(FAMILY("a_total", "counter") "a_total one\n", "bad value \"one\"");
    expect_problem(FAMILY("a_total", "counter") "a_total 1 2 3\n", "at most a timestamp");
    expect_problem(FAMILY("a_total", "counter") "a_total 1 1.5\n", "bad timestamp");
    expect_problem(FAMILY("a_total", "counter") "a_total{x=\"1} 1\n", "unterminated value");
    expect_problem(FAMILY("a_total", "counter") "a_total{x=\"\\t\"} 1\n", "bad escape");
    expect_problem(FAMILY("a_total", "counter") "a_total{x=1} 1\n", "expected =\"");
    expect_problem(FAMILY("a_total", "counter") "a_total{1x=\"1\"} 1\n", "bad label name");
    expect_problem(FAMILY("a_total", "counter") "a_total{x=\"1\",x=\"2\"} 1\n", "label x twice");
    expect_problem(FAMILY("a_total", "counter") "a_total{__x=\"1\"} 1\n", "reserved");
    expect_problem(FAMILY("a_total", "counter") "a_total 1\na_total 2\n", "the same series");
    expect_problem(FAMILY("a_total", "counter") "a_total -1\n", "a negative counter");
    expect_problem("# TYPE a_total counter\n# TYPE a_total counter\na_total 1\n", "a second TYPE");
    expect_problem("# HELP a h\n# HELP a h\na 1\n", "a second HELP");
    expect_problem("# HELP a h\na 1\n# TYPE a gauge\n", "TYPE after the samples");
    expect_problem("# HELP a h\n# TYPE a thing\na 1\n", "unknown type");
    expect_problem("# HELP a bad \\t escape\na 1\n", "HELP: bad escape");
    expect_problem("# HELP a h\n# HELP b h\na 1\nb 1\na{x=\"1\"} 2\n", "not one group");
    expect_problem("# HELP a h\n# TYPE a gauge\n", "no sample");
    expect_problem("9a 1\n", "not a metric name");
    expect_problem("# HELP a h\na 1\r\n", "a NUL or CR");
}

Test(promtext, histograms_and_summaries)
{
    const char *h = FAMILY("d_seconds", "histogram");
    char text[1024];
    snprintf(text, sizeof text,
             "%sd_seconds_bucket{le=\"1\"} 2\nd_seconds_bucket{le=\"2\"} 1\n"
             "d_seconds_bucket{le=\"+Inf\"} 2\nd_seconds_sum 1\nd_seconds_count 2\n",
             h);
    expect_problem(text, "bucket le=2 holds fewer than le=1");
    snprintf(text, sizeof text,
             "%sd_seconds_bucket{le=\"1\"} 2\nd_seconds_sum 1\n"
             "d_seconds_count 2\n",
             h);
    expect_problem(text, "no le=\"+Inf\" bucket");
    snprintf(text, sizeof text,
             "%sd_seconds_bucket{le=\"+Inf\"} 2\nd_seconds_sum 1\n"
             "d_seconds_count 3\n",
             h);
    expect_problem(text, "_count 3 is not the +Inf bucket's 2");
    snprintf(text, sizeof text, "%sd_seconds_bucket{le=\"+Inf\"} 2\nd_seconds_count 2\n", h);
    expect_problem(text, "no _sum");
    snprintf(text, sizeof text, "%sd_seconds_bucket{le=\"+Inf\"} 2\nd_seconds_sum 2\n", h);
    expect_problem(text, "no _count");
    snprintf(text, sizeof text, "%sd_seconds_bucket 2\nd_seconds_sum 2\nd_seconds_count 2\n", h);
    expect_problem(text, "a bucket without le");
    snprintf(text, sizeof text,
             "%sd_seconds_bucket{le=\"x\"} 2\nd_seconds_sum 2\n"
             "d_seconds_count 2\n",
             h);
    expect_problem(text, "bad le");
    snprintf(text, sizeof text, "%sd_seconds 2\n", h);
    expect_problem(text, "no _bucket, _sum or _count");
    expect_problem(FAMILY("r_seconds", "summary") "r_seconds{quantile=\"2\"} 1\nr_seconds_sum 1\n"
                                                  "r_seconds_count 1\n",
                   "bad quantile");
}

Test(promtext, promtool_lints)
{
    expect_problem("# TYPE a_total counter\na_total 1\n", "no help text");
    expect_problem(FAMILY("requests", "counter") "requests 1\n", "should end in _total");
    expect_problem(FAMILY("open_total", "gauge") "open_total 1\n", "only a counter's name");
    expect_problem(FAMILY("wait_milliseconds", "gauge") "wait_milliseconds 1\n",
                   "use the base unit seconds, not milliseconds");
    expect_problem(FAMILY("up_hours", "gauge") "up_hours 1\n", "base unit seconds, not hours");
    expect_problem(FAMILY("sent_bits_total", "counter") "sent_bits_total 1\n",
                   "base unit bytes, not bits");
    expect_problem(FAMILY("size_kilobytes", "gauge") "size_kilobytes 1\n",
                   "base unit bytes, not kilobytes");
    expect_problem(FAMILY("wait_ms", "gauge") "wait_ms 1\n", "abbreviated unit (_ms)");
    expect_problem(FAMILY("up_sec_now", "gauge") "up_sec_now 1\n", "abbreviated unit (_sec)");
    expect_problem(FAMILY("jobs_gauge", "gauge") "jobs_gauge 1\n", "the type (gauge)");
    expect_problem(FAMILY("jobs_counter_total", "counter") "jobs_counter_total 1\n",
                   "the type (counter)");
    expect_problem(FAMILY("job:rate", "gauge") "job:rate 1\n", "a ':' in the name");
    expect_problem(FAMILY("jobRate", "gauge") "jobRate 1\n", "camelCase in the name");
    expect_problem(FAMILY("jobs", "gauge") "jobs{workerId=\"1\"} 1\n", "camelCase in a label");
    expect_problem(FAMILY("x_bucket", "gauge") "x_bucket 1\n", "_bucket ends only");
    expect_problem(FAMILY("x_count", "gauge") "x_count 1\n", "_count and _sum end only");
    expect_problem(FAMILY("x_sum", "gauge") "x_sum 1\n", "_count and _sum end only");
    expect_problem(FAMILY("x", "gauge") "x{le=\"1\"} 1\n", "an le label outside a histogram");
    expect_problem(FAMILY("x", "gauge") "x{quantile=\"1\"} 1\n", "a quantile label outside");
}
