/* Tests of runtime/src/task.c: wakes in each lifecycle state, join on and off workers,
 * cancellation and release (the state word's transitions are test_state.c's). */
#include <criterion/criterion.h>
#include <signal.h>

#include "internal.h"
#include "test_util.h"

#define R MP__T_RUNNING
#define S MP__T_SCHEDULED
#define N MP__T_NOTIFIED

static uint64_t st(mp_task *t)
{
    return atomic_load(&t->state);
}

/* Behaviour on a runtime. */

typedef struct parked_task {
    mp_task task;
    _Atomic int polls;
    _Atomic int cancels;
    _Atomic int releases;
    mp_waker waker; /* kept from the first poll */
    _Atomic bool have_waker;
    _Atomic int finish_after; /* READY on this poll */
    _Atomic bool spin_in_poll;
    _Atomic bool in_poll;
} parked_task;

static mp_poll parked_poll(mp_task *t, mp_context *cx)
{
    parked_task *p = mp_container_of(t, parked_task, task);
    int n = atomic_fetch_add(&p->polls, 1) + 1;
    if (!atomic_load(&p->have_waker)) {
        p->waker = mp_waker_clone(mp_context_waker(cx));
        atomic_store(&p->have_waker, true);
    }
    atomic_store(&p->in_poll, true);
    while (atomic_load(&p->spin_in_poll))
        sched_yield();
    atomic_store(&p->in_poll, false);
    return n >= atomic_load(&p->finish_after) ? MP_READY : MP_PENDING;
}

static void parked_cancel(mp_task *t)
{
    parked_task *p = mp_container_of(t, parked_task, task);
    atomic_fetch_add(&p->cancels, 1);
}

static void parked_release(mp_task *t)
{
    parked_task *p = mp_container_of(t, parked_task, task);
    atomic_fetch_add(&p->releases, 1);
}

static const mp_task_vtable parked_vt = {
    .poll = parked_poll, .cancel = parked_cancel, .release = parked_release};

static void parked_init(parked_task *p, int finish_after)
{
    memset(p, 0, sizeof *p);
    mp_task_init(&p->task, &parked_vt);
    atomic_store(&p->finish_after, finish_after);
}

static void wait_for(_Atomic int *v, int want)
{
    while (atomic_load(v) < want)
        sched_yield();
}

Test(task, wake_while_idle_scheduled_running_complete, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    parked_task p;
    parked_init(&p, 3);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    wait_for(&p.polls, 1);
    while (st(&p.task) & R)
        sched_yield();
    /* Idle: one wake, one more poll. */
    mp_waker_wake_by_ref(&p.waker);
    wait_for(&p.polls, 2);
    /* Poll 2 has begun, and may not have returned: asking for a spin before it has would keep
     * it in its poll, and this thread waiting for it to leave (a hang under load, 1 run in
     * ~300). */
    while (st(&p.task) & R)
        sched_yield();
    /* Running: a wake sets NOTIFIED and the task runs exactly once more after this poll. */
    atomic_store(&p.spin_in_poll, true);
    mp_waker_wake_by_ref(&p.waker); /* idle -> scheduled -> poll 3 begins and spins */
    while (!atomic_load(&p.in_poll))
        sched_yield();
    cr_assert_eq(atomic_load(&p.polls), 3);
    atomic_store(&p.finish_after, 4);
    mp_waker_wake_by_ref(&p.waker);
    mp_waker_wake_by_ref(&p.waker);
    cr_assert(st(&p.task) & N);
    atomic_store(&p.spin_in_poll, false);
    cr_assert_eq(mp_join(&p.task), 0);
    cr_assert_eq(atomic_load(&p.polls), 4, "two wakes while running: one more poll");
    /* Complete: wakes do nothing. */
    mp_waker_wake_by_ref(&p.waker);
    cr_assert_eq(atomic_load(&p.releases), 0, "the kept waker holds a reference");
    mp_waker_drop(&p.waker);
    cr_assert_eq(atomic_load(&p.releases), 1);
    cr_assert_eq(atomic_load(&p.polls), 4);
    mp_runtime_free(rt);
}

