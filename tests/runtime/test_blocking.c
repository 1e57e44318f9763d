/* Tests of runtime/src/blocking.c: the blocking pool behind mp_spawn_blocking(). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

/* A gate a job blocks on until the test opens it. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    int entered;
} gate;

static void gate_init(gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = false;
    g->entered = 0;
}

static void gate_pass(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->entered++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_wait_entered(gate *g, int n)
{
    pthread_mutex_lock(&g->mu);
    while (g->entered < n)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void gate_destroy(gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

typedef struct probe {
    _Atomic int ran;
    _Atomic bool on_worker;   /* fn saw a runtime current: it ran on a worker */
    _Atomic bool main_thread; /* fn ran on the test's thread */
    pthread_t tester;
    gate *g;
} probe;

static void probe_fn(void *arg)
{
    probe *p = arg;
    if (mp_runtime_current() != NULL)
        atomic_store(&p->on_worker, true);
    if (pthread_equal(pthread_self(), p->tester))
        atomic_store(&p->main_thread, true);
    if (p->g)
        gate_pass(p->g);
    atomic_fetch_add(&p->ran, 1);
}

static probe new_probe(gate *g)
{
    probe p = {.tester = pthread_self(), .g = g};
    return p;
}

Test(blocking, runs_on_a_thread_of_its_own_and_joins_from_a_plain_thread, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    probe p = new_probe(NULL);
    mp_task *h;
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h), 0);
    cr_assert_eq(mp_join(h), 0);
    cr_assert_eq(atomic_load(&p.ran), 1);
    cr_assert(!atomic_load(&p.on_worker), "a blocking job saw mp_runtime_current()");
    cr_assert(!atomic_load(&p.main_thread));
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.blocking_jobs, 1);
    cr_assert_eq(st.blocking_threads_started, 1);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* A task that spawns a job and awaits it with mp_join_poll. */
typedef struct awaiter {
    mp_task task;
    mp_task *job;
    probe *p;
    int result;
    int polls;
} awaiter;

static mp_poll awaiter_poll(mp_task *t, mp_context *cx)
{
    awaiter *a = mp_container_of(t, awaiter, task);
    a->polls++;
    if (a->job == NULL) {
        int rc = mp_spawn_blocking(mp_runtime_current(), probe_fn, a->p, &a->job);
        if (rc != 0) {
            a->result = rc;
            return MP_READY;
        }
    }
    return mp_join_poll(a->job, cx, &a->result);
}

static const mp_task_vtable awaiter_vt = {.poll = awaiter_poll};

Test(blocking, a_task_awaits_a_job_without_holding_its_worker, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    gate g;
    gate_init(&g);
    probe p = new_probe(&g);
    awaiter a = {.p = &p, .result = 1};
    mp_task_init(&a.task, &awaiter_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &a.task), 0);
    gate_wait_entered(&g, 1);
    /* The one worker is free while the job blocks: another task runs to the end on it (this
     * thread only waits, it does not join and so runs nothing inline). So the awaiter's first
     * poll ended, with MP_PENDING, before the job could finish. */
    probe q = new_probe(NULL);
    cr_assert_eq(mp_spawn_fn(rt, probe_fn, &q, NULL), 0);
    while (atomic_load(&q.ran) == 0)
        usleep(1000);
    cr_assert(!atomic_load(&q.main_thread));
    cr_assert_eq(atomic_load(&p.ran), 0);
    gate_open(&g);
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(a.result, 0);
    cr_assert_eq(atomic_load(&p.ran), 1);
    cr_assert_geq(a.polls, 2, "the task was not suspended while the job ran");
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    gate_destroy(&g);
}

