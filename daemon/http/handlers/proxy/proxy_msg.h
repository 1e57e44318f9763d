/* The proxy's messages, without I/O: the request head it sends upstream (hop-by-hop fields
 * removed, forwarding fields added, the body re-framed), and the upstream response's parser
 * (llhttp in HTTP_RESPONSE mode) that checks its framing and hands the client's response, in
 * parts, to a sink: the request API's relay calls (request.h), which frame it for the client's
 * protocol.
 *
 * Hop-by-hop fields (RFC 9110 7.6.1), removed both ways: Connection and every field it names,
 * Keep-Alive, TE, Transfer-Encoding, Upgrade, and every Proxy-* field (credentials meant for
 * this hop never travel on). Content-Length is written anew from the framing, so that a
 * message never carries two framings. Trailer is end-to-end (RFC 9110 6.6.2): it goes on with
 * a body whose trailers go on (chunked, not coded here), and is dropped from any other.
 */
#ifndef MD_PROXY_MSG_H
#define MD_PROXY_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outbuf.h"
#include "http/compress.h"
#include "llhttp.h"

/* How a request body goes upstream. */
typedef enum md_proxy_framing {
    MD_PROXY_BODY_NONE,
    MD_PROXY_BODY_LENGTH,  /* Content-Length: length */
    MD_PROXY_BODY_CHUNKED, /* Transfer-Encoding: chunked */
} md_proxy_framing;

typedef struct md_proxy_req {
    const char *method; /* NUL-terminated */
    const char *target; /* as the client sent it (origin-form or absolute-form) */
    size_t target_len;
    const char *fields; /* "name: value\r\n"... as md_http_req_head() keeps them */
    size_t fields_len;
    const char *peer; /* the client's address; NULL: unknown */
    const char *host; /* Host to send; NULL: the client's (then upstream_host if none) */
    const char *upstream_host;
    bool forwarded, via;
    const char *via_protocol; /* Via's received-protocol (RFC 9110 7.6.3): "1.0", "1.1", "2" */
    bool upgrade;             /* a tunnel was allowed: keep Upgrade and send Connection: upgrade */
    bool hop_count;           /* OPTIONS or TRACE: Max-Forwards goes up one less (RFC 9110 7.6.2) */
    bool keepalive;           /* ask the server to keep the connection */
    uint8_t framing;          /* md_proxy_framing */
    uint64_t length;
} md_proxy_req;

/* Whether a field name is hop-by-hop by itself (not counting those Connection names). */
bool md_proxy_hop_by_hop(const char *name, size_t len);
/* A client's trailer fields (md_http_req_trailers: "name: value" CRLF each, len bytes) as the
 * upstream gets them, into dst (len bytes suffice): hop-by-hop fields and those a trailer must
 * not carry (RFC 9110 6.5.1: framing, routing, authentication, ...) dropped. Bytes written. */
size_t md_proxy_trailers(char *dst, const char *trailers, size_t len);

/* Appends the upstream request head to out. 0, -ENOMEM. */
int md_proxy_request_head(const md_proxy_req *rq, md_outbuf *out);

/* Max-Forwards' value (RFC 9110 7.6.2: 1*DIGIT) in v[0..n): 0 with *hops (UINT64_MAX for a
 * value past it: the most this proxy counts), or -EINVAL. */
int md_proxy_max_forwards(const char *v, size_t n, uint64_t *hops);

/* The value of the first field named name (any case) in fields, or NULL. */
const char *md_proxy_field(const char *fields, size_t len, const char *name, size_t *vlen);

/* The response parser.
 *
 * Interim responses (RFC 9110 15.2): each 1xx but 101 goes to the sink's interim (hop-by-hop
 * fields removed, no framing fields), complete or not at all; the request API passes it on to
 * a client that can take it (md_http_respond_interim). Each head is bounded by max_head on its
 * own; more than MD_PROXY_MAX_INTERIM of them before the final response is GARBAGE.
 *
 * Trailers (RFC 9110 6.5): a body whose length is not known (chunked upstream) ends with the
 * upstream's trailer fields, without hop-by-hop fields and those a trailer must not carry
 * (framing, routing, request modifiers, authentication, response control data,
 * Content-Encoding/-Type/-Range, Trailer), bounded by max_head (past it, none), and never
 * after a body coded here. Whether they reach the client is its protocol's (RFC 9112 7.1.2
 * allows dropping them).
 *
 * Compression on the fly (a route's compress, http/compress.h; md_proxy_resp.compress): a
 * final 200, 403 or 404 (the statuses nginx's gzip compresses) with a body, a Content-Type
 * among compress_types, no Content-Encoding of its own (never coded twice), no
 * Cache-Control: no-transform (RFC 9110 7.7), and a Content-Length of at least
 * compress_min_length or none (chunked or close-delimited), to a client that takes a coding
 * (accept_coding: md_http_req_accept_coding, none for HTTP/1.0), has its body coded as it
 * streams: Content-Length and Accept-Ranges dropped, Content-Encoding added, a strong ETag
 * weakened (W/), its length unknown to the sink. Such a response, coded or not (HEAD, a small
 * body, a client that takes none), gets Vary: Accept-Encoding unless a Vary of the upstream's
 * names it or is "*". 206, 304 and every other status pass as they are. The coded output goes
 * to the sink's body like any body, so the caller's back-pressure on out bounds it. */
