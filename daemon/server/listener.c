/* listener.c: the listening sockets, and accepting under each listener's max_connections.
 *
 * A listener is bound from the configuration, or passed by systemd (socket activation,
 * activation.c), in which case it is kept whatever a reload's file says.
 *
 * Accepting: the loop polls each listening socket (uv_poll, level-triggered) and, when it is
 * readable, accept4()s on the loop's thread, up to ACCEPT_BATCH a turn; each connection becomes
 * a bare stream of the runtime's (mp_tcp_open) and a task. Not through libuv's uv_accept, which
 * needs a uv_tcp_t (248 bytes) per connection kept for the connection's life.
 *
 * max_connections: each listener has its own budget ([limits] max_connections for HTTP,
 * [echo] max_connections for echo), so that one listener's peers cannot lock the other out.
 * When a listener's count of open connections reaches it, the listener stops being polled
 * until one of its connections closes and the count is back under the mark. The kernel's
 * backlog holds the waiting peers meanwhile. Out of descriptors or memory (EMFILE, ENFILE,
 * ENOBUFS, ENOMEM), the connection stays in the backlog too: the listener pauses, as nginx's
 * do, and tries again at the next close of a connection or after ACCEPT_RETRY_MS, rather than
 * spin on a socket that stays readable. The counts and the pauses are touched only on the
 * loop's side (the poll's callback, the closes' callbacks, the retry timer).
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
#include "server/client_limit.h"
#include "server/conn.h"
#include "core/log.h"

/* Peers the kernel queues for a listener while it is paused or busy (listen(2)). */
#define LISTEN_BACKLOG 1024
/* Open connections from which a fall to half returns memory to the system (below). */
#define TRIM_PEAK 256
/* Connections accepted per readable report: the rest wait for the loop's next turn, behind
 * the events that came meanwhile. */
#define ACCEPT_BATCH 64
/* How long a listener out of descriptors waits before it accepts again, and how often at most
 * it says so. */
#define ACCEPT_RETRY_MS 100
#define ACCEPT_LOG_MS   10000

static void on_readable(uv_poll_t *p, int status, int events);

static void listener_pause(md_listener_state *l)
{
    if (!l->paused) {
        uv_poll_stop(&l->poll);
        l->paused = true;
    }
}

static void listener_watch(md_listener_state *l)
{
    if (l->paused && uv_poll_start(&l->poll, UV_READABLE, on_readable) == 0)
        l->paused = false;
}

static void retry_cb(uv_timer_t *t)
{
    md_listeners_resume(t->data);
}

/* accept4 failed for want of descriptors or memory: pause l and try again later. */
static void listener_starve(md_listener_state *l, int err)
{
    md_server *s = l->srv;
    /* At the descriptor limit every accept4 fails, queue or not (the kernel takes the
     * descriptor first), so each retry would say it again. */
    uint64_t now = mp_now_ms();
    if (l->starve_logged_ms == 0 || now - l->starve_logged_ms >= ACCEPT_LOG_MS) {
        md_log(MD_LOG_ERROR,
               "%s listener %s: accept: %s; accepting again in %d ms or at the next close",
               md_listener_name(l->kind), l->addr, strerror(err), ACCEPT_RETRY_MS);
        l->starve_logged_ms = now;
    }
    listener_pause(l);
    if (!s->accept_retry_made) {
        if (uv_timer_init(mp_runtime_loop(s->rt), &s->accept_retry) != 0)
            return; /* the next close retries */
        s->accept_retry.data = s;
        s->accept_retry_made = true;
    }
    if (!uv_is_active((uv_handle_t *)&s->accept_retry))
        uv_timer_start(&s->accept_retry, retry_cb, ACCEPT_RETRY_MS, 0);
}

