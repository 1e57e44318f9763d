/*
 * mp_pool_join: the fork-join primitive, Blitz's and Rayon's "hybrid join". The second half
 * becomes a job in this stack frame and goes on the caller's deque; the caller runs the first
 * half, then pops. Popping its own job back (the common case: nobody was idle) means running
 * it inline, so a join costs a push, a pop and no allocation. A NULL pop means a thief took it;
 * the caller then keeps working (its own deque, steals, injected jobs, sleep) until the thief
 * sets the job's latch (mp__pool_wait_until, pool.c).
 *
 * The job's frame must outlive the thief's use of it: the thief sets the latch as its very last
 * access (mp__pool_spin_latch_set reads the owner index first), and the caller returns only
 * after it has seen the latch set. Pops may also return jobs newer than ours that stolen work
 * left on our deque (scope spawns); those run first, as the deque is LIFO, then ours comes up.
 */
#include "pool/pool_internal.h"

struct join_job {
    mp__pool_job job;
    mp_pool_fn fn;
    void *arg;
    mp__pool_spin_latch latch;
};

/* Runs on a thief, which is always a worker of the same pool. */
static void join_execute(mp__pool_job *job)
{
    struct join_job *j = mp_container_of(job, struct join_job, job);
    j->fn(j->arg);
    mp__pool_spin_latch_set(mp__pool_current->pool, &j->latch);
}

void mp_pool_join(mp_pool_fn a, void *arg_a, mp_pool_fn b, void *arg_b)
{
    mp__pool_worker *w = mp__pool_current;
    if (mp__unlikely(w == NULL)) {
        a(arg_a);
        b(arg_b);
        return;
    }
    struct join_job jb;
    jb.job.execute = join_execute;
    jb.fn = b;
    jb.arg = arg_b;
    mp__pool_spin_latch_init(&jb.latch, w->index);
    if (mp__unlikely(mp__pool_worker_push(w, &jb.job) != 0)) {
        /* The deque is full and cannot grow: run both halves here. */
        a(arg_a);
        b(arg_b);
        return;
    }
    a(arg_a);
    for (;;) {
        mp__pool_job *job = mp__pool_deque_pop_owner(&w->deque);
        if (mp__likely(job == &jb.job)) {
            b(arg_b);
            return;
        }
        if (job == NULL) {
            /* Stolen: work until the thief is done. */
            mp__pool_wait_until(w, &jb.latch.core);
            return;
        }
        mp__pool_execute(job);
    }
}
