/* io.c: readiness of the sockets served to tasks (mp_io, embedded in mp_tcp, mp_tcp_listener
 * and mp_udp), the protocol they share.
 *
 * The task does its own I/O: it reads, sends, accepts and receives on whichever worker runs
 * it, like nginx and Tokio, and the loop's thread only learns about readiness. libuv cannot be
 * asked for that (its reads and uv_poll are level-triggered, so each epoll_wait would poll
 * again every socket it reported the time before): each runtime has an edge-triggered epoll
 * set of its own (reactor.c), where its driver waits, with libuv's own fd in the set. An event
 * there sets readiness bits in the socket's `bits` word and wakes the waiting task; the task
 * clears a bit when the kernel says it would block (EAGAIN, or a short read or send: the
 * socket buffer was drained or filled) and waits for the next edge.
 *
 * The lost wake-up this must prevent:
 *
 *   task                                       loop thread
 *   read() -> EAGAIN
 *                                              data arrives: edge, event -> set READ
 *   clear READ                                 (the task is not waiting: nobody is woken)
 *   wait for the next edge                     -> no edge comes: the data sits unread
 *
 * Fixed with a tick: every event adds MP__IO_TICK to `bits` along with its bits, and the task
 * clears a bit with a CAS from the value it loaded before its read, which fails if an event
 * came in between; then it reads again. Waiting is the other half: the task stores its waker
 * and re-checks the bit under the socket's lock, and the loop takes the waker under the same
 * lock after setting the bit, so either the task sees the bit or the loop sees the waker.
 * Every poll that makes a system call on a socket (tcp.c, listener.c, udp.c) begins with
 * mp__io_poll(), which does both halves and reports a close or an interrupt.
 *
 * Peer close and errors (EPOLLRDHUP, EPOLLHUP, EPOLLERR) set CLOSED, which is never cleared:
 * a short read can be followed by an EOF that raises no further edge.
 *
 * Closing: the socket leaves the epoll set and its fd is closed on the loop's side (the thread
 * that holds the driver role), where events are handled: every event of a batch is handled
 * before anything else runs there (reactor.c), so once the socket is out of the set no event
 * can name it, and its on_closed may run at once, within the same command, and the memory go.
 * Every socket object is bare, and closed so: close(2), then on_closed; it holds no libuv
 * handle, which is 256 bytes an object spared (an idle server connection's largest part;
 * mp_tcp_accept() takes its socket out of libuv's handle with a duplicate). A close from any
 * thread first marks the socket closing and wakes whatever task waits on it, whose poll then
 * reports -EBADF. The reactor keeps every open socket on a list (under its io_lock: sockets
 * are opened from any thread) so that shutdown can close what is left.
 *
 * A listener or a UDP socket may be closed by a thread other than the task that polls it, and
 * then the fd number must not be closed under the task's system call:
 *
 *   task                                       another thread, then the loop
 *   state is OPEN
 *                                              close: CLOSING; the loop close()s fd 19
 *                                              a new socket elsewhere gets fd 19
 *   recvmsg(19)                                -> reads another socket's data
 *
 * Fixed with a count of the system calls in progress, in the state word itself: a task enters
 * (a CAS that adds a user unless CLOSING is set) before its call and leaves after it; the close
 * sets CLOSING and finishes only when it sees no user, or else the last user to leave finishes
 * it. Both sides change the one word with read-modify-writes, so whichever comes second sees
 * the other: the close never runs while a call is in progress, and no call starts after it.
 * A stream (mp_tcp) is closed by its owner only, and skips the count on its hot path.
 *
 * Who calls on_closed: one rule for every socket object, whatever the close returns: every
 * mp_*_close() call that is not refused as a second one (-EALREADY) has its on_closed run once,
 * after which the runtime never touches the object; the memory may go there. Usually the loop's
 * side runs it as it closes the socket. But the runtime's shutdown closes every socket still
 * open, with no callback of the user's, and a close may come after that or during it:
 *
 *   user's close (any thread)                  shutdown's close (the loop's thread)
 *                                              close_all: close_fn: close(2), then
 *   CLOSE_REQ; on_closed = cb                  the closed step: no callback set -> none called
 *   the loop refuses (-ESHUTDOWN)              (the old rule said "on_closed will not run,
 *   free(c) at once                             free at once"; a callback already looking
 *                                               at on_closed read a freed object)
 *
 * Fixed with two bits of the state word, both set by read-modify-writes, so whichever comes
 * second sees the other: the closer sets NOTIFY as its last touch of the object (A), after
 * waking the waiters and asking the loop for the close, and the loop's close callback, its
 * last touch, sets DONE (B). Whoever comes second runs on_closed: the loop if it sees NOTIFY,
 * the closer (inline, before it returns) if it sees DONE. NOTIFY must be the closer's last
 * touch: set earlier, the shutdown's close callback could free the object while the closer
 * still asks the loop for the close (ThreadSanitizer saw exactly that in
 * test_io.c's closes_racing_the_shutdown_run_on_closed_once). A user leaving a system call
 * may finish a close too (mp__io_leave()), but the shutdown's close comes only after every
 * worker has stopped, so no task is inside one then. A socket that was never open (zeroed, a failed
 * open, accept or connect) has nothing to close: its close runs on_closed inline at once (-EBADF).
 */
