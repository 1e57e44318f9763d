/* The request/response API (request.h): what a handler reads of a request and the calls it
 * answers with, over the md_http_req a protocol fills (request_internal.h).
 *
 * A request's way through here, whatever protocol parsed it: at its head the protocol calls
 * md__http_req_route() (the target's path, decoded and normalised, picks the route), then, if
 * the route's handler has an on_head for the method (md__http_req_wants_head()),
 * md__http_req_head(): on_head says what becomes of the body, whose spans md__http_req_body()
 * passes on (to the handler, or gathered). Once the request is complete,
 * md__http_req_answer() answers what needs no handler (OPTIONS *, the refusals of
 * md__http_req_refusal(): 400, 404, 405; OPTIONS from the route's Allow) and gives the rest to
 * the handler's on_req, which answers through md_http_respond*() or pends.
 *
 * The answering calls write the response into the exchange's output: an HTTP/1.x head
 * (response.c) and the body. That is the one place that knows the wire form of a response:
 * a protocol with heads of another form sets md_http_req.wire (request_internal.h), and each
 * answering call hands it the head instead (HTTP/2's HEADERS, http2.c), the body going to out
 * as ever. HTTP/1.x keeps its inline writer: no indirect call on its hot path. Which statuses end a
 * connection (status_closes()) is decided here, for every producer of a response alike.
 */
#include "http/request_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "core/text.h"
#include "http/compress.h"
#include "http/response.h"
#include "http/routes.h"
#include "http/sites.h"

void md_http_limits_default(md_http_limits *l)
{
    l->max_request_line = 8192;
    l->max_header_bytes = 65536;
    l->max_headers = 100;
    l->max_body_bytes = 1048576;
    l->header_timeout_ms = 10000;
    l->body_timeout_ms = 10000;
    l->keepalive_timeout_ms = 75000;
    l->max_requests_per_connection = 0;
    l->min_body_rate = 240;
    l->min_rate_grace_ms = 5000;
    l->http2_max_streams = 100;
    l->http2_window = 65535;
    l->send_timeout_ms = 30000;
    l->min_send_rate = 240;
    l->send_buffer = 0; /* the kernel's autotuning: a fixed SO_SNDBUF caps throughput per RTT */
}

void md__http_req_release(md_http_req *r)
{
    if (r->body != NULL) {
        free(r->body);
        r->body = NULL;
        r->body_cap = 0;
    }
    if (r->kept != NULL) {
        free(r->kept);
        r->kept = NULL;
        r->kept_len = r->kept_cap = 0;
    }
    if (r->zs != NULL) { /* a coded body cut short (the connection closes) */
        md_zstream_give(r->zs);
        r->zs = NULL;
    }
    if (r->trailers != NULL) {
        free(r->trailers);
        r->trailers = NULL;
        r->trailers_len = r->trailers_cap = 0;
    }
}

static bool http10(const md_http_req *r)
{
    return r->http_minor == 0;
}

static bool is_head_request(const md_http_req *r)
{
    return r->method_done && r->method == MD_HEAD;
}

/* The routes when the server names none: the built-in four, built once. */
static md_route_table builtin_routes;
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void builtin_init(void)
{
    md_routes_builtin(&builtin_routes);
}

static const md_route_table *routes_of(const md_http_req *r)
{
    if (r->srv->routes != NULL)
        return r->srv->routes;
    pthread_once(&builtin_once, builtin_init);
    return &builtin_routes;
}

/* Whether a response of this status ends the connection, whoever produced it (the core, a
 * handler, a text route's configured status): those that say the request was not understood
 * as sent, so that what follows it on the connection cannot be trusted to start a request
 * (400, 413, 414, 431, 417, 501, 505: its head or framing was refused, its body may still be on
 * the wire), or that the server may be in a state it did not plan for (500), or that come
 * when the request is already known to be broken (408). nginx ends keep-alive after the same
 * (ngx_http_special_response_handler: 400, 413, 414, 500, 501; 408 and 494 close). Errors
 * about a request that was read whole and understood keep it: 404, 405, 403, 412, 416, 304,
 * and 502/503/504 (the upstream failed, not the request). */
static bool status_closes(unsigned code)
{
    switch (code) {
    case 400:
    case 408:
    case 413:
    case 414:
    case 417:
    case 431:
    case 500:
    case 501:
    case 505:
        return true;
    default:
        return false;
    }
}

/* The response about to be written for code: closing, and from now on the connection closes
 * after it (the protocol stops parsing: nothing behind it is answered). */
static bool closes_with(md_http_req *r, unsigned code)
{
    if (status_closes(code))
        r->keep_alive = false;
    return md__http_req_closes(r);
}

/* The site that answers a response without a route (sites.h): the one its Host picked once
 * the head was routed (r->path set), else the listener's default. */
static const md_site *site_of(const md_http_req *r)
{
    const md_route_table *rt = routes_of(r);
    unsigned i = r->site;
    if (r->path == NULL && r->srv->default_site != NULL)
        i = r->srv->default_site(r->srv, r->link);
    return &rt->sites[i < MD_SITES_MAX ? i : 0];
}

