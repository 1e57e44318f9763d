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
 * (response.c) and the body. That is the one place that knows the wire form of a response;
 * HTTP/2 (issue 34) gives the request its own head writer there. Which statuses end a
 * connection (status_closes()) is decided here, for every producer of a response alike.
 */
#include "http/request_internal.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
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
    l->send_timeout_ms = 30000;
    l->min_send_rate = 240;
    l->send_buffer = 65536;
}

void md__http_req_fini(md_http_req *r)
{
    /* Tested first: on the keep-alive path neither is held, and free(NULL) is still a call. */
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

static int respond_fields_as_is(md_http_req *r, const md_http_status *st, bool close,
                                const char *allow, const char *fields, const char *ctype,
                                const char *body, size_t len);

/* HSTS (a site's hsts, on TLS): the handler's fields and the Strict-Transport-Security line,
 * in buf (cap bytes) or, when longer, in *heap (freed by the caller). */
static const char *with_hsts(const md_http_req *r, const char *fields, char *buf, size_t cap,
                             char **heap)
{
    *heap = NULL;
    if (r->hsts == NULL)
        return fields;
    size_t flen = fields != NULL ? strlen(fields) : 0;
    size_t need = flen + strlen(r->hsts) + sizeof "Strict-Transport-Security: \r\n";
    if (need > cap && (buf = *heap = malloc(need)) == NULL)
        return NULL;
    snprintf(buf, need, "%sStrict-Transport-Security: %s\r\n", fields != NULL ? fields : "",
             r->hsts);
    return buf;
}

/* A complete response with a body from memory. 0 or -ENOMEM. */
static int respond_fields(md_http_req *r, const md_http_status *st, bool close, const char *allow,
                          const char *fields, const char *ctype, const char *body, size_t len)
{
    char more[512], *heap;
    if ((fields = with_hsts(r, fields, more, sizeof more, &heap)) == NULL && r->hsts != NULL)
        return -ENOMEM;
    int rc = respond_fields_as_is(r, st, close, allow, fields, ctype, body, len);
    free(heap);
    return rc;
}

static int respond_fields_as_is(md_http_req *r, const md_http_status *st, bool close,
                                const char *allow, const char *fields, const char *ctype,
                                const char *body, size_t len)
{
    bool head = is_head_request(r);
    size_t flen = fields != NULL ? strlen(fields) : 0;
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
    if (!md__http_req_closes(req) && !http10(req) && req->method == MD_GET && req->hsts == NULL) {
        /* An earlier response of this feed lent from the same slot is copied out first:
         * md_http_canned() rewrites the slot in place for another table (a reload between
         * two pipelined requests), and the bytes owed would become the new table's. */
        if (md_outbuf_own(req->out) != 0)
            return -ENOMEM;
        size_t n;
        const char *whole = md_http_canned(r->index, routes_of(req)->id, ctype, body, len, &n);
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
    char head[MD_HTTP_HEAD_MAX + MD_SITE_HSTS_MAX + 32], more[MD_SITE_HSTS_MAX + 32], *heap;
    const char *fields = with_hsts(req, NULL, more, sizeof more, &heap); /* fits: no heap */
    char *end = md_http_put_head_fields(head, md_http_status_of(200), close, http10(req), NULL,
                                        fields, fields != NULL ? strlen(fields) : 0, ctype, n);
    size_t hlen = (size_t)(end - head);
    if (md_outbuf_reserve(out, hlen) == NULL) {
        out->len = out->head + mark;
        return -ENOMEM;
    }
    char *at = out->data + out->head + mark;
    memmove(at + hlen, at, n);
    memcpy(at, head, hlen);
    bool is_head = is_head_request(req);
    out->len = out->head + mark + hlen + (is_head ? 0 : n);
    md__http_account_response(req, 200, is_head ? 0 : n);
    return 0;
}

int md_http_respond_head(md_http_req *req, unsigned status, const char *fields, const char *ctype,
                         uint64_t length)
{
    char more[512], *heap;
    if ((fields = with_hsts(req, fields, more, sizeof more, &heap)) == NULL && req->hsts != NULL)
        return -ENOMEM;
    size_t flen = fields != NULL ? strlen(fields) : 0;
    char *w = md_outbuf_reserve(req->out, MD_HTTP_HEAD_MAX + flen);
    if (w == NULL) {
        free(heap);
        return -ENOMEM;
    }
    const md_http_status *st = md_http_status_of(status);
    md_outbuf_commit(req->out,
                     md_http_put_head_fields(w, st, closes_with(req, st->code), http10(req), NULL,
                                             fields, flen, ctype, length));
    free(heap);
    md__http_account_response(req, st->code, is_head_request(req) || st->code == 304 ? 0 : length);
    return 0;
}

void md_http_count_response(md_http_req *req, unsigned status, uint64_t body_bytes)
{
    md__http_account_response(req, status, body_bytes);
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

const char *md_http_req_field(const md_http_req *req, md_http_field f, size_t *len)
{
    if (req->field_len[f] == 0 || (req->field_cut >> f) & 1)
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

const char *md_http_req_peer(md_http_req *req)
{
    return req->srv->peer != NULL ? req->srv->peer(req->conn) : NULL;
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

/* Whether route's allow and deny rules let this request's client in: asked once per request,
 * and only of a route with rules (a getpeername(2) each time: no bytes kept per connection for
 * the few routes that restrict). */
static bool client_permitted(const md_http_req *r, const md_route *route)
{
    struct sockaddr_storage ss;
    bool have = r->srv->peer_addr != NULL && r->srv->peer_addr(r->conn, &ss) == 0;
    return md_acl_permits(&route->acl, have ? &ss : NULL);
}

/* The authority the request names: an absolute-form target's, which wins over Host (RFC
 * 9112 3.2.2), or Host's. */
static const char *authority(const md_http_req *r, size_t *len)
{
    const char *t = r->target;
    size_t n = r->target_len, skip = 0;
    if (n >= 7 && md_ascii_eq_lower(t, 7, "http://"))
        skip = 7;
    else if (n >= 8 && md_ascii_eq_lower(t, 8, "https://"))
        skip = 8;
    if (skip != 0) {
        size_t e = skip;
        while (e < n && t[e] != '/' && t[e] != '?')
            e++;
        *len = e - skip;
        return t + skip;
    }
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
    unsigned dflt = srv->default_site != NULL ? srv->default_site(srv, r->conn) : 0;
    size_t hl;
    const char *host = authority(r, &hl);
    int site = md_sites_pick(rt, host, hl);
    r->site = (uint8_t)(site >= 0 ? (unsigned)site : dflt);
    const char *sni = srv->servername != NULL ? srv->servername(r->conn) : NULL;
    if (sni != NULL) {
        int by_name = md_sites_pick(rt, sni, strlen(sni));
        if ((by_name >= 0 ? (unsigned)by_name : dflt) != r->site)
            r->misdirected = true;
    }
    const md_site *s = &rt->sites[r->site];
    if (s->hsts[0] != '\0' && srv->secure != NULL && srv->secure(r->conn))
        r->hsts = s->hsts;
}

void md__http_req_route(md_http_req *r)
{
    const char *t = r->target;
    size_t n = r->path_done ? r->path_len : r->target_len;
    if (n > r->target_len || (r->target_full && !r->path_done))
        return; /* a path longer than we keep names no route */
    if (n == 0 || t[0] != '/') {
        size_t skip;
        if (n >= 7 && md_ascii_eq_lower(t, 7, "http://"))
            skip = 7;
        else if (n >= 8 && md_ascii_eq_lower(t, 8, "https://"))
            skip = 8;
        else
            return; /* "*", or CONNECT's authority-form */
        const char *slash = memchr(t + skip, '/', n - skip);
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
    r->forbidden = r->route != NULL && r->route->acl.n != 0 && !client_permitted(r, r->route);
}

unsigned md__http_req_refusal(const md_http_req *r)
{
    const md_route *route = r->route;
    if (r->asterisk)
        return 0;
    if (r->path_bad)
        return 400;
    if (r->misdirected)
        return 421;
    if (route == NULL)
        return 404;
    if (r->forbidden)
        return 403;
    if (r->method != MD_OPTIONS && !md_route_allows(route, r->method))
        return 405;
    return 0;
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
    if (r->collect) {
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
    if (code != 0) /* a 400 closes (status_closes()), 404, 403 and 405 keep the connection */
        return md__http_respond_error(r, code, close, code == 405 ? route->allow : NULL);
    if (r->method == MD_OPTIONS)
        return respond(r, md_http_status_of(200), close, route->allow, "text/plain", NULL, 0);
    return route->handler->on_req(r, route);
}
