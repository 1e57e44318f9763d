/* Tests for runtime/src/pool/inject_stack.c: the Treiber stack of injected jobs. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "pool/pool_internal.h"
#include "test_util.h"

Test(inject_stack, push_then_take_all_newest_first)
{
    mp__pool_inject q;
    mp__pool_job jobs[3];
    mp__pool_inject_init(&q);
    cr_assert(mp__pool_inject_is_empty(&q));
    cr_assert_null(mp__pool_inject_take_all(&q));
    cr_assert(mp__pool_inject_push(&q, &jobs[0]), "first push sees an empty stack");
    cr_assert_not(mp__pool_inject_push(&q, &jobs[1]));
    cr_assert_not(mp__pool_inject_push(&q, &jobs[2]));
    cr_assert_not(mp__pool_inject_is_empty(&q));
    mp__pool_job *l = mp__pool_inject_take_all(&q);
    cr_assert_eq(l, &jobs[2]);
    cr_assert_eq(l->next, &jobs[1]);
    cr_assert_eq(l->next->next, &jobs[0]);
    cr_assert_null(l->next->next->next);
    cr_assert(mp__pool_inject_is_empty(&q));
}

enum { PUSHERS = 4, PER_PUSHER = 50000 };

struct shared {
    mp__pool_inject q;
    mp__pool_job *jobs;
    _Atomic int pushers_left;
};

static void *pusher(void *v)
{
    struct shared *s = v;
    static _Atomic int next_id;
    int id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed) % PUSHERS;
    for (int i = 0; i < PER_PUSHER; i++)
        mp__pool_inject_push(&s->q, &s->jobs[id * PER_PUSHER + i]);
    /* Release: our pushes happen before the taker's final drain; pairs with its acquire. */
    atomic_fetch_sub_explicit(&s->pushers_left, 1, memory_order_release);
    return NULL;
}

Test(inject_stack, concurrent_pushers_every_job_taken_once, .timeout = 60)
{
    struct shared s;
    pthread_t th[PUSHERS];
    unsigned char *seen = calloc(PUSHERS * PER_PUSHER, 1);
    s.jobs = calloc(PUSHERS * PER_PUSHER, sizeof(*s.jobs));
    cr_assert(seen && s.jobs);
    mp__pool_inject_init(&s.q);
    atomic_init(&s.pushers_left, PUSHERS);
    for (int i = 0; i < PUSHERS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, pusher, &s), 0);
    size_t taken = 0;
    for (;;) {
        /* Acquire: pairs with the pushers' release decrement. */
        bool last = atomic_load_explicit(&s.pushers_left, memory_order_acquire) == 0;
        for (mp__pool_job *j = mp__pool_inject_take_all(&s.q); j != NULL; j = j->next) {
            size_t id = (size_t)(j - s.jobs);
            cr_assert_lt(id, (size_t)PUSHERS * PER_PUSHER);
            cr_assert_eq(seen[id], 0, "job %zu taken twice", id);
            seen[id] = 1;
            taken++;
        }
        if (last)
            break;
    }
    for (int i = 0; i < PUSHERS; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(taken, (size_t)PUSHERS * PER_PUSHER);
    free(seen);
    free(s.jobs);
}
