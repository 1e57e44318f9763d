/* Tests of runtime/src/sync/mutex.c: FIFO order of waiters, try-lock, a cancelled waiter that
 * had been handed the lock, and tasks and threads sharing a counter under it. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(mutex, try_lock_and_unlock)
{
    mp_mutex m;
    mp_mutex_init(&m);
    cr_assert(mp_mutex_try_lock(&m));
    cr_assert_not(mp_mutex_try_lock(&m));
    mp_mutex_unlock(&m);
    cr_assert(mp_mutex_try_lock(&m));
    mp_mutex_unlock(&m);
    mp_mutex_lock_blocking(&m);
    cr_assert_not(mp_mutex_try_lock(&m));
    mp_mutex_unlock(&m);
}

/* Handed to a waiter that is cancelled before it looks: the lock goes to the next waiter, and
 * with nobody waiting it is free again. */
Test(mutex, cancelled_waiter_passes_the_lock_on)
{
    mp_mutex m;
    mp_mutex_init(&m);
    cr_assert(mp_mutex_try_lock(&m));
    hand a, b;
    hand_init(&a);
    hand_init(&b);
    cr_assert_eq(mp_mutex_lock_poll(&m, &a.w, &a.cx), MP_PENDING);
    cr_assert_eq(mp_mutex_lock_poll(&m, &b.w, &b.cx), MP_PENDING);
    mp_mutex_unlock(&m); /* handed to a */
    cr_assert(woken(&a));
    cr_assert_not(mp_mutex_try_lock(&m), "a newcomer does not barge past the grant");
    mp_mutex_cancel_wait(&m, &a.w);
    cr_assert(woken(&b));
    cr_assert_eq(mp_mutex_lock_poll(&m, &b.w, &b.cx), MP_READY);
    mp_mutex_unlock(&m);
    cr_assert_eq(mp_mutex_lock_poll(&m, &a.w, &a.cx), MP_READY, "a's node is reusable");
    mp_mutex_cancel_wait(&m, &a.w); /* idle node: no-op, the lock stays held */
    cr_assert_not(mp_mutex_try_lock(&m));
    mp_mutex_unlock(&m);
    cr_assert(mp_mutex_try_lock(&m), "no lock lost");
}

/* Tasks queue in a known order (each is spawned once the previous one is queued); unlocking
 * lets them in exactly in that order. */
typedef struct orderly {
    mp_task task;
    mp_mutex *m;
    mp_waiter w;
    int id;
    int *log;
    _Atomic int *n;
} orderly;

static mp_poll orderly_poll(mp_task *t, mp_context *cx)
{
    orderly *o = mp_container_of(t, orderly, task);
    if (mp_mutex_lock_poll(o->m, &o->w, cx) == MP_PENDING)
        return MP_PENDING;
    o->log[atomic_fetch_add(o->n, 1)] = o->id; /* under the lock */
    mp_mutex_unlock(o->m);
    return MP_READY;
}

static const mp_task_vtable orderly_vt = {.poll = orderly_poll};

static unsigned queued(mp_mutex *m)
{
    mp__spin_lock(&m->sem.lock);
    unsigned k = 0;
    for (mp_waiter *w = m->sem.head; w; w = w->next)
        k++;
    mp__spin_unlock(&m->sem.lock);
    return k;
}

Test(mutex, waiters_get_the_lock_in_fifo_order, .timeout = 30)
{
    mp_runtime *rt = test_runtime(4);
    mp_mutex m;
    mp_mutex_init(&m);
    mp_mutex_lock_blocking(&m);
    enum { K = 32 };
    orderly o[K];
    int log[K];
    _Atomic int n = 0;
    for (int i = 0; i < K; i++) {
        o[i] = (orderly){.m = &m, .id = i, .log = log, .n = &n};
        mp_task_init(&o[i].task, &orderly_vt);
        mp_waiter_init(&o[i].w);
        cr_assert_eq(mp_spawn_joinable(rt, &o[i].task), 0);
        while (queued(&m) < (unsigned)i + 1)
            sched_yield();
    }
    mp_mutex_unlock(&m);
    for (int i = 0; i < K; i++)
        cr_assert_eq(mp_join(&o[i].task), 0);
    cr_assert_eq(atomic_load(&n), K);
    for (int i = 0; i < K; i++)
        cr_assert_eq(log[i], i, "position %d went to waiter %d", i, log[i]);
    cr_assert(mp_mutex_try_lock(&m));
    mp_runtime_free(rt);
}

