/* What the proxy's end-to-end suites share (tests/daemon/e2e/test_proxy_*.c): the test
 * upstream (upstream.c, built beside the suites) started and stopped by PID, its counters, a
 * magpied in front of it on a config written for the test, and a client that reads whole
 * responses, keeping what follows them (a response it did not ask for shows up as such).
 * Include once per test binary, after criterion.h. */
#ifndef TESTS_DAEMON_E2E_PROXY_HARNESS_H
#define TESTS_DAEMON_E2E_PROXY_HARNESS_H

#include <fcntl.h>
#include <stdarg.h>
#include <strings.h>

#include "daemon/magpied_harness.h"

typedef struct upstream_proc {
    pid_t pid;
    int port;     /* serves every mode */
    int noaccept; /* a port whose connects hang */
} upstream_proc;

/* The upstream program beside this test binary, on `port` (0: one from the kernel); false
 * when it could not listen there. No assertions: client threads may call it. */
static inline bool upstream_try_start_at(int port, const char *ip, upstream_proc *u);
static inline bool upstream_try_start(int port, upstream_proc *u)
{
    return upstream_try_start_at(port, "127.0.0.1", u);
}

/* The same on another loopback address (127.0.0.2: a second server on the same port). */
static inline bool upstream_try_start_at(int port, const char *ip, upstream_proc *u)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 16);
    if (n <= 0)
        return false;
    exe[n] = 0;
    strcpy(strrchr(exe, '/') + 1, "upstream");
    char arg[16];
    snprintf(arg, sizeof arg, "%d", port);
    int p[2];
    if (pipe(p) != 0)
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl(exe, exe, arg, ip, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    char line[128];
    *u = (upstream_proc){.pid = pid};
    bool ok = fgets(line, sizeof line, f) != NULL &&
              sscanf(line, "upstream port=%d noaccept=%d", &u->port, &u->noaccept) == 2;
    fclose(f);
    if (!ok) { /* it exited: the port was taken */
        waitpid(pid, NULL, 0);
        u->pid = -1;
    }
    return ok;
}

static inline upstream_proc upstream_start(int port)
{
    upstream_proc u;
    cr_assert(upstream_try_start(port, &u), "the upstream did not start on port %d", port);
    return u;
}

static inline void upstream_stop(upstream_proc *u)
{
    if (u->pid > 0) {
        kill(u->pid, SIGKILL);
        waitpid(u->pid, NULL, 0);
        u->pid = -1;
    }
}

typedef struct upstream_stats {
    long accepts, requests, bad, strays;
} upstream_stats;

/* Its counters, asked directly (not through magpied). */
static inline upstream_stats stats_of(const upstream_proc *u)
{
    int fd = test_connect(u->port);
    const char *req = "GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    char resp[1024];
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    upstream_stats s = {-1, -1, -1, -1};
    const char *b = strstr(resp, "accepts=");
    cr_assert_not_null(b, "no stats from the upstream: %s", resp);
    cr_assert_eq(sscanf(b, "accepts=%ld requests=%ld bad=%ld strays=%ld", &s.accepts, &s.requests,
                        &s.bad, &s.strays),
                 4);
    return s;
}

/* A temporary folder for the test's config. */
static char proxy_dir[64];

static inline void proxy_dir_make(void)
{
    harness_dir_make(proxy_dir, sizeof proxy_dir, "proxy");
}

/* PROXY_TEST_KEEP=1 keeps the folder (magpied's config and err.log) for a look after. */
static inline void proxy_dir_remove(void)
{
    const char *keep = getenv("PROXY_TEST_KEEP");
    if (keep != NULL && strcmp(keep, "1") == 0) {
        kill_leftover();
        fprintf(stderr, "kept %s\n", proxy_dir);
        return;
    }
    harness_dir_remove(proxy_dir);
}

/* The head of every config: ephemeral port (h2c on it for proxy_start_h2), no echo listener,
 * two workers, bodies large enough for the flow-control tests. */
