/* Chooses MP__GLOBAL_TARGET_NS (src/internal.h): the latency target from which the adaptive
 * global-queue interval is derived (interval = target / EWMA of poll time, clamped 8..255).
 * Sixteen tasks keep two workers busy with polls of POLL_NS; the main thread injects one task
 * at a time and records how long it waits before it runs, and how many local polls happen
 * meanwhile.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -pthread -Iruntime/include loadtest/runtime/global_interval.c \
 *      build/release/libmagpie.a -luv -o build/bench/global-interval
 *   build/bench/global-interval TARGET_NS POLL_NS
 */
#include <magpie.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned long long now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static _Atomic int stop;
static _Atomic unsigned long long local_polls;
static unsigned long long work_ns;

static mp_poll busy_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    if (atomic_load(&stop))
        return MP_READY;
    unsigned long long t0 = now();
    while (now() - t0 < work_ns)
        ;
    atomic_fetch_add_explicit(&local_polls, 1, memory_order_relaxed);
    return mp_yield(cx);
}

static const mp_task_vtable busy_vt = {.poll = busy_poll};

typedef struct probe {
    mp_task task;
    unsigned long long t0, lat;
} probe;

static mp_poll probe_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    probe *p = mp_container_of(t, probe, task);
    p->lat = now() - p->t0;
    return MP_READY;
}

static const mp_task_vtable probe_vt = {.poll = probe_poll};

static int cmp(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s TARGET_NS POLL_NS\n", argv[0]);
        return 2;
    }
    enum { BUSY = 16, PROBES = 400 };
    static mp_task busy[BUSY];
    static probe p[PROBES];
    static unsigned long long lat[PROBES];
    work_ns = strtoull(argv[2], NULL, 0);
    mp_config c;
    mp_config_init(&c);
    c.workers = 2;
    c.global_target_ns = strtoull(argv[1], NULL, 0);
    mp_runtime *rt;
    if (mp_runtime_new(&rt, &c) != 0)
        return 1;
    for (int i = 0; i < BUSY; i++) {
        mp_task_init(&busy[i], &busy_vt);
        mp_spawn(rt, &busy[i]);
    }
    struct timespec warm = {0, 200000000};
    nanosleep(&warm, NULL);
    unsigned long long lp0 = atomic_load(&local_polls), t0 = now();
    for (int i = 0; i < PROBES; i++) {
        mp_task_init(&p[i].task, &probe_vt);
        p[i].t0 = now();
        mp_spawn_joinable(rt, &p[i].task);
        /* Sleep rather than mp_join: a joining thread would run the probe itself. */
        while (!mp_task_is_complete(&p[i].task)) {
            struct timespec s = {0, 20000};
            nanosleep(&s, NULL);
        }
        lat[i] = p[i].lat;
        mp_detach(&p[i].task);
    }
    double secs = (double)(now() - t0) / 1e9;
    unsigned long long lp = atomic_load(&local_polls) - lp0;
    qsort(lat, PROBES, sizeof lat[0], cmp);
    printf("target %7s ns, poll %6s ns: injected task waits p50 %7.1f us, p99 %7.1f us; "
           "local polls %.0f/s\n",
           argv[1], argv[2], (double)lat[PROBES / 2] / 1e3, (double)lat[PROBES * 99 / 100] / 1e3,
           (double)lp / secs);
    atomic_store(&stop, 1);
    mp_runtime_free(rt);
    return 0;
}
