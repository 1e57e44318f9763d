/* tcp.c: TCP streams served to tasks (mp_tcp in magpie_io.h): reads into the stream's buffer,
 * writes, connecting, socket options, close.
 *
 * A stream's readiness is an mp_io (io.c, which draws the lost wake-up the tick prevents); its
 * read buffer comes from readbuf.c. A stream comes from one of four places: a socket the caller
 * accepted (mp_tcp_open), a task's listener (listener.c), a connect (here), or a libuv accept
 * on the loop's thread (mp_tcp_accept), whose socket is duplicated out of libuv's handle; every
 * one a bare socket that the close closes itself (io.c, "Closing").
 *
 * Connecting: the socket is registered for EPOLLOUT before the kernel can finish the
 * handshake, with no readiness bits. The end of the handshake, success or failure, raises
 * the write edge (EPOLLOUT, or EPOLLERR/EPOLLHUP), and SO_ERROR says which. A connection that
 * completed before the registration is reported by the registration itself (epoll_ctl ADD
 * queues an event for a socket already ready).
 */
#include "internal.h"

#include <fcntl.h>
#include <sys/sendfile.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#define STREAM_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP)

/* read() and send() through syscall(): glibc's wrappers are cancellation points and switch
 * asynchronous cancellation on and off around every call (~60 instructions per request for
 * the pair), which tasks, never cancelled as threads, do not need. Same errno contract. */
static ssize_t sock_read(int fd, void *buf, size_t len)
{
    return syscall(SYS_read, fd, buf, len);
}

