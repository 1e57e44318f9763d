/* conn.c: magpie-load's connection tasks, one per connection, on the runtime's workers.
 *
 * A task connects, then loops: queue the requests that may go now into one write, write
 * them, read what came back, frame the responses (resp.h) and record each one, and wait for
 * the socket or for the task's one timer. The timer's deadline is the earliest of: the end of
 * the run, the moment the oldest request owed a response times out, and in the open loop the
 * moment the next request is due. At the end of the run the task closes its stream and ends.
 *
 * What may go now: closed loop, as many requests as the pipelining depth allows in flight,
 * each measured from its write. Open loop, request k of connection i is due at
 *   start + (k + i / conns) * interval,   interval = conns / rate,
 * so the connections together offer `rate` requests a second, evenly spread; each is measured
 * from when it was due, not from when it went out (HdrHistogram's and wrk2's correction for
 * coordinated omission): a server that stalls holds back the requests due meanwhile, and
 * their wait shows in the percentiles. A request still goes out only with fewer than depth in
 * flight.
 *
 * The runtime's timers tick in milliseconds, and a wheel that fires up to a tick late would
 * add that lag to every latency if requests waited for their exact time. So a connection
 * wakes one tick (EARLY_NS) before a request is due and sends every request due within the
 * next tick; a request's latency runs from the earlier of when it was due and when it was
 * written. A late request is measured from its due time (a stall still shows in full); an
 * early one from its write, never less than what the server took. The offered rate holds
 * over any window longer than a tick.
 *
 * TLS (https): after the TCP connect the task runs the handshake (C_HANDSHAKE) over memory
 * BIOs (tls.c): what OpenSSL writes goes out from cbuf with mp_tcp_write_poll, what the socket
 * gives is handed to OpenSSL and the plaintext framed as over TCP. The requests queued in
 * wbuf are sealed into cbuf in one SSL_write, so a write of several pipelined requests is
 * still one write. The handshake is bounded by --connect-timeout; its time runs from the TCP
 * connection to its end, and counts in the statistics when it ends within the run.
 *
 * Statistics go into the running thread's own ld_stats: tasks polled on one worker never run
 * at once, so no counter is shared between threads while the run lasts.
 */
#include "load.h"
#include "tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const ld_err_names[LD_ERR_N] = {"connect", "read",   "write", "timeout",
                                            "framing", "status", "tls"};

ld_run ld_g;

uint64_t ld_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- per-thread statistics */

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static ld_stats *stats_list; /* guarded by stats_mu */
static _Thread_local ld_stats *my_stats;

static ld_stats *stats(void)
{
    if (my_stats)
        return my_stats;
    ld_stats *s = calloc(1, sizeof *s);
    uint64_t *ps = calloc(ld_g.seconds, sizeof *ps);
    if (!s || !ps)
        abort(); /* a few hundred KiB once per thread */
    ld_hist_init(&s->latency);
    ld_hist_init(&s->service);
    ld_hist_init(&s->handshake);
    s->per_second = ps;
    pthread_mutex_lock(&stats_mu);
    s->next = stats_list;
    stats_list = s;
    pthread_mutex_unlock(&stats_mu);
    return my_stats = s;
}

void ld_stats_collect(ld_stats *out)
{
    pthread_mutex_lock(&stats_mu);
    ld_stats *s = stats_list;
    stats_list = NULL;
    pthread_mutex_unlock(&stats_mu);
    while (s) {
        ld_hist_merge(&out->latency, &s->latency);
        ld_hist_merge(&out->service, ld_g.rate > 0 ? &s->service : &s->latency);
        ld_hist_merge(&out->handshake, &s->handshake);
        out->handshakes += s->handshakes;
        out->resumed += s->resumed;
        out->completed += s->completed;
        out->bytes_read += s->bytes_read;
        out->connects += s->connects;
        for (int i = 0; i < 6; i++)
            out->status[i] += s->status[i];
        for (int i = 0; i < LD_ERR_N; i++)
            out->errors[i] += s->errors[i];
        for (unsigned i = 0; i < ld_g.seconds; i++)
            out->per_second[i] += s->per_second[i];
        ld_stats *next = s->next;
        free(s->per_second);
        free(s);
        s = next;
    }
}

/* ---- the connection task */

typedef struct owed {
    uint64_t due, sent; /* ns */
    uint32_t req;
} owed;

enum { C_IDLE, C_CONNECTING, C_HANDSHAKE, C_RUN };

