/* End-to-end tests of HTTP/2 (http/http2.c, server/conn_http.c): the built magpied with h2c on
 * its plaintext listener and h2 by ALPN on [https] (a test PKI, tls_pki.h), driven with curl
 * (--http2-prior-knowledge, --http2), nghttp (many streams at once) and hostile clients in
 * /usr/bin/python3 (tests/daemon/e2e/h2_attack.py: Rapid Reset, PING, SETTINGS, CONTINUATION
 * and empty-DATA floods, frames nghttp2 ignores without a callback, an HPACK bomb, a peer that
 * never reads), each answered with GOAWAY
 * (or 431) while another client is served (the proxy over h2: test_proxy_h2.c); a stream's
 * end in python3-h2 (h2_stream_client.py: RST_STREAM NO_ERROR after an early answer, malformed
 * trailers); static bodies (the open-file cache's kept bytes lent to DATA frames, read ones)
 * whole over h2c and TLS, many at once, through small windows;
 * "Upgrade: h2c" ignored; the access log's
 * HTTP/2.0; GOAWAY at a graceful stop; `magpied -t` on the new keys. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/magpied_harness.h"
#include "daemon/tls_pki.h"
#include "daemon/e2e/h2_site.h"

TestSuite(http2, .fini = kill_leftover);

static char dir[PKI_DIR_MAX];
static char conf[PKI_DIR_MAX + 16];
static char errlog[PKI_DIR_MAX + 16];
static char accesslog[PKI_DIR_MAX + 16];

/* The site (h2_site.h) with the access log on; extra: more sections, appended. */
static void setup(const char *extra)
{
    h2_site(dir, conf, sizeof conf, true, extra);
    snprintf(errlog, sizeof errlog, "%s/err.log", dir);
    snprintf(accesslog, sizeof accesslog, "%s/access.log", dir);
}

static daemon_proc start_h2(void)
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

/* curl over h2c with prior knowledge; args before the URL's path. */
static const char *h2c(const daemon_proc *d, const char *args, const char *path)
{
    char cmd[PKI_DIR_MAX + 600];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && curl -sS --max-time 10 --http2-prior-knowledge %s http://127.0.0.1:%d%s",
             dir, args, d->http, path);
    return run(cmd);
}

/* curl over TLS, ALPN h2 offered. */
static const char *h2s(const daemon_proc *d, const char *args, const char *path)
{
    char cmd[PKI_DIR_MAX + 600];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && curl -sS --max-time 10 --http2 --cacert ca.pem %s https://127.0.0.1:%d%s",
             dir, args, d->https, path);
    return run(cmd);
}

/* A sample's value in /metrics (-1 when absent). */
static long long metric(const daemon_proc *d, const char *series)
{
    const char *out = h2c(d, "", "/metrics");
    char line[300];
    snprintf(line, sizeof line, "\n%s ", series);
    const char *at = strstr(out, line);
    return at != NULL ? atoll(at + strlen(line)) : -1;
}

