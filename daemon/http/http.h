/* What every HTTP protocol shares with the handlers and the I/O layer: the settings of a
 * listener's connections (md_http_server, md_http_limits), what an entry point asks of its
 * caller (md_http_want), and the sizes of what a request keeps.
 *
 * Nothing here knows the wire. The HTTP/1.1 connection (http1.h) parses with llhttp; the
 * request/response API handlers see (request.h) is the same whatever protocol brought the
 * request, so that an HTTP/2 stream can drive the same handlers.
 */
#ifndef MD_HTTP_H
#define MD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#include "core/kinds.h"
#include "core/log.h"
#include "core/outbuf.h"
#include "http/handlers/static/file_cache.h"

struct md_metrics;
/* The connection a request came on, as the I/O layer knows it: opaque to http/, which only
 * hands it back to md_http_server's hooks. One connection has one link, whatever its wire
 * protocol: HTTP/1.1's is its md_http_conn's address (md_http_conn_link()), and the I/O layer
 * gives an HTTP/2 session the same (md_h2_conn_new()). */
struct md_http_link;
struct md_route_table;
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
    uint32_t http2_max_streams; /* HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS */
    uint32_t http2_window;      /* HTTP/2 receive window of each stream (request bodies) */
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
 * must outlive every connection that uses it. A connection takes another one at a request's
 * start, the one its request_begin hook returns (or, between requests, from
 * md_http_conn_set_server), so that a reload's limits apply from the next request on while
 * the one in flight finishes under the limits it started with. */
typedef struct md_http_server {
    md_http_limits limits;
    md_file_cache_limits file_cache; /* the static handler's open-file cache; zero: off */
    struct md_metrics *metrics;      /* NULL: no accounting */
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
    /* Called once per response when set, with the connection the request came on (the I/O
     * layer's, opaque to the request API); NULL: Referer and User-Agent are not even kept. */
    void (*access_log)(void *arg, const struct md_http_link *link, const md_http_exchange *x);
    void *access_log_arg;
    /* The request boundary, before anything of the request is parsed: its first byte over
     * HTTP/1.1, a stream opening on an HTTP/2 connection with none open. Returns the settings
     * the connection serves it under, now or newer ones (a reload's), which the protocol uses
     * from this request on. NULL: now, always. */
    struct md_http_server *(*request_begin)(struct md_http_link *link, struct md_http_server *now);
    /* Keep every request's whole target and header fields for handlers (the proxy's
     * md_http_req_head()): set when some route forwards requests; false costs nothing. */
    bool keep_fields;
    /* The client's address without port, for handlers (md_http_req_peer()); NULL: none. */
    const char *(*peer)(struct md_http_link *link);
    /* The client's socket address into *out, for a route's allow and deny rules: 0, or a
     * negative errno (the peer is gone). NULL: not known (only "all" rules match). */
    int (*peer_addr)(struct md_http_link *link, struct sockaddr_storage *out);
    /* Virtual hosts (the route table's sites): whether the connection is TLS (HSTS is sent
     * on TLS only), the server name its client sent (SNI; NULL: none), and the site its
     * listener takes for a Host no site names (0: the default site). NULL: plaintext, no
     * name, the default site. */
    bool (*secure)(struct md_http_link *link);
    const char *(*servername)(struct md_http_link *link);
    unsigned (*default_site)(const struct md_http_server *srv, struct md_http_link *link);
    /* The runtime the connections' tasks run on (for a handler's timers and upstream
     * sockets); NULL in tests of the core alone. */
    struct mp_runtime *rt;
    /* Each handler's state for this generation (md_handler.gen_new), by its place in the
     * registry: md_http_server_state() finds it. */
    void *handler_state[MD_HANDLERS_MAX];
} md_http_server;

/* Which of a connection's deadlines passed (HTTP/1.1's md_http_conn_expired(), HTTP/2's
 * md_h2_conn_timeout()). */
typedef enum md_http_expired {
    MD_HTTP_EXPIRED_NONE,
    MD_HTTP_EXPIRED_KEEPALIVE, /* idle between requests */
    MD_HTTP_EXPIRED_HEADER,    /* head not complete in header_timeout_ms (or nothing sent) */
    MD_HTTP_EXPIRED_BODY,      /* a pause in the body longer than body_timeout_ms */
    MD_HTTP_EXPIRED_BODY_RATE, /* the body averaged less than min_body_rate after the grace */
    MD_HTTP_EXPIRED_SEND_RATE, /* HTTP/2: the peer's windows let less than min_send_rate out */
} md_http_expired;

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
    MD_FIELD_AUTHORIZATION, /* for auth_basic (a value longer than kept: 401) */
    /* For real_ip_header: the last MD_HTTP_COND_KEEP bytes are kept, the hops nearest us. */
    MD_FIELD_X_FORWARDED_FOR,
    MD_FIELD_FORWARDED,
    MD_HTTP_FIELDS,
} md_http_field;
#define MD_HTTP_COND_KEEP 128
/* Responses are counted by status class, 1xx .. 5xx: MD_HTTP_STATUS_CLASSES (core/kinds.h). */

#endif