#include "internal.h"

#include <sys/epoll.h>

/* mp_io.state: zero (a zeroed or failed socket) is closed. OPEN once registered; then a closer
 * sets CLOSE_REQ (it won: it may write close_cb), then CLOSING|NOTIFY (polls stop; its
 * callback is published), and whoever sees CLOSING with no user first sets CLAIMED and
 * finishes the close. DONE: the loop finished closing the socket (never unset until the object
 * is opened again). USER counts system calls in progress (mp__io_enter). */
enum { OPEN = 1, CLOSE_REQ = 2, CLOSING = 4, CLAIMED = 8, NOTIFY = 16, DONE = 32, USER = 64 };

static void lock(mp_io *io)
{
    mp__spin_lock(&io->lock);
}

static void unlock(mp_io *io)
{
    mp__spin_unlock(&io->lock);
}

void mp__io_init(mp_io *io, mp_runtime *rt, int fd, uint64_t bits, void (*close_fn)(mp_io *))
{
    atomic_init(&io->bits, bits);
    atomic_init(&io->ready_ns, 0);
    atomic_init(&io->lock, 0);
    atomic_init(&io->interrupted, false);
    atomic_init(&io->state, 0);
    io->fd = fd;
    io->reader = io->writer = (mp_waker){0};
    io->rt = rt;
    io->close_fn = close_fn;
    io->close_started = false;
    io->prev = io->next = NULL;
}

int mp__io_register(mp_io *io, uint32_t events)
{
    mp__reactor *r = &io->rt->reactor;
    /* Relaxed: a hint; shutdown closes whatever is on the list once it holds io_lock, and
     * the re-check under the lock below is exact. */
    if (atomic_load_explicit(&r->closed, memory_order_relaxed))
        return -ESHUTDOWN;
    struct epoll_event ev = {.events = events | EPOLLET, .data.ptr = io};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, io->fd, &ev) != 0)
        return -errno;
    mp__spin_lock(&r->io_lock);
    if (r->io_closed) {
        mp__spin_unlock(&r->io_lock);
        epoll_ctl(r->epfd, EPOLL_CTL_DEL, io->fd, NULL);
        return -ESHUTDOWN;
    }
    MP__LIST_PUSH_FRONT(r->ios, io, prev, next);
    /* Relaxed: published to the task that polls it by whatever hands it the object. */
    atomic_store_explicit(&io->state, OPEN, memory_order_relaxed);
    mp__spin_unlock(&r->io_lock);
    return 0;
}

static void io_unlink(mp_io *io)
{
    mp__reactor *r = &io->rt->reactor;
    mp__spin_lock(&r->io_lock);
    MP__LIST_UNLINK(r->ios, io, prev, next);
    io->prev = io->next = NULL;
    mp__spin_unlock(&r->io_lock);
}

static bool open_state(uint32_t s)
{
    return (s & (OPEN | CLOSING)) == OPEN;
}

bool mp__io_is_open(const mp_io *io)
{
    /* Relaxed: a hint for the owner's own calls; a close by another thread is seen by
     * mp__io_enter() exactly, and by wait_edge() under the socket's lock. */
    return open_state(atomic_load_explicit(&io->state, memory_order_relaxed));
}