Test(blocking, jobs_past_the_thread_cap_wait_their_turn, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.blocking_threads = 3;
    mp_runtime *rt = test_runtime_with(&cfg);
    gate g;
    gate_init(&g);
    probe p = new_probe(&g);
    enum { N = 40 };
    mp_task *h[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h[i]), 0);
    gate_wait_entered(&g, 3);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.blocking_threads, 3);
    cr_assert_eq(st.blocking_running, 3);
    cr_assert_eq(st.blocking_queued, N - 3);
    gate_open(&g);
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_join(h[i]), 0);
    cr_assert_eq(atomic_load(&p.ran), N);
    mp_runtime_stats_get(rt, &st);
    cr_assert_leq(st.blocking_threads_started, 3);
    cr_assert_eq(st.blocking_jobs, N);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    gate_destroy(&g);
}

Test(blocking, idle_threads_leave_after_the_keep_alive, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_keep_alive_ms = 20;
    mp_runtime *rt = test_runtime_with(&cfg);
    probe p = new_probe(NULL);
    mp_task *h;
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h), 0);
    cr_assert_eq(mp_join(h), 0);
    mp_stats st;
    do {
        usleep(5000);
        mp_runtime_stats_get(rt, &st);
    } while (st.blocking_threads != 0); /* the timeout fails the test if it never leaves */
    /* A new job starts a new thread. */
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h), 0);
    cr_assert_eq(mp_join(h), 0);
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.blocking_threads_started, 2);
    cr_assert_eq(atomic_load(&p.ran), 2);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(blocking, a_job_cancelled_before_it_starts_never_runs, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    mp_runtime *rt = test_runtime_with(&cfg);
    gate g;
    gate_init(&g);
    probe busy = new_probe(&g), later = new_probe(NULL);
    mp_task *hb, *hl;
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &busy, &hb), 0);
    gate_wait_entered(&g, 1);
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &later, &hl), 0);
    mp_task_cancel(hl);
    /* Cancelling a running job lets it finish. */
    mp_task_cancel(hb);
    gate_open(&g);
    cr_assert_eq(mp_join(hl), -ECANCELED);
    cr_assert_eq(mp_join(hb), 0);
    cr_assert_eq(atomic_load(&later.ran), 0);
    cr_assert_eq(atomic_load(&busy.ran), 1);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
    gate_destroy(&g);
}

/* Opens the gate after a while, from a thread of its own. */
static void *open_later(void *arg)
{
    usleep(30000);
    gate_open(arg);
    return NULL;
}

static void shutdown_with_queued_and_running(mp_shutdown_mode mode)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.blocking_threads = 2;
    cfg.shutdown_mode = mode;
    mp_runtime *rt = test_runtime_with(&cfg);
    gate g;
    gate_init(&g);
    probe running = new_probe(&g), queued = new_probe(NULL);
    mp_task *hr[2], *hq[5];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &running, &hr[i]), 0);
    gate_wait_entered(&g, 2);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &queued, &hq[i]), 0);
    pthread_t opener;
    pthread_create(&opener, NULL, open_later, &g);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    /* Running jobs were waited for; queued ones ran (drain) or never did (cancel). */
    cr_assert_eq(atomic_load(&running.ran), 2);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(mp_join(hr[i]), 0);
    int want = mode == MP_SHUTDOWN_DRAIN ? 0 : -ECANCELED;
    for (int i = 0; i < 5; i++)
        cr_assert_eq(mp_join(hq[i]), want);
    cr_assert_eq(atomic_load(&queued.ran), mode == MP_SHUTDOWN_DRAIN ? 5 : 0);
    mp_task *h;
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &queued, &h), -ESHUTDOWN);
    pthread_join(opener, NULL);
    mp_runtime_free(rt);
    gate_destroy(&g);
}

Test(blocking, shutdown_cancels_queued_jobs_and_waits_for_running_ones, .timeout = 30)
{
    shutdown_with_queued_and_running(MP_SHUTDOWN_CANCEL);
}

Test(blocking, drain_runs_queued_jobs_too, .timeout = 30)
{
    shutdown_with_queued_and_running(MP_SHUTDOWN_DRAIN);
}

