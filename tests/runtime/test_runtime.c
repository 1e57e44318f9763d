/* Tests of runtime/src/runtime.c: configuration, lazy and failing worker starts, shutdown in
 * both modes with tasks queued, idle, and held by wakers, and statistics. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

Test(runtime, worker_count_defaults_to_cpus_and_is_capped)
{
    mp_config cfg;
    mp_config_init(&cfg);
    mp_runtime *rt = test_runtime_with(&cfg);
    cr_assert_eq(mp_runtime_workers(rt), (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
    mp_runtime_free(rt);
    cfg.max_workers = 1;
    rt = test_runtime_with(&cfg);
    cr_assert_eq(mp_runtime_workers(rt), 1);
    mp_runtime_free(rt);
    cfg.workers = 130; /* more than one bitmap word */
    rt = test_runtime_with(&cfg);
    cr_assert_eq(mp_runtime_workers(rt), 130);
    mp_runtime_free(rt);
    cr_assert_null(mp_runtime_current());
}

typedef struct counted {
    mp_task task;
    _Atomic int *runs;
    _Atomic int *cancels;
    _Atomic int *releases;
    int yields;
    mp_waker *park_in; /* park forever, leaving the waker here */
} counted;

static mp_poll counted_poll(mp_task *t, mp_context *cx)
{
    counted *c = mp_container_of(t, counted, task);
    if (c->park_in) {
        if (mp_waker_is_empty(c->park_in))
            *c->park_in = mp_waker_clone(mp_context_waker(cx));
        return MP_PENDING;
    }
    if (c->yields-- > 0)
        return mp_yield(cx);
    atomic_fetch_add(c->runs, 1);
    return MP_READY;
}

static void counted_cancel(mp_task *t)
{
    atomic_fetch_add(mp_container_of(t, counted, task)->cancels, 1);
}

static void counted_release(mp_task *t)
{
    atomic_fetch_add(mp_container_of(t, counted, task)->releases, 1);
}

static const mp_task_vtable counted_vt = {
    .poll = counted_poll, .cancel = counted_cancel, .release = counted_release};

typedef struct tally {
    _Atomic int runs, cancels, releases;
} tally;

static void counted_init(counted *c, tally *t, int yields, mp_waker *park_in)
{
    memset(c, 0, sizeof *c);
    mp_task_init(&c->task, &counted_vt);
    c->runs = &t->runs;
    c->cancels = &t->cancels;
    c->releases = &t->releases;
    c->yields = yields;
    c->park_in = park_in;
}

Test(runtime, failed_thread_spawn_is_survived_and_reported, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 3;
    mp__test_fail_spawn_nth(2);
    mp_runtime *rt = test_runtime_with(&cfg);
    enum { N = 20000 };
    static counted c[N];
    tally t = {0};
    for (int i = 0; i < N; i++) {
        counted_init(&c[i], &t, i % 3, NULL);
        cr_assert_eq(mp_spawn(rt, &c[i].task), 0);
    }
    while (atomic_load(&t.runs) < N)
        sched_yield();
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert_eq(s.spawn_failures, 1);
    cr_assert_geq(s.workers_started, 1); /* the failed slot may have been started by a retry */
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&t.releases), N);
}

/* A worker that blocks in poll until released, so that tasks queue up behind it. */
typedef struct blocker {
    mp_task task;
    _Atomic bool hold;
    _Atomic bool inside;
} blocker;

static mp_poll blocker_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    blocker *b = mp_container_of(t, blocker, task);
    atomic_store(&b->inside, true);
    while (atomic_load(&b->hold))
        sched_yield();
    return MP_READY;
}

static const mp_task_vtable blocker_vt = {.poll = blocker_poll};

static void *shutdown_thread(void *rt)
{
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    return NULL;
}

