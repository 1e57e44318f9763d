/* Tests for daemon/http/handlers/proxy/upstream_tls.c: the [upstream] TLS keys, their errors
 * and the end-of-section check (the client pair, the CA file), on a test PKI (tls_pki.h). The
 * handshakes themselves are e2e/test_proxy_tls.c's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/handlers/proxy/upstream.h"
#include "daemon/tls_pki.h"

static md_upstream_table t;
static char dir[PKI_DIR_MAX];

static md_upstream_conf *group(void)
{
    memset(&t, 0, sizeof t);
    char msg[256];
    cr_assert_eq(md_upstream_add(&t, " app", 3, msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(md_upstream_key(&t.u[0], "server", "127.0.0.1:8443", msg, sizeof msg), 0);
    return &t.u[0];
}

static void key_ok(md_upstream_conf *u, const char *k, const char *v)
{
    char msg[256] = "";
    cr_assert_eq(md_upstream_key(u, k, v, msg, sizeof msg), 0, "%s = %s: %s", k, v, msg);
}

static void key_bad(md_upstream_conf *u, const char *k, const char *v, const char *why)
{
    char msg[256] = "";
    cr_assert_neq(md_upstream_key(u, k, v, msg, sizeof msg), 0, "%s = %s was taken", k, v);
    cr_assert_not_null(strstr(msg, why), "%s = %s: \"%s\" lacks \"%s\"", k, v, msg, why);
}

static char *at(const char *name)
{
    static char path[4][PKI_DIR_MAX + 32];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    return p;
}

Test(upstream_tls, defaults_and_keys, .timeout = 30)
{
    pki_make(dir);
    md_upstream_conf *u = group();
    cr_assert_not(u->tls);
    cr_assert(u->tls_verify);
    cr_assert_eq(u->tls_ca_file[0], '\0');
    key_ok(u, "tls", "on");
    key_ok(u, "tls_verify", "off");
    key_ok(u, "tls_ca_file", at("ca.pem"));
    key_ok(u, "tls_server_name", "api.example.com");
    key_ok(u, "tls_client_certificate", at("ec.pem"));
    key_ok(u, "tls_client_key", at("ec.key"));
    cr_assert(u->tls);
    cr_assert_not(u->tls_verify);
    cr_assert_str_eq(u->tls_ca_file, at("ca.pem"));
    cr_assert_str_eq(u->tls_server_name, "api.example.com");
    char msg[256] = "";
    cr_assert_eq(md_upstream_check(u, msg, sizeof msg), 0, "%s", msg);
    /* A generation's context, and its end. */
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, msg, sizeof msg), 0, "%s", msg);
    cr_assert_not_null(us->u[0].tls_ctx);
    md_upstreams_free(us);
    pki_remove(dir);
}

Test(upstream_tls, bad_values, .timeout = 30)
{
    pki_make(dir);
    md_upstream_conf *u = group();
    key_bad(u, "tls", "maybe", "expected on");
    key_ok(u, "tls_verify", "on");
    key_bad(u, "tls_verify", "off", "set twice");
    key_bad(u, "tls_server_name", "two words", "expected a host name");
    key_bad(u, "tls_server_name", "", "expected a host name");
    key_bad(u, "tls_ca_file", at("none.pem"), "cannot open");
    key_bad(u, "tls_ca_file", at("pki.log"), "not a PEM certificate file");
    key_bad(u, "tls_client_key", at("none.key"), "cannot open");
    key_bad(u, "tls_bogus", "1", "");
    pki_remove(dir);
}

Test(upstream_tls, check_the_client_pair, .timeout = 30)
{
    pki_make(dir);
    char msg[256] = "";
    md_upstream_conf *u = group();
    key_ok(u, "tls", "on");
    key_ok(u, "tls_client_certificate", at("ec.pem"));
    cr_assert_neq(md_upstream_check(u, msg, sizeof msg), 0);
    cr_assert(strstr(msg, "tls_client_certificate: must be set with tls_client_key"), "%s", msg);
    u = group();
    key_ok(u, "tls", "on");
    key_ok(u, "tls_client_certificate", at("ec.pem"));
    key_ok(u, "tls_client_key", at("other.key"));
    cr_assert_neq(md_upstream_check(u, msg, sizeof msg), 0);
    cr_assert(strstr(msg, "tls_client_key: "), "%s", msg);
    cr_assert(strstr(msg, "not a PEM private key matching"), "%s", msg);
    /* tls off: the keys wait, unchecked together, and no context is made. */
    u = group();
    key_ok(u, "tls", "off");
    key_ok(u, "tls_client_certificate", at("ec.pem"));
    cr_assert_eq(md_upstream_check(u, msg, sizeof msg), 0, "%s", msg);
    md_upstreams *us;
    cr_assert_eq(md_upstreams_new(&us, &t, NULL, msg, sizeof msg), 0, "%s", msg);
    cr_assert_null(us->u[0].tls_ctx);
    md_upstreams_free(us);
    pki_remove(dir);
}