#define PROXY_CONF_HEAD_WITH(http_keys)                                                            \
    "[http]\nlisten = 127.0.0.1:0\n" http_keys "[echo]\nlisten =\n[runtime]\nworkers = 2\n"        \
    "[limits]\nmax_body_bytes = 104857600\n"                                                       \
    "[route = /metrics]\nhandler = metrics\n"
#define PROXY_CONF_HEAD PROXY_CONF_HEAD_WITH("")

/* Start magpied on a config made of head and the vprintf-formatted rest. Its stderr goes to
 * proxy_dir/err.log (shown when it exits badly). */
static inline daemon_proc proxy_vstart(const char *head, const char *fmt, va_list ap)
{
    static char text[8192], path[128], err[128];
    int n = snprintf(text, sizeof text, "%s", head);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    snprintf(path, sizeof path, "%s/magpied.conf", proxy_dir);
    snprintf(err, sizeof err, "%s/err.log", proxy_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return start_with(path, NULL, err);
}

/* Start magpied on a config made of PROXY_CONF_HEAD and the printf-formatted rest. */
__attribute__((format(printf, 1, 2))) static inline daemon_proc proxy_start(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    daemon_proc d = proxy_vstart(PROXY_CONF_HEAD, fmt, ap);
    va_end(ap);
    return d;
}

/* The same with h2c (HTTP/2 by prior knowledge) on the plaintext listener. */
__attribute__((format(printf, 1, 2))) static inline daemon_proc proxy_start_h2(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    daemon_proc d = proxy_vstart(PROXY_CONF_HEAD_WITH("http2 = on\n"), fmt, ap);
    va_end(ap);
    return d;
}

/* One upstream, and magpied in front of it on a config whose one %d is the upstream's port. */
static inline void pair_start(const char *conf, upstream_proc *u, daemon_proc *d)
{
    *u = upstream_start(0);
    *d = proxy_start(conf, u->port);
}

/* magpied stops cleanly (a sanitizer report fails the test here), then the upstream. */
static inline void pair_stop(upstream_proc *u, daemon_proc *d)
{
    cr_assert_eq(stop(d), 0);
    upstream_stop(u);
}

/* A client connection and what it has read but not yet taken as a response. */
typedef struct client {
    int fd;
    char *buf;
    size_t len, cap;
    bool eof; /* the peer closed (or reset) the connection */
} client;

static inline client client_open(int port)
{
    client c = {.fd = test_connect(port), .cap = 1 << 16};
    c.buf = malloc(c.cap);
    cr_assert_not_null(c.buf);
    return c;
}

static inline void client_close(client *c)
{
    close(c->fd);
    free(c->buf);
    c->buf = NULL;
}

static inline void client_send(client *c, const char *text)
{
    test_write_all(c->fd, text, strlen(text));
}

/* The pair started with conf, and a client on the daemon that has sent req. */
static inline client pair_client(const char *conf, upstream_proc *u, daemon_proc *d,
                                 const char *req)
{
    pair_start(conf, u, d);
    client c = client_open(d->http);
    client_send(&c, req);
    return c;
}

/* Read more (waiting at most timeout_ms); false on EOF, error or time-out. */
static inline bool client_fill(client *c, int timeout_ms)
{
    if (c->eof)
        return false;
    if (c->cap - c->len < 4096) {
        c->cap *= 2;
        c->buf = realloc(c->buf, c->cap);
        cr_assert_not_null(c->buf);
    }
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) != 1)
        return false;
    ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
    if (n <= 0) {
        c->eof = true;
        return false;
    }
    c->len += (size_t)n;
    c->buf[c->len] = 0;
    return true;
}

/* Whether the peer closed the connection within timeout_ms with nothing more sent. */
static inline bool client_closed(client *c, int timeout_ms)
{
    size_t before = c->len;
    while (client_fill(c, timeout_ms)) {
    }
    return c->eof && c->len == before;
}

typedef struct response {
    int status; /* 0: no head came */
    char head[32768];
    char *body; /* malloc'd, NUL-terminated; the decoded body */
    size_t body_len;
    bool complete; /* the body ended as its framing said (or no body was due) */
    bool chunked;
} response;

