/* handler = proxy: the request goes to a server of the route's [upstream], and its response
 * back to the client.
 *
 * The handler pends at the request head (MD_BODY_PIPE) and does the rest from its poll, on
 * the connection's task: pick a server (http/handlers/proxy/upstream.c), take a pooled connection
 * or connect, send the head it built at on_head (proxy_msg.c), pass the body on span by span
 * (parsing of the client's input waits for each span to be written: a slow upstream holds the
 * client back with one span in hand), then parse the response, appending the client's head and each
 * piece of body to the connection's output and returning MD_PENDING_MORE once buffer_bytes wait (or
 * nothing more has come), so a slow client holds the upstream back with at most buffer_bytes and
 * one read buffer in hand.
 *
 * Failures before the response head are 502 (504 for a timeout), logged and counted; one
 * before the head is whole (no byte, or a head cut short) is retried on another server, as
 * nginx's proxy_next_upstream (error, timeout): for any method when nothing was sent, for
 * idempotent ones otherwise, and
 * never once a part of the body has been let go of, within tries and retry_timeout_ms. After
 * the head, a failure can only cut the response short: the connection closes.
 *
 * A route's compress codes the response as it streams (proxy_msg.h says which): the client's
 * Accept-Encoding is forwarded as it came, and what the upstream coded itself passes as it is.
 *
 * The response goes to the client through the request API's relay calls (request.h), which
 * frame it for the client's protocol: chunks or the connection's end over HTTP/1.x, DATA and
 * trailing HEADERS over HTTP/2, where the stream's DATA is also the piped request body and a
 * failure after the head resets the stream only. The core answered Expect: 100-continue
 * itself at the head (Expect never goes upstream, so no client waits on a server that ignores
 * it), so the relay drops a server's own 100.
 *
 * An upstream connection goes back to the pool only when its response ended exactly at the
 * end of what was read, framed by length or chunks, with the request sent whole and the
 * server keeping it: any doubt closes it, so a response only reaches the client that asked.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ini.h"
#include "core/log.h"
#include "core/tls_stream.h"
#include "core/text.h"
#include "http/handler.h"
#include "http/handlers/proxy/proxy_msg.h"
#include "http/handlers/proxy/upstream.h"

/* The route's options. */
enum {
    NAME_MAX_ = 33,   /* bytes of an upstream's name, with its NUL */
    HOST_MAX = 200,   /* bytes of a literal Host, with its NUL */
    PREFIX_MAX = 128, /* bytes of add_prefix, with its NUL */
};

/* What the upstream request's Host is. */
typedef enum proxy_host {
    HOST_PASS,     /* the client's */
    HOST_UPSTREAM, /* the server's HOST:PORT */
    HOST_LITERAL,  /* proxy_conf.host */
} proxy_host;

/* Where Via: 1.1 magpied goes (RFC 9110 7.6.3: a gateway MUST add it to the requests it
 * forwards, and MAY to the responses). */
typedef enum proxy_via {
    VIA_REQUEST, /* the default */
    VIA_OFF,
    VIA_ON, /* the request and the response */
} proxy_via;

typedef struct proxy_conf {
    char upstream[NAME_MAX_]; /* the [upstream] it names */
    uint8_t upstream_index;   /* its place in the configuration's table, once linked */
    uint8_t host_mode;        /* proxy_host */
    uint8_t via;              /* proxy_via */
    bool forwarded, websocket;
    uint32_t upstream_line; /* of the upstream key, for the message when it names nothing */
    char host[HOST_MAX];
    bool strip_prefix;           /* the route's path taken off the front of the target */
    char add_prefix[PREFIX_MAX]; /* put in front of it; "": nothing */
} proxy_conf;

_Static_assert(sizeof(proxy_conf) <= MD_ROUTE_CONF_MAX, "proxy_conf fits a route");

extern const md_handler md_handler_proxy;

static inline const proxy_conf *opts(const md_route *r)
{
    return md_route_conf(r);
}

static int proxy_key(void *conf, const char *key, const char *value, uint32_t line, char *msg,
                     size_t msg_len)
{
    proxy_conf *pc = conf;
    if (strcmp(key, "upstream") == 0) {
        size_t n = strlen(value);
        if (!md_text_name_ok(value, n, NAME_MAX_)) {
            md_say(msg, msg_len,
                   "expected an upstream name of [A-Za-z0-9_-], 1 to %d bytes, got \"%s\"",
                   NAME_MAX_ - 1, value);
            return -EINVAL;
        }
        memcpy(pc->upstream, value, n + 1);
        pc->upstream_line = line;
        return 0;
    }
    if (strcmp(key, "host") == 0) {
        if (strcmp(value, "pass") == 0) {
            pc->host_mode = HOST_PASS;
        } else if (strcmp(value, "upstream") == 0) {
            pc->host_mode = HOST_UPSTREAM;
        } else {
            if (value[0] == '\0' || strlen(value) >= HOST_MAX ||
                !md_text_field_safe(value, false)) {
                md_say(msg, msg_len,
                       "expected pass, upstream, or a host of visible ASCII without spaces, at "
                       "most %d bytes",
                       HOST_MAX - 1);
                return -EINVAL;
            }
            pc->host_mode = HOST_LITERAL;
            md_text_set(pc->host, sizeof pc->host, value);
        }
        return 0;
    }
    if (strcmp(key, "add_prefix") == 0) {
        size_t n = strlen(value);
        bool ok = n != 0 && n < PREFIX_MAX && value[0] == '/' && md_path_is_normal(value, n);
        for (size_t i = 0; ok && i < n; i++) {
            unsigned ch = (unsigned char)value[i];
            ok = ch > ' ' && ch < 0x7f && strchr("?#%\\", (int)ch) == NULL;
        }
        if (!ok) {
            md_say(msg, msg_len,
                   "expected a normalised path of visible ASCII without '?', '#', '%%' or '\\', "
                   "at most %d bytes",
                   PREFIX_MAX - 1);
            return -EINVAL;
        }
        memcpy(pc->add_prefix, value, n + 1);
        return 0;
    }
    if (strcmp(key, "via") == 0) {
        bool on;
        if (strlen(value) == 7 && md_ascii_eq_lower(value, 7, "request")) {
            pc->via = VIA_REQUEST;
        } else if (md_parse_bool(value, &on) == 0) {
            pc->via = on ? VIA_ON : VIA_OFF;
        } else {
            md_say(msg, msg_len, "expected request, or %s, got \"%s\"", MD_BOOL_GRAMMAR, value);
            return -EINVAL;
        }
        return 0;
    }
    bool *b = strcmp(key, "forwarded") == 0      ? &pc->forwarded
              : strcmp(key, "strip_prefix") == 0 ? &pc->strip_prefix
                                                 : &pc->websocket;
    return md_conf_bool(value, b, msg, msg_len);
}

