/* Tests of runtime/src/sync/semaphore.c: FIFO grants, errors, cancel while granted, close
 * while waiters wait, and tasks and threads sharing permits with exact counts. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(semaphore, errors)
{
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, MP_SEMAPHORE_MAX_PERMITS + 1), -EINVAL);
    cr_assert_eq(mp_semaphore_init(&s, 2), 0);
    cr_assert_eq(mp_semaphore_try_acquire(&s, 0), -EINVAL);
    cr_assert_eq(mp_semaphore_try_acquire(&s, MP_SEMAPHORE_MAX_PERMITS + 1), -EINVAL);
    cr_assert_eq(mp_semaphore_try_acquire(&s, 3), -EAGAIN);
    cr_assert_eq(mp_semaphore_try_acquire(&s, 2), 0);
    cr_assert_eq(mp_semaphore_try_acquire(&s, 1), -EAGAIN);
    hand h;
    hand_init(&h);
    int err = 1;
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &h.w, 0, &h.cx, &err), MP_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(mp_semaphore_acquire_blocking(&s, 0), -EINVAL);
    mp_semaphore_release(&s, 2);
    mp_semaphore_close(&s);
    cr_assert_eq(mp_semaphore_try_acquire(&s, 1), -EPIPE);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &h.w, 1, &h.cx, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
    cr_assert_eq(mp_semaphore_acquire_blocking(&s, 1), -EPIPE);
    mp_semaphore_release(&s, 1); /* still counts after close */
    cr_assert_eq(mp_semaphore_available(&s), 3);
}

/* A large request at the head is not starved by small ones behind it. */
Test(semaphore, large_request_at_head_is_not_starved)
{
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    hand a, b;
    hand_init(&a);
    hand_init(&b);
    int err;
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 5, &a.cx, &err), MP_PENDING);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 1, &b.cx, &err), MP_PENDING);
    mp_semaphore_release(&s, 1);
    cr_assert_not(woken(&a));
    cr_assert_not(woken(&b), "b would pass the head");
    cr_assert_eq(mp_semaphore_try_acquire(&s, 1), -EAGAIN, "try_acquire would pass the queue");
    mp_semaphore_release(&s, 4);
    cr_assert(woken(&a));
    cr_assert_not(woken(&b));
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 5, &a.cx, &err), MP_READY);
    cr_assert_eq(err, 0);
    mp_semaphore_release(&s, 1);
    cr_assert(woken(&b));
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 1, &b.cx, &err), MP_READY);
    cr_assert_eq(mp_semaphore_available(&s), 0);
}

/* Granted, then cancelled before the waiter looked: the permits go to the next waiter. */
Test(semaphore, cancel_while_granted_passes_permits_on)
{
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    hand a, b;
    hand_init(&a);
    hand_init(&b);
    int err;
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 2, &a.cx, &err), MP_PENDING);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 2, &b.cx, &err), MP_PENDING);
    mp_semaphore_release(&s, 2);
    cr_assert(woken(&a));
    cr_assert_eq(mp_semaphore_available(&s), 0, "handed to a, not left in the count");
    mp_semaphore_cancel_wait(&s, &a.w);
    cr_assert(woken(&b));
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 2, &b.cx, &err), MP_READY);
    cr_assert_eq(err, 0);
    mp_semaphore_release(&s, 2);
    cr_assert_eq(mp_semaphore_available(&s), 2);
    /* The node is idle again and reusable; cancelling an idle node does nothing. */
    mp_semaphore_cancel_wait(&s, &a.w);
    cr_assert_eq(mp_semaphore_available(&s), 2);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 2, &a.cx, &err), MP_READY);
    cr_assert_eq(err, 0);
}

