/* task.c: the task state word, the transitions that change it, task wakers, running one turn
 * of a task, and join.
 *
 * The state is one 64-bit atomic word. Nothing outside this file changes it, and here only
 * the named transition functions do, each returning what the caller must do next.
 *
 *   bit 0  RUNNING        a thread is polling the task (or cancelling it); exclusive
 *   bit 1  COMPLETE       finished (READY or cancelled); never unset
 *   bit 2  SCHEDULED      a run queue holds the task and one reference for it
 *   bit 3  NOTIFIED       woken while RUNNING: run again after this poll (at the back)
 *   bit 4  CANCELLED      do not poll again; never unset
 *   bit 5  JOIN_INTEREST  a join handle exists
 *   bit 6  JOIN_WAKER     join_waker holds the joiner's waker (access rules below)
 *   16..63 reference count: queue, registry (owned.c, from the first PENDING on), join
 *          handle, each waker clone
 *
 * IDLE is none of RUNNING, COMPLETE, SCHEDULED. A wake of an IDLE task sets
 * SCHEDULED and queues it; of a SCHEDULED task does nothing (it will be polled); of a
 * RUNNING task sets NOTIFIED, and the runner re-queues it after poll returns: no wake
 * is lost and the task never runs twice at once.
 *
 * The waker field join_waker is shared between the joiner and the runtime by the JOIN_WAKER
 * bit (Tokio's rules):
 *   - JOIN_WAKER clear, COMPLETE clear: the joiner may write the field, then sets the
 * bit with a release CAS that fails if COMPLETE was set meanwhile.
 *   - JOIN_WAKER set, COMPLETE clear: nobody writes; the joiner may clear the bit (CAS,
 *     fails on COMPLETE) to replace the waker.
 *   - COMPLETE and JOIN_WAKER set: the runtime wakes it, then clears the bit; from then
 * on the joiner owns the field (or the runtime drops it if the join handle is gone).
 *
 * Wakers do not order the waker's earlier writes with the task's next poll: a primitive must
 * register a waker and check its condition under its own synchronization (the primitives in sync/
 * do).
 */
#include "internal.h"

static inline uint64_t refs_of(uint64_t s)
{
    return s >> MP__T_REF_SHIFT;
}

static inline uint64_t load_state(const mp_task *t, memory_order mo)
{
    return atomic_load_explicit((_Atomic uint64_t *)&t->state, mo);
}

static void release_task(mp_task *t)
{
    if (t->vt->release)
        t->vt->release(t);
}

/* Drop n references; release the task if they were the last. */
static void ref_dec(mp_task *t, uint64_t n)
{
    /* acq_rel: release publishes our use of the task; the thread that drops the last
     * reference acquires everyone else's before the release callback frees it (the acquire
     * pairs with the release half of every other reference drop). */
    uint64_t prev = atomic_fetch_sub_explicit(&t->state, n * MP__T_REF_ONE, memory_order_acq_rel);
    if (refs_of(prev) < n)
        MP__UNREACHABLE("task %p reference underflow, state %#llx", (void *)t,
                        (unsigned long long)prev);
    if (refs_of(prev) == n)
        release_task(t);
}

static void ref_inc(mp_task *t)
{
    /* Relaxed: a new reference is made from an existing one, which keeps the task alive. */
    atomic_fetch_add_explicit(&t->state, MP__T_REF_ONE, memory_order_relaxed);
}

/* Transitions. */

/* A queue entry is being run: SCHEDULED -> RUNNING. FAILED: shutdown or a concurrent
 * runner claimed the task; the caller drops the queue's reference. */
mp__to_running mp__task_transition_to_running(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        uint64_t n;
        mp__to_running r;
        if (s & (MP__T_RUNNING | MP__T_COMPLETE)) {
            n = s & ~MP__T_SCHEDULED;
            r = MP__TO_RUNNING_FAILED;
        } else {
            n = (s & ~MP__T_SCHEDULED) | MP__T_RUNNING;
            r = (s & MP__T_CANCELLED) ? MP__TO_RUNNING_CANCELLED : MP__TO_RUNNING_OK;
        }
        /* Acquire: this poll sees everything the previous poll did (pairs with the release
         * in mp__task_transition_to_idle(), which may have run on another worker). */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acquire,
                                                  memory_order_relaxed))
            return r;
    }
}

