/* magpie_core.h: libmagpie's tasks, wakers, runtime, sync primitives and fork-join pool.
 *
 * A task is a poll function plus an intrusive header (mp_task) embedded in the caller's own
 * struct, recovered with mp_container_of. Spawning an embedded task allocates nothing. poll()
 * returns MP_READY when the task is done or MP_PENDING when something holds its waker and will
 * wake it; a wake while the task runs makes it run again exactly once.
 *
 * This header needs only C11 and pthreads: it compiles with -std=c11 -pedantic and no feature
 * macros, so a program that uses the scheduler or the pool alone needs no libuv headers.
 * magpie_io.h adds the loop, timers and TCP streams; magpie.h includes both.
 *
 * Errors are 0 or a negative errno, as in libuv. Thread safety: every function may be called
 * from any thread unless its comment says otherwise. Fields under a "private" comment are the
 * library's: they are in the header only so that the caller can embed the struct.
 */
#ifndef MAGPIE_CORE_H
#define MAGPIE_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MP_VERSION_MAJOR 0
#define MP_VERSION_MINOR 1
#define MP_VERSION_PATCH 0

#define mp_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

typedef struct mp_runtime mp_runtime;
typedef struct mp_task mp_task;
typedef struct mp_context mp_context;

typedef enum mp_poll { MP_READY = 0, MP_PENDING = 1 } mp_poll;

/* Wakers: a handle that makes a task (or a blocked thread) runnable again. A waker obtained
 * from mp_context_waker() is borrowed for the duration of one poll; keep it with
 * mp_waker_clone() and give it back with mp_waker_wake() (consumes) or mp_waker_drop(). */
typedef struct mp_waker_vtable {
    void (*wake)(const void *data);        /* wake and release */
    void (*wake_by_ref)(const void *data); /* wake, keep */
    const void *(*clone)(const void *data);
    void (*drop)(const void *data);
} mp_waker_vtable;

typedef struct mp_waker {
    const mp_waker_vtable *vt; /* NULL: the empty waker */
    const void *data;
} mp_waker;

mp_waker mp_waker_clone(const mp_waker *w);
void mp_waker_wake(mp_waker *w); /* consumes *w, leaves it empty */
void mp_waker_wake_by_ref(const mp_waker *w);
void mp_waker_drop(mp_waker *w); /* leaves it empty; empty is a no-op */
bool mp_waker_will_wake(const mp_waker *a, const mp_waker *b);
static inline bool mp_waker_is_empty(const mp_waker *w)
{
    return w->vt == NULL;
}

/* Tasks. */
typedef struct mp_task_vtable {
    mp_poll (*poll)(mp_task *task, mp_context *cx);
    /* The task will never be polled again because it was cancelled (mp_task_cancel or
     * runtime shutdown): release what the task holds, as a Rust future's drop would. Runs
     * once, never concurrently with poll and never after a poll returned MP_READY.
     * Optional only for a task that never leaves its waker anywhere: every waker the task
     * left in a primitive keeps a reference, and the task is not released until it is given
     * back. So a task that can wait must give them back here: mp_timer_cancel() its timers,
     * mp_chan_cancel_send() / mp_chan_cancel_recv(), mp_notify_cancel(),
     * mp_oneshot_close_rx(), mp_detach() the tasks it was joining, and drop the clones it
     * stored itself. */
    void (*cancel)(mp_task *task);
    /* Optional. The last reference is gone: the runtime and every waker are done with the
     * header, so the embedding struct may be freed or reused. Runs exactly once, after the
     * task completed or was cancelled. */
    void (*release)(mp_task *task);
} mp_task_vtable;

/* The header, embedded in the caller's struct. */
struct mp_task {
    /* private: the runtime's; only its size is part of the interface */
    _Atomic uint64_t state;
    const mp_task_vtable *vt;
    mp_task *next;       /* run-queue link */
    mp_task *owned_prev; /* registry links, guarded by the registry shard's lock */
    mp_task *owned_next;
    mp_runtime *rt;
    mp_waker join_waker; /* see the JOIN_WAKER protocol in state.c */
    uint32_t shard;
    int32_t result; /* 0, or -ECANCELED */
};

