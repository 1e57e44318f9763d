/* Tests of runtime/src/sync/mpmc.c: the bounded MPMC channel. Errors, FIFO of each side,
 * a woken head that gives up passing its turn on, close while both sides wait, and tasks and
 * threads on both ends with every value received exactly once. */
#include <criterion/criterion.h>

#include "internal.h"
#include "hand.h"
#include "test_util.h"

Test(mpmc, try_send_recv_close_and_errors)
{
    mp_mpmc q;
    cr_assert_eq(mp_mpmc_init(&q, 0), -EINVAL);
    cr_assert_eq(mp_mpmc_init(&q, 2), 0);
    void *v;
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), -EAGAIN);
    cr_assert_eq(mp_mpmc_try_send(&q, NULL), 0);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)2), 0);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)3), -EAGAIN);
    v = &q;
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), 0);
    cr_assert_null(v, "NULL is a value");
    mp_mpmc_close(&q);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)4), -EPIPE);
    cr_assert_eq(mp_mpmc_send_blocking(&q, (void *)4), -EPIPE);
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), 0, "queued values survive the close");
    cr_assert_eq((uintptr_t)v, 2);
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), -EPIPE);
    cr_assert_eq(mp_mpmc_recv_blocking(&q, &v), -EPIPE);
    mp_mpmc_destroy(&q);
}

/* A receiver woken for a value gives up: the next receiver gets the wake. Same for senders
 * and room. */
Test(mpmc, cancelled_heads_pass_their_turn_on)
{
    mp_mpmc q;
    cr_assert_eq(mp_mpmc_init(&q, 1), 0);
    hand r1, r2;
    hand_init(&r1);
    hand_init(&r2);
    void *v;
    int err;
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r1.w, &r1.cx, &v, &err), MP_PENDING);
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r2.w, &r2.cx, &v, &err), MP_PENDING);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)7), 0);
    cr_assert(woken(&r1));
    cr_assert_not(woken(&r2));
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), -EAGAIN, "try_recv would pass the queue");
    mp_mpmc_cancel_recv(&q, &r1.w);
    cr_assert(woken(&r2));
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r2.w, &r2.cx, &v, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq((uintptr_t)v, 7);

    hand s1, s2;
    hand_init(&s1);
    hand_init(&s2);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)1), 0);
    cr_assert_eq(mp_mpmc_send_poll(&q, &s1.w, (void *)2, &s1.cx, &err), MP_PENDING);
    cr_assert_eq(mp_mpmc_send_poll(&q, &s2.w, (void *)3, &s2.cx, &err), MP_PENDING);
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), 0);
    cr_assert(woken(&s1));
    cr_assert_not(woken(&s2));
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)9), -EAGAIN, "try_send would pass the queue");
    mp_mpmc_cancel_send(&q, &s1.w);
    cr_assert(woken(&s2));
    cr_assert_eq(mp_mpmc_send_poll(&q, &s2.w, (void *)3, &s2.cx, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), 0);
    cr_assert_eq((uintptr_t)v, 3);
    mp_mpmc_destroy(&q);
}