/* poll returned PENDING. OK: idle, the run reference is dropped. REQUEUE: woken meanwhile (or
 * yielded); it is SCHEDULED again and the run reference becomes the queue's. CANCELLED:
 * still RUNNING, the caller cancels it. */
mp__to_idle mp__task_transition_to_idle(mp_task *t, bool yielded)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if (!(s & MP__T_RUNNING))
            MP__UNREACHABLE("to_idle of a task not running, state %#llx", (unsigned long long)s);
        uint64_t n;
        mp__to_idle r;
        if (s & MP__T_CANCELLED) {
            return MP__TO_IDLE_CANCELLED;
        } else if ((s & MP__T_NOTIFIED) || yielded) {
            n = (s & ~(MP__T_RUNNING | MP__T_NOTIFIED)) | MP__T_SCHEDULED;
            r = MP__TO_IDLE_REQUEUE;
        } else {
            n = (s & ~MP__T_RUNNING) - MP__T_REF_ONE;
            r = refs_of(n) == 0 ? MP__TO_IDLE_DEALLOC : MP__TO_IDLE_OK;
        }
        /* Release: publishes this poll to the next one (pairs with the acquire in
         * mp__task_transition_to_running()); acquire on the dealloc path sees other droppers. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return r;
    }
}

/* wake_by_ref: SUBMIT means the caller queues the task with a new reference taken here. */
mp__to_notified mp__task_transition_to_notified_by_ref(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        uint64_t n;
        mp__to_notified r = MP__NOTIFY_NOTHING;
        if (s & (MP__T_COMPLETE | MP__T_SCHEDULED | MP__T_NOTIFIED))
            return MP__NOTIFY_NOTHING;
        if (s & MP__T_RUNNING) {
            n = s | MP__T_NOTIFIED;
        } else {
            n = (s | MP__T_SCHEDULED) + MP__T_REF_ONE;
            r = MP__NOTIFY_SUBMIT;
        }
        /* acq_rel. Release: pairs with the acquire in mp__task_transition_to_running() of the
         * runner that the queue push below carries the task to. Acquire: on SUBMIT we become
         * the task's queue owner and write t->next; that must come after the last queue
         * owner's writes to it (mp__inject_pop_batch() on a worker, then its poll), which
         * the release CAS in mp__task_transition_to_idle() publishes. (A release-only CAS
         * let a plain thread that wakes a task twice race with the worker that ran it.)
         * Pairs with both functions named above. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return r;
    }
}

/* wake (consumes the caller's reference): SUBMIT passes that reference to the queue. */
mp__to_notified mp__task_transition_to_notified_by_val(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        uint64_t n;
        mp__to_notified r;
        if (s & MP__T_RUNNING) {
            n = (s | MP__T_NOTIFIED) - MP__T_REF_ONE; /* the runner still holds one */
            r = MP__NOTIFY_NOTHING;
        } else if (s & (MP__T_COMPLETE | MP__T_SCHEDULED)) {
            n = s - MP__T_REF_ONE;
            r = refs_of(n) == 0 ? MP__NOTIFY_DEALLOC : MP__NOTIFY_NOTHING;
        } else {
            n = s | MP__T_SCHEDULED;
            r = MP__NOTIFY_SUBMIT;
        }
        /* acq_rel: release pairs with mp__task_transition_to_running()'s acquire, as in the
         * by_ref case; acquire pairs with other reference drops, for the dealloc path. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return r;
    }
}

/* mp_task_cancel: SUBMIT means an idle task was scheduled (with a new reference) so that a
 * worker runs its cancellation. */
mp__to_notified mp__task_transition_to_notified_and_cancel(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        uint64_t n;
        mp__to_notified r = MP__NOTIFY_NOTHING;
        if (s & (MP__T_COMPLETE | MP__T_CANCELLED))
            return MP__NOTIFY_NOTHING;
        if (s & MP__T_RUNNING) {
            n = s | MP__T_CANCELLED | MP__T_NOTIFIED;
        } else if (s & MP__T_SCHEDULED) {
            n = s | MP__T_CANCELLED;
        } else {
            n = (s | MP__T_CANCELLED | MP__T_SCHEDULED) + MP__T_REF_ONE;
            r = MP__NOTIFY_SUBMIT;
        }
        /* acq_rel, as in mp__task_transition_to_notified_by_ref(): release pairs with
         * mp__task_transition_to_running()'s acquire; acquire with the release in
         * mp__task_transition_to_idle(), before we may write t->next on SUBMIT. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return r;
    }
}

/* Shutdown claims a task nobody is running (idle or queued): true means the caller now runs
 * its cancellation. Otherwise CANCELLED is left for the runner. */
bool mp__task_transition_to_shutdown(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        bool claim = !(s & (MP__T_RUNNING | MP__T_COMPLETE));
        uint64_t n = s | MP__T_CANCELLED | (claim ? MP__T_RUNNING : 0);
        /* acq_rel: if we claim it we run its cancel callback after its last poll (pairs with
         * the release in mp__task_transition_to_idle()). */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return claim;
    }
}

/* RUNNING -> COMPLETE, dropping the runner's references in the same step (refs of them;
 * one is kept if the join waker must still be woken). The joiner may return as soon as it
 * sees COMPLETE without JOIN_WAKER, so this RMW is the runtime's last touch of the task
 * unless it returns true: then the caller wakes the joiner and finishes with
 * mp__task_transition_to_join_waker_done(). */
bool mp__task_transition_to_complete(mp_task *t, uint64_t refs)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if ((s & (MP__T_RUNNING | MP__T_COMPLETE)) != MP__T_RUNNING)
            MP__UNREACHABLE("complete of a task in state %#llx", (unsigned long long)s);
        bool wake = (s & MP__T_JOIN_INTEREST) && (s & MP__T_JOIN_WAKER);
        uint64_t n =
            (s ^ (MP__T_RUNNING | MP__T_COMPLETE)) - (wake ? refs - 1 : refs) * MP__T_REF_ONE;
        /* acq_rel: release publishes the task's result to the joiner (pairs with the acquire
         * loads in mp__task_is_complete() and finish_join()); acquire reads the join waker
         * published by the release CAS in mp__task_transition_set_join_waker(), and other droppers'
         * uses. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            if (!wake && refs_of(n) == 0)
                release_task(t);
            return wake;
        }
    }
}

/* After waking the joiner: give join_waker back (clear JOIN_WAKER) and drop the last runner
 * reference in one step. If the join handle went away meanwhile, the waker is ours to drop. */
void mp__task_transition_to_join_waker_done(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if (!(s & MP__T_JOIN_INTEREST)) {
            mp_waker_drop(&t->join_waker);
            /* acq_rel: as in ref_dec(). */
            s = atomic_fetch_sub_explicit(&t->state, MP__T_JOIN_WAKER + MP__T_REF_ONE,
                                          memory_order_acq_rel);
            if (refs_of(s) == 1)
                release_task(t);
            return;
        }
        /* Release: our use of join_waker is over before the joiner takes it (pairs with the
         * acquire load in finish_join()). The join handle's reference keeps t alive. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s,
                                                  (s - MP__T_JOIN_WAKER) - MP__T_REF_ONE,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
}

/* The joiner: publish the waker in join_waker. false: the task completed first. */
bool mp__task_transition_set_join_waker(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if (s & MP__T_COMPLETE)
            return false;
        /* Release: publishes join_waker; pairs with the acquire in
         * mp__task_transition_to_complete(). */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, s | MP__T_JOIN_WAKER,
                                                  memory_order_release, memory_order_acquire))
            return true;
    }
}

