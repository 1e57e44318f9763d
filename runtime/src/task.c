/* task.c: task wakers, spawning, running one turn of a task, cancellation, join and
 * mp_spawn_fn. The state word these go through, and its transitions, are state.c's: nothing
 * here changes the word but through them.
 *
 * Wakers do not order the waker's earlier writes with the task's next poll: a primitive must
 * register a waker and check its condition under its own synchronization (the primitives in sync/
 * do).
 */
#include "internal.h"

/* Wakers for tasks. */

static void task_schedule(mp_task *t)
{
    if (!mp__schedule(t->rt, t, false))
        mp__task_ref_dec(t, 1); /* shutting down: shutdown cancels t; drop the queue's reference */
}

static void waker_wake(const void *data)
{
    mp_task *t = (mp_task *)data;
    switch (mp__task_transition_to_notified_by_val(t)) {
    case MP__NOTIFY_SUBMIT:
        task_schedule(t);
        break;
    case MP__NOTIFY_DEALLOC:
        mp__task_release(t);
        break;
    case MP__NOTIFY_NOTHING:
        break;
    }
}

static void waker_wake_by_ref(const void *data)
{
    mp_task *t = (mp_task *)data;
    if (mp__task_transition_to_notified_by_ref(t) == MP__NOTIFY_SUBMIT)
        task_schedule(t);
}

static const void *waker_clone(const void *data)
{
    mp__task_ref_inc((mp_task *)data);
    return data;
}

static void waker_drop(const void *data)
{
    mp__task_ref_dec((mp_task *)data, 1);
}

const mp_waker_vtable mp__task_waker_vt = {
    .wake = waker_wake,
    .wake_by_ref = waker_wake_by_ref,
    .clone = waker_clone,
    .drop = waker_drop,
};

/* Spawning. */

void mp_task_init(mp_task *task, const mp_task_vtable *vt)
{
    mp__task_state_init(task);
    task->vt = vt;
    task->next = NULL;
    task->owned_prev = task->owned_next = task;
    task->rt = NULL;
    task->join_waker = (mp_waker){0};
    task->shard = MP__UNREGISTERED;
    task->result = 0;
    task->name = NULL;
    atomic_init(&task->polls, 0);
    atomic_init(&task->slow_reported, 0);
    atomic_init(&task->last_poll_ns, 0);
}

void mp_task_set_name(mp_task *task, const char *name)
{
    task->name = name;
}

const char *mp_task_name(const mp_task *task)
{
    return task->name;
}

/* Spawns are refused once shutdown closes the runtime, and from outside its workers already
 * while it drains. A spawn that races with the close either fails here or its task is queued
 * and shutdown cancels it (src/runtime.c). */
static bool spawn_refused(mp_runtime *rt, bool on_worker)
{
    /* Relaxed: a hint; the exact cut-offs are the closed global queue (outside) and the queue
     * drains of shutdown (workers). */
    return atomic_load_explicit(&rt->closed, memory_order_relaxed) ||
           (!on_worker && atomic_load_explicit(&rt->draining, memory_order_relaxed));
}

static bool spawnable(const mp_task *t)
{
    return t && t->vt && t->vt->poll && mp__task_state_load(t, memory_order_relaxed) == 0;
}

int mp__task_spawn(mp_runtime *rt, mp_task *t, bool joinable)
{
    if (!rt || !spawnable(t))
        return -EINVAL;
    mp__worker *w = mp__tls_worker;
    bool on_worker = w && w->rt == rt;
    if (spawn_refused(rt, on_worker))
        return -ESHUTDOWN;
    int rc = on_worker ? 0 : mp__runtime_ensure_worker(rt);
    if (rc != 0)
        return rc;
    if (!mp__task_transition_to_spawned(t, joinable))
        return -EINVAL; /* spawned by another thread since spawnable() looked */
    t->rt = rt;         /* published with t by the queue push */
    if (!mp__schedule(rt, t, false)) {
        mp__task_transition_to_unspawned(t);
        return -ESHUTDOWN;
    }
    if (on_worker)
        mp__counter_add(&w->stats.spawned, 1);
    else
        atomic_fetch_add_explicit(&rt->spawned_outside, 1, memory_order_relaxed);
    return 0;
}

