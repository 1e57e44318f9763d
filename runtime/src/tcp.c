/* tcp.c: a TCP stream served to one task (mp_tcp in magpie.h).
 *
 * The task does its own I/O: it read()s into the stream's buffer and send()s on the socket,
 * like nginx and Tokio, so a request costs one read and one send on whichever worker runs
 * the task, and the loop's thread only learns about readiness. libuv cannot be asked for
 * that (its reads and uv_poll are level-triggered, so each epoll_wait would poll again every
 * socket it reported the time before): each runtime has an edge-triggered epoll set of its
 * own (reactor.c), where its driver waits, with libuv's own fd in the set. An event there sets
 * readiness bits in the stream's `io` word and wakes the waiting task; the task clears a bit
 * when the kernel says it would block (EAGAIN, or a short read or send: the socket buffer
 * was drained or filled) and waits for the next edge.
 *
 * The lost wake-up this must prevent:
 *
 *   task                                       loop thread
 *   read() -> EAGAIN
 *                                              data arrives: edge, event -> set R_READY
 *   clear R_READY                              (the task is not waiting: nobody is woken)
 *   wait for the next edge                     -> no edge comes: the data sits unread
 *
 * Fixed with a tick: every event adds TICK to `io` along with its bits, and the task clears
 * a bit with a CAS from the value it loaded before its read, which fails if an event came in
 * between; then it reads again. Waiting is the other half: the task stores its waker and
 * re-checks the bit under the stream's lock, and the loop takes the waker under the same lock
 * after setting the bit, so either the task sees the bit or the loop sees the waker.
 *
 * Peer close and errors (EPOLLRDHUP, EPOLLHUP, EPOLLERR) set R_CLOSED, which is never
 * cleared: a short read can be followed by an EOF that raises no further edge.
 *
 * The read buffer is held only while there is something to read or to consume: it is taken
 * just before a read() and given back when the task has consumed all of it and is about to
 * wait for the next edge, so an idle keep-alive connection holds none. That is one take and
 * one give per keep-alive request, so buffers of the default size go first to a cache of the
 * calling thread's (at most MP__TCP_LOCAL_BUFS: a worker has one out at a time in that
 * pattern, since a task gives its buffer back before it waits), with no lock and no atomic
 * read-modify-write; past that to a process-wide free list of at most POOL_MAX under a spin
 * lock; past that to free(). Other sizes go straight to malloc and free. A thread's cache
 * goes to the free list when the thread exits (a pthread key's destructor).
 */
#include "internal.h"

#include <sys/epoll.h>
#include <sys/socket.h>

enum {
    R_READY = 1u << 0,
    W_READY = 1u << 1,
    R_CLOSED = 1u << 2, /* sticky: reads never block again */
    TICK = 1u << 3,
};

enum { DEFAULT_BUF = 16384, POOL_MAX = 64 };

/* mp_tcp.state: zero (a zeroed or failed stream) is CLOSED, so misuse is told apart from a
 * stream without a state machine of its own. */
enum { CLOSED = 0, OPEN = 1, CLOSING = 2 };

/* The free list of DEFAULT_BUF buffers, linked through their first bytes. */
static struct {
    _Atomic uint32_t lock;
    void *head;
    size_t count;
} pool;
/* Relaxed: statistics (mp_tcp_buffer_stats), ordered by nothing. Buffers taken minus given
 * by threads that have exited, and by threads before they had a cache. */
static _Atomic int64_t bufs_in_use;

/* A thread's cache. Written by its thread only; count and net are atomics so that
 * mp_tcp_buffer_stats() may read them, but the owner updates them with a relaxed load and
 * store (a plain add), never a read-modify-write. */
typedef struct buf_cache {
    void *bufs[MP__TCP_LOCAL_BUFS];
    _Atomic size_t count;
    _Atomic int64_t net; /* taken minus given on this thread; negative when others took */
    bool registered;
    struct buf_cache *prev, *next; /* guarded by caches_mu */
} buf_cache;

