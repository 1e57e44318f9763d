/* park.c: a worker's sleep word, UNPARKED / PARKED / NOTIFIED, on a futex (and DRIVING,
 * while the worker sleeps in the libuv loop instead: see worker.c).
 *
 * An unpark that arrives before the park is not lost: it leaves NOTIFIED, and the next park
 * consumes it and returns at once.
 *
 *   worker (park)                         waker (unpark)
 *   CAS UNPARKED -> PARKED        (A)
 *                                         swap -> NOTIFIED, saw PARKED   (B)
 *   futex_wait(PARKED)  -> returns at once, the word is not PARKED any more
 *                                         futex_wake
 *
 * If (B) came first, (A) fails on NOTIFIED and the worker does not sleep. The futex itself
 * re-checks the word against PARKED inside the kernel, so a wake between the CAS and the wait
 * is not lost either. There is no timeout: a parked worker wakes only when someone unparks it
 * (an idle runtime makes no wake-ups at all).
 */
#include "internal.h"

bool mp__park_wait(mp__park *p)
{
    uint32_t expected = MP__UNPARKED;
    /* Acquire on failure: pairs with the release swap in mp__park_unpark() that set
     * NOTIFIED; we see what the waker published before it (its queue push). */
    if (!atomic_compare_exchange_strong_explicit(&p->state, &expected, MP__PARKED,
                                                 memory_order_acquire, memory_order_acquire)) {
        if (expected != MP__NOTIFIED)
            MP__UNREACHABLE("park word %u", expected);
        atomic_store_explicit(&p->state, MP__UNPARKED, memory_order_relaxed);
        return false;
    }
    for (;;) {
        mp__futex_wait(&p->state, MP__PARKED);
        /* Acquire: pairs with the release swap in mp__park_unpark(). */
        expected = MP__NOTIFIED;
        if (atomic_compare_exchange_strong_explicit(&p->state, &expected, MP__UNPARKED,
                                                    memory_order_acquire, memory_order_relaxed))
            return true;
        /* Spurious wake-up: still PARKED. */
    }
}

uint32_t mp__park_unpark(mp__park *p)
{
    /* Release: publishes what the waker did before (pairs with the acquires in
     * mp__park_wait() and in the driver's exchange in worker.c). */
    uint32_t prev = atomic_exchange_explicit(&p->state, MP__NOTIFIED, memory_order_release);
    if (prev == MP__PARKED)
        mp__futex_wake(&p->state, 1);
    return prev;
}
