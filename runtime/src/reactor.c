/* reactor.c: one libuv loop per runtime, run by whichever worker holds the driver role.
 *
 * libuv is not thread-safe: every call on the loop or its handles must come from the thread
 * that runs the loop at that moment, except uv_async_send. So the right to call libuv is a
 * role, held by at most one thread at a time (role: 0 free, 1 held; a CAS takes it with
 * acquire, a store gives it back with release, so each holder sees everything its
 * predecessor did to the loop):
 *
 *   - a worker that finds no work and would park takes the role if it is free and blocks in
 *     the loop's turn (mp__reactor_run) instead of on its futex; its park word says
 *     DRIVING, so whoever unparks it sends the async handle instead of a futex wake
 *     (worker.c, runtime.c);
 *   - a busy worker takes the role, if free, every 128 polls and runs the loop without
 *     blocking, so I/O progresses while every worker is busy;
 *   - any other thread that needs the loop (mp_loop_call) takes the role if it is free and
 *     calls libuv itself, or else queues a command and sends the async handle; the holder
 *     runs queued commands when it takes the role and from the async callback.
 *
 * The lost command this must prevent:
 *
 *   caller                                    driver
 *                                             (has just run the async callback)
 *   role is held: push command C
 *                                             releases the role, goes to run tasks
 *   uv_async_send                             -> nobody runs the loop: C waits
 *
 * Fixed: the holder releases the role (A), then looks at the command stack (B) and wakes a
 * worker to drive if it is not empty; the caller pushes (C), then tries the role (D) before
 * settling for the async send. Both sides are a store then a load of the other's location
 * (store buffering), hence the seq_cst fences at (A)/(B) and (C)/(D): either the caller sees
 * the role free and runs C itself, or the holder sees C and gets someone to drive.
 *
 * At the end of shutdown, mp__reactor_close() takes the role, runs what is queued, closes the
 * loop and gives the role back. A call racing with it:
 *
 *   caller                                    close
 *   closed? no
 *                                             takes the role, closed = true, runs commands,
 *                                             closes every handle and the loop, gives the
 *                                             role back
 *   pushes C, uv_async_send on the closed       -> C never runs (its waiter blocks for ever),
 *   handle; or takes the role and runs C           or runs on a closed loop
 *
 * Fixed: a caller that takes the role looks at closed while holding it (close sets it under
 * the role, so no holder after close can miss it). One that must queue counts itself in
 * `callers` (E), then looks at closed (F); close sets closed (G), then waits until callers
 * is 0 (H), holding the role, before it runs the last commands and closes anything. Store
 * buffering again, so all four are seq_cst: either the caller sees closed and returns
 * -ESHUTDOWN, touching nothing, or close sees it counted and waits until its command is
 * pushed (and its async send made, on a handle still open), then runs it.
 */
#include "internal.h"

#include <sys/epoll.h>
#include <unistd.h>

static void run_commands(mp__reactor *r)
{
    /* Acquire: pairs with the release CAS in push_command(); the commands' arguments are
     * visible. Taking the whole stack leaves no ABA window. */
    mp_loop_cmd *c = atomic_exchange_explicit(&r->cmds, NULL, memory_order_acquire);
    mp_loop_cmd *fifo = NULL;
    while (c) { /* the stack is newest first: reverse it */
        mp_loop_cmd *next = c->next;
        c->next = fifo;
        fifo = c;
        c = next;
    }
    while (fifo) {
        mp_loop_cmd *next = fifo->next;
        fifo->fn(&r->loop, fifo->arg);
        fifo = next;
    }
}

static void async_cb(uv_async_t *a)
{
    run_commands(a->data);
}

