/* Tests of runtime/src/sync/chan.c: the bounded MPSC channel, and with capacity 0 the
 * rendezvous channel. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

Test(chan, try_send_and_recv_in_order_with_backpressure)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 3), 0);
    for (uintptr_t i = 1; i <= 3; i++)
        cr_assert_eq(mp_chan_try_send(&c, (void *)i), 0);
    cr_assert_eq(mp_chan_try_send(&c, (void *)4), -EAGAIN);
    void *v;
    for (uintptr_t i = 1; i <= 3; i++) {
        cr_assert_eq(mp_chan_try_recv(&c, &v), 0);
        cr_assert_eq((uintptr_t)v, i);
    }
    cr_assert_eq(mp_chan_try_recv(&c, &v), -EAGAIN);
    cr_assert_eq(mp_chan_try_send(&c, (void *)5), 0);
    mp_chan_close(&c);
    cr_assert_eq(mp_chan_try_send(&c, (void *)6), -EPIPE);
    cr_assert_eq(mp_chan_try_recv(&c, &v), 0, "queued values survive the close");
    cr_assert_eq((uintptr_t)v, 5);
    cr_assert_eq(mp_chan_try_recv(&c, &v), -EPIPE);
    mp_chan_destroy(&c);
}

/* Producer tasks and producer threads into one consumer task; per-producer order kept and
 * every message delivered once, through a channel much smaller than the traffic. */
#define PRODUCERS 6
#define MSGS      20000

typedef struct producer {
    mp_task task;
    mp_chan *c;
    mp_chan_waiter w;
    uintptr_t id, next, msgs;
} producer;

static mp_poll producer_poll(mp_task *t, mp_context *cx)
{
    producer *p = mp_container_of(t, producer, task);
    while (p->next < p->msgs) {
        int err;
        void *msg = (void *)((p->id << 32) | p->next);
        if (mp_chan_send_poll(p->c, &p->w, msg, cx, &err) == MP_PENDING)
            return MP_PENDING;
        cr_assert_eq(err, 0);
        p->next++;
        if (p->next % 64 == 0)
            return mp_yield(cx);
    }
    return MP_READY;
}

static const mp_task_vtable producer_vt = {.poll = producer_poll};

typedef struct consumer {
    mp_task task;
    mp_chan *c;
    uintptr_t expect[PRODUCERS];
    size_t got;
} consumer;

static mp_poll consumer_poll(mp_task *t, mp_context *cx)
{
    consumer *k = mp_container_of(t, consumer, task);
    for (;;) {
        void *v;
        int err;
        if (mp_chan_recv_poll(k->c, cx, &v, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EPIPE)
            return MP_READY;
        uintptr_t id = (uintptr_t)v >> 32, seq = (uintptr_t)v & 0xffffffffu;
        cr_assert_lt(id, PRODUCERS);
        cr_assert_eq(seq, k->expect[id], "producer %lu out of order", (unsigned long)id);
        k->expect[id]++;
        k->got++;
    }
}

static const mp_task_vtable consumer_vt = {.poll = consumer_poll};

typedef struct thread_producer {
    mp_chan *c;
    uintptr_t id, msgs;
} thread_producer;

static void *thread_produce(void *arg)
{
    thread_producer *p = arg;
    for (uintptr_t i = 0; i < p->msgs; i++)
        cr_assert_eq(mp_chan_send_blocking(p->c, (void *)((p->id << 32) | i)), 0);
    return NULL;
}

static void tasks_and_threads_into_one_consumer(uint32_t capacity, uintptr_t msgs)
{
    mp_runtime *rt = test_runtime(3);
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, capacity), 0);
    consumer k = {.c = &c};
    mp_task_init(&k.task, &consumer_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &k.task), 0);
    producer p[PRODUCERS / 2];
    for (uintptr_t i = 0; i < PRODUCERS / 2; i++) {
        memset(&p[i], 0, sizeof p[i]);
        mp_task_init(&p[i].task, &producer_vt);
        p[i].c = &c;
        p[i].id = i;
        p[i].msgs = msgs;
        cr_assert_eq(mp_spawn_joinable(rt, &p[i].task), 0);
    }
    pthread_t th[PRODUCERS / 2];
    thread_producer tp[PRODUCERS / 2];
    for (uintptr_t i = 0; i < PRODUCERS / 2; i++) {
        tp[i] = (thread_producer){.c = &c, .id = PRODUCERS / 2 + i, .msgs = msgs};
        pthread_create(&th[i], NULL, thread_produce, &tp[i]);
    }
    for (int i = 0; i < PRODUCERS / 2; i++) {
        cr_assert_eq(mp_join(&p[i].task), 0);
        pthread_join(th[i], NULL);
    }
    mp_chan_close(&c);
    cr_assert_eq(mp_join(&k.task), 0);
    cr_assert_eq(k.got, (size_t)PRODUCERS * msgs);
    mp_chan_destroy(&c);
    mp_runtime_free(rt);
}

