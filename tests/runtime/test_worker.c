/* Tests of runtime/src/worker.c (with idle.c and park.c underneath): where tasks are taken
 * from, that a sleeping runtime wakes for every burst of work and sleeps without wake-ups
 * afterwards, and that neither the LIFO slot nor local work can starve other tasks. Built
 * also with the 4-slot ring (test_worker-q4). */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

typedef struct one {
    mp_task task;
    _Atomic int *counter;
    _Atomic int *released; /* optional */
} one;

static mp_poll one_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    atomic_fetch_add(mp_container_of(t, one, task)->counter, 1);
    return MP_READY;
}

static void one_release(mp_task *t)
{
    one *o = mp_container_of(t, one, task);
    if (o->released)
        atomic_fetch_add(o->released, 1);
}

static const mp_task_vtable one_vt = {.poll = one_poll, .release = one_release};

/* Wait for the counter without ever helping: only workers may run the tasks. */
static void wait_count(_Atomic int *c, int want)
{
    while (atomic_load(c) < want)
        sched_yield();
}

static void wait_all_parked(mp_runtime *rt)
{
    /* Every started worker is parked once the unparked count is zero. */
    for (;;) {
        uint64_t s = atomic_load(&rt->idle.state);
        if ((s >> 32) == 0)
            return;
        sched_yield();
    }
}

/* 10^4 bursts from outside into a runtime going idle: every burst must be run by workers. */
static void idle_busy_idle_cycles(unsigned workers, bool disable_steal)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    cfg.disable_steal = disable_steal;
    mp_runtime *rt = test_runtime_with(&cfg);
    enum { CYCLES = 10000, BURST = 4 };
    one tasks[BURST];
    _Atomic int done = 0, released = 0;
    uint64_t rng = test_seed();
    for (int c = 0; c < CYCLES; c++) {
        int burst = 1 + (int)(test_rand(&rng) % BURST);
        for (int i = 0; i < burst; i++) {
            mp_task_init(&tasks[i].task, &one_vt);
            tasks[i].counter = &done;
            tasks[i].released = &released;
            cr_assert_eq(mp_spawn(rt, &tasks[i].task), 0);
        }
        /* A header may be reused once it is released, not merely once it has run. */
        wait_count(&released, burst);
        cr_assert_eq(atomic_load(&done), burst);
        atomic_store(&done, 0);
        atomic_store(&released, 0);
        /* Back to idle before the next burst, most of the time; sometimes not at all, so
         * that bursts also land on workers that are on their way to sleep. */
        if (test_rand(&rng) % 4)
            wait_all_parked(rt);
    }
    /* The last task's worker counts its poll just after the release we waited for. */
    mp_stats s;
    for (int tries = 0; tries < 10000; tries++) {
        mp_runtime_stats_get(rt, &s);
        if (s.total.polled >= s.total.spawned)
            break;
        sched_yield();
    }
    cr_assert_eq(s.total.polled, s.total.spawned, "every task polled by a worker, once");
    cr_assert_gt(s.total.parks, CYCLES / 2, "workers really went to sleep between bursts");
    if (workers > 1) /* a lone worker sleeps in the loop, never on its futex */
        cr_assert_gt(s.wake_latency_ns, 0, "woken workers measured their wake-ups");
    mp_runtime_free(rt);
}

Test(worker, idle_busy_idle_cycles_lose_no_wakeup, .timeout = 120)
{
    idle_busy_idle_cycles(2, false);
}

/* A lone worker never has anyone to steal from, but must still park as the last searcher and
 * re-check the queues (a task pushed while it was parking was once lost this way). */
Test(worker, idle_busy_idle_cycles_one_worker, .timeout = 120)
{
    idle_busy_idle_cycles(1, false);
}

Test(worker, idle_busy_idle_cycles_without_stealing, .timeout = 120)
{
    idle_busy_idle_cycles(2, true);
}

