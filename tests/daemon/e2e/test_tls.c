/* End-to-end tests of the [https] listener (server/tls.c): the built magpied on a test PKI
 * made at test time (tls_pki.h), driven with curl --cacert, openssl s_client and raw sockets:
 * the routes over TLS, keep-alive, SNI and ALPN, old protocols and renegotiation refused,
 * resumption, RSA and ECDSA side by side, hostile handshakes (garbage, silence, a close half
 * way, a truncation) with another client served meanwhile, reload with a new and a bad
 * certificate, and `magpied -t` on bad pairs. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "daemon/promtext.h"
#include "daemon/tls_pki.h"

TestSuite(tls, .fini = kill_leftover);

static char dir[PKI_DIR_MAX];
static char conf[PKI_DIR_MAX + 16];
static char errlog[PKI_DIR_MAX + 16];

/* The PKI, a www tree, and a configuration with [https] on ec.pem (extra: more [https] keys). */
static void setup(const char *extra)
{
    pki_make(dir);
    char cmd[PKI_DIR_MAX + 256];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir -p www/files && printf 'small file\\n' > www/files/small.txt && "
             "head -c 1048576 /dev/urandom > www/files/big.bin",
             dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(conf, sizeof conf, "%s/magpied.conf", dir);
    snprintf(errlog, sizeof errlog, "%s/err.log", dir);
    FILE *f = fopen(conf, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "[http]\nlisten = 127.0.0.1:0\n[echo]\nlisten =\n"
            "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\ncertificate_key = %s/ec.key\n"
            "%s\n"
            "[runtime]\nworkers = 2\n"
            "[route = /]\nhandler = text\nbody = Hello, World!\n"
            "[route = /echo]\nhandler = echo\nmethods = POST\n"
            "[route = /metrics]\nhandler = metrics\n"
            "[route /files]\nhandler = static\nroot = %s/www\n",
            dir, dir, extra ? extra : "", dir);
    fclose(f);
}

static daemon_proc start_tls(void)
{
    daemon_proc d = start_with(conf, NULL, errlog);
    cr_assert_gt(d.https, 0, "no https= in the listening line");
    return d;
}

static void finish(daemon_proc *d)
{
    cr_assert_eq(stop(d), 0);
    pki_remove(dir);
}

/* A metric's value from /metrics over TLS (-1 when absent). */
static long long metric(const daemon_proc *d, const char *series)
{
    char cmd[PKI_DIR_MAX + 200];
    snprintf(cmd, sizeof cmd, "curl -s --cacert '%s/ca.pem' https://127.0.0.1:%d/metrics", dir,
             d->https);
    const char *out = run(cmd);
    char line[300];
    snprintf(line, sizeof line, "\n%s ", series); /* a sample, not its # HELP line */
    const char *at = strstr(out, line);
    if (at == NULL) {
        fprintf(stderr, "no %s in:\n%s\n", series, out);
        return -1;
    }
    return atoll(at + strlen(line));
}

/* openssl s_client against the listener with args, stdin from the shell snippet input;
 * returns its stdout and stderr. With input "true" it reports the handshake and closes. */
/* A request that ends the connection: with -ign_eof, s_client reads until the server closes,
 * so whatever the server sends before its response (TLS 1.3 tickets) has arrived. */
#define ASK_AND_CLOSE "printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'"

static char *s_client(const daemon_proc *d, const char *input, const char *args)
{
    char cmd[PKI_DIR_MAX + 1200];
    snprintf(cmd, sizeof cmd,
             "(%s) | timeout 10 openssl s_client -connect 127.0.0.1:%d -CAfile '%s/ca.pem' %s "
             "2>&1",
             input, d->https, dir, args);
    return run(cmd);
}

/* The daemon still serves a TLS client. */
static void served(const daemon_proc *d)
{
    char cmd[PKI_DIR_MAX + 200];
    snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 --cacert '%s/ca.pem' https://127.0.0.1:%d/",
             dir, d->https);
    cr_assert_str_eq(run(cmd), "Hello, World!");
}

