/*
 * Pool life cycle and the worker loop. A pool has a fixed array of worker slots, each with its
 * deque and sleep state, all allocated by mp_pool_new(); threads start lazily. The last slot is
 * the caller slot (unless mp_pool_config.calls_on_workers): an outside thread in mp_pool_call()
 * takes it for the length of its call and works there as a worker, as oneTBB's master thread
 * does in its arena's reserved slot. The call's first piece of work starts at once, on a warm
 * cache, and the call returns as soon as its last join does: no hand-off to a sleeping thread
 * and back. The other slots get threads: whenever jobs are posted while no worker is idle or
 * asleep, the poster starts the next slot's thread. A spawn that fails (pthread_create, or
 * testhook.c's mp__test_fail_spawn_nth) is counted in the stats and leaves its slot unstarted,
 * to be tried again the next time a thread is wanted; the pool runs on with the threads it
 * has.
 *
 * A second outside caller that finds the caller slot taken injects its call for the threads
 * and blocks (so do all callers with calls_on_workers). That needs one thread at least; when
 * none can start, or the pool has no thread slots, it waits for the caller slot instead. With
 * calls_on_workers, a call that cannot start a single thread returns the error (fn did not
 * run) and the next call tries again.
 *
 * The caller slot's thread pops and steals like any worker but never takes injected jobs:
 * another caller's whole call could then keep it from returning. Thieves try it like any
 * other slot. Before it leaves, it runs what is left on its deque (scope spawns that a stolen
 * job pushed there), because nobody else pops that deque:
 *
 *   caller slot                             worker
 *   run a stolen job: spawn S, pushed       search: nothing (the push is not visible yet)
 *     on this deque (no fence, sleep.c)
 *   fn returns; leave the slot               sleep: S waits for ever, and its scope
 *
 * The drain pops S itself, so that every job pushed on the slot's deque still has its pusher
 * come back for it, the property sleep.c relies on for deque jobs.
 *
 * A worker spends its life in mp__pool_wait_until(its terminate latch): pop own deque, else
 * steal from a random victim, else take the injected jobs, else idle rounds and sleep
 * (sleep.c). The same loop runs inside a join whose other half was stolen, waiting on that
 * job's latch instead, which is the "hybrid join".
 *
 * Shutdown:
 *
 *   mp_pool_free                            worker
 *   stopping = true under spawn_mu          (no spawn can start after this)
 *   set each started worker's terminate     probe(terminate) in its loop, or
 *     latch (swap SET)              (A)       CAS SLEEPY -> SLEEPING (B), then block
 *   if the swap displaced SLEEPING: wake
 *   pthread_join each started worker
 *
 * (A) and (B) are RMWs on one latch word, so either the worker fails (B) and sees SET, or (A)
 * sees SLEEPING and wakes it (latch.c). No call may be in flight, so nothing else is waited on.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pool/pool_internal.h"

_Static_assert(offsetof(mp__pool_worker, pool) - offsetof(mp__pool_worker, deque.bottom) >=
                   MP__CACHE_LINE,
               "worker's owner fields must not share the deque bottom's line");
_Static_assert(offsetof(struct mp_pool, inject) - offsetof(struct mp_pool, sleep.counters) >=
                   MP__CACHE_LINE,
               "the counter word and the injection head must not share a line");

_Thread_local mp__pool_worker *mp__pool_current;

/* An external call: lives in the caller's frame while the caller blocks on `done`. */
struct call_job {
    mp__pool_job job;
    mp_pool_fn fn;
    void *arg;
    mp__pool_lock_latch done;
};

void mp_pool_config_init(mp_pool_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
}

static unsigned online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

