/* Tests of runtime/src/sync/barrier.c: rounds, one leader per round, a party that gives up
 * before the round completes, tasks and threads meeting over many rounds. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(barrier, errors_and_a_cancelled_party)
{
    mp_barrier b;
    cr_assert_eq(mp_barrier_init(&b, 0), -EINVAL);
    cr_assert_eq(mp_barrier_init(&b, 2), 0);
    hand a, c;
    hand_init(&a);
    hand_init(&c);
    bool leader;
    cr_assert_eq(mp_barrier_wait_poll(&b, &a.w, &a.cx, &leader), MP_PENDING);
    mp_barrier_cancel_wait(&b, &a.w); /* a leaves: no longer counted */
    cr_assert_eq(mp_barrier_wait_poll(&b, &c.w, &c.cx, &leader), MP_PENDING,
                 "one party is not two");
    cr_assert_eq(mp_barrier_wait_poll(&b, &a.w, &a.cx, &leader), MP_READY);
    cr_assert(leader);
    cr_assert_eq(atomic_load(&c.tw.word), 1);
    cr_assert_eq(mp_barrier_wait_poll(&b, &c.w, &c.cx, &leader), MP_READY);
    cr_assert_not(leader);
    mp_barrier_cancel_wait(&b, &c.w); /* idle: nothing */
    cr_assert_eq(b.arrived, 0);
}

#define ROUNDS  200
#define TASKS   6
#define THREADS 2

typedef struct shared {
    mp_barrier b;
    _Atomic int phase[ROUNDS];
    _Atomic int leaders[ROUNDS];
    _Atomic int bad;
} shared;

typedef struct party {
    mp_task task;
    shared *sh;
    mp_waiter w;
    int round;
    bool waiting;
} party;

static mp_poll party_poll(mp_task *t, mp_context *cx)
{
    party *p = mp_container_of(t, party, task);
    while (p->round < ROUNDS) {
        if (!p->waiting) {
            atomic_fetch_add(&p->sh->phase[p->round], 1);
            p->waiting = true;
        }
        bool leader;
        if (mp_barrier_wait_poll(&p->sh->b, &p->w, cx, &leader) == MP_PENDING)
            return MP_PENDING;
        p->waiting = false;
        /* Everyone arrived before anyone left. */
        if (atomic_load(&p->sh->phase[p->round]) != TASKS + THREADS)
            atomic_store(&p->sh->bad, 1);
        atomic_fetch_add(&p->sh->leaders[p->round], leader);
        p->round++;
    }
    return MP_READY;
}

static const mp_task_vtable party_vt = {.poll = party_poll};

static void *thread_party(void *arg)
{
    shared *sh = arg;
    for (int r = 0; r < ROUNDS; r++) {
        atomic_fetch_add(&sh->phase[r], 1);
        bool leader = mp_barrier_wait_blocking(&sh->b);
        if (atomic_load(&sh->phase[r]) != TASKS + THREADS)
            atomic_store(&sh->bad, 1);
        atomic_fetch_add(&sh->leaders[r], leader);
    }
    return NULL;
}

Test(barrier, tasks_and_threads_many_rounds, .timeout = 120)
{
    mp_runtime *rt = test_runtime(3);
    shared *sh = calloc(1, sizeof *sh);
    cr_assert_eq(mp_barrier_init(&sh->b, TASKS + THREADS), 0);
    party p[TASKS];
    for (int i = 0; i < TASKS; i++) {
        p[i] = (party){.sh = sh};
        mp_waiter_init(&p[i].w);
        mp_task_init(&p[i].task, &party_vt);
        cr_assert_eq(mp_spawn_joinable(rt, &p[i].task), 0);
    }
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, thread_party, sh);
    for (int i = 0; i < TASKS; i++)
        cr_assert_eq(mp_join(&p[i].task), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&sh->bad), 0, "a party left before everyone arrived");
    for (int r = 0; r < ROUNDS; r++)
        cr_assert_eq(atomic_load(&sh->leaders[r]), 1, "round %d had %d leaders", r,
                     atomic_load(&sh->leaders[r]));
    cr_assert_eq(sh->b.arrived, 0);
    cr_assert_null(sh->b.head);
    mp_runtime_free(rt);
    free(sh);
}