Test(chan, tasks_and_threads_into_one_consumer, .timeout = 120)
{
    tasks_and_threads_into_one_consumer(8, MSGS);
}

/* Capacity 0: every message handed from a waiting sender to the consumer. */
Test(chan, rendezvous_tasks_and_threads_into_one_consumer, .timeout = 120)
{
    tasks_and_threads_into_one_consumer(0, MSGS / 10);
}

typedef struct rdv_sender {
    mp_chan *c;
    void *value;
    int err;
    _Atomic bool returned;
} rdv_sender;

static void *rdv_send(void *arg)
{
    rdv_sender *s = arg;
    s->err = mp_chan_send_blocking(s->c, s->value);
    atomic_store(&s->returned, true);
    return NULL;
}

/* A send on a rendezvous channel returns once the receiver has taken the value, not before;
 * try_send never finds room. */
Test(chan, rendezvous_send_waits_for_the_receiver, .timeout = 30)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 0), 0);
    void *v;
    cr_assert_eq(mp_chan_try_send(&c, (void *)1), -EAGAIN);
    cr_assert_eq(mp_chan_try_recv(&c, &v), -EAGAIN);
    rdv_sender s = {.c = &c, .value = NULL}; /* NULL is a value too */
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, rdv_send, &s), 0);
    usleep(20000); /* the sender queues: no time asserted, only that it has not returned */
    cr_assert(!atomic_load(&s.returned), "a rendezvous send returned before any receive");
    v = (void *)1;
    cr_assert_eq(mp_chan_recv_blocking(&c, &v), 0);
    cr_assert_null(v);
    pthread_join(th, NULL);
    cr_assert_eq(s.err, 0);
    cr_assert_eq(mp_chan_try_recv(&c, &v), -EAGAIN, "the channel holds nothing");
    mp_chan_destroy(&c);
}

/* A close ends the wait of a sender whose value was not taken, with -EPIPE; the receiver
 * then sees the close, not the value. */
Test(chan, rendezvous_close_fails_waiting_senders, .timeout = 30)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 0), 0);
    rdv_sender s = {.c = &c, .value = (void *)7};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, rdv_send, &s), 0);
    usleep(20000);
    mp_chan_close(&c);
    pthread_join(th, NULL);
    cr_assert_eq(s.err, -EPIPE);
    void *v;
    cr_assert_eq(mp_chan_try_recv(&c, &v), -EPIPE);
    cr_assert_eq(mp_chan_try_send(&c, (void *)8), -EPIPE);
    mp_chan_destroy(&c);
}

/* A sender task that polls once, then stops looking: its cancel learns that the receiver
 * took the value in between. */
typedef struct once_sender {
    mp_task task;
    mp_chan *c;
    mp_chan_waiter w;
    _Atomic bool polled;
    mp_poll first;
} once_sender;

static mp_poll once_sender_poll(mp_task *t, mp_context *cx)
{
    once_sender *s = mp_container_of(t, once_sender, task);
    if (atomic_load(&s->polled))
        return MP_READY; /* woken by the receiver's take; the test cancels */
    int err;
    s->first = mp_chan_send_poll(s->c, &s->w, (void *)42, cx, &err);
    atomic_store(&s->polled, true);
    return MP_PENDING;
}

static const mp_task_vtable once_sender_vt = {.poll = once_sender_poll};

Test(chan, rendezvous_cancel_says_the_value_was_taken, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 0), 0);
    once_sender s = {.c = &c};
    mp_task_init(&s.task, &once_sender_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
    while (!atomic_load(&s.polled))
        sched_yield();
    cr_assert_eq(s.first, MP_PENDING);
    void *v;
    cr_assert_eq(mp_chan_try_recv(&c, &v), 0);
    cr_assert_eq((uintptr_t)v, 42);
    cr_assert_eq(mp_join(&s.task), 0);
    cr_assert(mp_chan_cancel_send(&c, &s.w), "taken: the value is the receiver's");
    cr_assert(!mp_chan_cancel_send(&c, &s.w), "once");
    mp_chan_destroy(&c);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(chan, cancelled_sender_passes_the_room_on, .timeout = 10)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 1), 0);
    cr_assert_eq(mp_chan_try_send(&c, (void *)1), 0);
    /* Two senders wait for room, as threads would: fake wakers that count. */
    mp__thread_waiter ta, tb;
    mp_waker wa = mp__thread_waiter_init(&ta), wb = mp__thread_waiter_init(&tb);
    mp_chan_waiter a = {0}, b = {0};
    int err;
    mp_context cxa = {.waker = wa}, cxb = {.waker = wb};
    cr_assert_eq(mp_chan_send_poll(&c, &a, (void *)2, &cxa, &err), MP_PENDING);
    cr_assert_eq(mp_chan_send_poll(&c, &b, (void *)3, &cxb, &err), MP_PENDING);
    void *v;
    cr_assert_eq(mp_chan_try_recv(&c, &v), 0); /* room: a (the head) is woken */
    cr_assert_eq(atomic_load(&ta.word), 1);
    cr_assert_eq(atomic_load(&tb.word), 0);
    mp_chan_cancel_send(&c, &a); /* a gives up: b must get the wake instead */
    cr_assert_eq(atomic_load(&tb.word), 1);
    cr_assert_eq(mp_chan_send_poll(&c, &b, (void *)3, &cxb, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq(mp_chan_try_recv(&c, &v), 0);
    cr_assert_eq((uintptr_t)v, 3);
    mp_chan_destroy(&c);
}

/* NULL is a value like any other. */
Test(chan, null_values_are_values)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 2), 0);
    cr_assert_eq(mp_chan_try_send(&c, NULL), 0);
    void *v = &c;
    cr_assert_eq(mp_chan_try_recv(&c, &v), 0);
    cr_assert_null(v);
    cr_assert_eq(mp_chan_try_recv(&c, &v), -EAGAIN);
    mp_chan_destroy(&c);
}

