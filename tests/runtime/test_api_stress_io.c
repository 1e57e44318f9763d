/* The user-shaped stress of libmagpie's I/O and blocking pool, against magpie.h alone, beside
 * test_api_stress.c (tasks, timers, channels): what a networked program does, with the ways it
 * goes wrong, and a shutdown in the middle of it. Built also with the 4-slot ring.
 *
 * Each run serves TCP echo from a listener task and from a plain thread that accepts itself
 * (accept4, then mp_tcp_open, during the shutdown too), UDP echo from a socket task, and spawns,
 * from two plain threads and from tasks, a mix of: clients that connect, round-trip and close
 * (half of them sending their payload from a file with mp_tcp_sendfile_poll, a quarter in two
 * writes, the first corked with mp_tcp_write_more_poll; a quarter half-closing with
 * mp_tcp_shutdown before they read the echo; some cancelled
 * mid-connect by a plain thread, some sent to a listener that never accepts and timed out on the
 * wheel); name lookups with a timeout, some cancelled; UDP clients whose socket a plain thread may
 * close while they wait to receive; blocking jobs awaited from tasks (some cancelled before they
 * start); acceptors on listeners that a plain thread closes while they wait. Then the runtime shuts
 * down, cancelling or draining.
 *
 * Every task checks it is never polled concurrently or after it finished, is cancelled at most
 * once, released exactly once. Every run checks exact counts: tasks spawned = finished +
 * cancelled = released; sockets opened = close callbacks run; blocking jobs spawned = ran +
 * never started; every round trip that reported success carried the right bytes. A watchdog
 * prints the open tasks and aborts when nothing moves for MP_STRESS_STUCK_S seconds.
 *
 * A second test runs clients and an acceptor with the descriptor limit lowered under them:
 * connect and accept answer -EMFILE, the acceptor backs off on a timer (no busy loop: its
 * polls are counted), and once the limit is back every queued connection is served.
 *
 * Environment: MP_TEST_SEED, MP_STRESS_MS, MP_STRESS_ROUNDS, MP_STRESS_WORKERS, as for
 * test_api_stress.c. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "magpie.h"
#include "test_util.h"

enum kind { K_CONNECT, K_HOLE, K_RESOLVE, K_UDP, K_BLOCKING, K_ACCEPT, K_KINDS };
static const char *const kind_name[K_KINDS] = {"connect", "hole",     "resolve",
                                               "udp",     "blocking", "accept"};
enum { MAX_IO = 4000, MSG = 48, HEAD = 11 };

typedef struct io_run io_run;

typedef struct iotask {
    mp_task task;
    io_run *r;
    int kind, step;
    uint64_t rng;
    mp_timer timer;
    uint64_t deadline;
    bool timer_init;
    mp_tcp *tcp;                 /* heap: its close callback frees it */
    struct sock *sock;           /* the task's reference to its UDP socket or listener */
    _Atomic(struct sock *) shut; /* the same, for whoever closes it first: the task or a
                                    plain thread */
    mp_resolve res;
    mp_task *job;
    char out[MSG], in[MSG];
    size_t got;
    bool by_file;    /* a TCP client that sends its payload from the run's file (sendfile) */
    bool corked;     /* otherwise: its first HEAD bytes written with mp_tcp_write_more_poll */
    bool half_close; /* ends its sending side (mp_tcp_shutdown) before reading the echo */
    bool head_sent;
    off_t file_off;
    bool joinable; /* spawned by a plain thread, which keeps the handle */
    _Atomic int in_poll, done, cancels, released;
} iotask;

struct io_run {
    mp_runtime *rt;
    uint64_t seed;
    unsigned workers;
    mp_shutdown_mode mode;
    iotask *tasks;
    _Atomic size_t ntasks, spawned, finished, cancelled, released;
    _Atomic long opens, closes;  /* sockets opened by the run, close callbacks run */
    _Atomic long jobs, jobs_ran; /* blocking jobs spawned, that ran */
    _Atomic long trips_ok;
    _Atomic uint64_t progress;
    _Atomic bool stop, failed;
    _Atomic bool no_close; /* shutdown is near: plain threads close nothing more */
    _Atomic int closing;   /* plain threads inside a close */
    struct sockaddr_in echo, hole, udp_echo;
    struct sockaddr_in hand; /* the plain thread's listener (hand_acceptor) */
    int hand_fd;
    int file_fd; /* every task's payload at MSG * its index, for the clients that sendfile */
    char why[160];
};

static void fail(io_run *r, const char *what, iotask *t, int err)
{
    if (atomic_exchange(&r->failed, true))
        return;
    snprintf(r->why, sizeof r->why, "%s: %s task, error %d", what, t ? kind_name[t->kind] : "-",
             err);
    fprintf(stderr, "api_stress_io: %s (MP_TEST_SEED=%" PRIu64 ")\n", r->why, r->seed);
}

/* A UDP socket or a listener that a plain thread may close while its task polls it: freed
 * when both the close callback and the task are done with it (the header's rule: the storage
 * may go once no task will poll it again). */
typedef struct sock {
    union {
        mp_udp u;
        mp_tcp_listener l;
    };
    bool udp;
    _Atomic int refs;
} sock;

