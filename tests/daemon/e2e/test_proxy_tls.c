/* End-to-end tests of TLS to upstreams ([upstream NAME] tls = on; upstream_tls.c,
 * core/tls_stream.c): a front magpied proxies to a second magpied serving [https] with the
 * test PKI (tls_pki.h). Verified requests, keep-alive reuse and session resumption (counted on
 * the upstream's /metrics), a wrong CA and a wrong name (502 and the log line, never
 * plaintext), tls_verify = off (served, with a warning), the upstream closing idle TLS
 * connections, the health checks over TLS, and `magpied -t` on bad TLS keys. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "daemon/tls_pki.h"

static char dir[PKI_DIR_MAX];
static pid_t origin_pid = -1;

static void kill_all(void)
{
    kill_leftover();
    if (origin_pid > 0) {
        kill(origin_pid, SIGKILL);
        waitpid(origin_pid, NULL, 0);
        origin_pid = -1;
    }
    if (dir[0] != '\0' && access(dir, F_OK) == 0) /* a failed test's PKI */
        pki_remove(dir);
}

TestSuite(proxy_tls, .fini = kill_all);

/* The origin: magpied with [https] on ec.pem (localhost and 127.0.0.1), keep-alive as given. */
static daemon_proc origin_start(const char *limits)
{
    char path[PKI_DIR_MAX + 32], err[PKI_DIR_MAX + 32], text[2048];
    snprintf(path, sizeof path, "%s/origin.conf", dir);
    snprintf(err, sizeof err, "%s/origin.log", dir);
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\n"
             "certificate_key = %s/ec.key\n"
             "[limits]\n%s\n"
             "[runtime]\nworkers = 2\n"
             "[route = /]\nhandler = text\nbody = Hello, World!\n"
             "[route = /metrics]\nhandler = metrics\n",
             dir, dir, limits != NULL ? limits : "");
    harness_write_file(path, text);
    static char err_keep[PKI_DIR_MAX + 32];
    snprintf(err_keep, sizeof err_keep, "%s", err);
    daemon_proc o = start_with(path, NULL, err_keep);
    cr_assert_gt(o.https, 0);
    origin_pid = o.pid;
    running = -1; /* the front is the harness's */
    return o;
}

static void origin_stop(daemon_proc *o)
{
    kill(o->pid, SIGTERM);
    int status;
    cr_assert_eq(waitpid(o->pid, &status, 0), o->pid);
    origin_pid = -1;
    fclose(o->out);
    cr_assert_eq(exit_code(o, status), 0);
}

/* The front's configuration: [upstream up] with tls = on to server (the rest of the section in
 * keys), and a proxy route at /. */
static void front_conf(char *path, size_t len, const char *server, const char *keys)
{
    snprintf(path, len, "%s/front.conf", dir);
    char text[2048];
    snprintf(text, sizeof text,
             "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
             "[runtime]\nworkers = 2\n"
             "[upstream up]\nserver = %s\ntls = on\n%s\n"
             "[route = /]\nhandler = proxy\nupstream = up\n"
             "[route = /front-metrics]\nhandler = metrics\n",
             server, keys);
    harness_write_file(path, text);
}

static daemon_proc front_start(const char *server, const char *keys)
{
    char path[PKI_DIR_MAX + 32];
    static char err[PKI_DIR_MAX + 32];
    front_conf(path, sizeof path, server, keys);
    snprintf(err, sizeof err, "%s/front.log", dir);
    return start_with(path, NULL, err);
}

/* A sample's value from a magpied's /metrics over plaintext HTTP (-1 when absent). */
static long long metric_of(int port, const char *path, const char *series)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "curl -s --max-time 10 http://127.0.0.1:%d%s", port, path);
    const char *out = run(cmd);
    char line[300];
    snprintf(line, sizeof line, "\n%s ", series);
    const char *at = strstr(out, line);
    return at != NULL ? atoll(at + strlen(line)) : -1;
}

/* Status and body of GET / through the front, on a new connection each. */
static char *front_get(int port)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "curl -s --max-time 10 -w ' %%{http_code}' http://127.0.0.1:%d/",
             port);
    return run(cmd);
}

