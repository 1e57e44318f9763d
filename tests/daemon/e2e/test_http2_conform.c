/* HTTP/2 conformance (RFC 9113, RFC 7541): tests/daemon/e2e/h2_conform.py's cases, modelled on
 * h2spec's (frames, stream states and ids, SETTINGS, flow control, CONTINUATION, malformed
 * requests, HPACK's errors) and a few defences (floods answered with GOAWAY while another client
 * is served), against the built magpied: over h2c by prior knowledge, with POSTs refused at
 * their head (405), taken by a handler (echo) or by the proxy (fields kept, lower limits), and
 * over TLS with ALPN h2. Every case must pass; the script's output names the ones that did
 * not. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/magpied_harness.h"
#include "daemon/tls_pki.h"
#include "daemon/e2e/h2_site.h"

TestSuite(http2_conform, .fini = kill_leftover);

static char dir[PKI_DIR_MAX];
static char conf[PKI_DIR_MAX + 16];

/* magpied serving the site (h2_site.h); extra: more sections, appended. */
static daemon_proc start_conform(const char *extra)
{
    h2_site(dir, conf, sizeof conf, false, extra);
    daemon_proc d = start_with(conf, NULL, NULL);
    cr_assert_gt(d.http, 0);
    cr_assert_gt(d.https, 0);
    return d;
}

/* The script against port (TLS when ca), its output checked for a failure and its summary. */
static void conform(int port, const char *args)
{
    char cmd[PKI_DIR_MAX + 400];
    snprintf(cmd, sizeof cmd,
             "timeout 200 /usr/bin/python3 tests/daemon/e2e/h2_conform.py %d --big /files/big.bin "
             "%s 2>&1; echo \"exit $?\"",
             port, args);
    const char *out = run(cmd);
    cr_assert(strstr(out, "FAIL") == NULL, "%s", out);
    cr_assert(strstr(out, " 0 failed\nexit 0\n") != NULL, "%s", out);
    cr_assert(strstr(out, "PASS http2/6.5.2.2") != NULL, "the cases ran: %s", out);
}

Test(http2_conform, h2c_posts_refused_at_the_head, .timeout = 240)
{
    daemon_proc d = start_conform(NULL);
    conform(d.http, "");
    cr_assert_eq(stop(&d), 0);
    pki_remove(dir);
}

Test(http2_conform, h2c_posts_taken_by_a_handler, .timeout = 240)
{
    daemon_proc d = start_conform(NULL);
    conform(d.http, "--post-path /echo");
    cr_assert_eq(stop(&d), 0);
    pki_remove(dir);
}

/* Over TLS, GETs of a file the open-file cache keeps (its bytes lent to DATA frames). */
Test(http2_conform, tls_alpn_h2, .timeout = 240)
{
    daemon_proc d = start_conform(NULL);
    char args[PKI_DIR_MAX + 64];
    snprintf(args, sizeof args, "--ca '%s/ca.pem' --path /files/64k.bin", dir);
    conform(d.https, args);
    cr_assert_eq(stop(&d), 0);
    pki_remove(dir);
}

/* Lower limits (3 streams at once, an 8 KiB header list) and a proxy route, whose handler has
 * the request's fields kept (a dead upstream: its POSTs get 502); GETs of a small file. */
Test(http2_conform, h2c_with_limits_and_kept_fields, .timeout = 240)
{
    daemon_proc d = start_conform("[limits]\nhttp2_max_concurrent_streams = 3\n"
                                  "max_header_bytes = 8192\n"
                                  "[upstream app]\nserver = 127.0.0.1:1\n"
                                  "[route /app]\nhandler = proxy\nupstream = app\n");
    conform(d.http, "--post-path /app --path /files/small.txt");
    cr_assert_eq(stop(&d), 0);
    pki_remove(dir);
}