/* Prepare an embedded task. vt must outlive the task. */
void mp_task_init(mp_task *task, const mp_task_vtable *vt);

/* Spawn a detached task: nobody will join it. Returns 0, -EINVAL if the task is not freshly
 * initialised, -ESHUTDOWN once the runtime is shutting down, or, from a thread that is not a
 * worker while no worker thread runs yet, the error of the thread start that failed (e.g.
 * -EAGAIN; the next spawn tries again). On an error the task never runs and is not released:
 * it is still the caller's. From a worker the task goes to that worker's LIFO slot; from any
 * other thread to the global queue. */
int mp_spawn(mp_runtime *rt, mp_task *task);
/* Spawn a task that must later be joined (mp_join, mp_join_poll) or detached (mp_detach). */
int mp_spawn_joinable(mp_runtime *rt, mp_task *task);
/* Spawn n tasks (detached) with one queue operation and one wake-up. Returns the number
 * spawned (n, or 0 when shutting down) or a negative errno. */
int mp_spawn_batch(mp_runtime *rt, mp_task *const *tasks, size_t n);

/* Wait for a joinable task and give up the join handle. Returns 0 when it completed, or
 * -ECANCELED. On a worker it runs other tasks meanwhile (help until complete). On any other
 * thread it runs tasks from the global queue when there are some and blocks otherwise, but
 * only in the outermost join: a task polled that way that joins in turn blocks, so a plain
 * thread's stack holds at most one task's poll whatever the joins nest to. After it returns
 * the task's own fields (its output) may be read.
 *
 * Stack: on a worker the tasks it helps with run on the joiner's stack, and a join inside one
 * of them nests again. The helper takes the oldest task of its queue, which may be a large
 * unrelated subtree, so nesting is bounded by the number of incomplete tasks, not by the
 * depth of the join tree. Recursive fork-join on workers wants mp_config.stack_size set for
 * it; mp_pool_join (whose deques pop newest first) nests only as deep as the join tree. */
int mp_join(mp_task *task);
/* Await a joinable task from another task. MP_READY: it completed, *result is 0 or
 * -ECANCELED, and the join handle is given up. MP_PENDING: the current task will be woken. */
mp_poll mp_join_poll(mp_task *task, mp_context *cx, int *result);
/* Give up the join handle without waiting. */
void mp_detach(mp_task *task);
/* Cancel a task that has not completed: it will not be polled again (a running poll is let
 * finish), its cancel callback runs and its joiner sees -ECANCELED. If the poll that was
 * running when the cancel came returns MP_READY, the task completed: no cancel callback, and
 * its joiner sees 0. No-op once complete. Any thread may call it while it holds something
 * that keeps the task alive: the join handle, a waker of the task, or from the task's own
 * poll; a detached task with no waker held can be gone at any moment. */
void mp_task_cancel(mp_task *task);
/* Completed or cancelled (the join result tells which). */
bool mp_task_is_complete(const mp_task *task);

/* Convenience: allocate and spawn a task that calls fn(arg) once. With out non-NULL the task
 * is joinable and *out is its handle, for mp_join / mp_join_poll / mp_detach; storage is freed
 * by the runtime. A task cancelled before it ran (shutdown) never calls fn and hands nothing
 * back: arg must not own anything that only fn would free (join it to know, -ECANCELED). */
int mp_spawn_fn(mp_runtime *rt, void (*fn)(void *arg), void *arg, mp_task **out);

/* Inside poll: */
const mp_waker *mp_context_waker(mp_context *cx);
mp_task *mp_context_task(mp_context *cx);
/* Let other tasks run: "return mp_yield(cx);" re-queues the task at the back of the queue. */
mp_poll mp_yield(mp_context *cx);

