/* End-to-end tests of listeners and virtual hosts: the built magpied with [http] on IPv4 and
 * IPv6 at once, [listener NAME]s, [site NAME]s chosen by Host and by SNI (curl --resolve,
 * openssl s_client -servername) on a test PKI (tls_pki.h plus a certificate per site), 421
 * for a Host that is not the TLS connection's site, HSTS, handler = https_redirect, strict_sni,
 * handshake failures by reason, and a reload that adds and removes listeners and addresses
 * while an open connection on an unchanged one goes on. */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "daemon/tls_pki.h"
#include "test_net.h"

TestSuite(vhost, .fini = kill_leftover);

static char dir[PKI_DIR_MAX];
static char conf[PKI_DIR_MAX + 16];
static char errlog[PKI_DIR_MAX + 16];

/* The port of NAME=...host... in d's listening line ("[::1]" for IPv6), or 0. */
static int port_of(const daemon_proc *d, const char *name, const char *host)
{
    char key[64];
    snprintf(key, sizeof key, " %s=", name);
    const char *at = strstr(d->line, key);
    if (at == NULL && strncmp(d->line, key + 1, strlen(key + 1)) == 0)
        at = d->line - 1; /* the first one has no blank before it */
    if (at == NULL)
        return 0;
    const char *end = strchr(at + 1, ' ');
    char pat[64];
    snprintf(pat, sizeof pat, "%s:", host);
    const char *h = strstr(at + 1, pat);
    if (h == NULL || (end != NULL && h > end))
        return 0;
    return atoi(h + strlen(pat));
}

/* A certificate for names (a SAN list such as "DNS:a.test,DNS:*.a.test") signed by the test
 * CA, as NAME.pem and NAME.key in dir. */
static void site_cert(const char *name, const char *san)
{
    char cmd[PKI_DIR_MAX * 2 + 1024];
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; exec 2>>pki.log\n"
             "printf 'subjectAltName=%s\\n' > %s.ext\n"
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout %s.key "
             "-out %s.csr -subj /CN=%s\n"
             "openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
             "-extfile %s.ext -out %s.pem\n",
             dir, san, name, name, name, name, name, name, name);
    cr_assert_eq(system(cmd), 0, "making %s's certificate", name);
}

static void setup(const char *https_extra)
{
    pki_make(dir);
    site_cert("a", "DNS:a.test,DNS:*.a.test");
    site_cert("b", "DNS:b.test");
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(errlog, sizeof errlog, "%s/err.log", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0, [::1]:0\n[echo]\nlisten =\n"
            "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\ncertificate_key = %s/ec.key\n"
            "%s\n"
            "[listener redirect]\nlisten = 127.0.0.1:0\ndefault_site = redir\n"
            "[runtime]\nworkers = 2\n"
            "[route = /]\nhandler = text\nbody = default\n"
            "[route = /metrics]\nhandler = metrics\n"
            "[site a]\nnames = a.test *.a.test\ncertificate = %s/a.pem\n"
            "certificate_key = %s/a.key\nhsts = max-age=60\n"
            "[route = /]\nhandler = text\nbody = site a\n"
            "[site b]\nnames = b.test\ncertificate = %s/b.pem\ncertificate_key = %s/b.key\n"
            "header_add = X-Site: b\nheader_always = on\nerror_page = 421 wrong site for b\n"
            "[route = /]\nhandler = text\nbody = site b\n"
            "[site redir]\n"
            "[route /]\nhandler = https_redirect\nhttps_port = 8443\n",
            dir, dir, https_extra != NULL ? https_extra : "", dir, dir, dir, dir);
    fclose(f);
}

static void finish(daemon_proc *d)
{
    cr_assert_eq(stop(d), 0);
    pki_remove(dir);
}

/* curl's output for args (a format with the daemon's ports), stdout and stderr together. */
static char *curl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *curl(const char *fmt, ...)
{
    char args[1024], cmd[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "curl -s -S -m 5 %s 2>&1", args);
    return run(cmd);
}

