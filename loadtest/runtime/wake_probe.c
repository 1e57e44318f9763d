/* wake_probe: spawn-to-run latency from a plain thread into an idle runtime, p50 and p99.
 *
 *   wake_probe [--workers N] [--samples S] [--idle-us U]
 *
 * Each sample: the main thread sleeps U µs so that every worker goes to sleep (one of them
 * as the loop's driver, in epoll_wait, the others on their futex), takes the time, spawns a
 * task (global queue + a wake-up), and spins until the task has stored the time it started
 * running. What is measured is the wake-up of a sleeping worker: which one is woken, and
 * how, decides it. Uses only magpie.h.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "magpie.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct probe {
    mp_task task;
    _Atomic uint64_t ran_at;
} probe;

static mp_poll probe_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    probe *p = mp_container_of(t, probe, task);
    atomic_store_explicit(&p->ran_at, now_ns(), memory_order_release);
    return MP_READY;
}

static const mp_task_vtable probe_vt = {.poll = probe_poll};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    unsigned workers = 2, samples = 400, idle_us = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--workers"))
            workers = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--samples"))
            samples = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--idle-us"))
            idle_us = (unsigned)atoi(argv[i + 1]);
    }
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    mp_runtime *rt;
    if (mp_runtime_new(&rt, &cfg) != 0)
        return 1;
    uint64_t *lat = calloc(samples, sizeof *lat);
    probe *p = calloc(1, sizeof *p);
    if (lat == NULL || p == NULL)
        return 1;
    struct timespec idle = {.tv_sec = idle_us / 1000000,
                            .tv_nsec = (long)(idle_us % 1000000) * 1000};
    for (unsigned i = 0; i < samples + 20; i++) { /* the first 20 start the workers */
        nanosleep(&idle, NULL);
        mp_task_init(&p->task, &probe_vt);
        atomic_store_explicit(&p->ran_at, 0, memory_order_relaxed);
        uint64_t t0 = now_ns();
        if (mp_spawn_joinable(rt, &p->task) != 0)
            return 1;
        uint64_t ran;
        while ((ran = atomic_load_explicit(&p->ran_at, memory_order_acquire)) == 0)
            ;
        if (mp_join(&p->task) != 0)
            return 1;
        if (i >= 20)
            lat[i - 20] = ran - t0;
    }
    qsort(lat, samples, sizeof *lat, cmp_u64);
    printf("spawn_to_run workers=%u samples=%u p50_us=%.1f p99_us=%.1f\n", workers, samples,
           lat[samples / 2] / 1e3, lat[samples * 99 / 100] / 1e3);
    mp_runtime_free(rt);
    free(lat);
    free(p);
    return 0;
}