Test(task, wake_while_scheduled_runs_once, .timeout = 30)
{
    /* One worker, blocked on a spinning task, so that the second task stays queued. */
    mp_runtime *rt = test_runtime(1);
    parked_task blocker, p;
    parked_init(&blocker, 1);
    atomic_store(&blocker.spin_in_poll, true);
    parked_init(&p, 2);
    cr_assert_eq(mp_spawn_joinable(rt, &blocker.task), 0);
    while (!atomic_load(&blocker.in_poll))
        sched_yield();
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0); /* queued behind the blocker */
    cr_assert(st(&p.task) & S);
    p.waker = (mp_waker){.vt = &mp__task_waker_vt, .data = &p.task};
    mp_waker_wake_by_ref(&p.waker);
    mp_waker_wake_by_ref(&p.waker);
    cr_assert_eq(st(&p.task) & (S | R | N), S, "still just scheduled once");
    atomic_store(&blocker.spin_in_poll, false);
    cr_assert_eq(mp_join(&blocker.task), 0);
    wait_for(&p.polls, 1);
    mp_task_cancel(&p.task);
    cr_assert_eq(mp_join(&p.task), -ECANCELED);
    cr_assert_eq(atomic_load(&p.polls), 1, "the queued wakes caused no extra poll");
    cr_assert_eq(atomic_load(&p.cancels), 1);
    mp_waker_drop(&p.waker);
    mp_waker_drop(&blocker.waker);
    mp_runtime_free(rt);
}

Test(task, cancel_idle_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    parked_task p;
    parked_init(&p, 1000);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    wait_for(&p.polls, 1);
    mp_task_cancel(&p.task);
    cr_assert_eq(mp_join(&p.task), -ECANCELED);
    cr_assert_eq(atomic_load(&p.cancels), 1);
    cr_assert_eq(atomic_load(&p.polls), 1);
    mp_task_cancel(&p.task); /* complete: no-op */
    cr_assert_eq(atomic_load(&p.cancels), 1);
    mp_waker_drop(&p.waker);
    cr_assert_eq(atomic_load(&p.releases), 1);
    mp_runtime_free(rt);
}

Test(task, cancel_running_task_finishes_the_poll_first, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    parked_task p;
    parked_init(&p, 1000);
    atomic_store(&p.spin_in_poll, true);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    while (!atomic_load(&p.in_poll))
        sched_yield();
    mp_task_cancel(&p.task);
    cr_assert_eq(atomic_load(&p.cancels), 0, "not while it runs");
    atomic_store(&p.spin_in_poll, false);
    cr_assert_eq(mp_join(&p.task), -ECANCELED);
    cr_assert_eq(atomic_load(&p.cancels), 1);
    mp_waker_drop(&p.waker);
    mp_runtime_free(rt);
}

Test(task, spawn_refuses_a_task_twice)
{
    mp_runtime *rt = test_runtime(1);
    parked_task p;
    parked_init(&p, 1);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    cr_assert_eq(mp_spawn(rt, &p.task), -EINVAL);
    cr_assert_eq(mp_join(&p.task), 0);
    mp_waker_drop(&p.waker);
    mp_runtime_free(rt);
}

/* Join: from outside, on a worker, nested, and from a task with mp_join_poll. */

typedef struct fib_task {
    mp_task task;
    int n;
    long result;
} fib_task;

static const mp_task_vtable fib_vt;

static mp_poll fib_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    fib_task *f = mp_container_of(t, fib_task, task);
    if (f->n < 2) {
        f->result = f->n;
        return MP_READY;
    }
    fib_task a, b;
    mp_task_init(&a.task, &fib_vt);
    mp_task_init(&b.task, &fib_vt);
    a.n = f->n - 1;
    b.n = f->n - 2;
    /* Spawned from a worker: into its LIFO slot; mp_join helps until each completes. */
    cr_assert_eq(mp_spawn_joinable(mp_runtime_current(), &a.task), 0);
    cr_assert_eq(mp_spawn_joinable(mp_runtime_current(), &b.task), 0);
    cr_assert_eq(mp_join(&b.task), 0);
    cr_assert_eq(mp_join(&a.task), 0);
    f->result = a.result + b.result;
    return MP_READY;
}

static const mp_task_vtable fib_vt = {.poll = fib_poll};

/* ThreadSanitizer's cost grows faster than the tree under this nesting (fib(20): 2 GiB and
 * 9 s on an idle machine, over 30 s on a loaded one, near the timeout; fib(18): 0.35 GiB and
 * 1.7 s): under it the tree is fib(18)'s, still thousands of levels deep. */
#ifdef __SANITIZE_THREAD__
#define FIB_N      18
#define FIB_RESULT 2584
#else
#define FIB_N      20
#define FIB_RESULT 6765
#endif

