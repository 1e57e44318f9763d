/*
 * Per-worker Chase-Lev deque, in the C11 formulation of Le, Pop, Cohen and Zappa Nardelli
 * ("Correct and Efficient Work-Stealing for Weak Memory Models", PPoPP 2013). The owner pushes
 * and pops at the bottom (LIFO: the newest, smallest job runs next, with a warm cache);
 * thieves take from the top (FIFO: the oldest job, usually the biggest piece of the tree).
 *
 * top and bottom sit on separate cache lines: thieves CAS top, the owner writes bottom on
 * every push and pop. Both are 64-bit and only ever grow: at one push per nanosecond they
 * would take 292 years to wrap, so comparisons need no wrap-around arithmetic.
 *
 * When the buffer is full the owner doubles it: it copies the live slots into a new buffer and
 * publishes it. Thieves may still be reading the old buffer, so old buffers are chained and
 * freed only when the deque is destroyed (at most as much memory again as the live buffer).
 * If the allocation fails, push reports -ENOMEM and the caller runs the job itself: that is
 * the overflow path, and it keeps a join correct, only less parallel.
 *
 * The owner's push and pop run on every join, so they are inline in pool_internal.h; growth,
 * stealing and the rest live here.
 *
 * The race the protocol exists for is the last job, wanted by the owner's pop and a thief's
 * steal at once:
 *
 *   owner: pop                         thief: steal
 *   bottom = b - 1                     t = top
 *   t = top                            b = bottom
 *   (t == b - 1: the last one)         (t < b: one left)
 *   take slot b - 1                    take slot t
 *
 * Without ordering, each side's load can be satisfied before the other's store is visible (the
 * store-buffering shape), so both see the job as theirs and it runs twice. With the fixed
 * protocol:
 *
 *   owner: pop                         thief: steal
 *   bottom = b - 1                     t = top
 *   fence(seq_cst)           (A)       fence(seq_cst)         (B)
 *   t = top                            b = bottom
 *   if t == b - 1:                     if t < b:
 *     CAS(top, t, t + 1)                 CAS(top, t, t + 1)
 *
 * (A) and (B) are in one total order: if (A) comes first, the thief reads the lowered bottom and
 * sees the deque empty, or both race for the last job on the CAS of top, and exactly one wins.
 * If (B) comes first, the owner reads the thief's top or older and again the CAS decides.
 */
#include <errno.h>
#include <stdlib.h>

#include "pool/pool_internal.h"

_Static_assert(offsetof(mp__pool_deque, bottom) - offsetof(mp__pool_deque, top) >= MP__CACHE_LINE,
               "deque top and bottom must not share a cache line");

static mp__pool_deque_buf *buf_new(int64_t capacity)
{
    mp__pool_deque_buf *b = malloc(sizeof(*b) + (size_t)capacity * sizeof(_Atomic(mp__pool_job *)));
    if (b == NULL)
        return NULL;
    b->mask = capacity - 1;
    b->older = NULL;
    return b;
}

static size_t round_up_pow2(size_t n)
{
    size_t c = 2;
    while (c < n)
        c <<= 1;
    return c;
}

int mp__pool_deque_init(mp__pool_deque *d, size_t capacity)
{
    if (capacity == 0)
        capacity = MP__POOL_DEFAULT_CAPACITY;
    if (capacity > ((size_t)1 << 40))
        return -EINVAL;
    mp__pool_deque_buf *b = buf_new((int64_t)round_up_pow2(capacity));
    if (b == NULL)
        return -ENOMEM;
    /* Relaxed: the deque is published to other threads by pthread_create or by the pool
     * pointer they are handed, both of which synchronize. */
    atomic_init(&d->top, 0);
    atomic_init(&d->bottom, 0);
    atomic_init(&d->buf, b);
    return 0;
}

void mp__pool_deque_destroy(mp__pool_deque *d)
{
    /* Relaxed: by now every other thread that used the deque has been joined. */
    mp__pool_deque_buf *b = atomic_load_explicit(&d->buf, memory_order_relaxed);
    while (b != NULL) {
        mp__pool_deque_buf *older = b->older;
        free(b);
        b = older;
    }
    atomic_store_explicit(&d->buf, NULL, memory_order_relaxed);
}

/* Owner only: replaces the full buffer by one twice as large holding the jobs t..b-1. Returns
 * the new buffer, or NULL (and leaves the deque as it was) when out of memory. */
mp__pool_deque_buf *mp__pool_deque_grow_owner(mp__pool_deque *d, mp__pool_deque_buf *old, int64_t t,
                                              int64_t b)
{
    mp__pool_deque_buf *nb = buf_new((old->mask + 1) * 2);
    if (nb == NULL)
        return NULL;
    for (int64_t i = t; i < b; i++) {
        /* Relaxed: only the owner writes slots, and this is the owner. */
        mp__pool_job *j = atomic_load_explicit(&old->slots[i & old->mask], memory_order_relaxed);
        atomic_store_explicit(&nb->slots[i & nb->mask], j, memory_order_relaxed);
    }
    nb->older = old;
    /* Release: publishes the copied slots with the buffer; pairs with the acquire load of
     * buf in mp__pool_deque_steal() (deque.c). */
    atomic_store_explicit(&d->buf, nb, memory_order_release);
    return nb;
}

/* Any thread. Takes the oldest job into *out. */
mp__pool_steal mp__pool_deque_steal(mp__pool_deque *d, mp__pool_job **out)
{
    /* Acquire: observes the CAS of the previous taker (owner or thief), so our view of the
     * slots is no older than theirs; pairs with the CAS below and in mp__pool_deque_pop_owner()
     * (pool_internal.h). */
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    /* (B) seq_cst: orders the load of top before the load of bottom; pairs with fence (A)
     * in mp__pool_deque_pop_owner() (pool_internal.h). */
    mp__pool_fence_seq_cst();
    /* Acquire: observes the job published with this bottom; pairs with the release stores of
     * bottom in mp__pool_deque_push_owner() and mp__pool_deque_pop_owner()
     * (pool_internal.h). */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
    if (t >= b)
        return MP__POOL_STEAL_EMPTY;
    /* Acquire: observes the slots copied into a grown buffer; pairs with the release store
     * in mp__pool_deque_grow_owner() (deque.c). */
    mp__pool_deque_buf *a = atomic_load_explicit(&d->buf, memory_order_acquire);
    /* Relaxed: the value is used only if the CAS below proves slot t was still ours to take,
     * and then it is the value published by the bottom we read. */
    mp__pool_job *job = atomic_load_explicit(&a->slots[t & a->mask], memory_order_relaxed);
    /* seq_cst: decides the race for slot t against the owner's pop and other thieves;
     * pairs with the CAS in mp__pool_deque_pop_owner() and the acquire load of top in
     * mp__pool_deque_push_owner() (pool_internal.h). */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return MP__POOL_STEAL_RETRY;
    *out = job;
    return MP__POOL_STEAL_SUCCESS;
}

/* Any thread; a hint only, exact for the owner when no steal is in progress. */
bool mp__pool_deque_is_empty(mp__pool_deque *d)
{
    /* Relaxed: a hint; callers that act on "empty" re-check through the sleep protocol. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    return b - t <= 0;
}
