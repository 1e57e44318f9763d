/* Tests of runtime/src/sync/select.c: the first ready arm wins, earlier arms win ties, the
 * losers are cancelled by the caller, and a task waiting on two primitives is woken by either. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

typedef struct sel {
    mp_task task;
    mp_cancel_token *tok;
    mp_mpmc *q;
    mp_waiter tw, qw;
    void *value;
    int err;
    size_t which;
} sel;

static mp_poll arm_token(void *arg, mp_context *cx)
{
    sel *s = arg;
    return mp_cancel_token_poll(s->tok, &s->tw, cx);
}

static mp_poll arm_recv(void *arg, mp_context *cx)
{
    sel *s = arg;
    return mp_mpmc_recv_poll(s->q, &s->qw, cx, &s->value, &s->err);
}

static mp_poll sel_poll(mp_task *t, mp_context *cx)
{
    sel *s = mp_container_of(t, sel, task);
    const mp_select_arm arms[] = {{arm_token, s}, {arm_recv, s}};
    if (mp_select_poll(arms, 2, cx, &s->which) == MP_PENDING)
        return MP_PENDING;
    if (s->which == 0)
        mp_mpmc_cancel_recv(s->q, &s->qw);
    else
        mp_cancel_token_cancel_wait(s->tok, &s->tw);
    return MP_READY;
}

static void sel_cancel(mp_task *t)
{
    sel *s = mp_container_of(t, sel, task);
    mp_mpmc_cancel_recv(s->q, &s->qw);
    mp_cancel_token_cancel_wait(s->tok, &s->tw);
}

static const mp_task_vtable sel_vt = {.poll = sel_poll, .cancel = sel_cancel};

static unsigned queued(mp_mpmc *q)
{
    mp__spin_lock(&q->lock);
    unsigned k = q->rx_head != NULL;
    mp__spin_unlock(&q->lock);
    return k;
}

Test(select, either_arm_wakes_the_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_mpmc q;
    cr_assert_eq(mp_mpmc_init(&q, 4), 0);
    for (int round = 0; round < 2; round++) {
        mp_cancel_token tok;
        mp_cancel_token_init(&tok);
        sel s = {.tok = &tok, .q = &q, .which = 9};
        mp_waiter_init(&s.tw);
        mp_waiter_init(&s.qw);
        mp_task_init(&s.task, &sel_vt);
        cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
        while (!queued(&q))
            sched_yield();
        if (round == 0)
            cr_assert_eq(mp_mpmc_try_send(&q, (void *)42), 0);
        else
            mp_cancel_token_cancel(&tok);
        cr_assert_eq(mp_join(&s.task), 0);
        cr_assert_eq(s.which, round == 0 ? 1u : 0u);
        if (round == 0) {
            cr_assert_eq(s.err, 0);
            cr_assert_eq((uintptr_t)s.value, 42);
        }
        cr_assert_null(q.rx_head, "the losing arm was cancelled");
        cr_assert_eq(mp_cancel_token_destroy(&tok), 0, "the losing arm was cancelled");
    }
    mp_mpmc_destroy(&q);
    mp_runtime_free(rt);
}

static mp_poll always(void *arg, mp_context *cx)
{
    (void)cx;
    ++*(int *)arg;
    return MP_READY;
}

static mp_poll never(void *arg, mp_context *cx)
{
    (void)cx;
    ++*(int *)arg;
    return MP_PENDING;
}

Test(select, biased_to_the_first_ready_arm)
{
    int a = 0, b = 0, c = 0;
    const mp_select_arm arms[] = {{never, &a}, {always, &b}, {always, &c}};
    mp_context cx = {0};
    size_t which = 9;
    cr_assert_eq(mp_select_poll(arms, 3, &cx, &which), MP_READY);
    cr_assert_eq(which, 1);
    cr_assert_eq(a, 1);
    cr_assert_eq(b, 1);
    cr_assert_eq(c, 0, "arms after the winner are not polled");
    cr_assert_eq(mp_select_poll(arms, 1, &cx, &which), MP_PENDING);
    cr_assert_eq(mp_select_poll(arms, 0, &cx, &which), MP_PENDING);
}
