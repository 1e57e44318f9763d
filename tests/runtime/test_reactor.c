/* Tests of runtime/src/reactor.c: the driver role and commands for the loop. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

static mp_runtime *rt_new(unsigned workers)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    mp_runtime *rt;
    cr_assert_eq(mp_runtime_new(&rt, &cfg), 0);
    return rt;
}

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
    mp_runtime *rt = rt_new(2);
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
    mp_runtime *rt = rt_new(2);
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

/* Timers: sleepers with random deadlines each wake exactly once and never early. The order
 * in which their polls then run is a matter of scheduling, not of the timers: timers due in
 * the same loop iteration are woken in deadline order (test_timer.c checks the wheel's order
 * exactly), but the last one woken goes to the LIFO slot and runs first, and how many fall
 * into one iteration depends on how busy the machine is (a rank check here failed under
 * ThreadSanitizer on a loaded machine). */
typedef struct sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t deadline;
    uint64_t woke;
    _Atomic int wakes;
    _Atomic int *order;
    int rank;
} sleeper;

static mp_poll sleeper_poll(mp_task *t, mp_context *cx)
{
    sleeper *s = mp_container_of(t, sleeper, task);
    if (mp_timer_poll(&s->timer, s->deadline, cx) == MP_PENDING)
        return MP_PENDING;
    s->woke = mp_now_ms();
    atomic_fetch_add(&s->wakes, 1);
    s->rank = atomic_fetch_add(s->order, 1);
    return MP_READY;
}

static const mp_task_vtable sleeper_vt = {.poll = sleeper_poll};

Test(reactor, timers_fire_once_and_in_order, .timeout = 60)
{
    mp_runtime *rt = rt_new(2);
    enum { N = 200 };
    static sleeper s[N];
    _Atomic int order = 0;
    uint64_t rng = test_seed(), base = mp_now_ms() + 20;
    for (int i = 0; i < N; i++) {
        memset(&s[i], 0, sizeof s[i]);
        mp_task_init(&s[i].task, &sleeper_vt);
        mp_timer_init(&s[i].timer, rt);
        /* Distinct deadlines 3 ms apart, spawned in random order. */
        s[i].deadline = base + 3 * (uint64_t)i;
        s[i].order = &order;
    }
    for (int i = N - 1; i > 0; i--) { /* shuffle the spawn order */
        int j = (int)(test_rand(&rng) % (uint64_t)(i + 1));
        sleeper tmp = s[i];
        s[i] = s[j];
        s[j] = tmp;
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_spawn_joinable(rt, &s[i].task), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_join(&s[i].task), 0);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(atomic_load(&s[i].wakes), 1);
        cr_assert_geq(s[i].woke, s[i].deadline, "woke %llu ms early",
                      (unsigned long long)(s[i].deadline - s[i].woke));
    }
    mp__spin_lock(&rt->reactor.wheel_lock);
    cr_assert_eq(mp__wheel_count(&rt->reactor.wheel), 0);
    cr_assert_eq(rt->reactor.armed_ms, UINT64_MAX, "nothing pending: no timer armed");
    mp__spin_unlock(&rt->reactor.wheel_lock);
    mp_runtime_free(rt);
}

Test(reactor, cancelled_timer_never_fires, .timeout = 30)
{
    mp_runtime *rt = rt_new(1);
    sleeper s = {0};
    _Atomic int order = 0;
    mp_task_init(&s.task, &sleeper_vt);
    mp_timer_init(&s.timer, rt);
    /* Far enough that the first poll comes before it even when starting the worker thread
     * takes long (ThreadSanitizer on a loaded machine took over 50 ms, and a sleeper polled
     * after its deadline completes without arming anything, which this loop waited for in
     * vain); the wait below fails rather than hangs if it still happens. */
    s.deadline = mp_now_ms() + 1000;
    s.order = &order;
    cr_assert_eq(mp_spawn_joinable(rt, &s.task), 0);
    for (size_t armed = 0; !armed; sched_yield()) {
        mp__spin_lock(&rt->reactor.wheel_lock);
        armed = mp__wheel_count(&rt->reactor.wheel);
        mp__spin_unlock(&rt->reactor.wheel_lock);
        cr_assert_eq(atomic_load(&s.wakes), 0, "first polled after its deadline");
    }
    mp_task_cancel(&s.task); /* its cancel would normally disarm; do it by hand here */
    mp_timer_cancel(&s.timer);
    cr_assert_eq(mp_join(&s.task), -ECANCELED);
    /* The last pending timer is gone: the loop's timer is disarmed at once, not left to fire
     * into an idle runtime. */
    for (uint64_t armed = 0; armed != UINT64_MAX; usleep(1000)) {
        mp__spin_lock(&rt->reactor.wheel_lock);
        armed = rt->reactor.armed_ms;
        mp__spin_unlock(&rt->reactor.wheel_lock);
    }
    while (mp_now_ms() < s.deadline + 100) /* past the deadline it would have fired at */
        usleep(10000);
    cr_assert_eq(atomic_load(&s.wakes), 0);
    mp_runtime_free(rt);
}