/* Runtime. */
typedef enum mp_shutdown_mode {
    MP_SHUTDOWN_CANCEL = 0, /* cancel every task that has not completed */
    MP_SHUTDOWN_DRAIN = 1,  /* run tasks to completion, up to drain_timeout_ms, then cancel */
} mp_shutdown_mode;

typedef struct mp_config {
    unsigned workers;          /* worker threads; 0 = online CPUs */
    unsigned max_workers;      /* cap on the CPU-derived count when workers = 0; 0 = none */
    bool disable_lifo;         /* spawn/wake from a worker goes to its ring, not its LIFO slot */
    bool disable_steal;        /* workers never steal from each other */
    unsigned global_interval;  /* polls between global-queue checks; 0 = adaptive (EWMA) */
    uint64_t global_target_ns; /* adaptive: latency target a global task may wait, 0 = default */
    mp_shutdown_mode shutdown_mode;
    /* MP_SHUTDOWN_DRAIN: how long to wait for every task to finish before cancelling the
     * rest. 0 = without limit: one task waiting for something that never comes (a timer far
     * away, a waker held by a thread that will not wake it) keeps shutdown waiting for ever. */
    unsigned drain_timeout_ms;
    size_t stack_size; /* worker stack bytes; 0 = the system default */
} mp_config;

void mp_config_init(mp_config *cfg);
/* Create a runtime. Worker threads start lazily, when work needs them. cfg may be NULL.
 * Sets SIGPIPE to SIG_IGN if it is SIG_DFL (writes to reset peers fail with EPIPE). */
int mp_runtime_new(mp_runtime **out, const mp_config *cfg);
/* Stop: refuse new spawns, cancel or drain per cfg.shutdown_mode, join the workers. When it
 * returns no task of rt is being polled or cancelled anywhere, plain threads' inline polls
 * included, and every task has completed or been cancelled. Returns 0; -EDEADLK when called
 * from inside a poll of one of rt's tasks (on a worker, or inline in a plain thread's
 * mp_join); -EALREADY when another call shut it down (returned once that one has finished). */
int mp_runtime_shutdown(mp_runtime *rt);
/* Shut down if needed and free. Every waker of every task of rt must be gone by now: clones
 * kept by user code and plain threads, and those left in primitives (an armed mp_timer, a
 * channel's or notify's waiters, a oneshot's receiver), which the tasks' cancel callbacks
 * give back. A waker of a completed task may be woken or dropped until then. */
void mp_runtime_free(mp_runtime *rt);
/* Spawn a joinable task and join it. */
int mp_block_on(mp_runtime *rt, mp_task *task);
/* The runtime whose task the calling thread is polling (a worker's, or a task a plain
 * thread runs inline in mp_join), or whose worker the calling thread is; else NULL. */
mp_runtime *mp_runtime_current(void);
unsigned mp_runtime_workers(const mp_runtime *rt);

/* Every per-worker counter, listed once: X(name, help) each, help being a one-line description
 * (a Prometheus HELP text, say). mp_worker_stats, the runtime's own counters and their sum are
 * generated from it; an exporter can walk it the same way. In mp_stats.total, spawned counts
 * spawns from any thread and completed counts completions anywhere. */
