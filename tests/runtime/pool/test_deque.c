/* Tests for runtime/src/pool/deque.c: the Chase-Lev deque alone, without a pool. The stress
 * tests read MP_TEST_SEED and also run with a 2-slot initial buffer, so growth happens while
 * thieves are stealing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "pool/pool_internal.h"
#include "test_util.h"

static void nop(mp__pool_job *j)
{
    (void)j;
}

Test(deque, owner_is_lifo)
{
    mp__pool_deque d;
    mp__pool_job jobs[8];
    bool was_empty = false;
    cr_assert_eq(mp__pool_deque_init(&d, 8), 0);
    cr_assert(mp__pool_deque_is_empty(&d));
    for (int i = 0; i < 8; i++) {
        jobs[i].execute = nop;
        cr_assert_eq(mp__pool_deque_push_owner(&d, &jobs[i], &was_empty), 0);
        cr_assert_eq(was_empty, i == 0);
    }
    for (int i = 7; i >= 0; i--)
        cr_assert_eq(mp__pool_deque_pop_owner(&d), &jobs[i]);
    cr_assert_null(mp__pool_deque_pop_owner(&d));
    cr_assert_null(mp__pool_deque_pop_owner(&d));
    cr_assert(mp__pool_deque_is_empty(&d));
    mp__pool_deque_destroy(&d);
}

Test(deque, thieves_are_fifo)
{
    mp__pool_deque d;
    mp__pool_job jobs[5], *out = NULL;
    bool was_empty;
    cr_assert_eq(mp__pool_deque_init(&d, 0), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mp__pool_deque_push_owner(&d, &jobs[i], &was_empty), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(mp__pool_deque_steal(&d, &out), MP__POOL_STEAL_SUCCESS);
        cr_assert_eq(out, &jobs[i]);
    }
    cr_assert_eq(mp__pool_deque_pop_owner(&d), &jobs[4]);
    cr_assert_eq(mp__pool_deque_pop_owner(&d), &jobs[3]);
    cr_assert_eq(mp__pool_deque_steal(&d, &out), MP__POOL_STEAL_EMPTY);
    mp__pool_deque_destroy(&d);
}

Test(deque, grows_when_full_and_keeps_order)
{
    enum { N = 10000 };
    static mp__pool_job jobs[N];
    mp__pool_deque d;
    mp__pool_job *out;
    bool was_empty;
    cr_assert_eq(mp__pool_deque_init(&d, 1), 0);
    cr_assert_eq(mp__test_pool_deque_capacity(&d), 2);
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp__pool_deque_push_owner(&d, &jobs[i], &was_empty), 0);
    cr_assert_geq(mp__test_pool_deque_capacity(&d), N);
    /* Steal a few from the top, pop the rest from the bottom: order survives the copies. */
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(mp__pool_deque_steal(&d, &out), MP__POOL_STEAL_SUCCESS);
        cr_assert_eq(out, &jobs[i]);
    }
    for (int i = N - 1; i >= 100; i--)
        cr_assert_eq(mp__pool_deque_pop_owner(&d), &jobs[i]);
    cr_assert_null(mp__pool_deque_pop_owner(&d));
    mp__pool_deque_destroy(&d);
}

Test(deque, rejects_absurd_capacity)
{
    mp__pool_deque d;
    cr_assert_eq(mp__pool_deque_init(&d, (size_t)1 << 50), -EINVAL);
}

/* Concurrent stress: one owner pushes and pops, thieves steal; every job is taken once. */

enum { STRESS_JOBS = 200000, THIEVES = 3 };

struct stress {
    mp__pool_deque d;
    mp__pool_job *jobs;
    _Atomic unsigned *taken;
    _Atomic bool done;
    _Atomic size_t stolen;
};

static void take(struct stress *s, mp__pool_job *j)
{
    atomic_fetch_add_explicit(&s->taken[j - s->jobs], 1, memory_order_relaxed);
}

static void *thief(void *arg)
{
    struct stress *s = arg;
    mp__pool_job *j;
    for (;;) {
        mp__pool_steal r = mp__pool_deque_steal(&s->d, &j);
        if (r == MP__POOL_STEAL_SUCCESS) {
            take(s, j);
            atomic_fetch_add_explicit(&s->stolen, 1, memory_order_relaxed);
        } else if (r == MP__POOL_STEAL_EMPTY &&
                   /* Acquire: pairs with the release store of done in run_stress(); after
                    * it, every push is visible, so empty means drained. */
                   atomic_load_explicit(&s->done, memory_order_acquire)) {
            return NULL;
        }
    }
}