/* Accept what l's queue holds, while under its mark; poll l for more, or pause it. */
static void accept_batch(md_listener_state *l)
{
    md_server *s = l->srv;
    bool want_peer = l->group->per_client != 0 || l->group->proxy;
    for (int n = 0; n < ACCEPT_BATCH; n++) {
        if (s->draining || l->group->open >= l->group->max_connections) {
            listener_pause(l); /* md_listeners_resume() polls it again */
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        /* The peer's address comes with the accept when the limits need it (no getpeername). */
        int fd = accept4(l->fd, want_peer ? (struct sockaddr *)&ss : NULL, want_peer ? &sl : NULL,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            switch (errno) {
            case EAGAIN:
#if EWOULDBLOCK != EAGAIN
            case EWOULDBLOCK:
#endif
                listener_watch(l);
                return;
            case EINTR:
            case ECONNABORTED: /* the peer gave up while queued: take the next */
            case EPROTO:
                continue;
            default: /* EMFILE, ENFILE, ENOBUFS, ENOMEM: the peer stays queued */
                listener_starve(l, errno);
                return;
            }
        }
        (void)md_conn_accept(l, fd, want_peer ? &ss : NULL); /* -ENOMEM: fd closed */
    }
    listener_watch(l); /* level-triggered: reported again next turn if more are queued */
}

static void accept_ready(md_listener_state *l)
{
    /* A connection refused at once (a runtime shutting down) closes inside the loop below,
     * and its close resumes the paused listeners: not this one again from within. */
    if (l->accepting)
        return;
    l->accepting = true;
    accept_batch(l);
    l->accepting = false;
}

static void on_readable(uv_poll_t *p, int status, int events)
{
    (void)events;
    md_listener_state *l = p->data;
    if (status != 0) {
        md_log(MD_LOG_ERROR, "%s listener %s: %s", md_listener_name(l->kind), l->addr,
               uv_strerror(status));
        return;
    }
    accept_ready(l);
}

void md_listeners_resume(md_server *s)
{
    for (uint32_t i = 0; i < s->ngroups; i++) {
        md_listener_group *g = s->groups[i];
        for (uint32_t k = 0; k < g->nsocks; k++)
            if (g->socks[k]->paused && g->open < g->max_connections)
                accept_ready(g->socks[k]);
    }
}

void md_listener_conn_added(md_server *s, md_conn *c)
{
    /* Relaxed: a count, read for progress by md_server_open(); the list is loop side. */
    uint32_t open = atomic_load_explicit(&s->open_conns, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->open_conns, open, memory_order_relaxed);
    c->group->open++;
    if (open > s->open_peak)
        s->open_peak = open;
    MP__LIST_PUSH_FRONT(s->conns, c, prev, next);
}

/* A group and what it holds; its sockets are closed already. */
static void group_free(md_listener_group *g)
{
    md_client_counts_free(g->clients);
    free(g);
}

void md_listener_conn_removed(md_server *s, md_conn *c)
{
    md_listener_group *g = c->group;
    if (c->more != NULL && c->more->client_key != 0)
        md_client_counts_remove(g->clients, c->more->client_key);
    if (--g->open == 0 && !g->live)
        group_free(g); /* a reload removed it: its last connection is gone */
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
    md_listener_state *l = h->data;
    close(l->fd);
    free(l);
}

void md_listener_close(md_listener_state *l)
{
    if (l != NULL && !uv_is_closing((uv_handle_t *)&l->poll))
        uv_close((uv_handle_t *)&l->poll, listener_freed);
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
    l->fd = fd;
    /* libuv makes fd non-blocking (systemd's may not be). */
    int rc = uv_poll_init(mp_runtime_loop(s->rt), &l->poll, fd);
    if (rc != 0) {
        close(fd);
        free(l);
        return rc;
    }
    l->poll.data = l;
    /* Again on systemd's socket, with our backlog: listen(2) on a listening socket only sets
     * it. */
    if (listen(fd, LISTEN_BACKLOG) != 0)
        rc = -errno;
    else
        rc = uv_poll_start(&l->poll, UV_READABLE, on_readable);
    if (rc != 0) {
        md_listener_close(l);
        return rc;
    }
    struct sockaddr_storage got;
    socklen_t len = sizeof got;
    if (getsockname(fd, (struct sockaddr *)&got, &len) != 0)
        got.ss_family = AF_UNSPEC;
    md_sockaddr_text(&got, true, l->addr, sizeof l->addr);
    *out = l;
    return 0;
}

/* A new socket of kind on at, accepting. */
static int listener_bind(md_server *s, const md_listener_config *lc, const md_listen *at,
                         md_listener_state **out, md_error *err)
{
    int fd = listen_socket(at, lc->reuseport);
    int rc = fd < 0 ? fd : open_listener(s, (md_listener)lc->kind, fd, out);
    if (rc != 0) {
        snprintf(err->msg, sizeof err->msg, "%s listener on %s%s%s:%u: %s", lc->name,
                 at->family == AF_INET6 ? "[" : "", at->host, at->family == AF_INET6 ? "]" : "",
                 at->port, uv_strerror(rc));
        return rc;
    }
    (*out)->at = *at;
    (*out)->reuseport = lc->reuseport;
    return 0;
}

/* What a listener of the configuration becomes: its group (kept or new) and its sockets. */
typedef struct plan {
    md_listener_group *g;
    bool fresh_group;
    uint32_t n;
    md_listener_state *socks[MD_LISTENER_SOCKS];
    bool fresh[MD_LISTENER_SOCKS]; /* bound by this plan (closed if it fails) */
} plan;

static md_listener_group *group_named(md_server *s, const char *name)
{
    for (uint32_t i = 0; i < s->ngroups; i++)
        if (strcmp(s->groups[i]->name, name) == 0)
            return s->groups[i];
    return NULL;
}

static bool has_activated(const md_listener_group *g)
{
    for (uint32_t k = 0; k < g->nsocks; k++)
        if (g->socks[k]->activated)
            return true;
    return false;
}

static void plans_undo(plan *p, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < p[i].n; k++)
            if (p[i].fresh[k])
                md_listener_close(p[i].socks[k]);
        if (p[i].fresh_group)
            group_free(p[i].g);
    }
}

