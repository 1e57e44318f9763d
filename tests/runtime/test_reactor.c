/* Tests of runtime/src/reactor.c: the driver role and commands for the loop. */
#include <criterion/criterion.h>

#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

typedef struct call {
    mp_loop_cmd cmd;
    mp_runtime *rt;
    _Atomic int *ran;
    _Atomic int *off_loop;
} call;

static void count_call(uv_loop_t *loop, void *arg)
{
    call *c = arg;
    if (loop != mp_runtime_loop(c->rt) || !mp_loop_is_current(c->rt))
        atomic_fetch_add(c->off_loop, 1);
    atomic_fetch_add(c->ran, 1);
}

#define CALLERS 4
#define CALLS   20000

typedef struct caller {
    mp_runtime *rt;
    call *calls;
    _Atomic int *ran, *off_loop;
} caller;

static void *call_many(void *arg)
{
    caller *k = arg;
    for (int i = 0; i < CALLS; i++) {
        call *c = &k->calls[i];
        c->rt = k->rt;
        c->ran = k->ran;
        c->off_loop = k->off_loop;
        cr_assert_eq(mp_loop_call(k->rt, &c->cmd, count_call, c), 0);
    }
    return NULL;
}

/* Keeps its worker busy so that loop calls must go through the queue or tick polls. */
typedef struct spinner {
    mp_task task;
    _Atomic bool *stop;
} spinner;

static mp_poll spinner_poll(mp_task *t, mp_context *cx)
{
    spinner *s = mp_container_of(t, spinner, task);
    return atomic_load(s->stop) ? MP_READY : mp_yield(cx);
}

static const mp_task_vtable spinner_vt = {.poll = spinner_poll};

static void loop_calls_all_run_once_on_the_loop(bool busy)
{
    mp_runtime *rt = test_runtime(2);
    _Atomic bool stop = false;
    spinner sp[4];
    if (busy)
        for (int i = 0; i < 4; i++) {
            mp_task_init(&sp[i].task, &spinner_vt);
            sp[i].stop = &stop;
            cr_assert_eq(mp_spawn(rt, &sp[i].task), 0);
        }
    _Atomic int ran = 0, off_loop = 0;
    static call calls[CALLERS][CALLS];
    caller k[CALLERS];
    pthread_t th[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        k[i] = (caller){.rt = rt, .calls = calls[i], .ran = &ran, .off_loop = &off_loop};
        pthread_create(&th[i], NULL, call_many, &k[i]);
    }
    for (int i = 0; i < CALLERS; i++)
        pthread_join(th[i], NULL);
    while (atomic_load(&ran) < CALLERS * CALLS)
        sched_yield();
    /* Busy workers poll the loop at the end of each budget when nobody holds it. The callers
     * may have held it at every one of those moments while they ran (they finish in tens of
     * milliseconds), so this waits, with the callers gone and the spinners still running,
     * for the first such poll: it must come. */
    uint64_t io_polls = 0;
    for (int i = 0; busy && io_polls == 0 && i < 10000; i++) {
        mp_stats s;
        mp_runtime_stats_get(rt, &s);
        io_polls = s.total.io_polls;
        if (io_polls == 0)
            usleep(1000);
    }
    int ran_total = atomic_load(&ran), ran_off_loop = atomic_load(&off_loop);
    /* The spinners live in this frame: stop them and free the runtime before any assertion
     * can leave it (a failed one used to return with the workers still polling them). */
    atomic_store(&stop, true);
    mp_runtime_free(rt);
    cr_assert_eq(ran_total, CALLERS * CALLS, "each call ran exactly once");
    cr_assert_eq(ran_off_loop, 0, "every call ran holding the loop");
    if (busy)
        cr_assert_gt(io_polls, 0, "busy workers polled the loop between ticks (10 s)");
}

Test(reactor, loop_calls_from_threads_while_idle, .timeout = 60)
{
    loop_calls_all_run_once_on_the_loop(false);
}

