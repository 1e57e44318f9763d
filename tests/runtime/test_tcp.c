/* Tests of runtime/src/tcp.c: echo tasks on real loopback sockets. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include "internal.h"
#include "task_echo.h"
#include "test_net.h"
#include "test_util.h"

/* A connection: the stream and the task that serves it, freed when both are done. */
typedef struct conn {
    mp_tcp tcp;
    mp_task task;
    _Atomic int refs;
    int mode; /* MODE_ECHO, MODE_SEND: write `send_left` bytes and ignore input, MODE_SENDFILE:
                 send `send_left` bytes of the server's file with mp_tcp_sendfile_poll */
    size_t send_left;
    off_t file_off;
    size_t pending; /* bytes of the read view being echoed */
    int write_err;
    bool closing;
} conn;

enum { MODE_ECHO, MODE_SEND, MODE_SENDFILE };

typedef struct server {
    mp_runtime *rt;
    uv_tcp_t listener;
    /* open_path: the server accepts itself (accept4 on a socket the loop polls) and serves
     * each connection through mp_tcp_open(), as magpied does, instead of mp_tcp_accept(). */
    bool open_path;
    uv_poll_t lpoll;
    int lfd;
    mp_loop_cmd cmd;
    _Atomic int port;
    int mode;
    size_t send_bytes;
    size_t bufsize;
    _Atomic int accepted, closed, write_errors, interrupts, sendfile_waits, sendfile_errors;
    _Atomic int misuse_refused; /* conn_finish's second close and fileno saw -EBADF */
    /* mp_tcp_read_time() of the last read of any connection: here, not in the connection,
     * which its task frees once the client's close reaches it (an order the client's thread
     * cannot see). */
    _Atomic uint64_t read_ns;
    conn *_Atomic last;
} server;

static server *S;
static int sendfile_fd; /* MODE_SENDFILE: set before the server's runtime starts */
/* Set before the server's runtime starts: at accept, wait for the client's first bytes and
 * report the socket writable to the stream (as the loop does at registration) before its
 * task's first read. */
static bool write_event_first;

static void conn_unref(conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        atomic_fetch_add(&S->closed, 1);
        free(c);
    }
}

static void on_closed(mp_tcp *t)
{
    conn_unref(mp_container_of(t, conn, tcp));
}

static mp_poll conn_finish(conn *c)
{
    c->closing = true;
    cr_assert_geq(mp_tcp_fileno(&c->tcp), 0);
    cr_assert_eq(mp_tcp_close(&c->tcp, on_closed), 0);
    /* Misuse is an error, not an abort: the stream is closing already. */
    if (mp_tcp_close(&c->tcp, on_closed) == -EALREADY && mp_tcp_fileno(&c->tcp) == -EBADF)
        atomic_fetch_add(&S->misuse_refused, 1);
    return MP_READY;
}

static mp_poll conn_poll(mp_task *t, mp_context *cx)
{
    conn *c = mp_container_of(t, conn, task);
    static char blob[65536];
    for (;;) {
        const char *data;
        size_t len;
        int err;
        if (c->mode == MODE_SENDFILE) {
            size_t sent;
            if (c->send_left == 0)
                return conn_finish(c);
            if (mp_tcp_sendfile_poll(&c->tcp, cx, sendfile_fd, &c->file_off, c->send_left, &sent,
                                     &err) == MP_PENDING) {
                atomic_fetch_add(&S->sendfile_waits, 1);
                return MP_PENDING;
            }
            if (err != 0 || sent == 0) {
                atomic_fetch_add(&S->sendfile_errors, 1);
                return conn_finish(c);
            }
            c->send_left -= sent;
            continue;
        }
        if (c->mode == MODE_SEND) {
            if (c->send_left == 0)
                return conn_finish(c);
            size_t n = c->send_left < sizeof blob ? c->send_left : sizeof blob;
            if (mp_tcp_write_poll(&c->tcp, cx, blob, n, &err) == MP_PENDING)
                return MP_PENDING;
            if (err != 0) {
                atomic_fetch_add(&S->write_errors, 1);
                return conn_finish(c);
            }
            c->send_left -= n;
            continue;
        }
        if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0 && err == -EINTR)
            atomic_fetch_add(&S->interrupts, 1);
        if (len == 0)
            return conn_finish(c); /* EOF, error, or interrupted */
        /* Before the echo goes out: the client sees it once it has its bytes back. */
        atomic_store(&S->read_ns, mp_tcp_read_time(&c->tcp));
        if (mp_tcp_write_poll(&c->tcp, cx, data, len, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0) {
            atomic_fetch_add(&S->write_errors, 1);
            return conn_finish(c);
        }
        mp_tcp_consume(&c->tcp, len);
    }
}

static void conn_cancel(mp_task *t)
{
    conn *c = mp_container_of(t, conn, task);
    if (!c->closing)
        conn_finish(c);
}

static void conn_release(mp_task *t)
{
    conn_unref(mp_container_of(t, conn, task));
}

static const mp_task_vtable conn_vt = {conn_poll, conn_cancel, conn_release};

static conn *conn_new(void)
{
    conn *c = calloc(1, sizeof *c);
    c->mode = S->mode;
    c->send_left = S->send_bytes;
    atomic_init(&c->refs, 2);
    return c;
}

static void conn_serve(conn *c);

static void on_connection(uv_stream_t *l, int status)
{
    cr_assert_eq(status, 0);
    conn *c = conn_new();
    cr_assert_eq(mp_tcp_accept(S->rt, &c->tcp, l, S->bufsize), 0);
    conn_serve(c);
}

/* open_path: every queued connection, accepted here and handed to mp_tcp_open(). */
static void on_listen_readable(uv_poll_t *p, int status, int events)
{
    (void)p, (void)events;
    cr_assert_eq(status, 0);
    int fd;
    while ((fd = accept4(S->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        conn *c = conn_new();
        cr_assert_eq(mp_tcp_open(S->rt, &c->tcp, fd, S->bufsize), 0);
        conn_serve(c);
    }
    cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "accept4: %s", strerror(errno));
}

static void conn_serve(conn *c)
{
    if (write_event_first) {
        /* On the loop's thread, as an event would be: the bytes are in, the task has not
         * read yet, and the only event the stream has seen is EPOLLOUT. */
        struct pollfd p = {.fd = mp_tcp_fileno(&c->tcp), .events = POLLIN};
        cr_assert_eq(poll(&p, 1, 5000), 1);
        mp__io_ready(&c->tcp.io, EPOLLOUT, mp__now_ns());
    }
    mp_task_init(&c->task, &conn_vt);
    atomic_store(&S->last, c);
    cr_assert_eq(mp_spawn(S->rt, &c->task), 0);
    atomic_fetch_add(&S->accepted, 1);
}

static void listen_cmd(uv_loop_t *loop, void *arg)
{
    server *s = arg;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    if (s->open_path) {
        s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(s->lfd, 0);
        cr_assert_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
        cr_assert_eq(listen(s->lfd, 512), 0);
        cr_assert_eq(uv_poll_init(loop, &s->lpoll, s->lfd), 0);
        cr_assert_eq(uv_poll_start(&s->lpoll, UV_READABLE, on_listen_readable), 0);
        struct sockaddr_in got;
        socklen_t len = sizeof got;
        cr_assert_eq(getsockname(s->lfd, (struct sockaddr *)&got, &len), 0);
        atomic_store(&s->port, ntohs(got.sin_port));
        return;
    }
    cr_assert_eq(uv_tcp_init(loop, &s->listener), 0);
    cr_assert_eq(uv_tcp_bind(&s->listener, (struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&s->listener, 512, on_connection), 0);
    struct sockaddr_in got;
    int len = sizeof got;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len);
    atomic_store(&s->port, ntohs(got.sin_port));
}

static server *server_start_by(bool open_path, unsigned workers, int mode, size_t send_bytes,
                               size_t bufsize)
{
    server *s = calloc(1, sizeof *s);
    S = s;
    s->open_path = open_path;
    s->lfd = -1;
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    s->rt = test_runtime_with(&cfg);
    s->mode = mode;
    s->send_bytes = send_bytes;
    s->bufsize = bufsize;
    atomic_init(&s->port, -1);
    cr_assert_eq(mp_loop_call(s->rt, &s->cmd, listen_cmd, s), 0);
    while (atomic_load(&s->port) < 0)
        sched_yield();
    return s;
}

static server *server_start(unsigned workers, int mode, size_t send_bytes, size_t bufsize)
{
    return server_start_by(false, workers, mode, send_bytes, bufsize);
}

static void server_stop(server *s)
{
    mp_runtime_free(s->rt); /* cancels the tasks, closes every stream and the listener */
    cr_assert_eq(atomic_load(&s->closed), atomic_load(&s->accepted), "every connection freed");
    if (s->lfd >= 0)
        close(s->lfd); /* the poll's handle was closed by the runtime's shutdown */
    free(s);
}

static void read_exact(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        cr_assert_gt(r, 0, "read: %zd (%s)", r, r < 0 ? strerror(errno) : "EOF");
        got += (size_t)r;
    }
}

