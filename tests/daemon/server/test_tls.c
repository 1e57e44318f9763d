/* Tests of server/tls.c's configuration side: the [https] keys (through the INI file and
 * --set, as config.c hands them over), the defaults, and the checks that `magpied -t` runs on
 * a certificate and key, with messages naming file, line and key. The transport is tested
 * end to end (e2e/test_tls.c). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/tls_pki.h"
#include "server/config.h"
#include "server/conn.h"
#include "server/tls.h"

TestSuite(tls);

static char dir[PKI_DIR_MAX];

static int parse(md_config *c, const char *text, md_error *err)
{
    md_config_init(c);
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    cr_assert_not_null(f);
    int rc = md_config_parse_file(c, f, "t.conf", err);
    fclose(f);
    return rc;
}

Test(tls, defaults_are_the_intermediate_profile)
{
    md_tls_config t;
    md_tls_config_init(&t);
    cr_assert(strstr(t.ciphers, "ECDHE-ECDSA-AES128-GCM-SHA256"));
    cr_assert_null(strstr(t.ciphers, "CBC"));
    cr_assert(strstr(t.ciphersuites, "TLS_AES_128_GCM_SHA256"));
    cr_assert_str_eq(t.groups, "X25519:prime256v1:secp384r1");
    cr_assert(t.session_tickets);
    cr_assert_gt(t.session_cache, 0);
    cr_assert_gt(t.handshake_timeout_ms, 0);
    cr_assert_eq(t.handshake_min_rate, 128);
    cr_assert_eq(t.handshake_rate_grace_ms, 3000);
    cr_assert_eq(t.cert[0][0], '\0');
    /* Off by default: a file without [https] checks without any certificate. */
    md_config c;
    md_error err;
    md_config_init(&c);
    cr_assert_not(c.listeners[MD_LISTENER_HTTPS].listen[0].enabled);
    cr_assert_eq(md_config_check(&c, &err), 0, "%s", err.msg);
}

