/*
 * Private declarations of the fork-join pool. One file per mechanism:
 *   deque.c         per-worker Chase-Lev deque (owner LIFO at the bottom, thieves FIFO on top)
 *   latch.c         the 4-state CoreLatch and the latches built on it (spin, count, lock)
 *   sleep.c         the packed counter word, the Jobs Event Counter, progressive sleep
 *   inject_stack.c  the Treiber stack through which non-pool threads hand in jobs
 *   pool.c          life cycle, lazy thread start, worker loop, work finding, mp_pool_call
 *   join.c          mp_pool_join (hybrid join)
 *   scope.c         mp_pool_scope / mp_pool_spawn
 *   parallel.c      mp_pool_parallel_for / mp_pool_parallel_reduce
 *   sort.c          the parallel quicksorts (sort_impl.h is their typed template)
 * The owner's deque push and pop and the posting fast path are inline here: every join runs
 * them. Functions used only by the tests say so.
 * Field comments say who touches a field: owner only, atomic, guarded by a lock, immutable.
 */
#ifndef MP_POOL_INTERNAL_H
#define MP_POOL_INTERNAL_H

#include "internal.h"

#define MP__POOL_DEFAULT_CAPACITY 256
/* The counter word holds thread counts in 16 bits. */
#define MP__POOL_MAX_WORKERS 0xfffe

/*
 * The seq_cst fence of the deque and sleep protocols; each call site says what it pairs with.
 * ThreadSanitizer does not model fences, and GCC says so with -Wtsan, which -Werror would
 * make fatal in the TSan build. The fence is still emitted; only the warning is silenced.
 */
