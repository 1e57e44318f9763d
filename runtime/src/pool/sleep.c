/*
 * Idle workers and how posters wake them: Rayon's sleep protocol with the Jobs Event Counter.
 *
 * A worker that finds no work becomes inactive (start_looking) and goes through idle rounds,
 * searching between them: 32 rounds that only yield (and as many more as fill
 * MP__SLEEP_IDLE_MIN_NS), then it announces itself sleepy (makes the JEC even) and snapshots
 * the JEC, one more round, then it tries to sleep: latch UNSET ->
 * SLEEPY -> SLEEPING (latch.c), and registers as sleeping with a CAS on the counter word that
 * succeeds only if the JEC still equals its snapshot. Whoever posts jobs makes an even JEC odd
 * and reads the sleeping and inactive counts in the same atomic step, then wakes only as many
 * sleepers as the new jobs exceed the workers that are idle but awake (those will find the
 * work by themselves). The waker, not the sleeper, takes a woken thread off the sleeping count,
 * so that the next poster does not count a thread that is already on its way.
 *
 * The lost wake-up this prevents, for jobs pushed on a deque:
 *
 *   worker                                  poster
 *   search: nothing
 *                                           push job
 *                                           read counters: nobody sleeping, no wake
 *   register as sleeping, block             (the job waits for its poster)
 *
 * Fixed: both sides touch the JEC with an RMW on the counter word, so they are ordered:
 *
 *   worker                                  poster
 *   announce: JEC odd -> even, snapshot (A)
 *   search: nothing                         push job
 *   CAS counters: JEC == snapshot,    (B)   JEC even -> odd, read sleeping (C)
 *       sleeping + 1
 *
 * If (C) precedes (B), the CAS sees a new JEC and the worker searches again instead of
 * sleeping. If (B) precedes (C), the poster counts the sleeper and wakes it. If the poster
 * found the JEC already odd, its read came before (A), and the worker's search after (A)
 * finds the job. That last step relies on the push becoming visible before the worker's
 * search, a store-buffering shape that only fences would close. Deque pushes take no fence:
 * every deque job is pushed by a worker that pops its own deque before it may sleep, so a job
 * the protocol misses still runs, just without the extra parallelism. This keeps a SeqCst
 * fence off the join fast path.
 *
 * Jobs injected by threads outside the pool have no such owner, and they need the two SeqCst
 * fences:
 *
 *   injector (new_injected_jobs)            worker (sleep)
 *   push job on the Treiber stack           CAS counters: sleeping + 1
 *   fence(seq_cst)                    (#1)  fence(seq_cst)                      (#2)
 *   read counters: sleeping?                read the Treiber stack: empty?
 *
 * Without them each side's read may be served before the other's write is visible (again
 * store buffering): the injector sees nobody sleeping and the worker sees no job, and the
 * external caller blocks forever. With them, #1 and #2 are in one total order: if #1 is first,
 * the worker sees the job and does not block; if #2 is first, the injector sees the sleeper
 * and wakes it. The JEC covers this too, except when 2^31 announcements wrap the 32-bit JEC
 * back to the snapshot between (A) and (B); the fences make that case safe as well.
 *
 * The caller slot's thread (pool.c) never takes injected jobs, so it does not look at the
 * injection stack before sleeping: it sleeps until its latch is set or a poster wakes it.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool/pool_internal.h"

_Static_assert(sizeof(mp__pool_sleep_state) % MP__CACHE_LINE == 0,
               "each worker's sleep state must own its cache lines");

int mp__pool_sleep_init(mp__pool_sleep *s, size_t nworkers)
{
    void *mem = NULL;
    int err = posix_memalign(&mem, MP__CACHE_LINE, nworkers * sizeof(*s->states));
    if (err != 0)
        return -err;
    memset(mem, 0, nworkers * sizeof(*s->states));
    s->states = mem;
    size_t i;
    for (i = 0; i < nworkers; i++) {
        err = pthread_mutex_init(&s->states[i].mu, NULL);
        if (err != 0)
            goto out_destroy;
        err = pthread_cond_init(&s->states[i].cv, NULL);
        if (err != 0) {
            pthread_mutex_destroy(&s->states[i].mu);
            goto out_destroy;
        }
    }
    s->nstates = nworkers;
    /* Relaxed: published to the workers by pthread_create. */
    atomic_init(&s->counters, 0);
    return 0;

out_destroy:
    while (i-- > 0) {
        pthread_cond_destroy(&s->states[i].cv);
        pthread_mutex_destroy(&s->states[i].mu);
    }
    free(mem);
    return -err;
}