Test(tls, routes_static_and_echo_with_curl, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    served(&d);
    char cmd[PKI_DIR_MAX * 6 + 400];
    snprintf(cmd, sizeof cmd,
             "curl -sS --cacert '%s/ca.pem' -X POST --data-binary 'some body' "
             "https://localhost:%d/echo",
             dir, d.https);
    cr_assert_str_eq(run(cmd), "some body");
    snprintf(cmd, sizeof cmd, "curl -sS --cacert '%s/ca.pem' https://127.0.0.1:%d/files/small.txt",
             dir, d.https);
    cr_assert_str_eq(run(cmd), "small file\n");
    /* A 1 MiB file over HTTP/1.1, where the sendfile path falls back to read and SSL_write
     * (many records a piece); twice, so that the second comes from the open-file cache; then
     * over HTTP/2 (curl's choice by ALPN). */
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd,
                 "curl -sS %s --cacert '%s/ca.pem' -o '%s/got.bin' "
                 "https://127.0.0.1:%d/files/big.bin && cmp '%s/got.bin' '%s/www/files/big.bin' "
                 "&& echo same",
                 i < 2 ? "--http1.1" : "", dir, dir, d.https, dir, dir);
        const char *got = run(cmd);
        cr_assert_str_eq(got, "same\n", "round %d: %s", i, got);
    }
    /* Several ranges of it, multipart/byteranges, over HTTP/1.1 (the TLS sendfile path: each
     * part's head in the output before its piece) and over HTTP/2 (byteranges.py checks the
     * parts against the file). */
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "curl -sS %s --cacert '%s/ca.pem' -D '%s/got.head' -o '%s/got.bin' -H "
                 "'Range: bytes=0-99,70000-900000,-5' https://127.0.0.1:%d/files/big.bin && "
                 "/usr/bin/python3 tests/daemon/e2e/byteranges.py '%s/got.head' '%s/got.bin' "
                 "'%s/www/files/big.bin'",
                 i == 0 ? "--http1.1" : "--http2", dir, dir, dir, d.https, dir, dir, dir);
        const char *got = run(cmd);
        cr_assert_str_eq(got, "parts 3\n", "%s: %s", i == 0 ? "HTTP/1.1" : "HTTP/2", got);
    }
    /* A large POST body streams through the echo handler. */
    snprintf(cmd, sizeof cmd,
             "curl -sS --http1.1 --cacert '%s/ca.pem' -X POST --data-binary "
             "@'%s/www/files/big.bin' -H 'Expect:' https://127.0.0.1:%d/echo | "
             "cmp - '%s/www/files/big.bin' && echo same",
             dir, dir, d.https, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    /* The plaintext listener is as it was. */
    snprintf(cmd, sizeof cmd, "curl -sS http://127.0.0.1:%d/", d.http);
    cr_assert_str_eq(run(cmd), "Hello, World!");
    /* /metrics over TLS parses, and counts the handshakes. */
    snprintf(cmd, sizeof cmd, "curl -s --cacert '%s/ca.pem' https://127.0.0.1:%d/metrics", dir,
             d.https);
    char *text = run(cmd);
    char problems[2048];
    cr_assert_eq(prom_check(text, problems, sizeof problems), 0, "%s", problems);
    cr_assert_geq(metric(&d, "magpied_tls_handshakes_total{version=\"TLSv1.3\"}"), 7, "%lld",
                  metric(&d, "magpied_tls_handshakes_total{version=\"TLSv1.3\"}"));
    cr_assert_eq(metric(&d, "magpied_tls_handshake_failures_total"), 0, "%lld",
                 metric(&d, "magpied_tls_handshake_failures_total"));
    finish(&d);
}

Test(tls, keepalive_several_requests_on_one_connection, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    char cmd[PKI_DIR_MAX + 400];
    snprintf(cmd, sizeof cmd,
             "curl -sv --cacert '%s/ca.pem' https://127.0.0.1:%d/ https://127.0.0.1:%d/ "
             "https://127.0.0.1:%d/files/small.txt https://127.0.0.1:%d/ 2>&1 | "
             "grep -c 'Re-using'",
             dir, d.https, d.https, d.https, d.https);
    cr_assert_str_eq(run(cmd), "3\n");
    /* Pipelined over s_client: both answered, in order, on one connection. */
    char *out = s_client(&d,
                         "printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nGET /files/small.txt "
                         "HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'",
                         "-quiet -ign_eof");
    const char *a = strstr(out, "Hello, World!"), *b = strstr(out, "small file");
    cr_assert(a != NULL && b != NULL && a < b, "%s", out);
    /* 2, and the scrape's own */
    cr_assert_eq(metric(&d, "magpied_tls_handshakes_total{version=\"TLSv1.3\"}"), 3);
    finish(&d);
}

/* Requests whose records arrive apart: the head split over two records with a pause between
 * them (the first read drains OpenSSL, and the wait for more goes straight to the socket), a
 * request after an idle moment, and a pipelined pair whose second request is split the same
 * way. Every answer comes, in order, on one connection. */
Test(tls, requests_split_over_records_that_arrive_apart, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    char py[PKI_DIR_MAX + 16];
    snprintf(py, sizeof py, "%s/split.py", dir);
    FILE *f = fopen(py, "w");
    cr_assert_not_null(f);
    fputs("import socket, ssl, sys, time\n"
          "ctx = ssl.create_default_context(cafile=sys.argv[2])\n"
          "ctx.check_hostname = False\n"
          "s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1]))))\n"
          "def answer(want):\n"
          "    got = b''\n"
          "    while want not in got:\n"
          "        b = s.recv(65536)\n"
          "        if not b: break\n"
          "        got += b\n"
          "    return got\n"
          "s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n')\n"
          "time.sleep(0.3)\n"
          "s.sendall(b'\\r\\n')\n"
          "n = answer(b'Hello, World!').count(b'Hello, World!')\n"
          "time.sleep(0.3)\n"
          "s.sendall(b'GET /files/small.txt HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
          "n += answer(b'small file').count(b'small file')\n"
          "s.sendall(b'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nGET /files/small.txt "
          "HTTP/1.1\\r\\nHo')\n"
          "time.sleep(0.3)\n"
          "s.sendall(b'st: x\\r\\nConnection: close\\r\\n\\r\\n')\n"
          "rest = b''\n"
          "while True:\n"
          "    b = s.recv(65536)\n"
          "    if not b: break\n"
          "    rest += b\n"
          "a, b = rest.find(b'Hello, World!'), rest.find(b'small file')\n"
          "print('answers', n + (a >= 0) + (b > a), flush=True)\n",
          f);
    fclose(f);
    char cmd[PKI_DIR_MAX * 3 + 100];
    snprintf(cmd, sizeof cmd, "timeout 20 /usr/bin/python3 '%s' %d '%s/ca.pem' 2>&1", py, d.https,
             dir);
    cr_assert_str_eq(run(cmd), "answers 4\n");
    /* one connection, and the scrape's own */
    cr_assert_eq(metric(&d, "magpied_tls_handshakes_total{version=\"TLSv1.3\"}"), 2);
    finish(&d);
}

