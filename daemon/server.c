/* server.c: listeners, accepting, and the connection tasks (see server.h).
 *
 * max_connections: each listener has its own budget ([limits] max_connections for HTTP,
 * [echo] max_connections for echo), so that one listener's peers cannot lock the other out.
 * When a listener's count of open connections reaches it, the connection callback returns
 * without accepting; libuv then stops polling that listener until uv_accept is called again,
 * which happens when one of its connections closes and the count is back under the mark. The
 * kernel's backlog holds the waiting peers meanwhile. The counts and the pause are touched
 * only on the loop's thread (accept and close callbacks).
 *
 * Writes: a peer that does not read would hold its connection for ever, so every write that
 * blocks is bounded (conn_write): no progress for send_timeout_ms, or, after
 * min_rate_grace_ms, less than min_send_rate bytes per second on average, closes the
 * connection. SO_SNDBUF (send_buffer) bounds the kernel memory such a peer pins meanwhile,
 * and nothing more is read from a connection while its output is queued.
 *
 * Reload (md_server_reload) runs as one command on the loop, so no connection is accepted
 * half-way through it. It binds every changed listener first; if one fails, the new sockets
 * are closed and nothing changes. Otherwise the old listeners of changed addresses close,
 * unchanged ones are not touched (their sockets and backlogs carry on), and the HTTP limits
 * are published as a new generation that each connection picks up at its next request (see
 * md_http_server in http.h). Each generation counts the connections at it; the loop frees the
 * oldest ones once none is left at them (at every close and reload), never the newest.
 */
#include "server.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "version.h"

#define READ_BUFFER 16384

/* A listening socket; heap-allocated because a reload may replace it while libuv still has
 * to run the old one's close callback. */
typedef struct md_listener_state {
    uv_tcp_t handle;
    md_server *srv;
    md_listener kind;
    bool paused;    /* a connection is waiting to be accepted */
    bool activated; /* passed by systemd: kept whatever the config says */
    md_listen at;   /* what it was bound from (the config's value) */
    bool reuseport;
    char addr[80]; /* "[host]:port" */
} md_listener_state;

/* An HTTP generation (see http.h) in the server's list of them. */
typedef struct md_http_gen {
    md_http_server http;
    struct md_http_gen *older;
} md_http_gen;

struct md_server {
    mp_runtime *rt;
    md_config cfg; /* loop side after start */
    md_metrics metrics;
    md_http_gen *http;     /* the newest generation: new connections start with it (loop side) */
    md_http_gen *oldest;   /* the end of the list that http_gens_sweep() frees from (loop side) */
    _Atomic uint32_t gens; /* generations in the list; relaxed, for /metrics */
    md_listener_state *listeners[MD_LISTENERS]; /* NULL: off (loop side) */
    uint64_t start_ns;
    /* Relaxed counters for /metrics; written by the thread that handles signals. */
    _Atomic uint64_t reloads_ok, reloads_failed;
    _Atomic bool last_reload_ok;
    _Atomic uint32_t open_conns;    /* written on the loop side, read by md_server_open() */
    uint32_t open_by[MD_LISTENERS]; /* loop side: open connections per listener */
    uint32_t open_peak;             /* loop side: most open since the last trim */
    struct md_conn *conns;          /* loop side: every open connection, for drain */
    bool draining;                  /* loop side */
    mp_loop_cmd cmd;
    _Atomic int setup_rc; /* 1 while the loop has not run the setup yet */
    md_error *setup_err;
    const md_config *next_cfg; /* the reload being applied */
    const int *inherited;      /* descriptors from systemd, at start */
    char describe_buf[200];
};

/* One accepted connection. Freed when both the task is released and the stream closed. */
typedef struct md_conn {
    mp_tcp tcp;
    mp_task task;
    struct md_conn *prev, *next; /* the server's list, loop side */
    md_server *srv;
    md_listener kind;
    _Atomic int refs;
    bool closing;
    bool send_blocked; /* a write is waiting for the peer to read */
    int want;
    md_close_reason why; /* reported when it closes after its output (default: DONE) */
    uint32_t idle_ms;    /* echo: [echo] idle_timeout_ms when accepted; 0 = none */
    /* Send limits, taken at accept ([limits] send_timeout_ms, min_send_rate, grace). */
    uint32_t send_timeout_ms, min_send_rate, grace_ms;
    mp_timer timer;            /* HTTP deadlines; echo idle timeout; the send deadlines of both */
    uint64_t progress_ms;      /* echo: when bytes last came in or went out (mp_now_ms) */
    size_t send_done;          /* bytes of the blocked write the kernel has taken */
    uint64_t send_start_ms;    /* when that write first blocked */
    uint64_t send_progress_ms; /* when the kernel last took some of it */
    md_outbuf out;
    char peer[48]; /* client address for the access log, at its first line (peer_name) */
    md_http_conn http;
} md_conn;

static void accept_one(md_listener_state *l);