static int proxy_check(const void *conf, char *msg, size_t msg_len)
{
    if (((const proxy_conf *)conf)->upstream[0] == '\0') {
        md_say(msg, msg_len, "upstream: required for handler = proxy");
        return -EINVAL;
    }
    return 0;
}

/* After the whole file: the [upstream] the route names exists. */
static int proxy_link(void *conf, const md_ini_conf *cfg, uint32_t *line, char *msg, size_t msg_len)
{
    proxy_conf *pc = conf;
    const md_upstream_table *t = md_ini_find(cfg, &md_section_upstream);
    int k = t != NULL ? md_upstream_find(t, pc->upstream) : -1;
    if (k < 0) {
        md_say(msg, msg_len, "upstream: no [upstream %s] section", pc->upstream);
        *line = pc->upstream_line;
        return -EINVAL;
    }
    pc->upstream_index = (uint8_t)k;
    return 0;
}

enum state {
    ST_PICK,
    ST_CONNECT,
    ST_HANDSHAKE, /* tls = on: the TLS handshake, within connect_timeout_ms */
    ST_SEND_HEAD,
    ST_SEND_BODY,
    ST_READ,
    ST_TUNNEL,
};

typedef struct proxy {
    md_http_pending pending;
    const md_route *route;
    md_upstream *up;
    mp_timer timer;
    uint8_t state;
    bool reused;        /* the connection came from the pool */
    bool no_pool;       /* the next attempt connects afresh (a pooled one just went stale) */
    bool body_released; /* a span was written: the body cannot be sent again, no retry */
    bool last_chunk;    /* the chunked body's end is in span */
    bool request_sent;  /* the whole request went out */
    bool piped;         /* the request has a body */
    bool chunked;       /* ... sent chunked */
    bool idempotent;
    uint8_t last_reason; /* md_upstream_reason of the last failure */
    unsigned attempts;
    uint64_t tried;
    uint64_t start_ms, deadline_ms, head_deadline_ms;
    md_upstream_peer *peer;
    md_upstream_peer *head_for; /* the server head's Host was built for (host = upstream) */
    md_proxy_req rq;            /* what the head is built from: pointers into the request */
    md_upstream_conn *uc;
    char *head; /* the upstream request head */
    size_t head_len;
    char *span; /* the body span in hand, framed */
    size_t span_len, span_cap;
    char *key; /* the hash key */
    size_t key_len;
    char *target; /* the target rewritten by strip_prefix and add_prefix; NULL: as sent */
    md_proxy_resp resp;
    bool resp_on;
    bool upgrade; /* websocket = on and the client asked: a 101 starts a tunnel */
    /* The tunnel: a view of each side's input, held until the other side has taken it. */
    const char *down, *up_data;
    size_t down_len, up_len;
    bool down_eof, up_eof; /* the upstream's, the client's side has half-closed */
} proxy;

static void release_conn(proxy *p, bool failed)
{
    if (p->uc != NULL) {
        md_upstream_conn_close(p->uc);
        p->uc = NULL;
    }
    if (p->peer != NULL) {
        md_upstream_done(p->peer, failed, mp_now_ms());
        p->peer = NULL;
    }
}

static void proxy_free(proxy *p)
{
    mp_timer_cancel(&p->timer);
    release_conn(p, false);
    if (p->resp_on)
        md_proxy_resp_free(&p->resp);
    free(p->head);
    free(p->span);
    free(p->key);
    free(p->target);
    free(p);
}

static void proxy_cancel(md_http_pending *pd)
{
    proxy_free((proxy *)(void *)pd);
}

static bool timed_out_reason(md_upstream_reason r)
{
    return r == MD_UP_CONNECT_TIMEOUT || r == MD_UP_SEND_TIMEOUT || r == MD_UP_HEADER_TIMEOUT ||
           r == MD_UP_READ_TIMEOUT;
}

/* The attempt on p->peer failed before the response head: log, count, and either go on to
 * another server (ST_PICK) or not (false). */