int mp_pool_new(mp_pool **out, const mp_pool_config *cfg)
{
    mp_pool_config defaults;
    if (cfg == NULL) {
        mp_pool_config_init(&defaults);
        cfg = &defaults;
    }
    unsigned n = cfg->workers != 0 ? cfg->workers : online_cpus();
    if (n > MP__POOL_MAX_WORKERS)
        return -EINVAL;
    bool caller_slot = !cfg->calls_on_workers;
    size_t stack = cfg->stack_size;
    if (stack != 0 && stack < (size_t)PTHREAD_STACK_MIN)
        stack = PTHREAD_STACK_MIN;

    void *mem = NULL;
    int err = posix_memalign(&mem, MP__CACHE_LINE, sizeof(mp_pool));
    if (err != 0)
        return -err;
    mp_pool *pool = mem;
    memset(pool, 0, sizeof(*pool));
    pool->nworkers = n;
    pool->caller_slot = caller_slot;
    pool->nthreads = caller_slot ? n - 1 : n;
    atomic_init(&pool->caller_calls, 0);
    pool->stack_size = stack;
    pool->fail_spawn_nth = mp__test_fail_spawn_nth_value();
    pool->spawn_publish_delay_us = mp__test_pool_spawn_publish_delay_us_value();
    atomic_init(&pool->spawned, 0);
    atomic_init(&pool->started, 0);
    mp__pool_inject_init(&pool->inject);

    err = posix_memalign(&mem, MP__CACHE_LINE, n * sizeof(mp__pool_worker));
    if (err != 0) {
        err = -err;
        goto out_free_pool;
    }
    pool->workers = mem;
    memset(pool->workers, 0, n * sizeof(mp__pool_worker));
    unsigned i;
    for (i = 0; i < n; i++) {
        mp__pool_worker *w = &pool->workers[i];
        err = mp__pool_deque_init(&w->deque, cfg->deque_capacity);
        if (err != 0)
            goto out_free_deques;
        w->pool = pool;
        w->index = (uint32_t)i;
        w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
        atomic_init(&w->stolen, 0);
        atomic_init(&w->tid, 0);
        mp__pool_spin_latch_init(&w->terminate, (uint32_t)i);
    }
    err = mp__pool_sleep_init(&pool->sleep, n);
    if (err != 0)
        goto out_free_deques;
    err = -pthread_mutex_init(&pool->spawn_mu, NULL);
    if (err != 0)
        goto out_free_sleep;
    err = -pthread_mutex_init(&pool->caller_mu, NULL);
    if (err != 0)
        goto out_free_spawn_mu;
    *out = pool;
    return 0;

out_free_spawn_mu:
    pthread_mutex_destroy(&pool->spawn_mu);
out_free_sleep:
    mp__pool_sleep_destroy(&pool->sleep);
out_free_deques:
    while (i-- > 0)
        mp__pool_deque_destroy(&pool->workers[i].deque);
    free(pool->workers);
out_free_pool:
    free(pool);
    return err;
}

static void *worker_main(void *arg)
{
    mp__pool_worker *w = arg;
    mp__pool_current = w;
    /* Relaxed: read only by the suites (mp__test_pool_worker_tid()), as a plain value. */
    atomic_store_explicit(&w->tid, (int)gettid(), memory_order_relaxed);
    mp__pool_wait_until(w, &w->terminate.core);
    mp__pool_current = NULL;
    return NULL;
}

/* Starts the thread of the next unused slot. Returns 0, -ENOSPC when no slot is left or the
 * pool is stopping, or the negative errno of the failed spawn. */
