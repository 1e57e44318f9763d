/* blocking.c: the blocking pool, threads apart from the workers for functions that may block
 * (a disk read, getaddrinfo, a library that sleeps), as Tokio's spawn_blocking.
 *
 * A job is a task like any other (mp_task, its state word, its join handle), so a task awaits
 * it with mp_join_poll() and a plain thread with mp_join(); only its queue differs. It is never
 * put on a worker's queue: it waits in this pool's FIFO and is run once, start to end, by one of
 * the pool's threads (mp__task_run_blocking() in task.c), which completes it and wakes its
 * joiner. A job is never idle (SCHEDULED while queued, RUNNING while it runs), so
 * mp_task_cancel() never submits it to a worker: it only marks it, and a job marked while
 * queued is cancelled when a thread takes it, without fn being called.
 *
 * Threads start on demand, up to max_threads, and leave after keep_alive_ns without a job.
 * Everything is under one mutex, as in Tokio's pool: a job costs one lock to queue and one to
 * take, small against what is worth moving off a worker.
 *
 * The stranded job this must prevent:
 *
 *   spawner                                   idle thread
 *                                             idle++, wait for a job (timed)
 *   sees idle > notified: signal, no start
 *                                             times out: no job seen, idle--, exits
 *   push job                                  -> nobody takes the job
 *
 * Fixed by doing everything under the mutex, queue first: the spawner pushes the job before it
 * looks at who is idle, and a thread re-checks the queue under the mutex before it counts itself
 * idle and again before it leaves, so a thread that leaves has seen an empty queue after every
 * push it was counted for. `notified` counts signals not yet taken, so that a burst of jobs
 * starts threads once the idle ones have all been signalled (Tokio's num_notify).
 *
 * Shutdown (mp__blocking_shutdown): closed under the mutex, so no job is queued after it; the
 * queued ones are cancelled there (their fn never runs), and running ones are waited for up to
 * the drain timeout. Threads still running a job then are left to finish; mp__blocking_destroy()
 * (from mp_runtime_free()) waits for every thread to have left before the memory goes. */
#include "internal.h"

#include <sys/time.h>

enum { DEFAULT_MAX_THREADS = 512 };
/* A thread that has just finished a job looks for the next one this long, yielding, before it
 * sleeps on the condition variable: a task that awaits jobs one after another (a file read
 * after a file read) then finds a thread awake instead of paying a futex wake-up, which costs
 * tens of microseconds on a VM whose idle vCPU halted (the fork-join pool's idle workers stay
 * awake for the same reason). A yield, not a pause loop, so a busy machine loses little. */
#define SPIN_NS               50000u
#define DEFAULT_KEEP_ALIVE_MS 10000u

int mp__blocking_init(mp__blocking *b, const mp_config *cfg)
{
    memset(b, 0, sizeof *b);
    b->max_threads = cfg->blocking_threads ? cfg->blocking_threads : DEFAULT_MAX_THREADS;
    b->keep_alive_ms =
        cfg->blocking_keep_alive_ms ? cfg->blocking_keep_alive_ms : DEFAULT_KEEP_ALIVE_MS;
    b->stack_size = cfg->stack_size;
    int rc = pthread_mutex_init(&b->mu, NULL);
    if (rc != 0)
        return -rc;
    pthread_condattr_t ca;
    if ((rc = pthread_condattr_init(&ca)) != 0)
        goto out_mu;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&b->work, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        goto out_mu;
    if ((rc = pthread_cond_init(&b->done, NULL)) != 0)
        goto out_work;
    return 0;

out_work:
    pthread_cond_destroy(&b->work);
out_mu:
    pthread_mutex_destroy(&b->mu);
    return -rc;
}

/* Relaxed stores of counters read lock-free by mp_runtime_stats_get(); written under mu only. */
static void set(_Atomic unsigned *v, unsigned x)
{
    atomic_store_explicit(v, x, memory_order_relaxed);
}

