/* runtime.c: creating a runtime, starting workers lazily, waking them, shutting down, stats.
 *
 * No thread exists until work needs one: a notification that finds no parked worker takes
 * the next unstarted slot and creates its thread. If pthread_create fails, the slot goes back
 * to the unstarted ones to be tried by a later notification, the failure is counted in
 * stats.spawn_failures, and the work is left to the workers that run. A spawn from a thread
 * that is not a worker first makes sure one worker thread exists (mp__runtime_ensure_worker);
 * if not even one can be started, that spawn fails with the error, rather than queue a task
 * that nothing would ever run.
 *
 * Shutdown, and the race it must not lose:
 *
 *   shutdown                                  a thread spawning or waking
 *   join every worker thread
 *                                             push T to the global queue, start a worker
 *   free the runtime                          -> T and a new thread use freed memory
 *
 * Fixed by closing every door before joining: the registry (spawns fail with -ESHUTDOWN,
 * exactly, under its shard locks), the global queue (pushes fail and the pusher keeps the
 * task), and the idle slots (no new thread is started, under the idle lock; a start already
 * handed out is waited for through idle's `spawning` count). Then stop is stored with release
 * and every worker is unparked; a worker reads stop with acquire before each task and after
 * each wake, so it leaves its loop. Once the threads are joined the registry cancels what is
 * left, and the queues (and what overflowed into the closed global queue) are drained.
 *
 * Plain threads in mp_join poll tasks inline too, and shutdown must not return while one
 * does (the task's cancel callback would run after mp_runtime_shutdown() returned, and
 * mp_runtime_free() then frees what the poll is using):
 *
 *   joiner (mp__runtime_run_inline)           shutdown
 *   inline_runs++                     (A)     closed = true                      (C)
 *   load closed: false                (B)     load inline_runs: 0 -> return      (D)
 *   pop T, poll T                             -> T's poll races with the free
 *
 * Each side stores, then loads what the other stored (store buffering), so (A)-(D) are
 * seq_cst: either the joiner sees closed and runs nothing, or shutdown sees it counted and
 * waits until it has finished (the decrement is a release that pairs with (D)). A task the
 * joiner polls after shutdown began is cancelled through the usual paths: it finds the
 * registry or the global queue closed and cancels itself in place.
 *
 * Wakers still held by user code must be gone before mp_runtime_free().
 */
#include "internal.h"

#include <signal.h>

void mp_config_init(mp_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->shutdown_mode = MP_SHUTDOWN_CANCEL;
}

static unsigned default_workers(const mp_config *c)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned w = n > 0 ? (unsigned)n : 1;
    if (c->max_workers && w > c->max_workers)
        w = c->max_workers;
    return w;
}

/* A write to a reset connection must be an error, not the death of the process. Our own
 * sends use MSG_NOSIGNAL, but a program's own writes on the sockets it gets from the loop do
 * not, and libuv leaves SIGPIPE to the application; like Rust's standard runtime, ignore it
 * unless the program chose a disposition of its own. */
static void ignore_sigpipe(void)
{
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
}

