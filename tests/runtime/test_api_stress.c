/* A user-shaped stress of libmagpie, written against magpie.h alone: the way an application
 * uses the runtime, not the way the unit suites poke at one mechanism. Built also with the
 * 4-slot ring (test_api_stress-q4), where overflows and steals are in every run.
 *
 * Each run spawns, from two plain threads and from tasks, a mix of tasks that yield, sleep on
 * timers (moving their deadlines after they fire), send on a channel to a consumer task, wait
 * on a notify, await a child with mp_join_poll, spawn children, and hand their waker to plain
 * threads that wake them by reference twice and then by value. After a while the runtime is
 * shut down in the middle of all that, by cancelling or by draining; knobs (disable_lifo,
 * disable_steal), worker counts and failing thread starts vary with the seed. The outside
 * spawners also join with deadlines: mp_block_on_until() of 0-3 ms (a task cancelled when it
 * passes first) and mp_join_until() of 0-2 ms on tasks spawned earlier, racing their completion
 * and the shutdown. Other scenarios: idle-then-sleep timer cycles, bursts of work between idle
 * periods, and the sync primitives, where half the semaphore, mutex and MPMC waits, of tasks
 * (mp_timeout_poll) and plain threads (mp_wait_until), have a deadline of a few ms and retry
 * after it: a grant that races the deadline must be neither lost nor given twice, which the
 * exact counts of permits, lock updates and values show.
 *
 * Every task checks that it is never polled concurrently or after it finished, cancelled at
 * most once and never after READY, and released exactly once, after it finished. Every run
 * checks exact counts (spawned = completed + cancelled = released; channel values sent =
 * received + left; join results agree with what happened) and has a watchdog that prints the
 * stuck state and aborts when nothing moves for MP_STRESS_STUCK_S seconds.
 *
 * Environment: MP_TEST_SEED (printed; replays a run), MP_STRESS_MS (spawning phase of a run,
 * default 150), MP_STRESS_ROUNDS (runs per worker count, default 1), MP_STRESS_WORKERS
 * ("1,2,3,8" style list or "1-16"; default per test). `make stress` runs it for minutes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "magpie.h"
#include "test_util.h"

/* The one thing taken from outside magpie.h: the suites' fault-injection hook (internal.h,
 * testhook.c), to make thread starts fail the way a loaded machine does. */
void mp__test_fail_spawn_nth(unsigned nth);

enum kind {
    K_YIELD,
    K_SLEEP,
    K_CHAN,
    K_NOTIFY,
    K_JOIN,
    K_PLAIN,
    K_SPAWN,
    K_WJOIN,
    K_CONSUMER,
    K_KINDS
};
static const char *const kind_name[K_KINDS] = {"yield", "sleep", "chan",  "notify",  "join",
                                               "plain", "spawn", "wjoin", "consumer"};

#define MAX_TASKS 60000
#define MAILBOX   32

typedef struct run run;

typedef struct utask {
    mp_task task;
    run *r;
    uint64_t rng;
    int kind;
    int steps;
    bool joinable;
    /* kind state, the task's own (touched only in its poll and cancel) */
    mp_timer timer;
    bool timer_on;
    uint64_t deadline;
    mp_chan_waiter cw;
    bool in_send;
    mp_notify_waiter nw;
    bool notify_on;
    struct utask *child;
    _Atomic int plain_pending; /* its waker is in the plain threads' mailbox */
    /* invariants */
    _Atomic int in_poll, done, cancels, released;
    _Atomic int polls;
} utask;

typedef struct cell {
    mp_waker waker;
    utask *u;
} cell;

struct run {
    mp_runtime *rt;
    mp_shutdown_mode mode;
    unsigned workers;
    utask *tasks;
    _Atomic size_t ntasks;  /* slots handed out */
    _Atomic size_t spawned; /* spawns that succeeded */
    _Atomic size_t completed, cancelled, released;
    _Atomic uint64_t progress;
    _Atomic uint64_t sent, received;
    mp_chan chan;
    mp_notify notify;
    _Atomic(cell *) mailbox[MAILBOX];
    _Atomic bool stop_spawning, stop_helpers, spawning_done;
    _Atomic bool failed;
    char why[160];
    uint64_t seed;
};

static void fail(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(run *r, const char *fmt, ...)
{
    if (atomic_exchange(&r->failed, true))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "api_stress: %s (MP_TEST_SEED=%" PRIu64 ")\n", r->why, r->seed);
}

static long stress_ms(void)
{
    return test_env_long("MP_STRESS_MS", 150);
}

static const mp_task_vtable utask_vt;

/* A fresh task slot, or NULL when the run's array is full. */
static utask *new_task(run *r, int kind, uint64_t seed)
{
    size_t i = atomic_fetch_add(&r->ntasks, 1);
    if (i >= MAX_TASKS) {
        atomic_fetch_sub(&r->ntasks, 1);
        return NULL;
    }
    utask *u = &r->tasks[i];
    memset(u, 0, sizeof *u);
    mp_task_init(&u->task, &utask_vt);
    u->r = r;
    u->rng = seed | 1;
    u->kind = kind;
    u->steps = 1 + (int)(test_rand(&u->rng) % (kind == K_YIELD ? 40 : 6));
    mp_timer_init(&u->timer, r->rt);
    mp_notify_waiter_init(&u->nw);
    return u;
}

static int random_kind(uint64_t *rng)
{
    return (int)(test_rand(rng) % K_CONSUMER); /* every kind but the consumer */
}

/* Spawn u (detached or joinable); false if refused (shutdown, or no worker could start). */
static bool spawn_task(run *r, utask *u, bool joinable)
{
    u->joinable = joinable;
    int rc = joinable ? mp_spawn_joinable(r->rt, &u->task) : mp_spawn(r->rt, &u->task);
    if (rc == 0) {
        atomic_fetch_add(&r->spawned, 1);
        return true;
    }
    if (rc != -ESHUTDOWN && rc != -EAGAIN)
        fail(r, "spawn: %d", rc);
    atomic_store(&u->done, -1); /* never spawned: not counted */
    return false;
}

static void mailbox_put(run *r, utask *u, const mp_waker *w)
{
    cell *c = malloc(sizeof *c);
    c->waker = mp_waker_clone(w);
    c->u = u;
    atomic_store(&u->plain_pending, 1);
    size_t i = (size_t)(test_rand(&u->rng) % MAILBOX);
    for (;;) {
        cell *expected = NULL;
        if (atomic_compare_exchange_strong(&r->mailbox[i], &expected, c))
            return;
        i = (i + 1) % MAILBOX;
    }
}

static mp_poll step_sleep(utask *u, mp_context *cx)
{
    for (;;) {
        if (!u->timer_on) {
            u->deadline = mp_now_ms() + test_rand(&u->rng) % 4;
            u->timer_on = true;
        }
        if (mp_timer_poll(&u->timer, u->deadline, cx) == MP_PENDING)
            return MP_PENDING;
        if (mp_now_ms() < u->deadline)
            fail(u->r, "timer READY before its deadline");
        /* Sometimes move a fired deadline later: it must wait for the new one. */
        if (test_rand(&u->rng) % 3 == 0) {
            u->deadline = mp_now_ms() + 1 + test_rand(&u->rng) % 3;
            continue;
        }
        u->timer_on = false;
        if (--u->steps <= 0) {
            mp_timer_cancel(&u->timer);
            return MP_READY;
        }
    }
}