static unsigned get(const _Atomic unsigned *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void deadline_after(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static void *thread_main(void *arg)
{
    mp__blocking *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        mp_task *t = b->head;
        if (t != NULL) {
            b->head = t->next;
            if (b->head == NULL)
                b->tail = NULL;
            t->next = NULL;
            set(&b->queued, get(&b->queued) - 1);
            set(&b->running, get(&b->running) + 1);
            pthread_mutex_unlock(&b->mu);
            mp__task_run_blocking(t);
            pthread_mutex_lock(&b->mu);
            set(&b->running, get(&b->running) - 1);
            if (b->closed && get(&b->running) == 0)
                pthread_cond_broadcast(&b->done);
            if (b->head == NULL && !b->closed) {
                /* Counted in spinning, a pusher leaves the next job to us (see
                 * mp__blocking_push()); we look at the queue again under the mutex after. */
                b->spinning++;
                pthread_mutex_unlock(&b->mu);
                uint64_t until = mp__now_ns() + SPIN_NS;
                while (get(&b->queued) == 0 && mp__now_ns() < until)
                    sched_yield();
                pthread_mutex_lock(&b->mu);
                b->spinning--;
            }
            continue;
        }
        if (b->closed)
            break;
        set(&b->idle, get(&b->idle) + 1);
        struct timespec until;
        deadline_after(&until, b->keep_alive_ms);
        int rc = 0;
        while (b->head == NULL && !b->closed && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&b->work, &b->mu, &until);
        set(&b->idle, get(&b->idle) - 1);
        if (b->notified != 0)
            b->notified--;
        if (rc == ETIMEDOUT && b->head == NULL)
            break; /* idle for the keep-alive: shrink */
    }
    set(&b->threads, get(&b->threads) - 1);
    if (get(&b->threads) == 0)
        pthread_cond_broadcast(&b->done);
    /* Nothing of b is touched after this unlock: mp__blocking_destroy() may free it as soon
     * as it sees threads at 0 under the mutex. */
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Under mu: start one more thread. */
static int start_thread_locked(mp__blocking *b)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return -rc;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (b->stack_size)
        pthread_attr_setstacksize(&attr, b->stack_size);
    pthread_t th;
    if (b->fail_next_start) {
        b->fail_next_start = false;
        rc = EAGAIN;
    } else {
        rc = pthread_create(&th, &attr, thread_main, b);
    }
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        b->spawn_failures++;
        return -rc;
    }
    pthread_setname_np(th, "magpie-blocking");
    set(&b->threads, get(&b->threads) + 1);
    b->threads_started++;
    return 0;
}

