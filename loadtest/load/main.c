/* magpie-load: an HTTP/1.1 keep-alive load generator on libmagpie's workers.
 *
 *   magpie-load [options] http[s]://HOST:PORT/PATH
 *
 * Closed loop (as wrk): -c connections, each keeping -p requests in flight (1: no
 * pipelining), for -d seconds. Open loop (-R RATE): RATE requests a second over all the
 * connections at fixed times, each measured from when it was due (conn.c). Every response is
 * framed (resp.c) and its status checked; latencies go into a log-linear histogram (hist.c).
 * Output: a summary like wrk's, and with --json / --csv the same figures for programs.
 * https:// runs every connection over TLS (tls.c, OpenSSL 3): handshakes per second, the
 * share resumed (--resume) and the handshake's percentiles are reported beside the rest.
 *
 * Bounded: every run ends by itself after -d seconds (at most an hour); a target that is not a
 * loopback address is refused unless --allow-remote names it; a target that does not answer
 * a first connect within --connect-timeout is an error before the run starts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "load.h"
#include "tls.h"

#define MAX_SECONDS 3600
#define MAX_HEADERS 32

static const char usage[] =
    "usage: magpie-load [options] http[s]://HOST[:PORT][/PATH]\n"
    "  -c, --connections N     connections (default 64)\n"
    "  -d, --duration SEC      length of the run, 1..3600 (default 10)\n"
    "  -t, --threads N         runtime workers (default 1)\n"
    "  -p, --pipeline N        requests in flight per connection (default 1)\n"
    "  -R, --rate N            open loop: N requests/s in all, latency from when each was due\n"
    "  -r, --requests FILE     requests from FILE (format in loadtest/load/README.md)\n"
    "  -H, --header 'K: V'     add a header to the URL's request (repeatable)\n"
    "  -m, --method M          method of the URL's request (default GET)\n"
    "      --timeout MS        a response owed longer is a timeout error (default 2000)\n"
    "      --connect-timeout MS  (default 2000)\n"
    "      --allow-remote ADDR the target may be ADDR, a numeric non-loopback address\n"
    "      --json FILE         write the results as JSON ('-': stdout)\n"
    "      --csv FILE          write one CSV header line and one row ('-': stdout)\n"
    "  -q, --quiet             no human summary\n"
    "TLS (https://; -H 'Connection: close' makes a connection, and a handshake, per request):\n"
    "      --resume            offer each connection slot's last session (ticket) again\n"
    "      --tls13, --tls12    that version only (default: either)\n"
    "      --sni NAME          server name sent (default: the URL's host unless numeric)\n"
    "      --cacert FILE       verify the server against FILE (default: no verification)\n";

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "magpie-load: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        abort();
    return p;
}

/* ---- requests */

typedef struct req_spec {
    char method[16];
    char *target;
    char *headers[MAX_HEADERS];
    int nheaders;
    char *body;
    size_t body_len;
} req_spec;

static bool has_header(const req_spec *r, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < r->nheaders; i++)
        if (strncasecmp(r->headers[i], name, n) == 0 && r->headers[i][n] == ':')
            return true;
    return false;
}

static void render(ld_req *out, const req_spec *r, const char *host)
{
    size_t cap = 256 + strlen(r->target) + strlen(host) + r->body_len;
    for (int i = 0; i < r->nheaders; i++)
        cap += strlen(r->headers[i]) + 2;
    char *b = malloc(cap);
    if (!b)
        abort();
    int n = snprintf(b, cap, "%s %s HTTP/1.1\r\n", r->method, r->target);
    if (!has_header(r, "host"))
        n += snprintf(b + n, cap - (size_t)n, "Host: %s\r\n", host);
    for (int i = 0; i < r->nheaders; i++)
        n += snprintf(b + n, cap - (size_t)n, "%s\r\n", r->headers[i]);
    if (r->body && !has_header(r, "content-length"))
        n += snprintf(b + n, cap - (size_t)n, "Content-Length: %zu\r\n", r->body_len);
    n += snprintf(b + n, cap - (size_t)n, "\r\n");
    if (r->body_len)
        memcpy(b + n, r->body, r->body_len);
    out->bytes = b;
    out->len = (size_t)n + r->body_len;
    out->head = strcmp(r->method, "HEAD") == 0;
}

