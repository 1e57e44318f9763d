/* The HTTP/1.1 connection: bytes in, responses out, no sockets.
 *
 * One md_http_conn per accepted connection. The I/O layer drives it:
 *
 *   md_http_conn_init(c, srv, now)           on accept
 *   loop:
 *     n = read(fd, buf)                       0 bytes: md_http_conn_eof()
 *     want = md_http_conn_feed(c, now, buf, n, &used, out)
 *     write out's pending bytes (one write for every response parsed from this read); if
 *       the write must wait, md_outbuf_own(out) first: a canned response may be lent to out
 *       from this thread's cache, which the thread's next entry point may rewrite
 *     MD_HTTP_WANT_WRITE: feed buf + used again once out has drained below the mark
 *     MD_HTTP_WANT_CLOSE: flush out, then close
 *     MD_HTTP_WANT_HANDLER: a handler answers later (http/handler.h): flush out, then call
 *       md_http_conn_resume() until it says otherwise; then feed buf + used again
 *     arm a timer for md_http_conn_deadline(c); when it fires call md_http_conn_timeout()
 *   on graceful stop: md_http_conn_drain(c)
 *   md_http_conn_close(c)                     always, last
 *
 * Every entry point returns an md_http_want (>= 0) or a negative errno (-ENOMEM when out
 * cannot grow; close without flushing). Responses go out in request order, all appended to the
 * one md_outbuf, so a pipelined batch is answered with one write. After the first response
 * that closes (an error, "Connection: close", the request limit), no further input is parsed.
 *
 * Times are monotonic nanoseconds from the caller (uv_hrtime()), and from srv->mono_clock for
 * the end of a request's duration; the Date header comes from srv->clock.
 *
 * This is the wire protocol only (http1.c): framing, keep-alive, pipelining, 100-continue and
 * the connection's errors and deadlines. The request it parses is handed to the route's handler
 * as an md_http_req (request.h), which answers without knowing it came over HTTP/1.1. Only the
 * I/O layer (server/) and tests include this header; handlers never do.
 */
#ifndef MD_HTTP1_H
#define MD_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outbuf.h"
#include "http/http.h"

struct md_http1_req;
struct md_http_io;
struct mp_context;

/* One connection. Owned by its task, so touched by one thread at a time (possibly a different
 * one after each wake): nothing here is shared, nothing is atomic. */
typedef struct md_http_conn {
    md_http_server *srv; /* its settings; changed only at a request boundary */

    uint8_t phase;     /* IDLE, HEAD, BODY (http1.c) */
    uint8_t pause;     /* why a callback paused the parser */
    bool closing;      /* the last response has been produced (or none will be) */
    bool draining;     /* md_http_conn_drain(): the next response closes */
    bool oom;          /* out could not grow */
    bool h2c;          /* a plaintext listener with h2c on: no 400 to bytes not HTTP/1's */
    bool req_zeroed;   /* req was zeroed by feed and nothing has used it since */
    uint64_t requests; /* requests answered */
    uint64_t since_ns; /* IDLE: went idle; HEAD: deadline base; BODY: last body read */

    /* The request being parsed (http1.c: llhttp's parser and per-request state, then the
     * md_http_req handlers see): taken from the thread's cache by md_http_conn_feed() when bytes
     * arrive on an idle connection, given back by md_http_conn_idle(), so that an idle keep-alive
     * connection is only this struct. */
    struct md_http1_req *req;
} md_http_conn;

void md_http_conn_init(md_http_conn *c, md_http_server *srv, uint64_t now_ns);

/* The connection's link (http.h): its own address. An I/O layer that embeds c finds itself
 * from it (md_http_link_conn() and its container), and hands an HTTP/2 session on the same
 * connection the same link. */
static inline struct md_http_link *md_http_conn_link(md_http_conn *c)
{
    return (struct md_http_link *)(void *)c;
}
static inline md_http_conn *md_http_link_conn(struct md_http_link *link)
{
    return (md_http_conn *)(void *)link;
}

/* Gives the connection other settings. Only at a request boundary (the connection applies
 * what srv->request_begin returns with it), or between entry points while no request is in
 * flight. */
void md_http_conn_set_server(md_http_conn *c, md_http_server *srv);

/* Parses data[0..len) and appends every response it completes to out. *used: bytes consumed
 * (len unless MD_HTTP_WANT_WRITE). */
int md_http_conn_feed(md_http_conn *c, uint64_t now_ns, const char *data, size_t len, size_t *used,
                      md_outbuf *out);

/* The I/O layer, after MD_HTTP_WANT_HANDLER or MD_HTTP_WANT_WAIT (and a flush of out): polls
 * the pending handler from the connection's task (cx), lending it io (handler.h).
 * MD_HTTP_WANT_HANDLER: it queued output, flush and call again; MD_HTTP_WANT_WAIT: it holds a
 * waker, call again when the task is polled; MD_HTTP_WANT_READ: done (or, MD_BODY_PIPE, the
 * handler wants the body's next span), feed the input left over; MD_HTTP_WANT_CLOSE; or
 * -ENOMEM. */
int md_http_conn_resume(md_http_conn *c, struct mp_context *cx, struct md_http_io *io,
                        uint64_t now_ns, md_outbuf *out);

/* Whether the pending handler's next poll writes the queued output itself
 * (md_http_pending.writes_output): then the I/O layer polls without flushing first. */
bool md_http_conn_pending_writes_output(const md_http_conn *c);

/* The peer shut down its side. Always MD_HTTP_WANT_CLOSE: complete requests were answered by
 * feed, and a partial one cannot be. */
int md_http_conn_eof(md_http_conn *c, uint64_t now_ns, md_outbuf *out);

/* When md_http_conn_timeout() must run next (monotonic ns); UINT64_MAX: no timer. */
uint64_t md_http_conn_deadline(const md_http_conn *c);

/* Why md_http_conn_timeout() would close at now_ns (MD_HTTP_EXPIRED_NONE: it would not). */
md_http_expired md_http_conn_expired(const md_http_conn *c, uint64_t now_ns);

/* The timer fired. Before the deadline: MD_HTTP_WANT_READ, nothing done. After it: idle
 * connections close silently; a request in its head or body gets 408 and closes (also a body
 * slower than min_body_rate once min_rate_grace_ms have passed since its head). */
int md_http_conn_timeout(md_http_conn *c, uint64_t now_ns, md_outbuf *out);

/* Graceful stop: an idle connection closes now (MD_HTTP_WANT_CLOSE); one with a request in
 * flight finishes it, answers with "Connection: close", and closes (MD_HTTP_WANT_READ now). */
int md_http_conn_drain(md_http_conn *c);

/* Frees the request state of a connection between requests, and says whether it is between
 * requests (false: a request is in flight, nothing is freed). The I/O layer calls it when the
 * connection waits for input with nothing left to parse or write, and then frees its output
 * buffer too; the next feed allocates the state again. */
bool md_http_conn_idle(md_http_conn *c);

/* Releases what the connection holds. Call once, after the last entry point. */
void md_http_conn_close(md_http_conn *c);

#endif