Test(runtime, shutdown_cancels_queued_idle_and_parked_tasks, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    mp_runtime *rt = test_runtime_with(&cfg);
    tally t = {0};
    /* Idle tasks whose wakers are held outside, never woken. */
    enum { PARKED = 50, QUEUED = 500 };
    static counted parked[PARKED], queued[QUEUED];
    static mp_waker held[PARKED];
    memset(held, 0, sizeof held);
    for (int i = 0; i < PARKED; i++) {
        counted_init(&parked[i], &t, 0, &held[i]);
        cr_assert_eq(mp_spawn(rt, &parked[i].task), 0);
    }
    for (int i = 0; i < PARKED; i++)
        while (mp_waker_is_empty((mp_waker *)&held[i]))
            sched_yield();
    /* Queued tasks behind a blocked worker, some joinable. */
    blocker b = {0};
    mp_task_init(&b.task, &blocker_vt);
    atomic_store(&b.hold, true);
    cr_assert_eq(mp_spawn(rt, &b.task), 0);
    while (!atomic_load(&b.inside))
        sched_yield();
    for (int i = 0; i < QUEUED; i++) {
        counted_init(&queued[i], &t, 0, NULL);
        cr_assert_eq(i % 2 ? mp_spawn(rt, &queued[i].task) : mp_spawn_joinable(rt, &queued[i].task),
                     0);
    }
    /* Shut down from another thread while the worker is still blocked. */
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, shutdown_thread, rt), 0);
    while (!atomic_load(&rt->stop))
        sched_yield();
    atomic_store(&b.hold, false);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&t.runs), 0, "nothing ran after shutdown began");
    cr_assert_eq(atomic_load(&t.cancels), PARKED + QUEUED);
    for (int i = 0; i < QUEUED; i += 2)
        cr_assert_eq(mp_join(&queued[i].task), -ECANCELED);
    cr_assert_eq(atomic_load(&t.releases), QUEUED, "only the parked ones are still referenced");
    for (int i = 0; i < PARKED; i++)
        mp_waker_wake(&held[i]); /* a wake after shutdown is harmless and releases */
    cr_assert_eq(atomic_load(&t.releases), PARKED + QUEUED);
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert_eq(s.live_tasks, 0);
    /* No spawns after shutdown; the task stays the caller's. */
    counted late;
    counted_init(&late, &t, 0, NULL);
    cr_assert_eq(mp_spawn(rt, &late.task), -ESHUTDOWN);
    cr_assert_eq(mp_runtime_shutdown(rt), -EALREADY);
    mp_runtime_free(rt);
}

Test(runtime, drain_runs_pending_tasks_to_completion, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.shutdown_mode = MP_SHUTDOWN_DRAIN;
    mp_runtime *rt = test_runtime_with(&cfg);
    enum { N = 2000 };
    static counted c[N];
    tally t = {0};
    for (int i = 0; i < N; i++) {
        counted_init(&c[i], &t, 50, NULL);
        cr_assert_eq(mp_spawn(rt, &c[i].task), 0);
    }
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(atomic_load(&t.runs), N);
    cr_assert_eq(atomic_load(&t.cancels), 0);
    cr_assert_eq(atomic_load(&t.releases), N);
    mp_runtime_free(rt);
}

Test(runtime, drain_gives_up_after_its_timeout, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.shutdown_mode = MP_SHUTDOWN_DRAIN;
    cfg.drain_timeout_ms = 100;
    mp_runtime *rt = test_runtime_with(&cfg);
    tally t = {0};
    counted done, stuck;
    mp_waker held = {0};
    counted_init(&done, &t, 3, NULL);
    counted_init(&stuck, &t, 0, &held);
    cr_assert_eq(mp_spawn(rt, &done.task), 0);
    cr_assert_eq(mp_spawn(rt, &stuck.task), 0);
    while (mp_waker_is_empty(&held))
        sched_yield();
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(atomic_load(&t.runs), 1);
    cr_assert_eq(atomic_load(&t.cancels), 1, "the stuck task was cancelled at the deadline");
    mp_waker_drop(&held);
    cr_assert_eq(atomic_load(&t.releases), 2);
    mp_runtime_free(rt);
}

typedef struct self_stopper {
    mp_task task;
    mp_runtime *rt;
    int rc;
} self_stopper;

static mp_poll self_stopper_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    self_stopper *s = mp_container_of(t, self_stopper, task);
    s->rc = mp_runtime_shutdown(s->rt);
    return MP_READY;
}

static const mp_task_vtable self_stopper_vt = {.poll = self_stopper_poll};

