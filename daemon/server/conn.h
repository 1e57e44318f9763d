/* What the files of the serving side share: the server's state, its listeners and its
 * connections.
 *
 *   server.c          the server's lifetime: start, describe, drain, free
 *   listener.c        listening sockets (bound, or passed by systemd), accepting (accept4 on
 *                     the loop) under each listener's max_connections, the count of open
 *                     connections
 *   conn.c            one connection: accept, bounded writes, close
 *   conn_http.c       the HTTP connection task, over the sans-I/O cores (http1.h, http2.h)
 *   conn_echo.c       the echo connection task (RFC 862)
 *   reload.c          the reload transaction
 *   generation.c      the HTTP settings' generations (generation.h)
 *   server_metrics.c  /metrics' runtime and process text
 *
 * Threads: the listeners, the lists and the counts belong to the loop's thread (libuv
 * callbacks, and commands run with mp_loop_call_wait). A connection's task runs on any
 * worker and owns its md_conn but for the fields marked loop side.
 */
#ifndef MD_CONN_H
#define MD_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "server/generation.h"
#include "magpie.h"
#include "core/metrics.h"
#include "core/outbuf.h"
#include "http/http1.h"
#include "core/activation.h"
#include "server/server.h"

/* Sockets one listener may have: its addresses, or what systemd passed under its name. */
#define MD_LISTENER_SOCKS 16

/* A listener of the configuration ([http], [echo], [https], a [listener NAME]): its sockets
 * share its max_connections. Heap-allocated, because its connections outlive a reload that
 * removes it: it is freed once it is out of the server's list (live false) and its last
 * connection has closed. Loop side but for name and kind, which never change (a connection's
 * task reads name, for its default site, while the connection is open). */
typedef struct md_listener_group {
    char name[MD_LISTENER_NAME_MAX];
    md_listener kind;
    bool live;                /* in md_server.groups */
    struct md_server *srv;    /* its server */
    uint32_t max_connections; /* a reload may change it */
    bool h2c;                 /* plaintext with http2 on: HTTP/2 by prior knowledge; a reload too */
    uint32_t per_client;      /* max_connections_per_client; 0: none (a reload may change it) */
    bool proxy;               /* proxy_protocol: a PROXY header first (a reload may change it) */
    md_acl proxy_from;        /* proxy_protocol_from: whose headers are believed */
    struct md_client_counts *clients; /* made at the first limit, kept with the group */
    uint32_t open;                    /* open connections accepted on its sockets */
    uint32_t nsocks;
    struct md_listener_state *socks[MD_LISTENER_SOCKS];
} md_listener_group;

/* A listening socket; heap-allocated because a reload may replace it while libuv still has
 * to run the old one's close callback. Loop side. */
typedef struct md_listener_state {
    uv_poll_t poll; /* the socket's readability, on the loop (level-triggered) */
    int fd;         /* the listening socket, closed with the poll's handle */
    md_server *srv;
    md_listener_group *group; /* whose max_connections it accepts under */
    md_listener kind;
    bool paused;               /* not polled: at its mark, or out of descriptors (a retry is due) */
    bool accepting;            /* in accept_ready(), which a close may reach again (listener.c) */
    bool activated;            /* passed by systemd: kept whatever the config says */
    uint64_t starve_logged_ms; /* when it last logged an accept failed for descriptors; 0: never */
    md_listen at;              /* what it was bound from (the config's value) */
    bool reuseport;
    char addr[80]; /* "[host]:port" */
} md_listener_state;

struct md_server {
    mp_runtime *rt; /* immutable after start */
    md_config cfg;  /* loop side after start */
    md_metrics metrics;
    md_http_gens gens; /* the HTTP settings; the list is loop side (generation.h) */
    md_listener_group *groups[MD_LISTENER_SLOTS]; /* loop side: the listeners that are on */
    uint32_t ngroups;
    uint64_t start_ns; /* immutable after start */
    /* Relaxed counters for /metrics; written by the thread that handles signals. */
    _Atomic uint64_t reloads_ok, reloads_failed;
    _Atomic bool last_reload_ok;
    _Atomic uint32_t open_conns; /* written on the loop side, read by md_server_open() */
    uint32_t open_peak;          /* loop side: most open since the last trim */
    struct md_conn *conns;       /* loop side: every open connection, for drain */
    bool draining;               /* loop side */
    /* Loop side: resumes the listeners an accept left paused out of descriptors or memory
     * (listener.c); made at the first such failure, closed by the runtime's shutdown. */
    uv_timer_t accept_retry;
    bool accept_retry_made;
};