Test(task, nested_join_on_workers, .timeout = 60)
{
    /* Each join that helps runs tasks on the joiner's stack, and a helper that runs the oldest
     * task of its ring nests a whole other subtree: the depth is bounded only by the number of
     * tasks not complete (each level is a distinct running task), here up to 21,891. At the
     * default 8 MiB, ASan's larger frames overflowed in about one run in eight; 256 MiB
     * (reserved, not committed) holds the worst case with room to spare. See mp_join in
     * magpie.h. */
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.stack_size = (size_t)256 << 20;
    mp_runtime *rt = test_runtime_with(&cfg);
    fib_task f;
    mp_task_init(&f.task, &fib_vt);
    f.n = FIB_N;
    cr_assert_eq(mp_block_on(rt, &f.task), 0);
    cr_assert_eq(f.result, FIB_RESULT);
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert_gt(s.total.lifo_hits, 0, "spawn from a worker goes to its LIFO slot");
    cr_assert_eq(s.live_tasks, 0);
    mp_runtime_free(rt);
}

typedef struct awaiter {
    mp_task task;
    fib_task child;
    bool spawned;
    int child_result;
} awaiter;

static mp_poll awaiter_poll(mp_task *t, mp_context *cx)
{
    awaiter *a = mp_container_of(t, awaiter, task);
    if (!a->spawned) {
        mp_task_init(&a->child.task, &fib_vt);
        a->child.n = 15;
        cr_assert_eq(mp_spawn_joinable(mp_runtime_current(), &a->child.task), 0);
        a->spawned = true;
    }
    return mp_join_poll(&a->child.task, cx, &a->child_result);
}

static const mp_task_vtable awaiter_vt = {.poll = awaiter_poll};

Test(task, join_poll_from_a_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    awaiter a = {0};
    mp_task_init(&a.task, &awaiter_vt);
    cr_assert_eq(mp_block_on(rt, &a.task), 0);
    cr_assert_eq(a.child_result, 0);
    cr_assert_eq(a.child.result, 610);
    mp_runtime_free(rt);
}

static void add_one(void *arg)
{
    atomic_fetch_add((_Atomic int *)arg, 1);
}

Test(task, spawn_fn_joined_and_detached, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    _Atomic int n = 0;
    mp_task *h;
    cr_assert_eq(mp_spawn_fn(rt, add_one, &n, &h), 0);
    cr_assert_eq(mp_join(h), 0);
    cr_assert_eq(atomic_load(&n), 1);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(mp_spawn_fn(rt, add_one, &n, NULL), 0);
    while (atomic_load(&n) < 1001)
        sched_yield();
    mp_runtime_free(rt); /* ASan: every detached task's storage was released */
}

/* One failed thread start must not leave a dead runtime: with one worker slot whose first
 * pthread_create fails, the spawn that needed it fails with the error (the task was never
 * queued and is still the caller's), and the next spawn starts the slot and runs. It used to
 * return 0 and never run a detached task. */

Test(task, failed_first_worker_start_fails_the_spawn_and_is_retried, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    mp__test_fail_spawn_nth(1);
    mp_runtime *rt = test_runtime_with(&cfg);
    _Atomic int n = 0;
    cr_assert_eq(mp_spawn_fn(rt, add_one, &n, NULL), -EAGAIN);
    fib_task f;
    mp_task_init(&f.task, &fib_vt);
    f.n = 1;
    cr_assert_eq(mp_block_on(rt, &f.task), 0);
    cr_assert_eq(f.result, 1);
    cr_assert_eq(mp_spawn_fn(rt, add_one, &n, NULL), 0);
    while (atomic_load(&n) < 1)
        sched_yield();
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert_eq(s.spawn_failures, 1);
    cr_assert_eq(s.workers_started, 1);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&n), 1);
}

/* A join from a thread that is not a worker helps only from its outermost level: a task it
 * polls inline that joins in turn blocks. A chain of 10^5 tasks, each joining the next with
 * mp_join, joined from mp_block_on on a thread with a 1 MiB stack: the old joiner ran the
 * chain inline, one level on top of the other, and overflowed. The workers nest the chain on
 * their own stacks (help until complete), which are sized for it here. */
typedef struct chain {
    mp_task task;
    unsigned depth;
} chain;

static const mp_task_vtable chain_vt;

static _Atomic bool chain_started;

static mp_poll chain_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    chain *c = mp_container_of(t, chain, task);
    atomic_store(&chain_started, true);
    if (c->depth == 0)
        return MP_READY;
    chain next;
    mp_task_init(&next.task, &chain_vt);
    next.depth = c->depth - 1;
    cr_assert_eq(mp_spawn_joinable(mp_runtime_current(), &next.task), 0);
    cr_assert_eq(mp_join(&next.task), 0);
    return MP_READY;
}

static const mp_task_vtable chain_vt = {.poll = chain_poll};

/* ThreadSanitizer records stacks of at most 65,536 frames and aborts past that: the
 * workers' nesting of a 10^5 chain is deeper, so under it the chain is 10^4 long. */
