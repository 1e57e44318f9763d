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
 * Errors are 0 or a negative errno, as in libuv, and a few codes of the library's own
 * (MP_EOF, MP_ERESOLVE_*, in magpie_io.h); mp_strerror() gives the message of each. Thread
 * safety: every function may be called from any thread unless its comment says otherwise.
 * Fields under a "private" comment are the library's: they are in the header only so that the
 * caller can embed the struct.
 */
#ifndef MAGPIE_CORE_H
#define MAGPIE_CORE_H

#include <errno.h> /* the E* codes the functions return, negated */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MP_VERSION_MAJOR 0
#define MP_VERSION_MINOR 4
#define MP_VERSION_PATCH 0

/* Marks a declaration kept only for compatibility: a warning where the compiler can give one. */
#if defined(__GNUC__) || defined(__clang__)
#define MP_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define MP_DEPRECATED(msg)
#endif

#define mp_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

typedef struct mp_runtime mp_runtime;
typedef struct mp_task mp_task;
typedef struct mp_context mp_context;

typedef enum mp_poll { MP_READY = 0, MP_PENDING = 1 } mp_poll;

/* The message of a code any libmagpie function returns or reports: a negative errno (the
 * system's text, as strerror(3) gives it), MP_EOF ("end of stream") and the MP_ERESOLVE_*
 * codes of magpie_io.h (texts of their own), and libuv's codes that are not errnos (its
 * UV_EAI_*, UV_ECHARSET, UV_EFTYPE: libuv's text). 0 gives "success", any other code
 * "unknown error". The string is static (never freed); any thread. */
const char *mp_strerror(int err);

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
     * mp_oneshot_close_rx(), the cancel_wait of each mp_waiter it left queued (semaphore,
     * mutex, rwlock, MPMC, barrier, watch, broadcast, cancellation token; these also give
     * back a lock or permits granted to it), unlock what it holds, mp_task_group_cancel_wait()
     * or mp_task_group_destroy() for its groups, mp_detach() the tasks it was joining, and
     * drop the clones it stored itself. */
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
    int32_t result;   /* 0, or -ECANCELED */
    const char *name; /* mp_task_set_name(), for the dump and slow-poll reports */
    /* Written by whoever polls it, read by mp_runtime_dump(): polls so far, whether a slow
     * poll was reported, when its last poll ended (monotonic ns, about: a worker's tick). */
    _Atomic uint32_t polls;
    _Atomic uint32_t slow_reported;
    _Atomic uint64_t last_poll_ns;
};

/* Prepare an embedded task. vt must outlive the task. */
void mp_task_init(mp_task *task, const mp_task_vtable *vt);
/* An optional name for the task, shown by mp_runtime_dump() and in slow-poll reports. name
 * must outlive the task (a string literal, say); NULL for none. Before the spawn, or from the
 * task's own poll. */
void mp_task_set_name(mp_task *task, const char *name);
const char *mp_task_name(const mp_task *task);

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
 * the task's own fields (its output) may be read, and nothing of the task runs any more.
 *
 * Shutdown: a join on a worker stops helping and cancels the task as shutdown would, then
 * waits for it. It returns 0 when the task completed all the same (a blocking job already
 * running is let finish; a poll running elsewhere returned MP_READY), -ECANCELED when its
 * cancel callback ran instead (a job that never started, a task that was waiting); never
 * while the task's poll or job still runs. mp_runtime_shutdown() waits for that worker, so a
 * worker joining a long job holds it up past drain_timeout_ms.
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
/* A task that awaited task with mp_join_poll() gives up that wait but keeps the join handle
 * (its timeout fired, a select's other arm won): the waker it left is withdrawn, and a later
 * mp_join_poll(), mp_join() or mp_detach() goes on from there. Returns true when the task had
 * completed meanwhile (the join handle is still to be given up: mp_join() or mp_join_poll()
 * returns its result at once), false otherwise. The joiner's call. */
bool mp_join_cancel_wait(mp_task *task);
/* Cancel a task that has not completed: it will not be polled again (a running poll is let
 * finish), its cancel callback runs and its joiner sees -ECANCELED. If the poll that was
 * running when the cancel came returns MP_READY, the task completed: no cancel callback, and
 * its joiner sees 0. No-op once complete. Any thread may call it while it holds something
 * that keeps the task alive: the join handle, a waker of the task, or from the task's own
 * poll; a detached task with no waker held can be gone at any moment. */
void mp_task_cancel(mp_task *task);
/* Completed or cancelled (the join result tells which). */
bool mp_task_is_complete(const mp_task *task);