static uint32_t max_conns(const md_server *s, md_listener kind)
{
    return kind == MD_LISTENER_HTTP ? s->cfg.max_connections : s->cfg.echo_max_connections;
}

/* Loop side: accept on the listeners paused at their mark, while under it. */
static void resume_accepting(md_server *s)
{
    for (int i = 0; i < MD_LISTENERS; i++) {
        md_listener_state *l = s->listeners[i];
        if (l != NULL && l->paused && s->open_by[i] < max_conns(s, (md_listener)i))
            accept_one(l);
    }
}

static void conn_unref(md_conn *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        free(c);
}

/* Loop side: free the oldest generations that no connection is at, and that no connection can
 * reach again (http.h). Counts are read oldest first: a connection that moves from F to H
 * counts itself at H before it leaves F (release), so a sweep that saw F at 0 (acquire) sees
 * H counted, and stops there. The newest generation stays. */
static void http_gens_sweep(md_server *s)
{
    md_http_gen *g = s->oldest;
    /* Acquire: pairs with the releases in on_message_begin() and md_http_conn_close()
     * (http.c). */
    while (g != s->http && atomic_load_explicit(&g->http.conns, memory_order_acquire) == 0) {
        /* Relaxed: `newer` was published by this thread (reload). */
        md_http_gen *newer = mp_container_of(
            atomic_load_explicit(&g->http.newer, memory_order_relaxed), md_http_gen, http);
        free(g);
        g = newer;
        atomic_fetch_sub_explicit(&s->gens, 1, memory_order_relaxed);
    }
    g->older = NULL;
    s->oldest = g;
}

/* On the loop's thread, once libuv is done with the stream. */
static void conn_closed(mp_tcp *t)
{
    md_conn *c = mp_container_of(t, md_conn, tcp);
    md_server *s = c->srv;
    if (c->kind == MD_LISTENER_HTTP)
        http_gens_sweep(s); /* after md_http_conn_close() in conn_finish() */
    md_metrics_conn_closed(&s->metrics, c->kind, c->why);
    s->open_by[c->kind]--;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    /* Relaxed: a count, read for progress by md_server_open(); the list is loop side. */
    uint32_t open = atomic_load_explicit(&s->open_conns, memory_order_relaxed) - 1;
    atomic_store_explicit(&s->open_conns, open, memory_order_relaxed);
#ifdef __GLIBC__
    /* After a crowd of connections left, glibc keeps their freed memory resident (it only
     * gives back the top of a heap); trimming returns the free pages in between, and the
     * pooled read buffers. A few times per crowd (each time the count halves), on the loop's
     * thread. */
    if (s->open_peak >= 256 && open <= s->open_peak / 2) {
        mp_tcp_buffer_trim();
        malloc_trim(0);
        s->open_peak = open;
    }
#endif
    resume_accepting(s);
    conn_unref(c);
}

static mp_poll conn_finish(md_conn *c, md_close_reason why)
{
    if (c->closing)
        return MP_READY;
    c->closing = true;
    c->why = why;
    mp_timer_cancel(&c->timer);
    if (c->kind == MD_LISTENER_HTTP)
        md_http_conn_close(&c->http);
    md_outbuf_free(&c->out);
    mp_tcp_close(&c->tcp, conn_closed);
    return MP_READY;
}

/* Write data[0..len) within the send limits. MP_READY with *err = 0, a negative errno, or
 * -ETIMEDOUT with c->why saying which limit passed; MP_PENDING while the peer is not reading
 * and no limit has passed (the timer is armed for the nearest). */
static mp_poll conn_write(md_conn *c, mp_context *cx, const char *data, size_t len, int *err)
{
    for (;;) {
        if (mp_tcp_write_poll(&c->tcp, cx, data, len, err) == MP_READY) {
            c->send_blocked = false;
            return MP_READY;
        }
        uint64_t now = mp_now_ms();
        size_t done = c->tcp.write_done; /* the task's own field: progress of this write */
        if (!c->send_blocked) {
            c->send_blocked = true;
            c->send_start_ms = c->send_progress_ms = now;
            c->send_done = done;
        } else if (done != c->send_done) {
            c->send_done = done;
            c->send_progress_ms = now;
        }
        uint64_t deadline = UINT64_MAX;
        md_close_reason why = MD_CLOSE_SEND_TIMEOUT;
        if (c->send_timeout_ms != 0)
            deadline = c->send_progress_ms + c->send_timeout_ms;
        if (c->min_send_rate != 0) {
            /* Falls below the rate once the time since the write began exceeds what the
             * bytes taken so far pay for (and the grace). */
            uint64_t earned = (uint64_t)done * 1000 / c->min_send_rate;
            uint64_t at = c->send_start_ms + (earned > c->grace_ms ? earned : c->grace_ms) + 1;
            if (at < deadline) {
                deadline = at;
                why = MD_CLOSE_MIN_SEND_RATE;
            }
        }
        if (c->idle_ms != 0) { /* echo: neither sent nor read for idle_ms */
            uint64_t last =
                c->send_progress_ms > c->progress_ms ? c->send_progress_ms : c->progress_ms;
            if (last + c->idle_ms < deadline) {
                deadline = last + c->idle_ms;
                why = MD_CLOSE_IDLE_TIMEOUT;
            }
        }
        if (deadline == UINT64_MAX) {
            mp_timer_cancel(&c->timer);
            return MP_PENDING;
        }
        if (now >= deadline) {
            c->send_blocked = false;
            c->why = why;
            *err = -ETIMEDOUT;
            return MP_READY;
        }
        if (mp_timer_poll(&c->timer, deadline, cx) == MP_PENDING)
            return MP_PENDING;
        /* The deadline passed: write again, which tells whether the peer took anything. */
    }
}

