/* Tests of runtime/src/sync/group.c: join in finish order, an empty group, cancel_all, a task
 * joining a group, and a group destroyed (and freed) with members running, waiting and
 * completing at that moment. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

enum { WAIT, YIELD, NOW };

typedef struct member {
    mp_group_task gt;
    int id, mode, spins;
    mp_notify *n;
    mp_notify_waiter w;
    _Atomic int *released, *cancelled;
} member;

static mp_poll member_poll(mp_task *t, mp_context *cx)
{
    member *m = mp_container_of(t, member, gt.task);
    switch (m->mode) {
    case WAIT:
        return mp_notify_poll(m->n, &m->w, cx);
    case YIELD:
        if (m->spins-- > 0)
            return mp_yield(cx);
        return MP_READY;
    default:
        return MP_READY;
    }
}

static void member_cancel(mp_task *t)
{
    member *m = mp_container_of(t, member, gt.task);
    if (m->mode == WAIT)
        mp_notify_cancel(m->n, &m->w);
    atomic_fetch_add(m->cancelled, 1);
}

static void member_release(mp_task *t)
{
    member *m = mp_container_of(t, member, gt.task);
    atomic_fetch_add(m->released, 1);
}

static const mp_task_vtable member_vt = {
    .poll = member_poll, .cancel = member_cancel, .release = member_release};

static void member_init(member *m, int id, int mode, mp_notify *n, _Atomic int *released,
                        _Atomic int *cancelled)
{
    memset(m, 0, sizeof *m);
    m->id = id;
    m->mode = mode;
    m->spins = 50;
    m->n = n;
    mp_notify_waiter_init(&m->w);
    m->released = released;
    m->cancelled = cancelled;
    mp_task_init(&m->gt.task, &member_vt);
}

static void wait_for(_Atomic int *v, int want)
{
    while (atomic_load(v) < want)
        sched_yield();
}

Test(group, empty_and_spawn_errors, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_task_group g;
    mp_task_group_init(&g, rt);
    mp_group_task *out = (mp_group_task *)&g;
    int result = 1;
    cr_assert_eq(mp_task_group_join_next(&g, &out, &result), -ENOENT);
    cr_assert_null(out);
    cr_assert_eq(mp_task_group_join_all(&g), 0);
    cr_assert_eq(mp_task_group_len(&g), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    _Atomic int released = 0, cancelled = 0;
    member m;
    member_init(&m, 0, NOW, NULL, &released, &cancelled);
    cr_assert_eq(mp_task_group_spawn(&g, &m.gt), -ESHUTDOWN);
    cr_assert_eq(mp_task_group_len(&g), 0, "a refused spawn is not a member");
    mp_task_group_destroy(&g);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&released), 0, "a refused task stays the caller's");
}

/* Members finish in the order the test lets them; join_next returns them in that order. */
Test(group, join_next_in_finish_order, .timeout = 30)
{
    mp_runtime *rt = test_runtime(3);
    enum { K = 8 };
    mp_notify n[K];
    member m[K];
    _Atomic int released = 0, cancelled = 0;
    mp_task_group g;
    mp_task_group_init(&g, rt);
    for (int i = 0; i < K; i++) {
        mp_notify_init(&n[i]);
        member_init(&m[i], i, WAIT, &n[i], &released, &cancelled);
        cr_assert_eq(mp_task_group_spawn(&g, &m[i].gt), 0);
    }
    cr_assert_eq(mp_task_group_len(&g), K);
    for (int k = 0; k < K; k++) {
        int i = (k * 5 + 3) % K; /* a permutation */
        mp_notify_one(&n[i]);
        mp_group_task *out;
        int result;
        cr_assert_eq(mp_task_group_join_next(&g, &out, &result), 0);
        cr_assert_eq(result, 0);
        cr_assert_eq(mp_container_of(out, member, gt)->id, i);
        cr_assert_eq(mp_task_group_len(&g), (size_t)(K - k - 1));
    }
    mp_group_task *out;
    int result;
    cr_assert_eq(mp_task_group_join_next(&g, &out, &result), -ENOENT);
    mp_task_group_destroy(&g);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&released), K);
    cr_assert_eq(atomic_load(&cancelled), 0);
}

Test(group, cancel_all_then_join_all, .timeout = 30)
{
    mp_runtime *rt = test_runtime(3);
    enum { K = 16 };
    mp_notify n;
    mp_notify_init(&n);
    member m[K];
    _Atomic int released = 0, cancelled = 0;
    mp_task_group g;
    mp_task_group_init(&g, rt);
    for (int i = 0; i < K; i++) {
        member_init(&m[i], i, i % 4 == 0 ? NOW : WAIT, &n, &released, &cancelled);
        cr_assert_eq(mp_task_group_spawn(&g, &m[i].gt), 0);
    }
    /* Let the NOW ones finish, so that both results show. */
    while (mp_task_group_len(&g) == K) {
        mp__spin_lock(&g.lock);
        bool some_done = g.done_head != NULL;
        mp__spin_unlock(&g.lock);
        if (some_done)
            break;
        sched_yield();
    }
    mp_task_group_cancel_all(&g);
    size_t c = mp_task_group_join_all(&g);
    cr_assert_eq((int)c, atomic_load(&cancelled));
    cr_assert_geq(c, (size_t)(K - K / 4), "every waiting member was cancelled");
    cr_assert_eq(mp_task_group_len(&g), 0);
    mp_task_group_destroy(&g);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&released), K);
    cr_assert_null(n.head, "cancelled members gave their notify nodes back");
}