/* The header rules of a response: its route's, or its site's when it has no route. */
static const md_route_headers *rules_of(const md_http_req *r)
{
    return r->route != NULL ? &r->route->headers : &site_of(r)->headers;
}

/* The filters around a route's handler that change a response's fields: the route's header
 * rules (headers.h; the site's for a response without a route) on a response of code, a 401's
 * challenge (auth_basic.h), and its site's Strict-Transport-Security on TLS (r->hsts). When
 * they apply, *fields (and *flen) become a heap copy in *own, which the caller frees; otherwise
 * *own is NULL. 0 or -ENOMEM. */
static int route_fields(const md_http_req *r, unsigned code, const char **fields, size_t *flen,
                        char **own)
{
    *own = NULL;
    const md_route *route = r->route;
    const md_route_headers *h = rules_of(r);
    bool rules = md_headers_apply(h, code);
    bool challenge = route != NULL && code == 401 && route->auth.realm[0] != '\0';
    if (!rules && !challenge && r->hsts == NULL)
        return 0;
    size_t cap = *flen + MD_HEADERS_ADD_MAX + MD_AUTH_REALM_MAX +
                 (r->hsts != NULL ? strlen(r->hsts) : 0) + 96;
    char *buf = malloc(cap);
    if (buf == NULL)
        return -ENOMEM;
    size_t n = 0;
    if (rules) {
        n = md_headers_filter(h, *fields != NULL ? *fields : "", *flen, buf);
    } else if (*flen != 0) {
        memcpy(buf, *fields, *flen);
        n = *flen;
    }
    if (challenge)
        n += md_auth_challenge(route->auth.realm, buf + n, cap - n);
    if (r->hsts != NULL)
        n += (size_t)snprintf(buf + n, cap - n, "Strict-Transport-Security: %s\r\n", r->hsts);
    buf[n] = '\0';
    *own = buf;
    *fields = buf;
    *flen = n;
    return 0;
}

/* Compression on the fly (compress.h), for a route with compress on: what a response of code
 * (ctype, length bytes of body) says and gets. A compressible one (a listed type, no
 * Content-Encoding of its own) varies by Accept-Encoding: Vary is added (once) to a 200,
 * 206 or 304. A 200 of at least compress_min_length bytes to an HTTP/1.1 or HTTP/2 client
 * that takes a coding gets it: Content-Encoding, and its ETag weakened (RFC 9110 8.8.1: the
 * coded bytes are not the file's), which a 304 to that client says too. *fields (and *flen)
 * become a heap copy in *own (which the caller frees) when they change. Returns the coding
 * (MD_CODING_NONE for a 304), or -ENOMEM. */
static int compress_fields(const md_http_req *r, unsigned code, const char *ctype, uint64_t length,
                           const char **fields, size_t *flen, char **own)
{
    *own = NULL;
    const md_route_compress *c = &r->route->compress;
    if ((code != 200 && code != 206 && code != 304) || ctype == NULL ||
        !md_compress_type_ok(c, ctype))
        return MD_CODING_NONE;
    const char *f = *fields != NULL ? *fields : "";
    size_t n = *flen;
    bool vary = false;
    for (size_t i = 0; i < n;) { /* "Name: value" CRLF lines */
        const char *eol = memchr(f + i, '\n', n - i);
        size_t end = eol != NULL ? (size_t)(eol - f) + 1 : n;
        if (end - i > 17 && md_ascii_eq_lower(f + i, 17, "content-encoding:"))
            return MD_CODING_NONE; /* coded already (a precompressed file): never again */
        if (end - i > 5 && md_ascii_eq_lower(f + i, 5, "vary:"))
            vary = true;
        i = end;
    }
    unsigned coding = MD_CODING_NONE;
    if (code != 206 && length >= c->min_length)
        coding = md_http_req_accept_coding(r, c->codings);
    if (vary && coding == MD_CODING_NONE)
        return MD_CODING_NONE;
    size_t cap = 2 * n + 64; /* each ETag line may grow by "W/" */
    char *buf = malloc(cap);
    if (buf == NULL)
        return -ENOMEM;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        const char *eol = memchr(f + i, '\n', n - i);
        size_t end = eol != NULL ? (size_t)(eol - f) + 1 : n;
        if (coding != MD_CODING_NONE && end - i > 7 && md_ascii_eq_lower(f + i, 5, "etag:")) {
            size_t v = i + 5;
            while (v < end && (f[v] == ' ' || f[v] == '\t'))
                v++;
            if (v < end && f[v] == '"') { /* strong: W/ in front */
                memcpy(buf + w, "ETag: W/", 8);
                w += 8;
                i = v;
            }
        }
        if (coding != MD_CODING_NONE && code == 200 && end - i > 14 &&
            md_ascii_eq_lower(f + i, 14, "accept-ranges:")) {
            i = end; /* ranges are of the identity body, which this is not (as nginx's gzip) */
            continue;
        }
        memcpy(buf + w, f + i, end - i);
        w += end - i;
        i = end;
    }
    if (coding != MD_CODING_NONE && code == 200)
        w += (size_t)snprintf(buf + w, cap - w, "Content-Encoding: %s\r\n", md_coding_name(coding));
    if (!vary) {
        memcpy(buf + w, "Vary: Accept-Encoding\r\n", 23);
        w += 23;
    }
    buf[w] = '\0';
    *own = buf;
    *fields = buf;
    *flen = w;
    return code == 200 ? (int)coding : MD_CODING_NONE;
}

