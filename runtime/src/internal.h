/* internal.h: libmagpie's private declarations (mp__ prefix).
 *
 * Ownership of shared state is marked on every field: "owner only" (one worker thread reads
 * and writes it), "atomic" (any thread, through the named protocol), "guarded by X" (under a
 * lock), "immutable after start". Files (runtime/README.md's table says more):
 *   tasks:     state.c (the task state word and its transitions), task.c (wakers of tasks,
 *              spawn, run, join, mp_spawn_fn), waker.c (the waker handle, blocking a plain
 *              thread), dump.c (slow-poll reports, mp_runtime_dump)
 *   scheduler: queue.c (the per-worker ring), inject.c (global queue), owned.c (registry of
 *              live tasks, for shutdown), idle.c (searching/parked accounting), park.c (futex
 *              park word), worker.c (the loop), runtime.c (create, lazy spawn, shutdown,
 *              stats), blocking.c (the blocking pool)
 *   reactor:   reactor.c (the libuv loop, the driver role, commands for the loop), timer.c
 *              (timers for tasks, the uv_timer that drives them, the timer wheel)
 *   I/O:       io.c (the readiness every socket shares, mp__io_poll, close), tcp.c (TCP
 *              streams), listener.c (listening sockets), udp.c (UDP sockets), readbuf.c
 *              (the streams' read buffers), resolve.c (getaddrinfo on the blocking pool),
 *              file.c (file reads, opens and stats)
 *   memory:    tcache.c (what the per-thread caches share), blockcache.c (mp_block_cache)
 *   the rest:  error.c (mp_strerror), testhook.c (fault injection and probes for the suites:
 *              every test-only hook), list.h (the intrusive list, which magpied uses too),
 *              sync/ (the sync primitives, with waitq.h, their waiter list), pool/ (the
 *              fork-join pool, with its own pool_internal.h on top of this one).
 */
#ifndef MP_INTERNAL_H
#define MP_INTERNAL_H

#include "list.h"
#include "magpie.h"

#include <uv.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* 128 rather than 64: x86's adjacent-line prefetcher pulls lines in pairs, so two hot atomics
 * 64 bytes apart still false-share (Tokio pads to 128 on x86_64 for the same reason). */
#define MP__CACHE_LINE 128

#ifndef MP_QUEUE_CAPACITY
#define MP_QUEUE_CAPACITY 256
#endif
_Static_assert(MP_QUEUE_CAPACITY >= 4 && (MP_QUEUE_CAPACITY & (MP_QUEUE_CAPACITY - 1)) == 0,
               "MP_QUEUE_CAPACITY must be a power of two, at least 4");

#define MP__BUDGET           128 /* polls per tick */
#define MP__LIFO_MAX_STREAK  3   /* LIFO polls in a row before the slot is flushed */
#define MP__GLOBAL_BATCH_MIN 4
#define MP__GLOBAL_BATCH_MAX 64
#define MP__INTERVAL_MIN     8
#define MP__INTERVAL_MAX     255
#define MP__INTERVAL_DEFAULT 61
#define MP__EWMA_ALPHA       0.1
/* The adaptive interval's latency target: Tokio's 200 us rather than Volt's 1 ms. Two
 * workers busy with 5 us polls, tasks injected one at a time (loadtest/runtime/
 * global_interval.c, 2-vCPU Debian 12 VM, 2026-11-21): an injected task waited p50 45 us /
 * p99 223 us at 200 us against 524 us / 1112 us at 1 ms; with 20 us polls 104 / 198 us against
 * 370 / 1100 us. Local poll throughput was the same within run-to-run noise (the global check
 * is one lock per ~40 polls). */
#define MP__GLOBAL_TARGET_NS 200000u

/* A futex wake-up that took longer than this counts as this long in the wake-latency EWMA:
 * a driver never keeps more than about this much backlog to itself (worker.c, drive()). */
#define MP__WAKE_NS_MAX 1000000u
/* A wake-latency estimate older than this is not trusted: the driver then wakes a helper as
 * Tokio would, which takes a fresh sample. Samples come only from real wakes, so without this
 * an estimate taken on a crowded machine would keep a driver alone after the machine freed up.
 * At most ten extra wakes a second. */
#define MP__WAKE_NS_TTL 100000000u

/* Branch hints for the fast paths (the pool's join and posting, mostly). */
#if defined(__GNUC__)
#define mp__likely(x)   __builtin_expect(!!(x), 1)
#define mp__unlikely(x) __builtin_expect(!!(x), 0)
#else
#define mp__likely(x)   (x)
#define mp__unlikely(x) (x)
#endif

#define MP__UNREACHABLE(fmt, ...)                                                                  \
    do {                                                                                           \
        fprintf(stderr, "magpie: %s:%d: impossible state: " fmt "\n", __FILE__, __LINE__,          \
                __VA_ARGS__);                                                                      \
        abort();                                                                                   \
    } while (0)

_Static_assert(MP_EOF == UV_EOF, "MP_EOF is libuv's UV_EOF");

/* Statistics counters: written by one thread only, read by any; a relaxed load+store pair
 * compiles to a plain add (no locked instruction), and readers tolerate a stale value. */
typedef _Atomic uint64_t mp__counter;