/* Close callbacks: the storage is freed (or unreferenced), and counted. */
static io_run *closing_run;
static void tcp_closed(mp_tcp *c)
{
    atomic_fetch_add(&closing_run->closes, 1);
    free(c);
}
static void sock_unref(sock *k)
{
    if (atomic_fetch_sub(&k->refs, 1) == 1)
        free(k);
}
static void udp_closed(mp_udp *u)
{
    atomic_fetch_add(&closing_run->closes, 1);
    sock_unref(mp_container_of(u, sock, u));
}
static void lst_closed(mp_tcp_listener *l)
{
    atomic_fetch_add(&closing_run->closes, 1);
    sock_unref(mp_container_of(l, sock, l));
}

static void sock_close(sock *k)
{
    /* One rule whatever the close returns (0, or -ESHUTDOWN when the shutdown closed it):
     * the callback runs once, and is where the reference goes. */
    if (k->udp)
        mp_udp_close(&k->u, udp_closed);
    else
        mp_tcp_listener_close(&k->l, lst_closed);
}

/* Close what the task holds (each object once: the pointer is taken) and let go of it. */
static void release_io(iotask *t)
{
    if (t->tcp)
        mp_tcp_close(t->tcp, tcp_closed); /* tcp_closed runs once, whatever it returns */
    t->tcp = NULL;
    sock *k = atomic_exchange(&t->shut, NULL);
    if (k)
        sock_close(k);
    if (t->sock)
        sock_unref(t->sock);
    t->sock = NULL;
    if (t->timer_init)
        mp_timer_cancel(&t->timer);
}

/* A socket for the task: two references, the task's and the close's. */
static sock *sock_new(iotask *t, bool udp)
{
    sock *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->udp = udp;
    atomic_init(&k->refs, 2);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int rc = udp ? mp_udp_bind(t->r->rt, &k->u, (struct sockaddr *)&lo, 0)
                 : mp_tcp_listen(t->r->rt, &k->l, (struct sockaddr *)&lo, 4, 0);
    if (rc != 0) {
        free(k);
        return NULL;
    }
    atomic_fetch_add(&t->r->opens, 1);
    t->sock = k;
    /* Against the sweep before a drain (no_close, then every task's shut): either it sees
     * this socket, or this sees no_close and closes it itself; both seq_cst (a store then a
     * load on each side), and the exchange closes it once. */
    atomic_store(&t->shut, k);
    if (atomic_load(&t->r->no_close)) {
        sock *x = atomic_exchange(&t->shut, NULL);
        if (x)
            sock_close(x);
    }
    return k;
}

static void blocking_fn(void *arg)
{
    iotask *t = arg;
    atomic_fetch_add(&t->r->jobs_ran, 1);
    if (t->rng % 4 == 0)
        usleep((useconds_t)(t->rng % 2000));
}

/* "T" and nine digits (a task's index), ':', then letters: what io_new() writes. */
static bool payload_shaped(const char *p, size_t len)
{
    if (len != MSG || p[0] != 'T' || p[10] != ':')
        return false;
    for (int k = 1; k < 10; k++)
        if (p[k] < '0' || p[k] > '9')
            return false;
    for (int k = 11; k < MSG; k++)
        if (p[k] < 'a' || p[k] > 'z')
            return false;
    return true;
}