/* The lost timer wake-up. libuv 1.44's uv_run(UV_RUN_ONCE) runs due timers before it works
 * out how long to block; a timer that became due while the driver was away running a task
 * fired there, woke its task into the driver's LIFO slot, and the loop then blocked in
 * epoll_wait(-1) with nothing else armed: the task was never run. The shape, made
 * deterministic on one worker: a sleeper is pending with its deadline 5 ms away and the
 * worker drives the loop; a spawned task wakes it and spins past that deadline; the worker
 * parks, re-enters the loop, and the sleeper's timer is due right then. */
typedef struct oneshot_sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t deadline;
    _Atomic int polls;
    _Atomic int done;
    _Atomic int released;
} oneshot_sleeper;

static mp_poll oneshot_sleeper_poll(mp_task *t, mp_context *cx)
{
    oneshot_sleeper *s = mp_container_of(t, oneshot_sleeper, task);
    atomic_fetch_add(&s->polls, 1);
    if (mp_timer_poll(&s->timer, s->deadline, cx) == MP_PENDING)
        return MP_PENDING;
    atomic_store(&s->done, 1);
    return MP_READY;
}

static void oneshot_sleeper_release(mp_task *t)
{
    atomic_store(&mp_container_of(t, oneshot_sleeper, task)->released, 1);
}

static const mp_task_vtable oneshot_sleeper_vt = {.poll = oneshot_sleeper_poll,
                                                  .release = oneshot_sleeper_release};

static void spin_until(void *arg)
{
    uint64_t until = *(uint64_t *)arg;
    while (mp_now_ms() < until)
        ;
}

static void timer_due_as_the_driver_reenters(unsigned workers)
{
    mp_runtime *rt = rt_new(workers);
    /* One per round: a spinner still running when its round ends (on another worker than the
     * sleeper's) must not see the next round's value. */
    static uint64_t until[10];
    for (int round = 0; round < 10; round++) {
        oneshot_sleeper s = {0};
        mp_task_init(&s.task, &oneshot_sleeper_vt);
        mp_timer_init(&s.timer, rt);
        s.deadline = mp_now_ms() + 5;
        until[round] = s.deadline + 2;
        cr_assert_eq(mp_spawn(rt, &s.task), 0);
        while (atomic_load(&s.polls) == 0)
            usleep(100);
        usleep(1000); /* every worker back asleep, one of them in the loop */
        cr_assert_eq(mp_spawn_fn(rt, spin_until, &until[round], NULL), 0);
        /* Not a timing assertion: 10 s is the watchdog of a wake-up that never comes. */
        for (int i = 0; i < 10000 && !atomic_load(&s.released); i++)
            usleep(1000);
        cr_assert(atomic_load(&s.done), "round %d: sleeper never woken (%d polls)", round,
                  atomic_load(&s.polls));
        cr_assert(atomic_load(&s.released));
    }
    mp_runtime_free(rt);
}

Test(reactor, timer_due_as_the_driver_reenters_the_loop_one_worker, .timeout = 120)
{
    timer_due_as_the_driver_reenters(1);
}

Test(reactor, timer_due_as_the_driver_reenters_the_loop_two_workers, .timeout = 120)
{
    timer_due_as_the_driver_reenters(2);
}

/* "The deadline may change between polls": after a deadline has fired, a poll with a later
 * one waits for that one (a stale fired flag made it READY at once). */
typedef struct moving_sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t first, second, woke;
    int stage;
} moving_sleeper;

