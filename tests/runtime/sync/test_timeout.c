/* Tests of runtime/src/sync/timeout.c: deadlines around any wait. mp_timeout_poll() in a task
 * and mp_wait_until() on a plain thread: a wait ready in time, one that is not (its
 * registration withdrawn by the helper), a deadline already past (the ready wait still wins),
 * a grant and a rendezvous hand-over racing the deadline (nothing lost, nothing reported
 * twice), a task cancelled while both are armed, and a shutdown during a timed wait. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "internal.h"
#include "test_util.h"

/* --- a semaphore acquire as an mp_wait ------------------------------------------------ */

typedef struct acq_wait {
    mp_semaphore *s;
    mp_waiter w;
    int acq;
} acq_wait;

static mp_poll acq_poll(void *arg, mp_context *cx)
{
    acq_wait *a = arg;
    return mp_semaphore_acquire_poll(a->s, &a->w, 1, cx, &a->acq);
}

static bool acq_cancel(void *arg)
{
    acq_wait *a = arg;
    mp_semaphore_cancel_wait(a->s, &a->w); /* a permit granted meanwhile goes back */
    return false;
}

typedef struct waiter {
    mp_task task;
    mp_timer timer;
    acq_wait a;
    mp_wait wait;
    uint64_t deadline;
    int err;
    _Atomic int released;
} waiter;

static mp_poll waiter_poll(mp_task *t, mp_context *cx)
{
    waiter *w = mp_container_of(t, waiter, task);
    return mp_timeout_poll(&w->timer, w->deadline, &w->wait, cx, &w->err);
}

static void waiter_cancel(mp_task *t)
{
    waiter *w = mp_container_of(t, waiter, task);
    mp_timer_cancel(&w->timer);
    acq_cancel(&w->a);
}

static void waiter_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, waiter, task)->released, 1);
}

static const mp_task_vtable waiter_vt = {
    .poll = waiter_poll, .cancel = waiter_cancel, .release = waiter_release};

static void waiter_start(waiter *w, mp_runtime *rt, mp_semaphore *s, uint64_t deadline)
{
    memset(w, 0, sizeof *w);
    w->a.s = s;
    w->a.acq = 1;
    mp_waiter_init(&w->a.w);
    w->wait = (mp_wait){acq_poll, acq_cancel, &w->a};
    w->deadline = deadline;
    w->err = 1;
    mp_timer_init(&w->timer, rt);
    mp_task_init(&w->task, &waiter_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &w->task), 0);
}

static unsigned queued(mp_semaphore *s)
{
    mp__spin_lock(&s->lock);
    unsigned k = 0;
    for (mp_waiter *w = s->head; w; w = w->next)
        k++;
    mp__spin_unlock(&s->lock);
    return k;
}

Test(timeout, ready_in_time_or_timed_out_and_withdrawn, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    waiter a, b;
    waiter_start(&a, rt, &s, mp_now_ms() + 20);
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(a.err, -ETIMEDOUT);
    cr_assert_eq(queued(&s), 0, "the helper withdrew the timed-out wait");
    waiter_start(&b, rt, &s, mp_now_ms() + 60 * 60 * 1000); /* only the permit can end it */
    while (queued(&s) == 0)
        sched_yield();
    mp_semaphore_release(&s, 1);
    cr_assert_eq(mp_join(&b.task), 0);
    cr_assert_eq(b.err, 0);
    cr_assert_eq(b.a.acq, 0);
    cr_assert_eq(mp_semaphore_available(&s), 0, "b holds the permit");
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&a.released), 1, "the timer or the semaphore kept a's waker");
    cr_assert_eq(atomic_load(&b.released), 1, "the timer or the semaphore kept b's waker");
}

/* A deadline already past: a ready wait still wins; a pending one times out at once. */
Test(timeout, deadline_already_past, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 1), 0);
    waiter a, b;
    waiter_start(&a, rt, &s, 0);
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(a.err, 0, "the permit was there: ready wins over the deadline");
    cr_assert_eq(a.a.acq, 0);
    waiter_start(&b, rt, &s, mp_now_ms());
    cr_assert_eq(mp_join(&b.task), 0);
    cr_assert_eq(b.err, -ETIMEDOUT);
    cr_assert_eq(queued(&s), 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&b.released), 1);
}

