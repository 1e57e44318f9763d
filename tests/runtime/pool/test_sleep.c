/* Tests for runtime/src/pool/sleep.c. The white-box tests drive the protocol by hand, with
 * the test thread playing worker 0 of a pool whose threads never start (they start lazily,
 * and nothing is ever called). The cycle test runs 10^4 sleep/wake cycles through the public
 * API; a lost wake-up would hang a call and fail on the timeout. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "pool/pool_internal.h"
#include "test_util.h"

static mp_pool *make_pool(size_t threads)
{
    mp_pool_config cfg;
    mp_pool *p = NULL;
    mp_pool_config_init(&cfg);
    cfg.workers = threads;
    cr_assert_eq(mp_pool_new(&p, &cfg), 0);
    return p;
}

/* Runs the idle rounds up to (not including) the sleep attempt. */
static void rounds_until_sleep(mp_pool *p, mp__pool_idle *idle, mp__pool_core_latch *latch)
{
    while (idle->rounds < MP__SLEEP_ROUNDS_UNTIL_SLEEPING)
        mp__pool_sleep_no_work_found(&p->sleep, idle, latch, p);
}

Test(sleep, counter_word_packing)
{
    uint64_t c = 3 * MP__SLEEP_ONE_SLEEPING + 5 * MP__SLEEP_ONE_INACTIVE + 7 * MP__SLEEP_ONE_JEC;
    cr_assert_eq(mp__sleep_sleeping(c), 3);
    cr_assert_eq(mp__sleep_inactive(c), 5);
    cr_assert_eq(mp__sleep_jec(c), 7);
    c = 0xffffffffull * MP__SLEEP_ONE_JEC + MP__SLEEP_ONE_JEC; /* JEC wraps within its bits */
    cr_assert_eq(c, 0);
}

Test(sleep, inactive_count_and_jec_parity, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    mp__pool_idle idle;
    mp__pool_core_latch latch;
    atomic_init(&latch.state, MP__LATCH_UNSET);
    cr_assert_eq(mp__sleep_jec(mp__pool_sleep_load(&p->sleep)) & 1, 0, "starts sleepy");
    mp__pool_sleep_new_internal_jobs(&p->sleep, 1, true);
    uint32_t jec = mp__sleep_jec(mp__pool_sleep_load(&p->sleep));
    cr_assert_eq(jec & 1, 1, "a post makes it odd");
    mp__pool_sleep_new_internal_jobs(&p->sleep, 1, true);
    cr_assert_eq(mp__sleep_jec(mp__pool_sleep_load(&p->sleep)), jec, "odd stays odd");

    mp__pool_sleep_start_looking(&p->sleep, &idle, 0);
    cr_assert_eq(mp__sleep_inactive(mp__pool_sleep_load(&p->sleep)), 1);
    while (idle.rounds <= MP__SLEEP_ROUNDS_UNTIL_SLEEPY)
        mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p);
    cr_assert_eq(idle.jec, jec + 1, "announcing makes it even again");
    cr_assert_eq(mp__sleep_jec(mp__pool_sleep_load(&p->sleep)), jec + 1);
    mp__pool_sleep_work_found(&p->sleep);
    cr_assert_eq(mp__sleep_inactive(mp__pool_sleep_load(&p->sleep)), 0);
    mp_pool_free(p);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The last yield round repeats until MP__SLEEP_IDLE_MIN_NS have passed since the idle spell
 * began, then the worker announces itself sleepy. Asserted only where the rounds themselves
 * took less than that window (a preempted test thread may not). */
Test(sleep, idle_rounds_last_the_minimum_window, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    mp__pool_idle idle;
    mp__pool_core_latch latch;
    atomic_init(&latch.state, MP__LATCH_UNSET);
    mp__pool_sleep_new_internal_jobs(&p->sleep, 1, true); /* an odd JEC, to see the announce */
    mp__pool_sleep_start_looking(&p->sleep, &idle, 0);
    while (idle.rounds < MP__SLEEP_ROUNDS_UNTIL_SLEEPY - 1)
        mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p);
    /* More rounds, stopping short of the announce (a slow run may reach it). */
    for (int i = 0; i < 8 && idle.rounds == MP__SLEEP_ROUNDS_UNTIL_SLEEPY - 1; i++)
        mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p);
    if (mono_ns() - idle.since_ns < MP__SLEEP_IDLE_MIN_NS)
        cr_assert_eq(idle.rounds, MP__SLEEP_ROUNDS_UNTIL_SLEEPY - 1, "announced too early");
    /* Once the window has passed, the next round announces. */
    idle.since_ns = mono_ns() - MP__SLEEP_IDLE_MIN_NS;
    uint32_t jec = mp__sleep_jec(mp__pool_sleep_load(&p->sleep));
    while (idle.rounds <= MP__SLEEP_ROUNDS_UNTIL_SLEEPY)
        mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p);
    cr_assert_eq(idle.rounds, MP__SLEEP_ROUNDS_UNTIL_SLEEPY + 1);
    cr_assert_eq(jec & 1, 1);
    cr_assert_eq(mp__sleep_jec(mp__pool_sleep_load(&p->sleep)), jec + 1, "announced");
    mp__pool_sleep_work_found(&p->sleep);
    mp_pool_free(p);
}

