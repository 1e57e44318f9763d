/* TLS termination on the [https] listener, by OpenSSL 3: its keys, its context per generation
 * of settings, and each connection's transport (tls.c).
 *
 * The connection task (conn_http.c) reads and writes through md_tls_read_poll(),
 * md_tls_consume() and md_tls_write() instead of the stream when the connection has a TLS
 * state (md_conn.tls); everything runs on the worker that polls the task, the handshake too.
 */
#ifndef MD_TLS_H
#define MD_TLS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/error.h"
#include "core/outbuf.h"
#include "magpie.h"

enum {
    MD_TLS_PATH_MAX = 4096,
    MD_TLS_PAIRS = 2, /* certificate/certificate_key, certificate2/certificate_key2 */
    MD_TLS_LIST_MAX = 512,
};

/* The [https] keys that are TLS's own (listen, reuseport and max_connections are the
 * listener's, in md_config.listeners). Which line set each one is kept for the checks'
 * messages: 0 the default, UINT32_MAX a --set override. */
typedef struct md_tls_config {
    char cert[MD_TLS_PAIRS][MD_TLS_PATH_MAX]; /* PEM chain, leaf first; "" = none */
    char key[MD_TLS_PAIRS][MD_TLS_PATH_MAX];  /* PEM private key */
    char ciphers[MD_TLS_LIST_MAX];            /* TLS 1.2 cipher list (OpenSSL's syntax) */
    char ciphersuites[MD_TLS_LIST_MAX];       /* TLS 1.3 suites */
    char groups[MD_TLS_LIST_MAX];             /* key exchange groups */
    uint32_t session_cache;                   /* entries of the server's cache; 0 = off */
    uint32_t session_timeout_s;               /* a session's (and ticket's) lifetime */
    uint32_t handshake_timeout_ms;            /* from accept to the handshake's end */
    uint32_t handshake_min_rate;              /* bytes/s the handshake must average; 0: none */
    uint32_t handshake_rate_grace_ms;         /* ... once this long has passed since accept */
    bool session_tickets;
    bool strict_sni;                /* a server name no site has (or none): the handshake fails */
    bool prefer_server_ciphers;     /* our order of ciphers and suites, ChaCha20 first for a
                                       client that lists it first (no AES instructions) */
    uint32_t ticket_key_rotation_s; /* a new session ticket key this often */
    uint32_t line[16];              /* per key of tls.c's table */
    /* The section messages name: "" for [https]; "site NAME" for a site's certificate,
     * "listener NAME" for a TLS [listener NAME]'s context. */
    char label[48];
    bool own_pair; /* md_tls_config_listener: the listener's own certificate */
} md_tls_config;

/* The defaults: Mozilla's "intermediate" profile (v5.7), tickets on, a 20480-entry cache. */
void md_tls_config_init(md_tls_config *t);
/* One "[https] name = value" (file or --set; line as md_config's key_line): 0, -ENOENT for a
 * key that is not TLS's, or -EINVAL with msg saying why ("expected ..."). */
int md_tls_key(md_tls_config *t, const char *name, const char *value, uint32_t line, char *msg,
               size_t len);
/* What `magpied -t` and every load check, with [https] on: a certificate and key for the
 * first pair (the second complete or absent), each file readable PEM, the key matching its
 * certificate, each certificate valid now, and the cipher and group lists known to OpenSSL.
 * 0 or -EINVAL with err as "file:line: [https] key: why" (source: the configuration file). */
struct md_route_table;
/* With sites (the route table's [site]s; NULL: none), each site's certificate and key too,
 * named "file:line: [site NAME] certificate: why". */
int md_tls_config_check(const md_tls_config *t, const struct md_route_table *sites,
                        const char *source, md_error *err);

/* The configuration of a TLS [listener NAME] (name) with its own default certificate and key
 * (cert ""; t's pairs) and strict_sni (-1: t's): t's protocols and suites, messages naming
 * "[listener NAME]" and the listener's lines. */