Test(vhost, sites_by_host_on_ipv4_and_ipv6, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_with(conf, NULL, errlog);
    int v6 = port_of(&d, "http", "[::1]");
    cr_assert_gt(v6, 0, "no [::1] in %s", d.line);
    cr_assert_str_eq(curl("http://127.0.0.1:%d/", d.http), "default");
    cr_assert_str_eq(curl("-H 'Host: a.test' http://127.0.0.1:%d/", d.http), "site a");
    cr_assert_str_eq(curl("-H 'Host: X.A.Test.:8080' http://127.0.0.1:%d/", d.http), "site a");
    cr_assert_str_eq(curl("-H 'Host: b.test' http://[::1]:%d/", v6), "site b");
    cr_assert_str_eq(curl("-H 'Host: c.test' http://[::1]:%d/", v6), "default");
    /* An absolute-form target's authority wins over Host. */
    char *out =
        curl("-H 'Host: a.test' --request-target http://b.test/ http://127.0.0.1:%d/", d.http);
    cr_assert_str_eq(out, "site b");
    /* Another site's routes are not this one's. */
    out = curl("-o /dev/null -w '%%{http_code}' -H 'Host: a.test' http://127.0.0.1:%d/metrics",
               d.http);
    cr_assert_str_eq(out, "404");
    /* No HSTS in plaintext. */
    out = curl("-i -H 'Host: a.test' http://127.0.0.1:%d/", d.http);
    cr_assert_null(strstr(out, "Strict-Transport-Security"), "%s", out);
    finish(&d);
}

Test(vhost, sni_picks_the_certificate_and_421_for_another_host, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_with(conf, NULL, errlog);
    int p = d.https;
    cr_assert_gt(p, 0);
    /* curl verifies each name against the certificate the server chose by SNI. */
    char *out = curl("-i --http1.1 --cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 "
                     "https://a.test:%d/",
                     dir, p, p);
    cr_assert(strstr(out, "HTTP/1.1 200") && strstr(out, "site a"), "%s", out);
    cr_assert(strstr(out, "Strict-Transport-Security: max-age=60\r\n"), "%s", out);
    /* The same over HTTP/2 (ALPN h2): the site by :authority, HSTS in the HEADERS frame. */
    out = curl("-i --http2 --cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 https://a.test:%d/",
               dir, p, p);
    cr_assert(strstr(out, "HTTP/2 200") && strstr(out, "site a"), "%s", out);
    cr_assert(strstr(out, "strict-transport-security: max-age=60\r\n"), "%s", out);
    out = curl("--cacert %s/ca.pem --resolve www.a.test:%d:127.0.0.1 https://www.a.test:%d/", dir,
               p, p);
    cr_assert_str_eq(out, "site a");
    out = curl("-i --cacert %s/ca.pem --resolve b.test:%d:127.0.0.1 https://b.test:%d/", dir, p, p);
    cr_assert(strstr(out, "site b"), "%s", out);
    cr_assert_null(strcasestr(out, "Strict-Transport-Security"), "b has no hsts: %s", out);
    /* An unknown name: the listener's certificate (localhost's). */
    out = curl("--cacert %s/ca.pem https://localhost:%d/", dir, p);
    cr_assert_str_eq(out, "default");
    out = curl("--cacert %s/ca.pem --resolve c.test:%d:127.0.0.1 https://c.test:%d/", dir, p, p);
    cr_assert(strstr(out, "SSL") || strstr(out, "certificate"),
              "c.test gets localhost's certificate, which does not name it: %s", out);
    /* The connection was made for a.test; a request for b.test on it is misdirected. */
    out = curl("-o /dev/null -w '%%{http_code}' --cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 "
               "-H 'Host: b.test' https://a.test:%d/",
               dir, p, p);
    cr_assert_str_eq(out, "421");
    /* ... and answered by the site its Host names, with that site's own rules and page. */
    out = curl("-i --http1.1 --cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 -H 'Host: b.test' "
               "https://a.test:%d/",
               dir, p, p);
    cr_assert(strstr(out, "HTTP/1.1 421") && strstr(out, "\r\nX-Site: b\r\n") &&
                  strstr(out, "wrong site for b"),
              "%s", out);
    out = curl("-o /dev/null -w '%%{http_code}' --cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 "
               "-H 'Host: other.test' https://a.test:%d/",
               dir, p, p);
    cr_assert_str_eq(out, "421", "a.test's connection, the default site's Host");
    out = curl("-o /dev/null -w '%%{http_code}' --cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 "
               "-H 'Host: WWW.A.TEST:%d' https://a.test:%d/",
               dir, p, p, p);
    cr_assert_str_eq(out, "200", "the same site by another of its names");
    finish(&d);
}

