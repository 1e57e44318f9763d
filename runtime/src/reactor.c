/* reactor.c: one libuv loop per runtime, run by whichever worker holds the driver role.
 *
 * libuv is not thread-safe: every call on the loop or its handles must come from the thread
 * that runs the loop at that moment, except uv_async_send. So the right to call libuv is a
 * role, held by at most one thread at a time (role: 0 free, 1 held; a CAS takes it with
 * acquire, a store gives it back with release, so each holder sees everything its
 * predecessor did to the loop):
 *
 *   - a worker that finds no work and would park takes the role if it is free and blocks in
 *     uv_run(UV_RUN_ONCE) instead of on its futex; its park word says DRIVING, so whoever
 *     unparks it sends the async handle instead of a futex wake (worker.c, runtime.c);
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

/* The streams' edge-triggered epoll set (tcp.c) is readable while it holds events; libuv
 * watches it like any other fd. Each event is handled before the next epoll_wait, all on this
 * thread, which is what lets close_cmd() in tcp.c free a stream once it left the set. A
 * bounded number of rounds: what is left keeps epfd readable for the loop's next turn. */
static void epoll_cb(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    mp__reactor *r = h->data;
    struct epoll_event ev[128];
    for (int round = 0; round < 8; round++) {
        int n = epoll_wait(r->epfd, ev, 128, 0);
        if (n < 0 && errno == EINTR)
            continue;
        for (int i = 0; i < n; i++)
            mp__tcp_ready(ev[i].data.ptr, ev[i].events);
        if (n < 128)
            break;
    }
}

/* Timers. The wheel is shared: tasks on any worker arm and cancel under wheel_lock, the loop
 * fires. The uv_timer is only ever set for the wheel's next expiration, so an idle runtime
 * with no timer pending has none armed. A task whose deadline comes before what the
 * uv_timer is armed for asks the loop to re-arm it (armed_ms is updated at once, under the
 * lock, so that only the first such task sends the command; rearm_queued keeps rearm_cmd in
 * the command stack at most once, and its release/acquire pair hands the struct back).
 *
 * The lost timer wake-up (libuv 1.44, the version these builds use):
 *
 *   driver (one worker, the loop's only runner)
 *   uv_run(ONCE): timer armed for D, blocks until D
 *   woken early by the async handle (a spawn); runs that task past D
 *   parks, drives again: uv_run(ONCE)
 *     runs due timers first: D fires, its task -> this worker's LIFO slot
 *     computes the poll timeout: no timer left, nothing pending -> epoll_wait(-1)
 *   -> the woken task sits in the LIFO slot of a thread that sleeps for ever
 *
 * UV_RUN_ONCE only avoids blocking after callbacks that ran in the poll phase. Fixed where the
 * wake lands: mp__schedule() (worker.c) calls uv_stop() when it queues a task on the driving
 * worker, which makes that iteration's poll non-blocking (libuv clears the flag as uv_run
 * returns). The fired flag itself is not what makes a timer ready: mp_timer_poll() asks the
 * clock, so a deadline moved later after it fired waits for the new one. */
_Static_assert(offsetof(mp_timer, link_) == offsetof(mp__timer_entry, prev) &&
                   offsetof(mp_timer, deadline_ms) == offsetof(mp__timer_entry, deadline_ms) &&
                   offsetof(mp_timer, where_) == offsetof(mp__timer_entry, where),
               "mp_timer must begin with an mp__timer_entry");

uint64_t mp_now_ms(void)
{
    return uv_hrtime() / 1000000u;
}

static void timers_cb(uv_timer_t *h);

static void arm_locked_unlock(mp__reactor *r)
{
    uint64_t next = mp__wheel_next_expiration(&r->wheel);
    r->armed_ms = next;
    mp__spin_unlock(&r->wheel_lock);
    if (next == UINT64_MAX) {
        uv_timer_stop(&r->timer);
        return;
    }
    uint64_t now = mp_now_ms();
    uv_update_time(&r->loop);
    uv_timer_start(&r->timer, timers_cb, next > now ? next - now : 0, 0);
}

/* On the loop: fire what is due and arm for the next expiration. The fired timers' tasks
 * are woken by reference under the lock: their wakers stay in the timers (a task's next
 * poll or cancel drops them), so no waker's last reference, and no user code, is dropped
 * here. */