void mp__pool_sleep_destroy(mp__pool_sleep *s)
{
    for (size_t i = 0; i < s->nstates; i++) {
        pthread_cond_destroy(&s->states[i].cv);
        pthread_mutex_destroy(&s->states[i].mu);
    }
    free(s->states);
    s->states = NULL;
}

uint64_t mp__pool_sleep_load(mp__pool_sleep *s)
{
    /* seq_cst: a snapshot in the total order of the word's RMWs; pairs with the RMWs in
     * mp__pool_sleep_start_looking(), mp__pool_sleep_work_found() and go_to_sleep() (sleep.c). */
    return atomic_load_explicit(&s->counters, memory_order_seq_cst);
}

/* Wakes worker `worker` if it is blocked; returns whether it was. */
bool mp__pool_sleep_wake_specific(mp__pool_sleep *s, uint32_t worker)
{
    mp__pool_sleep_state *st = &s->states[worker];
    bool woke = false;
    pthread_mutex_lock(&st->mu);
    if (st->is_blocked) {
        st->is_blocked = false;
        pthread_cond_signal(&st->cv);
        /* The waker unregisters the sleeper, at once, so that a poster after us does not count
         * it as still asleep and skip waking a thread that is. seq_cst: an RMW of the counter
         * word in the order of (B)/(C); pairs with the CAS (B) in go_to_sleep() (sleep.c). */
        atomic_fetch_sub_explicit(&s->counters, MP__SLEEP_ONE_SLEEPING, memory_order_seq_cst);
        woke = true;
    }
    pthread_mutex_unlock(&st->mu);
    return woke;
}