static mp_poll io_step(iotask *t, mp_context *cx)
{
    io_run *r = t->r;
    mp_runtime *rt = r->rt;
    int err = 0;
    if (!t->timer_init) {
        mp_timer_init(&t->timer, rt);
        t->timer_init = true;
        t->deadline = mp_now_ms() + (t->kind == K_HOLE  ? 1 + t->rng % 20
                                     : t->kind == K_UDP ? 500
                                                        : 20000);
    }
    switch (t->kind) {
    case K_CONNECT:
    case K_HOLE:
        if (t->step == 0) {
            if (!(t->tcp = malloc(sizeof *t->tcp)))
                return MP_READY;
            err = mp_tcp_connect(rt, t->tcp,
                                 (struct sockaddr *)(t->kind == K_HOLE         ? &r->hole
                                                     : (t->rng >> 17) % 3 == 0 ? &r->hand
                                                                               : &r->echo),
                                 0);
            if (err) { /* -EMFILE and the like: answered, nothing to close */
                free(t->tcp);
                t->tcp = NULL;
                return MP_READY;
            }
            atomic_fetch_add(&r->opens, 1);
            t->step = 1;
        }
        if (t->step == 1) {
            if (mp_tcp_connect_poll(t->tcp, cx, &t->timer, t->deadline, &err) == MP_PENDING)
                return MP_PENDING;
            if (t->kind == K_HOLE && err != -ETIMEDOUT && err != 0)
                fail(r, "connect to the hole", t, err);
            if (err)
                return MP_READY;
            t->step = 2;
        }
        while (t->step == 2 && t->by_file) {
            off_t end = (off_t)(t - r->tasks + 1) * MSG;
            size_t sent;
            if (t->file_off == end) {
                t->step = 3;
                break;
            }
            if (mp_tcp_sendfile_poll(t->tcp, cx, r->file_fd, &t->file_off,
                                     (size_t)(end - t->file_off), &sent, &err) == MP_PENDING)
                return MP_PENDING;
            if (err)
                return MP_READY;
            if (sent == 0)
                fail(r, "sendfile found the end of the file", t, 0);
        }
        if (t->step == 2 && t->corked && !t->head_sent) {
            /* As a response head before its body: the rest of the write carries it. */
            if (mp_tcp_write_more_poll(t->tcp, cx, t->out, HEAD, &err) == MP_PENDING)
                return MP_PENDING;
            if (err)
                return MP_READY;
            t->head_sent = true;
        }
        if (t->step == 2) {
            size_t from = t->head_sent ? HEAD : 0;
            if (mp_tcp_write_poll(t->tcp, cx, t->out + from, MSG - from, &err) == MP_PENDING)
                return MP_PENDING;
            if (err)
                return MP_READY;
            t->step = 3;
            if (t->half_close) {
                /* The echo still comes back: the server reads the bytes, then EOF. */
                int rc = mp_tcp_shutdown(t->tcp);
                if (rc != 0 && rc != -ENOTCONN)
                    fail(r, "shutdown after a finished write", t, rc);
            }
        }
        while (t->got < MSG) {
            const char *d;
            size_t len;
            if (mp_tcp_read_poll(t->tcp, cx, &d, &len, &err) == MP_PENDING)
                return MP_PENDING;
            if (len == 0)
                return MP_READY; /* the server was shut down under us */
            size_t n = len < MSG - t->got ? len : MSG - t->got;
            memcpy(t->in + t->got, d, n);
            t->got += n;
            mp_tcp_consume(t->tcp, n);
        }
        if (memcmp(t->in, t->out, MSG) != 0)
            fail(r, "echo came back different", t, 0);
        atomic_fetch_add(&r->trips_ok, 1);
        return MP_READY;
    case K_RESOLVE:
        if (t->step == 0) {
            if ((err = mp_resolve_start(rt, &t->res, t->rng % 2 ? "localhost" : "127.0.0.1", "80",
                                        NULL)) != 0)
                return MP_READY;
            t->step = 1;
        }
        {
            struct addrinfo *ai;
            if (mp_resolve_poll(&t->res, cx, &t->timer, t->deadline, &ai, &err) == MP_PENDING)
                return MP_PENDING;
            if (err == 0 && !ai)
                fail(r, "resolve without a result", t, 0);
            if (ai)
                freeaddrinfo(ai);
        }
        return MP_READY;
    case K_UDP: {
        if (t->step == 0) {
            if (!sock_new(t, true))
                return MP_READY;
            t->step = 1;
        }
        mp_udp *u = &t->sock->u; /* a plain thread may close it: the polls say -EBADF */
        if (t->step == 1) {
            if (mp_udp_send_poll(u, cx, t->out, MSG, (struct sockaddr *)&r->udp_echo, &err) ==
                MP_PENDING)
                return MP_PENDING;
            if (err && err != -EBADF)
                fail(r, "UDP send", t, err);
            if (err)
                return MP_READY;
            t->step = 2;
        }
        size_t len;
        bool trunc;
        for (;;) {
            if (mp_udp_recv_poll(u, cx, t->in, MSG, &len, &trunc, NULL, &err) == MP_PENDING) {
                if (mp_timer_poll(&t->timer, t->deadline, cx) == MP_PENDING)
                    return MP_PENDING;
                return MP_READY; /* lost, or the server is gone: UDP */
            }
            if (err != 0 || (len == MSG && memcmp(t->in, t->out, MSG) == 0))
                break;
            /* Not ours: an echo for an earlier task's socket on this port, which is ignored as
             * a UDP client would; anything not shaped as some task's payload is corruption. */
            if (!payload_shaped(t->in, len) || memcmp(t->in, t->out, 10) == 0)
                fail(r, "UDP echo came back different", t, 0);
        }
        if (err != 0 && err != -EBADF)
            fail(r, "UDP receive", t, err);
        if (err == 0)
            atomic_fetch_add(&r->trips_ok, 1);
        return MP_READY;
    }
    case K_BLOCKING:
        if (t->step == 0) {
            if (mp_spawn_blocking(rt, blocking_fn, t, &t->job) != 0)
                return MP_READY;
            atomic_fetch_add(&r->jobs, 1);
            if (t->rng % 5 == 0)
                mp_task_cancel(t->job); /* may or may not have started: either is counted */
            t->step = 1;
        }
        {
            int res;
            if (mp_join_poll(t->job, cx, &res) == MP_PENDING)
                return MP_PENDING;
            t->job = NULL;
        }
        return MP_READY;
    case K_ACCEPT: {
        if (t->step == 0) {
            if (!sock_new(t, false))
                return MP_READY;
            t->step = 1;
        }
        mp_tcp c;
        if (mp_tcp_accept_poll(&t->sock->l, cx, &c, 0, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == 0)
            fail(r, "accepted on a listener nobody connects to", t, 0);
        else if (err != -EBADF)
            fail(r, "accept", t, err);
        return MP_READY;
    }
    }
    return MP_READY;
}

static iotask *io_new(io_run *r, uint64_t rng);

static mp_poll io_poll(mp_task *tk, mp_context *cx)
{
    iotask *t = mp_container_of(tk, iotask, task);
    if (atomic_fetch_add(&t->in_poll, 1) != 0)
        fail(t->r, "polled concurrently", t, 0);
    if (atomic_load(&t->done) || atomic_load(&t->cancels))
        fail(t->r, "polled after it finished", t, 0);
    mp_poll p = io_step(t, cx);
    if (p == MP_READY) {
        release_io(t);
        atomic_store(&t->done, 1);
        atomic_fetch_add(&t->r->finished, 1);
        /* Tasks spawn too (detached: counted by their own done/cancels/released). */
        iotask *n = t->rng % 4 == 0 ? io_new(t->r, test_rand(&t->rng) | 1) : NULL;
        if (n && mp_spawn(mp_runtime_current(), &n->task) == 0)
            atomic_fetch_add(&t->r->spawned, 1);
        else if (n)
            atomic_store(&n->done, -1);
    }
    atomic_fetch_sub(&t->in_poll, 1);
    atomic_fetch_add(&t->r->progress, 1);
    return p;
}

static void io_cancel(mp_task *tk)
{
    iotask *t = mp_container_of(tk, iotask, task);
    if (atomic_fetch_add(&t->cancels, 1) != 0 || atomic_load(&t->done))
        fail(t->r, "cancelled twice or after it finished", t, 0);
    mp_resolve_cancel(&t->res);
    if (t->job)
        mp_detach(t->job);
    t->job = NULL;
    release_io(t);
    atomic_fetch_add(&t->r->cancelled, 1);
}

static void io_release(mp_task *tk)
{
    iotask *t = mp_container_of(tk, iotask, task);
    if (atomic_fetch_add(&t->released, 1) != 0)
        fail(t->r, "released twice", t, 0);
    atomic_fetch_add(&t->r->released, 1);
}

static const mp_task_vtable io_vt = {io_poll, io_cancel, io_release};

static iotask *io_new(io_run *r, uint64_t rng)
{
    size_t i = atomic_fetch_add(&r->ntasks, 1);
    if (i >= MAX_IO) {
        atomic_fetch_sub(&r->ntasks, 1);
        return NULL;
    }
    iotask *t = &r->tasks[i];
    memset(t, 0, sizeof *t);
    t->r = r;
    t->rng = rng;
    t->kind = (int)((rng >> 8) % K_KINDS); /* rng is odd: its low bits are not random */
    for (int k = 0; k < MSG; k++)
        t->out[k] = (char)('a' + (rng >> (k % 48)) % 26);
    /* The task's index leads its payload: an echo meant for an earlier socket that had the
     * same port (UDP ports are reused) is told apart from corruption. */
    snprintf(t->out, 12, "T%09zu", i);
    t->out[10] = ':';
    if (t->kind == K_CONNECT && r->file_fd > 0 && (rng >> 20) % 2) {
        /* Written before the spawn that hands the task over, read by its sendfile. */
        t->by_file = pwrite(r->file_fd, t->out, MSG, (off_t)i * MSG) == MSG;
        t->file_off = (off_t)i * MSG;
    }
    t->corked = t->kind == K_CONNECT && !t->by_file && (rng >> 21) % 2;
    t->half_close = t->kind == K_CONNECT && (rng >> 22) % 4 == 0;
    mp_task_init(&t->task, &io_vt);
    return t;
}

/* The plain threads: spawn, and now and then cancel a task or close its socket under it. */
static void *io_spawner(void *arg)
{
    io_run *r = arg;
    uint64_t rng = r->seed ^ (uint64_t)pthread_self();
    size_t mine[64];
    size_t n = 0;
    while (!atomic_load(&r->stop)) {
        iotask *t = io_new(r, test_rand(&rng) | 1);
        if (!t)
            break;
        t->joinable = true;
        if (mp_spawn_joinable(r->rt, &t->task) != 0) {
            atomic_store(&t->done, -1);
            break; /* shutting down */
        }
        atomic_fetch_add(&r->spawned, 1);
        mine[n++ % 64] = (size_t)(t - r->tasks);
        iotask *v = &r->tasks[mine[test_rand(&rng) % (n < 64 ? n : 64)]];
        switch (test_rand(&rng) % 8) {
        case 0:
            mp_task_cancel(&v->task); /* its join handle is held by the run until the end */
            break;
        case 1: { /* close its socket from this thread, as another part of a program may */
            atomic_fetch_add(&r->closing, 1);
            sock *k = atomic_load(&r->no_close) ? NULL : atomic_exchange(&v->shut, NULL);
            if (k)
                sock_close(k);
            atomic_fetch_sub(&r->closing, 1);
            break;
        }
        default:
            break;
        }
        usleep((useconds_t)(test_rand(&rng) % 300));
    }
    return NULL;
}

/* The servers: TCP echo on a listener, UDP echo, as tasks of the run (not counted as its
 * tasks: they end with the shutdown). */
typedef struct echo {
    mp_task task;
    mp_tcp_listener *l;
    mp_tcp *c;
    mp_udp *u;
    char buf[MSG * 4];
    struct sockaddr_storage from;
    size_t len, pending;
    const char *data;
    io_run *r;
} echo;

static mp_poll conn_poll(mp_task *tk, mp_context *cx)
{
    echo *e = mp_container_of(tk, echo, task);
    for (;;) {
        int err;
        if (e->pending) {
            if (mp_tcp_write_poll(e->c, cx, e->data, e->pending, &err) == MP_PENDING)
                return MP_PENDING;
            mp_tcp_consume(e->c, e->pending);
            e->pending = 0;
            if (err)
                break;
        }
        if (mp_tcp_read_poll(e->c, cx, &e->data, &e->pending, &err) == MP_PENDING)
            return MP_PENDING;
        if (e->pending == 0)
            break;
    }
    mp_tcp_close(e->c, tcp_closed);
    e->c = NULL;
    return MP_READY;
}

static void echo_cancel(mp_task *tk)
{
    echo *e = mp_container_of(tk, echo, task);
    if (e->c)
        mp_tcp_close(e->c, tcp_closed);
    e->c = NULL;
}

static void echo_release(mp_task *tk)
{
    free(mp_container_of(tk, echo, task));
}

static const mp_task_vtable conn_vt = {conn_poll, echo_cancel, echo_release};

static mp_poll acceptor_poll(mp_task *tk, mp_context *cx)
{
    echo *e = mp_container_of(tk, echo, task);
    for (;;) {
        mp_tcp *c = malloc(sizeof *c);
        int err;
        if (mp_tcp_accept_poll(e->l, cx, c, 0, &err) == MP_PENDING) {
            free(c);
            return MP_PENDING;
        }
        if (err) {
            free(c);
            if (err == -EBADF)
                return MP_READY;
            continue;
        }
        atomic_fetch_add(&e->r->opens, 1);
        echo *conn = calloc(1, sizeof *conn);
        conn->c = c;
        conn->r = e->r;
        mp_task_init(&conn->task, &conn_vt);
        if (mp_spawn(mp_runtime_current(), &conn->task) != 0) {
            echo_cancel(&conn->task);
            free(conn);
        }
    }
}

static const mp_task_vtable acceptor_vt = {.poll = acceptor_poll};

/* A server that accepts itself, from a plain thread: each socket handed to mp_tcp_open() (any
 * thread), whose refusal once the runtime shuts down closes the fd and leaves a stream to close
 * as any. */
static void *hand_acceptor(void *arg)
{
    io_run *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd p = {.fd = r->hand_fd, .events = POLLIN};
        if (poll(&p, 1, 10) != 1)
            continue;
        int fd = accept4(r->hand_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        mp_tcp *c = malloc(sizeof *c);
        int rc = mp_tcp_open(r->rt, c, fd, 0);
        atomic_fetch_add(&r->opens, 1);
        if (rc != 0) {
            if (rc != -ESHUTDOWN)
                fail(r, "mp_tcp_open", NULL, rc);
            if (mp_tcp_close(c, tcp_closed) != -EBADF)
                fail(r, "close after a refused open", NULL, rc);
            continue;
        }
        echo *conn = calloc(1, sizeof *conn);
        conn->c = c;
        conn->r = r;
        mp_task_init(&conn->task, &conn_vt);
        if (mp_spawn(r->rt, &conn->task) != 0) {
            echo_cancel(&conn->task);
            free(conn);
        }
    }
    return NULL;
}

/* The servers' sockets are freed at the end of the run, once their tasks are joined: the
 * callback may come while the task that polls the socket has yet to see -EBADF. */
static void server_lst_closed(mp_tcp_listener *l)
{
    (void)l;
    atomic_fetch_add(&closing_run->closes, 1);
}

static void server_udp_closed(mp_udp *u)
{
    (void)u;
    atomic_fetch_add(&closing_run->closes, 1);
}

static mp_poll udp_echo_poll(mp_task *tk, mp_context *cx)
{
    echo *e = mp_container_of(tk, echo, task);
    for (;;) {
        int err;
        if (e->len == 0) {
            bool trunc;
            if (mp_udp_recv_poll(e->u, cx, e->buf, sizeof e->buf, &e->pending, &trunc, &e->from,
                                 &err) == MP_PENDING)
                return MP_PENDING;
            if (err == -EBADF)
                return MP_READY;
            e->len = err ? 0 : e->pending;
        }
        if (e->len) {
            if (mp_udp_send_poll(e->u, cx, e->buf, e->len, (struct sockaddr *)&e->from, &err) ==
                MP_PENDING)
                return MP_PENDING;
            e->len = 0;
        }
    }
}

static const mp_task_vtable udp_echo_vt = {.poll = udp_echo_poll};

static void progress_done(io_run *r)
{
    atomic_store(&r->progress, UINT64_MAX);
}

static void *io_watchdog(void *arg)
{
    io_run *r = arg;
    long stuck_ms = test_env_long("MP_STRESS_STUCK_S", 20) * 1000, quiet = 0;
    uint64_t last = UINT64_MAX;
    while (atomic_load(&r->progress) != UINT64_MAX) {
        usleep(10000);
        uint64_t p = atomic_load(&r->progress);
        quiet = p == last ? quiet + 10 : 0;
        last = p;
        if (quiet < stuck_ms)
            continue;
        fprintf(stderr, "api_stress_io: stuck (MP_TEST_SEED=%" PRIu64 ", %u workers)\n", r->seed,
                r->workers);
        size_t n = atomic_load(&r->ntasks);
        for (size_t i = 0, shown = 0; i < n && shown < 10; i++) {
            iotask *t = &r->tasks[i];
            if (!atomic_load(&t->done) && !atomic_load(&t->cancels) && ++shown)
                fprintf(stderr, "  task %zu %s step %d state %#" PRIx64 "\n", i, kind_name[t->kind],
                        t->step, (uint64_t)atomic_load(&t->task.state));
        }
        abort();
    }
    return NULL;
}

/* A listening socket whose accept queue is full and never drained: connections to it stay in
 * progress (loopback only). */
static int hole_open(struct sockaddr_in *addr, int fill[8])
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    *addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof *addr;
    cr_assert_eq(bind(lfd, (struct sockaddr *)addr, sizeof *addr), 0);
    cr_assert_eq(listen(lfd, 0), 0);
    getsockname(lfd, (struct sockaddr *)addr, &al);
    for (int i = 0; i < 8; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[i], (struct sockaddr *)addr, sizeof *addr);
    }
    return lfd;
}