/* The route's compressor for a coded body (chunked over HTTP/1.1). */
static md_zstream *zstream_for(const md_http_req *r, unsigned coding, uint64_t length)
{
    const md_route_compress *c = &r->route->compress;
    return md_zstream_take(coding, coding == MD_CODING_GZIP ? c->level_gzip : c->level_zstd, length,
                           r->wire == NULL);
}

bool md_http_req_coding(const md_http_req *req)
{
    return req->zs != NULL;
}

int md_http_req_write(md_http_req *req, md_outbuf *out, const char *data, size_t len, bool last)
{
    if (req->zs == NULL)
        return md_outbuf_append(out, data, len);
    int rc = md_zstream_write(req->zs, out, data, len, last);
    if (rc == 0 && last) {
        md_zstream_give(req->zs);
        req->zs = NULL;
    }
    return rc;
}

/* respond_filtered() on a route with compress on: the whole body coded when the client takes
 * it (compress_fields), else as it is, with Vary when it is compressible. 0 or -ENOMEM. */
static int respond_coded(md_http_req *r, const md_http_status *st, bool close, const char *allow,
                         const char *fields, size_t flen, const char *ctype, const char *body,
                         size_t len)
{
    char *own;
    int coding = compress_fields(r, st->code, ctype, len, &fields, &flen, &own);
    if (coding < 0)
        return -ENOMEM;
    bool head = is_head_request(r);
    uint64_t length = coding != MD_CODING_NONE ? MD_HTTP_LENGTH_CODED : len;
    int rc = -ENOMEM;
    if (r->wire != NULL) {
        (void)closes_with(r, st->code); /* the protocol decides what a close means */
        if (r->wire->head(r, st->code, allow, fields, flen, ctype, length) != 0)
            goto out;
    } else {
        char *w = md_outbuf_reserve(r->out, MD_HTTP_HEAD_MAX + flen);
        if (w == NULL)
            goto out;
        close = closes_with(r, st->code) || close;
        md_outbuf_commit(r->out, md_http_put_head_fields(w, st, close, http10(r), allow, fields,
                                                         flen, ctype, length));
    }
    if (!head && coding != MD_CODING_NONE) {
        md_zstream *z = zstream_for(r, (unsigned)coding, len);
        if (z == NULL)
            goto out;
        rc = md_zstream_write(z, r->out, body, len, true);
        md_zstream_give(z);
        if (rc != 0)
            goto out;
    } else if (!head && len != 0 && md_outbuf_append(r->out, body, len) != 0) {
        goto out;
    }
    rc = 0;
    md__http_account_response(r, st->code, head ? 0 : len);
out:
    free(own);
    return rc;
}

/* A complete response with a body from memory, its fields filtered already. 0 or -ENOMEM. */
static int respond_filtered(md_http_req *r, const md_http_status *st, bool close, const char *allow,
                            const char *fields, size_t flen, const char *ctype, const char *body,
                            size_t len)
{
    bool head = is_head_request(r);
    if (r->route != NULL && r->route->compress.codings != 0)
        return respond_coded(r, st, close, allow, fields, flen, ctype, body, len);
    if (r->wire != NULL) {
        (void)closes_with(r, st->code); /* the protocol decides what a close means */
        if (r->wire->head(r, st->code, allow, fields, flen, ctype, len) != 0 ||
            (!head && len != 0 && md_outbuf_append(r->out, body, len) != 0))
            return -ENOMEM;
        md__http_account_response(r, st->code, head ? 0 : len);
        return 0;
    }
    char *w = md_outbuf_reserve(r->out, MD_HTTP_HEAD_MAX + flen + (head ? 0 : len));
    if (w == NULL)
        return -ENOMEM;
    close = closes_with(r, st->code) || close;
    w = md_http_put_head_fields(w, st, close, http10(r), allow, fields, flen, ctype, len);
    if (!head && len != 0) {
        memcpy(w, body, len);
        w += len;
    }
    md_outbuf_commit(r->out, w);
    md__http_account_response(r, st->code, head ? 0 : len);
    return 0;
}

/* A complete response with a body from memory, through the route's filters. 0 or -ENOMEM. */
static int respond_fields(md_http_req *r, const md_http_status *st, bool close, const char *allow,
                          const char *fields, const char *ctype, const char *body, size_t len)
{
    size_t flen = fields != NULL ? strlen(fields) : 0;
    char *own;
    /* The route's page for an error status replaces the body (error_page.h). */
    if (st->code >= 400) {
        /* A response without a route (an error found before it was known) gets its site's
         * (sites.h): read with the configuration, nothing is read here. */
        const md_route_error_pages *e = r->route != NULL ? &r->route->errors : &site_of(r)->errors;
        if (e->n != 0)
            md_error_page_find(e, st->code, &body, &len, &ctype);
    }
    if (route_fields(r, st->code, &fields, &flen, &own) != 0)
        return -ENOMEM;
    int rc = respond_filtered(r, st, close, allow, fields, flen, ctype, body, len);
    free(own);
    return rc;
}

