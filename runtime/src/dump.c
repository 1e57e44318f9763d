/* dump.c: seeing what tasks do. Slow-poll reports (a poll longer than mp_config.slow_poll_us,
 * timed in task.c) and mp_runtime_dump(), a text picture of the workers, the queues, the
 * blocking pool and every registered task, after what tokio-console shows.
 *
 * The dump reads what other threads write without stopping them: counters and the tasks'
 * trace fields are atomics read relaxed (a snapshot, each field on its own); the registry is
 * walked one shard at a time under that shard's lock, which keeps every listed task alive (the
 * registry holds a reference until it unlinks the task), and only copied there: the text is
 * made and written after the lock is let go.
 */
#include "internal.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>

void mp__slow_poll(mp_task *t, mp__worker *w, uint64_t ns)
{
    mp_runtime *rt = t->rt;
    if (w)
        mp__counter_add(&w->stats.slow_polls, 1);
    else
        atomic_fetch_add_explicit(&rt->slow_polls_outside, 1, memory_order_relaxed);
    /* Relaxed: reported once; only the thread that holds RUNNING gets here. */
    if (atomic_exchange_explicit(&t->slow_reported, 1, memory_order_relaxed))
        return;
    mp_slow_poll r = {
        .task = t,
        .name = t->name,
        .poll = t->vt->poll,
        .duration_ns = ns,
        .worker = w ? (int)w->index : -1,
    };
    Dl_info info;
    /* dladdr takes a data pointer; POSIX guarantees a function pointer converts to one. */
    void *fn;
    memcpy(&fn, &r.poll, sizeof fn);
    if (dladdr(fn, &info) != 0) {
        r.symbol = info.dli_saddr == fn ? info.dli_sname : NULL;
        r.object = info.dli_fname;
    }
    if (rt->cfg.on_slow_poll) {
        rt->cfg.on_slow_poll(&r, rt->cfg.slow_poll_arg);
        return;
    }
    fprintf(stderr,
            "magpie: slow poll: %" PRIu64 " us (threshold %u us) on %s%d, task %p%s%s%s, poll "
            "function %p%s%s (%s)\n",
            ns / 1000, rt->cfg.slow_poll_us, r.worker >= 0 ? "worker " : "a plain thread ",
            r.worker, (void *)t, r.name ? " \"" : "", r.name ? r.name : "", r.name ? "\"" : "", fn,
            r.symbol ? " " : "", r.symbol ? r.symbol : "", r.object ? r.object : "?");
}

typedef struct out {
    void (*line)(const char *text, void *arg);
    void *arg;
} out;

static void emit(const out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(const out *o, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (o->line)
        o->line(buf, o->arg);
    else
        fprintf(stderr, "%s\n", buf);
}

typedef struct task_copy {
    const mp_task *task;
    const char *name;
    uint64_t state, last_ns;
    uint32_t polls;
} task_copy;

static const char *park_name(uint32_t s)
{
    switch (s) {
    case MP__UNPARKED:
        return "running";
    case MP__PARKED:
        return "parked";
    case MP__NOTIFIED:
        return "woken";
    case MP__DRIVING:
        return "driving the loop";
    default:
        return "?";
    }
}

/* The state word's bits, as state.c names them. */
static void state_text(uint64_t s, char *buf, size_t cap)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } bits[] = {
        {MP__T_RUNNING, "RUNNING"},       {MP__T_COMPLETE, "COMPLETE"},
        {MP__T_SCHEDULED, "SCHEDULED"},   {MP__T_NOTIFIED, "NOTIFIED"},
        {MP__T_CANCELLED, "CANCELLED"},   {MP__T_JOIN_INTEREST, "JOIN_INTEREST"},
        {MP__T_JOIN_WAKER, "JOIN_WAKER"},
    };
    /* Neither running, scheduled nor complete: idle, its waker held somewhere. */
    size_t n = (size_t)snprintf(
        buf, cap, "%s", s & (MP__T_RUNNING | MP__T_COMPLETE | MP__T_SCHEDULED) ? "" : "IDLE");
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        if ((s & bits[i].bit) && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "|" : "", bits[i].name);
    size_t len = strlen(buf);
    snprintf(buf + len, cap > len ? cap - len : 0, " refs %" PRIu64, s >> MP__T_REF_SHIFT);
}