/* The driver's rule for waking a helper after an I/O turn (drive()). */
Test(worker, a_helper_is_woken_only_for_a_backlog_longer_than_a_wake_up, .timeout = 10)
{
    const uint64_t fresh = 1000000; /* sampled 1 ms ago */
    cr_assert_not(mp__helper_pays(0, 1000, 0, fresh), "nothing to share");
    cr_assert_not(mp__helper_pays(1, 1000, 0, fresh), "one task is the driver's next poll");
    cr_assert(mp__helper_pays(2, 1000, 0, fresh), "no wake-up measured yet: Tokio's rule");
    cr_assert(mp__helper_pays(2, 0, 50000, fresh), "no time per poll measured yet: Tokio's rule");
    cr_assert_not(mp__helper_pays(2, 1000, 50000, fresh),
                  "2 us of work, 50 us to wake: run it alone");
    cr_assert_not(mp__helper_pays(49, 1000, 50000, fresh));
    cr_assert(mp__helper_pays(50, 1000, 50000, fresh), "the backlog outlasts the wake-up");
    cr_assert(mp__helper_pays(1000, 1000, MP__WAKE_NS_MAX, fresh),
              "1 ms of backlog always gets help");
    cr_assert(mp__helper_pays(2, 1000, MP__WAKE_NS_MAX, MP__WAKE_NS_TTL + 1),
              "a stale estimate is not trusted: wake one, which measures again");
    cr_assert_not(mp__helper_pays(1, 1000, MP__WAKE_NS_MAX, MP__WAKE_NS_TTL + 1));
}

Test(worker, the_wake_latency_average_follows_its_samples_and_is_capped, .timeout = 10)
{
    cr_assert_eq(mp__wake_ns_update(0, 40000), 40000, "the first sample is the average");
    uint64_t avg = 40000;
    for (int i = 0; i < 100; i++)
        avg = mp__wake_ns_update(avg, 8000);
    cr_assert_lt(avg, 8100, "converges on the samples: %llu", (unsigned long long)avg);
    cr_assert_geq(avg, 8000);
    cr_assert_eq(mp__wake_ns_update(0, 10 * (uint64_t)MP__WAKE_NS_MAX), MP__WAKE_NS_MAX,
                 "one stalled wake-up counts as the cap");
    for (int i = 0; i < 1000; i++)
        avg = mp__wake_ns_update(avg, UINT64_MAX);
    cr_assert_leq(avg, MP__WAKE_NS_MAX, "the average never passes the cap");
}

Test(worker, idle_runtime_makes_no_wakeups, .timeout = 30)
{
    mp_runtime *rt = test_runtime(4);
    _Atomic int done = 0;
    one tasks[64];
    for (int i = 0; i < 64; i++) {
        mp_task_init(&tasks[i].task, &one_vt);
        tasks[i].released = NULL;
        tasks[i].counter = &done;
        mp_spawn(rt, &tasks[i].task);
    }
    wait_count(&done, 64);
    wait_all_parked(rt);
    /* Let the last worker finish parking (it leaves the unparked count before it counts its
     * park and blocks, and may return once for a notification sent just before): idle means
     * the counters stopped moving. A runtime that never settles fails here. */
    mp_stats before, after;
    int settled = 0;
    for (int tries = 0; tries < 50 && !settled; tries++) {
        mp_runtime_stats_get(rt, &before);
        sleep_ms(200);
        mp_runtime_stats_get(rt, &after);
        settled =
            after.total.parks == before.total.parks && after.total.unparks == before.total.unparks;
    }
    cr_assert(settled, "workers kept waking for 10 s after the work was done");
    mp_runtime_stats_get(rt, &before);
    sleep_ms(1000);
    mp_runtime_stats_get(rt, &after);
    cr_assert_eq(after.total.unparks, before.total.unparks, "a worker woke while idle");
    cr_assert_eq(after.total.parks, before.total.parks);
    cr_assert_eq(after.total.polled, before.total.polled);
    mp_runtime_free(rt);
}

Test(worker, workers_start_lazily, .timeout = 30)
{
    mp_runtime *rt = test_runtime(4);
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert_eq(s.workers_started, 0, "no thread before there is work");
    _Atomic int done = 0;
    one t;
    mp_task_init(&t.task, &one_vt);
    t.released = NULL;
    t.counter = &done;
    mp_spawn(rt, &t.task);
    wait_count(&done, 1);
    mp_runtime_stats_get(rt, &s);
    cr_assert_geq(s.workers_started, 1);
    cr_assert_leq(s.workers_started, 2, "one task needs one worker (and its searcher)");
    mp_runtime_free(rt);
}

/* Two tasks that wake each other forever, on one worker: a task spawned from outside must
 * still run (the global queue is checked every global_interval polls, LIFO included). */
typedef struct pinger {
    mp_task task;
    struct pinger *peer;
    _Atomic bool *stop;
    _Atomic bool *both_spawned;
    _Atomic long *polls;
} pinger;

