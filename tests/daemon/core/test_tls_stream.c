/* Tests for daemon/core/tls_stream.c: a TLS stream over one end of a socketpair, driven by a
 * task on a runtime, against an OpenSSL client on the other end in the test's thread. The
 * client reads the records off the socket itself (one at a time, into a memory BIO), so it
 * sees how the stream cut its writes into records. The handshakes of the listeners and the
 * proxy are e2e/test_tls.c's and e2e/test_proxy_tls.c's. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "core/tls_stream.h"
#include "daemon/tls_pki.h"
#include "magpie.h"
#include "test_util.h"

static char dir[PKI_DIR_MAX];

/* The server's side: a handshake, then each of its writes (md_tls_stream_trim() between
 * them), then reads until the peer's end, then close_notify. */
typedef struct server {
    mp_task task;
    mp_tcp tcp;
    md_tls_stream *s;
    const char *out[2];
    size_t out_len[2];
    int phase, next_write;
    int hs_err, write_err, read_err; /* 0, MP_EOF or a negative errno */
    char why[200];                   /* md_tls_stream_why() after a failed handshake */
    char *in;                        /* what it read */
    size_t in_len;
} server;

static mp_poll server_poll(mp_task *t, mp_context *cx)
{
    server *v = mp_container_of(t, server, task);
    int err;
    if (v->phase == 0) {
        if (md_tls_stream_handshake(v->s, cx, &err) == MP_PENDING)
            return MP_PENDING;
        v->hs_err = err;
        if (err != 0) {
            md_tls_stream_why(v->s, v->why, sizeof v->why);
            return MP_READY;
        }
        v->phase = 1;
    }
    while (v->phase == 1 && v->next_write < 2) {
        int i = v->next_write;
        if (v->out_len[i] != 0 &&
            md_tls_stream_write(v->s, cx, v->out[i], v->out_len[i], &err) == MP_PENDING)
            return MP_PENDING;
        if (v->out_len[i] != 0 && err != 0) {
            v->write_err = err;
            return MP_READY;
        }
        md_tls_stream_trim(v->s); /* the next write makes its buffers anew */
        v->next_write++;
    }
    v->phase = 2;
    while (v->phase == 2) {
        const char *data;
        size_t len;
        if (md_tls_stream_read_poll(v->s, cx, &data, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0) {
            v->read_err = err;
            v->phase = 3;
            break;
        }
        v->in = realloc(v->in, v->in_len + len);
        if (v->in == NULL)
            abort(); /* a worker's thread: no assertion of Criterion's here */
        memcpy(v->in + v->in_len, data, len);
        v->in_len += len;
        md_tls_stream_consume(v->s, len);
    }
    if (v->read_err == MP_EOF && md_tls_stream_close_notify(v->s, cx) == MP_PENDING)
        return MP_PENDING;
    return MP_READY;
}

static const mp_task_vtable server_vt = {.poll = server_poll};

/* The client's side: blocking reads of whole records from fd into rbio. */
typedef struct client {
    int fd;
    SSL *ssl;
    BIO *rbio, *wbio;
    bool counting;          /* records are counted once the handshake is done */
    unsigned records, full; /* application-data records, and those of 16 KiB of plaintext */
} client;

static void client_flush(client *c)
{
    char buf[16384];
    int n;
    while ((n = BIO_read(c->wbio, buf, sizeof buf)) > 0)
        cr_assert_eq(write(c->fd, buf, (size_t)n), n);
}

static bool read_full(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got <= 0)
            return false;
        p += got;
        n -= (size_t)got;
    }
    return true;
}

/* One record from the socket into rbio; false at the socket's end. */
static bool client_record(client *c)
{
    unsigned char rec[5 + 16384 + 256];
    if (!read_full(c->fd, rec, 5))
        return false;
    size_t len = (size_t)rec[3] << 8 | rec[4];
    cr_assert_leq(len, sizeof rec - 5, "a record of %zu bytes", len);
    cr_assert(read_full(c->fd, rec + 5, len), "the socket ended inside a record");
    if (c->counting && rec[0] == 23) { /* TLS 1.3: 16 bytes of tag and the inner type */
        c->records++;
        c->full += len == 16384 + 17;
    }
    cr_assert_eq(BIO_write(c->rbio, rec, (int)(5 + len)), (int)(5 + len));
    return true;
}