#define MP_WORKER_COUNTERS(X)                                                                      \
    X(spawned, "Tasks spawned.")                                                                   \
    X(completed, "Tasks completed or cancelled.")                                                  \
    X(polled, "Task polls.")                                                                       \
    X(stolen, "Tasks stolen from other workers.")                                                  \
    X(steals, "Steal operations.")                                                                 \
    X(parks, "Times the worker went to sleep.")                                                    \
    X(unparks, "Times the worker woke up.")                                                        \
    X(lifo_hits, "Tasks run from the LIFO slot.")                                                  \
    X(global_batches, "Batches taken from the global queue.")                                      \
    X(overflows, "Local ring overflows to the global queue.")                                      \
    X(budget_exhausted, "Ticks that used their whole poll budget.")                                \
    X(drives, "Times the worker slept in the I/O loop as its driver.")                             \
    X(io_polls, "Non-blocking runs of the I/O loop between ticks.")                                \
    X(helpers_woken, "I/O turns after which the driver woke a worker to share the backlog.")       \
    X(helpers_skipped, "I/O turns whose backlog the driver ran alone (shorter than a wake-up).")   \
    X(yields_deferred, "Yields whose requeue waited for the worker's next flush.")                 \
    X(deferred_flushes, "Flushes of deferred yields to the back of the ring.")                     \
    X(joins_in_place, "Joins that ran their task from the joiner's LIFO slot and ended with it.")

typedef struct mp_worker_stats {
#define MP_WORKER_STATS_FIELD(name, help) uint64_t name;
    MP_WORKER_COUNTERS(MP_WORKER_STATS_FIELD)
#undef MP_WORKER_STATS_FIELD
} mp_worker_stats;

typedef struct mp_stats {
    mp_worker_stats total;
    unsigned workers; /* configured */
    unsigned workers_started;
    unsigned spawn_failures;  /* worker threads that could not be created */
    uint64_t injected;        /* tasks pushed to the global queue */
    uint64_t live_tasks;      /* spawned and not yet complete (a snapshot) */
    uint64_t wake_latency_ns; /* recent time from unparking a worker to its running (EWMA) */
} mp_stats;

int mp_runtime_stats(mp_runtime *rt, mp_stats *out);
int mp_runtime_worker_stats(mp_runtime *rt, unsigned worker, mp_worker_stats *out);

/* Sync primitives for tasks. Waiters are intrusive: the waiting side owns the node, nothing
 * is allocated per wait. Each has a poll-style call for tasks and a blocking call for plain
 * threads (never call a blocking one from a worker). */

/* oneshot: one value (a pointer) from one sender to one receiver. */
typedef struct mp_oneshot {
    /* private */
    _Atomic uint32_t state;
    void *value;
    mp_waker rx_waker;
} mp_oneshot;

void mp_oneshot_init(mp_oneshot *o);
/* Returns 0, or -EPIPE if the receiver closed. Call at most once. */
int mp_oneshot_send(mp_oneshot *o, void *value);
/* MP_READY with *value and *err = 0, or *err = -EPIPE when the sender closed unsent. */
mp_poll mp_oneshot_poll(mp_oneshot *o, mp_context *cx, void **value, int *err);
int mp_oneshot_recv_blocking(mp_oneshot *o, void **value);
void mp_oneshot_close_tx(mp_oneshot *o); /* the sender will not send */
void mp_oneshot_close_rx(mp_oneshot *o); /* the receiver will not receive; drops its waker */

/* Bounded multi-producer single-consumer channel of pointers. Values are any pointer,
 * NULL included. */
typedef struct mp_chan_waiter {
    /* private: the channel's while queued */
    struct mp_chan_waiter *prev, *next;
    mp_waker waker;
    bool queued; /* guarded by the channel lock */
} mp_chan_waiter;

typedef struct mp_chan {
    /* private */
    _Atomic uint32_t lock;
    uint32_t cap, head, len;
    bool closed;
    void **slots;
    mp_waker rx_waker;
    mp_chan_waiter *tx_head, *tx_tail; /* senders waiting for room */
} mp_chan;

/* Allocates the slot array once. 0, -EINVAL for capacity 0 (a rendezvous channel is not
 * offered), -ENOMEM. */