static md_close_reason write_error(md_conn *c, int err)
{
    return err == -ETIMEDOUT ? c->why : MD_CLOSE_ERROR;
}

/* Waiting for the peer to send: an echo connection closes once the peer has neither sent nor
 * read for idle_ms, so that idle sockets cannot hold max_connections for ever. */
static mp_poll echo_wait(md_conn *c, mp_context *cx)
{
    if (c->idle_ms == 0 || mp_timer_poll(&c->timer, c->progress_ms + c->idle_ms, cx) == MP_PENDING)
        return MP_PENDING;
    return conn_finish(c, MD_CLOSE_IDLE_TIMEOUT);
}

static mp_poll echo_poll(md_conn *c, mp_context *cx)
{
    for (;;) {
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING)
            return echo_wait(c, cx);
        if (len == 0)
            return conn_finish(c, err == UV_EOF   ? MD_CLOSE_PEER
                                  : err == -EINTR ? MD_CLOSE_SHUTDOWN
                                                  : MD_CLOSE_ERROR);
        if (!c->send_blocked)
            c->progress_ms = mp_now_ms(); /* new bytes from the peer */
        /* The bytes are written from the stream's own buffer, and nothing more is read until
         * they are consumed: a peer that does not read its echo is held back by TCP, and
         * closed by the send limits. */
        if (conn_write(c, cx, data, len, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0)
            return conn_finish(c, write_error(c, err));
        md_metrics_bytes(&c->srv->metrics, MD_LISTENER_ECHO, len, len);
        mp_tcp_consume(&c->tcp, len);
        c->progress_ms = mp_now_ms();
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
    default:
        return MD_CLOSE_DONE;
    }
}

static mp_poll http_poll(md_conn *c, mp_context *cx)
{
    for (;;) {
        size_t pending = md_outbuf_pending(&c->out);
        if (pending) {
            int err;
            if (conn_write(c, cx, md_outbuf_pending_data(&c->out), pending, &err) == MP_PENDING)
                return MP_PENDING;
            if (err != 0)
                return conn_finish(c, write_error(c, err));
            md_metrics_bytes(&c->srv->metrics, MD_LISTENER_HTTP, 0, pending);
            md_outbuf_consume(&c->out, pending);
        }
        if (c->want == MD_HTTP_WANT_CLOSE)
            return conn_finish(c, c->why);
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING) {
            /* Between requests the connection keeps no request state and no output buffer
             * (the stream has given its read buffer back already): an idle keep-alive
             * connection is its md_conn alone. */
            if (md_http_conn_idle(&c->http))
                md_outbuf_free(&c->out);
            /* Waiting for the peer: arm the core's deadline (rounded up to the wheel's
             * millisecond); when it passes, the core answers 408 or closes an idle one. */
            uint64_t deadline = md_http_conn_deadline(&c->http);
            if (deadline == UINT64_MAX) {
                mp_timer_cancel(&c->timer);
                return MP_PENDING;
            }
            if (mp_timer_poll(&c->timer, (deadline + 999999) / 1000000, cx) == MP_PENDING)
                return MP_PENDING;
            uint64_t now = uv_hrtime();
            md_http_expired expired = md_http_conn_expired(&c->http, now);
            int want = md_http_conn_timeout(&c->http, now, &c->out);
            if (want < 0)
                return conn_finish(c, MD_CLOSE_NO_MEMORY);
            if (expired != MD_HTTP_EXPIRED_NONE)
                c->why = expired_reason(expired);
            c->want = want;
            continue;
        }
        uint64_t now = uv_hrtime();
        int want;
        if (len == 0 && err == -EINTR) {
            /* Graceful stop (md_server_drain): an idle connection closes now; one with a
             * request in flight finishes it and answers with Connection: close. */
            want = md_http_conn_drain(&c->http);
            if (want == MD_HTTP_WANT_CLOSE)
                c->why = MD_CLOSE_SHUTDOWN;
        } else if (len == 0) {
            if (err != UV_EOF)
                return conn_finish(c, MD_CLOSE_ERROR); /* reset: nobody to answer */
            want = md_http_conn_eof(&c->http, now, &c->out);
            c->why = MD_CLOSE_PEER;
        } else {
            size_t used = 0;
            want = md_http_conn_feed(&c->http, now, data, len, &used, &c->out);
            md_metrics_bytes(&c->srv->metrics, MD_LISTENER_HTTP, used, 0);
            mp_tcp_consume(&c->tcp, used);
        }
        if (want < 0)
            return conn_finish(c, MD_CLOSE_NO_MEMORY); /* close without flushing */
        c->want = want;
    }
}

