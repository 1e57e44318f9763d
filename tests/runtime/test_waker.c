/* Tests of runtime/src/waker.c: the type-erased waker handle. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

static int wakes, clones, drops;

static void w_wake(const void *d)
{
    (void)d; /* the vtable's signature */
    wakes++;
    drops++; /* wake consumes */
}

static void w_wake_by_ref(const void *d)
{
    (void)d; /* the vtable's signature */
    wakes++;
}

static const void *w_clone(const void *d)
{
    clones++;
    return d;
}

static void w_drop(const void *d)
{
    (void)d; /* the vtable's signature */
    drops++;
}

static const mp_waker_vtable vt = {w_wake, w_wake_by_ref, w_clone, w_drop};

Test(waker, empty_waker_is_a_no_op)
{
    mp_waker e = {0};
    cr_assert(mp_waker_is_empty(&e));
    mp_waker c = mp_waker_clone(&e);
    cr_assert(mp_waker_is_empty(&c));
    mp_waker_wake_by_ref(&e);
    mp_waker_wake(&e);
    mp_waker_drop(&e);
}

Test(waker, wake_consumes_and_clone_drop_balance)
{
    wakes = clones = drops = 0;
    int x;
    mp_waker w = {.vt = &vt, .data = &x};
    mp_waker c = mp_waker_clone(&w);
    cr_assert(mp_waker_will_wake(&w, &c));
    mp_waker other = {.vt = &vt, .data = &wakes};
    cr_assert_not(mp_waker_will_wake(&w, &other));
    mp_waker_wake_by_ref(&c);
    mp_waker_wake(&c);
    cr_assert(mp_waker_is_empty(&c), "wake leaves the waker empty");
    mp_waker_drop(&w);
    cr_assert(mp_waker_is_empty(&w));
    cr_assert_eq(wakes, 2);
    cr_assert_eq(clones, 1);
    cr_assert_eq(drops, 2);
}

typedef struct blocked {
    mp__thread_waiter tw;
    mp_waker w;
    _Atomic int woke;
} blocked;

static void *sleeper(void *arg)
{
    blocked *b = arg;
    mp__thread_waiter_wait(&b->tw);
    atomic_store(&b->woke, 1);
    return NULL;
}

Test(waker, thread_waiter_wakes_a_blocked_thread, .timeout = 10)
{
    blocked b = {0};
    b.w = mp__thread_waiter_init(&b.tw);
    pthread_t th;
    pthread_create(&th, NULL, sleeper, &b);
    mp_waker_wake_by_ref(&b.w);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&b.woke), 1);
    /* A wake before the wait is kept. */
    mp_waker_wake_by_ref(&b.w);
    mp__thread_waiter_wait(&b.tw);
}