/* A task owns the group: spawns members from its poll, joins them with join_next_poll. */
typedef struct owner {
    mp_task task;
    mp_task_group g;
    member m[32];
    int spawned, joined, sum;
    _Atomic int released, cancelled;
} owner;

static mp_poll owner_poll(mp_task *t, mp_context *cx)
{
    owner *o = mp_container_of(t, owner, task);
    while (o->spawned < 32) {
        member *m = &o->m[o->spawned];
        member_init(m, o->spawned, o->spawned % 2 ? YIELD : NOW, NULL, &o->released, &o->cancelled);
        cr_assert_eq(mp_task_group_spawn(&o->g, &m->gt), 0);
        o->spawned++;
    }
    for (;;) {
        mp_group_task *out;
        int result;
        if (mp_task_group_join_next_poll(&o->g, cx, &out, &result) == MP_PENDING)
            return MP_PENDING;
        if (!out)
            return MP_READY;
        cr_assert_eq(result, 0);
        o->sum += mp_container_of(out, member, gt)->id;
        o->joined++;
    }
}

static void owner_cancel(mp_task *t)
{
    owner *o = mp_container_of(t, owner, task);
    mp_task_group_cancel_wait(&o->g);
}

static const mp_task_vtable owner_vt = {.poll = owner_poll, .cancel = owner_cancel};

Test(group, joined_from_a_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(4);
    owner *o = calloc(1, sizeof *o);
    mp_task_group_init(&o->g, rt);
    mp_task_init(&o->task, &owner_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &o->task), 0);
    cr_assert_eq(mp_join(&o->task), 0);
    cr_assert_eq(o->joined, 32);
    cr_assert_eq(o->sum, 31 * 32 / 2);
    mp_task_group_destroy(&o->g);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&o->released), 32);
    free(o);
}

/* Destroyed with members waiting, yielding and completing at that very moment; the group's
 * memory is freed at once (ASan sees a member touching it). Every member is cancelled or
 * completes, and every one is released. */
Test(group, destroyed_with_members_running, .timeout = 60)
{
    uint64_t rng = test_seed();
    mp_runtime *rt = test_runtime(4);
    enum { K = 24 };
    mp_notify n;
    mp_notify_init(&n);
    _Atomic int released = 0, cancelled = 0;
    member *m = calloc(K, sizeof *m);
    for (int round = 0; round < 100; round++) {
        atomic_store(&released, 0);
        atomic_store(&cancelled, 0);
        mp_task_group *g = malloc(sizeof *g);
        mp_task_group_init(g, rt);
        for (int i = 0; i < K; i++) {
            member_init(&m[i], i, (int)(test_rand(&rng) % 3), &n, &released, &cancelled);
            m[i].spins = (int)(test_rand(&rng) % 100);
            cr_assert_eq(mp_task_group_spawn(g, &m[i].gt), 0);
        }
        for (uint64_t spin = test_rand(&rng) % 5000; spin; spin--)
            atomic_signal_fence(memory_order_seq_cst);
        mp_task_group_destroy(g);
        free(g);
        wait_for(&released, K); /* members live until released: m is reused next round */
        cr_assert_leq(atomic_load(&cancelled), K);
        cr_assert_null(n.head);
    }
    mp_runtime_free(rt);
    free(m);
}

/* The task joining a group is cancelled while it waits: its cancel callback gives the group's
 * joiner waker back, so the owner is released; the group is then destroyed by the test. */
typedef struct waiting_owner {
    mp_task task;
    mp_task_group *g;
    _Atomic int waiting, released;
} waiting_owner;

static mp_poll waiting_owner_poll(mp_task *t, mp_context *cx)
{
    waiting_owner *o = mp_container_of(t, waiting_owner, task);
    mp_group_task *out;
    int result;
    mp_poll p = mp_task_group_join_next_poll(o->g, cx, &out, &result);
    atomic_store(&o->waiting, p == MP_PENDING);
    return p;
}

static void waiting_owner_cancel(mp_task *t)
{
    mp_task_group_cancel_wait(mp_container_of(t, waiting_owner, task)->g);
}

static void waiting_owner_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, waiting_owner, task)->released, 1);
}

static const mp_task_vtable waiting_owner_vt = {
    .poll = waiting_owner_poll, .cancel = waiting_owner_cancel, .release = waiting_owner_release};

Test(group, joiner_cancelled_while_waiting, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_notify n;
    mp_notify_init(&n);
    _Atomic int released = 0, cancelled = 0;
    member m;
    member_init(&m, 0, WAIT, &n, &released, &cancelled);
    mp_task_group g;
    mp_task_group_init(&g, rt);
    cr_assert_eq(mp_task_group_spawn(&g, &m.gt), 0);
    waiting_owner o = {.g = &g};
    mp_task_init(&o.task, &waiting_owner_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &o.task), 0);
    wait_for(&o.waiting, 1);
    mp_task_cancel(&o.task);
    cr_assert_eq(mp_join(&o.task), -ECANCELED);
    wait_for(&o.released, 1); /* the group did not keep its waker */
    mp__spin_lock(&g.lock);
    cr_assert(mp_waker_is_empty(&g.joiner));
    mp__spin_unlock(&g.lock);
    mp_task_group_destroy(&g);
    wait_for(&released, 1);
    cr_assert_eq(atomic_load(&cancelled), 1);
    mp_runtime_free(rt);
}