#define MD_PROXY_MAX_INTERIM 32

typedef enum md_proxy_resp_rc {
    MD_RESP_MORE = 0,     /* all input used, more to come */
    MD_RESP_DONE = 1,     /* the response is complete: *used ends it */
    MD_RESP_GARBAGE = -1, /* not a valid response (status line, fields, framing) */
    MD_RESP_TOO_BIG = -2, /* head over max_head */
    MD_RESP_NOMEM = -3,
    MD_RESP_UPGRADE = 2, /* a 101 for a tunnel: *used ends its head */
} md_proxy_resp_rc;

/* What the client's body is known by. */
typedef enum md_proxy_client_framing {
    MD_CLIENT_NONE,   /* no body (HEAD, 1xx, 204, 304) */
    MD_CLIENT_LENGTH, /* the upstream's Content-Length */
    MD_CLIENT_STREAM, /* nothing before its end (chunked or close-delimited upstream, or coded) */
} md_proxy_client_framing;

/* A body whose length is not known before its end (md_proxy_sink.head). */
#define MD_PROXY_LENGTH_UNKNOWN UINT64_MAX

/* Where the client's response goes, each call with the sink's arg; each returns 0 or
 * -ENOMEM. Fields are "Name: value" CRLF lines: the upstream's end-to-end ones, the route's
 * rules applied, Via, the coding's. reason: the upstream's reason phrase (empty when it was
 * not visible ASCII). magpied's (proxy.c) are the request API's relay calls. */
typedef struct md_proxy_sink {
    int (*interim)(void *arg, unsigned status, const char *reason, size_t reason_len,
                   const char *fields, size_t len);
    /* The final head, or a 101's; length: MD_PROXY_LENGTH_UNKNOWN when the body ends with
     * the upstream's (or has none: HEAD, 204, 304, whose Content-Length stays in fields). */
    int (*head)(void *arg, unsigned status, const char *reason, size_t reason_len,
                const char *fields, size_t len, uint64_t length);
    int (*body)(void *arg, md_outbuf *out, const char *data, size_t len);
    /* The body's end (any but MD_CLIENT_NONE's), with the trailers kept (may be none). */
    int (*end)(void *arg, md_outbuf *out, const char *trailers, size_t len);
} md_proxy_sink;

typedef struct md_proxy_resp {
    llhttp_t parser;
    md_outbuf *out; /* where the sink writes the client's response (during feed) */
    const md_proxy_sink *sink;
    void *sink_arg;
    uint32_t max_head; /* bytes of the head (status line through the empty line) */
    bool head_request; /* a response to HEAD: no body whatever it says */
    bool tunnel_ok;    /* a 101 may start a tunnel */
    bool via;          /* append Via: 1.1 magpied */
    bool date;         /* add a Date where the upstream's final head has none */
    bool dated;        /* the head just written had a Date of the upstream's (write_head) */
    /* The route's header rules (http/headers.h) on the final head; NULL: none. */
    const struct md_route_headers *headers;
    /* The route's compression (NULL or codings 0: off) and the coding the client takes
     * (MD_CODING_NONE: none). */
    const md_route_compress *compress;
    uint8_t accept_coding;
    uint8_t coding;          /* the body's coding, decided at the final head */
    bool add_vary;           /* the final head gets Vary: Accept-Encoding */
    md_zstream *zs;          /* the body's compressor while coding */
    md_outbuf coded;         /* its output, on its way to the sink */
    bool started;            /* a byte of the response has come */
    bool head_sent;          /* the client's head went to the sink */
    bool complete;           /* the message is complete */
    bool close_delimited;    /* the body ends when the connection does */
    bool upstream_keepalive; /* the upstream keeps the connection after it */
    uint8_t client_framing;  /* md_proxy_client_framing */
    bool value_open;
    bool trailers_over; /* the trailers passed max_head: dropped */
    uint16_t status;
    uint32_t interim;    /* 1xx responses seen (passed on or dropped) */
    uint64_t head_bytes; /* bytes of the current head so far */
    uint64_t body_bytes; /* body bytes passed to the client */
    uint64_t length;     /* the Content-Length, when there is one */
    char *fields;        /* the current head's fields, "name: value\r\n"... */
    size_t fields_len, fields_cap;
    size_t trailer_at; /* after the final head: the trailers are fields[trailer_at..) */
    char reason[64];
    uint8_t reason_len;
    int error; /* md_proxy_resp_rc of a callback's failure */
} md_proxy_resp;

void md_proxy_resp_init(md_proxy_resp *r, uint32_t max_head, bool head_request,
                        const md_proxy_sink *sink, void *sink_arg);
/* Parses data[0..len): the client's head and body go to the sink (into out) as they come. *used:
 * the bytes used (less than len only with DONE or UPGRADE: what follows the response). */
int md_proxy_resp_feed(md_proxy_resp *r, const char *data, size_t len, size_t *used,
                       md_outbuf *out);
/* The upstream closed: DONE for a close-delimited body (the sink's end called), GARBAGE for
 * anything cut short. */
int md_proxy_resp_eof(md_proxy_resp *r, md_outbuf *out);
void md_proxy_resp_free(md_proxy_resp *r);

#endif