/* An IPv6 address's text with a zone, NUL included (INET6_ADDRSTRLEN is 46). */
#define MD_PEER_TEXT_MAX 48
/* How long an HTTP connection that closes after a response goes on reading (and dropping) what
 * its peer still sends, at most, before it closes (conn_http.c): nginx's lingering_timeout.
 * A peer that reads its response and closes ends it at once. */
#define MD_HTTP_LINGER_MS 5000

/* A connection's PROXY header (proxy_protocol on its listener), decided at accept. */
enum md_conn_proxy {
    MD_CONN_PROXY_NONE,      /* the listener takes none: the first bytes are the protocol's */
    MD_CONN_PROXY_WANTED,    /* a trusted peer: the header is read before anything else */
    MD_CONN_PROXY_UNTRUSTED, /* not in proxy_protocol_from: closed before a byte is read */
};

/* One accepted connection. Freed when both the task is released and the stream closed. */
/* What a connection holds only while it has work: the bytes it owes its peer, and the state
 * of a write the peer holds back. Taken from the thread's cache when bytes arrive or a write
 * blocks (md_conn_out()), given back when the connection waits for its peer owing nothing
 * (md_conn_rest()): an idle connection spares these 64 bytes. */
typedef struct md_conn_busy {
    md_outbuf out;
    size_t send_done;          /* bytes of the blocked write the kernel has taken */
    uint64_t send_start_ms;    /* when that write first blocked */
    uint64_t send_progress_ms; /* when the kernel last took some of it */
    uint64_t linger_until_ms;  /* HTTP: when a lingering close gives up on the peer */
} md_conn_busy;

/* What only some connections have, in a block of its own taken at first need
 * (md_conn_more_of()): a plain HTTP/1.1 connection pays one pointer for all of it. Freed with
 * the connection. */
typedef struct md_conn_more {
    struct md_tls_conn *tls; /* [https]: the TLS transport (tls.h); NULL otherwise */
    struct md_h2_conn *h2;   /* HTTP/2 (http/http2.h), once chosen; NULL: HTTP/1.x */
    char *peer; /* client address (access log, forwarding fields), at first need (conn_http.c) */
    /* proxy_protocol (proxy_in.c): while proxy is WANTED, the header's bytes that came in
     * pieces (in); after, the client's address: the header's, or the peer's once a request
     * needed it (client; NULL: neither yet; conn_http.c). Either is free()d. */
    union {
        struct md_proxy_in *in;
        struct sockaddr_storage *client;
    } pp;
    uint64_t client_key;  /* counted in its group's clients (client_limit.h); 0: not counted */
    uint64_t accepted_ms; /* proxy_protocol: when accepted (the header's deadline counts from it) */
} md_conn_more;

/* What bounds a write the peer holds back (md_conn_write); 0 turns one off. */
typedef struct md_send_limits {
    uint32_t timeout_ms; /* [limits] send_timeout_ms: no progress for this long */
    uint32_t min_rate;   /* [limits] min_send_rate: bytes/s on average once ... */
    uint32_t grace_ms;   /* ... [limits] min_rate_grace_ms have passed since the write blocked */
    uint32_t idle_ms;    /* echo: [echo] idle_timeout_ms without a byte in or out */
} md_send_limits;

