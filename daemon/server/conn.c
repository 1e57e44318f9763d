/* conn.c: one accepted connection, HTTP or echo: its task, its bounded writes, its close.
 *
 * Writes: a peer that does not read would hold its connection for ever, so every write that
 * blocks is bounded (md_conn_write): no progress for send_timeout_ms, or, after
 * min_rate_grace_ms, less than min_send_rate bytes per second on average, closes the
 * connection. SO_SNDBUF (send_buffer, when set) bounds the kernel memory such a peer pins
 * meanwhile, and nothing more is read from a connection while its output is queued.
 *
 * Lifetime: two references, the task's and the stream's. The task's goes when the runtime
 * releases the task; the stream's when its close callback has run on the loop, which is also
 * where the connection leaves the server's counts and list.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "server/client_limit.h"
#include "server/conn.h"
#include "http/http2.h"
#include "server/tls.h"

/* Busy blocks: a few per thread, as many connections turn busy and rest again per request. */
static mp_block_cache busy_cache = MP_BLOCK_CACHE_INIT(sizeof(md_conn_busy), 16);

static void busy_init(md_conn_busy *b)
{
    md_outbuf_init(&b->out);
    b->send_done = 0;
}

static md_conn_busy *busy_take(md_conn *c)
{
    if (c->busy == NULL && (c->busy = mp_block_cache_take(&busy_cache)) != NULL)
        busy_init(c->busy);
    return c->busy;
}

void md_conn_busy_lend(md_conn *c, md_conn_busy *b)
{
    busy_init(b);
    c->busy = b;
    c->busy_lent = true;
}

int md_conn_busy_keep(md_conn *c)
{
    md_conn_busy *b = c->busy;
    c->busy_lent = false;
    c->busy = NULL;
    if (!c->send_blocked && !c->lingering && md_outbuf_pending(&b->out) == 0) {
        if (b->out.data != NULL)
            md_outbuf_free(&b->out);
        return 0;
    }
    md_conn_busy *kept = mp_block_cache_take(&busy_cache);
    if (kept == NULL) {
        md_outbuf_free(&b->out);
        return -ENOMEM;
    }
    *kept = *b; /* the buffer's storage and lent bytes move with its header */
    c->busy = kept;
    return 0;
}

md_conn_more *md_conn_more_of(md_conn *c)
{
    if (c->more == NULL)
        c->more = calloc(1, sizeof *c->more);
    return c->more;
}

md_outbuf *md_conn_out(md_conn *c)
{
    md_conn_busy *b = busy_take(c);
    return b != NULL ? &b->out : NULL;
}

void md_conn_busy_give(md_conn *c)
{
    md_conn_busy *b = c->busy;
    if (b == NULL)
        return;
    if (b->out.data != NULL) /* a lent response (GET /) took none */
        md_outbuf_free(&b->out);
    if (!c->busy_lent)
        mp_block_cache_give(&busy_cache, b);
    c->busy_lent = false; /* a block taken later in the same poll is the cache's */
    c->busy = NULL;
}

static void conn_unref(md_conn *c)
{
    /* AcqRel: the last one to let go frees; it sees everything the other did to c.
     * Pairs with itself (the other reference's decrement). */
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) {
        if (c->more != NULL) {
            free(c->more->peer);
            free(c->more->pp.in); /* or pp.client: the same pointer */
            free(c->more);
        }
        free(c);
    }
}

/* HTTP's part of a connection's life: the core, and its generation of settings. */
static void http_opened(md_server *s, md_conn *c)
{
    md_http_conn_init(&c->http, &md_http_gens_enter(&s->gens)->http, uv_hrtime());
    c->http.h2c = c->group != NULL && c->group->h2c; /* a client preface starts HTTP/2 */
}

static void http_finish(md_conn *c)
{
    md_http_gen *g = md_http_gen_of(md_conn_http_server(c)); /* before the session goes */
    if (c->more != NULL) {
        md_h2_conn_free(c->more->h2);
        c->more->h2 = NULL;
    }
    md_http_conn_close(&c->http);
    md_http_gen_leave(g);
}

static void http_closed(md_server *s)
{
    md_http_gens_sweep(&s->gens); /* after md_http_gen_leave() in http_finish() */
}

/* [https]: HTTP over the TLS transport (tls.c), made at accept; without it (no context in
 * the generation: a listener passed by systemd with no certificate configured) nothing is
 * served. */