static SSL_CTX *client_ctx(void)
{
    SSL_CTX *x = SSL_CTX_new(TLS_client_method());
    cr_assert_not_null(x);
    SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION);
    char ca[PKI_DIR_MAX + 16];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    cr_assert_eq(SSL_CTX_load_verify_locations(x, ca, NULL), 1);
    SSL_CTX_set_verify(x, SSL_VERIFY_PEER, NULL);
    return x;
}

static void client_handshake(client *c, SSL_CTX *x)
{
    c->ssl = SSL_new(x);
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_connect_state(c->ssl);
    SSL_set_tlsext_host_name(c->ssl, "localhost");
    for (;;) {
        int r = SSL_do_handshake(c->ssl);
        client_flush(c);
        if (r == 1)
            break;
        cr_assert_eq(SSL_get_error(c->ssl, r), SSL_ERROR_WANT_READ, "the client's handshake");
        cr_assert(client_record(c), "the server closed during the handshake");
    }
    c->counting = true;
}

/* Reads n bytes of plaintext into buf. */
static void client_read(client *c, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t k;
        if (SSL_read_ex(c->ssl, buf + got, n - got, &k) == 1) {
            got += k;
            continue;
        }
        cr_assert_eq(SSL_get_error(c->ssl, 0), SSL_ERROR_WANT_READ);
        client_flush(c);
        cr_assert(client_record(c), "the server closed after %zu of %zu bytes", got, n);
    }
}

/* A runtime, a server task on one end of a socketpair (the SSL server context of the test
 * PKI's ECDSA pair), and the other end for the client. */
typedef struct pair {
    mp_runtime *rt;
    SSL_CTX *sctx;
    server v;
    int cfd;
} pair;

static void pair_start(pair *p, const char *out0, size_t len0, const char *out1, size_t len1)
{
    pki_make(dir);
    memset(p, 0, sizeof *p);
    p->rt = test_runtime(2);
    p->sctx = SSL_CTX_new(TLS_server_method());
    cr_assert_not_null(p->sctx);
    char cert[PKI_DIR_MAX + 16], key[PKI_DIR_MAX + 16];
    snprintf(cert, sizeof cert, "%s/ec.pem", dir);
    snprintf(key, sizeof key, "%s/ec.key", dir);
    cr_assert_eq(SSL_CTX_use_certificate_chain_file(p->sctx, cert), 1);
    cr_assert_eq(SSL_CTX_use_PrivateKey_file(p->sctx, key, SSL_FILETYPE_PEM), 1);
    SSL_CTX_set_mode(p->sctx, SSL_MODE_RELEASE_BUFFERS); /* as the listeners set it */
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    p->cfd = sv[1];
    cr_assert_eq(mp_tcp_open(p->rt, &p->v.tcp, sv[0], 0), 0);
    SSL *ssl = SSL_new(p->sctx);
    cr_assert_not_null(ssl);
    SSL_set_accept_state(ssl);
    cr_assert_eq(md_tls_stream_new(ssl, &p->v.tcp, NULL, NULL, &p->v.s), 0);
    p->v.out[0] = out0;
    p->v.out_len[0] = len0;
    p->v.out[1] = out1;
    p->v.out_len[1] = len1;
    mp_task_init(&p->v.task, &server_vt);
    cr_assert_eq(mp_spawn_joinable(p->rt, &p->v.task), 0);
}

static void pair_finish(pair *p)
{
    cr_assert_eq(mp_join(&p->v.task), 0);
    md_tls_stream_free(p->v.s);
    (void)mp_tcp_close(&p->v.tcp, NULL);
    mp_runtime_free(p->rt);
    SSL_CTX_free(p->sctx);
    close(p->cfd);
    pki_remove(dir);
}