bool mp__task_transition_unset_join_waker(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if (s & MP__T_COMPLETE)
            return false;
        /* Acquire: after this the joiner owns join_waker again (pairs with the release CAS in
         * mp__task_transition_set_join_waker()). */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, s & ~MP__T_JOIN_WAKER,
                                                  memory_order_acquire, memory_order_acquire))
            return true;
    }
}

/* The join handle goes away. Returns whether the joiner now owns join_waker (and drops it). */
bool mp__task_transition_to_join_handle_dropped(mp_task *t)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if (!(s & MP__T_JOIN_INTEREST))
            MP__UNREACHABLE("join handle dropped twice, state %#llx", (unsigned long long)s);
        uint64_t n = s & ~MP__T_JOIN_INTEREST;
        if (!(s & MP__T_COMPLETE))
            n &= ~MP__T_JOIN_WAKER;
        /* acq_rel: acquire pairs with the release in mp__task_transition_to_join_waker_done()
         * (the runtime's last use of join_waker); release orders our reads of the output. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return !(n & MP__T_JOIN_WAKER);
    }
}

/* The common end of a join: the task is complete and JOIN_WAKER is clear, so join_waker is
 * the joiner's. Give up the join handle and its reference in one step; *waker receives what
 * join_waker held, for the caller to drop. SLOW: not that case, use the two steps
 * (mp__task_transition_to_join_handle_dropped, then a reference drop). */
