/* The proxy's messages (proxy_msg.h): the upstream request head and the response's parser. */
#include "http/handlers/proxy/proxy_msg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/httpdate.h"
#include "core/text.h"
#include "http/headers.h"

bool md_proxy_hop_by_hop(const char *name, size_t len)
{
    if (len >= 6 && md_ascii_eq_lower(name, 6, "proxy-"))
        return true;
    switch (len) { /* each field of each head asks: only the names of its length compared */
    case 2:
        return md_ascii_eq_lower(name, len, "te");
    case 7:
        return md_ascii_eq_lower(name, len, "upgrade");
    case 10:
        return md_ascii_eq_lower(name, len, "connection") ||
               md_ascii_eq_lower(name, len, "keep-alive");
    case 17:
        return md_ascii_eq_lower(name, len, "transfer-encoding");
    default:
        return false;
    }
}

/* One field of a kept block: [name, name + nlen) and [value, value + vlen). false at the end. */
struct field_iter {
    const char *p, *end;
};

static bool next_field(struct field_iter *it, const char **name, size_t *nlen, const char **value,
                       size_t *vlen)
{
    if (it->p >= it->end)
        return false;
    const char *eol = memchr(it->p, '\n', (size_t)(it->end - it->p));
    const char *line_end = eol != NULL ? eol : it->end;
    const char *colon = memchr(it->p, ':', (size_t)(line_end - it->p));
    *name = it->p;
    *nlen = colon != NULL ? (size_t)(colon - it->p) : 0;
    const char *v = colon != NULL ? colon + 1 : line_end;
    while (v < line_end && (*v == ' ' || *v == '\t'))
        v++;
    const char *ve = line_end;
    if (ve > v && ve[-1] == '\r')
        ve--;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
        ve--;
    *value = v;
    *vlen = (size_t)(ve - v);
    it->p = eol != NULL ? eol + 1 : it->end;
    return true;
}

const char *md_proxy_field(const char *fields, size_t len, const char *name, size_t *vlen)
{
    struct field_iter it = {fields, fields + len};
    const char *n, *v;
    size_t nl, vl;
    size_t want = strlen(name);
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (md_ascii_eq_ci(n, nl, name, want)) {
            *vlen = vl;
            return v;
        }
    }
    return NULL;
}

/* The Connection fields of a head (RFC 9110 7.6.1), found in one walk, so that asking whether
 * one of its fields is named by them does not walk the head again for each field. A head with
 * more than CONN_FIELDS of them is walked for each question. */
enum { CONN_FIELDS = 4 };
typedef struct conn_names {
    const char *fields; /* the head */
    size_t len;
    unsigned n; /* Connection fields found; CONN_FIELDS + 1: more than kept */
    const char *v[CONN_FIELDS];
    size_t vl[CONN_FIELDS];
} conn_names;

static void conn_names_init(conn_names *c, const char *fields, size_t len)
{
    c->fields = fields;
    c->len = len;
    c->n = 0;
    struct field_iter it = {fields, fields + len};
    const char *n, *v;
    size_t nl, vl;
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (!md_ascii_eq_lower(n, nl, "connection"))
            continue;
        if (c->n == CONN_FIELDS) {
            c->n = CONN_FIELDS + 1;
            return;
        }
        c->v[c->n] = v;
        c->vl[c->n++] = vl;
    }
}

static bool list_names(const char *v, size_t vl, const char *name, size_t nlen)
{
    md_list l = md_list_of(v, vl);
    const char *e;
    size_t el;
    while (md_list_next(&l, &e, &el))
        if (md_ascii_eq_ci(e, el, name, nlen))
            return true;
    return false;
}

/* Is name listed in any Connection field of the head? */
static bool named_by_connection(const conn_names *c, const char *name, size_t nlen)
{
    if (c->n <= CONN_FIELDS) {
        for (unsigned i = 0; i < c->n; i++)
            if (list_names(c->v[i], c->vl[i], name, nlen))
                return true;
        return false;
    }
    struct field_iter it = {c->fields, c->fields + c->len};
    const char *n, *v;
    size_t nl, vl;
    while (next_field(&it, &n, &nl, &v, &vl))
        if (md_ascii_eq_lower(n, nl, "connection") && list_names(v, vl, name, nlen))
            return true;
    return false;
}

static bool put(md_outbuf *out, const char *s, size_t n)
{
    return md_outbuf_append(out, s, n) == 0;
}

static bool puts_(md_outbuf *out, const char *s)
{
    return put(out, s, strlen(s));
}