int mp_runtime_new(mp_runtime **out, const mp_config *cfg)
{
    mp_config c;
    if (cfg)
        c = *cfg;
    else
        mp_config_init(&c);
    if (c.workers == 0)
        c.workers = default_workers(&c);
    if (c.workers > 4096)
        return -EINVAL;
    ignore_sigpipe();
    int rc = -ENOMEM;
    mp_runtime *rt = aligned_alloc(MP__CACHE_LINE, sizeof *rt);
    if (!rt)
        return -ENOMEM;
    memset(rt, 0, sizeof *rt);
    rt->cfg = c;
    rt->fail_spawn_nth = mp__test_fail_spawn_nth_value();
    rt->nworkers = c.workers;
    rt->workers = aligned_alloc(MP__CACHE_LINE, c.workers * sizeof *rt->workers);
    if (!rt->workers)
        goto out_free_rt;
    if ((rc = mp__reactor_init(&rt->reactor)) != 0)
        goto out_free_workers;
    if ((rc = mp__inject_init(&rt->inject)) != 0)
        goto out_close_reactor;
    if ((rc = mp__idle_init(&rt->idle, c.workers)) != 0)
        goto out_destroy_inject;
    if ((rc = mp__owned_init(&rt->owned, c.workers)) != 0)
        goto out_destroy_idle;
    if ((rc = mp__blocking_init(&rt->blocking, &c)) != 0)
        goto out_destroy_owned;
    if ((rc = -pthread_mutex_init(&rt->first_start_mu, NULL)) != 0)
        goto out_destroy_blocking;
    atomic_init(&rt->stop, false);
    atomic_init(&rt->draining, false);
    atomic_init(&rt->closed, false);
    atomic_init(&rt->completed_outside, 0);
    atomic_init(&rt->slow_polls_outside, 0);
    atomic_init(&rt->shutdown_state, 0);
    atomic_init(&rt->spawn_attempts, 0);
    atomic_init(&rt->spawned_outside, 0);
    atomic_init(&rt->injected, 0);
    atomic_init(&rt->wake_ns, 0);
    atomic_init(&rt->wake_sampled_at, 0);
    atomic_init(&rt->workers_live, 0);
    atomic_init(&rt->inline_runs, 0);
    for (unsigned i = 0; i < c.workers; i++)
        mp__worker_init(&rt->workers[i], rt, i);
    *out = rt;
    return 0;

out_destroy_blocking:
    mp__blocking_destroy(&rt->blocking);
out_destroy_owned:
    mp__owned_destroy(&rt->owned);
out_destroy_idle:
    mp__idle_destroy(&rt->idle);
out_destroy_inject:
    mp__inject_destroy(&rt->inject);
out_close_reactor:
    mp__reactor_close(&rt->reactor);
out_free_workers:
    free(rt->workers);
out_free_rt:
    free(rt);
    return rc;
}

static int create_thread(mp_runtime *rt, mp__worker *w)
{
    /* Relaxed: a counter for the test hook only. */
    unsigned attempt = atomic_fetch_add_explicit(&rt->spawn_attempts, 1, memory_order_relaxed) + 1;
    if (rt->fail_spawn_nth && attempt == rt->fail_spawn_nth)
        return -EAGAIN;
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return -rc;
    if (rt->cfg.stack_size && (rc = pthread_attr_setstacksize(&attr, rt->cfg.stack_size)) != 0)
        goto out_destroy_attr;
    rc = pthread_create(&w->thread, &attr, mp__worker_main, w);
    if (rc == 0) {
        char name[16];
        snprintf(name, sizeof name, "magpie-w%u", w->index);
        pthread_setname_np(w->thread, name);
    }
out_destroy_attr:
    pthread_attr_destroy(&attr);
    return -rc;
}

/* Start the thread of slot idx, which idle handed out. Returns 0 or the error. */
static int start_worker(mp_runtime *rt, unsigned idx)
{
    mp__worker *w = &rt->workers[idx];
    /* Relaxed: only this thread touches the slot until it is STARTED or FAILED. */
    atomic_store_explicit(&w->spawn_state, MP__SLOT_STARTING, memory_order_relaxed);
    int rc = create_thread(rt, w);
    if (rc == 0) {
        /* Release: publishes w->thread; pairs with the acquire load in mp_runtime_shutdown()
         * (which also waits for mp__idle_spawning() to reach 0 first). */
        atomic_store_explicit(&w->spawn_state, MP__SLOT_STARTED, memory_order_release);
        /* Release: pairs with the acquire in mp__runtime_ensure_worker(). */
        atomic_fetch_add_explicit(&rt->workers_live, 1, memory_order_release);
        mp__idle_spawn_settled(&rt->idle);
        return 0;
    }
    /* Release: pairs with the acquire load in mp_runtime_shutdown(), which skips the slot. */
    atomic_store_explicit(&w->spawn_state, MP__SLOT_FAILED, memory_order_release);
    mp__idle_spawn_failed(&rt->idle, idx);
    mp__idle_spawn_settled(&rt->idle);
    return rc;
}