static mp_poll pinger_poll(mp_task *t, mp_context *cx)
{
    pinger *p = mp_container_of(t, pinger, task);
    if (!atomic_load(p->both_spawned))
        return mp_yield(cx); /* its peer is not a task yet: nothing to wake */
    atomic_fetch_add(p->polls, 1);
    if (atomic_load(p->stop))
        return MP_READY;
    mp_waker w = {.vt = &mp__task_waker_vt, .data = &p->peer->task};
    mp_waker_wake_by_ref(&w);
    return MP_PENDING;
}

static const mp_task_vtable pinger_vt = {.poll = pinger_poll};

Test(worker, ping_pong_on_lifo_does_not_starve_the_global_queue, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    _Atomic bool stop = false, both = false;
    _Atomic long polls = 0;
    pinger a, b;
    mp_task_init(&a.task, &pinger_vt);
    mp_task_init(&b.task, &pinger_vt);
    a.peer = &b, b.peer = &a;
    a.stop = b.stop = &stop;
    a.both_spawned = b.both_spawned = &both;
    a.polls = b.polls = &polls;
    cr_assert_eq(mp_spawn_joinable(rt, &a.task), 0);
    cr_assert_eq(mp_spawn_joinable(rt, &b.task), 0);
    atomic_store(&both, true);
    while (atomic_load(&polls) < 10000)
        sched_yield();
    _Atomic int done = 0;
    one t;
    mp_task_init(&t.task, &one_vt);
    t.released = NULL;
    t.counter = &done;
    cr_assert_eq(mp_spawn(rt, &t.task), 0);
    wait_count(&done, 1); /* never helped by this thread: only the worker can run it */
    atomic_store(&stop, true);
    mp_waker w = {.vt = &mp__task_waker_vt, .data = &a.task};
    mp_waker_wake_by_ref(&w);
    mp_waker_wake_by_ref(&(mp_waker){.vt = &mp__task_waker_vt, .data = &b.task});
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(mp_join(&b.task), 0);
    mp_worker_stats ws;
    mp_runtime_worker_stats(rt, 0, &ws);
    cr_assert_gt(ws.lifo_hits, 0);
    cr_assert_lt(ws.lifo_hits, ws.polled, "LIFO streaks are capped");
    mp_runtime_free(rt);
}

/* A task that spawns many children on a worker: another worker must steal some. */
typedef struct spawner {
    mp_task task;
    one *kids;
    int n;
    _Atomic int finished;
    _Atomic int released;
} spawner;

static mp_poll spawner_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    spawner *s = mp_container_of(t, spawner, task);
    for (int i = 0; i < s->n; i++)
        cr_assert_eq(mp_spawn(mp_runtime_current(), &s->kids[i].task), 0);
    /* Keep this worker busy so that the other one has to steal. */
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
    atomic_store(&s->finished, 1);
    return MP_READY;
}

static void spawner_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, spawner, task)->released, 1);
}

static const mp_task_vtable spawner_vt = {.poll = spawner_poll, .release = spawner_release};

/* Spawn (detached, never helped by this thread) a task that spawns 100 children on its
 * worker and then stays busy; return once all have run. */
static void run_spawner(mp_runtime *rt)
{
    enum { KIDS = 100 };
    one kids[KIDS];
    _Atomic int done = 0, released = 0;
    for (int i = 0; i < KIDS; i++) {
        mp_task_init(&kids[i].task, &one_vt);
        kids[i].released = &released;
        kids[i].counter = &done;
    }
    spawner s = {.kids = kids, .n = KIDS};
    mp_task_init(&s.task, &spawner_vt);
    cr_assert_eq(mp_spawn(rt, &s.task), 0);
    /* The headers are on this stack: return only once the runtime has released them all. */
    wait_count(&released, KIDS);
    wait_count(&s.released, 1);
    cr_assert_eq(atomic_load(&done), KIDS);
    cr_assert_eq(atomic_load(&s.finished), 1);
}

Test(worker, idle_worker_steals_from_a_busy_one, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    run_spawner(rt);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_gt(st.total.steals, 0);
    cr_assert_gt(st.total.stolen, 0);
    mp_runtime_free(rt);
}

/* A worker that fetches from the global queue takes several tasks at once and polls the
 * first; the others wait in its ring, where an idle worker steals them while that poll runs
 * long. The blocker below is the first of a batch of eight spawned from outside (a worker
 * takes at least four at a time, so the worker that polls it holds three more) and runs until
 * the seven others have all run: they can only, if the other worker can reach the three.
 * Kept where only their worker could take them, they waited for the blocker to end. The
 * blocker gives up after 10 s, so that the test fails rather than hangs. */
