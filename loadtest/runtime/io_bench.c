/* io_bench.c: libmagpie's I/O and blocking pool, twin of loadtest/runtime/tokio/src/io.rs.
 *
 *   magpie-io-bench --workers N --rounds R [--warmup K] [--only NAME]
 *
 * prints one line per workload: "<name> <median_ns_per_op> <median_ns_total>", the median of R
 * timed rounds after K untimed ones (default 3), each workload on a fresh runtime. A round is
 * one task doing OPS operations one after another (latency, not throughput), spawned from the
 * main thread and joined there:
 *   tcp_connect_rtt     connect to a loopback echo server of the same runtime, send 64 bytes,
 *                       read them back, read the server's close, close (the server closes
 *                       first, so TIME_WAIT stays on its side and client ports do not run out)
 *   udp_ping_pong       64 bytes to a UDP echo task of the same runtime and back
 *   spawn_blocking_rtt  a blocking job that does nothing, awaited
 *   file_read_4k        4 KiB at offset 0 of a file in the page cache (mp_file_read_poll)
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <magpie.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TCP_OPS = 200, UDP_OPS = 2000, BLOCKING_OPS = 2000, FILE_OPS = 10000, MSG = 64 };

static mp_runtime *rt;
static struct sockaddr_in tcp_addr, udp_addr;
static int file_fd;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "magpie-io-bench: %s: %s\n", what, strerror(-err));
    exit(4);
}

/* The servers. A TCP connection: read 64 bytes, write them back, close. */
typedef struct srv_conn {
    mp_task task;
    mp_tcp tcp;
    char buf[MSG];
    size_t got;
    _Atomic int refs; /* the task's (until released) and the stream's (until closed) */
} srv_conn;

static void srv_conn_unref(srv_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        free(c);
}

static void srv_conn_closed(mp_tcp *t)
{
    srv_conn_unref(mp_container_of(t, srv_conn, tcp));
}

static void srv_conn_release(mp_task *t)
{
    srv_conn_unref(mp_container_of(t, srv_conn, task));
}