static void io_run_one(unsigned workers, uint64_t seed)
{
    uint64_t rng = seed;
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    cfg.shutdown_mode = test_rand(&rng) % 2 ? MP_SHUTDOWN_DRAIN : MP_SHUTDOWN_CANCEL;
    cfg.drain_timeout_ms = 30000; /* finite work: a drain that needs this long is a bug */
    cfg.blocking_threads = 1 + (unsigned)(test_rand(&rng) % 6);
    static io_run r;
    memset(&r, 0, sizeof r);
    r.seed = seed;
    r.workers = workers;
    r.mode = cfg.shutdown_mode;
    r.tasks = calloc(MAX_IO, sizeof *r.tasks);
    char path[] = "/tmp/mp-stress-io-XXXXXX";
    r.file_fd = mkstemp(path);
    cr_assert_geq(r.file_fd, 0);
    unlink(path);
    closing_run = &r;
    r.rt = test_runtime_with(&cfg);
    pthread_t wd;
    pthread_create(&wd, NULL, io_watchdog, &r);

    /* The servers. */
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    echo *acc = calloc(1, sizeof *acc), *ue = calloc(1, sizeof *ue);
    acc->r = ue->r = &r;
    acc->l = malloc(sizeof *acc->l);
    ue->u = malloc(sizeof *ue->u);
    cr_assert_eq(mp_tcp_listen(r.rt, acc->l, (struct sockaddr *)&lo, 0, 0), 0);
    cr_assert_eq(mp_udp_bind(r.rt, ue->u, (struct sockaddr *)&lo, 0), 0);
    atomic_fetch_add(&r.opens, 2);
    struct sockaddr_storage ss;
    mp_tcp_listener_addr(acc->l, &ss);
    r.echo = *(struct sockaddr_in *)&ss;
    mp_udp_local_addr(ue->u, &ss);
    r.udp_echo = *(struct sockaddr_in *)&ss;
    int fill[8], hole = hole_open(&r.hole, fill);
    r.hand_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t hl = sizeof r.hand;
    cr_assert(r.hand_fd >= 0 && bind(r.hand_fd, (struct sockaddr *)&lo, sizeof lo) == 0 &&
              listen(r.hand_fd, 128) == 0 &&
              getsockname(r.hand_fd, (struct sockaddr *)&r.hand, &hl) == 0);
    pthread_t hand;
    pthread_create(&hand, NULL, hand_acceptor, &r);
    mp_task_init(&acc->task, &acceptor_vt);
    mp_task_init(&ue->task, &udp_echo_vt);
    cr_assert_eq(mp_spawn_joinable(r.rt, &acc->task), 0);
    cr_assert_eq(mp_spawn_joinable(r.rt, &ue->task), 0);

    pthread_t sp[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&sp[i], NULL, io_spawner, &r);
    long ms = test_env_long("MP_STRESS_MS", 150);
    for (long t = 0; t < ms && !atomic_load(&r.failed); t += 10)
        usleep(10000);
    /* From here plain threads close nothing (a close racing with the loop's own close at the
     * end of shutdown is not what this run checks); they go on spawning and cancelling. */
    atomic_store(&r.no_close, true);
    while (atomic_load(&r.closing) != 0)
        usleep(100);
    if (r.mode == MP_SHUTDOWN_DRAIN) {
        /* Draining finite work: spawners stop, the listeners and sockets that tasks wait on
         * without end are closed (their tasks see -EBADF), and the servers stop. */
        atomic_store(&r.stop, true);
        for (int i = 0; i < 2; i++)
            pthread_join(sp[i], NULL);
        pthread_join(hand, NULL);
        close(r.hand_fd); /* what waits in its queue is reset, as a closed listener's */
        r.hand_fd = -1;
        for (size_t i = 0; i < atomic_load(&r.ntasks); i++) {
            sock *k = atomic_exchange(&r.tasks[i].shut, NULL);
            if (k)
                sock_close(k);
        }
        cr_assert_eq(mp_tcp_listener_close(acc->l, server_lst_closed), 0);
        cr_assert_eq(mp_udp_close(ue->u, server_udp_closed), 0);
        int rc = mp_runtime_shutdown(r.rt);
        cr_assert_eq(rc, 0, "drain: %d (MP_TEST_SEED=%" PRIu64 ")", rc, seed);
    } else {
        cr_assert_eq(mp_runtime_shutdown(r.rt), 0);
        atomic_store(&r.stop, true);
        for (int i = 0; i < 2; i++)
            pthread_join(sp[i], NULL);
        pthread_join(hand, NULL); /* its opens after the shutdown were refused, and closed */
        /* The servers' sockets were closed by the shutdown; ours to count. */
        cr_assert_eq(mp_tcp_listener_close(acc->l, NULL), -ESHUTDOWN);
        cr_assert_eq(mp_udp_close(ue->u, NULL), -ESHUTDOWN);
        atomic_fetch_add(&r.closes, 2);
    }
    /* Every joinable handle: its result agrees with what happened to the task. */
    size_t n = atomic_load(&r.ntasks);
    mp_join(&acc->task);
    mp_join(&ue->task);
    for (size_t i = 0; i < n; i++) {
        iotask *t = &r.tasks[i];
        int done = atomic_load(&t->done), cancels = atomic_load(&t->cancels);
        if (done == -1)
            continue;
        cr_assert((done == 1) + cancels == 1,
                  "task %zu (%s): done %d cancels %d (seed %" PRIu64 ")", i, kind_name[t->kind],
                  done, cancels, seed);
        if (t->joinable) {
            int rc = mp_join(&t->task);
            cr_assert(rc == (done == 1 ? 0 : -ECANCELED), "task %zu joined %d, done %d", i, rc,
                      done);
        }
    }
    progress_done(&r);
    pthread_join(wd, NULL);
    mp_runtime_free(r.rt); /* runs the close callbacks still due */
    cr_assert_not(atomic_load(&r.failed), "%s", r.why);
    for (size_t i = 0; i < n; i++) {
        iotask *t = &r.tasks[i];
        if (atomic_load(&t->done) == -1)
            continue;
        cr_assert_eq(atomic_load(&t->released), 1, "task %zu (%s) released %d times", i,
                     kind_name[t->kind], atomic_load(&t->released));
    }
    cr_assert_eq(atomic_load(&r.finished) + atomic_load(&r.cancelled), atomic_load(&r.spawned),
                 "seed %" PRIu64, seed);
    cr_assert_eq(atomic_load(&r.released), atomic_load(&r.spawned));
    cr_assert_eq(atomic_load(&r.opens), atomic_load(&r.closes),
                 "sockets opened %ld, closed %ld (seed %" PRIu64 ")", atomic_load(&r.opens),
                 atomic_load(&r.closes), seed);
    cr_assert_geq(atomic_load(&r.jobs), atomic_load(&r.jobs_ran));
    if (getenv("MP_STRESS_VERBOSE"))
        fprintf(stderr,
                "api_stress_io: %u workers, %s: spawned %zu finished %zu cancelled %zu, sockets "
                "%ld, round trips %ld, jobs %ld (ran %ld)\n",
                workers, r.mode == MP_SHUTDOWN_DRAIN ? "drain" : "cancel", atomic_load(&r.spawned),
                atomic_load(&r.finished), atomic_load(&r.cancelled), atomic_load(&r.opens),
                atomic_load(&r.trips_ok), atomic_load(&r.jobs), atomic_load(&r.jobs_ran));
    for (int i = 0; i < 8; i++)
        close(fill[i]);
    close(hole);
    if (r.hand_fd >= 0)
        close(r.hand_fd);
    free(acc->l);
    free(ue->u);
    free(acc);
    free(ue);
    free(r.tasks);
    close(r.file_fd);
}