static int plan_group(md_server *s, plan *p, const md_listener_config *lc)
{
    if (p->g != NULL)
        return 0;
    if ((p->g = calloc(1, sizeof *p->g)) == NULL)
        return -ENOMEM;
    p->fresh_group = true;
    snprintf(p->g->name, sizeof p->g->name, "%s", lc->name);
    p->g->kind = (md_listener)lc->kind;
    p->g->srv = s;
    return 0;
}

/* Makes the plans for cfg: at start (inherited: systemd's sockets) or at a reload (the
 * server's groups, whose sockets of unchanged addresses are taken over). */
static int plans_make(md_server *s, const md_config *cfg, const md_activated *inherited, plan *p,
                      uint32_t *np, md_error *err)
{
    int rc = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < cfg->nlisteners && rc == 0; i++) {
        const md_listener_config *lc = &cfg->listeners[i];
        plan *pl = &p[n];
        memset(pl, 0, sizeof *pl);
        md_listener_group *old = group_named(s, lc->name);
        if (old != NULL && old->kind == (md_listener)lc->kind)
            pl->g = old;
        /* systemd's sockets: kept whatever the file says. */
        for (int a = 0; inherited != NULL && a < inherited->n && rc == 0; a++) {
            if (strcmp(inherited->s[a].name, lc->name) != 0)
                continue;
            if ((rc = plan_group(s, pl, lc)) != 0)
                break;
            md_listener_state *l = NULL;
            rc = open_listener(s, (md_listener)lc->kind, inherited->s[a].fd, &l);
            if (rc != 0) {
                snprintf(err->msg, sizeof err->msg, "%s listener from systemd (fd %d): %s",
                         lc->name, inherited->s[a].fd, uv_strerror(rc));
                break;
            }
            if (pl->n == MD_LISTENER_SOCKS) {
                md_listener_close(l);
                snprintf(err->msg, sizeof err->msg,
                         "%s listener: more than %d sockets from systemd", lc->name,
                         MD_LISTENER_SOCKS);
                rc = -EINVAL;
                break;
            }
            l->activated = true;
            pl->fresh[pl->n] = true;
            pl->socks[pl->n++] = l;
        }
        if (rc == 0 && pl->g != NULL && !pl->fresh_group && has_activated(pl->g)) {
            memcpy(pl->socks, pl->g->socks, sizeof pl->socks);
            pl->n = pl->g->nsocks;
        } else if (rc == 0 && pl->n == 0) {
            for (int a = 0; a < MD_LISTEN_ADDRS && lc->listen[a].enabled && rc == 0; a++) {
                md_listener_state *keep = NULL;
                for (uint32_t k = 0; pl->g != NULL && k < pl->g->nsocks; k++)
                    if (md_listen_same(&pl->g->socks[k]->at, &lc->listen[a]))
                        keep = pl->g->socks[k];
                if (keep != NULL && keep->reuseport != lc->reuseport)
                    md_log(MD_LOG_WARN, "reload: [%s] reuseport changes only with the address",
                           lc->name);
                if (keep == NULL && (rc = listener_bind(s, lc, &lc->listen[a], &keep, err)) == 0)
                    pl->fresh[pl->n] = true;
                if (rc == 0)
                    pl->socks[pl->n++] = keep;
            }
        }
        if (rc == 0 && pl->n != 0)
            rc = plan_group(s, pl, lc);
        if (rc != 0) {
            n++; /* undone below with the others */
            break;
        }
        if (pl->n == 0) {
            if (pl->fresh_group)
                group_free(pl->g); /* off: nothing to keep */
            continue;
        }
        pl->g->max_connections = lc->max_connections;
        pl->g->h2c = lc->kind == MD_LISTENER_HTTP && lc->http2;
        pl->g->per_client = lc->max_per_client;
        pl->g->proxy = lc->proxy_protocol;
        pl->g->proxy_from = lc->proxy_from;
        if (lc->max_per_client != 0 && pl->g->clients == NULL &&
            (pl->g->clients = md_client_counts_new()) == NULL) {
            md_log(MD_LOG_ERROR, "[%s] max_connections_per_client: out of memory, not applied",
                   lc->name);
            pl->g->per_client = 0;
        }
        n++;
    }
    /* A listener gone from the file keeps the sockets systemd passed it, as they are. */
    for (uint32_t i = 0; rc == 0 && i < s->ngroups && n < MD_LISTENER_SLOTS; i++) {
        md_listener_group *g = s->groups[i];
        bool planned = false;
        for (uint32_t j = 0; j < n; j++)
            planned = planned || p[j].g == g;
        if (planned || !has_activated(g))
            continue;
        memset(&p[n], 0, sizeof p[n]);
        p[n].g = g;
        memcpy(p[n].socks, g->socks, sizeof p[n].socks);
        p[n++].n = g->nsocks;
    }
    *np = n;
    if (rc != 0)
        plans_undo(p, n);
    return rc;
}