static inline void mp__counter_add(mp__counter *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t mp__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* futex on a 32-bit word, private to the process. Callers loop: wake-ups can be spurious. */
static inline void mp__futex_wait(_Atomic uint32_t *word, uint32_t expected)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

/* The same, returning by deadline_ms of the monotonic clock (mp_now_ms()'s) at the latest:
 * FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time, so a loop that re-waits after a
 * spurious wake-up does not stretch the deadline. */
static inline void mp__futex_wait_until(_Atomic uint32_t *word, uint32_t expected,
                                        uint64_t deadline_ms)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000),
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET_PRIVATE, expected, &ts, NULL,
            FUTEX_BITSET_MATCH_ANY);
}

static inline void mp__futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* A test-and-test-and-set spinlock for critical sections of a few instructions that never
 * block. After a short spin it yields, so a preempted holder is not spun against for a whole
 * time slice. */
static inline void mp__spin_lock(_Atomic uint32_t *l)
{
    for (unsigned spins = 0;; spins++) {
        /* Acquire: pairs with the release store in mp__spin_unlock(); the critical section
         * sees what the previous holder wrote. */
        if (atomic_load_explicit(l, memory_order_relaxed) == 0 &&
            atomic_exchange_explicit(l, 1, memory_order_acquire) == 0)
            return;
        if (spins >= 64)
            sched_yield();
    }
}

static inline void mp__spin_unlock(_Atomic uint32_t *l)
{
    /* Release: publishes the critical section; pairs with the acquire in mp__spin_lock(). */
    atomic_store_explicit(l, 0, memory_order_release);
}

/* testhook.c: fault injection for the suites. The Nth worker thread start (1-based, counted
 * over the object's life) of every runtime and pool created after this call fails as if
 * pthread_create() had returned EAGAIN; 0 (the default) = never. */
void mp__test_fail_spawn_nth(unsigned nth);
unsigned mp__test_fail_spawn_nth_value(void);
/* The loop of every runtime created after this call spins for us microseconds as it decides
 * whether a due timer fires, widening its race with a task moving that timer later (timer.c);
 * 0 (the default) = no delay. */
void mp__test_timer_fire_delay_us(unsigned us);
unsigned mp__test_timer_fire_delay_us_value(void);
/* Every pool created after this call sleeps us microseconds between starting a thread and
 * counting it as started (pool.c, spawn_one), as a preempted spawner would; 0 = no delay. */
void mp__test_pool_spawn_publish_delay_us(unsigned us);
unsigned mp__test_pool_spawn_publish_delay_us_value(void);
/* A sleep of us microseconds in mp_loop_call() between its check for a closed loop and the
 * push of its command (reactor.c), for the race with the loop's close. */
void mp__test_loop_call_delay_us(unsigned us);
unsigned mp__test_loop_call_delay_us_value(void);
/* The next thread start of this runtime's blocking pool fails as if pthread_create() had
 * returned EAGAIN (blocking.c reads mp__blocking.fail_next_start under its mutex). */
struct mp__blocking;
void mp__test_blocking_fail_next_start(struct mp__blocking *b);

/* waker.c: blocking a plain thread until a waker fires. */
typedef struct mp__thread_waiter {
    _Atomic uint32_t word;
} mp__thread_waiter;

mp_waker mp__thread_waiter_init(mp__thread_waiter *tw);
/* Returns after the waker fired (at least once since the last return). */
void mp__thread_waiter_wait(mp__thread_waiter *tw);
/* The same, or by deadline_ms (mp_now_ms()'s clock): true when the waker fired, false when the
 * deadline passed first (the caller then takes its waker back from wherever it left it). */
bool mp__thread_waiter_wait_until(mp__thread_waiter *tw, uint64_t deadline_ms);

/* state.c: the task state word; state.c documents each bit. */
#define MP__T_RUNNING       ((uint64_t)1 << 0)
#define MP__T_COMPLETE      ((uint64_t)1 << 1)
#define MP__T_SCHEDULED     ((uint64_t)1 << 2)
#define MP__T_NOTIFIED      ((uint64_t)1 << 3)
#define MP__T_CANCELLED     ((uint64_t)1 << 4)
#define MP__T_JOIN_INTEREST ((uint64_t)1 << 5)
#define MP__T_JOIN_WAKER    ((uint64_t)1 << 6)
#define MP__T_REF_SHIFT     16
#define MP__T_REF_ONE       ((uint64_t)1 << MP__T_REF_SHIFT)

typedef enum { MP__TO_RUNNING_OK, MP__TO_RUNNING_CANCELLED, MP__TO_RUNNING_FAILED } mp__to_running;
typedef enum {
    MP__TO_IDLE_OK,
    MP__TO_IDLE_REQUEUE,
    MP__TO_IDLE_CANCELLED,
    MP__TO_IDLE_DEALLOC
} mp__to_idle;
typedef enum { MP__NOTIFY_NOTHING, MP__NOTIFY_SUBMIT, MP__NOTIFY_DEALLOC } mp__to_notified;
typedef enum { MP__JOINED, MP__JOINED_DEALLOC, MP__JOINED_SLOW } mp__to_joined;