enum { BATCHED = 7 };

static _Atomic int batched_done;
static _Atomic int batched_seen_by_blocker;
static _Atomic bool blocker_done;

static mp_poll blocker_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx; /* the vtable's signature */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (atomic_load(&batched_done) < BATCHED && now.tv_sec - start.tv_sec < 10);
    atomic_store(&batched_seen_by_blocker, atomic_load(&batched_done));
    atomic_store(&blocker_done, true);
    return MP_READY;
}

static const mp_task_vtable blocker_vt = {.poll = blocker_poll};

Test(worker, tasks_fetched_with_a_long_poll_are_stolen_by_an_idle_worker, .timeout = 60)
{
    mp_runtime *rt = test_runtime(2);
    static mp_task blocker;
    static one quick[BATCHED];
    mp_task *all[1 + BATCHED] = {&blocker};
    mp_task_init(&blocker, &blocker_vt);
    for (int i = 0; i < BATCHED; i++) {
        mp_task_init(&quick[i].task, &one_vt);
        quick[i].counter = &batched_done;
        all[1 + i] = &quick[i].task;
    }
    /* One push into the global queue: the blocker is the first task any worker fetches. */
    cr_assert_eq(mp_spawn_batch(rt, all, 1 + BATCHED), 1 + BATCHED);
    while (!atomic_load(&blocker_done))
        sched_yield();
    wait_count(&batched_done, BATCHED);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&batched_seen_by_blocker), BATCHED,
                 "%d of the tasks fetched with the blocker ran while it did",
                 atomic_load(&batched_seen_by_blocker));
}

typedef struct yielder {
    mp_task task;
    int left;
    _Atomic int finished;
    _Atomic int *last; /* which yielder polled last */
    int id;
    _Atomic int *alternations;
} yielder;

static mp_poll yielder_poll(mp_task *t, mp_context *cx)
{
    yielder *y = mp_container_of(t, yielder, task);
    if (atomic_exchange(y->last, y->id) != y->id)
        atomic_fetch_add(y->alternations, 1);
    if (y->left-- > 0)
        return mp_yield(cx);
    atomic_store(&y->finished, 1);
    return MP_READY;
}

static const mp_task_vtable yielder_vt = {.poll = yielder_poll};

Test(worker, budget_ends_ticks_and_yield_goes_to_the_back, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    yielder y[2];
    _Atomic int last = -1, alternations = 0;
    mp_task *list[2];
    for (int i = 0; i < 2; i++) {
        memset(&y[i], 0, sizeof y[i]);
        mp_task_init(&y[i].task, &yielder_vt);
        y[i].left = 1000;
        y[i].id = i;
        y[i].last = &last;
        y[i].alternations = &alternations;
        list[i] = &y[i].task;
    }
    /* One batch, never helped by this thread: the one worker runs every poll. */
    cr_assert_eq(mp_spawn_batch(rt, list, 2), 2);
    while (!atomic_load(&y[0].finished) || !atomic_load(&y[1].finished))
        sched_yield();
    cr_assert_gt(atomic_load(&alternations), 1900, "yielding tasks take turns");
    /* A task's last body runs before its poll returns and the worker counts it. */
    mp_worker_stats ws;
    for (int tries = 0; tries < 10000; tries++) {
        mp_runtime_worker_stats(rt, 0, &ws);
        if (ws.polled >= 2002)
            break;
        sched_yield();
    }
    cr_assert_eq(ws.polled, 2002);
    cr_assert_geq(ws.budget_exhausted, ws.polled / MP__BUDGET - 1);
    cr_assert_eq(ws.lifo_hits, 0, "a yielded task goes to the ring, never the LIFO slot");
    mp_runtime_free(rt);
}

Test(worker, disable_lifo_and_steal_knobs, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.disable_lifo = true;
    cfg.disable_steal = true;
    cfg.global_interval = 7;
    mp_runtime *rt = test_runtime_with(&cfg);
    run_spawner(rt);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.total.lifo_hits, 0);
    cr_assert_eq(st.total.steals, 0);
    for (unsigned i = 0; i < 2; i++)
        cr_assert_eq(rt->workers[i].global_interval, 7);
    mp_runtime_free(rt);
}