/* Deadlines: one way to bound any wait in time (libuv and Tokio users: this is
 * tokio::time::timeout, and uv_timer plus uv_cancel, in one place).
 *
 * Times are milliseconds of the monotonic clock, mp_now_ms(); a deadline is a time, not a
 * duration (mp_now_ms() + 250), so a loop that waits again after a spurious wake-up or a
 * partial read keeps the same one. A wait that times out reports -ETIMEDOUT.
 *
 * Every wait of the library is a poll that leaves a waker with its primitive, and each has a
 * call that withdraws that waker and gives back whatever the primitive handed to it meanwhile
 * (the cancels listed in mp_task_vtable.cancel). An mp_wait names the two, so that one helper
 * can bound any of them:
 *   - in a task, mp_timeout_poll() (magpie_io.h, it needs a timer) polls the wait and a timer,
 *     and when the deadline wins it calls the cancel: nothing stays registered;
 *   - on a plain thread, mp_wait_until() blocks on the wait with a deadline, and
 *     mp_join_until() / mp_block_on_until() bound the joins.
 * The race every one of them handles: the wait becomes ready (a value sent, a permit
 * granted, a lock handed over) just as the deadline passes. The cancel is called after the
 * deadline, under the primitive's own lock, and decides: what was handed to the wait is given
 * back (permits and locks go to the next waiter, a receiver's turn passes on), or, where it
 * cannot be (a rendezvous value already taken by the receiver), the cancel reports that the
 * wait completed and the helper reports success. No wake is lost and none arrives after the
 * helper returned: the waker is withdrawn under the lock its waker is woken under.
 *
 *     typedef struct recv_wait { mp_chan *c; void *value; int err; } recv_wait;
 *     static mp_poll recv_poll(void *arg, mp_context *cx)
 *     {
 *         recv_wait *r = arg;
 *         return mp_chan_recv_poll(r->c, cx, &r->value, &r->err);
 *     }
 *     static bool recv_cancel(void *arg)
 *     {
 *         mp_chan_cancel_recv(((recv_wait *)arg)->c);
 *         return false;                      (nothing was handed over)
 *     }
 *     ...
 *     recv_wait r = {.c = &chan};
 *     mp_wait w = {recv_poll, recv_cancel, &r};
 *     int rc = mp_wait_until(&w, mp_now_ms() + 100);   (a thread; in a task: mp_timeout_poll)
 *     if (rc == 0 && r.err == 0) ... r.value ...
 */
typedef struct mp_wait {
    /* Poll the wait once, as its primitive's *_poll does: MP_READY when it is over (its
     * result wherever arg says), MP_PENDING with the waker of cx registered. A poll that
     * returns MP_READY keeps no waker (every primitive's does so). */
    mp_poll (*poll)(void *arg, mp_context *cx);
    /* Give the wait up: withdraw the waker the last poll left and give back what the
     * primitive handed to the wait since. true: the wait had completed after all and could
     * not be undone (a rendezvous send whose value was taken, a joined task that completed):
     * its result is valid and the helper reports success. false: withdrawn. Called only
     * after a poll returned MP_PENDING. */
    bool (*cancel)(void *arg);
    void *arg;
} mp_wait;

/* The monotonic clock in milliseconds: the clock of every deadline. */
uint64_t mp_now_ms(void);

/* Plain threads (not a worker: -EDEADLK there, nothing polled): block on w until it is ready
 * or deadline_ms passes. 0: ready (or its cancel reported it complete), the result wherever
 * w->arg says. -ETIMEDOUT: the deadline passed first; w's cancel has run, nothing of the wait
 * stays registered and nothing was taken. The wait is polled once more at the deadline, so a
 * wait that became ready just before it is not reported as timed out. The waker the polls see
 * is the calling thread's: a poll that needs a task (mp_yield) has none. */
int mp_wait_until(const mp_wait *w, uint64_t deadline_ms);
/* mp_join() with a deadline, for plain threads. 0 or -ECANCELED as mp_join(), the join handle
 * given up. -ETIMEDOUT: deadline_ms passed first; the task goes on and the join handle is
 * still the caller's: join again, mp_task_cancel() then mp_join(), or mp_detach(). A task that
 * completes just as the deadline passes is joined (its result, not -ETIMEDOUT). Like mp_join()
 * it runs queued tasks inline while it waits, and checks the deadline between them. From a
 * worker it returns -EDEADLK at once (a worker must not block): await the task with
 * mp_join_poll() and mp_timeout_poll() there. */
int mp_join_until(mp_task *task, uint64_t deadline_ms);

/* Convenience: allocate and spawn a task that calls fn(arg) once. With out non-NULL the task
 * is joinable and *out is its handle, for mp_join / mp_join_poll / mp_detach; storage is freed
 * by the runtime. A task cancelled before it ran (shutdown) never calls fn and hands nothing
 * back: arg must not own anything that only fn would free (join it to know, -ECANCELED). */
int mp_spawn_fn(mp_runtime *rt, void (*fn)(void *arg), void *arg, mp_task **out);

/* Blocking work: run fn(arg) on a thread of the runtime's blocking pool, apart from the
 * workers, where it may block (disk I/O, getaddrinfo, a library that sleeps) without holding up
 * any task. Threads start on demand up to mp_config.blocking_threads and leave after
 * blocking_keep_alive_ms idle; jobs wait in FIFO order for a thread when all are busy. With
 * out non-NULL the job is joinable, *out its handle, as with mp_spawn_fn: a task awaits it
 * with mp_join_poll(), a plain thread (or a worker, helping meanwhile) with mp_join(); the
 * storage is the runtime's. mp_task_cancel() on a job that has not started means fn never runs
 * (the joiner sees -ECANCELED); one that runs is let finish. Shutdown: see
 * mp_runtime_shutdown(). Inside fn, mp_runtime_current() is NULL: the thread is no worker,
 * and may block on anything, mp_loop_call_wait() and mp_join() included.
 * Returns 0, -EINVAL (fn NULL), -ENOMEM, -ESHUTDOWN once the runtime is shutting down, or the
 * error of a thread start (-EAGAIN) when no pool thread exists to run it. Any thread. */
