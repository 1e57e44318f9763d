/* worker.c: the worker loop. Where the next task comes from, in order:
 *
 *   1. every global_interval polls, the global queue first, so that it is never starved by
 *      local work (Volt and blitz-io check it only after the local queue is empty, which lets two
 *      tasks that wake each other keep a worker forever; Tokio checks it first, as here)
 *   2. the LIFO slot: the task spawned or woken last by this worker, at most 3 in a row,
 *      then the slot is flushed to the back of the ring
 *   3. the ring, front first
 *   4. steal half of a random victim's ring (as a searcher; at most half the workers search)
 *   5. the global queue once more
 *   6. park
 *
 * A fetch from the global queue takes a share of it at once (fetch_global_batch()): one task
 * is polled, the others go to the back of the ring, not to a buffer of the worker's own,
 * so that a thief can take them while that poll runs long (Tokio's next_remote_task_batch
 * does the same). A private buffer stranded up to 32 tasks behind one long poll while other
 * workers had nothing to do.
 *
 * A tick is up to 128 polls. At its end the EWMA of the time per poll is updated and sets how
 * many polls may pass between global-queue checks.
 *
 * A task that yields (mp_yield) is not queued at once: it waits on the worker's deferred list
 * until the worker runs out of other local work or the tick ends, and then goes to the back
 * of the ring with one notification for the lot (Tokio 1.24 defers yielded wakes the same
 * way, until its worker would park). A yield thus costs no notification while the worker
 * has other work, and stays fair: everything queued when it yielded runs before it again,
 * the global queue is still checked every global_interval polls, and at a tick's end the
 * deferred tasks become visible to thieves.
 *
 * The LIFO slot is owner only: other workers cannot see it, which is what makes spawn+join
 * on one worker nearly an inline call, and also why a task must not be left there while its
 * worker sleeps. The transitioning-to-park guard:
 *
 *   worker, about to park                     the same thread, on the park path (a timer
 *   has_local_tasks() -> false                expiry, a reactor callback it drives)
 *                                             wakes task T -> LIFO slot
 *   futex wait                                -> T is invisible to every other worker and
 *                                                waits until this worker wakes up
 *
 * Fixed: w->parking is raised before the last has_local_tasks() check, and a wake on this
 * thread while it is raised goes to the global queue with a notification instead. Only the
 * owner reads or writes the flag, so it needs no atomics: the race is within one thread's
 * park sequence, and other threads never touch the LIFO slot.
 */
#include "internal.h"

_Thread_local mp__worker *mp__tls_worker;
_Thread_local mp_runtime *mp__tls_inline_rt;

void mp__worker_init(mp__worker *w, mp_runtime *rt, unsigned index)
{
    mp__queue_init(&w->queue);
    atomic_init(&w->park.state, MP__UNPARKED);
    atomic_init(&w->park.unparked_at, 0);
    w->lifo = NULL;
    w->orphans = NULL;
    w->deferred = w->deferred_tail = NULL;
    w->lifo_streak = 0;
    w->tick_polls = 0;
    w->since_global = 0;
    w->global_interval = rt->cfg.global_interval ? rt->cfg.global_interval : MP__INTERVAL_DEFAULT;
    w->tick_start_ns = 0;
    w->avg_task_ns = 0;
    /* Distinct per worker and per run; the golden-ratio multiple spreads nearby indices. */
    w->rng = (mp__now_ns() + (uint64_t)(index + 1) * 0x9E3779B97F4A7C15ull) | 1;
    w->searching = false;
    w->parking = false;
    w->driving = false;
    w->joining = w->joined = NULL;
    w->joined_result = 0;
    memset(&w->stats, 0, sizeof w->stats);
    w->rt = rt;
    w->index = index;
    atomic_init(&w->spawn_state, MP__SLOT_IDLE);
}

/* xorshift64+ halves (blitz-io's and Tokio's FastRand), then Lemire's multiply-shift for an
 * unbiased index below n without a division. */
static uint32_t rand_below(mp__worker *w, uint32_t n)
{
    uint32_t s1 = (uint32_t)w->rng, s0 = (uint32_t)(w->rng >> 32);
    s1 ^= s1 << 17;
    s1 = s1 ^ s0 ^ (s1 >> 7) ^ (s0 >> 16);
    w->rng = ((uint64_t)s1 << 32) | s0;
    uint32_t r = s0 + s1;
    return (uint32_t)(((uint64_t)r * n) >> 32);
}