static void io_mixed(const char *dflt)
{
    const char *s = getenv("MP_STRESS_WORKERS");
    if (!s || !*s)
        s = dflt;
    long rounds = test_env_long("MP_STRESS_ROUNDS", 1);
    uint64_t seed = test_seed();
    for (long round = 0; round < rounds; round++) {
        for (const char *p = s; *p;) {
            char *end;
            unsigned a = (unsigned)strtoul(p, &end, 10), b = a;
            if (*end == '-')
                b = (unsigned)strtoul(end + 1, &end, 10);
            for (unsigned w = a; w <= b; w++)
                io_run_one(w, seed + (uint64_t)round * 1000 + w);
            p = *end ? end + 1 : end;
        }
    }
}

Test(api_stress_io, mixed_small_worker_counts, .timeout = 600)
{
    io_mixed("1,2,3");
}

Test(api_stress_io, mixed_large_worker_counts, .timeout = 600)
{
    io_mixed("8,16");
}

/* Descriptor exhaustion. An acceptor that backs off on a timer when accept fails for want of
 * descriptors, echo connections, and clients started while the limit is down: each client
 * either fails at once in mp_tcp_connect (-EMFILE) or, connected in the kernel but not yet
 * accepted, is served once the limit is back. The acceptor's polls are counted: a busy loop
 * would make hundreds of thousands in the time the limit is down. */