int md_proxy_request_head(const md_proxy_req *rq, md_outbuf *out)
{
    const char *target = rq->target, *authority = NULL;
    size_t tlen = rq->target_len, alen = 0;
    /* absolute-form: origin-form upstream, and its authority is the Host (RFC 9112 3.2.2) */
    if (tlen != 0 && target[0] != '/' && target[0] != '*') {
        const char *sep = memchr(target, ':', tlen);
        if (sep != NULL && (size_t)(target + tlen - sep) >= 3 && sep[1] == '/' && sep[2] == '/') {
            authority = sep + 3;
            const char *end = target + tlen;
            const char *slash = memchr(authority, '/', (size_t)(end - authority));
            const char *q = memchr(authority, '?', (size_t)(end - authority));
            const char *stop = slash != NULL && (q == NULL || slash < q) ? slash : q;
            alen = (size_t)((stop != NULL ? stop : end) - authority);
            target = stop != NULL ? stop : "/";
            tlen = stop != NULL ? (size_t)(end - stop) : 1;
            if (target[0] == '?') { /* "http://h?q": path "/" */
                if (!puts_(out, rq->method) || !put(out, " /", 2) || !put(out, target, tlen))
                    return -ENOMEM;
                goto version;
            }
        }
    }
    if (!puts_(out, rq->method) || !put(out, " ", 1) || !put(out, target, tlen))
        return -ENOMEM;
version:
    if (!puts_(out, " HTTP/1.1\r\nHost: "))
        return -ENOMEM;
    const char *fields = rq->fields;
    size_t flen = rq->fields_len;
    size_t hlen = 0;
    const char *client_host = authority;
    if (authority != NULL)
        hlen = alen;
    else
        client_host = md_proxy_field(fields, flen, "host", &hlen);
    if (rq->host != NULL) {
        if (!puts_(out, rq->host))
            return -ENOMEM;
    } else if (client_host != NULL && hlen != 0) {
        if (!put(out, client_host, hlen))
            return -ENOMEM;
    } else if (!puts_(out, rq->upstream_host)) {
        return -ENOMEM;
    }
    if (!put(out, "\r\n", 2))
        return -ENOMEM;

    conn_names cn;
    conn_names_init(&cn, fields, flen);
    bool hops_done = false; /* a Max-Forwards was written (or passed on) */
    struct field_iter it = {fields, fields + flen};
    const char *n, *v;
    size_t nl, vl;
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (nl == 0)
            continue;
        if (md_ascii_eq_lower(n, nl, "upgrade") && rq->upgrade) {
            /* kept for a tunnel */
        } else if (md_ascii_eq_lower(n, nl, "trailer")) {
            /* End-to-end: it announces the trailer fields the last chunk passes on
             * (md_proxy_trailers); a body sent otherwise has none to announce. */
            if (rq->framing != MD_PROXY_BODY_CHUNKED || named_by_connection(&cn, n, nl))
                continue;
        } else if (md_proxy_hop_by_hop(n, nl) || named_by_connection(&cn, n, nl)) {
            continue;
        }
        uint64_t hops;
        if (rq->hop_count && nl == 12 && md_ascii_eq_lower(n, nl, "max-forwards")) {
            if (hops_done)
                continue; /* the first one counts (md_proxy_field), and goes on alone */
            hops_done = true;
            if (md_proxy_max_forwards(v, vl, &hops) == 0 && hops != 0) {
                /* One hop fewer (a 0 was answered here: proxy.c's on_head); a value past
                 * what we count is taken as the most we do (RFC 9110 7.6.2). */
                char mf[48];
                int k = snprintf(mf, sizeof mf, "Max-Forwards: %" PRIu64 "\r\n", hops - 1);
                if (!put(out, mf, (size_t)k))
                    return -ENOMEM;
                continue;
            }
        }
        /* Written anew below, from the framing and the client. */
        if (md_ascii_eq_lower(n, nl, "host") || md_ascii_eq_lower(n, nl, "content-length") ||
            md_ascii_eq_lower(n, nl, "x-real-ip") ||
            md_ascii_eq_lower(n, nl, "x-forwarded-proto") || md_ascii_eq_lower(n, nl, "expect") ||
            md_ascii_eq_lower(n, nl, "x-forwarded-for"))
            continue;
        if (!put(out, n, nl) || !put(out, ": ", 2) || !put(out, v, vl) || !put(out, "\r\n", 2))
            return -ENOMEM;
    }
    /* Every X-Forwarded-For joined into one list, the client last (nginx's
     * $proxy_add_x_forwarded_for). */
    if (!puts_(out, "X-Forwarded-For: "))
        return -ENOMEM;
    it = (struct field_iter){fields, fields + flen};
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (md_ascii_eq_lower(n, nl, "x-forwarded-for") && vl != 0 &&
            !named_by_connection(&cn, n, nl) && (!put(out, v, vl) || !put(out, ", ", 2)))
            return -ENOMEM;
    }
    const char *peer = rq->peer != NULL ? rq->peer : "unknown";
    if (!puts_(out, peer) || !puts_(out, "\r\nX-Real-IP: ") || !puts_(out, peer) ||
        !puts_(out, "\r\nX-Forwarded-Proto: http\r\n"))
        return -ENOMEM;
    if (rq->forwarded) {
        /* RFC 7239: for= quoted for IPv6 ("[::1]"), host= quoted always. */
        bool v6 = strchr(peer, ':') != NULL;
        if (!puts_(out, v6 ? "Forwarded: for=\"[" : "Forwarded: for=") || !puts_(out, peer) ||
            !puts_(out, v6 ? "]\"" : ""))
            return -ENOMEM;
        if (client_host != NULL && hlen != 0) {
            if (!puts_(out, ";host=\"") || !put(out, client_host, hlen) || !put(out, "\"", 1))
                return -ENOMEM;
        }
        if (!puts_(out, ";proto=http\r\n"))
            return -ENOMEM;
    }
    if (rq->via &&
        (!puts_(out, "Via: ") || !puts_(out, rq->via_protocol != NULL ? rq->via_protocol : "1.1") ||
         !puts_(out, " magpied\r\n")))
        return -ENOMEM;
    if (rq->framing == MD_PROXY_BODY_LENGTH) {
        char cl[48];
        int k = snprintf(cl, sizeof cl, "Content-Length: %" PRIu64 "\r\n", rq->length);
        if (!put(out, cl, (size_t)k))
            return -ENOMEM;
    } else if (rq->framing == MD_PROXY_BODY_CHUNKED &&
               !puts_(out, "Transfer-Encoding: chunked\r\n")) {
        return -ENOMEM;
    }
    const char *conn = rq->upgrade     ? "Connection: upgrade\r\n\r\n"
                       : rq->keepalive ? "\r\n"
                                       : "Connection: close\r\n\r\n";
    return puts_(out, conn) ? 0 : -ENOMEM;
}

