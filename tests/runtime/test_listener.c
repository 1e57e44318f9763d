/* Tests of runtime/src/listener.c: listening sockets owned by tasks. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "task_echo.h"
#include "test_net.h"
#include "test_util.h"

static void read_exact(int fd, char *buf, size_t n)
{
    while (n) {
        ssize_t r = read(fd, buf, n);
        cr_assert_gt(r, 0, "read: %zd", r);
        buf += r;
        n -= (size_t)r;
    }
}

static void echo_once(int fd, const char *msg)
{
    char got[64];
    size_t n = strlen(msg);
    test_write_all(fd, msg, n);
    read_exact(fd, got, n);
    cr_assert_eq(memcmp(got, msg, n), 0);
}

typedef struct client_arg {
    int port;
    int rounds;
} client_arg;

static void *client_main(void *arg)
{
    client_arg *a = arg;
    int fd = test_connect(a->port);
    for (int i = 0; i < a->rounds; i++)
        echo_once(fd, "ping from a plain client");
    close(fd);
    return NULL;
}

static void wait_for(_Atomic int *v, int want)
{
    while (atomic_load(v) < want)
        usleep(1000);
}

Test(listener, a_task_accepts_and_tasks_echo_ipv4, .timeout = 60)
{
    mp_runtime *rt = test_runtime(2);
    echo_server *s = echo_server_start(rt, false);
    enum { CLIENTS = 16 };
    pthread_t th[CLIENTS];
    client_arg a = {.port = s->port, .rounds = 50};
    for (int i = 0; i < CLIENTS; i++)
        pthread_create(&th[i], NULL, client_main, &a);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    wait_for(&s->conns_freed, CLIENTS);
    cr_assert_eq(atomic_load(&s->accepted), CLIENTS);
    echo_server_stop(s);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(atomic_load(&s->listener_closed), 1);
    mp_runtime_free(rt);
    free(s);
}

Test(listener, ipv6_loopback, .timeout = 60)
{
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    bool have_v6 = probe >= 0 && bind(probe, (struct sockaddr *)&a6, sizeof a6) == 0;
    if (probe >= 0)
        close(probe);
    if (!have_v6)
        cr_skip_test("no IPv6 loopback here");
    mp_runtime *rt = test_runtime(2);
    echo_server *s = echo_server_start(rt, true);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    a6.sin6_port = htons((uint16_t)s->port);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a6, sizeof a6), 0);
    echo_once(fd, "over ::1");
    close(fd);
    wait_for(&s->conns_freed, 1);
    echo_server_stop(s);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    free(s);
}

Test(listener, closing_the_listener_wakes_a_task_waiting_in_accept, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    echo_server *s = echo_server_start(rt, false);
    usleep(20000);       /* the acceptor is most likely waiting by now; either way it must end */
    echo_server_stop(s); /* asserts -EBADF */
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(atomic_load(&s->listener_closed), 1);
    cr_assert_eq(mp_tcp_listener_fileno(&s->l), -EBADF);
    cr_assert_eq(mp_tcp_listener_close(&s->l, NULL), -EALREADY, "closed once already");
    mp_runtime_free(rt);
    free(s);
}

Test(listener, shutdown_with_an_acceptor_waiting_closes_the_listener, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    echo_server *s = echo_server_start(rt, false);
    int fd = test_connect(s->port);
    echo_once(fd, "one");
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    /* The acceptor was cancelled, its connection's task too, and every socket closed. */
    cr_assert(atomic_load(&s->acceptor_done));
    cr_assert_eq(mp_join(&s->task), -ECANCELED);
    cr_assert_eq(atomic_load(&s->conns_freed), 1);
    char c;
    cr_assert_eq(read(fd, &c, 1), 0, "the server's end is closed");
    close(fd);
    cr_assert_eq(mp_tcp_listener_close(&s->l, NULL), -ESHUTDOWN);
    mp_runtime_free(rt);
    free(s);
}

/* A task that accepts once and reports. */
typedef struct one_accept {
    mp_task task;
    mp_tcp_listener *l;
    mp_tcp c;
    size_t bufsize;
    int err;
    int polls;
    _Atomic bool closed;
} one_accept;

static void one_accept_closed(mp_tcp *c)
{
    atomic_store(&mp_container_of(c, one_accept, c)->closed, true);
}

static mp_poll one_accept_poll(mp_task *t, mp_context *cx)
{
    one_accept *o = mp_container_of(t, one_accept, task);
    o->polls++;
    if (mp_tcp_accept_poll(o->l, cx, &o->c, o->bufsize, &o->err) == MP_PENDING)
        return MP_PENDING;
    if (o->err == 0)
        mp_tcp_close(&o->c, one_accept_closed);
    return MP_READY;
}

static const mp_task_vtable one_accept_vt = {.poll = one_accept_poll};

static int accept_once_with(mp_runtime *rt, mp_tcp_listener *l, size_t bufsize)
{
    one_accept o = {.l = l, .bufsize = bufsize, .err = 1};
    mp_task_init(&o.task, &one_accept_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &o.task), 0);
    cr_assert_eq(mp_join(&o.task), 0);
    while (o.err == 0 && !atomic_load(&o.closed))
        usleep(1000); /* the stream lives in this frame until its close is done */
    if (o.err != 0)
        cr_assert_eq(mp_tcp_close(&o.c, NULL), -EBADF, "a failed accept leaves c not open");
    return o.err;
}

