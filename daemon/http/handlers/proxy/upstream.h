/* Upstream groups for the proxy handler: their configuration ([upstream NAME] sections, a
 * plain value inside md_config like the route table), and their state while serving: the
 * balancer, passive health, and the keep-alive pools of connections to each server.
 *
 * Configuration: md_upstream_key() applies one key of a section, md_upstream_check() the rules
 * that need several; a DNS name in `server =` is resolved by md_upstream_key() itself, on the
 * thread that reads the configuration (main at start, the signal thread at a reload: never
 * the loop nor a worker), each of its addresses becoming one server, as nginx does.
 *
 * State: md_upstreams_new() builds it for one generation of settings (server/generation.h);
 * it lives as long as that generation, so a request in flight finishes with the servers and
 * pools it started with, and a reload starts afresh (health included). Only the /metrics
 * counters outlive it, kept by group and server name (upstream_metrics.c).
 *
 * Pools are shared by every worker, one per server under its group's mutex, not one per
 * worker: a connection's task moves between workers (work stealing), and a per-worker pool
 * would find the idle connection its previous request left on another worker's list, so it
 * would open new ones and keep up to workers x keepalive idle connections. The lock is held
 * for a few pointer moves only, never across I/O.
 *
 * Re-resolution (resolve_interval_ms, upstream_resolve.c) changes a group's set of servers
 * while it serves: each peer is a slot with its own copy of its server's settings, which
 * md_upstream_apply() marks out of the set or gives to a new address (the protocol is at
 * md_upstream_peer).
 *
 * Thread rules: the configuration is immutable once built. Everything marked "guarded by
 * up->mu" is taken under that mutex from any worker's task; counters for /metrics are relaxed
 * atomics (no other memory is published through them).
 */
#ifndef MD_UPSTREAM_H
#define MD_UPSTREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/kinds.h"
#include "core/metrics.h"
#include "core/outbuf.h"
#include "magpie.h"

enum {
    MD_UPSTREAMS_MAX = 16,           /* [upstream] sections */
    MD_UPSTREAM_SERVERS_MAX = 16,    /* servers of one group, after resolving names at load */
    MD_UPSTREAM_SLOTS_MAX = 32,      /* a group's peers while running: room for re-resolved
                                        names' new addresses while old ones drain */
    MD_UPSTREAM_NAME_MAX = 33,       /* a group's name, with its NUL */
    MD_UPSTREAM_LABEL_MAX = 80,      /* a server's label (logs, metrics), with its NUL */
    MD_UPSTREAM_PATH_MAX = 128,      /* health_path, with its NUL */
    MD_UPSTREAM_HEADER_MAX = 64,     /* hash_header's field name, with its NUL */
    MD_UPSTREAM_TLS_PATH_MAX = 1024, /* tls_ca_file and the client pair's paths, with NUL */
    MD_UPSTREAM_TLS_NAME_MAX = 254,  /* tls_server_name: a DNS name, with its NUL */
};

typedef enum md_balance {
    MD_BALANCE_ROUND_ROBIN, /* weighted, smooth (nginx's) */
    MD_BALANCE_LEAST_CONN,  /* fewest active requests per weight */
    MD_BALANCE_HASH_IP,     /* the client's address */
    MD_BALANCE_HASH_HEADER, /* a request field's value */
} md_balance;

typedef struct md_upstream_server_conf {
    struct sockaddr_storage addr;
    uint32_t addrlen;
    char label[MD_UPSTREAM_LABEL_MAX]; /* "HOST:PORT" as written (+ "/address" for a name
                                          with several addresses) */
    char host[MD_UPSTREAM_LABEL_MAX];  /* "HOST:PORT" as written: the Host for host = upstream */
    uint16_t weight;                   /* 1..100 */
    uint32_t max_conns;                /* 0 = unlimited */
    uint8_t entry;                     /* the `server =` line it came from (entries[]) */
} md_upstream_server_conf;

/* One `server =` line: what re-resolution needs to look its name up again. */
typedef struct md_upstream_entry {
    char host[MD_UPSTREAM_LABEL_MAX];    /* the name or address, without brackets */
    char port[6];                        /* as written, checked */
    char written[MD_UPSTREAM_LABEL_MAX]; /* "HOST:PORT" as written */
    uint16_t weight;
    uint32_t max_conns;
    bool name; /* a DNS name (not an address): re-resolved with resolve_interval_ms */
} md_upstream_entry;