/* 64 connections over 4 client threads; each round sends one message on each of its 16
 * connections, then reads every echo back. A lost I/O wake-up stalls a read (timeout). */
#define CONNS   64
#define THREADS 4

typedef struct client {
    int port;
    long rounds;
} client;

static void *client_main(void *arg)
{
    client *k = arg;
    int fds[CONNS / THREADS];
    for (int i = 0; i < CONNS / THREADS; i++)
        fds[i] = test_connect(k->port);
    char msg[64], back[64];
    for (long r = 0; r < k->rounds; r++) {
        for (int i = 0; i < CONNS / THREADS; i++) {
            int n = snprintf(msg, sizeof msg, "round %ld conn %d", r, i);
            cr_assert_eq(write(fds[i], msg, (size_t)n), n);
        }
        for (int i = 0; i < CONNS / THREADS; i++) {
            int n = snprintf(msg, sizeof msg, "round %ld conn %d", r, i);
            read_exact(fds[i], back, (size_t)n);
            cr_assert_eq(memcmp(back, msg, (size_t)n), 0);
        }
    }
    for (int i = 0; i < CONNS / THREADS; i++)
        close(fds[i]);
    return NULL;
}

static void round_trips_by(bool open_path, unsigned workers, long total)
{
    server *s = server_start_by(open_path, workers, MODE_ECHO, 0, 0);
    client k = {.port = s->port, .rounds = total / CONNS};
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, client_main, &k);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    while (atomic_load(&s->closed) < CONNS)
        sched_yield(); /* every task saw its EOF and closed */
    mp_stats st;
    mp_runtime_stats_get(s->rt, &st);
    cr_assert_gt(st.total.drives, 0);
    server_stop(s);
}

static void round_trips(unsigned workers, long total)
{
    round_trips_by(false, workers, total);
}

Test(tcp, echo_round_trips_on_64_connections_lose_no_wakeup, .timeout = 300)
{
    round_trips(2, test_env_long("MP_ECHO_ROUND_TRIPS", 100000));
}

/* One worker: the task's reads and the loop's readiness events alternate on one thread. */
Test(tcp, echo_round_trips_on_one_worker_lose_no_wakeup, .timeout = 300)
{
    round_trips(1, test_env_long("MP_ECHO_ROUND_TRIPS", 100000) / 4);
}

/* Data and FIN arrive before the task first reads: its read is short (the buffer drained)
 * and no later edge comes for the EOF, which must still be seen. Either order of the task's
 * first read and the loop's first event happens over the iterations. */
Test(tcp, data_then_fin_in_one_go_is_echoed_then_closed, .timeout = 60)
{
    for (unsigned workers = 1; workers <= 2; workers++) {
        server *s = server_start(workers, MODE_ECHO, 0, 0);
        for (int i = 0; i < 200; i++) {
            int fd = test_connect(s->port);
            char msg[32], back[32];
            int n = snprintf(msg, sizeof msg, "message %d", i);
            test_write_all(fd, msg, (size_t)n);
            shutdown(fd, SHUT_WR);
            read_exact(fd, back, (size_t)n);
            cr_assert_eq(memcmp(back, msg, (size_t)n), 0);
            cr_assert_eq(read(fd, back, 1), 0, "EOF after the echo (iteration %d)", i);
            close(fd);
        }
        while (atomic_load(&s->closed) < 200)
            sched_yield();
        cr_assert_eq(atomic_load(&s->misuse_refused), 200);
        server_stop(s);
    }
}

/* mp_tcp_read_time(): when the bytes were seen readable, between the client's send and its
 * echo's arrival (for a read before any event, the time of that read). */
Test(tcp, read_time_is_when_the_bytes_were_seen, .timeout = 60)
{
    server *s = server_start(1, MODE_ECHO, 0, 0);
    for (int i = 0; i < 20; i++) {
        int fd = test_connect(s->port);
        char back[8];
        /* Every other time the bytes go with the handshake: likely read before any event. */
        if (i % 2 == 1)
            usleep(20000); /* the task has read nothing and waits for the event */
        uint64_t sent = mp__now_ns();
        test_write_all(fd, "ping", 4);
        read_exact(fd, back, 4);
        uint64_t echoed = mp__now_ns();
        uint64_t t = atomic_load(&S->read_ns);
        cr_assert(t >= sent && t <= echoed, "round %d: read time %llu outside [%llu, %llu]", i,
                  (unsigned long long)t, (unsigned long long)sent, (unsigned long long)echoed);
        /* A second message on the same stream, later: a new event, a new time. */
        usleep(10000);
        sent = mp__now_ns();
        test_write_all(fd, "pong", 4);
        read_exact(fd, back, 4);
        echoed = mp__now_ns();
        t = atomic_load(&S->read_ns);
        cr_assert(t >= sent && t <= echoed, "round %d: second read time outside", i);
        close(fd);
    }
    server_stop(s);
}

/* The first read of a stream whose only event so far said writable (the loop sees EPOLLOUT
 * at registration, and may before the task's first read): no readable event, so the read's
 * own time. It used to take the readable time's initial 0, and magpied's first request on
 * such a connection started with every deadline passed (its keep-alive timeout closed it
 * right after the first response). */
Test(tcp, read_time_of_a_first_read_after_a_write_event_is_the_read, .timeout = 60)
{
    write_event_first = true;
    server *s = server_start(1, MODE_ECHO, 0, 0);
    for (int i = 0; i < 10; i++) {
        uint64_t sent = mp__now_ns();
        int fd = test_connect(s->port);
        test_write_all(fd, "ping", 4);
        char back[4];
        read_exact(fd, back, 4);
        uint64_t echoed = mp__now_ns();
        uint64_t t = atomic_load(&S->read_ns);
        cr_assert(t >= sent && t <= echoed, "round %d: read time %llu outside [%llu, %llu]", i,
                  (unsigned long long)t, (unsigned long long)sent, (unsigned long long)echoed);
        close(fd);
    }
    server_stop(s);
    write_event_first = false;
}

