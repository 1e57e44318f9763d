/* tcp.c: a TCP stream served to one task (mp_tcp in magpie.h).
 *
 * Reading runs on the loop: libuv reads into the stream's buffer at buf[tail..cap) and the
 * read callback publishes the new tail and wakes the task. The task reads buf[head..tail)
 * and consumes it. The spinlock guards the indices and flags between the two sides; the
 * bytes themselves are published by it too (written before the loop's unlock, read after
 * the task's lock). The buffer is only compacted by the task while no read is in flight, so
 * a region libuv was handed never moves. When the buffer is full, reading stops (the peer
 * sees TCP backpressure) and the task's consume resumes it through the loop.
 *
 * Writing is direct: the task calls send() on the socket, which the kernel serializes with
 * nothing else (libuv never writes this socket unless we ask it to). Only when the kernel
 * buffer is full does the rest go through uv_write on the loop, and the task waits for its
 * callback. MSG_NOSIGNAL: a peer reset is an error to the task, never a SIGPIPE.
 */
#include "internal.h"

#include <sys/socket.h>

static void lock(mp_tcp *c)
{
    mp__spin_lock(&c->lock);
}

static void unlock(mp_tcp *c)
{
    mp__spin_unlock(&c->lock);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    (void)suggested;
    mp_tcp *c = h->data;
    lock(c);
    c->reading = true;
    *out = uv_buf_init(c->buf + c->tail, (unsigned)(c->cap - c->tail));
    unlock(c);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    (void)b;
    mp_tcp *c = s->data;
    lock(c);
    c->reading = false;
    if (nread > 0)
        c->tail += (size_t)nread;
    else if (nread < 0 && c->err == 0)
        c->err = nread == UV_ENOBUFS ? 0 : (int)nread;
    bool stop = c->err != 0 || c->tail == c->cap || nread == UV_ENOBUFS;
    if (stop && c->err == 0)
        c->stopped = true;
    mp_waker w = c->reader;
    c->reader = (mp_waker){0};
    unlock(c);
    if (stop)
        uv_read_stop(s);
    mp_waker_wake(&w);
}

int mp_tcp_accept(mp_runtime *rt, mp_tcp *c, uv_stream_t *server, size_t bufsize)
{
    memset(c, 0, sizeof *c);
    c->rt = rt;
    c->cap = bufsize ? bufsize : 16384;
    c->buf = malloc(c->cap);
    if (!c->buf)
        return -ENOMEM;
    int rc = uv_tcp_init(&rt->reactor.loop, &c->handle);
    if (rc != 0)
        goto out_free_buf;
    c->handle.data = c;
    rc = uv_accept(server, (uv_stream_t *)&c->handle);
    if (rc == 0)
        rc = uv_fileno((uv_handle_t *)&c->handle, &c->fd);
    if (rc == 0)
        rc = uv_read_start((uv_stream_t *)&c->handle, alloc_cb, read_cb);
    if (rc != 0) {
        uv_close((uv_handle_t *)&c->handle, NULL); /* nothing else refers to it yet */
        goto out_free_buf;
    }
    mp__tcp_link(&rt->reactor, c);
    return 0;

out_free_buf:
    free(c->buf);
    c->buf = NULL;
    return rc;
}

mp_poll mp_tcp_read_poll(mp_tcp *c, mp_context *cx, const char **data, size_t *len, int *err)
{
    mp_waker old = {0};
    mp_poll r = MP_READY;
    lock(c);
    if (c->interrupted) {
        c->interrupted = false;
        *data = NULL;
        *len = 0;
        *err = -EINTR;
    } else if (c->tail > c->head) {
        *data = c->buf + c->head;
        *len = c->tail - c->head;
        *err = 0;
    } else if (c->err != 0) {
        *data = NULL;
        *len = 0;
        *err = c->err;
    } else {
        if (!mp_waker_will_wake(&c->reader, mp_context_waker(cx))) {
            old = c->reader;
            c->reader = mp_waker_clone(mp_context_waker(cx));
        }
        r = MP_PENDING;
    }
    unlock(c);
    mp_waker_drop(&old);
    return r;
}

void mp_tcp_interrupt(mp_tcp *c)
{
    /* Under the lock that also guards the reader's waker, as the read callback does: either
     * the task's read poll sees the flag, or it registered its waker first and we wake it. */
    lock(c);
    c->interrupted = true;
    mp_waker w = c->reader;
    c->reader = (mp_waker){0};
    unlock(c);
    mp_waker_wake(&w);
}