Test(runtime, shutdown_from_a_worker_is_refused, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    mp_runtime *rt = test_runtime_with(&cfg);
    self_stopper s = {.rt = rt};
    mp_task_init(&s.task, &self_stopper_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
    /* Wait without helping, so that a worker runs it. */
    while (!mp_task_is_complete(&s.task))
        sched_yield();
    cr_assert_eq(mp_join(&s.task), 0);
    cr_assert_eq(s.rc, -EDEADLK);
    mp_runtime_free(rt);
}

Test(runtime, stats_add_up_per_worker, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    mp_runtime *rt = test_runtime_with(&cfg);
    enum { N = 5000 };
    static counted c[N];
    static mp_task *list[N];
    tally t = {0};
    for (int i = 0; i < N; i++) {
        counted_init(&c[i], &t, 2, NULL);
        list[i] = &c[i].task;
    }
    cr_assert_eq(mp_spawn_batch(rt, list, N), N);
    /* A task's body runs before its poll returns and its worker counts it: wait for every
     * release, then for the last counts to land (they must reach exactly these values). */
    while (atomic_load(&t.releases) < N)
        sched_yield();
    mp_stats s;
    for (int tries = 0; tries < 10000; tries++) {
        mp_runtime_stats_get(rt, &s);
        if (s.total.polled >= 3 * N && s.total.completed >= N)
            break;
        sched_yield();
    }
    mp_worker_stats sum = {0};
    for (unsigned i = 0; i < s.workers; i++) {
        mp_worker_stats w;
        cr_assert_eq(mp_runtime_worker_stats(rt, i, &w), 0);
        sum.polled += w.polled;
        sum.global_batches += w.global_batches;
        sum.lifo_hits += w.lifo_hits;
    }
    cr_assert_eq(mp_runtime_worker_stats(rt, s.workers, &(mp_worker_stats){0}), -EINVAL);
    cr_assert_eq(sum.polled, s.total.polled);
    cr_assert_eq(s.total.polled, 3 * N, "two yields and a final poll each, all on workers");
    cr_assert_eq(s.total.spawned, N);
    cr_assert_eq(s.injected, N);
    cr_assert_gt(s.total.global_batches, 0);
    cr_assert_eq(s.live_tasks, 0);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&t.releases), N);
}

/* A plain thread in mp_join polls a task inline while the runtime shuts down: shutdown waits
 * for that poll, and for the cancel callback it leads to, before it returns (it used to return
 * at once, and mp_runtime_free() then freed what the poll was using). From inside such an
 * inline poll, shutdown is refused with -EDEADLK like from a worker. */
typedef struct slow_inline {
    mp_task task;
    mp_runtime *rt;
    _Atomic int inside, shutdown_rc, poll_done, cancelled;
    _Atomic bool *go;
} slow_inline;

static mp_poll slow_inline_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    slow_inline *s = mp_container_of(t, slow_inline, task);
    atomic_store(&s->shutdown_rc, mp_runtime_shutdown(mp_runtime_current()));
    atomic_store(&s->inside, 1);
    while (!atomic_load(s->go)) /* until shutdown has begun */
        sched_yield();
    usleep(20000);
    atomic_store(&s->poll_done, 1);
    return MP_PENDING; /* nothing will wake it: shutdown cancels it on this thread */
}

static void slow_inline_cancel(mp_task *t)
{
    atomic_store(&mp_container_of(t, slow_inline, task)->cancelled, 1);
}

static const mp_task_vtable slow_inline_vt = {.poll = slow_inline_poll,
                                              .cancel = slow_inline_cancel};

static void *block_on_thread(void *arg)
{
    slow_inline *s = arg;
    return (void *)(intptr_t)mp_block_on(s->rt, &s->task);
}

Test(runtime, shutdown_waits_for_a_joiner_polling_inline, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    mp_runtime *rt = test_runtime_with(&cfg);
    /* The only worker is busy, so the joiner runs its task itself. */
    blocker b = {0};
    mp_task_init(&b.task, &blocker_vt);
    atomic_store(&b.hold, true);
    cr_assert_eq(mp_spawn(rt, &b.task), 0);
    while (!atomic_load(&b.inside))
        sched_yield();
    _Atomic bool go = false;
    slow_inline s = {.rt = rt, .go = &go};
    mp_task_init(&s.task, &slow_inline_vt);
    pthread_t joiner;
    cr_assert_eq(pthread_create(&joiner, NULL, block_on_thread, &s), 0);
    while (!atomic_load(&s.inside))
        sched_yield();
    cr_assert_eq(atomic_load(&s.shutdown_rc), -EDEADLK, "shutdown from an inline poll");
    pthread_t stopper;
    cr_assert_eq(pthread_create(&stopper, NULL, shutdown_thread, rt), 0);
    while (!atomic_load(&rt->stop))
        sched_yield();
    atomic_store(&b.hold, false);
    atomic_store(&go, true);
    pthread_join(stopper, NULL);
    cr_assert_eq(atomic_load(&s.poll_done), 1, "shutdown returned during an inline poll");
    cr_assert_eq(atomic_load(&s.cancelled), 1, "its cancel ran before shutdown returned");
    void *rc;
    pthread_join(joiner, &rc);
    cr_assert_eq((int)(intptr_t)rc, -ECANCELED);
    mp_runtime_free(rt);
}