/* A stream that was never accepted (zeroed), or whose accept failed, is closed: no fd, and
 * its close says so (-EBADF), with on_closed run at once (test_io.c). */
/* Streams over sockets the server accepted itself (mp_tcp_open): the same echo, and their
 * close, which is the runtime's own (close(2), then on_closed) rather than libuv's. */
Test(tcp, echo_round_trips_through_mp_tcp_open_lose_no_wakeup, .timeout = 300)
{
    round_trips_by(true, 2, test_env_long("MP_ECHO_ROUND_TRIPS", 100000) / 4);
}

/* The runtime's shutdown closes the opened streams that are left: their on_closed may free
 * them during its walk of the open sockets (ASan checks the walk). */
Test(tcp, shutdown_frees_streams_from_mp_tcp_open, .timeout = 30)
{
    server *s = server_start_by(true, 2, MODE_ECHO, 0, 0);
    int fds[8];
    for (int i = 0; i < 8; i++)
        fds[i] = test_connect(s->port);
    while (atomic_load(&s->accepted) < 8)
        sched_yield();
    server_stop(s);
    for (int i = 0; i < 8; i++)
        close(fds[i]);
}

static _Atomic int closed_calls;
static void count_closed(mp_tcp *t)
{
    (void)t;
    closed_calls++;
}

static bool fd_is_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/* Each refusal of mp_tcp_open(): the stream is not open, the fd is closed (it was handed
 * over), and the close runs on_closed once, at once. */
Test(tcp, mp_tcp_open_errors, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp c;
    closed_calls = 0;
    cr_assert_eq(mp_tcp_open(rt, &c, -1, 0), -EBADF);
    cr_assert_eq(mp_tcp_fileno(&c), -EBADF);
    cr_assert_eq(mp_tcp_close(&c, count_closed), -EBADF);
    cr_assert_eq(closed_calls, 1);

    /* A regular file: epoll refuses it. */
    char path[] = "/tmp/mp_tcp_open_XXXXXX";
    int file = mkstemp(path);
    cr_assert_geq(file, 0);
    unlink(path);
    cr_assert_eq(mp_tcp_open(rt, &c, file, 0), -EPERM);
    cr_assert_not(fd_is_open(file), "a refused fd is closed");
    cr_assert_eq(mp_tcp_fileno(&c), -EBADF);
    cr_assert_eq(mp_tcp_close(&c, count_closed), -EBADF);
    cr_assert_eq(closed_calls, 2);

    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    cr_assert_eq(mp_tcp_open(NULL, &c, sv[0], 0), -EINVAL);
    cr_assert_not(fd_is_open(sv[0]));
    cr_assert_eq(mp_tcp_close(&c, count_closed), -EBADF);
    cr_assert_eq(closed_calls, 3);

    /* A read buffer over MP_TCP_BUF_MAX (its offsets are 32 bits): refused, the fd closed. */
    int sv2[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv2), 0);
    cr_assert_eq(mp_tcp_open(rt, &c, sv2[0], (size_t)MP_TCP_BUF_MAX + 1), -EINVAL);
    cr_assert_not(fd_is_open(sv2[0]));
    cr_assert_eq(mp_tcp_close(&c, count_closed), -EBADF);
    cr_assert_eq(closed_calls, 4);
    close(sv2[1]);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = htons(9)};
    lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(mp_tcp_connect(rt, &c, (struct sockaddr *)&lo, (size_t)MP_TCP_BUF_MAX + 1),
                 -EINVAL);
    cr_assert_eq(mp_tcp_close(&c, count_closed), -EBADF);
    cr_assert_eq(closed_calls, 5);

    /* And one that works, closed from this thread: on_closed once, the fd gone. */
    cr_assert_eq(mp_tcp_open(rt, &c, sv[1], 0), 0);
    cr_assert_eq(mp_tcp_fileno(&c), sv[1]);
    cr_assert_eq(mp_tcp_close(&c, count_closed), 0);
    mp_runtime_free(rt); /* on_closed has run by its end at the latest */
    cr_assert_eq(closed_calls, 6);
    cr_assert_not(fd_is_open(sv[1]));
}

Test(tcp, a_stream_never_opened_has_no_fd_and_refuses_close, .timeout = 10)
{
    mp_tcp c = {0};
    cr_assert_eq(mp_tcp_fileno(&c), -EBADF);
    cr_assert_eq(mp_tcp_close(&c, NULL), -EBADF);
    cr_assert_eq(mp_tcp_write_progress(&c), 0);
}

/* mp_tcp_fileno is the accepted socket: the peer's address is the client's own. */
static void check_fileno_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop; /* mp_loop_call's callback signature */
    _Atomic int *peer_port = arg;
    conn *c = atomic_load(&S->last);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    cr_assert_eq(getpeername(mp_tcp_fileno(&c->tcp), (struct sockaddr *)&a, &len), 0);
    atomic_store(peer_port, ntohs(a.sin_port));
}

Test(tcp, fileno_is_the_accepted_socket, .timeout = 30)
{
    server *s = server_start(1, MODE_ECHO, 0, 0);
    int fd = test_connect(s->port);
    test_write_all(fd, "x", 1);
    char back;
    read_exact(fd, &back, 1); /* accepted and served: S->last is this connection */
    struct sockaddr_in mine;
    socklen_t len = sizeof mine;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&mine, &len), 0);
    _Atomic int peer_port = -1;
    mp_loop_cmd cmd;
    cr_assert_eq(mp_loop_call(s->rt, &cmd, check_fileno_cmd, &peer_port), 0);
    while (atomic_load(&peer_port) < 0)
        sched_yield();
    cr_assert_eq(atomic_load(&peer_port), ntohs(mine.sin_port));
    close(fd);
    while (atomic_load(&s->closed) < 1)
        sched_yield();
    server_stop(s);
}

/* The peer reads nothing until the server's send would block, then everything: the task
 * must wait for the socket to drain (an EPOLLOUT edge) and finish the write. */
Test(tcp, a_write_that_would_block_finishes_when_the_peer_reads, .timeout = 60)
{
    enum { TOTAL = 64 << 20 };
    server *s = server_start(2, MODE_SEND, TOTAL, 0);
    int fd = test_connect(s->port);
    /* Wait until both socket buffers are full: the unread count stops growing. A guess at
     * when the server is blocked, not an assertion; the test holds either way. */
    int last = -1, queued = 0;
    for (int stable = 0; stable < 5;) {
        usleep(10000);
        cr_assert_eq(ioctl(fd, FIONREAD, &queued), 0);
        stable = queued == last ? stable + 1 : 0;
        last = queued;
    }
    cr_assert_lt(queued, TOTAL, "the server's writes are held back by the peer");
    static char buf[1 << 16];
    size_t got = 0;
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
        got += (size_t)n;
    cr_assert_eq(got, (size_t)TOTAL, "every byte arrived, then EOF");
    while (atomic_load(&s->closed) == 0)
        sched_yield();
    cr_assert_eq(atomic_load(&s->write_errors), 0);
    close(fd);
    server_stop(s);
}