static void resume_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp_tcp *c = arg;
    lock(c);
    c->resuming = false;
    bool go =
        c->stopped && c->err == 0 && c->tail < c->cap && !uv_is_closing((uv_handle_t *)&c->handle);
    if (go)
        c->stopped = false;
    unlock(c);
    if (go && uv_read_start((uv_stream_t *)&c->handle, alloc_cb, read_cb) != 0) {
        lock(c);
        c->stopped = true;
        unlock(c);
    }
}

void mp_tcp_consume(mp_tcp *c, size_t n)
{
    bool resume = false;
    lock(c);
    if (n > c->tail - c->head)
        MP__UNREACHABLE("consume %zu of %zu buffered bytes", n, c->tail - c->head);
    c->head += n;
    if (!c->reading) {
        if (c->head == c->tail) {
            c->head = c->tail = 0;
        } else if (c->head > c->cap / 2) {
            memmove(c->buf, c->buf + c->head, c->tail - c->head);
            c->tail -= c->head;
            c->head = 0;
        }
    }
    if (c->stopped && !c->resuming && c->tail < c->cap) {
        c->resuming = true;
        resume = true;
    }
    unlock(c);
    if (resume)
        mp_loop_call(c->rt, &c->cmd_resume, resume_cmd, c);
}

static void write_cb(uv_write_t *req, int status)
{
    mp_tcp *c = req->data;
    lock(c);
    c->write_err = status;
    c->write_state = 2;
    mp_waker w = c->writer;
    c->writer = (mp_waker){0};
    unlock(c);
    mp_waker_wake(&w);
}

static void write_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp_tcp *c = arg;
    c->wreq.data = c;
    int rc = uv_is_closing((uv_handle_t *)&c->handle)
                 ? UV_ECANCELED
                 : uv_write(&c->wreq, (uv_stream_t *)&c->handle, &c->wbuf, 1, write_cb);
    if (rc != 0)
        write_cb(&c->wreq, rc);
}

mp_poll mp_tcp_write_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err)
{
    lock(c);
    int state = c->write_state;
    if (state == 2) {
        c->write_state = 0;
        *err = c->write_err;
        unlock(c);
        return MP_READY;
    }
    if (state == 1) {
        mp_waker old = {0};
        if (!mp_waker_will_wake(&c->writer, mp_context_waker(cx))) {
            old = c->writer;
            c->writer = mp_waker_clone(mp_context_waker(cx));
        }
        unlock(c);
        mp_waker_drop(&old);
        return MP_PENDING;
    }
    unlock(c);
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(c->fd, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            *err = n < 0 ? -errno : -EPIPE;
            return MP_READY;
        }
    }
    if (done == len) {
        *err = 0;
        return MP_READY;
    }
    /* The kernel buffer is full: the loop writes the rest when the socket drains. */
    lock(c);
    c->write_state = 1;
    c->writer = mp_waker_clone(mp_context_waker(cx));
    c->wbuf = uv_buf_init((char *)data + done, (unsigned)(len - done));
    unlock(c);
    if (mp_loop_call(c->rt, &c->cmd_write, write_cmd, c) != 0)
        write_cb(&c->wreq, UV_ECANCELED);
    return MP_PENDING;
}

static void close_cb(uv_handle_t *h)
{
    mp_tcp *c = h->data;
    mp__tcp_unlink(&c->rt->reactor, c);
    lock(c);
    mp_waker r = c->reader, w = c->writer;
    c->reader = c->writer = (mp_waker){0};
    unlock(c);
    mp_waker_drop(&r);
    mp_waker_drop(&w);
    free(c->buf);
    c->buf = NULL;
    if (c->on_closed)
        c->on_closed(c);
}

static void close_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp_tcp *c = arg;
    if (!uv_is_closing((uv_handle_t *)&c->handle))
        uv_close((uv_handle_t *)&c->handle, close_cb);
}

void mp_tcp_close(mp_tcp *c, void (*on_closed)(mp_tcp *c))
{
    c->on_closed = on_closed;
    if (mp_loop_call(c->rt, &c->cmd_close, close_cmd, c) != 0)
        MP__UNREACHABLE("%s", "mp_tcp_close after the loop closed");
}

/* The reactor's list of open streams, so that shutdown can close them with close_cb. Loop
 * side only. */
void mp__tcp_link(mp__reactor *r, mp_tcp *c)
{
    c->prev = NULL;
    c->next = r->tcps;
    if (r->tcps)
        r->tcps->prev = c;
    r->tcps = c;
}

void mp__tcp_unlink(mp__reactor *r, mp_tcp *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        r->tcps = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

void mp__tcp_close_all(mp__reactor *r)
{
    for (mp_tcp *c = r->tcps; c; c = c->next)
        close_cmd(&r->loop, c);
}