/* One [upstream NAME] section. */
typedef struct md_upstream_conf {
    char name[MD_UPSTREAM_NAME_MAX];
    uint32_t line; /* of its header */
    uint32_t nservers;
    md_upstream_server_conf servers[MD_UPSTREAM_SERVERS_MAX];
    uint32_t nentries;
    md_upstream_entry entries[MD_UPSTREAM_SERVERS_MAX];
    uint32_t resolve_interval_ms; /* 0: names resolved at load only (upstream_resolve.c) */
    char resolve_file[MD_UPSTREAM_TLS_PATH_MAX]; /* "": the system's resolver; else a hosts(5)
                                                    file the names are looked up in */
    uint8_t balance;                             /* md_balance */
    char hash_header[MD_UPSTREAM_HEADER_MAX];
    uint32_t keepalive, keepalive_timeout_ms, keepalive_surplus_ms, connect_timeout_ms,
        send_timeout_ms, read_timeout_ms, header_timeout_ms, tries, retry_timeout_ms, max_fails,
        fail_timeout_ms, health_interval_ms, health_rise, health_fall, max_response_header_bytes,
        buffer_bytes;
    char health_path[MD_UPSTREAM_PATH_MAX]; /* empty: no active checks */
    uint32_t seen;                          /* bit per key set (not server), for duplicates */
    /* TLS to the servers (upstream_tls.c): tls = on; "" is the default of each. */
    bool tls, tls_verify;
    char tls_ca_file[MD_UPSTREAM_TLS_PATH_MAX];     /* "": the system's store */
    char tls_server_name[MD_UPSTREAM_TLS_NAME_MAX]; /* "": each server's host */
    char tls_cert[MD_UPSTREAM_TLS_PATH_MAX], tls_key[MD_UPSTREAM_TLS_PATH_MAX]; /* mTLS */
} md_upstream_conf;

struct md_ini_section;
/* The [upstream NAME] section's kind for the INI engine (core/ini.h): its part is an
 * md_upstream_table, each section one group (md_upstream_add, md_upstream_key,
 * md_upstream_check). */
extern const struct md_ini_section md_section_upstream;

typedef struct md_upstream_table {
    uint32_t n;
    md_upstream_conf u[MD_UPSTREAMS_MAX];
} md_upstream_table;

/* A new section from its header's text after "upstream" (" NAME"): 0, or -EINVAL with msg. */
int md_upstream_add(md_upstream_table *t, const char *spec, uint32_t line, char *msg,
                    size_t msg_len);
/* One key of section u. 0, -ENOENT (no such key), or -EINVAL with msg (without the key). */
int md_upstream_key(md_upstream_conf *u, const char *key, const char *value, char *msg,
                    size_t msg_len);
/* At the section's end: at least one server; the labels of re-resolved names. 0 or -EINVAL
 * with msg. */
int md_upstream_check(md_upstream_conf *u, char *msg, size_t msg_len);
/* s->label from s->host, with "/ADDRESS" after it when with_address. */
void md_upstream_label(md_upstream_server_conf *s, bool with_address);
/* The group named name, or -1. */
int md_upstream_find(const md_upstream_table *t, const char *name);

/* Why an attempt failed, for the error log and magpied_upstream_failures_total. */
typedef enum md_upstream_reason {
    MD_UP_CONNECT_REFUSED,
    MD_UP_CONNECT_ERROR,
    MD_UP_CONNECT_TIMEOUT,
    MD_UP_SEND_ERROR,
    MD_UP_SEND_TIMEOUT,
    MD_UP_HEADER_TIMEOUT,
    MD_UP_READ_TIMEOUT,
    MD_UP_RESET, /* closed or reset before a whole response */
    MD_UP_BAD_RESPONSE,
    MD_UP_HEADER_TOO_BIG,
    MD_UP_NO_SERVER,     /* every server down or at max_conns */
    MD_UP_TLS_HANDSHAKE, /* a TLS handshake that failed: verification, an alert, a close */
    MD_UP_REASONS,
} md_upstream_reason;

const char *md_upstream_reason_name(md_upstream_reason r);

struct md_upstream;

/* One server's state. */
/* The counters of one server of one group (or, with server "", of the group itself), kept for
 * the process's life by (group, server), so that /metrics stays monotonic across reloads that
 * keep them (upstream_metrics.c). Relaxed atomics: monotonic counters publish nothing else. */