/* A receiver task cancelled while it waits gives its waker back with mp_chan_cancel_recv()
 * and is released at once; without it the channel would keep the task referenced. */
typedef struct receiver {
    mp_task task;
    mp_chan *c;
    _Atomic int waiting, released;
} receiver;

static mp_poll receiver_poll(mp_task *t, mp_context *cx)
{
    receiver *r = mp_container_of(t, receiver, task);
    void *v;
    int err;
    mp_poll p = mp_chan_recv_poll(r->c, cx, &v, &err);
    atomic_store(&r->waiting, p == MP_PENDING);
    return p;
}

static void receiver_cancel(mp_task *t)
{
    mp_chan_cancel_recv(mp_container_of(t, receiver, task)->c);
}

static void receiver_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, receiver, task)->released, 1);
}

static const mp_task_vtable receiver_vt = {
    .poll = receiver_poll, .cancel = receiver_cancel, .release = receiver_release};

Test(chan, cancelled_receiver_gives_its_waker_back, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 1), 0);
    receiver r = {.c = &c};
    mp_task_init(&r.task, &receiver_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &r.task), 0);
    while (!atomic_load(&r.waiting))
        sched_yield();
    mp_task_cancel(&r.task);
    cr_assert_eq(mp_join(&r.task), -ECANCELED);
    cr_assert_eq(atomic_load(&r.released), 1, "the channel still held a reference");
    cr_assert(mp_waker_is_empty(&c.rx_waker));
    mp_chan_destroy(&c);
    mp_runtime_free(rt);
}

/* A wake for a queued sender must reach it while it is still queued. A blocked thread's waker
 * points into its stack frame: a clone taken under the lock and woken after it could land once
 * the sender has sent and returned. The probe waker below stalls its wake while the test
 * thread polls the sender to completion; the wake must not find the sender already gone. */
typedef struct probe {
    _Atomic int woken, retired, late;
} probe;

static void probe_wake(const void *data)
{
    probe *p = (probe *)data;
    atomic_store(&p->woken, 1);
    for (int i = 0; i < 200 && !atomic_load(&p->retired); i++)
        usleep(1000);
    if (atomic_load(&p->retired))
        atomic_store(&p->late, 1);
}

static const void *probe_clone(const void *data)
{
    return data;
}

static void probe_drop(const void *data)
{
    (void)data;
}

static const mp_waker_vtable probe_vt = {
    .wake = probe_wake, .wake_by_ref = probe_wake, .clone = probe_clone, .drop = probe_drop};

static void *recv_one(void *arg)
{
    void *v;
    return (void *)(intptr_t)mp_chan_try_recv(arg, &v); /* asserted on the test's thread */
}

Test(chan, wake_reaches_a_sender_still_queued, .timeout = 30)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 1), 0);
    cr_assert_eq(mp_chan_try_send(&c, (void *)1), 0);
    probe p = {0};
    mp_context cx = {.waker = {.vt = &probe_vt, .data = &p}};
    mp_chan_waiter w = {0};
    int err;
    cr_assert_eq(mp_chan_send_poll(&c, &w, (void *)2, &cx, &err), MP_PENDING);
    pthread_t th;
    pthread_create(&th, NULL, recv_one, &c); /* makes room: wakes w */
    while (!atomic_load(&p.woken))
        sched_yield();
    cr_assert_eq(mp_chan_send_poll(&c, &w, (void *)2, &cx, &err), MP_READY);
    cr_assert_eq(err, 0);
    atomic_store(&p.retired, 1); /* the sender's frame would be gone now */
    void *rc;
    pthread_join(th, &rc);
    cr_assert_eq((intptr_t)rc, 0);
    cr_assert_eq(atomic_load(&p.late), 0, "woken after it had sent and left");
    mp_chan_destroy(&c);
}