/* The plans become the server's listeners; whatever they left out of the old ones closes. */
static void plans_apply(md_server *s, plan *p, uint32_t n, bool reload)
{
    for (uint32_t i = 0; i < s->ngroups; i++) {
        md_listener_group *g = s->groups[i];
        uint32_t j = 0;
        while (j < n && p[j].g != g)
            j++;
        for (uint32_t k = 0; k < g->nsocks; k++) {
            bool kept = false;
            for (uint32_t m = 0; j < n && m < p[j].n; m++)
                kept = kept || p[j].socks[m] == g->socks[k];
            if (kept)
                continue;
            if (reload)
                md_log(MD_LOG_INFO, "reload: %s listener %s closed", g->name, g->socks[k]->addr);
            md_listener_close(g->socks[k]);
        }
        if (j == n) {
            g->live = false;
            g->nsocks = 0;
            if (g->open == 0)
                group_free(g);
        }
    }
    s->ngroups = 0;
    for (uint32_t i = 0; i < n; i++) {
        md_listener_group *g = p[i].g;
        for (uint32_t k = 0; k < p[i].n; k++) {
            p[i].socks[k]->group = g;
            if (reload && p[i].fresh[k])
                md_log(MD_LOG_INFO, "reload: %s listener on %s", g->name, p[i].socks[k]->addr);
        }
        memcpy(g->socks, p[i].socks, sizeof g->socks);
        g->nsocks = p[i].n;
        g->live = true;
        s->groups[s->ngroups++] = g;
    }
}

int md_listeners_open(md_server *s, const md_activated *inherited, md_error *err)
{
    /* Every socket systemd passed must be some listener's. */
    for (int a = 0; inherited != NULL && a < inherited->n; a++) {
        uint32_t i = 0;
        while (i < s->cfg.nlisteners && strcmp(s->cfg.listeners[i].name, inherited->s[a].name))
            i++;
        if (i == s->cfg.nlisteners) {
            snprintf(err->msg, sizeof err->msg,
                     "systemd passed a socket named \"%s\" (fd %d), and no listener has that "
                     "name",
                     inherited->s[a].name, inherited->s[a].fd);
            for (int b = 0; b < inherited->n; b++)
                close(inherited->s[b].fd);
            return -EINVAL;
        }
    }
    static plan p[MD_LISTENER_SLOTS]; /* the loop's thread only */
    uint32_t n;
    int rc = plans_make(s, &s->cfg, inherited, p, &n, err);
    if (rc == 0)
        plans_apply(s, p, n, false);
    return rc;
}

int md_listeners_reload(md_server *s, const md_config *cfg, md_error *err)
{
    static plan p[MD_LISTENER_SLOTS]; /* the loop's thread only */
    uint32_t n;
    int rc = plans_make(s, cfg, NULL, p, &n, err);
    if (rc == 0)
        plans_apply(s, p, n, true);
    return rc;
}

void md_listeners_close_all(md_server *s)
{
    for (uint32_t i = 0; i < s->ngroups; i++) {
        md_listener_group *g = s->groups[i];
        for (uint32_t k = 0; k < g->nsocks; k++)
            md_listener_close(g->socks[k]);
        g->nsocks = 0;
        g->live = false;
        if (g->open == 0)
            group_free(g);
    }
    s->ngroups = 0;
}

void md_listeners_describe(md_server *s, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < s->cfg.nlisteners; i++) {
        const md_listener_config *lc = &s->cfg.listeners[i];
        md_listener_group *g = group_named(s, lc->name);
        bool on = g != NULL && g->nsocks != 0;
        if (!on && i != MD_LISTENER_HTTP && i != MD_LISTENER_ECHO)
            continue; /* named only when on: the line stays as it was */
        int w = snprintf(buf + used, len - used, "%s%s=%s", used != 0 ? " " : "", lc->name,
                         on ? "" : "off");
        for (uint32_t k = 0; on && w >= 0 && (size_t)w < len - used && k < g->nsocks; k++) {
            used += (size_t)w;
            w = snprintf(buf + used, len - used, "%s%s", k != 0 ? "," : "", g->socks[k]->addr);
        }
        if (w < 0 || (size_t)w >= len - used)
            return;
        used += (size_t)w;
    }
}
