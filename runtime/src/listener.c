/* listener.c: a listening TCP socket owned by a task (mp_tcp_listener in magpie_io.h).
 *
 * The accepting task calls accept4() itself, on its worker, and waits for the read edge of the
 * listening socket (io.c's protocol) only when the kernel's queue is empty: a burst of
 * connections is taken one poll at a time with no trip through the loop. An accepted socket
 * becomes a bare stream (tcp.c), registered in the same epoll set.
 *
 * Out of descriptors (EMFILE, ENFILE) or memory: the connection stays in the kernel's queue and
 * the read edge stays raised, so accepting again at once fails again at once. The poll reports
 * the error and leaves the pause to the caller (a timer), as nginx pauses its accepts for a
 * while rather than spin.
 */
#include "internal.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

/* On the loop's side, once the socket left the epoll set. */
static void listener_close(mp_io *io)
{
    mp_tcp_listener *l = mp_container_of(io, mp_tcp_listener, io);
    mp__io_close_fd(io);
    if (mp__io_closed(io) && l->on_closed)
        l->on_closed(l); /* the last touch: it may free l */
}

static int adopt(mp_runtime *rt, mp_tcp_listener *l, int fd)
{
    memset(l, 0, sizeof *l);
    /* Optimistic: connections may be queued already (an adopted socket). */
    mp__io_init(&l->io, rt, fd, MP__IO_READ, listener_close);
    int rc = mp__io_register(&l->io, EPOLLIN);
    if (rc != 0)
        l->io.fd = -1;
    return rc;
}

int mp_tcp_listen(mp_runtime *rt, mp_tcp_listener *l, const struct sockaddr *addr, int backlog,
                  unsigned flags)
{
    memset(l, 0, sizeof *l);
    l->io.fd = -1;
    if (!rt || backlog < 0 || (flags & ~(unsigned)(MP_TCP_REUSEPORT | MP_TCP_IPV6ONLY)))
        return -EINVAL;
    socklen_t len;
    int fd = mp__inet_socket(addr, SOCK_STREAM, &len);
    if (fd < 0)
        return fd;
    int one = 1, rc = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        ((flags & MP_TCP_REUSEPORT) &&
         setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) ||
        (addr->sa_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){(flags & MP_TCP_IPV6ONLY) != 0},
                    sizeof(int)) != 0) ||
        bind(fd, addr, len) != 0 || listen(fd, backlog ? backlog : SOMAXCONN) != 0)
        rc = -errno;
    if (rc == 0)
        rc = adopt(rt, l, fd);
    if (rc != 0) {
        close(fd);
        l->io.fd = -1;
    }
    return rc;
}

int mp_tcp_listen_fd(mp_runtime *rt, mp_tcp_listener *l, int fd)
{
    memset(l, 0, sizeof *l);
    l->io.fd = -1;
    if (!rt || fd < 0)
        return -EINVAL;
    int type = 0, acc = 0;
    socklen_t sl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &sl) != 0)
        return -errno;
    sl = sizeof acc;
    if (type != SOCK_STREAM || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl) != 0 || !acc)
        return -EINVAL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
        return -errno;
    return adopt(rt, l, fd);
}

int mp_tcp_listener_addr(mp_tcp_listener *l, struct sockaddr_storage *out)
{
    return mp__sock_name(&l->io, out, false);
}

int mp_tcp_listener_fileno(const mp_tcp_listener *l)
{
    return mp__io_is_open(&l->io) ? l->io.fd : -EBADF;
}

mp_poll mp_tcp_accept_poll(mp_tcp_listener *l, mp_context *cx, mp_tcp *c, size_t bufsize, int *err)
{
    if (bufsize > MP_TCP_BUF_MAX) { /* refused before a connection is taken */
        memset(c, 0, sizeof *c);
        c->io.fd = -1;
        *err = -EINVAL;
        return MP_READY;
    }
    for (;;) {
        uint64_t seen;
        if (mp__io_poll(&l->io, cx, MP__IO_READ, &seen, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0) {
            memset(c, 0, sizeof *c); /* closed: its close runs on_closed at once */
            c->io.fd = -1;
            return MP_READY;
        }
        if (!mp__io_enter(&l->io))
            continue; /* closed meanwhile: mp__io_poll() reports it */
        int fd = accept4(l->io.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int e = errno;
        mp__io_leave(&l->io);
        errno = e;
        if (fd >= 0) {
            *err = mp_tcp_open(l->io.rt, c, fd, bufsize); /* closes fd on an error */
            return MP_READY;
        }
        switch (errno) {
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
            mp__io_clear(&l->io, seen, MP__IO_READ);
            continue;
        case EINTR:
        case ECONNABORTED: /* the peer gave up while queued: take the next */
        case EPROTO:
            continue;
        default:
            *err = -errno;
            memset(c, 0, sizeof *c);
            c->io.fd = -1;
            return MP_READY;
        }
    }
}

void mp_tcp_listener_interrupt(mp_tcp_listener *l)
{
    mp__io_interrupt(&l->io);
}

void mp_tcp_listener_cancel_accept(mp_tcp_listener *l)
{
    mp__io_cancel(&l->io, true);
}

static void set_closed_cb(mp_io *io, mp__fn cb)
{
    mp_container_of(io, mp_tcp_listener, io)->on_closed = (void (*)(mp_tcp_listener *))cb;
}

static void run_closed_cb(mp_io *io)
{
    mp_tcp_listener *l = mp_container_of(io, mp_tcp_listener, io);
    if (l->on_closed)
        l->on_closed(l);
}

int mp_tcp_listener_close(mp_tcp_listener *l, void (*on_closed)(mp_tcp_listener *l))
{
    return mp__io_close(&l->io, set_closed_cb, (mp__fn)on_closed, run_closed_cb);
}