/* Two threads shut down at once: the second waits for the first to finish and returns
 * -EALREADY, after which freeing is safe (it used to return at once, mid-shutdown). */
static _Atomic int shutdowns_returned;

static void *shutdown_rc_thread(void *rt)
{
    int rc = mp_runtime_shutdown(rt);
    atomic_fetch_add(&shutdowns_returned, 1);
    return (void *)(intptr_t)rc;
}

Test(runtime, concurrent_shutdowns_both_return_after_it_is_done, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    mp_runtime *rt = test_runtime_with(&cfg);
    blocker b = {0};
    mp_task_init(&b.task, &blocker_vt);
    atomic_store(&b.hold, true);
    cr_assert_eq(mp_spawn(rt, &b.task), 0);
    while (!atomic_load(&b.inside))
        sched_yield();
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, shutdown_rc_thread, rt), 0);
    while (!atomic_load(&rt->stop))
        sched_yield();
    usleep(20000); /* both callers are in now; neither may return while b still runs */
    cr_assert_eq(atomic_load(&shutdowns_returned), 0, "a shutdown returned mid-shutdown");
    atomic_store(&b.hold, false);
    int rcs[2];
    for (int i = 0; i < 2; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        rcs[i] = (int)(intptr_t)rc;
    }
    cr_assert((rcs[0] == 0 && rcs[1] == -EALREADY) || (rcs[0] == -EALREADY && rcs[1] == 0), "%d %d",
              rcs[0], rcs[1]);
    mp_runtime_free(rt);
}

/* The deprecated old name of mp_runtime_stats_get() still answers the same. */
Test(runtime, stats_old_name_is_an_alias, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_stats a, b;
    cr_assert_eq(mp_runtime_stats_get(rt, &a), 0);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    cr_assert_eq(mp_runtime_stats(rt, &b), 0);
#pragma GCC diagnostic pop
    cr_assert_eq(a.workers, b.workers);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* mp_block_on_until(): spawn, join by a deadline, cancel on timeout. */
typedef struct forever {
    mp_task task;
    mp_notify gate;
    mp_notify_waiter w;
    bool complete_at_once;
    _Atomic int cancels, releases;
} forever;

static mp_poll forever_poll(mp_task *t, mp_context *cx)
{
    forever *f = mp_container_of(t, forever, task);
    if (f->complete_at_once)
        return MP_READY;
    return mp_notify_poll(&f->gate, &f->w, cx);
}

static void forever_cancel(mp_task *t)
{
    forever *f = mp_container_of(t, forever, task);
    mp_notify_cancel(&f->gate, &f->w);
    atomic_fetch_add(&f->cancels, 1);
}

static void forever_release(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, forever, task)->releases, 1);
}

static const mp_task_vtable forever_vt = {
    .poll = forever_poll, .cancel = forever_cancel, .release = forever_release};

Test(runtime, block_on_until_cancels_at_the_deadline, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    forever f = {0};
    mp_notify_init(&f.gate);
    mp_notify_waiter_init(&f.w);
    mp_task_init(&f.task, &forever_vt);
    uint64_t t0 = mp_now_ms();
    cr_assert_eq(mp_block_on_until(rt, &f.task, t0 + 20), -ETIMEDOUT);
    cr_assert_geq(mp_now_ms(), t0 + 20);
    cr_assert_eq(atomic_load(&f.cancels), 1, "the task was cancelled and its cancel ran");
    cr_assert_eq(atomic_load(&f.releases), 1, "and nothing of it is left");
    forever g = {.complete_at_once = true};
    mp_task_init(&g.task, &forever_vt);
    cr_assert_eq(mp_block_on_until(rt, &g.task, mp_now_ms() + 60 * 60 * 1000), 0);
    cr_assert_eq(atomic_load(&g.releases), 1);
    mp_runtime_free(rt);
}