static void spec_free(req_spec *r)
{
    free(r->target);
    for (int i = 0; i < r->nheaders; i++)
        free(r->headers[i]);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* The list file: blocks separated by empty lines, '#' lines are comments. A block's first
 * line is "METHOD TARGET"; then "Name: value" header lines; then optionally one of
 *   @body TEXT          the body is TEXT (the rest of the line)
 *   @body-file PATH     the body is the file's bytes
 *   @body-size N        the body is N bytes of 'x'
 */
static size_t load_list(const char *path, const char *host, ld_req **out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("%s: %s", path, strerror(errno));
    ld_req *reqs = NULL;
    size_t n = 0;
    req_spec r = {0};
    bool in_block = false;
    char line[8192];
    int lineno = 0;
    for (;;) {
        bool eof = !fgets(line, sizeof line, f);
        lineno++;
        size_t ll = eof ? 0 : strcspn(line, "\r\n");
        line[ll] = 0;
        if (!eof && line[0] == '#')
            continue;
        if (eof || ll == 0) {
            if (in_block) {
                ld_req *grown = realloc(reqs, (n + 1) * sizeof *reqs);
                if (!grown)
                    abort();
                reqs = grown;
                render(&reqs[n++], &r, host);
                spec_free(&r);
                in_block = false;
            }
            if (eof)
                break;
            continue;
        }
        char where[64];
        snprintf(where, sizeof where, "%d", lineno);
        if (!in_block) {
            char target[4096];
            if (sscanf(line, "%15s %4095s", r.method, target) != 2)
                die("%s:%s: expected METHOD TARGET", path, where);
            r.target = xstrdup(target);
            in_block = true;
        } else if (strncmp(line, "@body ", 6) == 0) {
            r.body = xstrdup(line + 6);
            r.body_len = strlen(r.body);
        } else if (strncmp(line, "@body-size ", 11) == 0) {
            long sz = atol(line + 11);
            if (sz < 0 || sz > (64L << 20))
                die("%s:%s: @body-size must be 0..67108864", path, where);
            if (!(r.body = malloc((size_t)sz + 1)))
                abort();
            memset(r.body, 'x', (size_t)sz);
            r.body_len = (size_t)sz;
        } else if (strncmp(line, "@body-file ", 11) == 0) {
            FILE *bf = fopen(line + 11, "rb");
            if (!bf)
                die("%s: %s", line + 11, strerror(errno));
            fseek(bf, 0, SEEK_END);
            long sz = ftell(bf);
            rewind(bf);
            if (sz < 0 || !(r.body = malloc((size_t)sz + 1)) ||
                fread(r.body, 1, (size_t)sz, bf) != (size_t)sz)
                die("%s: %s", line + 11, "cannot read");
            fclose(bf);
            r.body_len = (size_t)sz;
        } else if (strchr(line, ':') && line[0] != ':' && r.nheaders < MAX_HEADERS) {
            r.headers[r.nheaders++] = xstrdup(line);
        } else {
            die("%s:%s: expected a header line 'Name: value' or @body...", path, where);
        }
    }
    fclose(f);
    spec_free(&r);
    if (n == 0)
        die("%s: no requests", path);
    *out = reqs;
    return n;
}

/* ---- the target */

static bool is_loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)a;
        return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
    }
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a;
    if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
        return true;
    return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127;
}

static void addr_str(const struct sockaddr_storage *a, char *buf, size_t len)
{
    const void *src = a->ss_family == AF_INET
                          ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
                          : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
    if (!inet_ntop(a->ss_family, src, buf, (socklen_t)len))
        snprintf(buf, len, "?");
}

/* One plain connect, before anything starts: a target that is down is an error now, with its
 * reason, not a run of errors. 0 or a negative errno. */
static int probe(const struct sockaddr_storage *a, int timeout_ms)
{
    socklen_t len =
        a->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (connect(fd, (const struct sockaddr *)a, len) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
        } else {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int n = poll(&p, 1, timeout_ms);
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (n == 0)
                rc = -ETIMEDOUT;
            else if (n < 0)
                rc = -errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
                rc = -soerr;
        }
    }
    close(fd);
    return rc;
}

/* ---- output */