#ifdef __SANITIZE_THREAD__
#define CHAIN_DEPTH 10000
#else
#define CHAIN_DEPTH 100000
#endif

static void *join_chain(void *rt)
{
    chain root;
    mp_task_init(&root.task, &chain_vt);
    root.depth = (unsigned)test_env_long("MP_CHAIN_DEPTH", CHAIN_DEPTH);
    return (void *)(intptr_t)mp_block_on(rt, &root.task);
}

/* Holds a worker until released. */
typedef struct holder {
    mp_task task;
    _Atomic bool *hold;
    _Atomic int *inside;
} holder;

static mp_poll holder_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* the vtable's signature */
    holder *h = mp_container_of(t, holder, task);
    atomic_fetch_add(h->inside, 1);
    while (atomic_load(h->hold))
        sched_yield();
    return MP_READY;
}

static const mp_task_vtable holder_vt = {.poll = holder_poll};

Test(task, join_from_a_small_stack_thread_does_not_nest, .timeout = 120)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.stack_size = (size_t)1 << 30; /* reserved, not committed: 10^5 nested joins */
    mp_runtime *rt = test_runtime_with(&cfg);
    /* Both workers busy at first, so that the joiner starts the chain itself. */
    _Atomic bool hold = true;
    _Atomic int inside = 0;
    holder hd[2];
    for (int i = 0; i < 2; i++) {
        mp_task_init(&hd[i].task, &holder_vt);
        hd[i].hold = &hold;
        hd[i].inside = &inside;
        cr_assert_eq(mp_spawn_joinable(rt, &hd[i].task), 0);
        /* One at a time, so that each worker holds one. */
        while (atomic_load(&inside) < i + 1)
            sched_yield();
    }
    atomic_store(&chain_started, false);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)1 << 20);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, &attr, join_chain, rt), 0);
    pthread_attr_destroy(&attr);
    while (!atomic_load(&chain_started))
        sched_yield();
    usleep(50000); /* the old joiner ran the chain inline here, and overflowed */
    atomic_store(&hold, false);
    void *rc;
    pthread_join(th, &rc);
    cr_assert_eq((int)(intptr_t)rc, 0);
    /* The chain may complete before the holders do: they count as live until joined. */
    for (int i = 0; i < 2; i++)
        cr_assert_eq(mp_join(&hd[i].task), 0);
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert_eq(s.live_tasks, 0);
    mp_runtime_free(rt);
}

/* A plain thread wakes a task by reference, the wake sends it through the global queue to a
 * worker that polls it, and the thread wakes it again: the second wake writes the task's
 * queue link, which must come after the worker's writes to it (ThreadSanitizer saw the race
 * when the wake's CAS was release-only). */
typedef struct rewoken {
    mp_task task;
    _Atomic unsigned polls;
    mp_waker waker;
    _Atomic bool have_waker;
} rewoken;

static mp_poll rewoken_poll(mp_task *t, mp_context *cx)
{
    rewoken *r = mp_container_of(t, rewoken, task);
    if (!atomic_load(&r->have_waker)) {
        r->waker = mp_waker_clone(mp_context_waker(cx));
        atomic_store(&r->have_waker, true);
    }
    return atomic_fetch_add(&r->polls, 1) + 1 >= 20001 ? MP_READY : MP_PENDING;
}

static const mp_task_vtable rewoken_vt = {.poll = rewoken_poll};

Test(task, plain_thread_wakes_a_task_again_after_it_ran, .timeout = 60)
{
    mp_runtime *rt = test_runtime(2);
    rewoken r = {0};
    mp_task_init(&r.task, &rewoken_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &r.task), 0);
    while (!atomic_load(&r.have_waker))
        sched_yield();
    for (unsigned i = 1; i <= 20000; i++) {
        mp_waker_wake_by_ref(&r.waker);
        mp_waker_wake_by_ref(&r.waker); /* while queued or running: coalesced or NOTIFIED */
        while (atomic_load(&r.polls) <= i)
            sched_yield();
    }
    while (!mp_task_is_complete(&r.task))
        sched_yield();
    mp_waker_drop(&r.waker);
    cr_assert_eq(mp_join(&r.task), 0);
    mp_runtime_free(rt);
}

/* mp_join() right after a spawn on a worker: the task waits in the joiner's LIFO slot, runs at
 * once and, completing, drops the join handle in the same change of its state word. Every
 * way such a task can end goes through it: completing, cancelled before it ran, pending first
 * (then it completes the usual way), and joins nested inside it. */
