/* bench.c: magpie twin of loadtest/runtime/tokio (Tokio's benches/rt_multi_threaded.rs).
 *
 *   magpie-bench --workers N --rounds R [--warmup K] [--only NAME] [--alloc] [--no-help] [--stats]
 *
 * prints one line per workload: "<name> <median_ns_per_op> <median_ns_total>", the median of R
 * timed rounds after K untimed ones (default 3), each workload on a fresh runtime.
 *
 * Each workload does what Tokio's does, from the same threads:
 *   - Tokio's Runtime::block_on polls its future on the calling thread, which is not a worker,
 *     so a tokio::spawn inside it takes the remote path (inject queue + unpark). Here that is
 *     mp_spawn from the main thread (global queue).
 *   - std::sync::mpsc::sync_channel, which the Tokio benchmark uses to tell the main thread it is
 *     done, is a mutex + condition variable channel in Rust 1.63; here it is done_chan, the same
 *     thing with pthreads (not part of the runtime under test).
 *   - tokio::spawn from inside a task goes to the worker's LIFO slot; so does mp_spawn.
 *   - JoinHandle.await: mp_join (outside a task, or inside one on a worker, where it runs other
 *     tasks until the joined one completes).
 *
 * Memory: a task is a struct embedding mp_task, so spawning allocates nothing. By default the
 * task structs come from arrays allocated once per workload, outside the timed region; a slot is
 * reused only after the runtime has released it (release callback): within a round, the last
 * slot or the one before it if already released (slot_get(), as malloc reuses a chunk just
 * freed), otherwise between rounds, untimed. Within the timed region each spawn does
 * mp_task_init + field setup + mp_spawn, where Tokio allocates and initialises its task cell.
 * --alloc instead mallocs every task inside the timed region and frees it from the release
 * callback, to show what that costs.
 *
 * mp_join on a thread that is not a worker runs queued global tasks itself while it waits, which
 * Tokio's block_on never does; in spawn_many_remote_idle and spawn_join_outside the main thread
 * therefore runs most of the tasks. --no-help keeps it from doing so, to compare cross-thread
 * hand-off with cross-thread hand-off: spawn_many_remote_idle then awaits the handles with
 * mp_join_poll from a task (spawned last, detached) that signals done_chan; spawn_join_outside
 * spawns each task detached and waits for the task's own done_chan signal.
 *
 * --stats prints every round's time and, per workload, the runtime's counters to stderr.
 *
 * A watchdog thread ends the program (exit 3) with a diagnosis if a round takes longer than
 * MAGPIE_BENCH_TIMEOUT seconds (default 20), or if tasks are never released.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "magpie.h"

enum {
    NUM_SPAWN = 10000,
    NUM_YIELD = 1000,
    YIELD_TASKS = 200,
    NUM_PINGS = 1000,
    CHAIN = 1000,
    NUM_JOIN = 10000,
};

static mp_runtime *g_rt;
static bool g_alloc;   /* --alloc */
static bool g_no_help; /* --no-help */
static bool g_verbose; /* --stats */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- diagnostics and the watchdog ---- */

static const char *g_workload = "-";
static _Atomic int g_round = -1; /* rounds count from -warmup; <0: warm-up */
static int g_warmup;
static _Atomic(const char *) g_phase = ""; /* what the main thread is doing */
static _Atomic uint64_t g_deadline;        /* 0: no round in progress */
static uint64_t g_timeout_ns = 20000000000u;
static void (*g_progress)(char *buf, size_t len); /* the workload's own counters */

static void print_stats(FILE *f)
{
    mp_stats s;
    int rc = g_rt ? mp_runtime_stats_get(g_rt, &s) : -1;
    if (rc != 0) {
        fprintf(f, "  (mp_runtime_stats_get: %d)\n", rc);
        return;
    }
    fprintf(f,
            "  runtime: workers %u started %u live_tasks %" PRIu64 " injected %" PRIu64
            " spawned %" PRIu64 " polled %" PRIu64 " stolen %" PRIu64 " parks %" PRIu64
            " unparks %" PRIu64 " lifo_hits %" PRIu64 " global_batches %" PRIu64
            " overflows %" PRIu64 "\n",
            s.workers, s.workers_started, s.live_tasks, s.injected, s.total.spawned, s.total.polled,
            s.total.stolen, s.total.parks, s.total.unparks, s.total.lifo_hits,
            s.total.global_batches, s.total.overflows);
}

static void report_hang(const char *what)
{
    char buf[256] = "";
    if (g_progress)
        g_progress(buf, sizeof buf);
    int r = atomic_load(&g_round);
    fprintf(stderr, "magpie-bench: %s: %s %d: %s while %s; %s\n", g_workload,
            r < 0 ? "warm-up round" : "round", r < 0 ? r + g_warmup + 1 : r + 1, what,
            atomic_load(&g_phase), buf);
    print_stats(stderr);
    fflush(stderr);
}

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        usleep(50000);
        uint64_t d = atomic_load(&g_deadline);
        if (d != 0 && now_ns() > d) {
            char what[64];
            snprintf(what, sizeof what, "round still running after %.0f s",
                     (double)g_timeout_ns / 1e9);
            report_hang(what);
            _exit(3);
        }
    }
    return NULL;
}