static const double pcts[] = {50, 90, 99, 99.9, 99.99};
static const char *const pct_names[] = {"p50", "p90", "p99", "p99_9", "p99_99"};
#define NPCT 5

static void fmt_ns(char *buf, size_t len, uint64_t ns)
{
    if (ns < 1000)
        snprintf(buf, len, "%luns", (unsigned long)ns);
    else if (ns < 1000000)
        snprintf(buf, len, "%.2fus", ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, len, "%.2fms", ns / 1e6);
    else
        snprintf(buf, len, "%.2fs", ns / 1e9);
}

static FILE *open_out(const char *path)
{
    if (strcmp(path, "-") == 0)
        return stdout;
    FILE *f = fopen(path, "w");
    if (!f)
        die("%s: %s", path, strerror(errno));
    return f;
}

static void close_out(FILE *f)
{
    if (f != stdout)
        fclose(f);
    else
        fflush(f);
}

typedef struct summary {
    const char *url;
    double seconds, rps, cpu_user, cpu_sys;
    uint64_t errors;
} summary;

static void print_human_tls(const summary *m, const ld_stats *s)
{
    printf("  TLS: %lu handshakes, %.2f/s, %.1f%% resumed\n", (unsigned long)s->handshakes,
           s->handshakes / m->seconds, s->handshakes ? 100.0 * s->resumed / s->handshakes : 0.0);
    if (!s->handshakes)
        return;
    char b[16];
    fmt_ns(b, sizeof b, (uint64_t)ld_hist_mean(&s->handshake));
    printf("  %-9s %10s", "Handshake", b);
    for (int i = 0; i < NPCT; i++) {
        fmt_ns(b, sizeof b, ld_hist_percentile(&s->handshake, pcts[i]));
        printf(" %10s", b);
    }
    fmt_ns(b, sizeof b, s->handshake.max);
    printf(" %10s\n", b);
}