/* The head gives up: the smaller requests behind it that fit are granted at once. */
Test(semaphore, cancelled_head_lets_the_next_fit)
{
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 1), 0);
    hand a, b, c;
    hand_init(&a);
    hand_init(&b);
    hand_init(&c);
    int err;
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 3, &a.cx, &err), MP_PENDING);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 1, &b.cx, &err), MP_PENDING);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &c.w, 1, &c.cx, &err), MP_PENDING);
    mp_semaphore_cancel_wait(&s, &a.w);
    cr_assert(woken(&b));
    cr_assert_not(woken(&c));
    cr_assert_not(woken(&a), "a cancelled node is not woken");
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 1, &b.cx, &err), MP_READY);
    mp_semaphore_cancel_wait(&s, &c.w);
    mp_semaphore_release(&s, 1);
    cr_assert_eq(mp_semaphore_available(&s), 1);
}

/* FIFO: waiters are granted in the order they queued. */
Test(semaphore, grants_in_queue_order)
{
    enum { K = 16 };
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    hand h[K];
    int err;
    for (int i = 0; i < K; i++) {
        hand_init(&h[i]);
        cr_assert_eq(mp_semaphore_acquire_poll(&s, &h[i].w, 1, &h[i].cx, &err), MP_PENDING);
    }
    for (int i = 0; i < K; i++) {
        mp_semaphore_release(&s, 1);
        for (int j = 0; j < K; j++)
            cr_assert_eq(woken(&h[j]), j == i, "release %d woke %d", i, j);
        cr_assert_eq(mp_semaphore_acquire_poll(&s, &h[i].w, 1, &h[i].cx, &err), MP_READY);
    }
}

static void *blocked_acquire(void *arg)
{
    return (void *)(intptr_t)mp_semaphore_acquire_blocking(arg, 1);
}

typedef struct closer_task {
    mp_task task;
    mp_semaphore *s;
    mp_waiter w;
    _Atomic int err, waiting;
} closer_task;

static mp_poll closer_poll(mp_task *t, mp_context *cx)
{
    closer_task *c = mp_container_of(t, closer_task, task);
    int err;
    if (mp_semaphore_acquire_poll(c->s, &c->w, 1, cx, &err) == MP_PENDING) {
        atomic_store(&c->waiting, 1);
        return MP_PENDING;
    }
    atomic_store(&c->err, err);
    return MP_READY;
}

static const mp_task_vtable closer_vt = {.poll = closer_poll};

static unsigned queued(mp_semaphore *s)
{
    mp__spin_lock(&s->lock);
    unsigned k = 0;
    for (mp_waiter *w = s->head; w; w = w->next)
        k++;
    mp__spin_unlock(&s->lock);
    return k;
}

Test(semaphore, close_while_tasks_and_threads_wait, .timeout = 30)
{
    mp_runtime *rt = test_runtime(3);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    enum { T = 3, K = 4 };
    pthread_t th[T];
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, blocked_acquire, &s);
    closer_task c[K];
    for (int i = 0; i < K; i++) {
        memset(&c[i], 0, sizeof c[i]);
        mp_task_init(&c[i].task, &closer_vt);
        c[i].s = &s;
        mp_waiter_init(&c[i].w);
        cr_assert_eq(mp_spawn_joinable(rt, &c[i].task), 0);
    }
    while (queued(&s) < T + K)
        sched_yield();
    mp_semaphore_close(&s);
    for (int i = 0; i < T; i++) {
        void *r;
        pthread_join(th[i], &r);
        cr_assert_eq((intptr_t)r, -EPIPE);
    }
    for (int i = 0; i < K; i++) {
        cr_assert_eq(mp_join(&c[i].task), 0);
        cr_assert_eq(atomic_load(&c[i].err), -EPIPE);
    }
    cr_assert_eq(queued(&s), 0);
    mp_runtime_free(rt);
}