static inline void response_free(response *r)
{
    free(r->body);
    r->body = NULL;
}

/* The number of fields called name in a head; the first one's value into out when given. */
static inline int head_field(const char *head, const char *name, char *out, size_t cap)
{
    int count = 0;
    size_t nl = strlen(name);
    if (out && cap)
        out[0] = 0;
    for (const char *p = strchr(head, '\n'); p != NULL; p = strchr(p, '\n')) {
        p++;
        if (strncasecmp(p, name, nl) != 0 || p[nl] != ':')
            continue;
        if (count++ == 0 && out && cap) {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            size_t n = strcspn(v, "\r\n");
            n = n < cap - 1 ? n : cap - 1;
            memcpy(out, v, n);
            out[n] = 0;
        }
    }
    return count;
}

static inline void body_append(response *r, const char *p, size_t n)
{
    r->body = realloc(r->body, r->body_len + n + 1);
    cr_assert_not_null(r->body);
    memcpy(r->body + r->body_len, p, n);
    r->body_len += n;
    r->body[r->body_len] = 0;
}

/* Take n bytes of the buffer (the rest moves to its front). */
static inline void client_take(client *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
    c->buf[c->len] = 0;
}

/* The offset after the next CRLF at or after off, reading as needed; 0 when none came. */
static inline size_t client_line(client *c, size_t off, int timeout_ms)
{
    for (;;) {
        char *e = c->len > off ? memmem(c->buf + off, c->len - off, "\r\n", 2) : NULL;
        if (e != NULL)
            return (size_t)(e - c->buf) + 2;
        if (!client_fill(c, timeout_ms))
            return 0;
    }
}

/* Read one response (an interim 1xx is one too) to a request of the given kind. Each read
 * waits at most 5 s. */
static inline response read_response(client *c, bool head_request)
{
    const int t = 5000;
    response r = {0};
    r.body = calloc(1, 1);
    char *e;
    while ((e = memmem(c->buf, c->len, "\r\n\r\n", 4)) == NULL)
        if (!client_fill(c, t))
            return r;
    size_t hlen = (size_t)(e - c->buf) + 4;
    cr_assert_lt(hlen, sizeof r.head, "a response head of %zu bytes", hlen);
    memcpy(r.head, c->buf, hlen);
    r.head[hlen] = 0;
    client_take(c, hlen);
    if (sscanf(r.head, "HTTP/1.%*d %d", &r.status) != 1)
        r.status = -1; /* not a status line */
    char v[256];
    bool bodiless = head_request || r.status / 100 == 1 || r.status == 204 || r.status == 304;
    if (bodiless) {
        r.complete = true;
    } else if (head_field(r.head, "Transfer-Encoding", v, sizeof v) > 0) {
        r.chunked = true;
        for (;;) {
            size_t le = client_line(c, 0, t);
            if (le == 0)
                return r;
            unsigned long long size = strtoull(c->buf, NULL, 16);
            client_take(c, le);
            if (size == 0)
                break;
            while (c->len < size + 2)
                if (!client_fill(c, t))
                    return r;
            body_append(&r, c->buf, size);
            client_take(c, size + 2);
        }
        for (;;) { /* trailers */
            size_t le = client_line(c, 0, t);
            if (le == 0)
                return r;
            client_take(c, le);
            if (le == 2)
                break;
        }
        r.complete = true;
    } else if (head_field(r.head, "Content-Length", v, sizeof v) > 0) {
        size_t n = strtoull(v, NULL, 10);
        while (c->len < n)
            if (!client_fill(c, t))
                break;
        size_t got = c->len < n ? c->len : n;
        body_append(&r, c->buf, got);
        client_take(c, got);
        r.complete = got == n;
    } else { /* delimited by close */
        while (client_fill(c, t)) {
        }
        body_append(&r, c->buf, c->len);
        client_take(c, c->len);
        r.complete = c->eof;
    }
    return r;
}