/* The file goes out with sendfile in pieces as the peer reads; the task waits whenever the
 * socket is full, and every byte arrives in order. */
Test(tcp, sendfile_sends_a_file_as_the_peer_reads, .timeout = 60)
{
    enum { TOTAL = 16 << 20 };
    char path[] = "/tmp/mp-sendfile-XXXXXX";
    int ffd = mkstemp(path);
    cr_assert_geq(ffd, 0);
    unlink(path);
    char *data = malloc(TOTAL), *in = malloc(TOTAL);
    uint64_t rng = test_seed();
    for (size_t i = 0; i < TOTAL; i++)
        data[i] = (char)test_rand(&rng);
    cr_assert_eq(write(ffd, data, TOTAL), TOTAL);
    sendfile_fd = ffd;
    server *s = server_start(2, MODE_SENDFILE, TOTAL, 0);
    int fd = test_connect(s->port);
    usleep(50000); /* let the socket fill before reading */
    read_exact(fd, in, TOTAL);
    cr_assert_eq(memcmp(in, data, TOTAL), 0, "every byte of the file, in order");
    cr_assert_eq(read(fd, in, 1), 0, "then EOF");
    cr_assert_eq(atomic_load(&s->sendfile_errors), 0);
    cr_assert_gt(atomic_load(&s->sendfile_waits), 0, "the task waited for a full socket");
    close(fd);
    server_stop(s);
    close(ffd);
    free(in);
    free(data);
}

/* What sendfile refuses is an error of the call, not a crash or a wait: a pipe (ESPIPE), a
 * file with nothing at the offset (0 bytes, no error), a stream never opened (EBADF). */
typedef struct sf_probe {
    mp_task task;
    mp_tcp *tcp;
    int in_fd;
    off_t off;
    size_t sent;
    int err;
} sf_probe;

static mp_poll sf_probe_poll(mp_task *t, mp_context *cx)
{
    sf_probe *p = mp_container_of(t, sf_probe, task);
    return mp_tcp_sendfile_poll(p->tcp, cx, p->in_fd, &p->off, 100, &p->sent, &p->err);
}

static const mp_task_vtable sf_probe_vt = {.poll = sf_probe_poll};

typedef struct acceptor {
    mp_task task;
    mp_tcp_listener *l;
    mp_tcp *into;
    int err;
} acceptor;

static mp_poll acceptor_poll(mp_task *t, mp_context *cx)
{
    acceptor *a = mp_container_of(t, acceptor, task);
    return mp_tcp_accept_poll(a->l, cx, a->into, 0, &a->err);
}

static const mp_task_vtable acceptor_vt = {.poll = acceptor_poll};

/* A listener of rt on loopback, a plain client connected to it, and the stream it accepted
 * into st: returns the client's fd. */
static int accept_pair(mp_runtime *rt, mp_tcp_listener *l, mp_tcp *st)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(rt, l, (struct sockaddr *)&a, 16, 0), 0);
    struct sockaddr_storage ss;
    cr_assert_eq(mp_tcp_listener_addr(l, &ss), 0);
    int cfd = test_connect(ntohs(((struct sockaddr_in *)&ss)->sin_port));
    acceptor ac = {.l = l, .into = st};
    mp_task_init(&ac.task, &acceptor_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &ac.task), 0);
    cr_assert_eq(mp_join(&ac.task), 0);
    cr_assert_eq(ac.err, 0);
    return cfd;
}

