/* Tests of runtime/src/reactor.c: the driver role and commands for the loop. */
#include <criterion/criterion.h>

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
    cr_assert_eq(atomic_load(&ran), CALLERS * CALLS, "each call ran exactly once");
    cr_assert_eq(atomic_load(&off_loop), 0, "every call ran holding the loop");
    mp_stats s;
    mp_runtime_stats(rt, &s);
    if (busy)
        cr_assert_gt(s.total.io_polls, 0, "busy workers polled the loop between ticks");
    atomic_store(&stop, true);
    mp_runtime_free(rt);
}

Test(reactor, loop_calls_from_threads_while_idle, .timeout = 60)
{
    loop_calls_all_run_once_on_the_loop(false);
}

Test(reactor, loop_calls_from_threads_while_busy, .timeout = 60)
{
    loop_calls_all_run_once_on_the_loop(true);
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
        mp_runtime_stats(rt, &s);
    } while (s.total.drives == 0);
    timer_setup *ts = calloc(1, sizeof *ts);
    cr_assert_eq(mp_loop_call(rt, &ts->cmd, start_timer, ts), 0);
    while (atomic_load(&ts->fired) == 0)
        sched_yield();
    mp_runtime_free(rt); /* closes the timer handle with the loop */
    free(ts);
}