Test(timeout, cancelled_while_both_armed, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    waiter a;
    waiter_start(&a, rt, &s, mp_now_ms() + 60 * 60 * 1000);
    while (queued(&s) == 0)
        sched_yield();
    mp_task_cancel(&a.task);
    cr_assert_eq(mp_join(&a.task), -ECANCELED);
    cr_assert_eq(queued(&s), 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&a.released), 1, "no waker was left behind");
}

/* Shutdown comes while the task waits with a deadline an hour away: its cancel withdraws both
 * waits, and it is released once. */
Test(timeout, shutdown_during_a_timed_wait, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    waiter a;
    waiter_start(&a, rt, &s, mp_now_ms() + 60 * 60 * 1000);
    mp_detach(&a.task);
    while (queued(&s) == 0)
        sched_yield();
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(queued(&s), 0);
    cr_assert_eq(atomic_load(&a.released), 1);
    mp_runtime_free(rt);
}

/* The grant races the deadline: a plain thread releases one permit at about the deadline,
 * round after round. Whichever wins, the permit is never lost nor counted twice: the task
 * either holds it (err 0) or it is still in the semaphore (-ETIMEDOUT, the cancel gave a
 * granted permit back). */
typedef struct releaser {
    mp_semaphore *s;
    unsigned delay_us;
} releaser;

static void *release_later(void *arg)
{
    releaser *r = arg;
    usleep(r->delay_us);
    mp_semaphore_release(r->s, 1);
    return NULL;
}

Test(timeout, grant_racing_the_deadline_loses_no_permit, .timeout = 120)
{
    uint64_t seed = test_seed();
    mp_runtime *rt = test_runtime(2);
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    unsigned held = 0, timed_out = 0;
    for (int round = 0; round < 200; round++) {
        waiter w;
        releaser r = {.s = &s, .delay_us = (unsigned)(test_rand(&seed) % 3000)};
        waiter_start(&w, rt, &s, mp_now_ms() + 1 + test_rand(&seed) % 2);
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, release_later, &r), 0);
        cr_assert_eq(mp_join(&w.task), 0);
        pthread_join(th, NULL);
        cr_assert_eq(queued(&s), 0, "round %d: a wait stayed queued", round);
        if (w.err == 0) {
            cr_assert_eq(w.a.acq, 0);
            held++;
            cr_assert_eq(mp_semaphore_available(&s), 0, "round %d: granted twice", round);
        } else {
            cr_assert_eq(w.err, -ETIMEDOUT);
            timed_out++;
            cr_assert_eq(mp_semaphore_available(&s), 1, "round %d: the permit was lost", round);
            cr_assert_eq(mp_semaphore_try_acquire(&s, 1), 0);
        }
        cr_assert_eq(atomic_load(&w.released), 1, "round %d: a waker stayed behind", round);
    }
    cr_assert_eq(held + timed_out, 200);
    mp_runtime_free(rt);
}

/* --- a rendezvous send as an mp_wait: its cancel may find the value taken ----------------- */

typedef struct send_wait {
    mp_chan *c;
    mp_chan_waiter w;
    void *value;
    int err;
} send_wait;

static mp_poll send_poll(void *arg, mp_context *cx)
{
    send_wait *sw = arg;
    return mp_chan_send_poll(sw->c, &sw->w, sw->value, cx, &sw->err);
}

static bool send_cancel(void *arg)
{
    send_wait *sw = arg;
    if (!mp_chan_cancel_send(sw->c, &sw->w))
        return false;
    sw->err = 0; /* the receiver took it between our last poll and the cancel */
    return true;
}

typedef struct sender {
    mp_task task;
    mp_timer timer;
    send_wait sw;
    mp_wait wait;
    uint64_t deadline;
    int err;
} sender;

static mp_poll sender_poll(mp_task *t, mp_context *cx)
{
    sender *s = mp_container_of(t, sender, task);
    return mp_timeout_poll(&s->timer, s->deadline, &s->wait, cx, &s->err);
}

static void sender_cancel(mp_task *t)
{
    sender *s = mp_container_of(t, sender, task);
    mp_timer_cancel(&s->timer);
    send_cancel(&s->sw);
}