static void run_stress(size_t capacity)
{
    struct stress s;
    pthread_t th[THIEVES];
    const unsigned seed0 = (unsigned)test_seed_or(12345);
    unsigned seed = seed0;
    bool was_empty;
    s.jobs = calloc(STRESS_JOBS, sizeof(*s.jobs));
    s.taken = calloc(STRESS_JOBS, sizeof(*s.taken));
    cr_assert(s.jobs && s.taken);
    atomic_init(&s.done, false);
    atomic_init(&s.stolen, 0);
    cr_assert_eq(mp__pool_deque_init(&s.d, capacity), 0);
    for (int i = 0; i < THIEVES; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, thief, &s), 0);
    for (size_t i = 0; i < STRESS_JOBS; i++) {
        cr_assert_eq(mp__pool_deque_push_owner(&s.d, &s.jobs[i], &was_empty), 0);
        /* Pop now and then, often down to the last job, where pops race steals. */
        seed = seed * 1103515245u + 12345u;
        unsigned pops = (seed >> 16) % 4 == 0 ? (seed >> 20) % 4 : 0;
        for (unsigned k = 0; k < pops; k++) {
            mp__pool_job *j = mp__pool_deque_pop_owner(&s.d);
            if (j == NULL)
                break;
            take(&s, j);
        }
    }
    mp__pool_job *j;
    while ((j = mp__pool_deque_pop_owner(&s.d)) != NULL)
        take(&s, j);
    /* Release: pairs with the acquire load of done in thief(). */
    atomic_store_explicit(&s.done, true, memory_order_release);
    for (int i = 0; i < THIEVES; i++)
        pthread_join(th[i], NULL);
    for (size_t i = 0; i < STRESS_JOBS; i++)
        cr_assert_eq(atomic_load_explicit(&s.taken[i], memory_order_relaxed), 1,
                     "job %zu taken %u times", i,
                     atomic_load_explicit(&s.taken[i], memory_order_relaxed));
    cr_log_info("seed %u: %zu of %d jobs stolen", seed0,
                atomic_load_explicit(&s.stolen, memory_order_relaxed), STRESS_JOBS);
    mp__pool_deque_destroy(&s.d);
    free(s.jobs);
    free((void *)s.taken);
}

Test(deque, stress_every_job_taken_once, .timeout = 60)
{
    run_stress(0);
}

Test(deque, stress_tiny_buffer_grows_under_steals, .timeout = 60)
{
    run_stress(2);
}

/* The last-job race alone: each round pushes one job, then the owner's pop and a thief's
 * steal race for it; exactly one of them gets it. The two threads hand each round over by
 * spinning; a spin that goes on for long yields the CPU, since on a loaded 2-CPU machine the
 * other thread may be waiting for it (pure spinning took over 60 s there under TSan). */

static void spin_pause(unsigned *spins)
{
    if (++*spins % 1024 == 0)
        sched_yield();
}

struct last {
    mp__pool_deque d;
    _Atomic int go;  /* atomic: round the thief may try, -1 to stop */
    _Atomic int ack; /* atomic: last round the thief finished */
    _Atomic int got; /* atomic: 1 if the thief took the job in round `ack` */
};

static void *last_thief(void *arg)
{
    struct last *l = arg;
    int seen = 0;
    unsigned spins = 0;
    for (;;) {
        /* Acquire: pairs with the release store of go in the test body. */
        int r = atomic_load_explicit(&l->go, memory_order_acquire);
        if (r < 0)
            return NULL;
        if (r == seen) {
            spin_pause(&spins);
            continue;
        }
        seen = r;
        mp__pool_job *j = NULL;
        mp__pool_steal res;
        while ((res = mp__pool_deque_steal(&l->d, &j)) == MP__POOL_STEAL_RETRY)
            ;
        atomic_store_explicit(&l->got, res == MP__POOL_STEAL_SUCCESS, memory_order_relaxed);
        /* Release: publishes got; pairs with the acquire load of ack in the test body. */
        atomic_store_explicit(&l->ack, r, memory_order_release);
    }
}

Test(deque, last_job_goes_to_exactly_one, .timeout = 60)
{
#ifdef __SANITIZE_THREAD__
    enum { ROUNDS = 10000 }; /* each round is many times slower under TSan */
#else
    enum { ROUNDS = 50000 };
#endif
    unsigned spins = 0;
    struct last l;
    mp__pool_job job;
    bool was_empty;
    pthread_t th;
    size_t owner_won = 0, thief_won = 0;
    cr_assert_eq(mp__pool_deque_init(&l.d, 2), 0);
    atomic_init(&l.go, 0);
    atomic_init(&l.ack, 0);
    atomic_init(&l.got, 0);
    cr_assert_eq(pthread_create(&th, NULL, last_thief, &l), 0);
    for (int r = 1; r <= ROUNDS; r++) {
        cr_assert_eq(mp__pool_deque_push_owner(&l.d, &job, &was_empty), 0);
        cr_assert(was_empty);
        /* Release: publishes the push; pairs with the acquire load of go in last_thief(). */
        atomic_store_explicit(&l.go, r, memory_order_release);
        for (int spin = 0; spin < (r * 7) % 1024; spin++)
            atomic_signal_fence(memory_order_seq_cst); /* a delay the compiler keeps */
        mp__pool_job *j = mp__pool_deque_pop_owner(&l.d);
        /* Acquire: pairs with the release store of ack in last_thief(). */
        while (atomic_load_explicit(&l.ack, memory_order_acquire) != r)
            spin_pause(&spins);
        int thief = atomic_load_explicit(&l.got, memory_order_relaxed);
        cr_assert_eq((j != NULL) + thief, 1, "round %d: owner %d thief %d", r, j != NULL, thief);
        owner_won += j != NULL;
        thief_won += thief;
    }
    /* Release: pairs with the acquire load of go in last_thief(). */
    atomic_store_explicit(&l.go, -1, memory_order_release);
    pthread_join(th, NULL);
    cr_log_info("owner won %zu, thief won %zu", owner_won, thief_won);
    mp__pool_deque_destroy(&l.d);
}
