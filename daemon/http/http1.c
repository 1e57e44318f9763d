/* HTTP/1.1 on the wire, over llhttp, without I/O (the driving protocol is in http1.h): the
 * parser's callbacks, framing (Content-Length, chunked), keep-alive and pipelining, Expect:
 * 100-continue, the connection's deadlines, and the errors that close it (400, 408, 413, 414,
 * 417, 431, 501, 505).
 *
 * Phases: IDLE (between requests) -> HEAD (first byte seen) -> BODY (head complete; also for
 * requests without a body, until llhttp reports the message complete) -> IDLE. Responses are
 * appended to the caller's md_outbuf as each request completes, so everything parsed from one
 * read is answered by one write.
 *
 * Per request, one block from the thread's cache: this file's parse state (h1_state), then
 * the md_http_req handlers see (request_internal.h), which the callbacks fill (method,
 * version, target, kept fields) and pass to request.c at the head (route, refusal, the
 * handler's on_head), for each body span, and when the request is complete (the core's own
 * answers, else the handler's on_req). What the response is, request.c and the handler decide;
 * this file decides only what the wire forces: that a refused head closes, that pipelined
 * requests wait behind a pending one, when the parser stops for output to drain.
 *
 * llhttp does most of the checking. The Makefile builds Debian's llhttp 8.1 with
 * LLHTTP_STRICT_MODE (CRLF after chunk data, LF after every CR, no tab, form feed or byte over
 * 0x7f in a target); of the lenient flags only LENIENT_VERSION is on, so that we decide about
 * versions (daemon/README.md says why for each). What llhttp accepts and we refuse with 400:
 * whitespace in or after a field name, an empty field name, obs-fold continuation lines, NUL
 * in a value, Transfer-Encoding in HTTP/1.0, empty, or not ending in chunked (llhttp refuses
 * the latter only after on_headers_complete), a missing or repeated Host in HTTP/1.1, a Host
 * that is not uri-host [":" port], target bytes outside RFC 3986, "*" but for OPTIONS. Both
 * Content-Length with Transfer-Encoding and a repeated Content-Length (even an equal one) are
 * llhttp errors already. Major versions other than 1 get 505; CONNECT, and a request line whose
 * method llhttp does not know (unknown_method()), 501.
 *
 * Limits are counted as bytes arrive, never by buffering: the head is counted on the wire from
 * the method's first byte to the end of the empty line. When the bytes from the head's start
 * to the end of the current feed already fit, the exact count does not matter; otherwise
 * on_headers_complete pauses the parser, and llhttp_get_error_pos() gives the exact end.
 */
#include "http/http1.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/kinds.h"
#include "core/text.h"
#include "http/request_internal.h"
#include "http/response.h"
#include "http/routes.h"
#include "llhttp.h"

/* llhttp's method numbers are magpied's (request.h). */
#define SAME_METHOD(m) ((int)MD_##m == (int)HTTP_##m)
_Static_assert(SAME_METHOD(DELETE) && SAME_METHOD(GET) && SAME_METHOD(HEAD) && SAME_METHOD(POST) &&
                   SAME_METHOD(PUT) && SAME_METHOD(CONNECT) && SAME_METHOD(OPTIONS) &&
                   SAME_METHOD(TRACE) && SAME_METHOD(PATCH),
               "enum md_method follows llhttp");
#undef SAME_METHOD

enum phase { PHASE_IDLE, PHASE_HEAD, PHASE_BODY };

enum pause_reason {
    PAUSE_NONE,
    PAUSE_HEAD,    /* on_headers_complete wants the exact head size, or where it ends */
    PAUSE_FLUSH,   /* out is past the high-water mark */
    PAUSE_STOP,    /* the response just produced closes the connection */
    PAUSE_PENDING, /* the handler answers later (md_http_conn_resume) */
};

/* Header names we look at; the rest only count toward the limits. */
enum header {
    HDR_OTHER,
    HDR_HOST,
    HDR_EXPECT,
    HDR_TE,
    HDR_REFERER,
    HDR_USER_AGENT,
    /* Kept for handlers, in md_http_field's order. */
    HDR_IF_NONE_MATCH,
    HDR_IF_MODIFIED_SINCE,
    HDR_RANGE,
    HDR_IF_RANGE,
    HDR_ACCEPT_ENCODING,
    HDR_IF_MATCH,
    HDR_IF_UNMODIFIED_SINCE,
    HDR_AUTHORIZATION,
    HDR_X_FORWARDED_FOR,
    HDR_FORWARDED,
};
#define IS_FIELD(h) ((h) >= HDR_IF_NONE_MATCH)
static const struct {
    const char *name; /* lower case */
    uint8_t len;
    const char *token; /* the one value we accept, or NULL */
    uint8_t token_len;
} known[] = {
    [HDR_HOST] = {"host", 4, NULL, 0},
    [HDR_EXPECT] = {"expect", 6, "100-continue", 12},
    [HDR_TE] = {"transfer-encoding", 17, "chunked", 7},
    /* Kept for the access log only. */
    [HDR_REFERER] = {"referer", 7, NULL, 0},
    [HDR_USER_AGENT] = {"user-agent", 10, NULL, 0},
    /* Kept for handlers (md_http_req_field). */
    [HDR_IF_NONE_MATCH] = {"if-none-match", 13, NULL, 0},
    [HDR_IF_MODIFIED_SINCE] = {"if-modified-since", 17, NULL, 0},
    [HDR_RANGE] = {"range", 5, NULL, 0},
    [HDR_IF_RANGE] = {"if-range", 8, NULL, 0},
    [HDR_ACCEPT_ENCODING] = {"accept-encoding", 15, NULL, 0},
    [HDR_IF_MATCH] = {"if-match", 8, NULL, 0},
    [HDR_IF_UNMODIFIED_SINCE] = {"if-unmodified-since", 19, NULL, 0},
    [HDR_AUTHORIZATION] = {"authorization", 13, NULL, 0},
    [HDR_X_FORWARDED_FOR] = {"x-forwarded-for", 15, NULL, 0},
    [HDR_FORWARDED] = {"forwarded", 9, NULL, 0},
};

/* EXPECT_SENT: 100-continue, and the 100 went out (head_done()). */
enum expect { EXPECT_NONE, EXPECT_CONTINUE, EXPECT_OTHER, EXPECT_SENT };
/* host_pos: a Host value is host characters, then only trailing whitespace. */
enum host_pos { HOST_EMPTY, HOST_NAME, HOST_TRAIL };
#define TOKEN_BAD 0xff /* token_pos: the value is not the expected token */

/* llhttp's side of a request: what the callbacks track between them. Zeroed together with
 * the md_http_req's fixed part when the request's first byte arrives. */
