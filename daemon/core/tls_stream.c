/* tls_stream.c: a TLS stream over an mp_tcp (tls_stream.h), the client side's transport.
 *
 *   task (any worker)                       OpenSSL
 *   read_poll / handshake: SSL_read_ex -->  BIO read: the stream's view, consumed
 *     WANT_READ: our output first (mp_tcp_write_poll), then mp_tcp_read_poll, then again
 *   write: SSL_write_ex  ---------------->  BIO write: ciphertext appended
 *          mp_tcp_write_poll(ciphertext) as one write
 */
#include "core/tls_stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "core/cfgfile.h"
#include "core/outbuf.h"

/* Plaintext read per SSL_read_ex: one record's worth. */
#define PLAIN_CAP 16384
/* What a record adds to its plaintext, at most: the header (5), TLS 1.2's explicit nonce (8)
 * or TLS 1.3's inner type (1), and the AEAD tag (16); CBC's padding and MAC stay under it. */
#define RECORD_OVERHEAD 96

struct md_tls_stream {
    SSL *ssl;
    mp_tcp *tcp;
    md_tls_stream_write_fn write; /* the ciphertext's writer */
    void *write_arg;
    uint64_t bytes_in; /* ciphertext received */
    char first[8];     /* the first bytes received (a plaintext request's method) */
    uint8_t first_len;
    unsigned long ssl_error; /* OpenSSL's error at the failure (its queue is per thread) */
    long verify;             /* SSL_get_verify_result at the failure */
    /* The stream's view that the BIO reads from, during one SSL call. */
    const char *in;
    size_t in_len, in_used;
    /* Ciphertext to write: the BIO appends, flush() writes. Storage from md_outbuf's per-thread
     * caches (a burst's from the batch cache), so that a busy stream's writes cost no malloc. */
    md_outbuf w;
    /* Plaintext read and not yet consumed: pbuf[poff..plen). */
    char *pbuf;
    size_t poff, plen;
    int failed;   /* sticky: a fatal TLS or socket error (negative errno) */
    bool writing; /* w holds the caller's write (md_tls_stream_write) */
    bool eof;     /* the peer's close_notify came */
    /* The last read took all the bytes it was shown and left OpenSSL nothing buffered: until
     * more arrive, SSL_read_ex could only answer WANT_READ (after allocating and freeing its
     * record buffer, SSL_MODE_RELEASE_BUFFERS). */
    bool drained;
};

static int bio_write(BIO *b, const char *data, int len)
{
    md_tls_stream *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0)
        return 0;
    if (s->writing && md_outbuf_pending(&s->w) != 0) {
        /* A read's output (a KeyUpdate's answer) while the caller's records are being
         * written: w must stay put under that write; OpenSSL retries once it is done. */
        BIO_set_retry_write(b);
        return -1;
    }
    if (md_outbuf_append(&s->w, data, (size_t)len) != 0)
        return -1;
    return len;
}

static int bio_read(BIO *b, char *buf, int len)
{
    md_tls_stream *s = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    size_t left = s->in_len - s->in_used;
    if (left == 0) {
        BIO_set_retry_read(b); /* nothing now: more comes through mp_tcp_read_poll */
        return -1;
    }
    size_t n = (size_t)len < left ? (size_t)len : left;
    memcpy(buf, s->in + s->in_used, n);
    s->in_used += n;
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "magpied stream");
    if (m != NULL && (BIO_meth_set_write(m, bio_write) != 1 ||
                      BIO_meth_set_read(m, bio_read) != 1 || BIO_meth_set_ctrl(m, bio_ctrl) != 1)) {
        BIO_meth_free(m);
        m = NULL;
    }
    bio_method = m;
}

static mp_poll tcp_write(void *arg, mp_context *cx, const char *data, size_t len, int *err)
{
    return mp_tcp_write_poll(arg, cx, data, len, err);
}

