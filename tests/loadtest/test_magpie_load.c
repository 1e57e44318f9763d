/* magpie-load against the built magpied on an ephemeral loopback port: a closed-loop run, a
 * pipelined one, an open-loop one and a request list complete with requests and no errors, and
 * their JSON carries the fields programs read. Also: an unreachable target and a remote one are
 * refused at once, and servers that misbehave (silent, unframable, 503, closing mid-body,
 * closing after each response) give the errors of their kind. Over TLS (https://, magpied's
 * [https] on a certificate made for the test): keep-alive with --cacert and SNI, a connection
 * and full handshake per request, resumed handshakes, TLS 1.2 only, and a CA that does not
 * sign the server's certificate failing every handshake. Nothing here asserts speed. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>

#include "daemon/magpied_harness.h"
#include "daemon/tls_pki.h"

TestSuite(magpie_load, .fini = kill_leftover);

static char json[1 << 16];

/* build/<variant>/tests/loadtest/test_magpie_load -> build/<variant>/magpie-load */
static void load_path(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert_gt(n, 0);
    self[n] = 0;
    *strrchr(self, '/') = 0;
    snprintf(buf, len, "%s/../../magpie-load", self);
}

/* Run magpie-load with args (NULL-terminated), its stdout and stderr into files; returns its
 * exit status, killing it past limit_s. The JSON it wrote goes into json[]. */