Test(blocking, a_job_past_the_drain_timeout_is_left_to_finish, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    cfg.drain_timeout_ms = 20;
    mp_runtime *rt = test_runtime_with(&cfg);
    gate g;
    gate_init(&g);
    probe p = new_probe(&g);
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, NULL), 0);
    gate_wait_entered(&g, 1);
    cr_assert_eq(mp_runtime_shutdown(rt), -ETIMEDOUT);
    cr_assert_eq(atomic_load(&p.ran), 0);
    pthread_t opener;
    pthread_create(&opener, NULL, open_later, &g);
    mp_runtime_free(rt); /* waits for the job's thread */
    cr_assert_eq(atomic_load(&p.ran), 1);
    pthread_join(opener, NULL);
    gate_destroy(&g);
}

Test(blocking, errors, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    probe p = new_probe(NULL);
    mp_task *h;
    cr_assert_eq(mp_spawn_blocking(rt, NULL, &p, &h), -EINVAL);
    cr_assert_eq(mp_spawn_blocking(NULL, probe_fn, &p, &h), -EINVAL);
    /* No thread can start and none exists: the spawn fails, nothing is queued. */
    mp__test_blocking_fail_next_start(&rt->blocking);
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h), -EAGAIN);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.blocking_queued, 0);
    cr_assert_eq(st.blocking_spawn_failures, 1);
    /* The next one starts a thread. */
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h), 0);
    cr_assert_eq(mp_join(h), 0);
    /* A task that is not fresh. */
    mp_task t;
    static const mp_task_vtable vt = {.poll = awaiter_poll};
    mp_task_init(&t, &vt);
    awaiter a = {.p = &p};
    mp_task_init(&a.task, &awaiter_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &a.task), 0);
    cr_assert_eq(mp_spawn_blocking_task(rt, &a.task, false), -EINVAL);
    cr_assert_eq(mp_join(&a.task), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    cr_assert_eq(mp_spawn_blocking(rt, probe_fn, &p, &h), -ESHUTDOWN);
    cr_assert_eq(mp_spawn_blocking_task(rt, &t, true), -ESHUTDOWN);
    mp_runtime_free(rt);
    cr_assert_eq(atomic_load(&p.ran), 2);
}

/* An embedded job: no allocation, its release says when the runtime is done with it. */
typedef struct emb {
    mp_task task;
    _Atomic int polled, released, cancelled;
} emb;

static mp_poll emb_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    atomic_fetch_add(&mp_container_of(t, emb, task)->polled, 1);
    return MP_READY;
}

static void emb_cancel(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, emb, task)->cancelled, 1);
}

static void emb_release(mp_task *t)
{
    atomic_fetch_add(&mp_container_of(t, emb, task)->released, 1);
}

static const mp_task_vtable emb_vt = {
    .poll = emb_poll, .cancel = emb_cancel, .release = emb_release};

/* Drain mode: the detached jobs still queued when shutdown begins run too (in cancel mode they
 * would be cancelled, as drain_runs_queued_jobs_too's twin shows). */
Test(blocking, embedded_jobs_each_run_once_and_are_released, .timeout = 60)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.shutdown_mode = MP_SHUTDOWN_DRAIN;
    mp_runtime *rt = test_runtime_with(&cfg);
    enum { N = 2000 };
    emb *e = calloc(N, sizeof *e);
    for (int i = 0; i < N; i++) {
        mp_task_init(&e[i].task, &emb_vt);
        cr_assert_eq(mp_spawn_blocking_task(rt, &e[i].task, i % 2 == 0), 0);
    }
    for (int i = 0; i < N; i += 2)
        cr_assert_eq(mp_join(&e[i].task), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&e[i].polled), 1, "job %d", i);
        cr_assert_eq(atomic_load(&e[i].cancelled), 0);
        cr_assert_eq(atomic_load(&e[i].released), 1, "job %d", i);
    }
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.live_tasks, 0);
    mp_runtime_free(rt);
    free(e);
}