void mp__reactor_timers(mp__reactor *r)
{
    uint64_t now = mp_now_ms();
    mp__spin_lock(&r->wheel_lock);
    for (mp__timer_entry *e = mp__wheel_advance(&r->wheel, now); e;) {
        mp__timer_entry *next = e->next;
        mp_timer *t = (mp_timer *)e;
        if (t->want_ms_ > now) {
            /* Moved later while linked (mp_timer_poll's lazy path): follow it, no wake. */
            mp__wheel_insert(&r->wheel, e, t->want_ms_);
        } else {
            t->fired = true;
            mp_waker_wake_by_ref(&t->waker);
        }
        e = next;
    }
    arm_locked_unlock(r);
}

static void timers_cb(uv_timer_t *h)
{
    mp__reactor_timers(h->data);
}

static void rearm_cmd(uv_loop_t *loop, void *arg)
{
    (void)loop;
    mp__reactor *r = arg;
    /* Release: run_commands() is done with rearm_cmd (it read ->next and ->fn before calling
     * us), so the next queue_rearm() may rewrite it; pairs with the acquire CAS there. The
     * wheel is read under its lock below, after this store, so a task that finds the flag
     * clear and queues again is not needed for what it inserted before. */
    atomic_store_explicit(&r->rearm_queued, false, memory_order_release);
    mp__reactor_timers(r);
}

void mp_timer_init(mp_timer *t, mp_runtime *rt)
{
    memset(t, 0, sizeof *t);
    mp__timer_entry_init((mp__timer_entry *)t);
    t->rt = rt;
}

/* Under wheel_lock: the last pending timer went away but the uv_timer is still armed for it.
 * Disarm it now, while there is activity, rather than wake an idle runtime later for nothing.
 * Returns whether the caller must queue rearm_cmd (after unlocking). */
static bool disarm_if_empty_locked(mp__reactor *r)
{
    if (mp__wheel_count(&r->wheel) != 0 || r->armed_ms == UINT64_MAX)
        return false;
    r->armed_ms = UINT64_MAX;
    return true;
}

static void queue_rearm(mp_runtime *rt)
{
    mp__reactor *r = &rt->reactor;
    bool expected = false;
    /* Acquire: rearm_cmd is ours to rewrite only after the loop's last read of it; pairs
     * with the release store in rearm_cmd(). A command still queued (the flag set) will read
     * the wheel after our insert, so nothing more is needed then. */
    if (atomic_compare_exchange_strong_explicit(&r->rearm_queued, &expected, true,
                                                memory_order_acquire, memory_order_relaxed) &&
        mp_loop_call(rt, &r->rearm_cmd, rearm_cmd, r) != 0)
        atomic_store_explicit(&r->rearm_queued, false, memory_order_relaxed);
}

mp_poll mp_timer_poll(mp_timer *t, uint64_t deadline_ms, mp_context *cx)
{
    mp__reactor *r = &t->rt->reactor;
    mp__timer_entry *e = (mp__timer_entry *)t;
    mp_waker old = {0};
    mp__spin_lock(&r->wheel_lock);
    /* A keep-alive connection moves its deadline later with every request. While the entry
     * is linked at or before the new deadline, recording the new one is all it takes: when
     * the entry comes due, mp__reactor_timers() moves it to want_ms_ instead of waking us.
     * It cannot fire early that way, and the uv_timer stays armed for what it was (the
     * earliest deadline did not change). If the new deadline has in fact passed, the old
     * entry is overdue and fires at the loop's next turn, waking us to see it. */
    if (e->where != MP__TIMER_NOT_LINKED && e->deadline_ms <= deadline_ms &&
        mp_waker_will_wake(&t->waker, mp_context_waker(cx))) {
        t->want_ms_ = deadline_ms;
        mp__spin_unlock(&r->wheel_lock);
        return MP_PENDING;
    }
    /* Ready by the clock alone: the wheel fires an entry only once mp_now_ms() has reached
     * its deadline, so a fired entry is due here too, while a deadline moved later since it
     * fired is not (a "fired" flag would say READY for it at once). */
    if (mp_now_ms() >= deadline_ms) {
        mp__wheel_remove(&r->wheel, e);
        t->fired = false;
        old = t->waker;
        t->waker = (mp_waker){0};
        bool disarm = disarm_if_empty_locked(r);
        mp__spin_unlock(&r->wheel_lock);
        mp_waker_drop(&old);
        if (disarm)
            queue_rearm(t->rt);
        return MP_READY;
    }
    t->want_ms_ = deadline_ms;
    if (e->where == MP__TIMER_NOT_LINKED || e->deadline_ms != deadline_ms) {
        t->fired = false;
        mp__wheel_insert(&r->wheel, e, deadline_ms);
    }
    if (!mp_waker_will_wake(&t->waker, mp_context_waker(cx))) {
        old = t->waker;
        t->waker = mp_waker_clone(mp_context_waker(cx));
    }
    bool rearm = deadline_ms < r->armed_ms;
    if (rearm)
        r->armed_ms = deadline_ms;
    mp__spin_unlock(&r->wheel_lock);
    mp_waker_drop(&old);
    if (rearm)
        queue_rearm(t->rt);
    return MP_PENDING;
}

