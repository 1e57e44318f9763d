/* Tests for runtime/src/pool/pool.c: life cycle, lazy thread start, the caller slot, external
 * calls from many threads, survival of a failed thread spawn, and an idle pool that uses no
 * CPU. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool/pool_internal.h"
#include "test_util.h"

static mp_pool *make_pool_on(size_t threads, unsigned fail_at, bool calls_on_workers)
{
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = threads;
    cfg.calls_on_workers = calls_on_workers;
    mp__test_fail_spawn_nth(fail_at);
    cr_assert_eq(mp_pool_new(&p, &cfg), 0);
    return p;
}

static mp_pool *make_pool(size_t threads, unsigned fail_at)
{
    return make_pool_on(threads, fail_at, false);
}

struct fib {
    int n;
    long r;
};

static void fib(void *v)
{
    struct fib *f = v;
    if (f->n < 2) {
        f->r = f->n;
        return;
    }
    struct fib a = {f->n - 1, 0}, b = {f->n - 2, 0};
    mp_pool_join(fib, &a, fib, &b);
    f->r = a.r + b.r;
}

static long fib_seq(int n)
{
    return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2);
}

/* Calls fib(n) through the pool and checks the call and its result. */
static void call_fib(mp_pool *p, int n)
{
    struct fib f = {n, -1};
    cr_assert_eq(mp_pool_call(p, fib, &f), 0);
    cr_assert_eq(f.r, fib_seq(n), "fib(%d)", n);
}

Test(pool, new_starts_no_thread_and_free_is_clean)
{
    mp_pool *p = make_pool(4, 0);
    mp_pool_stats st;
    cr_assert_eq(mp_pool_stats_get(p, &st), 0);
    cr_assert_eq(st.workers, 4);
    cr_assert_eq(st.workers_started, 0);
    cr_assert_eq(st.spawn_failures, 0);
    mp_pool_free(p);
    mp_pool_free(NULL);
}

Test(pool, rejects_too_many_threads)
{
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = 1u << 20;
    cr_assert_eq(mp_pool_new(&p, &cfg), -EINVAL);
    cr_assert_eq(mp_pool_new(&p, NULL), 0); /* defaults: one slot per CPU */
    mp_pool_free(p);
}

static void where(void *v)
{
    int *idx = v;
    *idx = mp_pool_worker_index();
}

static void nested_call(void *v)
{
    mp_pool **pp = v;
    int idx = -2;
    /* A call from a worker of the same pool runs inline, on this worker. */
    cr_assert_eq(mp_pool_call(*pp, where, &idx), 0);
    cr_assert_eq(idx, mp_pool_worker_index());
}

Test(pool, call_runs_on_its_caller_in_the_last_slot, .timeout = 30)
{
    mp_pool *p = make_pool(2, 0);
    int idx = -2;
    cr_assert_eq(mp_pool_call(p, where, &idx), 0);
    cr_assert_eq(idx, 1, "ran in slot %d, not the caller slot", idx);
    cr_assert_eq(mp_pool_worker_index(), -1, "the slot must be left after the call");
    cr_assert_eq(mp_pool_call(p, nested_call, &p), 0);
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.workers_started, 0, "nothing was forked: no thread is needed");
    cr_assert_eq(st.caller_calls, 2);
    cr_assert_eq(st.injected, 0);
    mp_pool_free(p);
}

Test(pool, calls_on_workers_runs_calls_on_the_threads, .timeout = 30)
{
    mp_pool *p = make_pool_on(2, 0, true);
    int idx = -2;
    cr_assert_eq(mp_pool_call(p, where, &idx), 0);
    cr_assert(idx >= 0 && idx < 2, "ran in slot %d", idx);
    cr_assert_eq(mp_pool_call(p, nested_call, &p), 0);
    call_fib(p, 18);
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_geq(st.workers_started, 1);
    cr_assert_eq(st.injected, 3);
    cr_assert_eq(st.caller_calls, 0);
    mp_pool_free(p);
}

/* The caller slot's joins go to the threads: a leaf that spins until another leaf has run on
 * another slot returns only if the pool's threads steal from the caller. */
struct spread {
    _Atomic int other_slot; /* a slot other than the caller's that ran a leaf, or -1 */
    int caller_slot;
};

static void spread_leaf(void *v)
{
    struct spread *s = v;
    int me = mp_pool_worker_index();
    if (me != s->caller_slot) {
        /* Relaxed: a flag; the join orders everything else. */
        atomic_store_explicit(&s->other_slot, me, memory_order_relaxed);
        return;
    }
    while (atomic_load_explicit(&s->other_slot, memory_order_relaxed) < 0)
        sched_yield();
}