/* --- The response ------------------------------------------------------------------------ */

static md_proxy_resp *resp_of(llhttp_t *p)
{
    return (md_proxy_resp *)(void *)((char *)p - offsetof(md_proxy_resp, parser));
}

static int keep(md_proxy_resp *r, const char *at, size_t len)
{
    if (len == 0)
        return 0; /* llhttp may call with an empty span, before fields has storage */
    if (md_bytes_grow(&r->fields, &r->fields_cap, r->fields_len + len, 1024) != 0) {
        r->error = MD_RESP_NOMEM;
        return HPE_USER;
    }
    memcpy(r->fields + r->fields_len, at, len);
    r->fields_len += len;
    return 0;
}

static int r_message_begin(llhttp_t *p)
{
    md_proxy_resp *r = resp_of(p);
    r->fields_len = 0;
    r->reason_len = 0;
    r->value_open = false;
    return 0;
}

static int r_status(llhttp_t *p, const char *at, size_t len)
{
    md_proxy_resp *r = resp_of(p);
    for (size_t i = 0; i < len; i++) {
        unsigned ch = (unsigned char)at[i];
        /* a reason of visible ASCII and spaces is passed on; anything else is dropped */
        if (ch < 0x20 || ch >= 0x7f) {
            if (ch != '\t') {
                r->reason_len = 0xff;
                return 0;
            }
        }
    }
    if (r->reason_len == 0xff)
        return 0;
    if (r->reason_len + len >= sizeof r->reason) {
        r->reason_len = 0xff;
        return 0;
    }
    memcpy(r->reason + r->reason_len, at, len);
    r->reason_len = (uint8_t)(r->reason_len + len);
    return 0;
}

static int r_status_complete(llhttp_t *p)
{
    md_proxy_resp *r = resp_of(p);
    if (p->http_major != 1 || p->status_code < 100 || p->status_code > 599) {
        r->error = MD_RESP_GARBAGE;
        return HPE_USER;
    }
    return 0;
}

