/* Tests of runtime/src/sync/oneshot.c. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

typedef struct receiver {
    mp_task task;
    mp_oneshot *o;
    void *value;
    int err;
    int polls;
} receiver;

static mp_poll receiver_poll(mp_task *t, mp_context *cx)
{
    receiver *r = mp_container_of(t, receiver, task);
    r->polls++;
    return mp_oneshot_poll(r->o, cx, &r->value, &r->err);
}

static const mp_task_vtable receiver_vt = {.poll = receiver_poll};

Test(oneshot, task_receives_from_a_thread, .timeout = 10)
{
    mp_runtime *rt = test_runtime(2);
    mp_oneshot o;
    mp_oneshot_init(&o);
    receiver r = {.o = &o};
    mp_task_init(&r.task, &receiver_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &r.task), 0);
    while (mp_waker_is_empty(&o.rx_waker) && !mp_task_is_complete(&r.task))
        sched_yield();
    int x = 42;
    cr_assert_eq(mp_oneshot_send(&o, &x), 0);
    cr_assert_eq(mp_join(&r.task), 0);
    cr_assert_eq(r.err, 0);
    cr_assert_eq(r.value, &x);
    cr_assert_eq(mp_oneshot_send(&o, &x), -EPIPE, "one value only");
    mp_runtime_free(rt);
}

Test(oneshot, sender_closing_wakes_the_receiver, .timeout = 10)
{
    mp_runtime *rt = test_runtime(2);
    mp_oneshot o;
    mp_oneshot_init(&o);
    receiver r = {.o = &o};
    mp_task_init(&r.task, &receiver_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &r.task), 0);
    mp_oneshot_close_tx(&o);
    cr_assert_eq(mp_join(&r.task), 0);
    cr_assert_eq(r.err, -EPIPE);
    mp_runtime_free(rt);
}

Test(oneshot, receiver_closed_refuses_the_send)
{
    mp_oneshot o;
    mp_oneshot_init(&o);
    mp_oneshot_close_rx(&o);
    cr_assert_eq(mp_oneshot_send(&o, NULL), -EPIPE);
}

static void *blocking_rx(void *arg)
{
    void *v = NULL;
    cr_assert_eq(mp_oneshot_recv_blocking(arg, &v), 0);
    return v;
}

/* A thousand threads: 1.6-2.4 s under ASan, hence the room. */
Test(oneshot, blocking_receive_in_a_thread, .timeout = 30)
{
    for (int i = 0; i < 1000; i++) {
        mp_oneshot o;
        mp_oneshot_init(&o);
        pthread_t th;
        pthread_create(&th, NULL, blocking_rx, &o);
        int x;
        mp_oneshot_send(&o, &x);
        void *got;
        pthread_join(th, &got);
        cr_assert_eq(got, &x);
        cr_assert(mp_waker_is_empty(&o.rx_waker), "no waker left behind");
    }
}