int mp_chan_init(mp_chan *c, uint32_t capacity);
/* A sender's wait node starts zeroed: {0} or this. */
static inline void mp_chan_waiter_init(mp_chan_waiter *w)
{
    w->prev = w->next = NULL;
    w->waker = (mp_waker){0};
    w->queued = false;
}
void mp_chan_destroy(mp_chan *c);
/* 0, -EAGAIN when full, -EPIPE when closed. */
int mp_chan_try_send(mp_chan *c, void *value);
/* Senders waiting for room. *w must stay put while PENDING; call mp_chan_cancel_send(c, w) if
 * the sender gives up. MP_READY with *err = 0 (sent) or -EPIPE (closed). */
mp_poll mp_chan_send_poll(mp_chan *c, mp_chan_waiter *w, void *value, mp_context *cx, int *err);
void mp_chan_cancel_send(mp_chan *c, mp_chan_waiter *w);
int mp_chan_send_blocking(mp_chan *c, void *value);
/* 0, -EAGAIN when empty, -EPIPE when empty and closed. */
int mp_chan_try_recv(mp_chan *c, void **value);
mp_poll mp_chan_recv_poll(mp_chan *c, mp_context *cx, void **value, int *err);
/* The receiver gives up waiting (from its cancel callback): drops the waker it left. */
void mp_chan_cancel_recv(mp_chan *c);
int mp_chan_recv_blocking(mp_chan *c, void **value);
void mp_chan_close(mp_chan *c); /* wakes everyone; queued values can still be received */

/* notify: wake one or all waiters. A notify_one with nobody waiting is stored as one permit,
 * which the next wait takes at once; a notify_all wakes those waiting now and stores nothing
 * (as Tokio's notify_waiters). A plain thread that checks a condition and then calls
 * mp_notify_wait_blocking() misses a notify_all that comes in between, but not a notify_one:
 * signal such waiters with mp_notify_one. */
typedef struct mp_notify_waiter {
    /* private: the notify's while queued */
    struct mp_notify_waiter *prev, *next;
    mp_waker waker;
    uint32_t state; /* guarded by the notify lock */
} mp_notify_waiter;

typedef struct mp_notify {
    /* private */
    _Atomic uint32_t lock;
    bool permit;
    mp_notify_waiter *head, *tail;
} mp_notify;

void mp_notify_init(mp_notify *n);
void mp_notify_one(mp_notify *n);
void mp_notify_all(mp_notify *n);
/* Wait for a notification. Initialise *w with mp_notify_waiter_init() first; it must stay put
 * while PENDING; call mp_notify_cancel(n, w) if the waiter gives up. */
void mp_notify_waiter_init(mp_notify_waiter *w);
mp_poll mp_notify_poll(mp_notify *n, mp_notify_waiter *w, mp_context *cx);
void mp_notify_cancel(mp_notify *n, mp_notify_waiter *w);
void mp_notify_wait_blocking(mp_notify *n);

/* Fork-join pool, for CPU-bound parallel work beside the async runtime (Rayon beside Tokio).
 * A pool owns a fixed number of worker slots; threads start lazily when work arrives. Work
 * enters from outside through mp_pool_call(), whose caller works as one of the slots for the
 * length of the call (oneTBB's master thread; Rayon's caller only waits); inside a call,
 * mp_pool_join(), mp_pool_scope(), mp_pool_parallel_for(), mp_pool_parallel_reduce() and the sorts
 * split it across the workers by work stealing. Jobs live in the caller's stack frame (or, for
 * spawns, in storage the caller provides): nothing here allocates per job. The fork-join functions
 * use the pool of the worker thread that calls them; on any other thread they run sequentially,
 * with the same results. */

/* A fork-join pool. Opaque; created by mp_pool_new(), destroyed by mp_pool_free(). */
typedef struct mp_pool mp_pool;

/* A job body: runs with the argument it was given. */
typedef void (*mp_pool_fn)(void *arg);

/*
 * Pool configuration. Initialise with mp_pool_config_init(), then change what you need; a
 * zero field means "the default" everywhere.
 */
