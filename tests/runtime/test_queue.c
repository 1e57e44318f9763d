/* Tests of runtime/src/queue.c: the per-worker ring. Built twice, with the ring at 256 and at
 * 4 slots (test_queue-q4), so every edge is hit at both sizes. The ring is driven directly:
 * tasks are bare headers that are never run. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "internal.h"
#include "test_util.h"

#define CAP ((uint32_t)MP_QUEUE_CAPACITY)

static mp__queue *new_queue(void)
{
    mp__queue *q = aligned_alloc(MP__CACHE_LINE, sizeof *q);
    cr_assert(q);
    mp__queue_init(q);
    return q;
}

static mp__inject *new_inject(void)
{
    mp__inject *inj = aligned_alloc(MP__CACHE_LINE, sizeof *inj);
    cr_assert(inj);
    cr_assert_eq(mp__inject_init(inj), 0);
    return inj;
}

static void free_inject(mp__inject *inj)
{
    mp__inject_destroy(inj);
    free(inj);
}

/* Push into a queue whose global queue is open: nothing comes back. true: it overflowed. */
static bool push(mp__queue *q, mp_task *t, mp__inject *inj)
{
    bool overflowed;
    cr_assert_null(mp__queue_push_owner(q, t, inj, &overflowed));
    return overflowed;
}

/* Start both indices at base, to test wrap-around past UINT32_MAX. */
static void set_indices(mp__queue *q, uint32_t base)
{
    atomic_store(&q->head, ((uint64_t)base << 32) | base);
    atomic_store(&q->tail, base);
}

Test(queue, push_pop_fifo)
{
    mp__queue *q = new_queue();
    mp__inject *inj = new_inject();
    mp_task t[CAP];
    for (uint32_t i = 0; i < CAP; i++)
        cr_assert_not(push(q, &t[i], inj));
    cr_assert_eq(mp__queue_len(q), CAP);
    for (uint32_t i = 0; i < CAP; i++)
        cr_assert_eq(mp__queue_pop_owner(q), &t[i]);
    cr_assert_null(mp__queue_pop_owner(q));
    cr_assert(mp__queue_is_empty(q));
    cr_assert_eq(mp__inject_len(inj), 0);
    free_inject(inj);
    free(q);
}

Test(queue, overflow_moves_half_plus_one_in_order)
{
    mp__queue *q = new_queue();
    mp__inject *inj = new_inject();
    mp_task t[CAP + 1];
    for (uint32_t i = 0; i < CAP; i++)
        cr_assert_not(push(q, &t[i], inj));
    /* The ring is full: the next push moves the oldest half plus the new task. */
    cr_assert(push(q, &t[CAP], inj));
    cr_assert_eq(mp__inject_len(inj), CAP / 2 + 1);
    cr_assert_eq(mp__queue_len(q), CAP / 2);
    for (uint32_t i = 0; i < CAP / 2; i++)
        cr_assert_eq(mp__inject_pop(inj), &t[i]);
    cr_assert_eq(mp__inject_pop(inj), &t[CAP]);
    for (uint32_t i = CAP / 2; i < CAP; i++)
        cr_assert_eq(mp__queue_pop_owner(q), &t[i]);
    cr_assert_null(mp__queue_pop_owner(q));
    free_inject(inj);
    free(q);
}

Test(queue, steal_takes_half_rounded_up)
{
    mp__queue *src = new_queue(), *dst = new_queue();
    mp__inject *inj = new_inject();
    mp_task t[CAP];
    for (uint32_t n = 1; n <= CAP; n++) {
        for (uint32_t i = 0; i < n; i++)
            push(src, &t[i], inj);
        uint32_t got;
        mp_task *first = mp__queue_steal_into(src, dst, &got);
        uint32_t want = n - n / 2;
        cr_assert_eq(got, want, "n=%u: stole %u, want %u", n, got, want);
        /* The thief runs the newest of its loot and queues the rest, oldest first. */
        cr_assert_eq(first, &t[want - 1]);
        for (uint32_t i = 0; i + 1 < want; i++)
            cr_assert_eq(mp__queue_pop_owner(dst), &t[i]);
        cr_assert_null(mp__queue_pop_owner(dst));
        for (uint32_t i = want; i < n; i++)
            cr_assert_eq(mp__queue_pop_owner(src), &t[i]);
        cr_assert_null(mp__queue_pop_owner(src));
    }
    uint32_t got;
    cr_assert_null(mp__queue_steal_into(src, dst, &got));
    cr_assert_eq(got, 0);
    free_inject(inj);
    free(src);
    free(dst);
}