/* A crash: say where (workload, round, phase), then die of the same signal. */
static void on_crash(int sig)
{
    char buf[512];
    int r = atomic_load(&g_round);
    int n = snprintf(buf, sizeof buf, "magpie-bench: %s: %s %d: %s while %s\n", g_workload,
                     r < 0 ? "warm-up round" : "round", r < 0 ? r + g_warmup + 1 : r + 1,
                     strsignal(sig), atomic_load(&g_phase));
    if (n > 0)
        (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "magpie-bench: %s: ", g_workload);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_stats(stderr);
    _exit(4);
}

static void set_phase(const char *p)
{
    atomic_store_explicit(&g_phase, p, memory_order_relaxed);
}

/* ---- done_chan: std::sync::mpsc::sync_channel<()> as Tokio's benchmark uses it ---- */

typedef struct done_chan {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned count;
} done_chan;

static done_chan g_done = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void done_send(done_chan *d)
{
    pthread_mutex_lock(&d->mu);
    d->count++;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void done_recv(done_chan *d)
{
    pthread_mutex_lock(&d->mu);
    while (d->count == 0)
        pthread_cond_wait(&d->cv, &d->mu);
    d->count--;
    pthread_mutex_unlock(&d->mu);
}

/* ---- task slots ---- */

/* Every task struct starts with a slot. */
typedef struct slot {
    mp_task task;
    _Atomic int free; /* preallocated: 1 once the runtime released it */
    bool heap;        /* --alloc: malloc'd for this spawn, freed on release */
} slot;

/* The one task a round starts from (ping_pong, chained_spawn, spawn_join_worker, --no-help). */
typedef struct root {
    slot s;
    uint64_t ns; /* spawn_join_worker: what it measured */
    size_t next; /* spawn_many_remote_idle --no-help: the next handle to await */
} root;

static void slot_release(mp_task *t)
{
    slot *s = mp_container_of(t, slot, task);
    if (s->heap)
        free(s);
    else
        atomic_store_explicit(&s->free, 1, memory_order_release);
}

typedef struct pool {
    char *mem;
    size_t size, cap, used;
    bool recycle; /* slot_get() may hand out a slot released since (see there) */
} pool;

static void pool_init(pool *p, size_t size, size_t cap)
{
    p->size = size;
    p->cap = cap;
    p->used = 0;
    p->recycle = false;
    p->mem = aligned_alloc(64, (size * cap + 63) / 64 * 64);
    if (!p->mem)
        fail("out of memory");
    memset(p->mem, 0, size * cap);
    for (size_t i = 0; i < cap; i++)
        atomic_init(&((slot *)(p->mem + i * size))->free, 1);
}

/* Untimed, between rounds: wait until the runtime has released every slot handed out. */
static void pool_reclaim(pool *p)
{
    set_phase("waiting for the runtime to release the previous round's tasks");
    for (size_t i = 0; i < p->used; i++) {
        slot *s = (slot *)(p->mem + i * p->size);
        while (!atomic_load_explicit(&s->free, memory_order_acquire))
            sched_yield();
    }
    p->used = 0;
}

static void pool_free(pool *p)
{
    pool_reclaim(p);
    free(p->mem);
}

static pool g_roots; /* the one root task of a round: always preallocated */

/* --alloc: tasks from this pool are malloc'd per spawn (roots never are). */
static bool pool_heap(const pool *p)
{
    return g_alloc && p != &g_roots;
}

/* A task struct for one spawn: preallocated slot i, or (--alloc) a fresh malloc. The caller
 * accounts for p->used. */
static void *slot_at(pool *p, size_t i, const mp_task_vtable *vt)
{
    slot *s;
    if (pool_heap(p)) {
        s = malloc(p->size);
        if (!s)
            fail("out of memory");
        s->heap = true;
    } else {
        s = (slot *)(p->mem + i * p->size);
        atomic_store_explicit(&s->free, 0, memory_order_relaxed);
        s->heap = false;
    }
    mp_task_init(&s->task, vt);
    return s;
}

/* The next preallocated slot: only ever called by one thread at a time per pool. With
 * recycle, the slot handed out last, or the one before it, if the runtime has released it
 * since, as an allocator's free list would: Tokio's twin mallocs every task, and malloc hands
 * back the chunk just freed, still in cache. Walking on through the array instead made every
 * spawn of spawn_join_worker touch a cold slot, which on this VM's slower days cost more than
 * the spawn and join themselves (loadtest/HISTORY.md, "join in place, and task slots reused
 * as malloc reuses them"). */
static void *slot_get(pool *p, const mp_task_vtable *vt)
{
    if (pool_heap(p))
        return slot_at(p, 0, vt);
    for (size_t back = 1; p->recycle && back <= 2 && back <= p->used; back++) {
        slot *s = (slot *)(p->mem + (p->used - back) * p->size);
        /* Acquire: pairs with the release store in slot_release(); the runtime is done. */
        if (atomic_load_explicit(&s->free, memory_order_acquire))
            return slot_at(p, p->used - back, vt);
    }
    return slot_at(p, p->used++, vt);
}

static void spawn_or_fail(mp_task *t, bool joinable)
{
    int rc = joinable ? mp_spawn_joinable(g_rt, t) : mp_spawn(g_rt, t);
    if (rc != 0)
        fail("mp_spawn%s: %d (%s)", joinable ? "_joinable" : "", rc, strerror(-rc));
}

static void join_or_fail(mp_task *t)
{
    int rc = mp_join(t);
    if (rc != 0)
        fail("mp_join: %d (%s)", rc, strerror(-rc));
}

/* ---- the measuring loop ---- */

typedef uint64_t (*round_fn)(void); /* one round; returns the nanoseconds it measured */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double measure(round_fn f, int warmup, int rounds)
{
    g_warmup = warmup;
    uint64_t *v = calloc((size_t)rounds, sizeof *v);
    if (!v)
        fail("out of memory");
    for (int i = -warmup; i < rounds; i++) {
        mp_stats a, b;
        if (g_verbose && mp_runtime_stats_get(g_rt, &a) != 0)
            memset(&a, 0, sizeof a);
        atomic_store(&g_round, i);
        atomic_store(&g_deadline, now_ns() + g_timeout_ns);
        uint64_t ns = f();
        atomic_store(&g_deadline, 0);
        if (i >= 0)
            v[i] = ns;
        if (g_verbose) {
            if (mp_runtime_stats_get(g_rt, &b) != 0)
                memset(&b, 0, sizeof b);
            fprintf(stderr,
                    "%s %s %d: %.1f us; polled %" PRIu64 " stolen %" PRIu64 " steals %" PRIu64
                    " parks %" PRIu64 " unparks %" PRIu64 " lifo_hits %" PRIu64
                    " overflows %" PRIu64 "\n",
                    g_workload, i < 0 ? "warm-up" : "round", i < 0 ? i + warmup + 1 : i + 1,
                    (double)ns / 1e3, b.total.polled - a.total.polled,
                    b.total.stolen - a.total.stolen, b.total.steals - a.total.steals,
                    b.total.parks - a.total.parks, b.total.unparks - a.total.unparks,
                    b.total.lifo_hits - a.total.lifo_hits, b.total.overflows - a.total.overflows);
        }
    }
    qsort(v, (size_t)rounds, sizeof *v, cmp_u64);
    double m = rounds % 2 ? (double)v[rounds / 2]
                          : ((double)v[rounds / 2 - 1] + (double)v[rounds / 2]) / 2.0;
    free(v);
    return m;
}

/* ---- spawn_many_local ----
 * Tokio: block_on(async { for 0..10000 { tokio::spawn(async { if 1 == rem.fetch_sub(1) {
 * tx.send(()) } }) } rx.recv() }): spawned from the block_on thread, which is not a worker. */

static _Atomic size_t g_rem;
static pool g_pool;

static mp_poll count_down_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx;
    if (1 == atomic_fetch_sub_explicit(&g_rem, 1, memory_order_relaxed))
        done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable count_down_vt = {count_down_poll, NULL, slot_release};

static void rem_progress(char *buf, size_t len)
{
    snprintf(buf, len, "rem = %zu (tasks that have not run yet)", atomic_load(&g_rem));
}

static uint64_t spawn_many_local_round(void)
{
    pool_reclaim(&g_pool);
    set_phase("spawning from the main thread, then waiting for the last task's signal");
    uint64_t t0 = now_ns();
    atomic_store_explicit(&g_rem, NUM_SPAWN, memory_order_relaxed);
    for (int i = 0; i < NUM_SPAWN; i++) {
        slot *s = slot_get(&g_pool, &count_down_vt);
        spawn_or_fail(&s->task, false);
    }
    done_recv(&g_done);
    return now_ns() - t0;
}

/* ---- spawn_many_remote_idle ----
 * Tokio: for 0..10000 { handles.push(rt.spawn(async {})) } then
 * block_on(async { for h in handles { h.await } }). */

static mp_task *g_handles[NUM_SPAWN > NUM_JOIN ? NUM_SPAWN : NUM_JOIN];
static _Atomic size_t g_joined;

static mp_poll empty_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx;
    return MP_READY;
}