typedef struct md_conn {
    mp_tcp tcp;
    mp_task task;
    struct md_conn *prev, *next; /* the server's list, loop side */
    _Atomic int refs;            /* atomic: the task's and the stream's */
    /* Small fields packed: an idle connection's memory is this struct alone. */
    uint8_t kind; /* md_listener */
    /* The listener it came on (its name says which default site; open counted there; its
     * server). Never NULL: it lives while c is open (listener.c). */
    md_listener_group *group;
    bool closing;
    bool send_blocked; /* a write is waiting for the peer to read */
    bool nodelay;      /* TCP_NODELAY is set: TLS, HTTP/2, a response in pieces, io.nodelay */
    int8_t want;       /* md_http_want */
    bool lingering;    /* HTTP: answered and shut down, reading what the peer still sends */
    bool busy_lent;    /* busy is the poll's own, on its stack (md_conn_busy_lend()) */
    uint8_t why;       /* md_close_reason, reported when it closes after its output (DONE) */
    uint8_t proxy;     /* md_conn_proxy: the PROXY header's state, set at accept */
    mp_timer timer;    /* HTTP deadlines; echo idle timeout; the send deadlines of both */
    struct md_conn_busy *busy; /* while it has work: md_conn_out(), md_conn_rest() */
    struct md_conn_more *more; /* what only some have: md_conn_more_of(); NULL: none of it */
    /* By kind: HTTP's core (HTTP/1.1's state; its settings, whose limits bound the writes of
     * HTTP/1.1 and HTTP/2 alike, as they change between requests), or echo's limits. */
    union {
        md_http_conn http;
        struct {
            md_send_limits lim;   /* taken at accept: [echo] idle_timeout_ms and [limits] */
            uint64_t progress_ms; /* when bytes last came in or went out (mp_now_ms) */
        } echo;
    };
} md_conn;

/* listener.c, loop side. */
/* At start: each listener's sockets from systemd (by name; inherited may be NULL) or bound
 * from the configuration. All or none: on failure none is left open and err says why. */
int md_listeners_open(md_server *s, const md_activated *inherited, md_error *err);
/* Reload: s->groups made to match cfg's listeners, all or nothing: every changed address bound
 * first, then the sockets and listeners no longer configured closed; unchanged sockets (and
 * systemd's) are kept with their backlogs, and each listener keeps its open connections. 0, or
 * a negative errno with err saying why (nothing changed). */
int md_listeners_reload(md_server *s, const md_config *cfg, md_error *err);
/* Closes every listening socket (a graceful stop). */
void md_listeners_close_all(md_server *s);
/* "http=127.0.0.1:8080,[::1]:8080 echo=off" and " https=..." and " NAME=..." when on. */
void md_listeners_describe(md_server *s, char *buf, size_t len);
/* Closes l (NULL: nothing); libuv frees it later. */
void md_listener_close(md_listener_state *l);
/* Accepts on the listeners paused at their mark, while under it. */
void md_listeners_resume(md_server *s);
/* A connection was accepted on c->kind's listener / has closed: the counts, the list. */
void md_listener_conn_added(md_server *s, md_conn *c);
void md_listener_conn_removed(md_server *s, md_conn *c);
/* "host:port" or "[host]:port" of a socket address; the host alone with port_too false. */
void md_sockaddr_text(const struct sockaddr_storage *ss, bool port_too, char *buf, size_t len);

/* conn.c */
/* Loop side: serve fd, a connection l accepted (non-blocking), from the peer at peer (NULL:
 * not read yet), and spawn its task. Takes fd: 0, or -ENOMEM with fd closed. */
int md_conn_accept(md_listener_state *l, int fd, const struct sockaddr_storage *peer);
/* From the task (or its cancel): release what the connection holds and close its stream;
 * MP_READY. why is reported with the close. */
mp_poll md_conn_finish(md_conn *c, md_close_reason why);
/* c's md_conn_more, made (zeroed) at the first call: NULL when out of memory. At accept on
 * the loop's side, then the task's. */
md_conn_more *md_conn_more_of(md_conn *c);
static inline struct md_tls_conn *md_conn_tls(const md_conn *c)
{
    return c->more != NULL ? c->more->tls : NULL;
}
static inline struct md_h2_conn *md_conn_h2(const md_conn *c)
{
    return c->more != NULL ? c->more->h2 : NULL;
}
/* An HTTP connection's settings now: its HTTP/2 session's once it has one, else HTTP/1.1's.
 * Each protocol moves them at its request boundaries (md_http_server.request_begin). */
md_http_server *md_conn_http_server(const md_conn *c);

/* The connection's output buffer, its busy block taken first if it has none (the task only).
 * NULL: out of memory. */
md_outbuf *md_conn_out(md_conn *c);
/* The bytes c owes, 0 without a busy block. */
static inline size_t md_conn_pending(const md_conn *c)
{
    return c->busy != NULL ? md_outbuf_pending(&c->busy->out) : 0;
}
/* Gives c's busy block (and its output buffer's storage) back to the thread's caches. */
void md_conn_busy_give(md_conn *c);
/* For one poll of a connection that has no busy block: b, on the poll's stack, serves as one
 * (most polls end owing nothing, and then no block is taken from the cache at all); before the
 * poll returns, md_conn_busy_keep() moves what must outlive it to a block of the cache. */
