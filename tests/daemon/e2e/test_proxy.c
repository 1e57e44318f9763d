/* End-to-end tests of handler = proxy: a real magpied in front of a small upstream that runs
 * in this process (a thread per connection, blocking sockets), for the happy paths: GET, HEAD
 * and POST (Content-Length and chunked) through the proxy, the upstream connection reused,
 * the hop-by-hop and forwarding fields rewritten both ways, 502 for a refused connection, 504
 * for a silent upstream, and a retry on the second server when the first refuses.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "daemon/promtext.h"
#include "test_net.h"

static char dir[64];

static void make_dir(void)
{
    harness_dir_make(dir, sizeof dir, "proxy");
}

static void remove_dir(void)
{
    harness_dir_remove(dir);
}

TestSuite(proxy_e2e, .init = make_dir, .fini = remove_dir, .timeout = 60);

/* --- The upstream ------------------------------------------------------------------------ */

typedef struct upstream {
    int lfd, port;
    pthread_t acceptor;
    _Atomic int accepts;
    _Atomic bool stop;
} upstream;

struct up_conn {
    upstream *u;
    int fd;
};

/* Reads one request head into buf (NUL-terminated); its length, 0 at EOF. */
static size_t read_head(int fd, char *buf, size_t cap, size_t *have)
{
    for (;;) {
        buf[*have] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL)
            return (size_t)(end + 4 - buf);
        if (*have + 1 >= cap)
            return 0;
        ssize_t n = read(fd, buf + *have, cap - 1 - *have);
        if (n <= 0)
            return 0;
        *have += (size_t)n;
    }
}

/* Takes n bytes from buf (after head) and the socket. */
static bool take(int fd, char *buf, size_t *have, size_t n, char *dst)
{
    while (*have < n) {
        ssize_t k = read(fd, buf + *have, 1 << 16);
        if (k <= 0)
            return false;
        *have += (size_t)k;
    }
    memcpy(dst, buf, n);
    memmove(buf, buf + n, *have - n);
    *have -= n;
    return true;
}

static bool take_line(int fd, char *buf, size_t *have, char *line, size_t cap)
{
    for (;;) {
        char *nl = memchr(buf, '\n', *have);
        if (nl != NULL) {
            size_t n = (size_t)(nl + 1 - buf);
            if (n >= cap)
                return false;
            return take(fd, buf, have, n, line) && (line[n] = 0, true);
        }
        ssize_t k = read(fd, buf + *have, 4096);
        if (k <= 0)
            return false;
        *have += (size_t)k;
    }
}

static const char *field(const char *head, const char *name)
{
    static __thread char v[256];
    char pat[64];
    snprintf(pat, sizeof pat, "\r\n%s: ", name);
    const char *at = strcasestr(head, pat);
    if (at == NULL)
        return NULL;
    at += strlen(pat);
    size_t n = strcspn(at, "\r");
    snprintf(v, sizeof v, "%.*s", (int)n, at);
    return v;
}

/* Answers each request: GET/HEAD with their head as the body (so tests see what arrived),
 * POST with "len=N body=...", /silent never, /hop with hop-by-hop fields to be removed. */
