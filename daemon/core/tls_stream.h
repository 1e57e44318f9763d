/* A TLS stream over an mp_tcp, for a task that polls (tls_stream.c), OpenSSL 3 doing the
 * protocol: the transport of both sides, the [https] listener's connections (server/tls.c
 * wraps it with its handshake deadline and counters) and the proxy's connections to upstream
 * servers (http/handlers/proxy/upstream_tls.c).
 *
 * The SSL object sits on a BIO of ours whose read side hands OpenSSL the stream's own read
 * view (mp_tcp_read_poll, consumed as OpenSSL takes it: no second ciphertext buffer) and whose
 * write side appends to a ciphertext buffer written with the writer given (mp_tcp_write_poll,
 * or the caller's bounded write: the server's send limits). The handshake runs in the task
 * that polls, never on the loop's thread; everything it waits on goes through the same polls
 * as plaintext. Output made while reading (a handshake flight, TLS 1.3's session tickets, an
 * alert) is written before the next read. An idle stream holds no buffer: the plaintext and
 * ciphertext buffers are freed when it waits for the peer or is trimmed (md_tls_stream_trim),
 * and with SSL_MODE_RELEASE_BUFFERS OpenSSL's own are too.
 *
 * Thread rules: one task at a time uses a stream (as mp_tcp's owner); a pooled stream passes
 * to another task with its mp_tcp (mp_tcp_disown), whose hand-over orders it.
 */
#ifndef MD_TLS_STREAM_H
#define MD_TLS_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "magpie.h"

typedef struct md_tls_stream md_tls_stream;

/* Writes data[0..len) in mp_tcp_write_poll's shape (call again with the same arguments after
 * MP_PENDING). */
typedef mp_poll (*md_tls_stream_write_fn)(void *arg, mp_context *cx, const char *data, size_t len,
                                          int *err);

/* A new stream on tcp (its owner's) for ssl (taken: freed with the stream), which the caller
 * has set up (SSL_set_connect_state or _accept_state, server name, session); write NULL:
 * mp_tcp_write_poll on tcp. 0 or -ENOMEM (ssl freed). */
int md_tls_stream_new(SSL *ssl, mp_tcp *tcp, md_tls_stream_write_fn write, void *write_arg,
                      md_tls_stream **out);
/* Frees the SSL object and the buffers; sends nothing (md_tls_stream_notify first). NULL:
 * nothing. */
void md_tls_stream_free(md_tls_stream *s);
SSL *md_tls_stream_ssl(const md_tls_stream *s);

/* Runs the handshake: MP_READY with *err 0 once done, -EPROTO when it failed
 * (md_tls_stream_why says why), the socket's error, or MP_EOF for a close half way;
 * MP_PENDING while it waits for the peer. (A read runs it too: a server need not call it.) */
mp_poll md_tls_stream_handshake(md_tls_stream *s, mp_context *cx, int *err);
/* Why the stream failed, for a log line: the certificate's verification error when that was
 * it ("certificate verify failed: hostname mismatch"), else OpenSSL's reason; "" when nothing
 * is known. Taken when it failed, whichever thread asks later. */
const char *md_tls_stream_why(const md_tls_stream *s, char *buf, size_t len);
/* OpenSSL's error code at the failure (ERR_GET_REASON's input); 0: none. */
unsigned long md_tls_stream_error(const md_tls_stream *s);
/* Ciphertext bytes received so far (the server's handshake rate, whether one began). */
uint64_t md_tls_stream_bytes_in(const md_tls_stream *s);
/* The first bytes the peer sent, up to 8 (*len of them; 0 before any): a TLS record begins
 * with 20..23, an SSLv2 hello with 0x80 or more, a plaintext request with a letter. */
const char *md_tls_stream_first_bytes(const md_tls_stream *s, size_t *len);

/* As mp_tcp_read_poll: plaintext (MP_READY, *len > 0), or *len 0 with *err MP_EOF (the peer's
 * close_notify), -EINTR (mp_tcp_interrupt, passed on once), -EPROTO (a failed handshake, a bad
 * record, or a close without close_notify: a truncation looks the same) or the socket's or
 * writer's error; MP_PENDING until more arrives. */
mp_poll md_tls_stream_read_poll(md_tls_stream *s, mp_context *cx, const char **data, size_t *len,
                                int *err);
void md_tls_stream_consume(md_tls_stream *s, size_t n);
/* As mp_tcp_write_poll: encrypts data[0..len) and writes the records; after MP_PENDING call
 * again with the same arguments. */
mp_poll md_tls_stream_write(md_tls_stream *s, mp_context *cx, const char *data, size_t len,
                            int *err);
/* The same in two steps, for a caller whose plaintext does not stay put: encrypt (MP_PENDING
 * while earlier output is still going; data is taken whole at MP_READY with *err 0), then
 * flush until MP_READY. */
mp_poll md_tls_stream_encrypt(md_tls_stream *s, mp_context *cx, const char *data, size_t len,
                              int *err);
mp_poll md_tls_stream_flush(md_tls_stream *s, mp_context *cx, int *err);
/* Whether an encrypted write is still going out. */
bool md_tls_stream_writing(const md_tls_stream *s);
/* close_notify, written with the writer, before the sending side is shut: MP_READY once
 * done or failed (or at once when a write is unfinished: nothing may follow it). */
mp_poll md_tls_stream_close_notify(md_tls_stream *s, mp_context *cx);
/* A close_notify if the stream is sound (its handshake done, no error, nothing unwritten) and
 * the socket takes it at once, before the caller closes the stream. OpenSSL keeps the session
 * of a connection so closed resumable; one freed without it is not (an abrupt close may mean
 * an attack, RFC 5246 7.2.1). The owner's call, or the pool's for an idle connection. */
void md_tls_stream_notify(md_tls_stream *s);
/* md_tls_stream_notify, then the sending side shut (mp_tcp_shutdown): a tunnel's half-close.
 * 0 or a negative errno. */
int md_tls_stream_shutdown(md_tls_stream *s);
/* Whether the stream holds nothing unread nor unwritten (plaintext or ciphertext) and has
 * neither failed nor ended: a pooled connection must, or its next request would read a stale
 * answer. */
bool md_tls_stream_idle(const md_tls_stream *s);
/* Frees the plaintext and ciphertext buffers if they hold nothing: for a stream put aside
 * without a read waiting (a pooled upstream connection). Same thread rule as the rest. */
void md_tls_stream_trim(md_tls_stream *s);

/* OpenSSL's last reason on this thread ("unknown error" when none), into buf, for a message;
 * clears the thread's error queue. */
const char *md_tls_last_reason(char *buf, size_t len);

/* 0 when path opens for reading; else -EINVAL with why "cannot open PATH: REASON" in the
 * system's words (OpenSSL's for a missing file are less clear). */
int md_tls_file_readable(const char *path, char *why, size_t len);

#endif
