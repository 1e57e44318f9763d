/* A TLS stream over an mp_tcp, for a task that polls (tls_stream.c): the client side of TLS
 * to an upstream server (the proxy's connections, the health checks), OpenSSL 3 doing the
 * protocol.
 *
 * Its shape is server/tls.c's transport: the SSL object sits on a BIO of ours whose read side
 * hands OpenSSL the stream's own read view (mp_tcp_read_poll, consumed as OpenSSL takes it: no
 * second ciphertext buffer) and whose write side appends to a ciphertext buffer written with
 * the stream's write (mp_tcp_write_poll, or the caller's bounded write). The handshake runs in
 * the task that polls, never on the loop's thread; everything it waits on goes through the
 * same polls as plaintext. The calls mirror mp_tcp's: read_poll, consume, write, shutdown.
 *
 * Thread rules: one task at a time uses a stream (as mp_tcp's owner); a pooled stream passes
 * to another task with its mp_tcp (mp_tcp_disown), whose hand-over orders it.
 */
#ifndef MD_TLS_STREAM_H
#define MD_TLS_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

#include "magpie.h"

typedef struct md_tls_stream md_tls_stream;

/* A new stream on tcp (its owner's) for ssl (taken: freed with the stream), which the caller
 * has set up (SSL_set_connect_state, server name, session). 0 or -ENOMEM (ssl freed). */
int md_tls_stream_new(SSL *ssl, mp_tcp *tcp, md_tls_stream **out);
/* Frees the SSL object and the buffers; sends nothing (md_tls_stream_shutdown first). NULL:
 * nothing. */
void md_tls_stream_free(md_tls_stream *s);
SSL *md_tls_stream_ssl(const md_tls_stream *s);

/* Runs the handshake: MP_READY with *err 0 once done, -EPROTO when it failed (OpenSSL's error
 * queue and SSL_get_verify_result say why: md_tls_stream_why), the socket's error, or MP_EOF
 * for a close half way; MP_PENDING while it waits for the peer. */
mp_poll md_tls_stream_handshake(md_tls_stream *s, mp_context *cx, int *err);
/* Why the handshake (or a record) failed, for a log line: the certificate's verification
 * error when that was it ("certificate verify failed: hostname mismatch"), else OpenSSL's
 * last reason; "" when nothing is known. Clears OpenSSL's error queue. */
const char *md_tls_stream_why(md_tls_stream *s, char *buf, size_t len);

/* As mp_tcp_read_poll: plaintext (MP_READY, *len > 0), or *len 0 with *err MP_EOF (the peer's
 * close_notify), -EPROTO (a bad record, or a close without close_notify: a truncation looks
 * the same) or the socket's error; MP_PENDING until more arrives. */
mp_poll md_tls_stream_read_poll(md_tls_stream *s, mp_context *cx, const char **data, size_t *len,
                                int *err);
void md_tls_stream_consume(md_tls_stream *s, size_t n);
/* As mp_tcp_write_poll: encrypts data[0..len) and writes the records; after MP_PENDING call
 * again with the same arguments. */
mp_poll md_tls_stream_write(md_tls_stream *s, mp_context *cx, const char *data, size_t len,
                            int *err);
/* A close_notify if the stream is sound (its handshake done, no error, nothing unwritten) and
 * the socket takes it at once, before the caller closes the stream. OpenSSL keeps the session
 * of a connection so closed resumable; one freed without it is not (an abrupt close may mean
 * an attack, RFC 5246 7.2.1). The owner's call, or the pool's for an idle connection. */
void md_tls_stream_notify(md_tls_stream *s);
/* A close_notify and then the sending side shut (mp_tcp_shutdown), without waiting: the alert
 * goes if the socket takes it at once (a tunnel's half-close). 0 or a negative errno. */
int md_tls_stream_shutdown(md_tls_stream *s);
/* Whether the stream holds nothing unread nor unwritten (plaintext or ciphertext): a pooled
 * connection must, or its next request would read a stale answer. */
bool md_tls_stream_idle(const md_tls_stream *s);

#endif
