/* idle.c: which workers search for work, which sleep, and whom to wake.
 *
 * state packs two counts changed only by atomic RMW: searching (workers looking for work to
 * steal) and unparked (workers not asleep). A parked worker has its bit set in the parked
 * bitmap; a notifier that picks it clears the bit and counts it as unparked and searching
 * before waking it, so the woken worker starts as a searcher. Parking and picking happen
 * under mu (the slow path: both go on to a futex call anyway); the common "does anyone need
 * waking?" check is one lock-free load.
 *
 * Worker slots whose thread has not started yet count as parked: picking one means starting
 * its thread (lazy spawning). A slot whose thread could not be created goes back to the
 * unstarted ones (the retry set) and is tried again by a later notification, so a runtime
 * never stays smaller than configured because of one transient pthread_create failure.
 * Slots handed out for starting are counted in `spawning` until the starter has settled them,
 * so that shutdown can wait for every thread that may still appear.
 *
 * The lost wake-up this prevents (store buffering):
 *
 *   notifier                                 worker going to sleep
 *   push task T                              checks every queue: empty
 *   load state: searching=1, skip wake       (it was the last searcher)
 *                                            state: searching 1 -> 0, parks
 *   -> T sits in a queue, every worker asleep.
 *
 * Fixed with a seq_cst fence on each side:
 *
 *   notifier (mp__runtime_notify)            worker (transition_to_parked + recheck)
 *   push task T                              RMW state: searching--, unparked--
 *   fence seq_cst                  (A)       fence seq_cst                        (B)
 *   load state                               if it was the last searcher:
 *   if searching == 0 and unparked <           look at every queue again
 *      workers: wake one                       (mp__runtime_work_pending)
 *
 * Either the notifier's load sees the decrement (and wakes someone), or the worker's re-check
 * sees T (and wakes someone, possibly itself). Plain acquire/release cannot give this: each
 * side stores then loads a different location, which is exactly the shape that needs a full
 * fence. A worker that parks without being the last searcher needs no re-check: a searcher
 * still exists, and the last searcher re-checks after it (Tokio's "last searcher must
 * notify"; a searcher that finds work wakes the next one, see worker.c). This rests on every
 * worker trying to become a searcher before it parks, even one with nobody to steal from
 * (steal_work() in worker.c): the cap on searchers can refuse it only while another searcher
 * exists, never for the last one.
 *
 * Whom to wake: the lowest parked worker, except that the one asleep in the loop as its
 * driver goes last, after starting a worker that has no thread yet. Waking it costs the loop's
 * eventfd and a trip out of uv_run (about 28 µs p50 on the 2-vCPU VMs, against 18 µs for a futex
 * wake, measured with loadtest/runtime/wake_probe.c), and it is already woken by the loop itself
 * for I/O and timers. Which parked worker is woken does not matter to the protocol above, so the
 * driver index is only a hint (relaxed): a stale one costs at most the slower wake.
 */
#include "internal.h"

#define SEARCH_ONE ((uint64_t)1)
#define UNPARK_ONE ((uint64_t)1 << 32)

static inline unsigned searching_of(uint64_t s)
{
    return (unsigned)(s & 0xffffffffu);
}

static inline unsigned unparked_of(uint64_t s)
{
    return (unsigned)(s >> 32);
}

int mp__idle_init(mp__idle *idle, unsigned workers)
{
    idle->workers = workers;
    idle->words = (workers + 63) / 64;
    if (idle->words > 64)
        return -EINVAL; /* the summary word indexes at most 64 bitmap words: 4096 workers */
    idle->parked = calloc(idle->words, sizeof *idle->parked);
    if (!idle->parked)
        return -ENOMEM;
    int rc = pthread_mutex_init(&idle->mu, NULL);
    if (rc != 0) {
        free(idle->parked);
        return -rc;
    }
    idle->summary = 0;
    idle->started = 0;
    idle->retry = 0;
    idle->retry_base = 0;
    idle->closed = false;
    atomic_init(&idle->spawning, 0);
    atomic_init(&idle->state, 0);
    atomic_init(&idle->failed, 0);
    atomic_init(&idle->driver, UINT_MAX);
    return 0;
}

void mp__idle_set_driver(mp__idle *idle, unsigned idx)
{
    /* Relaxed: a hint, see the top of this file. */
    atomic_store_explicit(&idle->driver, idx, memory_order_relaxed);
}

void mp__idle_destroy(mp__idle *idle)
{
    pthread_mutex_destroy(&idle->mu);
    free(idle->parked);
}

static bool should_wake(mp__idle *idle, uint64_t s)
{
    return searching_of(s) == 0 && unparked_of(s) < idle->workers;
}

