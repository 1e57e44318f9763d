/* listener.c: the listening sockets, and accepting under each listener's max_connections.
 *
 * A listener is bound from the configuration, or passed by systemd (socket activation,
 * activation.c), in which case it is kept whatever a reload's file says.
 *
 * max_connections: each listener has its own budget ([limits] max_connections for HTTP,
 * [echo] max_connections for echo), so that one listener's peers cannot lock the other out.
 * When a listener's count of open connections reaches it, the connection callback returns
 * without accepting; libuv then stops polling that listener until uv_accept is called again,
 * which happens when one of its connections closes and the count is back under the mark. The
 * kernel's backlog holds the waiting peers meanwhile. The counts and the pause are touched
 * only on the loop's thread (accept and close callbacks).
 */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "list.h"
#include "server/conn.h"
#include "core/log.h"

/* Peers the kernel queues for a listener while it is paused or busy (listen(2)). */
#define LISTEN_BACKLOG 1024
/* Open connections from which a fall to half returns memory to the system (below). */
#define TRIM_PEAK 256

static uint32_t max_conns(const md_server *s, md_listener kind)
{
    return s->cfg.listeners[kind].max_connections;
}

/* Accept the next connection of l, or pause l at the mark. */
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
    /* On failure libuv pauses l; the next close retries. */
    (void)md_conn_accept(l);
}

void md_listeners_resume(md_server *s)
{
    for (int i = 0; i < MD_LISTENERS; i++) {
        md_listener_state *l = s->listeners[i];
        if (l != NULL && l->paused && s->open_by[i] < max_conns(s, (md_listener)i))
            accept_one(l);
    }
}

void md_listener_conn_added(md_server *s, md_conn *c)
{
    /* Relaxed: a count, read for progress by md_server_open(); the list is loop side. */
    uint32_t open = atomic_load_explicit(&s->open_conns, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->open_conns, open, memory_order_relaxed);
    s->open_by[c->kind]++;
    if (open > s->open_peak)
        s->open_peak = open;
    MP__LIST_PUSH_FRONT(s->conns, c, prev, next);
}

void md_listener_conn_removed(md_server *s, md_conn *c)
{
    s->open_by[c->kind]--;
    MP__LIST_UNLINK(s->conns, c, prev, next);
    /* Relaxed: see md_listener_conn_added(). */
    uint32_t open = atomic_load_explicit(&s->open_conns, memory_order_relaxed) - 1;
    atomic_store_explicit(&s->open_conns, open, memory_order_relaxed);
#ifdef __GLIBC__
    /* After a crowd of connections left, glibc keeps their freed memory resident (it only
     * gives back the top of a heap); trimming returns the free pages in between, and the
     * pooled read buffers. A few times per crowd (each time the count halves), on the loop's
     * thread. */
    if (s->open_peak >= TRIM_PEAK && open <= s->open_peak / 2) {
        mp_tcp_buffer_trim();
        malloc_trim(0);
        s->open_peak = open;
    }
#endif
    md_listeners_resume(s);
}

static void on_connection(uv_stream_t *server, int status)
{
    md_listener_state *l = server->data;
    if (status == 0)
        accept_one(l);
    else
        md_log(MD_LOG_ERROR, "%s listener %s: %s", md_listener_name(l->kind), l->addr,
               uv_strerror(status));
}

void md_sockaddr_text(const struct sockaddr_storage *ss, bool port_too, char *buf, size_t len)
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

static void listener_freed(uv_handle_t *h)
{
    free(h->data);
}

void md_listener_close(md_listener_state *l)
{
    if (l != NULL && !uv_is_closing((uv_handle_t *)&l->handle))
        uv_close((uv_handle_t *)&l->handle, listener_freed);
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
        bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* A listener of kind on fd (bound and listening); takes fd, closed on failure. */
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
        rc = uv_listen((uv_stream_t *)&l->handle, LISTEN_BACKLOG, on_connection);
    if (rc != 0) {
        md_listener_close(l);
        return rc;
    }
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&l->handle, (struct sockaddr *)&got, &len);
    md_sockaddr_text(&got, true, l->addr, sizeof l->addr);
    *out = l;
    return 0;
}

int md_listener_bind(md_server *s, md_listener kind, const md_listen *at, bool reuseport,
                     md_listener_state **out, md_error *err)
{
    int fd = listen_socket(at, reuseport);
    int rc = fd < 0 ? fd : open_listener(s, kind, fd, out);
    if (rc != 0) {
        snprintf(err->msg, sizeof err->msg, "%s listener on %s%s%s:%u: %s", md_listener_name(kind),
                 at->family == AF_INET6 ? "[" : "", at->host, at->family == AF_INET6 ? "]" : "",
                 at->port, uv_strerror(rc));
        return rc;
    }
    (*out)->at = *at;
    (*out)->reuseport = reuseport;
    return 0;
}

const md_listen *md_listen_of(const md_config *cfg, md_listener kind)
{
    return &cfg->listeners[kind].listen;
}

bool md_reuseport_of(const md_config *cfg, md_listener kind)
{
    return cfg->listeners[kind].reuseport;
}

bool md_listen_same(const md_listen *a, const md_listen *b)
{
    return a->enabled == b->enabled &&
           (!a->enabled ||
            (a->family == b->family && a->port == b->port && strcmp(a->host, b->host) == 0));
}

int md_listeners_open(md_server *s, const int inherited[MD_LISTENERS], md_error *err)
{
    int rc = 0;
    for (int k = 0; k < MD_LISTENERS && rc == 0; k++) {
        md_listener kind = (md_listener)k;
        int fd = inherited != NULL ? inherited[k] : -1;
        if (fd >= 0) {
            rc = open_listener(s, kind, fd, &s->listeners[k]);
            if (rc != 0)
                snprintf(err->msg, sizeof err->msg, "%s listener from systemd (fd %d): %s",
                         md_listener_name(kind), fd, uv_strerror(rc));
            else
                s->listeners[k]->activated = true;
        } else if (md_listen_of(&s->cfg, kind)->enabled) {
            rc = md_listener_bind(s, kind, md_listen_of(&s->cfg, kind),
                                  md_reuseport_of(&s->cfg, kind), &s->listeners[k], err);
        }
    }
    if (rc != 0)
        for (int i = 0; i < MD_LISTENERS; i++) {
            md_listener_close(s->listeners[i]);
            s->listeners[i] = NULL;
        }
    return rc;
}
