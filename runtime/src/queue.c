/* queue.c: the per-worker run queue, a fixed ring that one owner pushes to and pops from
 * (FIFO) while other workers steal half of it.
 *
 * head packs two 32-bit indices, [steal | real]. real is where the next pop or steal starts;
 * steal trails it while a thief is copying the slots it claimed, so that the owner does not
 * overwrite them. tail is written by the owner only. All index arithmetic is modulo 2^32 and
 * the ring index is (i & MASK).
 *
 * Why 32-bit halves, not 16: the head is updated by CAS, and a thief reads it, may be
 * preempted, then CASes. If the indices could wrap back to the same value meanwhile, the CAS
 * would succeed on a stale head (ABA) and the thief would take slots that were popped and
 * refilled. 16-bit halves wrap after 65,536 pushes, a few hundred microseconds of spawning;
 * 32-bit halves after 4 billion, far beyond any preemption. The tail is 32 bits as well so
 * that tail - head is computed in one width.
 *
 * A steal has three phases (Tokio's queue.rs; Volt's "claim, copy, release"):
 *   claim:   CAS head [s|r] -> [s|r+n]      the thief owns slots r..r+n-1
 *   copy:    the slots into the thief's own ring
 *   release: CAS head [s|r'] -> [r'|r']     r' may have moved on by owner pops meanwhile
 * Only one steal per victim runs at a time: a thief that sees steal != real backs off.
 * The owner's push checks room against steal, not real, so claimed slots are never reused
 * before they are copied.
 *
 * An overflow at shutdown, and the tasks it must not lose:
 *
 *   owner (a worker, pushing a yielded task)      shutdown
 *                                                 closes the global queue
 *   ring full: move half + the task there
 *   -> refused; drop their queue references,
 *      "the registry will cancel them"            cancels what the registry holds
 *   -> a task that never suspended (or only yielded) is in no registry: neither completed
 *      nor cancelled, its joiner blocks for ever
 *
 * Fixed: mp__queue_push_owner() hands the refused chain back to the caller, who keeps it
 * (worker.c's orphans) for shutdown to cancel once the worker thread has left.
 */
#include "internal.h"

#define MASK ((uint32_t)MP_QUEUE_CAPACITY - 1)
#define HALF ((uint32_t)MP_QUEUE_CAPACITY / 2)

_Static_assert(offsetof(mp__queue, tail) - offsetof(mp__queue, head) >= MP__CACHE_LINE,
               "head and tail share a cache line");
_Static_assert(offsetof(mp__queue, slots) - offsetof(mp__queue, tail) >= MP__CACHE_LINE,
               "tail and slots share a cache line");

static inline uint64_t pack(uint32_t steal, uint32_t real)
{
    return ((uint64_t)steal << 32) | real;
}

static inline uint32_t steal_of(uint64_t h)
{
    return (uint32_t)(h >> 32);
}

static inline uint32_t real_of(uint64_t h)
{
    return (uint32_t)h;
}

void mp__queue_init(mp__queue *q)
{
    atomic_init(&q->head, 0);
    atomic_init(&q->tail, 0);
    for (uint32_t i = 0; i < MP_QUEUE_CAPACITY; i++)
        atomic_init(&q->slots[i], NULL);
}

/* Slots are atomics accessed relaxed: the indices order them (a slot is published by the
 * release store of tail and handed back by the release CAS of head). Being atomic keeps the
 * one benign overlap defined: a thief may read a slot and then fail its claim. */
static inline mp_task *slot_load(mp__queue *q, uint32_t i)
{
    return atomic_load_explicit(&q->slots[i & MASK], memory_order_relaxed);
}

static inline void slot_store(mp__queue *q, uint32_t i, mp_task *t)
{
    atomic_store_explicit(&q->slots[i & MASK], t, memory_order_relaxed);
}

/* Move the oldest half plus t to the global queue in one lock. false: a thief moved head
 * meanwhile; the caller retries the push. */
static bool push_overflow(mp__queue *q, mp_task *t, uint32_t real, uint32_t tail, mp__inject *inj,
                          bool *closed)
{
    if (tail - real != MP_QUEUE_CAPACITY)
        MP__UNREACHABLE("overflow with %u queued", tail - real);
    uint64_t prev = pack(real, real);
    /* Claim the oldest half as if we were a thief that copies nothing. Acquire: if it
     * succeeds we read slots that earlier thieves' release CASes handed back; release
     * pairs with the acquire head loads of thieves (they see our claim and skip these slots). */
    if (!atomic_compare_exchange_strong_explicit(&q->head, &prev, pack(real + HALF, real + HALF),
                                                 memory_order_acq_rel, memory_order_relaxed))
        return false;
    mp_task *first = slot_load(q, real);
    mp_task *last = first;
    for (uint32_t i = 1; i < HALF; i++) {
        mp_task *next = slot_load(q, real + i);
        last->next = next;
        last = next;
    }
    last->next = t;
    t->next = NULL;
    *closed = !mp__inject_push_batch(inj, first, t, HALF + 1);
    return true;
}