static ssize_t sock_send(int fd, const void *buf, size_t len, int flags)
{
    return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

/* The loop's side, as the object's last touch: on_closed, if a close published it. */
static void stream_closed(mp_tcp *c)
{
    /* The read buffer is the owner's, given back by its mp_tcp_close() (set_closed_cb): a
     * close by the shutdown alone must not race with the owner's close for it. */
    if (mp__io_closed(&c->io) && c->on_closed)
        c->on_closed(c); /* it may free c */
}

/* On the loop's side, once the socket left the epoll set. */
static void stream_close(mp_io *io)
{
    mp__io_close_fd(io);
    stream_closed(mp_container_of(io, mp_tcp, io));
}

static void stream_init(mp_runtime *rt, mp_tcp *c, int fd, size_t bufsize, uint64_t bits)
{
    memset(c, 0, sizeof *c);
    mp__io_init(&c->io, rt, fd, bits, stream_close);
    /* Over MP_TCP_BUF_MAX: refused by each open before the stream reads. */
    c->cap = (uint32_t)(bufsize == 0 || bufsize > MP_TCP_BUF_MAX ? MP__TCP_DEFAULT_BUF : bufsize);
    c->buf = NULL;        /* taken at the first read */
    c->read_ready_ns = 0; /* ready_ns's value before any readable event */
}

static void accept_handle_closed(uv_handle_t *h)
{
    free(h);
}

int mp_tcp_accept(mp_runtime *rt, mp_tcp *c, uv_stream_t *server, size_t bufsize)
{
    stream_init(rt, c, -1, bufsize, 0); /* not open until mp_tcp_open() below */
    uv_tcp_t *h = malloc(sizeof *h);
    if (h == NULL)
        return -ENOMEM; /* not open: nothing to close */
    int rc = uv_tcp_init(&rt->reactor.loop, h);
    if (rc != 0) {
        free(h);
        return rc;
    }
    /* libuv accepts only into a handle, and closes the socket with it: the stream takes a
     * duplicate and the handle goes (its memory a loop turn later, libuv's rule), so that the
     * stream is a bare socket as any other (256 bytes of handle an accepted stream spares). */
    int fd = -1;
    rc = uv_accept(server, (uv_stream_t *)h); /* non-blocking: accept4(SOCK_NONBLOCK) */
    if (rc == 0) {
        uv_os_fd_t ufd;
        rc = uv_fileno((uv_handle_t *)h, &ufd);
        if (rc == 0 && (fd = fcntl(ufd, F_DUPFD_CLOEXEC, 0)) < 0)
            rc = -errno;
    }
    uv_close((uv_handle_t *)h, accept_handle_closed);
    if (rc != 0)
        return rc;
    return mp_tcp_open(rt, c, fd, bufsize);
}

int mp_tcp_open(mp_runtime *rt, mp_tcp *c, int fd, size_t bufsize)
{
    /* Optimistic: the first read is tried before any event (a client usually sends its
     * request with the handshake); the socket has room for a first write. */
    stream_init(rt, c, fd, bufsize, MP__IO_READ | MP__IO_WRITE);
    if (fd < 0) {
        c->io.fd = -1;
        return -EBADF;
    }
    int rc =
        rt != NULL && bufsize <= MP_TCP_BUF_MAX ? mp__io_register(&c->io, STREAM_EVENTS) : -EINVAL;
    if (rc != 0) {
        close(fd);
        c->io.fd = -1;
    }
    return rc;
}

int mp__inet_socket(const struct sockaddr *addr, int type, socklen_t *len)
{
    if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
        return -EINVAL;
    *len = addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int fd = socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    return fd >= 0 ? fd : -errno;
}

int mp_tcp_connect(mp_runtime *rt, mp_tcp *c, const struct sockaddr *addr, size_t bufsize)
{
    memset(c, 0, sizeof *c);
    c->io.fd = -1;
    socklen_t len;
    int fd = rt && bufsize <= MP_TCP_BUF_MAX ? mp__inet_socket(addr, SOCK_STREAM, &len) : -EINVAL;
    if (fd < 0)
        return fd;
    int rc = 0;
    while (connect(fd, addr, len) != 0) {
        if (errno == EINTR)
            continue; /* the attempt goes on in the background: wait for it as usual */
        if (errno != EINPROGRESS)
            rc = -errno;
        break;
    }
    if (rc == 0) {
        stream_init(rt, c, fd, bufsize, 0);
        c->connecting = true;
        rc = mp__io_register(&c->io, STREAM_EVENTS);
    }
    if (rc != 0) {
        close(fd);
        c->io.fd = -1;
    }
    return rc;
}

mp_poll mp_tcp_connect_poll(mp_tcp *c, mp_context *cx, mp_timer *timer, uint64_t deadline_ms,
                            int *err)
{
    if (!c->connecting) {
        *err = mp__io_is_open(&c->io) ? c->err == UV_EOF ? 0 : c->err : -EBADF;
        return MP_READY;
    }
    uint64_t seen;
    if (mp__io_poll(&c->io, cx, MP__IO_WRITE, &seen, err) == MP_PENDING) {
        if (!timer || mp_timer_poll(timer, deadline_ms, cx) != MP_READY)
            return MP_PENDING;
        c->err = *err = -ETIMEDOUT;
        mp__io_disown(&c->io);
    } else if (*err == 0) { /* the write edge: the handshake ended */
        int so = 0;
        socklen_t sl = sizeof so;
        if (getsockopt(c->io.fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0)
            so = errno;
        c->err = -so;
        *err = -so;
    }
    c->connecting = false;
    if (timer)
        mp_timer_cancel(timer);
    return MP_READY;
}

static int set_opt(const mp_tcp *c, int level, int name, int v)
{
    if (!mp__io_is_open(&c->io))
        return -EBADF;
    return setsockopt(c->io.fd, level, name, &v, sizeof v) == 0 ? 0 : -errno;
}

int mp_tcp_set_nodelay(mp_tcp *c, bool on)
{
    return set_opt(c, IPPROTO_TCP, TCP_NODELAY, on);
}

int mp_tcp_set_keepalive(mp_tcp *c, unsigned idle_s)
{
    if (idle_s > INT32_MAX)
        return -EINVAL;
    int rc = set_opt(c, SOL_SOCKET, SO_KEEPALIVE, idle_s != 0);
    if (rc == 0 && idle_s != 0)
        rc = set_opt(c, IPPROTO_TCP, TCP_KEEPIDLE, (int)idle_s);
    return rc;
}

int mp_tcp_shutdown(mp_tcp *c)
{
    if (!mp__io_is_open(&c->io))
        return -EBADF;
    if (c->write_done != 0)
        return -EBUSY; /* a write that returned MP_PENDING is not finished */
    return shutdown(c->io.fd, SHUT_WR) == 0 ? 0 : -errno;
}

int mp_tcp_set_buffers(mp_tcp *c, int sndbuf, int rcvbuf)
{
    int rc = 0;
    if (sndbuf > 0)
        rc = set_opt(c, SOL_SOCKET, SO_SNDBUF, sndbuf);
    if (rc == 0 && rcvbuf > 0)
        rc = set_opt(c, SOL_SOCKET, SO_RCVBUF, rcvbuf);
    return rc;
}

int mp__sock_name(mp_io *io, struct sockaddr_storage *out, bool peer)
{
    if (!mp__io_enter(io))
        return -EBADF;
    socklen_t len = sizeof *out;
    int rc = peer ? getpeername(io->fd, (struct sockaddr *)out, &len)
                  : getsockname(io->fd, (struct sockaddr *)out, &len);
    rc = rc == 0 ? 0 : -errno;
    mp__io_leave(io);
    return rc;
}

int mp_tcp_local_addr(mp_tcp *c, struct sockaddr_storage *out)
{
    return mp__sock_name(&c->io, out, false);
}

int mp_tcp_peer_addr(mp_tcp *c, struct sockaddr_storage *out)
{
    return mp__sock_name(&c->io, out, true);
}

int mp_tcp_fileno(const mp_tcp *c)
{
    return mp__io_is_open(&c->io) ? c->io.fd : -EBADF;
}

uint64_t mp_tcp_read_time(const mp_tcp *c)
{
    return c->read_ns;
}

size_t mp_tcp_write_progress(const mp_tcp *c)
{
    return c->write_done;
}

void mp_tcp_disown(mp_tcp *c)
{
    mp__io_disown(&c->io);
}

static mp_poll view(mp_tcp *c, const char **data, size_t *len, int *err)
{
    if (c->tail > c->head) {
        *data = c->buf + c->head;
        *len = c->tail - c->head;
        *err = 0;
    } else {
        *data = NULL;
        *len = 0;
        *err = c->err;
    }
    return MP_READY;
}

mp_poll mp_tcp_read_poll(mp_tcp *c, mp_context *cx, const char **data, size_t *len, int *err)
{
    /* An interrupt goes before bytes already read (mp__io_poll() sees one only once they are
     * consumed). */
    if (mp__io_take_interrupt(&c->io)) {
        *data = NULL;
        *len = 0;
        *err = -EINTR;
        return MP_READY;
    }
    if (c->tail > c->head || c->err != 0)
        return view(c, data, len, err);
    c->head = c->tail = 0;
    for (;;) {
        uint64_t seen;
        if (mp__io_poll(&c->io, cx, MP__IO_READ, &seen, err) == MP_PENDING) {
            /* Everything read was consumed: an idle stream holds no buffer. The task is
             * polled by one worker at a time, so its waker being out already is no race. */
            mp__readbuf_give(c->buf, c->cap);
            c->buf = NULL;
            return MP_PENDING;
        }
        if (*err != 0) { /* -EBADF, -EINTR */
            *data = NULL;
            *len = 0;
            return MP_READY;
        }
        if (c->buf == NULL && (seen & MP__IO_CLOSED)) {
            /* The peer closed or failed: most often there is nothing left but the EOF, which
             * needs no buffer (a crowd of closing peers would otherwise take one each). */
            char b;
            ssize_t n = recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                c->err = n == 0 ? UV_EOF : -errno;
                return view(c, data, len, err);
            }
        }
        if (c->buf == NULL && (c->buf = mp__readbuf_take(c->cap)) == NULL) {
            c->err = -ENOMEM;
            return view(c, data, len, err);
        }
        ssize_t n = sock_read(c->io.fd, c->buf, c->cap);
        if (n > 0) {
            c->tail = (uint32_t)n; /* n <= cap */
            /* Relaxed: the acquire load of bits above ordered it after the event's store (a
             * later event's value is as good). A readable event this stream has not read
             * since gives its time; bytes left from an event already read from get the clock
             * (they may have waited long for a task that did not read: a blocked write), and
             * so do bytes read before any readable event. Not the tick: a write-only event
             * (EPOLLOUT, as at registration, before the first read) moves it without a time,
             * and a first read then took ready_ns's 0, whose deadlines had all passed. */
            uint64_t ready = atomic_load_explicit(&c->io.ready_ns, memory_order_relaxed);
            c->read_ns = ready != c->read_ready_ns ? ready : mp__now_ns();
            c->read_ready_ns = ready;
            if ((size_t)n < c->cap)
                mp__io_clear(&c->io, seen, MP__IO_READ); /* drained; more raises a new edge */
            return view(c, data, len, err);
        }
        if (n == 0) {
            c->err = UV_EOF;
            return view(c, data, len, err);
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            mp__io_clear(&c->io, seen, MP__IO_READ);
            continue;
        }
        c->err = -errno;
        return view(c, data, len, err);
    }
}

bool mp_tcp_maybe_readable(mp_tcp *c)
{
    if (c->tail > c->head || c->err != 0)
        return true;
    return (mp__io_load(&c->io) & (MP__IO_READ | MP__IO_CLOSED)) != 0;
}

void mp_tcp_interrupt(mp_tcp *c)
{
    mp__io_interrupt(&c->io);
}

void mp_tcp_consume(mp_tcp *c, size_t n)
{
    if (n > c->tail - c->head)
        MP__UNREACHABLE("consume %zu of %zu buffered bytes", n, (size_t)(c->tail - c->head));
    c->head += (uint32_t)n;
}

static mp_poll write_flags(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err,
                           int flags)
{
    size_t done = c->write_done; /* > 0 only when continuing a write that would have blocked */
    while (done < len) {
        uint64_t seen;
        if (mp__io_poll(&c->io, cx, MP__IO_WRITE, &seen, err) == MP_PENDING) {
            c->write_done = done;
            return MP_PENDING;
        }
        if (*err != 0) { /* -EBADF */
            c->write_done = 0;
            return MP_READY;
        }
        ssize_t n =
            sock_send(c->io.fd, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT | flags);
        if (n > 0) {
            done += (size_t)n;
            if (done < len)
                mp__io_clear(&c->io, seen, MP__IO_WRITE); /* the kernel buffer is full */
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            mp__io_clear(&c->io, seen, MP__IO_WRITE);
        } else {
            c->write_done = 0;
            *err = n < 0 ? -errno : -EPIPE;
            return MP_READY;
        }
    }
    c->write_done = 0;
    *err = 0;
    return MP_READY;
}

mp_poll mp_tcp_write_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err)
{
    return write_flags(c, cx, data, len, err, 0);
}