typedef struct mp_pool_config {
    /* Worker slots: how many threads work on the pool's jobs at once. One of them is the
     * caller slot, where the thread inside mp_pool_call() works; the others get threads,
     * started lazily as work arrives. So a pool of 4 starts at most 3 threads, and a pool of
     * 1 runs every call on its caller, one call at a time. 0: the number of online CPUs. */
    unsigned workers;
    /* Stack size of each worker thread in bytes. 0: the system default. Deep join recursion
     * may need more; the caller slot runs on the caller's own stack, so a pool whose work
     * needs this size must also set calls_on_workers. */
    size_t stack_size;
    /* Initial capacity of each worker's deque, in jobs; rounded up to a power of two.
     * 0: 256. The deque grows when full, so this only matters for tests and memory. */
    size_t deque_capacity;
    /* No caller slot: every slot gets a thread, and mp_pool_call() hands its fn to them and
     * blocks (Rayon's install). For work that needs stack_size, or a caller that must not
     * run pool jobs. false: the caller works in the caller slot. */
    bool calls_on_workers;
} mp_pool_config;

/* Counters a pool keeps about itself; a snapshot, each field read separately. The first
 * three are named as in mp_stats. */
typedef struct mp_pool_stats {
    unsigned workers;          /* worker slots: mp_pool_config.workers after defaults */
    unsigned workers_started;  /* worker threads running (they stop only in mp_pool_free);
                                  the caller slot is not one */
    unsigned spawn_failures;   /* thread starts that failed; those slots stay empty */
    int last_spawn_error;      /* negative errno of the last failed start, 0 if none */
    unsigned workers_sleeping; /* workers blocked in the sleep protocol right now */
    uint64_t stolen;           /* jobs taken from another worker's deque */
    uint64_t injected;         /* calls handed to the threads (the caller slot was taken) */
    uint64_t caller_calls;     /* calls that ran in the caller slot, on their caller */
    uint64_t sleeps;           /* times a worker blocked after its sleep rounds */
} mp_pool_stats;

/* Fills *cfg with the defaults (all zero). */
void mp_pool_config_init(mp_pool_config *cfg);

/*
 * Creates a pool. cfg may be NULL for the defaults. No thread starts here: threads start as
 * work is posted while every started worker is busy. Returns 0, -EINVAL (absurd
 * configuration) or -ENOMEM.
 */
int mp_pool_new(mp_pool **out, const mp_pool_config *cfg);

/*
 * Stops and joins every worker thread and frees the pool. No mp_pool_call() may be in flight
 * on this pool, and none may start. NULL is ignored.
 */
void mp_pool_free(mp_pool *pool);

/*
 * Runs fn(arg) in the pool and returns when it has returned. The calling thread takes the
 * caller slot and runs fn itself, as a worker: its joins are stolen by the pool's threads and
 * it steals theirs while it waits. Any number of threads may call at once: one holds the
 * caller slot, the others hand fn to the threads and block (or, when no thread can start,
 * wait for the slot). Called from a worker of this same pool (the caller slot included), runs
 * fn(arg) inline; from a worker of another pool, like any outside thread.
 * Returns 0. With calls_on_workers, fn always runs on a thread, and the call returns the
 * negative errno of the failed spawn (usually -EAGAIN) when the pool could not start a single
 * one; then fn did not run. Two pools of one slot each, called crosswise from each other's fn
 * on two threads, wait for each other's caller slot for ever, as two mutexes taken in opposite
 * orders would: give such pools a thread, or do not nest their calls.
 */
int mp_pool_call(mp_pool *pool, mp_pool_fn fn, void *arg);

/* Fills *out with a snapshot of the pool's counters. Returns 0. (mp_runtime_stats' twin; the
 * name mp_pool_stats is the type's.) */
int mp_pool_stats_get(mp_pool *pool, mp_pool_stats *out);

/* Index of the calling pool worker (0 .. mp_pool_stats.workers - 1; the caller slot is the
 * last), or -1 on any other thread. */
int mp_pool_worker_index(void);

