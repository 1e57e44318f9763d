/* fan_out: the guide's first program (runtime/README.md). A thousand tasks, each a struct
 * with an mp_task inside and a poll function that yields a hundred times, spawned joinable
 * from main(), joined there, then the runtime's counters.
 *
 * Usage: fan_out [TASKS]   (default 1000) */
#include <magpie.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct counter_task {
    mp_task task; /* the header the runtime links; the rest is the task's own */
    unsigned rounds;
    _Atomic unsigned long *total;
} counter_task;

/* One step: count, and yield (MP_PENDING, woken at once) until the rounds are done. */
static mp_poll counter_poll(mp_task *t, mp_context *cx)
{
    counter_task *c = mp_container_of(t, counter_task, task);
    atomic_fetch_add_explicit(c->total, 1, memory_order_relaxed);
    if (--c->rounds > 0)
        return mp_yield(cx);
    return MP_READY;
}

/* A task that never leaves its waker anywhere needs no cancel callback, and one whose
 * memory main() owns needs no release callback. */
static const mp_task_vtable counter_vt = {.poll = counter_poll};

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    if (n < 1) {
        fprintf(stderr, "usage: fan_out [TASKS]\n");
        return 2;
    }
    mp_runtime *rt;
    int rc = mp_runtime_new(&rt, NULL); /* workers = CPUs, started when work needs them */
    if (rc != 0) {
        fprintf(stderr, "mp_runtime_new: %s\n", mp_strerror(rc));
        return 1;
    }
    counter_task *tasks = calloc((size_t)n, sizeof *tasks);
    if (!tasks)
        return 1;
    _Atomic unsigned long total = 0;
    for (int i = 0; i < n; i++) {
        mp_task_init(&tasks[i].task, &counter_vt);
        tasks[i].rounds = 100;
        tasks[i].total = &total;
        if ((rc = mp_spawn_joinable(rt, &tasks[i].task)) != 0) {
            fprintf(stderr, "mp_spawn_joinable: %s\n", mp_strerror(rc));
            return 1;
        }
    }
    for (int i = 0; i < n; i++)
        mp_join(&tasks[i].task); /* 0, or -ECANCELED: never cancelled here */
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    printf("%d tasks x 100 polls = %lu polls on %u workers\n", n, (unsigned long)total,
           st.workers_started);
    /* Counted by the workers (main's joins help run tasks too, uncounted). */
    printf("spawned %llu, stolen %llu in %llu steals, parks %llu\n",
           (unsigned long long)st.total.spawned, (unsigned long long)st.total.stolen,
           (unsigned long long)st.total.steals, (unsigned long long)st.total.parks);
    mp_runtime_free(rt); /* shuts down first */
    free(tasks);         /* after the joins: the runtime no longer touches them */
    return 0;
}