void mp_timer_cancel(mp_timer *t)
{
    mp__reactor *r = &t->rt->reactor;
    mp__spin_lock(&r->wheel_lock);
    mp__wheel_remove(&r->wheel, (mp__timer_entry *)t);
    t->fired = false;
    mp_waker old = t->waker;
    t->waker = (mp_waker){0};
    bool disarm = disarm_if_empty_locked(r);
    mp__spin_unlock(&r->wheel_lock);
    mp_waker_drop(&old);
    if (disarm)
        queue_rearm(t->rt);
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
     * blocks in epoll_wait (UV_RUN_ONCE returns at once from a loop with no live handle). */
    r->async.data = r;
    r->tcps = NULL;
    rc = uv_timer_init(&r->loop, &r->timer);
    if (rc == 0) {
        r->timer.data = r;
        rc = uv_poll_init(&r->loop, &r->epoll, r->epfd);
        if (rc == 0) {
            r->epoll.data = r;
            rc = uv_poll_start(&r->epoll, UV_READABLE, epoll_cb);
        }
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
    atomic_init(&r->role, 0);
    atomic_init(&r->cmds, NULL);
    atomic_init(&r->closed, false);
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

void mp__reactor_run(mp__reactor *r, bool block)
{
    uv_run(&r->loop, block ? UV_RUN_ONCE : UV_RUN_NOWAIT);
    run_commands(r);
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

int mp_loop_call(mp_runtime *rt, mp_loop_cmd *cmd, void (*fn)(uv_loop_t *loop, void *arg),
                 void *arg)
{
    mp__reactor *r = &rt->reactor;
    /* Relaxed: a hint; calls racing with shutdown are the caller's to avoid (see magpie.h). */
    if (atomic_load_explicit(&r->closed, memory_order_relaxed))
        return -ESHUTDOWN;
    if (mp__tls_driver == r) { /* already the loop's thread: e.g. from a libuv callback */
        fn(&r->loop, arg);
        return 0;
    }
    if (mp__reactor_try_acquire(r)) {
        fn(&r->loop, arg);
        mp__reactor_release(r);
        /* Nobody was driving: fn may have started I/O that needs a driver. Get a worker to
         * drive (a parked one, or the first thread of a lazily started runtime); with every
         * worker busy, their tick polls serve the loop. */
        mp__runtime_notify(rt);
        return 0;
    }
    cmd->fn = fn;
    cmd->arg = arg;
    push_command(r, cmd); /* (C) */
    /* (D): pairs with (A)/(B) in mp__reactor_release(). */
    atomic_thread_fence(memory_order_seq_cst);
    if (mp__reactor_try_acquire(r)) { /* the holder left meanwhile: run it ourselves */
        mp__reactor_release(r);
        mp__runtime_notify(rt);
        return 0;
    }
    mp__reactor_wake(r);
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

/* Shutdown, after every worker has stopped: run what is queued, close the runtime's TCP
 * streams (their owners' close callbacks run) and then any handle left, and close the
 * loop. */
void mp__reactor_close(mp__reactor *r)
{
    while (!mp__reactor_try_acquire(r))
        sched_yield(); /* an outside mp_loop_call may hold it for a moment */
    atomic_store_explicit(&r->closed, true, memory_order_relaxed);
    run_commands(r);
    /* Timers still armed belong to tasks that are gone: drop the wakers they kept. */
    mp__spin_lock(&r->wheel_lock);
    mp__timer_entry *left = mp__wheel_advance(&r->wheel, UINT64_MAX - 1);
    mp__spin_unlock(&r->wheel_lock);
    while (left) {
        mp__timer_entry *next = left->next;
        mp_waker_drop(&((mp_timer *)left)->waker);
        left = next;
    }
    mp__tcp_close_all(r);
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
