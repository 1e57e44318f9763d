/* HTTP/2 (RFC 9113) on the wire, over nghttp2, without sockets: one md_h2_conn per connection
 * that chose h2 (ALPN on [https], the client preface on a plaintext listener with h2c on).
 *
 * nghttp2 does the framing, HPACK, flow control and the protocol's own checks; this file maps
 * its streams onto md_http_req (request_internal.h), so that every handler answers over HTTP/2
 * through the same request API as over HTTP/1.1. Each stream owns its request and an output
 * buffer that the handler appends its body to (md_http_req_out); the response head goes to
 * nghttp2 through the request's head writer (md_http_wire), never as HTTP/1 text, and the body
 * leaves as DATA frames as the peer's windows allow.
 *
 * The I/O layer (server/conn_http.c) drives it from the connection's task:
 *
 *   md_h2_conn_new(&h, srv, link, now)        once h2 is chosen; queues our SETTINGS
 *   loop:
 *     md_h2_conn_run(h, cx, now)              polls the streams' pending handlers
 *     md_h2_conn_send(h, out, max)            frames into out; write them
 *     md_h2_conn_done(h)                      nothing more to read or write: close
 *     read; md_h2_conn_feed(h, now, data, n)  all of it taken; < 0: close at once
 *     arm a timer for md_h2_conn_deadline(h); when it passes md_h2_conn_timeout(h, now)
 *     (and for md_h2_conn_release_at(h): md_h2_conn_release(h) gives a quiet session's frame
 *     buffer and empty stream map back)
 *   on graceful stop: md_h2_conn_drain(h, now) GOAWAY's notice, then the last stream id
 *                                             (also when a reload finds streams open: see
 *                                             conn_http.c)
 *   md_h2_conn_free(h)                        always, last
 *
 * Streams are polled by the connection's task rather than each being a task: a pending handler
 * (static on the blocking pool, anything that waits on a waker) holds its waker on the
 * connection's task, and each poll of the task polls every stream that can move (a stream
 * whose output is full waits until DATA frames have drained it). One task per connection
 * keeps nghttp2's session, which is not thread-safe, on one thread at a time without a lock,
 * and costs no spawn per stream; a stream that waits never holds the others up, because
 * nothing here blocks: every wait is a poll that says pending.
 */
#ifndef MD_HTTP2_H
#define MD_HTTP2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outbuf.h"
#include "http/http.h"

struct mp_context;

typedef struct md_h2_conn md_h2_conn;

/* The HTTP/2 connection preface a client sends first (RFC 9113 3.4). */
#define MD_H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define MD_H2_PREFACE_LEN 24

/* Whether data (len bytes, the connection's first) starts as the preface does (the bytes
 * there are, at least 4): the plaintext listener's h2c by prior knowledge. */
bool md_h2_is_preface(const char *data, size_t len);

/* A session for srv's limits; link is the connection's, handed to srv's hooks (access log,
 * peer, request_begin: the session moves to the settings it returns when a stream begins with
 * none open). 0 or -ENOMEM. */
int md_h2_conn_new(md_h2_conn **out, md_http_server *srv, struct md_http_link *link,
                   uint64_t now_ns);
/* The settings its streams run under now (srv's request_begin moves them). */
md_http_server *md_h2_conn_server(const md_h2_conn *h);
/* Takes all of data[0..len). 0, or a negative errno: close now (a flood, a bad preface). */
int md_h2_conn_feed(md_h2_conn *h, uint64_t now_ns, const char *data, size_t len);
/* Polls the pending handlers of the streams that can move; true when something changed (a
 * handler answered, queued output, finished or failed). */
bool md_h2_conn_run(md_h2_conn *h, struct mp_context *cx, uint64_t now_ns);
/* Appends frames to out until it holds max bytes or nothing is left to send. 0 or -ENOMEM. */
int md_h2_conn_send(md_h2_conn *h, md_outbuf *out, size_t max);
/* The session is over (GOAWAY sent or received, no stream left): close once out is written. */
bool md_h2_conn_done(const md_h2_conn *h);
/* When md_h2_conn_timeout() must run next (monotonic ns); UINT64_MAX: no timer. */
uint64_t md_h2_conn_deadline(const md_h2_conn *h);
/* The deadline passed: GOAWAY queued, and why (MD_HTTP_EXPIRED_NONE: not yet). A stalled
 * send (a window held at zero) is MD_HTTP_EXPIRED_NONE with *send_stall set. */
md_http_expired md_h2_conn_timeout(md_h2_conn *h, uint64_t now_ns, bool *send_stall);
/* Graceful stop (RFC 9113 6.8): a GOAWAY naming stream 2^31-1 and a PING now; once the PING's
 * ACK comes (or a second after now_ns, md_h2_conn_deadline), the final GOAWAY with the last
 * stream processed. The streams up to it finish, then md_h2_conn_done(). */
void md_h2_conn_drain(md_h2_conn *h, uint64_t now_ns);
/* Streams open (begun and not yet closed). */
uint32_t md_h2_conn_streams(const md_h2_conn *h);
/* A quiet session's memory: with no stream open, MD_H2_RELEASE_NS after the last frames it
 * wrote, nghttp2's frame buffer (16 KiB, whose pages the frames touched stay resident) and its
 * stream map's table (4 KiB, empty once no stream is open: nghttp2 keeps no closed one) can go
 * back to the system. md_h2_conn_release_at(): when (UINT64_MAX: nothing to give back); the
 * I/O layer arms its timer for it, and calls md_h2_conn_release() then, which returns the
 * bytes it gave back. A second, so that a busy connection, quiet between a response and the
 * next request, never pays for it. */
#define MD_H2_RELEASE_NS UINT64_C(1000000000)
uint64_t md_h2_conn_release_at(const md_h2_conn *h);
size_t md_h2_conn_release(md_h2_conn *h);
/* Why the session ended on the peer's account (a flood, a protocol error): true once it did. */
bool md_h2_conn_refused(const md_h2_conn *h);
/* Cancels pending handlers, frees everything. NULL: nothing. */
void md_h2_conn_free(md_h2_conn *h);

/* /metrics: HTTP/2 connections, streams, and sessions ended for a flood or abuse. */
int md_h2_metrics_text(md_outbuf *out);

#endif