/* Read batches handled in one poll before the task yields to the others on its worker. */
enum {
    BATCHES_PER_POLL = 16,
    RETRY_NS = 10000000, /* after a failed connect */
    EARLY_NS = 1000000,  /* one tick of the timer wheel: see the top of the file */
};

typedef struct conn {
    mp_task task;
    mp_runtime *rt;
    unsigned id;
    int state;
    mp_tcp *tcp; /* NULL when closed; freed by its close callback */
    mp_timer timer;
    uint64_t connect_deadline_ms, retry_ns;
    ld_resp resp;
    owed *q; /* requests written, oldest first: a ring of depth entries */
    unsigned qhead, qlen;
    char *wbuf; /* the write in progress (kept still while it is pending) */
    size_t wlen, wcap;
    bool wpending;
    uint32_t next_req;
    SSL *ssl;   /* TLS: NULL when closed */
    char *cbuf; /* TLS: ciphertext to send (kept still while a write is pending) */
    size_t clen, ccap;
    uint64_t hs_start_ns;
    uint64_t k;                     /* open loop: the next request's number */
    uint64_t interval_ns, phase_ns; /* open loop */
} conn;

static conn *conns;
static _Atomic unsigned running;
static void (*all_done)(void *);
static void *all_done_arg;

static void tcp_closed(mp_tcp *t)
{
    free(t);
}