/* The transitions: the only code that changes a task's state word (state.c). */
void mp__task_state_init(mp_task *t);
uint64_t mp__task_state_load(const mp_task *t, memory_order mo);
bool mp__task_transition_to_spawned(mp_task *t, bool joinable);
void mp__task_transition_to_unspawned(mp_task *t);
mp__to_running mp__task_transition_to_running(mp_task *t);
mp__to_idle mp__task_transition_to_idle(mp_task *t, bool yielded);
mp__to_notified mp__task_transition_to_notified_by_ref(mp_task *t);
mp__to_notified mp__task_transition_to_notified_by_val(mp_task *t);
mp__to_notified mp__task_transition_to_notified_and_cancel(mp_task *t);
bool mp__task_transition_to_shutdown(mp_task *t);
bool mp__task_transition_to_complete(mp_task *t, uint64_t refs);
bool mp__task_transition_to_complete_joined(mp_task *t, uint64_t refs);
void mp__task_transition_to_join_waker_done(mp_task *t);
bool mp__task_transition_set_join_waker(mp_task *t);
bool mp__task_transition_unset_join_waker(mp_task *t);
bool mp__task_transition_to_join_handle_dropped(mp_task *t);
mp__to_joined mp__task_transition_to_joined(mp_task *t, mp_waker *waker);
/* The reference count: a new reference from an existing one; drop n, releasing the task (its
 * vtable's release) when they were the last. */
void mp__task_ref_inc(mp_task *t);
void mp__task_ref_dec(mp_task *t, uint64_t n);
void mp__task_release(mp_task *t);

/* task.c */
struct mp__worker;

struct mp_context {
    mp_waker waker; /* borrowed: data = the running task */
    mp_task *task;
    bool yielded;
};

extern const mp_waker_vtable mp__task_waker_vt;

int mp__task_spawn(mp_runtime *rt, mp_task *t, bool joinable);
/* Run one turn of t, which was taken from a run queue (the queue's reference comes with it).
 * w is the calling worker, or NULL when run inline by a thread that is not a worker. */
void mp__task_run(mp_task *t, struct mp__worker *w);
/* dump.c: a poll of t (on worker w, NULL inline) took ns, past the slow-poll threshold: count
 * it, and report it if this is the task's first. */
void mp__slow_poll(mp_task *t, struct mp__worker *w, uint64_t ns);
/* A blocking job, on a thread of the blocking pool (blocking.c). */
void mp__task_run_blocking(mp_task *t);
/* Shutdown: cancel t inline if nobody runs it, else mark it cancelled for its runner. */
void mp__task_shutdown(mp_task *t);
/* Shutdown found t in a run queue: cancel it, or drop a stale entry. */
void mp__task_shutdown_queued(mp_task *t);
/* mp_task.shard of a task that has never suspended, so is in no registry shard. */
#define MP__UNREGISTERED UINT32_MAX
bool mp__task_is_complete(const mp_task *t);
/* Join from a worker's help loop: false when t has completed. */
bool mp__task_register_join_waker(mp_task *t, const mp_waker *waker);

/* queue.c: the per-worker ring. */
typedef struct mp__queue {
    /* atomic: [steal:32 | real:32]; CAS'd by the owner (pop, overflow) and thieves */
    alignas(MP__CACHE_LINE) _Atomic uint64_t head;
    /* atomic: written by the owner only (release), read by thieves */
    alignas(MP__CACHE_LINE) _Atomic uint32_t tail;
    alignas(MP__CACHE_LINE) _Atomic(mp_task *) slots[MP_QUEUE_CAPACITY];
} mp__queue;

struct mp__inject;
void mp__queue_init(mp__queue *q);
/* Owner only. Push t at the back; when the ring is full, move half of it plus t to the global
 * queue in one lock, and set *overflowed. Returns NULL, or, when the global queue was closed
 * (shutdown), the tasks that could not go there: a chain through ->next, with their queue
 * references, which the caller must cancel (mp__task_shutdown_queued). */
mp_task *mp__queue_push_owner(mp__queue *q, mp_task *t, struct mp__inject *inj, bool *overflowed);
/* Owner only: the task at the front, or NULL. */
mp_task *mp__queue_pop_owner(mp__queue *q);
/* Any thread, into the caller's own ring dst: moves half of src's tasks; returns one of them
 * (not pushed) or NULL. *n_out is the number taken. */
mp_task *mp__queue_steal_into(mp__queue *src, mp__queue *dst, uint32_t *n_out);
/* Any thread; exact only for the owner. */
uint32_t mp__queue_len(mp__queue *q);
bool mp__queue_is_empty(mp__queue *q);

/* inject.c: the global queue. */
typedef struct mp__inject {
    pthread_mutex_t mu;
    mp_task *head; /* guarded by mu */
    mp_task *tail; /* guarded by mu */
    bool closed;   /* guarded by mu */
    /* atomic: written under mu, read lock-free for emptiness checks */
    alignas(MP__CACHE_LINE) _Atomic size_t len;
} mp__inject;