Test(sleep, job_posted_after_announce_prevents_sleep, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    mp__pool_idle idle;
    mp__pool_core_latch latch;
    atomic_init(&latch.state, MP__LATCH_UNSET);
    mp__pool_sleep_start_looking(&p->sleep, &idle, 0);
    rounds_until_sleep(p, &idle, &latch);
    /* A job is posted between our announcement and our sleep attempt. */
    mp__pool_sleep_new_internal_jobs(&p->sleep, 1, true);
    mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p); /* must return, not block */
    cr_assert_eq(idle.rounds, MP__SLEEP_ROUNDS_UNTIL_SLEEPY, "back to re-announce");
    cr_assert_eq(atomic_load_explicit(&latch.state, memory_order_relaxed), MP__LATCH_UNSET);
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0);
    mp__pool_sleep_work_found(&p->sleep);
    mp_pool_free(p);
}

static void nop(mp__pool_job *j)
{
    (void)j;
}

Test(sleep, injected_job_seen_after_registering_prevents_block, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    mp__pool_idle idle;
    mp__pool_core_latch latch;
    mp__pool_job job = {nop, NULL};
    atomic_init(&latch.state, MP__LATCH_UNSET);
    mp__pool_sleep_start_looking(&p->sleep, &idle, 0);
    rounds_until_sleep(p, &idle, &latch);
    /* The job is on the stack but its poster has not reached new_injected_jobs yet (or the
     * JEC wrapped): only the check after fence #2 can see it. */
    mp__pool_inject_push(&p->inject, &job);
    mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p); /* must return, not block */
    cr_assert_eq(idle.rounds, 0);
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0, "unregistered itself");
    cr_assert_eq(mp__pool_inject_take_all(&p->inject), &job);
    mp__pool_sleep_work_found(&p->sleep);
    mp_pool_free(p);
}

Test(sleep, set_latch_prevents_sleep, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    mp__pool_idle idle;
    mp__pool_core_latch latch;
    atomic_init(&latch.state, MP__LATCH_UNSET);
    mp__pool_sleep_start_looking(&p->sleep, &idle, 0);
    rounds_until_sleep(p, &idle, &latch);
    mp__pool_latch_set_core(&latch);
    mp__pool_sleep_no_work_found(&p->sleep, &idle, &latch, p);
    cr_assert(mp__pool_latch_probe(&latch));
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0);
    mp__pool_sleep_work_found(&p->sleep);
    mp_pool_free(p);
}

/* A real block: a thread plays worker 0 and sleeps; the main thread wakes it, once by posting
 * a job and once by setting its latch. */

struct sleeper {
    mp_pool *p;
    mp__pool_spin_latch latch;
    _Atomic bool stop;
};

static void *sleeper_main(void *v)
{
    struct sleeper *s = v;
    mp__pool_idle idle;
    mp__pool_sleep_start_looking(&s->p->sleep, &idle, 0);
    /* Relaxed: the flag only ends the loop; the latch and the counter word carry ordering. */
    while (!mp__pool_latch_probe(&s->latch.core) &&
           !atomic_load_explicit(&s->stop, memory_order_relaxed))
        mp__pool_sleep_no_work_found(&s->p->sleep, &idle, &s->latch.core, s->p);
    mp__pool_sleep_work_found(&s->p->sleep);
    return NULL;
}

static void wait_sleeping(mp_pool *p, uint32_t n)
{
    while (mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)) != n)
        sched_yield();
}

Test(sleep, poster_wakes_sleeper_and_waker_unregisters_it, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    struct sleeper s = {.p = p};
    mp__pool_spin_latch_init(&s.latch, 0);
    atomic_init(&s.stop, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, sleeper_main, &s), 0);
    wait_sleeping(p, 1);
    atomic_store_explicit(&s.stop, true, memory_order_relaxed);
    /* One job, no awake idle thread, one sleeper: exactly one wake, and the waker takes the
     * sleeper off the count before the sleeper even runs. */
    mp__pool_sleep_new_internal_jobs(&p->sleep, 1, true);
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0);
    pthread_join(th, NULL);
    cr_assert_eq(mp__sleep_inactive(mp__pool_sleep_load(&p->sleep)), 0);
    mp_pool_free(p);
}