typedef struct md_upstream_counters {
    struct md_upstream_counters *next; /* the registry's list */
    char group[MD_UPSTREAM_NAME_MAX];
    char server[MD_UPSTREAM_LABEL_MAX];
    _Atomic uint64_t requests; /* attempts sent */
    _Atomic uint64_t failures[MD_UP_REASONS];
    _Atomic uint64_t retries;                           /* the group's: attempts after the first */
    _Atomic uint64_t responses[MD_HTTP_STATUS_CLASSES]; /* response heads passed on, by class */
    _Atomic uint64_t header_ms[MD_METRICS_BUCKETS + 1]; /* their header time, bucketed */
    _Atomic uint64_t header_ms_sum;
    _Atomic uint64_t resolutions, resolve_failures; /* the group's: re-resolutions of its names */
} md_upstream_counters;

/* The counters of (group, server), made at the first ask; NULL when memory runs out. Any
 * thread. */
md_upstream_counters *md_upstream_counters_of(const char *group, const char *server);

/* A slot of a group: one server address. Re-resolution (upstream_resolve.c) changes the set
 * while requests run, and this protocol keeps a request from seeing its server's settings
 * change under it (the interleaving: a request picks slot 3 for address A, A leaves the DNS
 * answer, and the slot is given to a new address B while the request still connects to, logs
 * and counts against slot 3):
 *   - a slot's conf and n change only under up->mu, and only while it is not live, no
 *     request is active on it, no health check pins it and nothing is pooled for it
 *     (md_upstream_apply);
 *   - whoever reads them outside the mutex holds the slot: a request between
 *     md_upstream_pick() and md_upstream_done(), the health check between md_upstream_pin()
 *     and md_upstream_unpin(); /metrics reads them under the mutex.
 * A slot that stops being live is never picked again; its pooled connections are closed and
 * a connection put back for it is closed instead, so requests in flight finish on it. The
 * access log keeps n->server (the registry's, never rewritten), not conf->label. */
typedef struct md_upstream_peer {
    const md_upstream_server_conf *conf; /* &slot */
    md_upstream_counters *n;             /* its /metrics counters */
    struct md_upstream *up;
    md_upstream_server_conf slot;
    /* guarded by up->mu: */
    bool live;              /* in the group's current set: may be picked */
    bool used;              /* ever given an address (conf and n are set) */
    uint32_t pins;          /* health checks holding it */
    int64_t current_weight; /* smooth weighted round robin */
    uint32_t active;        /* requests using it now */
    uint32_t fails;         /* passive failures since fail_start_ms */
    uint64_t fail_start_ms;
    uint64_t down_until_ms;             /* passive health: out until then */
    bool health_down;                   /* active health: marked down */
    uint32_t health_good, health_bad;   /* consecutive active results */
    struct md_upstream_conn *idle;      /* the pool, most recently used first */
    struct md_upstream_conn *idle_tail; /* its least recently used, the first to close */
    uint32_t nidle;
    struct ssl_session_st *tls_session; /* the last TLS session it gave (resumption) */
} md_upstream_peer;

/* A response head from peer passed on to the client, status, ms after the first attempt
 * began: for /metrics. */
void md_upstream_count_response(md_upstream_peer *peer, unsigned status, uint64_t ms);

/* A connection to a server: a pooled one, or one a request is using. */
typedef struct md_upstream_conn {
    mp_tcp tcp;
    struct md_tls_stream *tls; /* tls = on: the TLS stream over tcp (core/tls_stream.h) */
    md_upstream_peer *peer;
    uint64_t idle_since_ms;               /* in the pool: since when */
    struct md_upstream_conn *next, *prev; /* in the pool: newer is prev */
} md_upstream_conn;

typedef struct md_upstream {
    const md_upstream_conf *conf;
    mp_runtime *rt;
    pthread_mutex_t mu;
    uint32_t rr;  /* guarded by mu: where least_conn's ties start */
    bool closing; /* guarded by mu: md_upstreams_shutdown() ran, nothing is pooled any more */
    md_upstream_counters *n;    /* the group's /metrics counters (retries, resolutions) */
    struct ssl_ctx_st *tls_ctx; /* tls = on: the generation's client context; NULL: plaintext */
    uint32_t nslots;            /* guarded by mu: peers[0..nslots) are used; only grows */
    uint32_t nlive;             /* guarded by mu: of them live */
    bool resolve_failing[MD_UPSTREAM_SERVERS_MAX]; /* the resolver task's: by entry, for logs */
    bool resolve_waiting[MD_UPSTREAM_SERVERS_MAX]; /* likewise: addresses wait for a slot */
    md_upstream_peer peers[MD_UPSTREAM_SLOTS_MAX];
} md_upstream;

typedef struct md_upstreams {
    md_upstream_table conf; /* a copy: peers point into it */
    mp_runtime *rt;
    struct md_health *health;     /* the checks' task (upstream_health.c); NULL once stopped */
    struct md_resolver *resolver; /* re-resolution's task (upstream_resolve.c); NULL: none */
    _Atomic int refs;             /* the generation's hold and the tasks' (upstream_health.c) */
    md_upstream u[MD_UPSTREAMS_MAX];
} md_upstreams;