static void close_stream(conn *c)
{
    if (c->ssl) {
        /* No close_notify goes out (the stream is dropped, as over TCP), but OpenSSL must
         * take the end as orderly: an SSL freed otherwise marks its session not resumable,
         * and that session is the one its slot keeps (tls.c). */
        SSL_set_shutdown(c->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
        SSL_free(c->ssl);
        c->ssl = NULL;
        c->clen = 0;
    }
    if (c->tcp)
        mp_tcp_close(c->tcp, tcp_closed); /* tcp_closed runs once, whatever it returns */
    c->tcp = NULL;
}

static uint64_t ms_ceil(uint64_t ns)
{
    return (ns + 999999u) / 1000000u;
}

static uint64_t due_at(const conn *c, uint64_t k)
{
    return ld_g.start_ns + c->phase_ns + k * c->interval_ns;
}

/* Queue what may be sent now into wbuf. */
static void fill(conn *c, uint64_t now)
{
    unsigned depth = ld_g.depth;
    while (c->qlen < depth) {
        uint64_t due = now;
        if (ld_g.rate > 0) {
            due = due_at(c, c->k);
            if (due > now + EARLY_NS || due >= ld_g.end_ns)
                break;
            c->k++;
        }
        const ld_req *r = &ld_g.reqs[c->next_req];
        if (c->wlen + r->len > c->wcap) {
            size_t cap = c->wcap ? c->wcap : 4096;
            while (cap < c->wlen + r->len)
                cap *= 2;
            char *nb = realloc(c->wbuf, cap);
            if (!nb)
                break;
            c->wbuf = nb;
            c->wcap = cap;
        }
        memcpy(c->wbuf + c->wlen, r->bytes, r->len);
        c->wlen += r->len;
        owed *o = &c->q[(c->qhead + c->qlen++) % depth];
        o->due = due;
        o->sent = now;
        o->req = c->next_req;
        if (c->qlen == 1)
            ld_resp_start(&c->resp, r->head);
        if (++c->next_req == ld_g.nreqs)
            c->next_req = 0;
    }
}

/* Drop the connection: requests owed on it are lost (counted as `why`, once per connection
 * for read/write/framing, once per request for timeouts), except after a response that
 * announced the close, when they are sent again on the next connection at their own times. */
static void drop(conn *c, ld_stats *s, int why, uint64_t now)
{
    if (why >= 0 && now < ld_g.end_ns)
        s->errors[why] += why == LD_ERR_TIMEOUT ? c->qlen : 1;
    if (why < 0 && ld_g.rate > 0)
        c->k -= c->qlen;
    close_stream(c);
    c->qlen = 0;
    c->wlen = 0;
    c->wpending = false;
    c->state = C_IDLE;
    c->retry_ns = why == LD_ERR_CONNECT ? now + RETRY_NS : now;
}

static void record(conn *c, ld_stats *s, uint64_t now)
{
    owed *o = &c->q[c->qhead];
    c->qhead = (c->qhead + 1) % ld_g.depth;
    c->qlen--;
    if (now >= ld_g.end_ns)
        return;
    ld_hist_record(&s->latency, now - (o->due < o->sent ? o->due : o->sent));
    if (ld_g.rate > 0) /* closed loop: the same values; ld_stats_collect() copies them */
        ld_hist_record(&s->service, now - o->sent);
    s->completed++;
    int st = c->resp.status;
    s->status[st >= 100 && st < 600 ? st / 100 : 0]++;
    if (st >= 400)
        s->errors[LD_ERR_STATUS]++;
    uint64_t sec = (now - ld_g.start_ns) / 1000000000u;
    if (sec < ld_g.seconds)
        s->per_second[sec]++;
}

/* Frame the bytes read; false when the connection was dropped. */
static bool take(conn *c, ld_stats *s, const char *p, size_t n, uint64_t now)
{
    s->bytes_read += n;
    while (n > 0) {
        if (c->qlen == 0) { /* bytes nobody asked for */
            drop(c, s, LD_ERR_FRAMING, now);
            return false;
        }
        bool done;
        long used = ld_resp_feed(&c->resp, p, n, &done);
        if (used < 0) {
            drop(c, s, LD_ERR_FRAMING, now);
            return false;
        }
        p += used;
        n -= (size_t)used;
        if (done) {
            bool close = c->resp.close;
            record(c, s, now);
            if (close) {
                drop(c, s, -1, now);
                return false;
            }
            if (c->qlen)
                ld_resp_start(&c->resp, ld_g.reqs[c->q[c->qhead].req].head);
        }
    }
    return true;
}

/* The socket's end (or a TLS close_notify): the response running until the close is done. */
static void at_eof(conn *c, ld_stats *s, int err, uint64_t now)
{
    bool done = false;
    bool clean = err == MP_EOF && ld_resp_eof(&c->resp, &done);
    if (done && c->qlen) {
        record(c, s, now);
        drop(c, s, -1, now);
    } else {
        drop(c, s, clean && c->qlen == 0 ? -1 : LD_ERR_READ, now);
    }
}

/* ---- TLS (tls.h) */

/* The requests queued in wbuf, sealed into cbuf behind whatever OpenSSL wrote already. */
static bool seal(conn *c)
{
    if (c->wlen) {
        ERR_clear_error();
        if (SSL_write(c->ssl, c->wbuf, (int)c->wlen) != (int)c->wlen)
            return false;
        c->wlen = 0;
    }
    return ld_tls_take_out(c->ssl, &c->cbuf, &c->clen, &c->ccap);
}

/* The plaintext of what OpenSSL holds, framed; false when the connection was dropped. */
static bool unseal(conn *c, ld_stats *s, uint64_t now)
{
    static _Thread_local char plain[16384]; /* one record's worth */
    for (;;) {
        ERR_clear_error();
        int n = SSL_read(c->ssl, plain, sizeof plain);
        if (n > 0) {
            if (!take(c, s, plain, (size_t)n, now))
                return false;
            continue;
        }
        int e = SSL_get_error(c->ssl, n);
        if (e == SSL_ERROR_WANT_READ)
            return true;
        if (e == SSL_ERROR_ZERO_RETURN)
            at_eof(c, s, MP_EOF, now);
        else
            drop(c, s, LD_ERR_TLS, now);
        return false;
    }
}

/* The handshake, from the TCP connection: 1 done (C_RUN; the client's last flight may still
 * be in cbuf, to go out with the first requests), 0 dropped or the run's end reached, -1
 * waiting for the socket or the timer. */
static int handshake(conn *c, ld_stats *s, mp_context *cx)
{
    int err;
    for (;;) {
        if (!c->wpending) {
            ERR_clear_error();
            int r = SSL_do_handshake(c->ssl);
            int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
            if (!ld_tls_take_out(c->ssl, &c->cbuf, &c->clen, &c->ccap) ||
                (r != 1 && e != SSL_ERROR_WANT_READ)) {
                drop(c, s, LD_ERR_TLS, ld_now_ns());
                return 0;
            }
            if (r == 1) {
                uint64_t now = ld_now_ns();
                if (now < ld_g.end_ns) {
                    ld_hist_record(&s->handshake, now - c->hs_start_ns);
                    s->handshakes++;
                    s->resumed += SSL_session_reused(c->ssl) ? 1 : 0;
                }
                c->state = C_RUN;
                return 1;
            }
        }
        if (c->clen) {
            if (mp_tcp_write_poll(c->tcp, cx, c->cbuf, c->clen, &err) == MP_READY) {
                c->wpending = false;
                c->clen = 0;
                if (err) {
                    drop(c, s, LD_ERR_WRITE, ld_now_ns());
                    return 0;
                }
            } else {
                c->wpending = true;
            }
        }
        const char *data;
        size_t len;
        if (mp_tcp_read_poll(c->tcp, cx, &data, &len, &err) == MP_READY) {
            bool ok = len > 0 && ld_tls_put_in(c->ssl, data, len);
            if (len)
                mp_tcp_consume(c->tcp, len);
            if (!ok) {
                drop(c, s, LD_ERR_TLS, ld_now_ns());
                return 0;
            }
            continue;
        }
        uint64_t dl = c->hs_start_ns + ld_g.connect_timeout_ms * 1000000u;
        dl = dl < ld_g.end_ns ? dl : ld_g.end_ns;
        if (mp_timer_poll(&c->timer, ms_ceil(dl), cx) == MP_PENDING)
            return -1;
        uint64_t now = ld_now_ns();
        if (now < ld_g.end_ns)
            drop(c, s, LD_ERR_TLS, now);
        return 0;
    }
}

static mp_poll conn_poll(mp_task *t, mp_context *cx)
{
    conn *c = mp_container_of(t, conn, task);
    ld_stats *s = stats();
    int err;
    uint64_t now = 0;
    /* now was read just before (a response was taken), or nothing needs it before the read:
     * woken with every request owed and no write pending (a closed loop's steady state, and
     * an open loop's with the pipeline full), the poll goes straight to the read, whose clock
     * reading is then the only one per response. The end of the run wakes the task through
     * its timer, whose path reads the clock. */
    bool fresh = c->state == C_RUN && !c->wpending && c->qlen == ld_g.depth;
    for (unsigned batches = 0;;) {
        if (!fresh)
            now = ld_now_ns();
        fresh = false;
        if (now >= ld_g.end_ns) {
            close_stream(c);
            mp_timer_cancel(&c->timer);
            return MP_READY;
        }
        switch (c->state) {
        case C_IDLE:
            if (now < c->retry_ns) {
                if (mp_timer_poll(&c->timer, ms_ceil(c->retry_ns), cx) == MP_PENDING)
                    return MP_PENDING;
                continue;
            }
            if (!(c->tcp = malloc(sizeof *c->tcp)))
                return MP_READY;
            if ((err = mp_tcp_connect(c->rt, c->tcp, (const struct sockaddr *)&ld_g.addr, 0))) {
                free(c->tcp);
                c->tcp = NULL;
                drop(c, s, LD_ERR_CONNECT, now);
                continue;
            }
            c->connect_deadline_ms = ms_ceil(now) + ld_g.connect_timeout_ms;
            c->state = C_CONNECTING;
            /* fall through */
        case C_CONNECTING: {
            uint64_t dl = c->connect_deadline_ms, end = ms_ceil(ld_g.end_ns);
            if (mp_tcp_connect_poll(c->tcp, cx, &c->timer, dl < end ? dl : end, &err) == MP_PENDING)
                return MP_PENDING;
            if (err) {
                drop(c, s, LD_ERR_CONNECT, ld_now_ns());
                continue;
            }
            mp_tcp_set_nodelay(c->tcp, true);
            s->connects++;
            if (!ld_g.tls) {
                c->state = C_RUN;
                continue;
            }
            if (!(c->ssl = ld_tls_new(c->id))) {
                drop(c, s, LD_ERR_TLS, ld_now_ns());
                continue;
            }
            c->hs_start_ns = ld_now_ns();
            c->state = C_HANDSHAKE;
        }
            /* fall through */
        case C_HANDSHAKE: {
            int r = handshake(c, s, cx);
            if (r < 0)
                return MP_PENDING;
            if (r == 0)
                continue;
            now = ld_now_ns();
            break;
        }
        case C_RUN:
            break;
        }
        if (!c->wpending) {
            fill(c, now);
            if (c->ssl && !seal(c)) {
                drop(c, s, LD_ERR_TLS, now);
                continue;
            }
        }
        const char *out = c->ssl ? c->cbuf : c->wbuf;
        size_t olen = c->ssl ? c->clen : c->wlen;
        if (olen) {
            if (mp_tcp_write_poll(c->tcp, cx, out, olen, &err) == MP_READY) {
                c->wpending = false;
                c->wlen = 0;
                c->clen = 0;
                if (err) {
                    drop(c, s, LD_ERR_WRITE, now);
                    continue;
                }
            } else {
                c->wpending = true; /* the read below still runs: the server may be waiting
                                       for us to read before it reads more */
            }
        }
        const char *data;
        size_t len;
        if (mp_tcp_read_poll(c->tcp, cx, &data, &len, &err) == MP_READY) {
            now = ld_now_ns();
            if (len == 0) {
                at_eof(c, s, err, now);
                continue;
            }
            bool ok;
            if (c->ssl) {
                ok = ld_tls_put_in(c->ssl, data, len);
                mp_tcp_consume(c->tcp, len);
                if (ok)
                    ok = unseal(c, s, now);
                else
                    drop(c, s, LD_ERR_TLS, now);
            } else {
                ok = take(c, s, data, len, now);
                if (c->tcp)
                    mp_tcp_consume(c->tcp, len);
            }
            if (ok && ++batches == BATCHES_PER_POLL)
                return mp_yield(cx);
            fresh = true; /* the next request goes out now: its send time is this read's */
            continue;
        }
        /* Waiting for the socket: and for the timer, at the earliest of its reasons. */
        uint64_t dl = ld_g.end_ns;
        if (c->qlen) {
            uint64_t to = c->q[c->qhead].sent + ld_g.timeout_ns;
            dl = to < dl ? to : dl;
        }
        if (ld_g.rate > 0 && c->qlen < ld_g.depth && !c->wpending) {
            uint64_t wake = due_at(c, c->k) - EARLY_NS;
            dl = wake < dl ? wake : dl;
        }
        if (mp_timer_poll(&c->timer, ms_ceil(dl), cx) == MP_PENDING)
            return MP_PENDING;
        now = ld_now_ns();
        if (c->qlen && now >= c->q[c->qhead].sent + ld_g.timeout_ns)
            drop(c, s, LD_ERR_TIMEOUT, now);
    }
}

static void conn_cancel(mp_task *t)
{
    conn *c = mp_container_of(t, conn, task);
    mp_timer_cancel(&c->timer);
    close_stream(c);
}

static void conn_release(mp_task *t)
{
    (void)t;
    /* acq_rel: each decrement releases its task's work and the last one acquires all the
     * others' (pairs with the same decrement in every other conn_release(), a release
     * sequence), so the last task tells main only once every task is done. main reads the
     * statistics later still, after mp_runtime_free() has joined the workers. */
    if (atomic_fetch_sub_explicit(&running, 1, memory_order_acq_rel) == 1)
        all_done(all_done_arg);
}

static const mp_task_vtable conn_vt = {
    .poll = conn_poll,
    .cancel = conn_cancel,
    .release = conn_release,
};

int ld_conns_start(mp_runtime *rt, void (*done_fn)(void *arg), void *arg)
{
    unsigned n = ld_g.conns;
    conns = calloc(n, sizeof *conns);
    if (!conns)
        return -ENOMEM;
    all_done = done_fn;
    all_done_arg = arg;
    double interval = ld_g.rate > 0 ? 1e9 * n / ld_g.rate : 0;
    for (unsigned i = 0; i < n; i++) {
        conn *c = &conns[i];
        c->rt = rt;
        c->id = i;
        c->next_req = (uint32_t)(i % ld_g.nreqs);
        c->interval_ns = (uint64_t)interval;
        c->phase_ns = (uint64_t)(interval * i / n);
        if (!(c->q = calloc(ld_g.depth, sizeof *c->q)))
            return -ENOMEM;
        mp_timer_init(&c->timer, rt);
        mp_task_init(&c->task, &conn_vt);
    }
    /* relaxed: no task runs yet; the spawns below publish the value to them. */
    atomic_store_explicit(&running, n, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++) {
        int rc = mp_spawn(rt, &conns[i].task);
        if (rc != 0) {
            /* acq_rel: takes the share of the tasks never spawned, as conn_release() takes
             * one task's (pairs with the decrements there); those spawned still count
             * themselves down, and whichever decrement is last tells main. */
            if (atomic_fetch_sub_explicit(&running, n - i, memory_order_acq_rel) == n - i)
                all_done(all_done_arg);
            return rc;
        }
    }
    return 0;
}

void ld_conns_free(void)
{
    for (unsigned i = 0; conns && i < ld_g.conns; i++) {
        free(conns[i].q);
        free(conns[i].wbuf);
        free(conns[i].cbuf);
    }
    free(conns);
    conns = NULL;
}
