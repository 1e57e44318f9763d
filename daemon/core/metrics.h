/* Daemon counters and their Prometheus text exposition.
 *
 * Writers are connection tasks on any worker thread; the reader is GET /metrics. Counters are
 * sharded: each thread adds to its own cache-line-aligned shard (chosen once per thread), so
 * the hot path never bounces a line between cores, and a thread that owns its shard adds with
 * a plain load and store; the reader sums the shards. All
 * counters are monotonic and relaxed: a scrape may see one shard a few increments ahead of another,
 * which Prometheus tolerates, and the histogram's _count is derived from its buckets so the two
 * always agree.
 */
#ifndef MD_METRICS_H
#define MD_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/kinds.h"
#include "core/outbuf.h"

/* Why a connection closed (magpied_connections_closed_total's reason label). */
typedef enum md_close_reason {
    MD_CLOSE_PEER,              /* the peer closed its side */
    MD_CLOSE_ERROR,             /* a socket error: reset, broken pipe */
    MD_CLOSE_DONE,              /* magpied closed after a response (Connection: close, errors) */
    MD_CLOSE_HEADER_TIMEOUT,    /* [limits] header_timeout_ms */
    MD_CLOSE_BODY_TIMEOUT,      /* [limits] body_timeout_ms */
    MD_CLOSE_KEEPALIVE_TIMEOUT, /* [limits] keepalive_timeout_ms */
    MD_CLOSE_IDLE_TIMEOUT,      /* [echo] idle_timeout_ms */
    MD_CLOSE_SEND_TIMEOUT,      /* [limits] send_timeout_ms */
    MD_CLOSE_MIN_BODY_RATE,     /* [limits] min_body_rate */
    MD_CLOSE_MIN_SEND_RATE,     /* [limits] min_send_rate */
    MD_CLOSE_SHUTDOWN,          /* a graceful stop, or the runtime cancelled the task */
    MD_CLOSE_NO_MEMORY,         /* out of memory for its output */
    MD_CLOSE_HANDSHAKE_TIMEOUT, /* [https] handshake_timeout_ms */
    MD_CLOSE_PROXY_UNTRUSTED,   /* proxy_protocol: a peer not in proxy_protocol_from */
    MD_CLOSE_PROXY_INVALID,     /* proxy_protocol: a bad, oversized or truncated header */
    MD_CLOSE_PROXY_TIMEOUT,     /* proxy_protocol: no whole header within header_timeout_ms */
    MD_CLOSE_REASONS,
} md_close_reason;

enum {
    MD_METRICS_SHARDS = 16,
    MD_METRICS_BUCKETS = 14, /* finite latency buckets; +Inf is one more */
    MD_METRICS_ROUTES = 64,  /* routes counted apart, over the process's life (the last: "other") */
    MD_METRICS_LABEL_MAX = 256, /* a route's label, NUL included */
};

/* One route's responses and latency (magpied_route_*), in each shard. */
typedef struct md_metrics_route {
    atomic_uint_fast64_t responses[MD_HTTP_STATUS_CLASSES];
    atomic_uint_fast64_t latency[MD_METRICS_BUCKETS + 1];
    atomic_uint_fast64_t latency_sum_ns;
    atomic_uint_fast64_t limited; /* refused by its limit_rate */
} md_metrics_route;

typedef struct md_metrics_shard {
    /* All atomic, relaxed: independent monotonic counters (see the file comment). */
    _Alignas(64) atomic_uint_fast64_t conn_opened[MD_LISTENERS];
    atomic_uint_fast64_t conn_refused[MD_LISTENERS]; /* closed at accept: a client's limit */
    atomic_uint_fast64_t conn_closed[MD_LISTENERS];
    atomic_uint_fast64_t conn_closed_why[MD_LISTENERS][MD_CLOSE_REASONS];
    atomic_uint_fast64_t bytes_in[MD_LISTENERS];
    atomic_uint_fast64_t bytes_out[MD_LISTENERS];
    atomic_uint_fast64_t responses[MD_HTTP_STATUS_CLASSES];
    atomic_uint_fast64_t latency[MD_METRICS_BUCKETS + 1];
    atomic_uint_fast64_t latency_sum_ns;
    md_metrics_route routes[MD_METRICS_ROUTES]; /* by md_metrics_route_slot() */
} md_metrics_shard;

/* Appends more exposition text (the runtime's and the process's, server_metrics.c) after the
 * daemon's own. */
typedef int (*md_metrics_extra_fn)(void *arg, md_outbuf *out);

typedef struct md_metrics {
    md_metrics_shard shards[MD_METRICS_SHARDS];
    md_metrics_extra_fn extra; /* immutable after start */
    void *extra_arg;           /* immutable after start */
    /* The routes' labels by slot: each written once, before nroutes counts it (release), and
     * never changed, so a scrape reads labels[0..nroutes) without a lock. */
    char route_label[MD_METRICS_ROUTES][MD_METRICS_LABEL_MAX];
    _Atomic uint32_t nroutes;
} md_metrics;