static void spread_root(void *v)
{
    struct spread *s = v;
    s->caller_slot = mp_pool_worker_index();
    mp_pool_join(spread_leaf, s, spread_leaf, s);
}

static void steal_from_the_caller_slot(unsigned publish_delay_us)
{
    mp__test_pool_spawn_publish_delay_us(publish_delay_us);
    mp_pool *p = make_pool(3, 0);
    mp__test_pool_spawn_publish_delay_us(0);
    struct spread s = {.caller_slot = -1};
    atomic_init(&s.other_slot, -1);
    cr_assert_eq(mp_pool_call(p, spread_root, &s), 0);
    cr_assert_eq(s.caller_slot, 2);
    int other = atomic_load_explicit(&s.other_slot, memory_order_relaxed);
    cr_assert(other == 0 || other == 1, "leaf ran in slot %d", other);
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_geq(st.workers_started, 1);
    cr_assert_leq(st.workers_started, 2, "a pool of 3 starts at most 2 threads");
    cr_assert_geq(st.stolen, 1);
    mp_pool_free(p);
}

Test(pool, threads_steal_from_the_caller_slot, .timeout = 30)
{
    steal_from_the_caller_slot(0);
}

/* The thread started for the caller's first fork runs before its spawner counts it (50 ms,
 * far past the idle window, as a spawner preempted there would). It must still find the fork
 * on the caller slot, or it sleeps and the caller's leaf, waiting for another slot, never
 * returns. */
Test(pool, a_thread_counted_late_still_steals_from_the_caller_slot, .timeout = 30)
{
    steal_from_the_caller_slot(50000);
}

/* A job left on the caller slot's deque when fn returns (in real use: a scope spawn that a
 * stolen job pushed there while the caller waited on something else) must run before the call
 * returns the slot, for nobody else pops that deque. A pool of 1 has no thread that could
 * steal it: only the caller's drain runs it. */
struct left {
    mp__pool_job job;
    _Atomic bool ran;
};

static void left_execute(mp__pool_job *job)
{
    struct left *l = mp_container_of(job, struct left, job);
    /* Relaxed: read after mp_pool_call or mp_pool_free returns, which order it. */
    atomic_store_explicit(&l->ran, true, memory_order_relaxed);
}

static void push_and_return(void *v)
{
    struct left *l = v;
    l->job.execute = left_execute;
    cr_assert_eq(mp__pool_worker_push(mp__pool_current, &l->job), 0);
}

Test(pool, caller_runs_what_is_left_on_its_deque_before_leaving, .timeout = 30)
{
    mp_pool *p = make_pool(1, 0);
    struct left l;
    atomic_init(&l.ran, false);
    cr_assert_eq(mp_pool_call(p, push_and_return, &l), 0);
    cr_assert(atomic_load_explicit(&l.ran, memory_order_relaxed),
              "the job left on the caller slot's deque never ran");
    mp_pool_free(p);

    /* With a thread, either may run it; it must have run once the pool is gone. */
    p = make_pool(2, 0);
    atomic_init(&l.ran, false);
    cr_assert_eq(mp_pool_call(p, push_and_return, &l), 0);
    mp_pool_free(p);
    cr_assert(atomic_load_explicit(&l.ran, memory_order_relaxed));
}

/* 32 external threads call at once, each several times. */

enum { CALLERS = 32, CALLS_EACH = 20 };

struct caller {
    mp_pool *pool;
    pthread_barrier_t *start;
    int id;
    int bad;
};

static void *caller_main(void *v)
{
    struct caller *c = v;
    pthread_barrier_wait(c->start);
    for (int i = 0; i < CALLS_EACH; i++) {
        struct fib f = {10 + (c->id + i) % 10, -1};
        if (mp_pool_call(c->pool, fib, &f) != 0 || f.r != fib_seq(f.n))
            c->bad++;
    }
    return NULL;
}

static mp_pool_stats many_callers(size_t threads, bool calls_on_workers)
{
    mp_pool *p = make_pool_on(threads, 0, calls_on_workers);
    pthread_t th[CALLERS];
    struct caller c[CALLERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, CALLERS);
    for (int i = 0; i < CALLERS; i++) {
        c[i] = (struct caller){p, &start, i, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(c[i].bad, 0, "caller %d got %d wrong results", i, c[i].bad);
    }
    pthread_barrier_destroy(&start);
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.injected + st.caller_calls, CALLERS * CALLS_EACH);
    mp_pool_free(p);
    return st;
}