/* A grant that came before the close is kept. */
Test(semaphore, granted_before_close_is_kept)
{
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    hand a, b;
    hand_init(&a);
    hand_init(&b);
    int err;
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 1, &a.cx, &err), MP_PENDING);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 1, &b.cx, &err), MP_PENDING);
    mp_semaphore_release(&s, 1);
    mp_semaphore_close(&s);
    cr_assert(woken(&b));
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &a.w, 1, &a.cx, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq(mp_semaphore_acquire_poll(&s, &b.w, 1, &b.cx, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
}

/* Tasks and threads share CAP permits, taking 1 or 2 at a time and holding them across a
 * yield; some tasks are cancelled at random moments (waiting, granted, or holding). The
 * number held never passes CAP and every permit is back at the end. */
#define CAP 3

typedef struct user {
    mp_task task;
    mp_semaphore *s;
    mp_waiter w;
    uint32_t n;
    int left;
    bool holding;
    _Atomic long *held;
    _Atomic int *bad;
} user;

static mp_poll user_poll(mp_task *t, mp_context *cx)
{
    user *u = mp_container_of(t, user, task);
    for (;;) {
        if (u->holding) {
            atomic_fetch_sub(u->held, u->n);
            u->holding = false;
            mp_semaphore_release(u->s, u->n);
            if (--u->left == 0)
                return MP_READY;
        }
        int err;
        if (mp_semaphore_acquire_poll(u->s, &u->w, u->n, cx, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0 || atomic_fetch_add(u->held, u->n) + u->n > CAP)
            atomic_store(u->bad, 1);
        u->holding = true;
        return mp_yield(cx); /* hold it across polls */
    }
}

static void user_cancel(mp_task *t)
{
    user *u = mp_container_of(t, user, task);
    mp_semaphore_cancel_wait(u->s, &u->w);
    if (u->holding) {
        atomic_fetch_sub(u->held, u->n);
        mp_semaphore_release(u->s, u->n);
    }
}

static const mp_task_vtable user_vt = {.poll = user_poll, .cancel = user_cancel};

typedef struct thread_user {
    mp_semaphore *s;
    _Atomic long *held;
    _Atomic int *bad;
    int iters;
} thread_user;

static void *thread_user_main(void *arg)
{
    thread_user *tu = arg;
    for (int i = 0; i < tu->iters; i++) {
        uint32_t n = 1 + (uint32_t)(i & 1);
        if (mp_semaphore_acquire_blocking(tu->s, n) != 0 || atomic_fetch_add(tu->held, n) + n > CAP)
            atomic_store(tu->bad, 1);
        atomic_fetch_sub(tu->held, n);
        mp_semaphore_release(tu->s, n);
    }
    return NULL;
}

Test(semaphore, tasks_and_threads_with_cancels, .timeout = 120)
{
    uint64_t rng = test_seed();
    mp_runtime *rt = test_runtime(4);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, CAP), 0);
    _Atomic long held = 0;
    _Atomic int bad = 0;
    enum { U = 64, T = 2 };
    user *u = calloc(U, sizeof *u);
    for (int i = 0; i < U; i++) {
        mp_task_init(&u[i].task, &user_vt);
        u[i].s = &s;
        mp_waiter_init(&u[i].w);
        u[i].n = 1 + (uint32_t)(test_rand(&rng) % 2);
        u[i].left = 200;
        u[i].held = &held;
        u[i].bad = &bad;
        cr_assert_eq(mp_spawn_joinable(rt, &u[i].task), 0);
    }
    thread_user tu = {.s = &s, .held = &held, .bad = &bad, .iters = 2000};
    pthread_t th[T];
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, thread_user_main, &tu);
    int cancelled = 0;
    for (int i = 0; i < U; i++) {
        if (test_rand(&rng) % 3 == 0) {
            for (uint64_t spin = test_rand(&rng) % 20000; spin; spin--)
                atomic_signal_fence(memory_order_seq_cst);
            mp_task_cancel(&u[i].task);
        }
    }
    for (int i = 0; i < U; i++) {
        int r = mp_join(&u[i].task);
        cancelled += r == -ECANCELED;
        cr_assert(r == 0 || r == -ECANCELED);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&bad), 0, "more than CAP permits held, or an acquire failed");
    cr_assert_eq(atomic_load(&held), 0);
    cr_assert_eq(mp_semaphore_available(&s), CAP, "a permit was lost or made up");
    cr_assert_eq(queued(&s), 0);
    fprintf(stderr, "semaphore: %d of %d tasks cancelled\n", cancelled, U);
    mp_runtime_free(rt);
    free(u);
}
