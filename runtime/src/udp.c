/* udp.c: UDP sockets for tasks (mp_udp in magpie_io.h), with the readiness protocol of io.c:
 * the task sends and receives on its own worker and waits for the loop's edge only when the
 * kernel would block.
 *
 * A datagram socket reports no peer close: EPOLLERR (a queued ICMP error on a connected
 * socket) raises both edges, and the next recv or send returns that error once; the socket
 * stays usable. Batches go through recvmmsg/sendmmsg: one system call for many datagrams,
 * which is where a UDP server's time goes (the per-call cost, not the copy).
 *
 * The write edge is asked for only once a send has said EAGAIN. A UDP socket's write space
 * comes back as each datagram leaves, so with EPOLLOUT in the set every send raises an edge:
 * an event that wakes the driver for nothing and bumps the tick, making the sender's next
 * EAGAIN clear of READ fail and its receive run once more. The socket is registered for
 * EPOLLIN alone and optimistic about writing; the first send that would block adds EPOLLOUT
 * (EPOLL_CTL_MOD, once, kept for the socket's life) before it clears WRITE:
 *
 *   task                                       kernel / loop
 *   sendto() -> EAGAIN
 *                                              space frees: no edge (EPOLLOUT not asked for)
 *   clear WRITE, wait                          -> nobody wakes the task
 *
 * is prevented because a MOD on a socket that is already writable queues the event at once,
 * and the MOD comes before the clear: the event's tick then fails the clear, or its WRITE bit
 * is seen by the wait. A second task that finds the flag set while the first is still before
 * its MOD waits for the same event, which the MOD raises whenever it runs.
 */
#include "internal.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

enum { MAX_BATCH = 64 };

/* On the loop's side, once the socket left the epoll set. */
static void udp_close(mp_io *io)
{
    mp_udp *u = mp_container_of(io, mp_udp, io);
    mp__io_close_fd(io);
    if (mp__io_closed(io) && u->on_closed)
        u->on_closed(u); /* the last touch: it may free u */
}

/* After a system call between mp__io_enter() and here: errno is the call's. */
static void leave(mp_udp *u)
{
    int e = errno;
    mp__io_leave(&u->io);
    errno = e;
}

static socklen_t addr_len(const struct sockaddr *a)
{
    return a->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

int mp_udp_bind(mp_runtime *rt, mp_udp *u, const struct sockaddr *addr, unsigned flags)
{
    memset(u, 0, sizeof *u);
    u->io.fd = -1;
    if (!rt || (flags & ~(unsigned)(MP_TCP_REUSEPORT | MP_TCP_IPV6ONLY)))
        return -EINVAL;
    socklen_t len;
    int fd = mp__inet_socket(addr, SOCK_DGRAM, &len);
    if (fd < 0)
        return fd;
    int one = 1, rc = 0;
    if (((flags & MP_TCP_REUSEPORT) &&
         (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
          setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)) ||
        (addr->sa_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){(flags & MP_TCP_IPV6ONLY) != 0},
                    sizeof(int)) != 0) ||
        bind(fd, addr, len) != 0)
        rc = -errno;
    if (rc == 0) {
        /* Optimistic both ways, as an accepted stream: room to send, and a datagram may be
         * queued between the bind and the registration, whose edge epoll would not report
         * until the next datagram (the first receive tries the kernel; EAGAIN clears it). */
        mp__io_init(&u->io, rt, fd, MP__IO_READ | MP__IO_WRITE, udp_close);
        atomic_init(&u->write_armed, false);
        rc = mp__io_register(&u->io, EPOLLIN);
    }
    if (rc != 0) {
        close(fd);
        u->io.fd = -1;
    }
    return rc;
}

int mp_udp_connect(mp_udp *u, const struct sockaddr *addr)
{
    if (!mp__io_enter(&u->io))
        return -EBADF;
    int rc = -EINVAL;
    if (addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6))
        rc = connect(u->io.fd, addr, addr_len(addr)) == 0 ? 0 : -errno;
    mp__io_leave(&u->io);
    return rc;
}