typedef struct counted {
    mp_task task;
    int yields; /* PENDING (yielding) this many times, then READY */
    _Atomic int polls;
    _Atomic int cancels;
    _Atomic int releases;
    int rc;
    int releases_at_return; /* when mp_join() returned */
} counted;

static mp_poll counted_poll(mp_task *t, mp_context *cx)
{
    counted *c = mp_container_of(t, counted, task);
    return atomic_fetch_add(&c->polls, 1) < c->yields ? mp_yield(cx) : MP_READY;
}

static void counted_cancel(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, counted, task)->cancels, 1);
}

static void counted_release(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, counted, task)->releases, 1);
}

static const mp_task_vtable counted_vt = {
    .poll = counted_poll, .cancel = counted_cancel, .release = counted_release};

typedef struct in_place_root {
    mp_task task;
    counted done, cancelled, pending;
    fib_task fib;
    int fib_rc;
    bool on_worker;
    _Atomic int finished;
} in_place_root;

static void spawn_and_join(counted *c, int yields, bool cancel)
{
    memset(c, 0, sizeof *c);
    mp_task_init(&c->task, &counted_vt);
    c->yields = yields;
    c->rc = mp_spawn_joinable(mp_runtime_current(), &c->task);
    if (c->rc != 0)
        return;
    if (cancel)
        mp_task_cancel(&c->task);
    c->rc = mp_join(&c->task);
    c->releases_at_return = atomic_load(&c->releases);
}

static mp_poll in_place_root_poll(mp_task *t, mp_context *cx)
{
    (void)cx; /* completes in one poll */
    in_place_root *r = mp_container_of(t, in_place_root, task);
    r->on_worker = mp__tls_worker != NULL;
    spawn_and_join(&r->done, 0, false);
    spawn_and_join(&r->cancelled, 0, true);
    spawn_and_join(&r->pending, 1, false);
    mp_task_init(&r->fib.task, &fib_vt);
    r->fib.n = 12;
    r->fib_rc = mp_spawn_joinable(mp_runtime_current(), &r->fib.task);
    if (r->fib_rc == 0)
        r->fib_rc = mp_join(&r->fib.task);
    atomic_store(&r->finished, 1);
    return MP_READY;
}

static const mp_task_vtable in_place_root_vt = {.poll = in_place_root_poll};

Test(task, join_in_place_of_a_just_spawned_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1); /* nobody to steal the spawned tasks */
    in_place_root r;
    memset(&r, 0, sizeof r);
    mp_task_init(&r.task, &in_place_root_vt);
    /* Detached, not mp_block_on(): the main thread would run it inline, off the worker. */
    cr_assert_eq(mp_spawn(rt, &r.task), 0);
    wait_for(&r.finished, 1);
    mp_stats s;
    mp_runtime_stats_get(rt, &s);
    cr_assert(r.on_worker);

    cr_assert_eq(r.done.rc, 0);
    cr_assert_eq(atomic_load(&r.done.polls), 1);
    cr_assert_eq(r.done.releases_at_return, 1, "released once, before the join returned");

    cr_assert_eq(r.cancelled.rc, -ECANCELED);
    cr_assert_eq(atomic_load(&r.cancelled.polls), 0);
    cr_assert_eq(atomic_load(&r.cancelled.cancels), 1);
    cr_assert_eq(r.cancelled.releases_at_return, 1);

    cr_assert_eq(r.pending.rc, 0);
    cr_assert_eq(atomic_load(&r.pending.polls), 2);
    cr_assert_eq(r.pending.releases_at_return, 1);

    cr_assert_eq(r.fib_rc, 0);
    cr_assert_eq(r.fib.result, 144);

    /* done and cancelled, fib(12) itself, and in each of fib's 232 calls with children (of
     * 465) the join of b, spawned last and so in the LIFO slot (a went to the ring when b
     * came). The pending one completed the usual way. */
    cr_assert_eq(s.total.joins_in_place, 3 + 232, "joins_in_place %llu",
                 (unsigned long long)s.total.joins_in_place);
    mp_runtime_free(rt);
}

/* A shutdown while a task's poll joins on its worker (mp_join, helping meanwhile): the join
 * returns only once what it joins is done, so that the caller may free what that work writes.
 * It used to return -ECANCELED at once while the job still ran, and the job's late write hit
 * the freed memory (a heap-use-after-free under ASan). */
typedef struct late_job {
    _Atomic int started, finished;
    int *out;
} late_job;

static void late_job_fn(void *arg)
{
    late_job *j = arg;
    atomic_store(&j->started, 1);
    usleep(100 * 1000);
    *j->out = 42;
    atomic_store(&j->finished, 1);
}

