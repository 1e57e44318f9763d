/* conn_http.c: the HTTP connection task, which drives the sans-I/O core (http1.h) over its
 * stream.
 *
 * The task loops: flush pending output (one write for every response parsed from one read),
 * read, feed the core, consume what it used. While it waits for the peer it arms the core's
 * deadline on its timer (header, body and keep-alive timeouts, the minimum body rate). At each
 * request's first byte the core calls the settings' request_begin hook, where the connection
 * moves to the newest generation of settings (generation.h): a reload applies from the next
 * request on, limits and routes together.
 *
 * A handler that answers later (http/handler.h) stops the parsing: the task flushes what is
 * queued, then polls the handler through md_http_conn_resume() until it is done, and only
 * then reads or parses the next request. The handler's output is flushed between its polls,
 * so a peer that reads slowly holds the handler back (and the send limits apply as to any
 * write).
 *
 * Closing after a response (Connection: close, an error, the last request a connection may
 * make, a 408) lingers, as RFC 9112 9.6 asks and nginx's lingering_close does: the task shuts
 * down its sending side, then reads and drops what the peer still sends until the peer closes
 * too, or MD_HTTP_LINGER_MS pass; only then the socket is closed. A close with bytes unread
 * makes the kernel reset the connection instead of ending it, and a reset throws away what the
 * peer has not received yet:
 *
 *   magpied                                    peer
 *   answers request 5 of 5, Connection: close  pipelines requests 6, 7, ... (or a body)
 *   close() with 6, 7 in its receive queue
 *     -> RST; the send queue is dropped        the rest of response 5 never comes: a reset
 *                                              with a response owed (wrk: a read error)
 *
 *   shutdown(SHUT_WR): FIN after response 5
 *   read 6, 7 and drop them                    reads response 5 and the FIN; closes
 *   EOF -> close()                             nothing lost
 *
 * A close with nothing answered (the peer's EOF, an idle connection's timeout or a graceful
 * stop) has nothing to keep, and closes at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server/conn.h"
#include "core/log.h"
#include "http/handler.h"
#include "http/http1.h"
#include "http/http2.h"
#include "server/tls.h"
#include <string.h>

/* TLS's side of conn_read() and conn_send(), kept out of line: inlined (LTO did), its frame
 * and saved registers were paid by every plaintext read and write too (~50 instructions a
 * keep-alive request, loadtest/http/instructions.sh). */
__attribute__((noinline)) static mp_poll tls_read(md_conn *c, mp_context *cx, const char **data,
                                                  size_t *len, int *err)
{
    return md_tls_read_poll(c, cx, data, len, err);
}

__attribute__((noinline)) static mp_poll tls_send(md_conn *c, mp_context *cx, const char *data,
                                                  size_t len, int *err)
{
    return md_tls_write(c, cx, data, len, err);
}

/* Whether the transport is TLS: on an [https] connection, whose TLS state exists whenever it
 * reads or writes (https_poll() closes one without; it is freed in md_conn_finish()). The kind,
 * a byte of md_conn, rather than md_conn_tls()'s two loads: plaintext reads and writes pay one. */
static inline bool conn_is_tls(const md_conn *c)
{
    return c->kind == MD_LISTENER_HTTPS;
}

/* The transport: the stream itself, or TLS over it on an [https] connection (tls.c). */
static mp_poll conn_read(md_conn *c, mp_context *cx, const char **data, size_t *len, int *err)
{
    if (conn_is_tls(c))
        return tls_read(c, cx, data, len, err);
    return mp_tcp_read_poll(&c->tcp, cx, data, len, err);
}

static void conn_consume(md_conn *c, size_t n)
{
    if (conn_is_tls(c))
        md_tls_consume(c, n);
    else
        mp_tcp_consume(&c->tcp, n);
}

static mp_poll conn_send(md_conn *c, mp_context *cx, const char *data, size_t len, int *err)
{
    if (conn_is_tls(c))
        return tls_send(c, cx, data, len, err);
    return md_conn_write(c, cx, data, len, err);
}