static void *serve(void *arg)
{
    struct up_conn *uc = arg;
    int fd = uc->fd;
    enum { CAP = 1 << 20 };
    char *buf = malloc(CAP), *body = malloc(CAP), *resp = malloc(CAP + 4096);
    size_t have = 0;
    int served = 0;
    for (;;) {
        size_t hl = read_head(fd, buf, CAP, &have);
        if (hl == 0)
            break;
        char head[16384];
        snprintf(head, sizeof head, "%.*s", (int)hl, buf);
        memmove(buf, buf + hl, have - hl);
        have -= hl;
        if (strstr(head, " /early") != NULL) {
            /* answers before reading the body, then reads nothing for a while */
            const char *no = "HTTP/1.1 413 Content Too Large\r\nContent-Length: 5\r\n"
                             "Connection: close\r\n\r\nearly";
            if (write(fd, no, strlen(no)) < 0)
                goto out;
            usleep(1500000);
            goto out;
        }
        size_t blen = 0;
        const char *cl = field(head, "Content-Length");
        const char *te = field(head, "Transfer-Encoding");
        if (te != NULL) {
            char line[128];
            for (;;) {
                if (!take_line(fd, buf, &have, line, sizeof line))
                    goto out;
                size_t n = strtoul(line, NULL, 16);
                if (n == 0) {
                    /* trailer fields (passed on by the proxy), to the empty line */
                    while (take_line(fd, buf, &have, line, sizeof line) &&
                           strcmp(line, "\r\n") != 0) {
                    }
                    break;
                }
                if (blen + n > CAP || !take(fd, buf, &have, n, body + blen))
                    goto out;
                blen += n;
                take_line(fd, buf, &have, line, sizeof line);
            }
        } else if (cl != NULL) {
            blen = strtoul(cl, NULL, 10);
            if (blen > CAP || !take(fd, buf, &have, blen, body))
                goto out;
        }
        if (strstr(head, "\r\nUpgrade: test\r\n") != NULL) {
            /* a tunnel: 101, then everything back as it came */
            const char *sw = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\n"
                             "Connection: Upgrade\r\n\r\n";
            if (write(fd, sw, strlen(sw)) < 0)
                goto out;
            if (have != 0 && write(fd, buf, have) < 0)
                goto out;
            ssize_t k;
            while ((k = read(fd, buf, CAP)) > 0)
                if (write(fd, buf, (size_t)k) != k)
                    break;
            goto out;
        }
        if (strstr(head, " /stale") != NULL && served > 0)
            goto out; /* closes a kept connection as its next request comes */
        served++;
        if (strstr(head, " /silent") != NULL) {
            char sink[256];
            while (read(fd, sink, sizeof sink) > 0) {
            }
            goto out;
        }
        int n;
        if (strncmp(head, "POST", 4) == 0) {
            char pre[64];
            int pl = snprintf(pre, sizeof pre, "len=%zu body=", blen);
            n = snprintf(resp, CAP, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
                         (size_t)pl + blen, pre);
            memcpy(resp + n, body, blen);
            n += (int)blen;
        } else if (strstr(head, " /dated") != NULL) {
            n = snprintf(resp, CAP,
                         "HTTP/1.1 200 OK\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\n"
                         "Content-Length: 5\r\n\r\ndated");
        } else if (strstr(head, " /hop") != NULL) {
            const char *b = "hop";
            n = snprintf(resp, CAP,
                         "HTTP/1.1 200 OK\r\nConnection: X-Bar\r\nX-Bar: 1\r\nKeep-Alive: "
                         "timeout=5\r\nProxy-Authenticate: Basic\r\nTrailer: X-T\r\nUpgrade: "
                         "foo\r\nX-End: ok\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(b), b);
        } else if (strstr(head, " /chunked") != NULL) {
            n = snprintf(resp, CAP,
                         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
        } else {
            bool is_head = strncmp(head, "HEAD", 4) == 0;
            n = snprintf(resp, CAP, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(head), is_head ? "" : head);
        }
        if (write(fd, resp, (size_t)n) != n)
            break;
    }
out:
    close(fd);
    free(buf);
    free(body);
    free(resp);
    free(uc);
    return NULL;
}

static void *accept_loop(void *arg)
{
    upstream *u = arg;
    for (;;) {
        int fd = accept(u->lfd, NULL, NULL);
        if (atomic_load(&u->stop)) {
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        if (fd < 0)
            continue;
        atomic_fetch_add(&u->accepts, 1);
        struct up_conn *uc = malloc(sizeof *uc);
        uc->u = u;
        uc->fd = fd;
        pthread_t t;
        pthread_create(&t, NULL, serve, uc);
        pthread_detach(t);
    }
}

static void upstream_start(upstream *u)
{
    memset(u, 0, sizeof *u);
    u->lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(u->lfd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(u->lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(u->lfd, 64), 0);
    socklen_t len = sizeof a;
    getsockname(u->lfd, (struct sockaddr *)&a, &len);
    u->port = ntohs(a.sin_port);
    pthread_create(&u->acceptor, NULL, accept_loop, u);
}

static void upstream_stop(upstream *u)
{
    atomic_store(&u->stop, true);
    int fd = test_connect(u->port); /* wakes accept() */
    pthread_join(u->acceptor, NULL);
    close(fd);
    close(u->lfd);
}

/* --- magpied ----------------------------------------------------------------------------- */

static daemon_proc start_proxy(const char *upstream_conf)
{
    char conf[128], err[128], text[4096];
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(err, sizeof err, "%s/error.log", dir);
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\nhttp2 = on\n[echo]\nlisten =\n[runtime]\nworkers = 2\n"
             "%s"
             "[route = /metrics]\nhandler = metrics\n"
             "[route /ws]\nhandler = proxy\nupstream = app\nwebsocket = on\n"
             "[route /]\nhandler = proxy\nupstream = app\n",
             upstream_conf);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    static char err_path[128];
    snprintf(err_path, sizeof err_path, "%s", err);
    return start_with(conf, NULL, err_path);
}

/* One request on a new connection (the request asks for the close); the whole response. */
static char *ask(int port, const char *req)
{
    static char resp[1 << 20];
    int fd = test_connect(port);
    test_write_all(fd, req, strlen(req));
    read_some(fd, resp, sizeof resp, NULL, 0);
    close(fd);
    return resp;
}

/* One response with a Content-Length on a kept connection. */
static void read_response(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    for (;;) {
        buf[got] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL) {
            const char *cl = strstr(buf, "Content-Length: ");
            cr_assert_not_null(cl);
            size_t want = (size_t)(end + 4 - buf) + strtoul(cl + 16, NULL, 10);
            if (got >= want)
                return;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        cr_assert_gt(poll(&pfd, 1, 5000), 0, "no response");
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        cr_assert_gt(n, 0, "closed early");
        got += (size_t)n;
    }
}

static int status_of(const char *resp)
{
    int code = 0;
    return sscanf(resp, "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

static const char *body_of(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    return b != NULL ? b + 4 : "";
}

static char *one_server(const upstream *u, const char *extra)
{
    static char c[512];
    snprintf(c, sizeof c, "[upstream app]\nserver = 127.0.0.1:%d\n%s", u->port, extra);
    return c;
}

Test(proxy_e2e, get_and_head_pass_through)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    char *r =
        ask(d.http, "GET /a/b?x=1 HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_not_null(strstr(body_of(r), "GET /a/b?x=1 HTTP/1.1\r\n"), "%s", r);
    cr_assert_not_null(strstr(body_of(r), "\r\nHost: example.test\r\n"), "%s", r);
    r = ask(d.http, "OPTIONS /o HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(body_of(r), "OPTIONS /o HTTP/1.1\r\n"), "proxied: %s", r);
    r = ask(d.http, "HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_str_eq(body_of(r), "", "HEAD has no body: %s", r);
    cr_assert_not_null(strstr(r, "Content-Length: "), "HEAD keeps the length: %s", r);
    /* A chunked response is passed on chunked to an HTTP/1.1 client... */
    r = ask(d.http, "GET /chunked HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(r, "Transfer-Encoding: chunked\r\n"), "%s", r);
    cr_assert_not_null(strstr(r, "hello") && strstr(r, " world") ? r : NULL, "%s", r);
    cr_assert_not_null(strstr(r, "\r\n0\r\n\r\n"), "%s", r);
    /* ... and unchunked, closing, to an HTTP/1.0 one. */
    r = ask(d.http, "GET /chunked HTTP/1.0\r\n\r\n");
    cr_assert_null(strstr(r, "Transfer-Encoding"), "%s", r);
    cr_assert_str_eq(body_of(r), "hello world", "%s", r);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

/* The access log names the server that answered a proxied request and how long its head
 * took; a request the proxy did not handle shows dashes there. */
Test(proxy_e2e, the_access_log_names_the_upstream)
{
    upstream u;
    upstream_start(&u);
    char extra[256];
    snprintf(extra, sizeof extra,
             "[log]\naccess_log = %s/access.log\n"
             "access_format = $status $request_uri $upstream_addr $upstream_header_time\n",
             dir);
    daemon_proc d = start_proxy(one_server(&u, extra));
    char *r = ask(d.http, "GET /a?q=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    r = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_eq(stop(&d), 0); /* the log is written out at exit */
    char path[160], log[4096] = "";
    snprintf(path, sizeof path, "%s/access.log", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(log, 1, sizeof log - 1, f);
    log[n] = '\0';
    fclose(f);
    char want[128];
    snprintf(want, sizeof want, "200 /a?q=1 127.0.0.1:%d 0.", u.port);
    cr_assert_eq(strncmp(log, want, strlen(want)), 0, "%s", log);
    cr_assert_not_null(strstr(log, "\n200 /metrics - -\n"), "%s", log);
    upstream_stop(&u);
}

Test(proxy_e2e, post_bodies_are_reframed)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    char *r = ask(d.http, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: "
                          "close\r\n\r\nhello");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_str_eq(body_of(r), "len=5 body=hello", "%s", r);
    r = ask(d.http, "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: "
                    "close\r\n\r\n3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_str_eq(body_of(r), "len=7 body=abcdefg", "%s", r);

    /* A body bigger than a read buffer, on a keep-alive connection, twice. */
    enum { N = 300000 };
    char *big = malloc(N + 256);
    int hl = snprintf(big, 256, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", N);
    for (int i = 0; i < N; i++)
        big[hl + i] = (char)('a' + i % 26);
    int fd = test_connect(d.http);
    static char resp[N + 4096];
    for (int round = 0; round < 2; round++) {
        test_write_all(fd, big, (size_t)(hl + N));
        read_response(fd, resp, sizeof resp);
        cr_assert_eq(status_of(resp), 200);
        cr_assert_not_null(strstr(resp, "len=300000 body=abcdef"), "%.400s", resp);
    }
    close(fd);
    free(big);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, upstream_connection_is_reused)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, "keepalive = 4\n"));
    for (int i = 0; i < 6; i++) {
        char *r = ask(d.http, "GET /k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        cr_assert_eq(status_of(r), 200, "%s", r);
    }
    cr_assert_eq(atomic_load(&u.accepts), 1, "%d connections for 6 sequential requests",
                 atomic_load(&u.accepts));
    char *m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(m, "magpied_upstream_idle_connections{upstream=\"app\""), "%s", m);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

/* Per server: responses by class and the header time, counted on across a reload that keeps
 * the server (the counters outlive the generation). */
Test(proxy_e2e, upstream_counters_survive_a_reload)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    char *r = ask(d.http, "GET /k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    kill(d.pid, SIGHUP); /* the same file: a new generation of the same group */
    char *m = NULL;
    for (int i = 0; i < 250; i++) {
        m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if (strstr(m, "magpied_reloads_total{result=\"success\"} 1\n") != NULL)
            break;
        usleep(20000);
    }
    cr_assert_not_null(strstr(m, "magpied_reloads_total{result=\"success\"} 1\n"), "%s", m);
    r = ask(d.http, "GET /k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    char want[256];
    snprintf(want, sizeof want,
             "magpied_upstream_responses_total{upstream=\"app\",server=\"127.0.0.1:%d\","
             "code=\"2xx\"} 2\n",
             u.port);
    cr_assert_not_null(strstr(m, want), "%s", m);
    snprintf(want, sizeof want,
             "magpied_upstream_requests_total{upstream=\"app\",server=\"127.0.0.1:%d\"} 2\n",
             u.port);
    cr_assert_not_null(strstr(m, want), "%s", m);
    snprintf(want, sizeof want,
             "magpied_upstream_header_duration_seconds_count{upstream=\"app\",server=\"127.0.0.1:"
             "%d\"} 2\n",
             u.port);
    cr_assert_not_null(strstr(m, want), "%s", m);
    static char problems[8192];
    cr_assert_eq(prom_check(body_of(m), problems, sizeof problems), 0, "%s\n%s", problems, m);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, hop_by_hop_and_forwarding_fields)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    char *r = ask(d.http, "GET /f HTTP/1.1\r\nHost: x\r\nConnection: close, X-Foo\r\n"
                          "X-Foo: secret\r\nKeep-Alive: 300\r\nTE: trailers\r\nTrailer: X-T\r\n"
                          "Upgrade: h2c\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\n"
                          "Proxy-Connection: keep-alive\r\nX-Forwarded-For: 192.0.2.7\r\n"
                          "X-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Keep: yes\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    const char *b = body_of(r);
    const char *gone[] = {"X-Foo",  "Keep-Alive", "TE:",   "Trailer", "Upgrade",
                          "Proxy-", "6.6.6.6",    "https", "close"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        cr_assert_null(strcasestr(b, gone[i]), "%s reached the upstream:\n%s", gone[i], b);
    cr_assert_not_null(strstr(b, "\r\nX-Forwarded-For: 192.0.2.7, 127.0.0.1\r\n"), "%s", b);
    cr_assert_not_null(strstr(b, "\r\nX-Real-IP: 127.0.0.1\r\n"), "%s", b);
    cr_assert_not_null(strstr(b, "\r\nX-Forwarded-Proto: http\r\n"), "%s", b);
    cr_assert_not_null(strstr(b, "\r\nX-Keep: yes\r\n"), "%s", b);

    r = ask(d.http, "GET /hop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    const char *resp_gone[] = {"X-Bar", "Keep-Alive", "Proxy-Authenticate", "Trailer", "Upgrade"};
    for (size_t i = 0; i < sizeof resp_gone / sizeof resp_gone[0]; i++)
        cr_assert_null(strstr(r, resp_gone[i]), "%s reached the client:\n%s", resp_gone[i], r);
    cr_assert_not_null(strstr(r, "X-End: ok\r\n"), "%s", r);
    cr_assert_str_eq(body_of(r), "hop");
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

/* RFC 9110 7.6.2: an OPTIONS or TRACE with Max-Forwards 0 stops at magpied, which answers as
 * its final recipient (OPTIONS: 200 with Allow; TRACE: 501, magpied implements none); another
 * value goes up one less; other methods, and a value that is not a number, pass as they came. */
Test(proxy_e2e, max_forwards_counts_down_and_stops_at_zero)
{
    upstream u;
    upstream_start(&u);
    char conf[512];
    snprintf(conf, sizeof conf,
             "[upstream app]\nserver = 127.0.0.1:%d\n"
             "[route /t]\nhandler = proxy\nupstream = app\nmethods = GET, TRACE\n",
             u.port);
    daemon_proc d = start_proxy(conf);
    char *r = ask(d.http, "OPTIONS /f HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\nConnection: "
                          "close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_not_null(strstr(r, "\r\nAllow: "), "%s", r);
    cr_assert_str_eq(body_of(r), "", "the upstream answered: %s", r);
    r = ask(d.http, "OPTIONS /f HTTP/1.1\r\nHost: x\r\nMax-Forwards: 5\r\nConnection: "
                    "close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_not_null(strstr(body_of(r), "\r\nMax-Forwards: 4\r\n"), "%s", r);
    r = ask(d.http, "GET /f HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(body_of(r), "\r\nMax-Forwards: 0\r\n"), "%s", r);
    r = ask(d.http, "OPTIONS /f HTTP/1.1\r\nHost: x\r\nMax-Forwards: x\r\nConnection: "
                    "close\r\n\r\n");
    cr_assert_not_null(strstr(body_of(r), "\r\nMax-Forwards: x\r\n"), "%s", r);
    r = ask(d.http, "TRACE /t HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 501, "%s", r);
    r = ask(d.http, "TRACE /t HTTP/1.1\r\nHost: x\r\nMax-Forwards: 1\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_not_null(strstr(body_of(r), "TRACE /t HTTP/1.1\r\n"), "%s", r);
    cr_assert_not_null(strstr(body_of(r), "\r\nMax-Forwards: 0\r\n"), "%s", r);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

/* RFC 9110 6.6.1: a response forwarded without a Date gets one (the test upstream's have
 * none); the upstream's own Date is kept, and only it. Over HTTP/1.1 and HTTP/2. */
Test(proxy_e2e, a_response_without_date_gets_one)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    char *r = ask(d.http, "GET /f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    const char *date = strstr(r, "\r\nDate: ");
    cr_assert_not_null(date, "%s", r);
    cr_assert_null(strstr(date + 2, "\r\nDate: "), "two: %s", r);
    cr_assert(strncmp(date + 8 + 25, " GMT\r\n", 6) == 0, "not an IMF-fixdate: %s", r);
    r = ask(d.http, "GET /dated HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    date = strstr(r, "\r\nDate: ");
    cr_assert_not_null(date, "%s", r);
    cr_assert(strncmp(date, "\r\nDate: Mon, 01 Jan 2001 00:00:00 GMT\r\n", 39) == 0, "%s", r);
    cr_assert_null(strstr(date + 2, "\r\nDate: "), "two: %s", r);
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "curl -s --http2-prior-knowledge -D - -o /dev/null http://127.0.0.1:%d/f | grep -ci "
             "'^date: '",
             d.http);
    cr_assert_str_eq(run(cmd), "1\n");
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, refused_is_502_and_silent_is_504)
{
    upstream u;
    upstream_start(&u);
    char conf[512];
    snprintf(conf, sizeof conf,
             "[upstream app]\nserver = 127.0.0.1:%d\nheader_timeout_ms = 300\nmax_fails = 0\n",
             free_port());
    daemon_proc d = start_proxy(conf);
    char *r = ask(d.http, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 502, "%s", r);
    cr_assert(file_has(d.err_path, "connect_refused", 2000), "the failure is logged");
    r = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(r, "reason=\"connect_refused\"} 1"), "%s", r);
    cr_assert_eq(stop(&d), 0);

    snprintf(conf, sizeof conf, "[upstream app]\nserver = 127.0.0.1:%d\nheader_timeout_ms = 300\n",
             u.port);
    d = start_proxy(conf);
    r = ask(d.http, "GET /silent HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 504, "%s", r);
    cr_assert(file_has(d.err_path, "header_timeout", 2000), "the timeout is logged");
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, retries_on_the_second_server)
{
    upstream u;
    upstream_start(&u);
    char conf[512];
    snprintf(conf, sizeof conf,
             "[upstream app]\nserver = 127.0.0.1:%d\nserver = 127.0.0.1:%d\nmax_fails = 0\n",
             free_port(), u.port);
    daemon_proc d = start_proxy(conf);
    for (int i = 0; i < 4; i++) {
        char *r = ask(d.http, "GET /r HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        cr_assert_eq(status_of(r), 200, "request %d: %s", i, r);
    }
    char *m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_null(strstr(m, "magpied_upstream_retries_total{upstream=\"app\"} 0\n"), "%s", m);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, shipped_proxy_config_is_valid)
{
    char exe[PATH_MAX + 32], cmd[PATH_MAX + 128];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "%s -t -c config/magpied-proxy.conf 2>&1; echo rc=$?", exe);
    char *out = run(cmd);
    cr_assert_not_null(strstr(out, "rc=0"), "%s", out);
}

Test(proxy_e2e, upgrade_is_tunnelled_where_allowed)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    int fd = test_connect(d.http);
    const char *req = "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n";
    test_write_all(fd, req, strlen(req));
    char buf[4096];
    read_some(fd, buf, sizeof buf, "\r\n\r\n", 1);
    cr_assert_eq(status_of(buf), 101, "%s", buf);
    cr_assert_not_null(strstr(buf, "\r\nUpgrade: test\r\n"), "%s", buf);
    cr_assert_not_null(strstr(buf, "\r\nConnection: upgrade\r\n"), "%s", buf);
    for (int i = 0; i < 3; i++) {
        test_write_all(fd, "ping", 4);
        size_t n = read_some(fd, buf, sizeof buf, "ping", 1);
        cr_assert_eq(n, 4, "echoed through the tunnel: %.*s", (int)n, buf);
    }
    close(fd);
    /* The 101 is one response: counted once (it once was twice, with two access log lines). */
    char *m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(m, "magpied_http_responses_total{code=\"1xx\"} 1\n"), "%s", m);
    /* Where the route does not allow it, Upgrade is not passed on: a plain response. */
    char *r = ask(d.http, "GET /nows HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: "
                          "test\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_null(strstr(body_of(r), "Upgrade"), "%s", r);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, active_health_takes_a_dead_server_out)
{
    upstream u;
    upstream_start(&u);
    char conf[512];
    int dead = free_port();
    snprintf(conf, sizeof conf,
             "[upstream app]\nserver = 127.0.0.1:%d\nserver = 127.0.0.1:%d\nmax_fails = 0\n"
             "health_path = /health\nhealth_interval_ms = 100\nhealth_fall = 1\n",
             dead, u.port);
    daemon_proc d = start_proxy(conf);
    char want[128];
    snprintf(want, sizeof want,
             "magpied_upstream_server_up{upstream=\"app\",server=\"127.0.0.1:%d\"} 0\n", dead);
    char *m = NULL;
    for (int i = 0; i < 100; i++) {
        m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if (strstr(m, want) != NULL)
            break;
        usleep(20000);
    }
    cr_assert_not_null(strstr(m, want), "%s", m);
    cr_assert(file_has(d.err_path, "health check", 2000), "the change is logged");
    for (int i = 0; i < 4; i++) {
        char *r = ask(d.http, "GET /r HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        cr_assert_eq(status_of(r), 200, "request %d: %s", i, r);
    }
    m = ask(d.http, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(m, "magpied_upstream_retries_total{upstream=\"app\"} 0\n"),
                       "a server marked down is not tried: %s", m);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, early_response_while_the_body_goes_up)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, ""));
    enum { N = 16 << 20 };
    char *big = calloc(1, N + 256);
    int hl = snprintf(big, 256, "POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", N);
    int fd = test_connect(d.http);
    /* sends what the proxy takes while watching for the answer */
    size_t sent = 0;
    char resp[4096] = "";
    size_t got = 0;
    while (got == 0 || strstr(resp, "early") == NULL) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN | (sent < (size_t)(hl + N) ? POLLOUT : 0)};
        cr_assert_gt(poll(&pfd, 1, 5000), 0, "no answer");
        if (pfd.revents & POLLIN) {
            ssize_t n = read(fd, resp + got, sizeof resp - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            resp[got] = 0;
        } else if (pfd.revents & POLLOUT) {
            ssize_t n = send(fd, big + sent, (size_t)(hl + N) - sent, MSG_DONTWAIT);
            if (n > 0)
                sent += (size_t)n;
        }
    }
    cr_assert_eq(status_of(resp), 413, "%s", resp);
    cr_assert_not_null(strstr(resp, "Connection: close"), "%s", resp);
    close(fd);
    free(big);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

Test(proxy_e2e, a_pooled_connection_closed_by_the_server_is_retried)
{
    upstream u;
    upstream_start(&u);
    daemon_proc d = start_proxy(one_server(&u, "max_fails = 1\n"));
    for (int i = 0; i < 4; i++) {
        char *r = ask(d.http, "GET /stale HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        cr_assert_eq(status_of(r), 200, "request %d: %s", i, r);
    }
    cr_assert_eq(atomic_load(&u.accepts), 4, "a new connection after each stale one");
    /* POST is not sent twice: it gets 502 */
    char *r = ask(d.http, "POST /stale HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                          "Connection: close\r\n\r\nx");
    cr_assert_eq(status_of(r), 502, "%s", r);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}

/* strip_prefix and add_prefix rewrite the target sent upstream (the query kept); a route's
 * header rules and real_ip apply to what the proxy relays and forwards. */
Test(proxy_e2e, prefix_rewrite_header_rules_and_real_ip)
{
    upstream u;
    upstream_start(&u);
    char extra[1024];
    snprintf(extra, sizeof extra,
             "[upstream app]\nserver = 127.0.0.1:%d\n"
             "[route /api/]\nhandler = proxy\nupstream = app\nstrip_prefix = on\n"
             "add_prefix = /v2\nheader_add = X-Proxied: yes\nheader_remove = X-End\n"
             "[route /strip]\nhandler = proxy\nupstream = app\nstrip_prefix = on\n"
             "real_ip_from = 127.0.0.1\nreal_ip_header = X-Forwarded-For\n"
             "header_remove = X-End\n",
             u.port);
    daemon_proc d = start_proxy(extra);
    char *r = ask(d.http, "GET /api/users/7?full=1&x=%41 HTTP/1.1\r\nHost: x\r\n"
                          "Connection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_not_null(strstr(body_of(r), "GET /v2/users/7?full=1&x=%41 HTTP/1.1\r\n"), "%s", r);
    cr_assert_not_null(strstr(r, "\r\nX-Proxied: yes\r\n"), "%s", r);
    r = ask(d.http, "GET /strip HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_not_null(strstr(body_of(r), "GET / HTTP/1.1\r\n"), "%s", r);
    r = ask(d.http, "GET /strip/a%20b?q HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.9\r\n"
                    "Connection: close\r\n\r\n");
    cr_assert_not_null(strstr(body_of(r), "GET /a%20b?q HTTP/1.1\r\n"), "%s", r);
    cr_assert_not_null(strstr(body_of(r), "\r\nX-Real-IP: 203.0.113.9\r\n"), "%s", r);
    /* An upstream's field removed by the route's header_remove. */
    r = ask(d.http, "GET /strip/hop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    cr_assert_eq(status_of(r), 200, "%s", r);
    cr_assert_null(strstr(r, "X-End"), "%s", r);
    cr_assert_eq(stop(&d), 0);
    upstream_stop(&u);
}