bool mp__io_enter(mp_io *io)
{
    uint32_t s = atomic_load_explicit(&io->state, memory_order_relaxed);
    do {
        if (!open_state(s))
            return false;
        /* Acquire: keeps the caller's system call after the count is taken; pairs with the
         * release fetch_or in mp__io_close() (a close that began is seen, or counts us). */
    } while (!atomic_compare_exchange_weak_explicit(&io->state, &s, s + USER, memory_order_acquire,
                                                    memory_order_relaxed));
    return true;
}

static void close_cmd(uv_loop_t *loop, void *arg);

/* The loop-side run of an on_closed the loop left to its closer (mp__io_close()). */
static void closed_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp_io *io = arg;
    io->close_fn(io);
}

/* CLOSING is set and no user is left: claim the close (once) and finish it. true: this call
 * finished it, and *rc is mp_loop_call's result. */
static bool finish_if_idle(mp_io *io, uint32_t s, int *rc)
{
    while ((s & CLOSING) && s < USER && !(s & CLAIMED)) {
        /* Acquire: pairs with the release fetch_or in mp__io_close(): the closer's
         * callback is visible to whoever finishes. */
        if (atomic_compare_exchange_weak_explicit(&io->state, &s, s | CLAIMED, memory_order_acquire,
                                                  memory_order_relaxed)) {
            /* -ESHUTDOWN: the shutdown closed every socket already (mp__io_close_all()). */
            *rc = mp_loop_call(io->rt, &io->cmd_close, close_cmd, io);
            return true;
        }
    }
    return false;
}

void mp__io_leave(mp_io *io)
{
    /* acq_rel: the release orders our system call before a close that sees no user; it
     * pairs with the acquire CAS in finish_if_idle(). The acquire lets us finish a close
     * whose CLOSING we see. */
    uint32_t s = atomic_fetch_sub_explicit(&io->state, USER, memory_order_acq_rel) - USER;
    int rc;
    finish_if_idle(io, s, &rc);
}

/* On the loop's thread, from the runtime's epoll set (reactor.c). */
void mp__io_ready(mp_io *io, uint32_t events, uint64_t now_ns)
{
    uint64_t bits = 0;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        bits |= MP__IO_READ;
        /* Relaxed: published by the release CAS below, with the bits. */
        atomic_store_explicit(&io->ready_ns, now_ns, memory_order_relaxed);
    }
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        bits |= MP__IO_CLOSED;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        bits |= MP__IO_WRITE;
    /* Release: pairs with the acquire load in mp__io_load() and in wait_edge(): the task sees
     * the new tick and bits (its clear CAS fails) and retries. */
    uint64_t old = atomic_load_explicit(&io->bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&io->bits, &old, (old + MP__IO_TICK) | bits,
                                                  memory_order_release, memory_order_relaxed))
        ;
    mp_waker r = {0}, w = {0};
    lock(io);
    if (bits & MP__IO_READ) {
        r = io->reader;
        io->reader = (mp_waker){0};
    }
    if (bits & MP__IO_WRITE) {
        w = io->writer;
        io->writer = (mp_waker){0};
    }
    unlock(io);
    mp_waker_wake(&r);
    mp_waker_wake(&w);
}

uint64_t mp__io_load(mp_io *io)
{
    /* Acquire: pairs with the release CAS in mp__io_ready(). */
    return atomic_load_explicit(&io->bits, memory_order_acquire);
}