/* In the trailer section (after the final head): whether these bytes of it are kept. Only a
 * body of unknown length has trailers, never a coded one; past max_head they are all dropped
 * and the body still ends (its bytes have gone out: a 502 is no longer possible, and a
 * recipient may discard trailers, RFC 9110 6.5.1). */
static bool trailer_kept(md_proxy_resp *r, size_t len)
{
    if (r->client_framing != MD_CLIENT_STREAM || r->zs != NULL || r->trailers_over)
        return false;
    if (r->fields_len - r->trailer_at + len > r->max_head) {
        r->trailers_over = true;
        r->fields_len = r->trailer_at;
        return false;
    }
    return true;
}

static int r_field(llhttp_t *p, const char *at, size_t len)
{
    md_proxy_resp *r = resp_of(p);
    if (r->head_sent && !trailer_kept(r, len))
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (at[i] == ' ' || at[i] == '\t') { /* "Name : v" is no field (RFC 9112 5.1) */
            r->error = MD_RESP_GARBAGE;
            return HPE_USER;
        }
    }
    return keep(r, at, len);
}

static int r_field_complete(llhttp_t *p)
{
    md_proxy_resp *r = resp_of(p);
    if (r->head_sent && !trailer_kept(r, 2))
        return 0;
    if (r->fields_len == 0 || r->fields[r->fields_len - 1] == '\n') {
        r->error = MD_RESP_GARBAGE; /* ": v": a field without a name (RFC 9110 5.1: a token) */
        return HPE_USER;
    }
    return keep(r, ": ", 2);
}

static int r_value(llhttp_t *p, const char *at, size_t len)
{
    md_proxy_resp *r = resp_of(p);
    if (r->head_sent && !trailer_kept(r, len))
        return 0;
    if (len != 0 && memchr(at, '\0', len) != NULL) {
        r->error = MD_RESP_GARBAGE;
        return HPE_USER;
    }
    return keep(r, at, len);
}

static int r_value_complete(llhttp_t *p)
{
    md_proxy_resp *r = resp_of(p);
    if (r->head_sent && !trailer_kept(r, 2))
        return 0;
    while (r->fields_len != 0 &&
           (r->fields[r->fields_len - 1] == ' ' || r->fields[r->fields_len - 1] == '\t'))
        r->fields_len--;
    return keep(r, "\r\n", 2);
}

static bool out_put(md_proxy_resp *r, const char *s, size_t n)
{
    if (md_outbuf_append(r->out, s, n) != 0) {
        r->error = MD_RESP_NOMEM;
        return false;
    }
    return true;
}

int md_proxy_max_forwards(const char *v, size_t n, uint64_t *hops)
{
    if (n == 0)
        return -EINVAL;
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -EINVAL;
        unsigned d = (unsigned)(v[i] - '0');
        h = h > (UINT64_MAX - d) / 10 ? UINT64_MAX : h * 10 + d; /* more than we count: ours */
    }
    *hops = h;
    return 0;
}

/* Fields a trailer must not carry (RFC 9110 6.5.1), beyond the hop-by-hop ones: framing,
 * routing, request modifiers and cache controls, authentication (cookies with it), response
 * control data (RFC 9110 10.2), and those that say how to process the content. */
static bool trailer_forbidden(const char *n, size_t nl)
{
    static const char *const names[] = {
        "content-length",
        "host",
        "cache-control",
        "expect",
        "max-forwards",
        "pragma",
        "range",
        "if-match",
        "if-none-match",
        "if-range",
        "if-modified-since",
        "if-unmodified-since",
        "authorization",
        "www-authenticate",
        "authentication-info",
        "set-cookie",
        "cookie",
        "age",
        "expires",
        "vary",
        "location",
        "retry-after",
        "content-encoding",
        "content-type",
        "content-range",
        "accept-ranges",
        "allow",
        "server",
        "warning",
        "trailer",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (md_ascii_eq_lower(n, nl, names[i]))
            return true;
    return false;
}

size_t md_proxy_trailers(char *dst, const char *trailers, size_t len)
{
    struct field_iter it = {trailers, trailers + len};
    const char *n, *v;
    size_t nl, vl, at = 0;
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (nl == 0 || md_proxy_hop_by_hop(n, nl) || trailer_forbidden(n, nl))
            continue;
        memcpy(dst + at, n, nl);
        memcpy(dst + at + nl, ": ", 2);
        memcpy(dst + at + nl + 2, v, vl);
        memcpy(dst + at + nl + 2 + vl, "\r\n", 2);
        at += nl + 2 + vl + 2;
    }
    return at;
}

