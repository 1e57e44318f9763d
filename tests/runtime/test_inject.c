/* Tests of runtime/src/inject.c: the global queue. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

static mp__inject inj;

static void setup(void)
{
    cr_assert_eq(mp__inject_init(&inj), 0);
}

static void teardown(void)
{
    mp__inject_destroy(&inj);
}

TestSuite(inject, .init = setup, .fini = teardown);

Test(inject, fifo_and_length)
{
    mp_task t[10];
    cr_assert_eq(mp__inject_len(&inj), 0);
    cr_assert_null(mp__inject_pop(&inj));
    for (int i = 0; i < 10; i++)
        cr_assert(mp__inject_push(&inj, &t[i]));
    cr_assert_eq(mp__inject_len(&inj), 10);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(mp__inject_pop(&inj), &t[i]);
    cr_assert_eq(mp__inject_len(&inj), 0);
}

Test(inject, batch_push_and_pop)
{
    mp_task t[100];
    for (int i = 0; i < 99; i++)
        t[i].next = &t[i + 1];
    cr_assert(mp__inject_push_batch(&inj, &t[0], &t[99], 100));
    cr_assert_eq(mp__inject_len(&inj), 100);
    mp_task *out[64];
    cr_assert_eq(mp__inject_pop_batch(&inj, out, 64), 64);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(out[i], &t[i]);
    cr_assert_eq(mp__inject_len(&inj), 36);
    cr_assert_eq(mp__inject_pop_batch(&inj, out, 64), 36);
    cr_assert_eq(out[35], &t[99]);
    cr_assert_eq(mp__inject_pop_batch(&inj, out, 64), 0);
    /* The queue is usable again after it emptied. */
    cr_assert(mp__inject_push(&inj, &t[5]));
    cr_assert_eq(mp__inject_pop(&inj), &t[5]);
}

Test(inject, closed_refuses_pushes_but_drains)
{
    mp_task a, b;
    cr_assert(mp__inject_push(&inj, &a));
    mp__inject_close(&inj);
    cr_assert_not(mp__inject_push(&inj, &b));
    cr_assert_not(mp__inject_push_batch(&inj, &b, &b, 1));
    cr_assert_eq(mp__inject_len(&inj), 1);
    cr_assert_eq(mp__inject_pop(&inj), &a);
}

#define PRODUCERS 4
#define PER       50000

static void *producer(void *arg)
{
    mp_task *t = arg;
    for (int i = 0; i < PER; i++)
        mp__inject_push(&inj, &t[i]);
    return NULL;
}

Test(inject, concurrent_producers_and_batch_consumer, .timeout = 60)
{
    mp_task *t = calloc(PRODUCERS * PER, sizeof *t);
    pthread_t th[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        pthread_create(&th[i], NULL, producer, t + i * PER);
    size_t got = 0;
    int *seen = calloc(PRODUCERS * PER, sizeof *seen);
    while (got < PRODUCERS * PER) {
        mp_task *out[32];
        size_t n = mp__inject_pop_batch(&inj, out, 32);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(seen[out[i] - t]++, 0);
        got += n;
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(mp__inject_len(&inj), 0);
    free(seen);
    free(t);
}