Test(reactor, loop_calls_from_threads_while_busy, .timeout = 60)
{
    loop_calls_all_run_once_on_the_loop(true);
}

/* mp_loop_call_wait: each call has run, on the loop, by the time it returns. `ran` is a plain
 * counter touched only by whoever holds the loop; each call's own fields are written there and
 * read by its caller after the return (ThreadSanitizer checks both hand-offs). */
typedef struct wait_call {
    mp_runtime *rt;
    unsigned long *ran; /* the loop's */
    unsigned long seen; /* ran after this call: written on the loop */
    bool on_loop;
} wait_call;

static void wait_call_fn(uv_loop_t *loop, void *arg)
{
    wait_call *c = arg;
    c->on_loop = loop == mp_runtime_loop(c->rt) && mp_loop_is_current(c->rt);
    c->seen = ++*c->ran;
}

#define WAIT_CALLS 2000

typedef struct wait_caller {
    mp_runtime *rt;
    unsigned long *ran;
    int bad;
} wait_caller;

static void *wait_many(void *arg)
{
    wait_caller *k = arg;
    for (int i = 0; i < WAIT_CALLS; i++) {
        wait_call c = {.rt = k->rt, .ran = k->ran};
        if (mp_loop_call_wait(k->rt, wait_call_fn, &c) != 0 || c.seen == 0 || !c.on_loop)
            k->bad++;
    }
    return NULL;
}

static void loop_call_wait_from_threads(unsigned workers, bool busy)
{
    mp_runtime *rt = test_runtime(workers);
    _Atomic bool stop = false;
    spinner sp[4];
    if (busy)
        for (int i = 0; i < 4; i++) {
            mp_task_init(&sp[i].task, &spinner_vt);
            sp[i].stop = &stop;
            cr_assert_eq(mp_spawn(rt, &sp[i].task), 0);
        }
    unsigned long ran = 0;
    wait_caller k[CALLERS];
    pthread_t th[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        k[i] = (wait_caller){.rt = rt, .ran = &ran};
        pthread_create(&th[i], NULL, wait_many, &k[i]);
    }
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(k[i].bad, 0, "caller %d: %d calls returned before running on the loop", i,
                     k[i].bad);
    }
    /* Read on the loop, where it is written. */
    wait_call last = {.rt = rt, .ran = &ran};
    cr_assert_eq(mp_loop_call_wait(rt, wait_call_fn, &last), 0);
    cr_assert_eq(last.seen, CALLERS * WAIT_CALLS + 1, "each call ran exactly once");
    atomic_store(&stop, true);
    mp_runtime_free(rt);
}

Test(reactor, loop_call_wait_from_threads_while_idle, .timeout = 60)
{
    loop_call_wait_from_threads(2, false);
}

Test(reactor, loop_call_wait_from_threads_while_busy, .timeout = 60)
{
    loop_call_wait_from_threads(1, true);
}

typedef struct nested_call {
    mp_runtime *rt;
    wait_call inner;
    int inner_rc;
    unsigned long seen_after; /* inner.seen right after the inner call returned */
} nested_call;

static void nested_fn(uv_loop_t *loop, void *arg)
{
    (void)loop;
    nested_call *n = arg;
    n->inner_rc = mp_loop_call_wait(n->rt, wait_call_fn, &n->inner);
    n->seen_after = n->inner.seen;
}

Test(reactor, loop_call_wait_from_the_loop_runs_inline, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    unsigned long ran = 0;
    nested_call n = {.rt = rt, .inner = {.rt = rt, .ran = &ran}};
    cr_assert_eq(mp_loop_call_wait(rt, nested_fn, &n), 0);
    cr_assert_eq(n.inner_rc, 0);
    cr_assert_eq(n.seen_after, 1, "the nested call ran before it returned");
    cr_assert(n.inner.on_loop);
    mp_runtime_free(rt);
}

typedef struct waiting_task {
    mp_task task;
    wait_call call;
    int rc;
} waiting_task;