/* MSG_MORE corks this one send: its bytes wait for the next write or sendfile to fill a
 * segment with them (Linux sends them anyway after its 200 ms cork ceiling), TCP_NODELAY or
 * not. Cheaper than TCP_CORK, which takes a setsockopt to set and another to clear. */
mp_poll mp_tcp_write_more_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err)
{
    return write_flags(c, cx, data, len, err, MSG_MORE);
}

mp_poll mp_tcp_sendfile_poll(mp_tcp *c, mp_context *cx, int in_fd, off_t *offset, size_t count,
                             size_t *sent, int *err)
{
    *sent = 0;
    *err = 0;
    if (c->write_done != 0) {
        *err = -EBUSY; /* a write that returned MP_PENDING is not finished */
        return MP_READY;
    }
    while (count > 0) {
        uint64_t seen;
        if (mp__io_poll(&c->io, cx, MP__IO_WRITE, &seen, err) == MP_PENDING)
            return MP_PENDING;
        if (*err != 0) /* -EBADF */
            return MP_READY;
        /* A short count is not a full socket here (the file may have ended): the next call
         * finds out, with EAGAIN, and only then waits. */
        ssize_t n = sendfile(c->io.fd, in_fd, offset, count);
        if (n >= 0) {
            *sent = (size_t)n;
            return MP_READY;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            *err = -errno;
            return MP_READY;
        }
        mp__io_clear(&c->io, seen, MP__IO_WRITE);
    }
    return MP_READY;
}

static void set_closed_cb(mp_io *io, mp__fn cb)
{
    mp_tcp *c = mp_container_of(io, mp_tcp, io);
    /* The task is done reading: its buffer goes back now, not after the loop's close. */
    mp__readbuf_give(c->buf, c->cap);
    c->buf = NULL;
    c->on_closed = (void (*)(mp_tcp *))cb;
}

void mp_tcp_cancel_read(mp_tcp *c)
{
    mp__io_cancel(&c->io, true);
}

void mp_tcp_cancel_write(mp_tcp *c)
{
    mp__io_cancel(&c->io, false);
}

static void run_closed_cb(mp_io *io)
{
    mp_tcp *c = mp_container_of(io, mp_tcp, io);
    if (c->on_closed)
        c->on_closed(c);
}

int mp_tcp_close(mp_tcp *c, void (*on_closed)(mp_tcp *c))
{
    return mp__io_close(&c->io, set_closed_cb, (mp__fn)on_closed, run_closed_cb);
}