Test(http2, h2c_routes_bodies_and_the_access_log, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_version} %{http_code}'", "/"), "2 200");
    cr_assert_str_eq(h2c(&d, "", "/"), "Hello, World!");
    cr_assert_str_eq(h2c(&d, "", "/healthz"), "ok");
    const char *redir = h2c(&d, "-o /dev/null -w '%{http_code}'", "/old");
    cr_assert(strstr(redir, "30") == redir, "redirect: %s", redir);
    cr_assert_str_eq(h2c(&d, "", "/files/small.txt"), "small file\n");
    cr_assert_str_eq(h2c(&d, "-r 0-4", "/files/small.txt"), "small");
    cr_assert_str_eq(h2c(&d, "-o big.out -w '%{http_code}'", "/files/big.bin"), "200");
    char cmd[PKI_DIR_MAX + 200];
    snprintf(cmd, sizeof cmd, "cmp '%s/big.out' '%s/www/files/big.bin' && echo same", dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    /* HEAD: the length, no body. */
    const char *head = h2c(&d, "-I", "/files/big.bin");
    cr_assert(strstr(head, "HTTP/2 200") && strstr(head, "content-length: 1048576"), "%s", head);
    /* A body both ways, larger than every window: echoed whole. */
    cr_assert_str_eq(h2c(&d, "--data-binary @body.bin -o echo.out -w '%{http_code}'", "/echo"),
                     "200");
    snprintf(cmd, sizeof cmd, "cmp '%s/echo.out' '%s/body.bin' && echo same", dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    cr_assert_str_eq(h2c(&d, "--data-binary abc", "/echo"), "abc");
    /* 404 and 405 keep the connection. */
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_code}'", "/nope"), "404");
    cr_assert_str_eq(h2c(&d, "-o /dev/null -w '%{http_code}' -X DELETE", "/"), "405");
    cr_assert_gt(metric(&d, "magpied_http2_streams_total"), 10);
    cr_assert(file_has(accesslog, "\"GET /files/small.txt HTTP/2.0\" 200 11", 3000));
    cr_assert(file_has(accesslog, "\"POST /echo HTTP/2.0\" 200 300000", 3000));
    finish(&d);
}

/* HTTP/2 turns Nagle off when it begins (conn_http.c's h2_start): frames of many streams
 * interleave, and a small one written behind an unacknowledged write would wait for the
 * peer's delayed ACK. Read off the daemon's own socket. */
Test(http2, an_h2_connection_turns_nagle_off, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    int fd = test_connect(d.http);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\0\0\0\4\0\0\0\0\0"; /* and an empty SETTINGS */
    test_write_all(fd, preface, sizeof preface - 1);
    char buf[64];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 5000), 1, "no SETTINGS from the server");
    cr_assert_geq(recv(fd, buf, sizeof buf, 0), 9, "no frame from the server");
    cr_assert_eq(buf[3], 4, "the server's first frame is its SETTINGS");
    int v = daemon_nodelay(&d, fd);
    cr_assert_geq(v, 0, "the daemon's end of the connection was not found");
    cr_assert_eq(v, 1, "TCP_NODELAY is off on an HTTP/2 connection");
    close(fd);
    finish(&d);
}

Test(http2, many_streams_at_once_with_nghttp, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    char cmd[PKI_DIR_MAX + 400];
    /* 100 requests over one connection, all in flight together: big files and small. */
    snprintf(cmd, sizeof cmd,
             "timeout 20 nghttp -ns -m 50 http://127.0.0.1:%d/files/big.bin "
             "http://127.0.0.1:%d/ 2>&1 | grep -c ' 200 '",
             d.http, d.http);
    const char *n = run(cmd);
    cr_assert_eq(atoi(n), 100, "%s", n);
    snprintf(
        cmd, sizeof cmd,
        "timeout 20 nghttp -ns -m 20 https://127.0.0.1:%d/files/big.bin 2>&1 | grep -c ' 200 '",
        d.https);
    cr_assert_eq(atoi(run(cmd)), 20);
    finish(&d);
}

/* Whether the file fetched into dir/name is www/files/file, byte for byte. */
static bool same_file(const char *name, const char *file)
{
    char cmd[PKI_DIR_MAX * 2 + 200];
    snprintf(cmd, sizeof cmd, "cmp '%s/%s' '%s/www/files/%s' && echo same", dir, name, dir, file);
    return strcmp(run(cmd), "same\n") == 0;
}

/* The static handler's bodies over HTTP/2 go from the open-file cache's kept bytes (64k.bin:
 * [static] open_file_cache_bytes_max, 64 KiB by default) or from reads (big.bin), into DATA
 * frames: whole and in order over h2c and TLS, twice each (the first response reads the bytes
 * the cache keeps), a range of them, and through a client's 1023-byte stream windows. */
