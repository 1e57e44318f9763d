/* Inside http/: the request as the protocols fill it and request.c and accounting.c read it.
 *
 * A protocol (http1.c) owns the md_http_req it hands to handlers: it sets the exchange's
 * context at each entry point (md__http_req_enter), zeroes the per-request part when a request
 * begins, fills in what it parses (method, version, target, kept fields, the body), and calls
 * the md__http_req_* steps below at the request's head, for each body span, and when it is
 * complete. Nothing here is llhttp's; handlers (http/handlers/) never include this header.
 */
#ifndef MD_REQUEST_INTERNAL_H
#define MD_REQUEST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/handler.h"
#include "http/request.h"

struct md_http_link;

/* How a protocol puts a response head on the wire, when it is not HTTP/1.x text (response.c,
 * appended to out: the default, md_http_req.wire NULL). The request layer calls head() once
 * per response with what every answering call knows: the status, the handler's more fields
 * ("Name: value" CRLF lines, fields_len bytes; NULL when none), Allow (or NULL), the content
 * type and the content length (the body's, also for HEAD; none is sent for 304); whatever
 * body follows is then appended to out by the request layer or the handler, as over HTTP/1.1.
 * 0 or -ENOMEM. HTTP/2 (http2.c) submits its HEADERS frame here. */
typedef struct md_http_wire {
    int (*head)(md_http_req *r, unsigned status, const char *allow, const char *fields,
                size_t fields_len, const char *ctype, uint64_t length);
    /* A relayed head (md_http_respond_relayed): the status and exactly the fields given (no
     * Date, Server or Content-Type of ours), Content-Length only when length is not
     * MD_HTTP_LENGTH_UNKNOWN. 0 or -ENOMEM. */
    int (*relay)(md_http_req *r, unsigned status, const char *fields, size_t fields_len,
                 uint64_t length);
    /* Trailers after a relayed body (md_http_relay_end): kept until the body has left. 0
     * or -ENOMEM. NULL: none can be sent. */
    int (*trailers)(md_http_req *r, const char *fields, size_t fields_len);
    /* An interim response (1xx but 101) before the final head: the status and the fields
     * given. 0 or -ENOMEM. NULL: the protocol passes none on. */
    int (*interim)(md_http_req *r, unsigned status, const char *fields, size_t fields_len);
} md_http_wire;
_Static_assert(MD_HTTP_FIELDS <= 16, "field_cut has a bit per kept field");

struct md_http_req {
    /* Zeroed when the request's first byte arrives, up to target[]. */
    bool keep_alive;    /* its response keeps the connection */
    bool method_done;   /* method is the request's */
    bool streaming;     /* MD_BODY_STREAM: the handler's response head is already out */
    bool piping;        /* MD_BODY_PIPE: the pending handler takes the body span by span */
    bool pipe_read;     /* ... and has asked for the next span (MD_PENDING_READ) */
    bool body_done;     /* the whole body has been parsed */
    bool collect;       /* MD_BODY_GATHER: the body is gathered in body */
    bool path_bad;      /* the path does not decode (md_path_normalise): 400 */
    bool path_long;     /* the path is longer than the request keeps (MD_HTTP_TARGET_MAX): 414 */
    bool forbidden;     /* its route's allow and deny rules refuse the client: 403 */
    bool limited;       /* its route's limit_rate refuses the client now: 429 */
    bool unauthorized;  /* its route's auth_basic refuses the credentials: 401 */
    bool client_set;    /* client and client_text hold the real_ip address */
    bool asterisk;      /* the target is "*" */
    bool target_full;   /* target longer than MD_HTTP_TARGET_MAX: the rest is not kept */
    bool path_done;     /* saw '?': path_len is the path's length */
    bool has_length;    /* a Content-Length came */
    bool upgrade;       /* Connection: upgrade with Upgrade */
    bool continued;     /* the protocol told the client to send its body (100 Continue) */
    bool misdirected;   /* its Host picks another site than its TLS server name: 421 */
    bool relay_chunked; /* a relayed body is chunked (HTTP/1.1, md_http_respond_relayed) */
    uint8_t site;       /* the site (sites.h) whose routes it was looked up in */
    uint16_t host_len;  /* bytes kept in host[] */
    uint8_t method;     /* enum md_method, once method_done */
    uint8_t http_major; /* the version, as the protocol last read it */
    uint8_t http_minor;
    uint8_t field_len[MD_HTTP_FIELDS]; /* bytes kept in field[] */
    uint16_t field_cut;                /* bit per md_http_field: longer than kept */
    uint16_t field_seen;               /* bit per md_http_field: it came (its value may be "") */
    uint16_t referer_len;              /* bytes kept in referer[] (only with an access log) */
    uint16_t user_agent_len;
    uint16_t retry_s;    /* limited: Retry-After's seconds */
    uint32_t target_len; /* bytes kept in target[] */
    uint32_t path_len;   /* bytes of target[] before the '?', once path_done */
    uint32_t npath;
    size_t body_len;                 /* bytes gathered in body */
    const struct md_route *route;    /* NULL: 404 */
    const char *path;                /* the normalised path: into target[] or path_buf[] */
    struct md_http_pending *pending; /* a handler's response still to come (handler.h) */
    const char *upstream;            /* md_http_req_set_upstream(), for the access log */
    uint64_t upstream_ms;
    uint64_t start_ns; /* the entry point's now when its first byte came */
    const char *hsts;  /* Strict-Transport-Security for its responses; NULL: none */
    char target[MD_HTTP_TARGET_MAX];
    char host[MD_HTTP_FIELD_KEEP]; /* the first Host value's first bytes */
    char referer[MD_HTTP_FIELD_KEEP];
    char user_agent[MD_HTTP_FIELD_KEEP];
    char path_buf[MD_HTTP_TARGET_MAX]; /* the decoded path, when it differs from the raw one */
    char field[MD_HTTP_FIELDS][MD_HTTP_COND_KEEP];
    /* With client_set: the client's address a route's real_ip found (http/real_ip.h). */
    struct sockaddr_storage client;
    char client_text[48];

