/* Tests of runtime/src/sync/timeout.c: a wait that is ready in time, one that is not (and is
 * then cancelled by its task), and a task cancelled while both are armed. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

typedef struct waiter {
    mp_task task;
    mp_timer timer;
    mp_semaphore *s;
    mp_waiter w;
    uint64_t deadline;
    int err, acq;
    _Atomic int released;
} waiter;

static mp_poll acquire(void *arg, mp_context *cx)
{
    waiter *w = arg;
    return mp_semaphore_acquire_poll(w->s, &w->w, 1, cx, &w->acq);
}

static mp_poll waiter_poll(mp_task *t, mp_context *cx)
{
    waiter *w = mp_container_of(t, waiter, task);
    if (mp_timeout_poll(&w->timer, w->deadline, acquire, w, cx, &w->err) == MP_PENDING)
        return MP_PENDING;
    if (w->err == -ETIMEDOUT)
        mp_semaphore_cancel_wait(w->s, &w->w);
    return MP_READY;
}

static void waiter_cancel(mp_task *t)
{
    waiter *w = mp_container_of(t, waiter, task);
    mp_timer_cancel(&w->timer);
    mp_semaphore_cancel_wait(w->s, &w->w);
}

static void waiter_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, waiter, task)->released, 1);
}

static const mp_task_vtable waiter_vt = {
    .poll = waiter_poll, .cancel = waiter_cancel, .release = waiter_release};

static void waiter_start(waiter *w, mp_runtime *rt, mp_semaphore *s, uint64_t in_ms)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->deadline = mp_now_ms() + in_ms;
    w->err = w->acq = 1;
    mp_timer_init(&w->timer, rt);
    mp_waiter_init(&w->w);
    mp_task_init(&w->task, &waiter_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &w->task), 0);
}

static unsigned queued(mp_semaphore *s)
{
    mp__spin_lock(&s->lock);
    unsigned k = 0;
    for (mp_waiter *w = s->head; w; w = w->next)
        k++;
    mp__spin_unlock(&s->lock);
    return k;
}

Test(timeout, ready_in_time_or_timed_out, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    waiter a, b;
    waiter_start(&a, rt, &s, 20);
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(a.err, -ETIMEDOUT);
    cr_assert_eq(queued(&s), 0, "the timed-out wait was cancelled");
    waiter_start(&b, rt, &s, 60 * 60 * 1000); /* an hour: only the permit can end it */
    while (queued(&s) == 0)
        sched_yield();
    mp_semaphore_release(&s, 1);
    cr_assert_eq(mp_join(&b.task), 0);
    cr_assert_eq(b.err, 0);
    cr_assert_eq(b.acq, 0);
    cr_assert_eq(mp_semaphore_available(&s), 0, "b holds the permit");
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&a.released), 1, "the timer or the semaphore kept a's waker");
    cr_assert_eq(atomic_load(&b.released), 1, "the timer or the semaphore kept b's waker");
}

Test(timeout, cancelled_while_both_armed, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    waiter a;
    waiter_start(&a, rt, &s, 60 * 60 * 1000);
    while (queued(&s) == 0)
        sched_yield();
    mp_task_cancel(&a.task);
    cr_assert_eq(mp_join(&a.task), -ECANCELED);
    cr_assert_eq(queued(&s), 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&a.released), 1, "no waker was left behind");
}