static int spawn_one(mp_pool *pool)
{
    int err = 0;
    pthread_mutex_lock(&pool->spawn_mu);
    /* Relaxed: written only under spawn_mu, which we hold. */
    unsigned i = atomic_load_explicit(&pool->spawned, memory_order_relaxed);
    if (pool->stopping || i >= pool->nthreads) {
        pthread_mutex_unlock(&pool->spawn_mu);
        return -ENOSPC;
    }
    mp__pool_worker *w = &pool->workers[i];
    pool->spawn_attempts++;
    if (pool->fail_spawn_nth != 0 && pool->spawn_attempts == pool->fail_spawn_nth) {
        err = EAGAIN;
    } else {
        pthread_attr_t attr;
        err = pthread_attr_init(&attr);
        if (err == 0) {
            if (pool->stack_size != 0)
                err = pthread_attr_setstacksize(&attr, pool->stack_size);
            if (err == 0)
                err = pthread_create(&w->thread, &attr, worker_main, w);
            pthread_attr_destroy(&attr);
        }
    }
    if (err != 0) {
        /* The slot stays unstarted: the next spawn tries it again. */
        pool->spawn_failures++;
        pool->last_spawn_error = -err;
    } else {
        if (mp__unlikely(pool->spawn_publish_delay_us != 0))
            usleep(pool->spawn_publish_delay_us); /* testhook.c: a preempted spawner */
        /* Relaxed: the hot path reads it only to skip the spawn check; every decision is
         * made again under spawn_mu. */
        atomic_store_explicit(&pool->spawned, i + 1, memory_order_relaxed);
        w->started = true;
        /* Relaxed: a count for mp_pool_call's "any thread at all?" check and the stats; the
         * worker itself was published by pthread_create. */
        atomic_fetch_add_explicit(&pool->started, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pool->spawn_mu);
    return -err;
}

/* The slow path of mp__pool_notify_jobs (pool_internal.h): slots are left. Starts another
 * thread if no started worker is idle or asleep to take the jobs. */
void mp__pool_spawn_for_jobs(mp_pool *pool, uint64_t counters, uint32_t njobs)
{
    if (mp__sleep_sleeping(counters) == 0 && mp__sleep_inactive(counters) < njobs)
        spawn_one(pool);
}

bool mp__pool_has_injected(mp_pool *pool)
{
    return !mp__pool_inject_is_empty(&pool->inject);
}

static uint64_t next_rand(mp__pool_worker *w)
{
    /* xorshift64* */
    uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545f4914f6cdd1dull;
}

static mp__pool_job *steal_any(mp__pool_worker *w)
{
    mp_pool *pool = w->pool;
    /* Relaxed: thread slots past this have no thread and empty deques; a stale value only
     * skips a worker that has just started and has nothing yet. */
    size_t spawned = atomic_load_explicit(&pool->spawned, memory_order_relaxed);
    /* A thread that has just started may run before its spawner counts it (spawned is
     * stored after pthread_create returns): count it here, or it would not see the caller
     * slot, where the job that got it started waits, and could sleep past it. */
    if (w->index < pool->nthreads && spawned <= w->index)
        spawned = w->index + 1;
    /* Victims: the started thread slots, then the caller slot (index nthreads) if any. */
    size_t n = spawned + (pool->caller_slot ? 1 : 0);
    if (n <= 1)
        return NULL;
    for (;;) {
        bool retry = false;
        size_t start = (size_t)(next_rand(w) % n);
        for (size_t k = 0; k < n; k++) {
            size_t i = start + k < n ? start + k : start + k - n;
            if (i == spawned)
                i = pool->nthreads;
            if (i == w->index)
                continue;
            mp__pool_job *job;
            mp__pool_steal r = mp__pool_deque_steal(&pool->workers[i].deque, &job);
            if (r == MP__POOL_STEAL_SUCCESS) {
                /* Relaxed: a statistic written only by this worker. */
                atomic_store_explicit(&w->stolen,
                                      atomic_load_explicit(&w->stolen, memory_order_relaxed) + 1,
                                      memory_order_relaxed);
                return job;
            }
            retry |= r == MP__POOL_STEAL_RETRY;
        }
        if (!retry)
            return NULL;
    }
}

/* Takes every injected job: keeps one, pushes the rest on our deque for thieves. */
static mp__pool_job *take_injected(mp__pool_worker *w)
{
    mp_pool *pool = w->pool;
    mp__pool_job *list = mp__pool_inject_take_all(&pool->inject);
    if (list == NULL)
        return NULL;
    mp__pool_job *rest = list->next;
    uint32_t pushed = 0;
    bool was_empty = true, e;
    while (rest != NULL) {
        mp__pool_job *next = rest->next;
        if (mp__pool_deque_push_owner(&w->deque, rest, &e) != 0) {
            /* No memory to grow the deque: hand the remainder back to the stack. */
            while (rest != NULL) {
                next = rest->next;
                mp__pool_inject_push(&pool->inject, rest);
                rest = next;
            }
            break;
        }
        was_empty &= e;
        pushed++;
        rest = next;
    }
    if (pushed > 0) {
        uint64_t c = mp__pool_sleep_new_internal_jobs(&pool->sleep, pushed, was_empty);
        mp__pool_notify_jobs(pool, c, pushed);
    }
    return list;
}

static mp__pool_job *find_work(mp__pool_worker *w)
{
    mp__pool_job *job = mp__pool_deque_pop_owner(&w->deque);
    if (job == NULL)
        job = steal_any(w);
    if (job == NULL && w->index < w->pool->nthreads) /* not the caller slot: see the top */
        job = take_injected(w);
    return job;
}

static void wait_until_cold(mp__pool_worker *w, mp__pool_core_latch *latch)
{
    mp__pool_sleep *sleep = &w->pool->sleep;
    while (!mp__pool_latch_probe(latch)) {
        /* Own jobs first, without touching the shared counter word. */
        mp__pool_job *job = mp__pool_deque_pop_owner(&w->deque);
        if (job != NULL) {
            mp__pool_execute(job);
            continue;
        }
        mp__pool_idle idle;
        mp__pool_sleep_start_looking(sleep, &idle, w->index);
        while (!mp__pool_latch_probe(latch)) {
            job = find_work(w);
            if (job != NULL)
                break;
            mp__pool_sleep_no_work_found(sleep, &idle, latch, w->pool);
        }
        /* Found work, or the latch is set: either way no longer idle. */
        mp__pool_sleep_work_found(sleep);
        if (job == NULL)
            return;
        mp__pool_execute(job);
    }
}

/* Worker w runs, steals or sleeps until latch is set. */
void mp__pool_wait_until(mp__pool_worker *w, mp__pool_core_latch *latch)
{
    if (mp__likely(mp__pool_latch_probe(latch)))
        return;
    wait_until_cold(w, latch);
}

static void call_execute(mp__pool_job *job)
{
    struct call_job *c = mp_container_of(job, struct call_job, job);
    c->fn(c->arg);
    mp__pool_lock_latch_set(&c->done);
}

/* Makes sure at least one worker thread runs. */
static int ensure_started(mp_pool *pool)
{
    /* Relaxed: only a count; thread publication is pthread_create's business. */
    /* As many attempts as the pool has slots: a failure does not use its slot up, so they
     * all try the same one, but a pool of N threads should not fail a call where N spawns
     * would have found one that works. */
    int err = -ENOSPC;
    for (unsigned tries = 0; tries < pool->nthreads; tries++) {
        if (atomic_load_explicit(&pool->started, memory_order_relaxed) != 0)
            return 0;
        err = spawn_one(pool);
        if (err == -ENOSPC) /* stopping, or another caller started the last slot meanwhile */
            break;
    }
    return atomic_load_explicit(&pool->started, memory_order_relaxed) != 0 ? 0 : err;
}

/* The calling thread holds caller_mu: it works in the caller slot until fn returns. */
static void call_in_slot(mp_pool *pool, mp_pool_fn fn, void *arg)
{
    mp__pool_worker *slot = &pool->workers[pool->nthreads];
    mp__pool_worker *outer = mp__pool_current; /* a worker of another pool, or NULL */
    mp__pool_current = slot;
    fn(arg);
    /* What stolen jobs pushed here and nobody took (see the top). */
    mp__pool_job *job;
    while ((job = mp__pool_deque_pop_owner(&slot->deque)) != NULL)
        mp__pool_execute(job);
    mp__pool_current = outer;
    /* Relaxed: a statistic. */
    atomic_fetch_add_explicit(&pool->caller_calls, 1, memory_order_relaxed);
    pthread_mutex_unlock(&pool->caller_mu);
}

int mp_pool_call(mp_pool *pool, mp_pool_fn fn, void *arg)
{
    mp__pool_worker *w = mp__pool_current;
    if (w != NULL && w->pool == pool) {
        fn(arg);
        return 0;
    }
    int err;
    if (pool->caller_slot) {
        if (pthread_mutex_trylock(&pool->caller_mu) == 0) {
            call_in_slot(pool, fn, arg);
            return 0;
        }
        /* Taken: the threads take the call, if there can be one; else wait for the slot. */
        if (ensure_started(pool) != 0) {
            pthread_mutex_lock(&pool->caller_mu);
            call_in_slot(pool, fn, arg);
            return 0;
        }
    } else {
        err = ensure_started(pool);
        if (err != 0)
            return err;
    }
    struct call_job c;
    err = mp__pool_lock_latch_init(&c.done);
    if (err != 0)
        return err;
    c.job.execute = call_execute;
    c.fn = fn;
    c.arg = arg;
    bool was_empty = mp__pool_inject_push(&pool->inject, &c.job);
    uint64_t counters = mp__pool_sleep_new_injected_jobs(&pool->sleep, 1, was_empty);
    mp__pool_notify_jobs(pool, counters, 1);
    mp__pool_lock_latch_wait(&c.done);
    mp__pool_lock_latch_destroy(&c.done);
    return 0;
}

void mp_pool_free(mp_pool *pool)
{
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->spawn_mu);
    pool->stopping = true;
    pthread_mutex_unlock(&pool->spawn_mu);
    /* No spawn can start now, so `started` flags are stable and readable without the lock
     * (the unlock above ordered every write to them before us). */
    for (unsigned i = 0; i < pool->nworkers; i++) {
        if (pool->workers[i].started)
            mp__pool_spin_latch_set(pool, &pool->workers[i].terminate); /* (A) */
    }
    for (unsigned i = 0; i < pool->nworkers; i++) {
        if (pool->workers[i].started)
            pthread_join(pool->workers[i].thread, NULL);
    }
    pthread_mutex_destroy(&pool->spawn_mu);
    pthread_mutex_destroy(&pool->caller_mu);
    mp__pool_sleep_destroy(&pool->sleep);
    for (unsigned i = 0; i < pool->nworkers; i++)
        mp__pool_deque_destroy(&pool->workers[i].deque);
    free(pool->workers);
    free(pool);
}