int mp__inject_init(mp__inject *inj);
void mp__inject_destroy(mp__inject *inj);
/* false when closed: the caller still owns the tasks. */
bool mp__inject_push(mp__inject *inj, mp_task *t);
bool mp__inject_push_batch(mp__inject *inj, mp_task *first, mp_task *last, size_t n);
mp_task *mp__inject_pop(mp__inject *inj);
/* Pop up to max tasks into out[]; returns how many. */
size_t mp__inject_pop_batch(mp__inject *inj, mp_task **out, size_t max);
size_t mp__inject_len(mp__inject *inj);
void mp__inject_close(mp__inject *inj);

/* owned.c: every live task, for shutdown. */
typedef struct mp__owned_shard {
    alignas(MP__CACHE_LINE) _Atomic uint32_t lock;
    bool closed;    /* guarded by lock */
    mp_task *head;  /* guarded by lock */
    uint64_t count; /* guarded by lock */
} mp__owned_shard;

typedef struct mp__owned {
    mp__owned_shard *shards; /* immutable after start */
    uint32_t mask;           /* immutable after start */
    _Atomic uint32_t next;   /* atomic: round-robin shard for spawns from outside */
} mp__owned;

int mp__owned_init(mp__owned *o, unsigned workers);
void mp__owned_destroy(mp__owned *o);
/* -ESHUTDOWN once closed. */
int mp__owned_bind(mp__owned *o, mp_task *t, int worker);
/* true if t was still linked: the caller then also drops the registry's reference. */
bool mp__owned_remove(mp__owned *o, mp_task *t);
void mp__owned_close(mp__owned *o);
/* After close: cancel every task still registered. */
void mp__owned_shutdown_all(mp__owned *o);
uint64_t mp__owned_count(mp__owned *o);

/* park.c: one word per worker. DRIVING: parked in the libuv loop (reactor.c), woken by the
 * async handle rather than the futex. */
enum { MP__UNPARKED = 0, MP__PARKED = 1, MP__NOTIFIED = 2, MP__DRIVING = 3 };
typedef struct mp__park {
    alignas(MP__CACHE_LINE) _Atomic uint32_t state;
    _Atomic uint64_t unparked_at; /* atomic: mp__now_ns() of the last unpark, for wake_ns */
} mp__park;

/* Returns true if it slept on the futex, false if an unpark had already come. */
bool mp__park_wait(mp__park *p);
/* Returns the state before: MP__DRIVING means the caller must wake the loop instead. */
uint32_t mp__park_unpark(mp__park *p);

/* idle.c: who searches, who sleeps, who to wake. */
typedef struct mp__idle {
    /* atomic: [unparked:32 | searching:32]; changed by RMW only */
    alignas(MP__CACHE_LINE) _Atomic uint64_t state;
    alignas(MP__CACHE_LINE) pthread_mutex_t mu;
    _Atomic uint64_t *parked;  /* bitmap; written under mu, read lock-free (is_parked) */
    uint64_t summary;          /* guarded by mu: bit i = parked[i] != 0 */
    unsigned words;            /* immutable after start */
    unsigned workers;          /* immutable after start */
    unsigned started;          /* guarded by mu: worker slots handed out so far */
    uint64_t retry;            /* guarded by mu: bit i = slot retry_base + i failed to start */
    unsigned retry_base;       /* guarded by mu */
    _Atomic unsigned failed;   /* atomic: thread starts that failed, for the stats */
    _Atomic unsigned spawning; /* atomic: slots handed out whose start has not settled */
    bool closed;               /* guarded by mu: shutdown, no more slots handed out */
    _Atomic unsigned driver;   /* atomic: the worker asleep in the loop, or UINT_MAX; a hint */
} mp__idle;

typedef enum mp__notify_kind {
    MP__NOTIFY_NONE,
    MP__NOTIFY_UNPARK,
    MP__NOTIFY_SPAWN
} mp__notify_kind;

int mp__idle_init(mp__idle *idle, unsigned workers);
void mp__idle_destroy(mp__idle *idle);
/* The worker to wake for new work, or NONE. SPAWN (only with may_spawn): slot *idx must be
 * started, then settled with mp__idle_spawn_settled() (and mp__idle_spawn_failed() first if
 * its thread could not be created). */
mp__notify_kind mp__idle_worker_to_notify(mp__idle *idle, unsigned *idx, bool may_spawn);
/* Hand out an unstarted slot whatever the searching count says (the first worker, for a spawn
 * from outside). false: none left, or closed. */
bool mp__idle_take_slot(mp__idle *idle, unsigned *idx);
bool mp__idle_transition_to_searching(mp__idle *idle);
/* true: the caller was the last searcher. */
bool mp__idle_transition_from_searching(mp__idle *idle);
bool mp__idle_transition_to_parked(mp__idle *idle, unsigned idx, bool searching);
/* Leave the parked set by ourselves (woken directly, not claimed). false: a notifier already
 * claimed us (and counted us as searching). */
bool mp__idle_unpark_self(mp__idle *idle, unsigned idx);
bool mp__idle_is_parked(mp__idle *idle, unsigned idx);
/* Worker idx sleeps in the loop as its driver (UINT_MAX: nobody): notifiers wake another
 * parked worker first, whose futex wake is cheaper than the loop's eventfd. */