/* The upstream's end-to-end fields of fields[from..to), as the client gets them: hop-by-hop
 * ones (and those the head's Connection names) removed; Upgrade kept for a 101,
 * Content-Length only where keep_length says, the trailer-forbidden ones dropped in trailers. */
static int put_fields(md_proxy_resp *r, size_t from, size_t to, unsigned status, bool keep_length,
                      bool trailer)
{
    conn_names cn; /* the head's: trailers are named by its Connection too */
    conn_names_init(&cn, r->fields, trailer ? r->trailer_at : r->fields_len);
    struct field_iter it = {r->fields + from, r->fields + to};
    const char *fn, *v;
    size_t nl, vl;
    while (next_field(&it, &fn, &nl, &v, &vl)) {
        if (nl == 0)
            continue;
        if (status == 101 && md_ascii_eq_lower(fn, nl, "upgrade")) {
            /* the protocol the tunnel switches to */
        } else if (!trailer && md_ascii_eq_lower(fn, nl, "trailer")) {
            /* End-to-end (RFC 9110 6.6.2): kept where the upstream's trailers can follow, a
             * chunked body this proxy does not code (trailer_kept). */
            if (r->client_framing != MD_CLIENT_STREAM || r->close_delimited ||
                r->coding != MD_CODING_NONE || named_by_connection(&cn, fn, nl))
                continue;
        } else if (md_proxy_hop_by_hop(fn, nl) || named_by_connection(&cn, fn, nl)) {
            continue;
        }
        if (md_ascii_eq_lower(fn, nl, "content-length") && !keep_length)
            continue;
        if (trailer && trailer_forbidden(fn, nl))
            continue;
        if (!trailer && r->headers != NULL && md_headers_apply(r->headers, status) &&
            md_headers_drops(r->headers, fn, nl))
            continue;
        if (!trailer && r->coding != MD_CODING_NONE) {
            /* Ranges are of the identity body, which this is not (as nginx's gzip). */
            if (md_ascii_eq_lower(fn, nl, "accept-ranges"))
                continue;
            /* The coded bytes are not the upstream's: a strong validator is weakened
             * (RFC 9110 8.8.1). */
            if (md_ascii_eq_lower(fn, nl, "etag") && vl != 0 && v[0] == '"') {
                if (!out_put(r, "ETag: W/", 8) || !out_put(r, v, vl) || !out_put(r, "\r\n", 2))
                    return HPE_USER;
                continue;
            }
        }
        if (!out_put(r, fn, nl) || !out_put(r, ": ", 2) || !out_put(r, v, vl) ||
            !out_put(r, "\r\n", 2))
            return HPE_USER;
        if (nl == 4 && md_ascii_eq_lower(fn, 4, "date"))
            r->dated = true;
    }
    return 0;
}

/* The fields compression adds to a final head (proxy_msg.h). */
static int put_coding_fields(md_proxy_resp *r)
{
    if (r->coding != MD_CODING_NONE) {
        const char *name = md_coding_name(r->coding);
        if (!out_put(r, "Content-Encoding: ", 18) || !out_put(r, name, strlen(name)) ||
            !out_put(r, "\r\n", 2))
            return HPE_USER;
    }
    if (r->add_vary && !out_put(r, "Vary: Accept-Encoding\r\n", 23))
        return HPE_USER;
    return 0;
}

/* Whether a list field named name (any case) in fields[0..len) has an element equal to one
 * of a or b (b may be NULL), in any case. */
static bool list_has(const char *fields, size_t len, const char *name, const char *a, const char *b)
{
    struct field_iter it = {fields, fields + len};
    const char *n, *v;
    size_t nl, vl;
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (!md_ascii_eq_lower(n, nl, name))
            continue;
        md_list l = md_list_of(v, vl);
        const char *e;
        size_t el;
        while (md_list_next(&l, &e, &el))
            if (md_ascii_eq_ci(e, el, a, strlen(a)) ||
                (b != NULL && md_ascii_eq_ci(e, el, b, strlen(b))))
                return true;
    }
    return false;
}

/* Whether every Transfer-Encoding element of the head is "chunked", and there is one (RFC 9112
 * 6.1, 7: chunked once, last). llhttp frames "gzip, chunked" as chunked, which would pass the
 * body on de-chunked and still gzip-coded, with nothing left to tell the client. */