typedef struct fd_acceptor {
    mp_task task;
    mp_tcp_listener l;
    mp_timer pause;
    uint64_t resume;
    bool pausing;
    _Atomic long polls, emfile, accepted;
    io_run *r;
} fd_acceptor;

static mp_poll fd_acceptor_poll(mp_task *tk, mp_context *cx)
{
    fd_acceptor *a = mp_container_of(tk, fd_acceptor, task);
    atomic_fetch_add(&a->polls, 1);
    for (;;) {
        if (a->pausing && mp_timer_poll(&a->pause, a->resume, cx) == MP_PENDING)
            return MP_PENDING;
        a->pausing = false;
        mp_tcp *c = malloc(sizeof *c);
        int err;
        if (mp_tcp_accept_poll(&a->l, cx, c, 0, &err) == MP_PENDING) {
            free(c);
            return MP_PENDING;
        }
        if (err == -EMFILE || err == -ENFILE) {
            free(c);
            atomic_fetch_add(&a->emfile, 1);
            a->pausing = true;
            a->resume = mp_now_ms() + 5;
            continue;
        }
        if (err) {
            free(c);
            mp_timer_cancel(&a->pause);
            return MP_READY; /* -EBADF: closed */
        }
        atomic_fetch_add(&a->accepted, 1);
        atomic_fetch_add(&a->r->opens, 1);
        echo *conn = calloc(1, sizeof *conn);
        conn->c = c;
        conn->r = a->r;
        mp_task_init(&conn->task, &conn_vt);
        if (mp_spawn(mp_runtime_current(), &conn->task) != 0) {
            echo_cancel(&conn->task);
            free(conn);
        }
    }
}

