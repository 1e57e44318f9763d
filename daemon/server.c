/* server.c: listeners, accepting, and the connection tasks (see server.h).
 *
 * max_connections: when the count of open connections reaches it, the connection callback
 * returns without accepting; libuv then stops polling that listener until uv_accept is called
 * again, which happens when a connection closes and the count is back under the mark. The
 * kernel's backlog holds the waiting peers meanwhile. Both the count and the pause are
 * touched only on the loop's thread (accept and close callbacks).
 */
#include "server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_BUFFER 16384

typedef struct md_listener_state {
    uv_tcp_t handle;
    md_server *srv;
    md_listener kind;
    bool open;
    bool paused;   /* a connection is waiting to be accepted */
    char addr[80]; /* "[host]:port" */
} md_listener_state;

struct md_server {
    mp_runtime *rt;
    md_config cfg;
    md_metrics metrics;
    md_http_server http;
    md_listener_state listeners[MD_LISTENERS];
    _Atomic uint32_t open_conns; /* written on the loop side, read by md_server_open() */
    struct md_conn *conns;       /* loop side: every open connection, for drain */
    bool draining;               /* loop side */
    mp_loop_cmd cmd;
    _Atomic int setup_rc; /* 1 while the loop has not run the setup yet */
    md_error *setup_err;
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
    int want;
    mp_timer timer; /* header, body and keep-alive deadlines (HTTP) */
    md_outbuf out;
    md_http_conn http;
} md_conn;

static void accept_one(md_listener_state *l);

static void conn_unref(md_conn *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        free(c);
}

/* On the loop's thread, once libuv is done with the stream. */
static void conn_closed(mp_tcp *t)
{
    md_conn *c = mp_container_of(t, md_conn, tcp);
    md_server *s = c->srv;
    md_metrics_conn_closed(&s->metrics, c->kind);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    /* Relaxed: a count, read for progress by md_server_open(); the list is loop side. */
    uint32_t open = atomic_load_explicit(&s->open_conns, memory_order_relaxed) - 1;
    atomic_store_explicit(&s->open_conns, open, memory_order_relaxed);
    for (int i = 0; i < MD_LISTENERS && open < s->cfg.max_connections; i++)
        if (s->listeners[i].paused && s->listeners[i].open)
            accept_one(&s->listeners[i]);
    conn_unref(c);
}

static mp_poll conn_finish(md_conn *c)
{
    if (c->closing)
        return MP_READY;
    c->closing = true;
    mp_timer_cancel(&c->timer);
    if (c->kind == MD_LISTENER_HTTP)
        md_http_conn_close(&c->http);
    md_outbuf_free(&c->out);
    mp_tcp_close(&c->tcp, conn_closed);
    return MP_READY;
}

static mp_poll echo_poll(md_conn *c, mp_context *cx)
{
    for (;;) {
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0)
            return conn_finish(c);
        /* The bytes are written from the stream's own buffer; reading stops while it is full,
         * so a peer that does not read its echo is held back by TCP (backpressure). */
        if (mp_tcp_write_poll(&c->tcp, cx, data, len, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0)
            return conn_finish(c);
        md_metrics_bytes(&c->srv->metrics, MD_LISTENER_ECHO, len, len);
        mp_tcp_consume(&c->tcp, len);
    }
}

static mp_poll http_poll(md_conn *c, mp_context *cx)
{
    for (;;) {

        size_t pending = md_outbuf_pending(&c->out);
        if (pending) {
            int err;
            if (mp_tcp_write_poll(&c->tcp, cx, md_outbuf_pending_data(&c->out), pending, &err) ==
                MP_PENDING)
                return MP_PENDING;
            if (err != 0)
                return conn_finish(c);
            md_metrics_bytes(&c->srv->metrics, MD_LISTENER_HTTP, 0, pending);
            md_outbuf_consume(&c->out, pending);
        }
        if (c->want == MD_HTTP_WANT_CLOSE)
            return conn_finish(c);
        const char *data;
        size_t len;
        int err;
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING) {
            /* Waiting for the peer: arm the core's deadline (rounded up to the wheel's
             * millisecond); when it passes, the core answers 408 or closes an idle one. */
            uint64_t deadline = md_http_conn_deadline(&c->http);
            if (deadline == UINT64_MAX) {
                mp_timer_cancel(&c->timer);
                return MP_PENDING;
            }
            if (mp_timer_poll(&c->timer, (deadline + 999999) / 1000000, cx) == MP_PENDING)
                return MP_PENDING;
            int want = md_http_conn_timeout(&c->http, uv_hrtime(), &c->out);
            if (want < 0)
                return conn_finish(c);
            c->want = want;
            continue;
        }
        uint64_t now = uv_hrtime();
        int want;
        if (len == 0 && err == -EINTR) {
            /* Graceful stop (md_server_drain): an idle connection closes now; one with a
             * request in flight finishes it and answers with Connection: close. */
            want = md_http_conn_drain(&c->http);
        } else if (len == 0) {
            if (err != UV_EOF)
                return conn_finish(c); /* reset: nobody to answer */
            want = md_http_conn_eof(&c->http, now, &c->out);
        } else {
            size_t used = 0;
            want = md_http_conn_feed(&c->http, now, data, len, &used, &c->out);
            md_metrics_bytes(&c->srv->metrics, MD_LISTENER_HTTP, used, 0);
            mp_tcp_consume(&c->tcp, used);
        }
        if (want < 0)
            return conn_finish(c); /* out of memory: close without flushing */
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
    conn_finish(mp_container_of(t, md_conn, task));
}