void mp__idle_set_driver(mp__idle *idle, unsigned idx);
/* Its thread could not be created: the slot goes to the retry set. */
void mp__idle_spawn_failed(mp__idle *idle, unsigned idx);
void mp__idle_spawn_settled(mp__idle *idle);
/* Slots handed out whose start has not settled (shutdown waits for 0 after closing). */
unsigned mp__idle_spawning(mp__idle *idle);
/* Shutdown: hand out no more slots; returns how many were handed out. */
unsigned mp__idle_close(mp__idle *idle);

/* timer.c: the hierarchical timer wheel. A plain data structure, not thread-safe: its one
 * driver (the reactor, on the loop thread) serializes every call under its own lock. */
#define MP__WHEEL_LEVELS     6
#define MP__WHEEL_SLOT_BITS  6
#define MP__WHEEL_SLOTS      (1u << MP__WHEEL_SLOT_BITS)
#define MP__TIMER_NOT_LINKED UINT32_MAX

/* Intrusive: embedded in whatever waits (a sleep future, a timeout). Fields are the wheel's
 * while the entry is linked; deadline_ms may be read by the owner at any time under the lock. */
typedef struct mp__timer_entry {
    struct mp__timer_entry *prev, *next; /* circular slot list; next also links fired lists */
    uint64_t deadline_ms;
    uint32_t where; /* level * 64 + slot, or MP__TIMER_NOT_LINKED */
} mp__timer_entry;

typedef struct mp__timer_wheel {
    uint64_t elapsed_ms;                 /* the wheel's now; never goes back */
    uint64_t occupied[MP__WHEEL_LEVELS]; /* bit s: slots[level][s] is non-empty */
    mp__timer_entry *slots[MP__WHEEL_LEVELS][MP__WHEEL_SLOTS]; /* list heads */
    size_t count;                                              /* linked entries */
} mp__timer_wheel;

void mp__wheel_init(mp__timer_wheel *w, uint64_t now_ms);
void mp__timer_entry_init(mp__timer_entry *e);
/* Link e to fire at deadline_ms; a deadline <= elapsed_ms fires at the next advance. An entry
 * already linked is moved (and counts as inserted now, for the order of ties). */
void mp__wheel_insert(mp__timer_wheel *w, mp__timer_entry *e, uint64_t deadline_ms);
/* false if e was not linked: already fired, removed, or never inserted. */
bool mp__wheel_remove(mp__timer_wheel *w, mp__timer_entry *e);
/* The earliest time at which mp__wheel_advance() may return something, UINT64_MAX when empty.
 * Exact when the earliest entry is due within the current 64 ms (or is overdue: then its own
 * deadline, <= elapsed_ms); otherwise the start of the higher-level slot holding it, which
 * is never later than its deadline: the driver wakes then to cascade and asks again. */
uint64_t mp__wheel_next_expiration(const mp__timer_wheel *w);
/* Move time to now_ms (an earlier now_ms leaves it where it is) and return every entry with
 * deadline <= the new elapsed_ms, unlinked, as a NULL-terminated list through ->next, in
 * deadline order, ties in insertion order. A caller that re-inserts an entry while walking
 * the list reads ->next first. */
mp__timer_entry *mp__wheel_advance(mp__timer_wheel *w, uint64_t now_ms);
size_t mp__wheel_count(const mp__timer_wheel *w);

/* reactor.c: the libuv loop and the driver role. */
typedef struct mp__reactor {
    uv_loop_t loop;   /* guarded by the driver role */
    uv_async_t async; /* guarded by the driver role; uv_async_send from any thread */
    int epfd; /* epoll set of the sockets (edge-triggered, io.c) and the loop's fd; immutable */
    _Atomic uint32_t io_lock; /* spin lock of ios and io_closed */
    mp_io *ios;               /* guarded by io_lock: open sockets, for shutdown */
    bool io_closed;           /* guarded by io_lock: shutdown closed them; no more opens */
    /* atomic: 0 free, 1 held */
    alignas(MP__CACHE_LINE) _Atomic uint32_t role;
    /* atomic: commands for the loop, a Treiber stack (newest first) */
    alignas(MP__CACHE_LINE) _Atomic(mp_loop_cmd *) cmds;
    _Atomic bool closed; /* atomic: set by shutdown under the role */
    /* atomic: mp_loop_call()s queueing a command, which close waits for (reactor.c) */
    _Atomic uint32_t callers;
    unsigned call_delay_us; /* immutable after start: testhook.c */
    uv_timer_t timer;       /* guarded by the driver role: fires at the wheel's next expiration */
    mp_loop_cmd rearm_cmd;
    _Atomic bool rearm_queued; /* atomic: rearm_cmd is in cmds */
    alignas(MP__CACHE_LINE) _Atomic uint32_t wheel_lock;
    mp__timer_wheel wheel;  /* guarded by wheel_lock */
    uint64_t armed_ms;      /* guarded by wheel_lock: what timer is set for, UINT64_MAX none */
    unsigned fire_delay_us; /* immutable after start: testhook.c */
} mp__reactor;

extern _Thread_local mp__reactor *mp__tls_driver;

