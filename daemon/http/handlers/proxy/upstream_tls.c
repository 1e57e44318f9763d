/* upstream_tls.c: TLS to an [upstream NAME]'s servers (tls = on), OpenSSL 3 as the client: the
 * keys, a client SSL_CTX per group and generation, each connection's SSL object, and the
 * sessions kept per server for resumption.
 *
 * Verification is on unless tls_verify = off: the chain against tls_ca_file (or the system's
 * store) and the name against tls_server_name, else the server's host as written in `server =`
 * (a DNS name: SSL_set1_host, and the same name as SNI; an IP address: the certificate's IP
 * SAN, X509_VERIFY_PARAM_set1_ip_asc, and no SNI, as RFC 6066 3 forbids an address there). A
 * failure ends the attempt (the proxy logs OpenSSL's reason, and answers 502): there is never
 * a fallback to plaintext.
 *
 * Resumption: the client cache keeps nothing itself (SSL_SESS_CACHE_NO_INTERNAL_STORE); each
 * new session (TLS 1.2's at the handshake's end, TLS 1.3's tickets when they come) replaces
 * its server's last one (md_upstream_peer.tls_session, under the group's mutex), and each new
 * connection to that server offers a copy of it (a server that issues no new ticket on a
 * resumption, as magpied's own, is resumed with the same ticket again, as nginx does). A
 * reload starts with none (a new generation's groups).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "core/log.h"
#include "core/text.h"
#include "core/tls_stream.h"
#include "http/handlers/proxy/upstream.h"
#include "http/routes.h"

/* Bits of md_upstream_conf.seen (upstream.c uses 0..21). */
enum { SEEN_TLS = 22 };

static const char *const tls_keys[] = {
    "tls",
    "tls_verify",
    "tls_ca_file",
    "tls_server_name",
    "tls_client_certificate",
    "tls_client_key",
};
#define NKEYS (sizeof tls_keys / sizeof tls_keys[0])

/* The CA file: readable, and at least one PEM certificate in it. */
static int ca_file_ok(const char *path, char *msg, size_t msg_len)
{
    if (md_tls_file_readable(path, msg, msg_len) != 0)
        return -EINVAL;
    X509_STORE *st = X509_STORE_new();
    char why[200];
    ERR_clear_error();
    int ok = st != NULL && X509_STORE_load_file(st, path) == 1;
    if (!ok)
        md_say(msg, msg_len, "%s: not a PEM certificate file (%s)", path,
               md_tls_last_reason(why, sizeof why));
    X509_STORE_free(st);
    return ok ? 0 : -EINVAL;
}

static int tls_value(md_upstream_conf *u, size_t i, const char *value, char *msg, size_t msg_len);

int md_upstream_tls_key(md_upstream_conf *u, const char *key, const char *value, char *msg,
                        size_t msg_len)
{
    size_t i = 0;
    while (i < NKEYS && strcmp(tls_keys[i], key) != 0)
        i++;
    if (i == NKEYS)
        return -ENOENT;
    uint32_t bit = UINT32_C(1) << (SEEN_TLS + i);
    if (u->seen & bit) {
        md_say(msg, msg_len, "set twice");
        return -EINVAL;
    }
    int rc = tls_value(u, i, value, msg, msg_len);
    if (rc == 0)
        u->seen |= bit;
    return rc;
}