static bool attempt_failed(proxy *p, md_http_req *req, md_upstream_reason why, bool sent_any)
{
    md_upstream_peer *peer = p->peer;
    size_t plen;
    const char *path = md_http_req_path(req, &plen);
    md_log(MD_LOG_ERROR, "upstream %s server %s: %s (%s %.*s, attempt %u)", p->up->conf->name,
           peer->conf->label, md_upstream_reason_name(why), md_method_name(md_http_req_method(req)),
           (int)plen, path, p->attempts);
    /* Relaxed: a counter for /metrics. */
    atomic_fetch_add_explicit(&peer->n->failures[why], 1, memory_order_relaxed);
    p->last_reason = (uint8_t)why;
    release_conn(p, true);
    if (p->resp_on) {
        md_proxy_resp_free(&p->resp);
        p->resp_on = false;
    }
    bool may = p->attempts < p->up->conf->tries &&
               mp_now_ms() - p->start_ms < p->up->conf->retry_timeout_ms && !p->body_released &&
               (!sent_any || p->idempotent);
    p->state = ST_PICK;
    return may;
}

static void stale_retry(proxy *p)
{
    md_log(MD_LOG_INFO,
           "upstream %s server %s: a pooled connection was closed by the server; "
           "sending again on a new one",
           p->up->conf->name, p->peer->conf->label);
    p->tried &= ~(UINT64_C(1) << (p->peer - p->up->peers));
    release_conn(p, false);
    if (p->resp_on) {
        md_proxy_resp_free(&p->resp);
        p->resp_on = false;
    }
    p->attempts--;
    p->no_pool = true;
    p->state = ST_PICK;
}

/* No response will come from upstream: answer the client ourselves. */
static int answer_error(proxy *p, md_http_req *req, unsigned status)
{
    /* The client's body is not all read: what is left of it must not be taken for a
     * request. */
    if (p->piped && !md_http_req_body_done(req))
        md_http_req_close_after(req);
    const md_http_status *st = md_http_status_of(status);
    int rc = md_http_respond(req, status, NULL, "text/plain", st->body, st->body_len);
    proxy_free(p);
    return rc;
}

static int fail_status(proxy *p)
{
    return timed_out_reason((md_upstream_reason)p->last_reason) ? 504 : 502;
}

/* The response is complete: the connection goes back to the pool when nothing about it is in
 * doubt. */
static void finish(proxy *p, bool extra)
{
    md_upstream_conn *uc = p->uc;
    bool reuse = !extra && p->resp.complete && !p->resp.close_delimited &&
                 p->resp.upstream_keepalive && p->request_sent && p->up->conf->keepalive != 0 &&
                 (uc->tls == NULL || md_tls_stream_idle(uc->tls));
    if (reuse) {
        mp_tcp_disown(&uc->tcp);
        p->uc = NULL;
        md_upstream_pool_put(uc, mp_now_ms());
    }
    release_conn(p, false);
}

static int proxy_poll(md_http_pending *pd, md_http_req *req, mp_context *cx, md_http_io *io,
                      md_outbuf *out);

/* The upstream request head for an attempt on peer: built once, again only when Host names
 * the server (host = upstream) and a retry went to another. 0 or -ENOMEM. */
static int build_head(proxy *p, md_upstream_peer *peer)
{
    if (p->head != NULL && (opts(p->route)->host_mode != HOST_UPSTREAM || p->head_for == peer))
        return 0;
    p->rq.upstream_host = peer->conf->host;
    if (opts(p->route)->host_mode == HOST_UPSTREAM)
        p->rq.host = peer->conf->host;
    md_outbuf ob = {0};
    int rc = md_proxy_request_head(&p->rq, &ob);
    char *h = rc == 0 ? malloc(md_outbuf_pending(&ob)) : NULL;
    if (h == NULL) {
        md_outbuf_free(&ob);
        return -ENOMEM;
    }
    p->head_len = md_outbuf_pending(&ob);
    memcpy(h, md_outbuf_pending_data(&ob), p->head_len);
    md_outbuf_free(&ob);
    free(p->head);
    p->head = h;
    p->head_for = peer;
    return 0;
}

static bool is_idempotent(unsigned m)
{
    return m == MD_GET || m == MD_HEAD || m == MD_PUT || m == MD_DELETE || m == MD_OPTIONS ||
           m == MD_TRACE;
}

/* strip_prefix and add_prefix: the target sent upstream is add_prefix, then the normalised
 * path (below the route's own with strip_prefix) encoded again for a URI, then the query as
 * sent. 0 or -ENOMEM. */
static int rewrite_target(proxy *p, md_http_req *req, const md_route *r, const char *sent,
                          size_t sent_len)
{
    size_t plen, qlen = 0;
    const char *path = md_http_req_path(req, &plen);
    /* The query from the whole target the proxy keeps (the request's own copy may be cut). */
    const char *query = memchr(sent, '?', sent_len);
    if (query != NULL) {
        query++;
        qlen = sent_len - (size_t)(query - sent);
    }
    const char *add = opts(r)->add_prefix;
    size_t alen = strlen(add);
    if (opts(r)->strip_prefix) {
        size_t cut = r->path_len <= plen ? r->path_len : plen;
        /* A route "/api/" leaves "v1"; "/api" leaves "/v1": the '/' of the route is kept. */
        if (cut != 0 && r->path[cut - 1] == '/')
            cut--;
        path += cut;
        plen -= cut;
    }
    size_t cap = alen + 3 * plen + qlen + 4;
    char *t = malloc(cap);
    if (t == NULL)
        return -ENOMEM;
    size_t n = 0;
    memcpy(t, add, alen);
    n = alen;
    if (n != 0 && t[n - 1] == '/' && plen != 0 && path[0] == '/') {
        path++;
        plen--;
    }
    n += md_uri_path_encode(path, plen, t + n, cap - n - qlen - 2);
    if (n == 0)
        t[n++] = '/';
    if (query != NULL) {
        t[n++] = '?';
        memcpy(t + n, query, qlen);
        n += qlen;
    }
    t[n] = '\0';
    p->target = t;
    return 0;
}

