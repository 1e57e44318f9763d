/* Tests of runtime/src/dump.c: slow-poll reports and mp_runtime_dump(). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "test_util.h"

typedef struct sleeper {
    mp_task task;
    int polls_left;
    unsigned sleep_us;
} sleeper;

static mp_poll sleeper_poll(mp_task *t, mp_context *cx)
{
    sleeper *s = mp_container_of(t, sleeper, task);
    usleep(s->sleep_us); /* the bug the report is for: a task that blocks its worker */
    return --s->polls_left > 0 ? mp_yield(cx) : MP_READY;
}

static const mp_task_vtable sleeper_vt = {.poll = sleeper_poll};

static pthread_mutex_t reports_mu = PTHREAD_MUTEX_INITIALIZER;
static mp_slow_poll reports[8];
static int nreports;

static void on_slow(const mp_slow_poll *r, void *arg)
{
    cr_assert_eq(arg, &reports);
    pthread_mutex_lock(&reports_mu);
    if (nreports < 8)
        reports[nreports] = *r;
    nreports++;
    pthread_mutex_unlock(&reports_mu);
}

Test(dump, a_slow_poll_is_counted_each_time_and_reported_once_per_task, .timeout = 30)
{
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = 1;
    cfg.slow_poll_us = 2000;
    cfg.on_slow_poll = on_slow;
    cfg.slow_poll_arg = &reports;
    mp_runtime *rt = test_runtime_with(&cfg);
    nreports = 0;
    sleeper slow = {.polls_left = 3, .sleep_us = 10000}, quick = {.polls_left = 3, .sleep_us = 0};
    mp_task_init(&slow.task, &sleeper_vt);
    mp_task_init(&quick.task, &sleeper_vt);
    mp_task_set_name(&slow.task, "the slow one");
    cr_assert_str_eq(mp_task_name(&slow.task), "the slow one");
    cr_assert_null(mp_task_name(&quick.task));
    cr_assert_eq(mp_spawn_joinable(rt, &slow.task), 0);
    cr_assert_eq(mp_spawn_joinable(rt, &quick.task), 0);
    cr_assert_eq(mp_join(&slow.task), 0);
    cr_assert_eq(mp_join(&quick.task), 0);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    /* The quick task may count too, if this machine preempted it mid-poll: only at least. */
    cr_assert_geq(st.total.slow_polls, 3, "every slow poll counted: %" PRIu64, st.total.slow_polls);
    cr_assert(nreports >= 1 && nreports <= 2, "reported once per task: %d", nreports);
    mp_slow_poll *r = &reports[reports[0].task == &slow.task ? 0 : 1];
    cr_assert(nreports == 1 || reports[0].task != reports[1].task, "a task reported twice");
    cr_assert_eq(r->task, &slow.task);
    cr_assert_str_eq(r->name, "the slow one");
    cr_assert(r->poll == sleeper_poll);
    cr_assert_geq(r->duration_ns, 2000000u);
    cr_assert(r->worker == 0 || r->worker == -1);
    cr_assert_not_null(r->object, "dladdr names the program the poll function is in");
    if (r->symbol)
        cr_assert_str_eq(r->symbol, "sleeper_poll");
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

Test(dump, without_a_threshold_nothing_is_timed, .timeout = 30)
{
    mp_runtime *rt = test_runtime(1);
    sleeper slow = {.polls_left = 1, .sleep_us = 5000};
    mp_task_init(&slow.task, &sleeper_vt);
    cr_assert_eq(mp_spawn_joinable(rt, &slow.task), 0);
    cr_assert_eq(mp_join(&slow.task), 0);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    cr_assert_eq(st.total.slow_polls, 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}

/* A task that waits on a notify until told. */
typedef struct waiter {
    mp_task task;
    mp_notify *n;
    mp_notify_waiter w;
} waiter;

static mp_poll waiter_poll(mp_task *t, mp_context *cx)
{
    waiter *w = mp_container_of(t, waiter, task);
    return mp_notify_poll(w->n, &w->w, cx);
}

static const mp_task_vtable waiter_vt = {.poll = waiter_poll};

typedef struct text {
    char buf[16384];
    size_t len;
    int lines;
} text;

static void collect(const char *line, void *arg)
{
    text *t = arg;
    cr_assert_null(strchr(line, '\n'), "a line without its newline");
    int n = snprintf(t->buf + t->len, sizeof t->buf - t->len, "%s\n", line);
    if (n > 0 && t->len + (size_t)n < sizeof t->buf)
        t->len += (size_t)n;
    t->lines++;
}

Test(dump, lists_workers_the_pool_and_every_waiting_task, .timeout = 30)
{
    mp_runtime *rt = test_runtime(2);
    mp_notify n;
    mp_notify_init(&n);
    enum { N = 100 };
    static waiter w[N];
    for (int i = 0; i < N; i++) {
        w[i].n = &n;
        mp_notify_waiter_init(&w[i].w);
        mp_task_init(&w[i].task, &waiter_vt);
        mp_task_set_name(&w[i].task, i % 2 ? "odd waiter" : "even waiter");
        cr_assert_eq(mp_spawn_joinable(rt, &w[i].task), 0);
    }
    mp_stats st;
    do { /* every waiter has suspended (is in the registry) */
        usleep(1000);
        mp_runtime_stats_get(rt, &st);
    } while (st.total.polled < N);
    static text t;
    memset(&t, 0, sizeof t);
    cr_assert_eq(mp_runtime_dump(rt, collect, &t), 0);
    cr_assert(strstr(t.buf, "magpie runtime "), "%s", t.buf);
    cr_assert(strstr(t.buf, "  worker 0: "), "%s", t.buf);
    cr_assert(strstr(t.buf, "  blocking pool: "), "%s", t.buf);
    cr_assert(strstr(t.buf, "tasks that have suspended: 100"), "%s", t.buf);
    cr_assert(strstr(t.buf, "\"odd waiter\": IDLE|JOIN_INTEREST"), "%s", t.buf);
    cr_assert(strstr(t.buf, "\"even waiter\""), "%s", t.buf);
    cr_assert(strstr(t.buf, ", 1 polls, last poll "), "%s", t.buf);
    cr_assert_geq(t.lines, 3 + N);
    cr_assert_eq(mp_runtime_dump(rt, NULL, NULL), 0); /* to stderr */
    for (int i = 0; i < N; i++)
        mp_notify_one(&n);
    for (int i = 0; i < N; i++)
        cr_assert_eq(mp_join(&w[i].task), 0);
    cr_assert_eq(mp_runtime_shutdown(rt), 0);
    mp_runtime_free(rt);
}