#if defined(__SANITIZE_THREAD__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void mp__pool_fence_seq_cst(void)
{
    /* seq_cst: pairs as each call site says: (A) with (B) in the deque, #1 with #2 in sleep.c. */
    atomic_thread_fence(memory_order_seq_cst);
}
#if defined(__SANITIZE_THREAD__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/*
 * A unit of work. The object that embeds it lives in the frame of whoever waits for it (a
 * join, a scope's task storage, an external caller), so queues only ever hold pointers.
 */
typedef struct mp__pool_job mp__pool_job;
struct mp__pool_job {
    void (*execute)(mp__pool_job *job); /* immutable while queued */
    mp__pool_job *next;                 /* injection stack link; see inject_stack.c */
};

/* deque.c */

typedef struct mp__pool_deque_buf mp__pool_deque_buf;
struct mp__pool_deque_buf {
    int64_t mask;              /* immutable: capacity - 1, capacity a power of two */
    mp__pool_deque_buf *older; /* owner only: the buffer this one replaced, freed at destroy */
    _Atomic(mp__pool_job *) slots[]; /* atomic: a thief may read a slot the owner rewrites */
};

typedef struct mp__pool_deque {
    alignas(MP__CACHE_LINE) _Atomic int64_t top;    /* atomic: CAS by thieves and owner */
    alignas(MP__CACHE_LINE) _Atomic int64_t bottom; /* atomic: written by owner only */
    _Atomic(mp__pool_deque_buf *) buf;              /* atomic: replaced by owner on growth */
} mp__pool_deque;

typedef enum mp__pool_steal {
    MP__POOL_STEAL_EMPTY,   /* nothing to steal */
    MP__POOL_STEAL_SUCCESS, /* *out holds the stolen job */
    MP__POOL_STEAL_RETRY,   /* lost a race with another taker; the deque may hold more */
} mp__pool_steal;

int mp__pool_deque_init(mp__pool_deque *d, size_t capacity);
void mp__pool_deque_destroy(mp__pool_deque *d);
mp__pool_deque_buf *mp__pool_deque_grow_owner(mp__pool_deque *d, mp__pool_deque_buf *old, int64_t t,
                                              int64_t b);

/*
 * The owner's push and pop: inline, because every join runs both. The protocol, with the
 * diagram of fences (A) and (B), is at the top of deque.c.
 *
 * Push: owner only. Sets *was_empty when the deque held nothing before (the sleep protocol
 * wakes more eagerly behind a backlog). Returns 0, or -ENOMEM when the deque was full and
 * could not grow; then the job was not pushed.
 */
static inline int mp__pool_deque_push_owner(mp__pool_deque *d, mp__pool_job *job, bool *was_empty)
{
    /* Relaxed: only the owner writes bottom. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    /* Acquire: observes the CAS of a thief that took slot t, so that its read of the slot
     * happens before we overwrite it; pairs with the CAS in mp__pool_deque_steal() (deque.c). */
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    /* Relaxed: only the owner writes buf. */
    mp__pool_deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
    if (mp__unlikely(b - t > a->mask)) {
        a = mp__pool_deque_grow_owner(d, a, t, b);
        if (a == NULL)
            return -ENOMEM;
    }
    *was_empty = b - t <= 0;
    /* Relaxed: the slot is published by the release store of bottom just below. */
    atomic_store_explicit(&a->slots[b & a->mask], job, memory_order_relaxed);
    /* Release: publishes the slot and the job it points to (built by the caller); pairs with
     * the acquire load of bottom in mp__pool_deque_steal() (deque.c). */
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
    return 0;
}

/* Pop: owner only. The newest job, or NULL if the deque is empty. */
static inline mp__pool_job *mp__pool_deque_pop_owner(mp__pool_deque *d)
{
    /* Relaxed: only the owner writes bottom and buf. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
    mp__pool_deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
    /* Release, though the ordering that matters comes from fence (A): a thief that reads this
     * value still synchronizes with every earlier push (the jobs below b are older). */
    atomic_store_explicit(&d->bottom, b, memory_order_release);
    /* (A) seq_cst: orders the store of bottom before the load of top; pairs with fence (B) in
     * mp__pool_deque_steal() (deque.c). */
    mp__pool_fence_seq_cst();
    /* Relaxed: ordered by fence (A); a stale value is resolved by the CAS below. */
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    if (t > b) {
        /* Empty: restore bottom. Release for the same reason as above. */
        atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
        return NULL;
    }
    /* Relaxed: the owner wrote this slot itself. */
    mp__pool_job *job = atomic_load_explicit(&a->slots[b & a->mask], memory_order_relaxed);
    if (t == b) {
        /* The last job: race thieves for it on top. seq_cst: the CAS is in the total order
         * with fences (A) and (B); pairs with the CAS in mp__pool_deque_steal() (deque.c). */
        if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                     memory_order_relaxed))
            job = NULL;
        atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
    }
    return job;
}
mp__pool_steal mp__pool_deque_steal(mp__pool_deque *d, mp__pool_job **out);
bool mp__pool_deque_is_empty(mp__pool_deque *d);

/* latch.c */

typedef enum mp__pool_latch_state {
    MP__LATCH_UNSET = 0,    /* the waiter is awake (or not waiting) */
    MP__LATCH_SLEEPY = 1,   /* the waiter announced it is about to sleep */
    MP__LATCH_SLEEPING = 2, /* the waiter is (about to be) blocked on its condvar */
    MP__LATCH_SET = 3,      /* the event happened; never unset */
} mp__pool_latch_state;

/* The 4-state CoreLatch: the waiter moves UNSET -> SLEEPY -> SLEEPING (and back to UNSET when
 * it wakes with the latch still unset); a setter swaps in SET from any state. */
typedef struct mp__pool_core_latch {
    _Atomic uint32_t state; /* atomic: mp__pool_latch_state */
} mp__pool_core_latch;

/* A CoreLatch whose waiter is pool worker `owner`: setting it wakes that worker if asleep. */
typedef struct mp__pool_spin_latch {
    mp__pool_core_latch core;
    uint32_t owner; /* immutable: worker index of the waiter */
} mp__pool_spin_latch;

/* A spin latch set when a counter of outstanding jobs drops to zero (scopes). */
typedef struct mp__pool_count_latch {
    _Atomic size_t count; /* atomic: outstanding jobs + 1 while the scope body runs */
    mp__pool_spin_latch latch;
} mp__pool_count_latch;