mp_task *mp__queue_push_owner(mp__queue *q, mp_task *t, mp__inject *inj, bool *overflowed)
{
    *overflowed = false;
    /* Relaxed: only this thread writes tail. */
    uint32_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    for (;;) {
        /* Acquire: pairs with the release CAS that ends a steal in steal_claim_copy() (and
         * the pop's in mp__queue_pop_owner()), so the slots a thief has finished copying are
         * free to overwrite. */
        uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
        uint32_t steal = steal_of(head), real = real_of(head);
        if (tail - steal < MP_QUEUE_CAPACITY) {
            slot_store(q, tail, t);
            /* Release: publishes the slot; pairs with the acquire tail load in
             * mp__queue_steal_into(). */
            atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
            return NULL;
        }
        bool closed = false;
        if (steal != real) {
            /* A thief is copying; it will free room, but we cannot move its half. */
            t->next = NULL;
            closed = !mp__inject_push(inj, t);
        } else if (!push_overflow(q, t, real, tail, inj, &closed)) {
            continue;
        } else {
            t = slot_load(q, real); /* head of the moved chain, for the closed case */
        }
        *overflowed = true;
        /* Shutting down: the chain is the caller's, queue references and all. Not every task
         * in it is in the registry (one that never suspended, or only yielded, is not), so
         * dropping the references here would lose those tasks. */
        return closed ? t : NULL;
    }
}

mp_task *mp__queue_pop_owner(mp__queue *q)
{
    /* Acquire: pairs with the release CASes of thieves, as in push. */
    uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
    uint32_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
    for (;;) {
        uint32_t steal = steal_of(head), real = real_of(head);
        if (real == tail)
            return NULL;
        uint64_t next = steal == real ? pack(real + 1, real + 1) : pack(steal, real + 1);
        /* acq_rel: the pop and a thief's claim of the same slot are ordered by this CAS; it
         * pairs with the claim and release CASes in steal_claim_copy(). A failed CAS reloads
         * head (acquire, as above). */
        if (atomic_compare_exchange_weak_explicit(&q->head, &head, next, memory_order_acq_rel,
                                                  memory_order_acquire))
            return slot_load(q, real);
    }
}

/* Claim and copy half of src into dst starting at dst_tail. Returns the number copied. */
static uint32_t steal_claim_copy(mp__queue *src, mp__queue *dst, uint32_t dst_tail)
{
    /* Acquire: pairs with the release CASes on src->head by its owner and other thieves. */
    uint64_t prev = atomic_load_explicit(&src->head, memory_order_acquire);
    uint32_t n, first;
    for (;;) {
        uint32_t steal = steal_of(prev), real = real_of(prev);
        if (steal != real)
            return 0; /* another thief is mid-steal */
        /* Acquire: pairs with the release tail store in mp__queue_push_owner(); the slots
         * below tail are written. */
        uint32_t tail = atomic_load_explicit(&src->tail, memory_order_acquire);
        n = tail - real;
        n -= n / 2;
        if (n == 0 || n > HALF)
            return 0; /* empty, or a stale head/tail pair: give up, the caller retries later */
        /* acq_rel: the claim publishes that slots real..real+n-1 are ours (pairs with the
         * acquire head loads of the owner and other thieves). */
        if (atomic_compare_exchange_weak_explicit(&src->head, &prev, pack(steal, real + n),
                                                  memory_order_acq_rel, memory_order_acquire)) {
            first = real;
            break;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        slot_store(dst, dst_tail + i, slot_load(src, first + i));
    /* Release the claimed slots: steal catches up with real, wherever real is now. */
    uint64_t cur = pack(first, first + n);
    for (;;) {
        uint32_t real = real_of(cur);
        /* Release: our slot reads are done before the owner may overwrite them; pairs with
         * the acquire head load in mp__queue_push_owner(). */
        if (atomic_compare_exchange_weak_explicit(&src->head, &cur, pack(real, real),
                                                  memory_order_acq_rel, memory_order_acquire))
            return n;
        if (steal_of(cur) == real_of(cur))
            MP__UNREACHABLE("steal released twice: head %#llx", (unsigned long long)cur);
    }
}

mp_task *mp__queue_steal_into(mp__queue *src, mp__queue *dst, uint32_t *n_out)
{
    *n_out = 0;
    /* dst is the caller's own ring. Relaxed tail: we are its only writer. Acquire head:
     * pairs with thieves' release CASes on dst, as in push. */
    uint32_t dst_tail = atomic_load_explicit(&dst->tail, memory_order_relaxed);
    uint32_t dst_steal = steal_of(atomic_load_explicit(&dst->head, memory_order_acquire));
    if (dst_tail - dst_steal > HALF)
        return NULL; /* no room for half of a full ring */
    uint32_t n = steal_claim_copy(src, dst, dst_tail);
    if (n == 0)
        return NULL;
    *n_out = n;
    /* The last copied task is returned; the others become visible in dst. */
    n--;
    mp_task *ret = slot_load(dst, dst_tail + n);
    if (n > 0) {
        /* Release: publishes the copied slots; pairs with the acquire tail load of thieves
         * stealing from dst. */
        atomic_store_explicit(&dst->tail, dst_tail + n, memory_order_release);
    }
    return ret;
}

uint32_t mp__queue_len(mp__queue *q)
{
    /* A snapshot for heuristics (pending work, stats). Acquire: pairs with the head CASes. */
    uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
    /* Acquire: pairs with the release tail store in mp__queue_push_owner(). */
    uint32_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    uint32_t n = tail - real_of(head);
    return n > MP_QUEUE_CAPACITY ? 0 : n; /* a torn snapshot by a non-owner */
}

bool mp__queue_is_empty(mp__queue *q)
{
    return mp__queue_len(q) == 0;
}