static mp_poll waiting_task_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    waiting_task *w = mp_container_of(t, waiting_task, task);
    w->rc = mp_loop_call_wait(w->call.rt, wait_call_fn, &w->call);
    return MP_READY;
}

static const mp_task_vtable waiting_task_vt = {.poll = waiting_task_poll};

Test(reactor, loop_call_wait_from_a_task_is_refused, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    unsigned long ran = 0;
    waiting_task w = {.call = {.rt = rt, .ran = &ran}};
    mp_task_init(&w.task, &waiting_task_vt);
    cr_assert_eq(mp_block_on(rt, &w.task), 0);
    cr_assert_eq(w.rc, -EDEADLK);
    cr_assert_eq(w.call.seen, 0, "nothing ran");
    mp_runtime_free(rt);
}

static void *shutdown_thread(void *arg)
{
    return (void *)(intptr_t)mp_runtime_shutdown(arg);
}

Test(reactor, loop_call_wait_during_shutdown, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 2;
    cfg.shutdown_mode = MP_SHUTDOWN_DRAIN;
    cfg.drain_timeout_ms = 0; /* until the spinner stops */
    mp_runtime *rt;
    cr_assert_eq(mp_runtime_new(&rt, &cfg), 0);
    _Atomic bool stop = false;
    spinner sp;
    mp_task_init(&sp.task, &spinner_vt);
    sp.stop = &stop;
    cr_assert_eq(mp_spawn(rt, &sp.task), 0);
    pthread_t th;
    pthread_create(&th, NULL, shutdown_thread, rt);
    while (!atomic_load(&rt->draining))
        sched_yield();
    /* Draining: the loop still runs commands. */
    unsigned long ran = 0;
    wait_call c = {.rt = rt, .ran = &ran};
    cr_assert_eq(mp_loop_call_wait(rt, wait_call_fn, &c), 0);
    cr_assert(c.on_loop);
    cr_assert_eq(c.seen, 1);
    atomic_store(&stop, true);
    void *rc;
    pthread_join(th, &rc);
    cr_assert_eq((intptr_t)rc, 0);
    /* Closed: refused, nothing runs. */
    wait_call late = {.rt = rt, .ran = &ran};
    cr_assert_eq(mp_loop_call_wait(rt, wait_call_fn, &late), -ESHUTDOWN);
    cr_assert_eq(late.seen, 0);
    mp_runtime_free(rt);
}

/* Calls racing with the loop's close at the end of shutdown: each returns 0 and its fn has
 * run before mp_runtime_shutdown() returns, or returns -ESHUTDOWN and its fn never runs. The
 * test hook sleeps in every queued call between its look at the loop's state and its push,
 * so that the close goes by in that window (without the fix: a command pushed after the
 * close's last run, its async send on a closed handle, or fn run on the closed loop). */
typedef struct racing_call {
    mp_loop_cmd cmd;
    _Atomic int ran;
} racing_call;

static _Atomic bool shutdown_returned;
static _Atomic int ran_after_shutdown;

static void racing_fn(uv_loop_t *loop, void *arg)
{
    (void)loop;
    racing_call *c = arg;
    if (atomic_load(&shutdown_returned))
        atomic_fetch_add(&ran_after_shutdown, 1);
    atomic_fetch_add(&c->ran, 1);
}

enum { RACING_CALLS = 1 << 14 };

typedef struct racing_caller {
    mp_runtime *rt;
    racing_call *calls; /* RACING_CALLS of them */
    int accepted;       /* calls that returned 0, the first ones */
    int refused;        /* index of the call that returned -ESHUTDOWN, or -1 */
    int other;          /* calls that returned anything else */
    bool wait;          /* mp_loop_call_wait() instead */
} racing_caller;