static void print_human(const summary *m, const ld_stats *s)
{
    const char *mode = ld_g.rate > 0 ? "open loop" : "closed loop";
    printf("Running %.0fs test @ %s\n", m->seconds, m->url);
    printf("  %u workers and %u connections, %s", ld_g.workers, ld_g.conns, mode);
    if (ld_g.rate > 0)
        printf(" at %.0f requests/s", ld_g.rate);
    if (ld_g.depth > 1)
        printf(", pipeline %u", ld_g.depth);
    printf("\n  %-9s %10s %10s %10s %10s %10s %10s %10s\n", "", "mean", "p50", "p90", "p99",
           "p99.9", "p99.99", "max");
    const ld_hist *hs[2] = {&s->latency, &s->service};
    const char *names[2] = {ld_g.rate > 0 ? "Latency" : "Latency", "Service"};
    for (int h = 0; h < (ld_g.rate > 0 ? 2 : 1); h++) {
        char b[16];
        fmt_ns(b, sizeof b, (uint64_t)ld_hist_mean(hs[h]));
        printf("  %-9s %10s", names[h], b);
        for (int i = 0; i < NPCT; i++) {
            fmt_ns(b, sizeof b, ld_hist_percentile(hs[h], pcts[i]));
            printf(" %10s", b);
        }
        fmt_ns(b, sizeof b, hs[h]->max);
        printf(" %10s\n", b);
    }
    if (ld_g.rate > 0)
        printf("  (latency: from when each request was due, or was written if that was earlier; "
               "service: from when it was written)\n");
    printf("  %lu requests in %.2fs, %.2fMB read, %lu connects\n", (unsigned long)s->completed,
           m->seconds, s->bytes_read / 1048576.0, (unsigned long)s->connects);
    if (m->errors) {
        printf("  Errors:");
        for (int i = 0; i < LD_ERR_N; i++)
            printf(" %s %lu%s", ld_err_names[i], (unsigned long)s->errors[i],
                   i + 1 < LD_ERR_N ? "," : "\n");
    }
    printf("  Status: 2xx %lu, 3xx %lu, 4xx %lu, 5xx %lu, other %lu\n", (unsigned long)s->status[2],
           (unsigned long)s->status[3], (unsigned long)s->status[4], (unsigned long)s->status[5],
           (unsigned long)(s->status[0] + s->status[1]));
    if (ld_g.tls)
        print_human_tls(m, s);
    printf("Requests/sec: %.2f\n", m->rps);
    printf("Transfer/sec: %.2fMB\n", s->bytes_read / 1048576.0 / m->seconds);
    double cpu = m->cpu_user + m->cpu_sys;
    printf("Client CPU: %.2fs (user %.2f, sys %.2f), %.2fus/request, %.0f requests per "
           "CPU-second\n",
           cpu, m->cpu_user, m->cpu_sys, s->completed ? cpu * 1e6 / s->completed : 0.0,
           cpu > 0 ? s->completed / cpu : 0.0);
    printf("Per second:");
    for (unsigned i = 0; i < ld_g.seconds && i < (unsigned)(m->seconds + 0.5); i++)
        printf(" %lu", (unsigned long)s->per_second[i]);
    printf("\n");
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_hist(FILE *f, const char *name, const ld_hist *h)
{
    fprintf(f, "  \"%s_us\": {\"mean\": %.3f, \"min\": %.3f", name, ld_hist_mean(h) / 1e3,
            h->total ? h->min / 1e3 : 0.0);
    for (int i = 0; i < NPCT; i++)
        fprintf(f, ", \"%s\": %.3f", pct_names[i], ld_hist_percentile(h, pcts[i]) / 1e3);
    fprintf(f, ", \"max\": %.3f, \"count\": %lu},\n", h->max / 1e3, (unsigned long)h->total);
}

static void print_json(FILE *f, const summary *m, const ld_stats *s)
{
    double cpu = m->cpu_user + m->cpu_sys;
    fprintf(f, "{\n  \"url\": ");
    json_string(f, m->url);
    fprintf(f,
            ",\n  \"mode\": \"%s\",\n  \"connections\": %u,\n  \"workers\": %u,\n"
            "  \"pipeline\": %u,\n  \"rate\": %.1f,\n  \"duration_s\": %.3f,\n"
            "  \"requests\": %lu,\n  \"requests_per_s\": %.2f,\n  \"bytes_read\": %lu,\n"
            "  \"connects\": %lu,\n",
            ld_g.rate > 0 ? "open" : "closed", ld_g.conns, ld_g.workers, ld_g.depth, ld_g.rate,
            m->seconds, (unsigned long)s->completed, m->rps, (unsigned long)s->bytes_read,
            (unsigned long)s->connects);
    json_hist(f, "latency", &s->latency);
    json_hist(f, "service", &s->service);
    fprintf(f, "  \"errors\": {\"total\": %lu", (unsigned long)m->errors);
    for (int i = 0; i < LD_ERR_N; i++)
        fprintf(f, ", \"%s\": %lu", ld_err_names[i], (unsigned long)s->errors[i]);
    fprintf(f,
            "},\n  \"status\": {\"1xx\": %lu, \"2xx\": %lu, \"3xx\": %lu, \"4xx\": %lu, "
            "\"5xx\": %lu, \"other\": %lu},\n",
            (unsigned long)s->status[1], (unsigned long)s->status[2], (unsigned long)s->status[3],
            (unsigned long)s->status[4], (unsigned long)s->status[5], (unsigned long)s->status[0]);
    fprintf(f,
            "  \"cpu\": {\"user_s\": %.3f, \"sys_s\": %.3f, \"us_per_request\": %.3f, "
            "\"requests_per_cpu_s\": %.1f},\n",
            m->cpu_user, m->cpu_sys, s->completed ? cpu * 1e6 / s->completed : 0.0,
            cpu > 0 ? s->completed / cpu : 0.0);
    if (ld_g.tls) {
        fprintf(f,
                "  \"tls\": {\"handshakes\": %lu, \"handshakes_per_s\": %.2f, \"resumed\": %lu, "
                "\"resumed_share\": %.4f},\n",
                (unsigned long)s->handshakes, s->handshakes / m->seconds, (unsigned long)s->resumed,
                s->handshakes ? (double)s->resumed / s->handshakes : 0.0);
        json_hist(f, "handshake", &s->handshake);
    }
    fprintf(f, "  \"per_second\": [");
    unsigned secs = (unsigned)(m->seconds + 0.5);
    for (unsigned i = 0; i < ld_g.seconds && i < secs; i++)
        fprintf(f, "%s%lu", i ? ", " : "", (unsigned long)s->per_second[i]);
    fprintf(f, "]\n}\n");
}

static void print_csv(FILE *f, const summary *m, const ld_stats *s)
{
    double cpu = m->cpu_user + m->cpu_sys;
    fprintf(f,
            "mode,connections,workers,pipeline,rate,duration_s,requests,requests_per_s,"
            "errors,lat_mean_us,lat_p50_us,lat_p90_us,lat_p99_us,lat_p99_9_us,"
            "lat_p99_99_us,lat_max_us,svc_p50_us,svc_p99_us,svc_p99_9_us,cpu_s,"
            "cpu_us_per_request,url%s\n",
            ld_g.tls ? ",handshakes_per_s,resumed_share,hs_p50_us,hs_p99_us" : "");
    fprintf(f, "%s,%u,%u,%u,%.1f,%.3f,%lu,%.2f,%lu,%.3f", ld_g.rate > 0 ? "open" : "closed",
            ld_g.conns, ld_g.workers, ld_g.depth, ld_g.rate, m->seconds,
            (unsigned long)s->completed, m->rps, (unsigned long)m->errors,
            ld_hist_mean(&s->latency) / 1e3);
    for (int i = 0; i < NPCT; i++)
        fprintf(f, ",%.3f", ld_hist_percentile(&s->latency, pcts[i]) / 1e3);
    fprintf(f, ",%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%s", s->latency.max / 1e3,
            ld_hist_percentile(&s->service, 50) / 1e3, ld_hist_percentile(&s->service, 99) / 1e3,
            ld_hist_percentile(&s->service, 99.9) / 1e3, cpu,
            s->completed ? cpu * 1e6 / s->completed : 0.0, m->url);
    if (ld_g.tls)
        fprintf(f, ",%.2f,%.4f,%.3f,%.3f", s->handshakes / m->seconds,
                s->handshakes ? (double)s->resumed / s->handshakes : 0.0,
                ld_hist_percentile(&s->handshake, 50) / 1e3,
                ld_hist_percentile(&s->handshake, 99) / 1e3);
    fputc('\n', f);
}

/* ---- the run */

static sem_t done_sem;

static void on_all_done(void *arg)
{
    (void)arg;
    sem_post(&done_sem);
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + tv.tv_usec / 1e6;
}

static long num_arg(const char *s, const char *what, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        char range[64];
        snprintf(range, sizeof range, "%ld..%ld", lo, hi);
        die("%s must be %s", what, range);
    }
    return v;
}