int mp_spawn_blocking(mp_runtime *rt, void (*fn)(void *arg), void *arg, mp_task **out);
/* The same without allocation: task is a freshly initialised task whose poll runs once, on a
 * blocking thread, and must return MP_READY (its context's waker is of no use there). Its
 * vtable's cancel runs instead if it is cancelled before it starts, and release as for any
 * task. joinable as mp_spawn_joinable(). Errors as mp_spawn_blocking(), and -EINVAL for a
 * task that is not fresh. */
int mp_spawn_blocking_task(mp_runtime *rt, mp_task *task, bool joinable);

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

/* A poll that ran longer than mp_config.slow_poll_us: the classic bug of a blocking call in a
 * task, which holds up every task queued behind it on its worker. */
typedef struct mp_slow_poll {
    mp_task *task;                                  /* valid for the length of the report only */
    const char *name;                               /* mp_task_set_name()'s, or NULL */
    mp_poll (*poll)(mp_task *task, mp_context *cx); /* the task's poll function */
    const char *symbol; /* its name if the dynamic symbol table has it (dladdr: link the
                           program with -rdynamic for static functions' neighbours), or NULL */
    const char *object; /* the file it is in (dladdr), or NULL */
    uint64_t duration_ns;
    int worker; /* the worker's index, or -1 for a poll run inline by a plain thread */
} mp_slow_poll;

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
    size_t stack_size; /* worker (and blocking thread) stack bytes; 0 = the system default */
    /* The blocking pool (mp_spawn_blocking): at most this many threads, started on demand;
     * 0 = 512. A thread idle for blocking_keep_alive_ms leaves; 0 = 10000 (Tokio's figures). */
    unsigned blocking_threads;
    unsigned blocking_keep_alive_ms;
    /* Slow polls: a poll longer than slow_poll_us microseconds (0: not watched, no clock read
     * per poll) is counted in the worker's slow_polls and reported once per task: to
     * on_slow_poll(report, slow_poll_arg) on the polling thread, right after the poll, or
     * with on_slow_poll NULL as one line on stderr. */
    unsigned slow_poll_us;
    void (*on_slow_poll)(const mp_slow_poll *report, void *arg);
    void *slow_poll_arg;
} mp_config;

void mp_config_init(mp_config *cfg);
/* Create a runtime. Worker threads start lazily, when work needs them. cfg may be NULL.
 * Sets SIGPIPE to SIG_IGN if it is SIG_DFL (writes to reset peers fail with EPIPE). */
int mp_runtime_new(mp_runtime **out, const mp_config *cfg);
/* Stop: refuse new spawns, cancel or drain per cfg.shutdown_mode, join the workers. When it
 * returns no task of rt is being polled or cancelled anywhere, plain threads' inline polls
 * included, and every task has completed or been cancelled. Blocking jobs: MP_SHUTDOWN_DRAIN
 * waits for queued and running ones as for tasks (up to drain_timeout_ms); then, in either
 * mode, jobs still queued are cancelled (fn never runs, the joiner sees -ECANCELED) and running
 * ones, which cannot be interrupted, are waited for up to drain_timeout_ms (0: without limit).
 * Returns 0; -ETIMEDOUT when blocking jobs still run after that wait (the runtime is shut down
 * all the same; they finish on their own, and mp_runtime_free() waits for them); -EDEADLK when
 * called from inside a poll of one of rt's tasks (on a worker, or inline in a plain thread's
 * mp_join); -EALREADY when another call shut it down (returned once that one has finished). */
int mp_runtime_shutdown(mp_runtime *rt);
/* Shut down if needed and free. Every waker of every task of rt must be gone by now: clones
 * kept by user code and plain threads, and those left in primitives (an armed mp_timer, a
 * channel's or notify's waiters, a oneshot's receiver), which the tasks' cancel callbacks
 * give back. A waker of a completed task may be woken or dropped until then. */
void mp_runtime_free(mp_runtime *rt);
/* Spawn a joinable task and join it. */
int mp_block_on(mp_runtime *rt, mp_task *task);
/* mp_block_on() with a deadline, for plain threads (tokio's block_on(timeout(..))): spawn
 * task and join it by deadline_ms. If the deadline passes first the task is cancelled (its
 * cancel callback withdraws what it waits on) and joined: -ETIMEDOUT, or 0 when it completed
 * all the same (its last poll returned MP_READY). Either way nothing of the task runs once it
 * returns. mp_spawn_joinable()'s errors, and -EDEADLK from a worker (nothing spawned). */
int mp_block_on_until(mp_runtime *rt, mp_task *task, uint64_t deadline_ms);
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
    X(joins_in_place, "Joins that ran their task from the joiner's LIFO slot and ended with it.")  \
    X(slow_polls, "Polls that ran longer than the slow-poll threshold (mp_config.slow_poll_us).")

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
    /* The blocking pool, a snapshot: threads alive, of them idle; jobs waiting for a thread
     * and running now; jobs queued, threads started and thread starts that failed, ever. */
    unsigned blocking_threads, blocking_idle, blocking_queued, blocking_running;
    uint64_t blocking_jobs, blocking_threads_started, blocking_spawn_failures;
} mp_stats;

/* Fills *out with a snapshot of the runtime's counters. Returns 0. (The pool's twin is
 * mp_pool_stats_get().) */
