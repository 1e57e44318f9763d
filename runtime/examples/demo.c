/* A small tour of libmagpie, run by `make run` until magpied exists: a parallel fan-out of
 * tasks that yield, joined from the main thread, then the runtime's counters. */
#include <magpie.h>
#include <stdio.h>

typedef struct counter_task {
    mp_task task;
    unsigned rounds;
    _Atomic unsigned long *total;
} counter_task;

static mp_poll counter_poll(mp_task *t, mp_context *cx)
{
    counter_task *c = mp_container_of(t, counter_task, task);
    atomic_fetch_add_explicit(c->total, 1, memory_order_relaxed);
    if (--c->rounds > 0)
        return mp_yield(cx);
    return MP_READY;
}

static const mp_task_vtable counter_vt = {.poll = counter_poll};

int main(void)
{
    mp_runtime *rt;
    int rc = mp_runtime_new(&rt, NULL);
    if (rc != 0) {
        fprintf(stderr, "mp_runtime_new: %d\n", rc);
        return 1;
    }
    enum { N = 1000 };
    static counter_task tasks[N];
    _Atomic unsigned long total = 0;
    for (int i = 0; i < N; i++) {
        mp_task_init(&tasks[i].task, &counter_vt);
        tasks[i].rounds = 100;
        tasks[i].total = &total;
        mp_spawn_joinable(rt, &tasks[i].task);
    }
    for (int i = 0; i < N; i++)
        mp_join(&tasks[i].task);
    mp_stats st;
    mp_runtime_stats_get(rt, &st);
    printf("%d tasks x 100 polls = %lu polls on %u workers (%u started)\n", N, (unsigned long)total,
           st.workers, st.workers_started);
    printf("spawned %llu, polled %llu, stolen %llu in %llu steals, lifo hits %llu, "
           "global batches %llu, parks %llu\n",
           (unsigned long long)st.total.spawned, (unsigned long long)st.total.polled,
           (unsigned long long)st.total.stolen, (unsigned long long)st.total.steals,
           (unsigned long long)st.total.lifo_hits, (unsigned long long)st.total.global_batches,
           (unsigned long long)st.total.parks);
    mp_runtime_free(rt);
    return 0;
}