static mp_poll step_chan(utask *u, mp_context *cx)
{
    run *r = u->r;
    while (u->steps > 0) {
        int err;
        u->in_send = true;
        if (mp_chan_send_poll(&r->chan, &u->cw, u, cx, &err) == MP_PENDING)
            return MP_PENDING;
        u->in_send = false;
        if (err == -EPIPE)
            return MP_READY; /* the consumer is gone */
        if (err != 0)
            fail(r, "chan send: %d", err);
        atomic_fetch_add(&r->sent, 1);
        u->steps--;
    }
    return MP_READY;
}

static mp_poll step_consumer(utask *u, mp_context *cx)
{
    run *r = u->r;
    for (;;) {
        void *v;
        int err;
        if (mp_chan_recv_poll(&r->chan, cx, &v, &err) == MP_PENDING)
            return MP_PENDING;
        if (err == -EPIPE)
            return MP_READY;
        if (err != 0 || v == NULL)
            fail(r, "chan recv: %d", err);
        atomic_fetch_add(&r->received, 1);
        if (test_rand(&u->rng) % 16 == 0)
            return mp_yield(cx);
    }
}

static mp_poll step_notify(utask *u, mp_context *cx)
{
    run *r = u->r;
    while (u->steps > 0) {
        u->notify_on = true;
        if (mp_notify_poll(&r->notify, &u->nw, cx) == MP_PENDING)
            return MP_PENDING;
        u->notify_on = false;
        mp_notify_waiter_init(&u->nw);
        u->steps--;
    }
    return MP_READY;
}

static mp_poll step_join(utask *u, mp_context *cx)
{
    run *r = u->r;
    if (!u->child) {
        utask *c = new_task(r, test_rand(&u->rng) % 2 ? K_YIELD : K_SLEEP, test_rand(&u->rng));
        if (!c)
            return MP_READY;
        c->joinable = true;
        if (mp_spawn_joinable(mp_runtime_current(), &c->task) != 0) {
            atomic_store(&c->done, -1);
            return MP_READY;
        }
        atomic_fetch_add(&r->spawned, 1);
        u->child = c;
    }
    int result;
    if (mp_join_poll(&u->child->task, cx, &result) == MP_PENDING)
        return MP_PENDING;
    utask *c = u->child;
    u->child = NULL;
    bool child_done = atomic_load(&c->done) == 1;
    if ((result == 0) != child_done || (result != 0 && result != -ECANCELED))
        fail(r, "join_poll result %d, child done %d", result, atomic_load(&c->done));
    return MP_READY;
}

/* A blocking job that writes into memory its joiner frees as soon as mp_join returns, as a
 * caller may: a join that returned before the job's last write is a use-after-free (ASan). */
typedef struct wjob {
    _Atomic int started, finished;
    unsigned sleep_us;
} wjob;

static void wjob_fn(void *arg)
{
    wjob *j = arg;
    atomic_store(&j->started, 1);
    if (j->sleep_us)
        usleep(j->sleep_us);
    atomic_store(&j->finished, 1);
}

/* Join on the worker with mp_join (which helps meanwhile), as a poll may: two children, so
 * that the first leaves the LIFO slot for the ring where another worker may steal it, and a
 * blocking job. A shutdown in the middle must still return each join only once its target
 * is done: 0 when it completed (a started job always does), -ECANCELED when it never will.
 * A join that helps may run another such task on its stack, whose join helps in turn: the
 * nesting is capped here, as the header asks of recursive joins on workers (the default stack
 * overflowed at a few thousand levels under ASan). */
static _Thread_local int wjoin_depth;

static mp_poll step_wjoin(utask *u, mp_context *cx)
{
    (void)cx;
    run *r = u->r;
    if (wjoin_depth >= 4)
        return MP_READY;
    wjoin_depth++;
    mp_runtime *rt = mp_runtime_current();
    utask *kids[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        utask *c = new_task(r, test_rand(&u->rng) % 2 ? K_YIELD : K_SLEEP, test_rand(&u->rng));
        if (!c)
            break;
        c->joinable = true;
        if (mp_spawn_joinable(rt, &c->task) != 0) {
            atomic_store(&c->done, -1);
            break;
        }
        atomic_fetch_add(&r->spawned, 1);
        kids[i] = c;
    }
    wjob *j = calloc(1, sizeof *j);
    j->sleep_us = (unsigned)(test_rand(&u->rng) % 2000);
    mp_task *h = NULL;
    if (mp_spawn_blocking(rt, wjob_fn, j, &h) != 0)
        h = NULL;
    for (int i = 0; i < 2; i++) {
        if (!kids[i])
            continue;
        int result = mp_join(&kids[i]->task);
        int done = atomic_load(&kids[i]->done), cancels = atomic_load(&kids[i]->cancels);
        if (result == 0 ? done != 1 : result != -ECANCELED || cancels != 1)
            fail(r, "mp_join on a worker: %d, child done %d cancels %d", result, done, cancels);
    }
    if (h) {
        int result = mp_join(h);
        if (result == 0 && !atomic_load(&j->finished))
            fail(r, "mp_join of a job on a worker returned 0 before the job finished");
        if (result == -ECANCELED && atomic_load(&j->started))
            fail(r, "mp_join of a job on a worker: -ECANCELED although the job ran");
        if (result != 0 && result != -ECANCELED)
            fail(r, "mp_join of a job on a worker: %d", result);
    }
    free(j);
    wjoin_depth--;
    return MP_READY;
}

static mp_poll step_plain(utask *u, mp_context *cx)
{
    if (atomic_load(&u->plain_pending))
        return MP_PENDING; /* woken by something else: the mailbox still holds our waker */
    if (u->steps-- <= 0)
        return MP_READY;
    mailbox_put(u->r, u, mp_context_waker(cx));
    return MP_PENDING;
}

static mp_poll step_spawn(utask *u, mp_context *cx)
{
    run *r = u->r;
    int n = 1 + (int)(test_rand(&u->rng) % 3);
    mp_task *list[3];
    utask *kids[3];
    int k = 0;
    for (int i = 0; i < n; i++) {
        utask *c = new_task(r, test_rand(&u->rng) % 2 ? K_YIELD : K_PLAIN, test_rand(&u->rng));
        if (c)
            kids[k] = c, list[k++] = &c->task;
    }
    if (k == 0)
        return MP_READY;
    if (test_rand(&u->rng) % 2) {
        int got = mp_spawn_batch(mp_runtime_current(), list, (size_t)k);
        if (got < 0 || (got != 0 && got != k))
            fail(r, "spawn_batch from a worker: %d of %d", got, k);
        atomic_fetch_add(&r->spawned, (size_t)(got > 0 ? got : 0));
        for (int i = got > 0 ? got : 0; i < k; i++)
            atomic_store(&kids[i]->done, -1);
    } else {
        for (int i = 0; i < k; i++) {
            if (mp_spawn(mp_runtime_current(), list[i]) == 0)
                atomic_fetch_add(&r->spawned, 1);
            else
                atomic_store(&kids[i]->done, -1);
        }
    }
    (void)cx;
    return MP_READY;
}