/*
 * Runs a(arg_a) and b(arg_b), potentially in parallel, and returns when both have returned.
 * b is offered to other workers while the caller runs a; if nobody took it, the caller runs
 * it next. If a thief took it, the caller runs or steals other work until b is done.
 */
void mp_pool_join(mp_pool_fn a, void *arg_a, mp_pool_fn b, void *arg_b);

/* A scope in progress; passed to the scope body, valid only until mp_pool_scope returns. */
typedef struct mp_pool_scope_ctx mp_pool_scope_ctx;

/*
 * Storage for one spawned job, provided by the caller so that spawning allocates nothing.
 * It must stay valid, untouched, until the scope it was spawned into has returned.
 */
typedef struct mp_pool_task {
    void *opaque[6];
} mp_pool_task;

/* A scope body: may call mp_pool_spawn(scope, ...) any number of times. */
typedef void (*mp_pool_scope_fn)(mp_pool_scope_ctx *scope, void *arg);

/*
 * Runs body(scope, arg), then waits until every job spawned into the scope (by the body or
 * by spawned jobs, transitively) has finished. While waiting, the caller runs other work.
 */
void mp_pool_scope(mp_pool_scope_fn body, void *arg);

/*
 * Spawns fn(scope, arg) into scope, using *task as its storage; fn gets the scope so that it
 * may spawn more. Callable from the scope body or from any job of the scope.
 */
void mp_pool_spawn(mp_pool_scope_ctx *scope, mp_pool_task *task,
                   void (*fn)(mp_pool_scope_ctx *scope, void *arg), void *arg);

/* A loop body over the half-open index range [lo, hi). */
typedef void (*mp_pool_range_fn)(size_t lo, size_t hi, void *arg);

/*
 * Calls body on disjoint subranges covering [begin, end), in parallel. Ranges are split in
 * halves with mp_pool_join(): with a grain, down to at most grain indices; with grain 0, as
 * demand asks (Rayon's adaptive splitter, then splits of a running piece when a worker is
 * idle), and body sees pieces of about 1/16 of a split-off range at a time. Returns 0, or
 * -EINVAL if begin > end.
 */
int mp_pool_parallel_for(size_t begin, size_t end, size_t grain, mp_pool_range_fn body, void *arg);

/* The largest accumulator mp_pool_parallel_reduce() accepts, in bytes. */
#define MP_POOL_REDUCE_MAX_ACC 128

/* Folds [lo, hi) into *acc, which starts as a copy of the identity. */
typedef void (*mp_pool_fold_fn)(size_t lo, size_t hi, void *acc, void *arg);
/* Combines two adjacent results: *left = *left (+) *right, left covering lower indices. */
typedef void (*mp_pool_combine_fn)(void *left, const void *right, void *arg);

/*
 * Parallel reduce over [begin, end): splits like mp_pool_parallel_for(), folds each piece
 * into a copy of *identity (acc_size bytes), and combines neighbours in index order, so an
 * associative but non-commutative combine gives the sequential answer. The result is
 * written to *result. Returns 0, or -EINVAL (begin > end, acc_size 0 or larger than
 * MP_POOL_REDUCE_MAX_ACC).
 */
int mp_pool_parallel_reduce(size_t begin, size_t end, size_t grain, size_t acc_size,
                            const void *identity, mp_pool_fold_fn fold, mp_pool_combine_fn combine,
                            void *arg, void *result);

/*
 * Sorts n elements of size bytes at base in ascending order of cmp, in parallel (quicksort
 * whose halves are joined; not stable). Like qsort(3), elements of any size.
 */
void mp_pool_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* The same for plain integer arrays, with the comparison inlined. */
void mp_pool_sort_i32(int32_t *a, size_t n);
void mp_pool_sort_i64(int64_t *a, size_t n);
void mp_pool_sort_u32(uint32_t *a, size_t n);
void mp_pool_sort_u64(uint64_t *a, size_t n);

#ifdef __cplusplus
}
#endif
#endif