Test(pool, thirty_two_external_callers_at_once, .timeout = 60)
{
    many_callers(4, false);
    mp_pool_stats st = many_callers(4, true);
    cr_assert_eq(st.caller_calls, 0);
}

Test(pool, thirty_two_callers_one_worker, .timeout = 60)
{
    /* No thread slot: the callers take turns in the caller slot. */
    mp_pool_stats st = many_callers(1, false);
    cr_assert_eq(st.caller_calls, CALLERS * CALLS_EACH);
    cr_assert_eq(st.workers_started, 0);
    st = many_callers(1, true);
    cr_assert_eq(st.injected, CALLERS * CALLS_EACH);
}

/* Failed spawns: the hook fails the Nth pthread_create. */

Test(pool, first_spawn_fails_next_slot_takes_over, .timeout = 30)
{
    mp_pool *p = make_pool(3, 1);
    call_fib(p, 20);
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.spawn_failures, 1);
    cr_assert_eq(st.last_spawn_error, -EAGAIN);
    cr_assert_geq(st.workers_started, 1); /* the failed slot is retried, so up to 2 */
    mp_pool_free(p);
}

/* The caller forks b, which starts thread 0 (spawn 1); while b keeps thread 0 busy, the
 * caller forks again with nobody idle, so the second spawn happens then, deterministically,
 * and fails. */
struct busy {
    _Atomic bool b_running, a_done;
    struct fib c, d;
};

static void busy_b(void *v)
{
    struct busy *x = v;
    /* Relaxed: flags between the two halves; the join orders the rest. */
    atomic_store_explicit(&x->b_running, true, memory_order_relaxed);
    while (!atomic_load_explicit(&x->a_done, memory_order_relaxed))
        sched_yield();
}

static void busy_a(void *v)
{
    struct busy *x = v;
    while (!atomic_load_explicit(&x->b_running, memory_order_relaxed))
        sched_yield();
    mp_pool_join(fib, &x->c, fib, &x->d); /* pushes d while thread 0 is in b: spawn 2 */
    atomic_store_explicit(&x->a_done, true, memory_order_relaxed);
}

static void busy_root(void *v)
{
    mp_pool_join(busy_a, v, busy_b, v);
}

Test(pool, second_spawn_fails_pool_runs_on_and_retries_the_slot, .timeout = 30)
{
    mp_pool *p = make_pool(3, 2);
    struct busy x = {.c = {15, 0}, .d = {16, 0}};
    atomic_init(&x.b_running, false);
    atomic_init(&x.a_done, false);
    cr_assert_eq(mp_pool_call(p, busy_root, &x), 0);
    cr_assert_eq(x.c.r, fib_seq(15));
    cr_assert_eq(x.d.r, fib_seq(16));
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.spawn_failures, 1);
    cr_assert_eq(st.last_spawn_error, -EAGAIN);
    /* The pool runs on; the failed slot stays unstarted, and a later spawn may start it. */
    for (int i = 0; i < 5; i++)
        call_fib(p, 20);
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.spawn_failures, 1);
    cr_assert_geq(st.workers_started, 1);
    cr_assert_leq(st.workers_started, 2);
    mp_pool_free(p);
}

Test(pool, calls_on_workers_with_no_thread_at_all_fails_the_call_and_the_next_retries,
     .timeout = 30)
{
    mp_pool *p = make_pool_on(1, 1, true);
    struct fib f = {10, -1};
    cr_assert_eq(mp_pool_call(p, fib, &f), -EAGAIN);
    cr_assert_eq(f.r, -1, "fn must not have run");
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.workers_started, 0);
    cr_assert_eq(st.spawn_failures, 1);
    /* A failed start does not use the slot up: the next call starts it (the hook failed only
     * the first attempt), where the pool used to answer -EAGAIN for ever. */
    cr_assert_eq(mp_pool_call(p, fib, &f), 0);
    cr_assert_eq(f.r, fib_seq(10));
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.workers_started, 1);
    cr_assert_eq(st.spawn_failures, 1);
    mp_pool_free(p);
}

Test(pool, without_a_thread_the_call_runs_on_its_caller, .timeout = 30)
{
    mp_pool *p = make_pool(2, 1);
    call_fib(p, 1);  /* no fork: no spawn */
    call_fib(p, 10); /* the first spawn fails; fib runs on */
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.spawn_failures, 1);
    cr_assert_eq(st.caller_calls, 2);
    mp_pool_free(p);
}

/* A second caller finds the caller slot taken and no thread able to start: it waits for the
 * slot. The holder leaves once the second caller's spawn has failed, i.e. once the second
 * caller is on its way to wait. */