static int respond(md_http_req *r, const md_http_status *st, bool close, const char *allow,
                   const char *ctype, const char *body, size_t len)
{
    return respond_fields(r, st, close, allow, NULL, ctype, body, len);
}

int md__http_respond_error(md_http_req *r, unsigned code, bool close, const char *allow)
{
    const md_http_status *st = md_http_status_of(code);
    return respond(r, st, close, allow, "text/plain", st->body, st->body_len);
}

int md_http_respond(md_http_req *req, unsigned status, const char *fields, const char *ctype,
                    const char *body, size_t len)
{
    return respond_fields(req, md_http_status_of(status), md__http_req_closes(req), NULL, fields,
                          ctype, body, len);
}

int md_http_respond_canned(md_http_req *req, const md_route *r, const char *ctype, const char *body,
                           size_t len)
{
    if (req->wire == NULL && !md__http_req_closes(req) && !http10(req) && req->method == MD_GET &&
        req->hsts == NULL && r->compress.codings == 0) {
        /* The handler writes no field of its own here: the route's rules leave only their
         * added fields, the same for every 200 of the route. */
        bool rules = md_headers_apply(&r->headers, 200);
        /* An earlier response of this feed lent from the same slot is copied out first:
         * md_http_canned() rewrites the slot in place for another table (a reload between
         * two pipelined requests), and the bytes owed would become the new table's. */
        if (md_outbuf_own(req->out) != 0)
            return -ENOMEM;
        size_t n;
        const char *whole =
            md_http_canned(r->index, routes_of(req)->id, ctype, rules ? r->headers.add : NULL,
                           rules ? r->headers.add_len : 0, body, len, &n);
        if (whole != NULL) {
            /* Lent, not copied, when it is all that is owed (outbuf.h). */
            if (md_outbuf_lend(req->out, whole, n) != 0)
                return -ENOMEM;
            md__http_account_response(req, 200, len);
            return 0;
        }
    }
    return respond(req, md_http_status_of(200), md__http_req_closes(req), NULL, ctype, body, len);
}

/* The body is produced first, then its head is slid in front of it. */
int md_http_respond_produced(md_http_req *req, const char *ctype,
                             int (*produce)(void *arg, md_outbuf *out), void *arg)
{
    md_outbuf *out = req->out;
    bool close = md__http_req_closes(req);
    size_t mark = md_outbuf_pending(out); /* relative to head: appends may compact */
    if (produce(arg, out) != 0) {
        out->len = out->head + mark;
        return md__http_respond_error(req, 500, true, NULL);
    }
    size_t n = md_outbuf_pending(out) - mark;
    if (req->route != NULL && req->route->compress.codings != 0) {
        /* Coded (or not) from a copy, through the filters of a body from memory. */
        char *copy = malloc(n != 0 ? n : 1);
        if (copy == NULL) {
            out->len = out->head + mark;
            return -ENOMEM;
        }
        if (n != 0) /* an empty buffer may have no storage */
            memcpy(copy, md_outbuf_pending_data(out) + mark, n);
        out->len = out->head + mark;
        int rc = respond_fields(req, md_http_status_of(200), close, NULL, NULL, ctype, copy, n);
        free(copy);
        return rc;
    }
    bool is_head = is_head_request(req);
    const char *fields = NULL;
    size_t flen = 0;
    char *own;
    enum { FIELDS_MAX = MD_HEADERS_ADD_MAX + MD_SITE_HSTS_MAX + 64 }; /* rules and HSTS */
    if (route_fields(req, 200, &fields, &flen, &own) != 0 || flen > FIELDS_MAX) {
        free(own);
        out->len = out->head + mark;
        return -ENOMEM;
    }
    if (req->wire != NULL) {
        int rc = req->wire->head(req, 200, NULL, fields, flen, ctype, n);
        free(own);
        if (rc != 0) {
            out->len = out->head + mark;
            return -ENOMEM;
        }
        if (is_head)
            out->len = out->head + mark;
        md__http_account_response(req, 200, is_head ? 0 : n);
        return 0;
    }
    char head[MD_HTTP_HEAD_MAX + FIELDS_MAX];
    char *end = md_http_put_head_fields(head, md_http_status_of(200), close, http10(req), NULL,
                                        fields, flen, ctype, n);
    free(own);
    size_t hlen = (size_t)(end - head);
    if (md_outbuf_reserve(out, hlen) == NULL) {
        out->len = out->head + mark;
        return -ENOMEM;
    }
    char *at = out->data + out->head + mark;
    memmove(at + hlen, at, n);
    memcpy(at, head, hlen);
    out->len = out->head + mark + hlen + (is_head ? 0 : n);
    md__http_account_response(req, 200, is_head ? 0 : n);
    return 0;
}

/* md_http_respond_head() on a route with compress on, for a handler that writes its body
 * with md_http_req_write(): the head says the coding and no length, and the body's
 * compressor waits in req->zs. own: route_fields()'s copy, freed here. 0 or -ENOMEM. */