/* An OPTIONS or TRACE request's Max-Forwards (RFC 9110 7.6.2): 0 means magpied is its final
 * recipient and forwards nothing; any other value goes up one less (md_proxy_request_head).
 * UINT64_MAX: another method, or no valid Max-Forwards. */
static uint64_t hops_left(md_http_req *req)
{
    unsigned m = md_http_req_method(req);
    if (m != MD_OPTIONS && m != MD_TRACE)
        return UINT64_MAX;
    size_t tlen, len, vlen;
    const char *kept = md_http_req_head(req, &tlen, &len);
    const char *v = md_proxy_field(kept + tlen + 2, len - tlen - 2, "max-forwards", &vlen);
    uint64_t hops;
    return v != NULL && md_proxy_max_forwards(v, vlen, &hops) == 0 ? hops : UINT64_MAX;
}

static int proxy_on_head(md_http_req *req, const md_route *r, uint64_t length, bool chunked)
{
    const md_http_server *srv = md_http_req_server(req);
    md_upstreams *ups = md_http_server_state(srv, &md_handler_proxy);
    if (ups == NULL || opts(r)->upstream_index >= ups->conf.n || srv->rt == NULL)
        return MD_BODY_DISCARD; /* on_req answers 502 */
    if (hops_left(req) == 0)
        return MD_BODY_DISCARD; /* answered here: the core's OPTIONS, on_req's TRACE */
    proxy *p = calloc(1, sizeof *p);
    if (p == NULL)
        return -ENOMEM;
    p->route = r;
    p->up = &ups->u[opts(r)->upstream_index];
    mp_timer_init(&p->timer, srv->rt);
    p->start_ms = mp_now_ms();
    p->idempotent = is_idempotent(md_http_req_method(req));
    p->piped = chunked || length != 0;
    p->chunked = chunked;
    if (chunked) { /* room for the last chunk of a body with none before it */
        if (md_bytes_grow(&p->span, &p->span_cap, 64, 64) != 0) {
            free(p);
            return -ENOMEM;
        }
    }

    size_t tlen, len;
    const char *kept = md_http_req_head(req, &tlen, &len);
    const char *peer = md_http_req_peer(req);
    const char *target = kept;
    size_t target_len = tlen;
    if (opts(r)->strip_prefix || opts(r)->add_prefix[0] != '\0') {
        if (rewrite_target(p, req, r, kept, tlen) != 0) {
            proxy_free(p);
            return -ENOMEM;
        }
        target = p->target;
        target_len = strlen(p->target);
    }
    p->rq = (md_proxy_req){
        .method = md_method_name(md_http_req_method(req)),
        .target = target,
        .target_len = target_len,
        .fields = kept + tlen + 2,
        .fields_len = len - tlen - 2,
        .peer = peer,
        .host = opts(r)->host_mode == HOST_LITERAL ? opts(r)->host : NULL,
        .forwarded = opts(r)->forwarded,
        .via = opts(r)->via != VIA_OFF,
        .via_protocol = md_http_req_version_major(req) == 2   ? "2"
                        : md_http_req_version_minor(req) == 0 ? "1.0"
                                                              : "1.1",
        .keepalive = p->up->conf->keepalive != 0,
        .framing = chunked                       ? MD_PROXY_BODY_CHUNKED
                   : md_http_req_has_length(req) ? MD_PROXY_BODY_LENGTH
                                                 : MD_PROXY_BODY_NONE,
        .length = length,
        .hop_count = md_http_req_method(req) == MD_OPTIONS || md_http_req_method(req) == MD_TRACE,
    };
    p->upgrade = opts(r)->websocket && md_http_req_upgrade(req) &&
                 md_http_req_version_minor(req) != 0 && !md_http_req_frames_body(req);
    p->rq.upgrade = p->upgrade;
    md_proxy_req rq = p->rq;
    const md_upstream_conf *uc = p->up->conf;
    const char *key = NULL;
    size_t klen = 0;
    if (uc->balance == MD_BALANCE_HASH_IP && peer != NULL) {
        key = peer;
        klen = strlen(peer);
    } else if (uc->balance == MD_BALANCE_HASH_HEADER) {
        key = md_proxy_field(rq.fields, rq.fields_len, uc->hash_header, &klen);
    }
    if (key != NULL) {
        p->key = malloc(klen + 1);
        if (p->key == NULL) {
            proxy_free(p);
            return -ENOMEM;
        }
        memcpy(p->key, key, klen);
        p->key_len = klen;
    }
    p->pending.poll = proxy_poll;
    p->pending.cancel = proxy_cancel;
    md_http_req_pend(req, &p->pending);
    return MD_BODY_PIPE;
}

/* A span of the request body: framed for upstream, and held until the poll has written it
 * (the core parses no further meanwhile). */