static const mp_task_vtable fd_acceptor_vt = {.poll = fd_acceptor_poll};

static void fd_listener_closed(mp_tcp_listener *l)
{
    (void)l;
    atomic_fetch_add(&closing_run->closes, 1);
}

Test(api_stress_io, descriptor_exhaustion_is_an_error_never_a_busy_loop, .timeout = 120)
{
    static io_run r;
    memset(&r, 0, sizeof r);
    r.seed = test_seed();
    r.tasks = calloc(MAX_IO, sizeof *r.tasks);
    char path[] = "/tmp/mp-stress-io-XXXXXX";
    r.file_fd = mkstemp(path);
    cr_assert_geq(r.file_fd, 0);
    unlink(path);
    closing_run = &r;
    r.rt = test_runtime(2);
    fd_acceptor a = {.r = &r};
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(r.rt, &a.l, (struct sockaddr *)&lo, 128, 0), 0);
    atomic_fetch_add(&r.opens, 1);
    struct sockaddr_storage ss;
    mp_tcp_listener_addr(&a.l, &ss);
    r.echo = *(struct sockaddr_in *)&ss;
    mp_timer_init(&a.pause, r.rt);
    mp_task_init(&a.task, &fd_acceptor_vt);
    cr_assert_eq(mp_spawn_joinable(r.rt, &a.task), 0);

    /* The limit: what is open now plus a few, for the clients' first sockets. */
    struct rlimit old;
    getrlimit(RLIMIT_NOFILE, &old);
    int top = dup(0);
    close(top);
    struct rlimit low = {.rlim_cur = (rlim_t)top + 6, .rlim_max = old.rlim_max};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    enum { CLIENTS = 40 };
    for (int i = 0; i < CLIENTS; i++) {
        iotask *t = io_new(&r, ((uint64_t)i << 8 | 1) * 2654435761u);
        t->kind = K_CONNECT;
        t->joinable = true;
        cr_assert_eq(mp_spawn_joinable(r.rt, &t->task), 0);
        atomic_fetch_add(&r.spawned, 1);
    }
    usleep(200000);
    long polls_low = atomic_load(&a.polls);
    setrlimit(RLIMIT_NOFILE, &old);
    for (size_t i = 0; i < CLIENTS; i++)
        cr_assert_eq(mp_join(&r.tasks[i].task), 0);
    cr_assert_eq(mp_tcp_listener_close(&a.l, fd_listener_closed), 0);
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(mp_runtime_shutdown(r.rt), 0);
    mp_runtime_free(r.rt);
    long ok = atomic_load(&r.trips_ok), opened = 0;
    for (size_t i = 0; i < CLIENTS; i++)
        opened += r.tasks[i].step > 0;
    /* Every client that got a socket was served; the others were told at once. */
    cr_assert_eq(ok, opened, "%ld of %ld connected clients served", ok, opened);
    cr_assert_eq(atomic_load(&r.opens), atomic_load(&r.closes));
    cr_assert_lt(polls_low, 20000, "the acceptor spun: %ld polls while descriptors were out",
                 polls_low);
    if (getenv("MP_STRESS_VERBOSE"))
        fprintf(stderr,
                "fd exhaustion: %ld clients connected of %d, accept -EMFILE %ld times, %ld "
                "acceptor polls while the limit was down\n",
                opened, CLIENTS, atomic_load(&a.emfile), polls_low);
    cr_assert_not(atomic_load(&r.failed), "%s", r.why);
    free(r.tasks);
}