/* The client's address: the one a PROXY header carried, else the peer's, looked up at the
 * first need (a route's allow and deny rules, its rate limit, real_ip's trust, the access log,
 * the proxy's forwarding fields) and kept in pp.client from then on: a getpeername(2) per
 * request was more than the rules' own work. A connection that never needs it pays nothing;
 * one that does holds the address (and its text) until it closes. NULL if the peer is gone or
 * memory is short. */
static const struct sockaddr_storage *client_addr(md_conn *c)
{
    if (c->proxy != MD_CONN_PROXY_NONE)
        return NULL; /* the header is not read yet: no request can ask */
    md_conn_more *m = md_conn_more_of(c);
    if (m == NULL)
        return NULL;
    if (m->pp.client == NULL) {
        struct sockaddr_storage ss;
        if (mp_tcp_peer_addr(&c->tcp, &ss) != 0 ||
            (m->pp.client = malloc(sizeof *m->pp.client)) == NULL)
            return NULL;
        *m->pp.client = ss;
    }
    return m->pp.client;
}

/* The client's address as text, at first need too (48 bytes held by every idle connection
 * would be 5% of it). NULL ("-" in the log) as client_addr(). */
static const char *peer_name(md_conn *c)
{
    const struct sockaddr_storage *ss = client_addr(c); /* c->more made, or NULL */
    if (ss == NULL)
        return NULL;
    md_conn_more *m = c->more;
    if (m->peer == NULL) {
        if ((m->peer = malloc(MD_PEER_TEXT_MAX)) == NULL)
            return NULL;
        md_sockaddr_text(ss, false, m->peer, MD_PEER_TEXT_MAX);
    }
    return m->peer[0] ? m->peer : NULL;
}

/* On a worker, once per response (md_http_server.access_log), inside the connection task's
 * poll: the task owns c. */
/* The connection of a link (http.h): HTTP/1.1's md_http_conn, which HTTP/2 shares. */
static md_conn *conn_of_link(const struct md_http_link *link)
{
    return mp_container_of(md_http_link_conn((struct md_http_link *)link), md_conn, http);
}

static void access_entry(void *arg, const struct md_http_link *link, const md_http_exchange *x)
{
    (void)arg; /* the hook's shape; the connection is found from its link */
    if (!md_log_access_on())
        return;
    md_conn *c = conn_of_link(link);
    md_access_entry e = *x;
    if (e.peer == NULL) /* a route's real_ip address, or the connection's */
        e.peer = peer_name(c);
    e.time = time(NULL);
    md_log_access(&e);
}

/* md_http_server.peer_addr: the client's address, for a route's allow and deny rules, its
 * rate limit and real_ip's trust. */
static int conn_peer_addr(struct md_http_link *link, struct sockaddr_storage *out)
{
    const struct sockaddr_storage *ss = client_addr(conn_of_link(link));
    if (ss == NULL)
        return -ENOTCONN;
    *out = *ss;
    return 0;
}

/* md_http_server.peer: the client's address, for the proxy's forwarding fields. */
static const char *conn_peer(struct md_http_link *link)
{
    return peer_name(conn_of_link(link));
}

/* md_http_server.secure, .servername, .default_site: what the request API needs of the
 * connection to pick a site (request.c). */
static bool conn_secure(struct md_http_link *link)
{
    return md_conn_tls(conn_of_link(link)) != NULL;
}

static const char *conn_servername(struct md_http_link *link)
{
    return md_tls_servername(conn_of_link(link));
}

static unsigned conn_default_site(const md_http_server *srv, struct md_http_link *link)
{
    const md_conn *c = conn_of_link(link);
    const md_http_gen *g = md_http_gen_of((md_http_server *)srv);
    /* c->group lives while c is open (listener.c); its name never changes. */
    for (uint32_t i = 0; c->group != NULL && i < g->ndefaults; i++)
        if (strcmp(g->defaults[i].name, c->group->name) == 0)
            return g->defaults[i].site;
    return 0;
}

_Static_assert(sizeof(((md_http_gen *)0)->defaults[0].name) == MD_LISTENER_NAME_MAX &&
                   sizeof(((md_http_gen *)0)->defaults) / sizeof(((md_http_gen *)0)->defaults[0]) ==
                       MD_LISTENER_SLOTS,
               "md_http_gen.defaults is md_config.listeners' shape");