static bool log_has(const char *name, const char *needle)
{
    char path[PKI_DIR_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return file_has(path, needle, 5000);
}

static char server_at[64];
static const char *origin_addr(const char *host, const daemon_proc *o)
{
    snprintf(server_at, sizeof server_at, "%s:%d", host, o->https);
    return server_at;
}

static char keys[512];
static const char *ca_keys(const char *extra)
{
    snprintf(keys, sizeof keys, "tls_ca_file = %s/ca.pem\n%s", dir, extra != NULL ? extra : "");
    return keys;
}

Test(proxy_tls, verified_by_name_and_by_address_with_pool_reuse, .timeout = 90)
{
    pki_make(dir);
    daemon_proc o = origin_start(NULL);
    const char *hosts[] = {"localhost", "127.0.0.1"};
    long long before = 0;
    for (int h = 0; h < 2; h++) {
        daemon_proc f = front_start(origin_addr(hosts[h], &o), ca_keys(NULL));
        for (int i = 0; i < 5; i++)
            cr_assert_str_eq(front_get(f.http), "Hello, World! 200", "%s", hosts[h]);
        /* Five requests, one after the other: one pooled TLS connection, one handshake. */
        long long hs =
            metric_of(o.http, "/metrics", "magpied_tls_handshakes_total{version=\"TLSv1.3\"}");
        cr_assert_eq(hs - before, 1, "%s: %lld handshakes for 5 requests", hosts[h], hs - before);
        before = hs;
        cr_assert_eq(stop(&f), 0);
    }
    origin_stop(&o);
    pki_remove(dir);
}

Test(proxy_tls, sessions_resume_across_connections, .timeout = 90)
{
    pki_make(dir);
    daemon_proc o = origin_start(NULL);
    /* No pool: each request its own connection, each after the first offering the session
     * (the TLS 1.3 ticket) the last one got. */
    daemon_proc f = front_start(origin_addr("localhost", &o), ca_keys("keepalive = 0\n"));
    for (int i = 0; i < 4; i++)
        cr_assert_str_eq(front_get(f.http), "Hello, World! 200");
    long long hs =
        metric_of(o.http, "/metrics", "magpied_tls_handshakes_total{version=\"TLSv1.3\"}");
    long long resumed = metric_of(o.http, "/metrics", "magpied_tls_resumptions_total");
    cr_assert_eq(hs, 4, "%lld handshakes", hs);
    cr_assert_eq(resumed, 3, "%lld of 4 handshakes resumed", resumed);
    cr_assert_eq(stop(&f), 0);
    origin_stop(&o);
    pki_remove(dir);
}

Test(proxy_tls, wrong_ca_and_wrong_name_are_502_with_the_reason, .timeout = 90)
{
    pki_make(dir);
    char cmd[PKI_DIR_MAX + 300];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
             "-nodes -keyout ca2.key -out ca2.pem -days 2 -subj /CN=other-ca 2>/dev/null",
             dir);
    cr_assert_eq(system(cmd), 0);
    daemon_proc o = origin_start(NULL);
    char k[256];
    snprintf(k, sizeof k, "tls_ca_file = %s/ca2.pem\n", dir);
    daemon_proc f = front_start(origin_addr("localhost", &o), k);
    cr_assert_str_eq(front_get(f.http), "Bad Gateway\n 502");
    cr_assert(log_has("front.log", "upstream up server localhost:"));
    cr_assert(log_has("front.log", "TLS handshake failed: certificate verify failed: unable to get "
                                   "local issuer certificate"));
    cr_assert(log_has("front.log", "tls_handshake"));
    cr_assert_eq(stop(&f), 0);
    /* The right CA, a name the certificate does not have. */
    f = front_start(origin_addr("127.0.0.1", &o), ca_keys("tls_server_name = wrong.example\n"));
    cr_assert_str_eq(front_get(f.http), "Bad Gateway\n 502");
    cr_assert(log_has("front.log", "certificate verify failed: hostname mismatch"));
    cr_assert_eq(stop(&f), 0);
    /* An IP address as the name, which the certificate does not have. */
    snprintf(k, sizeof k, "tls_ca_file = %s/ca.pem\ntls_server_name = 127.0.0.2\n", dir);
    f = front_start(origin_addr("127.0.0.1", &o), k);
    cr_assert_str_eq(front_get(f.http), "Bad Gateway\n 502");
    cr_assert(log_has("front.log", "certificate verify failed: IP address mismatch"));
    cr_assert_eq(stop(&f), 0);
    /* Nothing ever reached the origin in plaintext. */
    long long plain = metric_of(o.http, "/metrics", "magpied_tls_handshake_failures_total");
    cr_assert_geq(plain, 3, "%lld failed handshakes on the origin", plain);
    origin_stop(&o);
    pki_remove(dir);
}

Test(proxy_tls, verify_off_serves_with_a_warning, .timeout = 90)
{
    pki_make(dir);
    daemon_proc o = origin_start(NULL);
    daemon_proc f = front_start(origin_addr("localhost", &o),
                                "tls_verify = off\ntls_server_name = wrong.example\n");
    cr_assert_str_eq(front_get(f.http), "Hello, World! 200");
    cr_assert(log_has("front.log", "[upstream up] tls_verify = off"));
    cr_assert_eq(stop(&f), 0);
    origin_stop(&o);
    pki_remove(dir);
}