void md_metrics_init(md_metrics *m);
void md_metrics_set_extra(md_metrics *m, md_metrics_extra_fn fn, void *arg);

/* Which shard the calling thread writes, chosen at its first count. The first
 * MD_METRICS_SHARDS - 1 threads each own one (owned: the only writer of that shard in every
 * md_metrics, so it adds with a plain load and store); later threads share the last shard and
 * add with fetch_add. */
typedef struct md_metrics_thread {
    unsigned index; /* MD_METRICS_SHARDS until chosen */
    bool owned;
} md_metrics_thread;
extern _Thread_local md_metrics_thread md_metrics_self;
void md_metrics_pick_shard(void);

/* The calling thread's shard. */
static inline md_metrics_shard *md_metrics_local(md_metrics *m)
{
    if (md_metrics_self.index == MD_METRICS_SHARDS)
        md_metrics_pick_shard();
    return &m->shards[md_metrics_self.index];
}

/* Which histogram bucket a latency falls in; MD_METRICS_BUCKETS for +Inf. */
unsigned md_metrics_bucket(uint64_t ns);
/* Bucket i's le label ("0.001", "+Inf" for MD_METRICS_BUCKETS). */
const char *md_metrics_bucket_le(unsigned i);

/* md_metrics_add() with the thread's md_metrics_self.owned read by the caller: one that adds
 * several counters in a row reads it once (after each atomic store the compiler would read the
 * thread-local flag again). */
static inline void md_metrics_add_as(atomic_uint_fast64_t *counter, uint64_t n, bool owned)
{
    /* Relaxed: a monotonic counter publishes nothing else. An owner is the shard's only
     * writer, so its add needs no read-modify-write; the scrape's relaxed loads see either
     * value, never a torn one. */
    if (owned)
        atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n,
                              memory_order_relaxed);
    else
        atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/* Adds n to a counter of the calling thread's shard (md_metrics_local()). */
static inline void md_metrics_add(atomic_uint_fast64_t *counter, uint64_t n)
{
    md_metrics_add_as(counter, n, md_metrics_self.owned);
}

/* The slot of the route labelled label: the same slot for the same label for the process's
 * life, so that a route's counters stay monotonic across reloads that keep it. Once
 * MD_METRICS_ROUTES - 1 labels have slots, every new label shares the last, "other". Called
 * when settings are made (start, reload), from one thread at a time. */
unsigned md_metrics_route_slot(md_metrics *m, const char *label);

/* A response of the route in slot, of status class cls (0 for 1xx .. 4 for 5xx), that took ns. */
static inline void md_metrics_route_response(md_metrics_shard *s, unsigned slot, unsigned cls,
                                             unsigned bucket, uint64_t ns)
{
    bool owned = md_metrics_self.owned;
    md_metrics_route *r = &s->routes[slot < MD_METRICS_ROUTES ? slot : MD_METRICS_ROUTES - 1];
    md_metrics_add_as(&r->responses[cls], 1, owned);
    md_metrics_add_as(&r->latency[bucket], 1, owned);
    md_metrics_add_as(&r->latency_sum_ns, ns, owned);
}

/* A request of the route in slot refused by its rate limit. */
static inline void md_metrics_route_limited(md_metrics_shard *s, unsigned slot)
{
    md_metrics_add(&s->routes[slot < MD_METRICS_ROUTES ? slot : MD_METRICS_ROUTES - 1].limited, 1);
}

void md_metrics_conn_opened(md_metrics *m, md_listener l);
void md_metrics_conn_refused(md_metrics *m, md_listener l);
void md_metrics_conn_closed(md_metrics *m, md_listener l, md_close_reason why);
void md_metrics_bytes(md_metrics *m, md_listener l, uint64_t in, uint64_t out);

/* Appends the exposition (text format 0.0.4), then the extra hook's text. 0 or -ENOMEM. */
int md_metrics_format(md_metrics *m, md_outbuf *out);

/* md_metrics_format() in the shape of md_http_server.metrics_text; arg is the md_metrics. */
int md_metrics_text(void *arg, md_outbuf *out);

/* The one writer of exposition text, for every part of /metrics: appends printf-style text
 * of at most MD_METRICS_PUT_MAX bytes (a line or a few). 0, -ENOMEM, or -EINVAL when the text
 * would be longer. */
enum { MD_METRICS_PUT_MAX = 1023 }; /* a label escaped from MD_METRICS_LABEL_MAX fits */
int md_metrics_put(md_outbuf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A metric's "# HELP name help" and "# TYPE name type" lines. */
int md_metrics_put_head(md_outbuf *out, const char *name, const char *type, const char *help);
/* A whole family: its head, then the printf-style sample lines. Does nothing and returns rc
 * when rc is not 0, so that a list of families reads as one chain of calls. */
int md_metrics_family(md_outbuf *out, int rc, const char *name, const char *type, const char *help,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
