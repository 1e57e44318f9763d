/* Tests of runtime/src/sync/cancel_token.c: the flag, waiters woken, children cancelled with
 * their parent (born cancelled when late), destroy's errors, tasks and threads waiting. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(cancel_token, tree)
{
    mp_cancel_token root, a, b, a1;
    mp_cancel_token_init(&root);
    mp_cancel_token_init_child(&a, &root);
    mp_cancel_token_init_child(&b, &root);
    mp_cancel_token_init_child(&a1, &a);
    hand h;
    hand_init(&h);
    cr_assert_eq(mp_cancel_token_poll(&a1, &h.w, &h.cx), MP_PENDING);
    cr_assert_eq(mp_cancel_token_destroy(&a1), -EBUSY, "a waiter is queued");
    cr_assert_eq(mp_cancel_token_destroy(&a), -EBUSY, "a child is linked");
    mp_cancel_token_cancel(&b); /* a child alone: parent and siblings untouched */
    cr_assert(mp_cancel_token_is_cancelled(&b));
    cr_assert_not(mp_cancel_token_is_cancelled(&root));
    cr_assert_not(mp_cancel_token_is_cancelled(&a1));
    cr_assert_not(woken(&h));
    mp_cancel_token_cancel(&root);
    cr_assert(mp_cancel_token_is_cancelled(&a));
    cr_assert(mp_cancel_token_is_cancelled(&a1), "grandchild cancelled with the root");
    cr_assert(woken(&h));
    cr_assert_eq(mp_cancel_token_poll(&a1, &h.w, &h.cx), MP_READY);
    mp_cancel_token_cancel(&root); /* idempotent */
    mp_cancel_token late;
    mp_cancel_token_init_child(&late, &a);
    cr_assert(mp_cancel_token_is_cancelled(&late), "born cancelled");
    cr_assert_eq(mp_cancel_token_destroy(&late), 0);
    cr_assert_eq(mp_cancel_token_destroy(&a1), 0);
    cr_assert_eq(mp_cancel_token_destroy(&a), 0);
    cr_assert_eq(mp_cancel_token_destroy(&b), 0);
    cr_assert_eq(mp_cancel_token_destroy(&root), 0);
}

Test(cancel_token, cancelled_wait_leaves_nothing)
{
    mp_cancel_token t;
    mp_cancel_token_init(&t);
    hand h;
    hand_init(&h);
    cr_assert_eq(mp_cancel_token_poll(&t, &h.w, &h.cx), MP_PENDING);
    cr_assert_eq(mp_cancel_token_poll(&t, &h.w, &h.cx), MP_PENDING, "polled again: still one");
    mp_cancel_token_cancel_wait(&t, &h.w);
    cr_assert_null(t.head);
    mp_cancel_token_cancel(&t);
    cr_assert_not(woken(&h), "a cancelled wait is not woken");
    cr_assert_eq(mp_cancel_token_destroy(&t), 0);
}

typedef struct waiter_task {
    mp_task task;
    mp_cancel_token *t;
    mp_waiter w;
    _Atomic int *done;
} waiter_task;

static mp_poll waiter_poll(mp_task *task, mp_context *cx)
{
    waiter_task *wt = mp_container_of(task, waiter_task, task);
    if (mp_cancel_token_poll(wt->t, &wt->w, cx) == MP_PENDING)
        return MP_PENDING;
    atomic_fetch_add(wt->done, 1);
    return MP_READY;
}

static const mp_task_vtable waiter_vt = {.poll = waiter_poll};

static void *blocked_wait(void *arg)
{
    mp_cancel_token_wait_blocking(arg);
    return NULL;
}

static void *canceller(void *arg)
{
    mp_cancel_token_cancel(arg);
    return NULL;
}

/* Tasks and threads wait on children and grandchildren created while another thread
 * cancels the root: every one of them ends. */
Test(cancel_token, tasks_and_threads_on_a_tree_cancelled_meanwhile, .timeout = 60)
{
    mp_runtime *rt = test_runtime(3);
    for (int round = 0; round < 50; round++) {
        enum { K = 8 };
        mp_cancel_token root, mid[K], leaf[K];
        mp_cancel_token_init(&root);
        _Atomic int done = 0;
        waiter_task wt[K];
        pthread_t th[K], c;
        for (int i = 0; i < K; i++) {
            if (i == K / 2)
                pthread_create(&c, NULL, canceller, &root);
            mp_cancel_token_init_child(&mid[i], &root);
            mp_cancel_token_init_child(&leaf[i], &mid[i]);
            wt[i] = (waiter_task){.t = &leaf[i], .done = &done};
            mp_waiter_init(&wt[i].w);
            mp_task_init(&wt[i].task, &waiter_vt);
            cr_assert_eq(mp_spawn_joinable(rt, &wt[i].task), 0);
            pthread_create(&th[i], NULL, blocked_wait, &mid[i]);
        }
        pthread_join(c, NULL);
        for (int i = 0; i < K; i++) {
            cr_assert_eq(mp_join(&wt[i].task), 0);
            pthread_join(th[i], NULL);
        }
        cr_assert_eq(atomic_load(&done), K);
        for (int i = 0; i < K; i++) {
            cr_assert_eq(mp_cancel_token_destroy(&leaf[i]), 0);
            cr_assert_eq(mp_cancel_token_destroy(&mid[i]), 0);
        }
        cr_assert_eq(mp_cancel_token_destroy(&root), 0);
    }
    mp_runtime_free(rt);
}

/* A task waiting on a token is cancelled: its cancel callback takes the node off the token,
 * the task is released, and the token can be destroyed. */
typedef struct cancellable {
    mp_task task;
    mp_cancel_token *t;
    mp_waiter w;
    _Atomic int waiting, released;
} cancellable;

static mp_poll cancellable_poll(mp_task *task, mp_context *cx)
{
    cancellable *c = mp_container_of(task, cancellable, task);
    mp_poll p = mp_cancel_token_poll(c->t, &c->w, cx);
    atomic_store(&c->waiting, p == MP_PENDING);
    return p;
}

static void cancellable_cancel(mp_task *task)
{
    cancellable *c = mp_container_of(task, cancellable, task);
    mp_cancel_token_cancel_wait(c->t, &c->w);
}

static void cancellable_release(mp_task *task)
{
    atomic_store(&mp_container_of(task, cancellable, task)->released, 1);
}

static const mp_task_vtable cancellable_vt = {
    .poll = cancellable_poll, .cancel = cancellable_cancel, .release = cancellable_release};

Test(cancel_token, waiting_task_cancelled, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_cancel_token t;
    mp_cancel_token_init(&t);
    cancellable c = {.t = &t};
    mp_waiter_init(&c.w);
    mp_task_init(&c.task, &cancellable_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &c.task), 0);
    while (!atomic_load(&c.waiting))
        sched_yield();
    mp_task_cancel(&c.task);
    cr_assert_eq(mp_join(&c.task), -ECANCELED);
    while (!atomic_load(&c.released))
        sched_yield();
    cr_assert_null(t.head);
    cr_assert_eq(mp_cancel_token_destroy(&t), 0);
    mp_runtime_free(rt);
}