/* Returns whether the ring overflowed (half of it went to the global queue). */
static bool push_ring(mp__worker *w, mp_task *t)
{
    bool overflowed;
    mp_task *back = mp__queue_push_owner(&w->queue, t, &w->rt->inject, &overflowed);
    if (overflowed)
        mp__counter_add(&w->stats.overflows, 1);
    /* Shutting down (the global queue is closed): keep what overflowed for
     * mp__worker_drain_on_shutdown(), which cancels it once this thread has left. Cancelling
     * here would run cancel callbacks inside whatever poll is pushing. */
    while (back) {
        mp_task *next = back->next;
        back->next = w->orphans;
        w->orphans = back;
        back = next;
    }
    return overflowed;
}

static bool has_local_tasks(mp__worker *w)
{
    return w->lifo || w->deferred || !mp__queue_is_empty(&w->queue);
}

/* The deferred yielded tasks go to the back of the ring, oldest first. One notification for
 * all of them when others could help: more than one, or other work besides. */
static void flush_deferred(mp__worker *w)
{
    mp_task *t = w->deferred;
    if (t == NULL)
        return;
    w->deferred = w->deferred_tail = NULL;
    mp__counter_add(&w->stats.deferred_flushes, 1);
    bool several = t->next != NULL || w->lifo != NULL || !mp__queue_is_empty(&w->queue);
    bool overflowed = false;
    while (t) {
        mp_task *next = t->next;
        overflowed |= push_ring(w, t);
        t = next;
    }
    mp_runtime *rt = w->rt;
    if (rt->cfg.disable_steal ? overflowed : several)
        mp__runtime_notify(rt);
}

bool mp__schedule(mp_runtime *rt, mp_task *t, bool is_yield)
{
    mp__worker *w = mp__tls_worker;
    if (w && w->rt == rt && w->driving) {
        /* An event or a libuv callback on the driving worker: it runs these as soon as the
         * loop's turn ends (which never blocks after running anything: reactor.c), and wakes
         * a helper then if mp__helper_pays() says so (drive()). Into the ring, in the order
         * the events came: a batch of them would only pass through the LIFO slot one by one,
         * each pushing the one before. */
        push_ring(w, t);
        return true;
    }
    if (w && w->rt == rt && !w->parking) {
        if (is_yield) {
            /* Deferred to the next flush_deferred(), with no notification (top of file). */
            t->next = NULL;
            if (w->deferred_tail)
                w->deferred_tail->next = t;
            else
                w->deferred = t;
            w->deferred_tail = t;
            mp__counter_add(&w->stats.yields_deferred, 1);
            return true;
        }
        bool notify = true, overflowed = false;
        if (rt->cfg.disable_lifo) {
            overflowed = push_ring(w, t);
        } else {
            mp_task *prev = w->lifo;
            w->lifo = t;
            /* A task alone in the LIFO slot is this worker's next poll: waking another worker
             * for it would only make it steal nothing (Tokio does the same). */
            notify = prev != NULL;
            if (prev)
                overflowed = push_ring(w, prev);
        }
        /* Without stealing, only what overflowed to the global queue is anyone else's: a
         * worker woken for our ring would find nothing, park as the last searcher, see our
         * ring non-empty and wake the next one, for as long as this worker is busy. */
        if (rt->cfg.disable_steal)
            notify = overflowed;
        if (notify)
            mp__runtime_notify(rt);
        return true;
    }
    t->next = NULL;
    if (!mp__inject_push(&rt->inject, t))
        return false;
    atomic_fetch_add_explicit(&rt->injected, 1, memory_order_relaxed);
    mp__runtime_notify(rt);
    return true;
}

bool mp__schedule_batch(mp_runtime *rt, mp_task **tasks, size_t n)
{
    mp__worker *w = mp__tls_worker;
    if (n == 0)
        return true;
    if (w && w->rt == rt && !w->parking) {
        bool overflowed = false;
        for (size_t i = 0; i < n; i++)
            overflowed |= push_ring(w, tasks[i]);
        if (rt->cfg.disable_steal && !overflowed)
            return true; /* nobody else may take them: see mp__schedule() */
    } else {
        for (size_t i = 0; i + 1 < n; i++)
            tasks[i]->next = tasks[i + 1];
        if (!mp__inject_push_batch(&rt->inject, tasks[0], tasks[n - 1], n))
            return false;
        atomic_fetch_add_explicit(&rt->injected, n, memory_order_relaxed);
    }
    mp__runtime_notify(rt); /* one notification; woken searchers wake the next ones */
    return true;
}