static mp_poll srv_conn_poll(mp_task *t, mp_context *cx)
{
    srv_conn *c = mp_container_of(t, srv_conn, task);
    int err = 0;
    while (c->got < MSG) {
        const char *d;
        size_t len;
        if (mp_tcp_read_poll(&c->tcp, cx, &d, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0)
            break;
        size_t n = len < MSG - c->got ? len : MSG - c->got;
        memcpy(c->buf + c->got, d, n);
        c->got += n;
        mp_tcp_consume(&c->tcp, len);
    }
    if (c->got == MSG && mp_tcp_write_poll(&c->tcp, cx, c->buf, MSG, &err) == MP_PENDING)
        return MP_PENDING;
    mp_tcp_close(&c->tcp, srv_conn_closed);
    return MP_READY;
}

static const mp_task_vtable srv_conn_vt = {.poll = srv_conn_poll, .release = srv_conn_release};

typedef struct acceptor {
    mp_task task;
    mp_tcp_listener l;
    srv_conn *next;
} acceptor;

static mp_poll acceptor_poll(mp_task *t, mp_context *cx)
{
    acceptor *a = mp_container_of(t, acceptor, task);
    for (;;) {
        if (!a->next)
            a->next = calloc(1, sizeof *a->next);
        int err;
        if (mp_tcp_accept_poll(&a->l, cx, &a->next->tcp, 4096, &err) == MP_PENDING)
            return MP_PENDING;
        if (err)
            return MP_READY;
        mp_tcp_set_nodelay(&a->next->tcp, true);
        atomic_init(&a->next->refs, 2);
        mp_task_init(&a->next->task, &srv_conn_vt);
        mp_spawn(rt, &a->next->task);
        a->next = NULL;
    }
}

static const mp_task_vtable acceptor_vt = {.poll = acceptor_poll};

typedef struct udp_echo {
    mp_task task;
    mp_udp u;
    char buf[2048];
    size_t len;
    struct sockaddr_storage from;
} udp_echo;

static mp_poll udp_echo_poll(mp_task *t, mp_context *cx)
{
    udp_echo *e = mp_container_of(t, udp_echo, task);
    for (;;) {
        int err = 0;
        bool trunc;
        if (e->len == 0 && mp_udp_recv_poll(&e->u, cx, e->buf, sizeof e->buf, &e->len, &trunc,
                                            &e->from, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EBADF)
            return MP_READY; /* closed */
        if (e->len && mp_udp_send_poll(&e->u, cx, e->buf, e->len, (struct sockaddr *)&e->from,
                                       &err) == MP_PENDING)
            return MP_PENDING;
        e->len = 0;
    }
}

static const mp_task_vtable udp_echo_vt = {.poll = udp_echo_poll};

/* The clients: one task per round, OPS operations in a row. */
typedef struct client {
    mp_task task;
    int kind, ops, step;
    mp_tcp *tcp;
    mp_udp u;
    mp_file_op fop;
    mp_task *job;
    char out[MSG], in[4096];
    size_t got;
} client;

enum { TCP, UDP, BLOCKING, FILE_READ };

static void client_tcp_closed(mp_tcp *t)
{
    free(t);
}

static _Atomic bool udp_closed;
static void client_udp_closed(mp_udp *u)
{
    (void)u;
    atomic_store(&udp_closed, true);
}

static void nothing(void *arg)
{
    (void)arg;
}

static mp_poll client_poll(mp_task *t, mp_context *cx)
{
    client *c = mp_container_of(t, client, task);
    int err = 0;
    for (; c->ops > 0; c->ops--, c->step = 0, c->got = 0) {
        switch (c->kind) {
        case TCP:
            if (c->step == 0) {
                c->tcp = malloc(sizeof *c->tcp);
                if ((err = mp_tcp_connect(rt, c->tcp, (struct sockaddr *)&tcp_addr, 4096)))
                    die("connect", err);
                mp_tcp_set_nodelay(c->tcp, true);
                c->step = 1;
            }
            if (c->step == 1) {
                if (mp_tcp_connect_poll(c->tcp, cx, NULL, 0, &err) == MP_PENDING)
                    return MP_PENDING;
                if (err)
                    die("connect_poll", err);
                c->step = 2;
            }
            if (c->step == 2) {
                if (mp_tcp_write_poll(c->tcp, cx, c->out, MSG, &err) == MP_PENDING)
                    return MP_PENDING;
                c->step = 3;
            }
            for (;;) { /* the echo, then the server's close */
                const char *d;
                size_t len;
                if (mp_tcp_read_poll(c->tcp, cx, &d, &len, &err) == MP_PENDING)
                    return MP_PENDING;
                if (len == 0)
                    break;
                c->got += len;
                mp_tcp_consume(c->tcp, len);
            }
            if (c->got != MSG)
                die("echo", -EPROTO);
            mp_tcp_close(c->tcp, client_tcp_closed);
            break;
        case UDP: {
            if (c->step == 0) {
                if (mp_udp_send_poll(&c->u, cx, c->out, MSG, NULL, &err) == MP_PENDING)
                    return MP_PENDING;
                c->step = 1;
            }
            size_t len;
            bool trunc;
            if (mp_udp_recv_poll(&c->u, cx, c->in, sizeof c->in, &len, &trunc, NULL, &err) ==
                MP_PENDING)
                return MP_PENDING;
            if (err || len != MSG)
                die("udp", err ? err : -EPROTO);
            break;
        }
        case BLOCKING:
            if (c->step == 0) {
                if ((err = mp_spawn_blocking(rt, nothing, NULL, &c->job)))
                    die("spawn_blocking", err);
                c->step = 1;
            }
            if (mp_join_poll(c->job, cx, &err) == MP_PENDING)
                return MP_PENDING;
            break;
        case FILE_READ: {
            size_t n;
            if (mp_file_read_poll(rt, &c->fop, cx, file_fd, c->in, 4096, 0, &n, &err) == MP_PENDING)
                return MP_PENDING;
            if (err || n != 4096)
                die("read", err ? err : -EIO);
            break;
        }
        }
    }
    return MP_READY;
}

static const mp_task_vtable client_vt = {.poll = client_poll};

static const struct {
    const char *name;
    int kind, ops;
} workloads[] = {
    {"tcp_connect_rtt", TCP, TCP_OPS},
    {"udp_ping_pong", UDP, UDP_OPS},
    {"spawn_blocking_rtt", BLOCKING, BLOCKING_OPS},
    {"file_read_4k", FILE_READ, FILE_OPS},
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    unsigned workers = 2;
    int rounds = 20, warmup = 3;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
            workers = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: magpie-io-bench --workers N --rounds R [--warmup K] "
                            "[--only NAME]\n");
            return 2;
        }
    }
    if (workers == 0 || rounds <= 0 || warmup < 0)
        return 2;
    char path[] = "/tmp/magpie-io-bench-XXXXXX";
    file_fd = mkstemp(path);
    char page[4096];
    memset(page, 'x', sizeof page);
    if (file_fd < 0 || write(file_fd, page, sizeof page) != (ssize_t)sizeof page)
        die("temporary file", -errno);
    unlink(path);
    for (size_t w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        if (only && strcmp(only, workloads[w].name) != 0)
            continue;
        mp_config cfg;
        mp_config_init(&cfg);
        cfg.workers = workers;
        int rc = mp_runtime_new(&rt, &cfg);
        if (rc)
            die("runtime", rc);
        struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        struct sockaddr_storage ss;
        static acceptor a;
        static udp_echo ue;
        memset(&a, 0, sizeof a);
        memset(&ue, 0, sizeof ue);
        if ((rc = mp_tcp_listen(rt, &a.l, (struct sockaddr *)&lo, 0, 0)))
            die("listen", rc);
        mp_tcp_listener_addr(&a.l, &ss);
        tcp_addr = *(struct sockaddr_in *)&ss;
        if ((rc = mp_udp_bind(rt, &ue.u, (struct sockaddr *)&lo, 0)))
            die("udp bind", rc);
        mp_udp_local_addr(&ue.u, &ss);
        udp_addr = *(struct sockaddr_in *)&ss;
        mp_task_init(&a.task, &acceptor_vt);
        mp_task_init(&ue.task, &udp_echo_vt);
        mp_spawn(rt, &a.task);
        mp_spawn(rt, &ue.task);
        uint64_t *ns = calloc((size_t)rounds, sizeof *ns);
        for (int r = -warmup; r < rounds; r++) {
            static client c;
            memset(&c, 0, sizeof c);
            c.kind = workloads[w].kind;
            c.ops = workloads[w].ops;
            memset(c.out, 'p', MSG);
            if (c.kind == UDP && ((rc = mp_udp_bind(rt, &c.u, (struct sockaddr *)&lo, 0)) ||
                                  (rc = mp_udp_connect(&c.u, (struct sockaddr *)&udp_addr))))
                die("udp client", rc);
            mp_task_init(&c.task, &client_vt);
            uint64_t t0 = now_ns();
            mp_spawn_joinable(rt, &c.task);
            mp_join(&c.task);
            uint64_t t1 = now_ns();
            if (r >= 0)
                ns[r] = t1 - t0;
            if (c.kind == UDP) { /* the round's socket; its storage is c, reused next round */
                atomic_store(&udp_closed, false);
                mp_udp_close(&c.u, client_udp_closed);
                while (!atomic_load(&udp_closed))
                    usleep(100);
            }
        }
        qsort(ns, (size_t)rounds, sizeof *ns, cmp_u64);
        double med = rounds % 2 ? (double)ns[rounds / 2]
                                : ((double)ns[rounds / 2 - 1] + (double)ns[rounds / 2]) / 2;
        printf("%s %.1f %.0f\n", workloads[w].name, med / workloads[w].ops, med);
        fflush(stdout);
        free(ns);
        mp_tcp_listener_close(&a.l, NULL);
        mp_udp_close(&ue.u, NULL);
        mp_runtime_free(rt);
        free(a.next);
    }
    close(file_fd);
    return 0;
}