void mp__io_clear(mp_io *io, uint64_t seen, uint64_t bit)
{
    if (bit == MP__IO_READ && (seen & MP__IO_CLOSED))
        return;
    /* Relaxed: on failure the task reloads with acquire anyway (mp__io_load()). */
    atomic_compare_exchange_strong_explicit(&io->bits, &seen, seen & ~bit, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* Register the task's waker as reader (bit MP__IO_READ) or writer unless the bit is set, the
 * socket is no longer open, or (reader) an interrupt is pending: MP_PENDING when registered,
 * MP_READY when the caller should look again. */
static mp_poll wait_edge(mp_io *io, mp_context *cx, uint64_t bit)
{
    mp_waker *slot = bit == MP__IO_READ ? &io->reader : &io->writer;
    mp_waker old = {0};
    lock(io);
    /* Acquire: pairs with the release CAS in mp__io_ready(); the lock orders this re-check
     * against the loop's taking of the waker (see the top of this file). A close or an
     * interrupt is looked at under the same lock as the one that sets it takes the waker. */
    if ((atomic_load_explicit(&io->bits, memory_order_acquire) & bit) ||
        !open_state(atomic_load_explicit(&io->state, memory_order_relaxed)) ||
        (bit == MP__IO_READ && atomic_load_explicit(&io->interrupted, memory_order_relaxed))) {
        unlock(io);
        return MP_READY;
    }
    if (!mp_waker_will_wake(slot, mp_context_waker(cx))) {
        old = *slot;
        *slot = mp_waker_clone(mp_context_waker(cx));
    }
    unlock(io);
    mp_waker_drop(&old);
    return MP_PENDING;
}

/* Take both wakers under the lock and wake them: the caller has just set what their polls
 * will see (interrupted, or the state). */
static void wake_all(mp_io *io)
{
    lock(io);
    mp_waker r = io->reader, w = io->writer;
    io->reader = io->writer = (mp_waker){0};
    unlock(io);
    mp_waker_wake(&r);
    mp_waker_wake(&w);
}

void mp__io_interrupt(mp_io *io)
{
    /* Release: pairs with the acquire exchange in mp__io_take_interrupt(). Set before taking
     * the waker under the lock, as mp__io_ready() does with its bits: either the task's
     * wait_edge() sees the flag, or it registered its waker first and we wake it. */
    atomic_store_explicit(&io->interrupted, true, memory_order_release);
    lock(io);
    mp_waker w = io->reader;
    io->reader = (mp_waker){0};
    unlock(io);
    mp_waker_wake(&w);
}

bool mp__io_take_interrupt(mp_io *io)
{
    /* Acquire: pairs with the release store in mp__io_interrupt(). */
    return atomic_load_explicit(&io->interrupted, memory_order_relaxed) &&
           atomic_exchange_explicit(&io->interrupted, false, memory_order_acquire);
}

/* mp__io_poll() without the wait: true when the poll is over (*err says how), false when the
 * caller must wait for `bit`. */
static bool poll_now(mp_io *io, uint64_t bit, uint64_t *seen, int *err)
{
    if (!mp__io_is_open(io)) {
        *err = -EBADF;
        return true;
    }
    /* Only a reader is interrupted (mp__io_interrupt() wakes the reader alone). */
    if (bit == MP__IO_READ && mp__io_take_interrupt(io)) {
        *err = -EINTR;
        return true;
    }
    *err = 0;
    *seen = mp__io_load(io);
    return (*seen & bit) != 0;
}

/* Out of line: inlined, its lock and waker calls would give mp__io_poll() a stack frame on the
 * path that finds the bit set, which every read and send takes. */
static __attribute__((noinline)) mp_poll poll_wait(mp_io *io, mp_context *cx, uint64_t bit,
                                                   uint64_t *seen, int *err)
{
    /* MP_READY from wait_edge(): an event, a close or an interrupt came in before the waker
     * was left: look again. */
    while (wait_edge(io, cx, bit) == MP_READY)
        if (poll_now(io, bit, seen, err))
            return MP_READY;
    return MP_PENDING;
}

mp_poll mp__io_poll(mp_io *io, mp_context *cx, uint64_t bit, uint64_t *seen, int *err)
{
    if (poll_now(io, bit, seen, err))
        return MP_READY;
    return poll_wait(io, cx, bit, seen, err);
}

void mp__io_disown(mp_io *io)
{
    lock(io);
    mp_waker r = io->reader, w = io->writer;
    io->reader = io->writer = (mp_waker){0};
    unlock(io);
    mp_waker_drop(&r);
    mp_waker_drop(&w);
}

void mp__io_cancel(mp_io *io, bool reader)
{
    /* Under the lock the loop takes the waker under (mp__io_ready()): after this it can wake
     * only a waker registered by a later poll. */
    lock(io);
    mp_waker *slot = reader ? &io->reader : &io->writer;
    mp_waker w = *slot;
    *slot = (mp_waker){0};
    unlock(io);
    mp_waker_drop(&w);
}

static void close_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp_io *io = arg;
    if (io->close_started)
        return; /* shutdown's close_all got here first */
    io->close_started = true;
    epoll_ctl(io->rt->reactor.epfd, EPOLL_CTL_DEL, io->fd, NULL);
    io->close_fn(io);
}

int mp__io_close(mp_io *io, void (*set_cb)(mp_io *io, mp__fn cb), mp__fn cb,
                 void (*run_cb)(mp_io *io))
{
    uint32_t s = atomic_load_explicit(&io->state, memory_order_relaxed);
    do {
        if (!(s & OPEN)) {
            /* Never open (zeroed, a failed open, connect or accept): nothing to close, and
             * nothing of the runtime's refers to it. */
            set_cb(io, cb);
            run_cb(io);
            return -EBADF;
        }
        if (s & CLOSE_REQ)
            return -EALREADY; /* the first close's on_closed runs, not this one's */
        /* Relaxed: only decides which closer wins; what it writes is published below. */
    } while (!atomic_compare_exchange_weak_explicit(&io->state, &s, s | CLOSE_REQ,
                                                    memory_order_relaxed, memory_order_relaxed));
    bool failed_accept = (s & CLAIMED) != 0; /* a close of its own under way, never open */
    set_cb(io, cb);
    /* acq_rel. Release: publishes the callback to whoever finishes the close (pairs with the
     * acquire CAS in finish_if_idle()). Acquire: as (A), for the case below. */
    s = atomic_fetch_or_explicit(&io->state, CLOSING, memory_order_acq_rel) | CLOSING;
    if (s & DONE) {
        /* The shutdown closed the socket, and its close callback, the loop's last touch, ran
         * already (it saw no NOTIFY): the callback is ours, and the runtime may be gone. */
        run_cb(io);
        return -ESHUTDOWN;
    }
    wake_all(io);
    int rc = 0; /* a user still in a system call finishes it when it leaves */
    /* -ESHUTDOWN here: the loop refused the close because the shutdown closes (or closed)
     * every open socket; that close's callback runs on_closed if it comes after (A). */
    finish_if_idle(io, s, &rc);
    /* (A) acq_rel, our last touch of the object: once NOTIFY is set, the loop's close callback
     * may run on_closed and the object go. Release: publishes the callback to the loop's close
     * callback (pairs with the acquire of (B) in io_done()). Acquire: when DONE is already set,
     * the loop's last touches of the object happened before our inline callback (pairs with
     * the release of (B)). */
    if (atomic_fetch_or_explicit(&io->state, NOTIFY, memory_order_acq_rel) & DONE) {
        /* The socket's close finished before (A) and the loop left on_closed to us. It still
         * runs on the loop's side (under the role: at once if this thread can take it), as
         * every other on_closed does: its owner may touch what only the loop's side touches
         * (magpied's connection lists did, racing the loop's thread). close_fn is done with,
         * so it carries run_cb to the command. Only a loop the shutdown closed leaves it to
         * this thread. */
        io->close_fn = run_cb;
        if (mp_loop_call(io->rt, &io->cmd_close, closed_cmd, io) != 0)
            run_cb(io);
    }
    return failed_accept ? -EBADF : rc;
}

void mp__io_close_fd(mp_io *io)
{
    close(io->fd); /* Linux releases the fd even when it reports EINTR: never retried */
}

static bool io_done(mp_io *io)
{
    /* (B) acq_rel. Acquire: a callback published by (A) is visible (pairs with its release).
     * Release: everything the loop did to the object happens before a closer that sees DONE
     * runs on_closed inline and frees it (pairs with the acquire of (A)). */
    return atomic_fetch_or_explicit(&io->state, DONE, memory_order_acq_rel) & NOTIFY;
}

bool mp__io_closed(mp_io *io)
{
    io_unlink(io);
    mp__io_disown(io);
    return io_done(io);
}

/* Shutdown, with the role held and every worker stopped: close every socket still open. Each
 * close finishes here (no socket holds a libuv handle). */
void mp__io_close_all(mp__reactor *r)
{
    mp__spin_lock(&r->io_lock);
    r->io_closed = true;
    mp_io *io = r->ios;
    mp__spin_unlock(&r->io_lock);
    /* Nobody links now (io_closed). An entry leaves the list as its own close finishes, here
     * for a bare socket (it may be freed then): its next is read before. Only that entry goes:
     * an object is freed only after its own on_closed, and the others' have not run. */
    while (io != NULL) {
        mp_io *next = io->next;
        close_cmd(&r->loop, io);
        io = next;
    }
}
