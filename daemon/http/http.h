/* The HTTP/1.1 connection core: bytes in, responses out, no sockets.
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
 */
#ifndef MD_HTTP_H
#define MD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#include "llhttp.h"
#include "core/kinds.h"
#include "core/log.h"
#include "core/outbuf.h"

struct md_metrics;
struct md_http_conn;
struct md_http_pending;
struct md_route;
struct md_route_table;
struct mp_context;
struct md_http_io;
struct mp_runtime;

/* Handlers a registry may hold (http/handlers/handlers.c checks it). */
enum { MD_HANDLERS_MAX = 16 };

typedef struct md_http_limits {
    uint32_t max_request_line;     /* method SP target SP version; longer: 414 */
    uint32_t max_header_bytes;     /* request line through the empty line; longer: 431 */
    uint32_t max_headers;          /* header fields; more: 431 */
    uint64_t max_body_bytes;       /* longer: 413, before reading for Content-Length */
    uint32_t header_timeout_ms;    /* whole head, from its first byte (from init when first) */
    uint32_t body_timeout_ms;      /* longest pause between reads of a body */
    uint32_t keepalive_timeout_ms; /* idle between requests; 0 turns keep-alive off */
    uint32_t max_requests_per_connection; /* 0 = unlimited */
    uint32_t min_body_rate;               /* bytes/s a body must average after the grace; 0 = off */
    uint32_t min_rate_grace_ms; /* before min_body_rate (and the I/O layer's send rate) apply */
    /* For the I/O layer (conn.c), not the core: */
    uint32_t send_timeout_ms; /* longest a write may make no progress; 0 = never */
    uint32_t min_send_rate;   /* bytes/s a blocked write must average after the grace; 0 = off */
    uint32_t send_buffer;     /* SO_SNDBUF for each connection; 0 = the kernel's default */
} md_http_limits;

/* The shipped defaults (config/magpied.conf documents them). */
void md_http_limits_default(md_http_limits *l);

/* One response, as the access log wants it (core/log.h). The core fills all but peer and
 * time, which the I/O layer adds; it cuts the target at MD_HTTP_TARGET_MAX and Referer and
 * User-Agent at MD_HTTP_FIELD_KEEP. */
typedef md_access_entry md_http_exchange;

/* What every connection of one listener shares. Immutable while a connection uses it, and it
 * must outlive every connection that uses it. The I/O layer may give a connection another one
 * between requests (md_http_conn_set_server), so that a reload's limits apply from the next
 * request on while the one in flight finishes under the limits it started with. */
typedef struct md_http_server {
    md_http_limits limits;
    struct md_metrics *metrics; /* NULL: no accounting */
    /* The routes (routes.h); NULL: the built-in four. Immutable while in use. */
    const struct md_route_table *routes;
    /* Appends the GET /metrics body; NULL: /metrics is 404. md_metrics_text fits. */
    int (*metrics_text)(void *arg, md_outbuf *out);
    void *metrics_arg;
    time_t (*clock)(void); /* wall clock for Date, read once per entry point; NULL: time() */
    /* Monotonic ns (uv_hrtime fits), read once per entry point, as its first response is
     * queued: a request's duration runs from the entry point's now when its first byte came
     * (for a read: when the bytes were known to be there) to then, so one answered within
     * that read takes its real time too. NULL: the entry point's now (durations inside one
     * feed are then 0). */
    uint64_t (*mono_clock)(void);
    /* Called once per response when set; NULL: Referer and User-Agent are not even kept. */
    void (*access_log)(void *arg, const struct md_http_conn *c, const md_http_exchange *x);
    void *access_log_arg;
    /* Called when a request's first byte arrives, before anything of it is parsed: the
     * request boundary, where it may call md_http_conn_set_server(). NULL: nothing. */
    void (*request_begin)(struct md_http_conn *c);
    /* Keep every request's whole target and header fields for handlers (the proxy's
     * md_http_req_head()): set when some route forwards requests; false costs nothing. */
    bool keep_fields;
    /* The client's address without port, for handlers (md_http_req_peer()); NULL: none. */
    const char *(*peer)(struct md_http_conn *c);
    /* The client's socket address into *out, for a route's allow and deny rules: 0, or a
     * negative errno (the peer is gone). NULL: not known (only "all" rules match). */
    int (*peer_addr)(struct md_http_conn *c, struct sockaddr_storage *out);
    /* The runtime the connections' tasks run on (for a handler's timers and upstream
     * sockets); NULL in tests of the core alone. */
    struct mp_runtime *rt;
    /* Each handler's state for this generation (md_handler.gen_new), by its place in the
     * registry: md_http_server_state() finds it. */
    void *handler_state[MD_HANDLERS_MAX];
} md_http_server;