static mp_poll utask_poll(mp_task *t, mp_context *cx)
{
    utask *u = mp_container_of(t, utask, task);
    run *r = u->r;
    if (atomic_exchange(&u->in_poll, 1))
        fail(r, "task %zu polled concurrently", (size_t)(u - r->tasks));
    if (atomic_load(&u->done) || atomic_load(&u->cancels) || atomic_load(&u->released))
        fail(r, "task %zu polled after it finished", (size_t)(u - r->tasks));
    if (mp_runtime_current() != r->rt)
        fail(r, "mp_runtime_current() in a poll");
    atomic_fetch_add(&u->polls, 1);
    atomic_fetch_add(&r->progress, 1);
    /* Now and then, poke the notify from a task. */
    if (test_rand(&u->rng) % 8 == 0)
        mp_notify_one(&r->notify);
    mp_poll p = MP_READY;
    if (u->kind == K_YIELD) {
        p = u->steps-- > 0 ? mp_yield(cx) : MP_READY;
    } else if (u->kind == K_SLEEP) {
        p = step_sleep(u, cx);
    } else if (u->kind == K_CHAN) {
        p = step_chan(u, cx);
    } else if (u->kind == K_CONSUMER) {
        p = step_consumer(u, cx);
    } else if (u->kind == K_NOTIFY) {
        p = step_notify(u, cx);
    } else if (u->kind == K_JOIN) {
        p = step_join(u, cx);
    } else if (u->kind == K_PLAIN) {
        p = step_plain(u, cx);
    } else if (u->kind == K_SPAWN) {
        p = step_spawn(u, cx);
    } else if (u->kind == K_WJOIN) {
        p = step_wjoin(u, cx);
    }
    if (p == MP_READY) {
        atomic_store(&u->done, 1);
        atomic_fetch_add(&r->completed, 1);
    }
    atomic_store(&u->in_poll, 0);
    return p;
}

/* Give back what the task left in primitives, as a Rust future's drop would. */
static void utask_cancel(mp_task *t)
{
    utask *u = mp_container_of(t, utask, task);
    run *r = u->r;
    if (atomic_load(&u->done))
        fail(r, "task %zu cancelled after READY", (size_t)(u - r->tasks));
    if (atomic_fetch_add(&u->cancels, 1) != 0)
        fail(r, "task %zu cancelled twice", (size_t)(u - r->tasks));
    if (atomic_load(&u->in_poll))
        fail(r, "task %zu cancelled during its poll", (size_t)(u - r->tasks));
    mp_timer_cancel(&u->timer);
    if (u->in_send)
        mp_chan_cancel_send(&r->chan, &u->cw);
    if (u->notify_on)
        mp_notify_cancel(&r->notify, &u->nw);
    if (u->kind == K_CONSUMER)
        mp_chan_cancel_recv(&r->chan);
    if (u->child)
        mp_detach(&u->child->task);
    atomic_fetch_add(&r->cancelled, 1);
}

static void utask_release(mp_task *t)
{
    utask *u = mp_container_of(t, utask, task);
    run *r = u->r;
    if (atomic_fetch_add(&u->released, 1) != 0)
        fail(r, "task %zu released twice", (size_t)(u - r->tasks));
    if (atomic_load(&u->done) != 1 && atomic_load(&u->cancels) != 1)
        fail(r, "task %zu released before it finished", (size_t)(u - r->tasks));
    atomic_fetch_add(&r->released, 1);
}

static const mp_task_vtable utask_vt = {
    .poll = utask_poll, .cancel = utask_cancel, .release = utask_release};

/* Outside spawners: tasks one by one, detached or joinable, now and then a batch or a
 * mp_block_on. Joinable handles are joined at the end of the run. */
typedef struct spawner {
    run *r;
    uint64_t rng;
    utask **joinables;
    size_t njoin;
} spawner;

static void *spawner_main(void *arg)
{
    spawner *s = arg;
    run *r = s->r;
    s->joinables = calloc(MAX_TASKS, sizeof *s->joinables);
    while (!atomic_load(&r->stop_spawning)) {
        uint64_t x = test_rand(&s->rng);
        if (x % 64 == 0) {
            mp_task *list[8];
            utask *kids[8];
            int k = 0;
            for (int i = 0; i < 8; i++) {
                utask *u = new_task(r, random_kind(&s->rng), test_rand(&s->rng));
                if (u)
                    kids[k] = u, list[k++] = &u->task;
            }
            int got = k ? mp_spawn_batch(r->rt, list, (size_t)k) : 0;
            if (got < 0 && got != -EAGAIN)
                fail(r, "outside spawn_batch: %d", got);
            atomic_fetch_add(&r->spawned, (size_t)(got > 0 ? got : 0));
            for (int i = got > 0 ? got : 0; i < k; i++)
                atomic_store(&kids[i]->done, -1);
        } else if (x % 64 == 1 && r->mode == MP_SHUTDOWN_CANCEL) {
            utask *u = new_task(r, K_YIELD, test_rand(&s->rng));
            if (u) {
                u->joinable = true;
                /* Half of them with a deadline of 0-3 ms: cancelled when it passes first. */
                bool timed = (x >> 8) % 2 == 0;
                int rc = timed ? mp_block_on_until(r->rt, &u->task, mp_now_ms() + (x >> 9) % 4)
                               : mp_block_on(r->rt, &u->task);
                if (rc == -ESHUTDOWN || rc == -EAGAIN) {
                    atomic_store(&u->done, -1);
                } else {
                    atomic_fetch_add(&r->spawned, 1);
                    if (rc != 0 && rc != -ECANCELED && !(timed && rc == -ETIMEDOUT))
                        fail(r, "block_on: %d", rc);
                    if ((rc == 0) != (atomic_load(&u->done) == 1))
                        fail(r, "block_on %d but done %d", rc, atomic_load(&u->done));
                    if (rc != 0 && atomic_load(&u->cancels) != 1)
                        fail(r, "block_on %d but cancels %d", rc, atomic_load(&u->cancels));
                }
            }
        } else if (x % 64 == 2 && s->njoin > 0) {
            /* A join with a deadline of 0-2 ms on a task spawned earlier, racing its
             * completion (and, in cancel mode, the shutdown): a timed-out join keeps the
             * handle, which is joined later (here again, or after the run). */
            size_t j = (size_t)((x >> 8) % s->njoin);
            utask *u = s->joinables[j];
            int rc = mp_join_until(&u->task, mp_now_ms() + (x >> 20) % 3);
            if (rc != -ETIMEDOUT) {
                if (!((rc == 0 && atomic_load(&u->done) == 1) ||
                      (rc == -ECANCELED && atomic_load(&u->cancels) == 1)))
                    fail(r, "join_until %d, done %d, cancels %d", rc, atomic_load(&u->done),
                         atomic_load(&u->cancels));
                s->joinables[j] = s->joinables[--s->njoin];
            }
        } else {
            utask *u = new_task(r, random_kind(&s->rng), test_rand(&s->rng));
            if (!u)
                break;
            bool joinable = x % 3 == 0;
            if (spawn_task(r, u, joinable) && joinable)
                s->joinables[s->njoin++] = u;
        }
        if (x % 16 == 0)
            usleep((useconds_t)(x >> 40) % 200);
    }
    return NULL;
}

/* Plain threads: take wakers from the mailbox, wake by reference twice, then by value; and
 * notify the notify's waiters now and then. */
static void *helper_main(void *arg)
{
    run *r = arg;
    uint64_t rng = r->seed ^ (uint64_t)(uintptr_t)&rng;
    while (!atomic_load(&r->stop_helpers)) {
        bool any = false;
        for (size_t i = 0; i < MAILBOX; i++) {
            cell *c = atomic_exchange(&r->mailbox[i], NULL);
            if (!c)
                continue;
            any = true;
            atomic_store(&c->u->plain_pending, 0);
            mp_waker_wake_by_ref(&c->waker);
            mp_waker_wake_by_ref(&c->waker);
            mp_waker_wake(&c->waker);
            free(c);
        }
        uint64_t x = test_rand(&rng);
        if (x % 4 == 0)
            mp_notify_one(&r->notify);
        else if (x % 32 == 1)
            mp_notify_all(&r->notify);
        if (!any)
            usleep(50 + (useconds_t)(x >> 48) % 100);
    }
    return NULL;
}