void mp__runtime_unpark(mp_runtime *rt, mp__worker *w)
{
    /* The wake-latency sample's start (worker.c, park_worker()). Relaxed: the release swap in
     * mp__park_unpark() below publishes it to the acquire that ends the worker's futex wait. */
    atomic_store_explicit(&w->park.unparked_at, mp__now_ns(), memory_order_relaxed);
    if (mp__park_unpark(&w->park) == MP__DRIVING)
        mp__reactor_wake(&rt->reactor);
}

static void notify(mp_runtime *rt, bool may_spawn)
{
    /* (A) in idle.c's protocol: the task just queued is visible before we look at who is
     * searching or parked; pairs with fence (B) in mp__idle_transition_to_parked(). */
    atomic_thread_fence(memory_order_seq_cst);
    unsigned idx;
    switch (mp__idle_worker_to_notify(&rt->idle, &idx, may_spawn)) {
    case MP__NOTIFY_UNPARK:
        mp__runtime_unpark(rt, &rt->workers[idx]);
        break;
    case MP__NOTIFY_SPAWN:
        /* The work that asked for a new worker still needs one if the start failed: wake a
         * parked one instead. Not another start, which could fail the same way and recurse;
         * the failed slot is retried by the next notification. */
        if (start_worker(rt, idx) != 0)
            notify(rt, false);
        break;
    case MP__NOTIFY_NONE:
        break;
    }
}

void mp__runtime_notify(mp_runtime *rt)
{
    notify(rt, true);
}

int mp__runtime_ensure_worker(mp_runtime *rt)
{
    /* Acquire: pairs with the release increment in start_worker(). Once a worker lives it
     * lives until shutdown, so this is the only check on the hot path. */
    if (atomic_load_explicit(&rt->workers_live, memory_order_acquire) != 0)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&rt->first_start_mu);
    /* Acquire: pairs with start_worker()'s release increment, as above. */
    while (atomic_load_explicit(&rt->workers_live, memory_order_acquire) == 0) {
        unsigned idx;
        if (mp__idle_take_slot(&rt->idle, &idx)) {
            if ((rc = start_worker(rt, idx)) != 0)
                break;
        } else if (mp__idle_spawning(&rt->idle) != 0) {
            sched_yield(); /* a notification is starting one: see how it goes */
        } else {
            rc = -ESHUTDOWN; /* no slot left to start: closed */
            break;
        }
    }
    pthread_mutex_unlock(&rt->first_start_mu);
    return rc;
}

bool mp__runtime_run_inline(mp_runtime *rt)
{
    if (mp__inject_len(&rt->inject) == 0)
        return false;
    /* (A) then (B): see the protocol at the top of this file. */
    atomic_fetch_add_explicit(&rt->inline_runs, 1, memory_order_seq_cst);
    mp_task *t = NULL;
    if (!atomic_load_explicit(&rt->closed, memory_order_seq_cst))
        t = mp__inject_pop(&rt->inject);
    if (t)
        mp__task_run(t, NULL);
    /* Release: the poll (and any cancel it ran) is done; pairs with (D) in
     * mp_runtime_shutdown(). */
    atomic_fetch_sub_explicit(&rt->inline_runs, 1, memory_order_release);
    return t != NULL;
}