int mp_udp_local_addr(mp_udp *u, struct sockaddr_storage *out)
{
    return mp__sock_name(&u->io, out, false);
}

int mp_udp_fileno(const mp_udp *u)
{
    return mp__io_is_open(&u->io) ? u->io.fd : -EBADF;
}

static bool would_block(int e)
{
    return e == EAGAIN || e == EWOULDBLOCK;
}

/* A send said EAGAIN: add EPOLLOUT to the socket's events, once (see the top of this file).
 * Between mp__io_enter() and mp__io_leave(), before WRITE is cleared. 0 or -errno. */
static int arm_write(mp_udp *u)
{
    /* Relaxed: only the MOD's effect matters, and epoll_ctl orders itself with the events. */
    if (atomic_load_explicit(&u->write_armed, memory_order_relaxed) ||
        atomic_exchange_explicit(&u->write_armed, true, memory_order_relaxed))
        return 0;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = &u->io};
    if (epoll_ctl(u->io.rt->reactor.epfd, EPOLL_CTL_MOD, u->io.fd, &ev) == 0)
        return 0;
    int rc = -errno;
    atomic_store_explicit(&u->write_armed, false, memory_order_relaxed);
    return rc;
}

/* Ends a send begun with mp__io_enter(); failed: it returned -1, and errno is its. true: send
 * again (EINTR, or EAGAIN once the write edge is asked for and WRITE cleared); false: stop,
 * with *err 0 or the error. */
static bool send_end(mp_udp *u, uint64_t seen, bool failed, int *err)
{
    int e = failed ? errno : 0, armed = failed && would_block(e) ? arm_write(u) : 0;
    mp__io_leave(&u->io);
    *err = 0;
    if (!failed)
        return false;
    if (e == EINTR)
        return true;
    if (would_block(e) && armed == 0) {
        mp__io_clear(&u->io, seen, MP__IO_WRITE);
        return true;
    }
    *err = armed ? armed : -e;
    return false;
}