Test(mpmc, close_wakes_both_sides)
{
    mp_mpmc q;
    cr_assert_eq(mp_mpmc_init(&q, 1), 0);
    hand r, s;
    hand_init(&r);
    hand_init(&s);
    void *v;
    int err;
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r.w, &r.cx, &v, &err), MP_PENDING);
    mp_mpmc_close(&q);
    cr_assert(woken(&r));
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r.w, &r.cx, &v, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
    mp_mpmc_destroy(&q);

    cr_assert_eq(mp_mpmc_init(&q, 1), 0);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)1), 0);
    cr_assert_eq(mp_mpmc_send_poll(&q, &s.w, (void *)2, &s.cx, &err), MP_PENDING);
    mp_mpmc_close(&q);
    cr_assert(woken(&s));
    cr_assert_eq(mp_mpmc_send_poll(&q, &s.w, (void *)2, &s.cx, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
    cr_assert_eq(mp_mpmc_try_recv(&q, &v), 0);
    cr_assert_eq((uintptr_t)v, 1);
    mp_mpmc_destroy(&q);
}

/* Producers and consumers, tasks and threads on each side, through a small ring; some
 * consumer tasks are cancelled while they wait. Every value is received exactly once and
 * per-producer order holds for each consumer. */
#define PRODUCERS 4
#define MSGS      20000
#define CONSUMERS 6

typedef struct shared {
    mp_mpmc q;
    _Atomic uint8_t *seen; /* PRODUCERS * MSGS */
    _Atomic long received;
    _Atomic int dup;
} shared;

static void take(shared *sh, void *v)
{
    uintptr_t x = (uintptr_t)v;
    if (atomic_fetch_add(&sh->seen[x], 1) != 0)
        atomic_store(&sh->dup, 1);
    atomic_fetch_add(&sh->received, 1);
}

typedef struct producer {
    mp_task task;
    shared *sh;
    mp_waiter w;
    uintptr_t id, next;
} producer;

static mp_poll producer_poll(mp_task *t, mp_context *cx)
{
    producer *p = mp_container_of(t, producer, task);
    while (p->next < MSGS) {
        int err;
        void *msg = (void *)(p->id * MSGS + p->next);
        if (mp_mpmc_send_poll(&p->sh->q, &p->w, msg, cx, &err) == MP_PENDING)
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
    shared *sh;
    mp_waiter w;
} consumer;

static mp_poll consumer_poll(mp_task *t, mp_context *cx)
{
    consumer *k = mp_container_of(t, consumer, task);
    for (int i = 1;; i++) {
        void *v;
        int err;
        if (mp_mpmc_recv_poll(&k->sh->q, &k->w, cx, &v, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EPIPE)
            return MP_READY;
        take(k->sh, v);
        if (i % 32 == 0)
            return mp_yield(cx);
    }
}

static void consumer_cancel(mp_task *t)
{
    consumer *k = mp_container_of(t, consumer, task);
    mp_mpmc_cancel_recv(&k->sh->q, &k->w);
}

static const mp_task_vtable consumer_vt = {.poll = consumer_poll, .cancel = consumer_cancel};

typedef struct thread_arg {
    shared *sh;
    uintptr_t id;
} thread_arg;

static void *thread_produce(void *arg)
{
    thread_arg *a = arg;
    for (uintptr_t i = 0; i < MSGS; i++)
        cr_assert_eq(mp_mpmc_send_blocking(&a->sh->q, (void *)(a->id * MSGS + i)), 0);
    return NULL;
}

static void *thread_consume(void *arg)
{
    thread_arg *a = arg;
    void *v;
    while (mp_mpmc_recv_blocking(&a->sh->q, &v) == 0)
        take(a->sh, v);
    return NULL;
}

Test(mpmc, tasks_and_threads_every_value_once, .timeout = 120)
{
    uint64_t rng = test_seed();
    mp_runtime *rt = test_runtime(4);
    shared sh = {.seen = calloc(PRODUCERS * MSGS, 1)};
    cr_assert_eq(mp_mpmc_init(&sh.q, 8), 0);
    consumer k[CONSUMERS - 2];
    for (int i = 0; i < CONSUMERS - 2; i++) {
        k[i] = (consumer){.sh = &sh};
        mp_task_init(&k[i].task, &consumer_vt);
        mp_waiter_init(&k[i].w);
        cr_assert_eq(mp_spawn_joinable(rt, &k[i].task), 0);
    }
    pthread_t ct[2], pt[PRODUCERS / 2];
    thread_arg ca = {.sh = &sh}, pa[PRODUCERS / 2];
    for (int i = 0; i < 2; i++)
        pthread_create(&ct[i], NULL, thread_consume, &ca);
    producer p[PRODUCERS / 2];
    for (uintptr_t i = 0; i < PRODUCERS / 2; i++) {
        p[i] = (producer){.sh = &sh, .id = i};
        mp_task_init(&p[i].task, &producer_vt);
        mp_waiter_init(&p[i].w);
        cr_assert_eq(mp_spawn_joinable(rt, &p[i].task), 0);
        pa[i] = (thread_arg){.sh = &sh, .id = PRODUCERS / 2 + i};
        pthread_create(&pt[i], NULL, thread_produce, &pa[i]);
    }
    /* Cancel one consumer task somewhere in the middle; the rest take up its share. */
    while (atomic_load(&sh.received) < (long)(test_rand(&rng) % (PRODUCERS * MSGS / 2)))
        sched_yield();
    mp_task_cancel(&k[0].task);
    for (int i = 0; i < PRODUCERS / 2; i++) {
        cr_assert_eq(mp_join(&p[i].task), 0);
        pthread_join(pt[i], NULL);
    }
    mp_mpmc_close(&sh.q);
    int r = mp_join(&k[0].task);
    cr_assert(r == 0 || r == -ECANCELED);
    for (int i = 1; i < CONSUMERS - 2; i++)
        cr_assert_eq(mp_join(&k[i].task), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(ct[i], NULL);
    cr_assert_eq(atomic_load(&sh.dup), 0, "a value was received twice");
    cr_assert_eq(atomic_load(&sh.received), PRODUCERS * MSGS, "a value was lost");
    cr_assert_null(sh.q.rx_head);
    cr_assert_null(sh.q.tx_head);
    mp_mpmc_destroy(&sh.q);
    free((void *)sh.seen);
    mp_runtime_free(rt);
}

/* Closed with one value left and two receivers queued: the one behind the head must be woken
 * again when the head takes the last value, or it waits for ever. */
Test(mpmc, close_with_a_value_left_wakes_the_receiver_behind)
{
    mp_mpmc q;
    cr_assert_eq(mp_mpmc_init(&q, 2), 0);
    hand r1, r2;
    hand_init(&r1);
    hand_init(&r2);
    void *v;
    int err;
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r1.w, &r1.cx, &v, &err), MP_PENDING);
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r2.w, &r2.cx, &v, &err), MP_PENDING);
    cr_assert_eq(mp_mpmc_try_send(&q, (void *)5), 0);
    mp_mpmc_close(&q);
    cr_assert(woken(&r2));
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r2.w, &r2.cx, &v, &err), MP_PENDING, "not its turn");
    cr_assert(woken(&r1));
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r1.w, &r1.cx, &v, &err), MP_READY);
    cr_assert_eq(err, 0);
    cr_assert_eq((uintptr_t)v, 5);
    cr_assert(woken(&r2), "the head took the last value of a closed channel: r2 must look");
    cr_assert_eq(mp_mpmc_recv_poll(&q, &r2.w, &r2.cx, &v, &err), MP_READY);
    cr_assert_eq(err, -EPIPE);
    cr_assert_null(q.rx_head);
    mp_mpmc_destroy(&q);
}