Test(vhost, https_redirect_keeps_host_path_and_query, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_with(conf, NULL, errlog);
    int r = port_of(&d, "redirect", "127.0.0.1");
    cr_assert_gt(r, 0, "no redirect= in %s", d.line);
    char *out = curl("-i -H 'Host: shop.example:8080' 'http://127.0.0.1:%d/a/b?x=1&y=2'", r);
    cr_assert(strstr(out, "HTTP/1.1 301 "), "%s", out);
    cr_assert(strstr(out, "Location: https://shop.example:8443/a/b?x=1&y=2\r\n"), "%s", out);
    out = curl("-i -X POST -d x -H 'Host: [::1]:80' http://127.0.0.1:%d/p", r);
    cr_assert(strstr(out, "Location: https://[::1]:8443/p\r\n"), "%s", out);
    /* HTTP/1.0 without Host: nowhere to send it. */
    out = curl("-0 -o /dev/null -w '%%{http_code}' -H 'Host:' http://127.0.0.1:%d/", r);
    cr_assert_str_eq(out, "400");
    /* The same daemon's [http] listener keeps the default site. */
    cr_assert_str_eq(curl("http://127.0.0.1:%d/", d.http), "default");
    finish(&d);
}

/* The value of a series in /metrics (-1 when absent). */
static long long metric(const daemon_proc *d, const char *series)
{
    const char *out = curl("http://127.0.0.1:%d/metrics", d->http);
    char line[300];
    snprintf(line, sizeof line, "\n%s ", series);
    const char *at = strstr(out, line);
    return at != NULL ? atoll(at + strlen(line)) : -1;
}

Test(vhost, strict_sni_and_failures_by_reason, .timeout = 60)
{
    setup("strict_sni = on");
    daemon_proc d = start_with(conf, NULL, errlog);
    int p = d.https;
    const char *unrec = "magpied_tls_handshake_failure_reasons_total{reason=\"unrecognized_name\"}";
    const char *http = "magpied_tls_handshake_failure_reasons_total{reason=\"http_request\"}";
    cr_assert_eq(metric(&d, unrec), 0);
    char *out =
        curl("--cacert %s/ca.pem --resolve a.test:%d:127.0.0.1 https://a.test:%d/", dir, p, p);
    cr_assert_str_eq(out, "site a");
    out = curl("-k https://127.0.0.1:%d/", p); /* no SNI for an address */
    cr_assert(strstr(out, "unrecognized name") || strstr(out, "alert"), "%s", out);
    out = curl("-k --resolve c.test:%d:127.0.0.1 https://c.test:%d/", p, p);
    cr_assert(strstr(out, "unrecognized name") || strstr(out, "alert"), "%s", out);
    cr_assert_eq(metric(&d, unrec), 2);
    /* Plaintext HTTP on the TLS port. */
    out = curl("http://127.0.0.1:%d/", p);
    cr_assert_eq(metric(&d, http), 1);
    finish(&d);
}