static char *random_bytes(size_t n)
{
    char *b = malloc(n);
    cr_assert_not_null(b);
    uint64_t seed = 2463534242u;
    for (size_t i = 0; i < n; i++)
        b[i] = (char)(test_rand(&seed) >> 56);
    return b;
}

/* A write of 200,000 bytes reaches the peer whole, in records of 16 KiB but the last; after a
 * trim (the buffers freed) a second write works as the first did. The client's close_notify
 * ends the server's reads with MP_EOF, and the server answers it. */
Test(tls_stream, writes_go_whole_in_full_records_and_a_trim_keeps_it_usable, .timeout = 60)
{
    enum { N1 = 200000, N2 = 70000 };
    char *b1 = random_bytes(N1 + N2);
    pair p;
    pair_start(&p, b1, N1, b1 + N1, N2);
    SSL_CTX *x = client_ctx();
    client c = {.fd = p.cfd};
    client_handshake(&c, x);
    char *got = malloc(N1 + N2);
    cr_assert_not_null(got);
    client_read(&c, got, N1 + N2);
    cr_assert_eq(memcmp(got, b1, N1 + N2), 0, "the bytes differ");
    /* 12 full records and one of 3,392 bytes, then 4 full and one of 4,464; TLS 1.3's
     * session tickets come as records too, shorter. */
    cr_assert_eq(c.full, N1 / 16384 + N2 / 16384, "%u full records of %u", c.full, c.records);
    cr_assert_leq(c.records, c.full + 2 + 2, "%u records, %u full", c.records, c.full);
    cr_assert_eq(SSL_shutdown(c.ssl), 0); /* close_notify sent; the server's not yet read */
    client_flush(&c);
    while (client_record(&c) && SSL_shutdown(c.ssl) != 1)
        ;
    cr_assert_eq(SSL_get_shutdown(c.ssl) & SSL_RECEIVED_SHUTDOWN, SSL_RECEIVED_SHUTDOWN,
                 "the server's close_notify");
    pair_finish(&p);
    cr_assert_eq(p.v.write_err, 0);
    cr_assert_eq(p.v.read_err, MP_EOF);
    cr_assert_eq(p.v.in_len, 0);
    free(p.v.in);
    SSL_free(c.ssl);
    SSL_CTX_free(x);
    free(got);
    free(b1);
}

/* What the client sends is read whole, across records; a close without close_notify is a
 * truncation (-EPROTO), not an end. */
Test(tls_stream, reads_span_records_and_a_bare_close_is_a_truncation, .timeout = 60)
{
    enum { N = 100000 };
    char *b = random_bytes(N);
    pair p;
    pair_start(&p, NULL, 0, NULL, 0);
    SSL_CTX *x = client_ctx();
    client c = {.fd = p.cfd};
    client_handshake(&c, x);
    size_t put;
    cr_assert_eq(SSL_write_ex(c.ssl, b, N, &put), 1);
    client_flush(&c);
    cr_assert_eq(shutdown(c.fd, SHUT_WR), 0);
    pair_finish(&p);
    cr_assert_eq(p.v.read_err, -EPROTO);
    cr_assert_eq(p.v.in_len, N);
    cr_assert_eq(memcmp(p.v.in, b, N), 0);
    free(p.v.in);
    SSL_free(c.ssl);
    SSL_CTX_free(x);
    free(b);
}

/* Bytes that are no TLS fail the handshake with -EPROTO and OpenSSL's reason. */
Test(tls_stream, a_handshake_on_plaintext_fails_with_a_reason, .timeout = 60)
{
    pair p;
    pair_start(&p, NULL, 0, NULL, 0);
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(write(p.cfd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    pair_finish(&p);
    cr_assert_eq(p.v.hs_err, -EPROTO);
    cr_assert_neq(p.v.why[0], '\0', "no reason given");
}