/* Caller holds mu: an unstarted slot, a failed one first. Counts it as spawning. */
static bool take_unstarted_locked(mp__idle *idle, unsigned *idx)
{
    if (idle->closed)
        return false;
    if (idle->retry != 0) {
        *idx = idle->retry_base + (unsigned)__builtin_ctzll(idle->retry);
        idle->retry &= idle->retry - 1;
    } else if (idle->started < idle->workers) {
        *idx = idle->started++;
    } else {
        return false;
    }
    /* Relaxed: written under mu; shutdown reads it with acquire after settling, see
     * mp__idle_spawn_settled(). */
    atomic_fetch_add_explicit(&idle->spawning, 1, memory_order_relaxed);
    return true;
}

/* Caller holds mu. Pick the lowest parked worker but the driver, or the driver only with
 * allow_driver: O(1) through the summary word. */
static bool take_parked_locked(mp__idle *idle, unsigned *idx, bool allow_driver)
{
    if (idle->summary == 0)
        return false;
    unsigned w = (unsigned)__builtin_ctzll(idle->summary);
    uint64_t bits = atomic_load_explicit(&idle->parked[w], memory_order_relaxed);
    unsigned b = (unsigned)__builtin_ctzll(bits);
    /* Relaxed: a hint, see the top of this file. */
    if (w * 64 + b == atomic_load_explicit(&idle->driver, memory_order_relaxed)) {
        uint64_t more = idle->summary & ~((uint64_t)1 << w);
        if (bits & (bits - 1)) {
            b = (unsigned)__builtin_ctzll(bits & (bits - 1));
        } else if (more != 0) {
            w = (unsigned)__builtin_ctzll(more);
            bits = atomic_load_explicit(&idle->parked[w], memory_order_relaxed);
            b = (unsigned)__builtin_ctzll(bits);
        } else if (!allow_driver) {
            return false;
        }
    }
    bits &= ~((uint64_t)1 << b);
    /* Relaxed: mu orders writers; readers outside mu (mp__idle_is_parked) take mu too. */
    atomic_store_explicit(&idle->parked[w], bits, memory_order_relaxed);
    if (bits == 0)
        idle->summary &= ~((uint64_t)1 << w);
    *idx = w * 64 + b;
    return true;
}

mp__notify_kind mp__idle_worker_to_notify(mp__idle *idle, unsigned *idx, bool may_spawn)
{
    /* seq_cst load: the (A) side of the protocol above; the caller issued fence (A). */
    if (!should_wake(idle, atomic_load_explicit(&idle->state, memory_order_seq_cst)))
        return MP__NOTIFY_NONE;
    pthread_mutex_lock(&idle->mu);
    mp__notify_kind kind = MP__NOTIFY_NONE;
    /* seq_cst: re-read under mu; pairs with the RMWs of mp__idle_transition_to_parked(), as
     * the first load does. */
    if (should_wake(idle, atomic_load_explicit(&idle->state, memory_order_seq_cst))) {
        /* The driver last: after a worker not started yet, which will sleep on its futex
         * afterwards (one thread start, then cheap wakes instead of the loop's eventfd). */
        if (take_parked_locked(idle, idx, false))
            kind = MP__NOTIFY_UNPARK;
        else if (may_spawn && take_unstarted_locked(idle, idx))
            kind = MP__NOTIFY_SPAWN;
        else if (take_parked_locked(idle, idx, true))
            kind = MP__NOTIFY_UNPARK;
        if (kind != MP__NOTIFY_NONE) {
            /* seq_cst: part of the (A)/(B) protocol above. */
            atomic_fetch_add_explicit(&idle->state, SEARCH_ONE | UNPARK_ONE, memory_order_seq_cst);
        }
    }
    pthread_mutex_unlock(&idle->mu);
    return kind;
}

bool mp__idle_take_slot(mp__idle *idle, unsigned *idx)
{
    pthread_mutex_lock(&idle->mu);
    bool got = take_unstarted_locked(idle, idx);
    if (got) {
        /* seq_cst: the new worker starts as a searcher; pairs with the notifiers' loads and the
         * parkers' RMWs, as in mp__idle_worker_to_notify(). */
        atomic_fetch_add_explicit(&idle->state, SEARCH_ONE | UNPARK_ONE, memory_order_seq_cst);
    }
    pthread_mutex_unlock(&idle->mu);
    return got;
}

void mp__idle_spawn_failed(mp__idle *idle, unsigned idx)
{
    pthread_mutex_lock(&idle->mu);
    atomic_fetch_add_explicit(&idle->failed, 1, memory_order_relaxed);
    if (idx - idle->retry_base >= 64) /* the retry set is one word: keep the lowest 64 */
        idle->retry = 0, idle->retry_base = idx & ~63u;
    idle->retry |= (uint64_t)1 << (idx - idle->retry_base);
    /* seq_cst: the slot leaves the unparked count, as in mp__idle_transition_to_parked();
     * pairs with the notifiers' loads in mp__idle_worker_to_notify(). */
    atomic_fetch_sub_explicit(&idle->state, SEARCH_ONE | UNPARK_ONE, memory_order_seq_cst);
    pthread_mutex_unlock(&idle->mu);
}