/* The task that joins on a worker: a blocking job, or target when it is set. */
typedef struct worker_joiner {
    mp_task task;
    late_job job;
    mp_task *target;
    _Atomic int *target_started, *target_returned;
    _Atomic int joining, done;
    int result, finished_at_return, out_at_return;
} worker_joiner;

static mp_poll worker_joiner_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    worker_joiner *wj = mp_container_of(t, worker_joiner, task);
    if (wj->target) {
        while (!atomic_load(wj->target_started))
            sched_yield();
        atomic_store(&wj->joining, 1);
        wj->result = mp_join(wj->target);
        wj->finished_at_return = atomic_load(wj->target_returned);
    } else {
        int *out = malloc(sizeof *out);
        cr_assert_not_null(out);
        *out = 0;
        wj->job.out = out;
        mp_task *h;
        cr_assert_eq(mp_spawn_blocking(mp_runtime_current(), late_job_fn, &wj->job, &h), 0);
        while (!atomic_load(&wj->job.started))
            sched_yield();
        atomic_store(&wj->joining, 1);
        wj->result = mp_join(h);
        wj->finished_at_return = atomic_load(&wj->job.finished);
        wj->out_at_return = *out;
        free(out); /* as a caller may once its join has returned */
    }
    atomic_store(&wj->done, 1);
    return MP_READY;
}

static const mp_task_vtable worker_joiner_vt = {.poll = worker_joiner_poll};

static void shutdown_while_a_worker_joins_a_running_job(mp_shutdown_mode mode)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.shutdown_mode = mode;
    cfg.drain_timeout_ms = 5;
    mp_runtime *rt = test_runtime_with(&cfg);
    worker_joiner wj = {0};
    mp_task_init(&wj.task, &worker_joiner_vt);
    cr_assert_eq(mp_spawn(rt, &wj.task), 0);
    while (!atomic_load(&wj.joining))
        usleep(1000);
    usleep(5000); /* into mp_join's wait (it makes no difference to what must hold) */
    int rc = mp_runtime_shutdown(rt);
    cr_assert(rc == 0 || rc == -ETIMEDOUT, "shutdown: %d", rc);
    cr_assert(atomic_load(&wj.done), "the joining poll did not finish");
    /* The job had started: it is let finish, and the joiner sees 0, after its last write. */
    cr_assert_eq(wj.result, 0, "mp_join on a worker: %d while the job ran", wj.result);
    cr_assert(wj.finished_at_return, "mp_join returned before the job finished");
    cr_assert_eq(wj.out_at_return, 42);
    mp_runtime_free(rt);
}

Test(task, shutdown_cancel_while_a_worker_joins_a_running_job, .timeout = 30)
{
    shutdown_while_a_worker_joins_a_running_job(MP_SHUTDOWN_CANCEL);
}

Test(task, shutdown_drain_while_a_worker_joins_a_running_job, .timeout = 30)
{
    shutdown_while_a_worker_joins_a_running_job(MP_SHUTDOWN_DRAIN);
}

/* The joined task's poll runs on the other worker when shutdown comes: the join waits for that
 * poll, which returns MP_READY, so the joiner sees 0 (it used to see -ECANCELED at once, and
 * the task's completion then found it in an impossible state). */
typedef struct slow_task {
    mp_task task;
    _Atomic int started, go, returned;
} slow_task;

static mp_poll slow_task_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    slow_task *s = mp_container_of(t, slow_task, task);
    atomic_store(&s->started, 1);
    while (!atomic_load(&s->go))
        usleep(1000);
    usleep(50 * 1000); /* shutdown has begun by now, in all but a vanishing few runs */
    atomic_store(&s->returned, 1);
    return MP_READY;
}

static const mp_task_vtable slow_task_vt = {.poll = slow_task_poll};

Test(task, shutdown_while_a_worker_joins_a_task_polled_elsewhere, .timeout = 30)
{
    /* The joiner first, so that it takes the first worker and the task the second: shutdown
     * unparks and joins the workers in order, and a joiner on the second would be woken by
     * the completion before it ever saw the stop. */
    mp_runtime *rt = test_runtime(2);
    slow_task s = {0};
    mp_task_init(&s.task, &slow_task_vt);
    worker_joiner wj = {
        .target = &s.task, .target_started = &s.started, .target_returned = &s.returned};
    mp_task_init(&wj.task, &worker_joiner_vt);
    cr_assert_eq(mp_spawn(rt, &wj.task), 0);
    cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
    while (!atomic_load(&wj.joining))
        usleep(1000);
    usleep(5000);
    atomic_store(&s.go, 1);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert(atomic_load(&wj.done));
    cr_assert_eq(wj.result, 0, "the poll returned MP_READY, the join said %d", wj.result);
    cr_assert(wj.finished_at_return, "mp_join returned while the task's poll still ran");
    mp_runtime_free(rt);
}