/* /metrics: the server's text, then each handler's series for this generation's state. */
static int gen_metrics_text(void *arg, md_outbuf *out)
{
    md_http_gen *g = arg;
    int rc = md_metrics_text(g->metrics, out);
    const md_handler *h;
    for (size_t i = 0; rc == 0 && (h = md_handler_at(i)) != NULL; i++)
        if (h->gen_metrics != NULL && g->http.handler_state[i] != NULL)
            rc = h->gen_metrics(g->http.handler_state[i], out);
    return rc;
}

/* uv_hrtime()'s clock (CLOCK_MONOTONIC, ns), read once per read that answers something:
 * straight from the vDSO, without libuv's wrapper around the same call. */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int md_conn_http_gen_new(md_server *s, const md_config *cfg, md_http_gen **out, md_error *err)
{
    md_http_gen *g = calloc(1, sizeof *g);
    if (g == NULL) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -ENOMEM;
    }
    g->http.limits = cfg->limits;
    g->routes = cfg->routes;
    g->http.routes = &g->routes;
    int rc = md_routes_open(&g->routes, err->msg, sizeof err->msg);
    if (rc != 0) {
        free(g);
        return rc;
    }
    g->http.metrics = &s->metrics;
    g->metrics = &s->metrics;
    md_routes_count_in(&g->routes, &s->metrics);
    g->http.metrics_text = gen_metrics_text;
    g->http.metrics_arg = g;
    g->http.rt = s->rt;
    g->http.peer = conn_peer;
    g->http.peer_addr = conn_peer_addr;
    for (uint32_t i = 0; i < g->routes.n; i++)
        if (g->routes.r[i].handler->keeps_fields)
            g->http.keep_fields = true;
    const md_handler *h;
    md_ini_conf ini = md_config_ini(cfg);
    for (size_t i = 0; (h = md_handler_at(i)) != NULL; i++) {
        if (h->gen_new == NULL)
            continue;
        rc = h->gen_new(&ini, s->rt, &g->http.handler_state[i], err->msg, sizeof err->msg);
        if (rc != 0) {
            md_http_gen_free(g); /* what the handlers before this one made, and the routes */
            return rc;
        }
    }
    g->http.mono_clock = mono_ns;
    if (cfg->log.access_log != MD_ACCESS_LOG_OFF)
        g->http.access_log = access_entry;
    g->http.request_begin = md_http_gen_request_begin;
    if (g->routes.nsites > 1) {
        g->http.secure = conn_secure;
        g->http.servername = conn_servername;
        g->http.default_site = conn_default_site;
        for (uint32_t i = 0; i < cfg->nlisteners; i++) {
            const md_listener_config *l = &cfg->listeners[i];
            int site = md_site_find(&g->routes, l->default_site);
            memcpy(g->defaults[i].name, l->name, sizeof g->defaults[i].name);
            g->defaults[i].site = (uint8_t)(site > 0 ? site : 0);
        }
        g->ndefaults = cfg->nlisteners;
    }
    /* [https]: the certificate and key are read again with each generation (a reload). */
    if (cfg->tls.cert[0][0] != '\0' &&
        (rc = md_tls_ctx_new(&cfg->tls, &cfg->routes, cfg->source, &g->tls, err)) != 0) {
        md_http_gen_free(g);
        return rc;
    }
    if (g->tls != NULL)
        md_tls_ctx_offer_h2(g->tls, cfg->listeners[MD_LISTENER_HTTPS].http2);
    /* A TLS [listener NAME] with a certificate or strict_sni of its own: a context of its
     * own, made after [https]'s (whose certificates /metrics lists first). */
    for (uint32_t i = MD_LISTENERS; g->tls != NULL && i < cfg->nlisteners; i++) {
        const md_listener_config *l = &cfg->listeners[i];
        if (l->kind != MD_LISTENER_HTTPS || (l->cert[0] == '\0' && l->strict_sni < 0))
            continue;
        static md_tls_config one; /* large (paths); the loop's thread only (start, reload) */
        md_tls_config_listener(&cfg->tls, l->name, l->cert, l->cert_line, l->key, l->key_line,
                               l->strict_sni, &one);
        memcpy(g->tls_named[i].name, l->name, sizeof g->tls_named[i].name);
        if ((rc = md_tls_ctx_new(&one, &cfg->routes, cfg->source, &g->tls_named[i].tls, err)) !=
            0) {
            md_http_gen_free(g);
            return rc;
        }
        md_tls_ctx_offer_h2(g->tls_named[i].tls, cfg->listeners[MD_LISTENER_HTTPS].http2);
    }
    *out = g;
    return 0;
}