Test(tls, keys_parsed_and_refused)
{
    md_config c;
    md_error err;
    cr_assert_eq(parse(&c,
                       "[https]\nlisten = 127.0.0.1:8443\nmax_connections = 7\n"
                       "certificate = /a.pem\ncertificate_key = /a.key\n"
                       "session_tickets = off\nsession_cache = 0\nhandshake_timeout_ms = 250\n"
                       "groups = X25519\n",
                       &err),
                 0, "%s", err.msg);
    cr_assert(c.listeners[MD_LISTENER_HTTPS].listen[0].enabled);
    cr_assert_eq(c.listeners[MD_LISTENER_HTTPS].listen[0].port, 8443);
    cr_assert_eq(c.listeners[MD_LISTENER_HTTPS].max_connections, 7);
    cr_assert_str_eq(c.tls.cert[0], "/a.pem");
    cr_assert_str_eq(c.tls.key[0], "/a.key");
    cr_assert_not(c.tls.session_tickets);
    cr_assert_eq(c.tls.session_cache, 0);
    cr_assert_eq(c.tls.handshake_timeout_ms, 250);
    cr_assert_str_eq(c.tls.groups, "X25519");

    cr_assert_neq(parse(&c, "[https]\nsession_tickets = maybe\n", &err), 0);
    cr_assert(strstr(err.msg, "t.conf:2: [https] session_tickets: expected"), "%s", err.msg);
    cr_assert_eq(
        parse(&c, "[https]\nhandshake_min_rate = 0\nhandshake_rate_grace_ms = 250\n", &err), 0,
        "%s", err.msg);
    cr_assert_eq(c.tls.handshake_min_rate, 0);
    cr_assert_eq(c.tls.handshake_rate_grace_ms, 250);
    cr_assert_neq(parse(&c, "[https]\nhandshake_min_rate = -1\n", &err), 0);
    cr_assert(strstr(err.msg, "t.conf:2: [https] handshake_min_rate: expected an integer"), "%s",
              err.msg);
    cr_assert_neq(parse(&c, "[https]\nhandshake_rate_grace_ms = 3600001\n", &err), 0);
    cr_assert(strstr(err.msg, "t.conf:2: [https] handshake_rate_grace_ms:"), "%s", err.msg);
    cr_assert_neq(parse(&c, "[https]\nhandshake_timeout_ms = 0\n", &err), 0);
    cr_assert(strstr(err.msg, "t.conf:2: [https] handshake_timeout_ms:"), "%s", err.msg);
    cr_assert_neq(parse(&c, "[https]\ncertificat = /a.pem\n", &err), 0);
    cr_assert(strstr(err.msg, "t.conf:2: [https] certificat: unknown key"), "%s", err.msg);
    cr_assert_neq(parse(&c, "[https]\ncertificate = /a\n\ncertificate = /b\n", &err), 0);
    cr_assert(strstr(err.msg, "t.conf:4: [https] certificate: set twice (first on line 2)"), "%s",
              err.msg);
    cr_assert_neq(parse(&c, "[https]\nciphers =\n", &err), 0);
    cr_assert(strstr(err.msg, "[https] ciphers: expected a list"), "%s", err.msg);

    /* --set: the same keys, the same words. */
    md_config_init(&c);
    cr_assert_eq(md_config_set(&c, "https.certificate=/x.pem", &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.tls.cert[0], "/x.pem");
    cr_assert_eq(md_config_set(&c, "https.certificate=/y.pem", &err), 0, "%s", err.msg);
    cr_assert_str_eq(c.tls.cert[0], "/y.pem");
    cr_assert_neq(md_config_set(&c, "https.nope=1", &err), 0);
    cr_assert_str_eq(err.msg, "--set: [https] nope: unknown key");
    cr_assert_neq(md_config_set(&c, "https.session_cache=x", &err), 0);
    cr_assert(strstr(err.msg, "--set: [https] session_cache: expected an integer"), "%s", err.msg);
}

/* A configuration with [https] on and the given pair (file names in the test PKI). */
static int check(const char *extra, md_error *err)
{
    char text[1024];
    snprintf(text, sizeof text, "[https]\nlisten = 127.0.0.1:0\n%s\n", extra);
    md_config c;
    int rc = parse(&c, text, err);
    cr_assert_eq(rc, 0, "%s", err->msg);
    return md_config_check(&c, err);
}

Test(tls, check_names_file_line_and_key, .timeout = 60)
{
    pki_make(dir);
    char extra[512];
    md_error err;
#define PAIR(cert, key)                                                                            \
    (snprintf(extra, sizeof extra, "certificate = %s/%s\ncertificate_key = %s/%s", dir, cert, dir, \
              key),                                                                                \
     extra)
    cr_assert_eq(check(PAIR("ec.pem", "ec.key"), &err), 0, "%s", err.msg);
    cr_assert_eq(check(PAIR("rsa.pem", "rsa.key"), &err), 0, "%s", err.msg);

    cr_assert_neq(check(PAIR("ec.pem", "other.key"), &err), 0);
    cr_assert(strstr(err.msg, "t.conf:4: [https] certificate_key: ") &&
                  strstr(err.msg, "does not match"),
              "%s", err.msg);
    cr_assert_neq(check(PAIR("expired.pem", "ec.key"), &err), 0);
    cr_assert(strstr(err.msg, "t.conf:3: [https] certificate: ") && strstr(err.msg, "expired"),
              "%s", err.msg);
    cr_assert_neq(check(PAIR("future.pem", "ec.key"), &err), 0);
    cr_assert(strstr(err.msg, "t.conf:3: [https] certificate: ") &&
                  strstr(err.msg, "not valid yet"),
              "%s", err.msg);
    cr_assert_neq(check(PAIR("none.pem", "ec.key"), &err), 0);
    cr_assert(strstr(err.msg, "t.conf:3: [https] certificate: cannot open ") &&
                  strstr(err.msg, "No such file"),
              "%s", err.msg);
    cr_assert_neq(check(PAIR("ec.pem", "none.key"), &err), 0);
    cr_assert(strstr(err.msg, "t.conf:4: [https] certificate_key: cannot open"), "%s", err.msg);
    cr_assert_neq(check(PAIR("ca.key", "ec.key"), &err), 0);
    cr_assert(strstr(err.msg, "not a PEM certificate chain"), "%s", err.msg);

    /* No certificate at all, with the listener on. */
    cr_assert_neq(check("", &err), 0);
    cr_assert(strstr(err.msg, "[https] certificate: must be set"), "%s", err.msg);
    /* A key without its certificate, for the second pair. */
    snprintf(extra, sizeof extra,
             "certificate = %s/ec.pem\ncertificate_key = %s/ec.key\ncertificate_key2 = %s/rsa.key",
             dir, dir, dir);
    cr_assert_neq(check(extra, &err), 0);
    cr_assert(strstr(err.msg, "[https] certificate2: must be set"), "%s", err.msg);
    /* Two pairs of one key type: the second would replace the first. */
    snprintf(extra, sizeof extra,
             "certificate = %s/ec.pem\ncertificate_key = %s/ec.key\n"
             "certificate2 = %s/ec.pem\ncertificate_key2 = %s/ec.key",
             dir, dir, dir, dir);
    cr_assert_neq(check(extra, &err), 0);
    cr_assert(strstr(err.msg, "t.conf:5: [https] certificate2: ") && strstr(err.msg, "same type"),
              "%s", err.msg);
    /* RSA and ECDSA side by side. */
    snprintf(extra, sizeof extra,
             "certificate = %s/ec.pem\ncertificate_key = %s/ec.key\n"
             "certificate2 = %s/rsa.pem\ncertificate_key2 = %s/rsa.key",
             dir, dir, dir, dir);
    cr_assert_eq(check(extra, &err), 0, "%s", err.msg);
    /* Lists OpenSSL does not know. */
    snprintf(extra, sizeof extra,
             "certificate = %s/ec.pem\ncertificate_key = %s/ec.key\nciphers = NOPE-CIPHER", dir,
             dir);
    cr_assert_neq(check(extra, &err), 0);
    cr_assert(strstr(err.msg, "t.conf:5: [https] ciphers: \"NOPE-CIPHER\""), "%s", err.msg);
    snprintf(extra, sizeof extra,
             "certificate = %s/ec.pem\ncertificate_key = %s/ec.key\ngroups = P-999", dir, dir);
    cr_assert_neq(check(extra, &err), 0);
    cr_assert(strstr(err.msg, "[https] groups:"), "%s", err.msg);
    /* The same address as [http]: refused. */
    md_config c;
    snprintf(extra, sizeof extra,
             "[http]\nlisten = 127.0.0.1:8443\n[https]\nlisten = 127.0.0.1:8443\n"
             "certificate = %s/ec.pem\ncertificate_key = %s/ec.key\n",
             dir, dir);
    cr_assert_eq(parse(&c, extra, &err), 0, "%s", err.msg);
    cr_assert_neq(md_config_check(&c, &err), 0);
    cr_assert(strstr(err.msg, "[https] listen: 127.0.0.1:8443 is also [http] listen"), "%s",
              err.msg);
    pki_remove(dir);
#undef PAIR
}

Test(tls, context_per_generation, .timeout = 60)
{
    pki_make(dir);
    md_config c;
    md_error err;
    char text[512];
    snprintf(
        text, sizeof text,
        "[https]\nlisten = 127.0.0.1:0\ncertificate = %s/ec.pem\ncertificate_key = %s/ec.key\n",
        dir, dir);
    cr_assert_eq(parse(&c, text, &err), 0, "%s", err.msg);
    md_tls_ctx *x = NULL;
    cr_assert_eq(md_tls_ctx_new(&c.tls, NULL, c.source, &x, &err), 0, "%s", err.msg);
    /* A connection's state holds the context past the generation's free. */
    md_tls_conn *conn = NULL;
    cr_assert_eq(md_tls_conn_new(x, &conn), 0);
    md_tls_ctx_free(x);
    struct md_conn *fake = calloc(1, sizeof(md_conn));
    cr_assert_not_null(fake);
    cr_assert_not_null(md_conn_more_of(fake));
    fake->more->tls = conn;
    md_tls_conn_free(fake);
    cr_assert_null(fake->more->tls);
    free(fake->more);
    free(fake);
    cr_assert_eq(md_tls_conn_new(NULL, &conn), -EINVAL);
    pki_remove(dir);
}