static int proxy_on_body(md_http_req *req, const md_route *r, const char *at, size_t len)
{
    (void)r; /* the handler's shape */
    proxy *p = (proxy *)(void *)md_http_req_pending(req);
    size_t need = len + 32;
    if (md_bytes_grow(&p->span, &p->span_cap, need, 64) != 0)
        return -ENOMEM;
    size_t n = 0;
    if (p->chunked)
        n = (size_t)snprintf(p->span, p->span_cap, "%zx\r\n", len);
    memcpy(p->span + n, at, len);
    n += len;
    if (p->chunked) {
        memcpy(p->span + n, "\r\n", 2);
        n += 2;
    }
    p->span_len = n;
    return 0;
}

static int proxy_on_req(md_http_req *req, const md_route *r)
{
    (void)r; /* reached for a TRACE with Max-Forwards 0, or with no upstream state (a test's) */
    if (hops_left(req) == 0) { /* the final recipient: magpied implements no TRACE */
        const md_http_status *st = md_http_status_of(501);
        return md_http_respond(req, 501, NULL, "text/plain", st->body, st->body_len);
    }
    return md_http_respond(req, 502, NULL, "text/plain", "Bad Gateway\n", 12);
}

/* Waits on the timer for the current deadline; true when it has passed. */
static bool expired(proxy *p, mp_context *cx)
{
    return mp_timer_poll(&p->timer, p->deadline_ms, cx) == MP_READY;
}

/* While the body is still going up, the server may answer (an early 413, a 401) and stop
 * reading; its answer is what the client gets, rather than a send timeout or the reset of its
 * close (RFC 9112 9.5: a client monitors the connection for an error response while it sends a
 * body). true: there is a response (or an end) to read, and the rest of the body is dropped:
 * the client's connection closes after the response, and this one is not pooled. */
static bool early_response(proxy *p, md_http_req *req, mp_context *cx)
{
    const char *data;
    size_t len;
    int err;
    if (md_upstream_conn_read(p->uc, cx, &data, &len, &err) != MP_READY || len == 0)
        return false;
    if (!md_http_req_body_done(req))
        md_http_req_close_after(req);
    p->body_released = true;
    p->request_sent = false; /* never pooled */
    p->head_deadline_ms = mp_now_ms() + p->up->conf->header_timeout_ms;
    p->state = ST_READ;
    return true;
}

/* The tunnel after a 101: bytes both ways as they come, each side's read view held until the
 * other side's write took it (so each direction is back-pressured by its reader). A side's
 * EOF is a half-close passed on: once what it sent has been written, the other side's
 * sending half is shut down (shutdown(SHUT_WR)) and the other direction goes on, so a client
 * that sends its last message and half-closes still gets the rest of the reply. The tunnel
 * ends when both sides have closed, at an error either way, or when nothing moves for
 * read_timeout_ms. Then both close. */
static int tunnel(proxy *p, mp_context *cx, md_http_io *io)
{
    if (io->read == NULL) {
        proxy_free(p);
        return -EPIPE;
    }
    if (io->nodelay != NULL)
        io->nodelay(io); /* a tunnel's small messages must not wait for the last one's ACK */
    md_upstream_conn *up = p->uc;
    bool moved;
    do {
        moved = false;
        int err = 0;
        if (!p->down_eof && p->down_len == 0 &&
            md_upstream_conn_read(up, cx, &p->down, &p->down_len, &err) == MP_READY &&
            p->down_len == 0) {
            /* The upstream is done sending; all it sent has been written to the client. */
            if (err != UV_EOF || io->shutdown == NULL || io->shutdown(io) != 0)
                goto end;
            p->down_eof = true;
            moved = true;
        }
        if (p->down_len != 0 && io->write(io, cx, p->down, p->down_len, &err) == MP_READY) {
            if (err != 0)
                goto end;
            md_upstream_conn_consume(up, p->down_len);
            p->down_len = 0;
            moved = true;
        }
        if (!p->up_eof && p->up_len == 0 &&
            io->read(io, cx, &p->up_data, &p->up_len, &err) == MP_READY && p->up_len == 0) {
            if (err != UV_EOF || md_upstream_conn_shutdown(up) != 0)
                goto end;
            p->up_eof = true;
            moved = true;
        }
        if (p->up_len != 0 &&
            md_upstream_conn_write(up, cx, p->up_data, p->up_len, &err) == MP_READY) {
            if (err != 0)
                goto end;
            io->consume(io, p->up_len);
            p->up_len = 0;
            moved = true;
        }
        if (p->down_eof && p->up_eof)
            goto end;
        if (moved)
            p->deadline_ms = mp_now_ms() + p->up->conf->read_timeout_ms;
    } while (moved);
    if (!expired(p, cx))
        return MD_PENDING_WAIT;
end:
    proxy_free(p); /* the upstream side closes; the core closes the client's */
    return -EPIPE;
}

/* The response's sink (proxy_msg.h): the request API's relay calls, which frame it for the
 * client's protocol. */
static int relay_interim(void *arg, unsigned status, const char *reason, size_t reason_len,
                         const char *fields, size_t len)
{
    return md_http_respond_interim(arg, status, reason, reason_len, fields, len);
}

static int relay_head(void *arg, unsigned status, const char *reason, size_t reason_len,
                      const char *fields, size_t len, uint64_t length)
{
    return md_http_respond_relayed(arg, status, reason, reason_len, fields, len,
                                   length == MD_PROXY_LENGTH_UNKNOWN ? MD_HTTP_LENGTH_UNKNOWN
                                                                     : length);
}