static void print_stuck(run *r)
{
    size_t n = atomic_load(&r->ntasks);
    unsigned open[K_KINDS] = {0};
    fprintf(stderr,
            "api_stress: stuck (MP_TEST_SEED=%" PRIu64 ", %u workers, %s): spawned %zu "
            "completed %zu cancelled %zu released %zu\n",
            r->seed, r->workers, r->mode == MP_SHUTDOWN_DRAIN ? "drain" : "cancel",
            atomic_load(&r->spawned), atomic_load(&r->completed), atomic_load(&r->cancelled),
            atomic_load(&r->released));
    int shown = 0;
    for (size_t i = 0; i < n && i < MAX_TASKS; i++) {
        utask *u = &r->tasks[i];
        if (atomic_load(&u->done) != 0 || atomic_load(&u->cancels) != 0)
            continue;
        open[u->kind]++;
        if (shown++ < 8)
            fprintf(stderr,
                    "  task %zu %s: steps %d polls %d state %#" PRIx64 " plain_pending %d "
                    "deadline %" PRIu64 " (now %" PRIu64 ")\n",
                    i, kind_name[u->kind], u->steps, atomic_load(&u->polls),
                    (uint64_t)atomic_load(&u->task.state), atomic_load(&u->plain_pending),
                    u->deadline, mp_now_ms());
    }
    for (int k = 0; k < K_KINDS; k++)
        if (open[k])
            fprintf(stderr, "  %u open %s tasks\n", open[k], kind_name[k]);
    mp_stats st;
    mp_runtime_stats_get(r->rt, &st);
    fprintf(stderr,
            "  runtime: started %u live %" PRIu64 " parks %" PRIu64 " unparks %" PRIu64
            " drives %" PRIu64 "\n",
            st.workers_started, st.live_tasks, st.total.parks, st.total.unparks, st.total.drives);
}

typedef struct watchdog {
    run *r;
    _Atomic bool stop;
    pthread_t th;
} watchdog;

static void *watchdog_main(void *arg)
{
    watchdog *w = arg;
    long stuck_s = test_env_long("MP_STRESS_STUCK_S", 20);
    uint64_t last = UINT64_MAX;
    long quiet_ms = 0;
    while (!atomic_load(&w->stop)) {
        usleep(10000);
        uint64_t p = atomic_load(&w->r->progress);
        quiet_ms = p == last ? quiet_ms + 10 : 0;
        last = p;
        if (quiet_ms >= stuck_s * 1000) {
            print_stuck(w->r);
            abort();
        }
    }
    return NULL;
}

static void watchdog_start(watchdog *w, run *r)
{
    w->r = r;
    atomic_store(&w->stop, false);
    pthread_create(&w->th, NULL, watchdog_main, w);
}

static void watchdog_stop(watchdog *w)
{
    atomic_store(&w->stop, true);
    pthread_join(w->th, NULL);
}

/* Checks once every task has finished and every waker is gone. */
static void check_counts(run *r)
{
    size_t n = atomic_load(&r->ntasks), spawned = 0;
    for (size_t i = 0; i < n; i++) {
        utask *u = &r->tasks[i];
        int done = atomic_load(&u->done), cancels = atomic_load(&u->cancels);
        if (done == -1)
            continue;
        spawned++;
        cr_assert((done == 1) + cancels == 1,
                  "task %zu (%s): done %d cancels %d (seed %" PRIu64 ")", i, kind_name[u->kind],
                  done, cancels, r->seed);
        cr_assert_eq(atomic_load(&u->released), 1,
                     "task %zu (%s) released %d times (seed %" PRIu64 ")", i, kind_name[u->kind],
                     atomic_load(&u->released), r->seed);
    }
    cr_assert_eq(spawned, atomic_load(&r->spawned), "seed %" PRIu64, r->seed);
    cr_assert_eq(atomic_load(&r->completed) + atomic_load(&r->cancelled), spawned);
    cr_assert_eq(atomic_load(&r->released), spawned);
}

static void run_init(run *r, unsigned workers, uint64_t seed, mp_config *cfg)
{
    memset(r, 0, sizeof *r);
    r->seed = seed;
    r->workers = workers;
    r->tasks = calloc(MAX_TASKS, sizeof *r->tasks);
    cr_assert(r->tasks);
    r->mode = cfg->shutdown_mode;
    r->rt = test_runtime_with(cfg);
    cr_assert_eq(mp_chan_init(&r->chan, 1 + (uint32_t)(seed % 4)), 0);
    mp_notify_init(&r->notify);
}

/* One run of the mixed workload, ended by a shutdown in the middle of it. */
static void mixed_run(unsigned workers, uint64_t seed, unsigned fail_spawn_nth)
{
    uint64_t rng = seed;
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    cfg.disable_lifo = test_rand(&rng) % 4 == 0;
    cfg.disable_steal = test_rand(&rng) % 4 == 0;
    cfg.shutdown_mode = test_rand(&rng) % 2 ? MP_SHUTDOWN_DRAIN : MP_SHUTDOWN_CANCEL;
    cfg.drain_timeout_ms = 30000; /* finite work: a drain that needs this long is a bug */
    mp__test_fail_spawn_nth(fail_spawn_nth);
    if (test_rand(&rng) % 2)
        cfg.stack_size = 256 << 10;
    static run r;
    run_init(&r, workers, seed, &cfg);
    watchdog wd;
    watchdog_start(&wd, &r);

    utask *consumer = new_task(&r, K_CONSUMER, test_rand(&rng));
    consumer->steps = 0;
    while (!spawn_task(&r, consumer, true)) /* -EAGAIN: no worker could start yet */
        atomic_store(&consumer->done, 0);
    pthread_t helpers[2], spawners[2];
    spawner sp[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&helpers[i], NULL, helper_main, &r);
    for (int i = 0; i < 2; i++) {
        sp[i] = (spawner){.r = &r, .rng = test_rand(&rng) | 1};
        pthread_create(&spawners[i], NULL, spawner_main, &sp[i]);
    }
    long ms = stress_ms();
    for (long t = 0; t < ms && !atomic_load(&r.failed); t += 10) {
        usleep(10000);
        atomic_fetch_add(&r.progress, 1);
    }
    if (r.mode == MP_SHUTDOWN_DRAIN) {
        /* Draining: outside spawns stop, the channel closes so that its consumer and senders
         * finish, and the plain threads keep waking and notifying until the drain is over. */
        atomic_store(&r.stop_spawning, true);
        for (int i = 0; i < 2; i++)
            pthread_join(spawners[i], NULL);
        mp_chan_close(&r.chan);
        cr_assert_eq(mp_runtime_shutdown(r.rt), 0);
        cr_assert_eq(atomic_load(&r.cancelled), 0,
                     "draining finite work cancelled %zu tasks (seed %" PRIu64 ")",
                     atomic_load(&r.cancelled), seed);
    } else {
        /* Cancelling in the middle of everything: spawners still running. */
        cr_assert_eq(mp_runtime_shutdown(r.rt), 0);
        atomic_store(&r.stop_spawning, true);
        for (int i = 0; i < 2; i++)
            pthread_join(spawners[i], NULL);
    }
    atomic_store(&r.stop_helpers, true);
    for (int i = 0; i < 2; i++)
        pthread_join(helpers[i], NULL);
    /* Wakers left with the plain threads are dropped; the tasks are finished by now. */
    for (size_t i = 0; i < MAILBOX; i++) {
        cell *c = atomic_exchange(&r.mailbox[i], NULL);
        if (c) {
            mp_waker_drop(&c->waker);
            free(c);
        }
    }
    /* Join every joinable handle: results agree with what happened to the task. */
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < sp[i].njoin; j++) {
            utask *u = sp[i].joinables[j];
            int rc = mp_join(&u->task);
            cr_assert((rc == 0 && atomic_load(&u->done) == 1) ||
                          (rc == -ECANCELED && atomic_load(&u->cancels) == 1),
                      "join %d, done %d, cancels %d (seed %" PRIu64 ")", rc, atomic_load(&u->done),
                      atomic_load(&u->cancels), seed);
        }
        free(sp[i].joinables);
    }
    cr_assert(mp_task_is_complete(&consumer->task));
    mp_join(&consumer->task);
    cr_assert_eq(mp_runtime_shutdown(r.rt), -EALREADY);
    watchdog_stop(&wd);
    cr_assert_not(atomic_load(&r.failed), "%s", r.why);
    void *left;
    uint64_t leftover = 0;
    while (mp_chan_try_recv(&r.chan, &left) == 0)
        leftover++;
    cr_assert_eq(atomic_load(&r.sent), atomic_load(&r.received) + leftover,
                 "channel: sent %" PRIu64 " received %" PRIu64 " left %" PRIu64,
                 atomic_load(&r.sent), atomic_load(&r.received), leftover);
    check_counts(&r);
    if (getenv("MP_STRESS_VERBOSE"))
        fprintf(stderr,
                "api_stress: %u workers%s%s, %s, fail start %u: spawned %zu completed %zu "
                "cancelled %zu, channel %" PRIu64 "\n",
                workers, cfg.disable_lifo ? " no-lifo" : "", cfg.disable_steal ? " no-steal" : "",
                r.mode == MP_SHUTDOWN_DRAIN ? "drain" : "cancel", fail_spawn_nth,
                atomic_load(&r.spawned), atomic_load(&r.completed), atomic_load(&r.cancelled),
                atomic_load(&r.sent));
    mp_chan_destroy(&r.chan);
    mp_runtime_free(r.rt);
    free(r.tasks);
}