static void conn_release(mp_task *t)
{
    conn_unref(mp_container_of(t, md_conn, task));
}

static const mp_task_vtable conn_vt = {conn_poll, conn_cancel, conn_release};

/* On the loop's thread: accept the next connection of l, or pause l at the mark. */
static void accept_one(md_listener_state *l)
{
    md_server *s = l->srv;
    if (s->draining)
        return; /* not accepted: the listener is closing */
    if (atomic_load_explicit(&s->open_conns, memory_order_relaxed) >= s->cfg.max_connections) {
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
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    md_metrics_conn_opened(&s->metrics, c->kind);
    if (c->kind == MD_LISTENER_HTTP)
        md_http_conn_init(&c->http, &s->http, uv_hrtime());
    c->want = MD_HTTP_WANT_READ;
    mp_task_init(&c->task, &conn_vt);
    if (mp_spawn(s->rt, &c->task) != 0) {
        /* Shutting down: nobody will serve it. */
        atomic_store_explicit(&c->refs, 1, memory_order_relaxed);
        conn_finish(c);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    md_listener_state *l = server->data;
    if (status == 0)
        accept_one(l);
}

static int bind_listener(md_server *s, md_listener kind, const md_listen *at, md_error *err)
{
    md_listener_state *l = &s->listeners[kind];
    l->srv = s;
    l->kind = kind;
    if (!at->enabled)
        return 0;
    struct sockaddr_storage ss;
    int rc = at->family == AF_INET6 ? uv_ip6_addr(at->host, at->port, (struct sockaddr_in6 *)&ss)
                                    : uv_ip4_addr(at->host, at->port, (struct sockaddr_in *)&ss);
    if (rc == 0)
        rc = uv_tcp_init(mp_runtime_loop(s->rt), &l->handle);
    if (rc != 0)
        goto out_err;
    l->open = true;
    l->handle.data = l;
    rc = uv_tcp_bind(&l->handle, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&l->handle, 1024, on_connection);
    if (rc != 0)
        goto out_err;
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&l->handle, (struct sockaddr *)&got, &len);
    char host[48];
    int port;
    if (got.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&got, host, sizeof host);
        port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
        snprintf(l->addr, sizeof l->addr, "[%s]:%d", host, port);
    } else {
        uv_ip4_name((struct sockaddr_in *)&got, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)&got)->sin_port);
        snprintf(l->addr, sizeof l->addr, "%s:%d", host, port);
    }
    return 0;

out_err:
    snprintf(err->msg, sizeof err->msg, "%s listener on %s:%u: %s",
             kind == MD_LISTENER_HTTP ? "http" : "echo", at->host, at->port, uv_strerror(rc));
    return rc;
}

static void close_listener(md_listener_state *l)
{
    if (l->open && !uv_is_closing((uv_handle_t *)&l->handle))
        uv_close((uv_handle_t *)&l->handle, NULL);
    l->open = false;
}

static void setup_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    int rc = bind_listener(s, MD_LISTENER_HTTP, &s->cfg.http_listen, s->setup_err);
    if (rc == 0)
        rc = bind_listener(s, MD_LISTENER_ECHO, &s->cfg.echo_listen, s->setup_err);
    if (rc != 0)
        for (int i = 0; i < MD_LISTENERS; i++)
            close_listener(&s->listeners[i]);
    /* Release: publishes the listeners' state; pairs with the acquire in wait_loop(). */
    atomic_store_explicit(&s->setup_rc, rc, memory_order_release);
}

static void stop_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    md_server *s = arg;
    for (int i = 0; i < MD_LISTENERS; i++)
        close_listener(&s->listeners[i]);
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
    int n = snprintf(line, sizeof line,
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
    return md_outbuf_append(out, line, (size_t)n) != 0 ? -ENOMEM : 0;
}

int md_server_start(md_server **out, mp_runtime *rt, const md_config *cfg, md_error *err)
{
    md_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->rt = rt;
    s->cfg = *cfg;
    md_metrics_init(&s->metrics);
    md_metrics_set_extra(&s->metrics, runtime_metrics, s);
    s->http.limits = cfg->limits;
    s->http.metrics = &s->metrics;
    s->http.metrics_text = md_metrics_text;
    s->http.metrics_arg = &s->metrics;
    s->setup_err = err;
    atomic_init(&s->setup_rc, 1);
    int rc = mp_loop_call(rt, &s->cmd, setup_cmd, s);
    if (rc == 0)
        rc = wait_loop(s);
    if (rc != 0) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void md_server_describe(const md_server *s, char *buf, size_t len)
{
    snprintf(buf, len, "http=%s echo=%s",
             s->listeners[MD_LISTENER_HTTP].addr[0] ? s->listeners[MD_LISTENER_HTTP].addr : "off",
             s->listeners[MD_LISTENER_ECHO].addr[0] ? s->listeners[MD_LISTENER_ECHO].addr : "off");
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
    for (int i = 0; i < MD_LISTENERS; i++)
        close_listener(&s->listeners[i]);
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
    free(s);
}

md_metrics *md_server_metrics(md_server *s)
{
    return &s->metrics;
}