int mp_runtime_dump(mp_runtime *rt, void (*line)(const char *text, void *arg), void *arg)
{
    out o = {line, arg};
    uint64_t now = mp__now_ns();
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    emit(&o,
         "magpie runtime %p: %u workers (%u started), %" PRIu64 " live tasks, global queue %zu, "
         "%" PRIu64 " slow polls",
         (void *)rt, st.workers, st.workers_started, st.live_tasks, mp__inject_len(&rt->inject),
         st.total.slow_polls);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        mp__worker *w = &rt->workers[i];
        /* Relaxed: a snapshot. */
        if (atomic_load_explicit(&w->spawn_state, memory_order_relaxed) != MP__SLOT_STARTED)
            continue;
        mp_worker_stats ws;
        mp_runtime_worker_stats(rt, i, &ws);
        emit(&o,
             "  worker %u: %s, ring %u, polled %" PRIu64 ", stolen %" PRIu64 ", parks %" PRIu64
             ", slow polls %" PRIu64,
             i, park_name(atomic_load_explicit(&w->park.state, memory_order_relaxed)),
             mp__queue_len(&w->queue), ws.polled, ws.stolen, ws.parks, ws.slow_polls);
    }
    emit(&o,
         "  blocking pool: %u threads (%u idle), %u jobs running, %u queued, %" PRIu64
         " jobs in all",
         st.blocking_threads, st.blocking_idle, st.blocking_running, st.blocking_queued,
         st.blocking_jobs);

    size_t cap = 64, n = 0;
    task_copy *tasks = malloc(cap * sizeof *tasks);
    if (!tasks)
        return -ENOMEM;
    int rc = 0;
    for (uint32_t i = 0; i <= rt->owned.mask;) {
        mp__owned_shard *s = &rt->owned.shards[i];
        mp__spin_lock(&s->lock);
        if (n + s->count > cap) {
            /* Grow outside the lock, then look at the shard again. */
            size_t want = (n + s->count) * 2;
            mp__spin_unlock(&s->lock);
            task_copy *more = realloc(tasks, want * sizeof *tasks);
            if (!more) {
                rc = -ENOMEM;
                break;
            }
            tasks = more;
            cap = want;
            continue;
        }
        for (mp_task *t = s->head; t; t = t->owned_next) {
            /* Relaxed: a snapshot; the shard's lock keeps t alive. */
            tasks[n++] = (task_copy){
                .task = t,
                .name = t->name,
                .state = mp__task_state_load(t, memory_order_relaxed),
                .last_ns = atomic_load_explicit(&t->last_poll_ns, memory_order_relaxed),
                .polls = atomic_load_explicit(&t->polls, memory_order_relaxed),
            };
        }
        mp__spin_unlock(&s->lock);
        i++;
    }
    if (rc == 0) {
        emit(&o, "  tasks that have suspended: %zu", n);
        for (size_t k = 0; k < n; k++) {
            char bits[128];
            state_text(tasks[k].state, bits, sizeof bits);
            uint64_t idle_ms =
                tasks[k].last_ns && now > tasks[k].last_ns ? (now - tasks[k].last_ns) / 1000000 : 0;
            emit(&o, "    task %p%s%s%s: %s, %" PRIu32 " polls, last poll %" PRIu64 " ms ago",
                 (const void *)tasks[k].task, tasks[k].name ? " \"" : "",
                 tasks[k].name ? tasks[k].name : "", tasks[k].name ? "\"" : "", bits,
                 tasks[k].polls, idle_ms);
        }
    }
    free(tasks);
    return rc;
}
