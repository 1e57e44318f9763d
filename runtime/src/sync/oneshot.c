/* oneshot.c: one value from one sender to one receiver. The state word doubles as a tiny
 * spinlock (bit 0) over the value and the receiver's waker; the other bits record what
 * happened. The waker is taken out under the lock and woken or dropped after it, so no user
 * code (a waker's release callback) runs under the lock.
 */
#include "internal.h"

#define LOCKED    1u
#define SENT      2u
#define TX_CLOSED 4u
#define RX_CLOSED 8u

static uint32_t lock(mp_oneshot *o)
{
    for (unsigned spins = 0;; spins++) {
        uint32_t s = atomic_load_explicit(&o->state, memory_order_relaxed);
        /* Acquire: see what the previous holder wrote (pairs with the release in unlock()). */
        if (!(s & LOCKED) &&
            atomic_compare_exchange_weak_explicit(&o->state, &s, s | LOCKED, memory_order_acquire,
                                                  memory_order_relaxed))
            return s;
        if (spins >= 64)
            sched_yield();
    }
}

static void unlock(mp_oneshot *o, uint32_t s)
{
    /* Release: publishes value, waker and flags; pairs with the acquire in lock(). */
    atomic_store_explicit(&o->state, s & ~LOCKED, memory_order_release);
}

void mp_oneshot_init(mp_oneshot *o)
{
    atomic_init(&o->state, 0);
    o->value = NULL;
    o->rx_waker = (mp_waker){0};
}

int mp_oneshot_send(mp_oneshot *o, void *value)
{
    uint32_t s = lock(o);
    if (s & (RX_CLOSED | SENT | TX_CLOSED)) {
        unlock(o, s);
        return -EPIPE;
    }
    o->value = value;
    mp_waker w = o->rx_waker;
    o->rx_waker = (mp_waker){0};
    unlock(o, s | SENT);
    mp_waker_wake(&w);
    return 0;
}

mp_poll mp_oneshot_poll(mp_oneshot *o, mp_context *cx, void **value, int *err)
{
    mp_waker old = {0};
    uint32_t s = lock(o);
    mp_poll r = MP_READY;
    if (s & SENT) {
        *value = o->value;
        *err = 0;
        old = o->rx_waker;
        o->rx_waker = (mp_waker){0};
    } else if (s & TX_CLOSED) {
        *err = -EPIPE;
        old = o->rx_waker;
        o->rx_waker = (mp_waker){0};
    } else {
        if (!mp_waker_will_wake(&o->rx_waker, mp_context_waker(cx))) {
            old = o->rx_waker;
            o->rx_waker = mp_waker_clone(mp_context_waker(cx));
        }
        r = MP_PENDING;
    }
    unlock(o, s);
    mp_waker_drop(&old);
    return r;
}

int mp_oneshot_recv_blocking(mp_oneshot *o, void **value)
{
    mp__thread_waiter tw;
    mp_waker me = mp__thread_waiter_init(&tw);
    for (;;) {
        uint32_t s = lock(o);
        if (s & (SENT | TX_CLOSED)) {
            int rc = (s & SENT) ? 0 : -EPIPE;
            if (rc == 0)
                *value = o->value;
            if (mp_waker_will_wake(&o->rx_waker, &me))
                o->rx_waker = (mp_waker){0};
            unlock(o, s);
            return rc;
        }
        mp_waker old = o->rx_waker;
        o->rx_waker = me;
        unlock(o, s);
        mp_waker_drop(&old);
        mp__thread_waiter_wait(&tw);
    }
}

void mp_oneshot_close_tx(mp_oneshot *o)
{
    uint32_t s = lock(o);
    mp_waker w = o->rx_waker;
    o->rx_waker = (mp_waker){0};
    unlock(o, s | TX_CLOSED);
    mp_waker_wake(&w);
}

void mp_oneshot_cancel_recv(mp_oneshot *o)
{
    uint32_t s = lock(o);
    mp_waker w = o->rx_waker;
    o->rx_waker = (mp_waker){0};
    unlock(o, s);
    mp_waker_drop(&w);
}

void mp_oneshot_close_rx(mp_oneshot *o)
{
    uint32_t s = lock(o);
    mp_waker w = o->rx_waker;
    o->rx_waker = (mp_waker){0};
    unlock(o, s | RX_CLOSED);
    mp_waker_drop(&w);
}