/* A latch that a thread outside the pool blocks on (mp_pool_call). */
typedef struct mp__pool_lock_latch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set; /* guarded by mu */
} mp__pool_lock_latch;

bool mp__pool_latch_probe(const mp__pool_core_latch *l);
bool mp__pool_latch_get_sleepy(mp__pool_core_latch *l);
bool mp__pool_latch_fall_asleep(mp__pool_core_latch *l);
void mp__pool_latch_wake_up(mp__pool_core_latch *l);
bool mp__pool_latch_set_core(mp__pool_core_latch *l);
void mp__pool_spin_latch_init(mp__pool_spin_latch *l, uint32_t owner);
void mp__pool_spin_latch_set(mp_pool *pool, mp__pool_spin_latch *l);
void mp__pool_count_latch_init(mp__pool_count_latch *l, uint32_t owner);
void mp__pool_count_latch_increment(mp__pool_count_latch *l);
void mp__pool_count_latch_decrement(mp_pool *pool, mp__pool_count_latch *l);
int mp__pool_lock_latch_init(mp__pool_lock_latch *l);
void mp__pool_lock_latch_destroy(mp__pool_lock_latch *l);
void mp__pool_lock_latch_set(mp__pool_lock_latch *l);
void mp__pool_lock_latch_wait(mp__pool_lock_latch *l);

/* sleep.c */

/*
 * The counter word, one atomic uint64_t:
 *   bits  0..15  sleeping threads: blocked on their condvar, registered by the sleeper and
 *                unregistered by whoever wakes it
 *   bits 16..31  inactive threads: looking for work (awake idle) or sleeping
 *   bits 32..63  JEC, the Jobs Event Counter: even = some thread announced itself sleepy
 *                since the last job was posted; odd = jobs posted since
 */
#define MP__SLEEP_ONE_SLEEPING ((uint64_t)1)
#define MP__SLEEP_ONE_INACTIVE ((uint64_t)1 << 16)
#define MP__SLEEP_ONE_JEC      ((uint64_t)1 << 32)

static inline uint32_t mp__sleep_sleeping(uint64_t c)
{
    return (uint32_t)(c & 0xffff);
}
static inline uint32_t mp__sleep_inactive(uint64_t c)
{
    return (uint32_t)((c >> 16) & 0xffff);
}
static inline uint32_t mp__sleep_jec(uint64_t c)
{
    return (uint32_t)(c >> 32);
}

#define MP__SLEEP_ROUNDS_UNTIL_SLEEPY   32
#define MP__SLEEP_ROUNDS_UNTIL_SLEEPING (MP__SLEEP_ROUNDS_UNTIL_SLEEPY + 2)
/* The idle rounds last at least this long before a worker announces itself sleepy. 32 yields
 * on an otherwise idle CPU take 10-20 us, and a sleeping worker on a VM takes 40-110 us to
 * run again once woken (a halted vCPU must be rescheduled by the host), so a program that
 * calls the pool in a loop with serial work between the calls would pay that per call. The
 * peers keep their workers awake as long: oneTBB's spin 120-140 us of CPU per idle spell
 * (measured beside ours), libgomp's 300,000 spins by default. Measured, and its cost, in
 * loadtest/HISTORY.md ("the caller slot, splits on demand, a 300 us idle window"). */
#define MP__SLEEP_IDLE_MIN_NS 300000u

/* Why a mutex and condvar per worker rather than the core's futex park word (park.c): a
 * sleeper re-checks its latch and the JEC and sets is_blocked under mu, and a waker clears
 * is_blocked and takes the sleeper off the counter word's sleeping count under the same mu,
 * so the count is decremented exactly once per sleep whoever wakes it. A futex word would
 * need that two-party hand-off rebuilt as a CAS protocol for a path that runs only after
 * MP__SLEEP_ROUNDS_UNTIL_SLEEPING idle rounds, where a mutex costs nothing measurable. */
