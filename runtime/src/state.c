/* state.c: the task state word and the named transitions that change it (task.c spawns, runs
 * and joins tasks through them).
 *
 * The state is one 64-bit atomic word. Nothing outside this file changes it, and here only
 * the named transition functions do, each returning what the caller must do next; the
 * reference count in it is changed by mp__task_ref_inc() and mp__task_ref_dec().
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
 *   - A joiner that runs the task itself, from its LIFO slot, never sets JOIN_WAKER: the
 *     completion clears JOIN_INTEREST in the same CAS (mp__task_transition_to_complete_joined)
 *     unless a waker was set before, when it completes the usual way.
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

uint64_t mp__task_state_load(const mp_task *t, memory_order mo)
{
    return load_state(t, mo);
}

void mp__task_release(mp_task *t)
{
    if (t->vt->release)
        t->vt->release(t);
}

/* Drop n references; release the task if they were the last. */
void mp__task_ref_dec(mp_task *t, uint64_t n)
{
    /* acq_rel: release publishes our use of the task; the thread that drops the last
     * reference acquires everyone else's before the release callback frees it (the acquire
     * pairs with the release half of every other reference drop). */
    uint64_t prev = atomic_fetch_sub_explicit(&t->state, n * MP__T_REF_ONE, memory_order_acq_rel);
    if (refs_of(prev) < n)
        MP__UNREACHABLE("task %p reference underflow, state %#llx", (void *)t,
                        (unsigned long long)prev);
    if (refs_of(prev) == n)
        mp__task_release(t);
}

void mp__task_ref_inc(mp_task *t)
{
    /* Relaxed: a new reference is made from an existing one, which keeps the task alive. */
    atomic_fetch_add_explicit(&t->state, MP__T_REF_ONE, memory_order_relaxed);
}

/* Transitions. */

/* A new task with its first references: the queue's, and the join handle's when joinable.
 * The registry takes one only if the task ever suspends (mp__task_run in task.c). false: the
 * task is not freshly initialised (spawned already, or its state is garbage). Relaxed: the
 * queue push that follows publishes the task. */
bool mp__task_transition_to_spawned(mp_task *t, bool joinable)
{
    uint64_t fresh = 0;
    uint64_t n =
        MP__T_SCHEDULED | (joinable ? MP__T_JOIN_INTEREST : 0) | (joinable ? 2 : 1) * MP__T_REF_ONE;
    return atomic_compare_exchange_strong_explicit(&t->state, &fresh, n, memory_order_relaxed,
                                                   memory_order_relaxed);
}

/* The spawn failed (the global queue was closed): back to freshly initialised, the caller's
 * again. Relaxed: nobody else saw the task. */
void mp__task_transition_to_unspawned(mp_task *t)
{
    atomic_store_explicit(&t->state, 0, memory_order_relaxed);
}

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
                mp__task_release(t);
            return wake;
        }
    }
}

/* Complete a task whose only joiner is the thread running it, waiting in mp_join() without a
 * join waker (mp__worker_join_in_place()): RUNNING -> COMPLETE and the join handle dropped in
 * one step, the run references and the handle's going together. false, nothing changed: a
 * join waker is registered (a task awaits it with mp_join_poll()) or there is no join handle,
 * and the caller completes it the usual way. */
bool mp__task_transition_to_complete_joined(mp_task *t, uint64_t refs)
{
    uint64_t s = load_state(t, memory_order_relaxed);
    for (;;) {
        if ((s & (MP__T_RUNNING | MP__T_COMPLETE)) != MP__T_RUNNING)
            MP__UNREACHABLE("complete of a task in state %#llx", (unsigned long long)s);
        if ((s & (MP__T_JOIN_INTEREST | MP__T_JOIN_WAKER)) != MP__T_JOIN_INTEREST)
            return false;
        uint64_t n = ((s ^ (MP__T_RUNNING | MP__T_COMPLETE)) & ~MP__T_JOIN_INTEREST) -
                     (refs + 1) * MP__T_REF_ONE;
        /* acq_rel: as in mp__task_ref_dec(): the last holder to let go (here, or a waker's
         * drop elsewhere) releases the task having seen every other holder's use. The result
         * needs no publishing: its reader is this thread. */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            if (refs_of(n) == 0)
                mp__task_release(t);
            return true;
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
            /* acq_rel: as in mp__task_ref_dec(). */
            s = atomic_fetch_sub_explicit(&t->state, MP__T_JOIN_WAKER + MP__T_REF_ONE,
                                          memory_order_acq_rel);
            if (refs_of(s) == 1)
                mp__task_release(t);
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
        /* acq_rel: as in mp__task_ref_dec(). */
        if (atomic_compare_exchange_weak_explicit(&t->state, &s, n, memory_order_acq_rel,
                                                  memory_order_acquire))
            return refs_of(n) == 0 ? MP__JOINED_DEALLOC : MP__JOINED;
    }
}

void mp__task_state_init(mp_task *t)
{
    atomic_init(&t->state, 0);
}