static int respond_head_coded(md_http_req *req, const md_http_status *st, const char *fields,
                              size_t flen, const char *ctype, uint64_t length, char *own)
{
    char *own2;
    int coding = compress_fields(req, st->code, ctype, length, &fields, &flen, &own2);
    int rc = -ENOMEM;
    if (coding < 0)
        goto out;
    bool head = is_head_request(req);
    uint64_t wire_length = coding != MD_CODING_NONE ? MD_HTTP_LENGTH_CODED : length;
    if (req->zs != NULL) { /* a body before it was cut short */
        md_zstream_give(req->zs);
        req->zs = NULL;
    }
    if (coding != MD_CODING_NONE && !head &&
        (req->zs = zstream_for(req, (unsigned)coding, length)) == NULL)
        goto out;
    if (req->wire != NULL) {
        (void)closes_with(req, st->code);
        if (req->wire->head(req, st->code, NULL, fields, flen, ctype, wire_length) != 0)
            goto out;
    } else {
        char *w = md_outbuf_reserve(req->out, MD_HTTP_HEAD_MAX + flen);
        if (w == NULL)
            goto out;
        md_outbuf_commit(req->out,
                         md_http_put_head_fields(w, st, closes_with(req, st->code), http10(req),
                                                 NULL, fields, flen, ctype, wire_length));
    }
    rc = 0;
    md__http_account_response(req, st->code, head || st->code == 304 ? 0 : length);
out:
    free(own2);
    free(own);
    return rc;
}

int md_http_respond_head(md_http_req *req, unsigned status, const char *fields, const char *ctype,
                         uint64_t length)
{
    size_t flen = fields != NULL ? strlen(fields) : 0;
    const md_http_status *st = md_http_status_of(status);
    char *own;
    if (route_fields(req, st->code, &fields, &flen, &own) != 0)
        return -ENOMEM;
    if (req->route != NULL && req->route->compress.codings != 0 && req->route->handler->codes_body)
        return respond_head_coded(req, st, fields, flen, ctype, length, own);
    if (req->wire != NULL) {
        (void)closes_with(req, st->code);
        int rc = req->wire->head(req, st->code, NULL, fields, flen, ctype, length);
        free(own);
        if (rc != 0)
            return -ENOMEM;
        md__http_account_response(req, st->code,
                                  is_head_request(req) || st->code == 304 ? 0 : length);
        return 0;
    }
    char *w = md_outbuf_reserve(req->out, MD_HTTP_HEAD_MAX + flen);
    if (w == NULL) {
        free(own);
        return -ENOMEM;
    }
    md_outbuf_commit(req->out,
                     md_http_put_head_fields(w, st, closes_with(req, st->code), http10(req), NULL,
                                             fields, flen, ctype, length));
    free(own);
    md__http_account_response(req, st->code, is_head_request(req) || st->code == 304 ? 0 : length);
    return 0;
}

bool md_http_req_frames_body(const md_http_req *req)
{
    return req->wire != NULL;
}

int md_http_respond_interim(md_http_req *req, unsigned status, const char *reason,
                            size_t reason_len, const char *fields, size_t fields_len)
{
    if (status == 100 && req->continued)
        return 0;          /* the client has had ours: it never gets two */
    if (req->wire != NULL) /* HTTP/2: a HEADERS frame of its own */
        return req->wire->interim != NULL ? req->wire->interim(req, status, fields, fields_len) : 0;
    if (http10(req))
        return 0; /* HTTP/1.0 has no 1xx (RFC 9110 15.2) */
    return md_http1_put_interim(req->out, status, reason, reason_len, fields, fields_len);
}

int md_http_respond_relayed(md_http_req *req, unsigned status, const char *reason,
                            size_t reason_len, const char *fields, size_t fields_len,
                            uint64_t length)
{
    if (req->wire != NULL) {
        if (status == 101 || req->wire->relay == NULL)
            return -EINVAL;
        return req->wire->relay(req, status, fields, fields_len, length);
    }
    md_http1_framing framing = MD_HTTP1_LENGTH;
    if (status == 101) {
        if (http10(req))
            return -EINVAL;
        framing = MD_HTTP1_UPGRADE;
    } else if (is_head_request(req) || status == 204 || status == 304) {
        framing = MD_HTTP1_NO_BODY;
    } else if (length == MD_HTTP_LENGTH_UNKNOWN) {
        framing = http10(req) ? MD_HTTP1_CLOSE : MD_HTTP1_CHUNKED;
    }
    if (framing == MD_HTTP1_CLOSE || framing == MD_HTTP1_UPGRADE)
        md_http_req_close_after(req); /* after a tunnel, nothing more is HTTP */
    req->relay_chunked = framing == MD_HTTP1_CHUNKED;
    return md_http1_put_relayed(req->out, status, reason, reason_len, fields, fields_len, framing,
                                length, framing != MD_HTTP1_UPGRADE && md__http_req_closes(req),
                                http10(req));
}

int md_http_relay_body(md_http_req *req, md_outbuf *out, const char *data, size_t len)
{
    if (req->relay_chunked)
        return md_http1_put_chunk(out, data, len);
    return md_outbuf_append(out, data, len);
}