/* Take a fair share of the global queue: min(len / workers, 64), at least 4, but no more
 * than fill the ring to half (Tokio's bound), so that the fetch never overflows the ring back
 * into the global queue and leaves thieves room to copy into. One task is returned; the others
 * go to the back of the ring, where other workers can steal them while it is polled. */
static mp_task *fetch_global_batch(mp__worker *w)
{
    mp_runtime *rt = w->rt;
    size_t len = mp__inject_len(&rt->inject);
    if (len == 0)
        return NULL;
    size_t want = len / rt->nworkers;
    if (want < MP__GLOBAL_BATCH_MIN)
        want = MP__GLOBAL_BATCH_MIN;
    if (want > MP__GLOBAL_BATCH_MAX)
        want = MP__GLOBAL_BATCH_MAX;
    uint32_t queued = mp__queue_len(&w->queue), half = MP_QUEUE_CAPACITY / 2;
    size_t room = queued < half ? half - queued : 0;
    if (want > room + 1)
        want = room + 1;
    mp_task *got[MP__GLOBAL_BATCH_MAX];
    size_t n = mp__inject_pop_batch(&rt->inject, got, want);
    if (n == 0)
        return NULL;
    mp__counter_add(&w->stats.global_batches, 1);
    for (size_t i = 1; i < n; i++)
        push_ring(w, got[i]);
    /* A searcher gets others going when it leaves the search with work left (run_task()).
     * Otherwise the tasks just queued in the ring are announced as a spawn's are
     * (mp__schedule()): an idle worker must come for them if the poll of got[0] runs long. */
    if (n > 1 && !w->searching && !rt->cfg.disable_steal && rt->nworkers > 1)
        mp__runtime_notify(rt);
    return got[0];
}

static mp_task *next_task(mp__worker *w)
{
    if (w->since_global >= w->global_interval) {
        w->since_global = 0;
        mp_task *t = fetch_global_batch(w);
        if (t) {
            w->lifo_streak = 0;
            return t;
        }
    }
    if (w->lifo) {
        mp_task *t = w->lifo;
        w->lifo = NULL;
        if (w->lifo_streak < MP__LIFO_MAX_STREAK) {
            w->lifo_streak++;
            mp__counter_add(&w->stats.lifo_hits, 1);
            return t;
        }
        push_ring(w, t); /* visible to FIFO order and to thieves again */
    }
    w->lifo_streak = 0;
    mp_task *t = mp__queue_pop_owner(&w->queue);
    if (t == NULL && w->deferred) {
        if (w->deferred == w->deferred_tail) { /* alone: it is simply next */
            t = w->deferred;
            w->deferred = w->deferred_tail = NULL;
            return t;
        }
        flush_deferred(w);
        t = mp__queue_pop_owner(&w->queue);
    }
    return t;
}

static mp_task *steal_work(mp__worker *w)
{
    mp_runtime *rt = w->rt;
    /* Become a searcher even when there is no one to steal from (one worker, or stealing
     * disabled): a worker that parks as the last searcher re-checks every queue after it
     * leaves the unparked count (idle.c). Skipping this left a lone worker parking without
     * that re-check, and a task pushed just before it parked was never run. */
    if (!w->searching)
        w->searching = mp__idle_transition_to_searching(&rt->idle);
    if (w->searching && !rt->cfg.disable_steal && rt->nworkers > 1) {
        uint32_t n = rt->nworkers, start = rand_below(w, n);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t v = start + i < n ? start + i : start + i - n;
            if (v == w->index)
                continue;
            uint32_t got;
            mp_task *t = mp__queue_steal_into(&rt->workers[v].queue, &w->queue, &got);
            if (t) {
                mp__counter_add(&w->stats.steals, 1);
                mp__counter_add(&w->stats.stolen, got);
                w->lifo_streak = 0;
                return t;
            }
        }
    }
    w->lifo_streak = 0;
    return fetch_global_batch(w);
}

/* The EWMA of time per poll sets how many polls pass between global-queue checks; the
 * target that scales it is chosen by measurement, see MP__GLOBAL_TARGET_NS in internal.h. */