static _Thread_local buf_cache local;
static pthread_mutex_t caches_mu = PTHREAD_MUTEX_INITIALIZER;
static buf_cache *caches; /* guarded by caches_mu: every registered thread's */
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void pool_put(void *b)
{
    mp__spin_lock(&pool.lock);
    if (pool.count < POOL_MAX) {
        *(void **)b = pool.head;
        pool.head = b;
        pool.count++;
        b = NULL;
    }
    mp__spin_unlock(&pool.lock);
    free(b);
}

/* Thread exit: the cache's buffers to the free list, its count to the global one. */
static void cache_retire(void *arg)
{
    buf_cache *bc = arg;
    pthread_mutex_lock(&caches_mu);
    if (bc->prev)
        bc->prev->next = bc->next;
    else
        caches = bc->next;
    if (bc->next)
        bc->next->prev = bc->prev;
    bc->registered = false;
    atomic_fetch_add_explicit(&bufs_in_use, atomic_load_explicit(&bc->net, memory_order_relaxed),
                              memory_order_relaxed);
    atomic_store_explicit(&bc->net, 0, memory_order_relaxed);
    pthread_mutex_unlock(&caches_mu);
    size_t n = atomic_load_explicit(&bc->count, memory_order_relaxed);
    atomic_store_explicit(&bc->count, 0, memory_order_relaxed);
    while (n != 0)
        pool_put(bc->bufs[--n]);
}

static void cache_key_create(void)
{
    if (pthread_key_create(&cache_key, cache_retire) != 0)
        MP__UNREACHABLE("%s", "pthread_key_create: no key left for the read-buffer caches");
}

/* The first take or give of a thread: register its cache. Once per thread. */
static void cache_register(void)
{
    pthread_once(&cache_once, cache_key_create);
    pthread_setspecific(cache_key, &local);
    pthread_mutex_lock(&caches_mu);
    local.prev = NULL;
    local.next = caches;
    if (caches)
        caches->prev = &local;
    caches = &local;
    local.registered = true;
    pthread_mutex_unlock(&caches_mu);
}

/* Owner-only update of one of the cache's counters. */
static void local_add(_Atomic int64_t *v, int64_t d)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + d,
                          memory_order_relaxed);
}

static char *buf_take(size_t cap)
{
    void *b = NULL;
    if (!local.registered)
        cache_register();
    if (cap == DEFAULT_BUF) {
        size_t n = atomic_load_explicit(&local.count, memory_order_relaxed);
        if (n != 0) {
            b = local.bufs[n - 1];
            atomic_store_explicit(&local.count, n - 1, memory_order_relaxed);
        } else {
            mp__spin_lock(&pool.lock);
            b = pool.head;
            if (b != NULL) {
                pool.head = *(void **)b;
                pool.count--;
            }
            mp__spin_unlock(&pool.lock);
        }
    }
    if (b == NULL)
        b = malloc(cap);
    if (b != NULL)
        local_add(&local.net, 1);
    return b;
}

static void buf_give(char *b, size_t cap)
{
    if (b == NULL)
        return;
    if (!local.registered)
        cache_register();
    local_add(&local.net, -1);
    if (cap != DEFAULT_BUF) {
        free(b);
        return;
    }
    size_t n = atomic_load_explicit(&local.count, memory_order_relaxed);
    if (n < MP__TCP_LOCAL_BUFS) {
        local.bufs[n] = b;
        atomic_store_explicit(&local.count, n + 1, memory_order_relaxed);
        return;
    }
    pool_put(b);
}

void mp_tcp_buffer_trim(void)
{
    size_t n = atomic_load_explicit(&local.count, memory_order_relaxed);
    atomic_store_explicit(&local.count, 0, memory_order_relaxed);
    while (n != 0)
        free(local.bufs[--n]);
    mp__spin_lock(&pool.lock);
    void *b = pool.head;
    pool.head = NULL;
    pool.count = 0;
    mp__spin_unlock(&pool.lock);
    while (b != NULL) {
        void *next = *(void **)b;
        free(b);
        b = next;
    }
}