int mp_runtime_stats_get(mp_runtime *rt, mp_stats *out);
/* Deprecated: the old name of mp_runtime_stats_get(), kept for the programs that use it; it
 * will go in a release that breaks the ABI. */
MP_DEPRECATED("use mp_runtime_stats_get()")
int mp_runtime_stats(mp_runtime *rt, mp_stats *out);
/* A text dump of what the runtime is doing, as tokio-console shows it: each worker's state,
 * queue length and counters, the global queue, the blocking pool, and every live task that has
 * suspended at least once (tasks still in a queue before their first poll are counted, not
 * listed) with its name, state bits, polls and time since its last poll. Each line goes to
 * line(text, arg) without its newline; line NULL writes to stderr. Safe at any time from any
 * thread that is not inside line itself: the registry is copied under its locks a shard at a
 * time and written after, so workers are held up for a copy, not for the writing. Returns 0 or
 * -ENOMEM. */
int mp_runtime_dump(mp_runtime *rt, void (*line)(const char *text, void *arg), void *arg);
int mp_runtime_worker_stats(mp_runtime *rt, unsigned worker, mp_worker_stats *out);

/* Per-thread caches of memory blocks of one size, for what tasks take and give back at a high
 * rate (a request's state, an output buffer): each thread keeps up to keep blocks of each
 * cache for itself (MP_BLOCK_CACHE_KEEP at most), taken and given with no lock and no atomic
 * read-modify-write; past that, and for a process that has used up its MP_BLOCK_CACHES caches,
 * blocks go to free() and come from malloc(). A block taken on one thread may be given on
 * another. A thread's blocks are freed when it exits. Define a cache statically:
 *   static mp_block_cache req_cache = MP_BLOCK_CACHE_INIT(sizeof(struct req), 4); */
#define MP_BLOCK_CACHE_KEEP 32
#define MP_BLOCK_CACHES     16
typedef struct mp_block_cache {
    size_t size;   /* of every block */
    unsigned keep; /* blocks each thread keeps */
    /* private: the cache's number, 0 until its first use */
    _Atomic unsigned id_;
} mp_block_cache;
#define MP_BLOCK_CACHE_INIT(size, keep)                                                            \
    {                                                                                              \
        (size), (keep), 0                                                                          \
    }
/* A block of c->size bytes (uninitialised), or NULL when malloc fails. Any thread. */
void *mp_block_cache_take(mp_block_cache *c);
/* Give a block of c back (NULL is ignored). Any thread. */
void mp_block_cache_give(mp_block_cache *c, void *block);
/* Free the calling thread's cached blocks of every cache (after a crowd left, say). */
void mp_block_cache_trim(void);

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
/* The receiver stops waiting for now (a timeout): drops the waker mp_oneshot_poll() left; the
 * oneshot stays open and a later poll receives. The receiver's call. */
void mp_oneshot_cancel_recv(mp_oneshot *o);

/* Bounded multi-producer single-consumer channel of pointers. Values are any pointer,
 * NULL included. With capacity 0 it is a rendezvous channel: it holds no value, and a send
 * completes only when the receiver takes the value from the sender itself. */