int mp__reactor_init(mp__reactor *r);
bool mp__reactor_try_acquire(mp__reactor *r);
/* true: commands are waiting and someone must drive (mp__runtime_notify). */
bool mp__reactor_release(mp__reactor *r);
/* With the role held: run the loop once, blocking for events or not. */
void mp__reactor_run(mp__reactor *r, bool block);
void mp__reactor_wake(mp__reactor *r);
void mp__reactor_close(mp__reactor *r);

/* timer.c, the timer API's side of the reactor. Shutdown, with the role held and every worker
 * stopped: drop the wakers of timers still armed. */
void mp__timers_close(mp__reactor *r);

/* io.c: readiness of the sockets served to tasks. Bits of mp_io.bits: */
#define MP__IO_READ   ((uint64_t)1 << 0)
#define MP__IO_WRITE  ((uint64_t)1 << 1)
#define MP__IO_CLOSED ((uint64_t)1 << 2) /* sticky: reads never block again */
#define MP__IO_TICK   ((uint64_t)1 << 3) /* added by every event */

void mp__io_init(mp_io *io, mp_runtime *rt, int fd, uint64_t bits, void (*close_fn)(mp_io *));
/* Add io->fd to the runtime's epoll set for events (EPOLLET is added) and to the open list;
 * the socket is OPEN after it. 0, -ESHUTDOWN, or epoll_ctl's error. Any thread. */
int mp__io_register(mp_io *io, uint32_t events);
bool mp__io_is_open(const mp_io *io);
/* On the loop's thread: epoll reported events (EPOLL* bits) for io. */
void mp__io_ready(mp_io *io, uint32_t events, uint64_t now_ns);
/* The bits, with acquire (pairs with mp__io_ready()). */
uint64_t mp__io_load(mp_io *io);
/* The kernel said `bit` would block after the caller loaded `seen`: clear it unless an event
 * came in since. */
void mp__io_clear(mp_io *io, uint64_t seen, uint64_t bit);
void mp__io_interrupt(mp_io *io);
bool mp__io_take_interrupt(mp_io *io);
/* The wait every poll that makes a system call on a socket starts with, for `bit`
 * (MP__IO_READ or MP__IO_WRITE): MP_READY with *err -EBADF when the socket is not open (closed,
 * or closing from another thread), -EINTR when (a reader only) an interrupt was pending, and
 * taken; MP_READY with *err 0 and *seen the bits loaded, `bit` among them, to make the call
 * (and clear `bit` from *seen with mp__io_clear() if the kernel says it would block);
 * MP_PENDING, *err 0, with the task's waker left for the next edge. */
mp_poll mp__io_poll(mp_io *io, mp_context *cx, uint64_t bit, uint64_t *seen, int *err);
/* Drop the wakers left in io. */
void mp__io_disown(mp_io *io);
/* A system call on a socket that another thread may close (listener.c, udp.c): enter first
 * (false: closed, report -EBADF), leave after; the close waits for the last to leave. */
bool mp__io_enter(mp_io *io);
void mp__io_leave(mp_io *io);
/* Close: set_cb(io, cb) records the object's callback (once the close is this caller's), the
 * socket is marked closing and its waiters woken, and once no system call is in progress the
 * loop takes it out of the set and calls its close_fn. run_cb(io) runs the recorded callback
 * inline where the close has nothing left to wait for. 0; -EBADF: it was not open (the
 * callback ran); -ESHUTDOWN: the shutdown closed it (the callback ran, or runs from the
 * shutdown's close); -EALREADY: a close was asked before (this callback is not recorded).
 * Any thread. See "Who calls on_closed" at the top of io.c. */
typedef void (*mp__fn)(void); /* any function pointer, cast back before the call */
int mp__io_close(mp_io *io, void (*set_cb)(mp_io *io, mp__fn cb), mp__fn cb,
                 void (*run_cb)(mp_io *io));
/* From the object's close (its close_fn, or a libuv handle's close callback), on the loop's
 * side, as its last touch of the object: off the open list, wakers dropped. true: a close
 * published its callback, run it now. */
bool mp__io_closed(mp_io *io);
/* A bare socket's close_fn, after it left the epoll set: closes the fd; then the object runs
 * mp__io_closed() and, if true, its on_closed (io.c, "Closing"). */
void mp__io_close_fd(mp_io *io);
void mp__io_close_all(mp__reactor *r);
/* Withdraw the reader's (reader true) or the writer's waker: the owner gives up a wait. */
void mp__io_cancel(mp_io *io, bool reader);

/* tcache.c: what every per-thread cache shares (see the file). A class, defined statically
 * with MP__TCACHE_CLASS_INIT, holds the registry of its threads' caches; each thread's cache
 * embeds an mp__tcache and registers it at its first use. */
typedef struct mp__tcache mp__tcache;
typedef struct mp__tcache_class {
    /* Thread exit, under mu, the cache off the registry: fold its counters into the class's
     * totals, which the class reads under mu too. NULL: nothing to fold. */
    void (*retire_locked)(mp__tcache *tc);
    /* Thread exit, after: free (or pass on) what the cache keeps. On the exiting thread. */
    void (*drain)(mp__tcache *tc);
    pthread_mutex_t mu; /* guards head and whatever retire_locked folds into */
    mp__tcache *head;   /* guarded by mu: every live thread's cache, for stats */
} mp__tcache_class;
#define MP__TCACHE_CLASS_INIT(retire_locked, drain)                                                \
    {                                                                                              \
        (retire_locked), (drain), PTHREAD_MUTEX_INITIALIZER, NULL                                  \
    }