Test(tls, s_client_sni_alpn_and_protocols, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    char *out = s_client(&d, ASK_AND_CLOSE,
                         "-ign_eof -servername localhost -alpn http/1.1 -verify_return_error");
    cr_assert(strstr(out, "ALPN protocol: http/1.1"), "%s", out);
    cr_assert(strstr(out, "Verify return code: 0 (ok)"), "%s", out);
    cr_assert(strstr(out, "Hello, World!"), "%s", out);
    /* ALPN with none of h2, http/1.1 and http/1.0: no_application_protocol. */
    out = s_client(&d, "true", "-alpn spdy/3");
    cr_assert(strstr(out, "no application protocol"), "%s", out);
    /* http/1.0 alone: chosen, and served (nginx offers it too). */
    out = s_client(&d, "printf 'GET / HTTP/1.0\\r\\n\\r\\n'", "-ign_eof -alpn spdy/3,http/1.0");
    cr_assert(strstr(out, "ALPN protocol: http/1.0"), "%s", out);
    cr_assert(strstr(out, "HTTP/1.1 200 OK"), "%s", out);
    cr_assert(strstr(out, "Hello, World!"), "%s", out);
    /* http/1.1 before http/1.0, whatever the client's order. */
    out = s_client(&d, "true", "-alpn http/1.0,http/1.1");
    cr_assert(strstr(out, "ALPN protocol: http/1.1"), "%s", out);
    /* h2 offered ([https] http2 is on by default) and preferred when both are. */
    out = s_client(&d, "true", "-alpn http/1.1,h2");
    cr_assert(strstr(out, "ALPN protocol: h2"), "%s", out);
    /* TLS 1.2 serves, with an intermediate suite; 1.1 and 1.0 are refused. */
    out = s_client(&d, "true", "-tls1_2");
    cr_assert(strstr(out, "New, TLSv1.2, Cipher is ECDHE-ECDSA-"), "%s", out);
    out = s_client(&d, "true", "-tls1_1 -cipher DEFAULT@SECLEVEL=0");
    cr_assert(strstr(out, "Cipher is (NONE)") || strstr(out, "alert protocol version"), "%s", out);
    cr_assert_null(strstr(out, "New, TLSv1.1"), "%s", out);
    out = s_client(&d, "true", "-tls1 -cipher DEFAULT@SECLEVEL=0");
    cr_assert_null(strstr(out, "New, TLSv1,"), "%s", out);
    /* A suite outside the profile: refused. */
    out = s_client(&d, "true", "-tls1_2 -cipher AES128-SHA");
    cr_assert(strstr(out, "handshake failure") || strstr(out, "Cipher is (NONE)"), "%s", out);
    served(&d);
    cr_assert_geq(metric(&d, "magpied_tls_handshake_failures_total"), 3, "%lld",
                  metric(&d, "magpied_tls_handshake_failures_total"));
    finish(&d);
}

Test(tls, resumption_tls13_and_tls12, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    char args[PKI_DIR_MAX + 100];
    /* TLS 1.3 tickets arrive after the handshake, before the first response: the client asks
     * for one and reads until the server closes. */
    snprintf(args, sizeof args, "-ign_eof -sess_out '%s/s13.pem'", dir);
    char *out = s_client(&d, ASK_AND_CLOSE, args);
    cr_assert(strstr(out, "New, TLSv1.3"), "%s", out);
    snprintf(args, sizeof args, "-sess_in '%s/s13.pem'", dir);
    out = s_client(&d, "true", args);
    cr_assert(strstr(out, "Reused, TLSv1.3"), "%s", out);
    snprintf(args, sizeof args, "-tls1_2 -sess_out '%s/s12.pem'", dir);
    out = s_client(&d, "true", args);
    cr_assert(strstr(out, "New, TLSv1.2"), "%s", out);
    snprintf(args, sizeof args, "-tls1_2 -sess_in '%s/s12.pem'", dir);
    out = s_client(&d, "true", args);
    cr_assert(strstr(out, "Reused, TLSv1.2"), "%s", out);
    cr_assert_eq(metric(&d, "magpied_tls_resumptions_total"), 2, "%lld",
                 metric(&d, "magpied_tls_resumptions_total"));
    finish(&d);
}

/* RFC 6066 3: a session made for one server name is not resumed under another (nor without
 * one), whether it comes back as a TLS 1.3 ticket, a TLS 1.2 ticket or a TLS 1.2 session ID;
 * the same name, in any case, resumes it. */