static void end_tick(mp__worker *w, uint64_t now)
{
    mp_runtime *rt = w->rt;
    if (w->tick_polls > 0 && rt->cfg.global_interval == 0 && now > w->tick_start_ns) {
        double sample = (double)(now - w->tick_start_ns) / w->tick_polls;
        w->avg_task_ns = w->avg_task_ns == 0
                             ? sample
                             : MP__EWMA_ALPHA * sample + (1 - MP__EWMA_ALPHA) * w->avg_task_ns;
        uint64_t target =
            rt->cfg.global_target_ns ? rt->cfg.global_target_ns : MP__GLOBAL_TARGET_NS;
        double interval = w->avg_task_ns > 0 ? (double)target / w->avg_task_ns : MP__INTERVAL_MAX;
        if (interval < MP__INTERVAL_MIN)
            interval = MP__INTERVAL_MIN;
        if (interval > MP__INTERVAL_MAX)
            interval = MP__INTERVAL_MAX;
        w->global_interval = (uint32_t)interval;
    }
    w->tick_polls = 0;
    w->tick_start_ns = now;
}

/* Between ticks, a busy worker runs the loop without blocking if nobody holds it, so that
 * I/O progresses while every worker is busy. */
static void poll_io(mp__worker *w)
{
    mp__reactor *r = &w->rt->reactor;
    if (!mp__reactor_try_acquire(r))
        return;
    mp__counter_add(&w->stats.io_polls, 1);
    mp__reactor_run(r, false);
    if (mp__reactor_release(r))
        mp__runtime_notify(w->rt);
}

/* After an I/O turn the driver holds every task the loop woke. Tokio wakes a helper whenever
 * there is more than one; but a helper takes time to arrive (futex wake, the scheduler, on a
 * VM an IPI to a halted vCPU, and on a machine with no idle CPU the preemption of another
 * thread), and a backlog the driver finishes sooner than that is only split in two by the
 * wake: the helper steals what the driver would have run next, and the cost of the wake is
 * paid for nothing. So the driver wakes one only for a backlog that its recent time per poll
 * says outlasts a recent wake-up. With no measurement yet (either figure 0), or one older
 * than MP__WAKE_NS_TTL, it is Tokio's rule. Tasks the driver keeps stay in its ring, where a
 * searching worker can steal them. */
bool mp__helper_pays(uint32_t local, double avg_task_ns, uint64_t wake_ns, uint64_t wake_age_ns)
{
    if (local < 2)
        return false;
    return avg_task_ns <= 0 || wake_ns == 0 || wake_age_ns > MP__WAKE_NS_TTL ||
           local * avg_task_ns >= (double)wake_ns;
}

uint64_t mp__wake_ns_update(uint64_t old, uint64_t sample)
{
    if (sample > MP__WAKE_NS_MAX)
        sample = MP__WAKE_NS_MAX;
    return old == 0 ? sample : old - old / 8 + sample / 8;
}

/* A worker that slept on its futex measures how long its unpark took to get it running.
 * The load and store are not one atomic step: two workers waking at once may lose one sample,
 * which an average of many does not miss. */
static void sample_wake_latency(mp__worker *w)
{
    mp_runtime *rt = w->rt;
    uint64_t sent = atomic_load_explicit(&w->park.unparked_at, memory_order_relaxed);
    uint64_t now = mp__now_ns();
    if (sent == 0 || now < sent)
        return;
    uint64_t old = atomic_load_explicit(&rt->wake_ns, memory_order_relaxed);
    atomic_store_explicit(&rt->wake_ns, mp__wake_ns_update(old, now - sent), memory_order_relaxed);
    atomic_store_explicit(&rt->wake_sampled_at, now, memory_order_relaxed);
}

/* Sleep in the loop as its driver instead of on the futex: the park word says DRIVING, so an
 * unpark sends the loop's async handle (mp__runtime_unpark). Returns false if the role was
 * taken, and the caller sleeps on its futex. Wakes raised by callbacks meanwhile go to the
 * back of this worker's ring, in the order they came, without notifying anyone
 * (mp__schedule); once the loop returns, a worker is woken to share them if
 * mp__helper_pays() says so. */