typedef struct h1_state {
    uint16_t status;    /* the error a callback decided on */
    bool head_counting; /* counting its head bytes (from the method's first byte) */
    bool value_open;    /* a header value has started and not completed */
    bool value_cut;     /* ... and its last span ended exactly at the end of a feed */
    bool gap_open;      /* between a field's colon and its value's first span */
    bool gap_newline;   /* ... and a line ended in there: an obs-fold */
    uint8_t name_len;   /* bytes of the current name, saturating at 255 */
    char name[20];      /* its first bytes, enough for the names we look at */
    uint8_t header;     /* which known header the current value belongs to */
    uint8_t expect;     /* what the Expect fields asked for */
    uint8_t token_pos;  /* bytes of the expected token matched in the current value */
    bool te_other;      /* a Transfer-Encoding value other than "chunked" */
    bool te_empty;      /* an empty Transfer-Encoding value */
    uint8_t hosts;      /* Host fields, saturating */
    uint8_t host_pos;   /* how far the current Host value is */
    bool host_bad;      /* a Host value that is not uri-host [":" port] */
    uint8_t method_len;
    uint8_t unknown;        /* UM_*: a refused method's line being read to its end */
    bool unknown_first;     /* ... refused at the connection's first byte */
    uint32_t unknown_bytes; /* ... and its bytes so far */
    uint32_t fields;        /* header fields */
    uint64_t url_len;       /* bytes of the whole target */
    uint64_t head_bytes;    /* head bytes in earlier feeds */
    uint64_t body_bytes;    /* body, chunk extensions and trailers so far */
    uint64_t body_ns;       /* when the head completed (min_body_rate's base) */
    const char *head_from;  /* where this feed's share of the head starts */
    const char *value_end;  /* end of the last value span (this feed) */
    const char *field_end;  /* end of the last field-name span (this feed) */
    const char *gap_from;   /* where this feed's share of the gap starts */
} h1_state;

/* One request's block: the parse state, then the request. */
struct md_http1_req {
    /* llhttp's state, here rather than in the connection: an idle connection holds no request
     * block, and llhttp is at a message's start then, so the next block's parser is a fresh
     * one (96 bytes an idle connection spares). */
    llhttp_t parser;
    /* The bytes of the feed in progress (valid during md_http_conn_feed() only). */
    const char *feed_start, *feed_end;
    h1_state h;
    md_http_req r;
};

/* Zeroed at a request's first byte: the parse state and the request up to its buffers (not
 * the parser, which runs across pipelined requests). */
static inline void req_zero(struct md_http1_req *q)
{
    size_t from = offsetof(struct md_http1_req, h);
    memset((char *)q + from, 0,
           offsetof(struct md_http1_req, r) + offsetof(md_http_req, target) - from);
}

/* Appends to the kept target and fields (md_http_server.keep_fields). false: out of memory. */
static bool keep(md_http_req *r, const char *at, size_t len)
{
    if (md_bytes_grow(&r->kept, &r->kept_cap, r->kept_len + len, 1024) != 0)
        return false;
    if (len != 0)
        memcpy(r->kept + r->kept_len, at, len);
    r->kept_len += len;
    return true;
}

static bool keeping(const md_http_conn *c)
{
    return c->srv->keep_fields && c->phase == PHASE_HEAD;
}

/* A chunked body's trailer fields, kept as the head's are (the proxy passes them on), apart
 * from the head: at most max_header_bytes of them, past which all are dropped. */
static bool keeping_trailer(const md_http_conn *c)
{
    return c->srv->keep_fields && c->phase == PHASE_BODY && !c->req->r.trailers_over;
}

static bool keep_trailer(md_http_conn *c, const char *at, size_t len)
{
    md_http_req *r = &c->req->r;
    if (r->trailers_len + len > c->srv->limits.max_header_bytes) {
        r->trailers_over = true;
        return true;
    }
    if (md_bytes_grow(&r->trailers, &r->trailers_cap, r->trailers_len + len, 256) != 0)
        return false;
    if (len != 0)
        memcpy(r->trailers + r->trailers_len, at, len);
    r->trailers_len += len;
    return true;
}

/* Request state lives only while a request is in progress (an idle connection keeps none),
 * so a keep-alive connection gives it back after every response and takes it again with the
 * next request's first byte. A few go back to a cache of the thread's (libmagpie's
 * mp_block_cache) rather than to malloc, whose large-chunk path cost ~450 instructions per
 * request. */
static mp_block_cache req_cache = MP_BLOCK_CACHE_INIT(sizeof(struct md_http1_req), 4);

static const llhttp_settings_t settings;

static struct md_http1_req *req_take(md_http_conn *c)
{
    struct md_http1_req *q = mp_block_cache_take(&req_cache);
    if (q == NULL)
        return NULL;
    md__http_req_init(&q->r, c->srv, md_http_conn_link(c));
    llhttp_init(&q->parser, HTTP_REQUEST, &settings);
    /* llhttp refuses versions other than 0.9, 1.0, 1.1 and 2.0 itself, as a malformed request
     * (400). With this flag any DIGIT "." DIGIT passes and head_done() decides: 505 for a
     * major version other than 1 (RFC 9110 15.6.6), a later 1.x served as 1.1. llhttp 8.1 has
     * no setter for it (llhttp_reset() keeps the field). */
    q->parser.lenient_flags |= LENIENT_VERSION;
    q->parser.data = c;
    return q;
}

/* Releases what the request holds and gives its block back (NULL: nothing). */
static void req_give(struct md_http1_req *q)
{
    if (q == NULL)
        return;
    md__http_req_fini(&q->r);
    mp_block_cache_give(&req_cache, q);
}

static md_http_conn *conn_of(llhttp_t *p)
{
    return p->data;
}

/* The version as llhttp has read it so far, for the response's head and the access log: at
 * the head, and before an error answers a request whose head was never complete. */
static void take_version(md_http_conn *c)
{
    c->req->r.http_major = c->req->parser.http_major;
    c->req->r.http_minor = c->req->parser.http_minor;
}

/* A callback's verdict: stop parsing and answer with code, then close. */
static int reject(md_http_conn *c, unsigned code)
{
    c->req->h.status = (uint16_t)code;
    return HPE_USER;
}

/* llhttp knows its methods only, and refuses any other at the first byte that no method of
 * its list has there. Where the request line is one but for its method (the refused byte and
 * what follows it up to a space a token, then a target, "HTTP/" d "." d and CRLF), the method
 * is one magpied does not implement: 501 (RFC 9110 9.1), not 400. The line is read on from
 * the refused byte, across feeds where a read ends inside it (the answer must not depend on
 * where reads end: test_http1_split.c), to its end or to the first byte that cannot belong
 * to one: the status (501, 400), or 0 while it is incomplete. (The bytes before the refused
 * one were a prefix of a known method's.) */