/* Renegotiation refused, no 0-RTT: what the TLS suite checks of [https], here with sites. */
Test(vhost, no_early_data_with_sites, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_with(conf, NULL, errlog);
    char cmd[PKI_DIR_MAX * 2 + 400];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && printf 'GET / HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: "
             "close\\r\\n\\r\\n' | openssl s_client -connect 127.0.0.1:%d "
             "-servername a.test -tls1_3 -ign_eof -sess_out sess >/dev/null 2>&1; printf 'GET / "
             "HTTP/1.1\\r\\n"
             "Host: a.test\\r\\n\\r\\n' > early; timeout 5 openssl s_client -connect "
             "127.0.0.1:%d -servername a.test -tls1_3 -sess_in sess -early_data early "
             "</dev/null 2>&1",
             dir, d.https, d.https);
    char *out = run(cmd);
    cr_assert(strstr(out, "Early data was not sent") || strstr(out, "Early data was rejected"),
              "%s", out);
    finish(&d);
}

/* A reload adds a listener, drops an address of another, and keeps a connection open on an
 * unchanged one answering. */
Test(vhost, reload_adds_and_removes_listeners_and_keeps_connections, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_with(conf, NULL, errlog);
    int v6 = port_of(&d, "http", "[::1]");
    cr_assert_gt(v6, 0);
    int fd = test_connect(d.http);
    const char *req = "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n";
    char buf[4096];
    test_write_all(fd, req, strlen(req));
    size_t n = read_some(fd, buf, sizeof buf - 1, "site b", 1);
    buf[n] = '\0';
    cr_assert(strstr(buf, "site b"), "%s", buf);
    /* The IPv6 address goes, [listener extra] comes. */
    char cmd[PKI_DIR_MAX * 2 + 300];
    snprintf(cmd, sizeof cmd,
             "sed -i 's|^listen = 127.0.0.1:0, \\[::1\\]:0|listen = 127.0.0.1:0|' '%s' && "
             "printf '[listener extra]\\nlisten = 127.0.0.1:0\\ndefault_site = b\\n' >> '%s'",
             conf, conf);
    cr_assert_eq(system(cmd), 0);
    kill(d.pid, SIGHUP);
    cr_assert(file_has(errlog, "reloaded", 5000));
    cr_assert(file_has(errlog, "reload: http listener [::1]:", 100));
    cr_assert(file_has(errlog, "reload: extra listener on 127.0.0.1:", 100));
    /* The connection accepted before the reload goes on. */
    test_write_all(fd, req, strlen(req));
    n = read_some(fd, buf, sizeof buf - 1, "site b", 1);
    buf[n] = '\0';
    cr_assert(strstr(buf, "site b"), "%s", buf);
    close(fd);
    char *out = curl("-o /dev/null -w '%%{http_code}' http://[::1]:%d/", v6);
    cr_assert(strstr(out, "000"), "the IPv6 socket is closed: %s", out);
    snprintf(cmd, sizeof cmd,
             "grep -o 'extra listener on 127.0.0.1:[0-9]*' '%s' | tail -1 | cut -d: -f2", errlog);
    int extra = atoi(run(cmd));
    cr_assert_gt(extra, 0);
    cr_assert_str_eq(curl("http://127.0.0.1:%d/", extra), "site b", "its default site");
    cr_assert_str_eq(curl("http://127.0.0.1:%d/", d.http), "default");
    finish(&d);
}

/* magpied -t names file:line and key for a site's certificate that is not there. */
Test(vhost, check_names_a_site_certificate, .timeout = 60)
{
    setup(NULL);
    char cmd[PKI_DIR_MAX * 3 + PATH_MAX + 200], exe[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "sed -i 's|/b.pem|/nope.pem|' '%s'", conf);
    cr_assert_eq(system(cmd), 0);
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo rc=$?", exe, conf);
    char *out = run(cmd);
    cr_assert(strstr(out, "[site b] certificate: cannot open ") && strstr(out, "rc=1"), "%s", out);
    cr_assert(strstr(out, "magpied.conf:30: "), "file:line (the key's): %s", out);
    pki_remove(dir);
}