typedef enum md_http_want {
    MD_HTTP_WANT_READ,    /* all input used: write out (if pending), read more */
    MD_HTTP_WANT_WRITE,   /* out reached MD_HTTP_OUT_HIGH_WATER: write, then feed the rest */
    MD_HTTP_WANT_CLOSE,   /* write out, then close; feed nothing more */
    MD_HTTP_WANT_HANDLER, /* a handler is pending: write out, then md_http_conn_resume() */
    MD_HTTP_WANT_WAIT,    /* md_http_conn_resume(): the handler holds a waker; poll later */
} md_http_want;

/* Pending output past which parsing stops until the peer reads (pipelined floods). */
#define MD_HTTP_OUT_HIGH_WATER (256u * 1024u)
/* Bytes of a request target kept, for routing (the path before any '?': a longer path is
 * 404) and for the access log (which shows a longer target cut, with "..."). A '#' (a
 * fragment, which a request target never has: RFC 9112 3.2) is 400. */
#define MD_HTTP_TARGET_MAX 1024
/* Echo bodies with a Content-Length up to this are gathered and answered once complete,
 * so that a body that never completes gets no 200; longer ones stream (their head goes out
 * with the request head, and an incomplete one ends short of its Content-Length). */
#define MD_HTTP_ECHO_GATHER (64u * 1024u)
/* Bytes of Referer and User-Agent kept for the access log. */
#define MD_HTTP_FIELD_KEEP 256
/* Request fields kept for handlers (validators, ranges, codings): the first
 * MD_HTTP_COND_KEEP bytes of their values, several fields of one name joined with ", "; a
 * longer value counts as absent (md_http_req_field), which a handler answers as if the field
 * had not come (a full 200: never wrong). */
typedef enum md_http_field {
    MD_FIELD_IF_NONE_MATCH,
    MD_FIELD_IF_MODIFIED_SINCE,
    MD_FIELD_RANGE,
    MD_FIELD_IF_RANGE,
    MD_FIELD_ACCEPT_ENCODING,
    MD_FIELD_IF_MATCH,
    MD_FIELD_IF_UNMODIFIED_SINCE,
    MD_HTTP_FIELDS,
} md_http_field;
#define MD_HTTP_COND_KEEP 128
/* Responses are counted by status class, 1xx .. 5xx: MD_HTTP_STATUS_CLASSES (core/kinds.h). */

/* The request being parsed. Zeroed when its first byte arrives, up to target[]. */
typedef struct md_http_req {
    uint16_t status;    /* the error a callback decided on */
    bool keep_alive;    /* its response keeps the connection */
    bool streaming;     /* MD_BODY_STREAM: the handler's response head is already out */
    bool piping;        /* MD_BODY_PIPE: the pending handler takes the body span by span */
    bool pipe_read;     /* ... and has asked for the next span (MD_PENDING_READ) */
    bool body_done;     /* the whole body has been parsed */
    bool collect;       /* MD_BODY_GATHER: the body is gathered in conn.body */
    bool path_bad;      /* the path does not decode (md_path_normalise): 400 */
    bool forbidden;     /* its route's allow and deny rules refuse the client: 403 */
    bool asterisk;      /* the target is "*" */
    bool head_counting; /* counting its head bytes (from the method's first byte) */
    bool method_done;
    bool value_open;   /* a header value has started and not completed */
    bool value_cut;    /* ... and its last span ended exactly at the end of a feed */
    bool target_full;  /* target longer than MD_HTTP_TARGET_MAX: the rest is not kept */
    bool path_done;    /* saw '?': path_len is the path's length */
    bool gap_open;     /* between a field's colon and its value's first span */
    bool gap_newline;  /* ... and a line ended in there: an obs-fold */
    uint8_t name_len;  /* bytes of the current name, saturating at 255 */
    char name[20];     /* its first bytes, enough for the names we look at */
    uint8_t header;    /* which known header the current value belongs to */
    uint8_t expect;    /* what the Expect fields asked for */
    uint8_t token_pos; /* bytes of the expected token matched in the current value */
    bool te_other;     /* a Transfer-Encoding value other than "chunked" */
    bool te_empty;     /* an empty Transfer-Encoding value */
    uint8_t hosts;     /* Host fields, saturating */
    uint8_t host_pos;  /* how far the current Host value is (http.c) */
    bool host_bad;     /* a Host value that is not uri-host [":" port] */
    uint8_t method_len;
    uint32_t fields;      /* header fields */
    uint32_t target_len;  /* bytes kept in target[] */
    uint32_t path_len;    /* bytes of target[] before the '?', once path_done */
    uint16_t referer_len; /* bytes kept in referer[] (only with an access log) */
    uint16_t user_agent_len;
    uint8_t field_len[MD_HTTP_FIELDS]; /* bytes kept in field[] */
    uint8_t field_cut;                 /* bit per md_http_field: longer than kept */
    uint64_t url_len;                  /* bytes of the whole target */
    uint64_t head_bytes;               /* head bytes in earlier feeds */
    uint64_t body_bytes;               /* body, chunk extensions and trailers so far */
    uint64_t body_length;              /* the Content-Length, when the request had one */
    size_t body_len;                   /* bytes gathered in conn.body */
    const char *head_from;             /* where this feed's share of the head starts */
    const char *value_end;
    const char *field_end;        /* end of the last field-name span (this feed) */
    const char *gap_from;         /* where this feed's share of the gap starts */
    const struct md_route *route; /* NULL: 404 */
    const char *path;             /* the normalised path: into target[] or path_buf[] */
    uint32_t npath;
    struct md_http_pending *pending; /* a handler's response still to come (handler.h) */
    uint64_t start_ns;               /* first byte */
    uint64_t body_ns;                /* when the head completed (min_body_rate's base) */
    char target[MD_HTTP_TARGET_MAX];
    char referer[MD_HTTP_FIELD_KEEP];
    char user_agent[MD_HTTP_FIELD_KEEP];
    char path_buf[MD_HTTP_TARGET_MAX]; /* the decoded path, when it differs from the raw one */
    char field[MD_HTTP_FIELDS][MD_HTTP_COND_KEEP];
} md_http_req;