int main(int argc, char **argv)
{
    enum {
        O_TIMEOUT = 256,
        O_CTIMEOUT,
        O_ALLOW,
        O_JSON,
        O_CSV,
        O_RESUME,
        O_TLS13,
        O_TLS12,
        O_SNI,
        O_CACERT
    };
    static const struct option longopts[] = {
        {"connections", required_argument, NULL, 'c'},
        {"duration", required_argument, NULL, 'd'},
        {"threads", required_argument, NULL, 't'},
        {"pipeline", required_argument, NULL, 'p'},
        {"rate", required_argument, NULL, 'R'},
        {"requests", required_argument, NULL, 'r'},
        {"header", required_argument, NULL, 'H'},
        {"method", required_argument, NULL, 'm'},
        {"quiet", no_argument, NULL, 'q'},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"connect-timeout", required_argument, NULL, O_CTIMEOUT},
        {"allow-remote", required_argument, NULL, O_ALLOW},
        {"json", required_argument, NULL, O_JSON},
        {"csv", required_argument, NULL, O_CSV},
        {"resume", no_argument, NULL, O_RESUME},
        {"tls13", no_argument, NULL, O_TLS13},
        {"tls12", no_argument, NULL, O_TLS12},
        {"sni", required_argument, NULL, O_SNI},
        {"cacert", required_argument, NULL, O_CACERT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    unsigned conns = 64, workers = 1, depth = 1, seconds = 10;
    double rate = 0;
    long timeout_ms = 2000, ctimeout_ms = 2000;
    const char *list = NULL, *allow = NULL, *json = NULL, *csv = NULL, *method = "GET";
    bool quiet = false, tls_opt = false;
    ld_tls_opts tls = {0};
    req_spec url_req = {0};
    int opt;
    while ((opt = getopt_long(argc, argv, "c:d:t:p:R:r:H:m:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            conns = (unsigned)num_arg(optarg, "-c", 1, 100000);
            break;
        case 'd':
            seconds = (unsigned)num_arg(optarg, "-d", 1, MAX_SECONDS);
            break;
        case 't':
            workers = (unsigned)num_arg(optarg, "-t", 1, 1024);
            break;
        case 'p':
            depth = (unsigned)num_arg(optarg, "-p", 1, 1024);
            break;
        case 'R':
            rate = (double)num_arg(optarg, "-R", 1, 100000000);
            break;
        case 'r':
            list = optarg;
            break;
        case 'H':
            if (url_req.nheaders == MAX_HEADERS || !strchr(optarg, ':'))
                die("-H wants 'Name: value' (at most 32): %s", optarg);
            url_req.headers[url_req.nheaders++] = xstrdup(optarg);
            break;
        case 'm':
            method = optarg;
            break;
        case 'q':
            quiet = true;
            break;
        case O_TIMEOUT:
            timeout_ms = num_arg(optarg, "--timeout", 1, 600000);
            break;
        case O_CTIMEOUT:
            ctimeout_ms = num_arg(optarg, "--connect-timeout", 1, 600000);
            break;
        case O_ALLOW:
            allow = optarg;
            break;
        case O_JSON:
            json = optarg;
            break;
        case O_CSV:
            csv = optarg;
            break;
        case O_RESUME:
            tls.resume = tls_opt = true;
            break;
        case O_TLS13:
        case O_TLS12:
            tls.version = opt == O_TLS13 ? TLS1_3_VERSION : TLS1_2_VERSION;
            tls_opt = true;
            break;
        case O_SNI:
            tls.sni = optarg;
            tls_opt = true;
            break;
        case O_CACERT:
            tls.cacert = optarg;
            tls_opt = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fputs(usage, stderr);
        return 2;
    }
    const char *url = argv[optind];

    /* http[s]://HOST[:PORT][/PATH]; HOST may be [v6]. */
    bool https = strncmp(url, "https://", 8) == 0;
    if (!https && strncmp(url, "http://", 7) != 0)
        die("%s: only http:// and https:// URLs", url);
    if (tls_opt && !https)
        die("--resume, --tls13, --tls12, --sni and --cacert want an https:// URL");
    const char *p = url + (https ? 8 : 7);
    char host[256], port[16];
    snprintf(port, sizeof port, "%s", https ? "443" : "80");
    size_t hl;
    if (*p == '[') {
        hl = strcspn(p + 1, "]");
        if (p[1 + hl] != ']' || hl == 0 || hl >= sizeof host)
            die("%s: bad host", url);
        memcpy(host, p + 1, hl);
        host[hl] = 0;
        p += hl + 2;
    } else {
        hl = strcspn(p, ":/");
        if (hl == 0 || hl >= sizeof host)
            die("%s: bad host", url);
        memcpy(host, p, hl);
        host[hl] = 0;
        p += hl;
    }
    if (*p == ':') {
        size_t pl = strcspn(++p, "/");
        if (pl == 0 || pl >= sizeof port)
            die("%s: bad port", url);
        memcpy(port, p, pl);
        port[pl] = 0;
        p += pl;
    }
    char host_hdr[300];
    snprintf(host_hdr, sizeof host_hdr, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);

    ld_req *reqs;
    size_t nreqs;
    if (list) {
        nreqs = load_list(list, host_hdr, &reqs);
    } else {
        snprintf(url_req.method, sizeof url_req.method, "%s", method);
        url_req.target = xstrdup(*p ? p : "/");
        if (!(reqs = calloc(1, sizeof *reqs)))
            abort();
        render(reqs, &url_req, host_hdr);
        nreqs = 1;
    }
    spec_free(&url_req);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    int rc = mp_resolve_blocking(host, port, &hints, &ai);
    if (rc != 0)
        die("cannot resolve %s: %s", host, mp_strerror(rc));
    /* Each address in getaddrinfo's order (localhost may be ::1 and 127.0.0.1): every one must
     * be allowed, and the first that takes a connection is the target. */
    char numeric[INET6_ADDRSTRLEN];
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        struct sockaddr_storage ss = {0};
        memcpy(&ss, a->ai_addr, a->ai_addrlen);
        addr_str(&ss, numeric, sizeof numeric);
        if (!is_loopback(&ss) && !(allow && strcmp(allow, numeric) == 0))
            die("%s is not a loopback address: name it with --allow-remote %s to load it", numeric,
                numeric);
    }
    rc = -EHOSTUNREACH;
    for (struct addrinfo *a = ai; a && rc != 0; a = a->ai_next) {
        memcpy(&ld_g.addr, a->ai_addr, a->ai_addrlen);
        addr_str(&ld_g.addr, numeric, sizeof numeric);
        if ((rc = probe(&ld_g.addr, (int)ctimeout_ms)) != 0)
            fprintf(stderr, "magpie-load: cannot connect to %s port %s: %s\n", numeric, port,
                    strerror(-rc));
    }
    freeaddrinfo(ai);
    if (rc != 0)
        return 1;

    ld_g.conns = conns;
    ld_g.workers = workers;
    ld_g.depth = depth;
    ld_g.rate = rate;
    ld_g.timeout_ns = (uint64_t)timeout_ms * 1000000u;
    ld_g.connect_timeout_ms = (uint64_t)ctimeout_ms;
    ld_g.reqs = reqs;
    ld_g.nreqs = nreqs;
    ld_g.seconds = seconds + 1;
    ld_g.tls = https;
    if (https) {
        struct in6_addr a6;
        if (!tls.sni && inet_pton(AF_INET, host, &a6) != 1 && inet_pton(AF_INET6, host, &a6) != 1)
            tls.sni = host; /* a name, not a numeric address (RFC 6066 §3) */
        if (ld_tls_init(&tls, conns) != 0)
            die("cannot set up TLS");
    }

    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    mp_runtime *rt;
    if ((rc = mp_runtime_new(&rt, &cfg)) != 0)
        die("cannot start the runtime: %s", strerror(-rc));
    if (sem_init(&done_sem, 0, 0) != 0)
        abort();
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    ld_g.start_ns = ld_now_ns();
    ld_g.end_ns = ld_g.start_ns + (uint64_t)seconds * 1000000000u;
    if ((rc = ld_conns_start(rt, on_all_done, NULL)) != 0)
        fprintf(stderr, "magpie-load: cannot start the connections: %s\n", strerror(-rc));
    /* Every task ends at end_ns by itself; the margin is for a runtime that does not. */
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += seconds + 30;
    bool stuck = false;
    while (sem_timedwait(&done_sem, &limit) != 0) {
        if (errno == ETIMEDOUT) {
            stuck = true;
            break;
        }
    }
    getrusage(RUSAGE_SELF, &ru1);
    if (stuck) {
        fprintf(stderr, "magpie-load: the connections did not stop 30 s after the end\n");
        return 3;
    }
    mp_runtime_free(rt);
    ld_conns_free();
    if (https)
        ld_tls_free();

    ld_stats s = {0};
    ld_hist_init(&s.latency);
    ld_hist_init(&s.service);
    ld_hist_init(&s.handshake);
    if (!(s.per_second = calloc(ld_g.seconds, sizeof *s.per_second)))
        abort();
    ld_stats_collect(&s);
    summary m = {.url = url, .seconds = (double)seconds};
    m.rps = s.completed / m.seconds;
    m.cpu_user = tv_s(ru1.ru_utime) - tv_s(ru0.ru_utime);
    m.cpu_sys = tv_s(ru1.ru_stime) - tv_s(ru0.ru_stime);
    for (int i = 0; i < LD_ERR_N; i++)
        m.errors += s.errors[i];
    if (!quiet)
        print_human(&m, &s);
    if (json) {
        FILE *f = open_out(json);
        print_json(f, &m, &s);
        close_out(f);
    }
    if (csv) {
        FILE *f = open_out(csv);
        print_csv(f, &m, &s);
        close_out(f);
    }
    for (size_t i = 0; i < nreqs; i++)
        free(reqs[i].bytes);
    free(reqs);
    free(s.per_second);
    if (s.completed == 0) {
        fprintf(stderr, "magpie-load: no response completed\n");
        return 1;
    }
    return 0;
}