/* "1,2,8" or "1-16"; empty: dflt. */
static size_t parse_workers(const char *dflt, unsigned *out, size_t max)
{
    const char *s = getenv("MP_STRESS_WORKERS");
    if (!s || !*s)
        s = dflt;
    size_t n = 0;
    while (*s && n < max) {
        char *end;
        unsigned a = (unsigned)strtoul(s, &end, 10), b = a;
        if (*end == '-')
            b = (unsigned)strtoul(end + 1, &end, 10);
        for (unsigned w = a; w <= b && n < max; w++)
            out[n++] = w;
        s = *end ? end + 1 : end;
    }
    return n;
}

static void mixed(const char *dflt_workers)
{
    unsigned ws[64];
    size_t nw = parse_workers(dflt_workers, ws, 64);
    long rounds = test_env_long("MP_STRESS_ROUNDS", 1);
    uint64_t seed = test_seed();
    for (long round = 0; round < rounds; round++)
        for (size_t i = 0; i < nw; i++)
            mixed_run(ws[i], seed + (uint64_t)round * 1000 + ws[i], 0);
}

Test(api_stress, mixed_small_worker_counts, .timeout = 600)
{
    mixed("1,2,3");
}

Test(api_stress, mixed_large_worker_counts, .timeout = 600)
{
    mixed("8,16");
}

/* Failing thread starts at every worker count: the Nth start fails, for N from 1 to the
 * number of workers. Spawns from outside that find no worker at all may fail with -EAGAIN;
 * nothing else may be lost. */
Test(api_stress, failing_thread_starts, .timeout = 600)
{
    unsigned ws[64];
    size_t nw = parse_workers("1,2,4", ws, 64);
    uint64_t seed = test_seed();
    for (size_t i = 0; i < nw; i++)
        for (unsigned nth = 1; nth <= ws[i]; nth++)
            mixed_run(ws[i], seed + ws[i] * 100 + nth, nth);
}

/* Idle, then one sleeper, wait for it, idle again: the shape that lost timer wake-ups (a
 * timer due as the driver re-entered the loop). The task is run by the workers (the waiter
 * blocks on a oneshot, it does not join). */
typedef struct napper {
    mp_task task;
    mp_timer timer;
    uint64_t deadline;
    mp_oneshot done;
    _Atomic int released;
} napper;

static mp_poll napper_poll(mp_task *t, mp_context *cx)
{
    napper *n = mp_container_of(t, napper, task);
    if (mp_timer_poll(&n->timer, n->deadline, cx) == MP_PENDING)
        return MP_PENDING;
    mp_timer_cancel(&n->timer);
    mp_oneshot_send(&n->done, n);
    return MP_READY;
}

static void napper_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, napper, task)->released, 1);
}

static const mp_task_vtable napper_vt = {.poll = napper_poll, .release = napper_release};

static void *napper_watchdog(void *arg)
{
    _Atomic uint64_t *progress = arg;
    uint64_t last = 0;
    for (int quiet = 0;; usleep(10000)) {
        uint64_t p = atomic_load(progress);
        if (p == UINT64_MAX)
            return NULL;
        quiet = p == last ? quiet + 1 : 0;
        last = p;
        if (quiet >= 1000) {
            fprintf(stderr, "api_stress: a sleeper was never woken (iteration %" PRIu64 ")\n", p);
            abort();
        }
    }
}

Test(api_stress, idle_then_sleep_cycles, .timeout = 600)
{
    unsigned ws[64];
    size_t nw = parse_workers("1,2,4", ws, 64);
    uint64_t rng = test_seed();
    _Atomic uint64_t progress = 0;
    pthread_t wd;
    pthread_create(&wd, NULL, napper_watchdog, &progress);
    for (size_t i = 0; i < nw; i++) {
        mp_runtime *rt = test_runtime(ws[i]);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            napper n = {0};
            mp_task_init(&n.task, &napper_vt);
            mp_timer_init(&n.timer, rt);
            mp_oneshot_init(&n.done);
            n.deadline = mp_now_ms() + 1 + test_rand(&rng) % 3;
            cr_assert_eq(mp_spawn(rt, &n.task), 0);
            void *v;
            cr_assert_eq(mp_oneshot_recv_blocking(&n.done, &v), 0);
            while (!atomic_load(&n.released))
                sched_yield();
            atomic_fetch_add(&progress, 1);
            usleep((useconds_t)(test_rand(&rng) % 1000));
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >=
                2 * stress_ms())
                break;
        }
        mp_runtime_free(rt);
    }
    atomic_store(&progress, UINT64_MAX);
    pthread_join(wd, NULL);
}

/* ---- Sync primitives and task groups, from tasks and plain threads ----------------------
 *
 * One run per worker count (MP_STRESS_WORKERS, default "1,2,4,8"): tasks in a task group and
 * plain threads share a semaphore (permits held across polls), a mutex (a read-yield-write
 * counter), an MPMC channel (producers and consumers on both sides) and a broadcast channel
 * (one sending thread, receiver tasks and a receiver thread); some tasks wait on children of
 * a cancellation token. Tasks of every kind are cancelled at random moments, waiting, granted
 * or holding. A second group is destroyed with its members still running. Exact counts at the
 * end: every permit back, the counter equal to the increments that completed, every MPMC
 * value received exactly once, every broadcast value seen or counted as missed by each
 * receiver, every task released exactly once. */

