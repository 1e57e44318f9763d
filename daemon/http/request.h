/* The request/response API handlers see, whatever protocol brought the request.
 *
 * A protocol (http1.c, an HTTP/2 stream in http2.c) parses a request into an md_http_req,
 * finds its route, and hands it to the route's handler (handler.h). The handler reads the
 * request through the calls below (method, path, target and fields, the body by the mode it
 * chose) and answers through them: a whole response from memory, a canned one, one whose body
 * it produces, or a head followed by a body it streams or sends from a pending poll. None of
 * them says how the response is framed on the wire: the protocol does that (an HTTP/1.x head
 * with Content-Length and Connection today, written by response.c).
 *
 * md_http_req is opaque here: its fields, and the protocol's parser state, are private to
 * http/ (request_internal.h). A handler never sees llhttp.
 *
 * Every call runs on the connection's task, during one of the handler's hooks or a pending
 * poll: one thread at a time, no locking.
 */
#ifndef MD_REQUEST_H
#define MD_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outbuf.h"
#include "http/http.h"

struct md_route;

/* The request: valid from the handler's first hook until its response is done. */
typedef struct md_http_req md_http_req;

/* Methods, numbered as llhttp numbers them (http1.c checks it), which is magpied's numbering
 * for every protocol: the route table's method sets are bits of these (routes.h). The ones
 * handlers name; md_method_name() (in routes.c, with the method table the configuration's
 * method lists are read by) spells any of them. */
enum md_method {
    MD_DELETE = 0,
    MD_GET = 1,
    MD_HEAD = 2,
    MD_POST = 3,
    MD_PUT = 4,
    MD_CONNECT = 5,
    MD_OPTIONS = 6,
    MD_TRACE = 7,
    MD_PATCH = 28,
};
/* "GET" for MD_GET: any method a request can carry (llhttp aborts past its table). */
const char *md_method_name(unsigned method);

unsigned md_http_req_method(const md_http_req *req); /* enum md_method */
bool md_http_req_is_head(const md_http_req *req);    /* HEAD: answer with the head alone */
/* 0 for HTTP/1.0, 1 for HTTP/1.1 (and a later 1.x, served as 1.1). */
unsigned md_http_req_version_minor(const md_http_req *req);
/* 1 for HTTP/1.x, 2 for HTTP/2. */
unsigned md_http_req_version_major(const md_http_req *req);
/* The decoded, normalised path the route was found by (routes.h). */
const char *md_http_req_path(const md_http_req *req, size_t *len);
/* The query of the target (after '?', without it), as the client sent it; NULL when there is
 * none, or when the target was longer than the request keeps (MD_HTTP_TARGET_MAX). */
const char *md_http_req_query(const md_http_req *req, size_t *len);
/* The target was longer than the request keeps: its query (if any) is not all there. */
bool md_http_req_path_cut(const md_http_req *req);
/* A kept request field (http.h's md_http_field), not NUL-terminated; NULL when absent or
 * longer than MD_HTTP_COND_KEEP. A field sent empty is there with *len 0 (an empty list:
 * If-Match: with no tag matches nothing, RFC 9110 13.1.1). */
const char *md_http_req_field(const md_http_req *req, md_http_field f, size_t *len);
/* The authority the request names, as sent (port included): an absolute-form target's, or
 * the first Host value's (cut at MD_HTTP_FIELD_KEEP bytes); NULL with *len 0 when none. */
const char *md_http_req_host(const md_http_req *req, size_t *len);
/* The request target as sent (path and query), *len bytes; *cut when it was longer than
 * MD_HTTP_TARGET_MAX and only its start is kept. */
const char *md_http_req_target(const md_http_req *req, size_t *len, bool *cut);
/* With md_http_server.keep_fields: the target as sent (target_len bytes), then CRLF and each
 * header field as "name: value" CRLF, len bytes in all; valid until the response is done. */
const char *md_http_req_head(const md_http_req *req, size_t *target_len, size_t *len);
/* With md_http_server.keep_fields, once the body is done: an HTTP/1.1 chunked body's trailer
 * fields as "name: value" CRLF each, len bytes; NULL with *len 0 when it had none, or more
 * than [limits] max_header_bytes of them (all dropped then: RFC 9110 6.5.1 lets a recipient
 * discard trailers). HTTP/2 requests' trailers are not kept. Valid until the response is
 * done. */
const char *md_http_req_trailers(const md_http_req *req, size_t *len);
/* The most trailer bytes md_http_req_trailers() gives: [limits] max_header_bytes' maximum. */
#define MD_HTTP_TRAILERS_MAX 1048576
/* The request had a Content-Length (a body of known length, possibly 0). */
bool md_http_req_has_length(const md_http_req *req);
/* It asked to switch protocols (Connection: upgrade with Upgrade). */
bool md_http_req_upgrade(const md_http_req *req);
/* The client was told to send its body (HTTP/1.1's 100 Continue went out). */
bool md_http_req_continued(const md_http_req *req);
/* The body gathered by MD_BODY_GATHER (NULL when empty). */
const char *md_http_req_body(const md_http_req *req, size_t *len);
/* MD_BODY_PIPE: the whole body has been parsed (and given to on_body). */
bool md_http_req_body_done(const md_http_req *req);
/* The client's address without port (md_http_server.peer), or NULL. */
const char *md_http_req_peer(md_http_req *req);
/* The settings the request is served under (its generation's). */
const md_http_server *md_http_req_server(const md_http_req *req);

/* Whether the connection ends after this response (the request asked, a drain, the limits). */
bool md_http_req_closes(const md_http_req *req);
/* ... and from now on it will. */
void md_http_req_close_after(md_http_req *req);