static const mp_task_vtable empty_vt = {empty_poll, NULL, slot_release};

static void joined_progress(char *buf, size_t len)
{
    snprintf(buf, len, "%zu joined", atomic_load(&g_joined));
}

/* --no-help: for h in handles { h.await }, in a task. */
static mp_poll await_all_poll(mp_task *t, mp_context *cx)
{
    root *r = mp_container_of(t, root, s.task);
    for (; r->next < NUM_SPAWN; r->next++) {
        int res;
        if (mp_join_poll(g_handles[r->next], cx, &res) == MP_PENDING)
            return MP_PENDING;
        if (res != 0)
            fail("mp_join_poll: %d (%s)", res, strerror(-res));
        atomic_store_explicit(&g_joined, r->next + 1, memory_order_relaxed);
    }
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable await_all_vt = {await_all_poll, NULL, slot_release};

static uint64_t spawn_many_remote_idle_round(void)
{
    pool_reclaim(&g_pool);
    pool_reclaim(&g_roots);
    atomic_store(&g_joined, 0);
    set_phase("spawning joinable tasks from the main thread");
    uint64_t t0 = now_ns();
    for (int i = 0; i < NUM_SPAWN; i++) {
        slot *s = slot_get(&g_pool, &empty_vt);
        spawn_or_fail(&s->task, true);
        g_handles[i] = &s->task;
    }
    if (g_no_help) {
        set_phase("waiting for the awaiting task's signal (--no-help)");
        root *r = slot_get(&g_roots, &await_all_vt);
        r->next = 0;
        spawn_or_fail(&r->s.task, false);
        done_recv(&g_done);
        return now_ns() - t0;
    }
    set_phase("joining them in order from the main thread (mp_join)");
    for (int i = 0; i < NUM_SPAWN; i++) {
        join_or_fail(g_handles[i]);
        atomic_store_explicit(&g_joined, (size_t)i + 1, memory_order_relaxed);
    }
    return now_ns() - t0;
}

/* ---- yield_many ----
 * Tokio: for 0..200 { rt.spawn(async { for 0..1000 { yield_now().await } tx.send(()) }) }
 * then 200 x rx.recv(). */

typedef struct yielder {
    slot s;
    int left;
} yielder;

static _Atomic size_t g_received;

static mp_poll yielder_poll(mp_task *t, mp_context *cx)
{
    yielder *y = mp_container_of(t, yielder, s.task);
    if (y->left > 0) {
        y->left--;
        return mp_yield(cx);
    }
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable yielder_vt = {yielder_poll, NULL, slot_release};

static void received_progress(char *buf, size_t len)
{
    snprintf(buf, len, "%zu done signals received", atomic_load(&g_received));
}

static uint64_t yield_many_round(void)
{
    pool_reclaim(&g_pool);
    atomic_store(&g_received, 0);
    set_phase("spawning yielders from the main thread, then waiting for their signals");
    uint64_t t0 = now_ns();
    for (int i = 0; i < YIELD_TASKS; i++) {
        yielder *y = slot_get(&g_pool, &yielder_vt);
        y->left = NUM_YIELD;
        spawn_or_fail(&y->s.task, false);
    }
    for (int i = 0; i < YIELD_TASKS; i++) {
        done_recv(&g_done);
        atomic_store_explicit(&g_received, (size_t)i + 1, memory_order_relaxed);
    }
    return now_ns() - t0;
}

/* ---- ping_pong ----
 * Tokio: block_on(async { tokio::spawn(async { for 0..1000 { tokio::spawn(A) } }); done_rx.recv()
 * }) where A makes two oneshots, spawns B (rx1.await; tx2.send), does tx1.send, rx2.await, and
 * the last A to finish signals the main thread. */

typedef struct ping ping;

typedef struct pong {
    slot s;
    ping *pair;
} pong;

struct ping {
    slot s;
    size_t idx;       /* its pong is g_pool2 slot idx: pings run concurrently */
    _Atomic int refs; /* --alloc: the ping and its pong */
    int state;
    mp_oneshot o1, o2;
    pong *b;
};

static pool g_pool2; /* the pongs */

static mp_poll pong_poll(mp_task *t, mp_context *cx)
{
    pong *b = mp_container_of(t, pong, s.task);
    void *v;
    int err;
    if (mp_oneshot_poll(&b->pair->o1, cx, &v, &err) == MP_PENDING)
        return MP_PENDING;
    if (err != 0 || v != b->pair)
        fail("ping_pong: rx1 gave err %d value %p, want 0 and %p", err, v, (void *)b->pair);
    int rc = mp_oneshot_send(&b->pair->o2, b);
    if (rc != 0)
        fail("ping_pong: tx2.send: %d", rc);
    return MP_READY;
}

/* The ping holds both oneshots, so it must outlive its pong. Preallocated, pool_reclaim sees to
 * that (pongs are reclaimed first); with --alloc the last of the two releases frees the ping, as
 * Tokio's Arc'd oneshot cells are freed by whichever side drops last. */
static void ping_unref(ping *a)
{
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
        free(a);
}

static void ping_release(mp_task *t)
{
    if (g_alloc)
        ping_unref(mp_container_of(t, ping, s.task));
    else
        slot_release(t);
}

static void pong_release(mp_task *t)
{
    ping *a = mp_container_of(t, pong, s.task)->pair;
    slot_release(t); /* --alloc: frees the pong */
    if (g_alloc)
        ping_unref(a);
}

static const mp_task_vtable pong_vt = {pong_poll, NULL, pong_release};

static mp_poll ping_poll(mp_task *t, mp_context *cx)
{
    ping *a = mp_container_of(t, ping, s.task);
    if (a->state == 0) {
        mp_oneshot_init(&a->o1);
        mp_oneshot_init(&a->o2);
        pong *b = slot_at(&g_pool2, a->idx, &pong_vt);
        b->pair = a;
        a->b = b;
        spawn_or_fail(&b->s.task, false);
        int rc = mp_oneshot_send(&a->o1, a);
        if (rc != 0)
            fail("ping_pong: tx1.send: %d", rc);
        a->state = 1;
    }
    void *v;
    int err;
    if (mp_oneshot_poll(&a->o2, cx, &v, &err) == MP_PENDING)
        return MP_PENDING;
    if (err != 0 || v != a->b)
        fail("ping_pong: rx2 gave err %d value %p, want 0 and %p", err, v, (void *)a->b);
    a->state = 2;
    if (1 == atomic_fetch_sub_explicit(&g_rem, 1, memory_order_relaxed))
        done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable ping_vt = {ping_poll, NULL, ping_release};

static void ping_progress(char *buf, size_t len)
{
    size_t st[3] = {0, 0, 0}, released = 0, pong_released = 0;
    if (!g_alloc) {
        for (size_t i = 0; i < g_pool.used; i++) {
            ping *a = (ping *)(g_pool.mem + i * g_pool.size);
            st[a->state < 0 || a->state > 2 ? 0 : a->state]++;
            released += atomic_load(&a->s.free) != 0;
        }
        for (size_t i = 0; i < g_pool2.used; i++)
            pong_released += atomic_load(&((slot *)(g_pool2.mem + i * g_pool2.size))->free) != 0;
    }
    snprintf(
        buf, len,
        "rem = %zu; of %zu pings spawned: %zu never polled, %zu waiting for their pong, "
        "%zu done, %zu released; pong slots: %zu, of which free (released or not yet used) %zu",
        atomic_load(&g_rem), g_pool.used, st[0], st[1], st[2], released, g_pool2.used,
        pong_released);
}

static mp_poll ping_root_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx;
    if (!mp_runtime_current())
        fail("ping_pong: the root task is not running on a worker");
    for (int i = 0; i < NUM_PINGS; i++) {
        ping *a = slot_get(&g_pool, &ping_vt);
        a->idx = (size_t)i;
        a->state = 0;
        if (g_alloc)
            atomic_store_explicit(&a->refs, 2, memory_order_relaxed);
        spawn_or_fail(&a->s.task, false);
    }
    return MP_READY;
}

static const mp_task_vtable ping_root_vt = {ping_root_poll, NULL, slot_release};

static uint64_t ping_pong_round(void)
{
    pool_reclaim(&g_pool2); /* pongs first: a ping is not reused while its pong may run */
    pool_reclaim(&g_pool);
    pool_reclaim(&g_roots);
    g_pool2.used = g_alloc ? 0 : NUM_PINGS; /* for the next pool_reclaim */
    set_phase("waiting for the last ping's signal");
    uint64_t t0 = now_ns();
    atomic_store_explicit(&g_rem, NUM_PINGS, memory_order_relaxed);
    root *r = slot_get(&g_roots, &ping_root_vt);
    spawn_or_fail(&r->s.task, false);
    done_recv(&g_done);
    return now_ns() - t0;
}

/* ---- chained_spawn ----
 * Tokio: block_on(async { tokio::spawn(async { iter(tx, 1000) }); done_rx.recv() }) with
 * iter(tx, n) = if n == 0 { tx.send(()) } else { tokio::spawn(async { iter(tx, n - 1) }) }. */

typedef struct chain_link {
    slot s;
    int n;
} chain_link;

static _Atomic int g_chain_at; /* the n of the latest link that ran, for the diagnosis */

static const mp_task_vtable link_vt;

static void chain_iter(int n)
{
    if (n == 0) {
        done_send(&g_done);
    } else {
        chain_link *l = slot_get(&g_pool, &link_vt);
        l->n = n - 1;
        spawn_or_fail(&l->s.task, false);
    }
}

static mp_poll link_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    chain_link *l = mp_container_of(t, chain_link, s.task);
    atomic_store_explicit(&g_chain_at, l->n, memory_order_relaxed);
    chain_iter(l->n);
    return MP_READY;
}

static const mp_task_vtable link_vt = {link_poll, NULL, slot_release};

static mp_poll chain_root_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx;
    chain_iter(CHAIN);
    return MP_READY;
}