int md_tls_stream_new(SSL *ssl, mp_tcp *tcp, md_tls_stream_write_fn write, void *write_arg,
                      md_tls_stream **out)
{
    pthread_once(&bio_once, bio_method_make);
    md_tls_stream *s = calloc(1, sizeof *s);
    BIO *b = bio_method != NULL ? BIO_new(bio_method) : NULL;
    if (s == NULL || b == NULL) {
        free(s);
        BIO_free(b);
        SSL_free(ssl);
        return -ENOMEM;
    }
    BIO_set_data(b, s);
    BIO_set_init(b, 1);
    SSL_set_bio(ssl, b, b); /* one BIO both ways: one reference, SSL_free's */
    s->ssl = ssl;
    s->tcp = tcp;
    s->write = write != NULL ? write : tcp_write;
    s->write_arg = write != NULL ? write_arg : tcp;
    s->verify = X509_V_OK;
    *out = s;
    return 0;
}

void md_tls_stream_free(md_tls_stream *s)
{
    if (s == NULL)
        return;
    SSL_free(s->ssl);
    ERR_clear_error();
    md_outbuf_free(&s->w);
    free(s->pbuf);
    free(s);
}

SSL *md_tls_stream_ssl(const md_tls_stream *s)
{
    return s->ssl;
}

/* Writes w; it is empty after MP_READY (s->failed on an error). The storage stays for the
 * next write until the stream waits for the peer (md_tls_stream_trim). */
static mp_poll flush(md_tls_stream *s, mp_context *cx)
{
    int err = 0;
    size_t n = md_outbuf_pending(&s->w);
    if (n != 0 && s->write(s->write_arg, cx, md_outbuf_pending_data(&s->w), n, &err) == MP_PENDING)
        return MP_PENDING;
    md_outbuf_consume(&s->w, n);
    if (err != 0 && s->failed == 0)
        s->failed = err;
    return MP_READY;
}

/* An idle stream holds no buffer: the output's storage goes back to the thread's cache. */
void md_tls_stream_trim(md_tls_stream *s)
{
    if (md_outbuf_pending(&s->w) == 0)
        md_outbuf_free(&s->w);
    if (s->poff >= s->plen) {
        free(s->pbuf);
        s->pbuf = NULL;
        s->poff = s->plen = 0;
    }
}

/* The thread's error queue emptied before an SSL call (SSL_get_error reads it). Only when
 * something is queued: ERR_clear_error() resets all 16 of its slots whatever they hold, two
 * CRYPTO_free calls each, which was a tenth of a keep-alive request's instructions. */