/* disable_steal: a task spawns 8 children into its own worker's queues, then keeps that worker
 * for 100 ms. Nobody else may take the children, so nobody else should be woken for them; the
 * other workers used to wake each other in a loop (about 530,000 parks in those 100 ms), each
 * parking as the last searcher, seeing the busy worker's ring non-empty, and waking the next.
 * A count, not a time: a handful of parks is what waking for work nobody can take costs. */
typedef struct hog {
    mp_task task;
    one children[8];
    _Atomic int ran;
    _Atomic int *done;
} hog;

static mp_poll hog_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    hog *h = mp_container_of(t, hog, task);
    for (int i = 0; i < 8; i++) {
        mp_task_init(&h->children[i].task, &one_vt);
        h->children[i].counter = &h->ran;
        h->children[i].released = NULL;
        cr_assert_eq(mp_spawn(mp_runtime_current(), &h->children[i].task), 0);
    }
    sleep_ms(100);
    atomic_store(h->done, 1);
    return MP_READY;
}

static const mp_task_vtable hog_vt = {.poll = hog_poll};

Test(worker, without_stealing_busy_workers_queues_wake_nobody, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 4;
    cfg.disable_steal = true;
    mp_runtime *rt = test_runtime_with(&cfg);
    static hog h;
    _Atomic int done = 0;
    memset(&h, 0, sizeof h);
    h.done = &done;
    mp_task_init(&h.task, &hog_vt);
    mp_stats before, after;
    mp_runtime_stats_get(rt, &before);
    cr_assert_eq(mp_spawn(rt, &h.task), 0);
    while (!atomic_load(&done))
        sleep_ms(1);
    mp_runtime_stats_get(rt, &after);
    while (atomic_load(&h.ran) < 8) /* they run once their worker is free again */
        sleep_ms(1);
    cr_assert_lt(after.total.parks - before.total.parks, 200, "%llu parks in 100 ms",
                 (unsigned long long)(after.total.parks - before.total.parks));
    mp_runtime_free(rt);
}

/* MP_SHUTDOWN_CANCEL while rings overflow (frequent in the 4-slot build, test_worker-q4):
 * every task either completes or has its cancel callback run, exactly once, and every one is
 * released. A ring that overflowed into the closed global queue used to drop its half on the
 * assumption that the registry would cancel those tasks; tasks that had only yielded were in
 * no registry, and their joins blocked for ever (about one run in five on 256 slots). */
typedef struct overflower {
    mp_task task;
    int yields;
    _Atomic int *runs, *cancels, *releases;
} overflower;

static mp_poll overflower_poll(mp_task *t, mp_context *cx)
{
    overflower *y = mp_container_of(t, overflower, task);
    if (y->yields-- > 0)
        return mp_yield(cx);
    atomic_fetch_add(y->runs, 1);
    return MP_READY;
}

static void overflower_cancel(mp_task *t)
{
    atomic_fetch_add(mp_container_of(t, overflower, task)->cancels, 1);
}

static void overflower_release(mp_task *t)
{
    atomic_fetch_add(mp_container_of(t, overflower, task)->releases, 1);
}

static const mp_task_vtable overflower_vt = {
    .poll = overflower_poll, .cancel = overflower_cancel, .release = overflower_release};

Test(worker, shutdown_while_rings_overflow_loses_no_task, .timeout = 120)
{
    enum { N = 20000, ROUNDS = 8 };
    static overflower y[N];
    uint64_t rng = test_seed();
    for (int round = 0; round < ROUNDS; round++) {
        mp_runtime *rt = test_runtime(1 + (unsigned)round % 2);
        _Atomic int runs = 0, cancels = 0, releases = 0;
        for (int i = 0; i < N; i++) {
            mp_task_init(&y[i].task, &overflower_vt);
            y[i].yields = 50;
            y[i].runs = &runs;
            y[i].cancels = &cancels;
            y[i].releases = &releases;
            cr_assert_eq(mp_spawn_joinable(rt, &y[i].task), 0);
        }
        usleep(1000 + test_rand(&rng) % 3000);
        cr_assert_eq(mp_runtime_shutdown(rt), 0);
        int ok = 0, cancelled = 0;
        for (int i = 0; i < N; i++) {
            int rc = mp_join(&y[i].task);
            cr_assert(rc == 0 || rc == -ECANCELED, "round %d task %d: %d", round, i, rc);
            rc == 0 ? ok++ : cancelled++;
        }
        cr_assert_eq(ok, atomic_load(&runs), "round %d", round);
        cr_assert_eq(cancelled, atomic_load(&cancels), "round %d", round);
        cr_assert_eq(atomic_load(&releases), N, "round %d", round);
        mp_runtime_free(rt);
    }
}