int mp_spawn_batch(mp_runtime *rt, mp_task *const *tasks, size_t n)
{
    if (!rt)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!spawnable(tasks[i]))
            return -EINVAL;
    mp__worker *w = mp__tls_worker;
    bool on_worker = w && w->rt == rt;
    if (spawn_refused(rt, on_worker))
        return 0;
    int rc = on_worker ? 0 : mp__runtime_ensure_worker(rt);
    if (rc != 0)
        return rc;
    size_t spawned = 0;
    while (spawned < n) {
        mp_task *chunk[64];
        size_t k = n - spawned < 64 ? n - spawned : 64;
        for (size_t i = 0; i < k; i++) {
            mp_task *t = tasks[spawned + i];
            if (!mp__task_transition_to_spawned(t, false))
                MP__UNREACHABLE("task %p of a batch spawned twice", (void *)t);
            t->rt = rt;
            chunk[i] = t;
        }
        if (!mp__schedule_batch(rt, chunk, k)) {
            for (size_t i = 0; i < k; i++)
                mp__task_transition_to_unspawned(chunk[i]);
            break;
        }
        spawned += k;
    }
    if (on_worker)
        mp__counter_add(&w->stats.spawned, spawned);
    else
        atomic_fetch_add_explicit(&rt->spawned_outside, spawned, memory_order_relaxed);
    return (int)spawned;
}

int mp_spawn(mp_runtime *rt, mp_task *task)
{
    return mp__task_spawn(rt, task, false);
}

int mp_spawn_joinable(mp_runtime *rt, mp_task *task)
{
    return mp__task_spawn(rt, task, true);
}

/* Running. */

static void complete(mp_task *t, int result)
{
    /* Unregister while still RUNNING: nobody can have returned from a join yet. The run
     * reference goes, and the registry's if the task had one and shutdown did not take it.
     * t->shard is only touched by whoever holds RUNNING. */
    uint64_t refs = 1;
    if (t->shard != MP__UNREGISTERED && mp__owned_remove(&t->rt->owned, t))
        refs = 2;
    mp__worker *w = mp__tls_worker;
    if (w && w->rt == t->rt)
        mp__counter_add(&w->stats.completed, 1);
    else
        atomic_fetch_add_explicit(&t->rt->completed_outside, 1, memory_order_relaxed);
    t->result = result;
    if (w && w->joining == t && mp__task_transition_to_complete_joined(t, refs)) {
        w->joined = t; /* compared, never dereferenced: t may be released */
        w->joined_result = result;
        return;
    }
    if (mp__task_transition_to_complete(t, refs)) {
        mp_waker_wake_by_ref(&t->join_waker);
        mp__task_transition_to_join_waker_done(t);
    }
}

/* The task's first suspension: from now on it may sit idle with its waker held elsewhere,
 * where only the registry can find it at shutdown. The registry's reference is taken before
 * the task is linked: shutdown may unlink it at once and drop that reference. */
static bool register_task(mp_task *t, mp__worker *w)
{
    mp__task_ref_inc(t);
    if (mp__owned_bind(&t->rt->owned, t, w ? (int)w->index : -1) == 0)
        return true;
    mp__task_ref_dec(t, 1);
    return false;
}

static void cancel_and_complete(mp_task *t)
{
    if (t->vt->cancel)
        t->vt->cancel(t);
    complete(t, -ECANCELED);
}

/* A queue entry is to be run: true when its poll may go ahead (RUNNING is ours); otherwise the
 * entry is dealt with (a stale one dropped, a cancelled task's cancel run). */
static bool begin_run(mp_task *t)
{
    switch (mp__task_transition_to_running(t)) {
    case MP__TO_RUNNING_FAILED:
        mp__task_ref_dec(t, 1);
        return false;
    case MP__TO_RUNNING_CANCELLED:
        cancel_and_complete(t); /* a blocking job cancelled while queued: fn never runs */
        return false;
    case MP__TO_RUNNING_OK:
        break;
    }
    return true;
}

