/* Tests of runtime/src/sync/broadcast.c: every value to every receiver, a lagging receiver
 * told how many it missed, close, and receiver tasks and threads with exact counts (every
 * value seen or counted as missed, never both). */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(broadcast, errors_order_lag_and_close)
{
    mp_broadcast b;
    cr_assert_eq(mp_broadcast_init(&b, 0, 8), -EINVAL);
    cr_assert_eq(mp_broadcast_init(&b, 4, 0), -EINVAL);
    cr_assert_eq(mp_broadcast_init(&b, 4, sizeof(uint64_t)), 0);
    uint64_t v = 99, out = 0, missed = 0;
    cr_assert_eq(mp_broadcast_send(&b, &v), 0); /* before anyone subscribed: nobody sees it */
    mp_broadcast_rx fast, slow;
    mp_broadcast_subscribe(&b, &fast);
    mp_broadcast_subscribe(&b, &slow);
    cr_assert_eq(mp_broadcast_try_recv(&b, &fast, &out, &missed), -EAGAIN);
    hand h;
    hand_init(&h);
    int err;
    cr_assert_eq(mp_broadcast_recv_poll(&b, &fast, &h.cx, &out, &missed, &err), MP_PENDING);
    for (v = 0; v < 10; v++) {
        cr_assert_eq(mp_broadcast_send(&b, &v), 0);
        cr_assert_eq(mp_broadcast_recv_poll(&b, &fast, &h.cx, &out, &missed, &err), MP_READY);
        cr_assert_eq(err, 0);
        cr_assert_eq(out, v);
    }
    cr_assert(woken(&h));
    /* slow read nothing: 10 sent, 4 kept, 6 missed; then the 4 kept, in order. */
    cr_assert_eq(mp_broadcast_try_recv(&b, &slow, &out, &missed), -EOVERFLOW);
    cr_assert_eq(missed, 6);
    for (uint64_t i = 6; i < 10; i++) {
        cr_assert_eq(mp_broadcast_try_recv(&b, &slow, &out, &missed), 0);
        cr_assert_eq(out, i);
    }
    cr_assert_eq(mp_broadcast_try_recv(&b, &slow, &out, &missed), -EAGAIN);
    v = 10;
    cr_assert_eq(mp_broadcast_send(&b, &v), 0);
    cr_assert_eq(mp_broadcast_recv_poll(&b, &slow, &h.cx, &out, &missed, &err), MP_READY);
    cr_assert_eq(mp_broadcast_recv_poll(&b, &slow, &h.cx, &out, &missed, &err), MP_PENDING);
    mp_broadcast_cancel_wait(&b, &slow);
    cr_assert_null(b.head);
    cr_assert_eq(mp_broadcast_recv_poll(&b, &fast, &h.cx, &out, &missed, &err), MP_READY);
    cr_assert_eq(mp_broadcast_recv_poll(&b, &fast, &h.cx, &out, &missed, &err), MP_PENDING);
    v = 11;
    cr_assert_eq(mp_broadcast_send(&b, &v), 0);
    mp_broadcast_close(&b);
    cr_assert(woken(&h));
    cr_assert_eq(mp_broadcast_send(&b, &v), -EPIPE);
    cr_assert_eq(mp_broadcast_recv_poll(&b, &fast, &h.cx, &out, &missed, &err), MP_READY);
    cr_assert_eq(err, 0, "values sent before the close are still read");
    cr_assert_eq(out, 11);
    cr_assert_eq(mp_broadcast_recv_poll(&b, &fast, &h.cx, &out, &missed, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
    cr_assert_eq(mp_broadcast_recv_blocking(&b, &fast, &out, &missed), -EPIPE);
    mp_broadcast_destroy(&b);
}

/* A thread sends N values through a ring of 16; receiver tasks (some slowed by yields) and
 * threads count what they get and what they are told they missed. Each receiver's values come
 * in increasing order, and received + missed = N exactly. */
#define N 50000

typedef struct rcv {
    mp_task task;
    mp_broadcast *b;
    mp_broadcast_rx rx;
    uint64_t got, missed, next;
    int slow;
    _Atomic int *bad;
} rcv;

static void count(rcv *r, int err, uint64_t v, uint64_t missed)
{
    if (err == -EOVERFLOW) {
        r->missed += missed;
        r->next += missed;
        return;
    }
    if (v != r->next)
        atomic_store(r->bad, 1);
    r->next = v + 1;
    r->got++;
}

static mp_poll rcv_poll(mp_task *t, mp_context *cx)
{
    rcv *r = mp_container_of(t, rcv, task);
    for (int i = 1;; i++) {
        uint64_t v = 0, missed = 0;
        int err;
        if (mp_broadcast_recv_poll(r->b, &r->rx, cx, &v, &missed, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EPIPE)
            return MP_READY;
        count(r, err, v, missed);
        if (r->slow && i % r->slow == 0)
            return mp_yield(cx);
    }
}

static void rcv_cancel(mp_task *t)
{
    rcv *r = mp_container_of(t, rcv, task);
    mp_broadcast_cancel_wait(r->b, &r->rx);
}

static const mp_task_vtable rcv_vt = {.poll = rcv_poll, .cancel = rcv_cancel};

static void *thread_rcv(void *arg)
{
    rcv *r = arg;
    for (;;) {
        uint64_t v = 0, missed = 0;
        int err = mp_broadcast_recv_blocking(r->b, &r->rx, &v, &missed);
        if (err == -EPIPE)
            return NULL;
        count(r, err, v, missed);
    }
}

Test(broadcast, every_value_seen_or_counted_missed, .timeout = 120)
{
    mp_runtime *rt = test_runtime(3);
    mp_broadcast b;
    cr_assert_eq(mp_broadcast_init(&b, 16, sizeof(uint64_t)), 0);
    _Atomic int bad = 0;
    enum { R = 6, T = 2 };
    rcv r[R + T];
    for (int i = 0; i < R + T; i++) {
        r[i] = (rcv){.b = &b, .bad = &bad, .slow = i < R ? i : 0};
        mp_broadcast_subscribe(&b, &r[i].rx);
    }
    for (int i = 0; i < R; i++) {
        mp_task_init(&r[i].task, &rcv_vt);
        cr_assert_eq(mp_spawn_joinable(rt, &r[i].task), 0);
    }
    pthread_t th[T];
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, thread_rcv, &r[R + i]);
    for (uint64_t v = 0; v < N; v++) {
        cr_assert_eq(mp_broadcast_send(&b, &v), 0);
        if (v % 1024 == 0)
            sched_yield();
    }
    mp_broadcast_close(&b);
    for (int i = 0; i < R; i++)
        cr_assert_eq(mp_join(&r[i].task), 0);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    uint64_t lagged = 0;
    for (int i = 0; i < R + T; i++) {
        cr_assert_eq(r[i].got + r[i].missed, N, "receiver %d: %lu got + %lu missed", i,
                     (unsigned long)r[i].got, (unsigned long)r[i].missed);
        lagged += r[i].missed != 0;
    }
    cr_assert_eq(atomic_load(&bad), 0, "a value out of order or seen twice");
    fprintf(stderr, "broadcast: %lu of %d receivers lagged\n", (unsigned long)lagged, R + T);
    cr_assert_null(b.head);
    mp_broadcast_destroy(&b);
    mp_runtime_free(rt);
}