/* A plain counter incremented non-atomically, in two steps with a yield between them while
 * the lock is held: tasks and threads together, some tasks cancelled. A lost update or two
 * holders at once shows in the count or the inside flag. */
typedef struct incr {
    mp_task task;
    mp_mutex *m;
    mp_waiter w;
    int left;
    bool holding;
    long *counter;
    long *done;
    _Atomic int *inside, *bad;
    long read;
} incr;

static mp_poll incr_poll(mp_task *t, mp_context *cx)
{
    incr *c = mp_container_of(t, incr, task);
    if (c->holding) {
        *c->counter = c->read + 1;
        (*c->done)++;
        atomic_store(c->inside, 0);
        c->holding = false;
        mp_mutex_unlock(c->m);
        if (--c->left == 0)
            return MP_READY;
    }
    if (mp_mutex_lock_poll(c->m, &c->w, cx) == MP_PENDING)
        return MP_PENDING;
    if (atomic_exchange(c->inside, 1) != 0)
        atomic_store(c->bad, 1);
    c->read = *c->counter;
    c->holding = true;
    return mp_yield(cx);
}

static void incr_cancel(mp_task *t)
{
    incr *c = mp_container_of(t, incr, task);
    mp_mutex_cancel_wait(c->m, &c->w);
    if (c->holding) { /* the half-done update is abandoned, as the counter's owner decides */
        atomic_store(c->inside, 0);
        mp_mutex_unlock(c->m);
    }
}

static const mp_task_vtable incr_vt = {.poll = incr_poll, .cancel = incr_cancel};

typedef struct thr {
    mp_mutex *m;
    long *counter, *done;
    _Atomic int *inside, *bad;
} thr;

static void *thr_main(void *arg)
{
    thr *p = arg;
    for (int i = 0; i < 3000; i++) {
        mp_mutex_lock_blocking(p->m);
        if (atomic_exchange(p->inside, 1) != 0)
            atomic_store(p->bad, 1);
        ++*p->counter;
        ++*p->done;
        atomic_store(p->inside, 0);
        mp_mutex_unlock(p->m);
    }
    return NULL;
}

Test(mutex, tasks_and_threads_exclude_each_other, .timeout = 120)
{
    uint64_t rng = test_seed();
    mp_runtime *rt = test_runtime(4);
    mp_mutex m;
    mp_mutex_init(&m);
    long counter = 0, done = 0;
    _Atomic int inside = 0, bad = 0;
    enum { U = 48, T = 2 };
    incr *u = calloc(U, sizeof *u);
    for (int i = 0; i < U; i++) {
        u[i] = (incr){.m = &m,
                      .left = 300,
                      .counter = &counter,
                      .done = &done,
                      .inside = &inside,
                      .bad = &bad};
        mp_task_init(&u[i].task, &incr_vt);
        mp_waiter_init(&u[i].w);
        cr_assert_eq(mp_spawn_joinable(rt, &u[i].task), 0);
    }
    thr p = {.m = &m, .counter = &counter, .done = &done, .inside = &inside, .bad = &bad};
    pthread_t th[T];
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, thr_main, &p);
    for (int i = 0; i < U; i += 1 + (int)(test_rand(&rng) % 5))
        mp_task_cancel(&u[i].task);
    for (int i = 0; i < U; i++) {
        int r = mp_join(&u[i].task);
        cr_assert(r == 0 || r == -ECANCELED, "join: %d", r);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&bad), 0, "two holders at once");
    cr_assert_eq(counter, done, "an update was lost");
    cr_assert(mp_mutex_try_lock(&m), "the lock was lost");
    mp_runtime_free(rt);
    free(u);
}