static void https_opened(md_server *s, md_conn *c)
{
    http_opened(s, c);
    md_http_gen *g = md_http_gen_of(c->http.srv);
    md_tls_ctx *x = g->tls;
    for (size_t i = 0; i < sizeof g->tls_named / sizeof g->tls_named[0]; i++)
        if (g->tls_named[i].tls != NULL && c->group != NULL &&
            strcmp(g->tls_named[i].name, c->group->name) == 0)
            x = g->tls_named[i].tls; /* the listener's own certificate */
    md_conn_more *m = md_conn_more_of(c);
    if (m != NULL)
        (void)md_tls_conn_new(x, &m->tls); /* NULL: closed below */
}

static mp_poll https_poll(md_conn *c, mp_context *cx)
{
    if (md_conn_tls(c) == NULL)
        return md_conn_finish(c, MD_CLOSE_ERROR);
    return md_conn_http_poll(c, cx);
}

static void https_finish(md_conn *c)
{
    md_tls_conn_free(c);
    http_finish(c);
}

/* What each listener kind does with its connections, indexed by md_listener: a new kind is
 * one more entry here (and its settings one more entry of md_config.listeners). */
static const struct conn_kind {
    mp_poll (*poll)(md_conn *c, mp_context *cx);
    void (*opened)(md_server *s, md_conn *c); /* loop side, at accept; NULL: nothing */
    void (*finish)(md_conn *c);               /* the task, before the close; NULL: nothing */
    void (*closed)(md_server *s);             /* loop side, once closed; NULL: nothing */
} kinds[MD_LISTENERS] = {
    [MD_LISTENER_HTTP] = {md_conn_http_poll, http_opened, http_finish, http_closed},
    [MD_LISTENER_ECHO] = {md_conn_echo_poll, NULL, NULL, NULL},
    [MD_LISTENER_HTTPS] = {https_poll, https_opened, https_finish, http_closed},
};

/* On the loop's side, once the stream is closed. */
static void conn_closed(mp_tcp *t)
{
    md_conn *c = mp_container_of(t, md_conn, tcp);
    md_server *s = c->group->srv; /* c->group lives until md_listener_conn_removed() */
    if (kinds[c->kind].closed != NULL)
        kinds[c->kind].closed(s);
    md_metrics_conn_closed(&s->metrics, c->kind, c->why);
    md_listener_conn_removed(s, c);
    conn_unref(c);
}

mp_poll md_conn_finish(md_conn *c, md_close_reason why)
{
    if (c->closing)
        return MP_READY;
    c->closing = true;
    c->why = why;
    mp_timer_cancel(&c->timer);
    if (kinds[c->kind].finish != NULL)
        kinds[c->kind].finish(c);
    md_conn_busy_give(c);
    mp_tcp_close(&c->tcp, conn_closed);
    return MP_READY;
}

md_http_server *md_conn_http_server(const md_conn *c)
{
    struct md_h2_conn *h = md_conn_h2(c);
    return h != NULL ? md_h2_conn_server(h) : c->http.srv;
}

void md_conn_nodelay(md_conn *c)
{
    if (!c->nodelay)
        (void)mp_tcp_set_nodelay(&c->tcp, true); /* best effort: Nagle only delays */
    c->nodelay = true;
}

void md_conn_unsent_max(md_conn *c)
{
    int v = MD_CONN_UNSENT_MAX;
    (void)setsockopt(mp_tcp_fileno(&c->tcp), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v);
}

/* Echo's limits were taken at accept; HTTP's are its settings' (a reload's apply from the next
 * request, as its other limits do). */
static md_send_limits send_limits(const md_conn *c)
{
    if (c->kind == MD_LISTENER_ECHO)
        return c->echo.lim;
    const md_http_limits *l = &md_conn_http_server(c)->limits;
    return (md_send_limits){l->send_timeout_ms, l->min_send_rate, l->min_rate_grace_ms, 0};
}

/* A write or sendfile that the peer holds back, `done` bytes of it taken so far: wait within
 * the send limits. MP_PENDING: wait (the socket or the timer wakes the task); MP_READY with
 * *err -ETIMEDOUT: a limit passed; MP_READY with *err 0: the deadline came, send again (which
 * tells whether the peer took anything). */