void md_tls_config_listener(const md_tls_config *t, const char *name, const char *cert,
                            uint32_t cert_line, const char *key, uint32_t key_line, int strict_sni,
                            md_tls_config *out);

/* A server context made from t: the listener's SSL_CTX, one more per site with a certificate
 * of its own (SNI picks it: sites.h's matching), refcounted: each connection holds one
 * reference. */
typedef struct md_tls_ctx md_tls_ctx;
/* 0, or a negative errno with err.msg saying why (as md_tls_config_check's). */
int md_tls_ctx_new(const md_tls_config *t, const struct md_route_table *sites, const char *source,
                   md_tls_ctx **out, md_error *err);
void md_tls_ctx_free(md_tls_ctx *x); /* NULL: nothing; the connections keep theirs */

struct md_conn;
/* A connection's TLS state. Made on the loop's thread at accept (a reference to x and a few
 * words; no SSL object yet), used by the connection's task alone. */
/* Before any connection uses x: whether ALPN offers h2 ([https] http2). */
void md_tls_ctx_offer_h2(md_tls_ctx *x, bool on);
/* Whether the connection's handshake chose h2 by ALPN (false before it is done). */
bool md_tls_alpn_h2(const struct md_conn *c);

typedef struct md_tls_conn md_tls_conn;
int md_tls_conn_new(md_tls_ctx *x, md_tls_conn **out);
/* At the connection's close (the task, or its cancel): a close_notify if the handshake is
 * done and the socket takes it at once, then everything freed. */
void md_tls_conn_free(struct md_conn *c);

/* The transport, the task's calls, in the shapes of mp_tcp_read_poll(), mp_tcp_consume() and
 * md_conn_write(). read: plaintext (MP_READY with *len > 0), or *len 0 with *err MP_EOF (the
 * peer's close_notify), -EINTR (mp_tcp_interrupt), -EPROTO (a failed handshake, a record that
 * does not decrypt, a close without close_notify) or the socket's error; MP_PENDING until
 * more arrives (the handshake runs inside it). */
mp_poll md_tls_read_poll(struct md_conn *c, mp_context *cx, const char **data, size_t *len,
                         int *err);
void md_tls_consume(struct md_conn *c, size_t n);
/* Encrypts data[0..len) (at most a few records) and writes them within the send limits: as
 * md_conn_write(), call again with the same arguments after MP_PENDING. */
mp_poll md_tls_write(struct md_conn *c, mp_context *cx, const char *data, size_t len, int *err);
/* The sendfile of a TLS connection (no kTLS here): head (what out holds, taken and consumed)
 * and up to 64 KiB of in_fd from *off read with pread (the caller gives resident pages only,
 * as to sendfile), encrypted together, written as one; shaped as md_http_io.sendfile. */
mp_poll md_tls_sendfile(struct md_conn *c, mp_context *cx, md_outbuf *out, int in_fd, off_t *off,
                        size_t count, size_t *sent, int *err);
/* close_notify, written within the send limits, before the sending side is shut (a lingering
 * close, a tunnel's half-close): MP_READY once done or failed (the shutdown that follows says). */
mp_poll md_tls_close_notify(struct md_conn *c, mp_context *cx);
/* The server name the client sent (SNI), or NULL (none, no handshake yet, no TLS). The task's
 * thread. */
const char *md_tls_servername(const struct md_conn *c);
/* The handshake's deadline (mp_now_ms() clock), UINT64_MAX once it is done: the nearer of
 * handshake_timeout_ms from the accept and the moment the bytes received so far fall under
 * handshake_min_rate averaged since the accept (never before handshake_rate_grace_ms); it
 * moves as bytes come, so the task asks again at each wait. */
uint64_t md_tls_handshake_deadline(const struct md_conn *c);

/* /metrics: handshakes (by protocol version), failures (by reason), resumptions. */
int md_tls_metrics_text(md_outbuf *out);

#endif