/* The joined task waits (idle, its waker elsewhere) when shutdown comes: the joiner cancels
 * it as shutdown would (its cancel callback runs once) and sees -ECANCELED. */
typedef struct idle_target {
    mp_task task;
    _Atomic int polled, cancels;
    mp_waker keep;
} idle_target;

static mp_poll idle_target_poll(mp_task *t, mp_context *cx)
{
    idle_target *p = mp_container_of(t, idle_target, task);
    p->keep = mp_waker_clone(mp_context_waker(cx));
    atomic_store(&p->polled, 1);
    return MP_PENDING;
}

static void idle_target_cancel(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, idle_target, task)->cancels, 1);
}

static const mp_task_vtable idle_target_vt = {.poll = idle_target_poll,
                                              .cancel = idle_target_cancel};

Test(task, shutdown_while_a_worker_joins_an_idle_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    idle_target p = {0};
    mp_task_init(&p.task, &idle_target_vt);
    _Atomic int never = 0;
    worker_joiner wj = {.target = &p.task, .target_started = &p.polled, .target_returned = &never};
    mp_task_init(&wj.task, &worker_joiner_vt);
    cr_assert_eq(mp_spawn(rt, &wj.task), 0);
    cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
    while (!atomic_load(&wj.joining))
        usleep(1000);
    usleep(5000);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert(atomic_load(&wj.done));
    cr_assert_eq(wj.result, -ECANCELED);
    cr_assert_eq(atomic_load(&p.cancels), 1);
    mp_waker_drop(&p.keep);
    mp_runtime_free(rt);
}

/* mp_join_until(): a join with a deadline, from plain threads. */

typedef struct gated {
    mp_task task;
    mp_notify *gate;
    mp_notify_waiter w;
    unsigned yields; /* then wait on the gate (gate NULL: complete) */
    _Atomic int cancels, releases;
} gated;

static mp_poll gated_poll(mp_task *t, mp_context *cx)
{
    gated *g = mp_container_of(t, gated, task);
    if (g->yields > 0) {
        g->yields--;
        return mp_yield(cx);
    }
    if (!g->gate)
        return MP_READY;
    return mp_notify_poll(g->gate, &g->w, cx);
}

static void gated_cancel(mp_task *t)
{
    gated *g = mp_container_of(t, gated, task);
    if (g->gate)
        mp_notify_cancel(g->gate, &g->w);
    atomic_fetch_add(&g->cancels, 1);
}

static void gated_release(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, gated, task)->releases, 1);
}

static const mp_task_vtable gated_vt = {
    .poll = gated_poll, .cancel = gated_cancel, .release = gated_release};

static void gated_init(gated *g, mp_notify *gate, unsigned yields)
{
    memset(g, 0, sizeof *g);
    g->gate = gate;
    g->yields = yields;
    mp_notify_waiter_init(&g->w);
    mp_task_init(&g->task, &gated_vt);
}

Test(task, join_until_times_out_and_keeps_the_handle, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_notify gate;
    mp_notify_init(&gate);
    gated g;
    gated_init(&g, &gate, 0);
    cr_assert_eq(mp_spawn_joinable(rt, &g.task), 0);
    uint64_t t0 = mp_now_ms();
    cr_assert_eq(mp_join_until(&g.task, t0 + 20), -ETIMEDOUT);
    cr_assert_geq(mp_now_ms(), t0 + 20);
    cr_assert_eq(st(&g.task) & MP__T_JOIN_WAKER, 0, "the joiner's waker was left in the task");
    cr_assert(st(&g.task) & MP__T_JOIN_INTEREST, "the handle is still the caller's");
    cr_assert_eq(mp_join_until(&g.task, 0), -ETIMEDOUT, "a past deadline: no wait");
    mp_notify_one(&gate);
    cr_assert_eq(mp_join_until(&g.task, mp_now_ms() + 60 * 60 * 1000), 0);
    cr_assert_eq(atomic_load(&g.releases), 1);
    /* Complete already: a past deadline still joins it. */
    gated h;
    gated_init(&h, NULL, 0);
    cr_assert_eq(mp_spawn_joinable(rt, &h.task), 0);
    while (!mp_task_is_complete(&h.task))
        sched_yield();
    cr_assert_eq(mp_join_until(&h.task, 0), 0);
    cr_assert_eq(atomic_load(&h.releases), 1);
    mp_runtime_free(rt);
}