mp_poll mp_udp_send_poll(mp_udp *u, mp_context *cx, const void *data, size_t len,
                         const struct sockaddr *to, int *err)
{
    for (;;) {
        uint64_t seen;
        if (mp__io_poll(&u->io, cx, MP__IO_WRITE, &seen, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
        if (!mp__io_enter(&u->io))
            continue; /* closed meanwhile: mp__io_poll() reports it */
        ssize_t n =
            sendto(u->io.fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT, to, to ? addr_len(to) : 0);
        if (!send_end(u, seen, n < 0, err))
            return MP_READY;
    }
}

mp_poll mp_udp_recv_poll(mp_udp *u, mp_context *cx, void *buf, size_t cap, size_t *len,
                         bool *truncated, struct sockaddr_storage *from, int *err)
{
    *len = 0;
    if (truncated)
        *truncated = false;
    for (;;) {
        uint64_t seen;
        if (mp__io_poll(&u->io, cx, MP__IO_READ, &seen, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
        struct iovec iov = {.iov_base = buf, .iov_len = cap};
        struct msghdr mh = {
            .msg_name = from,
            .msg_namelen = from ? sizeof *from : 0,
            .msg_iov = &iov,
            .msg_iovlen = 1,
        };
        if (!mp__io_enter(&u->io))
            continue;
        ssize_t n = recvmsg(u->io.fd, &mh, MSG_DONTWAIT);
        leave(u);
        if (n >= 0) {
            *len = (size_t)n;
            if (truncated)
                *truncated = (mh.msg_flags & MSG_TRUNC) != 0;
            return MP_READY;
        }
        if (errno == EINTR)
            continue;
        if (would_block(errno)) {
            mp__io_clear(&u->io, seen, MP__IO_READ);
            continue;
        }
        *err = -errno;
        return MP_READY;
    }
}

mp_poll mp_udp_recv_batch_poll(mp_udp *u, mp_context *cx, mp_udp_msg *msgs, unsigned n,
                               unsigned *done, int *err)
{
    *done = 0;
    if (n > MAX_BATCH)
        n = MAX_BATCH;
    struct mmsghdr mm[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    for (;;) {
        uint64_t seen;
        if (mp__io_poll(&u->io, cx, MP__IO_READ, &seen, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
        for (unsigned i = 0; i < n; i++) {
            iov[i] = (struct iovec){.iov_base = msgs[i].buf, .iov_len = msgs[i].len};
            mm[i] = (struct mmsghdr){.msg_hdr = {
                                         .msg_name = &msgs[i].addr,
                                         .msg_namelen = sizeof msgs[i].addr,
                                         .msg_iov = &iov[i],
                                         .msg_iovlen = 1,
                                     }};
        }
        if (!mp__io_enter(&u->io))
            continue;
        int got = recvmmsg(u->io.fd, mm, n, MSG_DONTWAIT, NULL);
        leave(u);
        if (got > 0) {
            for (int i = 0; i < got; i++) {
                msgs[i].len = mm[i].msg_len;
                msgs[i].truncated = (mm[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
            }
            if ((unsigned)got < n)
                mp__io_clear(&u->io, seen, MP__IO_READ); /* drained */
            *done = (unsigned)got;
            return MP_READY;
        }
        if (got == 0 || errno == EINTR)
            continue;
        if (would_block(errno)) {
            mp__io_clear(&u->io, seen, MP__IO_READ);
            continue;
        }
        *err = -errno;
        return MP_READY;
    }
}

mp_poll mp_udp_send_batch_poll(mp_udp *u, mp_context *cx, const mp_udp_msg *msgs, unsigned n,
                               unsigned *done, int *err)
{
    *done = 0;
    *err = 0;
    struct mmsghdr mm[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    while (*done < n) {
        uint64_t seen;
        if (mp__io_poll(&u->io, cx, MP__IO_WRITE, &seen, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0)
            return MP_READY;
        unsigned k = n - *done < MAX_BATCH ? n - *done : MAX_BATCH;
        for (unsigned i = 0; i < k; i++) {
            const mp_udp_msg *m = &msgs[*done + i];
            iov[i] = (struct iovec){.iov_base = m->buf, .iov_len = m->len};
            bool named = m->addr.ss_family == AF_INET || m->addr.ss_family == AF_INET6;
            mm[i] = (struct mmsghdr){
                .msg_hdr = {
                    .msg_name = named ? (void *)&m->addr : NULL,
                    .msg_namelen = named ? addr_len((const struct sockaddr *)&m->addr) : 0,
                    .msg_iov = &iov[i],
                    .msg_iovlen = 1,
                }};
        }
        if (!mp__io_enter(&u->io))
            continue;
        int sent = sendmmsg(u->io.fd, mm, k, MSG_NOSIGNAL | MSG_DONTWAIT);
        bool again = send_end(u, seen, sent < 0, err);
        if (sent > 0)
            *done += (unsigned)sent;
        else if (!again) {
            if (*err == 0)
                *err = -EIO; /* sendmmsg sent nothing and said nothing */
            return MP_READY;
        }
    }
    return MP_READY;
}

void mp_udp_interrupt(mp_udp *u)
{
    mp__io_interrupt(&u->io);
}

void mp_udp_cancel_recv(mp_udp *u)
{
    mp__io_cancel(&u->io, true);
}

void mp_udp_cancel_send(mp_udp *u)
{
    mp__io_cancel(&u->io, false);
}

static void set_closed_cb(mp_io *io, mp__fn cb)
{
    mp_container_of(io, mp_udp, io)->on_closed = (void (*)(mp_udp *))cb;
}

static void run_closed_cb(mp_io *io)
{
    mp_udp *u = mp_container_of(io, mp_udp, io);
    if (u->on_closed)
        u->on_closed(u);
}

int mp_udp_close(mp_udp *u, void (*on_closed)(mp_udp *u))
{
    return mp__io_close(&u->io, set_closed_cb, (mp__fn)on_closed, run_closed_cb);
}