/* One connection. Owned by its task, so touched by one thread at a time (possibly a different
 * one after each wake): nothing here is shared, nothing is atomic. */
typedef struct md_http_conn {
    llhttp_t parser;
    md_http_server *srv; /* its settings; changed only at a request boundary */

    /* Valid during one entry point only. */
    md_outbuf *out;
    const char *feed_start, *feed_end;
    uint64_t now_ns;

    uint8_t phase;     /* IDLE, HEAD, BODY (http.c) */
    uint8_t pause;     /* why a callback paused the parser */
    bool closing;      /* the last response has been produced (or none will be) */
    bool draining;     /* md_http_conn_drain(): the next response closes */
    bool oom;          /* out could not grow */
    uint64_t requests; /* requests answered */
    uint64_t since_ns; /* IDLE: went idle; HEAD: deadline base; BODY: last body read */
    char *body;        /* a gathered body (MD_BODY_GATHER), until its response */
    size_t body_cap;
    /* With srv->keep_fields: the request's target, CRLF, then each header field as
     * "name: value" CRLF (values without their surrounding whitespace), until its response. */
    char *kept;
    size_t kept_len, kept_cap;
    uint32_t kept_target; /* bytes of the target at the start of kept */

    uint64_t done_ns; /* srv->mono_clock() at this entry point's first response; 0: not read */
    bool req_zeroed;  /* req was zeroed by feed and nothing has used it since */

    /* The request being parsed: allocated by md_http_conn_feed() when bytes arrive on an idle
     * connection, freed by md_http_conn_idle(), so that an idle keep-alive connection is
     * only this struct (a few hundred bytes). */
    md_http_req *req;
} md_http_conn;

void md_http_conn_init(md_http_conn *c, md_http_server *srv, uint64_t now_ns);

/* Gives the connection other settings. Only at a request boundary: from srv->request_begin,
 * or between entry points while no request is in flight. */
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

/* The peer shut down its side. Always MD_HTTP_WANT_CLOSE: complete requests were answered by
 * feed, and a partial one cannot be. */
int md_http_conn_eof(md_http_conn *c, uint64_t now_ns, md_outbuf *out);

/* When md_http_conn_timeout() must run next (monotonic ns); UINT64_MAX: no timer. */
uint64_t md_http_conn_deadline(const md_http_conn *c);

/* Why md_http_conn_timeout() would close at now_ns (MD_HTTP_EXPIRED_NONE: it would not). */
typedef enum md_http_expired {
    MD_HTTP_EXPIRED_NONE,
    MD_HTTP_EXPIRED_KEEPALIVE, /* idle between requests */
    MD_HTTP_EXPIRED_HEADER,    /* head not complete in header_timeout_ms (or nothing sent) */
    MD_HTTP_EXPIRED_BODY,      /* a pause in the body longer than body_timeout_ms */
    MD_HTTP_EXPIRED_BODY_RATE, /* the body averaged less than min_body_rate after the grace */
} md_http_expired;
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