Test(tls, a_session_resumes_only_under_its_server_name, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    static const struct {
        const char *opts, *file, *made, *reused;
    } kinds[] = {
        {"-tls1_3", "n13.pem", "New, TLSv1.3", "Reused, TLSv1.3"},
        {"-tls1_2", "n12.pem", "New, TLSv1.2", "Reused, TLSv1.2"},
        {"-tls1_2 -no_ticket", "nid.pem", "New, TLSv1.2", "Reused, TLSv1.2"},
    };
    char args[PKI_DIR_MAX + 200];
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        /* The session is kept once the response has come (a TLS 1.3 ticket arrives after the
         * handshake); the resumptions below end at their handshake (no -ign_eof: stdin's EOF
         * closes them, rather than the client's timeout). */
        snprintf(args, sizeof args, "%s -ign_eof -servername a.example -sess_out '%s/%s'",
                 kinds[i].opts, dir, kinds[i].file);
        char *out = s_client(&d, ASK_AND_CLOSE, args);
        cr_assert(strstr(out, kinds[i].made), "%s", out);
        snprintf(args, sizeof args, "%s -servername b.example -sess_in '%s/%s'", kinds[i].opts, dir,
                 kinds[i].file);
        out = s_client(&d, "true", args);
        cr_assert(strstr(out, kinds[i].made), "another name resumed: %s", out);
        snprintf(args, sizeof args, "%s -noservername -sess_in '%s/%s'", kinds[i].opts, dir,
                 kinds[i].file);
        out = s_client(&d, "true", args);
        cr_assert(strstr(out, kinds[i].made), "no name resumed: %s", out);
        snprintf(args, sizeof args, "%s -servername A.Example -sess_in '%s/%s'", kinds[i].opts, dir,
                 kinds[i].file);
        out = s_client(&d, "true", args);
        cr_assert(strstr(out, kinds[i].reused), "the same name not resumed: %s", out);
    }
    cr_assert_eq(metric(&d, "magpied_tls_resumptions_total"), 3, "%lld",
                 metric(&d, "magpied_tls_resumptions_total"));
    finish(&d);
}

Test(tls, renegotiation_refused, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    /* s_client's "R" line asks for a renegotiation (TLS 1.2). */
    char *out = s_client(&d, "sleep 1; printf 'R\\n'; sleep 1", "-tls1_2");
    cr_assert(strstr(out, "RENEGOTIATING"), "%s", out);
    cr_assert(strstr(out, "no renegotiation"), "%s", out);
    served(&d);
    finish(&d);
}

Test(tls, rsa_and_ecdsa_side_by_side, .timeout = 60)
{
    char extra[PKI_DIR_MAX * 4 + 100];
    setup("certificate2 = @RSA@\ncertificate_key2 = @RSAKEY@");
    /* setup() wrote placeholders: now that dir is known, put the paths in. */
    snprintf(extra, sizeof extra, "sed -i 's|@RSA@|%s/rsa.pem|; s|@RSAKEY@|%s/rsa.key|' '%s'", dir,
             dir, conf);
    cr_assert_eq(system(extra), 0);
    daemon_proc d = start_tls();
    char *out = s_client(&d, "true", "-tls1_2 -sigalgs ECDSA+SHA256");
    cr_assert(strstr(out, "New, TLSv1.2, Cipher is ECDHE-ECDSA-"), "%s", out);
    out = s_client(&d, "true", "-tls1_2 -sigalgs RSA+SHA256:RSA-PSS+SHA256");
    cr_assert(strstr(out, "New, TLSv1.2, Cipher is ECDHE-RSA-"), "%s", out);
    out = s_client(&d, "true", "-sigalgs rsa_pss_rsae_sha256");
    cr_assert(strstr(out, "Server public key is 2048 bit"), "%s", out);
    out = s_client(&d, "true", "-sigalgs ecdsa_secp256r1_sha256");
    cr_assert(strstr(out, "Server public key is 256 bit"), "%s", out);
    /* A DHE suite (the RSA pair) uses RFC 7919's ffdhe2048, not the common group 14. */
    out = s_client(&d, "true", "-tls1_2 -cipher DHE-RSA-AES128-GCM-SHA256 -trace");
    cr_assert(strstr(out, "dh_p (len=256): FFFFFFFFFFFFFFFFADF85458A2BB4A9A"), "%s", out);
    finish(&d);
}

/* prefer_server_ciphers: on (the default) our order picks the suite, AES-128-GCM first, except
 * for a client that lists ChaCha20 first; off, the client's order. */
static void suite_order_checks(bool server_order)
{
    daemon_proc d = start_tls();
    char *out = s_client(&d, "true", "-ciphersuites TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256");
    cr_assert(strstr(out, server_order ? "Cipher is TLS_AES_128_GCM_SHA256"
                                       : "Cipher is TLS_AES_256_GCM_SHA384"),
              "%s", out);
    out = s_client(&d, "true",
                   "-tls1_2 -cipher ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256");
    cr_assert(strstr(out, server_order ? "Cipher is ECDHE-ECDSA-AES128-GCM-SHA256"
                                       : "Cipher is ECDHE-ECDSA-AES256-GCM-SHA384"),
              "%s", out);
    out = s_client(&d, "true", "-ciphersuites TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256");
    cr_assert(strstr(out, "Cipher is TLS_CHACHA20_POLY1305_SHA256"), "%s", out);
    finish(&d);
}