enum { UM_NONE, UM_METHOD, UM_TARGET0, UM_TARGET, UM_CR, UM_LF, UM_VERSION };
static unsigned unknown_method(h1_state *h, const char *p, const char *end, uint32_t max)
{
    static const char version[] = "HTTP/0.0"; /* '0': any digit */
    for (; p < end; p++) {
        unsigned char ch = (unsigned char)*p;
        if (h->unknown != UM_CR && h->unknown != UM_LF)
            h->unknown_bytes++;
        switch (h->unknown) {
        case UM_METHOD:
            if (ch == ' ')
                h->unknown = UM_TARGET0;
            else if (!md_is_tchar(ch))
                return 400;
            break;
        case UM_TARGET0:
        case UM_TARGET:
            if (ch == ' ' && h->unknown == UM_TARGET)
                h->unknown = UM_VERSION;
            else if (ch <= ' ' || ch == 0x7f)
                return 400;
            else
                h->unknown = UM_TARGET;
            break;
        case UM_CR:
            if (ch != '\r')
                return 400;
            h->unknown = UM_LF;
            break;
        case UM_LF:
            return ch == '\n' ? 501 : 400;
        default: { /* UM_VERSION + the byte of version[] due */
            char want = version[h->unknown - UM_VERSION];
            if (want == '0' ? ch < '0' || ch > '9' : ch != (unsigned char)want)
                return 400;
            h->unknown = h->unknown - UM_VERSION + 1 == sizeof version - 1
                             ? UM_CR
                             : (uint8_t)(h->unknown + 1);
        }
        }
        /* max_request_line as for a known method (on_url): a target that leaves no room for
         * " HTTP/1.1" is 414; a method that leaves none for a target, 400. Counted from the
         * refused byte: the prefix of a known method before it (up to 12 bytes) is not. */
        unsigned rest = h->unknown == UM_TARGET ? 9 : h->unknown == UM_VERSION ? 8 : 0;
        if (h->unknown_bytes + rest > max)
            return h->unknown == UM_TARGET || h->unknown == UM_VERSION ? 414 : 400;
    }
    return 0;
}

/* An absolute-form target's authority, as much as is kept: an http or https URI's host is
 * never empty (RFC 9110 4.2.1, 4.2.2: "http:///x" is invalid). Another scheme than http and
 * https names no route (404). */
static bool target_authority_ok(const md_http_req *r)
{
    size_t len;
    const char *a = md_http_target_authority(r->target, r->target_len, &len);
    return a == NULL || (len != 0 && md_http_authority_ok(a, len));
}

/* After a parse error or a rejection: the error response, then close. */
static int fail(md_http_conn *c)
{
    md_http_req *r = &c->req->r;
    h1_state *h = &c->req->h;
    if (h->status == 0 && h->unknown == UM_NONE && !c->oom && !r->streaming &&
        llhttp_get_errno(&c->req->parser) == HPE_INVALID_METHOD) {
        const char *at = llhttp_get_error_pos(&c->req->parser);
        if (at == NULL)
            at = c->req->feed_end;
        /* Refused at the connection's first byte (leading CRLFs aside): nothing of it was a
         * method's prefix. */
        h->unknown_first = c->requests == 0 && h->method_len == 0;
        for (const char *q = c->req->feed_start; h->unknown_first && q < at; q++)
            h->unknown_first = *q == '\r' || *q == '\n';
        h->unknown = UM_METHOD;
        h->status =
            (uint16_t)unknown_method(h, at, c->req->feed_end, c->srv->limits.max_request_line);
        if (h->status == 0)
            return MD_HTTP_WANT_READ; /* the line's rest comes in the next feeds */
    }
    c->closing = true;
    if (c->oom)
        return -ENOMEM;
    if (r->streaming)
        return MD_HTTP_WANT_CLOSE; /* a 200 head is already out: all we can do is close */
    /* On a listener with h2c on, a connection whose first bytes are no HTTP/1.1 request line
     * from their first byte on (an HTTP/2 client preface gone wrong, TLS on a plaintext port)
     * is closed without a 400: RFC 9113 3.4 has an invalid preface end the connection, and
     * such a client would read the 400 as a frame. A request line with a method magpied does
     * not know still gets its 501, and one refused after a known method's prefix its 400. */
    if (c->h2c && h->unknown_first && h->status == 400)
        return MD_HTTP_WANT_CLOSE;
    unsigned code = c->req->h.status != 0 ? c->req->h.status : 400;
    /* A 405 refused at the head (head_done()) still says what the route allows. */
    const char *allow = code == 405 && r->route != NULL ? r->route->allow : NULL;
    take_version(c);
    if (md__http_respond_error(r, code, true, allow) != 0)
        return -ENOMEM;
    return MD_HTTP_WANT_CLOSE;
}

/* Byte classes, one load per byte for every target, field-name and Host byte (where scanning
 * the sets cost a memchr() call per punctuation byte).
 *
 * URI_TARGET: RFC 3986's characters (unreserved, pct-encoded's '%', gen-delims, sub-delims).
 * URI_HOST: those of uri-host [":" port] in a Host value: no '/', '?', '#', '@' (userinfo),
 * and no ',' either, which there can only be a list of hosts.
 * URI_MARK: '?' and '#', which end a target's path and its kept part.
 * NAME_WS: space and tab, which llhttp lets into a field name ("Host : x"). */
enum { URI_TARGET = 1, URI_HOST = 2, URI_MARK = 4, NAME_WS = 8 };
#define BOTH(c)        [c] = URI_TARGET | URI_HOST
#define TARGET_ONLY(c) [c] = URI_TARGET
/* One entry per line would take 90 lines. */
/* clang-format off */
static const uint8_t byte_class[256] = {
    /* unreserved and sub-delims, ':' and the brackets of IP-literals; '%' of pct-encoded */
    BOTH('-'), BOTH('.'), BOTH('_'), BOTH('~'), BOTH('%'), BOTH('!'),
    BOTH('$'), BOTH('&'), BOTH('\''), BOTH('('), BOTH(')'), BOTH('*'),
    BOTH('+'), BOTH(';'), BOTH('='), BOTH(':'), BOTH('['), BOTH(']'),
    /* the gen-delims and ',' a Host value may not carry */
    TARGET_ONLY(','), TARGET_ONLY('/'), TARGET_ONLY('@'),
    ['?'] = URI_TARGET | URI_MARK, ['#'] = URI_TARGET | URI_MARK,
    [' '] = NAME_WS, ['\t'] = NAME_WS,
    BOTH('0'), BOTH('1'), BOTH('2'), BOTH('3'), BOTH('4'),
    BOTH('5'), BOTH('6'), BOTH('7'), BOTH('8'), BOTH('9'),
    BOTH('A'), BOTH('B'), BOTH('C'), BOTH('D'), BOTH('E'),
    BOTH('F'), BOTH('G'), BOTH('H'), BOTH('I'), BOTH('J'),
    BOTH('K'), BOTH('L'), BOTH('M'), BOTH('N'), BOTH('O'),
    BOTH('P'), BOTH('Q'), BOTH('R'), BOTH('S'), BOTH('T'),
    BOTH('U'), BOTH('V'), BOTH('W'), BOTH('X'), BOTH('Y'),
    BOTH('Z'), BOTH('a'), BOTH('b'), BOTH('c'), BOTH('d'),
    BOTH('e'), BOTH('f'), BOTH('g'), BOTH('h'), BOTH('i'),
    BOTH('j'), BOTH('k'), BOTH('l'), BOTH('m'), BOTH('n'),
    BOTH('o'), BOTH('p'), BOTH('q'), BOTH('r'), BOTH('s'),
    BOTH('t'), BOTH('u'), BOTH('v'), BOTH('w'), BOTH('x'),
    BOTH('y'), BOTH('z'),
};
/* clang-format on */
#undef BOTH
#undef TARGET_ONLY

static unsigned class_of(char ch)
{
    return byte_class[(unsigned char)ch];
}