typedef struct mp__pool_sleep_state {
    alignas(MP__CACHE_LINE) pthread_mutex_t mu;
    pthread_cond_t cv;
    bool is_blocked; /* guarded by mu */
    uint64_t sleeps; /* guarded by mu: times this worker blocked */
} mp__pool_sleep_state;

typedef struct mp__pool_sleep {
    alignas(MP__CACHE_LINE) _Atomic uint64_t counters; /* atomic: the counter word */
    mp__pool_sleep_state *states;                      /* immutable pointer: one per worker slot */
    size_t nstates;                                    /* immutable */
} mp__pool_sleep;

/* A worker's progress through the idle rounds; owner only. */
typedef struct mp__pool_idle {
    uint32_t worker;
    uint32_t rounds;
    uint32_t jec;      /* JEC snapshot taken when announcing sleepy */
    uint64_t since_ns; /* CLOCK_MONOTONIC when the idle rounds began */
} mp__pool_idle;

int mp__pool_sleep_init(mp__pool_sleep *s, size_t nworkers);
void mp__pool_sleep_destroy(mp__pool_sleep *s);
void mp__pool_sleep_start_looking(mp__pool_sleep *s, mp__pool_idle *idle, uint32_t worker);
void mp__pool_sleep_work_found(mp__pool_sleep *s);
void mp__pool_sleep_no_work_found(mp__pool_sleep *s, mp__pool_idle *idle,
                                  mp__pool_core_latch *latch, mp_pool *pool);
uint64_t mp__pool_sleep_new_jobs(mp__pool_sleep *s, uint32_t njobs, bool queue_was_empty);

/*
 * Jobs were pushed on a worker's deque: (C) in sleep.c's diagram. Returns the counter word as
 * the poster saw it. Inline for the join fast path: while the JEC is odd (no one announced
 * sleepiness since the last post) and nobody sleeps, posting is one load. No fence: the
 * pushing worker runs the job itself if nobody wakes for it (sleep.c).
 */
static inline uint64_t mp__pool_sleep_new_internal_jobs(mp__pool_sleep *s, uint32_t njobs,
                                                        bool queue_was_empty)
{
    /* seq_cst: (C) reads the word in the total order of the RMWs (A) and (B); pairs with the
     * CAS (B) in go_to_sleep() (sleep.c). */
    uint64_t c = atomic_load_explicit(&s->counters, memory_order_seq_cst);
    if (mp__likely((mp__sleep_jec(c) & 1) != 0 && mp__sleep_sleeping(c) == 0))
        return c;
    return mp__pool_sleep_new_jobs(s, njobs, queue_was_empty);
}
uint64_t mp__pool_sleep_new_injected_jobs(mp__pool_sleep *s, uint32_t njobs, bool queue_was_empty);

/* Whether some worker is idle: searching for work, or asleep. A hint for splitting work on
 * demand (parallel.c): acting on a stale answer costs one needless split, or one split late. */
static inline bool mp__pool_sleep_someone_idle(mp__pool_sleep *s)
{
    /* Relaxed: a hint, see above; nothing is read through it. */
    return mp__sleep_inactive(atomic_load_explicit(&s->counters, memory_order_relaxed)) > 0;
}
bool mp__pool_sleep_wake_specific(mp__pool_sleep *s, uint32_t worker);
uint64_t mp__pool_sleep_load(mp__pool_sleep *s);

/* inject_stack.c */

typedef struct mp__pool_inject {
    alignas(MP__CACHE_LINE) _Atomic(mp__pool_job *) head; /* atomic: Treiber stack top */
    _Atomic uint64_t pushed; /* atomic: jobs ever pushed (stats), on the line pushers own */
} mp__pool_inject;

void mp__pool_inject_init(mp__pool_inject *q);
bool mp__pool_inject_push(mp__pool_inject *q, mp__pool_job *job);
mp__pool_job *mp__pool_inject_take_all(mp__pool_inject *q);
bool mp__pool_inject_is_empty(mp__pool_inject *q);

/* pool.c */