int mp__blocking_push(mp__blocking *b, mp_task *t)
{
    pthread_mutex_lock(&b->mu);
    if (b->closed) {
        pthread_mutex_unlock(&b->mu);
        return -ESHUTDOWN;
    }
    t->next = NULL;
    if (b->tail)
        b->tail->next = t;
    else
        b->head = t;
    b->tail = t;
    set(&b->queued, get(&b->queued) + 1);
    b->jobs++;
    int rc = 0;
    if (get(&b->queued) <= b->spinning) {
        /* A thread that has just finished a job is looking: it takes this one. */
    } else if (get(&b->idle) > b->notified) {
        b->notified++;
        pthread_cond_signal(&b->work);
    } else if (get(&b->threads) < b->max_threads) {
        rc = start_thread_locked(b);
        if (rc != 0 && get(&b->threads) != 0)
            rc = 0; /* a running thread takes it when it is done */
    }
    if (rc != 0) {
        /* No thread at all to run it: take it back, the spawn fails. It is the last one
         * queued, and nobody can have taken it (no thread). */
        mp_task **pp = &b->head;
        mp_task *prev = NULL;
        while (*pp != t) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        *pp = NULL;
        b->tail = prev;
        set(&b->queued, get(&b->queued) - 1);
        b->jobs--;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

bool mp__blocking_busy(mp__blocking *b)
{
    return get(&b->queued) != 0 || get(&b->running) != 0;
}

int mp__blocking_shutdown(mp__blocking *b, unsigned timeout_ms)
{
    pthread_mutex_lock(&b->mu);
    b->closed = true;
    mp_task *queued = b->head;
    b->head = b->tail = NULL;
    set(&b->queued, 0);
    pthread_cond_broadcast(&b->work);
    pthread_mutex_unlock(&b->mu);
    /* Never started: cancelled, their joiners see -ECANCELED (the queue's reference serves as
     * the run reference, as for a task found in a run queue at shutdown). */
    while (queued != NULL) {
        mp_task *next = queued->next;
        queued->next = NULL;
        mp__task_shutdown_queued(queued);
        queued = next;
    }
    struct timespec until;
    if (timeout_ms)
        deadline_after(&until, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    while (get(&b->running) != 0 && rc != ETIMEDOUT) {
        if (timeout_ms) {
            /* done uses the default clock: wait in slices against our monotonic deadline. */
            struct timespec slice;
            clock_gettime(CLOCK_REALTIME, &slice);
            slice.tv_nsec += 10000000;
            if (slice.tv_nsec >= 1000000000) {
                slice.tv_sec++;
                slice.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&b->done, &b->mu, &slice);
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > until.tv_sec ||
                (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
                rc = ETIMEDOUT;
        } else {
            pthread_cond_wait(&b->done, &b->mu);
        }
    }
    bool left = get(&b->running) != 0;
    pthread_mutex_unlock(&b->mu);
    return left ? -ETIMEDOUT : 0;
}

void mp__blocking_destroy(mp__blocking *b)
{
    pthread_mutex_lock(&b->mu);
    b->closed = true;
    pthread_cond_broadcast(&b->work);
    while (get(&b->threads) != 0)
        pthread_cond_wait(&b->done, &b->mu);
    pthread_mutex_unlock(&b->mu);
    pthread_cond_destroy(&b->done);
    pthread_cond_destroy(&b->work);
    pthread_mutex_destroy(&b->mu);
}

void mp__blocking_stats(mp__blocking *b, mp_stats *out)
{
    out->blocking_threads = get(&b->threads);
    out->blocking_idle = get(&b->idle);
    out->blocking_queued = get(&b->queued);
    out->blocking_running = get(&b->running);
    pthread_mutex_lock(&b->mu);
    out->blocking_jobs = b->jobs;
    out->blocking_threads_started = b->threads_started;
    out->blocking_spawn_failures = b->spawn_failures;
    pthread_mutex_unlock(&b->mu);
}

/* The public calls. */

static int spawn_blocking(mp_runtime *rt, mp_task *t, bool joinable)
{
    if (!rt || !t || !t->vt || !t->vt->poll || mp__task_state_load(t, memory_order_relaxed) != 0)
        return -EINVAL;
    /* Relaxed: a hint; the exact cut-off is the pool's closed flag, under its mutex. */
    if (atomic_load_explicit(&rt->closed, memory_order_relaxed))
        return -ESHUTDOWN;
    if (!mp__task_transition_to_spawned(t, joinable))
        return -EINVAL;
    t->rt = rt; /* published with t by the pool's mutex */
    int rc = mp__blocking_push(&rt->blocking, t);
    if (rc != 0) {
        mp__task_transition_to_unspawned(t);
        return rc;
    }
    mp__worker *w = mp__tls_worker;
    if (w && w->rt == rt)
        mp__counter_add(&w->stats.spawned, 1);
    else
        atomic_fetch_add_explicit(&rt->spawned_outside, 1, memory_order_relaxed);
    return 0;
}

int mp_spawn_blocking_task(mp_runtime *rt, mp_task *task, bool joinable)
{
    return spawn_blocking(rt, task, joinable);
}

typedef struct fn_job {
    mp_task task;
    void (*fn)(void *);
    void *arg;
} fn_job;

static mp_poll fn_job_poll(mp_task *t, mp_context *cx)
{
    (void)cx;
    fn_job *j = mp_container_of(t, fn_job, task);
    j->fn(j->arg);
    return MP_READY;
}

static void fn_job_release(mp_task *t)
{
    free(mp_container_of(t, fn_job, task));
}

static const mp_task_vtable fn_job_vt = {
    .poll = fn_job_poll,
    .release = fn_job_release,
};

int mp_spawn_blocking(mp_runtime *rt, void (*fn)(void *arg), void *arg, mp_task **out)
{
    if (!fn)
        return -EINVAL;
    fn_job *j = malloc(sizeof *j);
    if (!j)
        return -ENOMEM;
    mp_task_init(&j->task, &fn_job_vt);
    j->fn = fn;
    j->arg = arg;
    int rc = spawn_blocking(rt, &j->task, out != NULL);
    if (rc != 0) {
        free(j);
        return rc;
    }
    if (out)
        *out = &j->task;
    return 0;
}

/* mp__bjob: a blocking job whose owner reads results after it completed (file.c, resolve.c).
 * The join handle alone cannot carry them: mp_join_poll() gives the handle up as it returns,
 * and the task's release may free it at once. So the job counts two owners, its task (until
 * the release) and the caller (until mp__bjob_put), and is destroyed by the last. An owner who
 * gives up (mp__bjob_abandon) cancels it (a job not started never runs) and lets go; a running
 * one finishes in its own storage and destroys itself. */
static void bjob_release(mp_task *t)
{
    mp__bjob_put(mp_container_of(t, mp__bjob, task));
}

static mp_poll bjob_poll_task(mp_task *t, mp_context *cx)
{
    (void)cx;
    mp__bjob *j = mp_container_of(t, mp__bjob, task);
    j->run(j);
    return MP_READY;
}

static const mp_task_vtable bjob_vt = {
    .poll = bjob_poll_task,
    .release = bjob_release,
};

int mp__bjob_spawn(mp_runtime *rt, mp__bjob *j)
{
    mp_task_init(&j->task, &bjob_vt);
    atomic_init(&j->refs, 2);
    int rc = spawn_blocking(rt, &j->task, true);
    if (rc != 0)
        atomic_store_explicit(&j->refs, 1, memory_order_relaxed); /* the caller's alone */
    return rc;
}

mp_poll mp__bjob_poll(mp__bjob *j, mp_context *cx, int *result)
{
    return mp_join_poll(&j->task, cx, result);
}

void mp__bjob_put(mp__bjob *j)
{
    /* acq_rel: the last owner sees everything the other wrote (the job's results, or the
     * caller's reads of them) before it destroys; pairs with itself in the other owner. */
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1)
        j->destroy(j);
}

void mp__bjob_abandon(mp__bjob *j)
{
    mp_task_cancel(&j->task);
    mp_detach(&j->task);
    mp__bjob_put(j);
}