/* The final response (interim ones skipped, their count in *interim when given). */
static inline response read_final(client *c, bool head_request, int *interim)
{
    for (int n = 0;; n++) {
        response r = read_response(c, head_request);
        if (r.status / 100 != 1 || r.status == 101) {
            if (interim)
                *interim = n;
            return r;
        }
        response_free(&r);
    }
}

/* One request on its own connection; the final response. The connection is closed after. */
static inline response ask(int port, const char *req)
{
    client c = client_open(port);
    client_send(&c, req);
    response r = read_final(&c, strncmp(req, "HEAD ", 5) == 0, NULL);
    client_close(&c);
    return r;
}

/* GET path with Connection: close on a new connection. */
static inline response get(int port, const char *path)
{
    char req[1024];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    return ask(port, req);
}

/* The value of one sample of GET /metrics, -1 when the daemon did not answer or lacks it. */
static inline long long proxy_metric(int port, const char *sample)
{
    response r = get(port, "/metrics");
    char needle[300]; /* a sample of up to 255 bytes, "\n" and " " */
    snprintf(needle, sizeof needle, "\n%s ", sample);
    const char *at = strstr(r.body, needle);
    long long v = at ? strtoll(at + strlen(needle), NULL, 10) : -1;
    response_free(&r);
    return v;
}

/* The daemon still answers a plain request through the proxy with its own echo. */
static inline void still_serves(int port)
{
    response r = get(port, "/alive?token=still-serving");
    cr_assert_eq(r.status, 200, "after that, a plain request got: %s", r.head);
    cr_assert(strstr(r.body, "GET /alive?token=still-serving HTTP/1.1\r\n") != NULL, "body: %s",
              r.body);
    response_free(&r);
}

/* The growth allowed over the baseline while a client reads slowly (slow_read): the response
 * window (64 KiB) and read buffers, with room for the allocator; far under the tens of MiB
 * an unbounded proxy would take. The sanitizers keep freed blocks in quarantine and shadow what
 * is touched, so they get more. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_SLACK_KIB (24L << 10)
#else
#define RSS_SLACK_KIB (8L << 10)
#endif

/* magpied's resident memory in KiB (VmRSS), -1 when it is gone. */
static inline long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static inline long elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* A slow reader of a response: a connection to port with a small receive buffer (so that
 * magpied's writes stall at once), the bytes it has read, and magpied's largest VmRSS seen. */
typedef struct slow_reader {
    int fd;
    pid_t pid;        /* magpied's, whose VmRSS is watched */
    long got, peak;   /* bytes read; the largest VmRSS (KiB), from the value before */
    char first[4097]; /* the first read (the head), NUL-terminated */
} slow_reader;

/* Connect it and send req; peak starts at base. */
static inline void slow_open(slow_reader *s, int port, pid_t pid, long base, const char *req)
{
    *s = (slow_reader){.fd = socket(AF_INET, SOCK_STREAM, 0), .pid = pid, .peak = base};
    cr_assert_geq(s->fd, 0);
    int small = 16384;
    setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    test_write_all(s->fd, req, strlen(req));
}

/* Read 4 KiB at a time with pause_us between reads, until it has read `bytes` in all or
 * for `ms` milliseconds (the one that is not 0), noting magpied's VmRSS after each read. */
static inline void slow_read(slow_reader *s, long bytes, long ms, useconds_t pause_us)
{
    static char buf[4096];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (bytes > 0 ? s->got < bytes : elapsed_ms(&t0) < ms) {
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        cr_assert_eq(poll(&pfd, 1, 10000), 1, "the response stopped after %ld bytes", s->got);
        ssize_t n = read(s->fd, s->got == 0 ? s->first : buf, 4096);
        cr_assert_gt(n, 0, "closed after %ld bytes", s->got);
        if (s->got == 0)
            s->first[n] = 0;
        s->got += n;
        long rss = rss_kib(s->pid);
        s->peak = rss > s->peak ? rss : s->peak;
        usleep(pause_us);
    }
}

#endif