static int relay_body(void *arg, md_outbuf *out, const char *data, size_t len)
{
    return md_http_relay_body(arg, out, data, len);
}

static int relay_end(void *arg, md_outbuf *out, const char *trailers, size_t len)
{
    return md_http_relay_end(arg, out, trailers, len);
}

static const md_proxy_sink relay = {relay_interim, relay_head, relay_body, relay_end};

static int proxy_poll(md_http_pending *pd, md_http_req *req, mp_context *cx, md_http_io *io,
                      md_outbuf *out)
{
    (void)io; /* the handler writes through out */
    proxy *p = (proxy *)(void *)pd;
    const md_upstream_conf *conf = p->up->conf;
    for (;;) {
        switch (p->state) {
        case ST_PICK: {
            uint64_t now = mp_now_ms();
            md_upstream_peer *peer = md_upstream_pick(p->up, p->tried, p->key, p->key_len, now);
            if (peer == NULL) {
                if (p->attempts == 0) {
                    md_log(MD_LOG_ERROR, "upstream %s: no server available", conf->name);
                    return answer_error(p, req, 502);
                }
                return answer_error(p, req, fail_status(p));
            }
            if (p->attempts != 0) /* relaxed: a counter for /metrics */
                atomic_fetch_add_explicit(&p->up->n->retries, 1, memory_order_relaxed);
            p->attempts++;
            p->peer = peer;
            p->tried |= UINT64_C(1) << (peer - p->up->peers);
            p->request_sent = false;
            if (build_head(p, peer) != 0)
                return -ENOMEM;
            p->uc = p->no_pool ? NULL : md_upstream_pool_take(peer, now);
            p->no_pool = false;
            p->reused = p->uc != NULL;
            if (p->reused) {
                p->state = ST_SEND_HEAD;
                p->deadline_ms = now + conf->send_timeout_ms;
                break;
            }
            int rc = md_upstream_conn_open(peer, &p->uc);
            if (rc != 0) {
                p->uc = NULL;
                if (rc == -ENOMEM)
                    return rc;
                if (!attempt_failed(
                        p, req, rc == -ECONNREFUSED ? MD_UP_CONNECT_REFUSED : MD_UP_CONNECT_ERROR,
                        false))
                    return answer_error(p, req, fail_status(p));
                break;
            }
            p->state = ST_CONNECT;
            p->deadline_ms = now + conf->connect_timeout_ms;
            break;
        }
        case ST_CONNECT: {
            int err;
            if (mp_tcp_connect_poll(&p->uc->tcp, cx, &p->timer, p->deadline_ms, &err) == MP_PENDING)
                return MD_PENDING_WAIT;
            if (err != 0) {
                md_upstream_reason why = err == -ETIMEDOUT      ? MD_UP_CONNECT_TIMEOUT
                                         : err == -ECONNREFUSED ? MD_UP_CONNECT_REFUSED
                                                                : MD_UP_CONNECT_ERROR;
                if (!attempt_failed(p, req, why, false))
                    return answer_error(p, req, fail_status(p));
                break;
            }
            if (p->up->tls_ctx != NULL) {
                int rc = md_upstream_tls_start(p->uc);
                if (rc != 0)
                    return rc; /* -ENOMEM */
                p->state = ST_HANDSHAKE;
                p->deadline_ms = mp_now_ms() + conf->connect_timeout_ms;
                break;
            }
            p->state = ST_SEND_HEAD;
            p->deadline_ms = mp_now_ms() + conf->send_timeout_ms;
            break;
        }
        case ST_HANDSHAKE: {
            int err;
            md_upstream_reason why = MD_UP_TLS_HANDSHAKE;
            if (md_tls_stream_handshake(p->uc->tls, cx, &err) == MP_PENDING) {
                if (!expired(p, cx))
                    return MD_PENDING_WAIT;
                why = MD_UP_CONNECT_TIMEOUT;
            } else if (err == 0) {
                p->state = ST_SEND_HEAD;
                p->deadline_ms = mp_now_ms() + conf->send_timeout_ms;
                break;
            } else {
                /* The reason, and never a retry in plaintext: the attempt fails. */
                char reason[256];
                md_log(MD_LOG_ERROR, "upstream %s server %s: TLS handshake failed: %s", conf->name,
                       p->peer->conf->label, md_upstream_tls_why(p->uc, reason, sizeof reason));
            }
            if (!attempt_failed(p, req, why, false))
                return answer_error(p, req, fail_status(p));
            break;
        }
        case ST_SEND_HEAD: {
            int err;
            if (md_upstream_conn_write(p->uc, cx, p->head, p->head_len, &err) == MP_PENDING) {
                if (!expired(p, cx))
                    return MD_PENDING_WAIT;
                err = -ETIMEDOUT;
                /* the write is abandoned with the connection */
            }
            if (err != 0 && err != -ETIMEDOUT && p->reused && p->idempotent && !p->body_released) {
                stale_retry(p); /* the server closed it as it was reused */
                break;
            }
            if (err != 0) {
                if (!attempt_failed(
                        p, req, err == -ETIMEDOUT ? MD_UP_SEND_TIMEOUT : MD_UP_SEND_ERROR, true))
                    return answer_error(p, req, fail_status(p));
                break;
            }
            p->state = p->piped ? ST_SEND_BODY : ST_READ;
            if (!p->piped) {
                p->request_sent = true;
                p->head_deadline_ms = mp_now_ms() + conf->header_timeout_ms;
            }
            p->deadline_ms = mp_now_ms() + conf->send_timeout_ms;
            break;
        }
        case ST_SEND_BODY: {
            if (p->span_len == 0) {
                if (!md_http_req_body_done(req)) {
                    /* let go of nothing yet: the core parses the next span for us */
                    return MD_PENDING_READ;
                }
                if (p->chunked && !p->last_chunk) {
                    /* The last chunk, with the client's trailers (HTTP/1.1's; dropped if
                     * there is no memory for them: a recipient may, RFC 9110 6.5.1). */
                    size_t tl;
                    const char *t = md_http_req_trailers(req, &tl);
                    if (tl > MD_HTTP_TRAILERS_MAX ||
                        md_bytes_grow(&p->span, &p->span_cap, 5 + tl, 64) != 0)
                        tl = 0; /* the span has 64 bytes at least (proxy_on_req_ready) */
                    memcpy(p->span, "0\r\n", 3);
                    size_t n = 3 + (tl != 0 ? md_proxy_trailers(p->span + 3, t, tl) : 0);
                    memcpy(p->span + n, "\r\n", 2);
                    p->span_len = n + 2;
                    p->last_chunk = true;
                } else {
                    p->request_sent = true;
                    p->head_deadline_ms = mp_now_ms() + conf->header_timeout_ms;
                    p->state = ST_READ;
                    break;
                }
            }
            int err;
            if (md_upstream_conn_write(p->uc, cx, p->span, p->span_len, &err) == MP_PENDING) {
                /* The server takes no more: it may have answered already (RFC 9112 9.5). */
                if (early_response(p, req, cx))
                    break;
                if (!expired(p, cx))
                    return MD_PENDING_WAIT;
                err = -ETIMEDOUT;
            }
            if (err != 0 && early_response(p, req, cx))
                break;
            if (err != 0) {
                p->last_chunk = false;
                if (!attempt_failed(
                        p, req, err == -ETIMEDOUT ? MD_UP_SEND_TIMEOUT : MD_UP_SEND_ERROR, true))
                    return answer_error(p, req, fail_status(p));
                break;
            }
            p->deadline_ms = mp_now_ms() + conf->send_timeout_ms;
            p->body_released = true; /* written and let go of: it cannot be sent again */
            if (p->last_chunk) {
                p->span_len = 0;
                p->request_sent = true;
                p->head_deadline_ms = mp_now_ms() + conf->header_timeout_ms;
                p->state = ST_READ;
                break;
            }
            p->span_len = 0;
            if (!md_http_req_body_done(req))
                return MD_PENDING_READ;
            break;
        }
        case ST_READ: {
            if (!p->resp_on) {
                md_proxy_resp_init(&p->resp, conf->max_response_header_bytes,
                                   md_http_req_is_head(req), &relay, req);
                p->resp.via = opts(p->route)->via == VIA_ON;
                p->resp.date = true;
                p->resp.headers = &p->route->headers;
                if (p->route->compress.codings != 0) {
                    p->resp.compress = &p->route->compress;
                    p->resp.accept_coding =
                        (uint8_t)md_http_req_accept_coding(req, p->route->compress.codings);
                }
                p->resp.tunnel_ok = p->upgrade;
                p->resp_on = true;
                uint64_t per_read = mp_now_ms() + conf->read_timeout_ms;
                p->deadline_ms = per_read < p->head_deadline_ms ? per_read : p->head_deadline_ms;
            }
            /* Back-pressure: at most buffer_bytes of the response wait for the client; past
             * that, it is flushed before more is read from upstream. */
            if (md_outbuf_pending(out) >= conf->buffer_bytes)
                return MD_PENDING_MORE;
            const char *data;
            size_t len;
            int err;
            if (md_upstream_conn_read(p->uc, cx, &data, &len, &err) == MP_PENDING) {
                if (md_outbuf_pending(out) != 0)
                    return MD_PENDING_MORE; /* nothing more yet: send what there is */
                if (mp_timer_poll(&p->timer, p->deadline_ms, cx) == MP_PENDING)
                    return MD_PENDING_WAIT;
                md_upstream_reason why =
                    p->resp.head_sent ? MD_UP_READ_TIMEOUT : MD_UP_HEADER_TIMEOUT;
                if (p->resp.head_sent) {
                    md_log(MD_LOG_ERROR, "upstream %s server %s: %s in the response body",
                           conf->name, p->peer->conf->label, md_upstream_reason_name(why));
                    /* Relaxed: a counter for /metrics. */
                    atomic_fetch_add_explicit(&p->peer->n->failures[why], 1, memory_order_relaxed);
                    proxy_free(p);
                    return -ETIMEDOUT;
                }
                if (!attempt_failed(p, req, why, true))
                    return answer_error(p, req, fail_status(p));
                break;
            }
            if (len == 0) {
                int rc = err == UV_EOF ? md_proxy_resp_eof(&p->resp, out) : MD_RESP_GARBAGE;
                if (rc == MD_RESP_DONE) {
                    if (!p->resp.head_sent)
                        return answer_error(p, req, 502);
                    finish(p, true); /* close-delimited: the connection is spent */
                    proxy_free(p);
                    return 0;
                }
                if (!p->resp.head_sent) {
                    bool silent = !p->resp.started;
                    if (silent && p->reused && p->idempotent && !p->body_released) {
                        /* A pooled connection the server closed as we reused it (it had not
                         * yet when the pool checked): no fault of the server's, so the same
                         * server gets the request again on a new connection, without taking
                         * a try or counting against its health. */
                        stale_retry(p);
                        break;
                    }
                    if (!attempt_failed(p, req, silent ? MD_UP_RESET : MD_UP_BAD_RESPONSE, true))
                        return answer_error(p, req, 502);
                    break;
                }
                md_log(MD_LOG_ERROR, "upstream %s server %s: response cut short", conf->name,
                       p->peer->conf->label);
                atomic_fetch_add_explicit(&p->peer->n->failures[MD_UP_RESET], 1,
                                          memory_order_relaxed);
                proxy_free(p);
                return -EPIPE;
            }
            bool had_head = p->resp.head_sent;
            size_t used;
            int rc = md_proxy_resp_feed(&p->resp, data, len, &used, out);
            if (rc >= 0)
                md_upstream_conn_consume(p->uc, used);
            if (!had_head && p->resp.head_sent) {
                uint64_t header_ms = mp_now_ms() - p->start_ms;
                /* The registry's label, which outlives the slot (re-resolution may reuse it). */
                md_http_req_set_upstream(req, p->peer->n->server, header_ms);
                md_upstream_count_response(p->peer, p->resp.status, header_ms);
                md_http_count_response(req, p->resp.status,
                                       p->resp.client_framing == MD_CLIENT_LENGTH ? p->resp.length
                                                                                  : 0);
            }
            if (rc == MD_RESP_UPGRADE && p->upgrade) {
                /* The 101 goes out first (counted above, as any head); what follows it, both
                 * ways, is the tunnel's. */
                md_http_req_close_after(req);
                p->state = ST_TUNNEL;
                p->deadline_ms = mp_now_ms() + conf->read_timeout_ms;
                return MD_PENDING_MORE;
            }
            if (rc == MD_RESP_DONE) {
                finish(p, used < len);
                proxy_free(p);
                return 0;
            }
            if (rc == MD_RESP_MORE) {
                /* read_timeout_ms per read; the head also within header_timeout_ms */
                uint64_t per_read = mp_now_ms() + conf->read_timeout_ms;
                p->deadline_ms = p->resp.head_sent || per_read < p->head_deadline_ms
                                     ? per_read
                                     : p->head_deadline_ms;
                break;
            }
            if (rc == MD_RESP_NOMEM) {
                proxy_free(p);
                return -ENOMEM;
            }
            /* GARBAGE, TOO_BIG, UPGRADE (not asked for) */
            md_upstream_reason why =
                rc == MD_RESP_TOO_BIG ? MD_UP_HEADER_TOO_BIG : MD_UP_BAD_RESPONSE;
            if (!p->resp.head_sent) {
                attempt_failed(p, req, why, true);
                return answer_error(p, req, 502); /* a broken server is not retried */
            }
            md_log(MD_LOG_ERROR, "upstream %s server %s: %s in the response body", conf->name,
                   p->peer->conf->label, md_upstream_reason_name(why));
            atomic_fetch_add_explicit(&p->peer->n->failures[why], 1, memory_order_relaxed);
            proxy_free(p);
            return -EPROTO;
        }
        case ST_TUNNEL:
            return tunnel(p, cx, io);
        default:
            proxy_free(p);
            return -EINVAL;
        }
    }
}