static const mp_task_vtable sender_vt = {.poll = sender_poll, .cancel = sender_cancel};

typedef struct taker {
    mp_chan *c;
    uint64_t until_ms;
    _Atomic int got;
} taker;

static void *take_until(void *arg)
{
    taker *k = arg;
    void *v;
    while (mp_now_ms() <= k->until_ms) {
        if (mp_chan_try_recv(k->c, &v) == 0) {
            cr_assert_eq(v, (void *)k);
            atomic_store(&k->got, 1);
            return NULL;
        }
        sched_yield();
    }
    return NULL;
}

Test(timeout, rendezvous_taken_at_the_deadline_is_reported_sent, .timeout = 120)
{
    uint64_t seed = test_seed();
    mp_runtime *rt = test_runtime(2);
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 0), 0);
    for (int round = 0; round < 200; round++) {
        sender s = {0};
        taker k = {.c = &c};
        uint64_t now = mp_now_ms();
        s.deadline = now + 1 + test_rand(&seed) % 2;
        k.until_ms = now + test_rand(&seed) % 4; /* before, at or after the deadline */
        s.sw = (send_wait){.c = &c, .value = &k, .err = 1};
        mp_chan_waiter_init(&s.sw.w);
        s.wait = (mp_wait){send_poll, send_cancel, &s.sw};
        s.err = 1;
        mp_timer_init(&s.timer, rt);
        mp_task_init(&s.task, &sender_vt);
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, take_until, &k), 0);
        cr_assert_eq(mp_block_on(rt, &s.task), 0);
        pthread_join(th, NULL);
        void *v;
        cr_assert_eq(mp_chan_try_recv(&c, &v), -EAGAIN, "round %d: a sender stayed queued", round);
        if (atomic_load(&k.got))
            cr_assert_eq(s.err, 0, "round %d: received, but the send said %d", round, s.err);
        else
            cr_assert_eq(s.err, -ETIMEDOUT, "round %d: not received, but the send said %d", round,
                         s.err);
    }
    mp_chan_destroy(&c);
    mp_runtime_free(rt);
}

/* --- mp_wait_until: the same from a plain thread ------------------------------------------ */

typedef struct recv_wait {
    mp_chan *c;
    void *value;
    int err;
} recv_wait;

static mp_poll recv_poll(void *arg, mp_context *cx)
{
    recv_wait *r = arg;
    return mp_chan_recv_poll(r->c, cx, &r->value, &r->err);
}

static bool recv_cancel(void *arg)
{
    mp_chan_cancel_recv(((recv_wait *)arg)->c);
    return false;
}

static void *send_after(void *arg)
{
    usleep(20000);
    cr_assert_eq(mp_chan_try_send(arg, (void *)0x1234), 0);
    return NULL;
}

Test(timeout, wait_until_times_out_then_receives, .timeout = 30)
{
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 1), 0);
    recv_wait r = {.c = &c, .err = 1};
    mp_wait w = {recv_poll, recv_cancel, &r};
    uint64_t t0 = mp_now_ms();
    cr_assert_eq(mp_wait_until(&w, t0 + 20), -ETIMEDOUT);
    cr_assert_geq(mp_now_ms(), t0 + 20, "returned before the deadline");
    cr_assert(mp_waker_is_empty(&c.rx_waker), "the thread's waker stayed in the channel");
    cr_assert_eq(mp_wait_until(&w, 0), -ETIMEDOUT, "a past deadline: one poll, no wait");
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, send_after, &c), 0);
    cr_assert_eq(mp_wait_until(&w, mp_now_ms() + 60 * 60 * 1000), 0);
    pthread_join(th, NULL);
    cr_assert_eq(r.err, 0);
    cr_assert_eq(r.value, (void *)0x1234);
    cr_assert_eq(mp_chan_try_send(&c, (void *)0x5678), 0);
    cr_assert_eq(mp_wait_until(&w, 0), 0, "a past deadline: a ready wait still wins");
    cr_assert_eq(r.value, (void *)0x5678);
    mp_chan_destroy(&c);
}