    /* Not zeroed: the exchange's context. srv and link from md__http_req_init() on (srv kept
     * the connection's by the protocol), the rest set by md__http_req_enter() at every entry
     * point. */
    md_http_server *srv;       /* the connection's settings */
    const md_http_wire *wire;  /* the protocol's head writer; NULL: HTTP/1.x (response.c) */
    md_outbuf *out;            /* where responses go; NULL outside an entry point */
    struct md_http_link *link; /* the connection, for the server's hooks (http.h) */
    uint64_t now_ns;           /* the entry point's now */
    uint64_t done_ns; /* srv->mono_clock() at this entry point's first response; 0: not read */
    /* Set to NULL and 0 when the protocol takes the request (md__http_req_init) and released
     * when it gives it back (md__http_req_fini). */
    char *body; /* a gathered body (MD_BODY_GATHER), until its response */
    size_t body_cap;
    /* With srv->keep_fields: the request's target, CRLF, then each header field as
     * "name: value" CRLF (values without their surrounding whitespace), until its response. */
    char *kept;
    size_t kept_len, kept_cap;
    uint32_t kept_target; /* bytes of the target at the start of kept */
    /* A body being compressed on the fly (compress.h), from its head until its last byte
     * (md_http_req_write); NULL: none. */
    md_zstream *zs;
    /* With srv->keep_fields, HTTP/1.1's chunked body: its trailer fields as kept's fields,
     * apart from kept (whose bytes the proxy points into), at most max_header_bytes of them
     * (more: all dropped, trailers_over). */
    char *trailers;
    size_t trailers_len, trailers_cap;
    bool trailers_over;
};

/* Every entry point of a protocol starts here: the entry point's part of the context. */
static inline void md__http_req_enter(md_http_req *r, uint64_t now_ns, md_outbuf *out)
{
    r->now_ns = now_ns;
    r->done_ns = 0;
    r->out = out;
}

/* A request state just taken (from a cache: its bytes are stale), for link under srv (which
 * the protocol sets again whenever the connection's settings change). */
static inline void md__http_req_init(md_http_req *r, md_http_server *srv, struct md_http_link *link)
{
    r->srv = srv;
    r->link = link;
    r->wire = NULL;
    r->body = NULL;
    r->body_cap = 0;
    r->kept = NULL;
    r->kept_len = r->kept_cap = 0;
    r->kept_target = 0;
    r->zs = NULL;
    r->trailers = NULL;
    r->trailers_len = r->trailers_cap = 0;
    r->trailers_over = false;
}

/* Appends len bytes at at to the kept field f (a protocol joins a repeated field with ", "
 * itself). Past MD_HTTP_COND_KEEP bytes the field is cut, and a cut field reads as absent;
 * but X-Forwarded-For and Forwarded keep their last bytes, where the hops nearest to us are,
 * marked cut (real_ip.h). */
void md__http_req_keep(md_http_req *r, unsigned f, const char *at, size_t len);

/* Releases what the request holds before its state is given back: inline, since on the
 * keep-alive path it holds nothing (md__http_req_release() frees what it does). */