void md_conn_busy_lend(md_conn *c, md_conn_busy *b);
/* The end of such a poll, if c->busy is still the lent one: kept in a block of the cache when
 * something is owed, a write is blocked or a lingering close waits; else let go. 0, or -ENOMEM
 * (nothing kept: close the connection). */
int md_conn_busy_keep(md_conn *c);
/* Waiting for its peer, owing nothing, no write blocked: the busy block goes back. Inline: an
 * HTTP/1.1 connection rests after every keep-alive request. */
static inline void md_conn_rest(md_conn *c)
{
    if (c->busy != NULL && !c->send_blocked && md_outbuf_pending(&c->busy->out) == 0)
        md_conn_busy_give(c);
}
/* Writes data[0..len) within the send limits. MP_READY with *err = 0, a negative errno, or
 * -ETIMEDOUT with c->why saying which limit passed; MP_PENDING while the peer is not reading
 * and no limit has passed (the timer is armed for the nearest). */
mp_poll md_conn_write(md_conn *c, mp_context *cx, const char *data, size_t len, int *err);
/* As md_conn_write, corked (mp_tcp_write_more_poll): for bytes the next write or sendfile
 * follows at once, such as a response head before its file. */
mp_poll md_conn_write_more(md_conn *c, mp_context *cx, const char *data, size_t len, int *err);
/* Sends up to count bytes of the file fd from *off with sendfile(2) (mp_tcp_sendfile_poll)
 * within the same send limits: MP_READY with *sent > 0, *sent 0 (nothing left at *off), or
 * *err as md_conn_write's; MP_PENDING while the peer is not reading. */
mp_poll md_conn_sendfile(md_conn *c, mp_context *cx, int fd, off_t *off, size_t count, size_t *sent,
                         int *err);
/* Why to close after md_conn_write's (or md_conn_sendfile's) error err. */
md_close_reason md_conn_write_error(const md_conn *c, int err);
/* Nagle off (TCP_NODELAY), once for the connection's life: for output that leaves in pieces
 * (HTTP/2's frames, a response written while its handler runs, TLS's records behind its
 * session tickets), each piece after the first would otherwise wait for the peer's delayed
 * ACK of the one before. Best effort. The task's. */
void md_conn_nodelay(md_conn *c);
enum { MD_CONN_UNSENT_MAX = 65536 };
/* Holds the bytes the kernel keeps queued but not yet sent to MD_CONN_UNSENT_MAX
 * (TCP_NOTSENT_LOWAT): a write then waits until the queue is below it, so what the connection
 * writes next (an HTTP/2 stream's HEADERS among another's DATA) leaves within about that many
 * bytes, whatever the autotuned send buffer has grown to; the congestion window, what is in
 * flight, is not limited. Best effort. The task's. */
void md_conn_unsent_max(md_conn *c);

/* proxy_in.c: reads the connection's PROXY header (c->proxy WANTED) from its stream, under
 * [limits] header_timeout_ms counted from accept. MP_READY with *why MD_CLOSE_DONE: read
 * (c->pp.client set when it carried an address; what follows stays in the stream for TLS or
 * HTTP); MP_READY with another reason: refused, close with it; MP_PENDING: waiting. */
mp_poll md_proxy_in_poll(md_conn *c, mp_context *cx, md_close_reason *why);

/* conn_http.c and conn_echo.c: the tasks' polls. */
mp_poll md_conn_http_poll(md_conn *c, mp_context *cx);
mp_poll md_conn_echo_poll(md_conn *c, mp_context *cx);
/* A generation of HTTP settings for cfg, with the server's hooks and its routes' roots open;
 * not yet published. 0, or a negative errno with err saying why (out of memory, a root that
 * cannot be opened). */
int md_conn_http_gen_new(md_server *s, const md_config *cfg, md_http_gen **out, md_error *err);

/* server_metrics.c: md_metrics_extra_fn for the server (arg). */
int md_server_metrics_text(void *arg, md_outbuf *out);

#endif