int md_http_relay_end(md_http_req *req, md_outbuf *out, const char *trailers, size_t trailers_len)
{
    if (req->wire != NULL)
        return trailers_len == 0 || req->wire->trailers == NULL
                   ? 0
                   : req->wire->trailers(req, trailers, trailers_len);
    if (!req->relay_chunked)
        return 0;
    req->relay_chunked = false;
    return md_http1_put_last(out, trailers, trailers_len);
}

unsigned md_http_req_accept_coding(const md_http_req *req, unsigned codings)
{
    if (req->http_major == 1 && req->http_minor == 0)
        return MD_CODING_NONE;
    size_t alen = 0;
    const char *ae = md_http_req_field(req, MD_FIELD_ACCEPT_ENCODING, &alen);
    return md_compress_negotiate(ae, alen, codings);
}

void md_http_count_response(md_http_req *req, unsigned status, uint64_t body_bytes)
{
    md__http_account_response(req, status, body_bytes);
}

void md__http_req_keep(md_http_req *r, unsigned f, const char *at, size_t len)
{
    r->field_seen |= (uint16_t)(1u << f);
    size_t have = r->field_len[f];
    if (len > MD_HTTP_COND_KEEP - have &&
        (f == MD_FIELD_X_FORWARDED_FOR || f == MD_FIELD_FORWARDED)) {
        /* The hops nearest us are on the right: keep the last bytes, the front marked cut. */
        size_t drop = have + len - MD_HTTP_COND_KEEP;
        if (drop >= have) {
            at += drop - have;
            len -= drop - have;
            have = 0;
        } else {
            memmove(r->field[f], r->field[f] + drop, have - drop);
            have -= drop;
        }
        r->field_cut |= (uint16_t)(1u << f);
    } else if (len > MD_HTTP_COND_KEEP - have) {
        r->field_cut |= (uint16_t)(1u << f);
        return;
    }
    memcpy(r->field[f] + have, at, len);
    r->field_len[f] = (uint8_t)(have + len);
}

void md_http_req_set_upstream(md_http_req *req, const char *addr, uint64_t ms)
{
    req->upstream = addr;
    req->upstream_ms = ms;
}

md_outbuf *md_http_req_out(md_http_req *req)
{
    return req->out;
}

void md_http_req_pend(md_http_req *req, md_http_pending *p)
{
    req->pending = p;
}

md_http_pending *md_http_req_pending(const md_http_req *req)
{
    return req->pending;
}

unsigned md_http_req_method(const md_http_req *req)
{
    return req->method;
}

bool md_http_req_is_head(const md_http_req *req)
{
    return is_head_request(req);
}

unsigned md_http_req_version_minor(const md_http_req *req)
{
    return req->http_minor;
}

unsigned md_http_req_version_major(const md_http_req *req)
{
    return req->http_major;
}

const char *md_http_req_path(const md_http_req *req, size_t *len)
{
    *len = req->npath;
    return req->path;
}

const char *md_http_req_body(const md_http_req *req, size_t *len)
{
    *len = req->body_len;
    return req->body;
}

const char *md_http_req_query(const md_http_req *req, size_t *len)
{
    if (!req->path_done || req->target_full)
        return NULL;
    *len = req->target_len - req->path_len - 1;
    return req->target + req->path_len + 1;
}

bool md_http_req_path_cut(const md_http_req *req)
{
    return req->target_full;
}

const char *md_http_req_field(const md_http_req *req, md_http_field f, size_t *len)
{
    if (!((req->field_seen >> f) & 1) || (req->field_cut >> f) & 1)
        return NULL;
    *len = req->field_len[f];
    return req->field[f];
}

const md_http_server *md_http_req_server(const md_http_req *req)
{
    return req->srv;
}

static const char *authority(const md_http_req *r, size_t *len);

const char *md_http_req_host(const md_http_req *req, size_t *len)
{
    const char *h = authority(req, len);
    return *len != 0 ? h : NULL;
}

const char *md_http_req_target(const md_http_req *req, size_t *len, bool *cut)
{
    *len = req->target_len;
    *cut = req->target_full;
    return req->target;
}

const char *md_http_req_head(const md_http_req *req, size_t *target_len, size_t *len)
{
    *target_len = req->kept_target;
    *len = req->kept_len;
    return req->kept;
}

const char *md_http_req_trailers(const md_http_req *req, size_t *len)
{
    *len = req->trailers_over ? 0 : req->trailers_len;
    return *len != 0 ? req->trailers : NULL;
}

const char *md_http_req_peer(md_http_req *req)
{
    if (req->client_set)
        return req->client_text;
    return req->srv->peer != NULL ? req->srv->peer(req->link) : NULL;
}

bool md_http_req_body_done(const md_http_req *req)
{
    return req->body_done;
}

bool md_http_req_closes(const md_http_req *req)
{
    return md__http_req_closes(req);
}

void md_http_req_close_after(md_http_req *req)
{
    req->keep_alive = false;
}

bool md_http_req_has_length(const md_http_req *req)
{
    return req->has_length;
}

bool md_http_req_upgrade(const md_http_req *req)
{
    return req->upgrade;
}