void md__http_req_release(md_http_req *r);
static inline void md__http_req_fini(md_http_req *r)
{
    if (r->body != NULL || r->kept != NULL || r->zs != NULL || r->trailers != NULL)
        md__http_req_release(r);
}

/* Whether the response now being written ends the connection. */
static inline bool md__http_req_closes(const md_http_req *r)
{
    return !r->keep_alive;
}

/* Whether h[0..n) (trailing whitespace aside) is an authority as RFC 3986 3.2 shapes it,
 * without userinfo (RFC 9110 4.2.4): an IP-literal in brackets ("[" hex digits, ':' and '.',
 * or "v" IPvFuture, "]") or a name with no bracket, then nothing or ':' and digits. Its bytes
 * are the protocol's to check (http1.c's byte classes, nghttp2's); empty passes, a port
 * without a host (":80") does not. Host, and
 * :authority, are a 400 (RFC 9110 7.2), or a malformed HTTP/2 request, when it is not. */
bool md_http_authority_ok(const char *h, size_t n);

/* An absolute-form target's authority (RFC 9112 3.2.2: "http://" or "https://" in any case,
 * then up to the first '/' or '?'): its start, *len its length, or NULL for another form. */
const char *md_http_target_authority(const char *t, size_t n, size_t *len);

/* Finds the route for the target: origin-form "/path", or absolute-form "http://host/path";
 * sets r->route, r->path (normalised: routes.h) or r->path_bad. r->route is NULL before (the
 * request's fixed part zeroed) and stays NULL when no route matches. */
void md__http_req_route(md_http_req *r);
/* The error the core answers a request with instead of its route's handler, once the route is
 * known: 414 for a path longer than the request keeps (MD_HTTP_TARGET_MAX; a long query is
 * not), 400 for a path that does not decode, 421 for a Host that picks another site than the
 * connection's TLS server name (http/sites.h), 404, 429 for a client over the route's rate
 * (http/ratelimit.h), 403 for a client the route's allow and deny rules refuse (http/acl.h),
 * 401 for credentials its auth_basic refuses (http/auth_basic.h), 405; 0 when the request
 * goes on (to its handler, or to the core's OPTIONS). */
static inline unsigned md__http_req_refusal(const md_http_req *r)
{
    const md_route *route = r->route;
    if (r->asterisk)
        return 0;
    if (r->path_long)
        return 414;
    if (r->path_bad)
        return 400;
    if (r->misdirected)
        return 421;
    if (route == NULL)
        return 404;
    if (r->limited)
        return 429;
    if (r->forbidden)
        return 403;
    if (r->unauthorized)
        return 401;
    if (r->method != MD_OPTIONS && !md_route_allows(route, r->method))
        return 405;
    return 0;
}
/* Whether the head goes to the route's handler: it has an on_head, the client is let in and
 * the route takes the method. Then md__http_req_refusal() is 0 (a route was found, so the path
 * decoded and the target is not "*"), and the protocol need not ask it. */
static inline bool md__http_req_wants_head(const md_http_req *r)
{
    const struct md_route *route = r->route;
    return route != NULL && route->handler->on_head != NULL && !r->forbidden && !r->limited &&
           !r->unauthorized && !r->misdirected && md_route_allows(route, r->method);
}
/* The head is complete and md__http_req_wants_head(): the handler's on_head says what becomes
 * of the body. 0 or -ENOMEM. */
int md__http_req_head(md_http_req *r, uint64_t length, bool chunked);
/* A span of the body, by that mode: to the handler (stream, pipe) or gathered. 0, -ENOMEM (the
 * handler failed), or 500 (a gathered body could not grow). */
int md__http_req_body(md_http_req *r, const char *at, size_t len);
/* The request is complete and was not streamed: what the core answers itself (OPTIONS *, the
 * refusals, OPTIONS), else the route's handler. 0, MD_HANDLER_PENDING, or -ENOMEM. */
int md__http_req_answer(md_http_req *r);
/* An error response (its status table body, text/plain), with Allow when allow is set; close
 * forces "Connection: close". 0 or -ENOMEM. */
int md__http_respond_error(md_http_req *r, unsigned code, bool close, const char *allow);

/* accounting.c: every response passes here once, with the bytes of its body (0 for HEAD). */
void md__http_account_response(md_http_req *r, unsigned code, uint64_t body_bytes);
/* ... and the bytes in and out of each entry point, by listener kind (core/kinds.h). */
void md__http_account_bytes(const md_http_server *srv, unsigned listener, size_t in, size_t out);

#endif