enum { S_SEM, S_MUTEX, S_PRODUCE, S_CONSUME, S_BCAST, S_TOKEN, S_KINDS };

#define S_CAP      4    /* semaphore permits */
#define S_PER_PROD 3000 /* values per MPMC producer */
#define S_BCAST_N  20000

typedef struct sync_run sync_run;

typedef struct stask {
    mp_group_task gt;
    sync_run *r;
    int kind, id, left;
    uint64_t rng;
    mp_waiter w;
    bool holding;
    uint32_t n;
    long read;
    mp_broadcast_rx brx;
    uint64_t bgot, bmissed, bnext;
    mp_cancel_token child;
    /* Timed waits (S_SEM, S_MUTEX, S_CONSUME, one task in two): the wait under
     * mp_timeout_poll() with a deadline of 1-3 ms, retried after each timeout. */
    bool timed, waiting;
    mp_timer timer;
    uint64_t deadline;
    mp_wait wait;
    void *value;
    int werr;
    _Atomic int in_poll, cancels, released;
} stask;

struct sync_run {
    mp_runtime *rt;
    mp_semaphore sem;
    mp_mutex mu;
    long counter, increments; /* guarded by mu */
    mp_mpmc q;
    _Atomic uint8_t *seen;
    _Atomic uint64_t received;
    mp_broadcast bc;
    mp_cancel_token root;
    _Atomic long held;
    _Atomic uint64_t timeouts; /* timed waits that gave up (tasks and threads) */
    _Atomic int bad;
    _Atomic size_t released;
    char why[160];
};

static void sync_fail(sync_run *r, const char *why)
{
    if (atomic_exchange(&r->bad, 1) == 0)
        snprintf(r->why, sizeof r->why, "%s", why);
}

static void mpmc_take(sync_run *r, void *v)
{
    if (atomic_fetch_add(&r->seen[(uintptr_t)v], 1) != 0)
        sync_fail(r, "an MPMC value was received twice");
    atomic_fetch_add(&r->received, 1);
}

static void bcast_count(sync_run *r, uint64_t *got, uint64_t *missed, uint64_t *next, int err,
                        uint64_t v, uint64_t lost)
{
    if (err == -EOVERFLOW) {
        *missed += lost;
        *next += lost;
        return;
    }
    if (v != *next)
        sync_fail(r, "a broadcast value out of order");
    *next = v + 1;
    (*got)++;
}

/* The waits a timed task bounds, as mp_wait: each cancel gives back what was handed over. */
static mp_poll sem_wait_poll(void *arg, mp_context *cx)
{
    stask *s = arg;
    return mp_semaphore_acquire_poll(&s->r->sem, &s->w, s->n, cx, &s->werr);
}
static bool sem_wait_cancel(void *arg)
{
    stask *s = arg;
    mp_semaphore_cancel_wait(&s->r->sem, &s->w);
    return false;
}
static mp_poll mutex_wait_poll(void *arg, mp_context *cx)
{
    stask *s = arg;
    s->werr = 0;
    return mp_mutex_lock_poll(&s->r->mu, &s->w, cx);
}
static bool mutex_wait_cancel(void *arg)
{
    stask *s = arg;
    mp_mutex_cancel_wait(&s->r->mu, &s->w);
    return false;
}
static mp_poll mpmc_wait_poll(void *arg, mp_context *cx)
{
    stask *s = arg;
    return mp_mpmc_recv_poll(&s->r->q, &s->w, cx, &s->value, &s->werr);
}
static bool mpmc_wait_cancel(void *arg)
{
    stask *s = arg;
    mp_mpmc_cancel_recv(&s->r->q, &s->w);
    return false;
}

/* Poll the task's wait: plainly, or under a deadline; a timeout is counted and the task
 * yields, then waits again with a new deadline. MP_READY: the wait is over, its error in
 * s->werr. */
static mp_poll stask_wait(stask *s, mp_context *cx)
{
    if (!s->timed)
        return s->wait.poll(s->wait.arg, cx);
    if (!s->waiting) {
        s->deadline = mp_now_ms() + 1 + test_rand(&s->rng) % 3;
        s->waiting = true;
    }
    int err;
    if (mp_timeout_poll(&s->timer, s->deadline, &s->wait, cx, &err) == MP_PENDING)
        return MP_PENDING;
    s->waiting = false;
    if (err == -ETIMEDOUT) {
        atomic_fetch_add(&s->r->timeouts, 1);
        mp_yield(cx);
        return MP_PENDING;
    }
    return MP_READY;
}

static mp_poll stask_step(stask *s, mp_context *cx)
{
    sync_run *r = s->r;
    int err;
    switch (s->kind) {
    case S_SEM:
        for (;;) {
            if (s->holding) {
                atomic_fetch_sub(&r->held, s->n);
                s->holding = false;
                mp_semaphore_release(&r->sem, s->n);
                if (--s->left == 0)
                    return MP_READY;
                s->n = 1 + (uint32_t)(test_rand(&s->rng) % 3);
            }
            if (stask_wait(s, cx) == MP_PENDING)
                return MP_PENDING;
            if (s->werr != 0)
                sync_fail(r, "semaphore acquire failed");
            if (atomic_fetch_add(&r->held, s->n) + s->n > S_CAP)
                sync_fail(r, "more permits held than exist");
            s->holding = true;
            return mp_yield(cx);
        }
    case S_MUTEX:
        if (s->holding) {
            r->counter = s->read + 1;
            r->increments++;
            s->holding = false;
            mp_mutex_unlock(&r->mu);
            if (--s->left == 0)
                return MP_READY;
        }
        if (stask_wait(s, cx) == MP_PENDING)
            return MP_PENDING;
        s->read = r->counter;
        s->holding = true;
        return mp_yield(cx);
    case S_PRODUCE:
        while (s->left > 0) {
            void *v = (void *)(uintptr_t)(s->id * S_PER_PROD + (S_PER_PROD - s->left));
            if (mp_mpmc_send_poll(&r->q, &s->w, v, cx, &err) == MP_PENDING)
                return MP_PENDING;
            if (err != 0)
                sync_fail(r, "MPMC send failed before the close");
            if (--s->left % 16 == 0)
                return mp_yield(cx);
        }
        return MP_READY;
    case S_CONSUME:
        for (;;) {
            if (stask_wait(s, cx) == MP_PENDING)
                return MP_PENDING;
            if (s->werr == -EPIPE)
                return MP_READY;
            mpmc_take(r, s->value);
            if (test_rand(&s->rng) % 8 == 0)
                return mp_yield(cx);
        }
    case S_BCAST:
        for (;;) {
            uint64_t v = 0, lost = 0;
            if (mp_broadcast_recv_poll(&r->bc, &s->brx, cx, &v, &lost, &err) == MP_PENDING)
                return MP_PENDING;
            if (err == -EPIPE)
                return MP_READY;
            bcast_count(r, &s->bgot, &s->bmissed, &s->bnext, err, v, lost);
            if (test_rand(&s->rng) % 4 == 0)
                return mp_yield(cx);
        }
    default: /* S_TOKEN */
        return mp_cancel_token_poll(&s->child, &s->w, cx);
    }
}