bool md_http_req_continued(const md_http_req *req)
{
    return req->continued;
}

/* The request's client address for a route's rules, into *ss: NULL when it is not known (the
 * peer is gone). Asked only of a route with rules or a rate limit, once per request; the
 * connection looks it up once and keeps it (server/conn_http.c). */
static const struct sockaddr_storage *client_addr(const md_http_req *r, struct sockaddr_storage *ss)
{
    if (r->client_set)
        return &r->client; /* real_ip_from: the address the trusted balancer gave */
    bool have = r->srv->peer_addr != NULL && r->srv->peer_addr(r->link, ss) == 0;
    return have ? ss : NULL;
}

/* The route's rate limit (first, as nginx's limit_req comes before its access rules: a
 * client refused is refused cheaply, and before auth_basic spends a hash on it), then its
 * allow and deny rules. */
static void admit(md_http_req *r, const md_route *route)
{
    if (route->limiter == NULL && route->acl.n == 0)
        return;
    struct sockaddr_storage ss;
    const struct sockaddr_storage *at = client_addr(r, &ss);
    uint32_t retry = 0;
    if (route->limiter != NULL && !md_ratelimit_take(route->limiter, at, r->now_ns, &retry)) {
        r->limited = true;
        r->retry_s = (uint16_t)(retry < UINT16_MAX ? retry : UINT16_MAX);
        if (r->srv->metrics != NULL)
            md_metrics_route_limited(md_metrics_local(r->srv->metrics), route->metric_slot);
        return;
    }
    r->forbidden = route->acl.n != 0 && !md_acl_permits(&route->acl, at);
}

/* A route with real_ip: the client's address from the header, when the peer is trusted (the
 * peer's address asked only then, as for allow and deny). */
static void real_client(md_http_req *r, const md_route *route)
{
    struct sockaddr_storage peer;
    unsigned f =
        route->real_ip.header == MD_REAL_IP_XFF ? MD_FIELD_X_FORWARDED_FOR : MD_FIELD_FORWARDED;
    if (r->field_len[f] == 0 || r->srv->peer_addr == NULL || r->srv->peer_addr(r->link, &peer) != 0)
        return;
    if (!md_real_ip(&route->real_ip, &peer, r->field[f], r->field_len[f], (r->field_cut >> f) & 1,
                    &r->client))
        return;
    const void *a = r->client.ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)&r->client)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)&r->client)->sin6_addr;
    if (inet_ntop(r->client.ss_family, a, r->client_text, sizeof r->client_text) != NULL)
        r->client_set = true;
}

/* Whether the request's Authorization passes route's auth_basic. A table that was not opened
 * for serving has no users: nobody passes. Runs on the connection's task (a worker): a hash
 * takes milliseconds when the generation's cache has not seen these credentials. */
static bool authorized(const md_http_req *r, const md_route *route)
{
    size_t len;
    const char *v = md_http_req_field(r, MD_FIELD_AUTHORIZATION, &len);
    return v != NULL && route->auth.users != NULL && md_htpasswd_verify(route->auth.users, v, len);
}

/* md_http_authority_ok()'s bytes: 0 any byte of a name (the protocols have let through only
 * what an authority may hold), 1 the port's ':', 2 one no name has. */
static const uint8_t authority_class[256] = {[':'] = 1, ['['] = 2, [']'] = 2, ['@'] = 2};

bool md_http_authority_ok(const char *h, size_t n)
{
    const unsigned char *p = (const unsigned char *)h, *end = p + n;
    while (end != p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (p != end && *p == '[') { /* an IP-literal: hex digits, ':' and '.', or "v" IPvFuture */
        bool future = end - p > 1 && (p[1] == 'v' || p[1] == 'V');
        const unsigned char *open = p;
        for (p++; p != end && *p != ']'; p++) {
            bool hex = (*p >= '0' && *p <= '9') || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'f');
            if (authority_class[*p] == 2 || (!future && !hex && *p != ':' && *p != '.'))
                return false;
        }
        if (p == end || p == open + 1)
            return false; /* no "]", or nothing in the brackets */
        p++;
    } else {
        while (p != end && authority_class[*p] == 0)
            p++;
        if (p == (const unsigned char *)h && p != end)
            return false; /* a port without a host (RFC 9110 4.2.1: an empty host is invalid) */
    }
    if (p == end)
        return true;
    if (*p != ':')
        return false;
    for (p++; p != end; p++)
        if ((unsigned)(*p - '0') > 9)
            return false;
    return true;
}

const char *md_http_target_authority(const char *t, size_t n, size_t *len)
{
    size_t skip;
    if (n >= 7 && md_ascii_eq_lower(t, 7, "http://"))
        skip = 7;
    else if (n >= 8 && md_ascii_eq_lower(t, 8, "https://"))
        skip = 8;
    else
        return NULL;
    size_t e = skip;
    while (e < n && t[e] != '/' && t[e] != '?')
        e++;
    *len = e - skip;
    return t + skip;
}

/* The authority the request names: an absolute-form target's, which wins over Host (RFC
 * 9112 3.2.2), or Host's. */
