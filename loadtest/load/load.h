/* load.h: what magpie-load's parts share: the run's settings (immutable once the connection
 * tasks start), the per-thread statistics they fill, and the connection task. */
#ifndef LOADTEST_LOAD_LOAD_H
#define LOADTEST_LOAD_LOAD_H

#include <magpie.h>
#include <stdbool.h>
#include <stdint.h>

#include "hist.h"
#include "resp.h"

enum ld_err {
    LD_ERR_CONNECT, /* connect() refused, unreachable or past --connect-timeout */
    LD_ERR_READ,    /* the server closed or reset with a response owed */
    LD_ERR_WRITE,   /* a request could not be sent */
    LD_ERR_TIMEOUT, /* no response within --timeout (counted per request lost) */
    LD_ERR_FRAMING, /* a response that cannot be framed (resp.h) */
    LD_ERR_STATUS,  /* a 4xx or 5xx status */
    LD_ERR_TLS,     /* a handshake that failed or timed out, or a TLS record in error */
    LD_ERR_N,
};
extern const char *const ld_err_names[LD_ERR_N];

/* One request as sent: its bytes, rendered once. */
typedef struct ld_req {
    char *bytes;
    size_t len;
    bool head; /* a HEAD request: its response has no body */
} ld_req;

/* The run's settings: written by main before the first task starts, read-only after. */
typedef struct ld_run {
    unsigned conns, workers, depth;
    double rate;         /* requests/s over all connections; 0: closed loop */
    uint64_t timeout_ns; /* a response owed longer than this is a timeout */
    uint64_t connect_timeout_ms;
    const ld_req *reqs;
    size_t nreqs;
    struct sockaddr_storage addr;
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
    unsigned seconds;          /* per-second slots */
    bool tls;                  /* https: every connection runs TLS (tls.h) first */
} ld_run;
extern ld_run ld_g;

/* Statistics of one thread: only that thread writes them while the run lasts; main reads
 * them once every worker has been joined (mp_runtime_free). */
typedef struct ld_stats {
    struct ld_stats *next; /* guarded by the list's lock (conn.c) */
    ld_hist latency;       /* from the earlier of due and written (conn.c) */
    ld_hist service;       /* from when it was written */
    ld_hist handshake;     /* TLS: from the TCP connection to the handshake's end */
    uint64_t completed, bytes_read, connects;
    uint64_t handshakes, resumed; /* TLS handshakes completed within the run, and resumed */
    uint64_t status[6];           /* by class: [1] 1xx .. [5] 5xx, [0] other */
    uint64_t errors[LD_ERR_N];
    uint64_t *per_second; /* responses completed in each second of the run */
} ld_stats;

/* Every thread's statistics added into out (ld_hist_init'ed and zeroed by the caller,
 * per_second with ld_g.seconds slots); call after the workers are joined. Frees them. */
void ld_stats_collect(ld_stats *out);

uint64_t ld_now_ns(void);

/* Spawn the connection tasks; done_fn(arg) runs once all of them have ended, on the thread
 * of the last. 0 or a negative errno (nothing is left running then). */
int ld_conns_start(mp_runtime *rt, void (*done_fn)(void *arg), void *arg);
void ld_conns_free(void);

#endif