Test(tls, server_order_of_suites_by_default, .timeout = 60)
{
    setup(NULL);
    suite_order_checks(true);
}

Test(tls, client_order_with_prefer_server_ciphers_off, .timeout = 60)
{
    setup("prefer_server_ciphers = off");
    suite_order_checks(false);
}

/* Reads until the peer closes (0), an error (-1), or timeout_ms pass (-2); the first bytes
 * (up to 4095) into first[] when it is given, NUL-terminated. */
static int wait_closed(int fd, int timeout_ms, char *first, size_t *got)
{
    *got = 0;
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) == 0)
            continue;
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            return 0;
        if (n < 0)
            return -1;
        if (*got == 0 && first != NULL) {
            memcpy(first, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
            first[(size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1] = '\0';
        }
        *got += (size_t)n;
    }
    return -2;
}

Test(tls, garbage_instead_of_client_hello, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    /* Plain HTTP on the TLS port (answered in plain HTTP, 400, as nginx does), and bytes that
     * are no record at all (an alert, or nothing). */
    static const struct {
        const char *bytes;
        size_t len;
    } garbage[] = {
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27},
        {"\x16\x03\x01\x00\x05hello-not-a-client-hello", 29},
        {"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 10},
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        int fd = test_connect(d.https);
        test_write_all(fd, garbage[i].bytes, garbage[i].len);
        char first[4096] = "";
        size_t got;
        int rc = wait_closed(fd, 5000, first, &got);
        cr_assert_neq(rc, -2, "garbage %zu: not closed", i);
        if (i == 0)
            cr_assert(strncmp(first, "HTTP/1.1 400 Bad Request\r\n", 26) == 0 &&
                          strstr(first, "\r\n\r\nThis port takes HTTPS") != NULL,
                      "plain HTTP: %s", first);
        else /* an alert record (content type 21), or nothing */
            cr_assert(got == 0 || first[0] == 0x15, "garbage %zu: %zu bytes, first %#x", i, got,
                      (unsigned)(unsigned char)first[0]);
        close(fd);
        served(&d);
    }
    cr_assert_eq(metric(&d, "magpied_tls_handshake_failures_total"), 3, "%lld",
                 metric(&d, "magpied_tls_handshake_failures_total"));
    /* Any method (OpenSSL itself names GET, POST, HEAD and PUT alone), and the empty line RFC
     * 9112 2.2 lets lead a request: the same 400, with Date and Server; HEAD's without its
     * body. */
    static const char *const plain[] = {
        "DELETE / HTTP/1.1\r\nHost: x\r\n\r\n",  "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
        "PATCH / HTTP/1.1\r\nHost: x\r\n\r\n",   "CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n",
        "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        int fd = test_connect(d.https);
        test_write_all(fd, plain[i], strlen(plain[i]));
        char first[4096] = "";
        size_t got;
        cr_assert_neq(wait_closed(fd, 5000, first, &got), -2, "%s: not closed", plain[i]);
        cr_assert(strncmp(first, "HTTP/1.1 400 Bad Request\r\nDate: ", 32) == 0 &&
                      strstr(first, "\r\nServer: magpied\r\n") != NULL,
                  "%s: %s", plain[i], first);
        bool head = strncmp(plain[i], "HEAD", 4) == 0;
        cr_assert_eq(strstr(first, "\r\n\r\nThis port takes HTTPS") != NULL, !head, "%s: %s",
                     plain[i], first);
        close(fd);
    }
    cr_assert_eq(metric(&d, "magpied_tls_handshake_failure_reasons_total{reason=\"http_request\"}"),
                 7);
    served(&d);
    finish(&d);
}

/* A TLS connection turns Nagle off as its handshake begins (tls.c's stream_make): the session
 * tickets leave in a write of their own, and with Nagle on the first response, written right
 * behind them, waited for the client's ACK of them (40 ms from a client that delays its
 * ACKs). Read off the daemon's own socket once it has read a ClientHello's first bytes. */
Test(tls, a_tls_connection_turns_nagle_off, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    int fd = test_connect(d.https);
    test_write_all(fd, "\x16\x03\x01\x00\xf0", 5); /* a record header: the handshake begins */
    int v = -1;
    bool seen = false;
    /* Within the handshake's timeout, which would close the connection. */
    for (int waited = 0; v != 1 && waited < 3000; waited += 20) {
        v = daemon_nodelay(&d, fd); /* -1: not accepted yet */
        seen = seen || v >= 0;
        if (v != 1)
            usleep(20000);
    }
    cr_assert(seen, "the daemon's end of the connection was not found in 3 s");
    cr_assert_eq(v, 1, "TCP_NODELAY is still off on a TLS connection after 3 s");
    close(fd);
    served(&d);
    finish(&d);
}