static bool chunked_alone(const char *fields, size_t len)
{
    struct field_iter it = {fields, fields + len};
    const char *n, *v, *e;
    size_t nl, vl, el;
    unsigned chunked = 0;
    while (next_field(&it, &n, &nl, &v, &vl)) {
        if (!md_ascii_eq_lower(n, nl, "transfer-encoding"))
            continue;
        md_list l = md_list_of(v, vl);
        while (md_list_next(&l, &e, &el))
            if (!md_ascii_eq_ci(e, el, "chunked", 7) || ++chunked > 1)
                return false;
    }
    return chunked == 1;
}

/* At the final head, framing decided: whether the body is coded, and whether Vary is added
 * (proxy_msg.h). Coding changes the client's framing to chunks (or DATA). */
static void plan_coding(md_proxy_resp *r, unsigned status, bool no_body)
{
    const md_route_compress *c = r->compress;
    if (c == NULL || c->codings == 0 || (status != 200 && status != 403 && status != 404))
        return;
    const char *f = r->fields;
    size_t n = r->fields_len, tl;
    const char *t = md_proxy_field(f, n, "content-type", &tl);
    char ctype[MD_COMPRESS_TYPES_MAX];
    if (t == NULL || tl >= sizeof ctype)
        return;
    memcpy(ctype, t, tl);
    ctype[tl] = '\0';
    if (!md_compress_type_ok(c, ctype) || md_proxy_field(f, n, "content-encoding", &tl) != NULL ||
        list_has(f, n, "cache-control", "no-transform", NULL))
        return;
    r->add_vary = !list_has(f, n, "vary", "accept-encoding", "*");
    bool known = r->client_framing == MD_CLIENT_LENGTH;
    if (no_body || r->accept_coding == MD_CODING_NONE || (known && r->length < c->min_length))
        return;
    unsigned coding = r->accept_coding;
    int level = coding == MD_CODING_GZIP ? c->level_gzip : c->level_zstd;
    r->zs = md_zstream_take(coding, level, known ? r->length : 0, false);
    if (r->zs == NULL)
        return; /* no memory for a compressor: the body goes as it is */
    r->coding = (uint8_t)coding;
    r->client_framing = MD_CLIENT_STREAM;
}

/* A head for the sink: the fields gathered apart (the upstream's end-to-end ones, Via; a
 * final head's coding fields and the route's rules), then handed to interim or head. */
static int write_head(md_proxy_resp *r, unsigned status)
{
    bool interim = status < 200 && status != 101;
    bool keep_length = !interim && r->client_framing == MD_CLIENT_NONE && status != 204 &&
                       (r->head_request || status == 304);
    md_outbuf head = {0}; /* storage from the thread's block cache (outbuf.c) */
    md_outbuf *fields = &head;
    md_outbuf *out = r->out;
    r->out = fields;
    r->dated = false;
    int rc = put_fields(r, 0, r->fields_len, status, keep_length, false);
    if (rc == 0 && !interim && r->date && !r->dated) {
        /* RFC 9110 6.6.1: a recipient with a clock adds the Date a forwarded response lacks. */
        char date[sizeof "Date: \r\n" + MD_HTTPDATE_LEN];
        memcpy(date, "Date: ", 6);
        size_t n = 6 + md_httpdate_format(time(NULL), date + 6);
        memcpy(date + n, "\r\n", 2);
        if (!out_put(r, date, n + 2))
            rc = HPE_USER;
    }
    /* Via names the protocol the response came in (RFC 9110 7.6.3): the upstream's 1.x. */
    if (rc == 0 && r->via &&
        !out_put(r, r->parser.http_minor == 0 ? "Via: 1.0 magpied\r\n" : "Via: 1.1 magpied\r\n",
                 18))
        rc = HPE_USER;
    if (rc == 0 && !interim)
        rc = put_coding_fields(r);
    if (rc == 0 && !interim && r->headers != NULL && md_headers_apply(r->headers, status) &&
        !out_put(r, r->headers->add, r->headers->add_len))
        rc = HPE_USER;
    r->out = out;
    const char *f = md_outbuf_pending_data(fields);
    size_t flen = md_outbuf_pending(fields);
    size_t rlen = r->reason_len == 0xff ? 0 : r->reason_len;
    if (rc == 0) {
        int e = interim ? r->sink->interim(r->sink_arg, status, r->reason, rlen, f, flen)
                        : r->sink->head(r->sink_arg, status, r->reason, rlen, f, flen,
                                        r->client_framing == MD_CLIENT_LENGTH
                                            ? r->length
                                            : MD_PROXY_LENGTH_UNKNOWN);
        if (e != 0) {
            r->error = MD_RESP_NOMEM;
            rc = HPE_USER;
        }
    }
    md_outbuf_free(fields);
    return rc;
}