/* A whole response with a body from memory (none for HEAD). fields: more header lines, each
 * ending in CRLF ("Location: /x\r\n"), or NULL. 0 or -ENOMEM. */
int md_http_respond(md_http_req *req, unsigned status, const char *fields, const char *ctype,
                    const char *body, size_t len);
/* A 200 with a body (and ctype) that never changes for this route: from the thread's canned
 * cache, lent when nothing else is owed (response.h). 0 or -ENOMEM. */
int md_http_respond_canned(md_http_req *req, const struct md_route *r, const char *ctype,
                           const char *body, size_t len);
/* A 200 whose body produce() appends to out (the length is known once it is there). 0,
 * -ENOMEM, or 500 answered when produce fails. */
int md_http_respond_produced(md_http_req *req, const char *ctype,
                             int (*produce)(void *arg, md_outbuf *out), void *arg);
/* Only a head, for a body that follows (length bytes of it, unless HEAD): from on_head with
 * MD_BODY_STREAM, or from a pending poll. 0 or -ENOMEM. */
int md_http_respond_head(md_http_req *req, unsigned status, const char *fields, const char *ctype,
                         uint64_t length);
/* Whether the protocol frames the body itself (HTTP/2: DATA frames, end of stream), where
 * HTTP/1.x has the relay calls below chunk it or end it with the connection. */
bool md_http_req_frames_body(const md_http_req *req);
/* A body whose length is not known before its end (md_http_respond_relayed). */
#define MD_HTTP_LENGTH_UNKNOWN UINT64_MAX

/* A relayed response (a proxied one), in any protocol: the upstream's status and end-to-end
 * fields, its body as it comes, its trailers. The protocol writes the framing. In order:
 *
 *   md_http_respond_interim()   each interim response (none or more)
 *   md_http_respond_relayed()   the final head
 *   md_http_relay_body()        each span of the body (none or more)
 *   md_http_relay_end()         the body's end, with the trailers
 *
 * Fields are "Name: value" CRLF lines (fields_len bytes) with the hop-by-hop ones already
 * removed; reason is the upstream's reason phrase (reason_len bytes, may be empty), which only
 * HTTP/1.1 carries. Each writes into the connection's output (the relay calls' out:
 * md_http_req_out()), from a pending poll, and returns 0 or -ENOMEM. */

/* An interim response (1xx but 101), passed on where the client can take it: an HTTP/1.1 or
 * HTTP/2 client, and a 100 Continue only when magpied did not send its own
 * (md_http_req_continued()); HTTP/1.0 clients get none. */
int md_http_respond_interim(md_http_req *req, unsigned status, const char *reason,
                            size_t reason_len, const char *fields, size_t fields_len);
/* The final head, Content-Length from length unless MD_HTTP_LENGTH_UNKNOWN (then the body is
 * chunked to an HTTP/1.1 client, ends with the connection to an HTTP/1.0 one, and ends the
 * stream over HTTP/2). A HEAD's, a 204's or a 304's gets no framing of ours: a
 * Content-Length in fields stays as it is. A 101 (HTTP/1.1 only: -EINVAL otherwise) says
 * Connection: upgrade, and the tunnel's bytes follow. Counted with md_http_count_response(). */
int md_http_respond_relayed(md_http_req *req, unsigned status, const char *reason,
                            size_t reason_len, const char *fields, size_t fields_len,
                            uint64_t length);
/* len bytes of the relayed body into out, framed as its head said. */
int md_http_relay_body(md_http_req *req, md_outbuf *out, const char *data, size_t len);
/* The relayed body's end, with its trailer fields (may be none; already filtered: no framing,
 * routing or authentication fields, RFC 9110 6.5.1), which only a chunked HTTP/1.1 body and
 * HTTP/2 carry: the last chunk, or a HEADERS frame that ends the stream once the body has left.
 * Nothing for a body framed by its length or by the connection's end. */
int md_http_relay_end(md_http_req *req, md_outbuf *out, const char *trailers, size_t trailers_len);
/* The coding, among codings (md_coding bits), that the client's Accept-Encoding takes for a
 * body coded as it streams (compress.h); MD_CODING_NONE for an HTTP/1.0 client, which has no
 * chunked framing (nginx's gzip_http_version). */
unsigned md_http_req_accept_coding(const md_http_req *req, unsigned codings);
/* A relayed response (md_http_respond_relayed): counted, and logged, as one of status with
 * body_bytes of body. */
void md_http_count_response(md_http_req *req, unsigned status, uint64_t body_bytes);
/* The upstream server that answers this request (addr: "HOST:PORT", which must outlive the
 * response: a configuration string) and the milliseconds its response head took, for the
 * access log ($upstream_addr, $upstream_header_time); before the response is counted. */
void md_http_req_set_upstream(md_http_req *req, const char *addr, uint64_t ms);
/* For a handler with md_handler.codes_body: after md_http_respond_head(), whether the body is
 * compressed on the fly (the route's compress, http/compress.h): it must then go through
 * md_http_req_write(), with last set on its final piece (a HEAD has none: false). */
bool md_http_req_coding(const md_http_req *req);
/* len bytes of the body into out: through the compressor when md_http_req_coding(), else as
 * they are. 0, -ENOMEM, or -EIO (the compressor failed). */
int md_http_req_write(md_http_req *req, md_outbuf *out, const char *data, size_t len, bool last);
/* Where a streamed body goes: the connection's output (valid during the call only). */
md_outbuf *md_http_req_out(md_http_req *req);

#endif