Test(tls, silent_client_closed_by_handshake_timeout, .timeout = 60)
{
    setup("handshake_timeout_ms = 700");
    daemon_proc d = start_tls();
    int silent[4];
    for (int i = 0; i < 4; i++)
        silent[i] = test_connect(d.https);
    /* Served meanwhile. */
    served(&d);
    for (int i = 0; i < 4; i++) {
        size_t got;
        cr_assert_eq(wait_closed(silent[i], 5000, NULL, &got), 0, "silent %d not closed", i);
        cr_assert_eq(got, 0);
        close(silent[i]);
    }
    /* A client that sends half a ClientHello and stalls: the same deadline. */
    int fd = test_connect(d.https);
    test_write_all(fd, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
    size_t got;
    cr_assert_eq(wait_closed(fd, 5000, NULL, &got), 0);
    close(fd);
    cr_assert_eq(
        metric(&d,
               "magpied_connections_closed_total{listener=\"https\",reason=\"handshake_timeout\"}"),
        5);
    served(&d);
    finish(&d);
}

Test(tls, close_mid_handshake_and_truncation, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    /* Half a ClientHello, then the close. */
    for (int i = 0; i < 3; i++) {
        int fd = test_connect(d.https);
        test_write_all(fd, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
        close(fd);
    }
    /* A client killed after its request, before the response is read: no close_notify. */
    char cmd[PKI_DIR_MAX + 400];
    snprintf(cmd, sizeof cmd,
             "exec 2>/dev/null; (printf 'GET /files/big.bin HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'; "
             "sleep 2) | "
             "timeout -s KILL 1 openssl s_client -quiet -connect 127.0.0.1:%d -CAfile "
             "'%s/ca.pem' >/dev/null 2>&1; true",
             d.https, dir);
    run(cmd);
    /* A client that ends its connection without close_notify between requests. */
    snprintf(cmd, sizeof cmd,
             "exec 2>/dev/null; (printf 'GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'; sleep 1) | "
             "timeout -s KILL 2 openssl s_client -quiet -connect 127.0.0.1:%d -CAfile "
             "'%s/ca.pem' 2>&1; true",
             d.https, dir);
    cr_assert(strstr(run(cmd), "Hello, World!"));
    served(&d);
    for (int waited = 0; waited < 5000; waited += 100) {
        if (metric(&d, "magpied_connections_open{listener=\"https\"}") == 1)
            break; /* the scrape's own */
        usleep(100000);
    }
    cr_assert_eq(metric(&d, "magpied_connections_open{listener=\"https\"}"), 1, "%lld",
                 metric(&d, "magpied_connections_open{listener=\"https\"}"));
    cr_assert_eq(metric(&d, "magpied_tls_handshake_failures_total"), 3, "%lld",
                 metric(&d, "magpied_tls_handshake_failures_total"));
    /* The half handshakes and the killed client: error closes (the last one's may be a
     * clean read of close_notify-less EOF: also an error). */
    long long errors =
        metric(&d, "magpied_connections_closed_total{listener=\"https\",reason=\"error\"}");
    cr_assert_geq(errors, 4, "%lld", errors);
    finish(&d);
}

Test(tls, reload_new_certificate_and_bad_pair_kept_out, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_tls();
    char *out = s_client(&d, "true", "");
    cr_assert(strstr(out, "Server public key is 256 bit"), "%s", out);
    /* The RSA pair in place of the ECDSA one: a reload reads it. */
    char cmd[PKI_DIR_MAX * 3 + 200];
    snprintf(cmd, sizeof cmd, "sed -i 's|/ec.pem|/rsa.pem|; s|/ec.key|/rsa.key|' '%s'", conf);
    cr_assert_eq(system(cmd), 0);
    kill(d.pid, SIGHUP);
    cr_assert(file_has(errlog, "reloaded", 5000));
    out = s_client(&d, "true", "");
    cr_assert(strstr(out, "Server public key is 2048 bit"), "%s", out);
    /* A key that does not match: the reload fails, the RSA pair stays. */
    snprintf(cmd, sizeof cmd, "sed -i 's|/rsa.key|/other.key|' '%s'", conf);
    cr_assert_eq(system(cmd), 0);
    kill(d.pid, SIGHUP);
    cr_assert(file_has(errlog, "keeping the running configuration", 5000));
    cr_assert(file_has(errlog, "certificate_key: ", 100));
    out = s_client(&d, "true", "");
    cr_assert(strstr(out, "Server public key is 2048 bit"), "%s", out);
    served(&d);
    finish(&d);
}

/* `magpied -t -c conf` with [https] pointing at cert and key: exit status, output in out. */
static int check_pair(const char *cert, const char *key, char **out)
{
    char path[PKI_DIR_MAX + 16];
    snprintf(path, sizeof path, "%s/check.conf", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/%s\ncertificate_key = %s/%s\n", dir,
            cert, dir, key);
    fclose(f);
    char exe[PATH_MAX + 32], cmd[PATH_MAX * 2 + 100];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo \"rc=$?\"", exe, path);
    *out = run(cmd);
    return strstr(*out, "rc=0") != NULL ? 0 : 1;
}

Test(tls, check_refuses_bad_pairs, .timeout = 60)
{
    pki_make(dir);
    char *out, want[PKI_DIR_MAX + 100];
    cr_assert_eq(check_pair("ec.pem", "ec.key", &out), 0, "%s", out);
    cr_assert_eq(check_pair("rsa.pem", "rsa.key", &out), 0, "%s", out);
    cr_assert_eq(check_pair("ec.pem", "other.key", &out), 1);
    snprintf(want, sizeof want, "%s/check.conf:4: [https] certificate_key: ", dir);
    cr_assert(strstr(out, want) && strstr(out, "does not match"), "%s", out);
    cr_assert_eq(check_pair("ec.pem", "rsa.key", &out), 1);
    cr_assert(strstr(out, "does not match"), "%s", out);
    cr_assert_eq(check_pair("expired.pem", "ec.key", &out), 1);
    snprintf(want, sizeof want, "%s/check.conf:3: [https] certificate: ", dir);
    cr_assert(strstr(out, want) && strstr(out, "expired"), "%s", out);
    cr_assert_eq(check_pair("future.pem", "ec.key", &out), 1);
    cr_assert(strstr(out, want) && strstr(out, "not valid yet"), "%s", out);
    cr_assert_eq(check_pair("missing.pem", "ec.key", &out), 1);
    cr_assert(strstr(out, want) && strstr(out, "No such file"), "%s", out);
    cr_assert_eq(check_pair("ec.pem", "missing.key", &out), 1);
    cr_assert(strstr(out, "certificate_key: cannot open"), "%s", out);
    cr_assert_eq(check_pair("ec.key", "ec.key", &out), 1);
    cr_assert(strstr(out, "not a PEM certificate chain"), "%s", out);
    pki_remove(dir);
}

/* config/magpied-tls.conf with the test pair in place of its paths: checks and serves. */
Test(tls, shipped_example_serves, .timeout = 60)
{
    pki_make(dir);
    char cert[PKI_DIR_MAX + 40], key[PKI_DIR_MAX + 40];
    snprintf(cert, sizeof cert, "https.certificate=%s/ec.pem", dir);
    snprintf(key, sizeof key, "https.certificate_key=%s/ec.key", dir);
    char exe[PATH_MAX + 32], cmd[PATH_MAX + 400];
    magpied_path(exe, sizeof exe);
    snprintf(cmd, sizeof cmd, "'%s' -t -c config/magpied-tls.conf --set '%s' --set '%s' 2>&1", exe,
             cert, key);
    char *out = run(cmd);
    cr_assert(strstr(out, "is valid"), "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' -t -c config/magpied-tls.conf >/dev/null 2>&1", exe);
    cr_assert_neq(system(cmd), 0, "the example's placeholder paths should not check");
    const char *extra[] = {"--set", cert,
                           "--set", key,
                           "--set", "https.listen=127.0.0.1:0",
                           "--set", "http.listen=127.0.0.1:0",
                           "--set", "runtime.workers=2",
                           NULL};
    daemon_proc d = start_with("config/magpied-tls.conf", extra, NULL);
    cr_assert_gt(d.https, 0);
    served(&d);
    cr_assert_eq(stop(&d), 0);
    pki_remove(dir);
}

/* Half-open handshakes fill the TLS listener's max_connections: the plaintext listener is not
 * locked out, and the TLS one serves again once the handshake timeout frees the slots. */
Test(tls, half_open_handshakes_hold_only_their_listener, .timeout = 60)
{
    setup("max_connections = 2\nhandshake_timeout_ms = 1500");
    daemon_proc d = start_tls();
    int silent[2];
    for (int i = 0; i < 2; i++)
        silent[i] = test_connect(d.https);
    usleep(200000); /* accepted: the listener is at its mark */
    char cmd[PKI_DIR_MAX + 200];
    snprintf(cmd, sizeof cmd, "curl -sS --max-time 2 http://127.0.0.1:%d/", d.http);
    cr_assert_str_eq(run(cmd), "Hello, World!");
    /* A TLS client waits in the backlog until the silent ones time out, then is served. */
    served(&d);
    for (int i = 0; i < 2; i++) {
        size_t got;
        cr_assert_eq(wait_closed(silent[i], 5000, NULL, &got), 0);
        close(silent[i]);
    }
    finish(&d);
}

/* handshake_min_rate: a ClientHello trickled a byte at a time is closed long before
 * handshake_timeout_ms (a minute here), and counted as a handshake timeout. */
Test(tls, trickled_handshake_closed_by_min_rate, .timeout = 60)
{
    setup("handshake_timeout_ms = 60000\nhandshake_min_rate = 100\nhandshake_rate_grace_ms = 500");
    daemon_proc d = start_tls();
    static const char hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
    int fd = test_connect(d.https);
    bool closed = false;
    /* 5 bytes a second, for at most 40 s: under 100 a second, past the grace. */
    for (int i = 0; i < 200 && !closed; i++) {
        if (send(fd, &hello[i % 11], 1, MSG_NOSIGNAL) != 1)
            closed = true;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char b;
        if (!closed && poll(&p, 1, 200) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) <= 0)
            closed = true;
    }
    close(fd);
    cr_assert(closed, "a trickled handshake was not closed by handshake_min_rate");
    cr_assert_eq(
        metric(&d,
               "magpied_connections_closed_total{listener=\"https\",reason=\"handshake_timeout\"}"),
        1);
    served(&d);
    finish(&d);
}