void mp_tcp_buffer_stats(size_t *in_use, size_t *pooled)
{
    int64_t used = 0;
    size_t kept = 0;
    pthread_mutex_lock(&caches_mu);
    for (buf_cache *bc = caches; bc; bc = bc->next) {
        used += atomic_load_explicit(&bc->net, memory_order_relaxed);
        kept += atomic_load_explicit(&bc->count, memory_order_relaxed);
    }
    used += atomic_load_explicit(&bufs_in_use, memory_order_relaxed);
    pthread_mutex_unlock(&caches_mu);
    if (in_use != NULL)
        *in_use = used > 0 ? (size_t)used : 0; /* racing counts may dip for a moment */
    if (pooled != NULL) {
        mp__spin_lock(&pool.lock);
        *pooled = kept + pool.count;
        mp__spin_unlock(&pool.lock);
    }
}

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

static void lock(mp_tcp *c)
{
    mp__spin_lock(&c->lock);
}

static void unlock(mp_tcp *c)
{
    mp__spin_unlock(&c->lock);
}

int mp_tcp_accept(mp_runtime *rt, mp_tcp *c, uv_stream_t *server, size_t bufsize)
{
    memset(c, 0, sizeof *c);
    c->rt = rt;
    c->cap = bufsize ? bufsize : DEFAULT_BUF;
    c->buf = NULL; /* taken at the first read */
    /* Optimistic: the first read is tried before any event (a client usually sends its
     * request with the handshake); the socket has room for a first write. */
    atomic_init(&c->io, R_READY | W_READY);
    atomic_init(&c->ready_ns, 0);
    c->read_tick = UINT64_MAX; /* no read yet */
    atomic_init(&c->interrupted, false);
    int rc = uv_tcp_init(&rt->reactor.loop, &c->handle);
    if (rc != 0)
        return rc;
    c->handle.data = c;
    rc = uv_accept(server, (uv_stream_t *)&c->handle); /* non-blocking: accept4(SOCK_NONBLOCK) */
    if (rc == 0)
        rc = uv_fileno((uv_handle_t *)&c->handle, &c->fd);
    if (rc == 0) {
        struct epoll_event ev = {
            .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
            .data.ptr = c,
        };
        if (epoll_ctl(rt->reactor.epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
            rc = -errno;
    }
    if (rc != 0) {
        uv_close((uv_handle_t *)&c->handle, NULL); /* nothing else refers to it yet */
        return rc;
    }
    mp__tcp_link(&rt->reactor, c);
    /* Relaxed: published to the task with c itself (the caller spawns it). */
    atomic_store_explicit(&c->state, OPEN, memory_order_relaxed);
    return 0;
}

int mp_tcp_fileno(const mp_tcp *c)
{
    /* Relaxed: the owning task's own close is the only transition out of OPEN it can race
     * with, and that is a caller's ordering, not the stream's. */
    return atomic_load_explicit(&c->state, memory_order_relaxed) == OPEN ? c->fd : -EBADF;
}

uint64_t mp_tcp_read_time(const mp_tcp *c)
{
    return c->read_ns;
}

size_t mp_tcp_write_progress(const mp_tcp *c)
{
    return c->write_done;
}

/* On the loop's thread, from the runtime's epoll set (reactor.c). */
void mp__tcp_ready(mp_tcp *c, uint32_t events, uint64_t now_ns)
{
    uint64_t bits = 0;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        bits |= R_READY;
        /* Relaxed: published by the release CAS below, with the bits. */
        atomic_store_explicit(&c->ready_ns, now_ns, memory_order_relaxed);
    }
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        bits |= R_CLOSED;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        bits |= W_READY;
    /* Release: pairs with the acquire loads of io in mp_tcp_read_poll(), mp_tcp_write_poll()
     * and wait_ready(): the task sees the new tick and bits (its clear CAS fails) and retries. */
    uint64_t old = atomic_load_explicit(&c->io, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&c->io, &old, (old + TICK) | bits,
                                                  memory_order_release, memory_order_relaxed))
        ;
    mp_waker r = {0}, w = {0};
    lock(c);
    if (bits & R_READY) {
        r = c->reader;
        c->reader = (mp_waker){0};
    }
    if (bits & W_READY) {
        w = c->writer;
        c->writer = (mp_waker){0};
    }
    unlock(c);
    mp_waker_wake(&r);
    mp_waker_wake(&w);
}