Test(tcp, sendfile_errors, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp never;
    memset(&never, 0, sizeof never);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    char path[] = "/tmp/mp-sendfile-XXXXXX";
    int ffd = mkstemp(path);
    unlink(path);
    cr_assert_eq(write(ffd, "abc", 3), 3);
    sf_probe p = {.tcp = &never, .in_fd = ffd};
    mp_task_init(&p.task, &sf_probe_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    cr_assert_eq(mp_join(&p.task), 0);
    cr_assert_eq(p.err, -EBADF);
    cr_assert_eq(p.sent, 0);
    /* A real stream for the other two: a connection to a listener of ours. */
    mp_tcp_listener l;
    mp_tcp st;
    int cfd = accept_pair(rt, &l, &st);
    struct {
        int in_fd;
        off_t off;
        int err;
    } cases[] = {{pfd[0], 0, -ESPIPE}, {ffd, 3, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p = (sf_probe){.tcp = &st, .in_fd = cases[i].in_fd, .off = cases[i].off};
        mp_task_init(&p.task, &sf_probe_vt);
        cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
        cr_assert_eq(mp_join(&p.task), 0);
        cr_assert_eq(p.err, cases[i].err, "case %zu: %d", i, p.err);
        cr_assert_eq(p.sent, 0);
    }
    cr_assert_eq(mp_tcp_close(&st, NULL), 0);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    close(cfd);
    close(pfd[0]);
    close(pfd[1]);
    close(ffd);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* One write, plain or with MSG_MORE, from a task. */
typedef struct wr_probe {
    mp_task task;
    mp_tcp *tcp;
    const char *data;
    bool more;
    int err;
} wr_probe;

static mp_poll wr_probe_poll(mp_task *t, mp_context *cx)
{
    wr_probe *p = mp_container_of(t, wr_probe, task);
    size_t len = strlen(p->data);
    return p->more ? mp_tcp_write_more_poll(p->tcp, cx, p->data, len, &p->err)
                   : mp_tcp_write_poll(p->tcp, cx, p->data, len, &p->err);
}

static const mp_task_vtable wr_probe_vt = {.poll = wr_probe_poll};

static int write_from_task(mp_runtime *rt, mp_tcp *tcp, const char *data, bool more)
{
    wr_probe p = {.tcp = tcp, .data = data, .more = more};
    mp_task_init(&p.task, &wr_probe_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    cr_assert_eq(mp_join(&p.task), 0);
    return p.err;
}

/* A head written with "more" waits in the kernel for the body, and both arrive together. */
Test(tcp, write_more_waits_for_the_next_write, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp never;
    memset(&never, 0, sizeof never);
    cr_assert_eq(write_from_task(rt, &never, "x", true), -EBADF);
    mp_tcp_listener l;
    mp_tcp st;
    int cfd = accept_pair(rt, &l, &st);
    cr_assert_eq(mp_tcp_set_nodelay(&st, true), 0, "MSG_MORE holds even with Nagle off");
    uint64_t t0 = mp_now_ms();
    cr_assert_eq(write_from_task(rt, &st, "head;", true), 0);
    struct pollfd pfd = {.fd = cfd, .events = POLLIN};
    int ready = poll(&pfd, 1, 20);
    /* Linux lets corked bytes go after 200 ms: only a check made before that says anything. */
    if (mp_now_ms() - t0 < 150)
        cr_assert_eq(ready, 0, "the head left alone");
    cr_assert_eq(write_from_task(rt, &st, "body", false), 0);
    char buf[32];
    size_t got = 0;
    while (got < 9) {
        ssize_t n = read(cfd, buf + got, sizeof buf - got);
        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    cr_assert_eq(got, 9);
    cr_assert_eq(memcmp(buf, "head;body", 9), 0);
    cr_assert_eq(mp_tcp_close(&st, NULL), 0);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    close(cfd);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* Reads and consumes until the stream would block, then gives its wakers back (the stream goes
 * back to the thread that joins it, as a pooled connection goes back to its pool). */
typedef struct drainer {
    mp_task task;
    mp_tcp *tcp;
    size_t got;
    int err;
} drainer;

static mp_poll drainer_poll(mp_task *t, mp_context *cx)
{
    drainer *d = mp_container_of(t, drainer, task);
    for (;;) {
        const char *data;
        size_t len;
        if (mp_tcp_read_poll(d->tcp, cx, &data, &len, &d->err) == MP_PENDING) {
            mp_tcp_disown(d->tcp);
            return MP_READY;
        }
        if (len == 0)
            return MP_READY; /* EOF or an error: d->err */
        d->got += len;
        mp_tcp_consume(d->tcp, len);
    }
}

static const mp_task_vtable drainer_vt = {.poll = drainer_poll};

static drainer drain(mp_runtime *rt, mp_tcp *c)
{
    drainer d = {.tcp = c};
    mp_task_init(&d.task, &drainer_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &d.task), 0);
    cr_assert_eq(mp_join(&d.task), 0);
    return d;
}

static void wait_maybe_readable(mp_tcp *c)
{
    for (int i = 0; i < 5000 && !mp_tcp_maybe_readable(c); i++)
        usleep(1000);
    cr_assert(mp_tcp_maybe_readable(c), "the loop never reported the input");
}

/* A drained idle stream says nothing is there without a system call; bytes, and then the peer's
 * close, make it say a read might find something. */
Test(tcp, maybe_readable_follows_what_the_loop_reported, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_tcp_listener l;
    mp_tcp st;
    int cfd = accept_pair(rt, &l, &st);
    /* An accepted stream starts out marked readable (its first read is optimistic): that is
     * read away first, so that what is waited for below is the loop's report of the bytes. Else
     * the report (the socket's registration finding them there) could come after they were
     * read, and a drained stream would then rightly say a read might find something. */
    drainer d = drain(rt, &st);
    cr_assert_eq(d.got, 0);
    cr_assert_eq(write(cfd, "abc", 3), 3);
    wait_maybe_readable(&st);
    d = drain(rt, &st);
    cr_assert_eq(d.got, 3);
    cr_assert_not(mp_tcp_maybe_readable(&st), "drained, and nothing came since");
    usleep(20000);
    cr_assert_not(mp_tcp_maybe_readable(&st));
    cr_assert_eq(write(cfd, "de", 2), 2);
    wait_maybe_readable(&st);
    d = drain(rt, &st);
    cr_assert_eq(d.got, 2);
    cr_assert_not(mp_tcp_maybe_readable(&st));
    close(cfd);
    wait_maybe_readable(&st);
    d = drain(rt, &st);
    cr_assert_eq(d.got, 0, "only the EOF");
    cr_assert(mp_tcp_maybe_readable(&st), "an EOF seen stays");
    cr_assert_eq(mp_tcp_close(&st, NULL), 0);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* Writes its bytes, then ends the sending side (mp_tcp_shutdown): rc is the write's error or
 * the shutdown's result. */
typedef struct closer {
    mp_task task;
    mp_tcp *tcp;
    const char *data;
    int err, rc;
} closer;

static mp_poll closer_poll(mp_task *t, mp_context *cx)
{
    closer *c = mp_container_of(t, closer, task);
    if (mp_tcp_write_poll(c->tcp, cx, c->data, strlen(c->data), &c->err) == MP_PENDING)
        return MP_PENDING;
    c->rc = c->err != 0 ? c->err : mp_tcp_shutdown(c->tcp);
    return MP_READY;
}

static const mp_task_vtable closer_vt = {.poll = closer_poll};

static closer write_then_shutdown(mp_runtime *rt, mp_tcp *tcp, const char *data)
{
    closer c = {.tcp = tcp, .data = data};
    mp_task_init(&c.task, &closer_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &c.task), 0);
    cr_assert_eq(mp_join(&c.task), 0);
    return c;
}

/* A half-close: after mp_tcp_shutdown the peer reads what was written, then EOF, and can still
 * send; the stream still reads it, then the peer's own EOF. A later write is EPIPE. */
Test(tcp, shutdown_ends_the_sending_side_only, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_tcp never;
    memset(&never, 0, sizeof never);
    cr_assert_eq(mp_tcp_shutdown(&never), -EBADF);
    mp_tcp_listener l;
    mp_tcp st;
    int cfd = accept_pair(rt, &l, &st);
    closer c = write_then_shutdown(rt, &st, "bye");
    cr_assert_eq(c.rc, 0);
    char in[8];
    size_t got = 0;
    for (ssize_t n; got < sizeof in && (n = read(cfd, in + got, sizeof in - got)) > 0;)
        got += (size_t)n;
    cr_assert_eq(got, 3, "the bytes, then EOF");
    cr_assert_eq(memcmp(in, "bye", 3), 0);
    cr_assert_eq(write(cfd, "late", 4), 4);
    wait_maybe_readable(&st);
    drainer d = drain(rt, &st);
    cr_assert_eq(d.got, 4, "the peer's bytes after the half-close");
    c = write_then_shutdown(rt, &st, "x");
    cr_assert_eq(c.rc, -EPIPE);
    close(cfd);
    wait_maybe_readable(&st);
    d = drain(rt, &st);
    cr_assert_eq(d.got, 0);
    cr_assert_eq(d.err, UV_EOF);
    cr_assert_eq(mp_tcp_close(&st, NULL), 0);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

typedef struct sender {
    int fd;
    const char *data;
    size_t len;
} sender;

static void *send_all(void *arg)
{
    sender *sd = arg;
    size_t done = 0;
    while (done < sd->len) {
        ssize_t n = write(sd->fd, sd->data + done, sd->len - done);
        cr_assert_gt(n, 0);
        done += (size_t)n;
    }
    shutdown(sd->fd, SHUT_WR);
    return NULL;
}

Test(tcp, one_mebibyte_echo_with_backpressure, .timeout = 60)
{
    /* A 4 KiB buffer: the server reads only as fast as it echoes, and its writes block
     * whenever the client is behind. */
    server *s = server_start(2, MODE_ECHO, 0, 4096);
    enum { LEN = 1 << 20 };
    char *out = malloc(LEN), *in = malloc(LEN);
    uint64_t rng = test_seed();
    for (size_t i = 0; i < LEN; i++)
        out[i] = (char)test_rand(&rng);
    int fd = test_connect(s->port);
    sender sd = {fd, out, LEN};
    pthread_t th;
    pthread_create(&th, NULL, send_all, &sd);
    read_exact(fd, in, LEN);
    pthread_join(th, NULL);
    cr_assert_eq(memcmp(in, out, LEN), 0, "every byte came back, in order");
    cr_assert_eq(read(fd, in, 1), 0, "then EOF");
    close(fd);
    free(in);
    free(out);
    server_stop(s);
}

Test(tcp, cancel_while_a_read_is_pending, .timeout = 30)
{
    server *s = server_start(2, MODE_ECHO, 0, 0);
    int fd = test_connect(s->port);
    while (atomic_load(&s->accepted) == 0)
        sched_yield();
    conn *c = atomic_load(&s->last);
    /* The task waits for input that never comes; cancel it: it closes its stream. */
    mp_task_cancel(&c->task);
    char b;
    cr_assert_eq(read(fd, &b, 1), 0, "the server closed the connection");
    while (atomic_load(&s->closed) == 0)
        sched_yield();
    close(fd);
    server_stop(s);
}

Test(tcp, peer_reset_mid_write_is_an_error_not_a_crash, .timeout = 30)
{
    server *s = server_start(2, MODE_SEND, 64u << 20, 0);
    int fd = test_connect(s->port);
    char buf[4096];
    read_exact(fd, buf, sizeof buf); /* the server is writing */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd); /* RST */
    while (atomic_load(&s->closed) == 0)
        sched_yield();
    cr_assert_eq(atomic_load(&s->write_errors), 1);
    server_stop(s);
}

Test(tcp, shutdown_with_open_connections_frees_everything, .timeout = 30)
{
    server *s = server_start(2, MODE_ECHO, 0, 0);
    int fds[8];
    for (int i = 0; i < 8; i++)
        fds[i] = test_connect(s->port);
    while (atomic_load(&s->accepted) < 8)
        sched_yield();
    server_stop(s); /* tasks cancelled, streams closed, conns freed (ASan checks) */
    for (int i = 0; i < 8; i++)
        close(fds[i]);
}

Test(tcp, interrupt_reaches_a_task_waiting_for_input, .timeout = 30)
{
    server *s = server_start(2, MODE_ECHO, 0, 0);
    int fd = test_connect(s->port);
    test_write_all(fd, "x", 1);
    char b;
    cr_assert_eq(read(fd, &b, 1), 1); /* served once: the task now waits for input */
    conn *c = atomic_load(&s->last);
    mp_tcp_interrupt(&c->tcp); /* from a thread that is not the loop's nor the task's */
    cr_assert_eq(read(fd, &b, 1), 0, "the task saw -EINTR and closed");
    cr_assert_eq(atomic_load(&s->interrupts), 1);
    while (atomic_load(&s->closed) == 0)
        sched_yield();
    close(fd);
    server_stop(s);
}

/* Read buffers are held only while there is input: an idle stream (its data echoed and
 * consumed, the task waiting for more) holds none, and each comes back for the next read. */
Test(tcp, an_idle_stream_holds_no_read_buffer, .timeout = 30)
{
    server *s = server_start(2, MODE_ECHO, 0, 0);
    enum { N = 8 };
    int fds[N];
    char back[16];
    for (int i = 0; i < N; i++) {
        fds[i] = test_connect(s->port);
        test_write_all(fds[i], "hello", 5);
        read_exact(fds[i], back, 5);
    }
    while (atomic_load(&s->accepted) < N)
        sched_yield();
    /* The echo is written before the task consumes it and waits again: wait for that. */
    size_t in_use = 1, pooled = 0;
    for (int waited = 0; waited < 10000 && in_use != 0; waited++) {
        mp_tcp_buffer_stats(&in_use, &pooled);
        if (in_use != 0)
            usleep(1000);
    }
    cr_assert_eq(in_use, 0, "%zu idle streams hold a read buffer", in_use);
    /* At most what was in use at once, plus what each worker's own cache may hold beyond
     * that (a buffer given back on one worker is not seen by the other). */
    const size_t bound = N + 2 * MP__TCP_LOCAL_BUFS;
    cr_assert_leq(pooled, bound, "more buffers kept than were ever in use");
    /* A buffer comes back with the next bytes, from the pool. */
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < N; i++) {
            test_write_all(fds[i], "again", 5);
            read_exact(fds[i], back, 5);
            cr_assert_eq(memcmp(back, "again", 5), 0);
        }
    size_t after = 0;
    mp_tcp_buffer_stats(NULL, &after);
    cr_assert_leq(after, bound);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    while (atomic_load(&s->closed) < N)
        sched_yield();
    mp_tcp_buffer_stats(&in_use, NULL);
    cr_assert_eq(in_use, 0, "closed streams gave their buffers back");
    server_stop(s);
}

/* Connecting from tasks (mp_tcp_connect), against the task echo server of task_echo.h. */

typedef struct tclient {
    mp_task task;
    mp_tcp tcp;
    struct sockaddr_in to;
    mp_timer timer;
    uint64_t timeout_ms; /* 0: no timer */
    uint64_t deadline_ms;
    int step; /* 0 connect, 1 write, 2 read, 3 done */
    int connect_err, err;
    char msg[32], got[32];
    size_t got_len;
    _Atomic bool opened; /* read by the test's thread */
    _Atomic bool closed, released, cancelled;
} tclient;

static void tclient_closed(mp_tcp *t)
{
    atomic_store(&mp_container_of(t, tclient, tcp)->closed, true);
}

static mp_poll tclient_poll(mp_task *t, mp_context *cx)
{
    tclient *c = mp_container_of(t, tclient, task);
    int err;
    switch (c->step) {
    case 0:
        if (!c->opened) {
            c->err = mp_tcp_connect(mp_runtime_current(), &c->tcp, (struct sockaddr *)&c->to, 0);
            if (c->err != 0)
                return MP_READY; /* nothing to close */
            c->opened = true;
            mp_timer_init(&c->timer, mp_runtime_current());
            c->deadline_ms = mp_now_ms() + c->timeout_ms;
        }
        if (mp_tcp_connect_poll(&c->tcp, cx, c->timeout_ms ? &c->timer : NULL, c->deadline_ms,
                                &c->connect_err) == MP_PENDING)
            return MP_PENDING;
        if (c->connect_err != 0)
            break;
        c->step = 1;
        /* fall through */
    case 1:
        if (mp_tcp_write_poll(&c->tcp, cx, c->msg, strlen(c->msg), &err) == MP_PENDING)
            return MP_PENDING;
        if ((c->err = err) != 0)
            break;
        c->step = 2;
        /* fall through */
    case 2:
        while (c->got_len < strlen(c->msg)) {
            const char *data;
            size_t len;
            if (mp_tcp_read_poll(&c->tcp, cx, &data, &len, &err) == MP_PENDING)
                return MP_PENDING;
            if (len == 0) {
                c->err = err ? err : -EPIPE;
                break;
            }
            size_t take = len < sizeof c->got - c->got_len ? len : sizeof c->got - c->got_len;
            memcpy(c->got + c->got_len, data, take);
            c->got_len += take;
            mp_tcp_consume(&c->tcp, len);
        }
        c->step = 3;
        break;
    }
    mp_tcp_close(&c->tcp, tclient_closed);
    return MP_READY;
}

static void tclient_cancel(mp_task *t)
{
    tclient *c = mp_container_of(t, tclient, task);
    atomic_store(&c->cancelled, true);
    if (c->opened) {
        mp_timer_cancel(&c->timer);
        mp_tcp_close(&c->tcp, tclient_closed);
    }
}

static void tclient_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, tclient, task)->released, true);
}

static const mp_task_vtable tclient_vt = {tclient_poll, tclient_cancel, tclient_release};

static void tclient_init(tclient *c, struct sockaddr_in to, const char *msg)
{
    memset(c, 0, sizeof *c);
    mp_task_init(&c->task, &tclient_vt);
    c->to = to;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
}

static void wait_closed(tclient *c)
{
    while (c->opened && !atomic_load(&c->closed))
        usleep(1000);
}

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            n++;
    return n;
}