int mp_pool_stats_get(mp_pool *pool, mp_pool_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->workers = pool->nworkers;
    pthread_mutex_lock(&pool->spawn_mu);
    out->spawn_failures = pool->spawn_failures;
    out->last_spawn_error = pool->last_spawn_error;
    pthread_mutex_unlock(&pool->spawn_mu);
    /* Relaxed: statistics, each a plain snapshot. */
    out->workers_started = atomic_load_explicit(&pool->started, memory_order_relaxed);
    out->injected = atomic_load_explicit(&pool->inject.pushed, memory_order_relaxed);
    out->caller_calls = atomic_load_explicit(&pool->caller_calls, memory_order_relaxed);
    out->workers_sleeping = mp__sleep_sleeping(mp__pool_sleep_load(&pool->sleep));
    for (unsigned i = 0; i < pool->nworkers; i++) {
        out->stolen += atomic_load_explicit(&pool->workers[i].stolen, memory_order_relaxed);
        mp__pool_sleep_state *st = &pool->sleep.states[i];
        pthread_mutex_lock(&st->mu);
        out->sleeps += st->sleeps;
        pthread_mutex_unlock(&st->mu);
    }
    return 0;
}

int mp_pool_worker_index(void)
{
    return mp__pool_current != NULL ? (int)mp__pool_current->index : -1;
}