/* The io a pending handler gets: the socket, md_conn_write and md_conn_sendfile (bounded). */
struct conn_io {
    md_http_io io;
    md_conn *c;
};

static mp_poll conn_io_write(md_http_io *io, mp_context *cx, const char *data, size_t len, int *err)
{
    md_conn *c = ((struct conn_io *)(void *)io)->c;
    return conn_send(c, cx, data, len, err);
}

static mp_poll conn_io_sendfile(md_http_io *io, mp_context *cx, int in_fd, off_t *off, size_t count,
                                size_t *sent, int *err)
{
    md_conn *c = ((struct conn_io *)(void *)io)->c;
    md_outbuf *out = md_conn_out(c); /* taken already: a handler runs */
    if (out == NULL) {
        *err = -ENOMEM;
        return MP_READY;
    }
    if (md_conn_tls(c) != NULL) /* no kTLS: read and encrypted, head and file together */
        return md_tls_sendfile(c, cx, out, in_fd, off, count, sent, err);
    size_t pending = md_outbuf_pending(out);
    if (pending != 0) {
        /* The response's head first, corked, so that it leaves in the file's first segment:
         * one packet and one wake-up of the peer, not two. */
        *sent = 0;
        if (md_conn_write_more(c, cx, md_outbuf_pending_data(out), pending, err) == MP_PENDING) {
            if (md_outbuf_own(out) != 0) { /* lent bytes last only until this poll ends */
                *err = -ENOMEM;
                return MP_READY;
            }
            return MP_PENDING;
        }
        if (*err != 0)
            return MP_READY;
        md_outbuf_consume(out, pending);
    }
    return md_conn_sendfile(c, cx, in_fd, off, count, sent, err);
}

static mp_poll conn_io_read(md_http_io *io, mp_context *cx, const char **data, size_t *len,
                            int *err)
{
    md_conn *c = ((struct conn_io *)(void *)io)->c;
    return conn_read(c, cx, data, len, err);
}

static void conn_io_nodelay(md_http_io *io)
{
    md_conn_nodelay(((struct conn_io *)(void *)io)->c);
}

static void conn_io_consume(md_http_io *io, size_t n)
{
    conn_consume(((struct conn_io *)(void *)io)->c, n);
}

static int conn_io_shutdown(md_http_io *io)
{
    return mp_tcp_shutdown(&((struct conn_io *)(void *)io)->c->tcp);
}

/* The lingering close drawn at the top: what the peer still sends is read and dropped, so
 * that the close does not reset the connection under the responses it has not received yet.
 * The stream holds no read buffer while it waits (mp_tcp_read_poll gives it back). */
static mp_poll linger(md_conn *c, mp_context *cx)
{
    if (!c->lingering && md_conn_tls(c) != NULL && md_tls_close_notify(c, cx) == MP_PENDING)
        return MP_PENDING; /* TLS: close_notify before the FIN */
    if (!c->lingering) {
        c->lingering = true;
        md_outbuf *out = md_conn_out(c); /* its busy block keeps the deadline */
        if (out == NULL || mp_tcp_shutdown(&c->tcp) != 0)
            return md_conn_finish(c, c->why); /* (or the peer is gone already) */
        /* All written (the flush before this succeeded): only the deadline is kept. */
        md_outbuf_free(out);
        c->busy->linger_until_ms = mp_now_ms() + MD_HTTP_LINGER_MS;
    }
    for (;;) {
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING) {
            if (mp_timer_poll(&c->timer, c->busy->linger_until_ms, cx) == MP_PENDING)
                return MP_PENDING;
            return md_conn_finish(c, c->why); /* the peer neither stopped nor closed */
        }
        /* A graceful stop's interrupt: the last response is what it waits for, go on. */
        if (len == 0 && err == -EINTR)
            continue;
        if (len == 0)
            return md_conn_finish(c, c->why); /* the peer's EOF (or reset): done */
        mp_tcp_consume(&c->tcp, len);
    }
}

