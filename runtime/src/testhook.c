/* testhook.c: fault injection for the test suites. Not part of the public interface: the
 * suites reach it through internal.h. A runtime or pool copies the hook's value when it is
 * created, so a test sets it before mp_runtime_new() / mp_pool_new() and the object keeps
 * it for its life. This file stands alone, so that a pool-only program links without the
 * reactor. */
#include "internal.h"

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