Test(http2, static_bodies_whole_over_h2c_and_tls, .timeout = 90)
{
    setup(NULL);
    daemon_proc d = start_h2();
    const char *files[] = {"64k.bin", "big.bin", "f1.bin", "f8.bin"};
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            char path[64];
            snprintf(path, sizeof path, "/files/%s", files[i]);
            cr_assert_str_eq(h2c(&d, "-o got.h2c -w '%{http_version} %{http_code}'", path),
                             "2 200");
            cr_assert(same_file("got.h2c", files[i]), "h2c %s, round %d", files[i], round);
            cr_assert_str_eq(h2s(&d, "-o got.tls -w '%{http_version} %{http_code}'", path),
                             "2 200");
            cr_assert(same_file("got.tls", files[i]), "TLS %s, round %d", files[i], round);
        }
    }
    /* A range of the kept bytes. */
    cr_assert_str_eq(h2c(&d, "-r 1000-60999 -o range.out -w '%{http_code}'", "/files/64k.bin"),
                     "206");
    char cmd[PKI_DIR_MAX * 2 + 300];
    snprintf(cmd, sizeof cmd,
             "tail -c +1001 '%s/www/files/64k.bin' | head -c 60000 | cmp - '%s/range.out' && "
             "echo same",
             dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    /* A reader with 1023-byte stream windows and a 16 KiB connection window. */
    snprintf(cmd, sizeof cmd,
             "timeout 20 nghttp -w 10 -W 14 http://127.0.0.1:%d/files/64k.bin > '%s/w.out' && "
             "cmp '%s/w.out' '%s/www/files/64k.bin' && echo same",
             d.http, dir, dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    snprintf(cmd, sizeof cmd,
             "timeout 20 nghttp -w 12 https://127.0.0.1:%d/files/64k.bin > '%s/w.out' && "
             "cmp '%s/w.out' '%s/www/files/64k.bin' && echo same",
             d.https, dir, dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    finish(&d);
}

/* Many streams of different files at once on one connection (h2_stream_client.py fetch), each
 * compared byte for byte: a frame never carries another stream's bytes, nor skips any; with
 * the client's default stream window and with 4 KiB ones, some streams reset by the client
 * after their first DATA (their lent bytes dropped), and the connection goes on after. */
Test(http2, many_files_at_once_byte_for_byte, .timeout = 90)
{
    setup(NULL);
    daemon_proc d = start_h2();
    static const char *const paths =
        "/files/f1.bin /files/f2.bin /files/f3.bin /files/f4.bin /files/f5.bin /files/f6.bin "
        "/files/f7.bin /files/f8.bin /files/64k.bin /files/64k.bin '!/files/64k.bin' "
        "/files/f8.bin /files/64k.bin /files/big.bin '!/files/big.bin' /files/f2.bin";
    for (int tls = 0; tls < 2; tls++) {
        for (int small = 0; small < 2; small++) {
            char cmd[PKI_DIR_MAX * 3 + 900];
            char ca[PKI_DIR_MAX + 16];
            snprintf(ca, sizeof ca, "%s/ca.pem", dir);
            snprintf(cmd, sizeof cmd,
                     "timeout 30 /usr/bin/python3 tests/daemon/e2e/h2_stream_client.py %d fetch "
                     "%d %s '%s/www' %s",
                     tls ? d.https : d.http, small ? 4096 : 65535, tls ? ca : "-", dir, paths);
            const char *out = run(cmd);
            cr_assert_str_eq(out, "same 15\nreset 2\n", "tls %d, small windows %d: %s", tls, small,
                             out);
        }
    }
    finish(&d);
}

/* Over TLS a burst of DATA is written in full records (16 KiB of plaintext), each batch's
 * tail held back for the next: a 1 MiB body came with a short record per 64 KiB batch (19 short
 * records in all), where four (two session tickets, the settings and head, the body's end) are
 * all the connection needs. */
Test(http2, a_burst_over_tls_goes_in_full_records, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    char cmd[PKI_DIR_MAX + 300];
    snprintf(cmd, sizeof cmd,
             "timeout 20 /usr/bin/python3 tests/daemon/e2e/h2_stream_client.py %d records "
             "'%s/ca.pem' /files/big.bin",
             d.https, dir);
    const char *out = run(cmd);
    unsigned records = 0, shorts = 99;
    cr_assert_eq(sscanf(out, "body 1048576\nrecords %u short %u", &records, &shorts), 2, "%s", out);
    cr_assert_leq(shorts, 4, "%s", out);
    finish(&d);
}

Test(http2, alpn_h2_over_tls_and_http11_still_served, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    cr_assert_str_eq(h2s(&d, "-o /dev/null -w '%{http_version} %{http_code}'", "/"), "2 200");
    cr_assert_str_eq(h2s(&d, "--http1.1 -o /dev/null -w '%{http_version}'", "/"), "1.1");
    cr_assert_str_eq(h2s(&d, "-o big.out -w '%{http_code}'", "/files/big.bin"), "200");
    char cmd[PKI_DIR_MAX + 200];
    snprintf(cmd, sizeof cmd, "cmp '%s/big.out' '%s/www/files/big.bin' && echo same", dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    cr_assert_str_eq(h2s(&d, "--data-binary @body.bin -o echo.out -w '%{http_code}'", "/echo"),
                     "200");
    snprintf(cmd, sizeof cmd, "cmp '%s/echo.out' '%s/body.bin' && echo same", dir, dir);
    cr_assert_str_eq(run(cmd), "same\n");
    /* Plaintext without prior knowledge: HTTP/1.1, and "Upgrade: h2c" is ignored. */
    snprintf(cmd, sizeof cmd,
             "curl -sS --max-time 10 --http2 -o /dev/null -w '%%{http_version}' "
             "http://127.0.0.1:%d/",
             d.http);
    cr_assert_str_eq(run(cmd), "1.1");
    finish(&d);
}

Test(http2, http2_off_keeps_http11, .timeout = 60)
{
    setup("[limits]\nhttp2_max_concurrent_streams = 10\n");
    /* [https] http2 = off: ALPN offers http/1.1 only; [http] http2 = off: no h2c. */
    char cmd[PKI_DIR_MAX * 2 + 200];
    snprintf(cmd, sizeof cmd,
             "sed -i 's/^http2 = on$/http2 = off/; s/^\\[https\\]$/[https]\\nhttp2 = off/' '%s'",
             conf);
    cr_assert_eq(system(cmd), 0);
    daemon_proc d = start_h2();
    cr_assert_str_eq(h2s(&d, "-o /dev/null -w '%{http_version}'", "/"), "1.1");
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 10 --http2-prior-knowledge -o /dev/null -w '%%{http_code}' "
             "http://127.0.0.1:%d/; true",
             d.http);
    const char *out = run(cmd);
    cr_assert_neq(strcmp(out, "200"), 0, "h2c is off: %s", out);
    finish(&d);
}

/* An attack by h2_attack.py in the background, a normal client served meanwhile, and the
 * attack's verdict. */
static void attack(const daemon_proc *d, const char *mode, const char *expect)
{
    char cmd[PKI_DIR_MAX + 300];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && (timeout 30 /usr/bin/python3 %s/tests/daemon/e2e/h2_attack.py %d %s "
             "> attack.%s 2>&1 &)",
             dir, getenv("PWD") != NULL ? getenv("PWD") : ".", d->http, mode, mode);
    cr_assert_eq(system(cmd), 0);
    cr_assert_str_eq(h2c(d, "", "/"), "Hello, World!", "served during %s", mode);
    cr_assert_str_eq(h2s(d, "", "/"), "Hello, World!");
    char path[PKI_DIR_MAX + 64];
    snprintf(path, sizeof path, "%s/attack.%s", dir, mode);
    cr_assert(file_has(path, expect, 25000), "%s: %s", mode, expect);
}

Test(http2, floods_end_with_goaway_while_others_are_served, .timeout = 120)
{
    setup(NULL);
    daemon_proc d = start_h2();
    attack(&d, "rapid_reset", "goaway");
    attack(&d, "ping_flood", "goaway 11");
    attack(&d, "settings_flood", "goaway 11");
    attack(&d, "continuation", "goaway");
    attack(&d, "empty_data", "goaway 11");
    attack(&d, "hpack_bomb", "status 431");
    /* Frames nghttp2 ignores without a callback count all the same. */
    attack(&d, "padded_data", "goaway 11");
    attack(&d, "unknown_type", "goaway 11");
    attack(&d, "closed_data", "goaway 11");
    attack(&d, "closed_priority", "goaway 11");
    attack(&d, "closed_headers", "goaway 11");
    cr_assert_geq(metric(&d, "magpied_http2_refused_total"), 10);
    cr_assert_str_eq(h2c(&d, "", "/"), "Hello, World!");
    finish(&d);
}

/* h2_stream_client.py's verdict on a mode against d. */
static const char *stream_client(const daemon_proc *d, const char *args)
{
    char cmd[PKI_DIR_MAX + 300];
    snprintf(cmd, sizeof cmd,
             "timeout 20 /usr/bin/python3 %s/tests/daemon/e2e/h2_stream_client.py %d %s",
             getenv("PWD") != NULL ? getenv("PWD") : ".", d->http, args);
    return run(cmd);
}

/* A connection quiet for over a second gives nghttp2's frame buffer back (its pages zeroed) and
 * serves on: each GET after a silence is answered whole. */
Test(http2, a_connection_quiet_for_a_while_serves_on, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    cr_assert_str_eq(stream_client(&d, "quiet 1.3 3"),
                     "got 200 Hello, World!\ngot 200 Hello, World!\ngot 200 Hello, World!\n");
    cr_assert_geq(metric(&d, "magpied_http2_quiet_releases_total"), 2, "released in each silence");
    finish(&d);
}

/* Expect: 100-continue over HTTP/2 (RFC 9110 10.1.1): a client that holds its body back gets
 * a 100 (HEADERS without END_STREAM) once nothing refuses the request, or the refusal at once;
 * another expectation is a 417. */
Test(http2, expect_100_continue_gets_its_interim_answer, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    const char *out = stream_client(&d, "expect /echo 100-continue");
    cr_assert_str_eq(out, "interim 100\nfinal 200 hello\n", "%s", out);
    out = stream_client(&d, "expect /echo 100-Continue");
    cr_assert_str_eq(out, "interim 100\nfinal 200 hello\n", "%s", out);
    out = stream_client(&d, "expect /nothere 100-continue");
    cr_assert(strncmp(out, "final 404 ", 10) == 0, "%s", out);
    out = stream_client(&d, "expect /echo something-else");
    cr_assert(strncmp(out, "final 417 ", 10) == 0, "%s", out);
    finish(&d);
}

/* A response complete before the request body (a refusal at the head, a 413 by its
 * Content-Length): no RST_STREAM follows (curl 7.88 may lose the response to one), the DATA
 * the client sends on is dropped and credited back to the connection's window (24 rounds of
 * 64 KiB outrun its 1 MiB were it not), and the connection serves on. */
Test(http2, an_early_answer_drops_the_rest_of_the_body, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    const char *out = stream_client(&d, "early /nothere - 24");
    cr_assert_str_eq(out, "status 404\nreset none\ndropped over 1 MiB\nsecond 200 Hello, World!\n",
                     "%s", out);
    out = stream_client(&d, "early /echo 10000000 24");
    cr_assert_str_eq(out, "status 413\nreset none\ndropped over 1 MiB\nsecond 200 Hello, World!\n",
                     "%s", out);
    cr_assert_eq(metric(&d, "magpied_http2_refused_total"), 0, "no protocol error counted");
    finish(&d);
}

/* Malformed trailers are a stream error (RFC 9113 8.1, 8.3): a pseudo-header in them, or
 * trailers without END_STREAM, reset that stream with PROTOCOL_ERROR; the connection goes on. */
Test(http2, malformed_trailers_reset_the_stream, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    const char *out = stream_client(&d, "bad_trailers");
    cr_assert_str_eq(out, "rst1 1\nrst3 1\nstatus5 200\n", "%s", out);
    finish(&d);
}

/* In the background, h2_attack.py's no_read: 50 requests for a 1 MiB file with every window
 * open, none read, the connection held for hold_s seconds. */
static void no_reader(const daemon_proc *d, int hold_s)
{
    char cmd[PKI_DIR_MAX + 300];
    snprintf(cmd, sizeof cmd,
             "(timeout 30 /usr/bin/python3 tests/daemon/e2e/h2_attack.py %d no_read %d > /dev/null "
             "2>&1 &)",
             d->http, hold_s);
    cr_assert_eq(system(cmd), 0);
}

/* What the kernel holds unsent for an HTTP/2 connection whose peer does not read stays near
 * MD_CONN_UNSENT_MAX (TCP_NOTSENT_LOWAT; conn.h), one write batch (64 KiB) over it at most,
 * where the autotuned send buffer alone let it reach megabytes (4,063,232 bytes on loopback
 * before): a stream's next frames wait behind that much, and no more. `ss -ti` reads the
 * server side's queue ("notsent:" shows only while some is queued). */
Test(http2, a_peer_that_does_not_read_leaves_little_unsent, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    no_reader(&d, 5);
    char cmd[PKI_DIR_MAX + 300];
    long most = 0;
    for (int i = 0; i < 30; i++) {
        usleep(100000);
        snprintf(cmd, sizeof cmd,
                 "ss -tinH state established '( sport = :%d )' | grep -o 'notsent:[0-9]*' "
                 "| cut -d: -f2 | sort -n | tail -1",
                 d.http);
        long n = strtol(run(cmd), NULL, 10);
        if (n > most)
            most = n;
    }
    cr_assert_gt(most, 0, "the queue never filled: the test shows nothing");
    enum { UNSENT_MAX = 65536 }; /* conn.h's MD_CONN_UNSENT_MAX */
    cr_assert_leq(most, UNSENT_MAX + 65536 + 16384, "notsent:%ld", most);
    cr_assert_str_eq(h2c(&d, "", "/"), "Hello, World!");
    finish(&d);
}

Test(http2, peer_that_never_reads_hits_the_send_limits, .timeout = 60)
{
    setup("[limits]\nsend_timeout_ms = 1000\nmin_rate_grace_ms = 500\n");
    daemon_proc d = start_h2();
    /* The server's writes block on the socket and the send limits close the connection. */
    no_reader(&d, 6);
    cr_assert_str_eq(h2c(&d, "", "/"), "Hello, World!");
    long long closed = 0;
    for (int i = 0; i < 100 && closed < 1; i++) {
        closed = metric(&d, "magpied_connections_closed_total{listener=\"http\",reason=\"send_"
                            "timeout\"}") +
                 metric(&d, "magpied_connections_closed_total{listener=\"http\",reason=\"min_"
                            "send_rate\"}");
        if (closed < 1)
            usleep(100000);
    }
    cr_assert_geq(closed, 1, "the reader that never reads was closed by the send limits");
    finish(&d);
}

Test(http2, graceful_stop_sends_goaway, .timeout = 60)
{
    setup(NULL);
    daemon_proc d = start_h2();
    char cmd[PKI_DIR_MAX + 300];
    /* nghttp keeps its connection open for a second after its response (-w is not a wait:
     * a second request of a slow file holds it); SIGTERM while it is open. */
    snprintf(cmd, sizeof cmd,
             "(timeout 10 nghttp -nv http://127.0.0.1:%d/ http://127.0.0.1:%d/files/big.bin "
             "> '%s/nghttp.out' 2>&1 &) ; sleep 0.3; kill -TERM %d",
             d.http, d.http, dir, (int)d.pid);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(wait_exit(&d, 15000), 0);
    running = -1;
    char path[PKI_DIR_MAX + 64];
    snprintf(path, sizeof path, "%s/nghttp.out", dir);
    /* Either the requests were answered before the stop, or a GOAWAY said where it stopped. */
    cr_assert(file_has(path, "GOAWAY", 5000) || file_has(path, ":status: 200", 100),
              "no answer and no GOAWAY");
    pki_remove(dir);
}

Test(http2, check_mode_knows_the_keys, .timeout = 30)
{
    char exe[PATH_MAX + 32];
    magpied_path(exe, sizeof exe);
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd, "%s -t -c config/magpied.conf --set http.http2=on 2>&1", exe);
    cr_assert(strstr(run(cmd), "valid"));
    snprintf(cmd, sizeof cmd, "%s -t -c config/magpied.conf --set https.http2=sometimes 2>&1; true",
             exe);
    cr_assert(strstr(run(cmd), "[https] http2: expected on"), "%s", run(cmd));
    snprintf(cmd, sizeof cmd,
             "%s -t -c config/magpied.conf --set limits.http2_max_concurrent_streams=0 2>&1; true",
             exe);
    cr_assert(strstr(run(cmd), "http2_max_concurrent_streams: expected an integer in 1..1000"));
    snprintf(cmd, sizeof cmd,
             "%s -t -c config/magpied.conf --set limits.http2_window=100 2>&1; true", exe);
    cr_assert(strstr(run(cmd), "http2_window: expected an integer in 65535..16777216"));
}

/* The filters around a handler work over HTTP/2 as over HTTP/1.1: basic auth (Authorization
 * kept from the HEADERS frame), header rules, the real client address behind a trusted
 * balancer, and a rate limit with its Retry-After. */
Test(http2, route_filters_over_h2, .timeout = 60)
{
    char extra[1024];
    char users[64];
    snprintf(users, sizeof users, "/tmp/magpied-h2-users-%d", (int)getpid());
    FILE *u = fopen(users, "w");
    cr_assert_not_null(u);
    /* bob:pw, sha512-crypt (openssl passwd -6 -salt saltsalt pw) */
    fputs("bob:$6$saltsalt$pauPrmdmG4BTE9h2HPmywiw152IFch6BJCEsaY6D.PLTfpV8sqvXwWdyfsgVgozkYH9B80"
          "bAip/08R2BPH2xk/\n",
          u);
    fclose(u);
    snprintf(extra, sizeof extra,
             "[route = /private]\nhandler = text\nbody = secret\nauth_basic = staff\n"
             "auth_basic_user_file = %s\nheader_add = X-Frame-Options: DENY\n"
             "[route = /limited]\nhandler = text\nbody = ok\nlimit_rate = 1/m\nlimit_burst = 0\n"
             "real_ip_from = 127.0.0.1\nreal_ip_header = X-Forwarded-For\n",
             users);
    setup(extra);
    daemon_proc d = start_h2();
    const char *r = h2c(&d, "-s -o /dev/null -D - ", "/private");
    cr_assert(strstr(r, "HTTP/2 401") && strstr(r, "www-authenticate: Basic realm=\"staff\""), "%s",
              r);
    cr_assert_str_eq(h2c(&d, "-u bob:pw", "/private"), "secret");
    r = h2c(&d, "-u bob:pw -s -o /dev/null -D - ", "/private");
    cr_assert(strstr(r, "x-frame-options: DENY"), "%s", r);
    cr_assert_str_eq(h2c(&d, "-u bob:nope -o /dev/null -w '%{http_code}'", "/private"), "401");
    /* One request a minute per client, the client named by the trusted peer. */
    cr_assert_str_eq(h2c(&d, "-H 'X-Forwarded-For: 192.0.2.1'", "/limited"), "ok");
    r = h2c(&d, "-H 'X-Forwarded-For: 192.0.2.1' -s -o /dev/null -D - ", "/limited");
    cr_assert(strstr(r, "HTTP/2 429") && strstr(r, "retry-after: "), "%s", r);
    cr_assert_str_eq(h2c(&d, "-H 'X-Forwarded-For: 192.0.2.2'", "/limited"), "ok");
    finish(&d);
    unlink(users);
}
