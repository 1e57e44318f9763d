/*
 * Latches: one-shot events a worker waits for (a stolen join half finished, a scope's last
 * spawn finished, the pool is shutting down). The core is Rayon's 4-state CoreLatch. The
 * waiter owns the UNSET -> SLEEPY -> SLEEPING -> UNSET transitions (sleep.c drives them); a
 * setter swaps in SET from whatever state and, if it displaced SLEEPING, wakes the waiter.
 * SET is never unset.
 *
 * The race the SLEEPY state closes, the "tickle, then get sleepy" lost wake-up:
 *
 *   waiter                               setter
 *   sees latch unset, no work
 *                                        set latch
 *                                        waiter not asleep: no wake
 *   blocks on condvar                    (waiter sleeps forever)
 *
 * Fixed, with every transition an atomic RMW on the one state word:
 *
 *   waiter                               setter
 *   CAS UNSET -> SLEEPY          (A)
 *   lock own mutex
 *   CAS SLEEPY -> SLEEPING       (B)     old = swap(SET)             (C)
 *   (fails if SET: stay awake)           if old == SLEEPING: lock waiter's mutex, wake it
 *   block on condvar
 *
 * (B) and (C) are RMWs on one location, so they are totally ordered: either (C) comes first and
 * (B) fails, or (B) comes first and (C) sees SLEEPING and wakes the waiter. The waker takes the
 * waiter's mutex, which the waiter holds from before (B) until it blocks, so the wake cannot
 * slip in between (B) and the block (sleep.c).
 *
 * The latch usually lives in the waiter's stack frame, and the waiter may return the instant it
 * sees SET: a setter reads everything it needs (the owner index) before (C) and touches only
 * the pool after it.
 */
#include <errno.h>

#include "pool/pool_internal.h"

/* True once the latch is set. */
bool mp__pool_latch_probe(const mp__pool_core_latch *l)
{
    /* Acquire: observes everything the setter did before setting (the stolen job's result);
     * pairs with the swap in mp__pool_latch_set_core() (latch.c). */
    return atomic_load_explicit(&l->state, memory_order_acquire) == MP__LATCH_SET;
}

/* Waiter: UNSET -> SLEEPY (A). False if the latch was set meanwhile. */
bool mp__pool_latch_get_sleepy(mp__pool_core_latch *l)
{
    uint32_t expect = MP__LATCH_UNSET;
    /* seq_cst: (A) above; a failure means SET and is read with acquire to observe the setter's
     * work, pairing with the swap in mp__pool_latch_set_core(). */
    return atomic_compare_exchange_strong_explicit(&l->state, &expect, MP__LATCH_SLEEPY,
                                                   memory_order_seq_cst, memory_order_acquire);
}

/* Waiter, holding its sleep mutex: SLEEPY -> SLEEPING (B). False if the latch was set. */
bool mp__pool_latch_fall_asleep(mp__pool_core_latch *l)
{
    uint32_t expect = MP__LATCH_SLEEPY;
    /* seq_cst: (B) above, ordered against the setter's swap (C) in mp__pool_latch_set_core(). */
    return atomic_compare_exchange_strong_explicit(&l->state, &expect, MP__LATCH_SLEEPING,
                                                   memory_order_seq_cst, memory_order_acquire);
}

/* Waiter, after sleeping or giving up on sleep (the latch is SLEEPING or SET): back to UNSET
 * unless set meanwhile. */
void mp__pool_latch_wake_up(mp__pool_core_latch *l)
{
    uint32_t expect = MP__LATCH_SLEEPING;
    /* seq_cst: ordered with (C) like (B); if (C) came first the CAS fails and SET stays. */
    atomic_compare_exchange_strong_explicit(&l->state, &expect, MP__LATCH_UNSET,
                                            memory_order_seq_cst, memory_order_relaxed);
}

/* Setter: (C). Returns true if the waiter was SLEEPING and must be woken by the caller. */
bool mp__pool_latch_set_core(mp__pool_core_latch *l)
{
    /* seq_cst (a release would do for the data; seq_cst orders it with (B)): publishes the
     * setter's work; pairs with the acquire in mp__pool_latch_probe() and the CASes above. */
    return atomic_exchange_explicit(&l->state, MP__LATCH_SET, memory_order_seq_cst) ==
           MP__LATCH_SLEEPING;
}

void mp__pool_spin_latch_init(mp__pool_spin_latch *l, uint32_t owner)
{
    /* Relaxed: the latch is published to other threads with the job that holds it. */
    atomic_init(&l->core.state, MP__LATCH_UNSET);
    l->owner = owner;
}

/* Sets a spin latch and wakes its owner if it sleeps. *l may be gone when this returns. */
void mp__pool_spin_latch_set(mp_pool *pool, mp__pool_spin_latch *l)
{
    uint32_t owner = l->owner; /* read before (C): afterwards *l may be freed */
    if (mp__pool_latch_set_core(&l->core))
        mp__pool_sleep_wake_specific(&pool->sleep, owner);
}

void mp__pool_count_latch_init(mp__pool_count_latch *l, uint32_t owner)
{
    /* Relaxed: published with the scope to the jobs spawned into it. */
    atomic_init(&l->count, 1);
    mp__pool_spin_latch_init(&l->latch, owner);
}

/* Caller holds a count (it is the scope body or one of the scope's jobs). */
void mp__pool_count_latch_increment(mp__pool_count_latch *l)
{
    /* Relaxed: the caller's own count keeps the latch from firing, so the increment needs no
     * ordering; it is published to the new job with the deque push. */
    atomic_fetch_add_explicit(&l->count, 1, memory_order_relaxed);
}

/* Drops one count; the last one sets the latch. *l may be gone when this returns. */
void mp__pool_count_latch_decrement(mp_pool *pool, mp__pool_count_latch *l)
{
    /* acq_rel: releases this job's work, and the last decrementer acquires everyone's before
     * the latch publishes it to the waiter; pairs with the same RMW in other jobs. */
    if (atomic_fetch_sub_explicit(&l->count, 1, memory_order_acq_rel) == 1)
        mp__pool_spin_latch_set(pool, &l->latch);
}

int mp__pool_lock_latch_init(mp__pool_lock_latch *l)
{
    int err = pthread_mutex_init(&l->mu, NULL);
    if (err != 0)
        return -err;
    err = pthread_cond_init(&l->cv, NULL);
    if (err != 0) {
        pthread_mutex_destroy(&l->mu);
        return -err;
    }
    l->set = false;
    return 0;
}

void mp__pool_lock_latch_destroy(mp__pool_lock_latch *l)
{
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
}

/* Sets the latch and wakes the blocked thread. The mutex orders set against the waiter's
 * check, so no wake-up is lost; the waiter destroys the latch only after it has seen set under
 * the mutex, i.e. after this unlock. */
void mp__pool_lock_latch_set(mp__pool_lock_latch *l)
{
    pthread_mutex_lock(&l->mu);
    l->set = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void mp__pool_lock_latch_wait(mp__pool_lock_latch *l)
{
    pthread_mutex_lock(&l->mu);
    while (!l->set) /* wake-ups can be spurious */
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}