Test(queue, steal_refused_when_thief_ring_more_than_half_full)
{
    mp__queue *src = new_queue(), *dst = new_queue();
    mp__inject *inj = new_inject();
    mp_task a[CAP], b[CAP];
    for (uint32_t i = 0; i < CAP; i++)
        push(src, &a[i], inj);
    for (uint32_t i = 0; i <= CAP / 2; i++)
        push(dst, &b[i], inj);
    uint32_t got;
    cr_assert_null(mp__queue_steal_into(src, dst, &got));
    cr_assert_eq(mp__queue_len(src), CAP);
    free_inject(inj);
    free(src);
    free(dst);
}

Test(queue, steal_in_progress_blocks_other_thieves_and_overflow)
{
    mp__queue *q = new_queue();
    mp__inject *inj = new_inject();
    mp_task t[CAP + 1];
    for (uint32_t i = 0; i < CAP; i++)
        push(q, &t[i], inj);
    /* Simulate a thief between claim and release: real moved on, steal did not. */
    atomic_store(&q->head, ((uint64_t)0 << 32) | 2);
    mp__queue *thief = new_queue();
    uint32_t got;
    cr_assert_null(mp__queue_steal_into(q, thief, &got), "second thief must back off");
    /* The ring is full counting the claimed slots: the owner may not move the half being
     * copied, so the new task alone goes to the global queue. */
    cr_assert(push(q, &t[CAP], inj));
    cr_assert_eq(mp__inject_len(inj), 1);
    cr_assert_eq(mp__inject_pop(inj), &t[CAP]);
    /* Owner pops keep working during the steal; steal stays put. */
    cr_assert_eq(mp__queue_pop_owner(q), &t[2]);
    cr_assert_eq((uint32_t)(atomic_load(&q->head) >> 32), 0);
    free_inject(inj);
    free(q);
    free(thief);
}

Test(queue, indices_wrap_past_uint32_max)
{
    mp__queue *src = new_queue(), *dst = new_queue();
    mp__inject *inj = new_inject();
    mp_task t[3 * CAP];
    uint32_t base = UINT32_MAX - CAP / 2;
    set_indices(src, base);
    set_indices(dst, base - 1);
    uint32_t next_in = 0, next_out = 0;
    /* Cycle many rounds through the wrap: push, pop, overflow and steal all cross it. */
    for (int round = 0; round < 8; round++) {
        for (uint32_t i = 0; i < CAP; i++)
            cr_assert_not(push(src, &t[next_in++ % (3 * CAP)], inj));
        cr_assert_eq(mp__queue_len(src), CAP);
        uint32_t got;
        mp_task *first = mp__queue_steal_into(src, dst, &got);
        cr_assert_eq(got, CAP / 2);
        cr_assert_eq(first, &t[(next_out + CAP / 2 - 1) % (3 * CAP)]);
        for (uint32_t i = 0; i + 1 < got; i++)
            cr_assert_eq(mp__queue_pop_owner(dst), &t[next_out++ % (3 * CAP)]);
        next_out++; /* first */
        for (uint32_t i = 0; i < CAP / 2; i++)
            cr_assert_eq(mp__queue_pop_owner(src), &t[next_out++ % (3 * CAP)]);
        cr_assert_null(mp__queue_pop_owner(src));
    }
    /* And an overflow across the wrap. */
    for (uint32_t i = 0; i < CAP; i++)
        push(src, &t[i], inj);
    cr_assert(push(src, &t[CAP], inj));
    cr_assert_eq(mp__queue_len(src), CAP / 2);
    cr_assert_eq(mp__inject_pop(inj), &t[0]);
    free_inject(inj);
    free(src);
    free(dst);
}