typedef struct mp__pool_worker {
    mp__pool_deque deque;
    alignas(MP__CACHE_LINE) mp_pool *pool; /* immutable */
    uint32_t index;                        /* immutable */
    uint64_t rng;                          /* owner only: victim choice */
    _Atomic uint64_t stolen;               /* atomic: written by owner, read by stats */
    _Atomic int tid;                       /* atomic: kernel thread id once started, 0 before */
    mp__pool_spin_latch terminate;         /* set once by mp_pool_free */
    pthread_t thread;                      /* guarded by pool->spawn_mu */
    bool started;                          /* guarded by pool->spawn_mu */
} mp__pool_worker;

struct mp_pool {
    mp__pool_sleep sleep;
    mp__pool_inject inject;
    alignas(MP__CACHE_LINE) _Atomic unsigned spawned; /* atomic: slots handed to a spawn,
                                                            written under spawn_mu */
    _Atomic unsigned started; /* atomic: threads running, written under spawn_mu */
    unsigned nworkers;        /* immutable: slots, the caller's included */
    unsigned nthreads;        /* immutable: slots 0 .. nthreads - 1 get a thread each */
    bool caller_slot;         /* immutable: slot nthreads (the last) is mp_pool_call's caller's */
    size_t stack_size;        /* immutable: 0 = the system default */
    unsigned fail_spawn_nth;  /* immutable: testhook.c */
    unsigned spawn_publish_delay_us; /* immutable: testhook.c */
    mp__pool_worker *workers;        /* immutable pointer: nworkers slots */
    /* Held by the outside thread that works in the caller slot, for the length of its call.
     * Lock and unlock order one holder's use of the slot's deque and rng before the next's. */
    pthread_mutex_t caller_mu;
    _Atomic uint64_t caller_calls; /* atomic: stats, calls that ran in the caller slot */
    pthread_mutex_t spawn_mu;
    bool stopping;           /* guarded by spawn_mu */
    unsigned spawn_attempts; /* guarded by spawn_mu */
    unsigned spawn_failures; /* guarded by spawn_mu */
    int last_spawn_error;    /* guarded by spawn_mu */
};

/* The worker running on this thread, NULL on threads that are not pool workers. */
extern _Thread_local mp__pool_worker *mp__pool_current;

void mp__pool_wait_until(mp__pool_worker *w, mp__pool_core_latch *latch);
void mp__pool_spawn_for_jobs(mp_pool *pool, uint64_t counters, uint32_t njobs);

static inline void mp__pool_execute(mp__pool_job *job)
{
    job->execute(job);
}

/* After posting njobs, with the counter word the poster saw: lazy thread start (pool.c). */
static inline void mp__pool_notify_jobs(mp_pool *pool, uint64_t counters, uint32_t njobs)
{
    /* Relaxed: a hint that every slot has been tried; the spawn path decides under spawn_mu. */
    if (mp__unlikely(atomic_load_explicit(&pool->spawned, memory_order_relaxed) < pool->nthreads))
        mp__pool_spawn_for_jobs(pool, counters, njobs);
}

/* Owner: pushes a job on w's deque and tells the sleep protocol. -ENOMEM: not pushed. */
static inline int mp__pool_worker_push(mp__pool_worker *w, mp__pool_job *job)
{
    bool was_empty;
    int err = mp__pool_deque_push_owner(&w->deque, job, &was_empty);
    if (mp__unlikely(err != 0))
        return err;
    mp_pool *pool = w->pool;
    uint64_t c = mp__pool_sleep_new_internal_jobs(&pool->sleep, 1, was_empty);
    mp__pool_notify_jobs(pool, c, 1);
    return 0;
}
bool mp__pool_has_injected(mp_pool *pool);

/* testhook.c, probes for the pool's suites: the owner's current deque capacity (tests watch
 * it grow), and the kernel thread id of worker `index` (0 if it has not started). */
size_t mp__test_pool_deque_capacity(mp__pool_deque *d);
int mp__test_pool_worker_tid(mp_pool *pool, unsigned index);

#endif /* MP_POOL_INTERNAL_H */