static mp_poll stask_poll(mp_task *t, mp_context *cx)
{
    stask *s = mp_container_of(t, stask, gt.task);
    if (atomic_exchange(&s->in_poll, 1) != 0)
        sync_fail(s->r, "a task polled concurrently");
    mp_poll p = stask_step(s, cx);
    atomic_store(&s->in_poll, 0);
    return p;
}

/* Give back what the task holds or waits for, as a Rust future's drop would. */
static void stask_cancel(mp_task *t)
{
    stask *s = mp_container_of(t, stask, gt.task);
    sync_run *r = s->r;
    if (atomic_fetch_add(&s->cancels, 1) != 0)
        sync_fail(r, "cancelled twice");
    mp_timer_cancel(&s->timer);
    switch (s->kind) {
    case S_SEM:
        mp_semaphore_cancel_wait(&r->sem, &s->w);
        if (s->holding) {
            atomic_fetch_sub(&r->held, s->n);
            mp_semaphore_release(&r->sem, s->n);
        }
        break;
    case S_MUTEX:
        mp_mutex_cancel_wait(&r->mu, &s->w);
        if (s->holding) /* the half-done increment is abandoned */
            mp_mutex_unlock(&r->mu);
        break;
    case S_PRODUCE:
        mp_mpmc_cancel_send(&r->q, &s->w);
        break;
    case S_CONSUME:
        mp_mpmc_cancel_recv(&r->q, &s->w);
        break;
    case S_BCAST:
        mp_broadcast_cancel_wait(&r->bc, &s->brx);
        break;
    default:
        mp_cancel_token_cancel_wait(&s->child, &s->w);
    }
}

static void stask_release(mp_task *t)
{
    stask *s = mp_container_of(t, stask, gt.task);
    if (atomic_fetch_add(&s->released, 1) != 0)
        sync_fail(s->r, "released twice");
    atomic_fetch_add(&s->r->released, 1);
}

static const mp_task_vtable stask_vt = {
    .poll = stask_poll, .cancel = stask_cancel, .release = stask_release};

static void stask_init(stask *s, sync_run *r, int kind, int id, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->r = r;
    s->kind = kind;
    s->id = id;
    s->rng = seed | 1;
    s->n = 1 + (uint32_t)(test_rand(&s->rng) % 3);
    s->left = kind == S_PRODUCE ? S_PER_PROD : 100;
    mp_waiter_init(&s->w);
    mp_timer_init(&s->timer, r->rt);
    s->timed = test_rand(&s->rng) % 2 == 0;
    if (kind == S_SEM)
        s->wait = (mp_wait){sem_wait_poll, sem_wait_cancel, s};
    else if (kind == S_MUTEX)
        s->wait = (mp_wait){mutex_wait_poll, mutex_wait_cancel, s};
    else if (kind == S_CONSUME)
        s->wait = (mp_wait){mpmc_wait_poll, mpmc_wait_cancel, s};
    else
        s->timed = false;
    if (kind == S_BCAST)
        mp_broadcast_subscribe(&r->bc, &s->brx);
    if (kind == S_TOKEN)
        mp_cancel_token_init_child(&s->child, &r->root);
    mp_task_init(&s->gt.task, &stask_vt);
}

typedef struct sync_thread {
    sync_run *r;
    int id;
    uint64_t got, missed, next;
} sync_thread;

/* A plain thread's timed waits: mp_wait_until() with a deadline of 0-2 ms, retried after each
 * timeout, racing the grants of the tasks. */
typedef struct thread_wait {
    sync_run *r;
    mp_waiter w;
    uint32_t n;
    void *value;
    int err;
} thread_wait;
static mp_poll tsem_poll(void *arg, mp_context *cx)
{
    thread_wait *t = arg;
    return mp_semaphore_acquire_poll(&t->r->sem, &t->w, t->n, cx, &t->err);
}
static bool tsem_cancel(void *arg)
{
    thread_wait *t = arg;
    mp_semaphore_cancel_wait(&t->r->sem, &t->w);
    return false;
}
static mp_poll tmutex_poll(void *arg, mp_context *cx)
{
    thread_wait *t = arg;
    return mp_mutex_lock_poll(&t->r->mu, &t->w, cx);
}
static bool tmutex_cancel(void *arg)
{
    thread_wait *t = arg;
    mp_mutex_cancel_wait(&t->r->mu, &t->w);
    return false;
}
static mp_poll tmpmc_poll(void *arg, mp_context *cx)
{
    thread_wait *t = arg;
    return mp_mpmc_recv_poll(&t->r->q, &t->w, cx, &t->value, &t->err);
}
static bool tmpmc_cancel(void *arg)
{
    thread_wait *t = arg;
    mp_mpmc_cancel_recv(&t->r->q, &t->w);
    return false;
}

static void thread_wait_retrying(thread_wait *t, mp_wait *w, uint64_t *rng)
{
    mp_waiter_init(&t->w);
    while (mp_wait_until(w, mp_now_ms() + test_rand(rng) % 3) == -ETIMEDOUT)
        atomic_fetch_add(&t->r->timeouts, 1);
}

static void *sync_sem_thread(void *arg)
{
    sync_run *r = ((sync_thread *)arg)->r;
    uint64_t rng = (uint64_t)(uintptr_t)arg | 1;
    for (uint32_t i = 0; i < 300; i++) {
        uint32_t n = 1 + i % 3;
        bool timed = i % 2 == 0;
        thread_wait t = {.r = r, .n = n};
        mp_wait sem_w = {tsem_poll, tsem_cancel, &t}, mu_w = {tmutex_poll, tmutex_cancel, &t};
        if (timed)
            thread_wait_retrying(&t, &sem_w, &rng);
        else
            t.err = mp_semaphore_acquire_blocking(&r->sem, n);
        if (t.err != 0)
            sync_fail(r, "blocking acquire failed");
        if (atomic_fetch_add(&r->held, n) + n > S_CAP)
            sync_fail(r, "more permits held than exist");
        atomic_fetch_sub(&r->held, n);
        mp_semaphore_release(&r->sem, n);
        if (timed)
            thread_wait_retrying(&t, &mu_w, &rng);
        else
            mp_mutex_lock_blocking(&r->mu);
        r->counter++;
        r->increments++;
        mp_mutex_unlock(&r->mu);
    }
    return NULL;
}

static void *sync_producer_thread(void *arg)
{
    sync_thread *t = arg;
    for (uintptr_t i = 0; i < S_PER_PROD; i++)
        if (mp_mpmc_send_blocking(&t->r->q, (void *)(t->id * S_PER_PROD + i)) != 0)
            sync_fail(t->r, "MPMC blocking send failed before the close");
    return NULL;
}

static void *sync_consumer_thread(void *arg)
{
    sync_thread *t = arg;
    uint64_t rng = (uint64_t)(uintptr_t)arg | 1;
    for (unsigned i = 0;; i++) {
        thread_wait w = {.r = t->r};
        mp_wait mw = {tmpmc_poll, tmpmc_cancel, &w};
        if (i % 2 == 0)
            thread_wait_retrying(&w, &mw, &rng);
        else
            w.err = mp_mpmc_recv_blocking(&t->r->q, &w.value);
        if (w.err != 0)
            return NULL;
        mpmc_take(t->r, w.value);
    }
}

static void *sync_bcast_sender(void *arg)
{
    sync_run *r = arg;
    for (uint64_t v = 0; v < S_BCAST_N; v++) {
        if (mp_broadcast_send(&r->bc, &v) != 0)
            sync_fail(r, "broadcast send failed before the close");
        if (v % 256 == 0)
            sched_yield();
    }
    mp_broadcast_close(&r->bc);
    return NULL;
}

