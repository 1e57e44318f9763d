/* waitq.h: the FIFO list of mp_waiter nodes that the lock-based primitives (semaphore,
 * MPMC channel, barrier, watch, broadcast, cancellation token) keep under their spinlock.
 *
 * Every one of them follows the same rule against lost wake-ups: a waiter checks its
 * condition and queues itself (with a clone of its waker) under the primitive's lock, and
 * whoever changes the condition does so under the same lock and wakes the waiters it made
 * ready. So there is no gap between "the condition is false" and "I am queued" in which a
 * change could pass unseen:
 *
 *   waiter                          waker
 *   check: no permit
 *                                   release: avail++, nobody queued, no wake
 *   queue, return PENDING           -> the waiter sleeps with a permit free (lost wake-up)
 *
 * is impossible because "check" and "queue" are one critical section, and so is "release".
 * The lock's acquire/release (mp__spin_lock()) orders everything else.
 *
 * A waker that marks nodes ready (MP__W_DONE) wakes them by reference under the lock and
 * leaves the waker in the node: the node stays valid until its owner takes the lock and sees
 * the mark, and the owner drops the waker itself, outside the lock. So no waker's last
 * reference (a task's release callback, user code) is dropped under a primitive's lock.
 */
#ifndef MP_SYNC_WAITQ_H
#define MP_SYNC_WAITQ_H

#include "internal.h"

enum {
    MP__W_IDLE = 0, /* not queued: a fresh node, or one whose wait ended */
    MP__W_WAITING,  /* on the list, waker set */
    MP__W_DONE,     /* off the list, handed what it waited for; its owner has not seen it */
    MP__W_CLOSED,   /* off the list, the primitive closed under it */
};

/* Queue w at the back with a clone of waker. Under the lock. */
static inline void mp__waitq_push(mp_waiter **head, mp_waiter **tail, mp_waiter *w,
                                  const mp_waker *waker)
{
    MP__LIST_PUSH_BACK(*head, *tail, w, prev, next);
    w->state = MP__W_WAITING;
    w->waker = mp_waker_clone(waker);
}

static inline void mp__waitq_unlink(mp_waiter **head, mp_waiter **tail, mp_waiter *w)
{
    MP__LIST_UNLINK_TAIL(*head, *tail, w, prev, next);
    w->prev = w->next = NULL;
}

/* A queued node polled again, maybe by another waker: keep the newest. The one replaced goes
 * to *old, for the caller to drop after the lock. */
static inline void mp__waiter_update(mp_waiter *w, const mp_waker *waker, mp_waker *old)
{
    if (!mp_waker_will_wake(&w->waker, waker)) {
        *old = w->waker;
        w->waker = mp_waker_clone(waker);
    }
}

/* The node's wait is over (seen by its owner under the lock): idle again, its waker to *old. */
static inline void mp__waiter_finish(mp_waiter *w, mp_waker *old)
{
    *old = w->waker;
    w->waker = (mp_waker){0};
    w->state = MP__W_IDLE;
}

/* Unlink w and mark it `state`, waking it by reference (see the file comment). */
static inline void mp__waitq_ready(mp_waiter **head, mp_waiter **tail, mp_waiter *w, uint32_t state)
{
    mp__waitq_unlink(head, tail, w);
    w->state = state;
    mp_waker_wake_by_ref(&w->waker);
}

/* Every queued node ready with `state`. */
static inline void mp__waitq_ready_all(mp_waiter **head, mp_waiter **tail, uint32_t state)
{
    while (*head)
        mp__waitq_ready(head, tail, *head, state);
}

#endif