static int accept_once(mp_runtime *rt, mp_tcp_listener *l)
{
    return accept_once_with(rt, l, 0);
}

/* l listening on 127.0.0.1 (an ephemeral port), and a client connected to it: its fd. */
static int listen_and_connect(mp_runtime *rt, mp_tcp_listener *l)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(rt, l, (struct sockaddr *)&a, 8, 0), 0);
    struct sockaddr_storage ss;
    cr_assert_eq(mp_tcp_listener_addr(l, &ss), 0);
    return test_connect(ntohs(((struct sockaddr_in *)&ss)->sin_port));
}

Test(listener, a_read_buffer_over_the_maximum_is_refused_before_the_accept, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp_listener l;
    int fd = listen_and_connect(rt, &l);
    cr_assert_eq(accept_once_with(rt, &l, (size_t)MP_TCP_BUF_MAX + 1), -EINVAL);
    /* The connection was not taken: it is still queued for the next accept. */
    cr_assert_eq(accept_once_with(rt, &l, MP_TCP_BUF_MAX), 0);
    close(fd);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(listener, interrupt_ends_a_wait_in_accept_once, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp_listener l;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(rt, &l, (struct sockaddr *)&a, 8, 0), 0);
    mp_tcp_listener_interrupt(&l);
    cr_assert_eq(accept_once(rt, &l), -EINTR);
    /* Once only: the next accept takes a connection. */
    struct sockaddr_storage ss;
    cr_assert_eq(mp_tcp_listener_addr(&l, &ss), 0);
    int fd = test_connect(ntohs(((struct sockaddr_in *)&ss)->sin_port));
    cr_assert_eq(accept_once(rt, &l), 0);
    close(fd);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(listener, an_adopted_socket_serves_and_bad_ones_are_refused, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp_listener l;
    /* Not a socket, a socket not listening, a datagram socket. */
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(mp_tcp_listen_fd(rt, &l, p[0]), -ENOTSOCK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(mp_tcp_listen_fd(rt, &l, s), -EINVAL);
    int d = socket(AF_INET, SOCK_DGRAM, 0);
    cr_assert_eq(mp_tcp_listen_fd(rt, &l, d), -EINVAL);
    cr_assert_eq(mp_tcp_listen_fd(rt, &l, -1), -EINVAL);
    close(p[0]);
    close(p[1]);
    close(d);
    /* A bound, listening socket, as systemd passes one. */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(s, 8), 0);
    socklen_t al = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &al);
    cr_assert_eq(mp_tcp_listen_fd(rt, &l, s), 0);
    cr_assert_eq(mp_tcp_listener_fileno(&l), s);
    int fd = test_connect(ntohs(a.sin_port));
    cr_assert_eq(accept_once(rt, &l), 0);
    close(fd);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    /* The listener owned s: it is closed now. */
    cr_assert_eq(fcntl(s, F_GETFD), -1);
}

Test(listener, reuseport_and_address_in_use, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp_listener a, b, c;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(mp_tcp_listen(rt, &a, (struct sockaddr *)&sa, 0, MP_TCP_REUSEPORT), 0);
    struct sockaddr_storage ss;
    mp_tcp_listener_addr(&a, &ss);
    sa.sin_port = ((struct sockaddr_in *)&ss)->sin_port;
    cr_assert_eq(mp_tcp_listen(rt, &b, (struct sockaddr *)&sa, 0, MP_TCP_REUSEPORT), 0);
    cr_assert_eq(mp_tcp_listen(rt, &c, (struct sockaddr *)&sa, 0, 0), -EADDRINUSE);
    cr_assert_eq(mp_tcp_listener_fileno(&c), -EBADF);
    cr_assert_eq(mp_tcp_listen(rt, &c, NULL, 0, 0), -EINVAL);
    struct sockaddr bad = {.sa_family = AF_UNIX};
    cr_assert_eq(mp_tcp_listen(rt, &c, &bad, 0, 0), -EINVAL);
    cr_assert_eq(mp_tcp_listen(rt, &c, (struct sockaddr *)&sa, 0, 1u << 7), -EINVAL);
    cr_assert_eq(mp_tcp_listener_close(&a, NULL), 0);
    cr_assert_eq(mp_tcp_listener_close(&b, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(listener, out_of_descriptors_is_an_error_then_the_connection_is_taken, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_tcp_listener l;
    int fd = listen_and_connect(rt, &l);
    /* Use up every descriptor below the limit, then lower the limit to what is open. */
    struct rlimit old;
    getrlimit(RLIMIT_NOFILE, &old);
    int hog[64], nhog = 0;
    int top = dup(0);
    close(top);
    struct rlimit low = {.rlim_cur = (rlim_t)top, .rlim_max = old.rlim_max};
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    while (nhog < 64 && (hog[nhog] = dup(0)) >= 0)
        nhog++;
    cr_assert_eq(accept_once(rt, &l), -EMFILE);
    cr_assert_eq(accept_once(rt, &l), -EMFILE, "no busy loop: the same error at once");
    for (int i = 0; i < nhog; i++)
        close(hog[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    cr_assert_eq(accept_once(rt, &l), 0, "the queued connection is taken once fds are back");
    close(fd);
    cr_assert_eq(mp_tcp_listener_close(&l, NULL), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}