typedef struct sync_bthread {
    sync_thread t;
    mp_broadcast_rx rx;
} sync_bthread;

static void *sync_bcast_receiver(void *arg)
{
    sync_bthread *b = arg;
    for (;;) {
        uint64_t v = 0, lost = 0;
        int err = mp_broadcast_recv_blocking(&b->t.r->bc, &b->rx, &v, &lost);
        if (err == -EPIPE)
            return NULL;
        bcast_count(b->t.r, &b->t.got, &b->t.missed, &b->t.next, err, v, lost);
    }
}

#define S_TASKS  96 /* in the main group: 16 of each kind */
#define S_DOOMED 24

static void sync_run_one(unsigned workers, uint64_t seed)
{
    uint64_t rng = seed;
    sync_run *r = calloc(1, sizeof *r);
    r->rt = test_runtime(workers);
    cr_assert_eq(mp_semaphore_init(&r->sem, S_CAP), 0);
    mp_mutex_init(&r->mu);
    enum { PRODUCERS = S_TASKS / S_KINDS + 2 }; /* the tasks' ids, then two threads' */
    cr_assert_eq(mp_mpmc_init(&r->q, 8), 0);
    r->seen = calloc(PRODUCERS * S_PER_PROD, 1);
    cr_assert_eq(mp_broadcast_init(&r->bc, 8, sizeof(uint64_t)), 0);
    mp_cancel_token_init(&r->root);

    stask *ts = calloc(S_TASKS + S_DOOMED, sizeof *ts);
    mp_task_group g, doomed;
    mp_task_group_init(&g, r->rt);
    mp_task_group_init(&doomed, r->rt);
    int producers = 0;
    for (int i = 0; i < S_TASKS; i++) {
        int kind = i % S_KINDS;
        stask_init(&ts[i], r, kind, kind == S_PRODUCE ? producers++ : i, test_rand(&rng));
    }
    sync_bthread bt = {.t = {.r = r}};
    mp_broadcast_subscribe(&r->bc, &bt.rx); /* before any send: it must account for all */
    for (int i = 0; i < S_TASKS; i++)
        cr_assert_eq(mp_task_group_spawn(&g, &ts[i].gt), 0);
    /* The doomed group: waiters that nothing will wake, and busy yielders. */
    for (int i = 0; i < S_DOOMED; i++) {
        stask *s = &ts[S_TASKS + i];
        stask_init(s, r, i % 2 ? S_TOKEN : S_SEM, S_TASKS + i, test_rand(&rng));
        if (s->kind == S_SEM)
            s->left = 1000000; /* keeps acquiring until the group goes */
        cr_assert_eq(mp_task_group_spawn(&doomed, &s->gt), 0);
    }

    pthread_t sem_th, prod_th[2], cons_th, bsend_th, brecv_th;
    sync_thread st = {.r = r}, pt[2], ct = {.r = r};
    pthread_create(&sem_th, NULL, sync_sem_thread, &st);
    for (int i = 0; i < 2; i++) {
        pt[i] = (sync_thread){.r = r, .id = producers + i};
        pthread_create(&prod_th[i], NULL, sync_producer_thread, &pt[i]);
    }
    pthread_create(&cons_th, NULL, sync_consumer_thread, &ct);
    pthread_create(&brecv_th, NULL, sync_bcast_receiver, &bt);
    pthread_create(&bsend_th, NULL, sync_bcast_sender, r);

    /* Cancel some tasks of every kind but the producers (whose values are counted as sent)
     * and the broadcast receivers (which must account for every value). */
    for (int i = 0; i < S_TASKS; i++) {
        int kind = ts[i].kind;
        if (kind == S_PRODUCE || kind == S_BCAST || test_rand(&rng) % 4 != 0)
            continue;
        for (uint64_t spin = test_rand(&rng) % 2000; spin; spin--)
            sched_yield();
        mp_task_cancel(&ts[i].gt.task);
    }
    mp_task_group_destroy(&doomed); /* with its members running */

    /* Producers done: close the channel so that consumers drain and end. */
    for (int i = 0; i < 2; i++)
        pthread_join(prod_th[i], NULL);
    pthread_join(sem_th, NULL);
    pthread_join(bsend_th, NULL);
    pthread_join(brecv_th, NULL);
    /* The producer tasks may still be sending: wait until every value is through, then
     * close so that the consumers end. */
    while (atomic_load(&r->received) < (uint64_t)PRODUCERS * S_PER_PROD && !atomic_load(&r->bad))
        sched_yield();
    mp_mpmc_close(&r->q);
    mp_cancel_token_cancel(&r->root);
    size_t cancelled = mp_task_group_join_all(&g);
    pthread_join(cons_th, NULL);

    /* The doomed group's members were cancelled or finished, and all are released. */
    mp_runtime_free(r->rt);
    cr_assert_eq(atomic_load(&r->bad), 0, "%s (workers %u, MP_TEST_SEED=%" PRIu64 ")", r->why,
                 workers, seed);
    cr_assert_eq(atomic_load(&r->released), (size_t)(S_TASKS + S_DOOMED), "released %zu",
                 atomic_load(&r->released));
    cr_assert_eq(atomic_load(&r->held), 0);
    cr_assert_eq(mp_semaphore_available(&r->sem), S_CAP, "a permit was lost or made up");
    cr_assert(mp_mutex_try_lock(&r->mu), "the mutex was left locked");
    cr_assert_eq(r->counter, r->increments, "an update under the mutex was lost");
    cr_assert_eq(atomic_load(&r->received), (uint64_t)PRODUCERS * S_PER_PROD);
    for (size_t v = 0; v < (size_t)PRODUCERS * S_PER_PROD; v++)
        cr_assert_eq(atomic_load(&r->seen[v]), 1, "MPMC value %zu received %d times", v,
                     atomic_load(&r->seen[v]));
    cr_assert_eq(bt.t.got + bt.t.missed, S_BCAST_N, "broadcast thread: %" PRIu64 " + %" PRIu64,
                 bt.t.got, bt.t.missed);
    for (int i = 0; i < S_TASKS; i++)
        if (ts[i].kind == S_BCAST)
            cr_assert_eq(ts[i].bgot + ts[i].bmissed, S_BCAST_N,
                         "broadcast task %d: %" PRIu64 " + %" PRIu64, i, ts[i].bgot, ts[i].bmissed);
    for (int i = 0; i < S_TASKS + S_DOOMED; i++) {
        if (ts[i].kind == S_TOKEN)
            cr_assert_eq(mp_cancel_token_destroy(&ts[i].child), 0);
    }
    cr_assert_eq(mp_cancel_token_destroy(&r->root), 0);
    mp_task_group_destroy(&g);
    fprintf(stderr,
            "api_stress sync: %u workers, %zu of %d cancelled, %" PRIu64 " timed waits gave up\n",
            workers, cancelled, S_TASKS, atomic_load(&r->timeouts));
    mp_broadcast_destroy(&r->bc);
    mp_mpmc_destroy(&r->q);
    free((void *)r->seen);
    free(ts);
    free(r);
}

Test(api_stress, sync_primitives_and_groups, .timeout = 600)
{
    unsigned ws[64];
    size_t nw = parse_workers("1,2,4,8", ws, 64);
    long rounds = test_env_long("MP_STRESS_ROUNDS", 1);
    uint64_t seed = test_seed();
    for (long round = 0; round < rounds; round++)
        for (size_t i = 0; i < nw; i++)
            sync_run_one(ws[i], seed + (uint64_t)round * 1000 + ws[i]);
}
