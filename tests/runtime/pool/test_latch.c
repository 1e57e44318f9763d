/* Tests for runtime/src/pool/latch.c: the CoreLatch state machine, count and lock latches. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include "pool/pool_internal.h"
#include "test_util.h"

static uint32_t state(mp__pool_core_latch *l)
{
    /* Relaxed: single-threaded inspection. */
    return atomic_load_explicit(&l->state, memory_order_relaxed);
}

Test(latch, sleep_transitions_and_wake_up)
{
    mp__pool_spin_latch l;
    mp__pool_spin_latch_init(&l, 0);
    cr_assert_not(mp__pool_latch_probe(&l.core));
    cr_assert(mp__pool_latch_get_sleepy(&l.core));
    cr_assert_eq(state(&l.core), MP__LATCH_SLEEPY);
    cr_assert_not(mp__pool_latch_get_sleepy(&l.core), "only from UNSET");
    cr_assert(mp__pool_latch_fall_asleep(&l.core));
    cr_assert_eq(state(&l.core), MP__LATCH_SLEEPING);
    cr_assert_not(mp__pool_latch_fall_asleep(&l.core), "only from SLEEPY");
    mp__pool_latch_wake_up(&l.core);
    cr_assert_eq(state(&l.core), MP__LATCH_UNSET);
}

Test(latch, set_reports_a_sleeping_waiter_and_sticks)
{
    mp__pool_core_latch l;
    atomic_init(&l.state, MP__LATCH_UNSET);
    cr_assert_not(mp__pool_latch_set_core(&l), "nobody asleep: no wake needed");
    cr_assert(mp__pool_latch_probe(&l));
    cr_assert_not(mp__pool_latch_get_sleepy(&l), "a set latch does not get sleepy");

    atomic_init(&l.state, MP__LATCH_UNSET);
    cr_assert(mp__pool_latch_get_sleepy(&l));
    cr_assert_not(mp__pool_latch_set_core(&l), "SLEEPY: the waiter will see SET itself");
    cr_assert_not(mp__pool_latch_fall_asleep(&l));

    atomic_init(&l.state, MP__LATCH_UNSET);
    cr_assert(mp__pool_latch_get_sleepy(&l));
    cr_assert(mp__pool_latch_fall_asleep(&l));
    cr_assert(mp__pool_latch_set_core(&l), "SLEEPING: the setter must wake");
    mp__pool_latch_wake_up(&l);
    cr_assert_eq(state(&l), MP__LATCH_SET, "wake_up never unsets SET");
}

Test(latch, count_latch_sets_at_zero)
{
    mp_pool *p;
    cr_assert_eq(mp_pool_new(&p, NULL), 0);
    mp__pool_count_latch l;
    mp__pool_count_latch_init(&l, 0);
    for (int i = 0; i < 1000; i++)
        mp__pool_count_latch_increment(&l);
    for (int i = 0; i < 1000; i++) {
        mp__pool_count_latch_decrement(p, &l);
        cr_assert_not(mp__pool_latch_probe(&l.latch.core));
    }
    mp__pool_count_latch_decrement(p, &l);
    cr_assert(mp__pool_latch_probe(&l.latch.core));
    mp_pool_free(p);
}

static void *set_later(void *v)
{
    mp__pool_lock_latch_set(v);
    return NULL;
}

Test(latch, lock_latch_blocks_until_set, .timeout = 30)
{
    for (int i = 0; i < 1000; i++) {
        mp__pool_lock_latch l;
        pthread_t th;
        cr_assert_eq(mp__pool_lock_latch_init(&l), 0);
        cr_assert_eq(pthread_create(&th, NULL, set_later, &l), 0);
        mp__pool_lock_latch_wait(&l);
        pthread_join(th, NULL);
        mp__pool_lock_latch_destroy(&l);
    }
}