void mp__idle_spawn_settled(mp__idle *idle)
{
    /* Release: the slot's final spawn_state (and its pthread_t) is written before this;
     * pairs with the acquire load in mp__idle_spawning(). */
    atomic_fetch_sub_explicit(&idle->spawning, 1, memory_order_release);
}

unsigned mp__idle_spawning(mp__idle *idle)
{
    /* Acquire: pairs with the release in mp__idle_spawn_settled(). */
    return atomic_load_explicit(&idle->spawning, memory_order_acquire);
}

unsigned mp__idle_close(mp__idle *idle)
{
    pthread_mutex_lock(&idle->mu);
    idle->closed = true;
    unsigned n = idle->started;
    pthread_mutex_unlock(&idle->mu);
    return n;
}

bool mp__idle_transition_to_searching(mp__idle *idle)
{
    /* seq_cst: searching is read by notifiers in the (A)/(B) protocol. The cap is a soft
     * limit (two workers may pass the check together), as in Tokio. */
    uint64_t s = atomic_load_explicit(&idle->state, memory_order_seq_cst);
    if (2 * searching_of(s) >= idle->workers)
        return false;
    atomic_fetch_add_explicit(&idle->state, SEARCH_ONE, memory_order_seq_cst);
    return true;
}

bool mp__idle_transition_from_searching(mp__idle *idle)
{
    /* seq_cst: a notifier that reads searching == 0 after this must wake someone (A)/(B). */
    uint64_t prev = atomic_fetch_sub_explicit(&idle->state, SEARCH_ONE, memory_order_seq_cst);
    if (searching_of(prev) == 0)
        MP__UNREACHABLE("searching count underflow, state %#llx", (unsigned long long)prev);
    if (searching_of(prev) != 1)
        return false;
    /* (B'): the last searcher's decrement before its look at the queues in leave_searching()
     * (worker.c); pairs with fence (A) in notify() (runtime.c). Here rather than
     * there: GCC refuses a fence inlined into the worker loop under ThreadSanitizer. */
    atomic_thread_fence(memory_order_seq_cst);
    return true;
}

bool mp__idle_transition_to_parked(mp__idle *idle, unsigned idx, bool searching)
{
    pthread_mutex_lock(&idle->mu);
    uint64_t dec = UNPARK_ONE | (searching ? SEARCH_ONE : 0);
    /* seq_cst: the RMW before fence (B) in the protocol above. */
    uint64_t prev = atomic_fetch_sub_explicit(&idle->state, dec, memory_order_seq_cst);
    unsigned w = idx / 64;
    atomic_store_explicit(&idle->parked[w],
                          atomic_load_explicit(&idle->parked[w], memory_order_relaxed) |
                              ((uint64_t)1 << (idx % 64)),
                          memory_order_relaxed);
    idle->summary |= (uint64_t)1 << w;
    pthread_mutex_unlock(&idle->mu);
    /* (B): orders the decrement before the caller's re-check of the queues; pairs with
     * fence (A) in mp__runtime_notify() (runtime.c). */
    atomic_thread_fence(memory_order_seq_cst);
    return searching && searching_of(prev) == 1;
}

bool mp__idle_unpark_self(mp__idle *idle, unsigned idx)
{
    bool was_parked = false;
    pthread_mutex_lock(&idle->mu);
    unsigned w = idx / 64;
    uint64_t bit = (uint64_t)1 << (idx % 64);
    uint64_t bits = atomic_load_explicit(&idle->parked[w], memory_order_relaxed);
    if (bits & bit) {
        bits &= ~bit;
        atomic_store_explicit(&idle->parked[w], bits, memory_order_relaxed);
        if (bits == 0)
            idle->summary &= ~((uint64_t)1 << w);
        /* seq_cst: pairs with the notifiers' loads in mp__idle_worker_to_notify() (the
         * (A)/(B) protocol at the top). */
        atomic_fetch_add_explicit(&idle->state, UNPARK_ONE, memory_order_seq_cst);
        was_parked = true;
    }
    pthread_mutex_unlock(&idle->mu);
    return was_parked;
}

bool mp__idle_is_parked(mp__idle *idle, unsigned idx)
{
    pthread_mutex_lock(&idle->mu);
    bool parked = atomic_load_explicit(&idle->parked[idx / 64], memory_order_relaxed) &
                  ((uint64_t)1 << (idx % 64));
    pthread_mutex_unlock(&idle->mu);
    return parked;
}