/* The task saw EAGAIN (or a short transfer) after loading `seen`: the bit is clear unless an
 * event came in since. Relaxed: on failure the task reloads with acquire anyway. */
static void clear_ready(mp_tcp *c, uint64_t seen, uint64_t bit)
{
    if (bit == R_READY && (seen & R_CLOSED))
        return;
    atomic_compare_exchange_strong_explicit(&c->io, &seen, seen & ~bit, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* Register the task's waker in *slot unless `bit` is set (or, for the reader, an interrupt is
 * pending): MP_PENDING when registered, MP_READY when the caller should try again. */
static mp_poll wait_ready(mp_tcp *c, mp_context *cx, uint64_t bit, mp_waker *slot)
{
    mp_waker old = {0};
    lock(c);
    /* Acquire: pairs with the release CAS in mp__tcp_ready(); the lock orders this re-check
     * against the loop's taking of the waker (see the top of this file). */
    if ((atomic_load_explicit(&c->io, memory_order_acquire) & bit) ||
        (slot == &c->reader && atomic_load_explicit(&c->interrupted, memory_order_relaxed))) {
        unlock(c);
        return MP_READY;
    }
    if (!mp_waker_will_wake(slot, mp_context_waker(cx))) {
        old = *slot;
        *slot = mp_waker_clone(mp_context_waker(cx));
    }
    unlock(c);
    mp_waker_drop(&old);
    return MP_PENDING;
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
    /* Acquire: pairs with the release store in mp_tcp_interrupt(). */
    if (atomic_load_explicit(&c->interrupted, memory_order_relaxed) &&
        atomic_exchange_explicit(&c->interrupted, false, memory_order_acquire)) {
        *data = NULL;
        *len = 0;
        *err = -EINTR;
        return MP_READY;
    }
    if (c->tail > c->head || c->err != 0)
        return view(c, data, len, err);
    c->head = c->tail = 0;
    for (;;) {
        /* Acquire: pairs with the release CAS in mp__tcp_ready(). */
        uint64_t seen = atomic_load_explicit(&c->io, memory_order_acquire);
        if (!(seen & R_READY)) {
            /* Everything read was consumed: an idle stream holds no buffer. */
            buf_give(c->buf, c->cap);
            c->buf = NULL;
            if (wait_ready(c, cx, R_READY, &c->reader) == MP_PENDING)
                return MP_PENDING;
            if (atomic_load_explicit(&c->interrupted, memory_order_relaxed))
                return mp_tcp_read_poll(c, cx, data, len, err);
            continue;
        }
        if (c->buf == NULL && (seen & R_CLOSED)) {
            /* The peer closed or failed: most often there is nothing left but the EOF, which
             * needs no buffer (a crowd of closing peers would otherwise take one each). */
            char b;
            ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                c->err = n == 0 ? UV_EOF : -errno;
                return view(c, data, len, err);
            }
        }
        if (c->buf == NULL && (c->buf = buf_take(c->cap)) == NULL) {
            c->err = -ENOMEM;
            return view(c, data, len, err);
        }
        ssize_t n = sock_read(c->fd, c->buf, c->cap);
        if (n > 0) {
            c->tail = (size_t)n;
            /* Relaxed: the acquire load of io above ordered it after the event's store (a
             * later event's value is as good). Bytes left from an older event get the clock:
             * they may have waited long for a task that did not read (a blocked write), and
             * so do bytes read before any event (the first read after the accept). */
            uint64_t tick = seen & ~(uint64_t)(TICK - 1);
            c->read_ns = tick != c->read_tick && tick != 0
                             ? atomic_load_explicit(&c->ready_ns, memory_order_relaxed)
                             : mp__now_ns();
            c->read_tick = tick;
            if ((size_t)n < c->cap)
                clear_ready(c, seen, R_READY); /* drained; more data raises a new edge */
            return view(c, data, len, err);
        }
        if (n == 0) {
            c->err = UV_EOF;
            return view(c, data, len, err);
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            clear_ready(c, seen, R_READY);
            continue;
        }
        c->err = -errno;
        return view(c, data, len, err);
    }
}

