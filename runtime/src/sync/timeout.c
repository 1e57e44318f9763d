/* timeout.c: deadlines around any wait (magpie_core.h, "Deadlines"): mp_timeout_poll() for a
 * task, mp_wait_until() for a plain thread. Neither has a protocol of its own: each polls the
 * wait (which registers a waker under its primitive's lock), waits for that waker or the
 * deadline, and at the deadline calls the wait's cancel, which takes the waker back under the
 * same lock and settles the race with a wake that comes at the deadline: what the primitive
 * handed over is given back, or the cancel says the wait completed.
 *
 * The inner wait is polled first, so a wait that is ready wins over a deadline that passed at
 * the same moment; mp_wait_until() polls it once more after the deadline for the same reason
 * (its wake may have come just before). */
#include "internal.h"

mp_poll mp_timeout_poll(mp_timer *t, uint64_t deadline_ms, const mp_wait *w, mp_context *cx,
                        int *err)
{
    if (w->poll(w->arg, cx) == MP_READY) {
        mp_timer_cancel(t);
        *err = 0;
        return MP_READY;
    }
    if (mp_timer_poll(t, deadline_ms, cx) == MP_READY) {
        /* The timer is disarmed by its ready poll; the wait is withdrawn here. */
        *err = w->cancel(w->arg) ? 0 : -ETIMEDOUT;
        return MP_READY;
    }
    return MP_PENDING;
}

/* A plain thread's waker for mp_wait_until(): its futex word, as the blocking calls' (waker.c),
 * plus a count of the clones the primitives hold. The blocking calls need no count: they
 * return only once a wake has stored to their word, and a wake's store is its last write. A
 * timed wait returns without one, and then a wake already on its way writes into a frame that
 * is gone:
 *
 *   thread (mp_wait_until)                     sender
 *                                              lock; push value; take rx_waker; unlock
 *   deadline: cancel (finds no waker)
 *   return -ETIMEDOUT (or a last poll takes
 *   the value: return 0); frame reused
 *                                              wake(rx_waker): word = 1 -> a dead frame
 *
 * So every clone counts itself, a wake by value or a drop gives its count back as its last
 * touch (release), and the thread returns only once its own count is the last (acquire): an
 * in-flight wake is a few instructions away from ending. */
typedef struct counted_waiter {
    _Atomic uint32_t word;
    _Atomic uint32_t refs; /* the thread's own, and one per clone held elsewhere */
} counted_waiter;

static void counted_put(counted_waiter *cw)
{
    /* Release: our use of *cw ends before the thread sees the count fall (pairs with the
     * acquire load in mp_wait_until()). */
    atomic_fetch_sub_explicit(&cw->refs, 1, memory_order_release);
}

static void counted_wake_by_ref(const void *data)
{
    counted_waiter *cw = (counted_waiter *)data;
    /* Release: pairs with the acquire load of word in counted_sleep(). */
    atomic_store_explicit(&cw->word, 1, memory_order_release);
    mp__futex_wake(&cw->word, 1);
}

static void counted_wake(const void *data)
{
    counted_wake_by_ref(data);
    counted_put((counted_waiter *)data);
}

static const void *counted_clone(const void *data)
{
    /* Relaxed: a new reference made from one held, which keeps the count above zero. */
    atomic_fetch_add_explicit(&((counted_waiter *)data)->refs, 1, memory_order_relaxed);
    return data;
}

static void counted_drop(const void *data)
{
    counted_put((counted_waiter *)data);
}

static const mp_waker_vtable counted_vt = {
    .wake = counted_wake,
    .wake_by_ref = counted_wake_by_ref,
    .clone = counted_clone,
    .drop = counted_drop,
};

/* Sleep until a wake stored to the word or deadline_ms passed; consume the wake. */
static void counted_sleep(counted_waiter *cw, uint64_t deadline_ms)
{
    /* Acquire: pairs with the release store in counted_wake_by_ref(). */
    while (atomic_load_explicit(&cw->word, memory_order_acquire) == 0) {
        if (mp_now_ms() >= deadline_ms)
            return;
        mp__futex_wait_until(&cw->word, 0, deadline_ms);
    }
    atomic_store_explicit(&cw->word, 0, memory_order_relaxed);
}

/* Every path out leaves no clone of the thread's waker behind: a ready poll keeps none
 * (mp_wait's contract), a timed-out one is cancelled, and a clone taken out for a wake that is
 * still on its way is waited for. */
int mp_wait_until(const mp_wait *w, uint64_t deadline_ms)
{
    if (mp__tls_worker)
        return -EDEADLK;
    counted_waiter cw = {.word = 0, .refs = 1};
    mp_context cx = {.waker = {.vt = &counted_vt, .data = &cw}, .task = NULL, .yielded = false};
    int rc;
    for (;;) {
        if (w->poll(w->arg, &cx) == MP_READY) {
            rc = 0;
            break;
        }
        if (mp_now_ms() >= deadline_ms) {
            rc = w->cancel(w->arg) ? 0 : -ETIMEDOUT;
            break;
        }
        counted_sleep(&cw, deadline_ms); /* then poll again, whichever came */
    }
    /* Acquire: pairs with the release decrement in counted_put(). */
    while (atomic_load_explicit(&cw.refs, memory_order_acquire) != 1)
        sched_yield();
    return rc;
}