static int on_message_begin(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    md_http_req *r = &c->req->r;
    /* The request boundary: the I/O layer may switch the settings (a reload's limits apply
     * from here on). Everything below reads c->srv afresh. */
    if (c->srv->request_begin != NULL) {
        md_http_server *next = c->srv->request_begin(md_http_conn_link(c), c->srv);
        if (next != c->srv)
            md_http_conn_set_server(c, next);
    }
    if (!c->req_zeroed)
        req_zero(c->req);
    c->req_zeroed = false;
    r->start_ns = c->req->r.now_ns;
    r->kept_len = 0;
    r->kept_target = 0;
    /* The first request's head is timed from init (accept), later ones from their first
     * byte. */
    if (c->requests != 0)
        c->since_ns = c->req->r.now_ns;
    c->phase = PHASE_HEAD;
    return 0;
}

static int on_method(llhttp_t *p, const char *at, size_t len)
{
    h1_state *h = &conn_of(p)->req->h;
    if (!h->head_counting) {
        h->head_counting = true;
        h->head_from = at;
    }
    h->method_len = (uint8_t)(h->method_len + len > 255 ? 255 : h->method_len + len);
    return 0;
}

/* From here on parser.method is the request's, and the request API's (request.h). Not
 * inferred from on_url, whose empty span at the end of a feed would make the answer depend on
 * where reads split. */
static int on_method_complete(llhttp_t *p)
{
    md_http_req *r = &conn_of(p)->req->r;
    r->method = (uint8_t)p->method;
    r->method_done = true;
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    md_http_conn *c = conn_of(p);
    h1_state *h = &c->req->h;
    md_http_req *r = &c->req->r;
    h->url_len += len;
    /* method SP target SP HTTP/1.1 */
    if (h->method_len + h->url_len + 10 > c->srv->limits.max_request_line)
        return reject(c, 414);
    /* llhttp takes tabs, form feeds, bytes over 0x7f and some printable bytes that RFC 3986
     * leaves out; a target is made of its characters only (RFC 9112 3.2), and never has a
     * fragment: '#' is 400. One pass also finds this span's first '?'. */
    size_t query = len;
    for (size_t i = 0; i < len; i++) {
        unsigned k = class_of(at[i]);
        if (!(k & URI_TARGET))
            return reject(c, 400);
        if (k & URI_MARK) {
            if (at[i] == '#')
                return reject(c, 400);
            if (query == len)
                query = i;
        }
    }
    if (c->srv->keep_fields && !keep(r, at, len)) {
        c->oom = true;
        return HPE_USER;
    }
    if (r->target_full)
        return 0;
    if (query < len && !r->path_done) {
        r->path_done = true;
        r->path_len = r->target_len + (uint32_t)query;
    }
    size_t take = len;
    if (take > MD_HTTP_TARGET_MAX - r->target_len) {
        take = MD_HTTP_TARGET_MAX - r->target_len;
        r->target_full = true;
    }
    memcpy(r->target + r->target_len, at, take);
    r->target_len += (uint32_t)take;
    return 0;
}

static int on_url_complete(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    md_http_req *r = &c->req->r;
    r->kept_target = (uint32_t)r->kept_len;
    if (c->srv->keep_fields && !keep(r, "\r\n", 2)) {
        c->oom = true;
        return HPE_USER;
    }
    return 0;
}

/* Chunk extensions and trailers count toward the body limit: they are as unbounded. */
static int count_body(md_http_conn *c, size_t len)
{
    c->req->h.body_bytes += len;
    if (c->req->h.body_bytes > c->srv->limits.max_body_bytes)
        return reject(c, 413);
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    md_http_conn *c = conn_of(p);
    h1_state *h = &c->req->h;
    h->field_end = at + len;
    /* "Host : x" and "Bad Name: x" are fields named "Host " and "Bad Name" to llhttp, but a
     * field name is a token (RFC 9112 5.1). */
    unsigned ws = 0;
    for (size_t i = 0; i < len; i++)
        ws |= class_of(at[i]);
    if (ws & NAME_WS)
        return reject(c, 400);
    if (h->name_len < sizeof(h->name)) {
        size_t n = sizeof(h->name) - h->name_len;
        memcpy(h->name + h->name_len, at, len < n ? len : n);
    }
    h->name_len = (uint8_t)(h->name_len + len > 255 ? 255 : h->name_len + len);
    if ((keeping(c) && !keep(&c->req->r, at, len)) ||
        (keeping_trailer(c) && !keep_trailer(c, at, len))) {
        c->oom = true;
        return HPE_USER;
    }
    return c->phase == PHASE_BODY ? count_body(c, len) : 0;
}

/* name[0..n) equals the known field name lower (4 <= n <= sizeof r->name), in any case: in
 * overlapping 8- or 4-byte words, each OR 0x20. For a name of letters and '-' that folds case
 * exactly: x | 0x20 is a given lower-case letter only for that letter in either case, and is
 * '-' only for '-' or CR, which no field name holds (llhttp passes token bytes, space and tab
 * only). Deliberately not md_ascii_eq_lower() (core/text.h), which goes byte by byte: this runs
 * on every field of every request, and known_header() calls it at most twice per field. */
static bool is_known_name(const char *name, const char *lower, size_t n)
{
    if (n < 8) {
        uint32_t a, b, c, d;
        memcpy(&a, name, 4);
        memcpy(&b, lower, 4);
        memcpy(&c, name + n - 4, 4);
        memcpy(&d, lower + n - 4, 4);
        return ((a | 0x20202020u) == b) & ((c | 0x20202020u) == d);
    }
    uint64_t x, y, fold = UINT64_C(0x2020202020202020);
    for (size_t i = 0; i + 8 < n; i += 8) {
        memcpy(&x, name + i, 8);
        memcpy(&y, lower + i, 8);
        if ((x | fold) != y)
            return false;
    }
    memcpy(&x, name + n - 8, 8);
    memcpy(&y, lower + n - 8, 8);
    return (x | fold) == y;
}

/* Which header the name in s->name (its first name_len bytes, any case) is, by length first:
 * one compare at most (two for the lengths of two known names). Referer and User-Agent only when
 * they are kept (logging). */
static uint8_t known_header(const h1_state *s, bool logging)
{
    unsigned h;
    switch (s->name_len) {
    case 4:
        h = HDR_HOST;
        break;
    case 5:
        h = HDR_RANGE;
        break;
    case 8:
        if (is_known_name(s->name, known[HDR_IF_MATCH].name, 8))
            return HDR_IF_MATCH;
        h = HDR_IF_RANGE;
        break;
    case 19:
        h = HDR_IF_UNMODIFIED_SINCE;
        break;
    case 13:
        if (is_known_name(s->name, known[HDR_AUTHORIZATION].name, 13))
            return HDR_AUTHORIZATION;
        h = HDR_IF_NONE_MATCH;
        break;
    case 15:
        if (is_known_name(s->name, known[HDR_X_FORWARDED_FOR].name, 15))
            return HDR_X_FORWARDED_FOR;
        h = HDR_ACCEPT_ENCODING;
        break;
    case 9:
        h = HDR_FORWARDED;
        break;
    case 6:
        h = HDR_EXPECT;
        break;
    case 7:
        h = HDR_REFERER;
        break;
    case 10:
        h = HDR_USER_AGENT;
        break;
    case 17:
        if (is_known_name(s->name, known[HDR_TE].name, 17))
            return HDR_TE;
        h = HDR_IF_MODIFIED_SINCE;
        break;
    default:
        return HDR_OTHER;
    }
    if (!logging && (h == HDR_REFERER || h == HDR_USER_AGENT))
        return HDR_OTHER;
    return is_known_name(s->name, known[h].name, known[h].len) ? (uint8_t)h : HDR_OTHER;
}