/* Hundreds of half-made handshakes on a listener of 64 connections: the rate's grace frees
 * their slots, and a normal client waiting behind them is served. */
Test(tls, hundreds_of_half_handshakes_do_not_lock_out_a_client, .timeout = 90)
{
    setup("max_connections = 64\nhandshake_timeout_ms = 60000\nhandshake_min_rate = 100\n"
          "handshake_rate_grace_ms = 500");
    daemon_proc d = start_tls();
    enum { N = 300 };
    static int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = test_connect(d.https);
        if (i % 2 == 0) /* half of them send half a ClientHello, then nothing */
            test_write_all(fds[i], "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
    }
    char cmd[PKI_DIR_MAX + 200];
    snprintf(cmd, sizeof cmd, "curl -sS --max-time 40 --cacert '%s/ca.pem' https://127.0.0.1:%d/",
             dir, d.https);
    cr_assert_str_eq(run(cmd), "Hello, World!");
    for (int i = 0; i < N; i++)
        close(fds[i]);
    served(&d);
    finish(&d);
}

/* openssl s_client to port with args; its output. */
static char *s_client_at(int port, const char *args)
{
    char cmd[PKI_DIR_MAX + 600];
    snprintf(cmd, sizeof cmd,
             "(printf 'GET / HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n'; sleep 1) | timeout 10 "
             "openssl s_client -connect 127.0.0.1:%d -CAfile '%s/ca.pem' %s 2>&1",
             port, dir, args);
    return run(cmd);
}