Test(tcp, tasks_connect_write_read_and_close, .timeout = 60)
{
    mp_runtime *rt = test_runtime(2);
    echo_server *s = echo_server_start(rt, false);
    enum { N = 64 };
    tclient *c = calloc(N, sizeof *c);
    for (int i = 0; i < N; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "hello %d", i);
        tclient_init(&c[i], echo_server_addr(s), msg);
        c[i].timeout_ms = 30000;
        cr_assert_eq(mp_spawn_joinable(rt, &c[i].task), 0);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(mp_join(&c[i].task), 0);
        cr_assert_eq(c[i].connect_err, 0, "tclient %d: %d", i, c[i].connect_err);
        cr_assert_eq(c[i].err, 0, "tclient %d: %d", i, c[i].err);
        cr_assert_eq(c[i].got_len, strlen(c[i].msg));
        cr_assert_eq(memcmp(c[i].got, c[i].msg, c[i].got_len), 0);
        wait_closed(&c[i]);
    }
    echo_server_stop(s);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    free(c);
    free(s);
}

Test(tcp, connect_to_a_closed_port_is_refused, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd); /* bound once, nobody listens now */
    tclient c;
    tclient_init(&c, a, "x");
    cr_assert_eq(mp_spawn_joinable(rt, &c.task), 0);
    cr_assert_eq(mp_join(&c.task), 0);
    cr_assert_eq(c.connect_err, -ECONNREFUSED);
    wait_closed(&c);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* A listener whose accept queue is full and never drained: further SYNs are dropped, so a
 * connection to it stays in progress (the kernel retries its SYN after a second). Loopback
 * only. */