/* Session ticket keys are the process's, not a generation's: a session from before a reload
 * resumes after it. Each served certificate's days to expiry are in /metrics, and one that
 * expires within 14 days is logged (the test PKI's last 2). */
Test(vhost, tickets_survive_reload_and_expiry_is_measured, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_with(conf, NULL, errlog);
    char cmd[PKI_DIR_MAX * 2 + 400];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && printf 'GET / HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: "
             "close\\r\\n\\r\\n' | openssl s_client -connect 127.0.0.1:%d "
             "-servername a.test -tls1_3 -ign_eof -sess_out tsess >/dev/null 2>&1; ls tsess",
             dir, d.https);
    cr_assert(strstr(run(cmd), "tsess"), "no session saved");
    kill(d.pid, SIGHUP);
    cr_assert(file_has(errlog, "reloaded", 5000));
    snprintf(cmd, sizeof cmd,
             "cd '%s' && openssl s_client -connect 127.0.0.1:%d -servername a.test "
             "-tls1_3 -sess_in tsess </dev/null 2>&1",
             dir, d.https);
    char *out = run(cmd);
    cr_assert(strstr(out, "Reused, TLSv1.3"), "the ticket from before the reload: %s", out);
    cr_assert_eq(metric(&d, "magpied_tls_ticket_keys_made_total"), 1, "one key so far");
    out = curl("http://127.0.0.1:%d/metrics", d.http);
    char series[PKI_DIR_MAX + 200];
    const char *names[2][2] = {{"site a", "a.pem"}, {"https", "ec.pem"}};
    for (int i = 0; i < 2; i++) {
        snprintf(series, sizeof series,
                 "magpied_tls_certificate_expiry_seconds{section=\"%s\",certificate=\"%s/%s\"} ",
                 names[i][0], dir, names[i][1]);
        const char *at = strstr(out, series);
        cr_assert_not_null(at, "%s in %s", series, out);
        double days = atof(at + strlen(series)) / 86400;
        cr_assert(days > 1.9 && days <= 2.0, "%s%f: the test PKI's are valid 2 days", series, days);
    }
    cr_assert(file_has(errlog, "TLS: [site b] certificate ", 100));
    cr_assert(file_has(errlog, "b.pem expires in ", 100));
    finish(&d);
}

/* A plaintext [listener NAME] with http2 = on speaks h2c by prior knowledge; [http] (http2
 * off by default) does not; http2 on a TLS listener is refused (its ALPN is [https]'s). */
Test(vhost, a_named_listener_may_speak_h2c, .timeout = 60)
{
    setup("[listener api]\nlisten = 127.0.0.1:0\nhttp2 = on\n");
    daemon_proc d = start_with(conf, NULL, errlog);
    int api = port_of(&d, "api", "127.0.0.1");
    cr_assert_gt(api, 0, "%s", d.line);
    char *out = curl("--http2-prior-knowledge -w ' %%{http_version}' -H 'Host: b.test' "
                     "http://127.0.0.1:%d/",
                     api);
    cr_assert_str_eq(out, "site b 2");
    out = curl("-o /dev/null -w '%%{http_code}' --http2-prior-knowledge http://127.0.0.1:%d/",
               d.http);
    cr_assert_neq(strcmp(out, "200"), 0, "[http] has http2 off: %s", out);
    finish(&d);

    setup("[listener api]\nlisten = 127.0.0.1:0\ntls = on\nhttp2 = on\n");
    char cmd[PKI_DIR_MAX + PATH_MAX + 100], exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo rc=$?", exe, conf);
    out = run(cmd);
    cr_assert(strstr(out, "[listener api] http2: a TLS listener offers h2 as [https] http2 says") &&
                  strstr(out, "rc=1"),
              "%s", out);
    pki_remove(dir);
}