static bool drive(mp__worker *w)
{
    mp__reactor *r = &w->rt->reactor;
    if (!mp__reactor_try_acquire(r))
        return false;
    uint32_t expected = MP__UNPARKED;
    /* Acquire on failure: an unpark's NOTIFIED came first (pairs with the release exchange
     * in mp__park_unpark()); then we do not block. Release on success: nothing to publish,
     * acq_rel keeps it symmetric with the exchange below. */
    if (atomic_compare_exchange_strong_explicit(&w->park.state, &expected, MP__DRIVING,
                                                memory_order_acq_rel, memory_order_acquire)) {
        mp__counter_add(&w->stats.drives, 1);
        w->driving = true;
        mp__idle_set_driver(&w->rt->idle, w->index);
        mp__reactor_run(r, true);
        mp__idle_set_driver(&w->rt->idle, UINT_MAX);
        w->driving = false;
    }
    /* Consume the NOTIFIED of an unpark that came while we drove (or before). Acquire:
     * pairs with the release exchange in mp__park_unpark(). */
    atomic_exchange_explicit(&w->park.state, MP__UNPARKED, memory_order_acquire);
    bool cmds = mp__reactor_release(r);
    uint32_t local = (w->lifo != NULL) + mp__queue_len(&w->queue);
    bool helper = false;
    if (local > 1 && !w->rt->cfg.disable_steal) {
        mp_runtime *rt = w->rt;
        uint64_t now = mp__now_ns();
        /* Relaxed: an estimate; a stale or torn-in-time pair only moves one decision. */
        uint64_t at = atomic_load_explicit(&rt->wake_sampled_at, memory_order_relaxed);
        helper = mp__helper_pays(local, w->avg_task_ns,
                                 atomic_load_explicit(&rt->wake_ns, memory_order_relaxed),
                                 now > at ? now - at : 0);
        mp__counter_add(helper ? &w->stats.helpers_woken : &w->stats.helpers_skipped, 1);
    }
    if (cmds || helper)
        mp__runtime_notify(w->rt);
    return true;
}

/* The last searcher to find work wakes another if work is queued, so that it is not left
 * behind: notifiers that queued it while we searched saw searching > 0 and woke nobody.
 * Tokio wakes one unconditionally; with nothing queued that costs a second wake-up per task
 * spawned into an idle runtime, for a worker that finds nothing and parks again.
 *
 *   notifier                                 last searcher (here)
 *   push task T                              RMW state: searching 1 -> 0   (seq_cst)
 *   fence seq_cst                  (A)       fence seq_cst                  (B')
 *   load state: searching == 1,              look at every queue
 *     wakes nobody                           (mp__runtime_work_pending)
 *
 * Store buffering as in idle.c: with both fences, either the notifier's load comes after
 * our decrement (it sees searching == 0 and wakes someone) or our look comes after its push
 * (we see T and wake someone). */
static void leave_searching(mp__worker *w)
{
    w->searching = false;
    mp_runtime *rt = w->rt;
    /* Fence (B') is in there, after the decrement, when we were the last. */
    if (!mp__idle_transition_from_searching(&rt->idle))
        return;
    if (mp__runtime_work_pending(rt))
        mp__runtime_notify(rt);
}

static void run_task(mp__worker *w, mp_task *t)
{
    if (w->searching)
        leave_searching(w);
    mp__task_run(t, w);
    mp__counter_add(&w->stats.polled, 1);
    w->since_global++;
    if (++w->tick_polls >= MP__BUDGET) {
        mp__counter_add(&w->stats.budget_exhausted, 1);
        flush_deferred(w);
        end_tick(w, mp__now_ns());
        poll_io(w);
    }
}

static inline bool stopping(mp_runtime *rt)
{
    /* Acquire: pairs with the release store of stop in mp_runtime_shutdown() (runtime.c). */
    return atomic_load_explicit(&rt->stop, memory_order_acquire);
}

/* Sleep until there is work. With for_join, also return on a direct wake (the joined task
 * completed). */