/* A wake for a queued node must reach it while it is still queued: a blocked thread's waker
 * points into its stack frame, so a clone woken after the lock could land once the node's
 * owner has taken its turn and returned. The probe stalls its wake while the test thread
 * polls the node to completion; the wake must not find the node already gone. */
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

/* The threads hand their result back through pthread_join: the assertions stay on the test's
 * own thread. */
static void *send_one(void *arg)
{
    return (void *)(intptr_t)mp_mpmc_try_send(arg, (void *)1);
}

static void *recv_one(void *arg)
{
    void *v;
    return (void *)(intptr_t)mp_mpmc_try_recv(arg, &v);
}

Test(mpmc, wake_reaches_a_node_still_queued, .timeout = 30)
{
    for (int side = 0; side < 2; side++) {
        mp_mpmc q;
        cr_assert_eq(mp_mpmc_init(&q, 1), 0);
        probe p = {0};
        mp_context cx = {.waker = {.vt = &probe_vt, .data = &p}};
        mp_waiter w;
        mp_waiter_init(&w);
        void *v;
        int err;
        if (side == 0) {
            cr_assert_eq(mp_mpmc_recv_poll(&q, &w, &cx, &v, &err), MP_PENDING);
        } else {
            cr_assert_eq(mp_mpmc_try_send(&q, (void *)1), 0);
            cr_assert_eq(mp_mpmc_send_poll(&q, &w, (void *)2, &cx, &err), MP_PENDING);
        }
        pthread_t th;
        pthread_create(&th, NULL, side == 0 ? send_one : recv_one, &q);
        while (!atomic_load(&p.woken))
            sched_yield();
        mp_poll r = side == 0 ? mp_mpmc_recv_poll(&q, &w, &cx, &v, &err)
                              : mp_mpmc_send_poll(&q, &w, (void *)2, &cx, &err);
        cr_assert_eq(r, MP_READY);
        cr_assert_eq(err, 0);
        atomic_store(&p.retired, 1); /* the owner's frame would be gone now */
        void *rc;
        pthread_join(th, &rc);
        cr_assert_eq((intptr_t)rc, 0);
        cr_assert_eq(atomic_load(&p.late), 0, "side %d: woken after it had left", side);
        mp_mpmc_destroy(&q);
    }
}