static const char *authority(const md_http_req *r, size_t *len)
{
    const char *a = md_http_target_authority(r->target, r->target_len, len);
    if (a != NULL)
        return a;
    *len = r->host_len;
    return r->host;
}

/* Virtual hosts: the site whose names the authority matches, or the listener's default; a TLS
 * connection whose server name picks another site than that is misdirected (RFC 9110
 * 15.5.20: 421), so that a certificate valid for several names cannot carry one site's
 * requests to another. */
static void pick_site(md_http_req *r, const md_route_table *rt)
{
    const md_http_server *srv = r->srv;
    unsigned dflt = srv->default_site != NULL ? srv->default_site(srv, r->link) : 0;
    size_t hl;
    const char *host = authority(r, &hl);
    int site = md_sites_pick(rt, host, hl);
    r->site = (uint8_t)(site >= 0 ? (unsigned)site : dflt);
    const char *sni = srv->servername != NULL ? srv->servername(r->link) : NULL;
    if (sni != NULL) {
        int by_name = md_sites_pick(rt, sni, strlen(sni));
        if ((by_name >= 0 ? (unsigned)by_name : dflt) != r->site)
            r->misdirected = true;
    }
    const md_site *s = &rt->sites[r->site];
    if (s->hsts[0] != '\0' && srv->secure != NULL && srv->secure(r->link))
        r->hsts = s->hsts;
}

void md__http_req_route(md_http_req *r)
{
    const char *t = r->target;
    size_t n = r->path_done ? r->path_len : r->target_len;
    if (n > r->target_len || (r->target_full && !r->path_done)) {
        /* A path longer than we keep names no route: longer than any URI magpied parses
         * (RFC 9112 3: 414). A long query is kept in part and routes as usual. */
        r->path_long = true;
        return;
    }
    if (n == 0 || t[0] != '/') {
        size_t alen;
        const char *a = md_http_target_authority(t, n, &alen);
        if (a == NULL)
            return;                   /* "*", or CONNECT's authority-form */
        const char *after = a + alen; /* n ends before the query: '/' or the end */
        const char *slash = after < t + n && *after == '/' ? after : NULL;
        if (slash == NULL) {
            t = "/"; /* an empty path is "/" (RFC 9112 3.2.2) */
            n = 1;
        } else {
            n -= (size_t)(slash - t);
            t = slash;
        }
    }
    if (!md_path_is_normal(t, n)) {
        size_t len;
        if (md_path_normalise(t, n, r->path_buf, &len) != 0) {
            r->path_bad = true;
            return;
        }
        t = r->path_buf;
        n = len;
    }
    r->path = t;
    r->npath = (uint32_t)n;
    const md_route_table *rt = routes_of(r);
    if (rt->nsites > 1)
        pick_site(r, rt);
    r->route = md_routes_find_in(rt, r->site, t, n);
    if (r->route != NULL && r->route->real_ip.header != MD_REAL_IP_NONE)
        real_client(r, r->route);
    if (r->route != NULL)
        admit(r, r->route);
    r->unauthorized = r->route != NULL && !r->forbidden && !r->limited &&
                      r->route->auth.realm[0] != '\0' && !authorized(r, r->route);
}

int md__http_req_head(md_http_req *r, uint64_t length, bool chunked)
{
    const md_route *route = r->route;
    int mode = route->handler->on_head(r, route, length, chunked);
    if (mode < 0)
        return -ENOMEM;
    r->collect = mode == MD_BODY_GATHER;
    r->streaming = mode == MD_BODY_STREAM;
    r->piping = mode == MD_BODY_PIPE;
    return 0;
}

int md__http_req_body(md_http_req *r, const char *at, size_t len)
{
    if (r->streaming || r->piping)
        return r->route->handler->on_body(r, r->route, at, len) != 0 ? -ENOMEM : 0;
    if (r->collect && len != 0) { /* none: body may have no storage yet */
        if (md_bytes_grow(&r->body, &r->body_cap, r->body_len + len, 4096) != 0)
            return 500;
        memcpy(r->body + r->body_len, at, len);
        r->body_len += len;
    }
    return 0;
}

int md__http_req_answer(md_http_req *r)
{
    const md_route *route = r->route;
    bool close = md__http_req_closes(r);

    if (r->asterisk)
        return respond(r, md_http_status_of(200), close, routes_of(r)->allow_any, "text/plain",
                       NULL, 0);
    unsigned code = md__http_req_refusal(r);
    if (code == 429) {
        char retry[40];
        snprintf(retry, sizeof retry, "Retry-After: %u\r\n", (unsigned)r->retry_s);
        const md_http_status *st = md_http_status_of(429);
        return respond_fields(r, st, close, NULL, retry, "text/plain", st->body, st->body_len);
    }
    if (code == 421)
        r->route = NULL; /* no route of the site serves it: its site's rules and pages */
    if (code != 0)       /* a 400 closes (status_closes()), 404, 403, 401 and 405 keep it */
        return md__http_respond_error(r, code, close, code == 405 ? route->allow : NULL);
    if (r->method == MD_OPTIONS)
        return respond(r, md_http_status_of(200), close, route->allow, "text/plain", NULL, 0);
    return route->handler->on_req(r, route);
}