/* The driver waits in the sockets' edge-triggered epoll set (io.c), which also holds libuv's
 * own epoll fd (level-triggered; readable while the loop has an event: a connection to accept,
 * the async handle's eventfd, any other handle). So a turn with only stream events is one
 * epoll_wait, as a plain libuv server's turn is: the loop itself runs (uv_run(UV_RUN_NOWAIT),
 * one more epoll_wait of its own) only when its fd is readable or its next timer is due.
 * Each event is handled before the next epoll_wait, all on this thread, which is what lets
 * close_cmd() in io.c free a socket once it left the set.
 *
 * The wait's timeout is what libuv would block for (uv_backend_timeout: 0 when it has
 * callbacks pending, else until its next timer), computed before anything runs; nothing is
 * run and then waited on in the same turn. That is what keeps a task woken by a timer from
 * sitting in the driver's queue while it blocks (the lost timer wake-up drawn in timer.c):
 * a due timer makes the wait return at once, the loop runs it, and the turn ends. */
enum { EPOLL_BATCH = 128 }; /* events taken per turn; the rest keep epfd readable */

/* ev.data.ptr of libuv's fd in the set; every other event is a socket's (an mp_io). */
#define LOOP_EVENT ((void *)&mp__reactor_run)

void mp__reactor_run(mp__reactor *r, bool block)
{
    int timeout = uv_backend_timeout(&r->loop);
    struct epoll_event ev[EPOLL_BATCH];
    int n = epoll_wait(r->epfd, ev, EPOLL_BATCH, block ? timeout : 0);
    bool loop_ready = timeout == 0;
    if (n > 0) {
        /* One clock read per batch: when the streams were seen readable (mp_tcp_read_time). */
        uint64_t now = mp__now_ns();
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == LOOP_EVENT)
                loop_ready = true;
            else
                mp__io_ready(ev[i].data.ptr, ev[i].events, now);
        }
    }
    /* A timer due by now: the wait timed out, or events came in past the loop's deadline
     * (uv_now() is the loop's clock as of its last turn). */
    if (!loop_ready && timeout > 0)
        loop_ready = (n == 0 && block) || mp_now_ms() >= uv_now(&r->loop) + (uint64_t)timeout;
    if (loop_ready)
        uv_run(&r->loop, UV_RUN_NOWAIT);
    run_commands(r);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

int mp__reactor_init(mp__reactor *r)
{
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0)
        return -errno;
    int rc = uv_loop_init(&r->loop);
    if (rc != 0) {
        close(r->epfd);
        return rc;
    }
    rc = uv_async_init(&r->loop, &r->async, async_cb);
    if (rc != 0) {
        uv_loop_close(&r->loop);
        close(r->epfd);
        return rc;
    }
    /* Referenced: it keeps the loop alive, so that a driver with nothing else to wait for
     * blocks (uv_backend_timeout() is 0 for a loop with no live handle). */
    r->async.data = r;
    r->ios = NULL;
    atomic_init(&r->io_lock, 0);
    r->io_closed = false;
    rc = uv_timer_init(&r->loop, &r->timer);
    if (rc == 0) {
        r->timer.data = r;
        struct epoll_event loop_ev = {.events = EPOLLIN, .data.ptr = LOOP_EVENT};
        if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, uv_backend_fd(&r->loop), &loop_ev) != 0)
            rc = -errno;
    }
    if (rc != 0) {
        uv_walk(&r->loop, close_walk_cb, NULL);
        uv_run(&r->loop, UV_RUN_DEFAULT);
        uv_loop_close(&r->loop);
        close(r->epfd);
        return rc;
    }
    atomic_init(&r->rearm_queued, false);
    atomic_init(&r->wheel_lock, 0);
    mp__wheel_init(&r->wheel, mp_now_ms());
    r->armed_ms = UINT64_MAX;
    r->fire_delay_us = mp__test_timer_fire_delay_us_value();
    atomic_init(&r->role, 0);
    atomic_init(&r->cmds, NULL);
    atomic_init(&r->closed, false);
    atomic_init(&r->callers, 0);
    r->call_delay_us = mp__test_loop_call_delay_us_value();
    return 0;
}

_Thread_local mp__reactor *mp__tls_driver;