static md_close_reason expired_reason(md_http_expired e)
{
    switch (e) {
    case MD_HTTP_EXPIRED_KEEPALIVE:
        return MD_CLOSE_KEEPALIVE_TIMEOUT;
    case MD_HTTP_EXPIRED_HEADER:
        return MD_CLOSE_HEADER_TIMEOUT;
    case MD_HTTP_EXPIRED_BODY:
        return MD_CLOSE_BODY_TIMEOUT;
    case MD_HTTP_EXPIRED_BODY_RATE:
        return MD_CLOSE_MIN_BODY_RATE;
    case MD_HTTP_EXPIRED_SEND_RATE:
        return MD_CLOSE_MIN_SEND_RATE;
    default:
        return MD_CLOSE_DONE;
    }
}

/* HTTP/2's frames owed at most, per write: nghttp2 is asked for more once they are written. */
#define H2_OUT_BATCH (64u * 1024u)
/* A batch and the DATA frame that passes it (16 KiB and its header) fit md_outbuf_batch()'s
 * storage (http2.c takes it for bursts of DATA): no realloc in the middle of a burst. */
_Static_assert(H2_OUT_BATCH + 16384 + 9 + 4096 <= MD_OUTBUF_BATCH, "a burst fits one batch");
/* The most plaintext a TLS record carries (RFC 8446, 5.1). */
#define H2_TLS_RECORD 16384u

/* Writes the frames nghttp2 has for the peer, one write per H2_OUT_BATCH; READY with *why
 * MD_CLOSE_DONE, or the reason to close.
 *
 * Over TLS a write is cut to whole records where it can be, and the tail (*held) waits for
 * what comes behind it: 64 KiB of DATA was four full records and one of a few dozen bytes,
 * the frames' headers, and a client without read-ahead reads each record twice. A tail waits
 * while more is coming (a batch's worth, or the next pass of the handlers); with all, and
 * before the task waits or closes, it goes. The same bytes give the same length when a write
 * that waited is called again (TLS has encrypted them already): a cut depends on the buffer
 * alone, and nothing is appended behind a waiting write. */