static int r_headers_complete(llhttp_t *p)
{
    md_proxy_resp *r = resp_of(p);
    unsigned status = p->status_code;
    if (status == 101) {
        if (!r->tunnel_ok) {
            r->error = MD_RESP_GARBAGE; /* no upgrade was asked for: nothing to switch to */
            return HPE_USER;
        }
        r->status = 101;
        r->client_framing = MD_CLIENT_NONE;
        r->head_sent = true;
        if (write_head(r, 101) != 0)
            return HPE_USER;
        return 1; /* llhttp stops at its end: the tunnel's bytes follow */
    }
    if (status < 200) {
        r->interim++;
        if (r->interim > MD_PROXY_MAX_INTERIM) { /* an upstream that never gets to its answer */
            r->error = MD_RESP_GARBAGE;
            return HPE_USER;
        }
        r->client_framing = MD_CLIENT_NONE;
        if (write_head(r, status) != 0)
            return HPE_USER;
        return 1; /* 1xx has no body (RFC 9110 15.2), whatever llhttp would infer */
    }
    r->status = (uint16_t)status;
    /* A coding other than chunked, in a response, would leave the body unframed for us (or
     * de-chunked) and coded for the client: refused rather than passed on stripped. */
    if ((p->flags & F_TRANSFER_ENCODING) &&
        (!(p->flags & F_CHUNKED) || !chunked_alone(r->fields, r->fields_len))) {
        r->error = MD_RESP_GARBAGE;
        return HPE_USER;
    }
    bool no_body = r->head_request || status == 204 || status == 304;
    /* An HTTP/1.0 message with Transfer-Encoding has faulty framing (RFC 9112 6.1): the
     * upstream may hold back part of it, so its connection is not used again. */
    r->upstream_keepalive = llhttp_should_keep_alive(p) != 0 &&
                            !(p->http_minor == 0 && (p->flags & F_TRANSFER_ENCODING));
    if (no_body) {
        r->client_framing = MD_CLIENT_NONE;
    } else if (p->flags & F_CHUNKED) {
        r->client_framing = MD_CLIENT_STREAM;
    } else if (p->flags & F_CONTENT_LENGTH) {
        r->client_framing = MD_CLIENT_LENGTH;
        r->length = p->content_length;
    } else {
        r->close_delimited = true;
        r->upstream_keepalive = false;
        r->client_framing = MD_CLIENT_STREAM;
    }
    plan_coding(r, status, no_body);
    r->head_sent = true;
    if (write_head(r, status) != 0)
        return HPE_USER;
    r->trailer_at = r->fields_len; /* the head's fields stay: their Connection still counts */
    return no_body ? 1 : 0;
}

/* The compressor's output so far, to the sink. */
static int pass_coded(md_proxy_resp *r)
{
    size_t n = md_outbuf_pending(&r->coded);
    if (n == 0)
        return 0;
    int rc = r->sink->body(r->sink_arg, r->out, md_outbuf_pending_data(&r->coded), n);
    md_outbuf_consume(&r->coded, n);
    return rc;
}

static int r_body(llhttp_t *p, const char *at, size_t len)
{
    md_proxy_resp *r = resp_of(p);
    if (len == 0)
        return 0;
    r->body_bytes += len;
    int rc;
    if (r->zs != NULL) {
        rc = md_zstream_write(r->zs, &r->coded, at, len, false);
        if (rc != 0) {
            r->error = rc == -ENOMEM ? MD_RESP_NOMEM : MD_RESP_GARBAGE;
            return HPE_USER;
        }
        rc = pass_coded(r);
    } else {
        rc = r->sink->body(r->sink_arg, r->out, at, len);
    }
    if (rc != 0) {
        r->error = MD_RESP_NOMEM;
        return HPE_USER;
    }
    return 0;
}

/* The body's end: a coded one's compressor finished, then the sink's end with the trailers
 * kept (filtered as a head's fields, and those a trailer must not carry). */