static const mp_task_vtable chain_root_vt = {chain_root_poll, NULL, slot_release};

static void chain_progress(char *buf, size_t len)
{
    snprintf(buf, len, "the last link that ran had n = %d (counts down to 0)",
             atomic_load(&g_chain_at));
}

static uint64_t chained_spawn_round(void)
{
    pool_reclaim(&g_pool);
    pool_reclaim(&g_roots);
    atomic_store(&g_chain_at, CHAIN);
    set_phase("waiting for the end of the chain");
    uint64_t t0 = now_ns();
    root *r = slot_get(&g_roots, &chain_root_vt);
    spawn_or_fail(&r->s.task, false);
    done_recv(&g_done);
    return now_ns() - t0;
}

/* ---- spawn_join_worker ----
 * Tokio: a task on a worker does 10000 x tokio::spawn(async {}).await, timed inside the task.
 * Here the task does 10000 x mp_spawn_joinable + mp_join; the root is spawned detached and
 * signals through done_chan, so that the main thread (which would run global-queue tasks in
 * mp_join) cannot end up running it. */

static mp_poll join_root_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    root *r = mp_container_of(t, root, s.task);
    if (!mp_runtime_current())
        fail("spawn_join_worker: the root task is not running on a worker");
    uint64_t t0 = now_ns();
    for (int i = 0; i < NUM_JOIN; i++) {
        slot *s = slot_get(&g_pool, &empty_vt);
        spawn_or_fail(&s->task, true);
        join_or_fail(&s->task);
        atomic_store_explicit(&g_joined, (size_t)i + 1, memory_order_relaxed);
    }
    r->ns = now_ns() - t0;
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable join_root_vt = {join_root_poll, NULL, slot_release};