static mp_poll h2_write(md_conn *c, mp_context *cx, md_outbuf *out, bool all, bool *held,
                        bool *moved, md_close_reason *why)
{
    md_h2_conn *h = c->more->h2;
    *why = MD_CLOSE_DONE;
    for (;;) {
        size_t before = md_outbuf_pending(out);
        if ((*held || before == 0) && md_h2_conn_send(h, out, H2_OUT_BATCH) != 0) {
            *why = MD_CLOSE_NO_MEMORY;
            return MP_READY;
        }
        size_t pending = md_outbuf_pending(out);
        if (pending == 0)
            break;
        size_t len = pending;
        if (conn_is_tls(c) && pending >= H2_OUT_BATCH)
            len -= pending % H2_TLS_RECORD;
        else if (*held && pending == before && !all)
            break; /* a tail, and nothing behind it yet */
        *moved = true;
        int err;
        if (conn_send(c, cx, md_outbuf_pending_data(out), len, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0) {
            *why = md_conn_write_error(c, err);
            return MP_READY;
        }
        md_outbuf_consume(out, len);
        *held = len < pending;
    }
    return MP_READY;
}

/* The HTTP/2 task (http/http2.h): the same transport, timer and close as HTTP/1.1's, around
 * an nghttp2 session. Each pass polls the streams' pending handlers (each holds its waker on
 * this task: any of them wakes it, and every stream that can move is polled), writes the
 * frames nghttp2 has for the peer (h2_write), then reads; it waits only when a pass moved
 * nothing. A write the peer does not take is bounded by the send limits; nothing is read
 * meanwhile, as over HTTP/1.1. */
static mp_poll h2_poll(md_conn *c, mp_context *cx)
{
    md_h2_conn *h = c->more->h2; /* h2_start() made it */
    bool held = false;           /* h2_write's tail, from one pass to the next */
    for (;;) {
        /* A reload: a connection with no stream open moves to the new settings when its next
         * stream begins (http2.c), as HTTP/1.1 does between requests. One with streams open
         * cannot (its streams share one generation), and a busy multiplexed connection may
         * never be without one, holding the old generation (routes, pools, limits) for ever:
         * GOAWAY with the last stream id instead; its streams finish, then it closes and the
         * client opens a new one under the new settings. */
        if (md_h2_conn_streams(h) != 0 &&
            md_http_gen_outdated(md_http_gen_of(md_h2_conn_server(h))))
            md_h2_conn_drain(h, uv_hrtime());
        bool moved = md_h2_conn_run(h, cx, uv_hrtime());
        md_outbuf *out = md_conn_out(c);
        if (out == NULL)
            return md_conn_finish(c, MD_CLOSE_NO_MEMORY);
        bool done = md_h2_conn_done(h);
        md_close_reason why;
        if (h2_write(c, cx, out, done, &held, &moved, &why) == MP_PENDING)
            return MP_PENDING;
        if (why != MD_CLOSE_DONE)
            return md_conn_finish(c, why);
        if (done) {
            if (c->why == MD_CLOSE_DONE && md_h2_conn_refused(h))
                c->why = MD_CLOSE_ERROR;
            return linger(c, cx); /* the GOAWAY is out: let the peer read it */
        }
        const char *data;
        size_t len;
        int err;
        if (conn_read(c, cx, &data, &len, &err) == MP_PENDING) {
            if (moved)
                continue;
            if (held) { /* nothing more this pass: the tail goes before the task waits */
                if (h2_write(c, cx, out, true, &held, &moved, &why) == MP_PENDING)
                    return MP_PENDING;
                if (why != MD_CLOSE_DONE)
                    return md_conn_finish(c, why);
                continue;
            }
            md_conn_rest(c); /* all written: an idle HTTP/2 connection holds no buffer */
            uint64_t deadline = md_h2_conn_deadline(h);
            uint64_t release = md_h2_conn_release_at(h);
            uint64_t first = release < deadline ? release : deadline;
            uint64_t at = first == UINT64_MAX ? UINT64_MAX : (first + 999999) / 1000000;
            if (at == UINT64_MAX) {
                mp_timer_cancel(&c->timer);
                return MP_PENDING;
            }
            if (mp_timer_poll(&c->timer, at, cx) == MP_PENDING)
                return MP_PENDING;
            uint64_t now = uv_hrtime();
            if (now >= release) {
                (void)md_h2_conn_release(h); /* quiet for a second: its buffers' pages go */
                if (now < deadline)
                    continue;
            }
            bool stall;
            md_http_expired e = md_h2_conn_timeout(h, uv_hrtime(), &stall);
            if (e != MD_HTTP_EXPIRED_NONE)
                c->why = expired_reason(e);
            else if (stall)
                c->why = MD_CLOSE_SEND_TIMEOUT;
            continue; /* the GOAWAY goes out, then the close */
        }
        if (len == 0 && err == -EINTR) {
            md_h2_conn_drain(h,
                             uv_hrtime()); /* graceful stop: GOAWAY, the streams in flight finish */
            c->why = MD_CLOSE_SHUTDOWN;
            continue;
        }
        if (len == 0 && held && err == UV_EOF) {
            /* The peer's half-close: it may still read, and the tail is owed to it. */
            if (h2_write(c, cx, out, true, &held, &moved, &why) == MP_PENDING)
                return MP_PENDING;
        }
        if (len == 0)
            return md_conn_finish(c, err == UV_EOF ? MD_CLOSE_PEER : MD_CLOSE_ERROR);
        uint64_t now = mp_tcp_read_time(&c->tcp);
        int rc = md_h2_conn_feed(h, now, data, len);
        conn_consume(c, len);
        if (rc != 0)
            return md_conn_finish(c, rc == -ENOMEM ? MD_CLOSE_NO_MEMORY : MD_CLOSE_ERROR);
    }
}

/* Whether the connection's first bytes choose HTTP/2: h2 by ALPN on [https], the client
 * preface on a plaintext listener with h2c on. Then its session starts (our SETTINGS queued);
 * the bytes stay for h2_poll's first read. */
static bool h2_start(md_conn *c, const char *data, size_t len)
{
    if (md_conn_h2(c) != NULL || c->http.requests != 0 || c->http.req != NULL)
        return false;
    if (md_conn_tls(c) != NULL ? !md_tls_alpn_h2(c) : !(c->http.h2c && md_h2_is_preface(data, len)))
        return false;
    md_conn_more *m = md_conn_more_of(c);
    if (m == NULL ||
        md_h2_conn_new(&m->h2, c->http.srv, md_http_conn_link(&c->http), uv_hrtime()) != 0) {
        if (m != NULL)
            m->h2 = NULL;
        return false; /* no memory: HTTP/1.1 answers (with an error) */
    }
    /* Nagle off, as h2o and nginx have it: frames of many streams interleave, and a small one
     * (a HEADERS, a WINDOW_UPDATE, a body's last DATA) written while an earlier write is
     * unacknowledged would wait for that ACK. With it on, the 64 KiB file over h2c cost 31 us
     * of CPU a request, with it off 16-20 (loadtest/README.md). And the kernel's queue of
     * unsent bytes held short: behind an autotuned send buffer of megabytes, a stream's small
     * response would wait for another's large body to drain on a slow path (streams
     * interleave only in what is not queued yet); h2o's latency optimisation does the same
     * on slow paths. */
    md_conn_nodelay(c);
    md_conn_unsent_max(c);
    return true;
}

static mp_poll http_poll(md_conn *c, mp_context *cx);

/* A poll of an HTTP connection. One that comes with no busy block uses one on its stack, so
 * that a keep-alive request answered in full within the poll (nearly all) takes no block from
 * the cache and gives none back (two calls, ~40 instructions a request); what must outlive the
 * poll moves to a block of the cache as it returns. */
mp_poll md_conn_http_poll(md_conn *c, mp_context *cx)
{
    if (c->busy != NULL)
        return http_poll(c, cx);
    md_conn_busy here;
    md_conn_busy_lend(c, &here);
    mp_poll r = http_poll(c, cx);
    if (c->busy == &here && md_conn_busy_keep(c) != 0)
        return md_conn_finish(c, MD_CLOSE_NO_MEMORY);
    return r;
}

static mp_poll http_poll(md_conn *c, mp_context *cx)
{
    if (c->proxy != MD_CONN_PROXY_NONE) { /* proxy_protocol: its header before anything */
        md_close_reason why;
        if (md_proxy_in_poll(c, cx, &why) == MP_PENDING)
            return MP_PENDING;
        if (why != MD_CLOSE_DONE)
            return md_conn_finish(c, why);
    }
    if (md_conn_h2(c) != NULL)
        return h2_poll(c, cx);
    for (;;) {
        size_t pending = md_conn_pending(c);
        /* A handler about to send its body by sendfile writes the head itself, corked. */
        if (pending &&
            !(c->want == MD_HTTP_WANT_HANDLER && md_http_conn_pending_writes_output(&c->http))) {
            if (c->want == MD_HTTP_WANT_HANDLER)
                md_conn_nodelay(c); /* written while its handler runs: the response is in pieces */
            int err;
            md_outbuf *out = &c->busy->out; /* something is owed */
            if (conn_send(c, cx, md_outbuf_pending_data(out), pending, &err) == MP_PENDING) {
                /* Lent bytes (outbuf.h) are this thread's, and only until its next feed. */
                if (md_outbuf_own(out) != 0)
                    return md_conn_finish(c, MD_CLOSE_NO_MEMORY);
                return MP_PENDING;
            }
            if (err != 0)
                return md_conn_finish(c, md_conn_write_error(c, err));
            md_outbuf_consume(out, pending);
        }
        if (c->want == MD_HTTP_WANT_CLOSE)
            return linger(c, cx); /* after a response: see the top of the file */
        if (c->want == MD_HTTP_WANT_HANDLER || c->want == MD_HTTP_WANT_WAIT) {
            struct conn_io io = {{.fd = mp_tcp_fileno(&c->tcp),
                                  .write = conn_io_write,
                                  .sendfile = conn_io_sendfile,
                                  .read = conn_io_read,
                                  .consume = conn_io_consume,
                                  .shutdown = conn_is_tls(c) ? NULL : conn_io_shutdown,
                                  .nodelay = conn_io_nodelay},
                                 c};
            md_outbuf *out = md_conn_out(c);
            int want =
                out == NULL ? -ENOMEM : md_http_conn_resume(&c->http, cx, &io.io, uv_hrtime(), out);
            if (want < 0)
                return md_conn_finish(c, MD_CLOSE_NO_MEMORY);
            c->want = want;
            if (want == MD_HTTP_WANT_WAIT)
                return MP_PENDING; /* the handler holds a waker */
            continue;              /* flush, then more of it, or the next request */
        }
        const char *data;
        size_t len;
        int err;
        if (conn_read(c, cx, &data, &len, &err) == MP_PENDING) {
            /* Between requests the connection keeps no request state and no busy block (the
             * stream has given its read buffer back already): an idle keep-alive connection is
             * its md_conn alone. */
            if (md_http_conn_idle(&c->http))
                md_conn_rest(c);
            /* Waiting for the peer: arm the core's deadline (rounded up to the wheel's
             * millisecond); when it passes, the core answers 408 or closes an idle one. */
            uint64_t deadline = md_http_conn_deadline(&c->http);
            uint64_t at = deadline == UINT64_MAX ? UINT64_MAX : (deadline + 999999) / 1000000;
            uint64_t handshake_end = md_tls_handshake_deadline(c); /* TLS: UINT64_MAX once done */
            if (handshake_end < at)
                at = handshake_end;
            if (at == UINT64_MAX) {
                mp_timer_cancel(&c->timer);
                return MP_PENDING;
            }
            if (mp_timer_poll(&c->timer, at, cx) == MP_PENDING)
                return MP_PENDING;
            if (handshake_end <= mp_now_ms())
                return md_conn_finish(c, MD_CLOSE_HANDSHAKE_TIMEOUT);
            uint64_t now = uv_hrtime();
            md_http_expired expired = md_http_conn_expired(&c->http, now);
            md_outbuf *out = md_conn_out(c);
            int want = out == NULL ? -ENOMEM : md_http_conn_timeout(&c->http, now, out);
            if (want < 0)
                return md_conn_finish(c, MD_CLOSE_NO_MEMORY);
            if (expired != MD_HTTP_EXPIRED_NONE)
                c->why = expired_reason(expired);
            if (want == MD_HTTP_WANT_CLOSE && md_conn_pending(c) == 0)
                return md_conn_finish(c, c->why); /* an idle one: nothing answered */
            c->want = want;
            continue;
        }
        /* When the bytes arrived (the loop's clock at their event): no clock read here. */
        uint64_t now = len != 0 ? mp_tcp_read_time(&c->tcp) : uv_hrtime();
        int want;
        if (len == 0 && err == -EINTR) {
            /* Graceful stop (md_server_drain): an idle connection closes now; one with a
             * request in flight finishes it and answers with Connection: close. */
            want = md_http_conn_drain(&c->http);
            if (want == MD_HTTP_WANT_CLOSE)
                return md_conn_finish(c, MD_CLOSE_SHUTDOWN); /* idle: nothing to answer */
        } else if (len == 0) {
            if (err != UV_EOF)
                return md_conn_finish(c, MD_CLOSE_ERROR); /* reset: nobody to answer */
            /* The peer has sent all it will: nothing is left to read, and nothing is
             * answered at EOF. */
            md_outbuf *out = md_conn_out(c);
            if (out != NULL)
                (void)md_http_conn_eof(&c->http, now, out);
            return md_conn_finish(c, MD_CLOSE_PEER);
        } else if (h2_start(c, data, len)) {
            return h2_poll(c, cx);
        } else {
            size_t used = 0;
            md_outbuf *out = md_conn_out(c);
            if (out == NULL)
                return md_conn_finish(c, MD_CLOSE_NO_MEMORY);
            want = md_http_conn_feed(&c->http, now, data, len, &used, out);
            conn_consume(c, used);
        }
        if (want < 0)
            return md_conn_finish(c, MD_CLOSE_NO_MEMORY); /* close without flushing */
        c->want = want;
    }
}