static void wake_any(mp__pool_sleep *s, uint32_t n)
{
    for (size_t i = 0; i < s->nstates && n > 0; i++) {
        if (mp__pool_sleep_wake_specific(s, (uint32_t)i))
            n--;
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Worker: entering the idle rounds. */
void mp__pool_sleep_start_looking(mp__pool_sleep *s, mp__pool_idle *idle, uint32_t worker)
{
    /* seq_cst: posters read the inactive count to decide how many to wake; pairs with (C) in
     * mp__pool_sleep_new_jobs() (sleep.c). */
    atomic_fetch_add_explicit(&s->counters, MP__SLEEP_ONE_INACTIVE, memory_order_seq_cst);
    idle->worker = worker;
    idle->rounds = 0;
    idle->jec = 0;
    idle->since_ns = now_ns();
}

/* Worker: leaving the idle rounds (it found work, or its latch was set). */
void mp__pool_sleep_work_found(mp__pool_sleep *s)
{
    /* seq_cst: posters read the inactive count to decide how many to wake; pairs with (C) in
     * mp__pool_sleep_new_jobs() (sleep.c) and mp__pool_sleep_new_internal_jobs()
     * (pool_internal.h). */
    uint64_t old =
        atomic_fetch_sub_explicit(&s->counters, MP__SLEEP_ONE_INACTIVE, memory_order_seq_cst);
    /* One fewer thread is looking. If others sleep, wake up to two: whatever this thread found
     * may have more behind it, and woken threads cascade the same way (Rayon's heuristic). */
    uint32_t sleeping = mp__sleep_sleeping(old);
    if (sleeping > 0)
        wake_any(s, sleeping < 2 ? sleeping : 2);
}

/* Makes an even JEC odd if `to_odd`, an odd one even otherwise; returns the word after. */
static uint64_t bump_jec(mp__pool_sleep *s, bool to_odd)
{
    /* seq_cst: (A)/(C) in the diagram; pairs with the CAS (B) in go_to_sleep() (sleep.c). */
    uint64_t c = atomic_load_explicit(&s->counters, memory_order_seq_cst);
    for (;;) {
        bool odd = mp__sleep_jec(c) & 1;
        if (odd == to_odd)
            return c;
        uint64_t next = c + MP__SLEEP_ONE_JEC; /* wraps within the top 32 bits */
        /* seq_cst: (A)/(C), pairs with the CAS (B) in go_to_sleep() (sleep.c); on failure c
         * is reloaded and re-examined. */
        if (atomic_compare_exchange_weak_explicit(&s->counters, &c, next, memory_order_seq_cst,
                                                  memory_order_seq_cst))
            return next;
    }
}

/* Jobs were posted: (C). The slow path of mp__pool_sleep_new_internal_jobs (pool_internal.h),
 * and the whole of new_injected_jobs. Returns the counter word as the poster saw it. */
uint64_t mp__pool_sleep_new_jobs(mp__pool_sleep *s, uint32_t njobs, bool queue_was_empty)
{
    uint64_t c = bump_jec(s, true); /* (C) */
    uint32_t sleeping = mp__sleep_sleeping(c);
    if (mp__likely(sleeping == 0))
        return c;
    uint32_t inactive = mp__sleep_inactive(c);
    uint32_t awake_idle = inactive > sleeping ? inactive - sleeping : 0;
    uint32_t wake = 0;
    if (!queue_was_empty)
        wake = njobs < sleeping ? njobs : sleeping; /* a backlog: idle threads are not enough */
    else if (awake_idle < njobs)
        wake = njobs - awake_idle < sleeping ? njobs - awake_idle : sleeping;
    if (wake > 0)
        wake_any(s, wake);
    return c;
}

/* Jobs were pushed on the injection stack by any thread. */
uint64_t mp__pool_sleep_new_injected_jobs(mp__pool_sleep *s, uint32_t njobs, bool queue_was_empty)
{
    /* #1 seq_cst: orders the push onto the injection stack before the read of the sleeping
     * count; pairs with fence #2 in go_to_sleep() (sleep.c). */
    mp__pool_fence_seq_cst();
    return mp__pool_sleep_new_jobs(s, njobs, queue_was_empty);
}

static void go_to_sleep(mp__pool_sleep *s, mp__pool_idle *idle, mp__pool_core_latch *latch,
                        mp_pool *pool)
{
    if (!mp__pool_latch_get_sleepy(latch))
        return; /* set meanwhile: the caller sees it */
    mp__pool_sleep_state *st = &s->states[idle->worker];
    pthread_mutex_lock(&st->mu);
    if (!mp__pool_latch_fall_asleep(latch)) {
        /* Set between get_sleepy and now: there is something to do. */
        idle->rounds = 0;
        pthread_mutex_unlock(&st->mu);
        return;
    }
    /* seq_cst: (B) reads the word in the total order of (A)/(C); the CAS below re-checks. */
    uint64_t c = atomic_load_explicit(&s->counters, memory_order_seq_cst);
    for (;;) {
        if (mp__sleep_jec(c) != idle->jec) {
            /* Jobs were posted since we announced: search again, then re-announce. */
            idle->rounds = MP__SLEEP_ROUNDS_UNTIL_SLEEPY;
            mp__pool_latch_wake_up(latch);
            pthread_mutex_unlock(&st->mu);
            return;
        }
        /* (B) seq_cst: registers as sleeping only if no job was posted since (A); pairs with
         * (C) in bump_jec() and with the waker's decrement in mp__pool_sleep_wake_specific(). */
        if (atomic_compare_exchange_weak_explicit(&s->counters, &c, c + MP__SLEEP_ONE_SLEEPING,
                                                  memory_order_seq_cst, memory_order_seq_cst))
            break;
    }
    /* #2 seq_cst: orders the registration above before the read of the injection stack;
     * pairs with fence #1 in mp__pool_sleep_new_injected_jobs() (sleep.c). */
    mp__pool_fence_seq_cst();
    if (idle->worker < pool->nthreads && mp__pool_has_injected(pool)) {
        /* Nobody will wake us for this job: unregister ourselves. seq_cst as in the waker. */
        atomic_fetch_sub_explicit(&s->counters, MP__SLEEP_ONE_SLEEPING, memory_order_seq_cst);
    } else {
        /* A waker needs st->mu, held since before (B), so it sees is_blocked set. */
        st->is_blocked = true;
        st->sleeps++;
        while (st->is_blocked) /* wake-ups can be spurious */
            pthread_cond_wait(&st->cv, &st->mu);
    }
    idle->rounds = 0;
    mp__pool_latch_wake_up(latch);
    pthread_mutex_unlock(&st->mu);
}

/* Worker: one more search failed. Yields, announces, or sleeps, by round. */
void mp__pool_sleep_no_work_found(mp__pool_sleep *s, mp__pool_idle *idle,
                                  mp__pool_core_latch *latch, mp_pool *pool)
{
    if (idle->rounds < MP__SLEEP_ROUNDS_UNTIL_SLEEPY) {
        sched_yield();
        /* The last yield round repeats until the idle spell is long enough. */
        if (idle->rounds + 1 < MP__SLEEP_ROUNDS_UNTIL_SLEEPY ||
            now_ns() - idle->since_ns >= MP__SLEEP_IDLE_MIN_NS)
            idle->rounds++;
    } else if (idle->rounds == MP__SLEEP_ROUNDS_UNTIL_SLEEPY) {
        idle->jec = mp__sleep_jec(bump_jec(s, false)); /* (A): announce sleepy */
        idle->rounds++;
        sched_yield();
    } else if (idle->rounds < MP__SLEEP_ROUNDS_UNTIL_SLEEPING) {
        idle->rounds++; /* one more search before sleeping */
        sched_yield();
    } else {
        go_to_sleep(s, idle, latch, pool);
    }
}