typedef struct black_hole {
    int lfd;
    int fill[8];
    struct sockaddr_in addr;
} black_hole;

static void black_hole_open(black_hole *b)
{
    b->lfd = socket(AF_INET, SOCK_STREAM, 0);
    b->addr =
        (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof b->addr;
    cr_assert_eq(bind(b->lfd, (struct sockaddr *)&b->addr, sizeof b->addr), 0);
    cr_assert_eq(listen(b->lfd, 0), 0);
    getsockname(b->lfd, (struct sockaddr *)&b->addr, &al);
    for (int i = 0; i < 8; i++) {
        b->fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(b->fill[i], (struct sockaddr *)&b->addr, sizeof b->addr);
    }
    usleep(20000); /* the queue fills with the first handshakes */
}

static void black_hole_close(black_hole *b)
{
    for (int i = 0; i < 8; i++)
        close(b->fill[i]);
    close(b->lfd);
}

Test(tcp, connect_times_out_on_the_timer_wheel, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    black_hole b;
    black_hole_open(&b);
    tclient c;
    tclient_init(&c, b.addr, "x");
    c.timeout_ms = 50;
    cr_assert_eq(mp_spawn_joinable(rt, &c.task), 0);
    cr_assert_eq(mp_join(&c.task), 0);
    cr_assert_eq(c.connect_err, -ETIMEDOUT);
    wait_closed(&c);
    black_hole_close(&b);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(tcp, a_task_cancelled_mid_connect_leaks_no_socket_and_no_waker, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    black_hole b;
    black_hole_open(&b);
    /* libuv opens one descriptor per loop at its first stream handle (its EMFILE reserve):
     * have it open before counting. */
    tclient warm;
    tclient_init(&warm, b.addr, "x");
    warm.timeout_ms = 1;
    cr_assert_eq(mp_spawn_joinable(rt, &warm.task), 0);
    cr_assert_eq(mp_join(&warm.task), 0);
    wait_closed(&warm);
    int before = open_fds();
    tclient c;
    tclient_init(&c, b.addr, "x");
    c.timeout_ms = 60000;
    cr_assert_eq(mp_spawn_joinable(rt, &c.task), 0);
    while (!c.opened)
        usleep(1000);
    usleep(10000);
    mp_task_cancel(&c.task);
    cr_assert_eq(mp_join(&c.task), -ECANCELED);
    cr_assert(atomic_load(&c.cancelled));
    wait_closed(&c);
    int after = open_fds();
    cr_assert_eq(after, before, "the connecting socket was closed: %d fds before, %d after", before,
                 after);
    while (!atomic_load(&c.released))
        usleep(1000); /* every waker the task left was given back */
    black_hole_close(&b);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(tcp, connect_errors_and_options, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp t;
    struct sockaddr bad = {.sa_family = AF_UNIX};
    cr_assert_eq(mp_tcp_connect(rt, &t, &bad, 0), -EINVAL);
    cr_assert_eq(mp_tcp_connect(rt, &t, NULL, 0), -EINVAL);
    cr_assert_eq(mp_tcp_fileno(&t), -EBADF);
    cr_assert_eq(mp_tcp_set_nodelay(&t, true), -EBADF);
    cr_assert_eq(mp_tcp_set_keepalive(&t, 30), -EBADF);
    cr_assert_eq(mp_tcp_set_buffers(&t, 4096, 4096), -EBADF);
    struct sockaddr_storage ss;
    cr_assert_eq(mp_tcp_peer_addr(&t, &ss), -EBADF);
    cr_assert_eq(mp_tcp_close(&t, NULL), -EBADF);

    echo_server *s = echo_server_start(rt, false);
    struct sockaddr_in a = echo_server_addr(s);
    _Atomic bool closed = false;
    cr_assert_eq(mp_tcp_connect(rt, &t, (struct sockaddr *)&a, 0), 0);
    int fd = mp_tcp_fileno(&t);
    cr_assert_geq(fd, 0);
    cr_assert_eq(mp_tcp_set_nodelay(&t, true), 0);
    cr_assert_eq(mp_tcp_set_keepalive(&t, 30), 0);
    cr_assert_eq(mp_tcp_set_buffers(&t, 65536, 65536), 0);
    int v = 0;
    socklen_t vl = sizeof v;
    getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &vl);
    cr_assert_eq(v, 1);
    getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &vl);
    cr_assert_eq(v, 1);
    getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &vl);
    cr_assert_eq(v, 30);
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &vl);
    cr_assert_geq(v, 65536);
    cr_assert_eq(mp_tcp_set_keepalive(&t, 0), 0);
    getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &vl);
    cr_assert_eq(v, 0);
    cr_assert_eq(mp_tcp_local_addr(&t, &ss), 0);
    cr_assert_eq(ss.ss_family, AF_INET);
    /* Closed from a plain thread before anyone polled it: fine, and once only. */
    cr_assert_eq(mp_tcp_close(&t, NULL), 0);
    cr_assert_eq(mp_tcp_close(&t, NULL), -EALREADY);
    (void)closed;
    usleep(20000);
    echo_server_stop(s);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    free(s);
}