static mp_poll send_wait(md_conn *c, mp_context *cx, size_t done, int *err)
{
    uint64_t now = mp_now_ms();
    md_conn_busy *b = busy_take(c);
    if (b == NULL) {
        *err = -ENOMEM;
        return MP_READY;
    }
    if (!c->send_blocked) {
        c->send_blocked = true;
        b->send_start_ms = b->send_progress_ms = now;
        b->send_done = done;
    } else if (done != b->send_done) {
        b->send_done = done;
        b->send_progress_ms = now;
    }
    md_send_limits lim = send_limits(c);
    uint64_t deadline = UINT64_MAX;
    md_close_reason why = MD_CLOSE_SEND_TIMEOUT;
    if (lim.timeout_ms != 0)
        deadline = b->send_progress_ms + lim.timeout_ms;
    if (lim.min_rate != 0) {
        /* Falls below the rate once the time since the write began exceeds what the bytes
         * taken so far pay for (and the grace). */
        uint64_t earned = (uint64_t)done * 1000 / lim.min_rate;
        uint64_t at = b->send_start_ms + (earned > lim.grace_ms ? earned : lim.grace_ms) + 1;
        if (at < deadline) {
            deadline = at;
            why = MD_CLOSE_MIN_SEND_RATE;
        }
    }
    if (lim.idle_ms != 0) { /* echo: neither sent nor read for idle_ms */
        uint64_t in = c->echo.progress_ms;
        uint64_t last = b->send_progress_ms > in ? b->send_progress_ms : in;
        if (last + lim.idle_ms < deadline) {
            deadline = last + lim.idle_ms;
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
    *err = 0;
    return MP_READY;
}

static mp_poll write_poll(md_conn *c, mp_context *cx, const char *data, size_t len, bool more,
                          int *err)
{
    return (more ? mp_tcp_write_more_poll : mp_tcp_write_poll)(&c->tcp, cx, data, len, err);
}

/* conn_write() once the peer has held a write back: wait within the limits, send again. Out of
 * line, so that the write the kernel takes at once (nearly all) pays for no loop's frame. */
__attribute__((noinline)) static mp_poll
conn_write_wait(md_conn *c, mp_context *cx, const char *data, size_t len, bool more, int *err)
{
    for (;;) {
        if (send_wait(c, cx, mp_tcp_write_progress(&c->tcp), err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
        if (write_poll(c, cx, data, len, more, err) == MP_READY) {
            c->send_blocked = false;
            return MP_READY;
        }
    }
}

static mp_poll conn_write(md_conn *c, mp_context *cx, const char *data, size_t len, bool more,
                          int *err)
{
    if (write_poll(c, cx, data, len, more, err) == MP_READY) {
        c->send_blocked = false;
        return MP_READY;
    }
    return conn_write_wait(c, cx, data, len, more, err);
}

mp_poll md_conn_write(md_conn *c, mp_context *cx, const char *data, size_t len, int *err)
{
    return conn_write(c, cx, data, len, false, err);
}

mp_poll md_conn_write_more(md_conn *c, mp_context *cx, const char *data, size_t len, int *err)
{
    return conn_write(c, cx, data, len, true, err);
}

mp_poll md_conn_sendfile(md_conn *c, mp_context *cx, int fd, off_t *off, size_t count, size_t *sent,
                         int *err)
{
    for (;;) {
        if (mp_tcp_sendfile_poll(&c->tcp, cx, fd, off, count, sent, err) == MP_READY) {
            c->send_blocked = false;
            return MP_READY;
        }
        /* Each call that sends something returns: a block here has taken nothing yet. */
        if (send_wait(c, cx, 0, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
    }
}

md_close_reason md_conn_write_error(const md_conn *c, int err)
{
    return err == -ETIMEDOUT ? c->why : err == -ENOMEM ? MD_CLOSE_NO_MEMORY : MD_CLOSE_ERROR;
}

static mp_poll conn_poll(mp_task *t, mp_context *cx)
{
    md_conn *c = mp_container_of(t, md_conn, task);
    return kinds[c->kind].poll(c, cx);
}

static void conn_cancel(mp_task *t)
{
    md_conn_finish(mp_container_of(t, md_conn, task), MD_CLOSE_SHUTDOWN);
}

static void conn_release(mp_task *t)
{
    conn_unref(mp_container_of(t, md_conn, task));
}

static const mp_task_vtable conn_vt = {conn_poll, conn_cancel, conn_release};

/* A connection whose accept failed: its stream's close is done with it. */
static void accept_failed_closed(mp_tcp *t)
{
    md_conn *c = mp_container_of(t, md_conn, tcp);
    free(c->more); /* over_client_limit()'s, holding nothing else yet */
    free(c);
}

/* Whether c's client has its listener's max_connections_per_client open already; counts c
 * in when not (client_limit.h). A peer whose address cannot be read is let in uncounted.
 * Checked here, at accept, before a byte is read: on a proxy_protocol listener the client is
 * the TCP peer, the balancer, and not the address its header will carry. */
static bool over_client_limit(md_listener_group *g, md_conn *c, const struct sockaddr_storage *ss)
{
    if (g->per_client == 0 || ss == NULL)
        return false;
    uint64_t key = md_client_key(g->clients, ss);
    md_conn_more *m = md_conn_more_of(c);
    if (m == NULL)
        return false; /* let in uncounted, as a peer whose address is unknown */
    if (!md_client_counts_add(g->clients, key, g->per_client))
        return true;
    m->client_key = key;
    return false;
}

int md_conn_accept(md_listener_state *l, int fd, const struct sockaddr_storage *peer)
{
    md_server *s = l->srv;
    md_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    c->kind = l->kind;
    c->group = l->group;
    atomic_init(&c->refs, 2);
    mp_timer_init(&c->timer, s->rt);
    /* The stream's default read buffer. */
    if (mp_tcp_open(s->rt, &c->tcp, fd, 0) != 0) {
        /* fd closed and the stream not open: its close frees c at once (libmagpie's one rule
         * for freeing a stream). */
        mp_tcp_close(&c->tcp, accept_failed_closed);
        return 0;
    }
    /* proxy_protocol: believed from proxy_protocol_from only (a peer whose address is not
     * known is not); the task closes the others before reading (proxy_in.c). */
    if (l->group->proxy)
        c->proxy = peer != NULL && md_acl_matches(&l->group->proxy_from, peer)
                       ? MD_CONN_PROXY_WANTED
                       : MD_CONN_PROXY_UNTRUSTED;
    if (c->proxy == MD_CONN_PROXY_WANTED) {
        md_conn_more *m = md_conn_more_of(c); /* where the header's pieces will go */
        if (m == NULL) {
            mp_tcp_close(&c->tcp, accept_failed_closed); /* out of memory: before a byte */
            return 0;
        }
        m->accepted_ms = mp_now_ms(); /* header_timeout_ms counts from here */
    }
    if (c->proxy != MD_CONN_PROXY_UNTRUSTED && over_client_limit(l->group, c, peer)) {
        md_metrics_conn_refused(&s->metrics, c->kind);
        mp_tcp_close(&c->tcp, accept_failed_closed); /* before a byte is read */
        return 0;
    }
    md_listener_conn_added(s, c);
    if (s->cfg.limits.send_buffer != 0) {
        /* Bounds what a peer that does not read pins in the kernel (the kernel doubles it);
         * without it the send buffer autotunes up to tcp_wmem's maximum. Best effort. */
        int v = (int)s->cfg.limits.send_buffer;
        setsockopt(mp_tcp_fileno(&c->tcp), SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
    md_metrics_conn_opened(&s->metrics, c->kind);
    if (kinds[c->kind].opened != NULL)
        kinds[c->kind].opened(s, c);
    /* Read here, on the loop's thread, where a reload writes s->cfg. */
    if (c->kind == MD_LISTENER_ECHO) {
        c->echo.lim = (md_send_limits){s->cfg.limits.send_timeout_ms, s->cfg.limits.min_send_rate,
                                       s->cfg.limits.min_rate_grace_ms,
                                       s->cfg.listeners[MD_LISTENER_ECHO].idle_timeout_ms};
        c->echo.progress_ms = mp_now_ms();
    }
    c->why = MD_CLOSE_DONE;
    c->want = MD_HTTP_WANT_READ;
    mp_task_init(&c->task, &conn_vt);
    if (mp_spawn(s->rt, &c->task) != 0) {
        /* Shutting down: nobody will serve it. */
        atomic_store_explicit(&c->refs, 1, memory_order_relaxed);
        md_conn_finish(c, MD_CLOSE_SHUTDOWN);
    }
    return 0;
}