struct mp__tcache {
    mp__tcache_class *cls;   /* owner only */
    bool registered;         /* owner only: check it before each use */
    mp__tcache *prev, *next; /* guarded by cls->mu */
    mp__tcache *thread_next; /* owner only: the thread's other caches */
};
/* The calling thread's first use of tc (a thread-local struct's member): register it, and
 * have it retired and drained when the thread exits. */
void mp__tcache_register(mp__tcache_class *cls, mp__tcache *tc);

/* readbuf.c: the streams' read buffers (see the file). Default-size buffers each thread keeps
 * for itself: */
#define MP__TCP_LOCAL_BUFS  4
#define MP__TCP_DEFAULT_BUF 16384
char *mp__readbuf_take(size_t cap);
void mp__readbuf_give(char *b, size_t cap);

/* tcp.c: a non-blocking, close-on-exec socket of type for addr's family (AF_INET or AF_INET6,
 * else -EINVAL), and addr's length; or a negative errno. */
int mp__inet_socket(const struct sockaddr *addr, int type, socklen_t *len);
/* resolve.c: getaddrinfo's error (with the errno it left, for EAI_SYSTEM) as a negative errno. */
int mp__resolve_error(int eai, int saved_errno);
/* getsockname (peer false) or getpeername of an open socket. */
int mp__sock_name(mp_io *io, struct sockaddr_storage *out, bool peer);

/* blocking.c: the blocking pool. Counters read lock-free are written under mu only. */
typedef struct mp__blocking {
    pthread_mutex_t mu;
    pthread_cond_t work;  /* idle threads wait here (CLOCK_MONOTONIC) */
    pthread_cond_t done;  /* shutdown and destroy wait here */
    mp_task *head, *tail; /* guarded by mu: queued jobs, FIFO through ->next */
    _Atomic unsigned threads, idle, queued, running; /* written under mu, read by anyone */
    unsigned notified;        /* guarded by mu: idle threads signalled, not yet awake */
    unsigned spinning;        /* guarded by mu: threads looking for a job before they sleep */
    bool closed;              /* guarded by mu */
    bool fail_next_start;     /* guarded by mu: test hook */
    uint64_t jobs;            /* guarded by mu: jobs queued, ever */
    uint64_t threads_started; /* guarded by mu */
    uint64_t spawn_failures;  /* guarded by mu */
    unsigned max_threads;     /* immutable after start */
    unsigned keep_alive_ms;   /* immutable after start */
    size_t stack_size;        /* immutable after start */
} mp__blocking;

int mp__blocking_init(mp__blocking *b, const mp_config *cfg);
/* 0, -ESHUTDOWN, or the error of the thread start that failed with no thread left to run t
 * (t is not queued then). */
int mp__blocking_push(mp__blocking *b, mp_task *t);
bool mp__blocking_busy(mp__blocking *b);
/* Refuse new jobs, cancel the queued ones, wait for running ones up to timeout_ms (0: without
 * limit). -ETIMEDOUT: some still run. */
int mp__blocking_shutdown(mp__blocking *b, unsigned timeout_ms);
/* Wait for every thread to leave, then free the pool's resources. */
void mp__blocking_destroy(mp__blocking *b);
void mp__blocking_stats(mp__blocking *b, mp_stats *out);
/* A blocking job whose caller reads results after it completed; see blocking.c. */
typedef struct mp__bjob {
    mp_task task;
    _Atomic int refs;                    /* atomic: the task (until released) and the caller */
    void (*run)(struct mp__bjob *j);     /* on the blocking thread */
    void (*destroy)(struct mp__bjob *j); /* frees j and what it holds */
} mp__bjob;
/* run and destroy set: spawn it joinable. On an error the caller still owns j. */
int mp__bjob_spawn(mp_runtime *rt, mp__bjob *j);
/* mp_join_poll() of its task; after MP_READY the caller's reference still keeps j. */
mp_poll mp__bjob_poll(mp__bjob *j, mp_context *cx, int *result);
void mp__bjob_put(mp__bjob *j);
/* Cancel (a job not started never runs), give up the join handle and the reference. */
void mp__bjob_abandon(mp__bjob *j);
/* The next thread start fails as with EAGAIN (tests). */

/* worker.c */
/* Is a backlog of local tasks, avg_task_ns each, worth waking a helper for, when a wake-up
 * took wake_ns by an estimate last sampled wake_age_ns ago? And the wake-latency EWMA after
 * one more sample. */
bool mp__helper_pays(uint32_t local, double avg_task_ns, uint64_t wake_ns, uint64_t wake_age_ns);
uint64_t mp__wake_ns_update(uint64_t old, uint64_t sample);

/* The fields of mp_worker_stats (MP_WORKER_COUNTERS in magpie_core.h), as counters. */
typedef struct mp__worker_counters {
#define MP__COUNTER_FIELD(name, help) mp__counter name;
    MP_WORKER_COUNTERS(MP__COUNTER_FIELD)
#undef MP__COUNTER_FIELD
} mp__worker_counters;