static void err_reset(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/* One SSL call (handshake or read) with the view raw[0..raw_len) to read from; what OpenSSL
 * took is consumed from the stream. */
static int call(md_tls_stream *s, const char *raw, size_t raw_len, bool hs, size_t *n)
{
    if (s->first_len < sizeof s->first && raw_len != 0) {
        size_t k =
            sizeof s->first - s->first_len < raw_len ? sizeof s->first - s->first_len : raw_len;
        memcpy(s->first + s->first_len, raw, k);
        s->first_len = (uint8_t)(s->first_len + k);
    }
    s->in = raw;
    s->in_len = raw_len;
    s->in_used = 0;
    err_reset();
    int ok = hs ? SSL_do_handshake(s->ssl) == 1 : SSL_read_ex(s->ssl, s->pbuf, PLAIN_CAP, n);
    int e = ok ? SSL_ERROR_NONE : SSL_get_error(s->ssl, 0);
    s->drained = !hs && e == SSL_ERROR_NONE && s->in_used == raw_len &&
                 SSL_is_init_finished(s->ssl) && !SSL_has_pending(s->ssl);
    if (s->in_used != 0)
        mp_tcp_consume(s->tcp, s->in_used);
    s->in = NULL;
    s->in_len = s->in_used = 0;
    return e;
}

/* The first failure sticks, with OpenSSL's reason taken on this thread. */
static void fail(md_tls_stream *s, int err)
{
    if (s->failed != 0)
        return;
    s->failed = err;
    s->ssl_error = ERR_peek_last_error();
    s->verify = SSL_get_verify_result(s->ssl);
    ERR_clear_error();
}

/* The loop both the handshake and a read run: output first, then OpenSSL, then the socket. */
static mp_poll pump(md_tls_stream *s, mp_context *cx, bool hs, int *err)
{
    const char *raw = NULL; /* the stream's view, valid until it is consumed */
    size_t raw_len = 0;
    for (;;) {
        if (!hs && s->poff < s->plen) {
            *err = 0;
            return MP_READY;
        }
        if (md_outbuf_pending(&s->w) != 0 && !s->writing && flush(s, cx) == MP_PENDING)
            return MP_PENDING;
        if (s->failed != 0 || s->eof) {
            *err = s->eof ? MP_EOF : s->failed;
            return MP_READY;
        }
        if (hs && SSL_is_init_finished(s->ssl)) {
            *err = 0;
            return MP_READY;
        }
        if (!hs && s->pbuf == NULL && (s->pbuf = malloc(PLAIN_CAP)) == NULL) {
            *err = -ENOMEM;
            return MP_READY;
        }
        size_t n = 0;
        /* Nothing new to show OpenSSL after a read that drained: straight to the socket. */
        int e =
            !hs && raw_len == 0 && s->drained ? SSL_ERROR_WANT_READ : call(s, raw, raw_len, hs, &n);
        raw = NULL;
        raw_len = 0;
        if (e == SSL_ERROR_NONE) {
            if (!hs) {
                s->poff = 0;
                s->plen = n;
            }
            continue;
        }
        if (e == SSL_ERROR_ZERO_RETURN) {
            s->eof = true; /* close_notify */
            continue;
        }
        if (e == SSL_ERROR_WANT_WRITE)
            return MP_PENDING; /* bio_write: after the caller's write, whose waker wakes us */
        if (e != SSL_ERROR_WANT_READ) {
            fail(s, -EPROTO); /* the alert OpenSSL made is written first */
            continue;
        }
        if (md_outbuf_pending(&s->w) != 0 && !s->writing)
            continue; /* our flight first */
        int rerr;
        if (mp_tcp_read_poll(s->tcp, cx, &raw, &raw_len, &rerr) == MP_PENDING) {
            md_tls_stream_trim(s); /* waiting: every plaintext byte was consumed */
            return MP_PENDING;
        }
        if (raw_len == 0) {
            if (rerr == -EINTR) { /* mp_tcp_interrupt: once, the caller decides */
                *err = rerr;
                return MP_READY;
            }
            /* A close without close_notify: a truncation looks the same. */
            fail(s, hs && rerr == MP_EOF ? MP_EOF : rerr == MP_EOF ? -EPROTO : rerr);
            continue;
        }
        s->bytes_in += raw_len;
    }
}

mp_poll md_tls_stream_handshake(md_tls_stream *s, mp_context *cx, int *err)
{
    return pump(s, cx, true, err);
}

const char *md_tls_stream_why(const md_tls_stream *s, char *buf, size_t len)
{
    long v = s->verify;
    unsigned long e = s->ssl_error;
    if (v != X509_V_OK) {
        snprintf(buf, len, "certificate verify failed: %s", X509_verify_cert_error_string(v));
    } else if (e != 0) {
        const char *r = ERR_reason_error_string(e);
        snprintf(buf, len, "%s", r != NULL ? r : "unknown error");
    } else {
        snprintf(buf, len, "%s", "");
    }
    return buf;
}

unsigned long md_tls_stream_error(const md_tls_stream *s)
{
    return s->ssl_error;
}

uint64_t md_tls_stream_bytes_in(const md_tls_stream *s)
{
    return s->bytes_in;
}

const char *md_tls_stream_first_bytes(const md_tls_stream *s, size_t *len)
{
    *len = s->first_len;
    return s->first;
}

mp_poll md_tls_stream_read_poll(md_tls_stream *s, mp_context *cx, const char **data, size_t *len,
                                int *err)
{
    mp_poll r = pump(s, cx, false, err);
    if (r == MP_PENDING)
        return r;
    if (*err == 0) {
        *data = s->pbuf + s->poff;
        *len = s->plen - s->poff;
    } else {
        *len = 0;
    }
    return MP_READY;
}

void md_tls_stream_consume(md_tls_stream *s, size_t n)
{
    s->poff += n;
    if (s->poff > s->plen) {
        fprintf(stderr, "md_tls_stream_consume: %zu past %zu\n", s->poff, s->plen);
        abort();
    }
}

bool md_tls_stream_writing(const md_tls_stream *s)
{
    return s->writing;
}

mp_poll md_tls_stream_encrypt(md_tls_stream *s, mp_context *cx, const char *data, size_t len,
                              int *err)
{
    if (flush(s, cx) == MP_PENDING)
        return MP_PENDING;
    size_t n;
    /* Room for every record at once: grown record by record in bio_write, a 64 KiB write
     * was five reallocations, each copying what the records before it had made. A burst's
     * room comes whole from the thread's batch cache. */
    size_t need = len + (len / PLAIN_CAP + 1) * RECORD_OVERHEAD;
    if (s->failed == 0 && len != 0 &&
        ((need > 4096 && need <= MD_OUTBUF_BATCH && md_outbuf_batch(&s->w) != 0) ||
         md_outbuf_grow(&s->w, need) != 0))
        fail(s, -ENOMEM);
    err_reset();
    if (s->failed == 0 && len != 0 && SSL_write_ex(s->ssl, data, len, &n) != 1)
        fail(s, -EPROTO);
    *err = s->failed;
    /* Only records of the caller's pin w (bio_write): with none, a read's output may
     * still be appended. Set after SSL_write_ex, whose own records all go in. */
    if (*err == 0 && len != 0)
        s->writing = true;
    return MP_READY;
}

mp_poll md_tls_stream_flush(md_tls_stream *s, mp_context *cx, int *err)
{
    if (flush(s, cx) == MP_PENDING)
        return MP_PENDING;
    s->writing = false;
    *err = s->failed;
    return MP_READY;
}

mp_poll md_tls_stream_write(md_tls_stream *s, mp_context *cx, const char *data, size_t len,
                            int *err)
{
    if (!s->writing) {
        if (md_tls_stream_encrypt(s, cx, data, len, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
    }
    return md_tls_stream_flush(s, cx, err);
}

mp_poll md_tls_stream_close_notify(md_tls_stream *s, mp_context *cx)
{
    if (s->writing)
        return MP_READY; /* a write left unfinished: nothing may follow it */
    if (s->failed == 0 && SSL_is_init_finished(s->ssl) &&
        !(SSL_get_shutdown(s->ssl) & SSL_SENT_SHUTDOWN)) {
        (void)SSL_shutdown(s->ssl);
        ERR_clear_error();
    }
    return flush(s, cx);
}

void md_tls_stream_notify(md_tls_stream *s)
{
    if (s->failed == 0 && !s->writing && md_outbuf_pending(&s->w) == 0 &&
        SSL_is_init_finished(s->ssl) && !(SSL_get_shutdown(s->ssl) & SSL_SENT_SHUTDOWN)) {
        (void)SSL_shutdown(s->ssl);
        ERR_clear_error();
        int fd = mp_tcp_fileno(s->tcp);
        size_t n = md_outbuf_pending(&s->w);
        if (n != 0 && fd >= 0)
            (void)send(fd, md_outbuf_pending_data(&s->w), n, MSG_DONTWAIT | MSG_NOSIGNAL);
        md_outbuf_consume(&s->w, n);
    }
}

int md_tls_stream_shutdown(md_tls_stream *s)
{
    md_tls_stream_notify(s);
    return mp_tcp_shutdown(s->tcp);
}

bool md_tls_stream_idle(const md_tls_stream *s)
{
    return s->failed == 0 && !s->eof && s->poff >= s->plen && md_outbuf_pending(&s->w) == 0 &&
           !s->writing;
}

const char *md_tls_last_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, len, "%s", r != NULL ? r : "unknown error");
    ERR_clear_error();
    return buf;
}

int md_tls_file_readable(const char *path, char *why, size_t len)
{
    int rc = md_cfgfile_check(path); /* a FIFO would hold the open, and OpenSSL's after it */
    if (rc != 0) {
        snprintf(why, len, "cannot open %s: %s", path, md_cfgfile_why(-rc));
        return -EINVAL;
    }
    return 0;
}