static uint64_t spawn_join_worker_round(void)
{
    pool_reclaim(&g_pool);
    pool_reclaim(&g_roots);
    atomic_store(&g_joined, 0);
    set_phase("waiting for the root task's spawn+join loop");
    /* Roots are never malloc'd, so r->ns can be read after the root's release. */
    root *r = slot_get(&g_roots, &join_root_vt);
    spawn_or_fail(&r->s.task, false);
    done_recv(&g_done);
    return r->ns;
}

/* ---- spawn_join_outside ----
 * Tokio: block_on(async { for 0..10000 { tokio::spawn(async {}).await } }) from the main thread.
 * Here: 10000 x mp_spawn_joinable + mp_join from the main thread. */

static mp_poll signal_poll(mp_task *t, mp_context *cx)
{
    (void)t;
    (void)cx;
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable signal_vt = {signal_poll, NULL, slot_release};

static uint64_t spawn_join_outside_round(void)
{
    pool_reclaim(&g_pool);
    atomic_store(&g_joined, 0);
    set_phase(g_no_help ? "spawn from the main thread + wait for the task's signal (--no-help)"
                        : "spawn+join from the main thread");
    uint64_t t0 = now_ns();
    for (int i = 0; i < NUM_JOIN; i++) {
        if (g_no_help) {
            slot *s = slot_get(&g_pool, &signal_vt);
            spawn_or_fail(&s->task, false);
            done_recv(&g_done);
        } else {
            slot *s = slot_get(&g_pool, &empty_vt);
            spawn_or_fail(&s->task, true);
            join_or_fail(&s->task);
        }
        atomic_store_explicit(&g_joined, (size_t)i + 1, memory_order_relaxed);
    }
    return now_ns() - t0;
}

/* ---- sync primitives: mutex_contention, semaphore, mpmc, broadcast_fanout ----
 * Tasks spawned from the main thread (Tokio: rt.spawn from outside), each signalling done_chan
 * when finished; the main thread waits for every signal.
 *   mutex_contention: 16 tasks x 1000 { lock; counter += 1; unlock } on one mp_mutex
 *     (tokio::sync::Mutex).
 *   semaphore: 16 tasks x 1000 { acquire 1; release 1 } on 4 permits (tokio::sync::Semaphore).
 *   mpmc: 4 producers x 5000 values into a channel of 64, 4 consumers (mp_mpmc; Tokio has no
 *     MPMC channel: its twin shares one mpsc Receiver behind a tokio Mutex, the usual idiom).
 *     The last producer closes the channel; an op is one value through it.
 *   broadcast_fanout: one sender task, 1000 u64 into a ring of 1024, 8 receivers that read to
 *     the close (mp_broadcast; tokio::sync::broadcast); an op is one value delivered to one
 *     receiver. */

enum {
    SYNC_TASKS = 16,
    SYNC_ITERS = 1000,
    SEM_PERMITS = 4,
    MPMC_PRODUCERS = 4,
    MPMC_CONSUMERS = 4,
    MPMC_PER = 5000,
    MPMC_CAP = 64,
    BCAST_RECEIVERS = 8,
    BCAST_N = 1000,
    BCAST_CAP = 1024,
};

typedef struct syncer {
    slot s;
    int left;
    bool producer;
    mp_waiter w;
    mp_broadcast_rx brx;
} syncer;

static mp_mutex g_mutex;
static uint64_t g_counter; /* guarded by g_mutex */
static mp_semaphore g_sem;
static mp_mpmc g_mpmc;
static _Atomic int g_producers_left;
static mp_broadcast g_bcast;
static _Atomic uint64_t g_delivered;

static void done_progress(char *buf, size_t len)
{
    snprintf(buf, len, "%zu tasks finished, %" PRIu64 " values delivered", atomic_load(&g_received),
             atomic_load(&g_delivered));
}

static mp_poll mutex_task_poll(mp_task *t, mp_context *cx)
{
    syncer *y = mp_container_of(t, syncer, s.task);
    while (y->left > 0) {
        if (mp_mutex_lock_poll(&g_mutex, &y->w, cx) == MP_PENDING)
            return MP_PENDING;
        g_counter++;
        mp_mutex_unlock(&g_mutex);
        y->left--;
    }
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable mutex_task_vt = {mutex_task_poll, NULL, slot_release};

static mp_poll sem_task_poll(mp_task *t, mp_context *cx)
{
    syncer *y = mp_container_of(t, syncer, s.task);
    while (y->left > 0) {
        int err;
        if (mp_semaphore_acquire_poll(&g_sem, &y->w, 1, cx, &err) == MP_PENDING)
            return MP_PENDING;
        if (err != 0)
            fail("mp_semaphore_acquire_poll: %d", err);
        mp_semaphore_release(&g_sem, 1);
        y->left--;
    }
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable sem_task_vt = {sem_task_poll, NULL, slot_release};

static mp_poll mpmc_task_poll(mp_task *t, mp_context *cx)
{
    syncer *y = mp_container_of(t, syncer, s.task);
    int err;
    if (y->producer) {
        while (y->left > 0) {
            if (mp_mpmc_send_poll(&g_mpmc, &y->w, (void *)(uintptr_t)y->left, cx, &err) ==
                MP_PENDING)
                return MP_PENDING;
            if (err != 0)
                fail("mp_mpmc_send_poll: %d", err);
            y->left--;
        }
        if (atomic_fetch_sub_explicit(&g_producers_left, 1, memory_order_relaxed) == 1)
            mp_mpmc_close(&g_mpmc);
    } else {
        for (;;) {
            void *v;
            if (mp_mpmc_recv_poll(&g_mpmc, &y->w, cx, &v, &err) == MP_PENDING)
                return MP_PENDING;
            if (err == -EPIPE)
                break;
            atomic_fetch_add_explicit(&g_delivered, 1, memory_order_relaxed);
        }
    }
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable mpmc_task_vt = {mpmc_task_poll, NULL, slot_release};

static mp_poll bcast_task_poll(mp_task *t, mp_context *cx)
{
    syncer *y = mp_container_of(t, syncer, s.task);
    if (y->producer) {
        for (uint64_t v = 0; v < BCAST_N; v++)
            if (mp_broadcast_send(&g_bcast, &v) != 0)
                fail("mp_broadcast_send");
        mp_broadcast_close(&g_bcast);
    } else {
        for (;;) {
            uint64_t v, missed;
            int err;
            if (mp_broadcast_recv_poll(&g_bcast, &y->brx, cx, &v, &missed, &err) == MP_PENDING)
                return MP_PENDING;
            if (err == -EPIPE)
                break;
            if (err != 0)
                fail("mp_broadcast_recv_poll: %d (the ring is larger than a round)", err);
            atomic_fetch_add_explicit(&g_delivered, 1, memory_order_relaxed);
        }
    }
    done_send(&g_done);
    return MP_READY;
}

static const mp_task_vtable bcast_task_vt = {bcast_task_poll, NULL, slot_release};

static syncer *syncer_get(const mp_task_vtable *vt, int left, bool producer)
{
    syncer *y = slot_get(&g_pool, vt);
    y->left = left;
    y->producer = producer;
    mp_waiter_init(&y->w);
    return y;
}

static uint64_t wait_done(uint64_t t0, int n)
{
    set_phase("waiting for every task's signal");
    for (int i = 0; i < n; i++) {
        done_recv(&g_done);
        atomic_store_explicit(&g_received, (size_t)i + 1, memory_order_relaxed);
    }
    return now_ns() - t0;
}

static uint64_t mutex_contention_round(void)
{
    pool_reclaim(&g_pool);
    atomic_store(&g_received, 0);
    mp_mutex_init(&g_mutex);
    g_counter = 0;
    set_phase("spawning the lockers from the main thread");
    uint64_t t0 = now_ns();
    for (int i = 0; i < SYNC_TASKS; i++)
        spawn_or_fail(&syncer_get(&mutex_task_vt, SYNC_ITERS, false)->s.task, false);
    uint64_t ns = wait_done(t0, SYNC_TASKS);
    if (g_counter != (uint64_t)SYNC_TASKS * SYNC_ITERS)
        fail("mutex_contention: counter %" PRIu64, g_counter);
    return ns;
}

static uint64_t semaphore_round(void)
{
    pool_reclaim(&g_pool);
    atomic_store(&g_received, 0);
    if (mp_semaphore_init(&g_sem, SEM_PERMITS) != 0)
        fail("mp_semaphore_init");
    set_phase("spawning the acquirers from the main thread");
    uint64_t t0 = now_ns();
    for (int i = 0; i < SYNC_TASKS; i++)
        spawn_or_fail(&syncer_get(&sem_task_vt, SYNC_ITERS, false)->s.task, false);
    uint64_t ns = wait_done(t0, SYNC_TASKS);
    if (mp_semaphore_available(&g_sem) != SEM_PERMITS)
        fail("semaphore: %" PRIu64 " permits at the end", mp_semaphore_available(&g_sem));
    return ns;
}

static uint64_t mpmc_round(void)
{
    pool_reclaim(&g_pool);
    atomic_store(&g_received, 0);
    atomic_store(&g_delivered, 0);
    if (mp_mpmc_init(&g_mpmc, MPMC_CAP) != 0)
        fail("mp_mpmc_init");
    atomic_store(&g_producers_left, MPMC_PRODUCERS);
    set_phase("spawning consumers and producers from the main thread");
    uint64_t t0 = now_ns();
    for (int i = 0; i < MPMC_CONSUMERS; i++)
        spawn_or_fail(&syncer_get(&mpmc_task_vt, 0, false)->s.task, false);
    for (int i = 0; i < MPMC_PRODUCERS; i++)
        spawn_or_fail(&syncer_get(&mpmc_task_vt, MPMC_PER, true)->s.task, false);
    uint64_t ns = wait_done(t0, MPMC_CONSUMERS + MPMC_PRODUCERS);
    if (atomic_load(&g_delivered) != (uint64_t)MPMC_PRODUCERS * MPMC_PER)
        fail("mpmc: %" PRIu64 " values received", atomic_load(&g_delivered));
    pool_reclaim(&g_pool); /* no task touches the channel any more */
    mp_mpmc_destroy(&g_mpmc);
    return ns;
}

static uint64_t broadcast_fanout_round(void)
{
    pool_reclaim(&g_pool);
    atomic_store(&g_received, 0);
    atomic_store(&g_delivered, 0);
    if (mp_broadcast_init(&g_bcast, BCAST_CAP, sizeof(uint64_t)) != 0)
        fail("mp_broadcast_init");
    set_phase("spawning the receivers and the sender from the main thread");
    uint64_t t0 = now_ns();
    for (int i = 0; i < BCAST_RECEIVERS; i++) {
        syncer *y = syncer_get(&bcast_task_vt, 0, false);
        mp_broadcast_subscribe(&g_bcast, &y->brx);
        spawn_or_fail(&y->s.task, false);
    }
    spawn_or_fail(&syncer_get(&bcast_task_vt, 0, true)->s.task, false);
    uint64_t ns = wait_done(t0, BCAST_RECEIVERS + 1);
    if (atomic_load(&g_delivered) != (uint64_t)BCAST_RECEIVERS * BCAST_N)
        fail("broadcast_fanout: %" PRIu64 " deliveries", atomic_load(&g_delivered));
    pool_reclaim(&g_pool);
    mp_broadcast_destroy(&g_bcast);
    return ns;
}

/* ---- driver ---- */

typedef struct workload {
    const char *name;
    round_fn round;
    size_t ops;
    size_t size, cap;   /* g_pool */
    bool recycle;       /* g_pool: released by the spawning thread, then referred to by none */
    size_t size2, cap2; /* g_pool2 */
    void (*progress)(char *buf, size_t len);
} workload;

static const workload workloads[] = {
    /* Released by other workers, mostly: a slot reused here would move its cache line between
     * cores at every spawn, where malloc's per-thread caches keep each thread's chunks apart. */
    {"spawn_many_local", spawn_many_local_round, NUM_SPAWN, sizeof(slot), NUM_SPAWN, false, 0, 0,
     rem_progress},
    {"spawn_many_remote_idle", spawn_many_remote_idle_round, NUM_SPAWN, sizeof(slot), NUM_SPAWN,
     false, 0, 0, joined_progress},
    {"yield_many", yield_many_round, (size_t)YIELD_TASKS *NUM_YIELD, sizeof(yielder), YIELD_TASKS,
     false, 0, 0, received_progress},
    /* A pong uses its ping's oneshots: a ping is not reused within a round. */
    {"ping_pong", ping_pong_round, NUM_PINGS, sizeof(ping), NUM_PINGS, false, sizeof(pong),
     NUM_PINGS, ping_progress},
    {"chained_spawn", chained_spawn_round, CHAIN, sizeof(chain_link), CHAIN, true, 0, 0,
     chain_progress},
    {"spawn_join_worker", spawn_join_worker_round, NUM_JOIN, sizeof(slot), NUM_JOIN, true, 0, 0,
     joined_progress},
    {"spawn_join_outside", spawn_join_outside_round, NUM_JOIN, sizeof(slot), NUM_JOIN, false, 0, 0,
     joined_progress},
    {"mutex_contention", mutex_contention_round, (size_t)SYNC_TASKS *SYNC_ITERS, sizeof(syncer),
     SYNC_TASKS, false, 0, 0, done_progress},
    {"semaphore", semaphore_round, (size_t)SYNC_TASKS *SYNC_ITERS, sizeof(syncer), SYNC_TASKS,
     false, 0, 0, done_progress},
    {"mpmc", mpmc_round, (size_t)MPMC_PRODUCERS *MPMC_PER, sizeof(syncer),
     MPMC_PRODUCERS + MPMC_CONSUMERS, false, 0, 0, done_progress},
    {"broadcast_fanout", broadcast_fanout_round, (size_t)BCAST_RECEIVERS *BCAST_N, sizeof(syncer),
     BCAST_RECEIVERS + 1, false, 0, 0, done_progress},
};

static void usage(void)
{
    fprintf(stderr, "usage: magpie-bench --workers N --rounds R [--warmup K] [--only NAME] "
                    "[--alloc] [--no-help] [--stats]\n");
    exit(2);
}

static int parse_num(const char *s)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || *end || v < 0 || v > 1000000)
        usage();
    return (int)v;
}

int main(int argc, char **argv)
{
    int workers = 2, rounds = 20, warmup = 3;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workers"))
            workers = parse_num(argv[++i]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = parse_num(argv[++i]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = parse_num(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--alloc"))
            g_alloc = true;
        else if (!strcmp(argv[i], "--no-help"))
            g_no_help = true;
        else if (!strcmp(argv[i], "--stats"))
            g_verbose = true;
        else
            usage();
    }
    if (workers == 0 || rounds == 0)
        usage();
    const char *to = getenv("MAGPIE_BENCH_TIMEOUT");
    if (to && atoi(to) > 0)
        g_timeout_ns = (uint64_t)atoi(to) * 1000000000u;

    size_t n = sizeof workloads / sizeof workloads[0];
    bool found = false;
    for (size_t i = 0; i < n; i++)
        found |= !only || !strcmp(only, workloads[i].name);
    if (!found) {
        fprintf(stderr, "magpie-bench: unknown workload %s\n", only);
        return 2;
    }

    int crash_signals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        signal(crash_signals[i], on_crash);

    pthread_t wd;
    if (pthread_create(&wd, NULL, watchdog, NULL) != 0) {
        fprintf(stderr, "magpie-bench: cannot start the watchdog thread\n");
        return 1;
    }
    pthread_detach(wd);

    for (size_t i = 0; i < n; i++) {
        const workload *w = &workloads[i];
        if (only && strcmp(only, w->name))
            continue;
        g_workload = w->name;
        g_progress = w->progress;

        mp_config cfg;
        mp_config_init(&cfg);
        cfg.workers = (unsigned)workers;
        int rc = mp_runtime_new(&g_rt, &cfg);
        if (rc != 0)
            fail("mp_runtime_new: %d (%s)", rc, strerror(-rc));
        pool_init(&g_pool, w->size, w->cap);
        g_pool.recycle = w->recycle;
        pool_init(&g_pool2, w->size2 ? w->size2 : sizeof(slot), w->cap2 ? w->cap2 : 1);
        pool_init(&g_roots, sizeof(root), 1);

        double total = measure(w->round, warmup, rounds);
        if (g_verbose) {
            fprintf(stderr, "%s: counters after %d rounds:\n", w->name, warmup + rounds);
            print_stats(stderr);
            for (int k = 0; k < workers; k++) {
                mp_worker_stats ws;
                if (mp_runtime_worker_stats(g_rt, (unsigned)k, &ws) == 0)
                    fprintf(stderr,
                            "  worker %d: polled %" PRIu64 " spawned %" PRIu64 " stolen %" PRIu64
                            " parks %" PRIu64 " lifo_hits %" PRIu64 "\n",
                            k, ws.polled, ws.spawned, ws.stolen, ws.parks, ws.lifo_hits);
            }
        }

        /* Untimed: every task of the last round must be released before the pools go. */
        atomic_store(&g_deadline, now_ns() + g_timeout_ns);
        pool_free(&g_pool2);
        pool_free(&g_pool);
        pool_free(&g_roots);
        set_phase("shutting the runtime down");
        rc = mp_runtime_shutdown(g_rt);
        if (rc != 0)
            fail("mp_runtime_shutdown: %d (%s)", rc, strerror(-rc));
        mp_runtime_free(g_rt);
        g_rt = NULL;
        atomic_store(&g_deadline, 0);

        printf("%s %.1f %.0f\n", w->name, total / (double)w->ops, total);
        fflush(stdout);
    }
    return 0;
}