/* Key i of tls_keys, set from value: 0 or -EINVAL with msg. */
static int tls_value(md_upstream_conf *u, size_t i, const char *value, char *msg, size_t msg_len)
{
    if (i <= 1) {
        bool *b = i == 0 ? &u->tls : &u->tls_verify;
        return md_conf_bool(value, b, msg, msg_len);
    }
    if (i == 3) { /* tls_server_name: a host name (letters, digits, '-', '.') */
        size_t n = strlen(value);
        bool ok = n != 0 && n < MD_UPSTREAM_TLS_NAME_MAX;
        for (size_t k = 0; ok && k < n; k++)
            ok = value[k] == '-' || value[k] == '.' || (value[k] >= '0' && value[k] <= '9') ||
                 (value[k] >= 'a' && value[k] <= 'z') || (value[k] >= 'A' && value[k] <= 'Z');
        if (!ok) {
            md_say(msg, msg_len, "expected a host name, at most %d bytes, got \"%s\"",
                   MD_UPSTREAM_TLS_NAME_MAX - 1, value);
            return -EINVAL;
        }
        memcpy(u->tls_server_name, value, n + 1);
        return 0;
    }
    char *field = i == 2 ? u->tls_ca_file : i == 4 ? u->tls_cert : u->tls_key;
    if (*value == '\0' || strlen(value) >= MD_UPSTREAM_TLS_PATH_MAX) {
        md_say(msg, msg_len, "expected a file's path, 1 to %d bytes", MD_UPSTREAM_TLS_PATH_MAX - 1);
        return -EINVAL;
    }
    if (i == 2 ? ca_file_ok(value, msg, msg_len) != 0
               : md_tls_file_readable(value, msg, msg_len) != 0)
        return -EINVAL;
    snprintf(field, MD_UPSTREAM_TLS_PATH_MAX, "%s", value);
    return 0;
}