typedef struct mp__worker {
    mp__queue queue;
    mp__park park;
    /* owner only: */
    alignas(MP__CACHE_LINE) mp_task *lifo;
    mp_task *orphans; /* overflowed into the closed global queue: cancelled at shutdown */
    mp_task *deferred, *deferred_tail; /* yielded tasks not queued yet, oldest first */
    uint32_t lifo_streak;
    uint32_t tick_polls;   /* polls in the current tick (budget used) */
    uint32_t since_global; /* polls since the last global-queue check */
    uint32_t global_interval;
    uint64_t tick_start_ns;
    double avg_task_ns;
    uint64_t rng;
    bool searching;
    bool parking;     /* the transitioning-to-park guard, see worker.c */
    bool driving;     /* blocked in the loop: wakes stay local, unnotified */
    mp_task *joining; /* mp__worker_join_in_place()'s target while it runs it */
    mp_task *joined;  /* ... which completed and joined in one step, with: */
    int joined_result;
    mp__worker_counters stats; /* written by the owner, read by anyone */
    /* immutable after start: */
    mp_runtime *rt;
    unsigned index;
    pthread_t thread;        /* valid once spawn_state is STARTED */
    _Atomic int spawn_state; /* atomic: enum below; see start_worker() in runtime.c */
} mp__worker;

enum { MP__SLOT_IDLE, MP__SLOT_STARTING, MP__SLOT_STARTED, MP__SLOT_FAILED };

extern _Thread_local mp__worker *mp__tls_worker;
/* The runtime of a task that a non-worker thread runs inline (mp_join off a worker). */
extern _Thread_local mp_runtime *mp__tls_inline_rt;

void mp__worker_init(mp__worker *w, mp_runtime *rt, unsigned index);
void *mp__worker_main(void *arg);
/* Put a runnable task on a queue: the caller's LIFO slot or ring when the caller is a worker
 * of rt, else the global queue, and wake a worker if one is needed. false: the global queue
 * is closed (shutdown) and the caller still holds the queue's reference. */
bool mp__schedule(mp_runtime *rt, mp_task *t, bool is_yield);
bool mp__schedule_batch(mp_runtime *rt, mp_task **tasks, size_t n);
/* Help until t completes, on worker w. false: the runtime is stopping and t is not done. */
bool mp__worker_help_until(mp__worker *w, mp_task *t);
/* mp_join() of the task in w's LIFO slot: run it now. true: it completed and its join handle
 * is gone with the same state change (the task may be released already), *result set. */
bool mp__worker_join_in_place(mp__worker *w, mp_task *t, int *result);
void mp__worker_drain_on_shutdown(mp__worker *w);

/* runtime.c */
struct mp_runtime {
    mp__reactor reactor;
    mp__inject inject;
    mp__idle idle;
    mp__owned owned;
    mp__blocking blocking;
    mp__worker *workers; /* immutable after start (the array; each slot has its owner) */
    unsigned nworkers;   /* immutable after start */
    mp_config cfg;       /* immutable after start */
    alignas(MP__CACHE_LINE) _Atomic bool stop; /* atomic: workers leave their loop */
    _Atomic bool draining;                     /* atomic: spawns from outside refused */
    _Atomic bool closed;                       /* atomic: every spawn refused */
    _Atomic int shutdown_state;                /* atomic: 0 running, 1 shutting down, 2 done */
    unsigned fail_spawn_nth;                   /* immutable after start: testhook.c */
    _Atomic unsigned spawn_attempts;           /* atomic: for fail_spawn_nth */
    _Atomic uint64_t spawned_outside;          /* atomic: tasks spawned by non-worker threads */
    _Atomic uint64_t injected;                 /* atomic */
    _Atomic uint64_t completed_outside;        /* atomic: completed by non-worker threads */
    _Atomic uint64_t slow_polls_outside;       /* atomic: slow polls run inline by them */
    _Atomic uint64_t wake_ns;         /* atomic: EWMA of futex wake-up latency (worker.c) */
    _Atomic uint64_t wake_sampled_at; /* atomic: mp__now_ns() of its last sample */
    _Atomic unsigned workers_live;    /* atomic: worker threads started (they stop at shutdown) */
    _Atomic unsigned inline_runs;     /* atomic: plain threads polling a task inline (mp_join) */
    pthread_mutex_t first_start_mu;   /* serializes spawns from outside until a worker lives */
};

/* Wake a worker for new work, starting one if none is parked and a slot is free. */
void mp__runtime_notify(mp_runtime *rt);
/* Before a spawn from a thread that is not a worker: make sure a worker thread exists, so that
 * the task will run. 0, or the error of the failed thread start (the spawn must fail). */
int mp__runtime_ensure_worker(mp_runtime *rt);
/* A plain thread in mp_join: run one task from the global queue inline. false: none (or the
 * runtime is shutting down). See the protocol in runtime.c. */
bool mp__runtime_run_inline(mp_runtime *rt);
/* Wake worker w directly, from its futex or from the loop. */
void mp__runtime_unpark(mp_runtime *rt, mp__worker *w);
/* Is there work any worker could take (global queue or a ring)? */
bool mp__runtime_work_pending(mp_runtime *rt);

#endif