typedef struct mp_chan_waiter {
    /* private: the channel's while queued */
    struct mp_chan_waiter *prev, *next;
    mp_waker waker;
    bool queued; /* guarded by the channel lock */
    bool taken;  /* rendezvous: the receiver took value; guarded by the channel lock */
    void *value; /* rendezvous: the value offered while queued */
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

/* Allocates the slot array once (none for capacity 0: a rendezvous channel). 0, -ENOMEM. */
int mp_chan_init(mp_chan *c, uint32_t capacity);
/* A sender's wait node starts zeroed: {0} or this. */
static inline void mp_chan_waiter_init(mp_chan_waiter *w)
{
    w->prev = w->next = NULL;
    w->waker = (mp_waker){0};
    w->queued = false;
    w->taken = false;
    w->value = NULL;
}
void mp_chan_destroy(mp_chan *c);
/* 0, -EAGAIN when full, -EPIPE when closed. A rendezvous channel is always full: its
 * try_send never sends (-EAGAIN, or -EPIPE once closed); send with mp_chan_send_poll() or
 * mp_chan_send_blocking(). */
int mp_chan_try_send(mp_chan *c, void *value);
/* Senders waiting for room. *w must stay put while PENDING; call mp_chan_cancel_send(c, w) if
 * the sender gives up. MP_READY with *err = 0 (sent) or -EPIPE (closed). On a rendezvous
 * channel the sender waits, queued with its value, until the receiver takes it (MP_READY, 0),
 * and the receiver is woken when a sender queues; a close ends the wait of every sender whose
 * value was not taken with -EPIPE. */
mp_poll mp_chan_send_poll(mp_chan *c, mp_chan_waiter *w, void *value, mp_context *cx, int *err);
/* The sender gives up (from its cancel callback): leaves the queue and drops its waker.
 * Returns true when the value was received after all: on a rendezvous channel the receiver
 * may have taken it between the sender's last poll and this call (then it is the receiver's);
 * false otherwise, and always on a channel with capacity. */
bool mp_chan_cancel_send(mp_chan *c, mp_chan_waiter *w);
int mp_chan_send_blocking(mp_chan *c, void *value);
/* 0, -EAGAIN when empty, -EPIPE when empty and closed. On a rendezvous channel a value is
 * there while a sender waits with it; once closed, values of senders still waiting are not
 * taken (their sends fail with -EPIPE). */
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

/* A wait node for the primitives below (mutex, semaphore, rwlock, MPMC channel, barrier,
 * watch, broadcast, cancellation token). The waiting side owns it: embed one per wait in the
 * task (or put it on a thread's stack), initialise it with mp_waiter_init(), and keep it in
 * place while a poll that took it returns MP_PENDING. A node waits on one primitive at a
 * time. A task that gives up a wait (its cancel callback, a timeout, a select that another
 * arm won) calls the primitive's cancel_wait for the node: that drops the waker the node
 * holds and gives back anything the primitive had already handed to it. After a wait
 * returned MP_READY, or after its cancel_wait, the node is idle again and may be reused. */
typedef struct mp_waiter {
    /* private: the primitive's while queued, guarded by its lock */
    struct mp_waiter *prev, *next;
    mp_waker waker;
    uint32_t state;
    uint32_t n; /* permits asked for (semaphore, mutex, rwlock) */
} mp_waiter;

/* A wait node starts idle: {0}, or this. */
static inline void mp_waiter_init(mp_waiter *w)
{
    w->prev = w->next = NULL;
    w->waker = (mp_waker){0};
    w->state = 0;
    w->n = 0;
}

/* Semaphore: a count of permits, taken n at a time, in strict FIFO order: a waiter is
 * granted its permits only once every waiter queued before it has been, so a large request at
 * the head is not starved by small ones behind it (they wait behind it too), and try_acquire
 * fails while anyone waits. Permits are granted to a waiting node by mp_semaphore_release()
 * itself; a node cancelled after it was granted (mp_semaphore_cancel_wait) gives them back,
 * so no permit is lost when a task gives up at the wrong moment. Closing fails every waiter
 * and every later acquire with -EPIPE; a waiter already granted keeps its permits; release
 * still works after close. */
#define MP_SEMAPHORE_MAX_PERMITS ((uint32_t)1 << 30)

typedef struct mp_semaphore {
    /* private */
    _Atomic uint32_t lock;
    bool closed;            /* guarded by lock */
    uint64_t avail;         /* guarded by lock */
    mp_waiter *head, *tail; /* guarded by lock */
} mp_semaphore;

/* 0, or -EINVAL when permits > MP_SEMAPHORE_MAX_PERMITS. */
int mp_semaphore_init(mp_semaphore *s, uint32_t permits);
/* Take n permits now: 0, -EAGAIN (too few free, or others wait first), -EPIPE (closed),
 * -EINVAL (n is 0 or above MP_SEMAPHORE_MAX_PERMITS). */
int mp_semaphore_try_acquire(mp_semaphore *s, uint32_t n);
/* From a task. MP_READY with *err = 0 (the n permits are the caller's), -EPIPE (closed) or
 * -EINVAL; MP_PENDING: *w is queued and the task will be woken. Poll again with the same w
 * and n until MP_READY, or call mp_semaphore_cancel_wait(s, w). */
mp_poll mp_semaphore_acquire_poll(mp_semaphore *s, mp_waiter *w, uint32_t n, mp_context *cx,
                                  int *err);
/* The waiter gives up (any thread; a task's cancel callback). Permits already granted to w
 * go back to the semaphore. No-op for an idle node. */
void mp_semaphore_cancel_wait(mp_semaphore *s, mp_waiter *w);
/* Plain threads only: 0, -EPIPE or -EINVAL. */
int mp_semaphore_acquire_blocking(mp_semaphore *s, uint32_t n);
/* Give n permits back (or add new ones), granting them to waiters in order. */
void mp_semaphore_release(mp_semaphore *s, uint32_t n);
/* Fail every waiter and every later acquire with -EPIPE. */
void mp_semaphore_close(mp_semaphore *s);
/* Free permits now (a snapshot). */
uint64_t mp_semaphore_available(mp_semaphore *s);

/* Mutex for tasks: a semaphore of one permit, so FIFO-fair and cancellation-safe the same
 * way: waiters get the lock in the order they queued, and a waiter that is cancelled after
 * the lock was handed to it passes it on. The lock belongs to no thread: a task may hold it
 * across polls (and workers), and any thread may unlock it. Lock and unlock are an acquire
 * and a release: what the holder wrote is seen by the next holder. */
typedef struct mp_mutex {
    /* private */
    mp_semaphore sem;
} mp_mutex;

void mp_mutex_init(mp_mutex *m);
bool mp_mutex_try_lock(mp_mutex *m);
/* MP_READY: locked. MP_PENDING: w queued, the task will be woken; poll again with the same
 * w, or call mp_mutex_cancel_wait(m, w) (which unlocks if the lock had been handed to w). */
mp_poll mp_mutex_lock_poll(mp_mutex *m, mp_waiter *w, mp_context *cx);
void mp_mutex_cancel_wait(mp_mutex *m, mp_waiter *w);
void mp_mutex_lock_blocking(mp_mutex *m); /* plain threads only */
/* Only by (or for) the holder: an unlock of a mutex that is not locked is not detected and
 * would let two holders in, as a semaphore released once too often hands out one permit too
 * many. */
void mp_mutex_unlock(mp_mutex *m);

/* Readers-writer lock, fair in FIFO phases (as Tokio's RwLock): requests are granted in the
 * order they queue, so a waiting writer holds back the readers that come after it (a stream
 * of readers cannot starve a writer) and the readers queued after a writer all get in together
 * once it unlocks. A semaphore of MP_RWLOCK_MAX_READERS permits: a reader takes one, a writer
 * all. */
#define MP_RWLOCK_MAX_READERS MP_SEMAPHORE_MAX_PERMITS

typedef struct mp_rwlock {
    /* private */
    mp_semaphore sem;
} mp_rwlock;

void mp_rwlock_init(mp_rwlock *l);
bool mp_rwlock_try_read(mp_rwlock *l);
bool mp_rwlock_try_write(mp_rwlock *l);
/* As mp_mutex_lock_poll(); give up with mp_rwlock_cancel_wait(), which releases what had been
 * granted to w. */
mp_poll mp_rwlock_read_poll(mp_rwlock *l, mp_waiter *w, mp_context *cx);
mp_poll mp_rwlock_write_poll(mp_rwlock *l, mp_waiter *w, mp_context *cx);
void mp_rwlock_cancel_wait(mp_rwlock *l, mp_waiter *w);
void mp_rwlock_read_blocking(mp_rwlock *l); /* plain threads only */
void mp_rwlock_write_blocking(mp_rwlock *l);
void mp_rwlock_read_unlock(mp_rwlock *l);
void mp_rwlock_write_unlock(mp_rwlock *l);

/* Bounded multi-producer multi-consumer channel of pointers (NULL included), with
 * mp_chan's close and cancel contract. Senders and receivers are each served in FIFO order:
 * try_send fails while senders wait, try_recv while receivers wait. Every value sent with 0
 * is received exactly once, or is still queued when the channel is destroyed. */
typedef struct mp_mpmc {
    /* private */
    _Atomic uint32_t lock;
    uint32_t cap, head, len; /* guarded by lock */
    bool closed;             /* guarded by lock */
    void **slots;
    mp_waiter *tx_head, *tx_tail; /* senders waiting for room, guarded by lock */
    mp_waiter *rx_head, *rx_tail; /* receivers waiting for a value, guarded by lock */
} mp_mpmc;

/* Allocates the slot array once: 0, -EINVAL for capacity 0, -ENOMEM. */
int mp_mpmc_init(mp_mpmc *q, uint32_t capacity);
/* No waiter may be queued any more. Values still queued are dropped (they are pointers). */
void mp_mpmc_destroy(mp_mpmc *q);
/* 0, -EAGAIN when full (or senders wait), -EPIPE when closed. */
int mp_mpmc_try_send(mp_mpmc *q, void *value);
/* MP_READY with *err = 0 (sent) or -EPIPE (closed, not sent). MP_PENDING: w queued; poll again
 * with the same w and value, or call mp_mpmc_cancel_send(q, w). */
mp_poll mp_mpmc_send_poll(mp_mpmc *q, mp_waiter *w, void *value, mp_context *cx, int *err);
void mp_mpmc_cancel_send(mp_mpmc *q, mp_waiter *w);
int mp_mpmc_send_blocking(mp_mpmc *q, void *value); /* plain threads only */
/* 0, -EAGAIN when empty (or receivers wait), -EPIPE when empty and closed. */
int mp_mpmc_try_recv(mp_mpmc *q, void **value);
/* MP_READY with *err = 0 and *value, or -EPIPE (closed and drained). MP_PENDING: w queued;
 * poll again with the same w, or call mp_mpmc_cancel_recv(q, w), which passes its turn on. */
mp_poll mp_mpmc_recv_poll(mp_mpmc *q, mp_waiter *w, mp_context *cx, void **value, int *err);
void mp_mpmc_cancel_recv(mp_mpmc *q, mp_waiter *w);
int mp_mpmc_recv_blocking(mp_mpmc *q, void **value); /* plain threads only */
/* Refuse further sends; wake everyone. Queued values can still be received. */
void mp_mpmc_close(mp_mpmc *q);

/* Barrier: n parties wait until all n have arrived, then all go on and the barrier is ready
 * for the next round. Exactly one party of each round is told it is the leader. A party that
 * gives up before its round completes (mp_barrier_cancel_wait) no longer counts as arrived. */
typedef struct mp_barrier {
    /* private */
    _Atomic uint32_t lock;
    uint32_t n, arrived;    /* guarded by lock */
    mp_waiter *head, *tail; /* guarded by lock */
} mp_barrier;

/* 0, or -EINVAL for n = 0. */
int mp_barrier_init(mp_barrier *b, uint32_t n);
/* MP_READY once the round is complete; *leader true for exactly one party of the round.
 * MP_PENDING: w queued; poll again with the same w, or mp_barrier_cancel_wait(b, w). */
mp_poll mp_barrier_wait_poll(mp_barrier *b, mp_waiter *w, mp_context *cx, bool *leader);
void mp_barrier_cancel_wait(mp_barrier *b, mp_waiter *w);
bool mp_barrier_wait_blocking(mp_barrier *b); /* plain threads only; true for the leader */

/* watch: one value of a fixed size (copied in and out), a version counted up by every send,
 * and any number of receivers each told when the version moved past the one they last saw.
 * A receiver sees the latest value, not every one: sends between two looks are merged. */
typedef struct mp_watch {
    /* private */
    _Atomic uint32_t lock;
    bool closed;      /* guarded by lock */
    uint64_t version; /* guarded by lock */
    size_t size;
    void *value;            /* guarded by lock */
    mp_waiter *head, *tail; /* guarded by lock */
} mp_watch;

typedef struct mp_watch_rx {
    /* private: the receiver's own */
    uint64_t seen;
    mp_waiter w;
} mp_watch_rx;

/* Allocates size bytes once and copies *initial into them (version 0). 0, -EINVAL for size 0,
 * -ENOMEM. */
int mp_watch_init(mp_watch *w, size_t size, const void *initial);
void mp_watch_destroy(mp_watch *w); /* no receiver may wait any more */
/* Store a new value, count the version up and wake every waiting receiver. 0, -EPIPE when
 * closed. */
int mp_watch_send(mp_watch *w, const void *value);
void mp_watch_close(mp_watch *w); /* wakes every receiver; the last value can still be read */
/* A new receiver that has seen the current version. */
void mp_watch_subscribe(mp_watch *w, mp_watch_rx *rx);
/* Copy the current value into *out (size bytes), mark it seen, return its version. */
uint64_t mp_watch_borrow(mp_watch *w, mp_watch_rx *rx, void *out);
/* MP_READY with *err = 0 when the version differs from the one rx saw last (borrow to read
 * it), or -EPIPE when closed with nothing new. MP_PENDING: the task will be woken; poll again,
 * or mp_watch_cancel_wait(w, rx). */
mp_poll mp_watch_changed_poll(mp_watch *w, mp_watch_rx *rx, mp_context *cx, int *err);
void mp_watch_cancel_wait(mp_watch *w, mp_watch_rx *rx);
int mp_watch_changed_blocking(mp_watch *w, mp_watch_rx *rx); /* plain threads only */

/* broadcast: a bounded ring of fixed-size values (copied); every receiver sees every value
 * sent after it subscribed, in order. Sending never waits: a full ring overwrites its oldest
 * value, and a receiver that had not read it yet learns it lagged (-EOVERFLOW with the number
 * it missed, as Tokio's Lagged) and goes on from the oldest value still in the ring. */
typedef struct mp_broadcast {
    /* private */
    _Atomic uint32_t lock;
    bool closed; /* guarded by lock */
    uint32_t cap;
    size_t size;
    unsigned char *ring;     /* cap values of size bytes, guarded by lock */
    uint64_t tail;           /* values ever sent, guarded by lock */
    mp_waiter *head, *wtail; /* receivers waiting, guarded by lock */
} mp_broadcast;

typedef struct mp_broadcast_rx {
    /* private: the receiver's own */
    uint64_t pos; /* the next value's sequence number */
    mp_waiter w;
} mp_broadcast_rx;

/* 0, -EINVAL (capacity or size 0), -ENOMEM. */
int mp_broadcast_init(mp_broadcast *b, uint32_t capacity, size_t size);
void mp_broadcast_destroy(mp_broadcast *b); /* no receiver may wait any more */
/* 0, or -EPIPE when closed. Wakes every waiting receiver. */
int mp_broadcast_send(mp_broadcast *b, const void *value);
void mp_broadcast_close(mp_broadcast *b); /* receivers drain what is left, then -EPIPE */
/* A new receiver: it will see the values sent from now on. */
void mp_broadcast_subscribe(mp_broadcast *b, mp_broadcast_rx *rx);
/* 0 and *out (size bytes); -EAGAIN when nothing new; -EPIPE when closed and read to the end;
 * -EOVERFLOW with *missed = how many values were overwritten before rx read them (rx now
 * stands at the oldest value kept: the next call returns it). */
int mp_broadcast_try_recv(mp_broadcast *b, mp_broadcast_rx *rx, void *out, uint64_t *missed);
/* MP_READY with *err as mp_broadcast_try_recv() returns it, never -EAGAIN. MP_PENDING: the
 * task will be woken; poll again, or mp_broadcast_cancel_wait(b, rx). */
mp_poll mp_broadcast_recv_poll(mp_broadcast *b, mp_broadcast_rx *rx, mp_context *cx, void *out,
                               uint64_t *missed, int *err);
void mp_broadcast_cancel_wait(mp_broadcast *b, mp_broadcast_rx *rx);
int mp_broadcast_recv_blocking(mp_broadcast *b, mp_broadcast_rx *rx, void *out,
                               uint64_t *missed); /* plain threads only */

/* Cancellation token: a flag set once (mp_cancel_token_cancel), that tasks poll for and
 * threads wait on. A child token is cancelled with its parent (and its parent's parent);
 * cancelling a child leaves the parent alone. */
typedef struct mp_cancel_token {
    /* private */
    _Atomic uint32_t lock;
    _Atomic bool cancelled;                         /* set under lock, never unset */
    struct mp_cancel_token *parent;                 /* immutable after init */
    struct mp_cancel_token *children, *prev, *next; /* parent's lock guards prev/next */
    mp_waiter *head, *tail;                         /* guarded by lock */
} mp_cancel_token;

void mp_cancel_token_init(mp_cancel_token *t);
/* A child of parent; starts cancelled if parent is. parent must outlive it. */
void mp_cancel_token_init_child(mp_cancel_token *child, mp_cancel_token *parent);
/* Unlink from the parent. 0, or -EBUSY (nothing done) while it has children or waiters. */
int mp_cancel_token_destroy(mp_cancel_token *t);
/* Cancel t and every descendant, waking their waiters. Idempotent. */
void mp_cancel_token_cancel(mp_cancel_token *t);
bool mp_cancel_token_is_cancelled(const mp_cancel_token *t);
/* MP_READY once cancelled. MP_PENDING: w queued; poll again, or
 * mp_cancel_token_cancel_wait(t, w). */
mp_poll mp_cancel_token_poll(mp_cancel_token *t, mp_waiter *w, mp_context *cx);
void mp_cancel_token_cancel_wait(mp_cancel_token *t, mp_waiter *w);
void mp_cancel_token_wait_blocking(mp_cancel_token *t); /* plain threads only */

/* Task group (Tokio's JoinSet): joinable tasks spawned into a group, joined in the order they
 * finish.
 *
 * A member's struct embeds an mp_group_task where a plain task embeds an mp_task (the group
 * links its members through it, so a group spawns and joins without allocating):
 *
 *     typedef struct job { mp_group_task gt; int in, out; } job;
 *
 *     static mp_poll job_poll(mp_task *t, mp_context *cx)     (t is &j->gt.task)
 *     {
 *         job *j = mp_container_of(t, job, gt.task);
 *         ...
 *     }
 *
 *     mp_task_init(&j->gt.task, &job_vt);
 *     mp_task_group_spawn(&g, &j->gt);
 *     ...
 *     mp_group_task *done;                                     (a finished member)
 *     mp_task_group_join_next(&g, &done, &result);
 *     job *j = mp_container_of(done, job, gt);
 *
 * The vtable's callbacks receive &gt.task; mp_task_group_join_next() gives back &gt. A member
 * is the group's from its spawn until it is joined (or the group destroyed): its memory may
 * be freed after the join, or in its release callback. The group has one owner at a time, a task or
 * a thread: spawn, join, cancel_all and destroy are not called concurrently with each other
 * (members finishing on other threads meanwhile is what the group is for). Destroying the group
 * cancels the members still running and gives up their join handles: their cancel and release
 * callbacks still run, on the runtime, as for detached tasks; the group's memory is not touched
 * after mp_task_group_destroy() returns. */
typedef struct mp_task_group mp_task_group;

typedef struct mp_group_task {
    mp_task task; /* mp_task_init() it before mp_task_group_spawn() */
    /* private */
    struct mp_group_task *prev, *next; /* guarded by the group's lock */
    _Atomic uint32_t lock;             /* guards group against the group going away */
    mp_task_group *group;
    uint32_t state; /* guarded by the group's lock */
} mp_group_task;

struct mp_task_group {
    /* private */
    _Atomic uint32_t lock;
    mp_runtime *rt;
    mp_group_task *run_head, *run_tail;   /* members still running, guarded by lock */
    mp_group_task *done_head, *done_tail; /* members finished, not joined, guarded by lock */
    size_t len;                           /* both lists, guarded by lock */
    mp_waker joiner;                      /* guarded by lock */
};

void mp_task_group_init(mp_task_group *g, mp_runtime *rt);
/* Spawn t into the group. 0, or mp_spawn_joinable()'s error (t is still the caller's). */
int mp_task_group_spawn(mp_task_group *g, mp_group_task *t);
/* Members not joined yet (running or finished). */
size_t mp_task_group_len(mp_task_group *g);
/* MP_READY with *out = a finished member, joined (its output may be read; its release
 * callback may run from now on), *result 0 or -ECANCELED; or *out = NULL when the group is
 * empty. MP_PENDING: the task will be woken when a member finishes; poll again, or call
 * mp_task_group_cancel_wait(g) if the joiner gives up. */
mp_poll mp_task_group_join_next_poll(mp_task_group *g, mp_context *cx, mp_group_task **out,
                                     int *result);
void mp_task_group_cancel_wait(mp_task_group *g);
/* Plain threads only: 0 with *out and *result, or -ENOENT when the group is empty. */
int mp_task_group_join_next(mp_task_group *g, mp_group_task **out, int *result);
/* Plain threads only: join every member; returns how many ended cancelled. */
size_t mp_task_group_join_all(mp_task_group *g);
/* Cancel every member still running (they will be joined with -ECANCELED, or 0 if they
 * completed first). */
void mp_task_group_cancel_all(mp_task_group *g);
/* Cancel what is left, give up every join handle, drop the joiner's waker. Any thread, no
 * wait; the group may be freed when it returns. */
void mp_task_group_destroy(mp_task_group *g);

/* select over pollable waits: each arm is a function that polls one wait (a lambda would be
 * nice; C has a function and an argument). mp_select_poll() polls the arms in order and
 * returns MP_READY with *which = the first that is ready; the task is then waiting on the
 * others still, and must cancel their waits (each primitive's cancel_wait) or poll them later.
 * Biased: earlier arms win ties. MP_PENDING: none ready; every arm has registered the task. */
typedef struct mp_select_arm {
    mp_poll (*poll)(void *arg, mp_context *cx);
    void *arg;
} mp_select_arm;

/* Poll arms[0..n) in order, as above: MP_READY with *which, or MP_PENDING. */
mp_poll mp_select_poll(const mp_select_arm *arms, size_t n, mp_context *cx, size_t *which);

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

/* Fills *out with a snapshot of the pool's counters. Returns 0. (mp_runtime_stats_get()'s
 * twin: mp_<object>_stats_get for both.) */
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