Test(timeout, wait_until_grant_racing_the_deadline, .timeout = 120)
{
    uint64_t seed = test_seed();
    mp_semaphore s;
    cr_assert_eq(mp_semaphore_init(&s, 0), 0);
    for (int round = 0; round < 200; round++) {
        acq_wait a = {.s = &s, .acq = 1};
        mp_waiter_init(&a.w);
        mp_wait w = {acq_poll, acq_cancel, &a};
        releaser r = {.s = &s, .delay_us = (unsigned)(test_rand(&seed) % 3000)};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, release_later, &r), 0);
        int rc = mp_wait_until(&w, mp_now_ms() + 1 + test_rand(&seed) % 2);
        pthread_join(th, NULL);
        cr_assert_eq(queued(&s), 0);
        if (rc == 0) {
            cr_assert_eq(a.acq, 0);
            cr_assert_eq(mp_semaphore_available(&s), 0, "round %d: granted twice", round);
        } else {
            cr_assert_eq(rc, -ETIMEDOUT);
            cr_assert_eq(mp_semaphore_available(&s), 1, "round %d: the permit was lost", round);
            cr_assert_eq(mp_semaphore_try_acquire(&s, 1), 0);
        }
    }
}

/* A send racing the deadline of a plain thread's receive: the sender takes the receiver's waker
 * out under the channel's lock and wakes it after, possibly after the receiver has timed out
 * (or taken the value in its last poll) and returned. The wake must not write into the
 * returned frame (mp_wait_until waits for it), and the value is received exactly once. */
typedef struct late_sender {
    mp_chan *c;
    unsigned delay_us;
} late_sender;

static void *send_late(void *arg)
{
    late_sender *l = arg;
    usleep(l->delay_us);
    cr_assert_eq(mp_chan_try_send(l->c, (void *)0x77), 0);
    return NULL;
}

static int recv_with_deadline(mp_chan *c, uint64_t deadline, void **value)
{
    recv_wait r = {.c = c, .err = 1};
    mp_wait w = {recv_poll, recv_cancel, &r};
    int rc = mp_wait_until(&w, deadline);
    *value = r.value;
    return rc == 0 ? r.err : rc;
}

Test(timeout, wait_until_send_racing_the_deadline, .timeout = 120)
{
    uint64_t seed = test_seed();
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 1), 0);
    unsigned got = 0;
    for (int round = 0; round < 300; round++) {
        late_sender l = {.c = &c, .delay_us = (unsigned)(test_rand(&seed) % 3000)};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, send_late, &l), 0);
        void *v = NULL;
        int rc = recv_with_deadline(&c, mp_now_ms() + 1 + test_rand(&seed) % 2, &v);
        pthread_join(th, NULL);
        if (rc == 0) {
            cr_assert_eq(v, (void *)0x77);
            got++;
        } else {
            cr_assert_eq(rc, -ETIMEDOUT);
            cr_assert_eq(mp_chan_try_recv(&c, &v), 0, "round %d: the value was lost", round);
        }
        cr_assert_eq(mp_chan_try_recv(&c, &v), -EAGAIN, "round %d: received twice", round);
        cr_assert(mp_waker_is_empty(&c.rx_waker));
    }
    (void)got;
    mp_chan_destroy(&c);
}

/* From a worker, a blocking wait would stall it: refused. */
static _Atomic int worker_rc;

static mp_poll on_worker_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx;
    mp_chan c;
    cr_assert_eq(mp_chan_init(&c, 1), 0);
    recv_wait r = {.c = &c};
    mp_wait w = {recv_poll, recv_cancel, &r};
    atomic_store(&worker_rc, mp_wait_until(&w, mp_now_ms() + 1000));
    mp_chan_destroy(&c);
    return MP_READY;
}

static const mp_task_vtable on_worker_vt = {.poll = on_worker_poll};

Test(timeout, wait_until_on_a_worker_is_refused, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_task t;
    mp_task_init(&t, &on_worker_vt);
    atomic_store(&worker_rc, 1);
    /* Detached and not joined: a join from this thread could run it inline, off the worker. */
    cr_assert_eq(mp_spawn(rt, &t), 0);
    while (atomic_load(&worker_rc) == 1)
        usleep(1000);
    cr_assert_eq(atomic_load(&worker_rc), -EDEADLK);
    mp_runtime_free(rt);
}