/* One owner pushing and popping, thieves stealing and running what they get: every task is
 * taken exactly once. */
#define STRESS_TASKS 200000

typedef struct stress {
    mp__queue *q;
    mp__inject *inj;
    mp_task *tasks;
    _Atomic uint8_t *seen;
    _Atomic bool done;
    _Atomic uint64_t taken;
} stress;

static void take(stress *s, mp_task *t)
{
    size_t i = (size_t)(t - s->tasks);
    cr_assert_lt(i, STRESS_TASKS);
    cr_assert_eq(atomic_fetch_add(&s->seen[i], 1), 0, "task %zu taken twice", i);
    atomic_fetch_add(&s->taken, 1);
}

static void *thief_main(void *arg)
{
    stress *s = arg;
    mp__queue *mine = new_queue();
    while (!atomic_load(&s->done) || !mp__queue_is_empty(s->q)) {
        uint32_t got;
        mp_task *t = mp__queue_steal_into(s->q, mine, &got);
        if (t) {
            take(s, t);
            while ((t = mp__queue_pop_owner(mine)))
                take(s, t);
        } else {
            sched_yield();
        }
    }
    free(mine);
    return NULL;
}

Test(queue, concurrent_steals_take_each_task_once, .timeout = 60)
{
    stress s = {.q = new_queue(), .inj = new_inject()};
    s.tasks = calloc(STRESS_TASKS, sizeof *s.tasks);
    s.seen = calloc(STRESS_TASKS, sizeof *s.seen);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, thief_main, &s);
    uint64_t rng = test_seed();
    for (size_t i = 0; i < STRESS_TASKS; i++) {
        push(s.q, &s.tasks[i], s.inj);
        if (test_rand(&rng) % 3 == 0) {
            mp_task *t = mp__queue_pop_owner(s.q);
            if (t)
                take(&s, t);
        }
    }
    atomic_store(&s.done, true);
    for (mp_task *t; (t = mp__queue_pop_owner(s.q));)
        take(&s, t);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (mp_task *t; (t = mp__inject_pop(s.inj));)
        take(&s, t);
    cr_assert_eq(atomic_load(&s.taken), STRESS_TASKS);
    free(s.tasks);
    free((void *)s.seen);
    free_inject(s.inj);
    free(s.q);
}

/* At shutdown the global queue is closed: an overflow hands the moved half and the pushed
 * task back to the caller, who must cancel them (the registry does not know a task that
 * never suspended); nothing is lost, nothing is left in the ring twice. */
Test(queue, overflow_into_closed_global_queue_returns_the_tasks)
{
    mp__queue *q = new_queue();
    mp__inject *inj = new_inject();
    mp_task t[CAP + 1];
    for (uint32_t i = 0; i < CAP; i++)
        cr_assert_not(push(q, &t[i], inj));
    mp__inject_close(inj);
    bool overflowed = false;
    mp_task *back = mp__queue_push_owner(q, &t[CAP], inj, &overflowed);
    cr_assert(overflowed);
    uint32_t n = 0;
    for (mp_task *c = back; c; c = c->next, n++)
        cr_assert_eq(c, n < CAP / 2 ? &t[n] : &t[CAP], "chain order at %u", n);
    cr_assert_eq(n, CAP / 2 + 1);
    cr_assert_eq(mp__inject_len(inj), 0);
    for (uint32_t i = CAP / 2; i < CAP; i++)
        cr_assert_eq(mp__queue_pop_owner(q), &t[i]);
    cr_assert_null(mp__queue_pop_owner(q));
    free_inject(inj);
    free(q);
}