/* The state of every group in t (copied), for a generation. 0, -ENOMEM, -EINVAL (a group's
 * TLS context, msg saying why). Starts the active
 * health checks of the groups that have a health_path (rt NULL: none, for tests). */
int md_upstreams_new(md_upstreams **out, const md_upstream_table *t, mp_runtime *rt, char *msg,
                     size_t msg_len);
/* The generation's end, when no request uses it any more: stops the checks, and once their
 * task has let go too, closes the pooled connections and frees the state. */
void md_upstreams_free(md_upstreams *us);
/* Stops the checks' task now (upstream_health.c). */
void md_upstream_health_stop(md_upstreams *us);
/* The generation's background tasks (the health checks, re-resolution): t spawned joinable
 * on us's runtime holding us (0, or mp_spawn's error with no hold taken); its release calls
 * md_upstreams_unref(). md_upstreams_task_stop() cancels and detaches it. */
int md_upstreams_spawn(md_upstreams *us, mp_task *t);
void md_upstreams_task_stop(mp_task *t);
void md_upstreams_unref(md_upstreams *us);
/* The server stops (md_server_drain, while the runtime still runs): stops the checks, closes
 * the pooled connections, and makes every later put close its connection instead, so that
 * no socket is left for after the runtime is gone. */
void md_upstreams_shutdown(md_upstreams *us);

/* Picks a server for an attempt, not one of those in tried (bit per peer index), skipping
 * servers down or at max_conns, and counts the attempt as active on it. key (the client's
 * address or the configured field's value; may be NULL) drives the hash methods. NULL when
 * none can be used. */
md_upstream_peer *md_upstream_pick(md_upstream *up, uint64_t tried, const char *key, size_t key_len,
                                   uint64_t now_ms);
/* The attempt on p ended: ok, or failed for passive health (counted in max_fails). */
void md_upstream_done(md_upstream_peer *p, bool failed, uint64_t now_ms);
/* Whether p is up (not out by passive health, not marked down by the active checks). */
bool md_upstream_peer_up(md_upstream_peer *p, uint64_t now_ms);

/* Active health: one check's result for p (rise/fall counting). */
void md_upstream_health_result(md_upstream_peer *p, bool good);
/* The health task holds p for a check: false when p is not live (nothing to check). */
bool md_upstream_pin(md_upstream_peer *p);
void md_upstream_unpin(md_upstream_peer *p);

/* --- Re-resolution (upstream_resolve.c) --- */

/* A name's addresses, as a resolver found them. ttl_ms: the smallest TTL of the DNS answer's
 * A/AAAA records, or UINT32_MAX when unknown (/etc/hosts, a resolver without TTLs). */
typedef struct md_upstream_addrs {
    uint32_t n;
    uint32_t ttl_ms;
    struct sockaddr_storage addr[MD_UPSTREAM_SLOTS_MAX];
    uint32_t addrlen[MD_UPSTREAM_SLOTS_MAX];
} md_upstream_addrs;

/* Looks host:port up, blocking (a blocking-pool thread): 0 with out filled (n >= 1), or a
 * negative errno / EAI_ code. The default is the system's (getaddrinfo, and libresolv for the
 * TTL); tests set their own before any runtime runs. */
typedef int (*md_upstream_resolver)(const char *host, const char *port, md_upstream_addrs *out);
extern md_upstream_resolver md_upstream_resolve_hook;
int md_upstream_resolve_system(const char *host, const char *port, md_upstream_addrs *out);
/* host's addresses in the hosts(5) file path ("ADDRESS NAME [ALIAS...]" lines, # comments),
 * in the file's order, with port; no TTL. 0, -ENOENT (not there), or -errno (unreadable). */
int md_upstream_resolve_file(const char *path, const char *host, const char *port,
                             md_upstream_addrs *out);

/* The addresses of entry (a `server =` name) are now a: slots of the entry whose address left
 * go out of the set (their pool closed, requests in flight finish), new addresses take a slot
 * never used, or one of the entry's drained ones, or any drained one. An empty a changes
 * nothing. Says how many addresses came in, went out, and found no slot (all busy draining;
 * the next round tries again). Any thread but the loop's (it closes connections). */
typedef struct md_upstream_change {
    uint32_t added, removed, missed;
} md_upstream_change;
md_upstream_change md_upstream_apply(md_upstream *up, uint32_t entry, const md_upstream_addrs *a);
/* When re-resolution of entry is due next, after a round that found ttl_ms (UINT32_MAX:
 * unknown): min(resolve_interval_ms, max(ttl_ms, MD_UPSTREAM_TTL_FLOOR_MS)). */