static bool end_body(md_proxy_resp *r)
{
    if (r->zs != NULL) {
        int rc = md_zstream_write(r->zs, &r->coded, NULL, 0, true);
        md_zstream_give(r->zs);
        r->zs = NULL;
        if (rc == 0)
            rc = pass_coded(r) != 0 ? -ENOMEM : 0;
        if (rc != 0) {
            r->error = rc == -ENOMEM ? MD_RESP_NOMEM : MD_RESP_GARBAGE;
            return false;
        }
    }
    md_outbuf trailers = {0};
    int rc = 0;
    if (r->fields_len != r->trailer_at) {
        md_outbuf *out = r->out;
        r->out = &trailers;
        rc = put_fields(r, r->trailer_at, r->fields_len, r->status, false, true);
        r->out = out;
    }
    if (rc == 0 && r->sink->end(r->sink_arg, r->out, md_outbuf_pending_data(&trailers),
                                md_outbuf_pending(&trailers)) != 0) {
        r->error = MD_RESP_NOMEM;
        rc = HPE_USER;
    }
    md_outbuf_free(&trailers);
    return rc == 0;
}

static int r_message_complete(llhttp_t *p)
{
    md_proxy_resp *r = resp_of(p);
    if (!r->head_sent && r->status != 101)
        return HPE_PAUSED; /* an interim response: feed starts the next head's count */
    r->complete = true;
    if (r->client_framing != MD_CLIENT_NONE && !end_body(r))
        return HPE_USER;
    return HPE_PAUSED; /* anything after it is not this response's */
}

static const llhttp_settings_t resp_settings = {
    .on_message_begin = r_message_begin,
    .on_status = r_status,
    .on_status_complete = r_status_complete,
    .on_header_field = r_field,
    .on_header_field_complete = r_field_complete,
    .on_header_value = r_value,
    .on_header_value_complete = r_value_complete,
    .on_headers_complete = r_headers_complete,
    .on_body = r_body,
    .on_message_complete = r_message_complete,
};

void md_proxy_resp_init(md_proxy_resp *r, uint32_t max_head, bool head_request,
                        const md_proxy_sink *sink, void *sink_arg)
{
    memset(r, 0, sizeof *r);
    llhttp_init(&r->parser, HTTP_RESPONSE, &resp_settings);
    r->max_head = max_head;
    r->head_request = head_request;
    r->sink = sink;
    r->sink_arg = sink_arg;
}

int md_proxy_resp_feed(md_proxy_resp *r, const char *data, size_t len, size_t *used, md_outbuf *out)
{
    r->out = out;
    *used = 0;
    if (len != 0)
        r->started = true;
    while (*used < len) {
        size_t n = len - *used;
        /* While the head is incomplete llhttp sees no more than its limit allows, so an
         * oversized head is refused exactly at max_head bytes, never buffered past it. */
        bool in_head = !r->head_sent && r->status != 101;
        if (in_head && n > r->max_head - r->head_bytes)
            n = r->max_head - r->head_bytes;
        if (n == 0)
            return MD_RESP_TOO_BIG;
        const char *at = data + *used;
        llhttp_errno_t e = llhttp_execute(&r->parser, at, n);
        if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
            const char *stop = llhttp_get_error_pos(&r->parser);
            *used += (size_t)(stop - at);
            if (e == HPE_PAUSED && !r->complete && r->status != 101) {
                /* an interim response ended: each head has max_head bytes of its own */
                llhttp_resume(&r->parser);
                r->head_bytes = 0;
                continue;
            }
            if (e == HPE_PAUSED_UPGRADE || r->status == 101)
                return MD_RESP_UPGRADE;
            return MD_RESP_DONE;
        }
        if (e != HPE_OK)
            return r->error != 0 ? r->error : MD_RESP_GARBAGE;
        if (in_head && !r->head_sent) {
            r->head_bytes += n;
            if (r->head_bytes >= r->max_head)
                return MD_RESP_TOO_BIG;
        }
        *used += n;
    }
    return MD_RESP_MORE;
}

int md_proxy_resp_eof(md_proxy_resp *r, md_outbuf *out)
{
    r->out = out;
    if (!r->head_sent || !r->close_delimited)
        return MD_RESP_GARBAGE; /* cut short */
    if (llhttp_finish(&r->parser) != HPE_OK && (!r->complete || r->error != 0))
        return r->error != 0 ? r->error : MD_RESP_GARBAGE;
    /* llhttp_finish() ran on_message_complete, which ended the body. */
    if (!r->complete) {
        r->complete = true;
        if (r->client_framing != MD_CLIENT_NONE && !end_body(r))
            return r->error != 0 ? r->error : MD_RESP_NOMEM;
    }
    return MD_RESP_DONE;
}

void md_proxy_resp_free(md_proxy_resp *r)
{
    md_zstream_give(r->zs); /* a coded body cut short */
    r->zs = NULL;
    md_outbuf_free(&r->coded);
    free(r->fields);
    r->fields = NULL;
    r->fields_cap = r->fields_len = 0;
}