bool mp__reactor_try_acquire(mp__reactor *r)
{
    uint32_t free_ = 0;
    /* Acquire: pairs with the release store in mp__reactor_release(); we see the loop as the
     * last holder left it. */
    if (atomic_load_explicit(&r->role, memory_order_relaxed) != 0 ||
        !atomic_compare_exchange_strong_explicit(&r->role, &free_, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return false;
    mp__tls_driver = r;
    run_commands(r);
    return true;
}

/* Returns true if commands were left for the next holder: the caller must get a worker to
 * drive (mp__runtime_notify). */
bool mp__reactor_release(mp__reactor *r)
{
    mp__tls_driver = NULL;
    /* (A) Release: our libuv calls happen before the next holder's (pairs with the acquire
     * CAS in mp__reactor_try_acquire()). */
    atomic_store_explicit(&r->role, 0, memory_order_release);
    /* (B): pairs with (C)/(D) in mp_loop_call(); see the top of this file. */
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&r->cmds, memory_order_relaxed) != NULL;
}

void mp__reactor_wake(mp__reactor *r)
{
    /* Thread-safe by libuv's contract; coalesces. After shutdown closed the loop nobody is
     * DRIVING, so this is not reached then. */
    uv_async_send(&r->async);
}

static void push_command(mp__reactor *r, mp_loop_cmd *c)
{
    mp_loop_cmd *head = atomic_load_explicit(&r->cmds, memory_order_relaxed);
    do {
        c->next = head;
        /* Release: publishes the command (pairs with the acquire exchange in
         * run_commands()). */
    } while (!atomic_compare_exchange_weak_explicit(&r->cmds, &head, c, memory_order_release,
                                                    memory_order_relaxed));
}

/* Relaxed: closed is written under the role (mp__reactor_close()), and the caller holds the
 * role, whose acquire orders it. */
static bool closed_under_role(mp__reactor *r)
{
    return atomic_load_explicit(&r->closed, memory_order_relaxed);
}

int mp_loop_call(mp_runtime *rt, mp_loop_cmd *cmd, void (*fn)(uv_loop_t *loop, void *arg),
                 void *arg)
{
    mp__reactor *r = &rt->reactor;
    if (mp__tls_driver == r) { /* already the loop's thread: e.g. from a libuv callback */
        if (closed_under_role(r))
            return -ESHUTDOWN;
        fn(&r->loop, arg);
        return 0;
    }
    if (mp__reactor_try_acquire(r)) {
        if (closed_under_role(r)) {
            mp__reactor_release(r);
            return -ESHUTDOWN;
        }
        fn(&r->loop, arg);
        /* Nobody was driving: fn may have started I/O that needs a driver. A worker of rt
         * drives itself as soon as it runs out of tasks, and its tick polls serve the loop
         * until then; commands left behind are another matter (the release says so). Any
         * other thread gets a worker to drive (a parked one, or the first thread of a lazily
         * started runtime). */
        bool left = mp__reactor_release(r);
        mp__worker *w = mp__tls_worker;
        if (left || !w || w->rt != rt)
            mp__runtime_notify(rt);
        return 0;
    }
    /* (E): pairs with (G)/(H) in mp__reactor_close(); see the top of this file. */
    atomic_fetch_add_explicit(&r->callers, 1, memory_order_seq_cst);
    /* (F): as (E). */
    if (atomic_load_explicit(&r->closed, memory_order_seq_cst)) {
        /* Relaxed: we touched nothing that close must see. */
        atomic_fetch_sub_explicit(&r->callers, 1, memory_order_relaxed);
        return -ESHUTDOWN;
    }
    if (r->call_delay_us)
        usleep(r->call_delay_us); /* testhook.c: widens the window drawn at the top */
    cmd->fn = fn;
    cmd->arg = arg;
    push_command(r, cmd); /* (C) */
    /* (D): pairs with (A)/(B) in mp__reactor_release(). */
    atomic_thread_fence(memory_order_seq_cst);
    if (mp__reactor_try_acquire(r)) { /* the holder left meanwhile: run it ourselves */
        mp__reactor_release(r);
        mp__runtime_notify(rt);
    } else {
        mp__reactor_wake(r);
    }
    /* Release: the push and the async send come before close sees us gone (pairs with the
     * acquire load at (H) in mp__reactor_close()). */
    atomic_fetch_sub_explicit(&r->callers, 1, memory_order_release);
    return 0;
}

/* mp_loop_call_wait(): the command runs fn, then wakes the caller, who blocks on a thread
 * waiter (waker.c) in between. Everything lives in the caller's frame, which stays until the
 * wake: run_commands() has read the command's next and fn before calling it, and the
 * command touches nothing of the frame after the wake. */
typedef struct call_wait {
    mp_loop_cmd cmd;
    void (*fn)(uv_loop_t *loop, void *arg);
    void *arg;
    mp_waker done; /* the caller's thread waiter */
} call_wait;

static void call_wait_cmd(uv_loop_t *loop, void *arg)
{
    call_wait *cw = arg;
    cw->fn(loop, cw->arg);
    /* The waiter's release store publishes what fn did; pairs with the acquire in
     * mp__thread_waiter_wait() (waker.c). cw may be gone once this returns. */
    mp_waker_wake_by_ref(&cw->done);
}

int mp_loop_call_wait(mp_runtime *rt, void (*fn)(uv_loop_t *loop, void *arg), void *arg)
{
    /* A worker (or a task polled inline) that does not hold the loop may be the very thread
     * the loop waits for: with one worker, nobody else would ever drive it. */
    if (mp__tls_driver != &rt->reactor && mp_runtime_current() == rt)
        return -EDEADLK;
    mp__thread_waiter tw;
    call_wait cw = {.fn = fn, .arg = arg, .done = mp__thread_waiter_init(&tw)};
    int rc = mp_loop_call(rt, &cw.cmd, call_wait_cmd, &cw);
    if (rc != 0)
        return rc;
    mp__thread_waiter_wait(&tw); /* returns at once when mp_loop_call ran it inline */
    return 0;
}

uv_loop_t *mp_runtime_loop(mp_runtime *rt)
{
    return &rt->reactor.loop;
}

bool mp_loop_is_current(mp_runtime *rt)
{
    return mp__tls_driver == &rt->reactor;
}

/* Shutdown, after every worker has stopped: refuse new calls and wait for those already
 * queueing (top of file), run what is queued, close the runtime's TCP streams (their owners'
 * close callbacks run) and then any handle left, and close the loop. A call after this takes
 * the role given back at the end, finds closed set, and runs nothing: no command can be left
 * queued once the callers counted have been waited for. */
void mp__reactor_close(mp__reactor *r)
{
    while (!mp__reactor_try_acquire(r))
        sched_yield(); /* an outside mp_loop_call may hold it for a moment */
    /* (G): pairs with (E)/(F) in mp_loop_call(). */
    atomic_store_explicit(&r->closed, true, memory_order_seq_cst);
    /* (H): as (G); acquire also pairs with the release decrement in mp_loop_call(), after
     * which its command is in cmds. A caller counted here only pushes and sends; it waits
     * for nothing of ours. */
    while (atomic_load_explicit(&r->callers, memory_order_seq_cst) != 0)
        sched_yield();
    run_commands(r);
    mp__timers_close(r);
    mp__io_close_all(r);
    uv_walk(&r->loop, close_walk_cb, NULL);
    while (uv_run(&r->loop, UV_RUN_DEFAULT) != 0)
        run_commands(r);
    run_commands(r);
    int rc = uv_loop_close(&r->loop);
    if (rc != 0)
        MP__UNREACHABLE("uv_loop_close: %s", uv_strerror(rc));
    close(r->epfd);
    mp__reactor_release(r);
}