static void *call_until_refused(void *arg)
{
    racing_caller *k = arg;
    k->refused = -1;
    for (int i = 0; i < RACING_CALLS; i++) {
        racing_call *c = &k->calls[i];
        int rc = k->wait ? mp_loop_call_wait(k->rt, racing_fn, c)
                         : mp_loop_call(k->rt, &c->cmd, racing_fn, c);
        if (rc == -ESHUTDOWN) {
            k->refused = i;
            break;
        }
        if (rc != 0)
            k->other++;
        else
            k->accepted++;
    }
    return NULL;
}

Test(reactor, loop_calls_racing_with_shutdown_run_before_the_close_or_are_refused, .timeout = 120)
{
    enum { CALLERS_R = 3, ROUNDS = 20 };
    racing_call *calls = calloc((size_t)CALLERS_R * RACING_CALLS, sizeof *calls);
    cr_assert_not_null(calls);
    for (int round = 0; round < ROUNDS; round++) {
        memset(calls, 0, (size_t)CALLERS_R * RACING_CALLS * sizeof *calls);
        atomic_store(&shutdown_returned, false);
        mp__test_loop_call_delay_us(round % 2 ? 1000 : 0);
        mp_runtime *rt = test_runtime(2);
        mp__test_loop_call_delay_us(0);
        racing_caller k[CALLERS_R];
        pthread_t th[CALLERS_R];
        for (int i = 0; i < CALLERS_R; i++) {
            k[i] = (racing_caller){
                .rt = rt, .calls = calls + (size_t)i * RACING_CALLS, .wait = i == 0};
            cr_assert_eq(pthread_create(&th[i], NULL, call_until_refused, &k[i]), 0);
        }
        usleep(5000 + 1000 * (unsigned)round);
        cr_assert_eq(mp_runtime_shutdown(rt), 0);
        atomic_store(&shutdown_returned, true);
        for (int i = 0; i < CALLERS_R; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < CALLERS_R; i++) {
            cr_assert_eq(k[i].other, 0, "round %d caller %d", round, i);
            for (int j = 0; j < k[i].accepted; j++)
                cr_assert_eq(atomic_load(&k[i].calls[j].ran), 1,
                             "round %d caller %d: accepted call %d ran %d times", round, i, j,
                             atomic_load(&k[i].calls[j].ran));
            if (k[i].refused >= 0)
                cr_assert_eq(atomic_load(&k[i].calls[k[i].refused].ran), 0,
                             "round %d caller %d: a refused call ran", round, i);
        }
        cr_assert_eq(atomic_load(&ran_after_shutdown), 0,
                     "round %d: %d calls ran after mp_runtime_shutdown() returned", round,
                     atomic_load(&ran_after_shutdown));
        mp_runtime_free(rt);
    }
    free(calls);
}

static void on_timer(uv_timer_t *t)
{
    atomic_fetch_add((_Atomic int *)t->data, 1);
}

typedef struct timer_setup {
    mp_loop_cmd cmd;
    uv_timer_t timer;
    _Atomic int fired;
} timer_setup;

static void start_timer(uv_loop_t *loop, void *arg)
{
    timer_setup *ts = arg;
    uv_timer_init(loop, &ts->timer);
    ts->timer.data = &ts->fired;
    uv_timer_start(&ts->timer, on_timer, 20, 0);
}

Test(reactor, an_idle_worker_drives_the_loop, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    /* Start a worker, let everything go idle: one worker must now sleep in the loop, so a
     * libuv timer set from outside fires with nobody else around. */
    _Atomic bool stop = true;
    spinner sp;
    mp_task_init(&sp.task, &spinner_vt);
    sp.stop = &stop;
    cr_assert_eq(mp_spawn(rt, &sp.task), 0);
    mp_stats s;
    do {
        sched_yield();
        mp_runtime_stats_get(rt, &s);
    } while (s.total.drives == 0);
    timer_setup *ts = calloc(1, sizeof *ts);
    cr_assert_eq(mp_loop_call(rt, &ts->cmd, start_timer, ts), 0);
    while (atomic_load(&ts->fired) == 0)
        sched_yield();
    mp_runtime_free(rt); /* closes the timer handle with the loop */
    free(ts);
}