void mp__task_run(mp_task *t, mp__worker *w)
{
    if (!begin_run(t))
        return;
    mp_context cx = {
        .waker = {.vt = &mp__task_waker_vt, .data = t},
        .task = t,
        .yielded = false,
    };
    /* Run inline by a thread that is not a worker (a joiner): the task still sees its
     * runtime through mp_runtime_current(). */
    mp_runtime *outer = mp__tls_inline_rt;
    if (!w)
        mp__tls_inline_rt = t->rt;
    unsigned slow_us = t->rt->cfg.slow_poll_us;
    uint64_t t0 = slow_us ? mp__now_ns() : 0;
    mp_poll r = t->vt->poll(t, &cx);
    if (!w)
        mp__tls_inline_rt = outer;
    /* Relaxed: statistics for mp_runtime_dump(), written only by the thread that holds
     * RUNNING (a plain store after a load, no read-modify-write). */
    atomic_store_explicit(&t->polls, atomic_load_explicit(&t->polls, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    uint64_t t1 = slow_us ? mp__now_ns() : w ? w->tick_start_ns : 0;
    atomic_store_explicit(&t->last_poll_ns, t1, memory_order_relaxed);
    if (slow_us && t1 - t0 > (uint64_t)slow_us * 1000)
        mp__slow_poll(t, w, t1 - t0);
    if (r == MP_READY) {
        complete(t, 0);
        return;
    }
    if (!cx.yielded && t->shard == MP__UNREGISTERED && !register_task(t, w)) {
        cancel_and_complete(t); /* shutting down: a task that waits now would be lost */
        return;
    }
    switch (mp__task_transition_to_idle(t, cx.yielded)) {
    case MP__TO_IDLE_OK:
        break;
    case MP__TO_IDLE_REQUEUE:
        /* Refused only while shutting down, by an inline runner: a task that only yielded
         * may be in no registry, so cancel it here rather than lose it. */
        if (!mp__schedule(t->rt, t, true))
            mp__task_shutdown_queued(t);
        break;
    case MP__TO_IDLE_CANCELLED:
        cancel_and_complete(t);
        break;
    case MP__TO_IDLE_DEALLOC:
        mp__task_release(t);
        break;
    }
}

/* A blocking job (blocking.c), taken from the blocking pool's queue by one of its threads: one
 * poll, on this thread, to completion. Not an inline run: mp_runtime_current() stays NULL, so
 * the job may block on the loop (mp_loop_call_wait) or join like any plain thread. */
void mp__task_run_blocking(mp_task *t)
{
    if (!begin_run(t))
        return;
    mp_context cx = {
        .waker = {.vt = &mp__task_waker_vt, .data = t},
        .task = t,
        .yielded = false,
    };
    if (t->vt->poll(t, &cx) != MP_READY)
        MP__UNREACHABLE("blocking job %p returned MP_PENDING", (void *)t);
    complete(t, 0);
}

void mp__task_shutdown(mp_task *t)
{
    if (mp__task_transition_to_shutdown(t))
        cancel_and_complete(t); /* the registry's reference serves as the run reference */
    else
        mp__task_ref_dec(t, 1); /* a runner finishes it; it will not find it registered */
}

void mp__task_shutdown_queued(mp_task *t)
{
    if (mp__task_transition_to_shutdown(t))
        cancel_and_complete(t); /* the queue's reference serves as the run reference */
    else
        mp__task_ref_dec(t, 1); /* a stale entry: the task completed (or runs) elsewhere */
}

bool mp__task_is_complete(const mp_task *t)
{
    /* Acquire: the task's output is visible once COMPLETE is (pairs with the release in
     * mp__task_transition_to_complete()). */
    return mp__task_state_load(t, memory_order_acquire) & MP__T_COMPLETE;
}

bool mp_task_is_complete(const mp_task *task)
{
    return mp__task_is_complete(task);
}

void mp_task_cancel(mp_task *task)
{
    if (mp__task_transition_to_notified_and_cancel(task) == MP__NOTIFY_SUBMIT)
        task_schedule(task);
}

/* Join. */

/* The join handle goes away; the task is complete or the caller detaches. */
static void drop_join_handle(mp_task *t)
{
    mp_waker waker;
    switch (mp__task_transition_to_joined(t, &waker)) {
    case MP__JOINED:
        mp_waker_drop(&waker);
        return;
    case MP__JOINED_DEALLOC:
        mp_waker_drop(&waker);
        mp__task_release(t);
        return;
    case MP__JOINED_SLOW:
        break;
    }
    if (mp__task_transition_to_join_handle_dropped(t))
        mp_waker_drop(&t->join_waker);
    mp__task_ref_dec(t, 1);
}

void mp_detach(mp_task *task)
{
    drop_join_handle(task);
}

/* Register waker as the joiner's. true: registered (or already there), wait. false: the task
 * completed; join_waker belongs to the runtime until it clears JOIN_WAKER. */
static bool register_join_waker(mp_task *t, const mp_waker *waker)
{
    /* Acquire: pairs with the release in mp__task_transition_to_complete(). */
    uint64_t s = mp__task_state_load(t, memory_order_acquire);
    if (s & MP__T_COMPLETE)
        return false;
    if (s & MP__T_JOIN_WAKER) {
        if (mp_waker_will_wake(&t->join_waker, waker))
            return true;
        if (!mp__task_transition_unset_join_waker(t))
            return false;
        mp_waker_drop(&t->join_waker);
    }
    t->join_waker = mp_waker_clone(waker);
    if (mp__task_transition_set_join_waker(t))
        return true;
    mp_waker_drop(&t->join_waker); /* completed meanwhile: the field is still ours */
    return false;
}

/* The task completed: wait until the runtime is done with our waker, then let go. A stack
 * waker (a blocked thread's) must not be touched after we return; the runtime clears
 * JOIN_WAKER right after it wakes us, so this waits a few instructions at most. */
static int finish_join(mp_task *t)
{
    /* Acquire: pairs with the release in mp__task_transition_to_join_waker_done() that hands
     * join_waker back. */
    while (mp__task_state_load(t, memory_order_acquire) & MP__T_JOIN_WAKER)
        sched_yield();
    int result = t->result;
    drop_join_handle(t);
    return result;
}

mp_poll mp_join_poll(mp_task *task, mp_context *cx, int *result)
{
    if (register_join_waker(task, &cx->waker))
        return MP_PENDING;
    int r = finish_join(task);
    if (result)
        *result = r;
    return MP_READY;
}

/* The join handle keeps t alive; the reference taken here serves as the run reference if
 * the shutdown transition claims t, and is dropped otherwise (the runner completes it). */
static void cancel_for_joiner(mp_task *t)
{
    mp__task_ref_inc(t);
    mp__task_shutdown(t);
}

int mp_join(mp_task *task)
{
    mp__worker *w = mp__tls_worker;
    bool on_worker = w && w->rt == task->rt;
    if (on_worker) {
        int result;
        if (mp__worker_join_in_place(w, task, &result))
            return result;
        if (mp__worker_help_until(w, task))
            return finish_join(task);
        /* The runtime is stopping under us. Shutdown joins this worker's thread before it
         * cancels what is left, so waiting for it to cancel the task would never end; and
         * returning now would let the caller free what the task (a running blocking job, a
         * poll on another worker) is still writing:
         *
         *   joiner (worker)                       the task (blocking thread)
         *   mp_join returns -ECANCELED
         *   free(out)
         *                                         *out = result   -> use after free
         *
         * So cancel it ourselves as shutdown would (an idle or queued task is cancelled here,
         * its cancel callback run; a running one is marked and completes when its poll or
         * job returns), and wait for it like a plain thread, without helping: nothing may be
         * polled on a worker once stop is set. */
        cancel_for_joiner(task);
    }
    mp__thread_waiter tw;
    mp_waker waker = mp__thread_waiter_init(&tw);
    /* Help by running what waits in the global queue (possibly the task itself), but only
     * from the outermost join on this thread: a task polled inline here that joins in turn
     * blocks instead. Otherwise each inline task's join would run another on top of it, an
     * unrelated subtree as often as not, and a plain thread's stack (the main thread's 8 MiB,
     * or less) would hold as many nested polls as there are incomplete tasks. Blocking is
     * safe: a spawn from outside never leaves the runtime without a worker thread
     * (mp__runtime_ensure_worker()). A worker that gets here is stopping, and helps with
     * nothing. */
    bool help = mp__tls_inline_rt == NULL && !on_worker;
    while (!mp__task_is_complete(task)) {
        if (help && mp__runtime_run_inline(task->rt))
            continue;
        if (!register_join_waker(task, &waker))
            break;
        mp__thread_waiter_wait(&tw);
    }
    return finish_join(task);
}

/* A join with a deadline, on a plain thread: mp_join()'s loop with a timed futex wait. The race
 * it must not lose is the completion at the deadline:
 *
 *   joiner (plain thread)                      the task's runner
 *   futex wait times out
 *                                              complete: COMPLETE, JOIN_WAKER set -> wake
 *   return -ETIMEDOUT, frame gone              wake_by_ref(join_waker): writes into the
 *                                              joiner's stack frame -> use after return
 *
 * So the joiner takes its waker back with the JOIN_WAKER transition, which fails once COMPLETE
 * is set: then the runtime owns the field until it clears the bit, and the join is finished
 * as an ordinary one (finish_join() waits for the bit), reporting the task's result. */
int mp_join_until(mp_task *task, uint64_t deadline_ms)
{
    if (mp__tls_worker)
        return -EDEADLK;
    mp__thread_waiter tw;
    mp_waker waker = mp__thread_waiter_init(&tw);
    bool help = mp__tls_inline_rt == NULL, registered = false;
    while (!mp__task_is_complete(task)) {
        if (mp_now_ms() >= deadline_ms)
            goto timed_out;
        if (help && mp__runtime_run_inline(task->rt))
            continue;
        if (!register_join_waker(task, &waker))
            break;
        registered = true;
        if (!mp__thread_waiter_wait_until(&tw, deadline_ms))
            goto timed_out;
    }
    return finish_join(task);
timed_out:
    if (registered && !mp__task_transition_unset_join_waker(task))
        return finish_join(task); /* completed at the deadline: the runtime has our waker */
    if (registered)
        mp_waker_drop(&task->join_waker); /* ours again (the bit is clear) */
    return -ETIMEDOUT;
}

bool mp_join_cancel_wait(mp_task *task)
{
    /* Acquire: pairs with the release in mp__task_transition_to_complete(). */
    uint64_t s = mp__task_state_load(task, memory_order_acquire);
    if (s & MP__T_COMPLETE)
        return true;
    if (!(s & MP__T_JOIN_WAKER))
        return false; /* nothing registered: only the joiner sets the bit */
    if (!mp__task_transition_unset_join_waker(task))
        return true; /* completed meanwhile: the runtime wakes the waker and clears the bit */
    mp_waker_drop(&task->join_waker);
    return false;
}

/* Called by the worker's help loop to be woken when t completes. */
bool mp__task_register_join_waker(mp_task *t, const mp_waker *waker)
{
    return register_join_waker(t, waker);
}

/* mp_spawn_fn: a heap task that calls fn(arg) once. */
typedef struct fn_task {
    mp_task task;
    void (*fn)(void *);
    void *arg;
} fn_task;

static mp_poll fn_task_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    fn_task *f = mp_container_of(t, fn_task, task);
    f->fn(f->arg);
    return MP_READY;
}

static void fn_task_release(mp_task *t)
{
    free(mp_container_of(t, fn_task, task));
}

static const mp_task_vtable fn_task_vt = {
    .poll = fn_task_poll,
    .release = fn_task_release,
};

int mp_spawn_fn(mp_runtime *rt, void (*fn)(void *arg), void *arg, mp_task **out)
{
    if (!fn)
        return -EINVAL;
    fn_task *f = malloc(sizeof *f);
    if (!f)
        return -ENOMEM;
    mp_task_init(&f->task, &fn_task_vt);
    f->fn = fn;
    f->arg = arg;
    int rc = mp__task_spawn(rt, &f->task, out != NULL);
    if (rc != 0) {
        free(f);
        return rc;
    }
    if (out)
        *out = &f->task;
    return 0;
}

/* Context accessors. */

const mp_waker *mp_context_waker(mp_context *cx)
{
    return &cx->waker;
}

mp_task *mp_context_task(mp_context *cx)
{
    return cx->task;
}

mp_poll mp_yield(mp_context *cx)
{
    cx->yielded = true;
    return MP_PENDING;
}