static mp_poll conn_poll(mp_task *t, mp_context *cx)
{
    md_conn *c = mp_container_of(t, md_conn, task);
    return c->kind == MD_LISTENER_HTTP ? http_poll(c, cx) : echo_poll(c, cx);
}

static void conn_cancel(mp_task *t)
{
    conn_finish(mp_container_of(t, md_conn, task), MD_CLOSE_SHUTDOWN);
}

static void conn_release(mp_task *t)
{
    conn_unref(mp_container_of(t, md_conn, task));
}

static const mp_task_vtable conn_vt = {conn_poll, conn_cancel, conn_release};

/* "host:port" or "[host]:port" of a socket address; host alone with port_too false. */
static void sockaddr_text(const struct sockaddr_storage *ss, bool port_too, char *buf, size_t len)
{
    char host[48] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)ss, host, sizeof host);
        port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
        if (port_too)
            snprintf(buf, len, "[%s]:%d", host, port);
    } else if (ss->ss_family == AF_INET) {
        uv_ip4_name((const struct sockaddr_in *)ss, host, sizeof host);
        port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
        if (port_too)
            snprintf(buf, len, "%s:%d", host, port);
    }
    if (!port_too)
        snprintf(buf, len, "%s", host);
}

/* The client's address, looked up at the connection's first access-log line, so that
 * connections accepted while the access log was off have one too, and no connection pays for
 * it while the log is off. getpeername() on the socket is a plain syscall, safe on a worker.
 * NULL ("-" in the log) if the peer is already gone. */
static const char *peer_name(md_conn *c)
{
    if (c->peer[0] == '\0') {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (getpeername(mp_tcp_fileno(&c->tcp), (struct sockaddr *)&ss, &len) == 0)
            sockaddr_text(&ss, false, c->peer, sizeof c->peer);
    }
    return c->peer[0] ? c->peer : NULL;
}

/* On a worker, once per response (md_http_server.access_log), inside the connection task's
 * poll: the task owns c. */
static void access_entry(void *arg, const md_http_conn *hc, const md_http_exchange *x)
{
    (void)arg;
    if (!md_log_access_on())
        return;
    md_conn *c = mp_container_of(hc, md_conn, http);
    md_access_entry e = *x;
    e.peer = peer_name(c);
    e.time = time(NULL);
    md_log_access(&e);
}

