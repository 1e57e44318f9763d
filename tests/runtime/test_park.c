/* Tests of runtime/src/park.c: the futex sleep word. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

static mp__park *new_park(void)
{
    mp__park *p = aligned_alloc(MP__CACHE_LINE, sizeof *p);
    atomic_init(&p->state, MP__UNPARKED);
    atomic_init(&p->unparked_at, 0);
    return p;
}

Test(park, unpark_before_park_is_not_lost, .timeout = 10)
{
    mp__park *p = new_park();
    mp__park_unpark(p);
    cr_assert_eq(atomic_load(&p->state), MP__NOTIFIED);
    cr_assert_not(mp__park_wait(p), "returns at once, without sleeping");
    cr_assert_eq(atomic_load(&p->state), MP__UNPARKED);
    mp__park_unpark(p);
    mp__park_unpark(p); /* two notifications before a park are one */
    cr_assert_not(mp__park_wait(p));
    cr_assert_eq(atomic_load(&p->state), MP__UNPARKED);
    free(p);
}

static _Atomic long rounds_done;

static void *waiter(void *arg)
{
    mp__park *p = arg;
    for (int i = 0; i < 10000; i++) {
        mp__park_wait(p);
        atomic_fetch_add(&rounds_done, 1);
    }
    return NULL;
}

Test(park, ping_pong_between_threads, .timeout = 60)
{
    mp__park *p = new_park();
    pthread_t th;
    atomic_store(&rounds_done, 0);
    pthread_create(&th, NULL, waiter, p);
    for (long i = 0; i < 10000; i++) {
        mp__park_unpark(p);
        /* Next round only once the waiter consumed this one: every wake must land. */
        while (atomic_load(&rounds_done) <= i)
            sched_yield();
    }
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&rounds_done), 10000);
    free(p);
}

static void *sleeper(void *arg)
{
    return (void *)(uintptr_t)mp__park_wait(arg);
}

/* The worker measures its wake-up latency only when it really slept (worker.c). */
Test(park, a_wait_that_slept_says_so, .timeout = 10)
{
    mp__park *p = new_park();
    pthread_t th;
    pthread_create(&th, NULL, sleeper, p);
    while (atomic_load(&p->state) != MP__PARKED)
        sched_yield();
    cr_assert_eq(mp__park_unpark(p), MP__PARKED);
    void *slept;
    pthread_join(th, &slept);
    cr_assert_eq((uintptr_t)slept, 1, "the waiter slept on the futex");
    cr_assert_eq(atomic_load(&p->state), MP__UNPARKED);
    free(p);
}