static mp_poll moving_sleeper_poll(mp_task *t, mp_context *cx)
{
    moving_sleeper *m = mp_container_of(t, moving_sleeper, task);
    if (m->stage == 0) {
        if (mp_timer_poll(&m->timer, m->first, cx) == MP_PENDING)
            return MP_PENDING;
        m->stage = 1;
        m->second = mp_now_ms() + 50;
    }
    if (mp_timer_poll(&m->timer, m->second, cx) == MP_PENDING)
        return MP_PENDING;
    m->woke = mp_now_ms();
    mp_timer_cancel(&m->timer);
    return MP_READY;
}

static const mp_task_vtable moving_sleeper_vt = {.poll = moving_sleeper_poll};

Test(reactor, a_fired_timer_moved_later_waits_for_the_new_deadline, .timeout = 30)
{
    mp_runtime *rt = rt_new(2);
    for (int round = 0; round < 5; round++) {
        moving_sleeper m = {0};
        mp_task_init(&m.task, &moving_sleeper_vt);
        mp_timer_init(&m.timer, rt);
        m.first = mp_now_ms() + 2;
        cr_assert_eq(mp_spawn_joinable(rt, &m.task), 0);
        cr_assert_eq(mp_join(&m.task), 0);
        cr_assert_geq(m.woke, m.second, "READY %llu ms before the moved deadline",
                      (unsigned long long)(m.second - m.woke));
    }
    mp_runtime_free(rt);
}

/* A keep-alive connection moves its deadline later with every request. While the entry is
 * linked, that only records the new deadline: the wheel keeps the entry where it was, and
 * when it comes due the loop moves it on instead of waking the task, so the task is woken
 * once, at (never before) the last deadline it asked for. */
typedef struct pushed_sleeper {
    mp_task task;
    mp_timer timer;
    uint64_t base, last, woke;
    uint64_t entry_ms; /* where the wheel holds the entry after the last move */
    int moves, polls_after_last;
} pushed_sleeper;

static mp_poll pushed_sleeper_poll(mp_task *t, mp_context *cx)
{
    pushed_sleeper *p = mp_container_of(t, pushed_sleeper, task);
    if (p->moves < 5) {
        p->last = p->base + 200 + 20 * (uint64_t)p->moves++;
        cr_assert_eq(mp_timer_poll(&p->timer, p->last, cx), MP_PENDING);
        if (p->moves < 5)
            return mp_yield(cx); /* polled again at once: the next move */
        mp__spin_lock(&p->timer.rt->reactor.wheel_lock);
        p->entry_ms = p->timer.deadline_ms;
        mp__spin_unlock(&p->timer.rt->reactor.wheel_lock);
        return MP_PENDING;
    }
    p->polls_after_last++;
    if (mp_timer_poll(&p->timer, p->last, cx) == MP_PENDING)
        return MP_PENDING;
    p->woke = mp_now_ms();
    mp_timer_cancel(&p->timer);
    return MP_READY;
}

static const mp_task_vtable pushed_sleeper_vt = {.poll = pushed_sleeper_poll};

Test(reactor, a_linked_timer_moved_later_fires_once_at_the_last_deadline, .timeout = 30)
{
    for (unsigned workers = 1; workers <= 2; workers++) {
        mp_runtime *rt = rt_new(workers);
        for (int round = 0; round < 3; round++) {
            pushed_sleeper p = {0};
            mp_task_init(&p.task, &pushed_sleeper_vt);
            mp_timer_init(&p.timer, rt);
            p.base = mp_now_ms();
            cr_assert_eq(mp_spawn_joinable(rt, &p.task), 0);
            cr_assert_eq(mp_join(&p.task), 0);
            cr_assert_eq(p.entry_ms, p.base + 200, "moving later left the wheel alone");
            cr_assert_geq(p.woke, p.last, "READY %llu ms before the last deadline",
                          (unsigned long long)(p.last - p.woke));
            cr_assert_eq(p.polls_after_last, 1, "woken at an earlier deadline (%d polls)",
                         p.polls_after_last);
        }
        mp__spin_lock(&rt->reactor.wheel_lock);
        cr_assert_eq(mp__wheel_count(&rt->reactor.wheel), 0);
        mp__spin_unlock(&rt->reactor.wheel_lock);
        mp_runtime_free(rt);
    }
}