static void park_worker(mp__worker *w, bool for_join)
{
    mp_runtime *rt = w->rt;
    w->parking = true;
    if (has_local_tasks(w) || stopping(rt)) {
        w->parking = false;
        return;
    }
    end_tick(w, mp__now_ns());
    bool last = mp__idle_transition_to_parked(&rt->idle, w->index, w->searching);
    w->searching = false;
    if (last && mp__runtime_work_pending(rt))
        mp__runtime_notify(rt); /* may pick this very worker: its park returns at once */
    for (;;) {
        mp__counter_add(&w->stats.parks, 1);
        if (!drive(w) && mp__park_wait(&w->park))
            sample_wake_latency(w);
        mp__counter_add(&w->stats.unparks, 1);
        if (stopping(rt) || has_local_tasks(w) || for_join) {
            /* Leave the parked set ourselves; if a notifier picked us first, it counted us
             * as a searcher. */
            w->searching = !mp__idle_unpark_self(&rt->idle, w->index);
            break;
        }
        if (!mp__idle_is_parked(&rt->idle, w->index)) {
            w->searching = true; /* picked by a notifier */
            break;
        }
        /* A stale direct wake: stay parked. */
    }
    w->parking = false;
    w->tick_start_ns = mp__now_ns();
}

static const void *worker_waker_clone(const void *data)
{
    return data;
}

static void worker_waker_drop(const void *data)
{
    (void)data;
}

static void worker_waker_wake(const void *data)
{
    mp__worker *w = (mp__worker *)data;
    mp__runtime_unpark(w->rt, w);
}

/* Wakes a worker waiting in mp__worker_help_until(). Workers live as long as the runtime, so
 * the waker needs no reference count. */
static const mp_waker_vtable worker_waker_vt = {
    .wake = worker_waker_wake,
    .wake_by_ref = worker_waker_wake,
    .clone = worker_waker_clone,
    .drop = worker_waker_drop,
};

/* A task spawned from a worker waits in its LIFO slot, where no other worker takes it, and a
 * join that follows the spawn finds it there: the common spawn-then-join shape. It runs at
 * once, as the joiner's next poll (Rayon's join pops its own job first too), instead of after
 * whatever next_task() would take first; and if it completes, its completion also drops the
 * join handle (complete() in task.c), one change of the state word where there were two. */
bool mp__worker_join_in_place(mp__worker *w, mp_task *t, int *result)
{
    if (w->lifo != t || stopping(w->rt))
        return false;
    w->lifo = NULL;
    mp__counter_add(&w->stats.lifo_hits, 1);
    mp_task *outer = w->joining; /* a join in place inside the task's poll nests */
    w->joining = t;
    run_task(w, t);
    w->joining = outer;
    if (w->joined != t)
        return false; /* pending, or completed the usual way: mp_join() goes on as usual */
    w->joined = NULL;
    mp__counter_add(&w->stats.joins_in_place, 1);
    *result = w->joined_result;
    return true;
}

bool mp__worker_help_until(mp__worker *w, mp_task *target)
{
    mp_waker waker = {.vt = &worker_waker_vt, .data = w};
    while (!mp__task_is_complete(target)) {
        if (stopping(w->rt))
            return false;
        mp_task *t = next_task(w);
        if (!t)
            t = steal_work(w);
        if (t) {
            run_task(w, t);
            continue;
        }
        if (!mp__task_register_join_waker(target, &waker))
            break;
        park_worker(w, true);
    }
    return true;
}

void *mp__worker_main(void *arg)
{
    mp__worker *w = arg;
    mp_runtime *rt = w->rt;
    mp__tls_worker = w;
    w->tick_start_ns = mp__now_ns();
    w->searching = true; /* the notification that started us counted us as searching */
    while (!stopping(rt)) {
        mp_task *t = next_task(w);
        if (!t)
            t = steal_work(w);
        if (t)
            run_task(w, t);
        else
            park_worker(w, false);
    }
    mp__tls_worker = NULL;
    return NULL;
}

void mp__worker_drain_on_shutdown(mp__worker *w)
{
    /* Queued tasks never ran or are runnable again: cancel them (or drop stale entries of
     * tasks the registry already cancelled). The owner thread has exited (joined). */
    if (w->lifo) {
        mp__task_shutdown_queued(w->lifo);
        w->lifo = NULL;
    }
    while (w->deferred) {
        mp_task *t = w->deferred;
        w->deferred = t->next;
        mp__task_shutdown_queued(t);
    }
    w->deferred_tail = NULL;
    for (mp_task *t; (t = mp__queue_pop_owner(&w->queue));)
        mp__task_shutdown_queued(t);
    while (w->orphans) {
        mp_task *t = w->orphans;
        w->orphans = t->next;
        mp__task_shutdown_queued(t);
    }
}