Test(proxy_tls, upstream_closing_idle_tls_connections, .timeout = 90)
{
    pki_make(dir);
    /* The origin closes keep-alive connections after 300 ms (with close_notify). */
    daemon_proc o = origin_start("keepalive_timeout_ms = 300\n");
    daemon_proc f = front_start(origin_addr("localhost", &o), ca_keys(NULL));
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(front_get(f.http), "Hello, World! 200", "request %d", i);
        usleep(800 * 1000); /* the pooled connection is closed by then */
    }
    /* Each request found its pooled connection closed and opened a new one, resuming. */
    long long resumed = metric_of(o.http, "/metrics", "magpied_tls_resumptions_total");
    cr_assert_geq(resumed, 1, "%lld resumed", resumed);
    cr_assert_eq(stop(&f), 0);
    origin_stop(&o);
    pki_remove(dir);
}

Test(proxy_tls, health_checks_over_tls, .timeout = 90)
{
    pki_make(dir);
    daemon_proc o = origin_start(NULL);
    char k[512];
    snprintf(k, sizeof k,
             "tls_ca_file = %s/ca.pem\nhealth_path = /\nhealth_interval_ms = 100\n"
             "health_fall = 1\n",
             dir);
    /* Two servers, the second a wrong port: its checks fail, the origin's pass over TLS. */
    char servers[128];
    snprintf(servers, sizeof servers, "localhost:%d\nserver = 127.0.0.1:%d", o.https, free_port());
    daemon_proc f = front_start(servers, k);
    cr_assert(log_has("front.log", "health check connect failed: down"));
    for (int i = 0; i < 4; i++)
        cr_assert_str_eq(front_get(f.http), "Hello, World! 200");
    cr_assert_eq(stop(&f), 0);
    /* With the wrong CA the origin's checks fail on the handshake. */
    snprintf(k, sizeof k, "health_path = /\nhealth_interval_ms = 100\nhealth_fall = 1\n");
    f = front_start(servers, k);
    cr_assert(log_has("front.log", "TLS handshake failed: certificate verify failed"));
    cr_assert_eq(stop(&f), 0);
    origin_stop(&o);
    pki_remove(dir);
}

/* `magpied -t` on the front's configuration with keys: its output. */
static char *check(const char *keys_text)
{
    char path[PKI_DIR_MAX + 32];
    front_conf(path, sizeof path, "127.0.0.1:1", keys_text);
    char exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo \"rc=$?\"", exe, path);
    return run(cmd);
}

Test(proxy_tls, check_refuses_bad_tls_keys, .timeout = 60)
{
    pki_make(dir);
    char k[512], want[512];
    char *out = check(ca_keys(NULL));
    cr_assert(strstr(out, "rc=0") != NULL, "%s", out);
    /* Line 10 is the section's first key after tls = on (front_conf's layout). */
    snprintf(k, sizeof k, "tls_ca_file = %s/none.pem\n", dir);
    out = check(k);
    snprintf(want, sizeof want, "front.conf:10: [upstream up] tls_ca_file: cannot open %s/none.pem",
             dir);
    cr_assert(strstr(out, want) != NULL && strstr(out, "rc=1") != NULL, "%s", out);
    snprintf(k, sizeof k, "tls_ca_file = %s/pki.log\n", dir);
    out = check(k);
    cr_assert(strstr(out, "tls_ca_file:") != NULL && strstr(out, "not a PEM certificate file") &&
                  strstr(out, "rc=1") != NULL,
              "%s", out);
    out = check("tls_verify = maybe\n");
    cr_assert(strstr(out, "front.conf:10: [upstream up] tls_verify: expected") != NULL &&
                  strstr(out, "rc=1") != NULL,
              "%s", out);
    out = check("tls_server_name = bad name\n");
    cr_assert(strstr(out, "tls_server_name: expected a host name") != NULL &&
                  strstr(out, "rc=1") != NULL,
              "%s", out);
    snprintf(k, sizeof k, "tls_client_certificate = %s/ec.pem\n", dir);
    out = check(k);
    cr_assert(strstr(out, "tls_client_certificate: must be set with tls_client_key") != NULL &&
                  strstr(out, "rc=1") != NULL,
              "%s", out);
    snprintf(k, sizeof k, "tls_client_certificate = %s/ec.pem\ntls_client_key = %s/other.key\n",
             dir, dir);
    out = check(k);
    cr_assert(strstr(out, "tls_client_key:") != NULL && strstr(out, "rc=1") != NULL, "%s", out);
    snprintf(k, sizeof k, "tls_client_certificate = %s/ec.pem\ntls_client_key = %s/ec.key\n", dir,
             dir);
    out = check(k);
    cr_assert(strstr(out, "rc=0") != NULL, "%s", out);
    out = check("tls_verify = off\n");
    cr_assert(strstr(out, "[upstream up] tls_verify = off") != NULL && strstr(out, "rc=0"), "%s",
              out);
    pki_remove(dir);
}