/* Yields are deferred: a yielding task waits until its worker has run what else it had (or
 * the tick ends), and a batch of them costs one notification, not one per yield. It still
 * starves nobody: with tasks yielding forever on the one worker, a task spawned from outside
 * (global queue) and one spawned on the worker (LIFO slot) both run. */
typedef struct forever_yielder {
    mp_task task;
    _Atomic bool *stop;
    _Atomic long *polls;
    one *child; /* spawned from the worker at the 1000th poll, once */
} forever_yielder;

static mp_poll forever_yielder_poll(mp_task *t, mp_context *cx)
{
    forever_yielder *y = mp_container_of(t, forever_yielder, task);
    long n = atomic_fetch_add(y->polls, 1);
    if (atomic_load(y->stop))
        return MP_READY;
    if (n == 1000 && y->child != NULL)
        cr_assert_eq(mp_spawn(mp_runtime_current(), &y->child->task), 0);
    return mp_yield(cx);
}

static const mp_task_vtable forever_yielder_vt = {.poll = forever_yielder_poll};

Test(worker, yields_are_deferred_and_starve_nobody, .timeout = 60)
{
    mp_runtime *rt = test_runtime(1);
    enum { N = 8 };
    forever_yielder y[N];
    mp_task *list[N];
    _Atomic bool stop = false;
    _Atomic long polls = 0;
    _Atomic int local_done = 0, outside_done = 0;
    one local, outside;
    mp_task_init(&local.task, &one_vt);
    local.released = NULL;
    local.counter = &local_done;
    mp_task_init(&outside.task, &one_vt);
    outside.released = NULL;
    outside.counter = &outside_done;
    for (int i = 0; i < N; i++) {
        mp_task_init(&y[i].task, &forever_yielder_vt);
        y[i].stop = &stop;
        y[i].polls = &polls;
        y[i].child = NULL;
        list[i] = &y[i].task;
    }
    /* Every yielder polls the shared count: whichever makes it reach 1000 spawns the child. */
    for (int i = 0; i < N; i++)
        y[i].child = &local;
    cr_assert_eq(mp_spawn_batch(rt, list, N), N);
    wait_count(&local_done, 1);
    while (atomic_load(&polls) < 20000)
        sched_yield();
    cr_assert_eq(mp_spawn(rt, &outside.task), 0);
    wait_count(&outside_done, 1);
    /* Internal counters (written by the worker, read racily here: a lower bound is enough). */
    uint64_t yields = atomic_load(&rt->workers[0].stats.yields_deferred);
    uint64_t flushes = atomic_load(&rt->workers[0].stats.deferred_flushes);
    atomic_store(&stop, true);
    mp_runtime_free(rt); /* before asserting: the tasks live in this frame */
    cr_assert_geq(yields, 19000, "yields were deferred (%llu)", (unsigned long long)yields);
    /* Eight yielders: a flush carries about eight, and notifies at most once. With the ring
     * shrunk below that (the -q4 build), half of each flush overflows to the global queue
     * and comes back in smaller batches: still fewer than one per yield. */
    uint64_t per_flush = MP_QUEUE_CAPACITY >= 2 * N ? 4 : 1;
    cr_assert_lt(flushes * per_flush, yields, "%llu flushes for %llu yields",
                 (unsigned long long)flushes, (unsigned long long)yields);
}

/* A worker's slot is set up in memory that may hold an earlier runtime's workers (the stress
 * suite makes runtimes one after another, with their tasks at the same addresses): no owner
 * field may keep what was there. A stale join-in-place target matched a live task and
 * completed it as joined under a joiner that then dropped its handle again. */
Test(worker, init_leaves_nothing_of_the_memory_before, .timeout = 10)
{
    mp_runtime *rt = test_runtime(1);
    mp__worker *w = aligned_alloc(MP__CACHE_LINE, sizeof *w);
    cr_assert_not_null(w);
    memset(w, 0xa5, sizeof *w);
    mp__worker_init(w, rt, 0);
    cr_assert_null(w->lifo);
    cr_assert_null(w->orphans);
    cr_assert_null(w->deferred);
    cr_assert_null(w->deferred_tail);
    cr_assert_null(w->joining);
    cr_assert_null(w->joined);
    cr_assert_not(w->searching || w->parking || w->driving);
    cr_assert(mp__queue_is_empty(&w->queue));
    free(w);
    mp_runtime_free(rt);
}