/* A TLS [listener NAME] with a default certificate and strict_sni of its own: its clients get
 * its pair (RSA here, [https]'s is ECDSA), a name no site has gets unrecognized_name there and
 * [https]'s pair on [https]; `magpied -t` names the listener's lines. */
Test(tls, listener_default_certificate_and_strict_sni, .timeout = 60)
{
    char extra[PKI_DIR_MAX * 2 + 200];
    setup(NULL);
    snprintf(extra, sizeof extra,
             "\n[listener other]\nlisten = 127.0.0.1:0\ntls = on\ncertificate = %s/rsa.pem\n"
             "certificate_key = %s/rsa.key\nstrict_sni = on\n[site local]\nnames = localhost\n",
             dir, dir);
    FILE *f = fopen(conf, "a");
    cr_assert_not_null(f);
    fputs(extra, f);
    fclose(f);
    daemon_proc d = start_tls();
    const char *at = strstr(d.line, " other=127.0.0.1:");
    cr_assert_not_null(at, "%s", d.line);
    int other = atoi(at + strlen(" other=127.0.0.1:"));
    /* [https]: the name no site has gets its default pair (and 421: Host names a site). */
    char *out = s_client_at(d.https, "-servername unknown.example");
    cr_assert(strstr(out, "Server public key is 256 bit") && strstr(out, "HTTP/1.1 421"), "%s",
              out);
    out = s_client_at(other, "-servername localhost"); /* a site's name */
    cr_assert(strstr(out, "Server public key is 2048 bit") && strstr(out, "HTTP/1.1 "), "%s", out);
    out = s_client_at(other, "-servername unknown.example");
    cr_assert(strstr(out, "unrecognized name") || strstr(out, "unrecognized_name"), "%s", out);
    cr_assert_null(strstr(out, "Hello, World!"), "%s", out);
    /* /metrics lists the listener's certificate too. */
    char cmd[PATH_MAX * 2 + 100];
    snprintf(cmd, sizeof cmd, "curl -s --cacert '%s/ca.pem' https://127.0.0.1:%d/metrics", dir,
             d.https);
    out = run(cmd);
    cr_assert(strstr(out, "magpied_tls_certificate_expiry_seconds{section=\"listener other\""),
              "%s", out);
    served(&d);
    cr_assert_eq(stop(&d), 0);
    /* -t: a key without its certificate, a certificate that cannot be read, on a plaintext
     * listener. */
    char exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    static const char *const bad[][2] = {
        {"tls = on\ncertificate_key = %s/rsa.key\n",
         "check.conf:5: [listener other] certificate_key: must be set with certificate"},
        {"tls = on\ncertificate = %s/none.pem\ncertificate_key = %s/rsa.key\n",
         "check.conf:8: [listener other] certificate: cannot open"},
        {"certificate = %s/rsa.pem\ncertificate_key = %s/rsa.key\n",
         "check.conf:7: [listener other] certificate: needs tls = on"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[PKI_DIR_MAX + 16], keys[PKI_DIR_MAX * 2 + 200];
        snprintf(path, sizeof path, "%s/check.conf", dir);
        snprintf(keys, sizeof keys, bad[i][0], dir, dir);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fprintf(f,
                "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\ncertificate_key = "
                "%s/ec.key\n[listener other]\nlisten = 127.0.0.1:0\n%s",
                dir, dir, keys);
        fclose(f);
        snprintf(cmd, sizeof cmd, "'%s' -t -c '%s' 2>&1; echo \"rc=$?\"", exe, path);
        out = run(cmd);
        cr_assert(strstr(out, bad[i][1]) && strstr(out, "rc=1"), "%zu: %s", i, out);
    }
    pki_remove(dir);
}