bool mp__runtime_work_pending(mp_runtime *rt)
{
    if (mp__inject_len(&rt->inject) > 0)
        return true;
    /* Without stealing, another worker's ring is nobody else's work (see mp__schedule()). */
    if (rt->cfg.disable_steal)
        return false;
    for (unsigned i = 0; i < rt->nworkers; i++)
        if (!mp__queue_is_empty(&rt->workers[i].queue))
            return true;
    return false;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Nothing left to run: every started worker asleep (so its queues are empty), the global
 * queue empty, and no task suspended (those are registered). With spawns from outside
 * refused this stays true once true, except for tasks woken from outside, which are
 * registered and so counted until they finish. */
static bool quiescent(mp_runtime *rt)
{
    /* Relaxed: with no spawns from outside, new work can only come from waking a suspended
     * task, and a suspended task keeps the registry count above zero until it completes; a
     * stale read only costs one more millisecond of polling. */
    uint64_t idle = atomic_load_explicit(&rt->idle.state, memory_order_relaxed);
    return (idle >> 32) == 0 && mp__inject_len(&rt->inject) == 0 &&
           mp__owned_count(&rt->owned) == 0 && !mp__blocking_busy(&rt->blocking);
}

int mp_runtime_shutdown(mp_runtime *rt)
{
    mp__worker *self = mp__tls_worker;
    /* From inside one of its tasks, on a worker or polled inline by a joiner: shutdown would
     * wait for that very poll. */
    if ((self && self->rt == rt) || mp__tls_inline_rt == rt)
        return -EDEADLK;
    int expected = 0;
    /* Relaxed: only decides which caller shuts down; the steps below carry the ordering. */
    if (!atomic_compare_exchange_strong_explicit(&rt->shutdown_state, &expected, 1,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        /* Another caller is shutting down: return once it has finished, so that whoever gets
         * -EALREADY may go on to mp_runtime_free(). Acquire: pairs with the release store of
         * 2 at the end. */
        while (atomic_load_explicit(&rt->shutdown_state, memory_order_acquire) != 2)
            sleep_ms(1);
        return -EALREADY;
    }
    if (rt->cfg.shutdown_mode == MP_SHUTDOWN_DRAIN) {
        /* Refuse spawns from outside; tasks on workers may still spawn what they need to
         * finish. Polling each millisecond is fine: this is not an idle runtime. */
        atomic_store_explicit(&rt->draining, true, memory_order_relaxed);
        uint64_t deadline = rt->cfg.drain_timeout_ms
                                ? mp__now_ns() + (uint64_t)rt->cfg.drain_timeout_ms * 1000000u
                                : UINT64_MAX;
        while (!quiescent(rt) && mp__now_ns() < deadline)
            sleep_ms(1);
    }
    /* (C): see the inline-run protocol at the top of this file. */
    atomic_store_explicit(&rt->closed, true, memory_order_seq_cst);
    mp__owned_close(&rt->owned);
    mp__inject_close(&rt->inject);
    mp__idle_close(&rt->idle);
    /* A slot handed out just before the close may still be starting its thread. */
    while (mp__idle_spawning(&rt->idle) != 0)
        sched_yield();
    /* Release: pairs with the acquire load in stopping() (worker.c). */
    atomic_store_explicit(&rt->stop, true, memory_order_release);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        mp__worker *w = &rt->workers[i];
        /* Acquire: pairs with the release stores in start_worker(). */
        if (atomic_load_explicit(&w->spawn_state, memory_order_acquire) == MP__SLOT_STARTED) {
            mp__runtime_unpark(rt, w);
            pthread_join(w->thread, NULL);
        }
    }
    mp__owned_shutdown_all(&rt->owned);
    for (unsigned i = 0; i < rt->nworkers; i++)
        mp__worker_drain_on_shutdown(&rt->workers[i]);
    for (mp_task *t; (t = mp__inject_pop(&rt->inject));)
        mp__task_shutdown_queued(t);
    /* Blocking jobs: the queued ones are cancelled, running ones waited for (they cannot be
     * interrupted) up to the drain timeout; past it they are left to finish, and
     * mp_runtime_free() waits for them. */
    int rc = mp__blocking_shutdown(&rt->blocking, rt->cfg.drain_timeout_ms);
    /* (D): wait for joiners still polling a task inline; every task they could be waiting
     * on has completed or been cancelled above. */
    while (atomic_load_explicit(&rt->inline_runs, memory_order_seq_cst) != 0)
        sched_yield();
    mp__reactor_close(&rt->reactor);
    /* Release: pairs with the acquire load of a concurrent caller above. */
    atomic_store_explicit(&rt->shutdown_state, 2, memory_order_release);
    return rc;
}

void mp_runtime_free(mp_runtime *rt)
{
    if (!rt)
        return;
    /* Acquire: pairs with the release store of 2 in mp_runtime_shutdown(); if another
     * thread is still shutting down, this waits for it (-EALREADY). */
    if (atomic_load_explicit(&rt->shutdown_state, memory_order_acquire) != 2)
        mp_runtime_shutdown(rt);
    pthread_mutex_destroy(&rt->first_start_mu);
    mp__blocking_destroy(&rt->blocking);
    mp__owned_destroy(&rt->owned);
    mp__idle_destroy(&rt->idle);
    mp__inject_destroy(&rt->inject);
    free(rt->workers);
    free(rt);
}

int mp_block_on(mp_runtime *rt, mp_task *task)
{
    int rc = mp_spawn_joinable(rt, task);
    if (rc != 0)
        return rc;
    return mp_join(task);
}

int mp_block_on_until(mp_runtime *rt, mp_task *task, uint64_t deadline_ms)
{
    if (mp__tls_worker)
        return -EDEADLK;
    int rc = mp_spawn_joinable(rt, task);
    if (rc != 0)
        return rc;
    rc = mp_join_until(task, deadline_ms);
    if (rc != -ETIMEDOUT)
        return rc;
    /* The deadline passed: cancel it, and wait for its running poll (if any) to end, so that
     * nothing of it runs once we return. A poll that returned MP_READY meanwhile completed it. */
    mp_task_cancel(task);
    return mp_join(task) == 0 ? 0 : -ETIMEDOUT;
}

mp_runtime *mp_runtime_current(void)
{
    return mp__tls_worker ? mp__tls_worker->rt : mp__tls_inline_rt;
}

unsigned mp_runtime_workers(const mp_runtime *rt)
{
    return rt->nworkers;
}

static void read_counters(const mp__worker *w, mp_worker_stats *o)
{
    const mp__worker_counters *c = &w->stats;
    /* Relaxed: statistics (mp__counter in internal.h). */
#define READ(name, help) o->name = atomic_load_explicit(&c->name, memory_order_relaxed);
    MP_WORKER_COUNTERS(READ)
#undef READ
}

int mp_runtime_worker_stats(mp_runtime *rt, unsigned worker, mp_worker_stats *out)
{
    if (worker >= rt->nworkers)
        return -EINVAL;
    read_counters(&rt->workers[worker], out);
    return 0;
}

int mp_runtime_stats_get(mp_runtime *rt, mp_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        mp_worker_stats w;
        read_counters(&rt->workers[i], &w);
#define SUM(name, help) out->total.name += w.name;
        MP_WORKER_COUNTERS(SUM)
#undef SUM
        /* Relaxed: a snapshot. */
        if (atomic_load_explicit(&rt->workers[i].spawn_state, memory_order_relaxed) ==
            MP__SLOT_STARTED)
            out->workers_started++;
    }
    out->total.spawned += atomic_load_explicit(&rt->spawned_outside, memory_order_relaxed);
    out->workers = rt->nworkers;
    out->spawn_failures = atomic_load_explicit(&rt->idle.failed, memory_order_relaxed);
    out->injected = atomic_load_explicit(&rt->injected, memory_order_relaxed);
    out->wake_latency_ns = atomic_load_explicit(&rt->wake_ns, memory_order_relaxed);
    out->total.completed += atomic_load_explicit(&rt->completed_outside, memory_order_relaxed);
    out->total.slow_polls += atomic_load_explicit(&rt->slow_polls_outside, memory_order_relaxed);
    /* A snapshot: spawns were read before completions, so a task spawned and completed
     * in between counts as complete but not spawned, and the difference may read low; it is
     * clamped at zero. */
    out->live_tasks =
        out->total.spawned > out->total.completed ? out->total.spawned - out->total.completed : 0;
    mp__blocking_stats(&rt->blocking, out);
    return 0;
}

/* The deprecated old name (magpie_core.h): the same function, still exported. */
int mp_runtime_stats(mp_runtime *rt, mp_stats *out)
{
    return mp_runtime_stats_get(rt, out);
}
