/* testhook.c: fault injection and probes for the test suites, and nothing else calls them: every
 * test-only function of the runtime is here. Not part of the public interface: the suites
 * reach it through internal.h and pool/pool_internal.h. A runtime or pool copies a global
 * hook's value when it is created, so a test sets it before mp_runtime_new() / mp_pool_new()
 * and the object keeps it for its life; the other hooks act on the object they are given.
 * This file calls nothing of the reactor's, so that a pool-only program links without it. */
#include "internal.h"
#include "pool/pool_internal.h"

/* Relaxed: set by a test before it creates the object that reads it, on the same thread. */
static _Atomic unsigned fail_spawn_nth;

void mp__test_fail_spawn_nth(unsigned nth)
{
    atomic_store_explicit(&fail_spawn_nth, nth, memory_order_relaxed);
}

unsigned mp__test_fail_spawn_nth_value(void)
{
    return atomic_load_explicit(&fail_spawn_nth, memory_order_relaxed);
}

/* Relaxed: as fail_spawn_nth. */
static _Atomic unsigned timer_fire_delay_us;

void mp__test_timer_fire_delay_us(unsigned us)
{
    atomic_store_explicit(&timer_fire_delay_us, us, memory_order_relaxed);
}

unsigned mp__test_timer_fire_delay_us_value(void)
{
    return atomic_load_explicit(&timer_fire_delay_us, memory_order_relaxed);
}

/* Relaxed: as fail_spawn_nth. */
static _Atomic unsigned pool_spawn_publish_delay_us;

void mp__test_pool_spawn_publish_delay_us(unsigned us)
{
    atomic_store_explicit(&pool_spawn_publish_delay_us, us, memory_order_relaxed);
}

unsigned mp__test_pool_spawn_publish_delay_us_value(void)
{
    return atomic_load_explicit(&pool_spawn_publish_delay_us, memory_order_relaxed);
}

/* Relaxed: as fail_spawn_nth. */
static _Atomic unsigned loop_call_delay_us;

void mp__test_loop_call_delay_us(unsigned us)
{
    atomic_store_explicit(&loop_call_delay_us, us, memory_order_relaxed);
}

unsigned mp__test_loop_call_delay_us_value(void)
{
    return atomic_load_explicit(&loop_call_delay_us, memory_order_relaxed);
}

void mp__test_blocking_fail_next_start(mp__blocking *b)
{
    pthread_mutex_lock(&b->mu);
    b->fail_next_start = true;
    pthread_mutex_unlock(&b->mu);
}

size_t mp__test_pool_deque_capacity(mp__pool_deque *d)
{
    /* Relaxed: only the owner (the test) writes buf. */
    return (size_t)atomic_load_explicit(&d->buf, memory_order_relaxed)->mask + 1;
}

int mp__test_pool_worker_tid(mp_pool *pool, unsigned index)
{
    if (index >= pool->nworkers)
        return 0;
    /* Relaxed: a plain value, stored once by the worker as it starts (worker_main() in
     * pool.c). */
    return atomic_load_explicit(&pool->workers[index].tid, memory_order_relaxed);
}