static int run_load(const char *const *args, int limit_s, char *err_text, size_t err_len)
{
    char exe[PATH_MAX + 32], json_path[] = "/tmp/magpie-load-json.XXXXXX",
                             err_path[] = "/tmp/magpie-load-err.XXXXXX";
    load_path(exe, sizeof exe);
    int jfd = mkstemp(json_path), efd = mkstemp(err_path);
    cr_assert(jfd >= 0 && efd >= 0);
    const char *argv[40] = {exe, "--json", json_path, "-q"};
    int argc = 4;
    for (int i = 0; args[i] && argc < 39; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(efd, 1);
        dup2(efd, 2);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    int status = -1;
    for (int waited = 0; waited < limit_s * 100; waited++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        usleep(10000);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("magpie-load ran past %d s", limit_s);
    }
    ssize_t n = pread(jfd, json, sizeof json - 1, 0);
    json[n > 0 ? n : 0] = 0;
    if (err_text) {
        n = pread(efd, err_text, err_len - 1, 0);
        err_text[n > 0 ? n : 0] = 0;
    }
    close(jfd);
    close(efd);
    unlink(json_path);
    unlink(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The number after "key": in json[] (a path like "errors" then "total" is two calls). */
static double field(const char *after, const char *key)
{
    const char *p = after ? strstr(json, after) : json;
    cr_assert_not_null(p, "no \"%s\" in %s", after, json);
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    p = strstr(p, k);
    cr_assert_not_null(p, "no %s in %s", k, json);
    double v;
    cr_assert_eq(sscanf(p + strlen(k), " %lf", &v), 1, "%s", p);
    return v;
}

/* The JSON is one object whose brackets balance, with the fields programs read. */
static void check_json(void)
{
    int depth = 0;
    bool in_str = false;
    for (const char *p = json; *p; p++) {
        if (*p == '"' && p[-1] != '\\')
            in_str = !in_str;
        else if (!in_str && (*p == '{' || *p == '['))
            depth++;
        else if (!in_str && (*p == '}' || *p == ']'))
            cr_assert_geq(--depth, 0);
    }
    cr_assert_eq(depth, 0, "%s", json);
    cr_assert_eq(json[0], '{');
    cr_assert_gt(field(NULL, "requests"), 0, "%s", json);
    cr_assert_gt(field(NULL, "requests_per_s"), 0);
    cr_assert_eq(field("\"errors\"", "total"), 0, "%s", json);
    cr_assert_gt(field("\"latency_us\"", "p50"), 0);
    cr_assert_geq(field("\"latency_us\"", "p99_99"), field("\"latency_us\"", "p50"));
    cr_assert_geq(field("\"latency_us\"", "max"), field("\"latency_us\"", "p99_9"));
    cr_assert_gt(field("\"status\"", "2xx"), 0);
    cr_assert_geq(field("\"cpu\"", "us_per_request"), 0);
    cr_assert_not_null(strstr(json, "\"per_second\": ["));
}

static void url(char *buf, size_t len, int port, const char *path)
{
    snprintf(buf, len, "http://127.0.0.1:%d%s", port, path);
}

Test(magpie_load, closed_loop_completes_without_errors, .timeout = 60)
{
    daemon_proc d = start(NULL);
    char u[64], err[4096];
    url(u, sizeof u, d.http, "/");
    const char *args[] = {"-c", "8", "-d", "3", "-t", "2", u, NULL};
    int rc = run_load(args, 40, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    cr_assert_eq(field(NULL, "connections"), 8);
    cr_assert_not_null(strstr(json, "\"mode\": \"closed\""));
    cr_assert_eq(stop(&d), 0);
}

Test(magpie_load, pipelined_completes_without_errors, .timeout = 60)
{
    daemon_proc d = start(NULL);
    char u[64], err[4096];
    url(u, sizeof u, d.http, "/");
    const char *args[] = {"-c", "4", "-d", "2", "-p", "16", u, NULL};
    int rc = run_load(args, 40, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    cr_assert_eq(field(NULL, "pipeline"), 16);
    cr_assert_eq(stop(&d), 0);
}

Test(magpie_load, open_loop_offers_the_rate, .timeout = 60)
{
    daemon_proc d = start(NULL);
    char u[64], err[4096];
    url(u, sizeof u, d.http, "/");
    const char *args[] = {"-c", "4", "-d", "2", "-R", "500", u, NULL};
    int rc = run_load(args, 40, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    cr_assert_not_null(strstr(json, "\"mode\": \"open\""));
    /* 1,000 requests are due in 2 s; every one is sent (none after the end), but a busy
     * machine may answer the last ones past the end: no figure of speed is asserted. */
    cr_assert_leq(field(NULL, "requests"), 1000);
    cr_assert_gt(field("\"service_us\"", "count"), 0);
    cr_assert_eq(stop(&d), 0);
}

Test(magpie_load, request_list, .timeout = 60)
{
    daemon_proc d = start(NULL);
    char list[] = "/tmp/magpie-load-list.XXXXXX";
    int fd = mkstemp(list);
    cr_assert_geq(fd, 0);
    const char *text = "# three requests, taken in turn\n"
                       "GET /\n"
                       "\n"
                       "POST /echo\n"
                       "Content-Type: application/octet-stream\n"
                       "@body-size 1024\n"
                       "\n"
                       "HEAD /\n"
                       "X-Test: 1\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char u[64], err[4096];
    url(u, sizeof u, d.http, "/");
    const char *args[] = {"-c", "3", "-d", "2", "-r", list, u, NULL};
    int rc = run_load(args, 40, err, sizeof err);
    unlink(list);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    cr_assert_eq(stop(&d), 0);
}

Test(magpie_load, unreachable_target_fails_at_once, .timeout = 30)
{
    char u[64], err[4096];
    url(u, sizeof u, free_port(), "/");
    const char *args[] = {"-d", "60", u, NULL};
    int rc = run_load(args, 10, err, sizeof err);
    cr_assert_eq(rc, 1, "rc %d: %s", rc, err);
    cr_assert_not_null(strstr(err, "cannot connect"), "%s", err);
}

Test(magpie_load, remote_target_needs_to_be_named, .timeout = 30)
{
    char err[4096];
    /* 192.0.2.1 is TEST-NET-1: never routed; refused before any packet goes out. */
    const char *args[] = {"-d", "1", "http://192.0.2.1:80/", NULL};
    int rc = run_load(args, 10, err, sizeof err);
    cr_assert_eq(rc, 2, "rc %d: %s", rc, err);
    cr_assert_not_null(strstr(err, "not a loopback address"), "%s", err);
    cr_assert_not_null(strstr(err, "--allow-remote 192.0.2.1"), "%s", err);
}

/* ---- servers that misbehave, in a thread of the test: each connection in turn gets `reply`
 * for every read of a request, and is closed after the first if close_after is set. */

typedef struct bad_server {
    int fd, port;
    const char *reply;
    bool close_after;
} bad_server;

static void *bad_serve(void *arg)
{
    bad_server *b = arg;
    for (;;) {
        int c = accept(b->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        char buf[4096];
        while (read(c, buf, sizeof buf) > 0) {
            if (write(c, b->reply, strlen(b->reply)) < 0 || b->close_after)
                break;
        }
        close(c);
    }
}

/* A listening socket on a free loopback port; with serve, a thread answering as above (it
 * lives until the test's process ends); without, nobody accepts: connects complete in the
 * kernel's backlog and requests are never answered. */
static bad_server *bad_start(const char *reply, bool close_after, bool serve)
{
    static bad_server b;
    b = (bad_server){.reply = reply, .close_after = close_after};
    b.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(b.fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(b.fd, 64), 0);
    cr_assert_eq(getsockname(b.fd, (struct sockaddr *)&a, &len), 0);
    b.port = ntohs(a.sin_port);
    if (serve) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, bad_serve, &b), 0);
        pthread_detach(t);
    }
    return &b;
}

Test(magpie_load, a_silent_server_gives_timeouts_not_a_hang, .timeout = 30)
{
    bad_server *b = bad_start(NULL, false, false);
    char u[64], err[4096];
    url(u, sizeof u, b->port, "/");
    const char *args[] = {"-c", "2", "-d", "2", "--timeout", "300", u, NULL};
    int rc = run_load(args, 15, err, sizeof err);
    cr_assert_eq(rc, 1, "rc %d (no response completed): %s", rc, err);
    cr_assert_geq(field("\"errors\"", "timeout"), 2, "%s", json);
    cr_assert_eq(field(NULL, "requests"), 0);
}

Test(magpie_load, an_unframable_response_is_a_framing_error, .timeout = 30)
{
    bad_server *b = bad_start("HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", false, true);
    char u[64], err[4096];
    url(u, sizeof u, b->port, "/");
    const char *args[] = {"-c", "1", "-d", "1", u, NULL};
    run_load(args, 15, err, sizeof err);
    cr_assert_gt(field("\"errors\"", "framing"), 0, "%s", json);
}

Test(magpie_load, error_statuses_are_counted, .timeout = 30)
{
    bad_server *b = bad_start("HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", false, true);
    char u[64], err[4096];
    url(u, sizeof u, b->port, "/");
    const char *args[] = {"-c", "1", "-d", "1", u, NULL};
    int rc = run_load(args, 15, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cr_assert_gt(field("\"status\"", "5xx"), 0, "%s", json);
    cr_assert_eq(field("\"status\"", "5xx"), field("\"errors\"", "status"));
    cr_assert_eq(field("\"status\"", "2xx"), 0);
}

Test(magpie_load, a_close_mid_response_is_a_read_error, .timeout = 30)
{
    /* Content-Length promises more than comes, then the server closes. */
    bad_server *b = bad_start("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", true, true);
    char u[64], err[4096];
    url(u, sizeof u, b->port, "/");
    const char *args[] = {"-c", "1", "-d", "1", u, NULL};
    run_load(args, 15, err, sizeof err);
    cr_assert_gt(field("\"errors\"", "read"), 0, "%s", json);
    cr_assert_eq(field(NULL, "requests"), 0);
}

Test(magpie_load, connection_close_responses_reconnect_cleanly, .timeout = 30)
{
    bad_server *b = bad_start("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
                              true, true);
    char u[64], err[4096];
    url(u, sizeof u, b->port, "/");
    const char *args[] = {"-c", "1", "-d", "1", u, NULL};
    int rc = run_load(args, 15, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    /* A connection per response, and perhaps one more whose answer the end cut off. */
    double connects = field(NULL, "connects"), requests = field(NULL, "requests");
    cr_assert(connects == requests || connects == requests + 1, "%s", json);
}

/* ---- TLS */

static char pki[PKI_DIR_MAX];

static daemon_proc start_https(void)
{
    pki_make(pki);
    char conf[PKI_DIR_MAX + 16];
    snprintf(conf, sizeof conf, "%s/magpied.conf", pki);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
            "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\ncertificate_key = %s/ec.key\n"
            "[runtime]\nworkers = 2\n[route = /]\nhandler = text\nbody = Hello, World!\n",
            pki, pki);
    fclose(f);
    daemon_proc d = start_with(conf, NULL, NULL);
    cr_assert_gt(d.https, 0, "no https= in the listening line");
    return d;
}

static void https_url(char *buf, size_t len, const char *host, int port)
{
    snprintf(buf, len, "https://%s:%d/", host, port);
}

Test(magpie_load, tls_keep_alive_verified, .timeout = 60)
{
    daemon_proc d = start_https();
    char u[96], ca[PKI_DIR_MAX + 16], err[4096];
    https_url(u, sizeof u, "localhost", d.https);
    snprintf(ca, sizeof ca, "%s/ca.pem", pki);
    const char *args[] = {"-c", "4", "-d", "2", "--cacert", ca, u, NULL};
    int rc = run_load(args, 40, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    /* Keep-alive: one handshake per connection (a reconnect after an error would add one). */
    cr_assert_geq(field("\"tls\"", "handshakes"), 1, "%s", json);
    cr_assert_leq(field("\"tls\"", "handshakes"), 4, "%s", json);
    cr_assert_eq(field("\"tls\"", "resumed"), 0);
    cr_assert_gt(field("\"handshake_us\"", "p50"), 0);
    cr_assert_eq(stop(&d), 0);
    pki_remove(pki);
}

Test(magpie_load, tls_a_connection_per_request_full_then_resumed, .timeout = 60)
{
    daemon_proc d = start_https();
    char u[96], err[4096];
    https_url(u, sizeof u, "127.0.0.1", d.https);
    const char *full[] = {"-c", "2", "-d", "2", "--tls13", "-H", "Connection: close", u, NULL};
    int rc = run_load(full, 40, err, sizeof err);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    check_json();
    double reqs = field(NULL, "requests"), hs = field("\"tls\"", "handshakes");
    /* One handshake per response, give or take those cut by the end of the run. */
    cr_assert_geq(hs, reqs, "%s", json);
    cr_assert_leq(hs, reqs + 2, "%s", json);
    cr_assert_eq(field("\"tls\"", "resumed"), 0, "%s", json);
    const char *tls13[] = {"-c", "2", "-d", "2", "--resume", "-H", "Connection: close", u, NULL};
    const char *tls12[] = {"-c",      "2",     "-d",        "2",  "--resume",
                           "--tls12", "--sni", "localhost", "-H", "Connection: close",
                           u,         NULL};
    const char *const *runs[] = {tls13, tls12};
    for (int i = 0; i < 2; i++) {
        rc = run_load(runs[i], 40, err, sizeof err);
        cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
        check_json();
        hs = field("\"tls\"", "handshakes");
        /* Each slot's first handshake is full, every later one resumed. */
        cr_assert_gt(hs, 4, "%s", json);
        cr_assert_geq(field("\"tls\"", "resumed"), hs - 2, "%s", json);
    }
    cr_assert_eq(stop(&d), 0);
    pki_remove(pki);
}

Test(magpie_load, tls_an_untrusted_certificate_fails_every_handshake, .timeout = 60)
{
    daemon_proc d = start_https();
    char u[96], err[4096], other[PKI_DIR_MAX + 16];
    https_url(u, sizeof u, "localhost", d.https);
    /* The server's own certificate as the only trust anchor: not a CA, it signs nothing. */
    snprintf(other, sizeof other, "%s/rsa.pem", pki);
    const char *args[] = {"-c", "2", "-d", "1", "--cacert", other, u, NULL};
    int rc = run_load(args, 40, err, sizeof err);
    cr_assert_eq(rc, 1, "rc %d: %s", rc, err);
    cr_assert_gt(field("\"errors\"", "tls"), 0, "%s", json);
    cr_assert_eq(field(NULL, "requests"), 0, "%s", json);
    cr_assert_eq(stop(&d), 0);
    pki_remove(pki);
}

Test(magpie_load, tls_options_want_an_https_url, .timeout = 30)
{
    char err[4096];
    const char *args[] = {"--resume", "http://127.0.0.1:9/", NULL};
    cr_assert_eq(run_load(args, 20, err, sizeof err), 2, "%s", err);
    cr_assert_not_null(strstr(err, "https://"), "%s", err);
}