mp__to_joined mp__task_transition_to_joined(mp_task *t, mp_waker *waker)
{
    /* Acquire: pairs with the release in mp__task_transition_to_join_waker_done(), after
     * which the runtime no longer reads join_waker. */
    uint64_t s = load_state(t, memory_order_acquire);
    for (;;) {
        if (!(s & MP__T_JOIN_INTEREST))
            MP__UNREACHABLE("join handle dropped twice, state %#llx", (unsigned long long)s);
        if ((s & (MP__T_COMPLETE | MP__T_JOIN_WAKER)) != MP__T_COMPLETE)
            return MP__JOINED_SLOW;
        /* Read before the CAS: once our reference is gone another holder may free t. */
        *waker = t->join_waker;
        uint64_t n = (s & ~MP__T_JOIN_INTEREST) - MP__T_REF_ONE;
        /* acq_rel: as in ref_dec(). */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_acquire))
            return refs_of(n) == 0 ? MP__JOINED_DEALLOC : MP__JOINED;
    }
}

/* Wakers for tasks. */

static void task_schedule(mp_task *t)
{
    if (!mp__schedule(t->rt, t, false))
        ref_dec(t, 1); /* shutting down: shutdown cancels t; drop the queue's reference */
}

static void waker_wake(const void *data)
{
    mp_task *t = (mp_task *)data;
    switch (mp__task_transition_to_notified_by_val(t)) {
    case MP__NOTIFY_SUBMIT:
        task_schedule(t);
        break;
    case MP__NOTIFY_DEALLOC:
        release_task(t);
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
    ref_inc((mp_task *)data);
    return data;
}

static void waker_drop(const void *data)
{
    ref_dec((mp_task *)data, 1);
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
    atomic_init(&task->state, 0);
    task->vt = vt;
    task->next = NULL;
    task->owned_prev = task->owned_next = task;
    task->rt = NULL;
    task->join_waker = (mp_waker){0};
    task->shard = MP__UNREGISTERED;
    task->result = 0;
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
    return t && t->vt && t->vt->poll && load_state(t, memory_order_relaxed) == 0;
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
    t->rt = rt;
    /* The queue's reference and the join handle's; the registry takes one only if the task
     * ever suspends (mp__task_run). Relaxed: the queue push publishes t. */
    atomic_store_explicit(&t->state,
                          MP__T_SCHEDULED | (joinable ? MP__T_JOIN_INTEREST : 0) |
                              (joinable ? 2 : 1) * MP__T_REF_ONE,
                          memory_order_relaxed);
    if (!mp__schedule(rt, t, false)) {
        atomic_store_explicit(&t->state, 0, memory_order_relaxed);
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
            t->rt = rt;
            /* Relaxed: as in mp__task_spawn(). */
            atomic_store_explicit(&t->state, MP__T_SCHEDULED | MP__T_REF_ONE, memory_order_relaxed);
            chunk[i] = t;
        }
        if (!mp__schedule_batch(rt, chunk, k)) {
            for (size_t i = 0; i < k; i++)
                atomic_store_explicit(&chunk[i]->state, 0, memory_order_relaxed);
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
    ref_inc(t);
    if (mp__owned_bind(&t->rt->owned, t, w ? (int)w->index : -1) == 0)
        return true;
    ref_dec(t, 1);
    return false;
}

static void cancel_and_complete(mp_task *t)
{
    if (t->vt->cancel)
        t->vt->cancel(t);
    complete(t, -ECANCELED);
}

void mp__task_run(mp_task *t, mp__worker *w)
{
    switch (mp__task_transition_to_running(t)) {
    case MP__TO_RUNNING_FAILED:
        ref_dec(t, 1);
        return;
    case MP__TO_RUNNING_CANCELLED:
        cancel_and_complete(t);
        return;
    case MP__TO_RUNNING_OK:
        break;
    }
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
    mp_poll r = t->vt->poll(t, &cx);
    if (!w)
        mp__tls_inline_rt = outer;
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
        release_task(t);
        break;
    }
    (void)w;
}

void mp__task_shutdown(mp_task *t)
{
    if (mp__task_transition_to_shutdown(t))
        cancel_and_complete(t); /* the registry's reference serves as the run reference */
    else
        ref_dec(t, 1); /* a runner finishes it; it will not find it registered */
}

void mp__task_drop_queue_ref(mp_task *t)
{
    ref_dec(t, 1);
}

void mp__task_shutdown_queued(mp_task *t)
{
    if (mp__task_transition_to_shutdown(t))
        cancel_and_complete(t); /* the queue's reference serves as the run reference */
    else
        ref_dec(t, 1); /* a stale entry: the task completed (or runs) elsewhere */
}

bool mp__task_is_complete(const mp_task *t)
{
    /* Acquire: the task's output is visible once COMPLETE is (pairs with the release in
     * mp__task_transition_to_complete()). */
    return load_state(t, memory_order_acquire) & MP__T_COMPLETE;
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
        release_task(t);
        return;
    case MP__JOINED_SLOW:
        break;
    }
    if (mp__task_transition_to_join_handle_dropped(t))
        mp_waker_drop(&t->join_waker);
    ref_dec(t, 1);
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
    uint64_t s = load_state(t, memory_order_acquire);
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
    while (load_state(t, memory_order_acquire) & MP__T_JOIN_WAKER)
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

int mp_join(mp_task *task)
{
    mp__worker *w = mp__tls_worker;
    if (w && w->rt == task->rt) {
        if (mp__worker_help_until(w, task))
            return finish_join(task);
        /* The runtime is stopping under us: shutdown cancels the task after this worker
         * leaves, so stop waiting. */
        drop_join_handle(task);
        return -ECANCELED;
    }
    mp__thread_waiter tw;
    mp_waker waker = mp__thread_waiter_init(&tw);
    /* Help by running what waits in the global queue (possibly the task itself), but only
     * from the outermost join on this thread: a task polled inline here that joins in turn
     * blocks instead. Otherwise each inline task's join would run another on top of it, an
     * unrelated subtree as often as not, and a plain thread's stack (the main thread's 8 MiB,
     * or less) would hold as many nested polls as there are incomplete tasks. Blocking is
     * safe: a spawn from outside never leaves the runtime without a worker thread
     * (mp__runtime_ensure_worker()). */
    bool help = mp__tls_inline_rt == NULL;
    while (!mp__task_is_complete(task)) {
        if (help && mp__runtime_run_inline(task->rt))
            continue;
        if (!register_join_waker(task, &waker))
            break;
        mp__thread_waiter_wait(&tw);
    }
    return finish_join(task);
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