void mp_tcp_interrupt(mp_tcp *c)
{
    /* Release: pairs with the acquire exchange in mp_tcp_read_poll(). Set before taking the
     * waker under the lock, as mp__tcp_ready() does with its bits: either the task's
     * wait_ready() sees the flag, or it registered its waker first and we wake it. */
    atomic_store_explicit(&c->interrupted, true, memory_order_release);
    lock(c);
    mp_waker w = c->reader;
    c->reader = (mp_waker){0};
    unlock(c);
    mp_waker_wake(&w);
}

void mp_tcp_consume(mp_tcp *c, size_t n)
{
    if (n > c->tail - c->head)
        MP__UNREACHABLE("consume %zu of %zu buffered bytes", n, c->tail - c->head);
    c->head += n;
}

mp_poll mp_tcp_write_poll(mp_tcp *c, mp_context *cx, const char *data, size_t len, int *err)
{
    size_t done = c->write_done; /* > 0 only when continuing a write that would have blocked */
    while (done < len) {
        /* Acquire: pairs with the release CAS in mp__tcp_ready(). */
        uint64_t seen = atomic_load_explicit(&c->io, memory_order_acquire);
        if (!(seen & W_READY)) {
            if (wait_ready(c, cx, W_READY, &c->writer) == MP_PENDING) {
                c->write_done = done;
                return MP_PENDING;
            }
            continue;
        }
        ssize_t n = sock_send(c->fd, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            if (done < len)
                clear_ready(c, seen, W_READY); /* the kernel buffer is full */
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            clear_ready(c, seen, W_READY);
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
    buf_give(c->buf, c->cap);
    c->buf = NULL;
    if (c->on_closed)
        c->on_closed(c);
}

static void close_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp_tcp *c = arg;
    if (uv_is_closing((uv_handle_t *)&c->handle))
        return;
    /* Events are taken and handled within one callback on this thread (reactor.c), so once
     * the socket leaves the set none can name c any more. */
    epoll_ctl(c->rt->reactor.epfd, EPOLL_CTL_DEL, c->fd, NULL);
    uv_close((uv_handle_t *)&c->handle, close_cb);
}

int mp_tcp_close(mp_tcp *c, void (*on_closed)(mp_tcp *c))
{
    uint32_t open = OPEN;
    /* Relaxed: the exchange only makes a second close fail; the close itself is ordered by
     * mp_loop_call's command queue. */
    if (!atomic_compare_exchange_strong_explicit(&c->state, &open, CLOSING, memory_order_relaxed,
                                                 memory_order_relaxed))
        return -EBADF;
    /* The task is done reading: its buffer goes back now, not after the loop's close. */
    buf_give(c->buf, c->cap);
    c->buf = NULL;
    c->on_closed = on_closed;
    return mp_loop_call(c->rt, &c->cmd_close, close_cmd, c);
}

/* The reactor's list of open streams, so that shutdown can close them with close_cb. Loop
 * side only. */
void mp__tcp_link(mp__reactor *r, mp_tcp *c)
{
    MP__LIST_PUSH_FRONT(r->tcps, c, prev, next);
}

void mp__tcp_unlink(mp__reactor *r, mp_tcp *c)
{
    MP__LIST_UNLINK(r->tcps, c, prev, next);
    c->prev = c->next = NULL;
}

void mp__tcp_close_all(mp__reactor *r)
{
    for (mp_tcp *c = r->tcps; c; c = c->next)
        close_cmd(&r->loop, c);
}