Test(tcp, connect_out_of_descriptors_is_an_error, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp t;
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    int top = dup(0);
    close(top);
    low = (struct rlimit){.rlim_cur = (rlim_t)top, .rlim_max = old.rlim_max};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    int rc = mp_tcp_connect(rt, &t, (struct sockaddr *)&a, 0);
    setrlimit(RLIMIT_NOFILE, &old);
    cr_assert_eq(rc, -EMFILE);
    cr_assert_eq(mp_tcp_fileno(&t), -EBADF);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* Hand-off: one task connects and does a round trip, gives its wakers back, and passes the
 * stream through a channel to a task spawned for it, which does the next round trip on
 * whatever worker it runs. */
typedef struct relay {
    mp_task task;
    mp_chan *ch;
    mp_tcp *tcp;
    int step;
    int err;
    char got[8];
    size_t got_len;
    bool wrote;
} relay;

static mp_poll relay_round(relay *r, mp_context *cx, const char *msg)
{
    int err;
    if (!r->wrote) {
        if (mp_tcp_write_poll(r->tcp, cx, msg, strlen(msg), &err) == MP_PENDING)
            return MP_PENDING;
        r->wrote = true;
        if ((r->err = err))
            return MP_READY;
    }
    while (r->got_len < strlen(msg)) {
        const char *d;
        size_t len;
        if (mp_tcp_read_poll(r->tcp, cx, &d, &len, &err) == MP_PENDING)
            return MP_PENDING;
        if (len == 0) {
            r->err = err ? err : -EPIPE;
            return MP_READY;
        }
        memcpy(r->got + r->got_len, d, len);
        r->got_len += len;
        mp_tcp_consume(r->tcp, len);
    }
    return MP_READY;
}

static mp_poll taker_poll(mp_task *t, mp_context *cx)
{
    relay *r = mp_container_of(t, relay, task);
    if (r->tcp == NULL) {
        void *v;
        int err;
        if (mp_chan_recv_poll(r->ch, cx, &v, &err) == MP_PENDING)
            return MP_PENDING;
        cr_assert_eq(err, 0);
        r->tcp = v;
    }
    return relay_round(r, cx, "two");
}

static const mp_task_vtable taker_vt = {.poll = taker_poll};

static mp_poll giver_poll(mp_task *t, mp_context *cx)
{
    relay *r = mp_container_of(t, relay, task);
    if (r->step == 0) {
        if (mp_tcp_connect_poll(r->tcp, cx, NULL, 0, &r->err) == MP_PENDING)
            return MP_PENDING;
        if (r->err)
            return MP_READY;
        r->step = 1;
    }
    if (relay_round(r, cx, "one") == MP_PENDING)
        return MP_PENDING;
    mp_tcp_disown(r->tcp);
    cr_assert_eq(mp_chan_try_send(r->ch, r->tcp), 0);
    return MP_READY;
}

static const mp_task_vtable giver_vt = {.poll = giver_poll};

static void relay_closed(mp_tcp *t)
{
    (void)t;
}

Test(tcp, a_stream_handed_from_task_to_task_serves_both, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    echo_server *s = echo_server_start(rt, false);
    struct sockaddr_in a = echo_server_addr(s);
    mp_chan ch;
    cr_assert_eq(mp_chan_init(&ch, 1), 0);
    mp_tcp *tcp = calloc(1, sizeof *tcp);
    cr_assert_eq(mp_tcp_connect(rt, tcp, (struct sockaddr *)&a, 0), 0);
    relay giver = {.ch = &ch, .tcp = tcp}, taker = {.ch = &ch};
    mp_task_init(&taker.task, &taker_vt);
    mp_task_init(&giver.task, &giver_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &taker.task), 0);
    cr_assert_eq(mp_spawn_joinable(rt, &giver.task), 0);
    cr_assert_eq(mp_join(&giver.task), 0);
    cr_assert_eq(mp_join(&taker.task), 0);
    cr_assert_eq(giver.err, 0);
    cr_assert_eq(taker.err, 0);
    cr_assert_eq(memcmp(giver.got, "one", 3), 0);
    cr_assert_eq(memcmp(taker.got, "two", 3), 0);
    cr_assert_eq(mp_tcp_close(tcp, relay_closed), 0);
    echo_server_stop(s);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    mp_chan_destroy(&ch);
    free(tcp);
    free(s);
}

/* Deadlines on stream waits, from a plain thread that owns the listener and the stream
 * (mp_wait_until): an accept and a read that time out withdraw their wakers
 * (mp_tcp_listener_cancel_accept, mp_tcp_cancel_read), and the connection or the bytes that
 * come later are there for the next wait. */
typedef struct io_wait {
    mp_tcp_listener *l;
    mp_tcp *c;
    const char *data;
    size_t len;
    int err;
} io_wait;

/* Whether a waker is left in the socket, read under its lock (the loop writes it there). */
static bool waker_left(mp_io *io)
{
    mp__spin_lock(&io->lock);
    bool left = !mp_waker_is_empty(&io->reader) || !mp_waker_is_empty(&io->writer);
    mp__spin_unlock(&io->lock);
    return left;
}

static mp_poll accept_wait_poll(void *arg, mp_context *cx)
{
    io_wait *w = arg;
    return mp_tcp_accept_poll(w->l, cx, w->c, 0, &w->err);
}

static bool accept_wait_cancel(void *arg)
{
    mp_tcp_listener_cancel_accept(((io_wait *)arg)->l);
    return false;
}

static mp_poll read_wait_poll(void *arg, mp_context *cx)
{
    io_wait *w = arg;
    return mp_tcp_read_poll(w->c, cx, &w->data, &w->len, &w->err);
}

static bool read_wait_cancel(void *arg)
{
    mp_tcp_cancel_read(((io_wait *)arg)->c);
    return false;
}

static _Atomic int deadline_closes;
static void deadline_tcp_closed(mp_tcp *t)
{
    (void)t;
    atomic_fetch_add(&deadline_closes, 1);
}
static void deadline_lst_closed(mp_tcp_listener *l)
{
    (void)l;
    atomic_fetch_add(&deadline_closes, 1);
}

static void nothing(void *arg)
{
    (void)arg;
}

Test(tcp, accept_and_read_with_a_deadline_withdraw_their_wakers, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    /* A spawn starts the worker, which then sleeps in the loop as its driver: the readiness
     * of the sockets this thread waits on comes from there. */
    mp_task *h;
    cr_assert_eq(mp_spawn_fn(rt, nothing, NULL, &h), 0);
    cr_assert_eq(mp_join(h), 0);
    mp_tcp_listener l;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(rt, &l, (struct sockaddr *)&lo, 0, 0), 0);
    mp_tcp c;
    io_wait w = {.l = &l, .c = &c, .err = 1};
    mp_wait acc = {accept_wait_poll, accept_wait_cancel, &w};
    cr_assert_eq(mp_wait_until(&acc, mp_now_ms() + 20), -ETIMEDOUT);
    cr_assert(!waker_left(&l.io), "the accept's waker stayed in the listener");
    struct sockaddr_storage addr;
    cr_assert_eq(mp_tcp_listener_addr(&l, &addr), 0);
    int peer = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(connect(peer, (struct sockaddr *)&addr, sizeof(struct sockaddr_in)), 0);
    int rc = mp_wait_until(&acc, mp_now_ms() + 5000);
    cr_assert_eq(rc, 0, "accept: %d %d", rc, w.err);
    cr_assert_eq(w.err, 0);
    mp_wait rd = {read_wait_poll, read_wait_cancel, &w};
    cr_assert_eq(mp_wait_until(&rd, mp_now_ms() + 20), -ETIMEDOUT);
    cr_assert(!waker_left(&c.io), "the read's waker stayed in the stream");
    cr_assert_eq(write(peer, "hi", 2), 2);
    cr_assert_eq(mp_wait_until(&rd, mp_now_ms() + 5000), 0);
    cr_assert_eq(w.err, 0);
    cr_assert_eq(w.len, 2);
    cr_assert_eq(memcmp(w.data, "hi", 2), 0);
    mp_tcp_consume(&c, 2);
    atomic_store(&deadline_closes, 0);
    cr_assert_eq(mp_tcp_close(&c, deadline_tcp_closed), 0);
    cr_assert_eq(mp_tcp_listener_close(&l, deadline_lst_closed), 0);
    close(peer);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&deadline_closes), 2);
}
