/* Tests of runtime/src/udp.c: UDP sockets for tasks, on loopback. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

/* A send on a loopback UDP socket never says EAGAIN (the datagram stops counting against the
 * sender's buffer as soon as it is queued), so the test binary is linked with
 * -Wl,--wrap=sendto,--wrap=sendmmsg and fails the next `fake_eagain` sends on `fake_fd` with
 * EAGAIN, the way a full send buffer would, to show that the send path then asks for the write
 * edge and is woken. */
ssize_t __real_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
                      socklen_t tolen);
int __real_sendmmsg(int fd, struct mmsghdr *mm, unsigned n, int flags);
static _Atomic int fake_fd = -1, fake_eagain;

static bool take_fake(int fd)
{
    if (fd != atomic_load(&fake_fd))
        return false;
    int n = atomic_load(&fake_eagain);
    while (n > 0 && !atomic_compare_exchange_weak(&fake_eagain, &n, n - 1))
        ;
    return n > 0;
}

ssize_t __wrap_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
                      socklen_t tolen)
{
    if (take_fake(fd)) {
        errno = EAGAIN;
        return -1;
    }
    return __real_sendto(fd, buf, len, flags, to, tolen);
}

int __wrap_sendmmsg(int fd, struct mmsghdr *mm, unsigned n, int flags)
{
    if (take_fake(fd)) {
        errno = EAGAIN;
        return -1;
    }
    return __real_sendmmsg(fd, mm, n, flags);
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int port_of(mp_udp *u)
{
    struct sockaddr_storage ss;
    cr_assert_eq(mp_udp_local_addr(u, &ss), 0);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* A server task: answers each datagram with "re:" + its payload, to its sender, until it has
 * answered `count`, receiving in batches when batch is set. */
typedef struct server {
    mp_task task;
    mp_udp u;
    int count, answered;
    bool batch;
    int err;
    /* one datagram being answered, or a batch */
    mp_udp_msg in[8], out[8];
    char inbuf[8][64], outbuf[8][80];
    unsigned n_in, sent;
    bool have;
    _Atomic bool closed;
} server;

static mp_poll server_poll(mp_task *t, mp_context *cx)
{
    server *s = mp_container_of(t, server, task);
    while (s->answered < s->count) {
        if (!s->have) {
            for (int i = 0; i < 8; i++)
                s->in[i] = (mp_udp_msg){.buf = s->inbuf[i], .len = sizeof s->inbuf[i]};
            if (s->batch) {
                if (mp_udp_recv_batch_poll(&s->u, cx, s->in, 8, &s->n_in, &s->err) == MP_PENDING)
                    return MP_PENDING;
            } else {
                size_t len;
                bool trunc;
                if (mp_udp_recv_poll(&s->u, cx, s->inbuf[0], sizeof s->inbuf[0], &len, &trunc,
                                     &s->in[0].addr, &s->err) == MP_PENDING)
                    return MP_PENDING;
                s->in[0].len = len;
                s->n_in = 1;
            }
            if (s->err)
                return MP_READY;
            for (unsigned i = 0; i < s->n_in; i++) {
                char *o = s->outbuf[i];
                memcpy(o, "re:", 3);
                memcpy(o + 3, s->inbuf[i], s->in[i].len);
                int n = 3 + (int)s->in[i].len;
                s->out[i] =
                    (mp_udp_msg){.buf = s->outbuf[i], .len = (size_t)n, .addr = s->in[i].addr};
            }
            s->have = true;
            s->sent = 0;
        }
        if (s->batch) {
            unsigned done;
            if (mp_udp_send_batch_poll(&s->u, cx, s->out + s->sent, s->n_in - s->sent, &done,
                                       &s->err) == MP_PENDING) {
                s->sent += done;
                return MP_PENDING;
            }
            s->sent += done;
        } else if (mp_udp_send_poll(&s->u, cx, s->out[0].buf, s->out[0].len,
                                    (struct sockaddr *)&s->out[0].addr, &s->err) == MP_PENDING) {
            return MP_PENDING;
        }
        if (s->err)
            return MP_READY;
        s->answered += (int)s->n_in;
        s->have = false;
    }
    return MP_READY;
}

static void server_cancel(mp_task *t)
{
    server *s = mp_container_of(t, server, task);
    s->err = -ECANCELED;
}

static const mp_task_vtable server_vt = {.poll = server_poll, .cancel = server_cancel};

static void server_closed(mp_udp *u)
{
    atomic_store(&mp_container_of(u, server, u)->closed, true);
}

static void server_start(mp_runtime *rt, server *s, int count, bool batch)
{
    memset(s, 0, sizeof *s);
    s->count = count;
    s->batch = batch;
    struct sockaddr_in a = loopback(0);
    cr_assert_eq(mp_udp_bind(rt, &s->u, (struct sockaddr *)&a, 0), 0);
    mp_task_init(&s->task, &server_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &s->task), 0);
}

static void server_finish(server *s, int want_err)
{
    cr_assert_eq(mp_join(&s->task), 0);
    cr_assert_eq(s->err, want_err, "server error %d", s->err);
    cr_assert_eq(mp_udp_close(&s->u, server_closed), want_err == -EBADF ? -EALREADY : 0);
}

/* A plain-socket client: n request/response rounds. */
static void plain_rounds(int port, int n)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(port);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (int i = 0; i < n; i++) {
        char q[32], r[80], want[80];
        int len = snprintf(q, sizeof q, "q%d", i);
        cr_assert_eq(send(fd, q, (size_t)len, 0), len);
        ssize_t got = recv(fd, r, sizeof r, 0);
        int wl = snprintf(want, sizeof want, "re:%s", q);
        cr_assert_eq(got, wl, "round %d: %zd", i, got);
        cr_assert_eq(memcmp(r, want, (size_t)wl), 0);
    }
    close(fd);
}

