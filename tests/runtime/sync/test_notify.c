/* Tests of runtime/src/sync/notify.c. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

typedef struct waiter_task {
    mp_task task;
    mp_notify *n;
    mp_notify_waiter w;
    _Atomic int *woken;
} waiter_task;

static mp_poll waiter_poll(mp_task *t, mp_context *cx)
{
    waiter_task *wt = mp_container_of(t, waiter_task, task);
    if (mp_notify_poll(wt->n, &wt->w, cx) == MP_PENDING)
        return MP_PENDING;
    atomic_fetch_add(wt->woken, 1);
    return MP_READY;
}

static const mp_task_vtable waiter_vt = {.poll = waiter_poll};

static unsigned queued(mp_notify *n)
{
    mp__spin_lock(&n->lock);
    unsigned k = 0;
    for (mp_notify_waiter *w = n->head; w; w = w->next)
        k++;
    mp__spin_unlock(&n->lock);
    return k;
}

Test(notify, permit_one_all, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_notify n;
    mp_notify_init(&n);
    mp_notify_one(&n); /* stored as a permit */
    _Atomic int woken = 0;
    enum { K = 10 };
    waiter_task w[K];
    for (int i = 0; i < K; i++) {
        mp_task_init(&w[i].task, &waiter_vt);
        mp_notify_waiter_init(&w[i].w);
        w[i].n = &n;
        w[i].woken = &woken;
        cr_assert_eq(mp_spawn_joinable(rt, &w[i].task), 0);
    }
    while (queued(&n) < K - 1)
        sched_yield();
    cr_assert_eq(atomic_load(&woken), 1, "the permit let exactly one through");
    mp_notify_one(&n);
    while (atomic_load(&woken) < 2)
        sched_yield();
    cr_assert_eq(queued(&n), K - 2);
    mp_notify_all(&n);
    for (int i = 0; i < K; i++)
        cr_assert_eq(mp_join(&w[i].task), 0);
    cr_assert_eq(atomic_load(&woken), K);
    cr_assert_not(n.permit, "notify_all leaves no permit");
    mp_runtime_free(rt);
}

Test(notify, cancelled_waiter_passes_notify_one_on)
{
    mp_notify n;
    mp_notify_init(&n);
    mp__thread_waiter ta, tb;
    mp_context ca = {.waker = mp__thread_waiter_init(&ta)},
               cb = {.waker = mp__thread_waiter_init(&tb)};
    mp_notify_waiter a, b;
    mp_notify_waiter_init(&a);
    mp_notify_waiter_init(&b);
    cr_assert_eq(mp_notify_poll(&n, &a, &ca), MP_PENDING);
    cr_assert_eq(mp_notify_poll(&n, &b, &cb), MP_PENDING);
    mp_notify_one(&n);
    cr_assert_eq(atomic_load(&ta.word), 1);
    mp_notify_cancel(&n, &a); /* a never consumed it: b gets it */
    cr_assert_eq(atomic_load(&tb.word), 1);
    cr_assert_eq(mp_notify_poll(&n, &b, &cb), MP_READY);
    cr_assert_not(n.permit);
}

static void *blocking_waiter(void *arg)
{
    mp_notify_wait_blocking(arg);
    return NULL;
}

Test(notify, blocking_threads, .timeout = 30)
{
    mp_notify n;
    mp_notify_init(&n);
    pthread_t th[4];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 4; i++)
            pthread_create(&th[i], NULL, blocking_waiter, &n);
        while (queued(&n) < 4)
            sched_yield();
        if (round % 2) {
            mp_notify_all(&n);
        } else {
            for (int i = 0; i < 4; i++)
                mp_notify_one(&n);
        }
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
    }
    cr_assert_not(n.permit);
}