/* The generation's upstream groups (http/handlers/proxy/upstream.h): none without
 * [upstream] sections. */
static int proxy_gen_new(const md_ini_conf *cfg, mp_runtime *rt, void **state, char *msg,
                         size_t msg_len)
{
    *state = NULL;
    const md_upstream_table *t = md_ini_find(cfg, &md_section_upstream);
    if (t == NULL || t->n == 0)
        return 0;
    md_upstreams *us;
    int rc = md_upstreams_new(&us, t, rt, msg, msg_len);
    if (rc == -ENOMEM)
        md_say(msg, msg_len, "upstreams: %s", strerror(-rc));
    if (rc != 0)
        return rc;
    *state = us;
    return 0;
}

static void proxy_gen_shutdown(void *state)
{
    md_upstreams_shutdown(state);
}

static void proxy_gen_free(void *state)
{
    md_upstreams_free(state);
}

static int proxy_gen_metrics(void *state, md_outbuf *out)
{
    return md_upstreams_metrics_text(state, out);
}

const md_handler md_handler_proxy = {
    .name = "proxy",
    /* What the application takes is the application's affair. */
    .methods = MD_METHODS_GET | MD_METHOD(MD_POST) | MD_METHOD(MD_PUT) | MD_METHOD(MD_DELETE) |
               MD_METHOD(MD_PATCH),
    .passes_options = true,
    .keeps_fields = true,
    .keys = (const char *const[]){"upstream", "host", "forwarded", "via", "websocket",
                                  "strip_prefix", "add_prefix", NULL},
    .conf_size = sizeof(proxy_conf),
    .conf_key = proxy_key,
    .conf_check = proxy_check,
    .conf_link = proxy_link,
    .gen_new = proxy_gen_new,
    .gen_shutdown = proxy_gen_shutdown,
    .gen_free = proxy_gen_free,
    .gen_metrics = proxy_gen_metrics,
    .on_head = proxy_on_head,
    .on_body = proxy_on_body,
    .on_req = proxy_on_req,
};
