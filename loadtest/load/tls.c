/* tls.c: magpie-load's TLS client: the run's SSL_CTX, one SSL per connection on a pair of
 * memory BIOs, and the session each connection slot keeps for resumption.
 *
 * Resumption (--resume): every session the server hands a slot (TLS 1.2's session after the
 * handshake, TLS 1.3's NewSessionTicket messages, through the new-session callback) replaces
 * the one that slot kept; its next connection offers it. Keeping the latest rather than the
 * first works with servers that take a TLS 1.3 ticket only once. A slot's session is touched
 * only by its own connection task, which runs on one worker at a time: no lock.
 *
 * No verification unless --cacert names the trust anchors: a benchmark's servers use
 * certificates made for the run. The signature in the handshake is still checked.
 */
#include "tls.h"

#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static SSL_CTX *ctx;
static const ld_tls_opts *opts;
static SSL_SESSION **saved; /* one per slot */
static unsigned nslots;

static unsigned long slot_of(SSL *ssl)
{
    return (unsigned long)(uintptr_t)SSL_get_app_data(ssl);
}

static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    unsigned long slot = slot_of(ssl);
    if (slot >= nslots)
        return 0;
    if (saved[slot])
        SSL_SESSION_free(saved[slot]);
    saved[slot] = sess;
    return 1; /* we keep the reference OpenSSL gave */
}

int ld_tls_init(const ld_tls_opts *o, unsigned slots)
{
    opts = o;
    if (!(ctx = SSL_CTX_new(TLS_client_method())))
        goto fail;
    SSL_CTX_set_min_proto_version(ctx, o->version ? o->version : TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, o->version ? o->version : TLS1_3_VERSION);
    /* SSL_write takes the whole request at once (a memory BIO never refuses bytes), and a
     * connection's buffers go when idle, as a server's would. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (o->cacert) {
        if (SSL_CTX_load_verify_locations(ctx, o->cacert, NULL) != 1) {
            fprintf(stderr, "magpie-load: %s: cannot load CA certificates\n", o->cacert);
            goto fail;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (o->resume) {
        if (!(saved = calloc(slots, sizeof *saved)))
            goto fail;
        nslots = slots;
        /* CLIENT | NO_INTERNAL_STORE: the callback sees each session, OpenSSL keeps none. */
        SSL_CTX_set_session_cache_mode(ctx,
                                       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    return 0;
fail:
    ERR_print_errors_fp(stderr);
    ld_tls_free();
    return -1;
}

void ld_tls_free(void)
{
    for (unsigned i = 0; i < nslots; i++)
        if (saved[i])
            SSL_SESSION_free(saved[i]);
    free(saved);
    saved = NULL;
    nslots = 0;
    SSL_CTX_free(ctx);
    ctx = NULL;
}

SSL *ld_tls_new(unsigned slot)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return NULL;
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    if (!rb || !wb) {
        BIO_free(rb);
        BIO_free(wb);
        SSL_free(ssl);
        return NULL;
    }
    /* An empty read BIO says "retry", not EOF: the socket's EOF is the task's to report. */
    BIO_set_mem_eof_return(rb, -1);
    SSL_set_bio(ssl, rb, wb);
    SSL_set_connect_state(ssl);
    SSL_set_app_data(ssl, (void *)(uintptr_t)slot);
    if (opts->sni && *opts->sni) {
        SSL_set_tlsext_host_name(ssl, opts->sni);
        if (opts->cacert)
            SSL_set1_host(ssl, opts->sni);
    }
    if (opts->resume && slot < nslots && saved[slot]) {
        /* A copy per connection. A TLS 1.3 server sends no new ticket on a resumption
         * (OpenSSL's default), so the slot offers the same session again; offered as the
         * same object each time, only every other connection resumed (measured against
         * magpied: 49.5%), offered as a copy each one does. */
        SSL_SESSION *copy = SSL_SESSION_dup(saved[slot]);
        if (copy) {
            SSL_set_session(ssl, copy);
            SSL_SESSION_free(copy);
        }
    }
    return ssl;
}

bool ld_tls_take_out(SSL *ssl, char **buf, size_t *len, size_t *cap)
{
    BIO *wb = SSL_get_wbio(ssl);
    size_t n = BIO_ctrl_pending(wb);
    if (n == 0)
        return true;
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n)
            c *= 2;
        char *nb = realloc(*buf, c);
        if (!nb)
            return false;
        *buf = nb;
        *cap = c;
    }
    int got = BIO_read(wb, *buf + *len, (int)n);
    if (got > 0)
        *len += (size_t)got;
    return true;
}

bool ld_tls_put_in(SSL *ssl, const char *data, size_t len)
{
    return BIO_write(SSL_get_rbio(ssl), data, (int)len) == (int)len;
}