Test(udp, a_task_answers_datagrams_one_at_a_time, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    server s;
    server_start(rt, &s, 200, false);
    plain_rounds(port_of(&s.u), 200);
    server_finish(&s, 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert(atomic_load(&s.closed));
    mp_runtime_free(rt);
}

Test(udp, batches_with_recvmmsg_and_sendmmsg, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    server s;
    server_start(rt, &s, 64, true);
    /* 64 datagrams sent at once, answered in batches. */
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(port_of(&s.u));
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    for (int i = 0; i < 64; i++) {
        char q[16];
        int len = snprintf(q, sizeof q, "b%d", i);
        cr_assert_eq(send(fd, q, (size_t)len, 0), len);
    }
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    bool seen[64] = {0};
    for (int i = 0; i < 64; i++) {
        char r[32];
        ssize_t got = recv(fd, r, sizeof r - 1, 0);
        cr_assert_gt(got, 4);
        r[got] = 0;
        int k = atoi(r + 4);
        cr_assert(k >= 0 && k < 64 && !seen[k] && memcmp(r, "re:b", 4) == 0, "%s", r);
        seen[k] = true;
    }
    close(fd);
    server_finish(&s, 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* The socket is registered without EPOLLOUT until a send would block; then the send path adds
 * it, and the MOD of a socket that has room again raises the edge that wakes the sender. */
Test(udp, a_send_that_would_block_asks_for_the_write_edge_and_is_woken, .timeout = 30)
{
    for (int batch = 0; batch < 2; batch++) {
        mp_runtime *rt = test_runtime(2);
        server s;
        server_start(rt, &s, 3, batch);
        cr_assert(!atomic_load(&s.u.write_armed));
        atomic_store(&fake_eagain, 1);
        atomic_store(&fake_fd, mp_udp_fileno(&s.u));
        plain_rounds(port_of(&s.u), 3);
        cr_assert_eq(atomic_load(&fake_eagain), 0, "the faked EAGAIN was not met");
        cr_assert(atomic_load(&s.u.write_armed));
        atomic_store(&fake_fd, -1);
        server_finish(&s, 0);
        cr_assert_eq(mp_runtime_shutdown(rt), 0);
        mp_runtime_free(rt);
    }
}

Test(udp, closing_wakes_a_pending_receive_with_ebadf, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    server s;
    server_start(rt, &s, 1, false);
    usleep(20000);
    cr_assert_eq(mp_udp_close(&s.u, server_closed), 0);
    server_finish(&s, -EBADF);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert(atomic_load(&s.closed));
    mp_runtime_free(rt);
}

Test(udp, interrupt_ends_a_pending_receive_once, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    server s;
    server_start(rt, &s, 1, false);
    mp_udp_interrupt(&s.u);
    cr_assert_eq(mp_join(&s.task), 0);
    cr_assert_eq(s.err, -EINTR);
    /* Once: the socket works after it. */
    s.err = 0;
    mp_task_init(&s.task, &server_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
    plain_rounds(port_of(&s.u), 1);
    server_finish(&s, 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(udp, connected_sockets_truncation_and_errors, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_udp u;
    struct sockaddr bad = {.sa_family = AF_UNIX};
    cr_assert_eq(mp_udp_bind(rt, &u, &bad, 0), -EINVAL);
    cr_assert_eq(mp_udp_bind(rt, &u, NULL, 0), -EINVAL);
    cr_assert_eq(mp_udp_fileno(&u), -EBADF);
    cr_assert_eq(mp_udp_connect(&u, &bad), -EBADF);
    cr_assert_eq(mp_udp_close(&u, NULL), -EBADF);
    struct sockaddr_in a = loopback(0);
    cr_assert_eq(mp_udp_bind(rt, &u, (struct sockaddr *)&a, 0), 0);
    cr_assert_eq(mp_udp_connect(&u, &bad), -EINVAL);
    /* A plain peer; u connected to it sends without an address and gets a long datagram cut. */
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in pa = loopback(0);
    bind(fd, (struct sockaddr *)&pa, sizeof pa);
    socklen_t pl = sizeof pa;
    getsockname(fd, (struct sockaddr *)&pa, &pl);
    cr_assert_eq(mp_udp_connect(&u, (struct sockaddr *)&pa), 0);
    struct sockaddr_in ua = loopback(port_of(&u));
    char big[100];
    memset(big, 'x', sizeof big);
    cr_assert_eq(sendto(fd, big, sizeof big, 0, (struct sockaddr *)&ua, sizeof ua), 100);
    usleep(10000);
    /* Only the connected peer's datagrams arrive (the poll functions are covered above). */
    char small[10];
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t got =
        recvfrom(mp_udp_fileno(&u), small, sizeof small, MSG_TRUNC, (struct sockaddr *)&from, &fl);
    cr_assert_eq(got, 100, "the kernel reports the datagram's full length");
    close(fd);
    cr_assert_eq(mp_udp_close(&u, NULL), 0);
    cr_assert_eq(mp_udp_close(&u, NULL), -EALREADY);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* A task that receives one datagram into a small buffer. */
typedef struct small_recv {
    mp_task task;
    mp_udp *u;
    char buf[10];
    size_t len;
    bool trunc;
    int err;
} small_recv;

static mp_poll small_recv_poll(mp_task *t, mp_context *cx)
{
    small_recv *r = mp_container_of(t, small_recv, task);
    return mp_udp_recv_poll(r->u, cx, r->buf, sizeof r->buf, &r->len, &r->trunc, NULL, &r->err);
}

static const mp_task_vtable small_recv_vt = {.poll = small_recv_poll};

Test(udp, a_datagram_larger_than_the_buffer_is_cut_and_flagged, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_udp u;
    struct sockaddr_in a = loopback(0);
    cr_assert_eq(mp_udp_bind(rt, &u, (struct sockaddr *)&a, 0), 0);
    small_recv r = {.u = &u};
    mp_task_init(&r.task, &small_recv_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &r.task), 0);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in ua = loopback(port_of(&u));
    char big[100];
    memset(big, 'y', sizeof big);
    cr_assert_eq(sendto(fd, big, sizeof big, 0, (struct sockaddr *)&ua, sizeof ua), 100);
    cr_assert_eq(mp_join(&r.task), 0);
    cr_assert_eq(r.err, 0);
    cr_assert_eq(r.len, 10);
    cr_assert(r.trunc);
    close(fd);
    cr_assert_eq(mp_udp_close(&u, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(udp, shutdown_with_a_pending_receive_closes_the_socket, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    server s;
    server_start(rt, &s, 1, false);
    usleep(10000);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(mp_join(&s.task), -ECANCELED);
    cr_assert(atomic_load(&s.closed) == false); /* no close of ours, so no callback */
    cr_assert_eq(mp_udp_close(&s.u, server_closed), -ESHUTDOWN);
    mp_runtime_free(rt);
}

/* A datagram that is already queued when a freshly bound socket's first receive comes is
 * taken at once: the socket starts readable (as an accepted stream does) and waits for the
 * loop's edge only when the kernel says EAGAIN. It used to start not readable, so the first
 * receive waited for a round trip through the loop, and a program that closed the socket
 * when its receiver waited lost the datagram. Here the only worker is in this poll, so no
 * loop runs between the send and the receive. */
typedef struct first_recv {
    mp_task task;
    mp_udp u; /* outlives the poll: the close finishes on the loop */
    mp_poll first;
    size_t len;
    char buf[64];
    int err;
} first_recv;

static mp_poll first_recv_poll(mp_task *t, mp_context *cx)
{
    first_recv *f = mp_container_of(t, first_recv, task);
    mp_udp *u = &f->u;
    struct sockaddr_in any = loopback(0);
    cr_assert_eq(mp_udp_bind(mp_runtime_current(), u, (struct sockaddr *)&any, 0), 0);
    struct sockaddr_in to = loopback(port_of(u));
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    cr_assert_geq(s, 0);
    cr_assert_eq(sendto(s, "first", 5, 0, (struct sockaddr *)&to, sizeof to), 5);
    close(s);
    /* Queued in the kernel: wait for it there, not through the runtime. */
    struct pollfd pfd = {.fd = u->io.fd, .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 5000), 1);
    f->first = mp_udp_recv_poll(u, cx, f->buf, sizeof f->buf, &f->len, NULL, NULL, &f->err);
    mp_udp_close(u, NULL);
    return MP_READY;
}

static const mp_task_vtable first_recv_vt = {.poll = first_recv_poll};

Test(udp, a_datagram_queued_before_the_first_receive_is_taken_at_once, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    first_recv f = {0};
    mp_task_init(&f.task, &first_recv_vt);
    cr_assert_eq(mp_block_on(rt, &f.task), 0);
    cr_assert_eq(f.first, MP_READY, "the first receive waited for the loop");
    cr_assert_eq(f.err, 0);
    cr_assert_eq(f.len, 5);
    cr_assert_eq(memcmp(f.buf, "first", 5), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}
