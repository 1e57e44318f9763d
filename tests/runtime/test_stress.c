/* Whole-scheduler stress, built twice: with the ring at 256 slots and at 4 (test_stress-q4),
 * which makes overflow, steal-half and the global queue hot paths of every run.
 *
 * MP_STRESS_TASKS tasks (default 10^6) over several rounds, each round with its own seed
 * (MP_TEST_SEED + round), worker count and knobs. Tasks are spawned from two outside threads
 * (one by one and in batches) and from workers (children); each yields at random, parks with
 * its waker in a shared mailbox that other tasks empty at random (cross-wakes, some of which
 * land while the target is still running), and completes exactly once. A lost wake-up leaves
 * a task unfinished and the test times out; a double run or a concurrent poll fails an
 * assertion; a reference-count error shows as a missing or repeated release. */
#include <criterion/criterion.h>

#include "internal.h"
#include "test_util.h"

#define MAILBOX 64

typedef struct stask {
    mp_task task;
    uint64_t rng;
    uint8_t yields, waits;
    bool child_done;
    _Atomic uint8_t in_poll;
    _Atomic uint8_t runs;
} stask;

typedef struct round {
    stask *tasks;
    size_t n;
    _Atomic size_t next; /* next unspawned task */
    _Atomic size_t done;
    _Atomic size_t released;
    _Atomic(mp_waker *) mailbox[MAILBOX];
    mp_runtime *rt;
    _Atomic bool failed;
} round_t;

static round_t *R;

static void fail(const char *what)
{
    fprintf(stderr, "stress: %s\n", what);
    atomic_store(&R->failed, true);
}

/* Mailbox entries are heap cells holding a cloned waker, exchanged atomically. */
static void mail_wake(size_t i)
{
    mp_waker *cell = atomic_exchange(&R->mailbox[i % MAILBOX], NULL);
    if (cell) {
        mp_waker_wake(cell);
        free(cell);
    }
}

static void mail_park(size_t i, const mp_waker *w)
{
    mp_waker *cell = malloc(sizeof *cell);
    *cell = mp_waker_clone(w);
    mp_waker *prev = atomic_exchange(&R->mailbox[i % MAILBOX], cell);
    if (prev) { /* never drop a parked task's only waker: wake it instead */
        mp_waker_wake(prev);
        free(prev);
    }
}

static const mp_task_vtable stask_vt;

static void spawn_next(bool batch)
{
    size_t i = atomic_fetch_add(&R->next, batch ? 8 : 1);
    if (i >= R->n)
        return;
    size_t k = batch ? (R->n - i < 8 ? R->n - i : 8) : 1;
    mp_task *list[8];
    for (size_t j = 0; j < k; j++)
        list[j] = &R->tasks[i + j].task;
    if (batch) {
        if (mp_spawn_batch(R->rt, list, k) != (int)k)
            fail("batch spawn");
    } else if (mp_spawn(R->rt, list[0]) != 0) {
        fail("spawn");
    }
}

static mp_poll stask_poll(mp_task *t, mp_context *cx)
{
    stask *s = mp_container_of(t, stask, task);
    if (atomic_exchange(&s->in_poll, 1))
        fail("polled concurrently");
    uint64_t r = test_rand(&s->rng);
    if (!s->child_done && mp_runtime_current()) {
        s->child_done = true;
        spawn_next(r % 5 == 0); /* from a worker: LIFO slot or ring */
    }
    if (r & 0x10)
        mail_wake(r >> 32); /* cross-wake someone */
    mp_poll ret;
    if (s->yields) {
        s->yields--;
        ret = mp_yield(cx);
    } else if (s->waits) {
        s->waits--;
        mail_park(r >> 40, mp_context_waker(cx));
        ret = MP_PENDING;
    } else {
        if (atomic_fetch_add(&s->runs, 1) != 0)
            fail("completed twice");
        atomic_fetch_add(&R->done, 1);
        ret = MP_READY;
    }
    atomic_store(&s->in_poll, 0);
    return ret;
}

static void stask_release(mp_task *t)
{
    (void)t; /* the vtable's signature */
    atomic_fetch_add(&R->released, 1);
}

static const mp_task_vtable stask_vt = {.poll = stask_poll, .release = stask_release};

static void *outside_spawner(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg;
    while (atomic_load(&R->next) < R->n)
        spawn_next(test_rand(&rng) % 4 == 0);
    return NULL;
}

static void run_round(uint64_t seed, size_t n, unsigned workers, bool lifo)
{
    round_t *r = calloc(1, sizeof *r);
    R = r;
    r->n = n;
    r->tasks = calloc(n, sizeof *r->tasks);
    uint64_t rng = seed;
    for (size_t i = 0; i < n; i++) {
        stask *s = &r->tasks[i];
        mp_task_init(&s->task, &stask_vt);
        s->rng = test_rand(&rng) | 1;
        uint64_t x = test_rand(&rng);
        s->yields = x % 3;
        s->waits = (x >> 8) % 3;
    }
    mp_config cfg;
    mp_config_init(&cfg);
    cfg.workers = workers;
    cfg.disable_lifo = !lifo;
    r->rt = test_runtime_with(&cfg);
    pthread_t th[2];
    for (uintptr_t i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, outside_spawner, (void *)(seed + i + 1));
    /* Tasks still parked in the mailbox once nothing runs are woken from here; a task that
     * was woken and then lost by the scheduler is not in the mailbox and never finishes. */
    while (atomic_load(&r->done) < n && !atomic_load(&r->failed)) {
        for (size_t i = 0; i < MAILBOX; i++)
            mail_wake(i);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_not(atomic_load(&r->failed), "seed %llu", (unsigned long long)seed);
    mp_stats st;
    mp_runtime_stats_get(r->rt, &st);
    cr_assert_eq(st.total.spawned, n);
    fprintf(stderr,
            "round seed %llu: %zu tasks on %u workers: polled %llu (+inline), stolen %llu, steals "
            "%llu, lifo %llu, overflows %llu, global batches %llu, parks %llu\n",
            (unsigned long long)seed, n, workers, (unsigned long long)st.total.polled,
            (unsigned long long)st.total.stolen, (unsigned long long)st.total.steals,
            (unsigned long long)st.total.lifo_hits, (unsigned long long)st.total.overflows,
            (unsigned long long)st.total.global_batches, (unsigned long long)st.total.parks);
    mp_runtime_free(r->rt);
    for (size_t i = 0; i < MAILBOX; i++)
        mail_wake(i); /* drop what is left: the tasks are complete */
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&r->tasks[i].runs), 1, "task %zu, seed %llu", i,
                     (unsigned long long)seed);
    cr_assert_eq(atomic_load(&r->released), n, "every task released exactly once");
    free(r->tasks);
    free(r);
}

Test(stress, million_tasks_each_completes_once, .timeout = 600)
{
    uint64_t seed = test_seed();
    size_t total = (size_t)test_env_long("MP_STRESS_TASKS", 1000000);
    static const struct {
        unsigned workers;
        bool lifo;
    } shapes[] = {{2, true}, {4, true}, {1, true}, {3, false}, {2, false}, {8, true}};
    size_t rounds = sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < rounds; i++)
        run_round(seed + i, total / rounds, shapes[i].workers, shapes[i].lifo);
}