Test(sleep, latch_set_wakes_its_sleeping_owner, .timeout = 30)
{
    mp_pool *p = make_pool(2);
    struct sleeper s = {.p = p};
    mp__pool_spin_latch_init(&s.latch, 0);
    atomic_init(&s.stop, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, sleeper_main, &s), 0);
    wait_sleeping(p, 1);
    mp__pool_spin_latch_set(p, &s.latch);
    pthread_join(th, NULL);
    cr_assert(mp__pool_latch_probe(&s.latch.core));
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0);
    mp_pool_free(p);
}

Test(sleep, wakes_only_as_many_as_jobs_exceed_awake_idle, .timeout = 30)
{
    mp_pool *p = make_pool(3);
    struct sleeper s = {.p = p};
    mp__pool_spin_latch_init(&s.latch, 0);
    atomic_init(&s.stop, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, sleeper_main, &s), 0);
    wait_sleeping(p, 1);
    atomic_store_explicit(&s.stop, true, memory_order_relaxed);
    /* Pretend two more workers are idle but awake. seq_cst like every RMW of the word;
     * pairs with (C) in new_internal_jobs below. */
    atomic_fetch_add_explicit(&p->sleep.counters, 2 * MP__SLEEP_ONE_INACTIVE, memory_order_seq_cst);
    mp__pool_sleep_new_internal_jobs(&p->sleep, 2, true);
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 1,
                 "two jobs, two awake idle workers: nobody to wake");
    mp__pool_sleep_new_internal_jobs(&p->sleep, 3, true);
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0,
                 "three jobs: the sleeper is needed");
    pthread_join(th, NULL);
    atomic_fetch_sub_explicit(&p->sleep.counters, 2 * MP__SLEEP_ONE_INACTIVE, memory_order_seq_cst);
    cr_assert_eq(mp__sleep_inactive(mp__pool_sleep_load(&p->sleep)), 0);
    mp_pool_free(p);
}

Test(sleep, backlog_wakes_even_with_awake_idle, .timeout = 30)
{
    mp_pool *p = make_pool(3);
    struct sleeper s = {.p = p};
    mp__pool_spin_latch_init(&s.latch, 0);
    atomic_init(&s.stop, false);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, sleeper_main, &s), 0);
    wait_sleeping(p, 1);
    atomic_store_explicit(&s.stop, true, memory_order_relaxed);
    /* seq_cst like every RMW of the word; pairs with (C) in new_internal_jobs below. */
    atomic_fetch_add_explicit(&p->sleep.counters, 2 * MP__SLEEP_ONE_INACTIVE, memory_order_seq_cst);
    /* The queue already held jobs: the awake idle ones are not keeping up. */
    mp__pool_sleep_new_internal_jobs(&p->sleep, 1, false);
    cr_assert_eq(mp__sleep_sleeping(mp__pool_sleep_load(&p->sleep)), 0);
    pthread_join(th, NULL);
    atomic_fetch_sub_explicit(&p->sleep.counters, 2 * MP__SLEEP_ONE_INACTIVE, memory_order_seq_cst);
    mp_pool_free(p);
}

/* 10^4 sleep/wake cycles through the public API. */

struct small {
    int n;
    long r;
};

static void small_fib(void *v)
{
    struct small *s = v;
    if (s->n < 2) {
        s->r = s->n;
        return;
    }
    struct small a = {s->n - 1, 0}, b = {s->n - 2, 0};
    mp_pool_join(small_fib, &a, small_fib, &b);
    s->r = a.r + b.r;
}

Test(sleep, ten_thousand_sleep_wake_cycles_lose_no_wakeup, .timeout = 180)
{
    enum { CYCLES = 10000 };
    unsigned seed = (unsigned)test_seed_or(99);
    mp_pool *p = make_pool(2);
    size_t full_sleeps = 0;
    for (int i = 0; i < CYCLES; i++) {
        struct small s = {8, 0};
        cr_assert_eq(mp_pool_call(p, small_fib, &s), 0);
        cr_assert_eq(s.r, 21);
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 2 == 0) {
            /* Let every started worker go all the way to sleep before the next call. */
            mp_pool_stats st;
            for (;;) {
                mp_pool_stats_get(p, &st);
                if (st.workers_sleeping == st.workers_started)
                    break;
                sched_yield();
            }
            full_sleeps++;
        } else {
            /* Call again somewhere in the middle of the idle rounds. */
            unsigned yields = (seed >> 20) % 64;
            for (unsigned k = 0; k < yields; k++)
                sched_yield();
        }
    }
    mp_pool_stats st;
    mp_pool_stats_get(p, &st);
    cr_log_info("%zu full sleeps, %llu blocks", full_sleeps, (unsigned long long)st.sleeps);
    cr_assert_geq(st.sleeps, full_sleeps);
    mp_pool_free(p);
}