struct holder {
    mp_pool *pool;
    _Atomic bool inside;
    int second_slot;
};

static void hold_until_spawn_failed(void *v)
{
    struct holder *h = v;
    /* Relaxed: a flag for the test body. */
    atomic_store_explicit(&h->inside, true, memory_order_relaxed);
    mp_pool_stats st;
    do {
        sched_yield();
        mp_pool_stats_get(h->pool, &st);
    } while (st.spawn_failures == 0);
}

static void second_where(void *v)
{
    struct holder *h = v;
    h->second_slot = mp_pool_worker_index();
}

static void *second_caller(void *v)
{
    struct holder *h = v;
    while (!atomic_load_explicit(&h->inside, memory_order_relaxed))
        sched_yield();
    return (void *)(intptr_t)mp_pool_call(h->pool, second_where, h);
}

Test(pool, second_caller_waits_for_the_slot_when_no_thread_can_start, .timeout = 30)
{
    struct holder h = {.pool = make_pool(2, 1), .second_slot = -2};
    atomic_init(&h.inside, false);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, second_caller, &h), 0);
    cr_assert_eq(mp_pool_call(h.pool, hold_until_spawn_failed, &h), 0);
    void *rc;
    pthread_join(t, &rc);
    cr_assert_eq((intptr_t)rc, 0);
    cr_assert_eq(h.second_slot, 1, "the second call ran in slot %d", h.second_slot);
    mp_pool_stats st;
    mp_pool_stats_get(h.pool, &st);
    cr_assert_eq(st.caller_calls, 2);
    cr_assert_eq(st.injected, 0);
    cr_assert_eq(st.workers_started, 0);
    mp_pool_free(h.pool);
}

/* Idle: after the sleep rounds, workers block and use no CPU at all. */

static void wait_all_asleep(mp_pool *p)
{
    mp_pool_stats st;
    for (;;) {
        mp_pool_stats_get(p, &st);
        if (st.workers_started > 0 && st.workers_sleeping == st.workers_started)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* The scheduler state letter of one thread of this process ('S': blocked). */
static char thread_state(int tid)
{
    char path[96], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    cr_assert_not_null(p);
    return p[2];
}

/* User + system ticks and context switches of one thread of this process. */
static void thread_usage(int tid, unsigned long long *ticks, unsigned long long *switches)
{
    char path[96], line[256];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the parenthesised name: state is field 3, utime 14, stime 15. */
    char *p = strrchr(buf, ')');
    cr_assert_not_null(p);
    unsigned long long ut = 0, st = 0;
    int field = 2;
    for (char *tok = strtok(p + 1, " "); tok != NULL; tok = strtok(NULL, " ")) {
        field++;
        if (field == 14)
            ut = strtoull(tok, NULL, 10);
        if (field == 15)
            st = strtoull(tok, NULL, 10);
    }
    *ticks = ut + st;
    snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    *switches = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long v;
        if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
            sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
            *switches += v;
    }
    fclose(f);
}

Test(pool, idle_pool_uses_no_cpu, .timeout = 60)
{
    enum { THREADS = 2 };
    mp_pool *p = make_pool(THREADS, 0);
    struct fib f = {22, 0};
    cr_assert_eq(mp_pool_call(p, fib, &f), 0);
    wait_all_asleep(p);
    unsigned long long t0[THREADS], s0[THREADS], t1, s1;
    int tids[THREADS];
    /* A worker counts as sleeping from its registration on, a few instructions before it
     * blocks: wait until the kernel also shows every started worker blocked. */
    for (int i = 0; i < THREADS; i++) {
        tids[i] = mp__test_pool_worker_tid(p, (unsigned)i);
        while (tids[i] != 0 && thread_state(tids[i]) != 'S') {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < THREADS; i++) {
        if (tids[i] != 0)
            thread_usage(tids[i], &t0[i], &s0[i]);
    }
    struct timespec quiet = {0, 300 * 1000000};
    nanosleep(&quiet, NULL);
    for (int i = 0; i < THREADS; i++) {
        if (tids[i] == 0)
            continue;
        thread_usage(tids[i], &t1, &s1);
        cr_assert_eq(s1, s0[i], "worker %d switched %llu times while idle", i, s1 - s0[i]);
        cr_assert_eq(t1, t0[i], "worker %d used %llu ticks while idle", i, t1 - t0[i]);
    }
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_assert_eq(st.workers_sleeping, st.workers_started);
    cr_assert_geq(st.sleeps, st.workers_started);
    mp_pool_free(p);
}