static int on_header_field_complete(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    h1_state *h = &c->req->h;
    md_http_req *r = &c->req->r;
    if (h->name_len == 0)
        return reject(c, 400); /* ": x", which llhttp takes for a field with an empty name */
    h->gap_open = true;
    h->gap_newline = false;
    h->gap_from = h->field_end;
    h->header = known_header(h, c->srv->access_log != NULL);
    /* Only the first Referer or User-Agent is kept. */
    if ((h->header == HDR_REFERER && r->referer_len != 0) ||
        (h->header == HDR_USER_AGENT && r->user_agent_len != 0))
        h->header = HDR_OTHER;
    h->name_len = 0;
    if (c->phase == PHASE_BODY) {
        h->header = HDR_OTHER; /* a trailer: never Host, Expect or Transfer-Encoding */
        if (keeping_trailer(c) && !keep_trailer(c, ": ", 2)) {
            c->oom = true;
            return HPE_USER;
        }
        return 0;
    }
    /* A second field of a kept name: its value joins the first's as a list element; the first
     * is there even when its value is empty. */
    if (IS_FIELD(h->header))
        md__http_req_keep(r, h->header - HDR_IF_NONE_MATCH, ", ",
                          r->field_len[h->header - HDR_IF_NONE_MATCH] != 0 ? 2 : 0);
    if (keeping(c) && !keep(r, ": ", 2)) {
        c->oom = true;
        return HPE_USER;
    }
    if (++h->fields > c->srv->limits.max_headers)
        return reject(c, 431);
    return 0;
}

/* Does the value, span by span, read token (any case) with nothing but whitespace after?
 * Not a list read with md_list_next() (core/text.h): the value is never kept whole, and one
 * token is all Expect or Transfer-Encoding may say here (anything else is refused). */
static void match_token(h1_state *h, const char *token, size_t token_len, const char *at,
                        size_t len)
{
    for (size_t i = 0; i < len && h->token_pos != TOKEN_BAD; i++) {
        unsigned ch = md_ascii_lower((unsigned char)at[i]);
        if (h->token_pos < token_len)
            h->token_pos =
                ch == (unsigned char)token[h->token_pos] ? (uint8_t)(h->token_pos + 1) : TOKEN_BAD;
        else if (ch != ' ' && ch != '\t')
            h->token_pos = TOKEN_BAD;
    }
}

/* The gap after a colon is a byte or two: a loop beats a call to memchr(). */
static bool has_newline(const char *from, const char *to)
{
    for (; from < to; from++)
        if (*from == '\n')
            return true;
    return false;
}

/* A Host value, span by span: uri-host [":" port] and trailing whitespace (llhttp has taken
 * the leading whitespace). Not parsed further: it only has to be one plausible authority.
 * false: a NUL, refused at once like in any other value. */
static bool check_host(h1_state *h, const char *at, size_t len)
{
    /* In locals: stores through h might alias at[] (char), and would be reloaded per byte. */
    unsigned pos = h->host_pos;
    size_t i = 0;
    if (pos != HOST_TRAIL) {
        /* The whole value, nearly always: host bytes only, four at a time. */
        while (i + 4 <= len && (class_of(at[i]) & class_of(at[i + 1]) & class_of(at[i + 2]) &
                                class_of(at[i + 3]) & URI_HOST))
            i += 4;
        while (i < len && (class_of(at[i]) & URI_HOST))
            i++;
        if (i != 0)
            pos = HOST_NAME;
    }
    for (; i < len; i++) {
        unsigned ch = (unsigned char)at[i];
        if (ch == '\0')
            return false;
        if (ch == ' ' || ch == '\t') {
            pos = pos == HOST_EMPTY ? HOST_EMPTY : HOST_TRAIL;
        } else if (pos == HOST_TRAIL || !(class_of(at[i]) & URI_HOST)) {
            h->host_bad = true;
            if (memchr(at + i, '\0', len - i) != NULL)
                return false;
            break;
        } else {
            pos = HOST_NAME;
        }
    }
    h->host_pos = (uint8_t)pos;
    return true;
}

/* The first MD_HTTP_FIELD_KEEP bytes of a value (of the first field of its name). */
static void keep_field(char *buf, uint16_t *kept, const char *at, size_t len)
{
    size_t room = MD_HTTP_FIELD_KEEP - *kept;
    size_t n = len < room ? len : room;
    memcpy(buf + *kept, at, n);
    *kept = (uint16_t)(*kept + n);
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    md_http_conn *c = conn_of(p);
    h1_state *h = &c->req->h;
    md_http_req *r = &c->req->r;
    /* obs-fold, which llhttp accepts. It splits one value into several spans only at the end
     * of a feed, so any other second span is a continuation line. An empty value continued
     * on the next line arrives as one span whose gap after the colon holds the line break
     * (a value that stays empty arrives as an empty span, after the line break). */
    if (h->value_open) {
        if (!h->value_cut || at != c->req->feed_start)
            return reject(c, 400);
    } else if (h->gap_open && len != 0 && (h->gap_newline || has_newline(h->gap_from, at))) {
        return reject(c, 400);
    }
    h->gap_open = false;
    h->value_open = true;
    h->value_cut = false;
    h->value_end = at + len;
    if ((keeping(c) && !keep(r, at, len)) || (keeping_trailer(c) && !keep_trailer(c, at, len))) {
        c->oom = true;
        return HPE_USER;
    }
    if (h->header == HDR_HOST) {                    /* never set for a trailer */
        keep_field(r->host, &r->host_len, at, len); /* the site (request.c) */
        return check_host(h, at, len) ? 0 : reject(c, 400);
    }
    if (len != 0 && memchr(at, '\0', len) != NULL)
        return reject(c, 400);
    if (c->phase == PHASE_BODY)
        return count_body(c, len);
    if (h->header == HDR_EXPECT || h->header == HDR_TE)
        match_token(h, known[h->header].token, known[h->header].token_len, at, len);
    else if (h->header == HDR_REFERER)
        keep_field(r->referer, &r->referer_len, at, len);
    else if (h->header == HDR_USER_AGENT)
        keep_field(r->user_agent, &r->user_agent_len, at, len);
    else if (IS_FIELD(h->header))
        md__http_req_keep(r, h->header - HDR_IF_NONE_MATCH, at, len);
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    h1_state *h = &c->req->h;
    md_http_req *r = &c->req->r;
    h->value_open = false;
    if (keeping_trailer(c)) {
        while (r->trailers_len != 0 && (r->trailers[r->trailers_len - 1] == ' ' ||
                                        r->trailers[r->trailers_len - 1] == '\t'))
            r->trailers_len--;
        if (!keep_trailer(c, "\r\n", 2)) {
            c->oom = true;
            return HPE_USER;
        }
    }
    if (keeping(c)) {
        /* A value ends without its trailing whitespace (RFC 9110 5.5). */
        while (r->kept_len != 0 &&
               (r->kept[r->kept_len - 1] == ' ' || r->kept[r->kept_len - 1] == '\t'))
            r->kept_len--;
        if (!keep(r, "\r\n", 2)) {
            c->oom = true;
            return HPE_USER;
        }
    }
    if (h->header == HDR_HOST) {
        if (h->host_pos == HOST_EMPTY)
            h->host_bad = true; /* names no host: our targets always have an authority */
        h->host_pos = HOST_EMPTY;
        if (h->hosts < 255)
            h->hosts++;
    } else if (h->header == HDR_EXPECT) {
        bool ok = h->token_pos == known[HDR_EXPECT].token_len;
        h->expect = ok && h->expect != EXPECT_OTHER ? EXPECT_CONTINUE : EXPECT_OTHER;
    } else if (h->header == HDR_TE && h->token_pos == 0) {
        h->te_empty = true; /* nothing to frame the body with; not some other coding */
    } else if (h->header == HDR_TE && h->token_pos != known[HDR_TE].token_len) {
        h->te_other = true;
    }
    h->token_pos = 0;
    h->header = HDR_OTHER;
    return 0;
}