enum { MD_UPSTREAM_TTL_FLOOR_MS = 1000 };
uint32_t md_upstream_resolve_delay(const md_upstream_conf *u, uint32_t ttl_ms);
/* Starts the generation's resolver task, when a group has resolve_interval_ms and a name. */
int md_upstream_resolve_start(md_upstreams *us);
void md_upstream_resolve_stop(md_upstreams *us);

/* The pool, a list from the most recently used (taken first: the warmest, the least likely
 * to have been closed by the server) to the least (closed first). take: an idle connection
 * the server has not closed (one the loop saw stir while idle, mp_tcp_maybe_readable, is
 * checked with a non-blocking MSG_PEEK: EOF or unexpected bytes close it), or NULL. put: c,
 * disowned by its last task (mp_tcp_disown), whose last response ended cleanly, goes back.
 * Both close, from the least recently used end, what is idle longer than keepalive_timeout_ms
 * and what is over `keepalive` idle and idle keepalive_surplus_ms (at once when that is 0),
 * so a burst's connections wait a moment for the burst's next requests instead of closing
 * while they need new ones (HAProxy's idle pools purge their surplus likewise, gradually). */
md_upstream_conn *md_upstream_pool_take(md_upstream_peer *p, uint64_t now_ms);
void md_upstream_pool_put(md_upstream_conn *c, uint64_t now_ms);
/* Closes what take and put would (the health task's sweep, every second). */
void md_upstream_pool_sweep(md_upstream_peer *p, uint64_t now_ms);
/* Idle connections in p's pool (tests). */
uint32_t md_upstream_pool_idle(md_upstream_peer *p);
/* A new connection to p, connecting: 0 (poll mp_tcp_connect_poll), or a negative errno. */
int md_upstream_conn_open(md_upstream_peer *p, md_upstream_conn **out);
/* Closes c (its task's, or the pool's); its memory goes once the socket is closed. */
void md_upstream_conn_close(md_upstream_conn *c);

/* The connection's I/O, over TLS when the group has tls = on (the calls of mp_tcp's shape;
 * core/tls_stream.h). */
mp_poll md_upstream_conn_read(md_upstream_conn *c, mp_context *cx, const char **data, size_t *len,
                              int *err);
void md_upstream_conn_consume(md_upstream_conn *c, size_t n);
mp_poll md_upstream_conn_write(md_upstream_conn *c, mp_context *cx, const char *data, size_t len,
                               int *err);
int md_upstream_conn_shutdown(md_upstream_conn *c);

/* upstream_tls.c. The [upstream] TLS keys (tls, tls_verify, tls_ca_file, tls_server_name,
 * tls_client_certificate, tls_client_key): 0, -ENOENT (not one of them), -EINVAL with msg. A
 * CA file is read as the key is (readable, PEM certificates). */
int md_upstream_tls_key(md_upstream_conf *u, const char *key, const char *value, char *msg,
                        size_t msg_len);
/* At the section's end: the context made once as a check (the client pair matching), and the
 * warning that tls_verify = off logs. 0 or -EINVAL with msg. */
int md_upstream_tls_check(const md_upstream_conf *u, char *msg, size_t msg_len);
/* The group's client context for a generation (up->tls_ctx; nothing without tls = on). 0 or
 * -EINVAL with msg. */
int md_upstream_tls_init(md_upstream *up, char *msg, size_t msg_len);
/* A session a slot kept for a server it no longer has (md_upstream_apply). */
void md_upstream_tls_session_free(struct ssl_session_st *sess);
/* The context and the peers' sessions, at the generation's end. */
void md_upstream_tls_fini(md_upstream *up);
/* The connected c's TLS stream, set up to verify p's certificate (chain and name), with SNI,
 * ALPN http/1.1 and p's last session; the handshake is the caller's (md_tls_stream_handshake).
 * 0 or -ENOMEM. */
int md_upstream_tls_start(md_upstream_conn *c);
/* One line's worth of why c's handshake failed (md_tls_stream_why). */
const char *md_upstream_tls_why(md_upstream_conn *c, char *buf, size_t len);

/* Whether a pooled socket is still usable: nothing to read and no EOF (MSG_PEEK). */
bool md_upstream_fd_idle_ok(int fd);

/* Appends the upstream series to /metrics' text. 0 or -ENOMEM. */
int md_upstreams_metrics_text(md_upstreams *us, md_outbuf *out);

#endif