Test(task, join_until_a_cancelled_task_and_a_cancel_after_the_timeout, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_notify gate;
    mp_notify_init(&gate);
    gated g;
    gated_init(&g, &gate, 0);
    cr_assert_eq(mp_spawn_joinable(rt, &g.task), 0);
    cr_assert_eq(mp_join_until(&g.task, mp_now_ms() + 10), -ETIMEDOUT);
    mp_task_cancel(&g.task);
    cr_assert_eq(mp_join_until(&g.task, mp_now_ms() + 60 * 60 * 1000), -ECANCELED);
    cr_assert_eq(atomic_load(&g.cancels), 1);
    cr_assert_eq(atomic_load(&g.releases), 1);
    mp_runtime_free(rt);
}

/* The completion races the deadline: the joiner's stack waker must never be woken after it
 * returned -ETIMEDOUT (ThreadSanitizer and ASan see the write into a dead frame), and a
 * timed-out join is finished by a plain one. */
Test(task, join_until_completion_racing_the_deadline, .timeout = 120)
{
    uint64_t seed = test_seed();
    mp_runtime *rt = test_runtime(2);
    unsigned timed_out = 0;
    for (int round = 0; round < 300; round++) {
        gated g;
        gated_init(&g, NULL, (unsigned)(test_rand(&seed) % 64));
        cr_assert_eq(mp_spawn_joinable(rt, &g.task), 0);
        int rc = mp_join_until(&g.task, mp_now_ms() + test_rand(&seed) % 2);
        if (rc == -ETIMEDOUT) {
            timed_out++;
            rc = mp_join(&g.task);
        }
        cr_assert_eq(rc, 0, "round %d", round);
        cr_assert_eq(atomic_load(&g.releases), 1, "round %d", round);
    }
    mp_runtime_free(rt);
    (void)timed_out;
}

/* Shutdown while a plain thread waits in mp_join_until(): the task is cancelled, the join
 * answers -ECANCELED before its deadline. */
typedef struct until_joiner {
    mp_task *t;
    _Atomic int rc;
} until_joiner;

static void *join_until_main(void *arg)
{
    until_joiner *j = arg;
    atomic_store(&j->rc, mp_join_until(j->t, mp_now_ms() + 60 * 60 * 1000));
    return NULL;
}

Test(task, shutdown_during_join_until, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_notify gate;
    mp_notify_init(&gate);
    gated g;
    gated_init(&g, &gate, 0);
    cr_assert_eq(mp_spawn_joinable(rt, &g.task), 0);
    until_joiner j = {.t = &g.task, .rc = 1};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, join_until_main, &j), 0);
    usleep(20000);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&j.rc), -ECANCELED);
    cr_assert_eq(atomic_load(&g.cancels), 1);
    cr_assert_eq(atomic_load(&g.releases), 1);
    mp_runtime_free(rt);
}

/* From a worker, a blocking join with a deadline is refused. mp_join_cancel_wait() withdraws
 * a task's join waker and keeps the handle. */
typedef struct outer {
    mp_task task;
    mp_task *inner;
    _Atomic int step;
    int until_rc, result;
    bool cancelled_done;
} outer;

static mp_poll outer_poll(mp_task *t, mp_context *cx)
{
    outer *o = mp_container_of(t, outer, task);
    switch (atomic_load(&o->step)) {
    case 0:
        o->until_rc = mp_join_until(o->inner, mp_now_ms() + 1000);
        if (mp_join_poll(o->inner, cx, &o->result) == MP_READY)
            return MP_READY; /* cannot be: the inner task waits on its gate */
        o->cancelled_done = mp_join_cancel_wait(o->inner);
        atomic_store(&o->step, 2);
        return MP_READY;
    }
    return MP_READY;
}

static const mp_task_vtable outer_vt = {.poll = outer_poll};

Test(task, join_until_on_a_worker_is_refused_and_join_cancel_wait, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    mp_notify gate;
    mp_notify_init(&gate);
    gated g;
    gated_init(&g, &gate, 0);
    cr_assert_eq(mp_spawn_joinable(rt, &g.task), 0);
    outer o = {.inner = &g.task, .step = 0};
    mp_task_init(&o.task, &outer_vt);
    cr_assert_eq(mp_spawn(rt, &o.task), 0);
    while (atomic_load(&o.step) != 2)
        usleep(1000);
    usleep(1000); /* its completion, after the store */
    cr_assert_eq(o.until_rc, -EDEADLK);
    cr_assert(!o.cancelled_done);
    cr_assert_eq(st(&g.task) & MP__T_JOIN_WAKER, 0, "the join waker was withdrawn");
    mp_notify_one(&gate);
    cr_assert_eq(mp_join(&g.task), 0);
    mp_runtime_free(rt);
}