/* The head is complete and within its limits: decide what to do with the request.
 * content_here: bytes after the head came in the same feed (known only when the parser
 * paused at the head's end: always for Expect: 100-continue). Returns 0, or HPE_USER having
 * called reject(). */
static inline int head_done(md_http_conn *c, bool content_here)
{
    llhttp_t *p = &c->req->parser;
    h1_state *h = &c->req->h;
    md_http_req *r = &c->req->r;
    const md_http_limits *l = &c->srv->limits;

    /* What the request API reads of the head (request.h), llhttp's until now. */
    take_version(c);
    r->has_length = (p->flags & F_CONTENT_LENGTH) != 0;
    r->upgrade = p->upgrade != 0;
    /* Any DIGIT.DIGIT gets here (LENIENT_VERSION, see md_http_conn_init()); a later 1.x is
     * served as 1.1 (RFC 9110 2.5). */
    if (p->http_major != 1)
        return reject(c, 505);
    if (h->hosts > 1 || (p->http_minor != 0 && h->hosts == 0) || h->host_bad)
        return reject(c, 400);
    /* Host's shape, and an absolute-form target's authority's (where userinfo hides the host:
     * RFC 9110 4.2.4). A Host longer than is kept is left to the site's choice (no match). */
    if (r->host_len < MD_HTTP_FIELD_KEEP && !md_http_authority_ok(r->host, r->host_len))
        return reject(c, 400);
    if (r->target_len != 0 && r->target[0] != '/' && r->target[0] != '*' && !target_authority_ok(r))
        return reject(c, 400);
    /* Transfer-Encoding in HTTP/1.0, empty, or not ending in chunked (llhttp would say so
     * only after this callback, when a streamed echo head would be out already). */
    if (h->te_empty ||
        ((p->flags & F_TRANSFER_ENCODING) && (p->http_minor == 0 || !(p->flags & F_CHUNKED))))
        return reject(c, 400);
    /* Not a proxy: there is nothing to tunnel to (RFC 9110 9.3.6). */
    if (p->method == HTTP_CONNECT)
        return reject(c, 501);
    /* The asterisk form is OPTIONS' only (RFC 9112 3.2.4); any other target that is not
     * origin-form ("/...") has passed llhttp as absolute-form ("scheme://..."). */
    if (r->target_len != 0 && r->target[0] == '*') {
        if (h->url_len != 1 || p->method != HTTP_OPTIONS)
            return reject(c, 400);
        r->asterisk = true;
    }
    /* Framed by chunked, but also coded some way we do not decode (RFC 9112 6.1). */
    if (h->te_other)
        return reject(c, 501);
    bool chunked = (p->flags & F_CHUNKED) != 0;
    uint64_t length = (p->flags & F_CONTENT_LENGTH) ? p->content_length : 0;
    if (length > l->max_body_bytes)
        return reject(c, 413);
    if (h->expect == EXPECT_OTHER && p->http_minor != 0)
        return reject(c, 417);

    md__http_req_route(r);
    r->keep_alive =
        llhttp_should_keep_alive(p) && !c->draining && !p->upgrade &&
        l->keepalive_timeout_ms != 0 &&
        (l->max_requests_per_connection == 0 || c->requests + 1 < l->max_requests_per_connection);

    /* The client waits for our word before it sends the body (RFC 9110 10.1.1); HTTP/1.0
     * clients do not know 100-continue. A client that has sent some of the body already
     * does not wait, and a server may omit the 100 then: nothing to say. A target the core
     * refuses gets its final status at once instead of the 100, and the connection closes
     * after it (fail()): the client may or may not send the body now, so nothing after this
     * head can be read as the next request. */
    if (h->expect == EXPECT_CONTINUE && p->http_minor != 0 && (chunked || length != 0) &&
        !content_here) {
        unsigned refused = md__http_req_refusal(r);
        if (refused != 0)
            return reject(c, refused);
        if (md_outbuf_append(r->out, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0) {
            c->oom = true;
            return HPE_USER;
        }
        h->expect = EXPECT_SENT;
        r->continued = true;
    }

    /* The handler says what becomes of the body (handler.h); a request the core refuses never
     * reaches it (md__http_req_wants_head()). */
    if (md__http_req_wants_head(r) && md__http_req_head(r, chunked ? 0 : length, chunked) != 0) {
        c->oom = true;
        return HPE_USER;
    }
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    h1_state *h = &c->req->h;
    c->phase = PHASE_BODY;
    c->since_ns = c->req->r.now_ns;
    h->body_ns = c->req->r.now_ns;
    /* Whether to send 100 Continue depends on what follows the head in this feed, which
     * only a pause tells (head_done()); Expect is rare enough for it to cost nothing. */
    bool exact = h->expect == EXPECT_CONTINUE;
    if (h->head_counting) {
        h->head_counting = false;
        uint64_t upper = h->head_bytes + (uint64_t)(c->req->feed_end - h->head_from);
        exact = exact || upper > c->srv->limits.max_header_bytes;
    }
    if (exact) {
        c->pause = PAUSE_HEAD;
        return HPE_PAUSED;
    }
    return head_done(c, false);
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    md_http_conn *c = conn_of(p);
    md_http_req *r = &c->req->r;
    int rc = count_body(c, len);
    if (rc != 0)
        return rc;
    if (r->piping && len == 0)
        return 0;
    rc = md__http_req_body(r, at, len);
    if (rc == 500)
        return reject(c, 500);
    if (rc != 0) {
        c->oom = true;
        return HPE_USER;
    }
    if (r->piping) {
        /* The pending handler took this span, and parsing waits until it has passed it on
         * and asks for the next (MD_PENDING_READ): back-pressure from its sink to our peer. */
        r->pipe_read = false;
        c->pause = PAUSE_PENDING;
        return HPE_PAUSED;
    }
    return 0;
}

/* A chunk that cannot fit is refused from its size line, before its data. */
static int on_chunk_header(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    if (p->content_length > c->srv->limits.max_body_bytes - c->req->h.body_bytes)
        return reject(c, 413);
    return 0;
}

static int on_chunk_extension(llhttp_t *p, const char *at, size_t len)
{
    (void)at; /* llhttp's data callback; only the length counts */
    return count_body(conn_of(p), len);
}

/* The request is over and its response complete (or, streamed, under way): on to the next.
 * 0, or HPE_PAUSED with c->pause set. */
static inline int request_done(md_http_conn *c)
{
    md_http_req *r = &c->req->r;
    c->requests++;
    c->phase = PHASE_IDLE;
    c->since_ns = c->req->r.now_ns;
    /* Garbage before the next request fails before on_message_begin clears these. */
    r->streaming = false;
    r->piping = false;
    r->pipe_read = false;
    r->method_done = false;
    if (r->body != NULL) {
        free(r->body);
        r->body = NULL;
        r->body_cap = 0;
    }
    if (!r->keep_alive || c->draining) {
        c->closing = true;
        c->pause = PAUSE_STOP;
        return HPE_PAUSED;
    }
    if (md_outbuf_pending(r->out) >= MD_HTTP_OUT_HIGH_WATER) {
        c->pause = PAUSE_FLUSH;
        return HPE_PAUSED;
    }
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    md_http_conn *c = conn_of(p);
    md_http_req *r = &c->req->r;
    if (r->piping) {
        /* The handler pended at the head: it finishes the response from here. */
        r->body_done = true;
        r->pipe_read = false;
        c->pause = PAUSE_PENDING;
        return HPE_PAUSED;
    }
    if (!r->streaming) {
        int rc = md__http_req_answer(r);
        if (rc < 0) {
            c->oom = true;
            return HPE_USER;
        }
        if (rc == MD_HANDLER_PENDING) {
            /* Parsing stops here: request_done() runs when the handler finishes. */
            c->pause = PAUSE_PENDING;
            return HPE_PAUSED;
        }
    }
    return request_done(c);
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_method_complete = on_method_complete,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_chunk_extension_name = on_chunk_extension,
    .on_chunk_extension_value = on_chunk_extension,
    .on_message_complete = on_message_complete,
};

void md_http_conn_init(md_http_conn *c, md_http_server *srv, uint64_t now_ns)
{
    memset(c, 0, sizeof *c); /* no request state yet: feed allocates it */
    c->srv = srv;
    c->phase = PHASE_IDLE;
    c->since_ns = now_ns;
}

void md_http_conn_set_server(md_http_conn *c, md_http_server *srv)
{
    c->srv = srv;
    if (c->req != NULL)
        c->req->r.srv = srv;
}

/* Every entry point with a request starts here... (enter, leave, head_done and request_done
 * are inline: each has two or three callers, and out of line they cost a call per request on
 * the keep-alive path, loadtest/http/instructions.sh.) */
static inline void enter(md_http_conn *c, uint64_t now_ns, md_outbuf *out)
{
    md__http_req_enter(&c->req->r, now_ns, out);
    md_http_date_refresh(c->srv->clock);
}

/* ...and ends here: the bytes in and out go to the thread's metrics shard. */
static inline void leave(md_http_conn *c, size_t in, size_t out_before)
{
    md_http_req *r = &c->req->r;
    size_t out_now = md_outbuf_pending(r->out);
    r->out = NULL;
    md__http_account_bytes(c->srv, MD_LISTENER_HTTP, in,
                           out_now > out_before ? out_now - out_before : 0);
}

int md_http_conn_feed(md_http_conn *c, uint64_t now_ns, const char *data, size_t len, size_t *used,
                      md_outbuf *out)
{
    *used = len;
    if (c->closing)
        return MD_HTTP_WANT_CLOSE;
    if (len == 0)
        return MD_HTTP_WANT_READ;
    if (c->req == NULL) {
        /* Bytes after an idle spell: a request begins. Only its fixed part is zeroed. */
        c->req = req_take(c);
        if (c->req == NULL)
            return -ENOMEM;
        req_zero(c->req);
        c->req_zeroed = true; /* on_message_begin need not do it again */
    }
    h1_state *h = &c->req->h;
    enter(c, now_ns, out);
    size_t out_before = md_outbuf_pending(out);
    c->req->feed_start = data;
    c->req->feed_end = data + len;
    if (h->head_counting)
        h->head_from = data;
    /* Pointers into the last feed are stale; the bytes they marked were scanned already. */
    h->field_end = data;
    h->gap_from = data;
    if (c->phase == PHASE_BODY && len != 0)
        c->since_ns = now_ns;

    int want = MD_HTTP_WANT_READ;
    if (h->unknown != UM_NONE) { /* a refused method's line, read on to its end (fail()) */
        h->status = (uint16_t)unknown_method(h, data, data + len, c->srv->limits.max_request_line);
        want = h->status == 0 ? MD_HTTP_WANT_READ : fail(c);
        goto out;
    }
    const char *pos = data;
    for (;;) {
        llhttp_errno_t e = llhttp_execute(&c->req->parser, pos, (size_t)(c->req->feed_end - pos));
        if (e == HPE_OK)
            break;
        if (e == HPE_PAUSED_UPGRADE) {
            /* Not reached: upgrade requests never keep the connection, so PAUSE_STOP wins. */
            c->closing = true;
            want = MD_HTTP_WANT_CLOSE;
            goto out;
        }
        if (e != HPE_PAUSED) {
            want = fail(c);
            goto out;
        }
        const char *at = llhttp_get_error_pos(&c->req->parser);
        enum pause_reason why = c->pause;
        c->pause = PAUSE_NONE;
        if (why == PAUSE_STOP) {
            want = MD_HTTP_WANT_CLOSE;
            goto out;
        }
        llhttp_resume(&c->req->parser);
        if (why == PAUSE_PENDING) {
            *used = (size_t)(at - data);
            want = MD_HTTP_WANT_HANDLER;
            goto out;
        }
        if (why == PAUSE_FLUSH) {
            *used = (size_t)(at - data);
            want = MD_HTTP_WANT_WRITE;
            goto out;
        }
        /* PAUSE_HEAD: the exact head size is known now, and what follows it in this feed. */
        if (h->head_bytes + (uint64_t)(at - h->head_from) > c->srv->limits.max_header_bytes)
            reject(c, 431);
        else
            head_done(c, at < c->req->feed_end);
        if (h->status != 0 || c->oom) {
            want = fail(c);
            goto out;
        }
        pos = at;
    }
    if (h->head_counting) {
        h->head_bytes += (uint64_t)(c->req->feed_end - h->head_from);
        if (h->head_bytes > c->srv->limits.max_header_bytes) {
            reject(c, 431);
            want = fail(c);
            goto out;
        }
    }
    h->value_cut = h->value_open && h->value_end == c->req->feed_end;
    if (h->gap_open && has_newline(h->gap_from, c->req->feed_end))
        h->gap_newline = true;
out:
    leave(c, *used, out_before);
    return want;
}

/* MD_BODY_PIPE, the handler has passed the last span on: let llhttp take the steps that need
 * no input, so that a body whose last byte came with that span completes now rather than at
 * the next read (which may never come). */
static int pipe_continue(md_http_conn *c)
{
    static const char none[1];
    c->req->feed_start = c->req->feed_end = none;
    llhttp_errno_t e = llhttp_execute(&c->req->parser, none, 0);
    if (e == HPE_OK)
        return MD_HTTP_WANT_READ;
    if (e == HPE_PAUSED && c->pause == PAUSE_PENDING) {
        llhttp_resume(&c->req->parser);
        c->pause = PAUSE_NONE;
        return MD_HTTP_WANT_HANDLER;
    }
    c->pause = PAUSE_NONE;
    return fail(c);
}

bool md_http_conn_pending_writes_output(const md_http_conn *c)
{
    return c->req != NULL && c->req->r.pending != NULL && c->req->r.pending->writes_output;
}

int md_http_conn_resume(md_http_conn *c, struct mp_context *cx, md_http_io *io, uint64_t now_ns,
                        md_outbuf *out)
{
    md_http_pending *p = c->req != NULL ? c->req->r.pending : NULL;
    if (p == NULL)
        return c->closing ? MD_HTTP_WANT_CLOSE : MD_HTTP_WANT_READ;
    md_http_req *r = &c->req->r;
    enter(c, now_ns, out);
    size_t out_before = md_outbuf_pending(out);
    int want;
    int rc = p->poll(p, r, cx, io, out);
    if (rc == MD_PENDING_WAIT) {
        want = MD_HTTP_WANT_WAIT;
    } else if (rc == MD_PENDING_READ && r->piping && !r->body_done) {
        /* The handler passed the last span on: parse the body's next (the input left over,
         * or the next read, under the body's timeouts). */
        r->pipe_read = true;
        want = pipe_continue(c);
    } else if (rc == MD_PENDING_READ) {
        want = MD_HTTP_WANT_HANDLER; /* the body is all there: poll on */
    } else if (rc == MD_PENDING_MORE) {
        want = MD_HTTP_WANT_HANDLER;
    } else if (rc == -ENOMEM) {
        r->pending = NULL;
        c->closing = true;
        want = -ENOMEM;
    } else if (rc < 0) {
        /* Ended short: what was sent stands, nothing more is presented as its content. */
        r->pending = NULL;
        c->closing = true;
        want = MD_HTTP_WANT_CLOSE;
    } else {
        r->pending = NULL;
        c->pause = PAUSE_NONE;
        want = request_done(c) == HPE_PAUSED && c->pause == PAUSE_STOP ? MD_HTTP_WANT_CLOSE
                                                                       : MD_HTTP_WANT_READ;
        c->pause = PAUSE_NONE;
    }
    leave(c, 0, out_before);
    return want;
}

int md_http_conn_eof(md_http_conn *c, uint64_t now_ns, md_outbuf *out)
{
    (void)now_ns; /* the entry points' shape: nothing is answered at EOF */
    (void)out;
    c->closing = true;
    return MD_HTTP_WANT_CLOSE;
}

/* When a body that has brought body_bytes so far falls below min_body_rate: after the grace,
 * once the time since its head exceeds body_bytes / rate; UINT64_MAX when off. */
static uint64_t body_rate_deadline(const md_http_conn *c)
{
    const md_http_limits *l = &c->srv->limits;
    if (c->phase != PHASE_BODY || l->min_body_rate == 0)
        return UINT64_MAX;
    uint64_t grace = (uint64_t)l->min_rate_grace_ms * UINT64_C(1000000);
    const h1_state *h = &c->req->h;
    uint64_t earned = h->body_bytes >= UINT64_MAX / UINT64_C(1000000000)
                          ? UINT64_MAX / 2
                          : h->body_bytes * UINT64_C(1000000000) / l->min_body_rate;
    return h->body_ns + (earned > grace ? earned : grace) + 1;
}

uint64_t md_http_conn_deadline(const md_http_conn *c)
{
    const md_http_limits *l = &c->srv->limits;
    uint64_t ms;
    /* A pending handler keeps its own time, but while it waits for more of the body. */
    if (c->closing || (c->req != NULL && c->req->r.pending != NULL && !c->req->r.pipe_read))
        return UINT64_MAX;
    switch (c->phase) {
    case PHASE_IDLE:
        ms = c->requests == 0 ? l->header_timeout_ms : l->keepalive_timeout_ms;
        break;
    case PHASE_HEAD:
        ms = l->header_timeout_ms;
        break;
    default:
        ms = l->body_timeout_ms;
        break;
    }
    uint64_t pause = c->since_ns + ms * UINT64_C(1000000), rate = body_rate_deadline(c);
    return rate < pause ? rate : pause;
}

md_http_expired md_http_conn_expired(const md_http_conn *c, uint64_t now_ns)
{
    if (c->closing || now_ns < md_http_conn_deadline(c))
        return MD_HTTP_EXPIRED_NONE;
    switch (c->phase) {
    case PHASE_IDLE:
        return c->requests == 0 ? MD_HTTP_EXPIRED_HEADER : MD_HTTP_EXPIRED_KEEPALIVE;
    case PHASE_HEAD:
        return MD_HTTP_EXPIRED_HEADER;
    default:
        return now_ns >= body_rate_deadline(c) ? MD_HTTP_EXPIRED_BODY_RATE : MD_HTTP_EXPIRED_BODY;
    }
}

int md_http_conn_timeout(md_http_conn *c, uint64_t now_ns, md_outbuf *out)
{
    if (c->closing)
        return MD_HTTP_WANT_CLOSE;
    if (now_ns < md_http_conn_deadline(c))
        return MD_HTTP_WANT_READ;
    c->closing = true;
    if (c->phase == PHASE_IDLE || c->req->r.streaming)
        return MD_HTTP_WANT_CLOSE;
    enter(c, now_ns, out);
    size_t out_before = md_outbuf_pending(out);
    take_version(c);
    int want =
        md__http_respond_error(&c->req->r, 408, true, NULL) == 0 ? MD_HTTP_WANT_CLOSE : -ENOMEM;
    leave(c, 0, out_before);
    return want;
}

int md_http_conn_drain(md_http_conn *c)
{
    c->draining = true;
    /* A response under way closes; one whose head is still to come is kept from keep_alive by
     * head_done(). */
    if (c->req != NULL)
        c->req->r.keep_alive = false;
    if (c->phase == PHASE_IDLE)
        c->closing = true;
    return c->closing ? MD_HTTP_WANT_CLOSE : MD_HTTP_WANT_READ;
}

bool md_http_conn_idle(md_http_conn *c)
{
    if (c->phase != PHASE_IDLE)
        return false;
    req_give(c->req);
    c->req = NULL;
    return true;
}

void md_http_conn_close(md_http_conn *c)
{
    if (c->req != NULL && c->req->r.pending != NULL) {
        md_http_pending *p = c->req->r.pending;
        c->req->r.pending = NULL;
        p->cancel(p);
    }
    req_give(c->req);
    c->req = NULL;
    c->closing = true;
}