/* On the loop's thread: accept the next connection of l, or pause l at the mark. */
static void accept_one(md_listener_state *l)
{
    md_server *s = l->srv;
    if (s->draining)
        return; /* not accepted: the listener is closing */
    if (s->open_by[l->kind] >= max_conns(s, l->kind)) {
        l->paused = true; /* libuv stops polling l until the next uv_accept */
        return;
    }
    l->paused = false;
    md_conn *c = calloc(1, sizeof *c);
    if (!c)
        return; /* not accepted: libuv pauses l; the next close retries */
    c->srv = s;
    c->kind = l->kind;
    atomic_init(&c->refs, 2);
    mp_timer_init(&c->timer, s->rt);
    md_outbuf_init(&c->out);
    if (mp_tcp_accept(s->rt, &c->tcp, (uv_stream_t *)&l->handle, READ_BUFFER) != 0) {
        md_outbuf_free(&c->out);
        free(c);
        return;
    }
    atomic_store_explicit(&s->open_conns,
                          atomic_load_explicit(&s->open_conns, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    s->open_by[c->kind]++;
    if (atomic_load_explicit(&s->open_conns, memory_order_relaxed) > s->open_peak)
        s->open_peak = atomic_load_explicit(&s->open_conns, memory_order_relaxed);
    if (s->cfg.limits.send_buffer != 0) {
        /* Bounds what a peer that does not read pins in the kernel (the kernel doubles it);
         * without it the send buffer autotunes up to tcp_wmem's maximum. Best effort. */
        int v = (int)s->cfg.limits.send_buffer;
        setsockopt(mp_tcp_fileno(&c->tcp), SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    md_metrics_conn_opened(&s->metrics, c->kind);
    if (c->kind == MD_LISTENER_HTTP)
        md_http_conn_init(&c->http, &s->http->http, uv_hrtime());
    /* Read here, on the loop's thread, where a reload writes s->cfg. */
    c->idle_ms = c->kind == MD_LISTENER_ECHO ? s->cfg.echo_idle_timeout_ms : 0;
    c->send_timeout_ms = s->cfg.limits.send_timeout_ms;
    c->min_send_rate = s->cfg.limits.min_send_rate;
    c->grace_ms = s->cfg.limits.min_rate_grace_ms;
    c->why = MD_CLOSE_DONE;
    c->progress_ms = mp_now_ms();
    c->want = MD_HTTP_WANT_READ;
    mp_task_init(&c->task, &conn_vt);
    if (mp_spawn(s->rt, &c->task) != 0) {
        /* Shutting down: nobody will serve it. */
        atomic_store_explicit(&c->refs, 1, memory_order_relaxed);
        conn_finish(c, MD_CLOSE_SHUTDOWN);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    md_listener_state *l = server->data;
    if (status == 0)
        accept_one(l);
    else
        md_log(MD_LOG_ERROR, "%s listener %s: %s", l->kind == MD_LISTENER_HTTP ? "http" : "echo",
               l->addr, uv_strerror(status));
}

static void listener_freed(uv_handle_t *h)
{
    free(h->data);
}

static void close_listener(md_listener_state *l)
{
    if (l != NULL && !uv_is_closing((uv_handle_t *)&l->handle))
        uv_close((uv_handle_t *)&l->handle, listener_freed);
}

static const char *kind_name(md_listener kind)
{
    return kind == MD_LISTENER_HTTP ? "http" : "echo";
}

/* A listening socket for at, with SO_REUSEPORT when asked (it must be set before bind, which
 * is why magpied makes the socket itself rather than through uv_tcp_bind). */
static int listen_socket(const md_listen *at, bool reuseport)
{
    struct sockaddr_storage ss;
    int rc = at->family == AF_INET6 ? uv_ip6_addr(at->host, at->port, (struct sockaddr_in6 *)&ss)
                                    : uv_ip4_addr(at->host, at->port, (struct sockaddr_in *)&ss);
    if (rc != 0)
        return rc;
    int fd = socket(at->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    socklen_t sl =
        at->family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) ||
        (at->family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one)) ||
        bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* Loop side: a listener of kind on fd (bound and listening); takes fd, closed on failure. */
static int open_listener(md_server *s, md_listener kind, int fd, md_listener_state **out)
{
    md_listener_state *l = calloc(1, sizeof *l);
    if (l == NULL) {
        close(fd);
        return -ENOMEM;
    }
    l->srv = s;
    l->kind = kind;
    int rc = uv_tcp_init(mp_runtime_loop(s->rt), &l->handle);
    if (rc != 0) {
        close(fd);
        free(l);
        return rc;
    }
    l->handle.data = l;
    rc = uv_tcp_open(&l->handle, fd);
    if (rc != 0)
        close(fd); /* not the handle's: uv_close would leave it open */
    else
        rc = uv_listen((uv_stream_t *)&l->handle, 1024, on_connection);
    if (rc != 0) {
        close_listener(l);
        return rc;
    }
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&l->handle, (struct sockaddr *)&got, &len);
    sockaddr_text(&got, true, l->addr, sizeof l->addr);
    *out = l;
    return 0;
}

static int bind_listener(md_server *s, md_listener kind, const md_listen *at, bool reuseport,
                         md_listener_state **out, md_error *err)
{
    int fd = listen_socket(at, reuseport);
    int rc = fd < 0 ? fd : open_listener(s, kind, fd, out);
    if (rc != 0) {
        snprintf(err->msg, sizeof err->msg, "%s listener on %s%s%s:%u: %s", kind_name(kind),
                 at->family == AF_INET6 ? "[" : "", at->host, at->family == AF_INET6 ? "]" : "",
                 at->port, uv_strerror(rc));
        return rc;
    }
    (*out)->at = *at;
    (*out)->reuseport = reuseport;
    return 0;
}

static const md_listen *listen_of(const md_config *c, md_listener kind)
{
    return kind == MD_LISTENER_HTTP ? &c->http_listen : &c->echo_listen;
}

static bool reuseport_of(const md_config *c, md_listener kind)
{
    return kind == MD_LISTENER_HTTP ? c->http_reuseport : c->echo_reuseport;
}

static bool same_listen(const md_listen *a, const md_listen *b)
{
    return a->enabled == b->enabled &&
           (!a->enabled ||
            (a->family == b->family && a->port == b->port && strcmp(a->host, b->host) == 0));
}

static void setup_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    int rc = 0;
    for (int k = 0; k < MD_LISTENERS && rc == 0; k++) {
        int fd = s->inherited != NULL ? s->inherited[k] : -1;
        if (fd >= 0) {
            rc = open_listener(s, (md_listener)k, fd, &s->listeners[k]);
            if (rc != 0)
                snprintf(s->setup_err->msg, sizeof s->setup_err->msg,
                         "%s listener from systemd (fd %d): %s", kind_name((md_listener)k), fd,
                         uv_strerror(rc));
            else
                s->listeners[k]->activated = true;
        } else if (listen_of(&s->cfg, (md_listener)k)->enabled) {
            rc = bind_listener(s, (md_listener)k, listen_of(&s->cfg, (md_listener)k),
                               reuseport_of(&s->cfg, (md_listener)k), &s->listeners[k],
                               s->setup_err);
        }
    }
    if (rc != 0)
        for (int i = 0; i < MD_LISTENERS; i++) {
            close_listener(s->listeners[i]);
            s->listeners[i] = NULL;
        }
    /* Release: publishes the listeners' state; pairs with the acquire in wait_loop(). */
    atomic_store_explicit(&s->setup_rc, rc, memory_order_release);
}

static void stop_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    for (int i = 0; i < MD_LISTENERS; i++) {
        close_listener(s->listeners[i]);
        s->listeners[i] = NULL;
    }
    /* Release: pairs with the acquire in wait_loop(). */
    atomic_store_explicit(&s->setup_rc, 0, memory_order_release);
}

/* Block until the loop ran a command that stores setup_rc. */
static int wait_loop(md_server *s)
{
    int rc;
    /* Acquire: pairs with the release stores in setup_cmd() and stop_cmd(). */
    while ((rc = atomic_load_explicit(&s->setup_rc, memory_order_acquire)) == 1) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

/* Build, uptime, reloads and the access log's drops, for /metrics. */
static int process_metrics(md_server *s, md_outbuf *out)
{
    char text[1536];
    /* Relaxed: independent counters (see md_server_count_reload). */
    unsigned long long ok = atomic_load_explicit(&s->reloads_ok, memory_order_relaxed);
    unsigned long long failed = atomic_load_explicit(&s->reloads_failed, memory_order_relaxed);
    bool last_ok = atomic_load_explicit(&s->last_reload_ok, memory_order_relaxed);
    int n = snprintf(
        text, sizeof text,
        "# HELP magpied_build_info Versions magpied was built with; always 1.\n"
        "# TYPE magpied_build_info gauge\n"
        "magpied_build_info{version=\"%s\",magpie=\"%d.%d.%d\",libuv=\"%s\","
        "llhttp=\"%d.%d.%d\"} 1\n"
        "# HELP magpied_uptime_seconds Time since magpied started.\n"
        "# TYPE magpied_uptime_seconds gauge\n"
        "magpied_uptime_seconds %.3f\n"
        "# HELP magpied_reloads_total Configuration reloads (SIGHUP), by result.\n"
        "# TYPE magpied_reloads_total counter\n"
        "magpied_reloads_total{result=\"success\"} %llu\n"
        "magpied_reloads_total{result=\"failure\"} %llu\n"
        "# HELP magpied_config_last_reload_successful Whether the last reload applied (1) or "
        "kept the old configuration (0).\n"
        "# TYPE magpied_config_last_reload_successful gauge\n"
        "magpied_config_last_reload_successful %d\n"
        "# HELP magpied_access_log_dropped_total Access log lines dropped because the writer "
        "fell behind.\n"
        "# TYPE magpied_access_log_dropped_total counter\n"
        "magpied_access_log_dropped_total %llu\n"
        "# HELP magpied_http_config_generations HTTP settings kept in memory: the current ones "
        "and older ones that open connections started under.\n"
        "# TYPE magpied_http_config_generations gauge\n"
        "magpied_http_config_generations %u\n",
        MAGPIED_VERSION, MP_VERSION_MAJOR, MP_VERSION_MINOR, MP_VERSION_PATCH, uv_version_string(),
        LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH,
        (double)(uv_hrtime() - s->start_ns) / 1e9, ok, failed, last_ok ? 1 : 0,
        (unsigned long long)md_log_access_dropped(),
        /* Relaxed: a gauge. */
        (unsigned)atomic_load_explicit(&s->gens, memory_order_relaxed));
    return md_outbuf_append(out, text, (size_t)n) != 0 ? -ENOMEM : 0;
}

/* The runtime's counters for /metrics, per worker. */
static int runtime_metrics(void *arg, md_outbuf *out)
{
    md_server *s = arg;
    static const struct {
        const char *name, *help;
        size_t offset;
    } counters[] = {
#define C(f, h) {#f, h, offsetof(mp_worker_stats, f)}
        C(spawned, "Tasks spawned."),
        C(completed, "Tasks completed or cancelled."),
        C(polled, "Task polls."),
        C(stolen, "Tasks stolen from other workers."),
        C(steals, "Steal operations."),
        C(parks, "Times the worker went to sleep."),
        C(unparks, "Times the worker woke up."),
        C(lifo_hits, "Tasks run from the LIFO slot."),
        C(global_batches, "Batches taken from the global queue."),
        C(overflows, "Local ring overflows to the global queue."),
        C(budget_exhausted, "Ticks that used their whole poll budget."),
        C(drives, "Times the worker slept in the I/O loop as its driver."),
        C(io_polls, "Non-blocking runs of the I/O loop between ticks."),
        C(helpers_woken, "I/O turns after which the driver woke a worker to share the backlog."),
        C(helpers_skipped,
          "I/O turns whose backlog the driver ran alone (shorter than a wake-up)."),
#undef C
    };
    unsigned workers = mp_runtime_workers(s->rt);
    char line[256];
    for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
        int n =
            snprintf(line, sizeof line,
                     "# HELP magpie_worker_%s_total %s\n# TYPE magpie_worker_%s_total counter\n",
                     counters[k].name, counters[k].help, counters[k].name);
        if (md_outbuf_append(out, line, (size_t)n) != 0)
            return -ENOMEM;
        for (unsigned w = 0; w < workers; w++) {
            mp_worker_stats ws;
            mp_runtime_worker_stats(s->rt, w, &ws);
            uint64_t v = *(const uint64_t *)((const char *)&ws + counters[k].offset);
            n = snprintf(line, sizeof line, "magpie_worker_%s_total{worker=\"%u\"} %llu\n",
                         counters[k].name, w, (unsigned long long)v);
            if (md_outbuf_append(out, line, (size_t)n) != 0)
                return -ENOMEM;
        }
    }
    mp_stats st;
    mp_runtime_stats(s->rt, &st);
    size_t bufs_used = 0, bufs_pooled = 0;
    mp_tcp_buffer_stats(&bufs_used, &bufs_pooled);
    int n =
        snprintf(line, sizeof line,
                 "# HELP magpie_tcp_read_buffers Read buffers: held by connections, or pooled.\n"
                 "# TYPE magpie_tcp_read_buffers gauge\n"
                 "magpie_tcp_read_buffers{state=\"in_use\"} %zu\n"
                 "magpie_tcp_read_buffers{state=\"pooled\"} %zu\n",
                 bufs_used, bufs_pooled);
    if (n < 0 || (size_t)n >= sizeof line || md_outbuf_append(out, line, (size_t)n) != 0)
        return -ENOMEM;
    n = snprintf(line, sizeof line,
                 "# HELP magpie_runtime_workers Worker threads configured and started.\n"
                 "# TYPE magpie_runtime_workers gauge\n"
                 "magpie_runtime_workers{state=\"configured\"} %u\n"
                 "magpie_runtime_workers{state=\"started\"} %u\n",
                 st.workers, st.workers_started);
    if (md_outbuf_append(out, line, (size_t)n) != 0)
        return -ENOMEM;
    n = snprintf(line, sizeof line,
                 "# HELP magpie_runtime_live_tasks Tasks spawned and not complete.\n"
                 "# TYPE magpie_runtime_live_tasks gauge\nmagpie_runtime_live_tasks %llu\n",
                 (unsigned long long)st.live_tasks);
    if (md_outbuf_append(out, line, (size_t)n) != 0)
        return -ENOMEM;
    n = snprintf(line, sizeof line,
                 "# HELP magpie_runtime_wake_latency_seconds Recent time from unparking a worker "
                 "to its running (moving average).\n"
                 "# TYPE magpie_runtime_wake_latency_seconds gauge\n"
                 "magpie_runtime_wake_latency_seconds %.9f\n",
                 (double)st.wake_latency_ns / 1e9);
    if (md_outbuf_append(out, line, (size_t)n) != 0)
        return -ENOMEM;
    return process_metrics(s, out);
}

/* A generation for cfg, its hooks set; not yet published. NULL when out of memory. */
static md_http_gen *http_gen_new(md_server *s, const md_config *cfg)
{
    md_http_gen *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->http.limits = cfg->limits;
    g->http.metrics = &s->metrics;
    g->http.metrics_text = md_metrics_text;
    g->http.metrics_arg = &s->metrics;
    g->http.mono_clock = uv_hrtime;
    if (cfg->access_log != MD_ACCESS_LOG_OFF)
        g->http.access_log = access_entry;
    atomic_init(&g->http.newer, NULL);
    return g;
}

int md_server_start(md_server **out, mp_runtime *rt, const md_config *cfg,
                    const int inherited[MD_LISTENERS], md_error *err)
{
    md_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->rt = rt;
    s->cfg = *cfg;
    s->start_ns = uv_hrtime();
    md_metrics_init(&s->metrics);
    md_metrics_set_extra(&s->metrics, runtime_metrics, s);
    s->http = s->oldest = http_gen_new(s, cfg);
    atomic_init(&s->gens, 1);
    s->setup_err = err;
    s->inherited = inherited;
    atomic_init(&s->last_reload_ok, true);
    atomic_init(&s->setup_rc, 1);
    int rc = s->http != NULL ? mp_loop_call(rt, &s->cmd, setup_cmd, s) : -ENOMEM;
    if (rc == 0)
        rc = wait_loop(s);
    if (rc != 0) {
        free(s->http);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Loop side: apply s->next_cfg, or change nothing (see the file comment). */
static void reload_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    const md_config *cfg = s->next_cfg;
    md_listener_state *fresh[MD_LISTENERS] = {NULL};
    bool replace[MD_LISTENERS] = {false};
    int rc = 0;
    md_http_gen *g = http_gen_new(s, cfg);
    if (g == NULL) {
        snprintf(s->setup_err->msg, sizeof s->setup_err->msg, "out of memory");
        rc = -ENOMEM;
    }
    for (int k = 0; k < MD_LISTENERS && rc == 0; k++) {
        md_listener_state *l = s->listeners[k];
        const md_listen *at = listen_of(cfg, (md_listener)k);
        bool reuseport = reuseport_of(cfg, (md_listener)k);
        if (s->draining || (l != NULL && l->activated))
            continue; /* systemd's socket is kept whatever the file says */
        if (l != NULL && same_listen(&l->at, at)) {
            if (l->reuseport != reuseport)
                md_log(MD_LOG_WARN, "reload: [%s] reuseport changes only with the address",
                       kind_name((md_listener)k));
            continue;
        }
        if (l == NULL && !at->enabled)
            continue;
        replace[k] = true;
        if (at->enabled)
            rc = bind_listener(s, (md_listener)k, at, reuseport, &fresh[k], s->setup_err);
    }
    if (rc != 0) {
        for (int k = 0; k < MD_LISTENERS; k++)
            close_listener(fresh[k]);
        free(g);
    } else {
        for (int k = 0; k < MD_LISTENERS; k++) {
            if (!replace[k])
                continue;
            if (s->listeners[k] != NULL)
                md_log(MD_LOG_INFO, "reload: %s listener %s closed", kind_name((md_listener)k),
                       s->listeners[k]->addr);
            close_listener(s->listeners[k]);
            s->listeners[k] = fresh[k];
            if (fresh[k] != NULL)
                md_log(MD_LOG_INFO, "reload: %s listener on %s", kind_name((md_listener)k),
                       fresh[k]->addr);
        }
        md_http_server_publish(&s->http->http, &g->http);
        g->older = s->http;
        s->http = g;
        atomic_fetch_add_explicit(&s->gens, 1, memory_order_relaxed);
        http_gens_sweep(s); /* the older ones whose connections have all moved on or closed */
        s->cfg = *cfg;
        resume_accepting(s); /* max_connections may have grown */
    }
    /* Release: pairs with the acquire in wait_loop(). */
    atomic_store_explicit(&s->setup_rc, rc, memory_order_release);
}

int md_server_reload(md_server *s, const md_config *cfg, md_error *err)
{
    s->next_cfg = cfg;
    s->setup_err = err;
    atomic_store_explicit(&s->setup_rc, 1, memory_order_relaxed);
    int rc = mp_loop_call(s->rt, &s->cmd, reload_cmd, s);
    if (rc == 0)
        rc = wait_loop(s);
    md_server_count_reload(s, rc == 0);
    return rc;
}

void md_server_count_reload(md_server *s, bool ok)
{
    /* Relaxed: counters for /metrics, published nothing else. */
    atomic_fetch_add_explicit(ok ? &s->reloads_ok : &s->reloads_failed, 1, memory_order_relaxed);
    atomic_store_explicit(&s->last_reload_ok, ok, memory_order_relaxed);
}

static void describe_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    const md_listener_state *h = s->listeners[MD_LISTENER_HTTP];
    const md_listener_state *e = s->listeners[MD_LISTENER_ECHO];
    snprintf(s->describe_buf, sizeof s->describe_buf, "http=%s echo=%s", h ? h->addr : "off",
             e ? e->addr : "off");
    /* Release: pairs with the acquire in wait_loop(). */
    atomic_store_explicit(&s->setup_rc, 0, memory_order_release);
}

void md_server_describe(md_server *s, char *buf, size_t len)
{
    atomic_store_explicit(&s->setup_rc, 1, memory_order_relaxed);
    if (mp_loop_call(s->rt, &s->cmd, describe_cmd, s) == 0 && wait_loop(s) == 0)
        snprintf(buf, len, "%s", s->describe_buf);
    else
        snprintf(buf, len, "?");
}

void md_server_stop(md_server *s)
{
    atomic_store_explicit(&s->setup_rc, 1, memory_order_relaxed);
    if (mp_loop_call(s->rt, &s->cmd, stop_cmd, s) == 0)
        wait_loop(s);
}
static void drain_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    s->draining = true;
    for (int i = 0; i < MD_LISTENERS; i++) {
        close_listener(s->listeners[i]);
        s->listeners[i] = NULL;
    }
    /* Every conn in the list is alive: it leaves the list when its stream closes, before it
     * is freed. */
    for (md_conn *c = s->conns; c; c = c->next)
        mp_tcp_interrupt(&c->tcp);
    /* Release: pairs with the acquire in wait_loop(). */
    atomic_store_explicit(&s->setup_rc, 0, memory_order_release);
}

void md_server_drain(md_server *s)
{
    atomic_store_explicit(&s->setup_rc, 1, memory_order_relaxed);
    if (mp_loop_call(s->rt, &s->cmd, drain_cmd, s) == 0)
        wait_loop(s);
}

uint32_t md_server_open(md_server *s)
{
    return atomic_load_explicit(&s->open_conns, memory_order_relaxed);
}

void md_server_free(md_server *s)
{
    for (md_http_gen *g = s->http, *older; g != NULL; g = older) {
        older = g->older;
        free(g);
    }
    free(s);
}

md_metrics *md_server_metrics(md_server *s)
{
    return &s->metrics;
}
