/*
 * Injection: how threads outside the pool hand jobs in. A Treiber stack of intrusive job
 * nodes: any number of threads push with a CAS on the head; a worker takes the whole stack at
 * once with an exchange, so no consumer ever follows a `next` pointer that another consumer
 * may be unlinking (the ABA problem of popping one node at a time, worse here because the
 * nodes live in the callers' stack frames and vanish when their calls return). The taker
 * keeps one job and pushes the rest on its own deque, where other workers can steal them.
 *
 * The stack is not FIFO; mp_pool_call() makes no ordering promise between callers.
 *
 * Pushing alone does not wake anyone: the pusher then calls
 * mp__pool_sleep_new_injected_jobs(), whose fence #1 pairs with fence #2 in the sleep path
 * (sleep.c) so that a worker going to sleep either sees the job or is woken for it.
 */
#include "pool/pool_internal.h"

void mp__pool_inject_init(mp__pool_inject *q)
{
    /* Relaxed: published to workers by pthread_create. */
    atomic_init(&q->head, NULL);
    atomic_init(&q->pushed, 0);
}

/* Any thread. Returns true if the stack was empty before. */
bool mp__pool_inject_push(mp__pool_inject *q, mp__pool_job *job)
{
    /* Relaxed: only a seed for the CAS, which re-reads on failure. */
    mp__pool_job *head = atomic_load_explicit(&q->head, memory_order_relaxed);
    do {
        job->next = head;
        /* Release: publishes the job (and its next link) to the worker that takes it;
         * pairs with the acquire exchange in mp__pool_inject_take_all() (inject_stack.c). */
    } while (!atomic_compare_exchange_weak_explicit(&q->head, &head, job, memory_order_release,
                                                    memory_order_relaxed));
    /* Relaxed: a statistic. */
    atomic_fetch_add_explicit(&q->pushed, 1, memory_order_relaxed);
    return head == NULL;
}

/* Any thread. Detaches and returns the whole stack (newest first), or NULL. */
mp__pool_job *mp__pool_inject_take_all(mp__pool_inject *q)
{
    /* Relaxed peek first, so idle searches do not take the line exclusive for nothing. */
    if (atomic_load_explicit(&q->head, memory_order_relaxed) == NULL)
        return NULL;
    /* Acquire: observes the jobs and links the pushers published; pairs with the release CAS
     * in mp__pool_inject_push() (inject_stack.c). */
    return atomic_exchange_explicit(&q->head, NULL, memory_order_acquire);
}

/* Any thread; used by the sleep path right after fence #2. */
bool mp__pool_inject_is_empty(mp__pool_inject *q)
{
    /* Relaxed: ordered by fence #2 in go_to_sleep() (sleep.c); the job itself is read only
     * after take_all's acquire. */
    return atomic_load_explicit(&q->head, memory_order_relaxed) == NULL;
}