/* TLS 1.2's session at its handshake's end, TLS 1.3's tickets as they come: the server's last
 * session from now on. 1: the reference is ours. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    md_upstream_peer *p = SSL_get_app_data(ssl);
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->up->mu);
    SSL_SESSION *old = p->tls_session;
    p->tls_session = sess;
    pthread_mutex_unlock(&p->up->mu);
    SSL_SESSION_free(old);
    return 1;
}

static SSL_CTX *ctx_make(const md_upstream_conf *u, char *msg, size_t msg_len)
{
    char why[200];
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        md_say(msg, msg_len, "tls: %s", md_tls_last_reason(why, sizeof why));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    static const unsigned char alpn[] = "\x08http/1.1";
    if (SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1) != 0) { /* 0 is success */
        md_say(msg, msg_len, "tls: ALPN: %s", md_tls_last_reason(why, sizeof why));
        goto fail;
    }
    if (u->tls_ca_file[0] != '\0') {
        if (SSL_CTX_load_verify_file(ctx, u->tls_ca_file) != 1) {
            md_say(msg, msg_len, "tls_ca_file: %s: not a PEM certificate file (%s)", u->tls_ca_file,
                   md_tls_last_reason(why, sizeof why));
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        md_say(msg, msg_len, "tls: the system's certificate store: %s",
               md_tls_last_reason(why, sizeof why));
        goto fail;
    }
    SSL_CTX_set_verify(ctx, u->tls_verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if ((u->tls_cert[0] != '\0') != (u->tls_key[0] != '\0')) {
        md_say(msg, msg_len, "%s: must be set with %s",
               u->tls_cert[0] != '\0' ? "tls_client_certificate" : "tls_client_key",
               u->tls_cert[0] != '\0' ? "tls_client_key" : "tls_client_certificate");
        goto fail;
    }
    if (u->tls_cert[0] != '\0') {
        if (SSL_CTX_use_certificate_chain_file(ctx, u->tls_cert) != 1) {
            md_say(msg, msg_len, "tls_client_certificate: %s: not a PEM certificate chain (%s)",
                   u->tls_cert, md_tls_last_reason(why, sizeof why));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, u->tls_key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            md_say(msg, msg_len,
                   "tls_client_key: %s: not a PEM private key matching tls_client_certificate "
                   "(%s)",
                   u->tls_key, md_tls_last_reason(why, sizeof why));
            goto fail;
        }
    }
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return NULL;
}

int md_upstream_tls_check(const md_upstream_conf *u, char *msg, size_t msg_len)
{
    if (!u->tls)
        return 0; /* the other tls_ keys wait (tls = off for a while keeps them) */
    SSL_CTX *ctx = ctx_make(u, msg, msg_len);
    if (ctx == NULL)
        return -EINVAL;
    SSL_CTX_free(ctx);
    if (!u->tls_verify)
        md_log(MD_LOG_WARN,
               "[upstream %s] tls_verify = off: its servers' certificates are not verified "
               "(anyone on the path can pose as them)",
               u->name);
    return 0;
}

int md_upstream_tls_init(md_upstream *up, char *msg, size_t msg_len)
{
    if (!up->conf->tls)
        return 0;
    up->tls_ctx = ctx_make(up->conf, msg, msg_len);
    return up->tls_ctx != NULL ? 0 : -EINVAL;
}

void md_upstream_tls_session_free(struct ssl_session_st *sess)
{
    SSL_SESSION_free(sess);
}

void md_upstream_tls_fini(md_upstream *up)
{
    for (uint32_t j = 0; j < up->nslots; j++) {
        SSL_SESSION_free(up->peers[j].tls_session);
        up->peers[j].tls_session = NULL;
    }
    SSL_CTX_free(up->tls_ctx); /* the connections' SSL objects hold references of their own */
    up->tls_ctx = NULL;
}

/* The host of "HOST:PORT" or "[IPv6]:PORT" into buf. */
static void host_of(const char *hostport, char *buf, size_t len)
{
    const char *h = hostport, *end;
    if (*h == '[') {
        h++;
        end = strchr(h, ']');
    } else {
        end = strrchr(h, ':');
    }
    size_t n = end != NULL ? (size_t)(end - h) : strlen(h);
    if (n >= len)
        n = len - 1;
    memcpy(buf, h, n);
    buf[n] = '\0';
}

int md_upstream_tls_start(md_upstream_conn *c)
{
    md_upstream_peer *p = c->peer;
    const md_upstream_conf *u = p->up->conf;
    SSL *ssl = SSL_new(p->up->tls_ctx);
    if (ssl == NULL) {
        ERR_clear_error();
        return -ENOMEM;
    }
    SSL_set_connect_state(ssl);
    SSL_set_app_data(ssl, p);
    char host[MD_UPSTREAM_TLS_NAME_MAX];
    if (u->tls_server_name[0] != '\0')
        snprintf(host, sizeof host, "%s", u->tls_server_name);
    else
        host_of(p->conf->host, host, sizeof host);
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    bool ok = true;
    if (is_ip) {
        /* No SNI with an address (RFC 6066 3); the certificate must name the address. */
        ok = !u->tls_verify || X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
    } else {
        ok = SSL_set_tlsext_host_name(ssl, host) == 1 &&
             (!u->tls_verify || SSL_set1_host(ssl, host) == 1);
    }
    /* A copy: OpenSSL marks the session a connection used not resumable when it ends
     * without close_notify, or as TLS 1.3 replaces it by a newer ticket, and the server's
     * last session must stay offerable by the connections opening meanwhile. */
    pthread_mutex_lock(&p->up->mu);
    SSL_SESSION *sess = p->tls_session != NULL ? SSL_SESSION_dup(p->tls_session) : NULL;
    pthread_mutex_unlock(&p->up->mu);
    if (sess != NULL) {
        (void)SSL_set_session(ssl, sess); /* a session it cannot use: a full handshake */
        SSL_SESSION_free(sess);
    }
    if (!ok) {
        SSL_free(ssl);
        ERR_clear_error();
        return -ENOMEM;
    }
    return md_tls_stream_new(ssl, &c->tcp, NULL, NULL, &c->tls);
}

const char *md_upstream_tls_why(md_upstream_conn *c, char *buf, size_t len)
{
    if (c == NULL || c->tls == NULL) {
        snprintf(buf, len, "no TLS");
        return buf;
    }
    md_tls_stream_why(c->tls, buf, len);
    if (buf[0] == '\0')
        snprintf(buf, len, "the server closed the connection");
    return buf;
}
